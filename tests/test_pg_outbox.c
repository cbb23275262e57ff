/*
 * The service store's PostgreSQL backend (outbox/pg.c, outbox/pg_read.c)
 * against the server at $TBX_PG_URL: the schema and its version table,
 * concurrent openers, refusals, every operation of the interface and its
 * read-back, the locking of docs/architecture.md ("PostgreSQL: locking
 * without a file lock"), countdown faults and lost connections, and
 * passwords kept out of messages.  Each test uses schemas of its own.
 */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "fixture.h"
#include "outbox/outbox.h"
#include "outbox/pg_int.h"
#include "store/db.h"
#include "store/msgs.h"
#include "store/pg.h"

#define GRP "g1"

/* The interface's calls without wrappers of their own. */
#define fx_lock_ids(s, ...) ((s)->ops->lock_ids((s), __VA_ARGS__))
#define fx_relaxed(s, on)   ((s)->ops->relaxed((s), (on)))
#define fx_native(s, b)	    ((s)->ops->native((s), (b)))
#define fx_sexec(s, ...)    ((s)->ops->exec((s), __VA_ARGS__))

static PGconn *raw; /* the test's own connection, for checks */

/* A row function that counts the rows. */
static int count_row(void *arg, int ncols, const char *const *cols)
{
	(void)ncols;
	(void)cols;
	++*(int *)arg;
	return 0;
}

static void fx_setup(void)
{
	tbx__log_setup(TBX_LOG_ERR - 1, "test"); /* quiet: errors expected */
	raw = PQconnectdb(tt_pg_url());
	cr_assert_eq(PQstatus(raw), CONNECTION_OK, "%s", PQerrorMessage(raw));
	PQclear(PQexec(raw, "SET client_min_messages = warning"));
}

static void fx_teardown(void)
{
	tbx__fault_arm(0);
	tbx__fault_pg_conn_loss(0);
	PQfinish(raw);
	raw = NULL;
}

TestSuite(pg_outbox, .init = fx_setup, .fini = fx_teardown);

/* Runs @p sql (one parameter at most) on the test's connection. */
static void fx_exec(const char *sql, const char *param)
{
	PGresult *r =
	    PQexecParams(raw, sql, param ? 1 : 0, NULL, &param, NULL, NULL, 0);

	cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK ||
		      PQresultStatus(r) == PGRES_TUPLES_OK,
		  "%s: %s", sql, PQresultErrorMessage(r));
	PQclear(r);
}

/* 1 when @p sql fails (a constraint), 0 when it runs. */
static int fx_exec_err(const char *sql)
{
	PGresult *r = PQexec(raw, sql);
	int failed = PQresultStatus(r) != PGRES_COMMAND_OK;

	PQclear(r);
	return failed;
}

/* The first column of the first row of @p sql as an integer (-1: no
 * row). */
static int64_t fx_int(const char *sql, const char *param)
{
	PGresult *r =
	    PQexecParams(raw, sql, param ? 1 : 0, NULL, &param, NULL, NULL, 0);
	int64_t v = -1;

	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql,
		     PQresultErrorMessage(r));
	if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return v;
}

/* Same, text, into @p out. */
static void fx_text(const char *sql, const char *param, char *out, size_t size)
{
	PGresult *r =
	    PQexecParams(raw, sql, param ? 1 : 0, NULL, &param, NULL, NULL, 0);

	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", sql,
		     PQresultErrorMessage(r));
	cr_assert_gt(PQntuples(r), 0, "%s: no row", sql);
	tbx__strlcpy(out, PQgetvalue(r, 0, 0), size);
	PQclear(r);
}

/* @p text with its one "%s" replaced by @p schema. */
static const char *fx_q(const char *schema, const char *text)
{
	static char buf[4][512];
	static int slot;
	char *p = buf[slot++ & 3];
	const char *at = strstr(text, "%s");

	cr_assert(at);
	snprintf(p, sizeof(buf[0]), "%.*s%s%s", (int)(at - text), text, schema,
		 at + 2);
	return p;
}

static int fx_open_err(const char *schema, const tbx__db_opts_t *opts,
		       tbx_outbox_t **store, char *err, size_t size)
{
	*store = NULL;
	err[0] = '\0';
	return tbx_outbox_pg_open(tt_pg_url(), schema, opts, store, err, size);
}

