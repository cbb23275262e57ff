/*
 * Configuration: string key/value pairs checked against one property table
 * as they are set, so a bad value fails where it is written, naming the key,
 * the value and the reason, and stored converted in the key's field of
 * tbx__cfg_t (the row's offset, as librdkafka's rd_kafka_properties[]).
 * The text as set is kept too, for tbx_conf_get() and tbx_conf_dup().
 * "kafka." keys are checked by librdkafka itself on a scratch
 * configuration.
 */
#include "consumer/conf.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "consumer/metrics.h"
#include "base/str.h"
#include "base/log.h"
#include "base/ids.h"
#include "store/pg.h"

/* The field of a row: its offset in tbx__cfg_t, checked to be of type T
 * (_Generic has no match otherwise), and its name for the tests. */
#define FIELD(f, T)                                                            \
	offsetof(tbx__cfg_t, f) +                                              \
	    0 * sizeof(_Generic(((tbx__cfg_t *)0)->f, T : 1)),                 \
	    #f
#define STR(f)	TBX_PT_STR, FIELD(f, const char *)
#define PATH(f) TBX_PT_PATH, FIELD(f, const char *)
#define INT(f)	TBX_PT_INT, FIELD(f, int64_t)
#define ENUM(f) TBX_PT_ENUM, FIELD(f, int)
/* An ENUM's texts and values, in the order the docs show them. */
#define S2I(...) ((const tbx__s2i_t[]){__VA_ARGS__, {NULL, 0}})

