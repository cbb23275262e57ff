/*
 * The span exporter: OTLP/HTTP with protobuf (otlp_proto.h) or JSON
 * (otlp_json.h) bodies, POSTed by
 * libcurl from a background thread, configured by OpenTelemetry's
 * environment variables the way every SDK reads them.
 *
 * Bounds: at most queue_max spans are held (queued, or in a request being
 * sent); tbx__exporter_enqueue() never waits for the collector: a span
 * that finds the queue full is dropped and counted.  A request takes at
 * most timeout_ms; a failed one loses its spans (counted, no retry).
 * Every loss is counted (tbx__exporter_stats()) and logged at WARN at
 * most once per TBX_EXPORT_WARN_MS per kind, with the count since the
 * last line.  tbx__exporter_destroy() sends what is queued within a
 * bound it is given and counts the rest as lost.  Spans sent are reused
 * (tbx__exporter_span_new()), not freed.
 *
 * @locality tbx__exporter_enqueue(), _span_new() and _stats(): any
 * thread; _new and _destroy: one owning thread.
 */
#ifndef TBX_TRACE_EXPORT_H
#define TBX_TRACE_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "trace/context.h"
#include "trace/otlp_json.h"
#include "trace/otlp_proto.h"
#include "trace/span.h"

#define TBX_OTEL_URL_MAX     1024
#define TBX_OTEL_SERVICE_MAX 255
/** A kind of loss is logged at most once in this many milliseconds. */
#define TBX_EXPORT_WARN_MS 30000

/** The OTLP/HTTP body: protobuf (the default, as in OpenTelemetry's
 *  SDKs) or JSON. */
typedef enum tbx__otlp_protocol {
	TBX_OTLP_HTTP_PROTOBUF = 0,
	TBX_OTLP_HTTP_JSON = 1,
} tbx__otlp_protocol_t;

typedef struct tbx__otel_conf {
	/** 0: tracing on (an endpoint was given and the SDK not disabled);
	 *  1: off, and nothing below is used. */
	int disabled;
	char endpoint[TBX_OTEL_URL_MAX + 1]; /* the traces URL, whole */
	char service_name[TBX_OTEL_SERVICE_MAX + 1];
	tbx__otlp_protocol_t protocol;
	tbx__sampler_t sampler;
	size_t queue_max;   /* OTEL_BSP_MAX_QUEUE_SIZE, default 2048 */
	size_t batch_max;   /* OTEL_BSP_MAX_EXPORT_BATCH_SIZE, default 512 */
	int64_t delay_ms;   /* OTEL_BSP_SCHEDULE_DELAY, default 5000 */
	int64_t timeout_ms; /* OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT, 10000 */
} tbx__otel_conf_t;

/** Reads one variable; NULL when it is not set. */
typedef const char *tbx__getenv_fn(const char *name, void *opaque);

/**
 * Reads the configuration from OpenTelemetry's variables through @p get
 * (NULL: the process environment), every value checked:
 * OTEL_SDK_DISABLED ("true"/"false"), OTEL_TRACES_EXPORTER ("otlp" or
 * "none"), OTEL_EXPORTER_OTLP_PROTOCOL and
 * OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ("http/protobuf", the default, or
 * "http/json"; the traces one wins; "grpc" is refused),
 * OTEL_EXPORTER_OTLP_ENDPOINT
 * (the base URL; "/v1/traces" is appended) and
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is; wins), OTEL_SERVICE_NAME
 * (else @p default_service), OTEL_TRACES_SAMPLER and
 * OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_MAX_QUEUE_SIZE,
 * OTEL_BSP_MAX_EXPORT_BATCH_SIZE, OTEL_BSP_SCHEDULE_DELAY,
 * OTEL_EXPORTER_OTLP_TIMEOUT and OTEL_EXPORTER_OTLP_TRACES_TIMEOUT.
 * OTEL_EXPORTER_OTLP_HEADERS and _COMPRESSION (other than "none") are
 * refused: not offered.  Tracing is on only when an endpoint is set
 * and the SDK is not disabled.
 * @returns TBX_OK, or TBX_ECONF with @p errstr naming the variable.
 */
int tbx__otel_conf_read(tbx__otel_conf_t *conf, const char *default_service,
			tbx__getenv_fn *get, void *opaque, char *errstr,
			size_t errstr_size);

typedef struct tbx__exporter tbx__exporter_t;

typedef struct tbx__exporter_stats {
	uint64_t enqueued;	 /* spans taken into the queue */
	uint64_t dropped;	 /* spans refused: the queue was full */
	uint64_t exported;	 /* spans the collector took */
	uint64_t failed;	 /* spans lost: failed or refused requests,
				    left at shutdown, not encodable */
	uint64_t requests;	 /* requests sent */
	uint64_t request_errors; /* requests that failed */
	uint64_t held;		 /* spans queued or in a request now */
	uint64_t reused;	 /* spans tbx__exporter_span_new() took
				    from the free list */
	uint64_t free_spans;	 /* spans on the free list now */
} tbx__exporter_stats_t;

/**
 * Starts the exporter thread for @p conf (copied; not disabled), whose
 * resource is @p conf->service_name and @p resource_attrs (copied; may be
 * NULL).
 * @returns the exporter, or NULL with @p errstr saying why.
 */
tbx__exporter_t *tbx__exporter_new(const tbx__otel_conf_t *conf,
				   const tbx__attrs_t *resource_attrs,
				   char *errstr, size_t errstr_size);

/**
 * A new span, as tbx__span_new(), in the memory of a span @p e sent
 * before when it holds one (its free list), else allocated: in the
 * steady state no span is allocated.  The spans sent are handed back
 * to that list, as many as keep the spans held and listed within
 * queue_max (the rest are freed): the exporter keeps no more spans in
 * memory than its queue's bound.  NULL @p e:
 * tbx__span_new().  The caller owns the span as one of tbx__span_new().
 * @returns the span, or NULL when out of memory.
 */
tbx__span_t *tbx__exporter_span_new(tbx__exporter_t *e, const char *name,
				    tbx__span_kind_t kind,
				    const tbx__trace_ctx_t *ctx,
				    const uint8_t *parent_id,
				    uint64_t start_ns);

/**
 * Hands @p span (finished) to the exporter, which frees it: queued, or
 * dropped and counted when queue_max spans are held already.  Never
 * waits for the collector.  NULL @p e: the span is freed.
 * @returns 0 (queued) or -1 (dropped).
 */
int tbx__exporter_enqueue(tbx__exporter_t *e, tbx__span_t *span);

/** Asks the thread to send what is queued now, without waiting for
 *  batch_max spans or delay_ms. */
void tbx__exporter_kick(tbx__exporter_t *e);

/** The counters so far.  NULL @p e: all zero. */
void tbx__exporter_stats(tbx__exporter_t *e, tbx__exporter_stats_t *st);

/**
 * Sends what is held within @p flush_ms (a request in flight then is
 * aborted), counts what is left as failed, stops the thread and frees
 * everything.  NULL: no-op.
 */
void tbx__exporter_destroy(tbx__exporter_t *e, int64_t flush_ms);

#endif
