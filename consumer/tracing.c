/*
 * Trace context through records, outbox rows and dispatch; the process
 * and send spans (tracing.h, docs/tracing.md).
 */
#include "consumer/tracing.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "consumer/batch.h"
#include "consumer/msg.h"
#include "consumer/part.h"
#include "outbox/outbox.h"

static _Thread_local tbx__tracer_t *dispatch_tracer;

typedef struct conf_env {
	const tbx_conf_t *conf;
	char key[128];
} conf_env_t;

/* OTEL_EXPORTER_OTLP_ENDPOINT is otel.exporter.otlp.endpoint: the
 * property of the same meaning wins over the variable. */
static const char *conf_getenv(const char *name, void *opaque)
{
	conf_env_t *ce = opaque;
	const char *v;
	size_t j = 0;

	if (ce->conf && strncmp(name, "OTEL_", 5) == 0 &&
	    strlen(name) + 1 < sizeof(ce->key)) {
		memcpy(ce->key, "otel.", 5);
		j = 5;
		for (const char *c = name + 5; *c; c++)
			ce->key[j++] =
			    *c == '_' ? '.' : (char)tolower((unsigned char)*c);
		ce->key[j] = '\0';
		if ((v = tbx_conf_get(ce->conf, ce->key)) && *v)
			return v;
	}
	return getenv(name);
}

int tbx__tracer_new(const tbx_conf_t *conf, const char *default_service,
		    const char *group, tbx__tracer_t **out, char *errstr,
		    size_t errstr_size)
{
	tbx__otel_conf_t oc;
	conf_env_t ce = {.conf = conf};
	tbx__tracer_t *t;
	int err;

	*out = NULL;
	if ((err = tbx__otel_conf_read(&oc, default_service, conf_getenv, &ce,
				       errstr, errstr_size)))
		return err;
	if (oc.disabled)
		return TBX_OK;
	if (!(t = calloc(1, sizeof(*t))))
		return TBX_ENOMEM;
	t->sampler = oc.sampler;
	atomic_init(&t->bad_headers, 0);
	if (group)
		snprintf(t->group, sizeof(t->group), "%s", group);
	if (!(t->exp = tbx__exporter_new(&oc, NULL, errstr, errstr_size))) {
		free(t);
		return TBX_ECONF;
	}
	tbx__log(TBX_LOG_INFO,
		 "otel: tracing on: service %s, spans to %s (sampler %d, "
		 "ratio %g)",
		 oc.service_name, oc.endpoint, (int)oc.sampler.kind,
		 oc.sampler.ratio);
	*out = t;
	return TBX_OK;
}

tbx__tracer_t *tbx__tracer_new_sink(const char *group, tbx__span_sink_fn *sink,
				    void *opaque)
{
	tbx__tracer_t *t;
	char err[128];

	if (!(t = calloc(1, sizeof(*t))))
		return NULL;
	/* NULL, NULL: the SDKs' default, parentbased_always_on. */
	if (tbx__sampler_init(&t->sampler, NULL, NULL, err, sizeof(err))) {
		free(t);
		return NULL;
	}
	atomic_init(&t->bad_headers, 0);
	if (group)
		snprintf(t->group, sizeof(t->group), "%s", group);
	t->sink = sink;
	t->sink_opaque = opaque;
	return t;
}

/* A new span: from the exporter's free list when it has one. */
static tbx__span_t *span_new(tbx__tracer_t *t, const char *name,
			     tbx__span_kind_t kind, const tbx__trace_ctx_t *ctx,
			     const uint8_t *parent_id, uint64_t start_ns)
{
	return tbx__exporter_span_new(t ? t->exp : NULL, name, kind, ctx,
				      parent_id, start_ns);
}

/* A finished span to the sink or the exporter, which frees it. */
static void emit(tbx__tracer_t *t, tbx__span_t *span)
{
	if (t && t->sink)
		t->sink(span, t->sink_opaque);
	else
		tbx__exporter_enqueue(t ? t->exp : NULL, span);
}

void tbx__tracer_free(tbx__tracer_t *t, int64_t flush_ms)
{
	if (!t)
		return;
	tbx__exporter_destroy(t->exp, flush_ms);
	free(t);
}

void tbx__tracer_stats(tbx__tracer_t *t, tbx__exporter_stats_t *st,
		       uint64_t *bad_headers)
{
	tbx__exporter_stats(t ? t->exp : NULL, st);
	if (bad_headers)
		*bad_headers = t ? atomic_load(&t->bad_headers) : 0;
}

