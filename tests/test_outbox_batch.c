/* The batch rows of the service store (outbox/sqlite_batch.c,
 * outbox/pg_batch.c): tbx_obatch, tbx_cover_msg and tbx_inflight.gen.
 * Every case runs on an SQLite file and, in the pg tier (TBX_PG_TIER=1,
 * ctest's pg_test_outbox_batch), on a PostgreSQL schema: the two
 * backends keep one contract. */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/ids.h"
#include "base/str.h"
#include "fixture.h"
#include "hop.h"
#include "outbox/outbox.h"
#include "store/msgs.h"
#include "support.h"

#define GRP "g"

typedef struct fx {
	char *dir, *path; /* path: a file, or "pg:SCHEMA" (hop.h) */
	tbx_outbox_t *store;
} fx_t;

static void fx_open(fx_t *fx)
{
	fx->dir = tt_tmpdir();
	fx->path = tt_store_new(fx->dir, "s");
	fx->store = tt_outbox_open(fx->path);
}

static void fx_close(fx_t *fx)
{
	tbx_outbox_close(fx->store);
	if (tt_store_is_pg(fx->path)) {
		char drop[128];

		snprintf(drop, sizeof(drop), "DROP SCHEMA \"%s\" CASCADE",
			 tt_store_schema(fx->path));
		cr_assert_eq(tt_store_sql_try(fx->path, drop, NULL), 0, "%s",
			     drop);
	}
	tt_rmrf(fx->dir);
	free(fx->dir);
	free(fx->path);
}

static void raw(const char *path, const char *sql, const char *pg_sql)
{
	cr_assert_eq(tt_store_sql_try(path, sql, pg_sql), 0, "%s",
		     pg_sql && tt_store_is_pg(path) ? pg_sql : sql);
}

/* A row of n records, each with one message of 200 bytes; every third
 * record in the per-message format, the others with a set bit; tokens
 * in the messages when @p attempt is given. */
typedef struct brow {
	tbx__obatch_t row;
	tbx__buf_t cover, wire;
	void *msgs;
	size_t n;
	char (*ids)[40];
	char (*outs)[TBX_UUID_LEN + 1];
	char set[TBX_UUID_LEN + 1];
	unsigned char payload[200];
} brow_t;

