/*
 * Crash points of register-cleanup's pass over token sets
 * (tokens/sweep.c, sweep_sets()): `sweep.confirmed` after the T
 * transaction that deleted a winner's registration, `sweep.dropped`
 * after the one that deleted an orphaned attempt's sets and its
 * registration.  A process killed at either, at every passage of a pass,
 * must leave the stores so that a second pass ends as one pass without a
 * kill: no set row of a live attempt dropped (the recorded winner's, the
 * one not yet recorded), each orphan's rows and registration gone exactly
 * once, nothing left behind, and the second pass counting only what the
 * first left.  A drop whose transaction fails between deleting the sets
 * and deleting the registration (a trigger refusing the second delete)
 * leaves both, and the next pass drops them.
 *
 * The pass runs in a child process (fork) with TBX_CRASH_AT armed, on
 * stores it opens itself; S and T in two files or in one (S's
 * connection); in the pg tier (TBX_PG_TIER=1) two schemas, apart or
 * joined.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/crash.h"
#include "support.h"
#include "sweep_fixture.h"
#include "tokens/sweep.h"

#define GRP   "g1"  /* the sending group, whose pass it is */
#define OUT   "out" /* the topic the sets are minted for */
#define DOWN  "g2"  /* groups downstream, subscribed to OUT */
#define DOWN2 "g3"

/* Every case on separate stores and on one. */
#define EACH_LAYOUT(one) for (int one = 0; one < 2; one++)

/*
 * The registrations of one pass, oldest first: the recorded winner of a
 * row, the loser of that row, an attempt whose row is gone, and one
 * minted for a row that records no attempt yet.  The pass confirms the
 * first (sweep.confirmed, passage 1), drops the second and the third
 * (sweep.dropped, passages 1 and 2) and leaves the fourth.
 */
typedef struct scene {
	tt_sweep_env_t env;
	tt_set_attempt_t won, lost, gone, flying;
} scene_t;

static void scene_age(scene_t *s, const tt_set_attempt_t *a, int ms)
{
	char sql[200];

	snprintf(sql, sizeof(sql),
		 "UPDATE tbx_breg SET created_ms = %d WHERE attempt = '%.36s'",
		 ms, a->id);
	tt_store_exec(s->env.t_desc, sql);
}

static void scene_open(scene_t *s, int one_file)
{
	char row[TBX_UUID_LEN + 1], flying[TBX_UUID_LEN + 1];
	char none[TBX_UUID_LEN + 1];

	tt_sweep_env_open(&s->env, NULL, "csweep", one_file, OUT,
			  (const char *const[]){DOWN, DOWN2, NULL});
	tt_brow_insert(&s->env, GRP, OUT, row);
	cr_assert_eq(tt_sets_mint(&s->env, GRP, OUT, row, 9, &s->won), 4);
	cr_assert_eq(tt_sets_mint(&s->env, GRP, OUT, row, 9, &s->lost), 4);
	cr_assert_eq(tt_sets_record(&s->env, GRP, OUT, row, &s->won), 1);
	tbx__uuid(none);
	cr_assert_eq(tt_sets_mint(&s->env, GRP, OUT, none, 9, &s->gone), 4);
	tt_brow_insert(&s->env, GRP, OUT, flying);
	cr_assert_eq(tt_sets_mint(&s->env, GRP, OUT, flying, 9, &s->flying), 4);
	scene_age(s, &s->won, 10);
	scene_age(s, &s->lost, 11);
	scene_age(s, &s->gone, 12);
	scene_age(s, &s->flying, 13);
}

static int64_t t_count(scene_t *s, const char *sql)
{
	return tt_count(s->env.t_desc, sql);
}

/* What every pass, killed or not, must leave once a pass has finished:
 * the live attempts' set rows all there, the orphans' gone, the winner's
 * registration gone, the one in flight kept, and nothing else. */
static void scene_check_done(scene_t *s, int one)
{
	cr_assert_eq(tt_sets_rows(&s->env, &s->won), 4, "layout %d", one);
	cr_assert_eq(tt_sets_breg(&s->env, &s->won), 0, "layout %d", one);
	cr_assert_eq(tt_sets_rows(&s->env, &s->flying), 4);
	cr_assert_eq(tt_sets_breg(&s->env, &s->flying), 1);
	cr_assert_eq(tt_sets_rows(&s->env, &s->lost), 0);
	cr_assert_eq(tt_sets_breg(&s->env, &s->lost), 0);
	cr_assert_eq(tt_sets_rows(&s->env, &s->gone), 0);
	cr_assert_eq(tt_sets_breg(&s->env, &s->gone), 0);
	cr_assert_eq(t_count(s, "SELECT count(*) FROM tbx_tset"), 8,
		     "the live attempts' rows only");
	cr_assert_eq(t_count(s, "SELECT count(*) FROM tbx_breg"), 1);
	/* Every bit of the live attempts still set: nothing cleared. */
	cr_assert_eq(t_count(s, "SELECT count(*) FROM tbx_tset WHERE nbits "
				"<> 9"),
		     0);
}

