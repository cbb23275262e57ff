/*
 * The contenders, each run as a child process:
 *
 *   plain      at-least-once: one SQLite transaction per batch for the
 *              business rows, produce, wait for delivery, commit offsets
 *   inbox      the classic deduplication store: per record, INSERT OR
 *              IGNORE of its id into an inbox table (kept for ever) and an
 *              outbox row, in one transaction per batch; dispatch; delete
 *              the outbox rows in a second transaction; commit offsets
 *   kafka-txn  a Kafka transaction per batch (transactional producer,
 *              send_offsets_to_transaction), the SQLite write outside it
 *   tokenbox   a tbx_worker with default settings and one handler
 *   inbox-batched  (PostgreSQL only) the inbox at its strongest: the
 *              same statements and outcome, its business rows queued and
 *              sent in one pipeline with the outbox rows' statement
 *              (libpq pipeline mode, as tokenbox's store/pg.c does), its
 *              outbox rows out in one statement without BEGIN/COMMIT
 *
 * With --schema (the driver's --store-url) the stores are PostgreSQL
 * instead: the connection string comes from TBX_BENCH_STORE_URL (never
 * on a command line), each run has a schema of its own, and the
 * hand-written contenders batch their own statements as tokenbox's
 * PostgreSQL design does: the inbox's ids in one INSERT ... unnest ...
 * ON CONFLICT DO NOTHING RETURNING per batch, its outbox rows in one
 * INSERT ... unnest and out in one DELETE ... = ANY; the business row is
 * one statement per record for every contender, as a handler writes it
 * (inbox-batched: sent in a pipeline, not waited for one by one).
 * synchronous_commit is on for all.  The libpq calls are counted
 * (countpq.c): round trips and commits per record.
 *
 * The hand-written ones collect batches like tokenbox does (up to
 * BENCH_BATCH_MAX records, or what arrives within BENCH_BATCH_MAX_MS of the
 * first, polled one at a time) and use the same librdkafka settings as
 * tokenbox's worker.  Every store is WAL with synchronous=FULL.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/ids.h"
#include "bench/bench.h"
#include "consumer/tracing.h"
#include "consumer/worker.h"
#include "store/pg.h"
#include "tokenbox/tokenbox.h"
#include "tools/cli.h"

enum kind { K_PLAIN, K_INBOX, K_TXN, K_TOKENBOX, K_INBOX_BATCHED, NKIND };
static const char *const kind_names[NKIND] = {"plain", "inbox", "kafka-txn",
					      "tokenbox", "inbox-batched"};
/* The inbox's two forms: the same tables and outcome, inbox-batched's
 * writes pipelined (PostgreSQL only). */
#define IS_INBOX(o) ((o)->kind == K_INBOX || (o)->kind == K_INBOX_BATCHED)

typedef struct opts {
	enum kind kind;
	const char *bootstrap, *in, *out, *group, *dir;
	const char *schema, *tschema; /* PostgreSQL: the run's schemas */
	const char *url;	      /* PostgreSQL: TBX_BENCH_STORE_URL */
	long messages, batch, samples;
	int until_rows, separate_tokens;
	const char *layout;	   /* tokenbox's outbox.layout */
	const char *tokens_format; /* tokenbox's outputs (layout batch) */
	const char *app_name;	   /* PostgreSQL: tokenbox's application_name */
} opts_t;

typedef struct sample {
	long processed;
	long long rows;
	long long bytes;
	long long outbox; /* tokenbox's outbox rows, -1: not tokenbox */
} sample_t;

/* What a run measured; printed as JSON at the end. */
typedef struct result {
	long processed;
	long first_batch;	 /* records in the first batch */
	long long rows_at_first; /* business rows then (--until-rows) */
	int64_t t_first_end;	 /* after the first batch, ns */
	int64_t t_end;		 /* after the last, ns */
	long long dedup_rows;	 /* -1: no deduplication storage */
	long long outbox_rows;	 /* tokenbox's left, -1: not tokenbox */
	long long downstream_tokens;
	long long store_bytes;
	bench_io_counts_t io_start, io_end;
	bench_pq_counts_t pq_start, pq_end;
	/* tokenbox with tracing on (OTEL_* in the environment): its
	 * exporter's counters once the queue is empty after the run. */
	int traced;
	tbx__exporter_stats_t spans;
	sample_t samples[64];
	int sample_cnt;
} result_t;

static volatile sig_atomic_t stop_flag;

static void on_term(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tbx_bench contender: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

static char store_path[1024], tokens_path[1024];

static long long file_bytes(const char *path)
{
	char wal[1100];
	struct stat st;
	long long n = 0;

	if (stat(path, &st) == 0)
		n += st.st_size;
	snprintf(wal, sizeof(wal), "%s-wal", path);
	if (stat(wal, &st) == 0)
		n += st.st_size;
	return n;
}

static int exec_sql(sqlite3 *db, const char *sql)
{
	char *err = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "tbx_bench contender: %s: %s\n", sql,
			err ? err : "?");
		sqlite3_free(err);
		return 1;
	}
	return 0;
}

