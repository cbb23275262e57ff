/*
 * The otel tier: what `tokenbox inspect` dispatches is traced.  With
 * OpenTelemetry's variables set, `inspect redispatch` and `inspect
 * undelivered resend` record a send span per message (service
 * tokenbox-inspect), child of the span that wrote the message (the
 * writer kept in its stored context) in its stored trace, and the
 * produced copy carries that span's traceparent; `dead-letters replay` records
 * the replay's send span (service tokenbox-publisher) as the child of the dead
 * letter's.  Read back through a real Jaeger's query API.
 *
 * Needs TBX_JAEGER_OTLP (what `scripts/jaeger.sh start` prints); the
 * query API is TBX_JAEGER_QUERY, else the next port.
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_child.h"
#include "jaeger_query.h"
#include "consumer/tracing.h"
#include "outbox/outbox.h"
#include "support.h"

#define N 4

/* GETs @p url from Jaeger's query API: the parsed body, or NULL. */
static cJSON *get_json(const char *url)
{
	char *body = tt_jaeger_get(url, 30000);
	cJSON *doc = body ? cJSON_Parse(body) : NULL;

	free(body);
	return doc;
}

/* A span as Jaeger returns it: its operation, service and parent. */
typedef struct jspan {
	char op[128], service[128], parent[17];
	int found;
} jspan_t;

static int span_in(cJSON *doc, const char *span_id, jspan_t *out)
{
	cJSON *trace = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "data"), 0);
	cJSON *sp, *procs = cJSON_GetObjectItem(trace, "processes");

	cJSON_ArrayForEach(sp, cJSON_GetObjectItem(trace, "spans"))
	{
		cJSON *ref, *proc;
		const char *id =
		    cJSON_GetStringValue(cJSON_GetObjectItem(sp, "spanID"));

		if (!id || strcmp(id, span_id) != 0)
			continue;
		snprintf(out->op, sizeof(out->op), "%s",
			 cJSON_GetStringValue(
			     cJSON_GetObjectItem(sp, "operationName")));
		proc = cJSON_GetObjectItem(
		    procs,
		    cJSON_GetStringValue(cJSON_GetObjectItem(sp, "processID")));
		snprintf(out->service, sizeof(out->service), "%s",
			 cJSON_GetStringValue(
			     cJSON_GetObjectItem(proc, "serviceName")));
		out->parent[0] = '\0';
		cJSON_ArrayForEach(ref, cJSON_GetObjectItem(sp, "references"))
		{
			const char *t = cJSON_GetStringValue(
			    cJSON_GetObjectItem(ref, "refType"));
			if (t && strcmp(t, "CHILD_OF") == 0)
				snprintf(
				    out->parent, sizeof(out->parent), "%s",
				    cJSON_GetStringValue(
					cJSON_GetObjectItem(ref, "spanID")));
		}
		out->found = 1;
		return 1;
	}
	return 0;
}

/* Waits until Jaeger holds span @p span_id of trace @p trace_id (spans
 * arrive in batches: an outcome is awaited, not a time). */
static jspan_t jaeger_span(const char *trace_id, const char *span_id)
{
	char base[256], url[512];
	jspan_t s = {0};

	tt_jaeger_query_base(base, sizeof(base));
	snprintf(url, sizeof(url), "%s/api/traces/%s", base, trace_id);
	for (int i = 0; i < 600 * tt_time_factor(); i++) {
		cJSON *doc = get_json(url);
		int ok = doc && span_in(doc, span_id, &s);

		cJSON_Delete(doc);
		if (ok)
			return s;
		usleep(100000);
	}
	return s;
}

/* The traceparent of a record, split: trace id and span id in hex. */
static void ids_of(rd_kafka_headers_t *h, char trace[33], char span[17])
{
	const void *v;
	size_t len;

	cr_assert(h && !rd_kafka_header_get_last(h, "traceparent", &v, &len),
		  "a record without traceparent");
	cr_assert_eq(len, TBX_TRACEPARENT_LEN);
	snprintf(trace, 33, "%.32s", (const char *)v + 3);
	snprintf(span, 17, "%.16s", (const char *)v + 36);
}

