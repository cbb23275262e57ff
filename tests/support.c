/* Test fixtures; see support.h. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "support.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <libpq-fe.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "consumer/worker.h"
#include "orphan.h"
#include "fixture.h"
#include "tokens/tokens.h"
#include "tools/kafka_admin.h"

int tt_time_factor(void)
{
	const char *env = getenv("TBX_TIME_FACTOR");
	int f = env ? atoi(env) : 1;

	return f > 0 ? f : 1;
}

char *tt_tmpdir(void)
{
	char tmpl[] = "/tmp/tbxtest.XXXXXX";
	char *dir = mkdtemp(tmpl);

	cr_assert(dir, "mkdtemp: %s", strerror(errno));
	return strdup(dir);
}

static int rm_one(const char *path, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void tt_rmrf(const char *dir)
{
	if (dir)
		nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *tt_path(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	snprintf(p, n, "%s/%s", dir, name);
	return p;
}

static void quiet_log(const rd_kafka_t *rk, int level, const char *fac,
		      const char *buf)
{
	(void)rk;
	if (level <= 3)
		fprintf(stderr, "rdkafka %s: %s\n", fac, buf);
}

static rd_kafka_t *plain_client(rd_kafka_type_t type, const char *bootstraps)
{
	char err[256];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;

	rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, NULL, 0);
	rd_kafka_conf_set_log_cb(conf, quiet_log);
	if (type == RD_KAFKA_CONSUMER) {
		rd_kafka_conf_set(conf, "enable.partition.eof", "true", NULL,
				  0);
		rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", NULL,
				  0);
		rd_kafka_conf_set(conf, "group.id", "tt-reader", NULL, 0);
		rd_kafka_conf_set(conf, "enable.auto.commit", "false", NULL, 0);
		/* An empty fetch comes back at once, not after the default
		 * 500 ms: tt_read_topic() waits for every partition's end. */
		rd_kafka_conf_set(conf, "fetch.wait.max.ms", "10", NULL, 0);
	}
	rk = rd_kafka_new(type, conf, err, sizeof(err));
	cr_assert(rk, "rd_kafka_new: %s", err);
	return rk;
}

const char *tt_real_kafka(void)
{
	const char *tier = getenv("TBX_KAFKA_TIER");
	const char *b = getenv("TBX_KAFKA_BOOTSTRAP");

	if (!tier || strcmp(tier, "1") != 0)
		return NULL;
	cr_assert(b && *b,
		  "the kafka tier needs TBX_KAFKA_BOOTSTRAP (scripts/kafka.sh "
		  "start prints it)");
	return b;
}

/* Empties the real cluster of what earlier tests left: every topic but
 * the broker's own, and every consumer group with its offsets, waiting
 * for the members that just left or were killed (until their session
 * times out) to be gone. */
static void real_reset(const char *bootstraps)
{
	rd_kafka_t *rk = plain_client(RD_KAFKA_PRODUCER, bootstraps);
	const struct rd_kafka_metadata *md;
	const char *names[256];
	size_t cnt = 0;
	char err[512];

	cr_assert_eq(rd_kafka_metadata(rk, 1, NULL, &md, 10000),
		     RD_KAFKA_RESP_ERR_NO_ERROR, "metadata of %s", bootstraps);
	for (int i = 0; i < md->topic_cnt && cnt < 256; i++)
		if (strncmp(md->topics[i].topic, "__", 2) != 0)
			names[cnt++] = md->topics[i].topic;
	cr_assert_eq(tbx_cli_delete_topics(bootstraps, names, cnt, 60000, err,
					   sizeof(err)),
		     0, "%s", err);
	rd_kafka_metadata_destroy(md);
	/* A member that just left or was killed keeps its group non-empty
	 * for a moment, or until its session times out. */
	cr_assert_eq(tbx_cli_delete_groups(bootstraps, NULL, 0,
					   60000 * tt_time_factor(), err,
					   sizeof(err)),
		     0, "%s", err);
	rd_kafka_destroy(rk);
}

tt_cluster_t *tt_cluster_new(int brokers)
{
	tt_cluster_t *c = calloc(1, sizeof(*c));
	char err[256];
	rd_kafka_conf_t *conf;
	const char *real = tt_real_kafka();

	if (real) {
		snprintf(c->bootstraps, sizeof(c->bootstraps), "%s", real);
		real_reset(c->bootstraps);
		return c;
	}
	conf = rd_kafka_conf_new();

	rd_kafka_conf_set_log_cb(conf, quiet_log);
	c->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	cr_assert(c->rk, "rd_kafka_new: %s", err);
	c->mock = rd_kafka_mock_cluster_new(c->rk, brokers);
	cr_assert(c->mock, "mock cluster");
	snprintf(c->bootstraps, sizeof(c->bootstraps), "%s",
		 rd_kafka_mock_cluster_bootstraps(c->mock));
	return c;
}

void tt_cluster_topic(tt_cluster_t *c, const char *topic, int partitions)
{
	if (!c->mock) {
		char err[512];
		const char *names[] = {topic};
		cr_assert_eq(tbx_cli_create_topics(c->bootstraps, names,
						   &partitions, 1, 60000, err,
						   sizeof(err)),
			     0, "%s", err);
		return;
	}
	cr_assert_eq(rd_kafka_mock_topic_create(c->mock, topic, partitions, 1),
		     RD_KAFKA_RESP_ERR_NO_ERROR);
}

void tt_cluster_destroy(tt_cluster_t *c)
{
	if (!c)
		return;
	if (c->mock)
		rd_kafka_mock_cluster_destroy(c->mock);
	if (c->rk)
		rd_kafka_destroy(c->rk);
	free(c);
}

