/*
 * The batch rows of the PostgreSQL service store: tbx_obatch,
 * tbx_cover_msg and tbx_inflight.gen (service version 4;
 * docs/batched-tokens.md, "The outbox row by the batch", "The resume
 * check" and "PostgreSQL without serialising workers").  The same
 * operations, with the same contracts, as outbox/sqlite_batch.c; each is
 * one statement for all its rows (gens_lock: two, sent together, the
 * missing rows made, then every row locked).  Every statement runs
 * inside the caller's transaction; none begins or commits.
 *
 * @locality one thread at a time per store (the worker's).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "outbox/batchrow.h"
#include "outbox/pg_int.h"
#include "store/pg.h"

enum {
	Q_INSERT,
	Q_COVER_INSERT,
	Q_SET_ATTEMPT,
	Q_DELETE,
	Q_LOAD,
	Q_COVER_FIND,
	Q_GENS_GET,
	Q_GENS_BUMP,
	Q_GENS_ENSURE,
	Q_GENS_LOCK,
	Q_DISPATCH_FAILED,
	Q_MARK_STUCK,
	Q__COUNT
};

static const char *const sql[Q__COUNT] = {
    /* A's row, sent with the transaction's next statement, as
     * row_insert's (store/pg.h, tbx__pg_defer()): a row id the group
     * has already inserts nothing and fails that statement or the
     * commit with TBX_EEXIST. */
    [Q_INSERT] = "INSERT INTO @S.tbx_obatch (grp, row_id, attempt, "
		 "mint_seq, tokfmt, created_ms, stuck_ms, dispatch_failures, "
		 "cover, msgs, wire) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, "
		 "$9, $10, $11) ON CONFLICT (grp, row_id) DO NOTHING",
    /* Its per-message records, one statement, deferred with it; one
     * covered already (by any row of the group, or twice by this one)
     * fails it as above. */
    [Q_COVER_INSERT] = "INSERT INTO @S.tbx_cover_msg (grp, msg_id, row_id) "
		       "SELECT $1, u.id, $2 FROM unnest($3::text[]) AS u(id) "
		       "ON CONFLICT (grp, msg_id) DO NOTHING",
    /* B: the first recorded attempt wins; a second recorder waits for
     * the row lock, re-reads the row and updates nothing. */
    [Q_SET_ATTEMPT] = "UPDATE @S.tbx_obatch SET attempt = $3, mint_seq = "
		      "$4, msgs = $5, wire = $6 WHERE grp = $1 AND row_id = "
		      "$2 AND attempt IS NULL",
    /* E: the rows and their index entries, one statement; the count is
     * the rows'. */
    [Q_DELETE] = "WITH c AS (DELETE FROM @S.tbx_cover_msg WHERE grp = $1 "
		 "AND row_id = ANY($2::text[])) DELETE FROM @S.tbx_obatch "
		 "WHERE grp = $1 AND row_id = ANY($2::text[])",
    [Q_LOAD] = "SELECT row_id, attempt, mint_seq, tokfmt, created_ms, "
	       "stuck_ms, dispatch_failures, cover, msgs, wire FROM "
	       "@S.tbx_obatch WHERE grp = $1 ORDER BY row_id",
    /* The position of each id asked for (from 1) with its row. */
    [Q_COVER_FIND] = "SELECT u.i, c.row_id FROM unnest($2::text[]) WITH "
		     "ORDINALITY AS u(id, i) JOIN @S.tbx_cover_msg c ON "
		     "c.grp = $1 AND c.msg_id = u.id",
    [Q_GENS_GET] = "SELECT u.i, f.gen FROM unnest($3::int8[]) WITH "
		   "ORDINALITY AS u(p, i) JOIN @S.tbx_inflight f ON f.grp = "
		   "$1 AND f.topic = $2 AND f.\"partition\" = u.p",
    /* Each partition once, with the times it was asked for, in
     * ascending order (the order in which A locks them); gen only ever
     * grows: a concurrent bump waits for the row lock and adds to the
     * value it committed (READ COMMITTED re-reads the row). */
    [Q_GENS_BUMP] = "INSERT INTO @S.tbx_inflight AS f (grp, topic, "
		    "\"partition\", first_offset, last_offset, crashes, "
		    "suspect_until, gen) SELECT $1, $2, u.p, -1, -1, 0, -1, "
		    "count(*) FROM unnest($3::int8[]) AS u(p) GROUP BY u.p "
		    "ORDER BY u.p ON CONFLICT (grp, topic, \"partition\") DO "
		    "UPDATE SET gen = f.gen + excluded.gen RETURNING "
		    "f.\"partition\", f.gen",
    /* A's partitions without a row get one, as a bump makes it but with
     * gen 0, so that Q_GENS_LOCK has a row to lock.  It waits only for a
     * concurrent insert of the same key, never for a row lock. */
    [Q_GENS_ENSURE] = "INSERT INTO @S.tbx_inflight (grp, topic, "
		      "\"partition\", first_offset, last_offset, crashes, "
		      "suspect_until, gen) SELECT $1, u.t, u.p, -1, -1, 0, -1, "
		      "0 FROM unnest($2::text[], $3::int8[]) AS u(t, p) ORDER "
		      "BY u.t COLLATE \"C\", u.p ON CONFLICT (grp, topic, "
		      "\"partition\") DO NOTHING",
    /* A's partition locks, one statement: the rows sorted (LockRows
     * above the Sort locks them in that order, the same in every A),
     * their gen read under the lock (READ COMMITTED re-reads a row a
     * concurrent A updated once its lock is ours). */
    [Q_GENS_LOCK] = "SELECT f.topic, f.\"partition\", f.gen FROM "
		    "@S.tbx_inflight f JOIN unnest($2::text[], $3::int8[]) "
		    "AS u(t, p) ON f.grp = $1 AND f.topic = u.t AND "
		    "f.\"partition\" = u.p ORDER BY f.topic, f.\"partition\" "
		    "FOR UPDATE OF f",
    /* (parenthesised: clang's -Wstring-concatenation takes the last
     * entries of this array for a missing comma otherwise) */
    [Q_DISPATCH_FAILED] = ("UPDATE @S.tbx_obatch SET dispatch_failures = "
			   "dispatch_failures + 1 WHERE grp = $1 AND row_id = "
			   "$2 RETURNING dispatch_failures"),
    [Q_MARK_STUCK] = ("UPDATE @S.tbx_obatch SET stuck_ms = $3 WHERE grp = "
		      "$1 AND row_id = $2 AND stuck_ms IS NULL"),
};

