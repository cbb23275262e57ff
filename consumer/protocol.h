/*
 * The exactly-once protocol over one batch (protocol.c and the proto_*.c
 * of its phases, which the top of protocol.c lists; the phases in
 * docs/architecture.md): G, then A–E, then F's decision, which the caller
 * applies.  The protocol does not know the worker: the worker builds a
 * tbx__proto_t from its stores, producer, handlers, settings and stats
 * once, and drives each batch through it (worker_poll.c, tbx_worker_poll()):
 *
 *   tbx__proto_start()    numbers the batch, clears its partitions' notes
 *   tbx__proto_guard()    G: the crash marker, suspicion and counts
 *   tbx__proto_process()  A–E: handlers, tokens, dispatch, consume, finish
 *   tbx__proto_finish()   F: per partition, the offset to commit and
 *                         whether to hold the partition, for how long
 *
 * tbx__proto_redispatch() and tbx__proto_recover() take rows through B–E
 * without a batch of records (inspect redispatch, the recovery pass).
 *
 * @locality the worker's thread.
 */
#ifndef TBX_CONSUMER_PROTOCOL_H
#define TBX_CONSUMER_PROTOCOL_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "consumer/batch.h"
#include "consumer/conf.h"
#include "consumer/guard.h"
#include "consumer/part.h"
#include "consumer/producer.h"
#include "handlers/router.h"
#include "outbox/outbox.h"
#include "tokens/tokens.h"

/** A row whose E waits for the next A (finish.defer). */
typedef struct tbx__e_row {
	char msg_id[TBX_MSGID_MAX + 1];
	char in_token[TBX_UUID_LEN + 1]; /**< "" for untokened ingress */
	int in_set;			 /**< in_token is a token set */
	uint32_t in_tbit;		 /**< the record's bit in it */
	char row_id[TBX_UUID_LEN + 1];	 /**< its batch row (outbox.layout =
					      batch); "": a tbx_outbox row */
} tbx__e_row_t;

/** Per partition, the offsets F decided behind rows whose E waits. */
typedef struct tbx__e_offset {
	char topic[TBX_TOPIC_MAX + 1];
	int32_t partition;
	int64_t waiting; /**< committable once the waiting E commit; 0: none */
	int64_t ready;	 /**< their E committed: for the worker; 0: none */
} tbx__e_offset_t;

