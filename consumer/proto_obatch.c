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
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/crash.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/partition.h"
#include "consumer/producer.h"
#include "consumer/proto_internal.h"
#include "consumer/protocol.h"
#include "consumer/resume_mem.h"
#include "tokens/sweep.h"

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

static int by_topic_part(const void *a, const void *b)
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
	      by_topic_part);
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
typedef struct ob_load {
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
static int ob_load(tbx__proto_t *proto, tbx__batch_t *batch, const char *row_id,
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
	if ((err = ob_load(proto, batch, row_id, &ob)))
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

void tbx__ob_written_free(tbx__ob_written_t *w)
{
	tbx__buf_free(&w->cover);
	tbx__cover_free(&w->dec);
	tbx__buf_free(&w->wire);
	free(w->msgs);
	free(w->gens);
	memset(w, 0, sizeof(*w));
}

/* The cover entry of @p brow. */
static void cover_of(const tbx__brow_t *brow, tbx__cover_ent_t *c)
{
	const tbx__row_t *row = &brow->row;

	memset(c, 0, sizeof(*c));
	c->kind = row->kind == TBX_ROW_DEAD_LETTER ? TBX__COVER_DEAD_LETTER
		  : row->in_token[0]		   ? TBX__COVER_HANDLED
						   : TBX__COVER_UNTOKENED;
	c->topic = row->in_topic;
	c->partition = row->in_partition;
	c->offset = row->in_offset;
	c->msg_id = row->msg_id;
	c->set_part = row->in_partition;
	if (!row->in_token[0]) {
		c->ref = TBX__REF_NONE;
	} else {
		tbx__strlcpy(c->ref_id, row->in_token, sizeof(c->ref_id));
		c->ref = row->in_set ? TBX__REF_BIT : TBX__REF_TOKEN;
		if (row->in_set) {
			c->index = (uint16_t)row->in_tbit;
			c->set_part = brow->set_part;
		}
	}
}

/* The messages of batch row @p ob (its records' rows in order) as one
 * msgs value, and its wire column.  *blob malloc'ed. */
static int ob_encode(const tbx__batch_t *batch, size_t ob, void **blob,
		     size_t *blob_len, tbx__buf_t *wire)
{
	tbx__row_t all;
	tbx__wire_ent_t *w = NULL;
	size_t n = 0, k = 0;
	uint32_t e = 0;
	int err;

	for (size_t i = 0; i < batch->row_cnt; i++)
		if (batch->rows[i].ob == ob)
			n += batch->rows[i].row.msg_cnt;
	tbx__row_init(&all);
	if (n && (!(all.msgs = malloc(n * sizeof(*all.msgs))) ||
		  !(w = malloc(n * sizeof(*w))))) {
		free(all.msgs);
		return TBX_ENOMEM;
	}
	for (size_t i = 0; i < batch->row_cnt; i++) {
		const tbx__row_t *row = &batch->rows[i].row;

		if (batch->rows[i].ob != ob)
			continue;
		for (size_t j = 0; j < row->msg_cnt; j++, k++) {
			const tbx__outmsg_t *m = &row->msgs[j];

			all.msgs[k] = *m; /* borrowed */
			/* tokfmt 2: the partition chosen in A, the bit B
			 * gave it (0 before). */
			w[k] = batch->obs[ob - 1].tokfmt == 2
				   ? (tbx__wire_ent_t){m->part,
						       (uint16_t)(m->tset[0]
								      ? m->tbit
								      : 0),
						       e}
				   : (tbx__wire_ent_t){-1, 0, e};
		}
		e++;
	}
	all.msg_cnt = n;
	*blob = NULL;
	*blob_len = 0;
	err = tbx__row_msgs_encode(&all, blob, blob_len);
	if (!err)
		err = tbx__wire_encode(wire, w, n);
	free(all.msgs);
	free(w);
	return err;
}

/* The token sets of one or more batch rows' attempts (tokfmt 2). */
typedef struct ob_sets {
	tbx__set_item_t *items;
	char (*ids)[TBX_UUID_LEN + 1];
	size_t cnt, cap;
} ob_sets_t;

/* Room for @p cap sets (at most one per message): never grown, so that
 * the items' set ids stay where they are. */
static int ob_sets_init(ob_sets_t *s, size_t cap)
{
	memset(s, 0, sizeof(*s));
	s->items = calloc(cap ? cap : 1, sizeof(*s->items));
	s->ids = calloc(cap ? cap : 1, sizeof(*s->ids));
	s->cap = cap;
	return s->items && s->ids ? TBX_OK : TBX_ENOMEM;
}

static void ob_sets_free(ob_sets_t *s)
{
	free(s->items);
	free(s->ids);
	memset(s, 0, sizeof(*s));
}

/* The number of messages of batch row @p ob. */
static size_t ob_msg_cnt(const tbx__batch_t *batch, size_t ob)
{
	size_t n = 0;

	for (size_t i = 0; i < batch->row_cnt; i++)
		if (batch->rows[i].ob == ob)
			n += batch->rows[i].row.msg_cnt;
	return n;
}

/*
 * Gives every message of batch row @p ob a bit of a fresh token set, one
 * set per destination (topic, partition) of the row (a second one past
 * TBX_SET_BITS_MAX), bits in queue order: tset and token the set's id,
 * tbit its index.  The sets are appended to @p s, which has room for a
 * set per message.
 */
static void ob_sets_make(tbx__batch_t *batch, size_t ob, ob_sets_t *s)
{
	size_t first = s->cnt;

	for (size_t i = 0; i < batch->row_cnt; i++) {
		tbx__row_t *row = &batch->rows[i].row;

		if (batch->rows[i].ob != ob)
			continue;
		for (size_t j = 0; j < row->msg_cnt; j++) {
			tbx__outmsg_t *m = &row->msgs[j];
			size_t k = s->cnt;

			for (size_t q = s->cnt; q-- > first;)
				if (s->items[q].part == m->part &&
				    strcmp(s->items[q].topic, m->topic) == 0) {
					k = q;
					break;
				}
			if (k == s->cnt ||
			    s->items[k].nbits == TBX_SET_BITS_MAX) {
				k = s->cnt++;
				tbx__uuid(s->ids[k]);
				s->items[k] = (tbx__set_item_t){
				    s->ids[k], m->topic, m->part, 0};
			}
			m->tbit = s->items[k].nbits++;
			memcpy(m->tset, s->ids[k], sizeof(m->tset));
			memcpy(m->token, s->ids[k], sizeof(m->token));
		}
	}
}

/* The rows of batch row @p ob take attempt @p attempt and their sets
 * (ob_sets_make()): MINTED. */
static void ob_sets_minted(tbx__batch_t *batch, size_t ob, const char *attempt,
			   int64_t mint_seq)
{
	for (size_t i = 0; i < batch->row_cnt; i++) {
		tbx__brow_t *brow = &batch->rows[i];

		if (brow->ob != ob)
			continue;
		tbx__strlcpy(brow->row.attempt, attempt,
			     sizeof(brow->row.attempt));
		brow->row.mint_seq = mint_seq;
		tbx__brow_set_state(brow, TBX_BROW_MINTED);
	}
}

/*
 * tokens.format = set: every message of batch row @p ob gets the
 * partition the producer's partitioner would give it, before anything
 * is minted for it (docs/batched-tokens.md).  A partition count not
 * learnt within dispatch.timeout.ms is TBX_ETIMEOUT (counted in
 * partition_unknown and logged at WARN by the partitioner): A fails and
 * the batch is retried, as after a store error.
 */
static int ob_choose_parts(tbx__proto_t *proto, tbx__batch_t *batch, size_t ob)
{
	char why[256];
	int err;

	if (!*proto->producer &&
	    !(*proto->producer = tbx__producer_new(proto->conf, proto->errstr,
						   proto->errstr_size)))
		return TBX_EKAFKA;
	if (!proto->parts &&
	    (err = tbx__partitioner_new(*proto->producer,
					&proto->stats->partition_unknown,
					&proto->parts, why, sizeof(why)))) {
		tbx__log(TBX_LOG_ERR, "tokens.format=set: %s", why);
		return err;
	}
	for (size_t i = 0; i < batch->row_cnt; i++) {
		tbx__row_t *row = &batch->rows[i].row;

		if (batch->rows[i].ob != ob)
			continue;
		for (size_t j = 0; j < row->msg_cnt; j++) {
			tbx__outmsg_t *m = &row->msgs[j];

			err = tbx__partition_choose(
			    proto->parts, *proto->producer, m->topic, m->key,
			    m->key ? m->key_len : 0, proto->dispatch_timeout_ms,
			    &m->part);
			if (err == TBX_ETIMEOUT)
				return err; /* the partitioner said so */
			if (err) {
				tbx__log(TBX_LOG_WARNING,
					 "batch row %s: no partition chosen "
					 "for a message to %s: %s; the batch "
					 "is retried",
					 batch->obs[ob - 1].row_id, m->topic,
					 tbx_strerror(err));
				return err;
			}
		}
	}
	return TBX_OK;
}

int tbx__ob_write(tbx__proto_t *proto, tbx__batch_t *batch,
		  tbx__ob_written_t *out)
{
	tbx__cover_ent_t *cover = NULL;
	tbx__mint_item_t *items = NULL;
	size_t n = 0, nmsg = 0, ob, k = 0;
	char why[256], attempt[TBX_UUID_LEN + 1];
	int err;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < batch->row_cnt; i++)
		if (batch->rows[i].later && !batch->rows[i].ob) {
			n++;
			nmsg += batch->rows[i].row.msg_cnt;
		}
	if (n == 0)
		return TBX_OK; /* nothing handled: no row */
	if ((err = tbx__ob_new(batch, &ob)))
		return err;
	tbx__ob_t *o = &batch->obs[ob - 1];
	tbx__uuid(o->row_id);
	o->fresh = 1;
	o->tokfmt = proto->own_sets ? 2 : 1;
	o->created_ms = tbx__now_ms();
	for (size_t i = 0; i < batch->row_cnt; i++)
		if (batch->rows[i].later && !batch->rows[i].ob)
			batch->rows[i].ob = ob;
	if (o->tokfmt == 2 && nmsg && (err = ob_choose_parts(proto, batch, ob)))
		return err;
	if (o->tokfmt == 2 && proto->joined && nmsg) {
		/* Joined: the row's attempt and its sets, a row per set and
		 * subscribed group, made with it in A (no registration). */
		ob_sets_t sets;

		if ((err = ob_sets_init(&sets, nmsg))) {
			ob_sets_free(&sets);
			return err;
		}
		tbx__uuid(attempt);
		ob_sets_make(batch, ob, &sets);
		ob_sets_minted(batch, ob, attempt, batch->mint_seq);
		/* The rows created are added to batch->minted when the
		 * statement has run: on PostgreSQL, deferred to the
		 * transaction's next statement, after this returns (a local
		 * counter would be gone by then). */
		err = tbx_tokens_sets_mint_joined(proto->tokens, sets.items,
						  sets.cnt, batch->mint_seq,
						  &batch->minted);
		ob_sets_free(&sets);
		if (err)
			return err;
		for (size_t i = 0; i < batch->row_cnt; i++)
			if (batch->rows[i].ob == ob)
				tbx__brow_set_state(&batch->rows[i],
						    TBX_BROW_JOINED);
	} else if (proto->joined && nmsg) {
		/* Joined: the batch row's attempt, and a token per message,
		 * made with it in A (no registration: as the record
		 * layout's). */
		if (!(items = malloc(nmsg * sizeof(*items))))
			return TBX_ENOMEM;
		tbx__uuid(attempt);
		for (size_t i = 0; i < batch->row_cnt; i++) {
			tbx__brow_t *brow = &batch->rows[i];

			if (brow->ob != ob)
				continue;
			tbx__brow_mint(brow, batch->mint_seq, &items[k]);
			tbx__strlcpy(brow->row.attempt, attempt,
				     sizeof(brow->row.attempt));
			k += brow->row.msg_cnt;
		}
		err = tbx_tokens_mint_joined(proto->tokens, items, k,
					     batch->mint_seq, &batch->minted);
		free(items);
		if (err)
			return err;
		for (size_t i = 0; i < batch->row_cnt; i++)
			if (batch->rows[i].ob == ob)
				tbx__brow_set_state(&batch->rows[i],
						    TBX_BROW_JOINED);
	}
	if (!(cover = malloc(n * sizeof(*cover)))) /* cover_of() fills it */
		return TBX_ENOMEM;
	k = 0;
	for (size_t i = 0; i < batch->row_cnt; i++)
		if (batch->rows[i].ob == ob)
			cover_of(&batch->rows[i], &cover[k++]);
	if ((err =
		 tbx__cover_encode(&out->cover, cover, n, why, sizeof(why)))) {
		tbx__log(TBX_LOG_ERR, "batch row %s: %s", o->row_id, why);
		goto out;
	}
	/* Decoded once, from the entries the encoder has just checked: the
	 * store inserts the row by it and the resume memory keeps it. */
	if ((err = tbx__cover_from(&out->dec, cover, n)))
		goto out;
	if ((err =
		 ob_encode(batch, ob, &out->msgs, &out->msgs_len, &out->wire)))
		goto out;
	tbx__strlcpy(out->row.row_id, o->row_id, sizeof(out->row.row_id));
	if (proto->joined && nmsg) {
		tbx__strlcpy(out->row.attempt, attempt,
			     sizeof(out->row.attempt));
		out->row.mint_seq = batch->mint_seq;
	}
	out->row.tokfmt = o->tokfmt;
	out->row.created_ms = o->created_ms;
	out->row.stuck_ms = -1;
	out->row.cover = out->cover.p;
	out->row.cover_len = out->cover.len;
	out->row.cover_dec = &out->dec;
	out->row.msgs = out->msgs;
	out->row.msgs_len = out->msgs_len;
	out->row.wire = out->wire.p;
	out->row.wire_len = out->wire.len;
	if ((err = tbx_outbox_obatch_insert(proto->store, proto->group,
					    &out->row))) {
		const char *m = tbx_outbox_errmsg(proto->store);

		tbx__log(TBX_LOG_ERR, "batch row %s not inserted: %s: %s",
			 o->row_id, tbx_strerror(err), m && *m ? m : "");
		goto out;
	}
	/* gen += 1 on every partition the row covers (a set bit's: the
	 * partition its set was minted for), per topic, ascending.  A
	 * batch covers a few partitions: the list grows as they are met. */
	for (size_t i = 0, cap = 0; i < n; i++) {
		int32_t part = cover[i].ref == TBX__REF_BIT
				   ? cover[i].set_part
				   : cover[i].partition;
		int dup = 0;

		for (size_t j = out->gen_cnt; j-- > 0 && !dup;)
			dup = out->gens[j].part == part &&
			      strcmp(out->gens[j].topic, cover[i].topic) == 0;
		if (dup)
			continue;
		if (out->gen_cnt == cap) {
			size_t more = cap ? 2 * cap : 8;
			tbx__ob_gen_t *g =
			    realloc(out->gens, more * sizeof(*g));

			if (!g) {
				err = TBX_ENOMEM;
				goto out;
			}
			out->gens = g;
			cap = more;
		}
		tbx__strlcpy(out->gens[out->gen_cnt].topic, cover[i].topic,
			     sizeof(out->gens[0].topic));
		out->gens[out->gen_cnt].part = part;
		out->gens[out->gen_cnt++].gen = 0;
	}
	qsort(out->gens, out->gen_cnt, sizeof(*out->gens), by_topic_part);
	for (size_t i = 0; i < out->gen_cnt && !err;) {
		size_t j = i;
		int32_t parts[256];
		int64_t gens[256];

		while (j < out->gen_cnt && j - i < 256 &&
		       strcmp(out->gens[j].topic, out->gens[i].topic) == 0) {
			parts[j - i] = out->gens[j].part;
			j++;
		}
		if (!(err = tbx_outbox_gens_bump(proto->store, proto->group,
						 out->gens[i].topic, parts,
						 j - i, gens)))
			for (size_t q = i; q < j; q++)
				out->gens[q].gen = gens[q - i];
		i = j;
	}
out:
	free(cover);
	return err;
}

void tbx__ob_committed(tbx__proto_t *proto, tbx__ob_written_t *w)
{
	if (!w->row.row_id[0])
		return;
	/* A row memory cannot take is not trusted: the bumped partitions
	 * then lose their mgen and the next A loads them again. */
	if (tbx__resume_mem_add_cover(proto->rmem, &w->row, &w->dec) ==
	    TBX_OK) {
		for (size_t i = 0; i < w->gen_cnt;) {
			size_t j = i;
			int32_t parts[256];
			int64_t gens[256];

			while (j < w->gen_cnt && j - i < 256 &&
			       strcmp(w->gens[j].topic, w->gens[i].topic) ==
				   0) {
				parts[j - i] = w->gens[j].part;
				gens[j - i] = w->gens[j].gen;
				j++;
			}
			tbx__resume_mem_bumped(proto->rmem, w->gens[i].topic,
					       parts, j - i, gens);
			i = j;
		}
	} else {
		tbx__resume_mem_drop(proto->rmem);
	}
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

/* B for batch row @p ob lost to another attempt: the winner's attempt
 * and tokens, message by message, from the stored row (the same
 * records and messages in the same order), or GONE. */
static int ob_winner(tbx__proto_t *proto, tbx__batch_t *batch, size_t ob)
{
	tbx__batch_t tmp;
	size_t got = 0, k = 0, first;
	int err;

	memset(&tmp, 0, sizeof(tmp));
	err = ob_load(proto, &tmp, batch->obs[ob - 1].row_id, &got);
	if (err || !got) {
		for (size_t i = 0; i < batch->row_cnt; i++) {
			tbx__brow_t *brow = &batch->rows[i];

			if (brow->ob != ob)
				continue;
			if (err)
				tbx__brow_unmint(brow);
			else
				tbx__brow_set_state(brow, TBX_BROW_GONE);
		}
		tbx__batch_reset(&tmp);
		tbx__batch_free(&tmp);
		return err;
	}
	first = 0;
	for (size_t i = 0; i < batch->row_cnt && !err; i++) {
		tbx__brow_t *brow = &batch->rows[i];
		const tbx__row_t *won;

		if (brow->ob != ob)
			continue;
		won = first + k < tmp.row_cnt ? &tmp.rows[first + k].row : NULL;
		k++;
		if (!won || won->msg_cnt != brow->row.msg_cnt ||
		    strcmp(won->msg_id, brow->row.msg_id) != 0) {
			err = TBX_ESTATE;
			break;
		}
		tbx__strlcpy(brow->row.attempt, won->attempt,
			     sizeof(brow->row.attempt));
		brow->row.mint_seq = won->mint_seq;
		for (size_t j = 0; j < won->msg_cnt; j++) {
			tbx__outmsg_t *m = &brow->row.msgs[j];

			tbx__strlcpy(m->token, won->msgs[j].token,
				     sizeof(m->token));
			/* tokfmt 2: the winner's set, bit and partition. */
			memcpy(m->tset, won->msgs[j].tset, sizeof(m->tset));
			m->tbit = won->msgs[j].tbit;
			m->part = won->msgs[j].part;
		}
		tbx__brow_set_state(brow, TBX_BROW_RECORDED);
	}
	if (err) {
		tbx__log(TBX_LOG_ERR,
			 "batch row %s: the recorded attempt's row does not "
			 "match the one in memory",
			 batch->obs[ob - 1].row_id);
		for (size_t i = 0; i < batch->row_cnt; i++)
			if (batch->rows[i].ob == ob &&
			    batch->rows[i].state == TBX_BROW_MINTED)
				tbx__brow_unmint(&batch->rows[i]);
	}
	tbx__batch_reset(&tmp);
	tbx__batch_free(&tmp);
	return err;
}

/* Does batch row @p ob need an attempt from B: its records' rows are
 * UNTOKENED and it has a message.  Only rows whose messages take sets
 * (@p sets) or per-message tokens (!@p sets). */
static int ob_needs_attempt(const tbx__batch_t *batch, size_t ob, int sets)
{
	int msgs = 0;

	if ((batch->obs[ob - 1].tokfmt == 2) != sets)
		return 0;

	for (size_t i = 0; i < batch->row_cnt; i++) {
		const tbx__brow_t *brow = &batch->rows[i];

		if (brow->ob != ob)
			continue;
		if (brow->state != TBX_BROW_UNTOKENED)
			return 0;
		msgs |= brow->row.msg_cnt > 0;
	}
	return msgs;
}

/*
 * B's S transaction, for either token format: records each of the @p cnt
 * batch rows @p obs with its attempt @p attempts[c] (mint_seq @p seq, the
 * tokens or sets in msgs, the bits in wire) WHERE attempt IS NULL, and
 * says in @p won whether it did.  Rolled back on any error.
 */
static int ob_record(tbx__proto_t *proto, tbx__batch_t *batch,
		     const size_t *obs, char (*attempts)[TBX_UUID_LEN + 1],
		     size_t cnt, int64_t seq, int *won)
{
	int err;

	if ((err = tbx_outbox_begin(proto->store)))
		return err;
	for (size_t c = 0; c < cnt && !err; c++) {
		void *msgs = NULL;
		size_t msgs_len = 0;
		tbx__buf_t wire = {0};

		for (size_t i = 0; i < batch->row_cnt; i++)
			if (batch->rows[i].ob == obs[c])
				batch->rows[i].row.mint_seq = seq;
		if (!(err = ob_encode(batch, obs[c], &msgs, &msgs_len, &wire)))
			err = tbx_outbox_obatch_set_attempt(
			    proto->store, proto->group,
			    batch->obs[obs[c] - 1].row_id, attempts[c], seq,
			    msgs, msgs_len, wire.p, wire.len, &won[c]);
		free(msgs);
		tbx__buf_free(&wire);
	}
	if (err || (err = tbx_outbox_commit(proto->store))) {
		tbx_outbox_rollback(proto->store);
		return err;
	}
	tbx__crashpoint("B.recorded");
	return TBX_OK;
}

/*
 * After ob_record(): a row whose attempt was recorded is RECORDED; one
 * where another attempt was recorded first drops ours at once (@p sets:
 * its sets, every group's, and its registration; else its per-message
 * tokens) and goes on with the winner's (ob_winner()).
 */
static int ob_settle(tbx__proto_t *proto, tbx__batch_t *batch,
		     const size_t *obs, char (*attempts)[TBX_UUID_LEN + 1],
		     size_t cnt, const int *won, int sets)
{
	int err;

	for (size_t c = 0; c < cnt; c++) {
		int dropped = 0;

		if (won[c]) {
			for (size_t i = 0; i < batch->row_cnt; i++)
				if (batch->rows[i].ob == obs[c])
					tbx__brow_set_state(&batch->rows[i],
							    TBX_BROW_RECORDED);
			continue;
		}
		if ((sets
			 ? tbx_tokens_sets_drop_attempt(
			       proto->tokens, attempts[c], &dropped, NULL)
			 : tbx_tokens_drop_attempt(proto->tokens, attempts[c],
						   &dropped, NULL)) == TBX_OK &&
		    dropped)
			proto->stats->attempts_lost++;
		if ((err = ob_winner(proto, batch, obs[c])))
			return err;
	}
	return TBX_OK;
}

/*
 * B for the batch rows whose messages take token sets (tokfmt 2): per
 * row a fresh attempt, registered as one tbx_breg row named by the row's
 * id, and per destination (topic, partition) a fresh set with a row per
 * subscribed group, all in one T transaction (sets_mint); then one S
 * transaction records each row's attempt WHERE attempt IS NULL, with the
 * set ids in msgs' token fields and the bits in wire.  A loser drops its
 * own attempt and goes on with the winner's, or finds the row gone.
 */
static int ob_set_tokens(tbx__proto_t *proto, tbx__batch_t *batch)
{
	tbx__set_req_t *reqs = NULL;
	size_t *obs = NULL, *firsts = NULL, cnt = 0, nmsg = 0;
	char(*attempts)[TBX_UUID_LEN + 1] = NULL;
	int *won = NULL;
	int64_t seq = 0;
	uint64_t created = 0;
	ob_sets_t sets;
	int err = TBX_OK;

	memset(&sets, 0, sizeof(sets));
	for (size_t ob = 1; ob <= batch->ob_cnt; ob++)
		if (ob_needs_attempt(batch, ob, 1)) {
			cnt++;
			nmsg += ob_msg_cnt(batch, ob);
		}
	if (cnt == 0)
		return TBX_OK;
	reqs = calloc(cnt, sizeof(*reqs));
	obs = calloc(cnt, sizeof(*obs));
	firsts = calloc(cnt, sizeof(*firsts));
	attempts = calloc(cnt, sizeof(*attempts));
	won = calloc(cnt, sizeof(*won));
	if (!reqs || !obs || !firsts || !attempts || !won ||
	    ob_sets_init(&sets, nmsg)) {
		err = TBX_ENOMEM;
		goto out;
	}
	cnt = 0;
	for (size_t ob = 1; ob <= batch->ob_cnt; ob++) {
		if (!ob_needs_attempt(batch, ob, 1))
			continue;
		tbx__uuid(attempts[cnt]);
		firsts[cnt] = sets.cnt;
		ob_sets_make(batch, ob, &sets);
		ob_sets_minted(batch, ob, attempts[cnt], 0);
		reqs[cnt].attempt = attempts[cnt];
		/* The registration names the batch row by its id, as
		 * register-cleanup looks it up (tokens/sweep.c). */
		reqs[cnt].row_id = batch->obs[ob - 1].row_id;
		reqs[cnt].set_cnt = sets.cnt - firsts[cnt];
		obs[cnt++] = ob;
	}
	for (size_t c = 0; c < cnt; c++)
		reqs[c].sets = &sets.items[firsts[c]];
	if ((err = tbx_tokens_sets_mint(proto->tokens, proto->group, reqs, cnt,
					&seq, &created)))
		goto unmint;
	proto->stats->tokens_created += created;
	tbx__crashpoint("B.minted");
	if ((err = ob_record(proto, batch, obs, attempts, cnt, seq, won)))
		goto unmint;
	err = ob_settle(proto, batch, obs, attempts, cnt, won, 1);
	goto out;
unmint:
	tbx__log(TBX_LOG_WARNING,
		 "recording the token sets of batch rows failed: %s",
		 tbx_strerror(err));
	for (size_t c = 0; c < cnt; c++)
		for (size_t i = 0; i < batch->row_cnt; i++)
			if (batch->rows[i].ob == obs[c] &&
			    batch->rows[i].state == TBX_BROW_MINTED)
				tbx__brow_unmint(&batch->rows[i]);
out:
	ob_sets_free(&sets);
	free(reqs);
	free(obs);
	free(firsts);
	free(attempts);
	free(won);
	return err;
}

int tbx__ob_tokens(tbx__proto_t *proto, tbx__batch_t *batch)
{
	tbx__mint_req_t *reqs = NULL;
	tbx__mint_item_t *items = NULL;
	size_t *obs = NULL, cnt = 0, nitems = 0, k = 0;
	char(*attempts)[TBX_UUID_LEN + 1] = NULL;
	char(*regids)[TBX_UUID_LEN + 3] = NULL;
	int *won = NULL;
	int64_t seq = 0;
	uint64_t created = 0;
	int err;

	if ((err = ob_set_tokens(proto, batch)))
		return err;
	for (size_t ob = 1; ob <= batch->ob_cnt; ob++)
		if (ob_needs_attempt(batch, ob, 0))
			cnt++;
	if (cnt == 0)
		return TBX_OK;
	for (size_t i = 0; i < batch->row_cnt; i++)
		nitems += batch->rows[i].ob ? batch->rows[i].row.msg_cnt : 0;
	reqs = calloc(cnt, sizeof(*reqs));
	items = calloc(nitems ? nitems : 1, sizeof(*items));
	obs = calloc(cnt, sizeof(*obs));
	attempts = calloc(cnt, sizeof(*attempts));
	won = calloc(cnt, sizeof(*won));
	regids = calloc(cnt, sizeof(*regids));
	if (!reqs || !items || !obs || !attempts || !won || !regids) {
		err = TBX_ENOMEM;
		goto out;
	}
	cnt = 0;
	for (size_t ob = 1; ob <= batch->ob_cnt; ob++) {
		size_t first = k;

		if (!ob_needs_attempt(batch, ob, 0))
			continue;
		/* A fresh attempt for the whole row, a fresh token per
		 * message; the registration names the batch row ("b:" and
		 * its id, tokens/sweep.h). */
		tbx__uuid(attempts[cnt]);
		for (size_t i = 0; i < batch->row_cnt; i++) {
			tbx__brow_t *brow = &batch->rows[i];

			if (brow->ob != ob)
				continue;
			tbx__brow_mint(brow, 0, &items[k]);
			tbx__strlcpy(brow->row.attempt, attempts[cnt],
				     sizeof(brow->row.attempt));
			k += brow->row.msg_cnt;
		}
		reqs[cnt].attempt = attempts[cnt];
		snprintf(regids[cnt], sizeof(regids[cnt]), "%s%s",
			 TBX_SWEEP_ROW_PREFIX, batch->obs[ob - 1].row_id);
		reqs[cnt].msg_id = regids[cnt];
		reqs[cnt].items = &items[first];
		reqs[cnt].item_cnt = k - first;
		obs[cnt++] = ob;
	}
	if ((err = tbx_tokens_mint(proto->tokens, proto->group, reqs, cnt, &seq,
				   &created)))
		goto unmint;
	proto->stats->tokens_created += created;
	tbx__crashpoint("B.minted");
	if ((err = ob_record(proto, batch, obs, attempts, cnt, seq, won)))
		goto unmint;
	err = ob_settle(proto, batch, obs, attempts, cnt, won, 0);
	goto out;
unmint:
	tbx__log(TBX_LOG_WARNING, "recording attempts of batch rows failed: %s",
		 tbx_strerror(err));
	for (size_t c = 0; c < cnt; c++)
		for (size_t i = 0; i < batch->row_cnt; i++)
			if (batch->rows[i].ob == obs[c] &&
			    batch->rows[i].state == TBX_BROW_MINTED)
				tbx__brow_unmint(&batch->rows[i]);
out:
	free(reqs);
	free(items);
	free(obs);
	free(attempts);
	free(regids);
	free(won);
	return err;
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