static tbx_outbox_t *fx_open_opts(const char *schema,
				  const tbx__db_opts_t *opts)
{
	tbx_outbox_t *store;
	char err[512];

	cr_assert_eq(fx_open_err(schema, opts, &store, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_not_null(store);
	return store;
}

static tbx_outbox_t *fx_open(const char *schema)
{
	return fx_open_opts(schema, NULL);
}

static tbx_outbox_t *fx_new(char *schema, size_t size, const char *tag)
{
	tt_pg_schema(schema, size, tag);
	return fx_open(schema);
}

static void fx_drop(const char *schema)
{
	fx_exec(fx_q(schema, "DROP SCHEMA IF EXISTS \"%s\" CASCADE"), NULL);
}

/* Takes a schema made at this version back to version 5: without what
 * version 6 added (a given-up message's set, bit and partition). */
static void fx_back_to_v5(const char *schema)
{
	fx_exec(fx_q(schema, "ALTER TABLE \"%s\".tbx_undelivered DROP "
			     "COLUMN tpart, DROP COLUMN tbit, DROP COLUMN "
			     "tset"),
		NULL);
	fx_exec(fx_q(schema, "UPDATE \"%s\".tbx_schema_info SET version = 5"),
		NULL);
}

/* Takes a schema made at this version back to version 4: without what
 * version 5 added (when a dead letter was replayed). */
static void fx_back_to_v4(const char *schema)
{
	fx_back_to_v5(schema);
	fx_exec(fx_q(schema, "ALTER TABLE \"%s\".tbx_dead_letters DROP "
			     "COLUMN replayed_ms"),
		NULL);
	fx_exec(fx_q(schema, "UPDATE \"%s\".tbx_schema_info SET version = 4"),
		NULL);
}

/* Takes a schema made at this version back to version 3: without what
 * version 4 added (the batch rows). */
static void fx_back_to_v3(const char *schema)
{
	fx_back_to_v4(schema);
	fx_exec(fx_q(schema, "DROP TABLE \"%s\".tbx_cover_msg"), NULL);
	fx_exec(fx_q(schema, "DROP TABLE \"%s\".tbx_obatch"), NULL);
	fx_exec(fx_q(schema, "ALTER TABLE \"%s\".tbx_inflight DROP COLUMN "
			     "gen"),
		NULL);
	fx_exec(fx_q(schema, "UPDATE \"%s\".tbx_schema_info SET version = 3"),
		NULL);
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

/* Inserts a message-less row (grp, id) created at @p created_ms. */
static void fx_insert_at(tbx_outbox_t *store, const char *grp, const char *id,
			 int64_t created_ms)
{
	tbx__row_t row;

	fx_row(&row, id, 0);
	row.created_ms = created_ms;
	fx_insert(store, grp, &row);
	tbx__row_clear(&row);
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

/* Waits (scaled) until @p sql with @p param gives @p want. */
static int fx_wait_int(const char *sql, const char *param, int64_t want)
{
	int64_t until = tbx__mono_ms() + 30000LL * tt_time_factor();

	while (tbx__mono_ms() < until) {
		if (fx_int(sql, param) == want)
			return 1;
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	return 0;
}

/*
 * The schema.
 */

/* A version 1 schema gets the table of the token store its workers use
 * (version 2) when opened read-write, and what came after. */
Test(pg_outbox, a_version_1_schema_is_migrated_to_version_2)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "mig2");
	int version = 0;

	tbx_outbox_close(store);
	fx_back_to_v3(schema);
	fx_exec(fx_q(schema, "ALTER TABLE \"%s\".tbx_outbox DROP COLUMN "
			     "in_tbit"),
		NULL);
	fx_exec(fx_q(schema, "DROP TABLE \"%s\".tbx_bindings"), NULL);
	fx_exec(fx_q(schema, "UPDATE \"%s\".tbx_schema_info SET version = 1"),
		NULL);
	store = fx_open(schema);
	cr_assert_eq(tbx_outbox_schema(store, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_OUTBOX_VERSION);
	cr_assert_eq(tbx_outbox_binding_set(store, GRP, "id-1", "t", NULL),
		     TBX_OK);
	tbx_outbox_close(store);
	cr_assert_eq(fx_int(fx_q(schema, "SELECT count(*) FROM "
					 "\"%s\".tbx_bindings WHERE tokens_id "
					 "= 'id-1'"),
			    NULL),
		     1);
}

/* A version 2 schema's rows in flight keep their per-message tokens, and
 * the migrated schema (version 3) keeps a record's token set and bit
 * (in_tbit), within the bits a set may have. */
Test(pg_outbox, a_version_2_schema_gets_the_set_bit_of_a_row)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "mig3");
	tbx__row_t old, row, got;
	int version = 0;

	fx_row(&old, "m-old", 1);
	fx_insert(store, GRP, &old);
	tbx_outbox_close(store);
	fx_back_to_v3(schema);
	fx_exec(fx_q(schema, "ALTER TABLE \"%s\".tbx_outbox DROP COLUMN "
			     "in_tbit"),
		NULL);
	fx_exec(fx_q(schema, "UPDATE \"%s\".tbx_schema_info SET version = 2"),
		NULL);
	store = fx_open(schema);
	cr_assert_eq(tbx_outbox_schema(store, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_OUTBOX_VERSION);
	tbx__row_init(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m-old", &got), TBX_OK);
	fx_assert_rows_equal(&got, &old);
	cr_assert_eq(got.in_set, 0, "a per-message token stays one");
	tbx__row_clear(&got);

	fx_row(&row, "m-set", 2);
	row.in_set = 1;
	row.in_tbit = 65535;
	fx_insert(store, GRP, &row);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m-set", &got), TBX_OK);
	fx_assert_rows_equal(&got, &row);
	cr_assert_eq(got.in_tbit, 65535);
	tbx__row_clear(&got);
	cr_assert_eq(fx_int(fx_q(schema, "SELECT count(*) FROM "
					 "\"%s\".tbx_outbox WHERE in_tbit IS "
					 "NULL"),
			    NULL),
		     1);
	/* A bit beyond any set, or without a set, is refused. */
	row.in_tbit = 65536;
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &row), TBX_EINVAL);
	tbx_outbox_rollback(store);
	cr_assert_eq(
	    fx_exec_err(fx_q(schema, "UPDATE \"%s\".tbx_outbox SET in_token "
				     "= NULL WHERE msg_id = 'm-set'")),
	    1, "a bit needs its set");
	tbx__row_clear(&row);
	tbx__row_clear(&old);
	tbx_outbox_close(store);
	fx_drop(schema);
}

/* A batch row covering one record in the per-message format, with one
 * message; its blobs malloc'd into @p bufs (freed by fx_brow_free()). */
typedef struct fx_brow {
	tbx__obatch_t row;
	tbx__buf_t cover, wire;
	void *msgs;
	char msg_id[TBX_UUID_LEN + 1], token[TBX_UUID_LEN + 1];
} fx_brow_t;

static void fx_brow(fx_brow_t *b)
{
	tbx__cover_ent_t e = {TBX__COVER_HANDLED, "in", 3, 42, NULL,
			      TBX__REF_TOKEN,	  "",	0, 3};
	tbx__wire_ent_t w = {1, 0, 0};
	tbx__mfield_t f[TBX__MF_COUNT] = {0};
	char out_id[TBX_UUID_LEN + 1], err[200];

	memset(b, 0, sizeof(*b));
	tbx__uuid(b->row.row_id);
	tbx__uuid(b->msg_id);
	tbx__uuid(e.ref_id);
	tbx__uuid(out_id);
	e.msg_id = b->msg_id;
	f[TBX__MF_ID] = (tbx__mfield_t){out_id, TBX_UUID_LEN};
	f[TBX__MF_TOPIC] = (tbx__mfield_t){"out", 3};
	f[TBX__MF_TYPE] = (tbx__mfield_t){"Pong", 4};
	f[TBX__MF_PAYLOAD] = (tbx__mfield_t){"\0p\x80", 3};
	cr_assert_eq(tbx__cover_encode(&b->cover, &e, 1, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx__wire_encode(&b->wire, &w, 1), TBX_OK);
	cr_assert_eq(tbx__msgs_encode(f, 1, &b->msgs, &b->row.msgs_len),
		     TBX_OK);
	b->row.msgs = b->msgs;
	b->row.cover = b->cover.p;
	b->row.cover_len = b->cover.len;
	b->row.wire = b->wire.p;
	b->row.wire_len = b->wire.len;
	b->row.tokfmt = 2;
	b->row.created_ms = 1000;
	b->row.stuck_ms = -1;
}

static void fx_brow_free(fx_brow_t *b)
{
	tbx__buf_free(&b->cover);
	tbx__buf_free(&b->wire);
	free(b->msgs);
}

static int fx_count_rows(void *opaque, const tbx__obatch_t *row,
			 const tbx__cover_t *cover)
{
	(void)row;
	(void)cover;
	++*(int *)opaque;
	return 0;
}

/* A version 3 schema with rows in flight gets the batch rows (version
 * 4) in one step, recorded with it: its rows, crash markers and ingress
 * offsets are carried forward as they were, every partition's gen reads
 * 0, the new tables work, and the store opens again after the migration
 * (read-write and read-only: the version was recorded). */
Test(pg_outbox, a_version_3_schema_gets_the_batch_rows_and_keeps_its_rows)
{
	char schema[64], grp_ver[32];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "mig4");
	tbx__row_t old, tok, got;
	tbx__inflight_t f = {10, 20, 1, 30, 1, 10, 2}, fgot;
	tbx__db_opts_t ro;
	fx_brow_t b;
	int32_t parts[2] = {3, 4};
	int64_t gens[2] = {-1, -1}, next = -1;
	const char *ids[1];
	char rows[1][TBX_UUID_LEN + 1];
	int version = 0, found = 0, n = 0;

	fx_row(&old, "m-old", 2);
	fx_insert(store, GRP, &old);
	fx_row(&tok, "m-tok", 1);
	fx_insert(store, GRP, &tok);
	fx_tokened(&tok, 9);
	cr_assert_eq(fx_set_attempt(store, &tok), 1);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_put(store, GRP, "in", 3, &f), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(store, GRP, "in", 3, 77), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx_outbox_close(store);
	fx_back_to_v3(schema);
	cr_assert_eq(fx_int("SELECT (to_regclass($1) IS NULL)::int",
			    fx_q(schema, "\"%s\".tbx_obatch")),
		     1);

	store = fx_open(schema);
	cr_assert_eq(tbx_outbox_schema(store, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_OUTBOX_VERSION);
	fx_text(fx_q(schema, "SELECT kind || ' ' || version FROM "
			     "\"%s\".tbx_schema_info"),
		NULL, grp_ver, sizeof(grp_ver));
	cr_assert_str_eq(grp_ver, "service 6", "the migration is recorded");
	/* What version 3 held, as it was. */
	tbx__row_init(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m-old", &got), TBX_OK);
	fx_assert_rows_equal(&got, &old);
	tbx__row_clear(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m-tok", &got), TBX_OK);
	fx_assert_rows_equal(&got, &tok);
	tbx__row_clear(&got);
	cr_assert_eq(
	    tbx_outbox_inflight_get(store, GRP, "in", 3, &fgot, &found),
	    TBX_OK);
	cr_assert(found && fgot.first == 10 && fgot.last == 20 &&
		  fgot.crashes == 1 && fgot.suspect_until == 30 &&
		  fgot.lone == 1 && fgot.count_offset == 10 &&
		  fgot.retries == 2);
	cr_assert_eq(tbx_outbox_ingress_get(store, GRP, "in", 3, &next),
		     TBX_OK);
	cr_assert_eq(next, 77);
	/* gen: 0 for the partition carried forward and for a new one. */
	cr_assert_eq(tbx_outbox_gens_get(store, GRP, "in", parts, 2, gens),
		     TBX_OK);
	cr_assert(gens[0] == 0 && gens[1] == 0);
	/* The batch rows work. */
	fx_brow(&b);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_obatch_insert(store, GRP, &b.row), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_bump(store, GRP, "in", parts, 2, gens),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert(gens[0] == 1 && gens[1] == 1);
	tbx_outbox_close(store);

	/* Opened again: nothing to migrate, everything there. */
	store = fx_open(schema);
	cr_assert_eq(tbx_outbox_schema(store, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_OUTBOX_VERSION);
	cr_assert_eq(tbx_outbox_obatch_load(store, GRP, fx_count_rows, &n),
		     TBX_OK);
	cr_assert_eq(n, 1);
	ids[0] = b.msg_id;
	cr_assert_eq(tbx_outbox_cover_msg_find(store, GRP, ids, 1, rows),
		     TBX_OK);
	cr_assert_str_eq(rows[0], b.row.row_id);
	cr_assert_eq(
	    tbx_outbox_inflight_get(store, GRP, "in", 3, &fgot, &found),
	    TBX_OK);
	cr_assert(found && fgot.first == 10 && fgot.retries == 2,
		  "the bump left G's marker as it was");
	tbx_outbox_close(store);
	tbx__db_opts_init(&ro);
	ro.readonly = 1;
	store = fx_open_opts(schema, &ro);
	cr_assert_eq(tbx_outbox_gens_get(store, GRP, "in", parts, 2, gens),
		     TBX_OK);
	cr_assert(gens[0] == 1 && gens[1] == 1);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m-old", &got), TBX_OK);
	fx_assert_rows_equal(&got, &old);
	tbx__row_clear(&got);
	tbx_outbox_close(store);
	fx_brow_free(&b);
	tbx__row_clear(&old);
	tbx__row_clear(&tok);
	fx_drop(schema);
}

/* A migration step that fails leaves the schema at version 3, whole:
 * no table of version 4, no gen, the version unchanged, the rows there;
 * once what stood in its way is gone, the next open migrates. */
Test(pg_outbox, a_failed_migration_to_version_4_leaves_version_3_whole)
{
	char schema[64], err[512];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "mig4f");
	tbx__row_t old;
	int version = 0;

	fx_row(&old, "m-old", 1);
	fx_insert(store, GRP, &old);
	tbx_outbox_close(store);
	fx_back_to_v3(schema);
	/* A table of that name made by someone else. */
	fx_exec(fx_q(schema, "CREATE TABLE \"%s\".tbx_cover_msg (x int)"),
		NULL);
	cr_assert_eq(fx_open_err(schema, NULL, &store, err, sizeof(err)),
		     TBX_ESTORE, "%s", err);
	cr_assert_null(store);
	cr_assert(strstr(err, "migration to version 4 failed"), "%s", err);
	cr_assert_eq(fx_int(fx_q(schema, "SELECT version FROM "
					 "\"%s\".tbx_schema_info"),
			    NULL),
		     3);
	cr_assert_eq(fx_int("SELECT (to_regclass($1) IS NULL)::int",
			    fx_q(schema, "\"%s\".tbx_obatch")),
		     1, "the step's first table is rolled back with it");
	cr_assert_eq(fx_int("SELECT count(*) FROM information_schema.columns "
			    "WHERE table_schema = $1 AND table_name = "
			    "'tbx_inflight' AND column_name = 'gen'",
			    schema),
		     0);
	cr_assert_eq(fx_int(fx_q(schema, "SELECT count(*) FROM "
					 "\"%s\".tbx_outbox"),
			    NULL),
		     1);
	fx_exec(fx_q(schema, "DROP TABLE \"%s\".tbx_cover_msg"), NULL);
	store = fx_open(schema);
	cr_assert_eq(tbx_outbox_schema(store, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_OUTBOX_VERSION);
	tbx_outbox_close(store);
	tbx__row_clear(&old);
	fx_drop(schema);
}

typedef struct bumper {
	tbx_outbox_t *store;
	int32_t part;
	int64_t gen;
	int err;
} bumper_t;

static void *bump_thread(void *arg)
{
	bumper_t *b = arg;

	b->err =
	    tbx_outbox_gens_bump(b->store, GRP, "in", &b->part, 1, &b->gen);
	return NULL;
}

/*
 * Two workers bump gen of one partition at once (a zombie and the new
 * owner): the second one's upsert waits for the first one's lock, then
 * adds to the value it committed, so both bumps count -- on a partition
 * without a row (both insert it) and on one with a row.
 */
Test(pg_outbox, a_concurrent_gen_bump_waits_and_then_counts)
{
	char schema[64], pid[16];
	tbx_outbox_t *a = fx_new(schema, sizeof(schema), "genrace");
	tbx_outbox_t *b;
	tbx__db_opts_t opts;
	int32_t part = 5;
	int64_t gen = -1;

	tbx__db_opts_init(&opts);
	opts.busy_timeout_ms = 60000 * tt_time_factor();
	b = fx_open_opts(schema, &opts);
	for (int round = 0; round < 2; round++) {
		bumper_t r = {b, part, -1, -1};
		pthread_t th;

		cr_assert_eq(tbx_outbox_begin(a), TBX_OK);
		cr_assert_eq(tbx_outbox_gens_bump(a, GRP, "in", &part, 1, &gen),
			     TBX_OK);
		cr_assert_eq(gen, 2 * round + 1);
		cr_assert_eq(tbx_outbox_begin(b), TBX_OK);
		snprintf(pid, sizeof(pid), "%d",
			 PQbackendPID(fx_native(b, TBX_BACKEND_PG)));
		cr_assert_eq(pthread_create(&th, NULL, bump_thread, &r), 0);
		cr_assert(fx_wait_int("SELECT count(*) FROM pg_locks WHERE "
				      "pid = $1::int AND NOT granted",
				      pid, 1),
			  "round %d: the second bump waits for the first "
			  "one's lock",
			  round);
		cr_assert_eq(tbx_outbox_commit(a), TBX_OK);
		pthread_join(th, NULL);
		cr_assert_eq(r.err, TBX_OK);
		cr_assert_eq(r.gen, 2 * round + 2, "round %d: both count",
			     round);
		cr_assert_eq(tbx_outbox_commit(b), TBX_OK);
	}
	cr_assert_eq(tbx_outbox_gens_get(a, GRP, "in", &part, 1, &gen), TBX_OK);
	cr_assert_eq(gen, 4);
	tbx_outbox_close(b);
	tbx_outbox_close(a);
	fx_drop(schema);
}

static void *marker_delete_thread(void *arg)
{
	bumper_t *b = arg;

	/* In a transaction the delete is sent with the next statement that
	 * waits: the commit. */
	b->err = tbx_outbox_inflight_delete(b->store, GRP, "in", b->part);
	if (!b->err)
		b->err = tbx_outbox_commit(b->store);
	return NULL;
}

/*
 * The marker's delete meets a bump of its partition (a zombie's A and
 * the owner's G): the delete of a row with gen 0 waits for the bump's
 * lock, then finds gen 1 and leaves the row, and its marker is cleared
 * all the same -- gen never goes back and no marker stays behind.
 */
Test(pg_outbox, a_marker_delete_waiting_for_a_bump_keeps_the_gen)
{
	char schema[64], pid[16];
	tbx_outbox_t *a = fx_new(schema, sizeof(schema), "delrace");
	tbx_outbox_t *b;
	tbx__db_opts_t opts;
	tbx__inflight_t f = {10, 20, 1, 30, 1, 10, 2}, g;
	int32_t part = 5;
	int64_t gen = -1;
	int found = 0;
	bumper_t r;
	pthread_t th;

	tbx__db_opts_init(&opts);
	opts.busy_timeout_ms = 60000 * tt_time_factor();
	b = fx_open_opts(schema, &opts);
	r = (bumper_t){b, part, -1, -1};
	cr_assert_eq(tbx_outbox_begin(a), TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_put(a, GRP, "in", part, &f), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(a), TBX_OK);
	cr_assert_eq(tbx_outbox_begin(a), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_bump(a, GRP, "in", &part, 1, &gen),
		     TBX_OK);
	cr_assert_eq(gen, 1);
	cr_assert_eq(tbx_outbox_begin(b), TBX_OK);
	snprintf(pid, sizeof(pid), "%d",
		 PQbackendPID(fx_native(b, TBX_BACKEND_PG)));
	cr_assert_eq(pthread_create(&th, NULL, marker_delete_thread, &r), 0);
	cr_assert(fx_wait_int("SELECT count(*) FROM pg_locks WHERE pid = "
			      "$1::int AND NOT granted",
			      pid, 1),
		  "the delete waits for the bump's lock");
	cr_assert_eq(tbx_outbox_commit(a), TBX_OK);
	pthread_join(th, NULL);
	cr_assert_eq(r.err, TBX_OK);
	cr_assert_eq(tbx_outbox_gens_get(a, GRP, "in", &part, 1, &gen), TBX_OK);
	cr_assert_eq(gen, 1);
	cr_assert_eq(tbx_outbox_inflight_get(a, GRP, "in", part, &g, &found),
		     TBX_OK);
	cr_assert_eq(found, 1);
	cr_assert(g.first == -1 && g.last == -1 && g.crashes == 0 &&
		      g.suspect_until == -1 && g.lone == 0 &&
		      g.count_offset == -1 && g.retries == 0,
		  "the marker is cleared: %lld..%lld suspect %lld",
		  (long long)g.first, (long long)g.last,
		  (long long)g.suspect_until);
	tbx_outbox_close(b);
	tbx_outbox_close(a);
	fx_drop(schema);
}

Test(pg_outbox, open_creates_the_schema_and_a_second_open_finds_it)
{
	char schema[64], id1[64], id2[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "create");
	int version = 0;

	cr_assert_eq(tbx_outbox_schema(store, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_OUTBOX_VERSION);
	cr_assert_eq(fx_int("SELECT count(*) FROM pg_tables WHERE schemaname "
			    "= $1",
			    schema),
		     10, "tbx_schema_info and the nine tables of S");
	fx_text(fx_q(schema, "SELECT kind || ' ' || version FROM "
			     "\"%s\".tbx_schema_info WHERE id = 1"),
		NULL, id1, sizeof(id1));
	cr_assert_str_eq(id1, "service 6");
	fx_text(fx_q(schema, "SELECT store_id FROM \"%s\".tbx_schema_info"),
		NULL, id1, sizeof(id1));
	cr_assert(tbx__is_uuid(id1, strlen(id1)), "%s", id1);
	cr_assert_gt(fx_int(fx_q(schema, "SELECT created_ms FROM "
					 "\"%s\".tbx_schema_info"),
			    NULL),
		     1600000000000LL);
	tbx_outbox_close(store);

	store = fx_open(schema);
	fx_text(fx_q(schema, "SELECT store_id FROM \"%s\".tbx_schema_info"),
		NULL, id2, sizeof(id2));
	cr_assert_str_eq(id1, id2, "the identity is made once");
	cr_assert_eq(
	    fx_int(fx_q(schema, "SELECT count(*) FROM \"%s\".tbx_schema_info"),
		   NULL),
	    1);
	tbx_outbox_close(store);
	fx_drop(schema);
}

typedef struct opener {
	const char *schema;
	int err;
	char errstr[512];
} opener_t;

static void *open_thread(void *arg)
{
	opener_t *o = arg;
	tbx_outbox_t *store = NULL;

	o->err = tbx_outbox_pg_open(tt_pg_url(), o->schema, NULL, &store,
				    o->errstr, sizeof(o->errstr));
	tbx_outbox_close(store);
	return NULL;
}

/*
 * Every opener of a new schema waits for the migration lock (held here
 * until all of them wait on it), then creates or finds the tables: one
 * creates, the others find them made, none fails.
 */
Test(pg_outbox, openers_of_one_new_schema_at_once_wait_for_each_other)
{
	enum { N = 4 };
	char schema[64];
	pthread_t th[N];
	opener_t o[N];

	tt_pg_schema(schema, sizeof(schema), "race");
	fx_exec("SELECT pg_advisory_lock(1413634048, hashtext($1))", schema);
	for (int i = 0; i < N; i++) {
		memset(&o[i], 0, sizeof(o[i]));
		o[i].schema = schema;
		cr_assert_eq(pthread_create(&th[i], NULL, open_thread, &o[i]),
			     0);
	}
	cr_assert(fx_wait_int("SELECT count(*) FROM pg_locks WHERE locktype = "
			      "'advisory' AND classid = 1413634048 AND objid "
			      "= hashtext($1)::oid AND NOT granted",
			      schema, N),
		  "every opener waits for the schema's migration lock");
	fx_exec("SELECT pg_advisory_unlock(1413634048, hashtext($1))", schema);
	for (int i = 0; i < N; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(o[i].err, TBX_OK, "opener %d: %s", i, o[i].errstr);
	}
	cr_assert_eq(
	    fx_int(fx_q(schema, "SELECT count(*) FROM \"%s\".tbx_schema_info"),
		   NULL),
	    1);
	fx_drop(schema);
}

Test(pg_outbox, readonly_or_create_off_on_a_missing_schema_is_enoent)
{
	char schema[64], err[512];
	tbx__db_opts_t opts;
	tbx_outbox_t *store;

	tt_pg_schema(schema, sizeof(schema), "ro");
	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	cr_assert_eq(fx_open_err(schema, &opts, &store, err, sizeof(err)),
		     TBX_ENOENT);
	cr_assert_null(store);
	cr_assert(strstr(err, schema), "%s", err);
	opts.readonly = 0;
	opts.create = 0;
	cr_assert_eq(fx_open_err(schema, &opts, &store, err, sizeof(err)),
		     TBX_ENOENT);
	cr_assert_eq(fx_int("SELECT count(*) FROM pg_namespace WHERE nspname "
			    "= $1",
			    schema),
		     0, "nothing was created");
	/* A schema that exists without the tables: still none. */
	fx_exec(fx_q(schema, "CREATE SCHEMA \"%s\""), NULL);
	opts.readonly = 1;
	cr_assert_eq(fx_open_err(schema, &opts, &store, err, sizeof(err)),
		     TBX_ENOENT);
	fx_drop(schema);
}

Test(pg_outbox, a_readonly_open_reads_and_never_writes)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "rw");
	tbx__db_opts_t opts;
	tbx__row_t row;
	int64_t n = -1;

	fx_insert_at(store, GRP, "m1", 1000);
	tbx_outbox_close(store);
	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	store = fx_open_opts(schema, &opts);
	cr_assert_eq(tbx_outbox_count(store, GRP, &n), TBX_OK);
	cr_assert_eq(n, 1);
	fx_row(&row, "m2", 0);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	/* The INSERT goes with the commit, which it fails. */
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &row), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_ESTORE);
	cr_assert(strstr(tbx_outbox_errmsg(store), "read-only"), "%s",
		  tbx_outbox_errmsg(store));
	cr_assert_eq(tbx_outbox_count(store, GRP, &n), TBX_OK);
	cr_assert_eq(n, 1, "nothing written");
	tbx__row_clear(&row);
	tbx_outbox_close(store);
	fx_drop(schema);
}

Test(pg_outbox, a_schema_of_another_kind_or_a_newer_version_is_refused)
{
	char schema[64], err[512];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "kind");
	tbx__db_opts_t ro;

	tbx_outbox_close(store);
	tbx__db_opts_init(&ro);
	ro.readonly = 1;
	fx_exec(fx_q(schema, "UPDATE \"%s\".tbx_schema_info SET kind = "
			     "'tokens'"),
		NULL);
	cr_assert_eq(fx_open_err(schema, NULL, &store, err, sizeof(err)),
		     TBX_ENOTDB);
	cr_assert(strstr(err, "'tokens'"), "%s", err);
	cr_assert_eq(fx_open_err(schema, &ro, &store, err, sizeof(err)),
		     TBX_ENOTDB);

	fx_exec(fx_q(schema, "UPDATE \"%s\".tbx_schema_info SET kind = "
			     "'service', version = 99"),
		NULL);
	cr_assert_eq(fx_open_err(schema, NULL, &store, err, sizeof(err)),
		     TBX_ESCHEMA);
	cr_assert(strstr(err, "newer"), "%s", err);
	cr_assert_eq(fx_open_err(schema, &ro, &store, err, sizeof(err)),
		     TBX_ESCHEMA);
	cr_assert_null(store);
	/* Left as it was. */
	cr_assert_eq(fx_int(fx_q(schema, "SELECT version FROM "
					 "\"%s\".tbx_schema_info"),
			    NULL),
		     99);

	/* Tables of an outbox that no version table describes. */
	fx_exec(fx_q(schema, "DROP TABLE \"%s\".tbx_schema_info"), NULL);
	cr_assert_eq(fx_open_err(schema, NULL, &store, err, sizeof(err)),
		     TBX_ENOTDB);
	fx_drop(schema);
}

Test(pg_outbox, a_bad_schema_name_is_a_configuration_error)
{
	char err[512];
	tbx_outbox_t *store;

	cr_assert_eq(fx_open_err("x\"; DROP", NULL, &store, err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "store.schema"), "%s", err);
	cr_assert_eq(fx_open_err("pg_catalog", NULL, &store, err, sizeof(err)),
		     TBX_ECONF);
}

Test(pg_outbox, a_schema_name_with_dots_and_dashes_is_quoted)
{
	char base[64], schema[80];
	tbx_outbox_t *store;
	int64_t n = -1;

	tt_pg_schema(base, sizeof(base), "q");
	snprintf(schema, sizeof(schema), "Grp-1.%s", base);
	store = fx_open(schema);
	fx_insert_at(store, GRP, "m1", 1000);
	cr_assert_eq(tbx_outbox_count(store, NULL, &n), TBX_OK);
	cr_assert_eq(n, 1);
	cr_assert_eq(fx_int(fx_q(schema, "SELECT count(*) FROM "
					 "\"%s\".tbx_outbox"),
			    NULL),
		     1, "in the schema of that exact name");
	tbx_outbox_close(store);
	fx_drop(schema);
}

/*
 * Outbox rows.
 */

Test(pg_outbox, row_round_trips_with_binary_and_null_fields)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "row");
	tbx_header_t hdrs[] = {{"trace", "a\0b", 3}, {"nul", NULL, 0}};
	char attempt[TBX_UUID_LEN + 1] = "x";
	tbx__row_t row, got;
	void *blob;
	size_t blob_len;
	int found = 0;

	fx_row(&row, "m1", 1);
	row.kind = TBX_ROW_DEAD_LETTER;
	row.error = tbx__strdup("bad \"input\"; DROP TABLE tbx_outbox; --");
	cr_assert_eq(tbx__hdrs_encode(hdrs, 2, &blob, &blob_len), TBX_OK);
	cr_assert_eq(
	    tbx__row_add(&row, "out", "T2", NULL, 0, NULL, 0, blob, blob_len),
	    TBX_OK);
	cr_assert_eq(tbx__row_add(&row, "out2", "T3", "", 0, "", 0, NULL, 0),
		     TBX_OK);
	free(blob);
	fx_insert(store, GRP, &row);

	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m1", &found, attempt),
		     TBX_OK);
	cr_assert_eq(found, 1);
	cr_assert_str_eq(attempt, "");
	cr_assert_eq(tbx_outbox_row_find(store, "g2", "m1", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 0, "rows are per group");
	tbx__row_init(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m1", &got), TBX_OK);
	fx_assert_rows_equal(&got, &row);
	cr_assert_null(got.msgs[1].key);
	cr_assert_null(got.msgs[1].payload);
	cr_assert_not_null(got.msgs[2].key);
	cr_assert_eq(got.msgs[2].key_len, 0);
	cr_assert_not_null(got.msgs[2].payload);
	/* Reloading in place, from the row's own id. */
	cr_assert_eq(tbx_outbox_row_load(store, GRP, got.msg_id, &got), TBX_OK);
	fx_assert_rows_equal(&got, &row);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "nope", &got), TBX_ENOENT);
	cr_assert_eq(got.msg_cnt, 0);
	tbx__row_clear(&got);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
	fx_drop(schema);
}

