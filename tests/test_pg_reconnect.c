/*
 * A lost connection to the stores' server is a failure an operator sees:
 * a worker on PostgreSQL whose sessions the server ends
 * (pg_terminate_backend) goes on, every record takes effect once, the
 * reconnects are counted (store_reconnects) and recorded as a
 * store_reconnect alarm, which `inspect status --check` flags (read
 * from an SQLite service store beside a token store on PostgreSQL); a
 * publisher counts its own.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_child.h"
#include "consumer/stores.h"
#include "consumer/worker.h"
#include "fixture.h"
#include "store/pg.h"

static PGconn *raw; /* the test's own connection, for checks */

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

TestSuite(pg_reconnect, .init = fx_setup, .fini = fx_teardown);

static void fx_exec(const char *sql)
{
	PGresult *r = PQexec(raw, sql);

	cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK ||
		      PQresultStatus(r) == PGRES_TUPLES_OK,
		  "%s: %s", sql, PQresultErrorMessage(r));
	PQclear(r);
}

/* The integer "SELECT <what> FROM \"<schema>\".<rest>" returns; -1 when
 * it fails (a table not there yet). */
static int64_t fx_int(const char *what, const char *schema, const char *rest)
{
	char sql[512];
	PGresult *r;
	int64_t n = -1;

	snprintf(sql, sizeof(sql), "SELECT %s FROM \"%s\".%s", what, schema,
		 rest);
	r = PQexec(raw, sql);
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return n;
}

static int64_t fx_count(const char *schema, const char *rest)
{
	return fx_int("count(*)", schema, rest);
}

/* Ends the server session of @p pg from the test's connection, as an
 * administrator, a server restart or a network cut would. */
static void fx_terminate(const tbx__pg_t *pg)
{
	char sql[128];
	PGresult *r;

	cr_assert_not_null(pg);
	snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d)",
		 PQbackendPID(pg->conn));
	r = PQexec(raw, sql);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
		     PQresultErrorMessage(r));
	cr_assert_str_eq(PQgetvalue(r, 0, 0), "t");
	PQclear(r);
}

/* Ends the sessions named @p app (application_name). */
static void fx_terminate_app(const char *app)
{
	const char *params[1] = {app};
	PGresult *r = PQexecParams(
	    raw,
	    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
	    "WHERE application_name = $1",
	    1, NULL, params, NULL, NULL, 0);

	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
		     PQresultErrorMessage(r));
	cr_assert_str_eq(PQgetvalue(r, 0, 0), "1");
	PQclear(r);
}

/* The test's world: a cluster, a service schema, a token schema. */
typedef struct env {
	tt_cluster_t *cluster;
	char sschema[64], tschema[64];
	char url[1024];	      /* the server's URL */
	char apart_url[1100]; /* the same database, spelt otherwise */
	char pub_app[80];     /* the publisher's application_name */
	char pub_url[1200];   /* its URL, which sets it */
	char *dir, *prom;     /* the worker's metrics.textfile */
} env_t;

static void env_init(env_t *e, const char *tag)
{
	char t[32];

	memset(e, 0, sizeof(*e));
	e->cluster = tt_cluster_new(1);
	tt_cluster_topic(e->cluster, "in", 2);
	tt_cluster_topic(e->cluster, "in.dlq", 1);
	tt_pg_schema(e->sschema, sizeof(e->sschema), tag);
	snprintf(t, sizeof(t), "%s_t", tag);
	tt_pg_schema(e->tschema, sizeof(e->tschema), t);
	snprintf(e->url, sizeof(e->url), "%s", tt_pg_url());
	snprintf(e->apart_url, sizeof(e->apart_url),
		 "%s%sapplication_name=apart", e->url,
		 strchr(e->url, '?') ? "&" : "?");
	e->dir = tt_tmpdir();
	e->prom = tt_path(e->dir, "worker.prom");
	snprintf(e->pub_app, sizeof(e->pub_app), "pub_%s", e->tschema);
	snprintf(e->pub_url, sizeof(e->pub_url), "%s%sapplication_name=%s",
		 e->url, strchr(e->url, '?') ? "&" : "?", e->pub_app);
}