tbx_conf_t *tt_conf(const char *bootstraps, const char *group,
		    const char *store, const char *tokens, ...)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];
	va_list ap;
	const char *k, *v;
	const char *base[][2] = {
	    {"kafka.bootstrap.servers", bootstraps},
	    {"group.id", group},
	    /* Above the 3 s the mock cluster (librdkafka 2.0.2) waits before
	     * an empty group's first members form it.  At 3 s a member's
	     * session ended the moment the group formed: when the cluster's
	     * thread ran late, its session check came first, dropped the
	     * member with its JoinGroup pending and never answered it, and
	     * the consumer waited max.poll.interval.ms + 3 s (303 s) for
	     * the answer, silently.  4 s gives the first join the margin
	     * of 1 s the mock gives every later one (it waits session - 1 s
	     * for members to rejoin).  prog_worker.c uses the same. */
	    {"kafka.consumer.session.timeout.ms", "4000"},
	    {"kafka.consumer.heartbeat.interval.ms", "300"},
	    {"kafka.consumer.fetch.wait.max.ms", "10"},
	    {"kafka.topic.metadata.refresh.interval.ms", "1000"},
	    {"batch.max.ms", "20"},
	    {"retry.backoff.ms", "20"},
	    {"retry.backoff.max.ms", "200"},
	    {"log.level", "warning"},
	    /* The fixtures make their token stores with the workers. */
	    {"tokens.create", tokens && *tokens ? "true" : NULL},
	};

	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
		if (!base[i][1])
			continue;
		cr_assert_eq(tbx_conf_set(conf, base[i][0], base[i][1], err,
					  sizeof(err)),
			     TBX_OK, "%s", err);
	}
	/* Paths, or "pg:SCHEMA" (hop.h). */
	cr_assert_eq(tt_stores_conf(conf, store, tokens, err, sizeof(err)),
		     TBX_OK, "%s", err);
	va_start(ap, tokens);
	while ((k = va_arg(ap, const char *))) {
		v = va_arg(ap, const char *);
		cr_assert_eq(tbx_conf_set(conf, k, v, err, sizeof(err)), TBX_OK,
			     "%s", err);
	}
	va_end(ap);
	return conf;
}

/* Opens (creating if missing) the token store @p tokens: a file, or a
 * schema on the pg tier's server. */
static tbx_tokens_t *tokens_open(const char *tokens)
{
	tbx__db_opts_t opts;
	tbx_tokens_t *t = NULL;
	char err[256];

	tbx__db_opts_init(&opts);
	if (tt_store_is_pg(tokens)) {
		char url[2048];
		cr_assert_eq(
		    tbx_tokens_pg_open(tt_store_url(tokens, url, sizeof(url)),
				       tt_store_schema(tokens), NULL, &opts, &t,
				       err, sizeof(err)),
		    TBX_OK, "%s: %s", tokens, err);
		return t;
	}
	cr_assert_eq(
	    tbx_tokens_sqlite_open(tokens, &opts, NULL, &t, err, sizeof(err)),
	    TBX_OK, "%s", err);
	return t;
}

void tt_subscribe(const char *tokens, const char *topic, const char *group)
{
	tbx_tokens_t *t = tokens_open(tokens);
	int64_t since;

	cr_assert_eq(tbx_tokens_subscribe(t, topic, group, &since), TBX_OK);
	tbx_tokens_close(t);
}

void tt_tokens_init(const char *tokens)
{
	tbx_tokens_close(tokens_open(tokens));
}

