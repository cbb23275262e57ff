/*
 * The PostgreSQL backend of the token store: the token sets (token
 * version 3; tokens/tokens.h, docs/batched-tokens.md).  tbx_tset holds a
 * row per set and receiving group with `bits bit varying`, bit i the i-th
 * from the left; tbx_breg one registration per attempt with its set ids.
 *
 * Every statement covers the whole call (arrays bound and unnested), and
 * every value is bound.  Clearing bits is D's UPDATE, whose new value is
 * computed from the row as the statement finds it: the mask of a set is
 * sent as the indexes' span (its first index and a bit string from
 * there), and widened on the server to the row's own length (`bits #
 * bits`, zeros of that length, overlaid with it).  Under READ COMMITTED
 * a second D that waited for the first's row lock evaluates it again on
 * the row the first committed, so both clears hold; no statement writes
 * back a value read before.  The DELETE of the sets whose bitmap is now
 * empty is a statement after it, which sees what the UPDATE left.
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
#include "store/pg.h"
#include "tokens/pg_int.h"
#include "tokens/tokens.h"

enum {
	S_MINT,
	S_ADD,
	S_TEST,
	S_CLEAR,
	S_EMPTY,
	S_CONFIRM,
	S_DROP,
	S_REGS,
	S_COUNT,
	S_SUMMARY,
	S_LIST,
	S_LIST_COUNT,
	S_ATTEMPT_ROWS,
	S_UNSUB_ROWS,
	S_UNSUB_DELETE,
	S__COUNT
};

/* The bits still set of @p b. */
#define PENDING(b) "length(replace((" b ")::text, '0', ''))"
/* Set @p s's mask over the row @p r as found: u.mask placed at u.lo in
 * zeros of the row's length, cut to it. */
#define MASK(r, u)                                                             \
	"substring(overlay((" r ".bits # " r ".bits) placing " u               \
	".mask from " u ".lo::int + 1) from 1 for length(" r ".bits))"
/* The --group filter: $1 NULL for every group. */
#define GRP_IN(col) "($1::text[] IS NULL OR " col " = ANY($1::text[]))"

