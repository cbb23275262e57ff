/*
 * Helpers of the SQLite backends' read sides (outbox/sqlite_read.c,
 * tokens/sqlite_read.c): listings by callback and the --group filter.
 * Internal to those files.
 */
#ifndef TBX_STORE_DB_READ_H
#define TBX_STORE_DB_READ_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "store/filter.h"

/** Any callback; the row function casts it back to its own type. */
typedef void (*tbx__any_fn)(void);
/** Hands the current row of @p stmt to @p fn; non-zero stops. */
typedef int (*tbx__db_row_fn)(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque);

/** Column @p i as text, "" for NULL. */
const char *tbx__db_text(sqlite3_stmt *stmt, int i);
/** Column @p i as text, NULL for NULL. */
const char *tbx__db_text_or_null(sqlite3_stmt *stmt, int i);
/** Steps @p stmt through its rows, calling @p row per row, then resets
 *  and unbinds it.  @returns TBX_OK (also when stopped) or the error. */
int tbx__db_each(sqlite3_stmt *stmt, tbx__db_row_fn row, tbx__any_fn fn,
		 void *opaque);
/** Column 0 of @p stmt's first row into *out (0 without a row), then
 *  resets and unbinds it. */
int tbx__db_one_int(sqlite3_stmt *stmt, int64_t *out);
/** A row function for text column 0 and a tbx__str_fn. */
int tbx__db_str_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque);
/** A row function for (group, integers…, time) and a tbx__grp_sum_fn:
 *  column 0 the group, the last the time, up to four between. */
int tbx__db_sum_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque);
/** Resolves @p id with @p exact (?1 = id: a row when it exists) and
 *  @p prefix (?1 = id: the distinct ids starting with it, LIMIT 2).
 *  *matches = 0, 1 (@p out set: @p id itself, or the one match) or 2. */
int tbx__db_match(sqlite3_stmt *exact, sqlite3_stmt *prefix, const char *id,
		  char *out, size_t size, int *matches);
/**
 * Binds @p f's groups at @p idx as one JSON array for json_each() (NULL:
 * every group), then, when @p created_idx > 0, f->created_max there, and
 * when @p limit_idx > 0, f->limit there (-1 for none).  *json (malloc'ed,
 * NULL when none) must outlive the statement's run; the caller frees it.
 */
int tbx__db_bind_filter(sqlite3_stmt *stmt, const tbx__filter_t *f, int idx,
			int created_idx, int limit_idx, char **json);

#endif
