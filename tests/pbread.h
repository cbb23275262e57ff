/*
 * A test-only reader of the protobuf wire format, and of the OTLP
 * ExportTraceServiceRequest that trace/otlp_proto.c writes: written apart
 * from the encoder (it shares no code with it), strict (a field of a
 * wrong wire type, a length past its message, a varint of more than 10
 * bytes, an unknown field, a field that must not repeat seen twice: the
 * request is refused), so that the tests and the fuzz target check the
 * encoder's bytes against the field numbers of opentelemetry-proto v1
 * rather than against itself.
 *
 * What it returns points into the bytes read (strings, ids): they must
 * outlive it.  pbr_request_free() frees the arrays.
 */
#ifndef TBX_TESTS_PBREAD_H
#define TBX_TESTS_PBREAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct pbr_bytes {
	const uint8_t *p; /* NULL: absent */
	size_t len;
} pbr_bytes_t;

typedef struct pbr_kv {
	pbr_bytes_t key;
	int type; /* 1 string, 2 bool, 3 int (the AnyValue field); 0 none */
	pbr_bytes_t s;
	uint64_t u; /* bool or int64 as read */
} pbr_kv_t;

typedef struct pbr_attrs {
	pbr_kv_t *v;
	size_t n;
	uint64_t dropped;
} pbr_attrs_t;

typedef struct pbr_event {
	uint64_t time;
	pbr_bytes_t name;
	pbr_attrs_t attrs;
} pbr_event_t;

typedef struct pbr_link {
	pbr_bytes_t trace_id, span_id, trace_state;
	pbr_attrs_t attrs;
	uint32_t flags;
} pbr_link_t;

typedef struct pbr_span {
	pbr_bytes_t trace_id, span_id, trace_state, parent_span_id, name;
	uint64_t kind, start, end;
	pbr_attrs_t attrs;
	pbr_event_t *events;
	size_t n_events;
	uint64_t dropped_events;
	pbr_link_t *links;
	size_t n_links;
	uint64_t dropped_links;
	int has_status;
	uint64_t status_code;
	pbr_bytes_t status_message;
	uint32_t flags;
	int has_flags;
} pbr_span_t;

typedef struct pbr_request {
	size_t n_resource_spans, n_scope_spans;
	pbr_attrs_t resource;
	pbr_bytes_t scope_name, scope_version;
	pbr_span_t *spans;
	size_t n_spans;
} pbr_request_t;

/* One field of a message. */
typedef struct pbr_field {
	uint32_t num;
	int wt;
	uint64_t v;    /* VARINT, I64, I32 */
	pbr_bytes_t b; /* LEN */
} pbr_field_t;

static inline int pbr_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;

	for (int i = 0; i < 10; i++) {
		if (*p >= end)
			return -1;
		uint8_t c = *(*p)++;
		r |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*v = r;
			return 0;
		}
	}
	return -1;
}

/* The next field of [*p, end): 1, 0 at the end, -1 when malformed. */
static inline int pbr_next(const uint8_t **p, const uint8_t *end,
			   pbr_field_t *f)
{
	uint64_t key;

	if (*p == end)
		return 0;
	if (pbr_varint(p, end, &key) != 0 || key >> 3 == 0 ||
	    key >> 3 > 536870911u)
		return -1;
	memset(f, 0, sizeof(*f));
	f->num = (uint32_t)(key >> 3);
	f->wt = (int)(key & 7);
	switch (f->wt) {
	case 0:
		return pbr_varint(p, end, &f->v) == 0 ? 1 : -1;
	case 1:
	case 5: {
		size_t n = f->wt == 1 ? 8 : 4;
		if ((size_t)(end - *p) < n)
			return -1;
		for (size_t i = 0; i < n; i++)
			f->v |= (uint64_t)(*p)[i] << (8 * i);
		*p += n;
		return 1;
	}
	case 2:
		if (pbr_varint(p, end, &key) != 0 || key > (uint64_t)(end - *p))
			return -1;
		f->b.p = *p;
		f->b.len = (size_t)key;
		*p += key;
		return 1;
	}
	return -1;
}

/* For each field @p f of the LEN bytes @p msg; @p rc is then 0 (all
 * read) or -1 (malformed).  Nested loops get cursors of their own line. */
#define PBR_CAT_(a, b) a##b
#define PBR_CAT(a, b)  PBR_CAT_(a, b)
#define PBR_EACH(msg, f, rc)                                                   \
	for (const uint8_t *PBR_CAT(pbr_p_, __LINE__) = (msg).p,               \
					    *PBR_CAT(pbr_e_, __LINE__) =       \
						(msg).p + (msg).len;           \
	     ((rc) = pbr_next(&PBR_CAT(pbr_p_, __LINE__),                      \
			      PBR_CAT(pbr_e_, __LINE__), &(f))) == 1;)

