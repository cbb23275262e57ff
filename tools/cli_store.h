/*
 * A store named on a command line: an SQLite file's path, or a
 * PostgreSQL URL (postgresql://… or postgres://…, store/pg.h) with the
 * schema that holds the store's tables.  `inspect`, `init` and `send`
 * take either wherever they take a path.
 *
 * A URL is shown only redacted (tbx__pg_redact): no message, table or
 * JSON document of a command carries its password.  Credentials are
 * libpq's business: the URL, PGPASSWORD, ~/.pgpass, a service file
 * (PGSERVICEFILE); docs/postgresql.md.
 *
 * Locality: the main thread.
 */
#ifndef TBX_TOOLS_CLI_STORE_H
#define TBX_TOOLS_CLI_STORE_H

#include <stddef.h>

#include "outbox/outbox.h"
#include "tokens/tokens.h"

/** The token store's schema when none is given (tokens.schema's
 *  default). */
#define TBX_CLI_TOKENS_SCHEMA "tokenbox_tokens"

typedef struct tbx_cli_store {
	const char *where;  /**< the path or URL as given (borrowed) */
	const char *schema; /**< PostgreSQL: the schema; NULL for a path */
	int pg;		    /**< @c where is a PostgreSQL URL */
	char name[360];	    /**< for messages: the path, or "URL (schema
				 S)" with the URL redacted */
	char url[300];	    /**< PostgreSQL: the URL redacted; "" else */
} tbx_cli_store_t;

/**
 * Fills @p st from the value @p where of option @p opt and the schema
 * @p schema of option @p schema_opt (NULL: not given; then
 * @p default_schema, which may be NULL for "none: required").
 * @returns 0, or TBX_EXIT_USAGE after reporting: an empty path, a schema
 * for a path, a URL without a schema, a schema name PostgreSQL or
 * tokenbox refuses.
 */
int tbx_cli_store_set(const char *cmd, tbx_cli_store_t *st, const char *opt,
		      const char *where, const char *schema_opt,
		      const char *schema, const char *default_schema);

/** 1 when @p a and @p b are one database: the same SQLite file (its
 *  tables of both stores), or the same URL (one connection for both
 *  schemas).  Either may be NULL (then 1: the other's). */
int tbx_cli_store_joined(const tbx_cli_store_t *a, const tbx_cli_store_t *b);

/** Opens the service store @p st (outbox/outbox.h) with @p opts; *out
 *  the caller's.  @returns TBX_OK or the error, @p errstr saying why
 *  (redacted). */
int tbx_cli_open_outbox(const tbx_cli_store_t *st, const tbx__db_opts_t *opts,
			tbx_outbox_t **out, char *errstr, size_t errstr_size);

/** Opens the token store @p st (tokens/tokens.h) with @p opts, on the
 *  connection of @p joined (a service store of the same database,
 *  tbx_cli_store_joined()) when it is not NULL.  @returns as
 *  tbx_cli_open_outbox(). */
int tbx_cli_open_tokens(const tbx_cli_store_t *st, tbx_outbox_t *joined,
			const tbx__db_opts_t *opts, tbx_tokens_t **out,
			char *errstr, size_t errstr_size);

/**
 * Sets the configuration keys that name the token store @p st in
 * @p conf: tokens.path, or tokens.url and tokens.schema.
 * @returns TBX_OK or the error of tbx_conf_set(), @p errstr saying why.
 */
int tbx_cli_store_conf_tokens(const tbx_cli_store_t *st, tbx_conf_t *conf,
			      char *errstr, size_t errstr_size);

#endif
