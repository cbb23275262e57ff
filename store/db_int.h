/*
 * What store/db.c shares with the rest of store/ (store/stmt.c).
 * Internal to store/.
 */
#ifndef TBX_STORE_DB_INT_H
#define TBX_STORE_DB_INT_H

/** The log level of a failed SQLite call: a lock held too long is worth a
 *  warning, anything else is an error. */
int tbx__db_log_level(int sqlite_rc);

/** The countdown fault of store/db.h: 1 when the store call @p what (its
 *  SQL text) is the one to fail now (logged). */
int tbx__db_fault_hit(const char *what);

#endif
