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

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "consumer/msg.h"
#include "consumer/part.h"
#include "outbox/outbox.h"
#include "tokens/tokens.h"

/*
 * The state of an outbox row in flight (tbx__brow_t), beside the stored
 * row's (outbox.h: PROCESSED, TOKENED).  Every change goes through
 * tbx__brow_set_state(), which checks the transition and the new state's
 * invariants (tbx__brow_assert_state()); a build without NDEBUG aborts
 * on a wrong one.
 *
 *        A: inserted (handler OK, dead letter),
 *        or loaded from S without an attempt
 *                     │
 *                     ▼            C: no outgoing message
 *                 UNTOKENED ───────────────────────────────┐
 *                   │   ▲                                  │
 *     B (or A, when │   │ unmint: what was to              │
 *     joined): mint │   │ persist them failed              │
 *                   ▼   │                                  │
 *                  MINTED ───── A, joined: their token ──┐ │
 *                   │   │       rows made in the         │ │
 *     B: recorded   │   │       record's savepoint       │ │
 *     (won), or     │   │ B: lost, and the               ▼ │
 *     lost and the  │   │ row is gone               JOINED │
 *     winner's      │   ▼                                │ │
 *     reloaded      │  GONE                              │ │
 *                   ▼                                    │ │
 *   loaded from S ► RECORDED                             │ │
 *   with an attempt │                                    │ │
 *                   │ C: every outgoing message          │ │
 *                   ▼    acknowledged                    │ │
 *                 DELIVERED ◄────────────────────────────┴─┘
 *                   │ E: deleted
 *                   ▼
 *                 FINISHED
 *
 * RECORDED and JOINED rows are dispatched by C; only RECORDED ones have a
 * registration to confirm.  A row is done (F) when FINISHED or GONE
 * (another worker finished it).  A row whose savepoint or transaction is
 * rolled back is forgotten whatever its state (tbx__batch_row_pop(),
 * tbx__batch_undo_rows()).
 */
typedef enum tbx__brow_state {
	TBX_BROW_UNTOKENED = 0, /**< no attempt: PROCESSED in S */
	TBX_BROW_MINTED,	/**< attempt and tokens made, not persisted */
	TBX_BROW_RECORDED,	/**< has a persisted attempt, ours or a
				     winner's: TOKENED in S */
	TBX_BROW_JOINED,	/**< attempt made in A (one file): TOKENED, no
				     registration */
	TBX_BROW_GONE,		/**< another worker finished it meanwhile */
	TBX_BROW_DELIVERED,	/**< every outgoing message acknowledged, or
				     none to send */
	TBX_BROW_FINISHED,	/**< deleted in E */
} tbx__brow_state_t;

/** An outbox row in flight in this batch. */
typedef struct tbx__brow {
	tbx__row_t row;
	tbx__brow_state_t state;
	int later; /**< its row (and joined, its tokens) is written at the
		      end of A with the batch's others (proto_process.c) */
	size_t ob; /**< outbox.layout = batch: 1 + the index of its batch
		      row in tbx__batch_t.obs; 0: a tbx_outbox row */
	int32_t set_part; /**< in_set: the partition its set was minted for */
} tbx__brow_t;

/** A batch row (tbx_obatch) in flight: its records are the batch's
 *  rows (tbx__brow_t) whose ob names it, in cover order, and its
 *  messages theirs, in that order (consumer/proto_obatch.c). */
typedef struct tbx__ob {
	char row_id[TBX_UUID_LEN + 1];
	int fresh;     /**< made by this A, not yet inserted */
	int delivered; /**< every record's row DELIVERED (after C) */
	int tokfmt;    /**< its messages' tokens: 2 token sets (tset, tbit,
			  part), 1 per-message tokens */
	int64_t created_ms;
} tbx__ob_t;

/** The phases a batch span times (tbx__trace_batch()), in their order. */
typedef enum tbx__phase {
	TBX_PHASE_G,
	TBX_PHASE_A,
	TBX_PHASE_B,
	TBX_PHASE_C,
	TBX_PHASE_D,
	TBX_PHASE_E,
	TBX_PHASE_F,
	TBX_PHASE_CNT
} tbx__phase_t;

