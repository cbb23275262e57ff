/*
 * End to end over an in-process mock cluster (or, in the `kafka` tier, a
 * real broker): the protocol's promises seen from the business tables, the
 * topics and the stores.
 *
 * No case here is about a group's membership: on the mock cluster every
 * worker is assigned all partitions of its topics directly
 * (tbx__worker_assign_directly(), through the rebalance callback's own
 * path), without the mock's seconds-long first join.  The kafka tier's
 * workers join their groups on the real broker.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "consumer/worker.h"
#include "fixture.h"

/* Before @p w's first poll: its partitions at once on the mock cluster
 * (no group to join); on the kafka tier's real broker, the group. */
static void assign(tbx_worker_t *w)
{
	if (!tt_real_kafka())
		tbx__worker_assign_directly(w);
}

static void env_init(tt_env_t *e)
{
	static const char *const topics[] = {"in:2", "out:2", "in.dlq:1", NULL};

	tt_env_init(e, topics);
	tt_hop_table(e->store, "hop1");
	tt_hop_table(e->store2, "hop2");
	tt_hop_table(e->store3, "hop2");
}

static tbx_worker_t *worker(tt_env_t *e, const char *group, const char *store,
			    const char *topic, const char *type, tt_hop_t *hop,
			    const char *k1, const char *v1)
{
	char err[512];
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(e->cluster->bootstraps, group, store, e->tokens,
		    "cleanup.interval.ms", "100", k1, v1, NULL),
	    err, sizeof(err));

	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, topic, type, tt_hop_handle, hop),
		     TBX_OK);
	assign(w);
	/* First poll subscribes the group in the token store. */
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	return w;
}

static int64_t stat_dropped(tbx_worker_t *w)
{
	tbx_stats_t st;

	tbx_worker_stats(w, &st);
	return (int64_t)st.duplicates_dropped;
}

/* tt_drive()'s condition: the worker dropped at least @c n duplicates. */
typedef struct dropped_want {
	tbx_worker_t *w;
	int64_t n;
} dropped_want_t;

static int dropped_reached(void *opaque)
{
	const dropped_want_t *want = opaque;

	return stat_dropped(want->w) >= want->n;
}

Test(e2e, duplicates_with_the_same_token_are_dropped)
{
	tt_env_t e;
	tt_hop_t hop = {.table = "hop1"};
	tt_record_t *recs;
	size_t cnt;

	env_init(&e);
	tbx_worker_t *w =
	    worker(&e, "g1", e.store, "in", "Ping", &hop, NULL, NULL);
	tt_publish(e.cluster->bootstraps, e.tokens, "in", "Ping", 20, 4, "m");
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM hop1", 20};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 5, 60));
	/* Upstream re-sends all 20, twice, after they were processed. */
	cnt = tt_read_topic(e.cluster->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 20);
	tt_reproduce(e.cluster->bootstraps, "in", recs, cnt);
	tt_reproduce(e.cluster->bootstraps, "in", recs, cnt);
	tt_records_free(recs, cnt);
	/* Until the copies were taken, not merely until a second without
	 * records, which a loaded machine can give before they come; then
	 * idle, so that a copy taken twice would be counted. */
	dropped_want_t copies = {w, 40};
	cr_assert(tt_drive(&w, 1, dropped_reached, &copies, 20, 60));
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), 20);
	cr_assert_eq(
	    tt_count(e.store, "SELECT COUNT(DISTINCT msg_id) FROM hop1"), 20);
	cr_assert_eq(stat_dropped(w), 40);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* Two keys, retries and broker errors on Produce interleaved: the
 * effects of one key keep the publish order and each happens once. */
