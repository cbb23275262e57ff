/*
 * The PostgreSQL backend of the token store: the read side and the
 * repairs of `tokenbox inspect` (tokens/tokens.h, "the read side"), with
 * the orderings and filters of tokens/sqlite_read.c.  Every value is
 * bound; a listing's rows come back in one result and are handed to the
 * callback one by one.
 *
 * @locality one thread at a time per store.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "store/pg.h"
#include "tokens/pg_int.h"

enum {
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
	R_TOKEN_MATCH,
	R_UNSUB_LOCK,
	R_UNSUB_FIND,
	R_UNSUB_DELETE,
	R_UNSUB_TOKENS,
	R_SENDERS_SETS,
	R__COUNT
};

/* The --group filter: $1 NULL for every group. */
#define GRP_IN(col) "($1::text[] IS NULL OR " col " = ANY($1::text[]))"

static const char *const rsql[R__COUNT] = {
    [R_TOKENS_SUMMARY] = "SELECT grp, count(*), min(created_ms) FROM "
			 "@T.tbx_tokens GROUP BY grp ORDER BY grp",
    [R_REGS_SUMMARY] = "SELECT send_grp, count(DISTINCT attempt), count(*), "
		       "min(created_ms) FROM @T.tbx_registrations GROUP BY "
		       "send_grp ORDER BY send_grp",
    [R_SUBS] = "SELECT topic, grp, since_seq, created_ms, coalesce(used_ms, "
	       "created_ms) FROM @T.tbx_subscriptions ORDER BY topic, grp",
    [R_SENDERS] = "SELECT DISTINCT send_grp FROM @T.tbx_registrations ORDER "
		  "BY 1",
    /* One line per attempt, as the sweeper lists them (pg.c
     * Q_REG_LIST). */
    [R_ATTEMPTS] = "SELECT attempt, min(msg_id), min(created_ms), count(*) "
		   "FROM @T.tbx_registrations WHERE send_grp = $1 GROUP BY "
		   "attempt ORDER BY 3, attempt",
    [R_ATTEMPT_ROWS] = "SELECT count(*) FROM @T.tbx_tokens WHERE token IN "
		       "(SELECT token FROM @T.tbx_registrations WHERE attempt "
		       "= $1)",
    [R_TOKENS_LIST] = "SELECT token, grp, mint_seq, created_ms FROM "
		      "@T.tbx_tokens WHERE " GRP_IN(
			  "grp") " AND created_ms <= $2 ORDER BY created_ms, "
				 "token, grp LIMIT $3::bigint",
    [R_TOKENS_COUNT] = "SELECT count(*) FROM @T.tbx_tokens WHERE " GRP_IN(
	"grp") " AND created_ms <= $2",
    [R_TOKEN_ROWS] = "SELECT grp, mint_seq, created_ms FROM @T.tbx_tokens "
		     "WHERE token = $1 ORDER BY grp",
    [R_TOKEN_REGS] = "SELECT attempt, send_grp, msg_id, created_ms FROM "
		     "@T.tbx_registrations WHERE token = $1 ORDER BY attempt",
    /* The token itself when it has rows or registrations (column 1
     * true), else up to two tokens that start with it. */
    [R_TOKEN_MATCH] =
	"SELECT token, token = $1 FROM (SELECT token FROM @T.tbx_tokens WHERE "
	"left(token, length($1)) = $1 UNION SELECT token FROM "
	"@T.tbx_registrations WHERE left(token, length($1)) = $1) m ORDER BY "
	"2 DESC, 1 LIMIT 2",
    /* A subscription change: the exclusive subscription lock, so that
     * no mint reads the subscription and then writes token rows for the
     * group after they were removed. */
    [R_UNSUB_LOCK] = "SELECT pg_advisory_xact_lock(" TBX_PG_LOCK_SUBS
		     ", hashtext($1::text))",
    [R_UNSUB_FIND] = "SELECT (SELECT coalesce(used_ms, created_ms) FROM "
		     "@T.tbx_subscriptions WHERE grp = $1 AND topic = $2), "
		     "(SELECT count(*) FROM @T.tbx_subscriptions WHERE grp = "
		     "$1 AND topic <> $2), (SELECT count(*) FROM "
		     "@T.tbx_tokens WHERE grp = $1)",
    [R_UNSUB_DELETE] = "DELETE FROM @T.tbx_subscriptions WHERE grp = $1 AND "
		       "topic = $2",
    [R_UNSUB_TOKENS] = "DELETE FROM @T.tbx_tokens WHERE grp = $1",
    /* The senders of a schema with token sets (version 3). */
    [R_SENDERS_SETS] = "SELECT send_grp FROM @T.tbx_registrations UNION "
		       "SELECT send_grp FROM @T.tbx_breg ORDER BY 1",
};

