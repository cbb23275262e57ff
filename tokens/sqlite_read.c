/*
 * The SQLite backend of the token store: the read side and the repairs of
 * `tokenbox inspect` (tokens/tokens.h, "the read side").  Statements are
 * prepared once per store in the shared cache (store/stmt.h), every
 * value is bound, and each is reset as soon as its listing ends
 * (store/db_read.h).
 *
 * @locality one thread at a time per store.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/str.h"
#include "store/db_read.h"
#include "tokens/sqlite_int.h"

#define GRP_IN(col)                                                            \
	"(?1 IS NULL OR " col " IN (SELECT value FROM json_each(?1)))"

enum {
	R_BEGIN,
	R_END,
	R_WRITE,
	R_COMMIT,
	R_ROLLBACK,
	R_SCHEMA,
	R_TOKENS_SUMMARY,
	R_REGS_SUMMARY,
	R_SUBS,
	R_SENDERS,
	R_ATTEMPTS,
	R_ATTEMPT_ROWS,
	R_TOKENS_LIST,
	R_TOKENS_COUNT,
	R_TOKEN_ROWS,
	R_TOKEN_REGS,
	R_TOKEN_EXACT,
	R_TOKEN_PREFIX,
	R_UNSUB_USED,
	R_UNSUB_OTHERS,
	R_UNSUB_ROWS,
	R_UNSUB_DELETE,
	R_UNSUB_TOKENS,
	R_SENDERS_SETS,
	R__COUNT
};

_Static_assert(R__COUNT <= TQ_READ_STMTS, "read_slots[] too small");

static const char *const rsql[R__COUNT] = {
    /* Deferred: a read transaction, the snapshot of the first read. */
    [R_BEGIN] = "BEGIN",
    [R_END] = "COMMIT",
    [R_WRITE] = "BEGIN IMMEDIATE",
    [R_COMMIT] = "COMMIT",
    [R_ROLLBACK] = "ROLLBACK",
    [R_SCHEMA] = "PRAGMA user_version",
    [R_TOKENS_SUMMARY] = "SELECT grp, count(*), min(created_ms) FROM "
			 "tbx_tokens GROUP BY grp ORDER BY grp",
    [R_REGS_SUMMARY] = "SELECT send_grp, count(DISTINCT attempt), count(*), "
		       "min(created_ms) FROM tbx_registrations GROUP BY "
		       "send_grp ORDER BY send_grp",
    [R_SUBS] = "SELECT topic, grp, since_seq, created_ms, coalesce(used_ms, "
	       "created_ms) FROM tbx_subscriptions ORDER BY topic, grp",
    [R_SENDERS] = "SELECT DISTINCT send_grp FROM tbx_registrations ORDER BY "
		  "1",
    /* One line per attempt, as the sweeper lists them (sqlite.c
     * Q_REG_LIST): every registration of an attempt names one row. */
    [R_ATTEMPTS] = "SELECT attempt, min(msg_id), min(created_ms) AS c, "
		   "count(*) FROM tbx_registrations WHERE send_grp = ?1 GROUP "
		   "BY attempt ORDER BY c, attempt",
    [R_ATTEMPT_ROWS] = "SELECT count(*) FROM tbx_tokens WHERE token IN "
		       "(SELECT token FROM tbx_registrations WHERE attempt = "
		       "?1)",
    [R_TOKENS_LIST] = "SELECT token, grp, mint_seq, created_ms FROM "
		      "tbx_tokens WHERE " GRP_IN(
			  "grp") " AND created_ms <= ?2 ORDER BY created_ms, "
				 "token, grp LIMIT ?3",
    [R_TOKENS_COUNT] = "SELECT count(*) FROM tbx_tokens WHERE " GRP_IN(
	"grp") " AND created_ms <= ?2",
    [R_TOKEN_ROWS] = "SELECT grp, mint_seq, created_ms FROM tbx_tokens WHERE "
		     "token = ?1 ORDER BY grp",
    [R_TOKEN_REGS] = "SELECT attempt, send_grp, msg_id, created_ms FROM "
		     "tbx_registrations WHERE token = ?1 ORDER BY attempt",
    [R_TOKEN_EXACT] = "SELECT 1 FROM tbx_tokens WHERE token = ?1 UNION ALL "
		      "SELECT 1 FROM tbx_registrations WHERE token = ?1 LIMIT "
		      "1",
    [R_TOKEN_PREFIX] = "SELECT token FROM tbx_tokens WHERE substr(token, 1, "
		       "length(?1)) = ?1 UNION SELECT token FROM "
		       "tbx_registrations WHERE substr(token, 1, length(?1)) = "
		       "?1 LIMIT 2",
    [R_UNSUB_USED] = "SELECT coalesce(used_ms, created_ms) FROM "
		     "tbx_subscriptions WHERE grp = ?1 AND topic = ?2",
    [R_UNSUB_OTHERS] = "SELECT count(*) FROM tbx_subscriptions WHERE grp = "
		       "?1 AND topic <> ?2",
    [R_UNSUB_ROWS] = "SELECT count(*) FROM tbx_tokens WHERE grp = ?1",
    [R_UNSUB_DELETE] = "DELETE FROM tbx_subscriptions WHERE grp = ?1 AND "
		       "topic = ?2",
    [R_UNSUB_TOKENS] = "DELETE FROM tbx_tokens WHERE grp = ?1",
    /* The senders of a store with token sets (schema 11). */
    [R_SENDERS_SETS] = "SELECT send_grp FROM tbx_registrations UNION SELECT "
		       "send_grp FROM tbx_breg ORDER BY 1",
};

