/* Forward migrations keep what a file holds. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/str.h"
#include "consumer/recover.h"
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

/* The version 7 table of outgoing messages, which version 8 folds into
 * the rows. */
#define MSG_TABLE_V7                                                           \
	"CREATE TABLE tbx_outbox_msg (grp TEXT NOT NULL, msg_id TEXT NOT "     \
	"NULL, seq INTEGER NOT NULL, out_id TEXT NOT NULL, topic TEXT NOT "    \
	"NULL, type TEXT NOT NULL, key BLOB, payload BLOB, headers BLOB, "     \
	"token TEXT, PRIMARY KEY (grp, msg_id, seq), FOREIGN KEY (grp, "       \
	"msg_id) REFERENCES tbx_outbox (grp, msg_id) ON DELETE CASCADE);"
/* What version 16 added (a given-up message's set bit), version 15 (when
 * a dead letter was replayed), version 14
 * (the edge entry's set, bit and partition), version 13 (the outbox row's
 * set bit), version 12, 11, 10, 9 and 8, taken away again (each column
 * before the one its CHECK names). */
#define UNDO_V16                                                               \
	"ALTER TABLE tbx_undelivered DROP COLUMN tpart;"                       \
	"ALTER TABLE tbx_undelivered DROP COLUMN tbit;"                        \
	"ALTER TABLE tbx_undelivered DROP COLUMN tset;"
#define UNDO_V15                                                               \
	UNDO_V16 "ALTER TABLE tbx_dead_letters DROP COLUMN replayed_ms;"
#define UNDO_V14                                                               \
	UNDO_V15 "ALTER TABLE tbx_edge DROP COLUMN tpart;"                     \
		 "ALTER TABLE tbx_edge DROP COLUMN tbit;"                      \
		 "ALTER TABLE tbx_edge DROP COLUMN tset;"
#define UNDO_TBIT UNDO_V14 "ALTER TABLE tbx_outbox DROP COLUMN in_tbit;"
#define UNDO_V12                                                               \
	UNDO_TBIT "DROP TABLE tbx_cover_msg; DROP TABLE tbx_obatch;"           \
		  "ALTER TABLE tbx_inflight DROP COLUMN gen;"
#define UNDO_V11 UNDO_V12 "DROP TABLE tbx_breg; DROP TABLE tbx_tset;"
#define UNDO_V10 UNDO_V11 "DROP TABLE tbx_seq_ranges;"
#define UNDO_V9	 UNDO_V10 "DROP TABLE tbx_bindings;"
#define UNDO_V8	 UNDO_V9 "ALTER TABLE tbx_outbox DROP COLUMN msgs;" MSG_TABLE_V7

/* A version 11 store gets the batch rows' tables, empty, and a
 * generation of 0 on every partition it has; its outbox rows and markers
 * stay as they are (the protocol converts them when it uses batch
 * rows). */
Test(migration, a_version_11_file_gets_the_batch_tables_and_keeps_its_rows)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "s.db");
	tbx__db_opts_t opts;
	tbx_outbox_t *store;
	int32_t parts[2] = {0, 5};
	int64_t gens[2] = {-1, -1};
	char err[256];

	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(store);
	exec(path, UNDO_V12 "PRAGMA user_version = 11;"
			    "INSERT INTO tbx_inflight (grp, topic, "
			    "\"partition\", first_offset, last_offset, "
			    "crashes, suspect_until) VALUES ('g', 't', 0, 4, "
			    "9, 1, 0);"
			    "INSERT INTO tbx_outbox (grp, msg_id, in_topic, "
			    "in_partition, in_offset, created_ms) VALUES "
			    "('g', '00000000-0000-4000-8000-000000000001', "
			    "'t', 0, 7, 1)");
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM sqlite_schema WHERE "
				    "name IN ('tbx_obatch', 'tbx_cover_msg')"),
		     0);
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_outbox_gens_get(store, "g", "t", parts, 2, gens),
		     TBX_OK);
	cr_assert_eq(gens[0], 0);
	cr_assert_eq(gens[1], 0);
	tbx_outbox_close(store);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM tbx_obatch"), 0);
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM tbx_cover_msg"), 0);
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM tbx_outbox WHERE "
				    "in_offset = 7"),
		     1);
	cr_assert_eq(tt_count(path, "SELECT crashes * 100 + last_offset FROM "
				    "tbx_inflight WHERE grp = 'g'"),
		     109);
	tt_rmrf(dir);
	free(dir);
	free(path);
}