/** What the protocol works with, and its own state across batches. */
typedef struct tbx__proto {
	/* Handed over by the worker, which owns them. */
	tbx_outbox_t *store;	     /**< S, the service store */
	tbx_tokens_t *tokens;	     /**< T, the token store */
	rd_kafka_t **producer;	     /**< C dispatches through *producer and
					  replaces it after a fatal error */
	const tbx_conf_t *conf;	     /**< for a new producer */
	tbx__dispatch_stop_t c_stop; /**< C's reports given up at a stop */
	tbx_router_t *router;	     /**< the handlers */
	tbx_stats_t *stats;	     /**< counted into */
	char *errstr;		     /**< why a batch stopped the worker */
	size_t errstr_size;
	/* Settings, read once by the worker. */
	const char *group;
	const char *store_id;	/**< T's id: tbx-store of what is minted */
	const char *dlq_suffix; /**< dlq.suffix */
	int joined;		/**< one file for S and T (protocol.c) */
	int batch_max;		/**< batch.max.messages */
	int retry_max;		/**< retry.max */
	int backoff_ms, backoff_max_ms; /**< retry.backoff.ms, .max.ms */
	int untokened_offsets;		/**< ingress.untokened=offsets */
	int mismatch_stop;		/**< token.store.mismatch=stop */
	int64_t dispatch_retry_max;	/**< dispatch.retry.max */
	int defer_finish; /**< finish.defer, on one SQLite file: a batch's
			     D+E commit with the next A (proto_finish.c) */
	int batch_layout; /**< outbox.layout = batch: one tbx_obatch row per
			     batch (proto_obatch.c) */
	struct tbx__resume_mem *rmem; /**< batch_layout: the resume check's
					 memory (consumer/resume_mem.h) */
	int own_sets; /**< batch_layout and tokens.format = set: the batch
			 rows' own messages in token sets (tokfmt 2) */
	int dispatch_timeout_ms; /**< dispatch.timeout.ms: how long A waits
				    for a topic's partition count */
	struct tbx__partitioner *parts; /**< own_sets: the partition of
					   each message, chosen in A (made
					   with the first producer) */
	/* The protocol's own state. */
	tbx__guard_t guard;  /**< armed around each handler call */
	unsigned rand_state; /**< the backoff's jitter */
	uint64_t batch_gen;  /**< numbers batches for tbx__part_t.batch_mark */
	char mismatch_detail[TBX_TOPIC_MAX + 512]; /**< the last one seen */
	int txn_ended; /**< a handler ended A's transaction (PostgreSQL):
			  F records the alarm */
	/* The reconnects of S's and (apart) T's connections already counted
	 * (tbx__proto_reconnect_check). */
	uint64_t reconnects_seen[2];
	int reconnect_alarm[2];	       /**< its alarm not recorded yet */
	char reconnect_detail[2][512]; /**< and what it says */
	/* Records dropped as duplicates (no row, no token) in the current
	 * window, out of the tokened records looked up. */
	uint64_t dup_window_seen, dup_window_dropped;
	int64_t dup_warned_ms; /**< monotonic time of the last warning */
	char dup_prefix[TBX_TOPIC_MAX + 64]; /**< a partition whose prefix of
						  duplicates grew too long */
	/* finish.defer: the delivered rows whose D+E wait for the next A,
	 * and the offsets F decided behind them. */
	tbx__e_row_t *e_rows;
	size_t e_cnt, e_cap;
	tbx__e_offset_t *e_offs;
	size_t e_off_cnt, e_off_cap;
	int e_deferred; /**< this batch's E waits */
	/* batch_layout: A's gens per (topic, partition) of the batch, and
	 * per record the batch row tbx_cover_msg names ("": none). */
	struct tbx__ob_gen *ob_gens;
	size_t ob_gen_cnt;
	char (*ob_cover)[TBX_UUID_LEN + 1];
	/* batch_layout: stray records (tbx__stray_note()) already warned
	 * of, when (monotonic ms; 0: never), and the last one met. */
	uint64_t stray_warned;
	int64_t stray_warned_ms;
	char stray_detail[TBX_TOPIC_MAX + 160];
} tbx__proto_t;

/** F's result: per partition of the batch, what to commit and whether to
 *  hold it (tbx__part_outcome_t); the entries live in the batch. */
typedef struct tbx__proto_result {
	const tbx__part_outcome_t *parts;
	size_t part_cnt;
} tbx__proto_result_t;

/** Readies @p proto once its handed-over fields and settings are set:
 *  installs the handler guard on S and seeds the jitter. */
void tbx__proto_init(tbx__proto_t *proto);

/** Before G: numbers the batch (counted in stats.batches), marks the
 *  first record of each partition and clears the partitions' per-batch
 *  notes.  The batch is not empty. */
void tbx__proto_start(tbx__proto_t *proto, tbx__batch_t *batch);
/** G: one S transaction (relaxed: tbx_outbox_relaxed()) that reads what the
 *  partitions' last As left (deaths, suspicion, counts), decides whether
 *  A takes one record (isolation), and marks what A covers.
 *  @returns TBX_OK or the error that stopped it (A–E do not run). */
int tbx__proto_guard(tbx__proto_t *proto, tbx__batch_t *batch);
/** A–E over the batch, after a G that succeeded.  @returns TBX_OK or
 *  the error that stopped a phase (the rest waits for redelivery);
 *  TBX_EMISMATCH with token.store.mismatch=stop. */