static void brow_make(brow_t *b, size_t n, const char *attempt)
{
	tbx__cover_ent_t *e = calloc(n, sizeof(*e));
	tbx__wire_ent_t *w = calloc(n, sizeof(*w));
	tbx__mfield_t *f = calloc(n * TBX__MF_COUNT, sizeof(*f));
	char err[200];

	memset(b, 0, sizeof(*b));
	b->n = n;
	b->ids = calloc(n, sizeof(*b->ids));
	b->outs = calloc(n, sizeof(*b->outs));
	tbx__uuid(b->set);
	tbx__uuid(b->row.row_id);
	for (size_t i = 0; i < sizeof(b->payload); i++)
		b->payload[i] = (unsigned char)(i * 7);
	for (size_t i = 0; i < n; i++) {
		int per_msg = i % 3 == 0;

		tbx__uuid(b->ids[i]);
		tbx__uuid(b->outs[i]);
		e[i] =
		    (tbx__cover_ent_t){TBX__COVER_HANDLED,
				       "in",
				       (int32_t)(i % 4),
				       (int64_t)(i / 4),
				       b->ids[i],
				       per_msg ? TBX__REF_TOKEN : TBX__REF_BIT,
				       "",
				       (uint16_t)i,
				       (int32_t)(i % 4)};
		if (per_msg)
			tbx__uuid(e[i].ref_id);
		else
			memcpy(e[i].ref_id, b->set, sizeof(b->set));
		w[i] = (tbx__wire_ent_t){(int32_t)(i % 6), (uint16_t)i,
					 (uint32_t)i};
		f[i * TBX__MF_COUNT + TBX__MF_ID] =
		    (tbx__mfield_t){b->outs[i], TBX_UUID_LEN};
		f[i * TBX__MF_COUNT + TBX__MF_TOPIC] =
		    (tbx__mfield_t){"out", 3};
		f[i * TBX__MF_COUNT + TBX__MF_TYPE] = (tbx__mfield_t){"ty", 2};
		f[i * TBX__MF_COUNT + TBX__MF_PAYLOAD] =
		    (tbx__mfield_t){b->payload, sizeof(b->payload)};
		f[i * TBX__MF_COUNT + TBX__MF_HEADERS] =
		    (tbx__mfield_t){"traceparent", 11};
		if (attempt)
			f[i * TBX__MF_COUNT + TBX__MF_TOKEN] =
			    (tbx__mfield_t){b->set, TBX_UUID_LEN};
	}
	cr_assert_eq(tbx__cover_encode(&b->cover, e, n, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx__wire_encode(&b->wire, w, n), TBX_OK);
	cr_assert_eq(tbx__msgs_encode(f, n, &b->msgs, &b->row.msgs_len),
		     TBX_OK);
	b->row.msgs = b->msgs;
	b->row.cover = b->cover.p;
	b->row.cover_len = b->cover.len;
	b->row.wire = b->wire.p;
	b->row.wire_len = b->wire.len;
	b->row.tokfmt = 2;
	b->row.created_ms = 1234;
	b->row.stuck_ms = -1;
	if (attempt) {
		snprintf(b->row.attempt, sizeof(b->row.attempt), "%s", attempt);
		b->row.mint_seq = 77;
	}
	free(e);
	free(w);
	free(f);
}

static void brow_free(brow_t *b)
{
	tbx__buf_free(&b->cover);
	tbx__buf_free(&b->wire);
	free(b->msgs);
	free(b->ids);
	free(b->outs);
}

/* Inserts @p b in a transaction of its own.  @returns the insert's
 * error, or the commit's (PostgreSQL sends the insert with the commit,
 * store/pg.h, tbx__pg_defer()). */
static int insert(fx_t *fx, const brow_t *b)
{
	int rc;

	cr_assert_eq(tbx_outbox_begin(fx->store), TBX_OK);
	rc = tbx_outbox_obatch_insert(fx->store, GRP, &b->row);
	if (!rc)
		rc = tbx_outbox_commit(fx->store);
	if (rc)
		cr_assert_eq(tbx_outbox_rollback(fx->store), TBX_OK);
	return rc;
}

/* What load() gives, copied. */
typedef struct loaded {
	int rows;
	tbx__obatch_t row;
	void *cover, *msgs, *wire;
	uint32_t cover_n;
	int64_t found_bit, found_off;
	const char *set;
} loaded_t;

static int on_row(void *opaque, const tbx__obatch_t *row,
		  const tbx__cover_t *cover)
{
	loaded_t *l = opaque;

	l->rows++;
	l->row = *row;
	l->cover = tbx__memdup(row->cover, row->cover_len);
	l->msgs = row->msgs ? tbx__memdup(row->msgs, row->msgs_len) : NULL;
	l->wire = tbx__memdup(row->wire, row->wire_len);
	l->cover_n = cover->n;
	l->found_bit = l->set ? tbx__cover_find_bit(cover, l->set, 499) : -2;
	l->found_off = tbx__cover_find_offset(cover, "in", 3, 124);
	return 0;
}

static void loaded_free(loaded_t *l)
{
	free(l->cover);
	free(l->msgs);
	free(l->wire);
}

/* A row of 500 records of one message each comes back byte for byte,
 * with the index of its cover and the per-message records' entries. */
Test(obatch, a_row_of_500_records_round_trips_exactly)
{
	fx_t fx;
	brow_t b;
	loaded_t l = {0};
	const char *ids[3];
	char rows[3][TBX_UUID_LEN + 1];

	fx_open(&fx);
	brow_make(&b, 500, NULL);
	cr_assert_gt(b.row.msgs_len, 500 * 200);
	cr_assert_eq(insert(&fx, &b), TBX_OK);
	l.set = b.set;
	cr_assert_eq(tbx_outbox_obatch_load(fx.store, GRP, on_row, &l), TBX_OK);
	cr_assert_eq(l.rows, 1);
	cr_assert_str_eq(l.row.row_id, b.row.row_id);
	cr_assert_str_eq(l.row.attempt, "");
	cr_assert_eq(l.row.mint_seq, 0);
	cr_assert_eq(l.row.tokfmt, 2);
	cr_assert_eq(l.row.created_ms, 1234);
	cr_assert_eq(l.row.stuck_ms, -1);
	cr_assert_eq(l.row.dispatch_failures, 0);
	cr_assert_eq(l.row.cover_len, b.cover.len);
	cr_assert_eq(memcmp(l.cover, b.cover.p, b.cover.len), 0);
	cr_assert_eq(l.row.msgs_len, b.row.msgs_len);
	cr_assert_eq(memcmp(l.msgs, b.msgs, b.row.msgs_len), 0);
	cr_assert_eq(l.row.wire_len, b.wire.len);
	cr_assert_eq(memcmp(l.wire, b.wire.p, b.wire.len), 0);
	cr_assert_eq(l.cover_n, 500);
	cr_assert_eq(l.found_bit, 499); /* 499 % 3 != 0: a set bit */
	cr_assert_eq(l.found_off, 499); /* partition 499 % 4, offset 124 */
	/* 167 records in the per-message format, each indexed. */
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_cover_msg"),
		     167);
	ids[0] = b.ids[0];
	ids[1] = b.ids[1]; /* a set bit: not indexed */
	ids[2] = b.ids[498];
	cr_assert_eq(tbx_outbox_cover_msg_find(fx.store, GRP, ids, 3, rows),
		     TBX_OK);
	cr_assert_str_eq(rows[0], b.row.row_id);
	cr_assert_str_eq(rows[1], "");
	cr_assert_str_eq(rows[2], b.row.row_id);
	cr_assert_eq(tbx_outbox_cover_msg_find(fx.store, "other", ids, 1, rows),
		     TBX_OK);
	cr_assert_str_eq(rows[0], "");
	loaded_free(&l);
	brow_free(&b);
	fx_close(&fx);
}

/* B records an attempt once: a second recorder loses, and so does one
 * for a row that is gone. */