static void env_fini(env_t *e)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
		 e->sschema);
	fx_exec(sql);
	snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
		 e->tschema);
	fx_exec(sql);
	tt_cluster_destroy(e->cluster);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->prom);
}

/* A worker of group g on the schemas of @p e; @p tokens_url NULL: joined.
 * Its first poll subscribes the group. */
static tbx_worker_t *worker(env_t *e, const char *tokens_url, tbx_handler_fn fn,
			    void *opaque)
{
	char err[512];
	tbx_conf_t *conf =
	    tt_conf(e->cluster->bootstraps, "g", NULL, NULL, "store.url",
		    e->url, "store.schema", e->sschema, "tokens.schema",
		    e->tschema, "tokens.create", "true", "metrics.textfile",
		    e->prom, "metrics.interval.ms", "100", NULL);
	tbx_worker_t *w;

	if (tokens_url)
		cr_assert_eq(tbx_conf_set(conf, "tokens.url", tokens_url, err,
					  sizeof(err)),
			     TBX_OK, "%s", err);
	w = tbx_worker_new(conf, err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", NULL, fn, opaque), TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK, "%s",
		     tbx_worker_errstr(w));
	return w;
}

/* A publisher on the token schema of @p e at @p tokens_url. */
static tbx_publisher_t *publisher(env_t *e, const char *tokens_url)
{
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;
	char err[512];

	cr_assert_eq(tbx_conf_set(conf, "kafka.bootstrap.servers",
				  e->cluster->bootstraps, err, sizeof(err)),
		     TBX_OK);
	cr_assert_eq(
	    tbx_conf_set(conf, "tokens.url", tokens_url, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(
	    tbx_conf_set(conf, "tokens.schema", e->tschema, err, sizeof(err)),
	    TBX_OK, "%s", err);
	tbx_conf_set(conf, "log.level", "warning", NULL, 0);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "%s", err);
	return pub;
}

/* Publishes records "from" … "from + cnt - 1" to "in". */
static void publish(tbx_publisher_t *pub, size_t from, size_t cnt)
{
	char num[16];
	int err;

	for (size_t i = from; i < from + cnt; i++) {
		tbx_out_t out = {
		    .topic = "in", .type = "Hit", .key = "k", .key_len = 1};

		snprintf(num, sizeof(num), "%zu", i);
		out.payload = num;
		out.payload_len = strlen(num);
		cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	}
	/* A flush that failed (a lost connection) keeps its batch: the
	 * caller flushes again. */
	for (int i = 0; i < 3 && (err = tbx_publisher_flush(pub, NULL)); i++)
		cr_assert_eq(err, TBX_ESTORE, "%s", tbx_publisher_errstr(pub));
	cr_assert_eq(err, TBX_OK, "%s", tbx_publisher_errstr(pub));
}

/* Re-produces every record of "in" once more: copies of the same
 * messages, with the same ids and tokens. */
static void copy_all(env_t *e)
{
	tt_record_t *recs;
	size_t cnt = tt_read_topic(e->cluster->bootstraps, "in", &recs);

	tt_reproduce(e->cluster->bootstraps, "in", recs, cnt);
	tt_records_free(recs, cnt);
}

static char insert_sql[256];

/* One effects row per record, through tbx_ctx_exec(). */
static tbx_verdict_t effect_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				   void *opaque)
{
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);
	char text[64];
	const char *params[2] = {tbx_msg_id(msg), text};
	int64_t changes = 0;

	(void)opaque;
	snprintf(text, sizeof(text), "%.*s", (int)len, payload ? payload : "");
	if (tbx_ctx_exec(ctx, insert_sql, params, 2, &changes) != TBX_OK ||
	    changes != 1)
		return TBX_VERDICT_RETRY;
	return TBX_VERDICT_OK;
}

/* The value of the sample @p name in the metrics textfile; -1 without. */
static int64_t prom_value(const env_t *e, const char *name)
{
	char line[512];
	size_t len = strlen(name);
	int64_t v = -1;
	FILE *f = fopen(e->prom, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, name, len) == 0 && line[len] == ' ')
			v = strtoll(line + len + 1, NULL, 10);
	fclose(f);
	return v;
}

typedef struct prom_want {
	const env_t *e;
	const char *name;
	int64_t n;
} prom_want_t;

