/*
 * The destination partition a worker with outbox.layout=batch and
 * tokens.format=set chooses in A (consumer/partition.c,
 * docs/batched-tokens.md, "The partition chosen before minting"), at the
 * two edges of its partition count:
 *
 * - a count not learnt within dispatch.timeout.ms (a destination topic
 *   whose metadata answers with an error): A fails, nothing is
 *   committed, partition_unknown counts it, a WARN says so and the
 *   partition_unknown alarm is recorded; once the metadata answers the
 *   record is handled once;
 * - a count learnt and then refused by the producer (a message whose
 *   partition the topic no longer has): the unknown-partition delivery
 *   error makes the worker forget the count (tbx__partition_forget()),
 *   and the next choice learns it again.
 *
 * The mock cluster only (its topics' metadata refused, and their
 * partitions left without a leader, on command); SQLite and, in the pg tier,
 * PostgreSQL schemas.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer/partition.h"
#include "consumer/worker.h"
#include "fixture.h"

typedef struct env {
	char *dir, *store, *tokens, *log;
	tt_cluster_t *c;
	tt_hop_t hop;
	tbx_worker_t *w;
	int saved_err;
} env_t;

/* e->w: a worker of group g1 on e's stores, with settings k1=v1, k2=v2
 * (NULL: none) over the environment's. */
static void env_worker(env_t *e, const char *k1, const char *v1, const char *k2,
		       const char *v2)
{
	char err[512], timeout[32];

	/* How long A waits for a count, and a delivery for its report. */
	snprintf(timeout, sizeof(timeout), "%d", 3000 * tt_time_factor());
	e->w = tbx_worker_new(
	    tt_conf(e->c->bootstraps, "g1", e->store, e->tokens,
		    "outbox.layout", "batch", "tokens.format", "set",
		    "dispatch.timeout.ms", timeout, k1, v1, k2, v2, NULL),
	    err, sizeof(err));
	cr_assert(e->w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(e->w, "in", "Ping", tt_hop_handle, &e->hop),
	    TBX_OK);
	tbx__worker_assign_directly(e->w);
}

static void env_init(env_t *e, const char *next_topic, const char *k1,
		     const char *v1, const char *k2, const char *v2)
{
	int fd;

	e->dir = tt_tmpdir();
	e->store = tt_store_new(e->dir, "s1");
	e->tokens = tt_tokens_new(e->dir, "tokens", 0);
	e->c = tt_cluster_new(1);
	if (!e->c->mock)
		cr_skip_test("needs the mock cluster's topics on command");
	tt_cluster_topic(e->c, "in", 1);
	tt_cluster_topic(e->c, "in.dlq", 1);
	tt_subscribe(e->tokens, "in", "g1");
	tt_hop_table(e->store, "hop1");
	e->hop = (tt_hop_t){
	    .table = "hop1", .next_topic = next_topic, .next_type = "Pong"};
	e->log = tt_path(e->dir, "stderr.log");
	fflush(stderr);
	e->saved_err = dup(STDERR_FILENO);
	fd = open(e->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert(fd >= 0 && e->saved_err >= 0);
	cr_assert(dup2(fd, STDERR_FILENO) >= 0);
	close(fd);
	env_worker(e, k1, v1, k2, v2);
}

static char *env_log(env_t *e)
{
	fflush(stderr);
	dup2(e->saved_err, STDERR_FILENO);
	close(e->saved_err);
	e->saved_err = -1;
	return tt_read_text(e->log);
}

static void env_fini(env_t *e)
{
	if (e->saved_err >= 0)
		free(env_log(e));
	tbx_worker_destroy(e->w);
	tt_cluster_destroy(e->c);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->store);
	free(e->tokens);
	free(e->log);
}

static tbx_stats_t stats(const env_t *e)
{
	tbx_stats_t st;

	tbx_worker_stats(e->w, &st);
	return st;
}

/* Polls until hop1 has @p n rows, then until idle: each once. */
static void drive_to(env_t *e, int64_t n)
{
	tt_want_t want = {e->store, "SELECT COUNT(*) FROM hop1", n};

	cr_assert(tt_drive(&e->w, 1, tt_reached, &want, 10, 120),
		  "hop1 never reached %lld rows", (long long)n);
	cr_assert(tt_drive(&e->w, 1, NULL, NULL, 20, 120));
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM hop1"), n);
	cr_assert_eq(
	    tt_count(e->store, "SELECT COUNT(DISTINCT payload) FROM hop1"), n,
	    "each record handled once");
}

/* The line of @p log that holds @p what, cut at its end, or NULL. */
static char *line_of(char *log, const char *what)
{
	char *line = strstr(log, what), *end;

	if (!line)
		return NULL;
	while (line > log && line[-1] != '\n')
		line--;
	if ((end = strchr(line, '\n')))
		*end = '\0';
	return line;
}

