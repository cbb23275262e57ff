/*
 * `tokenbox inspect`: looks into a service store and a token store — what
 * is pending, what is orphaned, what was dead-lettered — and runs the two
 * repairs an operator may need: register-cleanup and the redispatch of
 * outbox rows whose incoming record is no longer redelivered.
 *
 * This file: the command line, and the dispatch to the command's file
 * (tools/inspect.h lists them).  The stores are read and repaired through
 * their interfaces (outbox/outbox.h, tokens/tokens.h), never with SQL of
 * the tool's own.
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "tools/cli.h"
#include "tools/inspect.h"

enum {
	OPT_BUSY = 256,
	OPT_BATCH,
	OPT_CHECK,
	OPT_IDLE,
	OPT_YES,
	OPT_SCHEMA,
	OPT_TSCHEMA,
	OPT_SINCE,
	OPT_WIDE
};

static void usage(void)
{
	printf(
	    "Usage: tokenbox inspect -s STORE [-S TOKENS] [--json] COMMAND\n"
	    "\n"
	    "Looks into a service store (--store) and the token store "
	    "(--tokens; without\n"
	    "it, the token tables of the --store file: single-file mode).  "
	    "Commands that\n"
	    "only read open both stores read-only: they change nothing, and "
	    "are safe while\n"
	    "workers run (SQLite WAL readers neither wait for writers nor "
	    "block them;\n"
	    "PostgreSQL readers read one snapshot).\n"
	    "\n"
	    "STORE and TOKENS are SQLite files, or PostgreSQL URLs "
	    "(postgresql://...)\n"
	    "with the schema of each store: --schema for the service store "
	    "(the worker's\n"
	    "store.schema, by default its group id), --tokens-schema for the "
	    "token store\n"
	    "(default tokenbox_tokens; without --tokens, in the --store "
	    "database).\n"
	    "Passwords come from the URL, PGPASSWORD, ~/.pgpass or a service "
	    "file, and\n"
	    "nothing printed shows one: URLs appear with the password as "
	    "***.\n"
	    "\n"
	    "Commands:\n"
	    "  status                  schema, pending outbox rows, tokens, "
	    "registrations\n"
	    "                          and orphans, token sets, "
	    "subscriptions, ingress\n"
	    "                          offsets, dead letters, batch rows\n"
	    "  outbox list             pending outbox rows, oldest first, "
	    "then the batch\n"
	    "                          rows (outbox.layout=batch), oldest "
	    "first\n"
	    "  outbox show ID          one row (every group's row of message "
	    "ID, or the\n"
	    "                          batch row ID) with its outgoing "
	    "messages\n"
	    "  tokens list             token rows, then token sets, oldest "
	    "first\n"
	    "  tokens show ID          a token's rows, registration, and the "
	    "outbox rows\n"
	    "                          that carry or consume it\n"
	    "  orphans                 registrations (of tokens and of token "
	    "sets) that\n"
	    "                          register-cleanup would remove now as "
	    "orphans, and why\n"
	    "  cleanup [--dry-run]     run register-cleanup now (writes the "
	    "token store)\n"
	    "  redispatch              dispatch stuck outbox rows with their "
	    "own ids and\n"
	    "                          tokens, then finish them (writes both "
	    "stores)\n"
	    "  dead-letters list       dead-lettered records, newest first\n"
	    "  dead-letters show ID    one record (its number, or its message "
	    "id); with\n"
	    "                          -b and --topic, also its key, payload "
	    "and headers\n"
	    "                          as read from the dead-letter topic\n"
	    "  dead-letters replay     re-publish --topic's dead letters of a "
	    "group to\n"
	    "                          their original topic (writes the token "
	    "store, and\n"
	    "                          marks them replayed in the service "
	    "store)\n"
	    "  unsubscribe --group G --topic T [--yes]\n"
	    "                          remove the subscription of a retired "
	    "group G to T,\n"
	    "                          and G's token rows once it has no "
	    "subscription\n"
	    "                          left, and G's token set rows of T "
	    "(writes the token\n"
	    "                          store; without --yes it only says what "
	    "it would\n"
	    "                          remove)\n"
	    "  undelivered list        outgoing messages given up after "
	    "permanent delivery\n"
	    "                          failures that the dead-letter topic "
	    "did not take\n"
	    "                          either, newest first\n"
	    "  undelivered show ID     one of them (its number), with key, "
	    "payload, headers\n"
	    "  undelivered resend ID   send it again as it was (same tbx-id "
	    "and token), then\n"
	    "                          remove it (writes the service store)\n"
	    "\n"
	    "Options:\n"
	    "  -s, --store PATH|URL    the service store (required)\n"
	    "  -S, --tokens PATH|URL   the token store (default: the --store "
	    "file or\n"
	    "                          database)\n"
	    "      --schema NAME       the service store's schema (a "
	    "PostgreSQL --store:\n"
	    "                          required)\n"
	    "      --tokens-schema NAME  the token store's schema (default "
	    "tokenbox_tokens)\n"
	    "  -j, --json              print one JSON document instead of "
	    "tables\n"
	    "      --check             exit 1 on a finding: status: orphans, "
	    "rows older\n"
	    "                          than --older-than, rows a worker found "
	    "below their\n"
	    "                          committed offset, undelivered messages, "
	    "alarms a\n"
	    "                          worker raised (store mismatches, "
	    "duplicate shares,\n"
	    "                          a worker left without partitions),\n"
	    "                          subscriptions unused for --idle-after, "
	    "a wrong pair\n"
	    "                          of stores (see below); orphans: any;\n"
	    "                          a list: any row\n"
	    "  -o, --older-than DUR    only rows at least DUR old (lists, "
	    "redispatch); for\n"
	    "                          status, the age from which a row "
	    "counts as stuck\n"
	    "                          (default 10m).  DUR: an integer and "
	    "ms, s, m, h\n"
	    "                          or d, e.g. 30s, 10m\n"
	    "  -l, --limit N           rows listed, 0 for all (default %d); "
	    "redispatch:\n"
	    "                          rows per group (default all)\n"
	    "  -g, --group G           only group G (repeatable).  orphans, "
	    "cleanup:\n"
	    "                          also judge G's registrations when "
	    "the store has\n"
	    "                          no rows of G (see below)\n"
	    "  -n, --dry-run           cleanup: say what would be removed, "
	    "remove nothing\n"
	    "      --batch N           registrations per sweep (cleanup), rows "
	    "per round\n"
	    "                          (redispatch); default %d\n"
	    "  -b, --bootstrap-servers B  redispatch, dead-letters, "
	    "undelivered "
	    "resend:\n"
	    "                          Kafka brokers,\n"
	    "                          host:port[,...]\n"
	    "  -t, --topic T           dead-letters replay and show: the "
	    "dead-letter topic;\n"
	    "                          unsubscribe: the subscribed topic\n"
	    "  -c, --config FILE       redispatch, dead-letters: Kafka "
	    "settings in the\n"
	    "                          worker's key=value format (e.g. "
	    "security)\n"
	    "  -X KEY=VALUE            one setting, after --config\n"
	    "      --idle-after DUR    status: a subscription no worker used "
	    "for DUR is\n"
	    "                          idle; unsubscribe: refuse one used "
	    "more recently\n"
	    "                          (default 1d)\n"
	    "      --yes               unsubscribe: remove, not only say what "
	    "would go\n"
	    "      --busy-timeout MS   wait at most MS for a lock (default "
	    "%d)\n"
	    "      --since TIME        status: count the dead letters recorded "
	    "since TIME,\n"
	    "                          an RFC 3339 time (2026-11-27T15:04:05Z) "
	    "or a\n"
	    "                          duration back from now (30m, 1h); with "
	    "--check,\n"
	    "                          any is a finding\n"
	    "      --wide              dead-letters list: the whole error, "
	    "not cut to\n"
	    "                          the terminal's width\n"
	    "  -h, --help              show this help\n"
	    "\n"
	    "States of an outbox row: 'processed' (no tokens yet) and "
	    "'tokened' (tokens\n"
	    "assigned).  A tokened row either awaits dispatch or was "
	    "dispatched and\n"
	    "awaits its token consume and delete (phases D, E): the stores do "
	    "not tell\n"
	    "these apart.  A batch row (one per batch, outbox.layout=batch) "
	    "is processed,\n"
	    "tokened, or corrupt: its columns do not decode, and no worker "
	    "can finish\n"
	    "it (status --check flags it).\n"
	    "\n"
	    "The wrong pair of stores.  Every worker records in its service "
	    "store the id\n"
	    "and place of the token store its group uses.  A --tokens that is "
	    "not that\n"
	    "store, one left out while the workers use a store apart, a "
	    "service store\n"
	    "given as --tokens or a token store as --store are named "
	    "(status: in its\n"
	    "report and \"store_pair\" of --json; other commands: a warning "
	    "on standard\n"
	    "error), and the commands that write refuse such a pair.\n"
	    "\n"
	    "Orphans are judged as the sweeper judges them, against the "
	    "service store:\n"
	    "only groups with rows in it (outbox and batch rows, ingress "
	    "offsets, dead\n"
	    "letters) are judged unless named with --group, since against "
	    "another group's\n"
	    "store every registration would look orphaned.\n"
	    "\n"
	    "dead-letters replay reads --topic from its beginning and "
	    "re-publishes each\n"
	    "dead letter that --group (default: the one group with dead "
	    "letters in the\n"
	    "store) recorded, at most --limit (default all), to its original "
	    "topic: a\n"
	    "fresh id and token minted for that group only, the original key, "
	    "payload,\n"
	    "type and headers, and tbx-replay-of = the original message id.  "
	    "Each record\n"
	    "the group dead-lettered is replayed once, however many dead "
	    "letters of it\n"
	    "--topic holds (other groups of the same topic dead-letter it "
	    "too); one\n"
	    "replayed before by the group (within ingress.dedup.window.ms) is "
	    "not sent\n"
	    "again.  A dead letter names the group that sent it "
	    "(tbx-dlq-group): one\n"
	    "naming another group is never replayed, nor shown by "
	    "dead-letters show, for\n"
	    "this one; one without the header (an older tokenbox's) is "
	    "taken as before.\n"
	    "Each dead letter the group recorded that is not in --topic "
	    "(pending, removed,\n"
	    "undeliverable) is named on standard error and counted, and "
	    "the exit status\n"
	    "is 3.  With several groups on one topic, every repair acts on "
	    "one group's\n"
	    "records only, each once (docs/inspect.md).\n"
	    "\n"
	    "Short options are those of every command: -s service store, -S "
	    "token store\n"
	    "(it was -t), -t a topic, -c a configuration file (--check has no "
	    "short form\n"
	    "now).\n"
	    "\n"
	    "redispatch takes rows older than --older-than (default 10m: "
	    "younger rows\n"
	    "usually belong to a worker still working on them; redispatch is "
	    "safe anyway,\n"
	    "as copies carry the same ids and tokens and are dropped "
	    "downstream), of\n"
	    "every group with rows, or of the --group ones.\n"
	    "\n"
	    "With OTEL_EXPORTER_OTLP_ENDPOINT set (or otel.* in the --config "
	    "file of\n"
	    "redispatch and dead-letters), redispatch, undelivered resend "
	    "and dead-letters\n"
	    "replay record an OpenTelemetry send span per message sent, in "
	    "the message's\n"
	    "own trace (docs/tracing.md).\n"
	    "\n"
	    "Exit status: 0 done; 1 a finding (--check) or no such ID; 2 a "
	    "bad command\n"
	    "line, or a store or Kafka error (one line on standard error); "
	    "3 dead-letters\n"
	    "replay: dead letters the group recorded were not replayed (not "
	    "in --topic,\n"
	    "or the group not subscribed to their topic; each named on "
	    "standard error).\n",
	    INSPECT_DEFAULT_LIMIT, INSPECT_DEFAULT_BATCH,
	    INSPECT_DEFAULT_BUSY_MS);
}

#define M(c) (1u << (c))

/* Which commands an option applies to (the rest apply to all). */
static const struct {
	int val;
	const char *name;
	unsigned cmds;
} scoped[] = {
    {OPT_CHECK, "--check",
     M(C_STATUS) | M(C_OUTBOX_LIST) | M(C_TOKENS_LIST) | M(C_ORPHANS) |
	 M(C_DL_LIST) | M(C_UD_LIST)},
    {OPT_IDLE, "--idle-after", M(C_STATUS) | M(C_UNSUBSCRIBE)},
    {OPT_YES, "--yes", M(C_UNSUBSCRIBE)},
    {OPT_SINCE, "--since", M(C_STATUS)},
    {OPT_WIDE, "--wide", M(C_DL_LIST)},
    {'o', "--older-than",
     M(C_STATUS) | M(C_OUTBOX_LIST) | M(C_TOKENS_LIST) | M(C_DL_LIST) |
	 M(C_REDISPATCH)},
    {'l', "--limit",
     M(C_OUTBOX_LIST) | M(C_TOKENS_LIST) | M(C_DL_LIST) | M(C_REDISPATCH) |
	 M(C_DL_REPLAY) | M(C_UD_LIST)},
    {'g', "--group",
     M(C_OUTBOX_LIST) | M(C_OUTBOX_SHOW) | M(C_TOKENS_LIST) | M(C_ORPHANS) |
	 M(C_CLEANUP) | M(C_REDISPATCH) | M(C_DL_LIST) | M(C_DL_SHOW) |
	 M(C_DL_REPLAY) | M(C_UNSUBSCRIBE) | M(C_UD_LIST) | M(C_UD_SHOW) |
	 M(C_UD_RESEND)},
    {'n', "--dry-run", M(C_CLEANUP)},
    {OPT_BATCH, "--batch", M(C_CLEANUP) | M(C_REDISPATCH)},
    {'b', "--bootstrap-servers",
     M(C_REDISPATCH) | M(C_DL_REPLAY) | M(C_DL_SHOW) | M(C_UD_RESEND)},
    {'c', "--config", M(C_REDISPATCH) | M(C_DL_REPLAY) | M(C_DL_SHOW)},
    {'X', "-X", M(C_REDISPATCH) | M(C_DL_REPLAY) | M(C_DL_SHOW)},
    {'t', "--topic", M(C_DL_REPLAY) | M(C_DL_SHOW) | M(C_UNSUBSCRIBE)},
};

