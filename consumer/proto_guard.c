/*
 * G, the guard (docs/architecture.md, "Poison records"): the crash marker
 * written before A, the suspect range isolated one record at a time, and
 * the marker cleared inside A or released after a failed A; with
 * tbx__proto_start() and tbx__proto_guard().
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/crash.h"
#include "base/log.h"
#include "consumer/proto_internal.h"
#include "consumer/protocol.h"

/* Is @p i the first record of its partition in the batch?  (Marked once
 * per batch by mark_firsts().) */
int tbx__first_of_part(const tbx__batch_t *batch, size_t i)
{
	return batch->msgs[i].first;
}

static void mark_firsts(tbx__proto_t *proto, tbx__batch_t *batch)
{
	uint64_t gen = ++proto->batch_gen;

	for (size_t i = 0; i < batch->cnt; i++) {
		tbx__part_t *part = batch->msgs[i].part;
		batch->msgs[i].first = part->batch_mark != gen;
		part->batch_mark = gen;
	}
}

static int64_t last_offset_of_part(const tbx__batch_t *batch, size_t i)
{
	int64_t last = batch->msgs[i].rkm->offset;

	for (size_t j = i + 1; j < batch->cnt; j++)
		if (batch->msgs[j].part == batch->msgs[i].part)
			last = batch->msgs[j].rkm->offset;
	return last;
}

/*
 * Isolation is logged per range, not per record (a 500-record range would
 * otherwise write 500 WARN lines in seconds): a WARN when G first finds
 * @p part suspect, naming the range; a NOTICE when the partition is past
 * it, with how many records were taken one at a time and how many of
 * them were dead-lettered.  Each isolated record gets a DEBUG line.
 */
static void isolation_end(tbx__part_t *part)
{
	tbx__log(TBX_LOG_NOTICE,
		 "%s [%" PRId32 "]: isolation of offsets %" PRId64 "..%" PRId64
		 " over: %" PRIu64 " record(s) taken one at a time, %" PRIu64
		 " dead-lettered; back to full batches",
		 part->topic, part->partition, part->iso_from, part->iso_until,
		 part->iso_records, part->iso_dead);
	part->iso_active = 0;
}

/* G found @p part suspect up to @p suspect (-1: not suspect) at a batch
 * whose first record of the partition is @p first. */
static void isolation_track(tbx__part_t *part, int64_t first, int64_t suspect)
{
	if (suspect < 0) {
		if (part->iso_active)
			isolation_end(part); /* past it: done or skipped */
		return;
	}
	if (part->iso_active) {
		if (suspect > part->iso_until) {
			tbx__log(TBX_LOG_INFO,
				 "%s [%" PRId32 "]: the isolated range now "
				 "ends at offset %" PRId64
				 " (another batch died)",
				 part->topic, part->partition, suspect);
			part->iso_until = suspect;
		}
		return;
	}
	part->iso_active = 1;
	part->iso_from = first;
	part->iso_until = suspect;
	part->iso_records = part->iso_dead = 0;
	tbx__log(TBX_LOG_WARNING,
		 "%s [%" PRId32 "]: an earlier batch died before committing; "
		 "offsets %" PRId64 "..%" PRId64
		 " are taken one record per batch to find the record at fault",
		 part->topic, part->partition, first, suspect);
}

/* A committed a batch that isolated one record: count it, and end the
 * isolation at the end of the range. */
void tbx__isolation_count(const tbx__batch_t *batch)
{
	const struct tbx_msg *msg = &batch->msgs[batch->isolated];
	tbx__part_t *part = msg->part;

	if (!part->iso_active)
		return;
	if (msg->state == TBX_MS_ROW || msg->state == TBX_MS_DROPPED) {
		part->iso_records++;
		part->iso_dead += batch->dead_lettered;
		if (msg->rkm->offset >= part->iso_until)
			isolation_end(part);
	}
}

/* The batch's partitions, in the order of their first records, and
 * their markers as tbx_outbox_inflight_get_many() read them. */
typedef struct guard_read {
	size_t n;
	const char **topics;
	int32_t *parts;
	tbx__inflight_t *f;
	int *found;
} guard_read_t;

static void guard_read_free(guard_read_t *r)
{
	free(r->topics);
	free(r->parts);
	free(r->f);
	free(r->found);
}

/* Every partition's marker in one call: on PostgreSQL one round trip
 * instead of one per partition. */
static int guard_read(tbx__proto_t *proto, const tbx__batch_t *batch,
		      guard_read_t *r)
{
	size_t n = 0;

	memset(r, 0, sizeof(*r));
	for (size_t i = 0; i < batch->cnt; i++)
		n += tbx__first_of_part(batch, i) != 0;
	r->topics = malloc((n + 1) * sizeof(*r->topics));
	r->parts = malloc((n + 1) * sizeof(*r->parts));
	r->f = malloc((n + 1) * sizeof(*r->f));
	r->found = malloc((n + 1) * sizeof(*r->found));
	if (!r->topics || !r->parts || !r->f || !r->found)
		return TBX_ENOMEM;
	for (size_t i = 0; i < batch->cnt; i++) {
		if (!tbx__first_of_part(batch, i))
			continue;
		r->topics[r->n] = batch->msgs[i].part->topic;
		r->parts[r->n] = batch->msgs[i].part->partition;
		r->f[r->n] = (tbx__inflight_t){-1, -1, 0, -1, 0, -1, 0};
		r->n++;
	}
	return tbx_outbox_inflight_get_many(proto->store, proto->group,
					    r->topics, r->parts, r->n, r->f,
					    r->found);
}

