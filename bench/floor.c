/*
 * tbx_floor: the store operations a consumer must do per record, and
 * nothing else: no Kafka, no tokenbox.  It is the floor against which
 * bench/profile sets tokenbox's instructions per record (see
 * docs/performance.md, "The floor").
 *
 * One SQLite file per variant, WAL and synchronous=FULL as every store
 * of the benchmark, one write transaction per batch (500 records, as
 * tokenbox's batch.max.messages), a savepoint per record as tokenbox
 * takes, and time-ordered 16-byte keys (the layout of a version 7 UUID):
 *
 *   plain  the business row (the benchmark's bench_rows insert)
 *   inbox  INSERT OR IGNORE of the record's id into a processed-id table
 *          (the lookup and the insert in one statement; a duplicate
 *          stops there), then the business row
 *   outbox the inbox contender's of bench/contenders.c: the inbox's and
 *          the outbox row in; the outbox row out in a second transaction
 *   token  the token protocol's: look the record's outbox row up (none),
 *          check its token (there), the business row, one minted token,
 *          the outbox row in (its one outgoing message inside it); then,
 *          in a second transaction per batch, the record's token and the
 *          outbox row out
 *   token-sets  the batched design of docs/batched-tokens.md ("Store
 *          work per batch, counted"): per batch a check per incoming
 *          token set, the bits tested in memory, the business row in a
 *          savepoint per record, a set minted per destination partition
 *          and one outbox row for the batch; then, per incoming set, one
 *          UPDATE clearing the batch's bits and one DELETE of the empty
 *          set, and the outbox row out (floor_tsets_a and _e)
 *
 * Each variant runs in functions of its own (floor_plain, floor_inbox,
 * floor_outbox_a and _e, floor_token_a and _e), so that callgrind's inclusive
 * cost of it is that variant's instructions; bench/profile divides them by the
 * records.  The incoming tokens are inserted before the clock starts:
 * the sender mints them, not the consumer.
 *
 * With --store-url the variants run against a PostgreSQL server instead,
 * counted in round trips (bench/floor_pg.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/floor.h"
#include "store/msgs.h"
#include "tokenbox/tokenbox.h"

static const char usage_text[] =
    "Usage: tbx_floor [--records N] [--batch N] [--variants LIST] [--dir DIR]\n"
    "       tbx_floor --store-url URL [--records N] [--batch N]\n"
    "                 [--variants LIST] [--rounds N]\n"
    "\n"
    "Times the store operations a consumer must do per record, alone: one\n"
    "SQLite file per variant (WAL, synchronous=FULL), one transaction per\n"
    "batch, a savepoint per record, time-ordered 16-byte keys.\n"
    "  plain  the business row\n"
    "  inbox  INSERT OR IGNORE of the id into a processed-id table, the row\n"
    "  outbox inbox, then the outbox row in; the outbox row out in a second\n"
    "         transaction per batch (the benchmark's inbox contender)\n"
    "  token  outbox lookup, token check, the row, one minted token, the\n"
    "         outbox row in; then the token and the outbox row out in a\n"
    "         second transaction per batch\n"
    "  token-sets  the batched design (docs/batched-tokens.md): per batch\n"
    "         one check per incoming token set (12), the bits tested in\n"
    "         memory, per record the savepoint and the row, one set minted\n"
    "         per destination partition (6) with a bitmap, one outbox row\n"
    "         holding the batch's messages (store/msgs.h), cover and wire;\n"
    "         then one UPDATE clearing bits and one DELETE per incoming\n"
    "         set, and the outbox row out, in a second transaction; it\n"
    "         prints the rows it leaves and fails unless they are right\n"
    "         (SQLite only)\n"
    "\n"
    "With --store-url the variants run against that PostgreSQL server\n"
    "instead, each in a schema of its own (dropped afterwards),\n"
    "synchronous_commit on, and are counted in round trips: the lookups,\n"
    "checks and deletes take one statement per batch (= ANY, unnest), the\n"
    "business row one per record, token a savepoint per record and one\n"
    "statement for its minted token and outbox row; token-batched (only\n"
    "there) is token without the savepoints, its tokens and outbox rows in\n"
    "one statement per batch; token-per-record (only there) is token with\n"
    "a statement per record for each lookup, check, insert and delete, and\n"
    "its savepoint taken and released by statements of their own, as the\n"
    "store interface's calls per record make them (see bench/floor_pg.c).\n"
    "\n"
    "Options:\n"
    "  --records N      records per variant, 500..10000000 (default 20000)\n"
    "  --batch N        records per transaction, 1..100000 (default 500,\n"
    "                   tokenbox's batch.max.messages)\n"
    "  --variants LIST  comma-separated subset of plain, inbox, outbox,\n"
    "                   token, token-batched, token-per-record,\n"
    "                   token-sets (default: all that the store runs)\n"
    "  --dir DIR        where the store files go (default: a new directory\n"
    "                   under $TMPDIR or /tmp, removed afterwards)\n"
    "  --store-url URL  a PostgreSQL server (a libpq URL or key=value\n"
    "                   string; printed without its password)\n"
    "  --rounds N       PostgreSQL: the variants run N times, interleaved;\n"
    "                   the times printed are medians, 1..50 (default 3)\n"
    "  -h, --help       show this help\n"
    "\n"
    "Prints one line per variant: its name, microseconds per record (wall\n"
    "clock, fsyncs included) and CPU microseconds per record (user and\n"
    "system time: no waiting for the disk); on PostgreSQL first the round\n"
    "trips per record, in all and in each of the two transactions (A: the\n"
    "records'; E: the deletes after delivery).  Under callgrind the\n"
    "instructions per record are the inclusive cost of floor_<variant>\n"
    "(outbox, token: floor_<variant>_a and _e; token-sets: floor_tsets_a\n"
    "and _e) divided by the records;\n"
    "bench/profile prints them.\n"
    "Exit status: 0 on success, 1 when a store operation failed, 2 for a\n"
    "bad command line.\n";

typedef struct floor_db {
	sqlite3 *db;
	sqlite3_stmt *begin, *commit, *savepoint, *release;
	sqlite3_stmt *row, *inbox;
	sqlite3_stmt *ob_find, *tok_check, *tok_mint, *ob_insert;
	sqlite3_stmt *tok_consume, *ob_delete;
	/* token-sets */
	sqlite3_stmt *ts_check, *ts_mint, *ts_clear, *ts_drop;
	sqlite3_stmt *obb_insert, *obb_delete;
} floor_db_t;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tbx_floor: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* xorshift64*: the same keys every run, so that instruction counts
 * repeat. */
