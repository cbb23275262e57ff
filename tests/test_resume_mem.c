/* The resume check's memory (consumer/resume_mem.c; docs/batched-tokens.md,
 * "The resume check"), on real service stores: rows inserted with
 * obatch_insert and gens bumped with gens_bump, on an SQLite file and, in
 * the pg tier (TBX_PG_TIER=1, ctest's pg_test_resume_mem), on a
 * PostgreSQL schema. */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "consumer/resume_mem.h"
#include "fixture.h"
#include "hop.h"
#include "outbox/outbox.h"
#include "store/msgs.h"
#include "support.h"

#define GRP   "g"
#define TOPIC "in"
#define NPART 3

typedef struct fx {
	char *dir, *path; /* path: a file, or "pg:SCHEMA" (hop.h) */
	tbx_outbox_t *store;
	tbx__resume_mem_t *mem;
} fx_t;

/* Runs @p sql on the store behind the backend's back. */
static void raw(const char *path, const char *sql)
{
	cr_assert_eq(tt_store_sql_try(path, sql, NULL), 0, "%s", sql);
}

static void fx_open(fx_t *fx)
{
	fx->dir = tt_tmpdir();
	fx->path = tt_store_new(fx->dir, "s");
	fx->store = tt_outbox_open(fx->path);
	cr_assert_eq(tbx__resume_mem_new(GRP, &fx->mem), TBX_OK);
}

static void fx_close(fx_t *fx)
{
	tbx__resume_mem_destroy(fx->mem);
	tbx_outbox_close(fx->store);
	if (tt_store_is_pg(fx->path)) {
		char drop[128];

		snprintf(drop, sizeof(drop), "DROP SCHEMA \"%s\" CASCADE",
			 tt_store_schema(fx->path));
		raw(fx->path, drop);
	}
	tt_rmrf(fx->dir);
	free(fx->dir);
	free(fx->path);
}

/*
 * A batch row of n records of topic TOPIC, record i on partition
 * i % NPART at offset base + i / NPART, one message each.  Record kinds
 * by i % 6: 0 a per-message token; 1, 2, 4 a set bit of the set of its
 * partition (index i / NPART); 3 untokened (no reference); 5 a stray
 * set bit: arrived on its partition, minted for the next one (index
 * 30000 + i, so that it never meets a non-stray bit).
 */
typedef struct brow {
	tbx__obatch_t row;
	tbx__buf_t cover, wire;
	void *msgs;
	size_t n;
	tbx__cover_ent_t *ent;
	char (*ids)[40];
	char (*outs)[TBX_UUID_LEN + 1];
} brow_t;

