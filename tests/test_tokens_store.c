/*
 * The SQLite token store T (tokens/sqlite.c): subscriptions and the one
 * sequence, minting per subscribed group, registrations, consume, confirm
 * and drop_attempt, and sharing the service store's connection.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "outbox/outbox.h"
#include "support.h"
#include "tokens/tokens.h"

static char dir[64];

static void fx_setup(void)
{
	tbx__strlcpy(dir, "/tmp/tbx-tokens-XXXXXX", sizeof(dir));
	cr_assert(mkdtemp(dir), "mkdtemp");
	tbx__log_setup(TBX_LOG_ERR - 1, "test"); /* quiet: errors expected */
}

static void fx_teardown(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[512];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

static const char *fx_path(const char *name)
{
	static char buf[4][512];
	static int slot;
	char *p = buf[slot++ & 3];

	snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
	return p;
}

static tbx_tokens_t *fx_open_shared(const char *path, sqlite3 *shared)
{
	tbx_tokens_t *t = NULL;
	char err[512];

	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, NULL, shared, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_not_null(t);
	return t;
}

static tbx_tokens_t *fx_open(void)
{
	return fx_open_shared(fx_path("tokens.db"), NULL);
}

static int64_t fx_subscribe(tbx_tokens_t *t, const char *topic, const char *grp)
{
	int64_t since = -1;

	cr_assert_eq(tbx_tokens_subscribe(t, topic, grp, &since), TBX_OK);
	return since;
}

static int fx_exists(tbx_tokens_t *t, const char *token, const char *grp)
{
	int exists = -1;

	cr_assert_eq(tbx_tokens_exists(t, token, grp, &exists), TBX_OK);
	return exists;
}

/* Mints one attempt (NULL: none) of @p n tokens to @p topic for
 * @p msg_id; writes the tokens into @p tokens.  @returns the mint number. */
static int64_t fx_mint(tbx_tokens_t *t, const char *send_grp,
		       const char *attempt, const char *msg_id,
		       const char *topic, size_t n,
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

static int64_t fx_count_rows(tbx_tokens_t *t, const char *grp)
{
	int64_t rows = -1;

	cr_assert_eq(tbx_tokens_count(t, grp, &rows, NULL), TBX_OK);
	return rows;
}

static int64_t fx_count_regs(tbx_tokens_t *t, const char *grp)
{
	int64_t regs = -1;

	cr_assert_eq(tbx_tokens_count(t, grp, NULL, &regs), TBX_OK);
	return regs;
}

static void fx_sql(const char *path, const char *sql)
{
	sqlite3 *db;
	char *msg = NULL;

	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s",
		     msg ? msg : "");
	sqlite3_close(db);
}

static int64_t fx_file_int(const char *path, const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *stmt;
	int64_t v = -1;

	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
		     SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &stmt, NULL), SQLITE_OK,
		     "%s", sqlite3_errmsg(db));
	if (sqlite3_step(stmt) == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	sqlite3_close(db);
	return v;
}

/* Copies the file @p from to @p to (every connection closed). */
static void fx_copy(const char *from, const char *to)
{
	char buf[8192];
	FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
	size_t n;

	cr_assert(in && out, "copy %s to %s", from, to);
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		cr_assert_eq(fwrite(buf, 1, n, out), n);
	fclose(in);
	cr_assert_eq(fclose(out), 0);
}

static int fx_issued(tbx_tokens_t *t, int64_t seq)
{
	int issued = -1;

	cr_assert_eq(tbx_tokens_seq_issued(t, seq, &issued), TBX_OK);
	return issued;
}

TestSuite(tokens, .init = fx_setup, .fini = fx_teardown);

Test(tokens, own_file_carries_the_whole_schema)
{
	tbx_tokens_close(fx_open());
	cr_assert_eq(fx_file_int(fx_path("tokens.db"),
				 "SELECT count(*) FROM sqlite_master WHERE "
				 "type = 'table' AND name IN ('tbx_outbox', "
				 "'tbx_tokens', 'tbx_registrations', "
				 "'tbx_subscriptions', 'tbx_seq')"),
		     5);
	cr_assert_eq(fx_file_int(fx_path("tokens.db"), "PRAGMA user_version"),
		     TBX_SCHEMA_VERSION);
	tbx_tokens_t *t = fx_open();
	cr_assert_str_eq(t->ops->name, "sqlite");
	tbx_tokens_close(t);
}

Test(tokens, subscribe_is_idempotent_and_keeps_its_number)
{
	tbx_tokens_t *t = fx_open();
	char tok[1][TBX_UUID_LEN + 1];
	int64_t since, again, got = -1;

	since = fx_subscribe(t, "orders", "g1");
	cr_assert_gt(since, 0);
	fx_mint(t, NULL, NULL, NULL, "orders", 1, tok, NULL);
	again = fx_subscribe(t, "orders", "g1");
	cr_assert_eq(again, since, "an existing subscription keeps since");
	cr_assert_eq(tbx_tokens_subscription(t, "orders", "g1", &got), TBX_OK);
	cr_assert_eq(got, since);
	cr_assert_eq(tbx_tokens_subscription(t, "orders", "g2", &got),
		     TBX_ENOENT);
	cr_assert_eq(tbx_tokens_subscription(t, "other", "g1", &got),
		     TBX_ENOENT);
	cr_assert_eq(fx_file_int(fx_path("tokens.db"),
				 "SELECT count(*) FROM tbx_subscriptions"),
		     1);
	tbx_tokens_close(t);
}

