/*
 * A pipeline whose every process runs as a least-privilege database role,
 * set up with the SQL of docs/operations.md ("Roles and grants") as it
 * stands, in a database of its own that PUBLIC may not enter:
 * `tokenbox init` as the token schema's owner, `tokenbox worker`
 * processes of two services as their services' roles on the mock
 * cluster, `tokenbox send` as the senders' role.  Every order takes
 * effect once in each service's schema, and nothing is left in the
 * outboxes or the token store.  A service's role cannot touch the other
 * service's schema, and a role lacking any one documented grant stops the
 * worker at start with an error that names what it lacks.
 */
#include <ctype.h>
#include <libpq-fe.h>
#include <stdarg.h>

#include "cli_child.h"
#include "fixture.h"

enum { ORDERS = 300 };

/* The names docs/operations.md uses, and ours for this run. */
typedef struct names {
	char db[64];	  /* "pipeline" */
	char admin[64];	  /* "pipeline_admin" */
	char svc1[64];	  /* "billing": role and schema of order-service */
	char svc2[64];	  /* "shipping": role and schema of payment-service */
	char senders[64]; /* "senders" */
	char tokens[64];  /* "tokenbox_tokens" */
} names_t;

static names_t nm;
static int made;		 /* the database and roles exist: drop them */
static char extra_roles[16][64]; /* more roles to drop */
static int extra_cnt;
static pid_t children[16];
static int child_cnt;

/* ---- connections ---------------------------------------------------- */

/** The server's URL ($TBX_PG_URL) as @p user (NULL: its own) on database
 *  @p db (NULL: its own), with "&@p more" in the query when given
 *  (malloc'ed). */
static char *url_as(const char *user, const char *db, const char *more)
{
	const char *base = tt_pg_url(), *auth, *at, *host, *path, *query;
	size_t len;
	char *out;

	/* scheme://user@host/db?query */
	auth = strstr(base, "://");
	cr_assert(auth, "not a URL: %s", base);
	auth += 3;
	path = auth + strcspn(auth, "/?");
	at = memchr(auth, '@', (size_t)(path - auth));
	cr_assert(at, "the URL names no user: %s", base);
	host = at + 1;
	query = path + strcspn(path, "?");
	if (*path == '/')
		path++;
	len = strlen(base) + 256 + (more ? strlen(more) : 0);
	out = malloc(len);
	cr_assert(out);
	snprintf(out, len, "%.*s%.*s@%.*s/%.*s%s%s%s", (int)(auth - base), base,
		 (int)(user ? strlen(user) : (size_t)(at - auth)),
		 user ? user : auth, (int)(path - host) - (path[-1] == '/'),
		 host, (int)(db ? strlen(db) : (size_t)(query - path)),
		 db ? db : path, query, more ? (*query ? "&" : "?") : "",
		 more ? more : "");
	return out;
}

static PGconn *connect_as(const char *user, const char *db)
{
	char *url = url_as(user, db, NULL);
	PGconn *c = PQconnectdb(url);

	cr_assert(PQstatus(c) == CONNECTION_OK, "connect as %s to %s: %s",
		  user ? user : "the test's role", db ? db : "its database",
		  PQerrorMessage(c));
	free(url);
	PQclear(PQexec(c, "SET client_min_messages = warning"));
	return c;
}

/** Runs @p sql as @p user on @p db.  @returns 0 and the first column of
 *  the first row in *v (when given; -1 without one), or -1 with the
 *  server's message in @p err. */
static int sql_try(const char *user, const char *db, const char *sql,
		   long long *v, char *err, size_t err_size)
{
	PGconn *c = connect_as(user, db);
	PGresult *r = PQexec(c, sql);
	int rc = 0;

	if (v)
		*v = -1;
	if (PQresultStatus(r) != PGRES_COMMAND_OK &&
	    PQresultStatus(r) != PGRES_TUPLES_OK) {
		snprintf(err, err_size, "%s", PQerrorMessage(c));
		rc = -1;
	} else if (v && PQresultStatus(r) == PGRES_TUPLES_OK &&
		   PQntuples(r) > 0) {
		*v = atoll(PQgetvalue(r, 0, 0));
	}
	PQclear(r);
	PQfinish(c);
	return rc;
}

