/*
 * The `tokenbox` commands on PostgreSQL URLs, run as child processes
 * against the pg tier's server ($TBX_PG_URL): `init` creates the stores
 * in schemas and prints their ids, `inspect` reads them read-only,
 * `send` mints in a token schema, `demo --store-url` runs its pipeline in
 * fresh schemas; no output or error carries a URL's password (a
 * service's role with only the grants of docs/operations.md:
 * tests/test_pg_roles.c).  (sslmode:
 * tests/test_cli_secrets.c, since this server listens on a Unix socket,
 * where libpq never uses TLS.)
 */
#include <cjson/cJSON.h>
#include <libpq-fe.h>
#include <stdarg.h>

#include "cli_child.h"
#include "fixture.h"

#define PW "s3cretPW"

/* ---- helpers -------------------------------------------------------- */

/** The server's URL with @p user (NULL: its own) and, when @p pw, the
 *  password PW in the authority (malloc'ed). */
static char *url_as(const char *user, int pw)
{
	const char *base = tt_pg_url(), *auth = strstr(base, "://"), *at;
	size_t len;
	char *out;

	cr_assert(auth, "not a URL: %s", base);
	auth += 3;
	at = strchr(auth, '@');
	cr_assert(at && at < auth + strcspn(auth, "/?"),
		  "the URL names no user: %s", base);
	len = strlen(base) + (user ? strlen(user) : 0) + sizeof(PW) + 2;
	out = malloc(len);
	cr_assert(out);
	snprintf(out, len, "%.*s%.*s%s%s", (int)(auth - base), base,
		 (int)(user ? strlen(user) : (size_t)(at - auth)),
		 user ? user : auth, pw ? ":" PW : "", at);
	return out;
}

/** @p base with "&KEY=VALUE" appended to its query (malloc'ed). */
static char *url_with(const char *base, const char *kv)
{
	size_t len = strlen(base) + strlen(kv) + 2;
	char *out = malloc(len);

	cr_assert(out);
	snprintf(out, len, "%s%c%s", base, strchr(base, '?') ? '&' : '?', kv);
	return out;
}

/** Runs @p fmt on the server as @p user (NULL: the URL's); asserts it
 *  worked.  @returns the first column of the first row as an integer, or
 *  -1 without one. */
static long long sql_as(const char *user, const char *fmt, ...)
{
	char *url = url_as(user, 0), stmt[2048];
	PGconn *c = PQconnectdb(url);
	PGresult *r;
	long long v = -1;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(stmt, sizeof(stmt), fmt, ap);
	va_end(ap);
	cr_assert(PQstatus(c) == CONNECTION_OK, "connect as %s: %s",
		  user ? user : "the test's role", PQerrorMessage(c));
	r = PQexec(c, stmt);
	cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK ||
		      PQresultStatus(r) == PGRES_TUPLES_OK,
		  "%s: %s", stmt, PQerrorMessage(c));
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0)
		v = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	PQfinish(c);
	free(url);
	return v;
}

static long long schema_exists(const char *schema)
{
	return sql_as(NULL,
		      "SELECT count(*) FROM pg_namespace WHERE nspname = '%s'",
		      schema);
}

/** Asserts that nothing the command printed carries the password. */
static void no_password(const cc_result_t *res, const char *what)
{
	cr_expect_null(strstr(res->out, PW), "%s: stdout has the password: %s",
		       what, res->out);
	cr_expect_null(strstr(res->err, PW), "%s: stderr has the password: %s",
		       what, res->err);
}

static cc_result_t run(const char *const args[])
{
	return cc_run_with(args, NULL, 0, 120000);
}

/** `tokenbox init --tokens URL --tokens-schema T`; @returns the store id
 *  (malloc'ed). */
static char *init_tokens(const char *url, const char *schema, int created)
{
	const char *args[] = {"init", "--tokens", url, "--tokens-schema",
			      schema, NULL};
	cc_result_t res = run(args);
	const char *id;
	char want[200];

	cr_assert(cc_exited(res.status, 0), "init: %d: %s", res.status,
		  res.err);
	no_password(&res, "init --tokens");
	snprintf(want, sizeof(want), ", schema %s: %s, store id ", schema,
		 created ? "created" : "already there");
	id = strstr(res.out, want);
	cr_assert(id, "init printed: %s", res.out);
	id += strlen(want);
	cr_assert(strncmp(res.out, "postgresql://", 13) == 0, "%s", res.out);
	char *out = strndup(id, strcspn(id, "\n"));
	cc_result_free(&res);
	return out;
}

