/*
 * The stores of a configuration: which file is the token store, and with
 * which options each store is opened, decided here once for the worker,
 * the publisher and `tokenbox worker --check-config`.
 *
 * Locality: any thread; the stores opened belong to the caller.
 */
#ifndef TBX_CONSUMER_STORES_H
#define TBX_CONSUMER_STORES_H

#include <stddef.h>

#include "consumer/conf.h"
#include "outbox/outbox.h"
#include "tokens/tokens.h"

/** The token store's file as configured: tokens.path, else store.path
 *  (one file for both stores); "" when neither is set.  Borrowed from
 *  the configuration of @p cfg. */
const char *tbx__stores_tokens_path(const tbx__cfg_t *cfg);

/** Where the token store is, for messages: tokens.url or (without
 *  tokens.path) store.url, redacted, with tokens.schema; else
 *  tbx__stores_tokens_path().  @returns @p buf. */
const char *tbx__stores_tokens_where(const tbx__cfg_t *cfg, char *buf,
				     size_t size);
/** 1 when the configuration names a token store (a path or a URL). */
int tbx__stores_tokens_set(const tbx__cfg_t *cfg);

/**
 * Opens a worker's stores: the service store at store.path, or in schema
 * store.schema (default: the group id) at store.url, created if missing;
 * then the token store:
 *  - SQLite: on the service store's connection when tokens.path is empty
 *    or names that file (and tokens.url is empty), else at tokens.path
 *    or tokens.url;
 *  - PostgreSQL: in schema tokens.schema, on the service store's
 *    connection (joined) when tokens.url is empty or the same text as
 *    store.url, else at tokens.url on a connection of its own, or at
 *    tokens.path;
 * a token store apart, and any on PostgreSQL, created only when
 * tokens.create=true (a missing one is TBX_ENOENT with a message saying
 * how to create it).  A token store apart is opened before the service
 * store, and a joined one on PostgreSQL looked for first, so that a
 * start refused for it creates nothing.  All with store.synchronous and
 * store.busy.timeout.ms.  On failure nothing stays open; every message
 * names a URL redacted.
 * @returns TBX_OK with *store and *tokens the caller's, or the error with
 * @p errstr set.
 */
int tbx__stores_open_worker(const tbx__cfg_t *cfg, tbx_outbox_t **store,
			    tbx_tokens_t **tokens, char *errstr,
			    size_t errstr_size);

/**
 * Opens a publisher's token store: tokens.url, else
 * tbx__stores_tokens_path(), else store.url's database; never creating it (a
 * missing one is TBX_ENOENT with a message saying how to create it), with
 * store.synchronous and store.busy.timeout.ms.
 * @returns TBX_OK with *tokens the caller's, or the error with @p errstr
 * set.
 */
int tbx__stores_open_publisher(const tbx__cfg_t *cfg, tbx_tokens_t **tokens,
			       char *errstr, size_t errstr_size);

/**
 * outbox.layout = batch at a worker's start: the opened service store
 * @p store has batch rows (SQLite schema TBX_OUTBOX_OBATCH_SQLITE,
 * PostgreSQL service version TBX_OUTBOX_OBATCH_PG, or later) and every
 * operation the layout calls.
 * @returns TBX_OK, or TBX_ESCHEMA with @p errstr naming the store, its
 * version and the one needed.
 */
int tbx__stores_batch_ready(const tbx__cfg_t *cfg, tbx_outbox_t *store,
			    char *errstr, size_t errstr_size);

/**
 * The stores' part of `tokenbox worker --check-config`: each store file a
 * worker would open is opened read-only when it exists (a tokenbox file
 * of a schema this tokenbox knows); a missing service store needs a
 * directory the worker can create it in, a missing token store apart is
 * TBX_ENOENT (as tbx__stores_open_worker() says) unless tokens.create=true.  A
 * store on PostgreSQL is connected to and opened read-only: a service schema
 * not there yet is what the worker creates; a token schema not there is an
 * error unless tokens.create=true.  Nothing is created.
 * @returns TBX_OK, or the error with @p errstr naming the key and file.
 */
int tbx__stores_check(const tbx__cfg_t *cfg, char *errstr, size_t errstr_size);
/**
 * Opens the service store read-only, for --check-config: nothing is
 * created or migrated.  *@p store is NULL with TBX_OK when it is not there
 * yet (a file that does not exist, a service schema not created): what a
 * first start creates.  @returns TBX_OK, or the error with @p errstr.
 */
int tbx__stores_open_service_ro(const tbx__cfg_t *cfg, tbx_outbox_t **store,
				char *errstr, size_t errstr_size);

#endif
