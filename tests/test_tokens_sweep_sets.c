/*
 * Register-cleanup of token sets (tokens/sweep.c): a pass also walks the
 * group's tbx_breg registrations, oldest first, and judges each against
 * the group's batch rows (tbx_obatch): the row records the same attempt
 * -> the registration alone goes; no attempt yet -> left; another
 * attempt, or no row -> an orphan, dropped as ONE row (its sets, every
 * group's, and the registration) whatever its number of messages.  A
 * service store that cannot say what its batch rows hold never makes an
 * orphan.  Each case is built directly: sets minted with
 * tbx_tokens_sets_mint(), batch rows with the obatch operations.  The
 * worker's pass (tbx_worker_cleanup(), its stats) and `tokenbox inspect
 * status --check` are seen on the same cases.
 *
 * S and T in two files or in one (S's connection); in the pg tier
 * (TBX_PG_TIER=1) two schemas, apart or joined, on PostgreSQL's batch
 * rows (service version 4).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "outbox/outbox.h"
#include "store/pg.h"
#include "cli_child.h"
#include "support.h"
#include "sweep_fixture.h"
#include "tokens/sweep.h"
#include "tokens/tokens.h"

#define GRP   "g1"  /* the sending group, whose worker sweeps */
#define OUT   "out" /* the topic the sets are minted for */
#define DOWN  "g2"  /* a group downstream, subscribed to OUT */
#define DOWN2 "g3"  /* another one */

typedef tt_sweep_env_t fx_env_t;

static void fx_env_open(fx_env_t *env, int one_file)
{
	tt_sweep_env_open(env, NULL, "bsweep", one_file, OUT,
			  (const char *const[]){DOWN, DOWN2, NULL});
}

/* A count on the token store (the file or the schema). */
static int64_t fx_t_count(fx_env_t *env, const char *sql)
{
	return tt_count(env->t_desc, sql);
}

/* A: the group's batch row @p row_id, without an attempt. */
static void fx_row(fx_env_t *env, char row_id[TBX_UUID_LEN + 1])
{
	tt_brow_insert(env, GRP, OUT, row_id);
}

/* One attempt of B's first half: two sets (partitions 0 and 1) of OUT,
 * @p nbits messages each, minted and registered for @p row_id. */
typedef tt_set_attempt_t attempt_t;

static void fx_mint(fx_env_t *env, const char *row_id, uint32_t nbits,
		    attempt_t *a)
{
	cr_assert_eq(tt_sets_mint(env, GRP, OUT, row_id, nbits, a), 4,
		     "2 sets x 2 groups");
}

/* B's second half: the attempt recorded on the row.  @returns won. */
static int fx_record(fx_env_t *env, const char *row_id, const attempt_t *a)
{
	return tt_sets_record(env, GRP, OUT, row_id, a);
}

static tbx__sweep_stats_t fx_sweep(fx_env_t *env, size_t limit)
{
	tbx__sweep_stats_t st;

	cr_assert_eq(tbx_tokens_sweep(env->tokens, env->store, GRP, limit, &st),
		     TBX_OK);
	return st;
}

/* Every case on separate stores and on one. */
#define EACH_LAYOUT(one) for (int one = 0; one < 2; one++)

/* A loser crashed before dropping its own sets: swept as one row, its
 * sets of both groups gone; the winner's sets are untouched and only
 * its registration goes (recorded, awaiting its confirm). */
Test(sweep_sets, an_orphaned_attempt_is_swept_as_one_row)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t won, lost;
		char row[TBX_UUID_LEN + 1];
		tbx__sweep_stats_t st;

		fx_env_open(&env, one);
		fx_row(&env, row);
		fx_mint(&env, row, 300, &won);
		fx_mint(&env, row, 300, &lost);
		cr_assert_eq(fx_record(&env, row, &won), 1);
		cr_assert_eq(fx_record(&env, row, &lost), 0);
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 2, "layout %d", one);
		cr_assert_eq(st.set_orphans, 1);
		cr_assert_eq(st.set_rows_deleted, 4, "2 sets x 2 groups");
		cr_assert_eq(st.set_winners, 1);
		cr_assert_eq(st.set_in_flight + st.set_unchecked, 0);
		/* Counted apart from the per-message tokens. */
		cr_assert_eq(st.examined + st.orphans + st.tokens_deleted, 0);
		cr_assert_eq(tt_sets_rows(&env, &lost), 0);
		cr_assert_eq(tt_sets_breg(&env, &lost), 0);
		cr_assert_eq(tt_sets_rows(&env, &won), 4, "in flight: kept");
		cr_assert_eq(tt_sets_breg(&env, &won), 0, "the winner's alone");
		/* Nothing left to do. */
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 0);
		cr_assert_eq(tt_sets_rows(&env, &won), 4);
		tt_sweep_env_close(&env);
	}
}

