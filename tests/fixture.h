/*
 * Fixtures shared by several test files, above support.h's: the
 * in-process environment of the end-to-end tests (a directory, stores, a
 * cluster), and the `tokenbox` child processes of the multi-process tests
 * (a mock-cluster process, workers logging to a file, store and log
 * readers that wait for a condition).
 */
#ifndef TBX_TESTS_FIXTURE_H
#define TBX_TESTS_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "support.h"

/* ---- PostgreSQL (the pg tier) --------------------------------------- */

/** The server of the pg tier: $TBX_PG_URL (the test fails without it;
 *  ctest's pg_* entries skip before they start). */
const char *tt_pg_url(void);
/** A schema name no other test of this run uses: "t_<tag>_<pid>_<n>". */
void tt_pg_schema(char *out, size_t size, const char *tag);

/* ---- a store behind the backend's back ------------------------------ */

struct tbx_outbox;
/** Opens (creating it) the service store @p store names, a file or a
 *  "pg:SCHEMA" descriptor (hop.h); the test fails when it cannot. */
struct tbx_outbox *tt_outbox_open(const char *store);
/** Runs @p sql (SQLite's dialect) or @p pg_sql (PostgreSQL's; NULL: the
 *  same) on @p store over a connection of its own.  @returns 0 when it
 *  ran, -1 when the store refused it (a constraint). */
int tt_store_sql_try(const char *store, const char *sql, const char *pg_sql);

/* ---- in process ---------------------------------------------------- */

/** A temporary directory with up to three service stores and a token
 *  store, and a cluster (the mock, or the kafka tier's).  The stores are
 *  descriptors (hop.h): files, or in the pg tier schemas, the token
 *  store's joined with the others (tt_store_new()). */
typedef struct tt_env {
	char *dir;
	char *store, *store2, *store3; /**< dir/s1.db, dir/s2.db, dir/s3.db */
	char *tokens;		       /**< dir/tokens.db */
	tt_cluster_t *cluster;
} tt_env_t;

/** Creates the directory and the cluster with @p topics, each
 *  "name:partitions", NULL-terminated.  No store is created. */
void tt_env_init(tt_env_t *e, const char *const topics[]);
void tt_env_fini(tt_env_t *e);

/** Publishes one record per payload to @p topic, type @p type, key "k",
 *  with tokens from e->tokens; asserts the flush. */
void tt_env_publish(const tt_env_t *e, const char *topic, const char *type,
		    const char *const *payloads, size_t cnt);

/** A worker of group g1 handling type Ping of topic "in" with
 *  tt_hop_handle() into table hop1 of its store, in a new directory: the
 *  stores of tt_store_new() and tt_tokens_new() (files, or in the pg tier
 *  schemas apart), g1 subscribed to "in", and a cluster where "in" has
 *  @p parts partitions.  The worker, the only one of its group, is
 *  assigned every partition directly (tbx__worker_assign_directly(): no
 *  group to join); it has not polled yet. */
typedef struct tt_hop_env {
	char *dir, *tokens, *store;
	tt_cluster_t *c;
	tbx_worker_t *w;
	tt_hop_t hop;
} tt_hop_env_t;

void tt_hop_env_start(tt_hop_env_t *f, int parts);
/** tt_hop_env_start() with the worker's settings @p kv ("key", "value"
 *  pairs, NULL-terminated) over tt_conf()'s. */
void tt_hop_env_start_with(tt_hop_env_t *f, int parts, const char *const *kv);
void tt_hop_env_stop(tt_hop_env_t *f);

/** Polls the worker *@p w until it has consumed @p records records in
 *  all (its stats' `consumed`); fails the test after a minute. */
void tt_drain(tbx_worker_t **w, uint64_t records);

/** A tt_drive() condition: tt_count(db, sql) >= n. */
typedef struct tt_want {
	const char *db, *sql;
	int64_t n;
} tt_want_t;
int tt_reached(void *opaque);

/* ---- child processes ------------------------------------------------ */

/** The whole file, malloc'ed ("" when missing). */
char *tt_read_text(const char *path);
/** One integer from @p sql on the store @p db (a file or "pg:SCHEMA"),
 *  or -1 when the file or the table is not there (yet).  Never creates
 *  the file. */
int64_t tt_query(const char *db, const char *sql);
/** Waits until tt_query() gives @p want; @returns 1, or 0 after
 *  @p timeout_ms. */
int tt_wait_query(const char *db, const char *sql, int64_t want,
		  int timeout_ms);
/** Waits until the file @p log contains @p text; @returns 1, or 0 after
 *  @p timeout_ms. */
int tt_wait_log(const char *log, const char *text, int timeout_ms);
/** Fails the test with @p what and the log @p log unless @p ok. */
void tt_assert_log(int ok, const char *log, const char *what);

/** "$TBX_EXAMPLES_DIR/lib<name>.so" (static storage, two calls' worth);
 *  asserts it is built. */
const char *tt_plugin_path(const char *name);

/** A `tokenbox mock-cluster` child. */
typedef struct tt_mock_proc {
	pid_t pid;
	int out_fd;
	char *bootstraps;
} tt_mock_proc_t;

/** Starts `tokenbox mock-cluster` with @p topics ("name:partitions",
 *  NULL-terminated) and reads its bootstrap servers. */
tt_mock_proc_t tt_mock_proc_start(const char *const topics[]);
/** SIGTERM; expects exit 0. */
void tt_mock_proc_stop(tt_mock_proc_t *c);

/** Starts `tokenbox ARGS...` (@p args NULL-terminated) with standard
 *  output and error appended to @p log (NULL: ours). */
pid_t tt_tokenbox_start(const char *const args[], const char *log);
/** Starts `tokenbox worker -X S...` for every setting S of @p settings
 *  and of @p extra (either may be NULL; NULL-terminated), its output
 *  appended to @p log (NULL: ours). */
pid_t tt_worker_start(const char *const settings[], const char *const extra[],
		      const char *log);

/** Publishes @p n orders {"order": "<i>", "amount": <100 + i % 900>} of
 *  type OrderPlaced to "orders", keyed "customer-<i % customers>", with
 *  tokens from @p tokens, flushed every 1000. */
void tt_publish_orders(const char *bootstraps, const char *tokens, int n,
		       int customers);

#endif
