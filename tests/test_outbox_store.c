/*
 * The service store S and the database layer under both stores: opening,
 * migrating and refusing files (store/db.c), outbox rows and their
 * lifecycle invariants (outbox/sqlite.c), the headers blob (outbox/hdrs.c).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "store/db.h"
#include "store/stmt.h"
#include "outbox/outbox.h"

#define GRP "g1"

static char dir[64];

static void fx_setup(void)
{
	tbx__strlcpy(dir, "/tmp/tbx-outbox-XXXXXX", sizeof(dir));
	cr_assert(mkdtemp(dir), "mkdtemp");
	tbx__log_setup(TBX_LOG_ERR - 1, "test"); /* quiet: errors expected */
}

/* The directory holds only files (databases, -wal, -shm). */
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

/* "dir/name" in a static buffer per slot (two paths may be live). */
static const char *fx_path(const char *name)
{
	static char buf[4][512];
	static int slot;
	char *p = buf[slot++ & 3];

	snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
	return p;
}

static tbx_outbox_t *fx_open(const char *path)
{
	tbx__db_opts_t opts;
	tbx_outbox_t *store = NULL;
	char err[512];

	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	return store;
}

/* Runs raw SQL on a connection of its own (setting up odd files). */
static void fx_sql(const char *path, const char *sql)
{
	sqlite3 *db;
	char *msg = NULL;

	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s",
		     msg ? msg : "");
	sqlite3_close(db);
}

/* First column of the first row of @p sql on @p db as an integer. */
static int64_t fx_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *stmt;
	int64_t v = -1;

	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &stmt, NULL), SQLITE_OK,
		     "%s: %s", sql, sqlite3_errmsg(db));
	if (sqlite3_step(stmt) == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return v;
}

/* Same, on a fresh read-only connection to @p path. */
static int64_t fx_file_int(const char *path, const char *sql)
{
	sqlite3 *db;
	int64_t v;

	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
		     SQLITE_OK);
	v = fx_int(db, sql);
	sqlite3_close(db);
	return v;
}

static void fx_write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	cr_assert(f);
	cr_assert_eq(fwrite(data, 1, len, f), len);
	fclose(f);
}

/* Whole file into a malloc'ed buffer. */
static void *fx_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	cr_assert(f, "%s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	cr_assert(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static int fx_open_err(const char *path, const tbx__db_opts_t *opts, char *err,
		       size_t err_size)
{
	tbx_outbox_t *store = NULL;
	int rc = tbx_outbox_open(path, opts, &store, err, err_size);

	if (rc == TBX_OK)
		tbx_outbox_close(store);
	else
		cr_assert_null(store);
	return rc;
}

/* A PROCESSED row of @p n messages with distinct binary contents. */
static void fx_row(tbx__row_t *row, const char *msg_id, size_t n)
{
	tbx__row_init(row);
	tbx__strlcpy(row->msg_id, msg_id, sizeof(row->msg_id));
	tbx__uuid(row->in_token);
	tbx__strlcpy(row->in_topic, "in", sizeof(row->in_topic));
	row->in_partition = 3;
	row->in_offset = 42;
	row->kind = TBX_ROW_HANDLED;
	row->created_ms = 1000;
	for (size_t i = 0; i < n; i++) {
		char key[] = {'k', '\0', (char)i, '\xff'};
		char payload[] = {'\0', 'p', (char)i, '\0', '\x80'};

		cr_assert_eq(tbx__row_add(row, "out", "Pong", key, sizeof(key),
					  payload, sizeof(payload), NULL, 0),
			     TBX_OK);
	}
}

/* Gives the row an attempt, tokens and a mint number (B, in memory). */
static void fx_tokened(tbx__row_t *row, int64_t seq)
{
	tbx__uuid(row->attempt);
	row->mint_seq = seq;
	for (size_t i = 0; i < row->msg_cnt; i++)
		tbx__uuid(row->msgs[i].token);
}

static void fx_insert(tbx_outbox_t *store, const char *grp,
		      const tbx__row_t *row)
{
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, grp, row), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
}

static int fx_set_attempt(tbx_outbox_t *store, const tbx__row_t *row)
{
	int won = -1;

	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_set_attempt(store, GRP, row, &won), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	return won;
}

static void fx_assert_blob(const void *got, size_t got_len, const void *want,
			   size_t want_len, const char *what)
{
	if (!want) {
		cr_assert_null(got, "%s: want NULL", what);
		cr_assert_eq(got_len, 0, "%s", what);
		return;
	}
	cr_assert_not_null(got, "%s: want non-NULL", what);
	cr_assert_eq(got_len, want_len, "%s: length", what);
	cr_assert_eq(memcmp(got, want, want_len), 0, "%s: bytes", what);
}

static void fx_assert_rows_equal(const tbx__row_t *a, const tbx__row_t *b)
{
	cr_assert_str_eq(a->msg_id, b->msg_id);
	cr_assert_str_eq(a->in_token, b->in_token);
	cr_assert_eq(a->in_set, b->in_set);
	cr_assert_eq(a->in_tbit, b->in_tbit);
	cr_assert_str_eq(a->in_topic, b->in_topic);
	cr_assert_eq(a->in_partition, b->in_partition);
	cr_assert_eq(a->in_offset, b->in_offset);
	cr_assert_str_eq(a->attempt, b->attempt);
	cr_assert_eq(a->mint_seq, b->mint_seq);
	cr_assert_eq(a->kind, b->kind);
	if (a->error || b->error)
		cr_assert_str_eq(a->error ? a->error : "(null)",
				 b->error ? b->error : "(null)");
	cr_assert_eq(a->created_ms, b->created_ms);
	cr_assert_eq(a->msg_cnt, b->msg_cnt);
	for (size_t i = 0; i < a->msg_cnt; i++) {
		const tbx__outmsg_t *x = &a->msgs[i], *y = &b->msgs[i];
		cr_assert_str_eq(x->id, y->id);
		cr_assert_str_eq(x->token, y->token);
		cr_assert_str_eq(x->topic, y->topic);
		cr_assert_str_eq(x->type, y->type);
		fx_assert_blob(x->key, x->key_len, y->key, y->key_len, "key");
		fx_assert_blob(x->payload, x->payload_len, y->payload,
			       y->payload_len, "payload");
		fx_assert_blob(x->headers, x->headers_len, y->headers,
			       y->headers_len, "headers");
	}
}

TestSuite(db, .init = fx_setup, .fini = fx_teardown);
TestSuite(outbox, .init = fx_setup, .fini = fx_teardown);
TestSuite(row, .init = fx_setup, .fini = fx_teardown);
TestSuite(hdrs, .init = fx_setup, .fini = fx_teardown);

/*
 * Opening and migrating.
 */

