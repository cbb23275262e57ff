/*
 * The PostgreSQL backend of the token store T (tokens/tokens.h).
 *
 * The tables live in one schema (tokens.schema), written into the
 * statement texts as @T (store/pg.h); every value is bound, and every
 * statement is prepared once per connection.  They mirror SQLite's token
 * tables (store/db.c), with a PostgreSQL sequence for tbx_seq and
 * tbx_schema_info (kind 'tokens') for the version and the identity.
 *
 * Every operation that writes is one READ COMMITTED transaction of its
 * own (tbx__pg_begin … commit), rolled back on any error, and takes its
 * locks as docs/architecture.md, "PostgreSQL: locking without a file
 * lock" says per phase:
 *   - the sequence is not transactional, so the subscription lock orders
 *     subscribing against minting: subscribe takes it exclusively before
 *     its nextval, mint takes it shared before its nextval and reads the
 *     subscriptions in a statement after it.  Every nextval runs under
 *     it (Q_SEQ_MINT, Q_SEQ_PUBLISH, and Q_SUB_ADD after Q_SUB_LOCK), so
 *     that a read-write opening, which starts a range of the sequence
 *     under the exclusive lock (range_start()), sees no number taken
 *     between reading the last value and its setval();
 *   - the loser's and the sweeper's drop is one statement that deletes
 *     the tokens only through the registrations it deleted itself, so a
 *     confirm that got there first (row locks) leaves it nothing;
 *   - the ingress edge inserts with ON CONFLICT and locks the entries it
 *     found, in the minting transaction.
 * One statement per call, not per token: arrays are bound and unnested.
 *
 * With a shared connection (the service store's: S and T in one
 * database) the service store's transaction and ours must not overlap: a
 * write here while a transaction is open is refused (TBX_ESTATE).  The
 * joined operations are the exception: they write only inside that
 * transaction, which the caller commits.
 *
 * The read side of `tokenbox inspect` is in pg_read.c.
 *
 * @locality one thread at a time per store.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "store/pg.h"
#include "tokens/pg_int.h"
#include "tokens/pub_sets.h"
#include "tokens/tokens.h"

/* The text columns that are compared and ordered use the "C" collation:
 * byte order, as SQLite's. */
#define C " COLLATE \"C\""

/*
 * The schema, one step per version: migrations[v] takes the tables from
 * version v to v + 1.  Never edit a step once released: append one and
 * bump TBX_PG_TOKENS_VERSION.
 */
static const char *const migrations[] = {
    /* 0 -> 1: the token tables of SQLite's schema 8 (store/db.c). */
    "CREATE TABLE @T.tbx_schema_info ("
    " id integer PRIMARY KEY CHECK (id = 1),"
    " kind text NOT NULL,"
    " version integer NOT NULL,"
    " store_id text NOT NULL,"
    " created_ms bigint NOT NULL);"
    /* One sequence for mint and subscribe; its last value is what
     * SQLite's tbx_seq row holds. */
    "CREATE SEQUENCE @T.tbx_seq AS bigint MINVALUE 1 START 1;"
    "CREATE TABLE @T.tbx_tokens ("
    " token text" C " NOT NULL,"
    " grp text" C " NOT NULL,"
    " mint_seq bigint NOT NULL,"
    " created_ms bigint NOT NULL,"
    " PRIMARY KEY (token, grp));"
    "CREATE TABLE @T.tbx_registrations ("
    " attempt text" C " NOT NULL,"
    " token text" C " NOT NULL,"
    " send_grp text" C " NOT NULL,"
    " msg_id text" C " NOT NULL,"
    " created_ms bigint NOT NULL,"
    " PRIMARY KEY (attempt, token));"
    /* The sweeper reads a group's registrations, oldest first. */
    "CREATE INDEX tbx_registrations_send ON @T.tbx_registrations"
    " (send_grp, created_ms, attempt);"
    "CREATE TABLE @T.tbx_subscriptions ("
    " topic text" C " NOT NULL,"
    " grp text" C " NOT NULL,"
    " since_seq bigint NOT NULL,"
    " created_ms bigint NOT NULL,"
    " used_ms bigint,"
    " PRIMARY KEY (topic, grp));"
    "CREATE TABLE @T.tbx_edge ("
    " topic text" C " NOT NULL,"
    " caller_id text" C " NOT NULL,"
    " fingerprint bytea NOT NULL,"
    " msg_id text NOT NULL,"
    " token text NOT NULL,"
    " mint_seq bigint NOT NULL,"
    " delivered integer NOT NULL DEFAULT 0,"
    " refused bigint NOT NULL DEFAULT 0,"
    " created_ms bigint NOT NULL,"
    " PRIMARY KEY (topic, caller_id));"
    "CREATE INDEX tbx_edge_created ON @T.tbx_edge (created_ms);",
    /* 1 -> 2: the ranges the sequence issued its numbers in, as SQLite's
     * schema 10 (store/db.c); every number taken before is the store's
     * own: one open range from 1. */
    "CREATE TABLE @T.tbx_seq_ranges ("
    " lo bigint PRIMARY KEY,"
    " hi bigint CHECK (hi IS NULL OR hi >= lo));"
    "CREATE UNIQUE INDEX tbx_seq_ranges_open ON @T.tbx_seq_ranges"
    " ((hi IS NULL)) WHERE hi IS NULL;"
    "INSERT INTO @T.tbx_seq_ranges (lo, hi) VALUES (1, NULL);",
    /* 2 -> 3: the token sets of SQLite's schema 11 (store/db.c;
     * docs/batched-tokens.md): a row per set and receiving group with
     * the bitmap of the messages not yet consumed, bit i the i-th from
     * the left, and one registration per attempt naming its sets. */
    "CREATE TABLE @T.tbx_tset ("
    " set_id text" C " NOT NULL,"
    " grp text" C " NOT NULL,"
    " topic text" C " NOT NULL,"
    " part integer NOT NULL,"
    " mint_seq bigint NOT NULL,"
    " nbits integer NOT NULL CHECK (nbits BETWEEN 1 AND 65536),"
    " bits bit varying(65536) NOT NULL CHECK (length(bits) = nbits),"
    " created_ms bigint NOT NULL,"
    " PRIMARY KEY (set_id, grp));"
    "CREATE TABLE @T.tbx_breg ("
    " attempt text" C " PRIMARY KEY,"
    " send_grp text" C " NOT NULL,"
    " row_id text" C " NOT NULL,"
    " sets text[]" C " NOT NULL,"
    " created_ms bigint NOT NULL);"
    /* The sweeper reads a group's registrations, oldest first. */
    "CREATE INDEX tbx_breg_send ON @T.tbx_breg"
    " (send_grp, created_ms, attempt);",
    /* 3 -> 4: the ingress edge of a publisher minting token sets, as
     * SQLite's schema 14: an entry's set, bit and partition (NULL for an
     * entry of a per-message token, whose token column holds it). */
    "ALTER TABLE @T.tbx_edge"
    " ADD COLUMN tset text,"
    " ADD COLUMN tbit integer CHECK (tbit IS NULL OR"
    "  (tbit BETWEEN 0 AND 65535 AND tset IS NOT NULL)),"
    " ADD COLUMN tpart integer CHECK ((tpart IS NULL) = (tbit IS NULL)"
    "  AND (tpart IS NULL OR tpart >= 0));",
};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) ==
		   TBX_PG_TOKENS_VERSION,
	       "one migration step per schema version");

/* The subscription lock (docs/architecture.md): exclusive in subscribe
 * and unsubscribe, shared in mint; one per token store, the second key
 * the hash of its schema's name (parameter @p n). */
#define SUB_LOCK(n)                                                            \
	"pg_advisory_xact_lock(" TBX_PG_LOCK_SUBS ", hashtext(" n "::text))"
#define SUB_LOCK_SHARED(n)                                                     \
	"pg_advisory_xact_lock_shared(" TBX_PG_LOCK_SUBS ", hashtext(" n       \
	"::text))"
/* The number is taken in the statement that takes the lock, after it:
 * nextval runs per row of the materialized lock. */
#define SEQ_AFTER(lock)                                                        \
	"l AS MATERIALIZED (SELECT " lock ") SELECT nextval('@T.tbx_seq') "    \
	"FROM l"

enum {
	Q_MIG_LOCK,
	Q_HAS_TABLE,
	Q_INFO_GET,
	Q_INFO_ADD,
	Q_INFO_SET,
	Q_STORE_ID,
	Q_SEQ_CURRENT,
	Q_SEQ_MINT,
	Q_SEQ_PUBLISH,
	Q_SUB_LOCK,
	Q_SUB_TOUCH,
	Q_SUB_ADD,
	Q_SUB_GET,
	Q_EXISTS,
	Q_MINT,
	Q_TOKENS_ADD,
	Q_CONFIRM,
	Q_CONSUME,
	Q_DROP,
	Q_REG_LIST,
	Q_COUNT_ALL,
	Q_COUNT_GRP,
	Q_EDGE_PUT,
	Q_EDGE_GET,
	Q_EDGE_REFUSED,
	Q_PUB_TOKENS,
	Q_EDGE_SETS,
	Q_EDGE_DELIVERED,
	Q_EDGE_COUNT,
	Q_SUB_COUNT,
	Q_EXISTS_MANY,
	Q_RANGE_OPEN,
	Q_RANGE_CLOSE,
	Q_RANGE_DROP,
	Q_RANGE_ADD,
	Q_SEQ_SET,
	Q_SEQ_ISSUED,
	Q_RANGE_COUNT,
	Q__COUNT
};