static void init_store(const char *url, const char *schema)
{
	const char *args[] = {"init", "--store", url, "--schema", schema, NULL};
	cc_result_t res = run(args);

	cr_assert(cc_exited(res.status, 0), "init --store: %d: %s", res.status,
		  res.err);
	no_password(&res, "init --store");
	cr_expect(strstr(res.out, ": created, service store"), "%s", res.out);
	cc_result_free(&res);
}

/* ---- init ------------------------------------------------------------ */

Test(pg_cli, init_creates_the_stores_in_schemas_and_prints_the_id)
{
	char *url = url_as(NULL, 1), t[64], s[64], *id, *again;

	tt_pg_schema(t, sizeof(t), "clit");
	tt_pg_schema(s, sizeof(s), "clis");
	id = init_tokens(url, t, 1);
	cr_expect_eq(strlen(id), 36, "not a UUID: %s", id);
	cr_expect_eq(schema_exists(t), 1);
	/* Again: the same store, the same id. */
	again = init_tokens(url, t, 0);
	cr_expect_str_eq(again, id);
	init_store(url, s);
	cr_expect_eq(schema_exists(s), 1);
	free(again);
	free(id);
	free(url);
}

Test(pg_cli, init_refuses_a_schema_for_a_file_and_one_schema_for_both)
{
	const char *a[] = {"init", "--tokens", "/tmp/x.db", "--tokens-schema",
			   "x",	   NULL};
	char *url = url_as(NULL, 0);
	const char *b[] = {"init", "--tokens", url,    "--store",
			   url,	   "--schema", "same", "--tokens-schema",
			   "same", NULL};
	const char *c[] = {"init", "--store", url, NULL};
	cc_result_t res = run(a);

	cr_expect(cc_exited(res.status, 2), "%d", res.status);
	cr_expect(strstr(res.err, "PostgreSQL URL"), "%s", res.err);
	cc_result_free(&res);
	res = run(b);
	cr_expect(cc_exited(res.status, 2), "%d", res.status);
	cr_expect(strstr(res.err, "a schema each"), "%s", res.err);
	cc_result_free(&res);
	res = run(c);
	cr_expect(cc_exited(res.status, 2), "%d", res.status);
	cr_expect(strstr(res.err, "--schema NAME is needed"), "%s", res.err);
	cc_result_free(&res);
	free(url);
}

/* ---- inspect --------------------------------------------------------- */

Test(pg_cli, inspect_reads_the_schemas_and_never_shows_the_password)
{
	char *url = url_as(NULL, 1), *qurl, t[64], s[64];
	cJSON *doc, *o;

	tt_pg_schema(t, sizeof(t), "clit");
	tt_pg_schema(s, sizeof(s), "clis");
	free(init_tokens(url, t, 1));
	init_store(url, s);
	{
		const char *args[] = {"inspect",  "-s",	    url,
				      "--schema", s,	    "--tokens-schema",
				      t,	  "status", NULL};
		cc_result_t res = run(args);
		cr_assert(cc_exited(res.status, 0), "%d: %s", res.status,
			  res.err);
		no_password(&res, "inspect status");
		cr_expect(strstr(res.out, "postgresql://"), "%s", res.out);
		cr_expect(strstr(res.out, ":***@"), "%s", res.out);
		cr_expect(strstr(res.out, s), "%s", res.out);
		cr_expect(strstr(res.out, "the same database, schema "), "%s",
			  res.out);
		cc_result_free(&res);
	}
	/* The password as a query parameter; --json; --check. */
	qurl = url_with(tt_pg_url(), "password=" PW);
	{
		const char *args[] = {
		    "inspect", "-s",	 qurl,	   "--schema",
		    s,	       "-S",	 qurl,	   "--tokens-schema",
		    t,	       "--json", "status", "--check",
		    NULL};
		cc_result_t res = run(args);
		cr_assert(cc_exited(res.status, 0), "%d: %s", res.status,
			  res.err);
		no_password(&res, "inspect status --json --check");
		doc = cJSON_Parse(res.out);
		cr_assert(doc, "%s", res.out);
		o = cJSON_GetObjectItem(doc, "store");
		cr_expect_str_eq(
		    cJSON_GetStringValue(cJSON_GetObjectItem(o, "schema")), s);
		cr_expect(
		    strstr(cJSON_GetStringValue(cJSON_GetObjectItem(o, "path")),
			   "password=***"),
		    "%s", res.out);
		o = cJSON_GetObjectItem(doc, "token_store");
		cr_expect_str_eq(
		    cJSON_GetStringValue(cJSON_GetObjectItem(o, "schema")), t);
		cJSON_Delete(doc);
		cc_result_free(&res);
	}
	free(qurl);
	free(url);
}

