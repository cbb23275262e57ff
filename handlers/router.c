/*
 * Routing table: a flat array searched linearly.  Workers subscribe a
 * handful of topics with a handful of types each; a hash table would cost
 * more than it saves and the lookup is not on a hot path compared with
 * the SQLite work per message.
 */
#include "handlers/router.h"

#include <stdlib.h>
#include <string.h>

typedef struct entry {
	char *topic;
	char *type; /* NULL: catch-all */
	tbx__route_t route;
} entry_t;

struct tbx_router {
	entry_t *entries;
	size_t cnt, cap;
	char **topics;
	size_t topic_cnt;
};

tbx_router_t *tbx_router_new(void)
{
	return calloc(1, sizeof(tbx_router_t));
}

void tbx_router_destroy(tbx_router_t *router)
{
	if (!router)
		return;
	for (size_t i = 0; i < router->cnt; i++) {
		free(router->entries[i].topic);
		free(router->entries[i].type);
	}
	free(router->entries);
	free(router->topics); /* borrowed from entries */
	free(router);
}

static entry_t *find(const tbx_router_t *router, const char *topic,
		     const char *type)
{
	for (size_t i = 0; i < router->cnt; i++) {
		entry_t *e = &router->entries[i];
		if (strcmp(e->topic, topic) != 0)
			continue;
		if ((!type && !e->type) ||
		    (type && e->type && strcmp(type, e->type) == 0))
			return e;
	}
	return NULL;
}

int tbx_router_add(tbx_router_t *router, const char *topic, const char *type,
		   tbx_handler_fn fn, void *opaque)
{
	entry_t *e;
	int new_topic = 1;

	if (!router || !topic || !*topic || !fn || (type && !*type))
		return TBX_EINVAL;
	if (find(router, topic, type))
		return TBX_EEXIST;
	for (size_t i = 0; i < router->cnt; i++)
		if (strcmp(router->entries[i].topic, topic) == 0)
			new_topic = 0;
	if (router->cnt == router->cap) {
		size_t cap = router->cap ? router->cap * 2 : 8;
		entry_t *grown = realloc(router->entries, cap * sizeof(*grown));
		if (!grown)
			return TBX_ENOMEM;
		router->entries = grown;
		router->cap = cap;
	}
	if (new_topic) {
		char **grown = realloc(router->topics, (router->topic_cnt + 1) *
							   sizeof(*grown));
		if (!grown)
			return TBX_ENOMEM;
		router->topics = grown;
	}
	e = &router->entries[router->cnt];
	e->topic = strdup(topic);
	e->type = type ? strdup(type) : NULL;
	if (!e->topic || (type && !e->type)) {
		free(e->topic);
		free(e->type);
		return TBX_ENOMEM;
	}
	e->route.fn = fn;
	e->route.opaque = opaque;
	router->cnt++;
	if (new_topic)
		router->topics[router->topic_cnt++] = e->topic;
	return TBX_OK;
}

const tbx__route_t *tbx_router_lookup(const tbx_router_t *router,
				      const char *topic, const char *type)
{
	entry_t *e = type ? find(router, topic, type) : NULL;

	if (!e)
		e = find(router, topic, NULL);
	return e ? &e->route : NULL;
}

size_t tbx_router_topic_count(const tbx_router_t *router)
{
	return router->topic_cnt;
}

const char *tbx_router_topic(const tbx_router_t *router, size_t i)
{
	return i < router->topic_cnt ? router->topics[i] : NULL;
}
