/*
 * Fuzz target: what a record brings for tracing, from whoever produced it:
 * its `traceparent` and `tracestate` header values (trace/context.c), and
 * bytes that end up in a span's attributes and are encoded as OTLP JSON
 * (trace/otlp_json.c): a record's key, a header value.
 *
 * Input: u8 length of the traceparent value, then that many bytes; u8
 * length of the tracestate value (x4), then that many bytes; the rest is
 * an attribute value.
 *
 * Checked: a traceparent accepted has non-zero ids and is written back as
 * a valid version-00 value that parses to the same context; the
 * traceparent's bytes read as a stored binary context (tbx-tc), when
 * accepted, encode back to the same bytes and are sent as a traceparent
 * of the same context; a tracestate
 * is refused whole or normalised to at most TBX_TRACESTATE_MAX characters
 * of printable ASCII, and normalising it again changes nothing; the
 * encoded request parses as JSON, is valid UTF-8, and gives back the
 * attribute's value byte for byte when it was valid UTF-8.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "fuzz/fuzz.h"
#include "trace/context.h"
#include "trace/otlp_json.h"
#include "trace/span.h"

/* RFC 3629 UTF-8, the whole of @p n bytes. */
static int valid_utf8(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned char c = s[i];
		size_t k;
		uint32_t cp;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			k = 2, cp = c & 0x1f;
		else if (c >= 0xe0 && c <= 0xef)
			k = 3, cp = c & 0x0f;
		else if (c >= 0xf0 && c <= 0xf4)
			k = 4, cp = c & 0x07;
		else
			return 0;
		if (n - i < k)
			return 0;
		for (size_t j = 1; j < k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i + j] & 0x3f);
		}
		if ((k == 3 &&
		     (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
		    (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
			return 0;
		i += k;
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in_t in = {data, size};
	size_t tp_len, ts_len, n;
	const char *tp, *ts, *val;
	tbx__trace_ctx_t ctx, again;
	char out[TBX_TRACEPARENT_LEN + 1];
	char norm[TBX_TRACESTATE_MAX + 1], norm2[TBX_TRACESTATE_MAX + 1];
	int len;

	tp = (const char *)fuzz_bytes(&in, fuzz_u8(&in), &tp_len);
	ts = (const char *)fuzz_bytes(&in, (size_t)fuzz_u8(&in) * 4, &ts_len);
	val = (const char *)fuzz_bytes(&in, in.left, &n);

	memset(&ctx, 0, sizeof(ctx));
	if (tbx__traceparent_parse(tp, tp_len, &ctx) == 0) {
		FUZZ_CHECK(!tbx__id_is_zero(ctx.trace_id, TBX_TRACE_ID_SIZE));
		FUZZ_CHECK(!tbx__id_is_zero(ctx.span_id, TBX_SPAN_ID_SIZE));
		FUZZ_CHECK((ctx.flags & ~TBX_TRACE_FLAG_SAMPLED) == 0);
		tbx__traceparent_format(&ctx, out);
		FUZZ_CHECK(strlen(out) == TBX_TRACEPARENT_LEN);
		FUZZ_CHECK(tbx__traceparent_parse(out, strlen(out), &again) ==
			   0);
		FUZZ_CHECK(memcmp(&ctx, &again, sizeof(ctx)) == 0);
	} else {
		tbx__trace_id_new(ctx.trace_id);
		tbx__span_id_new(ctx.span_id);
	}
	/* The same bytes as a stored context (tbx-tc, from an outbox row):
	 * one accepted encodes back to the same bytes, and is sent as a
	 * traceparent that parses to its context. */
	{
		tbx__stored_ctx_t sc;
		uint8_t enc[TBX_STORED_CTX_WRITER_LEN];

		if (tbx__stored_ctx_decode(tp, tp_len, &sc) == 0) {
			FUZZ_CHECK(tbx__stored_ctx_encode(
				       &sc.ctx,
				       sc.has_writer ? sc.writer : NULL,
				       enc) == tp_len);
			FUZZ_CHECK(memcmp(enc, tp, tp_len) == 0);
			tbx__traceparent_format(&sc.ctx, out);
			FUZZ_CHECK(tbx__traceparent_parse(out, strlen(out),
							  &again) == 0);
			FUZZ_CHECK(memcmp(&sc.ctx, &again, sizeof(again)) == 0);
		}
	}

	len = tbx__tracestate_normalize(ts, ts_len, norm, sizeof(norm));
	FUZZ_CHECK(len >= -1 && len <= TBX_TRACESTATE_MAX);
	FUZZ_CHECK(len < 0 ? norm[0] == '\0' : strlen(norm) == (size_t)len);
	for (int i = 0; i < len; i++)
		FUZZ_CHECK(norm[i] >= 0x20 && norm[i] <= 0x7e);
	if (len > 0) {
		FUZZ_CHECK(norm[0] != ' ' && norm[len - 1] != ' ' &&
			   norm[len - 1] != ',');
		FUZZ_CHECK(tbx__tracestate_normalize(norm, (size_t)len, norm2,
						     sizeof(norm2)) == len);
		FUZZ_CHECK(strcmp(norm, norm2) == 0);
	}

	/* The span a record with these headers would give. */
	tbx__span_t *span = tbx__span_new("process", TBX_SPAN_KIND_CONSUMER,
					  &ctx, ctx.span_id, 1);
	tbx__jbuf_t buf = {0};
	tbx__otlp_resource_t res = {"fuzz", NULL};
	tbx__span_t *one[1] = {span};
	cJSON *doc;

	FUZZ_CHECK(span);
	tbx__span_set_tracestate(span, len > 0 ? norm : NULL);
	tbx__attrs_str(&span->attrs, "messaging.kafka.message.key", val, n);
	tbx__span_event_t *ev = tbx__span_add_event(span, "event", 2);
	if (ev)
		tbx__attrs_str(&ev->attrs, "header", tp, tp_len);
	tbx__span_set_status(span, TBX_SPAN_STATUS_ERROR, "x");
	FUZZ_CHECK(tbx__otlp_json_encode(one, 1, &res, &buf) == 0);
	FUZZ_CHECK(valid_utf8((const unsigned char *)buf.p, buf.len));
	doc = cJSON_ParseWithLength(buf.p, buf.len);
	FUZZ_CHECK(doc);
	if (n <= TBX_SPAN_VALUE_MAX &&
	    valid_utf8((const unsigned char *)val, n) &&
	    !memchr(val, '\0', n)) {
		cJSON *rs = cJSON_GetArrayItem(
		    cJSON_GetObjectItem(doc, "resourceSpans"), 0);
		cJSON *ss = cJSON_GetArrayItem(
		    cJSON_GetObjectItem(rs, "scopeSpans"), 0);
		cJSON *sp =
		    cJSON_GetArrayItem(cJSON_GetObjectItem(ss, "spans"), 0);
		cJSON *at = cJSON_GetArrayItem(
		    cJSON_GetObjectItem(sp, "attributes"), 0);
		cJSON *sv = cJSON_GetObjectItem(
		    cJSON_GetObjectItem(at, "value"), "stringValue");
		FUZZ_CHECK(cJSON_IsString(sv));
		FUZZ_CHECK(strlen(sv->valuestring) == n &&
			   memcmp(sv->valuestring, val, n) == 0);
	}
	cJSON_Delete(doc);
	tbx__jbuf_free(&buf);
	tbx__span_free(span);
	return 0;
}
