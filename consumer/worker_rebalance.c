/*
 * The worker's partitions and the consumer group's rebalances: the
 * partitions that wait for a retry (paused, resumed when due), a batch
 * dropped or abandoned, offset commits and their retry, and the rebalance
 * callback, which drops the records of revoked partitions from the batch
 * being collected.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/crash.h"
#include "base/file.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/producer.h"
#include "consumer/resume_mem.h"
#include "consumer/stores.h"
#include "consumer/worker.h"
#include "store/db.h"
#include "tokens/sweep.h"

/* How long after a refused offset commit it is sent again, ms. */
#define RECOMMIT_DELAY_MS 500

tbx__part_t *tbx__part_get(tbx_worker_t *worker, const char *topic,
			   int32_t partition, int create)
{
	tbx__part_t *part;

	for (size_t i = 0; i < worker->part_cnt; i++) {
		part = &worker->parts[i];
		if (part->partition == partition &&
		    strcmp(part->topic, topic) == 0)
			return part;
	}
	if (!create)
		return NULL;
	if (worker->part_cnt == worker->part_cap) {
		size_t cap = worker->part_cap ? worker->part_cap * 2 : 16;
		tbx__part_t *grown =
		    realloc(worker->parts, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		/* Batch records point at parts: collection never spans a
		 * realloc because assignment happens before records of the
		 * new partitions arrive, and revocation only shrinks. */
		for (size_t i = 0; i < worker->batch.cnt; i++)
			worker->batch.msgs[i].part =
			    grown +
			    (worker->batch.msgs[i].part - worker->parts);
		worker->parts = grown;
		worker->part_cap = cap;
	}
	part = &worker->parts[worker->part_cnt++];
	memset(part, 0, sizeof(*part));
	tbx__strlcpy(part->topic, topic, sizeof(part->topic));
	part->partition = partition;
	part->count_offset = -1;
	part->assigned_ms = tbx__mono_ms();
	for (size_t i = 0; i < tbx_router_topic_count(worker->router); i++)
		if (strcmp(tbx_router_topic(worker->router, i), topic) == 0)
			part->since = worker->since[i];
	return part;
}

static void part_remove(tbx_worker_t *worker, const char *topic,
			int32_t partition)
{
	tbx__part_t *part = tbx__part_get(worker, topic, partition, 0);
	size_t idx;

	if (!part)
		return;
	idx = (size_t)(part - worker->parts);
	/* The batch must not keep records of a partition being removed:
	 * the caller dropped them first.  Records of the moved last part
	 * are re-pointed. */
	tbx__part_t *last = &worker->parts[worker->part_cnt - 1];
	for (size_t i = 0; i < worker->batch.cnt; i++)
		if (worker->batch.msgs[i].part == last)
			worker->batch.msgs[i].part = part;
	worker->parts[idx] = *last;
	worker->part_cnt--;
}

static rd_kafka_topic_partition_list_t *one_part(const tbx__part_t *part,
						 int64_t offset)
{
	rd_kafka_topic_partition_list_t *list =
	    rd_kafka_topic_partition_list_new(1);

	rd_kafka_topic_partition_list_add(list, part->topic, part->partition)
	    ->offset = offset;
	return list;
}

/* Pauses @p part and arranges to restart it at @p offset after a backoff
 * of @p delay_ms (a hold F decided). */
void tbx__part_hold(tbx_worker_t *worker, tbx__part_t *part, int64_t offset,
		    int64_t delay_ms)
{
	rd_kafka_topic_partition_list_t *list;

	part->seek_offset = offset;
	part->resume_at_ms = tbx__mono_ms() + delay_ms;
	if (part->paused)
		return;
	part->paused = 1;
	list = one_part(part, offset);
	rd_kafka_pause_partitions(worker->consumer, list);
	rd_kafka_topic_partition_list_destroy(list);
	tbx__log(TBX_LOG_INFO,
		 "%s [%" PRId32 "] waits %" PRId64
		 " ms, then resumes at offset %" PRId64,
		 part->topic, part->partition, delay_ms, offset);
}

/* Resumes partitions whose wait is over: seek back to the first record
 * not done, then resume fetching.  Records fetched before the seek are
 * discarded by librdkafka (the seek bumps the fetch version). */
void tbx__worker_resume_due(tbx_worker_t *worker)
{
	int64_t now = tbx__mono_ms();

	for (size_t i = 0; i < worker->part_cnt; i++) {
		tbx__part_t *part = &worker->parts[i];
		rd_kafka_topic_partition_list_t *list;
		rd_kafka_error_t *error;

		if (!part->paused || now < part->resume_at_ms)
			continue;
		list = one_part(part, part->seek_offset);
		error = rd_kafka_seek_partitions(worker->consumer, list, 5000);
		if (error) {
			tbx__log(TBX_LOG_WARNING,
				 "%s [%" PRId32 "]: seek failed: %s; retrying",
				 part->topic, part->partition,
				 rd_kafka_error_string(error));
			rd_kafka_error_destroy(error);
			rd_kafka_topic_partition_list_destroy(list);
			part->resume_at_ms =
			    now + worker->cfg->retry_backoff_ms;
			continue;
		}
		rd_kafka_resume_partitions(worker->consumer, list);
		rd_kafka_topic_partition_list_destroy(list);
		part->paused = 0;
	}
}

/* Drops the batch unprocessed while its partitions stay assigned: each is
 * held at its first record in the batch, to be fetched again from there
 * (the consumer's position is past the records polled, and past those
 * kept from the last batch). */
void tbx__worker_batch_abandon(tbx_worker_t *worker)
{
	tbx__batch_t *batch = &worker->batch;

	/* No record of a paused partition is in a batch
	 * (tbx__worker_batch_push()): the first of each partition pauses it. */
	for (size_t i = 0; i < batch->cnt; i++)
		if (!batch->msgs[i].part->paused)
			tbx__part_hold(worker, batch->msgs[i].part,
				       batch->msgs[i].rkm->offset, 0);
	tbx__batch_reset(batch);
}

/* Drops batch records of partitions in @p parts (revoked). */
void tbx__worker_batch_drop(tbx_worker_t *worker,
			    const rd_kafka_topic_partition_list_t *parts)
{
	tbx__batch_t *batch = &worker->batch;
	size_t kept = 0;

	for (size_t i = 0; i < batch->cnt; i++) {
		struct tbx_msg *msg = &batch->msgs[i];
		int revoked = 0;
		for (int j = 0; j < parts->cnt && !revoked; j++)
			revoked =
			    parts->elems[j].partition == msg->rkm->partition &&
			    strcmp(parts->elems[j].topic, msg->topic) == 0;
		if (revoked)
			rd_kafka_message_destroy(msg->rkm);
		else
			batch->msgs[kept++] = *msg;
	}
	batch->cnt = kept;
}

/* Stores @p offsets and, when @p async, commits them asynchronously
 * (else the caller's synchronous commit of the stored offsets follows). */
void tbx__worker_offsets_commit(tbx_worker_t *worker,
				rd_kafka_topic_partition_list_t *offsets,
				int async)
{
	rd_kafka_resp_err_t rerr;

	if (!offsets->cnt)
		return;
	if ((rerr = rd_kafka_offsets_store(worker->consumer, offsets)))
		tbx__log(TBX_LOG_INFO, "offsets store: %s",
			 rd_kafka_err2str(rerr));
	if (async && (rerr = rd_kafka_commit(worker->consumer, offsets, 1)))
		tbx__log(TBX_LOG_INFO, "commit: %s", rd_kafka_err2str(rerr));
}

/*
 * finish.defer: commits the D+E that wait for a next batch (proto_finish.c)
 * in a transaction of their own, then stores and commits the offsets
 * that were behind them, waiting for the commit when @p sync.  A failure
 * leaves rows and offsets waiting for the next batch or flush, and is
 * counted as a failed phase.  @returns TBX_OK or the store's error.
 */
int tbx__worker_finish_waiting(tbx_worker_t *worker, const char *when, int sync)
{
	rd_kafka_topic_partition_list_t *offsets;
	size_t rows = tbx__proto_waiting(&worker->proto);
	int err;

	if (rows && (err = tbx__proto_flush(&worker->proto))) {
		worker->stats.retries++;
		tbx__log(TBX_LOG_WARNING,
			 "%s: finishing %zu delivered rows failed: %s (their "
			 "offsets wait; tried again with the next batch)",
			 when, rows, tbx_strerror(err));
		return err;
	}
	if (!worker->consumer)
		return TBX_OK;
	offsets = rd_kafka_topic_partition_list_new(4);
	tbx__proto_take_ready(&worker->proto, offsets);
	tbx__worker_offsets_commit(worker, offsets, !sync);
	rd_kafka_topic_partition_list_destroy(offsets);
	return TBX_OK;
}

/*
 * Resumes the partitions of @p parts (being revoked) that wait for a
 * retry: librdkafka keeps a partition's pause flag across its revocation
 * and a later assignment, when the wait state here goes with the revoke.
 * The resume is queued before the unassignment's fetch stop, so it is
 * served before it and clears the flag.  Only paused partitions are
 * resumed (see the assignment in tbx__worker_on_rebalance()).
 */
static void resume_held(rd_kafka_t *rk, tbx_worker_t *worker,
			const rd_kafka_topic_partition_list_t *parts)
{
	rd_kafka_topic_partition_list_t *held = NULL;

	for (int i = 0; i < parts->cnt; i++) {
		tbx__part_t *part = tbx__part_get(worker, parts->elems[i].topic,
						  parts->elems[i].partition, 0);

		if (!part || !part->paused)
			continue;
		if (!held)
			held = rd_kafka_topic_partition_list_new(parts->cnt);
		rd_kafka_topic_partition_list_add(held, part->topic,
						  part->partition);
		part->paused = 0;
	}
	if (!held)
		return;
	rd_kafka_resume_partitions(rk, held);
	rd_kafka_topic_partition_list_destroy(held);
}

void tbx__worker_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
			      rd_kafka_topic_partition_list_t *parts,
			      void *opaque)
{
	tbx_worker_t *worker = opaque;
	int coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
	rd_kafka_error_t *error = NULL;

	/* Nothing the resume check's memory holds is trusted after a
	 * rebalance (docs/batched-tokens.md, "The resume check"). */
	if (worker->proto.rmem) {
		tbx__resume_mem_drop(worker->proto.rmem);
		tbx__ob_stats(&worker->proto);
	}
	if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		worker->assigned_once = 1;
		/* At the next step, outside the callback, before a record
		 * of these partitions is processed. */
		worker->layout_due = 1;
		for (int i = 0; i < parts->cnt; i++)
			tbx__part_get(worker, parts->elems[i].topic,
				      parts->elems[i].partition, 1);
		tbx__membership_changed(worker, 1, parts, 0);
		/* At the next poll, outside the callback: rows of these
		 * partitions left below their committed offset. */
		worker->recovery_due = 1;
		/* No resume here, not even of a partition a former
		 * assignment paused (the revoke resumed those): librdkafka
		 * 2.0.2 gives every resume a new op version, paused or not,
		 * and a partition's fetch start that took its version just
		 * before is dropped as outdated.  The partition is then never
		 * fetched, with nothing logged. */
		if (coop)
			error = rd_kafka_incremental_assign(rk, parts);
		else
			rd_kafka_assign(rk, parts);
	} else {
		/* Revoked (or an error): what is done was stored after the
		 * last batch (the rows whose D+E wait are finished first);
		 * commit it now while we still own it.  Records of these
		 * partitions in the batch being collected are dropped
		 * unprocessed: the next owner starts from the committed
		 * offset. */
		int lost = rd_kafka_assignment_lost(rk);
		int doing = atomic_load(&worker->doing);

		/* Served inside a poll or the close: back to that after. */
		tbx__worker_doing(worker, TBX__DOING_REVOKE);
		tbx__worker_finish_waiting(worker, "revocation", 1);
		if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS && !lost)
			rd_kafka_commit(rk, NULL, 0);
		tbx__worker_doing(worker, doing);
		tbx__proto_forget(&worker->proto, parts);
		tbx__worker_batch_drop(worker, parts);
		resume_held(rk, worker, parts);
		for (int i = 0; i < parts->cnt; i++)
			part_remove(worker, parts->elems[i].topic,
				    parts->elems[i].partition);
		tbx__membership_changed(worker, 0, parts, lost);
		if (coop)
			error = rd_kafka_incremental_unassign(rk, parts);
		else
			rd_kafka_assign(rk, NULL);
	}
	if (error) {
		tbx__log(TBX_LOG_ERR, "rebalance: %s",
			 rd_kafka_error_string(error));
		rd_kafka_error_destroy(error);
	}
}

