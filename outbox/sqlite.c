/*
 * The SQLite backend of the service store S (outbox/outbox.h,
 * tbx_outbox_ops_t): outbox rows and their outgoing messages, ingress
 * offsets and dead-letter records, as the protocol uses them.  The read
 * side of `tokenbox inspect` is in sqlite_read.c.
 *
 * Every statement is prepared once per store and cached (store/stmt.h);
 * every value is bound.  A statement is reset as soon as its caller is
 * done with it, so that none holds a read snapshot or a lock between
 * calls.
 *
 * @locality one thread at a time per store (the worker's).
 */
#include "outbox/outbox.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "outbox/sqlite_int.h"
#include "store/msgs.h"
#include "store/stmt.h"

enum {
	Q_BEGIN,
	Q_COMMIT,
	Q_ROLLBACK,
	Q_SAVEPOINT,
	Q_RELEASE,
	Q_ROLLBACK_TO,
	Q_ROW_FIND,
	Q_ROW_INSERT,
	Q_ROW_GET,
	Q_MSGS_UNTOKENED,
	Q_SET_ATTEMPT,
	Q_ROW_DELETE,
	Q_INGRESS_GET,
	Q_INGRESS_SET,
	Q_DEAD_LETTER,
	Q_COUNT_ALL,
	Q_COUNT_GRP,
	Q_ROWS_OLDER,
	Q_INFLIGHT_GET,
	Q_INFLIGHT_PUT,
	Q_INFLIGHT_DEL,
	Q_INFLIGHT_CLEAR,
	Q_INFLIGHT_RELEASE,
	Q_ROWS_BELOW,
	Q_MARK_STUCK,
	Q_ALARM_ADD,
	Q_BINDING_SET,
	Q_BINDING_GET,
	Q_DISPATCH_FAILED,
	Q_UNDELIVERED_ADD,
	Q__COUNT
};

_Static_assert(Q__COUNT <= SQ_STMTS, "slots[] too small");

static const char *const sql[Q__COUNT] = {
    [Q_BEGIN] = "BEGIN IMMEDIATE",
    [Q_COMMIT] = "COMMIT",
    [Q_ROLLBACK] = "ROLLBACK",
    [Q_SAVEPOINT] = "SAVEPOINT tbx_msg",
    [Q_RELEASE] = "RELEASE tbx_msg",
    [Q_ROLLBACK_TO] = "ROLLBACK TO tbx_msg",
    [Q_ROW_FIND] = "SELECT attempt FROM tbx_outbox WHERE grp = ?1 AND "
		   "msg_id = ?2",
    [Q_ROW_INSERT] = "INSERT INTO tbx_outbox (grp, msg_id, in_topic, "
		     "in_partition, in_offset, in_token, attempt, mint_seq, "
		     "kind, error, created_ms, msgs, in_tbit) VALUES (?1, ?2, "
		     "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    [Q_ROW_GET] = "SELECT in_topic, in_partition, in_offset, in_token, "
		  "attempt, mint_seq, kind, error, created_ms, msgs, in_tbit "
		  "FROM tbx_outbox WHERE grp = ?1 AND msg_id = ?2",
    [Q_MSGS_UNTOKENED] = "SELECT msgs FROM tbx_outbox WHERE grp = ?1 AND "
			 "msg_id = ?2 AND attempt IS NULL",
    /* B: the first persisted attempt wins, never overwritten. */
    [Q_SET_ATTEMPT] = "UPDATE tbx_outbox SET attempt = ?1, mint_seq = ?2, "
		      "msgs = ?5 WHERE grp = ?3 AND msg_id = ?4 AND attempt "
		      "IS NULL",
    /* The messages are in the row (store/msgs.h). */
    [Q_ROW_DELETE] = "DELETE FROM tbx_outbox WHERE grp = ?1 AND msg_id = ?2",
    [Q_INGRESS_GET] = "SELECT next_offset FROM tbx_ingress WHERE grp = ?1 "
		      "AND topic = ?2 AND \"partition\" = ?3",
    [Q_INGRESS_SET] = "INSERT INTO tbx_ingress (grp, topic, \"partition\", "
		      "next_offset) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (grp, "
		      "topic, \"partition\") DO UPDATE SET next_offset = "
		      "excluded.next_offset",
    [Q_DEAD_LETTER] = "INSERT INTO tbx_dead_letters (grp, msg_id, in_topic, "
		      "in_partition, in_offset, dlq_topic, error, attempts, "
		      "created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [Q_COUNT_ALL] = "SELECT count(*) FROM tbx_outbox",
    [Q_COUNT_GRP] = "SELECT count(*) FROM tbx_outbox WHERE grp = ?1",
    [Q_ROWS_OLDER] = "SELECT msg_id FROM tbx_outbox WHERE grp = ?1 AND "
		     "created_ms <= ?2 ORDER BY created_ms, msg_id LIMIT ?3",
    [Q_INFLIGHT_GET] = "SELECT first_offset, last_offset, crashes, "
		       "suspect_until, lone, count_offset, retries FROM "
		       "tbx_inflight WHERE grp = ?1 AND topic = ?2 AND "
		       "\"partition\" = ?3",
    [Q_INFLIGHT_PUT] = "INSERT INTO tbx_inflight (grp, topic, \"partition\", "
		       "first_offset, last_offset, crashes, suspect_until, "
		       "lone, count_offset, retries) VALUES (?1, ?2, ?3, ?4, "
		       "?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT (grp, topic, "
		       "\"partition\") DO UPDATE SET first_offset = "
		       "excluded.first_offset, last_offset = "
		       "excluded.last_offset, crashes = excluded.crashes, "
		       "suspect_until = excluded.suspect_until, lone = "
		       "excluded.lone, count_offset = excluded.count_offset, "
		       "retries = excluded.retries",
    /* A row whose gen was bumped stays (gen never goes back), with
     * everything else as a partition without a row reads: CLEAR. */
    [Q_INFLIGHT_DEL] = "DELETE FROM tbx_inflight WHERE grp = ?1 AND topic = "
		       "?2 AND \"partition\" = ?3 AND gen = 0",
    [Q_INFLIGHT_CLEAR] = "UPDATE tbx_inflight SET first_offset = -1, "
			 "last_offset = -1, crashes = 0, suspect_until = -1, "
			 "lone = 0, count_offset = -1, retries = 0 WHERE "
			 "grp = ?1 AND topic = ?2 AND \"partition\" = ?3",
    [Q_INFLIGHT_RELEASE] = "UPDATE tbx_inflight SET first_offset = -1, "
			   "last_offset = -1, lone = 0 WHERE grp = ?1 AND "
			   "topic = ?2 AND \"partition\" = ?3",
    [Q_ROWS_BELOW] = "SELECT msg_id FROM tbx_outbox WHERE grp = ?1 AND "
		     "in_topic = ?2 AND in_partition = ?3 AND in_offset < ?4 "
		     "ORDER BY in_offset, msg_id LIMIT ?5",
    [Q_MARK_STUCK] = "UPDATE tbx_outbox SET stuck_ms = ?3 WHERE grp = ?1 "
		     "AND msg_id = ?2 AND stuck_ms IS NULL",
    [Q_ALARM_ADD] = "INSERT INTO tbx_alarms (grp, name, count, first_ms, "
		    "last_ms, detail) VALUES (?1, ?2, 1, ?3, ?3, ?4) ON "
		    "CONFLICT (grp, name) DO UPDATE SET count = count + 1, "
		    "last_ms = excluded.last_ms, detail = excluded.detail",
    [Q_BINDING_SET] = "INSERT INTO tbx_bindings (grp, tokens_id, "
		      "tokens_where, used_ms) VALUES (?1, ?2, ?3, ?4) ON "
		      "CONFLICT (grp) DO UPDATE SET tokens_id = "
		      "excluded.tokens_id, tokens_where = "
		      "excluded.tokens_where, used_ms = excluded.used_ms",
    [Q_BINDING_GET] = "SELECT tokens_id, tokens_where, used_ms FROM "
		      "tbx_bindings WHERE grp = ?1",
    [Q_DISPATCH_FAILED] = "UPDATE tbx_outbox SET dispatch_failures = "
			  "dispatch_failures + 1 WHERE grp = ?1 AND msg_id = "
			  "?2 RETURNING dispatch_failures",
    /* One line per outgoing message however often it is given up on (a
     * crash before E gives it up again on redelivery). */
    [Q_UNDELIVERED_ADD] = "INSERT INTO tbx_undelivered (grp, msg_id, "
			  "out_id, topic, type, key, payload, headers, token, "
			  "mint_seq, error, attempts, created_ms, tset, tbit, "
			  "tpart) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
			  "?10, ?11, ?12, ?13, ?14, ?15, ?16) "
			  "ON CONFLICT (grp, out_id) DO NOTHING",
};