Test(db, migrations_create_the_whole_schema_and_stamp_the_file)
{
	static const char *const tables[] = {
	    "tbx_outbox", "tbx_ingress",       "tbx_dead_letters", "tbx_seq",
	    "tbx_tokens", "tbx_registrations", "tbx_subscriptions"};
	const char *path = fx_path("s.db");
	tbx_outbox_t *store = fx_open(path);
	sqlite3 *db = tbx_outbox_db(store);
	char sql[256];

	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM sqlite_master WHERE type = "
			 "'table' AND name = '%s'",
			 tables[i]);
		cr_assert_eq(fx_int(db, sql), 1, "table %s missing", tables[i]);
	}
	/* Dropped by version 3: queries by age scan the rows in flight. */
	cr_assert_eq(fx_int(db, "SELECT count(*) FROM sqlite_master WHERE "
				"name = 'tbx_outbox_created'"),
		     0);
	cr_assert_eq(fx_int(db, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(fx_int(db, "PRAGMA application_id"), TBX_APPLICATION_ID);
	cr_assert_eq(fx_int(db, "PRAGMA foreign_keys"), 1);
	cr_assert_eq(fx_int(db, "PRAGMA synchronous"), 2, "FULL by default");
	cr_assert_eq(fx_int(db, "SELECT count(*) FROM tbx_seq WHERE id = 1 AND "
				"value = 0"),
		     1);
	tbx_outbox_close(store);
	cr_assert_eq(fx_file_int(path,
				 "SELECT count(*) FROM pragma_journal_mode "
				 "WHERE journal_mode = 'wal'"),
		     1);
}

Test(db, synchronous_normal_is_applied_when_asked)
{
	tbx__db_opts_t opts;
	sqlite3 *db;
	char err[256];

	tbx__db_opts_init(&opts);
	opts.synchronous_full = 0;
	cr_assert_eq(
	    tbx__db_open(fx_path("s.db"), &opts, &db, err, sizeof(err)), TBX_OK,
	    "%s", err);
	cr_assert_eq(fx_int(db, "PRAGMA synchronous"), 1);
	sqlite3_close_v2(db);
}

Test(db, reopening_is_idempotent)
{
	const char *path = fx_path("s.db");
	tbx_outbox_t *store = fx_open(path);
	int64_t tables;
	tbx__row_t row;

	tables =
	    fx_int(tbx_outbox_db(store), "SELECT count(*) FROM sqlite_master");
	fx_row(&row, "m1", 1);
	fx_insert(store, GRP, &row);
	tbx_outbox_close(store);
	for (int i = 0; i < 2; i++) {
		int found = 0;

		store = fx_open(path);
		cr_assert_eq(fx_int(tbx_outbox_db(store),
				    "SELECT count(*) FROM sqlite_master"),
			     tables, "no schema object added or lost");
		cr_assert_eq(
		    fx_int(tbx_outbox_db(store), "PRAGMA user_version"),
		    TBX_SCHEMA_VERSION);
		cr_assert_eq(
		    fx_int(tbx_outbox_db(store), "SELECT value FROM tbx_seq"),
		    0);
		cr_assert_eq(
		    tbx_outbox_row_find(store, GRP, "m1", &found, NULL),
		    TBX_OK);
		cr_assert_eq(found, 1, "data survives a reopen");
		tbx_outbox_close(store);
	}
	tbx__row_clear(&row);
}

Test(db, newer_schema_version_is_refused_with_eschema)
{
	const char *path = fx_path("s.db");
	char err[512];

	tbx_outbox_close(fx_open(path));
	fx_sql(path, "PRAGMA user_version = 99");
	cr_assert_eq(fx_open_err(path, NULL, err, sizeof(err)), TBX_ESCHEMA);
	cr_assert(strstr(err, "newer"), "%s", err);
	cr_assert(strstr(err, path), "names the file: %s", err);
	cr_assert_eq(fx_file_int(path, "PRAGMA user_version"), 99,
		     "left untouched");
}

Test(db, non_sqlite_file_is_refused_with_enotdb)
{
	const char *path = fx_path("junk.db");
	char junk[4096], err[512];
	void *after;
	size_t len;

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)('a' + i % 26);
	fx_write_file(path, junk, sizeof(junk));
	cr_assert_eq(fx_open_err(path, NULL, err, sizeof(err)), TBX_ENOTDB);
	cr_assert(strstr(err, path), "%s", err);
	after = fx_read_file(path, &len);
	cr_assert_eq(len, sizeof(junk));
	cr_assert_eq(memcmp(after, junk, len), 0, "file left untouched");
	free(after);
}

Test(db, foreign_sqlite_database_is_refused_with_enotdb)
{
	const char *path = fx_path("other.db");
	char err[512];

	fx_sql(path, "CREATE TABLE songs (id INTEGER PRIMARY KEY, title TEXT);"
		     "PRAGMA application_id = 305419896;");
	cr_assert_eq(fx_open_err(path, NULL, err, sizeof(err)), TBX_ENOTDB);
	cr_assert(strstr(err, "application_id"), "%s", err);
	cr_assert_eq(fx_file_int(path, "SELECT count(*) FROM sqlite_master "
				       "WHERE name LIKE 'tbx%'"),
		     0, "no tokenbox table added to a foreign file");
}

Test(db, database_versioned_by_another_program_is_refused_with_enotdb)
{
	const char *path = fx_path("other.db");
	char err[512];

	fx_sql(path, "CREATE TABLE t (x); PRAGMA user_version = 3;");
	cr_assert_eq(fx_open_err(path, NULL, err, sizeof(err)), TBX_ENOTDB);
	cr_assert(strstr(err, "user_version"), "%s", err);
}

/* The service store is where handlers keep their business tables, which
 * may exist before tokenbox first opens the file. */
Test(db, unclaimed_database_with_business_tables_is_adopted)
{
	const char *path = fx_path("s.db");
	tbx_outbox_t *store;

	fx_sql(path, "CREATE TABLE orders (id INTEGER PRIMARY KEY);"
		     "INSERT INTO orders VALUES (7);");
	store = fx_open(path);
	cr_assert_eq(fx_int(tbx_outbox_db(store), "SELECT id FROM orders"), 7);
	cr_assert_eq(fx_int(tbx_outbox_db(store), "PRAGMA application_id"),
		     TBX_APPLICATION_ID);
	tbx_outbox_close(store);
}

Test(db, missing_file_without_create_is_enoent)
{
	const char *path = fx_path("missing.db");
	tbx__db_opts_t opts;
	struct stat st;
	char err[512];

	tbx__db_opts_init(&opts);
	opts.create = 0;
	cr_assert_eq(fx_open_err(path, &opts, err, sizeof(err)), TBX_ENOENT);
	cr_assert(strstr(err, path), "%s", err);
	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	cr_assert_eq(fx_open_err(path, &opts, err, sizeof(err)), TBX_ENOENT);
	cr_assert_neq(stat(path, &st), 0, "nothing created");
}

