/*
 * The wiring of trace/ into the worker, the publisher and dispatch
 * (docs/tracing.md): the tracer (exporter and sampler of a worker or a
 * publisher), the trace context of each record read from its
 * traceparent and tracestate headers, its process span, the trace
 * headers written into an outgoing message's stored headers, and the
 * send span recorded at its delivery report.
 *
 * Tracing off (no tracer, the default) costs a pointer test per record
 * and nothing else: no header is read, nothing is allocated.
 *
 * @locality the tracer's counters: any thread; the rest: the thread of
 * the worker or publisher that owns it.
 */
#ifndef TBX_CONSUMER_TRACING_H
#define TBX_CONSUMER_TRACING_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "consumer/conf.h"
#include "outbox/outbox.h"
#include "trace/export.h"

/** The internal header that kept, beside a stored message's text
 *  traceparent, the id of its send span's parent (16 hex digits, "" for
 *  a root), in rows written before TBX_STORED_CTX_HDR (trace/context.h)
 *  took both: still read, never written, never sent. */
#define TBX_TRACE_PARENT_HDR "tbx-trace-parent"

/** Where the finished spans of a tracer made by tbx__tracer_new_sink()
 *  go, instead of an exporter: called on the thread that finished
 *  @p span, which the sink now owns (tbx__span_free()). */
typedef void tbx__span_sink_fn(tbx__span_t *span, void *opaque);

typedef struct tbx__tracer {
	tbx__exporter_t *exp;	 /* NULL with a sink */
	tbx__span_sink_fn *sink; /* NULL: spans go to exp */
	void *sink_opaque;
	tbx__sampler_t sampler;
	char group[256]; /* messaging.consumer.group.name; "" none */
	/* records whose traceparent or tracestate was malformed */
	atomic_uint_fast64_t bad_headers;
	/* sustained export loss (tbx__trace_loss_check()) */
	int64_t loss_window_ms; /* the current window's start; 0: none */
	uint64_t loss_seen;	/* spans lost when it started */
	int lossy_windows;	/* windows in a row that lost spans */
} tbx__tracer_t;

/** Export loss is sustained when spans were lost in this many windows
 *  in a row (trace.loss.window.ms each, by default this long). */
#define TBX_TRACE_LOSS_WINDOW_MS 60000
#define TBX_TRACE_LOSS_WINDOWS	 2

/** A record's trace: the context of its process span, and its outcome
 *  as the protocol noted it. */
typedef struct tbx__msg_trace {
	int on;		      /* a context exists (tracing on) */
	tbx__trace_ctx_t ctx; /* the process span's; flags: sampled */
	uint8_t parent[TBX_SPAN_ID_SIZE]; /* the remote parent; 0: root */
	char *tracestate;		  /* normalised, or NULL */
	uint64_t start_ns, handler_ns;	  /* handler_ns: its time, 0 none */
	const char *dropped;		  /* why a duplicate was dropped */
	char *dead_letter;		  /* why it was dead-lettered */
	int resumed;			  /* its row existed: resumed */
	int64_t backoff_ms;		  /* RETRY: blocked this long */
	char traceparent[TBX_TRACEPARENT_LEN + 1]; /* "" until asked */
} tbx__msg_trace_t;

/**
 * The tracer of a worker or publisher: the configuration read from the
 * otel.* properties of @p conf (they win) and OpenTelemetry's variables
 * (tbx__otel_conf_read(), @p default_service without OTEL_SERVICE_NAME
 * or otel.service.name).
 * @returns TBX_OK with *@p out NULL (tracing off) or the tracer, or
 * TBX_ECONF / TBX_ENOMEM with @p errstr saying why.
 */
int tbx__tracer_new(const tbx_conf_t *conf, const char *default_service,
		    const char *group, tbx__tracer_t **out, char *errstr,
		    size_t errstr_size);
/**
 * A tracer that hands every finished span to @p sink (called with
 * @p opaque) instead of exporting it, with OpenTelemetry's default
 * sampler (parentbased_always_on): the test kit's, which lists what a
 * handler's message produced without a collector.  @p group as in
 * tbx__tracer_new().  @returns NULL when out of memory.
 */
