/*
 * Crash points with hop 1 on outbox.layout=batch (docs/batched-tokens.md,
 * "Crash points"): one tbx_obatch row per batch.  A worker process is
 * killed with SIGKILL at each point and restarted, and every invariant of
 * tt_crash_case holds (each handler committed once, downstream processed
 * each outgoing message once, no outbox row, token or registration left),
 * and no batch row nor tbx_cover_msg entry is left.  Records in the
 * per-message format (tbx_cover_msg) and in sets (the memory of pending
 * rows, by bit), apart and on one file; in the pg tier schemas apart and
 * joined (one connection), where finish.defer does not apply.
 */
#include <criterion/criterion.h>

#include "support.h"

/* The batch row committed, nothing minted: the restarted worker's memory
 * is empty, its gen differs, the reload finds the row and the records
 * resume it at B (joined: at C). */
Test(crash_obatch, killed_after_A_resumes_the_batch_row)
{
	tt_crash_case_rows("A.committed", 0, NULL, 0);
}

Test(crash_obatch, killed_after_A_resumes_the_batch_row_sets)
{
	tt_crash_case_rows("A.committed", 0, NULL, 1);
}

Test(crash_obatch, killed_after_A_resumes_the_batch_row_one_file)
{
	tt_crash_case_rows("A.committed", 1, NULL, 0);
}

Test(crash_obatch, killed_after_A_resumes_the_batch_row_sets_one_file)
{
	tt_crash_case_rows("A.committed", 1, NULL, 1);
}

/* The attempt's tokens registered, not recorded: a new attempt wins, the
 * first is an orphan the sweeper drops as one registration naming the
 * batch row. */
Test(crash_obatch, killed_after_minting_a_new_attempt_wins)
{
	tt_crash_case_rows("B.minted", 0, NULL, 0);
}

Test(crash_obatch, killed_after_minting_a_new_attempt_wins_sets)
{
	tt_crash_case_rows("B.minted", 0, NULL, 1);
}

/* The attempt recorded on the batch row: re-dispatched with the same
 * tokens. */
Test(crash_obatch, killed_after_recording_redispatches_the_same_tokens)
{
	tt_crash_case_rows("B.recorded", 0, NULL, 0);
}

Test(crash_obatch, killed_after_recording_redispatches_the_same_tokens_sets)
{
	tt_crash_case_rows("B.recorded", 0, NULL, 1);
}

/* The covered records' tokens consumed, the row still there: resumed,
 * nothing consumed twice, the row deleted. */
Test(crash_obatch, killed_after_consuming_resumes_from_the_row)
{
	tt_crash_case_rows("D.consumed", 0, NULL, 0);
}

Test(crash_obatch, killed_after_consuming_resumes_from_the_row_sets)
{
	tt_crash_case_rows("D.consumed", 0, NULL, 1);
}

/* The row deleted, no offset committed: the records come again with no
 * row and their tokens gone: dropped. */
Test(crash_obatch, killed_after_deleting_drops_the_redelivery)
{
	tt_crash_case_rows("E.deleted", 0, NULL, 0);
}

Test(crash_obatch, killed_after_deleting_drops_the_redelivery_sets)
{
	tt_crash_case_rows("E.deleted", 0, NULL, 1);
}

/* One file, finish.defer: killed while D+E wait for the next A. */
Test(crash_obatch, killed_while_the_finish_waits_one_file)
{
	if (tt_pg_tier())
		cr_skip_test("finish.defer is one SQLite file's");
	tt_crash_case_rows("E.deferred", 1, NULL, 1);
}

/* One file, finish.defer: killed right after the second batch's A, which
 * ran the first batch's D+E (its row deleted and forgotten). */
Test(crash_obatch, killed_after_the_next_A_finished_the_first_one_file)
{
	if (tt_pg_tier())
		cr_skip_test("finish.defer is one SQLite file's");
	tt_crash_case_rows("A.committed:2", 1, "batch.max.messages=1", 1);
}

/* One file, finish.defer off: E commits on its own. */
Test(crash_obatch, killed_after_deleting_one_file)
{
	tt_crash_case_rows("E.deleted", 1, "finish.defer=false", 0);
}