/** Runs @p fmt as @p user on @p db and asserts it worked.  @returns the
 *  first column of the first row, or -1 without one. */
static long long sql_as(const char *user, const char *db, const char *fmt, ...)
{
	char sql[8192], err[1024];
	long long v;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	cr_assert_eq(sql_try(user, db, sql, &v, err, sizeof(err)), 0,
		     "as %s: %s: %s", user ? user : "the test's role", sql,
		     err);
	return v;
}

/** Asserts that @p sql as @p user on our database is refused for want of
 *  a privilege or of ownership. */
static void refused(const char *user, const char *sql)
{
	char err[1024];

	cr_expect_eq(sql_try(user, nm.db, sql, NULL, err, sizeof(err)), -1,
		     "as %s, allowed: %s", user, sql);
	cr_expect(strstr(err, "permission denied") ||
		      strstr(err, "must be owner"),
		  "as %s: %s: %s", user, sql, err);
}

/** A count as the superuser, on our database. */
static long long count(const char *fmt, ...)
{
	char sql[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	return sql_as("postgres", nm.db, "%s", sql);
}

/* ---- the SQL of docs/operations.md ----------------------------------- */

/** The whole text of the file (malloc'ed). */
static char *read_doc(void)
{
	const char *src = getenv("TBX_SOURCE_DIR");
	char path[4096];
	char *text;

	cr_assert(src && *src, "TBX_SOURCE_DIR is not set (run through ctest)");
	snprintf(path, sizeof(path), "%s/docs/operations.md", src);
	text = tt_read_text(path);
	cr_assert(*text, "%s is empty or missing", path);
	return text;
}

/** The @p nth ```sql block (0-based) of the section "### Roles and
 *  grants", its identifiers renamed through @p map (pairs of the doc's
 *  name and ours, NULL-terminated) (malloc'ed). */
static char *doc_sql(int nth, const char *const *map)
{
	char *doc = read_doc(), *sec, *end, *blk, *out;
	size_t cap, n = 0;

	sec = strstr(doc, "\n### Roles and grants\n");
	cr_assert(sec, "docs/operations.md has no 'Roles and grants'");
	end = strstr(sec + 1, "\n### ");
	blk = sec;
	for (int i = 0; i <= nth; i++) {
		blk = strstr(blk + 1, "\n```sql\n");
		cr_assert(blk && (!end || blk < end),
			  "'Roles and grants' has no sql block %d", nth);
	}
	blk += strlen("\n```sql\n");
	end = strstr(blk, "\n```");
	cr_assert(end);
	cap = (size_t)(end - blk) * 4 + 1;
	out = malloc(cap);
	cr_assert(out);
	for (const char *p = blk; p < end;) {
		if (isalnum((unsigned char)*p) || *p == '_') {
			const char *w = p, *to = NULL;
			size_t len;

			while (p < end &&
			       (isalnum((unsigned char)*p) || *p == '_'))
				p++;
			len = (size_t)(p - w);
			for (size_t m = 0; map[m]; m += 2)
				if (strlen(map[m]) == len &&
				    strncmp(map[m], w, len) == 0)
					to = map[m + 1];
			n += (size_t)snprintf(out + n, cap - n, "%.*s",
					      to ? (int)strlen(to) : (int)len,
					      to ? to : w);
		} else {
			out[n++] = *p++;
		}
		cr_assert(n < cap);
	}
	out[n] = '\0';
	free(doc);
	return out;
}

/* ---- the world ------------------------------------------------------ */

static pid_t remember(pid_t pid)
{
	cr_assert(child_cnt < (int)(sizeof(children) / sizeof(children[0])));
	children[child_cnt++] = pid;
	return pid;
}

static void teardown(void)
{
	for (int i = 0; i < child_cnt; i++)
		if (children[i] > 0) {
			kill(children[i], SIGKILL);
			waitpid(children[i], NULL, 0);
		}
	if (!made)
		return;
	sql_as("postgres", NULL, "DROP DATABASE IF EXISTS %s WITH (FORCE)",
	       nm.db);
	for (int i = 0; i < extra_cnt; i++)
		sql_as("postgres", NULL, "DROP ROLE IF EXISTS %s",
		       extra_roles[i]);
	sql_as("postgres", NULL, "DROP ROLE IF EXISTS %s, %s, %s, %s", nm.admin,
	       nm.svc1, nm.svc2, nm.senders);
}

TestSuite(pg_roles, .fini = teardown);

/** Our names for the doc's ones, for doc_sql(). */
static const char *const *doc_map(void)
{
	static const char *map[13];

	map[0] = "pipeline", map[1] = nm.db;
	map[2] = "pipeline_admin", map[3] = nm.admin;
	map[4] = "billing", map[5] = nm.svc1;
	map[6] = "shipping", map[7] = nm.svc2;
	map[8] = "senders", map[9] = nm.senders;
	map[10] = "tokenbox_tokens", map[11] = nm.tokens;
	map[12] = NULL;
	return map;
}

/** The stores' half of the world: a database that PUBLIC may not enter,
 *  the doc's roles and schemas, the token store made by its owner and
 *  its use granted -- all with the doc's SQL. */
static void world(void)
{
	char *sql, *url;

	tt_pg_schema(nm.db, sizeof(nm.db), "rdb");
	tt_pg_schema(nm.admin, sizeof(nm.admin), "radm");
	tt_pg_schema(nm.svc1, sizeof(nm.svc1), "rbill");
	tt_pg_schema(nm.svc2, sizeof(nm.svc2), "rship");
	tt_pg_schema(nm.senders, sizeof(nm.senders), "rsend");
	tt_pg_schema(nm.tokens, sizeof(nm.tokens), "rtok");
	made = 1;
	sql_as("postgres", NULL, "CREATE DATABASE %s", nm.db);
	/* As the database owner, once. */
	sql = doc_sql(0, doc_map());
	sql_as("postgres", nm.db, "%s", sql);
	free(sql);
	/* Then, as the token schema's owner, the store and its grants. */
	url = url_as(nm.admin, nm.db, NULL);
	{
		const char *args[] = {"init",	 "--tokens",
				      url,	 "--tokens-schema",
				      nm.tokens, NULL};
		cc_result_t res = cc_run_with(args, NULL, 0, 120000);

		cr_assert(cc_exited(res.status, 0), "init as %s: %d: %s",
			  nm.admin, res.status, res.err);
		cc_result_free(&res);
	}
	free(url);
	sql = doc_sql(1, doc_map());
	sql_as(nm.admin, nm.db, "%s", sql);
	free(sql);
}

/** The settings of a worker of @p service ("order-service" or
 *  "payment-service") as @p role in schema @p schema, its token store
 *  apart (a connection of its own) or joined; into @p set (up to 16
 *  strings of 1200 bytes), NULL-terminated. */
static void worker_settings(char set[][1200], const char **out,
			    const char *bootstraps, const char *service,
			    const char *role, const char *schema, int apart)
{
	char *url = url_as(role, nm.db, NULL);
	char *turl = url_as(role, nm.db, "application_name=tbx-tokens");
	int n = 0;

	snprintf(set[n++], 1200, "group.id=%s", service);
	snprintf(set[n++], 1200, "kafka.bootstrap.servers=%s", bootstraps);
	snprintf(set[n++], 1200, "store.url=%s", url);
	snprintf(set[n++], 1200, "store.schema=%s", schema);
	snprintf(set[n++], 1200, "tokens.schema=%s", nm.tokens);
	if (apart)
		snprintf(set[n++], 1200, "tokens.url=%s", turl);
	snprintf(set[n++], 1200, "plugin=%s", tt_plugin_path("tbx_orders"));
	snprintf(set[n++], 1200, "plugin.args=role=%s", service);
	snprintf(set[n++], 1200, "kafka.consumer.session.timeout.ms=4000");
	snprintf(set[n++], 1200, "kafka.consumer.heartbeat.interval.ms=300");
	snprintf(set[n++], 1200, "kafka.consumer.fetch.wait.max.ms=10");
	snprintf(set[n++], 1200, "cleanup.interval.ms=500");
	snprintf(set[n++], 1200, "stats.interval.ms=0");
	snprintf(set[n++], 1200, "log.level=warning");
	for (int i = 0; i < n; i++)
		out[i] = set[i];
	out[n] = NULL;
	free(url);
	free(turl);
}

static pid_t start_worker(const char *bootstraps, const char *service,
			  const char *role, int apart, const char *log)
{
	char set[16][1200];
	const char *settings[17];

	worker_settings(set, settings, bootstraps, service, role, role, apart);
	return remember(tt_worker_start(settings, NULL, log));
}

/* SELECT @p what FROM @p schema.@p table as the superuser; -1 while the
 * table is not there (a service's tables come with its worker). */
static long long count_or_none(const char *schema, const char *table,
			       const char *what)
{
	char sql[256], err[512];
	long long v;

	snprintf(sql, sizeof(sql), "SELECT %s FROM %s.%s", what, schema, table);
	return sql_try("postgres", nm.db, sql, &v, err, sizeof(err)) ? -1 : v;
}

static int drained(void)
{
	return count_or_none(nm.svc1, "orders", "count(DISTINCT order_no)") ==
		   ORDERS &&
	       count_or_none(nm.svc2, "payments", "count(DISTINCT order_no)") ==
		   ORDERS &&
	       count_or_none(nm.svc1, "tbx_outbox", "count(*)") == 0 &&
	       count_or_none(nm.svc2, "tbx_outbox", "count(*)") == 0 &&
	       count_or_none(nm.tokens, "tbx_tokens", "count(*)") == 0 &&
	       count_or_none(nm.tokens, "tbx_registrations", "count(*)") == 0;
}

/* ---- the pipeline --------------------------------------------------- */

Test(pg_roles, workers_as_their_roles_take_every_order_once, .timeout = 900)
{
	static const char *const topics[] = {
	    "orders:4", "payments:4", "orders.dlq:1", "payments.dlq:1", NULL};
	tt_mock_proc_t mock;
	char *dir = tt_tmpdir(), *log1 = tt_path(dir, "order-service.log"),
	     *log2 = tt_path(dir, "payment-service.log"), *surl, *input;
	pid_t w[3];
	size_t len = 0, cap = (size_t)ORDERS * 64;
	long long deadline;

	world();
	/* A table of the service's schema that is not tokenbox's, which its
	 * role may not touch: not the workers' business at start (the name
	 * would match tbx_% if its '_' were a wildcard). */
	sql_as("postgres", nm.db, "CREATE TABLE %s.tbxaudit (x int)", nm.svc1);
	mock = tt_mock_proc_start(topics);
	remember(mock.pid);
	/* Two workers of order-service on one connection each (joined),
	 * one of payment-service with a second for the token store. */
	w[0] = start_worker(mock.bootstraps, "order-service", nm.svc1, 0, log1);
	w[1] = start_worker(mock.bootstraps, "order-service", nm.svc1, 0, log1);
	w[2] =
	    start_worker(mock.bootstraps, "payment-service", nm.svc2, 1, log2);
	/* Senders mint only for the groups subscribed. */
	deadline = cc_now_ms() + 120000LL * cc_time_factor();
	while (count_or_none(nm.tokens, "tbx_subscriptions", "count(*)") < 2 &&
	       cc_now_ms() < deadline)
		usleep(100000);
	tt_assert_log(
	    count_or_none(nm.tokens, "tbx_subscriptions", "count(*)") == 2,
	    log1, "the workers did not subscribe");

	/* `tokenbox send` as the senders' role. */
	input = malloc(cap);
	cr_assert(input);
	for (int i = 0; i < ORDERS; i++)
		len += (size_t)snprintf(input + len, cap - len,
					"customer-%d|{\"order\": \"%d\", "
					"\"amount\": %d}\n",
					i % 7, i, 100 + i);
	surl = url_as(nm.senders, nm.db, NULL);
	{
		const char *args[] = {
		    "send",	   "-b",     mock.bootstraps,
		    "-t",	   "orders", "-T",
		    "OrderPlaced", "-K",     "|",
		    "-S",	   surl,     "--tokens-schema",
		    nm.tokens,	   NULL};
		cc_result_t res = cc_run_with(args, input, len, 120000);

		cr_assert(cc_exited(res.status, 0), "send as %s: %d: %s",
			  nm.senders, res.status, res.err);
		cc_result_free(&res);
	}
	free(input);
	free(surl);

	deadline = cc_now_ms() + 240000LL * cc_time_factor();
	while (!drained() && cc_now_ms() < deadline)
		usleep(200000);
	if (!drained()) {
		cr_log_error("order-service:\n%s", tt_read_text(log1));
		cr_log_error("payment-service:\n%s", tt_read_text(log2));
		cr_assert_fail("the pipeline did not drain as its roles");
	}
	for (int i = 0; i < 3; i++) {
		int status;

		kill(w[i], SIGTERM);
		status = cc_wait(w[i], 60000 * cc_time_factor());
		cr_expect(cc_exited(status, 0), "worker %d: status %d", i,
			  status);
		children[i + 1] = 0;
	}
	tt_mock_proc_stop(&mock);
	children[0] = 0;

	/* Exactly once: no unique constraint hides a second run. */
	cr_expect_eq(count("SELECT count(*) FROM %s.orders", nm.svc1), ORDERS);
	cr_expect_eq(count("SELECT count(*) FROM %s.payments", nm.svc2),
		     ORDERS);
	cr_expect_eq(count("SELECT count(*) FROM %s.tbx_outbox", nm.svc1), 0);
	cr_expect_eq(count("SELECT count(*) FROM %s.tbx_outbox", nm.svc2), 0);
	cr_expect_eq(count("SELECT count(*) FROM %s.tbx_tokens", nm.tokens), 0);
	cr_expect_eq(
	    count("SELECT count(*) FROM %s.tbx_registrations", nm.tokens), 0);
	/* Nothing was refused on the way. */
	{
		char *t1 = tt_read_text(log1), *t2 = tt_read_text(log2);

		cr_expect_null(strstr(t1, "permission denied"), "%s", t1);
		cr_expect_null(strstr(t2, "permission denied"), "%s", t2);
		free(t1);
		free(t2);
	}

	/* Each service's role keeps to its schema and the token store's. */
	{
		char sql[512];

		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s.payments",
			 nm.svc2);
		refused(nm.svc1, sql);
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s.tbx_outbox",
			 nm.svc2);
		refused(nm.svc1, sql);
		snprintf(sql, sizeof(sql), "DELETE FROM %s.tbx_outbox",
			 nm.svc2);
		refused(nm.svc1, sql);
		snprintf(sql, sizeof(sql), "CREATE TABLE %s.intruder (x int)",
			 nm.svc2);
		refused(nm.svc1, sql);
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s.orders",
			 nm.svc1);
		refused(nm.svc2, sql);
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s.orders",
			 nm.svc1);
		refused(nm.senders, sql);
		snprintf(sql, sizeof(sql), "DROP TABLE %s.tbx_tokens",
			 nm.tokens);
		refused(nm.svc1, sql);
	}
	free(log1);
	free(log2);
	tt_rmrf(dir);
	free(dir);
}

