/*
 * outbox.layout=batch (docs/batched-tokens.md, "The outbox row by the
 * batch"): a worker handles records in both formats, dead-letters and
 * (ingress.untokened=offsets) handles untokened ones, each once, through
 * one tbx_obatch row per batch; copies are dropped, every token and bit
 * consumed, and no batch row, tbx_cover_msg entry or tbx_outbox row is
 * left.  Separate stores and one file (finish.defer on and off).
 *
 * No case here is about the group's rebalances: every worker is assigned
 * all partitions of its topics directly (tbx__worker_assign_directly(),
 * through the rebalance callback's own path), without the mock cluster's
 * seconds-long first join, and the cases wait for outcomes -- the counts
 * reached and every record polled (tt_caught_up()) -- not for quiet time.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "cli_child.h"
#include "consumer/conf.h"
#include "consumer/stores.h"
#include "consumer/worker.h"
#include "fixture.h"
#include "outbox/outbox.h"

typedef struct env {
	char *dir, *store, *tokens;
	tt_cluster_t *c;
	tt_hop_t hop;
	tbx_worker_t *w;
} env_t;

static void env_init(env_t *e, int one_file, const char *k, const char *v)
{
	char err[512];

	e->dir = tt_tmpdir();
	e->store = tt_store_new(e->dir, "s1");
	/* The pg tier: one file is one connection (the joined path). */
	e->tokens = one_file && !tt_pg_tier()
			? strdup(e->store)
			: tt_tokens_new(e->dir, "tokens", one_file);
	e->c = tt_cluster_new(1);
	tt_cluster_topic(e->c, "in", 2);
	tt_cluster_topic(e->c, "out", 2);
	tt_cluster_topic(e->c, "in.dlq", 1);
	tt_subscribe(e->tokens, "in", "g1");
	tt_hop_table(e->store, "hop1");
	e->hop = (tt_hop_t){
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	e->w =
	    tbx_worker_new(tt_conf(e->c->bootstraps, "g1", e->store, e->tokens,
				   "outbox.layout", "batch", k, v, NULL),
			   err, sizeof(err));
	cr_assert(e->w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(e->w, "in", "Ping", tt_hop_handle, &e->hop),
	    TBX_OK);
	tbx__worker_assign_directly(e->w);
}

static void env_fini(env_t *e)
{
	tbx_worker_destroy(e->w);
	tt_cluster_destroy(e->c);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->store);
	free(e->tokens);
}

static tbx_stats_t stats(const env_t *e)
{
	tbx_stats_t st;

	tbx_worker_stats(e->w, &st);
	return st;
}

/* A tt_drive() condition: @p want reached, and every worker has polled
 * every record of its partitions, none held back for a retry. */
typedef struct settled {
	tt_want_t want;
	tbx_worker_t **w;
	int cnt;
} settled_t;

static int settled(void *opaque)
{
	settled_t *s = opaque;

	return tt_reached(&s->want) && tt_caught_up(s->w, s->cnt);
}

/* Polls @p w until @p want is reached and every worker caught up, and a
 * few idle polls past that: a batch still gathering (batch.max.ms) is
 * run, and a record handled twice would be counted by the caller. */
static int settle(tbx_worker_t **w, int cnt, tt_want_t want)
{
	settled_t s = {want, w, cnt};

	return tt_drive(w, cnt, settled, &s, 4, 60);
}

static void drive_to(env_t *e, int64_t n)
{
	tt_want_t want = {e->store, "SELECT COUNT(*) FROM hop1", n};

	cr_assert(settle(&e->w, 1, want));
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM hop1"), n);
	cr_assert_eq(
	    tt_count(e->store, "SELECT COUNT(DISTINCT payload) FROM hop1"), n,
	    "each record handled once");
}

/* Nothing of the batch rows, or of the record layout, is left. */
static void nothing_left(const env_t *e)
{
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM tbx_obatch"), 0);
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM tbx_cover_msg"),
		     0);
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	cr_assert_eq(tt_count(e->tokens, "SELECT COUNT(*) FROM tbx_tokens "
					 "WHERE grp = 'g1'"),
		     0, "every incoming token consumed");
	cr_assert_eq(tt_count(e->tokens,
			      "SELECT COUNT(*) FROM tbx_tset WHERE grp = 'g1'"),
		     0, "every incoming bit cleared");
	cr_assert_eq(
	    tt_count(e->tokens, "SELECT COUNT(*) FROM tbx_registrations"), 0);
}

/* Every outgoing message once, each with its token. */
static void out_once(const env_t *e, size_t n)
{
	tt_record_t *recs;
	size_t cnt = tt_read_topic(e->c->bootstraps, "out", &recs);

	cr_assert_eq(cnt, n);
	for (size_t i = 0; i < cnt; i++) {
		cr_assert(recs[i].id && recs[i].token);
		for (size_t j = 0; j < i; j++)
			cr_assert_str_neq(recs[i].id, recs[j].id);
	}
	tt_records_free(recs, cnt);
}

/*
 * Ten records in the per-message format, ten in sets, two without a
 * token (dead-lettered): each handled once, one row per batch; then a
 * copy of each tokened record, dropped.
 */
