/*
 * The publisher in the batched token format (tokens.format = set,
 * docs/batched-tokens.md): a flush mints one token set per topic,
 * destination partition and group, produces each message explicitly to
 * the partition chosen for it with tbx-tset and tbx-tbit, and a worker
 * handles every message exactly once and consumes the sets.  The ingress
 * edge keeps each message's set, bit and partition for its natural
 * duplicates.  In the pg tier (TBX_PG_TIER=1) the stores are PostgreSQL
 * schemas.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_child.h"
#include "hop.h"
#include "store/db.h"
#include "fixture.h"
#include "support.h"

#define PARTS 3

typedef tt_hop_env_t fixture_t;

/* The worker holds every partition of "in" from its first poll: no case
 * here is about a group's membership, and a member of the mock
 * cluster's group (librdkafka 2.0.2) is lost for good when the process
 * stalls for a few seconds around its join, as a loaded machine makes
 * it: the session check evicts it with its JoinGroup unanswered, and it
 * waits max.poll.interval.ms for the answer, handling nothing. */
static void fx_start(fixture_t *f)
{
	tt_hop_env_start(f, PARTS);
	cr_assert_eq(tbx_worker_poll(f->w, 0, NULL), TBX_OK); /* assigned */
}

/* A publisher minting @p format ("set" or "message"), with
 * dispatch.timeout.ms @p timeout (NULL: the default). */
static tbx_publisher_t *publisher_to(const fixture_t *f, const char *format,
				     const char *timeout)
{
	char err[256];
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;

	tbx_conf_set(conf, "kafka.bootstrap.servers", f->c->bootstraps, NULL,
		     0);
	cr_assert_eq(tt_stores_conf(conf, NULL, f->tokens, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(
	    tbx_conf_set(conf, "tokens.format", format, err, sizeof(err)),
	    TBX_OK, "%s", err);
	tbx_conf_set(conf, "log.level", "error", NULL, 0);
	if (timeout)
		tbx_conf_set(conf, "dispatch.timeout.ms", timeout, NULL, 0);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "%s", err);
	return pub;
}

static tbx_publisher_t *publisher(const fixture_t *f, const char *format)
{
	return publisher_to(f, format, NULL);
}

/* Queues message @p n: keyed "k<n % 5>", every seventh without a key
 * (a random partition, chosen before the mint). */
static void queue_n(tbx_publisher_t *pub, int n, const char *caller_id)
{
	char key[16], payload[32];
	tbx_out_t out = {.topic = "in", .type = "Ping"};

	snprintf(key, sizeof(key), "k%d", n % 5);
	snprintf(payload, sizeof(payload), "{\"n\":%d}", n);
	if (n % 7) {
		out.key = key;
		out.key_len = strlen(key);
	}
	out.payload = payload;
	out.payload_len = strlen(payload);
	cr_assert_eq(tbx_publish_id(pub, &out, caller_id), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
}

/* The value of header @p name of @p r as a string, or "" without it. */
static void hdr(const tt_record_t *r, const char *name, char *out, size_t size)
{
	const void *v;
	size_t len;

	out[0] = '\0';
	if (!r->headers ||
	    rd_kafka_header_get_last(r->headers, name, &v, &len) !=
		RD_KAFKA_RESP_ERR_NO_ERROR ||
	    !v)
		return;
	snprintf(out, size, "%.*s", (int)len, (const char *)v);
}

/* The set of a record: its tbx-tset, the partition and index of its
 * tbx-tbit; asserts the batched format's headers and the explicit
 * partition. */
typedef struct wire {
	char tset[64];
	int part;
	unsigned bit;
	int64_t seq;
} wire_t;

static void wire_of(const tt_record_t *r, wire_t *w)
{
	char tbit[32], seq[32], token[64];

	hdr(r, "tbx-tset", w->tset, sizeof(w->tset));
	hdr(r, "tbx-tbit", tbit, sizeof(tbit));
	hdr(r, "tbx-seq", seq, sizeof(seq));
	hdr(r, "tbx-token", token, sizeof(token));
	cr_assert_eq(strlen(w->tset), 36, "tbx-tset '%s'", w->tset);
	cr_assert_eq(sscanf(tbit, "%d:%u", &w->part, &w->bit), 2,
		     "tbx-tbit '%s'", tbit);
	cr_assert_str_empty(token, "no tbx-token beside tbx-tset");
	cr_assert(seq[0], "tbx-seq");
	w->seq = strtoll(seq, NULL, 10);
	cr_assert_eq(w->part, r->partition,
		     "produced explicitly to its set's partition: tbx-tbit "
		     "says %d, delivered to %d",
		     w->part, (int)r->partition);
}

/* Runs @p sql, one statement, on the store @p path (SQLite or pg:). */
static void exec_sql(const char *path, const char *sql)
{
	sqlite3 *db;

	if (tt_store_is_pg(path)) {
		char wrapped[512];

		snprintf(wrapped, sizeof(wrapped),
			 "WITH u AS (%s RETURNING 1) SELECT count(*) FROM u",
			 sql);
		cr_assert_geq(tt_count(path, wrapped), 0, "%s", sql);
		return;
	}

	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 10000);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s",
		     sqlite3_errmsg(db));
	sqlite3_close(db);
}

