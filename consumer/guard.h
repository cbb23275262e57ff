/*
 * The handler guard (guard.c): while a handler runs, the service store's
 * connection refuses what would end or escape A's transaction.
 *
 * @locality the worker's thread.
 */
#ifndef TBX_CONSUMER_GUARD_H
#define TBX_CONSUMER_GUARD_H

#include <sqlite3.h>
#include <stdint.h>

#include "consumer/msg.h"

/* Armed while a handler runs: the service connection's authorizer and
 * commit hook refuse what would end or escape A's transaction. */
typedef struct tbx__guard {
	tbx_stats_t *stats; /**< counts handler_refused */
	int active;
	const char *topic; /**< the record in hand, for the log */
	int32_t partition;
	int64_t offset;
	int refused;	    /**< statements refused in this handler call */
	int commit_refused; /**< the commit hook turned a COMMIT into a
			       ROLLBACK: A's transaction is gone */
} tbx__guard_t;

/** Installs the authorizer and the commit hook on @p db, the service
 *  store's connection, disarmed; refusals count in @p stats.  Once per
 *  connection. */
void tbx__guard_install(tbx__guard_t *guard, sqlite3 *db, tbx_stats_t *stats);
/** Arms the guard for the handler call of @p msg. */
void tbx__guard_enter(tbx__guard_t *guard, const struct tbx_msg *msg);
void tbx__guard_leave(tbx__guard_t *guard);

#endif
