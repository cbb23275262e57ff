/*
 * The batch rows of the SQLite service store: tbx_obatch, tbx_cover_msg
 * and tbx_inflight.gen (docs/batched-tokens.md, "The outbox row by the
 * batch" and "The resume check").  Every statement runs inside the
 * caller's transaction; none begins or commits.
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "outbox/batchrow.h"
#include "outbox/sqlite_int.h"
#include "store/msgs.h"

enum {
	Q_INSERT,
	Q_COVER_INSERT,
	Q_SET_ATTEMPT,
	Q_DELETE_COVER,
	Q_DELETE,
	Q_LOAD,
	Q_COVER_FIND,
	Q_GEN_GET,
	Q_GEN_BUMP,
	Q_DISPATCH_FAILED,
	Q_MARK_STUCK,
	Q__COUNT
};

static const char *const sql[Q__COUNT] = {
    [Q_INSERT] = "INSERT INTO tbx_obatch (grp, row_id, attempt, mint_seq, "
		 "tokfmt, created_ms, stuck_ms, dispatch_failures, cover, "
		 "msgs, wire) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
		 "?10, ?11)",
    [Q_COVER_INSERT] = "INSERT INTO tbx_cover_msg (grp, msg_id, row_id) "
		       "VALUES (?1, ?2, ?3)",
    [Q_SET_ATTEMPT] = "UPDATE tbx_obatch SET attempt = ?3, mint_seq = ?4, "
		      "msgs = ?5, wire = ?6 WHERE grp = ?1 AND row_id = ?2 "
		      "AND attempt IS NULL",
    [Q_DELETE_COVER] = "DELETE FROM tbx_cover_msg WHERE grp = ?1 AND "
		       "row_id = ?2",
    [Q_DELETE] = "DELETE FROM tbx_obatch WHERE grp = ?1 AND row_id = ?2",
    [Q_LOAD] = "SELECT row_id, attempt, mint_seq, tokfmt, created_ms, "
	       "stuck_ms, dispatch_failures, cover, msgs, wire FROM "
	       "tbx_obatch WHERE grp = ?1 ORDER BY row_id",
    [Q_COVER_FIND] = "SELECT row_id FROM tbx_cover_msg WHERE grp = ?1 AND "
		     "msg_id = ?2",
    [Q_GEN_GET] = "SELECT gen FROM tbx_inflight WHERE grp = ?1 AND topic = "
		  "?2 AND \"partition\" = ?3",
    [Q_GEN_BUMP] = "INSERT INTO tbx_inflight (grp, topic, \"partition\", "
		   "first_offset, last_offset, crashes, suspect_until, gen) "
		   "VALUES (?1, ?2, ?3, -1, -1, 0, -1, 1) ON CONFLICT (grp, "
		   "topic, \"partition\") DO UPDATE SET gen = gen + 1 "
		   "RETURNING gen",
    [Q_DISPATCH_FAILED] = "UPDATE tbx_obatch SET dispatch_failures = "
			  "dispatch_failures + 1 WHERE grp = ?1 AND row_id = "
			  "?2 RETURNING dispatch_failures",
    [Q_MARK_STUCK] = "UPDATE tbx_obatch SET stuck_ms = ?3 WHERE grp = ?1 "
		     "AND row_id = ?2 AND stuck_ms IS NULL",
};

static sq_store_t *sq(tbx_outbox_t *base)
{
	return (sq_store_t *)base;
}

void tbx__outbox_sqlite_batch_init(sq_store_t *store)
{
	tbx__stmts_init(&store->batch, store->db, sql, store->batch_slots,
			Q__COUNT);
}

int tbx__sq_obatch_insert(tbx_outbox_t *base, const char *grp,
			  const tbx__obatch_t *row)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	tbx__cover_t own = {0};
	const tbx__cover_t *c = NULL;
	int err, has_attempt;

	store->exec_err[0] = '\0';
	if (!grp || !row)
		return TBX_EINVAL;
	has_attempt = row->attempt[0] != '\0';
	err = tbx__obatch_check_insert(row, &own, &c, store->exec_err,
				       sizeof(store->exec_err));
	if (!err && has_attempt != (row->mint_seq != 0))
		err = tbx__seterr(store->exec_err, sizeof(store->exec_err),
				  TBX_ECORRUPT,
				  "an attempt without a sequence, or the other "
				  "way round");
	if (err) {
		tbx__cover_free(&own);
		if (err != TBX_ECORRUPT)
			return err;
		tbx__log(TBX_LOG_ERR,
			 "outbox: refusing to insert batch row %s: %s",
			 row->row_id, store->exec_err);
		return TBX_EINVAL;
	}
	if ((err = tbx__stmt_get(&store->batch, Q_INSERT, &stmt)))
		goto out;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, row->row_id, -1, SQLITE_STATIC) ||
	    tbx__bind_opt_text(stmt, 3, row->attempt) ||
	    (has_attempt ? sqlite3_bind_int64(stmt, 4, row->mint_seq)
			 : sqlite3_bind_null(stmt, 4)) ||
	    sqlite3_bind_int(stmt, 5, row->tokfmt) ||
	    sqlite3_bind_int64(stmt, 6, row->created_ms) ||
	    (row->stuck_ms >= 0 ? sqlite3_bind_int64(stmt, 7, row->stuck_ms)
				: sqlite3_bind_null(stmt, 7)) ||
	    sqlite3_bind_int64(stmt, 8, row->dispatch_failures) ||
	    tbx__bind_blob(stmt, 9, row->cover, row->cover_len) ||
	    tbx__bind_blob(stmt, 10, row->msgs_len ? row->msgs : NULL,
			   row->msgs_len) ||
	    tbx__bind_blob(stmt, 11, row->wire, row->wire_len)) {
		err = tbx__stmt_bind_fail(stmt);
		goto out;
	}
	if ((err = tbx__stmt_done(stmt)))
		goto out;
	for (uint32_t i = 0; i < c->n; i++) {
		if (c->ent[i].ref != TBX__REF_TOKEN)
			continue;
		if ((err = tbx__stmt_get(&store->batch, Q_COVER_INSERT, &stmt)))
			goto out;
		if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
		    sqlite3_bind_text(stmt, 2, c->ent[i].msg_id, -1,
				      SQLITE_STATIC) ||
		    sqlite3_bind_text(stmt, 3, row->row_id, -1,
				      SQLITE_STATIC)) {
			err = tbx__stmt_bind_fail(stmt);
			goto out;
		}
		if ((err = tbx__stmt_done(stmt)))
			goto out;
	}
out:
	tbx__cover_free(&own);
	return err;
}

int tbx__sq_obatch_set_attempt(tbx_outbox_t *base, const char *grp,
			       const char *row_id, const char *attempt,
			       int64_t mint_seq, const void *msgs,
			       size_t msgs_len, const void *wire,
			       size_t wire_len, int *won)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int err;

	*won = 0;
	store->exec_err[0] = '\0';
	if (!grp || !row_id || !attempt)
		return TBX_EINVAL;
	if ((err = tbx__obatch_attempt_check(attempt, mint_seq, msgs, msgs_len,
					     wire, wire_len, store->exec_err,
					     sizeof(store->exec_err))))
		return err;
	if ((err = tbx__stmt_get(&store->batch, Q_SET_ATTEMPT, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, row_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 3, attempt, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 4, mint_seq) ||
	    tbx__bind_blob(stmt, 5, msgs_len ? msgs : NULL, msgs_len) ||
	    tbx__bind_blob(stmt, 6, wire, wire_len))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_done(stmt)))
		return err;
	*won = sqlite3_changes(store->db) == 1;
	return TBX_OK;
}

static int by_row(sq_store_t *store, int q, const char *grp, const char *row_id,
		  int64_t *changed)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&store->batch, q, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, row_id, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_done(stmt)))
		return err;
	if (changed)
		*changed += sqlite3_changes(store->db);
	return TBX_OK;
}

int tbx__sq_obatch_delete(tbx_outbox_t *base, const char *grp,
			  const char *const *ids, size_t n, int64_t *deleted)
{
	sq_store_t *store = sq(base);
	int64_t rows = 0;
	int err;

	if (deleted)
		*deleted = 0;
	if (!grp || (n && !ids))
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((err = by_row(store, Q_DELETE_COVER, grp, ids[i], NULL)) ||
		    (err = by_row(store, Q_DELETE, grp, ids[i], &rows)))
			return err;
	if (deleted)
		*deleted = rows;
	return TBX_OK;
}

int tbx__sq_obatch_dispatch_failed(tbx_outbox_t *base, const char *grp,
				   const char *row_id, int *failures)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int hit, err;

	*failures = 0;
	if (!grp || !row_id)
		return TBX_EINVAL;
	if ((err = tbx__stmt_get(&store->batch, Q_DISPATCH_FAILED, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, row_id, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if (!(err = tbx__stmt_step(stmt, &hit)) && hit)
		*failures = sqlite3_column_int(stmt, 0);
	/* Step to the end: RETURNING applies its UPDATE as it goes. */
	while (!err && hit)
		err = tbx__stmt_step(stmt, &hit);
	sqlite3_reset(stmt);
	return err;
}