static pg_store_t *ps(tbx_outbox_t *base)
{
	return (pg_store_t *)base;
}

int tbx__outbox_pg_batch_init(pg_store_t *store)
{
	return tbx__pg_stmts_init(&store->batch, store->pg, "svcb", sql,
				  Q__COUNT, store->schema, NULL);
}

/* Runs @p q with @p p, then frees what @p p owns. */
static int run(pg_store_t *store, int q, tbx__pg_params_t *p, PGresult **res)
{
	int err = tbx__pg_run(&store->batch, q, p, res);

	tbx__pgp_free(p);
	return err;
}

/* The rows a command changed (PQcmdTuples). */
static int64_t changes(const PGresult *res)
{
	const char *n = PQcmdTuples((PGresult *)res);

	return n && *n ? strtoll(n, NULL, 10) : 0;
}

/* The reason of a refusal, where errmsg() finds it (the last failure's
 * message, as the server's are). */
static void refuse(pg_store_t *store, const char *why)
{
	tbx__strlcpy(store->pg->errmsg, why, sizeof(store->pg->errmsg));
}

int tbx__pgo_obatch_insert(tbx_outbox_t *base, const char *grp,
			   const tbx__obatch_t *row)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	tbx__cover_t own = {0};
	const tbx__cover_t *c = NULL;
	const char **ids = NULL;
	char what[TBX_UUID_LEN + 64], why[256];
	size_t nids = 0;
	int err, has_attempt;

	if (!grp || !row)
		return TBX_EINVAL;
	has_attempt = row->attempt[0] != '\0';
	err = tbx__obatch_check_insert(row, &own, &c, why, sizeof(why));
	if (!err && has_attempt != (row->mint_seq != 0))
		err = tbx__seterr(why, sizeof(why), TBX_ECORRUPT,
				  "an attempt without a sequence, or the other "
				  "way round");
	if (err) {
		tbx__cover_free(&own);
		if (err != TBX_ECORRUPT)
			return err;
		refuse(store, why);
		tbx__log(TBX_LOG_ERR,
			 "outbox: refusing to insert batch row %s: %s",
			 row->row_id, why);
		return TBX_EINVAL;
	}
	if (c->n && !(ids = malloc(c->n * sizeof(*ids)))) {
		tbx__cover_free(&own);
		return TBX_ENOMEM;
	}
	for (uint32_t i = 0; i < c->n; i++)
		if (c->ent[i].ref == TBX__REF_TOKEN)
			ids[nids++] = c->ent[i].msg_id;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, row->row_id);
	tbx__pgp_opt_text(&p, row->attempt);
	if (has_attempt)
		tbx__pgp_i64(&p, row->mint_seq);
	else
		tbx__pgp_text(&p, NULL);
	tbx__pgp_i64(&p, row->tokfmt);
	tbx__pgp_i64(&p, row->created_ms);
	if (row->stuck_ms >= 0)
		tbx__pgp_i64(&p, row->stuck_ms);
	else
		tbx__pgp_text(&p, NULL);
	tbx__pgp_i64(&p, row->dispatch_failures);
	tbx__pgp_bytea(&p, row->cover, row->cover_len);
	tbx__pgp_bytea(&p, row->msgs_len ? row->msgs : NULL, row->msgs_len);
	tbx__pgp_bytea(&p, row->wire, row->wire_len);
	snprintf(what, sizeof(what), "batch row %s", row->row_id);
	err = tbx__pg_defer(&store->batch, Q_INSERT, &p, NULL, 1, what);
	tbx__pgp_free(&p);
	if (!err && nids) {
		snprintf(what, sizeof(what),
			 "the per-message records of batch row %s",
			 row->row_id);
		tbx__pgp_init(&p);
		tbx__pgp_text(&p, grp);
		tbx__pgp_text(&p, row->row_id);
		tbx__pgp_text_array(&p, ids, nids);
		err = tbx__pg_defer(&store->batch, Q_COVER_INSERT, &p, NULL,
				    (int)nids, what);
		tbx__pgp_free(&p);
	}
	free(ids);
	tbx__cover_free(&own);
	return err;
}

