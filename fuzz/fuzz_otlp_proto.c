/*
 * Fuzz target: the OTLP protobuf encoder (trace/otlp_proto.c).  Spans of
 * any contents are encoded, read back by the test-only reader
 * (tests/pbread.h, written apart from the encoder and strict about the
 * wire format), and every field must come back (tests/otlp_check.h):
 * ids, times, kind, flags, strings byte for byte when they were valid
 * UTF-8 and as their UTF-8 form (U+FFFD per invalid byte) when not,
 * attributes of every type in order, events, links, status, dropped
 * counts, and values proto3 leaves out absent.  The input is also read
 * as a collector's answer (tbx__otlp_proto_rejected): any bytes are
 * read within their bounds, without a crash.  Encoding the same spans
 * again into the buffer gives the same bytes.
 *
 * Input, read front to back (past the end, zeros): u8 number of spans
 * (mod 5); per span: u8 flags, u8 kind (mod 6), 16 + 8 + 8 bytes of
 * ids (a parent of zeros: a root), u8-length name, 8 + 8 bytes of
 * times, u8-length tracestate, u8 status (mod 3), u8-length status
 * message, u8 number of attributes (mod 12), each an attribute, u8
 * number of events (mod 4) each with a u8-length name, 8 bytes of time
 * and u8 (mod 4) attributes, u8 number of links (mod 3) each with ids,
 * a u8-length tracestate and u8 (mod 4) attributes, and u8 dropped
 * counts.  An attribute: u8 type (mod 3), u8-length key, then a
 * u8-length string (x2), 8 bytes of integer, or u8 boolean.  The
 * service name is the rest.
 */
#include <string.h>

#include "fuzz/fuzz.h"
#include "tests/otlp_check.h"
#include "tests/pbread.h"
#include "trace/otlp_proto.h"
#include "trace/span.h"

static uint64_t u64(fuzz_in_t *in)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | fuzz_u8(in);
	return v;
}

/* A NUL-terminated copy of up to @p max bytes (the input's own NULs end
 * it early, as a C string of the span would). */
static void cstr(fuzz_in_t *in, size_t max, char *out)
{
	size_t n;
	const uint8_t *p = fuzz_bytes(in, fuzz_u8(in) % (max + 1), &n);

	memcpy(out, p, n);
	out[n] = '\0';
}

static void ids(fuzz_in_t *in, uint8_t *tid, uint8_t *sid)
{
	for (int i = 0; i < TBX_TRACE_ID_SIZE; i++)
		tid[i] = fuzz_u8(in);
	for (int i = 0; i < TBX_SPAN_ID_SIZE; i++)
		sid[i] = fuzz_u8(in);
}

static void attrs(fuzz_in_t *in, tbx__attrs_t *a, unsigned n)
{
	char key[256];
	size_t len;
	const uint8_t *p;

	for (unsigned i = 0; i < n; i++) {
		unsigned type = fuzz_u8(in) % 3;
		cstr(in, 255, key);
		switch (type) {
		case 0:
			p = fuzz_bytes(in, (size_t)fuzz_u8(in) * 2, &len);
			tbx__attrs_str(a, key, (const char *)p, len);
			break;
		case 1:
			tbx__attrs_int(a, key, (int64_t)u64(in));
			break;
		default:
			tbx__attrs_bool(a, key, fuzz_u8(in) & 1);
		}
	}
}

