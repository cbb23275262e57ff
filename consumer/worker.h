/*
 * The worker (worker.c: lifecycle, subscription; worker_rebalance.c:
 * rebalances, commits; worker_poll.c: the poll loop), the poll
 * loop that builds batches and drives each through the protocol
 * (protocol.h: G, A–E, F), and the partitions that wait for a retry; its
 * metrics (metrics_render.c).
 *
 * @locality every function here runs on the worker's thread, the one that
 * calls tbx_worker_poll()/tbx_worker_run(), except tbx_worker_stop().
 */
#ifndef TBX_CONSUMER_WORKER_H
#define TBX_CONSUMER_WORKER_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>

#include "base/ids.h"
#include "consumer/batch.h"
#include "consumer/conf.h"
#include "consumer/part.h"
#include "consumer/protocol.h"
#include "consumer/tracing.h"
#include "handlers/router.h"
#include "outbox/outbox.h"
#include "tokens/sweep.h"
#include "tokens/tokens.h"

/** Buckets of the batch duration histogram (metrics_render.c). */
#define TBX_BATCH_BUCKETS 14
extern const double tbx__batch_bounds_ms[TBX_BATCH_BUCKETS];

struct tbx_worker {
	tbx_conf_t *conf;
	const tbx__cfg_t *cfg; /* conf's typed values (the settings) */
	char group[TBX_GROUP_MAX + 1];
	/* the tag of its log lines: worker.id, else group/pid; the thread
	 * logs with it while a call of the worker runs (tbx__log_scope()) */
	char log_tag[TBX_GROUP_MAX + 32];
	char errstr[512];
	tbx_router_t *router;
	tbx_outbox_t *store;
	tbx_tokens_t *tokens;
	rd_kafka_t *consumer;
	rd_kafka_t *producer;
	int started, closed;
	atomic_int stop;
	atomic_llong stop_ms; /* tbx__mono_ms() of the first stop; 0: none */
	/* The step of its poll or of its close it is in (TBX__DOING_*), read
	 * by another thread for the warnings of a slow stop. */
	atomic_int doing;
	/* one file for both stores: tokens commit with A and with E */
	int joined;
	/* the token store's id (tbx-store of what this worker mints) */
	char store_id[TBX_UUID_LEN + 1];
	int64_t next_cleanup_ms;
	/* the recovery pass: every interval, and after an assignment */
	int64_t next_recovery_ms;
	int recovery_due;
	tbx__sweep_cursor_t sweep_at; /* where the next cleanup goes on */
	/* assigned partitions */
	tbx__part_t *parts;
	size_t part_cnt, part_cap;
	tbx__batch_t batch;    /* between polls: the records kept for the next
				  batch (tbx__batch_keep()), if any */
	tbx__batch_t recovery; /* the recovery pass's rows */
	int64_t next_stats_ms;
	/* An offset commit was refused: commit the stored offsets again
	 * from the poll loop, no sooner than next_recommit_ms. */
	int recommit;
	int64_t next_recommit_ms;
	int assigned_once; /* the rebalance callback assigned at least once */
	/* an assignment since the last layout check that passed
	 * (layout.c), and whether the last one refused */
	int layout_due, layout_refused;
	/* tbx__worker_assign_directly(): every partition assigned at the
	 * start, no consumer group membership */
	int assign_direct;
	/* commit.behind.alarm.ms (commit_watch.c), the last refusal's
	 * error */
	rd_kafka_resp_err_t commit_refused_err;
	/* membership.c: since when it has had no partition (0: it has
	 * some, or has not subscribed yet), when that was warned of (0:
	 * not yet), and the consumer's session.timeout.ms (0: unread) */
	int64_t unassigned_since_ms, unassigned_alarm_ms, session_ms;
	/* warnings of those (the stats line's and the metrics'
	 * unassigned_alarms; not in tbx_stats_t, whose size is ABI) */
	uint64_t unassigned_alarms;
	/* partitions assigned and never fetched (tbx__fetch_check()) */
	uint64_t fetch_stall_alarms;
	/* durations of the last batches (ms), a ring for the percentiles */
	float lat[1024];
	size_t lat_cnt, lat_next;
	/* metrics (metrics_render.c): the batch duration histogram, in
	 * TBX_BATCH_BUCKETS buckets of upper bounds tbx__batch_bounds_ms[],
	 * and the last statistics JSON of librdkafka's consumer */
	struct tbx__metrics *metrics;
	int64_t next_metrics_ms;
	uint64_t batch_hist[TBX_BATCH_BUCKETS + 1]; /* last: +Inf */
	double batch_sum_ms;
	char *rd_stats;
	/* subscribed topics and their subscription numbers */
	int64_t *since;
	tbx_stats_t stats;
	/* The protocol over the stores, producer, handlers and settings
	 * above (worker_proto_init): G, A–E and F's decisions. */
	tbx__proto_t proto;
};

