/*
 * The handler test kit (include/tokenbox/testkit.h): a worker, its stores
 * in a temporary directory and librdkafka's mock cluster in the process.
 *
 * A message is finished when the worker's counters show it processed,
 * resumed, dropped as a duplicate or dead-lettered, and no outbox row of
 * the group is left.  A crash runs the worker in a forked child (the
 * parent's worker is destroyed first, so that no SQLite connection or
 * Kafka client crosses the fork; the child reaches the mock cluster over
 * TCP like any client) and then a new worker here.
 */
#include "tokenbox/testkit.h"

#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/crash.h"
#include "base/str.h"
#include "consumer/tracing.h"
#include "consumer/worker.h"
#include "trace/span.h"

#define KIT_TIMEOUT_MS 120000

typedef struct reg {
	char *topic, *type; /* type NULL: catch-all */
	tbx_handler_fn fn;
	void *opaque;
} reg_t;

typedef struct plug {
	tbx_plugin_init_fn init;
	char *args;
} plug_t;

typedef struct rec {
	char *topic;
	int32_t partition;
	int64_t offset;
	char *key, *payload;
	size_t key_len, payload_len;
	rd_kafka_headers_t *headers;
} rec_t;

/* A message the worker produced, as tbx_testkit_sent() hands it out: one
 * allocation each, kept until the kit is destroyed. */
typedef struct sent_item {
	tbx_testkit_sent_t view;
	rec_t rec;
	size_t topic_pos; /* in kit->topics: the listing's order */
} sent_item_t;

/* How far the kit's reader has read a partition. */
typedef struct read_pos {
	char *topic;
	int32_t partition;
	int64_t next;
} read_pos_t;

struct tbx_testkit {
	char errstr[512];
	char *dir, *store, *tokens;
	char group[256];
	tbx_conf_t *conf;
	rd_kafka_t *mock_rk;
	rd_kafka_mock_cluster_t *mock;
	char bootstraps[256];
	char **topics; /* created on the cluster */
	size_t topic_cnt;
	char **handled; /* consumed by the handlers */
	size_t handled_cnt;
	reg_t *regs;
	size_t reg_cnt;
	plug_t *plugs;
	size_t plug_cnt;
	tbx_worker_t *worker;
	char *crash_at;
	rec_t last; /* the last input published */
	int have_last;
	/* One publisher and one reader (partitions assigned, no group) for
	 * the kit's life. */
	tbx_publisher_t *pub;
	rd_kafka_t *reader;
	read_pos_t *pos;
	size_t pos_cnt;
	sent_item_t **sent; /* in topic and offset order */
	size_t sent_cnt;
	/* The spans the worker recorded (one allocation each, kept until
	 * the kit is destroyed), those of the last message from span_from. */
	tbx_testkit_span_t **spans;
	size_t span_cnt, span_cap, span_from;
};

__attribute__((format(printf, 3, 4))) static int
kfail(tbx_testkit_t *kit, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(kit->errstr, sizeof(kit->errstr), fmt, ap);
	va_end(ap);
	return err;
}

static void quiet_log(const rd_kafka_t *rk, int level, const char *fac,
		      const char *buf)
{
}

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

static int conf_set(tbx_testkit_t *kit, const char *key, const char *value)
{
	char err[512];
	int rc = tbx_conf_set(kit->conf, key, value, err, sizeof(err));

	return rc ? kfail(kit, rc, "%s", err) : TBX_OK;
}

tbx_testkit_t *tbx_testkit_new(const char *group, char *errstr,
			       size_t errstr_size)
{
	static const char *const defaults[][2] = {
	    {"kafka.consumer.fetch.wait.max.ms", "10"},
	    {"kafka.topic.metadata.refresh.interval.ms", "1000"},
	    {"batch.max.ms", "10"},
	    {"retry.backoff.ms", "10"},
	    {"retry.backoff.max.ms", "100"},
	    {"cleanup.interval.ms", "0"},
	    {"log.level", "warning"},
	};
	const char *tmp = getenv("TMPDIR");
	char templ[4096], rderr[256];
	rd_kafka_conf_t *rc;
	tbx_testkit_t *kit;

	if (!group || !*group) {
		tbx__seterr(errstr, errstr_size, TBX_EINVAL, "no group");
		return NULL;
	}
	if (!(kit = calloc(1, sizeof(*kit)))) {
		tbx__seterr(errstr, errstr_size, TBX_ENOMEM, "out of memory");
		return NULL;
	}
	tbx__strlcpy(kit->group, group, sizeof(kit->group));
	snprintf(templ, sizeof(templ), "%s/tbx-testkit-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(templ)) {
		tbx__seterr(errstr, errstr_size, TBX_EIO, "mkdtemp %s: %s",
			    templ, strerror(errno));
		free(kit);
		return NULL;
	}
	kit->dir = strdup(templ);
	kit->store = join(templ, "service.db");
	kit->tokens = join(templ, "tokens.db");
	kit->conf = tbx_conf_new();
	rc = rd_kafka_conf_new();
	rd_kafka_conf_set_log_cb(rc, quiet_log);
	kit->mock_rk =
	    rd_kafka_new(RD_KAFKA_PRODUCER, rc, rderr, sizeof(rderr));
	if (!kit->mock_rk)
		rd_kafka_conf_destroy(rc);
	else
		kit->mock = rd_kafka_mock_cluster_new(kit->mock_rk, 1);
	if (!kit->dir || !kit->store || !kit->tokens || !kit->conf ||
	    !kit->mock) {
		tbx__seterr(errstr, errstr_size, TBX_EKAFKA,
			    "cannot set up the kit: %s",
			    kit->mock_rk ? "mock cluster" : rderr);
		tbx_testkit_destroy(kit);
		return NULL;
	}
	tbx__strlcpy(kit->bootstraps,
		     rd_kafka_mock_cluster_bootstraps(kit->mock),
		     sizeof(kit->bootstraps));
	if (conf_set(kit, "kafka.bootstrap.servers", kit->bootstraps) ||
	    conf_set(kit, "group.id", group) ||
	    conf_set(kit, "store.path", kit->store) ||
	    conf_set(kit, "tokens.path", kit->tokens) ||
	    /* the kit's own token store, made with its worker */
	    conf_set(kit, "tokens.create", "true")) {
		tbx__seterr(errstr, errstr_size, TBX_ECONF, "%s", kit->errstr);
		tbx_testkit_destroy(kit);
		return NULL;
	}
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
		conf_set(kit, defaults[i][0], defaults[i][1]);
	return kit;
}