static void brow_make(brow_t *b, size_t n, int64_t base,
		      char sets[NPART][TBX_UUID_LEN + 1])
{
	tbx__wire_ent_t *w = calloc(n, sizeof(*w));
	tbx__mfield_t *f = calloc(n * TBX__MF_COUNT, sizeof(*f));
	char err[200];

	memset(b, 0, sizeof(*b));
	b->n = n;
	b->ent = calloc(n, sizeof(*b->ent));
	b->ids = calloc(n, sizeof(*b->ids));
	b->outs = calloc(n, sizeof(*b->outs));
	tbx__uuid(b->row.row_id);
	for (size_t i = 0; i < n; i++) {
		tbx__cover_ent_t *e = &b->ent[i];
		int32_t part = (int32_t)(i % NPART);

		tbx__uuid(b->ids[i]);
		tbx__uuid(b->outs[i]);
		*e = (tbx__cover_ent_t){TBX__COVER_HANDLED,
					TOPIC,
					part,
					base + (int64_t)(i / NPART),
					b->ids[i],
					TBX__REF_BIT,
					"",
					(uint16_t)(i / NPART),
					part};
		switch (i % 6) {
		case 0:
			e->ref = TBX__REF_TOKEN;
			e->index = 0;
			tbx__uuid(e->ref_id);
			break;
		case 3:
			e->kind = TBX__COVER_UNTOKENED;
			e->ref = TBX__REF_NONE;
			e->index = 0;
			break;
		case 5:
			e->set_part = (part + 1) % NPART;
			e->index = (uint16_t)(30000 + i);
			/* fall through */
		default:
			memcpy(e->ref_id, sets[e->set_part], TBX_UUID_LEN + 1);
		}
		w[i] = (tbx__wire_ent_t){part, 0, (uint32_t)i};
		f[i * TBX__MF_COUNT + TBX__MF_ID] =
		    (tbx__mfield_t){b->outs[i], TBX_UUID_LEN};
		f[i * TBX__MF_COUNT + TBX__MF_TOPIC] =
		    (tbx__mfield_t){"out", 3};
		f[i * TBX__MF_COUNT + TBX__MF_TYPE] = (tbx__mfield_t){"ty", 2};
		f[i * TBX__MF_COUNT + TBX__MF_PAYLOAD] =
		    (tbx__mfield_t){"payload", 7};
	}
	cr_assert_eq(tbx__cover_encode(&b->cover, b->ent, n, err, sizeof(err)),
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
	free(w);
	free(f);
}

static void brow_free(brow_t *b)
{
	tbx__buf_free(&b->cover);
	tbx__buf_free(&b->wire);
	free(b->msgs);
	free(b->ent);
	free(b->ids);
	free(b->outs);
}

static void sets_make(char sets[NPART][TBX_UUID_LEN + 1])
{
	for (int p = 0; p < NPART; p++)
		tbx__uuid(sets[p]);
}

/* What A does at commit: the row inserted and the gen of every
 * partition it covers (a stray record's: its set's) bumped, in one
 * transaction on @p store.  @p gens[p] (may be NULL) the new gens. */
static void commit_row(tbx_outbox_t *store, const char *grp, const brow_t *b,
		       int64_t gens[NPART])
{
	int32_t parts[NPART] = {0};
	int64_t got[NPART];
	size_t n = 0;

	for (int32_t p = 0; p < NPART; p++)
		for (size_t i = 0; i < b->n; i++)
			if ((b->ent[i].ref == TBX__REF_BIT
				 ? b->ent[i].set_part
				 : b->ent[i].partition) == p) {
				parts[n++] = p;
				break;
			}
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_obatch_insert(store, grp, &b->row), TBX_OK);
	cr_assert_eq(tbx_outbox_gens_bump(store, grp, TOPIC, parts, n, got),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	if (gens)
		for (size_t k = 0; k < n; k++)
			gens[parts[k]] = got[k];
}

/* The gens of every partition, as A reads them under its locks. */
static void gens_read(fx_t *fx, int64_t gens[NPART])
{
	int32_t parts[NPART] = {0, 1, 2};

	cr_assert_eq(
	    tbx_outbox_gens_get(fx->store, GRP, TOPIC, parts, NPART, gens),
	    TBX_OK);
}

/* A's step 1 over every partition: *reloaded. */
static int sync_all(fx_t *fx, int64_t gens[NPART])
{
	int32_t parts[NPART] = {0, 1, 2};
	int reloaded = -1;

	cr_assert_eq(tbx_outbox_begin(fx->store), TBX_OK);
	cr_assert_eq(tbx__resume_mem_sync(fx->mem, fx->store, TOPIC, parts,
					  NPART, gens, &reloaded),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx->store), TBX_OK);
	return reloaded;
}

/* The key of @p b's record @p i as it is redelivered: with its set bit,
 * or without one (@p by_bit 0). */
static tbx__resume_key_t key_of(const brow_t *b, size_t i, int by_bit)
{
	const tbx__cover_ent_t *e = &b->ent[i];
	tbx__resume_key_t k = {TOPIC, e->partition, e->offset, NULL, 0, 0};

	if (by_bit && e->ref == TBX__REF_BIT) {
		k.set_id = e->ref_id;
		k.index = e->index;
		k.set_part = e->set_part;
	}
	return k;
}

static tbx__resume_ans_t check(fx_t *fx, const tbx__resume_key_t *k,
			       const int64_t gens[NPART],
			       const tbx__resume_row_t **row, uint32_t *entry)
{
	return tbx__resume_mem_check(fx->mem, k, gens[tbx__resume_key_part(k)],
				     row, entry);
}