static const char *const sql[Q__COUNT] = {
    /* Serialises the openers of one schema (creation, migrations). */
    [Q_MIG_LOCK] = "SELECT pg_advisory_xact_lock(" TBX_PG_LOCK_MIGRATION
		   ", hashtext($1::text))",
    [Q_HAS_TABLE] = "SELECT count(*) FROM pg_catalog.pg_tables WHERE "
		    "schemaname = $1 AND tablename = $2",
    [Q_INFO_GET] = "SELECT kind, version, store_id FROM @T.tbx_schema_info "
		   "WHERE id = 1",
    [Q_INFO_ADD] = "INSERT INTO @T.tbx_schema_info (id, kind, version, "
		   "store_id, created_ms) VALUES (1, 'tokens', $1, $2, $3)",
    [Q_INFO_SET] = "UPDATE @T.tbx_schema_info SET version = $1 WHERE id = 1",
    [Q_STORE_ID] = "SELECT store_id FROM @T.tbx_schema_info WHERE id = 1",
    /* The last number taken; 0 before the first. */
    [Q_SEQ_CURRENT] = "SELECT CASE WHEN is_called THEN last_value ELSE 0 "
		      "END FROM @T.tbx_seq",
    [Q_SEQ_MINT] = "WITH " SEQ_AFTER(SUB_LOCK_SHARED("$1")),
    /* The publisher's: the edge's bounded sweep (oldest first; entries
     * another publisher is sweeping are skipped, not waited for) in the
     * same statement. */
    [Q_SEQ_PUBLISH] = "WITH s AS (DELETE FROM @T.tbx_edge e USING (SELECT "
		      "topic, caller_id FROM @T.tbx_edge WHERE created_ms < "
		      "$1 ORDER BY created_ms LIMIT $2 FOR UPDATE SKIP "
		      "LOCKED) o WHERE e.topic = o.topic AND e.caller_id = "
		      "o.caller_id), " SEQ_AFTER(SUB_LOCK_SHARED("$3")),
    [Q_SUB_LOCK] = "SELECT " SUB_LOCK("$1"),
    /* A statement after the lock: it sees every subscription committed
     * before.  Found: touched, and its number kept. */
    [Q_SUB_TOUCH] = "UPDATE @T.tbx_subscriptions SET used_ms = $3 WHERE "
		    "topic = $1 AND grp = $2 RETURNING since_seq",
    [Q_SUB_ADD] = "INSERT INTO @T.tbx_subscriptions (topic, grp, since_seq, "
		  "created_ms, used_ms) VALUES ($1, $2, nextval('@T.tbx_seq'), "
		  "$3, $3) RETURNING since_seq",
    [Q_SUB_GET] = "SELECT since_seq FROM @T.tbx_subscriptions WHERE topic = "
		  "$1 AND grp = $2",
    [Q_EXISTS] = "SELECT 1 FROM @T.tbx_tokens WHERE token = $1 AND grp = $2",
    /*
     * B's mint, after Q_SEQ_MINT: the registrations ($6 attempts, $7
     * tokens, $8 message ids) and a token row per item ($1 tokens, $4
     * topics) and per group subscribed before the number $2.  A group
     * subscribed at since_seq gets the tokens of messages minted after
     * it; one minted before is untokened ingress to it.
     */
    [Q_MINT] = "WITH r AS (INSERT INTO @T.tbx_registrations (attempt, token, "
	       "send_grp, msg_id, created_ms) SELECT u.a, u.t, $5, u.m, $3 "
	       "FROM unnest($6::text[], $7::text[], $8::text[]) AS u(a, t, "
	       "m)) INSERT INTO @T.tbx_tokens (token, grp, mint_seq, "
	       "created_ms) SELECT u.token, s.grp, $2, $3 FROM "
	       "unnest($1::text[], $4::text[]) AS u(token, topic) JOIN "
	       "@T.tbx_subscriptions s ON s.topic = u.topic AND s.since_seq < "
	       "$2",
    [Q_TOKENS_ADD] = "INSERT INTO @T.tbx_tokens (token, grp, mint_seq, "
		     "created_ms) SELECT u.token, s.grp, $2, $3 FROM "
		     "unnest($1::text[], $4::text[]) AS u(token, topic) JOIN "
		     "@T.tbx_subscriptions s ON s.topic = u.topic AND "
		     "s.since_seq < $2",
    [Q_CONFIRM] = "DELETE FROM @T.tbx_registrations WHERE attempt = "
		  "ANY($1::text[])",
    [Q_CONSUME] = "DELETE FROM @T.tbx_tokens WHERE grp = $1 AND token = "
		  "ANY($2::text[])",
    /* The loser's and the orphan's drop: the tokens go only through the
     * registrations this statement deleted; a confirm holding them makes
     * it wait, then find nothing. */
    [Q_DROP] = "WITH r AS (DELETE FROM @T.tbx_registrations WHERE attempt = "
	       "$1 RETURNING token), d AS (DELETE FROM @T.tbx_tokens t USING "
	       "r WHERE t.token = r.token RETURNING 1) SELECT (SELECT count(*) "
	       "FROM r), (SELECT count(*) FROM d)",
    /* One registration per attempt; every row of an attempt names the
     * same message. */
    [Q_REG_LIST] = "SELECT attempt, min(msg_id), min(created_ms) FROM "
		   "@T.tbx_registrations WHERE send_grp = $1 GROUP BY attempt "
		   "HAVING (min(created_ms), attempt) > ($3::bigint, "
		   "$4::text) ORDER BY 3, attempt LIMIT $2",
    [Q_COUNT_ALL] = "SELECT (SELECT count(*) FROM @T.tbx_tokens), (SELECT "
		    "count(DISTINCT attempt) FROM @T.tbx_registrations)",
    [Q_COUNT_GRP] = "SELECT (SELECT count(*) FROM @T.tbx_tokens WHERE grp = "
		    "$1), (SELECT count(DISTINCT attempt) FROM "
		    "@T.tbx_registrations WHERE send_grp = $1)",
    /*
     * The edge: the caller ids of the flush ($1 topics, $2 ids, $3
     * fingerprints in hex, $4 message ids, $5 tokens), each once.  A key
     * taken by another publisher's open transaction waits for it.  An
     * entry past the window ($8) not swept yet is superseded; one within
     * it is left (and locked) and not returned.
     */
    [Q_EDGE_PUT] =
	"INSERT INTO @T.tbx_edge AS e (topic, caller_id, "
	"fingerprint, msg_id, token, mint_seq, delivered, refused, "
	"created_ms) SELECT u.topic, u.cid, decode(u.fp, 'hex'), "
	"u.m, u.t, $6, 0, 0, $7 FROM unnest($1::text[], $2::text[], "
	"$3::text[], $4::text[], $5::text[]) AS u(topic, cid, fp, m, "
	"t) ON CONFLICT (topic, caller_id) DO UPDATE SET fingerprint "
	"= EXCLUDED.fingerprint, msg_id = EXCLUDED.msg_id, token = "
	"EXCLUDED.token, mint_seq = EXCLUDED.mint_seq, delivered = 0, "
	"refused = 0, created_ms = EXCLUDED.created_ms WHERE "
	"e.created_ms < $8 RETURNING e.topic, e.caller_id",
    /* The entries that exist, locked until the mint commits; column 0
     * the position (from 1) in the arrays. */
    [Q_EDGE_GET] = "SELECT u.i, e.fingerprint, e.msg_id, e.token, "
		   "e.mint_seq, e.delivered, e.tset, e.tbit, e.tpart FROM "
		   "unnest($1::text[], "
		   "$2::text[]) WITH ORDINALITY AS u(topic, cid, i) JOIN "
		   "@T.tbx_edge e ON e.topic = u.topic AND e.caller_id = u.cid "
		   "FOR UPDATE OF e",
    [Q_EDGE_REFUSED] = "UPDATE @T.tbx_edge e SET refused = e.refused + u.n "
		       "FROM unnest($1::text[], $2::text[], $3::int8[]) AS "
		       "u(topic, cid, n) WHERE e.topic = u.topic AND "
		       "e.caller_id = u.cid",
    /* The publisher's tokens: $5 a group to mint for only ('': every
     * subscribed group). */
    [Q_PUB_TOKENS] = "INSERT INTO @T.tbx_tokens (token, grp, mint_seq, "
		     "created_ms) SELECT u.token, s.grp, $2, $3 FROM "
		     "unnest($1::text[], $4::text[], $5::text[]) AS u(token, "
		     "topic, only_grp) JOIN @T.tbx_subscriptions s ON s.topic "
		     "= u.topic AND s.since_seq < $2 AND (u.only_grp = '' OR "
		     "s.grp = u.only_grp)",
    /* The set, bit and partition of the new entries of a publisher
     * minting token sets ($1 topics, $2 ids, $3 sets, $4 bits, $5
     * partitions), taken by Q_EDGE_PUT in the same transaction. */
    [Q_EDGE_SETS] = "UPDATE @T.tbx_edge e SET token = '', tset = u.s, tbit "
		    "= u.b, tpart = u.p FROM unnest($1::text[], $2::text[], "
		    "$3::text[], $4::int4[], $5::int4[]) AS u(topic, cid, s, "
		    "b, p) WHERE e.topic = u.topic AND e.caller_id = u.cid",
    [Q_EDGE_DELIVERED] = "UPDATE @T.tbx_edge e SET delivered = 1 FROM "
			 "unnest($1::text[], $2::text[], $3::text[]) AS "
			 "u(topic, cid, m) WHERE e.topic = u.topic AND "
			 "e.caller_id = u.cid AND e.msg_id = u.m",
    [Q_EDGE_COUNT] = "SELECT count(*), coalesce(sum(refused), 0)::bigint "
		     "FROM @T.tbx_edge",
    [Q_SUB_COUNT] = "SELECT count(*) FROM @T.tbx_subscriptions WHERE topic "
		    "= $1",
    /* A's token check for the batch: one round trip. */
    [Q_EXISTS_MANY] = "SELECT token FROM @T.tbx_tokens WHERE grp = $1 AND "
		      "token = ANY($2::text[])",
    /* The ranges (range_start()): at most one open, hi NULL. */
    [Q_RANGE_OPEN] = "SELECT lo FROM @T.tbx_seq_ranges WHERE hi IS NULL",
    [Q_RANGE_CLOSE] = "UPDATE @T.tbx_seq_ranges SET hi = $1 WHERE hi IS "
		      "NULL",
    [Q_RANGE_DROP] = "DELETE FROM @T.tbx_seq_ranges WHERE hi IS NULL",
    [Q_RANGE_ADD] = "INSERT INTO @T.tbx_seq_ranges (lo, hi) VALUES ($1, "
		    "NULL)",
    [Q_SEQ_SET] = "SELECT setval('@T.tbx_seq', $1, true)",
    /* The range that may hold $1 (the last starting at or below it), and
     * the last number taken for an open one. */
    [Q_SEQ_ISSUED] = "SELECT lo, coalesce(hi, (SELECT CASE WHEN is_called "
		     "THEN last_value ELSE 0 END FROM @T.tbx_seq)) FROM "
		     "@T.tbx_seq_ranges WHERE lo <= $1 ORDER BY lo DESC LIMIT "
		     "1",
    [Q_RANGE_COUNT] = "SELECT count(*) FROM @T.tbx_seq_ranges",
};

static tbx_tokens_pg_t *backend(tbx_tokens_t *tokens)
{
	return (tbx_tokens_pg_t *)tokens;
}