static uint64_t rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

/* A version 7 UUID's layout: 48 bits of milliseconds, then random
 * bits.  @p ms advances with the record number: keys of a batch are
 * close, as tokenbox's are. */
static void key_v7(unsigned char k[KEY_LEN], uint64_t ms)
{
	uint64_t a = rng(), b = rng();

	for (int i = 0; i < 6; i++)
		k[i] = (unsigned char)(ms >> (40 - 8 * i));
	k[6] = (unsigned char)(0x70 | (a & 0x0f));
	k[7] = (unsigned char)(a >> 8);
	k[8] = (unsigned char)(0x80 | ((a >> 16) & 0x3f));
	for (int i = 9; i < KEY_LEN; i++, b >>= 8)
		k[i] = (unsigned char)b;
}

static void key_text(const unsigned char k[KEY_LEN], char out[37])
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (int i = 0; i < KEY_LEN; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[k[i] >> 4];
		out[o++] = hex[k[i] & 15];
	}
	out[o] = '\0';
}

static int64_t now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int exec_sql(sqlite3 *db, const char *sql)
{
	char *err = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		fail("%s: %s", sql, err ? err : sqlite3_errmsg(db));
		sqlite3_free(err);
		return 1;
	}
	return 0;
}

static int prep(sqlite3 *db, const char *sql, sqlite3_stmt **stmt)
{
	if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, stmt,
			       NULL) != SQLITE_OK)
		return fail("prepare %s: %s", sql, sqlite3_errmsg(db));
	return 0;
}

/* Steps a statement that returns no row (or, with @p row, may return
 * one: *row receives whether it did), then resets it. */
static int run(sqlite3 *db, sqlite3_stmt *stmt, int *row)
{
	int rc = sqlite3_step(stmt);

	if (row)
		*row = rc == SQLITE_ROW;
	sqlite3_reset(stmt);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return fail("%s: %s", sqlite3_sql(stmt), sqlite3_errmsg(db));
	return 0;
}

/* tbx_bits_clear(bits, mask): bits & ~mask, as docs/batched-tokens.md
 * has the backend register it (deterministic; mask may be shorter). */
static void fn_bits_clear(sqlite3_context *ctx, int argc, sqlite3_value **v)
{
	const unsigned char *b = sqlite3_value_blob(v[0]);
	int n = sqlite3_value_bytes(v[0]);
	const unsigned char *m = sqlite3_value_blob(v[1]);
	int mn = sqlite3_value_bytes(v[1]);
	unsigned char *out;

	(void)argc;
	if (!b || n <= 0) {
		sqlite3_result_null(ctx);
		return;
	}
	if (!(out = sqlite3_malloc(n))) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	for (int i = 0; i < n; i++)
		out[i] = (unsigned char)(b[i] & ~(i < mn && m ? m[i] : 0));
	sqlite3_result_blob(ctx, out, n, sqlite3_free);
}

/* tbx_bits_none(bits): 1 when no bit is set. */
static void fn_bits_none(sqlite3_context *ctx, int argc, sqlite3_value **v)
{
	const unsigned char *b = sqlite3_value_blob(v[0]);
	int n = sqlite3_value_bytes(v[0]), any = 0;

	(void)argc;
	for (int i = 0; b && i < n && !any; i++)
		any = b[i] != 0;
	sqlite3_result_int(ctx, !any);
}

static int bits_register(sqlite3 *db)
{
	int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC;

	if (sqlite3_create_function(db, "tbx_bits_clear", 2, flags, NULL,
				    fn_bits_clear, NULL, NULL) != SQLITE_OK ||
	    sqlite3_create_function(db, "tbx_bits_none", 1, flags, NULL,
				    fn_bits_none, NULL, NULL) != SQLITE_OK)
		return fail("register the bit functions: %s",
			    sqlite3_errmsg(db));
	return 0;
}

static void floor_close(floor_db_t *f)
{
	sqlite3_stmt **all[] = {&f->begin,     &f->commit,	&f->savepoint,
				&f->release,   &f->row,		&f->inbox,
				&f->ob_find,   &f->tok_check,	&f->tok_mint,
				&f->ob_insert, &f->tok_consume, &f->ob_delete,
				&f->ts_check,  &f->ts_mint,	&f->ts_clear,
				&f->ts_drop,   &f->obb_insert,	&f->obb_delete};

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		sqlite3_finalize(*all[i]);
		*all[i] = NULL;
	}
	sqlite3_close(f->db);
	f->db = NULL;
}

/* The schema: the benchmark's business table (the same row every
 * contender writes), a processed-id table, and a token table and an
 * outbox of 16-byte keys, the outgoing message inside the row. */