static tbx_tokens_pg_t *backend(tbx_tokens_t *tokens)
{
	return (tbx_tokens_pg_t *)tokens;
}

int tbx__tokens_pg_read_init(tbx_tokens_pg_t *t)
{
	char prefix[8];

	/* pg.c's prefix with its last letter's neighbour: unique per
	 * connection as pg.c's is. */
	tbx__strlcpy(prefix, t->stmts.prefix, sizeof(prefix));
	prefix[0] = prefix[0] == 't' ? 'r' : prefix[0] == 'T' ? 'R' : 'x';
	return tbx__pg_stmts_init(&t->reads, t->pg, prefix, rsql, R__COUNT,
				  NULL, t->schema);
}

/* Runs @p q, freeing what @p p owns. */
static int run(tbx_tokens_pg_t *t, int q, tbx__pg_params_t *p, PGresult **res)
{
	int err = tbx__tokens_pg_ready(t);

	if (!err)
		err = tbx__pg_run(&t->reads, q, p, res);
	if (p)
		tbx__pgp_free(p);
	return err;
}

/* A statement of one or no row with up to two text parameters. */
static int one(tbx_tokens_pg_t *t, int q, const char *p1, const char *p2,
	       int64_t *out)
{
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	tbx__pgp_init(&p);
	if (p1)
		tbx__pgp_text(&p, p1);
	if (p2)
		tbx__pgp_text(&p, p2);
	*out = 0;
	if ((err = run(t, q, &p, &res)))
		return err;
	if (PQntuples(res) > 0)
		*out = tbx__pg_i64(res, 0, 0);
	PQclear(res);
	return TBX_OK;
}

int tbx__tp_read_begin(tbx_tokens_t *tokens)
{
	tbx_tokens_pg_t *t = backend(tokens);
	int err;

	/* Shared: the service store's read transaction covers it. */
	if (t->shared || t->reading)
		return TBX_OK;
	if ((err = tbx__pg_begin(t->pg)))
		return err;
	/* One snapshot for every read until read_end. */
	if ((err = tbx__pg_exec(t->pg, "SET TRANSACTION ISOLATION LEVEL "
				       "REPEATABLE READ, READ ONLY"))) {
		tbx__pg_rollback(t->pg);
		return err;
	}
	t->reading = 1;
	return TBX_OK;
}

void tbx__tp_read_end(tbx_tokens_t *tokens)
{
	tbx_tokens_pg_t *t = backend(tokens);

	if (!t->reading)
		return;
	t->reading = 0;
	tbx__pg_rollback(t->pg);
}

int tbx__tp_schema(tbx_tokens_t *tokens, int *version)
{
	*version = backend(tokens)->version;
	return TBX_OK;
}

int tbx__tp_has(tbx_tokens_t *tokens, int what, int *yes)
{
	/* Version 1 of the PostgreSQL tables holds the edge and the
	 * identity, version 2 the sequence's ranges, version 3 the token
	 * sets, version 4 the edge entries' sets. */
	*yes =
	    what == TBX_TOKENS_HAS_EDGE || what == TBX_TOKENS_HAS_STORE_ID ||
	    (what == TBX_TOKENS_HAS_SEQ_RANGES &&
	     backend(tokens)->version >= 2) ||
	    (what == TBX_TOKENS_HAS_SETS && backend(tokens)->version >= 3) ||
	    (what == TBX_TOKENS_HAS_EDGE_SETS && backend(tokens)->version >= 4);
	return what >= TBX_TOKENS_HAS_EDGE && what <= TBX_TOKENS_HAS_EDGE_SETS
		   ? TBX_OK
		   : TBX_EINVAL;
}

const char *tbx__tp_errmsg(tbx_tokens_t *tokens)
{
	const char *msg = tbx__pg_errmsg(backend(tokens)->pg);

	return msg && *msg ? msg : NULL;
}

/* Per row of a result: non-zero stops. */
typedef int (*row_fn)(const PGresult *res, int r, void *fn, void *opaque);

static int list(tbx_tokens_pg_t *t, int q, tbx__pg_params_t *p, row_fn row,
		void *fn, void *opaque)
{
	PGresult *res;
	int err;

	if ((err = run(t, q, p, &res)))
		return err;
	for (int r = 0; r < PQntuples(res); r++)
		if (row(res, r, fn, opaque))
			break;
	PQclear(res);
	return TBX_OK;
}

static const char *text(const PGresult *res, int r, int c)
{
	const char *s = tbx__pg_text(res, r, c);

	return s ? s : "";
}

