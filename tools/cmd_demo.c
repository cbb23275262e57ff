/*
 * `tokenbox demo`: a two-hop pipeline on an embedded librdkafka mock
 * cluster (or, with --bootstrap-servers, on an existing cluster, in topics
 * and groups named after the run), with what exactly-once has to survive
 * mixed in.
 *
 *   publisher --orders--> order-service --payments--> payment-service
 *
 *  - ingress: a tbx_publisher publishes N OrderPlaced messages, keyed by
 *    customer, with tokens minted for the order-service group;
 *  - order-service inserts a row into its table `orders` and sends
 *    PaymentRequested; payment-service inserts a row into `payments`.
 *    Neither table has a unique constraint: a double effect would show;
 *  - duplicates at both hops: a plain consumer (no group) reads the records
 *    back, picks about 10% of them (--seed) and a plain producer re-produces
 *    each byte for byte (key, value, every header, same partition) at a
 *    random point of the hop's progress, so some copies land before their
 *    original was handled and some after;
 *  - the order-service worker is destroyed and recreated with the same
 *    configuration once about half of the orders were handled.
 *
 * The result counts the business rows: exactly once means N rows with N
 * distinct orders in both tables.  The token store should be empty too.
 *
 * With --store-url the stores are schemas of a PostgreSQL database, fresh
 * per run (dropped at the end unless --keep), and the business tables are
 * in the services' schemas.
 *
 * The pipeline uses only the public API (tokenbox/tokenbox.h), like any
 * user of the library would, plus librdkafka, SQLite and cJSON directly;
 * the handlers write through tbx_ctx_db() on SQLite and tbx_ctx_exec() on
 * PostgreSQL.  What is left in the token store at the end is read through
 * the token store's interface (tokens/tokens.h), and the demo's own
 * PostgreSQL connection (creating and counting the business tables,
 * dropping the schemas) is the stores' (store/pg.h).  Everything runs on
 * the calling thread; the handlers run inside tbx_worker_poll().
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/pg.h"
#include "tokenbox/tokenbox.h"
#include "tokens/tokens.h"
#include "tools/cli.h"
#include "tools/cli_store.h"
#include "tools/kafka_admin.h"

#define CMD "demo"

#define DEMO_DEFAULT_MESSAGES 10000
#define DEMO_MAX_MESSAGES     1000000
#define DEMO_PARTITIONS	      4
#define DEMO_CHUNK	      1000 /* published per flush */
#define DEMO_DUP_PERMILLE     100  /* share of records re-produced */
#define DEMO_POLL_MS	      100
#define DEMO_IDLE_ROUNDS      3 /* empty polls in a row that end the run */
/* The run fails when nothing moved (progress(): no order published, no
 * business row, no copy delivered, no record consumed that the end waits
 * for) for this long: a stall, not a slow machine.  Its total length is
 * not bounded: under load or the sanitizers a sound run takes minutes. */
#define DEMO_STALL_S	      120
#define DEMO_READ_MAX	      2000 /* records read back per round */
#define DEMO_MAX_SEED	      9007199254740991LL /* 2^53 - 1: exact in JSON */
#define DEMO_ADMIN_TIMEOUT_MS 60000

enum { OPT_STORE_URL = 256, OPT_TOKENS_FORMAT };

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* splitmix64: the same sequence for a seed on every libc. */
static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/*
 * Orders on the wire: {"order": "<n>", "amount": <cents>}, at both hops.
 */
typedef struct order {
	long long no;
	long long amount;
	char no_text[24];
} order_t;

/* @returns 0 when @p payload is an order with a number >= 1. */
static int order_parse(const void *payload, size_t len, order_t *order)
{
	const cJSON *no, *amount;
	cJSON *root;
	char *end;
	int rc = -1;

	if (!payload || !(root = cJSON_ParseWithLength(payload, len)))
		return -1;
	no = cJSON_GetObjectItemCaseSensitive(root, "order");
	amount = cJSON_GetObjectItemCaseSensitive(root, "amount");
	if (cJSON_IsString(no) && cJSON_IsNumber(amount) &&
	    no->valuestring[0] >= '1' && no->valuestring[0] <= '9' &&
	    strlen(no->valuestring) < sizeof(order->no_text)) {
		errno = 0;
		order->no = strtoll(no->valuestring, &end, 10);
		if (errno == 0 && *end == '\0') {
			snprintf(order->no_text, sizeof(order->no_text), "%s",
				 no->valuestring);
			order->amount = (long long)amount->valuedouble;
			rc = 0;
		}
	}
	cJSON_Delete(root);
	return rc;
}

/*
 * A service of the pipeline: its worker, its business table, and what the
 * demo needs to watch it.
 */
typedef struct hop {
	const char *group;    /* the service's name: stores, output */
	const char *table;    /* its business table */
	const char *group_id; /* its consumer group on the cluster */
	const char *topic;    /* consumed */
	const char *type;
	const char *create_sql;
	const char *insert_sql;
	const char *count_sql;
	const char *final_sql;	/* rows, distinct orders */
	const char *next_topic; /* NULL: the last hop */
	const char *next_type;
	char path[PATH_MAX];
	/* PostgreSQL (--store-url): the service's schema, the handler's
	 * insert, and the demo's statements on its own connection. */
	char schema[TBX_PG_IDENT_MAX + 1];
	char pg_insert[256];
	tbx__pg_t *pg; /* the demo's connection (borrowed); NULL: SQLite */
	tbx__pg_stmts_t stmts;
	int stmts_made;
	tbx_conf_t *conf; /* template: each instance gets a copy */
	tbx_worker_t *worker;
	tbx_stats_t past; /* counters of destroyed instances */
	int instances;
	/* The handler's insert, prepared once on the worker's connection;
	 * finalized before that worker is destroyed. */
	sqlite3 *stmt_db;
	sqlite3_stmt *insert;
	/* The demo's own connection: creates the table, counts rows. */
	sqlite3 *db;
	sqlite3_stmt *count;
	int64_t rows;
	int idle; /* consecutive empty polls */
} hop_t;

static tbx_verdict_t hop_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				void *opaque)
{
	hop_t *hop = opaque;
	sqlite3 *db = tbx_ctx_db(ctx);
	size_t len, key_len;
	const void *payload = tbx_msg_payload(msg, &len);
	const char *key = tbx_msg_key(msg, &key_len);
	char next[96];
	order_t order;
	int rc, n;

	if (order_parse(payload, len, &order) || !key) {
		tbx_ctx_set_error(ctx, "not an order: expected a key and "
				       "{\"order\": \"<n>\", \"amount\": <n>}");
		return TBX_VERDICT_REJECT;
	}
	if (!db) {
		/* PostgreSQL: the portable call, with text parameters. */
		char customer[64], amount[24], at[24];
		const char *params[4] = {order.no_text, customer, amount, at};

		if (key_len >= sizeof(customer)) {
			tbx_ctx_set_error(ctx, "the key is too long for a "
					       "customer");
			return TBX_VERDICT_REJECT;
		}
		snprintf(customer, sizeof(customer), "%.*s", (int)key_len, key);
		snprintf(amount, sizeof(amount), "%lld", order.amount);
		snprintf(at, sizeof(at), "%lld", (long long)wall_ms());
		if (tbx_ctx_exec(ctx, hop->pg_insert, params, 4, NULL))
			return TBX_VERDICT_RETRY; /* the reason is set */
	} else if (hop->stmt_db != db) {
		if (sqlite3_prepare_v3(db, hop->insert_sql, -1,
				       SQLITE_PREPARE_PERSISTENT, &hop->insert,
				       NULL) != SQLITE_OK) {
			tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
			sqlite3_finalize(hop->insert);
			hop->insert = NULL;
			return TBX_VERDICT_RETRY;
		}
		hop->stmt_db = db;
	}
	if (db) {
		sqlite3_bind_text(hop->insert, 1, order.no_text, -1,
				  SQLITE_TRANSIENT);
		sqlite3_bind_text(hop->insert, 2, key, (int)key_len,
				  SQLITE_TRANSIENT);
		sqlite3_bind_int64(hop->insert, 3, order.amount);
		sqlite3_bind_int64(hop->insert, 4, wall_ms());
		rc = sqlite3_step(hop->insert);
		sqlite3_reset(hop->insert);
		sqlite3_clear_bindings(hop->insert);
		if (rc != SQLITE_DONE) {
			tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
			return TBX_VERDICT_RETRY;
		}
	}
	if (!hop->next_topic)
		return TBX_VERDICT_OK;
	/* The key stays the customer's (NULL: keep the incoming one). */
	n = snprintf(next, sizeof(next), "{\"order\":\"%s\",\"amount\":%lld}",
		     order.no_text, order.amount);
	if (n < 0 || (size_t)n >= sizeof(next) ||
	    tbx_ctx_send(ctx, &(tbx_out_t){.topic = hop->next_topic,
					   .type = hop->next_type,
					   .payload = next,
					   .payload_len = (size_t)n}) !=
		TBX_OK) {
		tbx_ctx_set_error(ctx, "cannot queue the next message");
		return TBX_VERDICT_RETRY;
	}
	return TBX_VERDICT_OK;
}

