/*
 * outbox.layout=batch on PostgreSQL, two workers of one group at once
 * (docs/batched-tokens.md, "PostgreSQL without serialising workers"): A
 * locks its partitions' tbx_inflight rows, so two workers on different
 * partitions never wait for each other in A, and two A's of one
 * partition are ordered -- the second reads the gen the first bumped,
 * reloads, and resumes or drops what the first handled, never handling a
 * record twice (which of the batch's later records each handles is
 * theirs to race for).
 *
 * Each worker is polled by a thread of its own; a gate in the handler
 * holds one worker's A open (its transaction and its locks) until the
 * test opens it, after checking what the other worker did meanwhile.
 */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "consumer/worker.h"
#include "fixture.h"

/* The handler's gate: the calls it saw, and the records it holds. */
typedef struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int held;	/* handlers waiting at the gate now */
	int open;	/* the test opened it */
	int calls;	/* every call, held or not */
	int hold_part;	/* hold records of this partition (-1: none) */
	int hold_first; /* hold only the first call */
	tt_hop_t hop;
} gate_t;

static void gate_init(gate_t *g, int hold_part, int hold_first)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	g->hold_part = hold_part;
	g->hold_first = hold_first;
	g->hop = (tt_hop_t){
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
}

static void gate_open(gate_t *g)
{
	pthread_mutex_lock(&g->mu);
	g->open = 1;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

static int gate_held(gate_t *g)
{
	int held;

	pthread_mutex_lock(&g->mu);
	held = g->held;
	pthread_mutex_unlock(&g->mu);
	return held;
}

static int gate_calls(gate_t *g)
{
	int calls;

	pthread_mutex_lock(&g->mu);
	calls = g->calls;
	pthread_mutex_unlock(&g->mu);
	return calls;
}

static tbx_verdict_t gate_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				 void *opaque)
{
	gate_t *g = opaque;
	int hold;

	pthread_mutex_lock(&g->mu);
	g->calls++;
	hold = !g->open &&
	       (g->hold_first ? g->calls == 1
			      : tbx_msg_partition(msg) == g->hold_part);
	if (hold) {
		g->held++;
		pthread_cond_broadcast(&g->cv);
		while (!g->open)
			pthread_cond_wait(&g->cv, &g->mu);
		g->held--;
	}
	pthread_mutex_unlock(&g->mu);
	return tt_hop_handle(ctx, msg, &g->hop);
}

/* A worker polled by a thread of its own until told to stop. */
typedef struct runner {
	tbx_worker_t *w;
	pthread_t thread;
	atomic_int stop;
	int failed;
	char why[512];
} runner_t;

static void *run(void *opaque)
{
	runner_t *r = opaque;

	while (!atomic_load(&r->stop))
		if (tbx_worker_poll(r->w, 50, NULL) != TBX_OK) {
			snprintf(r->why, sizeof(r->why), "%s",
				 tbx_worker_errstr(r->w));
			r->failed = 1;
			break;
		}
	return NULL;
}

static void runner_start(runner_t *r, tbx_worker_t *w)
{
	r->w = w;
	atomic_init(&r->stop, 0);
	r->failed = 0;
	cr_assert_eq(pthread_create(&r->thread, NULL, run, r), 0);
}

static void runner_stop(runner_t *r)
{
	atomic_store(&r->stop, 1);
	pthread_join(r->thread, NULL);
	cr_assert_not(r->failed, "a worker's poll failed: %s", r->why);
}

typedef struct env {
	char *dir, *store, *tokens;
	tt_cluster_t *c;
	gate_t gate;
} env_t;

static void env_init(env_t *e, int parts)
{
	if (!tt_pg_tier())
		cr_skip_test("the pg tier's (pg_test_pg_obatch)");
	e->dir = tt_tmpdir();
	e->store = tt_store_new(e->dir, "s1");
	e->tokens = tt_tokens_new(e->dir, "tokens", 0);
	e->c = tt_cluster_new(1);
	tt_cluster_topic(e->c, "in", parts);
	tt_cluster_topic(e->c, "out", parts);
	tt_cluster_topic(e->c, "in.dlq", 1);
	tt_subscribe(e->tokens, "in", "g1");
	tt_hop_table(e->store, "hop1");
}

static void env_fini(env_t *e)
{
	tt_cluster_destroy(e->c);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->store);
	free(e->tokens);
}