static void rec_free(rec_t *r)
{
	free(r->topic);
	free(r->key);
	free(r->payload);
	if (r->headers)
		rd_kafka_headers_destroy(r->headers);
	memset(r, 0, sizeof(*r));
}

static void sent_free(tbx_testkit_t *kit)
{
	for (size_t i = 0; i < kit->sent_cnt; i++) {
		free((char *)kit->sent[i]->view.type);
		free((char *)kit->sent[i]->view.cause);
		free((char *)kit->sent[i]->view.dlq_error);
		free((char *)kit->sent[i]->view.traceparent);
		rec_free(&kit->sent[i]->rec);
		free(kit->sent[i]);
	}
	free(kit->sent);
	kit->sent = NULL;
	kit->sent_cnt = 0;
	for (size_t i = 0; i < kit->pos_cnt; i++)
		free(kit->pos[i].topic);
	free(kit->pos);
	kit->pos = NULL;
	kit->pos_cnt = 0;
}

static char *bufdup(const void *p, size_t len);

static void attrs_free(const tbx_testkit_attr_t *a, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free((char *)a[i].key);
		free((char *)a[i].value);
	}
	free((void *)a);
}

static void spans_free(tbx_testkit_t *kit)
{
	for (size_t i = 0; i < kit->span_cnt; i++) {
		tbx_testkit_span_t *v = kit->spans[i];
		free((char *)v->name);
		free((char *)v->status_message);
		attrs_free(v->attrs, v->attr_count);
		for (size_t e = 0; e < v->event_count; e++) {
			free((char *)v->events[e].name);
			attrs_free(v->events[e].attrs, v->events[e].attr_count);
		}
		free((void *)v->events);
		free((void *)v->links);
		free(v);
	}
	free(kit->spans);
	kit->spans = NULL;
	kit->span_cnt = kit->span_cap = kit->span_from = 0;
}

/* A copy of @p a's attributes, values as text; NULL (and 0) when none or
 * out of memory. */
static tbx_testkit_attr_t *attrs_copy(const tbx__attrs_t *a, size_t *n)
{
	tbx_testkit_attr_t *v;
	char num[32];

	*n = 0;
	if (!a->n || !(v = calloc(a->n, sizeof(*v))))
		return NULL;
	for (size_t i = 0; i < a->n; i++) {
		const tbx__attr_t *at = &a->v[i];
		v[i].key = strdup(at->key);
		switch (at->type) {
		case TBX_ATTR_STRING:
			v[i].value = bufdup(at->v.s, at->len);
			break;
		case TBX_ATTR_INT:
			snprintf(num, sizeof(num), "%lld", (long long)at->v.i);
			v[i].value = strdup(num);
			break;
		default:
			v[i].value = strdup(at->v.b ? "true" : "false");
			break;
		}
	}
	*n = a->n;
	return v;
}

/* The worker's span sink (tbx__worker_trace_to()): on the kit's thread,
 * which runs the worker.  A span that cannot be kept (out of memory) is
 * left out. */
static void on_span(tbx__span_t *span, void *opaque)
{
	tbx_testkit_t *kit = opaque;
	tbx_testkit_span_t *v = NULL;
	tbx_testkit_event_t *ev = NULL;
	tbx_testkit_link_t *ln = NULL;

	if (kit->span_cnt == kit->span_cap) {
		size_t cap = kit->span_cap ? 2 * kit->span_cap : 16;
		tbx_testkit_span_t **grown =
		    realloc(kit->spans, cap * sizeof(*grown));
		if (!grown)
			goto out;
		kit->spans = grown;
		kit->span_cap = cap;
	}
	if (!(v = calloc(1, sizeof(*v))) ||
	    (span->n_events && !(ev = calloc(span->n_events, sizeof(*ev)))) ||
	    (span->n_links && !(ln = calloc(span->n_links, sizeof(*ln))))) {
		free(v);
		free(ev);
		goto out;
	}
	v->name = strdup(span->name);
	v->kind = (tbx_testkit_span_kind_t)span->kind;
	tbx__hex(span->trace_id, TBX_TRACE_ID_SIZE, v->trace_id);
	tbx__hex(span->span_id, TBX_SPAN_ID_SIZE, v->span_id);
	if (!tbx__id_is_zero(span->parent_id, TBX_SPAN_ID_SIZE))
		tbx__hex(span->parent_id, TBX_SPAN_ID_SIZE, v->parent_id);
	v->status = (tbx_testkit_span_status_t)span->status;
	if (span->status_msg)
		v->status_message = strdup(span->status_msg);
	v->attrs = attrs_copy(&span->attrs, &v->attr_count);
	for (size_t i = 0; i < span->n_events; i++) {
		ev[i].name = strdup(span->events[i]->name);
		ev[i].attrs =
		    attrs_copy(&span->events[i]->attrs, &ev[i].attr_count);
	}
	v->events = ev;
	v->event_count = span->n_events;
	for (size_t i = 0; i < span->n_links; i++) {
		tbx__hex(span->links[i]->trace_id, TBX_TRACE_ID_SIZE,
			 ln[i].trace_id);
		tbx__hex(span->links[i]->span_id, TBX_SPAN_ID_SIZE,
			 ln[i].span_id);
	}
	v->links = ln;
	v->link_count = span->n_links;
	kit->spans[kit->span_cnt++] = v;
out:
	tbx__span_free(span);
}

