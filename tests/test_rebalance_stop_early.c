/*
 * A cooperative-sticky worker stopped after the group answered its first
 * JoinGroup and before its first assignment arrived (SyncGroup).
 * librdkafka 2.0.2 aborts the process destroying a consumer in that state
 * (issue 4312); the worker must instead stop cleanly.  The mock
 * coordinator holds the first SyncGroup response back for seconds so that
 * the stop lands in that window: the first JoinGroup is answered after
 * 3 s (the mock's group.initial.rebalance.delay.ms), the SyncGroup 8 s
 * later.  If a loaded machine moved the stop outside the window, the test
 * would pass without exercising it, never fail.
 */
#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "support.h"

/* Kafka's ApiKey of SyncGroup (rdkafka_protocol.h is not installed). */
enum { API_SYNC_GROUP = 14 };

typedef struct runner {
	tbx_worker_t *w;
	int rc;
} runner_t;

static void *run(void *arg)
{
	runner_t *r = arg;

	r->rc = tbx_worker_run(r->w);
	return NULL;
}

Test(rebalance_stop_early, stop_between_join_and_first_assignment,
     .timeout = 120)
{
	char *dir = tt_tmpdir(), *store = tt_path(dir, "s.db"),
	     *tokens = tt_path(dir, "tokens.db"), err[512];
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop"};
	runner_t r;
	pthread_t thread;

	tt_cluster_topic(c, "in", 2);
	tt_hop_table(store, "hop");
	tt_subscribe(tokens, "in", "g");
	cr_assert_eq(rd_kafka_mock_broker_push_request_error_rtts(
			 c->mock, 1, API_SYNC_GROUP, 1,
			 RD_KAFKA_RESP_ERR_NO_ERROR, 8000),
		     RD_KAFKA_RESP_ERR_NO_ERROR);
	r.w = tbx_worker_new(
	    tt_conf(c->bootstraps, "g", store, tokens,
		    "kafka.consumer.partition.assignment.strategy",
		    "cooperative-sticky", "shutdown.timeout.ms", "30000", NULL),
	    err, sizeof(err));
	cr_assert(r.w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(r.w, "in", "Ping", tt_hop_handle, &hop),
	    TBX_OK);
	cr_assert_eq(pthread_create(&thread, NULL, run, &r), 0);
	/* Wall-clock, as the mock's delays are: after the JoinGroup answer,
	 * well before the SyncGroup one. */
	sleep(5);
	tbx_worker_stop(r.w);
	pthread_join(thread, NULL);
	cr_assert_eq(r.rc, TBX_OK, "%s", tbx_worker_errstr(r.w));
	tbx_worker_destroy(r.w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}