static const char *const ssql[S__COUNT] = {
    /*
     * The mint, after the number ($5) was taken under the shared
     * subscription lock: the registrations (one per attempt: $8 the
     * attempt, $9 its row, $10 a set id or '' for an attempt without
     * sets, one element per set) and a row per set ($1 ids, $2 topics, $3
     * partitions, $4 sizes) and per group subscribed before the number,
     * every bit set.
     */
    [S_MINT] =
	"WITH r AS (INSERT INTO @T.tbx_breg (attempt, send_grp, row_id, "
	"sets, created_ms) SELECT u.a, $7, min(u.r), "
	"coalesce(array_agg(u.s ORDER BY u.i) FILTER (WHERE u.s <> ''), "
	"'{}'), $6 FROM unnest($8::text[], $9::text[], $10::text[]) WITH "
	"ORDINALITY AS u(a, r, s, i) GROUP BY u.a) INSERT INTO @T.tbx_tset "
	"(set_id, grp, topic, part, mint_seq, nbits, bits, created_ms) "
	"SELECT u.id, s.grp, u.topic, u.part, $5, u.nbits, repeat('1', "
	"u.nbits)::varbit, $6 FROM unnest($1::text[], $2::text[], "
	"$3::int4[], $4::int4[]) AS u(id, topic, part, nbits) JOIN "
	"@T.tbx_subscriptions s ON s.topic = u.topic AND s.since_seq < $5",
    /* The joined mint: the rows alone, at the caller's number. */
    [S_ADD] = "INSERT INTO @T.tbx_tset (set_id, grp, topic, part, mint_seq, "
	      "nbits, bits, created_ms) SELECT u.id, s.grp, u.topic, u.part, "
	      "$5, u.nbits, repeat('1', u.nbits)::varbit, $6 FROM "
	      "unnest($1::text[], $2::text[], $3::int4[], $4::int4[]) AS "
	      "u(id, topic, part, nbits) JOIN @T.tbx_subscriptions s ON "
	      "s.topic = u.topic AND s.since_seq < $5",
    /*
     * The check of every ref in one statement, tested on the server: a
     * row per ref whose set row exists (column 0 its position from 1),
     * with its state (TBX_BIT_*) and mint_seq.  The bitmaps (up to 8 KiB
     * a set) stay on the server: what comes back is a few integers per
     * message, whatever the size of the sets.
     */
    [S_TEST] = "SELECT u.i, CASE WHEN u.x >= s.nbits THEN 3 WHEN "
	       "substring(s.bits from u.x::int + 1 for 1) = B'1' THEN 1 ELSE "
	       "0 END, s.mint_seq FROM unnest($2::text[], $3::int8[]) WITH "
	       "ORDINALITY AS u(id, x, i) JOIN @T.tbx_tset s ON s.grp = $1 "
	       "AND s.set_id = u.id",
    /*
     * D's clear: per set ($2 ids, $3 first index, $4 the mask from
     * there), the rows are locked in set order (o: two D of one group
     * never wait on each other in a cycle) with the bits this clear
     * finds set, then updated from the row as found.  A row one waited
     * for is evaluated again on the version committed.  One row comes
     * back per bit cleared (its count is the statement's, also when
     * deferred); a mask past the row's nbits clears nothing.
     */
    [S_CLEAR] = "WITH u AS (SELECT * FROM unnest($2::text[], $3::int8[], "
		"$4::varbit[]) AS u(id, lo, mask)), o AS (SELECT s.set_id, "
		"u.lo, u.mask, s.bits & " MASK(
		    "s", "u") " AS hit FROM @T.tbx_tset s JOIN u ON "
			      "s.set_id = u.id WHERE s.grp = $1 AND u.lo < "
			      "s.nbits ORDER BY s.set_id FOR UPDATE OF s), c "
			      "AS (UPDATE @T.tbx_tset AS s SET bits = s.bits & "
			      "~" MASK("s", "o") " FROM o WHERE s.grp = $1 AND "
						 "s.set_id = o.set_id "
						 "RETURNING " PENDING(
						     "o.hit") " AS n) SELECT "
							      "FROM c CROSS "
							      "JOIN "
							      "generate_series("
							      "1, c.n)",
    /* The sets among them whose bitmap is now empty go: a statement
     * after the clear, so it sees the rows as the clear left them. */
    [S_EMPTY] = "DELETE FROM @T.tbx_tset WHERE grp = $1 AND set_id = "
		"ANY($2::text[]) AND position(B'1' IN bits) = 0",
    [S_CONFIRM] = "DELETE FROM @T.tbx_breg WHERE attempt = ANY($1::text[])",
    /* The loser's and the orphan's drop: the sets go only through the
     * registration this statement deleted; a confirm holding it makes
     * it wait, then find nothing. */
    [S_DROP] = "WITH r AS (DELETE FROM @T.tbx_breg WHERE attempt = $1 "
	       "RETURNING sets), d AS (DELETE FROM @T.tbx_tset t USING r "
	       "WHERE t.set_id = ANY(r.sets) RETURNING 1) SELECT (SELECT "
	       "count(*) FROM r), (SELECT count(*) FROM d)",
    [S_REGS] = "SELECT attempt, row_id, created_ms FROM @T.tbx_breg WHERE "
	       "send_grp = $1 AND (created_ms, attempt) > ($3::bigint, "
	       "$4::text) ORDER BY created_ms, attempt LIMIT $2",
    /* $1 NULL: every group. */
    [S_COUNT] = "SELECT (SELECT count(*) FROM @T.tbx_tset WHERE $1::text IS "
		"NULL OR grp = $1), (SELECT coalesce(sum(" PENDING(
		    "bits") "), 0)::bigint FROM @T.tbx_tset WHERE $1::text "
			    "IS NULL OR grp = $1), (SELECT count(*) FROM "
			    "@T.tbx_breg WHERE $1::text IS NULL OR send_grp = "
			    "$1)",
    [S_SUMMARY] = "SELECT grp, count(*), sum(" PENDING(
	"bits") ")::bigint, min(created_ms) FROM @T.tbx_tset GROUP BY grp "
		"ORDER BY grp",
    [S_LIST] = "SELECT set_id, grp, topic, part, nbits, bits, mint_seq, "
	       "created_ms FROM @T.tbx_tset WHERE " GRP_IN(
		   "grp") " AND created_ms <= $2 ORDER BY created_ms, set_id, "
			  "grp LIMIT $3::bigint",
    [S_LIST_COUNT] = "SELECT count(*) FROM @T.tbx_tset WHERE " GRP_IN(
	"grp") " AND created_ms <= $2",
    [S_ATTEMPT_ROWS] = "SELECT count(*) FROM @T.tbx_tset t JOIN @T.tbx_breg r "
		       "ON t.set_id = ANY(r.sets) WHERE r.attempt = $1",
    [S_UNSUB_ROWS] = "SELECT count(*) FROM @T.tbx_tset WHERE grp = $1 AND "
		     "topic = $2",
    [S_UNSUB_DELETE] = "DELETE FROM @T.tbx_tset WHERE grp = $1 AND topic = "
		       "$2",
};

