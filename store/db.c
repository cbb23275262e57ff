/*
 * Opening, migrating and driving a tokenbox SQLite database.
 *
 * A file is recognised by PRAGMA application_id (TBX_APPLICATION_ID) and
 * versioned by PRAGMA user_version.  A file with neither (application_id 0
 * and user_version 0) is adopted: it is a new file, or a service database
 * that already holds the user's business tables, which is where handlers
 * write.  Anything else is another application's file and is left alone.
 *
 * Migrations only go forward.  migrations[v] takes the schema from version
 * v to v + 1; all the steps an open needs run in one BEGIN IMMEDIATE
 * transaction together with the new user_version and application_id, so a
 * file is never seen half-migrated, and two processes opening a new file at
 * once serialise on the write lock (the second re-reads the version under
 * the lock and finds nothing left to do).
 */
#include "store/db.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"
#include "store/bits.h"
#include "store/db_int.h"
#include "store/msgs.h"

/*
 * The whole schema: outbox tables (outbox/outbox.h) and token tables
 * (tokens/tokens.h) live in every tokenbox file.  Never edit a step once
 * released: append a new one and bump TBX_SCHEMA_VERSION.
 */
static const char *const migrations[] = {
    /* 0 -> 1 */
    /* The service store S. */
    "CREATE TABLE tbx_outbox ("
    " grp TEXT NOT NULL,"
    " msg_id TEXT NOT NULL,"
    " in_topic TEXT NOT NULL,"
    " in_partition INTEGER NOT NULL,"
    " in_offset INTEGER NOT NULL,"
    " in_token TEXT,"
    " attempt TEXT,"
    " mint_seq INTEGER,"
    " kind INTEGER NOT NULL DEFAULT 0 CHECK (kind IN (0, 1)),"
    " error TEXT,"
    " created_ms INTEGER NOT NULL,"
    /* PROCESSED has neither, TOKENED both (see outbox/outbox.h). */
    " CHECK ((attempt IS NULL) = (mint_seq IS NULL)),"
    " PRIMARY KEY (grp, msg_id)"
    ") WITHOUT ROWID;"
    "CREATE INDEX tbx_outbox_created ON tbx_outbox (created_ms);"
    /* Rowid table: payloads are too large for WITHOUT ROWID rows.  The
     * primary key's index also serves the foreign key. */
    "CREATE TABLE tbx_outbox_msg ("
    " grp TEXT NOT NULL,"
    " msg_id TEXT NOT NULL,"
    " seq INTEGER NOT NULL,"
    " out_id TEXT NOT NULL,"
    " topic TEXT NOT NULL,"
    " type TEXT NOT NULL,"
    " key BLOB,"
    " payload BLOB,"
    " headers BLOB,"
    " token TEXT,"
    " PRIMARY KEY (grp, msg_id, seq),"
    " FOREIGN KEY (grp, msg_id) REFERENCES tbx_outbox (grp, msg_id)"
    "  ON DELETE CASCADE"
    ");"
    "CREATE TABLE tbx_ingress ("
    " grp TEXT NOT NULL,"
    " topic TEXT NOT NULL,"
    " \"partition\" INTEGER NOT NULL,"
    " next_offset INTEGER NOT NULL,"
    " PRIMARY KEY (grp, topic, \"partition\")"
    ") WITHOUT ROWID;"
    "CREATE TABLE tbx_dead_letters ("
    " id INTEGER PRIMARY KEY,"
    " grp TEXT NOT NULL,"
    " msg_id TEXT NOT NULL,"
    " in_topic TEXT NOT NULL,"
    " in_partition INTEGER NOT NULL,"
    " in_offset INTEGER NOT NULL,"
    " dlq_topic TEXT NOT NULL,"
    " error TEXT,"
    " attempts INTEGER NOT NULL,"
    " created_ms INTEGER NOT NULL"
    ");"
    "CREATE INDEX tbx_dead_letters_grp ON tbx_dead_letters (grp, created_ms);"
    /* The token store T.  One sequence for mint and subscribe. */
    "CREATE TABLE tbx_seq ("
    " id INTEGER PRIMARY KEY CHECK (id = 1),"
    " value INTEGER NOT NULL"
    ");"
    "INSERT INTO tbx_seq (id, value) VALUES (1, 0);"
    "CREATE TABLE tbx_tokens ("
    " token TEXT NOT NULL,"
    " grp TEXT NOT NULL,"
    " mint_seq INTEGER NOT NULL,"
    " created_ms INTEGER NOT NULL,"
    " PRIMARY KEY (token, grp)"
    ") WITHOUT ROWID;"
    "CREATE TABLE tbx_registrations ("
    " attempt TEXT NOT NULL,"
    " token TEXT NOT NULL,"
    " send_grp TEXT NOT NULL,"
    " msg_id TEXT NOT NULL,"
    " created_ms INTEGER NOT NULL,"
    " PRIMARY KEY (attempt, token)"
    ") WITHOUT ROWID;"
    /* The sweeper reads a group's registrations, oldest first. */
    "CREATE INDEX tbx_registrations_send ON tbx_registrations"
    " (send_grp, created_ms, attempt);"
    "CREATE TABLE tbx_subscriptions ("
    " topic TEXT NOT NULL,"
    " grp TEXT NOT NULL,"
    " since_seq INTEGER NOT NULL,"
    " created_ms INTEGER NOT NULL,"
    " PRIMARY KEY (topic, grp)"
    ") WITHOUT ROWID;",
    /* 1 -> 2 */
    /* Crash detection: the offsets an A is about to process, per
     * partition (first_offset -1: none in progress). */
    "CREATE TABLE tbx_inflight ("
    " grp TEXT NOT NULL,"
    " topic TEXT NOT NULL,"
    " \"partition\" INTEGER NOT NULL,"
    " first_offset INTEGER NOT NULL,"
    " last_offset INTEGER NOT NULL,"
    " crashes INTEGER NOT NULL,"
    " suspect_until INTEGER NOT NULL,"
    " PRIMARY KEY (grp, topic, \"partition\")"
    ") WITHOUT ROWID;",
    /* 2 -> 3 */
    /* The outbox holds only rows in flight: the rare queries by age
     * (inspect, re-dispatch) scan them, and every row no longer pays
     * an index entry on insert and on delete (performance.md). */
    "DROP INDEX IF EXISTS tbx_outbox_created;",
    /* 3 -> 4 */
    /* The ingress edge: caller-supplied ids seen by publishers within
     * ingress.dedup.window.ms, in the token store (tokens/tokens.h). */
    "CREATE TABLE tbx_edge ("
    " topic TEXT NOT NULL,"
    " caller_id TEXT NOT NULL,"
    " fingerprint BLOB NOT NULL,"
    " msg_id TEXT NOT NULL,"
    " token TEXT NOT NULL,"
    " mint_seq INTEGER NOT NULL,"
    " delivered INTEGER NOT NULL DEFAULT 0,"
    " refused INTEGER NOT NULL DEFAULT 0,"
    " created_ms INTEGER NOT NULL,"
    " PRIMARY KEY (topic, caller_id)"
    ");"
    "CREATE INDEX tbx_edge_created ON tbx_edge (created_ms);",
    /* 4 -> 5 */
    /* Poison isolation and counts that last (consumer/proto_guard.c,
     * phase_guard): lone says the A in progress covered one record and
     * no other of any partition, so that a death counts against that
     * record only; count_offset is the partition's record that the
     * RETRY verdicts (retries) and lone deaths (crashes) were counted
     * for.  A version 3 marker counted deaths per partition: its count
     * stays with its record, and its A in progress blames nobody. */
    "ALTER TABLE tbx_inflight ADD COLUMN lone INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE tbx_inflight ADD COLUMN count_offset INTEGER NOT NULL"
    " DEFAULT -1;"
    "ALTER TABLE tbx_inflight ADD COLUMN retries INTEGER NOT NULL"
    " DEFAULT 0;"
    "UPDATE tbx_inflight SET count_offset = first_offset WHERE crashes > 0;"
    /* The recovery pass marks a row it found below its partition's
     * committed offset (its record will not come back); inspect flags
     * the marked rows that are still there. */
    "ALTER TABLE tbx_outbox ADD COLUMN stuck_ms INTEGER;",
    /* 5 -> 6 */
    /* The file's identity: a random (version 4) UUID made once, when the
     * file is created or first migrated to this version, and kept by every
     * later migration.  Records carry their token store's id (tbx-store),
     * so that a worker can tell a token minted in another store from a
     * finished message. */
    "CREATE TABLE tbx_store_info ("
    " id INTEGER PRIMARY KEY CHECK (id = 1),"
    " store_id TEXT NOT NULL,"
    " created_ms INTEGER NOT NULL"
    ");"
    "INSERT INTO tbx_store_info (id, store_id, created_ms) VALUES (1,"
    " lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) ||"
    " '-4' || substr(lower(hex(randomblob(2))), 2) || '-' ||"
    " substr('89ab', 1 + (abs(random()) % 4), 1) ||"
    " substr(lower(hex(randomblob(2))), 2) || '-' ||"
    " lower(hex(randomblob(6))),"
    " CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));"
    /* Alarms a worker raised, per group, for `inspect status --check`. */
    "CREATE TABLE tbx_alarms ("
    " grp TEXT NOT NULL,"
    " name TEXT NOT NULL,"
    " count INTEGER NOT NULL,"
    " first_ms INTEGER NOT NULL,"
    " last_ms INTEGER NOT NULL,"
    " detail TEXT,"
    " PRIMARY KEY (grp, name)"
    ") WITHOUT ROWID;"
    /* When a worker last started or confirmed the subscription. */
    "ALTER TABLE tbx_subscriptions ADD COLUMN used_ms INTEGER;",
    /* 6 -> 7 */
    /* Permanent delivery failures: how often a row's dispatch failed
     * with an error that retrying does not cure, and the outgoing
     * messages given up on that the dead-letter topic did not take
     * either, kept whole (the original tbx-* headers included) so that
     * `tokenbox inspect undelivered resend` can send them as they were. */
    "ALTER TABLE tbx_outbox ADD COLUMN dispatch_failures INTEGER NOT NULL"
    " DEFAULT 0;"
    "CREATE TABLE tbx_undelivered ("
    " id INTEGER PRIMARY KEY,"
    " grp TEXT NOT NULL,"
    " msg_id TEXT NOT NULL,"
    " out_id TEXT NOT NULL,"
    " topic TEXT NOT NULL,"
    " type TEXT NOT NULL,"
    " key BLOB,"
    " payload BLOB,"
    " headers BLOB,"
    " token TEXT,"
    " mint_seq INTEGER,"
    " error TEXT NOT NULL,"
    " attempts INTEGER NOT NULL,"
    " created_ms INTEGER NOT NULL,"
    " UNIQUE (grp, out_id)"
    ");",
    /* 7 -> 8 */
    /* A row's outgoing messages inside the row (store/msgs.h): inserting
     * and deleting a row is one B-tree entry, without a second table, its
     * index and the foreign key's cascade (performance.md).  The rows in
     * flight keep their messages, in queue order (tbx_pack_msgs() is
     * registered by migrate()). */
    "ALTER TABLE tbx_outbox ADD COLUMN msgs BLOB;"
    "UPDATE tbx_outbox SET msgs = (SELECT tbx_pack_msgs(m.seq, m.out_id,"
    " m.topic, m.type, m.key, m.payload, m.headers, m.token) FROM"
    " tbx_outbox_msg m WHERE m.grp = tbx_outbox.grp AND m.msg_id ="
    " tbx_outbox.msg_id);"
    "DROP TABLE tbx_outbox_msg;",
    /* 8 -> 9 */
    /* The token store each group's workers use: its id and where it is,
     * recorded by every worker at start, so that `inspect` can tell when
     * it is given the wrong pair of stores (tools/inspect_pair.c). */
    "CREATE TABLE tbx_bindings ("
    " grp TEXT NOT NULL PRIMARY KEY,"
    " tokens_id TEXT NOT NULL,"
    " tokens_where TEXT NOT NULL,"
    " used_ms INTEGER NOT NULL"
    ") WITHOUT ROWID;",
    /* 9 -> 10 */
    /* The ranges the sequence issued its numbers in, one per opening of
     * the store that may take numbers (tokens/sqlite.c, range_start):
     * a number is this store's when a range holds it (lo <= n <= hi, or
     * the current value for the open range, hi NULL).  An opening
     * starts its range at max(value + 1, now in ms * 1000), so that a
     * store restored from an older backup never issues again the
     * numbers its lost history issued: they fall in a gap.  Every
     * number taken before this version is the store's own: one open
     * range from 1. */
    "CREATE TABLE tbx_seq_ranges ("
    " lo INTEGER PRIMARY KEY,"
    " hi INTEGER CHECK (hi IS NULL OR hi >= lo)"
    ");"
    "CREATE UNIQUE INDEX tbx_seq_ranges_open ON tbx_seq_ranges"
    " ((hi IS NULL)) WHERE hi IS NULL;"
    "INSERT INTO tbx_seq_ranges (lo, hi) VALUES (1, NULL);",
    /* 10 -> 11 */
    /* Token sets (tokens/tokens.h, docs/batched-tokens.md): the tokens
     * an attempt mints for its messages to one partition of a topic, one
     * row per receiving group with a bitmap of the messages not yet
     * consumed (bit i in byte i / 8, bit i % 8), and one registration
     * per attempt naming its sets (a JSON array of their ids).  The
     * sweeper reads a group's registrations oldest first. */
    "CREATE TABLE tbx_tset ("
    " set_id TEXT NOT NULL,"
    " grp TEXT NOT NULL,"
    " topic TEXT NOT NULL,"
    " part INTEGER NOT NULL CHECK (part >= 0),"
    " mint_seq INTEGER NOT NULL,"
    " nbits INTEGER NOT NULL CHECK (nbits BETWEEN 1 AND 65536),"
    " bits BLOB NOT NULL CHECK (typeof(bits) = 'blob' AND"
    "  length(bits) = (nbits + 7) / 8),"
    " created_ms INTEGER NOT NULL,"
    " PRIMARY KEY (set_id, grp)"
    ") WITHOUT ROWID;"
    "CREATE TABLE tbx_breg ("
    " attempt TEXT NOT NULL PRIMARY KEY,"
    " send_grp TEXT NOT NULL,"
    " row_id TEXT NOT NULL,"
    " sets TEXT NOT NULL CHECK (json_valid(sets) AND"
    "  json_type(sets) = 'array'),"
    " created_ms INTEGER NOT NULL"
    ") WITHOUT ROWID;"
    "CREATE INDEX tbx_breg_send ON tbx_breg (send_grp, created_ms, attempt);",
    /* 11 -> 12 */
    /* The outbox row by the batch (docs/batched-tokens.md): one row per
     * (group, batch attempt) with the records it covers (cover), their
     * outgoing messages (msgs, store/msgs.h) and where each goes (wire,
     * outbox/batchrow.h); the index of the records in the per-message
     * format it covers; and the generation per partition that the
     * resume check compares its memory with.  Empty until the protocol
     * writes batch rows; tbx_outbox stays as it is until then. */
    "CREATE TABLE tbx_obatch ("
    " grp TEXT NOT NULL,"
    " row_id TEXT NOT NULL,"
    " attempt TEXT,"
    " mint_seq INTEGER,"
    " tokfmt INTEGER NOT NULL CHECK (tokfmt IN (1, 2)),"
    " created_ms INTEGER NOT NULL,"
    " stuck_ms INTEGER,"
    " dispatch_failures INTEGER NOT NULL DEFAULT 0,"
    " cover BLOB NOT NULL CHECK (typeof(cover) = 'blob'),"
    " msgs BLOB CHECK (msgs IS NULL OR typeof(msgs) = 'blob'),"
    " wire BLOB NOT NULL CHECK (typeof(wire) = 'blob'),"
    " CHECK ((attempt IS NULL) = (mint_seq IS NULL)),"
    " PRIMARY KEY (grp, row_id)"
    ") WITHOUT ROWID;"
    "CREATE TABLE tbx_cover_msg ("
    " grp TEXT NOT NULL,"
    " msg_id TEXT NOT NULL,"
    " row_id TEXT NOT NULL,"
    " PRIMARY KEY (grp, msg_id)"
    ") WITHOUT ROWID;"
    "CREATE INDEX tbx_cover_msg_row ON tbx_cover_msg (grp, row_id);"
    "ALTER TABLE tbx_inflight ADD COLUMN gen INTEGER NOT NULL DEFAULT 0;",
    /* 12 -> 13 */
    /* The token of a record in the batched format (docs/batched-tokens.md)
     * is a bit of a token set: in_token holds the set's id and in_tbit
     * the record's bit in it, which D clears.  NULL for a per-message
     * token (and for untokened ingress): the rows in flight keep their
     * meaning. */
    ("ALTER TABLE tbx_outbox ADD COLUMN in_tbit INTEGER CHECK (in_tbit IS"
     " NULL OR (in_tbit BETWEEN 0 AND 65535 AND in_token IS NOT NULL));"),
    /* 13 -> 14 */
    /* The ingress edge of a publisher minting token sets
     * (tokens.format = set): an entry records the message's set id, its
     * bit and the partition the set was minted for, so that a natural
     * duplicate goes out again with the same tbx-tset and tbx-tbit to
     * the same partition.  NULL for an entry of a per-message token
     * (token holds it; '' for a set entry). */
    "ALTER TABLE tbx_edge ADD COLUMN tset TEXT;"
    "ALTER TABLE tbx_edge ADD COLUMN tbit INTEGER CHECK (tbit IS NULL OR"
    " (tbit BETWEEN 0 AND 65535 AND tset IS NOT NULL));"
    "ALTER TABLE tbx_edge ADD COLUMN tpart INTEGER CHECK ((tpart IS NULL)"
    " = (tbit IS NULL) AND (tpart IS NULL OR tpart >= 0));",
    /* 14 -> 15 */
    /* When `inspect dead-letters replay` sent a dead letter back to its
     * origin topic, so that `dead-letters list` tells a replayed dead
     * letter from one only delivered to the dead-letter topic.  NULL:
     * never replayed (or by a tokenbox older than this column). */
    "ALTER TABLE tbx_dead_letters ADD COLUMN replayed_ms INTEGER;",
    /* 15 -> 16 */
    /* A message given up on whose token is a bit of a token set (a batch
     * row of tokfmt 2) keeps its bit (docs/batched-tokens.md, "Permanent
     * failures"): the set's id, the bit and the partition the set was
     * minted for, so that `inspect undelivered resend` produces it with
     * tbx-tset and tbx-tbit to that partition.  NULL for a per-message
     * token (token holds it). */
    "ALTER TABLE tbx_undelivered ADD COLUMN tset TEXT;"
    "ALTER TABLE tbx_undelivered ADD COLUMN tbit INTEGER CHECK (tbit IS"
    " NULL OR (tbit BETWEEN 0 AND 65535 AND tset IS NOT NULL));"
    "ALTER TABLE tbx_undelivered ADD COLUMN tpart INTEGER CHECK ((tpart IS"
    " NULL) = (tbit IS NULL) AND (tpart IS NULL OR tpart >= 0));",
};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == TBX_SCHEMA_VERSION,
	       "one migration step per schema version");

