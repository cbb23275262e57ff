/*
 * D, consume, and E, finish (docs/architecture.md): the batch's incoming
 * tokens deleted in one T transaction, its finished outbox rows in one S
 * transaction, and finish.defer, the D+E whose statements and offsets
 * wait for the next batch's A (tbx__proto_flush() and the offsets F
 * decided behind them).
 */
#include <stdlib.h>
#include <string.h>

#include "base/crash.h"
#include "base/str.h"
#include "consumer/partition.h"
#include "consumer/proto_internal.h"
#include "consumer/protocol.h"
#include "consumer/resume_mem.h"

/*
 * finish.defer.  On one SQLite file a batch's D+E (tbx__phase_finish()) need
 * not commit on their own: their statements go first into the next
 * batch's A, and the offsets F decided behind them are committed only
 * after that A commits.  Between the two the rows are delivered and
 * still in S, exactly the state after C.delivered, which redelivery
 * resumes; one synced commit per batch is saved.  When no A follows soon
 * (an empty poll, a revocation, the close), tbx__proto_flush() commits
 * them alone.  docs/architecture.md, "Finishing with the next batch";
 * the model's DEFER_FINISH.
 */

/* The incoming tokens of some rows, for D: the per-message tokens
 * (toks) and the bits of token sets (refs), pointing into the rows. */
typedef struct d_toks {
	const char **toks;
	tbx__bit_ref_t *refs;
	size_t ntok, nref;
} d_toks_t;

static int d_toks_make(d_toks_t *d, size_t cap)
{
	memset(d, 0, sizeof(*d));
	d->toks = malloc((cap ? cap : 1) * sizeof(*d->toks));
	d->refs = malloc((cap ? cap : 1) * sizeof(*d->refs));
	if (!d->toks || !d->refs) {
		free(d->toks);
		free(d->refs);
		return TBX_ENOMEM;
	}
	return TBX_OK;
}

static void d_toks_add(d_toks_t *d, const char *in_token, int in_set,
		       uint32_t in_tbit)
{
	if (!in_token[0])
		return; /* untokened: nothing of ours to consume */
	if (in_set)
		d->refs[d->nref++] = (tbx__bit_ref_t){in_token, in_tbit};
	else
		d->toks[d->ntok++] = in_token;
}

static void d_toks_free(d_toks_t *d)
{
	free(d->toks);
	free(d->refs);
}

/* E's statements in the open transaction: joined, D's deletes of the
 * incoming tokens and clears of their bits @p d first (never E before D,
 * architecture.md), then the rows @p rows in one statement.  *deleted:
 * tokens deleted, *cleared: bits cleared (on PostgreSQL both may be filled
 * by the transaction's next statement). */
static int finish_statements(tbx__proto_t *proto, const char **rows,
			     size_t nrows, const char **obs, size_t nobs,
			     const d_toks_t *d, uint64_t *deleted,
			     uint64_t *cleared)
{
	int err;

	*deleted = *cleared = 0;
	if (d->ntok &&
	    (err = tbx_tokens_consume_joined(proto->tokens, proto->group,
					     d->toks, d->ntok, deleted)))
		return err;
	if (d->nref &&
	    (err = tbx_tokens_sets_consume_joined(
		 proto->tokens, proto->group, d->refs, d->nref, cleared, NULL)))
		return err;
	/* outbox.layout = batch: a batch row goes whole, with its
	 * tbx_cover_msg entries. */
	if (nobs && (err = tbx_outbox_obatch_delete(proto->store, proto->group,
						    obs, nobs, NULL)))
		return err;
	return nrows ? tbx_outbox_rows_delete(proto->store, proto->group, rows,
					      nrows)
		     : TBX_OK;
}

/* Adds batch row @p row_id to @p obs (*n of them) unless listed. */
static void ob_list(const char **obs, size_t *n, const char *row_id)
{
	for (size_t i = *n; i-- > 0;)
		if (strcmp(obs[i], row_id) == 0)
			return;
	obs[(*n)++] = row_id;
}

/* The waiting D+E's statements (finish_statements()), in the open
 * transaction.  *deleted: tokens deleted, *cleared: bits cleared. */
