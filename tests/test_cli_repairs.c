/*
 * Every repair of `tokenbox inspect` with several consumer groups on one
 * topic and one dead-letter topic: g1 and g2 both consume "in" (and send
 * to "out", consumed by d) and dead-letter to "in.dlq".  A repair run for
 * one group acts on that group's records only, each once: its effect
 * happens exactly once in that group and nothing happens in the other.
 *
 * The same executable runs in the pg tier (TBX_PG_TIER=1), every store a
 * schema; `inspect` then gets the server's URL and --schema.
 */
#include <signal.h>

#include <cjson/cJSON.h>

#include "cli_child.h"
#include "consumer/worker.h"
#include "support.h"

#define N 6 /* records of the crash cases */

typedef struct env {
	char *dir;
	char *s1, *s2; /* the service stores of g1 and g2 (may be one) */
	char *sd;      /* d's */
	char *t;       /* the token store */
	tt_cluster_t *c;
} env_t;

static void env_init(env_t *e, int shared)
{
	e->dir = tt_tmpdir();
	e->s1 = tt_store_new(e->dir, "s1");
	e->s2 = shared ? strdup(e->s1) : tt_store_new(e->dir, "s2");
	e->sd = tt_store_new(e->dir, "sd");
	e->t = tt_tokens_new(e->dir, "tokens", 0);
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
	free(e->s1);
	free(e->s2);
	free(e->sd);
	free(e->t);
}

/* Runs `tokenbox inspect` on service store @p s and the token store with
 * the command @p cmd (NULL-terminated): paths, or in the pg tier the
 * server's URL and the schemas. */
static cc_result_t inspect(const env_t *e, const char *s,
			   const char *const *cmd)
{
	static char url[2][2200];
	const char *argv[64] = {"inspect"};
	size_t n = 1;

	if (tt_store_is_pg(s)) {
		argv[n++] = "-s";
		argv[n++] = tt_store_url(s, url[0], sizeof(url[0]));
		argv[n++] = "--schema";
		argv[n++] = tt_store_schema(s);
		argv[n++] = "-S";
		argv[n++] = tt_store_url(e->t, url[1], sizeof(url[1]));
		argv[n++] = "--tokens-schema";
		argv[n++] = tt_store_schema(e->t);
	} else {
		argv[n++] = "-s";
		argv[n++] = s;
		argv[n++] = "-S";
		argv[n++] = e->t;
	}
	for (size_t i = 0; cmd[i] && n < 63; i++)
		argv[n++] = cmd[i];
	argv[n] = NULL;
	return cc_run(argv);
}

#define INSPECT(e, s, ...)                                                     \
	inspect((e), (s), (const char *const[]){__VA_ARGS__, NULL})

/* A worker of @p grp on "in" (type Ping) with @p hop; more "key",
 * "value" settings may follow in @p k1, @p v1. */
static tbx_worker_t *worker(const env_t *e, const char *grp, const char *s,
			    const char *topic, const char *type,
			    tbx_handler_fn fn, void *opaque, const char *k1,
			    const char *v1)
{
	char err[256];
	tbx_worker_t *w =
	    tbx_worker_new(tt_conf(e->c->bootstraps, grp, s, e->t,
				   "kafka.producer.message.max.bytes", "4096",
				   "dispatch.retry.max", "1", k1, v1, NULL),
			   err, sizeof(err));

	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, topic, type, fn, opaque), TBX_OK);
	/* One worker per group: its partitions at once, no join to wait
	 * for (the repairs do not depend on how they came). */
	tbx__worker_assign_directly(w);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK); /* assigns */
	return w;
}

/* A tt_drive() condition: every count equals its number (db NULL ends). */
typedef struct want {
	const char *db, *sql;
	int64_t n;
} want_t;

static int all_reached(void *opaque)
{
	const want_t *w = opaque;

	for (; w->db; w++)
		if (tt_count(w->db, w->sql) != w->n)
			return 0;
	return 1;
}

static int64_t count_in(const env_t *e, const char *topic, const char *hdr)
{
	tt_record_t *recs;
	size_t cnt = tt_read_topic(e->c->bootstraps, topic, &recs);
	int64_t n = 0;

	for (size_t i = 0; i < cnt; i++) {
		const void *v;
		size_t len;

		if (!hdr ||
		    !rd_kafka_header_get_last(recs[i].headers, hdr, &v, &len))
			n++;
	}
	tt_records_free(recs, cnt);
	return n;
}

/* tt_count() of @p sql_grp, which ends in "grp = ", for @p grp. */
static int64_t count_grp(const char *db, const char *sql_grp, const char *grp)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "%s'%s'", sql_grp, grp);
	return tt_count(db, sql);
}

/*
 * dead-letters replay and show
 */

/* A hop whose rejections give the group's own reason: each group's dead
 * letter of a record says something else.  With @c big, every record
 * over 1000 bytes is rejected too (before the hop sees it). */
typedef struct picky {
	tt_hop_t hop;
	const char *why;
	int big;
} picky_t;

