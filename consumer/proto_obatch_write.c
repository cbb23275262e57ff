/*
 * outbox.layout = batch, phase A's end (docs/batched-tokens.md, "The
 * outbox row by the batch"): the batch's handled and dead-lettered
 * records become ONE tbx_obatch row (tbx__ob_write()): its cover (which
 * incoming records it covers), its messages and their wire entries, the
 * gen of each partition it covers bumped under that partition's lock;
 * with tokens.format = set the messages' partitions chosen first
 * (ob_choose_parts()), and on one file the sets minted here.  Once A
 * commits, the row goes into the resume check's memory
 * (tbx__ob_committed()).  The overview is in proto_obatch.c.
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/partition.h"
#include "consumer/producer.h"
#include "consumer/proto_obatch.h"
#include "consumer/protocol.h"
#include "consumer/resume_mem.h"

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
int tbx__ob_encode(const tbx__batch_t *batch, size_t ob, void **blob,
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
		tbx__ob_sets_t sets;

		if ((err = tbx__ob_sets_init(&sets, nmsg))) {
			tbx__ob_sets_free(&sets);
			return err;
		}
		tbx__uuid(attempt);
		tbx__ob_sets_make(batch, ob, &sets);
		tbx__ob_sets_minted(batch, ob, attempt, batch->mint_seq);
		/* The rows created are added to batch->minted when the
		 * statement has run: on PostgreSQL, deferred to the
		 * transaction's next statement, after this returns (a local
		 * counter would be gone by then). */
		err = tbx_tokens_sets_mint_joined(proto->tokens, sets.items,
						  sets.cnt, batch->mint_seq,
						  &batch->minted);
		tbx__ob_sets_free(&sets);
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
	if ((err = tbx__ob_encode(batch, ob, &out->msgs, &out->msgs_len,
				  &out->wire)))
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
	qsort(out->gens, out->gen_cnt, sizeof(*out->gens), tbx__ob_gen_cmp);
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
