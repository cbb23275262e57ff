/*
 * The privileges a role has in a tokenbox schema (store/pg_access.h).
 */
#include "store/pg_access.h"

#include <stdio.h>
#include <string.h>

#include "base/str.h"
#include "tokenbox/tokenbox.h"

/* The grants of docs/operations.md on tokenbox's tables and sequences
 * (tbx_schema_info, the store's version and identity, is only read; a
 * sequence needs UPDATE for the setval() that starts a range of the token
 * store's numbers, tokens/pg.c) that the role lacks; the schema's own
 * USAGE first.  The statement is made
 * for one call (see below). */
static const char *const access_sql =
    "SELECT current_user::text, '' AS obj, 'USAGE' AS priv"
    " WHERE NOT has_schema_privilege($1, 'USAGE')"
    " UNION ALL "
    "SELECT current_user::text, c.relname::text, p.priv"
    " FROM pg_catalog.pg_class c"
    " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
    " CROSS JOIN LATERAL unnest(CASE WHEN c.relkind = 'S'"
    "  THEN ARRAY['USAGE', 'SELECT', 'UPDATE']"
    "  WHEN c.relname = 'tbx_schema_info' THEN ARRAY['SELECT']"
    "  ELSE ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE'] END) AS p(priv)"
    " WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'S')"
    " AND c.relname LIKE 'tbx\\_%'"
    " AND NOT CASE WHEN c.relkind = 'S'"
    "  THEN has_sequence_privilege(c.oid, p.priv)"
    "  ELSE has_table_privilege(c.oid, p.priv) END"
    " ORDER BY 2, 3";

int tbx__pg_access_missing(tbx__pg_t *pg, const char *schema, char *role,
			   size_t role_size, char *missing, size_t missing_size)
{
	tbx__pg_stmts_t one;
	tbx__pg_params_t p;
	PGresult *res = NULL;
	size_t n = 0;
	int err;

	if (role_size)
		role[0] = '\0';
	if (missing_size)
		missing[0] = '\0';
	if (!pg || !schema)
		return TBX_EINVAL;
	if ((err = tbx__pg_stmts_init(&one, pg, "access", &access_sql, 1, NULL,
				      NULL)))
		return err;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, schema);
	err = tbx__pg_run(&one, 0, &p, &res);
	tbx__pgp_free(&p);
	/* Asked once per store opened: the statement goes again, so that a
	 * second store on the same connection (joined) can prepare it. */
	if (one.gen[0] == pg->gen)
		tbx__pg_exec(pg, "DEALLOCATE tbx_access0");
	tbx__pg_stmts_free(&one);
	if (err)
		return err;
	for (int r = 0; r < PQntuples(res); r++) {
		const char *obj = tbx__pg_text(res, r, 1);

		if (r == 0)
			tbx__strlcpy(role, tbx__pg_text(res, r, 0), role_size);
		if (n + 1 >= missing_size)
			break;
		if (*obj)
			n += (size_t)snprintf(missing + n, missing_size - n,
					      "%s%s on %s.%s", r ? ", " : "",
					      tbx__pg_text(res, r, 2), schema,
					      obj);
		else
			n += (size_t)snprintf(
			    missing + n, missing_size - n, "%s%s on schema %s",
			    r ? ", " : "", tbx__pg_text(res, r, 2), schema);
	}
	PQclear(res);
	return TBX_OK;
}