/* layout.c */
/**
 * One layout per group: with outbox.layout = record, refuses (TBX_ESTATE,
 * @p errstr naming the group and the count, the layout_mixed alarm
 * recorded; not logged) while the group has batch rows; @p when
 * says at which step ("at start", "at an assignment").  TBX_OK with
 * outbox.layout = batch, or the store's error.
 */
int tbx__layout_check(tbx_worker_t *worker, const char *when, char *errstr,
		      size_t errstr_size);
/**
 * The same check for --check-config, on the service store opened
 * read-only (nothing recorded, nothing created): TBX_ESTATE with the
 * refusal a start would give in @p errstr, TBX_OK when a start would
 * pass it (or the store is not there yet), else the store's error.
 */
int tbx__layout_check_ro(const tbx__cfg_t *cfg, char *errstr,
			 size_t errstr_size);

/* worker_rebalance.c */
tbx__part_t *tbx__part_get(tbx_worker_t *worker, const char *topic,
			   int32_t partition, int create);

/** tbx_worker_new(), with the error in *@p errp (TBX_OK on success):
 *  TBX_ENOENT for a token store that does not exist, say. */
tbx_worker_t *tbx__worker_new_err(tbx_conf_t *conf, int *errp, char *errstr,
				  size_t errstr_size);
/**
 * A worker for `tokenbox worker --check-config`: @p conf's required keys
 * checked, each store file opened read-only when it exists (else its
 * directory must be writable), nothing created, no Kafka client.
 * Handlers can be registered on it; tbx_worker_poll() refuses it.
 * On success it owns @p conf.
 */
tbx_worker_t *tbx__worker_new_check(tbx_conf_t *conf, char *errstr,
				    size_t errstr_size);
/**
 * Makes @p worker, before its first tbx_worker_poll(), assign itself
 * every partition of its topics at the start instead of joining its
 * consumer group (the test kit's one worker: a group's join costs the
 * mock cluster's 3 s wait, and a killed member's session timeout).  The
 * group's committed offsets are used and committed as usual; the
 * partitions are revoked when the worker closes.  For one worker of a
 * group at a time only.
 */
void tbx__worker_assign_directly(tbx_worker_t *worker);
/**
 * Makes @p worker, before its first tbx_worker_poll(), record spans as
 * tracing on does, every span handed to @p sink (tbx__tracer_new_sink())
 * instead of an exporter, in place of the tracer its configuration gave:
 * the test kit's.  @returns TBX_OK or TBX_ENOMEM.
 */
int tbx__worker_trace_to(tbx_worker_t *worker, tbx__span_sink_fn *sink,
			 void *opaque);
/** The tag of @p worker's log lines, valid while it lives. */
const char *tbx__worker_log_tag(const tbx_worker_t *worker);
/** The steps of tbx_worker_poll() and of tbx_worker_close() that can
 *  wait. */
enum {
	TBX__DOING_NONE,
	TBX__DOING_RESUME,
	TBX__DOING_RECOVER,
	TBX__DOING_CLEANUP,
	TBX__DOING_COLLECT,
	TBX__DOING_LAYOUT,
	TBX__DOING_BATCH,
	TBX__DOING_REVOKE,
	TBX__DOING_CLOSE_FINISH,
	TBX__DOING_CLOSE_COMMIT,
	TBX__DOING_CLOSE_FIRST_ASSIGNMENT,
	TBX__DOING_CLOSE_LEAVE,
	TBX__DOING_CLOSE_CONSUMER,
	TBX__DOING_CLOSE_FLUSH
};
/** What @p worker is doing, for a warning (any thread, while the worker
 *  lives): the step of its poll, with the phase of the batch in hand, or
 *  of its close; NULL between polls and once it is closed. */