tbx_publisher_t *tt_publisher(const char *bootstraps, const char *tokens,
			      const char *log_level)
{
	char err[512];
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;

	tbx_conf_set(conf, "kafka.bootstrap.servers", bootstraps, NULL, 0);
	cr_assert_eq(tt_stores_conf(conf, NULL, tokens, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_conf_set(conf, "log.level", log_level, NULL, 0);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "publisher: %s", err);
	return pub;
}

void tt_publish(const char *bootstraps, const char *tokens, const char *topic,
		const char *type, int cnt, int key_cnt, const char *prefix)
{
	char key[32], payload[64];
	tbx_publisher_t *pub;
	size_t failed;

	tt_tokens_init(tokens); /* a publisher never creates it */
	pub = tt_publisher(bootstraps, tokens, "warning");
	for (int i = 0; i < cnt; i++) {
		snprintf(key, sizeof(key), "key-%d",
			 i % (key_cnt ? key_cnt : 1));
		snprintf(payload, sizeof(payload), "%s-%d", prefix, i);
		tbx_out_t out = {.topic = topic,
				 .type = type,
				 .key = key,
				 .key_len = strlen(key),
				 .payload = payload,
				 .payload_len = strlen(payload)};
		cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	}
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	tbx_publisher_destroy(pub);
}

void tt_publish_sets(const char *bootstraps, const char *tokens,
		     const char *topic, const char *type, int cnt, int parts,
		     int spare, const char *prefix, tt_set_t *sets)
{
	char ids[TT_SETS_MAX][TBX_UUID_LEN + 1], store[TBX_UUID_LEN + 1];
	tbx__set_item_t items[TT_SETS_MAX];
	tbx__set_req_t req = {NULL, NULL, items, (size_t)parts};
	tt_record_t *recs = calloc((size_t)cnt, sizeof(*recs));
	tbx_tokens_t *t = tokens_open(tokens);
	int64_t seq = 0;

	cr_assert(parts >= 1 && parts <= TT_SETS_MAX && cnt >= 0 && recs);
	for (int p = 0; p < parts; p++) {
		tbx__uuid(ids[p]);
		/* Record i goes to partition i % parts, bit i / parts. */
		items[p] = (tbx__set_item_t){
		    ids[p], topic, p,
		    (uint32_t)((cnt - p + parts - 1) / parts + spare)};
		if (items[p].nbits == 0)
			items[p].nbits = 1;
	}
	cr_assert_eq(
	    tbx_tokens_sets_mint(t, "tt-publisher", &req, 1, &seq, NULL),
	    TBX_OK);
	cr_assert_eq(tbx_tokens_store_id(t, store), TBX_OK);
	tbx_tokens_close(t);
	for (int p = 0; sets && p < parts; p++) {
		memcpy(sets[p].id, ids[p], sizeof(sets[p].id));
		sets[p].nbits = items[p].nbits;
		sets[p].seq = seq;
	}
	for (int i = 0; i < cnt; i++) {
		char id[TBX_UUID_LEN + 1], bit[32], num[24], key[32];
		char payload[64];
		tt_record_t *r = &recs[i];

		tbx__uuid(id);
		r->partition = i % parts;
		snprintf(bit, sizeof(bit), "%d:%d", i % parts, i / parts);
		snprintf(num, sizeof(num), "%lld", (long long)seq);
		snprintf(key, sizeof(key), "key-%d", i % parts);
		snprintf(payload, sizeof(payload), "%s-%d", prefix, i);
		r->key = strdup(key);
		r->payload = strdup(payload);
		r->headers = rd_kafka_headers_new(6);
		rd_kafka_header_add(r->headers, "tbx-id", -1, id, -1);
		rd_kafka_header_add(r->headers, "tbx-tset", -1, ids[i % parts],
				    -1);
		rd_kafka_header_add(r->headers, "tbx-tbit", -1, bit, -1);
		rd_kafka_header_add(r->headers, "tbx-seq", -1, num, -1);
		rd_kafka_header_add(r->headers, "tbx-store", -1, store, -1);
		rd_kafka_header_add(r->headers, "tbx-type", -1, type, -1);
	}
	tt_reproduce(bootstraps, topic, recs, (size_t)cnt);
	tt_records_free(recs, (size_t)cnt);
}

static char *hdr_copy(rd_kafka_headers_t *hdrs, const char *name)
{
	const void *val;
	size_t len;
	char *s;

	if (!hdrs || rd_kafka_header_get_last(hdrs, name, &val, &len) || !val)
		return NULL;
	s = malloc(len + 1);
	memcpy(s, val, len);
	s[len] = '\0';
	return s;
}

static char *buf_copy(const void *p, size_t len)
{
	char *s;

	if (!p)
		return NULL;
	s = malloc(len + 1);
	memcpy(s, p, len);
	s[len] = '\0';
	return s;
}

size_t tt_read_topic(const char *bootstraps, const char *topic,
		     tt_record_t **out)
{
	rd_kafka_t *rk = plain_client(RD_KAFKA_CONSUMER, bootstraps);
	const struct rd_kafka_metadata *md;
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
	rd_kafka_topic_partition_list_t *parts;
	size_t cnt = 0, cap = 64, eofs = 0, want = 0;
	tt_record_t *recs = calloc(cap, sizeof(*recs));
	time_t deadline = time(NULL) + 30 * tt_time_factor();

	cr_assert_eq(rd_kafka_metadata(rk, 0, rkt, &md, 10000),
		     RD_KAFKA_RESP_ERR_NO_ERROR);
	parts = rd_kafka_topic_partition_list_new(8);
	for (int i = 0; i < md->topic_cnt; i++) {
		for (int j = 0; j < md->topics[i].partition_cnt; j++) {
			int64_t lo, hi;
			int32_t p = md->topics[i].partitions[j].id;
			cr_assert_eq(rd_kafka_query_watermark_offsets(
					 rk, topic, p, &lo, &hi, 10000),
				     RD_KAFKA_RESP_ERR_NO_ERROR);
			if (hi > lo) {
				rd_kafka_topic_partition_list_add(parts, topic,
								  p)
				    ->offset = RD_KAFKA_OFFSET_BEGINNING;
				want++;
			}
		}
	}
	rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	if (want)
		rd_kafka_assign(rk, parts);
	while (eofs < want && time(NULL) < deadline) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
		if (!m)
			continue;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			eofs++;
		} else if (!m->err) {
			rd_kafka_headers_t *h = NULL;
			if (cnt == cap)
				recs =
				    realloc(recs, (cap *= 2) * sizeof(*recs));
			tt_record_t *r = &recs[cnt++];
			memset(r, 0, sizeof(*r));
			r->partition = m->partition;
			r->offset = m->offset;
			r->key = buf_copy(m->key, m->key_len);
			r->payload = buf_copy(m->payload, m->len);
			if (!rd_kafka_message_headers(m, &h)) {
				r->headers = rd_kafka_headers_copy(h);
				r->id = hdr_copy(h, "tbx-id");
				r->token = hdr_copy(h, "tbx-token");
				r->type = hdr_copy(h, "tbx-type");
				r->seq = hdr_copy(h, "tbx-seq");
				r->cause = hdr_copy(h, "tbx-cause");
				r->dlq_error = hdr_copy(h, "tbx-dlq-error");
			}
		}
		rd_kafka_message_destroy(m);
	}
	cr_assert_eq(eofs, want, "reading %s timed out", topic);
	rd_kafka_topic_partition_list_destroy(parts);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	*out = recs;
	return cnt;
}

void tt_records_free(tt_record_t *recs, size_t cnt)
{
	for (size_t i = 0; i < cnt; i++) {
		free(recs[i].key);
		free(recs[i].payload);
		free(recs[i].id);
		free(recs[i].token);
		free(recs[i].type);
		free(recs[i].seq);
		free(recs[i].cause);
		free(recs[i].dlq_error);
		if (recs[i].headers)
			rd_kafka_headers_destroy(recs[i].headers);
	}
	free(recs);
}