static void clients_destroy(tbx_testkit_t *kit)
{
	tbx_publisher_destroy(kit->pub);
	kit->pub = NULL;
	if (kit->reader)
		rd_kafka_destroy(kit->reader);
	kit->reader = NULL;
}

static void rmrf(const char *dir)
{
	static const char *const names[] = {"service.db",     "service.db-wal",
					    "service.db-shm", "tokens.db",
					    "tokens.db-wal",  "tokens.db-shm"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char *p = join(dir, names[i]);
		if (p)
			unlink(p);
		free(p);
	}
	rmdir(dir);
}

void tbx_testkit_destroy(tbx_testkit_t *kit)
{
	if (!kit)
		return;
	tbx_worker_destroy(kit->worker);
	clients_destroy(kit);
	sent_free(kit);
	spans_free(kit);
	rec_free(&kit->last);
	if (kit->mock)
		rd_kafka_mock_cluster_destroy(kit->mock);
	if (kit->mock_rk)
		rd_kafka_destroy(kit->mock_rk);
	for (size_t i = 0; i < kit->topic_cnt; i++)
		free(kit->topics[i]);
	free(kit->topics);
	for (size_t i = 0; i < kit->handled_cnt; i++)
		free(kit->handled[i]);
	free(kit->handled);
	for (size_t i = 0; i < kit->reg_cnt; i++) {
		free(kit->regs[i].topic);
		free(kit->regs[i].type);
	}
	free(kit->regs);
	for (size_t i = 0; i < kit->plug_cnt; i++)
		free(kit->plugs[i].args);
	free(kit->plugs);
	tbx_conf_destroy(kit->conf);
	free(kit->crash_at);
	if (kit->dir)
		rmrf(kit->dir);
	free(kit->dir);
	free(kit->store);
	free(kit->tokens);
	free(kit);
}

const char *tbx_testkit_errstr(const tbx_testkit_t *kit)
{
	return kit ? kit->errstr : "";
}

const char *tbx_testkit_store_path(const tbx_testkit_t *kit)
{
	return kit->store;
}

int tbx_testkit_set(tbx_testkit_t *kit, const char *key, const char *value)
{
	if (kit->worker)
		return kfail(kit, TBX_ESTATE,
			     "tbx_testkit_set: the worker runs already");
	return conf_set(kit, key, value);
}

static int has_topic(const tbx_testkit_t *kit, const char *topic)
{
	for (size_t i = 0; i < kit->topic_cnt; i++)
		if (strcmp(kit->topics[i], topic) == 0)
			return 1;
	return 0;
}

int tbx_testkit_topic(tbx_testkit_t *kit, const char *topic, int partitions)
{
	char **grown;
	rd_kafka_resp_err_t err;

	if (!topic || !*topic || partitions < 1)
		return kfail(kit, TBX_EINVAL, "tbx_testkit_topic: bad topic");
	if (has_topic(kit, topic))
		return TBX_OK;
	err = rd_kafka_mock_topic_create(kit->mock, topic, partitions, 1);
	if (err)
		return kfail(kit, TBX_EKAFKA, "topic %s: %s", topic,
			     rd_kafka_err2str(err));
	grown = realloc(kit->topics, (kit->topic_cnt + 1) * sizeof(*grown));
	if (!grown || !(grown[kit->topic_cnt] = strdup(topic))) {
		if (grown)
			kit->topics = grown;
		return kfail(kit, TBX_ENOMEM, "out of memory");
	}
	kit->topics = grown;
	kit->topic_cnt++;
	return TBX_OK;
}

static int is_handled(const tbx_testkit_t *kit, const char *topic)
{
	for (size_t i = 0; i < kit->handled_cnt; i++)
		if (strcmp(kit->handled[i], topic) == 0)
			return 1;
	return 0;
}

/* A handled topic and its dead-letter topic exist, and the topic is
 * known as handled (what is sent to it is not listed as sent). */
