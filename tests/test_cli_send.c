/*
 * `tokenbox send` end to end: a `tokenbox mock-cluster` child hosts the
 * cluster, `tokenbox send` publishes stdin lines with tokens minted, and a
 * plain librdkafka consumer reads the records back with their headers.
 */
#include <signal.h>

#include "cli_child.h"
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
	/* Nothing is sent before the long line: no broker is needed. */
	const char *args[] = {"send",	     "--bootstrap-servers",
			      "127.0.0.1:1", "--topic",
			      "in",	     "--type",
			      "Line",	     "--tokens",
			      tokens,	     NULL};
	cc_result_t res;

	memset(input, 'x', len);
	input[len] = '\n';
	res = cc_run_with(args, input, len + 1, 60000);
	cr_assert(cc_exited(res.status, 1), "status %d", res.status);
	cr_assert_str_empty(res.out);
	cr_assert(strstr(res.err, "line 1 "), "%s", res.err);
	cr_assert(strstr(res.err, "1 MiB"), "%s", res.err);
	cr_assert_eq(cc_lines(res.err), 1, "%s", res.err);
	cc_result_free(&res);
	free(input);
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
