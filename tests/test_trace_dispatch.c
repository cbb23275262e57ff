/*
 * Send spans at dispatch (consumer/producer.c, consumer/tracing.c): a
 * message dispatched twice — a retried delivery, an outbox row resumed
 * after a crash, `inspect redispatch` — is two send spans with ids of
 * their own, never one span id recorded twice, and each produced copy
 * carries its own send span's traceparent, so that the next hop's process
 * span is the child of the dispatch that produced its copy.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "consumer/producer.h"
#include "consumer/recover.h"
#include "consumer/tracing.h"
#include "consumer/worker.h"
#include "fixture.h"
#include "outbox/outbox.h"
#include "support.h"
#include "tokens/tokens.h"

#define MAX_SPANS 32

typedef struct sink {
	tbx__span_t *spans[MAX_SPANS];
	size_t cnt;
} sink_t;

static void on_span(tbx__span_t *span, void *opaque)
{
	sink_t *s = opaque;

	cr_assert_lt(s->cnt, MAX_SPANS);
	s->spans[s->cnt++] = span;
}

static const char *hdr_of(rd_kafka_headers_t *h, const char *name, char *buf,
			  size_t size)
{
	const void *v;
	size_t len;

	if (!h || rd_kafka_header_get_last(h, name, &v, &len))
		return NULL;
	snprintf(buf, size, "%.*s", (int)len, (const char *)v);
	return buf;
}

/* A row of one outgoing message to "out" whose stored headers were
 * written as a worker with tracing on writes them: the traceparent of
 * the context reserved for it, child of the record's process span. */
static void traced_row(tbx__tracer_t *t, tbx__row_t *row,
		       tbx__msg_trace_t *process)
{
	void *blob;
	size_t len;

	tbx__trace_begin(t, process, NULL);
	cr_assert(process->ctx.flags & TBX_TRACE_FLAG_SAMPLED);
	cr_assert_eq(tbx__trace_out(t, process, NULL, 0, &blob, &len), TBX_OK);
	tbx__row_init(row);
	snprintf(row->msg_id, sizeof(row->msg_id), "in-1");
	cr_assert_eq(
	    tbx__row_add(row, "out", "Pong", "k", 1, "v", 1, blob, len),
	    TBX_OK);
	free(blob);
}

Test(trace_dispatch, a_message_dispatched_twice_is_two_send_spans,
     .timeout = 120)
{
	tt_cluster_t *c = tt_cluster_new(1);
	char *dir = tt_tmpdir(), err[512], buf[128], proc[17], id[17];
	char *s = tt_path(dir, "s.db"), *tk = tt_path(dir, "t.db");
	tbx_conf_t *conf;
	rd_kafka_t *producer;
	sink_t sink = {0};
	tbx__tracer_t *t, *prev;
	tbx__msg_trace_t process;
	tbx__row_t row, *rows[1] = {&row};
	tt_record_t *recs;
	size_t n;
	int delivered = 0;

	tt_cluster_topic(c, "out", 1);
	conf = tt_conf(c->bootstraps, "g", s, tk, NULL);
	cr_assert((producer = tbx__producer_new(conf, err, sizeof(err))), "%s",
		  err);
	cr_assert((t = tbx__tracer_new_sink("g", on_span, &sink)));
	traced_row(t, &row, &process);

	/* Dispatched, then dispatched again as a resumed row is. */
	prev = tbx__tracer_dispatch_swap(t);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(tbx__dispatch(producer, NULL, rows, 1, &delivered,
					   NULL, NULL, err, sizeof(err), NULL),
			     TBX_OK, "%s", err);
		cr_assert(delivered);
	}
	tbx__tracer_dispatch_swap(prev);

	cr_assert_eq(sink.cnt, 2, "one send span per dispatch");
	tbx__hex(process.ctx.span_id, TBX_SPAN_ID_SIZE, proc);
	for (size_t i = 0; i < 2; i++) {
		tbx__span_t *sp = sink.spans[i];
		cr_expect_str_eq(sp->name, "send out");
		cr_expect_eq(sp->kind, TBX_SPAN_KIND_PRODUCER);
		cr_expect_eq(memcmp(sp->trace_id, process.ctx.trace_id,
				    TBX_TRACE_ID_SIZE),
			     0, "in the record's trace");
		cr_expect_eq(memcmp(sp->parent_id, process.ctx.span_id,
				    TBX_SPAN_ID_SIZE),
			     0, "child of the process span that wrote it");
	}
	cr_assert_neq(memcmp(sink.spans[0]->span_id, sink.spans[1]->span_id,
			     TBX_SPAN_ID_SIZE),
		      0, "one span id recorded twice");

	/* Each copy carries its own dispatch's span as parent-to-be. */
	n = tt_read_topic(c->bootstraps, "out", &recs);
	cr_assert_eq(n, 2);
	for (size_t i = 0; i < n; i++) {
		cr_assert(
		    hdr_of(recs[i].headers, "traceparent", buf, sizeof(buf)));
		tbx__hex(sink.spans[i]->span_id, TBX_SPAN_ID_SIZE, id);
		cr_expect_eq(strlen(buf), TBX_TRACEPARENT_LEN);
		cr_expect_eq(strncmp(buf + 36, id, 16), 0,
			     "copy %zu carries %s, its send span is %s", i, buf,
			     id);
		cr_expect_null(hdr_of(recs[i].headers, TBX_TRACE_PARENT_HDR,
				      buf, sizeof(buf)),
			       "the internal header left the process");
	}
	tt_records_free(recs, n);

	for (size_t i = 0; i < sink.cnt; i++)
		tbx__span_free(sink.spans[i]);
	free(process.tracestate);
	tbx__row_clear(&row);
	tbx__tracer_free(t, 0);
	rd_kafka_destroy(producer);
	tbx_conf_destroy(conf);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(s);
	free(tk);
}

