/*
 * The exactly-once protocol over one batch (docs/architecture.md):
 *
 *   G  guard     record the offsets A is about to process (crash detection)
 *   A  process   one S transaction, a savepoint per record
 *   B  tokens    mint + register in one T transaction; record in one S txn
 *   C  dispatch  confirm (drop registrations), produce, await reports
 *   D  consume   delete the batch's incoming tokens, one T transaction
 *   E  finish    delete finished outbox rows, one S transaction
 *   F  commit    decide, per partition, the offset after what is done
 *                and whether (and how long) to hold the partition back
 *
 * The worker's loop (worker_poll.c, tbx_worker_poll) drives a batch through
 * tbx__proto_start, tbx__proto_guard (G), tbx__proto_process (A–E) and
 * tbx__proto_finish (F), and then applies F's result: it stores and
 * commits the offsets and pauses the partitions to hold (protocol.h).
 *
 * When S and T are one file (proto->joined), B happens inside A: each
 * row gets its attempt and tokens in its record's savepoint and they
 * commit with the handler's effects, so no registration is needed and C
 * has nothing to confirm; D and E are one transaction.  A batch then
 * costs two synced commits (A, D+E) instead of six.
 *
 * Every phase works on the whole batch.  A phase that fails leaves what it
 * did not finish to redelivery: F commits, per partition, only up to the
 * first record not done and makes the partition wait and restart there.
 * The outbox row anchors recovery, so whatever is persisted is resumed.
 *
 * Crash points (tbx__crashpoint) sit between every pair of persistent
 * steps; tests kill the process at each and check the invariants.
 *
 * This file holds the entry points, the reconnect and duplicate-share
 * checks; each phase, or pair of phases, is in a file of its own:
 *
 *   proto_guard.c     G, isolation of a suspect range, tbx__proto_start
 *   proto_process.c   A over the batch: locks, lookups, its transaction
 *   proto_record.c    A for one record: handler, outbox row, dead letters
 *   proto_tokens.c    B
 *   proto_dispatch.c  C, and giving up a message the broker refuses
 *   proto_finish.c    D and E, and finish.defer's waiting D+E
 *   proto_commit.c    F
 *
 * What one of them calls in another is declared in proto_internal.h.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "consumer/producer.h"
#include "consumer/proto_internal.h"
#include "consumer/protocol.h"
#include "consumer/tracing.h"
#include "store/pg.h"

void tbx__proto_init(tbx__proto_t *proto)
{
	tbx__guard_install(&proto->guard, proto->store, proto->stats);
	proto->rand_state = (unsigned)getpid() ^ (unsigned)tbx__now_ms();
}

/* Records an alarm in a transaction of its own (best effort: the log
 * line has been written already).  @returns TBX_OK or the error. */
int tbx__alarm_commit(tbx__proto_t *proto, const char *name, const char *detail)
{
	int err;

	if ((err = tbx_outbox_begin(proto->store)))
		return err;
	if ((err = tbx_outbox_alarm_add(proto->store, proto->group, name,
					detail)) ||
	    (err = tbx_outbox_commit(proto->store)))
		tbx_outbox_rollback(proto->store);
	return err;
}

void tbx__proto_reconnect_check(tbx__proto_t *proto)
{
	struct tbx__pg *pg[2] = {tbx_outbox_pg(proto->store),
				 tbx_tokens_pg(proto->tokens)};
	static const char *const which[2] = {"service store", "token store"};

	if (pg[1] == pg[0])
		pg[1] = NULL; /* joined: one connection, counted once */
	for (int i = 0; i < 2; i++) {
		uint64_t n = tbx__pg_reconnects(pg[i]);

		if (n > proto->reconnects_seen[i]) {
			proto->stats->store_reconnects +=
			    n - proto->reconnects_seen[i];
			proto->reconnects_seen[i] = n;
			proto->reconnect_alarm[i] = 1;
			snprintf(proto->reconnect_detail[i],
				 sizeof(proto->reconnect_detail[i]),
				 "the %s's connection %s was lost and made "
				 "again (%" PRIu64
				 " time%s since the worker started); what "
				 "ran on it was retried",
				 which[i], pg[i]->where, n, n == 1 ? "" : "s");
			tbx__log(TBX_LOG_WARNING, "%s",
				 proto->reconnect_detail[i]);
		}
		/* One alarm per check that found reconnects, tried again at
		 * the next check while the server does not take it. */
		if (proto->reconnect_alarm[i] &&
		    !tbx__alarm_commit(proto, "store_reconnect",
				       proto->reconnect_detail[i]))
			proto->reconnect_alarm[i] = 0;
	}
}

