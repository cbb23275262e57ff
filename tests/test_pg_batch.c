/*
 * A's lookups on PostgreSQL are made for the whole batch before any
 * handler runs (consumer/proto_process.c, prefetch()): one row check, then one
 * token check.  An upstream re-send right behind its original, in the
 * same batch, must still join the row the original made in that A, never
 * run its handler on the strength of the batch's "no row" -- with the
 * token store joined (one connection) and apart (a connection of its
 * own), and when the original is rejected or asks to retry once.
 */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/worker.h"
#include "fixture.h"
#include "tokens/tokens.h"

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

TestSuite(pg_batch, .init = fx_setup, .fini = fx_teardown);

static void fx_exec(const char *sql)
{
	PGresult *r = PQexec(raw, sql);

	cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK ||
		      PQresultStatus(r) == PGRES_TUPLES_OK,
		  "%s: %s", sql, PQresultErrorMessage(r));
	PQclear(r);
}

/* "SELECT count(*) FROM \"<schema>\".<rest>"; -1 when it fails. */
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

/* The handler: an effect row per call that returns OK; payload "5" is
 * rejected, payload "3" asks to retry on its first attempt. */
typedef struct hop {
	char insert[256];
	int calls;
} hop_t;

static tbx_verdict_t hop_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				void *opaque)
{
	hop_t *h = opaque;
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);
	char text[64];
	const char *params[2] = {tbx_msg_id(msg), text};
	int64_t changes = 0;

	h->calls++;
	snprintf(text, sizeof(text), "%.*s", (int)len, payload ? payload : "");
	if (strcmp(text, "5") == 0)
		return TBX_VERDICT_REJECT;
	if (strcmp(text, "3") == 0 && tbx_msg_attempt(msg) == 1)
		return TBX_VERDICT_RETRY;
	if (tbx_ctx_exec(ctx, h->insert, params, 2, &changes) != TBX_OK ||
	    changes != 1)
		return TBX_VERDICT_RETRY;
	return TBX_VERDICT_OK;
}

typedef struct done {
	const char *schema;
	int64_t n;
} done_t;

static int all_done(void *opaque)
{
	done_t *d = opaque;

	return fx_count(d->schema, "effects") >= d->n &&
	       fx_count(d->schema, "tbx_outbox") == 0;
}