Test(tokens, mint_creates_rows_only_for_groups_subscribed_before_it)
{
	tbx_tokens_t *t = fx_open();
	char first[2][TBX_UUID_LEN + 1], second[2][TBX_UUID_LEN + 1];
	int64_t s1, s2, seq1, seq2;
	uint64_t rows = 0;

	s1 = fx_subscribe(t, "orders", "g1");
	fx_subscribe(t, "other-topic", "g3");
	seq1 = fx_mint(t, "up", "a1", "m1", "orders", 2, first, &rows);
	cr_assert_gt(seq1, s1);
	cr_assert_eq(rows, 2, "one row per token for g1 only");

	/* Subscribing after a mint: a later number, and no row of the
	 * earlier mint (that message is untokened ingress to g2). */
	s2 = fx_subscribe(t, "orders", "g2");
	cr_assert_gt(s2, seq1);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(fx_exists(t, first[i], "g1"), 1);
		cr_assert_eq(fx_exists(t, first[i], "g2"), 0);
		cr_assert_eq(fx_exists(t, first[i], "g3"), 0);
	}

	seq2 = fx_mint(t, "up", "a2", "m2", "orders", 2, second, &rows);
	cr_assert_gt(seq2, s2);
	cr_assert_eq(rows, 4, "both groups now");
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(fx_exists(t, second[i], "g1"), 1);
		cr_assert_eq(fx_exists(t, second[i], "g2"), 1);
		cr_assert_eq(fx_exists(t, second[i], "g3"), 0);
	}
	cr_assert_eq(fx_count_rows(t, NULL), 6);
	cr_assert_eq(fx_count_rows(t, "g2"), 2);
	tbx_tokens_close(t);
}

Test(tokens, mint_takes_one_number_per_call_shared_by_its_requests)
{
	tbx_tokens_t *t = fx_open();
	char tok[4][TBX_UUID_LEN + 1];
	tbx__mint_item_t items[4];
	tbx__mint_req_t reqs[3];
	char sql[256];
	int64_t seq = -1, before, after;
	uint64_t rows = 0;

	fx_subscribe(t, "a", "g1");
	fx_subscribe(t, "b", "g1");
	before = fx_mint(t, NULL, NULL, NULL, "a", 1, tok, NULL);
	for (int i = 0; i < 4; i++) {
		tbx__uuid(tok[i]);
		items[i].token = tok[i];
		items[i].topic = i % 2 ? "a" : "b";
	}
	reqs[0] = (tbx__mint_req_t){"att-1", "m1", &items[0], 2};
	reqs[1] = (tbx__mint_req_t){"att-2", "m2", &items[2], 1};
	reqs[2] = (tbx__mint_req_t){NULL, NULL, &items[3], 1};
	cr_assert_eq(tbx_tokens_mint(t, "g0", reqs, 3, &seq, &rows), TBX_OK);
	cr_assert_eq(seq, before + 1);
	cr_assert_eq(rows, 4);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM tbx_tokens WHERE mint_seq = %lld",
		 (long long)seq);
	cr_assert_eq(fx_file_int(fx_path("tokens.db"), sql), 4);
	after = fx_mint(t, NULL, NULL, NULL, "a", 1, tok, NULL);
	cr_assert_eq(after, seq + 1);
	tbx_tokens_close(t);
}

Test(tokens, mint_registers_only_requests_with_an_attempt)
{
	tbx_tokens_t *t = fx_open();
	char tok[3][TBX_UUID_LEN + 1];

	fx_subscribe(t, "orders", "g1");
	fx_mint(t, NULL, NULL, NULL, "orders", 2, tok, NULL);
	cr_assert_eq(fx_count_regs(t, NULL), 0, "publishing registers none");
	fx_mint(t, "g0", "att-1", "m1", "orders", 3, tok, NULL);
	cr_assert_eq(fx_count_regs(t, "g0"), 1, "one per attempt");
	cr_assert_eq(fx_count_regs(t, "g9"), 0);
	cr_assert_eq(fx_file_int(fx_path("tokens.db"),
				 "SELECT count(*) FROM tbx_registrations WHERE "
				 "attempt = 'att-1' AND send_grp = 'g0' AND "
				 "msg_id = 'm1'"),
		     3, "one registration row per token");
	tbx_tokens_close(t);
}

/* A registration is written even when no group listens: the sweeper must
 * be able to find every attempt. */