/* A version 8 store gets the table of the token store its workers use,
 * empty until a worker starts. */
Test(migration, a_version_8_file_gets_its_bindings_table)
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
	exec(path, UNDO_V9 "PRAGMA user_version = 8;");
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx_outbox_binding_set(store, "g", "id-1", "t.db", NULL),
		     TBX_OK);
	tbx_outbox_close(store);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM tbx_bindings WHERE "
				    "grp = 'g' AND tokens_id = 'id-1'"),
		     1);
	tt_rmrf(dir);
	free(dir);
	free(path);
}

/* A version 9 store's numbers, all taken before its sequence had ranges,
 * stay its own: the migration opens one range from 1, which the first
 * opening closes at the sequence's value before it starts its own. */
Test(migration, a_version_9_file_keeps_every_number_it_issued)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "t.db");
	char tok[TBX_UUID_LEN + 1], err[256];
	tbx__mint_item_t item = {tok, "t"};
	tbx__mint_req_t req = {NULL, NULL, &item, 1};
	tbx__db_opts_t opts;
	tbx_tokens_t *t;
	int64_t seq = 0, before = tbx__now_ms() * TBX__SEQ_PER_MS;
	int issued;

	tbx__db_opts_init(&opts);
	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	tbx_tokens_close(t);
	exec(path, UNDO_V10 "PRAGMA user_version = 9;"
			    "UPDATE tbx_seq SET value = 41;"
			    "INSERT INTO tbx_subscriptions (topic, grp, "
			    "since_seq, created_ms, used_ms) VALUES ('t', "
			    "'g', 5, 1, 1);");
	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM tbx_seq_ranges WHERE "
				    "lo = 1 AND hi = 41"),
		     1, "the numbers before, closed at the value");
	for (int64_t n = 1; n <= 41; n++) {
		cr_assert_eq(tbx_tokens_seq_issued(t, n, &issued), TBX_OK);
		cr_assert_eq(issued, 1, "%lld", (long long)n);
	}
	cr_assert_eq(tbx_tokens_seq_issued(t, 42, &issued), TBX_OK);
	cr_assert_eq(issued, 0);
	tbx__uuid(tok);
	cr_assert_eq(tbx_tokens_mint(t, NULL, &req, 1, &seq, NULL), TBX_OK);
	cr_assert_geq(seq, before, "the new range starts at the clock");
	cr_assert_eq(tbx_tokens_seq_issued(t, seq, &issued), TBX_OK);
	cr_assert_eq(issued, 1);
	tbx_tokens_close(t);
	tt_rmrf(dir);
	free(dir);
	free(path);
}

/* A version 10 store keeps its tokens and subscriptions and gets the
 * token sets' tables, empty, with their constraints; its token store
 * answers that it has them and mints sets. */
