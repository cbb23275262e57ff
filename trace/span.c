/*
 * Spans (see span.h).
 */
#include "trace/span.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/str.h"

uint64_t tbx__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* @p len bytes of @p val and a NUL in @p pool (NULL: none) if they fit,
 * else in an allocation of their own (*@p pooled 0); NULL when out of
 * memory. */
static char *pool_copy(tbx__span_pool_t *pool, const char *val, size_t len,
		       uint8_t *pooled)
{
	char *p;

	if (pool && len < TBX_SPAN_POOL_SIZE - pool->used) {
		p = pool->bytes + pool->used;
		pool->used += len + 1;
		*pooled = 1;
	} else {
		if (!(p = malloc(len + 1)))
			return NULL;
		*pooled = 0;
	}
	if (len)
		memcpy(p, val, len);
	p[len] = '\0';
	return p;
}

/* 1 when @p p is in @p pool's bytes. */
static int in_pool(const tbx__span_pool_t *pool, const char *p)
{
	uintptr_t a = (uintptr_t)pool->bytes, x = (uintptr_t)p;

	return x >= a && x < a + TBX_SPAN_POOL_SIZE;
}

tbx__span_t *tbx__span_init(tbx__span_t *span, const char *name,
			    tbx__span_kind_t kind, const tbx__trace_ctx_t *ctx,
			    const uint8_t *parent_id, uint64_t start_ns)
{
	/* Only the fields before the slots are cleared: the slots and the
	 * pool are set as they are used. */
	uint8_t pooled;

	memset(span, 0, offsetof(tbx__span_t, event_ptrs));
	span->pool.used = 0;
	span->attrs.v = span->attr_slots;
	span->attrs.cap = TBX_SPAN_INLINE_ATTRS;
	span->attrs.v_inline = 1;
	span->attrs.pool = &span->pool;
	if (!(span->name = pool_copy(&span->pool, name, strlen(name), &pooled)))
		return NULL;
	memcpy(span->trace_id, ctx->trace_id, TBX_TRACE_ID_SIZE);
	memcpy(span->span_id, ctx->span_id, TBX_SPAN_ID_SIZE);
	if (parent_id)
		memcpy(span->parent_id, parent_id, TBX_SPAN_ID_SIZE);
	span->flags = ctx->flags;
	span->kind = kind;
	span->start_ns = start_ns;
	span->end_ns = start_ns;
	return span;
}

tbx__span_t *tbx__span_new(const char *name, tbx__span_kind_t kind,
			   const tbx__trace_ctx_t *ctx,
			   const uint8_t *parent_id, uint64_t start_ns)
{
	tbx__span_t *span = malloc(sizeof(*span));

	if (span &&
	    !tbx__span_init(span, name, kind, ctx, parent_id, start_ns)) {
		free(span);
		return NULL;
	}
	return span;
}

static void attr_free(tbx__attr_t *at)
{
	if (!at->key_static)
		free(at->key);
	if (at->type == TBX_ATTR_STRING && !at->val_pooled)
		free(at->v.s);
}

void tbx__attrs_free(tbx__attrs_t *a)
{
	for (size_t i = 0; a->owned && i < a->n; i++)
		attr_free(&a->v[i]);
	if (!a->v_inline)
		free(a->v);
	memset(a, 0, sizeof(*a));
}

void tbx__span_clear(tbx__span_t *span)
{
	for (size_t i = 0; i < span->n_events; i++) {
		tbx__span_event_t *ev = span->events[i];
		if (!in_pool(&span->pool, ev->name))
			free(ev->name);
		tbx__attrs_free(&ev->attrs);
		if (!ev->in_span)
			free(ev);
	}
	if (span->events != span->event_ptrs)
		free(span->events);
	for (size_t i = 0; i < span->n_links; i++) {
		free(span->links[i]->tracestate);
		tbx__attrs_free(&span->links[i]->attrs);
		free(span->links[i]);
	}
	free(span->links);
	tbx__attrs_free(&span->attrs);
	free(span->tracestate);
	free(span->status_msg);
	if (!in_pool(&span->pool, span->name))
		free(span->name);
}

void tbx__span_free(tbx__span_t *span)
{
	if (!span)
		return;
	tbx__span_clear(span);
	free(span);
}

void tbx__span_set_tracestate(tbx__span_t *span, const char *tracestate)
{
	free(span->tracestate);
	span->tracestate =
	    tracestate && *tracestate ? tbx__strdup(tracestate) : NULL;
}

void tbx__span_set_status(tbx__span_t *span, tbx__span_status_t status,
			  const char *msg)
{
	span->status = status;
	free(span->status_msg);
	span->status_msg = status == TBX_SPAN_STATUS_ERROR && msg && *msg
			       ? tbx__strdup(msg)
			       : NULL;
}