int tbx__trace_loss_check(tbx__tracer_t *t, int64_t now_ms, int64_t window_ms,
			  tbx_outbox_t *store, const char *group)
{
	tbx__exporter_stats_t st;
	uint64_t lost, delta;
	char detail[512];
	int err;

	if (!t->loss_window_ms) {
		t->loss_window_ms = now_ms;
		return 0;
	}
	if (now_ms - t->loss_window_ms < window_ms)
		return 0;
	tbx__exporter_stats(t->exp, &st);
	lost = st.dropped + st.failed;
	delta = lost - t->loss_seen;
	t->lossy_windows = delta ? t->lossy_windows + 1 : 0;
	t->loss_seen = lost;
	t->loss_window_ms = now_ms;
	if (t->lossy_windows < TBX_TRACE_LOSS_WINDOWS)
		return 0;
	snprintf(detail, sizeof(detail),
		 "%" PRIu64 " spans lost in the last %d s, and spans were lost "
		 "in each of the %d windows before (%" PRIu64
		 " dropped on a full queue, %" PRIu64
		 " in failed exports in all): the trace collector is "
		 "unreachable, too slow or refuses them",
		 delta, (int)(window_ms / 1000), t->lossy_windows - 1,
		 st.dropped, st.failed);
	tbx__log(TBX_LOG_WARNING, "otel: %s", detail);
	if (!store)
		return 1;
	if (!(err = tbx_outbox_begin(store)) &&
	    ((err = tbx_outbox_alarm_add(store, group, "span_export_loss",
					 detail)) ||
	     (err = tbx_outbox_commit(store))))
		tbx_outbox_rollback(store);
	if (err)
		tbx__log(TBX_LOG_WARNING,
			 "cannot record the span_export_loss alarm in the "
			 "service store: %s",
			 tbx_strerror(err));
	return 1;
}

tbx__tracer_t *tbx__tracer_dispatch_swap(tbx__tracer_t *t)
{
	tbx__tracer_t *prev = dispatch_tracer;

	dispatch_tracer = t;
	return prev;
}

tbx__tracer_t *tbx__tracer_dispatch(void)
{
	return dispatch_tracer;
}

void tbx__trace_begin(tbx__tracer_t *t, tbx__msg_trace_t *tr,
		      rd_kafka_headers_t *hdrs)
{
	const void *val;
	size_t len;
	tbx__trace_ctx_t parent;
	int has_parent = 0, bad = 0;

	memset(tr, 0, sizeof(*tr));
	tr->on = 1;
	if (hdrs && rd_kafka_header_get_last(hdrs, "traceparent", &val, &len) ==
			RD_KAFKA_RESP_ERR_NO_ERROR) {
		if (val && tbx__traceparent_parse(val, len, &parent) == 0)
			has_parent = 1;
		else
			bad = 1;
	}
	if (has_parent && hdrs &&
	    rd_kafka_header_get_last(hdrs, "tracestate", &val, &len) ==
		RD_KAFKA_RESP_ERR_NO_ERROR) {
		char ts[TBX_TRACESTATE_MAX + 1];
		int n =
		    val ? tbx__tracestate_normalize(val, len, ts, sizeof(ts))
			: -1;
		if (n < 0)
			bad = 1;
		else if (n > 0)
			tr->tracestate = tbx__strdup(ts);
	}
	if (bad)
		atomic_fetch_add(&t->bad_headers, 1);
	if (has_parent) {
		memcpy(tr->ctx.trace_id, parent.trace_id, TBX_TRACE_ID_SIZE);
		memcpy(tr->parent, parent.span_id, TBX_SPAN_ID_SIZE);
	} else {
		tbx__trace_id_new(tr->ctx.trace_id);
	}
	tbx__span_id_new(tr->ctx.span_id);
	tr->ctx.flags = tbx__sampler_decide(&t->sampler, tr->ctx.trace_id,
					    has_parent ? &parent : NULL)
			    ? TBX_TRACE_FLAG_SAMPLED
			    : 0;
	/* Only a sampled record's span has times: an unsampled one costs
	 * no clock. */
	if (tr->ctx.flags & TBX_TRACE_FLAG_SAMPLED)
		tr->start_ns = tbx__now_ns();
}

void tbx__trace_log(const tbx__msg_trace_t *tr)
{
	/* The ids in binary: hex only for the lines that are written. */
	if (!tr)
		tbx__log_trace_ids(NULL, NULL);
	else
		tbx__log_trace_ids(tr->ctx.trace_id, tr->ctx.span_id);
}

void tbx__trace_note_dead_letter(tbx__msg_trace_t *tr, const char *reason)
{
	if (!tr->on)
		return;
	free(tr->dead_letter);
	tr->dead_letter = tbx__strdup(reason ? reason : "");
}