/*
 * Stray records (docs/batched-tokens.md, "Records outside their set's
 * partition"): a record whose tbx-tbit names another partition than the
 * one it arrived on.  Only a copy makes one -- tokenbox produces every
 * record of a set to the partition its set was minted for -- and A
 * handles it exactly (its set's partition locked and synced too), so it
 * is no failure of tokenbox's; but whoever copies records into a
 * pipeline should know, so it is counted, warned of and flagged.
 */
void tbx__stray_note(tbx__proto_t *proto, const struct tbx_msg *msg,
		     int32_t set_part)
{
	if (set_part == msg->rkm->partition)
		return;
	proto->stats->stray_records++;
	snprintf(proto->stray_detail, sizeof(proto->stray_detail),
		 "%s [%" PRId32 "] @%" PRId64 ": tbx-tbit names partition "
		 "%" PRId32 " (token set %s)",
		 msg->topic, msg->rkm->partition, msg->rkm->offset, set_part,
		 msg->tset);
}

void tbx__proto_stray_check(tbx__proto_t *proto)
{
	uint64_t n = proto->stats->stray_records;
	int64_t now = tbx__mono_ms();
	char detail[sizeof(proto->stray_detail) + 400];

	if (n <= proto->stray_warned ||
	    (proto->stray_warned_ms &&
	     now - proto->stray_warned_ms < TBX_STRAY_WARN_MS))
		return;
	snprintf(detail, sizeof(detail),
		 "%" PRIu64 " record(s) arrived on another partition than the "
		 "one their token set was minted for (stray_records, %" PRIu64
		 " in all; the last: %s): copied by hand, or re-produced by a "
		 "tool that does not keep partitions; each was checked against "
		 "its set's partition, exactly once",
		 n - proto->stray_warned, n, proto->stray_detail);
	tbx__log(TBX_LOG_WARNING, "%s", detail);
	proto->stray_warned = n;
	proto->stray_warned_ms = now;
	if (tbx__alarm_commit(proto, "stray_records", detail))
		tbx__log(TBX_LOG_ERR, "the stray_records alarm was not "
				      "recorded");
}

/* Tokened records looked up per judgement, the share of them dropped
 * for having no token that makes a warning, and the least time between
 * two warnings (DUP_PREFIX_BATCHES, the longest redelivery after an
 * assignment taken for normal, in batches, is at the top of the file). */
#define DUP_WINDOW	100
#define DUP_SHARE_PCT	50
#define DUP_WARN_GAP_MS 60000

/*
 * A duplicate is a record whose token is gone: normally one redelivered
 * after a crash or a rebalance, a small share of the traffic.  Most of
 * a window dropped so means tokens this group never had, which the
 * token store alone cannot tell from finished work.  Records whose token
 * this process saw alive (consumer/alive.h) are proven duplicates and
 * left out of the window and the prefix: a burst of copies of finished
 * records is not a wrong store.
 */
static void duplicate_share_check(tbx__proto_t *proto)
{
	char detail[TBX_TOPIC_MAX + 512];
	int64_t now = tbx__mono_ms();
	int share, prefix = proto->dup_prefix[0] != '\0';

	share = proto->dup_window_seen >= DUP_WINDOW &&
		proto->dup_window_dropped * 100 >
		    proto->dup_window_seen * DUP_SHARE_PCT;
	if ((share || prefix) &&
	    (!proto->dup_warned_ms ||
	     now - proto->dup_warned_ms >= DUP_WARN_GAP_MS)) {
		proto->dup_warned_ms = now;
		proto->stats->duplicate_alarms++;
		if (share)
			snprintf(detail, sizeof(detail),
				 "%" PRIu64 " of the last %" PRIu64
				 " tokened records were dropped as duplicates "
				 "(no outbox row, no token for group %s in "
				 "token store %s)",
				 proto->dup_window_dropped,
				 proto->dup_window_seen, proto->group,
				 proto->store_id);
		else
			snprintf(detail, sizeof(detail),
				 "%s tokened records in a row were dropped as "
				 "duplicates since the partition was assigned, "
				 "none handled (no outbox row, no token for "
				 "group %s in token store %s)",
				 proto->dup_prefix, proto->group,
				 proto->store_id);
		tbx__log(TBX_LOG_WARNING,
			 "%s; likely causes: tokens.path names another token "
			 "store than the senders' (a typo, or left out), the "
			 "token store was recreated or restored from a "
			 "backup, the group was unsubscribed while it ran, "
			 "or records were re-produced by hand",
			 detail);
		tbx__alarm_commit(proto, "duplicate_share", detail);
	}
	proto->dup_prefix[0] = '\0';
	if (proto->dup_window_seen >= DUP_WINDOW)
		proto->dup_window_seen = proto->dup_window_dropped = 0;
}

