/*
 * Worker internals: the consumer-group loop (worker.c), the protocol A–F
 * over one batch (protocol.c), the producer that dispatches (producer.c)
 * and the views handed to handlers (msg.c).
 *
 * @locality every function here runs on the worker's thread, the one that
 * calls tbx_worker_poll()/tbx_worker_run(), except tbx_worker_stop().
 */
#ifndef TBX_CONSUMER_WORKER_H
#define TBX_CONSUMER_WORKER_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>

#include "consumer/conf.h"
#include "base/util.h"
#include "handlers/router.h"
#include "outbox/outbox.h"
#include "tokens/sweep.h"
#include "tokens/tokens.h"

#define TBX_TYPE_MAX 255

/* What A decided for one record of the batch. */
typedef enum tbx__mstate {
	TBX_MS_NEW = 0, /**< not looked at yet */
	TBX_MS_SKIPPED, /**< its partition blocked earlier in the batch */
	TBX_MS_BLOCKED, /**< RETRY (or a failed phase): resume here later */
	TBX_MS_DROPPED, /**< duplicate or below the ingress offset: done */
	TBX_MS_ROW,	/**< has an outbox row: done when the row finishes */
} tbx__mstate_t;

/** An incoming record as handlers see it, plus its protocol state. */
struct tbx_msg {
	rd_kafka_message_t *rkm; /**< owned by the batch */
	const char *topic;	 /**< borrowed from rkm */
	struct tbx__part *part;
	char id[TBX_MSGID_MAX + 1];
	char token[TBX_UUID_LEN + 1]; /**< "" when absent */
	char cause[TBX_UUID_LEN + 1]; /**< "" when absent */
	char store[TBX_UUID_LEN + 1]; /**< tbx-store, "" when absent */
	char type[TBX_TYPE_MAX + 1];
	int has_type;
	int64_t seq; /**< tbx-seq, 0 when absent */
	const char
	    *malformed; /**< why the tbx-* headers are unusable, or NULL */
	int untokened;	/**< no usable token for this group */
	int attempt;	/**< for handlers: 1 + earlier RETRYs */
	int crashes;	/**< >0: killed the worker this often alone: poison */
	tbx__mstate_t state;
	size_t row; /**< index in the batch's rows when TBX_MS_ROW */
	int first;  /**< the first record of its partition in the batch */
};

/** Per assigned partition state that outlives a batch. */
typedef struct tbx__part {
	char topic[TBX_TOPIC_MAX + 1];
	int32_t partition;
	int paused; /**< waiting for resume_at_ms */
	int64_t resume_at_ms;
	int64_t seek_offset; /**< where to restart when resuming */
	/* Counts for one record of the partition, loaded from the service
	 * store by G at every batch (tbx_inflight) and saved with A. */
	int64_t count_offset; /**< the record counted; -1: none */
	int retries;	      /**< RETRY verdicts counted for it */
	int crashes;	      /**< lone deaths counted for it */
	int64_t since;	      /**< subscription number of the topic */
	int failures;	      /**< consecutive batches left unfinished */
	/* per batch */
	int batch_blocked; /**< a record of this batch asked to retry */
	int64_t batch_delay_ms;
	int batch_isolated;    /**< a suspect range in the batch: one record
				    of all partitions this batch */
	int guard_found;       /**< G found a tbx_inflight row */
	int guard_dirty;       /**< G changed it without covering the part */
	uint64_t batch_mark;   /**< the last batch that had records of it */
	int64_t suspect_until; /**< from the guard; -1: not suspect */
	int guard_unreleased;  /**< this process failed to release its own
				    marker (a full disk): not a death */
	int settled; /**< a tokened record had work since the assignment:
			the redelivered prefix is over */
	uint64_t prefix_drops; /**< duplicates dropped before that */
	int64_t broke_next;    /**< offset + 1 of a record whose handler
				    tried to commit A (refused, A rolled
				    back): dead-lettered next; 0: none */
	/* commit_watch.c: monotonic time of the first commit of it the
	 * group refused since it last accepted one (0: none), and of the
	 * last alarm about it (0: none yet). */
	int64_t commit_behind_ms, commit_alarm_ms;
} tbx__part_t;