/* "<prefix><topic>" into @p out (TBX_TOPIC_MAX + 16 bytes): a span's
 * name, without a format string. */
static void span_name(char *out, size_t size, const char *prefix,
		      const char *topic)
{
	size_t p = strlen(prefix), t = strlen(topic);

	if (p + t >= size)
		t = size - p - 1;
	memcpy(out, prefix, p);
	memcpy(out + p, topic, t);
	out[p + t] = '\0';
}

/* @p v in decimal into @p out (12 bytes at least); @returns its length. */
static size_t i32_text(int32_t v, char *out)
{
	char tmp[12];
	size_t n = 0, len = 0;
	uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;

	do
		tmp[n++] = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		out[len++] = '-';
	while (n)
		out[len++] = tmp[--n];
	out[len] = '\0';
	return len;
}

static void msg_attrs(tbx__attrs_t *a, const tbx__tracer_t *t,
		      const struct tbx_msg *msg)
{
	char part[16];
	const void *key;
	size_t key_len;

	tbx__attrs_add_str_static(a, "messaging.system", "kafka", 5);
	tbx__attrs_add_str_static(a, "messaging.operation.type", "process", 7);
	tbx__attrs_add_str_static(a, "messaging.operation.name", "process", 7);
	tbx__attrs_add_str_static(a, "messaging.destination.name", msg->topic,
				  strlen(msg->topic));
	tbx__attrs_add_str_static(a, "messaging.destination.partition.id", part,
				  i32_text(msg->rkm->partition, part));
	tbx__attrs_add_int_static(a, "messaging.kafka.offset",
				  msg->rkm->offset);
	key = tbx_msg_key(msg, &key_len);
	if (key)
		tbx__attrs_add_str_static(a, "messaging.kafka.message.key", key,
					  key_len);
	if (t->group[0])
		tbx__attrs_add_str_static(a, "messaging.consumer.group.name",
					  t->group, strlen(t->group));
	tbx__attrs_add_str_static(a, "messaging.message.id", msg->id,
				  strlen(msg->id));
	if (msg->has_type)
		tbx__attrs_add_str_static(a, "tokenbox.type", msg->type,
					  strlen(msg->type));
	tbx__attrs_add_int_static(a, "tokenbox.attempt", msg->attempt);
}

static void outcome(tbx__span_t *span, const struct tbx_msg *msg, uint64_t now)
{
	const tbx__msg_trace_t *tr = &msg->trace;
	tbx__span_event_t *ev;

	if (tr->resumed)
		tbx__span_add_event(span, "resumed", now);
	if (tr->dead_letter) {
		if ((ev = tbx__span_add_event(span, "dead-lettered", now)))
			tbx__attrs_add_str_static(&ev->attrs, "tokenbox.reason",
						  tr->dead_letter,
						  strlen(tr->dead_letter));
		tbx__span_set_status(span, TBX_SPAN_STATUS_ERROR,
				     tr->dead_letter);
		return;
	}
	switch (msg->state) {
	case TBX_MS_DROPPED:
		if ((ev =
			 tbx__span_add_event(span, "duplicate dropped", now))) {
			const char *why =
			    tr->dropped ? tr->dropped : "duplicate";
			tbx__attrs_add_str_static(&ev->attrs, "tokenbox.reason",
						  why, strlen(why));
		}
		tbx__span_set_status(span, TBX_SPAN_STATUS_OK, NULL);
		break;
	case TBX_MS_ROW:
		if (tr->dropped) {
			if ((ev = tbx__span_add_event(span, "duplicate dropped",
						      now)))
				tbx__attrs_add_str_static(
				    &ev->attrs, "tokenbox.reason", tr->dropped,
				    strlen(tr->dropped));
		} else if (!tr->resumed) {
			tbx__span_add_event(span, "processed", now);
		}
		tbx__span_set_status(span, TBX_SPAN_STATUS_OK, NULL);
		break;
	case TBX_MS_BLOCKED:
		if ((ev = tbx__span_add_event(span, "retried", now)) &&
		    tr->backoff_ms > 0)
			tbx__attrs_add_int_static(
			    &ev->attrs, "tokenbox.backoff_ms", tr->backoff_ms);
		tbx__span_set_status(span, TBX_SPAN_STATUS_ERROR,
				     "the handler asked to retry, or a phase "
				     "failed: the record comes again");
		break;
	default:
		tbx__span_add_event(span, "not processed in this batch", now);
		break;
	}
}