/* Grows array @p *v of @p *n elements of @p size by one, zeroed. */
static inline void *pbr_push(void *vp, size_t *n, size_t size)
{
	void **v = vp;
	char *q = realloc(*v, (*n + 1) * size);

	if (!q)
		abort();
	memset(q + *n * size, 0, size);
	*v = q;
	return q + (*n)++ * size;
}

/* A LEN field, once. */
static inline int pbr_once(pbr_bytes_t *dst, const pbr_field_t *f)
{
	if (f->wt != 2 || dst->p)
		return -1;
	/* an empty field still counts as present */
	dst->p = f->b.p ? f->b.p : (const uint8_t *)"";
	dst->len = f->b.len;
	return 0;
}

static inline int pbr_kv(pbr_bytes_t m, pbr_kv_t *kv)
{
	pbr_field_t f, g;
	int rc, rc2;

	PBR_EACH(m, f, rc)
	{
		if (f.num == 1) {
			if (pbr_once(&kv->key, &f))
				return -1;
		} else if (f.num == 2 && f.wt == 2 && !kv->type) {
			int n = 0;
			PBR_EACH(f.b, g, rc2)
			{
				n++;
				if (g.num == 1 && g.wt == 2) {
					kv->s = g.b;
					if (!kv->s.p)
						kv->s.p = (const uint8_t *)"";
				} else if ((g.num == 2 || g.num == 3) &&
					   g.wt == 0) {
					kv->u = g.v;
				} else {
					return -1;
				}
				kv->type = (int)g.num;
			}
			if (rc2 < 0 || n != 1) /* the oneof: exactly one */
				return -1;
		} else {
			return -1;
		}
	}
	return rc < 0 || !kv->key.p || !kv->type ? -1 : 0;
}

/* An attribute (KeyValue) field or the dropped count, by number. */
static inline int pbr_attr_field(pbr_attrs_t *a, const pbr_field_t *f,
				 uint32_t attrs_num, uint32_t dropped_num,
				 int *handled)
{
	*handled = 1;
	if (f->num == attrs_num && f->wt == 2)
		return pbr_kv(f->b, pbr_push(&a->v, &a->n, sizeof(pbr_kv_t)));
	if (f->num == dropped_num && f->wt == 0) {
		a->dropped = f->v;
		return 0;
	}
	*handled = 0;
	return 0;
}

static inline int pbr_span(pbr_bytes_t m, pbr_span_t *s)
{
	pbr_field_t f, g;
	int rc, rc2, h;

	PBR_EACH(m, f, rc)
	{
		if (pbr_attr_field(&s->attrs, &f, 9, 10, &h))
			return -1;
		if (h)
			continue;
		switch (f.num) {
		case 1:
		case 2:
		case 3:
		case 4:
		case 5: {
			pbr_bytes_t *d[] = {&s->trace_id, &s->span_id,
					    &s->trace_state, &s->parent_span_id,
					    &s->name};
			if (pbr_once(d[f.num - 1], &f))
				return -1;
			break;
		}
		case 6:
			if (f.wt != 0)
				return -1;
			s->kind = f.v;
			break;
		case 7:
		case 8:
			if (f.wt != 1)
				return -1;
			*(f.num == 7 ? &s->start : &s->end) = f.v;
			break;
		case 11: {
			pbr_event_t *ev;
			if (f.wt != 2)
				return -1;
			ev = pbr_push(&s->events, &s->n_events, sizeof(*ev));
			PBR_EACH(f.b, g, rc2)
			{
				if (pbr_attr_field(&ev->attrs, &g, 3, 4, &h))
					return -1;
				if (h)
					continue;
				if (g.num == 1 && g.wt == 1)
					ev->time = g.v;
				else if (g.num != 2 || pbr_once(&ev->name, &g))
					return -1;
			}
			if (rc2 < 0)
				return -1;
			break;
		}
		case 12:
		case 14:
			if (f.wt != 0)
				return -1;
			*(f.num == 12 ? &s->dropped_events
				      : &s->dropped_links) = f.v;
			break;
		case 13: {
			pbr_link_t *ln;
			if (f.wt != 2)
				return -1;
			ln = pbr_push(&s->links, &s->n_links, sizeof(*ln));
			PBR_EACH(f.b, g, rc2)
			{
				if (pbr_attr_field(&ln->attrs, &g, 4, 5, &h))
					return -1;
				if (h)
					continue;
				if (g.num >= 1 && g.num <= 3) {
					pbr_bytes_t *d[] = {&ln->trace_id,
							    &ln->span_id,
							    &ln->trace_state};
					if (pbr_once(d[g.num - 1], &g))
						return -1;
				} else if (g.num == 6 && g.wt == 5) {
					ln->flags = (uint32_t)g.v;
				} else {
					return -1;
				}
			}
			if (rc2 < 0)
				return -1;
			break;
		}
		case 15:
			if (f.wt != 2 || s->has_status)
				return -1;
			s->has_status = 1;
			PBR_EACH(f.b, g, rc2)
			{
				if (g.num == 3 && g.wt == 0)
					s->status_code = g.v;
				else if (g.num != 2 ||
					 pbr_once(&s->status_message, &g))
					return -1;
			}
			if (rc2 < 0)
				return -1;
			break;
		case 16:
			if (f.wt != 5)
				return -1;
			s->flags = (uint32_t)f.v;
			s->has_flags = 1;
			break;
		default:
			return -1;
		}
	}
	return rc < 0 ? -1 : 0;
}

