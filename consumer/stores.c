/*
 * The stores of a configuration (see stores.h): the one place that turns
 * store.path / store.url, tokens.path / tokens.url, the schemas,
 * tokens.create, store.synchronous and store.busy.timeout.ms into stores
 * and open options.
 */
#include "consumer/stores.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "store/db.h"
#include "store/pg.h"
#include "store/pg_access.h"

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

/* The directory part of @p path into @p dir, its last name returned. */
static const char *split_path(const char *path, char *dir, size_t size)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		tbx__strlcpy(dir, ".", size);
	else if (slash == path)
		tbx__strlcpy(dir, "/", size);
	else
		snprintf(dir, size, "%.*s", (int)(slash - path), path);
	return slash ? slash + 1 : path;
}

/* 1 when the paths @p a and @p b, neither there yet, would name one file
 * once created: one name in one directory (reached by any path). */
static int same_when_created(const char *a, const char *b)
{
	char da[4096], db[4096], ra[PATH_MAX], rb[PATH_MAX];
	const char *na = split_path(a, da, sizeof(da));
	const char *nb = split_path(b, db, sizeof(db));

	return strcmp(na, nb) == 0 && realpath(da, ra) && realpath(db, rb) &&
	       strcmp(ra, rb) == 0;
}

/* 1 when the token store of @p cfg (SQLite, tokens.path) is the service
 * store's file: the same path, the same file, or the same file to be. */
static int joined_file(const tbx__cfg_t *cfg)
{
	return joined(cfg) ||
	       (access(cfg->tokens_path, F_OK) != 0 &&
		access(cfg->store_path, F_OK) != 0 &&
		same_when_created(cfg->tokens_path, cfg->store_path));
}

/* 1: the service store is on PostgreSQL. */
static int pg_store(const tbx__cfg_t *cfg)
{
	return *cfg->store_url != '\0';
}

/* With store.url: 1 when the token store is in the service store's
 * database on its connection (tokens.url empty, or the same text, and no
 * tokens.path). */
static int pg_joined(const tbx__cfg_t *cfg)
{
	return !*cfg->tokens_path &&
	       (!*cfg->tokens_url ||
		strcmp(cfg->tokens_url, cfg->store_url) == 0);
}

/* The service store's schema: store.schema, else the group id. */
static const char *store_schema(const tbx__cfg_t *cfg)
{
	return cfg->store_schema ? cfg->store_schema
				 : (cfg->group_id ? cfg->group_id : "");
}

/* Checks the service store's schema name (the group id by default). */
static int store_schema_check(const tbx__cfg_t *cfg, char *errstr,
			      size_t errstr_size)
{
	char why[256];
	int err;

	if (cfg->store_schema)
		return tbx__pg_ident_check("store.schema", cfg->store_schema,
					   errstr, errstr_size);
	if ((err = tbx__pg_ident_check("group.id", store_schema(cfg), why,
				       sizeof(why))))
		tbx__seterr(errstr, errstr_size, err,
			    "store.schema: not set, and the default, the "
			    "group id, cannot name a schema (%s): set "
			    "store.schema",
			    why);
	return err;
}

const char *tbx__stores_tokens_where(const tbx__cfg_t *cfg, char *buf,
				     size_t size)
{
	const char *url = NULL;
	char red[512];

	if (*cfg->tokens_url)
		url = cfg->tokens_url;
	else if (!*cfg->tokens_path && pg_store(cfg))
		url = cfg->store_url;
	if (url)
		snprintf(buf, size, "%s (schema %s)",
			 tbx__pg_redact(url, red, sizeof(red)),
			 cfg->tokens_schema);
	else
		tbx__strlcpy(buf, tbx__stores_tokens_path(cfg), size);
	return buf;
}

int tbx__stores_tokens_set(const tbx__cfg_t *cfg)
{
	return *tbx__stores_tokens_path(cfg) || *cfg->tokens_url ||
	       pg_store(cfg);
}

/* The message of a token store that does not exist at @p url. */
static void tokens_missing(const tbx__cfg_t *cfg, const char *url,
			   int publisher, char *errstr, size_t errstr_size)
{
	char red[512];

	tbx__seterr(errstr, errstr_size, TBX_ENOENT,
		    "%s: token store schema %s does not exist in %s; %s, or "
		    "fix %s",
		    *cfg->tokens_url ? "tokens.url" : "store.url",
		    cfg->tokens_schema, tbx__pg_redact(url, red, sizeof(red)),
		    publisher
			? "a publisher never creates one: create it "
			  "with 'tokenbox init' on that database (or "
			  "start a worker with tokens.create=true)"
			: "create it with 'tokenbox init' on that "
			  "database, or set tokens.create=true to let the "
			  "worker create it",
		    "tokens.schema");
}