static int handled_topic(tbx_testkit_t *kit, const char *topic)
{
	char dlq[600], **grown;
	int err;

	snprintf(dlq, sizeof(dlq), "%s%s", topic,
		 tbx__conf_cfg(kit->conf)->dlq_suffix);
	if ((err = tbx_testkit_topic(kit, topic, 1)) ||
	    (err = tbx_testkit_topic(kit, dlq, 1)))
		return err;
	if (is_handled(kit, topic))
		return TBX_OK;
	grown = realloc(kit->handled, (kit->handled_cnt + 1) * sizeof(*grown));
	if (!grown || !(grown[kit->handled_cnt] = strdup(topic))) {
		if (grown)
			kit->handled = grown;
		return kfail(kit, TBX_ENOMEM, "out of memory");
	}
	kit->handled = grown;
	kit->handled_cnt++;
	return TBX_OK;
}

int tbx_testkit_register(tbx_testkit_t *kit, const char *topic,
			 const char *type, tbx_handler_fn fn, void *opaque)
{
	reg_t *grown, *r;
	int err;

	if (!topic || !fn)
		return kfail(kit, TBX_EINVAL,
			     "tbx_testkit_register: no "
			     "topic or no function");
	if (kit->worker)
		return kfail(kit, TBX_ESTATE,
			     "tbx_testkit_register: the worker runs already");
	if ((err = handled_topic(kit, topic)))
		return err;
	if (!(grown = realloc(kit->regs, (kit->reg_cnt + 1) * sizeof(*grown))))
		return kfail(kit, TBX_ENOMEM, "out of memory");
	kit->regs = grown;
	r = &kit->regs[kit->reg_cnt];
	r->topic = strdup(topic);
	r->type = type ? strdup(type) : NULL;
	r->fn = fn;
	r->opaque = opaque;
	if (!r->topic || (type && !r->type)) {
		free(r->topic);
		free(r->type);
		return kfail(kit, TBX_ENOMEM, "out of memory");
	}
	kit->reg_cnt++;
	return TBX_OK;
}

int tbx_testkit_plugin(tbx_testkit_t *kit, tbx_plugin_init_fn init,
		       const char *args)
{
	plug_t *grown;
	tbx_worker_t *probe;
	char err[512];
	int rc;

	if (kit->worker)
		return kfail(kit, TBX_ESTATE,
			     "tbx_testkit_plugin: the worker runs already");
	if (!(grown =
		  realloc(kit->plugs, (kit->plug_cnt + 1) * sizeof(*grown))))
		return kfail(kit, TBX_ENOMEM, "out of memory");
	kit->plugs = grown;
	grown[kit->plug_cnt].init = init;
	if (!(grown[kit->plug_cnt].args = strdup(args ? args : "")))
		return kfail(kit, TBX_ENOMEM, "out of memory");
	kit->plug_cnt++;
	/* Run it once on a worker that opens nothing, to learn its topics
	 * (the kit creates them) and to report a refusal now. */
	tbx_conf_t *conf = tbx_conf_dup(kit->conf);
	if (!conf || !(probe = tbx__worker_new_check(conf, err, sizeof(err)))) {
		tbx_conf_destroy(conf);
		return kfail(kit, TBX_ESTORE, "%s", err);
	}
	rc = init(probe, args ? args : "");
	for (size_t i = 0; !rc && i < tbx__worker_topic_count(probe); i++)
		rc = handled_topic(kit, tbx__worker_topic(probe, i));
	tbx_worker_destroy(probe);
	if (rc && !kit->errstr[0])
		kfail(kit, rc, "the plugin's init failed: %s",
		      tbx_strerror(rc));
	return rc;
}

/* A worker with the kit's handlers, subscribed in the token store and
 * assigned its partitions (its first poll). */
static tbx_worker_t *worker_new(tbx_testkit_t *kit)
{
	tbx_conf_t *conf = tbx_conf_dup(kit->conf);
	tbx_worker_t *w;
	char err[512];
	int rc = 0;

	if (!conf) {
		kfail(kit, TBX_ENOMEM, "out of memory");
		return NULL;
	}
	if (!(w = tbx_worker_new(conf, err, sizeof(err)))) {
		tbx_conf_destroy(conf);
		kfail(kit, TBX_ESTORE, "%s", err);
		return NULL;
	}
	for (size_t i = 0; !rc && i < kit->reg_cnt; i++)
		rc = tbx_worker_register(w, kit->regs[i].topic,
					 kit->regs[i].type, kit->regs[i].fn,
					 kit->regs[i].opaque);
	for (size_t i = 0; !rc && i < kit->plug_cnt; i++)
		rc = kit->plugs[i].init(w, kit->plugs[i].args);
	/* One worker of the group at a time: its partitions without a
	 * group's join (3 s on the mock cluster, and a killed worker's
	 * session timeout before its successor is answered). */
	tbx__worker_assign_directly(w);
	/* Every span to memory, for tbx_testkit_span(). */
	if (!rc)
		rc = tbx__worker_trace_to(w, on_span, kit);
	if (!rc)
		rc = tbx_worker_poll(w, 0, NULL);
	if (rc) {
		kfail(kit, rc, "the worker did not start: %s",
		      tbx_worker_errstr(w)[0] ? tbx_worker_errstr(w)
					      : tbx_strerror(rc));
		tbx_worker_destroy(w);
		return NULL;
	}
	return w;
}

/* 1 when the token store holds no token of the kit's group: every
 * message handed to it was finished (the kit sends one at a time). */
