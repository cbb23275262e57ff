/*
 * The PostgreSQL connection under both stores (store/pg.c): parameters and
 * binary results, the schema markers, transactions that failed, errors
 * and their codes, a connection lost and made again, the countdown fault
 * and redaction of what it logs.  The pg tier: $TBX_PG_URL.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "fixture.h"
#include "store/db.h"
#include "store/pg.h"
#include "tokenbox/tokenbox.h"

static tbx__pg_t *pg;
static char schema[64];

static void setup(void)
{
	char err[512];

	tbx__log_setup(TBX_LOG_ERR - 1, "test"); /* quiet: errors expected */
	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &pg, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tt_pg_schema(schema, sizeof(schema), "store");
}

static void teardown(void)
{
	char sql[128];

	tbx__fault_arm(0);
	tbx__fault_pg_conn_loss(0);
	if (pg) {
		snprintf(sql, sizeof(sql),
			 "DROP SCHEMA IF EXISTS \"%s\" CASCADE", schema);
		tbx__pg_exec(pg, sql);
		tbx__pg_unref(pg);
	}
}

TestSuite(pg_store, .init = setup, .fini = teardown);

static const char *const sql[] = {
    /* 0 */ "CREATE SCHEMA IF NOT EXISTS @S",
    /* 1 */ "CREATE TABLE @S.t (k text PRIMARY KEY, n bigint, b bytea)",
    /* 2 */ "INSERT INTO @S.t (k, n, b) VALUES ($1, $2, $3)",
    /* 3 */ "SELECT k, n, b FROM @S.t WHERE k = ANY($1::text[]) ORDER BY k",
    /* 4 */ "SELECT count(*) FROM @S.t",
    /* 5 */ "SELECT 1/0",
    /* 6 */ "SELECT -7::int2, -70000::int4, -5000000000::int8, true",
    /* 7 */ "SELECT sum(x)::int8 FROM unnest($1::int8[]) AS x",
    /* 8 */ "SELECT pg_backend_pid()",
};

static tbx__pg_stmts_t stmts;

static void make_table(void)
{
	cr_assert_eq(tbx__pg_stmts_init(&stmts, pg, "t", sql,
					(int)(sizeof(sql) / sizeof(sql[0])),
					schema, NULL),
		     TBX_OK);
	cr_assert_eq(tbx__pg_run(&stmts, 0, NULL, NULL), TBX_OK);
	cr_assert_eq(tbx__pg_run(&stmts, 1, NULL, NULL), TBX_OK);
}

static int insert(const char *k, int64_t n, const void *b, size_t len)
{
	tbx__pg_params_t p;
	int err;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, k);
	tbx__pgp_i64(&p, n);
	tbx__pgp_bytea(&p, b, len);
	err = tbx__pg_run(&stmts, 2, &p, NULL);
	tbx__pgp_free(&p);
	return err;
}

static int64_t count(void)
{
	int64_t n = -1;

	cr_assert_eq(tbx__pg_run_i64(&stmts, 4, NULL, &n, NULL), TBX_OK);
	return n;
}

/* The schema's name needs quoting, and the marker quotes it. */
Test(pg_store, schema_marker_quotes_the_name)
{
	snprintf(schema + strlen(schema), sizeof(schema) - strlen(schema),
		 "-Mixed.Case");
	make_table();
	cr_assert(strstr(stmts.sql[1], "\"t_store_") != NULL, "%s",
		  stmts.sql[1]);
	cr_assert_eq(count(), 0);
	tbx__pg_stmts_free(&stmts);
}

/* Values that need escaping in an array literal, bytea with NUL bytes,
 * an empty bytea and NULL come back as they went in. */
