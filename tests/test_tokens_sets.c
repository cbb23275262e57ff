/*
 * The token sets of schema 11 on SQLite (tokens/tokens.h, sets_*; the
 * bitmap functions of store/bits.h): minted for the groups subscribed
 * before, tested per bit, cleared by D only from the row as found (two
 * processes clearing one row never lose a clear), deleted once empty,
 * dropped per attempt.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "outbox/outbox.h"
#include "store/db.h"
#include "support.h"
#include "tokens/tokens.h"

static char *dir, *path;

static void fx_setup(void)
{
	dir = tt_tmpdir();
	path = tt_path(dir, "tokens.db");
	tbx__log_setup(TBX_LOG_ERR - 1, "test"); /* quiet: errors expected */
}

static void fx_teardown(void)
{
	tt_rmrf(dir);
	free(dir);
	free(path);
}

TestSuite(tsets, .init = fx_setup, .fini = fx_teardown);

/* Runs @p sql on a connection of its own. */
static void fx_sql(const char *file, const char *sql)
{
	sqlite3 *db;
	char *msg = NULL;

	cr_assert_eq(sqlite3_open(file, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s",
		     msg ? msg : "");
	sqlite3_close(db);
}

static tbx_tokens_t *fx_open_on(sqlite3 *shared)
{
	tbx_tokens_t *t = NULL;
	char err[512];

	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, NULL, shared, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	return t;
}

static tbx_tokens_t *fx_open(void)
{
	return fx_open_on(NULL);
}

static void fx_subscribe(tbx_tokens_t *t, const char *topic, const char *grp)
{
	int64_t since;

	cr_assert_eq(tbx_tokens_subscribe(t, topic, grp, &since), TBX_OK);
}

/* Mints one set of @p nbits to topic "t" under @p attempt (NULL: none),
 * its id into @p id.  @returns the rows made. */
static uint64_t fx_mint(tbx_tokens_t *t, const char *attempt, uint32_t nbits,
			char id[TBX_UUID_LEN + 1])
{
	tbx__set_item_t item = {id, "t", 0, nbits};
	tbx__set_req_t req = {attempt, "row", &item, 1};
	uint64_t rows = 0;
	int64_t seq = 0;

	tbx__uuid(id);
	cr_assert_eq(tbx_tokens_sets_mint(t, "g0", &req, 1, &seq, &rows),
		     TBX_OK);
	cr_assert_gt(seq, 0);
	return rows;
}

static tbx__bit_state_t fx_bit(tbx_tokens_t *t, const char *grp, const char *id,
			       uint32_t index)
{
	tbx__bit_ref_t ref = {id, index};
	tbx__bit_state_t st = TBX_BIT_RANGE + 1;

	cr_assert_eq(tbx_tokens_sets_test(t, grp, &ref, 1, &st, NULL), TBX_OK);
	return st;
}

/* Clears @p n bits of set @p id for @p grp; *cleared, @returns deleted. */
static uint64_t fx_clear(tbx_tokens_t *t, const char *grp, const char *id,
			 const uint32_t *idx, size_t n, uint64_t *cleared)
{
	tbx__bit_ref_t refs[64];
	uint64_t c = 99, d = 99;

	cr_assert_leq(n, 64);
	for (size_t i = 0; i < n; i++) {
		refs[i].set_id = id;
		refs[i].index = idx[i];
	}
	cr_assert_eq(tbx_tokens_sets_consume(t, grp, refs, n, &c, &d), TBX_OK);
	if (cleared)
		*cleared = c;
	return d;
}

static int64_t fx_rows(tbx_tokens_t *t, const char *grp)
{
	int64_t rows = -1;

	cr_assert_eq(tbx_tokens_sets_count(t, grp, &rows, NULL, NULL), TBX_OK);
	return rows;
}

static int64_t fx_pending(tbx_tokens_t *t, const char *grp)
{
	int64_t pending = -1;

	cr_assert_eq(tbx_tokens_sets_count(t, grp, NULL, &pending, NULL),
		     TBX_OK);
	return pending;
}

static int64_t fx_regs(tbx_tokens_t *t, const char *grp)
{
	int64_t regs = -1;

	cr_assert_eq(tbx_tokens_sets_count(t, grp, NULL, NULL, &regs), TBX_OK);
	return regs;
}

/* has() answers from the schema version: sets from 11. */
Test(tsets, the_store_has_sets_from_schema_11)
{
	tbx_tokens_t *t = fx_open();
	int yes = -1;

	cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_SETS, &yes), TBX_OK);
	cr_assert_eq(yes, 1);
	fx_sql(path, "PRAGMA user_version = 10");
	cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_SETS, &yes), TBX_OK);
	cr_assert_eq(yes, 0);
	fx_sql(path, "PRAGMA user_version = 11");
	tbx_tokens_close(t);
}

