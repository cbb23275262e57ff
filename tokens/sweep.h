/*
 * Register-cleanup: removes the tokens of attempts that lost or crashed.
 *
 * For each registration of @p grp (oldest first, at most @p limit), the
 * outbox row of its message id in S decides:
 *   - row with the same attempt  -> the winner: delete the registration only;
 *   - row with another attempt, or no row -> orphan: drop tokens and
 *     registration in one T transaction, only if the registration still
 *     exists (the winner's confirm may have removed it meanwhile);
 *   - row with no attempt yet    -> leave it (in flight).
 */
#ifndef TBX_TOKENS_SWEEP_H
#define TBX_TOKENS_SWEEP_H

#include <stddef.h>
#include <stdint.h>

#include "outbox/outbox.h"
#include "tokens/tokens.h"

typedef struct tbx__sweep_stats {
	size_t examined;
	size_t winners;	  /**< registration of a recorded attempt removed */
	size_t orphans;	  /**< orphaned attempts dropped */
	size_t in_flight; /**< left for later */
	uint64_t tokens_deleted;
} tbx__sweep_stats_t;

/** Runs one bounded sweep; @p stats (may be NULL) is zeroed then filled. */
int tbx_tokens_sweep(tbx_tokens_t *tokens, tbx_outbox_t *store, const char *grp,
		     size_t limit, tbx__sweep_stats_t *stats);

#endif
