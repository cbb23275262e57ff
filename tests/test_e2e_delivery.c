/*
 * Outgoing messages that can never be delivered, and Kafka clients that
 * fail for good: every record still ends — processed, dead-lettered, or
 * kept in the service store — and the partition goes on.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cli_child.h"
#include "consumer/worker.h"
#include "fixture.h"

#define BIG 6000 /* over the workers' message.max.bytes below */

/* payload "big": a reply too large to send; "lost": a reply to a topic
 * that does not exist; "reject-long": REJECT with a 5000-byte reason;
 * "near-limit…" and anything else: a reply with the same payload to
 * "out", unless the payload starts with "reject". */
static tbx_verdict_t handle(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque)
{
	sqlite3 *db = tbx_ctx_db(ctx);
	sqlite3_stmt *stmt;
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);
	char *text = strndup(payload ? payload : "", len);
	tbx_out_t out = {.topic = "out", .type = "Reply"};
	tbx_verdict_t verdict = TBX_VERDICT_OK;
	char *big = NULL;

	(void)opaque;
	if (strncmp(text, "reject", 6) == 0) {
		char reason[5001];
		memset(reason, 'r', sizeof(reason) - 1);
		reason[sizeof(reason) - 1] = '\0';
		tbx_ctx_set_error(ctx, reason);
		free(text);
		return TBX_VERDICT_REJECT;
	}
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO effects(msg_id, payload) "
			       "VALUES (?, ?)",
			       -1, &stmt, NULL) != SQLITE_OK) {
		free(text);
		return TBX_VERDICT_RETRY;
	}
	sqlite3_bind_text(stmt, 1, tbx_msg_id(msg), -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(stmt, 2, text, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(stmt) != SQLITE_DONE)
		verdict = TBX_VERDICT_RETRY;
	sqlite3_finalize(stmt);
	out.payload = text;
	out.payload_len = strlen(text);
	if (strcmp(text, "big") == 0) {
		big = malloc(BIG);
		memset(big, 'b', BIG);
		out.payload = big;
		out.payload_len = BIG;
	} else if (strcmp(text, "lost") == 0) {
		out.topic = "nowhere";
	}
	if (verdict == TBX_VERDICT_OK && tbx_ctx_send(ctx, &out) != TBX_OK)
		verdict = TBX_VERDICT_RETRY;
	free(big);
	free(text);
	return verdict;
}

static void env_init(tt_env_t *e)
{
	static const char *const topics[] = {"in:1", "out:1", "in.dlq:1", NULL};
	sqlite3 *db;

	tt_env_init(e, topics);
	cr_assert_eq(sqlite3_open(e->store, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db,
				  "CREATE TABLE effects(id INTEGER PRIMARY "
				  "KEY, msg_id TEXT, payload TEXT)",
				  NULL, NULL, NULL),
		     SQLITE_OK);
	sqlite3_close(db);
}

/* A worker whose producer takes messages up to 4096 bytes, retrying a
 * permanent failure once; more "key", "value" pairs may follow. */
static tbx_worker_t *worker(tt_env_t *e, const char *k1, const char *v1)
{
	char err[512];
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(e->cluster->bootstraps, "g", e->store, e->tokens,
		    "kafka.producer.message.max.bytes", "4096",
		    "dispatch.retry.max", "1", k1, v1, NULL),
	    err, sizeof(err));

	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", NULL, handle, NULL), TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	return w;
}

/* Every record finished: no outbox row, no token left. */
static void assert_finished(tt_env_t *e)
{
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM tbx_outbox"), 0,
		     "an outbox row was left");
	cr_assert_eq(tt_count(e->tokens, "SELECT COUNT(*) FROM tbx_tokens "
					 "WHERE grp = 'g'"),
		     0, "an incoming token was left");
}

/* A tt_drive() condition: no outbox row and no incoming token of the
 * group left (what assert_finished() checks). */
static int finished(void *opaque)
{
	const tt_env_t *e = opaque;

	return tt_count(e->store, "SELECT COUNT(*) FROM tbx_outbox") == 0 &&
	       tt_count(e->tokens, "SELECT COUNT(*) FROM tbx_tokens "
				   "WHERE grp = 'g'") == 0;
}