void tbx__db_opts_init(tbx__db_opts_t *opts)
{
	opts->synchronous_full = 1;
	opts->busy_timeout_ms = 5000;
	opts->readonly = 0;
	opts->create = 1;
}

int tbx__db_err(int sqlite_rc)
{
	switch (sqlite_rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return TBX_OK;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
	case SQLITE_PROTOCOL:
		return TBX_EBUSY;
	case SQLITE_NOMEM:
		return TBX_ENOMEM;
	case SQLITE_IOERR:
	case SQLITE_FULL:
	case SQLITE_CANTOPEN:
	case SQLITE_PERM:
	case SQLITE_READONLY:
		return TBX_EIO;
	case SQLITE_CORRUPT:
		return TBX_ECORRUPT;
	case SQLITE_NOTADB:
		return TBX_ENOTDB;
	default:
		return TBX_ESTORE;
	}
}

int tbx__db_log_level(int sqlite_rc)
{
	return tbx__db_err(sqlite_rc) == TBX_EBUSY ? TBX_LOG_WARNING
						   : TBX_LOG_ERR;
}

static long fault_countdown;
static int fault_fired;

void tbx__fault_arm(long n)
{
	fault_countdown = n > 0 ? n : 0;
	fault_fired = 0;
}

int tbx__fault_fired(void)
{
	return fault_fired;
}

