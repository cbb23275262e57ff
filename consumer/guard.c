/*
 * The handler guard: while a handler runs, the service store's connection
 * refuses every statement that would end or escape the batch's
 * transaction, and every setting that would weaken what its COMMIT
 * promises.
 *
 * A handler gets the connection A's transaction is open on (tbx_ctx_db(),
 * tbx_ctx_pg()).  A COMMIT there would commit its effects, and those of
 * the batch's earlier records, without their outbox rows: redelivery
 * would run the handlers again.  BEGIN after it would open a transaction
 * of the handler's own that A then commits as if it were its own.
 *
 * On SQLite, two mechanisms, installed once per worker (installing an
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
 *    without running its handler again (proto_record.c).
 *
 * libpq has neither.  On PostgreSQL, tbx_ctx_exec() refuses such
 * statements by their first keywords (on SQLite too, before the
 * authorizer sees them), and after every handler call the worker checks
 * the connection: still inside A's transaction (PQtransactionStatus),
 * and, when the handler took the connection itself (tbx_ctx_pg()), the
 * record's savepoint still there.  That is proved by a savepoint of the
 * guard's own, set inside the record's when the handler takes the
 * connection and released after the call: releasing the record's
 * savepoint, or rolling back to it, takes the guard's with it.  A handler
 * that only uses tbx_ctx_exec() costs no statement more.
 *
 * @locality the worker's thread.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <libpq-fe.h>
#include <sqlite3.h>

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
		 ": the handler's %s was refused: %s",
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

void tbx__guard_install(tbx__guard_t *guard, tbx_outbox_t *store,
			tbx_stats_t *stats)
{
	sqlite3 *db = tbx_outbox_native(store, TBX_BACKEND_SQLITE);

	memset(guard, 0, sizeof(*guard));
	guard->store = store;
	guard->stats = stats;
	if (db) {
		sqlite3_set_authorizer(db, authorize, guard);
		sqlite3_commit_hook(db, on_commit, guard);
	}
}

void tbx__guard_enter(tbx__guard_t *guard, const struct tbx_msg *msg)
{
	guard->topic = msg->topic;
	guard->partition = msg->rkm->partition;
	guard->offset = msg->rkm->offset;
	guard->refused = 0;
	guard->commit_refused = 0;
	guard->probe = 0;
	guard->active = 1;
}

void tbx__guard_leave(tbx__guard_t *guard)
{
	guard->active = 0;
}

/* Runs one of the guard's own statements; @returns 1 when it worked. */
static int pg_run(PGconn *conn, const char *sql)
{
	PGresult *res = PQexec(conn, sql);
	int ok = PQresultStatus(res) == PGRES_COMMAND_OK;

	PQclear(res);
	return ok;
}

void *tbx__guard_pg(tbx__guard_t *guard)
{
	PGconn *conn = tbx_outbox_native(guard->store, TBX_BACKEND_PG);

	if (conn && guard->active && !guard->probe &&
	    PQtransactionStatus(conn) == PQTRANS_INTRANS)
		guard->probe = pg_run(conn, "SAVEPOINT tbx_guard");
	return conn;
}

tbx__guard_state_t tbx__guard_check(tbx__guard_t *guard)
{
	sqlite3 *db = tbx_outbox_native(guard->store, TBX_BACKEND_SQLITE);
	PGconn *conn;
	PGTransactionStatusType st;
	int probe = guard->probe;

	if (db)
		return sqlite3_get_autocommit(db) ? TBX_GUARD_ENDED
						  : TBX_GUARD_OK;
	/* Unless the handler had the raw connection (the probe's savepoint
	 * comes after what is deferred), nothing is sent for the look: a
	 * write the handler deferred (tbx_ctx_exec()) fails A later, and A
	 * is done again with every statement waiting for its answer
	 * (consumer/proto_process.c). */
	if (!(conn = tbx_outbox_native(
		  guard->store, probe ? TBX_BACKEND_PG : TBX_BACKEND_PG_PEEK)))
		return TBX_GUARD_OK;
	guard->probe = 0;
	/* A lost connection is no handler's doing: the statements that
	 * follow fail, and the batch is retried. */
	if (PQstatus(conn) != CONNECTION_OK)
		return TBX_GUARD_ABORTED;
	st = PQtransactionStatus(conn);
	if (st == PQTRANS_IDLE)
		return TBX_GUARD_ENDED;
	if (st != PQTRANS_INTRANS && st != PQTRANS_INERROR)
		return TBX_GUARD_BROKEN; /* a query left running */
	if (!probe)
		return st == PQTRANS_INERROR ? TBX_GUARD_ABORTED : TBX_GUARD_OK;
	if (st == PQTRANS_INERROR) {
		/* Only a rollback to a savepoint works in an aborted
		 * transaction; the record is undone anyway. */
		if (pg_run(conn, "ROLLBACK TO SAVEPOINT tbx_guard") &&
		    pg_run(conn, "RELEASE SAVEPOINT tbx_guard"))
			return TBX_GUARD_ABORTED;
	} else if (pg_run(conn, "RELEASE SAVEPOINT tbx_guard")) {
		return TBX_GUARD_OK;
	}
	if (PQstatus(conn) != CONNECTION_OK)
		return TBX_GUARD_ABORTED;
	return PQtransactionStatus(conn) == PQTRANS_IDLE ? TBX_GUARD_ENDED
							 : TBX_GUARD_BROKEN;
}