static tbx_tokens_pg_t *backend(tbx_tokens_t *tokens)
{
	return (tbx_tokens_pg_t *)tokens;
}

int tbx__tokens_pg_sets_init(tbx_tokens_pg_t *t)
{
	char prefix[8];

	/* pg.c's prefix with another first letter: unique per connection
	 * as pg.c's is. */
	tbx__strlcpy(prefix, t->stmts.prefix, sizeof(prefix));
	prefix[0] = prefix[0] == 't' ? 's' : prefix[0] == 'T' ? 'S' : 'y';
	return tbx__pg_stmts_init(&t->sets, t->pg, prefix, ssql, S__COUNT, NULL,
				  t->schema);
}

/* The tables are there: token version 3 (a read-only opening of an older
 * schema does not migrate it). */
static int sets_ready(tbx_tokens_pg_t *t)
{
	if (t->version >= 3)
		return TBX_OK;
	tbx__log(TBX_LOG_ERR,
		 "token store: schema %s: version %d has no token sets; "
		 "a read-write opening of this tokenbox migrates it",
		 t->schema, t->version);
	return TBX_ESCHEMA;
}

/* Runs @p q with @p p (NULL: none), then frees what @p p owns. */
static int run(tbx_tokens_pg_t *t, int q, tbx__pg_params_t *p, PGresult **res)
{
	int err = tbx__pg_run(&t->sets, q, p, res);

	if (p)
		tbx__pgp_free(p);
	return err;
}

/* run() that reports the rows the statement changed (or returned). */
static int run_changes(tbx_tokens_pg_t *t, int q, tbx__pg_params_t *p,
		       uint64_t *n)
{
	PGresult *res;
	int err = run(t, q, p, &res);

	if (n)
		*n = 0;
	if (err)
		return err;
	if (n)
		*n = strtoull(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return TBX_OK;
}

/* Queues @p q (store/pg.h): its count is added to *@p n when it has run. */
static int defer(tbx_tokens_pg_t *t, int q, tbx__pg_params_t *p, uint64_t *n,
		 const char *what)
{
	int err = tbx__pg_defer(&t->sets, q, p, n, 0, what);

	tbx__pgp_free(p);
	return err;
}

static int set_item_ok(const tbx__set_item_t *s)
{
	return s->set_id && tbx__is_uuid(s->set_id, strlen(s->set_id)) &&
	       s->topic && s->part >= 0 && s->nbits >= 1 &&
	       s->nbits <= TBX_SET_BITS_MAX;
}

/* The columns of the sets of a mint. */
typedef struct set_cols {
	const char **id, **topic;
	int64_t *part, *nbits;
	size_t n;
	/* The registrations: per set of a request with an attempt (or one
	 * '' for an attempt without sets), its attempt and row. */
	const char **att, **att_row, **att_set;
	size_t regs;
} set_cols_t;

static void set_cols_free(set_cols_t *c)
{
	free(c->id);
	free(c->topic);
	free(c->part);
	free(c->nbits);
	free(c->att);
	free(c->att_row);
	free(c->att_set);
}

static int set_cols_make(set_cols_t *c, const tbx__set_req_t *reqs, size_t cnt)
{
	size_t n = 0;

	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < cnt; i++)
		n += reqs[i].set_cnt + 1;
	/* One more: calloc(0) may return NULL. */
	c->id = calloc(n + 1, sizeof(*c->id));
	c->topic = calloc(n + 1, sizeof(*c->topic));
	c->part = calloc(n + 1, sizeof(*c->part));
	c->nbits = calloc(n + 1, sizeof(*c->nbits));
	c->att = calloc(n + 1, sizeof(*c->att));
	c->att_row = calloc(n + 1, sizeof(*c->att_row));
	c->att_set = calloc(n + 1, sizeof(*c->att_set));
	if (!c->id || !c->topic || !c->part || !c->nbits || !c->att ||
	    !c->att_row || !c->att_set) {
		set_cols_free(c);
		return TBX_ENOMEM;
	}
	for (size_t i = 0; i < cnt; i++) {
		const tbx__set_req_t *req = &reqs[i];

		for (size_t j = 0; j < req->set_cnt; j++) {
			const tbx__set_item_t *s = &req->sets[j];

			c->id[c->n] = s->set_id;
			c->topic[c->n] = s->topic;
			c->part[c->n] = s->part;
			c->nbits[c->n++] = s->nbits;
			if (!req->attempt)
				continue;
			/* Registered with its sets, in one transaction: the
			 * sweeper can always find an orphan. */
			c->att[c->regs] = req->attempt;
			c->att_row[c->regs] = req->row_id;
			c->att_set[c->regs++] = s->set_id;
		}
		if (req->attempt && !req->set_cnt) {
			c->att[c->regs] = req->attempt;
			c->att_row[c->regs] = req->row_id;
			c->att_set[c->regs++] = "";
		}
	}
	return TBX_OK;
}