void tt_reproduce(const char *bootstraps, const char *topic,
		  const tt_record_t *recs, size_t cnt)
{
	rd_kafka_t *rk = plain_client(RD_KAFKA_PRODUCER, bootstraps);

	for (size_t i = 0; i < cnt; i++) {
		const tt_record_t *r = &recs[i];
		rd_kafka_resp_err_t err = rd_kafka_producev(
		    rk, RD_KAFKA_V_TOPIC(topic),
		    RD_KAFKA_V_PARTITION(r->partition),
		    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
		    RD_KAFKA_V_KEY(r->key, r->key ? strlen(r->key) : 0),
		    RD_KAFKA_V_VALUE(r->payload,
				     r->payload ? strlen(r->payload) : 0),
		    RD_KAFKA_V_HEADERS(r->headers
					   ? rd_kafka_headers_copy(r->headers)
					   : rd_kafka_headers_new(0)),
		    RD_KAFKA_V_END);
		cr_assert_eq(err, RD_KAFKA_RESP_ERR_NO_ERROR);
	}
	cr_assert_eq(rd_kafka_flush(rk, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
	rd_kafka_destroy(rk);
}

void tt_produce_plain(const char *bootstraps, const char *topic,
		      int32_t partition, const char *key, const char *payload,
		      const char *type)
{
	rd_kafka_t *rk = plain_client(RD_KAFKA_PRODUCER, bootstraps);
	rd_kafka_headers_t *h = rd_kafka_headers_new(1);

	if (type)
		rd_kafka_header_add(h, "tbx-type", -1, type, -1);
	cr_assert_eq(rd_kafka_producev(
			 rk, RD_KAFKA_V_TOPIC(topic),
			 RD_KAFKA_V_PARTITION(partition),
			 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
			 RD_KAFKA_V_KEY((void *)key, key ? strlen(key) : 0),
			 RD_KAFKA_V_VALUE((void *)payload, strlen(payload)),
			 RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END),
		     RD_KAFKA_RESP_ERR_NO_ERROR);
	cr_assert_eq(rd_kafka_flush(rk, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
	rd_kafka_destroy(rk);
}

/* The pg tier's counts go through a connection of their own (libpq, not
 * tokenbox's store layer, so that the fault injection of store/db.h never
 * counts nor cuts them), kept for the test's process; search_path names
 * the descriptor's schema, so that the tests' SQL is the same on both
 * backends. */
static PGconn *count_conn;
static char count_schema[128];

static int pg_value(const char *store, const char *sql,
		    const char *const *params, int n, int64_t *v, char *err,
		    size_t err_size)
{
	PGresult *res;
	char set[256];

	*v = -1;
	if (count_conn && PQstatus(count_conn) != CONNECTION_OK) {
		PQfinish(count_conn);
		count_conn = NULL;
	}
	if (!count_conn) {
		count_conn = tt_pg_connect(getenv("TBX_PG_URL"));
		count_schema[0] = '\0';
		if (PQstatus(count_conn) != CONNECTION_OK) {
			snprintf(err, err_size, "%s",
				 PQerrorMessage(count_conn));
			PQfinish(count_conn);
			count_conn = NULL;
			return -1;
		}
	}
	if (strcmp(count_schema, tt_store_schema(store)) != 0) {
		snprintf(set, sizeof(set), "SET search_path TO \"%s\"",
			 tt_store_schema(store));
		res = PQexec(count_conn, set);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			snprintf(err, err_size, "%s",
				 PQerrorMessage(count_conn));
			PQclear(res);
			return -1;
		}
		PQclear(res);
		snprintf(count_schema, sizeof(count_schema), "%s",
			 tt_store_schema(store));
	}
	res = PQexecParams(count_conn, sql, n, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK &&
	    PQresultStatus(res) != PGRES_COMMAND_OK) {
		snprintf(err, err_size, "%s", PQerrorMessage(count_conn));
		PQclear(res);
		return -1;
	}
	/* As sqlite3_column_int64(): NULL is 0. */
	if (PQntuples(res) > 0 && PQnfields(res) > 0)
		*v = PQgetisnull(res, 0, 0)
			 ? 0
			 : strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return 0;
}

int tt_pg_tier(void)
{
	const char *tier = getenv("TBX_PG_TIER");

	return tier && strcmp(tier, "1") == 0;
}

static char *store_new(const char *dir, const char *name, const char *kind)
{
	char schema[64], sql[160], err[512];
	size_t n;
	char *s;
	int64_t v;

	if (!tt_pg_tier()) {
		n = strlen(dir) + strlen(name) + 5;
		s = malloc(n);
		snprintf(s, n, "%s/%s.db", dir, name);
		return s;
	}
	cr_assert(getenv("TBX_PG_URL") && *getenv("TBX_PG_URL"),
		  "the pg tier needs TBX_PG_URL (bash scripts/pg.sh start "
		  "--dir DIR prints it)");
	tt_pg_schema(schema, sizeof(schema), name);
	n = strlen(kind) + strlen(schema) + 2;
	s = malloc(n);
	snprintf(s, n, "%s:%s", kind, schema);
	/* Pids come round again: nothing of an earlier run may be found. */
	snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
		 schema);
	cr_assert_eq(pg_value(s, sql, NULL, 0, &v, err, sizeof(err)), 0,
		     "%s: %s", s, err);
	return s;
}

char *tt_store_new(const char *dir, const char *name)
{
	return store_new(dir, name, "pg");
}

char *tt_tokens_new(const char *dir, const char *name, int joined)
{
	return store_new(dir, name, joined ? "pg" : "pg2");
}

int64_t tt_pg_value(const char *store, const char *sql)
{
	int64_t v;
	char err[512];

	if (pg_value(store, sql, NULL, 0, &v, err, sizeof(err)))
		return -1;
	return v;
}

size_t tt_rows(const char *store, const char *sql, tt_row_fn fn, void *opaque)
{
	const char *vals[16];
	size_t rows = 0;

	if (tt_store_is_pg(store)) {
		int64_t v;
		char err[512];
		PGresult *res;

		/* search_path first, through pg_value() */
		cr_assert_eq(
		    pg_value(store, "SELECT 0", NULL, 0, &v, err, sizeof(err)),
		    0, "%s: %s", store, err);
		res =
		    PQexecParams(count_conn, sql, 0, NULL, NULL, NULL, NULL, 0);
		cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s: %s",
			     store, sql, PQerrorMessage(count_conn));
		cr_assert_leq(PQnfields(res), 16);
		for (int r = 0; r < PQntuples(res); r++, rows++) {
			for (int c = 0; c < PQnfields(res); c++)
				vals[c] = PQgetisnull(res, r, c)
					      ? NULL
					      : PQgetvalue(res, r, c);
			fn(opaque, PQnfields(res), vals);
		}
		PQclear(res);
		return rows;
	}
	sqlite3 *conn;
	sqlite3_stmt *stmt;

	cr_assert_eq(sqlite3_open_v2(store, &conn, SQLITE_OPEN_READONLY, NULL),
		     SQLITE_OK, "open %s", store);
	sqlite3_busy_timeout(conn, 10000);
	cr_assert_eq(sqlite3_prepare_v2(conn, sql, -1, &stmt, NULL), SQLITE_OK,
		     "%s: %s", sql, sqlite3_errmsg(conn));
	cr_assert_leq(sqlite3_column_count(stmt), 16);
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		int n = sqlite3_column_count(stmt);
		for (int c = 0; c < n; c++)
			vals[c] = (const char *)sqlite3_column_text(stmt, c);
		fn(opaque, n, vals);
		rows++;
	}
	sqlite3_finalize(stmt);
	sqlite3_close(conn);
	return rows;
}

