/*
 * The batch's arrays: records, rows, the index of rows by message id,
 * and the slots of F's decisions; the state of each in-memory row, and
 * the one place where a row's attempt and tokens are minted and
 * forgotten.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/batch.h"

struct tbx_msg *tbx__batch_push(tbx__batch_t *batch)
{
	struct tbx_msg *msg;

	if (batch->cnt == batch->cap) {
		size_t cap = batch->cap ? batch->cap * 2 : 64;
		struct tbx_msg *grown =
		    realloc(batch->msgs, cap * sizeof(*grown));
		tbx__part_outcome_t *outcomes;

		if (!grown)
			return NULL;
		batch->msgs = grown;
		outcomes = realloc(batch->outcomes, cap * sizeof(*outcomes));
		if (!outcomes)
			return NULL;
		batch->outcomes = outcomes;
		batch->cap = cap;
	}
	msg = &batch->msgs[batch->cnt++];
	memset(msg, 0, sizeof(*msg));
	return msg;
}

void tbx__batch_reset(tbx__batch_t *batch)
{
	for (size_t i = 0; i < batch->cnt; i++) {
		if (batch->tracer) /* the records' process spans end here */
			tbx__trace_end(batch->tracer, &batch->msgs[i]);
		rd_kafka_message_destroy(batch->msgs[i].rkm);
	}
	batch->cnt = 0;
	batch->outcome_cnt = 0;
	for (size_t i = 0; i < batch->row_cnt; i++)
		tbx__row_clear(&batch->rows[i].row);
	batch->row_cnt = 0;
	batch->ob_cnt = 0;
}

size_t tbx__batch_keep(tbx__batch_t *batch)
{
	size_t kept = 0;

	for (size_t i = 0; i < batch->cnt; i++) {
		struct tbx_msg *msg = &batch->msgs[i];

		if (!msg->keep) {
			if (batch->tracer) /* its process span ends here */
				tbx__trace_end(batch->tracer, msg);
			rd_kafka_message_destroy(msg->rkm);
			continue;
		}
		/* As the poll handed it over (worker_poll.c): what the headers
		 * say stays, the protocol's notes of the batch go. */
		assert(msg->state == TBX_MS_SKIPPED);
		msg->keep = 0;
		msg->state = TBX_MS_NEW;
		msg->row = 0;
		msg->first = 0;
		msg->attempt = 1;
		msg->crashes = 0;
		msg->pre_row = msg->pre_token = -1;
		batch->msgs[kept++] = *msg;
	}
	batch->cnt = kept;
	batch->outcome_cnt = 0;
	for (size_t i = 0; i < batch->row_cnt; i++)
		tbx__row_clear(&batch->rows[i].row);
	batch->row_cnt = 0;
	batch->ob_cnt = 0;
	return kept;
}

void tbx__batch_free(tbx__batch_t *batch)
{
	free(batch->msgs);
	free(batch->outcomes);
	free(batch->rows);
	free(batch->obs);
	free(batch->ids);
	memset(batch, 0, sizeof(*batch));
}

tbx__brow_t *tbx__batch_row_new(tbx__batch_t *batch, size_t *idx)
{
	tbx__brow_t *brow;

	if (batch->row_cnt == batch->row_cap) {
		size_t cap = batch->row_cap ? batch->row_cap * 2 : 64;
		tbx__brow_t *grown = realloc(batch->rows, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		batch->rows = grown;
		batch->row_cap = cap;
	}
	*idx = batch->row_cnt;
	brow = &batch->rows[batch->row_cnt++];
	memset(brow, 0, sizeof(*brow));
	tbx__row_init(&brow->row);
	brow->state = TBX_BROW_UNTOKENED;
	return brow;
}

void tbx__batch_row_pop(tbx__batch_t *batch)
{
	tbx__row_clear(&batch->rows[--batch->row_cnt].row);
}

void tbx__batch_undo_rows(tbx__batch_t *batch)
{
	for (size_t i = 0; i < batch->cnt; i++)
		if (batch->msgs[i].state != TBX_MS_SKIPPED)
			batch->msgs[i].state = TBX_MS_NEW;
	for (size_t i = 0; i < batch->row_cnt; i++)
		tbx__row_clear(&batch->rows[i].row);
	batch->row_cnt = 0;
	batch->ob_cnt = 0;
}

/* A looks up every record's id among the batch's rows (an upstream copy
 * in the same batch joins its original's row): a hash index, not a scan,
 * so that a batch costs O(n), not O(n^2), string compares. */
static uint32_t id_hash(const char *id)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 16777619u;
	return h;
}

