/*
 * A over the batch (docs/architecture.md, "A: process"): the message
 * locks and lookups for the whole batch, the deferred row writes and
 * their late conflicts, the memo that lets a failed A be done again, and
 * A's transaction (tbx__phase_process()).  One record's A is
 * proto_record.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crash.h"
#include "base/ids.h"
#include "base/log.h"
#include "consumer/proto_internal.h"
#include "consumer/protocol.h"

/*
 * A's lock on the messages it may handle (tbx_outbox_lock_ids()): the ids
 * of the tokened records it covers, whose row check and token check must
 * not interleave with another worker's A of the same message (on SQLite
 * the file's write lock does it, and this is nothing).  Untokened and
 * malformed records are judged by the ingress offset, which the backend
 * locks with the offset's row.  With outbox.layout = batch a record with
 * a set bit needs none: the lock of its set's partition, which A takes
 * for the resume check (tbx__ob_prepare()), orders every A of its
 * copies (docs/batched-tokens.md, "PostgreSQL without serialising
 * workers").
 */
static int lock_ids(tbx__proto_t *proto, tbx__batch_t *batch)
{
	const char *few[64], **ids = few;
	size_t n = 0;
	int err;

	if (batch->cnt > sizeof(few) / sizeof(few[0]) &&
	    !(ids = malloc(batch->cnt * sizeof(*ids))))
		return TBX_ENOMEM;
	for (size_t i = 0; i < batch->cnt; i++) {
		const struct tbx_msg *msg = &batch->msgs[i];
		if ((batch->isolating && i != batch->isolated) ||
		    msg->malformed || msg->untokened ||
		    (proto->batch_layout && tbx__ob_set_locked(msg)))
			continue;
		ids[n++] = msg->id;
	}
	err = n ? tbx_outbox_lock_ids(proto->store, proto->group, ids, n)
		: TBX_OK;
	if (ids != few)
		free(ids);
	return err;
}

/* Does tbx__process_one() check @p msg's token (its step 2), once it has no
 * row?  Not for a record judged by the ingress offset, nor for one minted
 * in another token store or before the group subscribed. */
static int token_checked(const tbx__proto_t *proto, const struct tbx_msg *msg)
{
	return !msg->malformed && !msg->untokened &&
	       !(msg->store[0] && strcmp(msg->store, proto->store_id) != 0) &&
	       msg->seq >= msg->part->since;
}

/*
 * A's lookups for the batch, after its locks (lock_ids()): one row check
 * for the records A covers, then one token check for those of them with
 * no row whose token tbx__process_one() checks -- per record, the row before
 * the token, as docs/architecture.md requires.  On PostgreSQL each is one
 * statement (a round trip) for the batch instead of one per record.
 *
 * The answers hold for the whole of A: under the locks no other A of
 * these messages can commit, and a row that goes (another worker's E)
 * had its token consumed first.  What A itself does is the exception:
 * a copy of a record earlier in the batch finds the original's row in
 * the batch (tbx__batch_row_find()) before it looks at its answer, so a
 * prefetched "no row" never runs a handler twice.  A record without an
 * answer (-1) is looked up when its turn comes.
 *
 * outbox.layout = batch on SQLite: A writes no tbx_outbox row (its rows
 * are the batch's, tbx_obatch), and A's transaction holds the file's
 * write lock from its BEGIN IMMEDIATE to its commit, so no other worker
 * writes one meanwhile either.  When the group has none when A counts
 * them, then, no record of the batch has one for all of A, and the row
 * check is answered for the whole batch by that one count instead of a
 * lookup per record.  A group with rows of the record layout left (a
 * rolling change of layout) is looked up per record, as before.  On
 * PostgreSQL, where the lookup is one statement for the batch already
 * and a row of another worker could be written between the count and the
 * records' locks, the lookup stays as it is.
 */
