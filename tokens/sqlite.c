/*
 * The SQLite backend of the token store T (tokens/tokens.h).
 *
 * Every operation that writes is one BEGIN IMMEDIATE … COMMIT of its own,
 * rolled back on any error: the write lock is taken up front, so a
 * transaction never fails half-way on a lock upgrade, and what it reads
 * (the sequence, a subscription, a registration) cannot change before it
 * commits.  Reads are single statements.  Statements are prepared once and
 * reset right after use, so none pins a read snapshot between calls.
 *
 * With a shared connection (one file for both stores) the service store's
 * transaction and ours must not overlap: a write here while the connection
 * is inside a transaction is refused with TBX_ESTATE instead of being
 * folded into the caller's transaction.  The joined operations are the
 * exception: they write only inside the caller's transaction, which
 * commits them.
 *
 * A read-write opening starts a range of the sequence (range_start()),
 * so that a store restored from an older backup never issues the numbers
 * it lost again (docs/architecture.md, token-store identity).
 *
 * The read side of `tokenbox inspect` is in sqlite_read.c.
 *
 * @locality one thread at a time per store.
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "store/stmt.h"
#include "tokens/pg_int.h"
#include "tokens/pub_sets.h"
#include "tokens/sqlite_int.h"
#include "tokens/tokens.h"

enum {
	Q_BEGIN,
	Q_COMMIT,
	Q_ROLLBACK,
	Q_SEQ_NEXT,
	Q_SEQ_GET,
	Q_EXISTS,
	Q_SUB_GET,
	Q_SUB_ADD,
	Q_REG_ADD,
	Q_TOKENS_ADD,
	Q_REG_DELETE,
	Q_TOKEN_DELETE,
	Q_REG_EXISTS,
	Q_REG_TOKENS_DELETE,
	Q_REG_LIST,
	Q_COUNT_TOKENS_ALL,
	Q_COUNT_TOKENS_GRP,
	Q_COUNT_REGS_ALL,
	Q_COUNT_REGS_GRP,
	Q_EDGE_SWEEP,
	Q_EDGE_GET,
	Q_EDGE_PUT,
	Q_EDGE_REFUSED,
	Q_EDGE_DELIVERED,
	Q_EDGE_COUNT,
	Q_EDGE_REFUSED_SUM,
	Q_SUB_COUNT,
	Q_TOKENS_ADD_GRP,
	Q_SUB_TOUCH,
	Q_STORE_ID,
	Q_RANGE_OPEN,
	Q_RANGE_CLOSE,
	Q_RANGE_DROP,
	Q_RANGE_ADD,
	Q_SEQ_SET,
	Q_SEQ_ISSUED,
	Q_RANGE_COUNT,
	Q__COUNT
};

static const char *const sql[Q__COUNT] = {
    [Q_BEGIN] = "BEGIN IMMEDIATE",
    [Q_COMMIT] = "COMMIT",
    [Q_ROLLBACK] = "ROLLBACK",
    [Q_SEQ_NEXT] = "UPDATE tbx_seq SET value = value + 1 WHERE id = 1",
    [Q_SEQ_GET] = "SELECT value FROM tbx_seq WHERE id = 1",
    [Q_EXISTS] = "SELECT 1 FROM tbx_tokens WHERE token = ?1 AND grp = ?2",
    [Q_SUB_GET] = "SELECT since_seq FROM tbx_subscriptions WHERE topic = ?1 "
		  "AND grp = ?2",
    [Q_SUB_ADD] = "INSERT INTO tbx_subscriptions (topic, grp, since_seq, "
		  "created_ms, used_ms) VALUES (?1, ?2, ?3, ?4, ?4)",
    [Q_REG_ADD] = "INSERT INTO tbx_registrations (attempt, token, send_grp, "
		  "msg_id, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
    /* A group subscribed at since_seq gets the tokens of messages minted
     * after it; one minted before is untokened ingress to it. */
    [Q_TOKENS_ADD] = "INSERT INTO tbx_tokens (token, grp, mint_seq, "
		     "created_ms) SELECT ?1, grp, ?2, ?3 FROM "
		     "tbx_subscriptions WHERE topic = ?4 AND since_seq < ?2",
    [Q_REG_DELETE] = "DELETE FROM tbx_registrations WHERE attempt = ?1",
    [Q_TOKEN_DELETE] = "DELETE FROM tbx_tokens WHERE token = ?1 AND grp = ?2",
    [Q_REG_EXISTS] = "SELECT 1 FROM tbx_registrations WHERE attempt = ?1 "
		     "LIMIT 1",
    [Q_REG_TOKENS_DELETE] = "DELETE FROM tbx_tokens WHERE token IN (SELECT "
			    "token FROM tbx_registrations WHERE attempt = ?1)",
    /* One registration per attempt; every row of an attempt names the
     * same message. */
    [Q_REG_LIST] =
	"SELECT attempt, min(msg_id), min(created_ms) AS c FROM "
	"tbx_registrations WHERE send_grp = ?1 GROUP BY attempt "
	"HAVING (c, attempt) > (?3, ?4) ORDER BY c, attempt LIMIT ?2",
    [Q_COUNT_TOKENS_ALL] = "SELECT count(*) FROM tbx_tokens",
    [Q_COUNT_TOKENS_GRP] = "SELECT count(*) FROM tbx_tokens WHERE grp = ?1",
    [Q_COUNT_REGS_ALL] = "SELECT count(DISTINCT attempt) FROM "
			 "tbx_registrations",
    [Q_COUNT_REGS_GRP] = "SELECT count(DISTINCT attempt) FROM "
			 "tbx_registrations WHERE send_grp = ?1",
    /* The edge keeps a caller id for ingress.dedup.window.ms: oldest
     * first, a bounded number per flush. */
    [Q_EDGE_SWEEP] = "DELETE FROM tbx_edge WHERE rowid IN (SELECT rowid FROM "
		     "tbx_edge WHERE created_ms < ?1 ORDER BY created_ms "
		     "LIMIT ?2)",
    [Q_EDGE_GET] = "SELECT fingerprint, msg_id, token, mint_seq, delivered, "
		   "tset, tbit, tpart FROM tbx_edge WHERE topic = ?1 AND "
		   "caller_id = ?2 AND "
		   "created_ms >= ?3",
    /* REPLACE: an entry past the window not swept yet is superseded. */
    [Q_EDGE_PUT] = "INSERT OR REPLACE INTO tbx_edge (topic, caller_id, "
		   "fingerprint, msg_id, token, mint_seq, delivered, refused, "
		   "created_ms, tset, tbit, tpart) VALUES (?1, ?2, ?3, ?4, "
		   "?5, ?6, 0, 0, ?7, ?8, ?9, ?10)",
    [Q_EDGE_REFUSED] = "UPDATE tbx_edge SET refused = refused + 1 WHERE "
		       "topic = ?1 AND caller_id = ?2",
    [Q_EDGE_DELIVERED] = "UPDATE tbx_edge SET delivered = 1 WHERE topic = ?1 "
			 "AND caller_id = ?2 AND msg_id = ?3",
    [Q_EDGE_COUNT] = "SELECT count(*) FROM tbx_edge",
    [Q_EDGE_REFUSED_SUM] = "SELECT total(refused) FROM tbx_edge",
    [Q_SUB_COUNT] = "SELECT count(*) FROM tbx_subscriptions WHERE topic = ?1",
    [Q_TOKENS_ADD_GRP] = "INSERT INTO tbx_tokens (token, grp, mint_seq, "
			 "created_ms) SELECT ?1, grp, ?2, ?3 FROM "
			 "tbx_subscriptions WHERE topic = ?4 AND since_seq < "
			 "?2 AND grp = ?5",
    [Q_SUB_TOUCH] = "UPDATE tbx_subscriptions SET used_ms = ?3 WHERE "
		    "topic = ?1 AND grp = ?2",
    [Q_STORE_ID] = "SELECT store_id FROM tbx_store_info WHERE id = 1",
    /* The ranges (range_start()): at most one open, hi NULL. */
    [Q_RANGE_OPEN] = "SELECT lo FROM tbx_seq_ranges WHERE hi IS NULL",
    [Q_RANGE_CLOSE] = "UPDATE tbx_seq_ranges SET hi = ?1 WHERE hi IS NULL",
    [Q_RANGE_DROP] = "DELETE FROM tbx_seq_ranges WHERE hi IS NULL",
    [Q_RANGE_ADD] = "INSERT INTO tbx_seq_ranges (lo, hi) VALUES (?1, NULL)",
    [Q_SEQ_SET] = "UPDATE tbx_seq SET value = ?1 WHERE id = 1",
    /* The range that may hold ?1 (the last starting at or below it),
     * and the current value for an open one: one snapshot. */
    [Q_SEQ_ISSUED] = "SELECT lo, hi, (SELECT value FROM tbx_seq WHERE id = "
		     "1) FROM tbx_seq_ranges WHERE lo <= ?1 ORDER BY lo DESC "
		     "LIMIT 1",
    [Q_RANGE_COUNT] = "SELECT count(*) FROM tbx_seq_ranges",
};