Test(e2e, two_keys_interleaved_with_failures_keep_order_and_happen_once)
{
	tt_env_t e;
	tt_hop_t hop1 = {.table = "hop1",
			 .next_topic = "out",
			 .next_type = "Pong",
			 .retry = "m-3",
			 .retry_times = 2};
	tt_hop_t hop2 = {.table = "hop2", .retry = "m-4", .retry_times = 1};
	tbx_worker_t *w[2];

	env_init(&e);
	w[0] = worker(&e, "g1", e.store, "in", "Ping", &hop1, NULL, NULL);
	w[1] = worker(&e, "g2", e.store2, "out", "Pong", &hop2, NULL, NULL);
	/* Produce errors only the mock injects; a real broker's tier keeps
	 * the handler's failures. */
	if (e.cluster->mock)
		rd_kafka_mock_push_request_errors(
		    e.cluster->mock, TT_API_PRODUCE, 3,
		    RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
		    RD_KAFKA_RESP_ERR__TRANSPORT,
		    RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
	tt_publish(e.cluster->bootstraps, e.tokens, "in", "Ping", 12, 2, "m");
	tt_want_t want = {e.store2, "SELECT COUNT(*) FROM hop2", 12};
	cr_assert(tt_drive(w, 2, tt_reached, &want, 10, 90));
	for (int k = 0; k < 2; k++) {
		/* per key, the payload numbers rise with the effect id */
		char sql[256];
		snprintf(sql, sizeof(sql),
			 "SELECT COUNT(*) FROM hop1 a JOIN hop1 b ON "
			 "a.key = b.key AND a.id < b.id WHERE a.key = 'key-%d' "
			 "AND CAST(substr(a.payload, 3) AS INT) > "
			 "CAST(substr(b.payload, 3) AS INT)",
			 k);
		cr_assert_eq(tt_count(e.store, sql), 0, "key-%d out of order",
			     k);
	}
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), 12);
	cr_assert_eq(tt_count(e.store2, "SELECT COUNT(*) FROM hop2"), 12);
	cr_assert_eq(
	    tt_count(e.store2, "SELECT COUNT(DISTINCT payload) FROM hop2"), 12);
	/* the retried ones ran to commit on their last attempt only */
	cr_assert_eq(tt_count(e.store, "SELECT attempt FROM hop1 WHERE payload "
				       "= 'm-3'"),
		     3);
	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	tt_env_fini(&e);
}

/* A record that asks to retry holds back its partition only. */
Test(e2e, retry_blocks_only_its_partition)
{
	tt_env_t e;
	tt_hop_t hop = {.table = "hop1", .retry = "blocked", .retry_times = 3};

	env_init(&e);
	tbx_worker_t *w = worker(&e, "g1", e.store, "in", NULL, &hop,
				 "ingress.untokened", "offsets");
	/* partition 0: the blocked record, then a follower; partition 1:
	 * five records that must not wait. */
	tt_produce_plain(e.cluster->bootstraps, "in", 0, "a", "blocked",
			 "Ping");
	tt_produce_plain(e.cluster->bootstraps, "in", 0, "a", "after", "Ping");
	for (int i = 0; i < 5; i++)
		tt_produce_plain(e.cluster->bootstraps, "in", 1, "b", "other",
				 "Ping");
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM hop1", 7};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 5, 60));
	int64_t blocked_id = tt_count(e.store, "SELECT id FROM hop1 WHERE "
					       "payload = 'blocked'");
	cr_assert_eq(tt_count(e.store, "SELECT attempt FROM hop1 WHERE payload "
				       "= 'blocked'"),
		     4);
	/* the other partition went on meanwhile ... */
	cr_assert_lt(tt_count(e.store,
			      "SELECT MAX(id) FROM hop1 WHERE payload = "
			      "'other'"),
		     blocked_id);
	/* ... and nothing passed the blocked record in its partition */
	cr_assert_gt(tt_count(e.store, "SELECT id FROM hop1 WHERE payload = "
				       "'after'"),
		     blocked_id);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

static size_t read_dlq(tt_env_t *e, tt_record_t **recs)
{
	return tt_read_topic(e->cluster->bootstraps, "in.dlq", recs);
}

Test(e2e, rejected_message_reaches_the_dead_letter_topic_exactly_once)
{
	tt_env_t e;
	tt_hop_t hop = {.table = "hop1", .reject = "m-2"};
	tt_record_t *recs;
	size_t cnt;

	env_init(&e);
	tbx_worker_t *w =
	    worker(&e, "g1", e.store, "in", "Ping", &hop, NULL, NULL);
	tt_publish(e.cluster->bootstraps, e.tokens, "in", "Ping", 5, 1, "m");
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM tbx_dead_letters", 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 5, 60));
	/* the rejected record is re-sent upstream: still one dead letter */
	cnt = tt_read_topic(e.cluster->bootstraps, "in", &recs);
	tt_reproduce(e.cluster->bootstraps, "in", recs, cnt);
	tt_records_free(recs, cnt);
	cr_assert(tt_drive(&w, 1, NULL, NULL, 20, 60));
	cnt = read_dlq(&e, &recs);
	cr_assert_eq(cnt, 1);
	cr_assert_str_eq(recs[0].payload, "m-2");
	cr_assert_str_eq(recs[0].dlq_error, "rejected by test");
	cr_assert_str_eq(recs[0].type, "Ping");
	cr_assert(recs[0].token, "dead letters carry tokens too");
	tt_records_free(recs, cnt);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), 4);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_dead_letters"),
		     1);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

