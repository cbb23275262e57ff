/*
 * Stray records (docs/batched-tokens.md, "Records outside their set's
 * partition"): a record whose tbx-tbit names another partition than the
 * one it arrived on, as a copy made by hand to another partition is.  A
 * worker on outbox.layout=batch checks it against its set's partition
 * and handles it exactly once -- or drops it, its bit clear -- and
 * says so: the stray_records counter, a WARN line (at most once a
 * minute) and the stray_records alarm for `inspect status --check`.
 * SQLite (separate files, and one) and, in the pg tier, PostgreSQL
 * schemas (apart and joined).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_child.h"
#include "fixture.h"

typedef struct env {
	char *dir, *store, *tokens, *log;
	tt_cluster_t *c;
	tt_hop_t hop;
	tbx_worker_t *w;
	int saved_err;
} env_t;

static void env_init(env_t *e, int one_file)
{
	char err[512];
	int fd;

	e->dir = tt_tmpdir();
	e->store = tt_store_new(e->dir, "s1");
	/* The pg tier: one file is one connection (the joined path). */
	e->tokens = one_file && !tt_pg_tier()
			? strdup(e->store)
			: tt_tokens_new(e->dir, "tokens", one_file);
	e->c = tt_cluster_new(1);
	tt_cluster_topic(e->c, "in", 2);
	tt_cluster_topic(e->c, "out", 2);
	tt_subscribe(e->tokens, "in", "g1");
	tt_hop_table(e->store, "hop1");
	e->hop = (tt_hop_t){
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	/* The worker's lines, to find its WARN in. */
	e->log = tt_path(e->dir, "stderr.log");
	fflush(stderr);
	e->saved_err = dup(STDERR_FILENO);
	fd = open(e->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert(fd >= 0 && e->saved_err >= 0);
	cr_assert(dup2(fd, STDERR_FILENO) >= 0);
	close(fd);
	e->w =
	    tbx_worker_new(tt_conf(e->c->bootstraps, "g1", e->store, e->tokens,
				   "outbox.layout", "batch", NULL),
			   err, sizeof(err));
	cr_assert(e->w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(e->w, "in", "Ping", tt_hop_handle, &e->hop),
	    TBX_OK);
}

/* What the worker logged so far (stderr back to the terminal). */
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

/* Polls until @p n records were consumed in all and the worker is idle:
 * each of hop1's rows once. */
static void drive(env_t *e, uint64_t consumed, int64_t handled)
{
	tt_drain(&e->w, consumed);
	cr_assert(tt_drive(&e->w, 1, NULL, NULL, 20, 60));
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM hop1"), handled);
	cr_assert_eq(
	    tt_count(e->store, "SELECT COUNT(DISTINCT payload) FROM hop1"),
	    handled, "each record handled once");
}

/* Record @p k of "in" (in the order read back) copied to the other of
 * the topic's two partitions, keeping its headers: a stray copy. */
static void copy_to_other_partition(const env_t *e, const char *payload)
{
	tt_record_t *recs;
	size_t cnt = tt_read_topic(e->c->bootstraps, "in", &recs), found = 0;

	for (size_t i = 0; i < cnt; i++) {
		if (!recs[i].payload || strcmp(recs[i].payload, payload) != 0 ||
		    found)
			continue;
		recs[i].partition = 1 - recs[i].partition;
		tt_reproduce(e->c->bootstraps, "in", &recs[i], 1);
		found++;
	}
	tt_records_free(recs, cnt);
	cr_assert_eq(found, 1, "no record %s to copy", payload);
}

/* Nothing of g1's left: no batch row, no bit of its sets. */
static void nothing_left(const env_t *e)
{
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM tbx_obatch"), 0);
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM tbx_cover_msg"),
		     0);
	cr_assert_eq(tt_count(e->tokens,
			      "SELECT COUNT(*) FROM tbx_tset WHERE grp = 'g1'"),
		     0, "every bit cleared");
}

/* The stray record was said: one WARN naming the counter and the copy,
 * and the alarm. */
static void said(env_t *e, const char *where)
{
	char *log = env_log(e), *line = strstr(log, "stray_records");
	char *end;

	cr_assert(line, "no WARN of the stray record in:\n%s", log);
	while (line > log && line[-1] != '\n')
		line--;
	if ((end = strchr(line, '\n')))
		*end = '\0';
	cr_assert(strstr(line, " WARN "), "not at WARN: %s", line);
	cr_assert(strstr(line, where), "the WARN does not name %s: %s", where,
		  line);
	free(log);
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM tbx_alarms WHERE "
					"grp = 'g1' AND name = "
					"'stray_records'"),
		     1);
}

/*
 * A copy made before the work: record s-0 (set partition 0, bit 0) is
 * on partition 0 and, copied, on partition 1.  Whichever A meets first
 * handles it, the other copy is not handled again; the copy on
 * partition 1 is the stray one, counted once.
 */
static void copy_before_the_work(int one_file)
{
	env_t e;
	tbx_stats_t st;

	env_init(&e, one_file);
	tt_publish_sets(e.c->bootstraps, e.tokens, "in", "Ping", 4, 2, 0, "s",
			NULL);
	copy_to_other_partition(&e, "s-0");
	drive(&e, 5, 4);
	st = stats(&e);
	cr_assert_eq(st.processed, 4);
	cr_assert_eq(st.stray_records, 1);
	cr_assert_eq(st.dead_lettered, 0);
	nothing_left(&e);
	said(&e, "in [1] @2: tbx-tbit names partition 0");
	env_fini(&e);
}

Test(stray, a_stray_copy_is_handled_once_counted_and_warned_of)
{
	copy_before_the_work(0);
}

/* One file (finish.defer: a batch's D+E wait for the next A), or the
 * joined path on PostgreSQL: the alarm is recorded all the same. */
Test(stray, a_stray_copy_is_handled_once_counted_and_warned_of_one_file)
{
	copy_before_the_work(1);
}

/* A copy of finished work: its bit is clear, so the stray copy is
 * dropped, and still counted and warned of. */
Test(stray, a_stray_copy_of_finished_work_is_dropped_and_counted)
{
	env_t e;
	tbx_stats_t st;

	env_init(&e, 0);
	tt_publish_sets(e.c->bootstraps, e.tokens, "in", "Ping", 4, 2, 0, "s",
			NULL);
	drive(&e, 4, 4);
	cr_assert_eq(stats(&e).stray_records, 0);
	copy_to_other_partition(&e, "s-1");
	drive(&e, 5, 4);
	st = stats(&e);
	cr_assert_eq(st.processed, 4);
	cr_assert_eq(st.duplicates_dropped, 1);
	cr_assert_eq(st.stray_records, 1);
	nothing_left(&e);
	said(&e, "in [0] @2: tbx-tbit names partition 1");
	env_fini(&e);
}

/* Records on their own partitions are not stray. */
Test(stray, records_on_their_sets_partitions_are_not_counted)
{
	env_t e;
	char *log;

	env_init(&e, 0);
	tt_publish_sets(e.c->bootstraps, e.tokens, "in", "Ping", 6, 2, 0, "s",
			NULL);
	drive(&e, 6, 6);
	cr_assert_eq(stats(&e).stray_records, 0);
	log = env_log(&e);
	cr_assert_null(strstr(log, "stray_records"), "%s", log);
	free(log);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_alarms WHERE "
				       "name = 'stray_records'"),
		     0);
	env_fini(&e);
}