/* Runs @p q with @p p (NULL: none), then frees what @p p owns. */
static int run(tbx_tokens_pg_t *t, int q, tbx__pg_params_t *p, PGresult **res)
{
	int err = tbx__pg_run(&t->stmts, q, p, res);

	if (p)
		tbx__pgp_free(p);
	return err;
}

/* run() that reports the rows the statement changed. */
static int run_changes(tbx_tokens_pg_t *t, int q, tbx__pg_params_t *p,
		       uint64_t *n)
{
	PGresult *res;
	int err = run(t, q, p, &res);

	*n = 0;
	if (err)
		return err;
	*n = strtoull(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return TBX_OK;
}

/* run() of a statement of one integer (0 without a row). */
static int run_i64(tbx_tokens_pg_t *t, int q, tbx__pg_params_t *p, int64_t *n,
		   int *found)
{
	int err = tbx__pg_run_i64(&t->stmts, q, p, n, found);

	if (p)
		tbx__pgp_free(p);
	return err;
}

int tbx__tokens_pg_ready(tbx_tokens_pg_t *t)
{
	int err;

	if (t->shared || t->pg->in_tx ||
	    (t->pg->conn && PQstatus(t->pg->conn) == CONNECTION_OK))
		return TBX_OK;
	/* BEGIN makes the connection again. */
	if ((err = tbx__pg_begin(t->pg)))
		return err;
	tbx__pg_rollback(t->pg);
	return TBX_OK;
}

/* A write's own transaction.  On a shared connection inside the service
 * store's transaction tbx__pg_begin() refuses (TBX_ESTATE). */
static int txn_begin(tbx_tokens_pg_t *t)
{
	if (t->pg->in_tx) {
		tbx__log(TBX_LOG_ERR,
			 "token store: a write while the %s "
			 "connection is inside a transaction",
			 t->shared ? "shared" : "store's");
		return TBX_ESTATE;
	}
	return tbx__pg_begin(t->pg);
}

/* Commits when @p err is TBX_OK, else rolls back.  @returns the first
 * error. */
static int txn_end(tbx_tokens_pg_t *t, int err)
{
	if (!err)
		return tbx__pg_commit(t->pg);
	tbx__pg_rollback(t->pg);
	return err;
}

/*
 * Opening: the schema, its version and identity.
 */

static int open_fail(tbx_tokens_pg_t *t, int err, const char *what,
		     char *errstr, size_t errstr_size)
{
	tbx__seterr(errstr, errstr_size, err, "%s: schema %s: %s: %s",
		    t->pg->where, t->schema, what, tbx__pg_errmsg(t->pg));
	return err;
}

static int has_table(tbx_tokens_pg_t *t, const char *name, int *yes)
{
	tbx__pg_params_t p;
	int64_t n = 0;
	int err;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, t->schema);
	tbx__pgp_text(&p, name);
	err = run_i64(t, Q_HAS_TABLE, &p, &n, NULL);
	*yes = n > 0;
	return err;
}

/* Reads tbx_schema_info and refuses another kind or a newer version.
 * *version = 0 when the schema has no token tables. */
static int read_info(tbx_tokens_pg_t *t, int *version, char *errstr,
		     size_t errstr_size)
{
	PGresult *res;
	char kind[32];
	int yes, err;

	*version = 0;
	if ((err = has_table(t, "tbx_schema_info", &yes)))
		return open_fail(t, err, "cannot read the catalog", errstr,
				 errstr_size);
	if (!yes) {
		/* Token tables without the version table were not made by
		 * this backend. */
		if ((err = has_table(t, "tbx_tokens", &yes)))
			return open_fail(t, err, "cannot read the catalog",
					 errstr, errstr_size);
		if (yes)
			return tbx__seterr(
			    errstr, errstr_size, TBX_ENOTDB,
			    "%s: schema %s: not a tokenbox token store (a "
			    "tbx_tokens table without tbx_schema_info)",
			    t->pg->where, t->schema);
		return TBX_OK;
	}
	if ((err = run(t, Q_INFO_GET, NULL, &res)))
		return open_fail(t, err, "cannot read tbx_schema_info", errstr,
				 errstr_size);
	if (PQntuples(res) != 1 ||
	    tbx__pg_text_to(res, 0, 0, kind, sizeof(kind))) {
		PQclear(res);
		return tbx__seterr(errstr, errstr_size, TBX_ENOTDB,
				   "%s: schema %s: not a tokenbox token store "
				   "(tbx_schema_info has no row 1)",
				   t->pg->where, t->schema);
	}
	*version = (int)tbx__pg_i64(res, 0, 1);
	PQclear(res);
	if (strcmp(kind, "tokens") != 0)
		return tbx__seterr(errstr, errstr_size, TBX_ENOTDB,
				   "%s: schema %s holds a tokenbox store of "
				   "kind '%s', not a token store; give the "
				   "token store a schema of its own "
				   "(tokens.schema)",
				   t->pg->where, t->schema, kind);
	if (*version > TBX_PG_TOKENS_VERSION || *version < 1)
		return tbx__seterr(errstr, errstr_size, TBX_ESCHEMA,
				   "%s: schema %s: token store version %d is "
				   "not one this tokenbox knows (%d); use a "
				   "newer tokenbox",
				   t->pg->where, t->schema, *version,
				   TBX_PG_TOKENS_VERSION);
	return TBX_OK;
}

/* Runs one DDL text with the schema filled in. */
static int ddl(tbx_tokens_pg_t *t, const char *tmpl)
{
	tbx__pg_stmts_t one;
	int err;

	if ((err = tbx__pg_stmts_init(&one, t->pg, "ddl", &tmpl, 1, NULL,
				      t->schema)))
		return err;
	err = tbx__pg_exec(t->pg, one.sql[0]);
	tbx__pg_stmts_free(&one);
	return err;
}

/* Creates the schema or migrates it forward, in one transaction under
 * the schema's migration lock: a second opener waits, then finds the
 * tables made and the identity taken. */
static int migrate(tbx_tokens_pg_t *t, char *errstr, size_t errstr_size)
{
	tbx__pg_params_t p;
	int version, err;

	if ((err = tbx__pg_begin(t->pg)))
		return open_fail(t, err, "cannot begin", errstr, errstr_size);
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, t->schema);
	if ((err = run(t, Q_MIG_LOCK, &p, NULL))) {
		open_fail(t, err, "cannot lock for migration", errstr,
			  errstr_size);
		goto rollback;
	}
	/* Not CREATE SCHEMA IF NOT EXISTS: PostgreSQL checks the database's
	 * CREATE privilege before it looks (docs/operations.md, roles and
	 * grants). */
	if ((err = ddl(t, "DO $$BEGIN IF to_regnamespace('@T') IS NULL "
			  "THEN CREATE SCHEMA @T; END IF; END$$"))) {
		open_fail(t, err, "cannot create the schema", errstr,
			  errstr_size);
		goto rollback;
	}
	if ((err = read_info(t, &version, errstr, errstr_size)))
		goto rollback;
	/* Migrated to version 2 by a tokenbox that did not record it: the
	 * ranges are there, and their step must not run again. */
	if (version == 1) {
		int yes = 0;

		if ((err = has_table(t, "tbx_seq_ranges", &yes))) {
			open_fail(t, err, "cannot read the catalog", errstr,
				  errstr_size);
			goto rollback;
		}
		if (yes)
			version = 2;
	}
	for (int v = version; v < TBX_PG_TOKENS_VERSION; v++) {
		if ((err = ddl(t, migrations[v]))) {
			char what[64];
			snprintf(what, sizeof(what),
				 "migration to version %d failed", v + 1);
			open_fail(t, err, what, errstr, errstr_size);
			goto rollback;
		}
	}
	/* A migrated schema records its new version, or the next opening
	 * would run the steps again on tables that are there. */
	if (version > 0 && version < TBX_PG_TOKENS_VERSION) {
		tbx__pgp_init(&p);
		tbx__pgp_i64(&p, TBX_PG_TOKENS_VERSION);
		if ((err = run(t, Q_INFO_SET, &p, NULL))) {
			open_fail(t, err, "cannot record the schema version",
				  errstr, errstr_size);
			goto rollback;
		}
	}
	if (version == 0) {
		char id[TBX_UUID_LEN + 1];

		/* The store's identity, made once with the tables. */
		tbx__uuid(id);
		tbx__pgp_init(&p);
		tbx__pgp_i64(&p, TBX_PG_TOKENS_VERSION);
		tbx__pgp_text(&p, id);
		tbx__pgp_i64(&p, tbx__now_ms());
		if ((err = run(t, Q_INFO_ADD, &p, NULL))) {
			open_fail(t, err, "cannot record the schema version",
				  errstr, errstr_size);
			goto rollback;
		}
	}
	if ((err = tbx__pg_commit(t->pg)))
		return open_fail(t, err, "cannot commit the schema", errstr,
				 errstr_size);
	if (version < TBX_PG_TOKENS_VERSION)
		tbx__log(TBX_LOG_INFO,
			 "postgresql: %s: schema %s: token store %s version %d",
			 t->pg->where, t->schema,
			 version ? "migrated to" : "created at",
			 TBX_PG_TOKENS_VERSION);
	t->version = TBX_PG_TOKENS_VERSION;
	return TBX_OK;
rollback:
	tbx__pg_rollback(t->pg);
	return err;
}

/* Read-only, or creating off: the tables must be there. */
static int check_existing(tbx_tokens_pg_t *t, const tbx__db_opts_t *opts,
			  char *errstr, size_t errstr_size)
{
	int version, err;

	if ((err = tbx__pg_begin(t->pg)))
		return open_fail(t, err, "cannot begin", errstr, errstr_size);
	err = read_info(t, &version, errstr, errstr_size);
	tbx__pg_rollback(t->pg);
	if (err)
		return err;
	if (version == 0)
		return tbx__seterr(
		    errstr, errstr_size, TBX_ENOENT,
		    "%s: schema %s: no token store there%s", t->pg->where,
		    t->schema,
		    opts->readonly ? "" : " (and creating it is off)");
	t->version = version;
	return TBX_OK;
}

/* The session parameters of the options on a connection of our own,
 * kept across reconnects (a shared one has the service store's). */
