/*
 * A worker whose stores are on PostgreSQL (store.url), on the in-process
 * mock cluster: every record takes effect once, copies included, with the
 * token store joined (the service store's connection) and apart (a
 * connection of its own); a handler that commits on tbx_ctx_pg() stops
 * the worker loudly, one that breaks the record's savepoint has its record
 * dead-lettered, and tbx_ctx_exec() refuses COMMIT before the server sees
 * it; the orders example runs unchanged.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_child.h"
#include "consumer/stores.h"
#include "consumer/worker.h"
#include "fixture.h"

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

TestSuite(pg_worker, .init = fx_setup, .fini = fx_teardown);

static void fx_exec(const char *sql)
{
	PGresult *r = PQexec(raw, sql);

	cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK ||
		      PQresultStatus(r) == PGRES_TUPLES_OK,
		  "%s: %s", sql, PQresultErrorMessage(r));
	PQclear(r);
}

/* The integer "SELECT count(*) FROM \"<schema>\".<rest>" returns; -1
 * when it fails (a table not there yet). */
static int64_t fx_count(const char *schema, const char *rest)
{
	char sql[512];
	PGresult *r;
	int64_t n = -1;

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM \"%s\".%s", schema,
		 rest);
	r = PQexec(raw, sql);
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return n;
}

/* The test's world: a cluster, a service schema, a token schema. */
typedef struct env {
	tt_cluster_t *cluster;
	char sschema[64], tschema[64];
	char url[1024];	      /* the server's URL */
	char apart_url[1100]; /* the same database, spelt otherwise */
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
}

/* A worker of group g on the schemas of @p e; @p tokens_url NULL: joined
 * (tokens.url unset).  Its first poll subscribes the group. */
static tbx_worker_t *worker(env_t *e, const char *tokens_url, tbx_handler_fn fn,
			    void *opaque)
{
	char err[512];
	tbx_conf_t *conf =
	    tt_conf(e->cluster->bootstraps, "g", NULL, NULL, "store.url",
		    e->url, "store.schema", e->sschema, "tokens.schema",
		    e->tschema, "tokens.create", "true", NULL);
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

/* Publishes @p cnt records to "in" (payloads "0", "1", … unless given),
 * with tokens from the token schema of @p e at @p tokens_url. */
static void publish(env_t *e, const char *tokens_url, size_t cnt,
		    const char *const *payloads)
{
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;
	char err[512], num[16];

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
	for (size_t i = 0; i < cnt; i++) {
		const char *p = payloads ? payloads[i] : num;
		tbx_out_t out = {
		    .topic = "in", .type = "Hit", .key = "k", .key_len = 1};

		snprintf(num, sizeof(num), "%zu", i);
		out.payload = p;
		out.payload_len = strlen(p);
		cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	}
	cr_assert_eq(tbx_publisher_flush(pub, NULL), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	tbx_publisher_destroy(pub);
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

/* The handler's table, in the service schema. */
static void effects_table(env_t *e)
{
	char sql[256];

	snprintf(sql, sizeof(sql),
		 "CREATE TABLE \"%s\".effects(msg_id TEXT NOT NULL, payload "
		 "TEXT)",
		 e->sschema);
	fx_exec(sql);
}

typedef struct effect {
	char insert[256];
	int calls;
	int refused; /* tbx_ctx_exec("COMMIT") gave TBX_EINVAL */
	int pg_conn; /* tbx_ctx_pg() was not NULL, tbx_ctx_db() NULL */
} effect_t;

static void effect_init(effect_t *f, const env_t *e)
{
	memset(f, 0, sizeof(*f));
	snprintf(f->insert, sizeof(f->insert),
		 "INSERT INTO \"%s\".effects(msg_id, payload) VALUES ($1, $2)",
		 e->sschema);
}

/* One row per call through tbx_ctx_exec(). */
static tbx_verdict_t effect_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				   void *opaque)
{
	effect_t *f = opaque;
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);
	char text[64];
	const char *params[2] = {tbx_msg_id(msg), text};
	int64_t changes = 0;

	f->calls++;
	f->pg_conn += tbx_ctx_pg(ctx) != NULL && tbx_ctx_db(ctx) == NULL;
	snprintf(text, sizeof(text), "%.*s", (int)len, payload ? payload : "");
	if (tbx_ctx_exec(ctx, f->insert, params, 2, &changes) != TBX_OK ||
	    changes != 1)
		return TBX_VERDICT_RETRY;
	return TBX_VERDICT_OK;
}

typedef struct done {
	const env_t *e;
	int64_t n;
	int64_t dead; /* dead letters recorded, at least */
} done_t;

static int all_done(void *opaque)
{
	done_t *d = opaque;

	return fx_count(d->e->sschema, "effects") >= d->n &&
	       fx_count(d->e->sschema, "tbx_outbox") == 0 &&
	       (d->dead == 0 ||
		fx_count(d->e->sschema, "tbx_dead_letters") >= d->dead);
}

/* N records and a copy of each: N effects, each once; nothing left in
 * either store. */
static void exactly_once(const char *tag, int apart)
{
	enum { N = 40 };
	env_t e;
	effect_t f;
	tbx_worker_t *w;
	tbx_stats_t st;

	env_init(&e, tag);
	effect_init(&f, &e);
	w = worker(&e, apart ? e.apart_url : NULL, effect_handle, &f);
	cr_assert_eq(w->joined, !apart, "joined: %d", w->joined);
	effects_table(&e);
	publish(&e, apart ? e.apart_url : e.url, N, NULL);
	copy_all(&e);
	done_t d = {&e, N, 0};
	cr_assert(tt_drive(&w, 1, all_done, &d, 10, 120),
		  "not every record was processed");
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));
	cr_assert_eq(fx_count(e.sschema, "effects"), N);
	/* One call per message, each with its effect: no second run. */
	cr_assert_eq(f.calls, N, "handler calls: %d", f.calls);
	cr_assert_eq(fx_count(e.sschema, "tbx_outbox"), 0);
	cr_assert_eq(fx_count(e.tschema, "tbx_tokens"), 0);
	cr_assert_eq(f.pg_conn, f.calls);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.processed, N);
	cr_assert_geq(st.duplicates_dropped + st.resumed, N,
		      "the copies were not dropped");
	cr_assert_eq(st.handler_refused, 0);
	tbx_worker_destroy(w);
	env_fini(&e);
}