int tbx__proto_process(tbx__proto_t *proto, tbx__batch_t *batch)
{
	int err;

	/* tbx__batch_phase(): each phase's end, for the batch span (a
	 * pointer test with tracing off). */
	if (!(err = tbx__batch_phase(batch, TBX_PHASE_A,
				     tbx__phase_process(proto, batch))) &&
	    !(err = tbx__batch_phase(batch, TBX_PHASE_B,
				     tbx__phase_tokens(proto, batch))) &&
	    !(err = tbx__batch_phase(batch, TBX_PHASE_C,
				     tbx__phase_dispatch(proto, batch))) &&
	    !(err = tbx__batch_phase(batch, TBX_PHASE_D,
				     tbx__phase_consume(proto, batch))))
		err = tbx__batch_phase(
		    batch, TBX_PHASE_E,
		    tbx__phase_finish(proto, batch, proto->defer_finish));
	return err;
}

void tbx__proto_finish(tbx__proto_t *proto, tbx__batch_t *batch, int err,
		       tbx__proto_result_t *result)
{
	if (err == TBX_EMISMATCH)
		tbx__alarm_commit(proto, "store_mismatch",
				  proto->mismatch_detail);
	if (proto->txn_ended) {
		/* The record's effects may have committed without its row:
		 * an operator must look at it. */
		proto->txn_ended = 0;
		tbx__alarm_commit(proto, "handler_ended_txn", proto->errstr);
	} else if (err)
		tbx__log(TBX_LOG_WARNING,
			 "batch of %zu left unfinished: %s (redelivery "
			 "resumes it)",
			 batch->cnt, tbx_strerror(err));
	tbx__phase_commit(proto, batch);
	duplicate_share_check(proto);
	result->parts = batch->outcomes;
	result->part_cnt = batch->outcome_cnt;
}

static int rows_b_to_e(tbx__proto_t *proto, tbx__batch_t *batch,
		       size_t *finished, const char *origin);

/* Takes the rows @p ids through B–E exactly as a redelivery would: safe
 * against concurrent workers (B's conditional record, C's same ids and
 * tokens, D and E idempotent).  *finished receives the rows done; rows
 * left (an undelivered message) make it TBX_EDELIVERY. */
static int resume_rows(tbx__proto_t *proto, tbx__batch_t *batch,
		       const tbx__msgid_t *ids, size_t cnt, size_t *finished,
		       const char *origin)
{
	int err = TBX_OK;

	*finished = 0;
	if (!*proto->producer &&
	    !(*proto->producer = tbx__producer_new(proto->conf, proto->errstr,
						   proto->errstr_size)))
		return TBX_EKAFKA;
	for (size_t i = 0; i < cnt && !err; i++) {
		tbx__brow_t *brow;
		size_t idx;

		if (!(brow = tbx__batch_row_new(batch, &idx))) {
			err = TBX_ENOMEM;
			break;
		}
		err = tbx_outbox_row_load(proto->store, proto->group, ids[i].id,
					  &brow->row);
		if (err == TBX_ENOENT) { /* a worker finished it meanwhile */
			tbx__batch_row_pop(batch);
			err = TBX_OK;
			continue;
		}
		if (brow->row.attempt[0])
			tbx__brow_set_state(brow, TBX_BROW_RECORDED);
	}
	if (err) {
		tbx__batch_reset(batch);
		return err;
	}
	return rows_b_to_e(proto, batch, finished, origin);
}

