/*
 * The token sets on PostgreSQL (tokens/pg_sets.c, token version 3): the
 * contract of tokens/tokens.h for every sets_* operation, the joined
 * variants inside the caller's transaction, two workers clearing bits of
 * one row (READ COMMITTED re-evaluation: both clears hold, the row goes
 * exactly when empty), two workers on different sets not waiting on each
 * other, and the migration from version 2.  The pg tier: $TBX_PG_URL.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "fixture.h"
#include "store/db.h"
#include "store/pg.h"
#include "support.h"
#include "tokens/pg_int.h"
#include "tokens/tokens.h"

static tbx__pg_t *admin; /* the test's own connection, for checks */
static char schema[64];	 /* the token store's schema of the test */

static void setup(void)
{
	char err[512];

	tbx__log_setup(TBX_LOG_ERR - 1, "test"); /* quiet: errors expected */
	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &admin, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx__pg_set(admin, "lock_timeout", "10000"), TBX_OK);
	tt_pg_schema(schema, sizeof(schema), "tset");
}

static void teardown(void)
{
	char sql[160];

	if (!admin)
		return;
	snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
		 schema);
	tbx__pg_exec(admin, sql);
	tbx__pg_unref(admin);
}

TestSuite(pg_sets, .init = setup, .fini = teardown);

static unsigned sql_calls;

/* Runs @p tmpl (@T: the test's schema) on the admin connection. */
static void sql(const char *tmpl)
{
	tbx__pg_stmts_t one;

	cr_assert_eq(
	    tbx__pg_stmts_init(&one, admin, "x", &tmpl, 1, NULL, schema),
	    TBX_OK);
	cr_assert_eq(tbx__pg_exec(admin, one.sql[0]), TBX_OK, "%s: %s", tmpl,
		     tbx__pg_errmsg(admin));
	tbx__pg_stmts_free(&one);
}

/* The text @p tmpl returns (first column, first row; "" without one). */
static void sql_text(const char *tmpl, char *out, size_t size)
{
	tbx__pg_stmts_t one;
	PGresult *res = NULL;
	char q[1024];

	/* Text results: the query as a text cast. */
	snprintf(q, sizeof(q), "SELECT (%s)::text", tmpl);
	const char *t = q;
	cr_assert_eq(tbx__pg_stmts_init(&one, admin, "q", &t, 1, NULL, schema),
		     TBX_OK);
	snprintf(one.prefix, sizeof(one.prefix), "q%u_", ++sql_calls);
	cr_assert_eq(tbx__pg_run(&one, 0, NULL, &res), TBX_OK, "%s",
		     tbx__pg_errmsg(admin));
	out[0] = '\0';
	if (PQntuples(res) > 0 && !tbx__pg_null(res, 0, 0))
		snprintf(out, size, "%s", tbx__pg_text(res, 0, 0));
	PQclear(res);
	tbx__pg_stmts_free(&one);
}

static int64_t sql_int(const char *tmpl)
{
	char s[64];

	sql_text(tmpl, s, sizeof(s));
	return s[0] ? strtoll(s, NULL, 10) : -1;
}

static tbx_tokens_t *open_opts(tbx__pg_t *shared, const tbx__db_opts_t *opts)
{
	tbx_tokens_t *t = NULL;
	char err[512];

	cr_assert_eq(tbx_tokens_pg_open(tt_pg_url(), schema, shared, opts, &t,
					err, sizeof(err)),
		     TBX_OK, "%s", err);
	return t;
}

static tbx_tokens_t *open_store(void)
{
	return open_opts(NULL, NULL);
}

static int64_t subscribe(tbx_tokens_t *t, const char *topic, const char *grp)
{
	int64_t since = -1;

	cr_assert_eq(tbx_tokens_subscribe(t, topic, grp, &since), TBX_OK);
	return since;
}

/* Mints one set of @p nbits to (topic, part) for @p attempt (NULL: no
 * registration); its id into @p id. */
static int64_t mint_one(tbx_tokens_t *t, const char *attempt, const char *topic,
			uint32_t nbits, char id[TBX_UUID_LEN + 1],
			uint64_t *rows)
{
	tbx__set_item_t s = {id, topic, 0, nbits};
	tbx__set_req_t req = {attempt, "row-1", &s, 1};
	int64_t seq = -1;

	tbx__uuid(id);
	cr_assert_eq(tbx_tokens_sets_mint(t, "sender", &req, 1, &seq, rows),
		     TBX_OK);
	return seq;
}

/* The bits of (id, grp) as PostgreSQL writes them ("" when no row). */
static void bits_of(const char *id, const char *grp, char *out, size_t size)
{
	char q[256];

	snprintf(q, sizeof(q),
		 "SELECT bits FROM @T.tbx_tset WHERE set_id = '%s' AND grp = "
		 "'%s'",
		 id, grp);
	sql_text(q, out, size);
}

