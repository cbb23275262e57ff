/*
 * Spans encoded as OTLP/HTTP JSON and exported: the request's structure
 * by the OTLP JSON mapping, OpenTelemetry's environment variables checked,
 * and the exporter against a local collector (libmicrohttpd), one that
 * refuses, a port nobody listens on and a server that never answers: the
 * producer never waits, and every span is exported or counted as lost.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "otlp_check.h"
#include "pbread.h"
#include "support.h"
#include "tokenbox/tokenbox.h"
#include "trace/export.h"

/* ---- the encoder ---- */

static cJSON *item(cJSON *o, const char *name)
{
	cJSON *i = cJSON_GetObjectItemCaseSensitive(o, name);
	cr_assert(i, "no member %s", name);
	return i;
}

/* The value object of attribute @p key in the array @p attrs. */
static cJSON *attr(cJSON *attrs, const char *key)
{
	cJSON *a;

	cJSON_ArrayForEach(a, attrs)
	{
		if (strcmp(item(a, "key")->valuestring, key) == 0)
			return item(a, "value");
	}
	cr_assert_fail("no attribute %s", key);
	return NULL;
}

static tbx__trace_ctx_t ctx_of(uint8_t fill, uint8_t flags)
{
	tbx__trace_ctx_t c;

	memset(c.trace_id, fill, sizeof(c.trace_id));
	memset(c.span_id, fill + 1, sizeof(c.span_id));
	c.flags = flags;
	return c;
}

