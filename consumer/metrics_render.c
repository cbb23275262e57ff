/*
 * The worker's metrics in the Prometheus text format (version 0.0.4),
 * rendered on the worker's thread every metrics.interval.ms and handed to
 * the server of metrics.c.  Every name starts with tokenbox_ and every
 * sample carries the label group.  docs/operations.md lists them.
 *
 * Consumer lag is the partition's high watermark (librdkafka's cached
 * value from the last fetch response) minus the worker's position (the
 * next offset it will read; for a partition waiting for a retry, the
 * offset it resumes at).  Batches are processed between polls, so
 * between batches everything before the position is done.
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

static void family(out_t *o, const char *name, const char *type,
		   const char *help)
{
	fprintf(o->f, "# HELP tokenbox_%s %s\n# TYPE tokenbox_%s %s\n", name,
		help, name, type);
}

static void sample(out_t *o, const char *name, double v)
{
	fprintf(o->f, "tokenbox_%s{group=\"%s\"} %.17g\n", name, o->group, v);
}

static void one(out_t *o, const char *name, const char *type, const char *help,
		double v)
{
	family(o, name, type, help);
	sample(o, name, v);
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
		const char *name;
		uint64_t v;
		const char *help;
	} c[] = {
	    {"consumed_total", st->consumed, "Records polled."},
	    {"processed_total", st->processed, "Handler calls committed OK."},
	    {"duplicates_dropped_total", st->duplicates_dropped,
	     "Records dropped as duplicates (token gone)."},
	    {"resumed_total", st->resumed,
	     "Records whose outbox row was found: recovery."},
	    {"retries_total", st->retries,
	     "RETRY verdicts, and partitions held back by a failed phase."},
	    {"dead_lettered_total", st->dead_lettered,
	     "Records sent to the dead-letter topic."},
	    {"untokened_total", st->untokened,
	     "Records without a usable token."},
	    {"dispatched_total", st->dispatched,
	     "Outgoing messages delivered."},
	    {"tokens_created_total", st->tokens_created, "Token rows minted."},
	    {"tokens_consumed_total", st->tokens_consumed,
	     "Own token rows deleted after work."},
	    {"attempts_lost_total", st->attempts_lost,
	     "Token sets discarded because another attempt won."},
	    {"orphans_swept_total", st->orphans_swept,
	     "Registrations removed as orphans."},
	    {"batches_total", st->batches, "Batches processed."},
	    {"commits_retried_total", st->commits_retried,
	     "Offset commits the group refused, sent again."},
	    {"store_mismatches_total", st->store_mismatches,
	     "Records minted in another token store: dead-lettered or "
	     "stopped the worker."},
	    {"duplicate_alarms_total", st->duplicate_alarms,
	     "Warnings that more records were dropped as duplicates than "
	     "redeliveries explain."},
	    {"commit_alarms_total", st->commit_alarms,
	     "Alarms that the group refused a partition's offset commits for "
	     "commit.behind.alarm.ms."},
	    {"rows_conflicted_total", st->rows_conflicted,
	     "Outbox rows another worker's A committed first: the handler's "
	     "effects rolled back, the row resumed."},
	    {"handler_ended_txn_total", st->handler_ended_txn,
	     "Handlers that ended the worker's transaction on tbx_ctx_pg(): "
	     "the worker stopped."},
	    {"store_reconnects_total", st->store_reconnects,
	     "Connections to the stores' server (PostgreSQL) found lost and "
	     "made again."},
	    {"trace_headers_malformed_total", bad_trace,
	     "Records whose traceparent or tracestate header was malformed: "
	     "ignored (tracing on only)."},
	    {"spans_exported_total", ex.exported,
	     "Spans the trace collector took."},
	    {"spans_dropped_total", ex.dropped,
	     "Spans dropped: the export queue was full "
	     "(otel.bsp.max.queue.size)."},
	    {"spans_failed_total", ex.failed,
	     "Spans lost in failed or refused export requests, or left at "
	     "shutdown."},
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		one(o, c[i].name, "counter", c[i].help, (double)c[i].v);
}

static void render_partitions(out_t *o, tbx_worker_t *worker)
{
	rd_kafka_topic_partition_list_t *list;
	char topic[2 * TBX_TOPIC_MAX + 1];

	one(o, "assigned_partitions", "gauge",
	    "Partitions assigned to this worker.", (double)worker->part_cnt);
	if (!worker->consumer || !worker->part_cnt)
		return;
	list = rd_kafka_topic_partition_list_new((int)worker->part_cnt);
	for (size_t i = 0; i < worker->part_cnt; i++)
		rd_kafka_topic_partition_list_add(list, worker->parts[i].topic,
						  worker->parts[i].partition);
	rd_kafka_position(worker->consumer, list);
	family(o, "consumer_lag", "gauge",
	       "Records of the partition after the worker's position "
	       "(high watermark - position); absent until the worker has read "
	       "a record of it.");
	for (size_t i = 0; i < worker->part_cnt; i++) {
		const tbx__part_t *p = &worker->parts[i];
		int64_t lo = -1, hi = -1,
			pos =
			    p->paused ? p->seek_offset : list->elems[i].offset;

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
	family(o, "partition_paused", "gauge",
	       "1 while the partition waits for a retry's backoff.");
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

	family(o, "batch_duration_seconds", "histogram",
	       "Time a batch takes through the protocol (phases A-F).");
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
	one(o, "rdkafka_replyq", "gauge",
	    "librdkafka: operations waiting in the consumer's reply queue.",
	    num(root, "replyq"));
	one(o, "rdkafka_msg_cnt", "gauge",
	    "librdkafka: messages in the client's queues.",
	    num(root, "msg_cnt"));
	one(o, "rdkafka_tx_total", "counter",
	    "librdkafka: requests sent to brokers.", num(root, "tx"));
	one(o, "rdkafka_rx_total", "counter",
	    "librdkafka: responses received from brokers.", num(root, "rx"));
	family(o, "rdkafka_broker_rtt_avg_seconds", "gauge",
	       "librdkafka: average broker round trip time.");
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
	family(o, "rdkafka_consumer_lag", "gauge",
	       "librdkafka: consumer lag of a partition, by its committed "
	       "offset.");
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
	family(&o, "info", "gauge", "The worker's tokenbox version.");
	fprintf(o.f, "tokenbox_info{group=\"%s\",version=\"%s\"} 1\n", o.group,
		tbx_version());
	one(&o, "last_refresh_timestamp_seconds", "gauge",
	    "When these metrics were rendered (Unix time).",
	    (double)tbx__now_ms() / 1000);
	render_counters(&o, worker);
	if (worker->store &&
	    tbx_outbox_count(worker->store, worker->group, &pending) == TBX_OK)
		one(&o, "outbox_pending", "gauge",
		    "Outbox rows of the group not finished yet.",
		    (double)pending);
	render_partitions(&o, worker);
	render_histogram(&o, worker);
	one(&o, "metrics_textfile_errors_total", "counter",
	    "Failed writes of metrics.textfile.",
	    (double)tbx__metrics_textfile_errors(worker->metrics));
	if (worker->rd_stats)
		render_rdkafka(&o, worker->rd_stats);
	if (fclose(o.f) != 0) {
		free(text);
		return;
	}
	tbx__metrics_publish(worker->metrics, text);
}