/* The row's INSERT goes with the transaction's next statement
 * (store/pg.h): a row there already fails that statement and every later
 * one with TBX_EEXIST, and the commit rolls back. */
Test(pg_outbox, inserting_an_existing_row_fails_the_txn_with_eexist)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "exist");
	tbx__row_t row, other, got;
	int64_t n = 0;
	int found = 0;

	fx_row(&row, "m1", 1);
	fx_insert(store, GRP, &row);
	fx_row(&other, "m1", 2);
	fx_row(&got, "m2", 0);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &got), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &other), TBX_OK);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m2", &found, NULL),
		     TBX_EEXIST);
	cr_assert(strstr(tbx_outbox_errmsg(store), "outbox row m1"), "%s",
		  tbx_outbox_errmsg(store));
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &got), TBX_EEXIST);
	cr_assert_eq(tbx_outbox_commit(store), TBX_EEXIST);
	cr_assert_eq(tbx_outbox_count(store, GRP, &n), TBX_OK);
	cr_assert_eq(n, 1, "m2 rolled back with it");
	/* And at the commit, when no statement came after it. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &other), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_EEXIST);
	/* The transaction is over: the next one works. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &got), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_count(store, GRP, &n), TBX_OK);
	cr_assert_eq(n, 2);
	tbx__row_clear(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m1", &got), TBX_OK);
	fx_assert_rows_equal(&got, &row); /* the first one, unchanged */
	tbx__row_clear(&got);
	tbx__row_clear(&other);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
	fx_drop(schema);
}