static tbx_verdict_t picky_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				  void *opaque)
{
	picky_t *p = opaque;
	size_t len;
	tbx_verdict_t v;

	tbx_msg_payload(msg, &len);
	v = p->big && len > 1000 ? TBX_VERDICT_REJECT
				 : tt_hop_handle(ctx, msg, &p->hop);
	if (v == TBX_VERDICT_REJECT)
		tbx_ctx_set_error(ctx, p->why);
	return v;
}

/* The value of header @p name of @p rec, "" when absent, in @p buf. */
static const char *header_of(const tt_record_t *rec, const char *name,
			     char *buf, size_t size)
{
	const void *v;
	size_t len;

	buf[0] = '\0';
	if (!rd_kafka_header_get_last(rec->headers, name, &v, &len) && v)
		snprintf(buf, size, "%.*s", (int)len, (const char *)v);
	return buf;
}

/* `dead-letters show` of @p grp's dead letter in @p s (its only one) with
 * the record read from in.dlq. */
static cc_result_t show(const env_t *e, const char *s, const char *grp)
{
	char id[24];

	snprintf(id, sizeof(id), "%lld",
		 (long long)count_grp(s,
				      "SELECT MIN(id) FROM tbx_dead_letters "
				      "WHERE grp = ",
				      grp));
	return INSPECT(e, s, "dead-letters", "show", id, "--group", grp, "-b",
		       e->c->bootstraps, "-t", "in.dlq");
}

static cc_result_t replay(const env_t *e, const char *s, const char *grp)
{
	return INSPECT(e, s, "dead-letters", "replay", "-b", e->c->bootstraps,
		       "-t", "in.dlq", "--group", grp);
}

static void assert_prefix(const cc_result_t *res, int status, const char *out)
{
	cr_assert(cc_exited(res->status, status), "status %d: %s%s",
		  res->status, res->out, res->err);
	cr_assert(strncmp(res->out, out, strlen(out)) == 0,
		  "expected '%s...', got '%s'", out, res->out);
}

/* `status` of @p s counts @p replayed of @p grp's dead letters as
 * replayed: its JSON's group and total (the groups' sum), and its text's
 * header and the group's line of the dead-letter table. */
static void assert_replayed(const env_t *e, const char *s, const char *grp,
			    int64_t replayed)
{
	cc_result_t res = INSPECT(e, s, "status", "--json");
	cJSON *doc, *dl, *g;
	int64_t sum = 0, mine = -1, total, pending;
	long long rec, pend, rep;
	const char *at;
	char head[160], row[80];

	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert((doc = cJSON_Parse(res.out)), "%s", res.out);
	dl = cJSON_GetObjectItem(doc, "dead_letters");
	cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(dl, "replayed")), "%s",
		  res.out);
	cJSON_ArrayForEach(g, cJSON_GetObjectItem(dl, "groups"))
	{
		cJSON *n = cJSON_GetObjectItem(g, "replayed");

		cr_assert(cJSON_IsNumber(n), "%s", res.out);
		sum += (int64_t)n->valuedouble;
		if (strcmp(
			cJSON_GetStringValue(cJSON_GetObjectItem(g, "group")),
			grp) == 0)
			mine = (int64_t)n->valuedouble;
	}
	cr_assert_eq(mine, replayed, "%s: %s", grp, res.out);
	cr_assert_eq((int64_t)cJSON_GetObjectItem(dl, "replayed")->valuedouble,
		     sum, "%s", res.out);
	total = (int64_t)cJSON_GetObjectItem(dl, "recorded")->valuedouble;
	pending = (int64_t)cJSON_GetObjectItem(dl, "pending")->valuedouble;
	cJSON_Delete(doc);
	cc_result_free(&res);

	res = INSPECT(e, s, "status");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	snprintf(head, sizeof(head),
		 "\nDead letters: %lld recorded (%lld not yet dispatched, "
		 "%lld replayed)\n",
		 (long long)total, (long long)pending, (long long)sum);
	cr_assert((at = strstr(res.out, head)), "want '%s': %s", head + 1,
		  res.out);
	snprintf(row, sizeof(row), "\n  %s ", grp);
	cr_assert((at = strstr(at + 1, row)), "no line of %s: %s", grp,
		  res.out);
	cr_assert_eq(
	    sscanf(at + strlen(row), "%lld %lld %lld", &rec, &pend, &rep), 3,
	    "%s", res.out);
	cr_assert_eq(rep, (long long)replayed, "%s: %s", grp, res.out);
	cc_result_free(&res);
}

/* g1 and g2 both dead-letter m-1 to in.dlq, each with its own reason;
 * each shows and replays its own. */