/* Every record of @p b is covered by it, by its bit and by its offset,
 * at its own cover entry. */
static void assert_row_covers(fx_t *fx, const brow_t *b,
			      const int64_t gens[NPART])
{
	for (size_t i = 0; i < b->n; i++)
		for (int by_bit = 0; by_bit < 2; by_bit++) {
			tbx__resume_key_t k = key_of(b, i, by_bit);
			const tbx__resume_row_t *row = NULL;
			uint32_t entry = UINT32_MAX;

			cr_assert_eq(check(fx, &k, gens, &row, &entry),
				     TBX__RESUME_COVERED,
				     "record %zu (by bit: %d)", i, by_bit);
			cr_assert_str_eq(row->row_id, b->row.row_id);
			cr_assert_eq(entry, (uint32_t)i, "record %zu", i);
		}
}

/* The entry of @p b with bit @p index of set @p set_id, by a scan, or
 * -1. */
static long scan_bit(const brow_t *b, const char *set_id, uint16_t index)
{
	for (size_t i = 0; i < b->n; i++)
		if (b->ent[i].ref == TBX__REF_BIT &&
		    !strcmp(b->ent[i].ref_id, set_id) &&
		    b->ent[i].index == index)
			return (long)i;
	return -1;
}

/* Covered and not covered, exact for a row of 300 records beside a
 * second row and another group's row: every record by its bit and by its
 * offset, and keys beside every one of them that no row covers. */
Test(resume_mem, covered_and_not_covered_are_exact)
{
	fx_t fx;
	char sets[NPART][TBX_UUID_LEN + 1], sets2[NPART][TBX_UUID_LEN + 1];
	brow_t big, small, other;
	int64_t gens[NPART];
	tbx__resume_stats_t st;

	fx_open(&fx);
	sets_make(sets);
	sets_make(sets2);
	brow_make(&big, 300, 1000, sets);
	brow_make(&small, 12, 5000, sets2);
	brow_make(&other, 12, 9000, sets2);
	commit_row(fx.store, GRP, &big, NULL);
	commit_row(fx.store, GRP, &small, NULL);
	commit_row(fx.store, "other", &other, NULL);
	cr_assert_eq(sync_all(&fx, gens), 1);
	cr_assert(gens[0] == 2 && gens[1] == 2 && gens[2] == 2);
	tbx__resume_mem_stats(fx.mem, &st);
	cr_assert_eq(st.resume_reloads, 1);
	cr_assert_eq(st.rows, 2, "the other group's row is not this one's");
	cr_assert_eq(st.parts, NPART);
	assert_row_covers(&fx, &big, gens);
	assert_row_covers(&fx, &small, gens);
	for (size_t i = 0; i < big.n; i++) {
		const tbx__cover_ent_t *e = &big.ent[i];
		tbx__resume_key_t k = key_of(&big, i, 1);
		const tbx__resume_row_t *row = NULL;

		/* The next offset after the row's last one on the
		 * partition, without a bit: no row has it. */
		k = key_of(&big, i, 0);
		k.offset = 1000 + 100 + (int64_t)i;
		cr_assert_eq(check(&fx, &k, gens, &row, NULL),
			     TBX__RESUME_NOT_COVERED, "record %zu", i);
		/* Another topic's record at the same place. */
		k.topic = "in2";
		k.offset = e->offset;
		cr_assert_eq(
		    tbx__resume_mem_check(fx.mem, &k, gens[0], NULL, NULL),
		    TBX__RESUME_RELOAD, "no mgen for topic in2");
		if (e->ref != TBX__REF_BIT)
			continue;
		/* The bit beside it, at an offset no row covers. */
		k = key_of(&big, i, 1);
		k.offset += 100000;
		k.index = (uint16_t)(k.index + 20000);
		cr_assert_eq(check(&fx, &k, gens, &row, NULL),
			     TBX__RESUME_NOT_COVERED, "record %zu", i);
		/* Its bit in another set (the other group's row's). */
		k = key_of(&big, i, 1);
		k.offset += 100000;
		k.set_id = sets2[k.set_part];
		if (scan_bit(&small, k.set_id, k.index) < 0) {
			cr_assert_eq(check(&fx, &k, gens, &row, NULL),
				     TBX__RESUME_NOT_COVERED, "record %zu", i);
		} else {
			cr_assert_eq(check(&fx, &k, gens, &row, NULL),
				     TBX__RESUME_COVERED, "record %zu", i);
			cr_assert_str_eq(row->row_id, small.row.row_id);
		}
		/* A copy at another offset (a natural duplicate) is found
		 * by its bit. */
		k = key_of(&big, i, 1);
		k.offset += 100000;
		cr_assert_eq(check(&fx, &k, gens, &row, NULL),
			     TBX__RESUME_COVERED, "record %zu", i);
		cr_assert_str_eq(row->row_id, big.row.row_id);
	}
	/* The same gens again: nothing to load. */
	cr_assert_eq(sync_all(&fx, gens), 0);
	tbx__resume_mem_stats(fx.mem, &st);
	cr_assert_eq(st.resume_reloads, 1);
	brow_free(&big);
	brow_free(&small);
	brow_free(&other);
	fx_close(&fx);
}