/* A worker of g1 with outbox.layout=batch handling "in" through the
 * gate; it waits for a lock up to 10 minutes (the test decides when the
 * gate opens, not a timeout). */
static tbx_worker_t *worker(env_t *e, const char *id)
{
	char err[512];
	tbx_worker_t *w =
	    tbx_worker_new(tt_conf(e->c->bootstraps, "g1", e->store, e->tokens,
				   "outbox.layout", "batch", "worker.id", id,
				   "store.busy.timeout.ms", "600000", NULL),
			   err, sizeof(err));

	cr_assert(w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(w, "in", "Ping", gate_handle, &e->gate),
	    TBX_OK);
	return w;
}

/* Waits up to a minute (stretched under sanitizers) for @p done. */
static int wait_for(int (*done)(void *), void *opaque)
{
	time_t deadline = time(NULL) + 60 * tt_time_factor();

	while (!done(opaque)) {
		if (time(NULL) >= deadline)
			return 0;
		usleep(20000);
	}
	return 1;
}

static int one_partition_each(void *opaque)
{
	tbx_worker_t **w = opaque;

	return w[0]->part_cnt == 1 && w[1]->part_cnt == 1;
}

static int gate_holds(void *opaque)
{
	return gate_held(opaque) >= 1;
}

typedef struct want {
	const char *db, *sql;
	int64_t n;
} want_t;

static int count_is(void *opaque)
{
	const want_t *w = opaque;

	return tt_count(w->db, w->sql) == w->n;
}

/* Nothing of the batch rows is left, every token consumed. */
static void nothing_left(const env_t *e)
{
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM tbx_obatch"), 0);
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM tbx_cover_msg"),
		     0);
	cr_assert_eq(tt_count(e->tokens,
			      "SELECT COUNT(*) FROM tbx_tset WHERE grp = 'g1'"),
		     0, "every incoming bit cleared");
}

/*
 * Two workers of g1, one partition each (the group's assignment).  The
 * worker on partition 0 is held inside its handler: its A's transaction
 * is open and holds partition 0's tbx_inflight row.  The worker on
 * partition 1 handles and commits all its records meanwhile: its A
 * locks only partition 1's row.  Then the gate opens and partition 0's
 * records follow, each once.
 */
Test(pg_obatch, workers_on_different_partitions_do_not_wait_for_each_other)
{
	env_t e;
	tbx_worker_t *w[2];
	runner_t r[2];

	env_init(&e, 2);
	gate_init(&e.gate, 0, 0);
	w[0] = worker(&e, "w0");
	w[1] = worker(&e, "w1");
	runner_start(&r[0], w[0]);
	runner_start(&r[1], w[1]);
	cr_assert(wait_for(one_partition_each, w),
		  "the group never gave each worker one partition");
	/* Record i to partition i % 2, with a set bit. */
	tt_publish_sets(e.c->bootstraps, e.tokens, "in", "Ping", 12, 2, 0, "s",
			NULL);
	cr_assert(wait_for(gate_holds, &e.gate),
		  "partition 0's worker never reached its handler");
	want_t p1 = {e.store, "SELECT COUNT(*) FROM hop1 WHERE part = 1", 6};
	cr_assert(
	    wait_for(count_is, &p1),
	    "partition 1's records were not committed while partition "
	    "0's A held its lock (%d committed)",
	    (int)tt_count(e.store, "SELECT COUNT(*) FROM hop1 WHERE part = 1"));
	/* Partition 0's A is still open: nothing of it committed. */
	cr_assert_eq(gate_held(&e.gate), 1);
	cr_assert_eq(
	    tt_count(e.store, "SELECT COUNT(*) FROM hop1 WHERE part = 0"), 0);
	gate_open(&e.gate);
	want_t all = {e.store, "SELECT COUNT(*) FROM hop1", 12};
	cr_assert(wait_for(count_is, &all), "not every record was handled");
	want_t done = {e.store, "SELECT COUNT(*) FROM tbx_obatch", 0};
	cr_assert(wait_for(count_is, &done), "batch rows were left");
	runner_stop(&r[0]);
	runner_stop(&r[1]);
	cr_assert_eq(
	    tt_count(e.store, "SELECT COUNT(DISTINCT payload) FROM hop1"), 12,
	    "each record handled once");
	cr_assert_eq(gate_calls(&e.gate), 12);
	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	nothing_left(&e);
	env_fini(&e);
}