static int no_record_rows(tbx__proto_t *proto, int *none)
{
	int64_t rows = 0;
	int err;

	*none = 0;
	if (!proto->batch_layout || !tbx_outbox_db(proto->store))
		return TBX_OK;
	if ((err = tbx_outbox_count(proto->store, proto->group, &rows)))
		return err;
	*none = rows == 0;
	return TBX_OK;
}

static int prefetch(tbx__proto_t *proto, tbx__batch_t *batch)
{
	const char **ids = malloc(batch->cnt * sizeof(*ids));
	int none = 0;
	size_t *at = malloc(batch->cnt * sizeof(*at)), n = 0, k = 0;
	size_t *bat = malloc(batch->cnt * sizeof(*bat)), b = 0;
	tbx__row_hit_t *hits = malloc(batch->cnt * sizeof(*hits));
	int *exists = malloc(batch->cnt * sizeof(*exists));
	tbx__bit_ref_t *refs = malloc(batch->cnt * sizeof(*refs));
	tbx__bit_state_t *st = malloc(batch->cnt * sizeof(*st));
	int err = TBX_OK;

	for (size_t i = 0; i < batch->cnt; i++)
		batch->msgs[i].pre_row = batch->msgs[i].pre_token =
		    batch->msgs[i].pre_bit = -1;
	if (!ids || !at || !bat || !hits || !exists || !refs || !st) {
		err = TBX_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < batch->cnt; i++) {
		if (batch->isolating && i != batch->isolated)
			continue;
		at[n] = i;
		ids[n++] = batch->msgs[i].id;
	}
	if (n == 0 || (err = no_record_rows(proto, &none)))
		goto out;
	if (!none && (err = tbx_outbox_rows_find(proto->store, proto->group,
						 ids, n, hits)))
		goto out;
	/* The records without a row whose token is checked, in place: a
	 * per-message token in ids[], a set's bit in refs[]. */
	for (size_t j = 0; j < n; j++) {
		struct tbx_msg *msg = &batch->msgs[at[j]];

		msg->pre_row = none ? 0 : hits[j].found;
		if (msg->pre_row || !token_checked(proto, msg))
			continue;
		if (msg->fmt == TBX_WF_SET) {
			bat[b] = at[j];
			refs[b++] =
			    (tbx__bit_ref_t){msg->tset, msg->tset_index};
		} else {
			at[k] = at[j];
			ids[k++] = msg->token;
		}
	}
	if (k && (err = tbx_tokens_exists_many(proto->tokens, proto->group, ids,
					       k, exists)))
		goto out;
	for (size_t j = 0; j < k; j++)
		batch->msgs[at[j]].pre_token = exists[j] != 0;
	/* One check for every bit of the batch, as for the tokens. */
	if (b && (err = tbx_tokens_sets_test(proto->tokens, proto->group, refs,
					     b, st, NULL)))
		goto out;
	for (size_t j = 0; j < b; j++)
		batch->msgs[bat[j]].pre_bit = (int)st[j];
out:
	free(ids);
	free(at);
	free(bat);
	free(hits);
	free(exists);
	free(refs);
	free(st);
	return err;
}

/*
 * The rows A's handlers made (brow->later), and joined their tokens, in
 * one statement each (PostgreSQL: rows_insert, one mint_joined for the
 * batch), after the last handler and before the commit.  A record whose
 * savepoint was rolled back has no row here any more (popped), so nothing
 * of it is written.  A row found there already fails A (late_conflict()).
 */