static const tbx_outbox_ops_t sqlite_ops;

/* The backend of a store opened by tbx_outbox_sqlite_open(). */
static sq_store_t *sq(tbx_outbox_t *base)
{
	return (sq_store_t *)base;
}

/*
 * The store.
 */

int tbx_outbox_sqlite_open(const char *path, const tbx__db_opts_t *opts,
			   tbx_outbox_t **out, char *errstr, size_t errstr_size)
{
	sq_store_t *store;
	int err;

	if (!out)
		return tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				   "no place for the store");
	*out = NULL;
	if (!(store = calloc(1, sizeof(*store))))
		return tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				   "out of memory");
	store->base.ops = &sqlite_ops;
	if ((err = tbx__db_open(path, opts, &store->db, errstr, errstr_size))) {
		free(store);
		return err;
	}
	store->sync_full = opts ? opts->synchronous_full : 1;
	tbx__stmts_init(&store->stmts, store->db, sql, store->slots, Q__COUNT);
	tbx__outbox_sqlite_read_init(store);
	tbx__outbox_sqlite_batch_init(store);
	*out = &store->base;
	return TBX_OK;
}

static void sq_close(tbx_outbox_t *base)
{
	sq_store_t *store = sq(base);

	if (!store)
		return;
	tbx__stmts_finalize(&store->stmts);
	tbx__stmts_finalize(&store->reads);
	tbx__stmts_finalize(&store->batch);
	/* _v2: a token store sharing this connection may still hold
	 * statements; the connection goes when they are finalized. */
	sqlite3_close_v2(store->db);
	free(store);
}

sqlite3 *tbx_outbox_db(tbx_outbox_t *store)
{
	return store && store->ops == &sqlite_ops ? sq(store)->db : NULL;
}

static int sq_begin(tbx_outbox_t *base)
{
	sq_store_t *store = sq(base);

	store->exec_err[0] = '\0';
	return tbx__stmt_run(&store->stmts, Q_BEGIN);
}

