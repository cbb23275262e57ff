/*
 * Fixtures shared by several test files (fixture.h).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_child.h"
#include "consumer/worker.h"
#include "fixture.h"
#include "outbox/outbox.h"

/* ---- in process ---------------------------------------------------- */

void tt_env_init(tt_env_t *e, const char *const topics[])
{
	e->dir = tt_tmpdir();
	/* In the pg tier, schemas: the token store's joined with the
	 * service stores (one database). */
	e->store = tt_store_new(e->dir, "s1");
	e->store2 = tt_store_new(e->dir, "s2");
	e->store3 = tt_store_new(e->dir, "s3");
	e->tokens = tt_tokens_new(e->dir, "tokens", 1);
	e->cluster = tt_cluster_new(1);
	for (size_t i = 0; topics && topics[i]; i++) {
		char name[256];
		const char *colon = strchr(topics[i], ':');

		cr_assert(colon && (size_t)(colon - topics[i]) < sizeof(name),
			  "topic '%s': want name:partitions", topics[i]);
		memcpy(name, topics[i], (size_t)(colon - topics[i]));
		name[colon - topics[i]] = '\0';
		tt_cluster_topic(e->cluster, name, atoi(colon + 1));
	}
}

void tt_env_fini(tt_env_t *e)
{
	tt_cluster_destroy(e->cluster);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->store);
	free(e->store2);
	free(e->store3);
	free(e->tokens);
}

void tt_env_publish(const tt_env_t *e, const char *topic, const char *type,
		    const char *const *payloads, size_t cnt)
{
	tbx_publisher_t *pub =
	    tt_publisher(e->cluster->bootstraps, e->tokens, "error");

	for (size_t i = 0; i < cnt; i++) {
		tbx_out_t out = {.topic = topic,
				 .type = type,
				 .key = "k",
				 .key_len = 1,
				 .payload = payloads[i],
				 .payload_len = strlen(payloads[i])};
		cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	}
	cr_assert_eq(tbx_publisher_flush(pub, NULL), TBX_OK);
	tbx_publisher_destroy(pub);
}

void tt_hop_env_start(tt_hop_env_t *f, int parts)
{
	tt_hop_env_start_with(f, parts, NULL);
}

void tt_hop_env_start_with(tt_hop_env_t *f, int parts, const char *const *kv)
{
	tbx_conf_t *conf;
	char err[256];

	memset(f, 0, sizeof(*f));
	f->dir = tt_tmpdir();
	f->store = tt_store_new(f->dir, "s1");
	f->tokens = tt_tokens_new(f->dir, "tokens", 0);
	f->c = tt_cluster_new(1);
	tt_cluster_topic(f->c, "in", parts);
	tt_subscribe(f->tokens, "in", "g1");
	tt_hop_table(f->store, "hop1");
	f->hop.table = "hop1";
	conf = tt_conf(f->c->bootstraps, "g1", f->store, f->tokens, NULL);
	for (size_t i = 0; kv && kv[i]; i += 2)
		cr_assert_eq(
		    tbx_conf_set(conf, kv[i], kv[i + 1], err, sizeof(err)),
		    TBX_OK, "%s", err);
	f->w = tbx_worker_new(conf, err, sizeof(err));
	cr_assert(f->w, "%s", err);
	cr_assert_eq(
	    tbx_worker_register(f->w, "in", "Ping", tt_hop_handle, &f->hop),
	    TBX_OK);
	tbx__worker_assign_directly(f->w);
}

void tt_hop_env_stop(tt_hop_env_t *f)
{
	tbx_worker_destroy(f->w);
	tt_cluster_destroy(f->c);
	tt_rmrf(f->dir);
	free(f->dir);
	free(f->tokens);
	free(f->store);
}

typedef struct drained {
	tbx_worker_t *w;
	uint64_t records;
} drained_t;

/* The worker has consumed every record it was to. */
static int consumed_all(void *opaque)
{
	drained_t *d = opaque;
	tbx_stats_t st;

	tbx_worker_stats(d->w, &st);
	return st.consumed >= d->records;
}