Test(migration, a_version_10_file_gets_the_token_sets)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "t.db");
	char set_id[TBX_UUID_LEN + 1], err[256];
	tbx__set_item_t item = {set_id, "t", 0, 3};
	tbx__set_req_t req = {"att-1", "row-1", &item, 1};
	tbx__db_opts_t opts;
	tbx_tokens_t *t;
	uint64_t rows = 0;
	int64_t pending = -1;
	int yes = -1;
	sqlite3 *db;

	tbx__db_opts_init(&opts);
	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	tbx_tokens_close(t);
	exec(path, UNDO_V11 "PRAGMA user_version = 10;"
			    "INSERT INTO tbx_subscriptions (topic, grp, "
			    "since_seq, created_ms, used_ms) VALUES ('t', "
			    "'g', 5, 1, 1);"
			    "INSERT INTO tbx_tokens (token, grp, mint_seq, "
			    "created_ms) VALUES "
			    "('00000000-0000-4000-8000-000000000002', 'g', 6, "
			    "2);");
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM sqlite_master WHERE "
				    "name IN ('tbx_tset', 'tbx_breg')"),
		     0);
	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM tbx_tokens"), 1,
		     "the tokens in flight stay");
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM tbx_tset"), 0);
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM tbx_breg"), 0);
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM sqlite_master WHERE "
				    "name = 'tbx_breg_send'"),
		     1, "the sweeper's index");
	cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_SETS, &yes), TBX_OK);
	cr_assert_eq(yes, 1);
	tbx__uuid(set_id);
	cr_assert_eq(tbx_tokens_sets_mint(t, "g0", &req, 1, NULL, &rows),
		     TBX_OK);
	cr_assert_eq(rows, 1, "a row for the group subscribed before");
	cr_assert_eq(tbx_tokens_sets_count(t, "g", NULL, &pending, NULL),
		     TBX_OK);
	cr_assert_eq(pending, 3);
	tbx_tokens_close(t);

	/* The constraints: bits between 1 and 65536, a bitmap of their
	 * length, a JSON array of set ids. */
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	static const char *const bad[] = {
	    "INSERT INTO tbx_tset VALUES ('s', 'g', 't', 0, 1, 0, x'', 1)",
	    "INSERT INTO tbx_tset VALUES ('s', 'g', 't', 0, 1, 65537, "
	    "zeroblob(8193), 1)",
	    "INSERT INTO tbx_tset VALUES ('s', 'g', 't', 0, 1, 9, x'ff', 1)",
	    "INSERT INTO tbx_tset VALUES ('s', 'g', 't', 0, 1, 8, 'x', 1)",
	    "INSERT INTO tbx_tset VALUES ('s', 'g', 't', -1, 1, 8, x'ff', 1)",
	    "INSERT INTO tbx_breg VALUES ('a', 'g', 'r', 'not json', 1)",
	    "INSERT INTO tbx_breg VALUES ('a', 'g', 'r', '{}', 1)",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(sqlite3_exec(db, bad[i], NULL, NULL, NULL) & 0xff,
			     SQLITE_CONSTRAINT, "%s", bad[i]);
	cr_assert_eq(sqlite3_exec(db,
				  "INSERT INTO tbx_tset VALUES ('s', 'g', 't', "
				  "0, 1, 65536, zeroblob(8192), 1)",
				  NULL, NULL, NULL),
		     SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_close(db);
	tt_rmrf(dir);
	free(dir);
	free(path);
}

/* The version before the outbox row's set bit: its rows in flight keep
 * their per-message tokens (in_tbit NULL); the migrated file keeps a
 * record's token set and bit, and refuses a bit beyond any set or
 * without its set. */
Test(migration, an_outbox_row_gets_the_set_bit_of_its_record)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "s.db");
	tbx__db_opts_t opts;
	tbx_outbox_t *store;
	tbx__row_t row;
	char err[256], sql[512];
	sqlite3 *db;

	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(store);
	snprintf(sql, sizeof(sql), UNDO_TBIT "PRAGMA user_version = %d;", 12);
	exec(path, sql);
	exec(path, "INSERT INTO tbx_outbox (grp, msg_id, in_topic, "
		   "in_partition, in_offset, in_token, created_ms) VALUES "
		   "('g', '00000000-0000-4000-8000-000000000001', 't', 0, 7, "
		   "'00000000-0000-4000-8000-000000000002', 1)");
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	tbx__row_init(&row);
	cr_assert_eq(tbx_outbox_row_load(store, "g",
					 "00000000-0000-4000-8000-000000000001",
					 &row),
		     TBX_OK);
	cr_assert_eq(row.in_set, 0, "a per-message token stays one");
	cr_assert_str_eq(row.in_token, "00000000-0000-4000-8000-000000000002");
	tbx__strlcpy(row.msg_id, "00000000-0000-4000-8000-000000000003",
		     sizeof(row.msg_id));
	row.in_set = 1;
	row.in_tbit = 65535;
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, "g", &row), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx__row_clear(&row);
	cr_assert_eq(tbx_outbox_row_load(store, "g",
					 "00000000-0000-4000-8000-000000000003",
					 &row),
		     TBX_OK);
	cr_assert(row.in_set && row.in_tbit == 65535);
	cr_assert_str_eq(row.in_token, "00000000-0000-4000-8000-000000000002");
	row.in_tbit = 65536;
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, "g", &row), TBX_EINVAL);
	tbx_outbox_rollback(store);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
	cr_assert_eq(tt_count(path, "SELECT COUNT(*) FROM tbx_outbox WHERE "
				    "in_tbit IS NULL"),
		     1);
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db,
				  "UPDATE tbx_outbox SET in_tbit = 65536 "
				  "WHERE in_tbit IS NOT NULL",
				  NULL, NULL, NULL) &
			 0xff,
		     SQLITE_CONSTRAINT);
	cr_assert_eq(sqlite3_exec(db,
				  "UPDATE tbx_outbox SET in_token = NULL "
				  "WHERE in_tbit IS NOT NULL",
				  NULL, NULL, NULL) &
			 0xff,
		     SQLITE_CONSTRAINT, "a bit needs its set");
	sqlite3_close(db);
	tt_rmrf(dir);
	free(dir);
	free(path);
}

