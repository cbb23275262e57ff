/*
 * Fuzz target: an outbox row and its outgoing messages as the worker and
 * `tokenbox inspect` read them back from the service store
 * (tbx_outbox_row_load() and tbx_outbox_row_check() in outbox/sqlite.c,
 * insp_row_json() and insp_row_print() in tools/inspect_rows.c).  SQLite's
 * columns take any type whatever the schema says, and the file may have
 * been written by anybody, so every column is fuzzed: NULL, an integer, a
 * text or a blob of any bytes, or a well-formed value.
 *
 * Input: the row's columns in_topic, in_partition, in_offset, in_token,
 * attempt, mint_seq, kind, error, created_ms; each value is u8 tag (mod
 * 5): 0 NULL, 1 i64, 2 text, 3 blob (u16 length and bytes), 4 the
 * column's well-formed value.  Then the messages column (store/msgs.h):
 * u8 mode (mod 3): 0 NULL; 1 a blob of any bytes (u16 length and
 * bytes); 2 u8 message count (mod 5) and per message its seven fields
 * (out_id, topic, type, key, payload, headers, token), each u8 tag (mod
 * 3): 0 NULL, 1 the field's well-formed value, 2 any bytes (u16 length
 * and bytes), encoded by the encoder.  Inserts the schema's constraints
 * refuse are skipped, as they would be in the file.
 *
 * Checked: the load never reads outside its buffers (the sanitizers); a
 * loaded row is whole (all its messages) and its texts fit their fields;
 * the JSON of `inspect outbox show --json` is a valid document, and its
 * human output holds no control character but the newline.
 */
#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "fuzz/fuzz.h"
#include "outbox/outbox.h"
#include "store/msgs.h"
#include "tools/inspect.h"

#define GRP    "g"
#define MSG_ID "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7a80"

static tbx_outbox_t *store;
static sqlite3 *db;
static sqlite3_stmt *row_ins;
static FILE *out; /* the human output, checked after each input */

