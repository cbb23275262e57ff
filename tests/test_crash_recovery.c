/*
 * The recovery pass: outbox rows whose record lies below the committed
 * offset are never delivered again (an offset reset, retention), so no
 * redelivery resumes them; the partition's owner finishes them on
 * assignment and every recovery.interval.ms, without `inspect
 * redispatch`.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "cli_child.h"
#include "consumer/worker.h"
#include "hop.h"
#include "outbox/outbox.h"
#include "support.h"

/* An offset reset as an operator makes one: a member of @p group
 * commits @p offset for partition 0 of @p topic.  (The broker takes
 * commits from members only.  The worker killed before was no member:
 * it was assigned its partitions directly, TBX_TEST_ASSIGN, and the
 * group has no session of it to time out.) */
static void reset_offset(const char *bootstraps, const char *group,
			 const char *topic, int64_t offset)
{
	char err[512];
	rd_kafka_conf_t *kc = rd_kafka_conf_new();
	rd_kafka_topic_partition_list_t *sub;
	rd_kafka_resp_err_t rerr = RD_KAFKA_RESP_ERR__STATE;
	time_t deadline = time(NULL) + 60 * tt_time_factor();
	rd_kafka_t *rk;

	cr_assert_eq(rd_kafka_conf_set(kc, "bootstrap.servers", bootstraps, err,
				       sizeof(err)),
		     RD_KAFKA_CONF_OK, "%s", err);
	cr_assert_eq(rd_kafka_conf_set(kc, "group.id", group, err, sizeof(err)),
		     RD_KAFKA_CONF_OK, "%s", err);
	cr_assert_eq(rd_kafka_conf_set(kc, "enable.auto.commit", "false", err,
				       sizeof(err)),
		     RD_KAFKA_CONF_OK, "%s", err);
	cr_assert_eq(rd_kafka_conf_set(kc, "session.timeout.ms", "4000", err,
				       sizeof(err)),
		     RD_KAFKA_CONF_OK, "%s", err);
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof(err));
	cr_assert(rk, "%s", err);
	rd_kafka_poll_set_consumer(rk);
	sub = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(sub, topic, RD_KAFKA_PARTITION_UA);
	cr_assert_eq(rd_kafka_subscribe(rk, sub), 0);
	rd_kafka_topic_partition_list_destroy(sub);
	while (rerr && time(NULL) < deadline) {
		rd_kafka_topic_partition_list_t *assigned = NULL;
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 100);

		if (rkm)
			rd_kafka_message_destroy(rkm);
		if (rd_kafka_assignment(rk, &assigned) || !assigned ||
		    assigned->cnt == 0) {
			if (assigned)
				rd_kafka_topic_partition_list_destroy(assigned);
			continue;
		}
		rd_kafka_topic_partition_list_destroy(assigned);
		rd_kafka_topic_partition_list_t *list =
		    rd_kafka_topic_partition_list_new(1);
		rd_kafka_topic_partition_list_add(list, topic, 0)->offset =
		    offset;
		rerr = rd_kafka_commit(rk, list, 0);
		if (!rerr && list->elems[0].err)
			rerr = list->elems[0].err;
		rd_kafka_topic_partition_list_destroy(list);
	}
	cr_assert_eq(rerr, RD_KAFKA_RESP_ERR_NO_ERROR, "commit: %s",
		     rd_kafka_err2str(rerr));
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
}

static int outbox_empty(void *opaque)
{
	return tt_count(opaque, "SELECT COUNT(*) FROM tbx_outbox") == 0 &&
	       tt_count(opaque, "SELECT COUNT(*) FROM tbx_obatch") == 0;
}

/* Polls @p w until the outbox of @p store is empty, publishing a record
 * now and then: the worker commits an offset only for a record it takes,
 * and started at the log's end (auto.offset.reset=latest) it takes only
 * records published once its position is set. */
static int drive_with_new_records(tbx_worker_t *w, tt_cluster_t *c,
				  const char *store, const char *tokens)
{
	time_t deadline = time(NULL) + 60 * tt_time_factor();
	char prefix[32];

	for (int i = 0; time(NULL) < deadline; i++) {
		if (outbox_empty((void *)store) &&
		    tt_count(store, "SELECT COUNT(*) FROM hop1 WHERE payload "
				    "LIKE 'n%'") > 0)
			return 1;
		if (i % 20 == 0) {
			snprintf(prefix, sizeof(prefix), "n%d", i);
			tt_publish(c->bootstraps, tokens, "in", "Ping", 1, 1,
				   prefix);
		}
		cr_assert_eq(tbx_worker_poll(w, 50, NULL), TBX_OK, "%s",
			     tbx_worker_errstr(w));
	}
	return 0;
}

