/*
 * Register-cleanup: removes the tokens of attempts that lost or crashed.
 * A pass does the same, apart, for the token sets' registrations
 * (tbx_breg), judged against the group's batch rows (tbx_obatch) by the
 * same three rules; an orphaned set attempt is dropped as one row
 * (sets_drop_attempt), whatever the number of its messages.
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
	/* The token sets' registrations (tbx_breg), judged against the
	 * group's batch rows (tbx_obatch): counted apart. */
	size_t set_examined;
	size_t set_winners;	   /**< registrations of recorded attempts */
	size_t set_orphans;	   /**< orphaned set attempts dropped */
	size_t set_in_flight;	   /**< left for later */
	uint64_t set_rows_deleted; /**< tbx_tset rows (every group) */
	/** Left unjudged: the service store could not say what its batch
	 *  rows hold (set_unchecked_err: TBX_ESCHEMA, a store without batch
	 *  rows; TBX_ECORRUPT, a row that does not decode; another error of
	 *  the listing, e.g. a schema without the table opened read-only).
	 *  Never dropped. */
	size_t set_unchecked;
	int set_unchecked_err;
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
	/** Token sets only: the service store could not answer (no batch
	 *  rows in its schema, or a row that does not decode).  Left alone,
	 *  never taken for an orphan. */
	TBX_SWEEP_UNCHECKED,
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
 * The sweeper's decisions for @p n registrations of token sets of @p grp
 * (tbx__reg_t.msg_id holds the batch row's id), from the group's batch
 * rows in @p store (obatch_load, one listing for all of them; a read).
 * verdicts[i] for regs[i]; row_attempts (may be NULL) as
 * tbx__sweep_classify()'s.  A store that cannot answer — any failure of
 * the listing but TBX_ENOMEM and TBX_EINVAL: TBX_ESCHEMA (no batch rows:
 * obatch_* NULL), TBX_ECORRUPT (a row that does not
 * decode) — gives TBX_SWEEP_UNCHECKED for all of them and its error in
 * *why (may be NULL; else TBX_OK): such a registration is never an
 * orphan.  @returns TBX_OK, or another store error.
 */
/** What a service store that could not answer (@p why, as
 *  tbx__sweep_sets_classify() gives it) did: "has no batch rows", … */
const char *tbx__sweep_unchecked_text(int why);

int tbx__sweep_sets_classify(tbx_outbox_t *store, const char *grp,
			     const tbx__reg_t *regs, size_t n, int *verdicts,
			     char (*row_attempts)[TBX_UUID_LEN + 1], int *why);

/**
 * Called by tbx__tokens_sweep_ex() after each registration it examined:
 * @p sets is 1 for a registration of token sets (tbx_breg; msg_id holds
 * its batch row's id); @p removed is 1 when the registration (and, for
 * an orphan, its tokens or set rows, @p deleted of them) was removed by
 * this sweep.
 */
typedef void (*tbx__sweep_fn)(void *opaque, const tbx__reg_t *reg, int sets,
			      int verdict, int removed, uint64_t deleted);

/** Runs one bounded sweep: at most @p limit registrations of tokens and
 *  @p limit of token sets (when the token store has them); @p stats (may
 *  be NULL) is zeroed then filled. */
int tbx_tokens_sweep(tbx_tokens_t *tokens, tbx_outbox_t *store, const char *grp,
		     size_t limit, tbx__sweep_stats_t *stats);

/** Where the last pass stopped, for a sweep that goes on from there. */
typedef struct tbx__sweep_cursor {
	int valid; /**< 0: start from the oldest registration */
	tbx__reg_t last;
	int sets_valid; /**< the same for the token sets' registrations */
	tbx__reg_t sets_last;
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

/** The prefix of a registration's message id that names a batch row
 *  (outbox.layout = batch): "b:" and the row's id. */
#define TBX_SWEEP_ROW_PREFIX "b:"

#endif