static int session(tbx_tokens_pg_t *t, const tbx__db_opts_t *opts, char *errstr,
		   size_t errstr_size)
{
	char ms[24];
	int err;

	/* A lock held past busy_timeout is BUSY, as on SQLite; SQLite's 0
	 * fails at once, lock_timeout 0 would wait for ever. */
	snprintf(ms, sizeof(ms), "%d",
		 opts->busy_timeout_ms > 0 ? opts->busy_timeout_ms : 1);
	if ((err = tbx__pg_set(t->pg, "lock_timeout", ms)))
		return open_fail(t, err, "cannot set lock_timeout", errstr,
				 errstr_size);
	if (!opts->synchronous_full &&
	    (err = tbx__pg_set(t->pg, "synchronous_commit", "off")))
		return open_fail(t, err, "cannot set synchronous_commit",
				 errstr, errstr_size);
	return TBX_OK;
}

/*
 * The operations.
 */

static int op_exists(tbx_tokens_t *tokens, const char *token, const char *grp,
		     int *exists)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	int64_t one;
	int err;

	*exists = 0;
	if (!token || !grp)
		return TBX_EINVAL;
	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, token);
	tbx__pgp_text(&p, grp);
	return run_i64(t, Q_EXISTS, &p, &one, exists);
}

static int cmp_token(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int op_exists_many(tbx_tokens_t *tokens, const char *grp,
			  const char *const *token_ids, size_t n, int *exists)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *res;
	const char **found = NULL;
	int rows, err;

	if (!grp || (n && (!token_ids || !exists)))
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++)
		exists[i] = 0;
	if (n == 0)
		return TBX_OK;
	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text_array(&p, token_ids, n);
	if ((err = run(t, Q_EXISTS_MANY, &p, &res)))
		return err;
	/* The tokens there, sorted; each one asked for is looked up. */
	if ((rows = PQntuples(res)) > 0) {
		if (!(found = malloc((size_t)rows * sizeof(*found)))) {
			PQclear(res);
			return TBX_ENOMEM;
		}
		for (int r = 0; r < rows; r++)
			found[r] = tbx__pg_text(res, r, 0);
		qsort(found, (size_t)rows, sizeof(*found), cmp_token);
		for (size_t i = 0; i < n; i++)
			exists[i] = bsearch(&token_ids[i], found, (size_t)rows,
					    sizeof(*found), cmp_token) != NULL;
	}
	free(found);
	PQclear(res);
	return TBX_OK;
}

static int op_subscription(tbx_tokens_t *tokens, const char *topic,
			   const char *grp, int64_t *since)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	int64_t n;
	int found, err;

	if (!topic || !grp)
		return TBX_EINVAL;
	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, topic);
	tbx__pgp_text(&p, grp);
	if ((err = run_i64(t, Q_SUB_GET, &p, &n, &found)))
		return err;
	if (!found)
		return TBX_ENOENT;
	*since = n;
	return TBX_OK;
}

/* used_ms of (topic, grp) = now inside the caller's transaction;
 * *found = 0 when there is no such subscription, else *since its
 * number. */
static int sub_touch(tbx_tokens_pg_t *t, const char *topic, const char *grp,
		     int *found, int64_t *since)
{
	tbx__pg_params_t p;
	int64_t n;
	int err;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, topic);
	tbx__pgp_text(&p, grp);
	tbx__pgp_i64(&p, tbx__now_ms());
	if ((err = run_i64(t, Q_SUB_TOUCH, &p, &n, found)))
		return err;
	if (since)
		*since = n;
	return TBX_OK;
}

static int op_touch(tbx_tokens_t *tokens, const char *topic, const char *grp,
		    int *found)
{
	tbx_tokens_pg_t *t = backend(tokens);
	int err;

	*found = 0;
	if (!topic || !grp)
		return TBX_EINVAL;
	if ((err = txn_begin(t)))
		return err;
	err = sub_touch(t, topic, grp, found, NULL);
	if ((err = txn_end(t, err)))
		*found = 0;
	return err;
}

static int op_seq_current(tbx_tokens_t *tokens, int64_t *seq)
{
	tbx_tokens_pg_t *t = backend(tokens);
	int found, err;

	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	if ((err = run_i64(t, Q_SEQ_CURRENT, NULL, seq, &found)))
		return err;
	return found ? TBX_OK : TBX_ESTORE;
}

static int op_seq_issued(tbx_tokens_t *tokens, int64_t seq, int *issued)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	*issued = 0;
	if (seq >= t->issued_lo && seq <= t->issued_hi) {
		*issued = 1;
		return TBX_OK;
	}
	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_i64(&p, seq);
	if ((err = run(t, Q_SEQ_ISSUED, &p, &res)))
		return err;
	if (PQntuples(res) == 1 && seq <= tbx__pg_i64(res, 0, 1)) {
		*issued = 1;
		t->issued_lo = tbx__pg_i64(res, 0, 0);
		t->issued_hi = tbx__pg_i64(res, 0, 1);
	}
	PQclear(res);
	return TBX_OK;
}

/*
 * Starts a new range of the sequence, in a transaction of its own (see
 * SQLite's range_start() in tokens/sqlite.c for why).  nextval is not
 * transactional: the exclusive subscription lock, taken first, waits for
 * every transaction that took a number under the shared one (mint,
 * publish_mint, seq_joined) or the exclusive one (subscribe) to end, and
 * keeps any from taking one until this commits; so no nextval runs
 * between reading the last value, closing the range and setval().  A
 * failure after setval() leaves the sequence moved and the open range
 * open: its numbers are still the store's.
 */
static int range_start(tbx_tokens_pg_t *t)
{
	tbx__pg_params_t p;
	int64_t value = 0, open_lo = 0, lo;
	int found = 0, err;

	if ((err = txn_begin(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, t->schema);
	if ((err = run(t, Q_SUB_LOCK, &p, NULL)) ||
	    (err = run_i64(t, Q_SEQ_CURRENT, NULL, &value, NULL)) ||
	    (err = run_i64(t, Q_RANGE_OPEN, NULL, &open_lo, &found)))
		goto out;
	if (found) {
		/* A range that issued nothing goes. */
		if (value < open_lo) {
			err = run(t, Q_RANGE_DROP, NULL, NULL);
		} else {
			tbx__pgp_init(&p);
			tbx__pgp_i64(&p, value);
			err = run(t, Q_RANGE_CLOSE, &p, NULL);
		}
		if (err)
			goto out;
	}
	lo = tbx__now_ms() * TBX__SEQ_PER_MS;
	if (lo <= value)
		lo = value + 1;
	tbx__pgp_init(&p);
	tbx__pgp_i64(&p, lo);
	if ((err = run(t, Q_RANGE_ADD, &p, NULL)))
		goto out;
	if (lo - 1 != value) {
		tbx__pgp_init(&p);
		tbx__pgp_i64(&p, lo - 1);
		err = run(t, Q_SEQ_SET, &p, NULL);
	}
out:
	return txn_end(t, err);
}

/* Before a number is taken: the range of this opening, started now if
 * the opening could not (range_pending).  In a transaction of its own,
 * so never from inside one (a joined A then fails, and is retried). */
static int range_ready(tbx_tokens_pg_t *t)
{
	int err;

	if (!t->range_pending)
		return TBX_OK;
	if (t->pg->in_tx) {
		tbx__log(TBX_LOG_ERR,
			 "token store: schema %s: this opening started no "
			 "range of the sequence; no number is taken",
			 t->schema);
		return TBX_ESTORE;
	}
	if ((err = range_start(t)))
		return err;
	t->range_pending = 0;
	return TBX_OK;
}

static int op_store_id(tbx_tokens_t *tokens, char out[TBX_UUID_LEN + 1])
{
	tbx_tokens_pg_t *t = backend(tokens);
	PGresult *res;
	const char *id;
	int err;

	out[0] = '\0';
	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	if ((err = run(t, Q_STORE_ID, NULL, &res)))
		return err;
	id = PQntuples(res) == 1 ? tbx__pg_text(res, 0, 0) : NULL;
	if (!id || !tbx__is_uuid(id, strlen(id))) {
		tbx__log(TBX_LOG_ERR,
			 "token store: schema %s: no valid store "
			 "id in tbx_schema_info",
			 t->schema);
		err = TBX_ESTORE;
	} else {
		tbx__strlcpy(out, id, TBX_UUID_LEN + 1);
	}
	PQclear(res);
	return err;
}

static int op_subscribe(tbx_tokens_t *tokens, const char *topic,
			const char *grp, int64_t *since)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	int64_t seq = 0;
	int found = 0, err;

	if (!topic || !grp)
		return TBX_EINVAL;
	/* Senders mint per topic name: a pattern or a name Kafka refuses
	 * would be a subscription no record ever matches. */
	if (!tbx__topic_valid(topic)) {
		tbx__log(TBX_LOG_ERR,
			 "token store: '%s' is not a Kafka topic name; not "
			 "subscribed",
			 topic);
		return TBX_EINVAL;
	}
	if ((err = range_ready(t)) || (err = txn_begin(t)))
		return err;
	/* The exclusive lock before the number: a mint that took its
	 * number before ours has committed (its shared lock is gone), and
	 * none takes one until we commit. */
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, t->schema);
	err = run(t, Q_SUB_LOCK, &p, NULL);
	/* A subscription is taken once, and its number never moves (moving
	 * it would change which tokens the group expects). */
	if (!err)
		err = sub_touch(t, topic, grp, &found, &seq);
	if (!err && !found) {
		tbx__pgp_init(&p);
		tbx__pgp_text(&p, topic);
		tbx__pgp_text(&p, grp);
		tbx__pgp_i64(&p, tbx__now_ms());
		if (!(err = run_i64(t, Q_SUB_ADD, &p, &seq, &found)) && !found)
			err = TBX_ESTORE;
	}
	if ((err = txn_end(t, err)))
		return err;
	*since = seq;
	return TBX_OK;
}

static int mint_check(const char *send_grp, const tbx__mint_req_t *reqs,
		      size_t req_cnt)
{
	if (req_cnt && !reqs)
		return 0;
	for (size_t i = 0; i < req_cnt; i++) {
		const tbx__mint_req_t *req = &reqs[i];

		if (req->item_cnt && !req->items)
			return 0;
		/* A registration names its sender and its outbox row. */
		if (req->attempt && (!send_grp || !req->msg_id))
			return 0;
		for (size_t j = 0; j < req->item_cnt; j++)
			if (!req->items[j].token || !req->items[j].topic)
				return 0;
	}
	return 1;
}

/* Takes the subscription lock shared, then the next number, inside the
 * caller's transaction. */
static int seq_next(tbx_tokens_pg_t *t, int64_t *seq);