Test(db, readonly_open_does_not_modify_the_file)
{
	const char *path = fx_path("s.db");
	struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
	tbx_outbox_t *store;
	tbx__db_opts_t opts;
	tbx__row_t row;
	struct stat before, after;
	void *bytes_before, *bytes_after;
	size_t len_before, len_after;
	int64_t rows;
	int found;
	char err[256];

	store = fx_open(path);
	fx_row(&row, "m1", 2);
	fx_insert(store, GRP, &row);
	tbx_outbox_close(store);
	/* A known mtime in the past: any write would move it. */
	cr_assert_eq(utimensat(AT_FDCWD, path, times, 0), 0);
	cr_assert_eq(stat(path, &before), 0);
	bytes_before = fx_read_file(path, &len_before);

	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m1", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 1);
	cr_assert_eq(tbx_outbox_count(store, NULL, &rows), TBX_OK);
	cr_assert_eq(rows, 1);
	/* Writes are refused (SQLITE_READONLY). */
	if (tbx_outbox_begin(store) == TBX_OK) {
		cr_assert_eq(tbx_outbox_ingress_set(store, GRP, "in", 0, 1),
			     TBX_EIO);
		cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	}
	tbx_outbox_close(store);

	cr_assert_eq(stat(path, &after), 0);
	bytes_after = fx_read_file(path, &len_after);
	cr_assert_eq(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
	cr_assert_eq(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
	cr_assert_eq(len_after, len_before);
	cr_assert_eq(memcmp(bytes_after, bytes_before, len_after), 0);
	free(bytes_before);
	free(bytes_after);
	tbx__row_clear(&row);
}

Test(db, readonly_open_of_an_older_schema_asks_for_a_read_write_open)
{
	const char *path = fx_path("s.db");
	tbx__db_opts_t opts;
	char err[512];

	/* Claimed by tokenbox but at schema version 0. */
	fx_sql(path, "PRAGMA application_id = 1413631832;");
	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	cr_assert_eq(fx_open_err(path, &opts, err, sizeof(err)), TBX_ESCHEMA);
	cr_assert(strstr(err, "read-write"), "%s", err);
	cr_assert_eq(fx_file_int(path, "PRAGMA user_version"), 0);
	/* Once opened read-write it is migrated, and read-only works. */
	tbx__db_opts_init(&opts);
	cr_assert_eq(fx_open_err(path, &opts, err, sizeof(err)), TBX_OK, "%s",
		     err);
	opts.readonly = 1;
	cr_assert_eq(fx_open_err(path, &opts, err, sizeof(err)), TBX_OK, "%s",
		     err);
}

Test(db, corrupt_schema_is_reported_as_ecorrupt)
{
	const char *path = fx_path("s.db");
	unsigned char garbage[512];
	char err[512];
	int fd;

	tbx_outbox_close(fx_open(path));
	/* Page 1 past the 100-byte file header holds the schema b-tree:
	 * the header (application_id, user_version) still reads fine. */
	memset(garbage, 0xa5, sizeof(garbage));
	fd = open(path, O_WRONLY);
	cr_assert(fd >= 0);
	cr_assert_eq(pwrite(fd, garbage, sizeof(garbage), 100),
		     (ssize_t)sizeof(garbage));
	close(fd);
	cr_assert_eq(fx_open_err(path, NULL, err, sizeof(err)), TBX_ECORRUPT,
		     "%s", err);
	cr_assert(strstr(err, path), "%s", err);
}

Test(db, locked_file_is_reported_as_ebusy)
{
	const char *path = fx_path("s.db");
	tbx__db_opts_t opts;
	sqlite3 *holder;
	char err[512];

	tbx_outbox_close(fx_open(path));
	/* An exclusive-locking-mode writer keeps everyone else out. */
	cr_assert_eq(sqlite3_open(path, &holder), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(holder,
				  "PRAGMA locking_mode = EXCLUSIVE;"
				  "BEGIN EXCLUSIVE;"
				  "INSERT INTO tbx_ingress VALUES "
				  "('g', 't', 0, 1);",
				  NULL, NULL, NULL),
		     SQLITE_OK, "%s", sqlite3_errmsg(holder));
	tbx__db_opts_init(&opts);
	opts.busy_timeout_ms = 50;
	cr_assert_eq(fx_open_err(path, &opts, err, sizeof(err)), TBX_EBUSY,
		     "%s", err);
	sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(holder);
}

/*
 * Regression: processes opening one new file at once must all succeed.
 * The header used to be read in two statements; one could see the file
 * before another process's migration and the next after it, and then
 * took the half-stamped header for another program's file (ENOTDB).
 */
Test(db, processes_creating_one_file_at_once_all_open_it)
{
	enum { ROUNDS = 30, PROCS = 6 };

	for (int round = 0; round < ROUNDS; round++) {
		char name[32];
		pid_t pids[PROCS];
		int go[2];

		snprintf(name, sizeof(name), "race-%d.db", round);
		const char *path = fx_path(name);
		cr_assert_eq(pipe(go), 0);
		for (int i = 0; i < PROCS; i++) {
			pids[i] = fork();
			cr_assert_geq(pids[i], 0, "fork");
			if (pids[i] == 0) {
				tbx__db_opts_t opts;
				sqlite3 *db;
				char err[512], c;
				int rc;

				close(go[1]);
				/* All start when the parent closes the pipe. */
				if (read(go[0], &c, 1) < 0)
					_exit(3);
				tbx__db_opts_init(&opts);
				rc = tbx__db_open(path, &opts, &db, err,
						  sizeof(err));
				if (rc != TBX_OK) {
					fprintf(stderr, "open: %s\n", err);
					_exit(1);
				}
				sqlite3_close_v2(db);
				_exit(0);
			}
		}
		close(go[0]);
		close(go[1]);
		for (int i = 0; i < PROCS; i++) {
			int status;
			cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
			cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
				  "round %d: process %d could not open the new "
				  "file (status %d)",
				  round, i, status);
		}
	}
}

/* Ids are version 7 UUIDs: the Unix time in milliseconds first (so that
 * ids made later sort after, and B-tree inserts stay local), then random
 * bits from a per-thread pool; a forked child never hands out its
 * parent's next ones. */
Test(ids, uuids_are_version_7_and_a_forked_child_draws_its_own)
{
	char a[TBX_UUID_LEN + 1], b[TBX_UUID_LEN + 1], child[TBX_UUID_LEN + 1];
	char hex[13];
	int fds[2], status;
	int64_t before, after, stamp;
	pid_t pid;

	for (int i = 0; i < 100; i++) {
		before = tbx__now_ms();
		tbx__uuid(a);
		after = tbx__now_ms();
		cr_assert(tbx__is_uuid(a, strlen(a)), "%s", a);
		cr_assert_eq(a[14], '7', "%s", a);
		cr_assert(strchr("89ab", a[19]), "%s", a);
		/* 48 bits of milliseconds: "xxxxxxxx-xxxx" */
		memcpy(hex, a, 8);
		memcpy(hex + 8, a + 9, 4);
		hex[12] = '\0';
		stamp = (int64_t)strtoll(hex, NULL, 16);
		cr_assert(stamp >= before && stamp <= after,
			  "%s: time %lld not in [%lld, %lld]", a,
			  (long long)stamp, (long long)before,
			  (long long)after);
		tbx__uuid(b);
		cr_assert_str_neq(a, b);
		if (memcmp(a, b, 13) != 0) /* another millisecond */
			cr_assert_lt(strcmp(a, b), 0, "%s after %s", b, a);
	}
	tbx__uuid(a); /* the pool is partly used: the fork copies it */
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		tbx__uuid(child);
		_exit(write(fds[1], child, TBX_UUID_LEN) == TBX_UUID_LEN ? 0
									 : 1);
	}
	tbx__uuid(b);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	cr_assert_eq(read(fds[0], child, TBX_UUID_LEN), TBX_UUID_LEN);
	child[TBX_UUID_LEN] = '\0';
	close(fds[0]);
	close(fds[1]);
	cr_assert_str_neq(child, b, "the child drew the parent's next id");
}

