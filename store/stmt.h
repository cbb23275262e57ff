/*
 * The prepared-statement cache of an SQLite store, and the helpers that
 * bind and step its statements (the service store outbox/sqlite.c and the
 * token store tokens/sqlite.c).
 *
 * A store lists its SQL in one constant table indexed by small integers;
 * each statement is prepared once, on first use, and kept until the store
 * closes.  Every value is bound.  A statement comes out of the cache reset
 * and unbound, and goes back reset as soon as its caller is done with it,
 * so that none holds a read snapshot or a lock between calls.
 *
 * Every function returns TBX_OK or a positive tbx_err_t; a row found goes
 * through an out-parameter.  Every failure is logged with the statement's
 * text and SQLite's message.
 *
 * @locality the thread that uses the store's connection.
 */
#ifndef TBX_STORE_STMT_H
#define TBX_STORE_STMT_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tbx__stmts {
	sqlite3 *db;		/**< borrowed: the store's connection */
	const char *const *sql; /**< borrowed: count statements' text */
	sqlite3_stmt **slots;	/**< borrowed: count slots, NULL until used */
	int count;
} tbx__stmts_t;

/** Sets up @p stmts over @p slots (count entries, all NULL). */
void tbx__stmts_init(tbx__stmts_t *stmts, sqlite3 *db, const char *const *sql,
		     sqlite3_stmt **slots, int count);
/** Finalizes every prepared statement; the slots are NULL again. */
void tbx__stmts_finalize(tbx__stmts_t *stmts);

/**
 * The cached statement @p q, prepared on first use, reset and with its
 * bindings cleared.
 * @returns TBX_OK with *stmt set, or the mapped error (logged).
 */
int tbx__stmt_get(tbx__stmts_t *stmts, int q, sqlite3_stmt **stmt);

/** Runs the parameterless statement @p q that returns no rows (BEGIN,
 *  COMMIT, SAVEPOINT …).  @returns TBX_OK or the error. */
int tbx__stmt_run(tbx__stmts_t *stmts, int q);

/**
 * Steps @p stmt once.
 * @returns TBX_OK with *row 1 (a row is there to read) or 0 (the statement
 * is done), or the mapped error: logged, and the statement reset so that
 * it holds no lock.
 */
int tbx__stmt_step(sqlite3_stmt *stmt, int *row);

/** Steps a bound statement that returns no rows, then resets it.
 *  @returns TBX_OK or the error. */
int tbx__stmt_done(sqlite3_stmt *stmt);

/** Steps a bound statement whose one row is one integer (a count), then
 *  resets it; *n is 0 when there is no row.  @returns TBX_OK or the
 *  error. */
int tbx__stmt_int64(sqlite3_stmt *stmt, int64_t *n);

/** A failed bind: logs, resets @p stmt and @returns the mapped error. */
int tbx__stmt_bind_fail(sqlite3_stmt *stmt);

/** Binds text, or NULL for a NULL or empty string (optional columns).
 *  @returns SQLite's result code. */
int tbx__bind_opt_text(sqlite3_stmt *stmt, int i, const char *s);
/** Binds a blob; a NULL pointer binds SQL NULL (no key, null value), a
 *  non-NULL pointer of length 0 an empty blob.  @returns SQLite's result
 *  code. */
int tbx__bind_blob(sqlite3_stmt *stmt, int i, const void *p, size_t len);

/**
 * The primitive under the cache: returns the prepared statement for @p sql
 * in @p slot, preparing it on first use; resets and clears bindings before
 * returning it.
 * @returns NULL on failure (logged).
 */
sqlite3_stmt *tbx__db_stmt(sqlite3 *db, sqlite3_stmt **slot, const char *sql);

#endif
