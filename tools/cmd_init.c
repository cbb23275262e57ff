/*
 * `tokenbox init`: creates a token store and/or a service store (or
 * migrates one that exists), an SQLite file or tables in a PostgreSQL
 * schema, and prints each one's store id.
 *
 * Workers do not create a separate token store unless tokens.create=true,
 * and publishers (`tokenbox send`) never do: a store made at a misspelt
 * path would be empty, and every record would look finished.  This is the
 * deliberate way to make one.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/ids.h"
#include "base/log.h"
#include "tokens/tokens.h"
#include "tools/cli.h"
#include "tools/cli_store.h"

#define CMD "init"

enum { OPT_SCHEMA = 256, OPT_TSCHEMA };

static void usage(void)
{
	printf(
	    "Usage: tokenbox init [--tokens PATH|URL] [--store PATH|URL]\n"
	    "                     [--schema NAME] [--tokens-schema NAME]\n"
	    "\n"
	    "Creates the token store PATH (--tokens) and/or the service "
	    "store PATH\n"
	    "(--store), or migrates them to this tokenbox's schema if they "
	    "exist, and\n"
	    "prints one line per file: its path, whether it was created, "
	    "and its store\n"
	    "id, e.g.\n"
	    "  /var/lib/pipeline/tokens.db: created, store id "
	    "6f1c2a7e-0c55-4f8e-9a51-3b2d9c0e7a14\n"
	    "\n"
	    "The store id is a UUID made when the file is created and kept "
	    "for its\n"
	    "life; every record minted with the file's tokens carries it in "
	    "the\n"
	    "tbx-store header, and a worker whose token store has another id "
	    "refuses\n"
	    "such a record rather than take it for a duplicate.  A service "
	    "store used\n"
	    "as its own token store (single-file mode) is a token store "
	    "too.\n"
	    "\n"
	    "A PostgreSQL URL (postgresql://...) in place of a path creates "
	    "the store's\n"
	    "tables in a schema of that database (created if missing): "
	    "--tokens-schema\n"
	    "for the token store (default tokenbox_tokens), --schema for the "
	    "service\n"
	    "store (required: the worker's store.schema, by default its group "
	    "id).  The\n"
	    "line names the URL without its password, e.g.\n"
	    "  postgresql://pipeline:***@db1/pipeline, schema "
	    "tokenbox_tokens: created,\n"
	    "  store id 6f1c2a7e-0c55-4f8e-9a51-3b2d9c0e7a14\n"
	    "A service schema is not a token store: its line says "
	    "\"service store\".\n"
	    "\n"
	    "A worker creates its service store, but a separate token store "
	    "only with\n"
	    "tokens.create=true; 'tokenbox send' never creates one.\n"
	    "\n"
	    "Options:\n"
	    "  -S, --tokens PATH|URL  the token store to create\n"
	    "  -s, --store PATH|URL   the service store to create\n"
	    "      --schema NAME      a PostgreSQL --store: its schema\n"
	    "      --tokens-schema NAME  a PostgreSQL --tokens: its schema "
	    "(default\n"
	    "                         tokenbox_tokens)\n"
	    "  -h, --help             show this help\n"
	    "\n"
	    "Exit status: 0 done; 1 a store could not be created or opened; "
	    "2 a bad\n"
	    "command line.\n");
}

/* Whether the store @p st exists (its tables, for PostgreSQL): 1, 0, or
 * -1 after reporting. */
static int exists(const tbx_cli_store_t *st, int tokens)
{
	tbx__db_opts_t opts;
	tbx_outbox_t *store = NULL;
	tbx_tokens_t *tok = NULL;
	char errstr[512] = "";
	int err;

	if (!st->pg)
		return access(st->where, F_OK) == 0;
	tbx__db_opts_init(&opts);
	opts.create = 0;
	opts.readonly = 1;
	err = tokens ? tbx_cli_open_tokens(st, NULL, &opts, &tok, errstr,
					   sizeof(errstr))
		     : tbx_cli_open_outbox(st, &opts, &store, errstr,
					   sizeof(errstr));
	tbx_tokens_close(tok);
	tbx_outbox_close(store);
	if (err == TBX_ENOENT)
		return 0;
	/* Any other failure (an older schema, say) is the opening's to
	 * report, read-write. */
	return 1;
}

/* Creates or opens the token store @p st and prints its line.
 * @returns an exit status. */