/* Drives @p w until the batch's rows and tokens are gone (not merely
 * until it is idle: a dead letter's row may still wait for its failed
 * send), then checks it. */
static void drive_to_finished(tt_env_t *e, tbx_worker_t *w, int timeout_s)
{
	cr_assert(tt_drive(&w, 1, finished, e, 10, timeout_s));
	assert_finished(e);
}

static const char *header(const tt_record_t *rec, const char *name)
{
	const void *v;
	size_t len;
	static char buf[2048];

	if (rd_kafka_header_get_last(rec->headers, name, &v, &len))
		return NULL;
	snprintf(buf, sizeof(buf), "%.*s", (int)len, (const char *)v);
	return buf;
}

Test(delivery,
     an_oversized_reply_is_kept_in_the_store_and_the_partition_goes_on)
{
	tt_env_t e;
	const char *payloads[] = {"a", "big", "c"};
	tt_record_t *recs;
	size_t cnt;
	tbx_stats_t st;

	env_init(&e);
	tt_subscribe(e.tokens, "out", "downstream");
	tbx_worker_t *w = worker(&e, NULL, NULL);
	tt_env_publish(&e, "in", "Ask", payloads, 3);
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM tbx_undelivered", 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 10, 60),
		  "the reply was never given up");
	tt_want_t all = {e.store,
			 "SELECT COUNT(*) FROM effects WHERE payload = 'c'", 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &all, 10, 60),
		  "the partition stalled");
	drive_to_finished(&e, w, 60);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM effects"), 3);
	cnt = tt_read_topic(e.cluster->bootstraps, "out", &recs);
	cr_assert_eq(cnt, 2, "replies a and c: %zu", cnt);
	tt_records_free(recs, cnt);
	/* The dead-letter topic could not take it either (as large). */
	cr_assert_eq(tt_count(e.store,
			      "SELECT COUNT(*) FROM tbx_undelivered WHERE "
			      "topic = 'out' AND length(payload) = 6000 AND "
			      "token IS NOT NULL AND mint_seq IS NOT NULL AND "
			      "attempts = 2 AND error LIKE '%too large%'"),
		     1);
	/* Its token waits downstream for a re-send. */
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tokens t "
					"WHERE grp = 'downstream'"),
		     3);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.undeliverable, 1);
	cr_assert_eq(st.undelivered_stored, 1);
	cr_assert_eq(st.dispatch_failed_permanent, 2);
	tbx_worker_destroy(w);

	/* An operator sees it, and once the limit allows it (the inspect
	 * command's producer takes up to 1 MB), sends it as it was. */
	const char *status[] = {"inspect", "-s",     e.store,	"--tokens",
				e.tokens,  "status", "--check", NULL};
	cc_result_t res = cc_run(status);
	cr_assert(cc_exited(res.status, 1), "status --check: %s", res.err);
	cr_assert(strstr(res.out, "Undelivered"), "%s", res.out);
	cc_result_free(&res);
	const char *list[] = {"inspect",     "-s",   e.store, "--json",
			      "undelivered", "list", NULL};
	res = cc_run(list);
	cr_assert(cc_exited(res.status, 0), "%s", res.err);
	cr_assert(strstr(res.out, "out") && strstr(res.out, "too large"), "%s",
		  res.out);
	cc_result_free(&res);
	const char *show[] = {"inspect",     "-s",   e.store, "--json",
			      "undelivered", "show", "1",     NULL};
	res = cc_run(show);
	cr_assert(cc_exited(res.status, 0), "%s", res.err);
	cr_assert(strstr(res.out, "\"bytes\":\t6000") ||
		      strstr(res.out, "6000"),
		  "%s", res.out);
	cc_result_free(&res);
	/* With the token store the worker used: its id goes in tbx-store. */
	const char *resend[] = {
	    "inspect",	   "-s",     e.store, "-S", e.tokens,
	    "undelivered", "resend", "1",     "-b", e.cluster->bootstraps,
	    NULL};
	res = cc_run(resend);
	cr_assert(cc_exited(res.status, 0), "resend: %s", res.err);
	cc_result_free(&res);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_undelivered"),
		     0);
	cnt = tt_read_topic(e.cluster->bootstraps, "out", &recs);
	cr_assert_eq(cnt, 3);
	cr_assert_eq(strlen(recs[2].payload), BIG);
	cr_assert_not_null(recs[2].token, "sent with its token");
	cr_assert_not_null(recs[2].seq);
	tt_records_free(recs, cnt);
	tt_env_fini(&e);
}

