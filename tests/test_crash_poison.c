/*
 * Records whose handler kills the worker: the worker is restarted each
 * time (as systemd would), finds the batch that died, processes its range
 * one record of all partitions at a time, and dead-letters a record once
 * it died retry.max times in a row as the only record of its batch,
 * without running its handler again.  No other record is ever blamed,
 * and every other record takes effect once.
 *
 * The tests assert outcomes only: how the records are cut into batches
 * (the machine's load decides it) changes how many deaths are needed, not
 * what the deaths lead to.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "outbox/outbox.h"
#include "support.h"

/* Every record handled or dead-lettered, and no outbox row left. */
static int all_done(const char *store, int cnt)
{
	return tt_count(store, "SELECT COUNT(*) FROM hop1") +
		       tt_count(store,
				"SELECT COUNT(*) FROM tbx_dead_letters") >=
		   cnt &&
	       tt_count(store, "SELECT COUNT(*) FROM tbx_outbox") == 0;
}

/* Runs hop 1 of the pipeline in child processes until every record is
 * done, restarting it after each SIGKILL and after each run that went
 * idle first (on a loaded machine a run may give up before the group
 * gave it the partitions of the member killed before it).  @returns the
 * kills. */
static int run_until_done(tt_cluster_t *c, const char *store,
			  const char *tokens, int cnt, const char *die_on,
			  const char *retry_max, const char *batch_max,
			  int max_kills)
{
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	char prog[512], die[320], retry[64], batch[64];
	int idle_runs = 0, kills = 0, status = 0;

	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	snprintf(die, sizeof(die), "TBX_TEST_DIE_ON=%s", die_on);
	snprintf(retry, sizeof(retry), "retry.max=%s", retry_max);
	snprintf(batch, sizeof(batch), "batch.max.messages=%s", batch_max);
	char *argv[] = {prog, c->bootstraps, (char *)store, (char *)tokens,
			"g1", retry,	     batch,	    NULL};
	/* One run at a time: the partitions assigned at once, no group. */
	char *envv[] = {die, "TBX_TEST_ASSIGN=1", NULL};
	while (!all_done(store, cnt)) {
		status = tt_wait(tt_spawn(argv, envv), 90);
		cr_assert(status != -1, "a run hung");
		if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
			cr_assert_leq(++kills, max_kills,
				      "more deaths than the poison allows");
			continue;
		}
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "a run ended with status %d", status);
		cr_assert_lt(++idle_runs, 10, "the records never got done");
	}
	return kills;
}

/*
 * @p cnt records m-0 … m-<cnt-1>, one key each, on @p partitions
 * partitions.  Unless @p poison names them
 * (comma-separated payloads), the poison records are the second record
 * of each of the first @p poison_cnt partitions, so that each has an
 * innocent record before it and the other partitions innocent records
 * beside it.  Checks that exactly the poison records are dead-lettered,
 * each for retry.max lone deaths, that every other record took effect
 * once, that no poison handler ran more than 1 + retry.max times, and
 * that nothing is left.
 */
static void poison_case(int partitions, int cnt, const char *poison,
			int poison_cnt, int retry_max, const char *batch_max)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s1.db"), *tokens = tt_path(dir, "t.db");
	tt_cluster_t *c = tt_cluster_new(1);
	char retry[16], expect[64], sql[256], list[256] = ",";
	tt_record_t *recs;
	tbx__db_opts_t opts;
	tbx_outbox_t *s;
	char err[256];
	size_t n;
	int kills;

	tt_cluster_topic(c, "in", partitions);
	tt_cluster_topic(c, "out", 1);
	tt_cluster_topic(c, "in.dlq", 1);
	tt_subscribe(tokens, "in", "g1");
	tt_hop_table(store, "hop1");
	/* The tokenbox schema, before the first run looks for its rows. */
	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx_outbox_open(store, &opts, &s, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_outbox_close(s);
	tt_publish(c->bootstraps, tokens, "in", "Ping", cnt, cnt, "m");
	if (poison) {
		snprintf(list, sizeof(list), ",%s,", poison);
	} else {
		n = tt_read_topic(c->bootstraps, "in", &recs);
		for (int p = 0; p < partitions; p++) {
			int seen = 0;
			for (size_t i = 0; i < n; i++) {
				if (recs[i].partition != p || ++seen != 2 ||
				    p >= poison_cnt)
					continue;
				size_t len = strlen(list);
				snprintf(list + len, sizeof(list) - len, "%s,",
					 recs[i].payload);
			}
			cr_assert_geq(seen, 2, "partition %d: %d records", p,
				      seen);
		}
		tt_records_free(recs, n);
	}
	/* TBX_TEST_DIE_ON takes the list without its outer commas. */
	char die_on[256];
	snprintf(die_on, sizeof(die_on), "%.*s", (int)strlen(list) - 2,
		 list + 1);

	snprintf(retry, sizeof(retry), "%d", retry_max);
	/* Each poison record runs its handler at most 1 + retry.max times:
	 * once in a batch with others, then alone. */
	kills = run_until_done(c, store, tokens, cnt, die_on, retry, batch_max,
			       poison_cnt * (retry_max + 1));
	cr_assert_geq(kills, poison_cnt * retry_max, "%d kills", kills);

	/* Every record that is not poison took effect once. */
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1"),
		     cnt - poison_cnt);
	cr_assert_eq(
	    tt_count(store, "SELECT COUNT(DISTINCT payload) FROM hop1"),
	    cnt - poison_cnt);
	/* Exactly the poison records are dead-lettered: none whose handler
	 * did not kill the worker. */
	n = tt_read_topic(c->bootstraps, "in.dlq", &recs);
	cr_assert_eq(n, (size_t)poison_cnt, "%zu dead letters for %d poison", n,
		     poison_cnt);
	snprintf(expect, sizeof(expect), "died %d times", retry_max);
	for (size_t i = 0; i < n; i++) {
		char item[64];
		snprintf(item, sizeof(item), ",%s,", recs[i].payload);
		cr_assert(strstr(list, item), "innocent %s dead-lettered: %s",
			  recs[i].payload, recs[i].dlq_error);
		cr_assert(strstr(recs[i].dlq_error, expect), "%s: %s",
			  recs[i].payload, recs[i].dlq_error);
		snprintf(sql, sizeof(sql),
			 "SELECT COUNT(*) FROM hop1 WHERE payload = '%s'",
			 recs[i].payload);
		cr_assert_eq(tt_count(store, sql), 0);
	}
	tt_records_free(recs, n);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_inflight"), 0);
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens "
				      "WHERE grp = 'g1'"),
		     0);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}

Test(crash, record_that_kills_the_worker_is_dead_lettered_after_retry_max)
{
	poison_case(1, 5, "m-2", 1, 2, "100");
}

/* Two partitions, one poison record: the records of the other partition,
 * whose handlers never ran when the worker died, are never blamed. */
Test(crash, poison_in_one_partition_never_blames_the_other)
{
	poison_case(2, 8, NULL, 1, 2, "100");
}

/* Several partitions, several poison records, batches as large as the
 * poll makes them. */
Test(crash, several_poison_records_on_several_partitions)
{
	poison_case(3, 12, NULL, 2, 2, "100");
}

/* The same, cut into batches of two records. */
Test(crash, several_poison_records_in_batches_of_two)
{
	poison_case(3, 12, NULL, 2, 1, "2");
}