/* A registration whose row is gone (finished, or never recorded with
 * it) is an orphan; one whose row records it is a winner. */
Test(sweep_sets, no_row_is_an_orphan_and_the_same_attempt_a_winner)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t gone, won;
		char row[TBX_UUID_LEN + 1], none[TBX_UUID_LEN + 1];
		tbx__sweep_stats_t st;

		fx_env_open(&env, one);
		tbx__uuid(none);
		fx_mint(&env, none, 1, &gone);
		fx_row(&env, row);
		fx_mint(&env, row, 65536, &won);
		cr_assert_eq(fx_record(&env, row, &won), 1);
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 2);
		cr_assert_eq(st.set_orphans, 1);
		cr_assert_eq(st.set_rows_deleted, 4);
		cr_assert_eq(st.set_winners, 1);
		cr_assert_eq(tt_sets_rows(&env, &gone), 0);
		cr_assert_eq(tt_sets_breg(&env, &gone), 0);
		cr_assert_eq(tt_sets_rows(&env, &won), 4);
		cr_assert_eq(tt_sets_breg(&env, &won), 0);
		tt_sweep_env_close(&env);
	}
}

/* An attempt between mint and record (its row has no attempt yet) is
 * left, young or old: the rule is the row's, not an age (as for
 * per-message tokens).  Recorded, it is then a winner. */
Test(sweep_sets, an_attempt_not_yet_recorded_is_left_however_old)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t a;
		char row[TBX_UUID_LEN + 1], sql[400];
		tbx__sweep_stats_t st;

		fx_env_open(&env, one);
		fx_row(&env, row);
		fx_mint(&env, row, 5, &a);
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 1);
		cr_assert_eq(st.set_in_flight, 1);
		cr_assert_eq(st.set_orphans + st.set_winners, 0);
		cr_assert_eq(tt_sets_breg(&env, &a), 1);
		cr_assert_eq(tt_sets_rows(&env, &a), 4);
		/* A day old: still the row's to decide. */
		snprintf(sql, sizeof(sql),
			 "UPDATE tbx_breg SET created_ms = 1 WHERE attempt = "
			 "'%.36s'",
			 a.id);
		tt_store_exec(env.t_desc, sql);
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_in_flight, 1);
		cr_assert_eq(tt_sets_breg(&env, &a), 1);
		cr_assert_eq(tt_sets_rows(&env, &a), 4);
		cr_assert_eq(fx_record(&env, row, &a), 1);
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_winners, 1);
		cr_assert_eq(tt_sets_breg(&env, &a), 0);
		cr_assert_eq(tt_sets_rows(&env, &a), 4);
		tt_sweep_env_close(&env);
	}
}

/* A pass takes at most its limit, oldest first, and the worker's cursor
 * goes on after a full pass of attempts in flight to the orphans behind
 * them. */
