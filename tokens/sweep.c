/*
 * Register-cleanup (tokens/sweep.h; docs/architecture.md,
 * "Register-cleanup").
 *
 * Safe against every interleaving with workers because the decision to
 * delete tokens is re-checked in T, atomically with the delete:
 * drop_attempt removes an attempt's tokens only while its registration
 * still exists (SQLite: checked under the file's write lock; PostgreSQL:
 * one statement deletes the tokens through the registrations it deleted
 * itself, waiting for a confirm that holds them), and the winner's
 * confirm (C) deletes the registration before any of its tokens is
 * dispatched.  Only the interface is used: it works on either backend.
 * What the sweeper read in S may be stale by then; it is only a hint:
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

#include "base/crash.h"
#include "base/ids.h"
#include "base/str.h"

int tbx__sweep_classify(tbx_outbox_t *store, const char *grp,
			const tbx__reg_t *reg, int *verdict,
			char row_attempt[TBX_UUID_LEN + 1])
{
	char attempt[TBX_UUID_LEN + 1];
	int found, err;

	if (row_attempt)
		row_attempt[0] = '\0';
	if (!store || !grp || !reg || !verdict)
		return TBX_EINVAL;
	if ((err =
		 tbx_outbox_row_find(store, grp, reg->msg_id, &found, attempt)))
		return err;
	if (!found)
		*verdict = TBX_SWEEP_ORPHAN_NO_ROW;
	else if (attempt[0] == '\0')
		*verdict = TBX_SWEEP_IN_FLIGHT;
	else if (strcmp(attempt, reg->attempt) == 0)
		*verdict = TBX_SWEEP_WINNER;
	else
		*verdict = TBX_SWEEP_ORPHAN_OTHER_ATTEMPT;
	if (row_attempt && found)
		tbx__strlcpy(row_attempt, attempt, TBX_UUID_LEN + 1);
	return TBX_OK;
}

static int sweep(tbx_tokens_t *tokens, tbx_outbox_t *store, const char *grp,
		 size_t limit, tbx__sweep_cursor_t *cursor,
		 tbx__sweep_stats_t *stats, tbx__sweep_fn fn, void *opaque);

int tbx_tokens_sweep(tbx_tokens_t *tokens, tbx_outbox_t *store, const char *grp,
		     size_t limit, tbx__sweep_stats_t *stats)
{
	return tbx__tokens_sweep_ex(tokens, store, grp, limit, stats, NULL,
				    NULL);
}

int tbx__tokens_sweep_ex(tbx_tokens_t *tokens, tbx_outbox_t *store,
			 const char *grp, size_t limit,
			 tbx__sweep_stats_t *stats, tbx__sweep_fn fn,
			 void *opaque)
{
	return sweep(tokens, store, grp, limit, NULL, stats, fn, opaque);
}

int tbx__tokens_sweep_resume(tbx_tokens_t *tokens, tbx_outbox_t *store,
			     const char *grp, size_t limit,
			     tbx__sweep_cursor_t *cursor,
			     tbx__sweep_stats_t *stats)
{
	return sweep(tokens, store, grp, limit, cursor, stats, NULL, NULL);
}

static int sweep(tbx_tokens_t *tokens, tbx_outbox_t *store, const char *grp,
		 size_t limit, tbx__sweep_cursor_t *cursor,
		 tbx__sweep_stats_t *stats, tbx__sweep_fn fn, void *opaque)
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
	if ((err = tbx_tokens_registrations_after(
		 tokens, grp, cursor && cursor->valid ? &cursor->last : NULL,
		 limit, &regs, &cnt)))
		return err;
	/* The next pass goes on after the last one examined, so that
	 * registrations in flight at the head cannot hide the orphans
	 * behind them; a short pass reached the end: start over. */
	if (cursor) {
		cursor->valid = cnt > 0 && cnt >= limit;
		if (cursor->valid)
			cursor->last = regs[cnt - 1];
	}
	for (size_t i = 0; i < cnt; i++) {
		const tbx__reg_t *reg = &regs[i];
		const char *one[1] = {reg->attempt};
		uint64_t deleted = 0;
		int verdict, removed = 0;

		st.examined++;
		if ((err =
			 tbx__sweep_classify(store, grp, reg, &verdict, NULL)))
			break;
		switch (verdict) {
		case TBX_SWEEP_IN_FLIGHT:
			st.in_flight++;
			break;
		case TBX_SWEEP_WINNER:
			/* The winner: its tokens are (or will be) in flight;
			 * only the registration goes. */
			if ((err = tbx_tokens_confirm(tokens, one, 1)))
				break;
			tbx__crashpoint("sweep.confirmed");
			st.winners++;
			removed = 1;
			break;
		default:
			if ((err = tbx_tokens_drop_attempt(tokens, reg->attempt,
							   &removed, &deleted)))
				break;
			tbx__crashpoint("sweep.dropped");
			/* Not dropped: confirmed since we listed it (a
			 * winner that finished meanwhile); its tokens
			 * stay. */
			if (removed) {
				st.orphans++;
				st.tokens_deleted += deleted;
			}
			break;
		}
		if (err)
			break;
		if (fn)
			fn(opaque, reg, verdict, removed, deleted);
	}
	free(regs);
	if (stats)
		*stats = st;
	return err;
}