static tbx__bit_state_t test_one(tbx_tokens_t *t, const char *grp,
				 const char *id, uint32_t index)
{
	tbx__bit_ref_t ref = {id, index};
	tbx__bit_state_t st = (tbx__bit_state_t)-1;

	cr_assert_eq(tbx_tokens_sets_test(t, grp, &ref, 1, &st, NULL), TBX_OK);
	return st;
}

static void consume(tbx_tokens_t *t, const char *grp, const char *id,
		    const uint32_t *idx, size_t n, uint64_t *cleared,
		    uint64_t *deleted)
{
	tbx__bit_ref_t refs[16];

	cr_assert_leq(n, 16);
	for (size_t i = 0; i < n; i++) {
		refs[i].set_id = id;
		refs[i].index = idx[i];
	}
	cr_assert_eq(tbx_tokens_sets_consume(t, grp, refs, n, cleared, deleted),
		     TBX_OK);
}

/*
 * The schema.
 */

Test(pg_sets, version_3_holds_the_sets_and_their_checks)
{
	tbx_tokens_t *t = open_store();
	int version = 0, yes = -1;

	cr_assert_eq(tbx_tokens_schema(t, &version), TBX_OK);
	cr_assert_geq(version, 3);
	cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_SETS, &yes), TBX_OK);
	cr_assert_eq(yes, 1);
	tbx_tokens_close(t);
	cr_assert_eq(sql_int("SELECT count(*) FROM pg_catalog.pg_index WHERE "
			     "indexrelid = '@T.tbx_breg_send'::regclass"),
		     1);
}

/* A row that breaks the table's checks is refused by the server. */
Test(pg_sets, the_table_refuses_bits_of_another_length)
{
	tbx_tokens_t *t = open_store();
	const char *bad[] = {
	    "INSERT INTO @T.tbx_tset VALUES ('a', 'g', 't', 0, 1, 3, B'11', "
	    "0)",
	    "INSERT INTO @T.tbx_tset VALUES ('a', 'g', 't', 0, 1, 0, B'', 0)",
	    "INSERT INTO @T.tbx_tset VALUES ('a', 'g', 't', 0, 1, 65537, "
	    "repeat('1', 65537)::varbit, 0)",
	};

	tbx_tokens_close(t);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tbx__pg_stmts_t one;

		cr_assert_eq(tbx__pg_stmts_init(&one, admin, "x", &bad[i], 1,
						NULL, schema),
			     TBX_OK);
		cr_assert_neq(tbx__pg_exec(admin, one.sql[0]), TBX_OK, "%s",
			      bad[i]);
		tbx__pg_stmts_free(&one);
	}
}

/* A version 2 schema (before the sets) is migrated by a read-write
 * opening, creating on or off; a read-only opening leaves it and its
 * sets_* calls answer TBX_ESCHEMA. */
Test(pg_sets, a_version_2_schema_gains_the_sets_on_a_read_write_open)
{
	tbx_tokens_t *t = open_store();
	tbx__db_opts_t opts;
	char id[TBX_UUID_LEN + 1];
	int64_t rows = -1;
	int version = 0, yes = -1;

	subscribe(t, "orders", "g1");
	tbx_tokens_close(t);
	sql("ALTER TABLE @T.tbx_edge DROP COLUMN tset, DROP COLUMN tbit, "
	    "DROP COLUMN tpart; DROP TABLE @T.tbx_tset; DROP TABLE "
	    "@T.tbx_breg; UPDATE @T.tbx_schema_info SET version = 2");

	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	t = open_opts(NULL, &opts);
	cr_assert_eq(tbx_tokens_schema(t, &version), TBX_OK);
	cr_assert_eq(version, 2);
	cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_SETS, &yes), TBX_OK);
	cr_assert_eq(yes, 0);
	cr_assert_eq(tbx_tokens_sets_count(t, NULL, &rows, NULL, NULL),
		     TBX_ESCHEMA);
	tbx_tokens_close(t);
	cr_assert_eq(
	    sql_int("SELECT (to_regclass('@T.tbx_tset') IS NULL)::int"), 1);

	tbx__db_opts_init(&opts);
	opts.create = 0;
	t = open_opts(NULL, &opts);
	cr_assert_eq(tbx_tokens_schema(t, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_TOKENS_VERSION);
	cr_assert_eq(sql_int("SELECT version FROM @T.tbx_schema_info"),
		     TBX_PG_TOKENS_VERSION);
	/* What version 2 held is kept: the subscription mints rows. */
	mint_one(t, "0190d0f2-0000-7000-8000-000000000001", "orders", 5, id,
		 NULL);
	cr_assert_eq(tbx_tokens_sets_count(t, "g1", &rows, NULL, NULL), TBX_OK);
	cr_assert_eq(rows, 1);
	tbx_tokens_close(t);
}