Test(e2e, retries_used_up_send_the_message_to_the_dead_letter_topic)
{
	tt_env_t e;
	tt_hop_t hop = {.table = "hop1", .retry = "m-0", .retry_times = 100};
	tt_record_t *recs;
	size_t cnt;

	env_init(&e);
	tbx_worker_t *w =
	    worker(&e, "g1", e.store, "in", "Ping", &hop, "retry.max", "2");
	tt_publish(e.cluster->bootstraps, e.tokens, "in", "Ping", 1, 1, "m");
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM tbx_dead_letters", 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 5, 60));
	cnt = read_dlq(&e, &recs);
	cr_assert_eq(cnt, 1);
	const void *v;
	size_t len;
	cr_assert_eq(rd_kafka_header_get_last(recs[0].headers,
					      "tbx-dlq-attempts", &v, &len),
		     0);
	cr_assert_eq(len, 1);
	cr_assert_eq(memcmp(v, "3", 1), 0, "1 attempt + retry.max retries");
	cr_assert(strstr(recs[0].dlq_error, "retries exhausted"));
	tt_records_free(recs, cnt);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), 0);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

Test(e2e, unknown_type_goes_to_the_dead_letter_topic)
{
	tt_env_t e;
	tt_hop_t hop = {.table = "hop1"};
	tt_record_t *recs;
	size_t cnt;

	env_init(&e);
	tbx_worker_t *w =
	    worker(&e, "g1", e.store, "in", "Ping", &hop, NULL, NULL);
	tt_publish(e.cluster->bootstraps, e.tokens, "in", "Unknown", 2, 1, "u");
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM tbx_dead_letters", 2};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 5, 60));
	cnt = read_dlq(&e, &recs);
	cr_assert_eq(cnt, 2);
	cr_assert(strstr(recs[0].dlq_error, "no handler"));
	tt_records_free(recs, cnt);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

Test(e2e, untokened_ingress_is_rejected_by_default)
{
	tt_env_t e;
	tt_hop_t hop = {.table = "hop1"};
	tt_record_t *recs;
	size_t cnt;

	env_init(&e);
	tbx_worker_t *w =
	    worker(&e, "g1", e.store, "in", "Ping", &hop, NULL, NULL);
	tt_produce_plain(e.cluster->bootstraps, "in", 0, "k", "plain", "Ping");
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM tbx_dead_letters", 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 5, 60));
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), 0);
	cnt = read_dlq(&e, &recs);
	cr_assert_eq(cnt, 1);
	cr_assert(strstr(recs[0].dlq_error, "ingress.untokened=reject"));
	tt_records_free(recs, cnt);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

typedef struct redelivered {
	tbx_worker_t *w;
	const char *db;
	int64_t before;
} redelivered_t;

static int redelivered(void *opaque)
{
	redelivered_t *r = opaque;
	tbx_stats_t st;

	tbx_worker_stats(r->w, &st);
	return (int64_t)st.consumed >= 6 &&
	       tt_count(r->db, "SELECT COUNT(*) FROM tbx_outbox") == 0;
}

/* With offsets, a redelivered untokened record is skipped: a worker is
 * killed after finishing its batch but before committing offsets, so the
 * records come again, without token or outbox row to stop them. */