/* The slot for @p key: its old one (cleared), or a new one; NULL when
 * the attribute is dropped. */
static tbx__attr_t *attr_slot(tbx__attrs_t *a, const char *key, int key_static,
			      int fresh)
{
	tbx__attr_t *at;
	size_t key_len = strlen(key);

	if (key_len > UINT32_MAX)
		goto drop;
	/* Most keys differ in length: their bytes are compared only when
	 * they do not (a span's keys share long prefixes). */
	for (size_t i = 0; !fresh && i < a->n; i++) {
		if (a->v[i].key_len == key_len &&
		    memcmp(a->v[i].key, key, key_len) == 0) {
			at = &a->v[i];
			if (at->type == TBX_ATTR_STRING && !at->val_pooled)
				free(at->v.s);
			at->v.s = NULL;
			at->val_pooled = 0;
			at->type = TBX_ATTR_INT;
			return at;
		}
	}
	if (a->n == TBX_SPAN_ATTRS_MAX)
		goto drop;
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 8;
		tbx__attr_t *v;
		if (a->v_inline) { /* out of the span's slots: moved out */
			if (!(v = malloc(cap * sizeof(*v))))
				goto drop;
			memcpy(v, a->v, a->n * sizeof(*v));
			a->v_inline = 0;
		} else if (!(v = realloc(a->v, cap * sizeof(*v)))) {
			goto drop;
		}
		a->v = v;
		a->cap = cap;
	}
	at = &a->v[a->n];
	memset(at, 0, sizeof(*at));
	if (key_static)
		at->key = (char *)key;
	else if (!(at->key = tbx__strdup(key)))
		goto drop;
	else
		a->owned = 1;
	at->key_len = (uint32_t)key_len;
	at->key_static = key_static;
	at->type = TBX_ATTR_INT;
	a->n++;
	return at;
drop:
	a->dropped++;
	return NULL;
}

static void attr_str(tbx__attrs_t *a, const char *key, int key_static,
		     int fresh, const char *val, size_t len)
{
	tbx__attr_t *at = attr_slot(a, key, key_static, fresh);

	if (!at)
		return;
	if (len > TBX_SPAN_VALUE_MAX)
		len = TBX_SPAN_VALUE_MAX;
	at->type = TBX_ATTR_STRING;
	at->len = (uint32_t)len; /* at most TBX_SPAN_VALUE_MAX */
	at->v.s = pool_copy(a->pool, val, len, &at->val_pooled);
	if (!at->v.s) {
		at->len = 0;
		at->v.s = pool_copy(a->pool, "", 0, &at->val_pooled);
		a->dropped++;
		if (!at->v.s) /* keeps the slot valid: an empty integer */
			at->type = TBX_ATTR_INT;
	}
	if (at->type == TBX_ATTR_STRING && !at->val_pooled)
		a->owned = 1;
}

void tbx__attrs_str(tbx__attrs_t *a, const char *key, const char *val,
		    size_t len)
{
	attr_str(a, key, 0, 0, val, len);
}

void tbx__attrs_str_static(tbx__attrs_t *a, const char *key, const char *val,
			   size_t len)
{
	attr_str(a, key, 1, 0, val, len);
}

static void attr_int(tbx__attrs_t *a, const char *key, int key_static,
		     int fresh, int64_t val)
{
	tbx__attr_t *at = attr_slot(a, key, key_static, fresh);

	if (at) {
		at->type = TBX_ATTR_INT;
		at->v.i = val;
	}
}

void tbx__attrs_int(tbx__attrs_t *a, const char *key, int64_t val)
{
	attr_int(a, key, 0, 0, val);
}

void tbx__attrs_int_static(tbx__attrs_t *a, const char *key, int64_t val)
{
	attr_int(a, key, 1, 0, val);
}

/* The next slot of @p a for a key not set yet, when it has one in place
 * (no growing, under the bound); NULL: not. */
static inline tbx__attr_t *attr_next(tbx__attrs_t *a, const char *key,
				     size_t key_len)
{
	tbx__attr_t *at;

	if (a->n >= a->cap || a->n >= TBX_SPAN_ATTRS_MAX ||
	    key_len > UINT32_MAX)
		return NULL;
	at = &a->v[a->n++];
	at->key = (char *)key;
	at->key_len = (uint32_t)key_len;
	at->key_static = 1;
	at->val_pooled = 0;
	return at;
}

