/*
 * The token store on PostgreSQL (tokens/pg.c, tokens/pg_read.c): the
 * schema, its version and identity, every operation of tbx_tokens_ops_t
 * with the behaviour of the SQLite backend, the joined operations on a
 * shared connection, the ingress edge, the read side of `inspect`, the
 * subscription lock that orders subscribing against minting, the sweeper,
 * and the countdown fault (also as a cut connection).  The pg tier:
 * $TBX_PG_URL.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "fixture.h"
#include "outbox/outbox.h"
#include "store/db.h"
#include "store/pg.h"
#include "tokens/pg_int.h"
#include "tokens/sweep.h"
#include "tokens/tokens.h"

static tbx__pg_t *admin;  /* the test's own connection, for checks */
static char schema[64];	  /* the token store's schema of the test */
static char dir[64];	  /* an SQLite service store for the sweeper */
static char s_schema[64]; /* a PostgreSQL one */

static void setup(void)
{
	char err[512];

	tbx__log_setup(TBX_LOG_ERR - 1, "test"); /* quiet: errors expected */
	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &admin, err, sizeof(err)),
		     TBX_OK, "%s", err);
	/* A test that failed half-way may leave a connection of its own
	 * inside a transaction: the teardown's DROP gives up then. */
	cr_assert_eq(tbx__pg_set(admin, "lock_timeout", "10000"), TBX_OK);
	tt_pg_schema(schema, sizeof(schema), "tok");
	tt_pg_schema(s_schema, sizeof(s_schema), "svc");
	dir[0] = '\0';
}

static void drop_schema(const char *name)
{
	char sql[160];

	snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
		 name);
	tbx__pg_exec(admin, sql);
}

static void teardown(void)
{
	tbx__fault_arm(0);
	tbx__fault_pg_conn_loss(0);
	if (admin) {
		drop_schema(schema);
		drop_schema(s_schema);
		tbx__pg_unref(admin);
	}
	if (dir[0]) {
		DIR *d = opendir(dir);
		struct dirent *e;
		char p[512];

		while (d && (e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			unlink(p);
		}
		if (d)
			closedir(d);
		rmdir(dir);
	}
}

TestSuite(pg_tokens, .init = setup, .fini = teardown);

/* Runs @p tmpl (@T: the test's schema) on the admin connection. */
static int sql_on(const char *sch, const char *tmpl)
{
	tbx__pg_stmts_t one;
	int err;

	cr_assert_eq(tbx__pg_stmts_init(&one, admin, "x", &tmpl, 1, NULL, sch),
		     TBX_OK);
	err = tbx__pg_exec(admin, one.sql[0]);
	tbx__pg_stmts_free(&one);
	return err;
}

static void sql(const char *tmpl)
{
	cr_assert_eq(sql_on(schema, tmpl), TBX_OK, "%s: %s", tmpl,
		     tbx__pg_errmsg(admin));
}

static unsigned sql_calls;

/* The integer @p tmpl returns (its first column of its first row). */
static int64_t sql_int(const char *tmpl)
{
	tbx__pg_stmts_t one;
	int64_t n = -1;
	int found = 0;

	cr_assert_eq(
	    tbx__pg_stmts_init(&one, admin, "q", &tmpl, 1, NULL, schema),
	    TBX_OK);
	/* A fresh name each time: a statement of that name from an earlier
	 * call would be prepared with another text. */
	snprintf(one.prefix, sizeof(one.prefix), "q%u_", ++sql_calls);
	cr_assert_eq(tbx__pg_run_i64(&one, 0, NULL, &n, &found), TBX_OK, "%s",
		     tbx__pg_errmsg(admin));
	tbx__pg_stmts_free(&one);
	return found ? n : -1;
}

static tbx_tokens_t *open_with(const char *sch, tbx__pg_t *shared,
			       const tbx__db_opts_t *opts)
{
	tbx_tokens_t *t = NULL;
	char err[512];

	cr_assert_eq(tbx_tokens_pg_open(tt_pg_url(), sch, shared, opts, &t, err,
					sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_not_null(t);
	return t;
}

static tbx_tokens_t *open_store(void)
{
	return open_with(schema, NULL, NULL);
}

static int64_t subscribe(tbx_tokens_t *t, const char *topic, const char *grp)
{
	int64_t since = -1;

	cr_assert_eq(tbx_tokens_subscribe(t, topic, grp, &since), TBX_OK);
	return since;
}

static int exists(tbx_tokens_t *t, const char *token, const char *grp)
{
	int e = -1;

	cr_assert_eq(tbx_tokens_exists(t, token, grp, &e), TBX_OK);
	return e;
}

/* Mints one attempt (NULL: none) of @p n tokens to @p topic. */
static int64_t mint(tbx_tokens_t *t, const char *send_grp, const char *attempt,
		    const char *msg_id, const char *topic, size_t n,
		    char tokens[][TBX_UUID_LEN + 1], uint64_t *rows)
{
	tbx__mint_item_t items[8];
	tbx__mint_req_t req = {attempt, msg_id, items, n};
	int64_t seq = -1;

	cr_assert_leq(n, 8);
	for (size_t i = 0; i < n; i++) {
		tbx__uuid(tokens[i]);
		items[i].token = tokens[i];
		items[i].topic = topic;
	}
	cr_assert_eq(tbx_tokens_mint(t, send_grp, &req, 1, &seq, rows), TBX_OK);
	return seq;
}

static int64_t count_rows(tbx_tokens_t *t, const char *grp)
{
	int64_t n = -1;

	cr_assert_eq(tbx_tokens_count(t, grp, &n, NULL), TBX_OK);
	return n;
}

static int64_t count_regs(tbx_tokens_t *t, const char *grp)
{
	int64_t n = -1;

	cr_assert_eq(tbx_tokens_count(t, grp, NULL, &n), TBX_OK);
	return n;
}

/*
 * The schema.
 */

Test(pg_tokens, open_creates_the_tables_and_keeps_its_identity)
{
	tbx_tokens_t *t = open_store();
	char id[TBX_UUID_LEN + 1], id2[TBX_UUID_LEN + 1];
	int64_t seq = -1;
	int version = 0;

	cr_assert_eq(tbx_tokens_store_id(t, id), TBX_OK);
	cr_assert(tbx__is_uuid(id, strlen(id)), "%s", id);
	cr_assert_eq(tbx_tokens_schema(t, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_TOKENS_VERSION);
	cr_assert_eq(tbx_tokens_seq_current(t, &seq), TBX_OK);
	cr_assert_eq(seq + 1,
		     sql_int("SELECT lo FROM @T.tbx_seq_ranges WHERE hi IS "
			     "NULL"),
		     "no number taken yet: the opening's range is next");
	cr_assert_str_eq(t->ops->name, "postgresql");
	cr_assert_null(tbx_tokens_errmsg(t));
	tbx_tokens_close(t);

	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_schema_info WHERE "
			     "kind = 'tokens' AND version = 4 AND created_ms "
			     "> 0"),
		     1);
	cr_assert_eq(sql_int("SELECT count(*) FROM pg_catalog.pg_class c JOIN "
			     "pg_catalog.pg_namespace n ON n.oid = "
			     "c.relnamespace WHERE '\"' || n.nspname || '\"' = "
			     "'@T' AND c.relname IN ('tbx_tokens', "
			     "'tbx_registrations', 'tbx_subscriptions', "
			     "'tbx_edge', 'tbx_seq', 'tbx_schema_info')"),
		     6, "the tables and the sequence");
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_seq"), 1,
		     "a sequence");

	/* Opened again (also read-only): the same identity, no second
	 * info row. */
	t = open_store();
	cr_assert_eq(tbx_tokens_store_id(t, id2), TBX_OK);
	cr_assert_str_eq(id, id2);
	tbx_tokens_close(t);
	{
		tbx__db_opts_t ro;

		tbx__db_opts_init(&ro);
		ro.readonly = 1;
		t = open_with(schema, NULL, &ro);
		cr_assert_eq(tbx_tokens_store_id(t, id2), TBX_OK);
		cr_assert_str_eq(id, id2);
		cr_assert_neq(tbx_tokens_subscribe(t, "orders", "g1", &seq),
			      TBX_OK, "a read-only store writes nothing");
		cr_assert(strstr(tbx_tokens_errmsg(t), "read-only"), "%s",
			  tbx_tokens_errmsg(t));
		tbx_tokens_close(t);
	}
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_schema_info"), 1);
}

Test(pg_tokens, a_missing_schema_is_refused_without_create_and_read_only)
{
	tbx__db_opts_t opts;
	tbx_tokens_t *t = (tbx_tokens_t *)1;
	char err[512];

	tbx__db_opts_init(&opts);
	opts.create = 0;
	cr_assert_eq(tbx_tokens_pg_open(tt_pg_url(), schema, NULL, &opts, &t,
					err, sizeof(err)),
		     TBX_ENOENT);
	cr_assert_null(t);
	cr_assert(strstr(err, schema), "%s", err);
	cr_assert(strstr(err, "no token store"), "%s", err);
	cr_assert(strstr(err, "creating it is off"), "%s", err);
	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	cr_assert_eq(tbx_tokens_pg_open(tt_pg_url(), schema, NULL, &opts, &t,
					err, sizeof(err)),
		     TBX_ENOENT);
	cr_assert_null(t);
	cr_assert(strstr(err, schema), "%s", err);
	/* Neither created anything. */
	cr_assert_eq(sql_int("SELECT count(*) FROM pg_catalog.pg_namespace "
			     "WHERE '\"' || nspname || '\"' = '@T'"),
		     0);
	/* A bad schema name is a configuration error. */
	cr_assert_eq(tbx_tokens_pg_open(tt_pg_url(), "pg_x", NULL, NULL, &t,
					err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "tokens.schema"), "%s", err);
}

Test(pg_tokens, another_kind_or_a_newer_version_is_refused)
{
	char other[64], err[512];
	tbx_tokens_t *t = NULL;

	/* A service store's schema. */
	tt_pg_schema(other, sizeof(other), "svc");
	cr_assert_eq(sql_on(other, "CREATE SCHEMA @T; CREATE TABLE "
				   "@T.tbx_schema_info (id integer PRIMARY "
				   "KEY, kind text NOT NULL, version integer "
				   "NOT NULL, store_id text NOT NULL, "
				   "created_ms bigint NOT NULL); INSERT INTO "
				   "@T.tbx_schema_info VALUES (1, 'service', "
				   "1, 'x', 1)"),
		     TBX_OK);
	cr_assert_eq(tbx_tokens_pg_open(tt_pg_url(), other, NULL, NULL, &t, err,
					sizeof(err)),
		     TBX_ENOTDB);
	cr_assert_null(t);
	cr_assert(strstr(err, "kind 'service'"), "%s", err);
	drop_schema(other);

	/* Token tables not made by tokenbox. */
	cr_assert_eq(sql_on(other, "CREATE SCHEMA @T; CREATE TABLE "
				   "@T.tbx_tokens (x int)"),
		     TBX_OK);
	cr_assert_eq(tbx_tokens_pg_open(tt_pg_url(), other, NULL, NULL, &t, err,
					sizeof(err)),
		     TBX_ENOTDB);
	drop_schema(other);

	/* A newer version. */
	t = open_store();
	tbx_tokens_close(t);
	t = NULL;
	sql("UPDATE @T.tbx_schema_info SET version = version + 1");
	cr_assert_eq(tbx_tokens_pg_open(tt_pg_url(), schema, NULL, NULL, &t,
					err, sizeof(err)),
		     TBX_ESCHEMA);
	cr_assert_null(t);
	cr_assert(strstr(err, "newer tokenbox"), "%s", err);
}

/* Workers on several hosts open a new schema at once: one creates it,
 * every one opens the same store. */
Test(pg_tokens, concurrent_openers_of_a_new_schema_get_one_store)
{
	enum { PROCS = 5 };
	char ids[PROCS][TBX_UUID_LEN + 1], mine[TBX_UUID_LEN + 1];
	int fds[2];
	tbx_tokens_t *t;

	cr_assert_eq(pipe(fds), 0);
	for (int p = 0; p < PROCS; p++) {
		pid_t pid = fork();

		cr_assert(pid >= 0);
		if (pid > 0)
			continue;
		close(fds[0]);
		{
			tbx_tokens_t *c = NULL;
			char err[512], id[TBX_UUID_LEN + 1];
			int64_t since = 0;

			if (tbx_tokens_pg_open(tt_pg_url(), schema, NULL, NULL,
					       &c, err, sizeof(err)) ||
			    tbx_tokens_store_id(c, id) ||
			    tbx_tokens_subscribe(c, "t", "g", &since))
				_exit(1);
			if (write(fds[1], id, TBX_UUID_LEN) != TBX_UUID_LEN)
				_exit(2);
			tbx_tokens_close(c);
			_exit(0);
		}
	}
	close(fds[1]);
	for (int p = 0; p < PROCS; p++) {
		int status = 0;

		cr_assert(wait(&status) > 0);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "an opener failed (status %d)", status);
	}
	for (int p = 0; p < PROCS; p++) {
		cr_assert_eq(read(fds[0], ids[p], TBX_UUID_LEN), TBX_UUID_LEN);
		ids[p][TBX_UUID_LEN] = '\0';
	}
	close(fds[0]);
	t = open_store();
	cr_assert_eq(tbx_tokens_store_id(t, mine), TBX_OK);
	for (int p = 0; p < PROCS; p++)
		cr_assert_str_eq(ids[p], mine);
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_subscriptions"), 1,
		     "subscribed once");
	tbx_tokens_close(t);
}

