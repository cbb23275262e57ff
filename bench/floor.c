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
    "                   token, token-batched, token-per-record (default:\n"
    "                   all that the store runs)\n"
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
    "(outbox, token: floor_<variant>_a and _e) divided by the records;\n"
    "bench/profile prints them.\n"
    "Exit status: 0 on success, 1 when a store operation failed, 2 for a\n"
    "bad command line.\n";

typedef struct floor_db {
	sqlite3 *db;
	sqlite3_stmt *begin, *commit, *savepoint, *release;
	sqlite3_stmt *row, *inbox;
	sqlite3_stmt *ob_find, *tok_check, *tok_mint, *ob_insert;
	sqlite3_stmt *tok_consume, *ob_delete;
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

static void floor_close(floor_db_t *f)
{
	sqlite3_stmt **all[] = {&f->begin,     &f->commit,	&f->savepoint,
				&f->release,   &f->row,		&f->inbox,
				&f->ob_find,   &f->tok_check,	&f->tok_mint,
				&f->ob_insert, &f->tok_consume, &f->ob_delete};

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
	if (exec_sql(f->db,
		     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
		     "CREATE TABLE bench_rows (id INTEGER PRIMARY KEY, "
		     "msg_id TEXT NOT NULL, part INTEGER, off INTEGER, "
		     "payload BLOB);"
		     "CREATE TABLE inbox (id BLOB PRIMARY KEY) WITHOUT ROWID;"
		     "CREATE TABLE tokens (token BLOB PRIMARY KEY, "
		     "grp INTEGER NOT NULL) WITHOUT ROWID;"
		     "CREATE TABLE outbox (id BLOB PRIMARY KEY, in_token BLOB, "
		     "out_id BLOB, out_token BLOB, topic TEXT, payload BLOB) "
		     "WITHOUT ROWID;") ||
	    prep(f->db, "BEGIN IMMEDIATE", &f->begin) ||
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
	    prep(f->db, "DELETE FROM outbox WHERE id = ?", &f->ob_delete)) {
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
    "plain", "inbox", "outbox", "token", "token-batched", "token-per-record"};
#define variant_names floor_variant_names
/* The variants SQLite runs: the others are PostgreSQL's alone. */
#define SQLITE_VARIANTS ((1u << V_TOKEN_BATCHED) - 1)

static int variant_run(int v, const char *dir, const rec_t *recs, long n,
		       long batch, double *us, double *cpu_us)
{
	char path[4096];
	floor_db_t f;
	int64_t t0, c0;
	int err = 0;

	if (snprintf(path, sizeof(path), "%s/floor-%s.db", dir,
		     variant_names[v]) >= (int)sizeof(path))
		return fail("--dir: path too long");
	if (floor_open(&f, path))
		return 1;
	if (v == V_TOKEN && tokens_preload(&f, recs, n)) {
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
		else
			err = floor_token_a(&f, recs, first, cnt) ||
			      floor_token_e(&f, recs, first, cnt);
	}
	*us = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e3 / (double)n;
	*cpu_us =
	    (double)(now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0) / 1e3 / (double)n;
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
						"token-per-record)\n",
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
		mask = url ? (1u << NVARIANTS) - 1 : SQLITE_VARIANTS;
	if (!url && (mask & ~SQLITE_VARIANTS)) {
		fprintf(stderr, "tbx_floor: --variants: token-batched and "
				"token-per-record run on PostgreSQL only "
				"(--store-url)\n");
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
		printf("%-6s %8.2f us/record %8.2f cpu us/record\n",
		       variant_names[v], us, cpu_us);
		fflush(stdout);
	}
	free(recs);
	if (!dir)
		rmdir(tmpl);
	return rc ? 1 : 0;
}