_Static_assert(Q__COUNT <= TQ_STMTS, "slots[] too small");

static tbx_tokens_sqlite_t *backend(tbx_tokens_t *tokens)
{
	return (tbx_tokens_sqlite_t *)tokens;
}

static int txn_begin(tbx_tokens_sqlite_t *t)
{
	if (!sqlite3_get_autocommit(t->db)) {
		tbx__log(TBX_LOG_ERR, "token store: a write while the shared "
				      "connection is inside a transaction");
		return TBX_ESTATE;
	}
	return tbx__stmt_run(&t->stmts, Q_BEGIN);
}

/* Commits when @p err is TBX_OK, else (or when COMMIT fails) rolls back.
 * @returns the first error. */
static int txn_end(tbx_tokens_sqlite_t *t, int err)
{
	if (!err)
		err = tbx__stmt_run(&t->stmts, Q_COMMIT);
	if (err && !sqlite3_get_autocommit(t->db))
		tbx__stmt_run(&t->stmts, Q_ROLLBACK);
	return err;
}

/* Takes the next number of the sequence, inside the caller's txn. */
static int seq_next(tbx_tokens_sqlite_t *t, int64_t *seq)
{
	sqlite3_stmt *stmt;
	int hit, err;

	if ((err = tbx__stmt_run(&t->stmts, Q_SEQ_NEXT)))
		return err;
	if (sqlite3_changes(t->db) != 1) {
		tbx__log(TBX_LOG_ERR, "token store: tbx_seq has no row 1");
		return TBX_ESTORE;
	}
	if ((err = tbx__stmt_get(&t->stmts, Q_SEQ_GET, &stmt)))
		return err;
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	*seq = hit ? sqlite3_column_int64(stmt, 0) : 0;
	sqlite3_reset(stmt);
	return hit ? TBX_OK : TBX_ESTORE;
}

static int op_seq_current(tbx_tokens_t *tokens, int64_t *seq);

/* Runs @p q with ?1 = @p v (when @p bind), inside the caller's txn. */
static int run_i64(tbx_tokens_sqlite_t *t, int q, int bind, int64_t v)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&t->stmts, q, &stmt)))
		return err;
	if (bind && sqlite3_bind_int64(stmt, 1, v))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

/*
 * Starts a new range of the sequence, inside the caller's write
 * transaction: closes the open range at the current value (or removes it
 * when it issued nothing), opens one at lo = max(value + 1, now in ms *
 * TBX__SEQ_PER_MS) and moves the sequence to lo - 1.  Under the write
 * lock, every number taken after it is >= lo, and every one taken before
 * is in a range that holds it.  A store restored from a backup keeps the
 * range open at the backup, which its first opening closes at the
 * backup's value: every number the lost history issued after the backup
 * is above it, and below the new lo unless that history issued more
 * than TBX__SEQ_PER_MS numbers a millisecond since it opened its own
 * range (or the clock went back by more than the time since).
 */
