/*
 * `tokenbox send` end to end: a `tokenbox mock-cluster` child hosts the
 * cluster, `tokenbox send` publishes stdin lines with tokens minted, and a
 * plain librdkafka consumer reads the records back with their headers.
 */
#include <signal.h>

#include "cli_child.h"
#include "fixture.h"
#include "support.h"

#define WAIT_MS (10000 * cc_time_factor())

typedef struct cluster {
	pid_t pid;
	int out_fd;
	char *bootstraps;
} cluster_t;

static cluster_t cluster_start(void)
{
	const char *args[] = {"mock-cluster", "--topic", "in:2", NULL};
	cluster_t c;

	c.pid = cc_spawn(args, &c.out_fd, NULL);
	c.bootstraps = cc_read_line(c.out_fd, WAIT_MS);
	cr_assert(c.bootstraps, "mock-cluster printed no bootstrap line");
	return c;
}

static void cluster_stop(cluster_t *c)
{
	kill(c->pid, SIGTERM);
	cr_expect(cc_exited(cc_wait(c->pid, WAIT_MS), 0));
	close(c->out_fd);
	free(c->bootstraps);
}

/* 8-4-4-4-12 hex digits. */
static int is_uuid(const char *s)
{
	if (strlen(s) != 36)
		return 0;
	for (int i = 0; i < 36; i++) {
		int dash = i == 8 || i == 13 || i == 18 || i == 23;
		if (dash ? s[i] != '-'
			 : !strchr("0123456789abcdefABCDEF", s[i]))
			return 0;
	}
	return 1;
}

static int has_payload(const tt_record_t *recs, size_t cnt, const char *p)
{
	for (size_t i = 0; i < cnt; i++)
		if (recs[i].payload && strcmp(recs[i].payload, p) == 0)
			return 1;
	return 0;
}

Test(cli_send, publishes_each_line_with_the_tbx_headers, .timeout = 180)
{
	static const char input[] = "first\n{\"n\": 2}\nthird line\n";
	cluster_t c = cluster_start();
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	const char *args[] = {"send",	    "--bootstrap-servers",
			      c.bootstraps, "--topic",
			      "in",	    "--type",
			      "Line",	    "--tokens",
			      tokens,	    NULL};
	cc_result_t res;
	tt_record_t *recs;
	size_t cnt;

	/* A group subscribed to "in": send mints a token row for it. */
	tt_subscribe(tokens, "in", "readers");
	res = cc_run_with(args, input, strlen(input), 60000);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert_str_eq(res.out, "sent 3 messages to in\n");
	cc_result_free(&res);

	cnt = tt_read_topic(c.bootstraps, "in", &recs);
	cr_assert_eq(cnt, 3);
	for (size_t i = 0; i < cnt; i++) {
		cr_expect(recs[i].id && is_uuid(recs[i].id), "tbx-id '%s'",
			  recs[i].id ? recs[i].id : "(none)");
		cr_expect(recs[i].token && is_uuid(recs[i].token),
			  "tbx-token '%s'",
			  recs[i].token ? recs[i].token : "(none)");
		cr_expect(recs[i].type && strcmp(recs[i].type, "Line") == 0);
		cr_expect(recs[i].seq && atoll(recs[i].seq) > 0, "tbx-seq");
		cr_expect_null(recs[i].key);
	}
	cr_expect(has_payload(recs, cnt, "first"));
	cr_expect(has_payload(recs, cnt, "{\"n\": 2}"));
	cr_expect(has_payload(recs, cnt, "third line"));
	/* One token row per message for the subscribed group. */
	cr_expect_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens "
				      "WHERE grp = 'readers'"),
		     3);
	tt_records_free(recs, cnt);

	cluster_stop(&c);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
}

