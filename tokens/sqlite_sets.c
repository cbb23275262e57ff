/*
 * The SQLite backend of the token store: the token sets of schema 11
 * (tokens/tokens.h, docs/batched-tokens.md).
 *
 * A set row's bits are only ever cleared, and only by one statement per
 * set:
 *
 *   UPDATE tbx_tset SET bits = tbx_bits_clear(bits, ?mask) ...
 *
 * whose new value SQLite computes from the row as the UPDATE finds it
 * (store/bits.h), never from a value read before: two workers clearing
 * disjoint bits of one row each keep the other's clears, whatever the
 * order of their transactions.  The row is deleted in the same
 * transaction, by a DELETE whose condition (tbx_bits_none(bits)) is also
 * the row's as found.
 *
 * What consume reports as cleared is the row's popcount before the
 * UPDATE (a SELECT) less the one after (the UPDATE's RETURNING, SQLite
 * 3.35 and later): both inside the one write transaction, so nothing
 * else writes the row between them.  A transaction of our own holds the
 * write lock from BEGIN IMMEDIATE; the joined variant runs inside the
 * service store's BEGIN IMMEDIATE, and in WAL mode a transaction whose
 * read snapshot is older than the last commit cannot write at all
 * (SQLITE_BUSY_SNAPSHOT), so the UPDATE's row is the SELECT's.  The
 * SELECT also gives the row's nbits, which sizes the mask; nbits never
 * changes after the mint.
 *
 * A registration (tbx_breg) names its attempt's sets as a JSON array of
 * their ids, which drop_attempt reads with json_each() in the DELETE
 * itself.
 *
 * @locality one thread at a time per store.
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/runsort.h"
#include "base/str.h"
#include "store/bits.h"
#include "store/db_read.h"
#include "store/stmt.h"
#include "tokens/sqlite_int.h"

#define GRP_IN(col)                                                            \
	"(?1 IS NULL OR " col " IN (SELECT value FROM json_each(?1)))"

enum {
	S_ADD,
	S_ADD_BREG,
	S_GET,
	S_PEEK,
	S_CLEAR,
	S_DELETE_EMPTY,
	S_BREG_EXISTS,
	S_BREG_DELETE,
	S_DROP_SETS,
	S_BREG_LIST,
	S_COUNT_ALL,
	S_COUNT_GRP,
	S_BREGS_ALL,
	S_BREGS_GRP,
	S_SUMMARY,
	S_LIST,
	S_LIST_COUNT,
	S_ATTEMPT_ROWS,
	S_UNSUB_ROWS,
	S_UNSUB_DELETE,
	S__COUNT
};

_Static_assert(S__COUNT <= TQ_SET_STMTS, "set_slots[] too small");

static const char *const ssql[S__COUNT] = {
    /* A row per group subscribed before the mint's number, as for a
     * token (tokens/sqlite.c, Q_TOKENS_ADD). */
    [S_ADD] = "INSERT INTO tbx_tset (set_id, grp, topic, part, mint_seq, "
	      "nbits, bits, created_ms) SELECT ?1, grp, ?2, ?3, ?4, ?5, ?6, "
	      "?7 FROM tbx_subscriptions WHERE topic = ?2 AND since_seq < ?4",
    [S_ADD_BREG] = "INSERT INTO tbx_breg (attempt, send_grp, row_id, sets, "
		   "created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
    /* A read: the bitmap itself, tested in C. */
    [S_GET] = "SELECT nbits, bits, mint_seq FROM tbx_tset WHERE set_id = ?1 "
	      "AND grp = ?2",
    /* consume's read: nbits sizes the mask, the count is what was set
     * before; the bits written are not computed from it. */
    [S_PEEK] = "SELECT nbits, tbx_bits_count(bits) FROM tbx_tset WHERE "
	       "set_id = ?1 AND grp = ?2",
    [S_CLEAR] = "UPDATE tbx_tset SET bits = tbx_bits_clear(bits, ?3) WHERE "
		"set_id = ?1 AND grp = ?2 RETURNING tbx_bits_count(bits)",
    [S_DELETE_EMPTY] = "DELETE FROM tbx_tset WHERE set_id = ?1 AND grp = ?2 "
		       "AND tbx_bits_none(bits)",
    [S_BREG_EXISTS] = "SELECT 1 FROM tbx_breg WHERE attempt = ?1",
    [S_BREG_DELETE] = "DELETE FROM tbx_breg WHERE attempt = ?1",
    [S_DROP_SETS] = "DELETE FROM tbx_tset WHERE set_id IN (SELECT value FROM "
		    "json_each((SELECT sets FROM tbx_breg WHERE attempt = "
		    "?1)))",
    [S_BREG_LIST] = "SELECT attempt, row_id, created_ms FROM tbx_breg WHERE "
		    "send_grp = ?1 AND (created_ms, attempt) > (?3, ?4) ORDER "
		    "BY created_ms, attempt LIMIT ?2",
    [S_COUNT_ALL] = "SELECT count(*), total(tbx_bits_count(bits)) FROM "
		    "tbx_tset",
    [S_COUNT_GRP] = "SELECT count(*), total(tbx_bits_count(bits)) FROM "
		    "tbx_tset WHERE grp = ?1",
    [S_BREGS_ALL] = "SELECT count(*) FROM tbx_breg",
    [S_BREGS_GRP] = "SELECT count(*) FROM tbx_breg WHERE send_grp = ?1",
    [S_SUMMARY] = "SELECT grp, count(*), total(tbx_bits_count(bits)), "
		  "min(created_ms) FROM tbx_tset GROUP BY grp ORDER BY grp",
    [S_LIST] = "SELECT set_id, grp, topic, part, nbits, "
	       "tbx_bits_count(bits), bits, mint_seq, created_ms FROM tbx_tset "
	       "WHERE " GRP_IN("grp") " AND created_ms <= ?2 ORDER BY "
				      "created_ms, set_id, grp LIMIT ?3",
    [S_LIST_COUNT] = "SELECT count(*) FROM tbx_tset WHERE " GRP_IN(
	"grp") " AND created_ms <= ?2",
    [S_ATTEMPT_ROWS] = "SELECT count(*) FROM tbx_tset WHERE set_id IN (SELECT "
		       "value FROM json_each((SELECT sets FROM tbx_breg WHERE "
		       "attempt = ?1)))",
    [S_UNSUB_ROWS] = "SELECT count(*) FROM tbx_tset WHERE grp = ?1 AND topic "
		     "= ?2",
    [S_UNSUB_DELETE] = "DELETE FROM tbx_tset WHERE grp = ?1 AND topic = ?2",
};