/*
 * The operations.
 */

Test(pg_tokens, subscribe_keeps_its_number_and_touch_finds_it)
{
	tbx_tokens_t *t = open_store();
	int64_t a, b, again, since = -1, seq = -1, n = -1;
	int found = -1;

	cr_assert_eq(tbx_tokens_subscription(t, "orders", "g1", &since),
		     TBX_ENOENT);
	a = subscribe(t, "orders", "g1");
	b = subscribe(t, "orders", "g2");
	cr_assert_gt(a, 0);
	cr_assert_gt(b, a);
	again = subscribe(t, "orders", "g1");
	cr_assert_eq(again, a, "a subscription keeps its number");
	cr_assert_eq(tbx_tokens_seq_current(t, &seq), TBX_OK);
	cr_assert_eq(seq, b, "subscribing again takes no number");
	cr_assert_eq(tbx_tokens_subscription(t, "orders", "g1", &since),
		     TBX_OK);
	cr_assert_eq(since, a);
	cr_assert_eq(tbx_tokens_subscribers(t, "orders", &n), TBX_OK);
	cr_assert_eq(n, 2);
	cr_assert_eq(tbx_tokens_subscribers(t, "other", &n), TBX_OK);
	cr_assert_eq(n, 0);

	sql("UPDATE @T.tbx_subscriptions SET used_ms = 5");
	cr_assert_eq(tbx_tokens_touch(t, "orders", "g1", &found), TBX_OK);
	cr_assert_eq(found, 1);
	cr_assert_gt(sql_int("SELECT used_ms FROM @T.tbx_subscriptions WHERE "
			     "grp = 'g1'"),
		     5);
	cr_assert_eq(sql_int("SELECT used_ms FROM @T.tbx_subscriptions WHERE "
			     "grp = 'g2'"),
		     5, "only the one touched");
	cr_assert_eq(tbx_tokens_touch(t, "orders", "gX", &found), TBX_OK);
	cr_assert_eq(found, 0);

	cr_assert_eq(tbx_tokens_subscribe(t, "^orders.*", "g1", &since),
		     TBX_EINVAL, "a pattern is not a topic");
	cr_assert_eq(tbx_tokens_subscribe(t, NULL, "g1", &since), TBX_EINVAL);
	tbx_tokens_close(t);
}

Test(pg_tokens, mint_creates_rows_only_for_groups_subscribed_before_it)
{
	tbx_tokens_t *t = open_store();
	char tok[3][TBX_UUID_LEN + 1], tok2[1][TBX_UUID_LEN + 1];
	int64_t s1, seq, late, seq2;
	uint64_t rows = 0;

	s1 = subscribe(t, "orders", "g1");
	subscribe(t, "orders", "g2");
	subscribe(t, "other", "g3");
	seq = mint(t, "g0", "att-1", "m1", "orders", 3, tok, &rows);
	cr_assert_gt(seq, s1);
	cr_assert_eq(rows, 6, "three tokens, two groups of the topic");
	late = subscribe(t, "orders", "g4");
	cr_assert_gt(late, seq);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(exists(t, tok[i], "g1"), 1);
		cr_assert_eq(exists(t, tok[i], "g2"), 1);
		cr_assert_eq(exists(t, tok[i], "g3"), 0, "other topic");
		cr_assert_eq(exists(t, tok[i], "g4"), 0, "subscribed after");
	}
	cr_assert_eq(sql_int("SELECT count(DISTINCT mint_seq) FROM "
			     "@T.tbx_tokens"),
		     1, "one number per call");
	cr_assert_eq(count_regs(t, "g0"), 1, "one registration per attempt");
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_registrations WHERE "
			     "attempt = 'att-1' AND send_grp = 'g0' AND msg_id "
			     "= 'm1'"),
		     3, "one row per token");

	/* After g4's subscription: g4 gets it; without an attempt, no
	 * registration. */
	seq2 = mint(t, NULL, NULL, NULL, "orders", 1, tok2, &rows);
	cr_assert_gt(seq2, late);
	cr_assert_eq(rows, 3);
	cr_assert_eq(exists(t, tok2[0], "g4"), 1);
	cr_assert_eq(count_regs(t, NULL), 1);
	/* Nobody subscribed: the registration is still written. */
	mint(t, "g0", "att-2", "m2", "nobody", 2, tok, &rows);
	cr_assert_eq(rows, 0);
	cr_assert_eq(count_regs(t, "g0"), 2);
	cr_assert_eq(count_rows(t, NULL), 9);
	cr_assert_eq(count_rows(t, "g1"), 4);
	cr_assert_eq(tbx_tokens_seq_current(t, &seq), TBX_OK);
	cr_assert_gt(seq, seq2);
	tbx_tokens_close(t);
}

Test(pg_tokens, mint_of_several_requests_takes_one_number)
{
	tbx_tokens_t *t = open_store();
	char a[2][TBX_UUID_LEN + 1], b[1][TBX_UUID_LEN + 1];
	tbx__mint_item_t ia[2], ib[1];
	tbx__mint_req_t reqs[2] = {{"att-a", "ma", ia, 2}, {NULL, "mb", ib, 1}};
	int64_t seq = 0;
	uint64_t rows = 0;

	subscribe(t, "x", "g1");
	for (int i = 0; i < 2; i++) {
		tbx__uuid(a[i]);
		ia[i] = (tbx__mint_item_t){a[i], "x"};
	}
	tbx__uuid(b[0]);
	ib[0] = (tbx__mint_item_t){b[0], "x"};
	cr_assert_eq(tbx_tokens_mint(t, "g0", reqs, 2, &seq, &rows), TBX_OK);
	cr_assert_eq(rows, 3);
	cr_assert_eq(count_regs(t, "g0"), 1, "only the request with one");
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_tokens WHERE "
			     "mint_seq = (SELECT last_value FROM @T.tbx_seq)"),
		     3);
	/* A registration needs its sender and its message. */
	reqs[0].msg_id = NULL;
	cr_assert_eq(tbx_tokens_mint(t, "g0", reqs, 1, &seq, &rows),
		     TBX_EINVAL);
	reqs[0].msg_id = "ma";
	cr_assert_eq(tbx_tokens_mint(t, NULL, reqs, 1, &seq, &rows),
		     TBX_EINVAL);
	/* A token minted twice fails whole: nothing of it stays. */
	ib[0] = ia[0];
	cr_assert_neq(tbx_tokens_mint(t, "g0", &reqs[1], 1, &seq, &rows),
		      TBX_OK);
	cr_assert_eq(count_rows(t, NULL), 3);
	tbx_tokens_close(t);
}

