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

#include "fixture.h"
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

/*
 * tokens.format=set: hop 1's own messages in token sets (tokfmt 2), one
 * per batch row and destination partition, registered once per row in
 * tbx_breg (apart) or minted in A (one file).  Register-cleanup runs
 * before the restart resumes anything: a recorded attempt's sets must
 * survive it, an unrecorded one's are an orphan.  Each record and each
 * downstream message exactly once, every tbx-tbit naming the partition
 * its message was delivered to, nothing left in tbx_obatch, tbx_tset,
 * tbx_breg or tbx_tokens.
 */
Test(crash_obatch, own_sets_killed_after_A)
{
	tt_crash_case_rows_sets("A.committed", 0, NULL, 1);
}

/* The sets and their registration minted, the row without attempt: a
 * new attempt wins, the first is an orphan swept as one registration. */
Test(crash_obatch, own_sets_killed_after_minting)
{
	tt_crash_case_rows_sets("B.minted", 0, NULL, 1);
}

Test(crash_obatch, own_sets_killed_after_minting_per_message_records)
{
	tt_crash_case_rows_sets("B.minted", 0, NULL, 0);
}

/* The sets recorded on the row: re-dispatched with the same sets, bits
 * and partitions; register-cleanup keeps them. */
Test(crash_obatch, own_sets_killed_after_recording)
{
	tt_crash_case_rows_sets("B.recorded", 0, NULL, 1);
}

/* The registration confirmed (deleted), nothing produced yet. */
Test(crash_obatch, own_sets_killed_after_confirming)
{
	tt_crash_case_rows_sets("C.confirmed", 0, NULL, 1);
}

Test(crash_obatch, own_sets_killed_after_delivering)
{
	tt_crash_case_rows_sets("C.delivered", 0, NULL, 1);
}

Test(crash_obatch, own_sets_killed_after_consuming)
{
	tt_crash_case_rows_sets("D.consumed", 0, NULL, 1);
}

Test(crash_obatch, own_sets_killed_after_deleting)
{
	tt_crash_case_rows_sets("E.deleted", 0, NULL, 1);
}

/* One file: the sets minted in A with the row, no registration. */
Test(crash_obatch, own_sets_killed_after_A_one_file)
{
	tt_crash_case_rows_sets("A.committed", 1, NULL, 1);
}

Test(crash_obatch, own_sets_killed_after_delivering_one_file)
{
	tt_crash_case_rows_sets("C.delivered", 1, NULL, 1);
}

Test(crash_obatch, own_sets_killed_while_the_finish_waits_one_file)
{
	if (tt_pg_tier())
		cr_skip_test("finish.defer is one SQLite file's");
	tt_crash_case_rows_sets("E.deferred", 1, NULL, 1);
}

Test(crash_obatch, own_sets_killed_after_deleting_one_file_without_defer)
{
	tt_crash_case_rows_sets("E.deleted", 1, "finish.defer=false", 1);
}

Test(crash_obatch,
     own_sets_killed_after_delivering_one_file_per_message_records)
{
	tt_crash_case_rows_sets("C.delivered", 1, "finish.defer=false", 0);
}

/*
 * A loser of B: after the first run is killed at A.committed, the batch
 * rows' columns without an attempt are kept; the second run mints
 * attempt X and is killed once it recorded X (B.recorded); the rows are
 * then put back as A left them, and a trigger records X -- a real
 * attempt, its sets and registration in the token store -- on a row
 * the moment the recovering worker records its own attempt Y, whose
 * UPDATE ... WHERE attempt IS NULL then changes nothing: the worker
 * loses, drops Y's sets and registration and goes on with X's sets.  On
 * both stores: PostgreSQL's trigger is a PL/pgSQL function of its own.
 */
