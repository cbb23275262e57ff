/*
 * Statement helpers shared by the SQLite stores (outbox/outbox.c and
 * tokens/sqlite.c), on top of store/db.h.  Internal to those two files.
 */
#ifndef TBX_STORE_DB_INT_H
#define TBX_STORE_DB_INT_H

#include <sqlite3.h>

/**
 * Steps @p stmt once.
 * @returns 1 for a row, 0 when the statement is done, or a negated tbx_err_t
 * (logged with the statement's text and SQLite's message; the statement is
 * reset so that it holds no lock).
 */
int tbx__db_step(sqlite3_stmt *stmt);

/**
 * Logs the connection's last SQLite error with @p what and maps it.
 * @returns a tbx_err_t, never TBX_OK (TBX_ESTORE when SQLite reports none).
 */
int tbx__db_fail(sqlite3 *db, const char *what);

#endif