tbx__tracer_t *tbx__tracer_new_sink(const char *group, tbx__span_sink_fn *sink,
				    void *opaque);
/** Sends what is held (at most @p flush_ms) and frees.  NULL: no-op. */
void tbx__tracer_free(tbx__tracer_t *t, int64_t flush_ms);
/** The exporter's counters (all zero for NULL) and the malformed trace
 *  headers seen. */
void tbx__tracer_stats(tbx__tracer_t *t, tbx__exporter_stats_t *st,
		       uint64_t *bad_headers);

/** The tracer of the dispatches made on this thread (send spans): set
 *  around tbx__dispatch() by its callers.  @returns the previous one. */
tbx__tracer_t *tbx__tracer_dispatch_swap(tbx__tracer_t *t);
/** The tracer set by tbx__tracer_dispatch_swap(), or NULL. */
tbx__tracer_t *tbx__tracer_dispatch(void);

/**
 * Called from the worker's loop at @p now_ms (monotonic): at the end of
 * each window of @p window_ms (trace.loss.window.ms), when spans were
 * dropped or lost in TBX_TRACE_LOSS_WINDOWS windows in a row, logs a WARN
 * and records the alarm span_export_loss of @p group in @p store (which
 * `inspect status --check` flags), once per window while it lasts.
 * @returns 1 when it raised the alarm, else 0.
 */
int tbx__trace_loss_check(tbx__tracer_t *t, int64_t now_ms, int64_t window_ms,
			  tbx_outbox_t *store, const char *group);

struct tbx_msg;

/**
 * A polled record's context: its traceparent and tracestate headers
 * (@p hdrs, may be NULL) read (a malformed one is ignored and counted),
 * a span id for its process span, the sampler's decision.
 */
void tbx__trace_begin(tbx__tracer_t *t, tbx__msg_trace_t *tr,
		      rd_kafka_headers_t *hdrs);

/** The record leaves its batch: its process span (when sampled) is
 *  finished with the outcome and handed to the exporter; what @p tr
 *  holds is freed. */
void tbx__trace_end(tbx__tracer_t *t, struct tbx_msg *msg);

/**
 * The batch span of the @p cnt records @p msgs, begun at @p began_ns,
 * whose phases G, A–F ended at @p phase_ns (TBX_PHASE_CNT entries, Unix
 * nanoseconds, 0: the phase did not run; consumer/batch.h): named
 * "process batch", a root of a trace of its own, with the phases'
 * durations as attributes and their ends as events, linked to the
 * process span of each sampled record.  Recorded when at least one
 * record is sampled (its links lead somewhere), else nothing is made.
 * Called before the records' process spans end.
 */
void tbx__trace_batch(tbx__tracer_t *t, const struct tbx_msg *msgs, size_t cnt,
		      uint64_t began_ns, const uint64_t *phase_ns);

struct tbx__batch;

/**
 * The batch span of the outbox rows @p batch holds (rows only, no
 * records), finished outside a worker's batch by the recovery pass or
 * `inspect redispatch` (@p origin: "recovery", "redispatch"): as
 * tbx__trace_batch()'s, with the phases B–E that ran (batch->began_ns,
 * batch->phase_ns), the attribute tokenbox.batch.origin, and linked to
 * the span that wrote each row whose messages are sampled (their stored
 * TBX_TRACE_PARENT_HDR).  Nothing is made when no row is sampled.
 */
void tbx__trace_rows_batch(tbx__tracer_t *t, const struct tbx__batch *batch,
			   const char *origin);

/**
 * The trace context stored with a message (its headers blob @p blob,
 * @p len): TBX_STORED_CTX_HDR, or in a row written before it the text
 * traceparent and TBX_TRACE_PARENT_HDR; *@p tracestate (may be NULL)
 * points into @p blob at its tracestate, NULL when none.
 * @returns 0 with *@p sc set, or -1 when there is no valid one.
 */
int tbx__trace_stored(const void *blob, size_t len, tbx__stored_ctx_t *sc,
		      const char **tracestate, size_t *tracestate_len);