static int range_start(tbx_tokens_sqlite_t *t)
{
	sqlite3_stmt *stmt;
	int64_t value, open_lo = 0, lo;
	int hit, err;

	if ((err = op_seq_current(&t->base, &value)))
		return err;
	if ((err = tbx__stmt_get(&t->stmts, Q_RANGE_OPEN, &stmt)) ||
	    (err = tbx__stmt_step(stmt, &hit)))
		return err;
	if (hit)
		open_lo = sqlite3_column_int64(stmt, 0);
	sqlite3_reset(stmt);
	/* A range that issued nothing goes. */
	if (hit && value < open_lo)
		err = run_i64(t, Q_RANGE_DROP, 0, 0);
	else if (hit)
		err = run_i64(t, Q_RANGE_CLOSE, 1, value);
	if (err)
		return err;
	lo = tbx__now_ms() * TBX__SEQ_PER_MS;
	if (lo <= value)
		lo = value + 1;
	if ((err = run_i64(t, Q_RANGE_ADD, 1, lo)))
		return err;
	if (lo - 1 != value)
		err = run_i64(t, Q_SEQ_SET, 1, lo - 1);
	return err;
}

static int op_exists(tbx_tokens_t *tokens, const char *token, const char *grp,
		     int *exists)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int hit, err;

	*exists = 0;
	if (!token || !grp)
		return TBX_EINVAL;
	if ((err = tbx__stmt_get(&t->stmts, Q_EXISTS, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, token, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, grp, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	*exists = hit;
	sqlite3_reset(stmt);
	return TBX_OK;
}

/* SQLite answers in the process: the cached statement per token costs no
 * round trip. */
static int op_exists_many(tbx_tokens_t *tokens, const char *grp,
			  const char *const *token_ids, size_t n, int *exists)
{
	int err;

	if (n && (!token_ids || !exists))
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((err = op_exists(tokens, token_ids[i], grp, &exists[i])))
			return err;
	return TBX_OK;
}

/* Reads (topic, grp)'s since.  @returns TBX_OK, TBX_ENOENT or an error. */
static int sub_get(tbx_tokens_sqlite_t *t, const char *topic, const char *grp,
		   int64_t *since)
{
	sqlite3_stmt *stmt;
	int hit, err;

	if ((err = tbx__stmt_get(&t->stmts, Q_SUB_GET, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, grp, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	if (hit)
		*since = sqlite3_column_int64(stmt, 0);
	sqlite3_reset(stmt);
	return hit ? TBX_OK : TBX_ENOENT;
}

static int op_subscription(tbx_tokens_t *tokens, const char *topic,
			   const char *grp, int64_t *since)
{
	if (!topic || !grp)
		return TBX_EINVAL;
	return sub_get(backend(tokens), topic, grp, since);
}

/* used_ms of (topic, grp) = now, inside the caller's transaction;
 * *found = 0 when there is no such subscription. */
static int sub_touch(tbx_tokens_sqlite_t *t, const char *topic, const char *grp,
		     int *found)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&t->stmts, Q_SUB_TOUCH, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 3, tbx__now_ms()))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_done(stmt)))
		return err;
	*found = sqlite3_changes(t->db) > 0;
	return TBX_OK;
}

static int op_touch(tbx_tokens_t *tokens, const char *topic, const char *grp,
		    int *found)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	int err;

	*found = 0;
	if (!topic || !grp)
		return TBX_EINVAL;
	if ((err = txn_begin(t)))
		return err;
	err = sub_touch(t, topic, grp, found);
	return txn_end(t, err);
}

static int op_seq_current(tbx_tokens_t *tokens, int64_t *seq)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int hit, err;

	if ((err = tbx__stmt_get(&t->stmts, Q_SEQ_GET, &stmt)))
		return err;
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	*seq = hit ? sqlite3_column_int64(stmt, 0) : 0;
	sqlite3_reset(stmt);
	return hit ? TBX_OK : TBX_ESTORE;
}

static int op_seq_issued(tbx_tokens_t *tokens, int64_t seq, int *issued)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int64_t lo, hi;
	int hit, err;

	*issued = 0;
	if (seq >= t->issued_lo && seq <= t->issued_hi) {
		*issued = 1;
		return TBX_OK;
	}
	if ((err = tbx__stmt_get(&t->stmts, Q_SEQ_ISSUED, &stmt)))
		return err;
	if (sqlite3_bind_int64(stmt, 1, seq))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	if (hit) {
		lo = sqlite3_column_int64(stmt, 0);
		/* The open range holds what was issued up to now. */
		hi = sqlite3_column_type(stmt, 1) == SQLITE_NULL
			 ? sqlite3_column_int64(stmt, 2)
			 : sqlite3_column_int64(stmt, 1);
		if (seq <= hi) {
			*issued = 1;
			t->issued_lo = lo;
			t->issued_hi = hi;
		}
	}
	sqlite3_reset(stmt);
	return TBX_OK;
}

static int op_store_id(tbx_tokens_t *tokens, char out[TBX_UUID_LEN + 1])
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	const char *id;
	int hit, err;

	out[0] = '\0';
	if ((err = tbx__stmt_get(&t->stmts, Q_STORE_ID, &stmt)))
		return err;
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	id = hit ? (const char *)sqlite3_column_text(stmt, 0) : NULL;
	if (!id || !tbx__is_uuid(id, strlen(id))) {
		tbx__log(TBX_LOG_ERR, "token store: no valid store id in "
				      "tbx_store_info");
		err = TBX_ESTORE;
	} else {
		tbx__strlcpy(out, id, TBX_UUID_LEN + 1);
	}
	sqlite3_reset(stmt);
	return err;
}