/*
 * The operations.
 */

/* Every bit set at the mint, one row per group subscribed before it, a
 * registration naming the sets; the states of the check. */
Test(pg_sets, mint_sets_every_bit_for_the_groups_subscribed_before_it)
{
	tbx_tokens_t *t = open_store();
	char a[TBX_UUID_LEN + 1], b[TBX_UUID_LEN + 1], late[TBX_UUID_LEN + 1],
	    bits[128], att[TBX_UUID_LEN + 1];
	tbx__set_item_t sets[2] = {{a, "orders", 3, 10}, {b, "orders", 4, 1}};
	tbx__set_req_t req = {att, "row-7", sets, 2};
	tbx__bit_ref_t refs[6];
	tbx__bit_state_t st[6];
	int64_t seq = -1, ms[6], rows = -1, pending = -1, regs = -1;
	uint64_t made = 0;

	subscribe(t, "orders", "g1");
	subscribe(t, "orders", "g2");
	subscribe(t, "other", "g3");
	tbx__uuid(a);
	tbx__uuid(b);
	tbx__uuid(att);
	cr_assert_eq(tbx_tokens_sets_mint(t, "sender", &req, 1, &seq, &made),
		     TBX_OK);
	cr_assert_gt(seq, 0);
	cr_assert_eq(made, 4, "2 sets x 2 groups");
	bits_of(a, "g1", bits, sizeof(bits));
	cr_assert_str_eq(bits, "1111111111");
	bits_of(b, "g2", bits, sizeof(bits));
	cr_assert_str_eq(bits, "1");
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_tset WHERE grp = "
			     "'g3'"),
		     0);
	/* The registration: one row for the attempt, its sets in order. */
	{
		char q[256], s[256], want[256];

		snprintf(q, sizeof(q),
			 "SELECT row_id || ' ' || send_grp || ' ' || "
			 "array_to_string(sets, ',') FROM @T.tbx_breg WHERE "
			 "attempt = '%s'",
			 att);
		sql_text(q, s, sizeof(s));
		snprintf(want, sizeof(want), "row-7 sender %s,%s", a, b);
		cr_assert_str_eq(s, want);
	}
	cr_assert_eq(tbx_tokens_sets_count(t, NULL, &rows, &pending, &regs),
		     TBX_OK);
	cr_assert_eq(rows, 4);
	cr_assert_eq(pending, 22);
	cr_assert_eq(regs, 1);

	/* A group subscribed after the mint has no row. */
	subscribe(t, "orders", "g4");
	cr_assert_eq(test_one(t, "g4", a, 0), TBX_BIT_NOROW);
	tbx__uuid(late);
	mint_one(t, NULL, "orders", 2, late, &made);
	cr_assert_eq(made, 3, "a later mint has g4's row");
	cr_assert_eq(test_one(t, "g4", late, 1), TBX_BIT_SET);

	/* Set, clear, range, no row; repeats; the set's mint_seq. */
	uint32_t one[] = {2};
	consume(t, "g1", a, one, 1, NULL, NULL);
	refs[0] = (tbx__bit_ref_t){a, 0};
	refs[1] = (tbx__bit_ref_t){a, 2};
	refs[2] = (tbx__bit_ref_t){a, 10};
	refs[3] = (tbx__bit_ref_t){"0190d0f2-0000-7000-8000-00000000dead", 0};
	refs[4] = (tbx__bit_ref_t){a, 2};
	refs[5] = (tbx__bit_ref_t){b, 0};
	cr_assert_eq(tbx_tokens_sets_test(t, "g1", refs, 6, st, ms), TBX_OK);
	cr_assert_eq(st[0], TBX_BIT_SET);
	cr_assert_eq(st[1], TBX_BIT_CLEAR);
	cr_assert_eq(st[2], TBX_BIT_RANGE);
	cr_assert_eq(st[3], TBX_BIT_NOROW);
	cr_assert_eq(st[4], TBX_BIT_CLEAR);
	cr_assert_eq(st[5], TBX_BIT_SET);
	cr_assert_eq(ms[0], seq);
	cr_assert_eq(ms[2], seq);
	cr_assert_eq(ms[3], 0);
	cr_assert_eq(ms[5], seq);
	/* Another group's row is its own. */
	cr_assert_eq(test_one(t, "g2", a, 2), TBX_BIT_SET);
	tbx_tokens_close(t);
}

