#ifndef TBX_TESTS_HOP_H
#define TBX_TESTS_HOP_H

#include <stddef.h>

#include "tokenbox/tokenbox.h"

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
 * ($TBX_PG_URL) --, or for a token store "pg2:SCHEMA", the same server
 * under a second connection string (the URL with another
 * application_name).  A worker whose service store and token store are
 * both "pg:…" takes the joined path (one connection, A with B, D with E),
 * as with one SQLite file; with a "pg2:…" token store it takes the path of
 * two databases (separate transactions on S and T), as with two files.
 */
/** 1 when @p store names a PostgreSQL schema. */
int tt_store_is_pg(const char *store);
/** The schema of a PostgreSQL descriptor (after the colon). */
const char *tt_store_schema(const char *store);
/** The connection string of a PostgreSQL descriptor, into @p out. */
const char *tt_store_url(const char *store, char *out, size_t size);

struct pg_conn; /* libpq's PGconn */
/** A libpq connection to @p conninfo without NOTICEs (the IF EXISTS of
 *  the fixtures' DDL stays out of the tests' output); PQstatus() says
 *  whether it is made. */
struct pg_conn *tt_pg_connect(const char *conninfo);

/** One setting. */
typedef struct tt_kv {
	char key[32];
	char val[2200];
} tt_kv_t;
/** The settings that name a worker's service store @p store and token
 *  store @p tokens (either may be NULL): "store.path" and "tokens.path",
 *  or for PostgreSQL "store.url" -- with the connection's search_path
 *  set to the store's schema, where the handlers' unqualified tables are
 *  found (docs/handlers.md) -- and "store.schema", "tokens.schema", and
 *  "tokens.url" unless the token store is joined to the service store.
 *  @returns how many (at most 5) are in @p kv. */
int tt_stores_kv(const char *store, const char *tokens, tt_kv_t kv[5]);
/** Sets tt_stores_kv()'s settings in @p conf.  @returns TBX_OK or the
 *  error of tbx_conf_set() with @p err saying why. */
int tt_stores_conf(tbx_conf_t *conf, const char *store, const char *tokens,
		   char *err, size_t err_size);

/** Creates the hop's table in the store (an SQLite file, or a schema made
 *  if missing). */
void tt_hop_table(const char *store, const char *table);
tbx_verdict_t tt_hop_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque);

#endif
