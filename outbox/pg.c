/*
 * The PostgreSQL backend of the service store S (outbox/outbox.h,
 * tbx_outbox_ops_t): its schema and migrations, transactions, outbox rows
 * with their outgoing messages, ingress offsets, crash markers, dead
 * letters and alarms, as the protocol, the recovery pass and the sweeper
 * use them.  The read side of `tokenbox inspect` is in pg_read.c, the
 * batch rows of docs/batched-tokens.md in pg_batch.c.
 *
 * The tables live in one schema of the database (store.schema), written
 * into the statement texts as @S (store/pg.h); every value is bound, and
 * every statement is prepared once per connection.  The locking follows
 * docs/architecture.md, "PostgreSQL: locking without a file lock": every
 * transaction READ COMMITTED, A's advisory locks on (group, message id)
 * taken by lock_ids() in key order, ON CONFLICT on the row insert, B's
 * record conditional on attempt IS NULL, and the ingress offset read FOR
 * UPDATE inside a transaction.
 *
 * @locality one thread at a time per store (the worker's).
 */
#include "outbox/outbox.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "outbox/pg_int.h"
#include "store/pg.h"

/* Advisory lock namespaces (the first key), docs/architecture.md. */
#define LOCK_MIGRATION "1413634048"
#define LOCK_MSG       "1413634049"

/*
 * The schema, one step per version: migrations[v] takes the tables from
 * version v to v + 1.  Never edit a step once released: append one and
 * bump TBX_PG_OUTBOX_VERSION.  Text columns that are ordered or compared
 * use the "C" collation: byte order, as SQLite's listings.
 */
static const char *const migrations[] = {
    /* 0 -> 1: the tables of SQLite's schema 8 (store/db.c). */
    "CREATE TABLE @S.tbx_schema_info ("
    " id integer PRIMARY KEY CHECK (id = 1),"
    " kind text NOT NULL,"
    " version integer NOT NULL,"
    " store_id text NOT NULL,"
    " created_ms bigint NOT NULL);"
    "CREATE TABLE @S.tbx_outbox ("
    " grp text COLLATE \"C\" NOT NULL,"
    " msg_id text COLLATE \"C\" NOT NULL,"
    " in_topic text COLLATE \"C\" NOT NULL,"
    " in_partition integer NOT NULL,"
    " in_offset bigint NOT NULL,"
    " in_token text COLLATE \"C\","
    " attempt text COLLATE \"C\","
    " mint_seq bigint,"
    " kind integer NOT NULL DEFAULT 0 CHECK (kind IN (0, 1)),"
    " error text,"
    " created_ms bigint NOT NULL,"
    " stuck_ms bigint,"
    " dispatch_failures integer NOT NULL DEFAULT 0,"
    " msgs bytea,"
    " CHECK ((attempt IS NULL) = (mint_seq IS NULL)),"
    " PRIMARY KEY (grp, msg_id));"
    "CREATE TABLE @S.tbx_ingress ("
    " grp text COLLATE \"C\" NOT NULL,"
    " topic text COLLATE \"C\" NOT NULL,"
    " \"partition\" integer NOT NULL,"
    " next_offset bigint NOT NULL,"
    " PRIMARY KEY (grp, topic, \"partition\"));"
    "CREATE TABLE @S.tbx_dead_letters ("
    " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " grp text COLLATE \"C\" NOT NULL,"
    " msg_id text COLLATE \"C\" NOT NULL,"
    " in_topic text COLLATE \"C\" NOT NULL,"
    " in_partition integer NOT NULL,"
    " in_offset bigint NOT NULL,"
    " dlq_topic text COLLATE \"C\" NOT NULL,"
    " error text,"
    " attempts integer NOT NULL,"
    " created_ms bigint NOT NULL);"
    "CREATE INDEX tbx_dead_letters_grp ON @S.tbx_dead_letters"
    " (grp, created_ms);"
    "CREATE TABLE @S.tbx_inflight ("
    " grp text COLLATE \"C\" NOT NULL,"
    " topic text COLLATE \"C\" NOT NULL,"
    " \"partition\" integer NOT NULL,"
    " first_offset bigint NOT NULL,"
    " last_offset bigint NOT NULL,"
    " crashes integer NOT NULL,"
    " suspect_until bigint NOT NULL,"
    " lone integer NOT NULL DEFAULT 0,"
    " count_offset bigint NOT NULL DEFAULT -1,"
    " retries integer NOT NULL DEFAULT 0,"
    " PRIMARY KEY (grp, topic, \"partition\"));"
    "CREATE TABLE @S.tbx_alarms ("
    " grp text COLLATE \"C\" NOT NULL,"
    " name text COLLATE \"C\" NOT NULL,"
    " count bigint NOT NULL,"
    " first_ms bigint NOT NULL,"
    " last_ms bigint NOT NULL,"
    " detail text,"
    " PRIMARY KEY (grp, name));"
    "CREATE TABLE @S.tbx_undelivered ("
    " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " grp text COLLATE \"C\" NOT NULL,"
    " msg_id text COLLATE \"C\" NOT NULL,"
    " out_id text COLLATE \"C\" NOT NULL,"
    " topic text COLLATE \"C\" NOT NULL,"
    " type text NOT NULL,"
    " key bytea,"
    " payload bytea,"
    " headers bytea,"
    " token text COLLATE \"C\","
    " mint_seq bigint,"
    " error text NOT NULL,"
    " attempts integer NOT NULL,"
    " created_ms bigint NOT NULL,"
    " UNIQUE (grp, out_id));",
    /* 1 -> 2: SQLite's schema 9: the token store each group's workers
     * use, for `inspect` to tell a wrong pair of stores. */
    "CREATE TABLE @S.tbx_bindings ("
    " grp text COLLATE \"C\" NOT NULL PRIMARY KEY,"
    " tokens_id text NOT NULL,"
    " tokens_where text NOT NULL,"
    " used_ms bigint NOT NULL);",
    /* 2 -> 3: SQLite's schema 12: a record's token that is a bit of a
     * token set (docs/batched-tokens.md): in_token holds the set's id,
     * in_tbit the bit; NULL for a per-message token. */
    "ALTER TABLE @S.tbx_outbox ADD COLUMN in_tbit integer CHECK (in_tbit"
    " IS NULL OR (in_tbit BETWEEN 0 AND 65535 AND in_token IS NOT"
    " NULL));",
    /* 3 -> 4: SQLite's schema 12: the outbox row by the batch
     * (docs/batched-tokens.md), its index of the per-message records it
     * covers, and the generation per partition that the resume check
     * compares its memory with (outbox/pg_batch.c).  Empty until the
     * protocol writes batch rows; tbx_outbox stays as it is until
     * then. */
    "CREATE TABLE @S.tbx_obatch ("
    " grp text COLLATE \"C\" NOT NULL,"
    " row_id text COLLATE \"C\" NOT NULL,"
    " attempt text COLLATE \"C\","
    " mint_seq bigint,"
    " tokfmt integer NOT NULL CHECK (tokfmt IN (1, 2)),"
    " created_ms bigint NOT NULL,"
    " stuck_ms bigint,"
    " dispatch_failures bigint NOT NULL DEFAULT 0,"
    " cover bytea NOT NULL,"
    " msgs bytea,"
    " wire bytea NOT NULL,"
    " CHECK ((attempt IS NULL) = (mint_seq IS NULL)),"
    " PRIMARY KEY (grp, row_id));"
    "CREATE TABLE @S.tbx_cover_msg ("
    " grp text COLLATE \"C\" NOT NULL,"
    " msg_id text COLLATE \"C\" NOT NULL,"
    " row_id text COLLATE \"C\" NOT NULL,"
    " PRIMARY KEY (grp, msg_id));"
    "CREATE INDEX tbx_cover_msg_row ON @S.tbx_cover_msg (grp, row_id);"
    "ALTER TABLE @S.tbx_inflight ADD COLUMN gen bigint NOT NULL DEFAULT"
    " 0;",
    /* 4 -> 5: SQLite's schema 15: when `inspect dead-letters replay`
     * sent a dead letter back to its origin topic (NULL: never). */
    "ALTER TABLE @S.tbx_dead_letters ADD COLUMN replayed_ms bigint;",
    /* 5 -> 6: SQLite's schema 16: a message given up on whose token is a
     * bit of a token set (a batch row of tokfmt 2) keeps the set's id,
     * the bit and the partition the set was minted for, so that
     * `inspect undelivered resend` produces it with tbx-tset and
     * tbx-tbit to that partition.  NULL for a per-message token. */
    "ALTER TABLE @S.tbx_undelivered ADD COLUMN tset text COLLATE \"C\";"
    "ALTER TABLE @S.tbx_undelivered ADD COLUMN tbit integer CHECK (tbit IS"
    " NULL OR (tbit BETWEEN 0 AND 65535 AND tset IS NOT NULL));"
    "ALTER TABLE @S.tbx_undelivered ADD COLUMN tpart integer CHECK ((tpart"
    " IS NULL) = (tbit IS NULL) AND (tpart IS NULL OR tpart >= 0));",
};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) ==
		   TBX_PG_OUTBOX_VERSION,
	       "one migration step per schema version");

