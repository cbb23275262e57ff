/*
 * Membership at the default log level: three workers of one group in one
 * process, polled in turn on one thread, on a topic of one partition.
 * The one that gets it says so at NOTICE, the other two warn once they
 * have had nothing for 3 session timeouts (counted, recorded as the
 * no_assignment alarm that fails `inspect status --check`), and every
 * line carries the tag of the worker it is about, not the process's last
 * worker's.  When the owner leaves, its revocation is logged and another
 * worker's assignment ends its stretch without partitions.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_child.h"
#include "consumer/worker.h"
#include "support.h"

#define WORKERS 3

static const char *const ids[WORKERS] = {"member-a", "member-b", "member-c"};

/* The file standard error goes to during the test, and the saved one. */
static char *log_path;
static int saved_err = -1;

static void capture_stderr(const char *dir)
{
	int fd;

	log_path = tt_path(dir, "stderr.log");
	fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert(fd >= 0);
	fflush(stderr);
	saved_err = dup(STDERR_FILENO);
	cr_assert(dup2(fd, STDERR_FILENO) >= 0);
	close(fd);
}

static void restore_stderr(void)
{
	fflush(stderr);
	dup2(saved_err, STDERR_FILENO);
	close(saved_err);
}

static char *read_log(void)
{
	FILE *f = fopen(log_path, "rb");
	char *text = NULL;
	size_t len = 0, n;
	char chunk[4096];

	cr_assert(f);
	cc_append(&text, &len, "", 0);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		cc_append(&text, &len, chunk, n);
	fclose(f);
	return text;
}

/* The worker whose tag a text line carries ("<ts> LEVEL tag[pid] ..."),
 * -1 if none of ours. */
static int line_tag(const char *line)
{
	const char *p = strchr(line, ' ');

	if (p)
		p = strchr(p + 1, ' ');
	for (int i = 0; p && i < WORKERS; i++)
		if (strncmp(p + 1, ids[i], strlen(ids[i])) == 0 &&
		    p[1 + strlen(ids[i])] == '[')
			return i;
	return -1;
}

/* Checks every line of @p log naming a worker ("worker member-b of")
 * carries that worker's tag; counts the lines of @p level containing
 * @p what per tag into @p per (WORKERS entries). */
