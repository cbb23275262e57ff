/*
 * The crash points of phases G, A and B (docs/architecture.md, "Crash
 * points"): a worker process is killed
 * with SIGKILL at each point, restarted, and every invariant is checked
 * (tt_crash_case): each handler committed once, downstream processed each
 * outgoing message once, no outbox row, token or registration left.
 */
#include <criterion/criterion.h>

#include "support.h"

/* Nothing persisted: the token is still there, the message is processed
 * again. */
Test(crash, killed_inside_the_handler_processes_again)
{
	tt_crash_case("A.handled", 0);
}

Test(crash, killed_before_A_commits_processes_again)
{
	tt_crash_case("A.before_commit", 0);
}

/* A row without tokens: recovery resumes at B and skips the handler. */
Test(crash, killed_after_A_commits_resumes_at_B)
{
	tt_crash_case("A.committed", 0);
}

/* Tokens registered but not recorded: a new attempt wins, the old
 * tokens are orphans the sweeper removes. */
Test(crash, killed_after_minting_leaves_orphans_that_are_swept)
{
	tt_crash_case("B.minted", 0);
}

/* Row recorded: re-dispatch with the same ids and tokens. */
Test(crash, killed_after_recording_redispatches_same_tokens)
{
	tt_crash_case("B.recorded", 0);
}

/* One file for every store: B happens inside A.  A kill in A leaves
 * nothing (no row, no attempt, no token); a kill after A's commit leaves
 * the row with its attempt and tokens, and redelivery goes straight to C
 * with them. */
Test(crash, single_file_stores_survive_a_kill_after_A)
{
	tt_crash_case("A.committed", 1);
}

Test(crash, single_file_kill_inside_the_handler_leaves_no_token)
{
	tt_crash_case("A.handled", 1);
}

Test(crash, single_file_kill_before_A_commits_leaves_no_token)
{
	tt_crash_case("A.before_commit", 1);
}

Test(crash, single_file_kill_after_the_guard_marker_processes_once)
{
	tt_crash_case("G.marked", 1);
}

/* One file: B's two transactions and D's are not reached; a worker armed
 * to die there finishes everything alive, and nothing is registered. */
Test(crash, single_file_never_reaches_B_or_D)
{
	tt_crash_case("!B.minted,B.recorded,D.consumed", 1);
}

/* G's marker committed, A not begun: the batch is taken as suspect and
 * processed one record at a time; nothing is lost or repeated. */
Test(crash, killed_after_the_guard_marker_processes_once)
{
	tt_crash_case("G.marked", 0);
}