static tbx_tokens_sqlite_t *backend(tbx_tokens_t *tokens)
{
	return (tbx_tokens_sqlite_t *)tokens;
}

void tbx__tokens_sqlite_sets_init(tbx_tokens_sqlite_t *t)
{
	tbx__stmts_init(&t->sets, t->db, ssql, t->set_slots, S__COUNT);
}

/* Binds (set_id, grp) as ?1 and ?2. */
static int bind_key(sqlite3_stmt *stmt, const char *set_id, const char *grp)
{
	return sqlite3_bind_text(stmt, 1, set_id, -1, SQLITE_STATIC) ||
	       sqlite3_bind_text(stmt, 2, grp, -1, SQLITE_STATIC);
}

static int set_item_valid(const tbx__set_item_t *s)
{
	return s->set_id && tbx__is_uuid(s->set_id, strlen(s->set_id)) &&
	       s->topic && *s->topic && s->part >= 0 && s->nbits >= 1 &&
	       s->nbits <= TBX_SET_BITS_MAX;
}

static int mint_check(const char *send_grp, const tbx__set_req_t *reqs,
		      size_t req_cnt)
{
	if (req_cnt && !reqs)
		return 0;
	for (size_t i = 0; i < req_cnt; i++) {
		if (reqs[i].set_cnt && !reqs[i].sets)
			return 0;
		/* A registration names its sender and its outbox row. */
		if (reqs[i].attempt && (!send_grp || !reqs[i].row_id))
			return 0;
		for (size_t j = 0; j < reqs[i].set_cnt; j++)
			if (!set_item_valid(&reqs[i].sets[j]))
				return 0;
	}
	return 1;
}