void tbx__trace_end(tbx__tracer_t *t, struct tbx_msg *msg)
{
	tbx__msg_trace_t *tr = &msg->trace;
	tbx__span_t *span;
	char name[TBX_TOPIC_MAX + 16];
	uint64_t now;

	if (!tr->on)
		return;
	if (tr->ctx.flags & TBX_TRACE_FLAG_SAMPLED) {
		now = tbx__now_ns();
		span_name(name, sizeof(name), "process ", msg->topic);
		span = span_new(t, name, TBX_SPAN_KIND_CONSUMER, &tr->ctx,
				tbx__id_is_zero(tr->parent, TBX_SPAN_ID_SIZE)
				    ? NULL
				    : tr->parent,
				tr->start_ns);
		if (span) {
			tbx__span_set_tracestate(span, tr->tracestate);
			msg_attrs(&span->attrs, t, msg);
			if (tr->handler_ns)
				tbx__attrs_add_int_static(
				    &span->attrs,
				    "tokenbox.handler.duration_ns",
				    (int64_t)tr->handler_ns);
			outcome(span, msg, now);
			span->end_ns = now;
			emit(t, span);
		}
	}
	free(tr->tracestate);
	free(tr->dead_letter);
	tr->tracestate = tr->dead_letter = NULL;
	tr->on = 0;
}

static tbx__span_t *batch_span(tbx__tracer_t *t, size_t cnt, uint64_t began_ns,
			       const uint64_t *phase_ns, const char *origin);

void tbx__trace_batch(tbx__tracer_t *t, const struct tbx_msg *msgs, size_t cnt,
		      uint64_t began_ns, const uint64_t *phase_ns)
{
	size_t sampled = 0;
	tbx__span_t *span;

	/* Nothing is made for a batch none of whose records is sampled. */
	for (size_t i = 0; i < cnt; i++)
		sampled += msgs[i].trace.on &&
			   (msgs[i].trace.ctx.flags & TBX_TRACE_FLAG_SAMPLED);
	if (!t || !sampled)
		return;
	if (!(span = batch_span(t, cnt, began_ns, phase_ns, NULL)))
		return;
	tbx__span_reserve_links(span, sampled);
	for (size_t i = 0; i < cnt; i++)
		if (msgs[i].trace.on &&
		    (msgs[i].trace.ctx.flags & TBX_TRACE_FLAG_SAMPLED))
			tbx__span_add_link(span, &msgs[i].trace.ctx);
	emit(t, span);
}

/* The batch span of @p cnt records or rows, begun at @p began_ns, the
 * phases' ends @p phase_ns; @p origin (NULL: a worker's batch) names a
 * batch of rows finished outside one.  The caller links it and emits
 * it.  NULL when out of memory. */
static tbx__span_t *batch_span(tbx__tracer_t *t, size_t cnt, uint64_t began_ns,
			       const uint64_t *phase_ns, const char *origin)
{
	static const char *const names[TBX_PHASE_CNT][2] = {
	    {"G", "tokenbox.phase.g.duration_ns"},
	    {"A", "tokenbox.phase.a.duration_ns"},
	    {"B", "tokenbox.phase.b.duration_ns"},
	    {"C", "tokenbox.phase.c.duration_ns"},
	    {"D", "tokenbox.phase.d.duration_ns"},
	    {"E", "tokenbox.phase.e.duration_ns"},
	    {"F", "tokenbox.phase.f.duration_ns"},
	};
	tbx__trace_ctx_t ctx;
	tbx__span_t *span;
	tbx__span_event_t *ev;
	uint64_t prev = began_ns, end = began_ns;

	tbx__trace_id_new(ctx.trace_id);
	tbx__span_id_new(ctx.span_id);
	ctx.flags = TBX_TRACE_FLAG_SAMPLED;
	if (!(span = span_new(t, "process batch", TBX_SPAN_KIND_CONSUMER, &ctx,
			      NULL, began_ns)))
		return NULL;
	/* Every key is a literal of ours, each set once: appended, not
	 * looked up and copied. */
	tbx__attrs_add_str_static(&span->attrs, "messaging.system", "kafka", 5);
	tbx__attrs_add_str_static(&span->attrs, "messaging.operation.type",
				  "process", 7);
	tbx__attrs_add_str_static(&span->attrs, "messaging.operation.name",
				  "process", 7);
	tbx__attrs_add_int_static(&span->attrs, "messaging.batch.message_count",
				  (int64_t)cnt);
	if (t->group[0])
		tbx__attrs_add_str_static(&span->attrs,
					  "messaging.consumer.group.name",
					  t->group, strlen(t->group));
	for (int p = 0; p < TBX_PHASE_CNT; p++) {
		if (!phase_ns[p])
			continue; /* it did not run: a failed phase before */
		tbx__attrs_add_int_static(&span->attrs, names[p][1],
					  (int64_t)(phase_ns[p] - prev));
		if ((ev = tbx__span_add_event(span, names[p][0], phase_ns[p])))
			tbx__attrs_add_int_static(
			    &ev->attrs, "tokenbox.phase.duration_ns",
			    (int64_t)(phase_ns[p] - prev));
		prev = end = phase_ns[p];
	}
	if (origin)
		tbx__attrs_add_str_static(&span->attrs, "tokenbox.batch.origin",
					  origin, strlen(origin));
	span->end_ns = end > began_ns ? end : tbx__now_ns();
	return span;
}