Test(sweep_sets, passes_are_bounded_and_reach_what_is_behind)
{
	fx_env_t env;
	attempt_t flight[3], orphan;
	char rows[3][TBX_UUID_LEN + 1], none[TBX_UUID_LEN + 1], sql[400];
	tbx__sweep_cursor_t cur;
	tbx__sweep_stats_t st;

	fx_env_open(&env, 0);
	for (int i = 0; i < 3; i++) {
		fx_row(&env, rows[i]);
		fx_mint(&env, rows[i], 2, &flight[i]);
		snprintf(sql, sizeof(sql),
			 "UPDATE tbx_breg SET created_ms = %d WHERE attempt = "
			 "'%.36s'",
			 10 + i, flight[i].id);
		tt_store_exec(env.t_desc, sql);
	}
	tbx__uuid(none);
	fx_mint(&env, none, 2, &orphan);
	memset(&cur, 0, sizeof(cur));
	cr_assert_eq(
	    tbx__tokens_sweep_resume(env.tokens, env.store, GRP, 3, &cur, &st),
	    TBX_OK);
	cr_assert_eq(st.set_examined, 3);
	cr_assert_eq(st.set_in_flight, 3);
	cr_assert_eq(tt_sets_breg(&env, &orphan), 1);
	cr_assert_eq(
	    tbx__tokens_sweep_resume(env.tokens, env.store, GRP, 3, &cur, &st),
	    TBX_OK);
	cr_assert_eq(st.set_examined, 1);
	cr_assert_eq(st.set_orphans, 1);
	cr_assert_eq(tt_sets_breg(&env, &orphan), 0);
	cr_assert_eq(tt_sets_rows(&env, &orphan), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(tt_sets_rows(&env, &flight[i]), 4);
	tt_sweep_env_close(&env);
}

/* A service store that cannot say what its batch rows hold (here: its
 * obatch operations taken away, as on a backend without batch rows)
 * leaves every registration unjudged, counted, and never an orphan. */
Test(sweep_sets, a_store_without_batch_rows_makes_no_orphan)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t a;
		char none[TBX_UUID_LEN + 1];
		tbx_outbox_ops_t bare;
		const tbx_outbox_ops_t *real;
		tbx__sweep_stats_t st;
		int v[1];
		tbx__reg_t reg;

		fx_env_open(&env, one);
		tbx__uuid(none);
		fx_mint(&env, none, 3, &a); /* no row: would be an orphan */
		real = env.store->ops;
		bare = *real;
		bare.obatch_load = NULL;
		env.store->ops = &bare;
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 1);
		cr_assert_eq(st.set_unchecked, 1);
		cr_assert_eq(st.set_unchecked_err, TBX_ESCHEMA);
		cr_assert_eq(st.set_orphans + st.set_winners + st.set_in_flight,
			     0);
		cr_assert_eq(tt_sets_breg(&env, &a), 1);
		cr_assert_eq(tt_sets_rows(&env, &a), 4);
		memset(&reg, 0, sizeof(reg));
		tbx__strlcpy(reg.attempt, a.id, sizeof(reg.attempt));
		tbx__strlcpy(reg.msg_id, none, sizeof(reg.msg_id));
		cr_assert_eq(tbx__sweep_sets_classify(env.store, GRP, &reg, 1,
						      v, NULL, NULL),
			     TBX_OK);
		cr_assert_eq(v[0], TBX_SWEEP_UNCHECKED);
		env.store->ops = real;
		/* With its batch rows, the same registration is an orphan
		 * (both backends have them). */
		if (real->obatch_load) {
			st = fx_sweep(&env, 100);
			cr_assert_eq(st.set_orphans, 1);
			cr_assert_eq(tt_sets_rows(&env, &a), 0);
		}
		tt_sweep_env_close(&env);
	}
}

/* unsubscribe counts the group's set rows of the topic, and removes
 * them with the subscription; another group's stay. */
Test(sweep_sets, unsubscribe_removes_the_groups_set_rows_of_the_topic)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t a;
		char row[TBX_UUID_LEN + 1];
		tbx__unsub_t u;

		fx_env_open(&env, one);
		tbx__uuid(row);
		fx_mint(&env, row, 4, &a);
		cr_assert_eq(tbx_tokens_unsubscribe(env.tokens, OUT, DOWN,
						    INT64_MAX, 0, &u),
			     TBX_OK);
		cr_assert(u.found);
		cr_assert_eq(u.set_rows, 2);
		cr_assert_eq(u.set_deleted, 0);
		cr_assert_eq(tt_sets_rows(&env, &a), 4, "a dry run");
		cr_assert_eq(tbx_tokens_unsubscribe(env.tokens, OUT, DOWN,
						    INT64_MAX, 1, &u),
			     TBX_OK);
		cr_assert(u.removed);
		cr_assert_eq(u.set_deleted, 2);
		cr_assert_eq(tt_sets_rows(&env, &a), 2, "g3's are kept");
		cr_assert_eq(fx_t_count(&env, "SELECT count(*) FROM tbx_tset "
					      "WHERE grp = '" DOWN "'"),
			     0);
		tt_sweep_env_close(&env);
	}
}

/* A listing of the batch rows that fails (here: the table dropped, as a
 * service store of an older schema opened without migrating) leaves the
 * registrations unjudged too, and the pass's per-message part stands. */