static void stats_add(tbx_stats_t *sum, const tbx_stats_t *s)
{
	sum->consumed += s->consumed;
	sum->processed += s->processed;
	sum->duplicates_dropped += s->duplicates_dropped;
	sum->resumed += s->resumed;
	sum->retries += s->retries;
	sum->dead_lettered += s->dead_lettered;
	sum->untokened += s->untokened;
	sum->dispatched += s->dispatched;
	sum->tokens_created += s->tokens_created;
	sum->tokens_consumed += s->tokens_consumed;
	sum->attempts_lost += s->attempts_lost;
	sum->orphans_swept += s->orphans_swept;
	sum->set_orphans_swept += s->set_orphans_swept;
	sum->set_rows_swept += s->set_rows_swept;
	sum->batches += s->batches;
}

/* Counters over every instance of the hop's worker. */
static void hop_stats(const hop_t *hop, tbx_stats_t *out)
{
	tbx_stats_t now;

	*out = hop->past;
	if (hop->worker) {
		tbx_worker_stats(hop->worker, &now);
		stats_add(out, &now);
	}
}

/* Prepares, steps and finalizes a statement without parameters.
 * @returns the step's result code. */
static int run_once(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *stmt = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);

	if (rc == SQLITE_OK)
		rc = sqlite3_step(stmt);
	sqlite3_finalize(stmt);
	return rc;
}

/* The demo's statements on a PostgreSQL service schema. */
enum { Q_COUNT, Q_FINAL, Q_N };

/* Creates the business table in the hop's schema (made by the worker's
 * store) and prepares the demo's counts.  @returns 0 or -1. */
static int hop_pg_prepare(hop_t *hop, char *errstr, size_t errstr_size)
{
	char create[320], count[96], final[128];
	const char *tmpl[Q_N] = {count, final};
	int err;

	/* The schema's name is the demo's own, checked by
	 * tbx__pg_ident_check(): quoting it is enough. */
	snprintf(create, sizeof(create),
		 "CREATE TABLE IF NOT EXISTS \"%s\".%s(order_no text NOT "
		 "NULL, customer text NOT NULL, amount bigint NOT NULL, "
		 "handled_at bigint NOT NULL)",
		 hop->schema, hop->table);
	snprintf(count, sizeof(count), "SELECT COUNT(*) FROM @S.%s",
		 hop->table);
	snprintf(final, sizeof(final),
		 "SELECT COUNT(*), COUNT(DISTINCT order_no) FROM @S.%s",
		 hop->table);
	if ((err = tbx__pg_exec(hop->pg, create)) ||
	    (err = tbx__pg_stmts_init(&hop->stmts, hop->pg, hop->table, tmpl,
				      Q_N, hop->schema, NULL))) {
		snprintf(errstr, errstr_size, "%s: schema %s: %s",
			 hop->pg->where, hop->schema,
			 err == TBX_ENOMEM ? "out of memory"
					   : tbx__pg_errmsg(hop->pg));
		return -1;
	}
	hop->stmts_made = 1;
	return 0;
}

/* Creates a worker instance from a copy of the template and, the first
 * time, the business table. */
static int hop_start(hop_t *hop, char *errstr, size_t errstr_size)
{
	tbx_conf_t *conf = tbx_conf_dup(hop->conf);
	int err;

	if (!conf) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	hop->worker = tbx_worker_new(conf, errstr, errstr_size);
	if (!hop->worker) {
		tbx_conf_destroy(conf);
		return -1;
	}
	hop->instances++;
	hop->idle = 0;
	if ((err = tbx_worker_register(hop->worker, hop->topic, hop->type,
				       hop_handle, hop))) {
		snprintf(errstr, errstr_size, "%s: cannot register: %s",
			 hop->group, tbx_strerror(err));
		return -1;
	}
	/* The table exists before the first message can arrive: the
	 * worker created the file (or schema), the demo adds its business
	 * table. */
	if (hop->pg && !hop->stmts_made) {
		if (hop_pg_prepare(hop, errstr, errstr_size))
			return -1;
	} else if (!hop->pg && !hop->db) {
		if (sqlite3_open_v2(hop->path, &hop->db, SQLITE_OPEN_READWRITE,
				    NULL) != SQLITE_OK ||
		    sqlite3_busy_timeout(hop->db, 10000) != SQLITE_OK ||
		    run_once(hop->db, hop->create_sql) != SQLITE_DONE ||
		    sqlite3_prepare_v2(hop->db, hop->count_sql, -1, &hop->count,
				       NULL) != SQLITE_OK) {
			snprintf(errstr, errstr_size, "%s: %s", hop->path,
				 hop->db ? sqlite3_errmsg(hop->db)
					 : "out of memory");
			return -1;
		}
	}
	/* The first poll subscribes the group in the token store: senders
	 * mint its tokens from then on. */
	if ((err = tbx_worker_poll(hop->worker, 0, NULL))) {
		snprintf(errstr, errstr_size, "%s: %s", hop->group,
			 tbx_worker_errstr(hop->worker));
		return -1;
	}
	return 0;
}

/* Destroys the running instance, keeping its counters. */
static void hop_stop(hop_t *hop)
{
	tbx_stats_t now;

	if (!hop->worker)
		return;
	tbx_worker_stats(hop->worker, &now);
	stats_add(&hop->past, &now);
	/* The statement belongs to the worker's connection. */
	sqlite3_finalize(hop->insert);
	hop->insert = NULL;
	hop->stmt_db = NULL;
	tbx_worker_destroy(hop->worker);
	hop->worker = NULL;
}

static int64_t hop_count(hop_t *hop)
{
	int64_t n;

	/* A failed count keeps the last one: the final count reports. */
	if (hop->pg) {
		if (hop->stmts_made &&
		    !tbx__pg_run_i64(&hop->stmts, Q_COUNT, NULL, &n, NULL))
			hop->rows = n;
		return hop->rows;
	}
	if (sqlite3_step(hop->count) == SQLITE_ROW)
		hop->rows = sqlite3_column_int64(hop->count, 0);
	sqlite3_reset(hop->count); /* ends the read transaction */
	return hop->rows;
}

static void hop_fini(hop_t *hop)
{
	hop_stop(hop);
	sqlite3_finalize(hop->count);
	sqlite3_close(hop->db);
	if (hop->stmts_made)
		tbx__pg_stmts_free(&hop->stmts);
	hop->stmts_made = 0;
	tbx_conf_destroy(hop->conf);
}

/*
 * Duplicates.  A record picked for a copy is held (the consumed message
 * itself) until its hop has handled @c release_at messages, then produced
 * again byte for byte to its own partition.
 */
typedef struct held {
	rd_kafka_message_t *rkm;
	int64_t release_at;
} held_t;

typedef struct injector {
	const char *topic;
	const hop_t *hop;    /* whose progress releases the copies */
	unsigned char *seen; /* by order number: the original was read */
	int64_t seen_cnt;
	held_t *held;
	size_t held_cnt, held_cap;
	int64_t delivered, failed;
} injector_t;

static void on_dup_delivery(rd_kafka_t *rk, const rd_kafka_message_t *rkm,
			    void *opaque)
{
	injector_t *inj = rkm->_private;

	(void)rk;
	(void)opaque;
	if (rkm->err)
		inj->failed++;
	else
		inj->delivered++;
}

static void on_client_log(const rd_kafka_t *rk, int level, const char *fac,
			  const char *buf)
{
	(void)rk;
	if (level <= 3)
		fprintf(stderr, "tokenbox demo: librdkafka %s: %s\n", fac, buf);
}