static int prom_reached(void *opaque)
{
	prom_want_t *p = opaque;

	return prom_value(p->e, p->name) == p->n;
}

typedef struct done {
	const env_t *e;
	int64_t n;
} done_t;

static int all_done(void *opaque)
{
	done_t *d = opaque;

	return fx_count(d->e->sschema, "effects") >= d->n &&
	       fx_count(d->e->sschema, "tbx_outbox") == 0;
}

/*
 * N records handled, the worker's sessions ended by the server, N more
 * and a copy of every record: 2N effects, each once, nothing left in the
 * stores, the reconnects counted and the alarm recorded without the
 * URL's password.
 */
static void survives_terminate(const char *tag, int apart)
{
	enum { N = 20 };
	env_t e;
	tbx_worker_t *w;
	tbx_publisher_t *pub;
	tbx_publisher_stats_t ps;
	tbx_stats_t st;
	tbx__pg_t *spg, *tpg;
	char sql[512];

	env_init(&e, tag);
	w = worker(&e, apart ? e.apart_url : NULL, effect_handle, NULL);
	spg = tbx_outbox_pg(w->store);
	tpg = tbx_tokens_pg(w->tokens);
	cr_assert_not_null(spg);
	cr_assert_not_null(tpg);
	cr_assert_eq(spg == tpg, !apart);
	snprintf(sql, sizeof(sql),
		 "CREATE TABLE \"%s\".effects(msg_id TEXT NOT NULL UNIQUE, "
		 "payload TEXT NOT NULL UNIQUE)",
		 e.sschema);
	fx_exec(sql);
	snprintf(insert_sql, sizeof(insert_sql),
		 "INSERT INTO \"%s\".effects(msg_id, payload) VALUES ($1, $2)",
		 e.sschema);
	/* The token store's schema on a connection of the publisher's. */
	pub = publisher(&e, e.pub_url);

	publish(pub, 0, N);
	done_t d = {&e, N};
	cr_assert(tt_drive(&w, 1, all_done, &d, 10, 120),
		  "the first records were not processed");
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.store_reconnects, 0);
	cr_assert_eq(fx_count(e.sschema, "tbx_alarms"), 0);

	/* The server ends the worker's sessions, and the publisher's. */
	fx_terminate(spg);
	if (apart)
		fx_terminate(tpg);
	fx_terminate_app(e.pub_app);
	publish(pub, N, N);
	tbx_publisher_stats(pub, &ps);
	cr_assert_eq(ps.store_reconnects, 1, "publisher reconnects: %llu",
		     (unsigned long long)ps.store_reconnects);
	copy_all(&e);
	d.n = 2 * N;
	cr_assert(tt_drive(&w, 1, all_done, &d, 10, 120),
		  "not every record was processed after the connection loss");
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));

	/* Each record once (the UNIQUE columns refuse a second effect). */
	cr_assert_eq(fx_count(e.sschema, "effects"), 2 * N);
	cr_assert_eq(fx_count(e.sschema, "tbx_outbox"), 0);
	cr_assert_eq(fx_count(e.tschema, "tbx_tokens"), 0);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.processed, 2 * N);
	cr_assert_geq(st.store_reconnects, apart ? 2 : 1,
		      "store_reconnects: %llu",
		      (unsigned long long)st.store_reconnects);
	cr_assert_eq(st.store_reconnects,
		     tbx__pg_reconnects(spg) +
			 (apart ? tbx__pg_reconnects(tpg) : 0));
	/* In the metrics too. */
	prom_want_t pw = {&e, "tokenbox_store_reconnects_total{group=\"g\"}",
			  (int64_t)st.store_reconnects};
	cr_assert(tt_drive(&w, 1, prom_reached, &pw, 10, 60),
		  "metrics: %" PRId64 ", stats: %llu", prom_value(&e, pw.name),
		  (unsigned long long)st.store_reconnects);

	/* The alarm, one row per group and name, without a password. */
	cr_assert_eq(fx_count(e.sschema,
			      "tbx_alarms WHERE grp = 'g' AND name = "
			      "'store_reconnect'"),
		     1);
	cr_assert_geq(fx_int("max(count)", e.sschema,
			     "tbx_alarms WHERE name = 'store_reconnect'"),
		      1);
	cr_assert_leq(fx_int("max(count)", e.sschema,
			     "tbx_alarms WHERE name = 'store_reconnect'"),
		      (int64_t)st.store_reconnects,
		      "more alarms than reconnects");
	cr_assert_eq(fx_count(e.sschema,
			      "tbx_alarms WHERE name = 'store_reconnect' AND "
			      "detail LIKE '%was lost and made again%'"),
		     1);
	cr_assert_eq(fx_count(e.sschema, "tbx_alarms WHERE detail ILIKE "
					 "'%password%'"),
		     0);
	tbx_publisher_destroy(pub);
	tbx_worker_destroy(w);
	env_fini(&e);
}

