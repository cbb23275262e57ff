/*
 * `tokenbox inspect status` on PostgreSQL shows what the token store
 * holds, asked of the store rather than read off its version number:
 * PostgreSQL's tables are version 1, where SQLite's numbers would say the
 * ingress edge (schema 4) is not there yet, and an undelivered message
 * resent without the token store's id (schema 6).
 */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_child.h"
#include "fixture.h"

static PGconn *raw; /* the test's own connection */

static void fx_setup(void)
{
	raw = PQconnectdb(tt_pg_url());
	cr_assert_eq(PQstatus(raw), CONNECTION_OK, "%s", PQerrorMessage(raw));
	PQclear(PQexec(raw, "SET client_min_messages = warning"));
}

static void fx_teardown(void)
{
	PQfinish(raw);
	raw = NULL;
}

TestSuite(pg_inspect_has, .init = fx_setup, .fini = fx_teardown);

static void fx_exec(const char *sql)
{
	PGresult *r = PQexec(raw, sql);

	cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK ||
		      PQresultStatus(r) == PGRES_TUPLES_OK,
		  "%s: %s", sql, PQresultErrorMessage(r));
	PQclear(r);
}

static void fx_run_ok(const char *const args[])
{
	cc_result_t res = cc_run(args);

	cr_assert(cc_exited(res.status, 0), "%s: status %d: %s%s", args[0],
		  res.status, res.out, res.err);
	cc_result_free(&res);
}

Test(pg_inspect_has, status_shows_the_edge_of_a_postgresql_token_store)
{
	char s[64], t[64], sql[512];
	const char *url = tt_pg_url();
	cc_result_t res;

	tt_pg_schema(s, sizeof(s), "ie");
	tt_pg_schema(t, sizeof(t), "ie_t");
	fx_run_ok((const char *const[]){"init", "--tokens", url,
					"--tokens-schema", t, NULL});
	fx_run_ok(
	    (const char *const[]){"init", "--store", url, "--schema", s, NULL});
	/* One caller id within the window, two synthetic duplicates
	 * refused against it. */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO \"%s\".tbx_edge(topic, caller_id, fingerprint, "
		 "msg_id, token, mint_seq, delivered, refused, created_ms) "
		 "VALUES ('in', 'order-1', '\\x00', 'm', 't', 1, 1, 2, 0)",
		 t);
	fx_exec(sql);

	const char *args[] = {"inspect", "-s",	   url, "--schema",
			      s,	 "-S",	   url, "--tokens-schema",
			      t,	 "status", NULL};
	res = cc_run(args);
	cr_assert(cc_exited(res.status, 0), "status %d: %s%s", res.status,
		  res.out, res.err);
	cr_assert(strstr(res.out, "Ingress edge: 1 caller ids within "
				  "ingress.dedup.window.ms, 2 synthetic "
				  "duplicates refused"),
		  "%s", res.out);
	cc_result_free(&res);

	snprintf(sql, sizeof(sql), "DROP SCHEMA \"%s\" CASCADE", s);
	fx_exec(sql);
	snprintf(sql, sizeof(sql), "DROP SCHEMA \"%s\" CASCADE", t);
	fx_exec(sql);
}

/* The text of the string column of a one-row query. */
static char *fx_text(const char *sql)
{
	PGresult *r = PQexec(raw, sql);
	char *v;

	cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1,
		  "%s: %s", sql, PQresultErrorMessage(r));
	v = strdup(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v;
}

static char *header(const tt_record_t *rec, const char *name)
{
	const void *v;
	size_t len;
	char *out;

	if (rd_kafka_header_get_last(rec->headers, name, &v, &len))
		return NULL;
	out = calloc(1, len + 1);
	memcpy(out, v, len);
	return out;
}

Test(pg_inspect_has, resend_carries_the_id_of_a_postgresql_token_store)
{
	char s[64], t[64], sql[512], *store_id, *got;
	const char *url = tt_pg_url();
	tt_cluster_t *c = tt_cluster_new(1);
	tt_record_t *recs;
	size_t cnt;
	cc_result_t res;

	tt_cluster_topic(c, "out", 1);
	tt_pg_schema(s, sizeof(s), "iu");
	tt_pg_schema(t, sizeof(t), "iu_t");
	fx_run_ok((const char *const[]){"init", "--tokens", url,
					"--tokens-schema", t, NULL});
	fx_run_ok(
	    (const char *const[]){"init", "--store", url, "--schema", s, NULL});
	snprintf(sql, sizeof(sql),
		 "INSERT INTO \"%s\".tbx_undelivered(grp, msg_id, out_id, "
		 "topic, type, payload, token, mint_seq, error, attempts, "
		 "created_ms) VALUES ('g', 'm', 'o', 'out', 'Reply', "
		 "'\\x6869', 'tok', 5, 'too large', 2, 0)",
		 s);
	fx_exec(sql);
	snprintf(sql, sizeof(sql),
		 "SELECT store_id FROM \"%s\".tbx_schema_info WHERE id = 1", t);
	store_id = fx_text(sql);

	const char *args[] = {
	    "inspect", "-s",	      url,	"--schema",
	    s,	       "-S",	      url,	"--tokens-schema",
	    t,	       "undelivered", "resend", "1",
	    "-b",      c->bootstraps, NULL};
	res = cc_run(args);
	cr_assert(cc_exited(res.status, 0), "status %d: %s%s", res.status,
		  res.out, res.err);
	cc_result_free(&res);
	cnt = tt_read_topic(c->bootstraps, "out", &recs);
	cr_assert_eq(cnt, 1);
	cr_assert_str_eq(recs[0].token, "tok");
	got = header(&recs[0], "tbx-store");
	cr_assert_not_null(got, "resent without tbx-store");
	cr_assert_str_eq(got, store_id);
	free(got);
	free(store_id);
	tt_records_free(recs, cnt);
	tt_cluster_destroy(c);

	snprintf(sql, sizeof(sql), "DROP SCHEMA \"%s\" CASCADE", s);
	fx_exec(sql);
	snprintf(sql, sizeof(sql), "DROP SCHEMA \"%s\" CASCADE", t);
	fx_exec(sql);
}