static rd_kafka_t *client_new(rd_kafka_type_t type, const char *bootstraps,
			      char *errstr, size_t errstr_size)
{
	rd_kafka_conf_t *kc = rd_kafka_conf_new();
	rd_kafka_t *rk;

	if (!kc)
		return NULL;
	rd_kafka_conf_set_log_cb(kc, on_client_log);
	if ((bootstraps &&
	     rd_kafka_conf_set(kc, "bootstrap.servers", bootstraps, errstr,
			       errstr_size) != RD_KAFKA_CONF_OK) ||
	    rd_kafka_conf_set(kc, "log_level", "3", errstr, errstr_size) !=
		RD_KAFKA_CONF_OK) {
		rd_kafka_conf_destroy(kc);
		return NULL;
	}
	if (type == RD_KAFKA_CONSUMER) {
		/* A group id is needed for assign(); the reader never joins
		 * the group nor commits. */
		if (rd_kafka_conf_set(kc, "group.id", "tokenbox-demo-reader",
				      errstr, errstr_size) ||
		    rd_kafka_conf_set(kc, "enable.auto.commit", "false", errstr,
				      errstr_size) ||
		    rd_kafka_conf_set(kc, "auto.offset.reset", "earliest",
				      errstr, errstr_size)) {
			rd_kafka_conf_destroy(kc);
			return NULL;
		}
	} else if (bootstraps) {
		rd_kafka_conf_set_dr_msg_cb(kc, on_dup_delivery);
		rd_kafka_conf_set(kc, "linger.ms", "5", NULL, 0);
	}
	rk = rd_kafka_new(type, kc, errstr, errstr_size);
	if (!rk)
		rd_kafka_conf_destroy(kc);
	return rk;
}

static int hold(injector_t *inj, rd_kafka_message_t *rkm, int64_t release_at)
{
	if (inj->held_cnt == inj->held_cap) {
		size_t cap = inj->held_cap ? inj->held_cap * 2 : 256;
		held_t *grown = realloc(inj->held, cap * sizeof(*grown));
		if (!grown)
			return -1;
		inj->held = grown;
		inj->held_cap = cap;
	}
	inj->held[inj->held_cnt].rkm = rkm;
	inj->held[inj->held_cnt].release_at = release_at;
	inj->held_cnt++;
	return 0;
}

/* Reads what appeared on both topics; picks originals to copy.  Copies
 * already produced, and re-sends of a worker, are seen again and skipped
 * by order number. */
static int read_back(rd_kafka_t *reader, injector_t *injs, size_t inj_cnt,
		     int64_t n, uint64_t *rng)
{
	for (int i = 0; i < DEMO_READ_MAX; i++) {
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(reader, 0);
		injector_t *inj = NULL;
		order_t order;

		if (!rkm)
			break;
		if (!rkm->err) {
			const char *topic = rd_kafka_topic_name(rkm->rkt);
			for (size_t j = 0; j < inj_cnt && !inj; j++)
				if (strcmp(injs[j].topic, topic) == 0)
					inj = &injs[j];
		}
		if (!inj || order_parse(rkm->payload, rkm->len, &order) ||
		    order.no > n || inj->seen[order.no]) {
			rd_kafka_message_destroy(rkm);
			continue;
		}
		inj->seen[order.no] = 1;
		inj->seen_cnt++;
		if (rng_next(rng) % 1000 >= DEMO_DUP_PERMILLE) {
			rd_kafka_message_destroy(rkm);
			continue;
		}
		if (hold(inj, rkm, (int64_t)(rng_next(rng) % (uint64_t)n))) {
			rd_kafka_message_destroy(rkm);
			return -1;
		}
	}
	return 0;
}

/* Re-produces the held records whose time has come. */
static int inject_due(injector_t *inj, rd_kafka_t *producer, int64_t handled,
		      char *errstr, size_t errstr_size)
{
	size_t kept = 0;

	for (size_t i = 0; i < inj->held_cnt; i++) {
		held_t *h = &inj->held[i];
		rd_kafka_message_t *rkm = h->rkm;
		rd_kafka_headers_t *hdrs = NULL, *copy = NULL;
		rd_kafka_resp_err_t err;

		if (h->release_at > handled) {
			inj->held[kept++] = *h;
			continue;
		}
		if (rd_kafka_message_headers(rkm, &hdrs) ==
		    RD_KAFKA_RESP_ERR_NO_ERROR)
			copy = rd_kafka_headers_copy(hdrs);
		err =
		    rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(inj->topic),
				      RD_KAFKA_V_PARTITION(rkm->partition),
				      RD_KAFKA_V_KEY(rkm->key, rkm->key_len),
				      RD_KAFKA_V_VALUE(rkm->payload, rkm->len),
				      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
				      RD_KAFKA_V_HEADERS(copy),
				      RD_KAFKA_V_OPAQUE(inj), RD_KAFKA_V_END);
		if (err) {
			/* On failure the headers stay ours. */
			if (copy)
				rd_kafka_headers_destroy(copy);
			if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
				inj->held[kept++] = *h; /* next round */
				continue;
			}
			snprintf(errstr, errstr_size,
				 "cannot re-produce a record of %s: %s",
				 inj->topic, rd_kafka_err2str(err));
			for (size_t j = i; j < inj->held_cnt; j++)
				inj->held[kept++] = inj->held[j];
			inj->held_cnt = kept;
			return -1;
		}
		rd_kafka_message_destroy(rkm);
	}
	inj->held_cnt = kept;
	return 0;
}

static void injector_fini(injector_t *inj)
{
	for (size_t i = 0; i < inj->held_cnt; i++)
		rd_kafka_message_destroy(inj->held[i].rkm);
	free(inj->held);
	free(inj->seen);
}

/*
 * The store directory: a fresh temporary one, or --keep DIR (created if
 * missing, refused unless empty).
 */
static int dir_is_empty(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *ent;
	int empty = 1;

	if (!dir)
		return -1;
	while (empty && (ent = readdir(dir)))
		empty = strcmp(ent->d_name, ".") == 0 ||
			strcmp(ent->d_name, "..") == 0;
	closedir(dir);
	return empty;
}

static int keep_dir_prepare(const char *path)
{
	struct stat st;
	int empty;

	if (stat(path, &st) != 0) {
		if (errno != ENOENT)
			return tbx_cli_fail(CMD, "--keep: %s: %s", path,
					    strerror(errno));
		if (mkdir(path, 0777) != 0)
			return tbx_cli_fail(CMD, "--keep: cannot create %s: %s",
					    path, strerror(errno));
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		return tbx_cli_usage(CMD, "--keep: %s is not a directory",
				     path);
	if ((empty = dir_is_empty(path)) < 0)
		return tbx_cli_fail(CMD, "--keep: %s: %s", path,
				    strerror(errno));
	if (!empty)
		return tbx_cli_usage(CMD,
				     "--keep: %s is not empty (the demo writes "
				     "fresh stores; give a new or empty "
				     "directory)",
				     path);
	return 0;
}

/* Removes the temporary directory and the files in it. */
static void temp_dir_remove(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *ent;
	char file[PATH_MAX];

	if (dir) {
		while ((ent = readdir(dir))) {
			if (strcmp(ent->d_name, ".") == 0 ||
			    strcmp(ent->d_name, "..") == 0)
				continue;
			if (snprintf(file, sizeof(file), "%s/%s", path,
				     ent->d_name) < (int)sizeof(file))
				unlink(file);
		}
		closedir(dir);
	}
	if (rmdir(path) != 0)
		fprintf(stderr, "tokenbox demo: cannot remove %s: %s\n", path,
			strerror(errno));
}

/* Token rows and registrations left in the token store @p st, read
 * through its interface (tokens/tokens.h), read-only. */
static int count_tokens(const tbx_cli_store_t *st, int64_t *tokens,
			int64_t *registrations, int64_t *sets, char *errstr,
			size_t errstr_size)
{
	tbx__db_opts_t opts;
	tbx_tokens_t *t = NULL;
	int err;

	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	opts.create = 0;
	if ((err =
		 tbx_cli_open_tokens(st, NULL, &opts, &t, errstr, errstr_size)))
		return -1;
	if ((err = tbx_tokens_count(t, NULL, tokens, registrations)) ||
	    (err = tbx_tokens_sets_count(t, NULL, sets, NULL, NULL))) {
		const char *msg = tbx_tokens_errmsg(t);
		snprintf(errstr, errstr_size, "%s: %s", st->name,
			 msg ? msg : tbx_strerror(err));
	}
	tbx_tokens_close(t);
	return err ? -1 : 0;
}

/* Rows and distinct orders of a hop's table, after the run. */
static int count_final(hop_t *hop, int64_t *rows, int64_t *distinct,
		       char *errstr, size_t errstr_size)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	if (hop->pg) {
		PGresult *res = NULL;
		int err = hop->stmts_made
			      ? tbx__pg_run(&hop->stmts, Q_FINAL, NULL, &res)
			      : TBX_ESTATE;
		if (!err && PQntuples(res) == 1) {
			*rows = tbx__pg_i64(res, 0, 0);
			*distinct = tbx__pg_i64(res, 0, 1);
		} else {
			snprintf(errstr, errstr_size, "%s: schema %s: %s",
				 hop->pg->where, hop->schema,
				 err ? tbx__pg_errmsg(hop->pg) : "no count");
			err = err ? err : TBX_ESTORE;
		}
		PQclear(res);
		return err ? -1 : 0;
	}
	rc = sqlite3_prepare_v2(hop->db, hop->final_sql, -1, &stmt, NULL);

	if (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		*rows = sqlite3_column_int64(stmt, 0);
		*distinct = sqlite3_column_int64(stmt, 1);
		rc = SQLITE_OK;
	}
	if (rc != SQLITE_OK)
		snprintf(errstr, errstr_size, "%s: %s", hop->path,
			 sqlite3_errmsg(hop->db));
	sqlite3_finalize(stmt);
	return rc == SQLITE_OK ? 0 : -1;
}