/* What a stored message says of its trace. */
typedef struct stored {
	char id[TBX_UUID_LEN + 1]; /* tbx-id */
	char trace[33], span[17], parent[17];
} stored_t;

/* The stored context of a message's headers (@p b, @p len: the binary
 * tbx-tc, or a text traceparent and tbx-trace-parent), into @p out. */
static void stored_set(stored_t *out, const void *b, size_t len)
{
	tbx__stored_ctx_t sc;

	if (tbx__trace_stored(b, len, &sc, NULL, NULL) != 0)
		return;
	tbx__hex(sc.ctx.trace_id, TBX_TRACE_ID_SIZE, out->trace);
	tbx__hex(sc.ctx.span_id, TBX_SPAN_ID_SIZE, out->span);
	if (sc.has_writer && !tbx__id_is_zero(sc.writer, TBX_SPAN_ID_SIZE))
		tbx__hex(sc.writer, TBX_SPAN_ID_SIZE, out->parent);
}

/* The trace headers of every outgoing message of group @p grp's rows in
 * the SQLite store @p path. */
static size_t stored_of(const char *path, const char *grp, stored_t *out,
			size_t max)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	size_t n = 0;

	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
		     SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db,
					"SELECT msg_id, msgs FROM tbx_outbox "
					"WHERE grp = ?",
					-1, &st, NULL),
		     SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_bind_text(st, 1, grp, -1, SQLITE_STATIC);
	while (sqlite3_step(st) == SQLITE_ROW) {
		tbx__row_t row;

		tbx__row_init(&row);
		cr_assert_eq(tbx__row_msgs_decode(
				 sqlite3_column_blob(st, 1),
				 (size_t)sqlite3_column_bytes(st, 1),
				 (const char *)sqlite3_column_text(st, 0),
				 &row),
			     TBX_OK);
		for (size_t j = 0; j < row.msg_cnt && n < max; j++, n++) {
			const tbx__outmsg_t *m = &row.msgs[j];

			memset(&out[n], 0, sizeof(out[n]));
			snprintf(out[n].id, sizeof(out[n].id), "%s", m->id);
			stored_set(&out[n], m->headers, m->headers_len);
		}
		tbx__row_clear(&row);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

static const stored_t *stored_find(const stored_t *s, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++)
		if (id && strcmp(s[i].id, id) == 0)
			return &s[i];
	return NULL;
}

typedef struct env {
	char *dir, *s, *sd, *t;
	tt_cluster_t *c;
} env_t;

static void env_init(env_t *e)
{
	char *otlp = getenv("TBX_JAEGER_OTLP");

	cr_assert(otlp, "TBX_JAEGER_OTLP is not set");
	signal(SIGPIPE, SIG_IGN);
	/* inspect's children and the workers here read them. */
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp, 1);
	setenv("OTEL_BSP_SCHEDULE_DELAY", "200", 1);
	/* http/json here, while the demo and kill tests export with the
	 * default, http/protobuf: both encodings go from real workers and
	 * inspect to Jaeger. */
	setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", 1);
	e->dir = tt_tmpdir();
	e->s = tt_path(e->dir, "s.db");
	e->sd = tt_path(e->dir, "sd.db");
	e->t = tt_path(e->dir, "tokens.db");
	e->c = tt_cluster_new(1);
	tt_cluster_topic(e->c, "in", 1);
	tt_cluster_topic(e->c, "out", 1);
	tt_cluster_topic(e->c, "in.dlq", 1);
	tt_tokens_init(e->t);
}

static void env_fini(env_t *e)
{
	tt_cluster_destroy(e->c);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->s);
	free(e->sd);
	free(e->t);
}

static cc_result_t inspect(const env_t *e, const char *const *cmd)
{
	const char *argv[32] = {"inspect", "-s", e->s, "-S", e->t};
	size_t n = 5;

	for (size_t i = 0; cmd[i] && n < 31; i++)
		argv[n++] = cmd[i];
	argv[n] = NULL;
	return cc_run(argv);
}

#define INSPECT(e, ...) inspect((e), (const char *const[]){__VA_ARGS__, NULL})

/* Every record of "out" was sent by inspect: a send span of
 * tokenbox-inspect in the message's stored trace, child of the stored
 * parent, with an id of its own, which the record carries. */
