/*
 * A finished or open span, as OpenTelemetry defines it: ids, name, kind,
 * times, attributes (string, integer, boolean), events with attributes,
 * links, and a status.  A span is built by one thread and then handed
 * whole to the exporter (export.h), which frees it.
 *
 * Bounds: at most TBX_SPAN_ATTRS_MAX attributes per span, event or link,
 * TBX_SPAN_EVENTS_MAX events, TBX_SPAN_LINKS_MAX links and
 * TBX_SPAN_VALUE_MAX bytes per string value (longer values are cut);
 * what is left out is counted in the span (the OTLP dropped*Count
 * fields), as is an allocation that failed.
 */
#ifndef TBX_TRACE_SPAN_H
#define TBX_TRACE_SPAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "trace/context.h"

#define TBX_SPAN_ATTRS_MAX  128
#define TBX_SPAN_EVENTS_MAX 128
#define TBX_SPAN_LINKS_MAX  128
#define TBX_SPAN_VALUE_MAX  4096

/** Span kinds, numbered as OTLP's SpanKind. */
typedef enum tbx__span_kind {
	TBX_SPAN_KIND_UNSPECIFIED = 0,
	TBX_SPAN_KIND_INTERNAL = 1,
	TBX_SPAN_KIND_SERVER = 2,
	TBX_SPAN_KIND_CLIENT = 3,
	TBX_SPAN_KIND_PRODUCER = 4,
	TBX_SPAN_KIND_CONSUMER = 5,
} tbx__span_kind_t;

/** Status codes, numbered as OTLP's Status.StatusCode. */
typedef enum tbx__span_status {
	TBX_SPAN_STATUS_UNSET = 0,
	TBX_SPAN_STATUS_OK = 1,
	TBX_SPAN_STATUS_ERROR = 2,
} tbx__span_status_t;

typedef enum tbx__attr_type {
	TBX_ATTR_STRING,
	TBX_ATTR_INT,
	TBX_ATTR_BOOL,
} tbx__attr_type_t;

typedef struct tbx__attr {
	char *key;
	uint32_t key_len;   /* strlen(key): compared before the key's bytes */
	uint8_t key_static; /* key is the caller's, not a copy: not freed */
	uint8_t val_pooled; /* v.s is in the span's pool: not freed */
	tbx__attr_type_t type;
	uint32_t len; /* TBX_ATTR_STRING: bytes of s (at most
			 TBX_SPAN_VALUE_MAX), any bytes */
	union {
		char *s;
		int64_t i;
		int b;
	} v;
} tbx__attr_t;

/* A span's bytes for its short string values and names, filled in place
 * instead of an allocation each; what does not fit is allocated. */
#define TBX_SPAN_POOL_SIZE 256
typedef struct tbx__span_pool {
	size_t used;
	char bytes[TBX_SPAN_POOL_SIZE];
} tbx__span_pool_t;

typedef struct tbx__attrs {
	tbx__attr_t *v;
	size_t n, cap;
	uint32_t dropped; /* over TBX_SPAN_ATTRS_MAX, or out of memory */
	int v_inline;	  /* v is an array of the span's own: not freed */
	int owned;	  /* an attribute holds an allocation (a copied key or
			     value): they are freed one by one, else none is */
	tbx__span_pool_t *pool; /* the span's pool; NULL: none */
} tbx__attrs_t;

/* Attributes and events a span holds in place, the most a worker's span
 * sets (more are allocated). */
#define TBX_SPAN_INLINE_ATTRS  12
#define TBX_SPAN_INLINE_EVENTS 1
#define TBX_EVENT_INLINE_ATTRS 1

typedef struct tbx__span_event {
	char *name;
	uint64_t time_ns;
	tbx__attrs_t attrs;
	int in_span; /* one of the span's own slots: not freed */
	tbx__attr_t attr_slots[TBX_EVENT_INLINE_ATTRS];
} tbx__span_event_t;

typedef struct tbx__span_link {
	uint8_t trace_id[TBX_TRACE_ID_SIZE];
	uint8_t span_id[TBX_SPAN_ID_SIZE];
	char *tracestate; /* NULL: none */
	tbx__attrs_t attrs;
} tbx__span_link_t;

typedef struct tbx__span {
	struct tbx__span *next; /* the exporter's queue */
	uint8_t trace_id[TBX_TRACE_ID_SIZE];
	uint8_t span_id[TBX_SPAN_ID_SIZE];
	uint8_t parent_id[TBX_SPAN_ID_SIZE]; /* all zero: a root span */
	uint8_t flags;			     /* TBX_TRACE_FLAG_* */
	char *tracestate;		     /* NULL: none */
	char *name;
	tbx__span_kind_t kind;
	uint64_t start_ns, end_ns; /* Unix time in nanoseconds */
	tbx__attrs_t attrs;
	tbx__span_event_t **events;
	size_t n_events, cap_events;
	uint32_t dropped_events;
	tbx__span_link_t **links;
	size_t n_links, cap_links;
	uint32_t dropped_links;
	tbx__span_status_t status;
	char *status_msg; /* NULL: none */
	/* In place, not allocated one by one (span.c); not to be read. */
	tbx__span_event_t *event_ptrs[TBX_SPAN_INLINE_EVENTS];
	tbx__span_event_t event_slots[TBX_SPAN_INLINE_EVENTS];
	tbx__attr_t attr_slots[TBX_SPAN_INLINE_ATTRS];
	tbx__span_pool_t pool;
} tbx__span_t;