Test(pg_sets, mint_refuses_malformed_sets)
{
	tbx_tokens_t *t = open_store();
	char id[TBX_UUID_LEN + 1], att[TBX_UUID_LEN + 1];
	tbx__set_item_t s = {id, "orders", 0, 0};
	tbx__set_req_t req = {NULL, NULL, &s, 1};

	tbx__uuid(id);
	tbx__uuid(att);
	cr_assert_eq(tbx_tokens_sets_mint(t, "g", &req, 1, NULL, NULL),
		     TBX_EINVAL, "nbits 0");
	s.nbits = TBX_SET_BITS_MAX + 1;
	cr_assert_eq(tbx_tokens_sets_mint(t, "g", &req, 1, NULL, NULL),
		     TBX_EINVAL, "nbits too many");
	s.nbits = TBX_SET_BITS_MAX;
	s.set_id = "not-a-uuid";
	cr_assert_eq(tbx_tokens_sets_mint(t, "g", &req, 1, NULL, NULL),
		     TBX_EINVAL);
	s.set_id = id;
	req.attempt = att; /* without its row */
	cr_assert_eq(tbx_tokens_sets_mint(t, "g", &req, 1, NULL, NULL),
		     TBX_EINVAL);
	req.attempt = NULL;
	subscribe(t, "orders", "g1");
	cr_assert_eq(tbx_tokens_sets_mint(t, "g", &req, 1, NULL, NULL), TBX_OK);
	cr_assert_eq(test_one(t, "g1", id, TBX_SET_BITS_MAX - 1), TBX_BIT_SET);
	cr_assert_eq(test_one(t, "g1", id, TBX_SET_BITS_MAX), TBX_BIT_RANGE);
	tbx_tokens_close(t);
}

/* D clears a subset (repeats, bits already clear and refs past nbits
 * allowed), counts what it cleared, and the row goes with its last bit. */
Test(pg_sets, consume_clears_a_subset_and_the_last_bit_deletes_the_row)
{
	tbx_tokens_t *t = open_store();
	char a[TBX_UUID_LEN + 1], b[TBX_UUID_LEN + 1], bits[128];
	uint64_t cleared = 99, deleted = 99;
	int64_t pending = -1;

	subscribe(t, "orders", "g1");
	subscribe(t, "orders", "g2");
	mint_one(t, NULL, "orders", 9, a, NULL);
	mint_one(t, NULL, "orders", 3, b, NULL);

	uint32_t first[] = {8, 0, 3, 3, 40, 70000};
	consume(t, "g1", a, first, 6, &cleared, &deleted);
	cr_assert_eq(cleared, 3);
	cr_assert_eq(deleted, 0);
	bits_of(a, "g1", bits, sizeof(bits));
	cr_assert_str_eq(bits, "011011110");
	bits_of(a, "g2", bits, sizeof(bits));
	cr_assert_str_eq(bits, "111111111", "another group's row untouched");

	/* Again: nothing more cleared. */
	consume(t, "g1", a, first, 6, &cleared, &deleted);
	cr_assert_eq(cleared, 0);
	cr_assert_eq(deleted, 0);

	/* Two sets in one call; b emptied goes, a keeps one bit. */
	tbx__bit_ref_t refs[] = {{a, 1}, {b, 2}, {a, 2}, {b, 0},
				 {a, 4}, {b, 1}, {a, 5}, {a, 6}};
	cr_assert_eq(
	    tbx_tokens_sets_consume(t, "g1", refs, 8, &cleared, &deleted),
	    TBX_OK);
	cr_assert_eq(cleared, 8);
	cr_assert_eq(deleted, 1);
	cr_assert_eq(test_one(t, "g1", b, 0), TBX_BIT_NOROW);
	bits_of(a, "g1", bits, sizeof(bits));
	cr_assert_str_eq(bits, "000000010");
	cr_assert_eq(tbx_tokens_sets_count(t, "g1", NULL, &pending, NULL),
		     TBX_OK);
	cr_assert_eq(pending, 1);

	uint32_t last[] = {7};
	consume(t, "g1", a, last, 1, &cleared, &deleted);
	cr_assert_eq(cleared, 1);
	cr_assert_eq(deleted, 1);
	cr_assert_eq(test_one(t, "g1", a, 7), TBX_BIT_NOROW);
	/* A row that is gone: nothing, no error. */
	consume(t, "g1", a, last, 1, &cleared, &deleted);
	cr_assert_eq(cleared, 0);
	cr_assert_eq(deleted, 0);
	cr_assert_eq(test_one(t, "g2", a, 7), TBX_BIT_SET);
	tbx_tokens_close(t);
}