Test(sweep_sets, a_failed_listing_of_batch_rows_makes_no_orphan)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t a;
		char none[TBX_UUID_LEN + 1];
		tbx__sweep_stats_t st;

		fx_env_open(&env, one);
		tbx__uuid(none);
		fx_mint(&env, none, 3, &a);
		tt_store_exec(env.s_desc, tt_pg_tier()
					      ? "DROP TABLE tbx_obatch CASCADE"
					      : "DROP TABLE tbx_obatch");
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 1);
		cr_assert_eq(
		    st.set_unchecked, 1,
		    "layout %d: %zu in flight, %zu orphans, %zu winners", one,
		    st.set_in_flight, st.set_orphans, st.set_winners);
		cr_assert_neq(st.set_unchecked_err, TBX_OK);
		cr_assert_eq(st.set_orphans, 0);
		cr_assert_eq(tt_sets_breg(&env, &a), 1);
		cr_assert_eq(tt_sets_rows(&env, &a), 4);
		tt_sweep_env_close(&env);
	}
}

/* The worker's register-cleanup (tbx_worker_cleanup(), what its loop
 * runs every cleanup.interval.ms) sweeps an orphaned registration of
 * token sets and counts it in the worker's stats; a registration whose
 * row has no attempt yet is left and counted nowhere. */
Test(sweep_sets, the_workers_cleanup_counts_what_it_swept, .timeout = 120)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t gone, flying;
		char row[TBX_UUID_LEN + 1], none[TBX_UUID_LEN + 1];
		tt_cluster_t *c = tt_cluster_new(1);
		tbx_worker_t *w;
		tbx_stats_t st;
		size_t swept = 0;
		char err[512];

		fx_env_open(&env, one);
		tbx__uuid(none);
		fx_mint(&env, none, 5, &gone);
		/* The worker first: one on outbox.layout=record refuses to
		 * start beside a batch row of its group (consumer/layout.c);
		 * its cleanup is what is tested here. */
		w = tbx_worker_new(tt_conf(c->bootstraps, GRP, env.s_desc,
					   env.t_desc, "cleanup.interval.ms",
					   "0", NULL),
				   err, sizeof(err));
		cr_assert(w, "%s", err);
		fx_row(&env, row);
		fx_mint(&env, row, 5, &flying);
		cr_assert_eq(tbx_worker_cleanup(w, 0, &swept), TBX_OK);
		cr_assert_eq(swept, 1, "layout %d", one);
		tbx_worker_stats(w, &st);
		cr_assert_eq(st.set_orphans_swept, 1, "layout %d", one);
		cr_assert_eq(st.set_rows_swept, 4, "2 sets x 2 groups");
		cr_assert_eq(st.set_regs_unchecked, 0);
		cr_assert_eq(st.orphans_swept, 0);
		cr_assert_eq(tt_sets_breg(&env, &gone), 0);
		cr_assert_eq(tt_sets_rows(&env, &gone), 0);
		cr_assert_eq(tt_sets_breg(&env, &flying), 1, "in flight: left");
		cr_assert_eq(tt_sets_rows(&env, &flying), 4);
		/* A second pass finds nothing more: the counters stand. */
		cr_assert_eq(tbx_worker_cleanup(w, 0, &swept), TBX_OK);
		cr_assert_eq(swept, 0);
		tbx_worker_stats(w, &st);
		cr_assert_eq(st.set_orphans_swept, 1);
		cr_assert_eq(st.set_rows_swept, 4);
		tbx_worker_destroy(w);
		tt_cluster_destroy(c);
		tt_sweep_env_close(&env);
	}
}

/* Runs `tokenbox inspect` on @p env's stores with @p cmd
 * (NULL-terminated): the files, or in the pg tier the server's URL and
 * the schemas. */
static cc_result_t fx_inspect(const fx_env_t *env, const char *const *cmd)
{
	static char url[2][2200];
	const char *argv[64] = {"inspect"};
	size_t n = 1;

	argv[n++] = "-s";
	argv[n++] = tt_pg_tier()
			? tt_store_url(env->s_desc, url[0], sizeof(url[0]))
			: env->s_desc;
	if (tt_pg_tier()) {
		argv[n++] = "--schema";
		argv[n++] = tt_store_schema(env->s_desc);
	}
	argv[n++] = "-S";
	argv[n++] = tt_pg_tier()
			? tt_store_url(env->t_desc, url[1], sizeof(url[1]))
			: env->t_desc;
	if (tt_pg_tier()) {
		argv[n++] = "--tokens-schema";
		argv[n++] = tt_store_schema(env->t_desc);
	}
	for (size_t i = 0; cmd[i] && n < 63; i++)
		argv[n++] = cmd[i];
	argv[n] = NULL;
	return cc_run(argv);
}

