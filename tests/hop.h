#ifndef TBX_TESTS_HOP_H
#define TBX_TESTS_HOP_H

#include <stddef.h>

#include "tokenbox/tokenbox.h"

/* The PostgreSQL backends of both stores are linked. */
#define TT_HAVE_PG_STORES 0

/* A pipeline hop for tests: the handler inserts (msg_id, key, payload,
 * topic, partition, offset, attempt) into @p table of the service store
 * and, when @p next_topic is set, sends one message there with the same
 * payload.  Payloads listed in @p reject are rejected; a payload listed in
 * @p retry asks to retry until its attempt number exceeds @p retry_times. */
typedef struct tt_hop {
	const char *table;
	const char *next_topic;
	const char *next_type;
	const char *reject; /**< payload to REJECT, or NULL */
	const char *retry;  /**< payload to RETRY, or NULL ("*": every one) */
	int retry_times;
	const char *die_on; /**< payloads whose handler kills the process,
			       comma-separated */
} tt_hop_t;

/*
 * A store as the tests name it (a store descriptor): an SQLite file's
 * path, or "pg:SCHEMA" -- the schema SCHEMA on the pg tier's server
 * ($TBX_PG_URL) --, or "pg2:SCHEMA", the same server under a second
 * connection string (the URL with another application_name): a worker
 * whose service store is "pg:…" and token store "pg2:…" takes the path of
 * two databases (separate transactions on S and T), as with two SQLite
 * files; with both "pg:…" it takes the joined path, as with one file.
 */
/** 1 when @p store names a PostgreSQL schema. */
int tt_store_is_pg(const char *store);
/** The schema of a PostgreSQL descriptor (after the colon). */
const char *tt_store_schema(const char *store);
/** The connection string of a PostgreSQL descriptor, into @p out. */
const char *tt_store_url(const char *store, char *out, size_t size);
/** Sets "@p which.path" (@p which: "store" or "tokens"), or "@p which.url"
 *  and "@p which.schema", in @p conf.  @returns TBX_OK or the error of
 *  tbx_conf_set() with @p err saying why. */
int tt_store_conf(tbx_conf_t *conf, const char *which, const char *store,
		  char *err, size_t err_size);

/** The settings of @p store for `tokenbox worker -X`: "@p which.path=…"
 *  into @p kv1 and "" into @p kv2, or "@p which.url=…" and
 *  "@p which.schema=…" (each @p size bytes).  @returns @p kv1. */
const char *tt_store_args(const char *which, const char *store, char *kv1,
			  char *kv2, size_t size);

/** Creates the hop's table in the store (an SQLite file, or a schema made
 *  if missing). */
void tt_hop_table(const char *store, const char *table);
tbx_verdict_t tt_hop_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque);

#endif