Test(obatch, an_attempt_is_recorded_once)
{
	fx_t fx;
	brow_t b, tok;
	loaded_t l = {0};
	char a1[TBX_UUID_LEN + 1], a2[TBX_UUID_LEN + 1];
	int won = -1;

	fx_open(&fx);
	brow_make(&b, 3, NULL);
	tbx__uuid(a1);
	tbx__uuid(a2);
	brow_make(&tok, 3, a1); /* the same messages with their tokens */
	cr_assert_eq(insert(&fx, &b), TBX_OK);
	cr_assert_eq(tbx_outbox_obatch_set_attempt(
			 fx.store, GRP, b.row.row_id, a1, 77, tok.msgs,
			 tok.row.msgs_len, tok.wire.p, tok.wire.len, &won),
		     TBX_OK);
	cr_assert_eq(won, 1);
	cr_assert_eq(tbx_outbox_obatch_set_attempt(
			 fx.store, GRP, b.row.row_id, a2, 78, tok.msgs,
			 tok.row.msgs_len, tok.wire.p, tok.wire.len, &won),
		     TBX_OK);
	cr_assert_eq(won, 0);
	cr_assert_eq(tbx_outbox_obatch_set_attempt(
			 fx.store, GRP, tok.row.row_id, a2, 78, tok.msgs,
			 tok.row.msgs_len, tok.wire.p, tok.wire.len, &won),
		     TBX_OK);
	cr_assert_eq(won, 0);
	/* Messages without tokens are no attempt. */
	cr_assert_eq(tbx_outbox_obatch_set_attempt(
			 fx.store, GRP, b.row.row_id, a2, 78, b.msgs,
			 b.row.msgs_len, b.wire.p, b.wire.len, &won),
		     TBX_EINVAL);
	cr_assert_eq(tbx_outbox_obatch_load(fx.store, GRP, on_row, &l), TBX_OK);
	cr_assert_eq(l.rows, 1);
	cr_assert_str_eq(l.row.attempt, a1);
	cr_assert_eq(l.row.mint_seq, 77);
	cr_assert_eq(l.row.msgs_len, tok.row.msgs_len);
	cr_assert_eq(memcmp(l.msgs, tok.msgs, tok.row.msgs_len), 0);
	/* The CHECK: an attempt without its sequence is refused by the
	 * table itself. */
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_obatch WHERE "
				       "attempt IS NOT NULL AND mint_seq = 77"),
		     1);
	loaded_free(&l);
	brow_free(&b);
	brow_free(&tok);
	fx_close(&fx);
}

Test(obatch, the_table_ties_attempt_and_sequence)
{
	fx_t fx;

	fx_open(&fx);
	cr_assert_eq(
	    tt_store_sql_try(fx.path,
			     "INSERT INTO tbx_obatch (grp, row_id, attempt, "
			     "mint_seq, tokfmt, created_ms, cover, wire) "
			     "VALUES ('g', 'r', 'a', NULL, 2, 0, x'00', "
			     "x'00')",
			     "INSERT INTO tbx_obatch (grp, row_id, attempt, "
			     "mint_seq, tokfmt, created_ms, cover, wire) "
			     "VALUES ('g', 'r', 'a', NULL, 2, 0, '\\x00', "
			     "'\\x00')"),
	    -1);
	cr_assert_eq(
	    tt_store_sql_try(fx.path,
			     "INSERT INTO tbx_obatch (grp, row_id, attempt, "
			     "mint_seq, tokfmt, created_ms, cover, wire) "
			     "VALUES ('g', 'r', NULL, 5, 2, 0, x'00', x'00')",
			     "INSERT INTO tbx_obatch (grp, row_id, attempt, "
			     "mint_seq, tokfmt, created_ms, cover, wire) "
			     "VALUES ('g', 'r', NULL, 5, 2, 0, '\\x00', "
			     "'\\x00')"),
	    -1);
	/* The statement itself is well formed: both tied, it runs. */
	raw(fx.path,
	    "INSERT INTO tbx_obatch (grp, row_id, attempt, mint_seq, tokfmt, "
	    "created_ms, cover, wire) VALUES ('g', 'r', 'a', 5, 2, 0, x'00', "
	    "x'00')",
	    "INSERT INTO tbx_obatch (grp, row_id, attempt, mint_seq, tokfmt, "
	    "created_ms, cover, wire) VALUES ('g', 'r', 'a', 5, 2, 0, "
	    "'\\x00', '\\x00')");
	fx_close(&fx);
}

/* E deletes rows by id with their index entries, and only those. */
Test(obatch, rows_go_with_their_index_entries)
{
	fx_t fx;
	brow_t b1, b2;
	const char *ids[3];
	int64_t deleted = -1;

	fx_open(&fx);
	brow_make(&b1, 6, NULL);
	brow_make(&b2, 4, NULL);
	cr_assert_eq(insert(&fx, &b1), TBX_OK);
	cr_assert_eq(insert(&fx, &b2), TBX_OK);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_cover_msg"),
		     4);
	ids[0] = b1.row.row_id;
	ids[1] = "0190f3c2-1111-7000-8000-00000000dead";
	ids[2] = b1.row.row_id;
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_obatch_delete(fx.store, GRP, ids, 3, &deleted),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	cr_assert_eq(deleted, 1);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_obatch"), 1);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_cover_msg"),
		     2);
	/* A covered per-message record can be covered again once its row
	 * is gone; while it is there, a second row covering it fails. */
	cr_assert_eq(insert(&fx, &b1), TBX_OK);
	tbx__uuid(b1.row.row_id);
	cr_assert_neq(insert(&fx, &b1), TBX_OK);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_obatch"), 2);
	brow_free(&b1);
	brow_free(&b2);
	fx_close(&fx);
}

/* Everything is written in the caller's transaction: rolled back, it
 * leaves nothing behind. */