Test(delivery, a_reply_to_a_missing_topic_is_dead_lettered_without_auto_create)
{
	tt_env_t e;
	const char *list[] = {"a", "lost", "c"};
	tt_record_t *recs;
	size_t cnt;
	tbx_stats_t st;

	env_init(&e);
	/* The broker neither has nor creates the topic (the mock cluster
	 * creates every topic asked for: it is told to answer as a broker
	 * with auto.create.topics.enable=false would). */
	rd_kafka_mock_topic_set_error(e.cluster->mock, "nowhere",
				      RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
	tbx_worker_t *w = worker(
	    &e, "kafka.producer.topic.metadata.propagation.max.ms", "1000");
	tt_env_publish(&e, "in", "Ask", list, 3);
	tt_want_t want = {
	    e.store, "SELECT COUNT(*) FROM effects WHERE payload = 'c'", 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 10, 120),
		  "the partition stalled");
	drive_to_finished(&e, w, 60);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_undelivered"),
		     0);
	cnt = tt_read_topic(e.cluster->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 1, "%zu", cnt);
	cr_assert_str_eq(recs[0].payload, "lost");
	cr_assert_str_eq(header(&recs[0], "tbx-dlq-topic"), "nowhere");
	cr_assert(strstr(header(&recs[0], "tbx-dlq-error"), "nowhere"));
	cr_assert_not_null(header(&recs[0], "tbx-dlq-group"));
	cr_assert_str_eq(header(&recs[0], "tbx-dlq-group"), "g",
			 "the group whose message it was");
	cr_assert_null(recs[0].token, "no group has a token for it");
	cr_assert_not_null(recs[0].id);
	tt_records_free(recs, cnt);
	cnt = tt_read_topic(e.cluster->bootstraps, "out", &recs);
	cr_assert_eq(cnt, 2);
	tt_records_free(recs, cnt);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.undeliverable, 1);
	cr_assert_eq(st.undelivered_stored, 0);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* A record near the limit, rejected with a long reason: tokenbox's own
 * headers shrink so that the dead letter still fits. */
Test(delivery, the_dead_letter_headers_never_push_it_over_the_limit)
{
	tt_env_t e;
	char payload[3601];
	const char *list[] = {payload, "reject-long", "c"};
	tt_record_t *recs;
	size_t cnt;

	memcpy(payload, "reject", 6);
	memset(payload + 6, 'p', sizeof(payload) - 7);
	payload[sizeof(payload) - 1] = '\0';
	env_init(&e);
	tbx_worker_t *w = worker(&e, NULL, NULL);
	tt_env_publish(&e, "in", "Ask", list, 3);
	tt_want_t want = {
	    e.store, "SELECT COUNT(*) FROM effects WHERE payload = 'c'", 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 10, 60),
		  "the partition stalled");
	drive_to_finished(&e, w, 60);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_undelivered"),
		     0);
	cnt = tt_read_topic(e.cluster->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 2);
	for (size_t i = 0; i < cnt; i++) {
		size_t len = strlen(recs[i].dlq_error);
		cr_assert(len <= 1024, "reason of %zu bytes", len);
	}
	cr_assert_eq(strlen(recs[0].payload), 3600);
	cr_assert(strlen(recs[0].dlq_error) < 400,
		  "the reason was not shortened to fit");
	cr_assert(strcmp(recs[0].dlq_error + strlen(recs[0].dlq_error) - 3,
			 "...") == 0,
		  "%s", recs[0].dlq_error);
	cr_assert(strlen(recs[1].dlq_error) > 500, "shortened needlessly");
	tt_records_free(recs, cnt);
	/* The stores keep the whole reason. */
	cr_assert(tt_count(e.store, "SELECT MIN(length(error)) FROM "
				    "tbx_dead_letters") > 500);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* Nothing can make this dead letter fit: after its retries it is kept in
 * the service store, and the partition goes on. */