Test(e2e, untokened_ingress_with_offsets_is_handled_once_per_offset)
{
	tt_env_t e;
	tt_hop_t hop = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	char prog[512];
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	int status;

	env_init(&e);
	tt_subscribe(e.tokens, "in", "g1");
	for (int i = 0; i < 6; i++)
		tt_produce_plain(e.cluster->bootstraps, "in", i % 2, "k",
				 "plain", "Ping");
	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	char *argv[] = {prog, e.cluster->bootstraps,	   e.store, e.tokens,
			"g1", "ingress.untokened=offsets", NULL};
	char *envv[] = {"TBX_CRASH_AT=E.deleted", NULL};
	status = tt_wait(tt_spawn(argv, envv), 60);
	cr_assert(status != -1 && WIFSIGNALED(status));
	int64_t before = tt_count(e.store, "SELECT COUNT(*) FROM hop1");
	cr_assert_gt(before, 0);

	tbx_worker_t *w = worker(&e, "g1", e.store, "in", "Ping", &hop,
				 "ingress.untokened", "offsets");
	/* Done once the new member got the partitions and every record was
	 * handled or skipped (the killed member holds them until its
	 * session times out). */
	redelivered_t want = {w, e.store, before};
	cr_assert(tt_drive(&w, 1, redelivered, &want, 5, 60));
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), 6);
	cr_assert_eq(tt_count(e.store,
			      "SELECT COUNT(DISTINCT part || ':' || off)"
			      " FROM hop1"),
		     6);
	cr_assert_eq(tt_count(e.store,
			      "SELECT SUM(next_offset) FROM tbx_ingress "
			      "WHERE grp = 'g1'"),
		     6);
	tbx_stats_t st;
	tbx_worker_stats(w, &st);
	cr_assert_geq(st.duplicates_dropped, (uint64_t)before,
		      "the redelivered records were skipped by offset");
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* A tt_drive() condition: both of two tt_want_t. */
static int both_reached(void *opaque)
{
	tt_want_t *w = opaque;

	return tt_reached(&w[0]) && tt_reached(&w[1]);
}

/* Two groups on one topic: each processes every message once; one
 * group's consumption does not make the other drop anything. */
