/*
 * The worker's metrics in the Prometheus text format (version 0.0.4),
 * rendered on the worker's thread every metrics.interval.ms and handed to
 * the server of metrics.c.  Every name starts with tokenbox_ and every
 * sample carries the label group.  docs/operations.md lists them.
 *
 * Consumer lag is the partition's high watermark (librdkafka's cached
 * value from the last fetch response) minus the worker's position (the
 * next offset it will read; for a partition waiting for a retry, the
 * offset it resumes at; for one whose records are kept in the batch for
 * the next one, isolation, the first of them).  Batches are processed
 * between polls, so between batches everything before that is done.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/metrics.h"
#include "consumer/worker.h"

const tbx__metric_def_t tbx__metric_defs[TBX_M_COUNT] = {
#define TBX_METRIC_DEF(id, name, type, labels, help)                           \
	[TBX_M_##id] = {name, type, labels, help},
    TBX_METRIC_LIST(TBX_METRIC_DEF)
#undef TBX_METRIC_DEF
};

const double tbx__batch_bounds_ms[TBX_BATCH_BUCKETS] = {
    1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000};

int tbx__worker_metrics_start(tbx_worker_t *worker, char *errstr,
			      size_t errstr_size)
{
	return tbx__metrics_new(worker->cfg->metrics_listen,
				worker->cfg->metrics_textfile, &worker->metrics,
				errstr, errstr_size);
}

void tbx__worker_metrics_stop(tbx_worker_t *worker)
{
	tbx__metrics_destroy(worker->metrics);
	worker->metrics = NULL;
	free(worker->rd_stats);
	worker->rd_stats = NULL;
}

void tbx__worker_metrics_batch(tbx_worker_t *worker, int64_t ms)
{
	size_t i = 0;

	while (i < TBX_BATCH_BUCKETS && (double)ms > tbx__batch_bounds_ms[i])
		i++;
	worker->batch_hist[i]++;
	worker->batch_sum_ms += (double)ms;
}

int tbx__worker_on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
	tbx_worker_t *worker = opaque;
	char *copy = tbx__strdup(json);

	(void)rk;
	(void)len;
	if (copy) {
		free(worker->rd_stats);
		worker->rd_stats = copy;
		tbx__metrics_set_stats(worker->metrics, json);
	}
	if (tbx__log_enabled(TBX_LOG_DEBUG))
		tbx__log_object(TBX_LOG_DEBUG, "rdkafka_stats", json);
	return 0; /* librdkafka frees json */
}

/* The text being rendered, and the group's label value, escaped. */
typedef struct out {
	FILE *f;
	char group[2 * TBX_GROUP_MAX + 1];
} out_t;

/* Escapes @p s as a label value (backslash, quote, newline). */
static void escape(char *dst, size_t size, const char *s)
{
	size_t n = 0;

	for (; *s && n + 3 < size; s++) {
		if (*s == '\\' || *s == '"') {
			dst[n++] = '\\';
			dst[n++] = *s;
		} else if (*s == '\n') {
			dst[n++] = '\\';
			dst[n++] = 'n';
		} else {
			dst[n++] = *s;
		}
	}
	dst[n] = '\0';
}

static void family(out_t *o, tbx__metric_id_t id)
{
	const tbx__metric_def_t *d = &tbx__metric_defs[id];

	fprintf(o->f, "# HELP tokenbox_%s %s\n# TYPE tokenbox_%s %s\n", d->name,
		d->help, d->name, d->type);
}

static void one(out_t *o, tbx__metric_id_t id, double v)
{
	family(o, id);
	fprintf(o->f, "tokenbox_%s{group=\"%s\"} %.17g\n",
		tbx__metric_defs[id].name, o->group, v);
}

/* The tracer's counters (all zero with tracing off). */
static uint64_t trace_stats(const tbx_worker_t *worker,
			    tbx__exporter_stats_t *ex)
{
	uint64_t bad;

	tbx__tracer_stats(worker->batch.tracer, ex, &bad);
	return bad;
}