Test(cli_send, a_line_over_1_mib_is_refused_naming_its_number, .timeout = 120)
{
	size_t len = 1024 * 1024 + 1;
	char *input = malloc(len + 1);
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	tt_cluster_t *c = tt_cluster_new(1);
	/* Nothing is sent before the long line. */
	const char *args[] = {"send",	     "--bootstrap-servers",
			      c->bootstraps, "--topic",
			      "in",	     "--type",
			      "Line",	     "--tokens",
			      tokens,	     NULL};
	cc_result_t res;

	tt_cluster_topic(c, "in", 1);
	tt_subscribe(tokens, "in", "readers");

	memset(input, 'x', len);
	input[len] = '\n';
	tt_subscribe(tokens, "in", "readers"); /* send never creates it */
	res = cc_run_with(args, input, len + 1, 60000);
	cr_assert(cc_exited(res.status, 1), "status %d", res.status);
	cr_assert_str_empty(res.out);
	cr_assert(strstr(res.err, "line 1 "), "%s", res.err);
	cr_assert(strstr(res.err, "1 MiB"), "%s", res.err);
	cr_assert_eq(cc_lines(res.err), 1, "%s", res.err);
	cc_result_free(&res);
	free(input);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
}

Test(cli_send, missing_or_bad_options_exit_2, .timeout = 60)
{
	static const struct {
		const char *args[10];
		const char *key;
	} cases[] = {
	    {{"--topic", "t", "--type", "T", "--tokens", "x.db"},
	     "--bootstrap-servers"},
	    {{"--bootstrap-servers", "b:1", "--type", "T", "--tokens", "x.db"},
	     "--topic"},
	    {{"--bootstrap-servers", "b:1", "--topic", "t", "--tokens", "x.db"},
	     "--type"},
	    {{"--bootstrap-servers", "b:1", "--topic", "t", "--type", "T"},
	     "--tokens"},
	    {{"--bootstrap-servers", "b:1", "--topic", "", "--type", "T",
	      "--tokens", "x.db"},
	     "--topic"},
	    {{"--frobnicate"}, "--frobnicate"},
	    {{"surplus"}, "surplus"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[12] = {"send"};
		cc_result_t res;

		for (size_t j = 0; cases[i].args[j]; j++)
			args[j + 1] = cases[i].args[j];
		res = cc_run(args);
		cr_assert(cc_exited(res.status, 2), "case %zu: status %d", i,
			  res.status);
		cr_assert_str_empty(res.out, "case %zu: %s", i, res.out);
		cr_assert(strstr(res.err, cases[i].key), "case %zu: %s", i,
			  res.err);
		cr_assert_eq(cc_lines(res.err), 1, "case %zu: %s", i, res.err);
		cc_result_free(&res);
	}
}

Test(cli_send, help_exits_0, .timeout = 60)
{
	const char *args[] = {"send", "--help", NULL};
	cc_result_t res = cc_run(args);

	cr_assert(cc_exited(res.status, 0));
	cr_assert(strstr(res.out, "Usage: tokenbox send"), "%s", res.out);
	cc_result_free(&res);
}

/* Three `tokenbox send` processes, one after the other, send order-1: the
 * second as it was (natural duplicate: not sent again), the third changed
 * (synthetic duplicate: refused).  One effect downstream. */
Test(cli_send, a_caller_id_resent_by_another_send_takes_effect_once,
     .timeout = 240)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	char *store = tt_path(dir, "s1.db");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop1"};
	char err[256];
	cc_result_t res;
	tt_record_t *recs;
	size_t cnt;

	tt_cluster_topic(c, "in", 1);
	tt_hop_table(store, "hop1");
	tbx_worker_t *w =
	    tbx_worker_new(tt_conf(c->bootstraps, "g1", store, tokens, NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop),
		     TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK); /* subscribes g1 */

	const char *args[] = {"send", "-b",	   c->bootstraps, "-t",	  "in",
			      "-T",   "Ping",	   "-S",	  tokens, "-K",
			      ":",    "--id-from", "key",	  NULL};
	res = cc_run_with(args, "order-1:one\n", 12, 60000);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert_str_eq(res.out, "sent 1 messages to in\n");
	cc_result_free(&res);

	res = cc_run_with(args, "order-1:one\n", 12, 60000);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert_str_eq(res.out, "sent 0 messages to in (1 natural "
				  "duplicates not sent again)\n");
	cc_result_free(&res);

	res = cc_run_with(args, "order-1:CHANGED\n", 16, 60000);
	cr_assert(cc_exited(res.status, 3), "status %d: %s", res.status,
		  res.err);
	cr_assert(strstr(res.err, "line 1: caller id 'order-1' refused"), "%s",
		  res.err);
	/* Said once, with its line: not again by the library's log. */
	{
		size_t said = 0;
		for (const char *p = res.err; (p = strstr(p, "'order-1'")); p++)
			said++;
		cr_expect_eq(said, 1, "the refusal is reported %zu times: %s",
			     said, res.err);
	}
	cc_result_free(&res);

	/* The refusal is visible in the token store. */
	const char *status[] = {"inspect", "-s", tokens, "status", NULL};
	res = cc_run(status);
	cr_assert(cc_exited(res.status, 0), "%s", res.err);
	cr_assert(strstr(res.out, "Ingress edge: 1 caller ids within "
				  "ingress.dedup.window.ms, 1 synthetic "
				  "duplicates refused"),
		  "%s", res.out);
	cc_result_free(&res);

	cnt = tt_read_topic(c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 1, "one record for order-1");
	tt_records_free(recs, cnt);
	tt_drain(&w, 1);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1"), 1,
		     "one effect downstream");
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1 WHERE "
				     "payload = 'CHANGED'"),
		     0);
	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
	free(store);
}