static int fault_full;

void tbx__fault_disk_full(int on)
{
	fault_full = on;
}

int tbx__db_fault_hit(const char *what)
{
	if (fault_full && what && strncmp(what, "COMMIT", 6) == 0) {
		tbx__log(TBX_LOG_INFO, "fault injected: full disk: %s", what);
		return 1;
	}
	if (fault_countdown <= 0 || --fault_countdown > 0)
		return 0;
	fault_fired = 1;
	tbx__log(TBX_LOG_INFO, "fault injected: %s", what);
	return 1;
}

int tbx__db_exec(sqlite3 *db, const char *sql)
{
	char *msg = NULL;
	int rc, err;

	if (strncmp(sql, "ROLLBACK", 8) != 0 && tbx__db_fault_hit(sql))
		return TBX_EIO;
	rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

	if (rc == SQLITE_OK)
		return TBX_OK;
	tbx__log(tbx__db_log_level(rc), "sqlite: %s: %s", sql,
		 msg ? msg : sqlite3_errstr(rc));
	sqlite3_free(msg);
	err = tbx__db_err(rc);
	return err == TBX_OK ? TBX_ESTORE : err;
}

/* Reads a one-integer pragma.  @returns the SQLite result code. */
static int pragma_int(sqlite3 *db, const char *sql, int64_t *val)
{
	sqlite3_stmt *stmt = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);

	if (rc == SQLITE_OK) {
		rc = sqlite3_step(stmt);
		if (rc == SQLITE_ROW) {
			*val = sqlite3_column_int64(stmt, 0);
			rc = SQLITE_OK;
		} else if (rc == SQLITE_DONE) {
			*val = 0;
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(stmt);
	return rc;
}

/* Runs a parameterless statement that may return one text value (a
 * pragma), copying it into @p out.  @returns the SQLite result code. */
static int pragma_text(sqlite3 *db, const char *sql, char *out, size_t size)
{
	sqlite3_stmt *stmt = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);

	if (size)
		out[0] = '\0';
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(stmt);
		if (rc == SQLITE_ROW) {
			const char *text =
			    (const char *)sqlite3_column_text(stmt, 0);
			if (size)
				tbx__strlcpy(out, text ? text : "", size);
			rc = SQLITE_OK;
		} else if (rc == SQLITE_DONE) {
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(stmt);
	return rc;
}

/* @returns 1 when PRAGMA quick_check finds the file damaged. */
static int quick_check_fails(sqlite3 *db)
{
	char res[128];
	int rc = pragma_text(db, "PRAGMA quick_check(1)", res, sizeof(res));

	if (rc != SQLITE_OK)
		return (rc & 0xff) == SQLITE_CORRUPT ||
		       (rc & 0xff) == SQLITE_NOTADB;
	return strcmp(res, "ok") != 0;
}

/*
 * Turns a failed SQLite call during open into a tbx error and a message
 * naming the file.  A code that does not say what is wrong ("strange")
 * gets a quick_check, so that a damaged file is reported as such.
 */
static int open_fail(sqlite3 *db, const char *path, int rc, const char *what,
		     char *errstr, size_t errstr_size)
{
	char msg[256];
	int err = tbx__db_err(rc);

	tbx__strlcpy(msg, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
		     sizeof(msg));
	switch (rc & 0xff) {
	case SQLITE_NOTADB:
		err = TBX_ENOTDB;
		tbx__seterr(errstr, errstr_size, err,
			    "%s: not a tokenbox database (not an SQLite file: "
			    "%s)",
			    path, msg);
		break;
	case SQLITE_CORRUPT:
		tbx__seterr(errstr, errstr_size, err,
			    "%s: %s: file is corrupt (%s)", path, what, msg);
		break;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
	case SQLITE_PROTOCOL:
		tbx__seterr(errstr, errstr_size, err,
			    "%s: %s: locked by another connection past "
			    "busy_timeout (%s)",
			    path, what, msg);
		break;
	case SQLITE_IOERR:
	case SQLITE_FULL:
	case SQLITE_CANTOPEN:
	case SQLITE_PERM:
	case SQLITE_READONLY:
	case SQLITE_NOMEM:
		tbx__seterr(errstr, errstr_size, err, "%s: %s: %s", path, what,
			    msg);
		break;
	default:
		if (db && quick_check_fails(db)) {
			err = TBX_ECORRUPT;
			tbx__seterr(errstr, errstr_size, err,
				    "%s: %s: %s; quick_check reports the file "
				    "is corrupt",
				    path, what, msg);
		} else {
			if (err == TBX_OK)
				err = TBX_ESTORE;
			tbx__seterr(errstr, errstr_size, err, "%s: %s: %s",
				    path, what, msg);
		}
		break;
	}
	/* The caller reports errstr; log only at debug level so a command
	 * that prints it does not show it twice. */
	tbx__log(TBX_LOG_DEBUG, "%s", errstr && errstr_size ? errstr : msg);
	return err;
}

/*
 * Decides from the header whether the file is ours.  @p app_id 0 with
 * user_version 0 is a file nobody has claimed (see the top of this file).
 */
static int check_header(const char *path, int64_t app_id, int64_t version,
			char *errstr, size_t errstr_size)
{
	if (app_id != TBX_APPLICATION_ID && app_id != 0)
		return tbx__seterr(
		    errstr, errstr_size, TBX_ENOTDB,
		    "%s: not a tokenbox database (application_id "
		    "0x%08" PRIx32 ", expected 0x%08x)",
		    path, (uint32_t)app_id, (unsigned)TBX_APPLICATION_ID);
	if (app_id == 0 && version != 0)
		return tbx__seterr(errstr, errstr_size, TBX_ENOTDB,
				   "%s: not a tokenbox database (no tokenbox "
				   "application_id, user_version %" PRId64
				   " set by another program)",
				   path, version);
	if (version > TBX_SCHEMA_VERSION)
		return tbx__seterr(errstr, errstr_size, TBX_ESCHEMA,
				   "%s: schema version %" PRId64
				   " is newer than this tokenbox's (%d); use a "
				   "newer tokenbox",
				   path, version, TBX_SCHEMA_VERSION);
	return TBX_OK;
}

/* Applies migrations[version ..] under the write lock.  The header is
 * re-read under the lock: another process may have migrated meanwhile. */
static int migrate(sqlite3 *db, const char *path, char *errstr,
		   size_t errstr_size)
{
	char sql[64];
	int64_t app_id, version;
	int rc, err;

	if ((rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL)))
		return open_fail(db, path, rc, "cannot lock for migration",
				 errstr, errstr_size);
	if ((rc = pragma_int(db, "PRAGMA application_id", &app_id)) ||
	    (rc = pragma_int(db, "PRAGMA user_version", &version))) {
		err = open_fail(db, path, rc, "cannot read the header", errstr,
				errstr_size);
		goto rollback;
	}
	if ((err = check_header(path, app_id, version, errstr, errstr_size)))
		goto rollback;
	if (version < TBX_SCHEMA_VERSION && (rc = tbx__msgs_sql_register(db))) {
		err = open_fail(db, path, rc, "cannot prepare the migration",
				errstr, errstr_size);
		goto rollback;
	}
	for (int64_t v = version; v < TBX_SCHEMA_VERSION; v++) {
		char *msg = NULL;

		rc = sqlite3_exec(db, migrations[v], NULL, NULL, &msg);
		if (rc != SQLITE_OK) {
			err = tbx__db_err(rc);
			if (err == TBX_OK)
				err = TBX_ESTORE;
			tbx__seterr(errstr, errstr_size, err,
				    "%s: migration to schema version %" PRId64
				    " failed: %s",
				    path, v + 1,
				    msg ? msg : sqlite3_errstr(rc));
			tbx__log(TBX_LOG_ERR, "%s",
				 errstr && errstr_size ? errstr : "migration");
			sqlite3_free(msg);
			goto rollback;
		}
	}
	/* Constants, not values: pragmas take no bound parameters. */
	snprintf(sql, sizeof(sql), "PRAGMA application_id = %d",
		 (int)TBX_APPLICATION_ID);
	if ((rc = sqlite3_exec(db, sql, NULL, NULL, NULL)) == SQLITE_OK) {
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d",
			 TBX_SCHEMA_VERSION);
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		err =
		    open_fail(db, path, rc, "cannot record the schema version",
			      errstr, errstr_size);
		goto rollback;
	}
	if (version < TBX_SCHEMA_VERSION)
		tbx__log(TBX_LOG_INFO,
			 "%s: schema migrated from version %" PRId64 " to %d",
			 path, version, TBX_SCHEMA_VERSION);
	return TBX_OK;