Test(e2e, two_consumer_groups_on_one_topic_each_process_every_message_once)
{
	tt_env_t e;
	tt_hop_t hop1 = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	tt_hop_t hop2 = {.table = "hop2"};
	tbx_worker_t *w[3];

	env_init(&e);
	w[0] = worker(&e, "g1", e.store, "in", "Ping", &hop1, NULL, NULL);
	w[1] = worker(&e, "g2", e.store2, "out", "Pong", &hop2, NULL, NULL);
	w[2] = worker(&e, "g3", e.store3, "out", "Pong", &hop2, NULL, NULL);
	tt_publish(e.cluster->bootstraps, e.tokens, "in", "Ping", 30, 3, "m");
	/* Both groups, each at its own pace (one may join the group later
	 * than the other). */
	tt_want_t want[2] = {{e.store2, "SELECT COUNT(*) FROM hop2", 30},
			     {e.store3, "SELECT COUNT(*) FROM hop2", 30}};
	cr_assert(tt_drive(w, 3, both_reached, want, 10, 90));
	cr_assert(tt_drive(w, 3, NULL, NULL, 10, 60));
	cr_assert_eq(tt_count(e.store2, "SELECT COUNT(*) FROM hop2"), 30);
	cr_assert_eq(
	    tt_count(e.store2, "SELECT COUNT(DISTINCT payload) FROM hop2"), 30);
	cr_assert_eq(tt_count(e.store3, "SELECT COUNT(*) FROM hop2"), 30);
	cr_assert_eq(
	    tt_count(e.store3, "SELECT COUNT(DISTINCT payload) FROM hop2"), 30);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cr_assert_eq(
	    tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_registrations"), 0);
	for (int i = 0; i < 3; i++)
		tbx_worker_destroy(w[i]);
	tt_env_fini(&e);
}

/* A message minted before a group subscribed has no token for it: it is
 * untokened ingress for that group, not a duplicate. */
Test(e2e, message_minted_before_the_group_subscribed_is_untokened_for_it)
{
	tt_env_t e;
	tt_hop_t hop = {.table = "hop1"};

	env_init(&e);
	tt_publish(e.cluster->bootstraps, e.tokens, "in", "Ping", 3, 1, "m");
	tbx_worker_t *w = worker(&e, "g1", e.store, "in", "Ping", &hop,
				 "ingress.untokened", "offsets");
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM hop1", 3};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 5, 60));
	cr_assert_eq(stat_dropped(w), 0);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* Records the synchronous level the handlers' transaction runs under. */
typedef struct sync_seen {
	int calls, min, max;
} sync_seen_t;

static tbx_verdict_t note_synchronous(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				      void *opaque)
{
	sync_seen_t *seen = opaque;
	sqlite3_stmt *stmt;
	int level = -1;

	(void)msg;
	if (sqlite3_prepare_v2(tbx_ctx_db(ctx), "PRAGMA synchronous", -1, &stmt,
			       NULL) == SQLITE_OK) {
		if (sqlite3_step(stmt) == SQLITE_ROW)
			level = sqlite3_column_int(stmt, 0);
		sqlite3_finalize(stmt);
	}
	if (seen->calls++ == 0 || level < seen->min)
		seen->min = level;
	if (seen->calls == 1 || level > seen->max)
		seen->max = level;
	return TBX_VERDICT_OK;
}

static int calls_reached(void *opaque)
{
	return ((sync_seen_t *)opaque)->calls >= 30;
}

/*
 * Regression: the guard phase G commits with synchronous=NORMAL and then
 * restores the configured level, but the worker never recorded that level,
 * so it restored NORMAL: with store.synchronous=full (the default) every
 * transaction after the first batch's G ran without fsync.
 */
static void check_synchronous(const char *setting, int want)
{
	tt_env_t e;
	sync_seen_t seen = {0, 0, 0};
	char err[512];

	env_init(&e);
	tbx_worker_t *w =
	    tbx_worker_new(tt_conf(e.cluster->bootstraps, "g1", e.store,
				   e.tokens, "store.synchronous", setting,
				   "batch.max.messages", "10", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(w, "in", NULL, note_synchronous, &seen),
	    TBX_OK);
	assign(w);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(e.cluster->bootstraps, e.tokens, "in", "Ping", 30, 3, "s");
	cr_assert(tt_drive(&w, 1, calls_reached, &seen, 3, 60));
	cr_assert_eq(seen.min, want,
		     "store.synchronous=%s: a batch ran at "
		     "level %d",
		     setting, seen.min);
	cr_assert_eq(seen.max, want,
		     "store.synchronous=%s: a batch ran at "
		     "level %d",
		     setting, seen.max);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

Test(e2e, every_batch_runs_at_the_configured_synchronous_level)
{
	/* SQLite's PRAGMA synchronous; PostgreSQL's commits are the
	 * server's (synchronous_commit). */
	if (tt_pg_tier())
		cr_skip_test("SQLite only: PRAGMA synchronous");
	check_synchronous("full", 2);
	check_synchronous("normal", 1);
}

/*
 * One file for every store, named two ways (store.path "…/all.db",
 * tokens.path "…/./all.db"): the worker sees one file and takes the joined
 * path.  B's two transactions and D's own are then never tt_reached; the
 * test process is armed to die there.  In the pg tier: the service
 * schema and the token schema on one connection string, one database.
 */
Test(e2e, one_file_under_two_names_is_joined)
{
	char *dir = tt_tmpdir();
	int pg = tt_pg_tier();
	char *all = pg ? tt_store_new(dir, "all") : tt_path(dir, "all.db");
	char *alias =
	    pg ? tt_tokens_new(dir, "tokens", 1) : tt_path(dir, "./all.db");
	/* the token store, and the second worker's stores */
	const char *tok = alias, *s2 = pg ? all : alias, *t2 = pg ? alias : all;
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop1 = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	tt_hop_t hop2 = {.table = "hop2"};
	tbx_worker_t *w[2];
	tbx_stats_t st;

	tt_cluster_topic(c, "in", 2);
	tt_cluster_topic(c, "out", 2);
	tt_hop_table(all, "hop1");
	tt_hop_table(all, "hop2");
	setenv("TBX_CRASH_AT", "B.minted,B.recorded,D.consumed", 1);
	tt_hop_pair(w, c->bootstraps, all, alias, s2, t2, &hop1, &hop2);
	unsetenv("TBX_CRASH_AT");
	assign(w[0]);
	assign(w[1]);
	cr_assert_eq(tbx_worker_poll(w[0], 0, NULL), TBX_OK);
	cr_assert_eq(tbx_worker_poll(w[1], 0, NULL), TBX_OK);
	tt_publish(c->bootstraps, tok, "in", "Ping", 24, 3, "j");
	tt_want_t want = {all, "SELECT COUNT(*) FROM hop2", 24};
	cr_assert(tt_drive(w, 2, tt_reached, &want, 10, 60));
	cr_assert_eq(tt_count(all, "SELECT COUNT(*) FROM hop1"), 24);
	cr_assert_eq(tt_count(all, "SELECT COUNT(DISTINCT payload) FROM hop2"),
		     24);
	cr_assert_eq(tt_count(tok, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cr_assert_eq(tt_count(tok, "SELECT COUNT(*) FROM tbx_registrations"),
		     0);
	cr_assert_eq(tt_count(all, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	tbx_worker_stats(w[0], &st);
	cr_assert_eq(st.tokens_created, 24, "one token per output, for g2");
	cr_assert_eq(st.tokens_consumed, 24);
	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(all);
	free(alias);
}

static int retry_calls;

static tbx_verdict_t count_calls(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				 void *opaque)
{
	retry_calls++;
	return tt_hop_handle(ctx, msg, opaque);
}

static int two_calls(void *opaque)
{
	(void)opaque;
	return retry_calls >= 2;
}

static tbx_worker_t *retrying_worker(tt_env_t *e, tt_hop_t *hop)
{
	char err[512];
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(e->cluster->bootstraps, "g1", e->store, e->tokens,
		    "retry.max", "3", "retry.backoff.ms", "10", NULL),
	    err, sizeof(err));

	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", count_calls, hop),
		     TBX_OK);
	assign(w);
	return w;
}

/* RETRY verdicts are counted in the service store: a worker restarted in
 * the middle of a record's retries goes on counting, and the handler runs
 * 1 + retry.max times in all. */
Test(e2e, retry_max_holds_across_a_worker_restart)
{
	tt_env_t e;
	tt_hop_t hop = {.table = "hop1", .retry = "m-0", .retry_times = 100};
	tt_record_t *recs;
	tbx_worker_t *w;
	size_t cnt;
	const void *v;
	size_t len;

	env_init(&e);
	retry_calls = 0;
	w = retrying_worker(&e, &hop);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(e.cluster->bootstraps, e.tokens, "in", "Ping", 1, 1, "m");
	/* Two attempts, both asked to retry; then the worker goes away. */
	cr_assert(tt_drive(&w, 1, two_calls, NULL, 0, 60));
	cr_assert_eq(retry_calls, 2);
	tbx_worker_destroy(w);

	w = retrying_worker(&e, &hop);
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM tbx_dead_letters", 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 5, 60));
	cr_assert_eq(retry_calls, 4, "1 attempt + retry.max retries, not %d",
		     retry_calls);
	cnt = read_dlq(&e, &recs);
	cr_assert_eq(cnt, 1);
	cr_assert_eq(rd_kafka_header_get_last(recs[0].headers,
					      "tbx-dlq-attempts", &v, &len),
		     0);
	cr_assert(len == 1 && memcmp(v, "4", 1) == 0);
	cr_assert(strstr(recs[0].dlq_error, "retries exhausted"));
	tt_records_free(recs, cnt);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), 0);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_inflight"), 0,
		     "the count goes with its record");
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* The hop's handler, counting its calls. */
typedef struct counted_hop {
	tt_hop_t hop;
	int calls;
} counted_hop_t;

static tbx_verdict_t counted_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				    void *opaque)
{
	counted_hop_t *c = opaque;

	c->calls++;
	return tt_hop_handle(ctx, msg, &c->hop);
}

/*
 * An upstream re-send right behind its original, in one partition, so
 * that both are in one batch: A looks the batch's rows and tokens up
 * before any handler runs, when neither copy has a row yet.  The copy
 * must join the row its original made in the same A (a handler that ran
 * for it again would make a second row: a conflict, or a batch that never
 * commits), also when the original was rejected (its dead letter's row)
 * or asked to retry once (its partition waits; both come again).
 */
Test(e2e, a_copy_in_the_batch_of_its_original_joins_the_originals_row)
{
	static const char *const topics[] = {"stage:1", "in:1", "in.dlq:1",
					     NULL};
	enum { N = 10 };
	tt_env_t e;
	counted_hop_t c = {.hop = {.table = "hop1",
				   .reject = "d-5",
				   .retry = "d-3",
				   .retry_times = 1}};
	tt_record_t *recs, pairs[2 * N];
	tbx_stats_t st;
	size_t cnt;
	char err[512];

	tt_env_init(&e, topics);
	tt_hop_table(e.store, "hop1");
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(e.cluster->bootstraps, "g1", e.store, e.tokens,
		    "cleanup.interval.ms", "100", NULL),
	    err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", counted_handle, &c),
		     TBX_OK);
	assign(w);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	/* Minted for g1 through a topic the worker does not read, then
	 * produced to "in" in pairs, original and copy, in one go. */
	tt_subscribe(e.tokens, "stage", "g1");
	tt_publish(e.cluster->bootstraps, e.tokens, "stage", "Ping", N, 1, "d");
	cnt = tt_read_topic(e.cluster->bootstraps, "stage", &recs);
	cr_assert_eq(cnt, N);
	for (size_t i = 0; i < N; i++)
		pairs[2 * i] = pairs[2 * i + 1] = recs[i];
	tt_reproduce(e.cluster->bootstraps, "in", pairs, 2 * N);
	tt_records_free(recs, cnt);

	tt_want_t want = {e.store, "SELECT COUNT(*) FROM hop1", N - 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 5, 60));
	/* The last copies may come after the last original's row. */
	dropped_want_t copies = {w, N};
	cr_assert(tt_drive(&w, 1, dropped_reached, &copies, 10, 60));
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), N - 1);
	cr_assert_eq(
	    tt_count(e.store, "SELECT COUNT(DISTINCT msg_id) FROM hop1"),
	    N - 1);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_dead_letters"),
		     1);
	cnt = read_dlq(&e, &recs);
	cr_assert_eq(cnt, 1, "one dead letter for the rejected pair");
	tt_records_free(recs, cnt);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.rows_conflicted, 0,
		     "no handler ran for a copy whose original has a row");
	cr_assert_eq(st.duplicates_dropped, N, "every copy dropped once");
	cr_assert_eq(c.calls, N + 1, "each record once, d-3 twice");
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/*
 * finish.defer, on one SQLite file: a batch's delivered rows and their
 * incoming tokens wait for the next batch's A, and a poll that finds no
 * record finishes them in a transaction of their own.  With
 * finish.defer=false every batch finishes its own rows.
 */
