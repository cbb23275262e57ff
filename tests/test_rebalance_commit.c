/*
 * Offset commits refused by the group coordinator.  During a rebalance
 * the coordinator answers OffsetCommit with REBALANCE_IN_PROGRESS; a
 * member that keeps its partitions (cooperative-sticky) and has nothing
 * more to process would never commit again, and the group's committed
 * offsets would stay behind the records it processed: its lag would never
 * reach 0.  Here every commit is refused while the records are handled
 * (errors pushed on the mock coordinator), then the coordinator accepts
 * commits again: with no new record arriving, the committed offsets must
 * still reach the end of every partition, and the refusals be counted.
 */
#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cli_child.h"
#include "support.h"

enum { RECORDS = 40, PARTS = 2 };

/* Kafka's ApiKey of OffsetCommit (rdkafka_protocol.h is not installed). */
enum { API_OFFSET_COMMIT = 8 };

typedef struct runner {
	tbx_worker_t *w;
	pthread_t thread;
	int rc;
} runner_t;

static void *run(void *arg)
{
	runner_t *r = arg;

	r->rc = tbx_worker_run(r->w);
	return NULL;
}

/* Records after the group's committed offsets, summed over partitions;
 * -1 when they cannot be read. */
static int64_t lag(rd_kafka_t *rk)
{
	rd_kafka_topic_partition_list_t *parts =
	    rd_kafka_topic_partition_list_new(PARTS);
	int64_t sum = 0;

	for (int p = 0; p < PARTS; p++)
		rd_kafka_topic_partition_list_add(parts, "in", p);
	if (rd_kafka_committed(rk, parts, 5000)) {
		rd_kafka_topic_partition_list_destroy(parts);
		return -1;
	}
	for (int p = 0; p < PARTS && sum >= 0; p++) {
		int64_t lo, hi, c = parts->elems[p].offset;
		if (parts->elems[p].err || rd_kafka_query_watermark_offsets(
					       rk, "in", p, &lo, &hi, 5000))
			sum = -1;
		else
			sum += hi - (c < 0 ? lo : c);
	}
	rd_kafka_topic_partition_list_destroy(parts);
	return sum;
}

/* Waits until group g's lag is 0, for a minute at most.  @returns the
 * last lag read. */
static int64_t wait_no_lag(const char *bootstraps)
{
	rd_kafka_conf_t *kc = rd_kafka_conf_new();
	char err[512];
	int64_t behind = -1;
	time_t end = time(NULL) + 60 * tt_time_factor();

	rd_kafka_conf_set(kc, "bootstrap.servers", bootstraps, NULL, 0);
	rd_kafka_conf_set(kc, "group.id", "g", NULL, 0);
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof(err));
	cr_assert(rk, "%s", err);
	while (time(NULL) < end && (behind = lag(rk)) != 0)
		usleep(200000);
	rd_kafka_destroy(rk);
	return behind;
}

/* Starts a worker of group g on "in" (@p key = @p value in its
 * configuration) in a thread, with its next 1000 offset commits refused
 * (REBALANCE_IN_PROGRESS), and publishes RECORDS records. */
static void start_refused(runner_t *r, tt_cluster_t *c, const char *store,
			  const char *tokens, tt_hop_t *hop, const char *key,
			  const char *value)
{
	rd_kafka_resp_err_t refused[1000];
	char err[512];

	tt_cluster_topic(c, "in", PARTS);
	tt_hop_table(store, "hop");
	tt_subscribe(tokens, "in", "g");
	r->w = tbx_worker_new(
	    tt_conf(c->bootstraps, "g", store, tokens, key, value, NULL), err,
	    sizeof(err));
	cr_assert(r->w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(r->w, "in", "Ping", tt_hop_handle, hop),
	    TBX_OK);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		refused[i] = RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS;
	rd_kafka_mock_push_request_errors_array(
	    c->mock, API_OFFSET_COMMIT, sizeof(refused) / sizeof(refused[0]),
	    refused);
	cr_assert_eq(pthread_create(&r->thread, NULL, run, r), 0);
	tt_publish(c->bootstraps, tokens, "in", "Ping", RECORDS, 4, "p");
}