/* B–E for the rows loaded into @p batch (tbx_outbox rows, and batch
 * rows, each counted once), then the batch emptied.  *finished receives
 * the rows done; rows left (an undelivered message) make it
 * TBX_EDELIVERY. */
static int rows_b_to_e(tbx__proto_t *proto, tbx__batch_t *batch,
		       size_t *finished, const char *origin)
{
	size_t rows = batch->ob_cnt;
	int err = TBX_OK;

	if (batch->tracer) { /* the batch span's times: B–E */
		batch->began_ns = tbx__now_ns();
		memset(batch->phase_ns, 0, sizeof(batch->phase_ns));
	}
	*finished = 0;
	if (!(err = tbx__batch_phase(batch, TBX_PHASE_B,
				     tbx__phase_tokens(proto, batch))) &&
	    !(err = tbx__batch_phase(batch, TBX_PHASE_C,
				     tbx__phase_dispatch(proto, batch))) &&
	    !(err = tbx__batch_phase(batch, TBX_PHASE_D,
				     tbx__phase_consume(proto, batch))))
		err = tbx__batch_phase(batch, TBX_PHASE_E,
				       tbx__phase_finish(proto, batch, 0));
	if (batch->tracer)
		tbx__trace_rows_batch(batch->tracer, batch, origin);
	for (size_t i = 0; i < batch->row_cnt; i++) {
		rows += !batch->rows[i].ob;
		*finished +=
		    !batch->rows[i].ob && tbx__row_done(&batch->rows[i]);
	}
	*finished += tbx__ob_done(batch);
	/* Rows left stay for a later run: an error for the caller. */
	if (!err && *finished < rows)
		err = TBX_EDELIVERY;
	tbx__batch_reset(batch);
	return err;
}

/* Picks a batch row created at or before *@p arg (ms). */
static int older_than(void *arg, const tbx__obatch_t *r, const tbx__cover_t *c)
{
	(void)c;
	return r->created_ms <= *(const int64_t *)arg;
}

/* A partition and its committed offset: picks a batch row covering a
 * record of it below that offset. */
typedef struct below {
	const char *topic;
	int32_t partition;
	int64_t committed;
} below_t;

static int covers_below(void *arg, const tbx__obatch_t *r,
			const tbx__cover_t *c)
{
	const below_t *b = arg;

	(void)r;
	for (uint32_t i = 0; i < c->n; i++)
		if (c->ent[i].partition == b->partition &&
		    c->ent[i].offset < b->committed &&
		    strcmp(c->ent[i].topic, b->topic) == 0)
			return 1;
	return 0;
}

int tbx__proto_redispatch(tbx__proto_t *proto, tbx__batch_t *batch,
			  int64_t created_before_ms, size_t limit,
			  size_t *finished)
{
	tbx__msgid_t *ids = NULL;
	size_t cnt = 0;
	int err;

	*finished = 0;
	if ((err = tbx_outbox_rows_older(proto->store, proto->group,
					 created_before_ms, limit, &ids, &cnt)))
		return err;
	if (cnt)
		err =
		    resume_rows(proto, batch, ids, cnt, finished, "redispatch");
	free(ids);
	/* Batch rows (outbox.layout = batch) created as long ago: B–E the
	 * same way, after the record rows. */
	if (!err && cnt < limit) {
		size_t got = 0, done = 0;

		if (!(err = tbx__ob_load_picked(proto, batch, older_than,
						&created_before_ms, limit - cnt,
						&got)) &&
		    got) {
			if (!*proto->producer &&
			    !(*proto->producer =
				  tbx__producer_new(proto->conf, proto->errstr,
						    proto->errstr_size)))
				err = TBX_EKAFKA;
			else
				err = rows_b_to_e(proto, batch, &done,
						  "redispatch");
			*finished += done;
		}
		tbx__batch_reset(batch);
	}
	return err;
}

/* The recovery pass over batch rows (outbox.layout = batch): those
 * covering a record of the partition below its committed offset, B–E as
 * a redelivery would, each marked stuck_ms first (as record rows are). */