/* clang-format off */
const tbx__prop_t tbx__props[] = {
	{"group.id", STR(group_id), NULL, 1, 255,
	 NULL, "worker", 1,
	 "Consumer group of the worker. Tokens are minted per group: a group "
	 "checks and deletes only its own."},
	{"store.path", PATH(store_path), NULL, 1, 4096,
	 NULL, "worker", 0,
	 "Service store: the SQLite file that holds the outbox and the "
	 "handlers' business tables. Created if missing. A worker needs "
	 "either store.path or store.url, not both. A relative path is "
	 "taken from the process's working directory, not from the "
	 "configuration file's as plugin= is: give configuration files "
	 "absolute paths (--check-config prints the file it resolves "
	 "to)."},
	{"store.url", STR(store_url), "", 0, 4096,
	 NULL, "worker", 0,
	 "Service store on PostgreSQL: a libpq connection URL "
	 "(postgresql://HOST[:PORT]/DB?...) or key=value string (host=... "
	 "dbname=...), instead of store.path. The service store's tables "
	 "live in the schema store.schema, created if missing; handlers "
	 "write through the same connection (tbx_ctx_pg(), tbx_ctx_exec()). "
	 "Give credentials through libpq's own means (a password file, "
	 "PGPASSWORD, a service file): tokenbox never writes a password in "
	 "a log line or an error."},
	{"store.schema", STR(store_schema), NULL, 0, 63,
	 NULL, "worker", 0,
	 "PostgreSQL schema of the service store (with store.url); unset: "
	 "the group.id, which must then be a valid schema name. 1 to 63 "
	 "letters, digits, '_', '.' or '-', not starting with a digit, a "
	 "dot or pg_."},
	{"tokens.path", PATH(tokens_path), "", 0, 4096,
	 NULL, "both", 0,
	 "Token store: the SQLite file shared by every service of a pipeline "
	 "(a sender mints tokens for the receiving groups). Empty, or the "
	 "service store's file under any name: one file for both, the "
	 "token operations share its connection, and tokens commit with "
	 "the handlers' transaction. A separate token store must exist "
	 "(`tokenbox init --tokens PATH` creates one) unless tokens.create "
	 "is true: a worker pointed at a misspelt path would otherwise "
	 "make an empty store and take every record for a duplicate. "
	 "Publishers never create it. Not with tokens.url. A relative "
	 "path is taken from the working directory, as store.path's is."},
	{"tokens.create", ENUM(tokens_create), "false", 0, 0,
	 S2I({"false", 0}, {"true", 1}), "worker", 0,
	 "'true' lets the worker create a token store (tokens.path, or "
	 "the schema tokens.schema at tokens.url) that does not exist. The "
	 "service store, and in single-file mode the token tables in it, "
	 "are always created."},
	{"tokens.url", STR(tokens_url), "", 0, 4096,
	 NULL, "both", 0,
	 "Token store on PostgreSQL: a libpq connection URL or key=value "
	 "string, instead of tokens.path. Empty, or the same text as "
	 "store.url: the token store is in the service store's database "
	 "and shares its connection (the joined path: tokens commit with "
	 "the handlers' transaction). Another text: a connection of its "
	 "own (the token store may be another database, or the same one "
	 "reached apart). A worker creates a missing token store only "
	 "with tokens.create=true; publishers never create it."},
	{"tokens.schema", STR(tokens_schema), "tokenbox_tokens", 1, 63,
	 NULL, "both", 0,
	 "PostgreSQL schema of the token store (with store.url or "
	 "tokens.url), shared by every service of the pipeline. The same "
	 "naming rules as store.schema."},
	{"tokens.format", ENUM(tokens_format), "message", 0, 0,
	 S2I({"message", TBX_TOKFMT_MESSAGE}, {"set", TBX_TOKFMT_SET}),
	 "both", 0,
	 "The token format a publisher (tbx_publisher_new(), `tokenbox "
	 "send`), or a worker for its own messages, mints: 'message', a "
	 "token row per message and "
	 "receiving group (tbx-token); 'set', one token set per topic, "
	 "destination partition and receiving group of a flush (tbx-tset "
	 "and tbx-tbit: docs/batched-tokens.md), each message produced to "
	 "the partition chosen for it before the mint. Workers receive both "
	 "formats; one older than the batched format dead-letters 'set' "
	 "records as untokened, so switch a topic's publishers to 'set' "
	 "only once every group reading it runs a worker that receives "
	 "them (docs/operations.md). 'set' needs a token store at SQLite "
	 "schema 14 or PostgreSQL token version 4, where the ingress edge "
	 "records a message's set (migrated as every schema step, "
	 "docs/operations.md). A worker mints sets for the messages its "
	 "handlers queue and its dead letters only with outbox.layout="
	 "batch (one set per batch row, destination topic and partition, "
	 "registered once per batch row; the partition chosen in A, where "
	 "a count not learnt within dispatch.timeout.ms fails the batch, "
	 "retried, counted in partition_unknown); with outbox.layout="
	 "record it refuses to start, as `tokenbox worker --check-config` "
	 "does. A batch row is finished in the format it was written "
	 "with."},
	{"token.store.mismatch", ENUM(token_store_mismatch), "dlq", 0, 0,
	 S2I({"dlq", TBX_MISMATCH_DLQ}, {"stop", TBX_MISMATCH_STOP}),
	 "worker", 0,
	 "A record whose token this worker's token store cannot judge (its "
	 "tbx-store header names another store, or its tbx-seq is a number "
	 "the store never issued: restored from an older backup), so that "
	 "the token's absence proves nothing: 'dlq' dead-letters it with a "
	 "reason naming the ids; 'stop' stops the worker with an error before the record is "
	 "processed (`tokenbox worker` exits with status 3). Records "
	 "without the header are checked as before."},
	{"batch.max.messages", INT(batch_max_messages), "500", 1, 100000,
	 NULL, "worker", 0,
	 "Most records taken through the protocol as one batch. Each phase "
	 "costs one transaction per batch, so larger batches amortise "
	 "fsyncs and round trips."},
	{"batch.max.ms", INT(batch_max_ms), "100", 0, 60000,
	 NULL, "worker", 0,
	 "Longest wait for a batch to fill once its first record arrived."},
	{"finish.defer", ENUM(finish_defer), "true", 0, 0,
	 S2I({"false", 0}, {"true", 1}), "worker", 0,
	 "'true': where the service and token stores are one SQLite file, "
	 "a batch's last store transaction (its incoming tokens consumed, "
	 "its finished outbox rows deleted) is not committed on its own "
	 "but as the first statements of the next batch's transaction, "
	 "saving one synced commit per batch; the batch's offsets are "
	 "committed after it. With no next batch, it commits at the next "
	 "poll that finds no record, at a revocation and at the close. "
	 "'false': it commits at the end of its own batch, as it always "
	 "does with two files or PostgreSQL."},
	{"outbox.layout", ENUM(outbox_layout), "record", 0, 0,
	 S2I({"record", TBX_LAYOUT_RECORD}, {"batch", TBX_LAYOUT_BATCH}),
	 "worker", 0,
	 "The worker's outbox rows: 'record', one row per handled or "
	 "dead-lettered record (tbx_outbox); 'batch', one row per batch "
	 "(tbx_obatch) covering every record the batch handled or "
	 "dead-lettered, with every message they queued, finished as a "
	 "whole, and the resume check answered from the worker's memory of "
	 "the group's pending rows, kept honest by a generation per "
	 "partition (docs/batched-tokens.md). On PostgreSQL a worker locks "
	 "its batch's partitions' rows of tbx_inflight while it checks and "
	 "handles the batch, so workers on different partitions never wait "
	 "for each other and two on one partition take turns. 'batch' needs "
	 "a service store at SQLite schema 12 or PostgreSQL service version "
	 "4 (a worker migrates its store at start). 'batch' is in progress: "
	 "its messages carry per-message tokens unless tokens.format is "
	 "'set'. A message the broker refuses for good is "
	 "given up as in 'record' (dispatch.retry.max, tbx_undelivered) and "
	 "the rest of its row finishes. The recovery pass and `inspect "
	 "redispatch` finish them; `inspect outbox list|show` shows them. "
	 "Every worker of a group uses one layout. A worker on 'batch' "
	 "still resumes the 'record' rows left in the store. A worker on "
	 "'record' does not resume batch rows, so it refuses to start "
	 "while its group has any (tbx_obatch), and stops when an "
	 "assignment finds some, before it handles a record: an ERROR "
	 "naming the group and the count, and the layout_mixed alarm "
	 "(`inspect status --check`). A group goes back to 'record' once "
	 "its batch rows are finished (docs/operations.md, Upgrading)."},
	{"retry.max", INT(retry_max), "5", 0, 1000,
	 NULL, "worker", 0,
	 "Retries after the first attempt for a message whose handler "
	 "returns RETRY; the message is dead-lettered when they are used up."},
	{"retry.backoff.ms", INT(retry_backoff_ms), "100", 1, 3600000,
	 NULL, "worker", 0,
	 "First retry delay; doubled per attempt, with jitter. Only the "
	 "message's partition waits."},
	{"retry.backoff.max.ms", INT(retry_backoff_max_ms), "10000", 1, 3600000,
	 NULL, "worker", 0,
	 "Upper bound of the retry delay."},
	{"dlq.suffix", STR(dlq_suffix), ".dlq", 1, 64,
	 NULL, "worker", 0,
	 "Dead-letter topic of topic T is T followed by this suffix. Only "
	 "the characters Kafka allows in topic names: ASCII letters, "
	 "digits, '.', '_' and '-'."},
	{"ingress.untokened", ENUM(ingress_untokened), "reject", 0, 0,
	 S2I({"reject", TBX_UNTOKENED_REJECT},
	     {"offsets", TBX_UNTOKENED_OFFSETS}),
	 "worker", 0,
	 "Records without a usable token (no tbx-token header, or minted "
	 "before the group subscribed): 'reject' dead-letters them; "
	 "'offsets' handles them once per offset, tracking the next offset "
	 "per partition in the service store."},
	{"store.synchronous", ENUM(store_synchronous), "full", 0, 0,
	 S2I({"full", TBX_SYNC_FULL}, {"normal", TBX_SYNC_NORMAL}), "both", 0,
	 "SQLite synchronous level of both stores. 'normal' in WAL mode may "
	 "lose the last transactions on power loss: a lost token creation "
	 "after dispatch turns a real message into a duplicate."},
	{"store.busy.timeout.ms", INT(store_busy_timeout_ms), "10000", 0, 3600000,
	 NULL, "both", 0,
	 "How long to wait for another process's store lock."},
	{"cleanup.interval.ms", INT(cleanup_interval_ms), "10000", 0, 86400000,
	 NULL, "worker", 0,
	 "How often the worker runs register-cleanup for its group; 0 "
	 "disables it."},
	{"cleanup.batch.size", INT(cleanup_batch_size), "1000", 1, 1000000,
	 NULL, "worker", 0,
	 "Most registrations of each kind (tokens, token sets) examined "
	 "per cleanup run."},
	{"recovery.interval.ms", INT(recovery_interval_ms), "60000", 0, 86400000,
	 NULL, "worker", 0,
	 "How often the worker looks for outbox rows of its partitions whose "
	 "record lies below the committed offset (left by retention or an "
	 "offset reset: the record will not come back) and finishes them: "
	 "dispatch, consume the incoming token, delete. It also does so when "
	 "partitions are assigned. 0 keeps only the pass on assignment."},
	{"commit.behind.alarm.ms", INT(commit_behind_alarm_ms), "60000", 0, 86400000,
	 NULL, "worker", 0,
	 "How long the group may refuse the offset commits of a partition "
	 "the worker keeps (e.g. REBALANCE_IN_PROGRESS during a rebalance; "
	 "refused commits are sent again) before the worker raises an "
	 "alarm: its committed offset stays behind the records it "
	 "processed, so the group's lag does not fall. A WARN line, the "
	 "commit_alarms counter and the commit_behind alarm of `inspect "
	 "status --check`, again every interval while it lasts. 0 disables "
	 "it."},
	{"dispatch.timeout.ms", INT(dispatch_timeout_ms), "30000", 1000, 3600000,
	 NULL, "both", 0,
	 "Delivery timeout of outgoing messages (librdkafka "
	 "message.timeout.ms). A failed delivery leaves the outbox row; the "
	 "partition retries it after a backoff."},
	{"dispatch.retry.max", INT(dispatch_retry_max), "3", 0, 1000,
	 NULL, "worker", 0,
	 "Retries after the first attempt for an outgoing message whose "
	 "delivery fails with a permanent error (too large, invalid, no "
	 "such topic: docs/architecture.md lists them). When they are used "
	 "up the message is dead-lettered to the incoming topic's "
	 "dead-letter topic, or, if that fails too, kept in the service "
	 "store's tbx_undelivered table (`tokenbox inspect undelivered`); "
	 "its outbox row finishes and the partition goes on. Transient "
	 "errors are retried without limit."},
	{"shutdown.timeout.ms", INT(shutdown_timeout_ms), "30000", 100, 3600000,
	 NULL, "worker", 0,
	 "Bound on draining at shutdown. The batch in hand waits for its "
	 "messages' delivery reports at most half of this after the stop "
	 "(tbx_worker_stop(), the signal), then gives the rest up "
	 "undelivered, logged at WARN, their outbox rows left for the next "
	 "owner as after a crash; tbx_worker_close() waits at most "
	 "this long for outgoing messages to be delivered; the final "
	 "offset commit waits while the group's coordinator is "
	 "unreachable, and leaving the group up to about "
	 "session.timeout.ms (librdkafka's bounds, not this one). "
	 "`tokenbox worker` exits 1 after this long whatever is pending "
	 "(the protocol recovers on restart)."},
	{"stats.interval.ms", INT(stats_interval_ms), "0", 0, 86400000,
	 NULL, "worker", 0,
	 "How often the worker logs one line of counters and batch "
	 "latency percentiles, a JSON object, whatever log.level (in text: "
	 "the line's prefix, 'stats', the object); 0 disables it "
	 "(`tokenbox worker` uses 60000 unless set)."},
	{"ingress.dedup.window.ms", INT(ingress_dedup_window_ms), "86400000",
	 1000, 2592000000, NULL, "publisher", 0,
	 "How long the ingress edge remembers a caller-supplied id "
	 "(tbx_publish_id(), `tokenbox send --id-from`): the same id with the "
	 "same fingerprint within it is a natural duplicate and is not "
	 "published again; with another fingerprint it is a synthetic "
	 "duplicate and is refused. Past it, the id is new again."},
	{"log.level", ENUM(log_level), "notice", 0, 0,
	 S2I({"error", TBX_LOG_ERR}, {"warning", TBX_LOG_WARNING},
	     {"notice", TBX_LOG_NOTICE}, {"info", TBX_LOG_INFO},
	     {"debug", TBX_LOG_DEBUG}),
	 "both", 0,
	 "Least severe level logged to stderr. A kafka debug key "
	 "(kafka.debug, kafka.consumer.debug, kafka.producer.debug) "
	 "implies 'debug': librdkafka logs its debug contexts at that "
	 "level."},
	{"log.format", ENUM(log_format), "auto", 0, 0,
	 S2I({"auto", TBX_CFG_LOGF_AUTO}, {"text", TBX_LOGF_TEXT},
	     {"journal", TBX_LOGF_JOURNAL}, {"json", TBX_LOGF_JSON}),
	 "both", 0,
	 "Form of the lines on stderr. 'text': an RFC 3339 UTC time with "
	 "milliseconds, the level, the worker's name and pid, the message; "
	 "'journal': a syslog priority prefix <N> and the message, for "
	 "systemd's journal (which stamps the time; `journalctl -p` "
	 "filters by it); 'json': one object per line with ts, level, pid, "
	 "tag and msg. 'auto': journal when stderr is the journal's stream "
	 "(JOURNAL_STREAM names it), else text."},
	{"metrics.listen", STR(metrics_listen), "", 0, 300,
	 NULL, "worker", 0,
	 "HOST:PORT (or PORT, on 127.0.0.1) where a thread of the worker "
	 "serves its metrics in the Prometheus text format on GET /metrics "
	 "(and librdkafka's statistics on GET /stats.json); empty: off. "
	 "PORT 0 picks a free port, logged at start."},
	{"metrics.textfile", PATH(metrics_textfile), "", 0, 4096,
	 NULL, "worker", 0,
	 "File rewritten (atomically, by rename) every metrics.interval.ms "
	 "with the same metrics, for node_exporter's textfile collector "
	 "(give it a name ending in .prom); empty: off."},
	{"metrics.interval.ms", INT(metrics_interval_ms), "5000", 100, 3600000,
	 NULL, "worker", 0,
	 "How often the worker refreshes the metrics served on "
	 "metrics.listen and written to metrics.textfile."},
	{"worker.id", STR(worker_id), "", 0, 128,
	 NULL, "worker", 0,
	 "Name shown in logs; empty: <group.id>/<pid>."},
	{"otel.exporter.otlp.endpoint", STR(otel_exporter_otlp_endpoint), "", 0, 1024,
	 NULL, "both", 0,
	 "Tracing: the OTLP/HTTP collector's base URL (http:// or "
	 "https://; /v1/traces is appended), as OTEL_EXPORTER_OTLP_ENDPOINT, "
	 "which it overrides. Tracing is on only when an endpoint is set "
	 "(here or in the environment); empty: the variable, else off. "
	 "Every otel.* property is checked when the worker or publisher "
	 "starts, with the rules of its variable (docs/tracing.md)."},
	{"otel.exporter.otlp.traces.endpoint", STR(otel_exporter_otlp_traces_endpoint), "",
	 0, 1024, NULL, "both", 0,
	 "Tracing: the traces URL, used as is; wins over "
	 "otel.exporter.otlp.endpoint. As "
	 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT."},
	{"otel.exporter.otlp.protocol", STR(otel_exporter_otlp_protocol), "", 0, 32,
	 NULL, "both", 0,
	 "Tracing: the OTLP/HTTP body, http/protobuf (the default, as in "
	 "OpenTelemetry's SDKs, and the cheaper) or http/json; grpc is "
	 "refused. As OTEL_EXPORTER_OTLP_PROTOCOL, which it overrides; "
	 "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, when set, wins over both."},
	{"otel.exporter.otlp.timeout", STR(otel_exporter_otlp_timeout), "", 0, 16,
	 NULL, "both", 0,
	 "Tracing: milliseconds an export request may take (1 to 600000; "
	 "empty: OTEL_EXPORTER_OTLP_TIMEOUT, else 10000)."},
	{"otel.service.name", STR(otel_service_name), "", 0, 255,
	 NULL, "both", 0,
	 "Tracing: the service.name of the spans; empty: "
	 "OTEL_SERVICE_NAME, else the group.id (a worker) or "
	 "tokenbox-publisher."},
	{"otel.sdk.disabled", STR(otel_sdk_disabled), "", 0, 5,
	 NULL, "both", 0,
	 "Tracing: 'true' turns it off whatever else is set. As "
	 "OTEL_SDK_DISABLED."},
	{"otel.traces.exporter", STR(otel_traces_exporter), "", 0, 16,
	 NULL, "both", 0,
	 "Tracing: 'otlp' or 'none' (off). As OTEL_TRACES_EXPORTER."},
	{"otel.traces.sampler", STR(otel_traces_sampler), "", 0, 64,
	 NULL, "both", 0,
	 "Tracing: the sampler (parentbased_always_on, the default; "
	 "parentbased_traceidratio, always_on, ...). As "
	 "OTEL_TRACES_SAMPLER."},
	{"otel.traces.sampler.arg", STR(otel_traces_sampler_arg), "", 0, 32,
	 NULL, "both", 0,
	 "Tracing: the ratio of the ratio samplers, 0 to 1. As "
	 "OTEL_TRACES_SAMPLER_ARG."},
	{"otel.bsp.max.queue.size", STR(otel_bsp_max_queue_size), "", 0, 16,
	 NULL, "both", 0,
	 "Tracing: spans held at most; more are dropped and counted (1 to "
	 "1000000, default 2048). As OTEL_BSP_MAX_QUEUE_SIZE."},
	{"otel.bsp.max.export.batch.size", STR(otel_bsp_max_export_batch_size), "", 0, 16,
	 NULL, "both", 0,
	 "Tracing: spans per export request at most (default 512). As "
	 "OTEL_BSP_MAX_EXPORT_BATCH_SIZE."},
	{"otel.bsp.schedule.delay", STR(otel_bsp_schedule_delay), "", 0, 16,
	 NULL, "both", 0,
	 "Tracing: milliseconds between exports (default 5000). As "
	 "OTEL_BSP_SCHEDULE_DELAY."},
	{"trace.loss.window.ms", INT(trace_loss_window_ms), "60000", 1000, 86400000,
	 NULL, "worker", 0,
	 "Tracing: spans dropped on a full queue or lost in failed exports "
	 "are counted per window of this many ms; spans lost in 2 windows "
	 "in a row log a WARN and raise the span_export_loss alarm, which "
	 "inspect status --check flags."},
	{NULL, 0, 0, NULL, NULL, 0, 0, NULL, NULL, 0, NULL},
};
/* clang-format on */

/* librdkafka keys tokenbox sets itself: overriding them would break the
 * protocol's guarantees. */
static const char *const managed_kafka[] = {
    "group.id",		  "enable.auto.commit",	  "enable.auto.offset.store",
    "enable.idempotence", "enable.partition.eof", NULL,
};

typedef struct kv {
	char *key; /* without "kafka." */
	char *value;
} kv_t;

struct tbx_conf {
	char **values; /* one per property, NULL: default */
	tbx__cfg_t cfg;
	kv_t *kafka;
	size_t kafka_cnt, kafka_cap;
};

static size_t prop_count(void)
{
	size_t n = 0;

	while (tbx__props[n].name)
		n++;
	return n;
}

static const tbx__prop_t *prop_find(const char *name, size_t *idx)
{
	for (size_t i = 0; tbx__props[i].name; i++) {
		if (strcmp(tbx__props[i].name, name) == 0) {
			if (idx)
				*idx = i;
			return &tbx__props[i];
		}
	}
	return NULL;
}

static const tbx__s2i_t *s2i_find(const tbx__prop_t *prop, const char *value)
{
	for (const tbx__s2i_t *e = prop->s2i; e && e->str; e++)
		if (strcmp(e->str, value) == 0)
			return e;
	return NULL;
}

/* Stores @p text, already checked against row @p idx (or its default),
 * in the row's field.  A string field borrows @p text. */
static void store_field(tbx_conf_t *conf, size_t idx, const char *text)
{
	const tbx__prop_t *prop = &tbx__props[idx];
	char *field = (char *)&conf->cfg + prop->offset;

	switch (prop->type) {
	case TBX_PT_STR:
	case TBX_PT_PATH:
		memcpy(field, &text, sizeof(text));
		break;
	case TBX_PT_INT: {
		int64_t v = text ? strtoll(text, NULL, 10) : 0;
		memcpy(field, &v, sizeof(v));
		break;
	}
	case TBX_PT_ENUM: {
		const tbx__s2i_t *e = text ? s2i_find(prop, text) : NULL;
		int v = e ? e->val : 0;
		memcpy(field, &v, sizeof(v));
		break;
	}
	}
}

/* Fills every field from the texts set, else the defaults. */
static void store_fields(tbx_conf_t *conf)
{
	for (size_t i = 0; tbx__props[i].name; i++)
		store_field(conf, i,
			    conf->values[i] ? conf->values[i]
					    : tbx__props[i].def);
}

tbx_conf_t *tbx_conf_new(void)
{
	tbx_conf_t *conf = calloc(1, sizeof(*conf));

	if (!conf)
		return NULL;
	conf->values = calloc(prop_count(), sizeof(*conf->values));
	if (!conf->values) {
		free(conf);
		return NULL;
	}
	store_fields(conf);
	return conf;
}

void tbx_conf_destroy(tbx_conf_t *conf)
{
	if (!conf)
		return;
	for (size_t i = 0, n = prop_count(); i < n; i++)
		free(conf->values[i]);
	free(conf->values);
	for (size_t i = 0; i < conf->kafka_cnt; i++) {
		free(conf->kafka[i].key);
		free(conf->kafka[i].value);
	}
	free(conf->kafka);
	free(conf);
}

tbx_conf_t *tbx_conf_dup(const tbx_conf_t *conf)
{
	tbx_conf_t *copy = tbx_conf_new();

	if (!copy)
		return NULL;
	for (size_t i = 0, n = prop_count(); i < n; i++) {
		if (conf->values[i] &&
		    !(copy->values[i] = strdup(conf->values[i])))
			goto fail;
	}
	store_fields(copy);
	if (conf->kafka_cnt) {
		copy->kafka = calloc(conf->kafka_cnt, sizeof(*copy->kafka));
		if (!copy->kafka)
			goto fail;
		copy->kafka_cap = conf->kafka_cnt;
		for (size_t i = 0; i < conf->kafka_cnt; i++) {
			copy->kafka[i].key = strdup(conf->kafka[i].key);
			copy->kafka[i].value = strdup(conf->kafka[i].value);
			copy->kafka_cnt++;
			if (!copy->kafka[i].key || !copy->kafka[i].value)
				goto fail;
		}
	}
	return copy;
fail:
	tbx_conf_destroy(copy);
	return NULL;
}

const tbx__cfg_t *tbx__conf_cfg(const tbx_conf_t *conf)
{
	return &conf->cfg;
}

void tbx__prop_enums(const tbx__prop_t *prop, const char *sep, char *buf,
		     size_t size)
{
	size_t len = 0;

	if (size)
		buf[0] = '\0';
	for (const tbx__s2i_t *e = prop->s2i; e && e->str && len < size; e++) {
		int n = snprintf(buf + len, size - len, "%s%s",
				 e == prop->s2i ? "" : sep, e->str);
		if (n < 0)
			break;
		len += (size_t)n;
	}
}

static int check_value(const tbx__prop_t *prop, const char *value, char *errstr,
		       size_t errstr_size)
{
	size_t len = strlen(value);

	switch (prop->type) {
	case TBX_PT_STR:
	case TBX_PT_PATH:
		if ((int64_t)len < prop->min || (int64_t)len > prop->max)
			return tbx__seterr(errstr, errstr_size, TBX_ECONF,
					   "%s: value '%s' must be %lld to "
					   "%lld characters long",
					   prop->name, value,
					   (long long)prop->min,
					   (long long)prop->max);
		for (size_t i = 0; i < len; i++) {
			unsigned char c = (unsigned char)value[i];
			if (c < 0x20 || c == 0x7f)
				return tbx__seterr(
				    errstr, errstr_size, TBX_ECONF,
				    "%s: value contains a control "
				    "character at position %zu",
				    prop->name, i + 1);
		}
		return TBX_OK;
	case TBX_PT_INT: {
		char *end;
		long long v;

		errno = 0;
		v = strtoll(value, &end, 10);
		if (len == 0 || *end != '\0' || errno == ERANGE)
			return tbx__seterr(errstr, errstr_size, TBX_ECONF,
					   "%s: value '%s' is not an integer",
					   prop->name, value);
		if (v < prop->min || v > prop->max)
			return tbx__seterr(errstr, errstr_size, TBX_ECONF,
					   "%s: value %lld is out of range "
					   "(%lld..%lld)",
					   prop->name, v, (long long)prop->min,
					   (long long)prop->max);
		return TBX_OK;
	}
	case TBX_PT_ENUM:
		if (!s2i_find(prop, value)) {
			char enums[256];

			tbx__prop_enums(prop, "|", enums, sizeof(enums));
			return tbx__seterr(errstr, errstr_size, TBX_ECONF,
					   "%s: value '%s' is not one of %s",
					   prop->name, value, enums);
		}
		return TBX_OK;
	}
	return TBX_ECONF;
}

/* 1 when @p s holds "pass" in any case (password, passfile). */
static int mentions_pass(const char *s)
{
	for (; *s; s++)
		if (strncasecmp(s, "pass", 4) == 0)
			return 1;
	return 0;
}

/*
 * A PostgreSQL connection string: a URL (postgresql:// or postgres://) or
 * key=value pairs, as libpq parses them.  The message names the string
 * redacted; libpq's reason echoes parts of the string, so it is given
 * only when the string holds no password.
 */
static int check_url(const char *key, const char *value, char *errstr,
		     size_t errstr_size)
{
	char red[512], *why = NULL;
	PQconninfoOption *opts;
	int rc;

	tbx__pg_redact(value, red, sizeof(red));
	if (mentions_pass(value) && strcmp(red, value) == 0)
		/* A password redaction did not find: a malformed string. */
		tbx__strlcpy(red, "(withheld: it holds a password)",
			     sizeof(red));
	if (!tbx__pg_is_url(value) && !strchr(value, '='))
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: '%s' is not a PostgreSQL connection "
				   "string: a URL postgresql://HOST/DB or "
				   "key=value pairs (host=... dbname=...) are "
				   "expected; an SQLite file is %s",
				   key, red,
				   strcmp(key, "store.url") == 0
				       ? "store.path"
				       : "tokens.path");
	if ((opts = PQconninfoParse(value, &why))) {
		PQconninfoFree(opts);
		return TBX_OK;
	}
	rc = tbx__seterr(errstr, errstr_size, TBX_ECONF,
			 "%s: '%s' is not a valid PostgreSQL connection "
			 "string: %s",
			 key, red,
			 !why ? "out of memory"
			 : strcmp(red, value) == 0 && !mentions_pass(value)
			     ? why
			     : "libpq refused it (its reason is withheld: "
			       "the string holds a password)");
	PQfreemem(why);
	return rc;
}

