/*
 * outbox.layout = batch: the worker's outbox row by the batch
 * (docs/batched-tokens.md, "The outbox row by the batch", "The resume
 * check"), stage 1.  A batch's records are still the batch's rows in
 * memory (tbx__brow_t, one per handled or dead-lettered record, so that
 * C, D and F work per record as they do), and the rows of one batch row
 * share it (tbx__brow_t.ob, tbx__ob_t): A inserts them as ONE tbx_obatch
 * row at its end (tbx__ob_write()) and bumps gen of the partitions it
 * covers; B gives the batch row one attempt (tbx__ob_tokens()); E deletes
 * it whole, once every one of its records was delivered
 * (tbx__ob_finishable()).  The resume check asks the memory of the
 * group's pending rows (consumer/resume_mem.h) for set bits and offsets,
 * and tbx_cover_msg for records in the per-message format
 * (tbx__ob_prepare(), tbx__ob_resume()).
 *
 * The row's own messages: with tokens.format = set (proto->own_sets) A
 * chooses each message's partition (tbx__partition_choose()) and writes
 * the row with tokfmt 2; B mints one token set per destination (topic,
 * partition) and receiving group, registered as one tbx_breg row named
 * by the batch row's id, and records the sets in msgs' token fields and
 * the indexes in wire (joined: the sets are minted in A, unregistered);
 * C confirms with sets_confirm and produces each message to its
 * partition with tbx-tset and tbx-tbit.  Otherwise tokfmt 1: B mints
 * per-message tokens, as the record layout does, and wire's partition is
 * -1 (produced through the partitioner).  A row is taken through B–E in
 * the format it was written with, whatever the worker's setting.
 *
 * This file: the resume check (tbx__ob_prepare(), tbx__ob_resume()),
 * loading batch rows (tbx__ob_load(), tbx__ob_load_picked()) and the
 * batch rows' ends (tbx__ob_mark_delivered(), tbx__ob_finishable(),
 * tbx__ob_done()).  A's insert is in proto_obatch_write.c, B's attempt
 * and tokens in proto_obatch_tokens.c.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/str.h"
#include "consumer/proto_obatch.h"
#include "consumer/protocol.h"
#include "consumer/resume_mem.h"

int tbx__ob_new(tbx__batch_t *batch, size_t *ob)
{
	if (batch->ob_cnt == batch->ob_cap) {
		size_t cap = batch->ob_cap ? batch->ob_cap * 2 : 8;
		tbx__ob_t *grown = realloc(batch->obs, cap * sizeof(*grown));

		if (!grown)
			return TBX_ENOMEM;
		batch->obs = grown;
		batch->ob_cap = cap;
	}
	memset(&batch->obs[batch->ob_cnt], 0, sizeof(batch->obs[0]));
	*ob = ++batch->ob_cnt;
	return TBX_OK;
}

/* The partition whose gen orders @p msg (tbx__resume_key_part()). */
static void msg_key(const struct tbx_msg *msg, tbx__resume_key_t *key)
{
	memset(key, 0, sizeof(*key));
	key->topic = msg->topic;
	key->partition = msg->rkm->partition;
	key->offset = msg->rkm->offset;
	key->set_part = msg->rkm->partition;
	if (msg->fmt == TBX_WF_SET && !msg->malformed && msg->tset[0] &&
	    msg->tset_part >= 0 && msg->tset_index <= UINT16_MAX) {
		key->set_id = msg->tset;
		key->index = (uint16_t)msg->tset_index;
		key->set_part = msg->tset_part;
	}
}

int tbx__ob_set_locked(const struct tbx_msg *msg)
{
	tbx__resume_key_t key;

	msg_key(msg, &key);
	return key.set_id != NULL;
}

/* A record in the per-message format, checked through tbx_cover_msg. */
static int per_message(const struct tbx_msg *msg)
{
	return !msg->malformed && !msg->untokened && msg->fmt != TBX_WF_SET &&
	       msg->token[0];
}

