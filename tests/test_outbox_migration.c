/* Forward migrations keep what a file holds. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/outbox.h"
#include "tokens/tokens.h"
#include "support.h"

static void exec(const char *path, const char *sql)
{
	sqlite3 *db;

	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s",
		     sqlite3_errmsg(db));
	sqlite3_close(db);
}

Test(migration, a_version_1_file_is_migrated_and_keeps_its_rows)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "s.db");
	tbx__db_opts_t opts;
	tbx_outbox_t *store;
	char err[256];

	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(store);
	/* What a version 1 file looks like, with a pending row. */
	exec(path, "DROP TABLE tbx_inflight; DROP TABLE tbx_edge;"
		   "ALTER TABLE tbx_outbox DROP COLUMN stuck_ms;"
		   "DROP TABLE tbx_store_info; DROP TABLE tbx_alarms;"
		   "ALTER TABLE tbx_subscriptions DROP COLUMN used_ms;"
		   "DROP TABLE tbx_undelivered; ALTER TABLE tbx_outbox DROP "
		   "COLUMN dispatch_failures;"
		   "PRAGMA user_version = 1;"
		   "CREATE INDEX tbx_outbox_created ON tbx_outbox "
		   "(created_ms);"
		   "INSERT INTO tbx_outbox (grp, msg_id, in_topic, "
		   "in_partition, in_offset, created_ms) VALUES ('g', "
		   "'00000000-0000-4000-8000-000000000001', 't', 0, 7, 1)");
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), 1);

	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(store);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM tbx_inflight"), 0);
	cr_assert_eq(tt_count(path, "SELECT in_offset FROM tbx_outbox"), 7);
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM sqlite_master WHERE "
				    "name = 'tbx_outbox_created'"),
		     0, "version 3 drops the outbox's created_ms index");
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM tbx_edge"), 0,
		     "version 4 adds the ingress edge");
	cr_assert_eq(tt_count(path, "SELECT dispatch_failures FROM tbx_outbox"),
		     0, "version 6 counts permanent delivery failures");
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM tbx_undelivered"), 0);
	tt_rmrf(dir);
	free(dir);
	free(path);
}

Test(migration, a_version_3_marker_keeps_its_count_and_blames_nobody)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "s.db");
	tbx__db_opts_t opts;
	tbx_outbox_t *store;
	tbx__inflight_t f;
	char err[256];
	int found;

	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(store);
	/* What a version 3 file looks like: a death counted at offset 4
	 * of one partition, an A in progress on another. */
	exec(path, "DROP TABLE tbx_inflight; DROP TABLE tbx_edge; ALTER TABLE "
		   "tbx_outbox DROP "
		   "COLUMN stuck_ms;"
		   "DROP TABLE tbx_store_info; DROP TABLE tbx_alarms;"
		   "ALTER TABLE tbx_subscriptions DROP COLUMN used_ms;"
		   "DROP TABLE tbx_undelivered; ALTER TABLE tbx_outbox DROP "
		   "COLUMN dispatch_failures;"
		   "PRAGMA user_version = 3;"
		   "CREATE TABLE tbx_inflight (grp TEXT NOT NULL, topic TEXT "
		   "NOT NULL, \"partition\" INTEGER NOT NULL, first_offset "
		   "INTEGER NOT NULL, last_offset INTEGER NOT NULL, crashes "
		   "INTEGER NOT NULL, suspect_until INTEGER NOT NULL, PRIMARY "
		   "KEY (grp, topic, \"partition\")) WITHOUT ROWID;"
		   "INSERT INTO tbx_inflight VALUES ('g', 't', 0, 4, 4, 1, 9),"
		   " ('g', 't', 1, 2, 6, 0, 6)");

	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(tbx_outbox_inflight_get(store, "g", "t", 0, &f, &found),
		     TBX_OK);
	cr_assert(found);
	cr_assert_eq(f.count_offset, 4, "the death stays with its record");
	cr_assert_eq(f.crashes, 1);
	cr_assert_eq(f.retries, 0);
	cr_assert_eq(f.lone, 0, "an A in progress of version 3 blames nobody");
	cr_assert_eq(f.suspect_until, 9);
	cr_assert_eq(tbx_outbox_inflight_get(store, "g", "t", 1, &f, &found),
		     TBX_OK);
	cr_assert_eq(f.count_offset, -1);
	cr_assert_eq(f.lone, 0);
	cr_assert_eq(f.first, 2);
	tbx_outbox_close(store);
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM tbx_outbox WHERE "
				    "stuck_ms IS NOT NULL"),
		     0);
	tt_rmrf(dir);
	free(dir);
	free(path);
}

/* What a version 5 file looks like: no store id, no alarms, no last-used
 * time of subscriptions. */
static void make_version_5(const char *path)
{
	tbx__db_opts_t opts;
	tbx_outbox_t *store;
	char err[256];

	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(store);
	exec(path, "DROP TABLE tbx_store_info; DROP TABLE tbx_alarms;"
		   "ALTER TABLE tbx_subscriptions DROP COLUMN used_ms;"
		   "DROP TABLE tbx_undelivered; ALTER TABLE tbx_outbox DROP "
		   "COLUMN dispatch_failures;"
		   "INSERT INTO tbx_subscriptions (topic, grp, since_seq, "
		   "created_ms) VALUES ('t', 'g', 1, 5);"
		   "INSERT INTO tbx_tokens (token, grp, mint_seq, created_ms) "
		   "VALUES ('00000000-0000-4000-8000-000000000002', 'g', 2, 6);"
		   "PRAGMA user_version = 5;");
}

Test(migration, an_existing_store_gets_an_id_that_it_keeps)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "t.db");
	char *other = tt_path(dir, "u.db");
	tbx__db_opts_t opts;
	tbx_tokens_t *t;
	char err[256], id[TBX_UUID_LEN + 1], again[TBX_UUID_LEN + 1],
	    id2[TBX_UUID_LEN + 1];
	int64_t since = 0;

	make_version_5(path);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), 5);
	tbx__db_opts_init(&opts);
	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(tbx_tokens_store_id(t, id), TBX_OK);
	cr_assert(tbx__is_uuid(id, strlen(id)), "'%s'", id);
	/* What the file held is kept, and the subscription still works. */
	cr_assert_eq(tbx_tokens_subscription(t, "t", "g", &since), TBX_OK);
	cr_assert_eq(since, 1);
	tbx_tokens_close(t);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM tbx_tokens"), 1);

	/* Opened again: the same id. */
	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(tbx_tokens_store_id(t, again), TBX_OK);
	tbx_tokens_close(t);
	cr_assert_str_eq(id, again);

	/* Another store gets another id. */
	cr_assert_eq(
	    tbx_tokens_sqlite_open(other, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(tbx_tokens_store_id(t, id2), TBX_OK);
	tbx_tokens_close(t);
	cr_assert_str_neq(id, id2);
	tt_rmrf(dir);
	free(dir);
	free(path);
	free(other);
}