/* Checks a "kafka." pair with librdkafka on a scratch configuration. */
static int check_kafka(const char *key, const char *value, char *errstr,
		       size_t errstr_size)
{
	const char *bare = key;
	char rderr[256];
	rd_kafka_conf_t *scratch;
	rd_kafka_conf_res_t res;

	if (strncmp(bare, "consumer.", 9) == 0)
		bare += 9;
	else if (strncmp(bare, "producer.", 9) == 0)
		bare += 9;
	if (!*bare)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "kafka.%s: empty librdkafka property name",
				   key);
	for (size_t i = 0; managed_kafka[i]; i++) {
		if (strcmp(bare, managed_kafka[i]) == 0)
			return tbx__seterr(
			    errstr, errstr_size, TBX_ECONF,
			    "kafka.%s: set by tokenbox itself and cannot "
			    "be overridden%s",
			    key,
			    strcmp(bare, "group.id") == 0 ? " (use group.id)"
							  : "");
	}
	scratch = rd_kafka_conf_new();
	if (!scratch)
		return TBX_ENOMEM;
	res = rd_kafka_conf_set(scratch, bare, value, rderr, sizeof(rderr));
	rd_kafka_conf_destroy(scratch);
	if (res != RD_KAFKA_CONF_OK)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "kafka.%s: value '%s' refused by "
				   "librdkafka: %s",
				   key, value, rderr);
	return TBX_OK;
}

