/*
 * hello — the smallest handler plugin for `tokenbox worker`.
 *
 * Handles every message of one topic (default "hello"): inserts a row
 * (message id, key, payload, partition, offset, attempt) into the table
 * "hello" of the service store and, with reply=TOPIC, sends a "HelloReply"
 * message "hello, <payload>" with the same key to TOPIC.  An empty payload
 * is rejected and goes to the dead-letter topic.  The row and the reply
 * take effect exactly once per message and consumer group.
 *
 * plugin.args: key=value pairs separated by ',' or ';', all optional
 *   topic=NAME    the topic to handle (default hello)
 *   reply=TOPIC   also send a reply to TOPIC
 *   delay.ms=N    sleep N ms in every handler call (0..60000), to watch a
 *                 graceful shutdown finish a slow batch
 *
 * Build: see README.md.  The plugin leaves the tbx_* symbols undefined:
 * `tokenbox worker` provides them.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* nanosleep() */
#endif

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tokenbox/plugin.h>

#include "plugin_args.h"

#define HELLO_TOPIC_MAX 249 /* Kafka's limit */

/* One per tbx_plugin_init() call (the plugin may be named twice, with
 * different args).  The handler borrows it as its opaque pointer, so it
 * lives until the plugin is unloaded, after the worker is destroyed. */
typedef struct hello {
	char topic[HELLO_TOPIC_MAX + 1];
	char reply[HELLO_TOPIC_MAX + 1]; /* "" when no reply is sent */
	long delay_ms;
	struct hello *next;
} hello_t;

static hello_t *instances;

/* `tokenbox worker` unloads the plugin after destroying the worker; this
 * runs then (and at exit) and frees what init allocated. */
__attribute__((destructor)) static void hello_unload(void)
{
	while (instances) {
		hello_t *next = instances->next;
		free(instances);
		instances = next;
	}
}

/*
 * The table is made here, in the handler's savepoint, rather than in init
 * through tbx_worker_conf_get(worker, "store.path"): it commits with the
 * first message handled, and costs a schema lookup afterwards.
 */
static const char hello_ddl[] =
    "CREATE TABLE IF NOT EXISTS hello ("
    " id INTEGER PRIMARY KEY,"
    " msg_id TEXT NOT NULL,"
    " topic TEXT NOT NULL,"
    " kafka_partition INTEGER NOT NULL,"
    " kafka_offset INTEGER NOT NULL,"
    " key BLOB,"
    " payload BLOB NOT NULL,"
    " attempt INTEGER NOT NULL,"
    " created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)";

static const char hello_insert[] =
    "INSERT INTO hello(msg_id, topic, kafka_partition, kafka_offset, key, "
    "payload, attempt) VALUES (?, ?, ?, ?, ?, ?, ?)";

static tbx_verdict_t retry_with(tbx_ctx_t *ctx, sqlite3 *db)
{
	tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
	return TBX_VERDICT_RETRY; /* dead-lettered after retry.max */
}