static void render_counters(out_t *o, const tbx_worker_t *worker)
{
	const tbx_stats_t *st = &worker->stats;
	tbx__exporter_stats_t ex;
	uint64_t bad_trace = trace_stats(worker, &ex);
	const struct {
		tbx__metric_id_t id;
		uint64_t v;
	} c[] = {
	    {TBX_M_CONSUMED, st->consumed},
	    {TBX_M_PROCESSED, st->processed},
	    {TBX_M_DUPLICATES_DROPPED, st->duplicates_dropped},
	    {TBX_M_RESUMED, st->resumed},
	    {TBX_M_RETRIES, st->retries},
	    {TBX_M_DEAD_LETTERED, st->dead_lettered},
	    {TBX_M_UNTOKENED, st->untokened},
	    {TBX_M_DISPATCHED, st->dispatched},
	    {TBX_M_TOKENS_CREATED, st->tokens_created},
	    {TBX_M_TOKENS_CONSUMED, st->tokens_consumed},
	    {TBX_M_ATTEMPTS_LOST, st->attempts_lost},
	    {TBX_M_ORPHANS_SWEPT, st->orphans_swept},
	    {TBX_M_SET_ORPHANS_SWEPT, st->set_orphans_swept},
	    {TBX_M_SET_ROWS_SWEPT, st->set_rows_swept},
	    {TBX_M_SET_REGS_UNCHECKED, st->set_regs_unchecked},
	    {TBX_M_RESUME_RELOADS, st->resume_reloads},
	    {TBX_M_RESUME_LOAD_FAILURES, st->resume_load_failures},
	    {TBX_M_RESUME_DROPS, st->resume_drops},
	    {TBX_M_STRAY_RECORDS, st->stray_records},
	    {TBX_M_BATCHES, st->batches},
	    {TBX_M_COMMITS_RETRIED, st->commits_retried},
	    {TBX_M_STORE_MISMATCHES, st->store_mismatches},
	    {TBX_M_DUPLICATE_ALARMS, st->duplicate_alarms},
	    {TBX_M_COMMIT_ALARMS, st->commit_alarms},
	    {TBX_M_ROWS_CONFLICTED, st->rows_conflicted},
	    {TBX_M_HANDLER_ENDED_TXN, st->handler_ended_txn},
	    {TBX_M_STORE_RECONNECTS, st->store_reconnects},
	    {TBX_M_PARTITION_UNKNOWN, st->partition_unknown},
	    {TBX_M_UNASSIGNED_ALARMS, worker->unassigned_alarms},
	    {TBX_M_FETCH_STALL_ALARMS, worker->fetch_stall_alarms},
	    {TBX_M_TRACE_HEADERS_MALFORMED, bad_trace},
	    {TBX_M_SPANS_EXPORTED, ex.exported},
	    {TBX_M_SPANS_DROPPED, ex.dropped},
	    {TBX_M_SPANS_FAILED, ex.failed},
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		one(o, c[i].id, (double)c[i].v);
}

static void render_partitions(out_t *o, tbx_worker_t *worker)
{
	rd_kafka_topic_partition_list_t *list;
	char topic[2 * TBX_TOPIC_MAX + 1];

	one(o, TBX_M_ASSIGNED_PARTITIONS, (double)worker->part_cnt);
	if (!worker->consumer || !worker->part_cnt)
		return;
	list = rd_kafka_topic_partition_list_new((int)worker->part_cnt);
	for (size_t i = 0; i < worker->part_cnt; i++)
		rd_kafka_topic_partition_list_add(list, worker->parts[i].topic,
						  worker->parts[i].partition);
	rd_kafka_position(worker->consumer, list);
	family(o, TBX_M_CONSUMER_LAG);
	for (size_t i = 0; i < worker->part_cnt; i++) {
		const tbx__part_t *p = &worker->parts[i];
		int64_t lo = -1, hi = -1,
			pos =
			    p->paused ? p->seek_offset : list->elems[i].offset;

		/* Kept for the next batch (tbx__batch_keep()), in order:
		 * not done. */
		for (size_t j = 0; j < worker->batch.cnt; j++)
			if (worker->batch.msgs[j].part == p) {
				pos = worker->batch.msgs[j].rkm->offset;
				break;
			}
		if (rd_kafka_get_watermark_offsets(worker->consumer, p->topic,
						   p->partition, &lo, &hi) ||
		    hi < 0 || pos < 0)
			continue;
		escape(topic, sizeof(topic), p->topic);
		fprintf(o->f,
			"tokenbox_consumer_lag{group=\"%s\",topic=\"%s\","
			"partition=\"%" PRId32 "\"} %" PRId64 "\n",
			o->group, topic, p->partition, hi > pos ? hi - pos : 0);
	}
	family(o, TBX_M_PARTITION_PAUSED);
	for (size_t i = 0; i < worker->part_cnt; i++) {
		escape(topic, sizeof(topic), worker->parts[i].topic);
		fprintf(o->f,
			"tokenbox_partition_paused{group=\"%s\",topic=\"%s\","
			"partition=\"%" PRId32 "\"} %d\n",
			o->group, topic, worker->parts[i].partition,
			worker->parts[i].paused);
	}
	rd_kafka_topic_partition_list_destroy(list);
}

static void render_histogram(out_t *o, const tbx_worker_t *worker)
{
	uint64_t cum = 0;

	family(o, TBX_M_BATCH_DURATION);
	for (size_t i = 0; i <= TBX_BATCH_BUCKETS; i++) {
		cum += worker->batch_hist[i];
		if (i < TBX_BATCH_BUCKETS)
			fprintf(o->f,
				"tokenbox_batch_duration_seconds_bucket{group="
				"\"%s\",le=\"%g\"} %" PRIu64 "\n",
				o->group, tbx__batch_bounds_ms[i] / 1000, cum);
		else
			fprintf(o->f,
				"tokenbox_batch_duration_seconds_bucket{group="
				"\"%s\",le=\"+Inf\"} %" PRIu64 "\n",
				o->group, cum);
	}
	fprintf(o->f,
		"tokenbox_batch_duration_seconds_sum{group=\"%s\"} %.17g\n"
		"tokenbox_batch_duration_seconds_count{group=\"%s\"} %" PRIu64
		"\n",
		o->group, worker->batch_sum_ms / 1000, o->group, cum);
}

static double num(const cJSON *obj, const char *name)
{
	const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, name);

	return cJSON_IsNumber(item) ? item->valuedouble : -1;
}