static int conf_set_all(tbx_conf_t *conf, const char *const *kv, char *errstr,
			size_t errstr_size)
{
	for (size_t i = 0; kv[i]; i += 2)
		if (tbx_conf_set(conf, kv[i], kv[i + 1], errstr, errstr_size))
			return -1;
	return 0;
}

static void usage(void)
{
	printf("Usage: tokenbox demo [--messages N] [--json] [--keep DIR] "
	       "[--seed S]\n"
	       "                     [--bootstrap-servers B] [--store-url "
	       "URL]\n"
	       "                     [--tokens-format message|set]\n"
	       "\n"
	       "Runs a two-hop pipeline on an embedded mock Kafka cluster, or "
	       "on the\n"
	       "Kafka cluster at B:\n"
	       "  publisher --orders--> order-service --payments--> "
	       "payment-service\n"
	       "with about 10%% of the records re-produced byte for byte at "
	       "both hops and\n"
	       "the order-service worker restarted half-way, then counts the "
	       "business rows\n"
	       "to show that every order took effect exactly once.\n"
	       "\n"
	       "Options:\n"
	       "  -n, --messages N  orders to publish (1..%d, default %d)\n"
	       "  -j, --json        print the result as one JSON object, no "
	       "progress\n"
	       "  -k, --keep DIR    keep the stores in DIR (created; must be "
	       "empty); with\n"
	       "                    --store-url: keep the schemas, named "
	       "DIR_tokens,\n"
	       "                    DIR_order_service and "
	       "DIR_payment_service (none may\n"
	       "                    exist)\n"
	       "  -s, --seed S      seed of customers, amounts and duplicate "
	       "picks\n"
	       "                    (0..%lld, default: random, printed)\n"
	       "  -b, --bootstrap-servers B\n"
	       "                    run on an existing cluster instead of "
	       "the embedded\n"
	       "                    mock: the run creates its own topics "
	       "(admin API,\n"
	       "                    broker's default replication factor) and "
	       "groups,\n"
	       "                    named tokenbox-demo-<run>.orders etc., and "
	       "leaves them\n"
	       "                    there (the broker may also auto-create "
	       "topics)\n"
	       "      --store-url URL\n"
	       "                    put every store into the PostgreSQL "
	       "database URL\n"
	       "                    (postgresql://...), in fresh schemas "
	       "named after the\n"
	       "                    run (tokenbox_demo_<pid>_<n>_...), "
	       "dropped at the end;\n"
	       "                    the password comes from the URL, "
	       "PGPASSWORD, ~/.pgpass\n"
	       "                    or a service file, and is never "
	       "printed\n"
	       "      --tokens-format message|set\n"
	       "                    the tokens the ingress publisher mints "
	       "(its\n"
	       "                    tokens.format): 'message' (default), a "
	       "token per\n"
	       "                    message and receiving group, or 'set', "
	       "token sets\n"
	       "                    (docs/batched-tokens.md); the "
	       "workers' own messages\n"
	       "                    keep the per-message format\n"
	       "  -h, --help        show this help\n"
	       "\n"
	       "Exit status: 0 when every order took effect exactly once, 1 "
	       "otherwise,\n"
	       "2 for a bad command line.\n",
	       DEMO_MAX_MESSAGES, DEMO_DEFAULT_MESSAGES, DEMO_MAX_SEED);
}

typedef struct result {
	int64_t orders_rows, orders_distinct;
	int64_t payments_rows, payments_distinct;
	int64_t tokens_left, registrations_left;
	int64_t sets_left; /* token set rows (every receiving group's) */
	const char *tokens_format;
	int64_t injected[2];
	tbx_stats_t stats[2];
	double elapsed_s;
	int timed_out;
	int exactly_once;
	const char *cluster;	/* bootstrap servers, or NULL: the mock */
	const char *store_url;	/* redacted, or NULL: SQLite files */
	const char *schemas[3]; /* tokens, the services' */
	int schemas_kept;
} result_t;

static cJSON *stats_json(const tbx_stats_t *s, int instances)
{
	cJSON *o = cJSON_CreateObject();

	if (!o)
		return NULL;
	cJSON_AddNumberToObject(o, "instances", instances);
	cJSON_AddNumberToObject(o, "consumed", (double)s->consumed);
	cJSON_AddNumberToObject(o, "processed", (double)s->processed);
	cJSON_AddNumberToObject(o, "duplicates_dropped",
				(double)s->duplicates_dropped);
	cJSON_AddNumberToObject(o, "resumed", (double)s->resumed);
	cJSON_AddNumberToObject(o, "retries", (double)s->retries);
	cJSON_AddNumberToObject(o, "dead_lettered", (double)s->dead_lettered);
	cJSON_AddNumberToObject(o, "untokened", (double)s->untokened);
	cJSON_AddNumberToObject(o, "dispatched", (double)s->dispatched);
	cJSON_AddNumberToObject(o, "tokens_created", (double)s->tokens_created);
	cJSON_AddNumberToObject(o, "tokens_consumed",
				(double)s->tokens_consumed);
	cJSON_AddNumberToObject(o, "batches", (double)s->batches);
	return o;
}

static int print_json(const result_t *r, hop_t *hops, int64_t n,
		      int64_t customers, long long seed, const char *kept)
{
	cJSON *o = cJSON_CreateObject(), *h;
	char *text;
	int rc;

	if (!o)
		return -1;
	if (r->cluster)
		cJSON_AddStringToObject(o, "cluster", r->cluster);
	else
		cJSON_AddStringToObject(o, "cluster", "mock");
	cJSON_AddNumberToObject(o, "messages", (double)n);
	cJSON_AddNumberToObject(o, "customers", (double)customers);
	cJSON_AddNumberToObject(o, "seed", (double)seed);
	cJSON_AddStringToObject(o, "tokens_format", r->tokens_format);
	cJSON_AddNumberToObject(o, "duplicates_injected",
				(double)(r->injected[0] + r->injected[1]));
	cJSON_AddNumberToObject(o, "duplicates_injected_orders",
				(double)r->injected[0]);
	cJSON_AddNumberToObject(o, "duplicates_injected_payments",
				(double)r->injected[1]);
	cJSON_AddNumberToObject(o, "duplicates_dropped",
				(double)(r->stats[0].duplicates_dropped +
					 r->stats[1].duplicates_dropped));
	cJSON_AddNumberToObject(o, "worker_restarts",
				hops[0].instances + hops[1].instances - 2);
	cJSON_AddNumberToObject(o, "orders_rows", (double)r->orders_rows);
	cJSON_AddNumberToObject(o, "orders_distinct",
				(double)r->orders_distinct);
	cJSON_AddNumberToObject(o, "payments_rows", (double)r->payments_rows);
	cJSON_AddNumberToObject(o, "payments_distinct",
				(double)r->payments_distinct);
	cJSON_AddNumberToObject(o, "tokens_left", (double)r->tokens_left);
	cJSON_AddNumberToObject(o, "registrations_left",
				(double)r->registrations_left);
	cJSON_AddNumberToObject(o, "token_sets_left", (double)r->sets_left);
	cJSON_AddBoolToObject(o, "exactly_once", r->exactly_once);
	cJSON_AddBoolToObject(o, "timed_out", r->timed_out);
	cJSON_AddNumberToObject(o, "elapsed_s",
				(double)(int64_t)(r->elapsed_s * 1000) / 1000);
	cJSON_AddNumberToObject(
	    o, "messages_per_s",
	    r->elapsed_s > 0
		? (double)(int64_t)(r->payments_rows / r->elapsed_s)
		: 0);
	if (kept)
		cJSON_AddStringToObject(o, "store_dir", kept);
	else
		cJSON_AddNullToObject(o, "store_dir");
	if (r->store_url) {
		cJSON *sch;
		cJSON_AddStringToObject(o, "store_url", r->store_url);
		if ((sch = cJSON_AddObjectToObject(o, "schemas"))) {
			cJSON_AddStringToObject(sch, "tokens", r->schemas[0]);
			for (int i = 0; i < 2; i++)
				cJSON_AddStringToObject(sch, hops[i].group,
							r->schemas[i + 1]);
		}
		cJSON_AddBoolToObject(o, "schemas_kept", r->schemas_kept);
	} else {
		cJSON_AddNullToObject(o, "store_url");
	}
	if ((h = cJSON_AddObjectToObject(o, "hops"))) {
		for (int i = 0; i < 2; i++)
			cJSON_AddItemToObject(
			    h, hops[i].group,
			    stats_json(&r->stats[i], hops[i].instances));
	}
	text = cJSON_Print(o);
	cJSON_Delete(o);
	if (!text)
		return -1;
	rc = printf("%s\n", text) < 0 ? -1 : 0;
	cJSON_free(text);
	return rc;
}