static void scan(const char *log, const char *level, const char *what,
		 int per[WORKERS])
{
	char *copy = strdup(log), *save = NULL;

	memset(per, 0, sizeof(int) * WORKERS);
	for (char *line = strtok_r(copy, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		int tag = line_tag(line);
		char level_field[32];

		snprintf(level_field, sizeof(level_field), " %s ", level);
		for (int i = 0; i < WORKERS; i++) {
			char named[64];

			snprintf(named, sizeof(named), "worker %s of", ids[i]);
			if (strstr(line, named))
				cr_expect_eq(tag, i,
					     "a line about %s carries "
					     "another tag: %s",
					     ids[i], line);
		}
		if (strstr(line, level_field) && strstr(line, what)) {
			cr_expect(tag >= 0, "no worker's tag: %s", line);
			if (tag >= 0)
				per[tag]++;
		}
	}
	free(copy);
}

static int owner(tbx_worker_t *w[WORKERS])
{
	int found = -1;

	for (int i = 0; i < WORKERS; i++)
		if (w[i] && w[i]->part_cnt > 0)
			found = i;
	return found;
}

Test(membership, assignment_is_logged_and_a_member_without_any_is_flagged,
     .timeout = 600)
{
	char *dir = tt_tmpdir();
	char *store = tt_store_new(dir, "s.db");
	char *tokens = tt_tokens_new(dir, "tokens.db", 0);
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop"};
	tbx_worker_t *w[WORKERS];
	time_t end;
	int first = -1, next = -1, per[WORKERS], alarms = 0;
	char *log;

	tt_cluster_topic(c, "in", 1);
	tt_hop_table(store, "hop");
	capture_stderr(dir);
	for (int i = 0; i < WORKERS; i++) {
		char err[512];

		char *prom = tt_path(dir, ids[i]);

		w[i] = tbx_worker_new(tt_conf(c->bootstraps, "g", store, tokens,
					      "worker.id", ids[i], "log.level",
					      "notice", "metrics.textfile",
					      prom, NULL),
				      err, sizeof(err));
		free(prom);
		cr_assert(w[i], "%s", err);
		cr_assert_eq(tbx_worker_register(w[i], "in", "Ping",
						 tt_hop_handle, &hop),
			     TBX_OK);
	}

	/* One member owns the partition (the group may move it while
	 * members join); the two others have none for 3 session timeouts
	 * (4 s in tt_conf()) and warn. */
	end = time(NULL) + 240 * tt_time_factor();
	for (;;) {
		int warned = 0;

		for (int i = 0; i < WORKERS; i++)
			cr_assert_eq(tbx_worker_poll(w[i], 20, NULL), TBX_OK,
				     "%s", tbx_worker_errstr(w[i]));
		first = owner(w);
		for (int i = 0; i < WORKERS; i++)
			warned += i != first && w[i]->unassigned_alarm_ms;
		if (first >= 0 && warned == WORKERS - 1)
			break;
		cr_assert(time(NULL) < end, "not 1 owner and %d warned members",
			  WORKERS - 1);
	}
	for (int i = 0; i < WORKERS; i++) {
		char *prom = tt_path(dir, ids[i]), *text, want[128];
		FILE *f;

		alarms += (int)w[i]->unassigned_alarms;
		if (i != first)
			cr_expect_geq(w[i]->unassigned_alarms, 1, "%s", ids[i]);
		else
			cr_expect_eq(w[i]->unassigned_alarm_ms, 0,
				     "the owner is warned of");
		/* The metric, as a scraper reads it. */
		tbx__worker_metrics_refresh(w[i], 1);
		f = fopen(prom, "rb");
		cr_assert(f, "%s", prom);
		text = calloc(1, 1 << 20);
		cr_assert(text);
		cr_assert(fread(text, 1, (1 << 20) - 1, f) > 0);
		fclose(f);
		snprintf(want, sizeof(want),
			 "tokenbox_unassigned_alarms_total{group=\"g\"} %llu\n",
			 (unsigned long long)w[i]->unassigned_alarms);
		cr_expect(strstr(text, want), "%s: no '%s' in\n%s", ids[i],
			  want, text);
		free(text);
		free(prom);
	}
	cr_expect_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_alarms WHERE "
				     "name = 'no_assignment'"),
		     1);
	cr_expect_eq(tt_count(store, "SELECT count FROM tbx_alarms WHERE "
				     "name = 'no_assignment'"),
		     alarms);
	{
		const char *args[] = {"inspect",  "--store", store,
				      "--tokens", tokens,    "status",
				      "--check",  NULL};
		cc_result_t res = cc_run(args);

		cr_expect(cc_exited(res.status, 1), "%d: %s%s", res.status,
			  res.out, res.err);
		cr_expect(strstr(res.out, "no_assignment"), "%s", res.out);
		cc_result_free(&res);
	}

	/* The owner leaves: its revocation, then another's assignment. */
	tbx_worker_destroy(w[first]);
	w[first] = NULL;
	end = time(NULL) + 240 * tt_time_factor();
	while ((next = owner(w)) < 0) {
		for (int i = 0; i < WORKERS; i++)
			if (w[i])
				cr_assert_eq(tbx_worker_poll(w[i], 20, NULL),
					     TBX_OK, "%s",
					     tbx_worker_errstr(w[i]));
		cr_assert(time(NULL) < end, "nobody took the partition");
	}
	for (int i = 0; i < WORKERS; i++)
		tbx_worker_destroy(w[i]);
	restore_stderr();

	log = read_log();
	/* Each line under its own worker's tag (scan()), and the events of
	 * each worker in its lines; rebalances while members join may add
	 * more. */
	scan(log, "NOTICE", "started: joining group g", per);
	for (int i = 0; i < WORKERS; i++)
		cr_expect_eq(per[i], 1, "%s: no start line:\n%s", ids[i], log);
	scan(log, "NOTICE", "assigned 1 partition(s) of group g: in [0]", per);
	cr_expect_geq(per[first], 1, "%s: no assignment line:\n%s", ids[first],
		      log);
	cr_expect_geq(per[next], 1, "%s: no assignment line:\n%s", ids[next],
		      log);
	scan(log, "NOTICE", "revoked 1 partition(s) of group g: in [0]", per);
	cr_expect_geq(per[first], 1, "%s: no revocation line:\n%s", ids[first],
		      log);
	scan(log, "WARN", "has had no partition", per);
	for (int i = 0; i < WORKERS; i++)
		if (i != first)
			cr_expect_geq(per[i], 1, "%s: no warning:\n%s", ids[i],
				      log);
	scan(log, "NOTICE", "partitions again after", per);
	cr_expect_geq(per[next], 1, "%s's stretch without ended silently:\n%s",
		      ids[next], log);
	free(log);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
	free(log_path);
}
