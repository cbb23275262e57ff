/*
 * outbox.layout = batch, phase B (docs/batched-tokens.md): a batch row
 * takes one attempt for all its records (tbx__ob_tokens()), recorded
 * with WHERE attempt IS NULL.  tokfmt 1 mints a token per message, as
 * the record layout does; tokfmt 2 (tokens.format = set) one token set
 * per destination (topic, partition) and receiving group
 * (tbx__ob_sets_make()), registered as one tbx_breg row named by the
 * batch row's id.  A loser drops what it minted and takes the winner's
 * attempt and tokens from the stored row (ob_winner()).  The overview is
 * in proto_obatch.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crash.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/proto_obatch.h"
#include "consumer/protocol.h"
#include "tokens/sweep.h"

/* Room for @p cap sets (at most one per message): never grown, so that
 * the items' set ids stay where they are. */
int tbx__ob_sets_init(tbx__ob_sets_t *s, size_t cap)
{
	memset(s, 0, sizeof(*s));
	s->items = calloc(cap ? cap : 1, sizeof(*s->items));
	s->ids = calloc(cap ? cap : 1, sizeof(*s->ids));
	s->cap = cap;
	return s->items && s->ids ? TBX_OK : TBX_ENOMEM;
}

void tbx__ob_sets_free(tbx__ob_sets_t *s)
{
	free(s->items);
	free(s->ids);
	memset(s, 0, sizeof(*s));
}

/* The number of messages of batch row @p ob. */
size_t tbx__ob_msg_cnt(const tbx__batch_t *batch, size_t ob)
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
void tbx__ob_sets_make(tbx__batch_t *batch, size_t ob, tbx__ob_sets_t *s)
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
 * (tbx__ob_sets_make()): MINTED. */
void tbx__ob_sets_minted(tbx__batch_t *batch, size_t ob, const char *attempt,
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

/* B for batch row @p ob lost to another attempt: the winner's attempt
 * and tokens, message by message, from the stored row (the same
 * records and messages in the same order), or GONE. */
static int ob_winner(tbx__proto_t *proto, tbx__batch_t *batch, size_t ob)
{
	tbx__batch_t tmp;
	size_t got = 0, k = 0, first;
	int err;

	memset(&tmp, 0, sizeof(tmp));
	err = tbx__ob_load(proto, &tmp, batch->obs[ob - 1].row_id, &got);
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
		if (!(err = tbx__ob_encode(batch, obs[c], &msgs, &msgs_len,
					   &wire)))
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
	tbx__ob_sets_t sets;
	int err = TBX_OK;

	memset(&sets, 0, sizeof(sets));
	for (size_t ob = 1; ob <= batch->ob_cnt; ob++)
		if (ob_needs_attempt(batch, ob, 1)) {
			cnt++;
			nmsg += tbx__ob_msg_cnt(batch, ob);
		}
	if (cnt == 0)
		return TBX_OK;
	reqs = calloc(cnt, sizeof(*reqs));
	obs = calloc(cnt, sizeof(*obs));
	firsts = calloc(cnt, sizeof(*firsts));
	attempts = calloc(cnt, sizeof(*attempts));
	won = calloc(cnt, sizeof(*won));
	if (!reqs || !obs || !firsts || !attempts || !won ||
	    tbx__ob_sets_init(&sets, nmsg)) {
		err = TBX_ENOMEM;
		goto out;
	}
	cnt = 0;
	for (size_t ob = 1; ob <= batch->ob_cnt; ob++) {
		if (!ob_needs_attempt(batch, ob, 1))
			continue;
		tbx__uuid(attempts[cnt]);
		firsts[cnt] = sets.cnt;
		tbx__ob_sets_make(batch, ob, &sets);
		tbx__ob_sets_minted(batch, ob, attempts[cnt], 0);
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
	tbx__ob_sets_free(&sets);
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