/* A worker died after recording its rows' attempts and before producing
 * (C.confirmed); then the group's offset was reset past the records.
 * The next owner finishes the rows on assignment: their messages are
 * dispatched once, the incoming tokens consumed, the rows deleted, and
 * no handler runs again. */
static void row_below_reset_offset(int latest, int batch_rows)
{
	char *dir, *store, *tokens;
	tt_cluster_t *c;
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	char prog[512], err[512];
	tt_hop_t hop = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	tt_record_t *recs;
	tbx_stats_t st;
	tbx_worker_t *w;
	int64_t rows, covered, status;
	size_t n;

	/* The pg tier runs the batch rows' cases (the record layout's run
	 * in the mock tier only). */
	if (tt_pg_tier() && !batch_rows)
		cr_skip_test("the record layout's cases run on SQLite");
	dir = tt_tmpdir();
	store = tt_store_new(dir, "s1");
	tokens = tt_tokens_new(dir, "t", 0);
	c = tt_cluster_new(1);
	tt_cluster_topic(c, "in", 1);
	tt_cluster_topic(c, "out", 1);
	tt_subscribe(tokens, "in", "g1");
	tt_hop_table(store, "hop1");
	tt_publish(c->bootstraps, tokens, "in", "Ping", 3, 1, "m");

	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	char *argv[] = {prog,  c->bootstraps,
			store, tokens,
			"g1",  batch_rows ? "outbox.layout=batch" : NULL,
			NULL};
	char *envv[] = {"TBX_CRASH_AT=C.confirmed", "TBX_TEST_ASSIGN=1", NULL};
	status = tt_wait(tt_spawn(argv, envv), 90);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "the worker was not killed at C.confirmed (status %d)",
		  (int)status);
	/* However the batch was cut, its rows wait, tokened, unsent
	 * (outbox.layout=batch: one batch row covering them). */
	covered = tt_count(store, "SELECT COUNT(*) FROM hop1");
	if (batch_rows) {
		rows = tt_count(store, "SELECT COUNT(*) FROM tbx_obatch");
		cr_assert_eq(rows, 1);
		cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_outbox"),
			     0);
		cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_obatch "
					     "WHERE attempt IS NULL"),
			     0);
	} else {
		rows = tt_count(store, "SELECT COUNT(*) FROM tbx_outbox");
		cr_assert_eq(rows, covered);
		cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_outbox "
					     "WHERE attempt IS NULL"),
			     0);
	}
	cr_assert(covered >= 1 && covered <= 3, "%d records", (int)covered);
	if (latest) {
		/* No offset was committed: the next worker starts at the
		 * log's end, past the records, and commits once it takes a
		 * new one; the periodic pass then finds the rows. */
		w = tbx_worker_new(tt_conf(c->bootstraps, "g1", store, tokens,
					   "recovery.interval.ms", "200",
					   "kafka.auto.offset.reset", "latest",
					   "outbox.layout",
					   batch_rows ? "batch" : "record",
					   NULL),
				   err, sizeof(err));
	} else {
		/* The group's offset is reset past the records: the pass on
		 * assignment finds the rows (the periodic one is off). */
		reset_offset(c->bootstraps, "g1", "in", 3);
		w = tbx_worker_new(
		    tt_conf(c->bootstraps, "g1", store, tokens,
			    "recovery.interval.ms", "0", "outbox.layout",
			    batch_rows ? "batch" : "record", NULL),
		    err, sizeof(err));
	}
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop),
		     TBX_OK);
	/* Its partition through the rebalance callback's own path, from
	 * the group's committed offset, without the seconds of a join. */
	tbx__worker_assign_directly(w);
	if (latest)
		cr_assert(drive_with_new_records(w, c, store, tokens),
			  "the rows below the committed offset were not "
			  "finished");
	else
		cr_assert(tt_drive(&w, 1, outbox_empty, store, 5, 60),
			  "the rows below the committed offset were not "
			  "finished");
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.stuck_rows, (uint64_t)rows);
	cr_assert_eq(st.rows_recovered, (uint64_t)rows);
	if (!latest)
		cr_assert_eq(st.processed, 0, "no handler runs again");
	tbx_worker_destroy(w);

	/* Each row's message went out once, with its token. */
	n = tt_read_topic(c->bootstraps, "out", &recs);
	size_t sent = 0;
	for (size_t i = 0; i < n; i++) {
		if (recs[i].payload[0] != 'm')
			continue; /* a record taken after the start */
		sent++;
		cr_assert(recs[i].id && recs[i].token && recs[i].seq);
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(recs[i].id, recs[j].id);
	}
	tt_records_free(recs, n);
	cr_assert_eq(sent, (size_t)covered);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1 WHERE "
				     "payload LIKE 'm%'"),
		     covered);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_obatch"), 0);
	/* The rows' incoming tokens are consumed; the records skipped
	 * without a row keep theirs. */
	cr_assert_geq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens WHERE "
				       "grp = 'g1'"),
		      3 - covered);
	if (!latest)
		cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM "
					      "tbx_tokens WHERE grp = 'g1'"),
			     3 - covered);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}