Test(otlp_json, a_span_is_encoded_by_the_otlp_json_mapping)
{
	tbx__trace_ctx_t c = ctx_of(0xab, 1), other = ctx_of(0x12, 0);
	uint8_t parent[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	tbx__span_t *s = tbx__span_new("orders process", TBX_SPAN_KIND_CONSUMER,
				       &c, parent, 1700000000123456789ULL);
	tbx__span_t *root =
	    tbx__span_new("root", TBX_SPAN_KIND_PRODUCER, &other, NULL, 5);
	tbx__attrs_t res_attrs = {0};
	tbx__jbuf_t buf = {0};
	tbx__span_t *spans[2];
	cJSON *doc, *rs, *ss, *sp, *attrs, *v, *ev, *ln;

	cr_assert(s && root);
	s->end_ns = 1700000000223456789ULL;
	tbx__span_set_tracestate(s, "rojo=1");
	tbx__attrs_str(&s->attrs, "messaging.system", "kafka", 5);
	tbx__attrs_int(&s->attrs, "messaging.kafka.offset", -42);
	tbx__attrs_int(&s->attrs, "big", INT64_MAX);
	tbx__attrs_int(&s->attrs, "least", INT64_MIN);
	tbx__attrs_int(&s->attrs, "zero", 0);
	/* Keys not copied (literals), set twice too: the last value. */
	tbx__attrs_str_static(&s->attrs, "messaging.message.id", "m-1", 3);
	tbx__attrs_int_static(&s->attrs, "tokenbox.attempt", 1);
	tbx__attrs_str_static(&s->attrs, "messaging.message.id", "m-2", 3);
	tbx__attrs_int_static(&s->attrs, "tokenbox.attempt", 2);
	tbx__attrs_bool(&s->attrs, "retried", 1);
	tbx__attrs_str(&s->attrs, "key", "a\"b\\c\n\x01\xff\xc3\xa9", 10);
	tbx__attrs_str(&s->attrs, "messaging.system", "kafka2", 6);
	ev = NULL;
	tbx__span_event_t *e =
	    tbx__span_add_event(s, "duplicate dropped", 1700000000200000000ULL);
	cr_assert(e);
	tbx__attrs_str(&e->attrs, "tokenbox.drop.reason", "token consumed", 14);
	tbx__span_link_t *l = tbx__span_add_link(s, &other);
	cr_assert(l);
	tbx__attrs_int(&l->attrs, "n", 3);
	tbx__span_set_status(s, TBX_SPAN_STATUS_ERROR, "dead-lettered");
	tbx__attrs_str(&res_attrs, "service.instance.id", "w1", 2);

	spans[0] = s;
	spans[1] = root;
	tbx__otlp_resource_t res = {"order-service", &res_attrs};
	cr_assert_eq(tbx__otlp_json_encode(spans, 2, &res, &buf), 0);
	doc = cJSON_Parse(buf.p);
	cr_assert(doc, "not JSON: %s", buf.p);

	rs = cJSON_GetArrayItem(item(doc, "resourceSpans"), 0);
	attrs = item(item(rs, "resource"), "attributes");
	cr_expect_str_eq(
	    item(attr(attrs, "service.name"), "stringValue")->valuestring,
	    "order-service");
	cr_expect_str_eq(
	    item(attr(attrs, "telemetry.sdk.name"), "stringValue")->valuestring,
	    "tokenbox");
	cr_expect_str_eq(item(attr(attrs, "service.instance.id"), "stringValue")
			     ->valuestring,
			 "w1");
	ss = cJSON_GetArrayItem(item(rs, "scopeSpans"), 0);
	cr_expect_str_eq(item(item(ss, "scope"), "name")->valuestring,
			 "tokenbox");
	cr_assert_eq(cJSON_GetArraySize(item(ss, "spans")), 2);
	sp = cJSON_GetArrayItem(item(ss, "spans"), 0);

	/* Ids in lower-case hex, enums as integers, int64 as strings. */
	cr_expect_str_eq(item(sp, "traceId")->valuestring,
			 "abababababababababababababababab");
	cr_expect_str_eq(item(sp, "spanId")->valuestring, "acacacacacacacac");
	cr_expect_str_eq(item(sp, "parentSpanId")->valuestring,
			 "0102030405060708");
	cr_expect_str_eq(item(sp, "traceState")->valuestring, "rojo=1");
	cr_expect_str_eq(item(sp, "name")->valuestring, "orders process");
	cr_expect(cJSON_IsNumber(item(sp, "kind")));
	cr_expect_eq(item(sp, "kind")->valueint, 5);
	cr_expect_eq(item(sp, "flags")->valueint, 1);
	cr_expect_str_eq(item(sp, "startTimeUnixNano")->valuestring,
			 "1700000000123456789");
	cr_expect_str_eq(item(sp, "endTimeUnixNano")->valuestring,
			 "1700000000223456789");
	attrs = item(sp, "attributes");
	cr_expect_eq(cJSON_GetArraySize(attrs), 9, "a key set twice is one");
	cr_expect_str_eq(
	    item(attr(attrs, "messaging.message.id"), "stringValue")
		->valuestring,
	    "m-2");
	cr_expect_str_eq(
	    item(attr(attrs, "tokenbox.attempt"), "intValue")->valuestring,
	    "2");
	cr_expect_str_eq(
	    item(attr(attrs, "messaging.system"), "stringValue")->valuestring,
	    "kafka2");
	v = item(attr(attrs, "messaging.kafka.offset"), "intValue");
	cr_expect(cJSON_IsString(v));
	cr_expect_str_eq(v->valuestring, "-42");
	cr_expect_str_eq(item(attr(attrs, "big"), "intValue")->valuestring,
			 "9223372036854775807");
	cr_expect_str_eq(item(attr(attrs, "least"), "intValue")->valuestring,
			 "-9223372036854775808");
	cr_expect_str_eq(item(attr(attrs, "zero"), "intValue")->valuestring,
			 "0");
	cr_expect(cJSON_IsTrue(item(attr(attrs, "retried"), "boolValue")));
	/* Escaped, and an invalid byte (0xff) is U+FFFD. */
	cr_expect_str_eq(item(attr(attrs, "key"), "stringValue")->valuestring,
			 "a\"b\\c\n\x01\xef\xbf\xbd\xc3\xa9");
	cr_expect(strstr(buf.p, "\\u0001"));

	ev = cJSON_GetArrayItem(item(sp, "events"), 0);
	cr_expect_str_eq(item(ev, "name")->valuestring, "duplicate dropped");
	cr_expect_str_eq(item(ev, "timeUnixNano")->valuestring,
			 "1700000000200000000");
	cr_expect_str_eq(
	    item(attr(item(ev, "attributes"), "tokenbox.drop.reason"),
		 "stringValue")
		->valuestring,
	    "token consumed");
	ln = cJSON_GetArrayItem(item(sp, "links"), 0);
	cr_expect_str_eq(item(ln, "traceId")->valuestring,
			 "12121212121212121212121212121212");
	cr_expect_str_eq(item(ln, "spanId")->valuestring, "1313131313131313");
	cr_expect_str_eq(
	    item(attr(item(ln, "attributes"), "n"), "intValue")->valuestring,
	    "3");
	cr_expect_eq(item(item(sp, "status"), "code")->valueint, 2);
	cr_expect_str_eq(item(item(sp, "status"), "message")->valuestring,
			 "dead-lettered");

	/* A root span has no parent; an unset status is left out. */
	sp = cJSON_GetArrayItem(item(ss, "spans"), 1);
	cr_expect_null(cJSON_GetObjectItem(sp, "parentSpanId"));
	cr_expect_null(cJSON_GetObjectItem(sp, "status"));
	cr_expect_eq(item(sp, "kind")->valueint, 4);

	cJSON_Delete(doc);
	tbx__jbuf_free(&buf);
	tbx__attrs_free(&res_attrs);
	tbx__span_free(s);
	tbx__span_free(root);
}

Test(otlp_json, what_is_over_the_bounds_is_counted_as_dropped)
{
	tbx__trace_ctx_t c = ctx_of(0x33, 1);
	tbx__span_t *s =
	    tbx__span_new("s", TBX_SPAN_KIND_INTERNAL, &c, NULL, 1);
	tbx__jbuf_t buf = {0};
	char key[32], *big = malloc(TBX_SPAN_VALUE_MAX + 100);
	cJSON *doc, *sp;

	for (int i = 0; i < TBX_SPAN_ATTRS_MAX + 3; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		tbx__attrs_int(&s->attrs, key, i);
	}
	for (int i = 0; i < TBX_SPAN_EVENTS_MAX + 2; i++)
		tbx__span_add_event(s, "e", 1);
	memset(big, 'x', TBX_SPAN_VALUE_MAX + 100);
	tbx__attrs_str(&s->attrs, "k0", big, TBX_SPAN_VALUE_MAX + 100);
	tbx__otlp_resource_t res = {"svc", NULL};
	cr_assert_eq(tbx__otlp_json_encode(&s, 1, &res, &buf), 0);
	doc = cJSON_Parse(buf.p);
	cr_assert(doc);
	sp = cJSON_GetArrayItem(
	    item(cJSON_GetArrayItem(
		     item(cJSON_GetArrayItem(item(doc, "resourceSpans"), 0),
			  "scopeSpans"),
		     0),
		 "spans"),
	    0);
	cr_expect_eq(item(sp, "droppedAttributesCount")->valueint, 3);
	cr_expect_eq(item(sp, "droppedEventsCount")->valueint, 2);
	cr_expect_eq(cJSON_GetArraySize(item(sp, "events")),
		     TBX_SPAN_EVENTS_MAX);
	cr_expect_eq(
	    strlen(item(attr(item(sp, "attributes"), "k0"), "stringValue")
		       ->valuestring),
	    TBX_SPAN_VALUE_MAX, "a long value is cut");
	cJSON_Delete(doc);
	tbx__jbuf_free(&buf);
	tbx__span_free(s);
	free(big);
}

/* ---- the protobuf encoder, read back by tests/pbread.h ---- */

/* Encodes @p n spans and reads the request back; fails the test when it
 * does not read as an ExportTraceServiceRequest. */
static void proto_roundtrip(tbx__span_t *const *spans, size_t n,
			    const tbx__otlp_resource_t *res, tbx__pbuf_t *buf,
			    pbr_request_t *r)
{
	cr_assert_eq(tbx__otlp_proto_encode(spans, n, res, buf), 0);
	cr_assert_eq(
	    pbr_request(tbx__pbuf_data(buf), tbx__pbuf_len(buf), r), 0,
	    "the %zu bytes do not read as an ExportTraceServiceRequest",
	    tbx__pbuf_len(buf));
	cr_assert_eq(r->n_resource_spans, 1);
	cr_assert_eq(r->n_scope_spans, 1);
	cr_assert_eq(r->n_spans, n);
	for (size_t i = 0; i < n; i++) {
		const char *why = otc_span(spans[i], &r->spans[i]);
		cr_assert_null(why, "span %zu: %s differs", i, why);
	}
}

/* The resource attribute @p key of @p r. */
static const pbr_kv_t *res_attr(const pbr_request_t *r, const char *key)
{
	for (size_t i = 0; i < r->resource.n; i++)
		if (pbr_eq(r->resource.v[i].key, key, strlen(key)))
			return &r->resource.v[i];
	cr_assert_fail("no resource attribute %s", key);
	return NULL;
}

Test(otlp_proto, every_field_of_a_span_reads_back)
{
	tbx__trace_ctx_t c = ctx_of(0xff, 1), other = ctx_of(0x12, 0);
	uint8_t parent[8] = {0x80, 0, 0, 0, 0, 0, 0, 0xff};
	/* UTF-8 of 2, 3 and 4 bytes, and an invalid byte (0xff), a lone
	 * continuation byte (0x80) and a cut sequence (0xe2 0x82). */
	static const char utf8[] = "gr\xc3\xb6\xc3\x9f\x65 \xe2\x9c\x93 "
				   "\xf0\x9d\x84\x9e";
	static const char bad[] = "a\xff"
				  "b\x80"
				  "c\xe2\x82";
	tbx__span_t *s = tbx__span_new(utf8, TBX_SPAN_KIND_CONSUMER, &c, parent,
				       UINT64_MAX - 1);
	tbx__attrs_t res_attrs = {0};
	tbx__pbuf_t buf = {0};
	pbr_request_t r;
	const pbr_span_t *rs;

	cr_assert(s);
	s->end_ns = UINT64_MAX;
	tbx__span_set_tracestate(s, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
	tbx__attrs_str(&s->attrs, "messaging.system", "kafka", 5);
	tbx__attrs_str(&s->attrs, "empty", "", 0);
	tbx__attrs_str(&s->attrs, utf8, utf8, strlen(utf8));
	tbx__attrs_str(&s->attrs, "bad", bad, strlen(bad));
	tbx__attrs_str(&s->attrs, "nul", "a\0b", 3);
	tbx__attrs_int(&s->attrs, "zero", 0);
	tbx__attrs_int(&s->attrs, "least", INT64_MIN);
	tbx__attrs_int(&s->attrs, "big", INT64_MAX);
	tbx__attrs_int(&s->attrs, "minus one", -1);
	tbx__attrs_bool(&s->attrs, "false", 0);
	tbx__attrs_bool(&s->attrs, "true", 1);
	tbx__attrs_str_static(&s->attrs, "messaging.message.id", "m-1", 3);
	tbx__attrs_int_static(&s->attrs, "tokenbox.attempt", 300);
	tbx__span_event_t *e = tbx__span_add_event(s, "duplicate dropped", 1);
	cr_assert(e);
	tbx__attrs_str(&e->attrs, "tokenbox.drop.reason", "token consumed", 14);
	cr_assert(tbx__span_add_event(s, "", 0), "an event without name");
	tbx__span_link_t *l = tbx__span_add_link(s, &other);
	cr_assert(l);
	tbx__attrs_int(&l->attrs, "n", 3);
	cr_assert(tbx__span_add_link(s, &c));
	s->links[1]->tracestate = strdup("k=v");
	s->attrs.dropped = 7;
	s->dropped_events = 128;
	s->dropped_links = 1u << 31;
	s->events[0]->attrs.dropped = 1;
	s->links[0]->attrs.dropped = 2;
	tbx__span_set_status(s, TBX_SPAN_STATUS_ERROR, "dead-lettered: \xff");
	tbx__attrs_str(&res_attrs, "service.instance.id", "w1", 2);
	tbx__attrs_bool(&res_attrs, "b", 1);

	tbx__otlp_resource_t res = {"order-service \xc3\xa9", &res_attrs};
	proto_roundtrip(&s, 1, &res, &buf, &r);
	rs = &r.spans[0];
	/* otc_span checked every field; a few by hand, against literals */
	cr_expect_eq(rs->trace_id.len, 16);
	cr_expect_eq(rs->trace_id.p[0], 0xff);
	cr_expect(pbr_eq(rs->parent_span_id, parent, 8));
	cr_expect(pbr_eq(rs->name, utf8, strlen(utf8)), "valid UTF-8 as is");
	cr_expect(pbr_eq(rs->attrs.v[3].s,
			 "a\xef\xbf\xbd"
			 "b\xef\xbf\xbd"
			 "c\xef\xbf\xbd\xef\xbf\xbd",
			 15),
		  "each invalid byte is U+FFFD");
	cr_expect(pbr_eq(rs->attrs.v[4].s, "a\0b", 3), "NUL is UTF-8");
	cr_expect(pbr_eq(rs->attrs.v[1].s, "", 0) && rs->attrs.v[1].type == 1,
		  "an empty string value is there");
	cr_expect_eq(rs->attrs.v[5].type, 3, "0 is there as an int");
	cr_expect_eq(rs->attrs.v[5].u, 0);
	cr_expect_eq((int64_t)rs->attrs.v[6].u, INT64_MIN);
	cr_expect_eq(rs->attrs.v[9].type, 2, "false is there as a bool");
	cr_expect_eq(rs->attrs.v[9].u, 0);
	cr_expect_eq(rs->kind, 5);
	cr_expect_eq(rs->start, UINT64_MAX - 1);
	cr_expect_eq(rs->end, UINT64_MAX);
	cr_expect_eq(rs->events[1].time, 0);
	cr_expect_null(rs->events[1].name.p, "an empty name is left out");
	cr_expect_eq(rs->dropped_links, 1u << 31);
	cr_expect(pbr_eq(rs->links[1].trace_state, "k=v", 3));
	cr_expect_null(rs->links[0].trace_state.p);
	cr_expect_eq(rs->status_code, 2);
	cr_expect(
	    pbr_eq(rs->status_message, "dead-lettered: \xef\xbf\xbd", 18));
	cr_expect_eq(rs->flags, 1);

	cr_expect_eq(r.resource.n, 5);
	cr_expect(pbr_eq(r.resource.v[0].key, "service.name", 12),
		  "service.name first");
	cr_expect(pbr_eq(res_attr(&r, "service.name")->s,
			 "order-service \xc3\xa9", 16));
	cr_expect(pbr_eq(res_attr(&r, "telemetry.sdk.name")->s, "tokenbox", 8));
	cr_expect(pbr_eq(res_attr(&r, "telemetry.sdk.version")->s,
			 TBX_VERSION_STR, strlen(TBX_VERSION_STR)));
	cr_expect(pbr_eq(res_attr(&r, "service.instance.id")->s, "w1", 2));
	cr_expect_eq(res_attr(&r, "b")->type, 2);
	cr_expect_eq(res_attr(&r, "b")->u, 1);
	cr_expect(pbr_eq(r.scope_name, "tokenbox", 8));
	cr_expect(
	    pbr_eq(r.scope_version, TBX_VERSION_STR, strlen(TBX_VERSION_STR)));
	pbr_request_free(&r);
	tbx__pbuf_free(&buf);
	tbx__attrs_free(&res_attrs);
	tbx__span_free(s);
}

Test(otlp_proto, what_a_span_does_not_have_is_left_out)
{
	tbx__trace_ctx_t c = ctx_of(0x01, 0);
	tbx__span_t *s =
	    tbx__span_new("", TBX_SPAN_KIND_UNSPECIFIED, &c, NULL, 0);
	tbx__pbuf_t buf = {0};
	pbr_request_t r;
	const pbr_span_t *rs;

	cr_assert(s);
	tbx__span_set_status(s, TBX_SPAN_STATUS_OK, "only for errors");
	tbx__otlp_resource_t res = {"svc", NULL};
	proto_roundtrip(&s, 1, &res, &buf, &r);
	rs = &r.spans[0];
	cr_expect(pbr_eq(rs->trace_id, s->trace_id, 16), "ids always");
	cr_expect(pbr_eq(rs->span_id, s->span_id, 8));
	cr_expect_null(rs->parent_span_id.p, "a root has no parent_span_id");
	cr_expect_null(rs->trace_state.p);
	cr_expect_null(rs->name.p);
	cr_expect_eq(rs->attrs.n + rs->n_events + rs->n_links, 0);
	cr_expect_eq(rs->has_flags, 0, "flags 0 left out");
	cr_expect(rs->has_status);
	cr_expect_eq(rs->status_code, 1);
	cr_expect_null(rs->status_message.p, "OK has no message");
	cr_expect_eq(r.resource.n, 3);
	pbr_request_free(&r);

	/* No spans at all: still a request with its resource and scope. */
	proto_roundtrip(NULL, 0, &res, &buf, &r);
	cr_expect(pbr_eq(r.scope_name, "tokenbox", 8));
	pbr_request_free(&r);
	tbx__pbuf_free(&buf);
	tbx__span_free(s);
}

/* Found by fuzz_otlp_proto (fuzz/corpus/otlp_proto/bug_empty_string_first):
 * written back to front, an empty string can be the first thing written,
 * into a buffer not yet allocated (UBSan: offset to a NULL pointer). */
Test(otlp_proto, an_empty_string_first_into_a_new_buffer)
{
	tbx__trace_ctx_t c = ctx_of(0x05, 0);
	tbx__span_t *s =
	    tbx__span_new("s", TBX_SPAN_KIND_INTERNAL, &c, NULL, 1);
	tbx__pbuf_t buf = {0};
	pbr_request_t r;

	cr_assert(s);
	tbx__attrs_str(&s->attrs, "k", "", 0);
	tbx__otlp_resource_t res = {"svc", NULL};
	proto_roundtrip(&s, 1, &res, &buf, &r);
	cr_expect(pbr_eq(r.spans[0].attrs.v[0].s, "", 0));
	pbr_request_free(&r);
	tbx__pbuf_free(&buf);
	tbx__span_free(s);
}

Test(otlp_proto, many_spans_and_attributes_read_back_in_order)
{
	enum { SPANS = 600 };
	tbx__span_t *spans[SPANS];
	tbx__pbuf_t buf = {0};
	pbr_request_t r;
	char key[32], *big = malloc(TBX_SPAN_VALUE_MAX + 100);

	cr_assert(big);
	memset(big, 'x', TBX_SPAN_VALUE_MAX + 100);
	for (int i = 0; i < SPANS; i++) {
		tbx__trace_ctx_t c;
		tbx__trace_id_new(c.trace_id);
		tbx__span_id_new(c.span_id);
		c.flags = 1;
		cr_assert(spans[i] =
			      tbx__span_new("work", TBX_SPAN_KIND_SERVER, &c,
					    c.span_id, (uint64_t)i << 40));
		spans[i]->end_ns = ((uint64_t)i << 40) + 1;
		/* past the bound on the first: dropped and counted */
		for (int k = 0; k < (i ? 20 : TBX_SPAN_ATTRS_MAX + 5); k++) {
			snprintf(key, sizeof(key), "attr.%d", k);
			tbx__attrs_int(&spans[i]->attrs, key,
				       (int64_t)k * 1000003 - i);
		}
		if (i % 7 == 0)
			tbx__attrs_str(&spans[i]->attrs, "attr.0", big,
				       TBX_SPAN_VALUE_MAX + 100);
	}
	tbx__otlp_resource_t res = {"svc", NULL};
	proto_roundtrip(spans, SPANS, &res, &buf, &r);
	cr_expect_eq(r.spans[0].attrs.n, TBX_SPAN_ATTRS_MAX);
	cr_expect_eq(r.spans[0].attrs.dropped, 5);
	cr_expect_eq(r.spans[7].attrs.v[0].s.len, TBX_SPAN_VALUE_MAX,
		     "a long value is cut");
	cr_expect_gt(tbx__pbuf_len(&buf), 600 * 20 * 10);
	pbr_request_free(&r);

	/* The buffer is reused: a small request after a large one. */
	proto_roundtrip(spans + 1, 1, &res, &buf, &r);
	pbr_request_free(&r);
	tbx__pbuf_free(&buf);
	for (int i = 0; i < SPANS; i++)
		tbx__span_free(spans[i]);
	free(big);
}

/* A span holds its first attributes and event and its short strings in
 * place (span.h) and allocates past that room: what is set reads back
 * the same on either side of it, keys set twice included, and freeing
 * it frees what was allocated (ASan). */
Test(otlp_proto, attributes_and_events_past_a_spans_own_room_read_back)
{
	enum { ATTRS = 40, EVENTS = 6, EV_ATTRS = 3 };
	static char keys[ATTRS][16];
	char name[400], vals[ATTRS][200], evname[EVENTS][300];
	size_t lens[ATTRS];
	tbx__trace_ctx_t c = ctx_of(0x07, 1);
	tbx__pbuf_t buf = {0};
	pbr_request_t r;
	const pbr_span_t *rs;
	tbx__span_t *s;

	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0'; /* longer than the span's pool */
	cr_assert(s = tbx__span_new(name, TBX_SPAN_KIND_CONSUMER, &c, NULL, 5));
	s->end_ns = 9;
	for (int k = 0; k < ATTRS; k++) {
		snprintf(keys[k], sizeof(keys[k]), "k.%d", k);
		lens[k] = (size_t)(k * 37) % 150;
		memset(vals[k], 'a' + k % 26, lens[k]);
		if (k % 2)
			tbx__attrs_add_str_static(&s->attrs, keys[k], vals[k],
						  lens[k]);
		else
			tbx__attrs_str(&s->attrs, keys[k], vals[k], lens[k]);
	}
	/* Set again: a short value for a long one and the other way. */
	lens[3] = 180;
	memset(vals[3], 'Z', lens[3]);
	tbx__attrs_str_static(&s->attrs, keys[3], vals[3], lens[3]);
	lens[37] = 2;
	memcpy(vals[37], "yy", 2);
	tbx__attrs_str(&s->attrs, keys[37], vals[37], lens[37]);
	tbx__attrs_int(&s->attrs, keys[5], -5); /* a string made an int */
	for (int e = 0; e < EVENTS; e++) {
		tbx__span_event_t *ev;
		size_t n = e == 2 ? 290 : 6;
		memset(evname[e], 'e' + e, n);
		evname[e][n] = '\0';
		cr_assert(ev = tbx__span_add_event(s, evname[e], 100 + e));
		for (int k = 0; k < EV_ATTRS; k++)
			tbx__attrs_add_str_static(&ev->attrs, keys[k], vals[k],
						  lens[k]);
	}
	tbx__otlp_resource_t res = {"svc", NULL};
	proto_roundtrip(&s, 1, &res, &buf, &r);
	rs = &r.spans[0];
	cr_expect(pbr_eq(rs->name, name, strlen(name)));
	cr_assert_eq(rs->attrs.n, ATTRS);
	cr_expect_eq(rs->attrs.dropped, 0);
	for (int k = 0; k < ATTRS; k++) {
		const pbr_kv_t *kv = &rs->attrs.v[k];
		cr_expect(pbr_eq(kv->key, keys[k], strlen(keys[k])),
			  "key %d in order", k);
		if (k == 5) {
			cr_expect(kv->type == 3 && (int64_t)kv->u == -5);
			continue;
		}
		cr_expect(kv->type == 1 && pbr_eq(kv->s, vals[k], lens[k]),
			  "value %d", k);
	}
	cr_assert_eq(rs->n_events, EVENTS);
	for (int e = 0; e < EVENTS; e++) {
		cr_expect(
		    pbr_eq(rs->events[e].name, evname[e], strlen(evname[e])));
		cr_expect_eq(rs->events[e].time, 100u + (unsigned)e);
		cr_assert_eq(rs->events[e].attrs.n, EV_ATTRS);
		for (int k = 0; k < EV_ATTRS; k++)
			cr_expect(pbr_eq(rs->events[e].attrs.v[k].s, vals[k],
					 lens[k]));
	}
	pbr_request_free(&r);
	tbx__pbuf_free(&buf);
	tbx__span_free(s);
}

Test(otlp_proto, a_collectors_partial_success_is_read)
{
	/* partial_success (1) { rejected_spans (1) = 300,
	 *                       error_message (2) = "old" } */
	static const uint8_t ps[] = {0x0a, 0x08, 0x08, 0xac, 0x02,
				     0x12, 0x03, 'o',  'l',  'd'};
	/* an unknown field (2, fixed32) before it, the order reversed */
	static const uint8_t ps2[] = {0x15, 1,	  2,   3,    4,	   0x0a, 0x06,
				      0x12, 0x01, 'x', 0x08, 0x96, 0x01};
	static const uint8_t cut[] = {0x0a, 0x08, 0x08, 0xac, 0x02};
	static const uint8_t neg[] = {0x0a, 0x0b, 0x08, 0xff, 0xff, 0xff, 0xff,
				      0xff, 0xff, 0xff, 0xff, 0xff, 0x01};

	cr_expect_eq(tbx__otlp_proto_rejected(ps, sizeof(ps)), 300);
	cr_expect_eq(tbx__otlp_proto_rejected(ps2, sizeof(ps2)), 150);
	cr_expect_eq(tbx__otlp_proto_rejected(ps, 0), 0, "an empty answer");
	cr_expect_eq(tbx__otlp_proto_rejected(cut, sizeof(cut)), 0,
		     "a length past the end");
	cr_expect_eq(tbx__otlp_proto_rejected(neg, sizeof(neg)), 0,
		     "a negative count");
	cr_expect_eq(tbx__otlp_proto_rejected((const uint8_t *)"{}", 2), 0,
		     "JSON is not read as protobuf");
}

/* ---- configuration ---- */

static const char *from_list(const char *name, void *opaque)
{
	const char *const *kv = opaque;

	for (; kv[0]; kv += 2)
		if (strcmp(kv[0], name) == 0)
			return kv[1];
	return NULL;
}

static int conf_of(tbx__otel_conf_t *conf, char *err, const char **kv)
{
	return tbx__otel_conf_read(conf, "tokenbox", from_list, kv, err, 512);
}

Test(otel_conf, the_sdk_variables_are_read_and_checked)
{
	tbx__otel_conf_t conf;
	char err[512];

	const char *none[] = {NULL};
	cr_assert_eq(conf_of(&conf, err, none), TBX_OK);
	cr_expect(conf.disabled, "no endpoint: no tracing");

	const char *base[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
			      "http://127.0.0.1:4318", NULL};
	cr_assert_eq(conf_of(&conf, err, base), TBX_OK, "%s", err);
	cr_expect_not(conf.disabled);
	cr_expect_str_eq(conf.endpoint, "http://127.0.0.1:4318/v1/traces");
	cr_expect_str_eq(conf.service_name, "tokenbox");
	cr_expect_eq(conf.queue_max, 2048);
	cr_expect_eq(conf.batch_max, 512);
	cr_expect_eq(conf.delay_ms, 5000);
	cr_expect_eq(conf.timeout_ms, 10000);
	cr_expect_eq(conf.sampler.kind, TBX_SAMPLER_PARENT_ALWAYS_ON);
	cr_expect_eq(conf.protocol, TBX_OTLP_HTTP_PROTOBUF,
		     "http/protobuf by default, as OpenTelemetry's SDKs");

	const char *json[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1",
			      "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", NULL};
	cr_assert_eq(conf_of(&conf, err, json), TBX_OK, "%s", err);
	cr_expect_eq(conf.protocol, TBX_OTLP_HTTP_JSON);
	const char *pb[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
			    "http://a:1",
			    "OTEL_EXPORTER_OTLP_PROTOCOL",
			    "http/json",
			    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
			    "http/protobuf",
			    NULL};
	cr_assert_eq(conf_of(&conf, err, pb), TBX_OK, "%s", err);
	cr_expect_eq(conf.protocol, TBX_OTLP_HTTP_PROTOBUF,
		     "the traces protocol wins");
	const char *pb2[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
			     "http://a:1",
			     "OTEL_EXPORTER_OTLP_PROTOCOL",
			     "http/protobuf",
			     "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
			     "http/json",
			     NULL};
	cr_assert_eq(conf_of(&conf, err, pb2), TBX_OK, "%s", err);
	cr_expect_eq(conf.protocol, TBX_OTLP_HTTP_JSON);

	const char *slash[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
			       "https://c.example/otlp/", NULL};
	cr_assert_eq(conf_of(&conf, err, slash), TBX_OK, "%s", err);
	cr_expect_str_eq(conf.endpoint, "https://c.example/otlp/v1/traces");

	const char *traces[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
				"http://a:1",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
				"http://b:2/custom",
				"OTEL_SERVICE_NAME",
				"orders",
				"OTEL_TRACES_SAMPLER",
				"parentbased_traceidratio",
				"OTEL_TRACES_SAMPLER_ARG",
				"0.01",
				"OTEL_BSP_MAX_QUEUE_SIZE",
				"100",
				"OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
				"10",
				"OTEL_BSP_SCHEDULE_DELAY",
				"250",
				"OTEL_EXPORTER_OTLP_TIMEOUT",
				"3000",
				"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
				"2000",
				"OTEL_EXPORTER_OTLP_PROTOCOL",
				"http/json",
				"OTEL_SDK_DISABLED",
				"false",
				NULL};
	cr_assert_eq(conf_of(&conf, err, traces), TBX_OK, "%s", err);
	cr_expect_str_eq(conf.endpoint, "http://b:2/custom", "used as is");
	cr_expect_str_eq(conf.service_name, "orders");
	cr_expect_eq(conf.sampler.kind, TBX_SAMPLER_PARENT_RATIO);
	cr_expect_float_eq(conf.sampler.ratio, 0.01, 1e-12);
	cr_expect_eq(conf.queue_max, 100);
	cr_expect_eq(conf.batch_max, 10);
	cr_expect_eq(conf.delay_ms, 250);
	cr_expect_eq(conf.timeout_ms, 2000, "the traces timeout wins");

	const char *disabled[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1",
				  "OTEL_SDK_DISABLED", "TRUE", NULL};
	cr_assert_eq(conf_of(&conf, err, disabled), TBX_OK);
	cr_expect(conf.disabled);
	const char *exp_none[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1",
				  "OTEL_TRACES_EXPORTER", "none", NULL};
	cr_assert_eq(conf_of(&conf, err, exp_none), TBX_OK);
	cr_expect(conf.disabled);
}

Test(otel_conf, bad_values_are_refused_with_the_variable_named)
{
	tbx__otel_conf_t conf;
	char err[512];
	static const struct {
		const char *var, *value, *says;
	} bad[] = {
	    {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc",
	     "'grpc' is not offered: tokenbox exports OTLP over HTTP only"},
	    {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc", "http/protobuf"},
	    {"OTEL_EXPORTER_OTLP_PROTOCOL", "HTTP/JSON", "not a protocol"},
	    {"OTEL_EXPORTER_OTLP_PROTOCOL", "udp", "not a protocol"},
	    {"OTEL_SDK_DISABLED", "yes", "neither true nor false"},
	    {"OTEL_TRACES_EXPORTER", "zipkin", "not offered"},
	    {"OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318", "not an http"},
	    {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://", "no host"},
	    {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://a b/", "no host"},
	    {"OTEL_TRACES_SAMPLER", "xray", "not one of"},
	    {"OTEL_TRACES_SAMPLER_ARG", "2", "ratio from 0 to 1"},
	    {"OTEL_BSP_MAX_QUEUE_SIZE", "0", "whole number"},
	    {"OTEL_BSP_MAX_QUEUE_SIZE", "12x", "whole number"},
	    {"OTEL_BSP_SCHEDULE_DELAY", "-5", "whole number"},
	    {"OTEL_EXPORTER_OTLP_TIMEOUT", "99999999999999999999",
	     "whole number"},
	    {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5000", "more than"},
	    {"OTEL_EXPORTER_OTLP_HEADERS", "a=b", "not offered"},
	    {"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", "not offered"},
	    {"OTEL_SERVICE_NAME", "a\tb", "control"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *kv[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
				    "http://127.0.0.1:4318",
				    "OTEL_TRACES_SAMPLER",
				    "traceidratio",
				    bad[i].var,
				    bad[i].value,
				    NULL};
		if (strcmp(bad[i].var, "OTEL_EXPORTER_OTLP_ENDPOINT") == 0)
			kv[0] = "UNUSED";
		if (strcmp(bad[i].var, "OTEL_TRACES_SAMPLER") == 0)
			kv[2] = "UNUSED";
		err[0] = '\0';
		cr_expect_eq(conf_of(&conf, err, kv), TBX_ECONF, "%s=%s taken",
			     bad[i].var, bad[i].value);
		cr_expect(strstr(err, bad[i].var) && strstr(err, bad[i].says),
			  "%s=%s: '%s'", bad[i].var, bad[i].value, err);
	}
}

/* ---- the exporter against local servers ---- */

typedef struct collector {
	struct MHD_Daemon *d;
	int port;
	unsigned status; /* what it answers */
	const char *answer;
	size_t answer_len;
	pthread_mutex_t lock;
	size_t requests, spans;
	char *last; /* the last body */
	size_t last_len;
	int last_protobuf; /* it came as application/x-protobuf */
} collector_t;

typedef struct upload {
	char *p;
	size_t len;
} upload_t;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
				  const char *url, const char *method,
				  const char *version, const char *data,
				  size_t *data_size, void **con_cls)
{
	collector_t *c = cls;
	upload_t *u = *con_cls;
	struct MHD_Response *r;
	enum MHD_Result ret;

	(void)version;
	if (!u) {
		*con_cls = calloc(1, sizeof(upload_t));
		return MHD_YES;
	}
	if (*data_size) {
		u->p = realloc(u->p, u->len + *data_size + 1);
		memcpy(u->p + u->len, data, *data_size);
		u->len += *data_size;
		u->p[u->len] = '\0';
		*data_size = 0;
		return MHD_YES;
	}
	pthread_mutex_lock(&c->lock);
	c->requests++;
	const char *type =
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
	if (strcmp(method, "POST") == 0 && strcmp(url, "/v1/traces") == 0 &&
	    u->p && type && strcmp(type, "application/x-protobuf") == 0) {
		pbr_request_t req;
		cr_expect_eq(pbr_request((const uint8_t *)u->p, u->len, &req),
			     0, "the body is not an OTLP protobuf request");
		c->spans += req.n_spans;
		pbr_request_free(&req);
		free(c->last);
		c->last = u->p;
		c->last_len = u->len;
		c->last_protobuf = 1;
		u->p = NULL;
	} else if (strcmp(method, "POST") == 0 &&
		   strcmp(url, "/v1/traces") == 0 && u->p) {
		cJSON *doc = cJSON_Parse(u->p), *rs;
		cr_expect(type && strcmp(type, "application/json") == 0,
			  "Content-Type %s", type ? type : "(none)");
		cr_expect(doc, "the body is not JSON");
		cJSON_ArrayForEach(rs,
				   cJSON_GetObjectItem(doc, "resourceSpans"))
		{
			cJSON *ss;
			cJSON_ArrayForEach(
			    ss, cJSON_GetObjectItem(rs, "scopeSpans"))
			    c->spans += (size_t)cJSON_GetArraySize(
			    cJSON_GetObjectItem(ss, "spans"));
		}
		cJSON_Delete(doc);
		free(c->last);
		c->last = u->p;
		c->last_len = u->len;
		c->last_protobuf = 0;
		u->p = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	r = MHD_create_response_from_buffer(c->answer_len, (void *)c->answer,
					    MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(r, "Content-Type",
				type ? type : "application/json");
	ret = MHD_queue_response(conn, c->status, r);
	MHD_destroy_response(r);
	return ret;
}

static void on_done(void *cls, struct MHD_Connection *conn, void **con_cls,
		    enum MHD_RequestTerminationCode toe)
{
	upload_t *u = *con_cls;

	(void)cls, (void)conn, (void)toe;
	if (u) {
		free(u->p);
		free(u);
	}
	*con_cls = NULL;
}

static void collector_start_n(collector_t *c, unsigned status,
			      const char *answer, size_t answer_len)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->lock, NULL);
	c->status = status;
	c->answer = answer;
	c->answer_len = answer_len;
	c->d = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
	    on_request, c, MHD_OPTION_NOTIFY_COMPLETED, on_done, c,
	    MHD_OPTION_END);
	cr_assert(c->d);
	c->port = MHD_get_daemon_info(c->d, MHD_DAEMON_INFO_BIND_PORT)->port;
}

static void collector_start(collector_t *c, unsigned status, const char *answer)
{
	collector_start_n(c, status, answer, strlen(answer));
}

static void collector_stop(collector_t *c)
{
	MHD_stop_daemon(c->d);
	free(c->last);
	pthread_mutex_destroy(&c->lock);
}

static size_t collector_spans(collector_t *c)
{
	size_t n;

	pthread_mutex_lock(&c->lock);
	n = c->spans;
	pthread_mutex_unlock(&c->lock);
	return n;
}

static tbx__otel_conf_t conf_for(int port, size_t queue, size_t batch,
				 int64_t timeout_ms)
{
	tbx__otel_conf_t conf;
	char url[128], err[256];
	const char *kv[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", url, NULL};

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	cr_assert_eq(
	    tbx__otel_conf_read(&conf, "test", from_list, kv, err, sizeof(err)),
	    TBX_OK, "%s", err);
	conf.queue_max = queue;
	conf.batch_max = batch;
	conf.timeout_ms = timeout_ms;
	conf.delay_ms = 50;
	return conf;
}

static tbx__span_t *a_span(int i)
{
	tbx__trace_ctx_t c;
	tbx__span_t *s;

	tbx__trace_id_new(c.trace_id);
	tbx__span_id_new(c.span_id);
	c.flags = 1;
	s = tbx__span_new("work", TBX_SPAN_KIND_INTERNAL, &c, NULL,
			  tbx__now_ns());
	cr_assert(s);
	tbx__attrs_int(&s->attrs, "i", i);
	s->end_ns = tbx__now_ns();
	return s;
}

/* Polls @p done(@p opaque) until it holds, for at most @p seconds (times
 * the sanitizers' factor); an outcome, not a time, is what is checked. */
static int wait_for(int (*done)(void *), void *opaque, int seconds)
{
	for (int i = 0; i < seconds * 20 * tt_time_factor(); i++) {
		if (done(opaque))
			return 1;
		usleep(50000);
	}
	return done(opaque);
}

static int exported_all(void *opaque)
{
	void **p = opaque;
	tbx__exporter_stats_t st;

	tbx__exporter_stats(p[0], &st);
	return st.exported + st.failed == *(uint64_t *)p[1];
}

static void every_span_reaches(tbx__otlp_protocol_t protocol)
{
	collector_t c;
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	tbx__exporter_stats_t st;
	char err[256];
	uint64_t want = 1000;
	void *args[2];

	collector_start(&c, 200, protocol == TBX_OTLP_HTTP_JSON ? "{}" : "");
	conf = conf_for(c.port, 4096, 100, 10000);
	conf.protocol = protocol;
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)), "%s",
		  err);
	for (uint64_t i = 0; i < want; i++)
		cr_assert_eq(tbx__exporter_enqueue(e, a_span((int)i)), 0);
	tbx__exporter_kick(e);
	args[0] = e;
	args[1] = &want;
	cr_assert(wait_for(exported_all, args, 60), "not all exported");
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.exported, want);
	cr_expect_eq(st.failed, 0);
	cr_expect_eq(st.dropped, 0);
	cr_expect_geq(st.requests, 10, "batches of at most 100");
	cr_expect_eq(collector_spans(&c), want);
	pthread_mutex_lock(&c.lock);
	cr_expect_eq(c.last_protobuf, protocol == TBX_OTLP_HTTP_PROTOBUF,
		     "the Content-Type of the protocol");
	if (protocol == TBX_OTLP_HTTP_JSON) {
		cr_expect(strstr(c.last, "\"service.name\""));
		cr_expect(strstr(c.last, "\"stringValue\":\"test\""));
	} else {
		pbr_request_t r;
		cr_assert_eq(
		    pbr_request((const uint8_t *)c.last, c.last_len, &r), 0);
		cr_expect(pbr_eq(r.resource.v[0].key, "service.name", 12));
		cr_expect(pbr_eq(r.resource.v[0].s, "test", 4));
		cr_expect_eq(r.spans[0].attrs.n, 1);
		cr_expect(pbr_eq(r.spans[0].name, "work", 4));
		pbr_request_free(&r);
	}
	pthread_mutex_unlock(&c.lock);
	tbx__exporter_destroy(e, 5000);
	collector_stop(&c);
}

Test(exporter, every_span_reaches_the_collector_as_protobuf, .timeout = 120)
{
	every_span_reaches(TBX_OTLP_HTTP_PROTOBUF);
}

Test(exporter, every_span_reaches_the_collector_as_json, .timeout = 120)
{
	every_span_reaches(TBX_OTLP_HTTP_JSON);
}

Test(exporter, what_is_queued_is_sent_at_shutdown, .timeout = 120)
{
	collector_t c;
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	char err[256];

	collector_start(&c, 200, "{}");
	conf = conf_for(c.port, 4096, 512, 10000);
	conf.delay_ms = 3600000; /* only the shutdown sends */
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 37; i++)
		tbx__exporter_enqueue(e, a_span(i));
	tbx__exporter_destroy(e, 30000);
	cr_expect_eq(collector_spans(&c), 37);
	collector_stop(&c);
}

/* A span of the exporter's, filled past its own room: attributes,
 * events and a link allocated beside it, a tracestate and a status
 * message. */
static tbx__span_t *a_full_span(tbx__exporter_t *e, int i)
{
	tbx__trace_ctx_t c;
	tbx__span_t *s;
	char key[32], val[600];

	tbx__trace_id_new(c.trace_id);
	tbx__span_id_new(c.span_id);
	c.flags = 1;
	s = tbx__exporter_span_new(e, "full", TBX_SPAN_KIND_CONSUMER, &c, NULL,
				   tbx__now_ns());
	cr_assert(s);
	memset(val, 'v', sizeof(val));
	for (int k = 0; k < TBX_SPAN_INLINE_ATTRS + 8; k++) {
		snprintf(key, sizeof(key), "k%d", k);
		tbx__attrs_str(&s->attrs, key, val, k == 0 ? sizeof(val) : 8);
	}
	for (int k = 0; k < 3; k++)
		tbx__attrs_int(
		    &tbx__span_add_event(s, "ev", tbx__now_ns())->attrs, "n",
		    k);
	tbx__span_add_link(s, &c);
	tbx__span_set_tracestate(s, "a=b");
	tbx__span_set_status(s, TBX_SPAN_STATUS_ERROR, "failed");
	tbx__attrs_int(&s->attrs, "i", i);
	s->end_ns = tbx__now_ns();
	return s;
}

static int free_list_holds(void *opaque)
{
	void **p = opaque;
	tbx__exporter_stats_t st;

	tbx__exporter_stats(p[0], &st);
	return st.free_spans == *(uint64_t *)p[1];
}

Test(exporter, spans_sent_come_back_for_reuse_cleared, .timeout = 120)
{
	collector_t c;
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	tbx__exporter_stats_t st;
	tbx__trace_ctx_t ctx;
	char err[256];
	uint64_t want = 50, sent = 0;
	void *args[2] = {NULL, &sent};

	collector_start(&c, 200, "");
	/* Sent when kicked only: the counts are read between the sends. */
	conf = conf_for(c.port, 4096, 2 * want, 10000);
	conf.delay_ms = 3600000;
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)), "%s",
		  err);
	args[0] = e;
	/* First round: new spans, each with allocations of its own. */
	for (uint64_t i = 0; i < want; i++)
		cr_assert_eq(tbx__exporter_enqueue(e, a_full_span(e, (int)i)),
			     0);
	tbx__exporter_kick(e);
	sent = want;
	cr_assert(wait_for(exported_all, args, 60), "not all exported");
	cr_assert(wait_for(free_list_holds, args, 60),
		  "the spans sent are not handed back");
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.reused, 0);
	/* Second round: every span is one of the first round's, and holds
	 * nothing of it. */
	tbx__trace_id_new(ctx.trace_id);
	tbx__span_id_new(ctx.span_id);
	ctx.flags = 1;
	for (uint64_t i = 0; i < want; i++) {
		tbx__span_t *s = tbx__exporter_span_new(
		    e, "again", TBX_SPAN_KIND_PRODUCER, &ctx, NULL, 1);
		cr_assert(s);
		tbx__attrs_int(&s->attrs, "i", (int64_t)i);
		s->end_ns = 2;
		cr_assert_eq(tbx__exporter_enqueue(e, s), 0);
	}
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.reused, want, "every span of the second round reused");
	cr_expect_eq(st.free_spans, 0);
	tbx__exporter_kick(e);
	sent = 2 * want;
	cr_assert(wait_for(exported_all, args, 60), "not all exported");
	pthread_mutex_lock(&c.lock);
	{
		pbr_request_t r;
		cr_assert_eq(
		    pbr_request((const uint8_t *)c.last, c.last_len, &r), 0);
		cr_assert_eq(r.n_spans, want);
		for (size_t i = 0; i < r.n_spans; i++) {
			const pbr_span_t *ps = &r.spans[i];
			cr_expect(pbr_eq(ps->name, "again", 5));
			cr_expect_eq(ps->kind, TBX_SPAN_KIND_PRODUCER);
			cr_expect_eq(ps->attrs.n, 1);
			cr_expect_eq(ps->attrs.v[0].u, i);
			cr_expect_eq(ps->n_events, 0);
			cr_expect_eq(ps->n_links, 0);
			cr_expect_null(ps->trace_state.p);
			cr_expect_eq(ps->has_status, 0);
			cr_expect_eq(ps->start, 1);
		}
		pbr_request_free(&r);
	}
	pthread_mutex_unlock(&c.lock);
	tbx__exporter_destroy(e, 5000);
	collector_stop(&c);
}