/* Another worker's A (another connection) inserts a row and bumps its
 * partitions: the next check of a record there asks for a reload, which
 * then finds the row; the partitions it did not bump answer from
 * memory meanwhile. */
Test(resume_mem, another_workers_bump_asks_for_a_reload)
{
	fx_t fx;
	char sets[NPART][TBX_UUID_LEN + 1], sets2[NPART][TBX_UUID_LEN + 1];
	brow_t mine, theirs;
	int64_t gens[NPART], read[NPART];
	tbx_outbox_t *zombie;
	tbx__resume_stats_t st;

	fx_open(&fx);
	sets_make(sets);
	sets_make(sets2);
	brow_make(&mine, 30, 0, sets);
	commit_row(fx.store, GRP, &mine, NULL);
	cr_assert_eq(sync_all(&fx, gens), 1);
	assert_row_covers(&fx, &mine, gens);
	/* One record on partition 1, with a bit of partition 1's set. */
	brow_make(&theirs, 1, 100, sets2);
	theirs.ent[0].partition = 1;
	theirs.ent[0].set_part = 1;
	memcpy(theirs.ent[0].ref_id, sets2[1], sizeof(sets2[1]));
	tbx__buf_free(&theirs.cover);
	{
		char err[200];

		cr_assert_eq(tbx__cover_encode(&theirs.cover, theirs.ent, 1,
					       err, sizeof(err)),
			     TBX_OK, "%s", err);
		theirs.row.cover = theirs.cover.p;
		theirs.row.cover_len = theirs.cover.len;
	}
	zombie = tt_outbox_open(fx.path);
	commit_row(zombie, GRP, &theirs, NULL);
	tbx_outbox_close(zombie);

	gens_read(&fx, read);
	cr_assert(read[0] == gens[0] && read[1] == gens[1] + 1 &&
		  read[2] == gens[2]);
	for (int by_bit = 0; by_bit < 2; by_bit++) {
		tbx__resume_key_t k = key_of(&theirs, 0, by_bit);

		cr_assert_eq(check(&fx, &k, read, NULL, NULL),
			     TBX__RESUME_RELOAD, "by bit: %d", by_bit);
	}
	/* Partitions 0 and 2 are as remembered. */
	for (size_t i = 0; i < mine.n; i++) {
		tbx__resume_key_t k = key_of(&mine, i, 1);

		if (tbx__resume_key_part(&k) == 1)
			cr_assert_eq(check(&fx, &k, read, NULL, NULL),
				     TBX__RESUME_RELOAD, "record %zu", i);
		else
			cr_assert_eq(check(&fx, &k, read, NULL, NULL),
				     TBX__RESUME_COVERED, "record %zu", i);
	}
	cr_assert_eq(sync_all(&fx, gens), 1);
	cr_assert(memcmp(gens, read, sizeof(read)) == 0);
	assert_row_covers(&fx, &mine, gens);
	assert_row_covers(&fx, &theirs, gens);
	tbx__resume_mem_stats(fx.mem, &st);
	cr_assert_eq(st.resume_reloads, 2);
	cr_assert_eq(st.rows, 2);
	brow_free(&mine);
	brow_free(&theirs);
	fx_close(&fx);
}

