/*
 * A record whose handler kills the worker: the worker is restarted each
 * time (as systemd would), finds the batch that died, processes that
 * range one record at a time, and dead-letters the record once it died
 * retry.max times in a row on its own, without running its handler again.
 * Every other record takes effect once.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "support.h"

Test(crash, record_that_kills_the_worker_is_dead_lettered_after_retry_max)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s1.db"), *tokens = tt_path(dir, "t.db");
	tt_cluster_t *c = tt_cluster_new(1);
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	char prog[512];
	int runs = 0, kills = 0, status = 0;
	tt_record_t *recs;
	size_t cnt;

	tt_cluster_topic(c, "in", 1);
	tt_cluster_topic(c, "out", 1);
	tt_cluster_topic(c, "in.dlq", 1);
	tt_subscribe(tokens, "in", "g1");
	tt_hop_table(store, "hop1");
	tt_publish(c->bootstraps, tokens, "in", "Ping", 5, 1, "m");

	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	char *argv[] = {prog, c->bootstraps, store, tokens,
			"g1", "retry.max=2", NULL};
	char *envv[] = {"TBX_TEST_DIE_ON=m-2", NULL};
	/* Restart until a run ends by itself (idle). */
	for (runs = 1; runs <= 8; runs++) {
		status = tt_wait(tt_spawn(argv, envv), 90);
		cr_assert(status != -1, "run %d hung", runs);
		if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
			kills++;
			continue;
		}
		break;
	}
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the worker never finished (status %d after %d runs)", status,
		  runs);
	/* Once in the batch, then retry.max times alone. */
	cr_assert_eq(kills, 3);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1"), 4);
	cr_assert_eq(
	    tt_count(store, "SELECT COUNT(DISTINCT payload) FROM hop1"), 4);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1 WHERE payload "
				     "= 'm-2'"),
		     0);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_inflight"), 0);
	cnt = tt_read_topic(c->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 1);
	cr_assert_str_eq(recs[0].payload, "m-2");
	cr_assert(strstr(recs[0].dlq_error, "died 2 times"), "%s",
		  recs[0].dlq_error);
	tt_records_free(recs, cnt);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}
