/*
 * The SQLite backend of the token store, shared by its files:
 * tokens/sqlite.c (what the protocol and the sweeper call),
 * tokens/sqlite_read.c (the read side and repairs of `tokenbox inspect`)
 * and tokens/sqlite_sets.c (the token sets of schema 11).  Internal to
 * them.
 */
#ifndef TBX_TOKENS_SQLITE_INT_H
#define TBX_TOKENS_SQLITE_INT_H

#include <sqlite3.h>

#include "base/ids.h"
#include "store/stmt.h"
#include "tokens/tokens.h"

/** Statement slots of each file. */
#define TQ_STMTS      48
#define TQ_READ_STMTS 24
#define TQ_SET_STMTS  24

typedef struct tbx_tokens_sqlite {
	struct tbx_tokens base; /* first: the ops see a tbx_tokens_t */
	sqlite3 *db;
	int owned; /* 0: the service store's connection, not ours to close */
	tbx__stmts_t stmts; /* sqlite.c's statements (store/stmt.h) */
	sqlite3_stmt *slots[TQ_STMTS];
	/* seq_issued()'s last answer: [issued_lo, issued_hi] was issued by
	 * this store (empty when issued_hi < issued_lo).  An interval once
	 * issued stays so: a closed range never changes, and an open one
	 * only grows. */
	int64_t issued_lo, issued_hi;
	tbx__stmts_t reads; /* sqlite_read.c's */
	sqlite3_stmt *read_slots[TQ_READ_STMTS];
	tbx__stmts_t sets; /* sqlite_sets.c's */
	sqlite3_stmt *set_slots[TQ_SET_STMTS];
} tbx_tokens_sqlite_t;

/** Sets up sqlite_read.c's statements on an opened store. */
void tbx__tokens_sqlite_read_init(tbx_tokens_sqlite_t *t);

/* sqlite.c's transactions, for sqlite_sets.c: a write transaction of its
 * own (TBX_ESTATE inside another), its end (commits when @p err is
 * TBX_OK, else rolls back; @returns the first error), the check of a
 * joined operation (TBX_ESTATE unless inside the transaction open on a
 * shared connection), and the next number of the sequence inside the
 * caller's transaction. */
int tbx__tq_txn_begin(tbx_tokens_sqlite_t *t);
int tbx__tq_txn_end(tbx_tokens_sqlite_t *t, int err);
int tbx__tq_joined_check(tbx_tokens_sqlite_t *t);
int tbx__tq_seq_next(tbx_tokens_sqlite_t *t, int64_t *seq);
/** Registrations listed by @p stmt (bound here: send_grp, limit, and the
 *  (created_ms, attempt) to start after; columns attempt, an id,
 *  created_ms) into a malloc'ed array, as the registrations operation
 *  hands them back. */
int tbx__tq_regs_read(sqlite3_stmt *stmt, const char *send_grp,
		      const tbx__reg_t *after, size_t limit, tbx__reg_t **out,
		      size_t *cnt);

/** Sets up sqlite_sets.c's statements on an opened store. */
void tbx__tokens_sqlite_sets_init(tbx_tokens_sqlite_t *t);

/* sqlite_sets.c: the token sets (tbx_tokens_ops_t, sets_*). */
int tbx__tq_sets_mint(tbx_tokens_t *tokens, const char *send_grp,
		      const tbx__set_req_t *reqs, size_t req_cnt, int64_t *seq,
		      uint64_t *rows);
/** The tbx_tset rows of @p sets (every bit set, a row per group
 *  subscribed before @p seq), inside the transaction open on @p t (the
 *  publisher's mint).  *rows is added to. */
int tbx__tq_sets_add(tbx_tokens_sqlite_t *t, const tbx__set_item_t *sets,
		     size_t cnt, int64_t seq, int64_t now, uint64_t *rows);