enum {
	Q_MIG_LOCK,
	Q_HAS_TABLE,
	Q_INFO_GET,
	Q_INFO_ADD,
	Q_INFO_VERSION,
	Q_ROW_FIND,
	Q_ROWS_INSERT,
	Q_ROW_GET,
	Q_MSGS_UNTOKENED,
	Q_SET_ATTEMPT,
	Q_ROW_DELETE,
	Q_INGRESS_GET,
	Q_INGRESS_ENSURE,
	Q_INGRESS_LOCK,
	Q_INGRESS_SET,
	Q_DEAD_LETTER,
	Q_COUNT_ALL,
	Q_COUNT_GRP,
	Q_ROWS_OLDER,
	Q_INFLIGHT_GET,
	Q_INFLIGHT_GET_MANY,
	Q_INFLIGHT_PUT,
	Q_INFLIGHT_DEL,
	Q_INFLIGHT_RELEASE,
	Q_ROWS_BELOW,
	Q_MARK_STUCK,
	Q_ALARM_ADD,
	Q_BINDING_SET,
	Q_BINDING_GET,
	Q_DISPATCH_FAILED,
	Q_UNDELIVERED_ADD,
	Q_LOCK_IDS,
	Q_ROWS_FIND,
	Q_ROWS_DELETE,
	Q__COUNT
};

static const char *const sql[Q__COUNT] = {
    /* Serialises the openers of one schema (creation, migrations). */
    [Q_MIG_LOCK] =
	"SELECT pg_advisory_xact_lock(" LOCK_MIGRATION ", hashtext($1::text))",
    [Q_HAS_TABLE] = "SELECT count(*) FROM pg_catalog.pg_tables WHERE "
		    "schemaname = $1 AND tablename = $2",
    [Q_INFO_GET] = "SELECT kind, version, store_id FROM @S.tbx_schema_info "
		   "WHERE id = 1",
    [Q_INFO_ADD] = "INSERT INTO @S.tbx_schema_info (id, kind, version, "
		   "store_id, created_ms) VALUES (1, 'service', $1, $2, $3)",
    [Q_INFO_VERSION] = "UPDATE @S.tbx_schema_info SET version = $1 WHERE "
		       "id = 1",
    [Q_ROW_FIND] = "SELECT attempt FROM @S.tbx_outbox WHERE grp = $1 AND "
		   "msg_id = $2",
    /* The key is a guard: with A's lock nothing conflicts; a conflict
     * inserts nothing and keeps the transaction usable. */
    /* The optional texts come as "" (NULL in the table), mint_seq as 0
     * without an attempt (NULL). */
    [Q_ROWS_INSERT] =
	"INSERT INTO @S.tbx_outbox (grp, msg_id, in_topic, in_partition, "
	"in_offset, in_token, attempt, mint_seq, kind, error, created_ms, "
	"msgs, in_tbit) SELECT $1, u.id, u.topic, u.part, u.off, "
	"NULLIF(u.tok, ''), NULLIF(u.att, ''), CASE WHEN u.att = '' THEN "
	"NULL ELSE u.seq END, u.kind, NULLIF(u.err, ''), u.ms, u.msgs, "
	"NULLIF(u.tbit, -1) FROM unnest($2::text[], $3::text[], $4::int8[], "
	"$5::int8[], $6::text[], $7::text[], $8::int8[], $9::int8[], "
	"$10::text[], $11::int8[], $12::bytea[], $13::int8[]) AS u(id, "
	"topic, part, off, tok, att, seq, kind, err, ms, msgs, tbit) ON "
	"CONFLICT (grp, msg_id) DO NOTHING",
    [Q_ROW_GET] = "SELECT in_topic, in_partition, in_offset, in_token, "
		  "attempt, mint_seq, kind, error, created_ms, msgs, in_tbit "
		  "FROM @S.tbx_outbox WHERE grp = $1 AND msg_id = $2",
    [Q_MSGS_UNTOKENED] = "SELECT msgs FROM @S.tbx_outbox WHERE grp = $1 "
			 "AND msg_id = $2 AND attempt IS NULL",
    /* B: the first persisted attempt wins; a second updater waits for
     * the row lock, re-reads the row and updates nothing. */
    [Q_SET_ATTEMPT] = "UPDATE @S.tbx_outbox SET attempt = $1, mint_seq = "
		      "$2, msgs = $5 WHERE grp = $3 AND msg_id = $4 AND "
		      "attempt IS NULL",
    [Q_ROW_DELETE] = "DELETE FROM @S.tbx_outbox WHERE grp = $1 AND msg_id "
		     "= $2",
    [Q_INGRESS_GET] = "SELECT next_offset FROM @S.tbx_ingress WHERE grp = "
		      "$1 AND topic = $2 AND \"partition\" = $3",
    /* Inside a transaction: a partition without an offset gets the row
     * "none" (-1), so that the next statement has a row to lock. */
    [Q_INGRESS_ENSURE] = "INSERT INTO @S.tbx_ingress (grp, topic, "
			 "\"partition\", next_offset) VALUES ($1, $2, $3, -1) "
			 "ON CONFLICT (grp, topic, \"partition\") DO NOTHING",
    [Q_INGRESS_LOCK] = "SELECT next_offset FROM @S.tbx_ingress WHERE grp = "
		       "$1 AND topic = $2 AND \"partition\" = $3 FOR UPDATE",
    [Q_INGRESS_SET] = "INSERT INTO @S.tbx_ingress (grp, topic, "
		      "\"partition\", next_offset) VALUES ($1, $2, $3, $4) ON "
		      "CONFLICT (grp, topic, \"partition\") DO UPDATE SET "
		      "next_offset = excluded.next_offset",
    [Q_DEAD_LETTER] = "INSERT INTO @S.tbx_dead_letters (grp, msg_id, "
		      "in_topic, in_partition, in_offset, dlq_topic, error, "
		      "attempts, created_ms) VALUES ($1, $2, $3, $4, $5, $6, "
		      "$7, $8, $9)",
    [Q_COUNT_ALL] = "SELECT count(*) FROM @S.tbx_outbox",
    [Q_COUNT_GRP] = "SELECT count(*) FROM @S.tbx_outbox WHERE grp = $1",
    [Q_ROWS_OLDER] = "SELECT msg_id FROM @S.tbx_outbox WHERE grp = $1 AND "
		     "created_ms <= $2 ORDER BY created_ms, msg_id LIMIT $3",
    [Q_INFLIGHT_GET] = "SELECT first_offset, last_offset, crashes, "
		       "suspect_until, lone, count_offset, retries FROM "
		       "@S.tbx_inflight WHERE grp = $1 AND topic = $2 AND "
		       "\"partition\" = $3",
    /* The position of each partition asked for (from 1) with its row. */
    [Q_INFLIGHT_GET_MANY] = "SELECT u.i, f.first_offset, f.last_offset, "
			    "f.crashes, f.suspect_until, f.lone, "
			    "f.count_offset, f.retries FROM unnest($2::text[], "
			    "$3::int8[]) WITH ORDINALITY AS u(t, p, i) JOIN "
			    "@S.tbx_inflight f ON f.grp = $1 AND f.topic = u.t "
			    "AND f.\"partition\" = u.p",
    [Q_INFLIGHT_PUT] = "INSERT INTO @S.tbx_inflight (grp, topic, "
		       "\"partition\", first_offset, last_offset, crashes, "
		       "suspect_until, lone, count_offset, retries) VALUES "
		       "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT "
		       "(grp, topic, \"partition\") DO UPDATE SET "
		       "first_offset = excluded.first_offset, last_offset = "
		       "excluded.last_offset, crashes = excluded.crashes, "
		       "suspect_until = excluded.suspect_until, lone = "
		       "excluded.lone, count_offset = excluded.count_offset, "
		       "retries = excluded.retries",
    /* A row whose gen was bumped stays (gen never goes back), with
     * everything else as a partition without a row reads; any other row
     * goes.  One statement, one round trip: the UPDATE runs only when
     * the DELETE took nothing.  A bump committed while the DELETE waited
     * for the row lock makes READ COMMITTED re-read the row: the DELETE
     * skips it (gen is no longer 0), and the UPDATE, whose snapshot
     * still shows the old version, re-reads the newest one and clears
     * it. */
    [Q_INFLIGHT_DEL] =
	"WITH d AS (DELETE FROM @S.tbx_inflight WHERE grp = $1 AND topic = "
	"$2 AND \"partition\" = $3 AND gen = 0 RETURNING 1) UPDATE "
	"@S.tbx_inflight SET first_offset = -1, last_offset = -1, crashes = "
	"0, suspect_until = -1, lone = 0, count_offset = -1, retries = 0 "
	"WHERE grp = $1 AND topic = $2 AND \"partition\" = $3 AND NOT "
	"EXISTS (SELECT 1 FROM d)",
    [Q_INFLIGHT_RELEASE] = "UPDATE @S.tbx_inflight SET first_offset = -1, "
			   "last_offset = -1, lone = 0 WHERE grp = $1 AND "
			   "topic = $2 AND \"partition\" = $3",
    [Q_ROWS_BELOW] = "SELECT msg_id FROM @S.tbx_outbox WHERE grp = $1 AND "
		     "in_topic = $2 AND in_partition = $3 AND in_offset < $4 "
		     "ORDER BY in_offset, msg_id LIMIT $5",
    [Q_MARK_STUCK] = "UPDATE @S.tbx_outbox SET stuck_ms = $3 WHERE grp = "
		     "$1 AND msg_id = $2 AND stuck_ms IS NULL",
    [Q_ALARM_ADD] = "INSERT INTO @S.tbx_alarms AS a (grp, name, count, "
		    "first_ms, last_ms, detail) VALUES ($1, $2, 1, $3, $3, "
		    "$4) ON CONFLICT (grp, name) DO UPDATE SET count = "
		    "a.count + 1, last_ms = excluded.last_ms, detail = "
		    "excluded.detail",
    [Q_BINDING_SET] = "INSERT INTO @S.tbx_bindings (grp, tokens_id, "
		      "tokens_where, used_ms) VALUES ($1, $2, $3, $4) ON "
		      "CONFLICT (grp) DO UPDATE SET tokens_id = "
		      "excluded.tokens_id, tokens_where = "
		      "excluded.tokens_where, used_ms = excluded.used_ms",
    [Q_BINDING_GET] = "SELECT tokens_id, tokens_where, used_ms FROM "
		      "@S.tbx_bindings WHERE grp = $1",
    [Q_DISPATCH_FAILED] = "UPDATE @S.tbx_outbox SET dispatch_failures = "
			  "dispatch_failures + 1 WHERE grp = $1 AND msg_id = "
			  "$2 RETURNING dispatch_failures",
    /* One line per outgoing message however often it is given up on. */
    [Q_UNDELIVERED_ADD] = "INSERT INTO @S.tbx_undelivered (grp, msg_id, "
			  "out_id, topic, type, key, payload, headers, token, "
			  "mint_seq, error, attempts, created_ms, tset, tbit, "
			  "tpart) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
			  "$10, $11, $12, $13, $14, $15, $16) "
			  "ON CONFLICT (grp, out_id) DO NOTHING",
    /* A's locks: the keys hashed by the server, deduplicated and sorted
     * in the subquery, whose Sort the outer projection reads row by row,
     * so that the locks are taken in ascending key order (the test
     * lock_ids_takes_the_keys_in_ascending_order checks it). */
    [Q_LOCK_IDS] = "SELECT pg_advisory_xact_lock(" LOCK_MSG
		   ", s.k) FROM (SELECT DISTINCT hashtext($1::text || ':' || "
		   "x) AS k FROM unnest($2::text[]) AS x ORDER BY 1) s",
    /* A's row check for the batch: one round trip. */
    [Q_ROWS_FIND] = "SELECT msg_id, attempt FROM @S.tbx_outbox WHERE grp = "
		    "$1 AND msg_id = ANY($2::text[])",
    /* E for the batch. */
    [Q_ROWS_DELETE] = "DELETE FROM @S.tbx_outbox WHERE grp = $1 AND msg_id "
		      "= ANY($2::text[])",
};