void tt_drain(tbx_worker_t **w, uint64_t records)
{
	drained_t d = {*w, records};

	cr_assert(tt_drive(w, 1, consumed_all, &d, 5, 60),
		  "the worker did not consume %llu records",
		  (unsigned long long)records);
}

int tt_reached(void *opaque)
{
	tt_want_t *w = opaque;

	return tt_count(w->db, w->sql) >= w->n;
}

/* ---- child processes ------------------------------------------------ */

char *tt_read_text(const char *path)
{
	char *buf = NULL, chunk[4096];
	size_t len = 0, n;
	FILE *f = fopen(path, "r");

	cc_append(&buf, &len, "", 0);
	if (!f)
		return buf;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		cc_append(&buf, &len, chunk, n);
	fclose(f);
	return buf;
}

int64_t tt_query(const char *db, const char *sql)
{
	sqlite3 *conn = NULL;
	sqlite3_stmt *stmt = NULL;
	int64_t v = -1;

	if (tt_store_is_pg(db))
		return tt_pg_value(db, sql);
	if (sqlite3_open_v2(db, &conn, SQLITE_OPEN_READONLY, NULL) ==
		SQLITE_OK &&
	    sqlite3_busy_timeout(conn, 5000) == SQLITE_OK &&
	    sqlite3_prepare_v2(conn, sql, -1, &stmt, NULL) == SQLITE_OK &&
	    sqlite3_step(stmt) == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	sqlite3_close(conn);
	return v;
}

int tt_wait_query(const char *db, const char *sql, int64_t want, int timeout_ms)
{
	long long deadline = cc_now_ms() + timeout_ms;

	while (cc_now_ms() < deadline) {
		if (tt_query(db, sql) == want)
			return 1;
		usleep(50000);
	}
	return 0;
}

int tt_wait_log(const char *log, const char *text, int timeout_ms)
{
	long long deadline = cc_now_ms() + timeout_ms;

	while (cc_now_ms() < deadline) {
		char *s = tt_read_text(log);
		int found = strstr(s, text) != NULL;
		free(s);
		if (found)
			return 1;
		usleep(20000);
	}
	return 0;
}

void tt_assert_log(int ok, const char *log, const char *what)
{
	if (!ok) {
		char *text = tt_read_text(log);
		cr_assert(ok, "%s; worker log:\n%s", what, text);
		free(text);
	}
}

const char *tt_plugin_path(const char *name)
{
	static char path[2][4096];
	static int next;
	const char *dir = getenv("TBX_EXAMPLES_DIR");
	char *p = path[next++ % 2];

	if (dir && *dir)
		snprintf(p, sizeof(path[0]), "%s/lib%s.so", dir, name);
	else
		snprintf(p, sizeof(path[0]), "%s/examples/lib%s.so",
			 getenv("TBX_BIN_DIR"), name);
	cr_assert(access(p, R_OK) == 0, "%s is not built", p);
	return p;
}

tt_mock_proc_t tt_mock_proc_start(const char *const topics[])
{
	const char *args[34] = {"mock-cluster"};
	size_t n = 1;
	tt_mock_proc_t c;

	for (size_t i = 0; topics && topics[i]; i++) {
		cr_assert(n + 3 < sizeof(args) / sizeof(args[0]));
		args[n++] = "--topic";
		args[n++] = topics[i];
	}
	args[n] = NULL;
	c.pid = cc_spawn(args, &c.out_fd, NULL);
	c.bootstraps = cc_read_line(c.out_fd, 30000 * cc_time_factor());
	cr_assert(c.bootstraps, "mock-cluster printed no bootstrap line");
	return c;
}

void tt_mock_proc_stop(tt_mock_proc_t *c)
{
	kill(c->pid, SIGTERM);
	cr_expect(cc_exited(cc_wait(c->pid, 30000 * cc_time_factor()), 0));
	close(c->out_fd);
	free(c->bootstraps);
	c->bootstraps = NULL;
}

pid_t tt_tokenbox_start(const char *const args[], const char *log)
{
	int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
	pid_t pid;

	if (!log)
		return cc_fork(args, -1, -1, -1, NULL, 0);
	cr_assert(fd >= 0, "%s: %s", log, strerror(errno));
	pid = cc_fork(args, -1, fd, fd, &fd, 1);
	close(fd);
	return pid;
}

pid_t tt_worker_start(const char *const settings[], const char *const extra[],
		      const char *log)
{
	const char *args[64] = {"worker"};
	size_t n = 1;
	const char *const *lists[2] = {settings, extra};

	for (int l = 0; l < 2; l++)
		for (size_t i = 0; lists[l] && lists[l][i]; i++) {
			cr_assert(n + 3 < sizeof(args) / sizeof(args[0]));
			args[n++] = "-X";
			args[n++] = lists[l][i];
		}
	args[n] = NULL;
	return tt_tokenbox_start(args, log);
}

void tt_publish_orders(const char *bootstraps, const char *tokens, int n,
		       int customers)
{
	tbx_publisher_t *pub = tt_publisher(bootstraps, tokens, "error");
	char key[32], payload[64];

	for (int i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "customer-%d", i % customers);
		snprintf(payload, sizeof(payload),
			 "{\"order\": \"%d\", \"amount\": %d}", i,
			 100 + i % 900);
		tbx_out_t out = {.topic = "orders",
				 .type = "OrderPlaced",
				 .key = key,
				 .key_len = strlen(key),
				 .payload = payload,
				 .payload_len = strlen(payload)};
		cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
		if (i % 1000 == 999)
			cr_assert_eq(tbx_publisher_flush(pub, NULL), TBX_OK,
				     "%s", tbx_publisher_errstr(pub));
	}
	cr_assert_eq(tbx_publisher_flush(pub, NULL), TBX_OK);
	tbx_publisher_destroy(pub);
}

