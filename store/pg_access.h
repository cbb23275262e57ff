/*
 * What a database role may do in a tokenbox schema on PostgreSQL, asked
 * of the server when a worker starts: a role that lacks a grant of
 * docs/operations.md ("Roles and grants") would otherwise start, and then
 * fail at the first record whose phase needs it (DELETE for D, a sequence
 * for B's mint), again at every retry -- the worker refuses to start
 * instead, naming every privilege it lacks.
 *
 * @locality the thread that uses the connection.
 */
#ifndef TBX_STORE_PG_ACCESS_H
#define TBX_STORE_PG_ACCESS_H

#include <stddef.h>

#include "store/pg.h"

/**
 * Lists what the connection's role lacks in @p schema of tokenbox's own
 * objects (names starting "tbx_"), as docs/operations.md grants them:
 * SELECT, INSERT, UPDATE and DELETE on every table but tbx_schema_info
 * (SELECT), USAGE and SELECT on every sequence, and USAGE on the schema
 * itself.  One statement, outside any transaction.
 * @p missing receives "DELETE on SCHEMA.tbx_tokens, USAGE on
 * SCHEMA.tbx_seq" (ordered; cut to @p size), "" when the role lacks
 * nothing; @p role the role's name.
 * @returns TBX_OK, or the store's error (logged) when the server could
 * not be asked.
 */
int tbx__pg_access_missing(tbx__pg_t *pg, const char *schema, char *role,
			   size_t role_size, char *missing,
			   size_t missing_size);

#endif