typedef struct tbx__batch {
	struct tbx_msg *msgs;
	size_t cnt, cap;
	/* F's decisions, one per partition of the batch: as many slots as
	 * msgs, so that F never needs memory it may not get. */
	tbx__part_outcome_t *outcomes;
	size_t outcome_cnt;
	tbx__brow_t *rows;
	size_t row_cnt, row_cap;
	tbx__ob_t *obs; /**< outbox.layout = batch: the batch rows */
	size_t ob_cnt, ob_cap;
	/* A's index of the batch's rows by message id: open addressing,
	 * row index + 1 per slot (0: empty), ids_cap a power of two. */
	uint32_t *ids;
	size_t ids_cap;
	int isolating;		/**< a suspect partition: A takes one record */
	size_t isolated;	/**< that record's index when isolating */
	int64_t mint_seq;	/**< joined: the number A took for its tokens */
	uint64_t minted;	/**< joined: token rows A created (stats) */
	uint64_t processed;	/**< A's handled records (stats, at commit) */
	uint64_t dead_lettered; /**< A's dead letters (stats, at commit) */
	struct tbx__tracer *tracer; /**< NULL: tracing off */
	/* Tracing on: when the batch began and each phase ended (Unix
	 * nanoseconds; 0: it did not run), for the batch span. */
	uint64_t began_ns, phase_ns[TBX_PHASE_CNT];
	/* The last phase that ended (-1: none yet), read by another thread
	 * for the warnings of a slow stop (tbx__worker_step()). */
	atomic_int phase_done;
} tbx__batch_t;

/** Notes that @p phase of @p batch ended now, when tracing is on (a
 *  pointer test otherwise).  @returns @p err, so that a phase's call can
 *  be wrapped. */
static inline int tbx__batch_phase(tbx__batch_t *batch, tbx__phase_t phase,
				   int err)
{
	if (batch->tracer)
		batch->phase_ns[phase] = tbx__now_ns();
	atomic_store_explicit(&batch->phase_done, (int)phase,
			      memory_order_relaxed);
	return err;
}

/** A new record slot at the end of the batch, zeroed.  NULL: no memory. */
struct tbx_msg *tbx__batch_push(tbx__batch_t *batch);
/** Destroys the records and forgets the rows; keeps the memory. */
void tbx__batch_reset(tbx__batch_t *batch);
/**
 * As tbx__batch_reset(), but the records F marked to stay (tbx_msg.keep:
 * the rest of a suspect range, and of the other partitions of its batch)
 * stay, first and in their order, as the poll handed them over; the next
 * batch is collected after them.  @returns how many stayed.
 */
size_t tbx__batch_keep(tbx__batch_t *batch);
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

/** Checks @p brow's invariants for its state (asserts); @returns 1, so
 *  that it can be called as assert(tbx__brow_assert_state(brow)). */
int tbx__brow_assert_state(const tbx__brow_t *brow);
/** 1 when the diagram above has an arrow from @p from to @p to. */
int tbx__brow_transition_ok(tbx__brow_state_t from, tbx__brow_state_t to);
/** Moves @p brow to @p to: asserts the transition, then the invariants. */
void tbx__brow_set_state(tbx__brow_t *brow, tbx__brow_state_t to);
/**
 * UNTOKENED -> MINTED: a fresh attempt id, and a fresh token per outgoing
 * message, listed in @p items (token and topic, row->msg_cnt entries) for
 * the token store; mint_seq = @p mint_seq (0: set when known).  Per
 * attempt: every mint makes new ids.
 */
void tbx__brow_mint(tbx__brow_t *brow, int64_t mint_seq,
		    tbx__mint_item_t *items);
/** MINTED -> UNTOKENED: forgets the attempt, mint_seq and tokens (what
 *  was to persist them failed, or lost). */
void tbx__brow_unmint(tbx__brow_t *brow);

#endif