/* Appends one header to a blob being built. */
static int hdr_put(tbx_header_t *h, size_t *n, const char *name,
		   const void *val, size_t len)
{
	h[*n].name = name;
	h[*n].value = val;
	h[*n].len = len;
	(*n)++;
	return 0;
}

/* Bytes of one header with a value in the blob format of
 * tbx__hdrs_encode() (outbox.h): [u16 name_len][name NUL][u8 1][u32 len]
 * [value], big endian; @p name_len counts the NUL. */
#define HDR_SIZE(name_len, len) (2 + (name_len) + 1 + 4 + (len))

static uint8_t *hdr_write(uint8_t *p, const char *name, size_t name_len,
			  const void *val, size_t len)
{
	*p++ = (uint8_t)(name_len >> 8);
	*p++ = (uint8_t)name_len;
	memcpy(p, name, name_len);
	p += name_len;
	*p++ = 1;
	*p++ = (uint8_t)(len >> 24);
	*p++ = (uint8_t)(len >> 16);
	*p++ = (uint8_t)(len >> 8);
	*p++ = (uint8_t)len;
	if (len)
		memcpy(p, val, len);
	return p + len;
}

/* The context of an outgoing message written under @p parent (NULL or
 * off: a new trace, as the sampler decides), @p given the one the
 * message's own traceparent gave (NULL: none): its trace, a new span
 * id, the flags; *@p parent_id the span it continues (NULL: a root). */
static void out_ctx(tbx__tracer_t *t, const tbx__msg_trace_t *parent,
		    const tbx__trace_ctx_t *given, tbx__trace_ctx_t *ctx,
		    const uint8_t **parent_id)
{
	*parent_id = NULL;
	if (given) {
		memcpy(ctx->trace_id, given->trace_id, TBX_TRACE_ID_SIZE);
		*parent_id = given->span_id;
		ctx->flags =
		    tbx__sampler_decide(&t->sampler, given->trace_id, given)
			? TBX_TRACE_FLAG_SAMPLED
			: 0;
	} else if (parent && parent->on) {
		memcpy(ctx->trace_id, parent->ctx.trace_id, TBX_TRACE_ID_SIZE);
		*parent_id = parent->ctx.span_id;
		ctx->flags = parent->ctx.flags;
	} else {
		tbx__trace_id_new(ctx->trace_id);
		ctx->flags =
		    tbx__sampler_decide(&t->sampler, ctx->trace_id, NULL)
			? TBX_TRACE_FLAG_SAMPLED
			: 0;
	}
	tbx__span_id_new(ctx->span_id);
}

/* 1 when @p name is one of the trace headers tbx__trace_out() replaces:
 * all begin with 't', which most others' names do not. */
static int trace_hdr(const char *name)
{
	return name[0] == 't' && (strcmp(name, "traceparent") == 0 ||
				  strcmp(name, "tracestate") == 0 ||
				  strcmp(name, TBX_STORED_CTX_HDR) == 0 ||
				  strcmp(name, TBX_TRACE_PARENT_HDR) == 0);
}

