/*
 * The prepared-statement cache of the SQLite stores (store/stmt.h).
 */
#include "store/stmt.h"

#include "base/log.h"
#include "store/db.h"
#include "store/db_int.h"

/* Logs the connection's last SQLite error with @p what and maps it; never
 * TBX_OK (TBX_ESTORE when SQLite reports none). */
static int db_fail(sqlite3 *db, const char *what)
{
	int rc = sqlite3_errcode(db);
	int err = tbx__db_err(rc);

	tbx__log(tbx__db_log_level(rc), "sqlite: %s: %s", what ? what : "",
		 sqlite3_errmsg(db));
	return err == TBX_OK ? TBX_ESTORE : err;
}

sqlite3_stmt *tbx__db_stmt(sqlite3 *db, sqlite3_stmt **slot, const char *sql)
{
	if (*slot) {
		/* A statement left stepped would pin a read snapshot (and
		 * its lock) across calls: always start from a clean state. */
		sqlite3_reset(*slot);
		sqlite3_clear_bindings(*slot);
		return *slot;
	}
	if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, slot,
			       NULL) != SQLITE_OK) {
		tbx__log(tbx__db_log_level(sqlite3_errcode(db)),
			 "sqlite: prepare %s: %s", sql, sqlite3_errmsg(db));
		sqlite3_finalize(*slot);
		*slot = NULL;
		return NULL;
	}
	return *slot;
}

void tbx__stmts_init(tbx__stmts_t *stmts, sqlite3 *db, const char *const *sql,
		     sqlite3_stmt **slots, int count)
{
	stmts->db = db;
	stmts->sql = sql;
	stmts->slots = slots;
	stmts->count = count;
}

void tbx__stmts_finalize(tbx__stmts_t *stmts)
{
	for (int q = 0; q < stmts->count; q++) {
		sqlite3_finalize(stmts->slots[q]);
		stmts->slots[q] = NULL;
	}
}

int tbx__stmt_get(tbx__stmts_t *stmts, int q, sqlite3_stmt **stmt)
{
	if (!(*stmt = tbx__db_stmt(stmts->db, &stmts->slots[q], stmts->sql[q])))
		return db_fail(stmts->db, stmts->sql[q]);
	return TBX_OK;
}

int tbx__stmt_run(tbx__stmts_t *stmts, int q)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(stmts, q, &stmt)))
		return err;
	return tbx__stmt_done(stmt);
}

int tbx__stmt_step(sqlite3_stmt *stmt, int *row)
{
	int rc, err;

	*row = 0;
	if (tbx__db_fault_hit(sqlite3_sql(stmt))) {
		sqlite3_reset(stmt);
		return TBX_EIO;
	}
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		*row = 1;
		return TBX_OK;
	}
	if (rc == SQLITE_DONE)
		return TBX_OK;
	tbx__log(tbx__db_log_level(rc), "sqlite: %s: %s", sqlite3_sql(stmt),
		 sqlite3_errmsg(sqlite3_db_handle(stmt)));
	err = tbx__db_err(rc);
	sqlite3_reset(stmt);
	return err == TBX_OK ? TBX_ESTORE : err;
}

int tbx__stmt_done(sqlite3_stmt *stmt)
{
	int row, err = tbx__stmt_step(stmt, &row);

	sqlite3_reset(stmt);
	return err;
}

int tbx__stmt_int64(sqlite3_stmt *stmt, int64_t *n)
{
	int row, err = tbx__stmt_step(stmt, &row);

	if (err)
		return err;
	*n = row ? sqlite3_column_int64(stmt, 0) : 0;
	sqlite3_reset(stmt);
	return TBX_OK;
}

int tbx__stmt_bind_fail(sqlite3_stmt *stmt)
{
	int err = db_fail(sqlite3_db_handle(stmt), sqlite3_sql(stmt));

	sqlite3_reset(stmt);
	return err;
}

int tbx__bind_opt_text(sqlite3_stmt *stmt, int i, const char *s)
{
	if (!s || !*s)
		return sqlite3_bind_null(stmt, i);
	return sqlite3_bind_text(stmt, i, s, -1, SQLITE_STATIC);
}

int tbx__bind_blob(sqlite3_stmt *stmt, int i, const void *p, size_t len)
{
	if (!p)
		return sqlite3_bind_null(stmt, i);
	return sqlite3_bind_blob64(stmt, i, p, (sqlite3_uint64)len,
				   SQLITE_STATIC);
}