Test(pg_outbox, first_recorded_attempt_wins_and_a_later_one_loses)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "attempt");
	char attempt[TBX_UUID_LEN + 1];
	tbx__row_t row, second, got;
	int found, won = -1;

	fx_row(&row, "m1", 2);
	fx_insert(store, GRP, &row);
	second = row; /* shallow: same messages, another attempt */
	fx_tokened(&row, 7);
	cr_assert_eq(fx_set_attempt(store, &row), 1);
	tbx__uuid(second.attempt);
	second.mint_seq = 8;
	cr_assert_eq(fx_set_attempt(store, &second), 0);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m1", &found, attempt),
		     TBX_OK);
	cr_assert_str_eq(attempt, row.attempt);
	tbx__row_init(&got);
	cr_assert_eq(tbx_outbox_row_load(store, GRP, "m1", &got), TBX_OK);
	fx_assert_rows_equal(&got, &row);
	cr_assert(tbx_outbox_row_check(&got));
	tbx__row_clear(&got);

	/* A row that differs from the stored one is refused. */
	fx_row(&got, "m2", 1);
	fx_insert(store, GRP, &got);
	tbx__row_clear(&got);
	fx_row(&got, "m2", 1); /* another message id */
	fx_tokened(&got, 9);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_set_attempt(store, GRP, &got, &won),
		     TBX_ESTATE);
	tbx_outbox_rollback(store);

	/* Gone: loses. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_delete(store, GRP, "m2"), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(fx_set_attempt(store, &got), 0);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "m2", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 0);
	tbx__row_clear(&got);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
	fx_drop(schema);
}

/* The batch forms: rows_find answers per id (found, attempt) for ids in
 * any order with repeats and absent ones, of one group only, and
 * rows_delete removes the rows named and no other -- each in one
 * statement (the countdown fault counts the calls). */
Test(pg_outbox, rows_find_and_rows_delete_are_one_statement_per_batch)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "rowsfind");
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
	tbx__fault_arm(2); /* a second call would fail */
	cr_assert_eq(tbx_outbox_rows_find(store, GRP, ids, 6, hits), TBX_OK);
	cr_assert_eq(tbx_outbox_rows_find(store, GRP, ids, 0, NULL), TBX_OK);
	cr_assert_not(tbx__fault_fired(), "one statement for six ids");
	tbx__fault_arm(0);
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
	tbx__fault_arm(2);
	cr_assert_eq(tbx_outbox_rows_delete(store, GRP, ids + 1, 4), TBX_OK);
	cr_assert_eq(tbx_outbox_rows_delete(store, GRP, ids, 0), TBX_OK);
	cr_assert_not(tbx__fault_fired(), "one statement for four ids");
	tbx__fault_arm(0);
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
	fx_drop(schema);
}

typedef struct recorder {
	tbx_outbox_t *store;
	const tbx__row_t *row;
	int err, won;
} recorder_t;

static void *record_thread(void *arg)
{
	recorder_t *r = arg;

	r->err = tbx_outbox_row_set_attempt(r->store, GRP, r->row, &r->won);
	return NULL;
}

/*
 * Two workers record an attempt for one row at once: the second one's
 * UPDATE waits for the first one's row lock, then finds the attempt set
 * (READ COMMITTED re-reads the row) and changes nothing.
 */
Test(pg_outbox, a_concurrent_second_attempt_waits_and_then_loses)
{
	char schema[64], pid[16], attempt[TBX_UUID_LEN + 1];
	tbx_outbox_t *a = fx_new(schema, sizeof(schema), "brace");
	tbx_outbox_t *b;
	tbx__db_opts_t opts;
	tbx__row_t row, second;
	recorder_t r;
	pthread_t th;
	int won = -1, found;

	tbx__db_opts_init(&opts);
	opts.busy_timeout_ms = 60000 * tt_time_factor();
	b = fx_open_opts(schema, &opts);
	fx_row(&row, "m1", 2);
	fx_insert(a, GRP, &row);
	second = row; /* shallow: the same messages */
	fx_tokened(&row, 7);
	tbx__uuid(second.attempt);
	second.mint_seq = 8;

	cr_assert_eq(tbx_outbox_begin(a), TBX_OK);
	cr_assert_eq(tbx_outbox_row_set_attempt(a, GRP, &row, &won), TBX_OK);
	cr_assert_eq(won, 1);
	cr_assert_eq(tbx_outbox_begin(b), TBX_OK);
	snprintf(pid, sizeof(pid), "%d",
		 PQbackendPID(fx_native(b, TBX_BACKEND_PG)));
	r = (recorder_t){b, &second, -1, -1};
	cr_assert_eq(pthread_create(&th, NULL, record_thread, &r), 0);
	cr_assert(fx_wait_int("SELECT count(*) FROM pg_locks WHERE pid = "
			      "$1::int AND NOT granted",
			      pid, 1),
		  "the second record waits for the first one's row lock");
	cr_assert_eq(tbx_outbox_commit(a), TBX_OK);
	pthread_join(th, NULL);
	cr_assert_eq(r.err, TBX_OK);
	cr_assert_eq(r.won, 0, "the second attempt lost");
	cr_assert_eq(tbx_outbox_commit(b), TBX_OK);
	cr_assert_eq(tbx_outbox_row_find(a, GRP, "m1", &found, attempt),
		     TBX_OK);
	cr_assert_str_eq(attempt, row.attempt, "the first attempt stays");
	tbx__row_clear(&row);
	tbx_outbox_close(b);
	tbx_outbox_close(a);
	fx_drop(schema);
}

Test(pg_outbox, undo_discards_only_the_messages_savepoint)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "undo");
	tbx__row_t a, b, c;
	int found;

	fx_row(&a, "a", 1);
	fx_row(&b, "b", 1);
	fx_row(&c, "c", 1);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &a), TBX_OK);
	cr_assert_eq(tbx_outbox_savepoint(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &b), TBX_OK);
	cr_assert_eq(tbx_outbox_undo(store), TBX_OK);
	cr_assert_eq(tbx_outbox_savepoint(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &c), TBX_OK);
	cr_assert_eq(tbx_outbox_release(store), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx_outbox_row_find(store, GRP, "a", &found, NULL);
	cr_assert_eq(found, 1);
	tbx_outbox_row_find(store, GRP, "b", &found, NULL);
	cr_assert_eq(found, 0, "undone");
	tbx_outbox_row_find(store, GRP, "c", &found, NULL);
	cr_assert_eq(found, 1);

	/* The savepoint sent (a statement ran after it) and inserts queued
	 * on both sides of it: the undo drops those after it, on the server
	 * and in the queue alike. */
	tbx__row_clear(&a);
	tbx__row_clear(&b);
	tbx__row_clear(&c);
	fx_row(&a, "a2", 1);
	fx_row(&b, "b2", 1);
	fx_row(&c, "c2", 1);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &a), TBX_OK);
	cr_assert_eq(tbx_outbox_savepoint(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &b), TBX_OK);
	cr_assert_eq(tbx_outbox_row_find(store, GRP, "b2", &found, NULL),
		     TBX_OK);
	cr_assert_eq(found, 1, "sent with the find, seen by it");
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &c), TBX_OK);
	cr_assert_eq(tbx_outbox_undo(store), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx_outbox_row_find(store, GRP, "a2", &found, NULL);
	cr_assert_eq(found, 1, "before the savepoint");
	tbx_outbox_row_find(store, GRP, "b2", &found, NULL);
	cr_assert_eq(found, 0, "sent, then rolled back");
	tbx_outbox_row_find(store, GRP, "c2", &found, NULL);
	cr_assert_eq(found, 0, "queued, then dropped");
	tbx__row_clear(&b);
	fx_row(&b, "b", 1);

	/* A rollback takes everything since begin. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, GRP, &b), TBX_OK);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK);
	tbx_outbox_row_find(store, GRP, "b", &found, NULL);
	cr_assert_eq(found, 0);
	cr_assert_eq(tbx_outbox_rollback(store), TBX_OK, "outside a txn");
	tbx__row_clear(&a);
	tbx__row_clear(&b);
	tbx__row_clear(&c);
	tbx_outbox_close(store);
	fx_drop(schema);
}

/*
 * Ingress offsets, crash markers, failures, alarms.
 */

static int str_cb(void *opaque, const char *s);

static int count_ingress(void *opaque, const tbx__ingress_t *g)
{
	char *out = opaque;
	size_t len = strlen(out);

	snprintf(out + len, 256 - len, "%s/%s/%lld=%lld;", g->grp, g->topic,
		 (long long)g->partition, (long long)g->next_offset);
	return 0;
}

Test(pg_outbox, ingress_offsets_are_upserted_and_locked_inside_a_txn)
{
	char schema[64], list[256] = "";
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "ingress");
	tbx_outbox_t *other;
	tbx__db_opts_t opts;
	int64_t next = 0;

	cr_assert_eq(tbx_outbox_ingress_get(store, GRP, "t", 0, &next), TBX_OK);
	cr_assert_eq(next, -1);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(store, GRP, "t", 0, 5), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(store, GRP, "t", 0, 9), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(store, "g0", "t", 1, 3), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_get(store, GRP, "t", 0, &next), TBX_OK);
	cr_assert_eq(next, 9);

	/* Inside a transaction, a partition without an offset reads "none"
	 * and is locked as one with: another worker waits. */
	tbx__db_opts_init(&opts);
	opts.busy_timeout_ms = 50;
	other = fx_open_opts(schema, &opts);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_get(store, GRP, "t", 2, &next), TBX_OK);
	cr_assert_eq(next, -1);
	cr_assert_eq(tbx_outbox_ingress_get(store, GRP, "t", 0, &next), TBX_OK);
	cr_assert_eq(next, 9);
	cr_assert_eq(tbx_outbox_begin(other), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_get(other, GRP, "t", 2, &next),
		     TBX_EBUSY);
	tbx_outbox_rollback(other);
	cr_assert_eq(tbx_outbox_begin(other), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_get(other, GRP, "t", 0, &next),
		     TBX_EBUSY);
	tbx_outbox_rollback(other);
	cr_assert_eq(tbx_outbox_ingress_set(store, GRP, "t", 0, 10), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_begin(other), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_get(other, GRP, "t", 0, &next), TBX_OK);
	cr_assert_eq(next, 10, "the committed offset, once the lock is free");
	cr_assert_eq(tbx_outbox_ingress_get(other, GRP, "t", 2, &next), TBX_OK);
	cr_assert_eq(next, -1);
	cr_assert_eq(tbx_outbox_commit(other), TBX_OK);

	/* A group whose only row is a partition locked without an offset. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_get(store, "gx", "t", 0, &next),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_get(store, "gx", "t", 0, &next),
		     TBX_OK);
	cr_assert_eq(next, -1, "still none");

	/* Listed by group, topic, partition; the "none" rows are not. */
	cr_assert_eq(tbx_outbox_ingress_list(store, count_ingress, list),
		     TBX_OK);
	cr_assert_str_eq(list, "g0/t/1=3;g1/t/0=10;");
	list[0] = '\0';
	cr_assert_eq(tbx_outbox_groups(store, str_cb, list), TBX_OK);
	cr_assert_str_eq(list, "g0;g1;", "nor their groups");
	tbx_outbox_close(other);
	tbx_outbox_close(store);
	fx_drop(schema);
}

