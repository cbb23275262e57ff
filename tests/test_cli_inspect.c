/*
 * `tokenbox inspect` run as a child process:
 *  - golden files: tests/data/inspect/<case>/{args,stdout,exit[,stderr]}
 *    over stores these tests build with fixed ids and times
 *    (TBX_INSPECT_NOW_MS fixes "now"); TBX_UPDATE_GOLDEN=1 rewrites them;
 *  - read-only commands leave the files' bytes and mtimes alone, also on
 *    stores a killed worker left with an unchecked-pointed WAL;
 *  - every error is one line and exit 2: missing file, not SQLite, another
 *    program's SQLite file, a newer schema, a corrupt file, a lock held
 *    past the busy timeout;
 *  - commands run while a worker writes;
 *  - after a worker was killed at B.minted, C.delivered and D.consumed,
 *    `redispatch` and `cleanup` alone restore the invariants (no row,
 *    registration or stray token left) with every effect once downstream;
 *  - the stores `tokenbox demo --keep` leaves behind.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "base/str.h"
#include "cli_child.h"
#include "consumer/worker.h"
#include "outbox/outbox.h"
#include "support.h"
#include "tokens/tokens.h"
#include "trace/context.h"

/* "now" of the golden cases: 2023-11-14T22:13:20Z. */
#define NOW  1700000000000LL
#define SEC  1000LL
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)

/* Outbox rows of the fixture (service store). */
#define ROW_A	   "11111111-1111-4111-8111-111111111111" /* processed */
#define ROW_B	   "33333333-3333-4333-8333-333333333333" /* tokened */
#define ROW_C	   "66666666-6666-4666-8666-666666666666" /* dead letter */
#define ROW_D	   "77777777-7777-4777-8777-777777777777" /* sends nothing */
#define ROW_E	   "u:orders:2:99"			  /* untokened */
#define LONG_GROUP "inventory-reconciliation-service-eu-west-1-primary"
/* Attempts and tokens (token store). */
#define ATT_B	   "44444444-4444-4444-8444-444444444444" /* B's, recorded */
#define ATT_LOST   "88888888-8888-4888-8888-888888888888" /* B's loser */
#define ATT_GONE   "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb" /* no row */
#define ATT_FLIGHT "eeeeeeee-eeee-4eee-8eee-eeeeeeeeeeee" /* A's, in flight */
#define ATT_BILL   "12121212-1212-4121-8121-121212121212" /* other store */
#define TOK_IN_A   "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
#define TOK_IN_B   "a1a1a1a1-a1a1-4a1a-8a1a-a1a1a1a1a1a1"
#define TOK_B1	   "55555555-5555-4555-8555-555555555551"
#define TOK_B2	   "55555555-5555-4555-8555-555555555552"
/* Token sets of an attempt of row A (schema 11). */
#define ATT_SETS "c3c3c3c3-c3c3-4c3c-8c3c-c3c3c3c3c3c3"
#define SET_PAY	 "c1c1c1c1-c1c1-4c1c-8c1c-c1c1c1c1c1c1"
#define SET_AUD	 "c2c2c2c2-c2c2-4c2c-8c2c-c2c2c2c2c2c2"

/*
 * Fixtures.
 */

static void fx_exec(const char *db, const char *sql)
{
	sqlite3 *conn;
	char *err = NULL;

	cr_assert_eq(sqlite3_open(db, &conn), SQLITE_OK, "open %s", db);
	sqlite3_busy_timeout(conn, 10000);
	cr_assert_eq(sqlite3_exec(conn, sql, NULL, NULL, &err), SQLITE_OK,
		     "%s: %s", db, err ? err : "?");
	sqlite3_close(conn);
}

/* Adds an outgoing message with a fixed id (and token, when given). */
static void fx_msg(tbx__row_t *row, const char *id, const char *token,
		   const char *topic, const char *type, const char *key,
		   const void *payload, size_t payload_len,
		   const tbx_header_t *hdrs, size_t hdr_cnt)
{
	void *blob = NULL;
	size_t blob_len = 0;
	tbx__outmsg_t *m;

	cr_assert_eq(tbx__hdrs_encode(hdrs, hdr_cnt, &blob, &blob_len), TBX_OK);
	cr_assert_eq(tbx__row_add(row, topic, type, key, key ? strlen(key) : 0,
				  payload, payload_len, blob, blob_len),
		     TBX_OK);
	free(blob);
	m = &row->msgs[row->msg_cnt - 1];
	tbx__strlcpy(m->id, id, sizeof(m->id));
	tbx__strlcpy(m->token, token ? token : "", sizeof(m->token));
}

static void fx_row(tbx__row_t *row, const char *msg_id, const char *topic,
		   int32_t partition, int64_t offset, const char *in_token,
		   int64_t created_ms)
{
	tbx__row_init(row);
	tbx__strlcpy(row->msg_id, msg_id, sizeof(row->msg_id));
	tbx__strlcpy(row->in_topic, topic, sizeof(row->in_topic));
	row->in_partition = partition;
	row->in_offset = offset;
	tbx__strlcpy(row->in_token, in_token ? in_token : "",
		     sizeof(row->in_token));
	row->created_ms = created_ms;
}

/* The fixture's dead letters: 1 day, 45 and 10 minutes old. */
static const char FX_DEAD_LETTERS[] =
    "INSERT INTO tbx_dead_letters (id, grp, msg_id, in_topic, "
    "in_partition, in_offset, dlq_topic, error, attempts, "
    "created_ms) VALUES "
    "(1, 'orders-svc', '60606060-6060-4606-8606-606060606060', "
    "'orders', 0, 3, 'orders.dlq', 'tbx-id is not a UUID', 0, "
    "1699913600000),"
    "(2, 'orders-svc', '" ROW_C "', 'orders', 1, 7, 'orders.dlq', "
    "'rejected by the handler', 1, 1699997300000),"
    "(3, 'audit', 'u:orders:0:99', 'orders', 0, 99, 'orders.dlq', "
    "'record without a token for this group "
    "(ingress.untokened=reject)', 0, 1699999400000)";

