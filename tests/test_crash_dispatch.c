/*
 * The crash points of phases C to F (docs/architecture.md, "Crash
 * points"): kill, restart, check every
 * invariant (see tt_crash_case).
 */
#include <criterion/criterion.h>

#include "support.h"

/* Registrations confirmed, nothing produced yet. */
Test(crash, killed_after_confirm_dispatches_on_redelivery)
{
	tt_crash_case("C.confirmed", 0);
}

/* Produced, delivery unknown: the copy downstream is dropped. */
Test(crash, killed_while_producing_leaves_one_effect_downstream)
{
	tt_crash_case("C.produced", 0);
}

Test(crash, killed_after_delivery_redispatch_is_dropped_downstream)
{
	tt_crash_case("C.delivered", 0);
}

/* Token consumed, row still there: the row anchors recovery. */
Test(crash, killed_after_consuming_tokens_resumes_from_the_row)
{
	tt_crash_case("D.consumed", 0);
}

/* Token and row gone, offsets not committed: redelivery is skipped. */
Test(crash, killed_after_finishing_skips_the_redelivery)
{
	tt_crash_case("E.deleted", 0);
}

Test(crash, killed_after_commit_loses_nothing)
{
	tt_crash_case("F.committed", 0);
}

Test(crash, single_file_stores_survive_a_kill_after_delivery)
{
	tt_crash_case("C.delivered", 1);
}

/* One file: C confirms nothing (A's attempts have no registration) but
 * passes the point before producing. */
Test(crash, single_file_kill_before_producing_dispatches_on_redelivery)
{
	tt_crash_case("C.confirmed", 1);
}

Test(crash, single_file_kill_while_producing_leaves_one_effect_downstream)
{
	tt_crash_case("C.produced", 1);
}

/* One file: D and E commit together; afterwards neither row nor token,
 * and the redelivery is dropped. */
Test(crash, single_file_kill_after_D_and_E_skips_the_redelivery)
{
	tt_crash_case("E.deleted", 1);
}

Test(crash, single_file_kill_after_commit_loses_nothing)
{
	tt_crash_case("F.committed", 1);
}

/* finish.defer: a batch's D+E wait for the next batch's A.  Killed while
 * they wait, the rows are delivered and still there, and no offset
 * passed them: redelivery resumes them. */
Test(crash, single_file_kill_while_the_finish_waits_resumes_the_rows)
{
	tt_crash_case("E.deferred", 1);
}

/* Killed right after the second batch's A, which committed the first
 * batch's D+E with it, before either batch's offset was committed: the
 * first batch's records come again with neither row nor token (dropped),
 * the second's with its row (resumed).  One record per batch makes the
 * second A the one that carries the first batch's D+E. */
Test(crash, single_file_kill_after_the_next_A_finished_the_batch_before)
{
	tt_crash_case_with("A.committed:2", 1, "batch.max.messages=1");
}

/* finish.defer=false: D+E commit on their own at the end of the batch. */
Test(crash, single_file_kill_after_D_and_E_of_their_own)
{
	tt_crash_case_with("E.deleted", 1, "finish.defer=false");
}
