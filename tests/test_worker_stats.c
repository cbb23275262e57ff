/* The stats line: one JSON object per interval, counters that match the
 * work done. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support.h"

typedef struct want {
	const char *db;
} want_t;

static int five_done(void *opaque)
{
	want_t *w = opaque;

	return tt_count(w->db, "SELECT COUNT(*) FROM hop1") >= 5 &&
	       tt_count(w->db, "SELECT COUNT(*) FROM tbx_outbox") == 0;
}

Test(stats, json_line_reports_the_counters_of_the_work_done)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s1.db"), *tokens = tt_path(dir, "t.db");
	char *log = tt_path(dir, "stderr.log");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop1"};
	char err[512], line[4096];
	cJSON *last = NULL;
	int saved, fd, lines = 0;

	tt_cluster_topic(c, "in", 1);
	tt_hop_table(store, "hop1");
	tbx_worker_t *w =
	    tbx_worker_new(tt_conf(c->bootstraps, "g1", store, tokens,
				   "stats.interval.ms", "1", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(c->bootstraps, tokens, "in", "Ping", 5, 1, "m");

	fflush(stderr);
	saved = dup(STDERR_FILENO);
	fd = open(log, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	cr_assert(fd >= 0);
	dup2(fd, STDERR_FILENO);
	close(fd);
	want_t want = {store};
	int ok = tt_drive(&w, 1, five_done, &want, 5, 60);
	/* one more batch so that a line follows the last piece of work */
	tbx_worker_poll(w, 10, NULL);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	cr_assert(ok);

	FILE *f = fopen(log, "r");
	cr_assert(f);
	while (fgets(line, sizeof(line), f)) {
		/* "<time> INFO <tag>[<pid>] stats {...}" */
		char *json = strstr(line, " stats {");
		if (!json)
			continue;
		cJSON *obj = cJSON_Parse(json + 7);
		cr_assert(obj, "not JSON: %s", line);
		lines++;
		cJSON_Delete(last);
		last = obj;
	}
	fclose(f);
	cr_assert_gt(lines, 0, "no stats line was written");
	cr_assert_str_eq(cJSON_GetObjectItem(last, "group")->valuestring, "g1");
	cr_assert_eq(cJSON_GetObjectItem(last, "processed")->valuedouble, 5);
	cr_assert_eq(cJSON_GetObjectItem(last, "dispatched")->valuedouble, 0);
	cr_assert_eq(cJSON_GetObjectItem(last, "tokens_consumed")->valuedouble,
		     5);
	cr_assert_eq(cJSON_GetObjectItem(last, "outbox_pending")->valuedouble,
		     0);
	cr_assert_geq(cJSON_GetObjectItem(last, "batch_ms_p99")->valuedouble,
		      cJSON_GetObjectItem(last, "batch_ms_p50")->valuedouble);
	cJSON_Delete(last);
	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
	free(log);
}