Test(tokens, mint_to_a_topic_nobody_subscribes_still_registers)
{
	tbx_tokens_t *t = fx_open();
	char tok[2][TBX_UUID_LEN + 1];
	uint64_t rows = 9;

	fx_mint(t, "g0", "att-1", "m1", "nobody", 2, tok, &rows);
	cr_assert_eq(rows, 0);
	cr_assert_eq(fx_count_regs(t, "g0"), 1);
	tbx_tokens_close(t);
}

Test(tokens, mint_refuses_a_registration_without_sender_or_message)
{
	tbx_tokens_t *t = fx_open();
	tbx__mint_item_t item = {"tok", "orders"};
	tbx__mint_req_t req = {"att-1", "m1", &item, 1};
	int64_t seq, before;

	before = fx_file_int(fx_path("tokens.db"), "SELECT value FROM tbx_seq");
	cr_assert_eq(tbx_tokens_mint(t, NULL, &req, 1, &seq, NULL), TBX_EINVAL);
	req.msg_id = NULL;
	cr_assert_eq(tbx_tokens_mint(t, "g0", &req, 1, &seq, NULL), TBX_EINVAL);
	cr_assert_eq(
	    fx_file_int(fx_path("tokens.db"), "SELECT value FROM tbx_seq"),
	    before, "no number taken");
	tbx_tokens_close(t);
}

Test(tokens, failed_mint_leaves_nothing_behind)
{
	tbx_tokens_t *t = fx_open();
	tbx__mint_item_t items[2] = {{"same", "orders"}, {"same", "orders"}};
	tbx__mint_req_t req = {"att-1", "m1", items, 2};
	int64_t seq = -1, since;

	since = fx_subscribe(t, "orders", "g1");
	/* The second item repeats the first one's token: a conflict after
	 * the first rows were written. */
	cr_assert_neq(tbx_tokens_mint(t, "g0", &req, 1, &seq, NULL), TBX_OK);
	cr_assert_eq(seq, -1);
	cr_assert_eq(fx_count_rows(t, NULL), 0);
	cr_assert_eq(fx_count_regs(t, NULL), 0);
	cr_assert_eq(
	    fx_file_int(fx_path("tokens.db"), "SELECT value FROM tbx_seq"),
	    since, "the number went back with the transaction");
	tbx_tokens_close(t);
}

Test(tokens, consume_deletes_only_the_groups_own_rows)
{
	tbx_tokens_t *t = fx_open();
	char tok[3][TBX_UUID_LEN + 1];
	const char *ids[4];
	uint64_t deleted = 0;

	fx_subscribe(t, "orders", "g1");
	fx_subscribe(t, "orders", "g2");
	fx_mint(t, NULL, NULL, NULL, "orders", 3, tok, NULL);
	ids[0] = tok[0];
	ids[1] = tok[1];
	ids[2] = tok[1]; /* twice: counted once */
	ids[3] = "unknown-token";
	cr_assert_eq(tbx_tokens_consume(t, "g1", ids, 4, &deleted), TBX_OK);
	cr_assert_eq(deleted, 2);
	cr_assert_eq(fx_exists(t, tok[0], "g1"), 0);
	cr_assert_eq(fx_exists(t, tok[1], "g1"), 0);
	cr_assert_eq(fx_exists(t, tok[2], "g1"), 1);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(fx_exists(t, tok[i], "g2"), 1,
			     "another group's rows stay");
	cr_assert_eq(tbx_tokens_consume(t, "g1", NULL, 0, &deleted), TBX_OK);
	cr_assert_eq(deleted, 0);
	tbx_tokens_close(t);
}

/* exists for many tokens at once: an answer per token, in order, with
 * repeats and unknown ones, for the group asked about only. */
Test(tokens, exists_many_answers_per_token_for_one_group)
{
	tbx_tokens_t *t = fx_open();
	char tok[2][TBX_UUID_LEN + 1], mine[1][TBX_UUID_LEN + 1];
	const char *ids[5];
	int exists[5] = {-1, -1, -1, -1, -1};

	fx_subscribe(t, "orders", "g1");
	fx_subscribe(t, "audit", "g2");
	fx_mint(t, NULL, NULL, NULL, "orders", 2, tok, NULL);
	fx_mint(t, NULL, NULL, NULL, "audit", 1, mine, NULL);
	ids[0] = tok[1];
	ids[1] = "unknown-token";
	ids[2] = tok[0];
	ids[3] = mine[0]; /* g2's token only */
	ids[4] = tok[1];  /* twice */
	cr_assert_eq(tbx_tokens_exists_many(t, "g1", ids, 5, exists), TBX_OK);
	cr_assert_eq(exists[0], 1);
	cr_assert_eq(exists[1], 0);
	cr_assert_eq(exists[2], 1);
	cr_assert_eq(exists[3], 0, "another group's token is not ours");
	cr_assert_eq(exists[4], 1);
	cr_assert_eq(tbx_tokens_exists_many(t, "g1", NULL, 0, NULL), TBX_OK);
	tbx_tokens_close(t);
}