Test(pg_worker, every_record_takes_effect_once_joined)
{
	exactly_once("wj", 0);
}

Test(pg_worker, every_record_takes_effect_once_apart)
{
	exactly_once("wa", 1);
}

/* COMMIT on tbx_ctx_pg() for the record "commit"; the others write an
 * effect first. */
static tbx_verdict_t commit_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				   void *opaque)
{
	effect_t *f = opaque;
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);
	PGconn *conn;

	if (effect_handle(ctx, msg, opaque) != TBX_VERDICT_OK)
		return TBX_VERDICT_RETRY;
	if (payload && len == 6 && memcmp(payload, "commit", 6) == 0) {
		conn = (PGconn *)tbx_ctx_pg(ctx);
		PQclear(PQexec(conn, "COMMIT"));
		f->refused++; /* counts the COMMITs run */
	}
	return TBX_VERDICT_OK;
}

Test(pg_worker, a_handler_that_commits_stops_the_worker_loudly)
{
	static const char *const payloads[] = {"a", "commit", "b"};
	env_t e;
	effect_t f;
	tbx_worker_t *w;
	tbx_stats_t st;
	int err = TBX_OK;

	env_init(&e, "wc");
	effect_init(&f, &e);
	w = worker(&e, NULL, commit_handle, &f);
	effects_table(&e);
	publish(&e, e.url, 3, payloads);
	for (int i = 0; i < 2000 && err == TBX_OK && f.refused == 0; i++)
		err = tbx_worker_poll(w, 50, NULL);
	if (err == TBX_OK)
		err = tbx_worker_poll(w, 50, NULL);
	cr_assert_eq(f.refused, 1, "the handler never committed");
	cr_assert_eq(err, TBX_ESTATE, "poll gave %s: %s", tbx_strerror(err),
		     tbx_worker_errstr(w));
	cr_assert(strstr(tbx_worker_errstr(w), "ended the worker's "
					       "transaction") &&
		      strstr(tbx_worker_errstr(w), "in ["),
		  "%s", tbx_worker_errstr(w));
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.handler_ended_txn, 1);
	cr_assert_eq(fx_count(e.sschema, "tbx_alarms WHERE name = "
					 "'handler_ended_txn'"),
		     1, "inspect status --check does not see it");
	/* The record's effect committed without its outbox row: what the
	 * stop is for. */
	cr_assert_eq(fx_count(e.sschema, "effects WHERE "
					 "payload = 'commit'"),
		     1);
	tbx_worker_destroy(w);
	env_fini(&e);
}

/* tbx_ctx_exec() refuses COMMIT; the effect commits once with its row. */
static tbx_verdict_t exec_commit_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
					void *opaque)
{
	effect_t *f = opaque;

	if (tbx_ctx_exec(ctx, "COMMIT", NULL, 0, NULL) == TBX_EINVAL)
		f->refused++;
	if (tbx_ctx_exec(ctx, "  end", NULL, 0, NULL) == TBX_EINVAL)
		f->refused++;
	return effect_handle(ctx, msg, opaque);
}

