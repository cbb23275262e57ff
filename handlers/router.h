/*
 * Handler registration and routing: (topic, tbx-type) -> handler, with an
 * optional catch-all per topic.  Not thread-safe; built before the worker
 * runs and read-only afterwards.
 */
#ifndef TBX_HANDLERS_ROUTER_H
#define TBX_HANDLERS_ROUTER_H

#include <stddef.h>

#include "tokenbox/tokenbox.h"

typedef struct tbx_router tbx_router_t;

typedef struct tbx__route {
	tbx_handler_fn fn;
	void *opaque;
} tbx__route_t;

tbx_router_t *tbx_router_new(void);
void tbx_router_destroy(tbx_router_t *router);
/** @p type NULL: the topic's catch-all.  @returns TBX_OK, TBX_EEXIST,
 *  TBX_EINVAL or TBX_ENOMEM. */
int tbx_router_add(tbx_router_t *router, const char *topic, const char *type,
		   tbx_handler_fn fn, void *opaque);
/** Exact (topic, type) first, then the topic's catch-all.  @p type may be
 *  NULL (only the catch-all matches).  @returns NULL when none. */
const tbx__route_t *tbx_router_lookup(const tbx_router_t *router,
				      const char *topic, const char *type);
/** Distinct topics, in registration order; borrowed. */
size_t tbx_router_topic_count(const tbx_router_t *router);
const char *tbx_router_topic(const tbx_router_t *router, size_t i);

#endif