static int sum_row(const PGresult *res, int r, void *fn, void *opaque)
{
	tbx__grp_sum_t sum;
	int cols = PQnfields(res);

	memset(&sum, 0, sizeof(sum));
	sum.grp = text(res, r, 0);
	for (int i = 1; i < cols - 1 && i <= 4; i++)
		sum.n[i - 1] = tbx__pg_i64(res, r, i);
	sum.ms = tbx__pg_i64(res, r, cols - 1);
	return ((tbx__grp_sum_fn)fn)(opaque, &sum);
}

int tbx__tp_tokens_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
			   void *opaque)
{
	return list(backend(tokens), R_TOKENS_SUMMARY, NULL, sum_row,
		    (void *)fn, opaque);
}

int tbx__tp_registrations_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
				  void *opaque)
{
	return list(backend(tokens), R_REGS_SUMMARY, NULL, sum_row, (void *)fn,
		    opaque);
}

static int sub_row(const PGresult *res, int r, void *fn, void *opaque)
{
	tbx__sub_t s;

	s.topic = text(res, r, 0);
	s.grp = text(res, r, 1);
	s.since_seq = tbx__pg_i64(res, r, 2);
	s.created_ms = tbx__pg_i64(res, r, 3);
	s.used_ms = tbx__pg_i64(res, r, 4);
	return ((tbx__sub_fn)fn)(opaque, &s);
}

int tbx__tp_subscriptions_list(tbx_tokens_t *tokens, tbx__sub_fn fn,
			       void *opaque)
{
	return list(backend(tokens), R_SUBS, NULL, sub_row, (void *)fn, opaque);
}

static int str_row(const PGresult *res, int r, void *fn, void *opaque)
{
	return ((tbx__str_fn)fn)(opaque, text(res, r, 0));
}

int tbx__tp_sender_groups(tbx_tokens_t *tokens, tbx__str_fn fn, void *opaque)
{
	tbx_tokens_pg_t *t = backend(tokens);

	return list(t, t->version >= 3 ? R_SENDERS_SETS : R_SENDERS, NULL,
		    str_row, (void *)fn, opaque);
}

static int attempt_row(const PGresult *res, int r, void *fn, void *opaque)
{
	tbx__reg_t reg;

	memset(&reg, 0, sizeof(reg));
	tbx__strlcpy(reg.attempt, text(res, r, 0), sizeof(reg.attempt));
	tbx__strlcpy(reg.msg_id, text(res, r, 1), sizeof(reg.msg_id));
	reg.created_ms = tbx__pg_i64(res, r, 2);
	return ((tbx__attempt_fn)fn)(opaque, &reg, tbx__pg_i64(res, r, 3));
}

int tbx__tp_attempts(tbx_tokens_t *tokens, const char *send_grp,
		     tbx__attempt_fn fn, void *opaque)
{
	tbx__pg_params_t p;

	if (!send_grp)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, send_grp);
	return list(backend(tokens), R_ATTEMPTS, &p, attempt_row, (void *)fn,
		    opaque);
}

int tbx__tp_attempt_token_rows(tbx_tokens_t *tokens, const char *attempt,
			       int64_t *n)
{
	if (!attempt)
		return TBX_EINVAL;
	return one(backend(tokens), R_ATTEMPT_ROWS, attempt, NULL, n);
}

static int token_row(const PGresult *res, int r, void *fn, void *opaque)
{
	tbx__token_rec_t rec;

	rec.token = text(res, r, 0);
	rec.grp = text(res, r, 1);
	rec.mint_seq = tbx__pg_i64(res, r, 2);
	rec.created_ms = tbx__pg_i64(res, r, 3);
	return ((tbx__token_fn)fn)(opaque, &rec);
}

/* The filter's parameters: $1 the groups (NULL: all), $2 created_max,
 * and with @p limit $3 the limit (NULL: none). */
static void filter_params(tbx__pg_params_t *p, const tbx__filter_t *f,
			  int limit)
{
	tbx__pgp_init(p);
	if (f && f->group_cnt)
		tbx__pgp_text_array(p, f->groups, f->group_cnt);
	else
		tbx__pgp_text(p, NULL);
	tbx__pgp_i64(p, f ? f->created_max : INT64_MAX);
	if (!limit)
		return;
	if (f && f->limit > 0)
		tbx__pgp_i64(p, f->limit);
	else
		tbx__pgp_text(p, NULL);
}

int tbx__tp_tokens_list(tbx_tokens_t *tokens, const tbx__filter_t *f,
			int64_t *total, tbx__token_fn fn, void *opaque)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	if (total) {
		filter_params(&p, f, 0);
		*total = 0;
		if ((err = run(t, R_TOKENS_COUNT, &p, &res)))
			return err;
		if (PQntuples(res) > 0)
			*total = tbx__pg_i64(res, 0, 0);
		PQclear(res);
	}
	filter_params(&p, f, 1);
	return list(t, R_TOKENS_LIST, &p, token_row, (void *)fn, opaque);
}