Test(pg_worker, tbx_ctx_exec_refuses_commit)
{
	env_t e;
	effect_t f;
	tbx_worker_t *w;
	tbx_stats_t st;

	env_init(&e, "we");
	effect_init(&f, &e);
	w = worker(&e, NULL, exec_commit_handle, &f);
	effects_table(&e);
	publish(&e, e.url, 2, NULL);
	done_t d = {&e, 2, 0};
	cr_assert(tt_drive(&w, 1, all_done, &d, 10, 120));
	cr_assert_eq(f.refused, 4);
	cr_assert_eq(f.calls, 2, "handlers ran again");
	cr_assert_eq(fx_count(e.sschema, "effects"), 2);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.handler_refused, 4);
	cr_assert_eq(st.handler_ended_txn, 0);
	tbx_worker_destroy(w);
	env_fini(&e);
}

/* RELEASE of tokenbox's savepoint on tbx_ctx_pg() for the record
 * "release": the batch rolls back, that record is dead-lettered without
 * its handler, the others take effect once. */
static tbx_verdict_t release_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				    void *opaque)
{
	effect_t *f = opaque;
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);

	if (effect_handle(ctx, msg, opaque) != TBX_VERDICT_OK)
		return TBX_VERDICT_RETRY;
	if (payload && len == 7 && memcmp(payload, "release", 7) == 0) {
		PGconn *conn = (PGconn *)tbx_ctx_pg(ctx);
		PQclear(PQexec(conn, "RELEASE SAVEPOINT tbx_msg"));
		f->refused++;
	}
	return TBX_VERDICT_OK;
}

Test(pg_worker, a_handler_that_releases_the_savepoint_is_dead_lettered)
{
	static const char *const payloads[] = {"a", "release", "b"};
	env_t e;
	effect_t f;
	tbx_worker_t *w;
	tt_record_t *recs;
	size_t cnt;

	env_init(&e, "wr");
	effect_init(&f, &e);
	w = worker(&e, NULL, release_handle, &f);
	effects_table(&e);
	publish(&e, e.url, 3, payloads);
	done_t d = {&e, 2, 0};
	cr_assert(tt_drive(&w, 1, all_done, &d, 10, 120));
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));
	cr_assert_eq(fx_count(e.sschema, "effects"), 2);
	cr_assert_eq(fx_count(e.sschema, "effects WHERE "
					 "payload = 'release'"),
		     0);
	cr_assert_eq(f.refused, 1, "the handler ran again");
	cnt = tt_read_topic(e.cluster->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 1);
	cr_assert_str_eq(recs[0].payload, "release");
	cr_assert(recs[0].dlq_error && strstr(recs[0].dlq_error, "savepoint"),
		  "%s", recs[0].dlq_error ? recs[0].dlq_error : "(none)");
	tt_records_free(recs, cnt);
	tbx_worker_destroy(w);
	env_fini(&e);
}

/* Writes the effect on tbx_ctx_pg() itself; the record "reject" then
 * gives REJECT, the record "fail" runs a statement that fails first. */
static tbx_verdict_t raw_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				void *opaque)
{
	effect_t *f = opaque;
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);
	PGconn *conn = (PGconn *)tbx_ctx_pg(ctx);
	char text[64];
	const char *params[2] = {tbx_msg_id(msg), text};
	PGresult *res;
	int ok;

	f->calls++;
	snprintf(text, sizeof(text), "%.*s", (int)len, payload ? payload : "");
	res = PQexecParams(conn, f->insert, 2, NULL, params, NULL, NULL, 0);
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	PQclear(res);
	if (!ok)
		return TBX_VERDICT_RETRY;
	if (!strcmp(text, "fail"))
		PQclear(PQexec(conn, "SELECT 1 / 0"));
	return strcmp(text, "reject") && strcmp(text, "fail")
		   ? TBX_VERDICT_OK
		   : TBX_VERDICT_REJECT;
}

/* The record's savepoint is in place before the handler's first
 * statement on tbx_ctx_pg(), although tokenbox sends it with a later
 * round trip: a rejected record's writes roll back, and only its. */
Test(pg_worker, a_rejected_record_undoes_only_its_writes_on_tbx_ctx_pg)
{
	static const char *const payloads[] = {"a", "reject", "b", "fail", "c"};
	env_t e;
	effect_t f;
	tbx_worker_t *w;
	tt_record_t *recs;
	size_t cnt;

	env_init(&e, "wx");
	effect_init(&f, &e);
	w = worker(&e, NULL, raw_handle, &f);
	effects_table(&e);
	publish(&e, e.url, 5, payloads);
	/* Done when both rejected records' dead letters are recorded and
	 * sent, not when the worker merely looks idle. */
	done_t d = {&e, 3, 2};
	cr_assert(tt_drive(&w, 1, all_done, &d, 10, 120));
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));
	cnt = tt_read_topic(e.cluster->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 2, "dead letters: %zu", cnt);
	tt_records_free(recs, cnt);
	cr_assert_eq(fx_count(e.sschema, "effects WHERE payload IN "
					 "('reject', 'fail')"),
		     0, "a rejected record's write committed");
	cr_assert_eq(fx_count(e.sschema, "effects"), 3);
	cr_assert_eq(fx_count(e.sschema, "effects WHERE payload IN "
					 "('a', 'b', 'c')"),
		     3);
	tbx_worker_destroy(w);
	env_fini(&e);
}

