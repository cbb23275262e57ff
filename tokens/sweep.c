/*
 * Register-cleanup (tokens/sweep.h, DESIGN.md "Register-cleanup").
 *
 * Safe against every interleaving with workers because the decision to
 * delete tokens is re-checked in T under T's write lock: drop_attempt
 * removes an attempt's tokens only while its registration still exists,
 * and the winner's confirm (C) deletes the registration before any of its
 * tokens is dispatched.  What the sweeper read in S may be stale by then;
 * it is only a hint:
 *   - same attempt in S: recorded, so it won; confirming it again is
 *     harmless (C may already have);
 *   - another attempt in S: the row's attempt never changes once set, so
 *     this one lost for good;
 *   - no row: either it was finished (then C confirmed the winner before
 *     E deleted the row, and drop_attempt finds no registration of it), or
 *     the row was never recorded with this attempt — an orphan;
 *   - row without attempt: the attempt may still be recorded: leave it.
 */
#include "tokens/sweep.h"

#include <stdlib.h>
#include <string.h>

int tbx_tokens_sweep(tbx_tokens_t *tokens, tbx_outbox_t *store, const char *grp,
		     size_t limit, tbx__sweep_stats_t *stats)
{
	tbx__sweep_stats_t st;
	tbx__reg_t *regs = NULL;
	size_t cnt = 0;
	int err;

	memset(&st, 0, sizeof(st));
	if (stats)
		memset(stats, 0, sizeof(*stats));
	if (!tokens || !store || !grp)
		return TBX_EINVAL;
	if ((err = tbx_tokens_registrations(tokens, grp, limit, &regs, &cnt)))
		return err;
	for (size_t i = 0; i < cnt; i++) {
		const tbx__reg_t *reg = &regs[i];
		char attempt[TBX_UUID_LEN + 1];
		const char *one[1] = {reg->attempt};
		uint64_t deleted = 0;
		int found, dropped;

		st.examined++;
		if ((err = tbx_outbox_row_find(store, grp, reg->msg_id, &found,
					       attempt)))
			break;
		if (found && attempt[0] == '\0') {
			st.in_flight++;
			continue;
		}
		if (found && strcmp(attempt, reg->attempt) == 0) {
			/* The winner: its tokens are (or will be) in flight;
			 * only the registration goes. */
			if ((err = tbx_tokens_confirm(tokens, one, 1)))
				break;
			st.winners++;
			continue;
		}
		if ((err = tbx_tokens_drop_attempt(tokens, reg->attempt,
						   &dropped, &deleted)))
			break;
		/* Not dropped: confirmed since we listed it (a winner that
		 * finished meanwhile); its tokens stay. */
		if (dropped) {
			st.orphans++;
			st.tokens_deleted += deleted;
		}
	}
	free(regs);
	if (stats)
		*stats = st;
	return err;
}