/* A rebalance drops memory whole: nothing is trusted after it, even
 * with every gen unchanged, until it is loaded again. */
Test(resume_mem, a_rebalance_drops_memory_until_a_reload)
{
	fx_t fx;
	char sets[NPART][TBX_UUID_LEN + 1];
	brow_t b;
	int64_t gens[NPART], read[NPART];
	tbx__resume_stats_t st;

	fx_open(&fx);
	sets_make(sets);
	brow_make(&b, 60, 7, sets);
	commit_row(fx.store, GRP, &b, NULL);
	cr_assert_eq(sync_all(&fx, gens), 1);
	assert_row_covers(&fx, &b, gens);
	tbx__resume_mem_drop(fx.mem);
	gens_read(&fx, read);
	cr_assert(memcmp(gens, read, sizeof(read)) == 0);
	for (size_t i = 0; i < b.n; i++)
		for (int by_bit = 0; by_bit < 2; by_bit++) {
			tbx__resume_key_t k = key_of(&b, i, by_bit);

			cr_assert_eq(check(&fx, &k, read, NULL, NULL),
				     TBX__RESUME_RELOAD, "record %zu", i);
		}
	tbx__resume_mem_stats(fx.mem, &st);
	cr_assert(st.drops == 1 && st.rows == 0 && st.parts == 0);
	cr_assert_eq(sync_all(&fx, gens), 1, "unchanged gens, still loaded");
	assert_row_covers(&fx, &b, gens);
	tbx__resume_mem_stats(fx.mem, &st);
	cr_assert_eq(st.resume_reloads, 2);
	brow_free(&b);
	fx_close(&fx);
}

/* A's own row enters memory at its commit with the gens its bump
 * returned, without a reload; E's delete takes it out.  A bump that
 * skipped a gen (another A in between) leaves the partition unknown. */