Test(trace_dispatch, an_unsampled_message_leaves_as_it_was_stored,
     .timeout = 120)
{
	tt_cluster_t *c = tt_cluster_new(1);
	char *dir = tt_tmpdir(), err[512], buf[128];
	char *s = tt_path(dir, "s.db"), *tk = tt_path(dir, "t.db");
	const char *tp =
	    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
	tbx_header_t h[] = {{"traceparent", tp, 55}};
	tbx_conf_t *conf;
	rd_kafka_t *producer;
	sink_t sink = {0};
	tbx__tracer_t *t, *prev;
	tbx__row_t row, *rows[1] = {&row};
	tt_record_t *recs;
	void *blob;
	size_t len, n;
	int delivered = 0;

	tt_cluster_topic(c, "out", 1);
	conf = tt_conf(c->bootstraps, "g", s, tk, NULL);
	cr_assert((producer = tbx__producer_new(conf, err, sizeof(err))), "%s",
		  err);
	cr_assert((t = tbx__tracer_new_sink("g", on_span, &sink)));
	cr_assert_eq(tbx__hdrs_encode(h, 1, &blob, &len), TBX_OK);
	tbx__row_init(&row);
	snprintf(row.msg_id, sizeof(row.msg_id), "in-1");
	cr_assert_eq(
	    tbx__row_add(&row, "out", "Pong", NULL, 0, "v", 1, blob, len),
	    TBX_OK);
	free(blob);
	prev = tbx__tracer_dispatch_swap(t);
	cr_assert_eq(tbx__dispatch(producer, NULL, rows, 1, &delivered, NULL,
				   NULL, err, sizeof(err), NULL),
		     TBX_OK, "%s", err);
	tbx__tracer_dispatch_swap(prev);
	cr_expect_eq(sink.cnt, 0, "an unsampled parent: no span");
	n = tt_read_topic(c->bootstraps, "out", &recs);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(
	    hdr_of(recs[0].headers, "traceparent", buf, sizeof(buf)), tp);
	tt_records_free(recs, n);
	tbx__row_clear(&row);
	tbx__tracer_free(t, 0);
	rd_kafka_destroy(producer);
	tbx_conf_destroy(conf);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(s);
	free(tk);
}

/* Every record's handler sends one message to "nowhere", a topic the
 * broker refuses for good: the message is given up and dead-lettered. */
static tbx_verdict_t to_nowhere(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				void *opaque)
{
	tbx_out_t out = {.topic = "nowhere", .type = "Reply"};
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);

	(void)opaque;
	out.payload = payload;
	out.payload_len = len;
	return tbx_ctx_send(ctx, &out) == TBX_OK ? TBX_VERDICT_OK
						 : TBX_VERDICT_RETRY;
}