static void once_and_copies(int one_file, const char *k, const char *v)
{
	env_t e;
	tt_record_t *recs;
	size_t cnt;
	tbx_stats_t st;

	env_init(&e, one_file, k, v);
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 10, 2, "m");
	tt_publish_sets(e.c->bootstraps, e.tokens, "in", "Ping", 10, 2, 0, "s",
			NULL);
	tt_produce_plain(e.c->bootstraps, "in", 0, "key-0", "plain-0", "Ping");
	tt_produce_plain(e.c->bootstraps, "in", 1, "key-1", "plain-1", "Ping");
	drive_to(&e, 20);
	st = stats(&e);
	cr_assert_eq(st.processed, 20);
	cr_assert_eq(st.dead_lettered, 2);
	cr_assert_eq(st.duplicates_dropped, 0);
	cr_assert_eq(st.tokens_consumed, 20);
	cr_assert_geq(st.resume_reloads, 1, "the first A loads the rows");
	cr_assert_eq(st.resume_load_failures, 0);
	nothing_left(&e);
	out_once(&e, 20);
	cnt = tt_read_topic(e.c->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 2);
	tt_records_free(recs, cnt);

	/* A copy of every tokened record: no row covers it, its token is
	 * gone: dropped. */
	cnt = tt_read_topic(e.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 22);
	for (size_t i = 0; i < cnt; i++)
		if (recs[i].token || recs[i].seq)
			tt_reproduce(e.c->bootstraps, "in", &recs[i], 1);
	tt_records_free(recs, cnt);
	drive_to(&e, 20);
	st = stats(&e);
	cr_assert_eq(st.processed, 20);
	cr_assert_eq(st.duplicates_dropped, 20);
	cr_assert_eq(st.dead_lettered, 2);
	nothing_left(&e);
	out_once(&e, 20);
	env_fini(&e);
}

Test(obatch, each_once_copies_dropped_separate_stores)
{
	once_and_copies(0, NULL, NULL);
}

Test(obatch, each_once_copies_dropped_one_file)
{
	once_and_copies(1, NULL, NULL);
}

Test(obatch, each_once_copies_dropped_one_file_without_defer)
{
	once_and_copies(1, "finish.defer", "false");
}

/* Batches of one record: a row each. */
Test(obatch, each_once_batches_of_one)
{
	once_and_copies(0, "batch.max.messages", "1");
}

/* ingress.untokened=offsets: untokened records are handled, covered by
 * the row by their offset (kind 2), once. */
Test(obatch, untokened_by_offset_handled_once)
{
	env_t e;
	tbx_stats_t st;

	env_init(&e, 0, "ingress.untokened", "offsets");
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 4, 2, "m");
	for (int i = 0; i < 4; i++) {
		char payload[16];

		snprintf(payload, sizeof(payload), "plain-%d", i);
		tt_produce_plain(e.c->bootstraps, "in", i % 2, "k", payload,
				 "Ping");
	}
	drive_to(&e, 8);
	st = stats(&e);
	cr_assert_eq(st.processed, 8);
	cr_assert_eq(st.dead_lettered, 0);
	nothing_left(&e);
	out_once(&e, 8);
	env_fini(&e);
}

/*
 * A record-layout row left in tbx_outbox for a record (a rolling change of
 * layout: a worker on `record` committed its A, then stopped): a worker
 * on `batch` resumes it -- its message sent, the record's token
 * consumed, the handler not run -- and handles the group's other records.
 * On SQLite A answers the row check for a whole batch by counting the
 * group's tbx_outbox rows (none: no lookup per record); this row makes
 * the count 1 and the record must still be found by its lookup.
 */
Test(obatch, a_record_layout_row_left_is_resumed_not_handled_again)
{
	env_t e;
	tt_record_t *recs, *out;
	tbx_outbox_t *store;
	tbx__row_t row;
	tbx_stats_t st;
	size_t cnt, nout, from_row = 0;

	env_init(&e, 0, NULL, NULL);
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 3, 1, "m");
	cnt = tt_read_topic(e.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 3);
	tbx__row_init(&row);
	tbx__strlcpy(row.msg_id, recs[1].id, sizeof(row.msg_id));
	tbx__strlcpy(row.in_token, recs[1].token, sizeof(row.in_token));
	tbx__strlcpy(row.in_topic, "in", sizeof(row.in_topic));
	row.in_partition = recs[1].partition;
	row.in_offset = recs[1].offset;
	row.kind = TBX_ROW_HANDLED;
	cr_assert_eq(tbx__row_add(&row, "out", "Pong", NULL, 0, "from-the-row",
				  12, NULL, 0),
		     TBX_OK);
	store = tt_outbox_open(e.store);
	cr_assert_eq(tbx_outbox_begin(store), TBX_OK);
	cr_assert_eq(tbx_outbox_row_insert(store, "g1", &row), TBX_OK);
	cr_assert_eq(tbx_outbox_commit(store), TBX_OK);
	tbx_outbox_close(store);
	tbx__row_clear(&row);

	drive_to(&e, 2);
	st = stats(&e);
	cr_assert_eq(st.resumed, 1, "the row of the record layout resumed");
	cr_assert_eq(st.duplicates_dropped, 0);
	nothing_left(&e);
	nout = tt_read_topic(e.c->bootstraps, "out", &out);
	cr_assert_eq(nout, 3);
	for (size_t i = 0; i < nout; i++)
		from_row += out[i].payload &&
			    strcmp(out[i].payload, "from-the-row") == 0;
	cr_assert_eq(from_row, 1, "the row's message sent once");
	tt_records_free(out, nout);
	tt_records_free(recs, cnt);
	env_fini(&e);
}

