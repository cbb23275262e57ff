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
 * The rows of a pass are read in one rows_find() after its registrations
 * were listed, never before: a registration exists only once its row was
 * committed (A before B's mint; joined, in one transaction), so "no row"
 * read after the listing means a row that was there and is gone, never
 * one not written yet.  Reading all of them at once only makes the hints
 * older when they are acted on, and every hint above holds at any age.
 * An attempt of a batch row (outbox.layout = batch) registers under
 * "b:" and the row's id (TBX_SWEEP_ROW_PREFIX; a tbx_outbox row's id is
 * a UUID or "u:…", never that): such a registration is looked up among
 * the group's batch rows (one obatch_load, also read after the listing)
 * before "no row" is concluded (batch_row_hits()); a pass without one
 * reads nothing more.
 */
#include "tokens/sweep.h"

#include <stdlib.h>
#include <string.h>

#include "base/crash.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"

static int batch_row_hits(tbx_outbox_t *store, const char *grp,
			  const char *const *ids, size_t n,
			  tbx__row_hit_t *hits);

int tbx__sweep_judge(const tbx__reg_t *reg, const tbx__row_hit_t *hit)
{
	if (!hit->found)
		return TBX_SWEEP_ORPHAN_NO_ROW;
	if (hit->attempt[0] == '\0')
		return TBX_SWEEP_IN_FLIGHT;
	if (strcmp(hit->attempt, reg->attempt) == 0)
		return TBX_SWEEP_WINNER;
	return TBX_SWEEP_ORPHAN_OTHER_ATTEMPT;
}

int tbx__sweep_classify(tbx_outbox_t *store, const char *grp,
			const tbx__reg_t *reg, int *verdict,
			char row_attempt[TBX_UUID_LEN + 1])
{
	tbx__row_hit_t hit;
	int err;

	if (row_attempt)
		row_attempt[0] = '\0';
	if (!store || !grp || !reg || !verdict)
		return TBX_EINVAL;
	if ((err = tbx_outbox_row_find(store, grp, reg->msg_id, &hit.found,
				       hit.attempt)))
		return err;
	if (!hit.found) {
		const char *id = reg->msg_id;

		if ((err = batch_row_hits(store, grp, &id, 1, &hit)))
			return err;
	}
	*verdict = tbx__sweep_judge(reg, &hit);
	if (row_attempt && hit.found)
		tbx__strlcpy(row_attempt, hit.attempt, TBX_UUID_LEN + 1);
	return TBX_OK;
}

/*
 * Token sets: the batch rows a pass's registrations name, found in one
 * listing of the group's rows (obatch_load: the group's few pending
 * rows), each looked up by its id among the registrations' sorted.
 */
typedef struct row_key {
	const char *row_id;
	size_t i; /* its registration */
} row_key_t;

typedef struct row_look {
	row_key_t *keys; /* by row id */
	size_t n;
	tbx__row_hit_t *hits; /* per registration */
} row_look_t;

static int by_row_id(const void *a, const void *b)
{
	return strcmp(((const row_key_t *)a)->row_id,
		      ((const row_key_t *)b)->row_id);
}

static int row_seen(void *opaque, const tbx__obatch_t *row,
		    const tbx__cover_t *cover)
{
	row_look_t *l = opaque;
	size_t lo = 0, hi = l->n;

	(void)cover;
	/* The first registration naming the row, then every one after it
	 * that names it too (an attempt that lost, and the winner). */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(l->keys[mid].row_id, row->row_id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < l->n && strcmp(l->keys[lo].row_id, row->row_id) == 0;
	     lo++) {
		tbx__row_hit_t *h = &l->hits[l->keys[lo].i];
		h->found = 1;
		tbx__strlcpy(h->attempt, row->attempt, sizeof(h->attempt));
	}
	return 0;
}

/*
 * The registrations among @p n (@p ids, their rows' ids) whose row
 * rows_find() did not find (@p hits) may name a batch row instead
 * (outbox.layout = batch: an attempt of a tbx_obatch row registers
 * under its row id): looked up in one listing of the group's batch
 * rows, read after the registrations as rows_find() is.  A store
 * without batch rows (TBX_ESCHEMA) has none to find.
 * @returns TBX_OK or the store's error (no verdict may be drawn then).
 */
