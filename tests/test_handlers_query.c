/*
 * tbx_ctx_query(): a handler reads rows through the service store's
 * connection on either backend -- every row in order, NULL as NULL, an
 * early stop, RETURNING -- and the rules of tbx_ctx_exec() hold: $1..$n
 * parameters that match, statements that would end the transaction
 * refused and counted, a failed statement the message's error reason and,
 * on PostgreSQL, seen by the guard.  Runs on SQLite files and, in the pg
 * tier, on PostgreSQL schemas.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

#define MAX_ROWS 8

/* What a row function saw. */
typedef struct seen {
	int rows, ncols, stop_after; /* stop_after 0: never stop */
	char *vals[MAX_ROWS][3];     /* copies; NULL for SQL NULL */
	int nested;		     /* tbx_ctx_exec() from the row function */
	tbx_ctx_t *ctx;
} seen_t;

static int collect(void *arg, int ncols, const char *const *cols)
{
	seen_t *s = arg;

	s->ncols = ncols;
	if (s->rows < MAX_ROWS)
		for (int c = 0; c < ncols && c < 3; c++)
			s->vals[s->rows][c] = cols[c] ? strdup(cols[c]) : NULL;
	s->rows++;
	if (s->ctx)
		s->nested = tbx_ctx_exec(s->ctx, "SELECT 1", NULL, 0, NULL);
	return s->stop_after && s->rows >= s->stop_after;
}

static void seen_free(seen_t *s)
{
	for (int r = 0; r < MAX_ROWS; r++)
		for (int c = 0; c < 3; c++)
			free(s->vals[r][c]);
}

/* A tt_drive() condition: the handler was called (every probe's first
 * member counts its calls). */
static int called(void *opaque)
{
	return *(const int *)opaque > 0;
}

static void env_init(tt_env_t *e)
{
	static const char *const topics[] = {"in:1", "in.dlq:1", NULL};

	tt_env_init(e, topics);
}

static tbx_worker_t *worker(tt_env_t *e, tbx_handler_fn fn, void *opaque)
{
	char err[512];
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(e->cluster->bootstraps, "g", e->store, e->tokens, NULL),
	    err, sizeof(err));

	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", NULL, fn, opaque), TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	return w;
}

/* The handler's table, made and filled by the handler itself. */
static const char *const setup[] = {
    "CREATE TABLE IF NOT EXISTS kv(k TEXT PRIMARY KEY, v TEXT, n BIGINT)",
    "INSERT INTO kv(k, v, n) VALUES ('a', 'x', 1), ('b', NULL, 2), "
    "('c', 'z', 3), ('d', 'w', 4)",
};

typedef struct reads {
	int calls;
	int setup, all, none, first, returning, count, nested, no_fn;
	seen_t s_all, s_none, s_first, s_returning, s_count, s_nested;
} reads_t;

static tbx_verdict_t reads_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				  void *opaque)
{
	reads_t *r = opaque;
	const char *two = "2", *none = "zz";

	(void)msg;
	if (r->calls++)
		return TBX_VERDICT_REJECT; /* once only */
	for (size_t i = 0; i < sizeof(setup) / sizeof(setup[0]); i++)
		r->setup = r->setup
			       ? r->setup
			       : tbx_ctx_exec(ctx, setup[i], NULL, 0, NULL);
	/* Every row, in order, NULL as NULL, numbers as text. */
	r->all = tbx_ctx_query(
	    ctx, "SELECT k, v, n FROM kv WHERE n >= $1 ORDER BY k", &two, 1,
	    collect, &r->s_all);
	/* No row: the function is not called. */
	r->none = tbx_ctx_query(ctx, "SELECT k FROM kv WHERE k = $1", &none, 1,
				collect, &r->s_none);
	/* Stopped after the first row: not an error. */
	r->s_first.stop_after = 1;
	r->first = tbx_ctx_query(ctx, "SELECT k FROM kv ORDER BY k", NULL, 0,
				 collect, &r->s_first);
	/* A write's rows; stopping early leaves its effect whole. */
	r->s_returning.stop_after = 1;
	r->returning =
	    tbx_ctx_query(ctx, "UPDATE kv SET n = n + 10 RETURNING k", NULL, 0,
			  collect, &r->s_returning);
	r->count = tbx_ctx_query(ctx, "SELECT COUNT(*) FROM kv WHERE n > 10",
				 NULL, 0, collect, &r->s_count);
	/* No statement from inside the row function. */
	r->s_nested.ctx = ctx;
	r->nested = tbx_ctx_query(ctx, "SELECT k FROM kv WHERE k = 'a'", NULL,
				  0, collect, &r->s_nested);
	r->no_fn = tbx_ctx_query(ctx, "SELECT k FROM kv", NULL, 0, NULL, NULL);
	return TBX_VERDICT_OK;
}