Test(tokens, confirm_removes_registrations_and_keeps_tokens)
{
	tbx_tokens_t *t = fx_open();
	char tok[2][TBX_UUID_LEN + 1], other[1][TBX_UUID_LEN + 1];
	const char *attempts[] = {"att-1", "never-minted"};

	fx_subscribe(t, "orders", "g1");
	fx_mint(t, "g0", "att-1", "m1", "orders", 2, tok, NULL);
	fx_mint(t, "g0", "att-2", "m2", "orders", 1, other, NULL);
	cr_assert_eq(tbx_tokens_confirm(t, attempts, 2), TBX_OK);
	cr_assert_eq(fx_count_regs(t, "g0"), 1, "att-2 is still registered");
	cr_assert_eq(fx_exists(t, tok[0], "g1"), 1);
	cr_assert_eq(fx_exists(t, tok[1], "g1"), 1);
	cr_assert_eq(tbx_tokens_confirm(t, attempts, 1), TBX_OK, "idempotent");
	cr_assert_eq(tbx_tokens_confirm(t, NULL, 0), TBX_OK);
	tbx_tokens_close(t);
}

Test(tokens, drop_attempt_deletes_every_groups_tokens_and_the_registration)
{
	tbx_tokens_t *t = fx_open();
	char lost[2][TBX_UUID_LEN + 1], kept[1][TBX_UUID_LEN + 1];
	uint64_t deleted = 0;
	int dropped = -1;

	fx_subscribe(t, "orders", "g1");
	fx_subscribe(t, "orders", "g2");
	fx_mint(t, "g0", "att-lost", "m1", "orders", 2, lost, NULL);
	fx_mint(t, "g0", "att-won", "m1", "orders", 1, kept, NULL);
	cr_assert_eq(tbx_tokens_drop_attempt(t, "att-lost", &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 1);
	cr_assert_eq(deleted, 4, "2 tokens x 2 groups");
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(fx_exists(t, lost[i], "g1"), 0);
		cr_assert_eq(fx_exists(t, lost[i], "g2"), 0);
	}
	cr_assert_eq(fx_exists(t, kept[0], "g1"), 1, "other attempts stay");
	cr_assert_eq(fx_exists(t, kept[0], "g2"), 1);
	cr_assert_eq(fx_count_regs(t, "g0"), 1);
	tbx_tokens_close(t);
}

Test(tokens, drop_attempt_does_nothing_once_the_registration_is_gone)
{
	tbx_tokens_t *t = fx_open();
	char tok[2][TBX_UUID_LEN + 1];
	const char *attempt[] = {"att-1"};
	uint64_t deleted = 9;
	int dropped = -1;

	fx_subscribe(t, "orders", "g1");
	fx_mint(t, "g0", "att-1", "m1", "orders", 2, tok, NULL);
	/* The winner's confirm came first: its tokens are in flight. */
	cr_assert_eq(tbx_tokens_confirm(t, attempt, 1), TBX_OK);
	cr_assert_eq(tbx_tokens_drop_attempt(t, "att-1", &dropped, &deleted),
		     TBX_OK);
	cr_assert_eq(dropped, 0);
	cr_assert_eq(deleted, 0);
	cr_assert_eq(fx_exists(t, tok[0], "g1"), 1);
	cr_assert_eq(fx_exists(t, tok[1], "g1"), 1);
	cr_assert_eq(tbx_tokens_drop_attempt(t, "never-minted", &dropped, NULL),
		     TBX_OK);
	cr_assert_eq(dropped, 0);
	tbx_tokens_close(t);
}

Test(tokens, registrations_are_listed_oldest_first_one_per_attempt)
{
	tbx_tokens_t *t = fx_open();
	char tok[3][TBX_UUID_LEN + 1];
	tbx__reg_t *regs = (tbx__reg_t *)1;
	size_t cnt = 9;

	cr_assert_eq(tbx_tokens_registrations(t, "g0", 10, &regs, &cnt),
		     TBX_OK);
	cr_assert_eq(cnt, 0);
	cr_assert_null(regs);
	fx_mint(t, "g0", "att-c", "m3", "orders", 3, tok, NULL);
	fx_mint(t, "g0", "att-a", "m1", "orders", 1, tok, NULL);
	fx_mint(t, "g0", "att-b", "m2", "orders", 2, tok, NULL);
	fx_mint(t, "gX", "att-x", "m9", "orders", 1, tok, NULL);
	/* Ages set explicitly: minting within one millisecond is common. */
	fx_sql(fx_path("tokens.db"),
	       "UPDATE tbx_registrations SET created_ms = CASE attempt "
	       "WHEN 'att-a' THEN 100 WHEN 'att-b' THEN 200 WHEN 'att-c' "
	       "THEN 300 ELSE 50 END");

	cr_assert_eq(tbx_tokens_registrations(t, "g0", 10, &regs, &cnt),
		     TBX_OK);
	cr_assert_eq(cnt, 3);
	cr_assert_str_eq(regs[0].attempt, "att-a");
	cr_assert_str_eq(regs[0].msg_id, "m1");
	cr_assert_eq(regs[0].created_ms, 100);
	cr_assert_str_eq(regs[1].attempt, "att-b");
	cr_assert_str_eq(regs[2].attempt, "att-c");
	cr_assert_str_eq(regs[2].msg_id, "m3");
	free(regs);

	cr_assert_eq(tbx_tokens_registrations(t, "g0", 2, &regs, &cnt), TBX_OK);
	cr_assert_eq(cnt, 2, "bounded by the limit");
	cr_assert_str_eq(regs[1].attempt, "att-b");
	free(regs);
	cr_assert_eq(tbx_tokens_registrations(t, "g0", 0, &regs, &cnt), TBX_OK);
	cr_assert_eq(cnt, 0);
	tbx_tokens_close(t);
}