/** The wall clock in nanoseconds since the Unix epoch. */
uint64_t tbx__now_ns(void);

/**
 * A new span named @p name in the trace and with the id of @p ctx
 * (ctx->flags are the span's flags), child of @p parent_id (NULL: a
 * root span), started at @p start_ns.  The caller owns it until it hands
 * it to tbx__exporter_enqueue() or frees it with tbx__span_free().
 * @returns the span, or NULL when out of memory.
 */
tbx__span_t *tbx__span_new(const char *name, tbx__span_kind_t kind,
			   const tbx__trace_ctx_t *ctx,
			   const uint8_t *parent_id, uint64_t start_ns);
/** Frees @p span and all it holds.  NULL: no-op. */
void tbx__span_free(tbx__span_t *span);
/**
 * As tbx__span_new(), in @p span, memory of sizeof(tbx__span_t) the
 * caller gives (a span cleared by tbx__span_clear(), or fresh memory):
 * the exporter's free list reuses spans this way (export.h).
 * @returns @p span, or NULL when out of memory (nothing is held then).
 */
tbx__span_t *tbx__span_init(tbx__span_t *span, const char *name,
			    tbx__span_kind_t kind, const tbx__trace_ctx_t *ctx,
			    const uint8_t *parent_id, uint64_t start_ns);
/** Frees all @p span holds but its own memory, which is then for
 *  tbx__span_init() (or free()) only. */
void tbx__span_clear(tbx__span_t *span);

/** Keeps a copy of @p tracestate (a normalised value,
 *  tbx__tracestate_normalize(); "" or NULL: none). */
void tbx__span_set_tracestate(tbx__span_t *span, const char *tracestate);
/** Sets the status; @p msg (may be NULL) is kept for ERROR only, as
 *  OpenTelemetry asks. */
void tbx__span_set_status(tbx__span_t *span, tbx__span_status_t status,
			  const char *msg);

/** Attributes: a string of @p len bytes (any bytes: the encoder makes
 *  them valid UTF-8), an integer, a boolean.  A key set twice keeps the
 *  last value. */
void tbx__attrs_str(tbx__attrs_t *a, const char *key, const char *val,
		    size_t len);
void tbx__attrs_int(tbx__attrs_t *a, const char *key, int64_t val);
void tbx__attrs_bool(tbx__attrs_t *a, const char *key, int val);
/** As tbx__attrs_str() and tbx__attrs_int(), @p key not copied: it
 *  must outlive the attributes (a string literal) and be printable ASCII
 *  without '"' or '\\' (the encoder writes it as it is).  A span's attributes
 *  are set per record: the copy of each key was a third of the cost of
 *  building a span. */
void tbx__attrs_str_static(tbx__attrs_t *a, const char *key, const char *val,
			   size_t len);
void tbx__attrs_int_static(tbx__attrs_t *a, const char *key, int64_t val);
/** As the _static setters, for a key not set yet (each of a fresh list's
 *  distinct literal keys): appended without looking for it among the
 *  keys set before, which the other setters do for every key. */
void tbx__attrs_add_str_static_n(tbx__attrs_t *a, const char *key,
				 size_t key_len, const char *val, size_t len);
void tbx__attrs_add_int_static_n(tbx__attrs_t *a, const char *key,
				 size_t key_len, int64_t val);
/* Inline, so that a literal key's length is known when compiled: the
 * worker sets some twenty attributes a record this way. */
static inline void tbx__attrs_add_str_static(tbx__attrs_t *a, const char *key,
					     const char *val, size_t len)
{
	tbx__attrs_add_str_static_n(a, key, strlen(key), val, len);
}
static inline void tbx__attrs_add_int_static(tbx__attrs_t *a, const char *key,
					     int64_t val)
{
	tbx__attrs_add_int_static_n(a, key, strlen(key), val);
}
void tbx__attrs_free(tbx__attrs_t *a);

/** Adds an event; @returns it (owned by the span, valid until the span
 *  is freed) for its attributes, or NULL when it was dropped. */
tbx__span_event_t *tbx__span_add_event(tbx__span_t *span, const char *name,
				       uint64_t time_ns);
/** Adds a link to the span @p ctx; @returns it (owned by the span) for
 *  its attributes, or NULL when it was dropped. */
tbx__span_link_t *tbx__span_add_link(tbx__span_t *span,
				     const tbx__trace_ctx_t *ctx);
/** Room for @p n links (at most TBX_SPAN_LINKS_MAX) in one allocation,
 *  for a caller that knows how many it adds: a growing array of a batch's
 *  links was reallocated again and again, large enough each time for
 *  malloc to consolidate its free chunks.  Out of memory: no-op. */
void tbx__span_reserve_links(tbx__span_t *span, size_t n);

#endif