/* The version before the edge's token sets: an entry of a per-message
 * token keeps it (tset, tbit, tpart NULL); the migrated file takes an
 * entry of a set, and refuses a bit without its set or its partition. */
Test(migration, an_edge_entry_keeps_its_token_and_may_name_a_set)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "t.db");
	char err[256];
	tbx__db_opts_t opts;
	tbx_tokens_t *t;
	int yes = -1;
	sqlite3 *db;

	tbx__db_opts_init(&opts);
	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	tbx_tokens_close(t);
	exec(path, UNDO_V14 "PRAGMA user_version = 13;"
			    "INSERT INTO tbx_edge (topic, caller_id, "
			    "fingerprint, msg_id, token, mint_seq, created_ms) "
			    "VALUES ('t', 'order-1', zeroblob(32), "
			    "'00000000-0000-4000-8000-000000000001', "
			    "'00000000-0000-4000-8000-000000000002', 3, 1);");
	cr_assert_eq(
	    tbx_tokens_sqlite_open(path, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(tbx_tokens_has(t, TBX_TOKENS_HAS_EDGE_SETS, &yes), TBX_OK);
	cr_assert_eq(yes, 1);
	tbx_tokens_close(t);
	cr_assert_eq(tt_count(path,
			      "SELECT count(*) FROM tbx_edge WHERE "
			      "token = '00000000-0000-4000-8000-"
			      "000000000002' AND tset IS NULL AND tbit IS "
			      "NULL AND tpart IS NULL"),
		     1, "the entry in the window keeps its token");
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	static const char *const bad[] = {
	    "UPDATE tbx_edge SET tbit = 1, tpart = 0",
	    "UPDATE tbx_edge SET tset = 's', tbit = 1",
	    "UPDATE tbx_edge SET tset = 's', tbit = 65536, tpart = 0",
	    "UPDATE tbx_edge SET tset = 's', tbit = 1, tpart = -1",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(sqlite3_exec(db, bad[i], NULL, NULL, NULL) & 0xff,
			     SQLITE_CONSTRAINT, "%s", bad[i]);
	cr_assert_eq(sqlite3_exec(db,
				  "UPDATE tbx_edge SET token = '', tset = "
				  "'00000000-0000-4000-8000-000000000004', "
				  "tbit = 65535, tpart = 2",
				  NULL, NULL, NULL),
		     SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_close(db);
	tt_rmrf(dir);
	free(dir);
	free(path);
}

/* A version 14 store's dead letters read as never replayed: their state
 * stays `sent` (or `pending`) in `inspect dead-letters list`. */
Test(migration, a_version_14_dead_letter_was_never_replayed)
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
	exec(path, UNDO_V15 "PRAGMA user_version = 14;"
			    "INSERT INTO tbx_dead_letters (grp, msg_id, "
			    "in_topic, in_partition, in_offset, dlq_topic, "
			    "error, attempts, created_ms) VALUES ('g', "
			    "'00000000-0000-4000-8000-000000000001', 't', 0, "
			    "7, 't.dlq', 'rejected', 1, 1)");
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM tbx_dead_letters "
				    "WHERE replayed_ms IS NULL AND in_offset "
				    "= 7"),
		     1);
	/* Marked once replayed; a second replay keeps the first time. */
	cr_assert_eq(
	    tbx_outbox_dead_letter_replayed(store, "g", "t", 0, 7, "t.dlq", 50),
	    TBX_OK);
	cr_assert_eq(
	    tbx_outbox_dead_letter_replayed(store, "g", "t", 0, 7, "t.dlq", 60),
	    TBX_OK);
	tbx_outbox_close(store);
	cr_assert_eq(tt_count(path, "SELECT replayed_ms FROM tbx_dead_letters"),
		     50);
	tt_rmrf(dir);
	free(dir);
	free(path);
}