static void finish_case(int defer)
{
	char *dir = tt_tmpdir();
	char *all = tt_path(dir, "all.db");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop1"};
	char err[512];
	size_t total = 0, n = 0;
	int64_t limit = tbx__mono_ms() + 60000 * tt_time_factor();
	tbx_stats_t st;
	tbx_worker_t *w;

	tt_cluster_topic(c, "in", 2);
	tt_hop_table(all, "hop1");
	w = tbx_worker_new(tt_conf(c->bootstraps, "g1", all, all,
				   "finish.defer", defer ? "true" : "false",
				   NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop),
		     TBX_OK);
	assign(w);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(c->bootstraps, all, "in", "Ping", 30, 3, "f");
	while (total < 30 && tbx__mono_ms() < limit) {
		cr_assert_eq(tbx_worker_poll(w, 50, &n), TBX_OK);
		total += n;
		if (n && !defer)
			cr_assert_eq(
			    tt_count(all, "SELECT COUNT(*) FROM tbx_outbox"), 0,
			    "a batch left its rows");
	}
	cr_assert_eq(total, 30);
	cr_assert_eq(tt_count(all, "SELECT COUNT(*) FROM hop1"), 30);
	tbx_worker_stats(w, &st);
	if (defer) {
		/* The last batch's rows and tokens wait for a next batch. */
		cr_assert_gt(tt_count(all, "SELECT COUNT(*) FROM tbx_outbox"),
			     0);
		cr_assert_gt(tt_count(all, "SELECT COUNT(*) FROM tbx_tokens"),
			     0);
		cr_assert_lt(st.tokens_consumed, 30);
		/* None comes: the next poll finishes them. */
		cr_assert_eq(tbx_worker_poll(w, 50, &n), TBX_OK);
		cr_assert_eq(n, 0);
		tbx_worker_stats(w, &st);
	}
	cr_assert_eq(tt_count(all, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	cr_assert_eq(tt_count(all, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cr_assert_eq(st.tokens_consumed, 30);
	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(all);
}

Test(e2e, a_batch_finishes_with_the_next_one_or_at_an_idle_poll)
{
	if (tt_pg_tier())
		cr_skip_test("SQLite only: finish.defer");
	finish_case(1);
}

Test(e2e, without_finish_defer_every_batch_finishes_its_rows)
{
	if (tt_pg_tier())
		cr_skip_test("SQLite only: finish.defer");
	finish_case(0);
}