int tbx__trace_out(tbx__tracer_t *t, const tbx__msg_trace_t *parent,
		   const void *blob, size_t len, void **out, size_t *out_len)
{
	tbx_header_t h, *hdrs, few[8];
	size_t pos = 0, cnt = 0, n = 0, stored_len, state_len, total;
	int r, has_given = 0, replaced = 0;
	tbx__trace_ctx_t given, ctx;
	const uint8_t *parent_id = NULL;
	static const uint8_t root[TBX_SPAN_ID_SIZE];
	uint8_t stored[TBX_STORED_CTX_WRITER_LEN], *p;
	char ts[TBX_TRACESTATE_MAX + 1];
	const char *state = NULL;

	*out = NULL;
	*out_len = 0;
	while ((r = tbx__hdrs_next(blob, len, &pos, &h)) == 1) {
		cnt++;
		if (!trace_hdr(h.name))
			continue;
		replaced = 1;
		if (strcmp(h.name, "traceparent") == 0 && h.value &&
		    tbx__traceparent_parse(h.value, h.len, &given) == 0)
			has_given = 1;
	}
	if (r < 0)
		return TBX_EINVAL;
	if (!replaced) {
		/* The common case, no trace header of the message's own: its
		 * headers as they are, the stored context after them.  No
		 * header is decoded again, no list built. */
		out_ctx(t, parent, NULL, &ctx, &parent_id);
		if (parent && parent->on)
			state = parent->tracestate;
		stored_len =
		    tbx__stored_ctx_encode(&ctx,
					   ctx.flags & TBX_TRACE_FLAG_SAMPLED
					       ? (parent_id ? parent_id : root)
					       : NULL,
					   stored);
		state_len = state ? strlen(state) : 0;
		total = len + HDR_SIZE(sizeof(TBX_STORED_CTX_HDR), stored_len);
		if (state_len)
			total += HDR_SIZE(sizeof("tracestate"), state_len);
		if (!(p = malloc(total)))
			return TBX_ENOMEM;
		*out = p;
		if (len)
			memcpy(p, blob, len);
		p = hdr_write(p + len, TBX_STORED_CTX_HDR,
			      sizeof(TBX_STORED_CTX_HDR), stored, stored_len);
		if (state_len)
			hdr_write(p, "tracestate", sizeof("tracestate"), state,
				  state_len);
		*out_len = total;
		return TBX_OK;
	}
	ts[0] = '\0';
	if (cnt + 2 <= sizeof(few) / sizeof(few[0]))
		hdrs = few;
	else if (!(hdrs = calloc(cnt + 2, sizeof(*hdrs))))
		return TBX_ENOMEM;
	pos = 0;
	while (cnt && tbx__hdrs_next(blob, len, &pos, &h) == 1) {
		if (strcmp(h.name, TBX_STORED_CTX_HDR) == 0 ||
		    strcmp(h.name, TBX_TRACE_PARENT_HDR) == 0 ||
		    strcmp(h.name, "traceparent") == 0)
			continue;
		if (strcmp(h.name, "tracestate") == 0) {
			/* The caller's, when it set a context of its own. */
			if (has_given && h.value &&
			    tbx__tracestate_normalize(h.value, h.len, ts,
						      sizeof(ts)) > 0)
				state = ts;
			continue;
		}
		hdrs[n++] = h;
	}
	out_ctx(t, parent, has_given ? &given : NULL, &ctx, &parent_id);
	if (!has_given && parent && parent->on)
		state = parent->tracestate;
	/* The context in binary (tracing.h, TBX_STORED_CTX_HDR): a sampled
	 * one with the span that wrote it, the send span's parent. */
	hdrs[n].name = TBX_STORED_CTX_HDR;
	hdrs[n].value = stored;
	hdrs[n].len = tbx__stored_ctx_encode(
	    &ctx,
	    ctx.flags & TBX_TRACE_FLAG_SAMPLED ? (parent_id ? parent_id : root)
					       : NULL,
	    stored);
	n++;
	if (state && *state)
		hdr_put(hdrs, &n, "tracestate", state, strlen(state));
	r = tbx__hdrs_encode(hdrs, n, out, out_len);
	if (hdrs != few)
		free(hdrs);
	return r;
}

static int unhex(const char *s, size_t len, uint8_t *out, size_t n)
{
	if (len != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int v = 0;
		for (int k = 0; k < 2; k++) {
			char c = s[2 * i + k];
			v <<= 4;
			if (c >= '0' && c <= '9')
				v |= c - '0';
			else if (c >= 'a' && c <= 'f')
				v |= c - 'a' + 10;
			else
				return -1;
		}
		out[i] = (uint8_t)v;
	}
	return 0;
}

/* 1 when a stored traceparent says "not sampled" by its flags alone (a
 * value of the canonical length whose last hex digit is even): read
 * without parsing the whole value, the common case at a ratio. */
static int flags_unsampled(const tbx_header_t *tp)
{
	char last;

	if (tp->len != TBX_TRACEPARENT_LEN)
		return 0;
	last = ((const char *)tp->value)[TBX_TRACEPARENT_LEN - 1];
	return last && strchr("02468ace", last) != NULL;
}

static int parent_based(const tbx__tracer_t *t)
{
	return t->sampler.kind == TBX_SAMPLER_PARENT_ALWAYS_ON ||
	       t->sampler.kind == TBX_SAMPLER_PARENT_ALWAYS_OFF ||
	       t->sampler.kind == TBX_SAMPLER_PARENT_RATIO;
}