/* For tokens/pg_sets.c (tokens/pg_int.h). */
int tbx__tokens_pg_begin(tbx_tokens_pg_t *t)
{
	return txn_begin(t);
}

int tbx__tokens_pg_end(tbx_tokens_pg_t *t, int err)
{
	return txn_end(t, err);
}

int tbx__tokens_pg_range_ready(tbx_tokens_pg_t *t)
{
	return range_ready(t);
}

int tbx__tokens_pg_seq_next(tbx_tokens_pg_t *t, int64_t *seq)
{
	return seq_next(t, seq);
}

static int seq_next(tbx_tokens_pg_t *t, int64_t *seq)
{
	tbx__pg_params_t p;
	int found, err;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, t->schema);
	if ((err = run_i64(t, Q_SEQ_MINT, &p, seq, &found)))
		return err;
	return found ? TBX_OK : TBX_ESTORE;
}

/* The columns of one mint: token and topic per item, and attempt, token
 * and message id per registration. */
typedef struct mint_cols {
	const char **tok, **topic;
	const char **att, **att_tok, **att_msg;
	size_t n, regs;
} mint_cols_t;

static void cols_free(mint_cols_t *c)
{
	free(c->tok);
	free(c->topic);
	free(c->att);
	free(c->att_tok);
	free(c->att_msg);
}

static int cols_make(mint_cols_t *c, const tbx__mint_req_t *reqs, size_t cnt)
{
	size_t n = 0;

	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < cnt; i++)
		n += reqs[i].item_cnt;
	/* One more: calloc(0) may return NULL. */
	c->tok = calloc(n + 1, sizeof(*c->tok));
	c->topic = calloc(n + 1, sizeof(*c->topic));
	c->att = calloc(n + 1, sizeof(*c->att));
	c->att_tok = calloc(n + 1, sizeof(*c->att_tok));
	c->att_msg = calloc(n + 1, sizeof(*c->att_msg));
	if (!c->tok || !c->topic || !c->att || !c->att_tok || !c->att_msg) {
		cols_free(c);
		return TBX_ENOMEM;
	}
	for (size_t i = 0; i < cnt; i++) {
		const tbx__mint_req_t *req = &reqs[i];

		for (size_t j = 0; j < req->item_cnt; j++) {
			c->tok[c->n] = req->items[j].token;
			c->topic[c->n++] = req->items[j].topic;
			if (!req->attempt)
				continue;
			/* Registered with its tokens, in one transaction:
			 * the sweeper can always find an orphan. */
			c->att[c->regs] = req->attempt;
			c->att_tok[c->regs] = req->items[j].token;
			c->att_msg[c->regs++] = req->msg_id;
		}
	}
	return TBX_OK;
}

static int op_mint(tbx_tokens_t *tokens, const char *send_grp,
		   const tbx__mint_req_t *reqs, size_t req_cnt, int64_t *seq,
		   uint64_t *rows)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	mint_cols_t c;
	int64_t num = 0;
	uint64_t created = 0;
	int err;

	if (!mint_check(send_grp, reqs, req_cnt))
		return TBX_EINVAL;
	if ((err = range_ready(t)))
		return err;
	if ((err = cols_make(&c, reqs, req_cnt)))
		return err;
	if ((err = txn_begin(t))) {
		cols_free(&c);
		return err;
	}
	/* One number for the whole call: every message minted here carries
	 * it in tbx-seq, and a subscription taken in another transaction
	 * is wholly before or after it. */
	err = seq_next(t, &num);
	if (!err && c.n) {
		tbx__pgp_init(&p);
		tbx__pgp_text_array(&p, c.tok, c.n);
		tbx__pgp_i64(&p, num);
		tbx__pgp_i64(&p, tbx__now_ms());
		tbx__pgp_text_array(&p, c.topic, c.n);
		tbx__pgp_text(&p, send_grp);
		tbx__pgp_text_array(&p, c.att, c.regs);
		tbx__pgp_text_array(&p, c.att_tok, c.regs);
		tbx__pgp_text_array(&p, c.att_msg, c.regs);
		err = run_changes(t, Q_MINT, &p, &created);
	}
	cols_free(&c);
	if ((err = txn_end(t, err)))
		return err;
	if (seq)
		*seq = num;
	if (rows)
		*rows = created;
	return TBX_OK;
}

/* The joined operations run inside the caller's transaction on the
 * service store's connection: never on a connection of our own (the
 * caller's COMMIT would not cover it), never outside a transaction. */
static int joined_check(tbx_tokens_pg_t *t)
{
	if (!t->shared || !t->pg->in_tx) {
		tbx__log(TBX_LOG_ERR, "token store: a joined operation %s",
			 !t->shared ? "on a connection of its own"
				    : "outside a transaction");
		return TBX_ESTATE;
	}
	return TBX_OK;
}

int tbx__tokens_pg_joined_check(tbx_tokens_pg_t *t)
{
	return joined_check(t);
}

static int op_seq_joined(tbx_tokens_t *tokens, int64_t *seq)
{
	tbx_tokens_pg_t *t = backend(tokens);
	int err;

	if (!seq)
		return TBX_EINVAL;
	if ((err = joined_check(t)) || (err = range_ready(t)))
		return err;
	return seq_next(t, seq);
}

static int op_mint_joined(tbx_tokens_t *tokens, const tbx__mint_item_t *items,
			  size_t cnt, int64_t seq, uint64_t *rows)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__mint_req_t req = {NULL, NULL, items, cnt};
	tbx__pg_params_t p;
	mint_cols_t c;
	int err;

	if (seq <= 0 || !mint_check(NULL, &req, 1))
		return TBX_EINVAL;
	if ((err = joined_check(t)))
		return err;
	if (!cnt)
		return TBX_OK;
	if ((err = cols_make(&c, &req, 1)))
		return err;
	/* A statement after seq_joined()'s lock: it sees every
	 * subscription that took its number before ours.  Sent with the
	 * transaction's next statement (store/pg.h); *rows grows when it
	 * has run, before the caller's commit. */
	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, c.tok, c.n);
	tbx__pgp_i64(&p, seq);
	tbx__pgp_i64(&p, tbx__now_ms());
	tbx__pgp_text_array(&p, c.topic, c.n);
	err = tbx__pg_defer(&t->stmts, Q_TOKENS_ADD, &p, rows, 0, "tokens");
	tbx__pgp_free(&p);
	cols_free(&c);
	return err;
}

static int op_confirm(tbx_tokens_t *tokens, const char *const *attempts,
		      size_t cnt)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	int err;

	if (cnt == 0)
		return TBX_OK;
	if (!attempts)
		return TBX_EINVAL;
	for (size_t i = 0; i < cnt; i++)
		if (!attempts[i])
			return TBX_EINVAL;
	if ((err = txn_begin(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, attempts, cnt);
	err = run(t, Q_CONFIRM, &p, NULL);
	return txn_end(t, err);
}

static int consume_check(const char *grp, const char *const *token_ids,
			 size_t cnt)
{
	if (!grp || !token_ids)
		return 0;
	for (size_t i = 0; i < cnt; i++)
		if (!token_ids[i])
			return 0;
	return 1;
}

/* D's deletes: in a transaction of their own, or @p joined inside the
 * caller's. */
static int consume(tbx_tokens_t *tokens, const char *grp,
		   const char *const *token_ids, size_t cnt, uint64_t *deleted,
		   int joined)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	uint64_t n = 0;
	int err;

	if (deleted)
		*deleted = 0;
	if (cnt == 0)
		return TBX_OK;
	if (!consume_check(grp, token_ids, cnt))
		return TBX_EINVAL;
	if ((err = joined ? joined_check(t) : txn_begin(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text_array(&p, token_ids, cnt);
	err = run_changes(t, Q_CONSUME, &p, &n);
	if (!joined)
		err = txn_end(t, err);
	if (err)
		return err;
	if (deleted)
		*deleted = n;
	return TBX_OK;
}

static int op_consume(tbx_tokens_t *tokens, const char *grp,
		      const char *const *token_ids, size_t cnt,
		      uint64_t *deleted)
{
	return consume(tokens, grp, token_ids, cnt, deleted, 0);
}

static int op_consume_joined(tbx_tokens_t *tokens, const char *grp,
			     const char *const *token_ids, size_t cnt,
			     uint64_t *deleted)
{
	return consume(tokens, grp, token_ids, cnt, deleted, 1);
}

int tbx__tokens_pg_drop(tbx_tokens_pg_t *t, tbx__pg_stmts_t *stmts, int q,
			const char *attempt, int *dropped, uint64_t *deleted)
{
	tbx__pg_params_t p;
	PGresult *res = NULL;
	int64_t regs = 0, n = 0;
	int err;

	*dropped = 0;
	if (deleted)
		*deleted = 0;
	if ((err = txn_begin(t)))
		return err;
	/*
	 * The registration is the licence to delete, and the statement
	 * deletes it first: once the winner's confirm (C) has removed it,
	 * its tokens are in flight and must stay, whatever the caller read
	 * in S before.  A confirm in progress holds the registrations' row
	 * locks; this waits for it and then finds them gone.
	 */
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, attempt);
	err = tbx__pg_run(stmts, q, &p, &res);
	tbx__pgp_free(&p);
	if (!err) {
		if (PQntuples(res) == 1) {
			regs = tbx__pg_i64(res, 0, 0);
			n = tbx__pg_i64(res, 0, 1);
		} else {
			err = TBX_ESTORE;
		}
		PQclear(res);
	}
	if ((err = txn_end(t, err)))
		return err;
	*dropped = regs > 0;
	if (deleted)
		*deleted = (uint64_t)n;
	return TBX_OK;
}

static int op_drop_attempt(tbx_tokens_t *tokens, const char *attempt,
			   int *dropped, uint64_t *deleted)
{
	if (!attempt || !dropped)
		return TBX_EINVAL;
	return tbx__tokens_pg_drop(backend(tokens), &backend(tokens)->stmts,
				   Q_DROP, attempt, dropped, deleted);
}

int tbx__tp_regs_from(PGresult *res, tbx__reg_t **out, size_t *cnt)
{
	int rows = PQntuples(res), err = TBX_OK;
	tbx__reg_t *regs;

	if (rows == 0) {
		PQclear(res);
		return TBX_OK;
	}
	if (!(regs = calloc((size_t)rows, sizeof(*regs)))) {
		PQclear(res);
		return TBX_ENOMEM;
	}
	for (int r = 0; r < rows; r++) {
		if (tbx__pg_text_to(res, r, 0, regs[r].attempt,
				    sizeof(regs[r].attempt)) ||
		    tbx__pg_text_to(res, r, 1, regs[r].msg_id,
				    sizeof(regs[r].msg_id)) ||
		    !regs[r].attempt[0] || !regs[r].msg_id[0]) {
			tbx__log(TBX_LOG_ERR, "token store: registration with "
					      "a malformed attempt or id");
			err = TBX_ESTORE;
			break;
		}
		regs[r].created_ms = tbx__pg_i64(res, r, 2);
	}
	PQclear(res);
	if (err) {
		free(regs);
		return err;
	}
	*out = regs;
	*cnt = (size_t)rows;
	return TBX_OK;
}

static int op_registrations(tbx_tokens_t *tokens, const char *send_grp,
			    const tbx__reg_t *after, size_t limit,
			    tbx__reg_t **out, size_t *cnt)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	*out = NULL;
	*cnt = 0;
	if (!send_grp)
		return TBX_EINVAL;
	if (limit == 0)
		return TBX_OK;
	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	/* (c, attempt) > (INT64_MIN, '') holds for every registration. */
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, send_grp);
	tbx__pgp_i64(&p, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
	tbx__pgp_i64(&p, after ? after->created_ms : INT64_MIN);
	tbx__pgp_text(&p, after ? after->attempt : "");
	if ((err = run(t, Q_REG_LIST, &p, &res)))
		return err;
	return tbx__tp_regs_from(res, out, cnt);
}

static int op_count(tbx_tokens_t *tokens, const char *grp, int64_t *token_rows,
		    int64_t *registrations)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	PGresult *res;
	int err;

	if (!token_rows && !registrations)
		return TBX_OK;
	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	tbx__pgp_init(&p);
	if (grp)
		tbx__pgp_text(&p, grp);
	if ((err = run(t, grp ? Q_COUNT_GRP : Q_COUNT_ALL, &p, &res)))
		return err;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return TBX_ESTORE;
	}
	if (token_rows)
		*token_rows = tbx__pg_i64(res, 0, 0);
	if (registrations)
		*registrations = tbx__pg_i64(res, 0, 1);
	PQclear(res);
	return TBX_OK;
}