static const struct {
	const char *name, *sub;
	insp_cmd_t cmd;
} commands[] = {
    {"status", NULL, C_STATUS},
    {"outbox", "list", C_OUTBOX_LIST},
    {"outbox", "show", C_OUTBOX_SHOW},
    {"tokens", "list", C_TOKENS_LIST},
    {"tokens", "show", C_TOKENS_SHOW},
    {"orphans", NULL, C_ORPHANS},
    {"cleanup", NULL, C_CLEANUP},
    {"redispatch", NULL, C_REDISPATCH},
    {"dead-letters", "list", C_DL_LIST},
    {"dead-letters", "show", C_DL_SHOW},
    {"dead-letters", "replay", C_DL_REPLAY},
    {"unsubscribe", NULL, C_UNSUBSCRIBE},
    {"undelivered", "list", C_UD_LIST},
    {"undelivered", "show", C_UD_SHOW},
    {"undelivered", "resend", C_UD_RESEND},
};

static int is_show(insp_cmd_t cmd)
{
	return cmd == C_OUTBOX_SHOW || cmd == C_TOKENS_SHOW ||
	       cmd == C_DL_SHOW || cmd == C_UD_SHOW || cmd == C_UD_RESEND;
}

/* 1 for a command of @p o that writes a store or sends. */
static int is_repair(const insp_opts_t *o)
{
	return (o->cmd == C_CLEANUP && !o->dry_run) ||
	       (o->cmd == C_UNSUBSCRIBE && o->yes) || o->cmd == C_REDISPATCH ||
	       o->cmd == C_UD_RESEND || o->cmd == C_DL_REPLAY;
}

