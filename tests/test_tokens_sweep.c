/*
 * Register-cleanup (tokens/sweep.c): the sweeper reads a group's
 * registrations in T, the outbox row of each in S, and removes the
 * registration of a winner, drops orphans, and leaves attempts in flight
 * alone — also when a worker moves on between its reads and its drop.
 * The rows of a pass are read in one rows_find() (on PostgreSQL one
 * round trip).  In the pg tier (TBX_PG_TIER=1) S and T are schemas on
 * the tier's server, apart (two connections) or joined (one).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "outbox/outbox.h"
#include "store/pg.h"
#include "support.h"
#include "sweep_fixture.h"
#include "tokens/sweep.h"
#include "tokens/tokens.h"

#define GRP  "g1" /* the sending group, whose worker sweeps */
#define OUT  "out"
#define DOWN "g2" /* the group downstream, subscribed to OUT */

static char dir[64];

typedef tt_sweep_env_t fx_env_t;

static void fx_setup(void)
{
	tbx__strlcpy(dir, "/tmp/tbx-sweep-XXXXXX", sizeof(dir));
	cr_assert(mkdtemp(dir), "mkdtemp");
	tbx__log_setup(TBX_LOG_ERR - 1, "test");
}

static void fx_teardown(void)
{
	tt_rmrf(dir);
}

/* S and T in two files, or in one file sharing S's connection; in the pg
 * tier two schemas, through two connections or S's one. */
static void fx_env_open(fx_env_t *env, int one_file)
{
	tt_sweep_env_open(env, dir, "sweep", one_file, OUT,
			  (const char *const[]){DOWN, NULL});
}

