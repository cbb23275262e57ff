/*
 * F, commit (docs/architecture.md): per partition, the offset after what
 * is done, and whether (and how long) to hold the partition back.
 */
#include <inttypes.h>

#include "base/log.h"
#include "consumer/proto_internal.h"
#include "consumer/protocol.h"

/* A row is done when E deleted it, or another worker finished it. */
int tbx__row_done(const tbx__brow_t *brow)
{
	return brow->state == TBX_BROW_FINISHED || brow->state == TBX_BROW_GONE;
}

static int msg_done(const tbx__batch_t *batch, const struct tbx_msg *msg)
{
	if (msg->state == TBX_MS_DROPPED)
		return 1;
	if (msg->state == TBX_MS_ROW)
		return tbx__row_done(&batch->rows[msg->row]);
	return 0;
}

/* Marks @p part's records from offset @p from on to stay in the batch
 * for the next one (tbx__batch_keep()). */
static void keep_records(tbx__batch_t *batch, const tbx__part_t *part,
			 int64_t from)
{
	for (size_t i = 0; i < batch->cnt; i++)
		if (batch->msgs[i].part == part &&
		    batch->msgs[i].rkm->offset >= from)
			batch->msgs[i].keep = 1;
}

/* F: per partition, commit up to the first record not done; a partition
 * with unfinished records waits, then restarts from there.  The next
 * record of a suspect range is not waited for: the partition's records
 * not done stay in the batch and the next batch starts with them, since
 * they were all skipped (no handler ran on them) and the consumer hands
 * over what follows them.  A seek back and a fetch instead would cost a
 * round trip to the broker per isolated record (librdkafka waits up to
 * fetch.wait.max.ms for it).  Decided here, applied by the caller (the
 * worker's loop). */
void tbx__phase_commit(tbx__proto_t *proto, tbx__batch_t *batch)
{
	batch->outcome_cnt = 0;
	for (size_t i = 0; i < batch->cnt; i++) {
		tbx__part_t *part = batch->msgs[i].part;
		tbx__part_outcome_t *out;
		int64_t next = -1, first_undone = -1;
		int skipped = 0; /* every record from first_undone on */

		if (!tbx__first_of_part(batch, i))
			continue;
		for (size_t j = i; j < batch->cnt; j++) {
			const struct tbx_msg *msg = &batch->msgs[j];
			if (msg->part != part)
				continue;
			if (first_undone >= 0) {
				skipped &= msg->state == TBX_MS_SKIPPED;
				continue;
			}
			if (!msg_done(batch, msg)) {
				first_undone = msg->rkm->offset;
				skipped = msg->state == TBX_MS_SKIPPED;
				continue;
			}
			next = msg->rkm->offset + 1;
		}
		/* finish.defer: an offset behind rows whose E waits, or
		 * after one that waits, is committed once that E commits
		 * (never before: the model's BUG_DEFER_COMMITS_EARLY). */
		if (next >= 0 && proto->defer_finish &&
		    (proto->e_deferred || tbx__e_waits(proto, part))) {
			tbx__e_offset_t *o = tbx__e_offset(proto, part, 1);
			if (o && next > o->waiting)
				o->waiting = next;
			else if (!o)
				tbx__log(TBX_LOG_WARNING,
					 "%s [%" PRId32 "]: out of memory: "
					 "offset %" PRId64 " not committed "
					 "(its records are redelivered and "
					 "dropped)",
					 part->topic, part->partition, next);
			next = -1;
		}
		/* At most one per record: the batch has room for it. */
		out = &batch->outcomes[batch->outcome_cnt++];
		out->part = part;
		out->commit = next;
		out->hold = first_undone >= 0;
		out->seek = first_undone;
		out->wait_ms = 0;
		out->keep = 0;
		if (first_undone >= 0) {
			if (part->batch_blocked) {
				out->wait_ms = part->batch_delay_ms;
			} else if (part->batch_isolated && skipped) {
				/* next record of a suspect range: at once,
				 * from the records in hand */
				out->hold = 0;
				out->keep = 1;
				keep_records(batch, part, first_undone);
			} else {
				/* A phase failed: retried like a RETRY */
				out->wait_ms =
				    tbx__backoff_ms(proto, ++part->failures);
				proto->stats->retries++;
			}
		} else {
			part->failures = 0;
		}
	}
}