/* A few gauges of librdkafka's statistics (its STATISTICS.md). */
static void render_rdkafka(out_t *o, const char *json)
{
	cJSON *root = cJSON_Parse(json), *it, *p;
	char a[600], b[600];

	if (!root)
		return;
	one(o, TBX_M_RD_REPLYQ, num(root, "replyq"));
	one(o, TBX_M_RD_MSG_CNT, num(root, "msg_cnt"));
	one(o, TBX_M_RD_TX, num(root, "tx"));
	one(o, TBX_M_RD_RX, num(root, "rx"));
	family(o, TBX_M_RD_BROKER_RTT);
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "brokers"))
	{
		const cJSON *rtt = cJSON_GetObjectItem(it, "rtt");
		double avg = num(rtt, "avg");

		if (!it->string || avg < 0 || num(it, "nodeid") < 0)
			continue;
		escape(a, sizeof(a), it->string);
		fprintf(o->f,
			"tokenbox_rdkafka_broker_rtt_avg_seconds{group=\"%s\","
			"broker=\"%s\"} %.17g\n",
			o->group, a, avg / 1e6);
	}
	family(o, TBX_M_RD_CONSUMER_LAG);
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "topics"))
	{
		if (!it->string)
			continue;
		escape(a, sizeof(a), it->string);
		cJSON_ArrayForEach(p, cJSON_GetObjectItem(it, "partitions"))
		{
			double lag = num(p, "consumer_lag");
			if (!p->string || strcmp(p->string, "-1") == 0 ||
			    lag < 0)
				continue;
			escape(b, sizeof(b), p->string);
			fprintf(o->f,
				"tokenbox_rdkafka_consumer_lag{group=\"%s\","
				"topic=\"%s\",partition=\"%s\"} %.17g\n",
				o->group, a, b, lag);
		}
	}
	cJSON_Delete(root);
}

void tbx__worker_metrics_refresh(tbx_worker_t *worker, int now)
{
	int64_t t = tbx__mono_ms(), pending = -1;
	char *text = NULL;
	size_t len = 0;
	out_t o;

	if (!worker->metrics || (!now && t < worker->next_metrics_ms))
		return;
	worker->next_metrics_ms = t + worker->cfg->metrics_interval_ms;
	if (!(o.f = open_memstream(&text, &len)))
		return;
	escape(o.group, sizeof(o.group), worker->group);
	family(&o, TBX_M_INFO);
	fprintf(o.f, "tokenbox_info{group=\"%s\",version=\"%s\"} 1\n", o.group,
		tbx_version());
	one(&o, TBX_M_LAST_REFRESH, (double)tbx__now_ms() / 1000);
	render_counters(&o, worker);
	if (worker->store &&
	    tbx_outbox_count(worker->store, worker->group, &pending) == TBX_OK)
		one(&o, TBX_M_OUTBOX_PENDING, (double)pending);
	render_partitions(&o, worker);
	render_histogram(&o, worker);
	one(&o, TBX_M_TEXTFILE_ERRORS,
	    (double)tbx__metrics_textfile_errors(worker->metrics));
	one(&o, TBX_M_CONNS_CUT,
	    (double)tbx__metrics_connections_cut(worker->metrics));
	if (worker->rd_stats)
		render_rdkafka(&o, worker->rd_stats);
	if (fclose(o.f) != 0) {
		free(text);
		return;
	}
	tbx__metrics_publish(worker->metrics, text);
}
