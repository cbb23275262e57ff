/*
 * Offset commits the group keeps refusing.
 *
 * A refused commit is sent again (worker_rebalance.c, tbx__worker_on_commit()),
 * and a rebalance normally ends within a few seconds.  When the coordinator
 * goes on refusing the commits of a partition this worker keeps (a rebalance
 * that does not settle, a commit error that does not pass), the group's
 * committed offset stays behind the records the worker processed: its
 * lag does not fall, and a worker that dies then leaves the next owner
 * more to redeliver.  Nothing is lost (redeliveries are deduplicated),
 * but an operator must hear of it: after commit.behind.alarm.ms the
 * partition is named in a WARN line, counted (commit_alarms) and marked
 * in the service store (the commit_behind alarm of `inspect status
 * --check`), and again every interval while it lasts.  When the group
 * accepts the partition's commits again that is logged too; the alarm
 * stays in the store for the operator to remove.
 *
 * The time is measured from the first refusal since the last accepted
 * commit of the partition: every commit carries the offsets processed
 * so far, so an accepted one leaves the committed offset at the
 * processed position.  A partition revoked meanwhile is forgotten (its
 * next owner starts from the committed offset).
 */
#include <inttypes.h>
#include <stdio.h>

#include "consumer/worker.h"

void tbx__commit_watch_result(tbx_worker_t *worker, rd_kafka_resp_err_t err,
			      const rd_kafka_topic_partition_list_t *offsets)
{
	int64_t now = tbx__mono_ms();

	/* Nothing to commit: no news about the committed offsets. */
	if (err == RD_KAFKA_RESP_ERR__NO_OFFSET)
		return;
	if (!offsets) {
		/* A refusal that names no partition: all of ours. */
		if (!err)
			return;
		worker->commit_refused_err = err;
		for (size_t i = 0; i < worker->part_cnt; i++)
			if (!worker->parts[i].commit_behind_ms)
				worker->parts[i].commit_behind_ms = now;
		return;
	}
	for (int i = 0; i < offsets->cnt; i++) {
		const rd_kafka_topic_partition_t *tp = &offsets->elems[i];
		rd_kafka_resp_err_t perr = err ? err : tp->err;
		tbx__part_t *part =
		    tbx__part_get(worker, tp->topic, tp->partition, 0);

		/* No offset of it in this commit (none stored). */
		if (!part || tp->offset < 0)
			continue;
		if (perr) {
			worker->commit_refused_err = perr;
			if (!part->commit_behind_ms)
				part->commit_behind_ms = now;
			continue;
		}
		if (part->commit_alarm_ms)
			tbx__log(TBX_LOG_WARNING,
				 "%s [%" PRId32 "]: the group accepts offset "
				 "commits again (committed offset %" PRId64
				 ") after refusing them for %" PRId64
				 " ms; the commit_behind alarm stays in the "
				 "service store until removed",
				 part->topic, part->partition, tp->offset,
				 now - part->commit_behind_ms);
		part->commit_behind_ms = part->commit_alarm_ms = 0;
	}
}

/* Records the alarm in a transaction of its own; a failure is logged
 * (the WARN line about the partition has been written already). */
static void alarm_record(tbx_worker_t *worker, const char *detail)
{
	int err = tbx_outbox_begin(worker->store);

	if (!err && ((err = tbx_outbox_alarm_add(worker->store, worker->group,
						 "commit_behind", detail)) ||
		     (err = tbx_outbox_commit(worker->store))))
		tbx_outbox_rollback(worker->store);
	if (err)
		tbx__log(TBX_LOG_WARNING,
			 "cannot record the commit_behind alarm in the "
			 "service store: %s",
			 tbx_strerror(err));
}

void tbx__commit_watch_check(tbx_worker_t *worker)
{
	int64_t now = tbx__mono_ms(),
		after = worker->cfg->commit_behind_alarm_ms;
	char detail[TBX_TOPIC_MAX + TBX_GROUP_MAX + 512];

	if (after <= 0)
		return;
	for (size_t i = 0; i < worker->part_cnt; i++) {
		tbx__part_t *part = &worker->parts[i];

		if (!part->commit_behind_ms ||
		    now - part->commit_behind_ms < after ||
		    (part->commit_alarm_ms &&
		     now - part->commit_alarm_ms < after))
			continue;
		part->commit_alarm_ms = now;
		worker->stats.commit_alarms++;
		snprintf(detail, sizeof(detail),
			 "%s [%" PRId32 "]: the group has refused the offset "
			 "commits of group %s for %" PRId64
			 " ms (last: %s); its committed offset stays behind "
			 "the records processed",
			 part->topic, part->partition, worker->group,
			 now - part->commit_behind_ms,
			 rd_kafka_err2str(worker->commit_refused_err));
		tbx__log(TBX_LOG_WARNING,
			 "%s; commits are sent again, the lag does not fall "
			 "meanwhile (commit.behind.alarm.ms=%" PRId64 ")",
			 detail, after);
		alarm_record(worker, detail);
	}
}