static int sq_commit(tbx_outbox_t *base)
{
	sq_store_t *store = sq(base);

	return tbx__stmt_run(&store->stmts, Q_COMMIT);
}

static int sq_rollback(tbx_outbox_t *base)
{
	sq_store_t *store = sq(base);

	/* Callers roll back after any failure, including a failed COMMIT
	 * that SQLite already rolled back (SQLITE_FULL, …): nothing to do
	 * then. */
	if (sqlite3_get_autocommit(store->db))
		return TBX_OK;
	return tbx__stmt_run(&store->stmts, Q_ROLLBACK);
}

static int sq_savepoint(tbx_outbox_t *base)
{
	sq_store_t *store = sq(base);

	return tbx__stmt_run(&store->stmts, Q_SAVEPOINT);
}

static int sq_release(tbx_outbox_t *base)
{
	sq_store_t *store = sq(base);

	return tbx__stmt_run(&store->stmts, Q_RELEASE);
}

static int sq_undo(tbx_outbox_t *base)
{
	sq_store_t *store = sq(base);

	int err = tbx__stmt_run(&store->stmts, Q_ROLLBACK_TO);

	return err ? err : tbx__stmt_run(&store->stmts, Q_RELEASE);
}

static int sq_row_find(tbx_outbox_t *base, const char *grp, const char *msg_id,
		       int *found, char attempt[TBX_UUID_LEN + 1])
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int hit, err;

	*found = 0;
	if (attempt)
		attempt[0] = '\0';
	if ((err = tbx__stmt_get(&store->stmts, Q_ROW_FIND, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, msg_id, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	if (hit) {
		const char *a = (const char *)sqlite3_column_text(stmt, 0);
		*found = 1;
		if (attempt && a)
			tbx__strlcpy(attempt, a, TBX_UUID_LEN + 1);
	}
	sqlite3_reset(stmt);
	return TBX_OK;
}

/* SQLite answers from the same process: one cached statement per id
 * costs no round trip. */
static int sq_rows_find(tbx_outbox_t *base, const char *grp,
			const char *const *ids, size_t n, tbx__row_hit_t *out)
{
	int err;

	for (size_t i = 0; i < n; i++)
		if ((err = sq_row_find(base, grp, ids[i], &out[i].found,
				       out[i].attempt)))
			return err;
	return TBX_OK;
}

static int sq_row_insert(tbx_outbox_t *base, const char *grp,
			 const tbx__row_t *row)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	void *blob = NULL;
	size_t blob_len;
	int err;

	if (!grp || !tbx_outbox_row_check(row)) {
		tbx__log(TBX_LOG_ERR,
			 "outbox: refusing to insert row %s: it "
			 "breaks the row invariants",
			 row ? row->msg_id : "(null)");
		return TBX_EINVAL;
	}
	if ((err = tbx__row_msgs_encode(row, &blob, &blob_len)))
		return err;
	if ((err = tbx__stmt_get(&store->stmts, Q_ROW_INSERT, &stmt))) {
		free(blob);
		return err;
	}
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, row->msg_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 3, row->in_topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int(stmt, 4, row->in_partition) ||
	    sqlite3_bind_int64(stmt, 5, row->in_offset) ||
	    tbx__bind_opt_text(stmt, 6, row->in_token) ||
	    tbx__bind_opt_text(stmt, 7, row->attempt) ||
	    (row->attempt[0] ? sqlite3_bind_int64(stmt, 8, row->mint_seq)
			     : sqlite3_bind_null(stmt, 8)) ||
	    sqlite3_bind_int(stmt, 9, row->kind) ||
	    tbx__bind_opt_text(stmt, 10, row->error) ||
	    sqlite3_bind_int64(
		stmt, 11, row->created_ms ? row->created_ms : tbx__now_ms()) ||
	    tbx__bind_blob(stmt, 12, blob, blob_len) ||
	    (row->in_set ? sqlite3_bind_int64(stmt, 13, row->in_tbit)
			 : sqlite3_bind_null(stmt, 13))) {
		free(blob);
		return tbx__stmt_bind_fail(stmt);
	}
	err = tbx__stmt_done(stmt);
	free(blob);
	return err;
}

/* Copies a text column into a fixed buffer; a value that does not fit was
 * not written by tokenbox. */
static int column_text(sqlite3_stmt *stmt, int col, char *dst, size_t size)
{
	const char *s = (const char *)sqlite3_column_text(stmt, col);

	if (!s) {
		dst[0] = '\0';
		return TBX_OK;
	}
	if (tbx__strlcpy(dst, s, size) < 0) {
		tbx__log(TBX_LOG_ERR, "outbox: %s too long in %s",
			 sqlite3_column_name(stmt, col), sqlite3_sql(stmt));
		return TBX_ESTORE;
	}
	return TBX_OK;
}