/* Turns the operands into a command.  @returns 0 or TBX_EXIT_USAGE. */
static int parse_operands(int argc, char **argv, insp_opts_t *o)
{
	const char *name, *sub, *subs;
	int known = 0;

	if (optind >= argc)
		return tbx_cli_usage(
		    INSPECT_CMD,
		    "a command is needed: status, outbox, "
		    "tokens, orphans, cleanup, redispatch, "
		    "dead-letters, undelivered or unsubscribe (see "
		    "'tokenbox help inspect')");
	name = argv[optind++];
	sub = optind < argc ? argv[optind] : NULL;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(commands[i].name, name) != 0)
			continue;
		known = 1;
		if (!commands[i].sub) {
			o->cmd = commands[i].cmd;
			snprintf(o->cmd_name, sizeof(o->cmd_name), "%s", name);
			break;
		}
		if (sub && strcmp(commands[i].sub, sub) == 0) {
			o->cmd = commands[i].cmd;
			snprintf(o->cmd_name, sizeof(o->cmd_name), "%s %s",
				 name, sub);
			optind++;
			break;
		}
	}
	if (!known)
		return tbx_cli_usage(INSPECT_CMD,
				     "unknown command '%s' (see 'tokenbox "
				     "help inspect')",
				     name);
	subs = strcmp(name, "dead-letters") == 0  ? "list, show or replay"
	       : strcmp(name, "undelivered") == 0 ? "list, show or resend"
						  : "list or show";
	if (o->cmd == C_NONE && sub)
		return tbx_cli_usage(INSPECT_CMD,
				     "%s: unknown subcommand '%s' (%s)", name,
				     sub, subs);
	if (o->cmd == C_NONE)
		return tbx_cli_usage(
		    INSPECT_CMD, "%s: a subcommand is needed: %s", name, subs);
	if (is_show(o->cmd)) {
		if (optind >= argc)
			return tbx_cli_usage(INSPECT_CMD,
					     "%s: an id is needed (%s ID)",
					     o->cmd_name, o->cmd_name);
		o->id = argv[optind++];
		if (!*o->id)
			return tbx_cli_usage(INSPECT_CMD, "%s: empty id",
					     o->cmd_name);
	}
	if (optind < argc)
		return tbx_cli_usage(INSPECT_CMD, "unexpected argument '%s'",
				     argv[optind]);
	return 0;
}