typedef struct given_up {
	tbx_worker_t *w;
	const char *store;
} given_up_t;

/* A tt_drive() condition: a message was given up and its row finished. */
static int given_up(void *opaque)
{
	given_up_t *g = opaque;
	tbx_stats_t st;

	tbx_worker_stats(g->w, &st);
	return st.undeliverable >= 1 &&
	       tt_count(g->store, "SELECT COUNT(*) FROM tbx_outbox") == 0;
}

static const tbx__span_t *span_named(const sink_t *s, const char *name)
{
	for (size_t i = 0; i < s->cnt; i++)
		if (strcmp(s->spans[i]->name, name) == 0)
			return s->spans[i];
	return NULL;
}

/* A dead letter made after a message's delivery was given up is a
 * dispatch like any other: a send span of its own, in the record's
 * trace, the child of the process span that wrote the message (a
 * sibling of the failed sends), and the dead letter carries it. */
Test(trace_dispatch, a_given_up_messages_dead_letter_is_a_send_span,
     .timeout = 240)
{
	static const char *const topics[] = {"in:1", "in.dlq:1", NULL};
	const char *payloads[] = {"lost"};
	char err[512], buf[128], id[17];
	sink_t sink = {0};
	tt_env_t e;
	tt_record_t *recs;
	tbx_worker_t *w;
	const tbx__span_t *process, *failed, *dead;
	size_t n;

	tt_env_init(&e, topics);
	if (!e.cluster->mock) {
		tt_env_fini(&e);
		cr_skip("needs the mock cluster (a topic that fails for good)");
	}
	rd_kafka_mock_topic_set_error(e.cluster->mock, "nowhere",
				      RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
	w = tbx_worker_new(
	    tt_conf(e.cluster->bootstraps, "g", e.store, e.tokens,
		    "dispatch.retry.max", "0",
		    "kafka.producer.topic.metadata.propagation.max.ms", "1000",
		    NULL),
	    err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", NULL, to_nowhere, NULL),
		     TBX_OK);
	cr_assert_eq(tbx__worker_trace_to(w, on_span, &sink), TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_env_publish(&e, "in", "Ask", payloads, 1);
	given_up_t g = {w, e.store};
	cr_assert(tt_drive(&w, 1, given_up, &g, 5, 120),
		  "the message was never given up");
	tbx_worker_destroy(w);

	process = span_named(&sink, "process in");
	failed = span_named(&sink, "send nowhere");
	dead = span_named(&sink, "send in.dlq");
	cr_assert_not_null(process);
	cr_assert_not_null(failed, "the failed dispatch's span");
	cr_expect_eq(failed->status, TBX_SPAN_STATUS_ERROR);
	cr_assert_not_null(dead, "no send span for the dead letter (%zu spans)",
			   sink.cnt);
	cr_expect_eq(dead->kind, TBX_SPAN_KIND_PRODUCER);
	cr_expect_eq(dead->status, TBX_SPAN_STATUS_UNSET);
	cr_expect_eq(
	    memcmp(dead->trace_id, process->trace_id, TBX_TRACE_ID_SIZE), 0,
	    "in the record's trace");
	cr_expect_eq(
	    memcmp(dead->parent_id, process->span_id, TBX_SPAN_ID_SIZE), 0,
	    "the child of the process span that wrote the message");
	cr_expect_neq(memcmp(dead->span_id, failed->span_id, TBX_SPAN_ID_SIZE),
		      0, "a span id of its own");

	n = tt_read_topic(e.cluster->bootstraps, "in.dlq", &recs);
	cr_assert_eq(n, 1);
	cr_assert(hdr_of(recs[0].headers, "traceparent", buf, sizeof(buf)));
	tbx__hex(dead->span_id, TBX_SPAN_ID_SIZE, id);
	cr_expect_eq(strncmp(buf + 36, id, 16), 0,
		     "the dead letter carries %s, its send span is %s", buf,
		     id);
	cr_expect_null(
	    hdr_of(recs[0].headers, TBX_TRACE_PARENT_HDR, buf, sizeof(buf)),
	    "the internal header left the process");
	tt_records_free(recs, n);
	for (size_t i = 0; i < sink.cnt; i++)
		tbx__span_free(sink.spans[i]);
	tt_env_fini(&e);
}

static const char *attr_of(const tbx__span_t *sp, const char *key, char *buf,
			   size_t size)
{
	for (size_t i = 0; i < sp->attrs.n; i++) {
		const tbx__attr_t *a = &sp->attrs.v[i];
		if (strcmp(a->key, key) != 0)
			continue;
		if (a->type == TBX_ATTR_STRING)
			snprintf(buf, size, "%.*s", (int)a->len, a->v.s);
		else
			snprintf(buf, size, "%lld", (long long)a->v.i);
		return buf;
	}
	return NULL;
}

/* Rows finished outside a worker's batch — by `inspect redispatch`
 * (tbx__recover_older(), the code of the recovery pass too) — make a
 * batch span of their own: the phases B–E that ran, where it came from,
 * and a link to the span that wrote each sampled row. */
Test(trace_dispatch, rows_finished_by_redispatch_make_a_batch_span,
     .timeout = 120)
{
	tt_cluster_t *c = tt_cluster_new(1);
	char *dir = tt_tmpdir(), err[512], buf[128];
	char *s = tt_path(dir, "s.db");
	tbx_conf_t *conf;
	tbx_outbox_t *store;
	tbx_tokens_t *tokens;
	tbx__recover_t *rec;
	sink_t sink = {0};
	tbx__tracer_t *t;
	tbx__msg_trace_t process;
	tbx__row_t row;
	const tbx__span_t *batch = NULL;
	size_t done = 0;

	tt_cluster_topic(c, "out", 1);
	cr_assert_eq(tbx_outbox_open(s, NULL, &store, err, sizeof(err)), TBX_OK,
		     "%s", err);
	cr_assert_eq(tbx_tokens_sqlite_open(s, NULL, tbx_outbox_db(store),
					    &tokens, err, sizeof(err)),
		     TBX_OK, "%s", err);
	/* A row written by a worker that traced its record, then left (a
	 * worker killed after A, say). */
	cr_assert((t = tbx__tracer_new_sink("g", on_span, &sink)));
	traced_row(t, &row, &process);
	snprintf(row.in_topic, sizeof(row.in_topic), "in");
	row.created_ms = 1;
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, "g", &row), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx__row_clear(&row);
	tbx__tracer_free(t, 0);

	conf = tt_conf(c->bootstraps, "g", s, s, NULL);
	rec = tbx__recover_new(conf, "g", store, tokens, err, sizeof(err));
	cr_assert_not_null(rec, "%s", err);
	cr_assert_eq(tbx__recover_trace_to(rec, on_span, &sink), TBX_OK);
	cr_assert_eq(tbx__recover_older(rec, INT64_MAX, 10, &done), TBX_OK,
		     "%s", tbx__recover_errstr(rec));
	cr_assert_eq(done, 1);
	tbx__recover_destroy(rec);

	for (size_t i = 0; i < sink.cnt; i++)
		if (strcmp(sink.spans[i]->name, "process batch") == 0)
			batch = sink.spans[i];
	cr_assert_not_null(span_named(&sink, "send out"));
	cr_assert_not_null(batch,
			   "no batch span for the redispatched rows "
			   "(%zu spans)",
			   sink.cnt);
	cr_expect_eq(batch->kind, TBX_SPAN_KIND_CONSUMER);
	cr_expect(tbx__id_is_zero(batch->parent_id, TBX_SPAN_ID_SIZE),
		  "a root");
	cr_expect_str_eq(
	    attr_of(batch, "tokenbox.batch.origin", buf, sizeof(buf)),
	    "redispatch");
	cr_expect_str_eq(
	    attr_of(batch, "messaging.batch.message_count", buf, sizeof(buf)),
	    "1");
	for (const char *const *k =
		 (const char *const[]){"tokenbox.phase.b.duration_ns",
				       "tokenbox.phase.c.duration_ns",
				       "tokenbox.phase.d.duration_ns",
				       "tokenbox.phase.e.duration_ns", NULL};
	     *k; k++)
		cr_expect_not_null(attr_of(batch, *k, buf, sizeof(buf)), "%s",
				   *k);
	cr_expect_null(
	    attr_of(batch, "tokenbox.phase.a.duration_ns", buf, sizeof(buf)),
	    "A did not run");
	cr_assert_eq(batch->n_links, 1);
	cr_expect_eq(memcmp(batch->links[0]->trace_id, process.ctx.trace_id,
			    TBX_TRACE_ID_SIZE),
		     0, "linked to the record's trace");
	cr_expect_eq(memcmp(batch->links[0]->span_id, process.ctx.span_id,
			    TBX_SPAN_ID_SIZE),
		     0, "linked to the span that wrote the row");

	for (size_t i = 0; i < sink.cnt; i++)
		tbx__span_free(sink.spans[i]);
	free(process.tracestate);
	tbx_tokens_close(tokens);
	tbx_outbox_close(store);
	tbx_conf_destroy(conf);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(s);
}

static tbx_verdict_t reply(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque)
{
	tbx_out_t out = {.topic = "out", .type = "Reply"};

	(void)opaque;
	out.payload = tbx_msg_payload(msg, &out.payload_len);
	return tbx_ctx_send(ctx, &out) == TBX_OK ? TBX_VERDICT_OK
						 : TBX_VERDICT_RETRY;
}

/* A tt_drive() condition: the worker @p opaque handled two records. */
static int two_handled(void *opaque)
{
	tbx_stats_t st;

	tbx_worker_stats(opaque, &st);
	return st.processed >= 2;
}

typedef struct recovered {
	const sink_t *sink;
	const char *store;
} recovered_t;

/* A tt_drive() condition: the outbox is empty and a batch span of the
 * recovery pass was recorded. */
static int recovered(void *opaque)
{
	recovered_t *r = opaque;
	char buf[64];
	const char *origin;

	if (tt_count(r->store, "SELECT COUNT(*) FROM tbx_outbox") != 0)
		return 0;
	for (size_t i = 0; i < r->sink->cnt; i++)
		if (strcmp(r->sink->spans[i]->name, "process batch") == 0 &&
		    (origin =
			 attr_of(r->sink->spans[i], "tokenbox.batch.origin",
				 buf, sizeof(buf))) &&
		    strcmp(origin, "recovery") == 0)
			return 1;
	return 0;
}

/* The worker's recovery pass finishes a row whose record lies below the
 * committed offset: its batch span is recorded, linked to the span that
 * wrote the row. */
Test(trace_dispatch, rows_finished_by_the_recovery_pass_make_a_batch_span,
     .timeout = 240)
{
	static const char *const topics[] = {"in:1", "out:1", NULL};
	const char *payloads[] = {"a", "b"};
	char err[512];
	sink_t sink = {0}, writer = {0};
	tt_env_t e;
	tbx_worker_t *w;
	tbx_outbox_t *store;
	tbx__tracer_t *t;
	tbx__msg_trace_t process;
	tbx__row_t row;
	const tbx__span_t *batch = NULL;
	char buf[64];

	tt_env_init(&e, topics);
	w = tbx_worker_new(tt_conf(e.cluster->bootstraps, "g", e.store,
				   e.tokens, "recovery.interval.ms", "200",
				   NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", NULL, reply, NULL), TBX_OK);
	cr_assert_eq(tbx__worker_trace_to(w, on_span, &sink), TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	/* Two records handled: the committed offset is 2. */
	tt_env_publish(&e, "in", "Ask", payloads, 2);
	cr_assert(tt_drive(&w, 1, two_handled, w, 10, 60));

	/* A row of offset 0 left behind (by a worker killed after A, before
	 * an offset reset, say): no redelivery will resume it. */
	cr_assert((t = tbx__tracer_new_sink("g", on_span, &writer)));
	traced_row(t, &row, &process);
	snprintf(row.msg_id, sizeof(row.msg_id),
		 "33333333-3333-4333-8333-333333333333");
	snprintf(row.in_topic, sizeof(row.in_topic), "in");
	row.in_partition = 0;
	row.in_offset = 0;
	row.created_ms = 1;
	cr_assert_eq(tbx_outbox_open(e.store, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, "g", &row), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx_outbox_close(store);
	tbx__row_clear(&row);
	tbx__tracer_free(t, 0);

	recovered_t r = {&sink, e.store};
	cr_assert(tt_drive(&w, 1, recovered, &r, 5, 120),
		  "the row was not finished, or no batch span of the "
		  "recovery pass was recorded (%zu spans)",
		  sink.cnt);
	tbx_worker_destroy(w);
	for (size_t i = 0; i < sink.cnt; i++)
		if (strcmp(sink.spans[i]->name, "process batch") == 0 &&
		    attr_of(sink.spans[i], "tokenbox.batch.origin", buf,
			    sizeof(buf)))
			batch = sink.spans[i];
	cr_assert_not_null(batch);
	cr_assert_eq(batch->n_links, 1);
	cr_expect_eq(memcmp(batch->links[0]->trace_id, process.ctx.trace_id,
			    TBX_TRACE_ID_SIZE),
		     0);
	cr_expect_eq(memcmp(batch->links[0]->span_id, process.ctx.span_id,
			    TBX_SPAN_ID_SIZE),
		     0, "linked to the span that wrote the row");
	for (size_t i = 0; i < sink.cnt; i++)
		tbx__span_free(sink.spans[i]);
	for (size_t i = 0; i < writer.cnt; i++)
		tbx__span_free(writer.spans[i]);
	free(process.tracestate);
	tt_env_fini(&e);
}

/* A row of one message to "out" with the stored headers @p h. */
static void row_with(tbx__row_t *row, const tbx_header_t *h, size_t n)
{
	void *blob;
	size_t len;

	cr_assert_eq(tbx__hdrs_encode(h, n, &blob, &len), TBX_OK);
	tbx__row_init(row);
	snprintf(row->msg_id, sizeof(row->msg_id), "in-1");
	cr_assert_eq(
	    tbx__row_add(row, "out", "Pong", NULL, 0, "v", 1, blob, len),
	    TBX_OK);
	free(blob);
}

/* An unsampled record's message (the common case at a ratio) is stored
 * with its context in binary and leaves with the W3C traceparent of
 * exactly those ids, sampled=0, so that the next hop follows the
 * decision; and a row written before the binary form (a text
 * traceparent beside the writer's span in hex) is still dispatched as
 * the writer's child. */
Test(trace_dispatch, stored_contexts_leave_as_their_w3c_traceparent,
     .timeout = 120)
{
	tt_cluster_t *c = tt_cluster_new(1);
	char *dir = tt_tmpdir(), err[512], buf[128], id[17];
	char *s = tt_path(dir, "s.db"), *tk = tt_path(dir, "t.db");
	const char *old_tp =
	    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
	const uint8_t writer[8] = {0x00, 0xf0, 0x67, 0xaa,
				   0x0b, 0xa9, 0x02, 0xb7};
	tbx__trace_ctx_t ctx;
	uint8_t bin[TBX_STORED_CTX_WRITER_LEN];
	tbx_conf_t *conf;
	rd_kafka_t *producer;
	sink_t sink = {0};
	tbx__tracer_t *t, *prev;
	tbx__row_t unsampled, old, *rows[2] = {&unsampled, &old};
	tt_record_t *recs;
	size_t n;
	int delivered[2] = {0, 0};
	char want[TBX_TRACEPARENT_LEN + 1];

	tt_cluster_topic(c, "out", 1);
	conf = tt_conf(c->bootstraps, "g", s, tk, NULL);
	cr_assert((producer = tbx__producer_new(conf, err, sizeof(err))), "%s",
		  err);
	cr_assert((t = tbx__tracer_new_sink("g", on_span, &sink)));

	tbx__trace_id_new(ctx.trace_id);
	tbx__span_id_new(ctx.span_id);
	ctx.flags = 0;
	tbx__traceparent_format(&ctx, want);
	{
		tbx_header_t h[] = {{TBX_STORED_CTX_HDR, bin,
				     tbx__stored_ctx_encode(&ctx, NULL, bin)}};
		row_with(&unsampled, h, 1);
	}
	{
		tbx_header_t h[] = {
		    {"traceparent", old_tp, 55},
		    {TBX_TRACE_PARENT_HDR, "00f067aa0ba902b7", 16}};
		row_with(&old, h, 2);
	}
	prev = tbx__tracer_dispatch_swap(t);
	cr_assert_eq(tbx__dispatch(producer, NULL, rows, 2, delivered, NULL,
				   NULL, err, sizeof(err), NULL),
		     TBX_OK, "%s", err);
	tbx__tracer_dispatch_swap(prev);
	cr_assert_eq(sink.cnt, 1, "the old row's sampled message only");
	cr_expect_eq(memcmp(sink.spans[0]->parent_id, writer, 8), 0,
		     "the child of the span that wrote the old row");

	n = tt_read_topic(c->bootstraps, "out", &recs);
	cr_assert_eq(n, 2);
	cr_expect_str_eq(
	    hdr_of(recs[0].headers, "traceparent", buf, sizeof(buf)), want);
	cr_expect_null(
	    hdr_of(recs[0].headers, TBX_STORED_CTX_HDR, buf, sizeof(buf)),
	    "the internal header left the process");
	cr_assert(hdr_of(recs[1].headers, "traceparent", buf, sizeof(buf)));
	tbx__hex(sink.spans[0]->span_id, TBX_SPAN_ID_SIZE, id);
	cr_expect_eq(strncmp(buf, old_tp, 36), 0, "%s", buf);
	cr_expect_eq(strncmp(buf + 36, id, 16), 0, "%s", buf);
	tt_records_free(recs, n);

	/* Tracing off in the dispatcher: the same traceparent. */
	rows[1] = NULL;
	cr_assert_eq(tbx__dispatch(producer, NULL, rows, 1, delivered, NULL,
				   NULL, err, sizeof(err), NULL),
		     TBX_OK, "%s", err);
	n = tt_read_topic(c->bootstraps, "out", &recs);
	cr_assert_eq(n, 3);
	cr_expect_str_eq(
	    hdr_of(recs[2].headers, "traceparent", buf, sizeof(buf)), want);
	tt_records_free(recs, n);

	for (size_t i = 0; i < sink.cnt; i++)
		tbx__span_free(sink.spans[i]);
	tbx__row_clear(&unsampled);
	tbx__row_clear(&old);
	tbx__tracer_free(t, 0);
	rd_kafka_destroy(producer);
	tbx_conf_destroy(conf);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(s);
	free(tk);
}

Test(trace_dispatch, a_malformed_stored_context_leaves_without_traceparent,
     .timeout = 120)
{
	tt_cluster_t *c = tt_cluster_new(1);
	char *dir = tt_tmpdir(), err[512], buf[128];
	char *s = tt_path(dir, "s.db"), *tk = tt_path(dir, "t.db");
	const uint8_t bad[5] = {1, 2, 3, 4, 5};
	tbx_conf_t *conf;
	rd_kafka_t *producer;
	sink_t sink = {0};
	tbx__tracer_t *t, *prev;
	tbx__row_t row, *rows[1] = {&row};
	tt_record_t *recs;
	size_t n;
	int delivered[1] = {0};
	tbx_header_t h[] = {{"x-before", "1", 1},
			    {TBX_STORED_CTX_HDR, bad, sizeof(bad)},
			    {"tracestate", "k=v", 3},
			    {"x-after", "2", 1}};

	tt_cluster_topic(c, "out", 1);
	conf = tt_conf(c->bootstraps, "g", s, tk, NULL);
	cr_assert((producer = tbx__producer_new(conf, err, sizeof(err))), "%s",
		  err);
	cr_assert((t = tbx__tracer_new_sink("g", on_span, &sink)));
	row_with(&row, h, 4);
	prev = tbx__tracer_dispatch_swap(t);
	cr_assert_eq(tbx__dispatch(producer, NULL, rows, 1, delivered, NULL,
				   NULL, err, sizeof(err), NULL),
		     TBX_OK, "%s", err);
	tbx__tracer_dispatch_swap(prev);
	cr_expect_eq(delivered[0], 1);
	cr_expect_eq(sink.cnt, 0, "no context: no send span");
	n = tt_read_topic(c->bootstraps, "out", &recs);
	cr_assert_eq(n, 1);
	cr_expect_null(
	    hdr_of(recs[0].headers, "traceparent", buf, sizeof(buf)));
	cr_expect_null(
	    hdr_of(recs[0].headers, TBX_STORED_CTX_HDR, buf, sizeof(buf)));
	cr_expect_str_eq(
	    hdr_of(recs[0].headers, "tracestate", buf, sizeof(buf)), "k=v");
	cr_expect_str_eq(hdr_of(recs[0].headers, "x-before", buf, sizeof(buf)),
			 "1");
	cr_expect_str_eq(hdr_of(recs[0].headers, "x-after", buf, sizeof(buf)),
			 "2");
	tt_records_free(recs, n);
	tbx__row_clear(&row);
	tbx__tracer_free(t, 0);
	rd_kafka_destroy(producer);
	tbx_conf_destroy(conf);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(s);
	free(tk);
}