/* The mint_seq of set @p tset's row for g1, -1 without one. */
static int64_t set_seq(const fixture_t *f, const char *tset)
{
	char sql[160];

	/* Read from a record's header: a UUID (wire_of), nothing to
	 * quote. */
	cr_assert_eq(strspn(tset, "0123456789abcdef-"), 36, "%s", tset);
	snprintf(sql, sizeof(sql),
		 "SELECT mint_seq FROM tbx_tset WHERE set_id = '%s' AND grp "
		 "= 'g1'",
		 tset);
	return tt_count(f->tokens, sql);
}

Test(publish_tsets, a_flush_in_sets_is_handled_once_and_consumed,
     .timeout = 180)
{
	enum { N = 40 };
	fixture_t f;
	tbx_publisher_t *pub;
	tbx_publisher_stats_t ps;
	tt_record_t *recs;
	size_t cnt, failed;
	int seen[N] = {0};

	fx_start(&f);
	pub = publisher(&f, "set");
	for (int n = 0; n < N; n++)
		queue_n(pub, n, NULL);
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	cr_assert_eq(failed, 0);
	tbx_publisher_stats(pub, &ps);
	cr_assert_eq(ps.sent, N);
	cr_assert_eq(ps.partition_unknown, 0);
	tbx_publisher_destroy(pub);

	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0,
		     "no per-message token minted");
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_breg"), 0,
		     "a publisher registers nothing");
	/* One set per partition the flush sends to, its bits 0..n-1. */
	cnt = tt_read_topic(f.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, N);
	for (int p = 0; p < PARTS; p++) {
		char first[64] = "";
		unsigned bits = 0, max = 0;

		for (size_t i = 0; i < cnt; i++) {
			wire_t w;

			if (recs[i].partition != p)
				continue;
			wire_of(&recs[i], &w);
			if (!first[0])
				snprintf(first, sizeof(first), "%s", w.tset);
			cr_assert_str_eq(w.tset, first,
					 "one set per partition");
			cr_assert_eq(set_seq(&f, w.tset), w.seq,
				     "tbx-seq is the set's mint_seq");
			bits++;
			max = w.bit > max ? w.bit : max;
			seen[atoi(strchr(recs[i].payload, ':') + 1)]++;
		}
		if (bits)
			cr_assert_eq(max + 1, bits, "bits 0..%u", bits - 1);
	}
	tt_records_free(recs, cnt);
	for (int n = 0; n < N; n++)
		cr_assert_eq(seen[n], 1, "message %d sent once", n);
	cr_assert_eq(
	    tt_count(f.tokens, "SELECT COALESCE(SUM(nbits), 0) FROM tbx_tset"),
	    N, "a bit per message");

	tt_drain(&f.w, N);
	cr_assert_eq(tt_count(f.store, "SELECT COUNT(*) FROM hop1"), N,
		     "every message handled once");
	cr_assert_eq(
	    tt_count(f.store, "SELECT COUNT(DISTINCT payload) FROM hop1"), N);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0,
		     "the sets consumed");
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	tt_hop_env_stop(&f);
}