int tt_table_exists(const char *store, const char *table)
{
	sqlite3 *conn;
	sqlite3_stmt *stmt;
	int found = 0;

	if (tt_store_is_pg(store)) {
		const char *params[] = {tt_store_schema(store), table};
		int64_t v;
		char err[512];
		return pg_value(store,
				"SELECT COUNT(*) FROM pg_tables WHERE "
				"schemaname = $1 AND tablename = $2",
				params, 2, &v, err, sizeof(err)) == 0 &&
		       v == 1;
	}
	if (access(store, F_OK) != 0)
		return 0;
	if (sqlite3_open_v2(store, &conn, SQLITE_OPEN_READONLY, NULL) !=
	    SQLITE_OK) {
		sqlite3_close(conn);
		return 0;
	}
	sqlite3_busy_timeout(conn, 10000);
	if (sqlite3_prepare_v2(conn,
			       "SELECT COUNT(*) FROM sqlite_master WHERE type "
			       "= 'table' AND name = ?",
			       -1, &stmt, NULL) == SQLITE_OK) {
		sqlite3_bind_text(stmt, 1, table, -1, SQLITE_STATIC);
		found = sqlite3_step(stmt) == SQLITE_ROW &&
			sqlite3_column_int64(stmt, 0) == 1;
		sqlite3_finalize(stmt);
	}
	sqlite3_close(conn);
	return found;
}