Test(tokens, registration_listing_leaves_no_read_transaction_open)
{
	tbx_tokens_t *t = fx_open(), *t2;
	char tok[1][TBX_UUID_LEN + 1];
	tbx__reg_t *regs;
	size_t cnt;

	for (int i = 0; i < 3; i++) {
		char attempt[16];
		snprintf(attempt, sizeof(attempt), "att-%d", i);
		fx_mint(t, "g0", attempt, "m", "orders", 1, tok, NULL);
	}
	cr_assert_eq(tbx_tokens_registrations(t, "g0", 1, &regs, &cnt), TBX_OK);
	free(regs);
	/* A connection stuck on an old snapshot would miss this. */
	t2 = fx_open();
	fx_mint(t2, "g0", "att-new", "m", "orders", 1, tok, NULL);
	tbx_tokens_close(t2);
	cr_assert_eq(fx_count_regs(t, "g0"), 4);
	tbx_tokens_close(t);
}

Test(tokens, sequence_is_shared_by_every_connection_to_the_file)
{
	tbx_tokens_t *a = fx_open(), *b = fx_open();
	char tok[1][TBX_UUID_LEN + 1];
	int64_t last = 0;

	for (int i = 0; i < 6; i++) {
		int64_t n = i % 3 == 2 ? fx_subscribe(i % 2 ? a : b, "t",
						      i % 2 ? "x" : "y")
				       : fx_mint(i % 2 ? a : b, NULL, NULL,
						 NULL, "t", 1, tok, NULL);
		cr_assert_gt(n, last, "strictly increasing");
		last = n;
	}
	tbx_tokens_close(a);
	tbx_tokens_close(b);
}

