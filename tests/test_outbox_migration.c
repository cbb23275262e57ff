/* Forward migrations keep what a file holds. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdlib.h>

#include "outbox/outbox.h"
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
	tt_rmrf(dir);
	free(dir);
	free(path);
}
