/*
 * The test pipeline's hop handler, without Criterion: child worker
 * processes (prog_*.c) link it too, and must not load Criterion, whose
 * constructor would talk to the parent's test runner.
 */
#include <libpq-fe.h>
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hop.h"

int tt_store_is_pg(const char *store)
{
	return store && (strncmp(store, "pg:", 3) == 0 ||
			 strncmp(store, "pg2:", 4) == 0);
}

const char *tt_store_schema(const char *store)
{
	return strchr(store, ':') + 1;
}

const char *tt_store_url(const char *store, char *out, size_t size)
{
	const char *url = getenv("TBX_PG_URL");

	if (!url || !*url) {
		fprintf(stderr, "%s: TBX_PG_URL is not set\n", store);
		abort();
	}
	if (strncmp(store, "pg2:", 4) != 0)
		snprintf(out, size, "%s", url);
	else if (strncmp(url, "postgres", 8) == 0) /* a URL */
		snprintf(out, size, "%s%capplication_name=tbx-test-tokens", url,
			 strchr(url, '?') ? '&' : '?');
	else /* key=value … */
		snprintf(out, size, "%s application_name=tbx-test-tokens", url);
	return out;
}

PGconn *tt_pg_connect(const char *conninfo)
{
	return PQconnectdbParams(
	    (const char *const[]){"dbname", "options", NULL},
	    (const char *const[]){conninfo, "-c client_min_messages=warning",
				  NULL},
	    1);
}

static void kv_set(tt_kv_t *kv, const char *key, const char *val)
{
	snprintf(kv->key, sizeof(kv->key), "%s", key);
	snprintf(kv->val, sizeof(kv->val), "%s", val);
}

int tt_stores_kv(const char *store, const char *tokens, tt_kv_t kv[5])
{
	char url[2048];
	int n = 0;

	if (store && !tt_store_is_pg(store))
		kv_set(&kv[n++], "store.path", store);
	else if (store) {
		/* options=-csearch_path=SCHEMA, URL-encoded */
		tt_store_url(store, url, sizeof(url));
		snprintf(kv[n].key, sizeof(kv[n].key), "store.url");
		snprintf(kv[n].val, sizeof(kv[n].val),
			 "%s%coptions=-csearch_path%%3D%s", url,
			 strchr(url, '?') ? '&' : '?', tt_store_schema(store));
		n++;
		kv_set(&kv[n++], "store.schema", tt_store_schema(store));
	}
	if (tokens && !tt_store_is_pg(tokens))
		kv_set(&kv[n++], "tokens.path", tokens);
	else if (tokens) {
		/* Joined: no tokens.url, the service store's connection. */
		if (!store || !tt_store_is_pg(store) ||
		    strncmp(tokens, "pg2:", 4) == 0)
			kv_set(&kv[n++], "tokens.url",
			       tt_store_url(tokens, url, sizeof(url)));
		kv_set(&kv[n++], "tokens.schema", tt_store_schema(tokens));
	}
	return n;
}

int tt_stores_conf(tbx_conf_t *conf, const char *store, const char *tokens,
		   char *err, size_t err_size)
{
	tt_kv_t kv[5];
	int n = tt_stores_kv(store, tokens, kv), rc;

	for (int i = 0; i < n; i++)
		if ((rc = tbx_conf_set(conf, kv[i].key, kv[i].val, err,
				       err_size)))
			return rc;
	return TBX_OK;
}

/* The hop's table in a PostgreSQL schema, made with the schema if
 * missing (before the service store's tables: a business schema may
 * exist first). */
static void hop_table_pg(const char *store, const char *table)
{
	char url[2048], sql[512];
	PGconn *conn = tt_pg_connect(tt_store_url(store, url, sizeof(url)));
	PGresult *res;

	if (PQstatus(conn) != CONNECTION_OK) {
		fprintf(stderr, "%s: %s\n", store, PQerrorMessage(conn));
		abort();
	}
	snprintf(sql, sizeof(sql),
		 "CREATE SCHEMA IF NOT EXISTS \"%s\"; "
		 "CREATE TABLE IF NOT EXISTS \"%s\".%s("
		 "id bigserial PRIMARY KEY, msg_id text, key text, "
		 "payload text, topic text, part int, off bigint, "
		 "attempt int)",
		 tt_store_schema(store), tt_store_schema(store), table);
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		fprintf(stderr, "%s: %s\n", store, PQerrorMessage(conn));
		abort();
	}
	PQclear(res);
	PQfinish(conn);
}

void tt_hop_table(const char *store, const char *table)
{
	sqlite3 *db;
	char sql[512];
	char *err = NULL;

	if (tt_store_is_pg(store)) {
		hop_table_pg(store, table);
		return;
	}
	snprintf(sql, sizeof(sql),
		 "PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS %s("
		 "id INTEGER PRIMARY KEY, msg_id TEXT, key TEXT, payload TEXT,"
		 " topic TEXT, part INT, off INT, attempt INT)",
		 table);
	if (sqlite3_open(store, &db) != SQLITE_OK) {
		fprintf(stderr, "%s: %s\n", store, sqlite3_errmsg(db));
		abort();
	}
	sqlite3_busy_timeout(db, 10000);
	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "%s: %s\n", store, err ? err : "?");
		abort();
	}
	sqlite3_close(db);
}