/* A batch row that does not decode: the resume check cannot load the
 * group's rows, so no record is judged (A fails, nothing handled),
 * counted, and the resume_load_failed alarm is recorded for `inspect
 * status --check`; once the row is gone the records are handled. */
Test(obatch, a_corrupt_batch_row_stops_A_loudly)
{
	env_t e;
	tbx_stats_t st;

	env_init(&e, 0, NULL, NULL);
	cr_assert_eq(
	    tt_store_sql_try(e.store,
			     "INSERT INTO tbx_obatch (grp, row_id, tokfmt, "
			     "created_ms, cover, "
			     "wire) VALUES ('g1', "
			     "'00000000-0000-7000-8000-000000000000', 1, "
			     "0, X'00', X'0100000000')",
			     "INSERT INTO tbx_obatch (grp, row_id, tokfmt, "
			     "created_ms, cover, wire) VALUES ('g1', "
			     "'00000000-0000-7000-8000-000000000000', 1, 0, "
			     "'\\x00'::bytea, '\\x0100000000'::bytea)"),
	    0);
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 2, 1, "m");
	for (int i = 0; i < 300 && stats(&e).resume_load_failures == 0; i++)
		tbx_worker_poll(e.w, 100, NULL);
	st = stats(&e);
	cr_assert_geq(st.resume_load_failures, 1);
	cr_assert_eq(st.processed, 0);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM hop1"), 0);
	cr_assert_geq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_alarms "
					"WHERE name = 'resume_load_failed'"),
		      1);
	cr_assert_eq(tt_store_sql_try(e.store, "DELETE FROM tbx_obatch", NULL),
		     0);
	drive_to(&e, 2);
	nothing_left(&e);
	env_fini(&e);
}

/* `tokenbox inspect` on the env's stores with @p cmd (NULL-terminated):
 * paths, or in the pg tier the server's URL and the schemas. */
static cc_result_t inspect(const env_t *e, const char *const *cmd)
{
	static char url[2][2200];
	const char *argv[64] = {"inspect"};
	size_t n = 1;

	if (tt_store_is_pg(e->store)) {
		argv[n++] = "-s";
		argv[n++] = tt_store_url(e->store, url[0], sizeof(url[0]));
		argv[n++] = "--schema";
		argv[n++] = tt_store_schema(e->store);
		argv[n++] = "-S";
		argv[n++] = tt_store_url(e->tokens, url[1], sizeof(url[1]));
		argv[n++] = "--tokens-schema";
		argv[n++] = tt_store_schema(e->tokens);
	} else {
		argv[n++] = "-s";
		argv[n++] = e->store;
		argv[n++] = "-S";
		argv[n++] = e->tokens;
	}
	for (size_t i = 0; cmd[i] && n < 63; i++)
		argv[n++] = cmd[i];
	argv[n] = NULL;
	return cc_run(argv);
}

/* How many distinct tbx-ids the records of @p topic carry, each with a
 * token. */
static size_t distinct_ids(const char *bootstraps, const char *topic)
{
	tt_record_t *recs;
	size_t cnt = tt_read_topic(bootstraps, topic, &recs), n = 0;

	for (size_t i = 0; i < cnt; i++) {
		int seen = 0;

		cr_assert(recs[i].id && recs[i].token);
		for (size_t j = 0; j < i && !seen; j++)
			seen = strcmp(recs[i].id, recs[j].id) == 0;
		n += !seen;
	}
	tt_records_free(recs, cnt);
	return n;
}

/*
 * A reply the producer refuses for good (larger than its
 * message.max.bytes): its batch row counts the failed dispatches, and
 * once dispatch.retry.max is used up the reply is given up -- the
 * dead-letter topic cannot take it either (as large), so it is kept in
 * tbx_undelivered, once -- and the rest of the row finishes: the other
 * replies out once, every token consumed, the row gone, the partition
 * going on.
 */