/* A recorded pattern: printable, and no longer than a topic name. */
static int pattern_text(const char *s)
{
	size_t len = strlen(s);

	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return len > 1 && len <= TBX_TOPIC_MAX;
}

/* @returns 0, -1 after printing the help, or TBX_EXIT_USAGE. */
static int parse_args(int argc, char **argv, insp_opts_t *o)
{
	static const struct option longopts[] = {
	    {"store", required_argument, NULL, 's'},
	    {"tokens", required_argument, NULL, 'S'},
	    {"schema", required_argument, NULL, OPT_SCHEMA},
	    {"tokens-schema", required_argument, NULL, OPT_TSCHEMA},
	    {"json", no_argument, NULL, 'j'},
	    {"check", no_argument, NULL, OPT_CHECK},
	    {"config", required_argument, NULL, 'c'},
	    {"topic", required_argument, NULL, 't'},
	    {"older-than", required_argument, NULL, 'o'},
	    {"limit", required_argument, NULL, 'l'},
	    {"group", required_argument, NULL, 'g'},
	    {"dry-run", no_argument, NULL, 'n'},
	    {"batch", required_argument, NULL, OPT_BATCH},
	    {"bootstrap-servers", required_argument, NULL, 'b'},
	    {"busy-timeout", required_argument, NULL, OPT_BUSY},
	    {"idle-after", required_argument, NULL, OPT_IDLE},
	    {"yes", no_argument, NULL, OPT_YES},
	    {"since", required_argument, NULL, OPT_SINCE},
	    {"wide", no_argument, NULL, OPT_WIDE},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int seen[sizeof(scoped) / sizeof(scoped[0])] = {0};
	int c, rc, limit_seen = 0;

	o->busy_ms = INSPECT_DEFAULT_BUSY_MS;
	o->older_ms = -1;
	o->since_ms = o->since_ago_ms = -1;
	o->limit = INSPECT_DEFAULT_LIMIT;
	o->batch = INSPECT_DEFAULT_BATCH;
	o->idle_ms = INSPECT_DEFAULT_IDLE_MS;
	/* Every argument could be a --group: room for all of them. */
	if (!(o->groups = calloc((size_t)argc + 1, sizeof(*o->groups))))
		return tbx_cli_usage(INSPECT_CMD, "out of memory");
	while ((c = tbx_cli_getopt(INSPECT_CMD, argc, argv,
				   "s:S:jc:X:t:o:l:g:nb:h", longopts)) != -1) {
		for (size_t i = 0; i < sizeof(scoped) / sizeof(scoped[0]); i++)
			if (scoped[i].val == c)
				seen[i] = 1;
		switch (c) {
		case 's':
			o->store = optarg;
			break;
		case 'S':
			o->tokens = optarg;
			break;
		case OPT_SCHEMA:
			o->schema = optarg;
			break;
		case OPT_TSCHEMA:
			o->tokens_schema = optarg;
			break;
		case 'j':
			o->json = 1;
			break;
		case OPT_CHECK:
			o->check = 1;
			break;
		case 'c':
			if ((rc = tbx_cli_conf_file(INSPECT_CMD, &o->conf,
						    optarg)))
				return rc;
			break;
		case 'X':
			if ((rc = tbx_cli_conf_override(INSPECT_CMD, &o->conf,
							optarg)))
				return rc;
			break;
		case 't':
			if (!*optarg)
				return tbx_cli_usage(INSPECT_CMD,
						     "--topic: empty value");
			o->topic = optarg;
			break;
		case 'o':
			if ((rc = insp_parse_duration("--older-than", optarg,
						      &o->older_ms)))
				return rc;
			break;
		case 'l':
			if ((rc = tbx_cli_parse_int(INSPECT_CMD, "--limit",
						    optarg, 0, 100000000,
						    &o->limit)))
				return rc;
			limit_seen = 1;
			break;
		case 'g':
			if (!*optarg)
				return tbx_cli_usage(INSPECT_CMD,
						     "--group: empty value");
			o->groups[o->group_cnt++] = optarg;
			break;
		case 'n':
			o->dry_run = 1;
			break;
		case OPT_BATCH:
			if ((rc = tbx_cli_parse_int(INSPECT_CMD, "--batch",
						    optarg, 1, 1000000,
						    &o->batch)))
				return rc;
			break;
		case 'b':
			o->servers = optarg;
			break;
		case OPT_BUSY:
			if ((rc = tbx_cli_parse_int(INSPECT_CMD,
						    "--busy-timeout", optarg, 0,
						    3600000, &o->busy_ms)))
				return rc;
			break;
		case OPT_IDLE:
			if ((rc = insp_parse_duration("--idle-after", optarg,
						      &o->idle_ms)))
				return rc;
			break;
		case OPT_YES:
			o->yes = 1;
			break;
		case OPT_SINCE:
			if ((rc = insp_parse_since("--since", optarg,
						   &o->since_ms,
						   &o->since_ago_ms)))
				return rc;
			break;
		case OPT_WIDE:
			o->wide = 1;
			break;
		case 'h':
			usage();
			return -1;
		default:
			return TBX_EXIT_USAGE;
		}
	}
	if ((rc = parse_operands(argc, argv, o)))
		return rc;
	for (size_t i = 0; i < sizeof(scoped) / sizeof(scoped[0]); i++)
		if (seen[i] && !(scoped[i].cmds & M(o->cmd)))
			return tbx_cli_usage(INSPECT_CMD,
					     "%s does not apply to '%s' (see "
					     "'tokenbox help inspect')",
					     scoped[i].name, o->cmd_name);
	if (!o->store)
		return tbx_cli_usage(INSPECT_CMD,
				     "--store is required (see 'tokenbox help "
				     "inspect')");
	if (!*o->store || (o->tokens && !*o->tokens))
		return tbx_cli_usage(INSPECT_CMD, "%s: empty path",
				     *o->store ? "--tokens" : "--store");
	if (o->cmd == C_DL_REPLAY || (o->cmd == C_DL_SHOW && o->topic)) {
		if (!o->topic)
			return tbx_cli_usage(INSPECT_CMD,
					     "dead-letters replay: --topic "
					     "(the dead-letter topic) is "
					     "required");
		if ((!o->servers || !*o->servers) && !o->conf.file &&
		    !o->conf.override_cnt)
			return tbx_cli_usage(INSPECT_CMD,
					     "%s: --bootstrap-servers is "
					     "required",
					     o->cmd_name);
		if (o->group_cnt > 1)
			return tbx_cli_usage(INSPECT_CMD,
					     "%s: one --group at most",
					     o->cmd_name);
		if (o->cmd == C_DL_REPLAY && !limit_seen)
			o->limit = 0;
	}
	if (o->cmd == C_DL_SHOW && o->topic && o->json)
		return tbx_cli_usage(INSPECT_CMD,
				     "dead-letters show: --topic reads the "
				     "record for the text form only; leave "
				     "out --json or --topic");
	if (o->cmd == C_DL_SHOW && !o->topic &&
	    (o->servers || o->conf.file || o->conf.override_cnt))
		return tbx_cli_usage(INSPECT_CMD,
				     "dead-letters show: --topic (the "
				     "dead-letter topic) is needed to read "
				     "the record from Kafka");
	if (o->cmd == C_UNSUBSCRIBE) {
		if (o->group_cnt != 1)
			return tbx_cli_usage(INSPECT_CMD,
					     "unsubscribe: one --group is "
					     "needed");
		if (!o->topic)
			return tbx_cli_usage(INSPECT_CMD,
					     "unsubscribe: --topic is needed");
		/* A recorded pattern ("^…", from before they were refused)
		 * may be removed too. */
		if (o->topic[0] == '^' ? !pattern_text(o->topic)
				       : !tbx__topic_valid(o->topic))
			return tbx_cli_usage(INSPECT_CMD,
					     "--topic: '%s' is not a Kafka "
					     "topic name (1 to 249 characters "
					     "of a-z, A-Z, 0-9, '.', '_', '-')",
					     o->topic);
	}
	if (o->cmd == C_UD_RESEND && (!o->servers || !*o->servers))
		return tbx_cli_usage(INSPECT_CMD,
				     "undelivered resend: --bootstrap-servers "
				     "is required");
	if (o->cmd == C_REDISPATCH) {
		if ((!o->servers || !*o->servers) && !o->conf.file &&
		    !o->conf.override_cnt)
			return tbx_cli_usage(INSPECT_CMD,
					     "redispatch: --bootstrap-servers "
					     "is required");
		if (o->older_ms < 0)
			o->older_ms = INSPECT_DEFAULT_STUCK_MS;
		if (!limit_seen)
			o->limit = 0;
	}
	return 0;
}

/* TBX_INSPECT_NOW_MS: a fixed "now" for reproducible ages. */
static int now_ms(int64_t *now)
{
	const char *env = getenv("TBX_INSPECT_NOW_MS");
	long long v;

	if (!env || !*env) {
		*now = tbx__now_ms();
		return 0;
	}
	if (tbx_cli_parse_int(INSPECT_CMD, "TBX_INSPECT_NOW_MS", env, 0,
			      INT64_MAX, &v))
		return INSPECT_EXIT_ERROR;
	*now = v;
	return 0;
}

int tbx_cmd_inspect(int argc, char **argv)
{
	insp_opts_t o;
	insp_t in;
	int rc;

	memset(&o, 0, sizeof(o));
	memset(&in, 0, sizeof(in));
	in.o = &o;
	/* The library logs to stderr; errors reach the user as one line
	 * from here instead. */
	tbx__log_setup(TBX_LOG_ERR - 1, INSPECT_CMD);
	if ((rc = parse_args(argc, argv, &o))) {
		free(o.groups);
		tbx_cli_conf_free(&o.conf);
		return rc < 0 ? INSPECT_EXIT_OK : rc;
	}
	if ((rc = insp_stores(&in)) || (rc = now_ms(&in.now_ms)) ||
	    (rc = insp_open(&in)) || (rc = insp_pair_check(&in)))
		goto out;
	/* status reports a wrong pair in its report; the others say so
	 * first, and a repair does not write to such a pair. */
	if (in.pair_cnt && o.cmd != C_STATUS)
		insp_pair_warn(&in);
	if (in.pair_cnt && is_repair(&o)) {
		rc = tbx_cli_usage(INSPECT_CMD,
				   "%s: refused: these are not the stores of "
				   "one pipeline (see the warning); give the "
				   "service store and the token store its "
				   "workers use",
				   o.cmd_name);
		goto out;
	}
	switch (o.cmd) {
	case C_CLEANUP:
		rc = insp_cleanup(&in);
		goto out;
	case C_REDISPATCH:
		rc = insp_redispatch(&in);
		goto out;
	case C_UD_RESEND:
		rc = insp_ud_resend(&in);
		goto out;
	case C_DL_REPLAY:
		rc = insp_dl_replay(&in);
		goto out;
	case C_UNSUBSCRIBE:
		rc = insp_unsubscribe(&in);
		goto out;
	default:
		break;
	}
	if ((rc = insp_read_begin(&in)))
		goto out;
	switch (o.cmd) {
	case C_STATUS:
		rc = insp_status(&in);
		break;
	case C_OUTBOX_LIST:
		rc = insp_outbox_list(&in);
		break;
	case C_OUTBOX_SHOW:
		rc = insp_outbox_show(&in);
		break;
	case C_TOKENS_LIST:
		rc = insp_tokens_list(&in);
		break;
	case C_TOKENS_SHOW:
		rc = insp_tokens_show(&in);
		break;
	case C_ORPHANS:
		rc = insp_orphans(&in);
		break;
	case C_DL_LIST:
		rc = insp_dl_list(&in);
		break;
	case C_DL_SHOW:
		rc = insp_dl_show(&in);
		break;
	case C_UD_LIST:
		rc = insp_ud_list(&in);
		break;
	case C_UD_SHOW:
		rc = insp_ud_show(&in);
		break;
	default:
		rc = tbx_cli_usage(INSPECT_CMD, "internal: no command");
		break;
	}
	insp_read_end(&in);
out:
	insp_pair_free(&in);
	insp_close(&in);
	free(o.groups);
	tbx_cli_conf_free(&o.conf);
	return rc;
}