/* status --since on a service schema: the dead letters recorded since
 * the time are counted, and with --check they are a finding. */
Test(pg_cli, status_since_flags_dead_letters_recorded_since_a_time)
{
	char *url = url_as(NULL, 1), t[64], s[64], store[80];
	cJSON *doc, *o;

	tt_pg_schema(t, sizeof(t), "clit");
	tt_pg_schema(s, sizeof(s), "clis");
	free(init_tokens(url, t, 1));
	init_store(url, s);
	snprintf(store, sizeof(store), "pg:%s", s);
	/* 2023-11-14T22:13:20Z is "now": 1 day, 45 and 10 minutes ago. */
	cr_assert_eq(
	    tt_count(store,
		     "WITH i AS (INSERT INTO tbx_dead_letters (grp, msg_id, "
		     "in_topic, in_partition, in_offset, dlq_topic, error, "
		     "attempts, created_ms) VALUES "
		     "('g', 'm1', 'in', 0, 1, 'in.dlq', 'old', 0, "
		     "1699913600000), "
		     "('g', 'm2', 'in', 0, 2, 'in.dlq', 'new', 1, "
		     "1699997300000), "
		     "('g', 'm3', 'in', 0, 3, 'in.dlq', 'newer', 0, "
		     "1699999400000) RETURNING 1) SELECT COUNT(*) FROM i"),
	    3);
	setenv("TBX_INSPECT_NOW_MS", "1700000000000", 1);
	{
		const char *args[] = {
		    "inspect",	"-s",	   url,
		    "--schema", s,	   "--tokens-schema",
		    t,		"--json",  "status",
		    "--check",	"--since", "2023-11-14T22:00:00Z",
		    NULL};
		cc_result_t res = run(args);
		cr_expect(cc_exited(res.status, 1), "%d: %s", res.status,
			  res.err);
		doc = cJSON_Parse(res.out);
		cr_assert(doc, "%s", res.out);
		o = cJSON_GetObjectItem(doc, "dead_letters");
		cr_expect_eq(cJSON_GetNumberValue(
				 cJSON_GetObjectItem(o, "recorded_since")),
			     1, "%s", res.out);
		cJSON_Delete(doc);
		cc_result_free(&res);
	}
	{
		const char *args[] = {"inspect",  "-s",	    url,
				      "--schema", s,	    "--tokens-schema",
				      t,	  "status", "--check",
				      "--since",  "1h",	    NULL};
		cc_result_t res = run(args);
		cr_expect(cc_exited(res.status, 1), "%d: %s", res.status,
			  res.err);
		cr_expect(strstr(res.out, "NEW: 2 recorded since "
					  "2023-11-14T21:13:20.000Z"),
			  "%s", res.out);
		cc_result_free(&res);
	}
	{
		const char *args[] = {"inspect",  "-s",	    url,
				      "--schema", s,	    "--tokens-schema",
				      t,	  "status", "--check",
				      "--since",  "5m",	    NULL};
		cc_result_t res = run(args);
		cr_expect(cc_exited(res.status, 0), "%d: %s", res.status,
			  res.err);
		cc_result_free(&res);
	}
	unsetenv("TBX_INSPECT_NOW_MS");
	free(url);
}