Test(tsets, mint_makes_a_full_row_per_group_subscribed_before)
{
	tbx_tokens_t *t = fx_open();
	char a[TBX_UUID_LEN + 1], b[TBX_UUID_LEN + 1];
	char s1[TBX_UUID_LEN + 1], s2[TBX_UUID_LEN + 1], s3[TBX_UUID_LEN + 1];
	tbx__set_item_t items[2] = {{s1, "t", 0, 10}, {s2, "t", 3, 9}};
	tbx__set_item_t other = {s3, "t", 1, 1};
	tbx__set_req_t reqs[2] = {{a, "row-a", items, 2},
				  {NULL, "row-b", &other, 1}};
	uint64_t rows = 0;
	int64_t seq = 0;

	fx_subscribe(t, "t", "g1");
	fx_subscribe(t, "t", "g2");
	fx_subscribe(t, "u", "g4");
	tbx__uuid(a);
	tbx__uuid(b);
	tbx__uuid(s1);
	tbx__uuid(s2);
	tbx__uuid(s3);
	cr_assert_eq(tbx_tokens_sets_mint(t, "g0", reqs, 2, &seq, &rows),
		     TBX_OK);
	cr_assert_eq(rows, 6, "three sets, two groups subscribed to t");
	fx_subscribe(t, "t", "g3");
	for (uint32_t i = 0; i < 10; i++) {
		cr_assert_eq(fx_bit(t, "g1", s1, i), TBX_BIT_SET);
		cr_assert_eq(fx_bit(t, "g2", s1, i), TBX_BIT_SET);
		cr_assert_eq(fx_bit(t, "g3", s1, i), TBX_BIT_NOROW,
			     "subscribed after the mint: untokened for it");
	}
	cr_assert_eq(fx_rows(t, "g1"), 3);
	cr_assert_eq(fx_pending(t, "g1"), 20);
	cr_assert_eq(fx_pending(t, NULL), 40);
	cr_assert_eq(fx_rows(t, "g4"), 0, "another topic's group");
	cr_assert_eq(fx_regs(t, "g0"), 1, "one per request with an attempt");
	cr_assert_eq(tt_count(path, "SELECT count(DISTINCT mint_seq) FROM "
				    "tbx_tset"),
		     1, "one number for the call");
	cr_assert_eq(tt_count(path,
			      "SELECT count(*) FROM tbx_tset WHERE "
			      "nbits = 9 AND bits = x'ff01' AND part = 3"),
		     2, "bits beyond nbits are clear");
	cr_assert_eq(tt_count(path, "SELECT json_array_length(sets) FROM "
				    "tbx_breg"),
		     2, "the registration names the attempt's sets");

	/* A bad request writes nothing. */
	{
		static const tbx__set_item_t bad[] = {
		    {"not-a-uuid", "t", 0, 1},
		    {NULL, "t", 0, 1},
		    {"00000000-0000-4000-8000-000000000001", NULL, 0, 1},
		    {"00000000-0000-4000-8000-000000000001", "t", -1, 1},
		    {"00000000-0000-4000-8000-000000000001", "t", 0, 0},
		    {"00000000-0000-4000-8000-000000000001", "t", 0,
		     TBX_SET_BITS_MAX + 1},
		};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			tbx__set_req_t r = {NULL, "row", &bad[i], 1};

			cr_assert_eq(
			    tbx_tokens_sets_mint(t, "g0", &r, 1, NULL, NULL),
			    TBX_EINVAL, "case %zu", i);
		}
		tbx__set_req_t r = {b, NULL, items, 1};
		cr_assert_eq(tbx_tokens_sets_mint(t, "g0", &r, 1, NULL, NULL),
			     TBX_EINVAL, "a registration names its row");
		cr_assert_eq(tbx_tokens_sets_mint(t, NULL, reqs, 1, NULL, NULL),
			     TBX_EINVAL, "and its sender");
		/* A set id minted before: refused whole. */
		r.row_id = "row";
		cr_assert_neq(tbx_tokens_sets_mint(t, "g0", &r, 1, NULL, NULL),
			      TBX_OK);
	}
	cr_assert_eq(fx_rows(t, NULL), 6);
	cr_assert_eq(fx_regs(t, NULL), 1);
	tbx_tokens_close(t);
}

