/*
 * The receiver of token sets (docs/batched-tokens.md, "Built so far"): a
 * worker handles records in the batched format (tbx-tset, tbx-tbit) once
 * each, beside per-message and untokened ones.  A's check of a record's
 * bit (set: handled; clear: a proven duplicate; no row: dropped once its
 * tbx-seq is proven issued; an index beyond the set: malformed), the
 * record's reference in its outbox row, and D clearing the bit (apart,
 * joined, finish.defer), on separate stores and on one file (in the pg
 * tier: two databases and joined).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/msg.h"
#include "fixture.h"

/* A sequence number no store issues for centuries (they are ms * 1000). */
#define NEVER_ISSUED "9000000000000000000"

typedef struct env {
	char *dir, *store, *tokens;
	tt_cluster_t *c;
	tt_hop_t hop;
	tbx_worker_t *w;
} env_t;

static void env_init(env_t *e, int one_file, const char *k, const char *v)
{
	char err[512];

	e->dir = tt_tmpdir();
	e->store = tt_store_new(e->dir, "s1");
	/* One file: the service store's own file (in the pg tier a token
	 * schema on the same connection, the joined path). */
	e->tokens = one_file && !tt_pg_tier()
			? strdup(e->store)
			: tt_tokens_new(e->dir, "tokens", one_file);
	e->c = tt_cluster_new(1);
	tt_cluster_topic(e->c, "in", 2);
	tt_cluster_topic(e->c, "in.dlq", 1);
	tt_hop_table(e->store, "hop1");
	e->hop = (tt_hop_t){.table = "hop1"};
	e->w = tbx_worker_new(
	    tt_conf(e->c->bootstraps, "g1", e->store, e->tokens, k, v, NULL),
	    err, sizeof(err));
	cr_assert(e->w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(e->w, "in", "Ping", tt_hop_handle, &e->hop),
	    TBX_OK);
	/* The first poll subscribes the group: the sets minted after it
	 * have a row for it. */
	cr_assert_eq(tbx_worker_poll(e->w, 0, NULL), TBX_OK);
}

static void env_fini(env_t *e)
{
	tbx_worker_destroy(e->w);
	tt_cluster_destroy(e->c);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->store);
	free(e->tokens);
}

static tbx_stats_t stats(const env_t *e)
{
	tbx_stats_t st;

	tbx_worker_stats(e->w, &st);
	return st;
}

/* Drives the worker until the hop holds @p n effects and it is idle. */
static void drive_to(env_t *e, int64_t n)
{
	tt_want_t want = {e->store, "SELECT COUNT(*) FROM hop1", n};

	cr_assert(tt_drive(&e->w, 1, tt_reached, &want, 10, 60));
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM hop1"), n);
	cr_assert_eq(
	    tt_count(e->store, "SELECT COUNT(DISTINCT payload) FROM hop1"), n,
	    "each record handled once");
}

typedef struct polled_want {
	tbx_worker_t *w;
	uint64_t consumed;
} polled_want_t;

static int polled(void *opaque)
{
	const polled_want_t *want = opaque;
	tbx_stats_t st;

	tbx_worker_stats(want->w, &st);
	return st.consumed >= want->consumed;
}

/* Drives the worker until it polled the @p more records produced since
 * it last ran, and is idle (nothing new to count on).  Idle alone is not
 * enough: a loaded machine can leave a second without records before
 * they come. */
static void drive_idle(env_t *e, uint64_t more)
{
	polled_want_t want = {e->w, stats(e).consumed + more};

	cr_assert(tt_drive(&e->w, 1, polled, &want, 20, 60));
}

/* @p r with its headers @p name1 (and @p name2, may be NULL) set to the
 * values given instead, and @p payload; the rest copied.  Free with
 * tt_records_free(). */
static tt_record_t *variant(const tt_record_t *r, const char *payload,
			    const char *name1, const char *v1,
			    const char *name2, const char *v2)
{
	tt_record_t *o = calloc(1, sizeof(*o));

	o->partition = r->partition;
	o->key = r->key ? strdup(r->key) : NULL;
	o->payload = strdup(payload);
	o->headers = rd_kafka_headers_copy(r->headers);
	rd_kafka_header_remove(o->headers, name1);
	rd_kafka_header_add(o->headers, name1, -1, v1, -1);
	if (name2) {
		rd_kafka_header_remove(o->headers, name2);
		rd_kafka_header_add(o->headers, name2, -1, v2, -1);
	}
	return o;
}