Test(db, error_codes_map_to_tokenbox_errors)
{
	cr_assert_eq(tbx__db_err(SQLITE_OK), TBX_OK);
	cr_assert_eq(tbx__db_err(SQLITE_DONE), TBX_OK);
	cr_assert_eq(tbx__db_err(SQLITE_BUSY), TBX_EBUSY);
	cr_assert_eq(tbx__db_err(SQLITE_BUSY_SNAPSHOT), TBX_EBUSY);
	cr_assert_eq(tbx__db_err(SQLITE_IOERR_FSYNC), TBX_EIO);
	cr_assert_eq(tbx__db_err(SQLITE_FULL), TBX_EIO);
	cr_assert_eq(tbx__db_err(SQLITE_CANTOPEN), TBX_EIO);
	cr_assert_eq(tbx__db_err(SQLITE_CORRUPT), TBX_ECORRUPT);
	cr_assert_eq(tbx__db_err(SQLITE_NOTADB), TBX_ENOTDB);
	cr_assert_eq(tbx__db_err(SQLITE_NOMEM), TBX_ENOMEM);
	cr_assert_eq(tbx__db_err(SQLITE_CONSTRAINT_PRIMARYKEY), TBX_ESTORE);
	cr_assert_eq(tbx__db_err(SQLITE_ERROR), TBX_ESTORE);
}

Test(db, stmt_is_prepared_once_and_comes_back_reset)
{
	sqlite3 *db;
	sqlite3_stmt *slot = NULL, *stmt;
	char err[256];

	cr_assert_eq(tbx__db_open(fx_path("s.db"), NULL, &db, err, sizeof(err)),
		     TBX_OK, "%s", err);
	stmt = tbx__db_stmt(db, &slot, "SELECT ?1");
	cr_assert_not_null(stmt);
	sqlite3_bind_int(stmt, 1, 5);
	cr_assert_eq(sqlite3_step(stmt), SQLITE_ROW);
	cr_assert(sqlite3_stmt_busy(stmt));
	cr_assert_eq(tbx__db_stmt(db, &slot, "SELECT ?1"), stmt, "cached");
	cr_assert_not(sqlite3_stmt_busy(stmt), "reset");
	cr_assert_eq(sqlite3_step(stmt), SQLITE_ROW);
	cr_assert_eq(sqlite3_column_type(stmt, 0), SQLITE_NULL,
		     "bindings cleared");
	sqlite3_finalize(slot);
	slot = NULL;
	cr_assert_null(tbx__db_stmt(db, &slot, "SELEKT nonsense"));
	cr_assert_null(slot);
	cr_assert_eq(tbx__db_exec(db, "CREATE TABLE x (a); DROP TABLE x"),
		     TBX_OK);
	cr_assert_eq(tbx__db_exec(db, "COMMIT"), TBX_ESTORE,
		     "no transaction is active");
	sqlite3_close_v2(db);
}

/*
 * Outbox rows.
 */

Test(outbox, row_round_trips_with_binary_and_null_fields)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx_header_t hdrs[] = {
	    {"trace", "a\0b", 3}, {"nul", NULL, 0}, {"empty", "", 0}};
	char attempt[TBX_UUID_LEN + 1] = "x";
	tbx__row_t row, got;
	void *blob;
	size_t blob_len;
	int found = 0;

	fx_row(&row, "m1", 1);
	row.kind = TBX_ROW_DEAD_LETTER;
	row.error = tbx__strdup("bad \"input\"; DROP TABLE tbx_outbox; --");
	cr_assert_eq(tbx__hdrs_encode(hdrs, 3, &blob, &blob_len), TBX_OK);
	/* No key, null value, headers. */
	cr_assert_eq(
	    tbx__row_add(&row, "out", "T2", NULL, 0, NULL, 0, blob, blob_len),
	    TBX_OK);
	/* Empty key and empty value are not "none". */
	cr_assert_eq(tbx__row_add(&row, "out2", "T3", "", 0, "", 0, NULL, 0),
		     TBX_OK);
	free(blob);
	fx_insert(store, GRP, &row);

	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m1", &found, attempt),
		     TBX_OK);
	cr_assert_eq(found, 1);
	cr_assert_str_eq(attempt, "", "no attempt yet");
	tbx__row_init(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m1", &got), TBX_OK);
	fx_assert_rows_equal(&got, &row);
	cr_assert(tbx_outbox_row_check(&got));
	cr_assert_null(got.msgs[1].key);
	cr_assert_null(got.msgs[1].payload);
	cr_assert_not_null(got.msgs[2].key);
	cr_assert_eq(got.msgs[2].key_len, 0);
	cr_assert_not_null(got.msgs[2].payload);
	cr_assert_null(got.msgs[2].headers);
	tbx__row_clear(&got);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

Test(outbox, untokened_ingress_row_keeps_an_empty_in_token)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row, got;

	fx_row(&row, "u:in:0:17", 0);
	row.in_token[0] = '\0';
	fx_insert(store, GRP, &row);
	tbx__row_init(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "u:in:0:17", &got),
		     TBX_OK);
	fx_assert_rows_equal(&got, &row);
	cr_assert_eq(got.msg_cnt, 0);
	tbx__row_clear(&got);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

