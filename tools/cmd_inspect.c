/*
 * `tokenbox inspect`: looks into a service store and a token store — what
 * is pending, what is orphaned, what was dead-lettered — and runs the two
 * repairs an operator may need: register-cleanup and the redispatch of
 * outbox rows whose incoming record is no longer redelivered.
 *
 * This file: the command line, opening the stores, the `status` command,
 * and the query helpers the other inspect_*.c files share (inspect.h).
 *
 * Reading the stores with our own SELECTs is deliberate: the tool inspects
 * SQLite files, and the store interfaces only offer what the protocol
 * needs.  Every value is bound; SQL text is never built from values.  What
 * the protocol decides — which registrations are orphans — is asked of the
 * library's own code (tbx__sweep_classify), never re-implemented here.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"
#include "store/db.h"
#include "tools/cli.h"
#include "tools/inspect.h"

enum { OPT_BUSY = 256, OPT_BATCH, OPT_CHECK, OPT_IDLE, OPT_YES };

static void usage(void)
{
	printf(
	    "Usage: tokenbox inspect -s STORE [-S TOKENS] [--json] COMMAND\n"
	    "\n"
	    "Looks into a service store (--store) and the token store "
	    "(--tokens; without\n"
	    "it, the token tables of the --store file: single-file mode).  "
	    "Commands that\n"
	    "only read open both files read-only: they change nothing, and "
	    "are safe while\n"
	    "workers run (SQLite WAL readers neither wait for writers nor "
	    "block them).\n"
	    "\n"
	    "Commands:\n"
	    "  status                  schema, pending outbox rows, tokens, "
	    "registrations\n"
	    "                          and orphans, subscriptions, ingress "
	    "offsets,\n"
	    "                          dead letters\n"
	    "  outbox list             pending outbox rows, oldest first\n"
	    "  outbox show ID          one row (every group's row of message "
	    "ID) with its\n"
	    "                          outgoing messages\n"
	    "  tokens list             token rows, oldest first\n"
	    "  tokens show ID          a token's rows, registration, and the "
	    "outbox rows\n"
	    "                          that carry or consume it\n"
	    "  orphans                 registrations register-cleanup would "
	    "remove now as\n"
	    "                          orphans, and why\n"
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
	    "store)\n"
	    "  unsubscribe --group G --topic T [--yes]\n"
	    "                          remove the subscription of a retired "
	    "group G to T,\n"
	    "                          and G's token rows once it has no "
	    "subscription\n"
	    "                          left (writes the token store; without "
	    "--yes it only\n"
	    "                          says what it would remove)\n"
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
	    "  -s, --store PATH        the service store (required)\n"
	    "  -S, --tokens PATH       the token store (default: the --store "
	    "file)\n"
	    "  -j, --json              print one JSON document instead of "
	    "tables\n"
	    "      --check             exit 1 on a finding: status: orphans, "
	    "rows older\n"
	    "                          than --older-than, rows a worker found "
	    "below their\n"
	    "                          committed offset, undelivered messages, "
	    "alarms a\n"
	    "                          worker raised (store mismatches, "
	    "duplicate shares),\n"
	    "                          subscriptions unused for --idle-after; "
	    "orphans: any;\n"
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
	    "  -h, --help              show this help\n"
	    "\n"
	    "States of an outbox row: 'processed' (no tokens yet) and "
	    "'tokened' (tokens\n"
	    "assigned).  A tokened row either awaits dispatch or was "
	    "dispatched and\n"
	    "awaits its token consume and delete (phases D, E): the stores do "
	    "not tell\n"
	    "these apart.\n"
	    "\n"
	    "Orphans are judged as the sweeper judges them, against the "
	    "service store:\n"
	    "only groups with rows in it (outbox, ingress offsets, dead "
	    "letters) are\n"
	    "judged unless named with --group, since against another "
	    "group's store every\n"
	    "registration would look orphaned.\n"
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
	    "A dead\n"
	    "letter replayed before (within ingress.dedup.window.ms) is not "
	    "sent again.\n"
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
	    "Exit status: 0 done; 1 a finding (--check) or no such ID; 2 a "
	    "bad command\n"
	    "line, or a store or Kafka error (one line on standard error).\n",
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
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int seen[sizeof(scoped) / sizeof(scoped[0])] = {0};
	int c, rc, limit_seen = 0;

	o->busy_ms = INSPECT_DEFAULT_BUSY_MS;
	o->older_ms = -1;
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

/*
 * Opening.
 */

static const char *db_path(insp_t *in, sqlite3 *db)
{
	return db == in->sdb ? in->o->store : in->tpath;
}

int insp_store_fail(const char *path, int err, sqlite3 *db)
{
	const char *msg = db ? sqlite3_errmsg(db) : tbx_strerror(err);

	switch (err) {
	case TBX_EBUSY:
		return tbx_cli_usage(INSPECT_CMD,
				     "%s: locked by another connection past "
				     "busy_timeout (--busy-timeout)",
				     path);
	case TBX_ECORRUPT:
		return tbx_cli_usage(INSPECT_CMD, "%s: file is corrupt (%s)",
				     path, msg);
	case TBX_ENOTDB:
		return tbx_cli_usage(
		    INSPECT_CMD, "%s: not a tokenbox database (%s)", path, msg);
	default:
		return tbx_cli_usage(INSPECT_CMD, "%s: %s", path, msg);
	}
}