/* The record with payload @p payload among @p recs. */
static const tt_record_t *find(const tt_record_t *recs, size_t cnt,
			       const char *payload)
{
	for (size_t i = 0; i < cnt; i++)
		if (recs[i].payload && strcmp(recs[i].payload, payload) == 0)
			return &recs[i];
	cr_assert_fail("no record %s", payload);
	return NULL;
}

/*
 * Ten batched records in two sets (one per partition), each set with one
 * bit more than was sent: each handled once, its bit cleared, the rows
 * kept for the spare bit.  Copies of all ten find their bits clear:
 * dropped.  The spare bits' records come: handled, and the sets are gone.
 * Copies then find no row: dropped, their tbx-seq being this store's; a
 * copy whose tbx-seq the store never issued is dead-lettered instead.
 */
static void once_and_copies(int one_file)
{
	env_t e;
	tt_set_t sets[2];
	tt_record_t *recs, *more[2], *forged;
	char bit[16];
	size_t cnt;
	tbx_stats_t st;

	env_init(&e, one_file, NULL, NULL);
	tt_publish_sets(e.c->bootstraps, e.tokens, "in", "Ping", 10, 2, 1, "m",
			sets);
	cr_assert_eq(sets[0].nbits, 6);
	drive_to(&e, 10);
	drive_idle(&e, 0);
	st = stats(&e);
	cr_assert_eq(st.processed, 10);
	cr_assert_eq(st.tokens_consumed, 10, "a bit cleared per record");
	cr_assert_eq(st.duplicates_dropped, 0);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	cr_assert_eq(tt_count(e.tokens,
			      "SELECT COUNT(*) FROM tbx_tset WHERE grp = 'g1'"),
		     2, "each set keeps its spare bit");

	/* Copies of all ten while the sets are there: bits clear. */
	cnt = tt_read_topic(e.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 10);
	tt_reproduce(e.c->bootstraps, "in", recs, cnt);
	drive_idle(&e, cnt);
	drive_to(&e, 10);
	st = stats(&e);
	cr_assert_eq(st.duplicates_dropped, 10);
	cr_assert_eq(st.dead_lettered, 0);

	/* The spare bits (index 5 of each set): the sets' last tokens. */
	for (int p = 0; p < 2; p++) {
		char payload[16];
		const tt_record_t *r = find(recs, cnt, p ? "m-1" : "m-0");
		char id[TBX_UUID_LEN + 1];

		snprintf(bit, sizeof(bit), "%d:5", p);
		snprintf(payload, sizeof(payload), "spare-%d", p);
		tbx__uuid(id);
		more[p] = variant(r, payload, "tbx-tbit", bit, "tbx-id", id);
		tt_reproduce(e.c->bootstraps, "in", more[p], 1);
		tt_records_free(more[p], 1);
	}
	drive_to(&e, 12);
	drive_idle(&e, 0);
	cr_assert_eq(tt_count(e.tokens,
			      "SELECT COUNT(*) FROM tbx_tset WHERE grp = 'g1'"),
		     0, "a set goes with its last bit");
	cr_assert_eq(stats(&e).tokens_consumed, 12);

	/* Copies once the sets are gone: their tbx-seq is this store's. */
	tt_reproduce(e.c->bootstraps, "in", recs, cnt);
	drive_idle(&e, cnt);
	drive_to(&e, 12);
	st = stats(&e);
	cr_assert_eq(st.duplicates_dropped, 20);
	cr_assert_eq(st.dead_lettered, 0);

	/* A copy whose number this store never issued proves nothing. */
	forged = variant(find(recs, cnt, "m-2"), "m-2", "tbx-seq", NEVER_ISSUED,
			 NULL, NULL);
	tt_reproduce(e.c->bootstraps, "in", forged, 1);
	tt_records_free(forged, 1);
	tt_records_free(recs, cnt);
	drive_idle(&e, 1);
	drive_to(&e, 12);
	st = stats(&e);
	cr_assert_eq(st.dead_lettered, 1);
	cr_assert_eq(st.store_mismatches, 1);
	cr_assert_eq(st.duplicates_dropped, 20);
	cnt = tt_read_topic(e.c->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 1);
	cr_assert(strstr(recs[0].dlq_error,
			 "tbx-seq " NEVER_ISSUED " was never issued"),
		  "%s", recs[0].dlq_error);
	tt_records_free(recs, cnt);
	env_fini(&e);
}