static tbx__span_t *a_plain_span(tbx__exporter_t *e)
{
	tbx__trace_ctx_t c;
	tbx__span_t *s;

	tbx__trace_id_new(c.trace_id);
	tbx__span_id_new(c.span_id);
	c.flags = 1;
	cr_assert(s = tbx__exporter_span_new(e, "s", TBX_SPAN_KIND_INTERNAL, &c,
					     NULL, 1));
	s->end_ns = 2;
	return s;
}

Test(exporter, spans_listed_and_held_stay_within_the_queues_bound,
     .timeout = 120)
{
	collector_t c;
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	tbx__exporter_stats_t st;
	tbx__span_t *mine[40];
	char err[256];
	uint64_t sent = 0, queue = 40;
	void *args[2] = {NULL, &sent};

	collector_start(&c, 200, "");
	/* Sent when kicked or full, once all are queued: no span sent and
	 * come back is taken again while a round is queued. */
	conf = conf_for(c.port, queue, queue, 10000);
	conf.delay_ms = 3600000;
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)), "%s",
		  err);
	args[0] = e;
	/* A full queue, sent: every span comes back. */
	for (uint64_t i = 0; i < queue; i++)
		cr_assert_eq(tbx__exporter_enqueue(e, a_full_span(e, (int)i)),
			     0);
	tbx__exporter_kick(e);
	sent += queue;
	cr_assert(wait_for(exported_all, args, 60), "not all exported");
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.free_spans, queue);
	/* The caller takes them all and keeps them; a full queue of others
	 * is sent and comes back. */
	for (uint64_t i = 0; i < queue; i++)
		mine[i] = a_plain_span(e);
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.free_spans, 0);
	cr_expect_eq(st.reused, queue);
	for (uint64_t i = 0; i < queue; i++)
		cr_assert_eq(tbx__exporter_enqueue(e, a_plain_span(e)), 0);
	tbx__exporter_kick(e);
	sent += queue;
	cr_assert(wait_for(exported_all, args, 60), "not all exported");
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.free_spans, queue);
	/* The caller's come back to a list already at the bound: freed. */
	for (uint64_t i = 0; i < queue; i++)
		cr_assert_eq(tbx__exporter_enqueue(e, mine[i]), 0);
	tbx__exporter_kick(e);
	sent += queue;
	cr_assert(wait_for(exported_all, args, 60), "not all exported");
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.free_spans, queue, "the list stays at the bound");
	cr_expect_eq(st.exported, 3 * queue);
	cr_expect_eq(collector_spans(&c), 3 * queue);
	tbx__exporter_destroy(e, 5000);
	collector_stop(&c);
}