static void assert_inspect_sent(const env_t *e, const stored_t *st, size_t n,
				size_t want)
{
	tt_record_t *recs;
	size_t cnt = tt_read_topic(e->c->bootstraps, "out", &recs);

	cr_assert_eq(cnt, want);
	for (size_t i = 0; i < cnt; i++) {
		char trace[33], span[17];
		const stored_t *s = stored_find(st, n, recs[i].id);
		jspan_t j;

		cr_assert(s, "record %s was not stored", recs[i].id);
		cr_assert(*s->parent, "stored without its writer's span");
		ids_of(recs[i].headers, trace, span);
		cr_expect_str_eq(trace, s->trace, "not the stored trace");
		cr_expect_str_neq(span, s->span,
				  "the stored context reused: a span id "
				  "recorded once per dispatch is not unique");
		j = jaeger_span(trace, span);
		cr_assert(j.found, "span %s of trace %s is not in Jaeger", span,
			  trace);
		cr_expect_str_eq(j.op, "send out");
		cr_expect_str_eq(j.service, "tokenbox-inspect");
		cr_expect_str_eq(j.parent, s->parent,
				 "not the child of the span that wrote it");
	}
	tt_records_free(recs, cnt);
}

Test(otel_inspect, redispatch_records_a_send_span_per_message, .timeout = 400)
{
	env_t e;
	char prog[4096], endpoint[1200];
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	stored_t st[64];
	size_t n;
	cc_result_t res;
	int status;

	env_init(&e);
	tt_subscribe(e.t, "in", "g");
	tt_subscribe(e.t, "out", "d");
	tt_hop_table(e.s, "hop1");
	tt_publish(e.c->bootstraps, e.t, "in", "Ping", N, 2, "m");
	/* g (tracing on) is killed after minting: its rows stay. */
	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	snprintf(endpoint, sizeof(endpoint), "otel.exporter.otlp.endpoint=%s",
		 getenv("TBX_JAEGER_OTLP"));
	char *argv[] = {prog, e.c->bootstraps, e.s, e.t, "g", endpoint, NULL};
	char *envv[] = {"TBX_CRASH_AT=B.minted", NULL};
	status = tt_wait(tt_spawn(argv, envv), 90);
	cr_assert(status != -1 && WIFSIGNALED(status) &&
		      WTERMSIG(status) == SIGKILL,
		  "g was not killed at B.minted (%d)", status);
	n = stored_of(e.s, "g", st, 64);
	cr_assert_gt(n, 0, "no row left by the crash");

	res = INSPECT(&e, "redispatch", "--group", "g", "--older-than", "0s",
		      "-b", e.c->bootstraps);
	cr_assert(cc_exited(res.status, 0), "status %d: %s%s", res.status,
		  res.out, res.err);
	cc_result_free(&res);
	assert_inspect_sent(&e, st, n, n);
	env_fini(&e);
}

#define BIG 6000

/* Replies to "out" with a message too large for the worker's producer. */
static tbx_verdict_t big_reply(tbx_ctx_t *ctx, const tbx_msg_t *msg,
			       void *opaque)
{
	char *big = malloc(BIG);
	tbx_out_t out = {
	    .topic = "out", .type = "Pong", .payload = big, .payload_len = BIG};
	int ok;

	(void)msg, (void)opaque;
	cr_assert(big);
	memset(big, 'b', BIG);
	ok = tbx_ctx_send(ctx, &out) == TBX_OK;
	free(big);
	return ok ? TBX_VERDICT_OK : TBX_VERDICT_RETRY;
}

static int undelivered_kept(void *opaque)
{
	const env_t *e = opaque;

	return tt_count(e->s, "SELECT COUNT(*) FROM tbx_undelivered") == 1 &&
	       tt_count(e->s, "SELECT COUNT(*) FROM tbx_outbox") == 0;
}