static tbx_tokens_sqlite_t *backend(tbx_tokens_t *tokens)
{
	return (tbx_tokens_sqlite_t *)tokens;
}

void tbx__tokens_sqlite_read_init(tbx_tokens_sqlite_t *t)
{
	tbx__stmts_init(&t->reads, t->db, rsql, t->read_slots, R__COUNT);
}

/* Prepares @p q; on failure returns the mapped error. */
#define PREPARE(stmt, t, q)                                                    \
	do {                                                                   \
		int err_ = tbx__stmt_get(&(t)->reads, (q), &(stmt));           \
		if (err_)                                                      \
			return err_;                                           \
	} while (0)

/* Runs a statement of one or no row with up to two text parameters. */
static int run(tbx_tokens_sqlite_t *t, int q, const char *p1, const char *p2,
	       int64_t *out)
{
	sqlite3_stmt *stmt;
	int64_t none;

	PREPARE(stmt, t, q);
	if ((p1 && sqlite3_bind_text(stmt, 1, p1, -1, SQLITE_STATIC)) ||
	    (p2 && sqlite3_bind_text(stmt, 2, p2, -1, SQLITE_STATIC))) {
		return tbx__stmt_bind_fail(stmt);
	}
	return tbx__db_one_int(stmt, out ? out : &none);
}

int tbx__tq_read_begin(tbx_tokens_t *tokens)
{
	tbx_tokens_sqlite_t *t = backend(tokens);

	/* Shared: the service store's read transaction covers it. */
	return t->owned ? run(t, R_BEGIN, NULL, NULL, NULL) : TBX_OK;
}

void tbx__tq_read_end(tbx_tokens_t *tokens)
{
	tbx_tokens_sqlite_t *t = backend(tokens);

	if (t->owned && !sqlite3_get_autocommit(t->db))
		run(t, R_END, NULL, NULL, NULL);
}

int tbx__tq_schema(tbx_tokens_t *tokens, int *version)
{
	int64_t v = 0;
	int err = run(backend(tokens), R_SCHEMA, NULL, NULL, &v);

	*version = (int)v;
	return err;
}

int tbx__tq_has(tbx_tokens_t *tokens, int what, int *yes)
{
	int version = 0, err = tbx__tq_schema(tokens, &version);

	*yes = 0;
	if (err)
		return err;
	switch (what) {
	case TBX_TOKENS_HAS_EDGE:
		*yes = version >= 4;
		break;
	case TBX_TOKENS_HAS_STORE_ID:
		*yes = version >= 6;
		break;
	case TBX_TOKENS_HAS_SEQ_RANGES:
		*yes = version >= 10;
		break;
	case TBX_TOKENS_HAS_SETS:
		*yes = version >= 11;
		break;
	case TBX_TOKENS_HAS_EDGE_SETS:
		*yes = version >= 14;
		break;
	default:
		return TBX_EINVAL;
	}
	return TBX_OK;
}

const char *tbx__tq_errmsg(tbx_tokens_t *tokens)
{
	sqlite3 *db = backend(tokens)->db;
	int rc = sqlite3_errcode(db);

	if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE)
		return NULL;
	return sqlite3_errmsg(db);
}