static int recover_batch_rows(tbx__proto_t *proto, tbx__batch_t *batch,
			      const char *topic, int32_t partition,
			      int64_t committed, size_t limit, size_t *found,
			      size_t *finished)
{
	below_t b = {topic, partition, committed};
	size_t got = 0;
	int err;

	*found = *finished = 0;
	if ((err = tbx__ob_load_picked(proto, batch, covers_below, &b, limit,
				       &got)) ||
	    got == 0) {
		tbx__batch_reset(batch);
		return err;
	}
	*found = got;
	proto->stats->stuck_rows += got;
	tbx__log(TBX_LOG_WARNING,
		 "%s [%" PRId32 "]: %zu batch row(s) covering records below "
		 "the committed offset %" PRId64
		 " (the first: %s): their records will not be delivered "
		 "again (retention, an offset reset); finishing them",
		 topic, partition, got, committed, batch->obs[0].row_id);
	/* Marked for inspect, as record rows are: a mark that stays says
	 * the pass could not finish the row.  A failed mark only loses
	 * that hint. */
	if (!(err = tbx_outbox_begin(proto->store))) {
		int64_t now = tbx__now_ms();
		for (size_t k = 0; k < batch->ob_cnt && !err; k++)
			err = tbx_outbox_obatch_mark_stuck(
			    proto->store, proto->group, batch->obs[k].row_id,
			    now);
		if (err || (err = tbx_outbox_commit(proto->store)))
			tbx_outbox_rollback(proto->store);
	}
	if (!*proto->producer &&
	    !(*proto->producer = tbx__producer_new(proto->conf, proto->errstr,
						   proto->errstr_size))) {
		tbx__batch_reset(batch);
		return TBX_EKAFKA;
	}
	err = rows_b_to_e(proto, batch, finished, "recovery");
	proto->stats->rows_recovered += *finished;
	if (err)
		tbx__log(TBX_LOG_WARNING,
			 "%s [%" PRId32 "]: %zu of %zu batch row(s) below the "
			 "committed offset left for the next recovery pass: "
			 "%s",
			 topic, partition, got - *finished, got,
			 tbx_strerror(err));
	return err;
}

int tbx__proto_recover(tbx__proto_t *proto, tbx__batch_t *batch,
		       const char *topic, int32_t partition, int64_t committed,
		       size_t limit, size_t *found, size_t *finished)
{
	tbx__msgid_t *ids = NULL;
	size_t cnt = 0;
	int err;

	*found = *finished = 0;
	if ((err = tbx_outbox_rows_below(proto->store, proto->group, topic,
					 partition, committed, limit, &ids,
					 &cnt)))
		return err;
	if (cnt == 0)
		return recover_batch_rows(proto, batch, topic, partition,
					  committed, limit, found, finished);
	*found = cnt;
	proto->stats->stuck_rows += cnt;
	tbx__log(TBX_LOG_WARNING,
		 "%s [%" PRId32 "]: %zu outbox row(s) below the committed "
		 "offset %" PRId64
		 " (the first: %s): their records will not be delivered "
		 "again (retention, an offset reset); finishing them",
		 topic, partition, cnt, committed, ids[0].id);
	/* Marked for inspect: a mark that stays says the pass could not
	 * finish the row.  A failed mark only loses that hint. */
	if (!(err = tbx_outbox_begin(proto->store))) {
		int64_t now = tbx__now_ms();
		for (size_t i = 0; i < cnt && !err; i++)
			err = tbx_outbox_row_mark_stuck(
			    proto->store, proto->group, ids[i].id, now);
		if (err || (err = tbx_outbox_commit(proto->store)))
			tbx_outbox_rollback(proto->store);
	}
	err = resume_rows(proto, batch, ids, cnt, finished, "recovery");
	proto->stats->rows_recovered += *finished;
	if (err)
		tbx__log(TBX_LOG_WARNING,
			 "%s [%" PRId32 "]: %zu of %zu row(s) below the "
			 "committed offset left for the next recovery pass: "
			 "%s",
			 topic, partition, cnt - *finished, cnt,
			 tbx_strerror(err));
	free(ids);
	if (!err && cnt < limit) {
		size_t bfound = 0, bfinished = 0;

		err = recover_batch_rows(proto, batch, topic, partition,
					 committed, limit - cnt, &bfound,
					 &bfinished);
		*found += bfound;
		*finished += bfinished;
	}
	return err;
}