static const tbx_outbox_ops_t pg_ops;

static pg_store_t *ps(tbx_outbox_t *base)
{
	return (pg_store_t *)base;
}

/* Runs @p q with @p p, then frees what @p p owns. */
static int run(pg_store_t *store, int q, tbx__pg_params_t *p, PGresult **res)
{
	int err = tbx__pg_run(&store->stmts, q, p, res);

	if (p)
		tbx__pgp_free(p);
	return err;
}

/* Like run() for a write whose answer nobody reads: in a transaction it
 * is sent with the next statement that waits (tbx__pg_defer()), so a
 * failure fails that statement or the commit; outside one it runs at
 * once. */
static int run_deferred(pg_store_t *store, int q, tbx__pg_params_t *p,
			const char *what)
{
	int err = tbx__pg_defer(&store->stmts, q, p, NULL, 0, what);

	tbx__pgp_free(p);
	return err;
}

/* The rows a command changed (PQcmdTuples). */
static int64_t changes(const PGresult *res)
{
	const char *n = PQcmdTuples((PGresult *)res);

	return n && *n ? strtoll(n, NULL, 10) : 0;
}

/*
 * Opening: the schema, its version, and the session.
 */

/* Fails the open with a message naming the schema and the server's
 * reason. */
static int open_fail(pg_store_t *store, int err, const char *what, char *errstr,
		     size_t errstr_size)
{
	tbx__seterr(errstr, errstr_size, err, "%s: schema %s: %s: %s",
		    store->pg->where, store->schema, what,
		    tbx__pg_errmsg(store->pg));
	return err;
}

/* Whether table @p name is in the store's schema. */
static int has_table(pg_store_t *store, const char *name, int *yes)
{
	tbx__pg_params_t p;
	int64_t n;
	int err;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, store->schema);
	tbx__pgp_text(&p, name);
	err = tbx__pg_run_i64(&store->stmts, Q_HAS_TABLE, &p, &n, NULL);
	*yes = n > 0;
	return err;
}

/* Reads tbx_schema_info and refuses another kind or a newer version.
 * *version = 0 when the schema has no tokenbox tables. */
static int read_info(pg_store_t *store, int *version, char *errstr,
		     size_t errstr_size)
{
	PGresult *res;
	char kind[32];
	int yes, err;

	*version = 0;
	if ((err = has_table(store, "tbx_schema_info", &yes)))
		return open_fail(store, err, "cannot read the catalog", errstr,
				 errstr_size);
	if (!yes) {
		/* Tables of an outbox without the version table were not
		 * made by this backend. */
		if ((err = has_table(store, "tbx_outbox", &yes)))
			return open_fail(store, err, "cannot read the catalog",
					 errstr, errstr_size);
		if (yes)
			return tbx__seterr(
			    errstr, errstr_size, TBX_ENOTDB,
			    "%s: schema %s: not a tokenbox store (a "
			    "tbx_outbox table without tbx_schema_info)",
			    store->pg->where, store->schema);
		return TBX_OK;
	}
	if ((err = tbx__pg_run(&store->stmts, Q_INFO_GET, NULL, &res)))
		return open_fail(store, err, "cannot read tbx_schema_info",
				 errstr, errstr_size);
	if (PQntuples(res) != 1 ||
	    tbx__pg_text_to(res, 0, 0, kind, sizeof(kind))) {
		PQclear(res);
		return tbx__seterr(errstr, errstr_size, TBX_ENOTDB,
				   "%s: schema %s: not a tokenbox store "
				   "(tbx_schema_info has no row 1)",
				   store->pg->where, store->schema);
	}
	*version = (int)tbx__pg_i64(res, 0, 1);
	PQclear(res);
	if (strcmp(kind, "service") != 0)
		return tbx__seterr(errstr, errstr_size, TBX_ENOTDB,
				   "%s: schema %s holds a tokenbox store of "
				   "kind '%s', not a service store; give the "
				   "service store a schema of its own "
				   "(store.schema)",
				   store->pg->where, store->schema, kind);
	if (*version > TBX_PG_OUTBOX_VERSION || *version < 1)
		return tbx__seterr(errstr, errstr_size, TBX_ESCHEMA,
				   "%s: schema %s: service store version %d "
				   "is newer than this tokenbox's (%d); use a "
				   "newer tokenbox",
				   store->pg->where, store->schema, *version,
				   TBX_PG_OUTBOX_VERSION);
	return TBX_OK;
}

/* Runs one DDL text of @p tmpl with the schema filled in. */
static int ddl(pg_store_t *store, const char *tmpl)
{
	tbx__pg_stmts_t one;
	int err;

	if ((err = tbx__pg_stmts_init(&one, store->pg, "ddl", &tmpl, 1,
				      store->schema, NULL)))
		return err;
	err = tbx__pg_exec(store->pg, one.sql[0]);
	tbx__pg_stmts_free(&one);
	return err;
}

/* Creates the schema or migrates it forward, in one transaction under
 * the schema's migration lock: a second opener waits, then finds the
 * tables made. */