Test(pg_tokens, consume_confirm_and_drop_attempt)
{
	tbx_tokens_t *t = open_store();
	char w[2][TBX_UUID_LEN + 1], l[2][TBX_UUID_LEN + 1];
	const char *ids[3];
	uint64_t deleted = 9;
	int dropped = -1;

	subscribe(t, "out", "g1");
	subscribe(t, "out", "g2");
	mint(t, "g0", "att-w", "m1", "out", 2, w, NULL);
	mint(t, "g0", "att-l", "m1", "out", 2, l, NULL);

	/* D: the group's own rows only; a second delete finds nothing. */
	ids[0] = w[0];
	ids[1] = w[1];
	ids[2] = "no-such-token";
	cr_assert_eq(tbx_tokens_consume(t, "g1", ids, 3, &deleted), TBX_OK);
	cr_assert_eq(deleted, 2);
	cr_assert_eq(exists(t, w[0], "g1"), 0);
	cr_assert_eq(exists(t, w[0], "g2"), 1);
	cr_assert_eq(tbx_tokens_consume(t, "g1", ids, 3, &deleted), TBX_OK);
	cr_assert_eq(deleted, 0);
	cr_assert_eq(tbx_tokens_consume(t, "g1", ids, 0, &deleted), TBX_OK);
	cr_assert_eq(tbx_tokens_consume(t, NULL, ids, 1, &deleted), TBX_EINVAL);

	/* C: the winner's registrations go, its tokens stay; a loser's
	 * drop after that finds nothing to licence it. */
	cr_assert_eq(tbx_tokens_confirm(t, (const char *const[]){"att-w"}, 1),
		     TBX_OK);
	cr_assert_eq(count_regs(t, "g0"), 1);
	cr_assert_eq(tbx_tokens_drop_attempt(t, "att-w", &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 0);
	cr_assert_eq(deleted, 0);
	cr_assert_eq(exists(t, w[1], "g2"), 1, "in flight: kept");

	/* The loser: every group's rows of its tokens, and its
	 * registrations, once. */
	cr_assert_eq(tbx_tokens_drop_attempt(t, "att-l", &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 1);
	cr_assert_eq(deleted, 4);
	cr_assert_eq(exists(t, l[0], "g1"), 0);
	cr_assert_eq(exists(t, l[1], "g2"), 0);
	cr_assert_eq(count_regs(t, NULL), 0);
	cr_assert_eq(tbx_tokens_drop_attempt(t, "att-l", &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 0);
	cr_assert_eq(count_rows(t, NULL), 2, "the winner's rows of g2");
	cr_assert_eq(tbx_tokens_confirm(t, NULL, 0), TBX_OK);
	cr_assert_eq(tbx_tokens_confirm(t, (const char *const[]){NULL}, 1),
		     TBX_EINVAL);
	tbx_tokens_close(t);
}

/* exists for many tokens: an answer per token, in order, with repeats
 * and unknown ones, for the group asked about only, in one statement
 * (the countdown fault counts the calls). */
Test(pg_tokens, exists_many_answers_per_token_in_one_statement)
{
	tbx_tokens_t *t = open_store();
	char tok[2][TBX_UUID_LEN + 1], other[1][TBX_UUID_LEN + 1];
	const char *ids[5];
	int e[5] = {-1, -1, -1, -1, -1};

	subscribe(t, "orders", "g1");
	subscribe(t, "audit", "g2");
	mint(t, NULL, NULL, NULL, "orders", 2, tok, NULL);
	mint(t, NULL, NULL, NULL, "audit", 1, other, NULL);
	ids[0] = tok[1];
	ids[1] = "no-such-token";
	ids[2] = tok[0];
	ids[3] = other[0]; /* g2's token only */
	ids[4] = tok[1];   /* twice */
	tbx__fault_arm(2); /* a second call would fail */
	cr_assert_eq(tbx_tokens_exists_many(t, "g1", ids, 5, e), TBX_OK);
	cr_assert_eq(tbx_tokens_exists_many(t, "g1", NULL, 0, NULL), TBX_OK);
	cr_assert_not(tbx__fault_fired(), "one statement for five tokens");
	tbx__fault_arm(0);
	cr_assert_eq(e[0], 1);
	cr_assert_eq(e[1], 0);
	cr_assert_eq(e[2], 1);
	cr_assert_eq(e[3], 0, "another group's token is not ours");
	cr_assert_eq(e[4], 1);
	cr_assert_eq(tbx_tokens_exists_many(t, NULL, ids, 1, e), TBX_EINVAL);
	tbx_tokens_close(t);
}

Test(pg_tokens, registrations_are_listed_oldest_first_one_per_attempt)
{
	tbx_tokens_t *t = open_store();
	char tok[3][TBX_UUID_LEN + 1];
	tbx__reg_t *regs = (tbx__reg_t *)1, after;
	size_t cnt = 9;

	cr_assert_eq(tbx_tokens_registrations(t, "g0", 10, &regs, &cnt),
		     TBX_OK);
	cr_assert_eq(cnt, 0);
	cr_assert_null(regs);
	mint(t, "g0", "att-c", "m3", "orders", 3, tok, NULL);
	mint(t, "g0", "att-a", "m1", "orders", 1, tok, NULL);
	mint(t, "g0", "att-b", "m2", "orders", 2, tok, NULL);
	mint(t, "g0", "att-B", "m4", "orders", 1, tok, NULL);
	mint(t, "gX", "att-x", "m9", "orders", 1, tok, NULL);
	sql("UPDATE @T.tbx_registrations SET created_ms = CASE attempt "
	    "WHEN 'att-a' THEN 100 WHEN 'att-b' THEN 200 WHEN 'att-B' THEN "
	    "200 WHEN 'att-c' THEN 300 ELSE 50 END");

	cr_assert_eq(tbx_tokens_registrations(t, "g0", 10, &regs, &cnt),
		     TBX_OK);
	cr_assert_eq(cnt, 4);
	cr_assert_str_eq(regs[0].attempt, "att-a");
	cr_assert_str_eq(regs[0].msg_id, "m1");
	cr_assert_eq(regs[0].created_ms, 100);
	/* Byte order within one millisecond, as on SQLite. */
	cr_assert_str_eq(regs[1].attempt, "att-B");
	cr_assert_str_eq(regs[2].attempt, "att-b");
	cr_assert_str_eq(regs[3].attempt, "att-c");
	cr_assert_str_eq(regs[3].msg_id, "m3");
	after = regs[1];
	free(regs);

	cr_assert_eq(
	    tbx_tokens_registrations_after(t, "g0", &after, 10, &regs, &cnt),
	    TBX_OK);
	cr_assert_eq(cnt, 2, "after the cursor");
	cr_assert_str_eq(regs[0].attempt, "att-b");
	free(regs);
	cr_assert_eq(tbx_tokens_registrations(t, "g0", 2, &regs, &cnt), TBX_OK);
	cr_assert_eq(cnt, 2, "bounded by the limit");
	free(regs);
	cr_assert_eq(count_regs(t, "g0"), 4);
	cr_assert_eq(count_regs(t, NULL), 5);
	tbx_tokens_close(t);
}

/* The joined operations: on the service store's connection (a shared
 * tbx__pg_t), inside its transaction, committed and rolled back with
 * it. */
Test(pg_tokens, joined_operations_commit_and_roll_back_with_the_caller)
{
	char tok[3][TBX_UUID_LEN + 1], err[512];
	tbx__mint_item_t items[3];
	tbx__pg_t *conn;
	tbx_tokens_t *t, *own;
	int64_t seq = 0, seq2 = 0;
	uint64_t rows = 0, deleted = 0;
	const char *ids[1];

	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &conn, err, sizeof(err)),
		     TBX_OK, "%s", err);
	t = open_with(schema, conn, NULL);
	cr_assert(tbx_tokens_joinable(t));
	subscribe(t, "out", "g1");
	subscribe(t, "out", "g2");
	for (int i = 0; i < 3; i++) {
		tbx__uuid(tok[i]);
		items[i].token = tok[i];
		items[i].topic = "out";
	}
	ids[0] = tok[0];

	/* Outside a transaction they refuse: nothing would commit them. */
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq), TBX_ESTATE);
	cr_assert_eq(tbx_tokens_mint_joined(t, items, 1, 5, &rows), TBX_ESTATE);
	cr_assert_eq(tbx_tokens_consume_joined(t, "g1", ids, 1, &deleted),
		     TBX_ESTATE);

	/* Rolled back with the caller: no token. */
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq), TBX_OK);
	cr_assert_gt(seq, 0);
	cr_assert_eq(tbx_tokens_mint_joined(t, items, 2, seq, &rows), TBX_OK);
	/* The INSERT goes with the transaction's next statement. */
	cr_assert_eq(rows, 0, "sent with the next statement");
	cr_assert_eq(exists(t, tok[0], "g1"), 1, "seen inside");
	cr_assert_eq(rows, 4, "two tokens, two subscribed groups");
	/* A write of its own would overlap the caller's transaction. */
	cr_assert_eq(tbx_tokens_confirm(t, (const char *const[]){"a"}, 1),
		     TBX_ESTATE);
	tbx__pg_rollback(conn);
	cr_assert_eq(count_rows(t, NULL), 0);

	/* Committed with the caller, without registrations.  A sequence
	 * does not give a rolled-back number back: the next one is
	 * higher. */
	rows = 0;
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq2), TBX_OK);
	cr_assert_gt(seq2, seq);
	cr_assert_eq(tbx_tokens_mint_joined(t, items, 3, seq2, &rows), TBX_OK);
	cr_assert_eq(tbx__pg_commit(conn), TBX_OK);
	cr_assert_eq(rows, 6);
	cr_assert_eq(count_rows(t, "g1"), 3);
	cr_assert_eq(count_regs(t, NULL), 0);

	/* Consume: the group's own rows, only when committed. */
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_consume_joined(t, "g1", ids, 1, &deleted),
		     TBX_OK);
	cr_assert_eq(deleted, 1);
	tbx__pg_rollback(conn);
	cr_assert_eq(exists(t, tok[0], "g1"), 1);
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_consume_joined(t, "g1", ids, 1, &deleted),
		     TBX_OK);
	cr_assert_eq(tbx__pg_commit(conn), TBX_OK);
	cr_assert_eq(exists(t, tok[0], "g1"), 0);
	cr_assert_eq(exists(t, tok[0], "g2"), 1);

	/* Bad arguments. */
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_mint_joined(t, items, 1, 0, &rows), TBX_EINVAL);
	cr_assert_eq(tbx_tokens_seq_joined(t, NULL), TBX_EINVAL);
	cr_assert_eq(tbx_tokens_consume_joined(t, NULL, ids, 1, NULL),
		     TBX_EINVAL);
	tbx__pg_rollback(conn);

	/* A store on a connection of its own cannot join anything. */
	own = open_store();
	cr_assert_not(tbx_tokens_joinable(own));
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(own, &seq), TBX_ESTATE);
	tbx__pg_rollback(conn);
	tbx_tokens_close(own);

	/* The reference: closing the token store leaves the connection to
	 * its owner. */
	tbx_tokens_close(t);
	cr_assert_eq(conn->refs, 1);
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	tbx__pg_rollback(conn);
	tbx__pg_unref(conn);
}

/*
 * The ingress edge.
 */

static uint8_t fp_a[TBX_EDGE_FP_LEN], fp_b[TBX_EDGE_FP_LEN];