/*
 * The result of an offset commit.  The group refuses commits while it
 * rebalances (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID);
 * a member that keeps its partitions through the rebalance (cooperative
 * assignment) and has nothing more to process would not commit again, and
 * the group's committed offsets would stay behind the records it
 * processed.  So a refused commit is sent again from the poll loop: the
 * stored offsets of the partitions still assigned.
 */
void tbx__worker_on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
			   rd_kafka_topic_partition_list_t *offsets,
			   void *opaque)
{
	tbx_worker_t *worker = opaque;
	rd_kafka_resp_err_t first = err;

	tbx__commit_watch_result(worker, err, offsets);
	for (int i = 0; offsets && !first && i < offsets->cnt; i++)
		first = offsets->elems[i].err;
	if (!first || first == RD_KAFKA_RESP_ERR__NO_OFFSET)
		return;
	worker->stats.commits_retried++;
	if (!worker->recommit) {
		worker->recommit = 1;
		worker->next_recommit_ms = tbx__mono_ms() + RECOMMIT_DELAY_MS;
	}
	/* Refusals of a rebalance are expected; anything else is news. */
	tbx__log(first == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS ||
			 first == RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION ||
			 first == RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID
		     ? TBX_LOG_INFO
		     : TBX_LOG_WARNING,
		 "offset commit refused (%s): committing again in %d ms",
		 rd_kafka_err2str(first), RECOMMIT_DELAY_MS);
}

/* Sends the commit tbx__worker_on_commit() asked for, once it is due. */
void tbx__worker_recommit_due(tbx_worker_t *worker)
{
	if (!worker->recommit || !worker->consumer ||
	    tbx__mono_ms() < worker->next_recommit_ms)
		return;
	worker->recommit = 0;
	rd_kafka_commit(worker->consumer, NULL, 1);
}