/*
 * G: before any handler runs, commit per partition the offsets this A
 * covers.  A marker still there at the next batch means that A never
 * committed: the process died in it (or A failed).  Its partitions are
 * then suspect up to the end of their ranges, and while any partition of
 * a batch is suspect, A takes one record of the whole batch: the first
 * record of the first suspect partition.  A death counts against a
 * record only when its A covered that record and no other, of any
 * partition (lone), so whatever else was in a batch that died is never
 * blamed; a record whose lone As died retry.max times (at least once) is
 * dead-lettered without its handler.  The counts (deaths and RETRY
 * verdicts) live in the same row, for one record per partition, so they
 * outlast rebalances and restarts.  The marker commits relaxed
 * (tbx_outbox_relaxed(): SQLite's synchronous=NORMAL, PostgreSQL's
 * synchronous_commit=off): a process crash does not lose it, and a power
 * cut only loses a count.
 */
static int phase_guard(tbx__proto_t *proto, tbx__batch_t *batch)
{
	int limit = proto->retry_max > 0 ? proto->retry_max : 1;
	size_t chosen = SIZE_MAX, k = 0;
	guard_read_t rd;
	int err;

	if ((err = tbx_outbox_relaxed(proto->store, 1)))
		return err;
	if ((err = tbx_outbox_begin(proto->store)))
		goto out;
	if ((err = guard_read(proto, batch, &rd))) {
		guard_read_free(&rd);
		goto fail;
	}
	/* What the partitions left: deaths, suspicion and counts. */
	for (size_t i = 0; i < batch->cnt; i++) {
		struct tbx_msg *msg = &batch->msgs[i];
		tbx__part_t *part = msg->part;
		tbx__inflight_t f;
		int64_t a = msg->rkm->offset, suspect;
		int found;

		if (!tbx__first_of_part(batch, i))
			continue;
		f = rd.f[k];
		found = rd.found[k++];
		part->guard_found = found;
		part->guard_dirty = 0;
		/* A marker this process failed to release (its A failed,
		 * then so did the release: a full disk) is no death. */
		if (found && f.first >= 0 && part->guard_unreleased)
			f.first = f.last = -1;
		part->guard_unreleased = 0;
		suspect = f.suspect_until;
		if (f.first >= 0) { /* an A that never committed */
			if (f.last > suspect)
				suspect = f.last;
			if (f.lone) { /* its only record: the death is its */
				if (f.count_offset != f.first) {
					f.count_offset = f.first;
					f.retries = f.crashes = 0;
				}
				f.crashes++;
			}
			f.first = f.last = -1;
			f.lone = 0;
			part->guard_dirty = 1;
		}
		if (f.count_offset >= 0 && f.count_offset < a) {
			/* The partition is past it: done, or skipped. */
			f.count_offset = -1;
			f.retries = f.crashes = 0;
			part->guard_dirty = 1;
		}
		if (suspect >= 0 && suspect < a) {
			suspect = -1;
			part->guard_dirty = 1;
		}
		part->suspect_until = suspect;
		isolation_track(part, a, suspect);
		part->count_offset = f.count_offset;
		part->retries = f.retries;
		part->crashes = f.crashes;
		if (suspect >= 0 && chosen == SIZE_MAX)
			chosen = i;
	}
	guard_read_free(&rd);
	batch->isolating = chosen != SIZE_MAX;
	batch->isolated = chosen;
	for (size_t i = 0; i < batch->cnt; i++) {
		struct tbx_msg *msg = &batch->msgs[i];
		if (msg->rkm->offset != msg->part->count_offset)
			continue;
		msg->attempt = msg->part->retries + 1;
		if (msg->part->crashes >= limit)
			msg->crashes = msg->part->crashes;
	}
	if (batch->isolating) {
		struct tbx_msg *msg = &batch->msgs[chosen];
		tbx__log(TBX_LOG_DEBUG,
			 "%s [%" PRId32 "] @%" PRId64
			 ": an earlier batch died before committing; one "
			 "record at a time up to offset %" PRId64
			 " (this one: %d earlier deaths alone)",
			 msg->part->topic, msg->part->partition,
			 msg->rkm->offset, msg->part->suspect_until,
			 msg->rkm->offset == msg->part->count_offset
			     ? msg->part->crashes
			     : 0);
	}
	/* What this A covers: every record, or the one isolated. */
	for (size_t i = 0; i < batch->cnt && !err; i++) {
		tbx__part_t *part = batch->msgs[i].part;
		int covers =
		    !batch->isolating || part == batch->msgs[chosen].part;
		tbx__inflight_t next = {-1,
					-1,
					part->crashes,
					part->suspect_until,
					0,
					part->count_offset,
					part->retries};

		if (!tbx__first_of_part(batch, i))
			continue;
		part->batch_isolated = batch->isolating;
		if (covers) {
			next.first = batch->msgs[i].rkm->offset;
			next.last = batch->isolating
					? next.first
					: last_offset_of_part(batch, i);
			next.lone = batch->isolating || batch->cnt == 1;
		} else if (!part->guard_dirty) {
			continue; /* not touched by this batch */
		}
		if (next.first < 0 && next.suspect_until < 0 &&
		    next.count_offset < 0)
			err = part->guard_found
				  ? tbx_outbox_inflight_delete(
					proto->store, proto->group, part->topic,
					part->partition)
				  : TBX_OK;
		else
			err = tbx_outbox_inflight_put(proto->store,
						      proto->group, part->topic,
						      part->partition, &next);
	}
fail:
	/* A failed COMMIT may leave the transaction open: roll it back. */
	if (err || (err = tbx_outbox_commit(proto->store)))
		tbx_outbox_rollback(proto->store);
out:;
	int err2 = tbx_outbox_relaxed(proto->store, 0);
	return err ? err : err2;
}