static void edge_item(tbx__edge_item_t *it, const char *topic,
		      const char *caller_id, const uint8_t *fp, const char *grp)
{
	memset(it, 0, sizeof(*it));
	it->topic = topic;
	it->caller_id = caller_id;
	it->fp = fp;
	it->grp = grp;
	tbx__uuid(it->msg_id);
	tbx__uuid(it->token);
}

Test(pg_tokens, publish_mint_decides_new_inflight_done_and_synthetic)
{
	tbx_tokens_t *t = open_store();
	tbx__edge_item_t it[5], again[3];
	int64_t entries = -1, refused = -1;
	uint64_t rows = 0;

	memset(fp_a, 0xaa, sizeof(fp_a));
	memset(fp_b, 0xbb, sizeof(fp_b));
	fp_a[0] = 0; /* a NUL byte in the fingerprint */
	subscribe(t, "in", "g1");
	subscribe(t, "in", "g2");

	/* A flush: two caller ids, one repeated with the same body (a
	 * natural duplicate inside the flush) and once with another (a
	 * synthetic one), one message without an id, and a replay for one
	 * group. */
	edge_item(&it[0], "in", "c1", fp_a, NULL);
	edge_item(&it[1], "in", "c2", fp_a, NULL);
	edge_item(&it[2], "in", "c1", fp_a, NULL);
	edge_item(&it[3], "in", "c1", fp_b, NULL);
	edge_item(&it[4], "in", NULL, NULL, "g2");
	cr_assert_eq(tbx_tokens_publish_mint(t, it, 5, 60000, 100, &rows),
		     TBX_OK);
	cr_assert_eq(it[0].verdict, TBX_EDGE_NEW);
	cr_assert_eq(it[1].verdict, TBX_EDGE_NEW);
	cr_assert_eq(it[2].verdict, TBX_EDGE_INFLIGHT);
	cr_assert_str_eq(it[2].msg_id, it[0].msg_id);
	cr_assert_str_eq(it[2].token, it[0].token);
	cr_assert_eq(it[2].seq, it[0].seq);
	cr_assert_eq(it[3].verdict, TBX_EDGE_SYNTHETIC);
	cr_assert_eq(it[4].verdict, TBX_EDGE_NEW);
	cr_assert_eq(it[4].seq, it[0].seq, "one number per flush");
	cr_assert_eq(rows, 5, "c1 and c2 to both groups, the replay to g2");
	cr_assert_eq(exists(t, it[4].token, "g2"), 1);
	cr_assert_eq(exists(t, it[4].token, "g1"), 0);
	cr_assert_eq(tbx_tokens_edge_count(t, &entries, &refused), TBX_OK);
	cr_assert_eq(entries, 2);
	cr_assert_eq(refused, 1);

	/* c2 delivered, c1 not: a re-send finds DONE and INFLIGHT with the
	 * original id, token and number; another body is synthetic. */
	cr_assert_eq(tbx_tokens_edge_delivered(t, &it[1], 1), TBX_OK);
	edge_item(&again[0], "in", "c1", fp_a, NULL);
	edge_item(&again[1], "in", "c2", fp_a, NULL);
	edge_item(&again[2], "in", "c2", fp_b, NULL);
	cr_assert_eq(tbx_tokens_publish_mint(t, again, 3, 60000, 100, &rows),
		     TBX_OK);
	cr_assert_eq(rows, 0, "nothing minted");
	cr_assert_eq(again[0].verdict, TBX_EDGE_INFLIGHT);
	cr_assert_str_eq(again[0].msg_id, it[0].msg_id);
	cr_assert_str_eq(again[0].token, it[0].token);
	cr_assert_eq(again[0].seq, it[0].seq);
	cr_assert_eq(again[1].verdict, TBX_EDGE_DONE);
	cr_assert_str_eq(again[1].token, it[1].token);
	cr_assert_eq(again[2].verdict, TBX_EDGE_SYNTHETIC);
	cr_assert_eq(tbx_tokens_edge_count(t, &entries, &refused), TBX_OK);
	cr_assert_eq(entries, 2);
	cr_assert_eq(refused, 2);
	/* Another topic is another key. */
	edge_item(&again[0], "in2", "c1", fp_b, NULL);
	cr_assert_eq(tbx_tokens_publish_mint(t, again, 1, 60000, 100, &rows),
		     TBX_OK);
	cr_assert_eq(again[0].verdict, TBX_EDGE_NEW);
	cr_assert_eq(rows, 0, "nobody subscribed to in2");
	/* Delivered marks only NEW and INFLIGHT items with an id. */
	cr_assert_eq(tbx_tokens_edge_delivered(t, it, 5), TBX_OK);
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_edge WHERE "
			     "delivered = 1"),
		     2);
	edge_item(&again[0], "in", "c1", fp_a, NULL);
	cr_assert_eq(tbx_tokens_publish_mint(t, again, 1, 60000, 100, &rows),
		     TBX_OK);
	cr_assert_eq(again[0].verdict, TBX_EDGE_DONE);
	/* Invalid input. */
	edge_item(&again[0], "in", "c9", NULL, NULL);
	cr_assert_eq(tbx_tokens_publish_mint(t, again, 1, 60000, 100, &rows),
		     TBX_EINVAL);
	cr_assert_eq(tbx_tokens_publish_mint(t, it, 1, -1, 100, &rows),
		     TBX_EINVAL);
	tbx_tokens_close(t);
}

/* tokens.format = set: one set per (topic, partition) of the flush's new
 * items, a row per subscribed group, bits in queue order; the edge
 * records them, and a natural duplicate (in the flush or after it) gets
 * the original's set, bit and partition. */
Test(pg_tokens, publish_mint_in_sets_records_the_set_at_the_edge)
{
	tbx_tokens_t *t = open_store();
	tbx__edge_item_t it[5], again[1];
	uint64_t rows = 0;
	int64_t pending = -1;
	tbx__bit_state_t st[2];

	memset(fp_a, 0xaa, sizeof(fp_a));
	memset(fp_b, 0xbb, sizeof(fp_b));
	subscribe(t, "in", "g1");
	subscribe(t, "in", "g2");
	edge_item(&it[0], "in", "c1", fp_a, NULL);
	edge_item(&it[1], "in", NULL, NULL, NULL);
	edge_item(&it[2], "in", "c1", fp_a, NULL);
	edge_item(&it[3], "in", "c3", fp_b, NULL);
	edge_item(&it[4], "in", "c1", fp_b, NULL);
	for (int i = 0; i < 5; i++) {
		it[i].in_set = 1;
		it[i].part = i == 3 ? 2 : 0;
	}
	cr_assert_eq(tbx_tokens_publish_mint(t, it, 5, 60000, 100, &rows),
		     TBX_OK);
	cr_assert_eq(rows, 4, "two sets (partitions 0 and 2), two groups");
	cr_assert_eq(it[0].verdict, TBX_EDGE_NEW);
	cr_assert_eq(it[0].bit, 0);
	cr_assert_eq(it[1].bit, 1);
	cr_assert_str_eq(it[1].set_id, it[0].set_id);
	cr_assert_str_empty(it[0].token);
	cr_assert_eq(it[2].verdict, TBX_EDGE_INFLIGHT);
	cr_assert_str_eq(it[2].set_id, it[0].set_id);
	cr_assert_eq(it[2].bit, 0);
	cr_assert_eq(it[2].part, 0);
	cr_assert_eq(it[3].part, 2);
	cr_assert_eq(it[3].bit, 0);
	cr_assert_str_neq(it[3].set_id, it[0].set_id);
	cr_assert_eq(it[4].verdict, TBX_EDGE_SYNTHETIC);
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_tokens"), 0);
	cr_assert_eq(tbx_tokens_sets_count(t, "g1", NULL, &pending, NULL),
		     TBX_OK);
	cr_assert_eq(pending, 3, "a bit per new message");
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_breg"), 0,
		     "no registration");
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_edge WHERE token = "
			     "'' AND tset IS NOT NULL AND tpart = tpart"),
		     2);
	tbx__bit_ref_t refs[2] = {{it[0].set_id, 1}, {it[3].set_id, 0}};
	cr_assert_eq(tbx_tokens_sets_test(t, "g2", refs, 2, st, NULL), TBX_OK);
	cr_assert_eq(st[0], TBX_BIT_SET);
	cr_assert_eq(st[1], TBX_BIT_SET);

	/* After the flush: the entry's set, bit, partition and number. */
	edge_item(&again[0], "in", "c3", fp_b, NULL);
	again[0].in_set = 1;
	cr_assert_eq(tbx_tokens_publish_mint(t, again, 1, 60000, 100, &rows),
		     TBX_OK);
	cr_assert_eq(rows, 0);
	cr_assert_eq(again[0].verdict, TBX_EDGE_INFLIGHT);
	cr_assert_str_eq(again[0].set_id, it[3].set_id);
	cr_assert_eq(again[0].part, 2);
	cr_assert_eq(again[0].seq, it[3].seq);
	/* A set for one group only is not a thing: refused. */
	edge_item(&again[0], "in", NULL, NULL, "g1");
	again[0].in_set = 1;
	cr_assert_eq(tbx_tokens_publish_mint(t, again, 1, 60000, 100, &rows),
		     TBX_EINVAL);
	tbx_tokens_close(t);
}

/* A version 3 schema: its edge entries keep their per-message tokens; a
 * read-write opening records version 4 in the migration's transaction,
 * and a publisher in sets re-sends such an entry with its token. */
Test(pg_tokens, a_version_3_schema_keeps_its_edge_entries)
{
	tbx_tokens_t *t = open_store();
	tbx__edge_item_t it[1];
	tbx__db_opts_t opts;
	uint64_t rows = 0;
	int version = 0, yes = -1;

	memset(fp_a, 0xaa, sizeof(fp_a));
	subscribe(t, "in", "g1");
	edge_item(&it[0], "in", "c1", fp_a, NULL);
	cr_assert_eq(tbx_tokens_publish_mint(t, it, 1, 60000, 100, &rows),
		     TBX_OK);
	tbx_tokens_close(t);
	sql("ALTER TABLE @T.tbx_edge DROP COLUMN tset, DROP COLUMN tbit, DROP "
	    "COLUMN tpart; UPDATE @T.tbx_schema_info SET version = 3");
	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	t = open_with(schema, NULL, &opts);
	cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_EDGE_SETS, &yes), TBX_OK);
	cr_assert_eq(yes, 0, "read-only: not migrated");
	tbx_tokens_close(t);
	tbx__db_opts_init(&opts);
	opts.create = 0;
	t = open_with(schema, NULL, &opts);
	cr_assert_eq(tbx_tokens_schema(t, &version), TBX_OK);
	cr_assert_eq(version, 4);
	cr_assert_eq(sql_int("SELECT version FROM @T.tbx_schema_info"), 4);
	cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_EDGE_SETS, &yes), TBX_OK);
	cr_assert_eq(yes, 1);
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_edge WHERE tset IS "
			     "NULL AND tbit IS NULL AND tpart IS NULL"),
		     1);
	char token[TBX_UUID_LEN + 1];
	memcpy(token, it[0].token, sizeof(token));
	edge_item(&it[0], "in", "c1", fp_a, NULL);
	it[0].in_set = 1;
	it[0].part = 1;
	cr_assert_eq(tbx_tokens_publish_mint(t, it, 1, 60000, 100, &rows),
		     TBX_OK);
	cr_assert_eq(it[0].verdict, TBX_EDGE_INFLIGHT);
	cr_assert_str_eq(it[0].token, token, "its per-message token");
	cr_assert_str_empty(it[0].set_id);
	cr_assert_eq(it[0].part, -1);
	cr_assert_eq(rows, 0);
	tbx_tokens_close(t);
}

