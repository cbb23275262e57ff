/*
 * vouchers — a bank of voucher codes handed out on request, as a handler
 * plugin.
 *
 * Topic "voucher-requests", type VoucherRequested, payload
 * {"customer": "c7"}, Kafka key = the customer.  Every customer gets
 * exactly one code, no code goes to two customers, and nothing is handed
 * out once the bank is empty:
 *
 *  - the customer already holds a code → VoucherIssued again, with that
 *    code (a customer who asks twice gets the same answer twice);
 *  - else the lowest free code is taken → VoucherIssued;
 *  - else (the bank is empty) → VoucherRefused.
 *
 * Replies go to "voucher-replies", key = the customer, payload
 * {"customer": "c7", "code": "V0003"} (code null when refused).
 *
 * The bank is the table vouchers(code TEXT PRIMARY KEY, customer TEXT
 * UNIQUE NULL, …) of the service store.  plugin.args "codes=N" (1..9999,
 * default 20) seeds it with V0001..VN the first time a request finds it
 * empty, inside that request's savepoint.
 *
 * The plugin does not link libtokenbox: the tbx_* symbols come from the
 * host that loads it (`tokenbox worker`).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tokenbox/tokenbox.h>

#include "plugin_args.h"

#define PLUGIN	      "libtbx_vouchers"
#define REQUESTS      "voucher-requests"
#define REPLIES	      "voucher-replies"
#define CUSTOMER_MAX  128 /* bytes */
#define CODES_DEFAULT 20
#define CODES_MAX     9999 /* V0001..V9999 */
#define PLUGIN_EXPORT __attribute__((visibility("default")))

PLUGIN_EXPORT int tbx_plugin_abi_version(void);
PLUGIN_EXPORT int tbx_plugin_init(tbx_worker_t *worker, const char *args);

static const char table_sql[] =
    "CREATE TABLE IF NOT EXISTS vouchers("
    " code TEXT PRIMARY KEY,"
    " customer TEXT UNIQUE NULL," /* NULL: still in the bank */
    " request_id TEXT,"		  /* tbx-id of the request that took it */
    " issued_at INTEGER)";

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs one statement without parameters. @returns an SQLite code. */
static int run_sql(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *stmt = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);

	if (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_DONE)
		rc = SQLITE_OK;
	sqlite3_finalize(stmt);
	return rc;
}

/*
 * Makes sure the bank exists.  The first request a store sees finds no
 * table and creates it; a request that finds the table empty seeds it.
 * Both happen inside the request's savepoint, under the store's write
 * lock: they commit with that request's effects, or not at all, and no
 * other worker sharing the store can seed it at the same time.  INSERT OR
 * IGNORE keeps the seeding harmless should two configurations overlap.
 * @returns 0, or -1 with the reason set on @p ctx.
 */