/* The rows of one set, every bit set, inside the caller's transaction. */
static int set_add(tbx_tokens_sqlite_t *t, const tbx__set_item_t *s,
		   int64_t seq, int64_t now, uint64_t *rows)
{
	uint8_t bits[TBX__BITS_BYTES(TBX_SET_BITS_MAX)];
	size_t len = TBX__BITS_BYTES(s->nbits);
	sqlite3_stmt *stmt;
	int err;

	tbx__bits_fill(bits, s->nbits);
	if ((err = tbx__stmt_get(&t->sets, S_ADD, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, s->set_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, s->topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int(stmt, 3, s->part) ||
	    sqlite3_bind_int64(stmt, 4, seq) ||
	    sqlite3_bind_int64(stmt, 5, (int64_t)s->nbits) ||
	    sqlite3_bind_blob(stmt, 6, bits, (int)len, SQLITE_TRANSIENT) ||
	    sqlite3_bind_int64(stmt, 7, now))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_done(stmt)))
		return err;
	*rows += (uint64_t)sqlite3_changes(t->db);
	return TBX_OK;
}

int tbx__tq_sets_add(tbx_tokens_sqlite_t *t, const tbx__set_item_t *sets,
		     size_t cnt, int64_t seq, int64_t now, uint64_t *rows)
{
	int err = TBX_OK;

	for (size_t i = 0; i < cnt; i++)
		if (!set_item_valid(&sets[i]))
			return TBX_EINVAL;
	for (size_t i = 0; !err && i < cnt; i++)
		err = set_add(t, &sets[i], seq, now, rows);
	return err;
}

/* The JSON array of @p req's set ids (UUIDs: nothing to escape), into a
 * malloc'ed string. */
static char *sets_json(const tbx__set_req_t *req)
{
	size_t cap = 3 + req->set_cnt * (TBX_UUID_LEN + 3), off = 0;
	char *s = malloc(cap);

	if (!s)
		return NULL;
	s[off++] = '[';
	for (size_t i = 0; i < req->set_cnt; i++) {
		size_t len = strlen(req->sets[i].set_id);

		if (i)
			s[off++] = ',';
		s[off++] = '"';
		memcpy(s + off, req->sets[i].set_id, len);
		off += len;
		s[off++] = '"';
	}
	s[off++] = ']';
	s[off] = '\0';
	return s;
}

static int breg_add(tbx_tokens_sqlite_t *t, const char *send_grp,
		    const tbx__set_req_t *req, int64_t now)
{
	sqlite3_stmt *stmt;
	char *json;
	int err;

	if (!(json = sets_json(req)))
		return TBX_ENOMEM;
	if ((err = tbx__stmt_get(&t->sets, S_ADD_BREG, &stmt))) {
		free(json);
		return err;
	}
	if (sqlite3_bind_text(stmt, 1, req->attempt, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, send_grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 3, req->row_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 4, json, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 5, now))
		err = tbx__stmt_bind_fail(stmt);
	else
		err = tbx__stmt_done(stmt);
	free(json);
	return err;
}

int tbx__tq_sets_mint(tbx_tokens_t *tokens, const char *send_grp,
		      const tbx__set_req_t *reqs, size_t req_cnt, int64_t *seq,
		      uint64_t *rows)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	int64_t num = 0, now = tbx__now_ms();
	uint64_t created = 0;
	int err;

	if (!mint_check(send_grp, reqs, req_cnt))
		return TBX_EINVAL;
	if ((err = tbx__tq_txn_begin(t)))
		return err;
	/* One number for the whole call, as mint's. */
	err = tbx__tq_seq_next(t, &num);
	for (size_t i = 0; !err && i < req_cnt; i++) {
		/* Registered with its sets, in one transaction: the sweeper
		 * can always find an orphan. */
		if (reqs[i].attempt)
			err = breg_add(t, send_grp, &reqs[i], now);
		for (size_t j = 0; !err && j < reqs[i].set_cnt; j++)
			err = set_add(t, &reqs[i].sets[j], num, now, &created);
	}
	if ((err = tbx__tq_txn_end(t, err)))
		return err;
	if (seq)
		*seq = num;
	if (rows)
		*rows = created;
	return TBX_OK;
}