int tbx__trace_hdrs_note(tbx__trace_hdrs_t *f, const tbx_header_t *h)
{
	/* Every trace header's name begins with 't', as few others do. */
	if (h->name[0] != 't')
		return 0;
	if (strcmp(h->name, TBX_STORED_CTX_HDR) == 0) {
		if (h->value &&
		    tbx__stored_ctx_decode(h->value, h->len, &f->sc) == 0)
			f->has_sc = 1;
		else
			f->bad_sc = 1;
		return 1;
	}
	if (strcmp(h->name, "traceparent") == 0) {
		if (h->value)
			f->traceparent = *h;
		return 1;
	}
	if (strcmp(h->name, "tracestate") == 0) {
		if (h->value)
			f->tracestate = *h;
		return 1;
	}
	if (strcmp(h->name, TBX_TRACE_PARENT_HDR) == 0) {
		if (h->value)
			f->parent = *h;
		return 1;
	}
	return 0;
}

int tbx__trace_hdrs_stored(const tbx__trace_hdrs_t *f, tbx__stored_ctx_t *sc)
{
	if (f->has_sc) {
		*sc = f->sc;
		return 0;
	}
	/* A row written before the binary form: the text traceparent, and
	 * beside a sampled one the writer's span in hex. */
	if (!f->traceparent.value ||
	    tbx__traceparent_parse(f->traceparent.value, f->traceparent.len,
				   &sc->ctx))
		return -1;
	sc->has_writer = 0;
	memset(sc->writer, 0, sizeof(sc->writer));
	if (f->parent.value &&
	    (f->parent.len == 0 || unhex(f->parent.value, f->parent.len,
					 sc->writer, TBX_SPAN_ID_SIZE) == 0))
		sc->has_writer = 1;
	return 0;
}

int tbx__trace_stored(const void *blob, size_t len, tbx__stored_ctx_t *sc,
		      const char **tracestate, size_t *tracestate_len)
{
	tbx__trace_hdrs_t f = {0};
	tbx_header_t h;
	size_t pos = 0;

	while (tbx__hdrs_next(blob, len, &pos, &h) == 1)
		tbx__trace_hdrs_note(&f, &h);
	if (tracestate) {
		*tracestate = f.tracestate.value;
		*tracestate_len = f.tracestate.value ? f.tracestate.len : 0;
	}
	return tbx__trace_hdrs_stored(&f, sc);
}

tbx__span_t *tbx__trace_send_begin(tbx__tracer_t *t, const char *topic,
				   const char *msg_id, const void *blob,
				   size_t len,
				   char traceparent[TBX_TRACEPARENT_LEN + 1])
{
	tbx__trace_hdrs_t f = {0};
	tbx_header_t h;
	size_t pos = 0;

	if (!t || !blob)
		return NULL;
	while (tbx__hdrs_next(blob, len, &pos, &h) == 1)
		tbx__trace_hdrs_note(&f, &h);
	return tbx__trace_send_begin_hdrs(t, topic, msg_id, &f, traceparent);
}

tbx__span_t *
tbx__trace_send_begin_hdrs(tbx__tracer_t *t, const char *topic,
			   const char *msg_id, const tbx__trace_hdrs_t *f,
			   char traceparent[TBX_TRACEPARENT_LEN + 1])
{
	tbx__stored_ctx_t sc;
	tbx__trace_ctx_t ctx;
	const uint8_t *parent = NULL;
	int sampled;
	char name[TBX_TOPIC_MAX + 16], state[TBX_TRACESTATE_MAX + 1];
	tbx__span_t *span;

	if (!t)
		return NULL;
	/* The common case at a ratio, an unsampled context that the
	 * parent-based samplers follow, is decided from its flags alone. */
	if (parent_based(t) &&
	    ((f->has_sc && !(f->sc.ctx.flags & TBX_TRACE_FLAG_SAMPLED)) ||
	     (!f->has_sc && f->traceparent.value &&
	      flags_unsampled(&f->traceparent))))
		return NULL;
	if (tbx__trace_hdrs_stored(f, &sc) != 0)
		return NULL;
	if (sc.has_writer) {
		/* Written by a tracing worker or publisher, for a sampled
		 * message: the stored context is the one it reserved, its
		 * parent the span that wrote the message.  Every dispatch is
		 * a sibling under that parent, with an id of its own. */
		sampled = sc.ctx.flags & TBX_TRACE_FLAG_SAMPLED;
		if (!tbx__id_is_zero(sc.writer, TBX_SPAN_ID_SIZE))
			parent = sc.writer;
	} else {
		/* A context without ours: not sampled when it was written,
		 * or given by a handler, a dead letter, a row written with
		 * tracing off: continued, as the sampler decides. */
		parent = sc.ctx.span_id;
		sampled =
		    tbx__sampler_decide(&t->sampler, sc.ctx.trace_id, &sc.ctx);
	}
	if (!sampled)
		return NULL;
	memcpy(ctx.trace_id, sc.ctx.trace_id, TBX_TRACE_ID_SIZE);
	tbx__span_id_new(ctx.span_id);
	ctx.flags = TBX_TRACE_FLAG_SAMPLED;
	span_name(name, sizeof(name), "send ", topic);
	if (!(span = span_new(t, name, TBX_SPAN_KIND_PRODUCER, &ctx, parent,
			      tbx__now_ns())))
		return NULL;
	if (f->tracestate.value &&
	    tbx__tracestate_normalize(f->tracestate.value, f->tracestate.len,
				      state, sizeof(state)) > 0)
		tbx__span_set_tracestate(span, state);
	tbx__attrs_add_str_static(&span->attrs, "messaging.system", "kafka", 5);
	tbx__attrs_add_str_static(&span->attrs, "messaging.operation.type",
				  "send", 4);
	tbx__attrs_add_str_static(&span->attrs, "messaging.operation.name",
				  "send", 4);
	tbx__attrs_add_str_static(&span->attrs, "messaging.destination.name",
				  topic, strlen(topic));
	if (msg_id)
		tbx__attrs_add_str_static(&span->attrs, "messaging.message.id",
					  msg_id, strlen(msg_id));
	tbx__traceparent_format(&ctx, traceparent);
	return span;
}

