/*
 * The OTLP/HTTP JSON encoding of spans: one ExportTraceServiceRequest
 * (opentelemetry-proto, collector/trace/v1) with one resourceSpans whose
 * resource carries service.name and the SDK's name and version, and one
 * scopeSpans (scope "tokenbox").  By the OTLP JSON mapping: trace and
 * span ids are lower-case hex strings, enums (kind, status code) are
 * integers, 64-bit integers (times, intValue) are decimal strings, and
 * field names are lowerCamelCase.  Every string is written as valid
 * UTF-8 (an invalid byte becomes U+FFFD), whatever bytes it held.
 */
#ifndef TBX_TRACE_OTLP_JSON_H
#define TBX_TRACE_OTLP_JSON_H

#include <stddef.h>

#include "trace/span.h"

/** A growing text buffer; oom is set (and the text incomplete) when an
 *  allocation failed. */
typedef struct tbx__jbuf {
	char *p;
	size_t len, cap;
	int oom;
} tbx__jbuf_t;

void tbx__jbuf_free(tbx__jbuf_t *b);

typedef struct tbx__otlp_resource {
	const char *service_name;
	const tbx__attrs_t *attrs; /* more resource attributes; may be NULL */
} tbx__otlp_resource_t;

/**
 * Appends the request holding the @p n spans of @p spans to @p out
 * (@p out->len is where it starts; NUL-terminated).
 * @returns 0, or -1 when out of memory.
 */
int tbx__otlp_json_encode(tbx__span_t *const *spans, size_t n,
			  const tbx__otlp_resource_t *res, tbx__jbuf_t *out);

/** Appends @p len bytes of @p s as a JSON string (quoted, escaped, as
 *  valid UTF-8).  @returns 0, or -1 when out of memory. */
int tbx__json_str(tbx__jbuf_t *b, const char *s, size_t len);

/** Length of the valid UTF-8 sequence at @p s (RFC 3629: no overlong
 *  forms, no surrogates, nothing past U+10FFFF; @p left bytes, at least
 *  1), or 0. */
size_t tbx__utf8_seq(const unsigned char *s, size_t left);

#endif