Test(pg_tokens, edge_entries_past_the_window_are_superseded_or_swept)
{
	tbx_tokens_t *t = open_store();
	tbx__edge_item_t it[2];
	int64_t entries = -1;
	uint64_t rows = 0;

	memset(fp_a, 0xaa, sizeof(fp_a));
	memset(fp_b, 0xbb, sizeof(fp_b));
	subscribe(t, "in", "g1");
	edge_item(&it[0], "in", "c1", fp_a, NULL);
	edge_item(&it[1], "in", "c2", fp_a, NULL);
	cr_assert_eq(tbx_tokens_publish_mint(t, it, 2, 60000, 100, &rows),
		     TBX_OK);
	sql("UPDATE @T.tbx_edge SET created_ms = created_ms - 120000, "
	    "refused = 7");

	/* Not swept (sweep_max 0), but past the window: superseded. */
	edge_item(&it[0], "in", "c1", fp_b, NULL);
	cr_assert_eq(tbx_tokens_publish_mint(t, it, 1, 60000, 0, &rows),
		     TBX_OK);
	cr_assert_eq(it[0].verdict, TBX_EDGE_NEW);
	cr_assert_eq(rows, 1);
	cr_assert_eq(sql_int("SELECT refused FROM @T.tbx_edge WHERE caller_id "
			     "= 'c1'"),
		     0, "a new entry");
	cr_assert_eq(tbx_tokens_edge_count(t, &entries, NULL), TBX_OK);
	cr_assert_eq(entries, 2);
	/* Swept: c2 is gone, c1 (within the window now) stays. */
	cr_assert_eq(tbx_tokens_publish_mint(t, it, 0, 60000, 10, &rows),
		     TBX_OK);
	cr_assert_eq(tbx_tokens_edge_count(t, &entries, NULL), TBX_OK);
	cr_assert_eq(entries, 1);
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_edge WHERE caller_id "
			     "= 'c1'"),
		     1);
	tbx_tokens_close(t);
}

/* Another publisher's entry of the same caller id, not committed yet:
 * the mint waits for it (with a short busy timeout: BUSY), and after its
 * commit finds it. */
Test(pg_tokens, publish_mint_waits_for_a_concurrent_entry_of_its_caller_id)
{
	tbx__db_opts_t quick;
	tbx_tokens_t *t;
	tbx__edge_item_t it[2];
	tbx__pg_t *conn;
	char err[512], ins[512];
	uint64_t rows = 0;

	memset(fp_a, 0xaa, sizeof(fp_a));
	memset(fp_b, 0xbb, sizeof(fp_b));
	tbx__db_opts_init(&quick);
	quick.busy_timeout_ms = 100;
	t = open_with(schema, NULL, &quick);
	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &conn, err, sizeof(err)),
		     TBX_OK, "%s", err);
	snprintf(ins, sizeof(ins),
		 "INSERT INTO \"%s\".tbx_edge VALUES ('in', 'c1', "
		 "decode(repeat('aa', 32), 'hex'), "
		 "'00000000-0000-4000-8000-000000000001', "
		 "'00000000-0000-4000-8000-000000000002', 77, 0, 0, "
		 "(extract(epoch FROM now()) * 1000)::bigint)",
		 schema);
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx__pg_exec(conn, ins), TBX_OK, "%s",
		     tbx__pg_errmsg(conn));
	edge_item(&it[0], "in", "c1", fp_a, NULL);
	cr_assert_eq(tbx_tokens_publish_mint(t, it, 1, 60000, 100, &rows),
		     TBX_EBUSY);
	cr_assert_eq(tbx__pg_commit(conn), TBX_OK);
	edge_item(&it[0], "in", "c1", fp_a, NULL);
	edge_item(&it[1], "in", "c1", fp_b, NULL);
	cr_assert_eq(tbx_tokens_publish_mint(t, it, 2, 60000, 100, &rows),
		     TBX_OK);
	cr_assert_eq(it[0].verdict, TBX_EDGE_INFLIGHT);
	cr_assert_str_eq(it[0].msg_id, "00000000-0000-4000-8000-000000000001");
	cr_assert_eq(it[0].seq, 77);
	cr_assert_eq(it[1].verdict, TBX_EDGE_SYNTHETIC);
	tbx__pg_unref(conn);
	tbx_tokens_close(t);
}

/* A flush of many caller ids, in no order, with repeats. */
Test(pg_tokens, publish_mint_of_a_large_flush_decides_every_item)
{
	enum { N = 300 };
	tbx_tokens_t *t = open_store();
	static tbx__edge_item_t it[N];
	static char ids[N][16];
	int64_t entries = -1;
	uint64_t rows = 0;

	memset(fp_a, 0xaa, sizeof(fp_a));
	subscribe(t, "in", "g1");
	for (int i = 0; i < N; i++) {
		/* Ids 0..199 in a scrambled order; the last 100 repeat. */
		snprintf(ids[i], sizeof(ids[i]), "c%03d",
			 i < 200 ? (i * 37) % 200 : (i * 13) % 200);
		edge_item(&it[i], "in", ids[i], fp_a, NULL);
	}
	cr_assert_eq(tbx_tokens_publish_mint(t, it, N, 60000, 100, &rows),
		     TBX_OK);
	cr_assert_eq(rows, 200);
	for (int i = 0; i < N; i++)
		cr_assert_eq(it[i].verdict,
			     i < 200 ? TBX_EDGE_NEW : TBX_EDGE_INFLIGHT,
			     "item %d", i);
	cr_assert_eq(tbx_tokens_edge_count(t, &entries, NULL), TBX_OK);
	cr_assert_eq(entries, 200);
	tbx_tokens_close(t);
}

/*
 * The read side.
 */

typedef struct seen {
	int n;
	char text[8][400];
	int64_t v[8][4];
} seen_t;

static int on_sum(void *o, const tbx__grp_sum_t *s)
{
	seen_t *x = o;

	snprintf(x->text[x->n], sizeof(x->text[0]), "%s", s->grp);
	x->v[x->n][0] = s->n[0];
	x->v[x->n][1] = s->n[1];
	x->v[x->n++][2] = s->ms;
	return 0;
}

static int on_sub(void *o, const tbx__sub_t *s)
{
	seen_t *x = o;

	snprintf(x->text[x->n], sizeof(x->text[0]), "%s/%s", s->topic, s->grp);
	x->v[x->n][0] = s->since_seq;
	x->v[x->n][1] = s->created_ms;
	x->v[x->n++][2] = s->used_ms;
	return 0;
}

static int on_str(void *o, const char *s)
{
	seen_t *x = o;

	snprintf(x->text[x->n++], sizeof(x->text[0]), "%s", s);
	return 0;
}

static int on_attempt(void *o, const tbx__reg_t *r, int64_t tokens)
{
	seen_t *x = o;

	snprintf(x->text[x->n], sizeof(x->text[0]), "%s:%s", r->attempt,
		 r->msg_id);
	x->v[x->n][0] = tokens;
	x->v[x->n++][1] = r->created_ms;
	return 0;
}

static int on_token(void *o, const tbx__token_rec_t *r)
{
	seen_t *x = o;

	snprintf(x->text[x->n], sizeof(x->text[0]), "%.8s/%s", r->token,
		 r->grp);
	x->v[x->n][0] = r->mint_seq;
	x->v[x->n++][1] = r->created_ms;
	return x->n >= 8;
}

static int on_token_reg(void *o, const tbx__reg_t *r, const char *send_grp)
{
	seen_t *x = o;

	snprintf(x->text[x->n++], sizeof(x->text[0]), "%s:%s:%s", r->attempt,
		 send_grp, r->msg_id);
	return 0;
}

static int stop_at_once(void *o, const tbx__grp_sum_t *s)
{
	(void)s;
	++*(int *)o;
	return 1;
}