/* Binds the sets' columns as $1 … $4, then the number and the time. */
static void bind_sets(tbx__pg_params_t *p, const set_cols_t *c, int64_t seq)
{
	tbx__pgp_init(p);
	tbx__pgp_text_array(p, c->id, c->n);
	tbx__pgp_text_array(p, c->topic, c->n);
	tbx__pgp_i64_array(p, c->part, c->n);
	tbx__pgp_i64_array(p, c->nbits, c->n);
	tbx__pgp_i64(p, seq);
	tbx__pgp_i64(p, tbx__now_ms());
}

int tbx__tp_sets_mint(tbx_tokens_t *tokens, const char *send_grp,
		      const tbx__set_req_t *reqs, size_t req_cnt, int64_t *seq,
		      uint64_t *rows)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	set_cols_t c;
	int64_t num = 0;
	uint64_t created = 0;
	int err;

	if (req_cnt && !reqs)
		return TBX_EINVAL;
	for (size_t i = 0; i < req_cnt; i++) {
		const tbx__set_req_t *req = &reqs[i];

		if ((req->set_cnt && !req->sets) ||
		    (req->attempt &&
		     (!send_grp || !req->row_id ||
		      !tbx__is_uuid(req->attempt, strlen(req->attempt)))))
			return TBX_EINVAL;
		for (size_t j = 0; j < req->set_cnt; j++)
			if (!set_item_ok(&req->sets[j]))
				return TBX_EINVAL;
	}
	if ((err = sets_ready(t)) || (err = tbx__tokens_pg_range_ready(t)))
		return err;
	if ((err = set_cols_make(&c, reqs, req_cnt)))
		return err;
	if ((err = tbx__tokens_pg_begin(t))) {
		set_cols_free(&c);
		return err;
	}
	/* One number for the whole call, under the shared subscription lock
	 * (pg.c, seq_next()): a subscription is wholly before or after it,
	 * and the statement after the lock sees every one before. */
	err = tbx__tokens_pg_seq_next(t, &num);
	if (!err && (c.n || c.regs)) {
		bind_sets(&p, &c, num);
		tbx__pgp_text(&p, send_grp);
		tbx__pgp_text_array(&p, c.att, c.regs);
		tbx__pgp_text_array(&p, c.att_row, c.regs);
		tbx__pgp_text_array(&p, c.att_set, c.regs);
		err = run_changes(t, S_MINT, &p, &created);
	}
	set_cols_free(&c);
	if ((err = tbx__tokens_pg_end(t, err)))
		return err;
	if (seq)
		*seq = num;
	if (rows)
		*rows = created;
	return TBX_OK;
}

/* What adding @p cnt sets of sequence number @p seq needs: valid items,
 * a store with sets and, when @p joined, the shared connection's open
 * transaction. */
static int add_check(tbx_tokens_pg_t *t, const tbx__set_item_t *sets,
		     size_t cnt, int64_t seq, int joined)
{
	int err;

	if (seq <= 0 || (cnt && !sets))
		return TBX_EINVAL;
	for (size_t i = 0; i < cnt; i++)
		if (!set_item_ok(&sets[i]))
			return TBX_EINVAL;
	if ((err = sets_ready(t)))
		return err;
	return joined ? tbx__tokens_pg_joined_check(t) : TBX_OK;
}

int tbx__tp_sets_add(tbx_tokens_t *tokens, const tbx__set_item_t *sets,
		     size_t cnt, int64_t seq, uint64_t *rows)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__set_req_t req = {NULL, NULL, sets, cnt};
	tbx__pg_params_t p;
	set_cols_t c;
	int err;

	if (rows)
		*rows = 0;
	if ((err = add_check(t, sets, cnt, seq, 0)) || !cnt)
		return err;
	if ((err = set_cols_make(&c, &req, 1)))
		return err;
	bind_sets(&p, &c, seq);
	err = run_changes(t, S_ADD, &p, rows);
	set_cols_free(&c);
	return err;
}