/* A session of the test's store waits for a lock on a tbx_inflight row
 * of its schema. */
static int waits_for_inflight(void *opaque)
{
	const env_t *e = opaque;
	char sql[512];

	snprintf(
	    sql, sizeof(sql),
	    "SELECT COUNT(*) FROM pg_catalog.pg_stat_activity WHERE "
	    "wait_event_type = 'Lock' AND query LIKE '%%%s%%tbx_inflight%%'",
	    tt_store_schema(e->store));
	return tt_pg_value(e->store, sql) >= 1;
}

/* The second worker waits for the lock, or (were A's partitions not
 * locked) has run a handler of its own. */
static int waits_or_handles(void *opaque)
{
	env_t *e = opaque;

	return waits_for_inflight(e) || gate_calls(&e->gate) >= 2;
}

/*
 * Two workers of g1 on one partition at once (a zombie and the new
 * owner: both assigned it directly).  The first is held in its first
 * handler call, its A holding the partition's lock.  The second takes
 * the same records and waits for that lock (seen in pg_stat_activity).
 * The gate opens: the first commits its batch row and bumps gen; the
 * second then reads the new gen, reloads, finds the row (or finds it
 * gone and the bits cleared) and resumes or drops every record.  The
 * handler runs once per record, and no record is handled twice.
 */
Test(pg_obatch, two_As_of_one_partition_are_ordered)
{
	env_t e;
	tbx_worker_t *w[2];
	runner_t r[2];
	tbx_stats_t st;

	env_init(&e, 1);
	gate_init(&e.gate, -1, 1);
	tt_publish_sets(e.c->bootstraps, e.tokens, "in", "Ping", 6, 1, 0, "s",
			NULL);
	w[0] = worker(&e, "w0");
	w[1] = worker(&e, "w1");
	tbx__worker_assign_directly(w[0]);
	tbx__worker_assign_directly(w[1]);
	runner_start(&r[0], w[0]);
	cr_assert(wait_for(gate_holds, &e.gate),
		  "the first worker never reached its handler");
	runner_start(&r[1], w[1]);
	cr_assert(wait_for(waits_or_handles, &e),
		  "the second worker neither waited for the partition's lock "
		  "nor handled a record");
	/* It waits: nothing of the second worker's ran meanwhile. */
	cr_assert_eq(gate_calls(&e.gate), 1,
		     "the second worker ran a handler while the first one's A "
		     "held the partition");
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), 0);
	gate_open(&e.gate);
	want_t all = {e.store, "SELECT COUNT(*) FROM hop1", 6};
	cr_assert(wait_for(count_is, &all), "not every record was handled");
	want_t done = {e.store, "SELECT COUNT(*) FROM tbx_obatch", 0};
	cr_assert(wait_for(count_is, &done), "batch rows were left");
	runner_stop(&r[0]);
	runner_stop(&r[1]);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) - COUNT(DISTINCT "
				       "payload) FROM hop1"),
		     0, "a record was handled twice");
	cr_assert_eq(gate_calls(&e.gate), 6, "the handler ran %d times",
		     gate_calls(&e.gate));
	/* The second worker's first batch began at the held record: it
	 * resumed the first one's row or dropped the record, at least. */
	tbx_worker_stats(w[1], &st);
	cr_assert_geq(st.resumed + st.duplicates_dropped, 1,
		      "the second worker neither resumed nor dropped");
	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	nothing_left(&e);
	env_fini(&e);
}

/* A connection of the test's own to the service store, its search_path
 * the store's schema. */
static PGconn *raw_connect(const char *store)
{
	char url[2200], sql[256];
	PGconn *pg = PQconnectdb(tt_store_url(store, url, sizeof(url)));
	PGresult *res;

	cr_assert_eq(PQstatus(pg), CONNECTION_OK, "%s", PQerrorMessage(pg));
	snprintf(sql, sizeof(sql), "SET search_path TO \"%s\"",
		 tt_store_schema(store));
	res = PQexec(pg, sql);
	cr_assert_eq(PQresultStatus(res), PGRES_COMMAND_OK, "%s",
		     PQerrorMessage(pg));
	PQclear(res);
	return pg;
}