Test(obatch, a_rolled_back_transaction_leaves_nothing)
{
	fx_t fx;
	brow_t b;
	int32_t parts[2] = {1, 2};
	int64_t gens[2];

	fx_open(&fx);
	brow_make(&b, 10, NULL);
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_obatch_insert(fx.store, GRP, &b.row), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_bump(fx.store, GRP, "in", parts, 2, gens),
		     TBX_OK);
	cr_assert_eq(gens[0], 1);
	cr_assert_eq(tbx_outbox_rollback(fx.store), TBX_OK);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_obatch"), 0);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_cover_msg"),
		     0);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_inflight"), 0);
	/* And committed, it is all there. */
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_obatch_insert(fx.store, GRP, &b.row), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_bump(fx.store, GRP, "in", parts, 2, gens),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_obatch"), 1);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_cover_msg"),
		     4);
	cr_assert_eq(tt_count(fx.path, "SELECT SUM(gen) FROM tbx_inflight"), 2);
	brow_free(&b);
	fx_close(&fx);
}

/* gen: 0 without a row; each bump adds 1, making a row with a cleared
 * marker where there was none; G's marker writes keep it. */
Test(obatch, generations_are_read_and_bumped_per_partition)
{
	fx_t fx;
	int32_t parts[3] = {0, 7, 0};
	int64_t gens[3];
	tbx__inflight_t f = {10, 20, 0, -1, 0, -1, 0}, got;
	int found;

	fx_open(&fx);
	cr_assert_eq(tbx_outbox_gens_get(fx.store, GRP, "t", parts, 3, gens),
		     TBX_OK);
	cr_assert(gens[0] == 0 && gens[1] == 0 && gens[2] == 0);
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_bump(fx.store, GRP, "t", parts, 3, gens),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	cr_assert(gens[0] == 1 && gens[1] == 1 && gens[2] == 2);
	cr_assert_eq(
	    tbx_outbox_inflight_get(fx.store, GRP, "t", 7, &got, &found),
	    TBX_OK);
	cr_assert(found && got.first == -1 && got.last == -1 &&
		  got.crashes == 0);
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_put(fx.store, GRP, "t", 0, &f),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_release(fx.store, GRP, "t", 0),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_get(fx.store, GRP, "t", parts, 3, gens),
		     TBX_OK);
	cr_assert(gens[0] == 2 && gens[1] == 1 && gens[2] == 2);
	cr_assert_eq(
	    tbx_outbox_gens_get(fx.store, "other", "t", parts, 1, gens),
	    TBX_OK);
	cr_assert_eq(gens[0], 0);
	fx_close(&fx);
}

/* A's partition locks: the gens read under them are gens_get's, for
 * every partition of every topic at once (none with a row, some with a
 * bumped gen); input that is not in (topic, partition) order, or
 * repeats one, is refused. */
Test(obatch, gens_are_read_under_the_partitions_locks)
{
	fx_t fx;
	const char *topics[4] = {"a", "a", "b", "b"};
	int32_t parts[4] = {0, 3, 1, 2}, bump[2] = {3, 3};
	int64_t gens[4], one;
	tbx__inflight_t f;
	int found;

	fx_open(&fx);
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(
	    tbx_outbox_gens_lock(fx.store, GRP, topics, parts, 4, gens),
	    TBX_OK);
	cr_assert(gens[0] == 0 && gens[1] == 0 && gens[2] == 0 && gens[3] == 0);
	cr_assert_eq(tbx_outbox_gens_bump(fx.store, GRP, "a", bump, 2, NULL),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(
	    tbx_outbox_gens_lock(fx.store, GRP, topics, parts, 4, gens),
	    TBX_OK);
	cr_assert(gens[0] == 0 && gens[1] == 2 && gens[2] == 0 && gens[3] == 0,
		  "%lld %lld %lld %lld", (long long)gens[0], (long long)gens[1],
		  (long long)gens[2], (long long)gens[3]);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	cr_assert_eq(
	    tbx_outbox_gens_get(fx.store, GRP, "a", &parts[1], 1, &one),
	    TBX_OK);
	cr_assert_eq(one, 2);
	/* A row a lock made reads as a partition without a marker. */
	cr_assert_eq(tbx_outbox_inflight_get(fx.store, GRP, "b", 2, &f, &found),
		     TBX_OK);
	cr_assert(!found || (f.first == -1 && f.last == -1 && f.crashes == 0));
	/* Not in order, or twice: refused. */
	const char *back[2] = {"b", "a"};
	int32_t same[2] = {1, 1}, down[2] = {3, 0};
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_lock(fx.store, GRP, back, same, 2, gens),
		     TBX_EINVAL);
	cr_assert_eq(tbx_outbox_gens_lock(fx.store, GRP, topics, same, 2, gens),
		     TBX_EINVAL);
	cr_assert_eq(tbx_outbox_gens_lock(fx.store, GRP, topics, down, 2, gens),
		     TBX_EINVAL);
	cr_assert_eq(tbx_outbox_rollback(fx.store), TBX_OK);
	fx_close(&fx);
}

/* C's give-up count and the recovery pass's mark on a batch row: the
 * count grows by one a call and is 0 for a row that is gone; the first
 * mark stays. */