int tbx__pgo_obatch_set_attempt(tbx_outbox_t *base, const char *grp,
				const char *row_id, const char *attempt,
				int64_t mint_seq, const void *msgs,
				size_t msgs_len, const void *wire,
				size_t wire_len, int *won)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	PGresult *res;
	char why[256];
	int err;

	*won = 0;
	if (!grp || !row_id || !attempt)
		return TBX_EINVAL;
	if ((err =
		 tbx__obatch_attempt_check(attempt, mint_seq, msgs, msgs_len,
					   wire, wire_len, why, sizeof(why)))) {
		refuse(store, why);
		return err;
	}
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, row_id);
	tbx__pgp_text(&p, attempt);
	tbx__pgp_i64(&p, mint_seq);
	tbx__pgp_bytea(&p, msgs_len ? msgs : NULL, msgs_len);
	tbx__pgp_bytea(&p, wire, wire_len);
	if ((err = run(store, Q_SET_ATTEMPT, &p, &res)))
		return err;
	*won = changes(res) == 1;
	PQclear(res);
	return TBX_OK;
}

int tbx__pgo_obatch_delete(tbx_outbox_t *base, const char *grp,
			   const char *const *ids, size_t n, int64_t *deleted)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	if (deleted)
		*deleted = 0;
	if (!grp || (n && !ids))
		return TBX_EINVAL;
	if (n == 0)
		return TBX_OK;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text_array(&p, ids, n);
	if ((err = run(store, Q_DELETE, &p, &res)))
		return err;
	if (deleted)
		*deleted = changes(res);
	PQclear(res);
	return TBX_OK;
}

/* A text column into a fixed buffer; one too long fails the UUID check
 * (as outbox/sqlite_batch.c's col_text()). */
static void col_text(const PGresult *res, int r, int col, char *dst,
		     size_t size)
{
	if (tbx__pg_text_to(res, r, col, dst, size))
		tbx__strlcpy(dst, "?", size);
}

