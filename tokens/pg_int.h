/*
 * The PostgreSQL backend of the token store, shared by its two files:
 * tokens/pg.c (what the protocol, the publishers and the sweeper call) and
 * tokens/pg_read.c (the read side and repairs of `tokenbox inspect`).
 * Internal to them.
 */
#ifndef TBX_TOKENS_PG_INT_H
#define TBX_TOKENS_PG_INT_H

#include "base/ids.h"
#include "store/pg.h"
#include "tokens/tokens.h"

/** The schema version of the token store's PostgreSQL tables. */
#define TBX_PG_TOKENS_VERSION 2

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