static int op_subscribe(tbx_tokens_t *tokens, const char *topic,
			const char *grp, int64_t *since)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int64_t seq = 0;
	int err, found;

	if (!topic || !grp)
		return TBX_EINVAL;
	/* Senders mint per topic name: a pattern or a name Kafka refuses
	 * would be a subscription no record ever matches. */
	if (!tbx__topic_valid(topic)) {
		tbx__log(TBX_LOG_ERR,
			 "token store: '%s' is not a Kafka topic name; not "
			 "subscribed",
			 topic);
		return TBX_EINVAL;
	}
	if ((err = txn_begin(t)))
		return err;
	/* Under the write lock: a subscription is taken once, and its
	 * number never moves (moving it would change which tokens the
	 * group expects). */
	err = sub_get(t, topic, grp, &seq);
	if (err == TBX_ENOENT && !(err = seq_next(t, &seq))) {
		if (!(err = tbx__stmt_get(&t->stmts, Q_SUB_ADD, &stmt))) {
			if (sqlite3_bind_text(stmt, 1, topic, -1,
					      SQLITE_STATIC) ||
			    sqlite3_bind_text(stmt, 2, grp, -1,
					      SQLITE_STATIC) ||
			    sqlite3_bind_int64(stmt, 3, seq) ||
			    sqlite3_bind_int64(stmt, 4, tbx__now_ms()))
				err = tbx__stmt_bind_fail(stmt);
			else
				err = tbx__stmt_done(stmt);
		}
	} else if (!err) {
		err = sub_touch(t, topic, grp, &found);
	}
	if ((err = txn_end(t, err)))
		return err;
	*since = seq;
	return TBX_OK;
}

static int mint_check(const char *send_grp, const tbx__mint_req_t *reqs,
		      size_t req_cnt)
{
	if (req_cnt && !reqs)
		return 0;
	for (size_t i = 0; i < req_cnt; i++) {
		const tbx__mint_req_t *req = &reqs[i];

		if (req->item_cnt && !req->items)
			return 0;
		/* A registration names its sender and its outbox row. */
		if (req->attempt && (!send_grp || !req->msg_id))
			return 0;
		for (size_t j = 0; j < req->item_cnt; j++)
			if (!req->items[j].token || !req->items[j].topic)
				return 0;
	}
	return 1;
}

static int reg_add(tbx_tokens_sqlite_t *t, const char *send_grp,
		   const tbx__mint_req_t *req, const char *token, int64_t now)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&t->stmts, Q_REG_ADD, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, req->attempt, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 2, token, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 3, send_grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 4, req->msg_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 5, now))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

static int tokens_add(tbx_tokens_sqlite_t *t, const tbx__mint_item_t *item,
		      int64_t seq, int64_t now, uint64_t *rows)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&t->stmts, Q_TOKENS_ADD, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, item->token, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 2, seq) ||
	    sqlite3_bind_int64(stmt, 3, now) ||
	    sqlite3_bind_text(stmt, 4, item->topic, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_done(stmt)))
		return err;
	*rows += (uint64_t)sqlite3_changes(t->db);
	return TBX_OK;
}

static int op_mint(tbx_tokens_t *tokens, const char *send_grp,
		   const tbx__mint_req_t *reqs, size_t req_cnt, int64_t *seq,
		   uint64_t *rows)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	int64_t num = 0, now = tbx__now_ms();
	uint64_t created = 0;
	int err;

	if (!mint_check(send_grp, reqs, req_cnt))
		return TBX_EINVAL;
	if ((err = txn_begin(t)))
		return err;
	/* One number for the whole call: every message minted here carries
	 * it in tbx-seq, and a subscription taken in another transaction
	 * is wholly before or after it. */
	err = seq_next(t, &num);
	for (size_t i = 0; !err && i < req_cnt; i++) {
		const tbx__mint_req_t *req = &reqs[i];

		for (size_t j = 0; !err && j < req->item_cnt; j++) {
			/* Registered with its tokens, in one transaction:
			 * the sweeper can always find an orphan. */
			if (req->attempt)
				err = reg_add(t, send_grp, req,
					      req->items[j].token, now);
			if (!err)
				err = tokens_add(t, &req->items[j], num, now,
						 &created);
		}
	}
	if ((err = txn_end(t, err)))
		return err;
	if (seq)
		*seq = num;
	if (rows)
		*rows = created;
	return TBX_OK;
}

/* The joined operations run inside the caller's transaction on the
 * service store's connection: never on a connection of our own (the
 * caller's COMMIT would not cover it), never outside a transaction. */
static int joined_check(tbx_tokens_sqlite_t *t)
{
	if (t->owned || sqlite3_get_autocommit(t->db)) {
		tbx__log(TBX_LOG_ERR, "token store: a joined operation %s",
			 t->owned ? "on a connection of its own"
				  : "outside a transaction");
		return TBX_ESTATE;
	}
	return TBX_OK;
}

static int op_seq_joined(tbx_tokens_t *tokens, int64_t *seq)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	int err;

	if (!seq)
		return TBX_EINVAL;
	if ((err = joined_check(t)))
		return err;
	return seq_next(t, seq);
}

static int op_mint_joined(tbx_tokens_t *tokens, const tbx__mint_item_t *items,
			  size_t cnt, int64_t seq, uint64_t *rows)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	tbx__mint_req_t req = {NULL, NULL, items, cnt};
	int64_t now = tbx__now_ms();
	uint64_t created = 0;
	int err;

	if (seq <= 0 || !mint_check(NULL, &req, 1))
		return TBX_EINVAL;
	if ((err = joined_check(t)))
		return err;
	for (size_t i = 0; !err && i < cnt; i++)
		err = tokens_add(t, &items[i], seq, now, &created);
	if (!err && rows)
		*rows += created;
	return err;
}

static int reg_delete(tbx_tokens_sqlite_t *t, const char *attempt)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&t->stmts, Q_REG_DELETE, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, attempt, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

