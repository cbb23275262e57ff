/*
 * A worker process for crash tests: hop 1 of the test pipeline ("in" ->
 * table hop1 -> "out").  Runs until TBX_CRASH_AT kills it, or exits 0 once
 * idle for a while (exit 3 after 60 s times TBX_TIME_FACTOR).
 *
 * usage: tbx_prog_worker BOOTSTRAPS STORE TOKENS GROUP [key=value]...
 * (STORE and TOKENS are store descriptors: paths or "pg:SCHEMA", hop.h)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "consumer/worker.h"
#include "hop.h"

int main(int argc, char **argv)
{
	tt_hop_t hop = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	char err[512];
	tbx_conf_t *conf;
	tbx_worker_t *w;
	/* Scaled as the callers' waits are (tt_wait()): under the
	 * sanitizers a run takes times longer. */
	const char *factor = getenv("TBX_TIME_FACTOR");
	time_t deadline =
	    time(NULL) + 60 * (factor && atoi(factor) > 0 ? atoi(factor) : 1);
	int idle = 0;

	/* TBX_TEST_DIE_ON=PAYLOAD: the handler kills the process there. */
	hop.die_on = getenv("TBX_TEST_DIE_ON");
	if (argc < 5) {
		fprintf(stderr,
			"usage: %s BOOTSTRAPS STORE TOKENS GROUP "
			"[key=value]...\n",
			argv[0]);
		return 2;
	}
	conf = tbx_conf_new();
	const char *kv[][2] = {
	    {"kafka.bootstrap.servers", argv[1]},
	    {"tokens.create", "true"},
	    {"group.id", argv[4]},
	    /* as tt_conf() (support.c): above the mock's first join */
	    {"kafka.consumer.session.timeout.ms", "4000"},
	    {"kafka.consumer.heartbeat.interval.ms", "300"},
	    {"kafka.consumer.fetch.wait.max.ms", "10"},
	    {"batch.max.ms", "20"},
	    {"log.level", "warning"},
	};
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++) {
		if (tbx_conf_set(conf, kv[i][0], kv[i][1], err, sizeof(err))) {
			fprintf(stderr, "%s\n", err);
			return 2;
		}
	}
	/* STORE and TOKENS: paths, or "pg:SCHEMA" (hop.h). */
	if (tt_stores_conf(conf, argv[2], argv[3], err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return 2;
	}
	for (int i = 5; i < argc; i++) {
		char *eq = strchr(argv[i], '=');
		if (!eq) {
			fprintf(stderr, "%s: expected key=value\n", argv[i]);
			return 2;
		}
		*eq = '\0';
		if (tbx_conf_set(conf, argv[i], eq + 1, err, sizeof(err))) {
			fprintf(stderr, "%s\n", err);
			return 2;
		}
	}
	if (!(w = tbx_worker_new(conf, err, sizeof(err)))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop);
	/* TBX_TEST_ASSIGN=1: the partitions assigned at once, no group to
	 * join (tests that run one worker of a group at a time). */
	if (getenv("TBX_TEST_ASSIGN"))
		tbx__worker_assign_directly(w);
	while (time(NULL) < deadline && idle < 100) {
		size_t n;

		if (tbx_worker_poll(w, 50, &n)) {
			fprintf(stderr, "poll: %s\n", tbx_worker_errstr(w));
			tbx_worker_destroy(w);
			return 1;
		}
		/* Idle only once it holds partitions: a group join that
		 * takes long on a loaded machine is not "nothing to do". */
		idle = n || w->part_cnt == 0 ? 0 : idle + 1;
	}
	tbx_worker_destroy(w);
	return idle >= 100 ? 0 : 3;
}