int tbx__e_statements(tbx__proto_t *proto, uint64_t *deleted, uint64_t *cleared)
{
	const char **ids, **obs;
	size_t nids = 0, nobs = 0;
	d_toks_t d;
	int err;

	*deleted = *cleared = 0;
	if (proto->e_cnt == 0)
		return TBX_OK;
	ids = malloc(proto->e_cnt * sizeof(*ids));
	obs = malloc(proto->e_cnt * sizeof(*obs));
	if (!ids || !obs || d_toks_make(&d, proto->e_cnt)) {
		free(ids);
		free(obs);
		return TBX_ENOMEM;
	}
	for (size_t i = 0; i < proto->e_cnt; i++) {
		const tbx__e_row_t *e = &proto->e_rows[i];

		if (e->row_id[0])
			ob_list(obs, &nobs, e->row_id);
		else
			ids[nids++] = e->msg_id;
		d_toks_add(&d, e->in_token, e->in_set, e->in_tbit);
	}
	err = finish_statements(proto, ids, nids, obs, nobs, &d, deleted,
				cleared);
	free(ids);
	free(obs);
	d_toks_free(&d);
	return err;
}

/* The waiting D+E committed: their offsets are ready.  @p consumed:
 * tokens deleted and bits cleared. */
void tbx__e_committed(tbx__proto_t *proto, uint64_t consumed)
{
	if (proto->e_cnt == 0)
		return;
	proto->stats->tokens_consumed += consumed;
	/* Batch rows leave the resume check's memory once deleted. */
	for (size_t i = 0; proto->rmem && i < proto->e_cnt; i++)
		if (proto->e_rows[i].row_id[0]) {
			const char *id = proto->e_rows[i].row_id;

			tbx__resume_mem_forget(proto->rmem, &id, 1);
		}
	proto->e_cnt = 0;
	for (size_t i = 0; i < proto->e_off_cnt; i++) {
		tbx__e_offset_t *o = &proto->e_offs[i];
		if (o->waiting > o->ready)
			o->ready = o->waiting;
		o->waiting = 0;
	}
}