static int no_tokens_left(const tbx_testkit_t *kit)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int none = 0;

	if (sqlite3_open_v2(kit->tokens, &db, SQLITE_OPEN_READONLY, NULL) ==
		SQLITE_OK &&
	    sqlite3_busy_timeout(db, 5000) == SQLITE_OK &&
	    sqlite3_prepare_v2(db,
			       "SELECT COUNT(*) FROM tbx_tokens WHERE grp = ?",
			       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_bind_text(st, 1, kit->group, -1, SQLITE_STATIC) ==
		SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		none = sqlite3_column_int64(st, 0) == 0;
	sqlite3_finalize(st);
	sqlite3_close(db);
	return none;
}

static uint64_t finished(const tbx_stats_t *s)
{
	return s->processed + s->resumed + s->duplicates_dropped +
	       s->dead_lettered;
}

/* Polls @p w until a message more than in @p base is finished and no
 * outbox row of the group is left.  After a crash (@p recovering) the
 * message may have been finished before it: then no token of the group
 * and no outbox row are left, and nothing is redelivered. */
static int run_until_done(tbx_testkit_t *kit, tbx_worker_t *w,
			  const tbx_stats_t *base, int recovering,
			  tbx_testkit_outcome_t *outcome)
{
	int64_t deadline = tbx__mono_ms() + KIT_TIMEOUT_MS;
	tbx_stats_t st;

	while (tbx__mono_ms() < deadline) {
		int64_t pending = -1;
		int err = tbx_worker_poll(w, 100, NULL);

		if (err)
			return kfail(kit, err, "the worker failed: %s",
				     tbx_worker_errstr(w));
		tbx_worker_stats(w, &st);
		if (tbx_outbox_count(w->store, w->group, &pending) ||
		    pending != 0)
			continue;
		if (finished(&st) <= finished(base) &&
		    !(recovering && no_tokens_left(kit)))
			continue;
		if (outcome)
			*outcome = st.dead_lettered > base->dead_lettered
				       ? TBX_TESTKIT_DEAD_LETTERED
				   : st.processed + st.resumed >
					   base->processed + base->resumed
				       ? TBX_TESTKIT_PROCESSED
				       : TBX_TESTKIT_DUPLICATE;
		return TBX_OK;
	}
	return kfail(kit, TBX_ETIMEOUT,
		     "the message was not finished within %d s",
		     KIT_TIMEOUT_MS / 1000);
}

static rd_kafka_t *client(tbx_testkit_t *kit, rd_kafka_type_t type)
{
	rd_kafka_conf_t *c = rd_kafka_conf_new();
	char err[256];
	rd_kafka_t *rk;

	rd_kafka_conf_set(c, "bootstrap.servers", kit->bootstraps, NULL, 0);
	rd_kafka_conf_set(c, "enable.partition.eof", "true", NULL, 0);
	rd_kafka_conf_set(c, "group.id", "tbx-testkit-reader", NULL, 0);
	/* At the end of a partition: answered at once, not in 500 ms. */
	rd_kafka_conf_set(c, "fetch.wait.max.ms", "10", NULL, 0);
	rd_kafka_conf_set(c, "linger.ms", "0", NULL, 0);
	rd_kafka_conf_set_log_cb(c, quiet_log);
	if (!(rk = rd_kafka_new(type, c, err, sizeof(err)))) {
		rd_kafka_conf_destroy(c);
		kfail(kit, TBX_EKAFKA, "Kafka client: %s", err);
	}
	return rk;
}

static char *hdr(rd_kafka_headers_t *h, const char *name)
{
	const void *v;
	size_t len;
	char *s;

	if (!h || rd_kafka_header_get_last(h, name, &v, &len))
		return NULL;
	if ((s = malloc(len + 1))) {
		memcpy(s, v, len);
		s[len] = '\0';
	}
	return s;
}

static char *bufdup(const void *p, size_t len)
{
	char *s;

	if (!p)
		return NULL;
	if ((s = malloc(len + 1))) {
		memcpy(s, p, len);
		s[len] = '\0';
	}
	return s;
}

/* The reader's position in @p topic's @p partition (made at 0). */
static read_pos_t *read_pos(tbx_testkit_t *kit, const char *topic,
			    int32_t partition)
{
	read_pos_t *grown;

	for (size_t i = 0; i < kit->pos_cnt; i++)
		if (kit->pos[i].partition == partition &&
		    strcmp(kit->pos[i].topic, topic) == 0)
			return &kit->pos[i];
	if (!(grown = realloc(kit->pos, (kit->pos_cnt + 1) * sizeof(*grown))))
		return NULL;
	kit->pos = grown;
	grown[kit->pos_cnt].topic = strdup(topic);
	grown[kit->pos_cnt].partition = partition;
	grown[kit->pos_cnt].next = 0;
	if (!grown[kit->pos_cnt].topic)
		return NULL;
	return &grown[kit->pos_cnt++];
}

/*
 * Reads the records of @p topic into *recs (grown; *cnt updated): those
 * after what the reader read before, or with @p last_only the last one
 * of each partition.  The reader is one consumer for the kit's life,
 * assigned the partitions it reads (no group), fetching without waiting.
 */
static int read_topic(tbx_testkit_t *kit, const char *topic, int last_only,
		      rec_t **recs, size_t *cnt)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_topic_partition_list_t *parts;
	rd_kafka_topic_t *rkt;
	int64_t deadline = tbx__mono_ms() + 30000;
	int64_t *until = NULL; /* per element of parts: its high watermark */
	int left = 0, err = TBX_OK;

	if (!kit->reader && !(kit->reader = client(kit, RD_KAFKA_CONSUMER)))
		return TBX_EKAFKA;
	rkt = rd_kafka_topic_new(kit->reader, topic, NULL);
	parts = rd_kafka_topic_partition_list_new(4);
	if (rd_kafka_metadata(kit->reader, 0, rkt, &md, 10000) ||
	    md->topic_cnt != 1) {
		err = kfail(kit, TBX_EKAFKA, "no metadata for %s", topic);
		goto out;
	}
	if (!(until = calloc((size_t)md->topics[0].partition_cnt + 1,
			     sizeof(*until)))) {
		err = kfail(kit, TBX_ENOMEM, "out of memory");
		goto out;
	}
	for (int j = 0; j < md->topics[0].partition_cnt; j++) {
		int32_t p = md->topics[0].partitions[j].id;
		read_pos_t *pos = read_pos(kit, topic, p);
		int64_t lo, hi;

		if (!pos) {
			err = kfail(kit, TBX_ENOMEM, "out of memory");
			goto out;
		}
		if (rd_kafka_query_watermark_offsets(kit->reader, topic, p, &lo,
						     &hi, 10000)) {
			err =
			    kfail(kit, TBX_EKAFKA, "no offsets for %s", topic);
			goto out;
		}
		if (last_only && hi > lo)
			pos->next = hi - 1;
		if (pos->next < lo)
			pos->next = lo;
		if (hi > pos->next) {
			until[parts->cnt] = hi;
			rd_kafka_topic_partition_list_add(parts, topic, p)
			    ->offset = pos->next;
		}
	}
	if ((left = parts->cnt))
		rd_kafka_assign(kit->reader, parts);
	while (left > 0 && tbx__mono_ms() < deadline) {
		rd_kafka_message_t *m =
		    rd_kafka_consumer_poll(kit->reader, 100);
		rd_kafka_headers_t *h = NULL;
		read_pos_t *pos;
		rec_t *grown, *r;
		int k;

		if (!m)
			continue;
		for (k = 0; k < parts->cnt; k++)
			if (parts->elems[k].partition == m->partition)
				break;
		if (m->err || k == parts->cnt || m->offset >= until[k] ||
		    strcmp(rd_kafka_topic_name(m->rkt), topic) != 0 ||
		    !(pos = read_pos(kit, topic, m->partition)) ||
		    m->offset < pos->next) {
			rd_kafka_message_destroy(m);
			continue;
		}
		if (!(grown = realloc(*recs, (*cnt + 1) * sizeof(*grown)))) {
			rd_kafka_message_destroy(m);
			err = kfail(kit, TBX_ENOMEM, "out of memory");
			break;
		}
		*recs = grown;
		r = &grown[(*cnt)++];
		memset(r, 0, sizeof(*r));
		r->topic = strdup(topic);
		r->partition = m->partition;
		r->offset = m->offset;
		r->key = bufdup(m->key, m->key_len);
		r->key_len = m->key_len;
		r->payload = bufdup(m->payload, m->len);
		r->payload_len = m->len;
		if (!rd_kafka_message_headers(m, &h))
			r->headers = rd_kafka_headers_copy(h);
		pos->next = m->offset + 1;
		if (pos->next == until[k])
			left--;
		rd_kafka_message_destroy(m);
	}
	if (!err && left > 0)
		err = kfail(kit, TBX_ETIMEOUT, "reading %s timed out", topic);
out:
	if (md)
		rd_kafka_metadata_destroy(md);
	if (parts->cnt)
		rd_kafka_assign(kit->reader, NULL);
	free(until);
	rd_kafka_topic_partition_list_destroy(parts);
	rd_kafka_topic_destroy(rkt);
	return err;
}