static int migrate(pg_store_t *store, char *errstr, size_t errstr_size)
{
	tbx__pg_params_t p;
	int version, err;

	if ((err = tbx__pg_begin(store->pg)))
		return open_fail(store, err, "cannot begin", errstr,
				 errstr_size);
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, store->schema);
	if ((err = run(store, Q_MIG_LOCK, &p, NULL))) {
		open_fail(store, err, "cannot lock for migration", errstr,
			  errstr_size);
		goto rollback;
	}
	/* Not CREATE SCHEMA IF NOT EXISTS: PostgreSQL checks the database's
	 * CREATE privilege before it looks, and a service's role may own
	 * its schema without it (docs/operations.md, roles and grants). */
	if ((err = ddl(store, "DO $$BEGIN IF to_regnamespace('@S') IS NULL "
			      "THEN CREATE SCHEMA @S; END IF; END$$"))) {
		open_fail(store, err, "cannot create the schema", errstr,
			  errstr_size);
		goto rollback;
	}
	if ((err = read_info(store, &version, errstr, errstr_size)))
		goto rollback;
	for (int v = version; v < TBX_PG_OUTBOX_VERSION; v++) {
		if ((err = ddl(store, migrations[v]))) {
			char what[64];
			snprintf(what, sizeof(what),
				 "migration to version %d failed", v + 1);
			open_fail(store, err, what, errstr, errstr_size);
			goto rollback;
		}
	}
	tbx__pgp_init(&p);
	tbx__pgp_i64(&p, TBX_PG_OUTBOX_VERSION);
	if (version == 0) {
		char id[TBX_UUID_LEN + 1];

		tbx__uuid(id);
		tbx__pgp_text(&p, id);
		tbx__pgp_i64(&p, tbx__now_ms());
		err = run(store, Q_INFO_ADD, &p, NULL);
	} else if (version < TBX_PG_OUTBOX_VERSION) {
		err = run(store, Q_INFO_VERSION, &p, NULL);
	} else {
		tbx__pgp_free(&p);
	}
	if (err) {
		open_fail(store, err, "cannot record the schema version",
			  errstr, errstr_size);
		goto rollback;
	}
	if ((err = tbx__pg_commit(store->pg))) {
		open_fail(store, err, "cannot commit the schema", errstr,
			  errstr_size);
		return err;
	}
	if (version < TBX_PG_OUTBOX_VERSION)
		tbx__log(TBX_LOG_INFO,
			 "postgresql: %s: schema %s: service store %s "
			 "version %d",
			 store->pg->where, store->schema,
			 version ? "migrated to" : "created at",
			 TBX_PG_OUTBOX_VERSION);
	store->version = TBX_PG_OUTBOX_VERSION;
	return TBX_OK;
rollback:
	tbx__pg_rollback(store->pg);
	return err;
}

/* Read-only (or create off): the tables must be there, at this
 * version. */
static int check_existing(pg_store_t *store, const tbx__db_opts_t *opts,
			  char *errstr, size_t errstr_size)
{
	int version, err;

	if ((err = tbx__pg_begin(store->pg)))
		return open_fail(store, err, "cannot begin", errstr,
				 errstr_size);
	err = read_info(store, &version, errstr, errstr_size);
	tbx__pg_rollback(store->pg);
	if (err)
		return err;
	if (version == 0)
		return tbx__seterr(
		    errstr, errstr_size, TBX_ENOENT,
		    "%s: schema %s: no service store there%s", store->pg->where,
		    store->schema,
		    opts->readonly ? "" : " (and creating it is off)");
	if (version < TBX_PG_OUTBOX_VERSION)
		return tbx__seterr(errstr, errstr_size, TBX_ESCHEMA,
				   "%s: schema %s: service store version %d "
				   "is older than this tokenbox's (%d); open "
				   "it read-write once (e.g. start a worker "
				   "on it) to migrate it",
				   store->pg->where, store->schema, version,
				   TBX_PG_OUTBOX_VERSION);
	store->version = version;
	return TBX_OK;
}

/* The session parameters of the options, kept across reconnects. */
static int session(pg_store_t *store, const tbx__db_opts_t *opts, char *errstr,
		   size_t errstr_size)
{
	char ms[24];
	int err;

	/* SQLite's busy timeout 0 fails at once; lock_timeout 0 would wait
	 * for ever. */
	snprintf(ms, sizeof(ms), "%d",
		 opts->busy_timeout_ms > 0 ? opts->busy_timeout_ms : 1);
	if ((err = tbx__pg_set(store->pg, "lock_timeout", ms)))
		return open_fail(store, err, "cannot set lock_timeout", errstr,
				 errstr_size);
	if (!opts->synchronous_full &&
	    (err = tbx__pg_set(store->pg, "synchronous_commit", "off")))
		return open_fail(store, err, "cannot set synchronous_commit",
				 errstr, errstr_size);
	/* A handler's unqualified tables: in the service schema, then
	 * public, unless the connection string says otherwise. */
	if (!tbx__pg_option_given(store->pg, "search_path")) {
		char path[TBX_PG_IDENT_MAX + 16];

		snprintf(path, sizeof(path), "\"%s\", public", store->schema);
		if ((err = tbx__pg_set(store->pg, "search_path", path)))
			return open_fail(store, err, "cannot set search_path",
					 errstr, errstr_size);
	}
	return TBX_OK;
}

int tbx_outbox_pg_open(const char *conninfo, const char *schema,
		       const tbx__db_opts_t *opts, tbx_outbox_t **out,
		       char *errstr, size_t errstr_size)
{
	tbx__db_opts_t defaults;
	pg_store_t *store;
	int err;

	if (!out)
		return tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				   "no place for the store");
	*out = NULL;
	if (!conninfo || !*conninfo)
		return tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				   "no PostgreSQL connection string given");
	if ((err = tbx__pg_ident_check("store.schema", schema, errstr,
				       errstr_size)))
		return err;
	if (!opts) {
		tbx__db_opts_init(&defaults);
		opts = &defaults;
	}
	if (!(store = calloc(1, sizeof(*store))))
		return tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				   "out of memory");
	store->base.ops = &pg_ops;
	tbx__strlcpy(store->schema, schema, sizeof(store->schema));
	if ((err =
		 tbx__pg_connect(conninfo, &store->pg, errstr, errstr_size))) {
		free(store);
		return err;
	}
	if (tbx__pg_stmts_init(&store->stmts, store->pg, "svc", sql, Q__COUNT,
			       schema, NULL) ||
	    tbx__outbox_pg_read_init(store) ||
	    tbx__outbox_pg_batch_init(store)) {
		err = tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				  "out of memory");
		goto fail;
	}
	if ((err = session(store, opts, errstr, errstr_size)))
		goto fail;
	if (opts->readonly || !opts->create)
		err = check_existing(store, opts, errstr, errstr_size);
	else
		err = migrate(store, errstr, errstr_size);
	if (err)
		goto fail;
	/* Read-only: no statement may write, as SQLite's query_only. */
	if (opts->readonly &&
	    (err = tbx__pg_set(store->pg, "default_transaction_read_only",
			       "on"))) {
		open_fail(store, err, "cannot make the session read-only",
			  errstr, errstr_size);
		goto fail;
	}
	*out = &store->base;
	return TBX_OK;
fail:
	tbx__log(TBX_LOG_DEBUG, "%s",
		 errstr && errstr_size ? errstr : "open failed");
	store->base.ops->close(&store->base);
	return err;
}

static void pg_close(tbx_outbox_t *base)
{
	pg_store_t *store = ps(base);

	if (!store)
		return;
	if (store->reading)
		tbx__pgo_read_end(base);
	tbx__pg_stmts_free(&store->stmts);
	tbx__pg_stmts_free(&store->reads);
	tbx__pg_stmts_free(&store->batch);
	tbx__pg_unref(store->pg);
	free(store);
}

struct tbx__pg *tbx_outbox_pg(tbx_outbox_t *store)
{
	return store && store->ops == &pg_ops ? ps(store)->pg : NULL;
}

/*
 * Transactions.
 */

static int pg_begin(tbx_outbox_t *base)
{
	pg_store_t *store = ps(base);
	int err;

	if ((err = tbx__pg_begin(store->pg)))
		return err;
	if (store->relaxed &&
	    (err = tbx__pg_exec(store->pg,
				"SET LOCAL synchronous_commit = off"))) {
		tbx__pg_rollback(store->pg);
		return err;
	}
	return TBX_OK;
}

static int pg_commit(tbx_outbox_t *base)
{
	return tbx__pg_commit(ps(base)->pg);
}

static int pg_rollback(tbx_outbox_t *base)
{
	tbx__pg_t *pg = ps(base)->pg;

	/* Callers roll back after any failure, including a failed COMMIT
	 * that ended the transaction already: nothing to do then. */
	if (pg->in_tx)
		tbx__pg_rollback(pg);
	return TBX_OK;
}

/* Deferred: sent with the next statement's round trip, the release
 * with the next savepoint's (store/pg.h). */