static int gen_add(tbx__proto_t *proto, size_t *cap, const char *topic,
		   int32_t part)
{
	for (size_t i = 0; i < proto->ob_gen_cnt; i++)
		if (proto->ob_gens[i].part == part &&
		    strcmp(proto->ob_gens[i].topic, topic) == 0)
			return TBX_OK;
	if (proto->ob_gen_cnt == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		tbx__ob_gen_t *grown =
		    realloc(proto->ob_gens, c * sizeof(*grown));

		if (!grown)
			return TBX_ENOMEM;
		proto->ob_gens = grown;
		*cap = c;
	}
	tbx__ob_gen_t *g = &proto->ob_gens[proto->ob_gen_cnt++];
	tbx__strlcpy(g->topic, topic, sizeof(g->topic));
	g->part = part;
	g->gen = -1;
	return TBX_OK;
}

int tbx__ob_gen_cmp(const void *a, const void *b)
{
	const tbx__ob_gen_t *x = a, *y = b;
	int c = strcmp(x->topic, y->topic);

	return c ? c : (x->part > y->part) - (x->part < y->part);
}

static int64_t gen_of(const tbx__proto_t *proto, const char *topic,
		      int32_t part)
{
	for (size_t i = 0; i < proto->ob_gen_cnt; i++)
		if (proto->ob_gens[i].part == part &&
		    strcmp(proto->ob_gens[i].topic, topic) == 0)
			return proto->ob_gens[i].gen;
	return -1;
}

/* The locks of A's partitions (proto->ob_gens, sorted), and their gens
 * read under them, in one gens_lock. */
