/*
 * Helpers of the SQLite backends' read sides (store/db_read.h).
 */
#include "store/db_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "store/db.h"
#include "store/stmt.h"
#include "tokenbox/tokenbox.h"

const char *tbx__db_text(sqlite3_stmt *stmt, int i)
{
	const char *s = (const char *)sqlite3_column_text(stmt, i);

	return s ? s : "";
}

const char *tbx__db_text_or_null(sqlite3_stmt *stmt, int i)
{
	return (const char *)sqlite3_column_text(stmt, i);
}

int tbx__db_each(sqlite3_stmt *stmt, tbx__db_row_fn row, tbx__any_fn fn,
		 void *opaque)
{
	int r, err;

	while (!(err = tbx__stmt_step(stmt, &r)) && r)
		if (row(stmt, fn, opaque))
			break;
	sqlite3_reset(stmt);
	sqlite3_clear_bindings(stmt);
	return err;
}

int tbx__db_one_int(sqlite3_stmt *stmt, int64_t *out)
{
	int err = tbx__stmt_int64(stmt, out);

	if (err)
		*out = 0;
	sqlite3_clear_bindings(stmt);
	return err;
}

int tbx__db_str_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	return ((tbx__str_fn)fn)(opaque, tbx__db_text(stmt, 0));
}

int tbx__db_sum_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__grp_sum_t sum;
	int cols = sqlite3_column_count(stmt);

	memset(&sum, 0, sizeof(sum));
	sum.grp = tbx__db_text(stmt, 0);
	for (int i = 1; i < cols - 1 && i <= 4; i++)
		sum.n[i - 1] = sqlite3_column_int64(stmt, i);
	sum.ms = sqlite3_column_int64(stmt, cols - 1);
	return ((tbx__grp_sum_fn)fn)(opaque, &sum);
}

/* The id of @p exact (?1 = id) when it finds one, else the one id of
 * @p prefix (?1 = id, at most 2 rows). */
int tbx__db_match(sqlite3_stmt *exact, sqlite3_stmt *prefix, const char *id,
		  char *out, size_t size, int *matches)
{
	int r, n = 0, err;

	*matches = 0;
	sqlite3_bind_text(exact, 1, id, -1, SQLITE_STATIC);
	err = tbx__stmt_step(exact, &r);
	if (!err && r) {
		tbx__strlcpy(out, id, size);
		*matches = 1;
	}
	sqlite3_reset(exact);
	sqlite3_clear_bindings(exact);
	if (err || r)
		return err;
	sqlite3_bind_text(prefix, 1, id, -1, SQLITE_STATIC);
	while (!(err = tbx__stmt_step(prefix, &r)) && r && n < 2)
		if (n++ == 0)
			tbx__strlcpy(out, tbx__db_text(prefix, 0), size);
	sqlite3_reset(prefix);
	sqlite3_clear_bindings(prefix);
	if (err)
		return err;
	*matches = n;
	return TBX_OK;
}

/* Appends @p s to *buf as a JSON string (escapes as cJSON prints them). */
static int json_str(char **buf, size_t *len, size_t *cap, const char *s)
{
	size_t need = *len + strlen(s) * 6 + 4;

	if (need > *cap) {
		char *grown = realloc(*buf, need * 2);
		if (!grown)
			return TBX_ENOMEM;
		*buf = grown;
		*cap = need * 2;
	}
	(*buf)[(*len)++] = '"';
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			(*buf)[(*len)++] = '\\';
			(*buf)[(*len)++] = (char)c;
		} else if (c < 0x20) {
			*len += (size_t)snprintf(*buf + *len, 7, "\\u%04x", c);
		} else {
			(*buf)[(*len)++] = (char)c;
		}
	}
	(*buf)[(*len)++] = '"';
	(*buf)[*len] = '\0';
	return TBX_OK;
}

int tbx__db_bind_filter(sqlite3_stmt *stmt, const tbx__filter_t *f, int idx,
			int created_idx, int limit_idx, char **json)
{
	size_t len = 1, cap = 0;
	int rc;

	*json = NULL;
	if (!f || !f->group_cnt) {
		rc = sqlite3_bind_null(stmt, idx);
	} else {
		if (!(*json = malloc(cap = 64)))
			return TBX_ENOMEM;
		(*json)[0] = '[';
		for (size_t i = 0; i < f->group_cnt; i++) {
			if (json_str(json, &len, &cap, f->groups[i]))
				return TBX_ENOMEM;
			(*json)[len++] = i + 1 < f->group_cnt ? ',' : ']';
			(*json)[len] = '\0';
		}
		rc = sqlite3_bind_text(stmt, idx, *json, -1, SQLITE_STATIC);
	}
	if (rc == SQLITE_OK && f && created_idx > 0)
		rc = sqlite3_bind_int64(stmt, created_idx, f->created_max);
	if (rc == SQLITE_OK && f && limit_idx > 0)
		rc = sqlite3_bind_int64(stmt, limit_idx,
					f->limit ? f->limit : -1);
	return rc == SQLITE_OK ? TBX_OK : tbx__db_err(rc);
}