Test(pg_tokens, inspect_reads_list_in_the_sqlite_order)
{
	tbx_tokens_t *t = open_store();
	char a[2][TBX_UUID_LEN + 1], b[1][TBX_UUID_LEN + 1],
	    c[1][TBX_UUID_LEN + 1], out[TBX_UUID_LEN + 1];
	const char *only_g2[] = {"g2"};
	tbx__filter_t f = TBX_FILTER_ALL;
	seen_t s;
	int64_t total = -1, n = -1;
	int matches = -1, calls = 0;

	subscribe(t, "out", "g2");
	subscribe(t, "out", "g1");
	subscribe(t, "alpha", "g3");
	mint(t, "s1", "att-1", "m1", "out", 2, a, NULL);
	mint(t, "s0", "att-0", "m0", "out", 1, b, NULL);
	mint(t, "s1", "att-2", "m2", "alpha", 1, c, NULL);
	sql("UPDATE @T.tbx_tokens SET created_ms = mint_seq * 1000");
	sql("UPDATE @T.tbx_registrations SET created_ms = CASE attempt WHEN "
	    "'att-2' THEN 5 ELSE 10 END");

	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_tokens_tokens_summary(t, on_sum, &s), TBX_OK);
	cr_assert_eq(s.n, 3);
	cr_assert_str_eq(s.text[0], "g1");
	cr_assert_eq(s.v[0][0], 3);
	cr_assert_str_eq(s.text[2], "g3");
	cr_assert_eq(s.v[2][0], 1);
	cr_assert_eq(tbx_tokens_tokens_summary(t, stop_at_once, &calls),
		     TBX_OK);
	cr_assert_eq(calls, 1, "a non-zero return stops");

	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_tokens_registrations_summary(t, on_sum, &s), TBX_OK);
	cr_assert_eq(s.n, 2);
	cr_assert_str_eq(s.text[0], "s0");
	cr_assert_str_eq(s.text[1], "s1");
	cr_assert_eq(s.v[1][0], 2, "attempts");
	cr_assert_eq(s.v[1][1], 3, "registrations");
	cr_assert_eq(s.v[1][2], 5, "the oldest");

	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_tokens_subscriptions_list(t, on_sub, &s), TBX_OK);
	cr_assert_eq(s.n, 3);
	cr_assert_str_eq(s.text[0], "alpha/g3");
	cr_assert_str_eq(s.text[1], "out/g1");
	cr_assert_str_eq(s.text[2], "out/g2");
	cr_assert_eq(s.v[2][2], s.v[2][1], "never used: its creation");

	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_tokens_sender_groups(t, on_str, &s), TBX_OK);
	cr_assert_eq(s.n, 2);
	cr_assert_str_eq(s.text[0], "s0");

	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_tokens_attempts(t, "s1", on_attempt, &s), TBX_OK);
	cr_assert_eq(s.n, 2);
	cr_assert_str_eq(s.text[0], "att-2:m2", "the oldest first");
	cr_assert_str_eq(s.text[1], "att-1:m1");
	cr_assert_eq(s.v[1][0], 2);
	cr_assert_eq(tbx_tokens_attempt_token_rows(t, "att-1", &n), TBX_OK);
	cr_assert_eq(n, 4, "two tokens, two groups");

	/* Token rows: oldest first, the filter's groups, time and limit. */
	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_tokens_tokens_list(t, &f, &total, on_token, &s),
		     TBX_OK);
	cr_assert_eq(total, 7);
	cr_assert_eq(s.n, 7);
	cr_assert_leq(s.v[0][1], s.v[6][1]);
	f.groups = only_g2;
	f.group_cnt = 1;
	f.limit = 2;
	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_tokens_tokens_list(t, &f, &total, on_token, &s),
		     TBX_OK);
	cr_assert_eq(total, 3);
	cr_assert_eq(s.n, 2, "the limit");
	cr_assert(strstr(s.text[0], "/g2"));
	f.created_max = s.v[0][1];
	f.limit = 0;
	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_tokens_tokens_list(t, &f, &total, on_token, &s),
		     TBX_OK);
	cr_assert_eq(total, 2, "created at or before");
	cr_assert_eq(s.n, 2);

	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_tokens_token_rows(t, a[0], on_token, &s), TBX_OK);
	cr_assert_eq(s.n, 2);
	cr_assert(strstr(s.text[0], "/g1"));
	cr_assert(strstr(s.text[1], "/g2"));
	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_tokens_token_registrations(t, a[1], on_token_reg, &s),
		     TBX_OK);
	cr_assert_eq(s.n, 1);
	cr_assert_str_eq(s.text[0], "att-1:s1:m1");

	/* Matching an id: itself, a unique prefix, several, none. */
	cr_assert_eq(tbx_tokens_token_match(t, a[0], out, &matches), TBX_OK);
	cr_assert_eq(matches, 1);
	cr_assert_str_eq(out, a[0]);
	sql("INSERT INTO @T.tbx_tokens VALUES ('zz-1', 'g9', 1, 1), ('zz-2', "
	    "'g9', 1, 1), ('zy-3', 'g9', 1, 1)");
	cr_assert_eq(tbx_tokens_token_match(t, "zy", out, &matches), TBX_OK);
	cr_assert_eq(matches, 1);
	cr_assert_str_eq(out, "zy-3");
	cr_assert_eq(tbx_tokens_token_match(t, "zz", out, &matches), TBX_OK);
	cr_assert_eq(matches, 2);
	cr_assert_eq(tbx_tokens_token_match(t, "q%", out, &matches), TBX_OK);
	cr_assert_eq(matches, 0);
	cr_assert_eq(tbx_tokens_token_match(t, "z_", out, &matches), TBX_OK);
	cr_assert_eq(matches, 0, "no pattern characters");
	tbx_tokens_close(t);
}

Test(pg_tokens, unsubscribe_removes_an_unused_subscription)
{
	tbx_tokens_t *t = open_store();
	char a[1][TBX_UUID_LEN + 1];
	tbx__unsub_t r;

	subscribe(t, "out", "g1");
	subscribe(t, "other", "g1");
	subscribe(t, "out", "g2");
	mint(t, NULL, NULL, NULL, "out", 1, a, NULL);
	sql("UPDATE @T.tbx_subscriptions SET used_ms = 1000");

	cr_assert_eq(tbx_tokens_unsubscribe(t, "nope", "g1", 5000, 1, &r),
		     TBX_OK);
	cr_assert_eq(r.found, 0);
	cr_assert_eq(r.removed, 0);
	/* Used after the limit: found, left. */
	cr_assert_eq(tbx_tokens_unsubscribe(t, "out", "g1", 999, 1, &r),
		     TBX_OK);
	cr_assert_eq(r.found, 1);
	cr_assert_eq(r.removed, 0);
	cr_assert_eq(r.used_ms, 1000);
	cr_assert_eq(r.others, 1);
	cr_assert_eq(r.token_rows, 1);
	/* Removed; the group has another subscription: its rows stay. */
	cr_assert_eq(tbx_tokens_unsubscribe(t, "out", "g1", 1000, 1, &r),
		     TBX_OK);
	cr_assert_eq(r.removed, 1);
	cr_assert_eq(r.deleted, 0);
	cr_assert_eq(count_rows(t, "g1"), 1);
	/* The last one: its rows go with it.  Without remove: a look. */
	cr_assert_eq(tbx_tokens_unsubscribe(t, "out", "g2", 5000, 0, &r),
		     TBX_OK);
	cr_assert_eq(r.removed, 0);
	cr_assert_eq(r.others, 0);
	cr_assert_eq(tbx_tokens_unsubscribe(t, "out", "g2", 5000, 1, &r),
		     TBX_OK);
	cr_assert_eq(r.removed, 1);
	cr_assert_eq(r.deleted, 1);
	cr_assert_eq(count_rows(t, "g2"), 0);
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_subscriptions"), 1);
	tbx_tokens_close(t);
}

/* read_begin: one snapshot until read_end. */
Test(pg_tokens, reads_between_read_begin_and_end_see_one_snapshot)
{
	tbx_tokens_t *t = open_store(), *w = open_store();
	char a[1][TBX_UUID_LEN + 1];

	subscribe(w, "out", "g1");
	mint(w, NULL, NULL, NULL, "out", 1, a, NULL);
	cr_assert_eq(tbx_tokens_read_begin(t), TBX_OK);
	cr_assert_eq(count_rows(t, NULL), 1);
	mint(w, NULL, NULL, NULL, "out", 1, a, NULL);
	cr_assert_eq(count_rows(t, NULL), 1, "the snapshot of the first read");
	tbx_tokens_read_end(t);
	cr_assert_eq(count_rows(t, NULL), 2);
	tbx_tokens_close(w);
	tbx_tokens_close(t);
}

/*
 * The subscription lock: subscribing against minting.
 */

/* A group subscribed before a mint gets its token; one subscribing after
 * it does not, and its number is above the mint's. */
Test(pg_tokens, subscribing_before_a_mint_gets_the_token_after_does_not)
{
	tbx_tokens_t *a = open_store(), *b = open_store();
	char tok[1][TBX_UUID_LEN + 1];
	int64_t before, seq, after;

	before = subscribe(a, "out", "early");
	seq = mint(b, "s", "att", "m", "out", 1, tok, NULL);
	after = subscribe(a, "out", "late");
	cr_assert_lt(before, seq);
	cr_assert_gt(after, seq);
	cr_assert_eq(exists(b, tok[0], "early"), 1);
	cr_assert_eq(exists(b, tok[0], "late"), 0);
	tbx_tokens_close(a);
	tbx_tokens_close(b);
}

/* A mint in progress (its shared lock held in an open transaction) makes
 * a subscribe wait: with a short busy timeout it fails BUSY, and
 * succeeds once the mint committed, with a number above the mint's.  A
 * subscribe holding the lock makes a mint wait the same way. */
Test(pg_tokens, a_mint_in_progress_holds_a_subscribe_back)
{
	tbx__db_opts_t quick;
	char err[512], tok[1][TBX_UUID_LEN + 1], lock[160];
	tbx__mint_item_t item;
	tbx__pg_t *conn;
	tbx_tokens_t *joined, *other, *elsewhere;
	int64_t seq = 0, since = 0;
	uint64_t rows = 0;
	tbx__unsub_t unsub;

	tbx__db_opts_init(&quick);
	quick.busy_timeout_ms = 100;
	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &conn, err, sizeof(err)),
		     TBX_OK, "%s", err);
	joined = open_with(schema, conn, NULL);
	other = open_with(schema, NULL, &quick);
	subscribe(other, "out", "early");

	tbx__uuid(tok[0]);
	item = (tbx__mint_item_t){tok[0], "out"};
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(joined, &seq), TBX_OK);
	cr_assert_eq(tbx_tokens_subscribe(other, "out", "late", &since),
		     TBX_EBUSY, "the mint's shared lock holds it back");
	/* Removing a subscription too: the mint may have read it. */
	cr_assert_eq(
	    tbx_tokens_unsubscribe(other, "out", "early", INT64_MAX, 1, &unsub),
	    TBX_EBUSY);
	cr_assert_eq(tbx_tokens_mint_joined(joined, &item, 1, seq, &rows),
		     TBX_OK);
	cr_assert_eq(tbx__pg_commit(conn), TBX_OK);
	cr_assert_eq(rows, 1);
	cr_assert_eq(tbx_tokens_subscribe(other, "out", "late", &since),
		     TBX_OK);
	cr_assert_gt(since, seq);
	cr_assert_eq(exists(other, tok[0], "late"), 0);
	cr_assert_eq(exists(other, tok[0], "early"), 1);

	/* The other way round: the exclusive lock (a subscribe between its
	 * lock and its commit) holds a mint back. */
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	snprintf(lock, sizeof(lock),
		 "SELECT pg_advisory_xact_lock(1413634050, hashtext('%s'))",
		 schema);
	cr_assert_eq(tbx__pg_exec(conn, lock), TBX_OK);
	cr_assert_eq(tbx_tokens_mint(other, NULL,
				     &(tbx__mint_req_t){NULL, NULL, &item, 1},
				     1, &seq, &rows),
		     TBX_EBUSY);
	/* The lock is the token store's: another one in the same database
	 * (s_schema here) is not held back. */
	elsewhere = open_with(s_schema, NULL, &quick);
	cr_assert_eq(tbx_tokens_subscribe(elsewhere, "out", "g", &since),
		     TBX_OK);
	tbx_tokens_close(elsewhere);
	tbx__pg_rollback(conn);
	tbx__uuid(tok[0]);
	cr_assert_eq(tbx_tokens_mint(other, NULL,
				     &(tbx__mint_req_t){NULL, NULL, &item, 1},
				     1, &seq, &rows),
		     TBX_OK);
	cr_assert_eq(rows, 2);
	/* Mints share the lock: one in progress does not hold another. */
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(joined, &seq), TBX_OK);
	tbx__uuid(tok[0]);
	cr_assert_eq(tbx_tokens_mint(other, NULL,
				     &(tbx__mint_req_t){NULL, NULL, &item, 1},
				     1, &since, &rows),
		     TBX_OK);
	tbx__pg_rollback(conn);
	tbx_tokens_close(other);
	tbx_tokens_close(joined);
	tbx__pg_unref(conn);
}