static int op_confirm(tbx_tokens_t *tokens, const char *const *attempts,
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
	if ((err = txn_begin(t)))
		return err;
	for (size_t i = 0; !err && i < cnt; i++)
		err = reg_delete(t, attempts[i]);
	return txn_end(t, err);
}

/* D's deletes, inside the caller's transaction. */
static int consume_in(tbx_tokens_sqlite_t *t, const char *grp,
		      const char *const *token_ids, size_t cnt, uint64_t *n)
{
	int err = TBX_OK;

	for (size_t i = 0; !err && i < cnt; i++) {
		sqlite3_stmt *stmt;

		if ((err = tbx__stmt_get(&t->stmts, Q_TOKEN_DELETE, &stmt)))
			break;
		if (sqlite3_bind_text(stmt, 1, token_ids[i], -1,
				      SQLITE_STATIC) ||
		    sqlite3_bind_text(stmt, 2, grp, -1, SQLITE_STATIC))
			err = tbx__stmt_bind_fail(stmt);
		else if (!(err = tbx__stmt_done(stmt)))
			*n += (uint64_t)sqlite3_changes(t->db);
	}
	return err;
}

static int consume_check(const char *grp, const char *const *token_ids,
			 size_t cnt)
{
	if (!grp || !token_ids)
		return 0;
	for (size_t i = 0; i < cnt; i++)
		if (!token_ids[i])
			return 0;
	return 1;
}

/* D's deletes: in a transaction of their own, or @p joined inside the
 * caller's. */
static int consume(tbx_tokens_t *tokens, const char *grp,
		   const char *const *token_ids, size_t cnt, uint64_t *deleted,
		   int joined)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	uint64_t n = 0;
	int err;

	if (deleted)
		*deleted = 0;
	if (cnt == 0)
		return TBX_OK;
	if (!consume_check(grp, token_ids, cnt))
		return TBX_EINVAL;
	if (joined) {
		if ((err = joined_check(t)) ||
		    (err = consume_in(t, grp, token_ids, cnt, &n)))
			return err;
	} else {
		if ((err = txn_begin(t)))
			return err;
		err = consume_in(t, grp, token_ids, cnt, &n);
		if ((err = txn_end(t, err)))
			return err;
	}
	if (deleted)
		*deleted = n;
	return TBX_OK;
}

static int op_consume(tbx_tokens_t *tokens, const char *grp,
		      const char *const *token_ids, size_t cnt,
		      uint64_t *deleted)
{
	return consume(tokens, grp, token_ids, cnt, deleted, 0);
}

static int op_consume_joined(tbx_tokens_t *tokens, const char *grp,
			     const char *const *token_ids, size_t cnt,
			     uint64_t *deleted)
{
	return consume(tokens, grp, token_ids, cnt, deleted, 1);
}

/* @returns 1/0 in *exists, inside the caller's transaction. */
static int reg_exists(tbx_tokens_sqlite_t *t, const char *attempt, int *exists)
{
	sqlite3_stmt *stmt;
	int hit, err;

	if ((err = tbx__stmt_get(&t->stmts, Q_REG_EXISTS, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, attempt, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	*exists = hit;
	sqlite3_reset(stmt);
	return TBX_OK;
}

static int op_drop_attempt(tbx_tokens_t *tokens, const char *attempt,
			   int *dropped, uint64_t *deleted)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	uint64_t n = 0;
	int exists = 0, err;

	*dropped = 0;
	if (deleted)
		*deleted = 0;
	if (!attempt)
		return TBX_EINVAL;
	if ((err = txn_begin(t)))
		return err;
	/*
	 * The registration is the licence to delete, checked under the
	 * write lock: once the winner's confirm (C) has removed it, its
	 * tokens are in flight and must stay, whatever the caller read in
	 * S before.
	 */
	err = reg_exists(t, attempt, &exists);
	if (!err && exists) {
		if (!(err = tbx__stmt_get(&t->stmts, Q_REG_TOKENS_DELETE,
					  &stmt))) {
			if (sqlite3_bind_text(stmt, 1, attempt, -1,
					      SQLITE_STATIC))
				err = tbx__stmt_bind_fail(stmt);
			else if (!(err = tbx__stmt_done(stmt)))
				n = (uint64_t)sqlite3_changes(t->db);
		}
		if (!err)
			err = reg_delete(t, attempt);
	}
	if ((err = txn_end(t, err)))
		return err;
	*dropped = exists;
	if (deleted)
		*deleted = n;
	return TBX_OK;
}

int tbx__tq_regs_read(sqlite3_stmt *stmt, const char *send_grp,
		      const tbx__reg_t *after, size_t limit, tbx__reg_t **out,
		      size_t *cnt)
{
	tbx__reg_t *regs = NULL;
	size_t n = 0, cap = 0;
	int hit, err;

	/* (created_ms, attempt) > (INT64_MIN, '') holds for every row. */
	if (sqlite3_bind_text(stmt, 1, send_grp, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(
		stmt, 2, limit > INT64_MAX ? INT64_MAX : (int64_t)limit) ||
	    sqlite3_bind_int64(stmt, 3,
			       after ? after->created_ms : INT64_MIN) ||
	    sqlite3_bind_text(stmt, 4, after ? after->attempt : "", -1,
			      SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	/* One statement, one snapshot; copied out, then reset: no statement
	 * stays active between calls. */
	while (!(err = tbx__stmt_step(stmt, &hit)) && hit) {
		const char *attempt =
		    (const char *)sqlite3_column_text(stmt, 0);
		const char *id = (const char *)sqlite3_column_text(stmt, 1);

		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			tbx__reg_t *grown;

			if (ncap > limit)
				ncap = limit;
			if (!(grown = realloc(regs, ncap * sizeof(*grown)))) {
				err = TBX_ENOMEM;
				break;
			}
			regs = grown;
			cap = ncap;
		}
		if (!attempt || !id ||
		    tbx__strlcpy(regs[n].attempt, attempt,
				 sizeof(regs[n].attempt)) < 0 ||
		    tbx__strlcpy(regs[n].msg_id, id, sizeof(regs[n].msg_id)) <
			0) {
			tbx__log(TBX_LOG_ERR, "token store: registration with "
					      "a malformed attempt or id");
			err = TBX_ESTORE;
			break;
		}
		regs[n].created_ms = sqlite3_column_int64(stmt, 2);
		n++;
	}
	sqlite3_reset(stmt);
	if (err || n == 0) {
		free(regs);
		return err;
	}
	*out = regs;
	*cnt = n;
	return TBX_OK;
}

static int op_registrations(tbx_tokens_t *tokens, const char *send_grp,
			    const tbx__reg_t *after, size_t limit,
			    tbx__reg_t **out, size_t *cnt)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int err;

	*out = NULL;
	*cnt = 0;
	if (!send_grp)
		return TBX_EINVAL;
	if (limit == 0)
		return TBX_OK;
	if ((err = tbx__stmt_get(&t->stmts, Q_REG_LIST, &stmt)))
		return err;
	return tbx__tq_regs_read(stmt, send_grp, after, limit, out, cnt);
}

static int count_one(tbx_tokens_sqlite_t *t, int q, const char *grp, int64_t *n)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&t->stmts, q, &stmt)))
		return err;
	if (grp && sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_int64(stmt, n);
}