/* What undelivered_list gives of one line. */
typedef struct ud_seen {
	int n;
	int has_set;
	char tset[TBX_UUID_LEN + 1], token[TBX_UUID_LEN + 1];
	int64_t tbit, tpart;
} ud_seen_t;

static int ud_seen(void *opaque, const tbx__ud_rec_t *u)
{
	ud_seen_t *s = opaque;

	s->n++;
	s->has_set = u->tset != NULL;
	tbx__strlcpy(s->tset, u->tset ? u->tset : "", sizeof(s->tset));
	tbx__strlcpy(s->token, u->token ? u->token : "", sizeof(s->token));
	s->tbit = u->tbit;
	s->tpart = u->tpart;
	return 0;
}

/* A version 15 store's given-up messages keep their per-message token and
 * read as without a set bit; a message with a set bit, given up after the
 * migration, keeps its set, bit and partition and no token. */
Test(migration, a_version_15_undelivered_message_keeps_its_token)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "s.db");
	tbx__db_opts_t opts;
	tbx_outbox_t *store;
	tbx__filter_t f = TBX_FILTER_ALL;
	ud_seen_t seen;
	int64_t total = 0;
	char err[256];
	tbx__row_t row;
	tbx__outmsg_t *m;

	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(store);
	exec(path, UNDO_V16 "PRAGMA user_version = 15;"
			    "INSERT INTO tbx_undelivered (grp, msg_id, out_id, "
			    "topic, type, token, mint_seq, error, attempts, "
			    "created_ms) VALUES ('g', 'm1', "
			    "'00000000-0000-4000-8000-000000000001', 'out', "
			    "'T', '00000000-0000-4000-8000-000000000002', 3, "
			    "'too large', 2, 1)");
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	memset(&seen, 0, sizeof(seen));
	cr_assert_eq(
	    tbx_outbox_undelivered_list(store, &f, &total, ud_seen, &seen),
	    TBX_OK);
	cr_assert_eq(seen.n, 1);
	cr_assert_not(seen.has_set);
	cr_assert_eq(seen.tpart, -1);
	cr_assert_str_eq(seen.token, "00000000-0000-4000-8000-000000000002");

	/* A set bit given up: kept with it, no token. */
	tbx__row_init(&row);
	tbx__strlcpy(row.msg_id, "m2", sizeof(row.msg_id));
	row.mint_seq = 4;
	cr_assert_eq(tbx__row_add(&row, "out", "T", "k", 1, "v", 1, NULL, 0),
		     TBX_OK);
	m = &row.msgs[0];
	tbx__strlcpy(m->tset, "00000000-0000-7000-8000-000000000003",
		     sizeof(m->tset));
	tbx__strlcpy(m->token, m->tset, sizeof(m->token));
	m->tbit = 7;
	m->part = 2;
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(
	    tbx_outbox_undelivered_add(store, "g", &row, m, "too large", 2),
	    TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM tbx_undelivered "
				    "WHERE msg_id = 'm2' AND token IS NULL AND "
				    "tset = '00000000-0000-7000-8000-"
				    "000000000003' AND tbit = 7 AND tpart = 2"),
		     1);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
	tt_rmrf(dir);
	free(dir);
	free(path);
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
	exec(path,
	     UNDO_V8 "DROP TABLE tbx_inflight; DROP TABLE tbx_edge;"
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
	exec(path, UNDO_V8
	     "DROP TABLE tbx_inflight; DROP TABLE tbx_edge; "
	     "ALTER TABLE "
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
	exec(path, UNDO_V8
	     "DROP TABLE tbx_store_info; DROP TABLE tbx_alarms;"
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

#define ROW_A "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7a01"
#define ROW_B "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7a02"
#define ROW_C "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7a03"
#define OUT_1 "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7b01"
#define OUT_2 "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7b02"
#define OUT_3 "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7b03"
#define TOK_3 "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7c03"
#define ATT_B "0196b6a8-3c8e-7d41-9a3b-2f1c5e6d7d02"

/* A version 7 file with three rows in flight: A processed (no attempt)
 * with two messages, stored out of seq order, one without a key and one
 * with an empty key and headers; B tokened with one message; C without
 * messages. */
static void make_version_7(const char *path)
{
	tbx__db_opts_t opts;
	tbx_outbox_t *store;
	char err[256];

	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(store);
	exec(path,
	     UNDO_V8 "PRAGMA user_version = 7;"
		     "INSERT INTO tbx_outbox (grp, msg_id, in_topic, "
		     "in_partition, in_offset, created_ms) VALUES ('g', '" ROW_A
		     "', 'in', 0, 1, 1), ('g', '" ROW_C "', 'in', 0, 3, 3);"
		     "INSERT INTO tbx_outbox (grp, msg_id, in_topic, "
		     "in_partition, in_offset, attempt, mint_seq, created_ms) "
		     "VALUES ('g', '" ROW_B "', 'in', 0, 2, '" ATT_B "', 5, 2);"
		     "INSERT INTO tbx_outbox_msg (grp, msg_id, seq, out_id, "
		     "topic, type, key, payload, headers, token) VALUES "
		     "('g', '" ROW_A "', 1, '" OUT_2 "', 'out', 'second', "
		     "x'', 'p2', x'00026100010000000176', NULL),"
		     "('g', '" ROW_A "', 0, '" OUT_1 "', 'out', 'first', "
		     "NULL, 'p1', NULL, NULL),"
		     "('g', '" ROW_B "', 0, '" OUT_3 "', 'out', 'third', "
		     "'k3', 'p3', NULL, '" TOK_3 "');");
}

Test(migration, rows_in_flight_of_version_7_keep_their_messages_and_finish)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "s.db");
	static const unsigned char hdrs[] = {0, 2, 'a', 0, 1, 0, 0, 0, 1, 'v'};
	tt_cluster_t *cluster;
	tbx__db_opts_t opts;
	tbx_outbox_t *store;
	tbx_tokens_t *tokens;
	tbx__recover_t *rec;
	tbx_conf_t *conf;
	tbx__row_t row;
	tt_record_t *recs;
	size_t done = 0, cnt;
	char err[256];

	make_version_7(path);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), 7);
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM tbx_outbox_msg"), 3);

	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(path, &opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tt_count(path, "PRAGMA user_version"), TBX_SCHEMA_VERSION);
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM sqlite_master WHERE "
				    "name = 'tbx_outbox_msg'"),
		     0, "version 8 keeps the messages in the rows");

	/* Each row with its messages, in queue order, byte for byte. */
	tbx__row_init(&row);
	cr_assert_eq(tbx_outbox_row_load(store, "g", ROW_A, &row), TBX_OK);
	cr_assert_eq(row.msg_cnt, 2);
	cr_assert_str_eq(row.msgs[0].id, OUT_1);
	cr_assert_str_eq(row.msgs[0].type, "first");
	cr_assert_null(row.msgs[0].key, "no key stays no key");
	cr_assert_eq(row.msgs[0].payload_len, 2);
	cr_assert_eq(memcmp(row.msgs[0].payload, "p1", 2), 0);
	cr_assert_null(row.msgs[0].headers);
	cr_assert_str_eq(row.msgs[1].id, OUT_2);
	cr_assert_str_eq(row.msgs[1].topic, "out");
	cr_assert_not_null(row.msgs[1].key, "an empty key stays a key");
	cr_assert_eq(row.msgs[1].key_len, 0);
	cr_assert_eq(row.msgs[1].headers_len, sizeof(hdrs));
	cr_assert_eq(memcmp(row.msgs[1].headers, hdrs, sizeof(hdrs)), 0);
	cr_assert_str_eq(row.msgs[1].token, "");
	cr_assert(tbx_outbox_row_check(&row));
	cr_assert_eq(tbx_outbox_row_load(store, "g", ROW_B, &row), TBX_OK);
	cr_assert_str_eq(row.attempt, ATT_B);
	cr_assert_eq(row.msg_cnt, 1);
	cr_assert_str_eq(row.msgs[0].token, TOK_3, "the token is kept");
	cr_assert(tbx_outbox_row_check(&row));
	cr_assert_eq(tbx_outbox_row_load(store, "g", ROW_C, &row), TBX_OK);
	cr_assert_eq(row.msg_cnt, 0);
	tbx__row_clear(&row);

	/* Then dispatched and finished, as a redelivery or the recovery pass
	 * would finish them. */
	cluster = tt_cluster_new(1);
	tt_cluster_topic(cluster, "out", 1);
	cr_assert_eq(tbx_tokens_sqlite_open(path, &opts, tbx_outbox_db(store),
					    &tokens, err, sizeof(err)),
		     TBX_OK, "%s", err);
	conf = tt_conf(cluster->bootstraps, "g", path, path, NULL);
	rec = tbx__recover_new(conf, "g", store, tokens, err, sizeof(err));
	cr_assert_not_null(rec, "%s", err);
	cr_assert_eq(tbx__recover_older(rec, INT64_MAX, 10, &done), TBX_OK,
		     "%s", tbx__recover_errstr(rec));
	cr_assert_eq(done, 3);
	tbx__recover_destroy(rec);
	cr_assert_eq(tt_count(path, "SELECT count(*) FROM tbx_outbox"), 0);

	cnt = tt_read_topic(cluster->bootstraps, "out", &recs);
	cr_assert_eq(cnt, 3);
	cr_assert_str_eq(recs[0].id, OUT_1);
	cr_assert_str_eq(recs[0].payload, "p1");
	cr_assert_str_eq(recs[1].id, OUT_2);
	cr_assert_str_eq(recs[1].payload, "p2");
	cr_assert_str_eq(recs[2].id, OUT_3);
	cr_assert_str_eq(recs[2].token, TOK_3, "B's token is dispatched");
	cr_assert_not_null(recs[0].token, "A's messages got tokens");
	tt_records_free(recs, cnt);

	tbx_tokens_close(tokens);
	tbx_outbox_close(store);
	tbx_conf_destroy(conf);
	tt_cluster_destroy(cluster);
	tt_rmrf(dir);
	free(dir);
	free(path);
}
