/*
 * The trace context through a worker (consumer/tracing.c): a record's
 * traceparent and tracestate read (malformed ones ignored and counted),
 * the process span's context as their child, and the trace headers
 * stored with an outgoing message: the traceparent of a send span whose
 * parent is the process span (or the handler's own context), with the
 * internal header that names that parent.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

#include "consumer/batch.h"
#include "consumer/tracing.h"
#include "outbox/outbox.h"
#include "support.h"
#include "tokenbox/tokenbox.h"

#define PARENT_TP "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

static tbx__tracer_t *tracer(const char *sampler)
{
	tbx_conf_t *conf = tbx_conf_new();
	tbx__tracer_t *t = NULL;
	char err[512];

	cr_assert(conf);
	/* Nothing listens there: the exporter's failures are its own. */
	cr_assert_eq(tbx_conf_set(conf, "otel.exporter.otlp.endpoint",
				  "http://127.0.0.1:9", err, sizeof(err)),
		     TBX_OK, "%s", err);
	if (sampler)
		cr_assert_eq(tbx_conf_set(conf, "otel.traces.sampler", sampler,
					  err, sizeof(err)),
			     TBX_OK, "%s", err);
	cr_assert_eq(tbx__tracer_new(conf, "svc", "grp", &t, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert(t);
	tbx_conf_destroy(conf);
	return t;
}

static rd_kafka_headers_t *hdrs_of(const char *tp, const char *ts)
{
	rd_kafka_headers_t *h = rd_kafka_headers_new(4);

	if (tp)
		rd_kafka_header_add(h, "traceparent", -1, tp, -1);
	if (ts)
		rd_kafka_header_add(h, "tracestate", -1, ts, -1);
	return h;
}

static const char *hdr(const void *blob, size_t len, const char *name,
		       char *buf, size_t size)
{
	tbx_header_t h;
	size_t pos = 0;

	while (tbx__hdrs_next(blob, len, &pos, &h) == 1)
		if (strcmp(h.name, name) == 0) {
			snprintf(buf, size, "%.*s", (int)h.len,
				 (const char *)h.value);
			return buf;
		}
	return NULL;
}

/* The stored trace context of a headers blob (TBX_STORED_CTX_HDR),
 * decoded; asserts it is there, once, and valid. */
static tbx__stored_ctx_t stored_ctx(const void *blob, size_t len)
{
	tbx_header_t h;
	tbx__stored_ctx_t sc;
	size_t pos = 0, found = 0;

	while (tbx__hdrs_next(blob, len, &pos, &h) == 1)
		if (strcmp(h.name, TBX_STORED_CTX_HDR) == 0) {
			found++;
			cr_assert_eq(
			    tbx__stored_ctx_decode(h.value, h.len, &sc), 0);
		}
	cr_assert_eq(found, 1, "the stored context, once");
	return sc;
}

Test(trace_wire, a_records_traceparent_is_the_parent_of_its_process_span)
{
	tbx__tracer_t *t = tracer(NULL);
	rd_kafka_headers_t *h = hdrs_of(PARENT_TP, "k=v, a=b");
	tbx__msg_trace_t tr;
	char hex[40];
	uint64_t bad;
	tbx__exporter_stats_t st;

	tbx__trace_begin(t, &tr, h);
	tbx__hex(tr.ctx.trace_id, TBX_TRACE_ID_SIZE, hex);
	cr_expect_str_eq(hex, "0af7651916cd43dd8448eb211c80319c");
	tbx__hex(tr.parent, TBX_SPAN_ID_SIZE, hex);
	cr_expect_str_eq(hex, "b7ad6b7169203331");
	cr_expect(tr.ctx.flags & TBX_TRACE_FLAG_SAMPLED);
	cr_expect_str_eq(tr.tracestate, "k=v,a=b");
	tbx__tracer_stats(t, &st, &bad);
	cr_expect_eq(bad, 0);
	free(tr.tracestate);
	rd_kafka_headers_destroy(h);
	tbx__tracer_free(t, 0);
}

Test(trace_wire, an_unsampled_parent_is_followed)
{
	tbx__tracer_t *t = tracer(NULL);
	rd_kafka_headers_t *h = hdrs_of(
	    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", NULL);
	tbx__msg_trace_t tr;

	tbx__trace_begin(t, &tr, h);
	cr_expect_not(tr.ctx.flags & TBX_TRACE_FLAG_SAMPLED);
	rd_kafka_headers_destroy(h);
	tbx__tracer_free(t, 0);
}

Test(trace_wire, malformed_headers_are_ignored_and_counted)
{
	tbx__tracer_t *t = tracer(NULL);
	const char *bad_tp[] = {
	    "garbage",
	    "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
	    "00-00000000000000000000000000000000-b7ad6b7169203331-01", ""};
	uint64_t bad;
	tbx__exporter_stats_t st;

	for (size_t i = 0; i < sizeof(bad_tp) / sizeof(bad_tp[0]); i++) {
		rd_kafka_headers_t *h = hdrs_of(bad_tp[i], NULL);
		tbx__msg_trace_t tr;

		tbx__trace_begin(t, &tr, h);
		/* A new trace, a root: the sampler (always on) records it. */
		cr_expect(tbx__id_is_zero(tr.parent, TBX_SPAN_ID_SIZE));
		cr_expect_not(
		    tbx__id_is_zero(tr.ctx.trace_id, TBX_TRACE_ID_SIZE));
		cr_expect(tr.ctx.flags & TBX_TRACE_FLAG_SAMPLED);
		rd_kafka_headers_destroy(h);
	}
	{
		/* A bad tracestate beside a good traceparent: dropped. */
		rd_kafka_headers_t *h = hdrs_of(PARENT_TP, "k=v,k=w");
		tbx__msg_trace_t tr;

		tbx__trace_begin(t, &tr, h);
		cr_expect_null(tr.tracestate);
		cr_expect_not(tbx__id_is_zero(tr.parent, TBX_SPAN_ID_SIZE));
		rd_kafka_headers_destroy(h);
	}
	tbx__tracer_stats(t, &st, &bad);
	cr_expect_eq(bad, 5);
	tbx__tracer_free(t, 0);
}

Test(trace_wire, an_outgoing_message_stores_its_send_spans_traceparent)
{
	tbx__tracer_t *t = tracer(NULL);
	rd_kafka_headers_t *h = hdrs_of(PARENT_TP, "k=v");
	tbx_header_t mine[] = {{"x-app", "1", 1}};
	tbx__msg_trace_t tr;
	void *blob, *out;
	size_t len, out_len;
	char buf[600], proc[40], want[40];
	tbx__trace_ctx_t ctx;
	tbx__stored_ctx_t sc;
	tbx__span_t *span;

	tbx__trace_begin(t, &tr, h);
	cr_assert_eq(tbx__hdrs_encode(mine, 1, &blob, &len), TBX_OK);
	cr_assert_eq(tbx__trace_out(t, &tr, blob, len, &out, &out_len), TBX_OK);
	cr_expect_str_eq(hdr(out, out_len, "x-app", buf, sizeof(buf)), "1");
	/* Stored in binary: no text traceparent, no hex parent. */
	cr_expect_null(hdr(out, out_len, "traceparent", buf, sizeof(buf)));
	cr_expect_null(
	    hdr(out, out_len, TBX_TRACE_PARENT_HDR, buf, sizeof(buf)));
	sc = stored_ctx(out, out_len);
	ctx = sc.ctx;
	cr_expect_eq(memcmp(ctx.trace_id, tr.ctx.trace_id, TBX_TRACE_ID_SIZE),
		     0);
	cr_expect_neq(memcmp(ctx.span_id, tr.ctx.span_id, TBX_SPAN_ID_SIZE), 0);
	cr_expect(ctx.flags & TBX_TRACE_FLAG_SAMPLED);
	cr_expect_str_eq(hdr(out, out_len, "tracestate", buf, sizeof(buf)),
			 "k=v");
	cr_expect(sc.has_writer);
	tbx__hex(sc.writer, TBX_SPAN_ID_SIZE, want);
	tbx__hex(tr.ctx.span_id, TBX_SPAN_ID_SIZE, proc);
	cr_expect_str_eq(want, proc, "the writer: the process span");
	/* Dispatch makes the send span from the stored headers alone: in
	 * the stored trace, child of the process span, an id of its own
	 * each time, which the produced message carries. */
	{
		char tp1[TBX_TRACEPARENT_LEN + 1], tp2[TBX_TRACEPARENT_LEN + 1];
		char id1[2 * TBX_SPAN_ID_SIZE + 1];
		tbx__span_t *again;

		span = tbx__trace_send_begin(t, "payments", "id-1", out,
					     out_len, tp1);
		again = tbx__trace_send_begin(t, "payments", "id-1", out,
					      out_len, tp2);
		cr_assert(span && again);
		cr_expect_eq(
		    memcmp(span->trace_id, ctx.trace_id, TBX_TRACE_ID_SIZE), 0);
		cr_expect_eq(
		    memcmp(span->parent_id, tr.ctx.span_id, TBX_SPAN_ID_SIZE),
		    0);
		cr_expect_eq(
		    memcmp(again->parent_id, tr.ctx.span_id, TBX_SPAN_ID_SIZE),
		    0);
		cr_expect_neq(
		    memcmp(span->span_id, again->span_id, TBX_SPAN_ID_SIZE), 0,
		    "one span id for two dispatches");
		tbx__hex(span->span_id, TBX_SPAN_ID_SIZE, id1);
		cr_expect_eq(strncmp(tp1 + 36, id1, 16), 0, "%s", tp1);
		cr_expect_str_neq(tp1, tp2);
		cr_expect_eq(span->kind, TBX_SPAN_KIND_PRODUCER);
		tbx__span_free(span);
		tbx__span_free(again);
	}
	free(blob);

	/* The handler's own traceparent is the send span's parent. */
	{
		tbx_header_t given[] = {
		    {"traceparent",
		     "00-11111111111111111111111111111111-2222222222222222-01",
		     55}};
		void *b2, *o2;
		size_t l2, ol2;

		cr_assert_eq(tbx__hdrs_encode(given, 1, &b2, &l2), TBX_OK);
		cr_assert_eq(tbx__trace_out(t, &tr, b2, l2, &o2, &ol2), TBX_OK);
		cr_expect_null(hdr(o2, ol2, "traceparent", buf, sizeof(buf)),
			       "the handler's is replaced");
		sc = stored_ctx(o2, ol2);
		tbx__traceparent_format(&sc.ctx, buf);
		cr_expect_eq(
		    strncmp(buf, "00-11111111111111111111111111111111-", 36), 0,
		    "%s", buf);
		cr_expect(sc.has_writer);
		tbx__hex(sc.writer, TBX_SPAN_ID_SIZE, want);
		cr_expect_str_eq(want, "2222222222222222");
		free(b2);
		free(o2);
	}
	free(out);
	free(tr.tracestate);
	rd_kafka_headers_destroy(h);
	tbx__tracer_free(t, 0);
}

Test(trace_wire, tracing_is_off_without_an_endpoint)
{
	tbx_conf_t *conf = tbx_conf_new();
	tbx__tracer_t *t = (tbx__tracer_t *)1;
	char err[512];

	unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
	unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
	cr_assert_eq(tbx__tracer_new(conf, "svc", NULL, &t, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_expect_null(t);
	cr_assert_eq(tbx_conf_set(conf, "otel.exporter.otlp.endpoint",
				  "ftp://x", err, sizeof(err)),
		     TBX_OK);
	cr_expect_eq(tbx__tracer_new(conf, "svc", NULL, &t, err, sizeof(err)),
		     TBX_ECONF);
	tbx_conf_destroy(conf);
}

/* The lines logged by @p fn on this thread, in @p format. */
static void logged(int format, char *out, size_t size)
{
	int p[2], saved = dup(2);
	ssize_t n;

	cr_assert(pipe(p) == 0 && saved >= 0);
	dup2(p[1], 2);
	tbx__log_set_format(format);
	tbx__log_trace("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
	tbx__log(TBX_LOG_ERR, "a line about a record");
	tbx__log_trace(NULL, NULL);
	tbx__log(TBX_LOG_ERR, "a line about none");
	{ /* A record's process span, as tbx__trace_log() names it. */
		static const uint8_t tid[16] = {
		    0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd,
		    0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c};
		static const uint8_t sid[8] = {0xb7, 0xad, 0x6b, 0x71,
					       0x69, 0x20, 0x33, 0x31};
		tbx__log_trace_ids(tid, sid);
		tbx__log(TBX_LOG_ERR, "a line about ids");
		tbx__log_trace_ids(NULL, NULL);
	}
	tbx__log_set_format(TBX_LOGF_TEXT);
	dup2(saved, 2);
	close(saved);
	close(p[1]);
	n = read(p[0], out, size - 1);
	close(p[0]);
	cr_assert(n > 0);
	out[n] = '\0';
}

Test(trace_wire, log_lines_about_a_record_name_its_span)
{
	char buf[4096], *second;

	logged(TBX_LOGF_TEXT, buf, sizeof(buf));
	second = strchr(buf, '\n');
	cr_assert(second);
	*second++ = '\0';
	cr_expect(strstr(buf, "a line about a record trace="
			      "0af7651916cd43dd8448eb211c80319c/"
			      "b7ad6b7169203331"),
		  "%s", buf);
	cr_expect(strstr(second, "a line about ids trace="
				 "0af7651916cd43dd8448eb211c80319c/"
				 "b7ad6b7169203331"),
		  "%s", second);
	*strchr(second, '\n') = '\0';
	cr_expect_null(strstr(second, "trace="), "%s", second);

	logged(TBX_LOGF_JSON, buf, sizeof(buf));
	cr_expect(strstr(buf, "\"trace_id\":\"0af7651916cd43dd8448eb211c80319c"
			      "\",\"span_id\":\"b7ad6b7169203331\"}"),
		  "%s", buf);
}

static int alarm_seen(void *opaque, const tbx__alarm_t *a)
{
	if (strcmp(a->name, "span_export_loss") == 0)
		*(int64_t *)opaque += a->count;
	return 0;
}

Test(trace_wire, sustained_export_loss_raises_an_alarm_for_inspect)
{
	tbx__tracer_t *t = tracer(NULL);
	tbx_outbox_t *store;
	char err[512], path[600];
	int64_t seen = 0, now = 1000;
	tbx__trace_ctx_t ctx = {.flags = TBX_TRACE_FLAG_SAMPLED};

	char *dir = tt_tmpdir();

	snprintf(path, sizeof(path), "%s/svc.db", dir);
	cr_assert_eq(tbx_outbox_open(path, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	/* A window without loss, then lossy ones: the collector at port 9
	 * refuses every export. */
	cr_expect_eq(tbx__trace_loss_check(t, now, TBX_TRACE_LOSS_WINDOW_MS,
					   store, "grp"),
		     0);
	now += TBX_TRACE_LOSS_WINDOW_MS;
	cr_expect_eq(tbx__trace_loss_check(t, now, TBX_TRACE_LOSS_WINDOW_MS,
					   store, "grp"),
		     0);
	for (int w = 0; w < TBX_TRACE_LOSS_WINDOWS; w++) {
		tbx__exporter_stats_t st;
		uint64_t lost;

		tbx__trace_id_new(ctx.trace_id);
		tbx__span_id_new(ctx.span_id);
		tbx__exporter_stats(t->exp, &st);
		lost = st.failed + st.dropped;
		tbx__exporter_enqueue(t->exp,
				      tbx__span_new("s", TBX_SPAN_KIND_INTERNAL,
						    &ctx, NULL, tbx__now_ns()));
		tbx__exporter_kick(t->exp);
		do { /* the failed export, counted */
			usleep(10000);
			tbx__exporter_stats(t->exp, &st);
		} while (st.failed + st.dropped == lost);
		now += TBX_TRACE_LOSS_WINDOW_MS;
		cr_expect_eq(tbx__trace_loss_check(t, now,
						   TBX_TRACE_LOSS_WINDOW_MS,
						   store, "grp"),
			     w + 1 == TBX_TRACE_LOSS_WINDOWS, "window %d", w);
	}
	cr_assert_eq(tbx_outbox_alarms(store, alarm_seen, &seen), TBX_OK);
	cr_expect_eq(seen, 1);
	/* A window without loss ends it. */
	now += TBX_TRACE_LOSS_WINDOW_MS;
	cr_expect_eq(tbx__trace_loss_check(t, now, TBX_TRACE_LOSS_WINDOW_MS,
					   store, "grp"),
		     0);
	tbx_outbox_close(store);
	tbx__tracer_free(t, 0);
	tt_rmrf(dir);
	free(dir);
}

/* A batch span costs nothing when tracing is off or none of the batch's
 * records is sampled: nothing is allocated. */
Test(trace_wire, a_batch_without_sampled_records_allocates_nothing)
{
	tbx__tracer_t *t = tracer("always_off");
	struct tbx_msg msgs[4];
	uint64_t phases[TBX_PHASE_CNT] = {0}, began = tbx__now_ns();
	struct mallinfo2 before, after;

	memset(msgs, 0, sizeof(msgs));
	for (size_t i = 0; i < 4; i++) {
		tbx__trace_begin(t, &msgs[i].trace, NULL);
		cr_assert_eq(msgs[i].trace.ctx.flags, 0);
	}
	for (int p = 0; p < TBX_PHASE_CNT; p++)
		phases[p] = tbx__now_ns();
	before = mallinfo2();
	tbx__trace_batch(t, msgs, 4, began, phases);
	tbx__trace_batch(NULL, msgs, 4, began, phases);
	after = mallinfo2();
	cr_expect_eq(after.uordblks, before.uordblks, "allocated %zd bytes",
		     (ssize_t)(after.uordblks - before.uordblks));
	tbx__tracer_free(t, 0);
}

static void keep_span(tbx__span_t *span, void *opaque)
{
	tbx__span_t **out = opaque;

	cr_assert_null(*out, "one batch span expected");
	*out = span;
}

/* The batch span links to every sampled record's process span, and
 * carries each phase's time; a phase that did not run is left out. */
Test(trace_wire, a_batch_span_links_each_sampled_record)
{
	tbx__span_t *span = NULL;
	tbx__tracer_t *t = tbx__tracer_new_sink("grp", keep_span, &span);
	tbx__tracer_t *off = tracer("always_off");
	struct tbx_msg msgs[4];
	uint64_t phases[TBX_PHASE_CNT] = {0}, began = 1000000;
	int linked[4] = {0};

	cr_assert(t);
	memset(msgs, 0, sizeof(msgs));
	for (size_t i = 0; i < 4; i++)
		/* the third one not sampled: no link to it */
		tbx__trace_begin(i == 2 ? off : t, &msgs[i].trace, NULL);
	for (int p = 0; p < TBX_PHASE_CNT; p++)
		phases[p] = began + 10 * (uint64_t)(p + 1);
	phases[TBX_PHASE_D] = 0; /* did not run */
	tbx__trace_batch(t, msgs, 4, began, phases);
	cr_assert(span);
	cr_expect_str_eq(span->name, "process batch");
	cr_expect_eq(span->kind, TBX_SPAN_KIND_CONSUMER);
	cr_expect(tbx__id_is_zero(span->parent_id, TBX_SPAN_ID_SIZE));
	cr_expect_eq(span->start_ns, began);
	cr_expect_eq(span->end_ns, phases[TBX_PHASE_F]);
	cr_assert_eq(span->n_links, 3);
	for (size_t l = 0; l < span->n_links; l++)
		for (size_t i = 0; i < 4; i++)
			linked[i] += memcmp(span->links[l]->span_id,
					    msgs[i].trace.ctx.span_id,
					    TBX_SPAN_ID_SIZE) == 0 &&
				     memcmp(span->links[l]->trace_id,
					    msgs[i].trace.ctx.trace_id,
					    TBX_TRACE_ID_SIZE) == 0;
	cr_expect(linked[0] == 1 && linked[1] == 1 && linked[3] == 1,
		  "every sampled record once");
	cr_expect_eq(linked[2], 0, "an unsampled record linked");
	for (size_t a = 0; a < span->attrs.n; a++) {
		const tbx__attr_t *at = &span->attrs.v[a];
		if (strcmp(at->key, "tokenbox.phase.d.duration_ns") == 0)
			cr_expect_fail("a phase that did not run is timed");
		if (strcmp(at->key, "tokenbox.phase.e.duration_ns") == 0)
			cr_expect_eq(at->v.i, 20, "E counts from C");
		if (strcmp(at->key, "tokenbox.phase.a.duration_ns") == 0)
			cr_expect_eq(at->v.i, 10);
		if (strcmp(at->key, "messaging.batch.message_count") == 0)
			cr_expect_eq(at->v.i, 4);
	}
	cr_expect_eq(span->n_events, TBX_PHASE_CNT - 1);
	tbx__span_free(span);
	for (size_t i = 0; i < 4; i++)
		free(msgs[i].trace.tracestate);
	tbx__tracer_free(t, 0);
	tbx__tracer_free(off, 0);
}
