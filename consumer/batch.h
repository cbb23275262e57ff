/*
 * One batch in flight: its records (tbx_msg_t, msg.h) in poll order, the
 * outbox rows the protocol takes through A–E (tbx__brow_t), and room for
 * F's decision per partition (part.h).  batch.c keeps the arrays, the
 * index of rows by message id, and the state of each in-memory row.
 *
 * @locality the worker's thread.
 */
#ifndef TBX_CONSUMER_BATCH_H
#define TBX_CONSUMER_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "consumer/msg.h"
#include "consumer/part.h"
#include "outbox/outbox.h"
#include "tokens/tokens.h"

/** An outbox row in flight in this batch. */
typedef struct tbx__brow {
	tbx__row_t row;
	int fresh;     /**< inserted by this batch's A */
	int recorded;  /**< has an attempt (ours or a winner's) */
	int gone;      /**< another worker finished it meanwhile */
	int delivered; /**< every outgoing message acknowledged */
	int finished;  /**< deleted in E */
	int joined;    /**< attempt made in A (one file): no registration */
} tbx__brow_t;

typedef struct tbx__batch {
	struct tbx_msg *msgs;
	size_t cnt, cap;
	/* F's decisions, one per partition of the batch: as many slots as
	 * msgs, so that F never needs memory it may not get. */
	tbx__part_outcome_t *outcomes;
	size_t outcome_cnt;
	tbx__brow_t *rows;
	size_t row_cnt, row_cap;
	/* A's index of the batch's rows by message id: open addressing,
	 * row index + 1 per slot (0: empty), ids_cap a power of two. */
	uint32_t *ids;
	size_t ids_cap;
	int isolating;	  /**< a suspect partition: A takes one record */
	size_t isolated;  /**< that record's index when isolating */
	int64_t mint_seq; /**< joined: the number A took for its tokens */
	uint64_t minted;  /**< joined: token rows A created (stats) */
} tbx__batch_t;

/** A new record slot at the end of the batch, zeroed.  NULL: no memory. */
struct tbx_msg *tbx__batch_push(tbx__batch_t *batch);
/** Destroys the records and forgets the rows; keeps the memory. */
void tbx__batch_reset(tbx__batch_t *batch);
/** Frees what the batch holds (after tbx__batch_reset()). */
void tbx__batch_free(tbx__batch_t *batch);

/** A new row at the end of the batch's rows, its index in *idx.  NULL:
 *  no memory. */
tbx__brow_t *tbx__batch_row_new(tbx__batch_t *batch, size_t *idx);
/** Forgets the most recent row (its savepoint was rolled back). */
void tbx__batch_row_pop(tbx__batch_t *batch);
/** Forgets every row (A's transaction was rolled back); records other than
 *  skipped ones are looked at again. */
void tbx__batch_undo_rows(tbx__batch_t *batch);

/** Empties the index of rows by message id, sized for @p cnt rows. */
int tbx__batch_ids_reset(tbx__batch_t *batch, size_t cnt);
/** Adds row @p idx to the index. */
void tbx__batch_ids_add(tbx__batch_t *batch, size_t idx);
/** 1 and *idx when the batch has a row for @p msg_id, else 0. */
int tbx__batch_row_find(const tbx__batch_t *batch, const char *msg_id,
			size_t *idx);

#endif