static void replay_case(int shared)
{
	env_t e;
	picky_t p1 = {{.table = "hop1", .reject = "m-1"}, "g1 says no", 0};
	picky_t p2 = {{.table = "hop2", .reject = "m-1"}, "g2 says no", 0};
	tbx_worker_t *w[2];
	cc_result_t res;
	tt_record_t *recs;
	size_t cnt;
	char grp[64], why[64];
	int seen[2] = {0, 0};

	env_init(&e, shared);
	tt_hop_table(e.s1, "hop1");
	tt_hop_table(e.s2, "hop2");
	w[0] =
	    worker(&e, "g1", e.s1, "in", "Ping", picky_handle, &p1, NULL, NULL);
	w[1] =
	    worker(&e, "g2", e.s2, "in", "Ping", picky_handle, &p2, NULL, NULL);
	tt_publish(e.c->bootstraps, e.t, "in", "Ping", 2, 1, "m");
	want_t dead[] = {
	    {e.s1, "SELECT COUNT(*) FROM hop1", 1},
	    {e.s2, "SELECT COUNT(*) FROM hop2", 1},
	    {e.s1, "SELECT COUNT(*) FROM tbx_dead_letters WHERE grp = 'g1'", 1},
	    {e.s2, "SELECT COUNT(*) FROM tbx_dead_letters WHERE grp = 'g2'", 1},
	    {e.s1, "SELECT COUNT(*) FROM tbx_outbox", 0},
	    {e.s2, "SELECT COUNT(*) FROM tbx_outbox", 0},
	    {NULL, NULL, 0}};
	cr_assert(tt_drive(w, 2, all_reached, dead, 5, 90));
	cr_assert_eq(count_in(&e, "in.dlq", NULL), 2,
		     "one dead letter of m-1 per group");
	/* Each names the group that sent it, with that group's reason. */
	cnt = tt_read_topic(e.c->bootstraps, "in.dlq", &recs);
	for (size_t i = 0; i < cnt; i++) {
		header_of(&recs[i], "tbx-dlq-group", grp, sizeof(grp));
		header_of(&recs[i], "tbx-dlq-error", why, sizeof(why));
		cr_assert(strcmp(grp, "g1") == 0 || strcmp(grp, "g2") == 0,
			  "tbx-dlq-group '%s'", grp);
		cr_assert(strncmp(why, grp, 2) == 0,
			  "%s's dead letter says '%s'", grp, why);
		seen[grp[1] - '1']++;
	}
	tt_records_free(recs, cnt);
	cr_assert(seen[0] == 1 && seen[1] == 1, "one dead letter per group");

	/* show prints each group's own dead letter, never the other's. */
	res = show(&e, e.s1, "g1");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert(strstr(res.out, "\"g1 says no\""), "%s", res.out);
	cr_assert(!strstr(res.out, "\"g2 says no\""), "%s", res.out);
	cc_result_free(&res);
	res = show(&e, e.s2, "g2");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert(strstr(res.out, "\"g2 says no\""), "%s", res.out);
	cr_assert(!strstr(res.out, "\"g1 says no\""), "%s", res.out);
	cc_result_free(&res);

	/* Sent, and none replayed yet. */
	assert_replayed(&e, e.s1, "g1", 0);
	assert_replayed(&e, e.s2, "g2", 0);

	/* g1's handler is fixed: g1's own dead letter goes back, once;
	 * g2's is another group's. */
	p1.hop.reject = NULL;
	res = replay(&e, e.s1, "g1");
	assert_prefix(&res, 0,
		      "replayed 1 dead letters of g1 from in.dlq, 1 records "
		      "of other groups skipped\n");
	cr_assert_eq(cc_lines(res.out), 1, "%s", res.out);
	cc_result_free(&res);
	/* status counts it, and g2's stays not replayed. */
	assert_replayed(&e, e.s1, "g1", 1);
	assert_replayed(&e, e.s2, "g2", 0);
	want_t g1_done[] = {{e.s1, "SELECT COUNT(*) FROM hop1", 2},
			    {e.s1, "SELECT COUNT(*) FROM tbx_outbox", 0},
			    {e.s2, "SELECT COUNT(*) FROM tbx_outbox", 0},
			    {NULL, NULL, 0}};
	cr_assert(tt_drive(w, 2, all_reached, g1_done, 10, 90));
	/* Again: nothing new. */
	res = replay(&e, e.s1, "g1");
	assert_prefix(&res, 0,
		      "replayed 0 dead letters of g1 from in.dlq, 1 "
		      "replayed before (not sent again)");
	cc_result_free(&res);
	cr_assert(tt_drive(w, 2, all_reached, g1_done, 10, 90));
	cr_assert_eq(count_in(&e, "in", "tbx-replay-of"), 1, "one replay");
	cr_assert_eq(
	    tt_count(e.s1, "SELECT COUNT(*) FROM hop1 WHERE payload = 'm-1'"),
	    1, "g1 applied its dead letter once");
	cr_assert_eq(tt_count(e.s2, "SELECT COUNT(*) FROM hop2"), 1,
		     "nothing happened in g2");
	cr_assert_eq(tt_count(e.s2, "SELECT COUNT(*) FROM tbx_dead_letters "
				    "WHERE grp = 'g2'"),
		     1, "g2 did not see the replay as a record of its own");

	/* g2's turn: its own dead letter, once, and not g1's again. */
	p2.hop.reject = NULL;
	res = replay(&e, e.s2, "g2");
	assert_prefix(&res, 0, "replayed 1 dead letters of g2 from in.dlq");
	cc_result_free(&res);
	want_t g2_done[] = {{e.s2, "SELECT COUNT(*) FROM hop2", 2},
			    {e.s1, "SELECT COUNT(*) FROM hop1", 2},
			    {e.s1, "SELECT COUNT(*) FROM tbx_outbox", 0},
			    {e.s2, "SELECT COUNT(*) FROM tbx_outbox", 0},
			    {NULL, NULL, 0}};
	cr_assert(tt_drive(w, 2, all_reached, g2_done, 10, 90));
	res = replay(&e, e.s2, "g2");
	assert_prefix(&res, 0,
		      "replayed 0 dead letters of g2 from in.dlq, 1 "
		      "replayed before (not sent again)");
	cc_result_free(&res);
	assert_replayed(&e, e.s1, "g1", 1);
	assert_replayed(&e, e.s2, "g2", 1);
	cr_assert(tt_drive(w, 2, all_reached, g2_done, 10, 90));
	cr_assert_eq(count_in(&e, "in", "tbx-replay-of"), 2,
		     "one replay per group");
	cr_assert_eq(
	    tt_count(e.s2, "SELECT COUNT(*) FROM hop2 WHERE payload = 'm-1'"),
	    1, "g2 applied its dead letter once");
	cr_assert_eq(
	    tt_count(e.s1, "SELECT COUNT(*) FROM hop1 WHERE payload = 'm-1'"),
	    1, "g1 did not apply g2's replay");
	cr_assert_eq(tt_count(e.t, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	env_fini(&e);
}

Test(cli_repairs, replay_acts_on_its_groups_dead_letters_once, .timeout = 300)
{
	replay_case(0);
}

Test(cli_repairs, replay_acts_once_when_the_groups_share_a_store,
     .timeout = 300)
{
	replay_case(1);
}

/*
 * A dead letter g1 recorded that in.dlq does not hold: records too large
 * for g1's producer once dead-lettered (message.max.bytes 4096), so g1's
 * dead letters are given up and kept in tbx_undelivered, while g2's
 * producer takes them and in.dlq holds g2's.  g1's replay takes none of
 * g2's, and names each of its own as missing, bounded.
 */

#define REPLAY_NAMED 10 /* missing dead letters named one per line */
#define BIG_CNT	     (REPLAY_NAMED + 2)

/* Publishes @p cnt records of 5000 bytes with tokens to "in". */
static void publish_big(const env_t *e, int cnt)
{
	tbx_publisher_t *pub = tt_publisher(e->c->bootstraps, e->t, "warning");
	char payload[5000];
	size_t failed;

	for (int i = 0; i < cnt; i++) {
		memset(payload, 'x', sizeof(payload));
		snprintf(payload, 16, "big-%d:", i);
		payload[strlen(payload)] = 'x';
		tbx_out_t out = {.topic = "in",
				 .type = "Ping",
				 .key = "key-0",
				 .key_len = 5,
				 .payload = payload,
				 .payload_len = sizeof(payload)};
		cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	}
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	tbx_publisher_destroy(pub);
}

static size_t occurrences(const char *text, const char *what)
{
	size_t n = 0;

	for (const char *at = text; (at = strstr(at, what)); at++)
		n++;
	return n;
}

Test(cli_repairs, replay_names_the_dead_letters_missing_from_the_topic,
     .timeout = 300)
{
	env_t e;
	picky_t p1 = {{.table = "hop1"}, "g1 says no", 1};
	picky_t p2 = {{.table = "hop2"}, "g2 says no", 1};
	tbx_worker_t *w[2];
	cc_result_t res;
	char line[128];

	env_init(&e, 0);
	tt_hop_table(e.s1, "hop1");
	tt_hop_table(e.s2, "hop2");
	w[0] =
	    worker(&e, "g1", e.s1, "in", "Ping", picky_handle, &p1, NULL, NULL);
	w[1] = worker(&e, "g2", e.s2, "in", "Ping", picky_handle, &p2,
		      "kafka.producer.message.max.bytes", "1000000");
	publish_big(&e, BIG_CNT);
	want_t dead[] = {
	    {e.s1, "SELECT COUNT(*) FROM tbx_dead_letters WHERE grp = 'g1'",
	     BIG_CNT},
	    {e.s1, "SELECT COUNT(*) FROM tbx_undelivered WHERE grp = 'g1'",
	     BIG_CNT},
	    {e.s2, "SELECT COUNT(*) FROM tbx_dead_letters WHERE grp = 'g2'",
	     BIG_CNT},
	    {e.s1, "SELECT COUNT(*) FROM tbx_outbox", 0},
	    {e.s2, "SELECT COUNT(*) FROM tbx_outbox", 0},
	    {NULL, NULL, 0}};
	cr_assert(tt_drive(w, 2, all_reached, dead, 5, 120));
	cr_assert_eq(count_in(&e, "in.dlq", NULL), BIG_CNT, "g2's only");

	/* g1's replay: nothing of g2's; each of its own named as missing,
	 * the first REPLAY_NAMED one per line. */
	p1.big = 0;
	res = replay(&e, e.s1, "g1");
	cr_assert(cc_exited(res.status, 3), "status %d: %s%s", res.status,
		  res.out, res.err);
	snprintf(line, sizeof(line),
		 "replayed 0 dead letters of g1 from in.dlq, %d records of "
		 "other groups skipped, %d recorded dead letters not found in "
		 "in.dlq\n",
		 BIG_CNT, BIG_CNT);
	cr_assert_str_eq(res.out, line);
	cr_assert_eq(occurrences(res.err, "warning: dead-letters replay: dead "
					  "letter "),
		     REPLAY_NAMED, "%s", res.err);
	cr_assert_eq(occurrences(res.err, "only other groups' dead letters of "
					  "that record are there"),
		     REPLAY_NAMED, "%s", res.err);
	snprintf(line, sizeof(line),
		 "and %d more dead letters of g1 not in "
		 "in.dlq",
		 BIG_CNT - REPLAY_NAMED);
	cr_assert(strstr(res.err, line), "%s", res.err);
	snprintf(line, sizeof(line), "%d dead letters of g1 not replayed",
		 BIG_CNT);
	cr_assert(strstr(res.err, line), "%s", res.err);
	cc_result_free(&res);
	cr_assert_eq(count_in(&e, "in", "tbx-replay-of"), 0, "nothing sent");

	/* show does not pass g2's dead letter off as g1's. */
	res = show(&e, e.s1, "g1");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert(strstr(res.out, "(no record of it in in.dlq; other groups' "
				  "dead letters of the same record: 1)"),
		  "%s", res.out);
	cr_assert(!strstr(res.out, "g2 says no"), "%s", res.out);
	cc_result_free(&res);

	/* A dead letter without tbx-dlq-group (an older tokenbox's) may be
	 * any group's: with no copy of its own, g1 takes it as before.
	 * Here it is g2's dead letter of g1's first record, sent again
	 * without the header. */
	int64_t first = tt_count(e.s1, "SELECT in_offset FROM tbx_dead_letters "
				       "WHERE grp = 'g1' ORDER BY id LIMIT 1");
	char off[24], at[24];
	tt_record_t *recs;
	size_t cnt = tt_read_topic(e.c->bootstraps, "in.dlq", &recs), k;

	snprintf(at, sizeof(at), "%lld", (long long)first);
	for (k = 0; k < cnt; k++)
		if (strcmp(
			header_of(&recs[k], "tbx-dlq-offset", off, sizeof(off)),
			at) == 0)
			break;
	cr_assert_lt(k, cnt, "g2's dead letter of in [0] @%s", at);
	rd_kafka_header_remove(recs[k].headers, "tbx-dlq-group");
	tt_reproduce(e.c->bootstraps, "in.dlq", &recs[k], 1);
	tt_records_free(recs, cnt);
	res = show(&e, e.s1, "g1");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert(strstr(res.out, "\"g2 says no\""), "%s", res.out);
	cr_assert(strstr(res.out, "(no tbx-dlq-group: written by a tokenbox "
				  "older than it"),
		  "%s", res.out);
	cc_result_free(&res);
	res = replay(&e, e.s1, "g1");
	cr_assert(cc_exited(res.status, 3), "status %d: %s%s", res.status,
		  res.out, res.err);
	snprintf(line, sizeof(line),
		 "replayed 1 dead letters of g1 from in.dlq, %d records of "
		 "other groups skipped, %d recorded dead letters not found in "
		 "in.dlq\n",
		 BIG_CNT, BIG_CNT - 1);
	cr_assert_str_eq(res.out, line);
	cc_result_free(&res);
	cr_assert_eq(count_in(&e, "in", "tbx-replay-of"), 1);

	/* g2's are all there: its replay is complete. */
	res = replay(&e, e.s2, "g2");
	snprintf(line, sizeof(line),
		 "replayed %d dead letters of g2 from in.dlq, 1 more copies "
		 "of them skipped",
		 BIG_CNT);
	assert_prefix(&res, 0, line);
	cc_result_free(&res);
	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	env_fini(&e);
}

/*
 * redispatch and cleanup: g1 and g2 share a service store; both were
 * killed right after minting (B.minted), their rows and attempts left.
 */

static void crash(const env_t *e, const char *s, const char *grp)
{
	char prog[4096];
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	int status;

	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	char *argv[] = {prog, e->c->bootstraps, (char *)s,
			e->t, (char *)grp,	NULL};
	/* One worker of the group at a time: its partitions assigned at
	 * once, no group to join. */
	char *envv[] = {"TBX_CRASH_AT=B.minted", "TBX_TEST_ASSIGN=1", NULL};
	status = tt_wait(tt_spawn(argv, envv), 90);
	cr_assert(status != -1 && WIFSIGNALED(status) &&
		      WTERMSIG(status) == SIGKILL,
		  "%s was not killed at B.minted (%d)", grp, status);
}

#define ROWS   "SELECT COUNT(*) FROM tbx_outbox WHERE grp = "
#define TOKENS "SELECT COUNT(*) FROM tbx_tokens WHERE grp = "
#define REGS   "SELECT COUNT(*) FROM tbx_registrations WHERE send_grp = "

/* What the stores hold of one group. */
typedef struct held {
	int64_t rows, tokens, regs;
} held_t;

static held_t held(const env_t *e, const char *s, const char *grp)
{
	return (held_t){count_grp(s, ROWS, grp), count_grp(e->t, TOKENS, grp),
			count_grp(e->t, REGS, grp)};
}

static void assert_held(held_t now, held_t was, const char *what)
{
	cr_assert(now.rows == was.rows && now.tokens == was.tokens &&
		      now.regs == was.regs,
		  "%s: g2's rows %lld -> %lld, tokens %lld -> %lld, "
		  "registrations %lld -> %lld",
		  what, (long long)was.rows, (long long)now.rows,
		  (long long)was.tokens, (long long)now.tokens,
		  (long long)was.regs, (long long)now.regs);
}

/* Both groups resume and d takes everything: each group's effect and
 * each outgoing message once. */
static void finish_all(const env_t *e)
{
	tt_hop_t hop1 = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	tt_hop_t hop2 = hop1;
	tt_hop_t hopd = {.table = "hopd"};
	tbx_worker_t *w[3];

	tt_hop_table(e->sd, "hopd");
	w[0] = worker(e, "g1", e->s1, "in", "Ping", tt_hop_handle, &hop1, NULL,
		      NULL);
	w[1] = worker(e, "g2", e->s2, "in", "Ping", tt_hop_handle, &hop2, NULL,
		      NULL);
	w[2] = worker(e, "d", e->sd, "out", "Pong", tt_hop_handle, &hopd, NULL,
		      NULL);
	want_t done[] = {
	    {e->s1, "SELECT COUNT(*) FROM tbx_outbox", 0},
	    {e->sd, "SELECT COUNT(DISTINCT msg_id) FROM hopd", 2 * N},
	    {e->sd, "SELECT COUNT(*) FROM tbx_outbox", 0},
	    {e->t, "SELECT COUNT(*) FROM tbx_tokens", 0},
	    {NULL, NULL, 0}};
	cr_assert(tt_drive(w, 3, all_reached, done, 20, 120),
		  "the groups did not finish");
	/* Both groups write hop1 of the shared store. */
	cr_assert_eq(tt_count(e->s1, "SELECT COUNT(*) FROM hop1"), 2 * N);
	cr_assert_eq(
	    tt_count(e->s1, "SELECT COUNT(DISTINCT payload) FROM hop1"), N);
	cr_assert_eq(tt_count(e->sd, "SELECT COUNT(*) FROM hopd"), 2 * N,
		     "an outgoing message took effect twice downstream");
	for (int i = 0; i < 3; i++)
		tbx_worker_destroy(w[i]);
}

static void crashed_pair(env_t *e)
{
	env_init(e, 1);
	tt_subscribe(e->t, "in", "g1");
	tt_subscribe(e->t, "in", "g2");
	tt_subscribe(e->t, "out", "d");
	tt_hop_table(e->s1, "hop1");
	tt_publish(e->c->bootstraps, e->t, "in", "Ping", N, 2, "m");
	crash(e, e->s1, "g1");
	crash(e, e->s2, "g2");
	cr_assert_gt(count_grp(e->s1, ROWS, "g1"), 0);
	cr_assert_gt(count_grp(e->s2, ROWS, "g2"), 0);
	cr_assert_gt(count_grp(e->t, REGS, "g2"), 0);
}

Test(cli_repairs, redispatch_of_one_group_leaves_the_other_alone,
     .timeout = 400)
{
	env_t e;
	cc_result_t res;
	held_t g2;
	int64_t g1_rows;

	crashed_pair(&e);
	g2 = held(&e, e.s2, "g2");
	g1_rows = count_grp(e.s1, ROWS, "g1");
	res = INSPECT(&e, e.s1, "redispatch", "--group", "g1", "--older-than",
		      "0s", "-b", e.c->bootstraps);
	cr_assert(cc_exited(res.status, 0), "status %d: %s%s", res.status,
		  res.out, res.err);
	cc_result_free(&res);
	cr_assert_eq(count_grp(e.s1, ROWS, "g1"), 0, "g1's rows finished");
	assert_held(held(&e, e.s2, "g2"), g2, "redispatch --group g1");
	cr_assert_eq(count_in(&e, "out", NULL), g1_rows,
		     "g1's messages only, once each: %lld of %lld",
		     (long long)count_in(&e, "out", NULL), (long long)g1_rows);
	/* Again: nothing of g1 is left, and g2 is still not touched. */
	res = INSPECT(&e, e.s1, "redispatch", "--group", "g1", "--older-than",
		      "0s", "-b", e.c->bootstraps);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	assert_held(held(&e, e.s2, "g2"), g2, "a second redispatch");
	cr_assert_eq(count_in(&e, "out", NULL), g1_rows);
	finish_all(&e);
	env_fini(&e);
}

Test(cli_repairs, cleanup_of_one_group_leaves_the_other_alone, .timeout = 400)
{
	env_t e;
	cc_result_t res;
	held_t g2;

	crashed_pair(&e);
	res = INSPECT(&e, e.s1, "redispatch", "--group", "g1", "--older-than",
		      "0s", "-b", e.c->bootstraps);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	cr_assert_gt(count_grp(e.t, REGS, "g1"), 0, "g1's crashed attempts");
	g2 = held(&e, e.s2, "g2");
	int64_t d_tokens = count_grp(e.t, TOKENS, "d");

	/* g1's crashed attempts are orphans now; g2's are in flight. */
	res = INSPECT(&e, e.s1, "cleanup", "--group", "g1");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	cr_assert_eq(count_grp(e.t, REGS, "g1"), 0, "g1's orphans swept");
	assert_held(held(&e, e.s2, "g2"), g2, "cleanup --group g1");
	/* d's tokens: g1's orphans' went, g2's attempts' stay. */
	cr_assert_lt(count_grp(e.t, TOKENS, "d"), d_tokens);
	int64_t d_after = count_grp(e.t, TOKENS, "d");

	/* Without --group, both groups of the store are judged: g2's
	 * attempts are in flight and stay. */
	res = INSPECT(&e, e.s1, "cleanup");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	assert_held(held(&e, e.s2, "g2"), g2, "cleanup");
	cr_assert_eq(count_grp(e.t, TOKENS, "d"), d_after);
	finish_all(&e);
	env_fini(&e);
}

/*
 * undelivered resend: g1 and g2 (one store) each reply to "out" with a
 * message too large for their producers and for the dead-letter topic.
 */

#define BIG 6000

static tbx_verdict_t big_reply(tbx_ctx_t *ctx, const tbx_msg_t *msg,
			       void *opaque)
{
	char *big = malloc(BIG);
	tbx_out_t out = {
	    .topic = "out", .type = "Pong", .payload = big, .payload_len = BIG};
	int n;

	(void)msg;
	cr_assert(big);
	memset(big, 'b', BIG);
	n = snprintf(big, 16, "%s:", (const char *)opaque);
	big[n] = 'b';
	n = tbx_ctx_send(ctx, &out) == TBX_OK;
	free(big);
	return n ? TBX_VERDICT_OK : TBX_VERDICT_RETRY;
}

static int64_t line_of(const env_t *e, const char *grp)
{
	return count_grp(
	    e->s1, "SELECT MAX(id) FROM tbx_undelivered WHERE grp = ", grp);
}

static cc_result_t resend(const env_t *e, int64_t line, const char *grp)
{
	char id[24];

	snprintf(id, sizeof(id), "%lld", (long long)line);
	return INSPECT(e, e->s1, "undelivered", "resend", id, "--group", grp,
		       "-b", e->c->bootstraps);
}

Test(cli_repairs, undelivered_resend_sends_one_groups_line_once, .timeout = 300)
{
	env_t e;
	tbx_worker_t *w[2];
	cc_result_t res;
	tt_hop_t hopd = {.table = "hopd"};
	int64_t l1, l2;

	env_init(&e, 1);
	tt_subscribe(e.t, "out", "d");
	w[0] =
	    worker(&e, "g1", e.s1, "in", "Ping", big_reply, "g1", NULL, NULL);
	w[1] =
	    worker(&e, "g2", e.s2, "in", "Ping", big_reply, "g2", NULL, NULL);
	tt_publish(e.c->bootstraps, e.t, "in", "Ping", 1, 1, "m");
	want_t kept[] = {
	    {e.s1, "SELECT COUNT(*) FROM tbx_undelivered WHERE grp = 'g1'", 1},
	    {e.s1, "SELECT COUNT(*) FROM tbx_undelivered WHERE grp = 'g2'", 1},
	    {e.s1, "SELECT COUNT(*) FROM tbx_outbox", 0},
	    {NULL, NULL, 0}};
	cr_assert(tt_drive(w, 2, all_reached, kept, 10, 90));
	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	cr_assert_eq(count_in(&e, "out", NULL), 0);
	cr_assert_eq(count_in(&e, "in.dlq", NULL), 0);
	cr_assert_eq(count_grp(e.t, TOKENS, "d"), 2, "a token per reply");
	l1 = line_of(&e, "g1");
	l2 = line_of(&e, "g2");

	/* g2's line is not g1's to resend. */
	res = resend(&e, l2, "g1");
	cr_assert(cc_exited(res.status, 1), "status %d: %s%s", res.status,
		  res.out, res.err);
	cc_result_free(&res);
	cr_assert_eq(count_in(&e, "out", NULL), 0, "nothing sent");
	/* g1's, once; its line goes, g2's stays. */
	res = resend(&e, l1, "g1");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	res = resend(&e, l1, "g1");
	cr_assert(cc_exited(res.status, 1), "a second resend: %s", res.err);
	cc_result_free(&res);
	cr_assert_eq(count_in(&e, "out", NULL), 1);
	cr_assert_eq(count_grp(e.s1,
			       "SELECT COUNT(*) FROM tbx_undelivered WHERE "
			       "grp = ",
			       "g2"),
		     1, "g2's line is kept");

	tt_hop_table(e.sd, "hopd");
	w[0] = worker(&e, "d", e.sd, "out", "Pong", tt_hop_handle, &hopd, NULL,
		      NULL);
	want_t one[] = {
	    {e.sd, "SELECT COUNT(*) FROM hopd", 1},
	    {e.t, "SELECT COUNT(*) FROM tbx_tokens WHERE grp = 'd'", 1},
	    {NULL, NULL, 0}};
	cr_assert(tt_drive(w, 1, all_reached, one, 10, 90));
	cr_assert_eq(
	    tt_count(e.sd,
		     "SELECT COUNT(*) FROM hopd WHERE payload LIKE 'g1:%'"),
	    1, "g1's reply took effect");

	/* Then g2's: once, though its record is sent twice. */
	res = resend(&e, l2, "g2");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	tt_record_t *recs;
	size_t cnt = tt_read_topic(e.c->bootstraps, "out", &recs);
	cr_assert_eq(cnt, 2);
	tt_reproduce(e.c->bootstraps, "out", recs, cnt);
	tt_records_free(recs, cnt);
	want_t two[] = {{e.sd, "SELECT COUNT(*) FROM hopd", 2},
			{e.t, "SELECT COUNT(*) FROM tbx_tokens", 0},
			{e.sd, "SELECT COUNT(*) FROM tbx_outbox", 0},
			{NULL, NULL, 0}};
	cr_assert(tt_drive(w, 1, all_reached, two, 20, 90));
	cr_assert_eq(
	    tt_count(e.sd,
		     "SELECT COUNT(*) FROM hopd WHERE payload LIKE 'g2:%'"),
	    1, "g2's reply took effect once");
	cr_assert_eq(
	    tt_count(e.sd,
		     "SELECT COUNT(*) FROM hopd WHERE payload LIKE 'g1:%'"),
	    1, "g1's reply took effect once");
	tbx_worker_destroy(w[0]);
	env_fini(&e);
}

/*
 * unsubscribe: g1 retires from "in"; g2 goes on.
 */

Test(cli_repairs, unsubscribe_of_one_group_leaves_the_other_alone,
     .timeout = 300)
{
	env_t e;
	cc_result_t res;
	tbx_worker_t *w;
	tt_hop_t hop1 = {.table = "hop1"}, hop2 = {.table = "hop2"};

	env_init(&e, 0);
	/* g1 ran once (its store exists), then stopped for good. */
	tt_hop_table(e.s1, "hop1");
	w = worker(&e, "g1", e.s1, "in", "Ping", tt_hop_handle, &hop1, NULL,
		   NULL);
	tbx_worker_destroy(w);
	tt_subscribe(e.t, "in", "g2");
	tt_subscribe(e.t, "in.dlq", "archiver");
	tt_publish(e.c->bootstraps, e.t, "in", "Ping", 3, 1, "m");
	cr_assert_eq(count_grp(e.t, TOKENS, "g1"), 3);
	cr_assert_eq(count_grp(e.t, TOKENS, "g2"), 3);

	res = INSPECT(&e, e.s1, "unsubscribe", "--group", "g1", "--topic", "in",
		      "--idle-after", "0s", "--yes");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert(strstr(res.out, "removed 3 token row(s) of g1"), "%s",
		  res.out);
	cc_result_free(&res);
	cr_assert_eq(count_grp(e.t, TOKENS, "g1"), 0);
	cr_assert_eq(count_grp(e.t, TOKENS, "g2"), 3, "g2's tokens stay");
	cr_assert_eq(tt_count(e.t, "SELECT COUNT(*) FROM tbx_subscriptions "
				   "WHERE grp = 'g2' AND topic = 'in'"),
		     1);
	cr_assert_eq(tt_count(e.t, "SELECT COUNT(*) FROM tbx_subscriptions "
				   "WHERE grp = 'archiver'"),
		     1);
	/* Again: g1 has no subscription left (exit 1), g2 keeps its own. */
	res = INSPECT(&e, e.s1, "unsubscribe", "--group", "g1", "--topic", "in",
		      "--idle-after", "0s", "--yes");
	cr_assert(cc_exited(res.status, 1), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	cr_assert_eq(count_grp(e.t, TOKENS, "g2"), 3);

	/* g2 handles every record once, those sent before and after. */
	tt_hop_table(e.s2, "hop2");
	w = worker(&e, "g2", e.s2, "in", "Ping", tt_hop_handle, &hop2, NULL,
		   NULL);
	tt_publish(e.c->bootstraps, e.t, "in", "Ping", 2, 1, "n");
	cr_assert_eq(count_grp(e.t, TOKENS, "g1"), 0, "no token for g1");
	want_t done[] = {{e.s2, "SELECT COUNT(*) FROM hop2", 5},
			 {e.t, "SELECT COUNT(*) FROM tbx_tokens", 0},
			 {NULL, NULL, 0}};
	cr_assert(tt_drive(&w, 1, all_reached, done, 10, 90));
	cr_assert_eq(tt_count(e.s2, "SELECT COUNT(DISTINCT payload) FROM hop2"),
		     5);
	tbx_worker_destroy(w);
	env_fini(&e);
}