Test(publish_tsets, a_natural_duplicate_goes_again_with_its_set_and_is_dropped,
     .timeout = 180)
{
	fixture_t f;
	tbx_publisher_t *pub;
	tt_record_t *recs;
	size_t cnt, failed;
	wire_t a, b;

	fx_start(&f);
	pub = publisher(&f, "set");
	queue_n(pub, 3, "order-3");
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	tbx_publisher_destroy(pub);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_edge WHERE "
					"tset IS NOT NULL AND token = ''"),
		     1, "the edge records the set");
	/* The publisher died between the delivery and recording it: the
	 * entry is not marked delivered, and its caller sends again. */
	exec_sql(f.tokens, "UPDATE tbx_edge SET delivered = 0");
	pub = publisher(&f, "set");
	queue_n(pub, 3, "order-3");
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	cr_assert_eq(tbx_publisher_outcome(pub, 0, NULL), TBX_OUTCOME_RESENT);
	tbx_publisher_destroy(pub);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), 1,
		     "no set minted for a natural duplicate");

	cnt = tt_read_topic(f.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 2);
	wire_of(&recs[0], &a);
	wire_of(&recs[1], &b);
	cr_assert_str_eq(a.tset, b.tset, "the original's tbx-tset");
	cr_assert_eq(a.bit, b.bit, "the original's bit");
	cr_assert_eq(a.part, b.part, "the original's partition");
	cr_assert_eq(a.seq, b.seq, "the original's tbx-seq");
	tt_records_free(recs, cnt);

	tt_drain(&f.w, 2);
	cr_assert_eq(tt_count(f.store, "SELECT COUNT(*) FROM hop1"), 1,
		     "the copy dropped by the receiver");
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0);
	tt_hop_env_stop(&f);
}

/* A token store of schema 13, its edge entry minted with a per-message
 * token and not known to be delivered, carried forward by a publisher in
 * sets: the natural duplicate goes out again with its token, and is
 * handled once. */
Test(publish_tsets, an_entry_of_schema_13_is_resent_with_its_token,
     .timeout = 180)
{
	fixture_t f;
	tbx_publisher_t *pub;
	tt_record_t *recs;
	size_t cnt, failed;

	if (tt_pg_tier())
		cr_skip_test("SQLite's schema 13; token version 3: "
			     "test_pg_tokens");
	fx_start(&f);
	pub = publisher(&f, "message");
	queue_n(pub, 4, "order-4");
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK);
	tbx_publisher_destroy(pub);
	/* Back to schema 13: what schemas 14 to 16 added taken away. */
	exec_sql(f.tokens,
		 "UPDATE tbx_edge SET delivered = 0;"
		 "ALTER TABLE tbx_undelivered DROP COLUMN tpart;"
		 "ALTER TABLE tbx_undelivered DROP COLUMN tbit;"
		 "ALTER TABLE tbx_undelivered DROP COLUMN tset;"
		 "ALTER TABLE tbx_dead_letters DROP COLUMN replayed_ms;"
		 "ALTER TABLE tbx_edge DROP COLUMN tpart;"
		 "ALTER TABLE tbx_edge DROP COLUMN tbit;"
		 "ALTER TABLE tbx_edge DROP COLUMN tset;"
		 "PRAGMA user_version = 13;");
	pub = publisher(&f, "set");
	cr_assert_eq(tt_count(f.tokens, "PRAGMA user_version"),
		     TBX_SCHEMA_VERSION);
	queue_n(pub, 4, "order-4");
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	cr_assert_eq(tbx_publisher_outcome(pub, 0, NULL), TBX_OUTCOME_RESENT);
	tbx_publisher_destroy(pub);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0);

	cnt = tt_read_topic(f.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 2);
	cr_assert(recs[0].token && recs[1].token);
	cr_assert_str_eq(recs[0].token, recs[1].token, "the original's token");
	cr_assert_str_eq(recs[0].id, recs[1].id);
	tt_records_free(recs, cnt);
	tt_drain(&f.w, 2);
	cr_assert_eq(tt_count(f.store, "SELECT COUNT(*) FROM hop1"), 1);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	tt_hop_env_stop(&f);
}