#define FX_INSPECT(env, ...)                                                   \
	fx_inspect((env), (const char *const[]){__VA_ARGS__, NULL})

/* An orphaned registration of token sets is, alone in the stores, a
 * finding of `inspect status --check` (exit 1, named); the same
 * registration recorded by its row is none (exit 0). */
Test(sweep_sets, status_check_flags_an_orphaned_set_registration_alone,
     .timeout = 120)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t won, lost;
		char row[TBX_UUID_LEN + 1];
		cc_result_t res;

		fx_env_open(&env, one);
		/* GRP's worker has consumed its input: the store serves
		 * GRP, whose registrations inspect judges. */
		cr_assert_eq(tbx_outbox_begin(env.store), TBX_OK);
		cr_assert_eq(tbx_outbox_ingress_set(env.store, GRP, "in", 0, 8),
			     TBX_OK);
		cr_assert_eq(tbx_outbox_commit(env.store), TBX_OK);
		fx_row(&env, row);
		fx_mint(&env, row, 3, &won);
		cr_assert_eq(fx_record(&env, row, &won), 1);
		res = FX_INSPECT(&env, "status", "--check");
		cr_assert(cc_exited(res.status, 0),
			  "layout %d: the row's own attempt is no finding: "
			  "%s%s",
			  one, res.out, res.err);
		cc_result_free(&res);

		fx_mint(&env, row, 3, &lost);
		res = FX_INSPECT(&env, "status", "--check");
		cr_assert(cc_exited(res.status, 1),
			  "layout %d: another attempt's registration: %s%s",
			  one, res.out, res.err);
		cr_assert(strstr(res.out, "1 orphaned now"), "%s", res.out);
		cc_result_free(&res);
		tt_sweep_env_close(&env);
	}
}

/* A group whose only rows in the service store are batch rows
 * (tbx_obatch: no tbx_outbox, tbx_ingress or tbx_dead_letters row of it)
 * is served by the store: `status --check` judges its set registrations
 * and flags an orphan, `orphans` lists it, and `cleanup` removes it,
 * leaving the row's own attempt alone. */
Test(sweep_sets, a_group_with_batch_rows_alone_is_judged, .timeout = 120)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t won, lost;
		char row[TBX_UUID_LEN + 1];
		cc_result_t res;

		fx_env_open(&env, one);
		fx_row(&env, row);
		fx_mint(&env, row, 3, &won);
		cr_assert_eq(fx_record(&env, row, &won), 1);
		fx_mint(&env, row, 3, &lost);
		res = FX_INSPECT(&env, "status", "--check");
		cr_assert(cc_exited(res.status, 1),
			  "layout %d: an orphan of a group with batch rows "
			  "alone: %s%s",
			  one, res.out, res.err);
		cr_assert(strstr(res.out, "1 orphaned now"), "%s", res.out);
		cc_result_free(&res);
		res = FX_INSPECT(&env, "orphans", "--json");
		cr_assert(cc_exited(res.status, 0), "%s%s", res.out, res.err);
		cr_assert(strstr(res.out, lost.id), "%s", res.out);
		cr_assert(strstr(res.out, "\"checked_groups\":\t[\"" GRP "\"]"),
			  "%s", res.out);
		cc_result_free(&res);
		res = FX_INSPECT(&env, "cleanup");
		cr_assert(cc_exited(res.status, 0), "%s%s", res.out, res.err);
		cc_result_free(&res);
		cr_assert_eq(tt_sets_breg(&env, &lost), 0, "layout %d", one);
		cr_assert_eq(tt_sets_rows(&env, &lost), 0);
		cr_assert_eq(tt_sets_breg(&env, &won), 0, "the winner's alone");
		cr_assert_eq(tt_sets_rows(&env, &won), 4, "in flight: kept");
		res = FX_INSPECT(&env, "status", "--check");
		cr_assert(cc_exited(res.status, 0), "layout %d: %s%s", one,
			  res.out, res.err);
		cc_result_free(&res);
		tt_sweep_env_close(&env);
	}
}