Test(tokens, store_on_the_service_connection_works_and_leaves_it_open)
{
	const char *path = fx_path("all.db");
	char tok[2][TBX_UUID_LEN + 1];
	tbx_outbox_t *store = NULL;
	tbx_tokens_t *t;
	tbx__row_t row;
	char err[256];
	uint64_t rows = 0;
	int found = 0;

	cr_assert_eq(tbx_outbox_open(path, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	t = fx_open_shared(path, tbx_outbox_db(store));
	fx_subscribe(t, "orders", "g1");
	fx_mint(t, "g0", "att-1", "m1", "orders", 2, tok, &rows);
	cr_assert_eq(rows, 2);
	cr_assert_eq(fx_exists(t, tok[0], "g1"), 1);
	cr_assert_eq(fx_count_regs(t, "g0"), 1);
	/* A read inside the service store's transaction is fine (A's token
	 * check); a write would need a transaction of its own. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(fx_exists(t, tok[1], "g1"), 1);
	cr_assert_eq(tbx_tokens_confirm(t, (const char *const[]){"att-1"}, 1),
		     TBX_ESTATE);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK,
		     "the caller's transaction is intact");
	cr_assert_eq(fx_count_regs(t, "g0"), 1);
	tbx_tokens_close(t);

	/* Still usable after the token store is gone. */
	tbx__row_init(&row);
	tbx__strlcpy(row.msg_id, "m1", sizeof(row.msg_id));
	tbx__strlcpy(row.in_topic, "in", sizeof(row.in_topic));
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, "g0", &row), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_find(store, "g0", "m1", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 1);
	tbx_outbox_close(store);
	cr_assert_eq(fx_file_int(path, "SELECT count(*) FROM tbx_tokens"), 2,
		     "tokens live in the service file");
}

/* One file: the joined operations write inside the service store's
 * transaction, commit and roll back with it, and write no registration. */
Test(tokens, joined_operations_commit_and_roll_back_with_the_caller)
{
	const char *path = fx_path("all.db");
	char tok[3][TBX_UUID_LEN + 1];
	tbx__mint_item_t items[3];
	tbx_outbox_t *store = NULL;
	tbx_tokens_t *t, *own;
	char err[256];
	int64_t seq = 0, seq2 = 0;
	uint64_t rows = 0, deleted = 0;
	const char *ids[1];

	cr_assert_eq(tbx_outbox_open(path, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	t = fx_open_shared(path, tbx_outbox_db(store));
	cr_assert(tbx_tokens_joinable(t));
	fx_subscribe(t, "out", "g1");
	fx_subscribe(t, "out", "g2");
	for (int i = 0; i < 3; i++) {
		tbx__uuid(tok[i]);
		items[i].token = tok[i];
		items[i].topic = "out";
	}

	/* Outside a transaction they refuse: nothing would commit them. */
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq), TBX_ESTATE);
	cr_assert_eq(tbx_tokens_mint_joined(t, items, 1, 5, &rows), TBX_ESTATE);
	ids[0] = tok[0];
	cr_assert_eq(tbx_tokens_consume_joined(t, "g1", ids, 1, &deleted),
		     TBX_ESTATE);
	cr_assert_eq(fx_count_rows(t, NULL), 0);

	/* Rolled back with the caller: no token, and the number is given
	 * back (nothing minted with it exists). */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq), TBX_OK);
	cr_assert_gt(seq, 0);
	cr_assert_eq(tbx_tokens_mint_joined(t, items, 2, seq, &rows), TBX_OK);
	cr_assert_eq(rows, 4, "two tokens, two subscribed groups");
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	cr_assert_eq(fx_count_rows(t, NULL), 0);

	/* Committed with the caller: tokens for every group subscribed
	 * before the number, and no registration. */
	rows = 0;
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq2), TBX_OK);
	cr_assert_eq(tbx_tokens_mint_joined(t, items, 3, seq2, &rows), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(rows, 6);
	cr_assert_eq(seq2, seq, "a rolled-back number is taken again");
	cr_assert_eq(fx_count_rows(t, "g1"), 3);
	cr_assert_eq(fx_count_regs(t, NULL), 0);
	cr_assert_eq(fx_file_int(path, "SELECT min(mint_seq) = max(mint_seq) "
				       "FROM tbx_tokens"),
		     1);

	/* Consume: only the group's own rows, only when committed. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_consume_joined(t, "g1", ids, 1, &deleted),
		     TBX_OK);
	cr_assert_eq(deleted, 1);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	cr_assert_eq(fx_exists(t, tok[0], "g1"), 1);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_consume_joined(t, "g1", ids, 1, &deleted),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(fx_exists(t, tok[0], "g1"), 0);
	cr_assert_eq(fx_exists(t, tok[0], "g2"), 1);

	/* Bad arguments. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_mint_joined(t, items, 1, 0, &rows), TBX_EINVAL);
	cr_assert_eq(tbx_tokens_seq_joined(t, NULL), TBX_EINVAL);
	cr_assert_eq(tbx_tokens_consume_joined(t, NULL, ids, 1, NULL),
		     TBX_EINVAL);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);

	/* A store on a connection of its own cannot join anything. */
	own = fx_open_shared(path, NULL);
	cr_assert_not(tbx_tokens_joinable(own));
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(own, &seq), TBX_ESTATE);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	tbx_tokens_close(own);
	tbx_tokens_close(t);
	tbx_outbox_close(store);
}

Test(tokens, separate_files_open_independently_with_one_schema)
{
	tbx_outbox_t *store = NULL;
	tbx_tokens_t *t;
	char err[256];

	cr_assert_eq(
	    tbx_outbox_open(fx_path("s.db"), NULL, &store, err, sizeof(err)),
	    TBX_OK, "%s", err);
	t = fx_open();
	fx_subscribe(t, "orders", "g1");
	tbx_tokens_close(t);
	tbx_outbox_close(store);
	cr_assert_eq(fx_file_int(fx_path("s.db"),
				 "SELECT count(*) FROM tbx_subscriptions"),
		     0, "unused tables stay empty");
	cr_assert_eq(fx_file_int(fx_path("tokens.db"),
				 "SELECT count(*) FROM tbx_subscriptions"),
		     1);
}

Test(tokens, open_reports_why_a_file_is_refused)
{
	tbx__db_opts_t opts;
	tbx_tokens_t *t = (tbx_tokens_t *)1;
	char err[256];

	tbx__db_opts_init(&opts);
	opts.create = 0;
	cr_assert_eq(tbx_tokens_sqlite_open(fx_path("none.db"), &opts, NULL, &t,
					    err, sizeof(err)),
		     TBX_ENOENT);
	cr_assert_null(t);
	cr_assert(strstr(err, "none.db"), "%s", err);
	tbx_tokens_close(NULL);
}

/* Workers on one host open (and create) the same file at once and take
 * numbers concurrently: every number is taken once. */