/* A set of 65,536 bits: a clear at its far end, then every bit. */
Test(pg_sets, the_largest_set_clears_at_both_ends)
{
	tbx_tokens_t *t = open_store();
	char a[TBX_UUID_LEN + 1];
	tbx__bit_ref_t *refs;
	uint64_t cleared = 0, deleted = 0;

	subscribe(t, "orders", "g1");
	mint_one(t, NULL, "orders", TBX_SET_BITS_MAX, a, NULL);
	uint32_t ends[] = {TBX_SET_BITS_MAX - 1, 0};
	consume(t, "g1", a, ends, 2, &cleared, &deleted);
	cr_assert_eq(cleared, 2);
	cr_assert_eq(test_one(t, "g1", a, TBX_SET_BITS_MAX - 1), TBX_BIT_CLEAR);
	cr_assert_eq(test_one(t, "g1", a, TBX_SET_BITS_MAX - 2), TBX_BIT_SET);
	cr_assert_not_null(refs = calloc(TBX_SET_BITS_MAX, sizeof(*refs)));
	for (uint32_t i = 0; i < TBX_SET_BITS_MAX; i++)
		refs[i] = (tbx__bit_ref_t){a, i};
	cr_assert_eq(tbx_tokens_sets_consume(t, "g1", refs, TBX_SET_BITS_MAX,
					     &cleared, &deleted),
		     TBX_OK);
	cr_assert_eq(cleared, TBX_SET_BITS_MAX - 2);
	cr_assert_eq(deleted, 1);
	free(refs);
	tbx_tokens_close(t);
}

/* The loser's and the orphan's drop takes only its own attempt's sets,
 * every group's rows of them, once; a confirmed attempt keeps them. */
