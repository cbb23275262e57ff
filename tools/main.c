/*
 * The `tokenbox` command: `tokenbox <command> [options]`.
 *
 * Dispatches to tbx_cmd_<command>() with argv[0] set to the command's name.
 * `tokenbox help CMD` is exactly `tokenbox CMD --help`.
 */
#include <librdkafka/rdkafka.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "tokenbox/tokenbox.h"
#include "tools/cli.h"

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
} commands[] = {
    {"worker", tbx_cmd_worker,
     "run a worker whose handlers come from plugins, until a signal"},
    {"demo", tbx_cmd_demo,
     "run a two-hop pipeline through duplicates and a restart"},
    {"init", tbx_cmd_init,
     "create a token store or a service store and print its id"},
    {"send", tbx_cmd_send,
     "publish lines of stdin to a topic, with tokens minted"},
    {"inspect", tbx_cmd_inspect,
     "look into the stores; clean up, redispatch, replay dead letters"},
    {"mock-cluster", tbx_cmd_mock_cluster,
     "host librdkafka's mock Kafka cluster until stopped"},
    {"version", cmd_version,
     "print the versions of tokenbox and its libraries"},
    {"help", cmd_help, "list the commands, or show one command's help"},
    {NULL, NULL, NULL},
};

static const struct command *find_command(const char *name)
{
	for (const struct command *c = commands; c->name; c++)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

static void print_usage(FILE *out)
{
	fprintf(out,
		"Usage: tokenbox <command> [options]\n"
		"\n"
		"Exactly-once message handling for Kafka consumer groups.\n"
		"\n"
		"Commands:\n");
	for (const struct command *c = commands; c->name; c++)
		fprintf(out, "  %-14s %s\n", c->name, c->summary);
	fprintf(out,
		"\n"
		"'tokenbox help <command>' and 'tokenbox <command> --help'\n"
		"show a command's options.\n"
		"\n"
		"Exit status: 0 on success, 1 when a command fails, "
		"2 for a bad command line.\n");
}

static int unknown_command(const char *name)
{
	return tbx_cli_usage(NULL,
			     "unknown command '%s' (see 'tokenbox help' for "
			     "the list)",
			     name);
}

static int cmd_help(int argc, char **argv)
{
	const struct command *c;
	char *sub_argv[3];

	if (argc < 2) {
		print_usage(stdout);
		return TBX_EXIT_OK;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		printf("Usage: tokenbox help [<command>]\n"
		       "\n"
		       "Without a command, lists the commands.  With one, "
		       "shows its help, as\n"
		       "'tokenbox <command> --help' does.\n");
		return TBX_EXIT_OK;
	}
	if (argc > 2)
		return tbx_cli_usage(
		    "help", "expected one command, got '%s' too", argv[2]);
	c = find_command(argv[1]);
	if (!c)
		return unknown_command(argv[1]);
	sub_argv[0] = argv[1];
	sub_argv[1] = "--help";
	sub_argv[2] = NULL;
	return c->fn(2, sub_argv);
}

static int cmd_version(int argc, char **argv)
{
	if (argc == 2 &&
	    (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		printf("Usage: tokenbox version\n"
		       "\n"
		       "Prints the version of tokenbox and of the librdkafka "
		       "and SQLite libraries\nit runs with.\n");
		return TBX_EXIT_OK;
	}
	if (argc > 1)
		return tbx_cli_usage("version", "takes no arguments, got '%s'",
				     argv[1]);
	printf("tokenbox %s (librdkafka %s, SQLite %s)\n", tbx_version(),
	       rd_kafka_version_str(), sqlite3_libversion());
	return TBX_EXIT_OK;
}

int main(int argc, char **argv)
{
	const struct command *c;
	int rc;

	if (argc < 2) {
		print_usage(stderr);
		return TBX_EXIT_USAGE;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
		argv[1] = "help";
	else if (strcmp(argv[1], "--version") == 0)
		argv[1] = "version";

	c = find_command(argv[1]);
	if (!c && argv[1][0] == '-')
		return tbx_cli_usage(
		    NULL, "unknown option '%s' (see 'tokenbox help')", argv[1]);
	if (!c)
		return unknown_command(argv[1]);
	rc = c->fn(argc - 1, argv + 1);
	if (fflush(stdout) != 0 && rc == TBX_EXIT_OK)
		rc = tbx_cli_fail(c->name, "cannot write to standard output");
	return rc;
}