void tbx__attrs_add_str_static_n(tbx__attrs_t *a, const char *key,
				 size_t key_len, const char *val, size_t len)
{
	tbx__span_pool_t *pool = a->pool;
	tbx__attr_t *at;

	/* The common case, a slot and the value's bytes in the span's own
	 * room, filled in place; else as any attribute. */
	if (pool && len < TBX_SPAN_POOL_SIZE - pool->used &&
	    (at = attr_next(a, key, key_len))) {
		at->type = TBX_ATTR_STRING;
		at->val_pooled = 1;
		at->len = (uint32_t)len; /* below TBX_SPAN_POOL_SIZE */
		at->v.s = pool->bytes + pool->used;
		pool->used += len + 1;
		if (len)
			memcpy(at->v.s, val, len);
		at->v.s[len] = '\0';
		return;
	}
	attr_str(a, key, 1, 1, val, len);
}

void tbx__attrs_add_int_static_n(tbx__attrs_t *a, const char *key,
				 size_t key_len, int64_t val)
{
	tbx__attr_t *at = attr_next(a, key, key_len);

	if (!at) {
		attr_int(a, key, 1, 1, val);
		return;
	}
	at->type = TBX_ATTR_INT;
	at->v.i = val;
}

void tbx__attrs_bool(tbx__attrs_t *a, const char *key, int val)
{
	tbx__attr_t *at = attr_slot(a, key, 0, 0);

	if (at) {
		at->type = TBX_ATTR_BOOL;
		at->v.b = !!val;
	}
}

/* @p arr (n used of *cap elements of @p size) with room for one more:
 * @p arr itself or a larger copy; NULL when out of memory (@p arr is
 * untouched). */
static void *grow(void *arr, size_t n, size_t *cap, size_t size)
{
	size_t c;

	if (n < *cap)
		return arr;
	c = *cap ? *cap * 2 : 4;
	if (!(arr = realloc(arr, c * size)))
		return NULL;
	*cap = c;
	return arr;
}

tbx__span_event_t *tbx__span_add_event(tbx__span_t *span, const char *name,
				       uint64_t time_ns)
{
	tbx__span_event_t *ev, **v = NULL;
	uint8_t pooled;
	int in_span = span->n_events < TBX_SPAN_INLINE_EVENTS;

	if (span->n_events == 0) {
		v = span->event_ptrs;
		span->cap_events = TBX_SPAN_INLINE_EVENTS;
	} else if (span->n_events < span->cap_events) {
		v = span->events;
	} else if (span->n_events < TBX_SPAN_EVENTS_MAX) {
		size_t cap = span->cap_events * 2;
		if (span->events == span->event_ptrs) {
			if ((v = malloc(cap * sizeof(*v))))
				memcpy(v, span->events,
				       span->n_events * sizeof(*v));
		} else {
			v = realloc(span->events, cap * sizeof(*v));
		}
		if (v)
			span->cap_events = cap;
	}
	if (!v)
		goto drop;
	span->events = v;
	if (in_span)
		ev = &span->event_slots[span->n_events];
	else if (!(ev = malloc(sizeof(*ev))))
		goto drop;
	memset(ev, 0, offsetof(tbx__span_event_t, attr_slots));
	ev->in_span = in_span;
	ev->attrs.v = ev->attr_slots;
	ev->attrs.cap = TBX_EVENT_INLINE_ATTRS;
	ev->attrs.v_inline = 1;
	ev->attrs.pool = &span->pool;
	if (!(ev->name = pool_copy(&span->pool, name, strlen(name), &pooled))) {
		if (!in_span)
			free(ev);
		goto drop;
	}
	ev->time_ns = time_ns;
	span->events[span->n_events++] = ev;
	return ev;
drop:
	span->dropped_events++;
	return NULL;
}

tbx__span_link_t *tbx__span_add_link(tbx__span_t *span,
				     const tbx__trace_ctx_t *ctx)
{
	tbx__span_link_t *ln = NULL, **v = NULL;

	if (span->n_links < TBX_SPAN_LINKS_MAX)
		v = grow(span->links, span->n_links, &span->cap_links,
			 sizeof(*v));
	if (v) {
		span->links = v;
		ln = calloc(1, sizeof(*ln));
	}
	if (!ln) {
		span->dropped_links++;
		return NULL;
	}
	memcpy(ln->trace_id, ctx->trace_id, TBX_TRACE_ID_SIZE);
	memcpy(ln->span_id, ctx->span_id, TBX_SPAN_ID_SIZE);
	span->links[span->n_links++] = ln;
	return ln;
}

void tbx__span_reserve_links(tbx__span_t *span, size_t n)
{
	tbx__span_link_t **v;

	if (n > TBX_SPAN_LINKS_MAX)
		n = TBX_SPAN_LINKS_MAX;
	if (n <= span->cap_links || !(v = realloc(span->links, n * sizeof(*v))))
		return;
	span->links = v;
	span->cap_links = n;
}
