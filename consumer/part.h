/*
 * Per assigned partition state: what the worker's loop keeps between
 * batches (pause, backoff, where to restart), what G loads from and A
 * saves to the service store (the counts of tbx_inflight), and what one
 * batch's phases note on the way; and F's decision for one partition,
 * which the loop applies (worker_poll.c).
 *
 * @locality the worker's thread.
 */
#ifndef TBX_CONSUMER_PART_H
#define TBX_CONSUMER_PART_H

#include <stdint.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"

/** Per assigned partition state that outlives a batch. */
typedef struct tbx__part {
	char topic[TBX_TOPIC_MAX + 1];
	int32_t partition;
	int paused;	     /**< waiting for resume_at_ms */
	int64_t assigned_ms; /**< when it was assigned (monotonic) */
	int fetch_seen;	     /**< the client fetched it once (a high
				watermark known): tbx__fetch_check() */
	int fetch_alarmed;   /**< the fetch_stall alarm was raised for it */
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
	/* The suspect range being isolated (proto_guard.c): logged when
	 * it begins and when it ends, not per record. */
	int iso_active;	      /**< a range is being isolated */
	int64_t iso_from;     /**< its first offset seen */
	int64_t iso_until;    /**< its last offset */
	uint64_t iso_records; /**< records taken one at a time */
	uint64_t iso_dead;    /**< of those, dead-lettered */
	int settled; /**< a tokened record had work since the assignment:
			the redelivered prefix is over */
	uint64_t prefix_drops; /**< duplicates dropped before that */
	int64_t broke_next;    /**< offset + 1 of a record whose handler
				    tried to commit A (refused, A rolled
				    back) or broke the record's savepoint:
				    dead-lettered next; 0: none */
	int broke_savepoint;   /**< that record's handler broke the
				    savepoint (else: tried to commit) */
	/* commit_watch.c: monotonic time of the first commit of it the
	 * group refused since it last accepted one (0: none), and of the
	 * last alarm about it (0: none yet). */
	int64_t commit_behind_ms, commit_alarm_ms;
} tbx__part_t;

/** F's decision for one partition of a batch: what the loop stores and
 *  commits, and whether it holds the partition back, or keeps its
 *  records not done for the next batch. */
typedef struct tbx__part_outcome {
	tbx__part_t *part;
	int64_t commit;	 /**< offset after the last done record, to store
			      and commit; -1: none done */
	int hold;	 /**< a record is not done: pause the partition, */
	int64_t seek;	 /**< then restart at this offset (that record) */
	int64_t wait_ms; /**< after this wait */
	int keep; /**< instead of a hold (the next record of a suspect range):
		     the records from seek on stay in the batch, marked
		     (tbx_msg.keep), and the next batch starts with them;
		     no pause, no seek, nothing fetched again */
} tbx__part_outcome_t;

#endif