static void print_summary(const result_t *r, const hop_t *hops, int64_t n,
			  int64_t customers, long long seed, const char *kept)
{
	/* Orders that went all the way through. */
	double rate =
	    r->elapsed_s > 0 ? (double)r->payments_rows / r->elapsed_s : 0;

	printf("tokenbox demo: %" PRId64 " orders, publisher -> %s -> %s\n", n,
	       hops[0].group, hops[1].group);
	printf("  cluster              %s\n",
	       r->cluster ? r->cluster : "embedded mock");
	printf("  customers            %" PRId64 " (seed %lld)\n", customers,
	       seed);
	printf("  ingress tokens       %s (tokens.format)\n", r->tokens_format);
	printf("  duplicates injected  %" PRId64 " (orders %" PRId64
	       ", payments %" PRId64 ")\n",
	       r->injected[0] + r->injected[1], r->injected[0], r->injected[1]);
	printf("  duplicates dropped   %" PRIu64 " (%s %" PRIu64 ", %s %" PRIu64
	       ")\n",
	       r->stats[0].duplicates_dropped + r->stats[1].duplicates_dropped,
	       hops[0].group, r->stats[0].duplicates_dropped, hops[1].group,
	       r->stats[1].duplicates_dropped);
	printf("  worker restarts      %d (%s)\n", hops[0].instances - 1,
	       hops[0].group);
	printf("  orders rows          %" PRId64 " (%" PRId64 " distinct)\n",
	       r->orders_rows, r->orders_distinct);
	printf("  payments rows        %" PRId64 " (%" PRId64 " distinct)\n",
	       r->payments_rows, r->payments_distinct);
	printf("  tokens left          %" PRId64 "\n", r->tokens_left);
	printf("  registrations left   %" PRId64 "\n", r->registrations_left);
	printf("  token sets left      %" PRId64 "\n", r->sets_left);
	printf("  elapsed              %.2f s (%.0f orders/s)\n", r->elapsed_s,
	       rate);
	if (kept)
		printf("  stores               %s\n", kept);
	if (r->store_url)
		printf("  stores               %s, schemas %s, %s, %s (%s)\n",
		       r->store_url, r->schemas[0], r->schemas[1],
		       r->schemas[2], r->schemas_kept ? "kept" : "dropped");
	if (r->timed_out)
		printf("exactly once: NO (nothing moved for %d s)\n",
		       DEMO_STALL_S);
	else if (r->exactly_once)
		printf("exactly once: yes%s\n",
		       r->tokens_left || r->registrations_left || r->sets_left
			   ? " (but the token store is not empty)"
			   : "");
	else
		printf("exactly once: NO\n");
}

/*
 * The run: everything the demo owns, torn down in reverse order by
 * demo_fini() whatever was reached.
 */
typedef struct demo {
	int64_t n, customers;
	long long seed;
	int json;
	const char *keep;
	const char *tokens_format; /* the publisher's tokens.format */
	char dir[PATH_MAX];
	int dir_made;
	char tokens_path[PATH_MAX];
	/* --store-url: the database, the demo's own connection, and the
	 * schemas (PREFIX_tokens and one per service). */
	const char *url;
	tbx__pg_t *pg;
	char prefix[TBX_PG_IDENT_MAX + 1];
	char tokens_schema[TBX_PG_IDENT_MAX + 1];
	int schemas_made;	/* from here on they are dropped at the end */
	tbx_cli_store_t tokens; /* the token store, for the final count */
	rd_kafka_t *mock_rk;	/* hosts the mock cluster */
	rd_kafka_mock_cluster_t *mock;
	const char *cluster; /* --bootstrap-servers, or NULL: the mock */
	char bootstraps[1024];
	/* Per hop: the topic it consumes, its dead-letter topic, its group
	 * id.  On an existing cluster they carry the run's name, so that a
	 * run never meets an earlier one's records or committed offsets. */
	char names[2][3][128];
	tbx_publisher_t *pub;
	hop_t hops[2];
	rd_kafka_t *reader, *dup_producer;
	injector_t injs[2];
	char errstr[PATH_MAX + 1024];
} demo_t;

/* Names the topics and groups: as they are on the mock, with a prefix
 * unique to the run on an existing cluster. */
static void demo_names(demo_t *d)
{
	char prefix[64] = "";

	if (d->cluster)
		snprintf(prefix, sizeof(prefix), "tokenbox-demo-%lld-%ld.",
			 d->seed, (long)getpid());
	for (int i = 0; i < 2; i++) {
		hop_t *hop = &d->hops[i];
		snprintf(d->names[i][0], sizeof(d->names[i][0]), "%s%s", prefix,
			 hop->topic);
		snprintf(d->names[i][1], sizeof(d->names[i][1]), "%s%s.dlq",
			 prefix, hop->topic);
		snprintf(d->names[i][2], sizeof(d->names[i][2]), "%s%s", prefix,
			 hop->group);
	}
	for (int i = 0; i < 2; i++) {
		d->hops[i].topic = d->names[i][0];
		d->hops[i].group_id = d->names[i][2];
		d->hops[i].next_topic = i == 0 ? d->names[1][0] : NULL;
	}
}

/* The cluster: the embedded mock, or the one at --bootstrap-servers with
 * the run's topics created through the admin API. */
static int demo_cluster(demo_t *d)
{
	char *es = d->errstr;
	size_t esz = sizeof(d->errstr);
	rd_kafka_resp_err_t err;

	if (d->cluster) {
		const char *names[4] = {d->names[0][0], d->names[0][1],
					d->names[1][0], d->names[1][1]};
		const int parts[4] = {DEMO_PARTITIONS, 1, DEMO_PARTITIONS, 1};

		snprintf(d->bootstraps, sizeof(d->bootstraps), "%s",
			 d->cluster);
		if (tbx_cli_create_topics(d->bootstraps, names, parts, 4,
					  DEMO_ADMIN_TIMEOUT_MS, es, esz))
			return tbx_cli_fail(CMD, "%s: %s", d->bootstraps, es);
		if (!d->json)
			fprintf(stderr, "  cluster %s, topics %s and %s\n",
				d->bootstraps, names[0], names[2]);
		return TBX_EXIT_OK;
	}
	if (!(d->mock_rk = client_new(RD_KAFKA_PRODUCER, NULL, es, esz)))
		return tbx_cli_fail(CMD, "cannot create a Kafka client: %s",
				    es);
	if (!(d->mock = rd_kafka_mock_cluster_new(d->mock_rk, 1)))
		return tbx_cli_fail(CMD, "cannot start the mock cluster");
	snprintf(d->bootstraps, sizeof(d->bootstraps), "%s",
		 rd_kafka_mock_cluster_bootstraps(d->mock));
	for (int i = 0; i < 2; i++) {
		if ((err = rd_kafka_mock_topic_create(d->mock, d->names[i][0],
						      DEMO_PARTITIONS, 1)) ||
		    (err = rd_kafka_mock_topic_create(d->mock, d->names[i][1],
						      1, 1)))
			return tbx_cli_fail(CMD, "cannot create topic %s: %s",
					    d->names[i][0],
					    rd_kafka_err2str(err));
	}
	return TBX_EXIT_OK;
}

/* The schemas of a --store-url run: PREFIX_tokens, PREFIX_order_service,
 * PREFIX_payment_service, none of which may exist; the token store made
 * in the first; the demo's connection.  @returns an exit status. */