Test(delivery, a_dead_letter_too_large_to_send_is_kept_in_the_store)
{
	tt_env_t e;
	char payload[4081];
	const char *list[] = {payload, "c"};

	memcpy(payload, "reject", 6);
	memset(payload + 6, 'p', sizeof(payload) - 7);
	payload[sizeof(payload) - 1] = '\0';
	env_init(&e);
	tbx_worker_t *w = worker(&e, NULL, NULL);
	tt_env_publish(&e, "in", "Ask", list, 2);
	tt_want_t want = {
	    e.store, "SELECT COUNT(*) FROM effects WHERE payload = 'c'", 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 10, 60),
		  "the partition stalled");
	drive_to_finished(&e, w, 60);
	cr_assert_eq(tt_count(e.store,
			      "SELECT COUNT(*) FROM tbx_undelivered WHERE "
			      "topic = 'in.dlq' AND length(payload) = 4080"),
		     1);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_dead_letters"),
		     1);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

Test(delivery, an_invalid_dlq_suffix_is_refused_when_configured)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];

	cr_assert_eq(tbx_conf_set(conf, "dlq.suffix", "/dlq", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "dlq.suffix") && strstr(err, "topic"), "%s", err);
	cr_assert_eq(
	    tbx_conf_set(conf, "dlq.suffix", ".dead letters", err, sizeof(err)),
	    TBX_ECONF);
	cr_assert_eq(tbx_conf_set(conf, "dlq.suffix", "-dead_letters.v2", err,
				  sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_conf_destroy(conf);
}

/* One pushed OUT_OF_ORDER_SEQUENCE_NUMBER is fatal for the idempotent
 * producer: the worker replaces it and every reply is delivered. */
Test(fatal, a_fatal_producer_error_replaces_the_producer)
{
	tt_env_t e;
	const char *list[] = {"a", "b", "c", "d"};
	tt_record_t *recs;
	size_t cnt;
	tbx_stats_t st;

	env_init(&e);
	tbx_worker_t *w = worker(&e, NULL, NULL);
	tt_env_publish(&e, "in", "Ask", list, 4);
	rd_kafka_mock_push_request_errors(
	    e.cluster->mock, TT_API_PRODUCE, 1,
	    RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM effects", 4};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 10, 60));
	drive_to_finished(&e, w, 90);
	cnt = tt_read_topic(e.cluster->bootstraps, "out", &recs);
	cr_assert_geq(cnt, 4);
	tt_records_free(recs, cnt);
	tbx_worker_stats(w, &st);
	cr_assert_geq(st.producer_restarts, 1);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM effects"), 4);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* The publisher's producer too: after one pushed OUT_OF_ORDER_SEQUENCE_NUMBER
 * every message of the batch is delivered, by a new producer, with one id
 * and one token each however many copies arrive, and the next batch goes
 * out as well. */
Test(fatal, a_fatal_producer_error_replaces_the_publishers_producer)
{
	tt_env_t e;
	char payload[8];
	tbx_publisher_t *pub;
	tbx_publisher_stats_t st;
	tt_record_t *recs;
	size_t cnt;
	int r = TBX_EKAFKA;

	env_init(&e);
	tt_subscribe(e.tokens, "in", "g");
	pub = tt_publisher(e.cluster->bootstraps, e.tokens, "error");
	rd_kafka_mock_push_request_errors(
	    e.cluster->mock, TT_API_PRODUCE, 1,
	    RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
	for (int batch = 0; batch < 2; batch++) {
		for (int i = 0; i < 3; i++) {
			snprintf(payload, sizeof(payload), "p%d",
				 batch * 3 + i);
			tbx_out_t out = {.topic = "in",
					 .type = "Ask",
					 .payload = payload,
					 .payload_len = strlen(payload)};
			cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
		}
		/* A caller retries a failed flush: at most twice here. */
		for (int i = 0; i < 3 && (r = tbx_publisher_flush(pub, NULL));
		     i++)
			;
		cr_assert_eq(r, TBX_OK, "batch %d: %s", batch,
			     tbx_publisher_errstr(pub));
	}
	tbx_publisher_stats(pub, &st);
	cr_assert_geq(st.producer_restarts, 1);
	cr_assert_eq(st.sent, 6);
	tbx_publisher_destroy(pub);

	cnt = tt_read_topic(e.cluster->bootstraps, "in", &recs);
	for (int k = 0; k < 6; k++) {
		const char *id = NULL, *token = NULL;

		snprintf(payload, sizeof(payload), "p%d", k);
		for (size_t i = 0; i < cnt; i++) {
			if (!recs[i].payload ||
			    strcmp(recs[i].payload, payload))
				continue;
			cr_assert(recs[i].id && recs[i].token);
			if (!id) {
				id = recs[i].id;
				token = recs[i].token;
			}
			cr_assert_str_eq(recs[i].id, id, "%s: two ids",
					 payload);
			cr_assert_str_eq(recs[i].token, token, "%s: two tokens",
					 payload);
		}
		cr_assert(id, "%s was never delivered", payload);
	}
	tt_records_free(recs, cnt);
	tt_env_fini(&e);
}

/* `tokenbox send` gets over it too, and says so in its summary. */
Test(fatal, tokenbox_send_replaces_its_producer_after_a_fatal_error)
{
	static const char input[] = "a\nb\nc\n";
	tt_env_t e;
	cc_result_t res;
	tt_record_t *recs;
	size_t cnt;

	env_init(&e);
	tt_subscribe(e.tokens, "in", "g");
	const char *args[] = {"send", "-b",	  e.cluster->bootstraps,
			      "-t",   "in",	  "--type",
			      "Ask",  "--tokens", e.tokens,
			      NULL};
	rd_kafka_mock_push_request_errors(
	    e.cluster->mock, TT_API_PRODUCE, 1,
	    RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
	res = cc_run_with(args, input, strlen(input), 60000);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert(strncmp(res.out,
			  "sent 3 messages to in (the producer was "
			  "replaced 1 time after a fatal error",
			  75) == 0,
		  "%s", res.out);
	cr_assert(strstr(res.err, "replacing the producer"), "%s", res.err);
	cnt = tt_read_topic(e.cluster->bootstraps, "in", &recs);
	for (const char *p = "abc"; *p; p++) {
		size_t found = 0;
		for (size_t i = 0; i < cnt; i++)
			found += recs[i].payload && recs[i].payload[0] == *p &&
				 !recs[i].payload[1];
		cr_assert_geq(found, 1, "line %c was not delivered", *p);
	}
	tt_records_free(recs, cnt);
	cc_result_free(&res);
	tt_env_fini(&e);
}

/* A fatal consumer error ends the worker with TBX_EFATAL (and
 * `tokenbox worker` with status 75). */
Test(fatal, a_fatal_consumer_error_ends_the_worker)
{
	tt_env_t e;
	int r = 0;
	int64_t deadline;

	env_init(&e);
	tbx_worker_t *w = worker(&e, NULL, NULL);
	cr_assert_eq(
	    rd_kafka_test_fatal_error(
		w->consumer, RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID, "test"),
	    RD_KAFKA_RESP_ERR_NO_ERROR);
	deadline = tbx__mono_ms() + 30000 * tt_time_factor();
	while (tbx__mono_ms() < deadline &&
	       (r = tbx_worker_poll(w, 100, NULL)) == TBX_OK)
		;
	cr_assert_eq(r, TBX_EFATAL, "poll returned %d", r);
	cr_assert(strstr(tbx_worker_errstr(w), "fatal"), "%s",
		  tbx_worker_errstr(w));
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}