/* The kit's publisher, made once.  Its idempotent producer takes about a
 * second to get its producer id from the mock cluster, as the worker's
 * does: made beside the worker, the two waits overlap. */
static int publisher_new(tbx_testkit_t *kit)
{
	tbx_conf_t *conf;
	char err[512];

	if (kit->pub)
		return TBX_OK;
	if (!(conf = tbx_conf_new()))
		return kfail(kit, TBX_ENOMEM, "out of memory");
	tbx_conf_set(conf, "kafka.bootstrap.servers", kit->bootstraps, NULL, 0);
	tbx_conf_set(conf, "tokens.path", kit->tokens, NULL, 0);
	tbx_conf_set(conf, "log.level", "warning", NULL, 0);
	/* Delivered at once: a test publishes one message at a time. */
	tbx_conf_set(conf, "kafka.producer.linger.ms", "0", NULL, 0);
	if (!(kit->pub = tbx_publisher_new(conf, err, sizeof(err)))) {
		tbx_conf_destroy(conf);
		return kfail(kit, TBX_EKAFKA, "publisher: %s", err);
	}
	return TBX_OK;
}

/* Publishes @p msg with a token and keeps a copy of the record. */
static int publish(tbx_testkit_t *kit, const tbx_out_t *msg)
{
	rec_t *recs = NULL;
	size_t cnt = 0, failed = 0;
	int rc;

	if ((rc = publisher_new(kit)))
		return rc;
	if ((rc = tbx_publish(kit->pub, msg)) ||
	    (rc = tbx_publisher_flush(kit->pub, &failed))) {
		kfail(kit, rc, "publishing to %s: %s", msg->topic,
		      tbx_publisher_errstr(kit->pub));
		/* A failed batch stays queued: begin the next anew. */
		tbx_publisher_destroy(kit->pub);
		kit->pub = NULL;
		return rc;
	}
	/* The kit's topics have one partition: the last record is ours. */
	if ((rc = read_topic(kit, msg->topic, 1, &recs, &cnt)))
		return rc;
	rec_free(&kit->last);
	if (cnt) {
		kit->last = recs[cnt - 1];
		kit->have_last = 1;
		cnt--;
	}
	for (size_t i = 0; i < cnt; i++)
		rec_free(&recs[i]);
	free(recs);
	return TBX_OK;
}