int tbx__tp_sets_mint_joined(tbx_tokens_t *tokens, const tbx__set_item_t *sets,
			     size_t cnt, int64_t seq, uint64_t *rows)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__set_req_t req = {NULL, NULL, sets, cnt};
	tbx__pg_params_t p;
	set_cols_t c;
	int err;

	if ((err = add_check(t, sets, cnt, seq, 1)) || !cnt)
		return err;
	if ((err = set_cols_make(&c, &req, 1)))
		return err;
	/* After seq_joined()'s lock; sent with the transaction's next
	 * statement (as mint_joined): *rows grows when it has run. */
	bind_sets(&p, &c, seq);
	err = defer(t, S_ADD, &p, rows, "token sets");
	set_cols_free(&c);
	return err;
}

static int refs_ok(const char *grp, const tbx__bit_ref_t *refs, size_t n)
{
	if (!grp || (n && !refs))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!refs[i].set_id)
			return 0;
	return 1;
}

int tbx__tp_sets_test(tbx_tokens_t *tokens, const char *grp,
		      const tbx__bit_ref_t *refs, size_t n,
		      tbx__bit_state_t *st, int64_t *mint_seq)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *res;
	const char **ids;
	int64_t *idx;
	int err;

	if (!refs_ok(grp, refs, n) || (n && !st))
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++) {
		st[i] = TBX_BIT_NOROW;
		if (mint_seq)
			mint_seq[i] = 0;
	}
	if (n == 0)
		return TBX_OK;
	if ((err = sets_ready(t)) || (err = tbx__tokens_pg_ready(t)))
		return err;
	ids = calloc(n, sizeof(*ids));
	idx = calloc(n, sizeof(*idx));
	if (!ids || !idx) {
		free(ids);
		free(idx);
		return TBX_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		ids[i] = refs[i].set_id;
		idx[i] = refs[i].index;
	}
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text_array(&p, ids, n);
	tbx__pgp_i64_array(&p, idx, n);
	err = run(t, S_TEST, &p, &res);
	free(ids);
	free(idx);
	if (err)
		return err;
	for (int r = 0; r < PQntuples(res); r++) {
		int64_t i = tbx__pg_i64(res, r, 0), s = tbx__pg_i64(res, r, 1);

		if (i < 1 || (size_t)i > n || s < TBX_BIT_CLEAR ||
		    s > TBX_BIT_RANGE) {
			err = TBX_ESTORE;
			break;
		}
		st[i - 1] = (tbx__bit_state_t)s;
		if (mint_seq)
			mint_seq[i - 1] = tbx__pg_i64(res, r, 2);
	}
	PQclear(res);
	return err;
}

/* The masks of one clear: per set named (in set order), its first index
 * and a bit string from there ("x" and hex digits, bit 0 the leftmost). */
typedef struct masks {
	const char **id;
	int64_t *lo;
	char **mask;
	size_t n;
} masks_t;

static void masks_free(masks_t *m)
{
	for (size_t i = 0; m->mask && i < m->n; i++)
		free(m->mask[i]);
	free(m->id);
	free(m->lo);
	free(m->mask);
}

typedef const tbx__bit_ref_t *ref_ptr_t;