Test(crash, rows_below_a_reset_offset_finish_on_assignment)
{
	row_below_reset_offset(0, 0);
}

Test(crash, rows_skipped_by_auto_offset_reset_finish_with_the_periodic_pass)
{
	row_below_reset_offset(1, 0);
}

/* outbox.layout=batch: the pass finishes the batch row covering them. */
Test(crash, batch_rows_below_a_reset_offset_finish_on_assignment)
{
	row_below_reset_offset(0, 1);
}

Test(crash, batch_rows_skipped_by_auto_offset_reset_finish_periodically)
{
	row_below_reset_offset(1, 1);
}

/* A tt_drive() condition: the batch row of @p opaque (a store) is
 * marked stuck and its failed dispatches counted. */
static int marked_stuck(void *opaque)
{
	return tt_count(opaque, "SELECT COUNT(*) FROM tbx_obatch WHERE "
				"stuck_ms IS NOT NULL AND "
				"dispatch_failures >= 1") == 1;
}

/* The pass marks the batch rows it finds (stuck_ms, as record rows): a
 * batch row below the reset offset whose reply the producer refuses
 * (larger than its message.max.bytes, retried many times) stays, and
 * its mark says the pass could not finish it. */
Test(crash, a_batch_row_the_pass_cannot_finish_stays_marked_stuck)
{
	char *dir = tt_tmpdir();
	char *store = tt_store_new(dir, "s1"),
	     *tokens = tt_tokens_new(dir, "t", 0);
	tt_cluster_t *c = tt_cluster_new(1);
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	char prog[512], err[512], big[6001];
	tt_hop_t hop = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	tbx_publisher_t *pub;
	tbx_worker_t *w;
	int64_t status;

	tt_cluster_topic(c, "in", 1);
	tt_cluster_topic(c, "out", 1);
	tt_subscribe(tokens, "in", "g1");
	tt_hop_table(store, "hop1");
	memset(big, 'b', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	pub = tt_publisher(c->bootstraps, tokens, "error");
	tbx_out_t out = {.topic = "in",
			 .type = "Ping",
			 .key = "k",
			 .key_len = 1,
			 .payload = big,
			 .payload_len = strlen(big)};
	cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	cr_assert_eq(tbx_publisher_flush(pub, NULL), TBX_OK);
	tbx_publisher_destroy(pub);

	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	char *argv[] = {prog, c->bootstraps,	     store, tokens,
			"g1", "outbox.layout=batch", NULL};
	char *envv[] = {"TBX_CRASH_AT=C.confirmed", "TBX_TEST_ASSIGN=1", NULL};
	status = tt_wait(tt_spawn(argv, envv), 90);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "the worker was not killed at C.confirmed (status %d)",
		  (int)status);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_obatch WHERE "
				     "stuck_ms IS NULL"),
		     1);
	reset_offset(c->bootstraps, "g1", "in", 1);
	w = tbx_worker_new(tt_conf(c->bootstraps, "g1", store, tokens,
				   "recovery.interval.ms", "0", "outbox.layout",
				   "batch", "kafka.producer.message.max.bytes",
				   "4096", "dispatch.retry.max", "1000", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop),
		     TBX_OK);
	/* Its partition through the rebalance callback's own path, from
	 * the group's committed offset, without the seconds of a join. */
	tbx__worker_assign_directly(w);
	cr_assert(tt_drive(&w, 1, marked_stuck, store, 5, 60),
		  "the batch row was not marked stuck");
	tbx_stats_t st;
	tbx_worker_stats(w, &st);
	cr_assert_geq(st.stuck_rows, 1);
	cr_assert_eq(st.rows_recovered, 0);
	cr_assert_eq(st.processed, 0, "no handler runs again");
	tbx_worker_destroy(w);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_obatch"), 1);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}

