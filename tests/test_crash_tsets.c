/*
 * Crash points with hop 1's records in the batched format (a token set
 * per partition, docs/batched-tokens.md): kill, restart, check every
 * invariant (see tt_crash_case), and that no token set is left.
 */
#include <criterion/criterion.h>

#include "support.h"

/* Bits cleared, rows still there: the rows anchor recovery, and the
 * redelivered records resume them instead of finding their bits clear. */
Test(crash_tsets, killed_after_clearing_bits_resumes_from_the_row)
{
	tt_crash_case_batched("D.consumed", 0, NULL);
}

/* A committed, nothing dispatched: the rows hold the records, whose bits
 * are still set. */
Test(crash_tsets, killed_after_A_resumes_the_rows)
{
	tt_crash_case_batched("A.committed", 0, NULL);
}

/* One file: A with B inside committed. */
Test(crash_tsets, killed_after_A_resumes_the_rows_one_file)
{
	tt_crash_case_batched("A.committed", 1, NULL);
}

/* One file, finish.defer (SQLite): killed while D+E wait for the next
 * A, the rows are delivered and their bits still set: resumed. */
Test(crash_tsets, killed_while_the_finish_waits_one_file)
{
	if (tt_pg_tier())
		cr_skip_test("finish.defer is one SQLite file's");
	tt_crash_case_batched("E.deferred", 1, NULL);
}

/* One file, finish.defer (SQLite): killed right after the second batch's
 * A, which cleared the first batch's bits with its D+E: the first
 * batch's records come again with no row and their bits clear
 * (dropped), the second's with its row (resumed). */
Test(crash_tsets, killed_after_the_next_A_cleared_the_bits_one_file)
{
	if (tt_pg_tier())
		cr_skip_test("finish.defer is one SQLite file's");
	tt_crash_case_batched("A.committed:2", 1, "batch.max.messages=1");
}