Test(outbox, missing_row_is_not_found_and_loads_as_enoent)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	char attempt[TBX_UUID_LEN + 1] = "stale";
	tbx__row_t row;
	int found = 1;

	cr_assert_eq(tbx_outbox_row_find(store, GRP, "nope", &found, attempt),
		     TBX_OK);
	cr_assert_eq(found, 0);
	cr_assert_str_eq(attempt, "");
	fx_row(&row, "other", 2);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "nope", &row), TBX_ENOENT);
	cr_assert_eq(row.msg_cnt, 0, "cleared first");
	cr_assert_str_eq(row.msg_id, "");
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

Test(outbox, row_reloads_in_place_from_its_own_msg_id)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row, copy;

	fx_row(&row, "m1", 2);
	fx_insert(store, GRP, &row);
	fx_row(&copy, "m1", 0);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m1", &copy), TBX_OK);
	/* As the protocol does after losing B: msg_id points into row. */
	cr_assert_eq(tbx_outbox_row_load(store, GRP, row.msg_id, &row), TBX_OK);
	fx_assert_rows_equal(&row, &copy);
	tbx__row_clear(&row);
	tbx__row_clear(&copy);
	tbx_outbox_close(store);
}

Test(outbox, rows_of_different_groups_are_independent)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row;
	int64_t n;
	int found;

	fx_row(&row, "m1", 1);
	fx_insert(store, "g1", &row);
	fx_insert(store, "g2", &row);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_delete(store, "g1", "m1"), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_find(store, "g2", "m1", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 1);
	cr_assert_eq(tbx_outbox_count(store, "g1", &n), TBX_OK);
	cr_assert_eq(n, 0);
	cr_assert_eq(tbx_outbox_count(store, "g2", &n), TBX_OK);
	cr_assert_eq(n, 1);
	cr_assert_eq(tbx_outbox_count(store, NULL, &n), TBX_OK);
	cr_assert_eq(n, 1);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

/* The batch forms: rows_find answers per id (found, attempt) for ids in
 * any order with repeats and absent ones, of one group only; rows_delete
 * removes the rows named and no other. */
Test(outbox, rows_find_and_rows_delete_answer_per_id_for_one_group)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	const char *ids[] = {"m3", "none", "m1", "m2", "m1", "only-g2"};
	tbx__row_hit_t hits[6];
	tbx__row_t m1, m2, m3, other;
	int found;

	fx_row(&m1, "m1", 1);
	fx_row(&m2, "m2", 0);
	fx_row(&m3, "m3", 2);
	fx_row(&other, "only-g2", 1);
	fx_insert(store, GRP, &m1);
	fx_insert(store, GRP, &m2);
	fx_insert(store, GRP, &m3);
	fx_insert(store, "g2", &other);
	fx_tokened(&m3, 4);
	cr_assert_eq(fx_set_attempt(store, &m3), 1);
	memset(hits, 0x5a, sizeof(hits));
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_rows_find(store, GRP, ids, 6, hits), TBX_OK);
	cr_assert_eq(tbx_outbox_rows_find(store, GRP, ids, 0, NULL), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(hits[0].found, 1);
	cr_assert_str_eq(hits[0].attempt, m3.attempt);
	cr_assert_eq(hits[1].found, 0);
	cr_assert_str_eq(hits[1].attempt, "");
	cr_assert_eq(hits[2].found, 1);
	cr_assert_str_eq(hits[2].attempt, "", "a PROCESSED row: no attempt");
	cr_assert_eq(hits[3].found, 1);
	cr_assert_eq(hits[4].found, 1, "a repeated id answers again");
	cr_assert_eq(hits[5].found, 0, "another group's row is not ours");

	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_rows_delete(store, GRP, ids + 1, 4), TBX_OK);
	cr_assert_eq(tbx_outbox_rows_delete(store, GRP, ids, 0), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m1", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 0);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m2", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 0);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m3", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 1, "not named: kept");
	cr_assert_eq(tbx_outbox_row_find(store, "g2", "only-g2", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 1, "another group's row is kept");
	tbx__row_clear(&m1);
	tbx__row_clear(&m2);
	tbx__row_clear(&m3);
	tbx__row_clear(&other);
	tbx_outbox_close(store);
}

Test(outbox, duplicate_row_insert_fails)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row;

	fx_row(&row, "m1", 1);
	fx_insert(store, GRP, &row);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &row), TBX_ESTORE);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

Test(outbox, first_recorded_attempt_wins_and_the_second_changes_nothing)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row, first, second, got;
	char attempt[TBX_UUID_LEN + 1];
	int found;

	fx_row(&row, "m1", 3);
	fx_insert(store, GRP, &row);
	/* Two workers load the same PROCESSED row and mint for it. */
	tbx__row_init(&first);
	tbx__row_init(&second);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m1", &first), TBX_OK);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m1", &second), TBX_OK);
	fx_tokened(&first, 5);
	fx_tokened(&second, 6);
	cr_assert_eq(fx_set_attempt(store, &first), 1);
	cr_assert_eq(fx_set_attempt(store, &second), 0);

	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m1", &found, attempt),
		     TBX_OK);
	cr_assert_str_eq(attempt, first.attempt);
	tbx__row_init(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m1", &got), TBX_OK);
	fx_assert_rows_equal(&got, &first);
	cr_assert_eq(got.mint_seq, 5);
	cr_assert(tbx_outbox_row_check(&got));
	tbx__row_clear(&row);
	tbx__row_clear(&first);
	tbx__row_clear(&second);
	tbx__row_clear(&got);
	tbx_outbox_close(store);
}

Test(outbox, set_attempt_on_a_finished_row_loses)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row;
	int64_t n;

	fx_row(&row, "m1", 1);
	fx_tokened(&row, 1);
	cr_assert_eq(fx_set_attempt(store, &row), 0, "no row: not recorded");
	cr_assert_eq(tbx_outbox_count(store, NULL, &n), TBX_OK);
	cr_assert_eq(n, 0);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

Test(outbox, set_attempt_refuses_a_row_without_every_token)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row;
	int won = -1;

	fx_row(&row, "m1", 2);
	fx_insert(store, GRP, &row);
	fx_tokened(&row, 3);
	row.msgs[1].token[0] = '\0';
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_set_attempt(store, GRP, &row, &won),
		     TBX_EINVAL);
	cr_assert_eq(won, 0);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

Test(outbox, set_attempt_refuses_a_row_that_differs_from_the_stored_one)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row;
	int won = -1, found;
	char attempt[TBX_UUID_LEN + 1];

	fx_row(&row, "m1", 2);
	fx_insert(store, GRP, &row);
	/* Memory knows one message fewer than the store. */
	tbx__row_clear(&row);
	fx_row(&row, "m1", 1);
	fx_tokened(&row, 3);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_set_attempt(store, GRP, &row, &won),
		     TBX_ESTATE);
	cr_assert_eq(won, 0);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m1", &found, attempt),
		     TBX_OK);
	cr_assert_str_eq(attempt, "", "rolled back: still PROCESSED");
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