/* The service store part: outbox rows, ingress offsets, dead letters. */
static void fx_store(const char *path)
{
	static const unsigned char bin[] = {
	    0x00, 0x01, 0x02, 0xff, 0xfe, 'A',	'B',  0x80, 0x7f, 0x10,
	    'z',  0x00, 0x00, 0x00, 0x2a, 0x0a, 0xc3, 0x28, 0x31, 0x32};
	static const char long_text[] =
	    "reconcile warehouse eu-west-1 stock for sku 123456 at "
	    "2023-11-14\nsecond line";
	const tbx_header_t trace[] = {{"trace-id", "t-42", 4}};
	const tbx_header_t b2h[] = {{"bin", "\x01\x02", 2},
				    {"nullhdr", NULL, 0}};
	const tbx_header_t dlqh[] = {
	    {"tbx-dlq-error", "rejected by the handler", 23},
	    {"tbx-dlq-topic", "orders", 6},
	    {"tbx-dlq-partition", "1", 1},
	    {"tbx-dlq-offset", "7", 1},
	    {"tbx-dlq-attempts", "1", 1},
	    {"tbx-dlq-id", ROW_C, 36}};
	tbx_outbox_t *store;
	tbx__row_t row;
	char err[512];

	cr_assert_eq(tbx_outbox_open(path, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);

	fx_row(&row, ROW_A, "orders", 0, 41, TOK_IN_A, NOW - 30 * SEC);
	fx_msg(&row, "2222222a-2222-4222-8222-22222222222a", NULL, "payments",
	       "PaymentRequested", "cust-7", "{\"order\":41,\"amount\":1250}",
	       26, trace, 1);
	cr_assert_eq(tbx_outbox_row_insert(store, "orders-svc", &row), TBX_OK);
	tbx__row_clear(&row);

	fx_row(&row, ROW_B, "orders", 1, 42, TOK_IN_B, NOW - 2 * HOUR);
	fx_msg(&row, "2222222b-2222-4222-8222-22222222222b", TOK_B1, "payments",
	       "PaymentRequested", "cust-3", "{\"order\":42,\"amount\":990}",
	       25, trace, 1);
	fx_msg(&row, "2222222c-2222-4222-8222-22222222222c", TOK_B2, "payments",
	       "PaymentAudit", NULL, bin, sizeof(bin), b2h, 2);
	tbx__strlcpy(row.attempt, ATT_B, sizeof(row.attempt));
	row.mint_seq = 12;
	cr_assert_eq(tbx_outbox_row_insert(store, "orders-svc", &row), TBX_OK);
	tbx__row_clear(&row);

	fx_row(&row, ROW_C, "orders", 1, 7,
	       "c7c7c7c7-c7c7-4c7c-8c7c-c7c7c7c7c7c7", NOW - 45 * MIN);
	row.kind = TBX_ROW_DEAD_LETTER;
	row.error = strdup("rejected by the handler");
	fx_msg(&row, "2222222d-2222-4222-8222-22222222222d", NULL, "orders.dlq",
	       "OrderPlaced", "cust-9", "{\"order\":7}", 11, dlqh, 6);
	cr_assert_eq(tbx_outbox_row_insert(store, "orders-svc", &row), TBX_OK);
	tbx__row_clear(&row);

	fx_row(&row, ROW_D, "orders", 0, 43,
	       "d7d7d7d7-d7d7-4d7d-8d7d-d7d7d7d7d7d7", NOW - 5 * SEC);
	cr_assert_eq(tbx_outbox_row_insert(store, "orders-svc", &row), TBX_OK);
	tbx__row_clear(&row);

	fx_row(&row, ROW_E, "orders", 2, 99, NULL, NOW - 200 * SEC);
	fx_msg(&row, "2222222e-2222-4222-8222-22222222222e", NULL, "stock",
	       "Reconcile", "sku-123456", long_text, strlen(long_text), NULL,
	       0);
	cr_assert_eq(tbx_outbox_row_insert(store, LONG_GROUP, &row), TBX_OK);
	tbx__row_clear(&row);

	cr_assert_eq(tbx_outbox_ingress_set(store, "audit", "orders", 0, 100),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(store, "audit", "orders", 1, 57),
		     TBX_OK);
	cr_assert_eq(
	    tbx_outbox_ingress_set(store, LONG_GROUP, "orders", 2, 100),
	    TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx_outbox_close(store);

	fx_exec(path, FX_DEAD_LETTERS);
}

/* The token store part: subscriptions, tokens, registrations. */
static void fx_tokens(const char *path)
{
	tbx_tokens_t *t;
	char err[512];

	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, NULL, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	tbx_tokens_close(t);
	fx_exec(
	    path,
	    "UPDATE tbx_seq SET value = 20 WHERE id = 1;"
	    "INSERT INTO tbx_subscriptions (topic, grp, since_seq, "
	    "created_ms) VALUES "
	    "('orders', 'orders-svc', 1, 1699395200000),"
	    "('payments', 'payments-svc', 2, 1699395200000),"
	    "('orders.dlq', 'dlq-archiver', 3, 1699395200000),"
	    "('orders', 'audit', 4, 1699740000000),"
	    "('invoices', 'ledger', 5, 1699740000000);"
	    /* incoming tokens of rows A and B, and a published one */
	    "INSERT INTO tbx_tokens (token, grp, mint_seq, created_ms) VALUES "
	    "('" TOK_IN_A "', 'orders-svc', 14, 1699999969000),"
	    "('" TOK_IN_B "', 'orders-svc', 11, 1699992799000),"
	    "('c0c0c0c0-c0c0-4c0c-8c0c-c0c0c0c0c0c0', 'orders-svc', 6, "
	    "1699740800000),"
	    /* B's winning attempt, recorded, not yet confirmed */
	    "('" TOK_B1 "', 'payments-svc', 12, 1699992800000),"
	    "('" TOK_B2 "', 'payments-svc', 12, 1699992800000),"
	    /* B's losing attempt */
	    "('99999999-9999-4999-8999-999999999991', 'payments-svc', 13, "
	    "1699992810000),"
	    "('99999999-9999-4999-8999-999999999992', 'payments-svc', 13, "
	    "1699992810000),"
	    /* an attempt whose row is gone */
	    "('dddddddd-dddd-4ddd-8ddd-dddddddddddd', 'payments-svc', 9, "
	    "1699989200000),"
	    /* A's attempt in flight */
	    "('ffffffff-ffff-4fff-8fff-ffffffffffff', 'payments-svc', 15, "
	    "1699999990000),"
	    /* billing's, whose store this is not */
	    "('56565656-5656-4565-8565-565656565656', 'ledger', 10, "
	    "1699996400000);"
	    "INSERT INTO tbx_registrations (attempt, token, send_grp, msg_id, "
	    "created_ms) VALUES "
	    "('" ATT_B "', '" TOK_B1 "', 'orders-svc', '" ROW_B
	    "', 1699992800000),"
	    "('" ATT_B "', '" TOK_B2 "', 'orders-svc', '" ROW_B
	    "', 1699992800000),"
	    "('" ATT_LOST "', '99999999-9999-4999-8999-999999999991', "
	    "'orders-svc', '" ROW_B "', 1699992810000),"
	    "('" ATT_LOST "', '99999999-9999-4999-8999-999999999992', "
	    "'orders-svc', '" ROW_B "', 1699992810000),"
	    "('" ATT_GONE "', 'dddddddd-dddd-4ddd-8ddd-dddddddddddd', "
	    "'orders-svc', 'cccccccc-cccc-4ccc-8ccc-cccccccccccc', "
	    "1699989200000),"
	    "('" ATT_FLIGHT "', 'ffffffff-ffff-4fff-8fff-ffffffffffff', "
	    "'orders-svc', '" ROW_A "', 1699999990000),"
	    "('" ATT_BILL "', '56565656-5656-4565-8565-565656565656', "
	    "'billing', '34343434-3434-4343-8343-343434343434', "
	    "1699996400000);"
	    /* token sets (schema 11): an attempt of A's sent 10 messages
	     * to payments (7 not consumed yet) and 3 to orders (audit
	     * consumed 2); no batch row names it (the store has none):
	     * an orphan, swept as one row by cleanup */
	    "INSERT INTO tbx_tset (set_id, grp, topic, part, mint_seq, nbits, "
	    "bits, created_ms) VALUES "
	    "('" SET_PAY "', 'payments-svc', 'payments', 0, 16, 10, x'f502', "
	    "1699999000000),"
	    "('" SET_AUD "', 'audit', 'orders', 1, 16, 3, x'04', "
	    "1699999000000);"
	    "INSERT INTO tbx_breg (attempt, send_grp, row_id, sets, "
	    "created_ms) VALUES ('" ATT_SETS "', 'orders-svc', '" ROW_A
	    "', '[\"" SET_PAY "\",\"" SET_AUD "\"]', 1699999000000);");
}

/* Builds every fixture in @p dir: s.db + t.db (two files), all.db (one
 * file for both stores), empty.db (a fresh store), dl.db (a store with
 * the dead letters alone). */
static void fx_build(const char *dir)
{
	char *s = tt_path(dir, "s.db"), *t = tt_path(dir, "t.db");
	char *all = tt_path(dir, "all.db"), *empty = tt_path(dir, "empty.db");
	char *dl = tt_path(dir, "dl.db"); /* dead letters, nothing else */
	tbx_outbox_t *store;
	char err[512];

	fx_store(s);
	fx_tokens(t);
	fx_store(all);
	fx_tokens(all);
	cr_assert_eq(tbx_outbox_open(empty, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(store);
	cr_assert_eq(tbx_outbox_open(dl, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(store);
	fx_exec(dl, FX_DEAD_LETTERS);
	free(s);
	free(t);
	free(all);
	free(empty);
	free(dl);
}

/*
 * Running the command.
 */

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0;
	int c;

	if (!f)
		return NULL;
	while ((c = getc(f)) != EOF) {
		if (n + 2 > cap) {
			cap = cap ? cap * 2 : 4096;
			buf = realloc(buf, cap);
			cr_assert(buf);
		}
		buf[n++] = (char)c;
	}
	fclose(f);
	if (!buf)
		buf = calloc(1, 1);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");

	cr_assert(f, "cannot write %s: %s", path, strerror(errno));
	fputs(text, f);
	fclose(f);
}

/* A copy of @p s with every @p from replaced by @p to. */
static char *replace_all(const char *s, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to), n = 0;
	char *out;
	const char *p;

	for (p = s; (p = strstr(p, from)); p += fl)
		n++;
	out = malloc(strlen(s) + n * (tl > fl ? tl - fl : 0) + 1);
	cr_assert(out);
	out[0] = '\0';
	for (char *o = out; *s;) {
		if (fl && strncmp(s, from, fl) == 0) {
			memcpy(o, to, tl);
			o += tl;
			s += fl;
		} else {
			*o++ = *s++;
		}
		*o = '\0';
	}
	return out;
}

/* Runs `tokenbox inspect ARGS...` (NULL-terminated). */
static cc_result_t inspect(const char *const *args)
{
	const char *argv[64] = {"inspect"};
	size_t n = 1;

	for (size_t i = 0; args[i] && n < 63; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	return cc_run(argv);
}

#define INSPECT(...) inspect((const char *const[]){__VA_ARGS__, NULL})

static int exit_code(const cc_result_t *res)
{
	return res->status != -1 && WIFEXITED(res->status)
		   ? WEXITSTATUS(res->status)
		   : -1;
}

static int has_arg(const char *const *args, const char *arg)
{
	for (size_t i = 0; args[i]; i++)
		if (strcmp(args[i], arg) == 0)
			return 1;
	return 0;
}

/*
 * Golden files.
 */

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Copies the fixture files of @p from into @p to. */
static void copy_fixtures(const char *from, const char *to)
{
	static const char *const names[] = {"s.db", "t.db", "all.db",
					    "empty.db", "dl.db"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char *src = tt_path(from, names[i]),
		     *dst = tt_path(to, names[i]);
		size_t len;
		char *bytes = read_file(src, &len);
		FILE *f = fopen(dst, "wb");

		cr_assert(bytes && f, "copy %s", src);
		cr_assert_eq(fwrite(bytes, 1, len, f), len);
		fclose(f);
		free(bytes);
		free(src);
		free(dst);
	}
}

/* Runs one case of tests/data/inspect.  @returns 1 when it passed. */
static int golden_case(const char *case_dir, const char *name,
		       const char *fixtures, int update)
{
	char *dir = tt_tmpdir();
	char *args_path = tt_path(case_dir, "args");
	char *out_path = tt_path(case_dir, "stdout");
	char *err_path = tt_path(case_dir, "stderr");
	char *exit_path = tt_path(case_dir, "exit");
	char *args_text = read_file(args_path, NULL), *line, *save = NULL;
	const char *argv[64];
	char *expanded[64];
	size_t argc = 0;
	cc_result_t res;
	char *out, *err, *want_out, *want_err, *want_exit, code[16];
	int ok = 1;

	cr_assert(args_text, "%s: no args file", name);
	copy_fixtures(fixtures, dir);
	for (line = strtok_r(args_text, "\n", &save); line && argc < 62;
	     line = strtok_r(NULL, "\n", &save)) {
		expanded[argc] = replace_all(line, "$DIR", dir);
		argv[argc] = expanded[argc];
		argc++;
	}
	argv[argc] = NULL;
	res = inspect(argv);
	out = replace_all(res.out, dir, "$DIR");
	err = replace_all(res.err, dir, "$DIR");
	snprintf(code, sizeof(code), "%d\n", exit_code(&res));
	if (update) {
		write_file(out_path, out);
		write_file(exit_path, code);
		if (*err)
			write_file(err_path, err);
		else
			remove(err_path);
	}
	want_out = read_file(out_path, NULL);
	want_err = read_file(err_path, NULL);
	want_exit = read_file(exit_path, NULL);
	if (!want_out || !want_exit || strcmp(want_out, out) != 0) {
		cr_expect_fail(
		    "%s: stdout differs\n--- expected\n%s--- got\n%s", name,
		    want_out ? want_out : "(no file)\n", out);
		ok = 0;
	}
	if (!want_exit || strcmp(want_exit, code) != 0) {
		cr_expect_fail("%s: exit %s, expected %s (stderr: %s)", name,
			       code, want_exit ? want_exit : "(no file)", err);
		ok = 0;
	}
	if (strcmp(want_err ? want_err : "", err) != 0) {
		cr_expect_fail(
		    "%s: stderr differs\n--- expected\n%s--- got\n%s", name,
		    want_err ? want_err : "(none)\n", err);
		ok = 0;
	}
	if (*err && strchr(err, '\n') != err + strlen(err) - 1) {
		cr_expect_fail("%s: stderr is not one line: %s", name, err);
		ok = 0;
	}
	if (has_arg(argv, "--json") && *res.out) {
		cJSON *doc = cJSON_Parse(res.out);
		if (!doc) {
			cr_expect_fail("%s: --json output does not parse",
				       name);
			ok = 0;
		}
		cJSON_Delete(doc);
	}
	for (size_t i = 0; i < argc; i++)
		free(expanded[i]);
	free(args_text);
	free(out);
	free(err);
	free(want_out);
	free(want_err);
	free(want_exit);
	free(args_path);
	free(out_path);
	free(err_path);
	free(exit_path);
	cc_result_free(&res);
	tt_rmrf(dir);
	free(dir);
	return ok;
}

Test(cli_inspect, output_matches_the_golden_files, .timeout = 600)
{
	const char *src = getenv("TBX_SOURCE_DIR");
	const char *update_env = getenv("TBX_UPDATE_GOLDEN");
	int update = update_env && strcmp(update_env, "1") == 0;
	char root[4096], now[32];
	char *fixtures = tt_tmpdir(), *names[256];
	size_t cnt = 0, failed = 0;
	struct dirent *e;
	DIR *d;

	cr_assert(src, "TBX_SOURCE_DIR is not set (run through ctest)");
	snprintf(root, sizeof(root), "%s/tests/data/inspect", src);
	snprintf(now, sizeof(now), "%lld", NOW);
	setenv("TBX_INSPECT_NOW_MS", now, 1);
	fx_build(fixtures);
	d = opendir(root);
	cr_assert(d, "%s: %s", root, strerror(errno));
	while ((e = readdir(d)) && cnt < 256)
		if (e->d_name[0] != '.')
			names[cnt++] = strdup(e->d_name);
	closedir(d);
	qsort(names, cnt, sizeof(names[0]), by_name);
	cr_assert_gt(cnt, 0, "no cases in %s", root);
	for (size_t i = 0; i < cnt; i++) {
		char *case_dir = tt_path(root, names[i]);
		failed += !golden_case(case_dir, names[i], fixtures, update);
		free(case_dir);
		free(names[i]);
	}
	unsetenv("TBX_INSPECT_NOW_MS");
	cr_expect_eq(failed, 0, "%zu of %zu golden cases failed%s", failed, cnt,
		     update ? " (rewritten)" : "");
	tt_rmrf(fixtures);
	free(fixtures);
}

/*
 * The files, byte for byte.
 */

typedef struct snap {
	char *path;
	char *bytes; /* NULL: the file does not exist */
	size_t len;
	struct timespec mtime;
} snap_t;

static void snap_take(snap_t *s, const char *path)
{
	struct stat st;

	s->path = strdup(path);
	s->bytes = read_file(path, &s->len);
	memset(&s->mtime, 0, sizeof(s->mtime));
	if (stat(path, &st) == 0)
		s->mtime = st.st_mtim;
}

/* Fails the test if the file changed since @p s was taken. */
static void snap_same(const snap_t *s, const char *after)
{
	snap_t now;

	snap_take(&now, s->path);
	cr_assert_eq(!!now.bytes, !!s->bytes,
		     "%s: appeared or vanished after %s", s->path, after);
	cr_assert(now.len == s->len &&
		      (!s->bytes || memcmp(now.bytes, s->bytes, s->len) == 0),
		  "%s: changed by %s", s->path, after);
	cr_assert(now.mtime.tv_sec == s->mtime.tv_sec &&
		      now.mtime.tv_nsec == s->mtime.tv_nsec,
		  "%s: mtime changed by %s", s->path, after);
	free(now.path);
	free(now.bytes);
}

static void snap_free(snap_t *s)
{
	free(s->path);
	free(s->bytes);
}

/* Runs every read-only command on the stores (@p tokens may be NULL:
 * single-file mode) and checks that none fails nor changes @p snaps. */
static void read_only_round(const char *store, const char *tokens,
			    const snap_t *snaps, size_t snap_cnt,
			    const char *const *ids)
{
	const char *cmds[][5] = {
	    {"status"},
	    {"status", "--json"},
	    {"status", "--check"},
	    {"outbox", "list"},
	    {"outbox", "list", "--json", "--older-than", "1s"},
	    {"tokens", "list"},
	    {"tokens", "list", "--json", "--limit", "0"},
	    {"orphans"},
	    {"orphans", "--json"},
	    {"cleanup", "--dry-run"},
	    {"cleanup", "--dry-run", "--json"},
	    {"dead-letters", "list"},
	    {"dead-letters", "list", "--json"},
	    {"outbox", "show", ids ? ids[0] : "x"},
	    {"outbox", "show", ids ? ids[0] : "x", "--json"},
	    {"tokens", "show", ids ? ids[1] : "x"},
	    {"tokens", "show", ids ? ids[1] : "x", "--json"},
	    {"dead-letters", "show", "1"},
	    {"dead-letters", "show", "1", "--json"},
	};

	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		const char *argv[16] = {"--store", store};
		size_t n = 2;
		char what[200];
		cc_result_t res;
		int code;

		if (!ids && strcmp(cmds[i][1] ? cmds[i][1] : "", "show") == 0)
			continue;
		if (tokens) {
			argv[n++] = "--tokens";
			argv[n++] = tokens;
		}
		for (size_t j = 0; j < 5 && cmds[i][j]; j++)
			argv[n++] = cmds[i][j];
		argv[n] = NULL;
		snprintf(what, sizeof(what), "%s %s %s", cmds[i][0],
			 cmds[i][1] ? cmds[i][1] : "",
			 cmds[i][2] ? cmds[i][2] : "");
		res = inspect(argv);
		code = exit_code(&res);
		/* 1: a finding (status --check), or an id the round did not
		 * find (show); never a store error. */
		cr_assert(code == 0 || code == 1, "%s: exit %d: %s", what, code,
			  res.err);
		if (has_arg(argv, "--json") && code == 0) {
			cJSON *doc = cJSON_Parse(res.out);
			cr_assert(doc, "%s: not JSON: %s", what, res.out);
			cJSON_Delete(doc);
		}
		for (size_t k = 0; k < snap_cnt; k++)
			snap_same(&snaps[k], what);
		cc_result_free(&res);
	}
}

Test(cli_inspect, read_only_commands_change_no_byte_nor_mtime, .timeout = 300)
{
	static const char *const ids[] = {ROW_B, TOK_B1};
	static const char *const names[] = {"s.db", "t.db", "all.db",
					    "empty.db"};
	char *dir = tt_tmpdir(), *path[4];
	snap_t snaps[4];

	fx_build(dir);
	for (int i = 0; i < 4; i++) {
		path[i] = tt_path(dir, names[i]);
		snap_take(&snaps[i], path[i]);
	}
	read_only_round(path[0], path[1], snaps, 4, ids);
	read_only_round(path[2], NULL, snaps, 4, ids);
	read_only_round(path[3], NULL, snaps, 4, NULL);
	for (int i = 0; i < 4; i++) {
		snap_free(&snaps[i]);
		free(path[i]);
	}
	tt_rmrf(dir);
	free(dir);
}

/* A process that writes to @p db and dies without closing it: the WAL
 * keeps frames that no checkpoint has copied into the file. */
static void write_and_die(const char *db, const char *sql)
{
	pid_t pid = fork();
	int status;

	cr_assert(pid >= 0);
	if (pid == 0) {
		sqlite3 *conn;
		if (sqlite3_open(db, &conn) != SQLITE_OK ||
		    sqlite3_exec(conn, sql, NULL, NULL, NULL) != SQLITE_OK)
			_exit(3);
		kill(getpid(), SIGKILL);
		_exit(4);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status), "the writer did not die (%d)", status);
}

Test(cli_inspect, read_only_commands_leave_a_dead_writers_wal_alone,
     .timeout = 300)
{
	char *dir = tt_tmpdir();
	char *s = tt_path(dir, "s.db"), *t = tt_path(dir, "t.db");
	char *s_wal = tt_path(dir, "s.db-wal"),
	     *t_wal = tt_path(dir, "t.db-wal");
	snap_t snaps[4];
	cc_result_t res;

	fx_build(dir);
	write_and_die(s, "INSERT INTO tbx_ingress VALUES ('late', 'orders', 5, "
			 "77)");
	write_and_die(
	    t, "DELETE FROM tbx_registrations WHERE attempt = '" ATT_GONE "'");
	snap_take(&snaps[0], s);
	snap_take(&snaps[1], t);
	snap_take(&snaps[2], s_wal);
	snap_take(&snaps[3], t_wal);
	cr_assert(snaps[2].bytes && snaps[2].len > 0, "no WAL left behind");
	read_only_round(s, t, snaps, 4, (const char *const[]){ROW_B, TOK_B1});
	/* What the WAL holds is seen. */
	res = INSPECT("--store", s, "--tokens", t, "status");
	cr_assert(cc_exited(res.status, 0), "%s", res.err);
	cr_assert(strstr(res.out, "late"), "%s", res.out);
	cc_result_free(&res);
	res = INSPECT("--store", s, "--tokens", t, "orphans", "--json");
	cr_assert(cc_exited(res.status, 0), "%s", res.err);
	cr_assert_null(strstr(res.out, ATT_GONE), "%s", res.out);
	cc_result_free(&res);
	for (int i = 0; i < 4; i++)
		snap_same(&snaps[i], "the last reads"), snap_free(&snaps[i]);
	tt_rmrf(dir);
	free(dir);
	free(s);
	free(t);
	free(s_wal);
	free(t_wal);
}

/*
 * Errors.
 */

/* Runs `inspect --store STORE [--tokens TOKENS] status` and checks: exit 2,
 * nothing on stdout, one line on stderr naming @p file and saying @p why. */
static void expect_error(const char *store, const char *tokens,
			 const char *file, const char *why)
{
	cc_result_t res =
	    tokens ? INSPECT("--store", store, "--tokens", tokens, "status")
		   : INSPECT("--store", store, "status");

	cr_expect(cc_exited(res.status, 2), "%s: status %d: %s", file,
		  res.status, res.err);
	cr_expect_str_empty(res.out, "%s: %s", file, res.out);
	cr_expect_eq(cc_lines(res.err), 1, "%s: %s", file, res.err);
	cr_expect(strstr(res.err, file), "%s: does not name it: %s", file,
		  res.err);
	cr_expect(strstr(res.err, why), "%s: '%s' expected: %s", file, why,
		  res.err);
	cc_result_free(&res);
}

Test(cli_inspect, every_store_error_is_one_line_and_exit_2, .timeout = 120)
{
	char *dir = tt_tmpdir();
	char *s = tt_path(dir, "s.db"), *t = tt_path(dir, "t.db");
	char *missing = tt_path(dir, "missing.db");
	char *text = tt_path(dir, "notes.txt");
	char *foreign = tt_path(dir, "foreign.db");
	char *foreign_id = tt_path(dir, "foreign-id.db");
	char *foreign_ver = tt_path(dir, "foreign-version.db");
	char *newer = tt_path(dir, "newer.db");
	char *corrupt = tt_path(dir, "corrupt.db");
	char sql[128];
	size_t len;
	char *bytes;
	FILE *f;

	fx_build(dir);
	expect_error(missing, NULL, missing, "no such database file");
	expect_error(s, missing, missing, "no such database file");
	write_file(text, "this is not a database, it is a text file\n");
	expect_error(text, NULL, text, "not a tokenbox database");
	expect_error(s, text, text, "not a tokenbox database");
	fx_exec(foreign, "CREATE TABLE customers (id INTEGER PRIMARY KEY)");
	expect_error(foreign, NULL, foreign, "not a tokenbox database");
	fx_exec(foreign_id, "PRAGMA application_id = 305419896;"
			    "CREATE TABLE t (x)");
	expect_error(foreign_id, NULL, foreign_id, "application_id 0x12345678");
	fx_exec(foreign_ver, "PRAGMA user_version = 7; CREATE TABLE t (x)");
	expect_error(foreign_ver, NULL, foreign_ver, "not a tokenbox database");

	bytes = read_file(s, &len);
	f = fopen(newer, "wb");
	fwrite(bytes, 1, len, f);
	fclose(f);
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d",
		 TBX_SCHEMA_VERSION + 1);
	fx_exec(newer, sql);
	expect_error(newer, NULL, newer, "newer");

	/* Page 1 past the file header is the schema's b-tree page. */
	cr_assert_gt(len, 4096);
	memset(bytes + 100, 0x5a, 200);
	f = fopen(corrupt, "wb");
	fwrite(bytes, 1, len, f);
	fclose(f);
	expect_error(corrupt, NULL, corrupt, "corrupt");
	free(bytes);

	tt_rmrf(dir);
	free(dir);
	free(s);
	free(t);
	free(missing);
	free(text);
	free(foreign);
	free(foreign_id);
	free(foreign_ver);
	free(newer);
	free(corrupt);
}

Test(cli_inspect, a_lock_held_past_the_busy_timeout_is_one_line, .timeout = 120)
{
	char *dir = tt_tmpdir();
	char *s = tt_path(dir, "s.db"), *t = tt_path(dir, "t.db");
	sqlite3 *holder;
	cc_result_t res;
	long long start;

	fx_build(dir);
	cr_assert_eq(sqlite3_open(t, &holder), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(holder, "BEGIN EXCLUSIVE", NULL, NULL, NULL),
		     SQLITE_OK);
	/* cleanup writes the token store: it waits, then gives up. */
	start = cc_now_ms();
	res = INSPECT("--store", s, "--tokens", t, "--busy-timeout", "300",
		      "cleanup");
	cr_expect(cc_exited(res.status, 2), "status %d: %s", res.status,
		  res.err);
	cr_expect_geq(cc_now_ms() - start, 300);
	cr_expect_eq(cc_lines(res.err), 1, "%s", res.err);
	cr_expect(strstr(res.err, "locked"), "%s", res.err);
	cr_expect(strstr(res.err, t), "%s", res.err);
	cc_result_free(&res);
	/* Readers go on: WAL. */
	res = INSPECT("--store", s, "--tokens", t, "--busy-timeout", "300",
		      "status");
	cr_expect(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(holder);
	/* Released: the same cleanup goes through. */
	res = INSPECT("--store", s, "--tokens", t, "cleanup");
	cr_expect(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	tt_rmrf(dir);
	free(dir);
	free(s);
	free(t);
}

Test(cli_inspect, cleanup_removes_what_the_sweeper_would_and_nothing_else,
     .timeout = 120)
{
	char *dir = tt_tmpdir();
	char *s = tt_path(dir, "s.db"), *t = tt_path(dir, "t.db");
	cc_result_t res;

	fx_build(dir);
	res = INSPECT("--store", s, "--tokens", t, "cleanup", "--batch", "1");
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	/* Orphans gone with their tokens; the winner's registrations gone,
	 * its tokens kept; the attempt in flight and billing's (another
	 * store's) untouched. */
	cr_expect_eq(tt_count(t, "SELECT count(*) FROM tbx_registrations "
				 "WHERE attempt IN ('" ATT_LOST "', '" ATT_GONE
				 "', '" ATT_B "')"),
		     0);
	cr_expect_eq(tt_count(t,
			      "SELECT count(*) FROM tbx_tokens WHERE token "
			      "LIKE '99999999-%' OR token LIKE 'dddddddd-%'"),
		     0);
	cr_expect_eq(tt_count(t, "SELECT count(*) FROM tbx_tokens WHERE token "
				 "IN ('" TOK_B1 "', '" TOK_B2 "')"),
		     2);
	cr_expect_eq(tt_count(t, "SELECT count(*) FROM tbx_registrations "
				 "WHERE attempt IN ('" ATT_FLIGHT
				 "', '" ATT_BILL "')"),
		     2);
	cr_expect_eq(tt_count(t, "SELECT count(*) FROM tbx_tokens"), 7);
	/* Nothing left to clean but what is in flight. */
	res = INSPECT("--store", s, "--tokens", t, "orphans", "--check");
	cr_expect(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.out);
	cc_result_free(&res);
	tt_rmrf(dir);
	free(dir);
	free(s);
	free(t);
}

/*
 * With a worker at work.
 */

/* A child `tokenbox inspect` whose output is drained while the caller
 * polls a worker. */
typedef struct async_run {
	pid_t pid;
	int fd[2]; /* stdout, stderr */
	char *buf[2];
	size_t len[2];
	int status;
} async_run_t;

static void async_start(async_run_t *a, const char *const *args)
{
	const char *argv[32] = {"inspect"};
	int out_p[2], err_p[2];
	size_t n = 1;

	memset(a, 0, sizeof(*a));
	for (size_t i = 0; args[i] && n < 31; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	cr_assert(pipe(out_p) == 0 && pipe(err_p) == 0);
	int fds[] = {out_p[0], out_p[1], err_p[0], err_p[1]};
	a->pid = cc_fork(argv, -1, out_p[1], err_p[1], fds, 4);
	close(out_p[1]);
	close(err_p[1]);
	a->fd[0] = out_p[0];
	a->fd[1] = err_p[0];
	for (int i = 0; i < 2; i++) {
		fcntl(a->fd[i], F_SETFL, fcntl(a->fd[i], F_GETFL) | O_NONBLOCK);
		cc_append(&a->buf[i], &a->len[i], "", 0);
	}
}

/* Reads what is there.  @returns 1 once the child exited and both pipes
 * are at their end. */
static int async_poll(async_run_t *a)
{
	char chunk[4096];

	for (int i = 0; i < 2; i++) {
		ssize_t r = -1;
		while (a->fd[i] >= 0 &&
		       (r = read(a->fd[i], chunk, sizeof(chunk))) != 0) {
			if (r < 0) {
				if (errno != EAGAIN && errno != EINTR) {
					close(a->fd[i]);
					a->fd[i] = -1;
				}
				break;
			}
			cc_append(&a->buf[i], &a->len[i], chunk, (size_t)r);
		}
		if (a->fd[i] >= 0 && r == 0) {
			close(a->fd[i]);
			a->fd[i] = -1;
		}
	}
	if (a->fd[0] >= 0 || a->fd[1] >= 0)
		return 0;
	cr_assert_eq(waitpid(a->pid, &a->status, 0), a->pid);
	return 1;
}

static void async_free(async_run_t *a)
{
	free(a->buf[0]);
	free(a->buf[1]);
}

Test(cli_inspect, commands_run_while_a_worker_writes, .timeout = 300)
{
	enum { N = 400 };
	const char *const cmds[][4] = {
	    {"status", "--json"},	  {"outbox", "list", "--json"},
	    {"tokens", "list", "--json"}, {"orphans", "--json"},
	    {"cleanup", "--json"},	  {"status"},
	};
	char *dir = tt_tmpdir();
	char *s1 = tt_path(dir, "s1.db"), *t = tt_path(dir, "tokens.db");
	tt_cluster_t *cluster = tt_cluster_new(1);
	tt_hop_t hop = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	tbx_worker_t *w;
	char err[512];
	int runs = 0, overlapped = 0;
	time_t deadline = time(NULL) + 120 * tt_time_factor();

	tt_cluster_topic(cluster, "in", 2);
	tt_cluster_topic(cluster, "out", 2);
	tt_subscribe(t, "in", "g1");
	tt_subscribe(t, "out", "g2");
	tt_hop_table(s1, "hop1");
	tt_publish(cluster->bootstraps, t, "in", "Ping", N, 4, "m");
	w = tbx_worker_new(tt_conf(cluster->bootstraps, "g1", s1, t,
				   "batch.max.messages", "10",
				   "cleanup.interval.ms", "50", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop),
		     TBX_OK);
	while (time(NULL) < deadline) {
		const char *const *cmd = cmds[runs % 6];
		const char *args[8] = {"--store", s1, "--tokens", t};
		async_run_t a;
		tbx_stats_t before, after;
		size_t n = 4;
		int64_t done;

		for (size_t i = 0; i < 4 && cmd[i]; i++)
			args[n++] = cmd[i];
		args[n] = NULL;
		tbx_worker_stats(w, &before);
		async_start(&a, args);
		while (!async_poll(&a)) {
			cr_assert_eq(tbx_worker_poll(w, 20, NULL), TBX_OK,
				     "poll: %s", tbx_worker_errstr(w));
		}
		tbx_worker_stats(w, &after);
		overlapped += after.batches != before.batches;
		cr_assert(WIFEXITED(a.status) && WEXITSTATUS(a.status) == 0,
			  "%s: status %d: %s", cmd[0], a.status, a.buf[1]);
		cr_assert_str_empty(a.buf[1], "%s: %s", cmd[0], a.buf[1]);
		if (strcmp(cmd[runs % 6 == 5 ? 0 : 1], "--json") == 0 ||
		    (cmd[2] && strcmp(cmd[2], "--json") == 0)) {
			cJSON *doc = cJSON_Parse(a.buf[0]);
			cr_assert(doc, "%s: not JSON: %s", cmd[0], a.buf[0]);
			cJSON_Delete(doc);
		}
		async_free(&a);
		runs++;
		done = tt_count(s1, "SELECT count(DISTINCT payload) FROM hop1");
		if (done == N && runs >= 12 &&
		    tt_count(s1, "SELECT count(*) FROM tbx_outbox") == 0)
			break;
	}
	cr_assert_eq(tt_count(s1, "SELECT count(*) FROM hop1"), N,
		     "every record once (%d runs)", runs);
	cr_assert_eq(tt_count(s1, "SELECT count(DISTINCT payload) FROM hop1"),
		     N);
	cr_expect_geq(overlapped, 1,
		      "no command ran while the worker processed a batch");
	tbx_worker_destroy(w);
	tt_cluster_destroy(cluster);
	tt_rmrf(dir);
	free(dir);
	free(s1);
	free(t);
}

/*
 * Repairs after a crash, without restarting the crashed group's worker.
 */

static int64_t json_num(const char *text, const char *key)
{
	cJSON *doc = cJSON_Parse(text);
	const cJSON *item;
	int64_t v;

	cr_assert(doc, "not JSON: %s", text);
	item = cJSON_GetObjectItemCaseSensitive(doc, key);
	cr_assert(cJSON_IsNumber(item), "no number '%s' in %s", key, text);
	v = (int64_t)item->valuedouble;
	cJSON_Delete(doc);
	return v;
}

typedef struct down_expect {
	const char *s1, *s2;
} down_expect_t;

static int downstream_done(void *opaque)
{
	down_expect_t *e = opaque;

	return tt_count(e->s2, "SELECT count(DISTINCT payload) FROM hop2") ==
		   tt_count(e->s1, "SELECT count(*) FROM hop1") &&
	       tt_count(e->s2, "SELECT count(*) FROM tbx_outbox") == 0;
}

static void crash_then_repair(const char *point)
{
	enum { N = 8 };
	char *dir = tt_tmpdir();
	char *s1 = tt_path(dir, "s1.db"), *s2 = tt_path(dir, "s2.db");
	char *t = tt_path(dir, "tokens.db");
	tt_cluster_t *cluster = tt_cluster_new(1);
	char prog[512], env_crash[160];
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	tt_hop_t hop2 = {.table = "hop2"};
	down_expect_t expect = {NULL, NULL};
	tbx_worker_t *w;
	tt_record_t *recs;
	snap_t snaps[2];
	cc_result_t res;
	char err[512];
	int64_t handled, rows;
	size_t cnt;
	int status;

	tt_cluster_topic(cluster, "in", 2);
	tt_cluster_topic(cluster, "out", 2);
	tt_cluster_topic(cluster, "in.dlq", 1);
	tt_subscribe(t, "in", "g1");
	tt_subscribe(t, "out", "g2");
	tt_hop_table(s1, "hop1");
	tt_hop_table(s2, "hop2");
	tt_publish(cluster->bootstraps, t, "in", "Ping", N, 2, "m");

	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	snprintf(env_crash, sizeof(env_crash), "TBX_CRASH_AT=%s", point);
	char *argv[] = {prog, cluster->bootstraps, s1, t, "g1", NULL};
	/* The only worker of g1: its partitions assigned at once, no group
	 * to join. */
	char *envv[] = {env_crash, "TBX_TEST_ASSIGN=1", NULL};
	status = tt_wait(tt_spawn(argv, envv), 60);
	cr_assert(
	    status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
	    "%s: the worker was not killed at the point (%d)", point, status);
	handled = tt_count(s1, "SELECT count(*) FROM hop1");
	rows = tt_count(s1, "SELECT count(*) FROM tbx_outbox");
	cr_assert_gt(handled, 0, "%s: nothing handled before the crash", point);
	cr_assert_eq(rows, handled, "%s: one row per handled record", point);

	/* The stores as the crash left them: the read-only commands work
	 * and write nothing, WAL and all. */
	snap_take(&snaps[0], s1);
	snap_take(&snaps[1], t);
	read_only_round(s1, t, snaps, 2, NULL);
	snap_free(&snaps[0]);
	snap_free(&snaps[1]);

	/* redispatch finishes every row (older than 0 s: all of them).  One
	 * case takes its Kafka settings from a worker's file (--config). */
	if (strcmp(point, "C.delivered") == 0) {
		char conf[4200];
		FILE *f;

		snprintf(conf, sizeof(conf), "%s.conf", s1);
		cr_assert((f = fopen(conf, "w")));
		fprintf(f, "kafka.bootstrap.servers=%s\nplugin=unused.so\n",
			cluster->bootstraps);
		fclose(f);
		res = INSPECT("--store", s1, "--tokens", t, "redispatch",
			      "--older-than", "0s", "-c", conf, "--json");
	} else {
		res = INSPECT("--store", s1, "--tokens", t, "redispatch",
			      "--older-than", "0s", "--bootstrap-servers",
			      cluster->bootstraps, "--json");
	}
	cr_assert(cc_exited(res.status, 0), "%s: redispatch: status %d: %s%s",
		  point, res.status, res.err, res.out);
	cc_result_free(&res);
	cr_assert_eq(tt_count(s1, "SELECT count(*) FROM tbx_outbox"), 0,
		     "%s: rows left after redispatch", point);

	/* cleanup: g1 has no rows left in s1, so it is named. */
	res = INSPECT("--store", s1, "--tokens", t, "cleanup", "--group", "g1",
		      "--json");
	cr_assert(cc_exited(res.status, 0), "%s: cleanup: status %d: %s", point,
		  res.status, res.err);
	if (strcmp(point, "B.minted") == 0)
		cr_expect_gt(json_num(res.out, "orphans"), 0,
			     "%s: the crashed attempt was not swept: %s", point,
			     res.out);
	cc_result_free(&res);
	cr_assert_eq(tt_count(t, "SELECT count(*) FROM tbx_registrations"), 0,
		     "%s: registrations left", point);
	res = INSPECT("--store", s1, "--tokens", t, "orphans", "--check",
		      "--group", "g1");
	cr_expect(cc_exited(res.status, 0), "%s: orphans left: %s", point,
		  res.out);
	cc_result_free(&res);

	/* Downstream takes every outgoing message once. */
	w = tbx_worker_new(tt_conf(cluster->bootstraps, "g2", s2, t, NULL), err,
			   sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(w, "out", "Pong", tt_hop_handle, &hop2),
	    TBX_OK);
	/* The only worker of g2: its partitions through the rebalance
	 * callback's own path, without the seconds of a join. */
	tbx__worker_assign_directly(w);
	expect.s1 = s1;
	expect.s2 = s2;
	cr_assert(tt_drive(&w, 1, downstream_done, &expect, 20, 90),
		  "%s: downstream did not finish", point);
	cr_assert_eq(tt_count(s2, "SELECT count(*) FROM hop2"), handled,
		     "%s: downstream effects", point);
	cr_assert_eq(tt_count(s2, "SELECT count(DISTINCT payload) FROM hop2"),
		     handled);
	/* The invariants: no row, no registration; g2 holds no token (the
	 * crashed attempt's were swept, the rest consumed); g1 holds the
	 * tokens of the records it never handled. */
	cr_assert_eq(tt_count(s1, "SELECT count(*) FROM tbx_outbox"), 0);
	cr_assert_eq(tt_count(s2, "SELECT count(*) FROM tbx_outbox"), 0);
	cr_assert_eq(tt_count(t, "SELECT count(*) FROM tbx_registrations"), 0);
	cr_assert_eq(tt_count(t, "SELECT count(*) FROM tbx_tokens WHERE grp = "
				 "'g2'"),
		     0, "%s: tokens left for g2", point);
	cr_assert_eq(tt_count(t, "SELECT count(*) FROM tbx_tokens WHERE grp = "
				 "'g1'"),
		     N - handled, "%s: tokens of g1", point);
	/* Re-dispatched copies carry the ids and tokens of the first. */
	cnt = tt_read_topic(cluster->bootstraps, "out", &recs);
	cr_assert_geq(cnt, (size_t)handled);
	for (size_t i = 0; i < cnt; i++)
		for (size_t j = 0; j < i; j++)
			if (strcmp(recs[i].id, recs[j].id) == 0)
				cr_assert_str_eq(recs[i].token, recs[j].token);
	tt_records_free(recs, cnt);
	tbx_worker_destroy(w);
	tt_cluster_destroy(cluster);
	tt_rmrf(dir);
	free(dir);
	free(s1);
	free(s2);
	free(t);
}

Test(cli_inspect, redispatch_and_cleanup_repair_a_crash_after_minting,
     .timeout = 300)
{
	crash_then_repair("B.minted");
}

Test(cli_inspect, redispatch_repairs_a_crash_after_delivery, .timeout = 300)
{
	crash_then_repair("C.delivered");
}

Test(cli_inspect, redispatch_repairs_a_crash_after_consuming_tokens,
     .timeout = 300)
{
	crash_then_repair("D.consumed");
}

/*
 * The demo's stores.
 */

Test(cli_inspect, works_on_the_stores_the_demo_leaves, .timeout = 600)
{
	char *dir = tt_tmpdir(), *keep = tt_path(dir, "stores");
	char *orders = tt_path(keep, "order-service.db");
	char *payments = tt_path(keep, "payment-service.db");
	char *tokens = tt_path(keep, "tokens.db");
	const char *demo[] = {"demo", "--messages", "300", "--json", "--seed",
			      "3",    "--keep",	    keep,  NULL};
	cc_result_t res = cc_run_with(demo, NULL, 0, 300000);
	snap_t snaps[3];

	cr_assert(cc_exited(res.status, 0), "demo: status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	snap_take(&snaps[0], orders);
	snap_take(&snaps[1], payments);
	snap_take(&snaps[2], tokens);
	read_only_round(orders, tokens, snaps, 3, NULL);
	read_only_round(payments, tokens, snaps, 3, NULL);
	res = INSPECT("--store", orders, "--tokens", tokens, "status",
		      "--check", "--json");
	cr_expect(cc_exited(res.status, 0), "status --check: %s", res.out);
	cc_result_free(&res);
	for (int i = 0; i < 3; i++)
		snap_free(&snaps[i]);
	res = INSPECT("--store", orders, "--tokens", tokens, "cleanup");
	cr_expect(cc_exited(res.status, 0), "cleanup: %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	/* Every row finished: nothing to redispatch, no broker needed. */
	res =
	    INSPECT("--store", payments, "--tokens", tokens, "redispatch",
		    "--older-than", "0s", "--bootstrap-servers", "127.0.0.1:1");
	cr_expect(cc_exited(res.status, 0), "redispatch: %d: %s", res.status,
		  res.err);
	cr_expect(strstr(res.out, "no outbox rows"), "%s", res.out);
	cc_result_free(&res);
	tt_rmrf(dir);
	free(dir);
	free(keep);
	free(orders);
	free(payments);
	free(tokens);
}

/* A row a worker's recovery pass found below its partition's committed
 * offset and could not finish is a finding of status --check, however
 * young it is. */
Test(cli_inspect, status_check_flags_rows_found_below_the_committed_offset,
     .timeout = 120)
{
	char *dir = tt_tmpdir();
	char *s = tt_path(dir, "s.db");
	tbx__db_opts_t opts;
	tbx_outbox_t *store;
	tbx__row_t row;
	cc_result_t res;
	char err[256];

	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(s, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	fx_row(&row, "00000000-0000-7000-8000-000000000001", "orders", 0, 7,
	       "00000000-0000-7000-8000-000000000002", tbx__now_ms());
	cr_assert_eq(tbx_outbox_row_insert(store, "g", &row), TBX_OK);
	tbx__row_clear(&row);
	tbx_outbox_close(store);

	res = INSPECT("--store", s, "status", "--check", "--older-than", "1d");
	cr_assert_eq(exit_code(&res), 0, "a young row is no finding: %s%s",
		     res.out, res.err);
	cc_result_free(&res);

	cr_assert_eq(tbx_outbox_open(s, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_outbox_row_mark_stuck(
			 store, "g", "00000000-0000-7000-8000-000000000001",
			 tbx__now_ms()),
		     TBX_OK);
	tbx_outbox_close(store);
	res = INSPECT("--store", s, "status", "--check", "--older-than", "1d");
	cr_assert_eq(exit_code(&res), 1, "%s%s", res.out, res.err);
	cr_assert(strstr(res.out, "1 below the committed offset"), "%s",
		  res.out);
	cr_assert(strstr(res.out, "recovery pass"), "%s", res.out);
	cc_result_free(&res);
	res = INSPECT("--store", s, "status", "--json");
	cr_assert_eq(exit_code(&res), 0, "%s%s", res.out, res.err);
	cJSON *doc = cJSON_Parse(res.out);
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(doc, "outbox"), "below_committed");
	cr_assert(cJSON_IsNumber(n) && n->valuedouble == 1, "%s", res.out);
	cJSON_Delete(doc);
	cc_result_free(&res);
	tt_rmrf(dir);
	free(dir);
	free(s);
}

/* A message's trace context is stored in binary (TBX_STORED_CTX_HDR,
 * docs/tracing.md): `outbox show` still shows the traceparent it is sent
 * as, and the span that wrote it, in text and in JSON. */
Test(cli_inspect, a_stored_trace_context_is_shown_as_its_traceparent,
     .timeout = 120)
{
	char *dir = tt_tmpdir(), err[512];
	char *path = tt_path(dir, "s.db");
	static const uint8_t bin[33] = {
	    0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb,
	    0x21, 0x1c, 0x80, 0x31, 0x9c, 0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20,
	    0x33, 0x31, 0x01, 0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
	const tbx_header_t h[] = {{"x-app", "1", 1},
				  {TBX_STORED_CTX_HDR, bin, sizeof(bin)}};
	tbx_outbox_t *store;
	tbx__row_t row;
	cc_result_t res;

	cr_assert_eq(tbx_outbox_open(path, NULL, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	fx_row(&row, ROW_A, "orders", 0, 41, NULL, NOW);
	fx_msg(&row, "2222222a-2222-4222-8222-22222222222a", NULL, "payments",
	       "PaymentRequested", NULL, "{}", 2, h, 2);
	cr_assert_eq(tbx_outbox_row_insert(store, "g", &row), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx__row_clear(&row);
	tbx_outbox_close(store);

	res = INSPECT("-s", path, "outbox", "show", ROW_A);
	cr_assert(cc_exited(res.status, 0), "%s", res.err);
	cr_expect(strstr(res.out, "traceparent") &&
		      strstr(res.out, "00-0af7651916cd43dd8448eb211c80319c-"
				      "b7ad6b7169203331-01"),
		  "%s", res.out);
	cr_expect(strstr(res.out, "tbx-trace-parent") &&
		      strstr(res.out, "00f067aa0ba902b7"),
		  "%s", res.out);
	cr_expect_null(strstr(res.out, TBX_STORED_CTX_HDR), "%s", res.out);
	cc_result_free(&res);
	res = INSPECT("-s", path, "--json", "outbox", "show", ROW_A);
	cr_assert(cc_exited(res.status, 0), "%s", res.err);
	cr_expect(strstr(res.out, "\"traceparent\"") &&
		      strstr(res.out, "00-0af7651916cd43dd8448eb211c80319c-"
				      "b7ad6b7169203331-01"),
		  "%s", res.out);
	cc_result_free(&res);
	tt_rmrf(dir);
	free(dir);
	free(path);
}
