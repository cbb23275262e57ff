/*
 * The handler guard (guard.c): while a handler runs, the service store's
 * connection refuses what would end or escape A's transaction (SQLite),
 * tbx_ctx_exec() refuses it on either backend, and after the call the
 * worker checks that A's transaction and the record's savepoint are still
 * there (PostgreSQL, where libpq cannot refuse beforehand).
 *
 * @locality the worker's thread.
 */
#ifndef TBX_CONSUMER_GUARD_H
#define TBX_CONSUMER_GUARD_H

#include <stdint.h>

#include "consumer/msg.h"
#include "outbox/outbox.h"

/* Armed while a handler runs. */
typedef struct tbx__guard {
	tbx_outbox_t *store; /**< the service store, borrowed */
	tbx_stats_t *stats;  /**< counts handler_refused */
	int active;
	const char *topic; /**< the record in hand, for the log */
	int32_t partition;
	int64_t offset;
	int refused;	    /**< statements refused in this handler call */
	int commit_refused; /**< the commit hook turned a COMMIT into a
			       ROLLBACK: A's transaction is gone */
	int probe;	    /**< PostgreSQL: the guard's savepoint was set
			       when the handler took the connection */
} tbx__guard_t;

/** What the handler left of A's transaction (tbx__guard_check()). */
typedef enum tbx__guard_state {
	TBX_GUARD_OK = 0,  /**< open, the record's savepoint in place */
	TBX_GUARD_ABORTED, /**< PostgreSQL: a statement failed; the
			      record's savepoint can still undo it */
	TBX_GUARD_BROKEN,  /**< PostgreSQL: the record's savepoint was
			      released or rolled back past; A must be
			      rolled back whole */
	TBX_GUARD_ENDED,   /**< the transaction is gone (COMMIT or
			      ROLLBACK) */
} tbx__guard_state_t;

/** Installs the guard on @p store, disarmed; refusals count in @p stats.
 *  SQLite: the authorizer and the commit hook on its connection, once per
 *  connection. */
void tbx__guard_install(tbx__guard_t *guard, tbx_outbox_t *store,
			tbx_stats_t *stats);
/** Arms the guard for the handler call of @p msg. */
void tbx__guard_enter(tbx__guard_t *guard, const struct tbx_msg *msg);
void tbx__guard_leave(tbx__guard_t *guard);

/** The PostgreSQL connection for tbx_ctx_pg(), NULL on SQLite.  The
 *  first call of a handler call sets the guard's savepoint, which
 *  tbx__guard_check() releases to prove the record's savepoint is still
 *  there. */
void *tbx__guard_pg(tbx__guard_t *guard);

/** After the handler call (disarmed): what is left of A's transaction.
 *  Logs and counts what the handler broke. */
tbx__guard_state_t tbx__guard_check(tbx__guard_t *guard);

/** tbx_ctx_exec()'s check of @p sql by its first keywords: 1 when it
 *  would end or escape A's transaction (refused: logged at ERROR,
 *  counted in handler_refused), else 0. */
int tbx__guard_sql(tbx__guard_t *guard, const char *sql);

#endif