/** An outbox row in flight in this batch. */
typedef struct tbx__brow {
	tbx__row_t row;
	int fresh;     /**< inserted by this batch's A */
	int recorded;  /**< has an attempt (ours or a winner's) */
	int gone;      /**< another worker finished it meanwhile */
	int delivered; /**< every outgoing message acknowledged */
	int finished;  /**< deleted in E */
	int joined;    /**< attempt made in A (one file): no registration */
} tbx__brow_t;

typedef struct tbx__batch {
	struct tbx_msg *msgs;
	size_t cnt, cap;
	tbx__brow_t *rows;
	size_t row_cnt, row_cap;
	/* A's index of the batch's rows by message id: open addressing,
	 * row index + 1 per slot (0: empty), ids_cap a power of two. */
	uint32_t *ids;
	size_t ids_cap;
	int isolating;	  /**< a suspect partition: A takes one record */
	size_t isolated;  /**< that record's index when isolating */
	int64_t mint_seq; /**< joined: the number A took for its tokens */
	uint64_t minted;  /**< joined: token rows A created (stats) */
} tbx__batch_t;

/** Buckets of the batch duration histogram (metrics_render.c). */
#define TBX_BATCH_BUCKETS 14
extern const double tbx__batch_bounds_ms[TBX_BATCH_BUCKETS];

struct tbx_ctx {
	tbx_worker_t *worker;
	const struct tbx_msg *msg;
	tbx__row_t *row; /**< where tbx_ctx_send queues */
	char *error;	 /**< tbx_ctx_set_error() */
	int send_failed; /**< a tbx_ctx_send() failed: never commit */
};

/* Armed while a handler runs: the service connection's authorizer and
 * commit hook refuse what would end or escape A's transaction
 * (guard.c). */
typedef struct tbx__guard {
	struct tbx_worker *worker;
	int active;
	const char *topic; /**< the record in hand, for the log */
	int32_t partition;
	int64_t offset;
	int refused;	    /**< statements refused in this handler call */
	int commit_refused; /**< the commit hook turned a COMMIT into a
			       ROLLBACK: A's transaction is gone */
} tbx__guard_t;

struct tbx_worker {
	tbx_conf_t *conf;
	char group[TBX_GROUP_MAX + 1];
	char errstr[512];
	tbx_router_t *router;
	tbx_outbox_t *store;
	tbx_tokens_t *tokens;
	rd_kafka_t *consumer;
	rd_kafka_t *producer;
	int started, closed;
	atomic_int stop;
	/* settings, read once */
	int batch_max;
	int batch_ms;
	int retry_max;
	int backoff_ms, backoff_max_ms;
	int untokened_offsets;
	int dispatch_timeout_ms;
	int synchronous_full;
	/* one file for both stores: tokens commit with A and with E */
	int joined;
	/* the token store's id (tbx-store of what this worker mints) */
	char store_id[TBX_UUID_LEN + 1];
	int mismatch_stop; /* token.store.mismatch=stop */
	char mismatch_detail[TBX_TOPIC_MAX + 512]; /* the last one seen */
	/* records dropped as duplicates (no row, no token) in the current
	 * window, out of the tokened records looked up */
	uint64_t dup_window_seen, dup_window_dropped;
	int64_t dup_warned_ms; /* monotonic time of the last warning */
	char dup_prefix[TBX_TOPIC_MAX + 64]; /* a partition whose prefix of
						duplicates grew too long */
	uint64_t batch_gen; /* numbers batches for tbx__part_t.batch_mark */
	int64_t cleanup_interval_ms, cleanup_batch;
	int64_t next_cleanup_ms;
	/* the recovery pass: every interval, and after an assignment */
	int64_t recovery_interval_ms, next_recovery_ms;
	int recovery_due;
	tbx__sweep_cursor_t sweep_at; /* where the next cleanup goes on */
	char dlq_suffix[65];
	/* assigned partitions */
	tbx__part_t *parts;
	size_t part_cnt, part_cap;
	tbx__batch_t batch;
	int shutdown_timeout_ms;
	int64_t stats_interval_ms, next_stats_ms;
	/* An offset commit was refused: commit the stored offsets again
	 * from the poll loop, no sooner than next_recommit_ms. */
	int recommit;
	int64_t next_recommit_ms;
	int assigned_once; /* the rebalance callback assigned at least once */
	/* commit.behind.alarm.ms (commit_watch.c), the last refusal's
	 * error */
	int64_t commit_alarm_after_ms;
	rd_kafka_resp_err_t commit_refused_err;
	/* durations of the last batches (ms), a ring for the percentiles */
	float lat[1024];
	size_t lat_cnt, lat_next;
	/* metrics (metrics_render.c): the batch duration histogram, in
	 * TBX_BATCH_BUCKETS buckets of upper bounds tbx__batch_bounds_ms[],
	 * and the last statistics JSON of librdkafka's consumer */
	struct tbx__metrics *metrics;
	int64_t metrics_interval_ms, next_metrics_ms;
	uint64_t batch_hist[TBX_BATCH_BUCKETS + 1]; /* last: +Inf */
	double batch_sum_ms;
	char *rd_stats;
	/* subscribed topics and their subscription numbers */
	int64_t *since;
	tbx_stats_t stats;
	unsigned rand_state;
	tbx__guard_t guard;
};