Test(query, a_handler_reads_every_row_with_nulls_and_may_stop_early)
{
	tt_env_t e;
	reads_t r = {0};
	const char *list[] = {"x"};
	tbx_stats_t st;

	env_init(&e);
	tbx_worker_t *w = worker(&e, reads_handle, &r);
	tt_env_publish(&e, "in", "Hit", list, 1);
	cr_assert(tt_drive(&w, 1, called, &r.calls, 10, 60));
	cr_assert_eq(r.calls, 1);
	cr_assert_eq(r.setup, TBX_OK);

	cr_assert_eq(r.all, TBX_OK);
	cr_assert_eq(r.s_all.rows, 3);
	cr_assert_eq(r.s_all.ncols, 3);
	cr_assert_str_eq(r.s_all.vals[0][0], "b");
	cr_assert_null(r.s_all.vals[0][1], "SQL NULL is NULL");
	cr_assert_str_eq(r.s_all.vals[0][2], "2");
	cr_assert_str_eq(r.s_all.vals[1][0], "c");
	cr_assert_str_eq(r.s_all.vals[1][1], "z");
	cr_assert_str_eq(r.s_all.vals[2][0], "d");
	cr_assert_str_eq(r.s_all.vals[2][2], "4");

	cr_assert_eq(r.none, TBX_OK);
	cr_assert_eq(r.s_none.rows, 0);

	cr_assert_eq(r.first, TBX_OK);
	cr_assert_eq(r.s_first.rows, 1, "the function was called again");
	cr_assert_str_eq(r.s_first.vals[0][0], "a");

	cr_assert_eq(r.returning, TBX_OK);
	cr_assert_eq(r.s_returning.rows, 1);
	cr_assert_eq(r.count, TBX_OK);
	cr_assert_eq(r.s_count.rows, 1);
	cr_assert_str_eq(r.s_count.vals[0][0], "4", "the UPDATE was cut short");

	cr_assert_eq(r.nested, TBX_OK);
	cr_assert_eq(r.s_nested.rows, 1);
	cr_assert_eq(r.s_nested.nested, TBX_ESTATE);
	cr_assert_eq(r.no_fn, TBX_EINVAL);

	/* What the handler wrote committed with the message. */
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM kv WHERE n > 10"),
		     4);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.processed, 1);
	cr_assert_eq(st.handler_refused, 0);
	seen_free(&r.s_all);
	seen_free(&r.s_none);
	seen_free(&r.s_first);
	seen_free(&r.s_returning);
	seen_free(&r.s_count);
	seen_free(&r.s_nested);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* What would end or escape the worker's transaction, refused before the
 * database sees it. */
static const char *const refused[] = {
    "COMMIT",
    "ROLLBACK",
    "BEGIN",
    "END",
    "SAVEPOINT tbx_mine",
    "RELEASE tbx_msg",
    "ROLLBACK TO tbx_msg",
};
#define REFUSED (sizeof(refused) / sizeof(refused[0]))

typedef struct refusals {
	int calls;
	int results[REFUSED];
	int rows;
	int effect;
} refusals_t;

static int count_rows(void *arg, int ncols, const char *const *cols)
{
	(void)ncols;
	(void)cols;
	++*(int *)arg;
	return 0;
}