static tbx__sweep_stats_t scene_pass(scene_t *s)
{
	tbx__sweep_stats_t st;

	cr_assert_eq(
	    tbx_tokens_sweep(s->env.tokens, s->env.store, GRP, 100, &st),
	    TBX_OK);
	return st;
}

/*
 * Runs one pass in a child process with TBX_CRASH_AT=@p rule, on stores
 * of its own (the parent's are closed meanwhile, as a process that dies
 * leaves its files to the next).  @returns the child's wait status.
 */
static int pass_killed(scene_t *s, const char *rule)
{
	int status = 0;
	pid_t pid;

	tt_sweep_stores_close(&s->env);
	fflush(NULL);
	pid = fork();
	cr_assert(pid >= 0, "fork");
	if (pid == 0) {
		tbx__sweep_stats_t st;
		char err[512] = "";
		int rc;

		setenv("TBX_CRASH_AT", rule, 1);
		tbx__crashpoints_rearm();
		if (tt_sweep_stores_open(&s->env, err, sizeof(err))) {
			fprintf(stderr, "child: %s\n", err);
			_exit(3);
		}
		rc = tbx_tokens_sweep(s->env.tokens, s->env.store, GRP, 100,
				      &st);
		/* Not killed: the rule never matched. */
		_exit(rc ? 4 : 5);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	{
		char err[512] = "";
		cr_assert_eq(tt_sweep_stores_open(&s->env, err, sizeof(err)),
			     TBX_OK, "%s", err);
	}
	return status;
}

static void assert_killed(int status, const char *rule, int one)
{
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "layout %d, %s: the pass was not killed (status %d)", one,
		  rule, status);
}

/* Killed right after confirming the winner: its registration is gone,
 * its sets kept; the orphans are untouched, and the second pass drops
 * both, each once. */
Test(crash_sweep_sets, killed_after_confirming_a_winner, .timeout = 120)
{
	EACH_LAYOUT(one)
	{
		scene_t s;
		tbx__sweep_stats_t st;

		scene_open(&s, one);
		assert_killed(pass_killed(&s, "sweep.confirmed"),
			      "sweep.confirmed", one);
		cr_assert_eq(tt_sets_breg(&s.env, &s.won), 0, "layout %d", one);
		cr_assert_eq(tt_sets_rows(&s.env, &s.won), 4);
		cr_assert_eq(tt_sets_breg(&s.env, &s.lost), 1);
		cr_assert_eq(tt_sets_rows(&s.env, &s.lost), 4);
		cr_assert_eq(tt_sets_breg(&s.env, &s.gone), 1);
		cr_assert_eq(tt_sets_rows(&s.env, &s.gone), 4);
		st = scene_pass(&s);
		cr_assert_eq(st.set_examined, 3, "layout %d", one);
		cr_assert_eq(st.set_winners, 0, "confirmed by the first");
		cr_assert_eq(st.set_orphans, 2);
		cr_assert_eq(st.set_rows_deleted, 8, "2 attempts x 4 rows");
		cr_assert_eq(st.set_in_flight, 1);
		cr_assert_eq(st.set_unchecked, 0);
		scene_check_done(&s, one);
		tt_sweep_env_close(&s.env);
	}
}

/* Killed after each orphan's drop in turn: what was dropped is gone
 * whole (sets of both groups and the registration), what was not is
 * whole, and the second pass drops only the rest. */
Test(crash_sweep_sets, killed_after_dropping_each_orphan, .timeout = 120)
{
	static const char *const rules[] = {"sweep.dropped:1",
					    "sweep.dropped:2"};

	EACH_LAYOUT(one)
	for (int k = 0; k < 2; k++) {
		scene_t s;
		tbx__sweep_stats_t st;

		scene_open(&s, one);
		assert_killed(pass_killed(&s, rules[k]), rules[k], one);
		cr_assert_eq(tt_sets_breg(&s.env, &s.won), 0, "layout %d", one);
		cr_assert_eq(tt_sets_rows(&s.env, &s.won), 4);
		cr_assert_eq(tt_sets_breg(&s.env, &s.lost), 0);
		cr_assert_eq(tt_sets_rows(&s.env, &s.lost), 0);
		cr_assert_eq(tt_sets_breg(&s.env, &s.gone), k == 0 ? 1 : 0,
			     "layout %d, %s", one, rules[k]);
		cr_assert_eq(tt_sets_rows(&s.env, &s.gone), k == 0 ? 4 : 0);
		cr_assert_eq(tt_sets_breg(&s.env, &s.flying), 1);
		cr_assert_eq(tt_sets_rows(&s.env, &s.flying), 4);
		st = scene_pass(&s);
		cr_assert_eq(st.set_examined, k == 0 ? 2 : 1, "layout %d, %s",
			     one, rules[k]);
		cr_assert_eq(st.set_winners, 0);
		cr_assert_eq(st.set_orphans, k == 0 ? 1 : 0);
		cr_assert_eq(st.set_rows_deleted, k == 0 ? 4 : 0);
		cr_assert_eq(st.set_in_flight, 1);
		scene_check_done(&s, one);
		tt_sweep_env_close(&s.env);
	}
}

