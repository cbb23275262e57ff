/*
 * The `tokenbox` dispatcher: help, version, and unknown commands, run as
 * child processes.
 */
#include "cli_child.h"
#include "tokenbox/tokenbox.h"

static const char *const commands[] = {"worker", "mock-cluster", "send",
				       "demo",	 "version",	 "help"};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

Test(cli, help_lists_every_command, .timeout = 60)
{
	const char *variants[][2] = {{"--help"}, {"-h"}, {"help"}};
	char *first = NULL;

	for (size_t v = 0; v < 3; v++) {
		cc_result_t res = cc_run(variants[v]);

		cr_assert(cc_exited(res.status, 0), "%s: status %d",
			  variants[v][0], res.status);
		cr_assert_str_empty(res.err, "%s: %s", variants[v][0], res.err);
		for (size_t i = 0; i < NCOMMANDS; i++) {
			char line[64];
			snprintf(line, sizeof(line), "\n  %s ", commands[i]);
			cr_assert(strstr(res.out, line), "%s does not list %s",
				  variants[v][0], commands[i]);
		}
		if (!first)
			first = strdup(res.out);
		else
			cr_assert_str_eq(res.out, first);
		cc_result_free(&res);
	}
	free(first);
}

Test(cli, help_of_a_command_is_its_own_help, .timeout = 120)
{
	for (size_t i = 0; i < NCOMMANDS; i++) {
		const char *via_help[] = {"help", commands[i], NULL};
		const char *via_option[] = {commands[i], "--help", NULL};
		cc_result_t a = cc_run(via_help);
		cc_result_t b = cc_run(via_option);
		char usage[64];

		cr_assert(cc_exited(a.status, 0), "help %s: status %d",
			  commands[i], a.status);
		cr_assert(cc_exited(b.status, 0), "%s --help: status %d",
			  commands[i], b.status);
		cr_assert_str_eq(a.out, b.out, "help %s differs", commands[i]);
		snprintf(usage, sizeof(usage), "tokenbox %s", commands[i]);
		cr_assert(strstr(a.out, usage), "help %s: %s", commands[i],
			  a.out);
		cc_result_free(&a);
		cc_result_free(&b);
	}
}

Test(cli, mock_cluster_help_documents_auto_created_topics, .timeout = 60)
{
	const char *args[] = {"help", "mock-cluster", NULL};
	cc_result_t res = cc_run(args);

	cr_assert(cc_exited(res.status, 0));
	cr_assert(strstr(res.out, "--brokers N"));
	cr_assert(strstr(res.out, "--topic NAME:PARTITIONS"));
	cr_assert(strstr(res.out, "--bootstrap-file PATH"));
	cr_assert(strstr(res.out, "4 partitions"));
	cc_result_free(&res);
}

Test(cli, unknown_command_exits_2_with_a_hint, .timeout = 60)
{
	const char *cases[][3] = {{"frobnicate"}, {"help", "frobnicate"}};

	for (size_t i = 0; i < 2; i++) {
		cc_result_t res = cc_run(cases[i]);

		cr_assert(cc_exited(res.status, 2), "status %d", res.status);
		cr_assert_str_empty(res.out);
		cr_assert(strstr(res.err, "'frobnicate'"), "%s", res.err);
		cr_assert(strstr(res.err, "tokenbox help"), "%s", res.err);
		cr_assert_eq(cc_lines(res.err), 1, "%s", res.err);
		cc_result_free(&res);
	}
}

Test(cli, no_command_prints_usage_and_exits_2, .timeout = 60)
{
	const char *args[] = {NULL};
	cc_result_t res = cc_run(args);

	cr_assert(cc_exited(res.status, 2), "status %d", res.status);
	cr_assert_str_empty(res.out);
	cr_assert(strstr(res.err, "Usage: tokenbox <command>"), "%s", res.err);
	cc_result_free(&res);
}

Test(cli, version_prints_the_library_version, .timeout = 60)
{
	const char *variants[][2] = {{"--version"}, {"version"}};

	for (size_t v = 0; v < 2; v++) {
		cc_result_t res = cc_run(variants[v]);

		cr_assert(cc_exited(res.status, 0));
		cr_assert(strncmp(res.out, "tokenbox " TBX_VERSION_STR " ",
				  strlen("tokenbox " TBX_VERSION_STR " ")) == 0,
			  "%s", res.out);
		cr_assert_eq(cc_lines(res.out), 1);
		cc_result_free(&res);
	}
}