Test(pg_sets, drop_attempt_takes_only_its_own_sets_once)
{
	tbx_tokens_t *t = open_store();
	char a[TBX_UUID_LEN + 1], b[TBX_UUID_LEN + 1], c[TBX_UUID_LEN + 1];
	const char *att_a = "0190d0f2-0000-7000-8000-00000000000a",
		   *att_b = "0190d0f2-0000-7000-8000-00000000000b",
		   *att_c = "0190d0f2-0000-7000-8000-00000000000c";
	uint64_t deleted = 99;
	int64_t regs = -1;
	int dropped = -1;

	subscribe(t, "orders", "g1");
	subscribe(t, "orders", "g2");
	mint_one(t, att_a, "orders", 4, a, NULL);
	mint_one(t, att_b, "orders", 4, b, NULL);
	mint_one(t, att_c, "orders", 4, c, NULL);

	cr_assert_eq(tbx_tokens_sets_drop_attempt(t, att_a, &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 1);
	cr_assert_eq(deleted, 2, "a's rows of both groups");
	cr_assert_eq(test_one(t, "g1", a, 0), TBX_BIT_NOROW);
	cr_assert_eq(test_one(t, "g2", a, 0), TBX_BIT_NOROW);
	cr_assert_eq(test_one(t, "g1", b, 0), TBX_BIT_SET);
	/* Idempotent. */
	cr_assert_eq(tbx_tokens_sets_drop_attempt(t, att_a, &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 0);
	cr_assert_eq(deleted, 0);

	/* Confirmed: its registration goes, its sets stay, a drop after it
	 * finds nothing. */
	const char *confirm[] = {att_b};
	cr_assert_eq(tbx_tokens_sets_confirm(t, confirm, 1), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_drop_attempt(t, att_b, &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 0);
	cr_assert_eq(test_one(t, "g1", b, 3), TBX_BIT_SET);
	cr_assert_eq(tbx_tokens_sets_count(t, "sender", NULL, NULL, &regs),
		     TBX_OK);
	cr_assert_eq(regs, 1, "c's registration");
	cr_assert_eq(test_one(t, "g2", c, 3), TBX_BIT_SET);
	tbx_tokens_close(t);
}

/* The sweeper's listing: oldest first, then by attempt, in pages. */
Test(pg_sets, registrations_page_oldest_first)
{
	tbx_tokens_t *t = open_store();
	char id[TBX_UUID_LEN + 1], att[5][TBX_UUID_LEN + 1];
	tbx__reg_t *regs = NULL, after;
	size_t cnt = 0, seen = 0;

	subscribe(t, "orders", "g1");
	for (int i = 0; i < 5; i++) {
		tbx__uuid(att[i]);
		mint_one(t, att[i], "orders", 2, id, NULL);
	}
	/* Two of one millisecond: ordered by attempt. */
	sql("UPDATE @T.tbx_breg SET created_ms = 1000");
	cr_assert_eq(
	    tbx_tokens_sets_registrations(t, "sender", NULL, 2, &regs, &cnt),
	    TBX_OK);
	while (cnt) {
		for (size_t i = 0; i < cnt; i++) {
			cr_assert_str_eq(regs[i].msg_id, "row-1");
			if (seen)
				cr_assert_gt(
				    strcmp(regs[i].attempt, after.attempt), 0);
			after = regs[i];
			seen++;
		}
		cr_assert_leq(cnt, 2);
		free(regs);
		regs = NULL;
		cr_assert_eq(tbx_tokens_sets_registrations(t, "sender", &after,
							   2, &regs, &cnt),
			     TBX_OK);
	}
	cr_assert_eq(seen, 5);
	cr_assert_eq(
	    tbx_tokens_sets_registrations(t, "other", NULL, 10, &regs, &cnt),
	    TBX_OK);
	cr_assert_eq(cnt, 0);
	tbx_tokens_close(t);
}

static int on_sum(void *o, const tbx__grp_sum_t *s)
{
	char *out = o;
	size_t n = strlen(out);

	snprintf(out + n, 256 - n, "%s:%lld/%lld ", s->grp, (long long)s->n[0],
		 (long long)s->n[1]);
	return 0;
}

static int on_set(void *o, const tbx__set_rec_t *r)
{
	char *out = o;
	size_t n = strlen(out);

	n += (size_t)snprintf(out + n, 512 - n, "%s %s p%d %u/%u ", r->grp,
			      r->topic, r->part, r->pending, r->nbits);
	for (uint32_t i = 0; i < r->nbits && n + 2 < 512; i++)
		out[n++] = (r->bits[i / 8] >> (i % 8)) & 1 ? '1' : '0';
	snprintf(out + n, 512 - n, ";");
	return 0;
}

/* inspect's reads: per group rows and pending bits; the rows with their
 * bits in tokens.h's byte layout. */
Test(pg_sets, summary_and_list_show_rows_and_pending_bits)
{
	tbx_tokens_t *t = open_store();
	char a[TBX_UUID_LEN + 1], sums[256] = "", rows[512] = "";
	const char *g2[] = {"g2"};
	tbx__filter_t all = TBX_FILTER_ALL, only = {g2, 1, INT64_MAX, 0};
	int64_t total = -1;

	subscribe(t, "orders", "g1");
	subscribe(t, "orders", "g2");
	mint_one(t, NULL, "orders", 11, a, NULL);
	uint32_t some[] = {1, 9};
	consume(t, "g2", a, some, 2, NULL, NULL);
	cr_assert_eq(tbx_tokens_sets_summary(t, on_sum, sums), TBX_OK);
	cr_assert_str_eq(sums, "g1:1/11 g2:1/9 ");
	cr_assert_eq(tbx_tokens_sets_list(t, &only, &total, on_set, rows),
		     TBX_OK);
	cr_assert_eq(total, 1);
	cr_assert_str_eq(rows, "g2 orders p0 9/11 10111111101;");
	rows[0] = '\0';
	cr_assert_eq(tbx_tokens_sets_list(t, &all, &total, on_set, rows),
		     TBX_OK);
	cr_assert_eq(total, 2);
	cr_assert_str_eq(rows, "g1 orders p0 11/11 11111111111;g2 orders p0 "
			       "9/11 10111111101;");
	tbx_tokens_close(t);
}

/* The joined mint and clear are the caller's: a rollback leaves nothing,
 * a commit everything, and the counts are there after the statement
 * that sent them. */
Test(pg_sets, joined_variants_commit_and_roll_back_with_the_caller)
{
	tbx__pg_t *conn;
	tbx_tokens_t *t, *own = open_store();
	char err[512], a[TBX_UUID_LEN + 1], b[TBX_UUID_LEN + 1];
	tbx__set_item_t s = {a, "orders", 1, 4};
	uint64_t rows = 0, cleared = 0, deleted = 0;
	int64_t seq = 0;

	subscribe(own, "orders", "g1");
	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &conn, err, sizeof(err)),
		     TBX_OK, "%s", err);
	t = open_opts(conn, NULL);
	tbx__uuid(a);
	/* Outside a transaction: refused. */
	cr_assert_eq(tbx_tokens_sets_mint_joined(t, &s, 1, 5, &rows),
		     TBX_ESTATE);

	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_mint_joined(t, &s, 1, seq, &rows), TBX_OK);
	tbx__pg_rollback(conn);
	cr_assert_eq(test_one(own, "g1", a, 0), TBX_BIT_NOROW);

	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_mint_joined(t, &s, 1, seq, &rows), TBX_OK);
	/* The check inside the transaction sees the deferred rows. */
	cr_assert_eq(test_one(t, "g1", a, 3), TBX_BIT_SET);
	cr_assert_eq(rows, 1);
	cr_assert_eq(tbx__pg_commit(conn), TBX_OK);
	{
		tbx__bit_ref_t ref = {a, 0};
		int64_t ms = 0;
		tbx__bit_state_t st;

		cr_assert_eq(tbx_tokens_sets_test(own, "g1", &ref, 1, &st, &ms),
			     TBX_OK);
		cr_assert_eq(st, TBX_BIT_SET);
		cr_assert_eq(ms, seq);
	}

	/* The joined clear, rolled back, then committed. */
	tbx__bit_ref_t refs[] = {{a, 0}, {a, 1}, {a, 2}, {a, 3}};
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_consume_joined(t, "g1", refs, 4, &cleared,
						    &deleted),
		     TBX_OK);
	cr_assert_eq(tbx__pg_flush(conn), TBX_OK);
	cr_assert_eq(cleared, 4);
	cr_assert_eq(deleted, 1);
	tbx__pg_rollback(conn);
	cr_assert_eq(test_one(own, "g1", a, 2), TBX_BIT_SET);

	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_consume_joined(t, "g1", refs, 2, &cleared,
						    &deleted),
		     TBX_OK);
	cr_assert_eq(tbx__pg_commit(conn), TBX_OK);
	cr_assert_eq(cleared, 2);
	cr_assert_eq(deleted, 0);
	cr_assert_eq(test_one(own, "g1", a, 1), TBX_BIT_CLEAR);
	cr_assert_eq(test_one(own, "g1", a, 2), TBX_BIT_SET);

	/* A write of its own inside the caller's transaction: refused. */
	tbx__uuid(b);
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_consume(t, "g1", refs, 1, NULL, NULL),
		     TBX_ESTATE);
	tbx__pg_rollback(conn);
	tbx_tokens_close(t);
	tbx_tokens_close(own);
	tbx__pg_unref(conn);
}