int tbx__tq_sets_mint_joined(tbx_tokens_t *tokens, const tbx__set_item_t *sets,
			     size_t cnt, int64_t seq, uint64_t *rows)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	tbx__set_req_t req = {NULL, NULL, sets, cnt};
	int64_t now = tbx__now_ms();
	uint64_t created = 0;
	int err;

	if (seq <= 0 || !mint_check(NULL, &req, 1))
		return TBX_EINVAL;
	if ((err = tbx__tq_joined_check(t)))
		return err;
	for (size_t i = 0; !err && i < cnt; i++)
		err = set_add(t, &sets[i], seq, now, &created);
	if (!err && rows)
		*rows += created;
	return err;
}

/* refs[] in the order of their set ids (then their place): the refs of
 * one set next to each other. */
typedef struct by_set {
	const char *set_id;
	size_t i;
} by_set_t;

static int by_set_cmp(const by_set_t *x, const by_set_t *y)
{
	/* A batch's refs of one set point at one copy of its id, or at
	 * equal ones. */
	int c = x->set_id == y->set_id ? 0 : strcmp(x->set_id, y->set_id);

	return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* A batch's refs come in runs, one per incoming set and partition. */
TBX__RUN_SORT(by_set_sort, by_set_t, by_set_cmp)

static int refs_check(const char *grp, const tbx__bit_ref_t *refs, size_t n)
{
	if (!grp || (n && !refs))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!refs[i].set_id)
			return 0;
	return 1;
}

/* A malloc'ed by_set_t[n] of @p refs, sorted; NULL when out of memory. */
static by_set_t *refs_sorted(const tbx__bit_ref_t *refs, size_t n)
{
	by_set_t *o = malloc(2 * n * sizeof(*o));

	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		o[i].set_id = refs[i].set_id;
		o[i].i = i;
	}
	/* The second half is the sort's room. */
	by_set_sort(o, o + n, n);
	return o;
}

/* The end of the run of @p o's entries from @p from with one set id. */
static size_t run_end(const by_set_t *o, size_t n, size_t from)
{
	size_t to = from + 1;

	while (to < n && strcmp(o[to].set_id, o[from].set_id) == 0)
		to++;
	return to;
}

int tbx__tq_sets_test(tbx_tokens_t *tokens, const char *grp,
		      const tbx__bit_ref_t *refs, size_t n,
		      tbx__bit_state_t *st, int64_t *mint_seq)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	by_set_t *o;
	int err = TBX_OK;

	if (!refs_check(grp, refs, n) || (n && !st))
		return TBX_EINVAL;
	if (n == 0)
		return TBX_OK;
	if (!(o = refs_sorted(refs, n)))
		return TBX_ENOMEM;
	for (size_t from = 0, to; !err && from < n; from = to) {
		sqlite3_stmt *stmt;
		const uint8_t *bits = NULL;
		int64_t nbits = 0, mseq = 0;
		size_t len = 0;
		int hit = 0;

		to = run_end(o, n, from);
		if ((err = tbx__stmt_get(&t->sets, S_GET, &stmt)))
			break;
		if (bind_key(stmt, o[from].set_id, grp)) {
			err = tbx__stmt_bind_fail(stmt);
			break;
		}
		if ((err = tbx__stmt_step(stmt, &hit)))
			break;
		if (hit) {
			nbits = sqlite3_column_int64(stmt, 0);
			bits = sqlite3_column_blob(stmt, 1);
			len = (size_t)sqlite3_column_bytes(stmt, 1);
			mseq = sqlite3_column_int64(stmt, 2);
			if (len != TBX__BITS_BYTES(nbits) || (len && !bits)) {
				tbx__log(TBX_LOG_ERR,
					 "token store: set %s of group %s "
					 "has a malformed bitmap",
					 o[from].set_id, grp);
				err = TBX_ECORRUPT;
			}
		}
		for (size_t k = from; !err && k < to; k++) {
			size_t i = o[k].i;

			if (!hit)
				st[i] = TBX_BIT_NOROW;
			else if ((int64_t)refs[i].index >= nbits)
				st[i] = TBX_BIT_RANGE;
			else
				st[i] = tbx__bit_get(bits, len, refs[i].index)
					    ? TBX_BIT_SET
					    : TBX_BIT_CLEAR;
			if (mint_seq)
				mint_seq[i] = hit ? mseq : 0;
		}
		sqlite3_reset(stmt);
	}
	free(o);
	return err;
}