/*
 * Replies to "out", whose metadata answers with an error (as a topic
 * the cluster does not have, or may not be read, does): A cannot choose
 * the reply's partition, so it fails (nothing handled, no batch row, no
 * set), counted, warned of and flagged.  Once the metadata answers the
 * record is handled once.
 */
Test(partitions, a_count_not_learnt_in_time_fails_A_loudly, .timeout = 300)
{
	env_t e;
	tbx_stats_t st;
	char *log, *line;
	tt_record_t *recs;
	size_t cnt;

	env_init(&e, "out", NULL, NULL, NULL, NULL);
	tt_cluster_topic(e.c, "out", 2);
	rd_kafka_mock_topic_set_error(
	    e.c->mock, "out", RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 1, 1, "m");
	for (int i = 0; i < 600 && stats(&e).partition_unknown == 0; i++)
		tbx_worker_poll(e.w, 100, NULL);
	st = stats(&e);
	if (st.partition_unknown == 0) {
		log = env_log(&e);
		cr_assert_fail("A never failed (%llu consumed, %llu "
			       "processed, %llu retries); the worker's "
			       "log:\n%s",
			       (unsigned long long)st.consumed,
			       (unsigned long long)st.processed,
			       (unsigned long long)st.retries, log);
	}
	cr_assert_eq(st.processed, 0);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), 0,
		     "the handler's effects were committed");
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_obatch"), 0);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0,
		     "a set was minted without a partition");
	cr_assert_geq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_alarms WHERE "
					"grp = 'g1' AND name = "
					"'partition_unknown'"),
		      1);

	/* The metadata answers: the record is handled, once. */
	rd_kafka_mock_topic_set_error(e.c->mock, "out",
				      RD_KAFKA_RESP_ERR_NO_ERROR);
	drive_to(&e, 1);
	st = stats(&e);
	cr_assert_eq(st.processed, 1);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_obatch"), 0);
	cnt = tt_read_topic(e.c->bootstraps, "out", &recs);
	cr_assert_eq(cnt, 1);
	tt_records_free(recs, cnt);

	log = env_log(&e);
	line = line_of(log, "(partition_unknown)");
	cr_assert(line, "no WARN of the count in:\n%s", log);
	cr_assert(strstr(line, " WARN ") &&
		      strstr(line, "out: partition count not learnt"),
		  "%s", line);
	free(log);
	env_fini(&e);
}

static void hex_of(void *opaque, int n, const char *const *vals)
{
	char *out = opaque;

	cr_assert(n == 1 && vals[0] && strlen(vals[0]) < 64);
	snprintf(out, 64, "%s", vals[0]);
}

/* The reply's partition in the batch row's wire column, rewritten
 * behind the worker's back to @p part (the row has one message: wire is
 * [u8 1][u32 1][i32 partition][u16 index][u32 cover], 15 bytes). */
static void wire_partition(const char *store, int part)
{
	int pg = tt_store_is_pg(store);
	char hex[64] = "", sql[256];

	cr_assert_eq(tt_rows(store,
			     pg ? "SELECT upper(encode(wire, 'hex')) FROM "
				  "tbx_obatch"
				: "SELECT hex(wire) FROM tbx_obatch",
			     hex_of, hex),
		     1);
	cr_assert_eq(strlen(hex), 30, "%s", hex);
	snprintf(sql, sizeof(sql), "%08X", (unsigned)part);
	memcpy(hex + 10, sql, 8);
	if (pg)
		snprintf(sql, sizeof(sql),
			 "UPDATE tbx_obatch SET wire = decode('%s', 'hex')",
			 hex);
	else
		snprintf(sql, sizeof(sql), "UPDATE tbx_obatch SET wire = X'%s'",
			 hex);
	cr_assert_eq(tt_store_sql_try(store, sql, NULL), 0, "%s", sql);
}

static int32_t cached(const env_t *e)
{
	return e->w->proto.parts
		   ? tbx__partition_cached(e->w->proto.parts, "out")
		   : -2;
}

/*
 * The count of "out" (2 partitions) is learnt for the first record and
 * kept (no refresh: topic.metadata.refresh.interval.ms -1).  The second
 * record's reply cannot be delivered (both partitions without a
 * leader): its batch row waits, tokened.  Its partition is then moved
 * to 7, one the topic does not have (as a row written before a topic
 * was made again with fewer partitions would be), and the leaders come
 * back: the resumed row's delivery fails with an unknown partition, for
 * good (given up, dead-lettered), and the worker forgets the count; the
 * third record's choice learns it again.
 */