/* A listing of @p q with text parameter ?1 = @p p1 (NULL: none). */
static int list(tbx_tokens_sqlite_t *t, int q, const char *p1,
		tbx__db_row_fn row, tbx__any_fn fn, void *opaque)
{
	sqlite3_stmt *stmt;

	PREPARE(stmt, t, q);
	if (p1 && sqlite3_bind_text(stmt, 1, p1, -1, SQLITE_STATIC)) {
		return tbx__stmt_bind_fail(stmt);
	}
	return tbx__db_each(stmt, row, fn, opaque);
}

int tbx__tq_tokens_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
			   void *opaque)
{
	return list(backend(tokens), R_TOKENS_SUMMARY, NULL, tbx__db_sum_row,
		    (tbx__any_fn)fn, opaque);
}

int tbx__tq_registrations_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
				  void *opaque)
{
	return list(backend(tokens), R_REGS_SUMMARY, NULL, tbx__db_sum_row,
		    (tbx__any_fn)fn, opaque);
}

static int sub_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__sub_t s;

	s.topic = tbx__db_text(stmt, 0);
	s.grp = tbx__db_text(stmt, 1);
	s.since_seq = sqlite3_column_int64(stmt, 2);
	s.created_ms = sqlite3_column_int64(stmt, 3);
	s.used_ms = sqlite3_column_int64(stmt, 4);
	return ((tbx__sub_fn)fn)(opaque, &s);
}

int tbx__tq_subscriptions_list(tbx_tokens_t *tokens, tbx__sub_fn fn,
			       void *opaque)
{
	return list(backend(tokens), R_SUBS, NULL, sub_row, (tbx__any_fn)fn,
		    opaque);
}

int tbx__tq_sender_groups(tbx_tokens_t *tokens, tbx__str_fn fn, void *opaque)
{
	int sets = 0, err = tbx__tq_has(tokens, TBX_TOKENS_HAS_SETS, &sets);

	if (err)
		return err;
	return list(backend(tokens), sets ? R_SENDERS_SETS : R_SENDERS, NULL,
		    tbx__db_str_row, (tbx__any_fn)fn, opaque);
}

static int attempt_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__reg_t reg;

	memset(&reg, 0, sizeof(reg));
	tbx__strlcpy(reg.attempt, tbx__db_text(stmt, 0), sizeof(reg.attempt));
	tbx__strlcpy(reg.msg_id, tbx__db_text(stmt, 1), sizeof(reg.msg_id));
	reg.created_ms = sqlite3_column_int64(stmt, 2);
	return ((tbx__attempt_fn)fn)(opaque, &reg,
				     sqlite3_column_int64(stmt, 3));
}

int tbx__tq_attempts(tbx_tokens_t *tokens, const char *send_grp,
		     tbx__attempt_fn fn, void *opaque)
{
	return list(backend(tokens), R_ATTEMPTS, send_grp, attempt_row,
		    (tbx__any_fn)fn, opaque);
}

int tbx__tq_attempt_token_rows(tbx_tokens_t *tokens, const char *attempt,
			       int64_t *n)
{
	return run(backend(tokens), R_ATTEMPT_ROWS, attempt, NULL, n);
}

static int token_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__token_rec_t r;

	r.token = tbx__db_text(stmt, 0);
	r.grp = tbx__db_text(stmt, 1);
	r.mint_seq = sqlite3_column_int64(stmt, 2);
	r.created_ms = sqlite3_column_int64(stmt, 3);
	return ((tbx__token_fn)fn)(opaque, &r);
}

int tbx__tq_tokens_list(tbx_tokens_t *tokens, const tbx__filter_t *f,
			int64_t *total, tbx__token_fn fn, void *opaque)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	char *json = NULL;
	int err = TBX_OK;

	if (total) {
		PREPARE(stmt, t, R_TOKENS_COUNT);
		if (!(err = tbx__db_bind_filter(stmt, f, 1, 2, 0, &json)))
			err = tbx__db_one_int(stmt, total);
		else
			sqlite3_reset(stmt);
		free(json);
		json = NULL;
		if (err)
			return err;
	}
	PREPARE(stmt, t, R_TOKENS_LIST);
	if (!(err = tbx__db_bind_filter(stmt, f, 1, 2, 3, &json)))
		err = tbx__db_each(stmt, token_row, (tbx__any_fn)fn, opaque);
	else
		sqlite3_reset(stmt);
	free(json);
	return err;
}

