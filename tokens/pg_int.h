/*
 * The PostgreSQL backend of the token store, shared by its two files:
 * tokens/pg.c (what the protocol, the publishers and the sweeper call),
 * tokens/pg_sets.c (the token sets, token version 3) and tokens/pg_read.c
 * (the read side and repairs of `tokenbox inspect`).
 * Internal to them.
 */
#ifndef TBX_TOKENS_PG_INT_H
#define TBX_TOKENS_PG_INT_H

#include "base/ids.h"
#include "store/pg.h"
#include "tokens/tokens.h"

/** The schema version of the token store's PostgreSQL tables. */
#define TBX_PG_TOKENS_VERSION 4

/** Advisory lock namespaces (the first key; docs/architecture.md). */
#define TBX_PG_LOCK_MIGRATION "1413634048"
#define TBX_PG_LOCK_SUBS      "1413634050"

typedef struct tbx_tokens_pg {
	struct tbx_tokens base; /* first: the ops see a tbx_tokens_t */
	tbx__pg_t *pg;
	int shared; /* 1: the service store's connection (a reference) */
	char schema[TBX_PG_IDENT_MAX + 1];
	tbx__pg_stmts_t stmts; /* pg.c's statements */
	tbx__pg_stmts_t reads; /* pg_read.c's */
	tbx__pg_stmts_t sets;  /* pg_sets.c's */
	int version;	       /* tbx_schema_info.version */
	int reading;	       /* read_begin() opened a transaction */
	/* 1: the opening could not start its range of the sequence (a grant
	 * missing, say): no number is taken before it has. */
	int range_pending;
	/* seq_issued()'s last answer, as on SQLite (tokens/sqlite_int.h). */
	int64_t issued_lo, issued_hi;
} tbx_tokens_pg_t;

/** Sets up pg_read.c's statements on an opened store.  @returns TBX_OK
 *  or TBX_ENOMEM. */
int tbx__tokens_pg_read_init(tbx_tokens_pg_t *t);

/** Makes a lost connection of the store's own again before a call that
 *  runs outside a transaction (tbx__pg_begin() does it for the others);
 *  on a shared connection the service store does.  @returns TBX_OK or
 *  the error of reconnecting. */
int tbx__tokens_pg_ready(tbx_tokens_pg_t *t);

/** 1 when @p t is a PostgreSQL token store on a shared connection (the
 *  joined operations work). */
int tbx__tokens_pg_joinable(tbx_tokens_t *t);

/* pg.c's transaction and sequence, for pg_sets.c: a write's own
 * transaction (TBX_ESTATE inside one), its end (commit when @p err is
 * TBX_OK, else rollback; the first error), the range of the opening
 * started before a number is taken, the next number under the shared
 * subscription lock, and the check of a joined operation. */
int tbx__tokens_pg_begin(tbx_tokens_pg_t *t);
int tbx__tokens_pg_end(tbx_tokens_pg_t *t, int err);
/** A loser's or an orphan's drop, in a transaction of its own: statement
 *  @p q of @p stmts, given the attempt, deletes its registration and, only
 *  when that existed, its tokens, and answers one row (registrations
 *  deleted, tokens deleted).  *dropped = 1 when the registration was
 *  there; *deleted (may be NULL) the tokens removed. */
int tbx__tokens_pg_drop(tbx_tokens_pg_t *t, tbx__pg_stmts_t *stmts, int q,
			const char *attempt, int *dropped, uint64_t *deleted);
int tbx__tokens_pg_range_ready(tbx_tokens_pg_t *t);
int tbx__tokens_pg_seq_next(tbx_tokens_pg_t *t, int64_t *seq);
int tbx__tokens_pg_joined_check(tbx_tokens_pg_t *t);

/** Sets up pg_sets.c's statements on an opened store.  @returns TBX_OK
 *  or TBX_ENOMEM. */
int tbx__tokens_pg_sets_init(tbx_tokens_pg_t *t);

/* pg_sets.c: the token sets (tbx_tokens_ops_t; TBX_ESCHEMA on a store
 * of version 2 or older, opened read-only). */
/** Registrations from @p res (columns attempt, an id, created_ms), which
 *  it clears, into a malloc'ed array as the registrations operation hands
 *  them back. */
int tbx__tp_regs_from(PGresult *res, tbx__reg_t **out, size_t *cnt);
int tbx__tp_sets_mint(tbx_tokens_t *tokens, const char *send_grp,
		      const tbx__set_req_t *reqs, size_t req_cnt, int64_t *seq,
		      uint64_t *rows);