static int db_fail(insp_t *in, sqlite3 *db)
{
	return insp_store_fail(db_path(in, db),
			       tbx__db_err(sqlite3_extended_errcode(db)), db);
}

sqlite3_stmt *insp_prepare(insp_t *in, sqlite3 *db, const char *sql)
{
	sqlite3_stmt *stmt = NULL;

	if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK) {
		db_fail(in, db);
		sqlite3_finalize(stmt);
		return NULL;
	}
	return stmt;
}

int insp_step(insp_t *in, sqlite3_stmt *stmt)
{
	int rc = sqlite3_step(stmt);

	if (rc == SQLITE_ROW || rc == SQLITE_DONE)
		return rc;
	db_fail(in, sqlite3_db_handle(stmt));
	return -1;
}

int insp_count(insp_t *in, sqlite3 *db, const char *sql, const char *p1,
	       int64_t *out)
{
	sqlite3_stmt *stmt = insp_prepare(in, db, sql);
	int rc;

	if (!stmt)
		return -1;
	if (p1)
		sqlite3_bind_text(stmt, 1, p1, -1, SQLITE_STATIC);
	rc = insp_step(in, stmt);
	*out = rc == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : 0;
	sqlite3_finalize(stmt);
	return rc < 0 ? -1 : 0;
}

int insp_bind_groups(insp_t *in, sqlite3_stmt *stmt, int idx, char **json)
{
	cJSON *arr;

	*json = NULL;
	if (!in->o->group_cnt)
		return sqlite3_bind_null(stmt, idx) == SQLITE_OK ? 0 : -1;
	if (!(arr = cJSON_CreateArray()))
		return -1;
	for (size_t i = 0; i < in->o->group_cnt; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(in->o->groups[i]));
	*json = cJSON_PrintUnformatted(arr);
	cJSON_Delete(arr);
	if (!*json)
		return -1;
	return sqlite3_bind_text(stmt, idx, *json, -1, SQLITE_STATIC) ==
		       SQLITE_OK
		   ? 0
		   : -1;
}

int insp_has(char *const *list, size_t cnt, const char *grp)
{
	for (size_t i = 0; i < cnt; i++)
		if (strcmp(list[i], grp) == 0)
			return 1;
	return 0;
}

void insp_free_list(char **list, size_t cnt)
{
	for (size_t i = 0; list && i < cnt; i++)
		free(list[i]);
	free(list);
}

/* The text column 0 of @p sql's rows, into a malloc'ed list. */
static int text_list(insp_t *in, sqlite3 *db, const char *sql, char ***out,
		     size_t *cnt)
{
	sqlite3_stmt *stmt = insp_prepare(in, db, sql);
	char **list = NULL;
	size_t n = 0, cap = 0;
	int rc;

	*out = NULL;
	*cnt = 0;
	if (!stmt)
		return -1;
	while ((rc = insp_step(in, stmt)) == SQLITE_ROW) {
		const char *g = (const char *)sqlite3_column_text(stmt, 0);
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			char **grown = realloc(list, ncap * sizeof(*grown));
			if (!grown) {
				rc = -1;
				break;
			}
			list = grown;
			cap = ncap;
		}
		if (!(list[n] = tbx__strdup(g ? g : ""))) {
			rc = -1;
			break;
		}
		n++;
	}
	sqlite3_finalize(stmt);
	if (rc != SQLITE_DONE) {
		insp_free_list(list, n);
		return -1;
	}
	*out = list;
	*cnt = n;
	return 0;
}

int insp_served_groups(insp_t *in, char ***out, size_t *cnt)
{
	return text_list(in, in->sdb,
			 "SELECT grp FROM tbx_outbox UNION SELECT grp FROM "
			 "tbx_ingress UNION SELECT grp FROM tbx_dead_letters "
			 "ORDER BY 1",
			 out, cnt);
}

int insp_reg_groups(insp_t *in, char ***out, size_t *cnt)
{
	return text_list(in, in->tdb,
			 "SELECT DISTINCT send_grp FROM tbx_registrations "
			 "ORDER BY 1",
			 out, cnt);
}

int insp_resolve_id(insp_t *in, sqlite3 *db, const char *exact_sql,
		    const char *prefix_sql, const char *id, char **out)
{
	sqlite3_stmt *stmt = insp_prepare(in, db, exact_sql);
	int r, n = 0;

	*out = NULL;
	if (!stmt)
		return INSPECT_EXIT_ERROR;
	sqlite3_bind_text(stmt, 1, id, -1, SQLITE_STATIC);
	r = insp_step(in, stmt);
	sqlite3_finalize(stmt);
	if (r < 0)
		return INSPECT_EXIT_ERROR;
	if (r == SQLITE_ROW) {
		*out = tbx__strdup(id);
		return *out ? 0 : tbx_cli_usage(INSPECT_CMD, "out of memory");
	}
	if (!(stmt = insp_prepare(in, db, prefix_sql)))
		return INSPECT_EXIT_ERROR;
	sqlite3_bind_text(stmt, 1, id, -1, SQLITE_STATIC);
	while ((r = insp_step(in, stmt)) == SQLITE_ROW && n < 2) {
		const char *v = (const char *)sqlite3_column_text(stmt, 0);
		if (n++ == 0)
			*out = tbx__strdup(v ? v : "");
	}
	sqlite3_finalize(stmt);
	if (r < 0 || n > 1) {
		free(*out);
		*out = NULL;
	}
	if (r < 0)
		return INSPECT_EXIT_ERROR;
	if (n > 1)
		return tbx_cli_usage(INSPECT_CMD,
				     "'%s' is the start of several ids; give "
				     "more of it",
				     id);
	return 0;
}