/* The token store on PostgreSQL at @p url: on @p shared's connection
 * (joined) or one of its own. */
static int open_pg_tokens(const tbx__cfg_t *cfg, const char *url,
			  struct tbx__pg *shared, const tbx__db_opts_t *opts,
			  int publisher, tbx_tokens_t **tokens, char *errstr,
			  size_t errstr_size)
{
	int err;

	err = tbx_tokens_pg_open(url, cfg->tokens_schema, shared, opts, tokens,
				 errstr, errstr_size);
	if (err == TBX_ENOENT)
		tokens_missing(cfg, url, publisher, errstr, errstr_size);
	return err;
}

/* The message of a token store file apart (tokens.path) that does not
 * exist.  @returns TBX_ENOENT. */
static int sqlite_tokens_missing(const tbx__cfg_t *cfg, char *errstr,
				 size_t errstr_size)
{
	return tbx__seterr(errstr, errstr_size, TBX_ENOENT,
			   "tokens.path: token store %s does not exist; create "
			   "it with 'tokenbox init --tokens %s', or set "
			   "tokens.create=true to let the worker create it, or "
			   "fix the path",
			   cfg->tokens_path, cfg->tokens_path);
}

/* The token store of a worker as an SQLite file apart (tokens.path). */
static int open_sqlite_tokens(const tbx__cfg_t *cfg, tbx__db_opts_t *opts,
			      tbx_tokens_t **tokens, char *errstr,
			      size_t errstr_size)
{
	int err;

	/* A separate token store is the pipeline's, shared with its
	 * senders: one made here at a misspelt path would be empty and
	 * every record would look finished. */
	opts->create = cfg->tokens_create;
	err = tbx_tokens_sqlite_open(cfg->tokens_path, opts, NULL, tokens,
				     errstr, errstr_size);
	if (err == TBX_ENOENT)
		sqlite_tokens_missing(cfg, errstr, errstr_size);
	return err;
}

/* The role of a store on PostgreSQL has the grants of docs/operations.md
 * in its schema (store/pg_access.h); else an error naming every privilege
 * it lacks.  @p key names the setting of @p url. */
static int pg_access(tbx__pg_t *pg, const char *key, const char *url,
		     const char *schema, char *errstr, size_t errstr_size)
{
	char role[TBX_PG_IDENT_MAX + 1], missing[1024], red[512];
	int err;

	if ((err = tbx__pg_access_missing(pg, schema, role, sizeof(role),
					  missing, sizeof(missing))))
		return tbx__seterr(errstr, errstr_size, err,
				   "%s: %s: schema %s: cannot read the role's "
				   "privileges: %s",
				   key, tbx__pg_redact(url, red, sizeof(red)),
				   schema, tbx__pg_errmsg(pg));
	if (!*missing)
		return TBX_OK;
	return tbx__seterr(errstr, errstr_size, TBX_ESTORE,
			   "%s: %s: role %s lacks grants that tokenbox needs "
			   "in schema %s: %s (see docs/operations.md, 'Roles "
			   "and grants')",
			   key, tbx__pg_redact(url, red, sizeof(red)), role,
			   schema, missing);
}

/* pg_access() for the token store on PostgreSQL of @p cfg, on @p pg. */
static int pg_tokens_access(const tbx__cfg_t *cfg, tbx__pg_t *pg, char *errstr,
			    size_t errstr_size)
{
	return pg_access(pg, *cfg->tokens_url ? "tokens.url" : "store.url",
			 *cfg->tokens_url ? cfg->tokens_url : cfg->store_url,
			 cfg->tokens_schema, errstr, errstr_size);
}

/* A worker's stores on PostgreSQL: what their roles may do. */
static int worker_access(const tbx__cfg_t *cfg, tbx_outbox_t *store,
			 tbx_tokens_t *tokens, char *errstr, size_t errstr_size)
{
	int err;

	if (tbx_outbox_pg(store) &&
	    (err = pg_access(tbx_outbox_pg(store), "store.url", cfg->store_url,
			     store_schema(cfg), errstr, errstr_size)))
		return err;
	if (tbx_tokens_pg(tokens))
		return pg_tokens_access(cfg, tbx_tokens_pg(tokens), errstr,
					errstr_size);
	return TBX_OK;
}

/* A token store on PostgreSQL in the service store's database, on its
 * connection, that tokens.create=false will not create: 1 when it is not
 * there, read-only on a connection of its own, so that a start refused
 * for it creates no service schema either.  Other errors are the real
 * opening's to report. */