Test(partitions, an_unknown_partition_makes_the_count_be_learnt_again,
     .timeout = 300)
{
	env_t e;
	tbx_stats_t st;
	tt_record_t *recs;
	size_t cnt;
	uint64_t retries;

	env_init(&e, "out", "kafka.producer.topic.metadata.refresh.interval.ms",
		 "-1", "dispatch.retry.max", "0");
	tt_cluster_topic(e.c, "out", 2);
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 1, 1, "a");
	drive_to(&e, 1);
	cr_assert_eq(cached(&e), 2, "the count was not learnt");

	/* The reply waits: no leader for it. */
	for (int p = 0; p < 2; p++)
		cr_assert_eq(
		    rd_kafka_mock_partition_set_leader(e.c->mock, "out", p, -1),
		    RD_KAFKA_RESP_ERR_NO_ERROR);
	retries = stats(&e).retries;
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 1, 1, "b");
	for (int i = 0; i < 600 && stats(&e).retries == retries; i++)
		tbx_worker_poll(e.w, 100, NULL);
	cr_assert_gt(stats(&e).retries, retries, "the delivery never failed");
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_obatch WHERE "
				       "attempt IS NOT NULL"),
		     1, "no tokened batch row waits");
	cr_assert_eq(cached(&e), 2, "a delivery timeout forgot the count");

	wire_partition(e.store, 7);
	for (int p = 0; p < 2; p++)
		cr_assert_eq(
		    rd_kafka_mock_partition_set_leader(e.c->mock, "out", p, 1),
		    RD_KAFKA_RESP_ERR_NO_ERROR);
	tt_want_t gone = {e.store, "SELECT 1 - COUNT(*) FROM tbx_obatch", 1};
	cr_assert(tt_drive(&e.w, 1, tt_reached, &gone, 10, 120),
		  "the row was never given up");
	st = stats(&e);
	cr_assert_eq(st.dispatch_failed_permanent, 1);
	cr_assert_eq(st.undeliverable, 1);
	cr_assert_eq(cached(&e), -1, "the count was not forgotten");

	/* The next choice learns it again. */
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 1, 1, "c");
	drive_to(&e, 3);
	cr_assert_eq(cached(&e), 2, "the count was not learnt again");
	cr_assert_eq(stats(&e).partition_unknown, 0);
	cnt = tt_read_topic(e.c->bootstraps, "out", &recs);
	cr_assert_eq(cnt, 2, "the replies of a and c");
	tt_records_free(recs, cnt);
	env_fini(&e);
}

static void *runner(void *opaque)
{
	tbx_worker_run(opaque);
	return NULL;
}

/*
 * A stop while C waits for a leader that does not come: dispatch.timeout.ms
 * (an hour here) would hold the stop far past shutdown.timeout.ms, so C
 * gives the reports up at half of it, loudly; the record's batch row is
 * left undelivered, as a crash in C leaves it.  Once the partition has a
 * leader again, the next worker delivers it, and the record took effect
 * once.  Without the give-up the stop lasts the hour, past this test's
 * timeout.
 */
Test(partitions, a_stop_gives_up_reports_a_leaderless_partition_holds,
     .timeout = 300)
{
	env_t e;
	pthread_t thread;
	const char *step = NULL;
	char *log, *line;
	tt_record_t *recs;
	size_t cnt;

	env_init(&e, "out", "dispatch.timeout.ms", "3600000",
		 "shutdown.timeout.ms", "2000");
	tt_cluster_topic(e.c, "out", 1);
	cr_assert_eq(
	    rd_kafka_mock_partition_set_leader(e.c->mock, "out", 0, -1),
	    RD_KAFKA_RESP_ERR_NO_ERROR);
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 1, 1, "m");
	cr_assert_eq(pthread_create(&thread, NULL, runner, e.w), 0);
	for (int i = 0; i < 2400; i++) {
		if ((step = tbx__worker_step(e.w)) &&
		    strstr(step, "C: dispatching"))
			break;
		usleep(50 * 1000);
	}
	cr_assert(step && strstr(step, "C: dispatching"),
		  "C never began (step: %s)", step ? step : "(none)");
	tbx_worker_stop(e.w);
	pthread_join(thread, NULL);

	log = env_log(&e);
	line = line_of(log, "without a delivery report");
	cr_assert(line && strstr(line, " WARN ") &&
		      strstr(line, "1 message(s)") &&
		      strstr(line, "given up undelivered"),
		  "no WARN of the reports given up in:\n%s", log);
	free(log);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_obatch"), 1,
		     "the batch row was finished undelivered");

	/* The leader is back; the next worker delivers it, once. */
	cr_assert_eq(rd_kafka_mock_partition_set_leader(e.c->mock, "out", 0, 1),
		     RD_KAFKA_RESP_ERR_NO_ERROR);
	tbx_worker_destroy(e.w);
	env_worker(&e, NULL, NULL, NULL, NULL);
	drive_to(&e, 1);
	for (int i = 0; i < 100 && tt_count(e.store, "SELECT COUNT(*) FROM "
						     "tbx_obatch") != 0;
	     i++)
		tbx_worker_poll(e.w, 100, NULL);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_obatch"), 0);
	cnt = tt_read_topic(e.c->bootstraps, "out", &recs);
	tt_records_free(recs, cnt);
	cr_assert_eq(cnt, 1, "the reply was sent %zu times", cnt);
	env_fini(&e);
}
