/*
 * Nothing in flight lost on the upgrade to the batched protocol (issue
 * 24, item 5; docs/batched-tokens.md, "Upgrade from schema 8 and the
 * per-message format").
 *
 * A worker on `-X outbox.layout=record -X tokens.format=message` writes
 * exactly the previous release's wire format and store rows: a record
 * row (tbx_outbox) per handled record, a token row (tbx_tokens) per
 * message and receiving group, each message with tbx-token.  That is
 * the "old sender" below; the "new" worker runs `-X outbox.layout=batch
 * -X tokens.format=set` (batch rows, its own messages in token sets).
 *
 * - The mixed pipeline: publisher -> g0 (old) -> g1 (new) -> g2 (a third
 *   group): every message handled once per group, the copies injected
 *   upstream of g0 and of g1 dropped, and nothing left in any store
 *   table.
 * - An upgrade in flight: g1 on the old settings is killed after A (its
 *   record rows committed, no token minted) or after B (the rows'
 *   per-message tokens minted and recorded), and restarted on the new
 *   ones: each record handled once, each of its messages handled once
 *   by g2, nothing left.
 *
 * tests/test_worker_obatch.c already covers records in the per-message
 * format reaching a batch worker from a publisher; here they come from a
 * worker, and the record rows are carried over.  SQLite files apart, and
 * in the pg tier schemas apart.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "consumer/worker.h"
#include "fixture.h"

/* The previous release's wire format and store rows. */
#define OLD_LAYOUT "outbox.layout", "record", "tokens.format", "message"
/* The batched protocol's. */
#define NEW_LAYOUT "outbox.layout", "batch", "tokens.format", "set"

static tbx_worker_t *worker(const char *bootstraps, const char *group,
			    const char *store, const char *tokens,
			    const char *topic, const char *type, tt_hop_t *hop,
			    const char *k1, const char *v1, const char *k2,
			    const char *v2)
{
	char err[512];
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(bootstraps, group, store, tokens, k1, v1, k2, v2, NULL),
	    err, sizeof(err));

	cr_assert(w, "%s: %s", group, err);
	cr_assert_eq(tbx_worker_register(w, topic, type, tt_hop_handle, hop),
		     TBX_OK);
	return w;
}

static int64_t count(const char *store, const char *table)
{
	char sql[128];

	snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s", table);
	return tt_count(store, sql);
}

/* @p n rows in @p table of @p store, each payload once. */
static void once(const char *store, const char *table, int64_t n)
{
	char sql[128];

	snprintf(sql, sizeof(sql), "SELECT COUNT(DISTINCT payload) FROM %s",
		 table);
	cr_assert_eq(count(store, table), n, "%s: %lld rows", table,
		     (long long)count(store, table));
	cr_assert_eq(tt_count(store, sql), n, "%s: a payload twice", table);
}

/* No row of the protocol left in a service store. */
static void service_empty(const char *store)
{
	static const char *const tables[] = {"tbx_outbox", "tbx_obatch",
					     "tbx_cover_msg"};

	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		cr_assert_eq(count(store, tables[i]), 0, "%s: %s left", store,
			     tables[i]);
}

/* ... nor in the token store. */
static void tokens_empty(const char *tokens)
{
	static const char *const tables[] = {"tbx_tokens", "tbx_registrations",
					     "tbx_tset", "tbx_breg"};

	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		cr_assert_eq(count(tokens, tables[i]), 0, "%s left", tables[i]);
}

static const char *header(const tt_record_t *r, const char *name)
{
	const void *v = NULL;
	size_t len = 0;

	return r->headers &&
		       rd_kafka_header_get_last(r->headers, name, &v, &len) ==
			   RD_KAFKA_RESP_ERR_NO_ERROR
		   ? "present"
		   : NULL;
}

/* Every record of @p topic in the per-message format (tbx-token, no
 * tbx-tset), or with @p sets in token sets (tbx-tset and tbx-tbit, no
 * tbx-token).  @returns how many. */
static size_t format_of(const char *bootstraps, const char *topic, int sets)
{
	tt_record_t *recs;
	size_t cnt = tt_read_topic(bootstraps, topic, &recs);

	for (size_t i = 0; i < cnt; i++) {
		int tset = header(&recs[i], "tbx-tset") != NULL;
		int tbit = header(&recs[i], "tbx-tbit") != NULL;

		cr_assert(recs[i].id && recs[i].seq, "%s: untokened", topic);
		cr_assert_eq(!!recs[i].token, !sets,
			     "%s: tbx-token %s where the format is %s", topic,
			     recs[i].token ? "present" : "absent",
			     sets ? "set" : "message");
		cr_assert(tset == sets && tbit == sets,
			  "%s: tbx-tset/tbx-tbit where the format is %s", topic,
			  sets ? "set" : "message");
	}
	tt_records_free(recs, cnt);
	return cnt;
}