static int ref_cmp(const ref_ptr_t *a, const ref_ptr_t *b)
{
	const tbx__bit_ref_t *x = *a, *y = *b;
	int c = x->set_id == y->set_id ? 0 : strcmp(x->set_id, y->set_id);

	if (c)
		return c;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* A batch's refs come in runs, one per incoming set and partition. */
TBX__RUN_SORT(refs_sort, ref_ptr_t, ref_cmp)

/* One mask per set named; refs at or past TBX_SET_BITS_MAX are beyond
 * every set's nbits and clear nothing.  The masks span only the indexes
 * cleared: a batch's few messages of a large set send a few bits. */
static int masks_make(masks_t *m, const tbx__bit_ref_t *refs, size_t n)
{
	const tbx__bit_ref_t **order;
	int err = TBX_ENOMEM;

	memset(m, 0, sizeof(*m));
	/* The second half is the sort's room. */
	order = calloc(2 * n + 1, sizeof(*order));
	m->id = calloc(n + 1, sizeof(*m->id));
	m->lo = calloc(n + 1, sizeof(*m->lo));
	m->mask = calloc(n + 1, sizeof(*m->mask));
	if (!order || !m->id || !m->lo || !m->mask)
		goto out;
	for (size_t i = 0; i < n; i++)
		order[i] = &refs[i];
	refs_sort(order, order + n, n);
	for (size_t i = 0; i < n;) {
		size_t j = i, digits;
		uint32_t lo = order[i]->index, hi = lo;
		char *s;

		while (j < n && !strcmp(order[j]->set_id, order[i]->set_id)) {
			if (order[j]->index < TBX_SET_BITS_MAX)
				hi = order[j]->index;
			j++;
		}
		if (lo >= TBX_SET_BITS_MAX) {
			i = j;
			continue;
		}
		digits = (hi - lo) / 4 + 1;
		if (!(s = malloc(digits + 2)))
			goto out;
		s[0] = 'x';
		memset(s + 1, 0, digits);
		for (size_t k = i; k < j; k++) {
			uint32_t b = order[k]->index;

			if (b < TBX_SET_BITS_MAX)
				s[1 + (b - lo) / 4] |=
				    (char)(8 >> ((b - lo) % 4));
		}
		for (size_t d = 0; d < digits; d++)
			s[1 + d] = "0123456789abcdef"[(int)s[1 + d]];
		s[digits + 1] = '\0';
		m->id[m->n] = order[i]->set_id;
		m->lo[m->n] = lo;
		m->mask[m->n++] = s;
		i = j;
	}
	err = TBX_OK;
out:
	free(order);
	if (err)
		masks_free(m);
	return err;
}

/* D's clear and the delete of the sets it emptied: in a transaction of
 * their own, or @p joined inside the caller's (both deferred, *cleared
 * and *deleted filled when the transaction's next statement has run). */
static int consume(tbx_tokens_t *tokens, const char *grp,
		   const tbx__bit_ref_t *refs, size_t n, uint64_t *cleared,
		   uint64_t *deleted, int joined)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	masks_t m;
	uint64_t c = 0, d = 0;
	int err;

	if (cleared)
		*cleared = 0;
	if (deleted)
		*deleted = 0;
	if (!refs_ok(grp, refs, n))
		return TBX_EINVAL;
	if ((err = sets_ready(t)))
		return err;
	if (joined && (err = tbx__tokens_pg_joined_check(t)))
		return err;
	if ((err = masks_make(&m, refs, n)))
		return err;
	if (m.n == 0) {
		masks_free(&m);
		return TBX_OK;
	}
	if (!joined && (err = tbx__tokens_pg_begin(t))) {
		masks_free(&m);
		return err;
	}
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text_array(&p, m.id, m.n);
	tbx__pgp_i64_array(&p, m.lo, m.n);
	tbx__pgp_text_array(&p, (const char *const *)m.mask, m.n);
	err = defer(t, S_CLEAR, &p, joined ? cleared : &c, "token sets");
	if (!err) {
		tbx__pgp_init(&p);
		tbx__pgp_text(&p, grp);
		tbx__pgp_text_array(&p, m.id, m.n);
		/* Apart: sent with the clear, one round trip. */
		if (joined)
			err = defer(t, S_EMPTY, &p, deleted, "token sets");
		else
			err = run_changes(t, S_EMPTY, &p, &d);
	}
	masks_free(&m);
	if (joined)
		return err;
	if ((err = tbx__tokens_pg_end(t, err)))
		return err;
	if (cleared)
		*cleared = c;
	if (deleted)
		*deleted = d;
	return TBX_OK;
}

int tbx__tp_sets_consume(tbx_tokens_t *tokens, const char *grp,
			 const tbx__bit_ref_t *refs, size_t n,
			 uint64_t *cleared, uint64_t *deleted)
{
	return consume(tokens, grp, refs, n, cleared, deleted, 0);
}

int tbx__tp_sets_consume_joined(tbx_tokens_t *tokens, const char *grp,
				const tbx__bit_ref_t *refs, size_t n,
				uint64_t *cleared, uint64_t *deleted)
{
	return consume(tokens, grp, refs, n, cleared, deleted, 1);
}