static int pg_savepoint(tbx_outbox_t *base)
{
	return tbx__pg_savepoint(ps(base)->pg, "tbx_msg");
}

static int pg_release(tbx_outbox_t *base)
{
	return tbx__pg_release(ps(base)->pg);
}

static int pg_undo(tbx_outbox_t *base)
{
	return tbx__pg_undo(ps(base)->pg);
}

/*
 * Outbox rows.
 */

static int pg_row_find(tbx_outbox_t *base, const char *grp, const char *msg_id,
		       int *found, char attempt[TBX_UUID_LEN + 1])
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	*found = 0;
	if (attempt)
		attempt[0] = '\0';
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, msg_id);
	if ((err = run(store, Q_ROW_FIND, &p, &res)))
		return err;
	if (PQntuples(res) > 0) {
		*found = 1;
		if (attempt &&
		    tbx__pg_text_to(res, 0, 0, attempt, TBX_UUID_LEN + 1)) {
			tbx__log(TBX_LOG_ERR,
				 "outbox row %s: its attempt is not a UUID",
				 msg_id);
			err = TBX_ESTORE;
		}
	}
	PQclear(res);
	return err;
}

/* A row rows_find() found: its id and its row in the result. */
typedef struct row_ref {
	const char *id;
	int r;
} row_ref_t;

static int cmp_ref(const void *a, const void *b)
{
	return strcmp(((const row_ref_t *)a)->id, ((const row_ref_t *)b)->id);
}

static int pg_rows_find(tbx_outbox_t *base, const char *grp,
			const char *const *ids, size_t n, tbx__row_hit_t *out)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	PGresult *res;
	row_ref_t *refs = NULL;
	int rows, err = TBX_OK;

	if (!grp || (n && (!ids || !out)))
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++) {
		out[i].found = 0;
		out[i].attempt[0] = '\0';
	}
	if (n == 0)
		return TBX_OK;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text_array(&p, ids, n);
	if ((err = run(store, Q_ROWS_FIND, &p, &res)))
		return err;
	/* The rows found (few, usually), sorted by id (byte order); each id
	 * then looks its row up. */
	if ((rows = PQntuples(res)) == 0)
		goto out;
	if (!(refs = malloc((size_t)rows * sizeof(*refs)))) {
		err = TBX_ENOMEM;
		goto out;
	}
	for (int r = 0; r < rows; r++)
		refs[r] = (row_ref_t){tbx__pg_text(res, r, 0), r};
	qsort(refs, (size_t)rows, sizeof(*refs), cmp_ref);
	for (size_t i = 0; i < n && !err; i++) {
		row_ref_t key = {ids[i], 0};
		const row_ref_t *hit =
		    bsearch(&key, refs, (size_t)rows, sizeof(*refs), cmp_ref);

		if (!hit)
			continue;
		out[i].found = 1;
		if (tbx__pg_text_to(res, hit->r, 1, out[i].attempt,
				    sizeof(out[i].attempt))) {
			tbx__log(TBX_LOG_ERR,
				 "outbox row %s: its attempt is not a UUID",
				 ids[i]);
			err = TBX_ESTORE;
		}
	}
out:
	free(refs);
	PQclear(res);
	return err;
}

static int pg_rows_insert(tbx_outbox_t *base, const char *grp,
			  const tbx__row_t *const *rows, size_t n);

/* One row: the batch's statement with one element (store/pg.h: sent
 * with the transaction's next statement; a row there already fails that
 * statement, or the commit, with TBX_EEXIST). */
static int pg_row_insert(tbx_outbox_t *base, const char *grp,
			 const tbx__row_t *row)
{
	if (!grp || !tbx_outbox_row_check(row)) {
		tbx__log(TBX_LOG_ERR,
			 "outbox: refusing to insert row %s: it "
			 "breaks the row invariants",
			 row ? row->msg_id : "(null)");
		return TBX_EINVAL;
	}
	return pg_rows_insert(base, grp, &row, 1);
}

/* The columns of pg_rows_insert(), one array each. */
typedef struct {
	const char **id, **topic, **tok, **att, **err;
	int64_t *part, *off, *seq, *kind, *ms, *tbit;
	void **blob;
	size_t *blen;
} rows_cols_t;

static void rows_cols_free(rows_cols_t *c, size_t n)
{
	if (c->blob)
		for (size_t i = 0; i < n; i++)
			free(c->blob[i]);
	free(c->id);
	free(c->part);
	free(c->blob);
	free(c->blen);
}

static int rows_cols_make(rows_cols_t *c, const tbx__row_t *const *rows,
			  size_t n)
{
	int err;

	memset(c, 0, sizeof(*c));
	c->id = calloc(5 * n, sizeof(*c->id));
	c->part = calloc(6 * n, sizeof(*c->part));
	c->blob = calloc(n, sizeof(*c->blob));
	c->blen = calloc(n, sizeof(*c->blen));
	if (!c->id || !c->part || !c->blob || !c->blen)
		return TBX_ENOMEM;
	c->topic = c->id + n;
	c->tok = c->id + 2 * n;
	c->att = c->id + 3 * n;
	c->err = c->id + 4 * n;
	c->off = c->part + n;
	c->seq = c->part + 2 * n;
	c->kind = c->part + 3 * n;
	c->ms = c->part + 4 * n;
	c->tbit = c->part + 5 * n;
	for (size_t i = 0; i < n; i++) {
		const tbx__row_t *row = rows[i];

		c->id[i] = row->msg_id;
		c->topic[i] = row->in_topic;
		c->tok[i] = row->in_token;
		c->att[i] = row->attempt;
		c->err[i] = row->error ? row->error : "";
		c->part[i] = row->in_partition;
		c->off[i] = row->in_offset;
		c->seq[i] = row->attempt[0] ? row->mint_seq : 0;
		c->kind[i] = row->kind;
		c->ms[i] = row->created_ms ? row->created_ms : tbx__now_ms();
		c->tbit[i] = row->in_set ? (int64_t)row->in_tbit : -1;
		if ((err = tbx__row_msgs_encode(row, &c->blob[i], &c->blen[i])))
			return err;
	}
	return TBX_OK;
}

static int pg_rows_insert(tbx_outbox_t *base, const char *grp,
			  const tbx__row_t *const *rows, size_t n)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	rows_cols_t c;
	char what[TBX_MSGID_MAX + 64];
	int err;

	if (n == 0)
		return TBX_OK;
	if (!grp || !rows)
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!rows[i] || !tbx_outbox_row_check(rows[i])) {
			tbx__log(TBX_LOG_ERR,
				 "outbox: refusing to insert row %s: it "
				 "breaks the row invariants",
				 rows[i] ? rows[i]->msg_id : "(null)");
			return TBX_EINVAL;
		}
	if ((err = rows_cols_make(&c, rows, n))) {
		rows_cols_free(&c, n);
		return err;
	}
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text_array(&p, c.id, n);
	tbx__pgp_text_array(&p, c.topic, n);
	tbx__pgp_i64_array(&p, c.part, n);
	tbx__pgp_i64_array(&p, c.off, n);
	tbx__pgp_text_array(&p, c.tok, n);
	tbx__pgp_text_array(&p, c.att, n);
	tbx__pgp_i64_array(&p, c.seq, n);
	tbx__pgp_i64_array(&p, c.kind, n);
	tbx__pgp_text_array(&p, c.err, n);
	tbx__pgp_i64_array(&p, c.ms, n);
	tbx__pgp_bytea_array(&p, (const void *const *)c.blob, c.blen, n);
	tbx__pgp_i64_array(&p, c.tbit, n);
	if (n == 1)
		snprintf(what, sizeof(what), "outbox row %s", rows[0]->msg_id);
	else
		snprintf(what, sizeof(what), "one of %zu outbox rows (%s, ...)",
			 n, rows[0]->msg_id);
	/* Every row inserted, or the statement fails A. */
	err =
	    tbx__pg_defer(&store->stmts, Q_ROWS_INSERT, &p, NULL, (int)n, what);
	tbx__pgp_free(&p);
	rows_cols_free(&c, n);
	return err;
}

/* A text column into a fixed buffer; a value too long was not written by
 * tokenbox. */
static int column_text(const PGresult *res, int col, char *dst, size_t size)
{
	if (tbx__pg_text_to(res, 0, col, dst, size)) {
		tbx__log(TBX_LOG_ERR, "outbox: column %s too long",
			 PQfname(res, col));
		return TBX_ESTORE;
	}
	return TBX_OK;
}