Test(pg_cli, inspect_opens_read_only_and_creates_nothing)
{
	char *url = url_as(NULL, 1), s[64];
	const char *args[] = {"inspect",	 "-s", url,	 "--schema", s,
			      "--tokens-schema", s,    "status", NULL};
	cc_result_t res;

	tt_pg_schema(s, sizeof(s), "none");
	args[6] = "t_none_never_made";
	res = run(args);
	cr_expect(cc_exited(res.status, 2), "%d: %s", res.status, res.out);
	cr_expect_eq(cc_lines(res.err), 1, "%s", res.err);
	cr_expect(strstr(res.err, ":***@"), "the error names no URL: %s",
		  res.err);
	no_password(&res, "inspect of a missing schema");
	cr_expect_eq(schema_exists(s), 0, "inspect created %s", s);
	cr_expect_eq(schema_exists("t_none_never_made"), 0);
	cc_result_free(&res);
	free(url);
}

Test(pg_cli, errors_name_the_url_without_its_password)
{
	/* A server that is not there, a role that does not exist, and a
	 * malformed URL whose libpq complaint quotes the password. */
	char *base = url_as(NULL, 1), *noport = url_with(base, "port=1");
	char *norole = url_as("no_such_role_tbx", 1);
	const char *urls[] = {noport, norole,
			      "postgresql://u:" PW "%zz@/db?host=/nonexistent"};

	for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
		const char *args[] = {"inspect", "-s",	   urls[i], "--schema",
				      "x",	 "status", NULL};
		const char *init[] = {"init", "--tokens", urls[i], NULL};
		cc_result_t res = run(args);

		cr_expect(cc_exited(res.status, 2), "%s: %d", urls[i],
			  res.status);
		cr_expect(*res.err, "no error for %s", urls[i]);
		no_password(&res, urls[i]);
		cc_result_free(&res);
		res = run(init);
		cr_expect(cc_exited(res.status, 1), "init %s: %d", urls[i],
			  res.status);
		no_password(&res, urls[i]);
		cc_result_free(&res);
	}
	free(noport);
	free(norole);
	free(base);
}

/* ---- worker ---------------------------------------------------------- */

Test(pg_cli, worker_check_config_names_the_stores_redacted)
{
	char *url = url_as(NULL, 1), t[64], s[64], store[600], schema[100],
	     tschema[100], plugin[4200];
	const char *args[] = {"worker", "--check-config",
			      "-X",	"group.id=g",
			      "-X",	store,
			      "-X",	schema,
			      "-X",	tschema,
			      "-X",	"kafka.bootstrap.servers=127.0.0.1:9",
			      "-X",	plugin,
			      "-X",	"plugin.args=role=order-service",
			      NULL};
	cc_result_t res;
	char want[200];

	tt_pg_schema(t, sizeof(t), "clit");
	tt_pg_schema(s, sizeof(s), "clis");
	free(init_tokens(url, t, 1));
	snprintf(store, sizeof(store), "store.url=%s", url);
	snprintf(schema, sizeof(schema), "store.schema=%s", s);
	snprintf(tschema, sizeof(tschema), "tokens.schema=%s", t);
	snprintf(plugin, sizeof(plugin), "plugin=%s",
		 tt_plugin_path("tbx_orders"));
	res = run(args);
	cr_assert(cc_exited(res.status, 0), "%d: %s", res.status, res.err);
	no_password(&res, "worker --check-config");
	snprintf(want, sizeof(want), ":***@/tokenbox?host=");
	cr_expect(strstr(res.out, want), "%s", res.out);
	snprintf(want, sizeof(want), "(schema %s), token store ", s);
	cr_expect(strstr(res.out, want), "%s", res.out);
	snprintf(want, sizeof(want), "(schema %s)\n", t);
	cr_expect(strstr(res.out, want), "%s", res.out);
	cc_result_free(&res);
	free(url);
}

/* ---- send ------------------------------------------------------------ */

