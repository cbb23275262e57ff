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

/**
 * Opens a worker's stores: the service store at store.path, created if
 * missing; then the token store, on the service store's connection when
 * tokens.path is empty or names that file, else at tokens.path, created
 * only when tokens.create=true (a missing one is TBX_ENOENT with a message
 * saying how to create it).  Both with store.synchronous and
 * store.busy.timeout.ms.  On failure nothing stays open.
 * @returns TBX_OK with *store and *tokens the caller's, or the error with
 * @p errstr set.
 */
int tbx__stores_open_worker(const tbx__cfg_t *cfg, tbx_outbox_t **store,
			    tbx_tokens_t **tokens, char *errstr,
			    size_t errstr_size);

/**
 * Opens a publisher's token store, tbx__stores_tokens_path(), never
 * creating it (a missing one is TBX_ENOENT with a message saying how to
 * create it), with store.synchronous and store.busy.timeout.ms.
 * @returns TBX_OK with *tokens the caller's, or the error with @p errstr
 * set.
 */
int tbx__stores_open_publisher(const tbx__cfg_t *cfg, tbx_tokens_t **tokens,
			       char *errstr, size_t errstr_size);

/**
 * The stores' part of `tokenbox worker --check-config`: each store file a
 * worker would open is opened read-only when it exists (a tokenbox file
 * of a schema this tokenbox knows); a missing one needs a directory the
 * worker can create it in.  Nothing is created.
 * @returns TBX_OK, or the error with @p errstr naming the key and file.
 */
int tbx__stores_check(const tbx__cfg_t *cfg, char *errstr, size_t errstr_size);

#endif