Test(pg_outbox, inflight_markers_are_put_read_released_and_deleted)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "inflight");
	tbx__inflight_t f = {10, 19, 2, 30, 1, 10, 4}, g;
	int found = -1;

	cr_assert_eq(tbx_outbox_inflight_get(store, GRP, "t", 0, &g, &found),
		     TBX_OK);
	cr_assert_eq(found, 0);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_put(store, GRP, "t", 0, &f), TBX_OK);
	f.last = 25;
	cr_assert_eq(tbx_outbox_inflight_put(store, GRP, "t", 0, &f), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	memset(&g, 0, sizeof(g));
	cr_assert_eq(tbx_outbox_inflight_get(store, GRP, "t", 0, &g, &found),
		     TBX_OK);
	cr_assert_eq(found, 1);
	cr_assert(f.first == g.first && f.last == g.last &&
		  f.crashes == g.crashes &&
		  f.suspect_until == g.suspect_until && f.lone == g.lone &&
		  f.count_offset == g.count_offset && f.retries == g.retries);
	cr_assert_eq(tbx_outbox_inflight_release(store, GRP, "t", 0), TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_get(store, GRP, "t", 0, &g, &found),
		     TBX_OK);
	cr_assert_eq(g.first, -1);
	cr_assert_eq(g.last, -1);
	cr_assert_eq(g.lone, 0);
	cr_assert_eq(g.crashes, 2, "the counts stay");
	cr_assert_eq(g.suspect_until, 30);
	cr_assert_eq(g.retries, 4);
	cr_assert_eq(tbx_outbox_inflight_delete(store, GRP, "t", 0), TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_get(store, GRP, "t", 0, &g, &found),
		     TBX_OK);
	cr_assert_eq(found, 0);
	tbx_outbox_close(store);
	fx_drop(schema);
}

Test(pg_outbox, dispatch_failures_count_per_row)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "dfail");
	int n = -1;

	fx_insert_at(store, GRP, "m1", 1000);
	cr_assert_eq(tbx_outbox_dispatch_failed(store, GRP, "m1", &n), TBX_OK);
	cr_assert_eq(n, 1);
	cr_assert_eq(tbx_outbox_dispatch_failed(store, GRP, "m1", &n), TBX_OK);
	cr_assert_eq(n, 2);
	cr_assert_eq(tbx_outbox_dispatch_failed(store, GRP, "gone", &n),
		     TBX_OK);
	cr_assert_eq(n, 0);
	tbx_outbox_close(store);
	fx_drop(schema);
}

typedef struct alarms {
	char text[512];
} alarms_t;

static int alarm_cb(void *opaque, const tbx__alarm_t *a)
{
	alarms_t *s = opaque;
	size_t len = strlen(s->text);

	snprintf(s->text + len, sizeof(s->text) - len, "%s/%s:%lld:%s:%d;",
		 a->grp, a->name, (long long)a->count,
		 a->detail ? a->detail : "-", a->last_ms >= a->first_ms);
	return 0;
}

Test(pg_outbox, alarms_count_and_keep_the_latest_detail)
{
	char schema[64];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "alarm");
	alarms_t s = {""};

	cr_assert_eq(tbx_outbox_alarm_add(store, GRP, "poison", "a"), TBX_OK);
	cr_assert_eq(tbx_outbox_alarm_add(store, GRP, "poison", "b"), TBX_OK);
	cr_assert_eq(tbx_outbox_alarm_add(store, GRP, "lag", NULL), TBX_OK);
	cr_assert_eq(tbx_outbox_alarm_add(store, "G0", "x", ""), TBX_OK);
	cr_assert_eq(tbx_outbox_alarms(store, alarm_cb, &s), TBX_OK);
	/* By group then name, in byte order ("G0" before "g1"). */
	cr_assert_str_eq(s.text, "G0/x:1:-:1;g1/lag:1:-:1;g1/poison:2:b:1;");
	tbx_outbox_close(store);
	fx_drop(schema);
}

/*
 * The recovery pass, the sweeper, counts.
 */

static void ids_str(const tbx__msgid_t *ids, size_t n, char *out, size_t size)
{
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(out);
		snprintf(out + len, size - len, "%s%s", i ? "," : "",
			 ids[i].id);
	}
}

static int sum_cb(void *opaque, const tbx__grp_sum_t *s)
{
	char *out = opaque;
	size_t len = strlen(out);

	snprintf(out + len, 256 - len, "%s:%lld,%lld,%lld,%lld@%lld;", s->grp,
		 (long long)s->n[0], (long long)s->n[1], (long long)s->n[2],
		 (long long)s->n[3], (long long)s->ms);
	return 0;
}

Test(pg_outbox, rows_by_age_and_offset_counts_and_stuck_marks)
{
	char schema[64], got[256];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "older");
	tbx__msgid_t *ids;
	tbx__row_t row;
	size_t n;
	int64_t cnt;

	fx_insert_at(store, GRP, "c", 3000);
	fx_insert_at(store, GRP, "b", 2000);
	fx_insert_at(store, GRP, "a", 2000);
	fx_insert_at(store, "g2", "z", 1000);
	fx_row(&row, "t1", 1);
	row.created_ms = 500;
	row.in_offset = 7;
	fx_tokened(&row, 3);
	fx_insert(store, "g2", &row);
	tbx__row_clear(&row);

	cr_assert_eq(tbx_outbox_rows_older(store, GRP, 2000, 10, &ids, &n),
		     TBX_OK);
	ids_str(ids, n, got, sizeof(got));
	free(ids);
	cr_assert_str_eq(got, "a,b", "oldest first, then by id");
	cr_assert_eq(tbx_outbox_rows_older(store, GRP, 9999, 2, &ids, &n),
		     TBX_OK);
	cr_assert_eq(n, 2, "the limit");
	free(ids);
	cr_assert_eq(tbx_outbox_rows_older(store, GRP, 10, 2, &ids, &n),
		     TBX_OK);
	cr_assert_eq(n, 0);
	cr_assert_null(ids);
	cr_assert_eq(tbx_outbox_rows_older(store, GRP, 10, 0, &ids, &n),
		     TBX_EINVAL);

	/* All at offset 42 in in[3], but t1 at 7. */
	cr_assert_eq(
	    tbx_outbox_rows_below(store, "g2", "in", 3, 43, 10, &ids, &n),
	    TBX_OK);
	ids_str(ids, n, got, sizeof(got));
	free(ids);
	cr_assert_str_eq(got, "t1,z", "lowest offset first");
	cr_assert_eq(
	    tbx_outbox_rows_below(store, "g2", "in", 3, 42, 10, &ids, &n),
	    TBX_OK);
	ids_str(ids, n, got, sizeof(got));
	free(ids);
	cr_assert_str_eq(got, "t1");
	cr_assert_eq(
	    tbx_outbox_rows_below(store, "g2", "in", 4, 99, 10, &ids, &n),
	    TBX_OK);
	cr_assert_eq(n, 0);

	cr_assert_eq(tbx_outbox_count(store, GRP, &cnt), TBX_OK);
	cr_assert_eq(cnt, 3);
	cr_assert_eq(tbx_outbox_count(store, NULL, &cnt), TBX_OK);
	cr_assert_eq(cnt, 5);
	cr_assert_eq(tbx_outbox_count_older(store, GRP, 2000, &cnt), TBX_OK);
	cr_assert_eq(cnt, 2);

	cr_assert_eq(tbx_outbox_row_mark_stuck(store, GRP, "a", 5000), TBX_OK);
	cr_assert_eq(tbx_outbox_row_mark_stuck(store, GRP, "a", 6000), TBX_OK);
	cr_assert_eq(fx_int(fx_q(schema, "SELECT stuck_ms FROM "
					 "\"%s\".tbx_outbox WHERE msg_id = "
					 "'a'"),
			    NULL),
		     5000, "the first mark stays");
	got[0] = '\0';
	cr_assert_eq(tbx_outbox_rows_summary(store, 2000, sum_cb, got), TBX_OK);
	/* processed, tokened, created <= 2000, stuck; the oldest. */
	cr_assert_str_eq(got, "g1:3,0,2,1@2000;g2:1,1,2,0@500;");
	tbx_outbox_close(store);
	fx_drop(schema);
}

/*
 * Dead letters and undelivered messages.
 */

typedef struct dls {
	char text[1024];
	int64_t first_id;
} dls_t;

static int dl_cb(void *opaque, const tbx__dl_rec_t *d)
{
	dls_t *s = opaque;
	size_t len = strlen(s->text);

	if (!s->first_id)
		s->first_id = d->id;
	snprintf(s->text + len, sizeof(s->text) - len,
		 "%s/%s:%s[%lld]@%lld>%s:%s:%lld:%d;", d->grp, d->msg_id,
		 d->in_topic, (long long)d->in_partition,
		 (long long)d->in_offset, d->dlq_topic,
		 d->error ? d->error : "-", (long long)d->attempts, d->pending);
	return 0;
}

static int str_cb(void *opaque, const char *s)
{
	char *out = opaque;
	size_t len = strlen(out);

	snprintf(out + len, 256 - len, "%s;", s);
	return 0;
}

static void fx_dead_letter(tbx_outbox_t *store, const char *grp, const char *id,
			   int64_t offset, const char *dlq, const char *error)
{
	tbx__row_t row;

	fx_row(&row, id, 0);
	row.in_offset = offset;
	row.error = error ? tbx__strdup(error) : NULL;
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_dead_letter_add(store, grp, &row, dlq, 3),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx__row_clear(&row);
}

/* Each dead letter's replayed_ms, "<grp>/<msg_id>=<ms>;" (-1: never). */
static int replayed_cb(void *opaque, const tbx__dl_rec_t *d)
{
	char *out = opaque;
	size_t len = strlen(out);

	snprintf(out + len, 256 - len, "%s/%s=%lld;", d->grp, d->msg_id,
		 (long long)d->replayed_ms);
	return 0;
}

/* A version 4 schema's dead letters read as never replayed; marking one
 * replayed keeps its first time, and marks that group's line only. */
Test(pg_outbox, a_version_4_dead_letter_was_never_replayed)
{
	char schema[64], got[256] = "";
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "mig5");
	tbx__filter_t all = TBX_FILTER_ALL;
	int64_t total = 0;
	int version = 0;

	fx_dead_letter(store, GRP, "m1", 5, "dlq", "bad json");
	fx_dead_letter(store, "g2", "m1", 5, "dlq", "x");
	tbx_outbox_close(store);
	fx_back_to_v4(schema);
	store = fx_open(schema);
	cr_assert_eq(tbx_outbox_schema(store, &version), TBX_OK);
	cr_assert_eq(version, TBX_PG_OUTBOX_VERSION);
	cr_assert_eq(
	    tbx_outbox_dead_letters_list(store, &all, &total, replayed_cb, got),
	    TBX_OK);
	cr_assert_str_eq(got, "g2/m1=-1;g1/m1=-1;");
	cr_assert_eq(
	    tbx_outbox_dead_letter_replayed(store, GRP, "in", 3, 5, "dlq", 50),
	    TBX_OK);
	cr_assert_eq(
	    tbx_outbox_dead_letter_replayed(store, GRP, "in", 3, 5, "dlq", 60),
	    TBX_OK);
	got[0] = '\0';
	cr_assert_eq(
	    tbx_outbox_dead_letters_list(store, &all, &total, replayed_cb, got),
	    TBX_OK);
	cr_assert_str_eq(got, "g2/m1=-1;g1/m1=50;");
	tbx_outbox_close(store);
	fx_drop(schema);
}