static int row_get(pg_store_t *store, const char *grp, const char *msg_id,
		   tbx__row_t *row)
{
	tbx__pg_params_t p;
	PGresult *res;
	const char *error;
	const void *blob;
	size_t len;
	int err;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, msg_id);
	if ((err = run(store, Q_ROW_GET, &p, &res)))
		return err;
	if (PQntuples(res) == 0) {
		PQclear(res);
		return TBX_ENOENT;
	}
	tbx__strlcpy(row->msg_id, msg_id, sizeof(row->msg_id));
	if ((err = column_text(res, 0, row->in_topic, sizeof(row->in_topic))) ||
	    (err = column_text(res, 3, row->in_token, sizeof(row->in_token))) ||
	    (err = column_text(res, 4, row->attempt, sizeof(row->attempt))))
		goto out;
	row->in_partition = (int32_t)tbx__pg_i64(res, 0, 1);
	row->in_offset = tbx__pg_i64(res, 0, 2);
	row->mint_seq = tbx__pg_i64(res, 0, 5);
	row->kind = (int)tbx__pg_i64(res, 0, 6);
	error = tbx__pg_text(res, 0, 7);
	if (error && !(row->error = tbx__strdup(error))) {
		err = TBX_ENOMEM;
		goto out;
	}
	row->created_ms = tbx__pg_i64(res, 0, 8);
	row->in_set = !PQgetisnull(res, 0, 10);
	row->in_tbit = row->in_set ? (uint32_t)tbx__pg_i64(res, 0, 10) : 0;
	blob = tbx__pg_bytea(res, 0, 9, &len);
	err = tbx__row_msgs_decode(blob, len, row->msg_id, row);
out:
	PQclear(res);
	return err;
}

static int pg_row_load(tbx_outbox_t *base, const char *grp, const char *msg_id,
		       tbx__row_t *row)
{
	char id[TBX_MSGID_MAX + 1];
	int err;

	/* @p msg_id may point into @p row (reloading a row in place). */
	if (tbx__strlcpy(id, msg_id, sizeof(id)) < 0) {
		tbx__row_clear(row);
		return TBX_ENOENT;
	}
	tbx__row_clear(row);
	/* One statement: the row and its messages from one snapshot. */
	err = row_get(ps(base), grp, id, row);
	if (err)
		tbx__row_clear(row); /* never half a row */
	return err;
}

/*
 * B's record of the attempt writes the tokens into the stored messages:
 * the stored ones are the truth, the row in hand must match them one for
 * one (same count, same ids), and each gets the token of its namesake.
 */
static int msgs_with_tokens(pg_store_t *store, const char *grp,
			    const tbx__row_t *row, int *found, void **blob,
			    size_t *blob_len)
{
	tbx__pg_params_t p;
	PGresult *res;
	const void *b;
	size_t len;
	int err;

	*found = 0;
	*blob = NULL;
	*blob_len = 0;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, row->msg_id);
	if ((err = run(store, Q_MSGS_UNTOKENED, &p, &res)))
		return err;
	if (PQntuples(res) == 0) {
		PQclear(res);
		return TBX_OK;
	}
	*found = 1;
	b = tbx__pg_bytea(res, 0, 0, &len);
	err = tbx__row_msgs_tokened(b, len, row, blob, blob_len);
	PQclear(res);
	return err;
}

static int pg_row_set_attempt(tbx_outbox_t *base, const char *grp,
			      const tbx__row_t *row, int *won)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	PGresult *res;
	void *blob = NULL;
	size_t blob_len = 0;
	int found, err;

	*won = 0;
	/* The row in hand must be TOKENED: attempt, mint_seq, every token. */
	if (!grp || !row || !row->attempt[0] || !tbx_outbox_row_check(row)) {
		tbx__log(TBX_LOG_ERR,
			 "outbox row %s: refusing to record an "
			 "attempt that breaks the row invariants",
			 row ? row->msg_id : "(null)");
		return TBX_EINVAL;
	}
	/* Not found: another attempt was recorded first, or the row is
	 * gone; its messages must not be touched.  Found: the UPDATE below
	 * is still conditional, and a concurrent record makes it change
	 * nothing. */
	if ((err =
		 msgs_with_tokens(store, grp, row, &found, &blob, &blob_len)) ||
	    !found)
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, row->attempt);
	tbx__pgp_i64(&p, row->mint_seq);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, row->msg_id);
	tbx__pgp_bytea(&p, blob, blob_len);
	err = run(store, Q_SET_ATTEMPT, &p, &res);
	free(blob);
	if (err)
		return err;
	*won = changes(res) == 1;
	PQclear(res);
	return TBX_OK;
}

/* Runs @p q on (grp, s2) and discards its result. */
static int run2(pg_store_t *store, int q, const char *grp, const char *s2)
{
	tbx__pg_params_t p;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, s2);
	return run(store, q, &p, NULL);
}

static int pg_row_delete(tbx_outbox_t *base, const char *grp,
			 const char *msg_id)
{
	return run2(ps(base), Q_ROW_DELETE, grp, msg_id);
}

static int pg_rows_delete(tbx_outbox_t *base, const char *grp,
			  const char *const *ids, size_t n)
{
	tbx__pg_params_t p;

	if (!grp || (n && !ids))
		return TBX_EINVAL;
	if (n == 0)
		return TBX_OK;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text_array(&p, ids, n);
	return run(ps(base), Q_ROWS_DELETE, &p, NULL);
}

/*
 * Ingress offsets.
 */

/* (grp, topic, partition): the key of tbx_ingress and tbx_inflight. */
static void part_params(tbx__pg_params_t *p, const char *grp, const char *topic,
			int32_t partition)
{
	tbx__pgp_init(p);
	tbx__pgp_text(p, grp);
	tbx__pgp_text(p, topic);
	tbx__pgp_i64(p, partition);
}

static int pg_ingress_get(tbx_outbox_t *base, const char *grp,
			  const char *topic, int32_t partition, int64_t *next)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	int found, err;

	*next = -1;
	if (store->pg->in_tx) {
		/* Locked until the transaction ends, so that two workers on
		 * one partition cannot both pass the same offset; a new row
		 * first, so that there is one to lock. */
		part_params(&p, grp, topic, partition);
		if ((err = run(store, Q_INGRESS_ENSURE, &p, NULL)))
			return err;
		part_params(&p, grp, topic, partition);
		err = tbx__pg_run_i64(&store->stmts, Q_INGRESS_LOCK, &p, next,
				      &found);
	} else {
		part_params(&p, grp, topic, partition);
		err = tbx__pg_run_i64(&store->stmts, Q_INGRESS_GET, &p, next,
				      &found);
	}
	tbx__pgp_free(&p);
	if (err || !found || *next < 0)
		*next = -1;
	return err;
}

static int pg_ingress_set(tbx_outbox_t *base, const char *grp,
			  const char *topic, int32_t partition, int64_t next)
{
	tbx__pg_params_t p;

	part_params(&p, grp, topic, partition);
	tbx__pgp_i64(&p, next);
	return run(ps(base), Q_INGRESS_SET, &p, NULL);
}

/*
 * Dead letters and failed deliveries.
 */

static int pg_dead_letter_add(tbx_outbox_t *base, const char *grp,
			      const tbx__row_t *row, const char *dlq_topic,
			      int attempts)
{
	tbx__pg_params_t p;

	if (!grp || !row || !dlq_topic)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, row->msg_id);
	tbx__pgp_text(&p, row->in_topic);
	tbx__pgp_i64(&p, row->in_partition);
	tbx__pgp_i64(&p, row->in_offset);
	tbx__pgp_text(&p, dlq_topic);
	tbx__pgp_opt_text(&p, row->error);
	tbx__pgp_i64(&p, attempts);
	tbx__pgp_i64(&p, tbx__now_ms());
	return run(ps(base), Q_DEAD_LETTER, &p, NULL);
}

static int pg_dispatch_failed(tbx_outbox_t *base, const char *grp,
			      const char *msg_id, int *failures)
{
	tbx__pg_params_t p;
	int64_t n = 0;
	int err;

	*failures = 0;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, msg_id);
	err =
	    tbx__pg_run_i64(&ps(base)->stmts, Q_DISPATCH_FAILED, &p, &n, NULL);
	tbx__pgp_free(&p);
	*failures = (int)n;
	return err;
}

static int pg_undelivered_add(tbx_outbox_t *base, const char *grp,
			      const tbx__row_t *row, const tbx__outmsg_t *m,
			      const char *error, int attempts)
{
	/* A bit of a token set: its set, bit and partition, no token. */
	int set = m->tset[0] && m->part >= 0;
	tbx__pg_params_t p;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, row->msg_id);
	tbx__pgp_text(&p, m->id);
	tbx__pgp_text(&p, m->topic);
	tbx__pgp_text(&p, m->type);
	tbx__pgp_bytea(&p, m->key, m->key_len);
	tbx__pgp_bytea(&p, m->payload, m->payload_len);
	tbx__pgp_bytea(&p, m->headers, m->headers_len);
	tbx__pgp_opt_text(&p, set ? "" : m->token);
	if (row->mint_seq)
		tbx__pgp_i64(&p, row->mint_seq);
	else
		tbx__pgp_text(&p, NULL);
	tbx__pgp_text(&p, error);
	tbx__pgp_i64(&p, attempts);
	tbx__pgp_i64(&p, tbx__now_ms());
	if (set) {
		tbx__pgp_text(&p, m->tset);
		tbx__pgp_i64(&p, m->tbit);
		tbx__pgp_i64(&p, m->part);
	} else {
		tbx__pgp_text(&p, NULL);
		tbx__pgp_text(&p, NULL);
		tbx__pgp_text(&p, NULL);
	}
	return run(ps(base), Q_UNDELIVERED_ADD, &p, NULL);
}

