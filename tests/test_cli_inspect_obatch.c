/*
 * The batch rows of `tokenbox inspect outbox list|show` and `status`
 * (outbox.layout = batch, tbx_obatch): a service store with three batch
 * rows of fixed ids and times -- one processed in the per-message format
 * covering a handled, a dead-lettered and an untokened record, one
 * tokened in the set format, marked stuck, with a dispatch failure, and
 * one of another group whose cover does not decode -- read by the
 * command as a child process.  Messages carry headers as the worker
 * stores them (an application's, one without a value, the trace
 * context in binary): `show` prints them as a record row's show does.  The text
 * and --json outputs are golden files
 * (tests/data/inspect-obatch/<case>.{args,out,exit[,err]}; TBX_UPDATE_GOLDEN=1
 * rewrites them from the SQLite run).
 *
 * The same executable runs in the pg tier (TBX_PG_TIER=1,
 * pg_test_cli_inspect_obatch), the store a schema: the outputs must be
 * the same files, byte for byte.
 */
#include <cjson/cJSON.h>
#include <dirent.h>

#include "base/str.h"
#include "cli_child.h"
#include "fixture.h"
#include "outbox/batchrow.h"
#include "outbox/outbox.h"
#include "store/msgs.h"
#include "support.h"
#include "trace/context.h"

/* "now" of the cases: 2023-11-14T22:13:20Z. */
#define NOW  1700000000000LL
#define SEC  1000LL
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)

#define ROW_1 "b1b1b1b1-b1b1-4b1b-8b1b-b1b1b1b1b1b1"
#define ROW_2 "b2b2b2b2-b2b2-4b2b-8b2b-b2b2b2b2b2b2"
#define ROW_3 "b3b3b3b3-b3b3-4b3b-8b3b-b3b3b3b3b3b3"
#define ATT_2 "a2a2a2a2-a2a2-4a2a-8a2a-a2a2a2a2a2a2"
#define SET_2 "c2c2c2c2-c2c2-4c2c-8c2c-c2c2c2c2c2c2"

typedef struct env {
	char *dir, *store, *tokens;
} env_t;

/* One batch row: @p n records (cover) and @p m messages (@p f, wire
 * @p w), inserted for @p grp in a transaction of its own. */
static void insert_row(tbx_outbox_t *s, const char *grp, tbx__obatch_t *row,
		       const tbx__cover_ent_t *e, size_t n,
		       const tbx__wire_ent_t *w, const tbx__mfield_t *f,
		       size_t m)
{
	tbx__buf_t cover = {0}, wire = {0};
	void *msgs = NULL;
	char err[200];

	cr_assert_eq(tbx__cover_encode(&cover, e, n, err, sizeof(err)), TBX_OK,
		     "%s", err);
	cr_assert_eq(tbx__wire_encode(&wire, w, m), TBX_OK);
	cr_assert_eq(tbx__msgs_encode(f, m, &msgs, &row->msgs_len), TBX_OK);
	row->msgs = msgs;
	row->cover = cover.p;
	row->cover_len = cover.len;
	row->wire = wire.p;
	row->wire_len = wire.len;
	cr_assert_eq(tbx_outbox_begin(s), TBX_OK);
	cr_assert_eq(tbx_outbox_obatch_insert(s, grp, row), TBX_OK, "%s",
		     tbx_outbox_errmsg(s) ? tbx_outbox_errmsg(s) : "");
	cr_assert_eq(tbx_outbox_commit(s), TBX_OK, "%s",
		     tbx_outbox_errmsg(s) ? tbx_outbox_errmsg(s) : "");
	tbx__buf_free(&cover);
	tbx__buf_free(&wire);
	free(msgs);
}

#define FIELD(s) ((tbx__mfield_t){(s), sizeof(s) - 1})