Test(pg_outbox, dead_letters_are_recorded_listed_found_and_summed)
{
	char schema[64], got[256] = "", num[32];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "dl");
	const char *only_g1[] = {GRP};
	tbx__filter_t all = TBX_FILTER_ALL, f = TBX_FILTER_ALL;
	dls_t s;
	int64_t total = 0;
	int found = -1;
	tbx__row_t row;

	fx_dead_letter(store, GRP, "m1", 5, "dlq", "bad json");
	fx_dead_letter(store, GRP, "m2", 6, "dlq", NULL);
	fx_dead_letter(store, "g2", "m1", 5, "dlq2", "x");
	/* m1's dead-letter row of g1 is still in flight: pending. */
	fx_row(&row, "m1", 0);
	row.kind = TBX_ROW_DEAD_LETTER;
	fx_insert(store, GRP, &row);
	tbx__row_clear(&row);

	memset(&s, 0, sizeof(s));
	cr_assert_eq(
	    tbx_outbox_dead_letters_list(store, &all, &total, dl_cb, &s),
	    TBX_OK);
	cr_assert_eq(total, 3);
	/* Newest first: same time or later, then by number, descending. */
	cr_assert(strstr(s.text, "g2/m1:in[3]@5>dlq2:x:3:0;") == s.text, "%s",
		  s.text);
	f.groups = only_g1;
	f.group_cnt = 1;
	f.limit = 1;
	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_outbox_dead_letters_list(store, &f, &total, dl_cb, &s),
		     TBX_OK);
	cr_assert_eq(total, 2, "before the limit");
	cr_assert_str_eq(s.text, "g1/m2:in[3]@6>dlq:-:3:0;");
	f.limit = 0;
	f.created_max = 1; /* before any of them */
	cr_assert_eq(tbx_outbox_dead_letters_list(store, &f, &total, dl_cb, &s),
		     TBX_OK);
	cr_assert_eq(total, 0);

	memset(&s, 0, sizeof(s));
	cr_assert_eq(
	    tbx_outbox_dead_letters_find(store, "m1", 0, &all, dl_cb, &s),
	    TBX_OK);
	cr_assert_str_eq(s.text,
			 "g1/m1:in[3]@5>dlq:bad json:3:1;"
			 "g2/m1:in[3]@5>dlq2:x:3:0;",
			 "in number order");
	snprintf(num, sizeof(num), "%lld", (long long)s.first_id);
	memset(&s, 0, sizeof(s));
	cr_assert_eq(
	    tbx_outbox_dead_letters_find(store, num, 1, &all, dl_cb, &s),
	    TBX_OK);
	cr_assert_str_eq(s.text, "g1/m1:in[3]@5>dlq:bad json:3:1;");
	f.created_max = INT64_MAX;
	f.groups = (const char *[]){"g2"};
	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_outbox_dead_letters_find(store, num, 1, &f, dl_cb, &s),
		     TBX_OK);
	cr_assert_str_eq(s.text, "", "the filter's groups only");
	cr_assert_eq(
	    tbx_outbox_dead_letters_find(store, "1x", 1, &all, dl_cb, &s),
	    TBX_OK, "not a number: none");
	cr_assert_str_eq(s.text, "");

	cr_assert_eq(tbx_outbox_dead_letter_recorded(store, GRP, "in", 3, 5,
						     "dlq", &found),
		     TBX_OK);
	cr_assert_eq(found, 1);
	cr_assert_eq(tbx_outbox_dead_letter_recorded(store, GRP, "in", 3, 5,
						     "dlq2", &found),
		     TBX_OK);
	cr_assert_eq(found, 0);
	cr_assert_eq(tbx_outbox_dead_letter_groups(store, "dlq", str_cb, got),
		     TBX_OK);
	cr_assert_str_eq(got, "g1;");
	got[0] = '\0';
	cr_assert_eq(tbx_outbox_dead_letters_summary(store, sum_cb, got),
		     TBX_OK);
	/* recorded, pending, replayed; the latest */
	cr_assert(strstr(got, "g1:2,1,0,0@") == got, "%s", got);
	cr_assert(strstr(got, ";g2:1,0,0,0@"), "%s", got);
	/* g1's m2 replayed: counted in g1's summary only. */
	cr_assert_eq(
	    tbx_outbox_dead_letter_replayed(store, GRP, "in", 3, 6, "dlq", 50),
	    TBX_OK);
	got[0] = '\0';
	cr_assert_eq(tbx_outbox_dead_letters_summary(store, sum_cb, got),
		     TBX_OK);
	cr_assert(strstr(got, "g1:2,1,1,0@") == got, "%s", got);
	cr_assert(strstr(got, ";g2:1,0,0,0@"), "%s", got);
	tbx_outbox_close(store);
	fx_drop(schema);
}

typedef struct uds {
	char text[1024];
	int64_t ids[8];
	int n;
	int key_null, key_empty;
} uds_t;

static int ud_cb(void *opaque, const tbx__ud_rec_t *u)
{
	uds_t *s = opaque;
	size_t len = strlen(s->text);

	if (s->n < 8)
		s->ids[s->n++] = u->id;
	if (!u->key)
		s->key_null++;
	else if (!u->key_len)
		s->key_empty++;
	snprintf(s->text + len, sizeof(s->text) - len,
		 "%s/%s:%s>%s:%s:%s:%lld:%s:%lld:%zu;", u->grp, u->msg_id,
		 u->out_id, u->topic, u->type, u->token ? "tok" : "-",
		 (long long)u->mint_seq, u->error, (long long)u->attempts,
		 u->payload_len);
	return 0;
}

/* Each undelivered line's token or set bit, "<out_id>=tok|<set>:<bit>:
 * <part>;" (newest first). */
static int ud_set_cb(void *opaque, const tbx__ud_rec_t *u)
{
	char *text = opaque;
	size_t len = strlen(text);

	if (u->tset)
		snprintf(text + len, 512 - len, "%s=%s:%lld:%lld;", u->out_id,
			 u->tset, (long long)u->tbit, (long long)u->tpart);
	else
		snprintf(text + len, 512 - len, "%s=%s;", u->out_id,
			 u->token ? "tok" : "-");
	return 0;
}

/* A version 5 schema's undelivered lines keep their token after the
 * step to 6; a set bit given up after it keeps its set, bit and
 * partition (no token), read back by list and get. */
Test(pg_outbox, a_version_5_schema_keeps_a_given_up_set_bit)
{
	char schema[64], got[512] = "", want[512];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "mig6");
	tbx__filter_t all = TBX_FILTER_ALL;
	tbx__row_t row;
	int64_t total = 0, id;
	int version = 0;

	fx_row(&row, "m1", 2);
	fx_tokened(&row, 11);
	cr_assert_eq(tbx_outbox_undelivered_add(store, GRP, &row, &row.msgs[0],
						"too big", 2),
		     TBX_OK);
	tbx_outbox_close(store);
	fx_back_to_v5(schema);
	store = fx_open(schema);
	cr_assert_eq(tbx_outbox_schema(store, &version), TBX_OK);
	cr_assert_eq(version, 6);
	tbx__strlcpy(row.msgs[1].tset, "01a2225f-e265-7c91-a352-25af14a9c149",
		     sizeof(row.msgs[1].tset));
	row.msgs[1].tbit = 70;
	row.msgs[1].part = 2;
	cr_assert_eq(tbx_outbox_undelivered_add(store, GRP, &row, &row.msgs[1],
						"too big", 2),
		     TBX_OK);
	cr_assert_eq(
	    tbx_outbox_undelivered_list(store, &all, &total, ud_set_cb, got),
	    TBX_OK);
	snprintf(want, sizeof(want),
		 "%s=01a2225f-e265-7c91-a352-25af14a9c149:70:2;%s=tok;",
		 row.msgs[1].id, row.msgs[0].id);
	cr_assert_str_eq(got, want);
	cr_assert_eq(fx_int(fx_q(schema, "SELECT count(*) FROM "
					 "\"%s\".tbx_undelivered WHERE token "
					 "IS NULL AND tset IS NOT NULL"),
			    NULL),
		     1, "a set bit is kept as no token");
	id = fx_int(fx_q(schema, "SELECT id FROM \"%s\".tbx_undelivered "
				 "WHERE tset IS NOT NULL"),
		    NULL);
	got[0] = '\0';
	cr_assert_eq(
	    tbx_outbox_undelivered_get(store, id, &all, ud_set_cb, got),
	    TBX_OK);
	snprintf(want, sizeof(want),
		 "%s=01a2225f-e265-7c91-a352-25af14a9c149:70:2;",
		 row.msgs[1].id);
	cr_assert_str_eq(got, want);
	tbx_outbox_close(store);
	tbx__row_clear(&row);
	fx_drop(schema);
}

/* A failed step to version 6 leaves version 5 whole: none of its
 * columns, the version unchanged; then the next open migrates. */
Test(pg_outbox, a_failed_migration_to_version_6_leaves_version_5_whole)
{
	char schema[64], err[512];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "mig6f");
	int version = 0;

	tbx_outbox_close(store);
	fx_back_to_v5(schema);
	/* A column of the step's last name, added by someone else. */
	fx_exec(fx_q(schema, "ALTER TABLE \"%s\".tbx_undelivered ADD "
			     "COLUMN tpart text"),
		NULL);
	cr_assert_eq(fx_open_err(schema, NULL, &store, err, sizeof(err)),
		     TBX_ESTORE, "%s", err);
	cr_assert_null(store);
	cr_assert(strstr(err, "migration to version 6 failed"), "%s", err);
	cr_assert_eq(fx_int(fx_q(schema, "SELECT version FROM "
					 "\"%s\".tbx_schema_info"),
			    NULL),
		     5);
	cr_assert_eq(fx_int("SELECT count(*) FROM information_schema.columns "
			    "WHERE table_schema = $1 AND table_name = "
			    "'tbx_undelivered' AND column_name IN ('tset', "
			    "'tbit')",
			    schema),
		     0, "the step's first columns are rolled back with it");
	fx_exec(fx_q(schema, "ALTER TABLE \"%s\".tbx_undelivered DROP "
			     "COLUMN tpart"),
		NULL);
	store = fx_open(schema);
	cr_assert_eq(tbx_outbox_schema(store, &version), TBX_OK);
	cr_assert_eq(version, 6);
	tbx_outbox_close(store);
	fx_drop(schema);
}

Test(pg_outbox, undelivered_messages_are_kept_once_listed_and_removed)
{
	char schema[64], want[512];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "ud");
	tbx__filter_t all = TBX_FILTER_ALL, f = TBX_FILTER_ALL;
	tbx__row_t row;
	uds_t s;
	int64_t n = -1, total = -1;

	fx_row(&row, "m1", 2);
	cr_assert_eq(tbx__row_add(&row, "out", "T", "", 0, NULL, 0, NULL, 0),
		     TBX_OK);
	/* No key (the key's bytes stay in the message's one allocation). */
	row.msgs[0].key = NULL;
	row.msgs[0].key_len = 0;
	fx_tokened(&row, 11);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	for (size_t i = 0; i < 3; i++)
		cr_assert_eq(tbx_outbox_undelivered_add(
				 store, GRP, &row, &row.msgs[i], "too big", 2),
			     TBX_OK);
	/* Again: nothing changes. */
	cr_assert_eq(tbx_outbox_undelivered_add(store, GRP, &row, &row.msgs[0],
						"other", 9),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(tbx_outbox_undelivered_count(store, &n), TBX_OK);
	cr_assert_eq(n, 3);

	memset(&s, 0, sizeof(s));
	cr_assert_eq(
	    tbx_outbox_undelivered_list(store, &all, &total, ud_cb, &s),
	    TBX_OK);
	cr_assert_eq(total, 3);
	snprintf(want, sizeof(want),
		 "g1/m1:%s>out:T:tok:11:too big:2:0;"
		 "g1/m1:%s>out:Pong:tok:11:too big:2:5;"
		 "g1/m1:%s>out:Pong:tok:11:too big:2:5;",
		 row.msgs[2].id, row.msgs[1].id, row.msgs[0].id);
	cr_assert_str_eq(s.text, want, "newest first");
	cr_assert_eq(s.key_null, 1);
	cr_assert_eq(s.key_empty, 1);
	f.groups = (const char *[]){"g2"};
	f.group_cnt = 1;
	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_outbox_undelivered_list(store, &f, &total, ud_cb, &s),
		     TBX_OK);
	cr_assert_eq(total, 0);
	cr_assert_eq(s.n, 0);

	memset(&s, 0, sizeof(s));
	tbx_outbox_undelivered_list(store, &all, NULL, ud_cb, &s);
	{
		int64_t id = s.ids[1];
		memset(&s, 0, sizeof(s));
		cr_assert_eq(
		    tbx_outbox_undelivered_get(store, id, &all, ud_cb, &s),
		    TBX_OK);
		cr_assert_eq(s.n, 1);
		cr_assert_eq(s.ids[0], id);
		memset(&s, 0, sizeof(s));
		cr_assert_eq(
		    tbx_outbox_undelivered_get(store, id, &f, ud_cb, &s),
		    TBX_OK);
		cr_assert_eq(s.n, 0, "another group's filter");
		cr_assert_eq(tbx_outbox_undelivered_delete(store, id), TBX_OK);
		cr_assert_eq(
		    tbx_outbox_undelivered_get(store, id, &all, ud_cb, &s),
		    TBX_OK);
		cr_assert_eq(s.n, 0, "removed");
	}
	cr_assert_eq(tbx_outbox_undelivered_count(store, &n), TBX_OK);
	cr_assert_eq(n, 2);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
	fx_drop(schema);
}

