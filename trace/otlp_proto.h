/*
 * The OTLP/HTTP protobuf encoding of spans (Content-Type
 * application/x-protobuf): the same ExportTraceServiceRequest as
 * otlp_json.h (opentelemetry-proto v1, collector/trace/v1), in the
 * protobuf wire format, written by hand: one resourceSpans (resource
 * attributes service.name, telemetry.sdk.name and .version, and the
 * caller's), one scopeSpans (scope "tokenbox"), the spans with their ids
 * as bytes, times as fixed64, attributes as KeyValue/AnyValue, events,
 * links, status and flags.
 *
 * Written back to front: a nested message's length is known once its
 * contents are written, so every length is a minimal varint, in one pass,
 * with nothing moved.  Fields come out in ascending field order; proto3
 * defaults (0, "", absent) are left out, as a protobuf library leaves
 * them out, but an AnyValue's value (a oneof) is always written, false
 * and 0 and "" included.  Every string is valid UTF-8 (protobuf's
 * `string` must be: an invalid byte becomes U+FFFD, as in the JSON).
 */
#ifndef TBX_TRACE_OTLP_PROTO_H
#define TBX_TRACE_OTLP_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "trace/otlp_json.h"
#include "trace/span.h"

/** A buffer filled from its end: the bytes are p[pos..cap). */
typedef struct tbx__pbuf {
	uint8_t *p;
	size_t pos, cap;
	int oom; /* an allocation failed: the bytes are incomplete */
} tbx__pbuf_t;

/** The encoded bytes, and how many. */
static inline const uint8_t *tbx__pbuf_data(const tbx__pbuf_t *b)
{
	return b->p + b->pos;
}
static inline size_t tbx__pbuf_len(const tbx__pbuf_t *b)
{
	return b->cap - b->pos;
}
/** Empties @p b, keeping its memory. */
static inline void tbx__pbuf_reset(tbx__pbuf_t *b)
{
	b->pos = b->cap;
	b->oom = 0;
}
void tbx__pbuf_free(tbx__pbuf_t *b);

/**
 * Writes the request holding the @p n spans of @p spans into @p out,
 * which is emptied first.
 * @returns 0, or -1 when out of memory.
 */
int tbx__otlp_proto_encode(tbx__span_t *const *spans, size_t n,
			   const tbx__otlp_resource_t *res, tbx__pbuf_t *out);

/**
 * The rejected_spans of an ExportTraceServiceResponse's partial_success
 * (a collector's answer of @p len bytes); 0 when there is none, or the
 * bytes do not read as one.
 */
uint64_t tbx__otlp_proto_rejected(const uint8_t *p, size_t len);

#endif
