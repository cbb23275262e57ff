/*
 * Test-only: whether a span read back by pbread.h is the tbx__span_t it
 * was encoded from, field by field (the unit tests and the fuzz target
 * of trace/otlp_proto.c).  Strings must come back byte for byte when
 * they were valid UTF-8, else as their valid UTF-8 form (U+FFFD for each
 * invalid byte); values proto3 leaves out (0, "", none) must be absent.
 */
#ifndef TBX_TESTS_OTLP_CHECK_H
#define TBX_TESTS_OTLP_CHECK_H

#include <string.h>

#include "pbread.h"
#include "trace/span.h"

/* A string field: absent when @p s is NULL or empty, else its UTF-8. */
static inline int otc_str(pbr_bytes_t b, const char *s)
{
	if (!s || !*s)
		return b.p == NULL;
	return pbr_eq_utf8(b, s, strlen(s));
}

static inline const char *otc_attrs(const tbx__attrs_t *a, const pbr_attrs_t *r)
{
	if (r->n != a->n)
		return "the number of attributes";
	if (r->dropped != a->dropped)
		return "the dropped attributes count";
	for (size_t i = 0; i < a->n; i++) {
		const tbx__attr_t *at = &a->v[i];
		const pbr_kv_t *kv = &r->v[i];
		if (!pbr_eq_utf8(kv->key, at->key, strlen(at->key)))
			return "an attribute's key";
		switch (at->type) {
		case TBX_ATTR_STRING:
			if (kv->type != 1 ||
			    !pbr_eq_utf8(kv->s, at->v.s, at->len))
				return "a string attribute's value";
			break;
		case TBX_ATTR_INT:
			if (kv->type != 3 || (int64_t)kv->u != at->v.i)
				return "an integer attribute's value";
			break;
		case TBX_ATTR_BOOL:
			if (kv->type != 2 || kv->u != (at->v.b ? 1u : 0u))
				return "a boolean attribute's value";
			break;
		}
	}
	return NULL;
}

/* NULL when @p r is @p s, else what differs first. */
static inline const char *otc_span(const tbx__span_t *s, const pbr_span_t *r)
{
	const char *why;

	if (!pbr_eq(r->trace_id, s->trace_id, TBX_TRACE_ID_SIZE))
		return "trace_id";
	if (!pbr_eq(r->span_id, s->span_id, TBX_SPAN_ID_SIZE))
		return "span_id";
	if (tbx__id_is_zero(s->parent_id, TBX_SPAN_ID_SIZE)
		? r->parent_span_id.p != NULL
		: !pbr_eq(r->parent_span_id, s->parent_id, TBX_SPAN_ID_SIZE))
		return "parent_span_id";
	if (!otc_str(r->trace_state, s->tracestate))
		return "trace_state";
	if (!otc_str(r->name, s->name))
		return "name";
	if (r->kind != (uint64_t)s->kind)
		return "kind";
	if (r->start != s->start_ns || r->end != s->end_ns)
		return "start or end time";
	if ((why = otc_attrs(&s->attrs, &r->attrs)))
		return why;
	if (r->n_events != s->n_events ||
	    r->dropped_events != s->dropped_events)
		return "the number of events, or dropped";
	for (size_t i = 0; i < s->n_events; i++) {
		if (r->events[i].time != s->events[i]->time_ns)
			return "an event's time";
		if (!otc_str(r->events[i].name, s->events[i]->name))
			return "an event's name";
		if ((why =
			 otc_attrs(&s->events[i]->attrs, &r->events[i].attrs)))
			return why;
	}
	if (r->n_links != s->n_links || r->dropped_links != s->dropped_links)
		return "the number of links, or dropped";
	for (size_t i = 0; i < s->n_links; i++) {
		const tbx__span_link_t *ln = s->links[i];
		if (!pbr_eq(r->links[i].trace_id, ln->trace_id,
			    TBX_TRACE_ID_SIZE) ||
		    !pbr_eq(r->links[i].span_id, ln->span_id, TBX_SPAN_ID_SIZE))
			return "a link's ids";
		if (!otc_str(r->links[i].trace_state, ln->tracestate))
			return "a link's trace_state";
		if ((why = otc_attrs(&ln->attrs, &r->links[i].attrs)))
			return why;
	}
	if (r->has_status != (s->status != TBX_SPAN_STATUS_UNSET))
		return "the status, present or not";
	if (r->has_status && (r->status_code != (uint64_t)s->status ||
			      !otc_str(r->status_message, s->status_msg)))
		return "the status";
	if (r->has_flags != (s->flags != 0) || r->flags != s->flags)
		return "flags";
	return NULL;
}

#endif
