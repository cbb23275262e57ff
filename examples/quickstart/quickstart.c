/*
 * quickstart — a tokenbox worker with one handler.
 *
 * Consumes the topic "orders" as consumer group "quickstart".  For every
 * message of type "OrderPlaced" the handler inserts a row into the table
 * "orders" of the service store and sends an "OrderAccepted" message with
 * the same key and payload to the topic "order-events".  The row and the
 * message take effect exactly once per incoming message, however often
 * Kafka delivers it and wherever the process is killed.
 *
 * usage: quickstart BOOTSTRAP_SERVERS STORE_PATH [TOKENS_PATH]
 *
 * TOKENS_PATH is the token store shared with the senders of "orders";
 * without it the token store is STORE_PATH itself.  SIGINT or SIGTERM stop
 * the worker after the batch in hand.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* sigaction() */
#endif

#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include <tokenbox/tokenbox.h>

/* Set before the signal handlers are installed, never changed while they
 * are: the handlers only read it. */
static tbx_worker_t *running;

static void on_signal(int sig)
{
	(void)sig;
	tbx_worker_stop(running); /* async-signal-safe: it sets a flag */
}

/*
 * The handler.  It runs inside the worker's SQLite transaction, in a
 * savepoint of its own: its INSERT and its queued message commit together
 * with the outbox row, or not at all.
 */
static tbx_verdict_t on_order_placed(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				     void *opaque)
{
	static const char sql[] =
	    "INSERT INTO orders(msg_id, order_key, body) VALUES (?, ?, ?)";
	sqlite3 *db = tbx_ctx_db(ctx);
	sqlite3_stmt *stmt;
	const void *key, *body;
	size_t key_len, body_len;
	int rc;

	(void)opaque;
	body = tbx_msg_payload(msg, &body_len);
	if (!body || body_len == 0) {
		/* Retrying cannot help: send it to orders.dlq. */
		tbx_ctx_set_error(ctx, "empty order");
		return TBX_VERDICT_REJECT;
	}
	key = tbx_msg_key(msg, &key_len);

	if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK) {
		tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
		return TBX_VERDICT_RETRY;
	}
	sqlite3_bind_text(stmt, 1, tbx_msg_id(msg), -1, SQLITE_TRANSIENT);
	if (key)
		sqlite3_bind_blob64(stmt, 2, key, key_len, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(stmt, 2);
	sqlite3_bind_blob64(stmt, 3, body, body_len, SQLITE_TRANSIENT);
	rc = sqlite3_step(stmt);
	if (rc != SQLITE_DONE)
		tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
	if (rc != SQLITE_DONE)
		return TBX_VERDICT_RETRY; /* dead-lettered after retry.max */

	/* key NULL: the message keeps the incoming key, and so the order's
	 * events stay in one partition, in order. */
	tbx_out_t out = {
	    .topic = "order-events",
	    .type = "OrderAccepted",
	    .key = NULL,
	    .payload = body,
	    .payload_len = body_len,
	};
	if (tbx_ctx_send(ctx, &out) != TBX_OK)
		return TBX_VERDICT_RETRY;
	return TBX_VERDICT_OK;
}

/*
 * Creates the business table.  tbx_worker_new() has created the store
 * file and its tokenbox tables; a connection of our own adds ours.
 */
static int create_schema(const char *path, char *errstr, size_t errstr_size)
{
	static const char ddl[] =
	    "CREATE TABLE IF NOT EXISTS orders ("
	    " id INTEGER PRIMARY KEY,"
	    " msg_id TEXT NOT NULL," /* tbx-id of the OrderPlaced message */
	    " order_key BLOB,"
	    " body BLOB NOT NULL,"
	    " received_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)";
	sqlite3 *db = NULL;
	char *msg = NULL;
	int rc;

	rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_busy_timeout(db, 10000);
		rc = sqlite3_exec(db, ddl, NULL, NULL, &msg);
	}
	if (rc != SQLITE_OK)
		snprintf(errstr, errstr_size, "%s: %s", path,
			 msg ? msg : sqlite3_errstr(rc));
	sqlite3_free(msg);
	sqlite3_close(db);
	return rc == SQLITE_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
	char errstr[512];
	tbx_conf_t *conf;
	tbx_worker_t *worker;
	struct sigaction sa;
	tbx_stats_t stats;
	int err;

	if (argc < 3 || argc > 4) {
		fprintf(
		    stderr,
		    "usage: %s BOOTSTRAP_SERVERS STORE_PATH [TOKENS_PATH]\n",
		    argv[0]);
		return 2;
	}
	const char *settings[][2] = {
	    {"kafka.bootstrap.servers", argv[1]},
	    {"group.id", "quickstart"},
	    {"store.path", argv[2]},
	    {"tokens.path", argc > 3 ? argv[3] : ""},
	};

	if (!(conf = tbx_conf_new())) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
		if (tbx_conf_set(conf, settings[i][0], settings[i][1], errstr,
				 sizeof(errstr)) != TBX_OK) {
			fprintf(stderr, "%s\n", errstr);
			tbx_conf_destroy(conf);
			return 2;
		}
	}

	/* On success the worker owns conf; on failure we still do. */
	if (!(worker = tbx_worker_new(conf, errstr, sizeof(errstr)))) {
		fprintf(stderr, "%s\n", errstr);
		tbx_conf_destroy(conf);
		return 1;
	}
	if (create_schema(argv[2], errstr, sizeof(errstr)) != 0) {
		fprintf(stderr, "%s\n", errstr);
		tbx_worker_destroy(worker);
		return 1;
	}
	err = tbx_worker_register(worker, "orders", "OrderPlaced",
				  on_order_placed, NULL);
	if (err != TBX_OK) {
		fprintf(stderr, "register: %s\n", tbx_strerror(err));
		tbx_worker_destroy(worker);
		return 1;
	}

	running = worker;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	/* Polls batches until a signal asks to stop, then commits the
	 * offsets of what is finished and leaves the group. */
	err = tbx_worker_run(worker);
	if (err != TBX_OK)
		fprintf(stderr, "worker stopped: %s: %s\n", tbx_err_name(err),
			tbx_worker_errstr(worker));

	/* The worker is about to be freed: a further signal takes its
	 * default action, which is safe at any point. */
	sa.sa_handler = SIG_DFL;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	tbx_worker_stats(worker, &stats);
	fprintf(stderr,
		"processed %llu, duplicates dropped %llu, dead-lettered %llu\n",
		(unsigned long long)stats.processed,
		(unsigned long long)stats.duplicates_dropped,
		(unsigned long long)stats.dead_lettered);
	tbx_worker_destroy(worker);
	return err == TBX_OK ? 0 : 1;
}