static tbx__span_t *a_span(fuzz_in_t *in)
{
	tbx__trace_ctx_t c;
	uint8_t parent[TBX_SPAN_ID_SIZE];
	char name[256], ts[256], msg[256];
	tbx__span_kind_t kind;
	tbx__span_t *s;
	unsigned status, n;

	c.flags = fuzz_u8(in);
	kind = (tbx__span_kind_t)(fuzz_u8(in) % 6);
	ids(in, c.trace_id, c.span_id);
	for (int i = 0; i < TBX_SPAN_ID_SIZE; i++)
		parent[i] = fuzz_u8(in);
	cstr(in, 255, name);
	FUZZ_CHECK(s = tbx__span_new(name, kind, &c,
				     tbx__id_is_zero(parent, TBX_SPAN_ID_SIZE)
					 ? NULL
					 : parent,
				     u64(in)));
	s->end_ns = u64(in);
	cstr(in, 255, ts);
	if (ts[0])
		FUZZ_CHECK(s->tracestate = strdup(ts));
	status = fuzz_u8(in) % 3;
	cstr(in, 255, msg);
	tbx__span_set_status(s, (tbx__span_status_t)status, msg);
	attrs(in, &s->attrs, fuzz_u8(in) % 12);
	n = fuzz_u8(in) % 4;
	for (unsigned i = 0; i < n; i++) {
		tbx__span_event_t *ev;
		cstr(in, 255, name);
		ev = tbx__span_add_event(s, name, u64(in));
		FUZZ_CHECK(ev);
		attrs(in, &ev->attrs, fuzz_u8(in) % 4);
	}
	n = fuzz_u8(in) % 3;
	for (unsigned i = 0; i < n; i++) {
		tbx__trace_ctx_t lc = {.flags = 0};
		tbx__span_link_t *ln;
		ids(in, lc.trace_id, lc.span_id);
		FUZZ_CHECK(ln = tbx__span_add_link(s, &lc));
		cstr(in, 255, ts);
		if (ts[0])
			FUZZ_CHECK(ln->tracestate = strdup(ts));
		attrs(in, &ln->attrs, fuzz_u8(in) % 4);
	}
	s->attrs.dropped += fuzz_u8(in);
	s->dropped_events += fuzz_u8(in);
	s->dropped_links += (uint32_t)fuzz_u8(in) << 24;
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in_t in = {data, size};
	tbx__span_t *spans[4];
	unsigned n = fuzz_u8(&in) % 5;
	char *service;
	size_t len;
	const uint8_t *p;
	tbx__pbuf_t buf = {0};
	pbr_request_t r;

	/* Any bytes as a collector's answer: read within them, no crash. */
	(void)tbx__otlp_proto_rejected(data, size);

	for (unsigned i = 0; i < n; i++)
		spans[i] = a_span(&in);
	p = fuzz_bytes(&in, in.left, &len);
	FUZZ_CHECK(service = malloc(len + 2));
	memcpy(service, p, len);
	service[len] = '\0';
	if (!service[0]) /* never empty (the configuration sees to it) */
		memcpy(service, "s", 2);

	tbx__otlp_resource_t res = {service, n ? &spans[0]->attrs : NULL};
	FUZZ_CHECK(tbx__otlp_proto_encode(spans, n, &res, &buf) == 0);
	FUZZ_CHECK(pbr_request(tbx__pbuf_data(&buf), tbx__pbuf_len(&buf), &r) ==
		   0);
	FUZZ_CHECK(r.n_resource_spans == 1 && r.n_scope_spans == 1);
	FUZZ_CHECK(r.n_spans == n);
	for (unsigned i = 0; i < n; i++) {
		const char *why = otc_span(spans[i], &r.spans[i]);
		if (why)
			dprintf(2, "span %u: %s differs\n", i, why);
		FUZZ_CHECK(why == NULL);
	}
	FUZZ_CHECK(r.resource.n == 3 + (n ? spans[0]->attrs.n : 0));
	FUZZ_CHECK(pbr_eq(r.resource.v[0].key, "service.name", 12));
	FUZZ_CHECK(pbr_eq_utf8(r.resource.v[0].s, service, strlen(service)));
	FUZZ_CHECK(pbr_eq(r.scope_name, "tokenbox", 8));
	pbr_request_free(&r);

	/* Encoding again into the same buffer gives the same bytes. */
	{
		size_t first = tbx__pbuf_len(&buf);
		uint8_t *copy = malloc(first ? first : 1);
		FUZZ_CHECK(copy);
		memcpy(copy, tbx__pbuf_data(&buf), first);
		FUZZ_CHECK(tbx__otlp_proto_encode(spans, n, &res, &buf) == 0);
		FUZZ_CHECK(tbx__pbuf_len(&buf) == first &&
			   memcmp(copy, tbx__pbuf_data(&buf), first) == 0);
		free(copy);
	}
	tbx__pbuf_free(&buf);
	free(service);
	for (unsigned i = 0; i < n; i++)
		tbx__span_free(spans[i]);
	return 0;
}