int tbx_conf_set(tbx_conf_t *conf, const char *name, const char *value,
		 char *errstr, size_t errstr_size)
{
	const tbx__prop_t *prop;
	size_t idx;
	int err;

	if (!conf || !name || !value)
		return tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				   "tbx_conf_set: NULL argument");
	if (strncmp(name, "kafka.", 6) == 0) {
		const char *key = name + 6;
		char *k, *v;

		if ((err = check_kafka(key, value, errstr, errstr_size)))
			return err;
		for (size_t i = 0; i < conf->kafka_cnt; i++) {
			if (strcmp(conf->kafka[i].key, key) == 0) {
				if (!(v = strdup(value)))
					return TBX_ENOMEM;
				free(conf->kafka[i].value);
				conf->kafka[i].value = v;
				return TBX_OK;
			}
		}
		if (conf->kafka_cnt == conf->kafka_cap) {
			size_t cap = conf->kafka_cap ? conf->kafka_cap * 2 : 8;
			kv_t *grown =
			    realloc(conf->kafka, cap * sizeof(*grown));
			if (!grown)
				return TBX_ENOMEM;
			conf->kafka = grown;
			conf->kafka_cap = cap;
		}
		k = strdup(key);
		v = strdup(value);
		if (!k || !v) {
			free(k);
			free(v);
			return TBX_ENOMEM;
		}
		conf->kafka[conf->kafka_cnt].key = k;
		conf->kafka[conf->kafka_cnt].value = v;
		conf->kafka_cnt++;
		return TBX_OK;
	}
	if (!(prop = prop_find(name, &idx)))
		return tbx__conf_unknown_key(name, errstr, errstr_size);
	if ((err = check_value(prop, value, errstr, errstr_size)))
		return err;
	/* Checks of one property beyond its row's. */
	if (prop->offset == offsetof(tbx__cfg_t, metrics_listen)) {
		char host[300];
		int port;
		if ((err =
			 tbx__metrics_parse_listen(value, host, sizeof(host),
						   &port, errstr, errstr_size)))
			return err;
	}
	if ((prop->offset == offsetof(tbx__cfg_t, store_url) ||
	     prop->offset == offsetof(tbx__cfg_t, tokens_url)) &&
	    *value && (err = check_url(prop->name, value, errstr, errstr_size)))
		return err;
	if ((prop->offset == offsetof(tbx__cfg_t, store_schema) ||
	     prop->offset == offsetof(tbx__cfg_t, tokens_schema)) &&
	    (err = tbx__pg_ident_check(prop->name, value, errstr, errstr_size)))
		return err;
	if (prop->offset == offsetof(tbx__cfg_t, dlq_suffix)) {
		/* Derived topic names must be topic names (Kafka's rule). */
		for (const char *c = value; *c; c++)
			if (!(*c >= 'a' && *c <= 'z') &&
			    !(*c >= 'A' && *c <= 'Z') &&
			    !(*c >= '0' && *c <= '9') && *c != '.' &&
			    *c != '_' && *c != '-')
				return tbx__seterr(
				    errstr, errstr_size, TBX_ECONF,
				    "dlq.suffix: value '%s' would make invalid "
				    "dead-letter topic names: Kafka allows "
				    "only ASCII letters, digits, '.', '_' and "
				    "'-' (found '%c')",
				    value, *c);
	}
	char *copy = strdup(value);
	if (!copy)
		return TBX_ENOMEM;
	free(conf->values[idx]);
	conf->values[idx] = copy;
	store_field(conf, idx, copy);
	return TBX_OK;
}