void tbx__trace_send_end(tbx__tracer_t *t, tbx__span_t *span,
			 rd_kafka_resp_err_t err, int32_t partition,
			 int64_t offset, uint64_t end_ns)
{
	char part[16];

	if (!span)
		return;
	span->end_ns = end_ns ? end_ns : tbx__now_ns();
	if (err) {
		tbx__span_set_status(span, TBX_SPAN_STATUS_ERROR,
				     rd_kafka_err2str(err));
		tbx__attrs_add_str_static(&span->attrs, "error.type",
					  rd_kafka_err2name(err),
					  strlen(rd_kafka_err2name(err)));
	} else {
		tbx__attrs_add_str_static(&span->attrs,
					  "messaging.destination.partition.id",
					  part, i32_text(partition, part));
		tbx__attrs_add_int_static(&span->attrs,
					  "messaging.kafka.offset", offset);
	}
	emit(t, span);
}

/* The context of the span that wrote a sampled stored message (its
 * stored context's trace, the writer's span), into @p ctx.
 * @returns 0, or -1 when the message has none. */
static int stored_writer(const tbx__outmsg_t *m, tbx__trace_ctx_t *ctx)
{
	tbx__stored_ctx_t sc;

	if (tbx__trace_stored(m->headers, m->headers_len, &sc, NULL, NULL) ||
	    !sc.has_writer || !(sc.ctx.flags & TBX_TRACE_FLAG_SAMPLED) ||
	    tbx__id_is_zero(sc.writer, TBX_SPAN_ID_SIZE))
		return -1;
	memcpy(ctx->trace_id, sc.ctx.trace_id, TBX_TRACE_ID_SIZE);
	memcpy(ctx->span_id, sc.writer, TBX_SPAN_ID_SIZE);
	ctx->flags = TBX_TRACE_FLAG_SAMPLED;
	return 0;
}

void tbx__trace_rows_batch(tbx__tracer_t *t, const tbx__batch_t *batch,
			   const char *origin)
{
	tbx__trace_ctx_t *links = NULL, ctx;
	tbx__span_t *span;
	size_t n = 0;

	if (!t || !batch->row_cnt)
		return;
	/* A row's messages were all written by its record's process span:
	 * one link per row, to the first sampled message's writer. The
	 * links are allocated at the first sampled row only, for the rows
	 * left, so a batch with nothing sampled allocates nothing. */
	for (size_t i = 0; i < batch->row_cnt; i++) {
		const tbx__row_t *row = &batch->rows[i].row;
		for (size_t j = 0; j < row->msg_cnt; j++) {
			if (stored_writer(&row->msgs[j], &ctx) != 0)
				continue;
			if (!links && !(links = calloc(batch->row_cnt - i,
						       sizeof(*links))))
				return;
			links[n++] = ctx;
			break;
		}
	}
	/* Nothing is made when no row's message is sampled. */
	if (n && (span = batch_span(t, batch->row_cnt, batch->began_ns,
				    batch->phase_ns, origin))) {
		tbx__span_reserve_links(span, n);
		for (size_t i = 0; i < n; i++)
			tbx__span_add_link(span, &links[i]);
		emit(t, span);
	}
	free(links);
}