int tbx__proto_process(tbx__proto_t *proto, tbx__batch_t *batch);
/** F: after G and A–E (@p err, what stopped them): logs a batch left
 *  unfinished, and decides per partition the offset after its last done
 *  record and, when a record is not done, the hold that restarts there
 *  after the RETRY backoff or after a backoff for consecutive failures;
 *  or, for the next record of a suspect range, that the partition's
 *  records from there stay in the batch for the next one (marked:
 *  tbx__batch_keep()).  The caller stores and commits the offsets and
 *  applies the holds. */
void tbx__proto_finish(tbx__proto_t *proto, tbx__batch_t *batch, int err,
		       tbx__proto_result_t *result);

/**
 * Commits the D+E that wait (finish.defer) in a transaction of their own,
 * when no A follows soon: an empty poll, a revocation, the worker's close.
 * Their offsets become ready (tbx__proto_take_ready()).  @returns TBX_OK
 * (also when nothing waits) or the store's error; what waits still waits.
 */
int tbx__proto_flush(tbx__proto_t *proto);
/** Rows whose D+E wait. */
size_t tbx__proto_waiting(const tbx__proto_t *proto);
/**
 * Moves the offsets whose E committed into @p offsets, each the larger of
 * it and what @p offsets already holds for its partition.  Only these, and
 * F's own commits, may be stored and committed.
 */
void tbx__proto_take_ready(tbx__proto_t *proto,
			   rd_kafka_topic_partition_list_t *offsets);
/** Forgets the offsets of @p parts (revoked: no longer this worker's to
 *  commit).  Their rows' D+E still commit with the next A or flush. */
void tbx__proto_forget(tbx__proto_t *proto,
		       const rd_kafka_topic_partition_list_t *parts);
/** outbox.layout = batch: the resume check's counters into stats. */
void tbx__ob_stats(tbx__proto_t *proto);
/** Frees what the protocol allocated across batches. */
void tbx__proto_free(tbx__proto_t *proto);

/** Counts (stats.store_reconnects) the connections of S and, when apart,
 *  T made again since the last call (PostgreSQL: lost and reconnected;
 *  SQLite: never), and records a store_reconnect alarm for each store
 *  whose connection was, for `inspect status --check`. */
void tbx__proto_reconnect_check(tbx__proto_t *proto);

/** Logs at WARN the stray records A met since the last warning (a record
 *  whose tbx-tbit names another partition than the one it arrived on,
 *  counted in stats.stray_records), at most once per TBX_STRAY_WARN_MS,
 *  and records the stray_records alarm with it for `inspect status
 *  --check`.  Called after each batch, outside any transaction. */
void tbx__proto_stray_check(tbx__proto_t *proto);
/** The least time between two warnings of tbx__proto_stray_check(). */
#define TBX_STRAY_WARN_MS 60000

/**
 * Finishes this group's outbox rows created at or before
 * @p created_before_ms (at most @p limit) whose records are no longer
 * redelivered: B–E with the same ids and tokens, as a redelivery would,
 * using @p batch (empty) for the rows.  Safe while workers run.
 * *finished receives the rows done.
 */
int tbx__proto_redispatch(tbx__proto_t *proto, tbx__batch_t *batch,
			  int64_t created_before_ms, size_t limit,
			  size_t *finished);
/**
 * The recovery pass for one owned partition: finishes (B–E, as
 * tbx__proto_redispatch) at most @p limit of the group's rows whose
 * record lies below @p committed, the partition's committed offset:
 * records that will not be delivered again.  Counted, logged at WARN and
 * marked in the store (stuck_ms) first.  *found and *finished receive
 * the rows found and finished.
 */
int tbx__proto_recover(tbx__proto_t *proto, tbx__batch_t *batch,
		       const char *topic, int32_t partition, int64_t committed,
		       size_t limit, size_t *found, size_t *finished);

#endif