static void lose_b(int step, const char *s1, const char *tokens)
{
	(void)tokens;
	if (step == 0)
		cr_assert_eq(tt_store_sql_try(s1,
					      "CREATE TABLE pre AS SELECT "
					      "grp, row_id, msgs, wire FROM "
					      "tbx_obatch WHERE attempt IS "
					      "NULL",
					      NULL),
			     0);
	if (step != 1)
		return;
	cr_assert_geq(tt_count(s1, "SELECT COUNT(*) FROM tbx_obatch o JOIN "
				   "pre p USING (grp, row_id) WHERE "
				   "o.attempt IS NOT NULL"),
		      1, "the second run recorded no attempt of a row");
	cr_assert_eq(
	    tt_store_sql_try(
		s1,
		"CREATE TABLE winner AS SELECT o.grp, o.row_id, o.attempt, "
		"o.mint_seq, o.msgs, o.wire FROM tbx_obatch o JOIN pre p USING "
		"(grp, row_id) WHERE o.attempt IS NOT NULL;"
		"UPDATE tbx_obatch SET attempt = NULL, mint_seq = NULL, msgs = "
		"(SELECT p.msgs FROM pre p WHERE p.grp = tbx_obatch.grp AND "
		"p.row_id = tbx_obatch.row_id), wire = (SELECT p.wire FROM pre "
		"p WHERE p.grp = tbx_obatch.grp AND p.row_id = "
		"tbx_obatch.row_id) WHERE row_id IN (SELECT row_id FROM "
		"winner);"
		"CREATE TRIGGER lose_b BEFORE UPDATE OF attempt ON tbx_obatch "
		"WHEN OLD.attempt IS NULL AND NEW.attempt IS NOT NULL AND "
		"EXISTS (SELECT 1 FROM winner w WHERE w.grp = OLD.grp AND "
		"w.row_id = OLD.row_id AND w.attempt <> NEW.attempt) BEGIN "
		"UPDATE tbx_obatch SET attempt = w.attempt, mint_seq = "
		"w.mint_seq, msgs = w.msgs, wire = w.wire FROM winner w WHERE "
		"w.grp = OLD.grp AND w.row_id = OLD.row_id AND "
		"tbx_obatch.grp = OLD.grp AND tbx_obatch.row_id = OLD.row_id; "
		"SELECT RAISE(IGNORE); END;",
		/* PostgreSQL: the trigger writes the winner's attempt
		 * itself and skips the worker's UPDATE (a BEFORE trigger
		 * that returns NULL), which then counts no row. */
		"CREATE TABLE winner AS SELECT o.grp, o.row_id, o.attempt, "
		"o.mint_seq, o.msgs, o.wire FROM tbx_obatch o JOIN pre p USING "
		"(grp, row_id) WHERE o.attempt IS NOT NULL;"
		"UPDATE tbx_obatch o SET attempt = NULL, mint_seq = NULL, msgs "
		"= p.msgs, wire = p.wire FROM pre p WHERE p.grp = o.grp AND "
		"p.row_id = o.row_id AND o.row_id IN (SELECT row_id FROM "
		"winner);"
		"CREATE FUNCTION lose_b() RETURNS trigger LANGUAGE plpgsql "
		"SET search_path FROM CURRENT AS $f$ BEGIN IF EXISTS (SELECT 1 "
		"FROM winner w WHERE w.grp = OLD.grp AND w.row_id = OLD.row_id "
		"AND w.attempt <> NEW.attempt) THEN UPDATE tbx_obatch o SET "
		"attempt = w.attempt, mint_seq = w.mint_seq, msgs = w.msgs, "
		"wire = w.wire FROM winner w WHERE w.grp = OLD.grp AND "
		"w.row_id = OLD.row_id AND o.grp = OLD.grp AND o.row_id = "
		"OLD.row_id; RETURN NULL; END IF; RETURN NEW; END $f$;"
		"CREATE TRIGGER lose_b BEFORE UPDATE OF attempt ON tbx_obatch "
		"FOR EACH ROW WHEN (OLD.attempt IS NULL AND NEW.attempt IS NOT "
		"NULL) EXECUTE FUNCTION lose_b();"),
	    0);
}

Test(crash_obatch, own_sets_a_loser_of_B_goes_on_with_the_winner)
{
	tt_crash_step_hook = lose_b;
	tt_crash_case_rows_sets("A.committed|B.recorded", 0, NULL, 1);
	tt_crash_step_hook = NULL;
	cr_assert_geq(tt_crash_hop1_stats.attempts_lost, 1,
		      "the recovering worker never lost B");
}