/* A kill at any passage of any sweep point (a prefix rule with
 * certainty fires at the first): the same end after a second pass, and
 * a third finds nothing to do. */
Test(crash_sweep_sets, a_second_pass_after_any_kill_ends_the_same,
     .timeout = 120)
{
	EACH_LAYOUT(one)
	{
		scene_t s;
		tbx__sweep_stats_t st;

		scene_open(&s, one);
		assert_killed(pass_killed(&s, "sweep.*@1"), "sweep.*@1", one);
		(void)scene_pass(&s);
		scene_check_done(&s, one);
		st = scene_pass(&s);
		cr_assert_eq(st.set_examined, 1, "layout %d", one);
		cr_assert_eq(st.set_in_flight, 1);
		cr_assert_eq(st.set_orphans + st.set_winners, 0);
		scene_check_done(&s, one);
		tt_sweep_env_close(&s.env);
	}
}

/* A pass not killed anywhere (the rule names no point it passes) is the
 * reference the killed passes are held to. */
Test(crash_sweep_sets, an_unmatched_rule_lets_the_pass_finish, .timeout = 120)
{
	EACH_LAYOUT(one)
	{
		scene_t s;
		int status;

		scene_open(&s, one);
		status = pass_killed(&s, "sweep.dropped:3");
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 5,
			  "layout %d: status %d", one, status);
		scene_check_done(&s, one);
		tt_sweep_env_close(&s.env);
	}
}

/* Arms a failure of the orphan @p a's drop between its two deletes: on
 * SQLite the registration's delete (after the sets'), on PostgreSQL the
 * sets' (after the registration's, in the one statement). */
static void fail_drop_of(scene_t *s, const tt_set_attempt_t *a, int arm)
{
	char sql[600];

	if (!tt_pg_tier()) {
		if (arm)
			snprintf(
			    sql, sizeof(sql),
			    "CREATE TRIGGER tbx_test_fail BEFORE DELETE ON "
			    "tbx_breg WHEN old.attempt = '%.36s' BEGIN "
			    "SELECT RAISE(ABORT, 'refused by the test'); "
			    "END",
			    a->id);
		else
			snprintf(sql, sizeof(sql),
				 "DROP TRIGGER tbx_test_fail");
		tt_store_exec(s->env.t_desc, sql);
		return;
	}
	if (!arm) {
		tt_store_exec(s->env.t_desc,
			      "DROP TRIGGER tbx_test_fail ON tbx_tset");
		return;
	}
	snprintf(sql, sizeof(sql),
		 "CREATE FUNCTION \"%s\".tbx_test_fail() RETURNS trigger "
		 "LANGUAGE plpgsql AS $f$BEGIN RAISE EXCEPTION 'refused by "
		 "the test'; END$f$",
		 tt_store_schema(s->env.t_desc));
	tt_store_exec(s->env.t_desc, sql);
	snprintf(sql, sizeof(sql),
		 "CREATE TRIGGER tbx_test_fail BEFORE DELETE ON tbx_tset FOR "
		 "EACH ROW WHEN (OLD.set_id = '%.36s') EXECUTE FUNCTION "
		 "\"%s\".tbx_test_fail()",
		 a->sets[1], tt_store_schema(s->env.t_desc));
	tt_store_exec(s->env.t_desc, sql);
}

/* The drop of an orphan fails inside its transaction: the pass stops
 * with the error, the orphan keeps every set row and its registration
 * (never rows without the registration that licenses their drop), what
 * the pass did before stands, and the next pass finishes the work. */
Test(crash_sweep_sets, a_failed_drop_leaves_the_orphan_whole, .timeout = 120)
{
	EACH_LAYOUT(one)
	{
		scene_t s;
		tbx__sweep_stats_t st;
		int err;

		scene_open(&s, one);
		fail_drop_of(&s, &s.lost, 1);
		err =
		    tbx_tokens_sweep(s.env.tokens, s.env.store, GRP, 100, &st);
		cr_assert_neq(err, TBX_OK, "layout %d: the drop was refused",
			      one);
		cr_assert_eq(tt_sets_breg(&s.env, &s.won), 0, "layout %d", one);
		cr_assert_eq(tt_sets_breg(&s.env, &s.lost), 1, "layout %d",
			     one);
		cr_assert_eq(tt_sets_rows(&s.env, &s.lost), 4, "layout %d",
			     one);
		cr_assert_eq(tt_sets_breg(&s.env, &s.gone), 1);
		cr_assert_eq(tt_sets_rows(&s.env, &s.gone), 4);
		fail_drop_of(&s, &s.lost, 0);
		st = scene_pass(&s);
		cr_assert_eq(st.set_orphans, 2, "layout %d", one);
		cr_assert_eq(st.set_rows_deleted, 8);
		cr_assert_eq(st.set_winners, 0);
		scene_check_done(&s, one);
		tt_sweep_env_close(&s.env);
	}
}
