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
 *
 * It runs on either service store, an SQLite file (store.path) or
 * PostgreSQL (store.url): its statements go through tbx_ctx_exec(), with
 * $1 … $n parameters, in SQL both databases accept.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
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
	const char *table_sql; /* run before a worker's first insert */
	const char *insert_sql;
	const char *next_topic; /* NULL: the last hop */
	const char *next_type;
} role_t;

/* Types both SQLite and PostgreSQL take: TEXT, and BIGINT (an INTEGER
 * column in SQLite). */
static const role_t roles[] = {
    {.name = "order-service",
     .topic = "orders",
     .type = "OrderPlaced",
     .table_sql = "CREATE TABLE IF NOT EXISTS orders("
		  " order_no TEXT NOT NULL,"
		  " customer TEXT NOT NULL,"
		  " amount BIGINT NOT NULL,"
		  " msg_id TEXT NOT NULL," /* tbx-id of the OrderPlaced */
		  " handled_at BIGINT NOT NULL)",
     .insert_sql = "INSERT INTO orders(order_no, customer, amount, msg_id, "
		   "handled_at) VALUES ($1, $2, $3, $4, $5)",
     .next_topic = "payments",
     .next_type = "PaymentRequested"},
    {.name = "payment-service",
     .topic = "payments",
     .type = "PaymentRequested",
     .table_sql = "CREATE TABLE IF NOT EXISTS payments("
		  " order_no TEXT NOT NULL,"
		  " customer TEXT NOT NULL,"
		  " amount BIGINT NOT NULL,"
		  " msg_id TEXT NOT NULL," /* tbx-id of the PaymentRequested */
		  " handled_at BIGINT NOT NULL)",
     .insert_sql = "INSERT INTO payments(order_no, customer, amount, "
		   "msg_id, handled_at) VALUES ($1, $2, $3, $4, $5)"},
};

#define ROLES (sizeof(roles) / sizeof(roles[0]))

/* Per role: a statement of this process made (or found) the table and
 * did not fail.  Cleared by a failed insert, so that the next attempt
 * makes it again (the first message rolled back, or another store). */
static int table_ready[ROLES];

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

/*
 * Makes the role's table unless this process did.  The first message a
 * store sees creates it, inside the message's savepoint, so it commits
 * with the first row or not at all; later messages pay no DDL.
 */
static int table_make(tbx_ctx_t *ctx, const role_t *role)
{
	int *ready = &table_ready[role - roles];
	int err;

	if (*ready)
		return TBX_OK;
	if ((err = tbx_ctx_exec(ctx, role->table_sql, NULL, 0, NULL)) == TBX_OK)
		*ready = 1;
	return err;
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
	size_t len, key_len;
	const void *payload = tbx_msg_payload(msg, &len);
	const void *key = tbx_msg_key(msg, &key_len);
	char customer[CUSTOMER_MAX + 1], amount[24], at[24];
	const char *params[5];
	int64_t changes = 0;
	order_t order;

	if (order_parse(payload, len, &order) || !key || key_len == 0 ||
	    key_len > CUSTOMER_MAX || memchr(key, '\0', key_len)) {
		/* Retrying cannot fix the message: dead-letter it. */
		tbx_ctx_set_error(ctx, "not an order: expected the customer as "
				       "key and {\"order\": \"<n>\", "
				       "\"amount\": <cents>}");
		return TBX_VERDICT_REJECT;
	}
	/* Parameters are text; each database converts them to the
	 * column's type. */
	memcpy(customer, key, key_len);
	customer[key_len] = '\0';
	snprintf(amount, sizeof(amount), "%lld", order.amount);
	snprintf(at, sizeof(at), "%" PRId64, wall_ms());
	params[0] = order.no;
	params[1] = customer;
	params[2] = amount;
	params[3] = tbx_msg_id(msg);
	params[4] = at;
	/* A failed statement made the message's error reason (what the
	 * database said): the message is retried, and dead-lettered with
	 * that reason after retry.max. */
	if (table_make(ctx, role) != TBX_OK)
		return TBX_VERDICT_RETRY;
	if (tbx_ctx_exec(ctx, role->insert_sql, params, 5, &changes) !=
		TBX_OK ||
	    changes != 1) {
		table_ready[role - roles] = 0;
		return TBX_VERDICT_RETRY;
	}
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