int tbx__pgo_obatch_load(tbx_outbox_t *base, const char *grp, tbx__obatch_fn fn,
			 void *opaque)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	PGresult *res;
	int rows, err = TBX_OK;

	if (!grp || !fn)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	if ((err = run(store, Q_LOAD, &p, &res)))
		return err;
	rows = PQntuples(res);
	for (int r = 0; r < rows; r++) {
		tbx__obatch_t row = {0};
		tbx__cover_t c;
		char why[200];
		int stop;

		col_text(res, r, 0, row.row_id, sizeof(row.row_id));
		col_text(res, r, 1, row.attempt, sizeof(row.attempt));
		row.mint_seq = tbx__pg_i64(res, r, 2);
		row.tokfmt = (int)tbx__pg_i64(res, r, 3);
		row.created_ms = tbx__pg_i64(res, r, 4);
		row.stuck_ms =
		    tbx__pg_null(res, r, 5) ? -1 : tbx__pg_i64(res, r, 5);
		row.dispatch_failures = tbx__pg_i64(res, r, 6);
		row.cover = tbx__pg_bytea(res, r, 7, &row.cover_len);
		row.msgs = tbx__pg_bytea(res, r, 8, &row.msgs_len);
		row.wire = tbx__pg_bytea(res, r, 9, &row.wire_len);
		if ((err = tbx__obatch_check(&row, &c, why, sizeof(why)))) {
			tbx__cover_free(&c);
			if (err != TBX_ECORRUPT)
				break;
			tbx__seterr(store->pg->errmsg,
				    sizeof(store->pg->errmsg), err,
				    "batch row %s of group %s: %s", row.row_id,
				    grp, why);
			tbx__log(TBX_LOG_ERR, "outbox: %s", store->pg->errmsg);
			break;
		}
		stop = fn(opaque, &row, &c);
		tbx__cover_free(&c);
		if (stop)
			break;
	}
	PQclear(res);
	return err;
}

int tbx__pgo_cover_msg_find(tbx_outbox_t *base, const char *grp,
			    const char *const *ids, size_t n,
			    char (*row_ids)[TBX_UUID_LEN + 1])
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	PGresult *res;
	int rows, err;

	if (!grp || (n && (!ids || !row_ids)))
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++)
		row_ids[i][0] = '\0';
	if (n == 0)
		return TBX_OK;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text_array(&p, ids, n);
	if ((err = run(store, Q_COVER_FIND, &p, &res)))
		return err;
	rows = PQntuples(res);
	for (int r = 0; r < rows; r++) {
		int64_t i = tbx__pg_i64(res, r, 0);

		if (i >= 1 && (uint64_t)i <= n)
			col_text(res, r, 1, row_ids[i - 1], sizeof(row_ids[0]));
	}
	PQclear(res);
	return TBX_OK;
}

int tbx__pgo_obatch_dispatch_failed(tbx_outbox_t *base, const char *grp,
				    const char *row_id, int *failures)
{
	tbx__pg_params_t p;
	int64_t n = 0;
	int err;

	*failures = 0;
	if (!grp || !row_id)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, row_id);
	err =
	    tbx__pg_run_i64(&ps(base)->batch, Q_DISPATCH_FAILED, &p, &n, NULL);
	tbx__pgp_free(&p);
	*failures = (int)n;
	return err;
}

int tbx__pgo_obatch_mark_stuck(tbx_outbox_t *base, const char *grp,
			       const char *row_id, int64_t now_ms)
{
	tbx__pg_params_t p;

	if (!grp || !row_id)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, row_id);
	tbx__pgp_i64(&p, now_ms);
	return run(ps(base), Q_MARK_STUCK, &p, NULL);
}

/* The partitions as the int8[] of the statements. */
static int parts_param(tbx__pg_params_t *p, const int32_t *parts, size_t n)
{
	int64_t *v = malloc(n * sizeof(*v));

	if (!v)
		return TBX_ENOMEM;
	for (size_t i = 0; i < n; i++)
		v[i] = parts[i];
	tbx__pgp_i64_array(p, v, n);
	free(v);
	return TBX_OK;
}

/* Q_GENS_GET or Q_GENS_BUMP for @p parts of (@p grp, @p topic): the
 * parameters both take, and the statement run. */
static int gens_run(pg_store_t *store, int q, const char *grp,
		    const char *topic, const int32_t *parts, size_t n,
		    PGresult **res)
{
	tbx__pg_params_t p;
	int err;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, topic);
	if ((err = parts_param(&p, parts, n))) {
		tbx__pgp_free(&p);
		return err;
	}
	return run(store, q, &p, res);
}

