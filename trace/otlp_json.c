/*
 * OTLP/HTTP JSON encoder (see otlp_json.h).  A small hand encoder: it
 * writes what the spans hold in one pass, without a document tree.
 */
#include "trace/otlp_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenbox/tokenbox.h"

void tbx__jbuf_free(tbx__jbuf_t *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static int reserve(tbx__jbuf_t *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->oom)
		return -1;
	if (b->len + more + 1 <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 1024;
	while (cap < b->len + more + 1)
		cap *= 2;
	if (!(p = realloc(b->p, cap))) {
		b->oom = 1;
		return -1;
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

static void put(tbx__jbuf_t *b, const char *s, size_t n)
{
	if (reserve(b, n) != 0)
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void puts_(tbx__jbuf_t *b, const char *s)
{
	put(b, s, strlen(s));
}

size_t tbx__utf8_seq(const unsigned char *s, size_t left)
{
	unsigned char c = s[0];
	size_t n;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, cp = c & 0x07;
	else
		return 0;
	if (left < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return n;
}

int tbx__json_str(tbx__jbuf_t *b, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	/* At most 6 bytes out per byte in (\u00XX), 3 for U+FFFD. */
	if (len > (SIZE_MAX - 3) / 6 || reserve(b, len * 6 + 2) != 0)
		return -1;
	b->p[b->len++] = '"';
	while (i < len) {
		unsigned char c = u[i];
		size_t n, run;

		/* A run of bytes that stand for themselves, copied at once:
		 * most of what spans hold (keys, names, ids). */
		for (run = i; run < len && u[run] >= 0x20 && u[run] < 0x80 &&
			      u[run] != '"' && u[run] != '\\';
		     run++)
			;
		if (run > i) {
			memcpy(b->p + b->len, u + i, run - i);
			b->len += run - i;
			i = run;
			continue;
		}
		if (c == '"' || c == '\\') {
			b->p[b->len++] = '\\';
			b->p[b->len++] = (char)c;
			i++;
			continue;
		}
		if (c < 0x20) {
			static const char hex[] = "0123456789abcdef";
			char *o = b->p + b->len;
			switch (c) {
			case '\n':
				memcpy(o, "\\n", 2), b->len += 2;
				break;
			case '\r':
				memcpy(o, "\\r", 2), b->len += 2;
				break;
			case '\t':
				memcpy(o, "\\t", 2), b->len += 2;
				break;
			default:
				memcpy(o, "\\u00", 4);
				o[4] = hex[c >> 4];
				o[5] = hex[c & 0xf];
				b->len += 6;
			}
			i++;
			continue;
		}
		if ((n = tbx__utf8_seq(u + i, len - i)) != 0) {
			memcpy(b->p + b->len, u + i, n);
			b->len += n;
			i += n;
		} else {
			memcpy(b->p + b->len, "\xef\xbf\xbd", 3);
			b->len += 3;
			i++;
		}
	}
	b->p[b->len++] = '"';
	b->p[b->len] = '\0';
	return 0;
}

static void cstr(tbx__jbuf_t *b, const char *s)
{
	tbx__json_str(b, s, strlen(s));
}

static void hexid(tbx__jbuf_t *b, const uint8_t *id, size_t n)
{
	char hex[2 * TBX_TRACE_ID_SIZE + 1];

	tbx__hex(id, n, hex);
	put(b, "\"", 1);
	put(b, hex, 2 * n);
	put(b, "\"", 1);
}

/* The decimal digits of @p v, written backwards from @p end; returns
 * where they start (snprintf's format parsing cost more than the rest of
 * a span's numbers together). */
static char *dec(char *end, uint64_t v)
{
	do {
		*--end = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return end;
}

static void u64str(tbx__jbuf_t *b, uint64_t v)
{
	char num[24], *e = num + sizeof(num), *p;

	*--e = '"';
	p = dec(e, v);
	*--p = '"';
	put(b, p, (size_t)(num + sizeof(num) - p));
}

static void u32num(tbx__jbuf_t *b, uint32_t v)
{
	char num[12], *p = dec(num + sizeof(num), v);

	put(b, p, (size_t)(num + sizeof(num) - p));
}

/* "N"}} for an intValue: the quoted decimal of @p v and the closing
 * braces. */
static void i64str_close(tbx__jbuf_t *b, int64_t v)
{
	char num[32], *e = num + sizeof(num), *p;
	/* |INT64_MIN| does not fit an int64_t: negated as unsigned. */
	uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

	e -= 3;
	memcpy(e, "\"}}", 3);
	p = dec(e, m);
	if (v < 0)
		*--p = '-';
	*--p = '"';
	put(b, p, (size_t)(num + sizeof(num) - p));
}

static void attr_json(tbx__jbuf_t *b, const tbx__attr_t *at)
{
	puts_(b, "{\"key\":");
	if (at->key_static) { /* a literal of ours: nothing to escape */
		put(b, "\"", 1);
		puts_(b, at->key);
		put(b, "\"", 1);
	} else {
		cstr(b, at->key);
	}
	switch (at->type) {
	case TBX_ATTR_STRING:
		puts_(b, ",\"value\":{\"stringValue\":");
		tbx__json_str(b, at->v.s, at->len);
		puts_(b, "}}");
		break;
	case TBX_ATTR_INT:
		puts_(b, ",\"value\":{\"intValue\":");
		i64str_close(b, at->v.i);
		break;
	case TBX_ATTR_BOOL:
		puts_(b, at->v.b ? ",\"value\":{\"boolValue\":true}}"
				 : ",\"value\":{\"boolValue\":false}}");
		break;
	}
}

/* ,"attributes":[...] and ,"droppedAttributesCount":N, when any. */
static void attrs_json(tbx__jbuf_t *b, const tbx__attrs_t *a)
{
	if (a->n) {
		puts_(b, ",\"attributes\":[");
		for (size_t i = 0; i < a->n; i++) {
			if (i)
				put(b, ",", 1);
			attr_json(b, &a->v[i]);
		}
		put(b, "]", 1);
	}
	if (a->dropped) {
		puts_(b, ",\"droppedAttributesCount\":");
		u32num(b, a->dropped);
	}
}

static void span_json(tbx__jbuf_t *b, const tbx__span_t *s)
{
	puts_(b, "{\"traceId\":");
	hexid(b, s->trace_id, TBX_TRACE_ID_SIZE);
	puts_(b, ",\"spanId\":");
	hexid(b, s->span_id, TBX_SPAN_ID_SIZE);
	if (!tbx__id_is_zero(s->parent_id, TBX_SPAN_ID_SIZE)) {
		puts_(b, ",\"parentSpanId\":");
		hexid(b, s->parent_id, TBX_SPAN_ID_SIZE);
	}
	if (s->tracestate) {
		puts_(b, ",\"traceState\":");
		cstr(b, s->tracestate);
	}
	puts_(b, ",\"flags\":");
	u32num(b, s->flags);
	puts_(b, ",\"name\":");
	cstr(b, s->name);
	puts_(b, ",\"kind\":");
	u32num(b, (uint32_t)s->kind);
	puts_(b, ",\"startTimeUnixNano\":");
	u64str(b, s->start_ns);
	puts_(b, ",\"endTimeUnixNano\":");
	u64str(b, s->end_ns);
	attrs_json(b, &s->attrs);
	if (s->n_events) {
		puts_(b, ",\"events\":[");
		for (size_t i = 0; i < s->n_events; i++) {
			const tbx__span_event_t *ev = s->events[i];
			if (i)
				put(b, ",", 1);
			puts_(b, "{\"timeUnixNano\":");
			u64str(b, ev->time_ns);
			puts_(b, ",\"name\":");
			cstr(b, ev->name);
			attrs_json(b, &ev->attrs);
			put(b, "}", 1);
		}
		put(b, "]", 1);
	}
	if (s->dropped_events) {
		puts_(b, ",\"droppedEventsCount\":");
		u32num(b, s->dropped_events);
	}
	if (s->n_links) {
		puts_(b, ",\"links\":[");
		for (size_t i = 0; i < s->n_links; i++) {
			const tbx__span_link_t *ln = s->links[i];
			if (i)
				put(b, ",", 1);
			puts_(b, "{\"traceId\":");
			hexid(b, ln->trace_id, TBX_TRACE_ID_SIZE);
			puts_(b, ",\"spanId\":");
			hexid(b, ln->span_id, TBX_SPAN_ID_SIZE);
			if (ln->tracestate) {
				puts_(b, ",\"traceState\":");
				cstr(b, ln->tracestate);
			}
			attrs_json(b, &ln->attrs);
			put(b, "}", 1);
		}
		put(b, "]", 1);
	}
	if (s->dropped_links) {
		puts_(b, ",\"droppedLinksCount\":");
		u32num(b, s->dropped_links);
	}
	if (s->status != TBX_SPAN_STATUS_UNSET) {
		puts_(b, ",\"status\":{\"code\":");
		u32num(b, (uint32_t)s->status);
		if (s->status_msg) {
			puts_(b, ",\"message\":");
			cstr(b, s->status_msg);
		}
		put(b, "}", 1);
	}
	put(b, "}", 1);
}

int tbx__otlp_json_encode(tbx__span_t *const *spans, size_t n,
			  const tbx__otlp_resource_t *res, tbx__jbuf_t *out)
{
	puts_(out, "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
		   "{\"key\":\"service.name\",\"value\":{\"stringValue\":");
	cstr(out, res->service_name);
	puts_(out,
	      "}},{\"key\":\"telemetry.sdk.name\",\"value\":{"
	      "\"stringValue\":\"tokenbox\"}},{\"key\":\"telemetry.sdk."
	      "version\",\"value\":{\"stringValue\":\"" TBX_VERSION_STR "\"}}");
	if (res->attrs) {
		for (size_t i = 0; i < res->attrs->n; i++) {
			put(out, ",", 1);
			attr_json(out, &res->attrs->v[i]);
		}
	}
	puts_(out, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"tokenbox\","
		   "\"version\":\"" TBX_VERSION_STR "\"},\"spans\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			put(out, ",", 1);
		span_json(out, spans[i]);
	}
	puts_(out, "]}]}]}");
	return out->oom ? -1 : 0;
}