/* Is @p payload one of the comma-separated @p list? */
static int listed(const char *list, const char *payload, size_t plen)
{
	while (list && payload && *list) {
		size_t len = strcspn(list, ",");
		if (len == plen && memcmp(list, payload, plen) == 0)
			return 1;
		list += len + (list[len] == ',');
	}
	return 0;
}

/* Sends the hop's one message, if it has a next topic. */
static tbx_verdict_t hop_send(tbx_ctx_t *ctx, const tt_hop_t *hop,
			      const char *payload, size_t plen)
{
	if (hop->next_topic) {
		tbx_out_t out = {.topic = hop->next_topic,
				 .type =
				     hop->next_type ? hop->next_type : "Next",
				 .payload = payload,
				 .payload_len = plen};
		if (tbx_ctx_send(ctx, &out) != TBX_OK)
			return TBX_VERDICT_RETRY;
	}
	return TBX_VERDICT_OK;
}

/* The hop's row through tbx_ctx_exec(): text parameters, the table found
 * through the connection's search path (the service store's schema). */
static int hop_insert_exec(tbx_ctx_t *ctx, const tbx_msg_t *msg,
			   const tt_hop_t *hop)
{
	size_t klen, plen;
	const char *key = tbx_msg_key(msg, &klen);
	const char *payload = tbx_msg_payload(msg, &plen);
	char sql[256], *k = key ? strndup(key, klen) : NULL,
		       *p = payload ? strndup(payload, plen) : NULL;
	char part[16], off[24], attempt[16];
	int rc;

	snprintf(part, sizeof(part), "%d", (int)tbx_msg_partition(msg));
	snprintf(off, sizeof(off), "%lld", (long long)tbx_msg_offset(msg));
	snprintf(attempt, sizeof(attempt), "%d", tbx_msg_attempt(msg));
	snprintf(sql, sizeof(sql),
		 "INSERT INTO %s(msg_id, key, payload, topic, part, off, "
		 "attempt) VALUES ($1, $2, $3, $4, $5, $6, $7)",
		 hop->table);
	const char *const params[] = {
	    tbx_msg_id(msg), k, p, tbx_msg_topic(msg), part, off, attempt};
	rc = tbx_ctx_exec(ctx, sql, params, 7, NULL);
	free(k);
	free(p);
	return rc;
}

tbx_verdict_t tt_hop_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque)
{
	const tt_hop_t *hop = opaque;
	sqlite3 *db = tbx_ctx_db(ctx);
	sqlite3_stmt *stmt;
	size_t klen, plen;
	const char *key = tbx_msg_key(msg, &klen);
	const char *payload = tbx_msg_payload(msg, &plen);
	char sql[256];
	int rc;

	if (listed(hop->die_on, payload, plen))
		kill(getpid(), SIGKILL); /* a handler that crashes the worker */
	if (hop->reject && payload && plen == strlen(hop->reject) &&
	    memcmp(payload, hop->reject, plen) == 0) {
		tbx_ctx_set_error(ctx, "rejected by test");
		return TBX_VERDICT_REJECT;
	}
	if (hop->retry && tbx_msg_attempt(msg) <= hop->retry_times &&
	    (strcmp(hop->retry, "*") == 0 ||
	     (payload && plen == strlen(hop->retry) &&
	      memcmp(payload, hop->retry, plen) == 0))) {
		tbx_ctx_set_error(ctx, "test asks to retry");
		return TBX_VERDICT_RETRY;
	}
	if (!db) { /* PostgreSQL: the backend-neutral call */
		if (hop_insert_exec(ctx, msg, hop) != TBX_OK)
			return TBX_VERDICT_RETRY;
		return hop_send(ctx, hop, payload, plen);
	}
	snprintf(sql, sizeof(sql),
		 "INSERT INTO %s(msg_id, key, payload, topic, part, off, "
		 "attempt) VALUES (?, ?, ?, ?, ?, ?, ?)",
		 hop->table);
	if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK)
		return TBX_VERDICT_RETRY;
	sqlite3_bind_text(stmt, 1, tbx_msg_id(msg), -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(stmt, 2, key, (int)klen, SQLITE_TRANSIENT);
	sqlite3_bind_text(stmt, 3, payload, (int)plen, SQLITE_TRANSIENT);
	sqlite3_bind_text(stmt, 4, tbx_msg_topic(msg), -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(stmt, 5, tbx_msg_partition(msg));
	sqlite3_bind_int64(stmt, 6, tbx_msg_offset(msg));
	sqlite3_bind_int(stmt, 7, tbx_msg_attempt(msg));
	rc = sqlite3_step(stmt);
	sqlite3_finalize(stmt);
	if (rc != SQLITE_DONE)
		return TBX_VERDICT_RETRY;
	return hop_send(ctx, hop, payload, plen);
}