const char *tbx__worker_step(const tbx_worker_t *worker);
/** Notes the poll's step (TBX__DOING_*). */
static inline void tbx__worker_doing(tbx_worker_t *worker, int doing)
{
	atomic_store_explicit(&worker->doing, doing, memory_order_relaxed);
}
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

/* membership.c */
/** No partition for this many session timeouts on end: the warning. */
#define TBX__UNASSIGNED_SESSIONS 3
/** Writes @p parts to @p buf compactly, per topic with runs of
 *  partitions as ranges ("orders [0-3,7], payments [1]"); cut with "..."
 *  when @p size is too small. */
void tbx__membership_format(const rd_kafka_topic_partition_list_t *parts,
			    char *buf, size_t size);
/** Logs an assignment (@p assigned) or a revocation (@p lost: the
 *  assignment was lost) of @p parts at NOTICE, after the worker's
 *  partitions were updated, and notes when it is left with none. */
void tbx__membership_changed(tbx_worker_t *worker, int assigned,
			     const rd_kafka_topic_partition_list_t *parts,
			     int lost);
/** From the poll loop: warns, counts (unassigned_alarms) and records
 *  the no_assignment alarm once the worker has had no partition for
 *  TBX__UNASSIGNED_SESSIONS × session.timeout.ms, once per stretch. */
void tbx__membership_check(tbx_worker_t *worker);
/** From the poll loop: warns, counts (fetch_stall_alarms) and records
 *  the fetch_stall alarm for each partition assigned
 *  TBX__UNASSIGNED_SESSIONS × session.timeout.ms ago that the client has
 *  not fetched once (no high watermark known), once per partition and
 *  assignment. */
void tbx__fetch_check(tbx_worker_t *worker);

/* commit_watch.c */
/** Notes the result of an offset commit (the offset_commit_cb's
 *  arguments): per partition, since when the group refuses its commits. */
void tbx__commit_watch_result(tbx_worker_t *worker, rd_kafka_resp_err_t err,
			      const rd_kafka_topic_partition_list_t *offsets);
/** Raises the alarm for every partition whose commits were refused for
 *  commit.behind.alarm.ms: a WARN line, commit_alarms, a commit_behind
 *  alarm in the service store; again every interval while it lasts. */
void tbx__commit_watch_check(tbx_worker_t *worker);
/* worker.c */
/** Formats the error into worker->errstr, logs it under the worker's
 *  tag and @returns @p err. */
__attribute__((format(printf, 3, 4))) int
tbx__worker_fail(tbx_worker_t *worker, int err, const char *fmt, ...);
/** Creates the consumer and producer and subscribes (or assigns), once,
 *  at the first poll. */
int tbx__worker_start(tbx_worker_t *worker);

/* worker_poll.c */
/** Adds one polled record to the batch being collected (or holds its
 *  partition).  @returns TBX_OK or an error. */
int tbx__worker_batch_push(tbx_worker_t *worker, rd_kafka_message_t *rkm);

/* worker_rebalance.c */
/** Pauses @p part and seeks it back to @p offset for a retry. */
void tbx__part_hold(tbx_worker_t *worker, tbx__part_t *part, int64_t offset,
		    int64_t delay_ms);
/** Resumes the held partitions whose retry is due. */
void tbx__worker_resume_due(tbx_worker_t *worker);
/** Gives up the batch being collected or processed. */
void tbx__worker_batch_abandon(tbx_worker_t *worker);
/** Drops the batch's records of the partitions in @p parts (revoked). */
void tbx__worker_batch_drop(tbx_worker_t *worker,
			    const rd_kafka_topic_partition_list_t *parts);
/** Stores @p offsets and, when @p async, commits them asynchronously. */
void tbx__worker_offsets_commit(tbx_worker_t *worker,
				rd_kafka_topic_partition_list_t *offsets,
				int async);
/** Finishes the batches waiting for delivery (@p when names the moment
 *  in the log), with @p sync waiting for them. */
int tbx__worker_finish_waiting(tbx_worker_t *worker, const char *when,
			       int sync);
/** The consumer's rebalance and offset commit callbacks. */
void tbx__worker_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
			      rd_kafka_topic_partition_list_t *parts,
			      void *opaque);
void tbx__worker_on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
			   rd_kafka_topic_partition_list_t *offsets,
			   void *opaque);
/** Sends the commit a refused one asked for, once it is due. */
void tbx__worker_recommit_due(tbx_worker_t *worker);

#endif