/* A row of R_TOKEN_ROWS, for the token in @p opaque's first field. */
typedef struct of_token {
	const char *token;
	tbx__token_fn fn;
	void *opaque;
} of_token_t;

static int token_of_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	const of_token_t *o = opaque;
	tbx__token_rec_t r;

	(void)fn;
	r.token = o->token;
	r.grp = tbx__db_text(stmt, 0);
	r.mint_seq = sqlite3_column_int64(stmt, 1);
	r.created_ms = sqlite3_column_int64(stmt, 2);
	return o->fn(o->opaque, &r);
}

int tbx__tq_token_rows(tbx_tokens_t *tokens, const char *token,
		       tbx__token_fn fn, void *opaque)
{
	of_token_t o = {token, fn, opaque};

	return list(backend(tokens), R_TOKEN_ROWS, token, token_of_row, NULL,
		    &o);
}

static int token_reg_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__reg_t reg;

	memset(&reg, 0, sizeof(reg));
	tbx__strlcpy(reg.attempt, tbx__db_text(stmt, 0), sizeof(reg.attempt));
	tbx__strlcpy(reg.msg_id, tbx__db_text(stmt, 2), sizeof(reg.msg_id));
	reg.created_ms = sqlite3_column_int64(stmt, 3);
	return ((tbx__token_reg_fn)fn)(opaque, &reg, tbx__db_text(stmt, 1));
}

int tbx__tq_token_registrations(tbx_tokens_t *tokens, const char *token,
				tbx__token_reg_fn fn, void *opaque)
{
	return list(backend(tokens), R_TOKEN_REGS, token, token_reg_row,
		    (tbx__any_fn)fn, opaque);
}

int tbx__tq_token_match(tbx_tokens_t *tokens, const char *id,
			char out[TBX_UUID_LEN + 1], int *matches)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *exact, *prefix;

	PREPARE(exact, t, R_TOKEN_EXACT);
	PREPARE(prefix, t, R_TOKEN_PREFIX);
	return tbx__db_match(exact, prefix, id, out, TBX_UUID_LEN + 1, matches);
}

int tbx__tq_unsubscribe(tbx_tokens_t *tokens, const char *topic,
			const char *grp, int64_t used_before_ms, int remove,
			tbx__unsub_t *res)
{
	tbx_tokens_sqlite_t *t = backend(tokens);
	sqlite3_stmt *stmt;
	int err, r, sets = 0;

	memset(res, 0, sizeof(*res));
	if (!sqlite3_get_autocommit(t->db))
		return TBX_ESTATE;
	if ((err = run(t, R_WRITE, NULL, NULL, NULL)))
		return err;
	if ((err = tbx__stmt_get(&t->reads, R_UNSUB_USED, &stmt)))
		goto out;
	sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 2, topic, -1, SQLITE_STATIC);
	if (!(err = tbx__stmt_step(stmt, &r)) && r) {
		res->found = 1;
		res->used_ms = sqlite3_column_int64(stmt, 0);
	}
	sqlite3_reset(stmt);
	sqlite3_clear_bindings(stmt);
	if (err)
		goto out;
	if ((err = run(t, R_UNSUB_OTHERS, grp, topic, &res->others)) ||
	    (err = run(t, R_UNSUB_ROWS, grp, NULL, &res->token_rows)) ||
	    (err = tbx__tq_has(tokens, TBX_TOKENS_HAS_SETS, &sets)))
		goto out;
	/* The sets record their topic: the group's rows of this one. */
	if (sets && (err = tbx__tq_sets_unsub(t, grp, topic, 0, &res->set_rows,
					      &res->set_deleted)))
		goto out;
	if (!remove || !res->found || res->used_ms > used_before_ms)
		goto out;
	if ((err = run(t, R_UNSUB_DELETE, grp, topic, NULL)))
		goto out;
	if (sets && (err = tbx__tq_sets_unsub(t, grp, topic, 1, &res->set_rows,
					      &res->set_deleted)))
		goto out;
	if (!res->others) {
		if ((err = run(t, R_UNSUB_TOKENS, grp, NULL, NULL)))
			goto out;
		res->deleted = sqlite3_changes(t->db);
	}
	if ((err = run(t, R_COMMIT, NULL, NULL, NULL)))
		goto out;
	res->removed = 1;
out:
	if (!sqlite3_get_autocommit(t->db))
		run(t, R_ROLLBACK, NULL, NULL, NULL);
	return err;
}