int tbx_testkit_crash_at(tbx_testkit_t *kit, const char *point)
{
	char *copy;

	if (!point || !*point || strpbrk(point, ",:@*"))
		return kfail(kit, TBX_EINVAL,
			     "tbx_testkit_crash_at: one point name");
	if (!(copy = strdup(point)))
		return kfail(kit, TBX_ENOMEM, "out of memory");
	free(kit->crash_at);
	kit->crash_at = copy;
	return TBX_OK;
}

/* The child of a crash: a worker of its own, killed at the point. */
__attribute__((noreturn)) static void crash_child(tbx_testkit_t *kit)
{
	tbx_stats_t base = {0};
	tbx_worker_t *w;

	setenv("TBX_CRASH_AT", kit->crash_at, 1);
	tbx__crashpoints_rearm();
	if (!(w = worker_new(kit)))
		_exit(4);
	run_until_done(kit, w, &base, 0, NULL);
	_exit(3); /* finished without reaching the point */
}

static int crash_and_recover(tbx_testkit_t *kit, const tbx_out_t *msg,
			     tbx_testkit_outcome_t *outcome)
{
	int64_t deadline = tbx__mono_ms() + KIT_TIMEOUT_MS;
	char *point = kit->crash_at;
	tbx_stats_t base = {0};
	int status = 0, rc;
	pid_t pid, got = 0;

	kit->crash_at = NULL;
	/* Subscribed first (senders mint tokens for subscribed groups),
	 * then no SQLite connection crosses the fork: the worker's and the
	 * publisher's are closed (SQLite's per-process lock bookkeeping
	 * would mislead the child's own connections).  The reader and the
	 * mock cluster, Kafka clients only, do cross it, and the child never
	 * uses them: it ends with _exit() or SIGKILL. */
	tbx_worker_destroy(kit->worker);
	kit->worker = NULL;
	if ((rc = publish(kit, msg))) {
		free(point);
		return rc;
	}
	tbx_publisher_destroy(kit->pub);
	kit->pub = NULL;
	kit->crash_at = point;
	fflush(NULL);
	if ((pid = fork()) < 0) {
		kit->crash_at = NULL;
		free(point);
		return kfail(kit, TBX_EIO, "fork: %s", strerror(errno));
	}
	if (pid == 0)
		crash_child(kit);
	kit->crash_at = NULL;
	while (tbx__mono_ms() < deadline &&
	       (got = waitpid(pid, &status, WNOHANG)) == 0)
		usleep(20000);
	if (got != pid) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		rc = kfail(kit, TBX_ETIMEOUT,
			   "the worker did not reach crash point %s within "
			   "%d s",
			   point, KIT_TIMEOUT_MS / 1000);
	} else if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
		rc = kfail(kit, TBX_ENOENT,
			   "the worker never reached crash point %s (it "
			   "exited with status %d)",
			   point, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	}
	free(point);
	if (rc)
		return rc;
	/* The restart: recovery finishes what the crash left.  The next
	 * message's publisher gets its producer id meanwhile. */
	if (!(kit->worker = worker_new(kit)))
		return TBX_ESTATE;
	if ((rc = publisher_new(kit)))
		return rc;
	return run_until_done(kit, kit->worker, &base, 1, outcome);
}

int tbx_testkit_handle(tbx_testkit_t *kit, const tbx_out_t *msg,
		       tbx_testkit_outcome_t *outcome)
{
	tbx_stats_t base;
	int rc;

	kit->errstr[0] = '\0';
	if (!msg || !msg->topic)
		return kfail(kit, TBX_EINVAL, "tbx_testkit_handle: no topic");
	kit->span_from = kit->span_cnt;
	if (!has_topic(kit, msg->topic) &&
	    (rc = tbx_testkit_topic(kit, msg->topic, 1)))
		return rc;
	if (!kit->worker && !(kit->worker = worker_new(kit)))
		return TBX_ESTATE;
	if ((rc = publisher_new(kit)))
		return rc;
	if (kit->crash_at)
		return crash_and_recover(kit, msg, outcome);
	tbx_worker_stats(kit->worker, &base);
	if ((rc = publish(kit, msg)))
		return rc;
	return run_until_done(kit, kit->worker, &base, 0, outcome);
}

