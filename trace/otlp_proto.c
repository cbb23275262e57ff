/*
 * OTLP/HTTP protobuf encoder (see otlp_proto.h).  Everything is written
 * back to front: the last field of a message first, a message's contents
 * before its length and tag.  The field numbers are those of
 * opentelemetry-proto v1 (trace/v1/trace.proto, common/v1/common.proto,
 * resource/v1/resource.proto, collector/trace/v1/trace_service.proto).
 */
#include "trace/otlp_proto.h"

#include <stdlib.h>
#include <string.h>

#include "tokenbox/tokenbox.h"

/* Wire types. */
enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* Field numbers, by message. */
enum {
	REQ_RESOURCE_SPANS = 1, /* ExportTraceServiceRequest */
	RS_RESOURCE = 1,	/* ResourceSpans */
	RS_SCOPE_SPANS = 2,
	RES_ATTRIBUTES = 1, /* Resource */
	SS_SCOPE = 1,	    /* ScopeSpans */
	SS_SPANS = 2,
	SCOPE_NAME = 1, /* InstrumentationScope */
	SCOPE_VERSION = 2,
	SPAN_TRACE_ID = 1, /* Span */
	SPAN_SPAN_ID = 2,
	SPAN_TRACE_STATE = 3,
	SPAN_PARENT_SPAN_ID = 4,
	SPAN_NAME = 5,
	SPAN_KIND = 6,
	SPAN_START = 7,
	SPAN_END = 8,
	SPAN_ATTRIBUTES = 9,
	SPAN_DROPPED_ATTRIBUTES = 10,
	SPAN_EVENTS = 11,
	SPAN_DROPPED_EVENTS = 12,
	SPAN_LINKS = 13,
	SPAN_DROPPED_LINKS = 14,
	SPAN_STATUS = 15,
	SPAN_FLAGS = 16,
	EVENT_TIME = 1, /* Span.Event */
	EVENT_NAME = 2,
	EVENT_ATTRIBUTES = 3,
	EVENT_DROPPED_ATTRIBUTES = 4,
	LINK_TRACE_ID = 1, /* Span.Link */
	LINK_SPAN_ID = 2,
	LINK_TRACE_STATE = 3,
	LINK_ATTRIBUTES = 4,
	LINK_DROPPED_ATTRIBUTES = 5,
	STATUS_MESSAGE = 2, /* Status */
	STATUS_CODE = 3,
	KV_KEY = 1, /* KeyValue */
	KV_VALUE = 2,
	ANY_STRING = 1, /* AnyValue */
	ANY_BOOL = 2,
	ANY_INT = 3,
	RESP_PARTIAL_SUCCESS = 1, /* ExportTraceServiceResponse */
	PS_REJECTED_SPANS = 1,	  /* ExportTracePartialSuccess */
};