/* Clears the bits of one set's refs o[from .. to) in @p grp's row, and
 * deletes the row once empty: inside the caller's write transaction. */
static int clear_one(tbx_tokens_sqlite_t *t, const char *grp,
		     const tbx__bit_ref_t *refs, const by_set_t *o, size_t from,
		     size_t to, uint64_t *cleared, uint64_t *deleted)
{
	uint8_t mask[TBX__BITS_BYTES(TBX_SET_BITS_MAX)];
	const char *set_id = o[from].set_id;
	sqlite3_stmt *stmt;
	int64_t nbits, before, after;
	size_t len;
	int hit, any = 0, err;

	if ((err = tbx__stmt_get(&t->sets, S_PEEK, &stmt)))
		return err;
	if (bind_key(stmt, set_id, grp))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	nbits = hit ? sqlite3_column_int64(stmt, 0) : 0;
	before = hit ? sqlite3_column_int64(stmt, 1) : 0;
	sqlite3_reset(stmt);
	/* Gone (every bit consumed, or never minted for the group). */
	if (!hit)
		return TBX_OK;
	if (nbits < 1 || nbits > (int64_t)TBX_SET_BITS_MAX) {
		tbx__log(TBX_LOG_ERR,
			 "token store: set %s of group %s has %lld bits",
			 set_id, grp, (long long)nbits);
		return TBX_ECORRUPT;
	}
	len = TBX__BITS_BYTES(nbits);
	memset(mask, 0, len);
	for (size_t k = from; k < to; k++) {
		uint32_t i = refs[o[k].i].index;

		/* Beyond the set: clears nothing. */
		if ((int64_t)i < nbits) {
			tbx__bit_set(mask, i);
			any = 1;
		}
	}
	if (!any)
		return TBX_OK;
	/* The new bits are computed by the UPDATE from the row as it finds
	 * it: a clear another transaction committed is kept. */
	if ((err = tbx__stmt_get(&t->sets, S_CLEAR, &stmt)))
		return err;
	if (bind_key(stmt, set_id, grp) ||
	    sqlite3_bind_blob(stmt, 3, mask, (int)len, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	after = hit ? sqlite3_column_int64(stmt, 0) : before;
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	sqlite3_reset(stmt);
	if (after < before)
		*cleared += (uint64_t)(before - after);
	if (after > 0)
		return TBX_OK;
	if ((err = tbx__stmt_get(&t->sets, S_DELETE_EMPTY, &stmt)))
		return err;
	if (bind_key(stmt, set_id, grp))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_done(stmt)))
		return err;
	*deleted += (uint64_t)sqlite3_changes(t->db);
	return TBX_OK;
}

/* D's clears: in a transaction of their own, or @p joined inside the
 * caller's. */
static int consume(tbx_tokens_t *tokens, const char *grp,
		   const tbx__bit_ref_t *refs, size_t n, uint64_t *cleared,
		   uint64_t *deleted, int joined)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	uint64_t c = 0, d = 0;
	by_set_t *o;
	int err;

	if (cleared)
		*cleared = 0;
	if (deleted)
		*deleted = 0;
	if (!refs_check(grp, refs, n))
		return TBX_EINVAL;
	if (n == 0)
		return TBX_OK;
	if (!(o = refs_sorted(refs, n)))
		return TBX_ENOMEM;
	err = joined ? tbx__tq_joined_check(t) : tbx__tq_txn_begin(t);
	if (err) {
		free(o);
		return err;
	}
	for (size_t from = 0, to; !err && from < n; from = to) {
		to = run_end(o, n, from);
		err = clear_one(t, grp, refs, o, from, to, &c, &d);
	}
	free(o);
	if (!joined)
		err = tbx__tq_txn_end(t, err);
	if (err)
		return err;
	if (cleared)
		*cleared = c;
	if (deleted)
		*deleted = d;
	return TBX_OK;
}