Test(publish_tsets, a_synthetic_duplicate_is_refused, .timeout = 180)
{
	fixture_t f;
	tbx_publisher_t *pub;
	size_t failed;
	tbx_out_t changed = {.topic = "in",
			     .type = "Ping",
			     .key = "k",
			     .key_len = 1,
			     .payload = "NINE",
			     .payload_len = 4};

	fx_start(&f);
	pub = publisher(&f, "set");
	queue_n(pub, 9, "order-9");
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK);
	cr_assert_eq(tbx_publish_id(pub, &changed, "order-9"), TBX_OK);
	queue_n(pub, 10, "order-10");
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_EEXIST);
	cr_assert_eq(failed, 1);
	cr_assert(strstr(tbx_publisher_errstr(pub), "synthetic"), "%s",
		  tbx_publisher_errstr(pub));
	cr_assert_eq(tbx_publisher_outcome(pub, 0, NULL), TBX_OUTCOME_REFUSED);
	cr_assert_eq(tbx_publisher_outcome(pub, 1, NULL), TBX_OUTCOME_SENT);
	tbx_publisher_destroy(pub);

	tt_drain(&f.w, 2);
	cr_assert_eq(tt_count(f.store, "SELECT COUNT(*) FROM hop1"), 2);
	cr_assert_eq(tt_count(f.store, "SELECT COUNT(*) FROM hop1 WHERE "
				       "payload = 'NINE'"),
		     0, "zero effects of the refused message");
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0,
		     "no bit minted for the refused message");
	tt_hop_env_stop(&f);
}

Test(publish_tsets, a_flush_retried_after_a_failed_dispatch_keeps_its_sets,
     .timeout = 180)
{
	enum { N = 12 };
	fixture_t f;
	tbx_publisher_t *pub;
	tt_record_t *recs;
	size_t cnt, failed;
	int64_t rows;

	fx_start(&f);
	pub = publisher(&f, "set");
	/* The partition count is learnt (and kept) by a first flush. */
	queue_n(pub, N, NULL);
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	tt_drain(&f.w, 1);
	for (int n = 0; n < N; n++)
		queue_n(pub, n, NULL);
	/* Every produce request refused, for good: the flush fails after
	 * the mint. */
	for (int i = 0; i < 64; i++)
		rd_kafka_mock_push_request_errors(
		    f.c->mock, TT_API_PRODUCE, 1,
		    RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
	cr_assert_neq(tbx_publisher_flush(pub, &failed), TBX_OK);
	cr_assert_eq(failed, N);
	rows = tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset");
	cr_assert_gt(rows, 0);
	rd_kafka_mock_clear_request_errors(f.c->mock, TT_API_PRODUCE);
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	cr_assert_eq(failed, 0);
	tbx_publisher_destroy(pub);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), rows,
		     "the retry minted nothing");

	/* Every record carries a set minted by the first attempt. */
	cnt = tt_read_topic(f.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, N + 1);
	for (size_t i = 0; i < cnt; i++) {
		wire_t w;

		wire_of(&recs[i], &w);
		if (strcmp(recs[i].payload, "{\"n\":12}") != 0)
			cr_assert_eq(set_seq(&f, w.tset), w.seq, "set %s",
				     w.tset);
	}
	tt_records_free(recs, cnt);
	tt_drain(&f.w, N + 1);
	cr_assert_eq(tt_count(f.store, "SELECT COUNT(*) FROM hop1"), N + 1);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0);
	tt_hop_env_stop(&f);
}

Test(publish_tsets, a_partition_count_not_learnt_fails_the_flush,
     .timeout = 180)
{
	fixture_t f;
	tbx_publisher_t *pub;
	tbx_publisher_stats_t ps;
	size_t failed;
	char timeout[32];

	fx_start(&f);
	/* The first flush waits the whole timeout for the partition count;
	 * the second must learn it and deliver within the same bound, on a
	 * loaded machine too. */
	snprintf(timeout, sizeof(timeout), "%d", 5000 * tt_time_factor());
	pub = publisher_to(&f, "set", timeout);
	queue_n(pub, 1, NULL);
	/* The metadata names no partition of the topic: nothing is minted
	 * or sent without one. */
	rd_kafka_mock_topic_set_error(
	    f.c->mock, "in", RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_ETIMEOUT);
	cr_assert_eq(failed, 1);
	cr_assert(strstr(tbx_publisher_errstr(pub), "partition_unknown"), "%s",
		  tbx_publisher_errstr(pub));
	tbx_publisher_stats(pub, &ps);
	cr_assert_eq(ps.partition_unknown, 1);
	cr_assert_eq(ps.sent, 0);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	rd_kafka_mock_topic_set_error(f.c->mock, "in",
				      RD_KAFKA_RESP_ERR_NO_ERROR);
	/* The caller flushes again: minted and sent now. */
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	tbx_publisher_destroy(pub);
	tt_drain(&f.w, 1);
	cr_assert_eq(tt_count(f.store, "SELECT COUNT(*) FROM hop1"), 1);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0);
	tt_hop_env_stop(&f);
}