/* ---- init and inspect ----------------------------------------------- */

/* `tokenbox init --store` and `inspect` as a service's role: its own
 * schema, with the token schema's; never the other service's. */
Test(pg_roles, init_and_inspect_as_a_service_role, .timeout = 300)
{
	const char *roles[] = {nm.svc1, nm.svc2};
	char *url1;

	world();
	for (int i = 0; i < 2; i++) {
		char *url = url_as(roles[i], nm.db, NULL);
		const char *args[] = {"init",	  "--store", url,
				      "--schema", roles[i],  NULL};
		cc_result_t res = cc_run_with(args, NULL, 0, 120000);

		cr_expect(cc_exited(res.status, 0), "init as %s: %d: %s",
			  roles[i], res.status, res.err);
		cr_expect(strstr(res.out, ": created, service store"), "%s",
			  res.out);
		cc_result_free(&res);
		free(url);
	}
	url1 = url_as(nm.svc1, nm.db, NULL);
	{
		const char *args[] = {
		    "inspect",	       "-s",	  url1,	    "--schema", nm.svc1,
		    "--tokens-schema", nm.tokens, "status", "--check",	NULL};
		cc_result_t res = cc_run_with(args, NULL, 0, 120000);

		cr_expect(cc_exited(res.status, 0), "as %s: %d: %s %s", nm.svc1,
			  res.status, res.out, res.err);
		cc_result_free(&res);
	}
	{
		/* The other service's schema is not this role's. */
		const char *args[] = {"inspect",  "-s",	    url1,
				      "--schema", nm.svc2,  "--tokens-schema",
				      nm.tokens,  "status", NULL};
		cc_result_t res = cc_run_with(args, NULL, 0, 120000);

		cr_expect(cc_exited(res.status, 2), "as %s: %d", nm.svc1,
			  res.status);
		cr_expect(strstr(res.err, "permission denied"), "%s", res.err);
		cc_result_free(&res);
	}
	free(url1);
}