int tbx__tq_sets_consume(tbx_tokens_t *tokens, const char *grp,
			 const tbx__bit_ref_t *refs, size_t n,
			 uint64_t *cleared, uint64_t *deleted)
{
	return consume(tokens, grp, refs, n, cleared, deleted, 0);
}

int tbx__tq_sets_consume_joined(tbx_tokens_t *tokens, const char *grp,
				const tbx__bit_ref_t *refs, size_t n,
				uint64_t *cleared, uint64_t *deleted)
{
	return consume(tokens, grp, refs, n, cleared, deleted, 1);
}

/* Runs @p q with ?1 = @p attempt, inside the caller's transaction. */
static int run_attempt(tbx_tokens_sqlite_t *t, int q, const char *attempt)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&t->sets, q, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, attempt, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

int tbx__tq_sets_confirm(tbx_tokens_t *tokens, const char *const *attempts,
			 size_t cnt)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	int err;

	if (cnt == 0)
		return TBX_OK;
	if (!attempts)
		return TBX_EINVAL;
	for (size_t i = 0; i < cnt; i++)
		if (!attempts[i])
			return TBX_EINVAL;
	if ((err = tbx__tq_txn_begin(t)))
		return err;
	for (size_t i = 0; !err && i < cnt; i++)
		err = run_attempt(t, S_BREG_DELETE, attempts[i]);
	return tbx__tq_txn_end(t, err);
}

int tbx__tq_sets_drop_attempt(tbx_tokens_t *tokens, const char *attempt,
			      int *dropped, uint64_t *deleted)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	uint64_t n = 0;
	int exists = 0, err;

	if (!dropped || !attempt)
		return TBX_EINVAL;
	*dropped = 0;
	if (deleted)
		*deleted = 0;
	if ((err = tbx__tq_txn_begin(t)))
		return err;
	/* The registration is the licence to delete, checked under the
	 * write lock: once the winner's confirm has removed it, its sets
	 * are in flight and must stay (tokens/sqlite.c, drop_attempt). */
	if (!(err = tbx__stmt_get(&t->sets, S_BREG_EXISTS, &stmt))) {
		if (sqlite3_bind_text(stmt, 1, attempt, -1, SQLITE_STATIC))
			err = tbx__stmt_bind_fail(stmt);
		else if (!(err = tbx__stmt_step(stmt, &exists)))
			sqlite3_reset(stmt);
	}
	if (!err && exists && !(err = run_attempt(t, S_DROP_SETS, attempt))) {
		n = (uint64_t)sqlite3_changes(t->db);
		err = run_attempt(t, S_BREG_DELETE, attempt);
	}
	if ((err = tbx__tq_txn_end(t, err)))
		return err;
	*dropped = exists;
	if (deleted)
		*deleted = n;
	return TBX_OK;
}

int tbx__tq_sets_registrations(tbx_tokens_t *tokens, const char *send_grp,
			       const tbx__reg_t *after, size_t limit,
			       tbx__reg_t **out, size_t *cnt)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int err;

	if (!out || !cnt)
		return TBX_EINVAL;
	*out = NULL;
	*cnt = 0;
	if (!send_grp)
		return TBX_EINVAL;
	if (limit == 0)
		return TBX_OK;
	if ((err = tbx__stmt_get(&t->sets, S_BREG_LIST, &stmt)))
		return err;
	/* msg_id receives the row_id. */
	return tbx__tq_regs_read(stmt, send_grp, after, limit, out, cnt);
}