Test(pg_store, parameters_round_trip)
{
	const char *keys[] = {"a\"b", "c\\d", "e,f}", "{g h}", "nul"};
	static const unsigned char bin[] = {0, 1, 0, 255};
	tbx__pg_params_t p;
	PGresult *res;
	size_t len;

	make_table();
	for (int i = 0; i < 4; i++)
		cr_assert_eq(insert(keys[i], -i, bin, sizeof(bin)), TBX_OK);
	cr_assert_eq(insert("nul", 5, NULL, 0), TBX_OK);
	cr_assert_eq(insert("empty", 6, "", 0), TBX_OK);
	cr_assert_eq(count(), 6);

	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, keys, 5);
	cr_assert_eq(tbx__pg_run(&stmts, 3, &p, &res), TBX_OK);
	tbx__pgp_free(&p);
	cr_assert_eq(PQntuples(res), 5, "every quoted key matched");
	for (int r = 0; r < PQntuples(res); r++) {
		const char *k = tbx__pg_text(res, r, 0);
		const void *b = tbx__pg_bytea(res, r, 2, &len);
		if (!strcmp(k, "nul")) {
			cr_assert_null(b);
			cr_assert(tbx__pg_null(res, r, 2));
		} else {
			cr_assert_eq(len, sizeof(bin));
			cr_assert_eq(memcmp(b, bin, len), 0);
		}
	}
	PQclear(res);

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, "empty");
	tbx__pgp_text_array(&p, (const char *[]){"empty"}, 1);
	cr_assert_eq(p.n, 2);
	tbx__pgp_free(&p);
	tbx__pgp_init(&p);
	tbx__pgp_text_array(&p, (const char *[]){"empty"}, 1);
	cr_assert_eq(tbx__pg_run(&stmts, 3, &p, &res), TBX_OK);
	tbx__pgp_free(&p);
	cr_assert_eq(PQntuples(res), 1);
	cr_assert_not_null(tbx__pg_bytea(res, 0, 2, &len),
			   "an empty bytea is not NULL");
	cr_assert_eq(len, 0);
	PQclear(res);
	tbx__pg_stmts_free(&stmts);
}

/* Narrow integers are sign-extended; int8 arrays bind. */
Test(pg_store, integers_in_binary)
{
	const int64_t v[] = {1, -2, 3000000000LL};
	tbx__pg_params_t p;
	PGresult *res;
	int64_t sum;

	make_table();
	cr_assert_eq(tbx__pg_run(&stmts, 6, NULL, &res), TBX_OK);
	cr_assert_eq(tbx__pg_i64(res, 0, 0), -7);
	cr_assert_eq(tbx__pg_i64(res, 0, 1), -70000);
	cr_assert_eq(tbx__pg_i64(res, 0, 2), -5000000000LL);
	cr_assert_eq(tbx__pg_i64(res, 0, 3), 1);
	PQclear(res);
	tbx__pgp_init(&p);
	tbx__pgp_i64_array(&p, v, 3);
	cr_assert_eq(tbx__pg_run_i64(&stmts, 7, &p, &sum, NULL), TBX_OK);
	tbx__pgp_free(&p);
	cr_assert_eq(sum, 2999999999LL);
	tbx__pg_stmts_free(&stmts);
}

/* A statement that failed inside a transaction makes COMMIT roll back:
 * that is a failure, and nothing of the transaction is there. */
Test(pg_store, commit_of_a_failed_transaction_fails)
{
	make_table();
	cr_assert_eq(tbx__pg_begin(pg), TBX_OK);
	cr_assert_eq(insert("k", 1, NULL, 0), TBX_OK);
	cr_assert_eq(tbx__pg_run(&stmts, 5, NULL, NULL), TBX_ESTORE);
	cr_assert(strstr(tbx__pg_errmsg(pg), "division by zero"), "%s",
		  tbx__pg_errmsg(pg));
	cr_assert_eq(tbx__pg_commit(pg), TBX_ESTORE);
	cr_assert_eq(count(), 0);
	/* A second BEGIN works: the failed one is over. */
	cr_assert_eq(tbx__pg_begin(pg), TBX_OK);
	cr_assert_eq(insert("k", 1, NULL, 0), TBX_OK);
	cr_assert_eq(tbx__pg_commit(pg), TBX_OK);
	cr_assert_eq(count(), 1);
	tbx__pg_stmts_free(&stmts);
}

/* A unique violation is a store error; BEGIN inside a transaction is
 * refused. */
Test(pg_store, errors_map)
{
	make_table();
	cr_assert_eq(insert("k", 1, NULL, 0), TBX_OK);
	cr_assert_eq(insert("k", 1, NULL, 0), TBX_ESTORE);
	cr_assert_eq(tbx__pg_begin(pg), TBX_OK);
	cr_assert_eq(tbx__pg_begin(pg), TBX_ESTATE);
	tbx__pg_rollback(pg);
	tbx__pg_stmts_free(&stmts);
}

/* A lock held by another session past lock_timeout is BUSY, which the
 * worker retries. */