/* Without search_path in the URL, a handler's unqualified table is the
 * service schema's (store.schema), not public's. */
Test(pg_worker, unqualified_tables_are_the_service_schemas_by_default)
{
	env_t e;
	effect_t f;
	tbx_worker_t *w;

	env_init(&e, "wp");
	effect_init(&f, &e);
	snprintf(f.insert, sizeof(f.insert),
		 "INSERT INTO effects(msg_id, payload) VALUES ($1, $2)");
	w = worker(&e, NULL, effect_handle, &f);
	effects_table(&e);
	publish(&e, e.url, 3, NULL);
	done_t d = {&e, 3, 0};
	cr_assert(tt_drive(&w, 1, all_done, &d, 10, 120),
		  "the handler's unqualified table was not found");
	cr_assert_eq(fx_count(e.sschema, "effects"), 3);
	tbx_worker_destroy(w);
	env_fini(&e);
}

/* The orders example, unchanged, on PostgreSQL: each service's store in
 * a schema of its own, which its handlers' unqualified tables reach
 * through the connection's search_path; the token store joined to each
 * (one database). */
typedef struct orders_done {
	const char *so, *sp;
	int64_t n;
} orders_done_t;

static int orders_all_done(void *opaque)
{
	orders_done_t *d = opaque;

	return fx_count(d->so, "orders") >= d->n &&
	       fx_count(d->sp, "payments") >= d->n &&
	       fx_count(d->so, "tbx_outbox") == 0 &&
	       fx_count(d->sp, "tbx_outbox") == 0;
}

Test(pg_worker, the_orders_example_runs_on_postgresql)
{
	enum { N = 30 };
	env_t e;
	char so[64], sp[64], url[2][1200], err[512];
	const char *schemas[2] = {so, sp};
	const char *groups[2] = {"order-service", "payment-service"};
	tt_plugin_t plugin;
	tbx_worker_t *w[2];
	tbx_conf_t *conf;
	tbx_publisher_t *pub;

	env_init(&e, "wo");
	tt_cluster_topic(e.cluster, "orders", 2);
	tt_cluster_topic(e.cluster, "payments", 2);
	tt_cluster_topic(e.cluster, "orders.dlq", 1);
	tt_cluster_topic(e.cluster, "payments.dlq", 1);
	tt_pg_schema(so, sizeof(so), "wo_o");
	tt_pg_schema(sp, sizeof(sp), "wo_p");
	tt_plugin_open(&plugin, "libtbx_orders.so");
	for (int i = 0; i < 2; i++) {
		char args[64];

		snprintf(url[i], sizeof(url[i]),
			 "%s%soptions=-csearch_path%%3D%s", e.url,
			 strchr(e.url, '?') ? "&" : "?", schemas[i]);
		conf = tt_conf(e.cluster->bootstraps, groups[i], NULL, NULL,
			       "store.url", url[i], "store.schema", schemas[i],
			       "tokens.schema", e.tschema, "tokens.create",
			       "true", NULL);
		w[i] = tbx_worker_new(conf, err, sizeof(err));
		cr_assert(w[i], "%s", err);
		cr_assert(w[i]->joined);
		snprintf(args, sizeof(args), "role=%s", groups[i]);
		cr_assert_eq(plugin.init(w[i], args), TBX_OK);
		cr_assert_eq(tbx_worker_poll(w[i], 0, NULL), TBX_OK, "%s",
			     tbx_worker_errstr(w[i]));
	}
	conf = tbx_conf_new();
	cr_assert_eq(tbx_conf_set(conf, "kafka.bootstrap.servers",
				  e.cluster->bootstraps, err, sizeof(err)),
		     TBX_OK);
	cr_assert_eq(tbx_conf_set(conf, "tokens.url", e.url, err, sizeof(err)),
		     TBX_OK);
	cr_assert_eq(
	    tbx_conf_set(conf, "tokens.schema", e.tschema, err, sizeof(err)),
	    TBX_OK);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "%s", err);
	for (int i = 1; i <= N; i++) {
		char payload[64], key[32];
		tbx_out_t out = {.topic = "orders", .type = "OrderPlaced"};

		snprintf(payload, sizeof(payload),
			 "{\"order\": \"%d\", \"amount\": %d}", i, 100 + i);
		snprintf(key, sizeof(key), "customer-%d", i % 5);
		out.key = key;
		out.key_len = strlen(key);
		out.payload = payload;
		out.payload_len = strlen(payload);
		cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	}
	cr_assert_eq(tbx_publisher_flush(pub, NULL), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	tbx_publisher_destroy(pub);
	orders_done_t d = {so, sp, N};
	cr_assert(tt_drive(w, 2, orders_all_done, &d, 10, 180),
		  "orders %lld, payments %lld",
		  (long long)fx_count(so, "orders"),
		  (long long)fx_count(sp, "payments"));
	cr_assert(tt_drive(w, 2, NULL, NULL, 10, 60));
	cr_assert_eq(fx_count(so, "orders"), N);
	cr_assert_eq(fx_count(sp, "payments"), N);
	cr_assert_eq(fx_count(so, "orders WHERE amount = 100 + "
				  "order_no::bigint"),
		     N, "BIGINT amounts");
	for (int i = 0; i < 2; i++)
		tbx_worker_destroy(w[i]);
	tt_plugin_close(&plugin);
	for (int i = 0; i < 2; i++) {
		char sql[128];
		snprintf(sql, sizeof(sql), "DROP SCHEMA \"%s\" CASCADE",
			 schemas[i]);
		fx_exec(sql);
	}
	env_fini(&e);
}