Test(obatch, dispatch_failures_are_counted_and_the_first_stuck_mark_stays)
{
	fx_t fx;
	brow_t b;
	int failures = -1;

	fx_open(&fx);
	brow_make(&b, 3, NULL);
	cr_assert_eq(insert(&fx, &b), TBX_OK);
	for (int i = 1; i <= 3; i++) {
		cr_assert_eq(tbx_outbox_obatch_dispatch_failed(
				 fx.store, GRP, b.row.row_id, &failures),
			     TBX_OK);
		cr_assert_eq(failures, i);
	}
	cr_assert_eq(tbx_outbox_obatch_dispatch_failed(
			 fx.store, GRP, "0190f3c2-1111-7000-8000-00000000dead",
			 &failures),
		     TBX_OK);
	cr_assert_eq(failures, 0);
	cr_assert_eq(tbx_outbox_obatch_dispatch_failed(fx.store, "other",
						       b.row.row_id, &failures),
		     TBX_OK);
	cr_assert_eq(failures, 0, "another group's row is not this one");
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_obatch WHERE "
				       "stuck_ms IS NOT NULL"),
		     0);
	cr_assert_eq(
	    tbx_outbox_obatch_mark_stuck(fx.store, GRP, b.row.row_id, 1000),
	    TBX_OK);
	cr_assert_eq(
	    tbx_outbox_obatch_mark_stuck(fx.store, GRP, b.row.row_id, 2000),
	    TBX_OK);
	cr_assert_eq(tt_count(fx.path, "SELECT stuck_ms FROM tbx_obatch"),
		     1000);
	cr_assert_eq(tt_count(fx.path, "SELECT dispatch_failures FROM "
				       "tbx_obatch"),
		     3);
	brow_free(&b);
	fx_close(&fx);
}

/* As G reads a partition without a row: no A in progress, no suspect
 * range, no counts. */
static void assert_no_marker(const tbx__inflight_t *f)
{
	cr_assert(f->first == -1 && f->last == -1 && f->crashes == 0 &&
		      f->suspect_until == -1 && f->lone == 0 &&
		      f->count_offset == -1 && f->retries == 0,
		  "marker %lld..%lld crashes %d suspect %lld lone %d count "
		  "%lld retries %d",
		  (long long)f->first, (long long)f->last, f->crashes,
		  (long long)f->suspect_until, f->lone,
		  (long long)f->count_offset, f->retries);
}

/* The row a bump makes has a cleared marker: G finds nothing in flight
 * and nothing suspect, also for a record at offset 0. */
Test(obatch, a_bumped_partition_has_no_marker)
{
	fx_t fx;
	int32_t part = 5;
	tbx__inflight_t got;
	int found = 0;

	fx_open(&fx);
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_bump(fx.store, GRP, "t", &part, 1, NULL),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	cr_assert_eq(
	    tbx_outbox_inflight_get(fx.store, GRP, "t", 5, &got, &found),
	    TBX_OK);
	cr_assert_eq(found, 1);
	assert_no_marker(&got);
	fx_close(&fx);
}

/* G reads a batch's markers in one call (PostgreSQL: one statement):
 * the same as one read per partition, a partition without a marker left
 * as the caller set it, a partition asked for twice answered twice. */
Test(obatch, markers_read_together_are_the_markers_read_one_by_one)
{
	fx_t fx;
	const char *topics[] = {"t", "u", "t", "t", "u"};
	int32_t parts[] = {3, 3, 9, 4, 3};
	tbx__inflight_t put[] = {{10, 20, 1, 30, 1, 10, 2},
				 {-1, -1, 2, 40, 0, 7, 1},
				 {5, 5, 0, -1, 1, 5, 0}};
	tbx__inflight_t none = {-1, -1, 0, -1, 0, -1, 0}, many[5], one;
	int found_many[5], found_one;

	fx_open(&fx);
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	/* t [3], u [3] and t [4]; t [9] has none. */
	cr_assert_eq(tbx_outbox_inflight_put(fx.store, GRP, "t", 3, &put[0]),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_put(fx.store, GRP, "u", 3, &put[1]),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_put(fx.store, GRP, "t", 4, &put[2]),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	for (size_t i = 0; i < 5; i++)
		many[i] = none;
	cr_assert_eq(tbx_outbox_inflight_get_many(fx.store, GRP, topics, parts,
						  5, many, found_many),
		     TBX_OK);
	for (size_t i = 0; i < 5; i++) {
		one = none;
		cr_assert_eq(tbx_outbox_inflight_get(fx.store, GRP, topics[i],
						     parts[i], &one,
						     &found_one),
			     TBX_OK);
		cr_assert_eq(found_many[i], found_one, "%s [%d]", topics[i],
			     (int)parts[i]);
		cr_assert(many[i].first == one.first &&
			      many[i].last == one.last &&
			      many[i].crashes == one.crashes &&
			      many[i].suspect_until == one.suspect_until &&
			      many[i].lone == one.lone &&
			      many[i].count_offset == one.count_offset &&
			      many[i].retries == one.retries,
			  "%s [%d]: %lld..%lld crashes %d suspect %lld lone "
			  "%d count %lld retries %d",
			  topics[i], (int)parts[i], (long long)many[i].first,
			  (long long)many[i].last, many[i].crashes,
			  (long long)many[i].suspect_until, many[i].lone,
			  (long long)many[i].count_offset, many[i].retries);
	}
	cr_assert(found_many[0] && found_many[1] && !found_many[2] &&
		  found_many[3] && found_many[4]);
	cr_assert_eq(many[0].suspect_until, 30);
	cr_assert_eq(many[1].count_offset, 7);
	cr_assert_eq(many[3].first, 5);
	cr_assert_eq(many[4].crashes, 2);
	assert_no_marker(&many[2]);
	/* No partition: nothing read, nothing refused. */
	cr_assert_eq(tbx_outbox_inflight_get_many(fx.store, GRP, topics, parts,
						  0, many, found_many),
		     TBX_OK);
	fx_close(&fx);
}

/* gen never goes back: the marker's delete (G, A's commit) keeps a
 * bumped partition's row, cleared, and a later bump counts on from its
 * gen; a partition never bumped loses its row as before. */
Test(obatch, a_deleted_marker_keeps_the_generation)
{
	fx_t fx;
	int32_t parts[2] = {0, 1};
	int64_t gens[2];
	tbx__inflight_t f = {10, 20, 1, 30, 1, 10, 2}, got;
	int found = 0;

	fx_open(&fx);
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_bump(fx.store, GRP, "t", parts, 1, NULL),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_gens_bump(fx.store, GRP, "t", parts, 1, gens),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	cr_assert_eq(gens[0], 2);
	/* G's marker and counts on both, then A's commit deletes them. */
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
		for (int i = 0; i < 2; i++)
			cr_assert_eq(tbx_outbox_inflight_put(fx.store, GRP, "t",
							     parts[i], &f),
				     TBX_OK);
		cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
		cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
		for (int i = 0; i < 2; i++)
			cr_assert_eq(tbx_outbox_inflight_delete(fx.store, GRP,
								"t", parts[i]),
				     TBX_OK);
		cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
		cr_assert_eq(
		    tbx_outbox_gens_get(fx.store, GRP, "t", parts, 2, gens),
		    TBX_OK);
		cr_assert_eq(gens[0], 2 + round, "round %d", round);
		cr_assert_eq(gens[1], 0);
		cr_assert_eq(tbx_outbox_inflight_get(fx.store, GRP, "t", 0,
						     &got, &found),
			     TBX_OK);
		cr_assert_eq(found, 1, "the row of a bumped partition stays");
		assert_no_marker(&got);
		cr_assert_eq(tbx_outbox_inflight_get(fx.store, GRP, "t", 1,
						     &got, &found),
			     TBX_OK);
		cr_assert_eq(found, 0);
		cr_assert_eq(
		    tt_count(fx.path, "SELECT COUNT(*) FROM tbx_inflight"), 1);
		/* A further bump counts on from the kept gen. */
		cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
		cr_assert_eq(
		    tbx_outbox_gens_bump(fx.store, GRP, "t", parts, 1, gens),
		    TBX_OK);
		cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
		cr_assert_eq(gens[0], 3 + round);
	}
	/* Deleting a cleared marker, or none, changes nothing. */
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_delete(fx.store, GRP, "t", 0), TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_delete(fx.store, GRP, "t", 1), TBX_OK);
	cr_assert_eq(tbx_outbox_inflight_delete(fx.store, GRP, "t", 9), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_get(fx.store, GRP, "t", parts, 2, gens),
		     TBX_OK);
	cr_assert(gens[0] == 4 && gens[1] == 0);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_inflight"), 1);
	fx_close(&fx);
}