Test(pg_store, lock_timeout_is_busy)
{
	tbx__pg_t *other;
	char err[512];

	make_table();
	cr_assert_eq(insert("k", 1, NULL, 0), TBX_OK);
	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &other, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx__pg_begin(pg), TBX_OK);
	cr_assert_eq(tbx__pg_exec(pg, "SELECT pg_advisory_xact_lock(1, 2)"),
		     TBX_OK);
	cr_assert_eq(tbx__pg_begin(other), TBX_OK);
	cr_assert_eq(tbx__pg_exec(other, "SET LOCAL lock_timeout = 50"),
		     TBX_OK);
	cr_assert_eq(tbx__pg_exec(other, "SELECT pg_advisory_xact_lock(1, 2)"),
		     TBX_EBUSY);
	tbx__pg_rollback(other);
	tbx__pg_rollback(pg);
	/* Released with the transaction. */
	cr_assert_eq(tbx__pg_begin(other), TBX_OK);
	cr_assert_eq(tbx__pg_exec(other, "SET LOCAL lock_timeout = 50"),
		     TBX_OK);
	cr_assert_eq(tbx__pg_exec(other, "SELECT pg_advisory_xact_lock(1, 2)"),
		     TBX_OK);
	cr_assert_eq(tbx__pg_commit(other), TBX_OK);
	tbx__pg_unref(other);
	tbx__pg_stmts_free(&stmts);
}

/* The server ends the session (pg_terminate_backend): the next
 * statement fails, the next BEGIN connects again and prepares the
 * statements again. */
Test(pg_store, terminated_session_reconnects)
{
	tbx__pg_t *admin;
	char err[512], kill[96];
	int64_t pid = 0, pid2 = 0;

	make_table();
	cr_assert_eq(insert("k", 1, NULL, 0), TBX_OK);
	cr_assert_eq(tbx__pg_run_i64(&stmts, 8, NULL, &pid, NULL), TBX_OK);
	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &admin, err, sizeof(err)),
		     TBX_OK, "%s", err);
	snprintf(kill, sizeof(kill), "SELECT pg_terminate_backend(%lld)",
		 (long long)pid);
	cr_assert_eq(tbx__pg_exec(admin, kill), TBX_OK);
	tbx__pg_unref(admin);

	cr_assert_eq(insert("k2", 2, NULL, 0), TBX_ESTORE);
	cr_assert_eq(tbx__pg_begin(pg), TBX_OK, "BEGIN reconnects");
	cr_assert_eq(insert("k2", 2, NULL, 0), TBX_OK, "prepared again");
	cr_assert_eq(tbx__pg_commit(pg), TBX_OK);
	cr_assert_eq(tbx__pg_run_i64(&stmts, 8, NULL, &pid2, NULL), TBX_OK);
	cr_assert_neq(pid, pid2);
	cr_assert_eq(count(), 2);
	tbx__pg_stmts_free(&stmts);
}

/* The countdown fault fails each call in turn: a transaction of two
 * inserts either commits whole or leaves nothing, and the same holds when
 * the fault cuts the connection. */
static void fault_loop(int conn_loss)
{
	long n;

	make_table();
	tbx__fault_pg_conn_loss(conn_loss);
	for (n = 1; n < 50; n++) {
		int64_t before = count(), after;
		char k1[32], k2[32];
		int err, fired;

		snprintf(k1, sizeof(k1), "a%ld", n);
		snprintf(k2, sizeof(k2), "b%ld", n);
		tbx__fault_arm(n);
		err = tbx__pg_begin(pg);
		if (!err)
			err = insert(k1, n, NULL, 0);
		if (!err)
			err = insert(k2, n, NULL, 0);
		if (!err)
			err = tbx__pg_commit(pg);
		else
			tbx__pg_rollback(pg);
		fired = tbx__fault_fired();
		tbx__fault_arm(0);
		if (!fired) {
			cr_assert_eq(err, TBX_OK);
			cr_assert_eq(count(), before + 2);
			break;
		}
		cr_assert_neq(err, TBX_OK, "call %ld failed silently", n);
		/* A lost connection is made again by the next BEGIN. */
		cr_assert_eq(tbx__pg_begin(pg), TBX_OK);
		tbx__pg_rollback(pg);
		after = count();
		cr_assert_eq(after, before, "call %ld left %lld rows", n,
			     (long long)(after - before));
	}
	cr_assert_gt(n, 4, "the loop failed BEGIN, both inserts and COMMIT");
	cr_assert_lt(n, 50);
	tbx__pg_stmts_free(&stmts);
}

Test(pg_store, fault_loop_all_or_nothing)
{
	fault_loop(0);
}

Test(pg_store, fault_loop_connection_loss)
{
	fault_loop(1);
}

/* A malformed string is refused with a configuration-level error that
 * names it without its password; a server that refuses the login too. */
