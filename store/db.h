/*
 * SQLite helpers shared by the service store and the token store.
 *
 * A tokenbox database file carries the whole tokenbox schema (outbox and
 * token tables); a deployment may use one file for both stores or one file
 * each, and the unused tables of a file stay empty.  The schema version is
 * PRAGMA user_version; PRAGMA application_id marks the file as tokenbox's.
 */
#ifndef TBX_STORE_DB_H
#define TBX_STORE_DB_H

#include <sqlite3.h>
#include <stddef.h>

/** 'TBOX' */
#define TBX_APPLICATION_ID 0x54424f58
/** Current schema version (PRAGMA user_version). */
#define TBX_SCHEMA_VERSION 16

typedef struct tbx__db_opts {
	int synchronous_full; /**< 1: synchronous=FULL, 0: NORMAL */
	int busy_timeout_ms;
	int readonly; /**< open read-only, never create, migrate, write
			   nor checkpoint */
	int create;   /**< create the file when missing (else NOENT) */
} tbx__db_opts_t;

/** Defaults: FULL, 5000 ms, read-write, create. */
void tbx__db_opts_init(tbx__db_opts_t *opts);

/**
 * Opens @p path with WAL, the synchronous level, busy_timeout and foreign
 * keys; checks application_id; applies forward migrations up to
 * TBX_SCHEMA_VERSION in one transaction.
 * @returns TBX_OK with *db set (caller closes with sqlite3_close_v2), or
 * TBX_ENOENT, TBX_ENOTDB, TBX_ESCHEMA (newer schema), TBX_ECORRUPT,
 * TBX_EBUSY, TBX_EIO, TBX_ESTORE, with @p errstr naming the file and why.
 */
int tbx__db_open(const char *path, const tbx__db_opts_t *opts, sqlite3 **db,
		 char *errstr, size_t errstr_size);

/** Maps an SQLite result code to a tbx_err_t. */
int tbx__db_err(int sqlite_rc);

/**
 * Runs a parameterless statement (BEGIN IMMEDIATE, COMMIT, SAVEPOINT …).
 * @returns TBX_OK or the mapped error (logged with the SQLite message).
 */
int tbx__db_exec(sqlite3 *db, const char *sql);

/*
 * Countdown fault injection (SQLite's faultsim, curl's torture mode): the
 * n-th store call from now (a statement step, or a BEGIN/COMMIT/SAVEPOINT/
 * RELEASE) fails with TBX_EIO as a failing disk would; ROLLBACK never
 * fails, as it is the way out.  0 disarms.  Process-wide, for tests on one
 * thread.
 */
void tbx__fault_arm(long n);
/** While @p on, every COMMIT fails with TBX_EIO, as on a full disk (reads
 *  and writes inside transactions still work).  Process-wide. */
void tbx__fault_disk_full(int on);
/** @returns 1 once the armed fault has fired (until the next arm). */
int tbx__fault_fired(void);

#endif