/* worker.c */
tbx__part_t *tbx__part_get(tbx_worker_t *worker, const char *topic,
			   int32_t partition, int create);
/** Pauses @p part and arranges to restart it at @p offset after a backoff
 *  of @p delay_ms. */
void tbx__part_block(tbx_worker_t *worker, tbx__part_t *part, int64_t offset,
		     int64_t delay_ms);
/** Retry delay for the n-th attempt (1-based), with jitter. */
int64_t tbx__backoff_ms(tbx_worker_t *worker, int attempt);

/**
 * A worker for `tokenbox worker --check-config`: @p conf's required keys
 * checked, each store file opened read-only when it exists (else its
 * directory must be writable), nothing created, no Kafka client.
 * Handlers can be registered on it; tbx_worker_poll() refuses it.
 * On success it owns @p conf.
 */
tbx_worker_t *tbx__worker_new_check(tbx_conf_t *conf, char *errstr,
				    size_t errstr_size);
/** Topics with a handler registered, and the i-th of them. */
size_t tbx__worker_topic_count(const tbx_worker_t *worker);
const char *tbx__worker_topic(const tbx_worker_t *worker, size_t i);

/* metrics_render.c */
/** Starts the metrics server and textfile of the configuration (none
 *  when off).  @returns TBX_OK or an error with worker->errstr set. */
int tbx__worker_metrics_start(tbx_worker_t *worker, char *errstr,
			      size_t errstr_size);
/** Counts one batch of @p ms in the histogram. */
void tbx__worker_metrics_batch(tbx_worker_t *worker, int64_t ms);
/** Renders and hands over the metrics when metrics.interval.ms passed,
 *  or at once with @p now. */
void tbx__worker_metrics_refresh(tbx_worker_t *worker, int now);
/** librdkafka's stats_cb for the consumer: keeps the JSON for the
 *  metrics and /stats.json, and logs it at debug level. */
int tbx__worker_on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque);
/** Stops and frees what tbx__worker_metrics_start() made. */
void tbx__worker_metrics_stop(tbx_worker_t *worker);

/* protocol.c */
/** Takes the collected batch through A–F.  @returns TBX_OK or the error
 *  that stopped a phase (what is unfinished is retried via redelivery). */
int tbx__process_batch(tbx_worker_t *worker, tbx__batch_t *batch);
void tbx__batch_reset(tbx__batch_t *batch);
/**
 * Finishes this group's outbox rows created at or before
 * @p created_before_ms (at most @p limit) whose records are no longer
 * redelivered: B–E with the same ids and tokens, as a redelivery would.
 * Safe while workers run.  *finished receives the rows done.
 */
int tbx__worker_redispatch(tbx_worker_t *worker, int64_t created_before_ms,
			   size_t limit, size_t *finished);