Test(publish_tsets, both_formats_interleaved_on_one_topic_are_handled_once,
     .timeout = 240)
{
	enum { ROUNDS = 4, PER = 10 };
	fixture_t f;
	tbx_publisher_t *old, *cur;
	tt_record_t *recs;
	size_t cnt, failed, sets = 0, tokens = 0;

	fx_start(&f);
	old = publisher(&f, "message");
	cur = publisher(&f, "set");
	for (int r = 0; r < ROUNDS; r++) {
		tbx_publisher_t *pub = r % 2 ? cur : old;

		for (int n = 0; n < PER; n++)
			queue_n(pub, r * PER + n, NULL);
		cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
			     tbx_publisher_errstr(pub));
		/* The worker takes some of the records between flushes. */
		cr_assert_eq(tbx_worker_poll(f.w, 0, NULL), TBX_OK);
	}
	tbx_publisher_destroy(old);
	tbx_publisher_destroy(cur);
	cnt = tt_read_topic(f.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, ROUNDS * PER);
	for (size_t i = 0; i < cnt; i++) {
		char tset[64];

		hdr(&recs[i], "tbx-tset", tset, sizeof(tset));
		sets += tset[0] != '\0';
		tokens += recs[i].token != NULL;
	}
	tt_records_free(recs, cnt);
	cr_assert_eq(sets, ROUNDS / 2 * PER);
	cr_assert_eq(tokens, ROUNDS / 2 * PER);

	tt_drain(&f.w, ROUNDS * PER);
	cr_assert_eq(tt_count(f.store, "SELECT COUNT(*) FROM hop1"),
		     ROUNDS * PER);
	cr_assert_eq(
	    tt_count(f.store, "SELECT COUNT(DISTINCT payload) FROM hop1"),
	    ROUNDS * PER);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	tt_hop_env_stop(&f);
}

/* tokenbox send with -X tokens.format=set: every line handled once. */
Test(publish_tsets, tokenbox_send_in_sets_is_handled_once, .timeout = 180)
{
	static const char input[] = "a\tone\nb\ttwo\nc\tthree\nd\tfour\n";
	fixture_t f;
	cc_result_t res;
	tt_record_t *recs;
	size_t cnt;

	if (tt_pg_tier())
		cr_skip_test("the CLI on PostgreSQL: test_pg_cli");
	fx_start(&f);
	const char *args[] = {"send",
			      "-b",
			      f.c->bootstraps,
			      "-t",
			      "in",
			      "-T",
			      "Ping",
			      "-S",
			      f.tokens,
			      "-K",
			      "\t",
			      "-X",
			      "tokens.format=set",
			      NULL};
	res = cc_run_with(args, input, strlen(input), 60000);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert_str_eq(res.out, "sent 4 messages to in\n");
	cc_result_free(&res);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cnt = tt_read_topic(f.c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 4);
	for (size_t i = 0; i < cnt; i++) {
		wire_t w;

		wire_of(&recs[i], &w);
	}
	tt_records_free(recs, cnt);
	tt_drain(&f.w, 4);
	cr_assert_eq(tt_count(f.store, "SELECT COUNT(*) FROM hop1"), 4);
	cr_assert_eq(tt_count(f.tokens, "SELECT COUNT(*) FROM tbx_tset"), 0);

	/* A value that is not a format: exit 2, naming the key. */
	const char *bad[] = {"send",
			     "-b",
			     f.c->bootstraps,
			     "-t",
			     "in",
			     "-T",
			     "Ping",
			     "-S",
			     f.tokens,
			     "-X",
			     "tokens.format=batched",
			     NULL};
	res = cc_run_with(bad, input, strlen(input), 60000);
	cr_assert(cc_exited(res.status, 2), "status %d: %s", res.status,
		  res.err);
	cr_assert(strstr(res.err, "tokens.format"), "%s", res.err);
	cc_result_free(&res);
	tt_hop_env_stop(&f);
}

Test(publish_tsets, an_unknown_format_is_refused, .timeout = 30)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[256] = "";

	cr_assert_neq(
	    tbx_conf_set(conf, "tokens.format", "sets", err, sizeof(err)),
	    TBX_OK);
	cr_assert(strstr(err, "tokens.format"), "%s", err);
	cr_assert(strstr(err, "message") && strstr(err, "set"), "%s", err);
	tbx_conf_destroy(conf);
}