/* Every record of @p topic re-produced once, byte for byte. */
static size_t copy_all(const char *bootstraps, const char *topic)
{
	tt_record_t *recs;
	size_t cnt = tt_read_topic(bootstraps, topic, &recs);

	tt_reproduce(bootstraps, topic, recs, cnt);
	tt_records_free(recs, cnt);
	return cnt;
}

typedef struct dropped {
	tbx_worker_t **w;
	uint64_t want[3];
} dropped_t;

static int all_dropped(void *opaque)
{
	dropped_t *d = opaque;

	for (int i = 0; i < 3; i++) {
		tbx_stats_t st;

		tbx_worker_stats(d->w[i], &st);
		if (st.duplicates_dropped < d->want[i])
			return 0;
	}
	return 1;
}

/*
 * publisher -> "in" -> g0 (old) -> "mid" -> g1 (new) -> "out" -> g2 (old):
 * g1 reads g0's per-message tokens and sends in sets, which g2 (on the
 * default settings) reads.  Then a copy of every record of "in" and
 * "mid" (upstream re-sends, by hand): each dropped by its group.
 */
Test(upgrade, an_old_sender_feeds_a_new_receiver_each_message_once,
     .timeout = 300)
{
	enum { N = 10 };
	char *dir = tt_tmpdir();
	char *s0 = tt_store_new(dir, "s0"), *s1 = tt_store_new(dir, "s1");
	char *s2 = tt_store_new(dir, "s2");
	char *tokens = tt_tokens_new(dir, "tokens", 0);
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t h0 = {
	    .table = "hop0", .next_topic = "mid", .next_type = "Mid"};
	tt_hop_t h1 = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	tt_hop_t h2 = {.table = "hop2"};
	tbx_worker_t *w[3];
	tbx_stats_t st[3];
	size_t copies_in, copies_mid;

	tt_cluster_topic(c, "in", 2);
	tt_cluster_topic(c, "mid", 2);
	tt_cluster_topic(c, "out", 3);
	tt_subscribe(tokens, "in", "g0");
	tt_subscribe(tokens, "mid", "g1");
	tt_subscribe(tokens, "out", "g2");
	tt_hop_table(s0, "hop0");
	tt_hop_table(s1, "hop1");
	tt_hop_table(s2, "hop2");
	w[0] = worker(c->bootstraps, "g0", s0, tokens, "in", "Ping", &h0,
		      OLD_LAYOUT);
	w[1] = worker(c->bootstraps, "g1", s1, tokens, "mid", "Mid", &h1,
		      NEW_LAYOUT);
	w[2] = worker(c->bootstraps, "g2", s2, tokens, "out", "Pong", &h2, NULL,
		      NULL, NULL, NULL);
	for (int i = 0; i < 3; i++)
		tbx__worker_assign_directly(w[i]);
	tt_publish(c->bootstraps, tokens, "in", "Ping", N, 4, "m");
	tt_want_t want = {s2, "SELECT COUNT(*) FROM hop2", N};
	cr_assert(tt_drive(w, 3, tt_reached, &want, 10, 120),
		  "g2 never handled every message");
	cr_assert(tt_drive(w, 3, NULL, NULL, 20, 120));
	once(s0, "hop0", N);
	once(s1, "hop1", N);
	once(s2, "hop2", N);
	/* The old sender wrote the previous release's format, the new one
	 * token sets. */
	cr_assert_eq(format_of(c->bootstraps, "mid", 0), N);
	cr_assert_eq(format_of(c->bootstraps, "out", 1), N);

	/* Copies injected upstream of the old sender and of the new
	 * receiver: dropped, nothing handled again. */
	copies_in = copy_all(c->bootstraps, "in");
	copies_mid = copy_all(c->bootstraps, "mid");
	dropped_t d = {w, {copies_in, copies_mid, 0}};
	cr_assert(tt_drive(w, 3, all_dropped, &d, 10, 120),
		  "the copies were not all dropped");
	cr_assert(tt_drive(w, 3, NULL, NULL, 20, 120));
	once(s0, "hop0", N);
	once(s1, "hop1", N);
	once(s2, "hop2", N);
	for (int i = 0; i < 3; i++) {
		tbx_worker_stats(w[i], &st[i]);
		cr_assert_eq(st[i].processed, N, "g%d", i);
		cr_assert_eq(st[i].dead_lettered, 0, "g%d", i);
	}
	cr_assert_eq(st[0].duplicates_dropped, N);
	cr_assert_eq(st[1].duplicates_dropped, N);
	cr_assert_eq(st[2].duplicates_dropped, 0);
	cr_assert_eq(format_of(c->bootstraps, "out", 1), N,
		     "g1 sent a message again");
	service_empty(s0);
	service_empty(s1);
	service_empty(s2);
	tokens_empty(tokens);
	for (int i = 0; i < 3; i++)
		tbx_worker_destroy(w[i]);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(s0);
	free(s1);
	free(s2);
	free(tokens);
}