/* A row whose columns do not agree is not inserted. */
Test(obatch, an_inconsistent_row_is_refused)
{
	fx_t fx;
	brow_t b, other;
	tbx__obatch_t row;
	char a[TBX_UUID_LEN + 1];

	fx_open(&fx);
	brow_make(&b, 5, NULL);
	brow_make(&other, 4, NULL);
	tbx__uuid(a);
	row = b.row;
	row.wire = other.wire.p; /* 4 entries for 5 messages */
	row.wire_len = other.wire.len;
	cr_assert_eq(insert(&fx, &(brow_t){.row = row}), TBX_EINVAL);
	cr_assert(strstr(tbx_outbox_errmsg(fx.store), "4 entries for 5"), "%s",
		  tbx_outbox_errmsg(fx.store));
	row = other.row;
	row.cover = b.cover.p; /* fine: 5 records, 4 messages of 0..3 */
	row.cover_len = b.cover.len;
	row.msgs = b.msgs; /* 5 messages for 4 wire entries */
	row.msgs_len = b.row.msgs_len;
	cr_assert_eq(insert(&fx, &(brow_t){.row = row}), TBX_EINVAL);
	row = b.row;
	snprintf(row.attempt, sizeof(row.attempt), "%s", a);
	row.mint_seq = 3; /* an attempt, but messages without tokens */
	cr_assert_eq(insert(&fx, &(brow_t){.row = row}), TBX_EINVAL);
	cr_assert(strstr(tbx_outbox_errmsg(fx.store), "without a token"), "%s",
		  tbx_outbox_errmsg(fx.store));
	row = b.row;
	row.cover_len--;
	cr_assert_eq(insert(&fx, &(brow_t){.row = row}), TBX_EINVAL);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_obatch"), 0);
	brow_free(&b);
	brow_free(&other);
	fx_close(&fx);
}

/* A stored column that does not decode stops the reload with
 * TBX_ECORRUPT, naming the row and what is wrong. */