const char *tt_pg_url(void)
{
	const char *url = getenv("TBX_PG_URL");

	cr_assert(url && *url, "TBX_PG_URL is not set: start a server with "
			       "'bash scripts/pg.sh start --dir DIR'");
	return url;
}

void tt_pg_schema(char *out, size_t size, const char *tag)
{
	static unsigned n;

	snprintf(out, size, "t_%s_%ld_%u", tag, (long)getpid(), ++n);
}

/* ---- a store behind the backend's back ------------------------------ */

tbx_outbox_t *tt_outbox_open(const char *store)
{
	tbx__db_opts_t opts;
	tbx_outbox_t *out = NULL;
	char err[512], url[2048];

	tbx__db_opts_init(&opts);
	if (tt_store_is_pg(store))
		cr_assert_eq(
		    tbx_outbox_pg_open(tt_store_url(store, url, sizeof(url)),
				       tt_store_schema(store), &opts, &out, err,
				       sizeof(err)),
		    TBX_OK, "%s: %s", store, err);
	else
		cr_assert_eq(
		    tbx_outbox_open(store, &opts, &out, err, sizeof(err)),
		    TBX_OK, "%s", err);
	return out;
}

int tt_store_sql_try(const char *store, const char *sql, const char *pg_sql)
{
	int rc;

	if (tt_store_is_pg(store)) {
		PGconn *c = PQconnectdb(tt_pg_url());
		char set[160];
		PGresult *r;

		cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s",
			     PQerrorMessage(c));
		snprintf(set, sizeof(set), "SET search_path TO \"%s\"",
			 tt_store_schema(store));
		PQclear(PQexec(c, set));
		r = PQexec(c, pg_sql ? pg_sql : sql);
		rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
		PQclear(r);
		PQfinish(c);
		return rc;
	}
	sqlite3 *db;

	cr_assert_eq(sqlite3_open(store, &db), SQLITE_OK);
	rc = sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
	sqlite3_close(db);
	return rc;
}