static int demo_pg_setup(demo_t *d)
{
	static const char *const exists_sql[1] = {
	    "SELECT count(*) FROM pg_namespace WHERE nspname = ANY($1)"};
	const char *names[3];
	char *es = d->errstr;
	size_t esz = sizeof(d->errstr);
	tbx__pg_stmts_t stmts;
	tbx__pg_params_t params;
	tbx__db_opts_t opts;
	tbx_tokens_t *tokens = NULL;
	int64_t found = 0;
	int err, rc;

	if (d->keep)
		snprintf(d->prefix, sizeof(d->prefix), "%s", d->keep);
	else
		snprintf(d->prefix, sizeof(d->prefix), "tokenbox_demo_%ld_%lld",
			 (long)getpid(), (long long)(wall_ms() % 1000000000));
	if (snprintf(d->tokens_schema, sizeof(d->tokens_schema), "%s_tokens",
		     d->prefix) >= (int)sizeof(d->tokens_schema))
		return tbx_cli_usage(CMD,
				     "--keep: '%s' is too long for a schema "
				     "prefix",
				     d->prefix);
	names[0] = d->tokens_schema;
	for (int i = 0; i < 2; i++) {
		hop_t *hop = &d->hops[i];
		char *p;
		if (snprintf(hop->schema, sizeof(hop->schema), "%s_%s",
			     d->prefix, hop->group) >= (int)sizeof(hop->schema))
			return tbx_cli_usage(CMD,
					     "--keep: '%s' is too long for a "
					     "schema prefix (at most %d "
					     "characters)",
					     d->prefix,
					     TBX_PG_IDENT_MAX -
						 (int)strlen(hop->group) - 1);
		for (p = hop->schema; *p; p++)
			if (*p == '-')
				*p = '_';
		if (tbx__pg_ident_check("--keep", hop->schema, es, esz))
			return tbx_cli_usage(CMD, "%s", es);
		snprintf(hop->pg_insert, sizeof(hop->pg_insert),
			 "INSERT INTO \"%s\".%s(order_no, customer, amount, "
			 "handled_at) VALUES ($1, $2, $3, $4)",
			 hop->schema, hop->table);
		names[i + 1] = hop->schema;
	}
	if ((rc = tbx_cli_store_set(CMD, &d->tokens, "--store-url", d->url,
				    "--keep", d->tokens_schema, NULL)))
		return rc;
	if ((err = tbx__pg_connect(d->url, &d->pg, es, esz)))
		return tbx_cli_fail(CMD, "%s", es);
	/* Fresh schemas: a second run never meets a first one's rows. */
	if ((err = tbx__pg_stmts_init(&stmts, d->pg, "dx", exists_sql, 1, NULL,
				      NULL)))
		return tbx_cli_fail(CMD, "out of memory");
	tbx__pgp_init(&params);
	tbx__pgp_text_array(&params, names, 3);
	err = tbx__pg_run_i64(&stmts, 0, &params, &found, NULL);
	tbx__pgp_free(&params);
	tbx__pg_stmts_free(&stmts);
	if (err)
		return tbx_cli_fail(CMD, "%s: %s", d->pg->where,
				    tbx__pg_errmsg(d->pg));
	if (found)
		return tbx_cli_usage(CMD,
				     "%s: a schema %s, %s or %s exists already "
				     "(the demo makes fresh ones; give another "
				     "--keep prefix, or drop them)",
				     d->pg->where, names[0], names[1],
				     names[2]);
	d->schemas_made = 1;
	tbx__db_opts_init(&opts);
	if ((err = tbx_cli_open_tokens(&d->tokens, NULL, &opts, &tokens, es,
				       esz)))
		return tbx_cli_fail(CMD, "cannot create the token store: %s",
				    es);
	tbx_tokens_close(tokens);
	for (int i = 0; i < 2; i++)
		d->hops[i].pg = d->pg;
	return TBX_EXIT_OK;
}

/* Drops the run's schemas (unless --keep), then closes the connection. */
static void demo_pg_fini(demo_t *d)
{
	const char *names[3] = {d->tokens_schema, d->hops[0].schema,
				d->hops[1].schema};
	char sql[128];

	if (!d->pg)
		return;
	for (int i = 0; i < 3 && d->schemas_made && !d->keep; i++) {
		snprintf(sql, sizeof(sql),
			 "DROP SCHEMA IF EXISTS \"%s\" CASCADE", names[i]);
		if (tbx__pg_exec(d->pg, sql))
			fprintf(stderr,
				"tokenbox demo: %s: cannot drop schema %s: "
				"%s\n",
				d->pg->where, names[i], tbx__pg_errmsg(d->pg));
	}
	tbx__pg_unref(d->pg);
	d->pg = NULL;
}

static int demo_setup(demo_t *d)
{
	rd_kafka_topic_partition_list_t *parts;
	char *es = d->errstr;
	size_t esz = sizeof(d->errstr);
	tbx_conf_t *pub_conf;
	rd_kafka_resp_err_t err;
	int rc;

	/* Stores. */
	if (d->url) {
		if ((rc = demo_pg_setup(d)))
			return rc;
	} else if (d->keep) {
		if (snprintf(d->dir, sizeof(d->dir), "%s", d->keep) >=
		    (int)sizeof(d->dir))
			return tbx_cli_usage(CMD, "--keep: path too long");
	} else {
		const char *tmp = getenv("TMPDIR");
		snprintf(d->dir, sizeof(d->dir), "%s/tokenbox-demo-XXXXXX",
			 tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(d->dir))
			return tbx_cli_fail(CMD,
					    "cannot create a temporary "
					    "directory %s: %s",
					    d->dir, strerror(errno));
		d->dir_made = 1;
	}
	if (!d->url) {
		if (snprintf(d->tokens_path, sizeof(d->tokens_path),
			     "%s/tokens.db",
			     d->dir) >= (int)sizeof(d->tokens_path))
			return tbx_cli_usage(CMD, "--keep: path too long");
		for (int i = 0; i < 2; i++)
			if (snprintf(d->hops[i].path, sizeof(d->hops[i].path),
				     "%s/%s.db", d->dir, d->hops[i].group) >=
			    (int)sizeof(d->hops[i].path))
				return tbx_cli_usage(CMD,
						     "--keep: path too long");
		if ((rc = tbx_cli_store_set(CMD, &d->tokens, "--keep",
					    d->tokens_path, "--keep", NULL,
					    NULL)))
			return rc;
	}

	if ((rc = demo_cluster(d)))
		return rc;

	/* The services.  Each subscribes (first poll) before anything is
	 * published: records minted before a group subscribed would be
	 * untokened ingress for it. */
	for (int i = 0; i < 2; i++) {
		hop_t *hop = &d->hops[i];
		/* The stores: files, or schemas of one database (the
		 * token schema reached through the service store's
		 * connection: tokens.url left empty). */
		const char *kv[] = {"group.id", hop->group_id,
				    d->url ? "store.url" : "store.path",
				    d->url ? d->url : hop->path,
				    d->url ? "store.schema" : "tokens.path",
				    d->url ? hop->schema : d->tokens_path,
				    d->url ? "tokens.schema" : "tokens.create",
				    d->url ? d->tokens_schema : "true",
				    "kafka.bootstrap.servers", d->bootstraps,
				    "log.level", "warning",
				    /* The mock rebalances a group that a
				     * member left after the session timeout
				     * less 1 s: a short one keeps the
				     * restart quick.  Heartbeats come from
				     * librdkafka's own thread.  A broker
				     * refuses less than its
				     * group.min.session.timeout.ms, 6 s by
				     * default. */
				    "kafka.consumer.session.timeout.ms",
				    d->cluster ? "6000" : "3000",
				    "kafka.consumer.heartbeat.interval.ms",
				    "300", NULL};
		if (!(hop->conf = tbx_conf_new()))
			return tbx_cli_fail(CMD, "out of memory");
		/* Traced (OTEL_*): each service under its own name. */
		if (conf_set_all(hop->conf, kv, es, esz) ||
		    tbx_conf_set(hop->conf, "otel.service.name", hop->group, es,
				 esz))
			return tbx_cli_fail(CMD, "%s: %s", hop->group, es);
		if (hop_start(hop, es, esz))
			return tbx_cli_fail(CMD, "cannot start %s: %s",
					    hop->group, es);
	}

	/* Ingress. */
	{
		/* log.level as the hops': the level is the process's, and
		 * the publisher made after them would set it back to notice
		 * (their assignments would show among the progress lines). */
		const char *kv[] = {"kafka.bootstrap.servers",
				    d->bootstraps,
				    "log.level",
				    "warning",
				    "tokens.format",
				    d->tokens_format,
				    NULL};
		if (!(pub_conf = tbx_conf_new()))
			return tbx_cli_fail(CMD, "out of memory");
		if (conf_set_all(pub_conf, kv, es, esz) ||
		    tbx_conf_set(pub_conf, "otel.service.name", "publisher", es,
				 esz) ||
		    tbx_cli_store_conf_tokens(&d->tokens, pub_conf, es, esz)) {
			tbx_conf_destroy(pub_conf);
			return tbx_cli_fail(CMD, "publisher: %s", es);
		}
		if (!(d->pub = tbx_publisher_new(pub_conf, es, esz))) {
			tbx_conf_destroy(pub_conf);
			return tbx_cli_fail(CMD,
					    "cannot create the publisher: "
					    "%s",
					    es);
		}
	}

	/* The duplicate injection: a reader without a group, from the
	 * beginning of every partition, and a plain producer. */
	if (!(d->reader =
		  client_new(RD_KAFKA_CONSUMER, d->bootstraps, es, esz)) ||
	    !(d->dup_producer =
		  client_new(RD_KAFKA_PRODUCER, d->bootstraps, es, esz)))
		return tbx_cli_fail(CMD, "cannot create a Kafka client: %s",
				    es);
	if (!(parts = rd_kafka_topic_partition_list_new(2 * DEMO_PARTITIONS)))
		return tbx_cli_fail(CMD, "out of memory");
	for (int i = 0; i < 2; i++)
		for (int32_t p = 0; p < DEMO_PARTITIONS; p++)
			rd_kafka_topic_partition_list_add(parts,
							  d->hops[i].topic, p)
			    ->offset = RD_KAFKA_OFFSET_BEGINNING;
	err = rd_kafka_assign(d->reader, parts);
	rd_kafka_topic_partition_list_destroy(parts);
	if (err)
		return tbx_cli_fail(CMD, "reader: assign: %s",
				    rd_kafka_err2str(err));
	for (int i = 0; i < 2; i++) {
		d->injs[i].topic = d->hops[i].topic;
		d->injs[i].hop = &d->hops[i];
		if (!(d->injs[i].seen = calloc((size_t)d->n + 1, 1)))
			return tbx_cli_fail(CMD, "out of memory");
	}
	return TBX_EXIT_OK;
}

