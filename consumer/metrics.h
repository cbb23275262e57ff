/*
 * Metrics an operator scrapes: the Prometheus text format (version 0.0.4)
 * on GET /metrics from a small HTTP server thread of the worker
 * (metrics.listen), and a file rewritten by rename for node_exporter's
 * textfile collector (metrics.textfile).
 *
 * The worker's thread renders the text every metrics.interval.ms
 * (metrics_render.c reads its counters, partitions and store) and hands
 * it over with tbx__metrics_publish(); the server thread only serves the
 * last text handed over, so a scrape never touches the worker's state.
 *
 * @locality tbx__metrics_new/_publish/_set_stats/_destroy: the worker's
 * thread; the server has its own.
 */
#ifndef TBX_CONSUMER_METRICS_H
#define TBX_CONSUMER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "tokenbox/tokenbox.h"

typedef struct tbx__metrics tbx__metrics_t;

/** Connections served at once; more wait in the listen backlog. */
#define TBX_METRICS_CONNS 256
/** Connections from one client address at once; more are closed as they
 *  come, so that one client cannot take every connection. */
#define TBX_METRICS_CONNS_PER_IP 32
/** A connection is closed this long after it came, whatever it sends. */
#define TBX_METRICS_IDLE_MS 5000
/** Cut connections are logged at most once per this many ms. */
#define TBX_METRICS_CUT_LOG_MS 60000
/** Longest request head read (request line and headers). */
#define TBX_METRICS_REQUEST_MAX 4096

/**
 * Checks a metrics.listen value: "" (off), "PORT" (127.0.0.1), or
 * "HOST:PORT" with HOST an IPv4 address, a name, or "[IPv6]"; PORT
 * 0..65535 (0: any free port).  @p host (at least 256 bytes) and *port
 * receive the parts.
 * @returns TBX_OK, or TBX_ECONF with @p errstr saying why.
 */
int tbx__metrics_parse_listen(const char *value, char *host, size_t host_size,
			      int *port, char *errstr, size_t errstr_size);

/**
 * Starts the server on @p addr, a metrics.listen value (may be "": none), and
 * remembers
 * @p textfile (may be "": none).  *out is NULL when both are off.
 * @returns TBX_OK, TBX_ECONF (bad value), TBX_EIO (cannot bind, with the
 * address and the reason in @p errstr) or TBX_ENOMEM.
 */
int tbx__metrics_new(const char *addr, const char *textfile,
		     tbx__metrics_t **out, char *errstr, size_t errstr_size);
/** Stops the server thread and frees everything.  NULL: no-op. */
void tbx__metrics_destroy(tbx__metrics_t *m);
/** The port the server listens on (the one chosen for port 0), or 0. */
int tbx__metrics_port(const tbx__metrics_t *m);

/**
 * Hands over @p text (malloc'ed; taken over) as what GET /metrics
 * serves from now on, and rewrites the textfile with it.  A failed
 * textfile write is logged (WARN) and counted in
 * tokenbox_metrics_textfile_errors_total.
 */
void tbx__metrics_publish(tbx__metrics_t *m, char *text);
/** Write failures of the textfile so far. */
uint64_t tbx__metrics_textfile_errors(const tbx__metrics_t *m);

/** Connections the watchdog closed because they outlived
 *  TBX_METRICS_IDLE_MS (tokenbox_metrics_connections_cut_total). */
uint64_t tbx__metrics_connections_cut(tbx__metrics_t *m);
/** Hands over librdkafka's last statistics JSON (copied), served on
 *  GET /stats.json. */
void tbx__metrics_set_stats(tbx__metrics_t *m, const char *json);

/*
 * Every metric family a worker renders (metrics_render.c), in the order it
 * renders them: X(ID, name after tokenbox_, type, labels besides group,
 * help).  The HELP lines and the table in docs/operations.md
 * (tbx_metricsdoc, test metrics_doc_is_current) both come from here.
 */