static tbx_verdict_t refusals_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				     void *opaque)
{
	refusals_t *r = opaque;
	const char *id = tbx_msg_id(msg);

	r->calls++;
	for (size_t i = 0; i < REFUSED; i++)
		r->results[i] = tbx_ctx_query(ctx, refused[i], NULL, 0,
					      count_rows, &r->rows);
	r->effect =
	    tbx_ctx_exec(ctx, "CREATE TABLE IF NOT EXISTS effects(msg_id TEXT)",
			 NULL, 0, NULL);
	if (!r->effect)
		r->effect = tbx_ctx_query(
		    ctx,
		    "INSERT INTO effects(msg_id) VALUES ($1) RETURNING msg_id",
		    &id, 1, count_rows, &r->rows);
	return TBX_VERDICT_OK;
}

Test(query, statements_that_would_end_the_transaction_are_refused)
{
	tt_env_t e;
	refusals_t r = {0};
	const char *list[] = {"x"};
	tbx_stats_t st;

	env_init(&e);
	tbx_worker_t *w = worker(&e, refusals_handle, &r);
	tt_env_publish(&e, "in", "Hit", list, 1);
	cr_assert(tt_drive(&w, 1, called, &r.calls, 10, 60));
	for (size_t i = 0; i < REFUSED; i++)
		cr_expect_eq(r.results[i], TBX_EINVAL, "'%s' gave %d",
			     refused[i], r.results[i]);
	cr_assert_eq(r.effect, TBX_OK);
	cr_assert_eq(r.rows, 1, "only the INSERT's row");
	cr_assert_eq(r.calls, 1);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM effects"), 1);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.handler_refused, REFUSED, "refused: %llu",
		     (unsigned long long)st.handler_refused);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* Parameters and placeholders must match, as for tbx_ctx_exec(); each
 * mismatch inside a savepoint of the handler's own, which PostgreSQL
 * needs to go on after a failed statement. */
typedef struct params_probe {
	int calls, rows;
	int too_few, too_many, missing, question, matched;
	seen_t s_matched;
} params_probe_t;

static int in_savepoint(tbx_ctx_t *ctx, const char *sql,
			const char *const *params, int n, int *rows)
{
	int err;

	if (tbx_ctx_exec(ctx, "SAVEPOINT try", NULL, 0, NULL) != TBX_OK)
		return -1;
	err = tbx_ctx_query(ctx, sql, params, n, count_rows, rows);
	if (tbx_ctx_exec(ctx, err ? "ROLLBACK TO try" : "RELEASE try", NULL, 0,
			 NULL) != TBX_OK ||
	    (err && tbx_ctx_exec(ctx, "RELEASE try", NULL, 0, NULL) != TBX_OK))
		return -1;
	return err;
}

static tbx_verdict_t params_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				   void *opaque)
{
	params_probe_t *p = opaque;
	const char *ab[] = {"a", "b"};

	(void)msg;
	if (p->calls++)
		return TBX_VERDICT_REJECT;
	p->too_few = in_savepoint(ctx, "SELECT $1, $2", ab, 1, &p->rows);
	p->too_many = in_savepoint(ctx, "SELECT $1", ab, 2, &p->rows);
	p->missing = in_savepoint(ctx, "SELECT $1", NULL, 1, &p->rows);
	p->question = in_savepoint(ctx, "SELECT ?", ab, 1, &p->rows);
	p->matched = tbx_ctx_query(ctx, "SELECT $2, $1, $2", ab, 2, collect,
				   &p->s_matched);
	return TBX_VERDICT_OK;
}