static void demo_fini(demo_t *d)
{
	/* Held records belong to the reader: free them before it. */
	for (int i = 0; i < 2; i++)
		injector_fini(&d->injs[i]);
	if (d->reader) {
		rd_kafka_consumer_close(d->reader);
		rd_kafka_destroy(d->reader);
	}
	if (d->dup_producer) {
		rd_kafka_flush(d->dup_producer, 5000);
		rd_kafka_destroy(d->dup_producer);
	}
	tbx_publisher_destroy(d->pub);
	for (int i = 0; i < 2; i++)
		hop_fini(&d->hops[i]);
	demo_pg_fini(d);
	/* Clients first: they would log the cluster's going. */
	if (d->mock)
		rd_kafka_mock_cluster_destroy(d->mock);
	if (d->mock_rk)
		rd_kafka_destroy(d->mock_rk);
	if (d->dir_made)
		temp_dir_remove(d->dir);
}

/* Publishes the next chunk of orders and waits for their delivery. */
static int publish_chunk(demo_t *d, int64_t *published, uint64_t *rng)
{
	int64_t end = *published + DEMO_CHUNK;
	char key[32], payload[96];
	size_t failed = 0;
	int err;

	if (end > d->n)
		end = d->n;
	for (int64_t i = *published + 1; i <= end; i++) {
		int klen = snprintf(
		    key, sizeof(key), "customer-%" PRId64,
		    1 + (int64_t)(rng_next(rng) % (uint64_t)d->customers));
		int plen = snprintf(payload, sizeof(payload),
				    "{\"order\":\"%" PRId64 "\",\"amount\":%d}",
				    i, 100 + (int)(rng_next(rng) % 99900));
		tbx_out_t out = {.topic = d->hops[0].topic,
				 .type = "OrderPlaced",
				 .key = key,
				 .key_len = (size_t)klen,
				 .payload = payload,
				 .payload_len = (size_t)plen};
		if ((err = tbx_publish(d->pub, &out)))
			return tbx_cli_fail(CMD, "publish: %s",
					    tbx_strerror(err));
	}
	if ((err = tbx_publisher_flush(d->pub, &failed)))
		return tbx_cli_fail(CMD,
				    "publishing orders failed (%zu not "
				    "delivered): %s",
				    failed, tbx_publisher_errstr(d->pub));
	*published = end;
	return TBX_EXIT_OK;
}

/* One tbx_worker_poll() of a hop.  Retriable errors (a lock held, the
 * broker away) are the library's to retry; the rest end the demo. */
static int hop_poll(hop_t *hop, int timeout_ms, int *busy)
{
	size_t n = 0;
	int err = tbx_worker_poll(hop->worker, timeout_ms, &n);

	if (err && !tbx_err_is_retriable(err))
		return tbx_cli_fail(CMD, "%s failed: %s: %s", hop->group,
				    tbx_strerror(err),
				    tbx_worker_errstr(hop->worker));
	hop->idle = n == 0 ? hop->idle + 1 : 0;
	*busy |= n > 0;
	return TBX_EXIT_OK;
}

/* What the run has achieved, a count that only grows and is bounded:
 * orders published, business rows, copies delivered, and records
 * consumed up to what the end of the run waits for (a hop that consumes
 * the same records again and again is not moving). */
static int64_t progress(const demo_t *d, int64_t published,
			const tbx_stats_t st[2])
{
	int64_t sum = published + d->hops[0].rows + d->hops[1].rows;

	for (int i = 0; i < 2; i++) {
		int64_t want = d->n + d->injs[i].delivered;

		sum += d->injs[i].delivered + ((int64_t)st[i].consumed < want
						   ? (int64_t)st[i].consumed
						   : want);
	}
	return sum;
}

static int demo_run(demo_t *d, result_t *res)
{
	hop_t *order = &d->hops[0], *payment = &d->hops[1];
	int64_t published = 0, restart_at = d->n / 2 > 0 ? d->n / 2 : 1;
	int64_t start = mono_ms(), next_progress = start + 1000;
	int64_t moved_at = start, moves = -1;
	uint64_t pub_rng = (uint64_t)d->seed, dup_rng = ~(uint64_t)d->seed;
	tbx_stats_t st[2];
	int rc, busy = 1;

	for (;;) {
		int64_t now = mono_ms();

		if (tbx_cli_stop_signal)
			return tbx_cli_fail(CMD, "interrupted");
		if (now - moved_at >= (int64_t)DEMO_STALL_S * 1000) {
			res->timed_out = 1;
			hop_stats(order, &st[0]);
			hop_stats(payment, &st[1]);
			tbx_cli_fail(CMD,
				     "nothing moved for %d s: %" PRId64
				     " of %" PRId64 " orders published, %s "
				     "handled %" PRIu64 ", %s %" PRIu64,
				     DEMO_STALL_S, published, d->n,
				     order->group, st[0].processed,
				     payment->group, st[1].processed);
			break;
		}
		if (published < d->n &&
		    (rc = publish_chunk(d, &published, &pub_rng)))
			return rc;
		/* While both are busy a wait would only slow the other. */
		busy = 0;
		if ((rc = hop_poll(order, DEMO_POLL_MS, &busy)) ||
		    (rc = hop_poll(payment, busy ? 0 : DEMO_POLL_MS, &busy)))
			return rc;
		hop_stats(order, &st[0]);
		hop_stats(payment, &st[1]);

		if (order->instances == 1 &&
		    (int64_t)st[0].processed >= restart_at) {
			if (!d->json)
				fprintf(stderr,
					"  restarting %s after %" PRIu64
					" orders\n",
					order->group, st[0].processed);
			hop_stop(order);
			if (hop_start(order, d->errstr, sizeof(d->errstr)))
				return tbx_cli_fail(CMD,
						    "cannot restart %s: %s",
						    order->group, d->errstr);
		}

		if (read_back(d->reader, d->injs, 2, d->n, &dup_rng))
			return tbx_cli_fail(CMD, "out of memory");
		for (int i = 0; i < 2; i++)
			if (inject_due(&d->injs[i], d->dup_producer,
				       (int64_t)st[i].processed, d->errstr,
				       sizeof(d->errstr)))
				return tbx_cli_fail(CMD, "%s", d->errstr);
		rd_kafka_poll(d->dup_producer, 0);
		for (int i = 0; i < 2; i++)
			if (d->injs[i].failed)
				return tbx_cli_fail(CMD,
						    "a duplicate of %s was not "
						    "delivered",
						    d->injs[i].topic);

		hop_count(order);
		hop_count(payment);
		now = mono_ms();
		if (progress(d, published, st) != moves) {
			moves = progress(d, published, st);
			moved_at = now;
		}
		if (!d->json && now >= next_progress) {
			fprintf(stderr,
				"  %5.1f s  published %" PRId64 "/%" PRId64
				"  orders %" PRId64 "  payments %" PRId64
				"  duplicates injected %" PRId64
				", dropped %" PRIu64 "\n",
				(double)(now - start) / 1000, published, d->n,
				order->rows, payment->rows,
				d->injs[0].delivered + d->injs[1].delivered,
				st[0].duplicates_dropped +
				    st[1].duplicates_dropped);
			next_progress = now + 1000;
		}

		/* Done: every order in both tables, every copy produced and
		 * consumed, and then a few empty polls in a row for what a
		 * restart or rebalance redelivers. */
		if (order->rows >= d->n && payment->rows >= d->n &&
		    d->injs[0].seen_cnt == d->n &&
		    d->injs[1].seen_cnt == d->n && d->injs[0].held_cnt == 0 &&
		    d->injs[1].held_cnt == 0 &&
		    rd_kafka_outq_len(d->dup_producer) == 0 &&
		    (int64_t)st[0].consumed >= d->n + d->injs[0].delivered &&
		    (int64_t)st[1].consumed >= d->n + d->injs[1].delivered &&
		    order->idle >= DEMO_IDLE_ROUNDS &&
		    payment->idle >= DEMO_IDLE_ROUNDS)
			break;
	}
	res->elapsed_s = (double)(mono_ms() - start) / 1000;
	res->injected[0] = d->injs[0].delivered;
	res->injected[1] = d->injs[1].delivered;
	return TBX_EXIT_OK;
}