static int batch_row_hits(tbx_outbox_t *store, const char *grp,
			  const char *const *ids, size_t n,
			  tbx__row_hit_t *hits)
{
	row_look_t l;
	size_t k = 0;
	int err;

	for (size_t i = 0; i < n; i++)
		k += !hits[i].found &&
		     strncmp(ids[i], TBX_SWEEP_ROW_PREFIX, 2) == 0;
	if (k == 0)
		return TBX_OK;
	memset(&l, 0, sizeof(l));
	if (!(l.keys = malloc(k * sizeof(*l.keys))) ||
	    !(l.hits = calloc(n, sizeof(*l.hits)))) {
		free(l.keys);
		return TBX_ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		if (!hits[i].found &&
		    strncmp(ids[i], TBX_SWEEP_ROW_PREFIX, 2) == 0)
			l.keys[l.n++] = (row_key_t){ids[i] + 2, i};
	qsort(l.keys, l.n, sizeof(*l.keys), by_row_id);
	err = tbx_outbox_obatch_load(store, grp, row_seen, &l);
	if (err == TBX_ESCHEMA)
		err = TBX_OK;
	else if (!err)
		for (size_t i = 0; i < n; i++)
			if (l.hits[i].found)
				hits[i] = l.hits[i];
	free(l.keys);
	free(l.hits);
	return err;
}

const char *tbx__sweep_unchecked_text(int why)
{
	switch (why) {
	case TBX_ESCHEMA:
		return "has no batch rows";
	case TBX_ECORRUPT:
		return "has a batch row that does not decode";
	default:
		return "could not list its batch rows";
	}
}

int tbx__sweep_sets_classify(tbx_outbox_t *store, const char *grp,
			     const tbx__reg_t *regs, size_t n, int *verdicts,
			     char (*row_attempts)[TBX_UUID_LEN + 1], int *why)
{
	row_look_t l;
	int err;

	if (why)
		*why = TBX_OK;
	if (!store || !grp || (n && (!regs || !verdicts)))
		return TBX_EINVAL;
	if (!n)
		return TBX_OK;
	memset(&l, 0, sizeof(l));
	l.n = n;
	if (!(l.keys = malloc(n * sizeof(*l.keys))) ||
	    !(l.hits = calloc(n, sizeof(*l.hits)))) {
		free(l.keys);
		return TBX_ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		l.keys[i] = (row_key_t){regs[i].msg_id, i};
	qsort(l.keys, n, sizeof(*l.keys), by_row_id);
	/* One listing of the group's rows, after the registrations were
	 * listed (sweep.h: a registration exists only once its row does). */
	err = tbx_outbox_obatch_load(store, grp, row_seen, &l);
	if (err && err != TBX_ENOMEM && err != TBX_EINVAL) {
		/* Nothing known of the rows: no verdict at all, and never
		 * "no row". */
		if (why)
			*why = err;
		for (size_t i = 0; i < n; i++) {
			verdicts[i] = TBX_SWEEP_UNCHECKED;
			if (row_attempts)
				row_attempts[i][0] = '\0';
		}
		err = TBX_OK;
	} else if (!err) {
		for (size_t i = 0; i < n; i++) {
			verdicts[i] = tbx__sweep_judge(&regs[i], &l.hits[i]);
			if (row_attempts)
				tbx__strlcpy(row_attempts[i], l.hits[i].attempt,
					     TBX_UUID_LEN + 1);
		}
	}
	free(l.keys);
	free(l.hits);
	return err;
}

static int sweep(tbx_tokens_t *tokens, tbx_outbox_t *store, const char *grp,
		 size_t limit, tbx__sweep_cursor_t *cursor,
		 tbx__sweep_stats_t *stats, tbx__sweep_fn fn, void *opaque);
static int sweep_sets(tbx_tokens_t *tokens, tbx_outbox_t *store,
		      const char *grp, size_t limit,
		      tbx__sweep_cursor_t *cursor, tbx__sweep_stats_t *st,
		      tbx__sweep_fn fn, void *opaque);

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

/* Acts on @p reg as @p verdict says; @p st counts it. */
static int act(tbx_tokens_t *tokens, const tbx__reg_t *reg, int verdict,
	       tbx__sweep_stats_t *st, int *removed, uint64_t *deleted)
{
	const char *one[1] = {reg->attempt};
	int err = TBX_OK;

	*removed = 0;
	*deleted = 0;
	switch (verdict) {
	case TBX_SWEEP_IN_FLIGHT:
		st->in_flight++;
		break;
	case TBX_SWEEP_WINNER:
		/* The winner: its tokens are (or will be) in flight; only the
		 * registration goes. */
		if ((err = tbx_tokens_confirm(tokens, one, 1)))
			break;
		tbx__crashpoint("sweep.confirmed");
		st->winners++;
		*removed = 1;
		break;
	default:
		if ((err = tbx_tokens_drop_attempt(tokens, reg->attempt,
						   removed, deleted)))
			break;
		tbx__crashpoint("sweep.dropped");
		/* Not dropped: confirmed since we listed it (a winner that
		 * finished meanwhile); its tokens stay. */
		if (*removed) {
			st->orphans++;
			st->tokens_deleted += *deleted;
		}
		break;
	}
	return err;
}

/* Acts on a set registration as @p verdict says; @p st counts it. */
static int act_sets(tbx_tokens_t *tokens, const tbx__reg_t *reg, int verdict,
		    tbx__sweep_stats_t *st, int *removed, uint64_t *deleted)
{
	const char *one[1] = {reg->attempt};
	int err = TBX_OK;

	*removed = 0;
	*deleted = 0;
	switch (verdict) {
	case TBX_SWEEP_IN_FLIGHT:
		st->set_in_flight++;
		break;
	case TBX_SWEEP_UNCHECKED:
		st->set_unchecked++;
		break;
	case TBX_SWEEP_WINNER:
		if ((err = tbx_tokens_sets_confirm(tokens, one, 1)))
			break;
		tbx__crashpoint("sweep.confirmed");
		st->set_winners++;
		*removed = 1;
		break;
	default:
		/* One row, whatever its messages: the sets of every group
		 * and the registration, only while it exists. */
		if ((err = tbx_tokens_sets_drop_attempt(tokens, reg->attempt,
							removed, deleted)))
			break;
		tbx__crashpoint("sweep.dropped");
		if (*removed) {
			st->set_orphans++;
			st->set_rows_deleted += *deleted;
		}
		break;
	}
	return err;
}

/* The token sets' part of a pass: up to @p limit tbx_breg rows of @p grp
 * after the cursor, judged against the group's batch rows. */
static int sweep_sets(tbx_tokens_t *tokens, tbx_outbox_t *store,
		      const char *grp, size_t limit,
		      tbx__sweep_cursor_t *cursor, tbx__sweep_stats_t *st,
		      tbx__sweep_fn fn, void *opaque)
{
	tbx__reg_t *regs = NULL;
	int *verdicts = NULL;
	size_t cnt = 0;
	int has = 0, why = TBX_OK, err;

	if (!tokens->ops->sets_registrations)
		return TBX_OK;
	err = tbx_tokens_has(tokens, TBX_TOKENS_HAS_SETS, &has);
	if (err || !has)
		return err;
	if ((err = tbx_tokens_sets_registrations(
		 tokens, grp,
		 cursor && cursor->sets_valid ? &cursor->sets_last : NULL,
		 limit, &regs, &cnt)))
		return err;
	if (cursor) {
		cursor->sets_valid = cnt > 0 && cnt >= limit;
		if (cursor->sets_valid)
			cursor->sets_last = regs[cnt - 1];
	}
	if (cnt && !(verdicts = malloc(cnt * sizeof(*verdicts))))
		err = TBX_ENOMEM;
	if (!err && cnt)
		err = tbx__sweep_sets_classify(store, grp, regs, cnt, verdicts,
					       NULL, &why);
	if (!err && why) {
		st->set_unchecked_err = why;
		tbx__log(TBX_LOG_WARNING,
			 "cleanup: %zu registration(s) of token sets of group "
			 "%s left unchecked: the service store %s (%s); "
			 "nothing of them was removed",
			 cnt, grp, tbx__sweep_unchecked_text(why),
			 tbx_strerror(why));
	}
	for (size_t i = 0; i < cnt && !err; i++) {
		int removed;
		uint64_t deleted;

		st->set_examined++;
		if (!(err = act_sets(tokens, &regs[i], verdicts[i], st,
				     &removed, &deleted)) &&
		    fn)
			fn(opaque, &regs[i], 1, verdicts[i], removed, deleted);
	}
	free(verdicts);
	free(regs);
	return err;
}

static int sweep(tbx_tokens_t *tokens, tbx_outbox_t *store, const char *grp,
		 size_t limit, tbx__sweep_cursor_t *cursor,
		 tbx__sweep_stats_t *stats, tbx__sweep_fn fn, void *opaque)
{
	tbx__sweep_stats_t st;
	tbx__reg_t *regs = NULL;
	const char **ids = NULL;
	tbx__row_hit_t *hits = NULL;
	size_t cnt = 0, most;
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
	most = cnt < TBX__SWEEP_FIND_MAX ? cnt : TBX__SWEEP_FIND_MAX;
	if (most && (!(ids = malloc(most * sizeof(*ids))) ||
		     !(hits = malloc(most * sizeof(*hits)))))
		err = TBX_ENOMEM;
	/* The rows of up to TBX__SWEEP_FIND_MAX registrations at a time, in
	 * one rows_find() (read after the listing: see the top). */
	for (size_t at = 0; at < cnt && !err; at += most) {
		size_t n = cnt - at < most ? cnt - at : most;

		for (size_t i = 0; i < n; i++)
			ids[i] = regs[at + i].msg_id;
		if ((err = tbx_outbox_rows_find(store, grp, ids, n, hits)) ||
		    (err = batch_row_hits(store, grp, ids, n, hits)))
			break;
		for (size_t i = 0; i < n && !err; i++) {
			const tbx__reg_t *reg = &regs[at + i];
			int verdict = tbx__sweep_judge(reg, &hits[i]), removed;
			uint64_t deleted;

			st.examined++;
			if (!(err = act(tokens, reg, verdict, &st, &removed,
					&deleted)) &&
			    fn)
				fn(opaque, reg, 0, verdict, removed, deleted);
		}
	}
	free(hits);
	free(ids);
	free(regs);
	if (!err)
		err = sweep_sets(tokens, store, grp, limit, cursor, &st, fn,
				 opaque);
	if (stats)
		*stats = st;
	return err;
}