Test(outbox, insert_refuses_a_row_that_breaks_the_invariants)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row;
	int64_t n;

	fx_row(&row, "m1", 1);
	tbx__uuid(row.msgs[0].token); /* a token without an attempt */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &row), TBX_EINVAL);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_count(store, NULL, &n), TBX_OK);
	cr_assert_eq(n, 0);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

Test(outbox, tokened_row_inserted_at_once_round_trips)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row, got;

	fx_row(&row, "m1", 2);
	fx_tokened(&row, 9);
	fx_insert(store, GRP, &row);
	tbx__row_init(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m1", &got), TBX_OK);
	fx_assert_rows_equal(&got, &row);
	tbx__row_clear(&row);
	tbx__row_clear(&got);
	tbx_outbox_close(store);
}

Test(outbox, delete_takes_the_rows_messages_with_it)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	sqlite3 *db = tbx_outbox_db(store);
	tbx__row_t row, got;

	fx_row(&row, "m1", 3);
	fx_insert(store, GRP, &row);
	tbx__row_clear(&row);
	fx_row(&row, "m2", 2);
	fx_insert(store, GRP, &row);
	cr_assert_eq(fx_int(db, "SELECT count(*) FROM tbx_outbox WHERE msgs "
				"IS NOT NULL"),
		     2);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_delete(store, GRP, "m1"), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(fx_int(db, "SELECT count(*) FROM tbx_outbox"), 1);
	tbx__row_init(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m1", &got), TBX_ENOENT);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m2", &got), TBX_OK);
	cr_assert_eq(got.msg_cnt, 2);
	tbx__row_clear(&got);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

Test(outbox, rollback_discards_the_transaction_and_is_a_no_op_outside_one)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t row;
	int64_t n;

	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	fx_row(&row, "m1", 1);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &row), TBX_OK);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	cr_assert_eq(tbx_outbox_count(store, NULL, &n), TBX_OK);
	cr_assert_eq(n, 0);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

Test(outbox, undo_discards_only_the_messages_savepoint)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	tbx__row_t kept, undone;
	int found;

	fx_row(&kept, "kept", 1);
	fx_row(&undone, "undone", 1);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_savepoint(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &kept), TBX_OK);
	cr_assert_eq(tbx_outbox_release(store), TBX_OK);
	cr_assert_eq(tbx_outbox_savepoint(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &undone), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(store, GRP, "in", 0, 9), TBX_OK);
	cr_assert_eq(tbx_outbox_undo(store), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "kept", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 1);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "undone", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 0);
	tbx__row_clear(&kept);
	tbx__row_clear(&undone);
	tbx_outbox_close(store);
}

Test(outbox, ingress_offsets_are_upserted_per_group_and_partition)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	int64_t next = 0;

	cr_assert_eq(tbx_outbox_ingress_get(store, GRP, "in", 0, &next),
		     TBX_OK);
	cr_assert_eq(next, -1, "none yet");
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(store, GRP, "in", 0, 5), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(store, GRP, "in", 0, 9), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(store, GRP, "in", 1, 2), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_get(store, GRP, "in", 0, &next),
		     TBX_OK);
	cr_assert_eq(next, 9);
	cr_assert_eq(tbx_outbox_ingress_get(store, GRP, "in", 1, &next),
		     TBX_OK);
	cr_assert_eq(next, 2);
	cr_assert_eq(tbx_outbox_ingress_get(store, "g2", "in", 0, &next),
		     TBX_OK);
	cr_assert_eq(next, -1);
	cr_assert_eq(tbx_outbox_ingress_get(store, GRP, "other", 0, &next),
		     TBX_OK);
	cr_assert_eq(next, -1);
	cr_assert_eq(
	    fx_int(tbx_outbox_db(store), "SELECT count(*) FROM tbx_ingress"), 2,
	    "one row per partition");
	tbx_outbox_close(store);
}

Test(outbox, dead_letter_is_recorded_with_its_reason)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	sqlite3 *db = tbx_outbox_db(store);
	tbx__row_t row;

	fx_row(&row, "m1", 1);
	row.kind = TBX_ROW_DEAD_LETTER;
	row.error = tbx__strdup("rejected");
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &row), TBX_OK);
	cr_assert_eq(tbx_outbox_dead_letter_add(store, GRP, &row, "in.dlq", 4),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(fx_int(db,
			    "SELECT count(*) FROM tbx_dead_letters WHERE "
			    "grp = 'g1' AND msg_id = 'm1' AND dlq_topic = "
			    "'in.dlq' AND error = 'rejected' AND attempts = "
			    "4 AND in_partition = 3 AND in_offset = 42"),
		     1);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
}

/*
 * Rows in memory.
 */

Test(row, add_copies_every_field_and_mints_a_fresh_id)
{
	char key[] = "key", payload[] = "payload", hdr[] = "\0\0";
	tbx__row_t row;

	tbx__row_init(&row);
	for (int i = 0; i < 9; i++)
		cr_assert_eq(
		    tbx__row_add(&row, "t", "T", key, 3, payload, 7, hdr, 2),
		    TBX_OK);
	key[0] = payload[0] = 'X';
	cr_assert_eq(row.msg_cnt, 9);
	for (size_t i = 0; i < row.msg_cnt; i++) {
		cr_assert(tbx__is_uuid(row.msgs[i].id, strlen(row.msgs[i].id)));
		cr_assert_str_eq(row.msgs[i].token, "");
		cr_assert_eq(memcmp(row.msgs[i].key, "key", 3), 0);
		cr_assert_eq(memcmp(row.msgs[i].payload, "payload", 7), 0);
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(row.msgs[i].id, row.msgs[j].id);
	}
	cr_assert_eq(tbx__row_add(&row, NULL, "T", NULL, 0, NULL, 0, NULL, 0),
		     TBX_EINVAL);
	tbx__row_clear(&row);
	cr_assert_eq(row.msg_cnt, 0);
	cr_assert_null(row.msgs);
}

Test(row, clear_msgs_keeps_the_row_and_its_array)
{
	tbx__row_t row;

	fx_row(&row, "m1", 3);
	row.error = tbx__strdup("e");
	tbx__row_clear_msgs(&row);
	cr_assert_eq(row.msg_cnt, 0);
	cr_assert_str_eq(row.msg_id, "m1");
	cr_assert_str_eq(row.error, "e");
	cr_assert_eq(tbx__row_add(&row, "t", "T", NULL, 0, NULL, 0, NULL, 0),
		     TBX_OK);
	tbx__row_clear(&row);
}