/*
 * The publisher's mint with the ingress edge.
 */

/* What the edge holds for one caller id of the flush. */
typedef struct edge_entry {
	const uint8_t *fp; /* TBX_EDGE_FP_LEN bytes; NULL: malformed */
	uint8_t fp_own[TBX_EDGE_FP_LEN];
	char msg_id[TBX_UUID_LEN + 1];
	char token[TBX_UUID_LEN + 1];
	int64_t seq;
	int delivered;
	char tset[TBX_UUID_LEN + 1]; /* "": a per-message token */
	uint32_t tbit;
	int32_t tpart;
	int ok;		 /* msg_id and token are well-formed */
	int64_t refused; /* synthetic duplicates refused in this flush */
} edge_entry_t;

/* A caller-id item, for sorting by key. */
typedef struct keyref {
	const char *topic, *cid;
	size_t i;
} keyref_t;

/* The work of one publish_mint. */
typedef struct pub {
	tbx__edge_item_t *items;
	size_t cnt;
	keyref_t *order; /* caller-id items, by key then position */
	size_t keyed;
	size_t *first; /* per item: its key's first item (caller ids) */
	size_t *slot;  /* per item: its key's index in keys */
	size_t nkeys;
	size_t *key_item;     /* per key: its first item */
	int *inserted;	      /* per key: the edge took our entry */
	edge_entry_t *ent;    /* per key */
	tbx__pub_sets_t sets; /* the sets of the new in_set items */
} pub_t;

static int key_cmp(const void *a, const void *b)
{
	const keyref_t *x = a, *y = b;
	int c = strcmp(x->topic, y->topic);

	if (!c)
		c = strcmp(x->cid, y->cid);
	if (!c)
		c = x->i < y->i ? -1 : 1;
	return c;
}

static void pub_free(pub_t *w)
{
	free(w->order);
	free(w->first);
	free(w->slot);
	free(w->key_item);
	free(w->inserted);
	free(w->ent);
	tbx__pub_sets_free(&w->sets);
}

/* Groups the caller-id items by key: each key once, in the position of
 * its first item. */
static int pub_keys(pub_t *w)
{
	size_t n = w->cnt + 1;

	w->order = calloc(n, sizeof(*w->order));
	w->first = calloc(n, sizeof(*w->first));
	w->slot = calloc(n, sizeof(*w->slot));
	w->key_item = calloc(n, sizeof(*w->key_item));
	w->inserted = calloc(n, sizeof(*w->inserted));
	w->ent = calloc(n, sizeof(*w->ent));
	if (!w->order || !w->first || !w->slot || !w->key_item ||
	    !w->inserted || !w->ent)
		return TBX_ENOMEM;
	for (size_t i = 0; i < w->cnt; i++) {
		if (!w->items[i].caller_id)
			continue;
		w->order[w->keyed].topic = w->items[i].topic;
		w->order[w->keyed].cid = w->items[i].caller_id;
		w->order[w->keyed++].i = i;
	}
	qsort(w->order, w->keyed, sizeof(*w->order), key_cmp);
	for (size_t k = 0; k < w->keyed; k++) {
		size_t i = w->order[k].i;
		const keyref_t *prev = k ? &w->order[k - 1] : NULL;

		if (!prev || strcmp(prev->topic, w->order[k].topic) ||
		    strcmp(prev->cid, w->order[k].cid)) {
			w->key_item[w->nkeys] = i;
			w->nkeys++;
		}
		w->slot[i] = w->nkeys - 1;
		w->first[i] = w->key_item[w->nkeys - 1];
	}
	return TBX_OK;
}

/* Hex of a fingerprint, for decode(…, 'hex'). */
static void hex(const uint8_t *fp, char out[2 * TBX_EDGE_FP_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < TBX_EDGE_FP_LEN; i++) {
		out[2 * i] = digits[fp[i] >> 4];
		out[2 * i + 1] = digits[fp[i] & 15];
	}
	out[2 * TBX_EDGE_FP_LEN] = '\0';
}

/* Which key of the flush is (@p topic, @p cid)?  The keys are in
 * byte order (pub_keys() sorted them): a binary search. */
static size_t key_find(const pub_t *w, const char *topic, const char *cid)
{
	size_t lo = 0, hi = w->nkeys;

	if (!topic || !cid)
		return (size_t)-1;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const tbx__edge_item_t *it = &w->items[w->key_item[mid]];
		int c = strcmp(it->topic, topic);

		if (!c)
			c = strcmp(it->caller_id, cid);
		if (!c)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (size_t)-1;
}

/* Offers every key's first item to the edge at @p num; marks the keys it
 * took. */
static int edge_put(tbx_tokens_pg_t *t, pub_t *w, int64_t num, int64_t now,
		    int64_t from)
{
	const char **topic, **cid, **fp, **msg, **tok;
	char(*hexes)[2 * TBX_EDGE_FP_LEN + 1];
	tbx__pg_params_t p;
	PGresult *res = NULL;
	size_t n = w->nkeys + 1;
	int err = TBX_ENOMEM;

	topic = calloc(n, sizeof(*topic));
	cid = calloc(n, sizeof(*cid));
	fp = calloc(n, sizeof(*fp));
	msg = calloc(n, sizeof(*msg));
	tok = calloc(n, sizeof(*tok));
	hexes = calloc(n, sizeof(*hexes));
	if (!topic || !cid || !fp || !msg || !tok || !hexes)
		goto out;
	for (size_t k = 0; k < w->nkeys; k++) {
		const tbx__edge_item_t *it = &w->items[w->key_item[k]];

		topic[k] = it->topic;
		cid[k] = it->caller_id;
		hex(it->fp, hexes[k]);
		fp[k] = hexes[k];
		msg[k] = it->msg_id;
		tok[k] = it->token;
	}
	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, topic, w->nkeys);
	tbx__pgp_text_array(&p, cid, w->nkeys);
	tbx__pgp_text_array(&p, fp, w->nkeys);
	tbx__pgp_text_array(&p, msg, w->nkeys);
	tbx__pgp_text_array(&p, tok, w->nkeys);
	tbx__pgp_i64(&p, num);
	tbx__pgp_i64(&p, now);
	tbx__pgp_i64(&p, from);
	if ((err = run(t, Q_EDGE_PUT, &p, &res)))
		goto out;
	for (int r = 0; r < PQntuples(res); r++) {
		size_t k = key_find(w, tbx__pg_text(res, r, 0),
				    tbx__pg_text(res, r, 1));
		if (k == (size_t)-1) {
			err = TBX_ESTORE;
			break;
		}
		w->inserted[k] = 1;
	}
	PQclear(res);
out:
	free(topic);
	free(cid);
	free(fp);
	free(msg);
	free(tok);
	free(hexes);
	return err;
}