int tbx__tq_sets_count(tbx_tokens_t *tokens, const char *grp, int64_t *rows,
		       int64_t *pending, int64_t *registrations)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int hit, err;

	if (rows || pending) {
		if ((err = tbx__stmt_get(
			 &t->sets, grp ? S_COUNT_GRP : S_COUNT_ALL, &stmt)))
			return err;
		if (grp && sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC))
			return tbx__stmt_bind_fail(stmt);
		if ((err = tbx__stmt_step(stmt, &hit)))
			return err;
		if (rows)
			*rows = hit ? sqlite3_column_int64(stmt, 0) : 0;
		if (pending)
			*pending = hit ? sqlite3_column_int64(stmt, 1) : 0;
		sqlite3_reset(stmt);
	}
	if (registrations) {
		if ((err = tbx__stmt_get(
			 &t->sets, grp ? S_BREGS_GRP : S_BREGS_ALL, &stmt)))
			return err;
		if (grp && sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC))
			return tbx__stmt_bind_fail(stmt);
		if ((err = tbx__stmt_int64(stmt, registrations)))
			return err;
	}
	return TBX_OK;
}

int tbx__tq_sets_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn, void *opaque)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&t->sets, S_SUMMARY, &stmt)))
		return err;
	return tbx__db_each(stmt, tbx__db_sum_row, (tbx__any_fn)fn, opaque);
}

static int set_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__set_rec_t r;
	int64_t nbits = sqlite3_column_int64(stmt, 4);

	r.set_id = tbx__db_text(stmt, 0);
	r.grp = tbx__db_text(stmt, 1);
	r.topic = tbx__db_text(stmt, 2);
	r.part = sqlite3_column_int(stmt, 3);
	r.pending = (uint32_t)sqlite3_column_int64(stmt, 5);
	r.bits = sqlite3_column_blob(stmt, 6);
	/* The CHECK of tbx_tset holds the length to nbits; a file edited by
	 * hand is shown with the bits it has. */
	if ((size_t)sqlite3_column_bytes(stmt, 6) < TBX__BITS_BYTES(nbits))
		nbits = (int64_t)sqlite3_column_bytes(stmt, 6) * 8;
	r.nbits = (uint32_t)nbits;
	r.mint_seq = sqlite3_column_int64(stmt, 7);
	r.created_ms = sqlite3_column_int64(stmt, 8);
	return ((tbx__set_fn)fn)(opaque, &r);
}

int tbx__tq_sets_list(tbx_tokens_t *tokens, const tbx__filter_t *f,
		      int64_t *total, tbx__set_fn fn, void *opaque)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	char *json = NULL;
	int err;

	if (total) {
		if ((err = tbx__stmt_get(&t->sets, S_LIST_COUNT, &stmt)))
			return err;
		if (!(err = tbx__db_bind_filter(stmt, f, 1, 2, 0, &json)))
			err = tbx__db_one_int(stmt, total);
		else
			sqlite3_reset(stmt);
		free(json);
		json = NULL;
		if (err)
			return err;
	}
	if ((err = tbx__stmt_get(&t->sets, S_LIST, &stmt)))
		return err;
	if (!(err = tbx__db_bind_filter(stmt, f, 1, 2, 3, &json)))
		err = tbx__db_each(stmt, set_row, (tbx__any_fn)fn, opaque);
	else
		sqlite3_reset(stmt);
	free(json);
	return err;
}

int tbx__tq_sets_attempt_rows(tbx_tokens_t *tokens, const char *attempt,
			      int64_t *n)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int err;

	if (!attempt || !n)
		return TBX_EINVAL;
	*n = 0;
	if ((err = tbx__stmt_get(&t->sets, S_ATTEMPT_ROWS, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, attempt, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_int64(stmt, n);
}

int tbx__tq_sets_unsub(tbx_tokens_sqlite_t *t, const char *grp,
		       const char *topic, int remove, int64_t *rows,
		       int64_t *deleted)
{
	sqlite3_stmt *stmt;
	int err;

	*rows = *deleted = 0;
	if ((err = tbx__stmt_get(&t->sets, S_UNSUB_ROWS, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, topic, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_int64(stmt, rows)) || !remove)
		return err;
	if ((err = tbx__stmt_get(&t->sets, S_UNSUB_DELETE, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, topic, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_done(stmt)))
		return err;
	*deleted = sqlite3_changes(t->db);
	return TBX_OK;
}