/* Another process that does not take A's message lock commits the
 * outbox row of the record while its handler runs (here: the test's own
 * connection): the insert conflicts, the record's savepoint is rolled
 * back with the handler's effect, and the committed row is resumed. */
typedef struct intruder {
	effect_t f;
	const char *schema;
	int inserted;
} intruder_t;

static tbx_verdict_t intruder_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				     void *opaque)
{
	intruder_t *in = opaque;
	const void *token;
	size_t len;
	char sql[512], tok[64], part[16], off[24];
	const char *params[5];
	PGresult *r;

	if (effect_handle(ctx, msg, &in->f) != TBX_VERDICT_OK)
		return TBX_VERDICT_RETRY;
	cr_assert_eq(tbx_msg_header(msg, "tbx-token", &token, &len), TBX_OK);
	snprintf(tok, sizeof(tok), "%.*s", (int)len, (const char *)token);
	snprintf(part, sizeof(part), "%d", (int)tbx_msg_partition(msg));
	snprintf(off, sizeof(off), "%lld", (long long)tbx_msg_offset(msg));
	params[0] = tbx_msg_id(msg);
	params[1] = tbx_msg_topic(msg);
	params[2] = part;
	params[3] = off;
	params[4] = tok;
	snprintf(sql, sizeof(sql),
		 "INSERT INTO \"%s\".tbx_outbox (grp, msg_id, in_topic, "
		 "in_partition, in_offset, in_token, kind, created_ms) VALUES "
		 "('g', $1, $2, $3, $4, $5, 0, 1)",
		 in->schema);
	r = PQexecParams(raw, sql, 5, NULL, params, NULL, NULL, 0);
	in->inserted += PQresultStatus(r) == PGRES_COMMAND_OK;
	cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s",
		     PQresultErrorMessage(r));
	PQclear(r);
	return TBX_VERDICT_OK;
}

static int intruder_done(void *opaque)
{
	intruder_t *in = opaque;

	return in->inserted >= 1 && fx_count(in->schema, "tbx_outbox") == 0;
}

Test(pg_worker, a_row_committed_by_a_worker_without_the_lock_is_resumed)
{
	env_t e;
	intruder_t in;
	tbx_worker_t *w;
	tbx_stats_t st;

	env_init(&e, "wi");
	effect_init(&in.f, &e);
	in.schema = e.sschema;
	in.inserted = 0;
	w = worker(&e, NULL, intruder_handle, &in);
	effects_table(&e);
	publish(&e, e.url, 1, NULL);
	cr_assert(tt_drive(&w, 1, intruder_done, &in, 10, 120));
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));
	cr_assert_eq(in.inserted, 1);
	cr_assert_eq(in.f.calls, 1);
	/* The handler's effect went with its savepoint; the intruder's row
	 * was finished (its token consumed, the row deleted). */
	cr_assert_eq(fx_count(e.sschema, "effects"), 0);
	cr_assert_eq(fx_count(e.sschema, "tbx_outbox"), 0);
	cr_assert_eq(fx_count(e.tschema, "tbx_tokens"), 0);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.rows_conflicted, 1);
	cr_assert_eq(fx_count(e.sschema, "tbx_alarms WHERE name = "
					 "'row_conflict' AND count = 1"),
		     1, "inspect status --check does not see it");
	cr_assert_eq(st.resumed, 1);
	cr_assert_eq(st.processed, 0);
	tbx_worker_destroy(w);
	env_fini(&e);
}

