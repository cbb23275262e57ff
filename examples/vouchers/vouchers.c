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
 * It runs on either service store, an SQLite file (store.path) or
 * PostgreSQL (store.url): it writes through tbx_ctx_exec() and reads
 * through tbx_ctx_query(), with $1 … $n parameters, in SQL both databases
 * accept.
 *
 * The plugin does not link libtokenbox: the tbx_* symbols come from the
 * host that loads it (`tokenbox worker`).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
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
#define CODE_MAX      128 /* bytes of a code in the bank */
#define CODES_DEFAULT 20
#define CODES_MAX     9999 /* V0001..V9999 */
#define PLUGIN_EXPORT __attribute__((visibility("default")))

PLUGIN_EXPORT int tbx_plugin_abi_version(void);
PLUGIN_EXPORT int tbx_plugin_init(tbx_worker_t *worker, const char *args);

/* Types both SQLite and PostgreSQL take: TEXT, and BIGINT (an INTEGER
 * column in SQLite). */
static const char table_sql[] =
    "CREATE TABLE IF NOT EXISTS vouchers("
    " code TEXT PRIMARY KEY,"
    " customer TEXT UNIQUE NULL," /* NULL: still in the bank */
    " request_id TEXT,"		  /* tbx-id of the request that took it */
    " issued_at BIGINT)";

/* V0001..V<$1>, only into an empty bank: the row source is empty as soon
 * as the bank holds a code.  ON CONFLICT keeps two workers that both
 * found it empty from failing (PostgreSQL: the second waits for the
 * first's commit, then inserts nothing); "WHERE true" makes SQLite read
 * ON CONFLICT after a SELECT as the upsert clause. */
static const char seed_sql[] =
    "WITH RECURSIVE n(i) AS ("
    " SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM vouchers)"
    " UNION ALL SELECT i + 1 FROM n WHERE i < CAST($1 AS INTEGER))"
    " INSERT INTO vouchers(code)"
    " SELECT 'V' || substr(CAST(10000 + i AS TEXT), 2) FROM n WHERE true"
    " ON CONFLICT (code) DO NOTHING";

/* The lowest free code to the customer, if it is still free when the row
 * is written (take_code()). */
static const char take_sql[] =
    "UPDATE vouchers SET customer = $1, request_id = $2, issued_at = $3"
    " WHERE code = (SELECT MIN(code) FROM vouchers WHERE customer IS NULL)"
    " AND customer IS NULL RETURNING code";

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The first column of a statement's first row, for tbx_ctx_query(). */
typedef struct first {
	int found; /* 1 a value; -1 NULL or too long */
	char text[CODE_MAX + 1];
} first_t;

static int first_value(void *arg, int ncols, const char *const *cols)
{
	first_t *f = arg;
	size_t n;

	f->found = -1;
	if (ncols >= 1 && cols[0] && (n = strlen(cols[0])) <= CODE_MAX) {
		memcpy(f->text, cols[0], n + 1);
		f->found = 1;
	}
	return 1; /* the first row is all it needs */
}

/* Runs @p sql and reads its first row's first column into @p f.
 * @returns 1 a value, 0 no row, -1 on failure (reason set). */
static int query_first(tbx_ctx_t *ctx, const char *sql,
		       const char *const *params, int n, first_t *f)
{
	f->found = 0;
	if (tbx_ctx_query(ctx, sql, params, n, first_value, f) != TBX_OK)
		return -1; /* the reason is what the database said */
	if (f->found < 0)
		tbx_ctx_set_error(ctx, "a code in the bank is NULL or longer "
				       "than 128 bytes");
	return f->found;
}

/*
 * Makes sure the bank exists and is seeded.  Both statements run inside
 * the request's savepoint: they commit with that request's effects, or
 * not at all.  The first request a store sees creates the table; the
 * first that finds it empty seeds it.  Running both for every request
 * keeps the plugin free of state, for a statement that finds the table
 * there and one that inserts nothing.
 * @returns 0, or -1 with the reason set on @p ctx.
 */
static int bank_ensure(tbx_ctx_t *ctx, int codes)
{
	char count[16];
	const char *params[] = {count};

	snprintf(count, sizeof(count), "%d", codes);
	if (tbx_ctx_exec(ctx, table_sql, NULL, 0, NULL) != TBX_OK ||
	    tbx_ctx_exec(ctx, seed_sql, params, 1, NULL) != TBX_OK)
		return -1;
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
static int reply_held(tbx_ctx_t *ctx, const char *customer)
{
	first_t code;
	int r =
	    query_first(ctx, "SELECT code FROM vouchers WHERE customer = $1",
			&customer, 1, &code);

	if (r == 1 && reply(ctx, customer, code.text) != TBX_OK) {
		tbx_ctx_set_error(ctx, "cannot queue the reply");
		r = -1;
	}
	return r;
}

/*
 * Gives the lowest free code to @p customer and replies with it.
 *
 * On SQLite the UPDATE runs under the store's write lock, which every
 * worker of the group holds for its whole batch: no two requests see the
 * same free code, and the first try takes it.  On PostgreSQL the workers
 * run side by side (READ COMMITTED) and two may aim at the same code: the
 * second waits for the first's row lock, and once the first commits, the
 * row no longer passes "customer IS NULL" and the second changes nothing.
 * It then looks again: a free code left means another worker took its
 * pick, and it tries the next (each such round follows another worker's
 * commit of a code, so the rounds end); none left means the bank is
 * empty.  The UNIQUE constraint on customer refuses a second code should
 * two requests of one customer ever run at once (the statement fails, the
 * request is retried and then finds the code).
 * @returns 1 when a code was taken and its reply queued, 0 when the bank
 * is empty, -1 on failure (reason set).
 */
static int take_code(tbx_ctx_t *ctx, const char *customer,
		     const char *request_id)
{
	char at[24];
	const char *params[] = {customer, request_id, at};
	first_t code, free_code;
	int r;

	snprintf(at, sizeof(at), "%" PRId64, wall_ms());
	for (int round = 0; round <= CODES_MAX; round++) {
		if ((r = query_first(ctx, take_sql, params, 3, &code)) != 0) {
			if (r == 1 &&
			    reply(ctx, customer, code.text) != TBX_OK) {
				tbx_ctx_set_error(ctx,
						  "cannot queue the reply");
				r = -1;
			}
			return r;
		}
		r = query_first(ctx,
				"SELECT code FROM vouchers WHERE customer IS "
				"NULL LIMIT 1",
				NULL, 0, &free_code);
		if (r <= 0)
			return r; /* the bank is empty, or a failure */
	}
	tbx_ctx_set_error(ctx, "no free code stayed free long enough");
	return -1;
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
	/* A failed statement made the message's error reason (what the
	 * database said): the request is retried, and dead-lettered with
	 * that reason after retry.max. */
	if (bank_ensure(ctx, codes))
		return TBX_VERDICT_RETRY;
	if ((r = reply_held(ctx, customer)) < 0)
		return TBX_VERDICT_RETRY;
	if (r == 1)
		return TBX_VERDICT_OK; /* asked again: the same code */
	if ((r = take_code(ctx, customer, tbx_msg_id(msg))) < 0)
		return TBX_VERDICT_RETRY;
	if (r == 0 && reply(ctx, customer, NULL) != TBX_OK) {
		tbx_ctx_set_error(ctx, "cannot queue the refusal");
		return TBX_VERDICT_RETRY;
	}
	return TBX_VERDICT_OK; /* issued, or refused: the bank is empty */
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
