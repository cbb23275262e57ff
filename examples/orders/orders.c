/*
 * orders — the two services of `tokenbox demo` as one handler plugin.
 *
 *   publisher --orders--> order-service --payments--> payment-service
 *
 * plugin.args picks the service a worker runs:
 *
 *   role=order-service     topic "orders", type OrderPlaced: inserts a row
 *                          into the table `orders` and sends
 *                          PaymentRequested to "payments", same key;
 *   role=payment-service   topic "payments", type PaymentRequested:
 *                          inserts a row into the table `payments`.
 *
 * Payload at both hops: {"order": "<n>", "amount": <cents>}; the Kafka key
 * is the customer.  Neither table has a unique constraint: the rows are
 * exactly once because tokenbox runs each handler to commit once per
 * message and group, not because a constraint hides a second run.
 *
 * The plugin is loaded by `tokenbox worker` (plugin=…, plugin.args=…); it
 * does not link libtokenbox: the tbx_* symbols come from the host.
 */
#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <tokenbox/tokenbox.h>

#include "plugin_args.h"

#define PLUGIN	      "libtbx_orders"
#define ORDER_NO_MAX  20  /* digits of an order number */
#define CUSTOMER_MAX  128 /* bytes of a key */
#define PLUGIN_EXPORT __attribute__((visibility("default")))

/* The two entry points `tokenbox worker` looks up with dlsym(). */
PLUGIN_EXPORT int tbx_plugin_abi_version(void);
PLUGIN_EXPORT int tbx_plugin_init(tbx_worker_t *worker, const char *args);

/*
 * A service of the pipeline.  The handler gets a pointer to its role as
 * opaque; roles are constant, so nothing needs freeing when the worker
 * goes (the plugin ABI has no finalizer).
 */
typedef struct role {
	const char *name;
	const char *topic; /* consumed */
	const char *type;
	const char *table_sql; /* run when the insert cannot be prepared */
	const char *insert_sql;
	const char *next_topic; /* NULL: the last hop */
	const char *next_type;
} role_t;

static const role_t roles[] = {
    {.name = "order-service",
     .topic = "orders",
     .type = "OrderPlaced",
     .table_sql = "CREATE TABLE IF NOT EXISTS orders("
		  " order_no TEXT NOT NULL,"
		  " customer TEXT NOT NULL,"
		  " amount INTEGER NOT NULL,"
		  " msg_id TEXT NOT NULL," /* tbx-id of the OrderPlaced */
		  " handled_at INTEGER NOT NULL)",
     .insert_sql = "INSERT INTO orders(order_no, customer, amount, msg_id, "
		   "handled_at) VALUES (?, ?, ?, ?, ?)",
     .next_topic = "payments",
     .next_type = "PaymentRequested"},
    {.name = "payment-service",
     .topic = "payments",
     .type = "PaymentRequested",
     .table_sql = "CREATE TABLE IF NOT EXISTS payments("
		  " order_no TEXT NOT NULL,"
		  " customer TEXT NOT NULL,"
		  " amount INTEGER NOT NULL,"
		  " msg_id TEXT NOT NULL," /* tbx-id of the PaymentRequested */
		  " handled_at INTEGER NOT NULL)",
     .insert_sql = "INSERT INTO payments(order_no, customer, amount, "
		   "msg_id, handled_at) VALUES (?, ?, ?, ?, ?)"},
};

typedef struct order {
	char no[ORDER_NO_MAX + 1];
	long long amount;
} order_t;

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* @returns 0 when @p payload is {"order": "<digits>", "amount": <integer
 * >= 0>}. */