void tbx__pbuf_free(tbx__pbuf_t *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* Makes room for @p more bytes before b->pos: what is written so far
 * moves to the end of a larger buffer.  Only room() calls it. */
static int grow(tbx__pbuf_t *b, size_t more)
{
	size_t used = b->cap - b->pos, cap;
	uint8_t *p;

	if (b->oom)
		return -1;
	if (more > SIZE_MAX / 4 - used) {
		b->oom = 1;
		return -1;
	}
	cap = b->cap ? b->cap : 1024;
	while (cap < used + more)
		cap *= 2;
	if (!(p = malloc(cap))) {
		b->oom = 1;
		return -1;
	}
	if (used)
		memcpy(p + cap - used, b->p + b->pos, used);
	free(b->p);
	b->p = p;
	b->cap = cap;
	b->pos = cap - used;
	return 0;
}

/* Room for @p n bytes before b->pos: 0, or -1 when out of memory.  The
 * check is inline and a compare; growing is the rare case.  (A write of
 * 0 bytes into a buffer not yet allocated needs none: no offset is
 * applied to its NULL pointer.) */
static inline int room(tbx__pbuf_t *b, size_t n)
{
	return b->pos >= n && !b->oom ? 0 : grow(b, n);
}

/* How many bytes are written so far: a nested message's length is the
 * difference of two such marks. */
static inline size_t mark(const tbx__pbuf_t *b)
{
	return b->cap - b->pos;
}

static inline void put(tbx__pbuf_t *b, const void *s, size_t n)
{
	if (n == 0 || room(b, n) != 0)
		return;
	b->pos -= n;
	memcpy(b->p + b->pos, s, n);
}

static inline void varint(tbx__pbuf_t *b, uint64_t v)
{
	size_t n = 1;
	uint8_t *o;

	if (v < 0x80) { /* tags, most lengths and small numbers */
		if (room(b, 1) == 0)
			b->p[--b->pos] = (uint8_t)v;
		return;
	}
	for (uint64_t w = v >> 7; w; w >>= 7)
		n++;
	if (room(b, n) != 0)
		return;
	b->pos -= n;
	o = b->p + b->pos;
	for (; v > 0x7f; v >>= 7)
		*o++ = (uint8_t)(v | 0x80);
	*o = (uint8_t)v;
}

/* Field numbers and wire types are constants: once inlined, a tag is one
 * byte stored. */
static inline void tag(tbx__pbuf_t *b, uint32_t field, int wt)
{
	varint(b, (uint64_t)field << 3 | (uint64_t)wt);
}

/* The length and tag of a nested message whose contents were written
 * since mark @p m. */
static inline void close_len(tbx__pbuf_t *b, uint32_t field, size_t m)
{
	varint(b, mark(b) - m);
	tag(b, field, WT_LEN);
}

static inline void f_varint(tbx__pbuf_t *b, uint32_t field, uint64_t v)
{
	varint(b, v);
	tag(b, field, WT_VARINT);
}

/* A non-zero unsigned field (proto3 leaves 0 out). */
static inline void f_uint(tbx__pbuf_t *b, uint32_t field, uint64_t v)
{
	if (v)
		f_varint(b, field, v);
}

static inline void f_fixed64(tbx__pbuf_t *b, uint32_t field, uint64_t v)
{
	uint8_t *o;

	if (!v || room(b, 8) != 0)
		return;
	b->pos -= 8;
	o = b->p + b->pos;
	for (int i = 0; i < 8; i++)
		o[i] = (uint8_t)(v >> (8 * i));
	tag(b, field, WT_I64);
}

static inline void f_fixed32(tbx__pbuf_t *b, uint32_t field, uint32_t v)
{
	uint8_t *o;

	if (!v || room(b, 4) != 0)
		return;
	b->pos -= 4;
	o = b->p + b->pos;
	for (int i = 0; i < 4; i++)
		o[i] = (uint8_t)(v >> (8 * i));
	tag(b, field, WT_I32);
}

static inline void f_bytes(tbx__pbuf_t *b, uint32_t field, const void *s,
			   size_t n)
{
	put(b, s, n);
	varint(b, n);
	tag(b, field, WT_LEN);
}

/* How many of the first @p len bytes of @p u are ASCII: eight bytes a
 * test, then one. */
static inline size_t ascii_prefix(const unsigned char *u, size_t len)
{
	size_t i = 0;
	uint64_t w;

	for (; i + 8 <= len; i += 8) {
		memcpy(&w, u + i, 8);
		if (w & 0x8080808080808080ULL)
			break;
	}
	while (i < len && u[i] < 0x80)
		i++;
	return i;
}

/* A string field of @p len bytes of @p s, written as valid UTF-8: an
 * invalid byte becomes U+FFFD.  Written even when empty (for AnyValue);
 * callers leave out the empty ones proto3 leaves out. */
static void f_str(tbx__pbuf_t *b, uint32_t field, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, out = 0;
	uint8_t *o;

	/* Most strings are ASCII, or valid UTF-8: copied as they are. */
	i = ascii_prefix(u, len);
	while (i < len) {
		size_t n = u[i] < 0x80 ? 1 : tbx__utf8_seq(u + i, len - i);
		if (!n)
			break;
		i += n;
	}
	if (i == len) {
		f_bytes(b, field, s, len);
		return;
	}
	/* Else the length with each invalid byte as 3, then the bytes. */
	for (i = 0; i < len;) {
		size_t n = u[i] < 0x80 ? 1 : tbx__utf8_seq(u + i, len - i);
		out += n ? n : 3;
		i += n ? n : 1;
	}
	if (room(b, out) != 0)
		return;
	b->pos -= out;
	o = b->p + b->pos;
	for (i = 0; i < len;) {
		size_t n = u[i] < 0x80 ? 1 : tbx__utf8_seq(u + i, len - i);
		if (n) {
			memcpy(o, u + i, n);
			o += n;
			i += n;
		} else {
			memcpy(o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	varint(b, out);
	tag(b, field, WT_LEN);
}

/* A string field left out when NULL or empty. */
static void f_cstr(tbx__pbuf_t *b, uint32_t field, const char *s)
{
	if (s && *s)
		f_str(b, field, s, strlen(s));
}

/* The unchecked writes of keyvalue(): room was made for them. */
static inline void u_byte(tbx__pbuf_t *b, uint8_t v)
{
	b->p[--b->pos] = v;
}

static inline void u_varint(tbx__pbuf_t *b, uint64_t v)
{
	size_t n = 1;
	uint8_t *o;

	if (v < 0x80) {
		b->p[--b->pos] = (uint8_t)v;
		return;
	}
	for (uint64_t w = v >> 7; w; w >>= 7)
		n++;
	b->pos -= n;
	o = b->p + b->pos;
	for (; v > 0x7f; v >>= 7)
		*o++ = (uint8_t)(v | 0x80);
	*o = (uint8_t)v;
}

static inline void u_bytes(tbx__pbuf_t *b, uint32_t field, const void *s,
			   size_t n)
{
	b->pos -= n;
	memcpy(b->p + b->pos, s, n);
	u_varint(b, n);
	u_byte(b, (uint8_t)(field << 3 | WT_LEN));
}

/* Room for a KeyValue's tags and lengths besides its key and value: four
 * tags of a byte (every field number here is below 16), three lengths
 * and an integer value of at most ten bytes each. */
#define KV_OVERHEAD 48

/* One KeyValue as field @p field of the enclosing message. */
static void keyvalue(tbx__pbuf_t *b, uint32_t field, const tbx__attr_t *at)
{
	size_t m = mark(b), mv;
	size_t vlen = at->type == TBX_ATTR_STRING ? at->len : 0;

	/* The common case, an ASCII key and value (a span's keys are
	 * literals of ours): room made once, the fields written without a
	 * check each.  Else each field checked, as below. */
	if ((at->key_static || ascii_prefix((const unsigned char *)at->key,
					    at->key_len) == at->key_len) &&
	    (at->type != TBX_ATTR_STRING ||
	     ascii_prefix((const unsigned char *)at->v.s, vlen) == vlen) &&
	    room(b, at->key_len + vlen + KV_OVERHEAD) == 0) {
		mv = mark(b);
		switch (at->type) {
		case TBX_ATTR_STRING:
			u_bytes(b, ANY_STRING, at->v.s, vlen);
			break;
		case TBX_ATTR_INT:
			u_varint(b, (uint64_t)at->v.i);
			u_byte(b, ANY_INT << 3 | WT_VARINT);
			break;
		case TBX_ATTR_BOOL:
			u_byte(b, at->v.b ? 1 : 0);
			u_byte(b, ANY_BOOL << 3 | WT_VARINT);
			break;
		}
		u_varint(b, mark(b) - mv);
		u_byte(b, KV_VALUE << 3 | WT_LEN);
		u_bytes(b, KV_KEY, at->key, at->key_len);
		u_varint(b, mark(b) - m);
		u_byte(b, (uint8_t)(field << 3 | WT_LEN));
		return;
	}

	/* value (2): an AnyValue, its oneof always written */
	mv = mark(b);
	switch (at->type) {
	case TBX_ATTR_STRING:
		f_str(b, ANY_STRING, at->v.s, at->len);
		break;
	case TBX_ATTR_INT: /* int64: two's complement, as uint64 */
		f_varint(b, ANY_INT, (uint64_t)at->v.i);
		break;
	case TBX_ATTR_BOOL:
		f_varint(b, ANY_BOOL, at->v.b ? 1 : 0);
		break;
	}
	close_len(b, KV_VALUE, mv);
	if (at->key_static) /* a literal of ours: printable ASCII */
		f_bytes(b, KV_KEY, at->key, at->key_len);
	else
		f_str(b, KV_KEY, at->key, at->key_len);
	close_len(b, field, m);
}

/* The attributes (repeated, field @p field), and their dropped count
 * (field @p dropped_field), as the message's last fields. */
static void attrs(tbx__pbuf_t *b, const tbx__attrs_t *a, uint32_t field,
		  uint32_t dropped_field)
{
	f_uint(b, dropped_field, a->dropped);
	for (size_t i = a->n; i-- > 0;)
		keyvalue(b, field, &a->v[i]);
}

static void span_pb(tbx__pbuf_t *b, const tbx__span_t *s)
{
	size_t m = mark(b);

	f_fixed32(b, SPAN_FLAGS, s->flags);
	if (s->status != TBX_SPAN_STATUS_UNSET) {
		size_t ms = mark(b);
		f_uint(b, STATUS_CODE, (uint64_t)s->status);
		f_cstr(b, STATUS_MESSAGE, s->status_msg);
		close_len(b, SPAN_STATUS, ms);
	}
	f_uint(b, SPAN_DROPPED_LINKS, s->dropped_links);
	for (size_t i = s->n_links; i-- > 0;) {
		const tbx__span_link_t *ln = s->links[i];
		size_t ml = mark(b);
		attrs(b, &ln->attrs, LINK_ATTRIBUTES, LINK_DROPPED_ATTRIBUTES);
		f_cstr(b, LINK_TRACE_STATE, ln->tracestate);
		f_bytes(b, LINK_SPAN_ID, ln->span_id, TBX_SPAN_ID_SIZE);
		f_bytes(b, LINK_TRACE_ID, ln->trace_id, TBX_TRACE_ID_SIZE);
		close_len(b, SPAN_LINKS, ml);
	}
	f_uint(b, SPAN_DROPPED_EVENTS, s->dropped_events);
	for (size_t i = s->n_events; i-- > 0;) {
		const tbx__span_event_t *ev = s->events[i];
		size_t me = mark(b);
		attrs(b, &ev->attrs, EVENT_ATTRIBUTES,
		      EVENT_DROPPED_ATTRIBUTES);
		f_cstr(b, EVENT_NAME, ev->name);
		f_fixed64(b, EVENT_TIME, ev->time_ns);
		close_len(b, SPAN_EVENTS, me);
	}
	attrs(b, &s->attrs, SPAN_ATTRIBUTES, SPAN_DROPPED_ATTRIBUTES);
	f_fixed64(b, SPAN_END, s->end_ns);
	f_fixed64(b, SPAN_START, s->start_ns);
	f_uint(b, SPAN_KIND, (uint64_t)s->kind);
	f_cstr(b, SPAN_NAME, s->name);
	if (!tbx__id_is_zero(s->parent_id, TBX_SPAN_ID_SIZE))
		f_bytes(b, SPAN_PARENT_SPAN_ID, s->parent_id, TBX_SPAN_ID_SIZE);
	f_cstr(b, SPAN_TRACE_STATE, s->tracestate);
	f_bytes(b, SPAN_SPAN_ID, s->span_id, TBX_SPAN_ID_SIZE);
	f_bytes(b, SPAN_TRACE_ID, s->trace_id, TBX_TRACE_ID_SIZE);
	close_len(b, SS_SPANS, m);
}

/* A KeyValue of a string, for the resource's own attributes. */
static void keyvalue_str(tbx__pbuf_t *b, const char *key, const char *val)
{
	tbx__attr_t at = {.key = (char *)key,
			  .key_len = strlen(key),
			  .key_static = 1,
			  .type = TBX_ATTR_STRING,
			  .len = strlen(val),
			  .v.s = (char *)val};

	keyvalue(b, RES_ATTRIBUTES, &at);
}

int tbx__otlp_proto_encode(tbx__span_t *const *spans, size_t n,
			   const tbx__otlp_resource_t *res, tbx__pbuf_t *out)
{
	size_t m_req, m_ss, m;

	tbx__pbuf_reset(out);
	m_req = mark(out);
	/* ResourceSpans: scope_spans (2), then resource (1) before it. */
	m_ss = mark(out);
	for (size_t i = n; i-- > 0;)
		span_pb(out, spans[i]);
	m = mark(out);
	f_cstr(out, SCOPE_VERSION, TBX_VERSION_STR);
	f_cstr(out, SCOPE_NAME, "tokenbox");
	close_len(out, SS_SCOPE, m);
	close_len(out, RS_SCOPE_SPANS, m_ss);
	m = mark(out);
	if (res->attrs)
		for (size_t i = res->attrs->n; i-- > 0;)
			keyvalue(out, RES_ATTRIBUTES, &res->attrs->v[i]);
	keyvalue_str(out, "telemetry.sdk.version", TBX_VERSION_STR);
	keyvalue_str(out, "telemetry.sdk.name", "tokenbox");
	{
		/* the service name is the operator's: checked as UTF-8 */
		size_t mk = mark(out), mv = mark(out);
		f_str(out, ANY_STRING, res->service_name,
		      strlen(res->service_name));
		close_len(out, KV_VALUE, mv);
		f_bytes(out, KV_KEY, "service.name", 12);
		close_len(out, RES_ATTRIBUTES, mk);
	}
	close_len(out, RS_RESOURCE, m);
	close_len(out, REQ_RESOURCE_SPANS, m_req);
	return out->oom ? -1 : 0;
}

/* ---- the collector's answer ---- */

static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;

	for (int shift = 0; shift < 64; shift += 7) {
		if (*p >= end)
			return -1;
		uint8_t c = *(*p)++;
		r |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*v = r;
			return 0;
		}
	}
	return -1;
}

/* Skips a field of wire type @p wt; -1 when it does not fit. */
static int skip(const uint8_t **p, const uint8_t *end, int wt)
{
	uint64_t v;

	switch (wt) {
	case WT_VARINT:
		return get_varint(p, end, &v);
	case WT_I64:
		if (end - *p < 8)
			return -1;
		*p += 8;
		return 0;
	case WT_I32:
		if (end - *p < 4)
			return -1;
		*p += 4;
		return 0;
	case WT_LEN:
		if (get_varint(p, end, &v) != 0 || v > (uint64_t)(end - *p))
			return -1;
		*p += v;
		return 0;
	}
	return -1; /* groups (3, 4) and unknown types */
}

uint64_t tbx__otlp_proto_rejected(const uint8_t *p, size_t len)
{
	const uint8_t *end = p + len;
	uint64_t key, v, rejected = 0;

	while (p < end) {
		if (get_varint(&p, end, &key) != 0)
			return 0;
		if (key >> 3 == RESP_PARTIAL_SUCCESS && (key & 7) == WT_LEN) {
			const uint8_t *q, *qend;
			if (get_varint(&p, end, &v) != 0 ||
			    v > (uint64_t)(end - p))
				return 0;
			q = p;
			qend = p + v;
			p = qend;
			while (q < qend) {
				if (get_varint(&q, qend, &key) != 0)
					return 0;
				if (key >> 3 == PS_REJECTED_SPANS &&
				    (key & 7) == WT_VARINT) {
					if (get_varint(&q, qend, &v) != 0)
						return 0;
					/* int64: a negative count is none */
					rejected = (int64_t)v > 0 ? v : 0;
				} else if (skip(&q, qend, (int)(key & 7)) !=
					   0) {
					return 0;
				}
			}
		} else if (skip(&p, end, (int)(key & 7)) != 0) {
			return 0;
		}
	}
	return rejected;
}