/*
 * Counts and the rows of the recovery pass and the sweeper.
 */

static int pg_count(tbx_outbox_t *base, const char *grp, int64_t *rows)
{
	tbx__pg_params_t p;
	int err;

	tbx__pgp_init(&p);
	if (grp)
		tbx__pgp_text(&p, grp);
	err = tbx__pg_run_i64(&ps(base)->stmts, grp ? Q_COUNT_GRP : Q_COUNT_ALL,
			      &p, rows, NULL);
	tbx__pgp_free(&p);
	return err;
}

/* Collects column 0 of @p q's rows. */
static int collect_ids(pg_store_t *store, int q, tbx__pg_params_t *p,
		       tbx__msgid_t **out, size_t *cnt)
{
	PGresult *res;
	tbx__msgid_t *ids = NULL;
	int n, err;

	if ((err = run(store, q, p, &res)))
		return err;
	n = PQntuples(res);
	if (n > 0 && !(ids = calloc((size_t)n, sizeof(*ids)))) {
		PQclear(res);
		return TBX_ENOMEM;
	}
	for (int i = 0; i < n; i++)
		tbx__strlcpy(ids[i].id, PQgetvalue(res, i, 0),
			     sizeof(ids[0].id));
	PQclear(res);
	*out = ids;
	*cnt = (size_t)n;
	return TBX_OK;
}

static int pg_rows_older(tbx_outbox_t *base, const char *grp,
			 int64_t created_before_ms, size_t limit,
			 tbx__msgid_t **out, size_t *cnt)
{
	tbx__pg_params_t p;

	*out = NULL;
	*cnt = 0;
	if (!grp || limit == 0)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_i64(&p, created_before_ms);
	tbx__pgp_i64(&p, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
	return collect_ids(ps(base), Q_ROWS_OLDER, &p, out, cnt);
}

static int pg_rows_below(tbx_outbox_t *base, const char *grp, const char *topic,
			 int32_t partition, int64_t offset, size_t limit,
			 tbx__msgid_t **out, size_t *cnt)
{
	tbx__pg_params_t p;

	*out = NULL;
	*cnt = 0;
	if (!grp || !topic || limit == 0)
		return TBX_EINVAL;
	part_params(&p, grp, topic, partition);
	tbx__pgp_i64(&p, offset);
	tbx__pgp_i64(&p, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
	return collect_ids(ps(base), Q_ROWS_BELOW, &p, out, cnt);
}

static int pg_row_mark_stuck(tbx_outbox_t *base, const char *grp,
			     const char *msg_id, int64_t now_ms)
{
	tbx__pg_params_t p;

	if (!grp || !msg_id)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, msg_id);
	tbx__pgp_i64(&p, now_ms);
	return run(ps(base), Q_MARK_STUCK, &p, NULL);
}

/*
 * Crash markers.
 */

/* The columns of Q_INFLIGHT_GET (from @p col) of @p row of @p res. */
static void inflight_read(PGresult *res, int row, int col, tbx__inflight_t *f)
{
	f->first = tbx__pg_i64(res, row, col);
	f->last = tbx__pg_i64(res, row, col + 1);
	f->crashes = (int)tbx__pg_i64(res, row, col + 2);
	f->suspect_until = tbx__pg_i64(res, row, col + 3);
	f->lone = (int)tbx__pg_i64(res, row, col + 4);
	f->count_offset = tbx__pg_i64(res, row, col + 5);
	f->retries = (int)tbx__pg_i64(res, row, col + 6);
}

static int pg_inflight_get(tbx_outbox_t *base, const char *grp,
			   const char *topic, int32_t partition,
			   tbx__inflight_t *f, int *found)
{
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	*found = 0;
	part_params(&p, grp, topic, partition);
	if ((err = run(ps(base), Q_INFLIGHT_GET, &p, &res)))
		return err;
	if (PQntuples(res) > 0) {
		inflight_read(res, 0, 0, f);
		*found = 1;
	}
	PQclear(res);
	return TBX_OK;
}

/* G's read of a batch's partitions: one round trip instead of one per
 * partition. */
static int pg_inflight_get_many(tbx_outbox_t *base, const char *grp,
				const char *const *topics, const int32_t *parts,
				size_t n, tbx__inflight_t *f, int *found)
{
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	for (size_t i = 0; i < n; i++)
		found[i] = 0;
	if (n == 0)
		return TBX_OK;
	if ((err = tbx__pgo_parts_params(&p, grp, topics, parts, n)) ||
	    (err = run(ps(base), Q_INFLIGHT_GET_MANY, &p, &res)))
		return err;
	for (int r = 0; r < PQntuples(res); r++) {
		/* WITH ORDINALITY: 1..n; a key asked for twice has two
		 * positions, each its row. */
		int64_t i = tbx__pg_i64(res, r, 0);

		if (i < 1 || (uint64_t)i > n)
			continue;
		inflight_read(res, r, 1, &f[i - 1]);
		found[i - 1] = 1;
	}
	PQclear(res);
	return TBX_OK;
}

static int pg_inflight_put(tbx_outbox_t *base, const char *grp,
			   const char *topic, int32_t partition,
			   const tbx__inflight_t *f)
{
	tbx__pg_params_t p;

	part_params(&p, grp, topic, partition);
	tbx__pgp_i64(&p, f->first);
	tbx__pgp_i64(&p, f->last);
	tbx__pgp_i64(&p, f->crashes);
	tbx__pgp_i64(&p, f->suspect_until);
	tbx__pgp_i64(&p, f->lone);
	tbx__pgp_i64(&p, f->count_offset);
	tbx__pgp_i64(&p, f->retries);
	/* G's marker and A's counts: one round trip fewer per partition and
	 * batch, flushed by G's commit or A's next wait. */
	return run_deferred(ps(base), Q_INFLIGHT_PUT, &p, "crash marker");
}

static int pg_inflight_delete(tbx_outbox_t *base, const char *grp,
			      const char *topic, int32_t partition)
{
	tbx__pg_params_t p;

	part_params(&p, grp, topic, partition);
	return run_deferred(ps(base), Q_INFLIGHT_DEL, &p, "crash marker");
}

static int pg_inflight_release(tbx_outbox_t *base, const char *grp,
			       const char *topic, int32_t partition)
{
	tbx__pg_params_t p;

	part_params(&p, grp, topic, partition);
	return run(ps(base), Q_INFLIGHT_RELEASE, &p, NULL);
}

static int pg_alarm_add(tbx_outbox_t *base, const char *grp, const char *name,
			const char *detail)
{
	tbx__pg_params_t p;

	if (!grp || !name)
		return TBX_EINVAL;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, name);
	tbx__pgp_i64(&p, tbx__now_ms());
	tbx__pgp_opt_text(&p, detail);
	return run(ps(base), Q_ALARM_ADD, &p, NULL);
}

static int pg_binding_set(tbx_outbox_t *base, const char *grp,
			  const char *tokens_id, const char *tokens_where,
			  tbx__binding_prev_t *prev)
{
	tbx__pg_params_t p;
	PGresult *res = NULL;
	int err;

	if (!grp || !tokens_id || !tokens_where)
		return TBX_EINVAL;
	if (prev) {
		memset(prev, 0, sizeof(*prev));
		tbx__pgp_init(&p);
		tbx__pgp_text(&p, grp);
		if ((err = run(ps(base), Q_BINDING_GET, &p, &res)))
			return err;
		if (PQntuples(res) == 1) {
			prev->found = 1;
			if ((err = column_text(res, 0, prev->tokens_id,
					       sizeof(prev->tokens_id))) ||
			    (err = column_text(res, 1, prev->tokens_where,
					       sizeof(prev->tokens_where)))) {
				PQclear(res);
				return err;
			}
			prev->used_ms = tbx__pg_i64(res, 0, 2);
		}
		PQclear(res);
	}
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, tokens_id);
	tbx__pgp_text(&p, tokens_where);
	tbx__pgp_i64(&p, tbx__now_ms());
	return run(ps(base), Q_BINDING_SET, &p, NULL);
}

/*
 * What differs from an embedded store.
 */