Test(pg_store, connect_errors_are_redacted)
{
	tbx__pg_t *x = NULL;
	char err[512];

	cr_assert_eq(tbx__pg_connect("postgresql://u:sekrit@/db?bogus=1", &x,
				     err, sizeof(err)),
		     TBX_EINVAL);
	cr_assert_null(x);
	cr_assert(strstr(err, "bogus"), "%s", err);
	cr_assert_null(strstr(err, "sekrit"), "%s", err);
	cr_assert_eq(tbx__pg_connect("host=/nonexistent/dir port=1 "
				     "password=sekrit dbname=x",
				     &x, err, sizeof(err)),
		     TBX_ESTORE);
	cr_assert_null(x);
	cr_assert(strstr(err, "password=***"), "%s", err);
	cr_assert_null(strstr(err, "sekrit"), "%s", err);
}

/* Schema names: what the configuration may give. */
Test(pg_store, schema_names)
{
	char err[256];

	cr_assert_eq(
	    tbx__pg_ident_check("k", "orders_svc-1.a", err, sizeof(err)),
	    TBX_OK);
	cr_assert_eq(tbx__pg_ident_check("k", "", err, sizeof(err)), TBX_ECONF);
	cr_assert_eq(tbx__pg_ident_check("k", "pg_catalog", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert_eq(tbx__pg_ident_check("k", "1abc", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert_eq(tbx__pg_ident_check("k", "a\"b", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert_eq(tbx__pg_ident_check("k", "a b", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert_eq(
	    tbx__pg_ident_check("k",
				"a23456789012345678901234567890123456789012345"
				"6789012345678901234",
				err, sizeof(err)),
	    TBX_ECONF);
	cr_assert(strstr(err, "k:"), "%s", err);
}

/* One text through tbx__pg_query(): its single text result. */
static int query_text(const char *q, const char *arg, char *out, size_t size)
{
	PGresult *res = NULL;
	int err = tbx__pg_query(pg, q, arg ? 1 : 0, &arg, &res);

	if (!err) {
		snprintf(out, size, "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	return err;
}

/* A handler's texts are prepared once per connection and kept among the
 * last 16: more of them than that take slots from the least recently
 * used (DEALLOCATE, PREPARE again), a text that fails to prepare takes
 * no slot, and a connection made again prepares them anew. */
Test(pg_store, query_texts_are_prepared_once_and_evicted)
{
	char q[64], out[32], want[32], kill[96];
	tbx__pg_t *admin;
	int64_t pid = 0;

	for (int round = 0; round < 3; round++)
		for (int k = 0; k < 20; k++) {
			snprintf(q, sizeof(q), "SELECT ($1::int + %d)::text",
				 k);
			cr_assert_eq(query_text(q, "100", out, sizeof(out)),
				     TBX_OK, "%s: %s", q, tbx__pg_errmsg(pg));
			snprintf(want, sizeof(want), "%d", 100 + k);
			cr_assert_str_eq(out, want);
		}
	/* On the server: at most 16 of them at once. */
	cr_assert_eq(query_text("SELECT count(*)::text FROM "
				"pg_prepared_statements WHERE name LIKE "
				"'tbx_q%'",
				NULL, out, sizeof(out)),
		     TBX_OK);
	cr_assert_leq(atoi(out), 16, "%s prepared", out);
	cr_assert_geq(atoi(out), 2);

	/* A syntax error is the statement's, twice alike, and takes no
	 * slot. */
	for (int i = 0; i < 2; i++) {
		cr_assert_neq(query_text("SELEC 1", NULL, out, sizeof(out)),
			      TBX_OK);
		cr_assert_str_eq(pg->state, "42601");
	}
	cr_assert_eq(query_text("SELECT 'still'::text", NULL, out, sizeof(out)),
		     TBX_OK, "%s", tbx__pg_errmsg(pg));
	cr_assert_str_eq(out, "still");

	/* A new connection has none of them: prepared again. */
	cr_assert_eq(
	    query_text("SELECT pg_backend_pid()::text", NULL, out, sizeof(out)),
	    TBX_OK);
	pid = atoll(out);
	cr_assert_eq(tbx__pg_connect(tt_pg_url(), &admin, kill, sizeof(kill)),
		     TBX_OK);
	snprintf(kill, sizeof(kill), "SELECT pg_terminate_backend(%lld)",
		 (long long)pid);
	cr_assert_eq(tbx__pg_exec(admin, kill), TBX_OK);
	tbx__pg_unref(admin);
	cr_assert_neq(
	    query_text("SELECT ($1::int + 1)::text", "1", out, sizeof(out)),
	    TBX_OK);
	cr_assert_eq(tbx__pg_begin(pg), TBX_OK, "BEGIN reconnects");
	cr_assert_eq(
	    query_text("SELECT ($1::int + 1)::text", "1", out, sizeof(out)),
	    TBX_OK, "%s", tbx__pg_errmsg(pg));
	cr_assert_str_eq(out, "2");
	tbx__pg_rollback(pg);
}