/* Subscribes group g to @p topic in the token schema. */
static void subscribe(const char *url, const char *tschema, const char *topic)
{
	tbx__db_opts_t opts;
	tbx_tokens_t *t;
	int64_t since;
	char err[512];

	tbx__db_opts_init(&opts);
	cr_assert_eq(
	    tbx_tokens_pg_open(url, tschema, NULL, &opts, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(tbx_tokens_subscribe(t, topic, "g", &since), TBX_OK);
	tbx_tokens_close(t);
}

/* Publishes "0" … "n-1" to @p topic with tokens from @p tschema. */
static void publish(const char *bootstraps, const char *url,
		    const char *tschema, const char *topic, int n)
{
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;
	char err[512], num[16];

	cr_assert_eq(tbx_conf_set(conf, "kafka.bootstrap.servers", bootstraps,
				  err, sizeof(err)),
		     TBX_OK);
	cr_assert_eq(tbx_conf_set(conf, "tokens.url", url, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(
	    tbx_conf_set(conf, "tokens.schema", tschema, err, sizeof(err)),
	    TBX_OK, "%s", err);
	tbx_conf_set(conf, "log.level", "warning", NULL, 0);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "%s", err);
	for (int i = 0; i < n; i++) {
		tbx_out_t out = {
		    .topic = topic, .type = "Hit", .key = "k", .key_len = 1};

		snprintf(num, sizeof(num), "%d", i);
		out.payload = num;
		out.payload_len = strlen(num);
		cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	}
	cr_assert_eq(tbx_publisher_flush(pub, NULL), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	tbx_publisher_destroy(pub);
}

static void copies_in_the_batch(const char *tag, int apart)
{
	enum { N = 10 };
	tt_cluster_t *cluster = tt_cluster_new(1);
	char sschema[64], tschema[64], t[32], url[1024], apart_url[1100];
	char err[512], sql[256];
	const char *turl;
	tt_record_t *recs, pairs[2 * N];
	tbx_worker_t *w;
	tbx_stats_t st;
	hop_t h;
	size_t cnt;

	tt_cluster_topic(cluster, "stage", 1);
	tt_cluster_topic(cluster, "in", 1);
	tt_cluster_topic(cluster, "in.dlq", 1);
	tt_pg_schema(sschema, sizeof(sschema), tag);
	snprintf(t, sizeof(t), "%s_t", tag);
	tt_pg_schema(tschema, sizeof(tschema), t);
	snprintf(url, sizeof(url), "%s", tt_pg_url());
	snprintf(apart_url, sizeof(apart_url), "%s%sapplication_name=apart",
		 url, strchr(url, '?') ? "&" : "?");
	turl = apart ? apart_url : url;

	tbx_conf_t *conf =
	    tt_conf(cluster->bootstraps, "g", NULL, NULL, "store.url", url,
		    "store.schema", sschema, "tokens.schema", tschema,
		    "tokens.create", "true", NULL);
	if (apart)
		cr_assert_eq(tbx_conf_set(conf, "tokens.url", apart_url, err,
					  sizeof(err)),
			     TBX_OK, "%s", err);
	w = tbx_worker_new(conf, err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_assert_eq(w->joined, !apart);
	memset(&h, 0, sizeof(h));
	snprintf(h.insert, sizeof(h.insert),
		 "INSERT INTO \"%s\".effects(msg_id, payload) VALUES ($1, $2)",
		 sschema);
	cr_assert_eq(tbx_worker_register(w, "in", NULL, hop_handle, &h),
		     TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK, "%s",
		     tbx_worker_errstr(w));
	snprintf(sql, sizeof(sql),
		 "CREATE TABLE \"%s\".effects(msg_id TEXT NOT NULL, payload "
		 "TEXT)",
		 sschema);
	fx_exec(sql);

	/* Minted for g through a topic the worker does not read, then
	 * produced to "in" in pairs, original and copy, in one go. */
	subscribe(turl, tschema, "stage");
	publish(cluster->bootstraps, turl, tschema, "stage", N);
	cnt = tt_read_topic(cluster->bootstraps, "stage", &recs);
	cr_assert_eq(cnt, N);
	for (size_t i = 0; i < N; i++)
		pairs[2 * i] = pairs[2 * i + 1] = recs[i];
	tt_reproduce(cluster->bootstraps, "in", pairs, 2 * N);
	tt_records_free(recs, cnt);

	done_t d = {sschema, N - 1};
	cr_assert(tt_drive(&w, 1, all_done, &d, 5, 120),
		  "not every record was processed");
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));
	cr_assert_eq(fx_count(sschema, "effects"), N - 1);
	cr_assert_eq(fx_count(sschema, "effects WHERE payload = '3'"), 1,
		     "the retried record took effect once");
	cr_assert_eq(fx_count(sschema, "tbx_dead_letters"), 1);
	cnt = tt_read_topic(cluster->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 1, "one dead letter for the rejected pair");
	tt_records_free(recs, cnt);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.rows_conflicted, 0,
		     "no handler ran for a copy whose original has a row");
	cr_assert_eq(st.duplicates_dropped, N, "every copy dropped once");
	cr_assert_eq(h.calls, N + 1, "each record once, \"3\" twice");
	cr_assert_eq(fx_count(sschema, "tbx_outbox"), 0);
	cr_assert_eq(fx_count(tschema, "tbx_tokens"), 0);
	tbx_worker_destroy(w);
	snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
		 sschema);
	fx_exec(sql);
	snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
		 tschema);
	fx_exec(sql);
	tt_cluster_destroy(cluster);
}

Test(pg_batch, a_copy_in_the_batch_of_its_original_joins_its_row_joined)
{
	copies_in_the_batch("bj", 0);
}

Test(pg_batch, a_copy_in_the_batch_of_its_original_joins_its_row_apart)
{
	copies_in_the_batch("ba", 1);
}