/* What is wrong with a file that a read-only open refused as "older
 * schema": a file nobody claimed (application_id 0, user_version 0) is not
 * a tokenbox database at all. */
static int unclaimed(const char *path)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *stmt = NULL;
	int64_t app_id = -1;

	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) ==
		SQLITE_OK &&
	    sqlite3_prepare_v2(db, "PRAGMA application_id", -1, &stmt, NULL) ==
		SQLITE_OK &&
	    sqlite3_step(stmt) == SQLITE_ROW)
		app_id = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	sqlite3_close(db);
	return app_id == 0;
}

/* Reports a failed open in one line.  @returns INSPECT_EXIT_ERROR. */
static int open_fail(const char *path, int err, const char *errstr)
{
	if (err == TBX_ESCHEMA && unclaimed(path))
		return tbx_cli_usage(INSPECT_CMD,
				     "%s: not a tokenbox database (no tokenbox "
				     "application_id: no tokenbox worker has "
				     "opened it)",
				     path);
	return tbx_cli_usage(INSPECT_CMD, "%s",
			     *errstr ? errstr : tbx_strerror(err));
}

/* Makes a read-only connection safe to close: SQLite would otherwise try
 * to checkpoint the WAL into the database file when the last connection
 * closes. */
static void readonly_guard(sqlite3 *db)
{
	int on = 1;

	sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, &on);
	sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
}

static int schema_of(insp_t *in, sqlite3 *db, int *version)
{
	int64_t v = 0;

	if (insp_count(in, db, "PRAGMA user_version", NULL, &v))
		return -1;
	*version = (int)v;
	return 0;
}

/* Opens both files read-only (see the top of inspect.h). */
static int insp_open(insp_t *in)
{
	const insp_opts_t *o = in->o;
	tbx__db_opts_t opts;
	char errstr[512] = "";
	int err;

	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	opts.create = 0;
	opts.busy_timeout_ms = (int)o->busy_ms;
	in->single = !o->tokens || tbx__same_file(o->store, o->tokens);
	in->tpath = in->single ? o->store : o->tokens;
	if ((err = tbx_outbox_open(o->store, &opts, &in->store, errstr,
				   sizeof(errstr))))
		return open_fail(o->store, err, errstr);
	in->sdb = tbx_outbox_db(in->store);
	readonly_guard(in->sdb);
	if (in->single) {
		in->tdb = in->sdb;
	} else {
		errstr[0] = '\0';
		if ((err = tbx__db_open(in->tpath, &opts, &in->tdb, errstr,
					sizeof(errstr))))
			return open_fail(in->tpath, err, errstr);
		readonly_guard(in->tdb);
	}
	if (schema_of(in, in->sdb, &in->schema[0]) ||
	    schema_of(in, in->tdb, &in->schema[1]))
		return INSPECT_EXIT_ERROR;
	return 0;
}

static void insp_close(insp_t *in)
{
	if (in->tdb && in->tdb != in->sdb)
		sqlite3_close_v2(in->tdb);
	in->tdb = NULL;
	tbx_outbox_close(in->store);
	in->store = NULL;
	in->sdb = NULL;
}