int tbx_testkit_redeliver(tbx_testkit_t *kit, tbx_testkit_outcome_t *outcome)
{
	rd_kafka_t *rk;
	tbx_stats_t base;
	rd_kafka_resp_err_t err;

	kit->errstr[0] = '\0';
	if (!kit->have_last || !kit->worker)
		return kfail(kit, TBX_ESTATE,
			     "tbx_testkit_redeliver: nothing handled yet");
	kit->span_from = kit->span_cnt;
	if (!(rk = client(kit, RD_KAFKA_PRODUCER)))
		return TBX_EKAFKA;
	err = rd_kafka_producev(
	    rk, RD_KAFKA_V_TOPIC(kit->last.topic),
	    RD_KAFKA_V_PARTITION(kit->last.partition),
	    RD_KAFKA_V_KEY(kit->last.key, kit->last.key_len),
	    RD_KAFKA_V_VALUE(kit->last.payload, kit->last.payload_len),
	    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
	    RD_KAFKA_V_HEADERS(kit->last.headers
				   ? rd_kafka_headers_copy(kit->last.headers)
				   : NULL),
	    RD_KAFKA_V_END);
	if (!err && rd_kafka_flush(rk, 30000))
		err = RD_KAFKA_RESP_ERR__TIMED_OUT;
	rd_kafka_destroy(rk);
	if (err)
		return kfail(kit, TBX_EKAFKA, "redelivery: %s",
			     rd_kafka_err2str(err));
	tbx_worker_stats(kit->worker, &base);
	return run_until_done(kit, kit->worker, &base, 0, outcome);
}

static int sent_order(const void *a, const void *b)
{
	const sent_item_t *x = *(sent_item_t *const *)a;
	const sent_item_t *y = *(sent_item_t *const *)b;

	if (x->topic_pos != y->topic_pos)
		return x->topic_pos < y->topic_pos ? -1 : 1;
	if (x->rec.partition != y->rec.partition)
		return x->rec.partition < y->rec.partition ? -1 : 1;
	return x->rec.offset < y->rec.offset   ? -1
	       : x->rec.offset > y->rec.offset ? 1
					       : 0;
}

/* Adds what was produced since the last call to every topic the handlers
 * do not consume.  What was listed before stays where it is in memory. */
static int load_sent(tbx_testkit_t *kit)
{
	int rc = TBX_OK;

	for (size_t t = 0; !rc && t < kit->topic_cnt; t++) {
		rec_t *recs = NULL;
		size_t cnt = 0, done = 0;
		sent_item_t **grown;

		if (is_handled(kit, kit->topics[t]))
			continue;
		rc = read_topic(kit, kit->topics[t], 0, &recs, &cnt);
		if (cnt && (grown = realloc(kit->sent, (kit->sent_cnt + cnt) *
							   sizeof(*grown))))
			kit->sent = grown;
		else if (cnt)
			rc = kfail(kit, TBX_ENOMEM, "out of memory");
		for (; !rc && done < cnt; done++) {
			sent_item_t *it = calloc(1, sizeof(*it));
			tbx_testkit_sent_t *s;

			if (!it) {
				rc = kfail(kit, TBX_ENOMEM, "out of memory");
				break;
			}
			it->rec = recs[done];
			it->topic_pos = t;
			s = &it->view;
			s->topic = it->rec.topic;
			s->partition = it->rec.partition;
			s->key = it->rec.key;
			s->key_len = it->rec.key_len;
			s->payload = it->rec.payload;
			s->payload_len = it->rec.payload_len;
			s->type = hdr(it->rec.headers, "tbx-type");
			s->cause = hdr(it->rec.headers, "tbx-cause");
			s->dlq_error = hdr(it->rec.headers, "tbx-dlq-error");
			s->traceparent = hdr(it->rec.headers, "traceparent");
			kit->sent[kit->sent_cnt++] = it;
		}
		for (; done < cnt; done++)
			rec_free(&recs[done]);
		free(recs);
	}
	qsort(kit->sent, kit->sent_cnt, sizeof(*kit->sent), sent_order);
	return rc;
}

size_t tbx_testkit_sent_count(tbx_testkit_t *kit)
{
	return load_sent(kit) ? 0 : kit->sent_cnt;
}

const tbx_testkit_sent_t *tbx_testkit_sent(tbx_testkit_t *kit, size_t i)
{
	if (i >= kit->sent_cnt && load_sent(kit))
		return NULL;
	return i < kit->sent_cnt ? &kit->sent[i]->view : NULL;
}

size_t tbx_testkit_span_count(const tbx_testkit_t *kit)
{
	return kit->span_cnt - kit->span_from;
}

const tbx_testkit_span_t *tbx_testkit_span(const tbx_testkit_t *kit, size_t i)
{
	return i < tbx_testkit_span_count(kit) ? kit->spans[kit->span_from + i]
					       : NULL;
}

const tbx_testkit_span_t *tbx_testkit_span_named(const tbx_testkit_t *kit,
						 const char *name)
{
	for (size_t i = kit->span_from; name && i < kit->span_cnt; i++)
		if (kit->spans[i]->name &&
		    strcmp(kit->spans[i]->name, name) == 0)
			return kit->spans[i];
	return NULL;
}

static const char *attr_of(const tbx_testkit_attr_t *a, size_t n,
			   const char *key)
{
	for (size_t i = 0; key && i < n; i++)
		if (a[i].key && strcmp(a[i].key, key) == 0)
			return a[i].value;
	return NULL;
}

const char *tbx_testkit_span_attr(const tbx_testkit_span_t *span,
				  const char *key)
{
	return span ? attr_of(span->attrs, span->attr_count, key) : NULL;
}

const tbx_testkit_event_t *
tbx_testkit_span_event(const tbx_testkit_span_t *span, const char *name)
{
	for (size_t i = 0; span && name && i < span->event_count; i++)
		if (span->events[i].name &&
		    strcmp(span->events[i].name, name) == 0)
			return &span->events[i];
	return NULL;
}

const char *tbx_testkit_event_attr(const tbx_testkit_event_t *event,
				   const char *key)
{
	return event ? attr_of(event->attrs, event->attr_count, key) : NULL;
}
