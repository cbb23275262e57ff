/*
 * What the three files of outbox.layout = batch share beyond
 * proto_internal.h: proto_obatch.c (the resume check, loading rows),
 * proto_obatch_write.c (A's insert) and proto_obatch_tokens.c (B).
 */
#ifndef TBX_CONSUMER_PROTO_OBATCH_H
#define TBX_CONSUMER_PROTO_OBATCH_H

#include <stddef.h>
#include <stdint.h>

#include "consumer/proto_internal.h"
#include "tokens/tokens.h"

/** Orders tbx__ob_gen_t by topic, then partition (qsort()). */
int tbx__ob_gen_cmp(const void *a, const void *b);

/** Loads batch row @p row_id into @p batch's rows, or finds it there:
 *  *ob 1 + its index, 0 when the row is gone. */
int tbx__ob_load(tbx__proto_t *proto, tbx__batch_t *batch, const char *row_id,
		 size_t *ob);

/** The messages of batch row @p ob (its records' rows in order) as one
 *  msgs value (*blob, malloc'ed), and its wire column. */
int tbx__ob_encode(const tbx__batch_t *batch, size_t ob, void **blob,
		   size_t *blob_len, tbx__buf_t *wire);

/** The token sets of one or more batch rows' attempts (tokfmt 2). */
typedef struct tbx__ob_sets {
	tbx__set_item_t *items;
	char (*ids)[TBX_UUID_LEN + 1];
	size_t cnt, cap;
} tbx__ob_sets_t;

/** Room for @p cap sets (at most one per message): never grown, so
 *  that the items' set ids stay where they are. */
int tbx__ob_sets_init(tbx__ob_sets_t *s, size_t cap);
void tbx__ob_sets_free(tbx__ob_sets_t *s);
/** The number of messages of batch row @p ob. */
size_t tbx__ob_msg_cnt(const tbx__batch_t *batch, size_t ob);
/** Gives every message of batch row @p ob a bit of a fresh token set,
 *  one set per destination (topic, partition), appended to @p s. */
void tbx__ob_sets_make(tbx__batch_t *batch, size_t ob, tbx__ob_sets_t *s);
/** The rows of batch row @p ob take attempt @p attempt and their sets
 *  (tbx__ob_sets_make()): MINTED. */
void tbx__ob_sets_minted(tbx__batch_t *batch, size_t ob, const char *attempt,
			 int64_t mint_seq);

#endif