/*
 * The read side of inspect.
 */

typedef struct rows {
	char text[512];
} rows_t;

static int row_cb(void *opaque, const char *grp, const tbx__row_t *row,
		  int64_t msg_cnt)
{
	rows_t *s = opaque;
	size_t len = strlen(s->text);

	snprintf(s->text + len, sizeof(s->text) - len, "%s/%s:%lld:%s;", grp,
		 row->msg_id, (long long)msg_cnt, row->attempt[0] ? "T" : "P");
	return 0;
}

static int use_cb(void *opaque, const tbx__token_use_t *u)
{
	char *out = opaque;
	size_t len = strlen(out);

	snprintf(out + len, 256 - len, "%s/%s:%s:%lld:%lld;", u->grp, u->msg_id,
		 u->topic, (long long)u->seq, (long long)u->offset);
	return 0;
}

Test(pg_outbox, inspect_reads_list_in_order_with_the_filter)
{
	char schema[64], got[256] = "", out[TBX_MSGID_MAX + 1];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "reads");
	tbx_outbox_t *writer;
	tbx__filter_t all = TBX_FILTER_ALL, f = TBX_FILTER_ALL;
	tbx__row_t row;
	rows_t s;
	int64_t total = -1;
	int matches = -1;

	fx_insert_at(store, "b", "0190aaaa-1", 2000);
	fx_insert_at(store, "a", "0190aaaa-1", 2000);
	fx_insert_at(store, "a", "0190aaab-2", 1000);
	fx_row(&row, "0190bbbb-3", 2);
	row.created_ms = 3000;
	fx_tokened(&row, 5);
	fx_insert(store, "B", &row);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(store, "i", "t", 0, 1), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	fx_dead_letter(store, "d", "x", 1, "dlq", NULL);

	cr_assert_eq(tbx_outbox_groups(store, str_cb, got), TBX_OK);
	cr_assert_str_eq(got, "B;a;b;d;i;", "byte order, every table");

	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_outbox_rows_list(store, &all, &total, row_cb, &s),
		     TBX_OK);
	cr_assert_eq(total, 4);
	cr_assert_str_eq(s.text,
			 "a/0190aaab-2:0:P;a/0190aaaa-1:0:P;"
			 "b/0190aaaa-1:0:P;B/0190bbbb-3:2:T;",
			 "oldest first, then group, id");
	f.groups = (const char *[]){"a", "B"};
	f.group_cnt = 2;
	f.created_max = 2000;
	f.limit = 1;
	memset(&s, 0, sizeof(s));
	cr_assert_eq(tbx_outbox_rows_list(store, &f, &total, row_cb, &s),
		     TBX_OK);
	cr_assert_eq(total, 2);
	cr_assert_str_eq(s.text, "a/0190aaab-2:0:P;");

	cr_assert_eq(tbx_outbox_row_match(store, "0190aaaa-1", out, &matches),
		     TBX_OK);
	cr_assert_eq(matches, 1);
	cr_assert_str_eq(out, "0190aaaa-1");
	cr_assert_eq(tbx_outbox_row_match(store, "0190b", out, &matches),
		     TBX_OK);
	cr_assert_eq(matches, 1);
	cr_assert_str_eq(out, "0190bbbb-3");
	cr_assert_eq(tbx_outbox_row_match(store, "0190a", out, &matches),
		     TBX_OK);
	cr_assert_eq(matches, 2, "ambiguous");
	cr_assert_eq(tbx_outbox_row_match(store, "9", out, &matches), TBX_OK);
	cr_assert_eq(matches, 0);
	cr_assert_eq(tbx_outbox_row_match(store, "%", out, &matches), TBX_OK);
	cr_assert_eq(matches, 0, "no pattern matching");

	got[0] = '\0';
	cr_assert_eq(
	    tbx_outbox_row_groups(store, "0190aaaa-1", &all, str_cb, got),
	    TBX_OK);
	cr_assert_str_eq(got, "a;b;");
	got[0] = '\0';
	f.groups = (const char *[]){"b"};
	f.group_cnt = 1;
	cr_assert_eq(
	    tbx_outbox_row_groups(store, "0190aaaa-1", &f, str_cb, got),
	    TBX_OK);
	cr_assert_str_eq(got, "b;");

	got[0] = '\0';
	cr_assert_eq(
	    tbx_outbox_token_uses(store, row.msgs[1].token, 0, use_cb, got),
	    TBX_OK);
	cr_assert_str_eq(got, "B/0190bbbb-3:out:1:0;");
	got[0] = '\0';
	cr_assert_eq(tbx_outbox_token_uses(store, row.in_token, 1, use_cb, got),
		     TBX_OK);
	cr_assert_str_eq(got, "B/0190bbbb-3:in:0:42;");

	/* One snapshot from read_begin to read_end. */
	writer = fx_open(schema);
	cr_assert_eq(tbx_outbox_read_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_rows_list(store, &all, &total, row_cb, &s),
		     TBX_OK);
	cr_assert_eq(total, 4);
	fx_insert_at(writer, "a", "late", 1);
	cr_assert_eq(tbx_outbox_rows_list(store, &all, &total, row_cb, &s),
		     TBX_OK);
	cr_assert_eq(total, 4, "the snapshot of read_begin");
	tbx_outbox_read_end(store);
	cr_assert_eq(tbx_outbox_rows_list(store, &all, &total, row_cb, &s),
		     TBX_OK);
	cr_assert_eq(total, 5);
	tbx_outbox_close(writer);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
	fx_drop(schema);
}

/*
 * Locks.
 */

Test(pg_outbox, lock_ids_makes_an_overlapping_batch_wait_for_the_commit)
{
	char schema[64];
	tbx_outbox_t *a = fx_new(schema, sizeof(schema), "lock");
	tbx_outbox_t *b;
	tbx__db_opts_t opts;
	const char *first[] = {"m1", "m2", "m2"};
	const char *second[] = {"m3", "m2"};
	const char *apart[] = {"m3", "m4"};

	tbx__db_opts_init(&opts);
	opts.busy_timeout_ms = 50;
	b = fx_open_opts(schema, &opts);
	cr_assert_eq(fx_lock_ids(a, GRP, first, 3), TBX_ESTATE,
		     "outside a transaction");
	cr_assert_eq(tbx_outbox_begin(a), TBX_OK);
	cr_assert_eq(fx_lock_ids(a, GRP, first, 3), TBX_OK);
	cr_assert_eq(tbx_outbox_begin(b), TBX_OK);
	cr_assert_eq(fx_lock_ids(b, GRP, second, 2), TBX_EBUSY,
		     "m2 is held by the first batch");
	tbx_outbox_rollback(b);
	cr_assert_eq(tbx_outbox_begin(b), TBX_OK);
	cr_assert_eq(fx_lock_ids(b, GRP, apart, 2), TBX_OK,
		     "disjoint ids do not wait");
	cr_assert_eq(fx_lock_ids(b, "g2", first, 3), TBX_OK,
		     "nor the same ids of another group");
	tbx_outbox_rollback(b);
	cr_assert_eq(tbx_outbox_commit(a), TBX_OK);
	cr_assert_eq(tbx_outbox_begin(b), TBX_OK);
	cr_assert_eq(fx_lock_ids(b, GRP, second, 2), TBX_OK,
		     "free once the first batch committed");
	cr_assert_eq(fx_lock_ids(b, GRP, second, 0), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(b), TBX_OK);
	tbx_outbox_close(b);
	tbx_outbox_close(a);
	fx_drop(schema);
}

typedef struct locker {
	tbx_outbox_t *store;
	const char **ids;
	size_t n;
	int err;
} locker_t;

static void *lock_thread(void *arg)
{
	locker_t *l = arg;

	l->err = fx_lock_ids(l->store, GRP, l->ids, l->n);
	return NULL;
}

/*
 * The locks are taken in ascending key order whatever the order of the
 * ids: with the largest key held elsewhere, the batch holds every other
 * key while it waits for that one (in the ids' order it would wait at
 * the first and hold none).
 */
Test(pg_outbox, lock_ids_takes_the_keys_in_ascending_order)
{
	enum { N = 6 };
	char schema[64], sql[256], pid[16], maxk[16];
	tbx_outbox_t *store;
	tbx__db_opts_t opts;
	const char *ids[N];
	char names[N][8];
	locker_t l;
	pthread_t th;
	int64_t best = INT64_MIN;
	int top = 0;

	tt_pg_schema(schema, sizeof(schema), "order");
	tbx__db_opts_init(&opts);
	opts.busy_timeout_ms = 60000 * tt_time_factor();
	store = fx_open_opts(schema, &opts);
	for (int i = 0; i < N; i++) {
		int64_t k;
		snprintf(names[i], sizeof(names[i]), "m%d", i);
		snprintf(sql, sizeof(sql), "SELECT hashtext('%s:' || $1)", GRP);
		k = fx_int(sql, names[i]);
		if (k > best) {
			best = k;
			top = i;
		}
	}
	/* The largest key first, the others after it. */
	ids[0] = names[top];
	for (int i = 0, j = 1; i < N; i++)
		if (i != top)
			ids[j++] = names[i];
	snprintf(maxk, sizeof(maxk), "%lld", (long long)best);
	fx_exec("SELECT pg_advisory_lock(1413634049, $1::int4)", maxk);

	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	snprintf(pid, sizeof(pid), "%d",
		 PQbackendPID(fx_native(store, TBX_BACKEND_PG)));
	l = (locker_t){store, ids, N, -1};
	cr_assert_eq(pthread_create(&th, NULL, lock_thread, &l), 0);
	cr_assert(fx_wait_int("SELECT count(*) FROM pg_locks WHERE locktype = "
			      "'advisory' AND classid = 1413634049 AND pid = "
			      "$1::int AND NOT granted",
			      pid, 1),
		  "the batch waits for the held key");
	cr_assert_eq(fx_int("SELECT count(*) FROM pg_locks WHERE locktype = "
			    "'advisory' AND classid = 1413634049 AND pid = "
			    "$1::int AND granted",
			    pid),
		     N - 1, "every smaller key is held already");
	fx_exec("SELECT pg_advisory_unlock(1413634049, $1::int4)", maxk);
	pthread_join(th, NULL);
	cr_assert_eq(l.err, TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx_outbox_close(store);
	fx_drop(schema);
}

/*
 * The session: relaxed commits, timeouts, the connection for handlers.
 */

/* SHOW @p name through the store's connection. */
static void fx_show(tbx_outbox_t *store, const char *name, char *out,
		    size_t size)
{
	char sql[64];
	PGresult *r;

	snprintf(sql, sizeof(sql), "SHOW %s", name);
	r = PQexec(fx_native(store, TBX_BACKEND_PG), sql);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK);
	tbx__strlcpy(out, PQgetvalue(r, 0, 0), size);
	PQclear(r);
}