const char *tbx_conf_get(const tbx_conf_t *conf, const char *name)
{
	size_t idx;

	if (!conf || !name)
		return NULL;
	if (strncmp(name, "kafka.", 6) == 0) {
		for (size_t i = 0; i < conf->kafka_cnt; i++)
			if (strcmp(conf->kafka[i].key, name + 6) == 0)
				return conf->kafka[i].value;
		return NULL;
	}
	if (!prop_find(name, &idx))
		return NULL;
	return conf->values[idx] ? conf->values[idx] : tbx__props[idx].def;
}

rd_kafka_conf_t *tbx__conf_kafka(const tbx_conf_t *conf, const char *role,
				 char *errstr, size_t errstr_size)
{
	rd_kafka_conf_t *kc = rd_kafka_conf_new();
	size_t rlen = strlen(role);

	if (!kc) {
		tbx__seterr(errstr, errstr_size, TBX_ENOMEM, "out of memory");
		return NULL;
	}
	/* Shared keys first, then the role's own, so the latter win. */
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < conf->kafka_cnt; i++) {
			const char *key = conf->kafka[i].key;
			int own =
			    strncmp(key, role, rlen) == 0 && key[rlen] == '.';
			int other =
			    !own && (strncmp(key, "consumer.", 9) == 0 ||
				     strncmp(key, "producer.", 9) == 0);
			char rderr[256];

			if (other || (pass == 0) == own)
				continue;
			if (own)
				key += rlen + 1;
			if (rd_kafka_conf_set(kc, key, conf->kafka[i].value,
					      rderr, sizeof(rderr)) !=
			    RD_KAFKA_CONF_OK) {
				tbx__seterr(errstr, errstr_size, TBX_ECONF,
					    "kafka.%s: %s", conf->kafka[i].key,
					    rderr);
				rd_kafka_conf_destroy(kc);
				return NULL;
			}
		}
	}
	return kc;
}