/* The waiting-offset slot of @p part, made when @p create. */
tbx__e_offset_t *tbx__e_offset(tbx__proto_t *proto, const tbx__part_t *part,
			       int create)
{
	for (size_t i = 0; i < proto->e_off_cnt; i++)
		if (proto->e_offs[i].partition == part->partition &&
		    strcmp(proto->e_offs[i].topic, part->topic) == 0)
			return &proto->e_offs[i];
	if (!create)
		return NULL;
	if (proto->e_off_cnt == proto->e_off_cap) {
		size_t cap = proto->e_off_cap ? proto->e_off_cap * 2 : 8;
		tbx__e_offset_t *grown =
		    realloc(proto->e_offs, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		proto->e_offs = grown;
		proto->e_off_cap = cap;
	}
	tbx__e_offset_t *o = &proto->e_offs[proto->e_off_cnt++];
	memset(o, 0, sizeof(*o));
	tbx__strlcpy(o->topic, part->topic, sizeof(o->topic));
	o->partition = part->partition;
	return o;
}

/* Does an offset of @p part wait for an E? */
int tbx__e_waits(tbx__proto_t *proto, const tbx__part_t *part)
{
	const tbx__e_offset_t *o = tbx__e_offset(proto, part, 0);
	return o && o->waiting;
}

int tbx__proto_flush(tbx__proto_t *proto)
{
	uint64_t deleted = 0, cleared = 0;
	int err;

	if (proto->e_cnt == 0)
		return TBX_OK;
	if ((err = tbx_outbox_begin(proto->store)))
		return err;
	if ((err = tbx__e_statements(proto, &deleted, &cleared)) ||
	    (err = tbx_outbox_commit(proto->store))) {
		tbx_outbox_rollback(proto->store);
		return err;
	}
	tbx__e_committed(proto, deleted + cleared);
	tbx__crashpoint("E.deleted");
	return TBX_OK;
}

size_t tbx__proto_waiting(const tbx__proto_t *proto)
{
	return proto->e_cnt;
}

void tbx__proto_take_ready(tbx__proto_t *proto,
			   rd_kafka_topic_partition_list_t *offsets)
{
	size_t kept = 0;

	for (size_t i = 0; i < proto->e_off_cnt; i++) {
		tbx__e_offset_t *o = &proto->e_offs[i];

		if (o->ready) {
			rd_kafka_topic_partition_t *tp =
			    rd_kafka_topic_partition_list_find(
				offsets, o->topic, o->partition);
			if (!tp) {
				tp = rd_kafka_topic_partition_list_add(
				    offsets, o->topic, o->partition);
				tp->offset = o->ready;
			} else if (tp->offset < o->ready) {
				tp->offset = o->ready;
			}
			o->ready = 0;
		}
		if (o->waiting)
			proto->e_offs[kept++] = *o;
	}
	proto->e_off_cnt = kept;
}

void tbx__proto_forget(tbx__proto_t *proto,
		       const rd_kafka_topic_partition_list_t *parts)
{
	size_t kept = 0;

	for (size_t i = 0; i < proto->e_off_cnt; i++) {
		const tbx__e_offset_t *o = &proto->e_offs[i];
		if (!rd_kafka_topic_partition_list_find(parts, o->topic,
							o->partition))
			proto->e_offs[kept++] = *o;
	}
	proto->e_off_cnt = kept;
}

void tbx__proto_free(tbx__proto_t *proto)
{
	free(proto->e_rows);
	free(proto->e_offs);
	free(proto->ob_gens);
	free(proto->ob_cover);
	tbx__partitioner_destroy(proto->parts);
	proto->parts = NULL;
	proto->e_rows = NULL;
	proto->e_offs = NULL;
	proto->ob_gens = NULL;
	proto->ob_cover = NULL;
	proto->ob_gen_cnt = 0;
	proto->e_cnt = proto->e_cap = proto->e_off_cnt = proto->e_off_cap = 0;
}

/* E deferred: the batch's delivered rows wait for the next A; *nrows
 * receives how many.  @returns TBX_OK, or TBX_ENOMEM (nothing waits: E
 * runs now). */
static int e_defer(tbx__proto_t *proto, const tbx__batch_t *batch,
		   size_t *nrows)
{
	*nrows = 0;
	for (size_t i = 0; i < batch->row_cnt; i++)
		*nrows += tbx__ob_finishable(batch, &batch->rows[i]);
	if (proto->e_cnt + *nrows > proto->e_cap) {
		size_t cap = proto->e_cap ? proto->e_cap : 64;
		while (cap < proto->e_cnt + *nrows)
			cap *= 2;
		tbx__e_row_t *grown =
		    realloc(proto->e_rows, cap * sizeof(*grown));
		if (!grown)
			return TBX_ENOMEM;
		proto->e_rows = grown;
		proto->e_cap = cap;
	}
	for (size_t i = 0; i < batch->row_cnt; i++) {
		const tbx__brow_t *brow = &batch->rows[i];
		tbx__e_row_t *e;

		if (!tbx__ob_finishable(batch, brow))
			continue;
		e = &proto->e_rows[proto->e_cnt++];
		tbx__strlcpy(e->row_id,
			     brow->ob ? batch->obs[brow->ob - 1].row_id : "",
			     sizeof(e->row_id));
		tbx__strlcpy(e->msg_id, brow->row.msg_id, sizeof(e->msg_id));
		tbx__strlcpy(e->in_token, brow->row.in_token,
			     sizeof(e->in_token));
		e->in_set = brow->row.in_set;
		e->in_tbit = brow->row.in_tbit;
	}
	return TBX_OK;
}

/* The incoming tokens of the delivered rows (a row's in_token is its
 * record's token, or with in_set the set whose bit in_tbit is; copies in
 * the batch share it), pointing into the rows. */
static int delivered_tokens(const tbx__batch_t *batch, d_toks_t *d)
{
	int err;

	if ((err = d_toks_make(d, batch->row_cnt)))
		return err;
	for (size_t i = 0; i < batch->row_cnt; i++) {
		const tbx__row_t *row = &batch->rows[i].row;

		if (tbx__ob_finishable(batch, &batch->rows[i]))
			d_toks_add(d, row->in_token, row->in_set, row->in_tbit);
	}
	return TBX_OK;
}

/* D: consume the incoming tokens of the delivered rows, one T
 * transaction for the per-message tokens and one for the sets' bits (one
 * call each for the batch).  Joined, D is part of E's transaction
 * instead. */
int tbx__phase_consume(tbx__proto_t *proto, tbx__batch_t *batch)
{
	d_toks_t d;
	uint64_t deleted = 0, cleared = 0;
	int err;

	if (proto->joined)
		return TBX_OK;
	tbx__ob_mark_delivered(batch);
	if ((err = delivered_tokens(batch, &d)))
		return err;
	err = d.ntok ? tbx_tokens_consume(proto->tokens, proto->group, d.toks,
					  d.ntok, &deleted)
		     : TBX_OK;
	if (!err && d.nref)
		err = tbx_tokens_sets_consume(proto->tokens, proto->group,
					      d.refs, d.nref, &cleared, NULL);
	d_toks_free(&d);
	proto->stats->tokens_consumed += deleted;
	if (err)
		return err;
	proto->stats->tokens_consumed += cleared;
	tbx__crashpoint("D.consumed");
	return TBX_OK;
}

/* The batch's delivered rows are finished (E deleted them, or they wait
 * for the next A). */
static void rows_finished(tbx__batch_t *batch)
{
	for (size_t i = 0; i < batch->row_cnt; i++)
		if (tbx__ob_finishable(batch, &batch->rows[i]))
			tbx__brow_set_state(&batch->rows[i], TBX_BROW_FINISHED);
}

/* E: delete finished rows, one S transaction.  Never before D (see
 * architecture.md); joined, D's deletes go first in this transaction and
 * commit with it.  With @p defer (finish.defer), they wait for the next A
 * instead (e_defer()): the rows count as finished for F, whose offsets
 * for them wait as well. */
int tbx__phase_finish(tbx__proto_t *proto, tbx__batch_t *batch, int defer)
{
	const char **rows, **obs;
	d_toks_t d = {0};
	size_t nrows = 0, nobs = 0;
	uint64_t deleted = 0, cleared = 0;
	int err;

	tbx__ob_mark_delivered(batch);
	if (defer && e_defer(proto, batch, &nrows) == TBX_OK) {
		if (nrows == 0)
			return TBX_OK;
		rows_finished(batch);
		proto->e_deferred = 1;
		tbx__crashpoint("E.deferred");
		return TBX_OK;
	}
	rows = malloc((batch->row_cnt ? batch->row_cnt : 1) * sizeof(*rows));
	obs = malloc((batch->row_cnt ? batch->row_cnt : 1) * sizeof(*obs));
	if (!rows || !obs) {
		free(rows);
		free(obs);
		return TBX_ENOMEM;
	}
	nrows = 0;
	for (size_t i = 0; i < batch->row_cnt; i++) {
		const tbx__brow_t *brow = &batch->rows[i];

		if (!tbx__ob_finishable(batch, brow))
			continue;
		if (brow->ob)
			ob_list(obs, &nobs, batch->obs[brow->ob - 1].row_id);
		else
			rows[nrows++] = brow->row.msg_id;
	}
	if (nrows == 0 && nobs == 0) {
		free(rows);
		free(obs);
		return TBX_OK;
	}
	if (proto->joined && (err = delivered_tokens(batch, &d)))
		goto out;
	if ((err = tbx_outbox_begin(proto->store)))
		goto out;
	if ((err = finish_statements(proto, rows, nrows, obs, nobs, &d,
				     &deleted, &cleared)) ||
	    (err = tbx_outbox_commit(proto->store)))
		goto undo;
	proto->stats->tokens_consumed += deleted + cleared;
	if (nobs && proto->rmem)
		tbx__resume_mem_forget(proto->rmem, obs, nobs);
	rows_finished(batch);
	d_toks_free(&d);
	free(rows);
	free(obs);
	tbx__crashpoint("E.deleted");
	return TBX_OK;
undo:
	tbx_outbox_rollback(proto->store);
out:
	d_toks_free(&d);
	free(rows);
	free(obs);
	return err;
}