static int pg_joined_missing(const tbx__cfg_t *cfg, const tbx__db_opts_t *opts,
			     char *errstr, size_t errstr_size)
{
	tbx__db_opts_t ro = *opts;
	tbx_tokens_t *tokens = NULL;
	char why[512];
	int err;

	if (cfg->tokens_create)
		return 0;
	ro.readonly = 1;
	ro.create = 0;
	err = tbx_tokens_pg_open(cfg->store_url, cfg->tokens_schema, NULL, &ro,
				 &tokens, why, sizeof(why));
	tbx_tokens_close(tokens);
	if (err != TBX_ENOENT)
		return 0;
	tokens_missing(cfg, cfg->store_url, 0, errstr, errstr_size);
	return 1;
}

int tbx__stores_open_worker(const tbx__cfg_t *cfg, tbx_outbox_t **store,
			    tbx_tokens_t **tokens, char *errstr,
			    size_t errstr_size)
{
	tbx__db_opts_t opts, topts;
	int err;

	*store = NULL;
	*tokens = NULL;
	opts_of(cfg, &opts);
	/* The token store is the pipeline's, shared with its senders:
	 * created only when asked, joined or not.  One apart is opened
	 * first, so that a start it refuses (not there) leaves no service
	 * store behind. */
	topts = opts;
	topts.create = cfg->tokens_create;
	if (pg_store(cfg) && pg_joined(cfg))
		err = pg_joined_missing(cfg, &opts, errstr, errstr_size)
			  ? TBX_ENOENT
			  : TBX_OK;
	else if (*cfg->tokens_url)
		err = open_pg_tokens(cfg, cfg->tokens_url, NULL, &topts, 0,
				     tokens, errstr, errstr_size);
	else if (pg_store(cfg) || !joined_file(cfg))
		err = open_sqlite_tokens(cfg, &topts, tokens, errstr,
					 errstr_size);
	else
		err = TBX_OK;
	if (err) {
		*tokens = NULL;
		return err;
	}
	if (pg_store(cfg)) {
		if ((err = store_schema_check(cfg, errstr, errstr_size)) ||
		    (err =
			 tbx_outbox_pg_open(cfg->store_url, store_schema(cfg),
					    &opts, store, errstr, errstr_size)))
			goto out;
		if (pg_joined(cfg))
			/* One database, one connection: A–B and D–E each
			 * commit as one transaction (the joined path). */
			err = open_pg_tokens(cfg, cfg->store_url,
					     tbx_outbox_pg(*store), &topts, 0,
					     tokens, errstr, errstr_size);
	} else {
		if ((err = tbx_outbox_open(cfg->store_path, &opts, store,
					   errstr, errstr_size)))
			goto out;
		if (!*tokens)
			/* One file for both stores: the token operations
			 * share the service connection, and A–B and D–E
			 * each commit as one transaction (the joined path,
			 * see protocol.c). */
			err = tbx_tokens_sqlite_open(
			    cfg->store_path, &opts, tbx_outbox_db(*store),
			    tokens, errstr, errstr_size);
	}
out:
	/* A grant missing fails now, not at the first record that needs
	 * it, and at every retry after. */
	if (!err)
		err = worker_access(cfg, *store, *tokens, errstr, errstr_size);
	if (err) {
		tbx_tokens_close(*tokens);
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
	if (*cfg->tokens_url || (!*path && pg_store(cfg))) {
		err = open_pg_tokens(
		    cfg, *cfg->tokens_url ? cfg->tokens_url : cfg->store_url,
		    NULL, &opts, 1, tokens, errstr, errstr_size);
		if (err)
			*tokens = NULL;
		return err;
	}
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
	sqlite3 *db = NULL;
	struct stat st;
	int err;

	if (stat(path, &st) == 0) {
		err = tbx__db_open(path, opts, &db, errstr, errstr_size);
		sqlite3_close_v2(db);
		return err;
	}
	split_path(path, dir, sizeof(dir));
	if (access(dir, W_OK | X_OK) != 0)
		return tbx__seterr(errstr, errstr_size, TBX_EIO,
				   "%s: %s does not exist, and it cannot be "
				   "created in %s: %s",
				   key, path, dir, strerror(errno));
	return TBX_OK;
}

/* Checks the service store on PostgreSQL for --check-config: connects
 * and reads, read-only; schema not there yet is what a first start
 * creates. */
static int check_pg_store(const tbx__cfg_t *cfg, char *errstr,
			  size_t errstr_size)
{
	tbx_outbox_t *store = NULL;
	int err;

	if ((err = store_schema_check(cfg, errstr, errstr_size)))
		return err;
	if ((err = tbx__stores_open_service_ro(cfg, &store, errstr,
					       errstr_size)) ||
	    !store)
		return err;
	err = pg_access(tbx_outbox_pg(store), "store.url", cfg->store_url,
			store_schema(cfg), errstr, errstr_size);
	tbx_outbox_close(store);
	return err;
}

/* The same for a token store on PostgreSQL; a missing one is an error
 * unless the worker may create it. */
static int check_pg_tokens(const tbx__cfg_t *cfg, const char *url,
			   const tbx__db_opts_t *opts, char *errstr,
			   size_t errstr_size)
{
	tbx_tokens_t *tokens = NULL;
	char why[512], red[512];
	int err;

	err = tbx_tokens_pg_open(url, cfg->tokens_schema, NULL, opts, &tokens,
				 why, sizeof(why));
	if (!err)
		err = pg_tokens_access(cfg, tbx_tokens_pg(tokens), errstr,
				       errstr_size);
	else if (err == TBX_ENOENT && cfg->tokens_create)
		err = TBX_OK;
	else if (err == TBX_ENOENT)
		tokens_missing(cfg, url, 0, errstr, errstr_size);
	else
		tbx__seterr(errstr, errstr_size, err, "%s: %s: %s",
			    *cfg->tokens_url ? "tokens.url" : "store.url",
			    tbx__pg_redact(url, red, sizeof(red)), why);
	tbx_tokens_close(tokens);
	return err;
}

int tbx__stores_check(const tbx__cfg_t *cfg, char *errstr, size_t errstr_size)
{
	tbx__db_opts_t opts;
	int err;

	opts_of(cfg, &opts);
	opts.readonly = 1;
	opts.create = 0;
	if (pg_store(cfg)) {
		if ((err = check_pg_store(cfg, errstr, errstr_size)))
			return err;
		if (pg_joined(cfg))
			return check_pg_tokens(cfg, cfg->store_url, &opts,
					       errstr, errstr_size);
	} else if ((err = check_store("store.path", cfg->store_path, &opts,
				      errstr, errstr_size))) {
		return err;
	}
	if (*cfg->tokens_url)
		return check_pg_tokens(cfg, cfg->tokens_url, &opts, errstr,
				       errstr_size);
	if (!pg_store(cfg) && joined_file(cfg))
		return TBX_OK;
	/* A token store apart is the pipeline's: the worker does not
	 * create it unless told to (open_sqlite_tokens). */
	if (!cfg->tokens_create && access(cfg->tokens_path, F_OK) != 0 &&
	    errno == ENOENT)
		return sqlite_tokens_missing(cfg, errstr, errstr_size);
	return check_store("tokens.path", cfg->tokens_path, &opts, errstr,
			   errstr_size);
}

int tbx__stores_open_service_ro(const tbx__cfg_t *cfg, tbx_outbox_t **store,
				char *errstr, size_t errstr_size)
{
	tbx__db_opts_t opts;
	char why[512], red[512];
	struct stat st;
	int err;

	*store = NULL;
	opts_of(cfg, &opts);
	opts.readonly = 1;
	opts.create = 0;
	if (!pg_store(cfg)) {
		if (stat(cfg->store_path, &st) != 0 && errno == ENOENT)
			return TBX_OK;
		return tbx_outbox_sqlite_open(cfg->store_path, &opts, store,
					      errstr, errstr_size);
	}
	err = tbx_outbox_pg_open(cfg->store_url, store_schema(cfg), &opts,
				 store, why, sizeof(why));
	if (err == TBX_ENOENT) /* the worker creates it */
		return TBX_OK;
	if (err)
		tbx__seterr(errstr, errstr_size, err, "store.url: %s: %s",
			    tbx__pg_redact(cfg->store_url, red, sizeof(red)),
			    why);
	return err;
}

int tbx__stores_batch_ready(const tbx__cfg_t *cfg, tbx_outbox_t *store,
			    char *errstr, size_t errstr_size)
{
	const tbx_outbox_ops_t *o = store->ops;
	int pg = tbx_outbox_pg(store) != NULL, version = 0, err;
	int need = pg ? TBX_OUTBOX_OBATCH_PG : TBX_OUTBOX_OBATCH_SQLITE;
	char where[4400];

	if (pg)
		snprintf(where, sizeof(where), "store.url, schema %s",
			 store_schema(cfg));
	else
		snprintf(where, sizeof(where), "store.path %s",
			 cfg->store_path);
	if ((err = tbx_outbox_schema(store, &version)))
		return tbx__seterr(errstr, errstr_size, err,
				   "outbox.layout=batch: %s: cannot read the "
				   "service store's version",
				   where);
	if (version >= need && o->obatch_insert && o->obatch_set_attempt &&
	    o->obatch_delete && o->obatch_load && o->obatch_dispatch_failed &&
	    o->obatch_mark_stuck && o->cover_msg_find && o->gens_lock &&
	    o->gens_bump)
		return TBX_OK;
	return tbx__seterr(errstr, errstr_size, TBX_ESCHEMA,
			   "outbox.layout=batch: %s: the service store is at "
			   "%s %d, and batch rows need %d or later; open it "
			   "read-write once with this tokenbox to migrate it "
			   "(any worker start does), or use "
			   "outbox.layout=record",
			   where, pg ? "service version" : "schema", version,
			   need);
}