Test(row, check_accepts_processed_and_tokened_rows)
{
	tbx__row_t row;

	fx_row(&row, "m1", 2);
	cr_assert(tbx_outbox_row_check(&row), "PROCESSED");
	fx_tokened(&row, 1);
	cr_assert(tbx_outbox_row_check(&row), "TOKENED");
	tbx__row_clear(&row);
	fx_row(&row, "m2", 0);
	cr_assert(tbx_outbox_row_check(&row), "no outgoing message");
	tbx__row_clear(&row);
}

Test(row, check_rejects_rows_that_break_the_lifecycle)
{
	tbx__row_t row;

	cr_assert_not(tbx_outbox_row_check(NULL));

	fx_row(&row, "m1", 2);
	tbx__uuid(row.msgs[0].token);
	cr_assert_not(tbx_outbox_row_check(&row), "token without attempt");
	tbx__row_clear(&row);

	fx_row(&row, "m1", 2);
	row.mint_seq = 4;
	cr_assert_not(tbx_outbox_row_check(&row), "mint_seq without attempt");
	tbx__row_clear(&row);

	fx_row(&row, "m1", 2);
	fx_tokened(&row, 4);
	row.msgs[1].token[0] = '\0';
	cr_assert_not(tbx_outbox_row_check(&row), "attempt, missing token");
	tbx__row_clear(&row);

	fx_row(&row, "m1", 2);
	fx_tokened(&row, 0);
	cr_assert_not(tbx_outbox_row_check(&row), "attempt without mint_seq");
	tbx__row_clear(&row);

	fx_row(&row, "m1", 2);
	fx_tokened(&row, 4);
	tbx__strlcpy(row.attempt, "not-a-uuid", sizeof(row.attempt));
	cr_assert_not(tbx_outbox_row_check(&row), "attempt not a UUID");
	tbx__row_clear(&row);

	fx_row(&row, "m1", 1);
	row.kind = 7;
	cr_assert_not(tbx_outbox_row_check(&row), "unknown kind");
	tbx__row_clear(&row);

	fx_row(&row, "", 1);
	cr_assert_not(tbx_outbox_row_check(&row), "no message id");
	tbx__row_clear(&row);

	fx_row(&row, "m1", 1);
	/* tbx__row_add() made the message's fields one allocation, which
	 * tbx__row_clear() frees; the malformed headers are not in it. */
	static char bad_headers[] = "\0\5ab";
	row.msgs[0].headers = bad_headers;
	row.msgs[0].headers_len = 4;
	cr_assert_not(tbx_outbox_row_check(&row), "malformed headers");
	tbx__row_clear(&row);
}

/*
 * The headers blob.
 */

Test(hdrs, encode_then_next_round_trips)
{
	tbx_header_t in[] = {{"trace-id", "\0\1\2\xff", 4},
			     {"", "v", 1},
			     {"null", NULL, 0},
			     {"empty", "", 0},
			     {"dup", "1", 1},
			     {"dup", "2", 1}};
	size_t cnt = sizeof(in) / sizeof(in[0]), len, pos = 0, i = 0;
	tbx_header_t h;
	void *blob;
	int r;

	cr_assert_eq(tbx__hdrs_encode(in, cnt, &blob, &len), TBX_OK);
	cr_assert_not_null(blob);
	while ((r = tbx__hdrs_next(blob, len, &pos, &h)) == 1) {
		cr_assert_lt(i, cnt);
		cr_assert_str_eq(h.name, in[i].name);
		if (!in[i].value) {
			cr_assert_null(h.value);
		} else {
			cr_assert_not_null(h.value, "empty is not null");
			cr_assert_eq(h.len, in[i].len);
			cr_assert_eq(memcmp(h.value, in[i].value, h.len), 0);
		}
		i++;
	}
	cr_assert_eq(r, 0);
	cr_assert_eq(i, cnt);
	cr_assert_eq(pos, len);
	free(blob);
}

Test(hdrs, no_headers_encode_to_nothing)
{
	void *blob = (void *)1;
	size_t len = 9, pos = 0;
	tbx_header_t h;

	cr_assert_eq(tbx__hdrs_encode(NULL, 0, &blob, &len), TBX_OK);
	cr_assert_null(blob);
	cr_assert_eq(len, 0);
	cr_assert_eq(tbx__hdrs_next(NULL, 0, &pos, &h), 0);
}

Test(hdrs, encode_refuses_a_header_without_name)
{
	tbx_header_t in[] = {{NULL, "v", 1}};
	void *blob;
	size_t len;

	cr_assert_eq(tbx__hdrs_encode(in, 1, &blob, &len), TBX_EINVAL);
	cr_assert_null(blob);
}

/* Every blob here is one header short or wrong in one field. */
Test(hdrs, malformed_blobs_are_rejected)
{
	static const struct {
		const char *what;
		const char *bytes;
		size_t len;
	} bad[] = {
	    {"one byte", "\0", 1},
	    {"name length 0", "\0\0\0\0\0\0\0", 7},
	    {"name past the end",
	     "\0\x09"
	     "ab\0",
	     5},
	    {"name without NUL", "\0\2ab\0\0\0\0\0", 9},
	    {"NUL inside the name", "\0\3a\0\0\0\0\0\0\0", 10},
	    {"has_value 2", "\0\2a\0\2\0\0\0\0", 9},
	    {"null with a length", "\0\2a\0\0\0\0\0\1x", 10},
	    {"value past the end", "\0\2a\0\1\0\0\0\5xy", 11},
	    {"huge value length", "\0\2a\0\1\xff\xff\xff\xff", 9},
	    {"no value header", "\0\2a\0\1\0", 6},
	};
	tbx_header_t h;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t pos = 0;
		int r;

		while ((r = tbx__hdrs_next(bad[i].bytes, bad[i].len, &pos,
					   &h)) == 1)
			;
		cr_assert_eq(r, -1, "%s", bad[i].what);
	}
}

Test(hdrs, every_truncation_of_a_valid_blob_is_rejected)
{
	tbx_header_t in[] = {{"a", "xyz", 3}, {"bb", NULL, 0}, {"c", "", 0}};
	size_t len, ends[3], pos = 0, k = 0;
	tbx_header_t h;
	void *blob;

	cr_assert_eq(tbx__hdrs_encode(in, 3, &blob, &len), TBX_OK);
	while (tbx__hdrs_next(blob, len, &pos, &h) == 1)
		ends[k++] = pos;
	cr_assert_eq(k, 3);
	for (size_t cut = 1; cut < len; cut++) {
		int boundary = cut == ends[0] || cut == ends[1];
		int r;

		pos = 0;
		while ((r = tbx__hdrs_next(blob, cut, &pos, &h)) == 1)
			;
		cr_assert_eq(r, boundary ? 0 : -1, "cut at %zu", cut);
	}
	pos = len + 1;
	cr_assert_eq(tbx__hdrs_next(blob, len, &pos, &h), -1, "pos past end");
	free(blob);
}