Test(otel_inspect, undelivered_resend_records_a_send_span, .timeout = 400)
{
	env_t e;
	char err[256], id[24];
	tbx_worker_t *w;
	stored_t st[1];
	cc_result_t res;
	sqlite3 *db;
	sqlite3_stmt *q;

	env_init(&e);
	tt_subscribe(e.t, "out", "d");
	w = tbx_worker_new(tt_conf(e.c->bootstraps, "g", e.s, e.t,
				   "kafka.producer.message.max.bytes", "4096",
				   "dispatch.retry.max", "1", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", big_reply, NULL),
		     TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(e.c->bootstraps, e.t, "in", "Ping", 1, 1, "m");
	cr_assert(tt_drive(&w, 1, undelivered_kept, &e, 5, 90));
	tbx_worker_destroy(w);

	/* The line's stored headers, as the outbox row held them. */
	cr_assert_eq(sqlite3_open_v2(e.s, &db, SQLITE_OPEN_READONLY, NULL),
		     SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db,
					"SELECT id, out_id, headers FROM "
					"tbx_undelivered",
					-1, &q, NULL),
		     SQLITE_OK, "%s", sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
	snprintf(id, sizeof(id), "%lld", (long long)sqlite3_column_int64(q, 0));
	memset(st, 0, sizeof(st));
	snprintf(st[0].id, sizeof(st[0].id), "%s",
		 (const char *)sqlite3_column_text(q, 1));
	{
		const void *b = sqlite3_column_blob(q, 2);
		size_t len = (size_t)sqlite3_column_bytes(q, 2);

		stored_set(&st[0], b, len);
	}
	sqlite3_finalize(q);
	sqlite3_close(db);

	res = INSPECT(&e, "undelivered", "resend", id, "--group", "g", "-b",
		      e.c->bootstraps);
	cr_assert(cc_exited(res.status, 0), "status %d: %s%s", res.status,
		  res.out, res.err);
	cc_result_free(&res);
	assert_inspect_sent(&e, st, 1, 1);
	env_fini(&e);
}

static int dead_lettered(void *opaque)
{
	const env_t *e = opaque;

	return tt_count(e->s, "SELECT COUNT(*) FROM tbx_dead_letters") == 1 &&
	       tt_count(e->s, "SELECT COUNT(*) FROM tbx_outbox") == 0;
}

Test(otel_inspect, replay_records_a_send_span_under_the_dead_letters,
     .timeout = 400)
{
	env_t e;
	char err[256], dl_trace[33], dl_span[17], trace[33], span[17];
	tt_hop_t hop = {.table = "hop1", .reject = "m-0"};
	tbx_worker_t *w;
	tt_record_t *recs;
	size_t cnt;
	cc_result_t res;
	jspan_t j;

	env_init(&e);
	tt_subscribe(e.t, "in", "g");
	tt_hop_table(e.s, "hop1");
	w = tbx_worker_new(tt_conf(e.c->bootstraps, "g", e.s, e.t, NULL), err,
			   sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop),
		     TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(e.c->bootstraps, e.t, "in", "Ping", 1, 1, "m");
	cr_assert(tt_drive(&w, 1, dead_lettered, &e, 5, 90));
	tbx_worker_destroy(w);
	cnt = tt_read_topic(e.c->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 1);
	ids_of(recs[0].headers, dl_trace, dl_span);
	tt_records_free(recs, cnt);
	/* The dead letter's own send span, recorded by g. */
	j = jaeger_span(dl_trace, dl_span);
	cr_assert(j.found, "the dead letter's send span is not in Jaeger");
	cr_expect_str_eq(j.op, "send in.dlq");

	res = INSPECT(&e, "dead-letters", "replay", "-b", e.c->bootstraps, "-t",
		      "in.dlq");
	cr_assert(cc_exited(res.status, 0), "status %d: %s%s", res.status,
		  res.out, res.err);
	cc_result_free(&res);
	cnt = tt_read_topic(e.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 2, "the original and its replay");
	ids_of(recs[1].headers, trace, span);
	tt_records_free(recs, cnt);
	cr_expect_str_eq(trace, dl_trace, "the replay left the trace");
	j = jaeger_span(trace, span);
	cr_assert(j.found, "the replay's send span is not in Jaeger");
	cr_expect_str_eq(j.op, "send in");
	cr_expect_str_eq(j.service, "tokenbox-publisher");
	cr_expect_str_eq(j.parent, dl_span,
			 "not the child of the dead letter's send span");
	env_fini(&e);
}