Test(resume_mem, own_rows_enter_and_leave_without_a_reload)
{
	fx_t fx;
	char sets[NPART][TBX_UUID_LEN + 1];
	brow_t b, c;
	int64_t gens[NPART], bumped[NPART];
	int32_t parts[NPART] = {0, 1, 2};
	const char *ids[1];
	tbx__resume_stats_t st;

	fx_open(&fx);
	sets_make(sets);
	brow_make(&b, 24, 50, sets);
	cr_assert_eq(sync_all(&fx, gens), 1);
	cr_assert(gens[0] == 0 && gens[1] == 0 && gens[2] == 0);
	for (size_t i = 0; i < b.n; i++) {
		tbx__resume_key_t k = key_of(&b, i, 1);

		cr_assert_eq(check(&fx, &k, gens, NULL, NULL),
			     TBX__RESUME_NOT_COVERED, "record %zu", i);
	}
	commit_row(fx.store, GRP, &b, bumped);
	cr_assert_eq(tbx__resume_mem_add(fx.mem, &b.row), TBX_OK);
	tbx__resume_mem_bumped(fx.mem, TOPIC, parts, NPART, bumped);
	assert_row_covers(&fx, &b, bumped);
	cr_assert_eq(sync_all(&fx, gens), 0);
	cr_assert(memcmp(gens, bumped, sizeof(gens)) == 0);
	tbx__resume_mem_stats(fx.mem, &st);
	cr_assert(st.resume_reloads == 1 && st.rows == 1);

	/* E. */
	ids[0] = b.row.row_id;
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx_outbox_obatch_delete(fx.store, GRP, ids, 1, NULL),
		     TBX_OK);
	cr_assert_eq(tbx_outbox_commit(fx.store), TBX_OK);
	tbx__resume_mem_forget(fx.mem, ids, 1);
	for (size_t i = 0; i < b.n; i++) {
		tbx__resume_key_t k = key_of(&b, i, 1);

		cr_assert_eq(check(&fx, &k, gens, NULL, NULL),
			     TBX__RESUME_NOT_COVERED, "record %zu", i);
	}

	/* Another worker's A bumps every partition in between: this A's
	 * bump returns 2 more than memory had, so its partitions are
	 * unknown after it, until a reload finds both rows. */
	{
		char sets2[NPART][TBX_UUID_LEN + 1];
		tbx_outbox_t *zombie = tt_outbox_open(fx.path);

		sets_make(sets2);
		brow_make(&c, 3, 80, sets);
		commit_row(zombie, GRP, &c, NULL);
		tbx_outbox_close(zombie);
		brow_free(&b);
		brow_make(&b, 3, 90, sets2);
		commit_row(fx.store, GRP, &b, bumped);
		for (int p = 0; p < NPART; p++)
			cr_assert_eq(bumped[p], gens[p] + 2);
		cr_assert_eq(tbx__resume_mem_add(fx.mem, &b.row), TBX_OK);
		tbx__resume_mem_bumped(fx.mem, TOPIC, parts, NPART, bumped);
		for (size_t i = 0; i < b.n; i++) {
			tbx__resume_key_t k = key_of(&b, i, 1);

			cr_assert_eq(check(&fx, &k, bumped, NULL, NULL),
				     TBX__RESUME_RELOAD, "record %zu", i);
		}
		cr_assert_eq(sync_all(&fx, gens), 1);
		assert_row_covers(&fx, &b, gens);
		assert_row_covers(&fx, &c, gens);
		brow_free(&c);
	}
	tbx__resume_mem_stats(fx.mem, &st);
	cr_assert(st.resume_reloads == 2 && st.rows == 2);
	brow_free(&b);
	fx_close(&fx);
}

/* A row that does not decode fails the load: memory is dropped whole,
 * counted, and every check asks for a reload. */
Test(resume_mem, a_corrupt_row_drops_memory)
{
	fx_t fx;
	char sets[NPART][TBX_UUID_LEN + 1], sets2[NPART][TBX_UUID_LEN + 1];
	brow_t b, c;
	int64_t gens[NPART], read[NPART];
	int32_t parts[NPART] = {0, 1, 2};
	tbx__resume_stats_t st;
	int reloaded = -1;

	fx_open(&fx);
	sets_make(sets);
	sets_make(sets2);
	brow_make(&b, 9, 0, sets);
	brow_make(&c, 9, 100, sets2);
	commit_row(fx.store, GRP, &b, NULL);
	cr_assert_eq(sync_all(&fx, gens), 1);
	raw(fx.path, "UPDATE tbx_obatch SET cover = substr(cover, 1, "
		     "length(cover) - 1)");
	commit_row(fx.store, GRP, &c, NULL);
	cr_assert_eq(tbx_outbox_begin(fx.store), TBX_OK);
	cr_assert_eq(tbx__resume_mem_sync(fx.mem, fx.store, TOPIC, parts, NPART,
					  read, &reloaded),
		     TBX_ECORRUPT);
	cr_assert_eq(tbx_outbox_rollback(fx.store), TBX_OK);
	cr_assert_eq(reloaded, 0);
	tbx__resume_mem_stats(fx.mem, &st);
	cr_assert(st.resume_reloads == 2 && st.load_failures == 1 &&
		  st.rows == 0 && st.parts == 0);
	for (size_t i = 0; i < b.n; i++) {
		tbx__resume_key_t k = key_of(&b, i, 1);

		cr_assert_eq(check(&fx, &k, gens, NULL, NULL),
			     TBX__RESUME_RELOAD, "record %zu", i);
		cr_assert_eq(check(&fx, &k, read, NULL, NULL),
			     TBX__RESUME_RELOAD, "record %zu", i);
	}
	brow_free(&b);
	brow_free(&c);
	fx_close(&fx);
}