/* A: a PROCESSED row of @p n outgoing messages. */
static void fx_row_insert(fx_env_t *env, const char *msg_id, size_t n)
{
	tbx__row_t row;

	tbx__row_init(&row);
	tbx__strlcpy(row.msg_id, msg_id, sizeof(row.msg_id));
	tbx__strlcpy(row.in_topic, "in", sizeof(row.in_topic));
	tbx__uuid(row.in_token);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(
		    tbx__row_add(&row, OUT, "Pong", "k", 1, "v", 1, NULL, 0),
		    TBX_OK);
	cr_assert_eq(tbx_outbox_begin(env->store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(env->store, GRP, &row), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(env->store), TBX_OK);
	tbx__row_clear(&row);
}

/*
 * B's first half: a new attempt for the row, its tokens minted and
 * registered in T, not recorded in S.  A row that does not exist (any
 * more) gets @p n made-up messages.  @p row receives the attempt.
 */
static void fx_attempt(fx_env_t *env, const char *msg_id, size_t n,
		       tbx__row_t *row)
{
	tbx__mint_item_t items[8];
	tbx__mint_req_t req;

	tbx__row_init(row);
	if (tbx_outbox_row_load(env->store, GRP, msg_id, row) == TBX_ENOENT) {
		tbx__strlcpy(row->msg_id, msg_id, sizeof(row->msg_id));
		for (size_t i = 0; i < n; i++)
			cr_assert_eq(tbx__row_add(row, OUT, "Pong", NULL, 0,
						  NULL, 0, NULL, 0),
				     TBX_OK);
	}
	cr_assert_leq(row->msg_cnt, 8);
	tbx__uuid(row->attempt);
	for (size_t i = 0; i < row->msg_cnt; i++) {
		tbx__uuid(row->msgs[i].token);
		items[i].token = row->msgs[i].token;
		items[i].topic = row->msgs[i].topic;
	}
	req = (tbx__mint_req_t){row->attempt, row->msg_id, items, row->msg_cnt};
	cr_assert_eq(
	    tbx_tokens_mint(env->tokens, GRP, &req, 1, &row->mint_seq, NULL),
	    TBX_OK);
}

/* B's second half: record the attempt in S.  @returns won. */
static int fx_record(fx_env_t *env, const tbx__row_t *row)
{
	int won = -1;

	cr_assert_eq(tbx_outbox_begin(env->store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_set_attempt(env->store, GRP, row, &won),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(env->store), TBX_OK);
	return won;
}

/* How many of the attempt's tokens the downstream group still holds. */
static size_t fx_tokens_left(fx_env_t *env, const tbx__row_t *row)
{
	size_t left = 0;

	for (size_t i = 0; i < row->msg_cnt; i++) {
		int exists = 0;

		cr_assert_eq(tbx_tokens_exists(env->tokens, row->msgs[i].token,
					       DOWN, &exists),
			     TBX_OK);
		left += (size_t)exists;
	}
	return left;
}

static int64_t fx_regs(fx_env_t *env, const char *grp)
{
	int64_t regs = -1;

	cr_assert_eq(tbx_tokens_count(env->tokens, grp, NULL, &regs), TBX_OK);
	return regs;
}

static tbx__sweep_stats_t fx_sweep(fx_env_t *env, size_t limit)
{
	tbx__sweep_stats_t st;

	cr_assert_eq(tbx_tokens_sweep(env->tokens, env->store, GRP, limit, &st),
		     TBX_OK);
	return st;
}

TestSuite(sweep, .init = fx_setup, .fini = fx_teardown);

Test(sweep, winner_registration_is_removed_and_its_tokens_kept)
{
	fx_env_t env;
	tbx__row_t won;
	tbx__sweep_stats_t st;

	fx_env_open(&env, 0);
	fx_row_insert(&env, "m1", 2);
	fx_attempt(&env, "m1", 0, &won);
	cr_assert_eq(fx_record(&env, &won), 1);
	/* The worker died before C's confirm. */
	st = fx_sweep(&env, 100);
	cr_assert_eq(st.examined, 1);
	cr_assert_eq(st.winners, 1);
	cr_assert_eq(st.orphans, 0);
	cr_assert_eq(st.tokens_deleted, 0);
	cr_assert_eq(fx_regs(&env, GRP), 0);
	cr_assert_eq(fx_tokens_left(&env, &won), 2, "in flight: kept");
	tbx__row_clear(&won);
	tt_sweep_env_close(&env);
}

Test(sweep, loser_attempt_tokens_are_swept)
{
	fx_env_t env;
	tbx__row_t won, lost;
	tbx__sweep_stats_t st;

	fx_env_open(&env, 0);
	fx_row_insert(&env, "m1", 2);
	/* Two workers mint for the same row; the loser crashed before
	 * dropping its own tokens. */
	fx_attempt(&env, "m1", 0, &won);
	fx_attempt(&env, "m1", 0, &lost);
	cr_assert_eq(fx_record(&env, &won), 1);
	cr_assert_eq(fx_record(&env, &lost), 0);
	st = fx_sweep(&env, 100);
	cr_assert_eq(st.examined, 2);
	cr_assert_eq(st.winners, 1);
	cr_assert_eq(st.orphans, 1);
	cr_assert_eq(st.tokens_deleted, 2);
	cr_assert_eq(fx_tokens_left(&env, &lost), 0);
	cr_assert_eq(fx_tokens_left(&env, &won), 2);
	cr_assert_eq(fx_regs(&env, GRP), 0);
	tbx__row_clear(&won);
	tbx__row_clear(&lost);
	tt_sweep_env_close(&env);
}

Test(sweep, orphan_without_an_outbox_row_is_swept)
{
	fx_env_t env;
	tbx__row_t orphan;
	tbx__sweep_stats_t st;

	fx_env_open(&env, 0);
	fx_attempt(&env, "finished-long-ago", 3, &orphan);
	st = fx_sweep(&env, 100);
	cr_assert_eq(st.examined, 1);
	cr_assert_eq(st.orphans, 1);
	cr_assert_eq(st.tokens_deleted, 3);
	cr_assert_eq(fx_tokens_left(&env, &orphan), 0);
	cr_assert_eq(fx_regs(&env, GRP), 0);
	tbx__row_clear(&orphan);
	tt_sweep_env_close(&env);
}

Test(sweep, attempt_of_a_row_without_attempt_is_left_in_flight)
{
	fx_env_t env;
	tbx__row_t minted;
	tbx__sweep_stats_t st;

	fx_env_open(&env, 0);
	fx_row_insert(&env, "m1", 2);
	fx_attempt(&env, "m1", 0, &minted); /* not recorded (yet) */
	st = fx_sweep(&env, 100);
	cr_assert_eq(st.examined, 1);
	cr_assert_eq(st.in_flight, 1);
	cr_assert_eq(st.winners + st.orphans, 0);
	cr_assert_eq(fx_regs(&env, GRP), 1);
	cr_assert_eq(fx_tokens_left(&env, &minted), 2);
	/* It may still win. */
	cr_assert_eq(fx_record(&env, &minted), 1);
	tbx__row_clear(&minted);
	tt_sweep_env_close(&env);
}

/*
 * A token store that lets "the worker" act right after the sweeper has
 * listed the registrations, before it reads S and drops.
 */
typedef struct fx_hooked {
	struct tbx_tokens base;
	tbx_tokens_t *real;
	void (*after_list)(void *arg);
	void *arg;
	void (*after_drop)(void *arg); /* once, after the first drop */
} fx_hooked_t;

static tbx_tokens_t *fx_real(tbx_tokens_t *t)
{
	return ((fx_hooked_t *)t)->real;
}

static int fx_h_exists(tbx_tokens_t *t, const char *token, const char *grp,
		       int *exists)
{
	return tbx_tokens_exists(fx_real(t), token, grp, exists);
}

static int fx_h_subscribe(tbx_tokens_t *t, const char *topic, const char *grp,
			  int64_t *since)
{
	return tbx_tokens_subscribe(fx_real(t), topic, grp, since);
}

static int fx_h_subscription(tbx_tokens_t *t, const char *topic,
			     const char *grp, int64_t *since)
{
	return tbx_tokens_subscription(fx_real(t), topic, grp, since);
}

static int fx_h_mint(tbx_tokens_t *t, const char *send_grp,
		     const tbx__mint_req_t *reqs, size_t cnt, int64_t *seq,
		     uint64_t *rows)
{
	return tbx_tokens_mint(fx_real(t), send_grp, reqs, cnt, seq, rows);
}

static int fx_h_confirm(tbx_tokens_t *t, const char *const *attempts,
			size_t cnt)
{
	return tbx_tokens_confirm(fx_real(t), attempts, cnt);
}

static int fx_h_consume(tbx_tokens_t *t, const char *grp,
			const char *const *ids, size_t cnt, uint64_t *deleted)
{
	return tbx_tokens_consume(fx_real(t), grp, ids, cnt, deleted);
}

static int fx_h_drop_attempt(tbx_tokens_t *t, const char *attempt, int *dropped,
			     uint64_t *deleted)
{
	fx_hooked_t *h = (fx_hooked_t *)t;
	void (*hook)(void *) = h->after_drop;
	int err = tbx_tokens_drop_attempt(h->real, attempt, dropped, deleted);

	h->after_drop = NULL;
	if (!err && hook)
		hook(h->arg);
	return err;
}

static int fx_h_registrations(tbx_tokens_t *t, const char *send_grp,
			      const tbx__reg_t *after, size_t limit,
			      tbx__reg_t **out, size_t *cnt)
{
	fx_hooked_t *h = (fx_hooked_t *)t;
	int err = tbx_tokens_registrations_after(h->real, send_grp, after,
						 limit, out, cnt);

	if (!err && h->after_list)
		h->after_list(h->arg);
	return err;
}

static int fx_h_count(tbx_tokens_t *t, const char *grp, int64_t *rows,
		      int64_t *regs)
{
	return tbx_tokens_count(fx_real(t), grp, rows, regs);
}

static void fx_h_close(tbx_tokens_t *t)
{
	(void)t; /* the real store is closed by its owner */
}

static const tbx_tokens_ops_t fx_hooked_ops = {
    .name = "hooked",
    .exists = fx_h_exists,
    .subscribe = fx_h_subscribe,
    .subscription = fx_h_subscription,
    .mint = fx_h_mint,
    .confirm = fx_h_confirm,
    .consume = fx_h_consume,
    .drop_attempt = fx_h_drop_attempt,
    .registrations = fx_h_registrations,
    .count = fx_h_count,
    .close = fx_h_close,
};

typedef struct fx_race {
	fx_env_t *env;
	tbx__row_t *row;
} fx_race_t;

/* The winner goes all the way: B records, C confirms (and dispatches),
 * D consumes the incoming token, E deletes the row. */
static void fx_worker_finishes(void *arg)
{
	fx_race_t *race = arg;
	const char *attempt[] = {race->row->attempt};

	cr_assert_eq(fx_record(race->env, race->row), 1);
	cr_assert_eq(tbx_tokens_confirm(race->env->tokens, attempt, 1), TBX_OK);
	cr_assert_eq(tbx_outbox_begin(race->env->store), TBX_OK);
	cr_assert_eq(
	    tbx_outbox_row_delete(race->env->store, GRP, race->row->msg_id),
	    TBX_OK);
	cr_assert_eq(tbx_outbox_commit(race->env->store), TBX_OK);
}

Test(sweep, registration_confirmed_after_the_sweeper_read_it_keeps_its_tokens)
{
	fx_env_t env;
	tbx__row_t winner;
	fx_race_t race = {&env, &winner};
	fx_hooked_t hooked = {
	    {&fx_hooked_ops}, NULL, fx_worker_finishes, &race, NULL};
	tbx__sweep_stats_t st;

	fx_env_open(&env, 0);
	hooked.real = env.tokens;
	fx_row_insert(&env, "m1", 2);
	fx_attempt(&env, "m1", 0, &winner);
	/* The sweeper lists the registration; the worker then records,
	 * confirms and finishes; the sweeper finds no row in S. */
	cr_assert_eq(tbx_tokens_sweep(&hooked.base, env.store, GRP, 100, &st),
		     TBX_OK);
	cr_assert_eq(st.examined, 1);
	cr_assert_eq(st.orphans, 0, "the registration was gone: no drop");
	cr_assert_eq(st.tokens_deleted, 0);
	cr_assert_eq(fx_tokens_left(&env, &winner), 2,
		     "dispatched messages keep their tokens");
	tbx__row_clear(&winner);
	tt_sweep_env_close(&env);
}

Test(sweep, only_the_groups_own_registrations_are_swept)
{
	fx_env_t env;
	tbx__row_t other;
	tbx__mint_item_t item;
	tbx__mint_req_t req;
	tbx__sweep_stats_t st;
	int64_t seq;

	fx_env_open(&env, 0);
	tbx__row_init(&other);
	tbx__strlcpy(other.msg_id, "m1", sizeof(other.msg_id));
	cr_assert_eq(
	    tbx__row_add(&other, OUT, "Pong", NULL, 0, NULL, 0, NULL, 0),
	    TBX_OK);
	tbx__uuid(other.attempt);
	tbx__uuid(other.msgs[0].token);
	item = (tbx__mint_item_t){other.msgs[0].token, OUT};
	req = (tbx__mint_req_t){other.attempt, "m1", &item, 1};
	/* Another group's orphan: its outbox rows are in its own store. */
	cr_assert_eq(tbx_tokens_mint(env.tokens, "g9", &req, 1, &seq, NULL),
		     TBX_OK);
	st = fx_sweep(&env, 100);
	cr_assert_eq(st.examined, 0);
	cr_assert_eq(fx_regs(&env, "g9"), 1);
	cr_assert_eq(fx_tokens_left(&env, &other), 1);
	tbx__row_clear(&other);
	tt_sweep_env_close(&env);
}

Test(sweep, sweep_is_bounded_and_takes_the_oldest_first)
{
	fx_env_t env;
	tbx__row_t orphans[3];
	tbx__sweep_stats_t st;
	char sql[160];

	fx_env_open(&env, 0);
	for (int i = 0; i < 3; i++) {
		char id[8];
		snprintf(id, sizeof(id), "m%d", i);
		fx_attempt(&env, id, 1, &orphans[i]);
	}
	/* Registered at times 3, 2, 1 ms: m2 is the oldest. */
	for (int i = 0; i < 3; i++) {
		snprintf(sql, sizeof(sql),
			 "UPDATE tbx_registrations SET created_ms = %d WHERE "
			 "msg_id = 'm%d'",
			 3 - i, i);
		tt_store_exec(env.t_desc, sql);
	}
	st = fx_sweep(&env, 2);
	cr_assert_eq(st.examined, 2);
	cr_assert_eq(st.orphans, 2);
	cr_assert_eq(fx_tokens_left(&env, &orphans[2]), 0);
	cr_assert_eq(fx_tokens_left(&env, &orphans[1]), 0);
	cr_assert_eq(fx_tokens_left(&env, &orphans[0]), 1, "next sweep's");
	st = fx_sweep(&env, 2);
	cr_assert_eq(st.orphans, 1);
	cr_assert_eq(fx_regs(&env, GRP), 0);
	for (int i = 0; i < 3; i++)
		tbx__row_clear(&orphans[i]);
	tt_sweep_env_close(&env);
}

Test(sweep, works_when_both_stores_share_one_file)
{
	fx_env_t env;
	tbx__row_t won, lost, pending;
	tbx__sweep_stats_t st;

	fx_env_open(&env, 1);
	fx_row_insert(&env, "m1", 2);
	fx_row_insert(&env, "m2", 1);
	fx_attempt(&env, "m1", 0, &won);
	fx_attempt(&env, "m1", 0, &lost);
	fx_attempt(&env, "m2", 0, &pending);
	cr_assert_eq(fx_record(&env, &won), 1);
	cr_assert_eq(fx_record(&env, &lost), 0);
	st = fx_sweep(&env, 100);
	cr_assert_eq(st.examined, 3);
	cr_assert_eq(st.winners, 1);
	cr_assert_eq(st.orphans, 1);
	cr_assert_eq(st.in_flight, 1);
	cr_assert_eq(fx_tokens_left(&env, &won), 2);
	cr_assert_eq(fx_tokens_left(&env, &lost), 0);
	cr_assert_eq(fx_tokens_left(&env, &pending), 1);
	tbx__row_clear(&won);
	tbx__row_clear(&lost);
	tbx__row_clear(&pending);
	tt_sweep_env_close(&env);
}

Test(sweep, nothing_to_sweep_is_a_clean_pass)
{
	fx_env_t env;
	tbx__sweep_stats_t st;

	fx_env_open(&env, 0);
	st = fx_sweep(&env, 100);
	cr_assert_eq(st.examined, 0);
	cr_assert_eq(st.winners + st.orphans + st.in_flight, 0);
	tt_sweep_env_close(&env);
}

Test(sweep, stats_are_zeroed_even_when_the_sweep_fails)
{
	fx_env_t env;
	tbx__sweep_stats_t st;

	memset(&st, 0xff, sizeof(st));
	fx_env_open(&env, 0);
	cr_assert_eq(tbx_tokens_sweep(env.tokens, env.store, NULL, 10, &st),
		     TBX_EINVAL);
	cr_assert_eq(st.examined, 0);
	cr_assert_eq(st.tokens_deleted, 0);
	cr_assert_eq(tbx_tokens_sweep(env.tokens, env.store, GRP, 10, NULL),
		     TBX_OK);
	tt_sweep_env_close(&env);
}

/* More attempts in flight than one pass takes must not hide the orphans
 * behind them: the workers' passes go on where the last one stopped. */
Test(sweep, orphans_behind_a_full_pass_of_attempts_in_flight_are_reached)
{
	fx_env_t env;
	tbx__row_t row;
	tbx__sweep_cursor_t cursor = {0};
	tbx__sweep_stats_t st;
	const char *in_flight[] = {"m1", "m2", "m3"};

	fx_env_open(&env, 0);
	/* Three rows without an attempt, each with a crashed attempt: in
	 * flight for the sweeper.  Then two orphans, registered later. */
	for (size_t i = 0; i < 3; i++) {
		fx_row_insert(&env, in_flight[i], 1);
		fx_attempt(&env, in_flight[i], 1, &row);
		tbx__row_clear(&row);
		usleep(3000); /* distinct created_ms: a fixed order */
	}
	fx_attempt(&env, "gone-1", 1, &row);
	tbx__row_clear(&row);
	usleep(3000);
	fx_attempt(&env, "gone-2", 1, &row);
	tbx__row_clear(&row);

	/* A pass of three from the head sees only attempts in flight ... */
	cr_assert_eq(fx_sweep(&env, 3).orphans, 0);
	cr_assert_eq(fx_sweep(&env, 3).orphans, 0, "and always would");
	/* ... passes that go on reach the orphans, then start over. */
	cr_assert_eq(tbx__tokens_sweep_resume(env.tokens, env.store, GRP, 3,
					      &cursor, &st),
		     TBX_OK);
	cr_assert_eq(st.in_flight, 3);
	cr_assert(cursor.valid);
	cr_assert_eq(tbx__tokens_sweep_resume(env.tokens, env.store, GRP, 3,
					      &cursor, &st),
		     TBX_OK);
	cr_assert_eq(st.orphans, 2);
	cr_assert(!cursor.valid, "a short pass reached the end");
	cr_assert_eq(fx_regs(&env, GRP), 3);
	tt_sweep_env_close(&env);
}

/* ---- the rows of a pass in one read ---------------------------------- */

/* S's interface with its row look-ups counted: the real store's
 * functions, called through a copy of its table. */
static tbx_outbox_ops_t fx_counted_ops;
static const tbx_outbox_ops_t *fx_real_ops;
static int fx_row_finds, fx_rows_finds;

static int fx_c_row_find(tbx_outbox_t *store, const char *grp,
			 const char *msg_id, int *found,
			 char attempt[TBX_UUID_LEN + 1])
{
	fx_row_finds++;
	return fx_real_ops->row_find(store, grp, msg_id, found, attempt);
}

static int fx_c_rows_find(tbx_outbox_t *store, const char *grp,
			  const char *const *ids, size_t n, tbx__row_hit_t *out)
{
	fx_rows_finds++;
	return fx_real_ops->rows_find(store, grp, ids, n, out);
}

static void fx_count_finds(fx_env_t *env, int on)
{
	int rows = fx_rows_finds, row = fx_row_finds;

	if (on) {
		fx_real_ops = env->store->ops;
		fx_counted_ops = *fx_real_ops;
		fx_counted_ops.row_find = fx_c_row_find;
		fx_counted_ops.rows_find = fx_c_rows_find;
		env->store->ops = &fx_counted_ops;
	} else {
		env->store->ops = fx_real_ops;
	}
	/* Counted from on; kept after off. */
	fx_row_finds = on ? 0 : row;
	fx_rows_finds = on ? 0 : rows;
}

/* PostgreSQL: the round trips on S's own connection, from libpq's trace
 * of the messages it sends (a Sync ends each statement sent with
 * parameters, or a pipeline; a Query is a statement without). */
static FILE *fx_trace;

static void fx_trace_s(fx_env_t *env, int on)
{
	PGconn *conn = tbx_outbox_pg(env->store)->conn;

	cr_assert(conn);
	if (on) {
		cr_assert((fx_trace = tmpfile()));
		PQtrace(conn, fx_trace);
		PQsetTraceFlags(conn, PQTRACE_SUPPRESS_TIMESTAMPS);
	} else {
		PQuntrace(conn);
	}
}

static int fx_trace_round_trips(void)
{
	char line[4096];
	int n = 0;

	rewind(fx_trace);
	while (fgets(line, sizeof(line), fx_trace))
		if (strncmp(line, "F\t", 2) == 0 &&
		    (strstr(line, "\tSync") || strstr(line, "\tQuery\t")))
			n++;
	fclose(fx_trace);
	fx_trace = NULL;
	return n;
}

/* A row of every kind the sweeper tells apart: one rows_find() reads
 * them all (one round trip on PostgreSQL), where it was one row_find()
 * per registration. */
Test(sweep, a_pass_reads_the_rows_of_its_registrations_at_once)
{
	fx_env_t env;
	tbx__row_t won, lost, orphan, flight, won2;
	tbx__sweep_stats_t st;
	int pg = tt_pg_tier();

	fx_env_open(&env, 0);
	fx_row_insert(&env, "m1", 2);
	fx_row_insert(&env, "m2", 1);
	fx_row_insert(&env, "m3", 1);
	fx_attempt(&env, "m1", 0, &won);
	fx_attempt(&env, "m1", 0, &lost);
	fx_attempt(&env, "gone", 3, &orphan);
	fx_attempt(&env, "m2", 0, &flight);
	fx_attempt(&env, "m3", 0, &won2);
	cr_assert_eq(fx_record(&env, &won), 1);
	cr_assert_eq(fx_record(&env, &lost), 0);
	cr_assert_eq(fx_record(&env, &won2), 1);

	if (pg) {
		tbx__row_hit_t hit;
		const char *none[] = {"none"};

		/* Prepared once per connection: not the sweep's. */
		cr_assert_eq(
		    tbx_outbox_rows_find(env.store, GRP, none, 1, &hit),
		    TBX_OK);
		/* Before the counting: it swaps S's table. */
		fx_trace_s(&env, 1);
	}
	fx_count_finds(&env, 1);
	st = fx_sweep(&env, 100);
	fx_count_finds(&env, 0);
	if (pg) {
		int trips;

		fx_trace_s(&env, 0);
		trips = fx_trace_round_trips();
		cr_log_info("S round trips for a pass of %zu registrations: "
			    "%d",
			    st.examined, trips);
		cr_expect_eq(trips, 1, "S round trips for %zu registrations",
			     st.examined);
	}
	cr_expect_eq(fx_rows_finds, 1, "one rows_find for the pass");
	cr_expect_eq(fx_row_finds, 0, "no row_find per registration");

	cr_assert_eq(st.examined, 5);
	cr_assert_eq(st.winners, 2);
	cr_assert_eq(st.orphans, 2);
	cr_assert_eq(st.in_flight, 1);
	cr_assert_eq(st.tokens_deleted, 5);
	cr_assert_eq(fx_tokens_left(&env, &won), 2);
	cr_assert_eq(fx_tokens_left(&env, &won2), 1);
	cr_assert_eq(fx_tokens_left(&env, &flight), 1);
	cr_assert_eq(fx_tokens_left(&env, &lost), 0);
	cr_assert_eq(fx_tokens_left(&env, &orphan), 0);
	cr_assert_eq(fx_regs(&env, GRP), 1, "the one in flight");
	/* Nothing to read: no call at all. */
	fx_count_finds(&env, 1);
	cr_assert_eq(
	    tbx_tokens_sweep(env.tokens, env.store, "nobody", 100, &st),
	    TBX_OK);
	cr_expect_eq(fx_rows_finds + fx_row_finds, 0);
	fx_count_finds(&env, 0);
	tbx__row_clear(&won);
	tbx__row_clear(&lost);
	tbx__row_clear(&orphan);
	tbx__row_clear(&flight);
	tbx__row_clear(&won2);
	tt_sweep_env_close(&env);
}

/*
 * A pass longer than one read (TBX__SWEEP_FIND_MAX ids): every
 * registration is judged by its own row, in both reads -- winners lose
 * their registration and keep their tokens, attempts in flight keep both,
 * losers and attempts without a row lose both.
 */
Test(sweep, a_pass_of_several_reads_judges_every_registration, .timeout = 300)
{
	enum { N = TBX__SWEEP_FIND_MAX + 60 };
	static tbx__row_t rows[N];
	static tbx__mint_item_t items[N];
	static tbx__mint_req_t reqs[N];
	fx_env_t env;
	tbx__sweep_stats_t st;
	int64_t seq, left;
	size_t want_left = 0;

	fx_env_open(&env, 0);
	/* i % 4: 0 the winner, 1 a loser (the row names another attempt),
	 * 2 no row, 3 in flight (a row without attempt). */
	cr_assert_eq(tbx_outbox_begin(env.store), TBX_OK);
	for (size_t i = 0; i < N; i++) {
		tbx__row_t *row = &rows[i];

		tbx__row_init(row);
		snprintf(row->msg_id, sizeof(row->msg_id), "m%zu", i);
		tbx__strlcpy(row->in_topic, "in", sizeof(row->in_topic));
		tbx__uuid(row->in_token);
		cr_assert_eq(
		    tbx__row_add(row, OUT, "Pong", NULL, 0, NULL, 0, NULL, 0),
		    TBX_OK);
		if (i % 4 != 2)
			cr_assert_eq(tbx_outbox_row_insert(env.store, GRP, row),
				     TBX_OK);
		tbx__uuid(row->attempt);
		tbx__uuid(row->msgs[0].token);
		items[i] = (tbx__mint_item_t){row->msgs[0].token, OUT};
		reqs[i] =
		    (tbx__mint_req_t){row->attempt, row->msg_id, &items[i], 1};
	}
	cr_assert_eq(tbx_outbox_commit(env.store), TBX_OK);
	cr_assert_eq(tbx_tokens_mint(env.tokens, GRP, reqs, N, &seq, NULL),
		     TBX_OK);
	for (size_t i = 0; i < N; i++)
		rows[i].mint_seq = seq;
	cr_assert_eq(tbx_outbox_begin(env.store), TBX_OK);
	for (size_t i = 0; i < N; i++) {
		tbx__row_t other;
		int won = -1;

		if (i % 4 == 0)
			cr_assert_eq(tbx_outbox_row_set_attempt(env.store, GRP,
								&rows[i], &won),
				     TBX_OK);
		if (i % 4 != 1)
			continue;
		/* Another attempt, never registered, took the row. */
		other = rows[i];
		tbx__uuid(other.attempt);
		cr_assert_eq(
		    tbx_outbox_row_set_attempt(env.store, GRP, &other, &won),
		    TBX_OK);
		cr_assert_eq(won, 1);
	}
	cr_assert_eq(tbx_outbox_commit(env.store), TBX_OK);

	fx_count_finds(&env, 1);
	st = fx_sweep(&env, N);
	cr_expect_eq(fx_rows_finds, 2, "%d reads for %d registrations",
		     fx_rows_finds, N);
	cr_expect_eq(fx_row_finds, 0);
	fx_count_finds(&env, 0);
	cr_assert_eq(st.examined, N);
	cr_assert_eq(st.winners, (N + 3) / 4);
	cr_assert_eq(st.in_flight, N / 4);
	cr_assert_eq(st.orphans, N - st.winners - st.in_flight);
	cr_assert_eq(st.tokens_deleted, st.orphans);
	for (size_t i = 0; i < N; i++) {
		size_t kept = fx_tokens_left(&env, &rows[i]);

		if (i % 4 == 0 || i % 4 == 3) {
			cr_assert_eq(kept, 1, "%s (kind %zu) lost its token",
				     rows[i].msg_id, i % 4);
			want_left++;
		} else {
			cr_assert_eq(kept, 0, "%s (kind %zu) kept its token",
				     rows[i].msg_id, i % 4);
		}
	}
	cr_assert_eq(fx_regs(&env, GRP), N / 4, "the ones in flight");
	cr_assert_eq(tbx_tokens_count(env.tokens, DOWN, &left, NULL), TBX_OK);
	cr_assert_eq(left, (int64_t)want_left);
	for (size_t i = 0; i < N; i++)
		tbx__row_clear(&rows[i]);
	tt_sweep_env_close(&env);
}

/* The winner of m2 and the attempt in flight of m3 finish while the pass
 * acts on the registration before them: what the sweeper read of their
 * rows is then old ("recorded" and "no attempt yet", with the
 * registrations confirmed and the rows gone since), or new ("no row") if
 * it read them after; either way only the true orphan loses its tokens. */
typedef struct fx_finish2 {
	fx_env_t *env;
	tbx__row_t *winner, *flight;
} fx_finish2_t;

static void fx_finish_row(fx_env_t *env, tbx__row_t *row, int record)
{
	const char *attempt[] = {row->attempt};

	if (record)
		cr_assert_eq(fx_record(env, row), 1);
	cr_assert_eq(tbx_tokens_confirm(env->tokens, attempt, 1), TBX_OK);
	cr_assert_eq(tbx_outbox_begin(env->store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_delete(env->store, GRP, row->msg_id),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(env->store), TBX_OK);
}

static void fx_finish_two(void *arg)
{
	fx_finish2_t *f = arg;

	fx_finish_row(f->env, f->winner, 0);
	fx_finish_row(f->env, f->flight, 1);
}

Test(sweep, rows_that_move_on_during_the_pass_keep_their_tokens)
{
	fx_env_t env;
	tbx__row_t orphan, winner, flight;
	fx_finish2_t fin = {&env, &winner, &flight};
	fx_hooked_t hooked = {
	    {&fx_hooked_ops}, NULL, NULL, &fin, fx_finish_two};
	tbx__sweep_stats_t st;

	fx_env_open(&env, 0);
	hooked.real = env.tokens;
	fx_attempt(&env, "gone", 1, &orphan); /* the oldest: acted on first */
	usleep(3000);
	fx_row_insert(&env, "m2", 2);
	fx_attempt(&env, "m2", 0, &winner);
	cr_assert_eq(fx_record(&env, &winner), 1);
	usleep(3000);
	fx_row_insert(&env, "m3", 1);
	fx_attempt(&env, "m3", 0, &flight);

	cr_assert_eq(tbx_tokens_sweep(&hooked.base, env.store, GRP, 100, &st),
		     TBX_OK);
	cr_assert_null(hooked.after_drop, "the orphan was dropped first");
	cr_assert_eq(st.examined, 3);
	cr_assert_eq(st.orphans, 1);
	cr_assert_eq(st.tokens_deleted, 1);
	cr_assert_eq(fx_tokens_left(&env, &orphan), 0);
	cr_assert_eq(fx_tokens_left(&env, &winner), 2, "dispatched: kept");
	cr_assert_eq(fx_tokens_left(&env, &flight), 1, "dispatched: kept");
	cr_assert_eq(fx_regs(&env, GRP), 0);
	tbx__row_clear(&orphan);
	tbx__row_clear(&winner);
	tbx__row_clear(&flight);
	tt_sweep_env_close(&env);
}
