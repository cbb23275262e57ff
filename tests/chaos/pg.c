/*
 * The stores on PostgreSQL (tbx_chaos --store-url): each service's store
 * a schema of its own, <prefix>_svc_a … _c, and the token store one more,
 * <prefix>_tokens, on one server.  The harness makes the service schemas
 * with their effects tables before the workers start, reads the counts
 * of the validator through libpq (outside tokenbox's store layer, as the
 * SQLite readers open the files themselves), and drops the schemas after
 * a run that passed.
 *
 * Every value is bound; the schemas' names, which cannot be, are quoted
 * with PQescapeIdentifier() where they are part of a statement, and bound
 * as the value of search_path where a count runs.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"

/* The validator's connection, kept for the process, and the schema its
 * search_path names ("" until one is set). */
static PGconn *count_conn;
static char count_schema[64];

static void no_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

/* A connection to @p url without its notices (DROP SCHEMA IF EXISTS of
 * nothing says so); NULL with @p err set. */
static PGconn *connect_to(const char *url, char *err, size_t err_size)
{
	PGconn *conn = PQconnectdb(url);

	if (!conn) {
		snprintf(err, err_size, "out of memory");
		return NULL;
	}
	if (PQstatus(conn) != CONNECTION_OK) {
		snprintf(err, err_size, "%s", PQerrorMessage(conn));
		err[strcspn(err, "\n")] = '\0';
		PQfinish(conn);
		return NULL;
	}
	PQsetNoticeProcessor(conn, no_notice, NULL);
	return conn;
}

/* Runs @p sql with @p n text parameters; @returns 0 if it succeeded, else
 * -1 with @p err set (and the result's SQLSTATE in @p state, if given). */
static int run_sql(PGconn *conn, const char *sql, const char *const *params,
		   int n, PGresult **out, char *state, char *err,
		   size_t err_size)
{
	PGresult *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);
	const char *code;

	if (state)
		state[0] = '\0';
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		if (out)
			*out = res;
		else
			PQclear(res);
		return 0;
	}
	if (state && (code = PQresultErrorField(res, PG_DIAG_SQLSTATE)))
		snprintf(state, 6, "%s", code);
	snprintf(err, err_size, "%s", PQerrorMessage(conn));
	err[strcspn(err, "\n")] = '\0';
	PQclear(res);
	return -1;
}

long ch_pg_count(const char *url, const char *schema, const char *sql,
		 const char *arg)
{
	const char *params[1] = {arg};
	char err[512], state[6], *quoted;
	PGresult *res = NULL;
	long n;

	if (count_conn && PQstatus(count_conn) != CONNECTION_OK) {
		PQfinish(count_conn);
		count_conn = NULL;
	}
	if (!count_conn) {
		static const char *const ro[] = {
		    "default_transaction_read_only", "on"};
		if (!(count_conn = connect_to(url, err, sizeof(err)))) {
			fprintf(stderr, "chaos: the stores' server: %s\n", err);
			return -1;
		}
		/* Read-only, as the SQLite readers open the files. */
		if (run_sql(count_conn, "SELECT set_config($1, $2, false)", ro,
			    2, NULL, NULL, err, sizeof(err))) {
			fprintf(stderr, "chaos: the stores' server: %s\n", err);
			ch_pg_close();
			return -1;
		}
		count_schema[0] = '\0';
	}
	if (strcmp(count_schema, schema) != 0) {
		const char *p[2] = {"search_path", NULL};
		if (!(quoted = PQescapeIdentifier(count_conn, schema,
						  strlen(schema))))
			return -1;
		p[1] = quoted;
		if (run_sql(count_conn, "SELECT set_config($1, $2, false)", p,
			    2, NULL, NULL, err, sizeof(err))) {
			fprintf(stderr, "chaos: %s: %s\n", schema, err);
			PQfreemem(quoted);
			count_schema[0] = '\0';
			return -1;
		}
		PQfreemem(quoted);
		snprintf(count_schema, sizeof(count_schema), "%s", schema);
	}
	if (run_sql(count_conn, sql, params, arg ? 1 : 0, &res, state, err,
		    sizeof(err))) {
		/* The table appears with the schema (the service schema's
		 * first worker, the token store's subscriptions) or with
		 * the first record a store handles: none yet counts 0. */
		if (strcmp(state, "42P01") == 0)
			return 0;
		fprintf(stderr, "chaos: %s: %s\n", schema, err);
		return -1;
	}
	n = PQntuples(res) == 1 && PQnfields(res) == 1 &&
		    !PQgetisnull(res, 0, 0)
		? strtol(PQgetvalue(res, 0, 0), NULL, 10)
		: -1;
	PQclear(res);
	return n;
}

void ch_pg_close(void)
{
	PQfinish(count_conn);
	count_conn = NULL;
	count_schema[0] = '\0';
}

/* Runs "<head> <schema quoted><tail>" on @p conn; 0 or -1 with @p err. */
static int schema_sql(PGconn *conn, const char *head, const char *schema,
		      const char *tail, char *err, size_t err_size)
{
	char *quoted = PQescapeIdentifier(conn, schema, strlen(schema));
	char sql[512];
	int rc;

	if (!quoted) {
		snprintf(err, err_size, "%s", PQerrorMessage(conn));
		return -1;
	}
	snprintf(sql, sizeof(sql), "%s %s%s", head, quoted, tail);
	PQfreemem(quoted);
	rc = run_sql(conn, sql, NULL, 0, NULL, NULL, err, err_size);
	return rc;
}

/* The run's schemas: the three service stores', then the token store's. */
static void schema_names(const ch_stores_t *s, char names[CH_GROUPS + 1][64])
{
	for (int g = 0; g < CH_GROUPS; g++)
		ch_store_name(names[g], sizeof(names[g]), s, g);
	ch_tokens_name(names[CH_GROUPS], sizeof(names[CH_GROUPS]), s);
}

static int drop_all(PGconn *conn, const ch_stores_t *s, char *err,
		    size_t err_size)
{
	char names[CH_GROUPS + 1][64];

	schema_names(s, names);
	for (int i = 0; i <= CH_GROUPS; i++)
		if (schema_sql(conn, "DROP SCHEMA IF EXISTS", names[i],
			       " CASCADE", err, err_size))
			return -1;
	return 0;
}

int ch_pg_setup(const ch_stores_t *s, char *err, size_t err_size)
{
	char names[CH_GROUPS + 1][64], tail[160];
	PGconn *conn = connect_to(s->url, err, err_size);
	int rc = 0;

	if (!conn)
		return -1;
	schema_names(s, names);
	rc = drop_all(conn, s, err, err_size);
	for (int g = 0; g < CH_GROUPS && !rc; g++) {
		snprintf(tail, sizeof(tail), ".%s%s", ch_effects_tables[g],
			 CH_EFFECTS_COLUMNS);
		rc = schema_sql(conn, "CREATE SCHEMA", names[g], "", err,
				err_size) ||
		     schema_sql(conn, "CREATE TABLE", names[g], tail, err,
				err_size);
	}
	PQfinish(conn);
	return rc ? -1 : 0;
}

int ch_pg_drop(const ch_stores_t *s, char *err, size_t err_size)
{
	PGconn *conn = connect_to(s->url, err, err_size);
	int rc;

	if (!conn)
		return -1;
	rc = drop_all(conn, s, err, err_size);
	PQfinish(conn);
	return rc;
}