/* --check-config on PostgreSQL: a service schema not there yet is what
 * the worker makes; a token schema not there is an error without
 * tokens.create; a server that does not answer is named without the
 * password; nothing is created. */
Test(pg_worker, check_config_connects_read_only_and_creates_nothing)
{
	env_t e;
	char err[1024];
	tbx_conf_t *conf;

	env_init(&e, "wk");
	conf = tt_conf(e.cluster->bootstraps, "g", NULL, NULL, "store.url",
		       e.url, "store.schema", e.sschema, "tokens.schema",
		       e.tschema, NULL);
	cr_assert_neq(tbx__stores_check(tbx__conf_cfg(conf), err, sizeof(err)),
		      TBX_OK);
	cr_assert(strstr(err, "tokens.create") && strstr(err, e.tschema), "%s",
		  err);
	cr_assert_eq(
	    tbx_conf_set(conf, "tokens.create", "true", err, sizeof(err)),
	    TBX_OK);
	cr_assert_eq(tbx__stores_check(tbx__conf_cfg(conf), err, sizeof(err)),
		     TBX_OK, "%s", err);
	{
		char sql[256];
		PGresult *r;

		snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM pg_namespace WHERE nspname IN "
			 "('%s', '%s')",
			 e.sschema, e.tschema);
		r = PQexec(raw, sql);
		cr_assert_str_eq(PQgetvalue(r, 0, 0), "0",
				 "--check-config created a schema");
		PQclear(r);
	}
	cr_assert_eq(tbx_conf_set(conf, "store.url",
				  "postgresql://tokenbox:s3cret@/tokenbox?host="
				  "/nonexistent&connect_timeout=2",
				  err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_neq(tbx__stores_check(tbx__conf_cfg(conf), err, sizeof(err)),
		      TBX_OK);
	cr_assert(strstr(err, "store.url"), "%s", err);
	cr_assert_null(strstr(err, "s3cret"), "%s", err);
	tbx_conf_destroy(conf);
	env_fini(&e);
}

/* The schemas of @p e there now (0, 1 or 2). */
static int schemas_there(const env_t *e)
{
	char sql[256];
	PGresult *r;
	int n;

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM pg_namespace WHERE nspname IN "
		 "('%s', '%s')",
		 e->sschema, e->tschema);
	r = PQexec(raw, sql);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s",
		     PQresultErrorMessage(r));
	n = atoi(PQgetvalue(r, 0, 0));
	PQclear(r);
	return n;
}

/* A start refused for a token store that is not there (joined, on its
 * own connection, or an SQLite file) is TBX_ENOENT, as --check-config
 * says, and creates no service schema. */
Test(pg_worker, a_start_refused_for_a_missing_token_store_creates_nothing)
{
	char *dir = tt_tmpdir(), *file = tt_path(dir, "tokens.db");
	const char *how[] = {"joined", "apart", "file"};
	env_t e;

	env_init(&e, "wn");
	for (size_t i = 0; i < 3; i++) {
		tbx_conf_t *conf =
		    tt_conf(e.cluster->bootstraps, "g", NULL, NULL, "store.url",
			    e.url, "store.schema", e.sschema, "tokens.schema",
			    e.tschema, "tokens.create", "false", NULL);
		char err[1024];
		int code = TBX_OK;

		if (i == 1)
			cr_assert_eq(tbx_conf_set(conf, "tokens.url",
						  e.apart_url, err,
						  sizeof(err)),
				     TBX_OK, "%s", err);
		if (i == 2)
			cr_assert_eq(tbx_conf_set(conf, "tokens.path", file,
						  err, sizeof(err)),
				     TBX_OK, "%s", err);
		cr_assert_neq(
		    tbx__stores_check(tbx__conf_cfg(conf), err, sizeof(err)),
		    TBX_OK, "%s: --check-config passed", how[i]);
		cr_assert_null(
		    tbx__worker_new_err(conf, &code, err, sizeof(err)), "%s",
		    how[i]);
		cr_expect_eq(code, TBX_ENOENT, "%s: %d: %s", how[i], code, err);
		cr_expect(strstr(err, "does not exist"), "%s: %s", how[i], err);
		cr_expect_eq(schemas_there(&e), 0,
			     "%s: a refused start created a schema", how[i]);
		cr_expect(access(file, F_OK) != 0, "%s: %s was created", how[i],
			  file);
		tbx_conf_destroy(conf);
	}
	env_fini(&e);
	tt_rmrf(dir);
	free(dir);
	free(file);
}

/* `tokenbox inspect -s URL --schema S --tokens-schema T status --check
 * --json`. */