rollback:
	if (!sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	return err;
}

static int db_open_once(const char *path, const tbx__db_opts_t *opts,
			sqlite3 **out, char *errstr, size_t errstr_size)
{
	tbx__db_opts_t defaults;
	sqlite3 *db = NULL;
	struct stat st;
	char mode[32];
	int64_t app_id, version, tables;
	int flags, rc, err;

	if (!out)
		return tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				   "no place for the connection");
	*out = NULL;
	if (!path || !*path)
		return tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				   "no database path given");
	if (!opts) {
		tbx__db_opts_init(&defaults);
		opts = &defaults;
	}
	/* SQLite says CANTOPEN for a missing file; say what it is. */
	if ((opts->readonly || !opts->create) && stat(path, &st) != 0) {
		if (errno == ENOENT)
			return tbx__seterr(
			    errstr, errstr_size, TBX_ENOENT,
			    "%s: no such database file%s", path,
			    opts->readonly ? "" : " (and creating it is off)");
		return tbx__seterr(errstr, errstr_size, TBX_EIO, "%s: %s", path,
				   strerror(errno));
	}
	/* A new file is made here, readable and writable by its owner only
	 * (SQLite would make it 0644 less the umask): the stores hold the
	 * messages' payloads.  SQLite gives its -wal and -shm files the
	 * database file's mode.  An empty file is an empty database; a file
	 * made meanwhile by another process is left as it is. */
	if (!opts->readonly && opts->create) {
		int fd =
		    open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0)
			close(fd);
		else if (errno != EEXIST)
			return tbx__seterr(errstr, errstr_size, TBX_EIO,
					   "%s: cannot create: %s", path,
					   strerror(errno));
	}
	flags = SQLITE_OPEN_NOMUTEX; /* a handle is used by one thread */
	if (opts->readonly)
		flags |= SQLITE_OPEN_READONLY;
	else
		flags |= SQLITE_OPEN_READWRITE |
			 (opts->create ? SQLITE_OPEN_CREATE : 0);
	rc = sqlite3_open_v2(path, &db, flags, NULL);
	if (rc != SQLITE_OK) {
		err =
		    open_fail(db, path, rc, "cannot open", errstr, errstr_size);
		sqlite3_close_v2(db);
		return err;
	}
	sqlite3_extended_result_codes(db, 1);
	sqlite3_busy_timeout(
	    db, opts->busy_timeout_ms > 0 ? opts->busy_timeout_ms : 0);
	/* The token sets' bitmap functions (store/bits.h), on every
	 * connection: the token store's statements use them, on its own
	 * connection or on the service store's. */
	if ((rc = tbx__bits_sql_register(db)) != SQLITE_OK) {
		err = open_fail(db, path, rc, "cannot register functions",
				errstr, errstr_size);
		goto fail;
	}

	/* The first read of the file: a non-SQLite file fails here, before
	 * anything could be written to it.  One read transaction for both
	 * fields: another process creating the file commits them together,
	 * and two separate reads could see its user_version without its
	 * application_id. */
	if ((rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL)) ||
	    (rc = pragma_int(db, "PRAGMA application_id", &app_id)) ||
	    (rc = pragma_int(db, "PRAGMA user_version", &version)) ||
	    (rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL))) {
		if (!sqlite3_get_autocommit(db))
			sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		err = open_fail(db, path, rc, "cannot read the header", errstr,
				errstr_size);
		goto fail;
	}
	if ((err = check_header(path, app_id, version, errstr, errstr_size)))
		goto fail;
	/* Parses the schema now, so that a damaged one is reported by open
	 * rather than by the first statement of a batch. */
	if ((rc = pragma_int(db, "SELECT count(*) FROM sqlite_master",
			     &tables))) {
		err = open_fail(db, path, rc, "cannot read the schema", errstr,
				errstr_size);
		goto fail;
	}

	if (opts->readonly) {
		/* Read-only never writes, so it cannot migrate either; an
		 * unclaimed file is not tokenbox's (advising a read-write
		 * open would write tokenbox tables into it). */
		if (app_id != TBX_APPLICATION_ID) {
			err = tbx__seterr(errstr, errstr_size, TBX_ENOTDB,
					  "%s: not a tokenbox database (no "
					  "tokenbox application_id)",
					  path);
			goto fail;
		}
		if (version < TBX_SCHEMA_VERSION) {
			err = tbx__seterr(
			    errstr, errstr_size, TBX_ESCHEMA,
			    "%s: schema version %" PRId64
			    " is older than this tokenbox's (%d); open it "
			    "read-write once (e.g. start a worker on it) "
			    "to migrate it",
			    path, version, TBX_SCHEMA_VERSION);
			goto fail;
		}
	} else {
		if ((rc = pragma_text(db, "PRAGMA journal_mode = WAL", mode,
				      sizeof(mode)))) {
			err = open_fail(db, path, rc, "cannot enable WAL",
					errstr, errstr_size);
			goto fail;
		}
		if (strcmp(mode, "wal") != 0)
			tbx__log(TBX_LOG_WARNING,
				 "%s: journal_mode is %s, not wal", path, mode);
		rc = sqlite3_exec(db,
				  opts->synchronous_full
				      ? "PRAGMA synchronous = FULL"
				      : "PRAGMA synchronous = NORMAL",
				  NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			err = open_fail(db, path, rc, "cannot set synchronous",
					errstr, errstr_size);
			goto fail;
		}
	}
	/* Outside any transaction, where the pragma takes effect.  No table
	 * of schema 8 declares a foreign key (the outbox's messages are in
	 * its rows); a business table of the service may. */
	if ((rc = sqlite3_exec(db, "PRAGMA foreign_keys = ON", NULL, NULL,
			       NULL))) {
		err = open_fail(db, path, rc, "cannot enable foreign keys",
				errstr, errstr_size);
		goto fail;
	}
	if (!opts->readonly && (app_id == 0 || version < TBX_SCHEMA_VERSION) &&
	    (err = migrate(db, path, errstr, errstr_size)))
		goto fail;
	if (opts->readonly) {
		/* Safe to close while workers run: SQLite would otherwise try
		 * to checkpoint the WAL into the database file when the last
		 * connection closes; and no statement may write. */
		int on = 1;
		sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, &on);
		sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
	}
	*out = db;
	return TBX_OK;
fail:
	sqlite3_close_v2(db);
	return err;
}

/*
 * Several processes opening a file that does not exist yet race on its
 * creation: reading the header or switching to WAL can answer SQLITE_BUSY
 * at once, without the busy handler.  The whole open is tried again until
 * busy_timeout has passed.
 */
int tbx__db_open(const char *path, const tbx__db_opts_t *opts, sqlite3 **out,
		 char *errstr, size_t errstr_size)
{
	int64_t until;
	int err;

	until =
	    tbx__mono_ms() +
	    (opts && opts->busy_timeout_ms > 0 ? opts->busy_timeout_ms : 5000);
	while ((err = db_open_once(path, opts, out, errstr, errstr_size)) ==
		   TBX_EBUSY &&
	       tbx__mono_ms() < until)
		usleep(20000);
	return err;
}