int tbx__sq_obatch_mark_stuck(tbx_outbox_t *base, const char *grp,
			      const char *row_id, int64_t now_ms)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int err;

	if (!grp || !row_id)
		return TBX_EINVAL;
	if ((err = tbx__stmt_get(&store->batch, Q_MARK_STUCK, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, row_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 3, now_ms))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

static void col_text(sqlite3_stmt *stmt, int i, char *dst, size_t size)
{
	const unsigned char *t = sqlite3_column_text(stmt, i);
	size_t len = (size_t)sqlite3_column_bytes(stmt, i);

	dst[0] = '\0';
	if (t && len < size) {
		memcpy(dst, t, len);
		dst[len] = '\0';
	} else if (t) {
		dst[0] = '?'; /* too long: fails the UUID check */
		dst[1] = '\0';
	}
}

int tbx__sq_obatch_load(tbx_outbox_t *base, const char *grp, tbx__obatch_fn fn,
			void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int err, row_ready;

	store->exec_err[0] = '\0';
	if (!grp || !fn)
		return TBX_EINVAL;
	if ((err = tbx__stmt_get(&store->batch, Q_LOAD, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	while (!(err = tbx__stmt_step(stmt, &row_ready)) && row_ready) {
		tbx__obatch_t row = {0};
		tbx__cover_t c;
		char why[200];
		int stop;

		col_text(stmt, 0, row.row_id, sizeof(row.row_id));
		col_text(stmt, 1, row.attempt, sizeof(row.attempt));
		row.mint_seq = sqlite3_column_int64(stmt, 2);
		row.tokfmt = sqlite3_column_int(stmt, 3);
		row.created_ms = sqlite3_column_int64(stmt, 4);
		row.stuck_ms = sqlite3_column_type(stmt, 5) == SQLITE_NULL
				   ? -1
				   : sqlite3_column_int64(stmt, 5);
		row.dispatch_failures = sqlite3_column_int64(stmt, 6);
		row.cover = sqlite3_column_blob(stmt, 7);
		row.cover_len = (size_t)sqlite3_column_bytes(stmt, 7);
		row.msgs = sqlite3_column_blob(stmt, 8);
		row.msgs_len = (size_t)sqlite3_column_bytes(stmt, 8);
		row.wire = sqlite3_column_blob(stmt, 9);
		row.wire_len = (size_t)sqlite3_column_bytes(stmt, 9);
		if ((err = tbx__obatch_check(&row, &c, why, sizeof(why)))) {
			tbx__cover_free(&c);
			sqlite3_reset(stmt);
			if (err != TBX_ECORRUPT)
				return err;
			tbx__seterr(store->exec_err, sizeof(store->exec_err),
				    err, "batch row %s of group %s: %s",
				    row.row_id, grp, why);
			tbx__log(TBX_LOG_ERR, "outbox: %s", store->exec_err);
			return TBX_ECORRUPT;
		}
		stop = fn(opaque, &row, &c);
		tbx__cover_free(&c);
		if (stop) {
			sqlite3_reset(stmt);
			return TBX_OK;
		}
	}
	sqlite3_reset(stmt);
	return err;
}

int tbx__sq_cover_msg_find(tbx_outbox_t *base, const char *grp,
			   const char *const *ids, size_t n,
			   char (*row_ids)[TBX_UUID_LEN + 1])
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int err, found;

	if (!grp || (n && (!ids || !row_ids)))
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++) {
		row_ids[i][0] = '\0';
		if ((err = tbx__stmt_get(&store->batch, Q_COVER_FIND, &stmt)))
			return err;
		if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
		    sqlite3_bind_text(stmt, 2, ids[i], -1, SQLITE_STATIC))
			return tbx__stmt_bind_fail(stmt);
		if ((err = tbx__stmt_step(stmt, &found)))
			return err;
		if (found)
			col_text(stmt, 0, row_ids[i], sizeof(row_ids[i]));
		sqlite3_reset(stmt);
	}
	return TBX_OK;
}

/* Runs Q_GEN_GET or Q_GEN_BUMP for each partition. */
static int gens(tbx_outbox_t *base, int q, const char *grp, const char *topic,
		const int32_t *parts, size_t n, int64_t *out)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int err, found;

	if (!grp || !topic || (n && !parts))
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++) {
		if ((err = tbx__stmt_get(&store->batch, q, &stmt)))
			return err;
		if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
		    sqlite3_bind_text(stmt, 2, topic, -1, SQLITE_STATIC) ||
		    sqlite3_bind_int(stmt, 3, parts[i]))
			return tbx__stmt_bind_fail(stmt);
		if ((err = tbx__stmt_step(stmt, &found)))
			return err;
		if (out)
			out[i] = found ? sqlite3_column_int64(stmt, 0) : 0;
		/* RETURNING: the row is written only once stepped to the
		 * end. */
		while (found && !(err = tbx__stmt_step(stmt, &found)))
			;
		sqlite3_reset(stmt);
		if (err)
			return err;
	}
	return TBX_OK;
}

/* The file's write lock, taken by begin(), is every partition's: the
 * gens are plain reads under it. */
int tbx__sq_gens_lock(tbx_outbox_t *base, const char *grp,
		      const char *const *topics, const int32_t *parts, size_t n,
		      int64_t *out)
{
	int err;

	if (!grp || !tbx__parts_sorted(topics, parts, n))
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((err = gens(base, Q_GEN_GET, grp, topics[i], &parts[i], 1,
				out ? &out[i] : NULL)))
			return err;
	return TBX_OK;
}

int tbx__sq_gens_get(tbx_outbox_t *base, const char *grp, const char *topic,
		     const int32_t *parts, size_t n, int64_t *out)
{
	return gens(base, Q_GEN_GET, grp, topic, parts, n, out);
}

int tbx__sq_gens_bump(tbx_outbox_t *base, const char *grp, const char *topic,
		      const int32_t *parts, size_t n, int64_t *out)
{
	return gens(base, Q_GEN_BUMP, grp, topic, parts, n, out);
}