static void env_init(env_t *e)
{
	tbx_outbox_t *s;

	e->dir = tt_tmpdir();
	e->store = tt_store_new(e->dir, "s");
	e->tokens = tt_tokens_new(e->dir, "t", 0);
	tt_tokens_init(e->tokens);
	s = tt_outbox_open(e->store);

	/* Row 1: processed, a token per message; three records, two
	 * messages (the second through the partitioner), the first with
	 * headers: an application's and the trace context as stored
	 * (shown as the traceparent it is sent as, and its writer). */
	{
		static const uint8_t tc[TBX_STORED_CTX_WRITER_LEN] = {
		    0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84,
		    0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c, 0xb7, 0xad,
		    0x6b, 0x71, 0x69, 0x20, 0x33, 0x31, 0x01, 0x00, 0xf0,
		    0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
		const tbx_header_t h[] = {{"x-app", "1", 1},
					  {TBX_STORED_CTX_HDR, tc, sizeof(tc)}};
		void *hdrs = NULL;
		size_t hdrs_len = 0;
		tbx__cover_ent_t c[3] = {
		    {TBX__COVER_HANDLED, "orders", 0, 10,
		     "11111111-1111-4111-8111-111111111111", TBX__REF_TOKEN,
		     "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", 0, 0},
		    {TBX__COVER_DEAD_LETTER, "orders", 0, 11,
		     "22222222-2222-4222-8222-222222222222", TBX__REF_TOKEN,
		     "dddddddd-dddd-4ddd-8ddd-dddddddddddd", 0, 0},
		    {TBX__COVER_UNTOKENED, "orders", 1, 5, "u:orders:1:5",
		     TBX__REF_NONE, "", 0, 0}};
		tbx__wire_ent_t w[2] = {{3, 0, 0}, {-1, 0, 1}};
		tbx__mfield_t f[2 * TBX__MF_COUNT] = {0};
		tbx__obatch_t row = {0};

		f[TBX__MF_ID] = FIELD("e1e1e1e1-e1e1-4e1e-8e1e-e1e1e1e1e1e1");
		f[TBX__MF_TOPIC] = FIELD("payments");
		f[TBX__MF_TYPE] = FIELD("PaymentRequested");
		f[TBX__MF_KEY] = FIELD("cust-1");
		f[TBX__MF_PAYLOAD] = FIELD("{\"order\":10}");
		cr_assert_eq(tbx__hdrs_encode(h, 2, &hdrs, &hdrs_len), TBX_OK);
		f[TBX__MF_HEADERS] = (tbx__mfield_t){hdrs, hdrs_len};
		f[TBX__MF_COUNT + TBX__MF_ID] =
		    FIELD("e2e2e2e2-e2e2-4e2e-8e2e-e2e2e2e2e2e2");
		f[TBX__MF_COUNT + TBX__MF_TOPIC] = FIELD("orders.dlq");
		f[TBX__MF_COUNT + TBX__MF_TYPE] = FIELD("OrderPlaced");
		f[TBX__MF_COUNT + TBX__MF_PAYLOAD] = FIELD("{\"order\":11}");
		tbx__strlcpy(row.row_id, ROW_1, sizeof(row.row_id));
		row.tokfmt = 1;
		row.created_ms = NOW - 2 * HOUR;
		row.stuck_ms = -1;
		insert_row(s, "orders-svc", &row, c, 3, w, f, 2);
		free(hdrs);
	}
	/* Row 2: tokened, token sets, marked stuck, one failed dispatch;
	 * its message with a header without a value. */
	{
		const tbx_header_t h[] = {{"x-none", NULL, 0}};
		void *hdrs = NULL;
		size_t hdrs_len = 0;
		tbx__cover_ent_t c[1] = {
		    {TBX__COVER_HANDLED, "orders", 1, 42,
		     "33333333-3333-4333-8333-333333333333", TBX__REF_BIT,
		     SET_2, 4, 1}};
		tbx__wire_ent_t w[1] = {{0, 7, 0}};
		tbx__mfield_t f[TBX__MF_COUNT] = {0};
		tbx__obatch_t row = {0};

		f[TBX__MF_ID] = FIELD("e3e3e3e3-e3e3-4e3e-8e3e-e3e3e3e3e3e3");
		f[TBX__MF_TOPIC] = FIELD("payments");
		f[TBX__MF_TYPE] = FIELD("PaymentRequested");
		f[TBX__MF_KEY] = FIELD("cust-3");
		f[TBX__MF_PAYLOAD] = FIELD("{\"order\":42}");
		cr_assert_eq(tbx__hdrs_encode(h, 1, &hdrs, &hdrs_len), TBX_OK);
		f[TBX__MF_HEADERS] = (tbx__mfield_t){hdrs, hdrs_len};
		f[TBX__MF_TOKEN] =
		    FIELD("f3f3f3f3-f3f3-4f3f-8f3f-f3f3f3f3f3f3");
		tbx__strlcpy(row.row_id, ROW_2, sizeof(row.row_id));
		tbx__strlcpy(row.attempt, ATT_2, sizeof(row.attempt));
		row.mint_seq = 21;
		row.tokfmt = 2;
		row.created_ms = NOW - 5 * MIN;
		row.stuck_ms = NOW - 1 * MIN;
		row.dispatch_failures = 1;
		insert_row(s, "orders-svc", &row, c, 1, w, f, 1);
		free(hdrs);
	}
	/* Row 3, of audit: its cover is cut short below. */
	{
		tbx__cover_ent_t c[1] = {
		    {TBX__COVER_HANDLED, "orders", 2, 7,
		     "44444444-4444-4444-8444-444444444444", TBX__REF_TOKEN,
		     "a4a4a4a4-a4a4-4a4a-8a4a-a4a4a4a4a4a4", 0, 0}};
		tbx__obatch_t row = {0};

		tbx__strlcpy(row.row_id, ROW_3, sizeof(row.row_id));
		row.tokfmt = 1;
		row.created_ms = NOW - 30 * SEC;
		row.stuck_ms = -1;
		insert_row(s, "audit", &row, c, 1, NULL, NULL, 0);
	}
	tbx_outbox_close(s);
	cr_assert_eq(tt_store_sql_try(e->store,
				      "UPDATE tbx_obatch SET cover = "
				      "substr(cover, 1, length(cover) - 3) "
				      "WHERE row_id = '" ROW_3 "'",
				      NULL),
		     0);
}

static void env_fini(env_t *e)
{
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->store);
	free(e->tokens);
}