Test(query, parameters_that_do_not_match_the_statement_are_an_error)
{
	tt_env_t e;
	params_probe_t p = {0};
	const char *list[] = {"x"};
	int pg;

	env_init(&e);
	pg = tt_store_is_pg(e.store);
	tbx_worker_t *w = worker(&e, params_handle, &p);
	tt_env_publish(&e, "in", "Hit", list, 1);
	cr_assert(tt_drive(&w, 1, called, &p.calls, 10, 60));
	cr_assert_eq(p.calls, 1);
	/* SQLite checks $1..$n itself; PostgreSQL's server refuses. */
	cr_assert_neq(p.too_few, TBX_OK);
	cr_assert_neq(p.too_many, TBX_OK);
	cr_assert_neq(p.question, TBX_OK);
	cr_assert_neq(p.too_few, -1, "the handler's savepoint failed");
	cr_assert_neq(p.too_many, -1, "the handler's savepoint failed");
	cr_assert_neq(p.question, -1, "the handler's savepoint failed");
	if (!pg) {
		cr_assert_eq(p.too_few, TBX_EINVAL);
		cr_assert_eq(p.too_many, TBX_EINVAL);
		cr_assert_eq(p.question, TBX_EINVAL);
	}
	cr_assert_eq(p.missing, TBX_EINVAL, "values missing");
	cr_assert_eq(p.rows, 0, "a mismatched statement gave rows");
	cr_assert_eq(p.matched, TBX_OK);
	cr_assert_eq(p.s_matched.rows, 1);
	cr_assert_eq(p.s_matched.ncols, 3);
	cr_assert_str_eq(p.s_matched.vals[0][0], "b");
	cr_assert_str_eq(p.s_matched.vals[0][1], "a");
	cr_assert_str_eq(p.s_matched.vals[0][2], "b");
	seen_free(&p.s_matched);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* The records of in.dlq, once there are any (driving @p w until then,
 * a hundred rounds at most). */
static size_t dead_letters(const tt_env_t *e, tbx_worker_t *w,
			   tt_record_t **recs)
{
	size_t cnt;

	for (int i = 0;; i++) {
		cnt = tt_read_topic(e->cluster->bootstraps, "in.dlq", recs);
		if (cnt || i == 100)
			return cnt;
		tt_records_free(*recs, cnt);
		cr_assert(tt_drive(&w, 1, NULL, NULL, 5, 60));
	}
}

/* A tt_drive() condition: the handler's table exists and holds enough
 * rows. */
typedef struct rows_want {
	const char *table;
	tt_want_t want;
} rows_want_t;

static int rows_made(void *opaque)
{
	rows_want_t *r = opaque;

	return tt_table_exists(r->want.db, r->table) && tt_reached(&r->want);
}

/* A statement that fails: the handler sees the error, the message gets
 * the database's reason, and on PostgreSQL, where the failure aborts the
 * message's work, the guard turns the handler's OK into a retry. */
typedef struct failing {
	int calls;
	int first, rows;
	int attempts[4];
} failing_t;

static tbx_verdict_t failing_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				    void *opaque)
{
	failing_t *f = opaque;
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);
	const char *id = tbx_msg_id(msg);
	char attempt[16];
	const char *params[] = {id, attempt};
	int err;

	if (f->calls < 4)
		f->attempts[f->calls] = tbx_msg_attempt(msg);
	f->calls++;
	snprintf(attempt, sizeof(attempt), "%d", tbx_msg_attempt(msg));
	if (tbx_msg_attempt(msg) == 1) {
		err = tbx_ctx_query(ctx,
				    "SELECT x FROM no_such_table WHERE x = $1",
				    &id, 1, count_rows, &f->rows);
		f->first = err;
		if (payload && len == 6 && !memcmp(payload, "reject", 6))
			return TBX_VERDICT_REJECT;
	}
	/* On PostgreSQL this fails on attempt 1: the work is aborted. */
	(void)tbx_ctx_exec(ctx,
			   "CREATE TABLE IF NOT EXISTS effects(msg_id TEXT, "
			   "attempt BIGINT)",
			   NULL, 0, NULL);
	(void)tbx_ctx_exec(
	    ctx, "INSERT INTO effects(msg_id, attempt) VALUES ($1, $2)", params,
	    2, NULL);
	return TBX_VERDICT_OK; /* whatever happened */
}

