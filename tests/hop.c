/*
 * The test pipeline's hop handler, without Criterion: child worker
 * processes (prog_*.c) link it too, and must not load Criterion, whose
 * constructor would talk to the parent's test runner.
 */
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hop.h"

void tt_hop_table(const char *store, const char *table)
{
	sqlite3 *db;
	char sql[512];
	char *err = NULL;

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