static int bank_ensure(tbx_ctx_t *ctx, sqlite3 *db, int codes)
{
	static const char probe_sql[] = "SELECT EXISTS(SELECT 1 FROM vouchers)";
	sqlite3_stmt *stmt = NULL;
	char code[16];
	int rc, empty = 0;

	rc = sqlite3_prepare_v2(db, probe_sql, -1, &stmt, NULL);
	if (rc != SQLITE_OK && (rc = run_sql(db, table_sql)) == SQLITE_OK)
		rc = sqlite3_prepare_v2(db, probe_sql, -1, &stmt, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(stmt);
		if (rc == SQLITE_ROW) {
			empty = sqlite3_column_int(stmt, 0) == 0;
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(stmt);
	stmt = NULL;
	if (rc == SQLITE_OK && empty) {
		rc = sqlite3_prepare_v2(
		    db, "INSERT OR IGNORE INTO vouchers(code) VALUES (?)", -1,
		    &stmt, NULL);
		for (int i = 1; rc == SQLITE_OK && i <= codes; i++) {
			snprintf(code, sizeof(code), "V%04d", i);
			sqlite3_bind_text(stmt, 1, code, -1, SQLITE_TRANSIENT);
			if ((rc = sqlite3_step(stmt)) == SQLITE_DONE)
				rc = sqlite3_reset(stmt);
		}
		sqlite3_finalize(stmt);
	}
	if (rc != SQLITE_OK) {
		tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
		return -1;
	}
	return 0;
}

/* Queues the reply: VoucherIssued with @p code, or VoucherRefused when
 * @p code is NULL.  @returns TBX_OK or an error code. */
static int reply(tbx_ctx_t *ctx, const char *customer, const char *code)
{
	cJSON *root = cJSON_CreateObject();
	char *payload = NULL;
	int err = TBX_ENOMEM;

	if (root && cJSON_AddStringToObject(root, "customer", customer) &&
	    (code ? cJSON_AddStringToObject(root, "code", code)
		  : cJSON_AddNullToObject(root, "code")) &&
	    (payload = cJSON_PrintUnformatted(root))) {
		/* The key names the customer even when the request had none:
		 * the replies of one customer stay in one partition. */
		tbx_out_t out = {.topic = REPLIES,
				 .type =
				     code ? "VoucherIssued" : "VoucherRefused",
				 .key = customer,
				 .key_len = strlen(customer),
				 .payload = payload,
				 .payload_len = strlen(payload)};
		err = tbx_ctx_send(ctx, &out);
	}
	cJSON_free(payload);
	cJSON_Delete(root);
	return err;
}

/*
 * Replies with the customer's code if there is one.
 * @returns 1 when a reply was queued, 0 when the customer holds no code,
 * -1 on failure (reason set).
 */
static int reply_held(tbx_ctx_t *ctx, sqlite3 *db, const char *customer)
{
	sqlite3_stmt *stmt = NULL;
	int rc, found = -1;

	rc = sqlite3_prepare_v2(db,
				"SELECT code FROM vouchers WHERE customer = ?",
				-1, &stmt, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(stmt, 1, customer, -1, SQLITE_STATIC);
		rc = sqlite3_step(stmt);
		if (rc == SQLITE_DONE) {
			found = 0;
		} else if (rc == SQLITE_ROW) {
			/* The column's text lives until the statement is
			 * finalized; reply() copies it. */
			const char *code =
			    (const char *)sqlite3_column_text(stmt, 0);
			if (code && reply(ctx, customer, code) == TBX_OK)
				found = 1;
			else
				tbx_ctx_set_error(ctx,
						  "cannot queue the reply");
		}
	}
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
	return found;
}

/*
 * Gives the lowest free code to @p customer.  The statement runs under
 * the store's write lock, which every worker of the group takes for its
 * whole batch: no two requests see the same free code.  The UNIQUE
 * constraint on customer would refuse a second code should a bug try.
 * @returns 1 when a code was taken, 0 when the bank is empty, -1 on
 * failure (reason set).
 */
static int take_code(tbx_ctx_t *ctx, sqlite3 *db, const char *customer,
		     const char *request_id)
{
	static const char sql[] =
	    "UPDATE vouchers SET customer = ?1, request_id = ?2, "
	    "issued_at = ?3 WHERE code = (SELECT code FROM vouchers "
	    "WHERE customer IS NULL ORDER BY code LIMIT 1)";
	sqlite3_stmt *stmt = NULL;
	int rc, taken = -1;

	rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(stmt, 1, customer, -1, SQLITE_STATIC);
		sqlite3_bind_text(stmt, 2, request_id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(stmt, 3, wall_ms());
		if ((rc = sqlite3_step(stmt)) == SQLITE_DONE)
			taken = sqlite3_changes(db) > 0;
	}
	if (rc != SQLITE_DONE)
		tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
	return taken;
}

/* Copies the customer of a request {"customer": "<name>"} into @p out.
 * @returns 0, or -1 for anything else. */
static int request_parse(const void *payload, size_t len,
			 char out[CUSTOMER_MAX + 1])
{
	const cJSON *customer;
	cJSON *root;
	size_t n;
	int rc = -1;

	if (!payload || !(root = cJSON_ParseWithLength(payload, len)))
		return -1;
	customer = cJSON_GetObjectItemCaseSensitive(root, "customer");
	if (cJSON_IsString(customer) &&
	    (n = strlen(customer->valuestring)) >= 1 && n <= CUSTOMER_MAX) {
		memcpy(out, customer->valuestring, n + 1);
		rc = 0;
	}
	cJSON_Delete(root);
	return rc;
}

/*
 * The handler.  Everything it writes — the seeded bank, the code taken —
 * and the reply it queues commit with the request's outbox row in one
 * transaction, so a request takes effect once however often it is
 * delivered, and its reply is dispatched with one tbx-id.
 */
static tbx_verdict_t on_request(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				void *opaque)
{
	int codes = (int)(intptr_t)opaque;
	sqlite3 *db = tbx_ctx_db(ctx);
	char customer[CUSTOMER_MAX + 1];
	size_t len, key_len;
	const void *payload = tbx_msg_payload(msg, &len);
	const void *key = tbx_msg_key(msg, &key_len);
	int r;

	if (request_parse(payload, len, customer)) {
		tbx_ctx_set_error(ctx, "not a voucher request: expected "
				       "{\"customer\": \"<name>\"}");
		return TBX_VERDICT_REJECT;
	}
	/* The key routes a customer's requests to one partition; a request
	 * keyed otherwise is a producer's bug worth seeing. */
	if (key && (key_len != strlen(customer) ||
		    memcmp(key, customer, key_len) != 0)) {
		tbx_ctx_set_error(ctx, "the key is not the request's customer");
		return TBX_VERDICT_REJECT;
	}
	if (bank_ensure(ctx, db, codes))
		return TBX_VERDICT_RETRY;
	if ((r = reply_held(ctx, db, customer)) < 0)
		return TBX_VERDICT_RETRY;
	if (r == 1)
		return TBX_VERDICT_OK; /* asked again: the same code */
	if ((r = take_code(ctx, db, customer, tbx_msg_id(msg))) < 0)
		return TBX_VERDICT_RETRY;
	if (r == 1) {
		/* Read back what the UPDATE chose: the customer's code. */
		if ((r = reply_held(ctx, db, customer)) == 0)
			tbx_ctx_set_error(ctx, "the code taken is not found");
	} else if (reply(ctx, customer, NULL) == TBX_OK) {
		r = 1; /* the bank is empty */
	} else {
		tbx_ctx_set_error(ctx, "cannot queue the refusal");
	}
	return r == 1 ? TBX_VERDICT_OK : TBX_VERDICT_RETRY;
}

int tbx_plugin_abi_version(void)
{
	return TBX_PLUGIN_ABI_VERSION;
}

/*
 * plugin.args: "codes=N" (optional).  The size of the bank travels in the
 * opaque pointer itself: the plugin keeps no memory, so nothing is left
 * to free when the worker goes (the plugin ABI has no finalizer).
 */
int tbx_plugin_init(tbx_worker_t *worker, const char *args)
{
	plugin_arg_t arg;
	char *end;
	const char *p = args ? args : "";
	long codes = CODES_DEFAULT;
	int rc, err;

	while ((rc = plugin_arg_next(&p, &arg)) == 1) {
		if (strcmp(arg.key, "codes") != 0) {
			fprintf(stderr,
				PLUGIN ": plugin.args: unknown key '%s' "
				       "(expected codes=N)\n",
				arg.key);
			return TBX_ECONF;
		}
		errno = 0;
		codes = strtol(arg.val, &end, 10);
		if (errno || end == arg.val || *end || codes < 1 ||
		    codes > CODES_MAX) {
			fprintf(stderr,
				PLUGIN ": plugin.args: codes: '%s' is not an "
				       "integer in 1..%d\n",
				arg.val, CODES_MAX);
			return TBX_ECONF;
		}
	}
	if (rc < 0) {
		fprintf(stderr,
			PLUGIN ": plugin.args: expected \"codes=N\", "
			       "got \"%s\"\n",
			args);
		return TBX_ECONF;
	}
	err = tbx_worker_register(worker, REQUESTS, "VoucherRequested",
				  on_request, (void *)(intptr_t)codes);
	if (err != TBX_OK)
		fprintf(stderr, PLUGIN ": cannot register on %s: %s\n",
			REQUESTS, tbx_strerror(err));
	return err;
}