int64_t tt_count(const char *db, const char *sql)
{
	sqlite3 *conn;
	sqlite3_stmt *stmt;
	int64_t v = -1;

	if (tt_store_is_pg(db)) {
		char err[512];
		cr_assert_eq(pg_value(db, sql, NULL, 0, &v, err, sizeof(err)),
			     0, "%s: %s: %s", db, sql, err);
		return v;
	}
	cr_assert_eq(sqlite3_open_v2(db, &conn, SQLITE_OPEN_READONLY, NULL),
		     SQLITE_OK, "open %s", db);
	sqlite3_busy_timeout(conn, 10000);
	cr_assert_eq(sqlite3_prepare_v2(conn, sql, -1, &stmt, NULL), SQLITE_OK,
		     "%s: %s", sql, sqlite3_errmsg(conn));
	if (sqlite3_step(stmt) == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	sqlite3_close(conn);
	return v;
}

int tt_integrity_ok(const char *db)
{
	sqlite3 *conn;
	sqlite3_stmt *stmt;
	int ok = 0;

	/* A file's check; a PostgreSQL server keeps its own consistency
	 * (what a killed client leaves is a rolled-back transaction). */
	if (tt_store_is_pg(db))
		return 1;
	if (sqlite3_open_v2(db, &conn, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
		return 0;
	if (sqlite3_prepare_v2(conn, "PRAGMA integrity_check", -1, &stmt,
			       NULL) == SQLITE_OK) {
		ok = sqlite3_step(stmt) == SQLITE_ROW &&
		     strcmp((const char *)sqlite3_column_text(stmt, 0), "ok") ==
			 0;
		sqlite3_finalize(stmt);
	}
	sqlite3_close(conn);
	return ok;
}

/* What a worker was doing when tt_drive() gave up: its counters, last
 * error, assignment and the partitions it holds back. */
static void drive_report(tbx_worker_t *w, int i)
{
	rd_kafka_topic_partition_list_t *as = NULL;
	tbx_stats_t st;
	int64_t now = tbx__mono_ms();

	tbx_worker_stats(w, &st);
	fprintf(stderr,
		"tt_drive: worker %d (group %s): consumed %llu processed "
		"%llu duplicates %llu resumed %llu retries %llu "
		"dead_lettered %llu untokened %llu dispatched %llu "
		"tokens created %llu consumed %llu batches %llu "
		"commits_retried %llu reconnects %llu; last error: '%s'\n",
		i, w->group, (unsigned long long)st.consumed,
		(unsigned long long)st.processed,
		(unsigned long long)st.duplicates_dropped,
		(unsigned long long)st.resumed, (unsigned long long)st.retries,
		(unsigned long long)st.dead_lettered,
		(unsigned long long)st.untokened,
		(unsigned long long)st.dispatched,
		(unsigned long long)st.tokens_created,
		(unsigned long long)st.tokens_consumed,
		(unsigned long long)st.batches,
		(unsigned long long)st.commits_retried,
		(unsigned long long)st.store_reconnects, tbx_worker_errstr(w));
	if (w->consumer && !rd_kafka_assignment(w->consumer, &as) && as) {
		fprintf(stderr, "tt_drive: worker %d: assigned %d:", i,
			as->cnt);
		for (int k = 0; k < as->cnt; k++)
			fprintf(stderr, " %s[%d]", as->elems[k].topic,
				(int)as->elems[k].partition);
		fprintf(stderr, " (ever: %d)\n", w->assigned_once);
	}
	if (as)
		rd_kafka_topic_partition_list_destroy(as);
	for (size_t k = 0; k < w->part_cnt; k++) {
		const tbx__part_t *p = &w->parts[k];
		if (p->paused || p->failures)
			fprintf(stderr,
				"tt_drive: worker %d: %s[%d] paused %d "
				"(resume in %lld ms, at offset %lld), %d "
				"failed batches\n",
				i, p->topic, (int)p->partition, p->paused,
				(long long)(p->resume_at_ms - now),
				(long long)p->seek_offset, p->failures);
	}
}

int tt_drive(tbx_worker_t **workers, int cnt, int (*done)(void *), void *opaque,
	     int idle_polls, int timeout_s)
{
	int64_t start = tbx__mono_ms(), last_busy = start;
	int64_t limit = (int64_t)timeout_s * tt_time_factor() * 1000;
	int idle = 0;

	while (tbx__mono_ms() - start < limit) {
		int busy = 0;
		for (int i = 0; i < cnt; i++) {
			size_t n;
			int err = tbx_worker_poll(workers[i], 50, &n);
			cr_assert_eq(err, TBX_OK, "poll: %s (%s)",
				     tbx_strerror(err),
				     tbx_worker_errstr(workers[i]));
			busy |= n > 0;
		}
		if (busy)
			last_busy = tbx__mono_ms();
		idle = busy ? 0 : idle + 1;
		if (idle >= idle_polls && (!done || done(opaque)))
			return 1;
	}
	/* Say why, for a failure seen once in CI. */
	fprintf(stderr,
		"tt_drive: gave up after %lld ms (limit %lld ms); the last "
		"record was polled %lld ms ago; %d idle polls in a row, the "
		"condition %s\n",
		(long long)(tbx__mono_ms() - start), (long long)limit,
		(long long)(tbx__mono_ms() - last_busy), idle,
		!done	       ? "(none)"
		: done(opaque) ? "holds"
			       : "does not hold");
	for (int i = 0; i < cnt; i++)
		drive_report(workers[i], i);
	return 0;
}

pid_t tt_spawn(char *const argv[], char *const env[])
{
	pid_t parent = getpid();
	pid_t pid = fork();

	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		tt_child_dies_with(parent);
		for (size_t i = 0; env && env[i]; i++)
			putenv(env[i]);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return pid;
}

int tt_wait(pid_t pid, int timeout_s)
{
	time_t deadline = time(NULL) + (time_t)timeout_s * tt_time_factor();
	int status;

	while (time(NULL) < deadline) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return status;
		usleep(20000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

int tt_assigned(tbx_worker_t **workers, int cnt)
{
	for (int i = 0; i < cnt; i++)
		if (workers[i]->part_cnt == 0)
			return 0;
	return 1;
}

int tt_caught_up(tbx_worker_t **workers, int cnt)
{
	for (int i = 0; i < cnt; i++) {
		tbx_worker_t *w = workers[i];
		rd_kafka_topic_partition_list_t *as = NULL, *cm = NULL;
		int behind = 0;

		/* A held partition is fetched again from its seek offset,
		 * whatever its position says now. */
		for (size_t k = 0; k < w->part_cnt; k++)
			if (w->parts[k].paused)
				return 0;
		if (!w->consumer || rd_kafka_assignment(w->consumer, &as) ||
		    !as || as->cnt == 0) {
			if (as)
				rd_kafka_topic_partition_list_destroy(as);
			return 0;
		}
		/* The position, or where the worker starts when it has polled
		 * nothing yet: the group's committed offset (none: behind,
		 * unless the partition is empty). */
		rd_kafka_position(w->consumer, as);
		cm = rd_kafka_topic_partition_list_copy(as);
		if (rd_kafka_committed(w->consumer, cm, 5000))
			behind = 1;
		for (int k = 0; !behind && k < as->cnt; k++) {
			int64_t lo, hi, at = as->elems[k].offset;

			if (at < 0)
				at = cm->elems[k].offset;
			if (rd_kafka_query_watermark_offsets(
				w->consumer, as->elems[k].topic,
				as->elems[k].partition, &lo, &hi, 5000) ||
			    (hi > lo && at < hi))
				behind = 1;
		}
		rd_kafka_topic_partition_list_destroy(cm);
		rd_kafka_topic_partition_list_destroy(as);
		if (behind)
			return 0;
	}
	return 1;
}

typedef struct crash_expect {
	const char *s1, *s2;
	int n;
	int batch_rows; /* outbox.layout=batch: no tbx_obatch row left */
	tbx_worker_t **w;
} crash_expect_t;

static int crash_done(void *opaque)
{
	crash_expect_t *e = opaque;

	/* Recovery is over when every effect exists, nothing is pending
	 * and both workers have polled every record of their topics (the
	 * upstream copies and any re-dispatch included): "idle" alone
	 * would stop before the new one got its partitions, and a fixed
	 * quiet time only guesses when the copies have been seen. */
	return tt_count(e->s1, "SELECT COUNT(DISTINCT payload) FROM hop1") ==
		   e->n &&
	       tt_count(e->s2, "SELECT COUNT(DISTINCT payload) FROM hop2") ==
		   e->n &&
	       tt_count(e->s1, "SELECT COUNT(*) FROM tbx_outbox") == 0 &&
	       tt_count(e->s2, "SELECT COUNT(*) FROM tbx_outbox") == 0 &&
	       (!e->batch_rows ||
		tt_count(e->s1, "SELECT COUNT(*) FROM tbx_obatch") == 0) &&
	       tt_caught_up(e->w, 2);
}

void tt_hop_pair(tbx_worker_t *w[2], const char *bootstraps, const char *s1,
		 const char *t1, const char *s2, const char *t2, tt_hop_t *hop1,
		 tt_hop_t *hop2)
{
	char err[512];

	w[0] = tbx_worker_new(tt_conf(bootstraps, "g1", s1, t1, NULL), err,
			      sizeof(err));
	cr_assert(w[0], "%s", err);
	w[1] = tbx_worker_new(tt_conf(bootstraps, "g2", s2, t2, NULL), err,
			      sizeof(err));
	cr_assert(w[1], "%s", err);
	cr_assert_eq(
	    tbx_worker_register(w[0], "in", "Ping", tt_hop_handle, hop1),
	    TBX_OK);
	cr_assert_eq(
	    tbx_worker_register(w[1], "out", "Pong", tt_hop_handle, hop2),
	    TBX_OK);
}

void tt_crash_case(const char *point, int single_file)
{
	tt_crash_case_with(point, single_file, NULL);
}

/* The value of header @p name of @p rec, NUL-terminated into @p buf
 * ("" when absent). */
static void rec_header(const tt_record_t *rec, const char *name, char *buf,
		       size_t size)
{
	const void *v = NULL;
	size_t len = 0;

	buf[0] = '\0';
	if (rec->headers &&
	    rd_kafka_header_get_last(rec->headers, name, &v, &len) ==
		RD_KAFKA_RESP_ERR_NO_ERROR &&
	    v && len < size) {
		memcpy(buf, v, len);
		buf[len] = '\0';
	}
}

void (*tt_crash_step_hook)(int step, const char *s1, const char *tokens);
tbx_stats_t tt_crash_hop1_stats;

static void crash_case(const char *point, int single_file, const char *setting,
		       int batched, int batch_rows, int own_sets)
{
	int step_no = 0;

	enum { N = 8 };
	char *dir = tt_tmpdir();
	/* One file, or a file each.  In the pg tier a schema each, the
	 * token store's on the same connection string (joined) or on a
	 * second one (two databases). */
	int one = single_file && !tt_pg_tier();
	char *s1 = tt_store_new(dir, one ? "all" : "s1");
	char *s2 = one ? strdup(s1) : tt_store_new(dir, "s2");
	char *tokens =
	    one ? strdup(s1) : tt_tokens_new(dir, "tokens", single_file);
	tt_cluster_t *cluster = tt_cluster_new(1);
	char prog[512], env_crash[200], tokens_arg[600];
	const char *bin = getenv("TBX_TEST_BIN_DIR");
	tt_record_t *recs;
	size_t cnt;
	int status;

	tt_cluster_topic(cluster, "in", 2);
	tt_cluster_topic(cluster, "out", 2);
	tt_cluster_topic(cluster, "in.dlq", 1);
	tt_subscribe(tokens, "in", "g1");
	tt_subscribe(tokens, "out", "g2");
	tt_hop_table(s1, "hop1");
	tt_hop_table(s2, "hop2");
	if (batched)
		tt_publish_sets(cluster->bootstraps, tokens, "in", "Ping", N, 2,
				0, "m", NULL);
	else
		tt_publish(cluster->bootstraps, tokens, "in", "Ping", N, 2,
			   "m");
	/* Upstream re-sends every record once: same ids, same tokens. */
	cnt = tt_read_topic(cluster->bootstraps, "in", &recs);
	cr_assert_eq(cnt, N);
	tt_reproduce(cluster->bootstraps, "in", recs, cnt);
	tt_records_free(recs, cnt);

	/* Children run hop 1 in turn: each until its crash point kills it,
	 * "-" until idle, "!<rules>" armed with rules that must never fire
	 * (until idle).  Sweeper points need the sweeper running at once. */
	snprintf(prog, sizeof(prog), "%s/tbx_prog_worker", bin ? bin : ".");
	snprintf(tokens_arg, sizeof(tokens_arg), "%s", tokens);
	for (const char *p = point; *p;) {
		size_t len = strcspn(p, "|");
		char step[128];
		int clean;

		snprintf(step, sizeof(step), "%.*s", (int)len, p);
		p += len + (p[len] == '|');
		clean = strcmp(step, "-") == 0 || step[0] == '!';
		snprintf(env_crash, sizeof(env_crash), "TBX_CRASH_AT=%s",
			 step[0] == '!' ? step + 1
			 : clean	? ""
					: step);
		char *argv[] = {prog,
				cluster->bootstraps,
				s1,
				tokens_arg,
				"g1",
				strncmp(step, "sweep.", 6) == 0
				    ? "cleanup.interval.ms=1"
				    : "cleanup.interval.ms=0",
				(char *)setting,
				NULL,
				NULL,
				NULL};
		char *envv[] = {env_crash, "TBX_TEST_ASSIGN=1", NULL};

		/* outbox.layout=batch for hop 1's every run, and with it
		 * token sets for its own messages. */
		if (batch_rows)
			argv[setting ? 7 : 6] = "outbox.layout=batch";
		if (batch_rows && own_sets)
			argv[setting ? 8 : 7] = "tokens.format=set";
		status = tt_wait(tt_spawn(argv, envv), 90);
		cr_assert(status != -1, "%s: the worker never reached %s",
			  point, step);
		if (clean)
			cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
				  "%s: the worker did not finish cleanly "
				  "(status %d)",
				  point, status);
		else
			cr_assert(WIFSIGNALED(status) &&
				      WTERMSIG(status) == SIGKILL,
				  "%s: the worker was not killed at %s "
				  "(status %d)",
				  point, step, status);
		cr_assert(tt_integrity_ok(s1), "%s: service store damaged",
			  point);
		cr_assert(tt_integrity_ok(tokens), "%s: token store damaged",
			  point);
		if (tt_crash_step_hook)
			tt_crash_step_hook(step_no, s1, tokens);
		step_no++;
		/* The handler ran to commit at most once per message so
		 * far. */
		cr_assert_eq(tt_count(s1, "SELECT COUNT(*) - COUNT(DISTINCT "
					  "payload) FROM hop1"),
			     0, "%s: a handler committed twice", point);
		/* One file: a row's attempt and tokens commit in A, so no
		 * row with messages lacks an attempt and nothing is ever
		 * registered. */
		if (single_file) {
			cr_assert_eq(
			    tt_count(s1, "SELECT COUNT(*) FROM tbx_outbox "
					 "WHERE attempt IS NULL AND msgs IS "
					 "NOT NULL"),
			    0, "%s: a row with messages and no attempt", point);
			cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM "
						      "tbx_registrations"),
				     0, "%s: registrations in one file", point);
			if (own_sets)
				cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) "
							      "FROM tbx_breg"),
					     0,
					     "%s: set registrations in one "
					     "file",
					     point);
			if (batch_rows)
				cr_assert_eq(
				    tt_count(s1, "SELECT COUNT(*) FROM "
						 "tbx_obatch WHERE attempt IS "
						 "NULL AND msgs IS NOT NULL"),
				    0,
				    "%s: a batch row with messages and no "
				    "attempt",
				    point);
		}
	}

	/* Recovery: hop 1 restarts; hop 2 consumes what hop 1 sends. */
	tt_hop_t hop1 = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	tt_hop_t hop2 = {.table = "hop2"};
	tbx_worker_t *w[2];
	if (batch_rows) {
		char err[512];

		/* g1 on outbox.layout=batch from the start: one on record
		 * refuses to start beside its batch rows
		 * (consumer/layout.c). */
		w[0] = tbx_worker_new(
		    tt_conf(cluster->bootstraps, "g1", s1, tokens,
			    "outbox.layout", "batch", "tokens.format",
			    own_sets ? "set" : "message", NULL),
		    err, sizeof(err));
		cr_assert(w[0], "%s", err);
		cr_assert_eq(tbx_worker_register(w[0], "in", "Ping",
						 tt_hop_handle, &hop1),
			     TBX_OK);
		w[1] = tbx_worker_new(
		    tt_conf(cluster->bootstraps, "g2", s2, tokens, NULL), err,
		    sizeof(err));
		cr_assert(w[1], "%s", err);
		cr_assert_eq(tbx_worker_register(w[1], "out", "Pong",
						 tt_hop_handle, &hop2),
			     TBX_OK);
		/* Register-cleanup before anything resumes: a registration
		 * names its batch row, which must keep a recorded attempt's
		 * tokens alive. */
		cr_assert_eq(tbx_worker_cleanup(w[0], 0, NULL), TBX_OK);
	} else {
		tt_hop_pair(w, cluster->bootstraps, s1, tokens, s2, tokens,
			    &hop1, &hop2);
	}
	tbx__worker_assign_directly(w[0]);
	tbx__worker_assign_directly(w[1]);
	crash_expect_t expect = {s1, s2, N, batch_rows, w};
	/* A few idle polls past that: a batch still gathering (batch.max.ms)
	 * is run, and a duplicate it made would be counted below. */
	cr_assert(tt_drive(w, 2, crash_done, &expect, 4, 90),
		  "%s: recovery did not finish", point);
	/* Attempts that lost or crashed leave orphans: the sweeper's job. */
	cr_assert_eq(tbx_worker_cleanup(w[0], 0, NULL), TBX_OK);
	/* F commits no offset before its rows are finished: no row was
	 * left below a committed offset for the recovery pass. */
	tbx_stats_t st;
	tbx_worker_stats(w[0], &st);
	tt_crash_hop1_stats = st;
	cr_assert_eq(st.stuck_rows, 0,
		     "%s: %llu rows left below the committed offset", point,
		     (unsigned long long)st.stuck_rows);

	cr_assert_eq(tt_count(s1, "SELECT COUNT(*) FROM hop1"), N,
		     "%s: hop 1 effects", point);
	cr_assert_eq(tt_count(s2, "SELECT COUNT(*) FROM hop2"), N,
		     "%s: hop 2 effects (downstream exactly once)", point);
	if (getenv("TBX_TEST_KEEP"))
		fprintf(stderr, "kept %s\n", dir);
	cr_assert_eq(tt_count(s1, "SELECT COUNT(*) FROM tbx_outbox"), 0,
		     "%s: outbox rows left (TBX_TEST_KEEP=1 keeps %s)", point,
		     dir);
	if (batch_rows) {
		cr_assert_eq(tt_count(s1, "SELECT COUNT(*) FROM tbx_obatch"), 0,
			     "%s: batch rows left", point);
		cr_assert_eq(tt_count(s1, "SELECT COUNT(*) FROM tbx_cover_msg"),
			     0, "%s: tbx_cover_msg entries left", point);
	}
	if (!single_file)
		cr_assert_eq(tt_count(s2, "SELECT COUNT(*) FROM tbx_outbox"),
			     0);
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0,
		     "%s: tokens left", point);
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_registrations"),
		     0, "%s: registrations left", point);
	/* Every bit of hop 1's sets cleared, and the sets gone with it
	 * (own_sets: hop 2's bits of hop 1's messages too). */
	if (batched || own_sets)
		cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tset"),
			     0, "%s: token sets left", point);
	if (own_sets)
		cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_breg"),
			     0, "%s: set registrations left", point);
	/* Every outgoing message reached Kafka with a token; copies share
	 * their id and token.  own_sets: a set bit instead, in the
	 * partition its set was minted for, and copies share set and
	 * bit. */
	cnt = tt_read_topic(cluster->bootstraps, "out", &recs);
	cr_assert_geq(cnt, N);
	for (size_t i = 0; i < cnt; i++) {
		char tset[64], tbit[32], tset2[64], tbit2[32];
		int part = -1;
		unsigned bit = 0;

		rec_header(&recs[i], "tbx-tset", tset, sizeof(tset));
		rec_header(&recs[i], "tbx-tbit", tbit, sizeof(tbit));
		if (own_sets) {
			cr_assert(recs[i].id && !recs[i].token && recs[i].seq &&
				      tset[0],
				  "%s: a message without its set", point);
			cr_assert_eq(sscanf(tbit, "%d:%u", &part, &bit), 2,
				     "%s: tbx-tbit '%s'", point, tbit);
			cr_assert_eq(part, recs[i].partition,
				     "%s: tbx-tbit names partition %d, "
				     "delivered to %d",
				     point, part, (int)recs[i].partition);
		} else {
			cr_assert(recs[i].id && recs[i].token && recs[i].seq);
		}
		for (size_t j = 0; j < i; j++) {
			if (strcmp(recs[i].id, recs[j].id) != 0)
				continue;
			if (!own_sets) {
				cr_assert_str_eq(recs[i].token, recs[j].token,
						 "%s: a re-dispatch changed "
						 "the token",
						 point);
				continue;
			}
			rec_header(&recs[j], "tbx-tset", tset2, sizeof(tset2));
			rec_header(&recs[j], "tbx-tbit", tbit2, sizeof(tbit2));
			cr_assert_str_eq(tset, tset2,
					 "%s: a re-dispatch changed the set",
					 point);
			cr_assert_str_eq(tbit, tbit2,
					 "%s: a re-dispatch changed the bit",
					 point);
			cr_assert_str_eq(recs[i].seq, recs[j].seq);
		}
	}
	tt_records_free(recs, cnt);
	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	tt_cluster_destroy(cluster);
	if (!getenv("TBX_TEST_KEEP"))
		tt_rmrf(dir);
	free(dir);
	free(s1);
	free(s2);
	free(tokens);
}