static int pg_lock_ids(tbx_outbox_t *base, const char *grp,
		       const char *const *ids, size_t n)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;

	if (!grp || (n && !ids))
		return TBX_EINVAL;
	/* Outside a transaction the locks would end with the statement. */
	if (!store->pg->in_tx) {
		tbx__log(TBX_LOG_ERR,
			 "postgresql: %s: message locks asked outside a "
			 "transaction",
			 store->pg->where);
		return TBX_ESTATE;
	}
	if (n == 0)
		return TBX_OK;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text_array(&p, ids, n);
	return run(store, Q_LOCK_IDS, &p, NULL);
}

static int pg_relaxed(tbx_outbox_t *base, int on)
{
	pg_store_t *store = ps(base);

	store->relaxed = on != 0;
	/* Asked inside a transaction: for this one too. */
	if (on && store->pg->in_tx)
		return tbx__pg_exec(store->pg,
				    "SET LOCAL synchronous_commit = off");
	return TBX_OK;
}

static void *pg_native(tbx_outbox_t *base, int backend)
{
	if (backend == TBX_BACKEND_PG_PEEK)
		return ps(base)->pg->conn;
	if (backend != TBX_BACKEND_PG)
		return NULL;
	/* What runs on the raw connection runs after the record's
	 * savepoint; a failure stays in the connection (store/pg.h). */
	(void)tbx__pg_flush(ps(base)->pg);
	return ps(base)->pg->conn;
}

/* Hands the rows of @p res to @p fn, their columns as text (NULL for SQL
 * NULL), until it returns non-zero.  @returns TBX_OK or TBX_ENOMEM. */
static int rows_call(const PGresult *res, tbx_row_fn fn, void *arg)
{
	int nrows = PQntuples(res), ncols = PQnfields(res);
	const char **cols;

	if (nrows == 0 || ncols == 0)
		return TBX_OK;
	if (!(cols = calloc((size_t)ncols, sizeof(*cols))))
		return TBX_ENOMEM;
	for (int r = 0; r < nrows; r++) {
		for (int c = 0; c < ncols; c++)
			cols[c] = PQgetisnull(res, r, c)
				      ? NULL
				      : PQgetvalue(res, r, c);
		if (fn(arg, ncols, cols))
			break;
	}
	free(cols);
	return TBX_OK;
}

/* A statement that only writes, by its first word: INSERT, UPDATE,
 * DELETE or MERGE (anything else, a comment first included, runs at
 * once). */
static int only_writes(const char *text)
{
	static const char *const words[] = {"INSERT", "UPDATE", "DELETE",
					    "MERGE"};

	while (isspace((unsigned char)*text))
		text++;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		size_t len = strlen(words[i]);

		if (!strncasecmp(text, words[i], len) &&
		    !isalnum((unsigned char)text[len]) && text[len] != '_')
			return 1;
	}
	return 0;
}

static void pg_defer_writes(tbx_outbox_t *base, int on)
{
	ps(base)->defer_writes = on != 0;
}

static unsigned pg_deferred(const tbx_outbox_t *base)
{
	return ((const pg_store_t *)base)->pg->dq_texts;
}

/* A handler's statement, its rows to @p fn (NULL: dropped). */
static int pg_run(tbx_outbox_t *base, const char *stmt,
		  const char *const *params, int n, int64_t *nchanged,
		  tbx_row_fn fn, void *arg)
{
	pg_store_t *store = ps(base);
	tbx__pg_t *pg = store->pg;
	PGresult *res;
	int err = TBX_OK;

	if (nchanged)
		*nchanged = 0;
	if (!stmt || n < 0 || (n && !params)) {
		snprintf(pg->errmsg, sizeof(pg->errmsg),
			 "no statement, or parameters missing");
		return TBX_EINVAL;
	}
	/* A write whose answer the handler does not wait for goes with the
	 * next statement that waits (docs/postgresql.md, "Handler writes
	 * without round trips"); A is done again without deferring when
	 * it fails (consumer/protocol.c). */
	if (store->defer_writes && !nchanged && !fn && pg->in_tx &&
	    n <= TBX_PG_MAX_PARAMS && only_writes(stmt))
		return tbx__pg_defer_text(pg, stmt, n, params);
	/* Text parameters, the types inferred by the server; the text
	 * prepared once per connection (store/pg.h, tbx__pg_query()).
	 * What tokenbox deferred goes with it. */
	if ((err = tbx__pg_query(pg, stmt, n, params, &res))) {
		/* A syntax error, or more than one statement. */
		if (!strcmp(pg->state, "42601"))
			err = TBX_EINVAL;
		return err;
	}
	if (nchanged)
		*nchanged = changes(res);
	if (fn && (err = rows_call(res, fn, arg)))
		snprintf(pg->errmsg, sizeof(pg->errmsg), "out of memory");
	PQclear(res);
	return err;
}

static int pg_exec(tbx_outbox_t *base, const char *stmt,
		   const char *const *params, int n, int64_t *nchanged)
{
	return pg_run(base, stmt, params, n, nchanged, NULL, NULL);
}

static int pg_query(tbx_outbox_t *base, const char *stmt,
		    const char *const *params, int n, tbx_row_fn fn, void *arg)
{
	if (!fn) {
		snprintf(ps(base)->pg->errmsg, sizeof(ps(base)->pg->errmsg),
			 "no row function");
		return TBX_EINVAL;
	}
	return pg_run(base, stmt, params, n, NULL, fn, arg);
}

static const tbx_outbox_ops_t pg_ops = {
    .name = "postgresql",
    .close = pg_close,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .savepoint = pg_savepoint,
    .release = pg_release,
    .undo = pg_undo,
    .row_find = pg_row_find,
    .rows_find = pg_rows_find,
    .rows_insert = pg_rows_insert,
    .row_insert = pg_row_insert,
    .row_load = pg_row_load,
    .row_set_attempt = pg_row_set_attempt,
    .row_delete = pg_row_delete,
    .rows_delete = pg_rows_delete,
    .ingress_get = pg_ingress_get,
    .ingress_set = pg_ingress_set,
    .dead_letter_add = pg_dead_letter_add,
    .dispatch_failed = pg_dispatch_failed,
    .undelivered_add = pg_undelivered_add,
    .count = pg_count,
    .rows_older = pg_rows_older,
    .rows_below = pg_rows_below,
    .row_mark_stuck = pg_row_mark_stuck,
    .inflight_get = pg_inflight_get,
    .inflight_get_many = pg_inflight_get_many,
    .inflight_put = pg_inflight_put,
    .inflight_delete = pg_inflight_delete,
    .inflight_release = pg_inflight_release,
    .alarm_add = pg_alarm_add,
    .binding_set = pg_binding_set,
    .read_begin = tbx__pgo_read_begin,
    .read_end = tbx__pgo_read_end,
    .schema = tbx__pgo_schema,
    .errmsg = tbx__pgo_errmsg,
    .groups = tbx__pgo_groups,
    .rows_summary = tbx__pgo_rows_summary,
    .rows_list = tbx__pgo_rows_list,
    .row_match = tbx__pgo_row_match,
    .row_groups = tbx__pgo_row_groups,
    .token_uses = tbx__pgo_token_uses,
    .dead_letters_summary = tbx__pgo_dead_letters_summary,
    .dead_letters_list = tbx__pgo_dead_letters_list,
    .dead_letters_find = tbx__pgo_dead_letters_find,
    .dead_letter_recorded = tbx__pgo_dead_letter_recorded,
    .dead_letter_replayed = tbx__pgo_dead_letter_replayed,
    .dead_letter_groups = tbx__pgo_dead_letter_groups,
    .undelivered_count = tbx__pgo_undelivered_count,
    .undelivered_list = tbx__pgo_undelivered_list,
    .undelivered_get = tbx__pgo_undelivered_get,
    .undelivered_delete = tbx__pgo_undelivered_delete,
    .alarms = tbx__pgo_alarms,
    .bindings = tbx__pgo_bindings,
    .ingress_list = tbx__pgo_ingress_list,
    .count_older = tbx__pgo_count_older,
    .obatch_list = tbx__pgo_obatch_list,
    .lock_ids = pg_lock_ids,
    .relaxed = pg_relaxed,
    .native = pg_native,
    .defer_writes = pg_defer_writes,
    .deferred = pg_deferred,
    .exec = pg_exec,
    .query = pg_query,
    .obatch_insert = tbx__pgo_obatch_insert,
    .obatch_set_attempt = tbx__pgo_obatch_set_attempt,
    .obatch_delete = tbx__pgo_obatch_delete,
    .obatch_load = tbx__pgo_obatch_load,
    .obatch_dispatch_failed = tbx__pgo_obatch_dispatch_failed,
    .obatch_mark_stuck = tbx__pgo_obatch_mark_stuck,
    .cover_msg_find = tbx__pgo_cover_msg_find,
    .gens_lock = tbx__pgo_gens_lock,
    .gens_get = tbx__pgo_gens_get,
    .gens_bump = tbx__pgo_gens_bump,
};