int tbx__tq_sets_mint_joined(tbx_tokens_t *tokens, const tbx__set_item_t *sets,
			     size_t cnt, int64_t seq, uint64_t *rows);
int tbx__tq_sets_test(tbx_tokens_t *tokens, const char *grp,
		      const tbx__bit_ref_t *refs, size_t n,
		      tbx__bit_state_t *st, int64_t *mint_seq);
int tbx__tq_sets_consume(tbx_tokens_t *tokens, const char *grp,
			 const tbx__bit_ref_t *refs, size_t n,
			 uint64_t *cleared, uint64_t *deleted);
int tbx__tq_sets_consume_joined(tbx_tokens_t *tokens, const char *grp,
				const tbx__bit_ref_t *refs, size_t n,
				uint64_t *cleared, uint64_t *deleted);
int tbx__tq_sets_confirm(tbx_tokens_t *tokens, const char *const *attempts,
			 size_t cnt);
int tbx__tq_sets_drop_attempt(tbx_tokens_t *tokens, const char *attempt,
			      int *dropped, uint64_t *deleted);
int tbx__tq_sets_registrations(tbx_tokens_t *tokens, const char *send_grp,
			       const tbx__reg_t *after, size_t limit,
			       tbx__reg_t **out, size_t *cnt);
int tbx__tq_sets_count(tbx_tokens_t *tokens, const char *grp, int64_t *rows,
		       int64_t *pending, int64_t *registrations);
int tbx__tq_sets_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
			 void *opaque);
int tbx__tq_sets_attempt_rows(tbx_tokens_t *tokens, const char *attempt,
			      int64_t *n);
/* unsubscribe's part, inside its transaction: *rows the set rows of
 * (@p grp, @p topic), removed when @p remove (*deleted). */
int tbx__tq_sets_unsub(tbx_tokens_sqlite_t *t, const char *grp,
		       const char *topic, int remove, int64_t *rows,
		       int64_t *deleted);
int tbx__tq_sets_list(tbx_tokens_t *tokens, const tbx__filter_t *f,
		      int64_t *total, tbx__set_fn fn, void *opaque);

/* sqlite_read.c: the read side (tbx_tokens_ops_t). */
int tbx__tq_read_begin(tbx_tokens_t *tokens);
void tbx__tq_read_end(tbx_tokens_t *tokens);
int tbx__tq_schema(tbx_tokens_t *tokens, int *version);
int tbx__tq_has(tbx_tokens_t *tokens, int what, int *yes);
const char *tbx__tq_errmsg(tbx_tokens_t *tokens);
int tbx__tq_tokens_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
			   void *opaque);
int tbx__tq_registrations_summary(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
				  void *opaque);
int tbx__tq_subscriptions_list(tbx_tokens_t *tokens, tbx__sub_fn fn,
			       void *opaque);
int tbx__tq_sender_groups(tbx_tokens_t *tokens, tbx__str_fn fn, void *opaque);
int tbx__tq_attempts(tbx_tokens_t *tokens, const char *send_grp,
		     tbx__attempt_fn fn, void *opaque);
int tbx__tq_attempt_token_rows(tbx_tokens_t *tokens, const char *attempt,
			       int64_t *n);
int tbx__tq_tokens_list(tbx_tokens_t *tokens, const tbx__filter_t *f,
			int64_t *total, tbx__token_fn fn, void *opaque);
int tbx__tq_token_rows(tbx_tokens_t *tokens, const char *token,
		       tbx__token_fn fn, void *opaque);
int tbx__tq_token_registrations(tbx_tokens_t *tokens, const char *token,
				tbx__token_reg_fn fn, void *opaque);
int tbx__tq_token_match(tbx_tokens_t *tokens, const char *id,
			char out[TBX_UUID_LEN + 1], int *matches);
int tbx__tq_unsubscribe(tbx_tokens_t *tokens, const char *topic,
			const char *grp, int64_t used_before_ms, int remove,
			tbx__unsub_t *res);

#endif