static int op_count(tbx_tokens_t *tokens, const char *grp, int64_t *token_rows,
		    int64_t *registrations)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	int err;

	if (token_rows &&
	    (err = count_one(t, grp ? Q_COUNT_TOKENS_GRP : Q_COUNT_TOKENS_ALL,
			     grp, token_rows)))
		return err;
	if (registrations &&
	    (err = count_one(t, grp ? Q_COUNT_REGS_GRP : Q_COUNT_REGS_ALL, grp,
			     registrations)))
		return err;
	return TBX_OK;
}

/* Binds (topic, caller_id) of @p item as ?1 and ?2. */
static int edge_bind_key(sqlite3_stmt *stmt, const tbx__edge_item_t *item)
{
	return sqlite3_bind_text(stmt, 1, item->topic, -1, SQLITE_STATIC) ||
	       sqlite3_bind_text(stmt, 2, item->caller_id, -1, SQLITE_STATIC);
}

/* Decides one item with a caller id, inside the mint transaction.
 * *found = 0 when the id was not seen within the window (since @p from). */
static int edge_lookup(tbx_tokens_sqlite_t *t, tbx__edge_item_t *item,
		       int64_t from, int *found)
{
	sqlite3_stmt *stmt;
	const void *fp;
	const unsigned char *id, *token, *tset;
	int hit, err, in_set;

	*found = 0;
	if ((err = tbx__stmt_get(&t->stmts, Q_EDGE_GET, &stmt)))
		return err;
	if (edge_bind_key(stmt, item) || sqlite3_bind_int64(stmt, 3, from))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_step(stmt, &hit)))
		return err;
	if (!hit) {
		sqlite3_reset(stmt);
		return TBX_OK;
	}
	*found = 1;
	fp = sqlite3_column_blob(stmt, 0);
	if (sqlite3_column_bytes(stmt, 0) != TBX_EDGE_FP_LEN || !fp ||
	    memcmp(fp, item->fp, TBX_EDGE_FP_LEN) != 0) {
		item->verdict = TBX_EDGE_SYNTHETIC;
		sqlite3_reset(stmt);
		if ((err = tbx__stmt_get(&t->stmts, Q_EDGE_REFUSED, &stmt)))
			return err;
		if (edge_bind_key(stmt, item))
			return tbx__stmt_bind_fail(stmt);
		return tbx__stmt_done(stmt);
	}
	id = sqlite3_column_text(stmt, 1);
	token = sqlite3_column_text(stmt, 2);
	tset = sqlite3_column_text(stmt, 5);
	in_set = sqlite3_column_type(stmt, 5) != SQLITE_NULL;
	if (!id || !token || strlen((const char *)id) != TBX_UUID_LEN ||
	    (!in_set && strlen((const char *)token) != TBX_UUID_LEN) ||
	    (in_set && (!tset || strlen((const char *)tset) != TBX_UUID_LEN ||
			sqlite3_column_type(stmt, 6) == SQLITE_NULL ||
			sqlite3_column_type(stmt, 7) == SQLITE_NULL))) {
		tbx__log(TBX_LOG_ERR,
			 "token store: edge entry of caller id "
			 "'%s' is malformed",
			 item->caller_id);
		err = TBX_ECORRUPT;
	} else {
		memcpy(item->msg_id, id, TBX_UUID_LEN + 1);
		/* The original's token, whichever format it went out in. */
		if (in_set) {
			item->token[0] = '\0';
			memcpy(item->set_id, tset, TBX_UUID_LEN + 1);
			item->bit = (uint32_t)sqlite3_column_int64(stmt, 6);
			item->part = sqlite3_column_int(stmt, 7);
		} else {
			memcpy(item->token, token, TBX_UUID_LEN + 1);
			item->set_id[0] = '\0';
			item->part = -1;
		}
		item->seq = sqlite3_column_int64(stmt, 3);
		item->verdict = sqlite3_column_int(stmt, 4) ? TBX_EDGE_DONE
							    : TBX_EDGE_INFLIGHT;
	}
	sqlite3_reset(stmt);
	return err;
}