static int lock_gens(tbx__proto_t *proto)
{
	size_t n = proto->ob_gen_cnt;
	const char **topics;
	int32_t *parts;
	int64_t *gens;
	int err;

	if (n == 0)
		return TBX_OK;
	topics = malloc(n * sizeof(*topics));
	parts = malloc(n * sizeof(*parts));
	gens = malloc(n * sizeof(*gens));
	if (!topics || !parts || !gens) {
		err = TBX_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		topics[i] = proto->ob_gens[i].topic;
		parts[i] = proto->ob_gens[i].part;
	}
	if ((err = tbx_outbox_gens_lock(proto->store, proto->group, topics,
					parts, n, gens))) {
		const char *m = tbx_outbox_errmsg(proto->store);

		tbx__log(TBX_LOG_WARNING,
			 "the locks of the batch's %zu partitions were not "
			 "taken: %s: %s",
			 n, tbx_strerror(err), m && *m ? m : "");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		proto->ob_gens[i].gen = gens[i];
out:
	free(topics);
	free(parts);
	free(gens);
	return err;
}

int tbx__ob_prepare(tbx__proto_t *proto, tbx__batch_t *batch)
{
	size_t cap = 0, n = 0;
	const char **ids = NULL;
	size_t *at = NULL;
	char(*found)[TBX_UUID_LEN + 1] = NULL;
	int err = TBX_OK;

	proto->ob_gen_cnt = 0;
	free(proto->ob_cover);
	if (!(proto->ob_cover = calloc(batch->cnt ? batch->cnt : 1,
				       sizeof(*proto->ob_cover))))
		return TBX_ENOMEM;
	for (size_t i = 0; i < batch->cnt && !err; i++) {
		const struct tbx_msg *msg = &batch->msgs[i];
		tbx__resume_key_t key;

		if (batch->isolating && i != batch->isolated)
			continue;
		msg_key(msg, &key);
		tbx__stray_note(proto, msg, key.set_part);
		if (!(err = gen_add(proto, &cap, msg->topic,
				    msg->rkm->partition)) &&
		    key.set_part != key.partition)
			err = gen_add(proto, &cap, msg->topic, key.set_part);
	}
	if (err)
		return err;
	/* The partitions' locks and gens, sorted by (topic, partition):
	 * one statement on PostgreSQL, plain reads under the file's write
	 * lock on SQLite.  Then per topic, when a gen moved, one load of
	 * the group's rows. */
	qsort(proto->ob_gens, proto->ob_gen_cnt, sizeof(*proto->ob_gens),
	      tbx__ob_gen_cmp);
	if ((err = lock_gens(proto)))
		return err;
	for (size_t i = 0; i < proto->ob_gen_cnt;) {
		size_t j = i;
		int32_t parts[256];
		int64_t gens[256];

		while (j < proto->ob_gen_cnt && j - i < 256 &&
		       strcmp(proto->ob_gens[j].topic,
			      proto->ob_gens[i].topic) == 0) {
			parts[j - i] = proto->ob_gens[j].part;
			gens[j - i] = proto->ob_gens[j].gen;
			j++;
		}
		if ((err = tbx__resume_mem_sync_gens(proto->rmem, proto->store,
						     proto->ob_gens[i].topic,
						     parts, j - i, gens, NULL)))
			return err;
		i = j;
	}
	/* The records in the per-message format: one look-up for the
	 * batch. */
	if (!(ids = malloc((batch->cnt ? batch->cnt : 1) * sizeof(*ids))) ||
	    !(at = malloc((batch->cnt ? batch->cnt : 1) * sizeof(*at)))) {
		err = TBX_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < batch->cnt; i++) {
		if ((batch->isolating && i != batch->isolated) ||
		    !per_message(&batch->msgs[i]))
			continue;
		at[n] = i;
		ids[n++] = batch->msgs[i].id;
	}
	if (n == 0)
		goto out;
	if (!(found = calloc(n, sizeof(*found)))) {
		err = TBX_ENOMEM;
		goto out;
	}
	if ((err = tbx_outbox_cover_msg_find(proto->store, proto->group, ids, n,
					     found)))
		goto out;
	for (size_t k = 0; k < n; k++)
		memcpy(proto->ob_cover[at[k]], found[k], sizeof(found[k]));
out:
	free(ids);
	free(at);
	free(found);
	return err;
}

/* Loading one batch row into the batch's rows. */
typedef struct tbx__ob_load {
	tbx__batch_t *batch;
	const char *row_id;
	size_t ob;    /* 1 + its index once loaded */
	size_t first; /* its first record's row */
	int err;
} ob_load_t;

/* Moves the messages of @p tmp whose wire entry names cover entry
 * @p e into @p row, in order. */
static int take_msgs(tbx__row_t *row, tbx__row_t *tmp, const tbx__wire_ent_t *w,
		     uint32_t e, int tokfmt)
{
	for (size_t j = 0; j < tmp->msg_cnt; j++) {
		tbx__outmsg_t *m;

		if (w[j].cover != e)
			continue;
		if (!(m = tbx__row_grow(row)))
			return TBX_ENOMEM;
		*m = tmp->msgs[j];
		m->part = -1;
		if (tokfmt == 2) {
			/* Its partition, and once B recorded it, its set
			 * (the token field) and bit. */
			m->part = w[j].partition;
			if (m->token[0]) {
				memcpy(m->tset, m->token, sizeof(m->tset));
				m->tbit = w[j].index;
			}
		}
		memset(&tmp->msgs[j], 0, sizeof(tmp->msgs[j]));
	}
	return TBX_OK;
}

/* The records of batch row @p ob (@p r, its @p cover) as the batch's
 * rows, from @p first on: one per cover entry, with its messages. */
static int ob_rows(tbx__batch_t *batch, size_t ob, const tbx__obatch_t *r,
		   const tbx__cover_t *cover)
{
	tbx__wire_ent_t *w = NULL;
	uint32_t wn = 0;
	tbx__row_t tmp;
	char why[256];
	int err;

	tbx__row_init(&tmp);
	if ((err = tbx__wire_decode(r->wire, r->wire_len, cover->n, &w, &wn,
				    why, sizeof(why)))) {
		tbx__log(TBX_LOG_ERR, "batch row %s: %s", r->row_id, why);
		return err;
	}
	if (r->msgs &&
	    (err = tbx__row_msgs_decode(r->msgs, r->msgs_len, r->row_id, &tmp)))
		goto out;
	if (tmp.msg_cnt != wn) {
		tbx__log(TBX_LOG_ERR,
			 "batch row %s: %zu messages, %" PRIu32 " wire entries",
			 r->row_id, tmp.msg_cnt, wn);
		err = TBX_ECORRUPT;
		goto out;
	}
	for (uint32_t e = 0; e < cover->n && !err; e++) {
		const tbx__cover_ent_t *c = &cover->ent[e];
		tbx__brow_t *brow;
		tbx__row_t *row;
		size_t idx;

		if (!(brow = tbx__batch_row_new(batch, &idx))) {
			err = TBX_ENOMEM;
			break;
		}
		brow->ob = ob;
		row = &brow->row;
		tbx__strlcpy(row->msg_id, c->msg_id, sizeof(row->msg_id));
		tbx__strlcpy(row->in_topic, c->topic, sizeof(row->in_topic));
		row->in_partition = c->partition;
		row->in_offset = c->offset;
		row->kind = c->kind == TBX__COVER_DEAD_LETTER
				? TBX_ROW_DEAD_LETTER
				: TBX_ROW_HANDLED;
		row->created_ms = r->created_ms;
		tbx__strlcpy(row->in_token, c->ref_id, sizeof(row->in_token));
		row->in_set = c->ref == TBX__REF_BIT;
		row->in_tbit = row->in_set ? c->index : 0;
		brow->set_part = row->in_set ? c->set_part : c->partition;
		if ((err = take_msgs(row, &tmp, w, e, r->tokfmt)))
			break;
		if (r->attempt[0]) {
			tbx__strlcpy(row->attempt, r->attempt,
				     sizeof(row->attempt));
			row->mint_seq = r->mint_seq;
			tbx__brow_set_state(brow, TBX_BROW_RECORDED);
		}
	}
out:
	tbx__row_clear(&tmp);
	free(w);
	return err;
}

static int ob_seen(void *opaque, const tbx__obatch_t *r,
		   const tbx__cover_t *cover)
{
	ob_load_t *l = opaque;
	tbx__ob_t *o;

	if (strcmp(r->row_id, l->row_id) != 0)
		return 0;
	l->first = l->batch->row_cnt;
	if ((l->err = tbx__ob_new(l->batch, &l->ob)))
		return 1;
	o = &l->batch->obs[l->ob - 1];
	tbx__strlcpy(o->row_id, r->row_id, sizeof(o->row_id));
	o->created_ms = r->created_ms;
	o->tokfmt = r->tokfmt;
	if ((l->err = ob_rows(l->batch, l->ob, r, cover))) {
		/* Nothing of it stays. */
		while (l->batch->row_cnt > l->first)
			tbx__batch_row_pop(l->batch);
		l->batch->ob_cnt--;
		l->ob = 0;
	}
	return 1;
}

/* Loads batch row @p row_id into the batch's rows (or finds it there):
 * *ob 1 + its index, 0 when the row is gone. */
int tbx__ob_load(tbx__proto_t *proto, tbx__batch_t *batch, const char *row_id,
		 size_t *ob)
{
	ob_load_t l = {batch, row_id, 0, 0, TBX_OK};
	int err;

	for (size_t k = 0; k < batch->ob_cnt; k++)
		if (strcmp(batch->obs[k].row_id, row_id) == 0) {
			*ob = k + 1;
			return TBX_OK;
		}
	err = tbx_outbox_obatch_load(proto->store, proto->group, ob_seen, &l);
	*ob = l.ob;
	return err ? err : l.err;
}

int tbx__ob_resume(tbx__proto_t *proto, tbx__batch_t *batch,
		   struct tbx_msg *msg, int *done)
{
	char row_id[TBX_UUID_LEN + 1];
	size_t i = (size_t)(msg - batch->msgs), ob, idx = 0, nth = 0;
	uint32_t entry = 0;
	int by_entry = 0, err, found = 0;

	*done = 0;
	if (per_message(msg) && proto->ob_cover && proto->ob_cover[i][0]) {
		tbx__strlcpy(row_id, proto->ob_cover[i], sizeof(row_id));
	} else {
		/* Set bits, and every record by its offset (a redelivered
		 * copy of one judged by the ingress offset, or of one whose
		 * token was no longer its group's). */
		tbx__resume_key_t key;
		const tbx__resume_row_t *row;
		tbx__resume_ans_t ans;

		msg_key(msg, &key);
		ans = tbx__resume_mem_check(
		    proto->rmem, &key,
		    gen_of(proto, msg->topic, tbx__resume_key_part(&key)), &row,
		    &entry);
		if (ans == TBX__RESUME_NOT_COVERED)
			return TBX_OK;
		if (ans == TBX__RESUME_RELOAD) {
			/* A synced every partition of the batch: memory
			 * cannot be stale here. */
			tbx__log(TBX_LOG_ERR,
				 "%s [%" PRId32 "] @%" PRId64
				 ": the resume check's memory of the partition "
				 "is stale after A loaded it",
				 msg->topic, msg->rkm->partition,
				 msg->rkm->offset);
			return TBX_ESTATE;
		}
		tbx__strlcpy(row_id, row->row_id, sizeof(row_id));
		by_entry = 1;
	}
	if ((err = tbx__ob_load(proto, batch, row_id, &ob)))
		return err;
	*done = 1;
	if (!ob) {
		/* Gone since A's memory or tbx_cover_msg named it: its E
		 * ran, after its D consumed the record's token.  Done. */
		msg->state = TBX_MS_DROPPED;
		msg->trace.dropped = "its batch row was finished meanwhile";
		proto->stats->duplicates_dropped++;
		return TBX_OK;
	}
	for (size_t k = 0; k < batch->row_cnt && !found; k++) {
		if (batch->rows[k].ob != ob)
			continue;
		if (by_entry
			? nth == entry
			: strcmp(batch->rows[k].row.msg_id, msg->id) == 0) {
			idx = k;
			found = 1;
		}
		nth++;
	}
	if (!found) {
		tbx__log(TBX_LOG_ERR,
			 "%s [%" PRId32 "] @%" PRId64
			 ": batch row %s covers the record but has no entry "
			 "for it",
			 msg->topic, msg->rkm->partition, msg->rkm->offset,
			 row_id);
		return TBX_ECORRUPT;
	}
	msg->state = TBX_MS_ROW;
	msg->row = idx;
	msg->trace.resumed = 1;
	proto->stats->resumed++;
	return TBX_OK;
}

void tbx__ob_mark_delivered(tbx__batch_t *batch)
{
	for (size_t k = 0; k < batch->ob_cnt; k++)
		batch->obs[k].delivered = 1;
	for (size_t i = 0; i < batch->row_cnt; i++) {
		const tbx__brow_t *brow = &batch->rows[i];

		if (brow->ob && brow->state != TBX_BROW_DELIVERED)
			batch->obs[brow->ob - 1].delivered = 0;
	}
}

int tbx__ob_finishable(const tbx__batch_t *batch, const tbx__brow_t *brow)
{
	return brow->state == TBX_BROW_DELIVERED &&
	       (!brow->ob || batch->obs[brow->ob - 1].delivered);
}

/* Loading the batch rows a pass picks. */
typedef struct ob_pick {
	tbx__batch_t *batch;
	tbx__ob_pick_fn pick;
	void *arg;
	size_t limit, cnt;
	int err;
} ob_pick_t;

static int ob_picked(void *opaque, const tbx__obatch_t *r,
		     const tbx__cover_t *cover)
{
	ob_pick_t *p = opaque;
	size_t ob, first = p->batch->row_cnt;

	if (!p->pick(p->arg, r, cover))
		return 0;
	if ((p->err = tbx__ob_new(p->batch, &ob)))
		return 1;
	tbx__strlcpy(p->batch->obs[ob - 1].row_id, r->row_id,
		     sizeof(p->batch->obs[0].row_id));
	p->batch->obs[ob - 1].created_ms = r->created_ms;
	p->batch->obs[ob - 1].tokfmt = r->tokfmt;
	if ((p->err = ob_rows(p->batch, ob, r, cover))) {
		while (p->batch->row_cnt > first)
			tbx__batch_row_pop(p->batch);
		p->batch->ob_cnt--;
		return 1;
	}
	return ++p->cnt >= p->limit;
}

int tbx__ob_load_picked(tbx__proto_t *proto, tbx__batch_t *batch,
			tbx__ob_pick_fn pick, void *arg, size_t limit,
			size_t *cnt)
{
	ob_pick_t p = {batch, pick, arg, limit, 0, TBX_OK};
	int err;

	*cnt = 0;
	if (limit == 0)
		return TBX_OK;
	err = tbx_outbox_obatch_load(proto->store, proto->group, ob_picked, &p);
	*cnt = p.cnt;
	if (err == TBX_ESCHEMA)
		return TBX_OK; /* a store without batch rows has none */
	return err ? err : p.err;
}

size_t tbx__ob_done(const tbx__batch_t *batch)
{
	size_t done = 0;

	for (size_t k = 1; k <= batch->ob_cnt; k++) {
		int all = 1;

		for (size_t i = 0; i < batch->row_cnt && all; i++)
			if (batch->rows[i].ob == k)
				all = tbx__row_done(&batch->rows[i]);
		done += all;
	}
	return done;
}

void tbx__ob_stats(tbx__proto_t *proto)
{
	tbx__resume_stats_t s;

	if (!proto->rmem)
		return;
	tbx__resume_mem_stats(proto->rmem, &s);
	proto->stats->resume_reloads = s.resume_reloads;
	proto->stats->resume_load_failures = s.load_failures;
	proto->stats->resume_drops = s.drops;
}
