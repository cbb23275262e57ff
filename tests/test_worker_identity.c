/*
 * Which files a worker or a publisher may create, and which topic names a
 * worker takes, through the library's API (the multi-process scenarios are
 * in test_cli_stores.c).
 */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/ids.h"
#include "consumer/msg.h"
#include "support.h"
#include "tokens/tokens.h"

static tbx_verdict_t ok_handler(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				void *opaque)
{
	(void)ctx;
	(void)msg;
	(void)opaque;
	return TBX_VERDICT_OK;
}

static int exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

Test(identity, a_worker_does_not_create_a_missing_token_store)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s.db"), *tokens = tt_path(dir, "t.db");
	tbx_conf_t *conf = tt_conf("127.0.0.1:1", "g", store, tokens,
				   "tokens.create", "false", NULL);
	tbx_worker_t *w;
	char err[512];

	w = tbx_worker_new(conf, err, sizeof(err));
	cr_assert_null(w);
	cr_expect(strstr(err, tokens), "%s", err);
	cr_expect(strstr(err, "tokenbox init --tokens"), "%s", err);
	cr_expect(!exists(tokens), "%s was created", tokens);
	tbx_conf_destroy(conf);

	/* tokens.create=true (what tt_conf sets) creates it. */
	w = tbx_worker_new(tt_conf("127.0.0.1:1", "g", store, tokens, NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_expect(exists(tokens));
	tbx_worker_destroy(w);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}

Test(identity, a_publisher_never_creates_a_token_store)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "t.db");
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;
	char err[512];

	tbx_conf_set(conf, "kafka.bootstrap.servers", "127.0.0.1:1", NULL, 0);
	tbx_conf_set(conf, "tokens.path", tokens, NULL, 0);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert_null(pub);
	cr_expect(strstr(err, tokens), "%s", err);
	cr_expect(strstr(err, "tokenbox init"), "%s", err);
	cr_expect(!exists(tokens), "%s was created", tokens);
	tt_tokens_init(tokens);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "%s", err);
	tbx_publisher_destroy(pub);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
}

Test(identity, topics_must_be_kafka_names_and_patterns_are_refused)
{
	static const char *const bad[] = {"^hell.*", "a b", ".",
					  "..",	     "x/y", "t\xc3\xa9"};
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s.db");
	char long_name[251];
	tbx_worker_t *w;
	tbx_tokens_t *t;
	tbx__db_opts_t opts;
	char err[512];
	int64_t since;

	w = tbx_worker_new(tt_conf("127.0.0.1:1", "g", store, NULL, NULL), err,
			   sizeof(err));
	cr_assert(w, "%s", err);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(
		    tbx_worker_register(w, bad[i], NULL, ok_handler, NULL),
		    TBX_EINVAL, "'%s' was taken", bad[i]);
	cr_expect(strstr(tbx_worker_errstr(w), "not a Kafka topic name"), "%s",
		  tbx_worker_errstr(w));
	cr_expect_eq(
	    tbx_worker_register(w, "^orders-.*", NULL, ok_handler, NULL),
	    TBX_EINVAL);
	cr_expect(strstr(tbx_worker_errstr(w), "pattern subscriptions are "
					       "not supported"),
		  "%s", tbx_worker_errstr(w));
	memset(long_name, 'a', 250);
	long_name[250] = '\0';
	cr_expect_eq(tbx_worker_register(w, long_name, NULL, ok_handler, NULL),
		     TBX_EINVAL);
	long_name[249] = '\0';
	cr_expect_eq(tbx_worker_register(w, long_name, NULL, ok_handler, NULL),
		     TBX_OK);
	cr_expect_eq(
	    tbx_worker_register(w, "Orders_v2.eu-1", NULL, ok_handler, NULL),
	    TBX_OK);
	tbx_worker_destroy(w);

	/* The token store records no subscription a sender cannot match. */
	tbx__db_opts_init(&opts);
	cr_assert_eq(
	    tbx_tokens_sqlite_open(store, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_expect_eq(tbx_tokens_subscribe(t, "^hell.*", "g", &since),
		     TBX_EINVAL);
	cr_expect_eq(tbx_tokens_subscribe(t, "hello", "g", &since), TBX_OK);
	tbx_tokens_close(t);
	cr_expect_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_subscriptions"),
		     1);
	tt_rmrf(dir);
	free(dir);
	free(store);
}

/* The layout check, written the plain way, to hold tbx__is_uuid() to. */
static int uuid_by_hand(const char *s, size_t len)
{
	if (len != 36)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return 0;
		} else if (!strchr("0123456789abcdefABCDEF", c) || c == '\0') {
			return 0;
		}
	}
	return 1;
}

/* Every id and token from the network goes through tbx__is_uuid(): each
 * position of a valid UUID replaced by every byte, and lengths around
 * 36, agree with the plain check. */
Test(identity, uuid_check_accepts_exactly_the_uuid_layout)
{
	const char *good[] = {"0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b",
			      "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
			      "00000000-0000-0000-0000-000000000000"};
	char buf[40];
	size_t checked = 0;

	for (size_t g = 0; g < sizeof(good) / sizeof(good[0]); g++) {
		cr_assert(tbx__is_uuid(good[g], 36), "%s", good[g]);
		for (size_t i = 0; i < 36; i++)
			for (int b = 0; b < 256; b++) {
				memcpy(buf, good[g], 37);
				buf[i] = (char)b;
				cr_assert_eq(tbx__is_uuid(buf, 36),
					     uuid_by_hand(buf, 36),
					     "position %zu byte %d", i, b);
				checked++;
			}
		for (size_t len = 0; len <= 37; len++)
			if (len != 36)
				cr_assert_eq(tbx__is_uuid(good[g], len), 0);
	}
	cr_assert_eq(tbx__is_uuid(NULL, 36), 0);
	cr_assert_eq(checked, 3 * 36 * 256);
}

/* Of a repeated header the last counts, an id is lower-cased, and only
 * the exact names are tokenbox's. */
Test(identity, the_last_of_a_repeated_header_counts_and_names_match_exactly)
{
	rd_kafka_headers_t *h = rd_kafka_headers_new(8);
	struct tbx_msg msg;

	rd_kafka_header_add(h, "tbx-id", -1,
			    "00000000-0000-0000-0000-000000000001", -1);
	rd_kafka_header_add(h, "TBX-TOKEN", -1,
			    "00000000-0000-0000-0000-000000000002", -1);
	rd_kafka_header_add(h, "tbx-idx", -1, "not a uuid", -1);
	rd_kafka_header_add(h, "tbx-type", -1, "First", -1);
	rd_kafka_header_add(h, "tbx-id", -1,
			    "0190A1B2-C3D4-7E5F-8A6B-7C8D9E0F1A2B", -1);
	rd_kafka_header_add(h, "tbx-type", -1, "Second", -1);
	memset(&msg, 0xa5, sizeof(msg));
	msg.topic = "in";
	tbx__msg_parse_headers(&msg, h, 0, 5);
	cr_assert_str_eq(msg.id, "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b");
	cr_assert_str_eq(msg.type, "Second");
	cr_assert(msg.untokened, "TBX-TOKEN is not tbx-token");
	cr_assert_null(msg.malformed);
	rd_kafka_header_add(h, "tbx-id", -1, "not a uuid", -1);
	tbx__msg_parse_headers(&msg, h, 0, 5);
	cr_assert_str_eq(msg.malformed, "tbx-id is not a UUID");
	cr_assert_str_eq(msg.id, "u:in:0:5");
	rd_kafka_headers_destroy(h);
}