static cc_result_t inspect_pair(const env_t *e, const char *schema,
				const char *tschema)
{
	const char *args[] = {"inspect",  "-s",	    e->url,
			      "--schema", schema,   "--tokens-schema",
			      tschema,	  "status", "--check",
			      "--json",	  NULL};

	return cc_run_with(args, NULL, 0, 120000);
}

/* The problems inspect's --json names in store_pair, comma-separated
 * (malloc'ed); "" when ok. */
static char *pair_problems(const cc_result_t *res)
{
	cJSON *doc = cJSON_Parse(res->out), *p;
	char out[512] = "";
	size_t n = 0;

	cr_assert(doc, "%s%s", res->out, res->err);
	cJSON_ArrayForEach(
	    p, cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "store_pair"),
				   "problems"))
	{
		n += (size_t)snprintf(
		    out + n, sizeof(out) - n, "%s%s", n ? "," : "",
		    cJSON_GetObjectItem(p, "problem")->valuestring);
	}
	cJSON_Delete(doc);
	return strdup(out);
}

/* inspect compares the schemas given with the token store the service
 * schema's workers recorded: another token schema is named, a token
 * schema given as the service store is refused by its kind. */
Test(pg_worker, inspect_says_when_it_is_given_the_wrong_pair_of_schemas,
     .timeout = 240)
{
	char other[80];
	cc_result_t res;
	tbx_worker_t *w;
	char *got;
	env_t e;

	env_init(&e, "wp");
	/* Opening the stores records the token store. */
	{
		char err[512];

		w = tbx_worker_new(
		    tt_conf(e.cluster->bootstraps, "g", NULL, NULL, "store.url",
			    e.url, "store.schema", e.sschema, "tokens.schema",
			    e.tschema, "tokens.create", "true", NULL),
		    err, sizeof(err));
		cr_assert(w, "%s", err);
		tbx_worker_destroy(w);
	}
	snprintf(other, sizeof(other), "%s_o", e.tschema);
	{
		const char *init[] = {
		    "init", "--tokens", e.url, "--tokens-schema", other, NULL};
		res = cc_run_with(init, NULL, 0, 120000);
		cr_assert(cc_exited(res.status, 0), "%s", res.err);
		cc_result_free(&res);
	}

	res = inspect_pair(&e, e.sschema, e.tschema);
	got = pair_problems(&res);
	cr_expect(cc_exited(res.status, 0), "%d: %s", res.status, res.err);
	cr_expect_str_eq(got, "");
	free(got);
	cc_result_free(&res);

	res = inspect_pair(&e, e.sschema, other);
	got = pair_problems(&res);
	cr_expect(cc_exited(res.status, 1), "%d: %s", res.status, res.err);
	cr_expect_str_eq(got, "token_store_mismatch");
	cr_expect(strstr(res.out, e.tschema), "%s", res.out);
	free(got);
	cc_result_free(&res);

	/* Swapped: the kinds of the schemas tell. */
	res = inspect_pair(&e, e.tschema, e.sschema);
	cr_expect(cc_exited(res.status, 2), "%d: %s", res.status, res.err);
	cr_expect(strstr(res.err, "not a service store"), "%s", res.err);
	cc_result_free(&res);

	{
		char sql[256];

		snprintf(sql, sizeof(sql),
			 "DROP SCHEMA IF EXISTS \"%s\" CASCADE", other);
		fx_exec(sql);
	}
	env_fini(&e);
}

/* A publisher never creates the token store: a missing token schema is
 * refused, saying how to make it. */
Test(pg_worker, a_publisher_never_creates_the_token_store)
{
	env_t e;
	tbx_conf_t *conf = tbx_conf_new();
	char err[1024];

	env_init(&e, "wp");
	cr_assert_eq(tbx_conf_set(conf, "kafka.bootstrap.servers",
				  e.cluster->bootstraps, err, sizeof(err)),
		     TBX_OK);
	cr_assert_eq(tbx_conf_set(conf, "tokens.url", e.url, err, sizeof(err)),
		     TBX_OK);
	cr_assert_eq(
	    tbx_conf_set(conf, "tokens.schema", e.tschema, err, sizeof(err)),
	    TBX_OK);
	cr_assert_null(tbx_publisher_new(conf, err, sizeof(err)));
	cr_assert(strstr(err, "never creates") && strstr(err, e.tschema), "%s",
		  err);
	tbx_conf_destroy(conf);
	env_fini(&e);
}

/* Two workers of one group, each on a thread of its own, with every
 * message also in the other partition (an upstream re-send that landed
 * elsewhere): both may hold copies of a message at once, and A's message
 * locks let one take effect.  Outcomes only: whether the copies overlap
 * in time is up to the scheduler. */
typedef struct runner {
	tbx_worker_t *w;
	volatile int *stop;
	int err;
	pthread_t thread;
} runner_t;