Test(tsets, test_reports_every_state_of_a_bit)
{
	tbx_tokens_t *t = fx_open();
	char s[TBX_UUID_LEN + 1], none[TBX_UUID_LEN + 1];
	tbx__bit_ref_t refs[6];
	tbx__bit_state_t st[6];
	int64_t mseq[6];
	uint64_t cleared = 0;

	fx_subscribe(t, "t", "g1");
	fx_mint(t, NULL, 10, s);
	tbx__uuid(none);
	fx_clear(t, "g1", s, (const uint32_t[]){3}, 1, &cleared);
	cr_assert_eq(cleared, 1);
	refs[0] = (tbx__bit_ref_t){s, 0};
	refs[1] = (tbx__bit_ref_t){none, 0};
	refs[2] = (tbx__bit_ref_t){s, 3};
	refs[3] = (tbx__bit_ref_t){s, 10};
	refs[4] = (tbx__bit_ref_t){s, 3};
	refs[5] = (tbx__bit_ref_t){s, 9};
	memset(mseq, 0xff, sizeof(mseq));
	cr_assert_eq(tbx_tokens_sets_test(t, "g1", refs, 6, st, mseq), TBX_OK);
	cr_assert_eq(st[0], TBX_BIT_SET);
	cr_assert_eq(st[1], TBX_BIT_NOROW);
	cr_assert_eq(st[2], TBX_BIT_CLEAR);
	cr_assert_eq(st[3], TBX_BIT_RANGE);
	cr_assert_eq(st[4], TBX_BIT_CLEAR, "a repeat answers the same");
	cr_assert_eq(st[5], TBX_BIT_SET);
	cr_assert_gt(mseq[0], 0);
	cr_assert_eq(mseq[2], mseq[0]);
	cr_assert_eq(mseq[3], mseq[0]);
	cr_assert_eq(mseq[1], 0, "no row, no number");
	cr_assert_eq(fx_bit(t, "g2", s, 0), TBX_BIT_NOROW, "another group");
	cr_assert_eq(tbx_tokens_sets_test(t, NULL, refs, 1, st, NULL),
		     TBX_EINVAL);
	cr_assert_eq(tbx_tokens_sets_test(t, "g1", NULL, 0, NULL, NULL),
		     TBX_OK);
	tbx_tokens_close(t);
}

Test(tsets, clearing_a_subset_leaves_the_rest_and_other_groups_alone)
{
	tbx_tokens_t *t = fx_open();
	char s[TBX_UUID_LEN + 1];
	uint64_t cleared = 0;

	fx_subscribe(t, "t", "g1");
	fx_subscribe(t, "t", "g2");
	fx_mint(t, NULL, 20, s);
	cr_assert_eq(
	    fx_clear(t, "g1", s, (const uint32_t[]){1, 5, 19}, 3, &cleared), 0);
	cr_assert_eq(cleared, 3);
	for (uint32_t i = 0; i < 20; i++) {
		cr_assert_eq(fx_bit(t, "g1", s, i),
			     i == 1 || i == 5 || i == 19 ? TBX_BIT_CLEAR
							 : TBX_BIT_SET,
			     "bit %u", i);
		cr_assert_eq(fx_bit(t, "g2", s, i), TBX_BIT_SET);
	}
	cr_assert_eq(fx_pending(t, "g1"), 17);
	cr_assert_eq(fx_pending(t, "g2"), 20);
	tbx_tokens_close(t);
}