int tbx__tp_sets_confirm(tbx_tokens_t *tokens, const char *const *attempts,
			 size_t cnt)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	int err;

	if (cnt == 0)
		return TBX_OK;
	if (!attempts)
		return TBX_EINVAL;
	for (size_t i = 0; i < cnt; i++)
		if (!attempts[i])
			return TBX_EINVAL;
	if ((err = sets_ready(t)) || (err = tbx__tokens_pg_begin(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, attempts, cnt);
	err = run(t, S_CONFIRM, &p, NULL);
	return tbx__tokens_pg_end(t, err);
}

int tbx__tp_sets_drop_attempt(tbx_tokens_t *tokens, const char *attempt,
			      int *dropped, uint64_t *deleted)
{
	tbx_tokens_pg_t *t = backend(tokens);
	int err;

	if (dropped)
		*dropped = 0;
	if (deleted)
		*deleted = 0;
	if (!attempt || !dropped)
		return TBX_EINVAL;
	if ((err = sets_ready(t)))
		return err;
	/* Its registration and the rows of every set it names, every
	 * group's: the registration first, as for a per-message attempt. */
	return tbx__tokens_pg_drop(t, &t->sets, S_DROP, attempt, dropped,
				   deleted);
}

int tbx__tp_sets_registrations(tbx_tokens_t *tokens, const char *send_grp,
			       const tbx__reg_t *after, size_t limit,
			       tbx__reg_t **out, size_t *cnt)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	if (!out || !cnt)
		return TBX_EINVAL;
	*out = NULL;
	*cnt = 0;
	if (!send_grp)
		return TBX_EINVAL;
	if (limit == 0)
		return TBX_OK;
	if ((err = sets_ready(t)) || (err = tbx__tokens_pg_ready(t)))
		return err;
	/* (created_ms, attempt) > (INT64_MIN, '') holds for every row. */
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, send_grp);
	tbx__pgp_i64(&p, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
	tbx__pgp_i64(&p, after ? after->created_ms : INT64_MIN);
	tbx__pgp_text(&p, after ? after->attempt : "");
	if ((err = run(t, S_REGS, &p, &res)))
		return err;
	/* msg_id receives the row_id. */
	return tbx__tp_regs_from(res, out, cnt);
}

int tbx__tp_sets_count(tbx_tokens_t *tokens, const char *grp, int64_t *rows,
		       int64_t *pending, int64_t *registrations)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	if (!rows && !pending && !registrations)
		return TBX_OK;
	if ((err = sets_ready(t)) || (err = tbx__tokens_pg_ready(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	if ((err = run(t, S_COUNT, &p, &res)))
		return err;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return TBX_ESTORE;
	}
	if (rows)
		*rows = tbx__pg_i64(res, 0, 0);
	if (pending)
		*pending = tbx__pg_i64(res, 0, 1);
	if (registrations)
		*registrations = tbx__pg_i64(res, 0, 2);
	PQclear(res);
	return TBX_OK;
}

int tbx__tp_sets_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn, void *opaque)
{
	tbx_tokens_pg_t *t = backend(tokens);
	PGresult *res;
	int err;

	if (!fn)
		return TBX_EINVAL;
	if ((err = sets_ready(t)) || (err = tbx__tokens_pg_ready(t)))
		return err;
	if ((err = run(t, S_SUMMARY, NULL, &res)))
		return err;
	for (int r = 0; r < PQntuples(res); r++) {
		tbx__grp_sum_t sum;
		const char *g = tbx__pg_text(res, r, 0);

		memset(&sum, 0, sizeof(sum));
		sum.grp = g ? g : "";
		sum.n[0] = tbx__pg_i64(res, r, 1);
		sum.n[1] = tbx__pg_i64(res, r, 2);
		sum.ms = tbx__pg_i64(res, r, 3);
		if (fn(opaque, &sum))
			break;
	}
	PQclear(res);
	return TBX_OK;
}

/* A bit varying in binary (its length in bits, then the bits from the
 * left, high bit first) into tokens.h's layout: bit i in byte i / 8, bit
 * i % 8.  *pending: the bits set.  @returns 0, or -1 when malformed. */
static int bits_read(const unsigned char *v, size_t len, uint32_t nbits,
		     uint8_t *out, uint32_t *pending)
{
	uint32_t n;

	*pending = 0;
	if (len < 4)
		return -1;
	n = (uint32_t)v[0] << 24 | (uint32_t)v[1] << 16 | (uint32_t)v[2] << 8 |
	    v[3];
	if (n != nbits || len - 4 != (size_t)(n + 7) / 8)
		return -1;
	memset(out, 0, (n + 7) / 8);
	for (uint32_t i = 0; i < n; i++)
		if (v[4 + i / 8] & (0x80 >> (i % 8))) {
			out[i / 8] |= (uint8_t)(1u << (i % 8));
			(*pending)++;
		}
	return 0;
}