static int rows_write(tbx__proto_t *proto, tbx__batch_t *batch)
{
	const tbx__row_t **rows;
	tbx__mint_item_t *items = NULL;
	size_t n = 0, k = 0;
	int err = TBX_OK;

	for (size_t i = 0; i < batch->row_cnt; i++)
		if (batch->rows[i].later) {
			n++;
			k += batch->rows[i].row.msg_cnt;
		}
	if (n == 0)
		return TBX_OK;
	if (!(rows = malloc(n * sizeof(*rows))) ||
	    (proto->joined && k && !(items = malloc(k * sizeof(*items))))) {
		free(rows);
		return TBX_ENOMEM;
	}
	n = k = 0;
	for (size_t i = 0; i < batch->row_cnt; i++) {
		const tbx__row_t *row = &batch->rows[i].row;

		if (!batch->rows[i].later)
			continue;
		rows[n++] = row;
		for (size_t j = 0; items && j < row->msg_cnt; j++)
			items[k++] =
			    (tbx__mint_item_t){.token = row->msgs[j].token,
					       .topic = row->msgs[j].topic};
	}
	if (k)
		err = tbx_tokens_mint_joined(proto->tokens, items, k,
					     batch->mint_seq, &batch->minted);
	if (!err)
		err =
		    tbx_outbox_rows_insert(proto->store, proto->group, rows, n);
	free(items);
	free(rows);
	return err;
}

/*
 * A write of A found its row there at A's commit (PostgreSQL sends the
 * outbox row's INSERT with A's next statement, store/pg.h): another
 * worker committed the row after this A's row check, which the message
 * lock rules out between workers that take it.  The whole A was rolled
 * back, the handlers' effects with it; the batch is left unfinished and
 * its redelivery finds the committed row and resumes it.
 */
static int late_conflict(tbx__proto_t *proto)
{
	char detail[600];
	const char *why = tbx_outbox_errmsg(proto->store);

	proto->stats->rows_conflicted++;
	snprintf(detail, sizeof(detail),
		 "%s, committed by another worker while this one handled "
		 "the batch",
		 why && *why ? why : "an outbox row");
	tbx__log(TBX_LOG_WARNING,
		 "%s (a worker that does not lock the message?); the batch "
		 "was rolled back and its redelivery resumes the committed "
		 "row",
		 detail);
	if (tbx__alarm_commit(proto, "row_conflict", detail))
		tbx__log(TBX_LOG_ERR, "the row_conflict alarm was not "
				      "recorded");
	return TBX_EBUSY;
}

/*
 * What A changes in memory besides the batch's rows, kept before an A
 * whose handler writes may be deferred (PostgreSQL): when one of them
 * fails, A is rolled back and done again as if it had not run.
 */
typedef struct a_memo {
	tbx_stats_t stats;
	uint64_t dup_window_seen, dup_window_dropped;
	char dup_prefix[TBX_TOPIC_MAX + 64];
	tbx__part_t **parts; /* the batch's partitions, */
	tbx__part_t *saved;  /* as they were */
	size_t part_cnt;
	tbx__mstate_t *states; /* the records' states */
} a_memo_t;

static void memo_free(a_memo_t *m)
{
	free(m->parts);
	free(m->saved);
	free(m->states);
}

static int memo_take(const tbx__proto_t *proto, const tbx__batch_t *batch,
		     a_memo_t *m)
{
	memset(m, 0, sizeof(*m));
	m->parts = malloc(batch->cnt * sizeof(*m->parts));
	m->saved = malloc(batch->cnt * sizeof(*m->saved));
	m->states = malloc(batch->cnt * sizeof(*m->states));
	if (!m->parts || !m->saved || !m->states) {
		memo_free(m);
		return TBX_ENOMEM;
	}
	m->stats = *proto->stats;
	m->dup_window_seen = proto->dup_window_seen;
	m->dup_window_dropped = proto->dup_window_dropped;
	memcpy(m->dup_prefix, proto->dup_prefix, sizeof(m->dup_prefix));
	for (size_t i = 0; i < batch->cnt; i++) {
		m->states[i] = batch->msgs[i].state;
		if (tbx__first_of_part(batch, i)) {
			m->parts[m->part_cnt] = batch->msgs[i].part;
			m->saved[m->part_cnt++] = *batch->msgs[i].part;
		}
	}
	return TBX_OK;
}