Test(tsets, the_row_goes_exactly_when_its_last_bit_is_cleared)
{
	tbx_tokens_t *t = fx_open();
	char s[TBX_UUID_LEN + 1], u[TBX_UUID_LEN + 1];
	tbx__bit_ref_t refs[5];
	uint64_t cleared = 0, deleted = 0;

	fx_subscribe(t, "t", "g1");
	fx_subscribe(t, "t", "g2");
	fx_mint(t, NULL, 3, s);
	fx_mint(t, NULL, 2, u);
	cr_assert_eq(fx_clear(t, "g1", s, (const uint32_t[]){0, 1}, 2, NULL),
		     0);
	cr_assert_eq(fx_rows(t, "g1"), 2);
	/* The last bit, repeated, with one already clear and one beyond the
	 * set: one bit cleared, one row gone; and one bit of another set in
	 * the same call. */
	refs[0] = (tbx__bit_ref_t){s, 2};
	refs[1] = (tbx__bit_ref_t){u, 1};
	refs[2] = (tbx__bit_ref_t){s, 0};
	refs[3] = (tbx__bit_ref_t){s, 2};
	refs[4] = (tbx__bit_ref_t){s, 7};
	cr_assert_eq(
	    tbx_tokens_sets_consume(t, "g1", refs, 5, &cleared, &deleted),
	    TBX_OK);
	cr_assert_eq(cleared, 2);
	cr_assert_eq(deleted, 1);
	cr_assert_eq(fx_bit(t, "g1", s, 2), TBX_BIT_NOROW);
	cr_assert_eq(fx_bit(t, "g1", u, 0), TBX_BIT_SET);
	cr_assert_eq(fx_bit(t, "g1", u, 1), TBX_BIT_CLEAR);
	cr_assert_eq(fx_rows(t, "g1"), 1);
	cr_assert_eq(fx_rows(t, "g2"), 2, "the other group's rows stay");
	/* Again: nothing left to clear, nothing to delete. */
	cr_assert_eq(
	    tbx_tokens_sets_consume(t, "g1", refs, 5, &cleared, &deleted),
	    TBX_OK);
	cr_assert_eq(cleared, 0);
	cr_assert_eq(deleted, 0);
	cr_assert_eq(tbx_tokens_sets_consume(t, NULL, refs, 1, NULL, NULL),
		     TBX_EINVAL);
	tbx_tokens_close(t);
}

Test(tsets, repeats_and_clear_bits_clear_nothing_twice)
{
	tbx_tokens_t *t = fx_open();
	char s[TBX_UUID_LEN + 1];
	uint64_t cleared = 0;

	fx_subscribe(t, "t", "g1");
	fx_mint(t, NULL, TBX_SET_BITS_MAX, s);
	cr_assert_eq(fx_pending(t, "g1"), TBX_SET_BITS_MAX);
	cr_assert_eq(fx_clear(t, "g1", s, (const uint32_t[]){4, 4, 4, 65535}, 4,
			      &cleared),
		     0);
	cr_assert_eq(cleared, 2);
	cr_assert_eq(
	    fx_clear(t, "g1", s, (const uint32_t[]){4, 65536}, 2, &cleared), 0);
	cr_assert_eq(cleared, 0);
	cr_assert_eq(fx_pending(t, "g1"), TBX_SET_BITS_MAX - 2);
	cr_assert_eq(fx_bit(t, "g1", s, 65535), TBX_BIT_CLEAR);
	cr_assert_eq(fx_bit(t, "g1", s, 65534), TBX_BIT_SET);
	tbx_tokens_close(t);
}

/*
 * BUG_STALE_BITMAP of the model: two processes, each on its own
 * connection, clear disjoint bits of one row, a bit a transaction, in
 * many rounds (a fresh row each, both started together by the parent).
 * Every clear holds (a row written back from a bitmap read before the
 * other's commit would set its bits again, and the row would never be
 * empty), and each row is deleted once, by whichever clears its last
 * bit.
 */
