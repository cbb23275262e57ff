/*
 * A store named on a command line (tools/cli_store.h).
 */
#include "tools/cli_store.h"

#include <stdio.h>
#include <string.h>

#include "base/file.h"
#include "base/str.h"
#include "store/pg.h"
#include "tools/cli.h"

int tbx_cli_store_set(const char *cmd, tbx_cli_store_t *st, const char *opt,
		      const char *where, const char *schema_opt,
		      const char *schema, const char *default_schema)
{
	char errstr[256];

	memset(st, 0, sizeof(*st));
	if (!where || !*where)
		return tbx_cli_usage(cmd, "%s: empty path", opt);
	st->where = where;
	st->pg = tbx__pg_is_url(where);
	if (!st->pg) {
		if (schema)
			return tbx_cli_usage(cmd,
					     "%s applies to a PostgreSQL URL "
					     "(postgresql://...) only, not to "
					     "the file %s",
					     schema_opt, where);
		tbx__strlcpy(st->name, where, sizeof(st->name));
		return 0;
	}
	tbx__pg_redact(where, st->url, sizeof(st->url));
	if (!schema)
		schema = default_schema;
	if (!schema)
		return tbx_cli_usage(cmd,
				     "%s %s: %s NAME is needed: the schema of "
				     "the store's tables",
				     opt, st->url, schema_opt);
	if (tbx__pg_ident_check(schema_opt, schema, errstr, sizeof(errstr)))
		return tbx_cli_usage(cmd, "%s", errstr);
	st->schema = schema;
	snprintf(st->name, sizeof(st->name), "%s (schema %s)", st->url, schema);
	return 0;
}

int tbx_cli_store_joined(const tbx_cli_store_t *a, const tbx_cli_store_t *b)
{
	if (!a || !b)
		return 1;
	if (a->pg != b->pg)
		return 0;
	if (a->pg)
		return strcmp(a->where, b->where) == 0;
	return tbx__same_file(a->where, b->where);
}

int tbx_cli_open_outbox(const tbx_cli_store_t *st, const tbx__db_opts_t *opts,
			tbx_outbox_t **out, char *errstr, size_t errstr_size)
{
	if (st->pg)
		return tbx_outbox_pg_open(st->where, st->schema, opts, out,
					  errstr, errstr_size);
	return tbx_outbox_sqlite_open(st->where, opts, out, errstr,
				      errstr_size);
}

int tbx_cli_open_tokens(const tbx_cli_store_t *st, tbx_outbox_t *joined,
			const tbx__db_opts_t *opts, tbx_tokens_t **out,
			char *errstr, size_t errstr_size)
{
	if (st->pg)
		return tbx_tokens_pg_open(st->where, st->schema,
					  joined ? tbx_outbox_pg(joined) : NULL,
					  opts, out, errstr, errstr_size);
	return tbx_tokens_sqlite_open(st->where, opts,
				      joined ? tbx_outbox_db(joined) : NULL,
				      out, errstr, errstr_size);
}

int tbx_cli_store_conf_tokens(const tbx_cli_store_t *st, tbx_conf_t *conf,
			      char *errstr, size_t errstr_size)
{
	int err;

	if (!st->pg)
		return tbx_conf_set(conf, "tokens.path", st->where, errstr,
				    errstr_size);
	if ((err = tbx_conf_set(conf, "tokens.url", st->where, errstr,
				errstr_size)))
		return err;
	return tbx_conf_set(conf, "tokens.schema", st->schema, errstr,
			    errstr_size);
}