Test(tsets, each_once_copies_dropped_sets_cleared_separate_stores)
{
	once_and_copies(0);
}

Test(tsets, each_once_copies_dropped_sets_cleared_one_file)
{
	once_and_copies(1);
}

/* A record naming a bit its set does not have is malformed: dead-lettered
 * with the reason, once (its copy is dropped). */
static void index_beyond(int one_file)
{
	env_t e;
	tt_set_t set;
	tt_record_t *recs, *bad;
	size_t cnt;
	char id[TBX_UUID_LEN + 1];

	env_init(&e, one_file, NULL, NULL);
	tt_publish_sets(e.c->bootstraps, e.tokens, "in", "Ping", 1, 1, 1, "m",
			&set);
	cr_assert_eq(set.nbits, 2);
	drive_to(&e, 1);
	cnt = tt_read_topic(e.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 1);
	tbx__uuid(id);
	bad = variant(&recs[0], "beyond", "tbx-tbit", "0:2", "tbx-id", id);
	tt_reproduce(e.c->bootstraps, "in", bad, 1);
	tt_reproduce(e.c->bootstraps, "in", bad, 1);
	tt_records_free(bad, 1);
	tt_records_free(recs, cnt);
	drive_idle(&e, 2);
	drive_to(&e, 1);
	cr_assert_eq(stats(&e).dead_lettered, 1, "its copy is dropped");
	cnt = tt_read_topic(e.c->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 1);
	for (size_t i = 0; i < cnt; i++) {
		cr_assert_str_eq(recs[i].dlq_error, TBX_TBIT_RANGE);
		cr_assert_str_eq(recs[i].payload, "beyond");
	}
	tt_records_free(recs, cnt);
	cr_assert_eq(tt_count(e.tokens,
			      "SELECT COUNT(*) FROM tbx_tset WHERE grp = 'g1'"),
		     1, "the set keeps its pending bit");
	env_fini(&e);
}

Test(tsets, an_index_beyond_the_set_is_dead_lettered_separate_stores)
{
	index_beyond(0);
}

Test(tsets, an_index_beyond_the_set_is_dead_lettered_one_file)
{
	index_beyond(1);
}

/* Per-message, batched and untokened records in one batch: each handled
 * once, the tokened ones' copies dropped, every token consumed. */
static void mixed(int one_file)
{
	env_t e;
	tt_record_t *recs, sel[10];
	size_t cnt, tokened = 0;
	tbx_stats_t st;

	env_init(&e, one_file, "ingress.untokened", "offsets");
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 4, 2, "p");
	tt_publish_sets(e.c->bootstraps, e.tokens, "in", "Ping", 4, 2, 0, "b",
			NULL);
	tt_produce_plain(e.c->bootstraps, "in", 0, "k", "u-0", "Ping");
	tt_produce_plain(e.c->bootstraps, "in", 1, "k", "u-1", "Ping");
	drive_to(&e, 10);
	st = stats(&e);
	cr_assert_eq(st.processed, 10);
	cr_assert_eq(st.tokens_consumed, 8);
	cr_assert_eq(st.untokened, 2);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0);
	/* The tokened records again (an untokened copy at a new offset is a
	 * new record). */
	cnt = tt_read_topic(e.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 10);
	for (size_t i = 0; i < cnt; i++)
		if (recs[i].id)
			sel[tokened++] = recs[i]; /* borrowed */
	cr_assert_eq(tokened, 8);
	tt_reproduce(e.c->bootstraps, "in", sel, tokened);
	tt_records_free(recs, cnt);
	drive_idle(&e, tokened);
	drive_to(&e, 10);
	st = stats(&e);
	cr_assert_eq(st.duplicates_dropped, 8);
	cr_assert_eq(st.dead_lettered, 0);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	env_fini(&e);
}

Test(tsets, a_mixed_batch_separate_stores)
{
	mixed(0);
}

Test(tsets, a_mixed_batch_one_file)
{
	mixed(1);
}