#define TBX_METRIC_LIST(X)                                                     \
	X(INFO, "info", "gauge", "version", "The worker's tokenbox version.")  \
	X(LAST_REFRESH, "last_refresh_timestamp_seconds", "gauge", "",         \
	  "When these metrics were rendered (Unix time).")                     \
	X(CONSUMED, "consumed_total", "counter", "", "Records polled.")        \
	X(PROCESSED, "processed_total", "counter", "",                         \
	  "Handler calls committed OK.")                                       \
	X(DUPLICATES_DROPPED, "duplicates_dropped_total", "counter", "",       \
	  "Records dropped as duplicates (token gone).")                       \
	X(RESUMED, "resumed_total", "counter", "",                             \
	  "Records whose outbox row was found: recovery.")                     \
	X(RETRIES, "retries_total", "counter", "",                             \
	  "RETRY verdicts, and partitions held back by a failed phase.")       \
	X(DEAD_LETTERED, "dead_lettered_total", "counter", "",                 \
	  "Records sent to the dead-letter topic.")                            \
	X(UNTOKENED, "untokened_total", "counter", "",                         \
	  "Records without a usable token.")                                   \
	X(DISPATCHED, "dispatched_total", "counter", "",                       \
	  "Outgoing messages delivered.")                                      \
	X(TOKENS_CREATED, "tokens_created_total", "counter", "",               \
	  "Token rows minted.")                                                \
	X(TOKENS_CONSUMED, "tokens_consumed_total", "counter", "",             \
	  "Own tokens consumed after work: per-message token rows deleted, "   \
	  "and bits of token sets cleared.")                                   \
	X(ATTEMPTS_LOST, "attempts_lost_total", "counter", "",                 \
	  "Token sets discarded because another attempt won.")                 \
	X(ORPHANS_SWEPT, "orphans_swept_total", "counter", "",                 \
	  "Registrations removed as orphans.")                                 \
	X(SET_ORPHANS_SWEPT, "set_orphans_swept_total", "counter", "",         \
	  "Registrations of token sets removed as orphans (one per attempt).") \
	X(SET_ROWS_SWEPT, "set_rows_swept_total", "counter", "",               \
	  "Token set rows removed with orphaned attempts.")                    \
	X(SET_REGS_UNCHECKED, "set_regs_unchecked_total", "counter", "",       \
	  "Registrations of token sets register-cleanup could not judge: the " \
	  "service store has no batch rows, or one that does not decode.")     \
	X(RESUME_RELOADS, "resume_reloads_total", "counter", "",               \
	  "outbox.layout=batch: loads of the group's batch rows by the "       \
	  "resume check.")                                                     \
	X(RESUME_LOAD_FAILURES, "resume_load_failures_total", "counter", "",   \
	  "outbox.layout=batch: loads of the group's batch rows that failed.") \
	X(RESUME_DROPS, "resume_drops_total", "counter", "",                   \
	  "outbox.layout=batch: the resume check's memory dropped at a "       \
	  "rebalance.")                                                        \
	X(STRAY_RECORDS, "stray_records_total", "counter", "",                 \
	  "outbox.layout=batch: records whose tbx-tbit names another "         \
	  "partition than the one they arrived on (copied by hand).")          \
	X(BATCHES, "batches_total", "counter", "", "Batches processed.")       \
	X(COMMITS_RETRIED, "commits_retried_total", "counter", "",             \
	  "Offset commits the group refused, sent again.")                     \
	X(STORE_MISMATCHES, "store_mismatches_total", "counter", "",           \
	  "Records minted in another token store: dead-lettered or stopped "   \
	  "the worker.")                                                       \
	X(DUPLICATE_ALARMS, "duplicate_alarms_total", "counter", "",           \
	  "Warnings that more records were dropped as duplicates than "        \
	  "redeliveries explain.")                                             \
	X(COMMIT_ALARMS, "commit_alarms_total", "counter", "",                 \
	  "Alarms that the group refused a partition's offset commits for "    \
	  "commit.behind.alarm.ms.")                                           \
	X(ROWS_CONFLICTED, "rows_conflicted_total", "counter", "",             \
	  "Outbox rows another worker's A committed first: the handler's "     \
	  "effects rolled back, the row resumed.")                             \
	X(HANDLER_ENDED_TXN, "handler_ended_txn_total", "counter", "",         \
	  "Handlers that ended the worker's transaction on tbx_ctx_pg(): the " \
	  "worker stopped.")                                                   \
	X(STORE_RECONNECTS, "store_reconnects_total", "counter", "",           \
	  "Connections to the stores' server (PostgreSQL) found lost and "     \
	  "made again.")                                                       \
	X(PARTITION_UNKNOWN, "partition_unknown_total", "counter", "",         \
	  "Destination partition counts not learnt from the metadata in "      \
	  "time: no partition chosen.")                                        \
	X(UNASSIGNED_ALARMS, "unassigned_alarms_total", "counter", "",         \
	  "Warnings that the worker had no partition for 3 session timeouts "  \
	  "on end.")                                                           \
	X(FETCH_STALL_ALARMS, "fetch_stall_alarms_total", "counter", "",       \
	  "Partitions assigned 3 session timeouts ago and not fetched once.")  \
	X(TRACE_HEADERS_MALFORMED, "trace_headers_malformed_total", "counter", \
	  "",                                                                  \
	  "Records whose traceparent or tracestate header was malformed: "     \
	  "ignored (tracing on only).")                                        \
	X(SPANS_EXPORTED, "spans_exported_total", "counter", "",               \
	  "Spans the trace collector took.")                                   \
	X(SPANS_DROPPED, "spans_dropped_total", "counter", "",                 \
	  "Spans dropped: the export queue was full "                          \
	  "(otel.bsp.max.queue.size).")                                        \
	X(SPANS_FAILED, "spans_failed_total", "counter", "",                   \
	  "Spans lost in failed or refused export requests, or left at "       \
	  "shutdown.")                                                         \
	X(OUTBOX_PENDING, "outbox_pending", "gauge", "",                       \
	  "Outbox rows of the group not finished yet.")                        \
	X(ASSIGNED_PARTITIONS, "assigned_partitions", "gauge", "",             \
	  "Partitions assigned to this worker.")                               \
	X(CONSUMER_LAG, "consumer_lag", "gauge", "topic,partition",            \
	  "Records of the partition after the worker's position (high "        \
	  "watermark - position); absent until the worker has read a record "  \
	  "of it.")                                                            \
	X(PARTITION_PAUSED, "partition_paused", "gauge", "topic,partition",    \
	  "1 while the partition waits for a retry's backoff.")                \
	X(BATCH_DURATION, "batch_duration_seconds", "histogram", "",           \
	  "Time a batch takes through the protocol (phases A-F).")             \
	X(TEXTFILE_ERRORS, "metrics_textfile_errors_total", "counter", "",     \
	  "Failed writes of metrics.textfile.")                                \
	X(CONNS_CUT, "metrics_connections_cut_total", "counter", "",           \
	  "Connections to metrics.listen closed because they were still "      \
	  "open 5 s after they came (slow, stalled or hostile clients).")      \
	X(RD_REPLYQ, "rdkafka_replyq", "gauge", "",                            \
	  "librdkafka: operations waiting in the consumer's reply queue.")     \
	X(RD_MSG_CNT, "rdkafka_msg_cnt", "gauge", "",                          \
	  "librdkafka: messages in the client's queues.")                      \
	X(RD_TX, "rdkafka_tx_total", "counter", "",                            \
	  "librdkafka: requests sent to brokers.")                             \
	X(RD_RX, "rdkafka_rx_total", "counter", "",                            \
	  "librdkafka: responses received from brokers.")                      \
	X(RD_BROKER_RTT, "rdkafka_broker_rtt_avg_seconds", "gauge", "broker",  \
	  "librdkafka: average broker round trip time.")                       \
	X(RD_CONSUMER_LAG, "rdkafka_consumer_lag", "gauge", "topic,partition", \
	  "librdkafka: consumer lag of a partition, by its committed offset.")

typedef enum tbx__metric_id {
#define TBX_METRIC_ENUM(id, name, type, labels, help) TBX_M_##id,
	TBX_METRIC_LIST(TBX_METRIC_ENUM)
#undef TBX_METRIC_ENUM
	    TBX_M_COUNT
} tbx__metric_id_t;

/** One metric family: its name without "tokenbox_", Prometheus type,
 *  labels other than group ("" or "topic,partition"), HELP text. */
typedef struct tbx__metric_def {
	const char *name, *type, *labels, *help;
} tbx__metric_def_t;

/** Every family, indexed by tbx__metric_id_t (TBX_M_COUNT of them). */
extern const tbx__metric_def_t tbx__metric_defs[TBX_M_COUNT];

#endif