static int order_parse(const void *payload, size_t len, order_t *order)
{
	const cJSON *no, *amount;
	cJSON *root;
	size_t n;
	int rc = -1;

	if (!payload || !(root = cJSON_ParseWithLength(payload, len)))
		return -1;
	no = cJSON_GetObjectItemCaseSensitive(root, "order");
	amount = cJSON_GetObjectItemCaseSensitive(root, "amount");
	if (cJSON_IsString(no) && cJSON_IsNumber(amount) &&
	    (n = strlen(no->valuestring)) >= 1 && n <= ORDER_NO_MAX &&
	    strspn(no->valuestring, "0123456789") == n &&
	    amount->valuedouble >= 0 && amount->valuedouble < 1e15 &&
	    amount->valuedouble == (double)(long long)amount->valuedouble) {
		memcpy(order->no, no->valuestring, n + 1);
		order->amount = (long long)amount->valuedouble;
		rc = 0;
	}
	cJSON_Delete(root);
	return rc;
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
 * Prepares the role's insert on the handler's connection.  The first
 * message a store sees finds no table: it is created then, inside the
 * message's savepoint, so it commits with the first row or not at all.
 * Later messages pay no DDL.
 */
static sqlite3_stmt *prepare_insert(tbx_ctx_t *ctx, sqlite3 *db,
				    const role_t *role)
{
	sqlite3_stmt *stmt = NULL;

	if (sqlite3_prepare_v2(db, role->insert_sql, -1, &stmt, NULL) ==
	    SQLITE_OK)
		return stmt;
	if (run_sql(db, role->table_sql) == SQLITE_OK &&
	    sqlite3_prepare_v2(db, role->insert_sql, -1, &stmt, NULL) ==
		SQLITE_OK)
		return stmt;
	tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
	return NULL;
}

/* Queues the next hop's message: same order, same key (key NULL keeps the
 * incoming one, so an order's messages stay in its customer's partition).
 * @returns TBX_OK or an error code. */
static int send_next(tbx_ctx_t *ctx, const role_t *role, const order_t *order)
{
	cJSON *root = cJSON_CreateObject();
	char *payload = NULL;
	int err = TBX_ENOMEM;

	if (root && cJSON_AddStringToObject(root, "order", order->no) &&
	    cJSON_AddNumberToObject(root, "amount", (double)order->amount) &&
	    (payload = cJSON_PrintUnformatted(root))) {
		tbx_out_t out = {.topic = role->next_topic,
				 .type = role->next_type,
				 .key = NULL,
				 .payload = payload,
				 .payload_len = strlen(payload)};
		err = tbx_ctx_send(ctx, &out); /* copies the payload */
	}
	cJSON_free(payload);
	cJSON_Delete(root);
	return err;
}

/*
 * The handler of both roles.  It runs inside the worker's transaction, in
 * the message's savepoint: the row and the queued message commit together
 * with the outbox row that marks the message handled, or not at all.
 */
static tbx_verdict_t on_order(tbx_ctx_t *ctx, const tbx_msg_t *msg,
			      void *opaque)
{
	const role_t *role = opaque;
	sqlite3 *db = tbx_ctx_db(ctx);
	size_t len, key_len;
	const void *payload = tbx_msg_payload(msg, &len);
	const void *key = tbx_msg_key(msg, &key_len);
	sqlite3_stmt *stmt;
	order_t order;
	int rc;

	if (order_parse(payload, len, &order) || !key || key_len == 0 ||
	    key_len > CUSTOMER_MAX) {
		/* Retrying cannot fix the message: dead-letter it. */
		tbx_ctx_set_error(ctx, "not an order: expected the customer as "
				       "key and {\"order\": \"<n>\", "
				       "\"amount\": <cents>}");
		return TBX_VERDICT_REJECT;
	}
	if (!(stmt = prepare_insert(ctx, db, role)))
		return TBX_VERDICT_RETRY;
	sqlite3_bind_text(stmt, 1, order.no, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 2, key, (int)key_len, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 3, order.amount);
	sqlite3_bind_text(stmt, 4, tbx_msg_id(msg), -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 5, wall_ms());
	rc = sqlite3_step(stmt);
	if (rc != SQLITE_DONE)
		tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
	if (rc != SQLITE_DONE)
		return TBX_VERDICT_RETRY; /* dead-lettered after retry.max */

	if (role->next_topic && send_next(ctx, role, &order) != TBX_OK) {
		tbx_ctx_set_error(ctx, "cannot queue the next message");
		return TBX_VERDICT_RETRY;
	}
	return TBX_VERDICT_OK;
}

int tbx_plugin_abi_version(void)
{
	return TBX_PLUGIN_ABI_VERSION;
}

/*
 * plugin.args: "role=order-service" or "role=payment-service".  The
 * plugin has no way to return a message: it explains a refusal on stderr
 * and returns TBX_ECONF.
 */
int tbx_plugin_init(tbx_worker_t *worker, const char *args)
{
	plugin_arg_t arg;
	const role_t *role = NULL;
	const char *p = args ? args : "";
	int rc, err;

	while ((rc = plugin_arg_next(&p, &arg)) == 1) {
		if (strcmp(arg.key, "role") != 0) {
			fprintf(stderr,
				PLUGIN ": plugin.args: unknown key '%s' "
				       "(expected role=order-service or "
				       "role=payment-service)\n",
				arg.key);
			return TBX_ECONF;
		}
		role = NULL;
		for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
			if (strcmp(arg.val, roles[i].name) == 0)
				role = &roles[i];
		if (!role) {
			fprintf(stderr,
				PLUGIN ": plugin.args: unknown role '%s' "
				       "(order-service or payment-service)\n",
				arg.val);
			return TBX_ECONF;
		}
	}
	if (rc < 0 || !role) {
		fprintf(stderr, PLUGIN ": plugin.args must be "
				       "\"role=order-service\" or "
				       "\"role=payment-service\"\n");
		return TBX_ECONF;
	}
	err = tbx_worker_register(worker, role->topic, role->type, on_order,
				  (void *)role);
	if (err != TBX_OK)
		fprintf(stderr, PLUGIN ": cannot register %s on %s: %s\n",
			role->type, role->topic, tbx_strerror(err));
	return err;
}