/* Runs `tokenbox inspect` on the stores with @p cmd (NULL-terminated). */
static cc_result_t inspect(const env_t *e, const char *const *cmd)
{
	static char url[2][2200];
	const char *argv[64] = {"inspect"};
	size_t n = 1;

	if (tt_store_is_pg(e->store)) {
		argv[n++] = "-s";
		argv[n++] = tt_store_url(e->store, url[0], sizeof(url[0]));
		argv[n++] = "--schema";
		argv[n++] = tt_store_schema(e->store);
		argv[n++] = "-S";
		argv[n++] = tt_store_url(e->tokens, url[1], sizeof(url[1]));
		argv[n++] = "--tokens-schema";
		argv[n++] = tt_store_schema(e->tokens);
	} else {
		argv[n++] = "-s";
		argv[n++] = e->store;
		argv[n++] = "-S";
		argv[n++] = e->tokens;
	}
	for (size_t i = 0; cmd[i] && n < 63; i++)
		argv[n++] = cmd[i];
	argv[n] = NULL;
	return cc_run(argv);
}

#define INSPECT(e, ...) inspect((e), (const char *const[]){__VA_ARGS__, NULL})

static int exit_code(const cc_result_t *res)
{
	return res->status != -1 && WIFEXITED(res->status)
		   ? WEXITSTATUS(res->status)
		   : -1;
}

static char *slurp(const char *path)
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
			cr_assert(buf = realloc(buf, cap));
		}
		buf[n++] = (char)c;
	}
	fclose(f);
	if (!buf)
		cr_assert(buf = calloc(1, 1));
	buf[n] = '\0';
	return buf;
}

static void spill(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");

	cr_assert(f, "cannot write %s", path);
	fputs(text, f);
	fclose(f);
}

/* The cases: tests/data/inspect-obatch/<name>.args, one argument a
 * line. */