static void raw_exec(PGconn *pg, const char *sql)
{
	PGresult *res = PQexec(pg, sql);
	ExecStatusType st = PQresultStatus(res);

	cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s",
		  sql, PQerrorMessage(pg));
	PQclear(res);
}

static int plain_after_handled(void *opaque)
{
	return tt_count(opaque, "SELECT COUNT(*) FROM hop1 WHERE payload = "
				"'plain-after'") == 1;
}

/*
 * A reads a record's token only once it holds the lock of the partition
 * that orders it.  A stray copy of a set record (its set minted for
 * partition 1 of "src", copied to partition 0 of "in") makes A lock
 * partition 1 of "in" as well; the test holds that lock first.  While
 * the worker waits for it, what another worker's A, D and E of the
 * record would leave is made: gen bumped under the lock, the set's row
 * gone (its only bit cleared).  Once the lock is released the worker
 * must read the set gone and drop the copy; a token read before the
 * lock would still say "set" and run the handler.
 */
Test(pg_obatch, a_token_is_read_only_under_its_partitions_lock)
{
	env_t e;
	tt_set_t sets[2];
	tt_record_t *recs;
	tbx_worker_t *w;
	runner_t r;
	tbx_stats_t st;
	PGconn *pg;
	char sql[512];
	size_t n;

	env_init(&e, 2);
	gate_init(&e.gate, -1, 0);
	tt_cluster_topic(e.c, "src", 2);
	tt_subscribe(e.tokens, "src", "g1");
	tt_publish_sets(e.c->bootstraps, e.tokens, "src", "Ping", 2, 2, 0, "s",
			sets);
	/* ingress.untokened=offsets: a plain record after the copy says
	 * when the copy was judged. */
	char err[512];
	w = tbx_worker_new(tt_conf(e.c->bootstraps, "g1", e.store, e.tokens,
				   "outbox.layout", "batch",
				   "ingress.untokened", "offsets",
				   "store.busy.timeout.ms", "600000", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", gate_handle, &e.gate),
		     TBX_OK);
	tbx__worker_assign_directly(w);
	pg = raw_connect(e.store);
	raw_exec(pg, "INSERT INTO tbx_inflight (grp, topic, \"partition\", "
		     "first_offset, last_offset, crashes, suspect_until, gen) "
		     "VALUES ('g1', 'in', 1, -1, -1, 0, -1, 0)");
	raw_exec(pg, "BEGIN");
	raw_exec(pg, "SELECT gen FROM tbx_inflight WHERE grp = 'g1' AND topic "
		     "= 'in' AND \"partition\" = 1 FOR UPDATE");
	/* The copy: record 1 of "src" (partition 1, its set's), on
	 * partition 0 of "in". */
	n = tt_read_topic(e.c->bootstraps, "src", &recs);
	cr_assert_eq(n, 2);
	for (size_t i = 0; i < n; i++)
		if (recs[i].partition == 1) {
			recs[i].partition = 0;
			tt_reproduce(e.c->bootstraps, "in", &recs[i], 1);
		}
	tt_records_free(recs, n);
	runner_start(&r, w);
	cr_assert(wait_for(waits_for_inflight, &e),
		  "the worker never waited for partition 1's lock");
	/* Another worker's A, D and E of the record, as they end. */
	snprintf(sql, sizeof(sql),
		 "DELETE FROM tbx_tset WHERE grp = 'g1' AND set_id = '%s'",
		 sets[1].id);
	cr_assert_eq(tt_store_sql_try(e.tokens, sql, NULL), 0);
	raw_exec(pg, "UPDATE tbx_inflight SET gen = gen + 1 WHERE grp = 'g1' "
		     "AND topic = 'in' AND \"partition\" = 1");
	raw_exec(pg, "COMMIT");
	PQfinish(pg);
	tt_produce_plain(e.c->bootstraps, "in", 0, "k", "plain-after", "Ping");
	cr_assert(wait_for(plain_after_handled, e.store),
		  "the record after the copy was not handled");
	runner_stop(&r);
	cr_assert_eq(
	    tt_count(e.store, "SELECT COUNT(*) FROM hop1 WHERE "
			      "payload = 's-1'"),
	    0, "the copy was handled: its token was read before the lock");
	cr_assert_eq(gate_calls(&e.gate), 1);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.duplicates_dropped, 1);
	tbx_worker_destroy(w);
	env_fini(&e);
}