void tt_crash_case_with(const char *point, int single_file, const char *setting)
{
	crash_case(point, single_file, setting, 0, 0, 0);
}

void tt_crash_case_batched(const char *point, int single_file,
			   const char *setting)
{
	crash_case(point, single_file, setting, 1, 0, 0);
}

void tt_crash_case_rows(const char *point, int single_file, const char *setting,
			int batched)
{
	crash_case(point, single_file, setting, batched, 1, 0);
}

void tt_crash_case_rows_sets(const char *point, int single_file,
			     const char *setting, int batched)
{
	crash_case(point, single_file, setting, batched, 1, 1);
}

void tt_plugin_open(tt_plugin_t *p, const char *file)
{
	const char *dir = getenv("TBX_EXAMPLES_DIR");
	char path[1024];
	int (*abi)(void);

	cr_assert(dir, "TBX_EXAMPLES_DIR is not set (run through ctest)");
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	p->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	cr_assert(p->handle, "dlopen: %s", dlerror());
	abi = (int (*)(void))dlsym(p->handle, "tbx_plugin_abi_version");
	p->init = (tbx_plugin_init_fn)dlsym(p->handle, "tbx_plugin_init");
	cr_assert(abi && p->init, "%s lacks an entry point", path);
	cr_assert_eq(abi(), TBX_PLUGIN_ABI_VERSION);
}

void tt_plugin_close(tt_plugin_t *p)
{
	dlclose(p->handle);
}

size_t tt_collect_i64(int fd, int64_t *out, size_t max, int procs)
{
	size_t cnt = 0;
	int64_t n;

	while (read(fd, &n, sizeof(n)) == sizeof(n)) {
		cr_assert_lt(cnt, max);
		out[cnt++] = n;
	}
	close(fd);
	for (int p = 0; p < procs; p++) {
		int status;

		cr_assert(wait(&status) > 0);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "a process failed");
	}
	return cnt;
}