/** The tbx_tset rows of @p sets at @p seq (a row per group subscribed
 *  before it), run now inside the transaction open on the store's own
 *  connection (the publisher's mint).  *rows: the rows made. */
int tbx__tp_sets_add(tbx_tokens_t *tokens, const tbx__set_item_t *sets,
		     size_t cnt, int64_t seq, uint64_t *rows);
int tbx__tp_sets_mint_joined(tbx_tokens_t *tokens, const tbx__set_item_t *sets,
			     size_t cnt, int64_t seq, uint64_t *rows);
int tbx__tp_sets_test(tbx_tokens_t *tokens, const char *grp,
		      const tbx__bit_ref_t *refs, size_t n,
		      tbx__bit_state_t *st, int64_t *mint_seq);
int tbx__tp_sets_consume(tbx_tokens_t *tokens, const char *grp,
			 const tbx__bit_ref_t *refs, size_t n,
			 uint64_t *cleared, uint64_t *deleted);
int tbx__tp_sets_consume_joined(tbx_tokens_t *tokens, const char *grp,
				const tbx__bit_ref_t *refs, size_t n,
				uint64_t *cleared, uint64_t *deleted);
int tbx__tp_sets_confirm(tbx_tokens_t *tokens, const char *const *attempts,
			 size_t cnt);
int tbx__tp_sets_drop_attempt(tbx_tokens_t *tokens, const char *attempt,
			      int *dropped, uint64_t *deleted);
int tbx__tp_sets_registrations(tbx_tokens_t *tokens, const char *send_grp,
			       const tbx__reg_t *after, size_t limit,
			       tbx__reg_t **out, size_t *cnt);
int tbx__tp_sets_count(tbx_tokens_t *tokens, const char *grp, int64_t *rows,
		       int64_t *pending, int64_t *registrations);
int tbx__tp_sets_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
			 void *opaque);
int tbx__tp_sets_attempt_rows(tbx_tokens_t *tokens, const char *attempt,
			      int64_t *n);
/* unsubscribe's part, inside its transaction (token version 3; nothing
 * before): *rows the set rows of (@p grp, @p topic), removed when
 * @p remove (*deleted). */
int tbx__tp_sets_unsub(tbx_tokens_pg_t *t, const char *grp, const char *topic,
		       int remove, int64_t *rows, int64_t *deleted);
int tbx__tp_sets_list(tbx_tokens_t *tokens, const tbx__filter_t *f,
		      int64_t *total, tbx__set_fn fn, void *opaque);

/* pg_read.c: the read side (tbx_tokens_ops_t). */
int tbx__tp_read_begin(tbx_tokens_t *tokens);
void tbx__tp_read_end(tbx_tokens_t *tokens);
int tbx__tp_schema(tbx_tokens_t *tokens, int *version);
int tbx__tp_has(tbx_tokens_t *tokens, int what, int *yes);
const char *tbx__tp_errmsg(tbx_tokens_t *tokens);
int tbx__tp_tokens_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
			   void *opaque);
int tbx__tp_registrations_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
				  void *opaque);
int tbx__tp_subscriptions_list(tbx_tokens_t *tokens, tbx__sub_fn fn,
			       void *opaque);
int tbx__tp_sender_groups(tbx_tokens_t *tokens, tbx__str_fn fn, void *opaque);
int tbx__tp_attempts(tbx_tokens_t *tokens, const char *send_grp,
		     tbx__attempt_fn fn, void *opaque);
int tbx__tp_attempt_token_rows(tbx_tokens_t *tokens, const char *attempt,
			       int64_t *n);
int tbx__tp_tokens_list(tbx_tokens_t *tokens, const tbx__filter_t *f,
			int64_t *total, tbx__token_fn fn, void *opaque);
int tbx__tp_token_rows(tbx_tokens_t *tokens, const char *token,
		       tbx__token_fn fn, void *opaque);
int tbx__tp_token_registrations(tbx_tokens_t *tokens, const char *token,
				tbx__token_reg_fn fn, void *opaque);
int tbx__tp_token_match(tbx_tokens_t *tokens, const char *id,
			char out[TBX_UUID_LEN + 1], int *matches);
int tbx__tp_unsubscribe(tbx_tokens_t *tokens, const char *topic,
			const char *grp, int64_t used_before_ms, int remove,
			tbx__unsub_t *res);

#endif