static int floor_open(floor_db_t *f, const char *path)
{
	memset(f, 0, sizeof(*f));
	if (sqlite3_open_v2(path, &f->db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
			    NULL) != SQLITE_OK)
		return fail("open %s: %s", path,
			    f->db ? sqlite3_errmsg(f->db) : "out of memory");
	if (exec_sql(
		f->db,
		"PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
		"CREATE TABLE bench_rows (id INTEGER PRIMARY KEY, "
		"msg_id TEXT NOT NULL, part INTEGER, off INTEGER, "
		"payload BLOB);"
		"CREATE TABLE inbox (id BLOB PRIMARY KEY) WITHOUT ROWID;"
		"CREATE TABLE tokens (token BLOB PRIMARY KEY, "
		"grp INTEGER NOT NULL) WITHOUT ROWID;"
		"CREATE TABLE outbox (id BLOB PRIMARY KEY, in_token BLOB, "
		"out_id BLOB, out_token BLOB, topic TEXT, payload BLOB) "
		"WITHOUT ROWID;"
		/* token-sets: docs/batched-tokens.md's tbx_tset and
		   tbx_obatch */
		"CREATE TABLE tset (set_id BLOB, grp INTEGER, topic TEXT, "
		"part INTEGER, mint_seq INTEGER, nbits INTEGER, bits BLOB, "
		"created_ms INTEGER, PRIMARY KEY (set_id, grp)) "
		"WITHOUT ROWID;"
		"CREATE TABLE obatch (grp INTEGER, row_id BLOB, attempt "
		"BLOB, mint_seq INTEGER, created_ms INTEGER, cover BLOB, "
		"msgs BLOB, wire BLOB, PRIMARY KEY (grp, row_id)) "
		"WITHOUT ROWID;") ||
	    bits_register(f->db) || prep(f->db, "BEGIN IMMEDIATE", &f->begin) ||
	    prep(f->db, "COMMIT", &f->commit) ||
	    prep(f->db, "SAVEPOINT r", &f->savepoint) ||
	    prep(f->db, "RELEASE r", &f->release) ||
	    prep(f->db,
		 "INSERT INTO bench_rows (msg_id, part, off, payload) "
		 "VALUES (?, ?, ?, ?)",
		 &f->row) ||
	    prep(f->db, "INSERT OR IGNORE INTO inbox (id) VALUES (?)",
		 &f->inbox) ||
	    prep(f->db, "SELECT 1 FROM outbox WHERE id = ?", &f->ob_find) ||
	    prep(f->db, "SELECT 1 FROM tokens WHERE token = ? AND grp = ?",
		 &f->tok_check) ||
	    prep(f->db, "INSERT INTO tokens (token, grp) VALUES (?, ?)",
		 &f->tok_mint) ||
	    prep(f->db,
		 "INSERT INTO outbox (id, in_token, out_id, out_token, topic, "
		 "payload) VALUES (?, ?, ?, ?, ?, ?)",
		 &f->ob_insert) ||
	    prep(f->db, "DELETE FROM tokens WHERE token = ? AND grp = ?",
		 &f->tok_consume) ||
	    prep(f->db, "DELETE FROM outbox WHERE id = ?", &f->ob_delete) ||
	    prep(f->db,
		 "SELECT nbits, bits FROM tset WHERE set_id = ? AND grp = ?",
		 &f->ts_check) ||
	    prep(f->db,
		 "INSERT INTO tset (set_id, grp, topic, part, mint_seq, nbits, "
		 "bits, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		 &f->ts_mint) ||
	    prep(f->db,
		 "UPDATE tset SET bits = tbx_bits_clear(bits, ?) "
		 "WHERE set_id = ? AND grp = ?",
		 &f->ts_clear) ||
	    prep(f->db,
		 "DELETE FROM tset WHERE set_id = ? AND grp = ? "
		 "AND tbx_bits_none(bits)",
		 &f->ts_drop) ||
	    prep(f->db,
		 "INSERT INTO obatch (grp, row_id, attempt, mint_seq, "
		 "created_ms, cover, msgs, wire) VALUES (?, ?, ?, ?, ?, ?, ?, "
		 "?)",
		 &f->obb_insert) ||
	    prep(f->db, "DELETE FROM obatch WHERE grp = ? AND row_id = ?",
		 &f->obb_delete)) {
		floor_close(f);
		return 1;
	}
	return 0;
}

static const unsigned char payload[PAYLOAD_LEN];

#define GRP_SELF 1 /* this consumer's group */
#define GRP_NEXT 2 /* the group subscribed to its output */
#define STMT	 __attribute__((noinline)) static int

/* One function per statement: callgrind's inclusive cost of st_NAME is
 * that statement's (bind, step, reset), whatever the variant. */
STMT st_begin(floor_db_t *f)
{
	return run(f->db, f->begin, NULL);
}
STMT st_commit(floor_db_t *f)
{
	return run(f->db, f->commit, NULL);
}
STMT st_savepoint(floor_db_t *f)
{
	return run(f->db, f->savepoint, NULL);
}
STMT st_release(floor_db_t *f)
{
	return run(f->db, f->release, NULL);
}

/* The business row, as the benchmark's handlers write it. */
STMT st_row(floor_db_t *f, const rec_t *r, long i)
{
	sqlite3_bind_text(f->row, 1, r->id_text, 36, SQLITE_STATIC);
	sqlite3_bind_int(f->row, 2, (int)(i % 8));
	sqlite3_bind_int64(f->row, 3, i / 8);
	sqlite3_bind_blob(f->row, 4, payload, PAYLOAD_LEN, SQLITE_STATIC);
	return run(f->db, f->row, NULL);
}

STMT st_inbox(floor_db_t *f, const rec_t *r)
{
	sqlite3_bind_blob(f->inbox, 1, r->id, KEY_LEN, SQLITE_STATIC);
	if (run(f->db, f->inbox, NULL))
		return 1;
	if (sqlite3_changes(f->db) == 0)
		return fail("a duplicate id in the inbox");
	return 0;
}

STMT st_ob_find(floor_db_t *f, const rec_t *r)
{
	int found;

	sqlite3_bind_blob(f->ob_find, 1, r->id, KEY_LEN, SQLITE_STATIC);
	if (run(f->db, f->ob_find, &found))
		return 1;
	return found ? fail("an outbox row before its record") : 0;
}

STMT st_tok_check(floor_db_t *f, const rec_t *r)
{
	int found;

	sqlite3_bind_blob(f->tok_check, 1, r->tok, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_int(f->tok_check, 2, GRP_SELF);
	if (run(f->db, f->tok_check, &found))
		return 1;
	return found ? 0 : fail("a record without its token");
}

STMT st_tok_mint(floor_db_t *f, const unsigned char *token, int grp)
{
	sqlite3_bind_blob(f->tok_mint, 1, token, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_int(f->tok_mint, 2, grp);
	return run(f->db, f->tok_mint, NULL);
}

STMT st_ob_insert(floor_db_t *f, const rec_t *r)
{
	sqlite3_bind_blob(f->ob_insert, 1, r->id, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_blob(f->ob_insert, 2, r->tok, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_blob(f->ob_insert, 3, r->out, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_blob(f->ob_insert, 4, r->mint, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_text(f->ob_insert, 5, "bench-out", -1, SQLITE_STATIC);
	sqlite3_bind_blob(f->ob_insert, 6, payload, PAYLOAD_LEN, SQLITE_STATIC);
	return run(f->db, f->ob_insert, NULL);
}

STMT st_tok_consume(floor_db_t *f, const rec_t *r)
{
	sqlite3_bind_blob(f->tok_consume, 1, r->tok, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_int(f->tok_consume, 2, GRP_SELF);
	if (run(f->db, f->tok_consume, NULL))
		return 1;
	return sqlite3_changes(f->db) == 1 ? 0 : fail("a token consumed twice");
}

STMT st_ob_delete(floor_db_t *f, const rec_t *r)
{
	sqlite3_bind_blob(f->ob_delete, 1, r->id, KEY_LEN, SQLITE_STATIC);
	return run(f->db, f->ob_delete, NULL);
}

/* The variants, one transaction of a batch each. */
STMT floor_plain(floor_db_t *f, const rec_t *recs, long first, long n)
{
	if (st_begin(f))
		return 1;
	for (long i = first; i < first + n; i++)
		if (st_savepoint(f) || st_row(f, &recs[i], i) || st_release(f))
			return 1;
	return st_commit(f);
}

STMT floor_inbox(floor_db_t *f, const rec_t *recs, long first, long n)
{
	if (st_begin(f))
		return 1;
	for (long i = first; i < first + n; i++)
		if (st_savepoint(f) || st_inbox(f, &recs[i]) ||
		    st_row(f, &recs[i], i) || st_release(f))
			return 1;
	return st_commit(f);
}

/* The inbox contender's: the inbox's statements and the outbox row in,
 * then the outbox row out. */
STMT floor_outbox_a(floor_db_t *f, const rec_t *recs, long first, long n)
{
	if (st_begin(f))
		return 1;
	for (long i = first; i < first + n; i++)
		if (st_savepoint(f) || st_inbox(f, &recs[i]) ||
		    st_row(f, &recs[i], i) || st_ob_insert(f, &recs[i]) ||
		    st_release(f))
			return 1;
	return st_commit(f);
}

STMT floor_outbox_e(floor_db_t *f, const rec_t *recs, long first, long n)
{
	if (st_begin(f))
		return 1;
	for (long i = first; i < first + n; i++)
		if (st_ob_delete(f, &recs[i]))
			return 1;
	return st_commit(f);
}

/* The token protocol's first transaction of a batch (tokenbox's A). */
STMT floor_token_a(floor_db_t *f, const rec_t *recs, long first, long n)
{
	if (st_begin(f))
		return 1;
	for (long i = first; i < first + n; i++)
		if (st_savepoint(f) || st_ob_find(f, &recs[i]) ||
		    st_tok_check(f, &recs[i]) || st_row(f, &recs[i], i) ||
		    st_tok_mint(f, recs[i].mint, GRP_NEXT) ||
		    st_ob_insert(f, &recs[i]) || st_release(f))
			return 1;
	return st_commit(f);
}

/* Its second, after delivery (tokenbox's D+E): the record's token and
 * its outbox row out. */
STMT floor_token_e(floor_db_t *f, const rec_t *recs, long first, long n)
{
	if (st_begin(f))
		return 1;
	for (long i = first; i < first + n; i++)
		if (st_tok_consume(f, &recs[i]) || st_ob_delete(f, &recs[i]))
			return 1;
	return st_commit(f);
}

/* ---- token-sets: docs/batched-tokens.md's store work per batch ----
 *
 * A batch's records carry tokens from TS_U incoming sets (record j of
 * the batch: set j % TS_U, bit j / TS_U; an upstream attempt's set per
 * partition, two attempts over six partitions); each queues one message,
 * to destination partition j % TS_Q (bit j / TS_Q of the set minted for
 * it).  A: one check per incoming set, the bits tested in memory; per
 * record the savepoint, the business row, the message and its cover and
 * wire entries appended in memory; one set minted per destination
 * partition for the next group; one outbox row for the batch (msgs in
 * store/msgs.h's encoding, cover, wire).  D+E: one UPDATE clearing the
 * batch's bits per incoming set, one DELETE of it once empty, the outbox
 * row out.  The joined path (sets minted in A), as token's floor. */
#define TS_U 12 /* incoming sets of a batch */
#define TS_Q 6	/* destination partitions */

typedef struct tsets {
	long batch, nb;			/* records a batch, batches */
	unsigned char (*in)[KEY_LEN];	/* nb × TS_U incoming set ids */
	char (*in_text)[37];		/* and as text (the cover's ref) */
	unsigned char (*mint)[KEY_LEN]; /* nb × TS_Q minted set ids */
	char (*mint_text)[37];
	unsigned char (*row)[KEY_LEN]; /* nb outbox row ids */
	unsigned char (*att)[KEY_LEN]; /* nb attempts */
	size_t bytes;		       /* of a bitmap of a batch's set */
	unsigned char *got;	       /* TS_U fetched bitmaps */
	unsigned char *mask;	       /* a bitmap to set or clear */
	tbx__mfield_t *fields;	       /* batch × TBX__MF_COUNT */
	unsigned char *cover, *wire;   /* the row's, in memory */
	size_t cover_len, wire_len;
} tsets_t;

/* Bits of set @p k of @p sets among @p cnt records (record j in set
 * j % sets). */
static long ts_nbits(long cnt, long k, long sets)
{
	return k < cnt ? (cnt - k + sets - 1) / sets : 0;
}

static void ts_free(tsets_t *ts)
{
	free(ts->in);
	free(ts->in_text);
	free(ts->mint);
	free(ts->mint_text);
	free(ts->row);
	free(ts->att);
	free(ts->got);
	free(ts->mask);
	free(ts->fields);
	free(ts->cover);
	free(ts->wire);
	memset(ts, 0, sizeof(*ts));
}

/* The ids the senders and this consumer make, before the clock: they
 * are UUIDs in tokenbox, made the same way in every variant. */
static int ts_init(tsets_t *ts, long n, long batch)
{
	uint64_t ms0 = 1764000000000ull;
	memset(ts, 0, sizeof(*ts));
	ts->batch = batch;
	ts->nb = (n + batch - 1) / batch;
	ts->bytes = (size_t)((batch + 7) / 8);
	ts->in = calloc((size_t)(ts->nb * TS_U), KEY_LEN);
	ts->in_text = calloc((size_t)(ts->nb * TS_U), 37);
	ts->mint = calloc((size_t)(ts->nb * TS_Q), KEY_LEN);
	ts->mint_text = calloc((size_t)(ts->nb * TS_Q), 37);
	ts->row = calloc((size_t)ts->nb, KEY_LEN);
	ts->att = calloc((size_t)ts->nb, KEY_LEN);
	ts->got = calloc(TS_U, ts->bytes);
	ts->mask = calloc(1, ts->bytes);
	ts->fields = calloc((size_t)batch * TBX__MF_COUNT, sizeof(*ts->fields));
	/* cover: ≤ 1 + 4 + 8 + 4 + 8 + 4 + 36 + 1 + 4 + 36 + 2 a record;
	 * wire: 5 + 10 a message */
	ts->cover = malloc((size_t)batch * 128);
	ts->wire = malloc(5 + (size_t)batch * 10);
	if (!ts->in || !ts->in_text || !ts->mint || !ts->mint_text ||
	    !ts->row || !ts->att || !ts->got || !ts->mask || !ts->fields ||
	    !ts->cover || !ts->wire) {
		ts_free(ts);
		return fail("out of memory for the token sets");
	}
	for (long b = 0; b < ts->nb; b++) {
		uint64_t ms = ms0 + (uint64_t)(b * batch) / 50;

		for (int u = 0; u < TS_U; u++) {
			key_v7(ts->in[b * TS_U + u], ms);
			key_text(ts->in[b * TS_U + u],
				 ts->in_text[b * TS_U + u]);
		}
		for (int q = 0; q < TS_Q; q++) {
			key_v7(ts->mint[b * TS_Q + q], ms + 3600000);
			key_text(ts->mint[b * TS_Q + q],
				 ts->mint_text[b * TS_Q + q]);
		}
		key_v7(ts->row[b], ms + 3600000);
		key_v7(ts->att[b], ms + 3600000);
	}
	return 0;
}

static void put_u8(unsigned char **p, unsigned v)
{
	*(*p)++ = (unsigned char)v;
}
static void put_be(unsigned char **p, uint64_t v, int bytes)
{
	for (int i = bytes - 1; i >= 0; i--)
		*(*p)++ = (unsigned char)(v >> (8 * i));
}
static void put_str(unsigned char **p, const char *s, size_t len)
{
	put_be(p, len, 4);
	memcpy(*p, s, len);
	*p += len;
}

/* A set's bitmap with bits 0..nbits-1 set, in ts->mask. */
static void ts_all_set(tsets_t *ts, long nbits)
{
	memset(ts->mask, 0, ts->bytes);
	for (long i = 0; i < nbits; i++)
		ts->mask[i / 8] |= (unsigned char)(1u << (i % 8));
}

/* One token-set row: the senders' (before the clock) or this batch's
 * mint. */
static int ts_insert(floor_db_t *f, const unsigned char *id, int grp, int part,
		     long nbits, const unsigned char *bits, size_t bytes)
{
	sqlite3_stmt *st = f->ts_mint;

	sqlite3_bind_blob(st, 1, id, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_int(st, 2, grp);
	sqlite3_bind_text(st, 3, grp == GRP_SELF ? "bench-in" : "bench-out", -1,
			  SQLITE_STATIC);
	sqlite3_bind_int(st, 4, part);
	sqlite3_bind_int64(st, 5, 1);
	sqlite3_bind_int64(st, 6, nbits);
	sqlite3_bind_blob(st, 7, bits, (int)bytes, SQLITE_STATIC);
	sqlite3_bind_int64(st, 8, 1764000000000ll);
	return run(f->db, st, NULL);
}

STMT st_ts_check(floor_db_t *f, tsets_t *ts, const unsigned char *id, int u,
		 long nbits)
{
	int rc = 0;

	sqlite3_bind_blob(f->ts_check, 1, id, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_int(f->ts_check, 2, GRP_SELF);
	if (sqlite3_step(f->ts_check) != SQLITE_ROW) {
		rc = fail("an incoming token set is missing");
	} else {
		const void *b = sqlite3_column_blob(f->ts_check, 1);
		size_t len = (size_t)sqlite3_column_bytes(f->ts_check, 1);

		if (sqlite3_column_int64(f->ts_check, 0) != nbits ||
		    len != (size_t)(nbits + 7) / 8 || !b)
			rc = fail("an incoming token set of the wrong size");
		else
			memcpy(ts->got + (size_t)u * ts->bytes, b, len);
	}
	sqlite3_reset(f->ts_check);
	return rc;
}

STMT st_ts_mint(floor_db_t *f, tsets_t *ts, const unsigned char *id, int part,
		long nbits)
{
	ts_all_set(ts, nbits);
	return ts_insert(f, id, GRP_NEXT, part, nbits, ts->mask,
			 (size_t)(nbits + 7) / 8);
}

STMT st_obb_insert(floor_db_t *f, tsets_t *ts, long b, const void *msgs,
		   size_t msgs_len)
{
	sqlite3_stmt *st = f->obb_insert;

	sqlite3_bind_int(st, 1, GRP_SELF);
	sqlite3_bind_blob(st, 2, ts->row[b], KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_blob(st, 3, ts->att[b], KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, 1);
	sqlite3_bind_int64(st, 5, 1764000000000ll);
	sqlite3_bind_blob(st, 6, ts->cover, (int)ts->cover_len, SQLITE_STATIC);
	sqlite3_bind_blob(st, 7, msgs, (int)msgs_len, SQLITE_STATIC);
	sqlite3_bind_blob(st, 8, ts->wire, (int)ts->wire_len, SQLITE_STATIC);
	return run(f->db, st, NULL);
}

STMT st_ts_clear(floor_db_t *f, tsets_t *ts, const unsigned char *id,
		 long nbits)
{
	sqlite3_bind_blob(f->ts_clear, 1, ts->mask, (int)(nbits + 7) / 8,
			  SQLITE_STATIC);
	sqlite3_bind_blob(f->ts_clear, 2, id, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_int(f->ts_clear, 3, GRP_SELF);
	if (run(f->db, f->ts_clear, NULL))
		return 1;
	return sqlite3_changes(f->db) == 1 ? 0
					   : fail("a token set cleared twice");
}

STMT st_ts_drop(floor_db_t *f, const unsigned char *id)
{
	sqlite3_bind_blob(f->ts_drop, 1, id, KEY_LEN, SQLITE_STATIC);
	sqlite3_bind_int(f->ts_drop, 2, GRP_SELF);
	if (run(f->db, f->ts_drop, NULL))
		return 1;
	/* Every set of the floor is consumed by one batch: it is empty. */
	return sqlite3_changes(f->db) == 1
		   ? 0
		   : fail("a token set not empty after its batch");
}

STMT st_obb_delete(floor_db_t *f, tsets_t *ts, long b)
{
	sqlite3_bind_int(f->obb_delete, 1, GRP_SELF);
	sqlite3_bind_blob(f->obb_delete, 2, ts->row[b], KEY_LEN, SQLITE_STATIC);
	if (run(f->db, f->obb_delete, NULL))
		return 1;
	return sqlite3_changes(f->db) == 1 ? 0 : fail("an outbox row missing");
}

/* A record's message and its cover and wire entries, appended to the
 * batch's row in memory. */
__attribute__((noinline)) static void ts_append(tsets_t *ts, const rec_t *r,
						long i, long j, long b)
{
	tbx__mfield_t *m = &ts->fields[j * TBX__MF_COUNT];
	unsigned char *c = ts->cover + ts->cover_len,
		      *w = ts->wire + ts->wire_len;
	long u = j % TS_U;

	m[TBX__MF_ID] = (tbx__mfield_t){r->out_text, 36};
	m[TBX__MF_TOPIC] = (tbx__mfield_t){"bench-out", 9};
	m[TBX__MF_TYPE] = (tbx__mfield_t){NULL, 0};
	m[TBX__MF_KEY] = (tbx__mfield_t){NULL, 0};
	m[TBX__MF_PAYLOAD] = (tbx__mfield_t){payload, PAYLOAD_LEN};
	m[TBX__MF_HEADERS] = (tbx__mfield_t){NULL, 0};
	m[TBX__MF_TOKEN] =
	    (tbx__mfield_t){ts->mint_text[b * TS_Q + j % TS_Q], 36};
	put_u8(&c, 0); /* handled */
	put_str(&c, "bench-in", 8);
	put_be(&c, (uint64_t)(i % 8), 4);
	put_be(&c, (uint64_t)(i / 8), 8);
	put_str(&c, r->id_text, 36);
	put_u8(&c, 2); /* a set bit */
	put_str(&c, ts->in_text[b * TS_U + u], 36);
	put_be(&c, (uint64_t)(j / TS_U), 2);
	ts->cover_len = (size_t)(c - ts->cover);
	put_be(&w, (uint64_t)(j % TS_Q), 4);
	put_be(&w, (uint64_t)(j / TS_Q), 2);
	put_be(&w, (uint64_t)j, 4);
	ts->wire_len = (size_t)(w - ts->wire);
}

/* The batched protocol's A (joined: the sets minted in it). */
STMT floor_tsets_a(floor_db_t *f, tsets_t *ts, const rec_t *recs, long first,
		   long n)
{
	long b = first / ts->batch;
	void *msgs = NULL;
	size_t msgs_len = 0;
	int err = 0;

	if (st_begin(f))
		return 1;
	for (int u = 0; u < TS_U && u < n; u++)
		if (st_ts_check(f, ts, ts->in[b * TS_U + u], u,
				ts_nbits(n, u, TS_U)))
			return 1;
	ts->cover_len = 0;
	ts->wire_len = 0;
	{
		unsigned char *w = ts->wire;

		put_u8(&w, 1);
		put_be(&w, (uint64_t)n, 4);
		ts->wire_len = 5;
	}
	for (long j = 0; j < n; j++) {
		const unsigned char *bits =
		    ts->got + (size_t)(j % TS_U) * ts->bytes;
		long bit = j / TS_U;

		if (st_savepoint(f))
			return 1;
		if (!(bits[bit / 8] & (1u << (bit % 8))))
			return fail("a record without its token bit");
		if (st_row(f, &recs[first + j], first + j))
			return 1;
		ts_append(ts, &recs[first + j], first + j, j, b);
		if (st_release(f))
			return 1;
	}
	for (int q = 0; q < TS_Q && q < n && !err; q++)
		err = st_ts_mint(f, ts, ts->mint[b * TS_Q + q], q,
				 ts_nbits(n, q, TS_Q));
	if (err)
		return 1;
	if (tbx__msgs_encode(ts->fields, (size_t)n, &msgs, &msgs_len) != TBX_OK)
		return fail("encode a batch's messages");
	err = st_obb_insert(f, ts, b, msgs, msgs_len);
	free(msgs);
	return err || st_commit(f);
}

/* Its D+E: the batch's bits cleared, one UPDATE per set, the empty sets
 * and the outbox row out. */
STMT floor_tsets_e(floor_db_t *f, tsets_t *ts, long first, long n)
{
	long b = first / ts->batch;

	if (st_begin(f))
		return 1;
	for (int u = 0; u < TS_U && u < n; u++) {
		long nbits = ts_nbits(n, u, TS_U);

		/* The batch's records of set u, from its cover. */
		ts_all_set(ts, nbits);
		if (st_ts_clear(f, ts, ts->in[b * TS_U + u], nbits))
			return 1;
	}
	for (int u = 0; u < TS_U && u < n; u++)
		if (st_ts_drop(f, ts->in[b * TS_U + u]))
			return 1;
	return st_obb_delete(f, ts, b) || st_commit(f);
}

/* The senders' sets of every batch, before the clock. */
static int tsets_preload(floor_db_t *f, tsets_t *ts, long n)
{
	if (run(f->db, f->begin, NULL))
		return 1;
	for (long b = 0; b < ts->nb; b++) {
		long cnt = n - b * ts->batch < ts->batch ? n - b * ts->batch
							 : ts->batch;

		for (int u = 0; u < TS_U && u < cnt; u++) {
			long nbits = ts_nbits(cnt, u, TS_U);

			ts_all_set(ts, nbits);
			if (ts_insert(f, ts->in[b * TS_U + u], GRP_SELF,
				      (int)(u % 6), nbits, ts->mask,
				      (size_t)(nbits + 7) / 8))
				return 1;
		}
	}
	return run(f->db, f->commit, NULL) ||
	       exec_sql(f->db, "PRAGMA wal_checkpoint(TRUNCATE)");
}

static long long count_of(floor_db_t *f, const char *sql)
{
	sqlite3_stmt *st = NULL;
	long long v = -1;

	if (sqlite3_prepare_v2(f->db, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* The rows token-sets leaves: none of its own sets, no outbox row, a
 * business row per record, and the next group's sets holding a set bit
 * per record.  Printed; @returns 1 when they are not so. */
static int tsets_verify(floor_db_t *f, tsets_t *ts, long n)
{
	long long own = count_of(f, "SELECT count(*) FROM tset WHERE grp = 1");
	long long ob = count_of(f, "SELECT count(*) FROM obatch");
	long long rows = count_of(f, "SELECT count(*) FROM bench_rows");
	long long minted =
	    count_of(f, "SELECT count(*) FROM tset WHERE grp = 2");
	long long mbits =
	    count_of(f, "SELECT sum(nbits) FROM tset WHERE grp = 2");
	long long empty = count_of(f, "SELECT count(*) FROM tset WHERE grp = 2 "
				      "AND tbx_bits_none(bits)");
	long long want = 0;

	for (long b = 0; b < ts->nb; b++) {
		long cnt = n - b * ts->batch < ts->batch ? n - b * ts->batch
							 : ts->batch;
		want += cnt < TS_Q ? cnt : TS_Q;
	}
	printf("token-sets rows left: own sets %lld, outbox rows %lld, "
	       "business rows %lld, minted sets %lld (%lld bits)\n",
	       own, ob, rows, minted, mbits);
	if (own != 0 || ob != 0 || rows != n || minted != want || mbits != n ||
	    empty != 0)
		return fail("token-sets left the wrong rows (want own sets 0, "
			    "outbox rows 0, business rows %ld, minted sets "
			    "%lld with %ld bits)",
			    n, want, n);
	return 0;
}

/* The senders' minting: every record's token, before the clock. */
static int tokens_preload(floor_db_t *f, const rec_t *recs, long n)
{
	if (run(f->db, f->begin, NULL))
		return 1;
	for (long i = 0; i < n; i++) {
		/* Not st_tok_mint: its cost is the consumer's minting. */
		sqlite3_bind_blob(f->tok_mint, 1, recs[i].tok, KEY_LEN,
				  SQLITE_STATIC);
		sqlite3_bind_int(f->tok_mint, 2, GRP_SELF);
		if (run(f->db, f->tok_mint, NULL))
			return 1;
	}
	return run(f->db, f->commit, NULL) ||
	       exec_sql(f->db, "PRAGMA wal_checkpoint(TRUNCATE)");
}

const char *const floor_variant_names[NVARIANTS] = {
    "plain",	 "inbox",	  "outbox",
    "token",	 "token-batched", "token-per-record",
    "token-sets"};
#define variant_names floor_variant_names
/* The variants SQLite runs, and PostgreSQL's. */
#define SQLITE_VARIANTS (((1u << V_TOKEN_BATCHED) - 1) | 1u << V_TOKEN_SETS)
#define PG_VARIANTS	((1u << V_TOKEN_SETS) - 1)

static int variant_run(int v, const char *dir, const rec_t *recs, long n,
		       long batch, double *us, double *cpu_us)
{
	char path[4096];
	floor_db_t f;
	tsets_t ts;
	int64_t t0, c0;
	int err = 0;

	if (snprintf(path, sizeof(path), "%s/floor-%s.db", dir,
		     variant_names[v]) >= (int)sizeof(path))
		return fail("--dir: path too long");
	if (floor_open(&f, path))
		return 1;
	memset(&ts, 0, sizeof(ts));
	if ((v == V_TOKEN && tokens_preload(&f, recs, n)) ||
	    (v == V_TOKEN_SETS &&
	     (ts_init(&ts, n, batch) || tsets_preload(&f, &ts, n)))) {
		ts_free(&ts);
		floor_close(&f);
		return 1;
	}
	t0 = now_ns(CLOCK_MONOTONIC);
	c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
	for (long first = 0; first < n && !err; first += batch) {
		long cnt = n - first < batch ? n - first : batch;

		if (v == V_PLAIN)
			err = floor_plain(&f, recs, first, cnt);
		else if (v == V_INBOX)
			err = floor_inbox(&f, recs, first, cnt);
		else if (v == V_OUTBOX)
			err = floor_outbox_a(&f, recs, first, cnt) ||
			      floor_outbox_e(&f, recs, first, cnt);
		else if (v == V_TOKEN)
			err = floor_token_a(&f, recs, first, cnt) ||
			      floor_token_e(&f, recs, first, cnt);
		else
			err = floor_tsets_a(&f, &ts, recs, first, cnt) ||
			      floor_tsets_e(&f, &ts, first, cnt);
	}
	*us = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e3 / (double)n;
	*cpu_us =
	    (double)(now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0) / 1e3 / (double)n;
	if (!err && v == V_TOKEN_SETS)
		err = tsets_verify(&f, &ts, n);
	ts_free(&ts);
	floor_close(&f);
	for (int i = 0; i < 3; i++) {
		static const char *const sfx[] = {"", "-wal", "-shm"};
		char p[4200];

		if (snprintf(p, sizeof(p), "%s%s", path, sfx[i]) <
		    (int)sizeof(p))
			unlink(p);
	}
	return err;
}

/* The records: ids and tokens 50 a millisecond, as a busy sender mints
 * them; outgoing ids and minted tokens later, as the consumer makes
 * them. */
static rec_t *floor_recs(long records)
{
	uint64_t ms0 = 1764000000000ull;
	rec_t *recs = calloc((size_t)records, sizeof(*recs));

	if (!recs)
		return NULL;
	for (long i = 0; i < records; i++) {
		key_v7(recs[i].id, ms0 + (uint64_t)i / 50);
		key_v7(recs[i].tok, ms0 + (uint64_t)i / 50);
		key_text(recs[i].id, recs[i].id_text);
		key_text(recs[i].tok, recs[i].tok_text);
	}
	for (long i = 0; i < records; i++) {
		key_v7(recs[i].out, ms0 + 3600000 + (uint64_t)i / 50);
		key_v7(recs[i].mint, ms0 + 3600000 + (uint64_t)i / 50);
		key_text(recs[i].out, recs[i].out_text);
		key_text(recs[i].mint, recs[i].mint_text);
	}
	return recs;
}

static int parse_long(const char *name, const char *v, long min, long max,
		      long *out)
{
	char *end;
	long n;

	errno = 0;
	n = v ? strtol(v, &end, 10) : 0;
	if (!v || !*v || *end || errno || n < min || n > max) {
		fprintf(stderr,
			"tbx_floor: %s: '%s' is not an integer in %ld..%ld\n",
			name, v ? v : "", min, max);
		return 2;
	}
	*out = n;
	return 0;
}

int main(int argc, char **argv)
{
	long records = 20000, batch = 500, rounds = 3;
	unsigned mask = 0;
	const char *dir = NULL, *url = NULL;
	char tmpl[4096];
	rec_t *recs;
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(usage_text, stdout);
			return 0;
		} else if (strcmp(a, "--records") == 0) {
			if ((rc = parse_long(a, v, 500, 10000000, &records)))
				return rc;
		} else if (strcmp(a, "--batch") == 0) {
			if ((rc = parse_long(a, v, 1, 100000, &batch)))
				return rc;
		} else if (strcmp(a, "--variants") == 0) {
			char list[256], *tok, *save = NULL;

			if (!v || !*v || strlen(v) >= sizeof(list)) {
				fprintf(stderr, "tbx_floor: --variants needs "
						"a list\n");
				return 2;
			}
			snprintf(list, sizeof(list), "%s", v);
			mask = 0;
			for (tok = strtok_r(list, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				int k = 0;

				while (k < NVARIANTS &&
				       strcmp(tok, variant_names[k]))
					k++;
				if (k == NVARIANTS) {
					fprintf(stderr,
						"tbx_floor: --variants: "
						"unknown variant '%s' (plain, "
						"inbox, outbox, token, "
						"token-batched, "
						"token-per-record, "
						"token-sets)\n",
						tok);
					return 2;
				}
				mask |= 1u << k;
			}
		} else if (strcmp(a, "--rounds") == 0) {
			if ((rc = parse_long(a, v, 1, 50, &rounds)))
				return rc;
		} else if (strcmp(a, "--store-url") == 0) {
			if (!v || !*v || strlen(v) > 4096) {
				fprintf(stderr, "tbx_floor: --store-url needs "
						"a PostgreSQL URL or "
						"connection string\n");
				return 2;
			}
			url = v;
		} else if (strcmp(a, "--dir") == 0) {
			if (!v || !*v) {
				fprintf(stderr, "tbx_floor: --dir needs a "
						"directory\n");
				return 2;
			}
			dir = v;
		} else {
			fprintf(stderr,
				"tbx_floor: unknown argument '%s' (see "
				"--help)\n",
				a);
			return 2;
		}
		i++;
	}
	if (!mask)
		mask = url ? PG_VARIANTS : SQLITE_VARIANTS;
	if (!url && (mask & ~SQLITE_VARIANTS)) {
		fprintf(stderr, "tbx_floor: --variants: token-batched and "
				"token-per-record run on PostgreSQL only "
				"(--store-url)\n");
		return 2;
	}
	if (url && (mask & ~PG_VARIANTS)) {
		fprintf(stderr, "tbx_floor: --variants: token-sets runs on "
				"SQLite only (not with --store-url)\n");
		return 2;
	}
	if (url && dir) {
		fprintf(stderr, "tbx_floor: --dir and --store-url exclude each "
				"other\n");
		return 2;
	}
	if (url) {
		if (!(recs = floor_recs(records)))
			return fail("out of memory for %ld records", records);
		rc = floor_pg_main(url, recs, records, batch, mask, rounds);
		free(recs);
		return rc ? 1 : 0;
	}
	if (!dir) {
		const char *t = getenv("TMPDIR");

		snprintf(tmpl, sizeof(tmpl), "%s/tbx_floor.XXXXXX",
			 t && *t ? t : "/tmp");
		if (!mkdtemp(tmpl))
			return fail("mkdtemp %s: %s", tmpl, strerror(errno));
	} else if (mkdir(dir, 0755) && errno != EEXIST) {
		return fail("--dir: cannot create '%s': %s", dir,
			    strerror(errno));
	}
	if (!(recs = floor_recs(records)))
		return fail("out of memory for %ld records", records);
	printf("floor: %ld records a variant, %ld a transaction, WAL + "
	       "synchronous=FULL, SQLite %s\n",
	       records, batch, sqlite3_libversion());
	for (int v = 0; v < NVARIANTS && !rc; v++) {
		double us = 0, cpu_us = 0;

		if (!(mask & (1u << v)))
			continue;
		if ((rc = variant_run(v, dir ? dir : tmpl, recs, records, batch,
				      &us, &cpu_us)))
			break;
		printf("%-10s %8.2f us/record %8.2f cpu us/record\n",
		       variant_names[v], us, cpu_us);
		fflush(stdout);
	}
	free(recs);
	if (!dir)
		rmdir(tmpl);
	return rc ? 1 : 0;
}