static int init_tokens(const tbx_cli_store_t *st)
{
	tbx__db_opts_t opts;
	tbx_tokens_t *tokens = NULL;
	char errstr[512] = "", id[TBX_UUID_LEN + 1];
	int existed = exists(st, 1), err;

	/* Opening creates the file with the whole schema (both stores'
	 * tables) and its id; a schema with the token tables. */
	tbx__db_opts_init(&opts);
	if ((err = tbx_cli_open_tokens(st, NULL, &opts, &tokens, errstr,
				       sizeof(errstr))))
		return tbx_cli_fail(CMD, "%s",
				    *errstr ? errstr : tbx_strerror(err));
	err = tbx_tokens_store_id(tokens, id);
	tbx_tokens_close(tokens);
	if (err)
		return tbx_cli_fail(CMD, "%s: cannot read the store id: %s",
				    st->name,
				    *errstr ? errstr : tbx_strerror(err));
	if (st->pg)
		printf("%s, schema %s: %s, store id %s\n", st->url, st->schema,
		       existed ? "already there" : "created", id);
	else
		printf("%s: %s, store id %s\n", st->where,
		       existed ? "already there" : "created", id);
	return TBX_EXIT_OK;
}

/* Creates or opens the service store @p st and prints its line.
 * @returns an exit status. */
static int init_store(const tbx_cli_store_t *st)
{
	tbx__db_opts_t opts;
	tbx_outbox_t *store = NULL;
	char errstr[512] = "";
	int existed, err;

	/* A file is both stores: its line is the token store's. */
	if (!st->pg)
		return init_tokens(st);
	existed = exists(st, 0);
	tbx__db_opts_init(&opts);
	if ((err = tbx_cli_open_outbox(st, &opts, &store, errstr,
				       sizeof(errstr))))
		return tbx_cli_fail(CMD, "%s",
				    *errstr ? errstr : tbx_strerror(err));
	tbx_outbox_close(store);
	printf("%s, schema %s: %s, service store\n", st->url, st->schema,
	       existed ? "already there" : "created");
	return TBX_EXIT_OK;
}

int tbx_cmd_init(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"tokens", required_argument, NULL, 'S'},
	    {"store", required_argument, NULL, 's'},
	    {"schema", required_argument, NULL, OPT_SCHEMA},
	    {"tokens-schema", required_argument, NULL, OPT_TSCHEMA},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *tokens = NULL, *store = NULL, *schema = NULL,
		   *tschema = NULL;
	tbx_cli_store_t t, s;
	int c, rc;

	tbx__log_setup(TBX_LOG_ERR - 1, CMD);
	while ((c = tbx_cli_getopt(CMD, argc, argv, "S:s:h", longopts)) != -1) {
		switch (c) {
		case 'S':
		case 's':
			if (!*optarg)
				return tbx_cli_usage(CMD, "--%s: empty path",
						     c == 'S' ? "tokens"
							      : "store");
			*(c == 'S' ? &tokens : &store) = optarg;
			break;
		case OPT_SCHEMA:
			schema = optarg;
			break;
		case OPT_TSCHEMA:
			tschema = optarg;
			break;
		case 'h':
			usage();
			return TBX_EXIT_OK;
		default:
			return TBX_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return tbx_cli_usage(CMD, "unexpected argument '%s'",
				     argv[optind]);
	if (!tokens && !store)
		return tbx_cli_usage(CMD, "--tokens or --store is needed (see "
					  "'tokenbox help init')");
	if (schema && !store)
		return tbx_cli_usage(CMD, "--schema is the --store's schema: "
					  "--store is needed with it");
	if (tschema && !tokens)
		return tbx_cli_usage(CMD, "--tokens-schema is the --tokens' "
					  "schema: --tokens is needed with it");
	if (tokens && (rc = tbx_cli_store_set(CMD, &t, "--tokens", tokens,
					      "--tokens-schema", tschema,
					      TBX_CLI_TOKENS_SCHEMA)))
		return rc;
	if (store && (rc = tbx_cli_store_set(CMD, &s, "--store", store,
					     "--schema", schema, NULL)))
		return rc;
	if (tokens && store && t.pg && s.pg && tbx_cli_store_joined(&t, &s) &&
	    strcmp(t.schema, s.schema) == 0)
		return tbx_cli_usage(CMD,
				     "--schema and --tokens-schema are both "
				     "'%s': the service store and the token "
				     "store need a schema each",
				     s.schema);
	if (tokens && (rc = init_tokens(&t)))
		return rc;
	if (store && !(tokens && !s.pg && tbx_cli_store_joined(&t, &s)) &&
	    (rc = init_store(&s)))
		return rc;
	return TBX_EXIT_OK;
}
