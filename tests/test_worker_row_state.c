/*
 * The in-memory outbox row's states (consumer/batch.h): the transitions of
 * the diagram are allowed and no other; minting gives a row an attempt
 * and a token per outgoing message, un-minting takes them back; and in a
 * build with assertions, a transition off the diagram aborts.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>

#include "consumer/batch.h"

static const tbx__brow_state_t all[] = {
    TBX_BROW_UNTOKENED, TBX_BROW_MINTED,    TBX_BROW_RECORDED, TBX_BROW_JOINED,
    TBX_BROW_GONE,	TBX_BROW_DELIVERED, TBX_BROW_FINISHED,
};
#define STATES (sizeof(all) / sizeof(all[0]))

static int arrow(tbx__brow_state_t from, tbx__brow_state_t to)
{
	static const struct {
		tbx__brow_state_t from, to;
	} arrows[] = {
	    {TBX_BROW_UNTOKENED, TBX_BROW_MINTED},
	    {TBX_BROW_UNTOKENED, TBX_BROW_RECORDED},
	    {TBX_BROW_UNTOKENED, TBX_BROW_DELIVERED},
	    {TBX_BROW_MINTED, TBX_BROW_UNTOKENED},
	    {TBX_BROW_MINTED, TBX_BROW_RECORDED},
	    {TBX_BROW_MINTED, TBX_BROW_JOINED},
	    {TBX_BROW_MINTED, TBX_BROW_GONE},
	    {TBX_BROW_RECORDED, TBX_BROW_DELIVERED},
	    {TBX_BROW_JOINED, TBX_BROW_DELIVERED},
	    {TBX_BROW_DELIVERED, TBX_BROW_FINISHED},
	};

	for (size_t i = 0; i < sizeof(arrows) / sizeof(arrows[0]); i++)
		if (arrows[i].from == from && arrows[i].to == to)
			return 1;
	return 0;
}

Test(row_state, only_the_arrows_of_the_diagram_are_transitions)
{
	for (size_t i = 0; i < STATES; i++)
		for (size_t j = 0; j < STATES; j++)
			cr_expect_eq(tbx__brow_transition_ok(all[i], all[j]),
				     arrow(all[i], all[j]), "%zu -> %zu", i, j);
}

/* A row of the batch with two outgoing messages. */
static tbx__brow_t *two_message_row(tbx__batch_t *batch)
{
	size_t idx;
	tbx__brow_t *brow = tbx__batch_row_new(batch, &idx);

	cr_assert_not_null(brow);
	cr_assert_eq(brow->state, TBX_BROW_UNTOKENED);
	cr_assert_eq(
	    tbx__row_add(&brow->row, "out", "t", "k", 1, "p", 1, NULL, 0),
	    TBX_OK);
	cr_assert_eq(
	    tbx__row_add(&brow->row, "out2", "t", "k", 1, "p", 1, NULL, 0),
	    TBX_OK);
	return brow;
}

Test(row_state, minting_and_unminting_give_and_take_the_attempt)
{
	tbx__batch_t batch;
	tbx__mint_item_t items[2];
	tbx__brow_t *brow;
	char attempt[TBX_UUID_LEN + 1];

	memset(&batch, 0, sizeof(batch));
	brow = two_message_row(&batch);
	tbx__brow_mint(brow, 7, items);
	cr_expect_eq(brow->state, TBX_BROW_MINTED);
	cr_expect_eq(strlen(brow->row.attempt), TBX_UUID_LEN);
	cr_expect_eq(brow->row.mint_seq, 7);
	for (size_t j = 0; j < 2; j++) {
		cr_expect_eq(strlen(brow->row.msgs[j].token), TBX_UUID_LEN);
		cr_expect_eq(items[j].token, brow->row.msgs[j].token);
		cr_expect_str_eq(items[j].topic, brow->row.msgs[j].topic);
	}
	cr_expect_str_neq(brow->row.msgs[0].token, brow->row.msgs[1].token);
	memcpy(attempt, brow->row.attempt, sizeof(attempt));

	tbx__brow_unmint(brow);
	cr_expect_eq(brow->state, TBX_BROW_UNTOKENED);
	cr_expect_str_empty(brow->row.attempt);
	cr_expect_eq(brow->row.mint_seq, 0);
	cr_expect_str_empty(brow->row.msgs[0].token);
	cr_expect_str_empty(brow->row.msgs[1].token);

	/* Every mint is a new attempt. */
	tbx__brow_mint(brow, 0, items);
	cr_expect_str_neq(brow->row.attempt, attempt);
	tbx__brow_set_state(brow, TBX_BROW_RECORDED);
	tbx__brow_set_state(brow, TBX_BROW_DELIVERED);
	tbx__brow_set_state(brow, TBX_BROW_FINISHED);
	cr_expect_eq(brow->state, TBX_BROW_FINISHED);
	tbx__batch_reset(&batch);
	tbx__batch_free(&batch);
}

#ifndef NDEBUG
Test(row_state, a_transition_off_the_diagram_aborts, .signal = SIGABRT)
{
	tbx__batch_t batch;
	tbx__brow_t *brow;

	memset(&batch, 0, sizeof(batch));
	brow = two_message_row(&batch);
	/* Finished without being delivered. */
	tbx__brow_set_state(brow, TBX_BROW_FINISHED);
}

Test(row_state, a_state_without_its_invariant_aborts, .signal = SIGABRT)
{
	tbx__batch_t batch;
	tbx__brow_t *brow;

	memset(&batch, 0, sizeof(batch));
	brow = two_message_row(&batch);
	/* Recorded, but with no attempt and no tokens. */
	tbx__brow_set_state(brow, TBX_BROW_RECORDED);
}
#endif