Test(tokens, concurrent_processes_create_the_file_and_take_distinct_numbers)
{
	enum { PROCS = 6, MINTS = 20 };
	int64_t seen[PROCS * MINTS + PROCS], n;
	size_t cnt = 0;
	int fds[2];

	cr_assert_eq(pipe(fds), 0);
	for (int p = 0; p < PROCS; p++) {
		pid_t pid = fork();

		cr_assert(pid >= 0);
		if (pid > 0)
			continue;
		close(fds[0]);
		tbx_tokens_t *t = NULL;
		char tok[1][TBX_UUID_LEN + 1], err[256], attempt[32];
		int ok =
		    tbx_tokens_sqlite_open(fx_path("tokens.db"), NULL, NULL, &t,
					   err, sizeof(err)) == TBX_OK;
		int64_t since;

		ok = ok &&
		     tbx_tokens_subscribe(t, "orders", "g1", &since) == TBX_OK;
		/* The subscription's number counts once, whoever took it. */
		if (ok && write(fds[1], &since, sizeof(since)) != sizeof(since))
			ok = 0;
		for (int i = 0; ok && i < MINTS; i++) {
			tbx__mint_item_t item = {tok[0], "orders"};
			tbx__mint_req_t req = {attempt, "m", &item, 1};

			tbx__uuid(tok[0]);
			snprintf(attempt, sizeof(attempt), "a-%d-%d", p, i);
			ok = tbx_tokens_mint(t, "g0", &req, 1, &n, NULL) ==
				 TBX_OK &&
			     write(fds[1], &n, sizeof(n)) == sizeof(n);
		}
		tbx_tokens_close(t);
		_exit(ok ? 0 : 1);
	}
	close(fds[1]);
	cnt =
	    tt_collect_i64(fds[0], seen, sizeof(seen) / sizeof(seen[0]), PROCS);
	cr_assert_eq(cnt, (size_t)PROCS * MINTS + PROCS);
	/* Mint numbers are unique; the since values all name the one
	 * subscription's number. */
	for (size_t i = 0; i < cnt; i++)
		for (size_t j = 0; j < i; j++)
			if (seen[i] == seen[j])
				cr_assert_eq(
				    fx_file_int(fx_path("tokens.db"),
						"SELECT since_seq FROM "
						"tbx_subscriptions"),
				    seen[i], "number %lld taken twice",
				    (long long)seen[i]);
	/* Each opening started a range: the last number is the highest
	 * taken, and every one is the store's. */
	n = 0;
	for (size_t i = 0; i < cnt; i++)
		if (seen[i] > n)
			n = seen[i];
	cr_assert_eq(
	    fx_file_int(fx_path("tokens.db"), "SELECT value FROM tbx_seq"), n);
	{
		tbx_tokens_t *t = fx_open();

		for (size_t i = 0; i < cnt; i++)
			cr_assert_eq(fx_issued(t, seen[i]), 1);
		tbx_tokens_close(t);
	}
	cr_assert_eq(fx_file_int(fx_path("tokens.db"),
				 "SELECT count(DISTINCT attempt) FROM "
				 "tbx_registrations"),
		     PROCS * MINTS);
}

/* inspect asks the store what its tables hold: on SQLite, what the
 * schema version brought (the ingress edge with 4, the store's identity
 * with 6). */
Test(tokens, the_schema_version_answers_what_the_tables_hold)
{
	static const struct {
		int version, edge, store_id;
	} cases[] = {{3, 0, 0}, {5, 1, 0}, {TBX_SCHEMA_VERSION, 1, 1}};
	tbx_tokens_t *t = fx_open();
	char sql[64];
	int yes;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d",
			 cases[i].version);
		fx_sql(fx_path("tokens.db"), sql);
		cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_EDGE, &yes),
			     TBX_OK);
		cr_assert_eq(yes, cases[i].edge, "version %d",
			     cases[i].version);
		cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_STORE_ID, &yes),
			     TBX_OK);
		cr_assert_eq(yes, cases[i].store_id, "version %d",
			     cases[i].version);
	}
	cr_assert_eq(tbx_tokens_has(t, 99, &yes), TBX_EINVAL);
	tbx_tokens_close(t);
}

/* A store restored from a backup keeps its id and loses the numbers it
 * issued after the backup.  Whatever it issues next, and whoever opens it
 * first, every lost number stays one it never issued: a record carrying
 * one is judged never issued, not dropped as a duplicate. */