static inline void pbr_request_free(pbr_request_t *r)
{
	free(r->resource.v);
	for (size_t i = 0; i < r->n_spans; i++) {
		pbr_span_t *s = &r->spans[i];
		free(s->attrs.v);
		for (size_t j = 0; j < s->n_events; j++)
			free(s->events[j].attrs.v);
		for (size_t j = 0; j < s->n_links; j++)
			free(s->links[j].attrs.v);
		free(s->events);
		free(s->links);
	}
	free(r->spans);
	memset(r, 0, sizeof(*r));
}

/* Reads an ExportTraceServiceRequest: 0, or -1 (and nothing held) when
 * the bytes are not one as opentelemetry-proto v1 defines it. */
static inline int pbr_request(const uint8_t *p, size_t len, pbr_request_t *r)
{
	pbr_bytes_t all = {p ? p : (const uint8_t *)"", len};
	pbr_field_t f, g, h, k;
	int rc, rc2, rc3, rc4, hd;

	memset(r, 0, sizeof(*r));
	PBR_EACH(all, f, rc)
	{
		if (f.num != 1 || f.wt != 2)
			goto bad;
		r->n_resource_spans++;
		PBR_EACH(f.b, g, rc2)
		{
			if (g.num == 1 && g.wt == 2) { /* Resource */
				PBR_EACH(g.b, h, rc3)
				{
					if (pbr_attr_field(&r->resource, &h, 1,
							   2, &hd) ||
					    !hd)
						goto bad;
				}
				if (rc3 < 0)
					goto bad;
			} else if (g.num == 2 && g.wt == 2) { /* ScopeSpans */
				r->n_scope_spans++;
				PBR_EACH(g.b, h, rc3)
				{
					if (h.num == 1 && h.wt == 2) {
						PBR_EACH(h.b, k, rc4)
						{
							if (k.num == 1 &&
							    !pbr_once(
								&r->scope_name,
								&k))
								continue;
							if (k.num == 2 &&
							    !pbr_once(
								&r->scope_version,
								&k))
								continue;
							goto bad;
						}
						if (rc4 < 0)
							goto bad;
					} else if (h.num == 2 && h.wt == 2) {
						if (pbr_span(
							h.b,
							pbr_push(
							    &r->spans,
							    &r->n_spans,
							    sizeof(
								pbr_span_t))))
							goto bad;
					} else {
						goto bad;
					}
				}
				if (rc3 < 0)
					goto bad;
			} else {
				goto bad;
			}
		}
		if (rc2 < 0)
			goto bad;
	}
	if (rc < 0)
		goto bad;
	return 0;
bad:
	pbr_request_free(r);
	return -1;
}

/* 1 when @p b holds exactly the @p len bytes of @p s. */
static inline int pbr_eq(pbr_bytes_t b, const void *s, size_t len)
{
	return b.p && b.len == len && (len == 0 || memcmp(b.p, s, len) == 0);
}

/* Length of the valid UTF-8 sequence at @p s (RFC 3629), or 0. */
static inline size_t pbr_utf8_seq(const uint8_t *s, size_t left)
{
	size_t n;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07;
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

/* 1 when @p b is what @p s (@p len bytes, any bytes) becomes as valid
 * UTF-8: its valid sequences as they are, each other byte U+FFFD. */
static inline int pbr_eq_utf8(pbr_bytes_t b, const char *s, size_t len)
{
	const uint8_t *u = (const uint8_t *)s, *o = b.p, *oe = b.p + b.len;

	if (!b.p)
		return 0;
	for (size_t i = 0; i < len;) {
		size_t n = pbr_utf8_seq(u + i, len - i);
		const void *want = n ? (const void *)(u + i) : "\xef\xbf\xbd";
		size_t wn = n ? n : 3;
		if ((size_t)(oe - o) < wn || memcmp(o, want, wn) != 0)
			return 0;
		o += wn;
		i += n ? n : 1;
	}
	return o == oe;
}

#endif