/* One snapshot per file for what a read-only command prints. */
static int read_begin(insp_t *in)
{
	if (sqlite3_exec(in->sdb, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
		return db_fail(in, in->sdb);
	if (in->tdb != in->sdb &&
	    sqlite3_exec(in->tdb, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
		return db_fail(in, in->tdb);
	return 0;
}

static void read_end(insp_t *in)
{
	if (in->sdb && !sqlite3_get_autocommit(in->sdb))
		sqlite3_exec(in->sdb, "COMMIT", NULL, NULL, NULL);
	if (in->tdb && !sqlite3_get_autocommit(in->tdb))
		sqlite3_exec(in->tdb, "COMMIT", NULL, NULL, NULL);
}

/*
 * status
 */

typedef struct grp_counts {
	char *grp;
	int64_t n[5]; /* the query's integer columns */
	int64_t oldest_ms;
	int checked;
	int64_t v[4]; /* per tbx__sweep_verdict_t */
} grp_counts_t;

typedef struct status {
	grp_counts_t *outbox, *tokens, *regs, *dls;
	size_t outbox_n, tokens_n, regs_n, dls_n;
	cJSON *subs, *ingress; /* gathered as JSON, printed either way */
	cJSON *alarms;
	int64_t undelivered; /* tbx_undelivered lines */
	int64_t seq;
	int64_t edge, edge_refused; /* the ingress edge (schema 4) */
	int64_t idle_subs, alarm_cnt;
} status_t;

static void counts_free(grp_counts_t *g, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(g[i].grp);
	free(g);
}

/* Runs @p sql (no parameter but ?1 = @p p1 when not 0) and collects one
 * grp_counts_t per row: column 0 the group, then up to five integers,
 * then the oldest time. */
static int gather(insp_t *in, sqlite3 *db, const char *sql, int64_t p1,
		  int ints, grp_counts_t **out, size_t *cnt)
{
	sqlite3_stmt *stmt = insp_prepare(in, db, sql);
	grp_counts_t *g = NULL;
	size_t n = 0;
	int rc;

	*out = NULL;
	*cnt = 0;
	if (!stmt)
		return -1;
	if (p1)
		sqlite3_bind_int64(stmt, 1, p1);
	while ((rc = insp_step(in, stmt)) == SQLITE_ROW) {
		grp_counts_t *grown = realloc(g, (n + 1) * sizeof(*g));
		const char *name = (const char *)sqlite3_column_text(stmt, 0);

		if (!grown) {
			rc = -1;
			break;
		}
		g = grown;
		memset(&g[n], 0, sizeof(g[n]));
		for (int i = 0; i < ints && i < 5; i++)
			g[n].n[i] = sqlite3_column_int64(stmt, 1 + i);
		g[n].oldest_ms = sqlite3_column_int64(stmt, 1 + ints);
		if (!(g[n].grp = tbx__strdup(name ? name : ""))) {
			rc = -1;
			break;
		}
		n++;
	}
	sqlite3_finalize(stmt);
	*out = g;
	*cnt = n;
	return rc == SQLITE_DONE ? 0 : -1;
}

static int count_verdict(void *opaque, const insp_reg_t *reg)
{
	grp_counts_t *g = opaque;

	if (reg->verdict >= 0 && reg->verdict < 4)
		g->v[reg->verdict]++;
	return 0;
}

static int status_gather(insp_t *in, status_t *st, int64_t stuck_before)
{
	char **served = NULL;
	size_t served_n = 0;
	sqlite3_stmt *stmt;
	int rc;

	if (insp_count(in, in->sdb, "SELECT count(*) FROM tbx_undelivered",
		       NULL, &st->undelivered) ||
	    gather(in, in->sdb,
		   "SELECT grp, sum(attempt IS NULL), sum(attempt IS NOT "
		   "NULL), sum(created_ms <= ?1), sum(stuck_ms IS NOT NULL), "
		   "0, min(created_ms) FROM tbx_outbox GROUP BY grp ORDER BY "
		   "grp",
		   stuck_before, 5, &st->outbox, &st->outbox_n) ||
	    gather(in, in->tdb,
		   "SELECT grp, count(*), min(created_ms) FROM tbx_tokens "
		   "GROUP BY grp ORDER BY grp",
		   0, 1, &st->tokens, &st->tokens_n) ||
	    gather(in, in->tdb,
		   "SELECT send_grp, count(DISTINCT attempt), count(*), "
		   "min(created_ms) FROM tbx_registrations GROUP BY send_grp "
		   "ORDER BY send_grp",
		   0, 2, &st->regs, &st->regs_n) ||
	    gather(in, in->sdb,
		   "SELECT d.grp, count(*), sum(EXISTS (SELECT 1 FROM "
		   "tbx_outbox o WHERE o.grp = d.grp AND o.msg_id = d.msg_id "
		   "AND o.kind = 1)), max(d.created_ms) FROM tbx_dead_letters "
		   "d GROUP BY d.grp ORDER BY d.grp",
		   0, 2, &st->dls, &st->dls_n) ||
	    insp_count(in, in->tdb, "SELECT value FROM tbx_seq WHERE id = 1",
		       NULL, &st->seq) ||
	    insp_served_groups(in, &served, &served_n))
		return -1;
	for (size_t i = 0; i < st->regs_n; i++) {
		grp_counts_t *g = &st->regs[i];
		if (!insp_has(served, served_n, g->grp))
			continue;
		g->checked = 1;
		if (insp_regs_each(in, g->grp, count_verdict, g)) {
			insp_free_list(served, served_n);
			return -1;
		}
	}
	insp_free_list(served, served_n);

	st->subs = cJSON_CreateArray();
	st->ingress = cJSON_CreateArray();
	if (!st->subs || !st->ingress)
		return -1;
	if (!(stmt = insp_prepare(in, in->tdb,
				  "SELECT topic, grp, since_seq, created_ms, "
				  "coalesce(used_ms, created_ms) FROM "
				  "tbx_subscriptions ORDER BY topic, grp")))
		return -1;
	while ((rc = insp_step(in, stmt)) == SQLITE_ROW) {
		cJSON *s = cJSON_CreateObject();
		int64_t used = sqlite3_column_int64(stmt, 4);
		int idle = in->now_ms - used >= in->o->idle_ms;

		cJSON_AddItemToArray(st->subs, s);
		insp_json_add_int(s, "used_ms", used);
		insp_json_add_int(s, "unused_for_ms", in->now_ms - used);
		cJSON_AddBoolToObject(s, "idle", idle);
		st->idle_subs += idle;
		insp_json_add_str(s, "topic",
				  (const char *)sqlite3_column_text(stmt, 0));
		insp_json_add_str(s, "group",
				  (const char *)sqlite3_column_text(stmt, 1));
		insp_json_add_int(s, "since_seq",
				  sqlite3_column_int64(stmt, 2));
		insp_json_add_int(s, "created_ms",
				  sqlite3_column_int64(stmt, 3));
		insp_json_add_int(s, "age_ms",
				  insp_age(in, sqlite3_column_int64(stmt, 3)));
	}
	sqlite3_finalize(stmt);
	if (rc != SQLITE_DONE)
		return -1;
	/* Alarms the workers of this service store raised. */
	if (!(st->alarms = cJSON_CreateArray()) ||
	    !(stmt = insp_prepare(in, in->sdb,
				  "SELECT grp, name, count, first_ms, "
				  "last_ms, detail FROM tbx_alarms ORDER BY "
				  "grp, name")))
		return -1;
	while ((rc = insp_step(in, stmt)) == SQLITE_ROW) {
		cJSON *s = cJSON_CreateObject();
		cJSON_AddItemToArray(st->alarms, s);
		insp_json_add_str(s, "group",
				  (const char *)sqlite3_column_text(stmt, 0));
		insp_json_add_str(s, "alarm",
				  (const char *)sqlite3_column_text(stmt, 1));
		insp_json_add_int(s, "count", sqlite3_column_int64(stmt, 2));
		insp_json_add_int(s, "first_ms", sqlite3_column_int64(stmt, 3));
		insp_json_add_int(s, "last_ms", sqlite3_column_int64(stmt, 4));
		insp_json_add_str(s, "detail",
				  (const char *)sqlite3_column_text(stmt, 5));
		st->alarm_cnt += sqlite3_column_int64(stmt, 2);
	}
	sqlite3_finalize(stmt);
	if (rc != SQLITE_DONE)
		return -1;
	if (!(stmt = insp_prepare(in, in->sdb,
				  "SELECT grp, topic, \"partition\", "
				  "next_offset FROM tbx_ingress ORDER BY grp, "
				  "topic, \"partition\"")))
		return -1;
	while ((rc = insp_step(in, stmt)) == SQLITE_ROW) {
		cJSON *s = cJSON_CreateObject();
		cJSON_AddItemToArray(st->ingress, s);
		insp_json_add_str(s, "group",
				  (const char *)sqlite3_column_text(stmt, 0));
		insp_json_add_str(s, "topic",
				  (const char *)sqlite3_column_text(stmt, 1));
		insp_json_add_int(s, "partition",
				  sqlite3_column_int64(stmt, 2));
		insp_json_add_int(s, "next_offset",
				  sqlite3_column_int64(stmt, 3));
	}
	sqlite3_finalize(stmt);
	return rc == SQLITE_DONE ? 0 : -1;
}

static void status_free(status_t *st)
{
	counts_free(st->outbox, st->outbox_n);
	counts_free(st->tokens, st->tokens_n);
	counts_free(st->regs, st->regs_n);
	counts_free(st->dls, st->dls_n);
	cJSON_Delete(st->subs);
	cJSON_Delete(st->ingress);
	cJSON_Delete(st->alarms);
}

/* Adds "<prefix>created_ms" and "<prefix>age_ms" (null when none). */
static void add_time(insp_t *in, cJSON *o, const char *created_key,
		     const char *age_key, int64_t ms, int have)
{
	if (!have) {
		cJSON_AddNullToObject(o, created_key);
		cJSON_AddNullToObject(o, age_key);
		return;
	}
	insp_json_add_int(o, created_key, ms);
	insp_json_add_int(o, age_key, insp_age(in, ms));
}

typedef struct totals {
	int64_t processed, tokened, stuck, below, oldest;
	int64_t tokens, tokens_oldest;
	int64_t attempts, reg_tokens, orphans, unchecked;
	int64_t dl, dl_pending;
} totals_t;

static void status_totals(const status_t *st, totals_t *t)
{
	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < st->outbox_n; i++) {
		const grp_counts_t *g = &st->outbox[i];
		t->processed += g->n[0];
		t->tokened += g->n[1];
		t->stuck += g->n[2];
		t->below += g->n[3];
		if (!t->oldest || g->oldest_ms < t->oldest)
			t->oldest = g->oldest_ms;
	}
	for (size_t i = 0; i < st->tokens_n; i++) {
		t->tokens += st->tokens[i].n[0];
		if (!t->tokens_oldest ||
		    st->tokens[i].oldest_ms < t->tokens_oldest)
			t->tokens_oldest = st->tokens[i].oldest_ms;
	}
	for (size_t i = 0; i < st->regs_n; i++) {
		const grp_counts_t *g = &st->regs[i];
		t->attempts += g->n[0];
		t->reg_tokens += g->n[1];
		if (g->checked)
			t->orphans += g->v[TBX_SWEEP_ORPHAN_OTHER_ATTEMPT] +
				      g->v[TBX_SWEEP_ORPHAN_NO_ROW];
		else
			t->unchecked += g->n[0];
	}
	for (size_t i = 0; i < st->dls_n; i++) {
		t->dl += st->dls[i].n[0];
		t->dl_pending += st->dls[i].n[1];
	}
}

static cJSON *status_json(insp_t *in, const status_t *st, const totals_t *t,
			  int64_t stuck_ms)
{
	cJSON *doc = cJSON_CreateObject(), *o, *arr, *g;

	if (!doc)
		return NULL;
	o = cJSON_AddObjectToObject(doc, "store");
	insp_json_add_str(o, "path", in->o->store);
	insp_json_add_int(o, "schema_version", in->schema[0]);
	o = cJSON_AddObjectToObject(doc, "token_store");
	insp_json_add_str(o, "path", in->tpath);
	insp_json_add_int(o, "schema_version", in->schema[1]);
	cJSON_AddBoolToObject(o, "same_file", in->single);
	insp_json_add_int(doc, "now_ms", in->now_ms);

	o = cJSON_AddObjectToObject(doc, "outbox");
	insp_json_add_int(o, "pending", t->processed + t->tokened);
	insp_json_add_int(o, "processed", t->processed);
	insp_json_add_int(o, "tokened", t->tokened);
	insp_json_add_int(o, "stuck_after_ms", stuck_ms);
	insp_json_add_int(o, "stuck", t->stuck);
	insp_json_add_int(o, "below_committed", t->below);
	add_time(in, o, "oldest_created_ms", "oldest_age_ms", t->oldest,
		 st->outbox_n > 0);
	arr = cJSON_AddArrayToObject(o, "groups");
	for (size_t i = 0; i < st->outbox_n; i++) {
		const grp_counts_t *c = &st->outbox[i];
		cJSON_AddItemToArray(arr, g = cJSON_CreateObject());
		insp_json_add_str(g, "group", c->grp);
		insp_json_add_int(g, "processed", c->n[0]);
		insp_json_add_int(g, "tokened", c->n[1]);
		insp_json_add_int(g, "stuck", c->n[2]);
		insp_json_add_int(g, "below_committed", c->n[3]);
		add_time(in, g, "oldest_created_ms", "oldest_age_ms",
			 c->oldest_ms, 1);
	}

	o = cJSON_AddObjectToObject(doc, "tokens");
	insp_json_add_int(o, "rows", t->tokens);
	add_time(in, o, "oldest_created_ms", "oldest_age_ms", t->tokens_oldest,
		 st->tokens_n > 0);
	arr = cJSON_AddArrayToObject(o, "groups");
	for (size_t i = 0; i < st->tokens_n; i++) {
		const grp_counts_t *c = &st->tokens[i];
		cJSON_AddItemToArray(arr, g = cJSON_CreateObject());
		insp_json_add_str(g, "group", c->grp);
		insp_json_add_int(g, "rows", c->n[0]);
		add_time(in, g, "oldest_created_ms", "oldest_age_ms",
			 c->oldest_ms, 1);
	}

	o = cJSON_AddObjectToObject(doc, "registrations");
	insp_json_add_int(o, "attempts", t->attempts);
	insp_json_add_int(o, "tokens", t->reg_tokens);
	insp_json_add_int(o, "orphans", t->orphans);
	insp_json_add_int(o, "unchecked_attempts", t->unchecked);
	arr = cJSON_AddArrayToObject(o, "groups");
	for (size_t i = 0; i < st->regs_n; i++) {
		const grp_counts_t *c = &st->regs[i];
		static const char *const keys[4] = {
		    "winners", "orphans_other_attempt", "orphans_no_row",
		    "in_flight"};
		cJSON_AddItemToArray(arr, g = cJSON_CreateObject());
		insp_json_add_str(g, "group", c->grp);
		insp_json_add_int(g, "attempts", c->n[0]);
		insp_json_add_int(g, "tokens", c->n[1]);
		add_time(in, g, "oldest_created_ms", "oldest_age_ms",
			 c->oldest_ms, 1);
		cJSON_AddBoolToObject(g, "checked", c->checked);
		for (int v = 0; v < 4; v++) {
			if (c->checked)
				insp_json_add_int(g, keys[v], c->v[v]);
			else
				cJSON_AddNullToObject(g, keys[v]);
		}
	}

	o = cJSON_AddObjectToObject(doc, "subscriptions");
	insp_json_add_int(o, "sequence", st->seq);
	insp_json_add_int(o, "idle_after_ms", in->o->idle_ms);
	insp_json_add_int(o, "idle", st->idle_subs);
	cJSON_AddItemToObject(o, "list", cJSON_Duplicate(st->subs, 1));
	cJSON_AddItemToObject(doc, "ingress", cJSON_Duplicate(st->ingress, 1));
	cJSON_AddItemToObject(doc, "alarms", cJSON_Duplicate(st->alarms, 1));

	o = cJSON_AddObjectToObject(doc, "undelivered");
	insp_json_add_int(o, "messages", st->undelivered);
	o = cJSON_AddObjectToObject(doc, "dead_letters");
	insp_json_add_int(o, "recorded", t->dl);
	insp_json_add_int(o, "pending", t->dl_pending);
	arr = cJSON_AddArrayToObject(o, "groups");
	for (size_t i = 0; i < st->dls_n; i++) {
		const grp_counts_t *c = &st->dls[i];
		cJSON_AddItemToArray(arr, g = cJSON_CreateObject());
		insp_json_add_str(g, "group", c->grp);
		insp_json_add_int(g, "recorded", c->n[0]);
		insp_json_add_int(g, "pending", c->n[1]);
		add_time(in, g, "latest_created_ms", "latest_age_ms",
			 c->oldest_ms, 1);
	}
	return doc;
}

static void status_print(insp_t *in, const status_t *st, const totals_t *t,
			 int64_t stuck_ms)
{
	char age[32], dur[32], head[48], note[512], n1[48], n2[48];
	insp_tbl_t *tbl;

	insp_fmt_duration(stuck_ms, dur, sizeof(dur));
	printf("store   %s (schema %d)\n", in->o->store, in->schema[0]);
	if (in->single)
		printf("tokens  the same file\n");
	else
		printf("tokens  %s (schema %d)\n", in->tpath, in->schema[1]);

	insp_fmt_age(insp_age(in, t->oldest), age, sizeof(age));
	printf("\nOutbox: %s pending (%" PRId64 " processed, %" PRId64
	       " tokened)",
	       insp_count_of(n1, sizeof(n1), t->processed + t->tokened, "row",
			     "rows"),
	       t->processed, t->tokened);
	if (st->outbox_n)
		printf(", oldest %s, %" PRId64 " older than %s", age, t->stuck,
		       dur);
	if (t->below)
		printf(", %" PRId64 " below the committed offset", t->below);
	printf("\n");
	if (st->outbox_n) {
		snprintf(head, sizeof(head), "OLDER THAN %s", dur);
		tbl = insp_tbl_new(
		    "Lrrrr", (const char *const[]){"GROUP", "PROCESSED",
						   "TOKENED", "OLDEST", head});
		for (size_t i = 0; i < st->outbox_n; i++) {
			const grp_counts_t *g = &st->outbox[i];
			insp_fmt_age(insp_age(in, g->oldest_ms), age,
				     sizeof(age));
			insp_tbl_cell(tbl, g->grp);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[0]);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[1]);
			insp_tbl_cell(tbl, age);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[2]);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	insp_fmt_age(insp_age(in, t->tokens_oldest), age, sizeof(age));
	printf("\nTokens: %s",
	       insp_count_of(n1, sizeof(n1), t->tokens, "row", "rows"));
	if (st->tokens_n)
		printf(", oldest %s", age);
	printf("\n");
	if (st->tokens_n) {
		tbl = insp_tbl_new(
		    "Lrr", (const char *const[]){"GROUP", "TOKENS", "OLDEST"});
		for (size_t i = 0; i < st->tokens_n; i++) {
			const grp_counts_t *g = &st->tokens[i];
			insp_fmt_age(insp_age(in, g->oldest_ms), age,
				     sizeof(age));
			insp_tbl_cell(tbl, g->grp);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[0]);
			insp_tbl_cell(tbl, age);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	printf(
	    "\nRegistrations: %s (%s), %" PRId64 " orphaned now",
	    insp_count_of(n1, sizeof(n1), t->attempts, "attempt", "attempts"),
	    insp_count_of(n2, sizeof(n2), t->reg_tokens, "token", "tokens"),
	    t->orphans);
	if (t->unchecked)
		printf(", %" PRId64 " not checked", t->unchecked);
	printf("\n");
	if (st->regs_n) {
		tbl = insp_tbl_new(
		    "Lrrrrrr", (const char *const[]){
				   "SENDER", "ATTEMPTS", "ORPHANS", "IN FLIGHT",
				   "WINNERS", "TOKENS", "OLDEST"});
		for (size_t i = 0; i < st->regs_n; i++) {
			const grp_counts_t *g = &st->regs[i];
			insp_fmt_age(insp_age(in, g->oldest_ms), age,
				     sizeof(age));
			insp_tbl_cell(tbl, g->grp);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[0]);
			if (g->checked) {
				insp_tbl_cellf(
				    tbl, "%" PRId64,
				    g->v[TBX_SWEEP_ORPHAN_OTHER_ATTEMPT] +
					g->v[TBX_SWEEP_ORPHAN_NO_ROW]);
				insp_tbl_cellf(tbl, "%" PRId64,
					       g->v[TBX_SWEEP_IN_FLIGHT]);
				insp_tbl_cellf(tbl, "%" PRId64,
					       g->v[TBX_SWEEP_WINNER]);
			} else {
				insp_tbl_cell(tbl, "?");
				insp_tbl_cell(tbl, "?");
				insp_tbl_cell(tbl, "?");
			}
			insp_tbl_cellf(tbl, "%" PRId64, g->n[1]);
			insp_tbl_cell(tbl, age);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	insp_fmt_duration(in->o->idle_ms, dur, sizeof(dur));
	printf("\nSubscriptions: %d (sequence at %" PRId64 "), %" PRId64
	       " unused for %s or more\n",
	       cJSON_GetArraySize(st->subs), st->seq, st->idle_subs, dur);
	if (cJSON_GetArraySize(st->subs)) {
		const cJSON *s;
		tbl = insp_tbl_new(
		    "LLrrr", (const char *const[]){"TOPIC", "GROUP", "SINCE",
						   "AGE", "UNUSED FOR"});
		cJSON_ArrayForEach(s, st->subs)
		{
			insp_fmt_age((int64_t)cJSON_GetObjectItem(s, "age_ms")
					 ->valuedouble,
				     age, sizeof(age));
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "topic")->valuestring);
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "group")->valuestring);
			insp_tbl_cellf(
			    tbl, "%" PRId64,
			    (int64_t)cJSON_GetObjectItem(s, "since_seq")
				->valuedouble);
			insp_tbl_cell(tbl, age);
			insp_fmt_age(
			    (int64_t)cJSON_GetObjectItem(s, "unused_for_ms")
				->valuedouble,
			    age, sizeof(age));
			insp_tbl_cellf(
			    tbl, "%s%s", age,
			    cJSON_IsTrue(cJSON_GetObjectItem(s, "idle"))
				? " (idle)"
				: "");
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	printf("\nIngress offsets: %s\n",
	       insp_count_of(n1, sizeof(n1), cJSON_GetArraySize(st->ingress),
			     "partition", "partitions"));
	if (cJSON_GetArraySize(st->ingress)) {
		const cJSON *s;
		tbl = insp_tbl_new(
		    "LLrr", (const char *const[]){"GROUP", "TOPIC", "PARTITION",
						  "NEXT OFFSET"});
		cJSON_ArrayForEach(s, st->ingress)
		{
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "group")->valuestring);
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "topic")->valuestring);
			insp_tbl_cellf(
			    tbl, "%" PRId64,
			    (int64_t)cJSON_GetObjectItem(s, "partition")
				->valuedouble);
			insp_tbl_cellf(
			    tbl, "%" PRId64,
			    (int64_t)cJSON_GetObjectItem(s, "next_offset")
				->valuedouble);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	printf("\nDead letters: %" PRId64 " recorded (%" PRId64
	       " not yet dispatched)\n",
	       t->dl, t->dl_pending);
	if (st->dls_n) {
		tbl = insp_tbl_new("Lrrr",
				   (const char *const[]){"GROUP", "RECORDED",
							 "PENDING", "LATEST"});
		for (size_t i = 0; i < st->dls_n; i++) {
			const grp_counts_t *g = &st->dls[i];
			insp_fmt_age(insp_age(in, g->oldest_ms), age,
				     sizeof(age));
			insp_tbl_cell(tbl, g->grp);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[0]);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[1]);
			insp_tbl_cell(tbl, age);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	if (st->edge) {
		printf("\nIngress edge: %" PRId64 " caller ids within "
		       "ingress.dedup.window.ms, %" PRId64
		       " synthetic duplicates refused\n",
		       st->edge, st->edge_refused);
	}

	printf("\nAlarms: %d\n", cJSON_GetArraySize(st->alarms));
	if (cJSON_GetArraySize(st->alarms)) {
		const cJSON *s;
		tbl = insp_tbl_new(
		    "LLrr",
		    (const char *const[]){"GROUP", "ALARM", "COUNT", "LAST"});
		cJSON_ArrayForEach(s, st->alarms)
		{
			insp_fmt_age(in->now_ms - (int64_t)cJSON_GetObjectItem(
						      s, "last_ms")
						      ->valuedouble,
				     age, sizeof(age));
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "group")->valuestring);
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "alarm")->valuestring);
			insp_tbl_cellf(tbl, "%" PRId64,
				       (int64_t)cJSON_GetObjectItem(s, "count")
					   ->valuedouble);
			insp_tbl_cell(tbl, age);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
		cJSON_ArrayForEach(s, st->alarms)
		{
			const cJSON *d = cJSON_GetObjectItem(s, "detail");
			if (!cJSON_IsString(d))
				continue;
			snprintf(note, sizeof(note), "%s %s: %s",
				 cJSON_GetObjectItem(s, "group")->valuestring,
				 cJSON_GetObjectItem(s, "alarm")->valuestring,
				 d->valuestring);
			insp_wrap("  last: ", note);
		}
	}

	if (st->undelivered) {
		char line[200];
		snprintf(line, sizeof(line),
			 "%" PRId64 " outgoing message(s) given up after "
			 "permanent delivery failures; see 'tokenbox inspect "
			 "undelivered list'.",
			 st->undelivered);
		printf("\n");
		insp_wrap("Undelivered: ", line);
	}
	if (t->tokened) {
		printf("\n");
		insp_wrap("note: ",
			  "a tokened row awaits dispatch, or was "
			  "dispatched and awaits its token consume and "
			  "delete (D, E); the stores do not tell which.");
	}
	if (t->below) {
		printf("\n");
		insp_wrap("note: ",
			  "a worker's recovery pass found rows below their "
			  "partition's committed offset (their records will "
			  "not be delivered again: retention, an offset "
			  "reset) and could not finish them yet; its log "
			  "says why.  `redispatch` finishes them too.");
	}
	for (size_t i = 0; i < st->regs_n; i++) {
		if (st->regs[i].checked)
			continue;
		snprintf(note, sizeof(note),
			 "registrations of %s were not checked: this store "
			 "has no rows of that group (name it with --group "
			 "if this is its store).",
			 st->regs[i].grp);
		printf("\n");
		insp_wrap("note: ", note);
	}
}