Test(query, a_failed_query_is_the_dead_letters_reason)
{
	tt_env_t e;
	failing_t f = {0};
	const char *list[] = {"reject"};
	tt_record_t *recs;
	size_t cnt;

	env_init(&e);
	tbx_worker_t *w = worker(&e, failing_handle, &f);
	tt_env_publish(&e, "in", "Hit", list, 1);
	cr_assert(tt_drive(&w, 1, called, &f.calls, 10, 60));
	cnt = dead_letters(&e, w, &recs);
	cr_assert_neq(f.first, TBX_OK);
	cr_assert_eq(f.rows, 0);
	cr_assert_eq(cnt, 1);
	cr_assert(recs[0].dlq_error &&
		      strstr(recs[0].dlq_error, "no_such_table"),
		  "%s", recs[0].dlq_error ? recs[0].dlq_error : "(none)");
	tt_records_free(recs, cnt);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

Test(query, a_failed_query_on_postgresql_makes_the_guard_retry)
{
	tt_env_t e;
	failing_t f = {0};
	const char *list[] = {"ok"};
	int pg;

	env_init(&e);
	pg = tt_store_is_pg(e.store);
	tbx_worker_t *w = worker(&e, failing_handle, &f);
	tt_env_publish(&e, "in", "Hit", list, 1);
	rows_want_t want = {"effects",
			    {e.store, "SELECT COUNT(*) FROM effects", 1}};
	cr_assert(tt_drive(&w, 1, rows_made, &want, 10, 60));
	cr_assert_neq(f.first, TBX_OK);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM effects"), 1);
	if (pg) {
		/* Attempt 1's work was aborted by the failed query: the
		 * guard retried the record, and attempt 2's committed. */
		cr_assert_eq(f.calls, 2);
		cr_assert_eq(f.attempts[1], 2);
		cr_assert_eq(
		    tt_count(e.store, "SELECT MAX(attempt) FROM effects"), 2);
	} else {
		/* SQLite's transaction goes on after a failed statement:
		 * the handler's OK commits what it wrote after it. */
		cr_assert_eq(f.calls, 1);
		cr_assert_eq(
		    tt_count(e.store, "SELECT MAX(attempt) FROM effects"), 1);
	}
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* A write whose failure the handler sees: on PostgreSQL the write is
 * deferred and found failed later in the batch, which A then does again
 * with each statement waiting for its answer; either way the failure
 * reaches the handler of its own record, and every other record takes
 * effect once. */
typedef struct keys {
	int calls, failed;
} keys_t;

static tbx_verdict_t keys_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				 void *opaque)
{
	keys_t *k = opaque;
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);
	char text[16];
	const char *param = text;

	k->calls++;
	snprintf(text, sizeof(text), "%.*s", (int)len, payload);
	if (!strcmp(text, "retry") && tbx_msg_attempt(msg) == 1)
		return TBX_VERDICT_RETRY; /* counted once, in whichever A */
	if (tbx_ctx_exec(ctx,
			 "CREATE TABLE IF NOT EXISTS keys(k TEXT PRIMARY KEY)",
			 NULL, 0, NULL) != TBX_OK)
		return TBX_VERDICT_RETRY;
	if (tbx_ctx_exec(ctx, "INSERT INTO keys(k) VALUES ($1)", &param, 1,
			 NULL) != TBX_OK) {
		k->failed++;
		return TBX_VERDICT_REJECT;
	}
	return TBX_VERDICT_OK;
}

Test(query, a_failed_write_among_others_fails_its_own_record_only)
{
	tt_env_t e;
	keys_t k = {0};
	const char *list[] = {"a",     "b", "dup", "c", "dup",
			      "retry", "d", "e",   "f"};
	tt_record_t *recs;
	tbx_stats_t st;
	size_t cnt;

	env_init(&e);
	tbx_worker_t *w = worker(&e, keys_handle, &k);
	tt_env_publish(&e, "in", "Hit", list, 9);
	rows_want_t want = {"keys", {e.store, "SELECT COUNT(*) FROM keys", 8}};
	cr_assert(tt_drive(&w, 1, rows_made, &want, 10, 60));
	cnt = dead_letters(&e, w, &recs);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM keys"), 8);
	cr_assert_eq(cnt, 1);
	cr_assert_str_eq(recs[0].payload, "dup");
	cr_assert(recs[0].dlq_error && strstr(recs[0].dlq_error, "keys"), "%s",
		  recs[0].dlq_error ? recs[0].dlq_error : "(none)");
	tt_records_free(recs, cnt);
	cr_assert_geq(k.failed, 1);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.processed, 8);
	cr_assert_eq(st.dead_lettered, 1);
	cr_assert_eq(st.retries, 1, "an A done again counts nothing twice");
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}