static int edge_put(tbx_tokens_sqlite_t *t, const tbx__edge_item_t *item,
		    int64_t now)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&t->stmts, Q_EDGE_PUT, &stmt)))
		return err;
	if (edge_bind_key(stmt, item) ||
	    sqlite3_bind_blob(stmt, 3, item->fp, TBX_EDGE_FP_LEN,
			      SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 4, item->msg_id, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 5, item->in_set ? "" : item->token, -1,
			      SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 6, item->seq) ||
	    sqlite3_bind_int64(stmt, 7, now))
		return tbx__stmt_bind_fail(stmt);
	if (item->in_set
		? (sqlite3_bind_text(stmt, 8, item->set_id, -1,
				     SQLITE_STATIC) ||
		   sqlite3_bind_int64(stmt, 9, (int64_t)item->bit) ||
		   sqlite3_bind_int(stmt, 10, item->part))
		: (sqlite3_bind_null(stmt, 8) || sqlite3_bind_null(stmt, 9) ||
		   sqlite3_bind_null(stmt, 10)))
		return tbx__stmt_bind_fail(stmt);
	return tbx__stmt_done(stmt);
}

/* tokens_add() for one group only. */
static int tokens_add_grp(tbx_tokens_sqlite_t *t, const tbx__mint_item_t *item,
			  const char *grp, int64_t seq, int64_t now,
			  uint64_t *rows)
{
	sqlite3_stmt *stmt;
	int err;

	if ((err = tbx__stmt_get(&t->stmts, Q_TOKENS_ADD_GRP, &stmt)))
		return err;
	if (sqlite3_bind_text(stmt, 1, item->token, -1, SQLITE_STATIC) ||
	    sqlite3_bind_int64(stmt, 2, seq) ||
	    sqlite3_bind_int64(stmt, 3, now) ||
	    sqlite3_bind_text(stmt, 4, item->topic, -1, SQLITE_STATIC) ||
	    sqlite3_bind_text(stmt, 5, grp, -1, SQLITE_STATIC))
		return tbx__stmt_bind_fail(stmt);
	if ((err = tbx__stmt_done(stmt)))
		return err;
	*rows += (uint64_t)sqlite3_changes(t->db);
	return TBX_OK;
}

static int op_publish_mint(tbx_tokens_t *tokens, tbx__edge_item_t *items,
			   size_t cnt, int64_t window_ms, size_t sweep_max,
			   uint64_t *rows)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	int64_t num = 0, now = tbx__now_ms(), from = now - window_ms;
	uint64_t created = 0;
	sqlite3_stmt *stmt;
	tbx__pub_sets_t ps = {0};
	int err, found, any_set = 0;

	if ((cnt && !items) || window_ms < 0)
		return TBX_EINVAL;
	for (size_t i = 0; i < cnt; i++) {
		if (!items[i].topic || (items[i].caller_id && !items[i].fp) ||
		    (items[i].in_set && (items[i].grp || items[i].part < 0)))
			return TBX_EINVAL;
		any_set |= items[i].in_set;
	}
	if (any_set) {
		int yes = 0;

		if ((err = tbx__tq_has(tokens, TBX_TOKENS_HAS_EDGE_SETS, &yes)))
			return err;
		if (!yes)
			return TBX_ESCHEMA;
	}
	if ((err = txn_begin(t)))
		return err;
	if (!(err = tbx__stmt_get(&t->stmts, Q_EDGE_SWEEP, &stmt))) {
		if (sqlite3_bind_int64(stmt, 1, from) ||
		    sqlite3_bind_int64(stmt, 2, (int64_t)sweep_max))
			err = tbx__stmt_bind_fail(stmt);
		else
			err = tbx__stmt_done(stmt);
	}
	if (!err)
		err = seq_next(t, &num);
	for (size_t i = 0; !err && i < cnt; i++) {
		tbx__edge_item_t *item = &items[i];
		tbx__mint_item_t mi = {item->token, item->topic};

		item->verdict = TBX_EDGE_NEW;
		found = 0;
		if (item->caller_id &&
		    ((err = edge_lookup(t, item, from, &found)) || found))
			continue;
		item->seq = num;
		if (item->in_set) {
			/* Its bit first: the edge entry records it. */
			err = tbx__pub_set_bit(&ps, item);
		} else {
			item->set_id[0] = '\0';
			item->part = -1;
		}
		/* Recorded with its token, in one transaction: a re-send
		 * after a crash finds the id and token that may be out. */
		if (!err && item->caller_id)
			err = edge_put(t, item, now);
		if (err || item->in_set)
			continue;
		if (!item->grp)
			err = tokens_add(t, &mi, num, now, &created);
		else
			err = tokens_add_grp(t, &mi, item->grp, num, now,
					     &created);
	}
	if (!err && ps.cnt)
		err = tbx__tq_sets_add(t, ps.sets, ps.cnt, num, now, &created);
	tbx__pub_sets_free(&ps);
	if ((err = txn_end(t, err)))
		return err;
	if (rows)
		*rows = created;
	return TBX_OK;
}

static int op_edge_delivered(tbx_tokens_t *tokens,
			     const tbx__edge_item_t *items, size_t cnt)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int err, any = 0;

	for (size_t i = 0; i < cnt; i++)
		any |= items[i].caller_id &&
		       (items[i].verdict == TBX_EDGE_NEW ||
			items[i].verdict == TBX_EDGE_INFLIGHT);
	if (!any)
		return TBX_OK;
	if ((err = txn_begin(t)))
		return err;
	for (size_t i = 0; !err && i < cnt; i++) {
		if (!items[i].caller_id ||
		    (items[i].verdict != TBX_EDGE_NEW &&
		     items[i].verdict != TBX_EDGE_INFLIGHT))
			continue;
		if (!(err =
			  tbx__stmt_get(&t->stmts, Q_EDGE_DELIVERED, &stmt))) {
			if (edge_bind_key(stmt, &items[i]) ||
			    sqlite3_bind_text(stmt, 3, items[i].msg_id, -1,
					      SQLITE_STATIC))
				err = tbx__stmt_bind_fail(stmt);
			else
				err = tbx__stmt_done(stmt);
		}
	}
	return txn_end(t, err);
}

static int op_edge_count(tbx_tokens_t *tokens, int64_t *entries,
			 int64_t *refused)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	int err;

	if (entries && (err = count_one(t, Q_EDGE_COUNT, NULL, entries)))
		return err;
	if (refused && (err = count_one(t, Q_EDGE_REFUSED_SUM, NULL, refused)))
		return err;
	return TBX_OK;
}