Test(exporter, refusals_and_partial_success_are_counted, .timeout = 120)
{
	collector_t c;
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	tbx__exporter_stats_t st;
	char err[256];
	uint64_t want = 20;
	void *args[2] = {NULL, &want};

	collector_start(&c, 503, "busy");
	conf = conf_for(c.port, 100, 10, 10000);
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 20; i++)
		tbx__exporter_enqueue(e, a_span(i));
	tbx__exporter_kick(e);
	args[0] = e;
	cr_assert(wait_for(exported_all, args, 60));
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.failed, 20);
	cr_expect_eq(st.exported, 0);
	cr_expect_eq(st.request_errors, st.requests);
	cr_expect_geq(st.requests, 2);
	tbx__exporter_destroy(e, 1000);
	collector_stop(&c);

	/* partialSuccess, in the encoding of the request */
	static const char ps_pb[] = {0x0a, 0x0b, 0x08, 0x03, 0x12, 0x07, 't',
				     'o',  'o',	 ' ',  'o',  'l',  'd'};
	for (int json = 0; json < 2; json++) {
		if (json)
			collector_start(
			    &c, 200,
			    "{\"partialSuccess\":{\"rejectedSpans\":\"3\","
			    "\"errorMessage\":\"too old\"}}");
		else
			collector_start_n(&c, 200, ps_pb, sizeof(ps_pb));
		conf = conf_for(c.port, 100, 10, 10000);
		conf.protocol =
		    json ? TBX_OTLP_HTTP_JSON : TBX_OTLP_HTTP_PROTOBUF;
		conf.delay_ms = 3600000; /* one request, of all 10 */
		cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
		for (int i = 0; i < 10; i++)
			tbx__exporter_enqueue(e, a_span(i));
		want = 10;
		args[0] = e;
		tbx__exporter_kick(e);
		cr_assert(wait_for(exported_all, args, 60));
		tbx__exporter_stats(e, &st);
		cr_expect_eq(st.exported, 7, "json %d", json);
		cr_expect_eq(st.failed, 3, "json %d", json);
		tbx__exporter_destroy(e, 1000);
		collector_stop(&c);
	}
}