static tbx_verdict_t on_hello(tbx_ctx_t *ctx, const tbx_msg_t *msg,
			      void *opaque)
{
	const hello_t *h = opaque;
	sqlite3 *db = tbx_ctx_db(ctx);
	sqlite3_stmt *stmt;
	const void *key, *payload;
	size_t key_len, payload_len;
	int rc;

	if (h->delay_ms > 0) {
		struct timespec ts = {.tv_sec = h->delay_ms / 1000,
				      .tv_nsec =
					  (h->delay_ms % 1000) * 1000000};
		nanosleep(&ts, NULL);
	}
	payload = tbx_msg_payload(msg, &payload_len);
	if (!payload || payload_len == 0) {
		tbx_ctx_set_error(ctx, "empty greeting");
		return TBX_VERDICT_REJECT;
	}
	key = tbx_msg_key(msg, &key_len);

	if (sqlite3_exec(db, hello_ddl, NULL, NULL, NULL) != SQLITE_OK)
		return retry_with(ctx, db);
	if (sqlite3_prepare_v2(db, hello_insert, -1, &stmt, NULL) != SQLITE_OK)
		return retry_with(ctx, db);
	sqlite3_bind_text(stmt, 1, tbx_msg_id(msg), -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(stmt, 2, tbx_msg_topic(msg), -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(stmt, 3, tbx_msg_partition(msg));
	sqlite3_bind_int64(stmt, 4, tbx_msg_offset(msg));
	if (key)
		sqlite3_bind_blob64(stmt, 5, key, key_len, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(stmt, 5);
	sqlite3_bind_blob64(stmt, 6, payload, payload_len, SQLITE_TRANSIENT);
	sqlite3_bind_int(stmt, 7, tbx_msg_attempt(msg));
	rc = sqlite3_step(stmt);
	sqlite3_finalize(stmt);
	if (rc != SQLITE_DONE)
		return retry_with(ctx, db);

	if (h->reply[0]) {
		static const char greeting[] = "hello, ";
		size_t glen = sizeof(greeting) - 1;
		char *body = malloc(glen + payload_len);
		int err;

		if (!body) {
			tbx_ctx_set_error(ctx, "out of memory");
			return TBX_VERDICT_RETRY;
		}
		memcpy(body, greeting, glen);
		memcpy(body + glen, payload, payload_len);
		tbx_out_t out = {.topic = h->reply,
				 .type = "HelloReply",
				 .key = NULL, /* the incoming key */
				 .payload = body,
				 .payload_len = glen + payload_len};
		err = tbx_ctx_send(ctx, &out); /* copies the payload */
		free(body);
		if (err != TBX_OK) {
			tbx_ctx_set_error(ctx, tbx_strerror(err));
			return TBX_VERDICT_RETRY;
		}
	}
	return TBX_VERDICT_OK;
}

/* Parses "key=value,key=value" into @p h.  Errors go to stderr, which is
 * the worker's log. */
static int parse_args(hello_t *h, const char *args)
{
	plugin_arg_t a;
	const char *p = args;
	int rc;

	while ((rc = plugin_arg_next(&p, &a)) == 1) {
		int bad = 0;

		if (strcmp(a.key, "topic") == 0) {
			bad = strlen(a.val) >= sizeof(h->topic);
			if (!bad)
				memcpy(h->topic, a.val, strlen(a.val) + 1);
		} else if (strcmp(a.key, "reply") == 0) {
			bad = strlen(a.val) >= sizeof(h->reply);
			if (!bad)
				memcpy(h->reply, a.val, strlen(a.val) + 1);
		} else if (strcmp(a.key, "delay.ms") == 0) {
			char *end;
			h->delay_ms = strtol(a.val, &end, 10);
			bad = *end || a.val[0] == '-' || h->delay_ms > 60000;
		} else {
			fprintf(stderr,
				"hello: plugin.args: unknown key '%s' "
				"(known: topic, reply, delay.ms)\n",
				a.key);
			return -1;
		}
		if (bad)
			break;
	}
	if (rc != 0) {
		fprintf(stderr,
			"hello: plugin.args: '%.*s': expected "
			"topic=NAME, reply=TOPIC or delay.ms=0..60000\n",
			a.pair_len, a.pair);
		return -1;
	}
	return 0;
}

static int hello_init(tbx_worker_t *worker, const char *args)
{
	hello_t *h = calloc(1, sizeof(*h));
	int err;

	if (!h)
		return TBX_ENOMEM;
	memcpy(h->topic, "hello", sizeof("hello"));
	if (parse_args(h, args) != 0) {
		free(h);
		return TBX_EINVAL;
	}
	/* NULL type: the topic's catch-all, whatever the tbx-type. */
	err = tbx_worker_register(worker, h->topic, NULL, on_hello, h);
	if (err != TBX_OK) {
		free(h);
		return err;
	}
	h->next = instances;
	instances = h;
	return TBX_OK;
}

#ifndef HELLO_TEST_ABI_VERSION
TBX_PLUGIN(hello_init);
#else
/* Test build only (target tbx_hello_badabi): claims another ABI version,
 * so that the tests see `tokenbox worker` refuse it.  A plugin uses
 * TBX_PLUGIN, which cannot get the version wrong. */
TBX_PLUGIN_EXPORT int tbx_plugin_abi_version(void)
{
	return HELLO_TEST_ABI_VERSION;
}
TBX_PLUGIN_EXPORT int tbx_plugin_init(tbx_worker_t *worker, const char *args)
{
	return hello_init(worker, args);
}
#endif
