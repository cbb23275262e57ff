/*
 * B, tokens (docs/architecture.md): an attempt and tokens minted and
 * registered in one T transaction for the rows that have none, the
 * attempt recorded in one S transaction.
 */
#include <stdlib.h>

#include "base/crash.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/proto_internal.h"
#include "consumer/protocol.h"

/* B: forgets the attempts and tokens of the rows @p minted (what was to
 * persist them failed). */
static void mint_undo(tbx__batch_t *batch, const size_t *minted, size_t cnt)
{
	for (size_t i = 0; i < cnt; i++)
		tbx__brow_unmint(&batch->rows[minted[i]]);
}

/* B: tokens for rows that have none yet. */
int tbx__phase_tokens(tbx__proto_t *proto, tbx__batch_t *batch)
{
	tbx__mint_req_t *reqs = NULL;
	tbx__mint_item_t *items = NULL;
	size_t *minted = NULL, cnt = 0, item_cnt = 0, k = 0;
	int *won = NULL;
	int64_t seq = 0;
	uint64_t created = 0;
	int err;

	/* outbox.layout = batch: an attempt per batch row, for all its
	 * records' messages (proto_obatch_tokens.c); the rest, per record. */
	if (batch->ob_cnt && (err = tbx__ob_tokens(proto, batch)))
		return err;
	for (size_t i = 0; i < batch->row_cnt; i++) {
		tbx__brow_t *brow = &batch->rows[i];
		if (brow->state != TBX_BROW_UNTOKENED ||
		    brow->row.msg_cnt == 0 || brow->ob)
			continue;
		cnt++;
		item_cnt += brow->row.msg_cnt;
	}
	if (cnt == 0)
		return TBX_OK;
	reqs = calloc(cnt, sizeof(*reqs));
	items = calloc(item_cnt, sizeof(*items));
	minted = calloc(cnt, sizeof(*minted));
	won = calloc(cnt, sizeof(*won));
	if (!reqs || !items || !minted || !won) {
		err = TBX_ENOMEM;
		goto out;
	}
	cnt = 0;
	for (size_t i = 0; i < batch->row_cnt; i++) {
		tbx__brow_t *brow = &batch->rows[i];
		tbx__row_t *row = &brow->row;
		if (brow->state != TBX_BROW_UNTOKENED || row->msg_cnt == 0 ||
		    brow->ob)
			continue;
		/* A fresh attempt id and fresh tokens: per attempt. */
		tbx__brow_mint(brow, 0, &items[k]);
		reqs[cnt].attempt = row->attempt;
		reqs[cnt].msg_id = row->msg_id;
		reqs[cnt].items = &items[k];
		reqs[cnt].item_cnt = row->msg_cnt;
		k += row->msg_cnt;
		minted[cnt++] = i;
	}
	if ((err = tbx_tokens_mint(proto->tokens, proto->group, reqs, cnt, &seq,
				   &created))) {
		mint_undo(batch, minted, cnt);
		goto out;
	}
	proto->stats->tokens_created += created;
	tbx__crashpoint("B.minted");

	/* First persisted attempt wins.  If this transaction fails, our
	 * tokens are registered but not recorded: orphans for the sweeper
	 * once a later attempt is recorded. */
	if ((err = tbx_outbox_begin(proto->store)))
		goto orphaned;
	for (size_t i = 0; i < cnt; i++) {
		tbx__row_t *row = &batch->rows[minted[i]].row;
		row->mint_seq = seq;
		if ((err = tbx_outbox_row_set_attempt(
			 proto->store, proto->group, row, &won[i]))) {
			tbx_outbox_rollback(proto->store);
			goto orphaned;
		}
	}
	if ((err = tbx_outbox_commit(proto->store))) {
		tbx_outbox_rollback(proto->store);
		goto orphaned;
	}
	tbx__crashpoint("B.recorded");

	for (size_t i = 0; i < cnt; i++) {
		tbx__brow_t *brow = &batch->rows[minted[i]];
		char lost[TBX_UUID_LEN + 1];
		int dropped;

		if (won[i]) {
			tbx__brow_set_state(brow, TBX_BROW_RECORDED);
			continue;
		}
		/* Another attempt was recorded first: drop ours at once
		 * (the sweeper would otherwise) and go on with the
		 * winner's ids and tokens. */
		tbx__strlcpy(lost, brow->row.attempt, sizeof(lost));
		if (tbx_tokens_drop_attempt(proto->tokens, lost, &dropped,
					    NULL) == TBX_OK &&
		    dropped)
			proto->stats->attempts_lost++;
		err = tbx_outbox_row_load(proto->store, proto->group,
					  brow->row.msg_id, &brow->row);
		if (err == TBX_ENOENT) {
			/* another worker finished it */
			tbx__brow_set_state(brow, TBX_BROW_GONE);
			err = TBX_OK;
		} else if (err) {
			tbx__brow_unmint(brow); /* the load cleared the row */
			goto out;
		} else {
			tbx__brow_set_state(brow, TBX_BROW_RECORDED);
		}
	}
	goto out;
orphaned:
	tbx__log(TBX_LOG_WARNING, "recording attempts failed: %s",
		 tbx_strerror(err));
	mint_undo(batch, minted, cnt);
out:
	free(reqs);
	free(items);
	free(minted);
	free(won);
	return err;
}