/* A port nobody listens on. */
static int dead_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

Test(exporter, a_dead_collector_loses_spans_counted_never_waited_for,
     .timeout = 120)
{
	tbx__otel_conf_t conf = conf_for(dead_port(), 50, 10, 2000);
	tbx__exporter_t *e;
	tbx__exporter_stats_t st;
	char err[256];
	uint64_t queued = 0, dropped = 0;

	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 5000; i++) {
		if (tbx__exporter_enqueue(e, a_span(i)) == 0)
			queued++;
		else
			dropped++;
	}
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.enqueued, queued);
	cr_expect_eq(st.dropped, dropped);
	/* How many were dropped depends on how fast the refusals come: the
	 * never-answering collector below pins that down. */
	tbx__exporter_destroy(e, 2000);

	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 500; i++)
		tbx__exporter_enqueue(e, a_span(i));
	tbx__exporter_kick(e);
	uint64_t all = 500;
	void *args[2] = {e, &all};
	/* Every span is either refused at the door or lost in a failed
	 * request; nothing stays held. */
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.enqueued + st.dropped, 500);
	all = st.enqueued;
	cr_assert(wait_for(exported_all, args, 60));
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.exported, 0);
	cr_expect_eq(st.failed, st.enqueued);
	cr_expect_gt(st.request_errors, 0);
	cr_expect_eq(st.held, 0);
	tbx__exporter_destroy(e, 2000);
}

/* A server that takes connections into its backlog and never reads or
 * answers: every request hangs until its timeout. */
Test(exporter, a_collector_that_never_answers_never_stalls_the_producer,
     .timeout = 180)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	tbx__exporter_stats_t st;
	char err[256];

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	cr_assert(listen(fd, 16) == 0);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	/* A request timeout far longer than the test: only the shutdown's
	 * bound can end the stuck request. */
	conf = conf_for(ntohs(sa.sin_port), 100, 10, 600000);
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 10; i++)
		tbx__exporter_enqueue(e, a_span(i));
	tbx__exporter_kick(e);
	/* The thread is stuck in its request now, or about to be; the
	 * producer goes on regardless, 100000 spans, and is never held. */
	for (int i = 0; i < 100000; i++)
		tbx__exporter_enqueue(e, a_span(i));
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.exported, 0);
	cr_expect_leq(st.held, 100, "the queue's bound holds");
	cr_expect_eq(st.enqueued + st.dropped, 100010);
	cr_expect_geq(st.dropped, 100010 - 100 - 10);
	/* Shutdown ends the stuck request within its bound (the test's
	 * timeout would catch a hang). */
	tbx__exporter_destroy(e, 500);
	close(fd);
}