int tbx__conf_check_required(const tbx_conf_t *conf, const char *used_by,
			     char *errstr, size_t errstr_size)
{
	for (size_t i = 0; tbx__props[i].name; i++) {
		const tbx__prop_t *p = &tbx__props[i];
		if (!p->required || conf->values[i])
			continue;
		if (strcmp(p->used_by, "both") && strcmp(p->used_by, used_by))
			continue;
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: required configuration key is not "
				   "set (%s)",
				   p->name, p->doc);
	}
	if (conf->cfg.store_path && *conf->cfg.store_url)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "store.path and store.url are both set: the "
				   "service store is either an SQLite file or "
				   "a PostgreSQL database; set one");
	if (*conf->cfg.tokens_path && *conf->cfg.tokens_url)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "tokens.path and tokens.url are both set: "
				   "the token store is either an SQLite file "
				   "or a PostgreSQL database; set one");
	if (strcmp(used_by, "worker") == 0 && !conf->cfg.store_path &&
	    !*conf->cfg.store_url)
		return tbx__seterr(
		    errstr, errstr_size, TBX_ECONF,
		    "store.path: required configuration key is "
		    "not set (the service store: an SQLite file, "
		    "or store.url for PostgreSQL)");
	if (!tbx_conf_get(conf, "kafka.bootstrap.servers"))
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "kafka.bootstrap.servers: required "
				   "configuration key is not set (the Kafka "
				   "brokers to connect to)");
	/* tokens.format = set for a worker's own messages: only on batch
	 * rows, which record each message's set, bit and partition.  Here,
	 * so that a start and --check-config refuse it alike. */
	if (strcmp(used_by, "worker") == 0 &&
	    conf->cfg.tokens_format == TBX_TOKFMT_SET &&
	    conf->cfg.outbox_layout != TBX_LAYOUT_BATCH)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "tokens.format=set: a worker mints token "
				   "sets for its own messages only with "
				   "outbox.layout=batch (a record row cannot "
				   "record a message's set, bit and "
				   "partition); set outbox.layout=batch or "
				   "tokens.format=message");
	return TBX_OK;
}

void tbx__conf_log_configure(const tbx_conf_t *conf, const char *tag)
{
	static const char *const debug_keys[] = {
	    "kafka.debug", "kafka.consumer.debug", "kafka.producer.debug"};
	int debug = 0;

	for (size_t i = 0; i < sizeof(debug_keys) / sizeof(debug_keys[0]);
	     i++) {
		const char *v = tbx_conf_get(conf, debug_keys[i]);
		if (v && *v)
			debug = 1;
	}
	tbx__log_configure(tbx_conf_get(conf, "log.level"),
			   tbx_conf_get(conf, "log.format"), debug, tag);
}