/* Every store: WAL, synchronous=FULL, the same as tokenbox's default. */
static sqlite3 *store_open(const char *path)
{
	sqlite3 *db = NULL;

	if (sqlite3_open_v2(path, &db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
			    NULL) != SQLITE_OK) {
		fprintf(stderr, "tbx_bench contender: open %s: %s\n", path,
			db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return NULL;
	}
	sqlite3_busy_timeout(db, 10000);
	/* Worker processes started together race to create the file:
	 * switching to WAL does not wait on the busy handler. */
	for (int i = 0;; i++) {
		int rc = sqlite3_exec(
		    db,
		    "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
		    "PRAGMA foreign_keys=ON;"
		    "CREATE TABLE IF NOT EXISTS bench_rows (id INTEGER "
		    "PRIMARY KEY, msg_id TEXT NOT NULL, part INTEGER, "
		    "off INTEGER, payload BLOB);",
		    NULL, NULL, NULL);
		if (rc == SQLITE_OK)
			return db;
		if (rc != SQLITE_BUSY || i == 100) {
			die("%s: %s", path, sqlite3_errmsg(db));
			sqlite3_close(db);
			return NULL;
		}
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

static long long query_int(sqlite3 *db, const char *sql, const char *arg)
{
	sqlite3_stmt *stmt;
	long long v = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK)
		return -1;
	if (arg)
		sqlite3_bind_text(stmt, 1, arg, -1, SQLITE_STATIC);
	if (sqlite3_step(stmt) == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return v;
}

/* Rows in the contender's deduplication storage: tokenbox's own group's
 * tokens and registrations, the inbox's ids; -1 for none. */
static long long dedup_rows(const opts_t *o, sqlite3 *db, sqlite3 *tdb)
{
	if (IS_INBOX(o))
		return query_int(db, "SELECT COUNT(*) FROM inbox", NULL);
	if (o->kind != K_TOKENBOX)
		return -1;
	return query_int(tdb, "SELECT COUNT(*) FROM tbx_tokens WHERE grp = ?",
			 o->group) +
	       query_int(tdb,
			 "SELECT COUNT(*) FROM tbx_registrations WHERE "
			 "send_grp = ?",
			 o->group) +
	       query_int(tdb, "SELECT COUNT(*) FROM tbx_tset WHERE grp = ?",
			 o->group) +
	       query_int(tdb,
			 "SELECT COUNT(*) FROM tbx_breg WHERE send_grp = ?",
			 o->group);
}

/* tokenbox's own group's outbox rows in either layout (record rows in
 * tbx_outbox, batch rows in tbx_obatch); -1 for other contenders. */
static long long outbox_rows(const opts_t *o, sqlite3 *db)
{
	if (o->kind != K_TOKENBOX)
		return -1;
	return query_int(db, "SELECT COUNT(*) FROM tbx_outbox WHERE grp = ?",
			 o->group) +
	       query_int(db, "SELECT COUNT(*) FROM tbx_obatch WHERE grp = ?",
			 o->group);
}

static void take_sample(const opts_t *o, result_t *r, sqlite3 *db, sqlite3 *tdb)
{
	sample_t *s;

	if (r->sample_cnt >= (int)(sizeof(r->samples) / sizeof(r->samples[0])))
		return;
	s = &r->samples[r->sample_cnt++];
	s->processed = r->processed;
	s->rows = dedup_rows(o, db, tdb);
	s->outbox = outbox_rows(o, db);
	s->bytes = file_bytes(store_path) +
		   (o->kind == K_TOKENBOX && o->separate_tokens
			? file_bytes(tokens_path)
			: 0);
}

/* After every batch: sample storage, and say whether the run is over. */
static int after_batch(const opts_t *o, result_t *r, sqlite3 *db, sqlite3 *tdb,
		       long batch_cnt)
{
	if (!r->t_first_end && batch_cnt > 0) {
		r->t_first_end = bench_now_ns();
		r->first_batch = batch_cnt;
		/* Several workers: what the group had done by then. */
		if (o->until_rows)
			r->rows_at_first = query_int(
			    db, "SELECT MAX(id) FROM bench_rows", NULL);
	}
	if (o->samples > 0) {
		long step = o->messages / o->samples;
		if (step < 1)
			step = 1;
		if (r->processed / step > (r->processed - batch_cnt) / step)
			take_sample(o, r, db, tdb);
	}
	if (o->until_rows)
		return query_int(db, "SELECT MAX(id) FROM bench_rows", NULL) >=
		       o->messages;
	return r->processed >= o->messages;
}

/* ---- the hand-written contenders ---- */

static int dr_pending, dr_failed;

static void on_dr(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *op)
{
	(void)rk;
	(void)op;
	dr_pending--;
	if (rkm->err)
		dr_failed++;
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac,
		   const char *buf)
{
	(void)rk;
	if (level <= 3)
		fprintf(stderr, "tbx_bench contender: rdkafka %s: %s\n", fac,
			buf);
}

static rd_kafka_t *client(const opts_t *o, rd_kafka_type_t type)
{
	rd_kafka_conf_t *kc = rd_kafka_conf_new();
	char err[512], txid[300];
	rd_kafka_t *rk;
	int bad = 0;

#define SET(k, v)                                                              \
	bad |= rd_kafka_conf_set(kc, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK
	SET("bootstrap.servers", o->bootstrap);
	rd_kafka_conf_set_log_cb(kc, on_log);
	if (type == RD_KAFKA_CONSUMER) {
		/* As tokenbox's worker sets them. */
		SET("group.id", o->group);
		SET("enable.auto.commit", "false");
		SET("enable.auto.offset.store", "false");
		SET("auto.offset.reset", "earliest");
		SET("fetch.wait.max.ms", BENCH_FETCH_WAIT_MS);
		SET("session.timeout.ms", BENCH_SESSION_TIMEOUT_MS);
		SET("heartbeat.interval.ms", "300");
		if (o->kind == K_TXN)
			SET("isolation.level", "read_committed");
	} else {
		SET("linger.ms", "1");
		SET("compression.type", "lz4");
		SET("enable.idempotence", "true");
		if (o->kind == K_TXN) {
			snprintf(txid, sizeof(txid), "%s-txn", o->group);
			SET("transactional.id", txid);
		}
		rd_kafka_conf_set_dr_msg_cb(kc, on_dr);
	}
#undef SET
	if (bad) {
		die("librdkafka configuration: %s%s", err, "");
		rd_kafka_conf_destroy(kc);
		return NULL;
	}
	if (!(rk = rd_kafka_new(type, kc, err, sizeof(err))))
		die("rd_kafka_new: %s%s", err, "");
	return rk;
}

/* The same bench-t0 header goes from the record to its output. */
static void ts_header(rd_kafka_message_t *rkm, const void **val, size_t *len)
{
	rd_kafka_headers_t *h = NULL;

	*val = NULL;
	*len = 0;
	if (rd_kafka_message_headers(rkm, &h) == RD_KAFKA_RESP_ERR_NO_ERROR)
		rd_kafka_header_get_last(h, BENCH_TS_HEADER, val, len);
}

static void msg_id(rd_kafka_message_t *rkm, char *out, size_t size)
{
	rd_kafka_headers_t *h = NULL;
	const void *val = NULL;
	size_t len = 0;

	if (rd_kafka_message_headers(rkm, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
	    rd_kafka_header_get_last(h, "tbx-id", &val, &len) ==
		RD_KAFKA_RESP_ERR_NO_ERROR &&
	    val && len < size) {
		memcpy(out, val, len);
		out[len] = '\0';
		return;
	}
	snprintf(out, size, "u:%" PRId32 ":%" PRId64, rkm->partition,
		 rkm->offset);
}

static int produce_out(rd_kafka_t *prod, const opts_t *o,
		       rd_kafka_message_t *rkm, const char *out_id)
{
	rd_kafka_headers_t *h = rd_kafka_headers_new(2);
	const void *ts;
	size_t ts_len;
	rd_kafka_resp_err_t err;

	ts_header(rkm, &ts, &ts_len);
	if (ts)
		rd_kafka_header_add(h, BENCH_TS_HEADER, -1, ts, ts_len);
	if (out_id)
		rd_kafka_header_add(h, "msg-id", -1, out_id, -1);
	for (;;) {
		err =
		    rd_kafka_producev(prod, RD_KAFKA_V_TOPIC(o->out),
				      RD_KAFKA_V_KEY(rkm->key, rkm->key_len),
				      RD_KAFKA_V_VALUE(rkm->payload, rkm->len),
				      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
				      RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
			break;
		rd_kafka_poll(prod, 10);
	}
	if (err) {
		rd_kafka_headers_destroy(h);
		fprintf(stderr, "tbx_bench contender: produce: %s\n",
			rd_kafka_err2str(err));
		return 1;
	}
	dr_pending++;
	return 0;
}

static int await_delivery(rd_kafka_t *prod)
{
	while (dr_pending > 0)
		rd_kafka_flush(prod, 100);
	if (dr_failed) {
		fprintf(stderr, "tbx_bench contender: %d deliveries failed\n",
			dr_failed);
		return 1;
	}
	return 0;
}

/* Next offset per partition of the batch. */
static rd_kafka_topic_partition_list_t *batch_offsets(rd_kafka_message_t **msgs,
						      size_t cnt)
{
	rd_kafka_topic_partition_list_t *l =
	    rd_kafka_topic_partition_list_new(BENCH_PARTITIONS);

	for (size_t i = 0; i < cnt; i++) {
		rd_kafka_topic_partition_t *p =
		    rd_kafka_topic_partition_list_find(
			l, rd_kafka_topic_name(msgs[i]->rkt),
			msgs[i]->partition);
		if (!p)
			p = rd_kafka_topic_partition_list_add(
			    l, rd_kafka_topic_name(msgs[i]->rkt),
			    msgs[i]->partition);
		if (msgs[i]->offset + 1 > p->offset)
			p->offset = msgs[i]->offset + 1;
	}
	return l;
}

/* Polls one batch the way tokenbox's worker does. */
static size_t poll_batch(rd_kafka_t *cons, rd_kafka_message_t **msgs,
			 size_t max)
{
	size_t cnt = 0;
	int64_t deadline = 0;

	while (cnt < max && !stop_flag) {
		int wait = 100;
		rd_kafka_message_t *rkm;

		if (cnt) {
			int64_t left = (deadline - bench_now_ns()) / 1000000;
			if (left <= 0)
				break;
			wait = (int)left;
		}
		if (!(rkm = rd_kafka_consumer_poll(cons, wait))) {
			if (cnt)
				continue;
			return 0;
		}
		if (rkm->err) {
			rd_kafka_message_destroy(rkm);
			continue;
		}
		if (!cnt)
			deadline = bench_now_ns() +
				   (int64_t)BENCH_BATCH_MAX_MS * 1000000;
		msgs[cnt++] = rkm;
	}
	return cnt;
}

typedef struct stmts {
	sqlite3_stmt *row, *inbox, *outbox, *outbox_del;
} stmts_t;

/* PostgreSQL's statements of the hand-written contenders (@S: the
 * run's schema). */
enum { P_ROW, P_INBOX, P_OUTBOX, P_OUTBOX_DEL, P_INBOX_COUNT, P_ONCE, NP };
static const char *const pg_sql[NP] = {
    [P_ROW] = "INSERT INTO @S.bench_rows (msg_id, part, off, payload) "
	      "VALUES ($1, $2, $3, $4)",
    [P_INBOX] = "INSERT INTO @S.inbox (msg_id, processed_ns) SELECT "
		"unnest($1::text[]), $2 ON CONFLICT DO NOTHING RETURNING "
		"msg_id",
    [P_OUTBOX] = "INSERT INTO @S.outbox (out_id, topic, key, payload, ts) "
		 "SELECT o, $2, k, p, t FROM unnest($1::text[], $3::text[], "
		 "$4::text[], $5::text[]) AS u(o, k, p, t) RETURNING id",
    [P_OUTBOX_DEL] = "DELETE FROM @S.outbox WHERE id = ANY($1::int8[])",
    [P_INBOX_COUNT] = "SELECT count(*) FROM @S.inbox",
    [P_ONCE] = "SELECT (SELECT count(*) FROM @S.inbox), (SELECT count(*) "
	       "FROM @S.bench_rows), (SELECT count(DISTINCT msg_id) FROM "
	       "@S.bench_rows), (SELECT count(*) FROM @S.outbox)",
};

/* A contender's store: SQLite (db, st) or PostgreSQL (pg, ps). */
typedef struct hstore {
	sqlite3 *db;
	stmts_t st;
	tbx__pg_t *pg;
	tbx__pg_stmts_t ps;
} hstore_t;

/* The batch's records, as the stores need them. */
typedef struct hbatch {
	char (*ids)[256];
	char (*out_ids)[37];
	char (*keys)[64];
	char (*payloads)[BENCH_PAYLOAD_LEN + 1];
	char (*ts)[24];
	const char **a_out, **a_key, **a_pay, **a_ts;
	int64_t *outbox_ids;
	long outbox_cnt;
	char *fresh;
} hbatch_t;

/* For batches of up to @p n records. */
static int hbatch_alloc(hbatch_t *b, size_t n)
{
	b->ids = calloc(n, sizeof(*b->ids));
	b->out_ids = calloc(n, sizeof(*b->out_ids));
	b->keys = calloc(n, sizeof(*b->keys));
	b->payloads = calloc(n, sizeof(*b->payloads));
	b->ts = calloc(n, sizeof(*b->ts));
	b->a_out = calloc(n, sizeof(*b->a_out));
	b->a_key = calloc(n, sizeof(*b->a_key));
	b->a_pay = calloc(n, sizeof(*b->a_pay));
	b->a_ts = calloc(n, sizeof(*b->a_ts));
	b->outbox_ids = calloc(n, sizeof(*b->outbox_ids));
	b->fresh = calloc(n, 1);
	return b->ids && b->out_ids && b->keys && b->payloads && b->ts &&
		       b->a_out && b->a_key && b->a_pay && b->a_ts &&
		       b->outbox_ids && b->fresh
		   ? 0
		   : die("out of memory%s%s", "", "");
}

static void hbatch_free(hbatch_t *b)
{
	free(b->ids);
	free(b->out_ids);
	free(b->keys);
	free(b->payloads);
	free(b->ts);
	free(b->a_out);
	free(b->a_key);
	free(b->a_pay);
	free(b->a_ts);
	free(b->outbox_ids);
	free(b->fresh);
}

static int step_reset(sqlite3_stmt *stmt)
{
	int rc = sqlite3_step(stmt);

	sqlite3_reset(stmt);
	sqlite3_clear_bindings(stmt);
	return rc == SQLITE_DONE ? 0 : 1;
}

static int insert_row(stmts_t *st, rd_kafka_message_t *rkm, const char *id)
{
	sqlite3_bind_text(st->row, 1, id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st->row, 2, rkm->partition);
	sqlite3_bind_int64(st->row, 3, rkm->offset);
	sqlite3_bind_blob(st->row, 4, rkm->payload, (int)rkm->len,
			  SQLITE_STATIC);
	return step_reset(st->row);
}

/* The inbox contender's outbox ids are minted as tokenbox mints its own
 * (tbx__uuid(): version 7, random bits from a pool): libuuid's
 * uuid_generate() would cost it five system calls and about 8,500
 * instructions a record that tokenbox does not pay, and its random
 * (version 4) keys a B-tree page dirtied per insert. */
static void uuid_text(char out[37])
{
	tbx__uuid(out);
}

/* SQLite, the batch's transaction: per record the inbox's id (a
 * duplicate stops there), the business row and the outbox row. */
static int sq_store_a(const opts_t *o, hstore_t *hs, rd_kafka_message_t **msgs,
		      size_t cnt, hbatch_t *b)
{
	sqlite3 *db = hs->db;
	stmts_t *st = &hs->st;
	int fail = 0;

	if (exec_sql(db, "BEGIN IMMEDIATE"))
		return 1;
	for (size_t i = 0; i < cnt && !fail; i++) {
		const char *id = b->ids[i];

		b->fresh[i] = 1;
		if (IS_INBOX(o)) {
			sqlite3_bind_text(st->inbox, 1, id, -1, SQLITE_STATIC);
			sqlite3_bind_int64(st->inbox, 2, bench_now_ns());
			fail |= step_reset(st->inbox);
			if (!fail && sqlite3_changes(db) == 0) {
				b->fresh[i] = 0; /* a duplicate: done before */
				continue;
			}
		}
		fail |= insert_row(st, msgs[i], id);
		if (!fail && IS_INBOX(o)) {
			const void *ts;
			size_t ts_len;

			uuid_text(b->out_ids[i]);
			ts_header(msgs[i], &ts, &ts_len);
			sqlite3_bind_text(st->outbox, 1, b->out_ids[i], -1,
					  SQLITE_STATIC);
			sqlite3_bind_text(st->outbox, 2, o->out, -1,
					  SQLITE_STATIC);
			sqlite3_bind_blob(st->outbox, 3, msgs[i]->key,
					  (int)msgs[i]->key_len, SQLITE_STATIC);
			sqlite3_bind_blob(st->outbox, 4, msgs[i]->payload,
					  (int)msgs[i]->len, SQLITE_STATIC);
			sqlite3_bind_blob(st->outbox, 5, ts, (int)ts_len,
					  SQLITE_STATIC);
			fail |= step_reset(st->outbox);
			b->outbox_ids[i] = sqlite3_last_insert_rowid(db);
		}
	}
	if (fail || exec_sql(db, "COMMIT")) {
		fprintf(stderr, "tbx_bench contender: batch: %s\n",
			sqlite3_errmsg(db));
		return 1;
	}
	return 0;
}

/* SQLite, after delivery: the inbox's outbox rows out. */
static int sq_store_e(hstore_t *hs, size_t cnt, hbatch_t *b)
{
	int fail = 0;

	if (exec_sql(hs->db, "BEGIN IMMEDIATE"))
		fail = 1;
	for (size_t i = 0; i < cnt && !fail; i++) {
		if (!b->fresh[i])
			continue;
		sqlite3_bind_int64(hs->st.outbox_del, 1, b->outbox_ids[i]);
		fail |= step_reset(hs->st.outbox_del);
	}
	if (fail || exec_sql(hs->db, "COMMIT"))
		return die("outbox delete: %s%s", sqlite3_errmsg(hs->db), "");
	return 0;
}

/* Copies @p len bytes into a string of @p size bytes. */
static int copy_text(char *dst, size_t size, const void *src, size_t len,
		     const char *what)
{
	if (len >= size)
		return die("a record's %s of %zu bytes: at most %zu here", what,
			   len, size - 1);
	if (len)
		memcpy(dst, src, len);
	dst[len] = '\0';
	return 0;
}

static int pg_failed(hstore_t *hs, const char *what)
{
	tbx__pg_rollback(hs->pg);
	return die("%s: %s", what, tbx__pg_errmsg(hs->pg));
}

/* PostgreSQL, the batch's transaction: the inbox's ids in one statement
 * (the ones not returned are duplicates), the business row per record,
 * the inbox's outbox rows in one statement. */
static int pg_store_a(const opts_t *o, hstore_t *hs, rd_kafka_message_t **msgs,
		      size_t cnt, hbatch_t *b)
{
	tbx__pg_params_t p;
	PGresult *res = NULL;
	size_t m = 0;
	int err;

	if (tbx__pg_begin(hs->pg))
		return pg_failed(hs, "BEGIN");
	memset(b->fresh, 1, cnt);
	if (IS_INBOX(o)) {
		int rows;

		tbx__pgp_init(&p);
		tbx__pgp_text_array_of(&p, b->ids, sizeof(*b->ids), cnt);
		tbx__pgp_i64(&p, bench_now_ns());
		err = tbx__pg_run(&hs->ps, P_INBOX, &p, &res);
		tbx__pgp_free(&p);
		if (err)
			return pg_failed(hs, "inbox");
		rows = PQntuples(res);
		if ((size_t)rows != cnt) { /* duplicates: which ones */
			memset(b->fresh, 0, cnt);
			for (int k = 0; k < rows; k++) {
				const char *id = tbx__pg_text(res, k, 0);
				for (size_t i = 0; i < cnt; i++)
					if (!b->fresh[i] &&
					    strcmp(b->ids[i], id) == 0) {
						b->fresh[i] = 1;
						break;
					}
			}
		}
		PQclear(res);
	}
	for (size_t i = 0; i < cnt; i++) {
		rd_kafka_message_t *rkm = msgs[i];

		if (!b->fresh[i])
			continue;
		if (copy_text(b->payloads[i], sizeof(b->payloads[i]),
			      rkm->payload, rkm->len, "payload")) {
			tbx__pg_rollback(hs->pg);
			return 1;
		}
		tbx__pgp_init(&p);
		tbx__pgp_text(&p, b->ids[i]);
		tbx__pgp_i64(&p, rkm->partition);
		tbx__pgp_i64(&p, rkm->offset);
		tbx__pgp_text(&p, b->payloads[i]);
		/* inbox-batched: queued, sent in one pipeline with the
		 * outbox rows' statement; inbox: a round trip each. */
		err = o->kind == K_INBOX_BATCHED
			  ? tbx__pg_defer(&hs->ps, P_ROW, &p, NULL, 1,
					  "business row")
			  : tbx__pg_run(&hs->ps, P_ROW, &p, NULL);
		tbx__pgp_free(&p);
		if (err)
			return pg_failed(hs, "business row");
		if (IS_INBOX(o)) {
			const void *ts;
			size_t ts_len;

			uuid_text(b->out_ids[i]);
			ts_header(rkm, &ts, &ts_len);
			if (copy_text(b->keys[i], sizeof(b->keys[i]), rkm->key,
				      rkm->key_len, "key") ||
			    copy_text(b->ts[i], sizeof(b->ts[i]), ts, ts_len,
				      BENCH_TS_HEADER)) {
				tbx__pg_rollback(hs->pg);
				return 1;
			}
			b->a_out[m] = b->out_ids[i];
			b->a_key[m] = b->keys[i];
			b->a_pay[m] = b->payloads[i];
			b->a_ts[m++] = b->ts[i];
		}
	}
	b->outbox_cnt = 0;
	if (m) {
		tbx__pgp_init(&p);
		tbx__pgp_text_array(&p, b->a_out, m);
		tbx__pgp_text(&p, o->out);
		tbx__pgp_text_array(&p, b->a_key, m);
		tbx__pgp_text_array(&p, b->a_pay, m);
		tbx__pgp_text_array(&p, b->a_ts, m);
		err = tbx__pg_run(&hs->ps, P_OUTBOX, &p, &res);
		tbx__pgp_free(&p);
		if (err)
			return pg_failed(hs, "outbox rows");
		for (int k = 0; k < PQntuples(res); k++)
			b->outbox_ids[b->outbox_cnt++] = tbx__pg_i64(res, k, 0);
		PQclear(res);
	}
	if (tbx__pg_commit(hs->pg))
		return die("COMMIT: %s%s", tbx__pg_errmsg(hs->pg), "");
	return 0;
}

/* PostgreSQL, after delivery: the inbox's outbox rows out, one
 * statement (inbox-batched: that statement alone, one round trip, as
 * one statement is a transaction of its own). */
static int pg_store_e(const opts_t *o, hstore_t *hs, hbatch_t *b)
{
	tbx__pg_params_t p;
	int err;

	if (!b->outbox_cnt)
		return 0;
	if (o->kind == K_INBOX_BATCHED) {
		tbx__pgp_init(&p);
		tbx__pgp_i64_array(&p, b->outbox_ids, (size_t)b->outbox_cnt);
		err = tbx__pg_run(&hs->ps, P_OUTBOX_DEL, &p, NULL);
		tbx__pgp_free(&p);
		return err ? die("outbox delete: %s%s", tbx__pg_errmsg(hs->pg),
				 "")
			   : 0;
	}
	if (tbx__pg_begin(hs->pg))
		return pg_failed(hs, "BEGIN");
	tbx__pgp_init(&p);
	tbx__pgp_i64_array(&p, b->outbox_ids, (size_t)b->outbox_cnt);
	err = tbx__pg_run(&hs->ps, P_OUTBOX_DEL, &p, NULL);
	tbx__pgp_free(&p);
	if (err)
		return pg_failed(hs, "outbox delete");
	if (tbx__pg_commit(hs->pg))
		return die("COMMIT: %s%s", tbx__pg_errmsg(hs->pg), "");
	return 0;
}

/* One batch of plain, inbox or kafka-txn.  @returns 0 or 1 (fatal). */
static int hand_batch(const opts_t *o, hstore_t *hs, rd_kafka_t *cons,
		      rd_kafka_t *prod, rd_kafka_message_t **msgs, size_t cnt,
		      hbatch_t *b, result_t *r)
{
	rd_kafka_topic_partition_list_t *offsets;

	if (o->kind == K_TXN) {
		rd_kafka_error_t *e = rd_kafka_begin_transaction(prod);
		if (e) {
			die("begin_transaction: %s%s", rd_kafka_error_string(e),
			    "");
			rd_kafka_error_destroy(e);
			return 1;
		}
	}
	for (size_t i = 0; i < cnt; i++)
		msg_id(msgs[i], b->ids[i], sizeof(b->ids[i]));
	if (hs->pg ? pg_store_a(o, hs, msgs, cnt, b)
		   : sq_store_a(o, hs, msgs, cnt, b))
		return 1;
	/* Dispatch (the inbox contender from its outbox rows' copies in
	 * memory, as MassTransit's and Wolverine's in-process outboxes do). */
	for (size_t i = 0; i < cnt; i++)
		if (b->fresh[i] &&
		    produce_out(prod, o, msgs[i],
				IS_INBOX(o) ? b->out_ids[i] : NULL))
			return 1;
	offsets = batch_offsets(msgs, cnt);
	if (o->kind == K_TXN) {
		rd_kafka_consumer_group_metadata_t *cgmd =
		    rd_kafka_consumer_group_metadata(cons);
		rd_kafka_error_t *e = rd_kafka_send_offsets_to_transaction(
		    prod, offsets, cgmd, 30000);
		rd_kafka_consumer_group_metadata_destroy(cgmd);
		if (!e)
			e = rd_kafka_commit_transaction(prod, 30000);
		rd_kafka_topic_partition_list_destroy(offsets);
		if (e) {
			die("transaction: %s%s", rd_kafka_error_string(e), "");
			rd_kafka_error_destroy(e);
			return 1;
		}
		dr_pending = 0; /* the commit waited for every report */
		if (dr_failed)
			return die("deliveries failed%s%s", "", "");
	} else {
		if (await_delivery(prod)) {
			rd_kafka_topic_partition_list_destroy(offsets);
			return 1;
		}
		if (IS_INBOX(o) &&
		    (hs->pg ? pg_store_e(o, hs, b) : sq_store_e(hs, cnt, b))) {
			rd_kafka_topic_partition_list_destroy(offsets);
			return 1;
		}
		rd_kafka_commit(cons, offsets, 1);
		rd_kafka_topic_partition_list_destroy(offsets);
	}
	r->processed += (long)cnt;
	return 0;
}

/* A schema name given on the command line, checked as tokenbox checks
 * store.schema. */
static int schema_ok(const char *opt, const char *name)
{
	char err[256];

	if (tbx__pg_ident_check(opt, name, err, sizeof(err)))
		return die("%s%s", err, "");
	return 0;
}

/* The advisory lock that the contenders' schema creation takes: IF NOT
 * EXISTS does not stop two sessions that create one schema at once
 * (worker processes of one run) from colliding on the catalog's unique
 * index. */
#define BENCH_DDL_LOCK "1413634303"

/* PostgreSQL: connects and makes the run's schema and tables (one
 * implicit transaction: the lock is held until they are committed). */
static int pg_store_open(const opts_t *o, tbx__pg_t **pg)
{
	char err[512], sql[640];

	if (tbx__pg_connect(o->url, pg, err, sizeof(err)))
		return die("TBX_BENCH_STORE_URL: %s%s", err, "");
	snprintf(sql, sizeof(sql),
		 "SELECT pg_advisory_xact_lock(" BENCH_DDL_LOCK "); "
		 "CREATE SCHEMA IF NOT EXISTS \"%s\"; SET synchronous_commit "
		 "= on; CREATE TABLE IF NOT EXISTS \"%s\".bench_rows (id "
		 "bigserial PRIMARY KEY, msg_id text NOT NULL, part int, off "
		 "bigint, payload text)",
		 o->schema, o->schema);
	if (tbx__pg_exec(*pg, sql)) {
		die("%s: %s", o->schema, tbx__pg_errmsg(*pg));
		tbx__pg_unref(*pg);
		*pg = NULL;
		return 1;
	}
	return 0;
}

/* The bytes of the relations of @p schema; -1 when unknown. */
static long long pg_schema_bytes(tbx__pg_t *pg, const char *schema)
{
	const char *v[1] = {schema};
	PGresult *res = PQexecParams(
	    pg->conn,
	    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8 "
	    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
	    "WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')",
	    1, NULL, v, NULL, NULL, 0);
	long long n = -1;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		n = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	return n;
}

/* PostgreSQL, after the run: the inbox's outcome is exactly once when
 * every id has one business row and no other, and every outbox row is
 * gone.  @returns 0, or 1 (said) when not. */
static int pg_inbox_once(hstore_t *hs)
{
	PGresult *res = NULL;
	int64_t ids, rows, distinct, outbox;

	if (tbx__pg_run(&hs->ps, P_ONCE, NULL, &res))
		return die("the outcome check: %s%s", tbx__pg_errmsg(hs->pg),
			   "");
	ids = tbx__pg_i64(res, 0, 0);
	rows = tbx__pg_i64(res, 0, 1);
	distinct = tbx__pg_i64(res, 0, 2);
	outbox = tbx__pg_i64(res, 0, 3);
	PQclear(res);
	if (rows != ids || distinct != ids || outbox != 0) {
		fprintf(stderr,
			"tbx_bench contender: not exactly once: %" PRId64
			" inbox ids, %" PRId64 " business rows (%" PRId64
			" distinct ids), %" PRId64 " outbox rows left\n",
			ids, rows, distinct, outbox);
		return 1;
	}
	return 0;
}

static int run_hand(const opts_t *o, result_t *r)
{
	rd_kafka_t *cons = NULL, *prod = NULL;
	rd_kafka_message_t **msgs = NULL;
	rd_kafka_topic_partition_list_t *topics;
	hstore_t hs;
	hbatch_t b;
	int rc = 1;

	memset(&hs, 0, sizeof(hs));
	memset(&b, 0, sizeof(b));
	if (hbatch_alloc(&b, (size_t)o->batch))
		goto out;
	if (o->url) {
		char sql[512];

		if (pg_store_open(o, &hs.pg))
			goto out;
		snprintf(sql, sizeof(sql),
			 "CREATE TABLE IF NOT EXISTS \"%s\".inbox (msg_id text "
			 "PRIMARY KEY, processed_ns bigint); CREATE TABLE IF "
			 "NOT EXISTS \"%s\".outbox (id bigserial PRIMARY KEY, "
			 "out_id text, topic text, key text, payload text, ts "
			 "text)",
			 o->schema, o->schema);
		if (IS_INBOX(o) && tbx__pg_exec(hs.pg, sql)) {
			die("%s: %s", o->schema, tbx__pg_errmsg(hs.pg));
			goto out;
		}
		if (tbx__pg_stmts_init(&hs.ps, hs.pg, "b", pg_sql, NP,
				       o->schema, NULL)) {
			die("out of memory%s%s", "", "");
			goto out;
		}
	} else {
		sqlite3 *db;

		if (!(db = hs.db = store_open(store_path)))
			goto out;
		if (IS_INBOX(o) &&
		    exec_sql(db,
			     "CREATE TABLE IF NOT EXISTS inbox (msg_id TEXT "
			     "PRIMARY KEY, processed_ns INTEGER) WITHOUT ROWID;"
			     "CREATE TABLE IF NOT EXISTS outbox (id INTEGER "
			     "PRIMARY KEY, out_id TEXT, topic TEXT, key BLOB, "
			     "payload BLOB, ts BLOB);"))
			goto out;
		if (sqlite3_prepare_v3(db,
				       "INSERT INTO bench_rows (msg_id, part, "
				       "off, payload) VALUES (?, ?, ?, ?)",
				       -1, SQLITE_PREPARE_PERSISTENT,
				       &hs.st.row, NULL) != SQLITE_OK ||
		    (IS_INBOX(o) &&
		     (sqlite3_prepare_v3(db,
					 "INSERT OR IGNORE INTO inbox (msg_id, "
					 "processed_ns) VALUES (?, ?)",
					 -1, SQLITE_PREPARE_PERSISTENT,
					 &hs.st.inbox, NULL) != SQLITE_OK ||
		      sqlite3_prepare_v3(db,
					 "INSERT INTO outbox (out_id, topic, "
					 "key, payload, ts) VALUES (?, ?, ?, "
					 "?, ?)",
					 -1, SQLITE_PREPARE_PERSISTENT,
					 &hs.st.outbox, NULL) != SQLITE_OK ||
		      sqlite3_prepare_v3(db, "DELETE FROM outbox WHERE id = ?",
					 -1, SQLITE_PREPARE_PERSISTENT,
					 &hs.st.outbox_del,
					 NULL) != SQLITE_OK))) {
			die("prepare: %s%s", sqlite3_errmsg(db), "");
			goto out;
		}
	}
	if (!(cons = client(o, RD_KAFKA_CONSUMER)) ||
	    !(prod = client(o, RD_KAFKA_PRODUCER)))
		goto out;
	if (o->kind == K_TXN) {
		rd_kafka_error_t *e = rd_kafka_init_transactions(prod, 30000);
		if (e) {
			die("init_transactions: %s%s", rd_kafka_error_string(e),
			    "");
			rd_kafka_error_destroy(e);
			goto out;
		}
	}
	rd_kafka_poll_set_consumer(cons);
	topics = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(topics, o->in, RD_KAFKA_PARTITION_UA);
	if (rd_kafka_subscribe(cons, topics)) {
		rd_kafka_topic_partition_list_destroy(topics);
		die("subscribe %s%s", o->in, "");
		goto out;
	}
	rd_kafka_topic_partition_list_destroy(topics);
	if (!(msgs = calloc((size_t)o->batch, sizeof(*msgs))))
		goto out;
	r->io_start.syncs = 0;
	bench_countvfs_get(&r->io_start);
	bench_pq_get(&r->pq_start);
	while (!stop_flag) {
		size_t cnt = poll_batch(cons, msgs, (size_t)o->batch);
		int fail = 0, done;

		if (cnt)
			fail = hand_batch(o, &hs, cons, prod, msgs, cnt, &b, r);
		for (size_t i = 0; i < cnt; i++)
			rd_kafka_message_destroy(msgs[i]);
		if (fail)
			goto out;
		done = after_batch(o, r, hs.db, NULL, (long)cnt);
		if (done)
			break;
	}
	r->t_end = bench_now_ns();
	bench_countvfs_get(&r->io_end);
	bench_pq_get(&r->pq_end);
	if (hs.pg) {
		int64_t n = -1;
		if (IS_INBOX(o) &&
		    tbx__pg_run_i64(&hs.ps, P_INBOX_COUNT, NULL, &n, NULL))
			goto out;
		if (IS_INBOX(o) && pg_inbox_once(&hs))
			goto out;
		r->dedup_rows = IS_INBOX(o) ? (long long)n : -1;
	} else {
		r->dedup_rows = dedup_rows(o, hs.db, NULL);
	}
	rc = 0;
out:
	free(msgs);
	if (cons) {
		rd_kafka_consumer_close(cons);
		rd_kafka_destroy(cons);
	}
	if (prod)
		rd_kafka_destroy(prod);
	hbatch_free(&b);
	if (hs.pg) {
		if (!rc)
			r->store_bytes = pg_schema_bytes(hs.pg, o->schema);
		tbx__pg_stmts_free(&hs.ps);
		tbx__pg_unref(hs.pg);
		return rc;
	}
	sqlite3_finalize(hs.st.row);
	sqlite3_finalize(hs.st.inbox);
	sqlite3_finalize(hs.st.outbox);
	sqlite3_finalize(hs.st.outbox_del);
	if (!rc && hs.db &&
	    exec_sql(hs.db, "PRAGMA wal_checkpoint(TRUNCATE)") == 0)
		r->store_bytes = file_bytes(store_path);
	sqlite3_close(hs.db);
	return rc;
}

/* ---- tokenbox ---- */

typedef struct tbx_state {
	const char *out;
	sqlite3 *db; /* the connection the statement belongs to */
	sqlite3_stmt *row;
	char pg_sql[160]; /* PostgreSQL: the business row's insert */
} tbx_state_t;

/* The record's one outgoing message. */
static tbx_verdict_t send_out(tbx_ctx_t *ctx, const tbx_msg_t *msg,
			      const char *topic)
{
	const void *payload, *ts = NULL;
	size_t payload_len, ts_len = 0;
	tbx_header_t hdr;

	payload = tbx_msg_payload(msg, &payload_len);
	tbx_msg_header(msg, BENCH_TS_HEADER, &ts, &ts_len);
	hdr = (tbx_header_t){BENCH_TS_HEADER, ts, ts_len};
	tbx_out_t out = {.topic = topic,
			 .type = "BenchOut",
			 .payload = payload,
			 .payload_len = payload_len,
			 .headers = ts ? &hdr : NULL,
			 .header_cnt = ts ? 1 : 0};
	return tbx_ctx_send(ctx, &out) == TBX_OK ? TBX_VERDICT_OK
						 : TBX_VERDICT_RETRY;
}

static tbx_verdict_t on_record(tbx_ctx_t *ctx, const tbx_msg_t *msg,
			       void *opaque)
{
	tbx_state_t *s = opaque;
	sqlite3 *db = tbx_ctx_db(ctx);
	const void *payload;
	size_t payload_len;
	int rc;

	if (s->db != db) { /* once: the worker keeps its connection */
		sqlite3_finalize(s->row);
		s->row = NULL;
		s->db = db;
		if (sqlite3_prepare_v3(db,
				       "INSERT INTO bench_rows (msg_id, part, "
				       "off, payload) VALUES (?, ?, ?, ?)",
				       -1, SQLITE_PREPARE_PERSISTENT, &s->row,
				       NULL) != SQLITE_OK)
			return TBX_VERDICT_RETRY;
	}
	payload = tbx_msg_payload(msg, &payload_len);
	sqlite3_bind_text(s->row, 1, tbx_msg_id(msg), -1, SQLITE_STATIC);
	sqlite3_bind_int(s->row, 2, tbx_msg_partition(msg));
	sqlite3_bind_int64(s->row, 3, tbx_msg_offset(msg));
	sqlite3_bind_blob(s->row, 4, payload, (int)payload_len, SQLITE_STATIC);
	rc = sqlite3_step(s->row);
	sqlite3_reset(s->row);
	sqlite3_clear_bindings(s->row);
	if (rc != SQLITE_DONE)
		return TBX_VERDICT_RETRY;
	return send_out(ctx, msg, s->out);
}

/* PostgreSQL: the same row through tbx_ctx_exec(), parameters as text
 * (the hand-written contenders bind the same texts). */
static tbx_verdict_t on_record_pg(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				  void *opaque)
{
	tbx_state_t *s = opaque;
	char part[16], off[24], text[BENCH_PAYLOAD_LEN + 1];
	const void *payload;
	size_t payload_len;

	payload = tbx_msg_payload(msg, &payload_len);
	if (copy_text(text, sizeof(text), payload, payload_len, "payload"))
		return TBX_VERDICT_RETRY;
	snprintf(part, sizeof(part), "%d", (int)tbx_msg_partition(msg));
	snprintf(off, sizeof(off), "%lld", (long long)tbx_msg_offset(msg));
	const char *params[4] = {tbx_msg_id(msg), part, off, text};
	if (tbx_ctx_exec(ctx, s->pg_sql, params, 4, NULL) != TBX_OK)
		return TBX_VERDICT_RETRY;
	return send_out(ctx, msg, s->out);
}

/* One count of the token schema; -1 when it cannot be read. */
static long long pg_count(tbx__pg_t *pg, const char *sql, const char *arg)
{
	const char *v[1] = {arg};
	PGresult *res = PQexecParams(pg->conn, sql, 1, NULL, v, NULL, NULL, 0);
	long long n = -1;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		n = atoll(PQgetvalue(res, 0, 0));
	else
		fprintf(stderr, "tbx_bench contender: %s: %s", sql,
			PQresultErrorMessage(res));
	PQclear(res);
	return n;
}

/* tokens.format for the worker's outputs: only with the batch layout
 * and the set format (the worker's default is per-message tokens). */
static int worker_format(const opts_t *o, tbx_conf_t *conf)
{
	char err[512];

	if (strcmp(o->tokens_format, "set") || strcmp(o->layout, "batch"))
		return 0;
	if (tbx_conf_set(conf, "tokens.format", "set", err, sizeof(err))) {
		tbx_conf_destroy(conf);
		return die("%s%s", err, "");
	}
	return 0;
}

/*
 * Several tokenbox workers on PostgreSQL (--until-rows): what the
 * group has done, read on the bench's own connection -- the business
 * rows, and the group's outbox rows of either layout.  A worker is done
 * when every record has its row and no outbox row is left: every A has
 * committed, every E too.  The rows at the end of the worker's first
 * batch open the driver's window, as in the SQLite sweep.  @returns 1
 * when done, 0 when not, -1 when the store cannot say (said).
 */
static int pg_until_rows(const opts_t *o, tbx__pg_t *pg, result_t *r,
			 long batch_cnt)
{
	char sql[512];
	const char *v[1] = {o->group};
	PGresult *res;
	long long rows, outbox;

	snprintf(sql, sizeof(sql),
		 "SELECT (SELECT count(*) FROM \"%s\".bench_rows), (SELECT "
		 "count(*) FROM \"%s\".tbx_outbox WHERE grp = $1) + (SELECT "
		 "count(*) FROM \"%s\".tbx_obatch WHERE grp = $1)",
		 o->schema, o->schema, o->schema);
	res = PQexecParams(pg->conn, sql, 1, NULL, v, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		die("%s: %s", sql, PQresultErrorMessage(res));
		PQclear(res);
		return -1;
	}
	rows = atoll(PQgetvalue(res, 0, 0));
	outbox = atoll(PQgetvalue(res, 0, 1));
	PQclear(res);
	if (!r->t_first_end && batch_cnt > 0) {
		r->t_first_end = bench_now_ns();
		r->first_batch = batch_cnt;
		r->rows_at_first = rows;
	}
	return rows >= o->messages && outbox == 0;
}

/* tokenbox on PostgreSQL: store.url, store.schema and tokens.schema (the
 * token store joined: tokens.url empty). */
static int run_tokenbox_pg(const opts_t *o, result_t *r)
{
	tbx_conf_t *conf = tbx_conf_new();
	tbx_state_t state = {.out = o->out};
	tbx_worker_t *w = NULL;
	tbx__pg_t *pg = NULL;
	char err[512], batch[24], sql[640];
	tbx_stats_t stats;
	int rc = 1;

	snprintf(batch, sizeof(batch), "%ld", o->batch);
	snprintf(state.pg_sql, sizeof(state.pg_sql),
		 "INSERT INTO \"%s\".bench_rows (msg_id, part, off, payload) "
		 "VALUES ($1, $2, $3, $4)",
		 o->schema);
	const char *kv[][2] = {
	    {"kafka.bootstrap.servers", o->bootstrap},
	    {"group.id", o->group},
	    {"store.url", o->url},
	    {"store.schema", o->schema},
	    {"tokens.schema", o->tschema},
	    {"tokens.create", "true"},
	    {"outbox.layout", o->layout},
	    {"kafka.producer.compression.type", "lz4"},
	    {"kafka.consumer.fetch.wait.max.ms", BENCH_FETCH_WAIT_MS},
	    {"kafka.consumer.session.timeout.ms", BENCH_SESSION_TIMEOUT_MS},
	    {"kafka.consumer.heartbeat.interval.ms", "300"},
	    {"batch.max.messages", batch},
	    {"log.level", "warning"},
	};
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
		if (tbx_conf_set(conf, kv[i][0], kv[i][1], err, sizeof(err))) {
			tbx_conf_destroy(conf);
			return die("%s%s", err, "");
		}
	if (worker_format(o, conf))
		return 1;
	/* The business table, before the worker starts. */
	if (pg_store_open(o, &pg)) {
		tbx_conf_destroy(conf);
		return 1;
	}
	/* The worker's connections (made from here on; libpq reads
	 * PGAPPNAME at every connect) carry the run's name, which the
	 * driver's lock-wait sampler looks for; the bench's own connection
	 * above keeps libpq's "tokenbox". */
	if (o->app_name && setenv("PGAPPNAME", o->app_name, 1)) {
		tbx_conf_destroy(conf);
		die("setenv PGAPPNAME: %s%s", strerror(errno), "");
		goto out;
	}
	if (!(w = tbx_worker_new(conf, err, sizeof(err)))) {
		tbx_conf_destroy(conf);
		die("tbx_worker_new: %s%s", err, "");
		goto out;
	}
	if (tbx_worker_register(w, o->in, NULL, on_record_pg, &state)) {
		die("register: %s%s", tbx_worker_errstr(w), "");
		goto out;
	}
	bench_pq_get(&r->pq_start);
	while (!stop_flag) {
		if (tbx_worker_poll(w, 100, NULL)) {
			die("poll: %s%s", tbx_worker_errstr(w), "");
			goto out;
		}
		tbx_worker_stats(w, &stats);
		/* Done when delivered: dispatched counts delivered outputs. */
		long prev = r->processed;
		r->processed = (long)stats.dispatched;
		if (o->until_rows) {
			int done = pg_until_rows(o, pg, r, r->processed - prev);
			if (done < 0)
				goto out;
			if (done)
				break;
		} else if (after_batch(o, r, NULL, NULL, r->processed - prev)) {
			break;
		}
	}
	r->t_end = bench_now_ns();
	bench_pq_get(&r->pq_end);
	tbx_worker_close(w);
	snprintf(sql, sizeof(sql),
		 "SELECT (SELECT count(*) FROM \"%s\".tbx_tokens WHERE grp = "
		 "$1) + (SELECT count(*) FROM \"%s\".tbx_registrations WHERE "
		 "send_grp = $1) + (SELECT count(*) FROM \"%s\".tbx_tset "
		 "WHERE grp = $1) + (SELECT count(*) FROM \"%s\".tbx_breg "
		 "WHERE send_grp = $1)",
		 o->tschema, o->tschema, o->tschema, o->tschema);
	/* (schema names are at most 63 bytes: schema_ok) */
	r->dedup_rows = pg_count(pg, sql, o->group);
	snprintf(sql, sizeof(sql),
		 "SELECT (SELECT count(*) FROM \"%s\".tbx_tokens WHERE grp <> "
		 "$1) + (SELECT count(*) FROM \"%s\".tbx_tset WHERE grp <> $1)",
		 o->tschema, o->tschema);
	r->downstream_tokens = pg_count(pg, sql, o->group);
	r->store_bytes =
	    pg_schema_bytes(pg, o->schema) + pg_schema_bytes(pg, o->tschema);
	rc = 0;
out:
	tbx_worker_destroy(w);
	tbx__pg_unref(pg);
	return rc;
}

/* With tracing on, waits (up to 10 s, outside the measured time) until
 * the exporter holds no span, then keeps its counters: the spans of the
 * run exported, dropped on a full queue, or lost in failed exports. */
static void spans_settle(tbx_worker_t *w, result_t *r)
{
	tbx__tracer_t *t = w->batch.tracer;

	if (!t)
		return;
	r->traced = 1;
	for (int i = 0; i < 1000; i++) {
		tbx__tracer_stats(t, &r->spans, NULL);
		if (!r->spans.held)
			break;
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
}

static int run_tokenbox(const opts_t *o, result_t *r)
{
	tbx_conf_t *conf = tbx_conf_new();
	tbx_state_t state = {.out = o->out};
	tbx_worker_t *w = NULL;
	sqlite3 *db = NULL, *tdb = NULL;
	char err[512], batch[24];
	tbx_stats_t stats;
	int rc = 1;

	if (o->url) {
		tbx_conf_destroy(conf);
		return run_tokenbox_pg(o, r);
	}
	snprintf(batch, sizeof(batch), "%ld", o->batch);
	/* Defaults otherwise: synchronous=FULL, batch.max.ms=100. */
	const char *kv[][2] = {
	    {"kafka.bootstrap.servers", o->bootstrap},
	    {"group.id", o->group},
	    {"store.path", store_path},
	    {"tokens.path", o->separate_tokens ? tokens_path : ""},
	    {"tokens.create", "true"},
	    {"outbox.layout", o->layout},
	    {"kafka.producer.compression.type", "lz4"},
	    {"kafka.consumer.fetch.wait.max.ms", BENCH_FETCH_WAIT_MS},
	    {"kafka.consumer.session.timeout.ms", BENCH_SESSION_TIMEOUT_MS},
	    {"kafka.consumer.heartbeat.interval.ms", "300"},
	    {"batch.max.messages", batch},
	    {"log.level", "warning"},
	};
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
		if (tbx_conf_set(conf, kv[i][0], kv[i][1], err, sizeof(err))) {
			tbx_conf_destroy(conf);
			return die("%s%s", err, "");
		}
	if (worker_format(o, conf))
		return 1;
	/* The business table, before the worker adopts the file. */
	if (!(db = store_open(store_path))) {
		tbx_conf_destroy(conf);
		return 1;
	}
	if (!(w = tbx_worker_new(conf, err, sizeof(err)))) {
		tbx_conf_destroy(conf);
		die("tbx_worker_new: %s%s", err, "");
		goto out;
	}
	if (sqlite3_open_v2(tokens_path, &tdb, SQLITE_OPEN_READWRITE, NULL) !=
	    SQLITE_OK) {
		die("open %s: %s", tokens_path, sqlite3_errmsg(tdb));
		goto out;
	}
	sqlite3_busy_timeout(tdb, 10000);
	if (tbx_worker_register(w, o->in, NULL, on_record, &state)) {
		die("register: %s%s", tbx_worker_errstr(w), "");
		goto out;
	}
	bench_countvfs_get(&r->io_start);
	while (!stop_flag) {
		if (tbx_worker_poll(w, 100, NULL)) {
			die("poll: %s%s", tbx_worker_errstr(w), "");
			goto out;
		}
		tbx_worker_stats(w, &stats);
		/* Done when delivered: dispatched counts delivered outputs. */
		long prev = r->processed;
		r->processed = (long)stats.dispatched;
		if (after_batch(o, r, db, tdb, r->processed - prev))
			break;
	}
	r->t_end = bench_now_ns();
	bench_countvfs_get(&r->io_end);
	tbx_worker_close(w);
	spans_settle(w, r);
	r->dedup_rows = dedup_rows(o, db, tdb);
	r->outbox_rows = outbox_rows(o, db);
	r->downstream_tokens =
	    query_int(tdb, "SELECT COUNT(*) FROM tbx_tokens WHERE grp <> ?",
		      o->group) +
	    query_int(tdb, "SELECT COUNT(*) FROM tbx_tset WHERE grp <> ?",
		      o->group);
	rc = 0;
out:
	/* The statement lives on the worker's connection: finalize it
	 * before the worker closes its store. */
	if (w)
		tbx_worker_close(w);
	sqlite3_finalize(state.row);
	tbx_worker_destroy(w);
	if (!rc && exec_sql(db, "PRAGMA wal_checkpoint(TRUNCATE)") == 0)
		r->store_bytes = file_bytes(store_path);
	if (!rc && tdb && o->separate_tokens &&
	    exec_sql(tdb, "PRAGMA wal_checkpoint(TRUNCATE)") == 0)
		r->store_bytes += file_bytes(tokens_path);
	sqlite3_close(tdb);
	sqlite3_close(db);
	return rc;
}

static void print_result(const opts_t *o, const result_t *r)
{
	cJSON *j = cJSON_CreateObject(), *samples = cJSON_CreateArray();
	char *text;

	cJSON_AddStringToObject(j, "kind", kind_names[o->kind]);
	cJSON_AddNumberToObject(j, "processed", (double)r->processed);
	cJSON_AddNumberToObject(j, "first_batch", (double)r->first_batch);
	cJSON_AddNumberToObject(j, "t_first_end_ns", (double)r->t_first_end);
	cJSON_AddNumberToObject(j, "rows_at_first", (double)r->rows_at_first);
	cJSON_AddNumberToObject(j, "t_end_ns", (double)r->t_end);
	cJSON_AddNumberToObject(
	    j, "write_txns",
	    (double)(r->io_end.write_txns - r->io_start.write_txns));
	cJSON_AddNumberToObject(j, "syncs",
				(double)(r->io_end.syncs - r->io_start.syncs));
	cJSON_AddNumberToObject(
	    j, "pg_round_trips",
	    (double)(r->pq_end.round_trips - r->pq_start.round_trips));
	cJSON_AddNumberToObject(
	    j, "pg_commits", (double)(r->pq_end.commits - r->pq_start.commits));
	cJSON_AddNumberToObject(j, "dedup_rows", (double)r->dedup_rows);
	cJSON_AddNumberToObject(j, "outbox_rows", (double)r->outbox_rows);
	cJSON_AddNumberToObject(j, "downstream_tokens",
				(double)r->downstream_tokens);
	cJSON_AddNumberToObject(j, "store_bytes", (double)r->store_bytes);
	if (r->traced) {
		cJSON_AddNumberToObject(j, "spans_enqueued",
					(double)r->spans.enqueued);
		cJSON_AddNumberToObject(j, "spans_exported",
					(double)r->spans.exported);
		cJSON_AddNumberToObject(j, "spans_dropped",
					(double)r->spans.dropped);
		cJSON_AddNumberToObject(j, "spans_failed",
					(double)r->spans.failed);
		cJSON_AddNumberToObject(j, "spans_held", (double)r->spans.held);
	}
	for (int i = 0; i < r->sample_cnt; i++) {
		cJSON *s = cJSON_CreateArray();
		cJSON_AddItemToArray(
		    s, cJSON_CreateNumber((double)r->samples[i].processed));
		cJSON_AddItemToArray(
		    s, cJSON_CreateNumber((double)r->samples[i].rows));
		cJSON_AddItemToArray(
		    s, cJSON_CreateNumber((double)r->samples[i].bytes));
		cJSON_AddItemToArray(
		    s, cJSON_CreateNumber((double)r->samples[i].outbox));
		cJSON_AddItemToArray(samples, s);
	}
	cJSON_AddItemToObject(j, "samples", samples);
	text = cJSON_PrintUnformatted(j);
	printf("%s\n", text ? text : "{}");
	fflush(stdout);
	cJSON_free(text);
	cJSON_Delete(j);
}

static int parse_long(const char *name, const char *v, long min, long max,
		      long *out)
{
	long long n;

	if (tbx_cli_to_int(v, min, max, &n) != 0) {
		fprintf(stderr,
			"tbx_bench contender: %s: '%s' is not an integer in "
			"%ld..%ld\n",
			name, v, min, max);
		return 1;
	}
	*out = (long)n;
	return 0;
}

int bench_contender_main(int argc, char **argv)
{
	opts_t o = {.kind = K_PLAIN,
		    .batch = BENCH_BATCH_MAX,
		    .layout = "record",
		    .tokens_format = "message"};
	result_t r;
	int kind_set = 0, rc;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--until-rows") == 0) {
			o.until_rows = 1;
			continue;
		}
		if (!v)
			return die("%s needs a value%s", a, "");
		i++;
		if (strcmp(a, "--kind") == 0) {
			kind_set = 0;
			for (int k = 0; k < NKIND; k++)
				if (strcmp(v, kind_names[k]) == 0) {
					o.kind = (enum kind)k;
					kind_set = 1;
				}
			if (!kind_set)
				return die("--kind: unknown contender '%s'%s",
					   v, "");
		} else if (strcmp(a, "--bootstrap") == 0) {
			o.bootstrap = v;
		} else if (strcmp(a, "--in") == 0) {
			o.in = v;
		} else if (strcmp(a, "--out") == 0) {
			o.out = v;
		} else if (strcmp(a, "--group") == 0) {
			o.group = v;
		} else if (strcmp(a, "--token-store") == 0) {
			if (strcmp(v, "single") && strcmp(v, "separate"))
				return die("--token-store: '%s'", v);
			o.separate_tokens = strcmp(v, "separate") == 0;
		} else if (strcmp(a, "--layout") == 0) {
			if (strcmp(v, "record") && strcmp(v, "batch"))
				return die("--layout: '%s'", v);
			o.layout = v;
		} else if (strcmp(a, "--tokens-format") == 0) {
			if (strcmp(v, "message") && strcmp(v, "set"))
				return die("--tokens-format: '%s'", v);
			o.tokens_format = v;
		} else if (strcmp(a, "--dir") == 0) {
			o.dir = v;
		} else if (strcmp(a, "--app-name") == 0) {
			/* As the driver makes it: tbx_bench-<pid>-<n>. */
			if (!*v || strlen(v) > 63 ||
			    strspn(v,
				   "abcdefghijklmnopqrstuvwxyz0123456789_-") !=
				strlen(v))
				return die("--app-name: '%s' (a-z, 0-9, _ and "
					   "-, at most 63)",
					   v);
			o.app_name = v;
		} else if (strcmp(a, "--schema") == 0 ||
			   strcmp(a, "--tokens-schema") == 0) {
			if (schema_ok(a, v))
				return 1;
			*(a[2] == 's' ? &o.schema : &o.tschema) = v;
		} else if (strcmp(a, "--messages") == 0) {
			if (parse_long(a, v, 1, 100000000, &o.messages))
				return 1;
		} else if (strcmp(a, "--batch") == 0) {
			if (parse_long(a, v, 1, BENCH_BATCH_MAX_LIMIT,
				       &o.batch))
				return 1;
		} else if (strcmp(a, "--samples") == 0) {
			if (parse_long(a, v, 0, 60, &o.samples))
				return 1;
		} else {
			return die("unknown option '%s'%s", a, "");
		}
	}
	if (!kind_set || !o.bootstrap || !o.in || !o.out || !o.group ||
	    !o.dir || !o.messages)
		return die("needs --kind, --bootstrap, --in, --out, --group, "
			   "--dir and --messages%s%s",
			   "", "");
	if (o.kind == K_INBOX_BATCHED && !o.schema)
		return die("inbox-batched runs on PostgreSQL only "
			   "(--schema)%s%s",
			   "", "");
	if (o.schema) {
		o.url = getenv("TBX_BENCH_STORE_URL");
		if (!o.url || !*o.url)
			return die("--schema: the store's connection string "
				   "comes in TBX_BENCH_STORE_URL, which is "
				   "empty%s%s",
				   "", "");
		if (o.kind == K_TOKENBOX && !o.tschema)
			return die("tokenbox on PostgreSQL needs "
				   "--tokens-schema%s%s",
				   "", "");
	}
	if (o.app_name && (o.kind != K_TOKENBOX || !o.schema))
		return die("--app-name: tokenbox on PostgreSQL only%s%s", "",
			   "");
	snprintf(store_path, sizeof(store_path), "%s/service.db", o.dir);
	snprintf(tokens_path, sizeof(tokens_path), "%s/%s", o.dir,
		 o.separate_tokens ? "tokens.db" : "service.db");
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	if (bench_countvfs_register() != SQLITE_OK)
		return die("cannot register the counting VFS%s%s", "", "");
	memset(&r, 0, sizeof(r));
	r.dedup_rows = -1;
	r.outbox_rows = -1;
	rc = o.kind == K_TOKENBOX ? run_tokenbox(&o, &r) : run_hand(&o, &r);
	if (rc == 0)
		print_result(&o, &r);
	return rc;
}