int tbx__tp_sets_list(tbx_tokens_t *tokens, const tbx__filter_t *f,
		      int64_t *total, tbx__set_fn fn, void *opaque)
{
	tbx_tokens_pg_t *t = backend(tokens);
	uint8_t *bits = NULL;
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	if (!fn)
		return TBX_EINVAL;
	if ((err = sets_ready(t)) || (err = tbx__tokens_pg_ready(t)))
		return err;
	/* The filter: $1 the groups (NULL: all), $2 created_max, $3 the
	 * limit (NULL: none). */
	if (total) {
		*total = 0;
		tbx__pgp_init(&p);
		if (f && f->group_cnt)
			tbx__pgp_text_array(&p, f->groups, f->group_cnt);
		else
			tbx__pgp_text(&p, NULL);
		tbx__pgp_i64(&p, f ? f->created_max : INT64_MAX);
		if ((err = run(t, S_LIST_COUNT, &p, &res)))
			return err;
		if (PQntuples(res) > 0)
			*total = tbx__pg_i64(res, 0, 0);
		PQclear(res);
	}
	tbx__pgp_init(&p);
	if (f && f->group_cnt)
		tbx__pgp_text_array(&p, f->groups, f->group_cnt);
	else
		tbx__pgp_text(&p, NULL);
	tbx__pgp_i64(&p, f ? f->created_max : INT64_MAX);
	if (f && f->limit > 0)
		tbx__pgp_i64(&p, f->limit);
	else
		tbx__pgp_text(&p, NULL);
	if ((err = run(t, S_LIST, &p, &res)))
		return err;
	if (!(bits = malloc(TBX_SET_BITS_MAX / 8))) {
		PQclear(res);
		return TBX_ENOMEM;
	}
	for (int r = 0; r < PQntuples(res); r++) {
		tbx__set_rec_t rec;
		const void *v;
		size_t len = 0;
		int64_t nbits = tbx__pg_i64(res, r, 4);

		memset(&rec, 0, sizeof(rec));
		rec.set_id = tbx__pg_text(res, r, 0);
		rec.grp = tbx__pg_text(res, r, 1);
		rec.topic = tbx__pg_text(res, r, 2);
		rec.part = (int32_t)tbx__pg_i64(res, r, 3);
		v = tbx__pg_bytea(res, r, 5, &len);
		if (!rec.set_id || !rec.grp || !rec.topic || !v || nbits < 1 ||
		    nbits > (int64_t)TBX_SET_BITS_MAX ||
		    bits_read(v, len, (uint32_t)nbits, bits, &rec.pending)) {
			tbx__log(TBX_LOG_ERR,
				 "token store: schema %s: a malformed token "
				 "set row",
				 t->schema);
			err = TBX_ECORRUPT;
			break;
		}
		rec.nbits = (uint32_t)nbits;
		rec.bits = bits;
		rec.mint_seq = tbx__pg_i64(res, r, 6);
		rec.created_ms = tbx__pg_i64(res, r, 7);
		if (fn(opaque, &rec))
			break;
	}
	free(bits);
	PQclear(res);
	return err;
}

int tbx__tp_sets_attempt_rows(tbx_tokens_t *tokens, const char *attempt,
			      int64_t *n)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	if (!attempt || !n)
		return TBX_EINVAL;
	*n = 0;
	if ((err = sets_ready(t)) || (err = tbx__tokens_pg_ready(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, attempt);
	if ((err = run(t, S_ATTEMPT_ROWS, &p, &res)))
		return err;
	if (PQntuples(res) != 1)
		err = TBX_ESTORE;
	else
		*n = tbx__pg_i64(res, 0, 0);
	PQclear(res);
	return err;
}

int tbx__tp_sets_unsub(tbx_tokens_pg_t *t, const char *grp, const char *topic,
		       int remove, int64_t *rows, int64_t *deleted)
{
	tbx__pg_params_t p;
	PGresult *res;
	uint64_t n = 0;
	int err;

	*rows = *deleted = 0;
	if (t->version < 3)
		return TBX_OK;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, topic);
	if ((err = run(t, S_UNSUB_ROWS, &p, &res)))
		return err;
	if (PQntuples(res) != 1)
		err = TBX_ESTORE;
	else
		*rows = tbx__pg_i64(res, 0, 0);
	PQclear(res);
	if (err || !remove)
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, topic);
	if ((err = run_changes(t, S_UNSUB_DELETE, &p, &n)))
		return err;
	*deleted = (int64_t)n;
	return TBX_OK;
}