/* ---- what differs between an embedded and a server store ---------- */

TestSuite(seam, .init = fx_setup, .fini = fx_teardown);

Test(seam, native_is_the_sqlite_connection_and_nothing_else)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));

	cr_assert_not_null(tbx_outbox_native(store, TBX_BACKEND_SQLITE));
	cr_assert_eq(tbx_outbox_native(store, TBX_BACKEND_SQLITE),
		     (void *)tbx_outbox_db(store));
	cr_assert_null(tbx_outbox_native(store, TBX_BACKEND_PG));
	tbx_outbox_close(store);
}

Test(seam, relaxed_lowers_synchronous_and_restores_the_configured_level)
{
	tbx__db_opts_t opts;
	tbx_outbox_t *full = fx_open(fx_path("full.db")), *normal = NULL;
	char err[256];

	cr_assert_eq(fx_int(tbx_outbox_db(full), "PRAGMA synchronous"), 2);
	cr_assert_eq(tbx_outbox_relaxed(full, 1), TBX_OK);
	cr_assert_eq(fx_int(tbx_outbox_db(full), "PRAGMA synchronous"), 1);
	cr_assert_eq(tbx_outbox_relaxed(full, 0), TBX_OK);
	cr_assert_eq(fx_int(tbx_outbox_db(full), "PRAGMA synchronous"), 2);
	/* Configured NORMAL stays NORMAL. */
	tbx__db_opts_init(&opts);
	opts.synchronous_full = 0;
	cr_assert_eq(tbx_outbox_open(fx_path("normal.db"), &opts, &normal, err,
				     sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_outbox_relaxed(normal, 1), TBX_OK);
	cr_assert_eq(tbx_outbox_relaxed(normal, 0), TBX_OK);
	cr_assert_eq(fx_int(tbx_outbox_db(normal), "PRAGMA synchronous"), 1);
	tbx_outbox_close(full);
	tbx_outbox_close(normal);
}

Test(seam, lock_ids_is_nothing_inside_the_write_transaction)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	const char *ids[] = {"m1", "m2", "m1"};

	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_lock_ids(store, GRP, ids, 3), TBX_OK);
	cr_assert_eq(tbx_outbox_lock_ids(store, GRP, ids, 0), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx_outbox_close(store);
}

Test(seam, exec_binds_dollar_parameters_by_number_and_counts_changes)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	sqlite3 *db = tbx_outbox_db(store);
	const char *p3[] = {"a", NULL, "7"};
	const char *p1[] = {"a"};
	int64_t changes = -1;

	cr_assert_eq(tbx_outbox_exec(store,
				     "CREATE TABLE IF NOT EXISTS t(k TEXT, "
				     "v TEXT, n BIGINT)",
				     NULL, 0, &changes),
		     TBX_OK);
	cr_assert_eq(changes, 0);
	/* Out of order and repeated, as PostgreSQL allows. */
	cr_assert_eq(tbx_outbox_exec(store,
				     "INSERT INTO t(n, k, v) VALUES ($3, $1, "
				     "$2), ($3 + 1, $1 || $1, $2)",
				     p3, 3, &changes),
		     TBX_OK);
	cr_assert_eq(changes, 2);
	cr_assert_eq(fx_int(db, "SELECT COUNT(*) FROM t WHERE v IS NULL"), 2);
	cr_assert_eq(fx_int(db, "SELECT n FROM t WHERE k = 'aa'"), 8);
	cr_assert_eq(fx_int(db, "SELECT typeof(n) = 'integer' FROM t LIMIT 1"),
		     1);
	/* A query changes nothing, whatever the statement before did. */
	cr_assert_eq(tbx_outbox_exec(store, "SELECT * FROM t WHERE k = $1", p1,
				     1, &changes),
		     TBX_OK);
	cr_assert_eq(changes, 0);
	cr_assert_eq(tbx_outbox_exec(store, "UPDATE t SET v = 'x' WHERE k = $1",
				     p1, 1, &changes),
		     TBX_OK);
	cr_assert_eq(changes, 1);
	cr_assert_eq(
	    tbx_outbox_exec(store, "DELETE FROM t -- all\n;  ", NULL, 0, NULL),
	    TBX_OK);
	cr_assert_eq(fx_int(db, "SELECT COUNT(*) FROM t"), 0);
	tbx_outbox_close(store);
}

Test(seam, exec_refuses_what_is_not_one_statement_on_dollar_parameters)
{
	tbx_outbox_t *store = fx_open(fx_path("s.db"));
	const char *p2[] = {"a", "b"};
	int64_t changes = -1;

	cr_assert_eq(
	    tbx_outbox_exec(store, "CREATE TABLE t(k TEXT)", NULL, 0, NULL),
	    TBX_OK);
	/* A second statement, even a harmless one, is refused unrun. */
	cr_assert_eq(tbx_outbox_exec(store,
				     "INSERT INTO t VALUES ('x'); DELETE FROM "
				     "t",
				     NULL, 0, &changes),
		     TBX_EINVAL);
	cr_assert_eq(fx_int(tbx_outbox_db(store), "SELECT COUNT(*) FROM t"), 0);
	cr_assert_eq(tbx_outbox_exec(store, "INSERT INTO nowhere VALUES (1)",
				     NULL, 0, NULL),
		     TBX_EINVAL);
	cr_assert_eq(tbx_outbox_exec(store, "", NULL, 0, NULL), TBX_EINVAL);
	cr_assert_eq(
	    tbx_outbox_exec(store, "INSERT INTO t VALUES (?)", p2, 1, NULL),
	    TBX_EINVAL, "an anonymous parameter");
	cr_assert_eq(
	    tbx_outbox_exec(store, "INSERT INTO t VALUES (:k)", p2, 1, NULL),
	    TBX_EINVAL, "a named parameter");
	cr_assert_eq(
	    tbx_outbox_exec(store, "INSERT INTO t VALUES ($2)", p2, 1, NULL),
	    TBX_EINVAL, "a parameter past n");
	cr_assert_eq(
	    tbx_outbox_exec(store, "INSERT INTO t VALUES ($1)", p2, 2, NULL),
	    TBX_EINVAL, "$2 unused");
	cr_assert_eq(
	    tbx_outbox_exec(store, "INSERT INTO t VALUES ($1)", NULL, 1, NULL),
	    TBX_EINVAL, "no params");
	cr_assert_eq(fx_int(tbx_outbox_db(store), "SELECT COUNT(*) FROM t"), 0);
	cr_assert_str_neq(
	    tbx_outbox_errmsg(store) ? tbx_outbox_errmsg(store) : "", "");
	tbx_outbox_close(store);
}