static int row_get(sq_store_t *store, const char *grp, const char *msg_id,
		   tbx__row_t *row)
{
	sqlite3_stmt *stmt;
	const char *error;
	const void *blob;
	int hit, err;

	if ((err = tbx__stmt_get(&store->stmts, Q_ROW_GET, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, msg_id, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	if (!hit) {
		sqlite3_reset(stmt);
		return TBX_ENOENT;
	}
	tbx__strlcpy(row->msg_id, msg_id, sizeof(row->msg_id));
	if ((err =
		 column_text(stmt, 0, row->in_topic, sizeof(row->in_topic))) ||
	    (err =
		 column_text(stmt, 3, row->in_token, sizeof(row->in_token))) ||
	    (err = column_text(stmt, 4, row->attempt, sizeof(row->attempt))))
		goto out;
	row->in_partition = sqlite3_column_int(stmt, 1);
	row->in_offset = sqlite3_column_int64(stmt, 2);
	row->mint_seq = sqlite3_column_int64(stmt, 5);
	row->kind = sqlite3_column_int(stmt, 6);
	error = (const char *)sqlite3_column_text(stmt, 7);
	if (error && !(row->error = tbx__strdup(error))) {
		err = TBX_ENOMEM;
		goto out;
	}
	row->created_ms = sqlite3_column_int64(stmt, 8);
	row->in_set = sqlite3_column_type(stmt, 10) != SQLITE_NULL;
	row->in_tbit =
	    row->in_set ? (uint32_t)sqlite3_column_int64(stmt, 10) : 0;
	/* Per SQLite's advice: the pointer first, then the length. */
	blob = sqlite3_column_blob(stmt, 9);
	err = tbx__row_msgs_decode(blob, (size_t)sqlite3_column_bytes(stmt, 9),
				   row->msg_id, row);
out:
	sqlite3_reset(stmt);
	return err;
}

static int sq_row_load(tbx_outbox_t *base, const char *grp, const char *msg_id,
		       tbx__row_t *row)
{
	sq_store_t *store = sq(base);

	char id[TBX_MSGID_MAX + 1];
	int err;

	/* @p msg_id may point into @p row (reloading a row in place). */
	if (tbx__strlcpy(id, msg_id, sizeof(id)) < 0) {
		tbx__row_clear(row);
		return TBX_ENOENT;
	}
	tbx__row_clear(row);
	/* One statement: the row and its messages from one snapshot. */
	err = row_get(store, grp, id, row);
	if (err)
		tbx__row_clear(row); /* never half a row */
	return err;
}

/*
 * B's record of the attempt writes the tokens into the stored messages:
 * the stored ones are the truth, the row in hand must match them one for
 * one (same count, same ids), and each gets the token of its namesake.
 */
static int msgs_with_tokens(sq_store_t *store, const char *grp,
			    const tbx__row_t *row, int *found, void **blob,
			    size_t *blob_len)
{
	sqlite3_stmt *stmt;
	int hit, err = TBX_OK;

	*found = 0;
	*blob = NULL;
	*blob_len = 0;
	if ((err = tbx__stmt_get(&store->stmts, Q_MSGS_UNTOKENED, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, row->msg_id, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	if (hit) {
		*found = 1;
		err = tbx__row_msgs_tokened(
		    sqlite3_column_blob(stmt, 0),
		    (size_t)sqlite3_column_bytes(stmt, 0), row, blob, blob_len);
	}
	sqlite3_reset(stmt);
	return err;
}

static int sq_row_set_attempt(tbx_outbox_t *base, const char *grp,
			      const tbx__row_t *row, int *won)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	void *blob = NULL;
	size_t blob_len = 0;
	int found, err;

	*won = 0;
	/* The row in hand must be TOKENED: attempt, mint_seq, every token. */
	if (!grp || !row || !row->attempt[0] || !tbx_outbox_row_check(row)) {
		tbx__log(TBX_LOG_ERR,
			 "outbox row %s: refusing to record an "
			 "attempt that breaks the row invariants",
			 row ? row->msg_id : "(null)");
		return TBX_EINVAL;
	}
	/* Not found: another attempt was recorded first, or the row is
	 * gone; its messages must not be touched. */
	if ((err =
		 msgs_with_tokens(store, grp, row, &found, &blob, &blob_len)) ||
	    !found)
		return err;
	if ((err = tbx__stmt_get(&store->stmts, Q_SET_ATTEMPT, &stmt)))
		goto out;
	if (sqlite3_bind_text(stmt, 1, row->attempt, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 2, row->mint_seq) ||
	    sqlite3_bind_text(stmt, 3, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 4, row->msg_id, -1, SQLITE_STATIC) ||
	    tbx__bind_blob(stmt, 5, blob, blob_len)) {
		err = tbx__stmt_bind_fail(stmt);
		goto out;
	}
	if ((err = tbx__stmt_done(stmt)))
		goto out;
	*won = sqlite3_changes(store->db) == 1;
out:
	free(blob);
	return err;
}

static int sq_row_delete(tbx_outbox_t *base, const char *grp,
			 const char *msg_id)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&store->stmts, Q_ROW_DELETE, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, msg_id, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

static int sq_rows_delete(tbx_outbox_t *base, const char *grp,
			  const char *const *ids, size_t n)
{
	int err;

	for (size_t i = 0; i < n; i++)
		if ((err = sq_row_delete(base, grp, ids[i])))
			return err;
	return TBX_OK;
}

static int sq_ingress_get(tbx_outbox_t *base, const char *grp,
			  const char *topic, int32_t partition, int64_t *next)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int hit, err;

	*next = -1;
	if ((err = tbx__stmt_get(&store->stmts, Q_INGRESS_GET, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int(stmt, 3, partition))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	if (hit && sqlite3_column_int64(stmt, 0) >= 0)
		*next = sqlite3_column_int64(stmt, 0);
	sqlite3_reset(stmt);
	return TBX_OK;
}

static int sq_ingress_set(tbx_outbox_t *base, const char *grp,
			  const char *topic, int32_t partition, int64_t next)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&store->stmts, Q_INGRESS_SET, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int(stmt, 3, partition) ||
	    sqlite3_bind_int64(stmt, 4, next))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

static int sq_dead_letter_add(tbx_outbox_t *base, const char *grp,
			      const tbx__row_t *row, const char *dlq_topic,
			      int attempts)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int err;

	if (!grp || !row || !dlq_topic)
		return TBX_EINVAL;
	if ((err = tbx__stmt_get(&store->stmts, Q_DEAD_LETTER, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, row->msg_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 3, row->in_topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int(stmt, 4, row->in_partition) ||
	    sqlite3_bind_int64(stmt, 5, row->in_offset) ||
	    sqlite3_bind_text(stmt, 6, dlq_topic, -1, SQLITE_STATIC) ||
	    tbx__bind_opt_text(stmt, 7, row->error) ||
	    sqlite3_bind_int(stmt, 8, attempts) ||
	    sqlite3_bind_int64(stmt, 9, tbx__now_ms()))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

static int sq_dispatch_failed(tbx_outbox_t *base, const char *grp,
			      const char *msg_id, int *failures)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int hit, err;

	*failures = 0;
	if ((err = tbx__stmt_get(&store->stmts, Q_DISPATCH_FAILED, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, msg_id, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if (!(err = tbx__stmt_step(stmt, &hit)) && hit)
		*failures = sqlite3_column_int(stmt, 0);
	/* Step to the end: RETURNING applies its UPDATE as it goes. */
	while (!err && hit)
		err = tbx__stmt_step(stmt, &hit);
	sqlite3_reset(stmt);
	return err;
}

static int sq_undelivered_add(tbx_outbox_t *base, const char *grp,
			      const tbx__row_t *row, const tbx__outmsg_t *m,
			      const char *error, int attempts)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	/* A bit of a token set: its set, bit and partition, no token. */
	int set = m->tset[0] && m->part >= 0;
	int err;

	if ((err = tbx__stmt_get(&store->stmts, Q_UNDELIVERED_ADD, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, row->msg_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 3, m->id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 4, m->topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 5, m->type, -1, SQLITE_STATIC) ||
	    tbx__bind_blob(stmt, 6, m->key, m->key_len) ||
	    tbx__bind_blob(stmt, 7, m->payload, m->payload_len) ||
	    tbx__bind_blob(stmt, 8, m->headers, m->headers_len) ||
	    tbx__bind_opt_text(stmt, 9, set ? "" : m->token) ||
	    (row->mint_seq ? sqlite3_bind_int64(stmt, 10, row->mint_seq)
			   : sqlite3_bind_null(stmt, 10)) ||
	    sqlite3_bind_text(stmt, 11, error, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int(stmt, 12, attempts) ||
	    sqlite3_bind_int64(stmt, 13, tbx__now_ms()) ||
	    (set ? sqlite3_bind_text(stmt, 14, m->tset, -1, SQLITE_STATIC) ||
		       sqlite3_bind_int64(stmt, 15, m->tbit) ||
		       sqlite3_bind_int64(stmt, 16, m->part)
		 : sqlite3_bind_null(stmt, 14) || sqlite3_bind_null(stmt, 15) ||
		       sqlite3_bind_null(stmt, 16)))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

static int sq_count(tbx_outbox_t *base, const char *grp, int64_t *rows)
{
	sq_store_t *store = sq(base);

	int q = grp ? Q_COUNT_GRP : Q_COUNT_ALL;
	sqlite3_stmt *stmt;
	int err;

	*rows = 0;
	if ((err = tbx__stmt_get(&store->stmts, q, &stmt)))
		return err;
	if (grp && sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_int64(stmt, rows);
}

/* Collects the msg_id column of a bound statement's rows. */
static int collect_ids(sqlite3_stmt *stmt, tbx__msgid_t **out, size_t *cnt)
{
	tbx__msgid_t *ids = NULL;
	size_t n = 0, cap = 0;
	int hit, err;

	while (!(err = tbx__stmt_step(stmt, &hit)) && hit) {
		const char *id = (const char *)sqlite3_column_text(stmt, 0);
		if (n == cap) {
			size_t grown = cap ? cap * 2 : 16;
			tbx__msgid_t *more = realloc(ids, grown * sizeof(*ids));
			if (!more) {
				sqlite3_reset(stmt);
				free(ids);
				return TBX_ENOMEM;
			}
			ids = more;
			cap = grown;
		}
		tbx__strlcpy(ids[n++].id, id ? id : "", sizeof(ids[0].id));
	}
	sqlite3_reset(stmt);
	if (err) {
		free(ids);
		return err;
	}
	*out = ids;
	*cnt = n;
	return TBX_OK;
}

static int sq_rows_older(tbx_outbox_t *base, const char *grp,
			 int64_t created_before_ms, size_t limit,
			 tbx__msgid_t **out, size_t *cnt)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int err;

	*out = NULL;
	*cnt = 0;
	if (!grp || limit == 0)
		return TBX_EINVAL;
	if ((err = tbx__stmt_get(&store->stmts, Q_ROWS_OLDER, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 2, created_before_ms) ||
	    sqlite3_bind_int64(stmt, 3, (sqlite3_int64)limit))
		return tbx__stmt_bind_fail(stmt);
	return collect_ids(stmt, out, cnt);
}

static int sq_rows_below(tbx_outbox_t *base, const char *grp, const char *topic,
			 int32_t partition, int64_t offset, size_t limit,
			 tbx__msgid_t **out, size_t *cnt)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int err;

	*out = NULL;
	*cnt = 0;
	if (!grp || !topic || limit == 0)
		return TBX_EINVAL;
	if ((err = tbx__stmt_get(&store->stmts, Q_ROWS_BELOW, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int(stmt, 3, partition) ||
	    sqlite3_bind_int64(stmt, 4, offset) ||
	    sqlite3_bind_int64(stmt, 5, (sqlite3_int64)limit))
		return tbx__stmt_bind_fail(stmt);
	return collect_ids(stmt, out, cnt);
}

static int sq_row_mark_stuck(tbx_outbox_t *base, const char *grp,
			     const char *msg_id, int64_t now_ms)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int err;

	if (!grp || !msg_id)
		return TBX_EINVAL;
	if ((err = tbx__stmt_get(&store->stmts, Q_MARK_STUCK, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, msg_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 3, now_ms))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

static int inflight_bind(sq_store_t *store, int q, const char *grp,
			 const char *topic, int32_t partition,
			 sqlite3_stmt **out)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&store->stmts, q, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int(stmt, 3, partition))
		return tbx__stmt_bind_fail(stmt);
	*out = stmt;
	return TBX_OK;
}

static int sq_inflight_get(tbx_outbox_t *base, const char *grp,
			   const char *topic, int32_t partition,
			   tbx__inflight_t *f, int *found)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int hit, err;

	*found = 0;
	if ((err = inflight_bind(store, Q_INFLIGHT_GET, grp, topic, partition,
				 &stmt)))
		return err;
	if (!(err = tbx__stmt_step(stmt, &hit)) && hit) {
		f->first = sqlite3_column_int64(stmt, 0);
		f->last = sqlite3_column_int64(stmt, 1);
		f->crashes = sqlite3_column_int(stmt, 2);
		f->suspect_until = sqlite3_column_int64(stmt, 3);
		f->lone = sqlite3_column_int(stmt, 4);
		f->count_offset = sqlite3_column_int64(stmt, 5);
		f->retries = sqlite3_column_int(stmt, 6);
		*found = 1;
	}
	sqlite3_reset(stmt);
	return err;
}

static int sq_inflight_put(tbx_outbox_t *base, const char *grp,
			   const char *topic, int32_t partition,
			   const tbx__inflight_t *f)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int err;

	if ((err = inflight_bind(store, Q_INFLIGHT_PUT, grp, topic, partition,
				 &stmt)))
		return err;
	if (sqlite3_bind_int64(stmt, 4, f->first) ||
	    sqlite3_bind_int64(stmt, 5, f->last) ||
	    sqlite3_bind_int(stmt, 6, f->crashes) ||
	    sqlite3_bind_int64(stmt, 7, f->suspect_until) ||
	    sqlite3_bind_int(stmt, 8, f->lone) ||
	    sqlite3_bind_int64(stmt, 9, f->count_offset) ||
	    sqlite3_bind_int(stmt, 10, f->retries))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

static int sq_inflight_delete(tbx_outbox_t *base, const char *grp,
			      const char *topic, int32_t partition)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int err;

	if ((err = inflight_bind(store, Q_INFLIGHT_DEL, grp, topic, partition,
				 &stmt)) ||
	    (err = tbx__stmt_done(stmt)))
		return err;
	if (sqlite3_changes(store->db) > 0)
		return TBX_OK;
	/* No row, or one whose gen must stay: its marker and counts go. */
	if ((err = inflight_bind(store, Q_INFLIGHT_CLEAR, grp, topic, partition,
				 &stmt)))
		return err;
	return tbx__stmt_done(stmt);
}

static int sq_inflight_release(tbx_outbox_t *base, const char *grp,
			       const char *topic, int32_t partition)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int err;

	if ((err = inflight_bind(store, Q_INFLIGHT_RELEASE, grp, topic,
				 partition, &stmt)))
		return err;
	return tbx__stmt_done(stmt);
}

static int sq_alarm_add(tbx_outbox_t *base, const char *grp, const char *name,
			const char *detail)
{
	sq_store_t *store = sq(base);

	sqlite3_stmt *stmt;
	int err;

	if (!grp || !name)
		return TBX_EINVAL;
	if ((err = tbx__stmt_get(&store->stmts, Q_ALARM_ADD, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, name, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 3, tbx__now_ms()) ||
	    tbx__bind_opt_text(stmt, 4, detail))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

/* The group's binding before binding_set writes it. */
static int binding_get(sq_store_t *store, const char *grp,
		       tbx__binding_prev_t *prev)
{
	sqlite3_stmt *stmt;
	int err, hit;

	memset(prev, 0, sizeof(*prev));
	if ((err = tbx__stmt_get(&store->stmts, Q_BINDING_GET, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	if (hit) {
		const char *id = (const char *)sqlite3_column_text(stmt, 0);
		const char *where = (const char *)sqlite3_column_text(stmt, 1);

		prev->found = 1;
		tbx__strlcpy(prev->tokens_id, id ? id : "",
			     sizeof(prev->tokens_id));
		tbx__strlcpy(prev->tokens_where, where ? where : "",
			     sizeof(prev->tokens_where));
		prev->used_ms = sqlite3_column_int64(stmt, 2);
	}
	sqlite3_reset(stmt);
	return TBX_OK;
}

static int sq_binding_set(tbx_outbox_t *base, const char *grp,
			  const char *tokens_id, const char *tokens_where,
			  tbx__binding_prev_t *prev)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int err;

	if (!grp || !tokens_id || !tokens_where)
		return TBX_EINVAL;
	if (prev && (err = binding_get(store, grp, prev)))
		return err;
	if ((err = tbx__stmt_get(&store->stmts, Q_BINDING_SET, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, tokens_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 3, tokens_where, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 4, tbx__now_ms()))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

/*
 * What differs between an embedded and a server store.
 */

/* begin() took the file's write lock: no other A can look at any row
 * until this one ends. */
static int sq_lock_ids(tbx_outbox_t *base, const char *grp,
		       const char *const *ids, size_t n)
{
	(void)base;
	(void)grp;
	(void)ids;
	(void)n;
	return TBX_OK;
}

/* The level applies to the connection from the next COMMIT on. */
static int sq_relaxed(tbx_outbox_t *base, int on)
{
	sq_store_t *store = sq(base);

	return tbx__db_exec(store->db, on || !store->sync_full
					   ? "PRAGMA synchronous=NORMAL"
					   : "PRAGMA synchronous=FULL");
}

static void *sq_native(tbx_outbox_t *base, int backend)
{
	return backend == TBX_BACKEND_SQLITE ? sq(base)->db : NULL;
}

/* Skips white space and SQL comments. */
static const char *skip_blank(const char *p)
{
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' ||
		       *p == '\f' || *p == '\v')
			p++;
		if (p[0] == '-' && p[1] == '-') {
			p += strcspn(p, "\n");
		} else if (p[0] == '/' && p[1] == '*') {
			const char *end = strstr(p + 2, "*/");
			if (!end)
				return p + strlen(p);
			p = end + 2;
		} else if (*p == ';') {
			p++; /* an empty statement after the one */
		} else {
			return p;
		}
	}
}

/* @returns the number k of a parameter named "$k" (1 <= k <= n), else
 * 0. */
static int param_number(const char *name, int n)
{
	char *end;
	long k;

	if (!name || name[0] != '$' || name[1] < '1' || name[1] > '9')
		return 0;
	k = strtol(name + 1, &end, 10);
	return *end == '\0' && k >= 1 && k <= n ? (int)k : 0;
}

/* Records why exec() failed, for errmsg(); not logged here: the caller
 * (tbx_ctx_exec()) logs it with the record, and the handler decides what
 * the failure means.  @returns @p err. */
static int exec_fail(sq_store_t *store, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int exec_fail(sq_store_t *store, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(store->exec_err, sizeof(store->exec_err), fmt, ap);
	va_end(ap);
	return err;
}

/* Hands the row @p stmt is on to @p fn, its columns as text (NULL for
 * SQL NULL) in @p cols (one per column).  @returns 0 go on, 1 stop, -1 a
 * value without its text (out of memory). */
static int row_call(sqlite3_stmt *stmt, const char **cols, int ncols,
		    tbx_row_fn fn, void *arg)
{
	for (int i = 0; i < ncols; i++) {
		cols[i] = (const char *)sqlite3_column_text(stmt, i);
		if (cols[i] || sqlite3_column_type(stmt, i) == SQLITE_NULL)
			continue;
		if (sqlite3_errcode(sqlite3_db_handle(stmt)) == SQLITE_NOMEM)
			return -1;
		cols[i] = ""; /* an empty BLOB */
	}
	return fn(arg, ncols, cols) != 0;
}

/* A handler's statement: one statement, its parameters all named $1..$n
 * and each of $1..$n used (as PostgreSQL requires of a statement's
 * parameters), text values or NULL, stepped to its end or until @p fn
 * (NULL: the rows are dropped) stops. */
static int sq_run(tbx_outbox_t *base, const char *sql_text,
		  const char *const *params, int n, int64_t *changes,
		  tbx_row_fn fn, void *arg)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt = NULL;
	const char *tail = NULL, **cols = NULL;
	int64_t total;
	int rc = SQLITE_OK, err = TBX_OK, cnt, ncols;

	store->exec_err[0] = '\0';
	if (changes)
		*changes = 0;
	if (!sql_text || n < 0 || (n > 0 && !params))
		return exec_fail(store, TBX_EINVAL,
				 "no statement, or %d parameters without "
				 "values",
				 n);
	rc = sqlite3_prepare_v2(store->db, sql_text, -1, &stmt, &tail);
	if (rc != SQLITE_OK) {
		err = tbx__db_err(rc);
		return exec_fail(store, err == TBX_ESTORE ? TBX_EINVAL : err,
				 "it does not prepare: %s",
				 sqlite3_errmsg(store->db));
	}
	if (!stmt)
		return exec_fail(store, TBX_EINVAL, "it is empty");
	if (tail && *skip_blank(tail)) {
		sqlite3_finalize(stmt);
		return exec_fail(store, TBX_EINVAL,
				 "the text holds more than one statement (one "
				 "per call)");
	}
	cnt = sqlite3_bind_parameter_count(stmt);
	for (int i = 1; i <= cnt && !err; i++) {
		const char *name = sqlite3_bind_parameter_name(stmt, i);
		if (!param_number(name, n))
			err = exec_fail(store, TBX_EINVAL,
					"it has parameter %s; only $1 to $%d "
					"are bound",
					name ? name : "?", n);
	}
	for (int k = 1; k <= n && !err; k++) {
		char name[16];
		int idx;

		snprintf(name, sizeof(name), "$%d", k);
		if (!(idx = sqlite3_bind_parameter_index(stmt, name)))
			err = exec_fail(store, TBX_EINVAL,
					"it does not use %s of its %d "
					"parameters",
					name, n);
		else if ((rc = params[k - 1]
				   ? sqlite3_bind_text(stmt, idx, params[k - 1],
						       -1, SQLITE_STATIC)
				   : sqlite3_bind_null(stmt, idx)) != SQLITE_OK)
			err =
			    exec_fail(store, tbx__db_err(rc), "binding %s: %s",
				      name, sqlite3_errmsg(store->db));
	}
	ncols = fn ? sqlite3_column_count(stmt) : 0;
	if (!err && ncols > 0 && !(cols = calloc((size_t)ncols, sizeof(*cols))))
		err = exec_fail(store, TBX_ENOMEM, "out of memory");
	total = sqlite3_total_changes64(store->db);
	while (!err && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		int stop = fn ? row_call(stmt, cols, ncols, fn, arg) : 0;

		if (stop < 0)
			err = exec_fail(store, TBX_ENOMEM,
					"a value of the row could not be had "
					"as text");
		else if (stop)
			rc = SQLITE_DONE;
		if (stop)
			break;
	}
	free(cols);
	if (!err && rc != SQLITE_DONE)
		err = exec_fail(store, tbx__db_err(rc), "%s",
				sqlite3_errmsg(store->db));
	/* Rows a DML statement changed; a statement that changed none (a
	 * query, DDL) leaves the count of an earlier one behind. */
	if (!err && changes && sqlite3_total_changes64(store->db) != total)
		*changes = sqlite3_changes64(store->db);
	sqlite3_finalize(stmt);
	return err;
}

static int sq_exec(tbx_outbox_t *base, const char *sql_text,
		   const char *const *params, int n, int64_t *changes)
{
	return sq_run(base, sql_text, params, n, changes, NULL, NULL);
}

static int sq_query(tbx_outbox_t *base, const char *sql_text,
		    const char *const *params, int n, tbx_row_fn fn, void *arg)
{
	if (!fn)
		return exec_fail(sq(base), TBX_EINVAL, "no row function");
	return sq_run(base, sql_text, params, n, NULL, fn, arg);
}

static const tbx_outbox_ops_t sqlite_ops = {
    .name = "sqlite",
    .close = sq_close,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .savepoint = sq_savepoint,
    .release = sq_release,
    .undo = sq_undo,
    .row_find = sq_row_find,
    .rows_find = sq_rows_find,
    .row_insert = sq_row_insert,
    .row_load = sq_row_load,
    .row_set_attempt = sq_row_set_attempt,
    .row_delete = sq_row_delete,
    .rows_delete = sq_rows_delete,
    .ingress_get = sq_ingress_get,
    .ingress_set = sq_ingress_set,
    .dead_letter_add = sq_dead_letter_add,
    .dispatch_failed = sq_dispatch_failed,
    .undelivered_add = sq_undelivered_add,
    .count = sq_count,
    .rows_older = sq_rows_older,
    .rows_below = sq_rows_below,
    .row_mark_stuck = sq_row_mark_stuck,
    .inflight_get = sq_inflight_get,
    .inflight_put = sq_inflight_put,
    .inflight_delete = sq_inflight_delete,
    .inflight_release = sq_inflight_release,
    .alarm_add = sq_alarm_add,
    .binding_set = sq_binding_set,
    .read_begin = tbx__sq_read_begin,
    .read_end = tbx__sq_read_end,
    .schema = tbx__sq_schema,
    .errmsg = tbx__sq_errmsg,
    .groups = tbx__sq_groups,
    .rows_summary = tbx__sq_rows_summary,
    .rows_list = tbx__sq_rows_list,
    .row_match = tbx__sq_row_match,
    .row_groups = tbx__sq_row_groups,
    .token_uses = tbx__sq_token_uses,
    .dead_letters_summary = tbx__sq_dead_letters_summary,
    .dead_letters_list = tbx__sq_dead_letters_list,
    .dead_letters_find = tbx__sq_dead_letters_find,
    .dead_letter_recorded = tbx__sq_dead_letter_recorded,
    .dead_letter_replayed = tbx__sq_dead_letter_replayed,
    .dead_letter_groups = tbx__sq_dead_letter_groups,
    .undelivered_count = tbx__sq_undelivered_count,
    .undelivered_list = tbx__sq_undelivered_list,
    .undelivered_get = tbx__sq_undelivered_get,
    .undelivered_delete = tbx__sq_undelivered_delete,
    .alarms = tbx__sq_alarms,
    .bindings = tbx__sq_bindings,
    .ingress_list = tbx__sq_ingress_list,
    .count_older = tbx__sq_count_older,
    .obatch_list = tbx__sq_obatch_list,
    .lock_ids = sq_lock_ids,
    .relaxed = sq_relaxed,
    .native = sq_native,
    .exec = sq_exec,
    .query = sq_query,
    .obatch_insert = tbx__sq_obatch_insert,
    .obatch_set_attempt = tbx__sq_obatch_set_attempt,
    .obatch_delete = tbx__sq_obatch_delete,
    .obatch_load = tbx__sq_obatch_load,
    .obatch_dispatch_failed = tbx__sq_obatch_dispatch_failed,
    .obatch_mark_stuck = tbx__sq_obatch_mark_stuck,
    .cover_msg_find = tbx__sq_cover_msg_find,
    .gens_lock = tbx__sq_gens_lock,
    .gens_get = tbx__sq_gens_get,
    .gens_bump = tbx__sq_gens_bump,
};