/**
 * The recovery pass for one owned partition: finishes (B–E, as
 * tbx__worker_redispatch) at most @p limit of the group's rows whose
 * record lies below @p committed, the partition's committed offset:
 * records that will not be delivered again.  Counted, logged at WARN and
 * marked in the store (stuck_ms) first.  *found and *finished receive
 * the rows found and finished.
 */
int tbx__worker_recover(tbx_worker_t *worker, const char *topic,
			int32_t partition, int64_t committed, size_t limit,
			size_t *found, size_t *finished);

/* commit_watch.c */
/** Notes the result of an offset commit (the offset_commit_cb's
 *  arguments): per partition, since when the group refuses its commits. */
void tbx__commit_watch_result(tbx_worker_t *worker, rd_kafka_resp_err_t err,
			      const rd_kafka_topic_partition_list_t *offsets);
/** Raises the alarm for every partition whose commits were refused for
 *  commit.behind.alarm.ms: a WARN line, commit_alarms, a commit_behind
 *  alarm in the service store; again every interval while it lasts. */
void tbx__commit_watch_check(tbx_worker_t *worker);

/* guard.c */
/** Installs the authorizer and the commit hook on the service store's
 *  connection, disarmed.  Once per worker. */
void tbx__guard_install(tbx_worker_t *worker);
/** Arms the guard for the handler call of @p msg. */
void tbx__guard_enter(tbx_worker_t *worker, const struct tbx_msg *msg);
void tbx__guard_leave(tbx_worker_t *worker);

/* msg.c */
/** Reads and checks the tbx-* headers of @p msg->rkm. */
void tbx__msg_parse(struct tbx_msg *msg);
/** The header part of tbx__msg_parse(): @p hdrs (NULL: none) of the record
 *  at @p partition, @p offset of msg->topic, which is set. */
void tbx__msg_parse_headers(struct tbx_msg *msg, rd_kafka_headers_t *hdrs,
			    int32_t partition, int64_t offset);
/** Checks an outgoing message (topic name, type, reserved header names)
 *  and encodes its headers into *hdrs (malloc'ed, NULL when none).
 *  @returns TBX_OK, TBX_EINVAL (logged with the reason) or TBX_ENOMEM. */
int tbx__out_prepare(const tbx_out_t *out, const char *caller, void **hdrs,
		     size_t *hdrs_len);

/* producer.c */
rd_kafka_t *tbx__producer_new(const tbx_conf_t *conf, char *errstr,
			      size_t errstr_size);
/** Replaces *@p producer after a fatal error (counted in *@p restarts,
 *  logged at ERROR as @p who), or creates it when there is none.
 *  @returns TBX_OK when there is a usable producer. */
int tbx__producer_renew(rd_kafka_t **producer, const tbx_conf_t *conf,
			const char *who, uint64_t *restarts, char *errstr,
			size_t errstr_size);
/** tbx__producer_renew() of worker->producer. */
int tbx__producer_check(tbx_worker_t *worker);
/** 1 when retrying a delivery that failed with @p err cannot succeed
 *  (the message or its topic is refused): the table in producer.c. */
int tbx__kafka_err_permanent(rd_kafka_resp_err_t err);
/** The producer's message.max.bytes (librdkafka's default without one). */
int64_t tbx__producer_max_bytes(rd_kafka_t *producer);
/**
 * Produces every outgoing message of @p rows (NULL entries skipped) with
 * the tbx-* headers (tbx-store = @p store_id with every token) and waits for
 * every delivery report.  delivered[i] = 1 when all messages of rows[i] were
 * acknowledged.  @p errs (may be NULL) receives each message's result, rows
 * in order, messages in order.  A NULL @p producer delivers nothing
 * (RD_KAFKA_RESP_ERR__FATAL).
 * @returns TBX_OK when all were, else TBX_EDELIVERY (or TBX_EKAFKA).
 */
int tbx__dispatch(rd_kafka_t *producer, const char *store_id,
		  tbx__row_t *const *rows, size_t cnt, int *delivered,
		  size_t *undelivered, rd_kafka_resp_err_t *errs, char *errstr,
		  size_t errstr_size);

#endif