/* ---- a grant missing ------------------------------------------------ */

typedef struct omission {
	const char *as;	  /* who revokes: "postgres" or "admin" */
	const char *sql;  /* {db} the database, {tok} the token schema,
			     {role} the role, {admin} the token schema's
			     owner */
	const char *says; /* what the worker's error must say ({...} as in
			     sql) */
} omission_t;

/* Every grant of docs/operations.md, one at a time. */
static const omission_t omissions[] = {
    {"postgres", "REVOKE CONNECT ON DATABASE {db} FROM {role}",
     "User does not have CONNECT privilege"},
    {"postgres", "ALTER SCHEMA {role} OWNER TO {admin}",
     "permission denied for schema {role}"},
    {"admin", "REVOKE USAGE ON SCHEMA {tok} FROM {role}",
     "permission denied for schema {tok}"},
    {"admin", "REVOKE SELECT ON ALL TABLES IN SCHEMA {tok} FROM {role}",
     "permission denied for table tbx_schema_info"},
    {"admin", "REVOKE INSERT ON ALL TABLES IN SCHEMA {tok} FROM {role}",
     "INSERT on {tok}.tbx_registrations"},
    {"admin", "REVOKE UPDATE ON ALL TABLES IN SCHEMA {tok} FROM {role}",
     "UPDATE on {tok}.tbx_subscriptions"},
    {"admin", "REVOKE DELETE ON ALL TABLES IN SCHEMA {tok} FROM {role}",
     "DELETE on {tok}.tbx_tokens"},
    /* The token sets' tables (token version 3), one of them. */
    {"admin", "REVOKE DELETE ON {tok}.tbx_tset FROM {role}",
     "DELETE on {tok}.tbx_tset"},
    {"admin", "REVOKE USAGE ON ALL SEQUENCES IN SCHEMA {tok} FROM {role}",
     "USAGE on {tok}.tbx_seq"},
    {"admin", "REVOKE SELECT ON ALL SEQUENCES IN SCHEMA {tok} FROM {role}",
     "SELECT on {tok}.tbx_seq"},
    {"admin", "REVOKE UPDATE ON ALL SEQUENCES IN SCHEMA {tok} FROM {role}",
     "UPDATE on {tok}.tbx_seq"},
};