/*
 * The sweeper, through the interface, with T on PostgreSQL.
 */

#define SGRP  "g1"
#define SOUT  "out"
#define SDOWN "g2"

/* Where S is: an SQLite file, or PostgreSQL apart from T (a connection
 * each), or joined (T on S's connection). */
enum { S_SQLITE, S_PG, S_PG_JOINED };

static tbx_outbox_t *sweep_store(int where)
{
	tbx_outbox_t *s = NULL;
	char path[128], err[512];

	if (where != S_SQLITE) {
		cr_assert_eq(tbx_outbox_pg_open(tt_pg_url(), s_schema, NULL, &s,
						err, sizeof(err)),
			     TBX_OK, "%s", err);
		return s;
	}
	tbx__strlcpy(dir, "/tmp/tbx-pgsweep-XXXXXX", sizeof(dir));
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/s.db", dir);
	cr_assert_eq(tbx_outbox_open(path, NULL, &s, err, sizeof(err)), TBX_OK,
		     "%s", err);
	return s;
}

static tbx_tokens_t *sweep_tokens(int where, tbx_outbox_t *s)
{
	return where == S_PG_JOINED ? open_with(schema, tbx_outbox_pg(s), NULL)
				    : open_store();
}

/* A row of @p msg_id with @p n messages, and an attempt minted for it;
 * @p record: the attempt recorded in the row (it won). */
static void sweep_attempt(tbx_outbox_t *s, tbx_tokens_t *t, const char *msg_id,
			  size_t n, int insert, int record, tbx__row_t *row)
{
	tbx__mint_item_t items[4];
	tbx__mint_req_t req;
	int won = -1;

	tbx__row_init(row);
	if (tbx_outbox_row_load(s, SGRP, msg_id, row) == TBX_ENOENT) {
		tbx__strlcpy(row->msg_id, msg_id, sizeof(row->msg_id));
		tbx__strlcpy(row->in_topic, "in", sizeof(row->in_topic));
		for (size_t i = 0; i < n; i++)
			cr_assert_eq(tbx__row_add(row, SOUT, "Pong", NULL, 0,
						  NULL, 0, NULL, 0),
				     TBX_OK);
		if (insert) {
			cr_assert_eq(tbx_outbox_begin(s), TBX_OK);
			cr_assert_eq(tbx_outbox_row_insert(s, SGRP, row),
				     TBX_OK);
			cr_assert_eq(tbx_outbox_commit(s), TBX_OK);
		}
	}
	tbx__uuid(row->attempt);
	for (size_t i = 0; i < row->msg_cnt; i++) {
		tbx__uuid(row->msgs[i].token);
		items[i] =
		    (tbx__mint_item_t){row->msgs[i].token, row->msgs[i].topic};
	}
	req = (tbx__mint_req_t){row->attempt, row->msg_id, items, row->msg_cnt};
	cr_assert_eq(tbx_tokens_mint(t, SGRP, &req, 1, &row->mint_seq, NULL),
		     TBX_OK);
	if (!record)
		return;
	cr_assert_eq(tbx_outbox_begin(s), TBX_OK);
	cr_assert_eq(tbx_outbox_row_set_attempt(s, SGRP, row, &won), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(s), TBX_OK);
	cr_assert_eq(won, record > 0);
}

static size_t tokens_left(tbx_tokens_t *t, const tbx__row_t *row)
{
	size_t n = 0;

	for (size_t i = 0; i < row->msg_cnt; i++)
		n += (size_t)exists(t, row->msgs[i].token, SDOWN);
	return n;
}

static void sweeper(int where)
{
	tbx_outbox_t *s = sweep_store(where);
	tbx_tokens_t *t = sweep_tokens(where, s);
	tbx__row_t won, lost, orphan, flight;
	tbx__sweep_stats_t st;
	tbx__sweep_cursor_t cur;

	subscribe(t, SOUT, SDOWN);
	sweep_attempt(s, t, "m1", 2, 1, 1, &won);
	sweep_attempt(s, t, "m1", 0, 0, -1, &lost); /* recording lost */
	sweep_attempt(s, t, "gone", 3, 0, 0, &orphan);
	sweep_attempt(s, t, "m2", 1, 1, 0, &flight);

	cr_assert_eq(tbx_tokens_sweep(t, s, SGRP, 100, &st), TBX_OK);
	cr_assert_eq(st.examined, 4);
	cr_assert_eq(st.winners, 1);
	cr_assert_eq(st.orphans, 2);
	cr_assert_eq(st.in_flight, 1);
	cr_assert_eq(st.tokens_deleted, 5);
	cr_assert_eq(tokens_left(t, &won), 2, "the winner's are in flight");
	cr_assert_eq(tokens_left(t, &lost), 0);
	cr_assert_eq(tokens_left(t, &orphan), 0);
	cr_assert_eq(tokens_left(t, &flight), 1);
	cr_assert_eq(count_regs(t, SGRP), 1, "the one in flight");

	/* The resuming pass reaches past the head, then starts over. */
	memset(&cur, 0, sizeof(cur));
	cr_assert_eq(tbx__tokens_sweep_resume(t, s, SGRP, 1, &cur, &st),
		     TBX_OK);
	cr_assert_eq(st.in_flight, 1);
	cr_assert(cur.valid);
	cr_assert_eq(tbx__tokens_sweep_resume(t, s, SGRP, 1, &cur, &st),
		     TBX_OK);
	cr_assert_eq(st.examined, 0);
	cr_assert_not(cur.valid);
	tbx__row_clear(&won);
	tbx__row_clear(&lost);
	tbx__row_clear(&orphan);
	tbx__row_clear(&flight);
	tbx_tokens_close(t);
	tbx_outbox_close(s);
}

Test(pg_tokens, the_sweeper_keeps_winners_and_drops_orphans)
{
	sweeper(S_SQLITE);
}

Test(pg_tokens, the_sweeper_with_the_service_store_on_postgresql)
{
	sweeper(S_PG);
}

Test(pg_tokens, the_sweeper_with_both_stores_on_one_connection)
{
	sweeper(S_PG_JOINED);
}

/* A confirm that got there first (C of a winner that finished after the
 * sweeper read S) keeps its tokens: the drop finds no registration. */
Test(pg_tokens, a_drop_after_the_confirm_keeps_the_tokens)
{
	tbx_outbox_t *s = sweep_store(S_PG);
	tbx_tokens_t *t = open_store(), *w = open_store();
	tbx__row_t row;
	int verdict = -1, dropped = -1;
	uint64_t deleted = 9;

	subscribe(t, SOUT, SDOWN);
	sweep_attempt(s, t, "m1", 2, 0, 0, &row);
	cr_assert_eq(tbx__sweep_classify(s, SGRP, &(tbx__reg_t){.msg_id = "m1"},
					 &verdict, NULL),
		     TBX_OK);
	cr_assert_eq(verdict, TBX_SWEEP_ORPHAN_NO_ROW, "what S said");
	cr_assert_eq(
	    tbx_tokens_confirm(w, (const char *const[]){row.attempt}, 1),
	    TBX_OK);
	cr_assert_eq(
	    tbx_tokens_drop_attempt(t, row.attempt, &dropped, &deleted),
	    TBX_OK);
	cr_assert_eq(dropped, 0);
	cr_assert_eq(deleted, 0);
	cr_assert_eq(tokens_left(t, &row), 2);
	tbx__row_clear(&row);
	tbx_tokens_close(w);
	tbx_tokens_close(t);
	tbx_outbox_close(s);
}

/*
 * Faults.
 */

static int64_t rows_now(tbx_tokens_t *t)
{
	int64_t n = -1, r = -1;

	cr_assert_eq(tbx_tokens_count(t, NULL, &n, &r), TBX_OK,
		     "the call after a fault works (%s)",
		     tbx_tokens_errmsg(t) ? tbx_tokens_errmsg(t) : "");
	return n * 1000 + r;
}

/* The countdown fault fails each call of a mint in turn: it either
 * commits whole or leaves nothing, and the next call works (with a cut
 * connection: it connects again). */
static void fault_loop(int conn_loss)
{
	tbx_tokens_t *t = open_store();
	char a[3][TBX_UUID_LEN + 1], attempt[TBX_UUID_LEN + 1];
	tbx__mint_item_t items[3];
	tbx__mint_req_t reqs[2] = {{"att", "m1", items, 2},
				   {NULL, NULL, items + 2, 1}};
	long n;

	subscribe(t, "out", "g1");
	subscribe(t, "out", "g2");
	tbx__fault_pg_conn_loss(conn_loss);
	for (n = 1; n < 50; n++) {
		int64_t before = rows_now(t), after;
		uint64_t rows = 0;
		int64_t seq = 0;
		int err, fired;

		for (int i = 0; i < 3; i++) {
			tbx__uuid(a[i]);
			items[i] = (tbx__mint_item_t){a[i], "out"};
		}
		tbx__uuid(attempt);
		reqs[0].attempt = attempt;
		tbx__fault_arm(n);
		err = tbx_tokens_mint(t, "s", reqs, 2, &seq, &rows);
		fired = tbx__fault_fired();
		tbx__fault_arm(0);
		after = rows_now(t);
		if (!fired) {
			cr_assert_eq(err, TBX_OK);
			cr_assert_eq(rows, 6);
			cr_assert_eq(after, before + 6 * 1000 + 1);
			break;
		}
		cr_assert_neq(err, TBX_OK, "call %ld failed silently", n);
		cr_assert_eq(after, before, "call %ld left a part behind", n);
	}
	cr_assert_gt(n, 4, "BEGIN, the number, the rows and COMMIT failed");
	cr_assert_lt(n, 50);
	tbx_tokens_close(t);
}

Test(pg_tokens, fault_loop_over_mint_leaves_all_or_nothing)
{
	fault_loop(0);
}