/* Reads (and locks) the entries of the keys the edge did not take. */
static int edge_get(tbx_tokens_pg_t *t, pub_t *w)
{
	const char **topic, **cid;
	size_t *key, n = 0;
	tbx__pg_params_t p;
	PGresult *res = NULL;
	int err = TBX_ENOMEM;

	topic = calloc(w->nkeys + 1, sizeof(*topic));
	cid = calloc(w->nkeys + 1, sizeof(*cid));
	key = calloc(w->nkeys + 1, sizeof(*key));
	if (!topic || !cid || !key)
		goto out;
	for (size_t k = 0; k < w->nkeys; k++) {
		if (w->inserted[k])
			continue;
		topic[n] = w->items[w->key_item[k]].topic;
		cid[n] = w->items[w->key_item[k]].caller_id;
		key[n++] = k;
	}
	err = TBX_OK;
	if (!n)
		goto out;
	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, topic, n);
	tbx__pgp_text_array(&p, cid, n);
	if ((err = run(t, Q_EDGE_GET, &p, &res)))
		goto out;
	/* Every key is there: the insert found it within the window. */
	if ((size_t)PQntuples(res) != n) {
		tbx__log(TBX_LOG_ERR,
			 "token store: the edge lost %zu entries "
			 "while they were locked",
			 n - (size_t)PQntuples(res));
		err = TBX_ESTORE;
	}
	for (int r = 0; !err && r < PQntuples(res); r++) {
		int64_t i = tbx__pg_i64(res, r, 0);
		edge_entry_t *e;
		const void *fp;
		size_t len;

		if (i < 1 || (size_t)i > n) {
			err = TBX_ESTORE;
			break;
		}
		e = &w->ent[key[i - 1]];
		fp = tbx__pg_bytea(res, r, 1, &len);
		if (fp && len == TBX_EDGE_FP_LEN) {
			memcpy(e->fp_own, fp, TBX_EDGE_FP_LEN);
			e->fp = e->fp_own;
		}
		e->ok =
		    !tbx__pg_text_to(res, r, 2, e->msg_id, sizeof(e->msg_id)) &&
		    !tbx__pg_text_to(res, r, 3, e->token, sizeof(e->token)) &&
		    strlen(e->msg_id) == TBX_UUID_LEN &&
		    strlen(e->token) == TBX_UUID_LEN;
		e->seq = tbx__pg_i64(res, r, 4);
		e->delivered = tbx__pg_i64(res, r, 5) != 0;
		/* An entry of a set: its set, bit and partition, no token. */
		if (!PQgetisnull(res, r, 6))
			e->ok = !tbx__pg_text_to(res, r, 2, e->msg_id,
						 sizeof(e->msg_id)) &&
				!tbx__pg_text_to(res, r, 6, e->tset,
						 sizeof(e->tset)) &&
				strlen(e->msg_id) == TBX_UUID_LEN &&
				strlen(e->tset) == TBX_UUID_LEN &&
				!PQgetisnull(res, r, 7) &&
				!PQgetisnull(res, r, 8);
		if (e->tset[0] && e->ok) {
			e->tbit = (uint32_t)tbx__pg_i64(res, r, 7);
			e->tpart = (int32_t)tbx__pg_i64(res, r, 8);
			e->token[0] = '\0';
		}
	}
	PQclear(res);
out:
	free(topic);
	free(cid);
	free(key);
	return err;
}

/* Adds the synthetic duplicates of the flush to their entries. */
static int edge_refused(tbx_tokens_pg_t *t, const pub_t *w)
{
	const char **topic, **cid;
	int64_t *cnt;
	size_t n = 0;
	tbx__pg_params_t p;
	int err = TBX_ENOMEM;

	topic = calloc(w->nkeys + 1, sizeof(*topic));
	cid = calloc(w->nkeys + 1, sizeof(*cid));
	cnt = calloc(w->nkeys + 1, sizeof(*cnt));
	if (!topic || !cid || !cnt)
		goto out;
	for (size_t k = 0; k < w->nkeys; k++) {
		if (!w->ent[k].refused)
			continue;
		topic[n] = w->items[w->key_item[k]].topic;
		cid[n] = w->items[w->key_item[k]].caller_id;
		cnt[n++] = w->ent[k].refused;
	}
	err = TBX_OK;
	if (!n)
		goto out;
	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, topic, n);
	tbx__pgp_text_array(&p, cid, n);
	tbx__pgp_i64_array(&p, cnt, n);
	err = run(t, Q_EDGE_REFUSED, &p, NULL);
out:
	free(topic);
	free(cid);
	free(cnt);
	return err;
}

/* The verdicts, in the order of the items, as SQLite's one lookup per
 * item gives them: a key's first item is new when the edge took it;
 * every other item of the key is a duplicate of the entry. */
/* A new item's token: with in_set the next bit of its set, else the
 * fresh per-message token it came with. */
static int new_token(pub_t *w, tbx__edge_item_t *it)
{
	if (it->in_set)
		return tbx__pub_set_bit(&w->sets, it);
	it->set_id[0] = '\0';
	it->part = -1;
	return TBX_OK;
}

static int decide(pub_t *w, int64_t num)
{
	int err;

	for (size_t i = 0; i < w->cnt; i++) {
		tbx__edge_item_t *it = &w->items[i];
		edge_entry_t *e;
		size_t k;

		it->verdict = TBX_EDGE_NEW;
		if (!it->caller_id) {
			it->seq = num;
			if ((err = new_token(w, it)))
				return err;
			continue;
		}
		k = w->slot[i];
		e = &w->ent[k];
		if (w->inserted[k] && w->first[i] == i) {
			const tbx__edge_item_t *f = it;

			it->seq = num;
			if ((err = new_token(w, it)))
				return err;
			/* Later items of the key see this entry. */
			e->fp = f->fp;
			memcpy(e->msg_id, f->msg_id, sizeof(e->msg_id));
			memcpy(e->token, f->token, sizeof(e->token));
			memcpy(e->tset, f->set_id, sizeof(e->tset));
			e->tbit = f->bit;
			e->tpart = f->part;
			e->seq = num;
			e->delivered = 0;
			e->ok = 1;
			continue;
		}
		if (!e->fp || memcmp(e->fp, it->fp, TBX_EDGE_FP_LEN) != 0) {
			it->verdict = TBX_EDGE_SYNTHETIC;
			e->refused++;
			continue;
		}
		if (!e->ok) {
			tbx__log(TBX_LOG_ERR,
				 "token store: edge entry of caller id "
				 "'%s' is malformed",
				 it->caller_id);
			return TBX_ECORRUPT;
		}
		memcpy(it->msg_id, e->msg_id, TBX_UUID_LEN + 1);
		/* The original's token, whichever format it went out in. */
		memcpy(it->token, e->token, TBX_UUID_LEN + 1);
		memcpy(it->set_id, e->tset, TBX_UUID_LEN + 1);
		it->bit = e->tbit;
		it->part = e->tset[0] ? e->tpart : -1;
		it->seq = e->seq;
		it->verdict = e->delivered ? TBX_EDGE_DONE : TBX_EDGE_INFLIGHT;
	}
	return TBX_OK;
}

/* The set, bit and partition of the new entries minted in sets. */
static int edge_sets(tbx_tokens_pg_t *t, const pub_t *w)
{
	const char **topic, **cid, **set;
	int64_t *bit, *part;
	size_t n = 0;
	tbx__pg_params_t p;
	int err = TBX_ENOMEM;

	topic = calloc(w->nkeys + 1, sizeof(*topic));
	cid = calloc(w->nkeys + 1, sizeof(*cid));
	set = calloc(w->nkeys + 1, sizeof(*set));
	bit = calloc(w->nkeys + 1, sizeof(*bit));
	part = calloc(w->nkeys + 1, sizeof(*part));
	if (!topic || !cid || !set || !bit || !part)
		goto out;
	for (size_t k = 0; k < w->nkeys; k++) {
		const tbx__edge_item_t *it = &w->items[w->key_item[k]];

		if (!w->inserted[k] || !it->in_set)
			continue;
		topic[n] = it->topic;
		cid[n] = it->caller_id;
		set[n] = it->set_id;
		bit[n] = it->bit;
		part[n++] = it->part;
	}
	err = TBX_OK;
	if (!n)
		goto out;
	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, topic, n);
	tbx__pgp_text_array(&p, cid, n);
	tbx__pgp_text_array(&p, set, n);
	tbx__pgp_i64_array(&p, bit, n);
	tbx__pgp_i64_array(&p, part, n);
	err = run(t, Q_EDGE_SETS, &p, NULL);
out:
	free(topic);
	free(cid);
	free(set);
	free(bit);
	free(part);
	return err;
}

/* The token rows of the new items. */
static int pub_tokens(tbx_tokens_pg_t *t, const pub_t *w, int64_t num,
		      int64_t now, uint64_t *created)
{
	const char **tok, **topic, **grp;
	size_t n = 0;
	tbx__pg_params_t p;
	int err = TBX_ENOMEM;

	*created = 0;
	tok = calloc(w->cnt + 1, sizeof(*tok));
	topic = calloc(w->cnt + 1, sizeof(*topic));
	grp = calloc(w->cnt + 1, sizeof(*grp));
	if (!tok || !topic || !grp)
		goto out;
	for (size_t i = 0; i < w->cnt; i++) {
		if (w->items[i].verdict != TBX_EDGE_NEW || w->items[i].in_set)
			continue;
		tok[n] = w->items[i].token;
		topic[n] = w->items[i].topic;
		grp[n++] = w->items[i].grp ? w->items[i].grp : "";
	}
	err = TBX_OK;
	if (!n)
		goto out;
	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, tok, n);
	tbx__pgp_i64(&p, num);
	tbx__pgp_i64(&p, now);
	tbx__pgp_text_array(&p, topic, n);
	tbx__pgp_text_array(&p, grp, n);
	err = run_changes(t, Q_PUB_TOKENS, &p, created);
out:
	free(tok);
	free(topic);
	free(grp);
	return err;
}

static int op_publish_mint(tbx_tokens_t *tokens, tbx__edge_item_t *items,
			   size_t cnt, int64_t window_ms, size_t sweep_max,
			   uint64_t *rows)
{
	tbx_tokens_pg_t *t = backend(tokens);
	int64_t num = 0, now = tbx__now_ms(), from = now - window_ms;
	uint64_t created = 0;
	tbx__pg_params_t p;
	pub_t w;
	int found, err;

	if ((cnt && !items) || window_ms < 0)
		return TBX_EINVAL;
	for (size_t i = 0; i < cnt; i++)
		if (!items[i].topic || (items[i].caller_id && !items[i].fp) ||
		    (items[i].grp && !items[i].grp[0]))
			return TBX_EINVAL;
	for (size_t i = 0; i < cnt; i++) {
		if (items[i].in_set && (items[i].grp || items[i].part < 0))
			return TBX_EINVAL;
		/* Token version 4 records an edge entry's set. */
		if (items[i].in_set && t->version < 4)
			return TBX_ESCHEMA;
	}
	if ((err = range_ready(t)))
		return err;
	memset(&w, 0, sizeof(w));
	w.items = items;
	w.cnt = cnt;
	if ((err = pub_keys(&w))) {
		pub_free(&w);
		return err;
	}
	if ((err = txn_begin(t))) {
		pub_free(&w);
		return err;
	}
	tbx__pgp_init(&p);
	tbx__pgp_i64(&p, from);
	tbx__pgp_i64(&p,
		     sweep_max > INT64_MAX ? INT64_MAX : (int64_t)sweep_max);
	tbx__pgp_text(&p, t->schema);
	if (!(err = run_i64(t, Q_SEQ_PUBLISH, &p, &num, &found)) && !found)
		err = TBX_ESTORE;
	/* Recorded with its token, in one transaction: a re-send after a
	 * crash finds the id and token that may be out. */
	if (!err && w.nkeys)
		err = edge_put(t, &w, num, now, from);
	if (!err && w.nkeys)
		err = edge_get(t, &w);
	if (!err)
		err = decide(&w, num);
	if (!err)
		err = edge_refused(t, &w);
	if (!err)
		err = edge_sets(t, &w);
	if (!err)
		err = pub_tokens(t, &w, num, now, &created);
	if (!err && w.sets.cnt) {
		uint64_t sets = 0;

		err = tbx__tp_sets_add(tokens, w.sets.sets, w.sets.cnt, num,
				       &sets);
		created += sets;
	}
	pub_free(&w);
	if ((err = txn_end(t, err)))
		return err;
	if (rows)
		*rows = created;
	return TBX_OK;
}