/* The broker takes the metadata but refuses every Produce: the lines are
 * named, nothing is reported as sent, and the status is 1. */
Test(cli_send, undelivered_lines_are_named, .timeout = 180)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	tt_cluster_t *c = tt_cluster_new(1);
	cc_result_t res;

	tt_cluster_topic(c, "in", 1);
	tt_subscribe(tokens, "in", "readers");
	/* Retriable: the producer tries until dispatch.timeout.ms. */
	rd_kafka_resp_err_t errs[2000];
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		errs[i] = RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS;
	rd_kafka_mock_push_request_errors_array(
	    c->mock, TT_API_PRODUCE, sizeof(errs) / sizeof(errs[0]), errs);
	const char *args[] = {"send",
			      "-b",
			      c->bootstraps,
			      "-t",
			      "in",
			      "-T",
			      "Ping",
			      "-S",
			      tokens,
			      "-X",
			      "dispatch.timeout.ms=1000",
			      "-X",
			      "log.level=error",
			      NULL};
	res = cc_run_with(args, "a\nb\nc\n", 6, 120000);
	cr_assert(cc_exited(res.status, 1), "status %d: %s", res.status,
		  res.err);
	cr_assert_str_empty(res.out);
	cr_assert(strstr(res.err, "lines 1-3 not delivered to in"), "%s",
		  res.err);
	cc_result_free(&res);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
}

/* A `tokenbox send` killed after producing, before its delivery was
 * recorded: the line re-sent by another one goes out with the same id and
 * token, and takes effect once. */
Test(cli_send, a_send_killed_in_flight_is_resent_with_its_token, .timeout = 240)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	char *store = tt_path(dir, "s1.db");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop1"};
	char err[256];
	cc_result_t res;
	tt_record_t *recs;
	size_t cnt;

	tt_cluster_topic(c, "in", 1);
	tt_hop_table(store, "hop1");
	tbx_worker_t *w =
	    tbx_worker_new(tt_conf(c->bootstraps, "g1", store, tokens, NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop),
		     TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);

	const char *args[] = {"send", "-b",	   c->bootstraps, "-t",	  "in",
			      "-T",   "Ping",	   "-S",	  tokens, "-K",
			      ":",    "--id-from", "key",	  NULL};
	setenv("TBX_CRASH_AT", "C.produced", 1);
	res = cc_run_with(args, "order-5:five\n", 13, 60000);
	unsetenv("TBX_CRASH_AT");
	cr_assert(res.status != -1 && WIFSIGNALED(res.status) &&
		      WTERMSIG(res.status) == SIGKILL,
		  "status %d: %s", res.status, res.err);
	cc_result_free(&res);
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_edge WHERE "
				      "delivered = 0"),
		     1);

	res = cc_run_with(args, "order-5:five\n", 13, 60000);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert_str_eq(res.out, "sent 1 messages to in\n");
	cc_result_free(&res);
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens"), 1,
		     "the re-send carries the first send's token");

	/* One or two copies, one id and one token. */
	cnt = tt_read_topic(c->bootstraps, "in", &recs);
	cr_assert(cnt >= 1 && cnt <= 2, "%zu records", cnt);
	for (size_t i = 1; i < cnt; i++) {
		cr_assert_str_eq(recs[i].id, recs[0].id);
		cr_assert_str_eq(recs[i].token, recs[0].token);
	}
	tt_records_free(recs, cnt);
	tt_drain(&w, cnt);
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1"), 1,
		     "one effect downstream");
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
	free(store);
}
