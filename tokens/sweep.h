/*
 * Register-cleanup: removes the tokens of attempts that lost or crashed.
 *
 * The registrations of @p grp are listed (oldest first, at most @p limit),
 * then the outbox rows of their message ids are read from S in one
 * rows_find() per TBX__SWEEP_FIND_MAX of them (PostgreSQL: one statement),
 * and for each registration its row decides (tbx__sweep_judge()):
 *   - row with the same attempt  -> the winner: delete the registration only;
 *   - row with another attempt, or no row -> orphan: drop tokens and
 *     registration in one T transaction, only if the registration still
 *     exists (the winner's confirm may have removed it meanwhile);
 *   - row with no attempt yet    -> leave it (in flight).
 *
 * The store @p store must be the service store of @p grp: against another
 * group's store every registration looks like "no row", and the tokens of
 * attempts in flight would be dropped.
 */
#ifndef TBX_TOKENS_SWEEP_H
#define TBX_TOKENS_SWEEP_H

#include <stddef.h>
#include <stdint.h>

#include "base/ids.h"
#include "outbox/outbox.h"
#include "tokens/tokens.h"

/** Most message ids a sweep asks S about in one rows_find(). */
#define TBX__SWEEP_FIND_MAX 1000

typedef struct tbx__sweep_stats {
	size_t examined;
	size_t winners;	  /**< registration of a recorded attempt removed */
	size_t orphans;	  /**< orphaned attempts dropped */
	size_t in_flight; /**< left for later */
	uint64_t tokens_deleted;
} tbx__sweep_stats_t;

/** What the sweeper makes of one registration. */
typedef enum tbx__sweep_verdict {
	/** The row names this attempt: recorded, it won.  Only the
	 *  registration goes; the tokens are (or will be) in flight. */
	TBX_SWEEP_WINNER = 0,
	/** The row names another attempt: this one lost for good (an
	 *  attempt never changes once recorded).  Orphan. */
	TBX_SWEEP_ORPHAN_OTHER_ATTEMPT,
	/** No row: never recorded with this attempt, or finished (then C
	 *  confirmed the winner first and no registration is left to
	 *  drop).  Orphan. */
	TBX_SWEEP_ORPHAN_NO_ROW,
	/** The row has no attempt yet: this one may still be recorded.
	 *  Left alone. */
	TBX_SWEEP_IN_FLIGHT,
} tbx__sweep_verdict_t;

/** @returns 1 for the two orphan verdicts. */
static inline int tbx__sweep_is_orphan(int verdict)
{
	return verdict == TBX_SWEEP_ORPHAN_OTHER_ATTEMPT ||
	       verdict == TBX_SWEEP_ORPHAN_NO_ROW;
}

/**
 * The sweeper's decision for @p reg from @p hit, what S holds for its
 * message id (outbox/outbox.h: found, and the row's attempt).
 * @returns a tbx__sweep_verdict_t.
 */
int tbx__sweep_judge(const tbx__reg_t *reg, const tbx__row_hit_t *hit);

/**
 * The sweeper's decision for @p reg, a registration of @p grp, from the
 * outbox row of its message id in @p store (a read; nothing is changed).
 * What S says may be stale by the time it is acted on; the sweep's
 * conditional drop in T makes that safe (see sweep.c).
 * @p row_attempt (may be NULL) receives the row's attempt, "" when the
 * row has none or is gone.
 * @returns TBX_OK with *verdict a tbx__sweep_verdict_t, or a store error.
 */
int tbx__sweep_classify(tbx_outbox_t *store, const char *grp,
			const tbx__reg_t *reg, int *verdict,
			char row_attempt[TBX_UUID_LEN + 1]);

/**
 * Called by tbx__tokens_sweep_ex() after each registration it examined:
 * @p removed is 1 when the registration (and, for an orphan, its tokens,
 * @p tokens_deleted of them) was removed by this sweep.
 */
typedef void (*tbx__sweep_fn)(void *opaque, const tbx__reg_t *reg, int verdict,
			      int removed, uint64_t tokens_deleted);

/** Runs one bounded sweep; @p stats (may be NULL) is zeroed then filled. */
int tbx_tokens_sweep(tbx_tokens_t *tokens, tbx_outbox_t *store, const char *grp,
		     size_t limit, tbx__sweep_stats_t *stats);

/** Where the last pass stopped, for a sweep that goes on from there. */
typedef struct tbx__sweep_cursor {
	int valid; /**< 0: start from the oldest registration */
	tbx__reg_t last;
} tbx__sweep_cursor_t;

/**
 * One bounded pass that starts after @p cursor and leaves it after the
 * last registration examined (or resets it when the pass reached the
 * end), so that successive passes cover every registration even when more
 * than @p limit at the head are in flight.  What the workers call.
 */
int tbx__tokens_sweep_resume(tbx_tokens_t *tokens, tbx_outbox_t *store,
			     const char *grp, size_t limit,
			     tbx__sweep_cursor_t *cursor,
			     tbx__sweep_stats_t *stats);

/** tbx_tokens_sweep() that also reports each registration to @p fn (may
 *  be NULL), for tools that say what they removed. */
int tbx__tokens_sweep_ex(tbx_tokens_t *tokens, tbx_outbox_t *store,
			 const char *grp, size_t limit,
			 tbx__sweep_stats_t *stats, tbx__sweep_fn fn,
			 void *opaque);

#endif