Test(obatch, a_corrupt_stored_row_is_refused)
{
	static const struct {
		const char *sql, *pg_sql, *why;
	} cases[] = {
	    {"UPDATE tbx_obatch SET cover = substr(cover, 1, length(cover) - "
	     "1)",
	     NULL, "cover entry 4: runs past"},
	    {"UPDATE tbx_obatch SET cover = CAST(cover || x'00' AS BLOB)",
	     "UPDATE tbx_obatch SET cover = cover || '\\x00'::bytea", "trail"},
	    {"UPDATE tbx_obatch SET wire = substr(wire, 1, 15)", NULL,
	     "wire: 10 bytes for 5 messages"},
	    {"UPDATE tbx_obatch SET wire = x'0100000000'",
	     "UPDATE tbx_obatch SET wire = '\\x0100000000'",
	     "0 entries for 5 messages"},
	    {"UPDATE tbx_obatch SET msgs = substr(msgs, 1, 100)", NULL,
	     "msgs:"},
	    {"UPDATE tbx_obatch SET tokfmt = 1, row_id = 'x'", NULL,
	     "not UUID text"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		fx_t fx;
		brow_t b;
		loaded_t l = {0};

		fx_open(&fx);
		brow_make(&b, 5, NULL);
		cr_assert_eq(insert(&fx, &b), TBX_OK);
		raw(fx.path, cases[i].sql, cases[i].pg_sql);
		cr_assert_eq(tbx_outbox_obatch_load(fx.store, GRP, on_row, &l),
			     TBX_ECORRUPT, "case %zu", i);
		cr_assert_eq(l.rows, 0);
		cr_assert(strstr(tbx_outbox_errmsg(fx.store), cases[i].why),
			  "case %zu: %s", i, tbx_outbox_errmsg(fx.store));
		cr_assert(strstr(tbx_outbox_errmsg(fx.store), "batch row"),
			  "%s", tbx_outbox_errmsg(fx.store));
		brow_free(&b);
		fx_close(&fx);
	}
}

/* A backend without batch rows answers TBX_ESCHEMA. */
static int groups_cb(void *opaque, const char *grp)
{
	char *out = opaque;
	size_t len = strlen(out);

	snprintf(out + len, 256 - len, "%s;", grp);
	return 0;
}

static int ingress_cb(void *opaque, const tbx__ingress_t *g)
{
	char *out = opaque;
	size_t len = strlen(out);

	snprintf(out + len, 256 - len, "%s/%s/%lld=%lld;", g->grp, g->topic,
		 (long long)g->partition, (long long)g->next_offset);
	return 0;
}

/* The groups the store serves (what `inspect` judges) and its ingress
 * offsets are the same on both backends: a partition's ingress row that
 * holds no offset (-1: what PostgreSQL's lock of a partition before its
 * first offset leaves) reads as none, is not listed, and serves no
 * group, whether the lock or an explicit "none" wrote it. */
Test(obatch, an_ingress_row_without_an_offset_serves_no_group)
{
	fx_t fx;
	char got[256] = "";
	int64_t next = 0;

	fx_open(&fx);
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_ingress_set(fx.store, "g-off", "t", 1, 5),
		     TBX_OK);
	/* A partition read, and so locked on PostgreSQL, and left. */
	cr_assert_eq(tbx_outbox_ingress_get(fx.store, "g-lock", "t", 0, &next),
		     TBX_OK);
	cr_assert_eq(next, -1);
	cr_assert_eq(tbx_outbox_ingress_set(fx.store, "g-none", "t", 0, -1),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);

	cr_assert_eq(tbx_outbox_ingress_get(fx.store, "g-none", "t", 0, &next),
		     TBX_OK);
	cr_assert_eq(next, -1, "none");
	cr_assert_eq(tbx_outbox_groups(fx.store, groups_cb, got), TBX_OK);
	cr_assert_str_eq(got, "g-off;");
	got[0] = '\0';
	cr_assert_eq(tbx_outbox_ingress_list(fx.store, ingress_cb, got),
		     TBX_OK);
	cr_assert_str_eq(got, "g-off/t/1=5;");
	fx_close(&fx);
}

Test(obatch, a_backend_without_batch_rows_says_so)
{
	static const tbx_outbox_ops_t none = {.name = "none"};
	tbx_outbox_t store = {&none};
	int32_t part = 0;
	int64_t gen;
	int won;

	cr_assert_eq(tbx_outbox_obatch_insert(&store, GRP, NULL), TBX_ESCHEMA);
	cr_assert_eq(tbx_outbox_obatch_set_attempt(&store, GRP, "r", "a", 1,
						   NULL, 0, NULL, 0, &won),
		     TBX_ESCHEMA);
	cr_assert_eq(tbx_outbox_obatch_delete(&store, GRP, NULL, 0, NULL),
		     TBX_ESCHEMA);
	cr_assert_eq(tbx_outbox_obatch_load(&store, GRP, on_row, NULL),
		     TBX_ESCHEMA);
	cr_assert_eq(tbx_outbox_cover_msg_find(&store, GRP, NULL, 0, NULL),
		     TBX_ESCHEMA);
	cr_assert_eq(tbx_outbox_gens_get(&store, GRP, "t", &part, 1, &gen),
		     TBX_ESCHEMA);
	cr_assert_eq(tbx_outbox_gens_bump(&store, GRP, "t", &part, 1, &gen),
		     TBX_ESCHEMA);
	const char *topic = "t";
	cr_assert_eq(tbx_outbox_gens_lock(&store, GRP, &topic, &part, 1, &gen),
		     TBX_ESCHEMA);
}

/* Two connections bumping gen of one partition at the same time: every
 * bump counts, and each sees a value of its own (1 to the total, each
 * once).  A bump that waited too long for the other's lock (TBX_EBUSY)
 * is rolled back and done again, as A is. */
enum { BUMPERS = 2, ROUNDS = 150 };

typedef struct bumper {
	tbx_outbox_t *store;
	int64_t got[ROUNDS];
	int err, retries;
} bumper_t;

static void *bump_rounds(void *arg)
{
	bumper_t *b = arg;
	int32_t part = 3;

	for (int i = 0; i < ROUNDS && !b->err; i++) {
		int err = tbx_outbox_begin(b->store);

		if (!err)
			err = tbx_outbox_gens_bump(b->store, GRP, "t", &part, 1,
						   &b->got[i]);
		if (!err)
			err = tbx_outbox_commit(b->store);
		if (err) {
			tbx_outbox_rollback(b->store);
			if (err != TBX_EBUSY) {
				b->err = err;
				break;
			}
			b->retries++;
			i--;
		}
	}
	return NULL;
}