static int golden(const env_t *e, const char *root, const char *name,
		  int update)
{
	char path[8300], code[16];
	char *args, *line, *save = NULL, *want, *want_exit, *want_err;
	const char *argv[32];
	size_t argc = 0;
	cc_result_t res;
	int ok = 1;

	snprintf(path, sizeof(path), "%s/%s.args", root, name);
	cr_assert(args = slurp(path), "%s", path);
	for (line = strtok_r(args, "\n", &save); line && argc < 31;
	     line = strtok_r(NULL, "\n", &save))
		argv[argc++] = line;
	argv[argc] = NULL;
	res = inspect(e, argv);
	snprintf(code, sizeof(code), "%d\n", exit_code(&res));
	snprintf(path, sizeof(path), "%s/%s.out", root, name);
	if (update) {
		spill(path, res.out);
		snprintf(path, sizeof(path), "%s/%s.exit", root, name);
		spill(path, code);
		snprintf(path, sizeof(path), "%s/%s.err", root, name);
		if (*res.err)
			spill(path, res.err);
		else
			remove(path);
		snprintf(path, sizeof(path), "%s/%s.out", root, name);
	}
	want = slurp(path);
	snprintf(path, sizeof(path), "%s/%s.exit", root, name);
	want_exit = slurp(path);
	snprintf(path, sizeof(path), "%s/%s.err", root, name);
	want_err = slurp(path);
	if (!want || strcmp(want, res.out) != 0) {
		cr_expect_fail("%s: stdout differs\n--- expected\n%s--- "
			       "got\n%s(stderr: %s)",
			       name, want ? want : "(no file)\n", res.out,
			       res.err);
		ok = 0;
	}
	if (!want_exit || strcmp(want_exit, code) != 0) {
		cr_expect_fail("%s: exit %s, expected %s (stderr: %s)", name,
			       code, want_exit ? want_exit : "(no file)",
			       res.err);
		ok = 0;
	}
	if (strcmp(want_err ? want_err : "", res.err) != 0) {
		cr_expect_fail("%s: stderr differs\n--- expected\n%s--- "
			       "got\n%s",
			       name, want_err ? want_err : "(none)\n", res.err);
		ok = 0;
	}
	for (size_t i = 0; i < argc; i++)
		if (strcmp(argv[i], "--json") == 0) {
			cJSON *doc = cJSON_Parse(res.out);
			if (!doc) {
				cr_expect_fail("%s: --json does not parse",
					       name);
				ok = 0;
			}
			cJSON_Delete(doc);
		}
	free(args);
	free(want);
	free(want_exit);
	free(want_err);
	cc_result_free(&res);
	return ok;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

Test(cli_inspect_obatch, listing_and_show_match_the_golden_files,
     .timeout = 600)
{
	const char *src = getenv("TBX_SOURCE_DIR");
	const char *up = getenv("TBX_UPDATE_GOLDEN");
	int update = up && strcmp(up, "1") == 0 && !tt_pg_tier();
	char root[4096], now[32], *names[64];
	size_t cnt = 0, failed = 0;
	struct dirent *d;
	DIR *dir;
	env_t e;

	cr_assert(src, "TBX_SOURCE_DIR is not set (run through ctest)");
	snprintf(root, sizeof(root), "%s/tests/data/inspect-obatch", src);
	snprintf(now, sizeof(now), "%lld", NOW);
	setenv("TBX_INSPECT_NOW_MS", now, 1);
	env_init(&e);
	cr_assert(dir = opendir(root), "%s", root);
	while ((d = readdir(dir)) && cnt < 64) {
		size_t len = strlen(d->d_name);
		if (len > 5 && strcmp(d->d_name + len - 5, ".args") == 0)
			cr_assert(names[cnt++] = strndup(d->d_name, len - 5));
	}
	closedir(dir);
	qsort(names, cnt, sizeof(names[0]), by_name);
	cr_assert_gt(cnt, 0);
	for (size_t i = 0; i < cnt; i++) {
		failed += !golden(&e, root, names[i], update);
		free(names[i]);
	}
	cr_expect_eq(failed, 0, "%zu of %zu cases failed", failed, cnt);
	unsetenv("TBX_INSPECT_NOW_MS");
	env_fini(&e);
}

static const cJSON *member(const cJSON *o, const char *path)
{
	char buf[256], *save = NULL;

	tbx__strlcpy(buf, path, sizeof(buf));
	for (char *k = strtok_r(buf, ".", &save); k && o;
	     k = strtok_r(NULL, ".", &save))
		o = cJSON_GetObjectItemCaseSensitive(o, k);
	cr_assert(o, "no %s", path);
	return o;
}

static int64_t num(const cJSON *o, const char *path)
{
	return (int64_t)cJSON_GetNumberValue(member(o, path));
}

/* status counts the batch rows per group, and --check flags the corrupt
 * one, the one older than --older-than and the one a recovery pass
 * marked stuck -- each of them alone. */
Test(cli_inspect_obatch, status_check_flags_corrupt_old_and_stuck_batch_rows,
     .timeout = 300)
{
	char now[32];
	cc_result_t res;
	cJSON *doc;
	env_t e;

	snprintf(now, sizeof(now), "%lld", NOW);
	setenv("TBX_INSPECT_NOW_MS", now, 1);
	env_init(&e);
	res = INSPECT(&e, "--json", "status", "--check");
	cr_assert_eq(exit_code(&res), 1, "%s", res.err);
	cr_assert(doc = cJSON_Parse(res.out), "%s", res.out);
	cr_assert_eq(num(doc, "batch_rows.rows"), 3);
	cr_assert_eq(num(doc, "batch_rows.tokened"), 1);
	cr_assert_eq(num(doc, "batch_rows.stuck"), 1, "row 1, 2h old");
	cr_assert_eq(num(doc, "batch_rows.marked_stuck"), 1);
	cr_assert_eq(num(doc, "batch_rows.corrupt"), 1);
	{
		const cJSON *c = cJSON_GetArrayItem(
		    member(doc, "batch_rows.corrupt_rows"), 0);
		cr_assert_str_eq(cJSON_GetStringValue(member(c, "row_id")),
				 ROW_3);
		cr_assert_str_eq(cJSON_GetStringValue(member(c, "group")),
				 "audit");
		cr_assert(
		    strstr(cJSON_GetStringValue(member(c, "reason")), "cover"));
	}
	cJSON_Delete(doc);
	cc_result_free(&res);
	res = INSPECT(&e, "status");
	cr_assert_eq(exit_code(&res), 0, "%s", res.err);
	cr_assert(strstr(res.out, "Batch rows (outbox.layout = batch): 3 rows "
				  "pending (1 tokened)"),
		  "%s", res.out);
	cr_assert(strstr(res.out, "batch row " ROW_3 " of audit does not"),
		  "%s", res.out);
	cc_result_free(&res);

	/* Each finding alone. */
	cr_assert_eq(tt_store_sql_try(e.store,
				      "DELETE FROM tbx_obatch WHERE row_id "
				      "IN ('" ROW_1 "', '" ROW_2 "')",
				      NULL),
		     0);
	res = INSPECT(&e, "status", "--check");
	cr_assert_eq(exit_code(&res), 1, "the corrupt row: %s", res.out);
	cc_result_free(&res);
	env_fini(&e);

	env_init(&e);
	cr_assert_eq(tt_store_sql_try(e.store,
				      "DELETE FROM tbx_obatch WHERE row_id "
				      "IN ('" ROW_1 "', '" ROW_3 "')",
				      NULL),
		     0);
	res = INSPECT(&e, "status", "--check");
	cr_assert_eq(exit_code(&res), 1, "the row marked stuck: %s", res.out);
	cc_result_free(&res);
	cr_assert_eq(tt_store_sql_try(e.store,
				      "UPDATE tbx_obatch SET stuck_ms = NULL",
				      NULL),
		     0);
	res = INSPECT(&e, "status", "--check");
	cr_assert_eq(exit_code(&res), 0, "a young row: %s", res.out);
	cc_result_free(&res);
	res = INSPECT(&e, "status", "--check", "--older-than", "1m");
	cr_assert_eq(exit_code(&res), 1, "older than 1m: %s", res.out);
	cc_result_free(&res);
	env_fini(&e);
	unsetenv("TBX_INSPECT_NOW_MS");
}