static int op_subscribers(tbx_tokens_t *tokens, const char *topic, int64_t *cnt)
{
	if (!topic || !cnt)
		return TBX_EINVAL;
	return count_one(backend(tokens), Q_SUB_COUNT, topic, cnt);
}

static int op_seq_ranges(tbx_tokens_t *tokens, int64_t *count)
{
	if (!count)
		return TBX_EINVAL;
	return count_one(backend(tokens), Q_RANGE_COUNT, NULL, count);
}

int tbx__tq_txn_begin(tbx_tokens_sqlite_t *t)
{
	return txn_begin(t);
}

int tbx__tq_txn_end(tbx_tokens_sqlite_t *t, int err)
{
	return txn_end(t, err);
}

int tbx__tq_joined_check(tbx_tokens_sqlite_t *t)
{
	return joined_check(t);
}

int tbx__tq_seq_next(tbx_tokens_sqlite_t *t, int64_t *seq)
{
	return seq_next(t, seq);
}

static void op_close(tbx_tokens_t *tokens)
{
	tbx_tokens_sqlite_t *t = backend(tokens);

	if (!t)
		return;
	tbx__stmts_finalize(&t->stmts);
	tbx__stmts_finalize(&t->reads);
	tbx__stmts_finalize(&t->sets);
	if (t->owned)
		sqlite3_close_v2(t->db);
	free(t);
}

static const tbx_tokens_ops_t sqlite_ops = {
    .name = "sqlite",
    .exists = op_exists,
    .exists_many = op_exists_many,
    .subscribe = op_subscribe,
    .subscription = op_subscription,
    .mint = op_mint,
    .seq_joined = op_seq_joined,
    .mint_joined = op_mint_joined,
    .consume_joined = op_consume_joined,
    .confirm = op_confirm,
    .consume = op_consume,
    .drop_attempt = op_drop_attempt,
    .registrations = op_registrations,
    .store_id = op_store_id,
    .seq_current = op_seq_current,
    .seq_issued = op_seq_issued,
    .seq_ranges = op_seq_ranges,
    .touch = op_touch,
    .count = op_count,
    .publish_mint = op_publish_mint,
    .edge_delivered = op_edge_delivered,
    .edge_count = op_edge_count,
    .subscribers = op_subscribers,
    .read_begin = tbx__tq_read_begin,
    .read_end = tbx__tq_read_end,
    .schema = tbx__tq_schema,
    .has = tbx__tq_has,
    .errmsg = tbx__tq_errmsg,
    .tokens_summary = tbx__tq_tokens_summary,
    .registrations_summary = tbx__tq_registrations_summary,
    .subscriptions_list = tbx__tq_subscriptions_list,
    .sender_groups = tbx__tq_sender_groups,
    .attempts = tbx__tq_attempts,
    .attempt_token_rows = tbx__tq_attempt_token_rows,
    .tokens_list = tbx__tq_tokens_list,
    .token_rows = tbx__tq_token_rows,
    .token_registrations = tbx__tq_token_registrations,
    .token_match = tbx__tq_token_match,
    .unsubscribe = tbx__tq_unsubscribe,
    .sets_mint = tbx__tq_sets_mint,
    .sets_mint_joined = tbx__tq_sets_mint_joined,
    .sets_test = tbx__tq_sets_test,
    .sets_consume = tbx__tq_sets_consume,
    .sets_consume_joined = tbx__tq_sets_consume_joined,
    .sets_confirm = tbx__tq_sets_confirm,
    .sets_drop_attempt = tbx__tq_sets_drop_attempt,
    .sets_registrations = tbx__tq_sets_registrations,
    .sets_count = tbx__tq_sets_count,
    .sets_attempt_rows = tbx__tq_sets_attempt_rows,
    .sets_summary = tbx__tq_sets_summary,
    .sets_list = tbx__tq_sets_list,
    .close = op_close,
};

int tbx_tokens_joinable(tbx_tokens_t *t)
{
	/* A backend on a shared connection can join. */
	return t && ((t->ops == &sqlite_ops && !backend(t)->owned) ||
		     tbx__tokens_pg_joinable(t));
}

int tbx_tokens_sqlite_open(const char *path, const tbx__db_opts_t *opts,
			   sqlite3 *shared, tbx_tokens_t **out, char *errstr,
			   size_t errstr_size)
{
	tbx_tokens_sqlite_t *t;
	int err;

	if (!out)
		return tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				   "no place for the token store");
	*out = NULL;
	if (!(t = calloc(1, sizeof(*t))))
		return tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				   "out of memory");
	t->base.ops = &sqlite_ops;
	t->issued_lo = 1; /* none yet */
	if (shared) {
		/* Opened (and migrated) by the service store: the file
		 * carries the token tables too. */
		t->db = shared;
		t->owned = 0;
	} else {
		if ((err = tbx__db_open(path, opts, &t->db, errstr,
					errstr_size))) {
			free(t);
			return err;
		}
		t->owned = 1;
	}
	tbx__stmts_init(&t->stmts, t->db, sql, t->slots, Q__COUNT);
	tbx__tokens_sqlite_read_init(t);
	tbx__tokens_sqlite_sets_init(t);
	/* A read-write opening may take numbers: its own range first, in
	 * a transaction of its own (on a shared connection too, before the
	 * service store's first transaction). */
	if (!(opts && opts->readonly)) {
		if (!(err = txn_begin(t)))
			err = txn_end(t, range_start(t));
		if (err) {
			tbx__seterr(errstr, errstr_size, err,
				    "%s: cannot start a range of the token "
				    "store's sequence: %s",
				    path ? path : "token store",
				    sqlite3_errmsg(t->db));
			op_close(&t->base);
			return err;
		}
	}
	*out = &t->base;
	return TBX_OK;
}