static void *runner_main(void *arg)
{
	runner_t *r = arg;

	while (!*r->stop && !r->err)
		r->err = tbx_worker_poll(r->w, 20, NULL);
	return NULL;
}

Test(pg_worker, copies_in_two_partitions_on_two_threads_take_effect_once)
{
	enum { N = 200 };
	env_t e;
	effect_t f[2];
	runner_t r[2];
	volatile int stop = 0;
	tt_record_t *recs;
	size_t cnt;
	int ok = 0;

	env_init(&e, "wt");
	for (int i = 0; i < 2; i++) {
		effect_init(&f[i], &e);
		r[i].w = worker(&e, NULL, effect_handle, &f[i]);
		r[i].stop = &stop;
		r[i].err = TBX_OK;
		if (i == 0)
			effects_table(&e);
	}
	publish(&e, e.url, N, NULL);
	cnt = tt_read_topic(e.cluster->bootstraps, "in", &recs);
	for (size_t i = 0; i < cnt; i++)
		recs[i].partition = 1 - recs[i].partition;
	tt_reproduce(e.cluster->bootstraps, "in", recs, cnt);
	tt_records_free(recs, cnt);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(
		    pthread_create(&r[i].thread, NULL, runner_main, &r[i]), 0);
	for (int i = 0; i < 1200 * tt_time_factor() && !ok; i++) {
		ok = fx_count(e.sschema, "effects") >= N &&
		     fx_count(e.sschema, "tbx_outbox") == 0 &&
		     fx_count(e.tschema, "tbx_tokens") == 0;
		if (!ok)
			usleep(100 * 1000); /* polling the outcome */
	}
	stop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(r[i].thread, NULL);
	cr_assert(ok, "effects %lld, rows %lld",
		  (long long)fx_count(e.sschema, "effects"),
		  (long long)fx_count(e.sschema, "tbx_outbox"));
	for (int i = 0; i < 2; i++)
		cr_assert_eq(r[i].err, TBX_OK, "%s", tbx_strerror(r[i].err));
	cr_assert_eq(fx_count(e.sschema, "effects"), N);
	cr_assert_eq(f[0].calls + f[1].calls, N, "handler calls: %d + %d",
		     f[0].calls, f[1].calls);
	for (int i = 0; i < 2; i++)
		tbx_worker_destroy(r[i].w);
	env_fini(&e);
}

/* An SQLite service store with the token store on PostgreSQL
 * (store.path, tokens.url): the token store apart, each record once. */
static tbx_verdict_t sqlite_effect_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
					  void *opaque)
{
	int *calls = opaque;
	const char *id = tbx_msg_id(msg);

	(*calls)++;
	if (tbx_ctx_exec(ctx, "CREATE TABLE IF NOT EXISTS effects(msg_id TEXT)",
			 NULL, 0, NULL) ||
	    tbx_ctx_exec(ctx, "INSERT INTO effects(msg_id) VALUES ($1)", &id, 1,
			 NULL))
		return TBX_VERDICT_RETRY;
	return TBX_VERDICT_OK;
}

typedef struct sqlite_done {
	const char *store, *tschema;
	int64_t n;
} sqlite_done_t;

static int sqlite_all_done(void *opaque)
{
	sqlite_done_t *d = opaque;

	return tt_query(d->store, "SELECT count(*) FROM effects") >= d->n &&
	       tt_query(d->store, "SELECT count(*) FROM tbx_outbox") == 0 &&
	       fx_count(d->tschema, "tbx_tokens") == 0;
}

Test(pg_worker, an_sqlite_service_store_with_the_token_store_on_postgresql)
{
	enum { N = 20 };
	env_t e;
	char *dir = tt_tmpdir(), *store = tt_path(dir, "s.db"), err[512];
	tbx_worker_t *w;
	int calls = 0;

	env_init(&e, "ws");
	w = tbx_worker_new(tt_conf(e.cluster->bootstraps, "g", store, NULL,
				   "tokens.url", e.url, "tokens.schema",
				   e.tschema, "tokens.create", "true", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert(!w->joined);
	cr_assert_eq(
	    tbx_worker_register(w, "in", NULL, sqlite_effect_handle, &calls),
	    TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK, "%s",
		     tbx_worker_errstr(w));
	publish(&e, e.url, N, NULL);
	copy_all(&e);
	sqlite_done_t d = {store, e.tschema, N};
	cr_assert(tt_drive(&w, 1, sqlite_all_done, &d, 10, 120));
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));
	cr_assert_eq(tt_count(store, "SELECT count(*) FROM effects"), N);
	cr_assert_eq(calls, N);
	tbx_worker_destroy(w);
	env_fini(&e);
	tt_rmrf(dir);
	free(dir);
	free(store);
}
