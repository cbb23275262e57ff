/*
 * Crash points of register-cleanup over per-message tokens, and the
 * crash-point rules themselves.  The ingress here is published with a
 * token per message (tt_crash_case), and a worker's own messages always
 * are, so the sweeper judges per-message registrations
 * (tbx_registrations) and drops their token rows (tbx_tokens).  Its steps are
 * single T transactions; a worker killed after one must leave the stores so
 * that recovery and a later sweep still end with every effect once and no token
 * or registration left.
 *
 * The sweeper's pass over token sets (tbx_breg and tbx_tset, minted
 * with tokens.format=set) has its crash points in
 * test_crash_sweep_sets.c, and the protocol's with sets in
 * test_crash_tsets.c.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"

/* Orphans of a kill after minting; a clean run records a new attempt;
 * then a worker dies right after the sweeper dropped an orphan. */
Test(crash, killed_after_the_sweeper_dropped_an_orphan)
{
	tt_crash_case("B.minted|-|sweep.dropped", 0);
}

/* A registration of the recorded attempt: the sweeper confirms it (the
 * winner) and the worker dies; C later finds nothing to confirm. */
Test(crash, killed_after_the_sweeper_confirmed_a_winner)
{
	tt_crash_case("B.recorded|sweep.confirmed", 0);
}

/* A prefix rule fires at the first point it matches: C.confirmed. */
Test(crash, a_prefix_rule_kills_at_the_first_matching_point)
{
	tt_crash_case("C.*", 0);
}

/* A probability of 1 fires at the first passage of a listed point. */
Test(crash, a_certain_probability_kills_at_the_point)
{
	tt_crash_case("Z.none:3,D.consumed@1", 0);
}

/* Runs tbx_prog_worker with TBX_CRASH_AT=@p value; returns its status and
 * the first line it wrote to stderr in @p line. */
static int run_with(const char *value, char *line, size_t size)
{
	tt_cluster_t *cluster = tt_cluster_new(1);
	char *dir = tt_tmpdir();
	char *s1 = tt_path(dir, "s1.db"), *tokens = tt_path(dir, "t.db");
	char *errf = tt_path(dir, "stderr");
	char prog[512], env[256], errenv[600];
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	int status;
	FILE *f;

	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	snprintf(env, sizeof(env), "TBX_CRASH_AT=%s", value);
	snprintf(errenv, sizeof(errenv), "%s", errf);
	char *argv[] = {"/bin/sh",
			"-c",
			"f=$1; shift; exec \"$@\" 2>\"$f\"",
			"sh",
			errenv,
			prog,
			cluster->bootstraps,
			s1,
			tokens,
			"g1",
			NULL};
	char *envv[] = {env, NULL};
	status = tt_wait(tt_spawn(argv, envv), 60);
	line[0] = '\0';
	if ((f = fopen(errf, "r"))) {
		if (!fgets(line, (int)size, f))
			line[0] = '\0';
		fclose(f);
	}
	tt_cluster_destroy(cluster);
	tt_rmrf(dir);
	free(dir);
	free(s1);
	free(tokens);
	free(errf);
	return status;
}

Test(crash, malformed_rules_stop_the_process_with_a_reason)
{
	static const struct {
		const char *value, *why;
	} bad[] = {
	    {"A.handled:0", "N in NAME:N"},
	    {"A.handled:x", "N in NAME:N"},
	    {"A.handled@0", "P in NAME@P"},
	    {"A.handled@1.5", "P in NAME@P"},
	    {"A.handled@", "empty or overlong number"},
	    {",A.handled", "empty point name"},
	    {"A*B", "'*' may only end"},
	};
	char line[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int status = run_with(bad[i].value, line, sizeof(line));
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 2,
			  "%s: status %d", bad[i].value, status);
		cr_assert(strstr(line, "TBX_CRASH_AT") &&
			      strstr(line, bad[i].why),
			  "%s: stderr '%s'", bad[i].value, line);
	}
}