/*
 * tbx_ctx_exec()'s check, by the statement's first keywords.
 */

/* Skips white space and comments. */
static const char *blank(const char *p)
{
	for (;;) {
		while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
			p++;
		if (p[0] == '-' && p[1] == '-') {
			p += strcspn(p, "\n");
		} else if (p[0] == '/' && p[1] == '*') {
			const char *end = strstr(p + 2, "*/");
			p = end ? end + 2 : p + strlen(p);
		} else {
			return p;
		}
	}
}

/* Reads the next word (letters, digits, '_'; or a quoted identifier,
 * without its quotes) into @p w, lower-cased.  @returns where it ended. */
static const char *word(const char *p, char *w, size_t size)
{
	size_t n = 0;

	p = blank(p);
	if (*p == '"') {
		for (p++; *p && *p != '"'; p++)
			if (n + 1 < size)
				w[n++] = *p;
		if (*p == '"')
			p++;
	} else {
		for (; (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		       (*p >= '0' && *p <= '9') || *p == '_';
		     p++)
			if (n + 1 < size)
				w[n++] = (char)(*p >= 'A' && *p <= 'Z'
						    ? *p - 'A' + 'a'
						    : *p);
	}
	w[n] = '\0';
	return p;
}

/* Settings of the transaction and the session that tokenbox's own
 * statements rely on (SET, SET LOCAL, SET SESSION, RESET). */
static const char *const refused_settings[] = {
    "synchronous_commit",
    "lock_timeout",
    "statement_timeout",
    "idle_in_transaction_session_timeout",
    "transaction_isolation",
    "default_transaction_isolation",
    "transaction_read_only",
    "default_transaction_read_only",
    "transaction_deferrable",
    "default_transaction_deferrable",
    "transaction",
    "session",
    "session_authorization",
    "role",
    "timezone",
    "time",
    "all",
};

static int tbx_name(const char *name)
{
	return strncmp(name, "tbx_", 4) == 0;
}

int tbx__guard_sql(tbx__guard_t *guard, const char *sql)
{
	char w1[40], w2[80], w3[80], stmt[200];
	const char *p = sql, *why = NULL;

	p = word(p, w1, sizeof(w1));
	p = word(p, w2, sizeof(w2));
	snprintf(stmt, sizeof(stmt), "%s%s%s", w1, *w2 ? " " : "", w2);
	if (!strcmp(w1, "begin") || !strcmp(w1, "start") ||
	    !strcmp(w1, "commit") || !strcmp(w1, "end") ||
	    !strcmp(w1, "abort")) {
		why = "tokenbox owns the transaction: its outbox row must "
		      "commit with the handler's effects";
	} else if (!strcmp(w1, "rollback")) {
		if (!strcmp(w2, "work") || !strcmp(w2, "transaction"))
			p = word(p, w2, sizeof(w2));
		if (!strcmp(w2, "to")) {
			p = word(p, w3, sizeof(w3));
			if (!strcmp(w3, "savepoint"))
				p = word(p, w3, sizeof(w3));
			snprintf(stmt, sizeof(stmt), "ROLLBACK TO %s", w3);
			if (tbx_name(w3))
				why = "savepoint names starting with tbx_ are "
				      "tokenbox's";
		} else {
			why = "tokenbox owns the transaction: its outbox row "
			      "must commit with the handler's effects";
		}
	} else if (!strcmp(w1, "release") || !strcmp(w1, "savepoint")) {
		const char *name = w2;
		if (!strcmp(w1, "release") && !strcmp(w2, "savepoint")) {
			p = word(p, w3, sizeof(w3));
			name = w3;
		}
		snprintf(stmt, sizeof(stmt), "%s %s", w1, name);
		if (tbx_name(name))
			why = "savepoint names starting with tbx_ are "
			      "tokenbox's";
	} else if (!strcmp(w1, "prepare") && !strcmp(w2, "transaction")) {
		why = "tokenbox owns the transaction: a prepared transaction "
		      "would escape it";
	} else if (!strcmp(w1, "deallocate") || !strcmp(w1, "discard")) {
		why = "the connection's prepared statements are tokenbox's";
	} else if (!strcmp(w1, "set") || !strcmp(w1, "reset")) {
		const char *name = w2;
		if (!strcmp(w2, "local") || !strcmp(w2, "session")) {
			p = word(p, w3, sizeof(w3));
			name = w3;
			if (!*w3 || !strcmp(w3, "characteristics") ||
			    !strcmp(w3, "authorization"))
				name = "session";
		}
		snprintf(stmt, sizeof(stmt), "%s %s", w1, name);
		for (size_t i = 0;
		     i < sizeof(refused_settings) / sizeof(refused_settings[0]);
		     i++)
			if (strcmp(name, refused_settings[i]) == 0)
				why = "it changes the durability, isolation or "
				      "settings of the worker's transaction";
	}
	(void)p;
	if (!why)
		return 0;
	for (char *c = stmt; *c && *c != ' '; c++) /* the keyword */
		if (*c >= 'a' && *c <= 'z')
			*c = (char)(*c - 'a' + 'A');
	refused(guard, stmt, why);
	return 1;
}