/*
 * Two workers.
 */

/* Waits until a session is blocked by @p pid (the holder's backend):
 * the outcome the test needs before it lets the holder go. */
static void wait_blocked_by(int pid)
{
	char q[256];
	long long deadline = tbx__now_ms() + 120000LL * tt_time_factor();

	snprintf(q, sizeof(q),
		 "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE %d = "
		 "ANY(pg_catalog.pg_blocking_pids(pid))",
		 pid);
	while (sql_int(q) < 1) {
		cr_assert_lt(tbx__now_ms(), deadline,
			     "the second worker never waited for the first");
		usleep(20000);
	}
}

/* A child: its own store clears @p idx of @p id for g1, and reports
 * cleared * 10 + deleted in its exit status (both small). */
static pid_t clear_in_child(const char *id, const uint32_t *idx, size_t n)
{
	pid_t pid = fork();

	cr_assert(pid >= 0);
	if (pid > 0)
		return pid;
	tbx_tokens_t *c = NULL;
	tbx__bit_ref_t refs[8];
	uint64_t cleared = 0, deleted = 0;
	char err[512];

	for (size_t i = 0; i < n; i++)
		refs[i] = (tbx__bit_ref_t){id, idx[i]};
	if (tbx_tokens_pg_open(tt_pg_url(), schema, NULL, NULL, &c, err,
			       sizeof(err)) != TBX_OK ||
	    tbx_tokens_sets_consume(c, "g1", refs, n, &cleared, &deleted) !=
		TBX_OK)
		_exit(100);
	tbx_tokens_close(c);
	_exit((int)(cleared * 10 + deleted));
}

/*
 * Two workers clear disjoint bits of one row: the first's transaction
 * holds its update open, the second waits for it, and is evaluated again
 * on the row the first committed.  Both clears hold; the row goes when
 * (and only when) the second empties it.  A D that read the bits and
 * wrote back what it computed would bring the first's bit back.
 */
static void two_clears_of_one_row(int empties)
{
	tbx__pg_t *conn;
	tbx_tokens_t *t, *own = open_store();
	char err[512], a[TBX_UUID_LEN + 1], bits[16];
	uint64_t cleared = 0, deleted = 0;
	int status = 0;
	pid_t child;

	subscribe(own, "orders", "g1");
	mint_one(own, NULL, "orders", 4, a, NULL);
	/* The second empties the row when the first took bit 0 and bit 3
	 * is taken already. */
	if (empties) {
		uint32_t three[] = {3};
		consume(own, "g1", a, three, 1, NULL, NULL);
	}
	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &conn, err, sizeof(err)),
		     TBX_OK, "%s", err);
	t = open_opts(conn, NULL);
	tbx__bit_ref_t first = {a, 0};
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_sets_consume_joined(t, "g1", &first, 1,
						    &cleared, &deleted),
		     TBX_OK);
	cr_assert_eq(tbx__pg_flush(conn), TBX_OK);
	cr_assert_eq(cleared, 1);
	cr_assert_eq(deleted, 0);

	uint32_t second[] = {1, 2};
	child = clear_in_child(a, second, 2);
	wait_blocked_by(PQbackendPID(conn->conn));
	cr_assert_eq(tbx__pg_commit(conn), TBX_OK);
	cr_assert_eq(waitpid(child, &status, 0), child);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 20 + (empties ? 1 : 0),
		     "the second cleared %d, deleted %d",
		     WEXITSTATUS(status) / 10, WEXITSTATUS(status) % 10);
	bits_of(a, "g1", bits, sizeof(bits));
	if (empties) {
		cr_assert_str_eq(bits, "", "the empty row stayed: %s", bits);
		cr_assert_eq(test_one(own, "g1", a, 0), TBX_BIT_NOROW);
	} else {
		cr_assert_str_eq(bits, "0001", "a clear was lost");
	}
	tbx_tokens_close(t);
	tbx_tokens_close(own);
	tbx__pg_unref(conn);
}