/* A row of R_TOKEN_ROWS, for the token in @p opaque's first field. */
typedef struct of_token {
	const char *token;
	tbx__token_fn fn;
	void *opaque;
} of_token_t;

static int token_of_row(const PGresult *res, int r, void *fn, void *opaque)
{
	const of_token_t *o = opaque;
	tbx__token_rec_t rec;

	(void)fn;
	rec.token = o->token;
	rec.grp = text(res, r, 0);
	rec.mint_seq = tbx__pg_i64(res, r, 1);
	rec.created_ms = tbx__pg_i64(res, r, 2);
	return o->fn(o->opaque, &rec);
}

int tbx__tp_token_rows(tbx_tokens_t *tokens, const char *token,
		       tbx__token_fn fn, void *opaque)
{
	of_token_t o = {token, fn, opaque};
	tbx__pg_params_t p;

	if (!token)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, token);
	return list(backend(tokens), R_TOKEN_ROWS, &p, token_of_row, NULL, &o);
}

static int token_reg_row(const PGresult *res, int r, void *fn, void *opaque)
{
	tbx__reg_t reg;

	memset(&reg, 0, sizeof(reg));
	tbx__strlcpy(reg.attempt, text(res, r, 0), sizeof(reg.attempt));
	tbx__strlcpy(reg.msg_id, text(res, r, 2), sizeof(reg.msg_id));
	reg.created_ms = tbx__pg_i64(res, r, 3);
	return ((tbx__token_reg_fn)fn)(opaque, &reg, text(res, r, 1));
}

int tbx__tp_token_registrations(tbx_tokens_t *tokens, const char *token,
				tbx__token_reg_fn fn, void *opaque)
{
	tbx__pg_params_t p;

	if (!token)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, token);
	return list(backend(tokens), R_TOKEN_REGS, &p, token_reg_row,
		    (void *)fn, opaque);
}

int tbx__tp_token_match(tbx_tokens_t *tokens, const char *id,
			char out[TBX_UUID_LEN + 1], int *matches)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *res;
	int n, err;

	*matches = 0;
	if (!id)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, id);
	if ((err = run(t, R_TOKEN_MATCH, &p, &res)))
		return err;
	n = PQntuples(res);
	if (n > 0) {
		tbx__strlcpy(out, text(res, 0, 0), TBX_UUID_LEN + 1);
		/* The id itself: one match, whatever else starts with it. */
		*matches = tbx__pg_i64(res, 0, 1) ? 1 : n;
	}
	PQclear(res);
	return TBX_OK;
}

int tbx__tp_unsubscribe(tbx_tokens_t *tokens, const char *topic,
			const char *grp, int64_t used_before_ms, int remove,
			tbx__unsub_t *res)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *r = NULL;
	uint64_t n = 0;
	int err;

	memset(res, 0, sizeof(*res));
	if (!topic || !grp)
		return TBX_EINVAL;
	if (t->pg->in_tx)
		return TBX_ESTATE;
	if ((err = tbx__pg_begin(t->pg)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, t->schema);
	if ((err = run(t, R_UNSUB_LOCK, &p, NULL)))
		goto out;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, topic);
	if ((err = run(t, R_UNSUB_FIND, &p, &r)))
		goto out;
	if (PQntuples(r) != 1) {
		err = TBX_ESTORE;
		goto out;
	}
	res->found = !tbx__pg_null(r, 0, 0);
	res->used_ms = tbx__pg_i64(r, 0, 0);
	res->others = tbx__pg_i64(r, 0, 1);
	res->token_rows = tbx__pg_i64(r, 0, 2);
	/* The sets record their topic: the group's rows of this one. */
	if ((err = tbx__tp_sets_unsub(t, grp, topic, 0, &res->set_rows,
				      &res->set_deleted)))
		goto out;
	if (!remove || !res->found || res->used_ms > used_before_ms)
		goto out;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, topic);
	if ((err = run(t, R_UNSUB_DELETE, &p, NULL)))
		goto out;
	if ((err = tbx__tp_sets_unsub(t, grp, topic, 1, &res->set_rows,
				      &res->set_deleted)))
		goto out;
	if (!res->others) {
		PGresult *d;

		tbx__pgp_init(&p);
		tbx__pgp_text(&p, grp);
		if ((err = run(t, R_UNSUB_TOKENS, &p, &d)))
			goto out;
		n = strtoull(PQcmdTuples(d), NULL, 10);
		PQclear(d);
	}
	if ((err = tbx__pg_commit(t->pg)))
		goto done;
	res->removed = 1;
	res->deleted = (int64_t)n;
	goto done;
out:
	tbx__pg_rollback(t->pg);
done:
	PQclear(r);
	return err;
}
