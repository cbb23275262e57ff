/*
 * `tokenbox init`: creates a token store and/or a service store (or
 * migrates one that exists) and prints each file's store id.
 *
 * Workers do not create a separate token store unless tokens.create=true,
 * and publishers (`tokenbox send`) never do: a store made at a misspelt
 * path would be empty, and every record would look finished.  This is the
 * deliberate way to make one.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "base/ids.h"
#include "base/log.h"
#include "tokens/tokens.h"
#include "tools/cli.h"

#define CMD "init"

static void usage(void)
{
	printf(
	    "Usage: tokenbox init [--tokens PATH] [--store PATH]\n"
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
	    "A worker creates its service store, but a separate token store "
	    "only with\n"
	    "tokens.create=true; 'tokenbox send' never creates one.\n"
	    "\n"
	    "Options:\n"
	    "  -t, --tokens PATH  the token store to create\n"
	    "  -s, --store PATH   the service store to create\n"
	    "  -h, --help         show this help\n"
	    "\n"
	    "Exit status: 0 done; 1 a file could not be created or opened; "
	    "2 a bad\n"
	    "command line.\n");
}

/* Creates or opens @p path and prints its line.  @returns an exit status. */
static int init_one(const char *path)
{
	tbx__db_opts_t opts;
	tbx_tokens_t *tokens = NULL;
	char errstr[512] = "", id[TBX_UUID_LEN + 1];
	int existed = access(path, F_OK) == 0, err;

	/* Opening creates the file with the whole schema (both stores'
	 * tables) and its id. */
	tbx__db_opts_init(&opts);
	if ((err = tbx_tokens_sqlite_open(path, &opts, NULL, &tokens, errstr,
					  sizeof(errstr))))
		return tbx_cli_fail(CMD, "%s",
				    *errstr ? errstr : tbx_strerror(err));
	err = tbx_tokens_store_id(tokens, id);
	tbx_tokens_close(tokens);
	if (err)
		return tbx_cli_fail(CMD, "%s: cannot read the store id: %s",
				    path, *errstr ? errstr : tbx_strerror(err));
	printf("%s: %s, store id %s\n", path,
	       existed ? "already there" : "created", id);
	return TBX_EXIT_OK;
}

int tbx_cmd_init(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"tokens", required_argument, NULL, 't'},
	    {"store", required_argument, NULL, 's'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *tokens = NULL, *store = NULL;
	int c, rc;

	tbx__log_setup(TBX_LOG_ERR - 1, CMD);
	while ((c = tbx_cli_getopt(CMD, argc, argv, "t:s:h", longopts)) != -1) {
		switch (c) {
		case 't':
		case 's':
			if (!*optarg)
				return tbx_cli_usage(CMD, "--%s: empty path",
						     c == 't' ? "tokens"
							      : "store");
			*(c == 't' ? &tokens : &store) = optarg;
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
	if (tokens && (rc = init_one(tokens)))
		return rc;
	if (store && !(tokens && tbx__same_file(tokens, store)) &&
	    (rc = init_one(store)))
		return rc;
	return TBX_EXIT_OK;
}