Test(pg_sets, two_workers_clearing_one_row_both_hold)
{
	two_clears_of_one_row(0);
}

Test(pg_sets, two_workers_clearing_one_row_delete_it_when_empty)
{
	two_clears_of_one_row(1);
}

/* Workers of one group on different sets never wait on each other: with
 * the first's clear held open, the second's clear of another set (its
 * lock_timeout 2 s) succeeds, while its clear of the first's set runs
 * into the lock (the test can see waiting). */
Test(pg_sets, workers_on_different_sets_do_not_wait_on_each_other)
{
	tbx__pg_t *conn;
	tbx_tokens_t *t, *own, *other;
	tbx__db_opts_t opts;
	char err[512], a[TBX_UUID_LEN + 1], b[TBX_UUID_LEN + 1];
	uint64_t cleared = 0, deleted = 0;

	own = open_store();
	subscribe(own, "orders", "g1");
	mint_one(own, NULL, "orders", 4, a, NULL);
	mint_one(own, NULL, "orders", 4, b, NULL);
	tbx__db_opts_init(&opts);
	opts.busy_timeout_ms = 2000;
	other = open_opts(NULL, &opts);

	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &conn, err, sizeof(err)),
		     TBX_OK, "%s", err);
	t = open_opts(conn, NULL);
	tbx__bit_ref_t ra = {a, 0}, rb = {b, 0}, ra1 = {a, 1};
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(
	    tbx_tokens_sets_consume_joined(t, "g1", &ra, 1, &cleared, &deleted),
	    TBX_OK);
	cr_assert_eq(tbx__pg_flush(conn), TBX_OK);

	cr_assert_eq(
	    tbx_tokens_sets_consume(other, "g1", &rb, 1, &cleared, &deleted),
	    TBX_OK, "a clear of another set waited");
	cr_assert_eq(cleared, 1);
	cr_assert_eq(tbx_tokens_sets_consume(other, "g1", &ra1, 1, NULL, NULL),
		     TBX_EBUSY);
	cr_assert_eq(tbx__pg_commit(conn), TBX_OK);
	cr_assert_eq(test_one(own, "g1", a, 0), TBX_BIT_CLEAR);
	cr_assert_eq(test_one(own, "g1", a, 1), TBX_BIT_SET);
	cr_assert_eq(test_one(own, "g1", b, 0), TBX_BIT_CLEAR);
	tbx_tokens_close(t);
	tbx_tokens_close(other);
	tbx_tokens_close(own);
	tbx__pg_unref(conn);
}

/* A schema an earlier tokenbox migrated to version 2 without recording
 * it (its tbx_schema_info still says 1, tbx_seq_ranges is there): a
 * read-write opening carries it to the current version instead of
 * failing on the
 * ranges' step, and keeps its ranges. */
Test(pg_sets, a_schema_migrated_without_its_version_recorded_opens)
{
	tbx_tokens_t *t = open_store();
	int version = 0;

	tbx_tokens_close(t);
	sql("ALTER TABLE @T.tbx_edge DROP COLUMN tset, DROP COLUMN tbit, "
	    "DROP COLUMN tpart; DROP TABLE @T.tbx_tset; DROP TABLE "
	    "@T.tbx_breg; UPDATE @T.tbx_schema_info SET version = 1");
	int64_t ranges = sql_int("SELECT count(*) FROM @T.tbx_seq_ranges");
	t = open_store();
	cr_assert_eq(tbx_tokens_schema(t, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_TOKENS_VERSION);
	tbx_tokens_close(t);
	cr_assert_eq(sql_int("SELECT version FROM @T.tbx_schema_info"),
		     TBX_PG_TOKENS_VERSION);
	cr_assert_geq(sql_int("SELECT count(*) FROM @T.tbx_seq_ranges"),
		      ranges);
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_tset"), 0);
}
