/*
 * Register-cleanup (tokens/sweep.c): the sweeper reads a group's
 * registrations in T, the outbox row of each in S, and removes the
 * registration of a winner, drops orphans, and leaves attempts in flight
 * alone — also when a worker moves on between its reads and its drop.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "outbox/outbox.h"
#include "tokens/sweep.h"
#include "tokens/tokens.h"

#define GRP  "g1" /* the sending group, whose worker sweeps */
#define OUT  "out"
#define DOWN "g2" /* the group downstream, subscribed to OUT */

static char dir[64];

typedef struct fx_env {
	tbx_outbox_t *store;
	tbx_tokens_t *tokens;
} fx_env_t;

static void fx_setup(void)
{
	tbx__strlcpy(dir, "/tmp/tbx-sweep-XXXXXX", sizeof(dir));
	cr_assert(mkdtemp(dir), "mkdtemp");
	tbx__log_setup(TBX_LOG_ERR - 1, "test");
}

static void fx_teardown(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[512];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

static const char *fx_path(const char *name)
{
	static char buf[4][512];
	static int slot;
	char *p = buf[slot++ & 3];

	snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
	return p;
}

/* S and T in two files, or in one file sharing S's connection. */
static void fx_env_open(fx_env_t *env, int one_file)
{
	const char *s = fx_path(one_file ? "all.db" : "s.db");
	const char *t = fx_path(one_file ? "all.db" : "t.db");
	char err[512];
	int64_t since;

	cr_assert_eq(tbx_outbox_open(s, NULL, &env->store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_tokens_sqlite_open(
			 t, NULL, one_file ? tbx_outbox_db(env->store) : NULL,
			 &env->tokens, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_tokens_subscribe(env->tokens, OUT, DOWN, &since),
		     TBX_OK);
}

static void fx_env_close(fx_env_t *env)
{
	tbx_tokens_close(env->tokens);
	tbx_outbox_close(env->store);
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
	fx_env_close(&env);
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
	fx_env_close(&env);
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
	fx_env_close(&env);
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
	fx_env_close(&env);
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
	return tbx_tokens_drop_attempt(fx_real(t), attempt, dropped, deleted);
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
	    {&fx_hooked_ops}, NULL, fx_worker_finishes, &race};
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
	fx_env_close(&env);
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
	fx_env_close(&env);
}

Test(sweep, sweep_is_bounded_and_takes_the_oldest_first)
{
	fx_env_t env;
	tbx__row_t orphans[3];
	tbx__sweep_stats_t st;
	sqlite3 *db;
	char sql[160];

	fx_env_open(&env, 0);
	for (int i = 0; i < 3; i++) {
		char id[8];
		snprintf(id, sizeof(id), "m%d", i);
		fx_attempt(&env, id, 1, &orphans[i]);
	}
	/* Registered at times 3, 2, 1 ms: m2 is the oldest. */
	cr_assert_eq(sqlite3_open(fx_path("t.db"), &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	for (int i = 0; i < 3; i++) {
		snprintf(sql, sizeof(sql),
			 "UPDATE tbx_registrations SET created_ms = %d WHERE "
			 "msg_id = 'm%d'",
			 3 - i, i);
		cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL),
			     SQLITE_OK);
	}
	sqlite3_close(db);
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
	fx_env_close(&env);
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
	fx_env_close(&env);
}

Test(sweep, nothing_to_sweep_is_a_clean_pass)
{
	fx_env_t env;
	tbx__sweep_stats_t st;

	fx_env_open(&env, 0);
	st = fx_sweep(&env, 100);
	cr_assert_eq(st.examined, 0);
	cr_assert_eq(st.winners + st.orphans + st.in_flight, 0);
	fx_env_close(&env);
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
	fx_env_close(&env);
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
	fx_env_close(&env);
}
