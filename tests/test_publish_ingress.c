/*
 * Publishing ingress: tokens for every subscribed group, and a failed
 * flush retried with the same ids and tokens so receivers handle each
 * message once.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

Test(publish, tokens_are_minted_for_every_subscribed_group)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_record_t *recs;
	size_t cnt;

	tt_cluster_topic(c, "in", 1);
	tt_subscribe(tokens, "in", "g1");
	tt_subscribe(tokens, "in", "g2");
	tt_subscribe(tokens, "other", "g3");
	tt_publish(c->bootstraps, tokens, "in", "Ping", 3, 1, "m");
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens"), 6);
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens WHERE "
				      "grp = 'g3'"),
		     0);
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_registrations"),
		     0, "publishing has no outbox row to register against");
	cnt = tt_read_topic(c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 3);
	for (size_t i = 0; i < cnt; i++) {
		cr_assert(recs[i].id && recs[i].token && recs[i].seq);
		cr_assert_str_eq(recs[i].type, "Ping");
		cr_assert_null(recs[i].cause);
	}
	tt_records_free(recs, cnt);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
}

Test(publish, invalid_messages_are_refused)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	char err[256];
	tbx_conf_t *conf = tbx_conf_new();
	tbx_header_t h = {"TBX-own", "x", 1};

	tbx_conf_set(conf, "kafka.bootstrap.servers", "127.0.0.1:1", NULL, 0);
	tbx_conf_set(conf, "kafka.log_level", "0", NULL, 0);
	tbx_conf_set(conf, "tokens.path", tokens, NULL, 0);
	tt_tokens_init(tokens);
	tbx_publisher_t *pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "%s", err);
	tbx_out_t bad_topic = {.topic = "a topic", .type = "T"};
	tbx_out_t no_type = {.topic = "t"};
	tbx_out_t reserved = {
	    .topic = "t", .type = "T", .headers = &h, .header_cnt = 1};
	cr_assert_eq(tbx_publish(pub, &bad_topic), TBX_EINVAL);
	cr_assert_eq(tbx_publish(pub, &no_type), TBX_EINVAL);
	cr_assert_eq(tbx_publish(pub, &reserved), TBX_EINVAL);
	tbx_publisher_destroy(pub);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
}

typedef struct seen {
	const char *db;
} seen_t;

static int all_handled(void *opaque)
{
	seen_t *s = opaque;

	return tt_count(s->db, "SELECT COUNT(*) FROM hop1") >= 2;
}

Test(publish, failed_flush_is_retried_with_the_same_ids_and_tokens)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	char *store = tt_path(dir, "s1.db");
	tt_cluster_t *c = tt_cluster_new(1);
	char err[256], timeout[32];
	size_t failed = 0;
	tt_record_t *recs;
	size_t cnt;

	/* The timeout bounds the retry's deliveries, which may wait on a
	 * loaded machine: give them the default's time, not less. */
	snprintf(timeout, sizeof(timeout), "%d", 30000 * tt_time_factor());
	tt_cluster_topic(c, "in", 1);
	tt_subscribe(tokens, "in", "g1");
	tt_hop_table(store, "hop1");
	tbx_conf_t *conf = tbx_conf_new();
	tbx_conf_set(conf, "kafka.bootstrap.servers", c->bootstraps, NULL, 0);
	tbx_conf_set(conf, "tokens.path", tokens, NULL, 0);
	tbx_conf_set(conf, "dispatch.timeout.ms", timeout, NULL, 0);
	tbx_conf_set(conf, "log.level", "error", NULL, 0);
	tbx_publisher_t *pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "%s", err);
	tbx_out_t out = {
	    .topic = "in", .type = "Ping", .payload = "p", .payload_len = 1};

	/* Every Produce fails: the batch stays, new messages wait. The
	 * error is not retriable, so the failing flush ends at once and
	 * not at the timeout (which a metadata error would wait for). */
	for (int i = 0; i < 8; i++)
		rd_kafka_mock_push_request_errors(
		    c->mock, TT_API_PRODUCE, 1,
		    RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
	cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	cr_assert_neq(tbx_publisher_flush(pub, &failed), TBX_OK);
	cr_assert_eq(failed, 2);
	cr_assert_eq(tbx_publish(pub, &out), TBX_ESTATE);
	int64_t minted = tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens");
	cr_assert_eq(minted, 2);

	rd_kafka_mock_clear_request_errors(c->mock, TT_API_PRODUCE);
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	cr_assert_eq(failed, 0);
	/* no new tokens for the retry */
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens"), 2);
	cr_assert_eq(tbx_publish(pub, &out), TBX_OK, "accepting again");
	tbx_publisher_destroy(pub);

	cnt = tt_read_topic(c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 2);
	tt_records_free(recs, cnt);

	tt_hop_t hop = {.table = "hop1"};
	tbx_worker_t *w =
	    tbx_worker_new(tt_conf(c->bootstraps, "g1", store, tokens, NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop);
	seen_t s = {store};
	cr_assert(tt_drive(&w, 1, all_handled, &s, 5, 60));
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1"), 2);
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
	free(store);
}

static int three_records_done(void *opaque)
{
	seen_t *s = opaque;

	return tt_count(s->db, "SELECT COUNT(*) FROM hop1") >= 1 &&
	       tt_count(s->db, "SELECT COUNT(*) FROM tbx_dead_letters") >= 2;
}

/* A token without an id: its copies could not be matched to its outbox
 * row, so the record is dead-lettered as malformed, once. */
Test(publish, token_without_id_is_dead_lettered_as_malformed)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	char *store = tt_path(dir, "s1.db");
	tt_cluster_t *c = tt_cluster_new(1);
	char err[256];
	tt_record_t *recs;
	size_t cnt;

	tt_cluster_topic(c, "in", 1);
	tt_cluster_topic(c, "in.dlq", 1);
	tt_hop_table(store, "hop1");
	tt_hop_t hop = {.table = "hop1"};
	tbx_worker_t *w =
	    tbx_worker_new(tt_conf(c->bootstraps, "g1", store, tokens, NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(c->bootstraps, tokens, "in", "Ping", 1, 1, "m");
	cnt = tt_read_topic(c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 1);
	/* the same record without its tbx-id, twice */
	rd_kafka_header_remove(recs[0].headers, "tbx-id");
	tt_reproduce(c->bootstraps, "in", recs, 1);
	tt_reproduce(c->bootstraps, "in", recs, 1);
	tt_records_free(recs, cnt);
	seen_t s = {store};
	cr_assert(tt_drive(&w, 1, three_records_done, &s, 10, 60));
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1"), 1);
	cnt = tt_read_topic(c->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 2, "one dead letter per malformed record");
	cr_assert(strstr(recs[0].dlq_error, "without a valid tbx-id"), "%s",
		  recs[0].dlq_error);
	tt_records_free(recs, cnt);
	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
	free(store);
}
