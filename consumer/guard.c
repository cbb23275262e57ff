/*
 * The handler guard: while a handler runs, the service store's connection
 * refuses every statement that would end or escape the batch's
 * transaction, and every pragma that would weaken what its COMMIT
 * promises.
 *
 * A handler gets the connection A's transaction is open on
 * (tbx_ctx_db()).  A COMMIT there would commit its effects, and those of
 * the batch's earlier records, without their outbox rows: redelivery
 * would run the handlers again.  BEGIN after it would open a transaction
 * of the handler's own that A then commits as if it were its own.
 *
 * Two SQLite mechanisms, installed once per worker (installing an
 * authorizer expires every prepared statement of the connection, so it is
 * not done per call) and armed only during handler calls:
 *
 *  - the authorizer, consulted when a statement is prepared, denies
 *    BEGIN, COMMIT, ROLLBACK, SAVEPOINT/RELEASE/ROLLBACK TO of the names
 *    tokenbox reserves (tbx_*), ATTACH, DETACH and the pragmas below.
 *    The statement fails to prepare with SQLITE_AUTH ("not authorized");
 *    the worker logs which statement it refused and why;
 *  - the commit hook catches what the authorizer cannot see: a COMMIT
 *    prepared before the handler ran (authorized then).  Returning
 *    non-zero makes SQLite roll the transaction back instead, so nothing
 *    of the batch commits; the worker then dead-letters the record
 *    without running its handler again (protocol.c).
 *
 * @locality the worker's thread.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "consumer/guard.h"

/* Pragmas a handler may read but not set: durability and journaling
 * (what a COMMIT of A promises), and the settings tokenbox's own
 * statements rely on. */
static const char *const refused_pragmas[] = {
    "synchronous",
    "journal_mode",
    "locking_mode",
    "fullfsync",
    "checkpoint_fullfsync",
    "journal_size_limit",
    "wal_autocheckpoint",
    "foreign_keys",
    "ignore_check_constraints",
    "writable_schema",
    "query_only",
    "busy_timeout",
    "application_id",
    "user_version",
    "schema_version",
    "temp_store_directory",
    "data_store_directory",
};

static const char *pragma_refusal(const char *name, const char *value)
{
	if (!name)
		return NULL;
	/* Runs a checkpoint even without a value. */
	if (strcasecmp(name, "wal_checkpoint") == 0)
		return "checkpoints belong to tokenbox, not to a handler";
	if (!value)
		return NULL; /* reading a setting changes nothing */
	for (size_t i = 0;
	     i < sizeof(refused_pragmas) / sizeof(refused_pragmas[0]); i++)
		if (strcasecmp(name, refused_pragmas[i]) == 0)
			return "it changes the durability, journaling or "
			       "settings of the worker's transaction";
	return NULL;
}

static void refused(tbx__guard_t *guard, const char *stmt, const char *why)
{
	guard->refused++;
	if (guard->stats)
		guard->stats->handler_refused++;
	tbx__log(TBX_LOG_ERR,
		 "%s [%" PRId32 "] @%" PRId64
		 ": the handler's %s on tbx_ctx_db() was refused: %s",
		 guard->topic ? guard->topic : "?", guard->partition,
		 guard->offset, stmt, why);
}

static int authorize(void *arg, int action, const char *a1, const char *a2,
		     const char *db, const char *trigger)
{
	tbx__guard_t *guard = arg;
	char stmt[96];
	const char *why = NULL;

	(void)db;
	(void)trigger;
	if (!guard->active)
		return SQLITE_OK;
	switch (action) {
	case SQLITE_TRANSACTION: /* a1: BEGIN, COMMIT or ROLLBACK */
		snprintf(stmt, sizeof(stmt), "%s", a1 ? a1 : "transaction");
		why = "tokenbox owns the transaction: its outbox row must "
		      "commit with the handler's effects";
		break;
	case SQLITE_SAVEPOINT: /* a1: BEGIN, RELEASE or ROLLBACK; a2: name */
		if (a2 && strncasecmp(a2, "tbx_", 4) == 0) {
			snprintf(stmt, sizeof(stmt), "%s %s",
				 a1 && strcmp(a1, "BEGIN") == 0 ? "SAVEPOINT"
				 : a1 && strcmp(a1, "RELEASE") == 0
				     ? "RELEASE"
				     : "ROLLBACK TO",
				 a2);
			why = "savepoint names starting with tbx_ are "
			      "tokenbox's";
		}
		break;
	case SQLITE_ATTACH:
	case SQLITE_DETACH:
		snprintf(stmt, sizeof(stmt), "%s",
			 action == SQLITE_ATTACH ? "ATTACH" : "DETACH");
		why = "a handler's effects belong in the service store";
		break;
	case SQLITE_PRAGMA:
		if ((why = pragma_refusal(a1, a2)))
			snprintf(stmt, sizeof(stmt), "PRAGMA %s", a1);
		break;
	default:
		break;
	}
	if (!why)
		return SQLITE_OK;
	refused(guard, stmt, why);
	return SQLITE_DENY;
}

static int on_commit(void *arg)
{
	tbx__guard_t *guard = arg;

	if (!guard->active)
		return 0;
	guard->commit_refused = 1;
	refused(guard, "COMMIT (a statement prepared before the handler ran)",
		"tokenbox owns the transaction; SQLite rolls the batch back "
		"instead, and the record is dead-lettered");
	return 1; /* SQLite turns the COMMIT into a ROLLBACK */
}

void tbx__guard_install(tbx__guard_t *guard, sqlite3 *db, tbx_stats_t *stats)
{
	memset(guard, 0, sizeof(*guard));
	guard->stats = stats;
	sqlite3_set_authorizer(db, authorize, guard);
	sqlite3_commit_hook(db, on_commit, guard);
}

void tbx__guard_enter(tbx__guard_t *guard, const struct tbx_msg *msg)
{
	guard->topic = msg->topic;
	guard->partition = msg->rkm->partition;
	guard->offset = msg->rkm->offset;
	guard->refused = 0;
	guard->commit_refused = 0;
	guard->active = 1;
}

void tbx__guard_leave(tbx__guard_t *guard)
{
	guard->active = 0;
}