int tbx__batch_ids_reset(tbx__batch_t *batch, size_t cnt)
{
	size_t cap = 64;

	while (cap < 2 * cnt)
		cap *= 2;
	if (cap > batch->ids_cap) {
		uint32_t *ids = realloc(batch->ids, cap * sizeof(*ids));
		if (!ids)
			return TBX_ENOMEM;
		batch->ids = ids;
		batch->ids_cap = cap;
	}
	memset(batch->ids, 0, batch->ids_cap * sizeof(*batch->ids));
	return TBX_OK;
}

void tbx__batch_ids_add(tbx__batch_t *batch, size_t idx)
{
	size_t mask = batch->ids_cap - 1;
	size_t s = id_hash(batch->rows[idx].row.msg_id) & mask;

	while (batch->ids[s])
		s = (s + 1) & mask;
	batch->ids[s] = (uint32_t)idx + 1;
}

int tbx__batch_row_find(const tbx__batch_t *batch, const char *msg_id,
			size_t *idx)
{
	size_t mask = batch->ids_cap - 1;

	for (size_t s = id_hash(msg_id) & mask; batch->ids[s];
	     s = (s + 1) & mask) {
		size_t i = batch->ids[s] - 1;
		if (strcmp(batch->rows[i].row.msg_id, msg_id) == 0) {
			*idx = i;
			return 1;
		}
	}
	return 0;
}

int tbx__brow_transition_ok(tbx__brow_state_t from, tbx__brow_state_t to)
{
	switch (from) {
	case TBX_BROW_UNTOKENED:
		return to == TBX_BROW_MINTED || to == TBX_BROW_RECORDED ||
		       to == TBX_BROW_DELIVERED;
	case TBX_BROW_MINTED:
		return to == TBX_BROW_UNTOKENED || to == TBX_BROW_RECORDED ||
		       to == TBX_BROW_JOINED || to == TBX_BROW_GONE;
	case TBX_BROW_RECORDED:
	case TBX_BROW_JOINED:
		return to == TBX_BROW_DELIVERED;
	case TBX_BROW_DELIVERED:
		return to == TBX_BROW_FINISHED;
	case TBX_BROW_GONE:
	case TBX_BROW_FINISHED:
		return 0;
	}
	return 0;
}

/* 1 when every outgoing message of @p row has a token (@p with) or none
 * has (!@p with). */
static int tokens_all(const tbx__row_t *row, int with)
{
	for (size_t j = 0; j < row->msg_cnt; j++)
		if ((row->msgs[j].token[0] != '\0') != with)
			return 0;
	return 1;
}

int tbx__brow_assert_state(const tbx__brow_t *brow)
{
	const tbx__row_t *row = &brow->row;

	(void)row;
	(void)tokens_all;
	switch (brow->state) {
	case TBX_BROW_UNTOKENED:
		/* PROCESSED: no attempt, no number, no token. */
		assert(row->attempt[0] == '\0');
		assert(row->mint_seq == 0);
		assert(tokens_all(row, 0));
		break;
	case TBX_BROW_MINTED:
	case TBX_BROW_RECORDED:
	case TBX_BROW_JOINED:
		/* TOKENED, or about to be: an attempt and a token per
		 * outgoing message. */
		assert(row->attempt[0] != '\0');
		assert(tokens_all(row, 1));
		break;
	case TBX_BROW_GONE:
	case TBX_BROW_DELIVERED:
	case TBX_BROW_FINISHED:
		break;
	default:
		assert(!"an in-memory row in no known state");
	}
	return 1;
}

void tbx__brow_set_state(tbx__brow_t *brow, tbx__brow_state_t to)
{
	assert(tbx__brow_transition_ok(brow->state, to));
	brow->state = to;
	assert(tbx__brow_assert_state(brow));
}

void tbx__brow_mint(tbx__brow_t *brow, int64_t mint_seq,
		    tbx__mint_item_t *items)
{
	tbx__row_t *row = &brow->row;

	tbx__uuid(row->attempt);
	row->mint_seq = mint_seq;
	for (size_t j = 0; j < row->msg_cnt; j++) {
		tbx__uuid(row->msgs[j].token);
		items[j].token = row->msgs[j].token;
		items[j].topic = row->msgs[j].topic;
	}
	tbx__brow_set_state(brow, TBX_BROW_MINTED);
}

void tbx__brow_unmint(tbx__brow_t *brow)
{
	tbx__row_t *row = &brow->row;

	row->attempt[0] = '\0';
	row->mint_seq = 0;
	for (size_t j = 0; j < row->msg_cnt; j++) {
		row->msgs[j].token[0] = '\0';
		row->msgs[j].tset[0] = '\0';
		row->msgs[j].tbit = 0;
	}
	tbx__brow_set_state(brow, TBX_BROW_UNTOKENED);
}