/* Stops everything that writes, then reads the verdict from the stores. */
static int demo_result(demo_t *d, result_t *res)
{
	for (int i = 0; i < 2; i++) {
		hop_stop(&d->hops[i]);
		res->stats[i] = d->hops[i].past;
	}
	tbx_publisher_destroy(d->pub);
	d->pub = NULL;
	if (count_final(&d->hops[0], &res->orders_rows, &res->orders_distinct,
			d->errstr, sizeof(d->errstr)) ||
	    count_final(&d->hops[1], &res->payments_rows,
			&res->payments_distinct, d->errstr,
			sizeof(d->errstr)) ||
	    count_tokens(&d->tokens, &res->tokens_left,
			 &res->registrations_left, &res->sets_left, d->errstr,
			 sizeof(d->errstr)))
		return tbx_cli_fail(CMD, "cannot read the stores: %s",
				    d->errstr);
	res->cluster = d->cluster;
	res->tokens_format = d->tokens_format;
	if (d->url) {
		res->store_url = d->tokens.url;
		res->schemas[0] = d->tokens_schema;
		res->schemas[1] = d->hops[0].schema;
		res->schemas[2] = d->hops[1].schema;
		res->schemas_kept = d->keep != NULL;
	}
	res->exactly_once = !res->timed_out && res->orders_rows == d->n &&
			    res->orders_distinct == d->n &&
			    res->payments_rows == d->n &&
			    res->payments_distinct == d->n;
	return TBX_EXIT_OK;
}

int tbx_cmd_demo(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"messages", required_argument, NULL, 'n'},
	    {"json", no_argument, NULL, 'j'},
	    {"keep", required_argument, NULL, 'k'},
	    {"seed", required_argument, NULL, 's'},
	    {"bootstrap-servers", required_argument, NULL, 'b'},
	    {"store-url", required_argument, NULL, OPT_STORE_URL},
	    {"tokens-format", required_argument, NULL, OPT_TOKENS_FORMAT},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	demo_t d = {
	    .n = DEMO_DEFAULT_MESSAGES,
	    .seed = -1,
	    .tokens_format = "message",
	    .hops = {{.group = "order-service",
		      .table = "orders",
		      .topic = "orders",
		      .type = "OrderPlaced",
		      .create_sql = "CREATE TABLE IF NOT EXISTS orders("
				    "order_no TEXT NOT NULL, customer TEXT "
				    "NOT NULL, amount INTEGER NOT NULL, "
				    "handled_at INTEGER NOT NULL)",
		      .insert_sql = "INSERT INTO orders(order_no, customer, "
				    "amount, handled_at) VALUES (?, ?, ?, ?)",
		      .count_sql = "SELECT COUNT(*) FROM orders",
		      .final_sql = "SELECT COUNT(*), COUNT(DISTINCT "
				   "order_no) FROM orders",
		      .next_topic = "payments",
		      .next_type = "PaymentRequested"},
		     {.group = "payment-service",
		      .table = "payments",
		      .topic = "payments",
		      .type = "PaymentRequested",
		      .create_sql = "CREATE TABLE IF NOT EXISTS payments("
				    "order_no TEXT NOT NULL, customer TEXT "
				    "NOT NULL, amount INTEGER NOT NULL, "
				    "handled_at INTEGER NOT NULL)",
		      .insert_sql = "INSERT INTO payments(order_no, "
				    "customer, amount, handled_at) VALUES "
				    "(?, ?, ?, ?)",
		      .count_sql = "SELECT COUNT(*) FROM payments",
		      .final_sql = "SELECT COUNT(*), COUNT(DISTINCT "
				   "order_no) FROM payments"}},
	};
	result_t res = {0};
	long long v;
	int c, rc;

	while ((c = tbx_cli_getopt(CMD, argc, argv, "n:jk:s:b:h", longopts)) !=
	       -1) {
		switch (c) {
		case 'n':
			if (tbx_cli_parse_int(CMD, "--messages", optarg, 1,
					      DEMO_MAX_MESSAGES, &v))
				return TBX_EXIT_USAGE;
			d.n = v;
			break;
		case 'j':
			d.json = 1;
			break;
		case 'k':
			if (!*optarg)
				return tbx_cli_usage(CMD, "--keep: empty path");
			d.keep = optarg;
			break;
		case 's':
			if (tbx_cli_parse_int(CMD, "--seed", optarg, 0,
					      DEMO_MAX_SEED, &v))
				return TBX_EXIT_USAGE;
			d.seed = v;
			break;
		case 'b':
			if (!*optarg || strlen(optarg) >= sizeof(d.bootstraps))
				return tbx_cli_usage(
				    CMD,
				    "--bootstrap-servers: want "
				    "host:port[,host:port...] "
				    "(1..%zu characters)",
				    sizeof(d.bootstraps) - 1);
			d.cluster = optarg;
			break;
		case OPT_STORE_URL:
			if (!tbx__pg_is_url(optarg))
				return tbx_cli_usage(
				    CMD, "--store-url: want a PostgreSQL URL "
					 "(postgresql://...)");
			d.url = optarg;
			break;
		case OPT_TOKENS_FORMAT:
			if (strcmp(optarg, "message") && strcmp(optarg, "set"))
				return tbx_cli_usage(
				    CMD,
				    "--tokens-format: want 'message' or "
				    "'set', not '%s'",
				    optarg);
			d.tokens_format = optarg;
			break;
		case 'h':
			usage();
			return TBX_EXIT_OK;
		default:
			return TBX_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return tbx_cli_usage(CMD,
				     "unexpected argument '%s' (see 'tokenbox "
				     "help demo')",
				     argv[optind]);
	if (d.keep && !d.url && (rc = keep_dir_prepare(d.keep)))
		return rc;
	if (d.seed < 0)
		d.seed = (long long)(((uint64_t)wall_ms() * 2654435761u) ^
				     (uint64_t)getpid()) &
			 0x7fffffff;
	d.customers = d.n / 10 > 0 ? d.n / 10 : 1;
	demo_names(&d);
	if (tbx_cli_on_stop(NULL, NULL))
		return tbx_cli_fail(CMD, "cannot install signal handlers: %s",
				    strerror(errno));

	if (!d.json)
		fprintf(stderr,
			"tokenbox demo: %" PRId64 " orders, %d%% re-produced "
			"at both hops, seed %lld\n",
			d.n, DEMO_DUP_PERMILLE / 10, d.seed);
	if (!(rc = demo_setup(&d)) && !(rc = demo_run(&d, &res)) &&
	    !(rc = demo_result(&d, &res))) {
		if (d.json) {
			if (print_json(&res, d.hops, d.n, d.customers, d.seed,
				       d.url ? NULL : d.keep))
				rc = tbx_cli_fail(CMD, "out of memory");
		} else {
			print_summary(&res, d.hops, d.n, d.customers, d.seed,
				      d.url ? NULL : d.keep);
		}
		if (!rc && !res.exactly_once)
			rc = TBX_EXIT_FAIL;
	}
	demo_fini(&d);
	return rc;
}
