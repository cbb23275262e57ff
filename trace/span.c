/*
 * Spans (see span.h).
 */
#include "trace/span.h"

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

tbx__span_t *tbx__span_new(const char *name, tbx__span_kind_t kind,
			   const tbx__trace_ctx_t *ctx,
			   const uint8_t *parent_id, uint64_t start_ns)
{
	tbx__span_t *span = calloc(1, sizeof(*span));

	if (!span)
		return NULL;
	if (!(span->name = tbx__strdup(name))) {
		free(span);
		return NULL;
	}
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

static void attr_free(tbx__attr_t *at)
{
	if (!at->key_static)
		free(at->key);
	if (at->type == TBX_ATTR_STRING)
		free(at->v.s);
}

void tbx__attrs_free(tbx__attrs_t *a)
{
	for (size_t i = 0; i < a->n; i++)
		attr_free(&a->v[i]);
	free(a->v);
	memset(a, 0, sizeof(*a));
}

void tbx__span_free(tbx__span_t *span)
{
	if (!span)
		return;
	for (size_t i = 0; i < span->n_events; i++) {
		free(span->events[i]->name);
		tbx__attrs_free(&span->events[i]->attrs);
		free(span->events[i]);
	}
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
	free(span->name);
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
static tbx__attr_t *attr_slot(tbx__attrs_t *a, const char *key, int key_static)
{
	tbx__attr_t *at;
	size_t key_len = strlen(key);

	/* Most keys differ in length: their bytes are compared only when
	 * they do not (a span's keys share long prefixes). */
	for (size_t i = 0; i < a->n; i++) {
		if (a->v[i].key_len == key_len &&
		    memcmp(a->v[i].key, key, key_len) == 0) {
			at = &a->v[i];
			if (at->type == TBX_ATTR_STRING)
				free(at->v.s);
			at->v.s = NULL;
			at->type = TBX_ATTR_INT;
			return at;
		}
	}
	if (a->n == TBX_SPAN_ATTRS_MAX)
		goto drop;
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 8;
		tbx__attr_t *v = realloc(a->v, cap * sizeof(*v));
		if (!v)
			goto drop;
		a->v = v;
		a->cap = cap;
	}
	at = &a->v[a->n];
	memset(at, 0, sizeof(*at));
	if (key_static)
		at->key = (char *)key;
	else if (!(at->key = tbx__strdup(key)))
		goto drop;
	at->key_len = key_len;
	at->key_static = key_static;
	at->type = TBX_ATTR_INT;
	a->n++;
	return at;
drop:
	a->dropped++;
	return NULL;
}

static void attr_str(tbx__attrs_t *a, const char *key, int key_static,
		     const char *val, size_t len)
{
	tbx__attr_t *at = attr_slot(a, key, key_static);

	if (!at)
		return;
	if (len > TBX_SPAN_VALUE_MAX)
		len = TBX_SPAN_VALUE_MAX;
	at->type = TBX_ATTR_STRING;
	at->len = len;
	at->v.s = malloc(len + 1);
	if (!at->v.s) {
		at->len = 0;
		at->v.s = tbx__strdup("");
		a->dropped++;
		if (!at->v.s) /* keeps the slot valid: an empty integer */
			at->type = TBX_ATTR_INT;
		return;
	}
	if (len)
		memcpy(at->v.s, val, len);
	at->v.s[len] = '\0';
}

void tbx__attrs_str(tbx__attrs_t *a, const char *key, const char *val,
		    size_t len)
{
	attr_str(a, key, 0, val, len);
}

void tbx__attrs_str_static(tbx__attrs_t *a, const char *key, const char *val,
			   size_t len)
{
	attr_str(a, key, 1, val, len);
}

static void attr_int(tbx__attrs_t *a, const char *key, int key_static,
		     int64_t val)
{
	tbx__attr_t *at = attr_slot(a, key, key_static);

	if (at) {
		at->type = TBX_ATTR_INT;
		at->v.i = val;
	}
}

void tbx__attrs_int(tbx__attrs_t *a, const char *key, int64_t val)
{
	attr_int(a, key, 0, val);
}

void tbx__attrs_int_static(tbx__attrs_t *a, const char *key, int64_t val)
{
	attr_int(a, key, 1, val);
}

void tbx__attrs_bool(tbx__attrs_t *a, const char *key, int val)
{
	tbx__attr_t *at = attr_slot(a, key, 0);

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

	if (span->n_events < TBX_SPAN_EVENTS_MAX)
		v = grow(span->events, span->n_events, &span->cap_events,
			 sizeof(*v));
	if (!v)
		goto drop;
	span->events = v;
	if (!(ev = calloc(1, sizeof(*ev))))
		goto drop;
	if (!(ev->name = tbx__strdup(name))) {
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