Test(pg_outbox, relaxed_applies_to_the_next_transactions_only)
{
	char schema[64], v[32];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "relaxed");
	tbx__db_opts_t opts;

	cr_assert_not_null(fx_native(store, TBX_BACKEND_PG));
	cr_assert_null(fx_native(store, TBX_BACKEND_SQLITE));
	cr_assert_null(tbx_outbox_db(store));
	cr_assert_not_null(tbx_outbox_pg(store));
	cr_assert_eq(tbx_outbox_pg(store)->conn,
		     fx_native(store, TBX_BACKEND_PG));

	cr_assert_eq(fx_relaxed(store, 1), TBX_OK);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	fx_show(store, "synchronous_commit", v, sizeof(v));
	cr_assert_str_eq(v, "off");
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(fx_relaxed(store, 0), TBX_OK);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	fx_show(store, "synchronous_commit", v, sizeof(v));
	cr_assert_str_eq(v, "on");
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	fx_show(store, "lock_timeout", v, sizeof(v));
	cr_assert_str_eq(v, "5s", "busy_timeout_ms's default");
	tbx_outbox_close(store);

	tbx__db_opts_init(&opts);
	opts.synchronous_full = 0;
	opts.busy_timeout_ms = 250;
	store = fx_open_opts(schema, &opts);
	fx_show(store, "synchronous_commit", v, sizeof(v));
	cr_assert_str_eq(v, "off");
	fx_show(store, "lock_timeout", v, sizeof(v));
	cr_assert_str_eq(v, "250ms");
	/* Kept by a connection made again. */
	tbx__fault_pg_conn_loss(1);
	tbx__fault_arm(1);
	cr_assert_neq(tbx_outbox_begin(store), TBX_OK);
	tbx__fault_arm(0);
	tbx__fault_pg_conn_loss(0);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	fx_show(store, "lock_timeout", v, sizeof(v));
	cr_assert_str_eq(v, "250ms");
	fx_show(store, "synchronous_commit", v, sizeof(v));
	cr_assert_str_eq(v, "off");
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx_outbox_close(store);
	fx_drop(schema);
}

Test(pg_outbox, exec_runs_a_handlers_statement_with_text_parameters)
{
	char schema[64], sql[256];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "exec");
	const char *ins[] = {"1", "o'1; DROP"};
	const char *upd[] = {NULL};
	int64_t changed = -1;

	snprintf(sql, sizeof(sql),
		 "CREATE TABLE \"%s\".orders (id int, note text)", schema);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(fx_sexec(store, sql, NULL, 0, &changed), TBX_OK);
	snprintf(sql, sizeof(sql),
		 "INSERT INTO \"%s\".orders VALUES ($1, $2), ($1 + 1, $2)",
		 schema);
	cr_assert_eq(fx_sexec(store, sql, ins, 2, &changed), TBX_OK);
	cr_assert_eq(changed, 2);
	snprintf(sql, sizeof(sql), "UPDATE \"%s\".orders SET note = $1",
		 schema);
	cr_assert_eq(fx_sexec(store, sql, upd, 1, &changed), TBX_OK);
	cr_assert_eq(changed, 2);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(fx_int(fx_q(schema, "SELECT count(*) FROM \"%s\".orders "
					 "WHERE note IS NULL"),
			    NULL),
		     2);

	cr_assert_eq(fx_sexec(store, "SELEC 1", NULL, 0, NULL), TBX_EINVAL);
	cr_assert(strstr(tbx_outbox_errmsg(store), "syntax"), "%s",
		  tbx_outbox_errmsg(store));
	cr_assert_eq(fx_sexec(store, "SELECT $1; SELECT 2", ins, 1, NULL),
		     TBX_EINVAL, "one statement only");
	cr_assert_eq(
	    fx_sexec(store, "SELECT * FROM no_such_table", NULL, 0, NULL),
	    TBX_ESTORE);
	tbx_outbox_close(store);
	fx_drop(schema);
}

/* A write whose changes are not asked for waits for the next statement
 * that waits for an answer (defer_writes), in order; its failure fails
 * the transaction at that statement or the commit.  Anything else, or a
 * write whose changes are asked for, runs at once. */
Test(pg_outbox, exec_defers_writes_when_asked_and_their_failure_fails_later)
{
	char schema[64], create[256], ins[256], sel[256], upd[256];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "defer");
	const char *one[] = {"1"}, *two[] = {"2"};
	int64_t changed = -1;
	int rows = 0;

	snprintf(create, sizeof(create),
		 "CREATE TABLE \"%s\".k (id int PRIMARY KEY)", schema);
	snprintf(ins, sizeof(ins), "INSERT INTO \"%s\".k VALUES ($1)", schema);
	snprintf(sel, sizeof(sel), "SELECT id FROM \"%s\".k", schema);
	snprintf(upd, sizeof(upd), "  update \"%s\".k SET id = id", schema);
	cr_assert_eq(tbx_outbox_defer_writes(store, 1), 1);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(fx_sexec(store, create, NULL, 0, NULL), TBX_OK);
	cr_assert_eq(tbx_outbox_deferred(store), 0, "not a write: at once");
	cr_assert_eq(fx_sexec(store, ins, one, 1, NULL), TBX_OK);
	cr_assert_eq(tbx_outbox_deferred(store), 1);
	/* A read sees it: what is deferred goes first. */
	cr_assert_eq(store->ops->query(store, sel, NULL, 0, count_row, &rows),
		     TBX_OK);
	cr_assert_eq(rows, 1);
	/* Changes asked for: at once, whatever the case of the word. */
	cr_assert_eq(fx_sexec(store, upd, NULL, 0, &changed), TBX_OK);
	cr_assert_eq(changed, 1);
	cr_assert_eq(fx_sexec(store, upd, NULL, 0, NULL), TBX_OK);
	cr_assert_eq(tbx_outbox_deferred(store), 2);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	cr_assert_eq(
	    fx_int(fx_q(schema, "SELECT count(*) FROM \"%s\".k"), NULL), 1);

	/* A deferred write that fails: accepted, and the commit fails
	 * with nothing of the transaction kept. */
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_deferred(store), 0, "counted per transaction");
	cr_assert_eq(fx_sexec(store, ins, two, 1, NULL), TBX_OK);
	cr_assert_eq(fx_sexec(store, ins, one, 1, NULL), TBX_OK, "queued");
	cr_assert_eq(tbx_outbox_deferred(store), 2);
	cr_assert_neq(tbx_outbox_commit(store), TBX_OK);
	cr_assert(strstr(tbx_outbox_errmsg(store), "duplicate key"), "%s",
		  tbx_outbox_errmsg(store));
	cr_assert_eq(
	    fx_int(fx_q(schema, "SELECT count(*) FROM \"%s\".k"), NULL), 1,
	    "the transaction was rolled back whole");

	/* Off: the same write fails at once. */
	tbx_outbox_defer_writes(store, 0);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(fx_sexec(store, ins, one, 1, NULL), TBX_ESTORE);
	cr_assert_eq(tbx_outbox_deferred(store), 0);
	tbx_outbox_rollback(store);
	tbx_outbox_close(store);
	fx_drop(schema);
}

/*
 * Faults.
 */

/* begin, two rows and an offset, commit, with the n-th call failing:
 * either all three or none are there; none when the fault fired. */
static void fault_loop(int conn_loss)
{
	char schema[64], id[32];
	tbx_outbox_t *store = fx_new(schema, sizeof(schema), "fault");
	int n;

	tbx__fault_pg_conn_loss(conn_loss);
	for (n = 1; n < 50; n++) {
		tbx__row_t a, b;
		int err, fired;
		int64_t rows, offs;

		snprintf(id, sizeof(id), "a%d", n);
		fx_row(&a, id, 1);
		snprintf(id, sizeof(id), "b%d", n);
		fx_row(&b, id, 2);
		tbx__fault_arm(n);
		if (!(err = tbx_outbox_begin(store))) {
			if ((err = tbx_outbox_row_insert(store, GRP, &a)) ||
			    (err = tbx_outbox_row_insert(store, GRP, &b)) ||
			    (err =
				 tbx_outbox_ingress_set(store, GRP, "t", n, n)))
				tbx_outbox_rollback(store);
			else
				err = tbx_outbox_commit(store);
		}
		fired = tbx__fault_fired();
		tbx__fault_arm(0);
		tbx__row_clear(&a);
		tbx__row_clear(&b);
		snprintf(id, sizeof(id), "%d", n);
		rows = fx_int(fx_q(schema, "SELECT count(*) FROM "
					   "\"%s\".tbx_outbox WHERE msg_id IN "
					   "('a' || $1, 'b' || $1)"),
			      id);
		offs = fx_int(fx_q(schema, "SELECT count(*) FROM "
					   "\"%s\".tbx_ingress WHERE "
					   "\"partition\" = $1::int"),
			      id);
		cr_assert_eq(rows, offs * 2, "n=%d: all or nothing", n);
		if (!fired) {
			cr_assert_eq(err, TBX_OK, "n=%d", n);
			cr_assert_eq(rows, 2);
			break;
		}
		cr_assert_neq(err, TBX_OK, "n=%d: the failure is reported", n);
		cr_assert_eq(rows, 0, "n=%d: a failed sequence left rows", n);
		/* The store works again at once (reconnecting if need be). */
		cr_assert_eq(tbx_outbox_begin(store), TBX_OK, "n=%d", n);
		cr_assert_eq(tbx_outbox_count(store, GRP, &rows), TBX_OK);
		cr_assert_eq(rows, 0);
		cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	}
	cr_assert_geq(n, 5, "the fault fired at every call of the sequence");
	cr_assert_lt(n, 50);
	tbx__fault_pg_conn_loss(0);
	tbx_outbox_close(store);
	fx_drop(schema);
}

Test(pg_outbox, a_fault_at_any_call_leaves_all_or_nothing)
{
	fault_loop(0);
}

Test(pg_outbox, a_lost_connection_at_any_call_leaves_all_or_nothing)
{
	fault_loop(1);
}

/*
 * Passwords.
 */

/* tt_pg_url() with user:sekrit and database @p db. */
static void fx_url_with_password(char *out, size_t size, const char *db)
{
	const char *url = tt_pg_url();
	const char *at = strchr(url, '@');
	const char *q = at ? strchr(at, '?') : NULL;

	cr_assert(at && q && !strncmp(url, "postgresql://", 13), "%s", url);
	snprintf(out, size, "%.*s:sekrit@/%s%s", (int)(at - url), url, db, q);
}

Test(pg_outbox, a_password_never_appears_in_an_error)
{
	char url[512], err[512], red[512];
	tbx_outbox_t *store = NULL;
	char schema[64];
	int rc;

	fx_url_with_password(url, sizeof(url), "tbx_no_such_database");
	rc = tbx_outbox_pg_open(url, "s", NULL, &store, err, sizeof(err));
	cr_assert_neq(rc, TBX_OK);
	cr_assert_null(store);
	cr_assert(strstr(err, "tbx_no_such_database"), "%s", err);
	cr_assert_null(strstr(err, "sekrit"), "%s", err);
	cr_assert(strstr(err, "***"), "the redacted URL: %s", err);

	/* key=value, and a string libpq refuses to parse. */
	rc =
	    tbx_outbox_pg_open("dbname=tbx_none password=sekrit host=/nonexist",
			       "s", NULL, &store, err, sizeof(err));
	cr_assert_neq(rc, TBX_OK);
	cr_assert_null(strstr(err, "sekrit"), "%s", err);
	rc = tbx_outbox_pg_open("password='sekrit dbname=", "s", NULL, &store,
				err, sizeof(err));
	cr_assert_eq(rc, TBX_EINVAL);
	cr_assert_null(strstr(err, "sekrit"), "%s", err);

	/* Connected (the test server trusts local users): a failing
	 * statement's message names the connection without it. */
	fx_url_with_password(url, sizeof(url), "tokenbox");
	tt_pg_schema(schema, sizeof(schema), "pw");
	cr_assert_eq(
	    tbx_outbox_pg_open(url, schema, NULL, &store, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_null(strstr(tbx_outbox_pg(store)->where, "sekrit"));
	cr_assert_eq(fx_sexec(store, "SELEC", NULL, 0, NULL), TBX_EINVAL);
	cr_assert_null(strstr(tbx_outbox_errmsg(store), "sekrit"));
	tbx__pg_redact(url, red, sizeof(red));
	cr_assert_null(strstr(red, "sekrit"), "%s", red);
	tbx_outbox_close(store);
	fx_drop(schema);
}
