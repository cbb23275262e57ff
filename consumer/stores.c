/*
 * The stores of a configuration (see stores.h): the one place that turns
 * store.path, tokens.path, tokens.create, store.synchronous and
 * store.busy.timeout.ms into files and open options.
 */
#include "consumer/stores.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "store/db.h"

const char *tbx__stores_tokens_path(const tbx__cfg_t *cfg)
{
	if (*cfg->tokens_path)
		return cfg->tokens_path;
	return cfg->store_path ? cfg->store_path : "";
}

/* The options every store of @p cfg is opened with. */
static void opts_of(const tbx__cfg_t *cfg, tbx__db_opts_t *opts)
{
	tbx__db_opts_init(opts);
	opts->synchronous_full = cfg->store_synchronous == TBX_SYNC_FULL;
	opts->busy_timeout_ms = (int)cfg->store_busy_timeout_ms;
}

/* 1: the token store is the service store's file, reached through its
 * connection.  Another name of the same file counts only once that file
 * exists. */
static int joined(const tbx__cfg_t *cfg)
{
	return !*cfg->tokens_path ||
	       tbx__same_file(cfg->tokens_path, cfg->store_path);
}

int tbx__stores_open_worker(const tbx__cfg_t *cfg, tbx_outbox_t **store,
			    tbx_tokens_t **tokens, char *errstr,
			    size_t errstr_size)
{
	tbx__db_opts_t opts;
	int err;

	*store = NULL;
	*tokens = NULL;
	opts_of(cfg, &opts);
	if ((err = tbx_outbox_open(cfg->store_path, &opts, store, errstr,
				   errstr_size)))
		return err;
	/* One file for both stores: the token operations share the
	 * service connection, and A–B and D–E each commit as one
	 * transaction (the joined path, see protocol.c). */
	if (joined(cfg)) {
		err = tbx_tokens_sqlite_open(cfg->store_path, &opts,
					     tbx_outbox_db(*store), tokens,
					     errstr, errstr_size);
	} else {
		/* A separate token store is the pipeline's, shared with its
		 * senders: one made here at a misspelt path would be empty
		 * and every record would look finished. */
		opts.create = cfg->tokens_create;
		err = tbx_tokens_sqlite_open(cfg->tokens_path, &opts, NULL,
					     tokens, errstr, errstr_size);
		if (err == TBX_ENOENT)
			tbx__seterr(errstr, errstr_size, TBX_ENOENT,
				    "tokens.path: token store %s does not "
				    "exist; create it with 'tokenbox init "
				    "--tokens %s', or set tokens.create=true "
				    "to let the worker create it, or fix the "
				    "path",
				    cfg->tokens_path, cfg->tokens_path);
	}
	if (err) {
		*tokens = NULL;
		tbx_outbox_close(*store);
		*store = NULL;
	}
	return err;
}

int tbx__stores_open_publisher(const tbx__cfg_t *cfg, tbx_tokens_t **tokens,
			       char *errstr, size_t errstr_size)
{
	const char *path = tbx__stores_tokens_path(cfg);
	tbx__db_opts_t opts;
	int err;

	*tokens = NULL;
	opts_of(cfg, &opts);
	/* Never created here: a publisher that made an empty store at a
	 * misspelt path would mint tokens no worker ever sees. */
	opts.create = 0;
	if ((err = tbx_tokens_sqlite_open(path, &opts, NULL, tokens, errstr,
					  errstr_size))) {
		*tokens = NULL;
		if (access(path, F_OK) != 0)
			tbx__seterr(errstr, errstr_size, TBX_ENOENT,
				    "token store %s does not exist; a "
				    "publisher never creates one: create it "
				    "with 'tokenbox init --tokens %s' (or "
				    "start a worker with tokens.create=true), "
				    "or fix the path",
				    path, path);
	}
	return err;
}

/* Checks one store file for --check-config: an existing file is opened
 * read-only (a tokenbox file of a schema this tokenbox knows); a missing
 * one needs a directory the worker can create it in. */
static int check_store(const char *key, const char *path,
		       const tbx__db_opts_t *opts, char *errstr,
		       size_t errstr_size)
{
	char dir[4096];
	const char *slash;
	sqlite3 *db = NULL;
	struct stat st;
	int err;

	if (stat(path, &st) == 0) {
		err = tbx__db_open(path, opts, &db, errstr, errstr_size);
		sqlite3_close_v2(db);
		return err;
	}
	slash = strrchr(path, '/');
	if (!slash)
		tbx__strlcpy(dir, ".", sizeof(dir));
	else if (slash == path)
		tbx__strlcpy(dir, "/", sizeof(dir));
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if (access(dir, W_OK | X_OK) != 0)
		return tbx__seterr(errstr, errstr_size, TBX_EIO,
				   "%s: %s does not exist, and it cannot be "
				   "created in %s: %s",
				   key, path, dir, strerror(errno));
	return TBX_OK;
}

int tbx__stores_check(const tbx__cfg_t *cfg, char *errstr, size_t errstr_size)
{
	tbx__db_opts_t opts;
	int err;

	opts_of(cfg, &opts);
	opts.readonly = 1;
	if ((err = check_store("store.path", cfg->store_path, &opts, errstr,
			       errstr_size)))
		return err;
	if (!joined(cfg) && (err = check_store("tokens.path", cfg->tokens_path,
					       &opts, errstr, errstr_size)))
		return err;
	return TBX_OK;
}