/* @p tmpl with {db}, {tok}, {role} and {admin} filled in, into @p out. */
static void subst(char *out, size_t size, const char *tmpl, const char *role)
{
	const char *keys[] = {"{db}", "{tok}", "{role}", "{admin}"};
	const char *vals[] = {nm.db, nm.tokens, role, nm.admin};
	size_t n = 0;

	for (const char *p = tmpl; *p && n + 1 < size;) {
		size_t k = 0;

		while (k < 4 && strncmp(p, keys[k], strlen(keys[k])) != 0)
			k++;
		if (k < 4) {
			n += (size_t)snprintf(out + n, size - n, "%s", vals[k]);
			p += strlen(keys[k]);
		} else {
			out[n++] = *p++;
		}
	}
	cr_assert(n + 1 < size);
	out[n] = '\0';
}

/* A role of a service made as the guide says, then one grant taken
 * away: its worker must stop before it consumes anything -- exit status
 * 1 within the start's time, an error naming what is missing -- never
 * start and then stall at the first record that needs the grant.  The
 * group already subscribed (an earlier worker did), so that nothing at
 * start happens to use the grant by chance. */
Test(pg_roles, a_role_missing_a_documented_grant_stops_the_worker_at_start,
     .timeout = 900)
{
	static const char *const topics[] = {"orders:2", "payments:2", NULL};
	tt_mock_proc_t mock;
	char *dir = tt_tmpdir(), *log = tt_path(dir, "first.log");
	pid_t first;

	world();
	mock = tt_mock_proc_start(topics);
	remember(mock.pid);
	/* The group's subscription, made by a worker with every grant. */
	first = start_worker(mock.bootstraps, "order-service", nm.svc1, 0, log);
	{
		long long deadline = cc_now_ms() + 120000LL * cc_time_factor();

		while (count_or_none(nm.tokens, "tbx_subscriptions",
				     "count(*)") < 1 &&
		       cc_now_ms() < deadline)
			usleep(100000);
	}
	tt_assert_log(
	    count_or_none(nm.tokens, "tbx_subscriptions", "count(*)") == 1, log,
	    "the first worker did not subscribe");
	kill(first, SIGTERM);
	cr_assert(cc_exited(cc_wait(first, 60000 * cc_time_factor()), 0));
	children[1] = 0;

	for (size_t i = 0; i < sizeof(omissions) / sizeof(omissions[0]); i++) {
		const omission_t *o = &omissions[i];
		char role[64], set[16][1200], sql[1024], says[512], *grants;
		const char *settings[17], *args[40] = {"worker"};
		const char *map[13];
		cc_result_t res;
		size_t n = 1;

		memcpy(map, doc_map(), sizeof(map));
		tt_pg_schema(role, sizeof(role), "rmiss");
		cr_assert(extra_cnt < 16);
		snprintf(extra_roles[extra_cnt++], 64, "%s", role);
		/* The guide's statements for billing, for this role. */
		sql_as("postgres", nm.db, "CREATE ROLE %s LOGIN", role);
		sql_as("postgres", nm.db, "GRANT CONNECT ON DATABASE %s TO %s",
		       nm.db, role);
		sql_as("postgres", nm.db, "CREATE SCHEMA %s AUTHORIZATION %s",
		       role, role);
		map[5] = role;
		grants = doc_sql(1, map);
		sql_as(nm.admin, nm.db, "%s", grants);
		free(grants);
		subst(sql, sizeof(sql), o->sql, role);
		sql_as(strcmp(o->as, "admin") == 0 ? nm.admin : "postgres",
		       nm.db, "%s", sql);
		subst(says, sizeof(says), o->says, role);

		/* Joined and apart in turn. */
		worker_settings(set, settings, mock.bootstraps, "order-service",
				role, role, (int)(i % 2));
		for (size_t k = 0; settings[k]; k++) {
			args[n++] = "-X";
			args[n++] = settings[k];
		}
		args[n] = NULL;
		res = cc_run_with(args, NULL, 0, 60000);
		cr_log_info("%s: %s", sql, res.err);
		cr_expect_neq(res.status, -1,
			      "%s: the worker did not stop (a stall)", sql);
		cr_expect(cc_exited(res.status, 1), "%s: status %d: %s", sql,
			  res.status, res.err);
		cr_expect(strstr(res.err, says),
			  "%s: the error says not '%s': %s", sql, says,
			  res.err);
		cc_result_free(&res);
		/* --check-config finds it before a deploy (but for a schema
		 * not the role's: it creates nothing, and there is nothing
		 * yet to read). */
		if (strstr(o->sql, "OWNER"))
			continue;
		args[n] = "--check-config";
		args[n + 1] = NULL;
		res = cc_run_with(args, NULL, 0, 60000);
		cr_expect(cc_exited(res.status, 2),
			  "--check-config: %s: %d: %s", sql, res.status,
			  res.err);
		cr_expect(strstr(res.err, says),
			  "--check-config: %s: the error says not '%s': %s",
			  sql, says, res.err);
		cc_result_free(&res);
	}
	tt_mock_proc_stop(&mock);
	children[0] = 0;
	free(log);
	tt_rmrf(dir);
	free(dir);
}
