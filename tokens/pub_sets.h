/*
 * The token sets of a publisher's flush (tokens.format = set), shared by
 * the backends' publish_mint: one set per (topic, partition) of the
 * flush's new items, a second when one reaches TBX_SET_BITS_MAX; each
 * item gets the next bit of its set, in queue order.
 */
#ifndef TBX_TOKENS_PUB_SETS_H
#define TBX_TOKENS_PUB_SETS_H

#include "tokens/tokens.h"

/* The token sets of a publisher's flush: one per (topic, partition) of
 * its new items, a second when one is full. */
typedef struct tbx__pub_sets {
	tbx__set_item_t *sets;
	char (*ids)[TBX_UUID_LEN + 1];
	size_t cnt, cap;
} tbx__pub_sets_t;

/** Frees what @p ps holds and zeroes it. */
void tbx__pub_sets_free(tbx__pub_sets_t *ps);
/** Gives @p item (in_set, part >= 0) the next bit of the open set of its
 *  topic and partition (item->set_id, item->bit; token emptied), making
 *  the set when there is none or it is full.  @returns TBX_OK or
 *  TBX_ENOMEM. */
int tbx__pub_set_bit(tbx__pub_sets_t *ps, tbx__edge_item_t *item);

#endif