/**
 * The trace headers of a stored message, as one pass over its headers
 * blob finds them (tbx__trace_hdrs_note() on each): dispatch reads a
 * message's headers once, for Kafka and for its send span.  Zeroed
 * before the pass.  The headers point into the blob.
 */
typedef struct tbx__trace_hdrs {
	tbx__stored_ctx_t sc; /* the last valid TBX_STORED_CTX_HDR */
	int has_sc;	      /* sc was found */
	int bad_sc;	      /* a TBX_STORED_CTX_HDR did not decode */
	/* The last of each with a value; value NULL: none. */
	tbx_header_t traceparent, tracestate, parent;
} tbx__trace_hdrs_t;

/** Notes @p h in @p f when it is a trace header (TBX_STORED_CTX_HDR,
 *  traceparent, tracestate, TBX_TRACE_PARENT_HDR).  @returns 1 when it
 *  is one, else 0. */
int tbx__trace_hdrs_note(tbx__trace_hdrs_t *f, const tbx_header_t *h);
/** The stored context that @p f found, as tbx__trace_stored().
 *  @returns 0 with *@p sc set, or -1 when there is no valid one. */
int tbx__trace_hdrs_stored(const tbx__trace_hdrs_t *f, tbx__stored_ctx_t *sc);

/** Names @p tr's process span in the log lines of this thread
 *  (tbx__log_trace()); NULL: none. */
void tbx__trace_log(const tbx__msg_trace_t *tr);

/** Notes a dead letter's reason on @p tr (copied). */
void tbx__trace_note_dead_letter(tbx__msg_trace_t *tr, const char *reason);

/**
 * The trace headers of an outgoing message, written into its stored
 * headers blob (@p blob, @p len: tbx__hdrs_encode() format): the
 * traceparent of a new send span and the tracestate, beside
 * TBX_TRACE_PARENT_HDR.  The send span's parent is a traceparent the
 * caller set in the blob (the handler's own context wins), else
 * @p parent's process span (may be NULL), else none: a new trace, as the
 * sampler decides.  *@p out is a new blob (malloc'd) replacing @p blob.
 * @returns TBX_OK, TBX_ENOMEM, or TBX_EINVAL (a malformed blob).
 */
int tbx__trace_out(tbx__tracer_t *t, const tbx__msg_trace_t *parent,
		   const void *blob, size_t len, void **out, size_t *out_len);

/**
 * The send span of one dispatch of a message, from its stored headers
 * (@p blob, @p len): a new span id every time, so that a message sent
 * twice (a retried delivery, a row resumed after a crash, `inspect`'s
 * redispatch or resend) is two spans, never one id twice.  Its parent
 * is the stored TBX_TRACE_PARENT_HDR (the span that wrote the message;
 * "" a root), its trace and sampled flag the stored traceparent's;
 * without TBX_TRACE_PARENT_HDR a valid stored traceparent is continued
 * as a remote parent, as the sampler decides.  @p traceparent receives
 * the span's context: the message is produced with it in place of the
 * stored one, so that the next hop's process span is its child.
 * @returns NULL (the message leaves with its stored headers) when there
 * is no tracer, no trace context, or the span is not sampled.
 */
tbx__span_t *tbx__trace_send_begin(tbx__tracer_t *t, const char *topic,
				   const char *msg_id, const void *blob,
				   size_t len,
				   char traceparent[TBX_TRACEPARENT_LEN + 1]);
/** As tbx__trace_send_begin(), from the trace headers @p f a pass over
 *  the message's stored headers found. */
tbx__span_t *
tbx__trace_send_begin_hdrs(tbx__tracer_t *t, const char *topic,
			   const char *msg_id, const tbx__trace_hdrs_t *f,
			   char traceparent[TBX_TRACEPARENT_LEN + 1]);
/** Ends @p span at its delivery report (@p err, @p partition,
 *  @p offset) and hands it to the exporter. */
void tbx__trace_send_end(tbx__tracer_t *t, tbx__span_t *span,
			 rd_kafka_resp_err_t err, int32_t partition,
			 int64_t offset, uint64_t end_ns);

#endif