int tbx__pgo_parts_params(tbx__pg_params_t *p, const char *grp,
			  const char *const *topics, const int32_t *parts,
			  size_t n)
{
	int err;

	tbx__pgp_init(p);
	tbx__pgp_text(p, grp);
	tbx__pgp_text_array(p, topics, n);
	if ((err = parts_param(p, parts, n)))
		tbx__pgp_free(p);
	return err;
}

/* Rounds of insert-then-lock before A gives up on rows deleted under it
 * (a partition's marker deleted by another worker's G or A while gen is
 * 0, between the insert and the lock). */
#define LOCK_ROUNDS 3

int tbx__pgo_gens_lock(tbx_outbox_t *base, const char *grp,
		       const char *const *topics, const int32_t *parts,
		       size_t n, int64_t *gens)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	PGresult *res;
	size_t got = 0;
	int err;

	if (!grp || !tbx__parts_sorted(topics, parts, n))
		return TBX_EINVAL;
	if (n == 0)
		return TBX_OK;
	for (int round = 0; round < LOCK_ROUNDS && got < n; round++) {
		int rows;

		if ((err = tbx__pgo_parts_params(&p, grp, topics, parts, n)))
			return err;
		err = tbx__pg_defer(&store->batch, Q_GENS_ENSURE, &p, NULL, 0,
				    "the partitions' tbx_inflight rows");
		if (err) {
			tbx__pgp_free(&p);
			return err;
		}
		if ((err = run(store, Q_GENS_LOCK, &p, &res)))
			return err;
		/* Both sorted alike and without repeats: every row there,
		 * row r is partition r. */
		rows = PQntuples(res);
		got = (size_t)rows == n ? n : 0;
		for (int r = 0; got && r < rows; r++) {
			const char *t = tbx__pg_text(res, r, 0);

			if (!t || strcmp(t, topics[r]) != 0 ||
			    tbx__pg_i64(res, r, 1) != parts[r]) {
				got = 0;
				break;
			}
			if (gens)
				gens[r] = tbx__pg_i64(res, r, 2);
		}
		PQclear(res);
	}
	if (got < n) {
		refuse(store, "the partitions' tbx_inflight rows were deleted "
			      "while A locked them, round after round");
		return TBX_EBUSY;
	}
	return TBX_OK;
}

int tbx__pgo_gens_get(tbx_outbox_t *base, const char *grp, const char *topic,
		      const int32_t *parts, size_t n, int64_t *gens)
{
	pg_store_t *store = ps(base);
	PGresult *res;
	int rows, err;

	if (!grp || !topic || (n && !parts))
		return TBX_EINVAL;
	if (gens)
		for (size_t i = 0; i < n; i++)
			gens[i] = 0;
	if (n == 0)
		return TBX_OK;
	if ((err = gens_run(store, Q_GENS_GET, grp, topic, parts, n, &res)))
		return err;
	rows = PQntuples(res);
	for (int r = 0; gens && r < rows; r++) {
		int64_t i = tbx__pg_i64(res, r, 0);

		if (i >= 1 && (uint64_t)i <= n)
			gens[i - 1] = tbx__pg_i64(res, r, 1);
	}
	PQclear(res);
	return TBX_OK;
}

int tbx__pgo_gens_bump(tbx_outbox_t *base, const char *grp, const char *topic,
		       const int32_t *parts, size_t n, int64_t *gens)
{
	pg_store_t *store = ps(base);
	PGresult *res;
	int rows, err;

	if (!grp || !topic || (n && !parts))
		return TBX_EINVAL;
	if (n == 0)
		return TBX_OK;
	if ((err = gens_run(store, Q_GENS_BUMP, grp, topic, parts, n, &res)))
		return err;
	rows = PQntuples(res);
	/* A partition asked for k times was bumped by k at once: its j-th
	 * mention (from 1) gets the value it would have had bumped one at a
	 * time, as SQLite's, final - k + j. */
	for (size_t i = 0; gens && i < n; i++) {
		int64_t final = 0, k = 0, j = 0;

		for (int r = 0; r < rows; r++)
			if (tbx__pg_i64(res, r, 0) == parts[i])
				final = tbx__pg_i64(res, r, 1);
		for (size_t x = 0; x < n; x++)
			if (parts[x] == parts[i]) {
				k++;
				if (x <= i)
					j++;
			}
		gens[i] = final - k + j;
	}
	PQclear(res);
	return TBX_OK;
}