static int cmd_status(insp_t *in)
{
	int64_t stuck_ms =
	    in->o->older_ms >= 0 ? in->o->older_ms : INSPECT_DEFAULT_STUCK_MS;
	status_t st;
	totals_t t;
	int rc;

	memset(&st, 0, sizeof(st));
	if (status_gather(in, &st, in->now_ms - stuck_ms)) {
		status_free(&st);
		return INSPECT_EXIT_ERROR;
	}
	/* Shown only when in use: the edge is a publisher's table. */
	if (in->schema[1] >= 4 &&
	    (insp_count(in, in->tdb, "SELECT count(*) FROM tbx_edge", NULL,
			&st.edge) ||
	     insp_count(in, in->tdb, "SELECT total(refused) FROM tbx_edge",
			NULL, &st.edge_refused))) {
		status_free(&st);
		return INSPECT_EXIT_ERROR;
	}
	status_totals(&st, &t);
	rc = in->o->check &&
		     (t.orphans > 0 || t.stuck > 0 || t.below > 0 ||
		      st.alarm_cnt > 0 || st.idle_subs > 0 || st.undelivered)
		 ? INSPECT_EXIT_FINDING
		 : INSPECT_EXIT_OK;
	if (in->o->json)
		rc = insp_json_print(status_json(in, &st, &t, stuck_ms), rc);
	else
		status_print(in, &st, &t, stuck_ms);
	status_free(&st);
	return rc;
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
	if ((rc = now_ms(&in.now_ms)) || (rc = insp_open(&in)))
		goto out;
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
	if ((rc = read_begin(&in)))
		goto out;
	switch (o.cmd) {
	case C_STATUS:
		rc = cmd_status(&in);
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
	read_end(&in);
out:
	insp_close(&in);
	free(o.groups);
	tbx_cli_conf_free(&o.conf);
	return rc;
}