/* Does this A cover @p part (see phase_guard)? */
static int guard_covers(const tbx__batch_t *batch, const tbx__part_t *part)
{
	return !batch->isolating || part == batch->msgs[batch->isolated].part;
}

/* Inside A's transaction: the A is over for the partitions it covered;
 * the counts go with it (a RETRY verdict counted, a record done). */
int tbx__guard_clear(tbx__proto_t *proto, tbx__batch_t *batch)
{
	for (size_t i = 0; i < batch->cnt; i++) {
		tbx__part_t *part = batch->msgs[i].part;
		int64_t last = -1;
		int err;

		if (!tbx__first_of_part(batch, i) || !guard_covers(batch, part))
			continue;
		for (size_t j = i; j < batch->cnt; j++) {
			const struct tbx_msg *msg = &batch->msgs[j];
			if (msg->part != part || msg->state == TBX_MS_SKIPPED)
				continue;
			last = msg->rkm->offset;
			if (msg->rkm->offset == part->count_offset &&
			    (msg->state == TBX_MS_ROW ||
			     msg->state == TBX_MS_DROPPED)) {
				part->count_offset = -1;
				part->retries = part->crashes = 0;
			}
		}
		tbx__inflight_t f = {
		    -1,
		    -1,
		    part->crashes,
		    part->suspect_until > last ? part->suspect_until : -1,
		    0,
		    part->count_offset,
		    part->retries};
		if (f.suspect_until >= 0 || f.count_offset >= 0)
			err = tbx_outbox_inflight_put(proto->store,
						      proto->group, part->topic,
						      part->partition, &f);
		else
			err = tbx_outbox_inflight_delete(
			    proto->store, proto->group, part->topic,
			    part->partition);
		if (err)
			return err;
	}
	return TBX_OK;
}

/* After a failed A the process lives on: the marker must not count as a
 * death.  If the release fails too (the failure that failed A, a full
 * disk, often fails it as well), the partitions remember in memory that
 * the marker is theirs; a marker found after a restart or by another
 * worker still counts.  The counts stay as G found them. */
void tbx__guard_release(tbx__proto_t *proto, tbx__batch_t *batch)
{
	int err;

	if (!(err = tbx_outbox_begin(proto->store))) {
		for (size_t i = 0; i < batch->cnt && !err; i++) {
			tbx__part_t *part = batch->msgs[i].part;

			if (tbx__first_of_part(batch, i) &&
			    guard_covers(batch, part))
				err = tbx_outbox_inflight_release(
				    proto->store, proto->group, part->topic,
				    part->partition);
		}
		if (err || (err = tbx_outbox_commit(proto->store)))
			tbx_outbox_rollback(proto->store);
	}
	for (size_t i = 0; i < batch->cnt; i++)
		batch->msgs[i].part->guard_unreleased = err != 0;
}

void tbx__proto_start(tbx__proto_t *proto, tbx__batch_t *batch)
{
	proto->stats->batches++;
	mark_firsts(proto, batch);
	for (size_t i = 0; i < batch->cnt; i++) {
		batch->msgs[i].part->batch_blocked = 0;
		batch->msgs[i].part->batch_delay_ms = 0;
		batch->msgs[i].part->batch_isolated = 0;
		batch->msgs[i].part->suspect_until = -1;
	}
	batch->isolating = 0;
	proto->e_deferred = 0;
}

int tbx__proto_guard(tbx__proto_t *proto, tbx__batch_t *batch)
{
	int err;

	if ((err = phase_guard(proto, batch)))
		return err;
	tbx__crashpoint("G.marked");
	return TBX_OK;
}