static void cleanup(void)
{
	sqlite3_finalize(row_ins);
	tbx_outbox_close(store);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char dir[] = "/tmp/tbx-fuzz-row.XXXXXX", path[64], errstr[256];
	tbx__db_opts_t opts;

	tbx__log_setup(TBX_LOG_ERR - 1, "fuzz"); /* quiet */
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/service.db", dir);
	tbx__db_opts_init(&opts);
	opts.synchronous_full = 0;
	if (tbx_outbox_open(path, &opts, &store, errstr, sizeof(errstr))) {
		fprintf(stderr, "fuzz_stored_row: %s\n", errstr);
		exit(1);
	}
	db = tbx_outbox_db(store);
	/* The file is not needed once open: nothing is left behind. */
	unlink(path);
	snprintf(path, sizeof(path), "%s/service.db-wal", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/service.db-shm", dir);
	unlink(path);
	rmdir(dir);
	if (sqlite3_exec(db, "PRAGMA journal_mode=MEMORY", NULL, NULL, NULL) ||
	    sqlite3_prepare_v2(
		db,
		"INSERT INTO tbx_outbox (grp, msg_id, in_topic, in_partition, "
		"in_offset, in_token, attempt, mint_seq, kind, error, "
		"created_ms, msgs) VALUES ('" GRP "', '" MSG_ID
		"', ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
		-1, &row_ins, NULL)) {
		fprintf(stderr, "fuzz_stored_row: %s\n", sqlite3_errmsg(db));
		exit(1);
	}
	if (!(out = tmpfile()) || dup2(fileno(out), STDOUT_FILENO) < 0) {
		perror("fuzz_stored_row: stdout");
		exit(1);
	}
	atexit(cleanup);
	return 0;
}

/* Well-formed values, by kind of column. */
enum { V_TOPIC, V_INT, V_UUID, V_TEXT, V_BYTES, V_HEADERS };

static void bind_good(sqlite3_stmt *stmt, int i, int kind, int64_t n)
{
	static const unsigned char hdrs[] = {0, 2, 'a', 0, 1, 0, 0, 0, 1, 'v'};

	switch (kind) {
	case V_TOPIC:
		sqlite3_bind_text(stmt, i, "orders", -1, SQLITE_STATIC);
		break;
	case V_INT:
		sqlite3_bind_int64(stmt, i, n);
		break;
	case V_UUID:
		sqlite3_bind_text(stmt, i,
				  "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7a81", -1,
				  SQLITE_STATIC);
		break;
	case V_TEXT:
		sqlite3_bind_text(stmt, i, "reason", -1, SQLITE_STATIC);
		break;
	case V_BYTES:
		sqlite3_bind_blob(stmt, i, "k\xffy", 3, SQLITE_STATIC);
		break;
	case V_HEADERS:
		sqlite3_bind_blob(stmt, i, hdrs, sizeof(hdrs), SQLITE_STATIC);
		break;
	}
}

static void bind_value(fuzz_in_t *in, sqlite3_stmt *stmt, int i, int kind,
		       int64_t good)
{
	uint8_t tag = fuzz_u8(in) % 5;
	uint64_t v = 0;
	size_t len, n;
	const uint8_t *p;

	switch (tag) {
	case 0:
		sqlite3_bind_null(stmt, i);
		return;
	case 1:
		for (int b = 0; b < 8; b++)
			v = v << 8 | fuzz_u8(in);
		sqlite3_bind_int64(stmt, i, (int64_t)v);
		return;
	case 2:
	case 3:
		len = (size_t)fuzz_u8(in) << 8;
		len |= fuzz_u8(in);
		p = fuzz_bytes(in, len, &n);
		if (tag == 2)
			sqlite3_bind_text(stmt, i, (const char *)p, (int)n,
					  SQLITE_TRANSIENT);
		else
			sqlite3_bind_blob(stmt, i, p, (int)n, SQLITE_TRANSIENT);
		return;
	default:
		bind_good(stmt, i, kind, good);
	}
}

/*
 * The messages column: NULL, any bytes, or @p *msgs messages encoded from
 * fuzzed fields (*msgs is -1 unless the blob is well-formed by
 * construction).  @returns the blob to free after the insert.
 */
static void *bind_msgs(fuzz_in_t *in, sqlite3_stmt *stmt, int i, int *msgs)
{
	static const char *const good[TBX__MF_COUNT] = {
	    "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7a82",
	    "orders",
	    "created",
	    "k\xffy",
	    "payload",
	    "\0\2a\0\1\0\0\0\1v",
	    "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7a83"};
	static const size_t good_len[TBX__MF_COUNT] = {36, 6, 7, 3, 7, 10, 36};
	tbx__mfield_t f[4 * TBX__MF_COUNT];
	uint8_t mode = fuzz_u8(in) % 3;
	void *blob = NULL;
	size_t len, n;
	int cnt;

	*msgs = -1;
	if (mode == 0) {
		sqlite3_bind_null(stmt, i);
		return NULL;
	}
	if (mode == 1) {
		len = (size_t)fuzz_u8(in) << 8;
		len |= fuzz_u8(in);
		const uint8_t *p = fuzz_bytes(in, len, &n);
		sqlite3_bind_blob(stmt, i, p, (int)n, SQLITE_TRANSIENT);
		return NULL;
	}
	cnt = fuzz_u8(in) % 5;
	for (int m = 0; m < cnt; m++)
		for (int k = 0; k < TBX__MF_COUNT; k++) {
			tbx__mfield_t *g = &f[m * TBX__MF_COUNT + k];
			uint8_t tag = fuzz_u8(in) % 3;

			g->p = NULL;
			g->len = 0;
			if (tag == 1) {
				g->p = good[k];
				g->len = good_len[k];
			} else if (tag == 2) {
				len = (size_t)fuzz_u8(in) << 8;
				len |= fuzz_u8(in);
				g->p = fuzz_bytes(in, len, &g->len);
				if (!g->p)
					g->p = "";
			}
		}
	FUZZ_CHECK(tbx__msgs_encode(f, (size_t)cnt, &blob, &len) == TBX_OK);
	sqlite3_bind_blob(stmt, i, blob, (int)len, SQLITE_STATIC);
	*msgs = cnt;
	return blob;
}

static int step_insert(sqlite3_stmt *stmt)
{
	int rc = sqlite3_step(stmt);

	sqlite3_reset(stmt);
	sqlite3_clear_bindings(stmt);
	FUZZ_CHECK(rc == SQLITE_DONE || (rc & 0xff) == SQLITE_CONSTRAINT);
	return rc == SQLITE_DONE;
}

static int fits(const char *s, size_t size)
{
	return memchr(s, '\0', size) != NULL;
}

/* The human output of the row: text, no control character but '\n'. */
static void check_printed(void)
{
	long size;

	fflush(stdout);
	size = ftell(out);
	FUZZ_CHECK(size >= 0);
	rewind(out);
	for (long i = 0; i < size; i++) {
		int c = fgetc(out);
		FUZZ_CHECK(c != EOF);
		FUZZ_CHECK(c == '\n' || (c >= 0x20 && c != 0x7f));
	}
	rewind(out);
	FUZZ_CHECK(ftruncate(fileno(out), 0) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in_t in = {data, size};
	insp_opts_t opts = {.older_ms = -1};
	insp_t insp = {.o = &opts, .now_ms = 1750000000000};
	tbx__row_t row;
	void *blob;
	int msgs, err, stored;

	FUZZ_CHECK(sqlite3_exec(db, "DELETE FROM tbx_outbox", NULL, NULL,
				NULL) == SQLITE_OK);
	bind_value(&in, row_ins, 1, V_TOPIC, 0);
	bind_value(&in, row_ins, 2, V_INT, 0);
	bind_value(&in, row_ins, 3, V_INT, 42);
	bind_value(&in, row_ins, 4, V_UUID, 0);
	bind_value(&in, row_ins, 5, V_UUID, 0);
	bind_value(&in, row_ins, 6, V_INT, 7);
	bind_value(&in, row_ins, 7, V_INT, 0);
	bind_value(&in, row_ins, 8, V_TEXT, 0);
	bind_value(&in, row_ins, 9, V_INT, 1740000000000);
	blob = bind_msgs(&in, row_ins, 10, &msgs);
	stored = step_insert(row_ins);
	free(blob);
	if (!stored)
		return 0;

	tbx__row_init(&row);
	err = tbx_outbox_row_load(store, GRP, MSG_ID, &row);
	FUZZ_CHECK(err == TBX_OK || err == TBX_ESTORE);
	if (err) {
		FUZZ_CHECK(row.msg_cnt == 0 && row.msgs == NULL);
		return 0;
	}
	FUZZ_CHECK(strcmp(row.msg_id, MSG_ID) == 0);
	FUZZ_CHECK(msgs < 0 || row.msg_cnt == (size_t)msgs);
	FUZZ_CHECK(fits(row.in_topic, sizeof(row.in_topic)) &&
		   fits(row.in_token, sizeof(row.in_token)) &&
		   fits(row.attempt, sizeof(row.attempt)));
	for (size_t i = 0; i < row.msg_cnt; i++) {
		const tbx__outmsg_t *m = &row.msgs[i];
		FUZZ_CHECK(fits(m->id, sizeof(m->id)) &&
			   fits(m->token, sizeof(m->token)));
		FUZZ_CHECK(m->topic && m->type);
		FUZZ_CHECK(m->key || !m->key_len);
		FUZZ_CHECK(m->payload || !m->payload_len);
		FUZZ_CHECK(m->headers || !m->headers_len);
	}
	(void)tbx_outbox_row_check(&row);

	cJSON *doc = insp_row_json(&insp, GRP, &row, (int64_t)row.msg_cnt, 1);
	FUZZ_CHECK(doc);
	char *text = cJSON_PrintUnformatted(doc);
	FUZZ_CHECK(text);
	cJSON *back = cJSON_Parse(text);
	FUZZ_CHECK(back);
	cJSON_Delete(back);
	free(text);
	cJSON_Delete(doc);

	insp_row_print(&insp, GRP, &row);
	check_printed();
	tbx__row_clear(&row);
	return 0;
}