Test(obatch, concurrent_bumps_of_one_partition_all_count)
{
	fx_t fx;
	bumper_t b[BUMPERS];
	pthread_t th[BUMPERS];
	static char seen[BUMPERS * ROUNDS + 1];
	int32_t part = 3;
	int64_t gen = -1;

	fx_open(&fx);
	memset(b, 0, sizeof(b));
	memset(seen, 0, sizeof(seen));
	for (int t = 0; t < BUMPERS; t++)
		b[t].store = tt_outbox_open(fx.path);
	for (int t = 0; t < BUMPERS; t++)
		cr_assert_eq(pthread_create(&th[t], NULL, bump_rounds, &b[t]),
			     0);
	for (int t = 0; t < BUMPERS; t++) {
		pthread_join(th[t], NULL);
		cr_assert_eq(b[t].err, TBX_OK, "bumper %d: %s", t,
			     tbx_err_name(b[t].err));
		for (int i = 0; i < ROUNDS; i++) {
			cr_assert(b[t].got[i] >= 1 &&
				      b[t].got[i] <= BUMPERS * ROUNDS,
				  "bumper %d round %d: %lld", t, i,
				  (long long)b[t].got[i]);
			cr_assert(!seen[b[t].got[i]], "value %lld seen twice",
				  (long long)b[t].got[i]);
			seen[b[t].got[i]] = 1;
		}
		tbx_outbox_close(b[t].store);
	}
	cr_assert_eq(tbx_outbox_gens_get(fx.store, GRP, "t", &part, 1, &gen),
		     TBX_OK);
	cr_assert_eq(gen, BUMPERS * ROUNDS);
	cr_assert_eq(tt_count(fx.path, "SELECT COUNT(*) FROM tbx_inflight"), 1);
	fx_close(&fx);
}

/* PostgreSQL: A's lock of a partition is a row lock.  A second
 * connection's gens_lock of another partition does not wait for the
 * first's transaction; of the same partition it waits (seen in
 * pg_stat_activity), for the row the first one's lock made and has not
 * committed yet, or for the lock of a row that was there, and once the
 * first bumps and commits it reads the gen the first wrote. */
typedef struct locker {
	tbx_outbox_t *store;
	const char *topic;
	int32_t part;
	int64_t gen;
	int err;
} locker_t;

static void *lock_one(void *arg)
{
	locker_t *l = arg;

	l->err = tbx_outbox_begin(l->store);
	/* Waiting is the test's to end, not the store's lock_timeout. */
	if (!l->err)
		l->err = tbx_outbox_exec(
		    l->store, "SET LOCAL lock_timeout = 600000", NULL, 0, NULL);
	if (!l->err)
		l->err = tbx_outbox_gens_lock(l->store, GRP, &l->topic,
					      &l->part, 1, &l->gen);
	tbx_outbox_rollback(l->store);
	return NULL;
}

Test(obatch, a_partition_lock_orders_two_As_of_it_and_no_other)
{
	fx_t fx;
	const char *topics[2] = {"t", "t"};
	int32_t parts[2] = {0, 2};
	int64_t gens[2];
	locker_t other, same;
	pthread_t th;
	char sql[512];
	time_t deadline;

	if (!tt_pg_tier())
		cr_skip_test("PostgreSQL's row locks (pg_test_outbox_batch)");
	fx_open(&fx);
	other = (locker_t){tt_outbox_open(fx.path), "t", 1, -1, -1};
	same = (locker_t){tt_outbox_open(fx.path), "t", 2, -1, -1};
	snprintf(sql, sizeof(sql),
		 "SELECT COUNT(*) FROM pg_catalog.pg_stat_activity WHERE "
		 "wait_event_type = 'Lock' AND query LIKE "
		 "'%%%s%%tbx_inflight%%'",
		 tt_store_schema(fx.path));
	/* Round 0: the rows are made by the first lock, not committed yet;
	 * round 1: they are there. */
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
		cr_assert_eq(
		    tbx_outbox_gens_lock(fx.store, GRP, topics, parts, 2, gens),
		    TBX_OK);
		cr_assert_eq(gens[1], round);
		/* Another partition, while the first transaction is open. */
		lock_one(&other);
		cr_assert_eq(other.err, TBX_OK, "%s", tbx_err_name(other.err));
		cr_assert_eq(other.gen, 0);
		/* The same partition: waits. */
		same.gen = -1;
		cr_assert_eq(pthread_create(&th, NULL, lock_one, &same), 0);
		deadline = time(NULL) + 60 * tt_time_factor();
		while (tt_pg_value(fx.path, sql) < 1 && time(NULL) < deadline)
			usleep(10000);
		cr_assert_lt(time(NULL), deadline,
			     "round %d: the second lock never waited", round);
		cr_assert_eq(tbx_outbox_gens_bump(fx.store, GRP, "t", &parts[1],
						  1, NULL),
			     TBX_OK);
		cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
		pthread_join(th, NULL);
		cr_assert_eq(same.err, TBX_OK, "%s", tbx_err_name(same.err));
		cr_assert_eq(same.gen, round + 1,
			     "round %d: the waiting lock read the committed "
			     "gen",
			     round);
	}
	tbx_outbox_close(other.store);
	tbx_outbox_close(same.store);
	fx_close(&fx);
}