/* `tokenbox inspect` on @p store and @p tokens with @p cmd
 * (NULL-terminated): paths, or in the pg tier the URL and the schemas. */
static cc_result_t inspect(const char *store, const char *tokens,
			   const char *const *cmd)
{
	static char url[2][2200];
	const char *argv[64] = {"inspect"};
	size_t n = 1;

	if (tt_store_is_pg(store)) {
		argv[n++] = "-s";
		argv[n++] = tt_store_url(store, url[0], sizeof(url[0]));
		argv[n++] = "--schema";
		argv[n++] = tt_store_schema(store);
		argv[n++] = "-S";
		argv[n++] = tt_store_url(tokens, url[1], sizeof(url[1]));
		argv[n++] = "--tokens-schema";
		argv[n++] = tt_store_schema(tokens);
	} else {
		argv[n++] = "-s";
		argv[n++] = store;
		argv[n++] = "-S";
		argv[n++] = tokens;
	}
	for (size_t i = 0; cmd[i] && n < 63; i++)
		argv[n++] = cmd[i];
	argv[n] = NULL;
	return cc_run(argv);
}

/* A worker with outbox.layout=batch died after recording its batch
 * row's attempt and before producing; no worker runs.  `inspect
 * redispatch` finishes the row: its messages out once each with their
 * tokens, the covered records' tokens consumed, the row and its index
 * entries gone, no handler run again; a second run finds nothing. */
Test(crash, a_batch_row_is_finished_by_inspect_redispatch)
{
	char *dir = tt_tmpdir();
	char *store = tt_store_new(dir, "s1"),
	     *tokens = tt_tokens_new(dir, "t", 0);
	tt_cluster_t *c = tt_cluster_new(1);
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	char prog[512];
	const char *redispatch[] = {"redispatch",   "--group", "g1",
				    "--older-than", "0s",      "-b",
				    c->bootstraps,  NULL};
	tt_record_t *recs;
	cc_result_t res;
	int64_t status, covered;
	size_t n;

	tt_cluster_topic(c, "in", 1);
	tt_cluster_topic(c, "out", 1);
	tt_subscribe(tokens, "in", "g1");
	tt_hop_table(store, "hop1");
	tt_publish(c->bootstraps, tokens, "in", "Ping", 3, 1, "m");
	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	char *argv[] = {prog, c->bootstraps,	     store, tokens,
			"g1", "outbox.layout=batch", NULL};
	char *envv[] = {"TBX_CRASH_AT=C.confirmed", "TBX_TEST_ASSIGN=1", NULL};
	status = tt_wait(tt_spawn(argv, envv), 90);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "the worker was not killed at C.confirmed (status %d)",
		  (int)status);
	covered = tt_count(store, "SELECT COUNT(*) FROM hop1");
	cr_assert(covered >= 1 && covered <= 3, "%d records", (int)covered);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_obatch WHERE "
				     "attempt IS NOT NULL"),
		     1);
	for (int round = 0; round < 2; round++) {
		res = inspect(store, tokens, redispatch);
		cr_assert(cc_exited(res.status, 0), "status %d: %s%s",
			  res.status, res.out, res.err);
		cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_obatch"),
			     0, "round %d: the row is left: %s%s", round,
			     res.out, res.err);
		cc_result_free(&res);
		cr_assert_eq(
		    tt_count(store, "SELECT COUNT(*) FROM tbx_cover_msg"), 0);
		n = tt_read_topic(c->bootstraps, "out", &recs);
		cr_assert_eq(n, (size_t)covered, "each message out once");
		for (size_t i = 0; i < n; i++) {
			cr_assert(recs[i].id && recs[i].token && recs[i].seq);
			for (size_t j = 0; j < i; j++)
				cr_assert_str_neq(recs[i].id, recs[j].id);
		}
		tt_records_free(recs, n);
	}
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1"), covered,
		     "no handler ran again");
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens WHERE "
				      "grp = 'g1'"),
		     3 - covered, "the covered records' tokens consumed");
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}