static int op_edge_delivered(tbx_tokens_t *tokens,
			     const tbx__edge_item_t *items, size_t cnt)
{
	tbx_tokens_pg_t *t = backend(tokens);
	const char **topic, **cid, **msg;
	tbx__pg_params_t p;
	size_t n = 0;
	int err = TBX_ENOMEM;

	if (cnt && !items)
		return TBX_EINVAL;
	topic = calloc(cnt + 1, sizeof(*topic));
	cid = calloc(cnt + 1, sizeof(*cid));
	msg = calloc(cnt + 1, sizeof(*msg));
	if (!topic || !cid || !msg)
		goto out;
	for (size_t i = 0; i < cnt; i++) {
		if (!items[i].caller_id ||
		    (items[i].verdict != TBX_EDGE_NEW &&
		     items[i].verdict != TBX_EDGE_INFLIGHT))
			continue;
		topic[n] = items[i].topic;
		cid[n] = items[i].caller_id;
		msg[n++] = items[i].msg_id;
	}
	err = TBX_OK;
	if (!n)
		goto out;
	if ((err = txn_begin(t)))
		goto out;
	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, topic, n);
	tbx__pgp_text_array(&p, cid, n);
	tbx__pgp_text_array(&p, msg, n);
	err = run(t, Q_EDGE_DELIVERED, &p, NULL);
	err = txn_end(t, err);
out:
	free(topic);
	free(cid);
	free(msg);
	return err;
}

static int op_edge_count(tbx_tokens_t *tokens, int64_t *entries,
			 int64_t *refused)
{
	tbx_tokens_pg_t *t = backend(tokens);
	PGresult *res;
	int err;

	if (!entries && !refused)
		return TBX_OK;
	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	if ((err = run(t, Q_EDGE_COUNT, NULL, &res)))
		return err;
	if (PQntuples(res) != 1) {
		PQclear(res);
		return TBX_ESTORE;
	}
	if (entries)
		*entries = tbx__pg_i64(res, 0, 0);
	if (refused)
		*refused = tbx__pg_i64(res, 0, 1);
	PQclear(res);
	return TBX_OK;
}

static int op_subscribers(tbx_tokens_t *tokens, const char *topic, int64_t *cnt)
{
	tbx_tokens_pg_t *t = backend(tokens);
	tbx__pg_params_t p;
	int err;

	if (!topic || !cnt)
		return TBX_EINVAL;
	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, topic);
	return run_i64(t, Q_SUB_COUNT, &p, cnt, NULL);
}

static int op_seq_ranges(tbx_tokens_t *tokens, int64_t *count)
{
	tbx_tokens_pg_t *t = backend(tokens);
	int err;

	if (!count)
		return TBX_EINVAL;
	if ((err = tbx__tokens_pg_ready(t)))
		return err;
	return run_i64(t, Q_RANGE_COUNT, NULL, count, NULL);
}

static void op_close(tbx_tokens_t *tokens)
{
	tbx_tokens_pg_t *t = backend(tokens);

	if (!t)
		return;
	if (t->reading)
		tbx__tp_read_end(tokens);
	tbx__pg_stmts_free(&t->stmts);
	tbx__pg_stmts_free(&t->reads);
	tbx__pg_stmts_free(&t->sets);
	/* Shared: the service store's reference keeps it open. */
	tbx__pg_unref(t->pg);
	free(t);
}

static const tbx_tokens_ops_t pg_ops = {
    .name = "postgresql",
    .exists = op_exists,
    .exists_many = op_exists_many,
    .subscribe = op_subscribe,
    .subscription = op_subscription,
    .mint = op_mint,
    .seq_joined = op_seq_joined,
    .mint_joined = op_mint_joined,
    .consume_joined = op_consume_joined,
    .confirm = op_confirm,
    .consume = op_consume,
    .drop_attempt = op_drop_attempt,
    .registrations = op_registrations,
    .store_id = op_store_id,
    .seq_current = op_seq_current,
    .seq_issued = op_seq_issued,
    .seq_ranges = op_seq_ranges,
    .touch = op_touch,
    .count = op_count,
    .publish_mint = op_publish_mint,
    .edge_delivered = op_edge_delivered,
    .edge_count = op_edge_count,
    .subscribers = op_subscribers,
    .read_begin = tbx__tp_read_begin,
    .read_end = tbx__tp_read_end,
    .schema = tbx__tp_schema,
    .has = tbx__tp_has,
    .errmsg = tbx__tp_errmsg,
    .tokens_summary = tbx__tp_tokens_summary,
    .registrations_summary = tbx__tp_registrations_summary,
    .subscriptions_list = tbx__tp_subscriptions_list,
    .sender_groups = tbx__tp_sender_groups,
    .attempts = tbx__tp_attempts,
    .attempt_token_rows = tbx__tp_attempt_token_rows,
    .tokens_list = tbx__tp_tokens_list,
    .token_rows = tbx__tp_token_rows,
    .token_registrations = tbx__tp_token_registrations,
    .token_match = tbx__tp_token_match,
    .unsubscribe = tbx__tp_unsubscribe,
    .sets_mint = tbx__tp_sets_mint,
    .sets_mint_joined = tbx__tp_sets_mint_joined,
    .sets_test = tbx__tp_sets_test,
    .sets_consume = tbx__tp_sets_consume,
    .sets_consume_joined = tbx__tp_sets_consume_joined,
    .sets_confirm = tbx__tp_sets_confirm,
    .sets_drop_attempt = tbx__tp_sets_drop_attempt,
    .sets_registrations = tbx__tp_sets_registrations,
    .sets_count = tbx__tp_sets_count,
    .sets_attempt_rows = tbx__tp_sets_attempt_rows,
    .sets_summary = tbx__tp_sets_summary,
    .sets_list = tbx__tp_sets_list,
    .close = op_close,
};

struct tbx__pg *tbx_tokens_pg(tbx_tokens_t *t)
{
	return t && t->ops == &pg_ops ? backend(t)->pg : NULL;
}

int tbx__tokens_pg_joinable(tbx_tokens_t *t)
{
	return t && t->ops == &pg_ops && backend(t)->shared;
}

/* Statement names are unique per connection: a store on a shared
 * connection gets prefixes of its own, so that another opened on it
 * later never meets statements of the same name. */
static void prefix(tbx_tokens_pg_t *t, char *w, size_t size)
{
	static atomic_uint opened;

	if (!t->shared)
		tbx__strlcpy(w, "tok_", size);
	else
		snprintf(w, size, "T%u_",
			 atomic_fetch_add(&opened, 1) % 100000);
}

int tbx_tokens_pg_open(const char *conninfo, const char *schema,
		       struct tbx__pg *shared, const tbx__db_opts_t *opts,
		       tbx_tokens_t **out, char *errstr, size_t errstr_size)
{
	tbx__db_opts_t defaults;
	tbx_tokens_pg_t *t;
	char wp[8];
	int err;

	if (!out)
		return tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				   "no place for the token store");
	*out = NULL;
	if (!shared && (!conninfo || !*conninfo))
		return tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				   "no PostgreSQL connection string given");
	if ((err = tbx__pg_ident_check("tokens.schema", schema, errstr,
				       errstr_size)))
		return err;
	if (shared && shared->in_tx)
		return tbx__seterr(errstr, errstr_size, TBX_ESTATE,
				   "%s: the token store cannot be opened "
				   "inside a transaction of the shared "
				   "connection",
				   shared->where);
	if (!opts) {
		tbx__db_opts_init(&defaults);
		opts = &defaults;
	}
	if (!(t = calloc(1, sizeof(*t))))
		return tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				   "out of memory");
	t->base.ops = &pg_ops;
	t->issued_lo = 1; /* none yet */
	tbx__strlcpy(t->schema, schema, sizeof(t->schema));
	if (shared) {
		/* The service store's connection, and its session settings
		 * (lock_timeout, read-only). */
		t->pg = tbx__pg_ref(shared);
		t->shared = 1;
	} else if ((err = tbx__pg_connect(conninfo, &t->pg, errstr,
					  errstr_size))) {
		free(t);
		return err;
	}
	prefix(t, wp, sizeof(wp));
	if (tbx__pg_stmts_init(&t->stmts, t->pg, wp, sql, Q__COUNT, NULL,
			       schema) ||
	    tbx__tokens_pg_read_init(t) || tbx__tokens_pg_sets_init(t)) {
		err = tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				  "out of memory");
		goto fail;
	}
	if (!t->shared && (err = session(t, opts, errstr, errstr_size)))
		goto fail;
	if (opts->readonly || !opts->create)
		err = check_existing(t, opts, errstr, errstr_size);
	else
		err = migrate(t, errstr, errstr_size);
	/* A read-write opening of an older version migrates it, as an
	 * SQLite file's does, creating or not. */
	if (!err && !opts->readonly && t->version < TBX_PG_TOKENS_VERSION)
		err = migrate(t, errstr, errstr_size);
	if (err)
		goto fail;
	/* A read-write opening may take numbers: its own range first.  One
	 * that cannot (a grant missing: a worker's check of its grants
	 * names it next) takes no number until it has. */
	if (!opts->readonly && range_start(t)) {
		tbx__log(TBX_LOG_WARNING,
			 "postgresql: %s: schema %s: cannot start a range of "
			 "the token store's sequence, no number is taken "
			 "until it is: %s",
			 t->pg->where, t->schema, tbx__pg_errmsg(t->pg));
		t->range_pending = 1;
	}
	/* Read-only: no statement may write, as SQLite's query_only. */
	if (opts->readonly && !t->shared &&
	    (err = tbx__pg_set(t->pg, "default_transaction_read_only", "on"))) {
		open_fail(t, err, "cannot make the session read-only", errstr,
			  errstr_size);
		goto fail;
	}
	*out = &t->base;
	return TBX_OK;
fail:
	tbx__log(TBX_LOG_DEBUG, "%s",
		 errstr && errstr_size ? errstr : "open failed");
	op_close(&t->base);
	return err;
}