Test(pg_reconnect, a_worker_goes_on_after_its_session_is_ended_joined)
{
	survives_terminate("rj", 0);
}

Test(pg_reconnect, a_worker_goes_on_after_its_sessions_are_ended_apart)
{
	survives_terminate("ra", 1);
}

static void fx_sqlite_exec(const char *path, const char *sql)
{
	sqlite3 *db;
	char *msg = NULL;

	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s",
		     msg ? msg : "");
	sqlite3_close(db);
}

typedef struct sqlite_done {
	const char *store;
	int64_t n;
} sqlite_done_t;

static int sqlite_all_done(void *opaque)
{
	sqlite_done_t *d = opaque;

	return tt_query(d->store, "SELECT count(*) FROM effects") >= d->n &&
	       tt_query(d->store, "SELECT count(*) FROM tbx_outbox") == 0;
}

/* An SQLite service store with the token store on PostgreSQL: the token
 * store's session ended, the alarm lands in the service store's file,
 * where `inspect status --check` flags it. */
Test(pg_reconnect, inspect_check_flags_a_lost_token_store_connection)
{
	enum { N = 10 };
	env_t e;
	char err[512], *store;
	tbx_worker_t *w;
	tbx_publisher_t *pub;
	tbx_stats_t st;
	cc_result_t res;

	env_init(&e, "rs");
	store = tt_path(e.dir, "s.db");
	w = tbx_worker_new(tt_conf(e.cluster->bootstraps, "g", store, NULL,
				   "tokens.url", e.url, "tokens.schema",
				   e.tschema, "tokens.create", "true", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_null(tbx_outbox_pg(w->store));
	cr_assert_eq(tbx_worker_register(w, "in", NULL, effect_handle, NULL),
		     TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK, "%s",
		     tbx_worker_errstr(w));
	fx_sqlite_exec(store,
		       "CREATE TABLE effects(msg_id TEXT NOT NULL UNIQUE, "
		       "payload TEXT NOT NULL UNIQUE)");
	snprintf(insert_sql, sizeof(insert_sql),
		 "INSERT INTO effects(msg_id, payload) VALUES ($1, $2)");
	pub = publisher(&e, e.pub_url);
	publish(pub, 0, N);
	sqlite_done_t d = {store, N};
	cr_assert(tt_drive(&w, 1, sqlite_all_done, &d, 10, 120));

	fx_terminate(tbx_tokens_pg(w->tokens));
	publish(pub, N, N);
	d.n = 2 * N;
	cr_assert(tt_drive(&w, 1, sqlite_all_done, &d, 10, 120),
		  "not every record was processed after the connection loss");
	cr_assert_eq(tt_count(store, "SELECT count(*) FROM effects"), 2 * N);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.store_reconnects, 1, "store_reconnects: %llu",
		     (unsigned long long)st.store_reconnects);
	cr_assert_eq(tt_count(store, "SELECT count(*) FROM tbx_alarms WHERE "
				     "grp = 'g' AND name = 'store_reconnect' "
				     "AND detail LIKE '%token store%'"),
		     1);
	tbx_publisher_destroy(pub);
	tbx_worker_destroy(w);

	const char *args[] = {"inspect", "--store", store,
			      "status",	 "--check", NULL};
	res = cc_run(args);
	cr_assert(cc_exited(res.status, 1), "status %d: %s%s", res.status,
		  res.out, res.err);
	cr_assert(strstr(res.out, "store_reconnect"), "%s", res.out);
	cc_result_free(&res);
	free(store);
	env_fini(&e);
}