static void memo_restore(tbx__proto_t *proto, tbx__batch_t *batch,
			 const a_memo_t *m)
{
	*proto->stats = m->stats;
	proto->dup_window_seen = m->dup_window_seen;
	proto->dup_window_dropped = m->dup_window_dropped;
	memcpy(proto->dup_prefix, m->dup_prefix, sizeof(m->dup_prefix));
	for (size_t i = 0; i < m->part_cnt; i++)
		*m->parts[i] = m->saved[i];
	for (size_t i = 0; i < batch->cnt; i++)
		batch->msgs[i].state = m->states[i];
}

/* A once: its transaction, committed, or rolled back on failure (the
 * batch's rows undone).  *deferred receives the handler writes the store
 * deferred in it. */
static int process_once(tbx__proto_t *proto, tbx__batch_t *batch,
			unsigned *deferred)
{
	uint64_t e_deleted = 0, e_cleared = 0;
	tbx__ob_written_t written;
	int err;

	memset(&written, 0, sizeof(written));

	*deferred = 0;
	if ((err = tbx__batch_ids_reset(batch, batch->cnt)))
		return err;
	if ((err = tbx_outbox_begin(proto->store)))
		return err;
	/* The previous batch's D+E, if they wait (finish.defer): first, so
	 * that every check below sees their rows and tokens gone, as if
	 * they had committed on their own before this transaction. */
	if ((err = tbx__e_statements(proto, &e_deleted, &e_cleared)))
		goto fail;
	/* The messages' locks, before anything is read and before any
	 * savepoint (a rolled-back savepoint would release them). */
	if ((err = lock_ids(proto, batch)))
		goto fail;
	/* outbox.layout = batch: the partitions' locks, the resume check's
	 * memory brought up to the gens read under them, and the batch rows
	 * tbx_cover_msg names -- before any token is read (prefetch()): a
	 * bit read before its partition's lock could be cleared, and its
	 * row deleted, by another worker's D and E in between, and the
	 * record handled again. */
	if (proto->batch_layout && (err = tbx__ob_prepare(proto, batch)))
		goto fail;
	/* Joined: one number for every token this A mints, taken after the
	 * locks and before any savepoint (a rolled-back savepoint must not
	 * take it back). */
	batch->mint_seq = 0;
	batch->minted = 0;
	batch->processed = batch->dead_lettered = 0;
	if (proto->joined &&
	    (err = tbx_tokens_seq_joined(proto->tokens, &batch->mint_seq)))
		goto fail;
	if ((err = prefetch(proto, batch)))
		goto fail;
	for (size_t i = 0; i < batch->cnt; i++) {
		struct tbx_msg *msg = &batch->msgs[i];
		if (batch->isolating && i != batch->isolated) {
			msg->state = TBX_MS_SKIPPED;
			continue;
		}
		if (msg->part->batch_blocked) {
			/* Order within a partition: nothing passes a record
			 * that waits for a retry. */
			msg->state = TBX_MS_SKIPPED;
			continue;
		}
		size_t rows_before = batch->row_cnt;

		if (msg->trace.on) /* its log lines name its span */
			tbx__trace_log(&msg->trace);
		err = tbx__process_one(proto, batch, msg);
		if (msg->trace.on)
			tbx__trace_log(NULL);
		if (err)
			goto fail;
		/* A batch row resumed adds a row per record it covers. */
		for (size_t r = rows_before; r < batch->row_cnt; r++)
			tbx__batch_ids_add(batch, r);
	}
	if ((err = proto->batch_layout ? tbx__ob_write(proto, batch, &written)
				       : rows_write(proto, batch)) ||
	    (err = tbx__guard_clear(proto, batch)))
		goto fail;
	tbx__crashpoint("A.before_commit");
	if ((err = tbx_outbox_commit(proto->store)))
		goto fail;
	tbx__e_committed(proto, e_deleted + e_cleared);
	if (proto->batch_layout)
		tbx__ob_committed(proto, &written);
	tbx__ob_written_free(&written);
	return TBX_OK;
fail:
	*deferred = tbx_outbox_deferred(proto->store);
	tbx_outbox_rollback(proto->store);
	tbx__batch_undo_rows(batch);
	tbx__ob_written_free(&written);
	return err;
}