static void scenario(const char *strategy)
{
	char *dir = tt_tmpdir(), *store = tt_path(dir, "s.db"),
	     *tokens = tt_path(dir, "tokens.db");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop"};
	runner_t r;
	tbx_stats_t st;

	/* Every commit is refused until the records are handled and the
	 * worker has had a commit refused and sent it again (however the
	 * batches were cut: one batch may hold every record, and its one
	 * commit may come after the records are in the store). */
	start_refused(&r, c, store, tokens, &hop,
		      "kafka.consumer.partition.assignment.strategy", strategy);
	time_t end = time(NULL) + 60 * tt_time_factor();
	st.commits_retried = 0;
	while (time(NULL) < end &&
	       (tt_count(store, "SELECT COUNT(*) FROM hop") < RECORDS ||
		tt_count(store, "SELECT COUNT(*) FROM tbx_outbox") > 0 ||
		st.commits_retried == 0)) {
		usleep(50000);
		tbx_worker_stats(r.w, &st);
	}
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop"), RECORDS);
	cr_assert_gt(st.commits_retried, 0, "refused commits are not counted");
	rd_kafka_mock_clear_request_errors(c->mock, API_OFFSET_COMMIT);

	/* No record arrives any more: the worker must commit again by
	 * itself, while it runs. */
	int64_t behind = wait_no_lag(c->bootstraps);
	cr_assert_eq(behind, 0,
		     "%s: committed offsets stay %lld records behind the "
		     "processed ones",
		     strategy, (long long)behind);
	tbx_worker_stop(r.w);
	pthread_join(r.thread, NULL);
	cr_assert_eq(r.rc, TBX_OK);
	tbx_worker_destroy(r.w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}

Test(rebalance_commit, refused_commits_are_sent_again_cooperative,
     .timeout = 300)
{
	scenario("cooperative-sticky");
}

Test(rebalance_commit, refused_commits_are_sent_again_eager, .timeout = 300)
{
	scenario("range");
}

/* The group goes on refusing the commits of the partitions a worker
 * keeps: after commit.behind.alarm.ms that is loud (a counter, an alarm
 * in the service store that `inspect status --check` flags), and when
 * the group accepts them again the alarm stays for the operator. */
Test(rebalance_commit, commits_refused_for_long_raise_an_alarm, .timeout = 300)
{
	char *dir = tt_tmpdir(), *store = tt_path(dir, "s.db"),
	     *tokens = tt_path(dir, "tokens.db");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop"};
	const char *check[] = {"inspect", "--store", store,	"--tokens",
			       tokens,	  "status",  "--check", NULL};
	cc_result_t res;
	runner_t r;
	tbx_stats_t st;
	time_t end;

	start_refused(&r, c, store, tokens, &hop, "commit.behind.alarm.ms",
		      "1000");

	/* The alarm, recorded in the service store. */
	end = time(NULL) + 60 * tt_time_factor();
	while (time(NULL) < end &&
	       tt_count(store, "SELECT COUNT(*) FROM tbx_alarms WHERE grp = "
			       "'g' AND name = 'commit_behind'") < 1)
		usleep(50000);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_alarms WHERE "
				     "name = 'commit_behind'"),
		     1, "no commit_behind alarm");
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop"), RECORDS);
	tbx_worker_stats(r.w, &st);
	cr_assert_geq(st.commit_alarms, 1);
	res = cc_run(check);
	cr_assert(cc_exited(res.status, 1), "status %d: %s%s", res.status,
		  res.out, res.err);
	cr_assert(strstr(res.out, "commit_behind"), "%s", res.out);
	cc_result_free(&res);

	/* The group accepts commits again: the lag reaches 0, the alarm
	 * stays until an operator removes it. */
	rd_kafka_mock_clear_request_errors(c->mock, API_OFFSET_COMMIT);
	cr_assert_eq(wait_no_lag(c->bootstraps), 0);
	tbx_worker_stop(r.w);
	pthread_join(r.thread, NULL);
	cr_assert_eq(r.rc, TBX_OK);
	res = cc_run(check);
	cr_assert(cc_exited(res.status, 1), "status %d: %s%s", res.status,
		  res.out, res.err);
	cc_result_free(&res);

	tbx_worker_destroy(r.w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}