Test(tokens, a_restored_store_never_issues_a_lost_number_again)
{
	const char *path = fx_path("tokens.db"), *backup = fx_path("backup.db");
	char tok[1][TBX_UUID_LEN + 1], wal[512], shm[512];
	int64_t since, lost[4], after[3];
	tbx_tokens_t *t = fx_open();

	since = fx_subscribe(t, "orders", "g1");
	tbx_tokens_close(t);
	fx_copy(path, backup);
	/* The lost history: mints and a subscription after the backup,
	 * over two openings. */
	t = fx_open();
	lost[0] = fx_mint(t, NULL, NULL, NULL, "orders", 1, tok, NULL);
	lost[1] = fx_mint(t, NULL, NULL, NULL, "orders", 1, tok, NULL);
	tbx_tokens_close(t);
	t = fx_open();
	lost[2] = fx_subscribe(t, "orders", "g2");
	lost[3] = fx_mint(t, NULL, NULL, NULL, "orders", 1, tok, NULL);
	tbx_tokens_close(t);

	snprintf(wal, sizeof(wal), "%s-wal", path);
	snprintf(shm, sizeof(shm), "%s-shm", path);
	unlink(wal);
	unlink(shm);
	fx_copy(backup, path);
	t = fx_open();
	cr_assert_eq(fx_count_rows(t, NULL), 0, "restored: no token");
	after[0] = fx_mint(t, NULL, NULL, NULL, "orders", 1, tok, NULL);
	after[1] = fx_subscribe(t, "orders", "g3");
	tbx_tokens_close(t);
	t = fx_open();
	after[2] = fx_mint(t, NULL, NULL, NULL, "orders", 1, tok, NULL);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 3; j++)
			cr_assert_neq(after[j], lost[i],
				      "lost number %lld issued again",
				      (long long)lost[i]);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(fx_issued(t, lost[i]), 0,
			     "lost number %lld judged issued",
			     (long long)lost[i]);
	cr_assert_eq(fx_issued(t, since), 1);
	for (int j = 0; j < 3; j++)
		cr_assert_eq(fx_issued(t, after[j]), 1);
	cr_assert_eq(fx_issued(t, after[2] + 1), 0, "above the sequence");
	cr_assert_eq(fx_issued(t, 0), 0);
	tbx_tokens_close(t);
}

/* Openers close each other's ranges while they take numbers: every number
 * any of them took is judged issued, and the ranges never overlap. */
Test(tokens, every_number_taken_by_concurrent_openers_is_issued)
{
	enum { PROCS = 4, OPENS = 6, MINTS = 4 };
	int64_t seen[PROCS * OPENS * MINTS], n;
	size_t cnt = 0;
	tbx_tokens_t *t;
	int fds[2];

	tbx_tokens_close(fx_open());
	cr_assert_eq(pipe(fds), 0);
	for (int p = 0; p < PROCS; p++) {
		pid_t pid = fork();

		cr_assert(pid >= 0);
		if (pid > 0)
			continue;
		close(fds[0]);
		int ok = 1;

		for (int o = 0; ok && o < OPENS; o++) {
			char tok[1][TBX_UUID_LEN + 1], err[256];
			tbx_tokens_t *c = NULL;

			ok = tbx_tokens_sqlite_open(fx_path("tokens.db"), NULL,
						    NULL, &c, err,
						    sizeof(err)) == TBX_OK;
			for (int i = 0; ok && i < MINTS; i++) {
				tbx__mint_item_t item = {tok[0], "orders"};
				tbx__mint_req_t req = {NULL, NULL, &item, 1};

				tbx__uuid(tok[0]);
				ok = tbx_tokens_mint(c, NULL, &req, 1, &n,
						     NULL) == TBX_OK &&
				     write(fds[1], &n, sizeof(n)) == sizeof(n);
			}
			tbx_tokens_close(c);
		}
		_exit(ok ? 0 : 1);
	}
	close(fds[1]);
	cnt =
	    tt_collect_i64(fds[0], seen, sizeof(seen) / sizeof(seen[0]), PROCS);
	cr_assert_eq(cnt, (size_t)PROCS * OPENS * MINTS);
	t = fx_open();
	for (size_t i = 0; i < cnt; i++)
		cr_assert_eq(fx_issued(t, seen[i]), 1, "%lld not issued",
			     (long long)seen[i]);
	tbx_tokens_close(t);
	cr_assert_eq(fx_file_int(fx_path("tokens.db"),
				 "SELECT count(*) FROM tbx_seq_ranges a JOIN "
				 "tbx_seq_ranges b ON b.lo > a.lo AND b.lo <= "
				 "coalesce(a.hi, (SELECT value FROM tbx_seq))"),
		     0, "overlapping ranges");
	cr_assert_eq(fx_file_int(fx_path("tokens.db"),
				 "SELECT count(*) FROM tbx_seq_ranges WHERE hi "
				 "IS NULL"),
		     1, "one open range");
}

/* One file for both stores: the token store on the service store's
 * connection starts its range when it is opened, so that a joined A's
 * number is in it. */
Test(tokens, a_store_on_the_service_connection_starts_a_range_on_open)
{
	const char *path = fx_path("all.db");
	tbx_outbox_t *store = NULL;
	tbx_tokens_t *t;
	char err[256];
	int64_t lo, seq = 0, before = tbx__now_ms() * TBX__SEQ_PER_MS;

	cr_assert_eq(tbx_outbox_open(path, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	t = fx_open_shared(path, tbx_outbox_db(store));
	lo = fx_file_int(path, "SELECT lo FROM tbx_seq_ranges WHERE hi IS "
			       "NULL");
	cr_assert_geq(lo, before);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_tokens_seq_joined(t, &seq), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(seq, lo);
	cr_assert_eq(fx_issued(t, seq), 1);
	cr_assert_eq(fx_issued(t, seq - 1), 0);
	tbx_tokens_close(t);
	tbx_outbox_close(store);
}