/*
 * g1 on the old settings (tbx_prog_worker: "in" -> hop1 -> "out"), with
 * every record re-sent once upstream, killed by SIGKILL at @p point with
 * its record rows in flight; then restarted on the new settings, g2
 * reading "out": each record handled once, each message once by g2, no
 * row, token, set or registration left.
 */
static void upgrade_in_flight(const char *point)
{
	enum { N = 6 };
	char *dir = tt_tmpdir();
	char *s1 = tt_store_new(dir, "s1"), *s2 = tt_store_new(dir, "s2");
	char *tokens = tt_tokens_new(dir, "tokens", 0);
	tt_cluster_t *c = tt_cluster_new(1);
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	char prog[512], crash[128];
	tt_hop_t h1 = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	tt_hop_t h2 = {.table = "hop2"};
	tt_record_t *recs;
	tbx_worker_t *w[2];
	tbx_stats_t st;
	size_t cnt;
	int status;

	tt_cluster_topic(c, "in", 2);
	tt_cluster_topic(c, "out", 2);
	tt_cluster_topic(c, "in.dlq", 1);
	tt_subscribe(tokens, "in", "g1");
	tt_subscribe(tokens, "out", "g2");
	tt_hop_table(s1, "hop1");
	tt_hop_table(s2, "hop2");
	tt_publish(c->bootstraps, tokens, "in", "Ping", N, 2, "m");
	cnt = copy_all(c->bootstraps, "in");
	cr_assert_eq(cnt, N);

	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	snprintf(crash, sizeof(crash), "TBX_CRASH_AT=%s", point);
	{
		char *argv[] = {prog,
				c->bootstraps,
				s1,
				tokens,
				"g1",
				"cleanup.interval.ms=0",
				"outbox.layout=record",
				"tokens.format=message",
				NULL};
		char *envv[] = {crash, "TBX_TEST_ASSIGN=1", NULL};

		status = tt_wait(tt_spawn(argv, envv), 90);
	}
	cr_assert(status != -1, "%s: the old worker never got there", point);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "%s: the old worker was not killed there (status %d)", point,
		  status);
	/* In flight: record rows, no batch row. */
	cr_assert_gt(count(s1, "tbx_outbox"), 0, "%s: no record row", point);
	cr_assert_eq(count(s1, "tbx_obatch"), 0);
	if (strcmp(point, "B.recorded") == 0)
		cr_assert_gt(tt_count(s1, "SELECT COUNT(*) FROM tbx_outbox "
					  "WHERE attempt IS NOT NULL"),
			     0, "no row with its per-message tokens");

	/* The upgrade: g1 on the new settings. */
	w[0] = worker(c->bootstraps, "g1", s1, tokens, "in", "Ping", &h1,
		      NEW_LAYOUT);
	w[1] = worker(c->bootstraps, "g2", s2, tokens, "out", "Pong", &h2, NULL,
		      NULL, NULL, NULL);
	/* Register-cleanup first: a recorded attempt's tokens must
	 * survive it. */
	cr_assert_eq(tbx_worker_cleanup(w[0], 0, NULL), TBX_OK);
	tbx__worker_assign_directly(w[0]);
	tbx__worker_assign_directly(w[1]);
	tt_want_t want = {s2, "SELECT COUNT(*) FROM hop2", N};
	cr_assert(tt_drive(w, 2, tt_reached, &want, 10, 120),
		  "%s: g2 never handled every message", point);
	cr_assert(tt_drive(w, 2, NULL, NULL, 20, 120));
	cr_assert_eq(tbx_worker_cleanup(w[0], 0, NULL), TBX_OK);
	once(s1, "hop1", N);
	once(s2, "hop2", N);
	tbx_worker_stats(w[0], &st);
	cr_assert_geq(st.resumed, 1, "%s: no record row resumed", point);
	service_empty(s1);
	service_empty(s2);
	tokens_empty(tokens);
	/* The carried rows went out in their own format (tbx-token), the
	 * records the old worker had not reached in sets. */
	cnt = tt_read_topic(c->bootstraps, "out", &recs);
	cr_assert_geq(cnt, N);
	{
		size_t carried = 0;

		for (size_t i = 0; i < cnt; i++)
			carried += recs[i].token != NULL;
		cr_assert_geq(carried, 1, "%s: no carried message", point);
	}
	tt_records_free(recs, cnt);
	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(s1);
	free(s2);
	free(tokens);
}

/* Record rows committed, no token minted: the new worker mints their
 * per-message tokens (B) and finishes them. */
Test(upgrade, record_rows_left_after_A_finish_once_on_batch_rows,
     .timeout = 300)
{
	upgrade_in_flight("A.committed");
}

/* Record rows with their per-message tokens recorded: re-dispatched with
 * the same tokens. */
Test(upgrade, record_rows_left_after_B_finish_once_on_batch_rows,
     .timeout = 300)
{
	upgrade_in_flight("B.recorded");
}