static void refused_reply_given_up(int one_file)
{
	env_t e;
	tbx_stats_t st;
	char err[512], big[6001];
	tt_record_t *recs;
	size_t cnt;

	env_init(&e, one_file, NULL, NULL);
	tbx_worker_destroy(e.w);
	e.w = tbx_worker_new(tt_conf(e.c->bootstraps, "g1", e.store, e.tokens,
				     "outbox.layout", "batch",
				     "kafka.producer.message.max.bytes", "4096",
				     "dispatch.retry.max", "1", NULL),
			     err, sizeof(err));
	cr_assert(e.w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(e.w, "in", "Ping", tt_hop_handle, &e.hop),
	    TBX_OK);
	tbx__worker_assign_directly(e.w);
	memset(big, 'b', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 3, 1, "m");
	tbx_publisher_t *pub = tt_publisher(e.c->bootstraps, e.tokens, "error");
	tbx_out_t out = {.topic = "in",
			 .type = "Ping",
			 .key = "key-0",
			 .key_len = 5,
			 .payload = big,
			 .payload_len = strlen(big)};
	cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	cr_assert_eq(tbx_publisher_flush(pub, NULL), TBX_OK);
	tbx_publisher_destroy(pub);
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 3, 1, "z");
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM tbx_undelivered", 1};
	cr_assert(tt_drive(&e.w, 1, tt_reached, &want, 10, 60),
		  "the refused reply was never given up");
	drive_to(&e, 7);
	nothing_left(&e);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_undelivered "
				       "WHERE grp = 'g1' AND topic = 'out' "
				       "AND length(payload) = 6000 AND token "
				       "IS NOT NULL AND attempts = 2 AND "
				       "error LIKE '%too large%'"),
		     1, "kept once, whole, with its token");
	st = stats(&e);
	cr_assert_eq(st.processed, 7);
	cr_assert_eq(st.undeliverable, 1);
	cr_assert_eq(st.undelivered_stored, 1);
	cr_assert_eq(st.dispatch_failed_permanent, 2);
	/* The other replies out, each with its token; those of the row
	 * sent again while it waited carry the same tbx-id (a copy the
	 * next group drops). */
	cr_assert_eq(distinct_ids(e.c->bootstraps, "out"), 6);
	cnt = tt_read_topic(e.c->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 0, "the dead-letter topic could not take it");
	tt_records_free(recs, cnt);

	/* An operator sees it as a record row's. */
	const char *status[] = {"status", "--check", NULL};
	cc_result_t res = inspect(&e, status);
	cr_assert(cc_exited(res.status, 1), "status --check: %s", res.err);
	cr_assert(strstr(res.out, "Undelivered"), "%s", res.out);
	cc_result_free(&res);
	const char *list[] = {"--json", "undelivered", "list", NULL};
	res = inspect(&e, list);
	cr_assert(cc_exited(res.status, 0), "%s", res.err);
	cr_assert(strstr(res.out, "out") && strstr(res.out, "too large"), "%s",
		  res.out);
	cc_result_free(&res);
	env_fini(&e);
}

Test(obatch, a_refused_reply_is_given_up_and_the_row_finishes)
{
	refused_reply_given_up(0);
}

Test(obatch, a_refused_reply_is_given_up_and_the_row_finishes_one_file)
{
	refused_reply_given_up(1);
}

/*
 * tokens.format=set: the worker's own messages in token sets (tokfmt 2),
 * and a second group, g2 on its own store, reading them.
 */
typedef struct sets_env {
	env_t e;
	char *store2;
	tt_hop_t hop2;
	tbx_worker_t *w[2];
} sets_env_t;