Test(pg_tokens, fault_loop_with_a_cut_connection_reconnects)
{
	fault_loop(1);
}

/* A cut connection under a read: the read fails, the next one connects
 * again; on a shared connection the owner's BEGIN does. */
Test(pg_tokens, a_read_after_a_lost_connection_connects_again)
{
	tbx_tokens_t *t = open_store();
	int e = -1;

	subscribe(t, "out", "g1");
	cr_assert_eq(tbx__pg_reconnects(tbx_tokens_pg(t)), 0);
	tbx__fault_pg_conn_loss(1);
	tbx__fault_arm(1);
	cr_assert_neq(tbx_tokens_exists(t, "x", "g1", &e), TBX_OK);
	cr_assert(tbx__fault_fired());
	tbx__fault_arm(0);
	cr_assert_eq(tbx_tokens_exists(t, "x", "g1", &e), TBX_OK);
	cr_assert_eq(e, 0);
	/* Counted, for the stats of a worker or publisher. */
	cr_assert_eq(tbx__pg_reconnects(tbx_tokens_pg(t)), 1);
	cr_assert_eq(count_rows(t, NULL), 0);
	tbx_tokens_close(t);
}

/* inspect asks the store what its tables hold: PostgreSQL's version 1
 * has the ingress edge and the store's identity, which SQLite's schema
 * numbers (4 and 6) would deny it. */
Test(pg_tokens, the_tables_answer_what_they_hold)
{
	tbx_tokens_t *t = open_store();
	int version = 0, yes = -1;

	cr_assert_eq(tbx_tokens_schema(t, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_TOKENS_VERSION);
	cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_EDGE, &yes), TBX_OK);
	cr_assert_eq(yes, 1);
	yes = -1;
	cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_STORE_ID, &yes), TBX_OK);
	cr_assert_eq(yes, 1);
	cr_assert_eq(tbx_tokens_has(t, 99, &yes), TBX_EINVAL);
	cr_assert_eq(yes, 0);
	tbx_tokens_close(t);
}

/*
 * The ranges of the sequence.
 */

static int issued(tbx_tokens_t *t, int64_t seq)
{
	int yes = -1;

	cr_assert_eq(tbx_tokens_seq_issued(t, seq, &yes), TBX_OK);
	return yes;
}

/* A schema restored from a backup (here: its sequence and ranges put
 * back as they were, and the tokens taken since removed) never issues a
 * lost number again, and judges every one never issued. */
Test(pg_tokens, a_restored_store_never_issues_a_lost_number_again)
{
	tbx_tokens_t *t = open_store();
	char tok[1][TBX_UUID_LEN + 1], put[512];
	int64_t since, value, lost[3], after[2];

	since = subscribe(t, "orders", "g1");
	tbx_tokens_close(t);
	/* The backup. */
	value = sql_int("SELECT last_value FROM @T.tbx_seq");
	sql("CREATE TABLE @T.backup AS SELECT * FROM @T.tbx_seq_ranges");
	/* The lost history, over two openings. */
	t = open_store();
	lost[0] = mint(t, NULL, NULL, NULL, "orders", 1, tok, NULL);
	tbx_tokens_close(t);
	t = open_store();
	lost[1] = subscribe(t, "orders", "g2");
	lost[2] = mint(t, NULL, NULL, NULL, "orders", 1, tok, NULL);
	tbx_tokens_close(t);
	/* The restore. */
	snprintf(put, sizeof(put),
		 "DELETE FROM @T.tbx_seq_ranges; INSERT INTO @T.tbx_seq_ranges "
		 "SELECT * FROM @T.backup; DELETE FROM @T.tbx_tokens; DELETE "
		 "FROM @T.tbx_subscriptions WHERE grp = 'g2'; SELECT "
		 "setval('@T.tbx_seq', %lld, true)",
		 (long long)value);
	sql(put);

	t = open_store();
	after[0] = mint(t, NULL, NULL, NULL, "orders", 1, tok, NULL);
	after[1] = subscribe(t, "orders", "g3");
	for (int i = 0; i < 3; i++) {
		for (int j = 0; j < 2; j++)
			cr_assert_neq(after[j], lost[i],
				      "lost number %lld issued again",
				      (long long)lost[i]);
		cr_assert_eq(issued(t, lost[i]), 0, "lost %lld judged issued",
			     (long long)lost[i]);
	}
	cr_assert_eq(issued(t, since), 1);
	cr_assert_eq(issued(t, after[0]), 1);
	cr_assert_eq(issued(t, after[1]), 1);
	cr_assert_eq(issued(t, after[1] + 1), 0, "above the sequence");
	tbx_tokens_close(t);
}

/* Openers (each starts a range under the exclusive subscription lock)
 * beside processes that mint, subscribe and take joined numbers: every
 * number taken is judged issued, and the ranges never overlap. */
Test(pg_tokens, every_number_taken_beside_concurrent_openers_is_issued)
{
	enum { PROCS = 4, ROUNDS = 5, MINTS = 4 };
	int64_t seen[PROCS * ROUNDS * (MINTS + 1)], n;
	size_t cnt = 0;
	tbx_tokens_t *t;
	int fds[2];

	tbx_tokens_close(open_store());
	cr_assert_eq(pipe(fds), 0);
	for (int p = 0; p < PROCS; p++) {
		pid_t pid = fork();

		cr_assert(pid >= 0);
		if (pid > 0)
			continue;
		close(fds[0]);
		char err[512], grp[16];
		tbx_tokens_t *c = NULL;
		int ok = tbx_tokens_pg_open(tt_pg_url(), schema, NULL, NULL, &c,
					    err, sizeof(err)) == TBX_OK;

		for (int r = 0; ok && r < ROUNDS; r++) {
			char tok[1][TBX_UUID_LEN + 1];
			tbx_tokens_t *o = NULL;

			/* An opener closes the range the others take from. */
			ok = tbx_tokens_pg_open(tt_pg_url(), schema, NULL, NULL,
						&o, err, sizeof(err)) == TBX_OK;
			tbx_tokens_close(o);
			for (int i = 0; ok && i < MINTS; i++) {
				tbx__mint_item_t item = {tok[0], "orders"};
				tbx__mint_req_t req = {NULL, NULL, &item, 1};

				tbx__uuid(tok[0]);
				ok = tbx_tokens_mint(c, NULL, &req, 1, &n,
						     NULL) == TBX_OK &&
				     write(fds[1], &n, sizeof(n)) == sizeof(n);
			}
			snprintf(grp, sizeof(grp), "g%d-%d", p, r);
			ok = ok &&
			     tbx_tokens_subscribe(c, "orders", grp, &n) ==
				 TBX_OK &&
			     write(fds[1], &n, sizeof(n)) == sizeof(n);
		}
		tbx_tokens_close(c);
		_exit(ok ? 0 : 1);
	}
	close(fds[1]);
	cnt =
	    tt_collect_i64(fds[0], seen, sizeof(seen) / sizeof(seen[0]), PROCS);
	cr_assert_eq(cnt, sizeof(seen) / sizeof(seen[0]));
	t = open_store();
	for (size_t i = 0; i < cnt; i++)
		cr_assert_eq(issued(t, seen[i]), 1, "%lld not issued",
			     (long long)seen[i]);
	tbx_tokens_close(t);
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_seq_ranges a JOIN "
			     "@T.tbx_seq_ranges b ON b.lo > a.lo AND b.lo <= "
			     "coalesce(a.hi, (SELECT last_value FROM "
			     "@T.tbx_seq))"),
		     0, "overlapping ranges");
}

/* A joined store starts its range when it is opened on the service
 * store's connection: a joined A's number is in it. */
Test(pg_tokens, a_joined_store_starts_a_range_on_open)
{
	tbx__pg_t *conn;
	tbx_tokens_t *t;
	char err[512];
	int64_t seq = 0, lo, before = tbx__now_ms() * TBX__SEQ_PER_MS;

	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &conn, err, sizeof(err)),
		     TBX_OK, "%s", err);
	t = open_with(schema, conn, NULL);
	lo = sql_int("SELECT lo FROM @T.tbx_seq_ranges WHERE hi IS NULL");
	cr_assert_geq(lo, before);
	cr_assert_eq(tbx__pg_begin(conn), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq), TBX_OK);
	cr_assert_eq(tbx__pg_commit(conn), TBX_OK);
	cr_assert_eq(seq, lo);
	cr_assert_eq(issued(t, seq), 1);
	cr_assert_eq(issued(t, seq - 1), 0);
	tbx_tokens_close(t);
	tbx__pg_unref(conn);
}

/* A version 1 schema (before the ranges): every number it issued stays
 * its own, opened read-write with creating on or off. */
Test(pg_tokens, a_version_1_schema_keeps_every_number_it_issued)
{
	tbx_tokens_t *t = open_store();
	tbx__db_opts_t opts;
	char tok[1][TBX_UUID_LEN + 1];
	int64_t seq;
	int version = 0;

	tbx_tokens_close(t);
	sql("ALTER TABLE @T.tbx_edge DROP COLUMN tset, DROP COLUMN tbit, "
	    "DROP COLUMN tpart; DROP TABLE @T.tbx_seq_ranges; DROP TABLE "
	    "@T.tbx_tset; DROP TABLE @T.tbx_breg; UPDATE @T.tbx_schema_info "
	    "SET version = 1; "
	    "SELECT setval('@T.tbx_seq', 41, true)");
	tbx__db_opts_init(&opts);
	opts.create = 0;
	t = open_with(schema, NULL, &opts);
	cr_assert_eq(tbx_tokens_schema(t, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_TOKENS_VERSION);
	cr_assert_eq(sql_int("SELECT count(*) FROM @T.tbx_seq_ranges WHERE lo "
			     "= 1 AND hi = 41"),
		     1, "the numbers before, closed at the value");
	for (int64_t n = 1; n <= 41; n++)
		cr_assert_eq(issued(t, n), 1, "%lld", (long long)n);
	cr_assert_eq(issued(t, 42), 0);
	seq = mint(t, NULL, NULL, NULL, "orders", 1, tok, NULL);
	cr_assert_gt(seq, 41);
	cr_assert_eq(issued(t, seq), 1);
	tbx_tokens_close(t);
	/* The migration recorded the version: the next opening finds the
	 * tables current and runs no step again. */
	cr_assert_eq(sql_int("SELECT version FROM @T.tbx_schema_info"),
		     TBX_PG_TOKENS_VERSION);
	t = open_with(schema, NULL, &opts);
	cr_assert_eq(issued(t, seq), 1);
	tbx_tokens_close(t);
}