Test(tsets, two_processes_clearing_one_row_lose_no_clear)
{
	enum { ROUNDS = 30, BITS = 64, PROCS = 2 };
	static char ids[ROUNDS][TBX_UUID_LEN + 1];
	tbx_tokens_t *t = fx_open();
	int go[PROCS][2], res[2];
	pid_t pids[PROCS];

	fx_subscribe(t, "t", "g1");
	for (int r = 0; r < ROUNDS; r++)
		cr_assert_eq(fx_mint(t, NULL, BITS, ids[r]), 1);
	cr_assert_eq(pipe(res), 0);
	for (int p = 0; p < PROCS; p++) {
		cr_assert_eq(pipe(go[p]), 0);
		pids[p] = fork();
		cr_assert(pids[p] >= 0);
		if (pids[p] > 0) {
			close(go[p][0]);
			continue;
		}
		close(res[0]);
		close(go[p][1]);
		tbx_tokens_t *c = NULL;
		char err[256], byte;
		int ok = tbx_tokens_sqlite_open(path, NULL, NULL, &c, err,
						sizeof(err)) == TBX_OK;

		/* Round r: process p clears the bits i of set r with
		 * i % PROCS == p, one a transaction. */
		for (int r = 0; r < ROUNDS; r++) {
			int64_t sums[2] = {0, 0};

			if (read(go[p][0], &byte, 1) != 1)
				ok = 0;
			for (int i = p; ok && i < BITS; i += PROCS) {
				tbx__bit_ref_t ref = {ids[r], (uint32_t)i};
				uint64_t cl = 0, de = 0;

				ok = tbx_tokens_sets_consume(
					 c, "g1", &ref, 1, &cl, &de) == TBX_OK;
				sums[0] += (int64_t)cl;
				sums[1] += (int64_t)de;
			}
			if (!ok)
				sums[0] = -1;
			if (write(res[1], sums, sizeof(sums)) != sizeof(sums))
				ok = 0;
		}
		tbx_tokens_close(c);
		_exit(ok ? 0 : 1);
	}
	close(res[1]);
	for (int r = 0; r < ROUNDS; r++) {
		int64_t cleared = 0, deleted = 0, sums[2];
		char sql[128];

		for (int p = 0; p < PROCS; p++)
			cr_assert_eq(write(go[p][1], "g", 1), 1);
		for (int p = 0; p < PROCS; p++) {
			cr_assert_eq(read(res[0], sums, sizeof(sums)),
				     sizeof(sums));
			cr_assert_eq(sums[0], BITS / PROCS,
				     "round %d: each process cleared every "
				     "bit of its own",
				     r);
			cleared += sums[0];
			deleted += sums[1];
		}
		cr_assert_eq(cleared, BITS);
		snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM tbx_tset WHERE set_id = '%.36s'",
			 ids[r]);
		cr_assert_eq(tt_count(path, sql), 0,
			     "round %d: the row emptied and deleted: no clear "
			     "was lost",
			     r);
		cr_assert_eq(deleted, 1, "round %d: the row deleted once", r);
	}
	for (int p = 0; p < PROCS; p++) {
		int status;

		close(go[p][1]);
		cr_assert_eq(waitpid(pids[p], &status, 0), pids[p]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	close(res[0]);
	tbx_tokens_close(t);
}

Test(tsets, drop_attempt_removes_only_its_sets_for_every_group)
{
	tbx_tokens_t *t = fx_open();
	char a1[TBX_UUID_LEN + 1], a2[TBX_UUID_LEN + 1];
	char s1[TBX_UUID_LEN + 1], s2[TBX_UUID_LEN + 1], s3[TBX_UUID_LEN + 1];
	tbx__set_item_t items[2] = {{s1, "t", 0, 4}, {s2, "t", 1, 4}};
	tbx__set_req_t req = {a1, "row-1", items, 2};
	uint64_t deleted = 0;
	int dropped = -1;

	fx_subscribe(t, "t", "g1");
	fx_subscribe(t, "t", "g2");
	tbx__uuid(a1);
	tbx__uuid(a2);
	tbx__uuid(s1);
	tbx__uuid(s2);
	cr_assert_eq(tbx_tokens_sets_mint(t, "g0", &req, 1, NULL, NULL),
		     TBX_OK);
	fx_mint(t, a2, 4, s3);
	fx_clear(t, "g1", s1, (const uint32_t[]){0}, 1, NULL);
	cr_assert_eq(fx_rows(t, NULL), 6);
	cr_assert_eq(fx_regs(t, "g0"), 2);

	cr_assert_eq(tbx_tokens_sets_drop_attempt(t, a1, &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 1);
	cr_assert_eq(deleted, 4, "both sets, both groups");
	cr_assert_eq(fx_bit(t, "g1", s3, 0), TBX_BIT_SET, "a2's set stays");
	cr_assert_eq(fx_bit(t, "g2", s3, 0), TBX_BIT_SET);
	cr_assert_eq(fx_rows(t, NULL), 2);
	cr_assert_eq(fx_regs(t, "g0"), 1);
	/* Idempotent: the registration is gone, nothing is dropped. */
	cr_assert_eq(tbx_tokens_sets_drop_attempt(t, a1, &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 0);
	cr_assert_eq(deleted, 0);

	/* Confirmed (the winner's C): the registration goes, the sets stay,
	 * and no drop can take them any more. */
	cr_assert_eq(tbx_tokens_sets_confirm(t, (const char *const[]){a2}, 1),
		     TBX_OK);
	cr_assert_eq(fx_regs(t, NULL), 0);
	cr_assert_eq(fx_rows(t, NULL), 2);
	cr_assert_eq(tbx_tokens_sets_drop_attempt(t, a2, &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 0);
	cr_assert_eq(fx_rows(t, NULL), 2);
	cr_assert_eq(tbx_tokens_sets_confirm(t, NULL, 0), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_confirm(t, (const char *const[]){NULL}, 1),
		     TBX_EINVAL);
	cr_assert_eq(tbx_tokens_sets_drop_attempt(t, NULL, &dropped, NULL),
		     TBX_EINVAL);
	tbx_tokens_close(t);
}

Test(tsets, registrations_are_listed_oldest_first_in_pages)
{
	enum { N = 7 };
	tbx_tokens_t *t = fx_open();
	char att[N][TBX_UUID_LEN + 1], sets[N][TBX_UUID_LEN + 1];
	char other[TBX_UUID_LEN + 1], oset[TBX_UUID_LEN + 1];
	tbx__reg_t *all = NULL, *page = NULL, last;
	size_t cnt = 0, pcnt = 0, seen = 0;
	char sql[512];

	for (int i = 0; i < N; i++) {
		tbx__uuid(att[i]);
		fx_mint(t, att[i], 2, sets[i]);
	}
	/* Another sender's attempt is not listed. */
	{
		tbx__set_item_t item = {oset, "t", 0, 1};
		tbx__set_req_t req = {other, "row-x", &item, 1};

		tbx__uuid(other);
		tbx__uuid(oset);
		cr_assert_eq(tbx_tokens_sets_mint(t, "gx", &req, 1, NULL, NULL),
			     TBX_OK);
	}
	/* Spread the times so that both keys of the order count: two with
	 * the same time are ordered by attempt. */
	for (int i = 0; i < N; i++) {
		snprintf(sql, sizeof(sql),
			 "UPDATE tbx_breg SET created_ms = %d WHERE attempt = "
			 "'%s'",
			 100 + (N - i) / 2, att[i]);
		fx_sql(path, sql);
	}
	cr_assert_eq(
	    tbx_tokens_sets_registrations(t, "g0", NULL, 100, &all, &cnt),
	    TBX_OK);
	cr_assert_eq(cnt, N);
	for (size_t i = 1; i < cnt; i++)
		cr_assert(all[i - 1].created_ms < all[i].created_ms ||
			      (all[i - 1].created_ms == all[i].created_ms &&
			       strcmp(all[i - 1].attempt, all[i].attempt) < 0),
			  "ordered at %zu", i);
	for (size_t i = 0; i < cnt; i++)
		cr_assert_str_eq(all[i].msg_id, "row", "the row id");
	/* Pages of 3 after the last one seen give the same list. */
	for (const tbx__reg_t *after = NULL;; after = &last) {
		cr_assert_eq(tbx_tokens_sets_registrations(t, "g0", after, 3,
							   &page, &pcnt),
			     TBX_OK);
		if (pcnt == 0)
			break;
		cr_assert_leq(pcnt, 3);
		for (size_t i = 0; i < pcnt; i++, seen++)
			cr_assert_str_eq(page[i].attempt, all[seen].attempt);
		last = page[pcnt - 1];
		free(page);
	}
	cr_assert_null(page);
	cr_assert_eq(seen, N);
	cr_assert_eq(
	    tbx_tokens_sets_registrations(t, "g0", NULL, 0, &page, &pcnt),
	    TBX_OK);
	cr_assert_eq(pcnt, 0);
	free(all);
	tbx_tokens_close(t);
}

/* One file: the joined variants write inside the service store's
 * transaction and commit or roll back with it. */
Test(tsets, joined_variants_commit_and_roll_back_with_the_caller)
{
	tbx_outbox_t *store = NULL;
	tbx_tokens_t *t;
	char s[TBX_UUID_LEN + 1], err[256];
	tbx__set_item_t item = {s, "t", 2, 5};
	tbx__bit_ref_t refs[2] = {{s, 1}, {s, 4}};
	uint64_t rows = 0, cleared = 0, deleted = 0;
	int64_t seq = 0;

	cr_assert_eq(tbx_outbox_open(path, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	t = fx_open_on(tbx_outbox_db(store));
	fx_subscribe(t, "t", "g1");
	fx_subscribe(t, "t", "g2");
	tbx__uuid(s);

	/* Outside a transaction they refuse. */
	cr_assert_eq(tbx_tokens_sets_mint_joined(t, &item, 1, 5, &rows),
		     TBX_ESTATE);
	cr_assert_eq(
	    tbx_tokens_sets_consume_joined(t, "g1", refs, 2, NULL, NULL),
	    TBX_ESTATE);

	/* Rolled back: nothing. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_mint_joined(t, &item, 1, seq, &rows),
		     TBX_OK);
	cr_assert_eq(rows, 2);
	cr_assert_eq(fx_rows(t, NULL), 2, "visible inside the transaction");
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	cr_assert_eq(fx_rows(t, NULL), 0);
	cr_assert_eq(fx_regs(t, NULL), 0);

	/* Committed: the rows, no registration. */
	rows = 0;
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_mint_joined(t, &item, 1, seq, &rows),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(rows, 2);
	cr_assert_eq(fx_rows(t, NULL), 2);
	cr_assert_eq(fx_regs(t, NULL), 0);
	cr_assert_eq(tt_count(path,
			      "SELECT count(*) FROM tbx_tset WHERE "
			      "part = 2 AND mint_seq = (SELECT value FROM "
			      "tbx_seq)"),
		     2);

	/* D+E joined: rolled back, the bits are set again; committed,
	 * cleared. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_consume_joined(t, "g1", refs, 2, &cleared,
						    &deleted),
		     TBX_OK);
	cr_assert_eq(cleared, 2);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	cr_assert_eq(fx_bit(t, "g1", s, 1), TBX_BIT_SET);
	cr_assert_eq(fx_bit(t, "g1", s, 4), TBX_BIT_SET);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_consume_joined(t, "g1", refs, 2, &cleared,
						    &deleted),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(cleared, 2);
	cr_assert_eq(deleted, 0);
	cr_assert_eq(fx_bit(t, "g1", s, 1), TBX_BIT_CLEAR);
	cr_assert_eq(fx_bit(t, "g2", s, 1), TBX_BIT_SET);
	cr_assert_eq(fx_pending(t, "g1"), 3);

	/* A write of its own inside the caller's transaction is refused. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_consume(t, "g1", refs, 2, NULL, NULL),
		     TBX_ESTATE);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	tbx_tokens_close(t);
	tbx_outbox_close(store);

	/* A store on a connection of its own cannot join. */
	t = fx_open();
	cr_assert_eq(tbx_outbox_open(path, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_mint_joined(t, &item, 1, 5, NULL),
		     TBX_ESTATE);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	tbx_outbox_close(store);
	tbx_tokens_close(t);
}

typedef struct listed {
	int n;
	char first[TBX_UUID_LEN + 1];
	uint32_t pending, nbits;
	uint8_t bits[2];
} listed_t;

static int on_set(void *opaque, const tbx__set_rec_t *rec)
{
	listed_t *l = opaque;

	if (l->n++ == 0) {
		tbx__strlcpy(l->first, rec->set_id, sizeof(l->first));
		l->pending = rec->pending;
		l->nbits = rec->nbits;
		memcpy(l->bits, rec->bits, 2);
	}
	return 0;
}

static int on_sum(void *opaque, const tbx__grp_sum_t *sum)
{
	int64_t *n = opaque;

	if (strcmp(sum->grp, "g2") == 0) {
		n[0] = sum->n[0];
		n[1] = sum->n[1];
	}
	if (strcmp(sum->grp, "g0") == 0)
		n[3] = sum->n[0];
	return 0;
}

Test(tsets, inspection_lists_rows_with_their_pending_bits)
{
	tbx_tokens_t *t = fx_open();
	char s[TBX_UUID_LEN + 1], u[TBX_UUID_LEN + 1];
	const char *g2[] = {"g2"};
	tbx__filter_t f = {g2, 1, INT64_MAX, 1};
	listed_t l = {0};
	char att[TBX_UUID_LEN + 1], v[TBX_UUID_LEN + 1];
	int64_t total = 0, sums[6] = {-1, -1, -1, -1, -1, -1};

	fx_subscribe(t, "t", "g1");
	fx_subscribe(t, "t", "g2");
	fx_mint(t, NULL, 12, s);
	fx_mint(t, NULL, 3, u);
	fx_sql(path, "UPDATE tbx_tset SET created_ms = 1");
	fx_clear(t, "g2", s, (const uint32_t[]){0, 9}, 2, NULL);
	fx_clear(t, "g2", u, (const uint32_t[]){0, 9}, 2, NULL);
	cr_assert_eq(tbx_tokens_sets_list(t, &f, &total, on_set, &l), TBX_OK);
	cr_assert_eq(total, 2, "the filter's rows");
	cr_assert_eq(l.n, 1, "the limit");
	cr_assert_str_eq(l.first, strcmp(s, u) < 0 ? s : u,
			 "oldest, then by set id");
	if (strcmp(s, u) < 0) {
		cr_assert_eq(l.nbits, 12);
		cr_assert_eq(l.pending, 10);
		cr_assert_eq(l.bits[0], 0xfe);
		cr_assert_eq(l.bits[1], 0x0d);
	} else {
		cr_assert_eq(l.nbits, 3);
		cr_assert_eq(l.pending, 2);
	}
	/* A sender's registration: counted by sets_count, not a row. */
	tbx__uuid(att);
	fx_mint(t, att, 1, v);
	cr_assert_eq(tbx_tokens_sets_summary(t, on_sum, sums), TBX_OK);
	cr_assert_eq(sums[0], 3);
	cr_assert_eq(sums[1], 13);
	cr_assert_eq(sums[3], -1, "g0 receives nothing: no summary");
	cr_assert_eq(fx_regs(t, "g0"), 1);
	cr_assert_eq(fx_regs(t, "g2"), 0);
	tbx_tokens_close(t);
}

/* The functions refuse what is not a bitmap of the right length with an
 * error, and a statement that fails writes nothing. */
Test(tsets, the_bitmap_functions_refuse_bad_input)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *stmt;
	char err[256];
	static const struct {
		const char *sql, *want;
	} good[] = {
	    {"SELECT hex(tbx_bits_clear(x'0f', x'05'))", "0A"},
	    {"SELECT hex(tbx_bits_clear(x'ff01', x'0000'))", "FF01"},
	    {"SELECT tbx_bits_none(x'0000')", "1"},
	    {"SELECT tbx_bits_none(x'0080')", "0"},
	    {"SELECT tbx_bits_count(x'ff01')", "9"},
	    {"SELECT tbx_bits_test(x'02', 1)", "1"},
	    {"SELECT tbx_bits_test(x'02', 0)", "0"},
	    {"SELECT coalesce(tbx_bits_test(x'02', 8), 'null')", "null"},
	    {"SELECT tbx_bits_list(x'0580')", "[0,2,15]"},
	    {"SELECT tbx_bits_list(x'00')", "[]"},
	};
	static const char *const bad[] = {
	    "SELECT tbx_bits_clear(x'ff', x'ffff')",
	    "SELECT tbx_bits_clear(x'ffff', x'ff')",
	    "SELECT tbx_bits_clear(NULL, x'ff')",
	    "SELECT tbx_bits_clear(x'ff', NULL)",
	    "SELECT tbx_bits_clear('ab', x'ffff')",
	    "SELECT tbx_bits_none(NULL)",
	    "SELECT tbx_bits_count(7)",
	    "SELECT tbx_bits_test(x'ff', 'a')",
	    "SELECT tbx_bits_list(NULL)",
	};

	cr_assert_eq(tbx__db_open(path, NULL, &db, err, sizeof(err)), TBX_OK,
		     "%s", err);
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		cr_assert_eq(
		    sqlite3_prepare_v2(db, good[i].sql, -1, &stmt, NULL),
		    SQLITE_OK, "%s", sqlite3_errmsg(db));
		cr_assert_eq(sqlite3_step(stmt), SQLITE_ROW, "%s: %s",
			     good[i].sql, sqlite3_errmsg(db));
		cr_assert_str_eq((const char *)sqlite3_column_text(stmt, 0),
				 good[i].want, "%s", good[i].sql);
		sqlite3_finalize(stmt);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(sqlite3_prepare_v2(db, bad[i], -1, &stmt, NULL),
			     SQLITE_OK, "%s", sqlite3_errmsg(db));
		cr_assert_eq(sqlite3_step(stmt), SQLITE_ERROR, "%s", bad[i]);
		cr_assert(strstr(sqlite3_errmsg(db), "tbx_bits_"), "%s: %s",
			  bad[i], sqlite3_errmsg(db));
		sqlite3_finalize(stmt);
	}
	/* An UPDATE with a mask of another length fails and changes
	 * nothing. */
	cr_assert_eq(sqlite3_exec(db,
				  "INSERT INTO tbx_tset VALUES ('s', 'g', 't', "
				  "0, 1, 9, x'ff01', 1)",
				  NULL, NULL, NULL),
		     SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db,
				  "UPDATE tbx_tset SET bits = "
				  "tbx_bits_clear(bits, x'01')",
				  NULL, NULL, NULL),
		     SQLITE_ERROR);
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM tbx_tset WHERE bits "
				    "= x'ff01'"),
		     1);
	sqlite3_close(db);
}