static void sets_env_init2(sets_env_t *se, int one_file, const char *k,
			   const char *v, const char *k2, const char *v2)
{
	env_t *e = &se->e;
	char err[512];

	e->dir = tt_tmpdir();
	e->store = tt_store_new(e->dir, "s1");
	/* The pg tier: one file is one connection (the joined path). */
	e->tokens = one_file && !tt_pg_tier()
			? strdup(e->store)
			: tt_tokens_new(e->dir, "tokens", one_file);
	se->store2 = tt_store_new(e->dir, "s2");
	e->c = tt_cluster_new(1);
	tt_cluster_topic(e->c, "in", 2);
	tt_cluster_topic(e->c, "out", 3);
	tt_cluster_topic(e->c, "in.dlq", 1);
	tt_subscribe(e->tokens, "in", "g1");
	tt_subscribe(e->tokens, "out", "g2");
	tt_hop_table(e->store, "hop1");
	tt_hop_table(se->store2, "hop2");
	e->hop = (tt_hop_t){
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	se->hop2 = (tt_hop_t){.table = "hop2"};
	e->w =
	    tbx_worker_new(tt_conf(e->c->bootstraps, "g1", e->store, e->tokens,
				   "outbox.layout", "batch", "tokens.format",
				   "set", k, v, k2, v2, NULL),
			   err, sizeof(err));
	cr_assert(e->w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(e->w, "in", "Ping", tt_hop_handle, &e->hop),
	    TBX_OK);
	se->w[1] = tbx_worker_new(
	    tt_conf(e->c->bootstraps, "g2", se->store2, e->tokens, NULL), err,
	    sizeof(err));
	cr_assert(se->w[1], "%s", err);
	cr_assert_eq(tbx_worker_register(se->w[1], "out", "Pong", tt_hop_handle,
					 &se->hop2),
		     TBX_OK);
	tbx__worker_assign_directly(e->w);
	tbx__worker_assign_directly(se->w[1]);
	se->w[0] = e->w;
}

static void sets_env_init(sets_env_t *se, int one_file, const char *k,
			  const char *v)
{
	sets_env_init2(se, one_file, k, v, NULL, NULL);
}

static void sets_env_fini(sets_env_t *se)
{
	tbx_worker_destroy(se->w[1]);
	free(se->store2);
	env_fini(&se->e);
}

/* Both hops until hop 2 handled @p n, then idle: each once. */
static void sets_drive_to(sets_env_t *se, int64_t n)
{
	tt_want_t want = {se->store2, "SELECT COUNT(*) FROM hop2", n};

	cr_assert(settle(se->w, 2, want));
	cr_assert_eq(tt_count(se->e.store, "SELECT COUNT(*) FROM hop1"), n);
	cr_assert_eq(
	    tt_count(se->e.store, "SELECT COUNT(DISTINCT payload) FROM hop1"),
	    n, "each record handled once");
	cr_assert_eq(tt_count(se->store2, "SELECT COUNT(*) FROM hop2"), n);
	cr_assert_eq(
	    tt_count(se->store2, "SELECT COUNT(DISTINCT payload) FROM hop2"), n,
	    "each of hop 1's messages handled once downstream");
}

/* Nothing of either group left: no batch row, set, set registration or
 * token. */
static void sets_nothing_left(const sets_env_t *se)
{
	nothing_left(&se->e);
	cr_assert_eq(tt_count(se->e.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0,
		     "every bit of every group cleared");
	cr_assert_eq(tt_count(se->e.tokens, "SELECT COUNT(*) FROM tbx_breg"), 0,
		     "every set registration confirmed");
	cr_assert_eq(tt_count(se->e.tokens, "SELECT COUNT(*) FROM tbx_tokens"),
		     0);
	cr_assert_eq(tt_count(se->store2, "SELECT COUNT(*) FROM tbx_outbox"),
		     0);
}

static void rec_hdr(const tt_record_t *r, const char *name, char *buf,
		    size_t size)
{
	const void *v = NULL;
	size_t len = 0;

	buf[0] = '\0';
	if (r->headers &&
	    rd_kafka_header_get_last(r->headers, name, &v, &len) ==
		RD_KAFKA_RESP_ERR_NO_ERROR &&
	    v && len < size) {
		memcpy(buf, v, len);
		buf[len] = '\0';
	}
}

/* Every message of @p topic once (@p n of them), in a set: tbx-tset, no
 * tbx-token, tbx-seq, and a tbx-tbit naming the partition it was
 * delivered to; no two messages share a bit of a set.  Returns the
 * distinct sets seen. */
static size_t sets_out_once(const char *bootstraps, const char *topic, size_t n)
{
	tt_record_t *recs;
	size_t cnt = tt_read_topic(bootstraps, topic, &recs), sets = 0;
	char(*tset)[64] = calloc(cnt ? cnt : 1, sizeof(*tset));
	char(*tbit)[32] = calloc(cnt ? cnt : 1, sizeof(*tbit));

	cr_assert(tset && tbit);
	cr_assert_eq(cnt, n);
	for (size_t i = 0; i < cnt; i++) {
		int part = -1, seen = 0;
		unsigned bit = 0;

		rec_hdr(&recs[i], "tbx-tset", tset[i], sizeof(tset[i]));
		rec_hdr(&recs[i], "tbx-tbit", tbit[i], sizeof(tbit[i]));
		cr_assert(recs[i].id && recs[i].seq && !recs[i].token &&
			      tset[i][0],
			  "message %zu of %s: not in a set", i, topic);
		cr_assert_eq(sscanf(tbit[i], "%d:%u", &part, &bit), 2,
			     "tbx-tbit '%s'", tbit[i]);
		cr_assert_eq(part, recs[i].partition,
			     "tbx-tbit names partition %d, delivered to %d",
			     part, (int)recs[i].partition);
		for (size_t j = 0; j < i; j++) {
			cr_assert_str_neq(recs[i].id, recs[j].id);
			cr_assert(strcmp(tset[i], tset[j]) != 0 ||
				      strcmp(tbit[i], tbit[j]) != 0,
				  "two messages share a bit");
			seen |= strcmp(tset[i], tset[j]) == 0;
		}
		sets += !seen;
	}
	tt_records_free(recs, cnt);
	free(tset);
	free(tbit);
	return sets;
}

/*
 * Ten records in the per-message format, ten in sets, two without a
 * token (dead-lettered): each handled once, and each of hop 1's messages
 * handled once by g2, every one in a set of its batch row and
 * destination partition; then a copy of each tokened record (dropped by
 * hop 1) and of each of hop 1's messages (dropped by g2).
 */
static void own_sets_once(int one_file, const char *k, const char *v)
{
	sets_env_t se;
	tt_record_t *recs;
	size_t cnt;
	tbx_stats_t st, st2;

	sets_env_init(&se, one_file, k, v);
	tt_publish(se.e.c->bootstraps, se.e.tokens, "in", "Ping", 10, 2, "m");
	tt_publish_sets(se.e.c->bootstraps, se.e.tokens, "in", "Ping", 10, 2, 0,
			"s", NULL);
	tt_produce_plain(se.e.c->bootstraps, "in", 0, "key-0", "plain-0",
			 "Ping");
	tt_produce_plain(se.e.c->bootstraps, "in", 1, "key-1", "plain-1",
			 "Ping");
	sets_drive_to(&se, 20);
	st = stats(&se.e);
	cr_assert_eq(st.processed, 20);
	cr_assert_eq(st.dead_lettered, 2);
	cr_assert_eq(st.duplicates_dropped, 0);
	cr_assert_eq(st.attempts_lost, 0);
	cr_assert_eq(st.partition_unknown, 0);
	cr_assert_geq(st.tokens_created, 1, "set rows minted for g2");
	tbx_worker_stats(se.w[1], &st2);
	cr_assert_eq(st2.processed, 20);
	cr_assert_eq(st2.tokens_consumed, 20, "g2 cleared a bit per message");
	sets_nothing_left(&se);
	cr_assert_geq(sets_out_once(se.e.c->bootstraps, "out", 20), 1);
	/* The dead letters are the row's messages too: in sets. */
	sets_out_once(se.e.c->bootstraps, "in.dlq", 2);

	/* Copies: of every tokened record, dropped by hop 1; of every
	 * message hop 1 sent, dropped by g2 (its bit is clear). */
	cnt = tt_read_topic(se.e.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 22);
	for (size_t i = 0; i < cnt; i++)
		if (recs[i].token || recs[i].seq)
			tt_reproduce(se.e.c->bootstraps, "in", &recs[i], 1);
	tt_records_free(recs, cnt);
	cnt = tt_read_topic(se.e.c->bootstraps, "out", &recs);
	tt_reproduce(se.e.c->bootstraps, "out", recs, cnt);
	tt_records_free(recs, cnt);
	for (int i = 0; i < 300 && (stats(&se.e).duplicates_dropped < 20 ||
				    (tbx_worker_stats(se.w[1], &st2),
				     st2.duplicates_dropped < 20));
	     i++)
		tt_drive(se.w, 2, NULL, NULL, 1, 60);
	sets_drive_to(&se, 20);
	st = stats(&se.e);
	cr_assert_eq(st.processed, 20);
	cr_assert_eq(st.duplicates_dropped, 20);
	tbx_worker_stats(se.w[1], &st2);
	cr_assert_eq(st2.processed, 20);
	cr_assert_eq(st2.duplicates_dropped, 20, "g2 dropped every copy");
	sets_nothing_left(&se);
	sets_env_fini(&se);
}

Test(obatch, own_sets_each_once_separate_stores)
{
	own_sets_once(0, NULL, NULL);
}

Test(obatch, own_sets_each_once_one_file)
{
	own_sets_once(1, NULL, NULL);
}

Test(obatch, own_sets_each_once_one_file_without_defer)
{
	own_sets_once(1, "finish.defer", "false");
}

Test(obatch, own_sets_each_once_batches_of_one)
{
	own_sets_once(0, "batch.max.messages", "1");
}

/*
 * A reply the producer refuses for good, in a set: given up into
 * tbx_undelivered with its set id, bit and partition and no token (its
 * bit stays set for g2: no group consumed it), the rest of the row
 * finishing; `inspect undelivered resend` produces it with tbx-tset and
 * tbx-tbit to that partition, and g2 handles it once, its set then gone.
 */
static void own_sets_refused_reply(int one_file)
{
	sets_env_t se;
	char big[6001], tset[64] = "";
	tt_record_t *recs;
	size_t cnt, found = 0;

	sets_env_init2(&se, one_file, "kafka.producer.message.max.bytes",
		       "4096", "dispatch.retry.max", "1");
	memset(big, 'b', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	tt_publish(se.e.c->bootstraps, se.e.tokens, "in", "Ping", 3, 1, "m");
	tbx_publisher_t *pub =
	    tt_publisher(se.e.c->bootstraps, se.e.tokens, "error");
	tbx_out_t out = {.topic = "in",
			 .type = "Ping",
			 .key = "key-0",
			 .key_len = 5,
			 .payload = big,
			 .payload_len = strlen(big)};
	cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	cr_assert_eq(tbx_publisher_flush(pub, NULL), TBX_OK);
	tbx_publisher_destroy(pub);
	tt_publish(se.e.c->bootstraps, se.e.tokens, "in", "Ping", 3, 1, "z");
	tt_want_t want = {se.e.store, "SELECT COUNT(*) FROM tbx_undelivered",
			  1};
	cr_assert(tt_drive(se.w, 2, tt_reached, &want, 10, 60),
		  "the refused reply was never given up");
	tt_want_t six = {se.store2, "SELECT COUNT(*) FROM hop2", 6};
	cr_assert(settle(se.w, 2, six));
	nothing_left(&se.e);
	cr_assert_eq(tt_count(se.e.store, "SELECT COUNT(*) FROM hop1"), 7);
	cr_assert_eq(tt_count(se.store2, "SELECT COUNT(*) FROM hop2"), 6);
	cr_assert_eq(tt_count(se.e.store,
			      "SELECT COUNT(*) FROM tbx_undelivered WHERE "
			      "topic = 'out' AND length(payload) = 6000 AND "
			      "token IS NULL AND tset IS NOT NULL AND tbit IS "
			      "NOT NULL AND tpart IS NOT NULL"),
		     1, "kept once with its set bit and partition");
	/* Every other bit was cleared: the one set row g2 still has
	 * holds the given-up message's bit. */
	cr_assert_eq(tt_count(se.e.tokens,
			      "SELECT COUNT(*) FROM tbx_tset WHERE grp = 'g2'"),
		     1, "its bit waits in g2's set");

	const char *resend[] = {"undelivered", "resend",	   "1",
				"-b",	       se.e.c->bootstraps, NULL};
	cc_result_t res = inspect(&se.e, resend);
	cr_assert(cc_exited(res.status, 0), "resend: %s", res.err);
	cc_result_free(&res);
	tt_want_t seven = {se.store2, "SELECT COUNT(*) FROM hop2", 7};
	cr_assert(settle(se.w, 2, seven));
	cr_assert_eq(
	    tt_count(se.store2, "SELECT COUNT(DISTINCT payload) FROM hop2"), 7,
	    "g2 handled every reply once");
	sets_nothing_left(&se);
	cr_assert_eq(
	    tt_count(se.e.store, "SELECT COUNT(*) FROM tbx_undelivered"), 0);
	/* Resent to the partition its set was minted for. */
	cnt = tt_read_topic(se.e.c->bootstraps, "out", &recs);
	for (size_t i = 0; i < cnt; i++) {
		char tbit[32];
		int part = -1;
		unsigned bit = 0;

		if (!recs[i].payload || strlen(recs[i].payload) != 6000)
			continue;
		found++;
		rec_hdr(&recs[i], "tbx-tset", tset, sizeof(tset));
		rec_hdr(&recs[i], "tbx-tbit", tbit, sizeof(tbit));
		cr_assert(tset[0] && !recs[i].token && recs[i].seq);
		cr_assert_eq(sscanf(tbit, "%d:%u", &part, &bit), 2, "%s", tbit);
		cr_assert_eq(part, recs[i].partition);
	}
	cr_assert_eq(found, 1);
	tt_records_free(recs, cnt);
	sets_env_fini(&se);
}

Test(obatch, own_sets_a_refused_reply_keeps_its_bit_and_is_resent)
{
	own_sets_refused_reply(0);
}

Test(obatch, own_sets_a_refused_reply_keeps_its_bit_and_is_resent_one_file)
{
	own_sets_refused_reply(1);
}

/* A record row cannot record a message's set, bit and partition: a
 * worker on outbox.layout=record refuses tokens.format=set at start,
 * saying so. */
Test(obatch, own_sets_refused_with_the_record_layout)
{
	char err[512] = "";
	char *dir = tt_tmpdir(), *store = tt_store_new(dir, "s1");
	char *tokens = tt_tokens_new(dir, "tokens", 0);
	tt_cluster_t *c = tt_cluster_new(1);
	tbx_conf_t *conf = tt_conf(c->bootstraps, "g1", store, tokens,
				   "tokens.format", "set", NULL);
	tbx_worker_t *w = tbx_worker_new(conf, err, sizeof(err));

	cr_assert_null(w);
	tbx_conf_destroy(conf); /* a failed tbx_worker_new() leaves it */
	cr_assert(strstr(err, "tokens.format=set") &&
		      strstr(err, "outbox.layout=batch"),
		  "%s", err);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}

/* Only the two layouts are taken. */
Test(obatch, an_unknown_layout_is_refused)
{
	char err[512];
	tbx_conf_t *conf = tbx_conf_new();

	cr_assert_eq(
	    tbx_conf_set(conf, "outbox.layout", "batch", err, sizeof(err)),
	    TBX_OK);
	cr_assert_neq(
	    tbx_conf_set(conf, "outbox.layout", "rows", err, sizeof(err)),
	    TBX_OK);
	cr_assert(strstr(err, "record|batch"), "%s", err);
	tbx_conf_destroy(conf);
}

/* A service store's version, as an opened store gives it. */
static int schema_11(tbx_outbox_t *store, int *version)
{
	(void)store;
	*version = 11;
	return TBX_OK;
}

/* A worker with outbox.layout=batch refuses a service store without
 * batch rows (SQLite schema 11: tbx_obatch came with 12), saying which
 * version it found and which it needs.  The stores a worker opens are
 * migrated first, so such a store only comes from a backend that lacks
 * them: a table of operations with the version and nothing else. */
Test(obatch, a_store_without_batch_rows_is_refused)
{
	static const tbx_outbox_ops_t old = {.name = "old",
					     .schema = schema_11};
	tbx_outbox_t store = {&old};
	tbx__cfg_t cfg;
	char err[512] = "";

	memset(&cfg, 0, sizeof(cfg));
	cfg.store_path = "/srv/svc.db";
	cr_assert_eq(tbx__stores_batch_ready(&cfg, &store, err, sizeof(err)),
		     TBX_ESCHEMA);
	cr_assert(strstr(err, "outbox.layout=batch: store.path /srv/svc.db: "
			      "the service store is at schema 11, and batch "
			      "rows need 12 or later"),
		  "%s", err);
}

/*
 * One layout per group: a worker with outbox.layout=record does not
 * resume batch rows, so it must not run while its group has any.
 */

/* A batch row of @p grp written behind the workers' backs (its columns
 * need not decode: it is counted, not loaded). */
static void batch_row_of(const char *store, const char *grp, const char *id)
{
	char sql[512], pg_sql[512];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO tbx_obatch (grp, row_id, tokfmt, created_ms, "
		 "cover, wire) VALUES ('%s', '%s', 1, 0, X'00', "
		 "X'0100000000')",
		 grp, id);
	snprintf(pg_sql, sizeof(pg_sql),
		 "INSERT INTO tbx_obatch (grp, row_id, tokfmt, created_ms, "
		 "cover, wire) VALUES ('%s', '%s', 1, 0, '\\x00'::bytea, "
		 "'\\x0100000000'::bytea)",
		 grp, id);
	cr_assert_eq(tt_store_sql_try(store, sql, pg_sql), 0, "%s", sql);
}

/* A record-layout worker of g1 refuses to start while g1 has a batch
 * row, naming the group and the count, and records the layout_mixed
 * alarm; another group's rows do not count; once the group's rows are
 * gone it starts. */
Test(obatch, a_record_worker_refuses_to_start_beside_batch_rows)
{
	char err[1024] = "";
	char *dir = tt_tmpdir(), *store = tt_store_new(dir, "s1"),
	     *tokens = tt_tokens_new(dir, "tokens", 0);
	tt_cluster_t *c = tt_cluster_new(1);
	tbx_conf_t *conf;
	tbx_worker_t *w;
	int code = 0;

	tbx_outbox_close(tt_outbox_open(store));
	batch_row_of(store, "g1", "00000000-0000-7000-8000-000000000001");
	batch_row_of(store, "g2", "00000000-0000-7000-8000-000000000002");
	batch_row_of(store, "g2", "00000000-0000-7000-8000-000000000003");
	conf = tt_conf(c->bootstraps, "g1", store, tokens, "outbox.layout",
		       "record", NULL);
	w = tbx__worker_new_err(conf, &code, err, sizeof(err));
	cr_assert_null(w, "a record worker started beside a batch row");
	tbx_conf_destroy(conf);
	cr_assert_eq(code, TBX_ESTATE, "%d: %s", code, err);
	cr_assert(strstr(err, "group g1 has 1 batch row(s)"), "%s", err);
	cr_assert(strstr(err, "outbox.layout=record"), "%s", err);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_alarms WHERE "
				     "grp = 'g1' AND name = 'layout_mixed'"),
		     1);

	cr_assert_eq(tt_store_sql_try(store,
				      "DELETE FROM tbx_obatch WHERE grp = "
				      "'g1'",
				      NULL),
		     0);
	conf = tt_conf(c->bootstraps, "g1", store, tokens, "outbox.layout",
		       "record", NULL);
	w = tbx_worker_new(conf, err, sizeof(err));
	cr_assert(w, "%s", err);
	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}

static int handled;

static tbx_verdict_t count_handled(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				   void *opaque)
{
	(void)ctx;
	(void)msg;
	(void)opaque;
	handled++;
	return TBX_VERDICT_OK;
}

/* A batch row that appears after the start (a worker of the group on
 * 'batch'): the record worker stops at its assignment, before it handles
 * a record. */
Test(obatch, a_record_worker_stops_at_an_assignment_beside_batch_rows)
{
	char err[1024] = "";
	char *dir = tt_tmpdir(), *store = tt_store_new(dir, "s1"),
	     *tokens = tt_tokens_new(dir, "tokens", 0);
	tt_cluster_t *c = tt_cluster_new(1);
	tbx_worker_t *w;
	int rc = TBX_OK;

	tt_cluster_topic(c, "in", 2);
	tt_subscribe(tokens, "in", "g1");
	w = tbx_worker_new(tt_conf(c->bootstraps, "g1", store, tokens,
				   "outbox.layout", "record", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", count_handled, NULL),
		     TBX_OK);
	/* The assignment through the rebalance callback's own path. */
	tbx__worker_assign_directly(w);
	tt_publish(c->bootstraps, tokens, "in", "Ping", 4, 1, "m");
	batch_row_of(store, "g1", "00000000-0000-7000-8000-000000000001");
	handled = 0;
	for (int i = 0; i < 600 * cc_time_factor() && rc == TBX_OK; i++)
		rc = tbx_worker_poll(w, 100, NULL);
	cr_assert_eq(rc, TBX_ESTATE, "the worker went on: %s",
		     tbx_strerror(rc));
	/* A caller that polls on is refused again, and nothing runs. */
	for (int i = 0; i < 5; i++)
		cr_assert_eq(tbx_worker_poll(w, 100, NULL), TBX_ESTATE);
	cr_assert_eq(handled, 0, "a record was handled beside a batch row");
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_alarms WHERE "
				     "grp = 'g1' AND name = 'layout_mixed'"),
		     1);
	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}