/*
 * Is A's failure @p err one that A done again without deferred writes
 * can attribute to a record?  Not the worker's stop (a handler that ended
 * the transaction, a token store mismatch), a row committed by another
 * worker, or a lack of memory.
 */
static int redo_can_tell(int err)
{
	return err != TBX_ESTATE && err != TBX_EMISMATCH && err != TBX_EEXIST &&
	       err != TBX_ENOMEM;
}

/*
 * A, one S transaction over the batch after G.  Where the store can
 * (PostgreSQL), the handlers' writes are deferred: sent with the next
 * statement that waits for an answer, not one round trip each.  A
 * deferred write that fails is found by a later statement or the commit,
 * when it can no longer be undone alone: A is rolled back and done again
 * at once with every statement waiting for its answer, so that the
 * failure comes back to the handler that made it, as it would have, and
 * what commits was seen to succeed (docs/postgresql.md).  A failed A
 * releases G's marker (it was no death).
 */
int tbx__phase_process(tbx__proto_t *proto, tbx__batch_t *batch)
{
	a_memo_t memo;
	unsigned deferred;
	uint64_t failed = proto->stats->resume_load_failures;
	uint64_t unknown = proto->stats->partition_unknown;
	int defer = tbx_outbox_defer_writes(proto->store, 1), err;

	if (defer && memo_take(proto, batch, &memo)) {
		tbx_outbox_defer_writes(proto->store, 0);
		defer = 0;
	}
	err = process_once(proto, batch, &deferred);
	if (err && defer && deferred && redo_can_tell(err)) {
		const char *why = tbx_outbox_errmsg(proto->store);

		tbx__log(TBX_LOG_NOTICE,
			 "a batch of %zu failed with %u handler writes "
			 "deferred (%s: %s); doing it again with each "
			 "statement waiting for its answer",
			 batch->cnt, deferred, tbx_strerror(err),
			 why && *why ? why : "no message");
		memo_restore(proto, batch, &memo);
		tbx_outbox_defer_writes(proto->store, 0);
		err = process_once(proto, batch, &deferred);
	}
	if (defer) {
		tbx_outbox_defer_writes(proto->store, 0);
		memo_free(&memo);
	}
	if (proto->batch_layout) {
		tbx__ob_stats(proto);
		/* A load of the group's batch rows failed (logged at WARN by
		 * the memory): an alarm for `inspect status --check`, once A
		 * was rolled back. */
		if (proto->stats->resume_load_failures > failed &&
		    tbx__alarm_commit(proto, "resume_load_failed",
				      "the resume check could not load the "
				      "group's batch rows (see the worker's "
				      "log); the batch waits for redelivery"))
			tbx__log(TBX_LOG_ERR, "the resume_load_failed alarm "
					      "was not recorded");
		/* tokens.format = set: a topic's partition count not learnt
		 * in time (counted and logged at WARN by the partitioner):
		 * an alarm as well, once A was rolled back. */
		if (proto->stats->partition_unknown > unknown &&
		    tbx__alarm_commit(proto, "partition_unknown",
				      "a destination topic's partition count "
				      "was not learnt from the metadata "
				      "within dispatch.timeout.ms; the batch "
				      "waits for redelivery"))
			tbx__log(TBX_LOG_ERR, "the partition_unknown alarm "
					      "was not recorded");
	}
	if (!err) {
		/* Counted once they took effect: a rolled-back A is done
		 * again. */
		proto->stats->tokens_created += batch->minted;
		proto->stats->processed += batch->processed;
		proto->stats->dead_lettered += batch->dead_lettered;
		if (batch->isolating)
			tbx__isolation_count(batch);
		tbx__crashpoint("A.committed");
		return TBX_OK;
	}
	if (err == TBX_EEXIST)
		err = late_conflict(proto);
	tbx__guard_release(proto, batch);
	return err;
}