Test(pg_cli, send_mints_in_a_token_schema)
{
	static const char *const topics[] = {"hello:1", NULL};
	char *url = url_as(NULL, 1), t[64];
	tt_mock_proc_t mock = tt_mock_proc_start(topics);

	tt_pg_schema(t, sizeof(t), "clit");
	free(init_tokens(url, t, 1));
	{
		const char *args[] = {"send",
				      "-b",
				      mock.bootstraps,
				      "-t",
				      "hello",
				      "-T",
				      "Hello",
				      "-S",
				      url,
				      "--tokens-schema",
				      t,
				      NULL};
		cc_result_t res = cc_run_with(args, "a\nb\n", 4, 120000);
		cr_expect(cc_exited(res.status, 0), "%d: %s", res.status,
			  res.err);
		cr_expect(strstr(res.out, "sent 2 messages to hello"), "%s",
			  res.out);
		no_password(&res, "send");
		cc_result_free(&res);
	}
	/* A schema without token tables is refused, never made. */
	{
		const char *args[] = {"send",
				      "-b",
				      mock.bootstraps,
				      "-t",
				      "hello",
				      "-T",
				      "Hello",
				      "-S",
				      url,
				      "--tokens-schema",
				      "t_no_tokens_here",
				      NULL};
		cc_result_t res = cc_run_with(args, "a\n", 2, 120000);
		cr_expect(!cc_exited(res.status, 0), "%d", res.status);
		no_password(&res, "send to a missing schema");
		cr_expect_eq(schema_exists("t_no_tokens_here"), 0);
		cc_result_free(&res);
	}
	tt_mock_proc_stop(&mock);
	free(url);
}

/* ---- demo ------------------------------------------------------------ */

static const cJSON *member(const cJSON *o, const char *name)
{
	const cJSON *item = cJSON_GetObjectItemCaseSensitive(o, name);

	cr_assert(item, "no '%s' in the result", name);
	return item;
}

Test(pg_cli, demo_store_url_is_exactly_once_and_drops_its_schemas,
     .timeout = 900)
{
	char *url = url_as(NULL, 1);
	const char *args[] = {"demo", "--messages",  "300", "--json", "--seed",
			      "11",   "--store-url", url,   NULL};
	cc_result_t res = cc_run_with(args, NULL, 0, 600000);
	const cJSON *schemas;
	cJSON *o;

	cr_assert(res.status != -1, "the demo did not finish");
	no_password(&res, "demo --store-url");
	o = cJSON_Parse(res.out);
	cr_assert(o, "stdout is not JSON: %s (stderr %s)", res.out, res.err);
	cr_expect(cJSON_IsTrue(member(o, "exactly_once")), "%s", res.out);
	cr_expect_eq(member(o, "orders_rows")->valuedouble, 300);
	cr_expect_eq(member(o, "payments_distinct")->valuedouble, 300);
	cr_expect_eq(member(o, "tokens_left")->valuedouble, 0);
	cr_expect_eq(member(o, "registrations_left")->valuedouble, 0);
	cr_expect(strstr(cJSON_GetStringValue(member(o, "store_url")), ":***@"),
		  "%s", res.out);
	schemas = member(o, "schemas");
	for (const cJSON *s = schemas->child; s; s = s->next)
		cr_expect_eq(schema_exists(s->valuestring), 0,
			     "schema %s is left", s->valuestring);
	cr_expect(cc_exited(res.status, 0), "%d: %s", res.status, res.err);
	cJSON_Delete(o);
	cc_result_free(&res);
	free(url);
}

Test(pg_cli, demo_keep_keeps_the_schemas_and_refuses_them_again, .timeout = 900)
{
	char *url = url_as(NULL, 0), prefix[64], name[128];
	const char *args[] = {"demo", "--messages", "30",   "--store-url",
			      url,    "--keep",	    prefix, NULL};
	cc_result_t res;

	tt_pg_schema(prefix, sizeof(prefix), "demo");
	res = cc_run_with(args, NULL, 0, 600000);
	cr_assert(cc_exited(res.status, 0), "%d: %s", res.status, res.err);
	cr_expect(strstr(res.out, "exactly once: yes"), "%s", res.out);
	cr_expect(strstr(res.out, "(kept)"), "%s", res.out);
	snprintf(name, sizeof(name), "%s_order_service", prefix);
	cr_expect_eq(schema_exists(name), 1);
	cr_expect_eq(sql_as(NULL,
			    "SELECT count(DISTINCT order_no) FROM "
			    "\"%s\".orders",
			    name),
		     30);
	snprintf(name, sizeof(name), "%s_tokens", prefix);
	cr_expect_eq(schema_exists(name), 1);
	cc_result_free(&res);
	res = cc_run_with(args, NULL, 0, 600000);
	cr_expect(cc_exited(res.status, 2), "%d", res.status);
	cr_expect(strstr(res.err, "exists already"), "%s", res.err);
	cc_result_free(&res);
	free(url);
}
