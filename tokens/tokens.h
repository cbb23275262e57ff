/*
 * The token store T: an interface (a struct of function pointers) so that a
 * server-backed store can be added without touching the protocol, its
 * SQLite backend (tokens/sqlite*.c) and its PostgreSQL backend
 * (tokens/pg*.c; its tables: docs/postgresql.md).
 *
 * Tables (in every tokenbox database file; their columns and every schema
 * version: the migrations in store/db.c):
 *
 *   tbx_seq            (id = 1, value): one sequence for mint and subscribe
 *   tbx_seq_ranges     PRIMARY KEY lo, with hi (NULL: the open range): the
 *                      ranges the sequence issued numbers in
 *   tbx_tokens         PRIMARY KEY (token, grp), with mint_seq
 *   tbx_registrations  PRIMARY KEY (attempt, token), with send_grp and msg_id
 *   tbx_subscriptions  PRIMARY KEY (topic, grp), with since_seq and used_ms
 *   tbx_edge           PRIMARY KEY (topic, caller_id): the caller ids seen
 *                      by publishers, with fingerprint, msg_id and token
 *   tbx_store_info     (id = 1, store_id, created_ms): the file's identity
 *   tbx_tset, tbx_breg the token sets of schema 11 (below)
 *
 * A token is a row per (token id, consumer group): a group checks and
 * deletes only its own row.  Every operation that writes is one
 * transaction of its own (BEGIN IMMEDIATE … COMMIT), except the joined ones,
 * which write inside the service store's transaction on a shared
 * connection.
 */
#ifndef TBX_TOKENS_TOKENS_H
#define TBX_TOKENS_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "base/ids.h"
#include "store/db.h"
#include "store/filter.h"
#include "tokenbox/tokenbox.h"

typedef struct tbx_tokens tbx_tokens_t;

/**
 * Numbers a millisecond: a range of the sequence starts at least at the
 * wall clock in ms times this (see seq_issued below and
 * docs/architecture.md, token-store identity).  A history that issues
 * fewer numbers than this a millisecond never reaches the start of a
 * history opened after it, and the numbers stay below 2^53 (exact in
 * JSON and in doubles) until the year 2255.
 */
#define TBX__SEQ_PER_MS INT64_C(1000)

/** One token to mint: rows for every group subscribed to @p topic. */
typedef struct tbx__mint_item {
	const char *token;
	const char *topic;
} tbx__mint_item_t;

/** The tokens of one attempt of one outbox row. */
typedef struct tbx__mint_req {
	const char *attempt; /**< NULL: no registration (ingress publishing) */
	const char *msg_id;  /**< the outbox row's message id */
	const tbx__mint_item_t *items;
	size_t item_cnt;
} tbx__mint_req_t;

/** A registration (one per attempt, whatever its token count). */
typedef struct tbx__reg {
	char attempt[TBX_UUID_LEN + 1];
	char msg_id[TBX_MSGID_MAX + 1];
	int64_t created_ms;
} tbx__reg_t;

/** What the ingress edge decided for one message of a publisher's flush. */
typedef enum tbx__edge_verdict {
	TBX_EDGE_NEW = 0,   /**< minted now: tokens created, id recorded */
	TBX_EDGE_INFLIGHT,  /**< natural duplicate of a message not known to
			       be delivered: send again with its id, token
			       and sequence number */
	TBX_EDGE_DONE,	    /**< natural duplicate of a delivered message */
	TBX_EDGE_SYNTHETIC, /**< same caller id, another fingerprint */
} tbx__edge_verdict_t;

/** One message of a publisher's flush (tbx_tokens_publish_mint). */
typedef struct tbx__edge_item {
	const char *topic;
	const char *caller_id; /**< NULL: no edge entry, always minted */
	const char *grp;   /**< NULL: tokens for every subscribed group; else
			      for this group only (a dead letter's replay) */
	const uint8_t *fp; /**< TBX_EDGE_FP_LEN bytes with caller_id */
	char
	    msg_id[TBX_UUID_LEN + 1]; /**< in: fresh id; out: the one to send */
	char token[TBX_UUID_LEN + 1]; /**< in: fresh token; out: to send */
	int64_t seq;		      /**< out: tbx-seq to send */
	tbx__edge_verdict_t verdict;  /**< out */
	/** in: 1 to mint the item's token as a bit of a token set of
	 *  partition @p part (tokens.format = set; grp must be NULL); 0 for
	 *  a per-message token */
	int in_set;
	/** in with in_set: the destination partition, chosen before the
	 *  mint; out: the partition to produce to, -1 for any (a
	 *  per-message token) */
	int32_t part;
	/** out: the set of the item's token ("" for a per-message token in
	 *  token) and its bit, for a new item and for a natural duplicate
	 *  of one minted in a set */
	char set_id[TBX_UUID_LEN + 1];
	uint32_t bit;
} tbx__edge_item_t;

#define TBX_EDGE_FP_LEN 32

/** A token row (one per token and receiving group), for inspection. */
typedef struct tbx__token_rec {
	const char *token, *grp;
	int64_t mint_seq, created_ms;
} tbx__token_rec_t;

/** A subscription of a group to a topic. */
typedef struct tbx__sub {
	const char *topic, *grp;
	int64_t since_seq, created_ms;
	int64_t used_ms; /**< the last use, else created_ms */
} tbx__sub_t;

/** What tbx_tokens_unsubscribe() found and did. */
typedef struct tbx__unsub {
	int found;	     /**< the subscription exists */
	int removed;	     /**< it was removed */
	int64_t used_ms;     /**< its last use, else its creation */
	int64_t others;	     /**< the group's other subscriptions */
	int64_t token_rows;  /**< the group's token rows */
	int64_t deleted;     /**< token rows removed with it */
	int64_t set_rows;    /**< the group's token set rows of the topic
				(a store with token sets; else 0) */
	int64_t set_deleted; /**< of those, removed with it */
} tbx__unsub_t;

/*
 * Token sets (schema 11; docs/batched-tokens.md): the tokens an attempt
 * mints for the messages it sends to one partition of one topic, stored as
 * one row per receiving group with a bitmap of the messages not yet
 * consumed.  Tables:
 *
 *   tbx_tset  PRIMARY KEY (set_id, grp), with topic, part, mint_seq,
 *             nbits, bits (bit i in byte i / 8, bit i % 8; PostgreSQL:
 *             bit varying, bit i the i-th from the left), created_ms
 *   tbx_breg  PRIMARY KEY attempt, with send_grp, row_id, sets (the
 *             attempt's set ids), created_ms: one registration per
 *             attempt, whatever the number of its sets and messages
 *
 * Bits are cleared only by sets_consume(_joined), each an UPDATE whose new
 * value is computed from the row as the statement finds it (never from a
 * value read before), and a row goes in the same transaction once its
 * last bit is cleared.  A set never gains a bit after its mint.
 */

/** The most messages of one set. */
#define TBX_SET_BITS_MAX 65536u

/** One set to mint: @p nbits messages to partition @p part of @p topic,
 *  every bit set, a row per group subscribed to @p topic with since_seq
 *  below the mint's sequence number. */
typedef struct tbx__set_item {
	const char *set_id; /**< a fresh id, UUID text */
	const char *topic;
	int32_t part;	/**< >= 0: the partition, computed before minting */
	uint32_t nbits; /**< 1 .. TBX_SET_BITS_MAX */
} tbx__set_item_t;

/** The sets of one attempt. */
typedef struct tbx__set_req {
	const char *attempt; /**< NULL: no registration (a publisher) */
	const char *row_id;  /**< the outbox row the attempt is of */
	const tbx__set_item_t *sets;
	size_t set_cnt;
} tbx__set_req_t;

/** One message's token: bit @p index of set @p set_id. */
typedef struct tbx__bit_ref {
	const char *set_id;
	uint32_t index;
} tbx__bit_ref_t;

/** What sets_test() found for a bit_ref. */
typedef enum tbx__bit_state {
	TBX_BIT_CLEAR = 0, /**< the row exists, the bit is clear: consumed */
	TBX_BIT_SET = 1,   /**< the token exists */
	TBX_BIT_NOROW = 2, /**< no row (set_id, grp): every bit consumed, or
			      never minted for the group (check mint_seq) */
	TBX_BIT_RANGE = 3, /**< the row exists and index >= nbits: malformed */
} tbx__bit_state_t;

/** A set row, for inspection. */
typedef struct tbx__set_rec {
	const char *set_id, *grp, *topic;
	int32_t part;
	uint32_t nbits;
	uint32_t pending;    /**< bits still set */
	const uint8_t *bits; /**< (nbits + 7) / 8 bytes, bit i in byte i / 8,
				bit i % 8 */
	int64_t mint_seq, created_ms;
} tbx__set_rec_t;

typedef int (*tbx__set_fn)(void *opaque, const tbx__set_rec_t *rec);

typedef int (*tbx__token_fn)(void *opaque, const tbx__token_rec_t *rec);
typedef int (*tbx__sub_fn)(void *opaque, const tbx__sub_t *sub);
/** An attempt's registrations: @p tokens of them (one per token). */
typedef int (*tbx__attempt_fn)(void *opaque, const tbx__reg_t *reg,
			       int64_t tokens);
/** A registration naming a token, by @p send_grp. */
typedef int (*tbx__token_reg_fn)(void *opaque, const tbx__reg_t *reg,
				 const char *send_grp);

typedef struct tbx_tokens_ops {
	const char *name;
	/** *exists = 1 when the row (token, grp) exists. A read. */
	int (*exists)(tbx_tokens_t *tokens, const char *token, const char *grp,
		      int *exists);
	/** exists for @p n tokens of @p grp (repeats allowed): exists[i]
	 *  for token_ids[i].  One statement where the backend can
	 *  (PostgreSQL: token = ANY($2)); NULL: the wrapper asks exists
	 *  once per token.  A read; on a shared connection, inside the
	 *  caller's transaction. */
	int (*exists_many)(tbx_tokens_t *tokens, const char *grp,
			   const char *const *token_ids, size_t n, int *exists);
	/** Registers (topic, grp) if new, taking a number from the sequence;
	 *  *since receives the subscription's number (old or new). */
	int (*subscribe)(tbx_tokens_t *tokens, const char *topic,
			 const char *grp, int64_t *since);
	/** *since of (topic, grp); TBX_ENOENT when not subscribed. A read. */
	int (*subscription)(tbx_tokens_t *tokens, const char *topic,
			    const char *grp, int64_t *since);
	/**
	 * One transaction: takes the next sequence number (*seq), writes a
	 * registration (attempt, token, send_grp, msg_id) per item of every
	 * request with an attempt, and a token row per item and per group
	 * subscribed to the item's topic with since_seq < *seq.
	 * *rows (may be NULL) receives the number of token rows created.
	 */
	int (*mint)(tbx_tokens_t *tokens, const char *send_grp,
		    const tbx__mint_req_t *reqs, size_t req_cnt, int64_t *seq,
		    uint64_t *rows);
	/**
	 * The joined operations, for a store that shares the service store's
	 * connection (one file for both): the same as seq-taking, mint and
	 * consume, but inside the transaction open on that connection, which
	 * the caller commits.  mint_joined writes no registrations: the
	 * caller commits the tokens together with the outbox row that names
	 * their attempt, so no attempt can be orphaned.  Each returns
	 * TBX_ESTATE when the store does not share a connection or no
	 * transaction is open.  NULL for backends that cannot join.
	 * mint_joined adds the token rows made to *rows (may be NULL); on
	 * PostgreSQL its statement goes with the transaction's next one
	 * (store/pg.h, tbx__pg_defer()), so *rows must stay valid until the
	 * transaction ends, and a failure of the statement fails a later
	 * call or the commit.
	 */
	int (*seq_joined)(tbx_tokens_t *tokens, int64_t *seq);
	int (*mint_joined)(tbx_tokens_t *tokens, const tbx__mint_item_t *items,
			   size_t cnt, int64_t seq, uint64_t *rows);
	int (*consume_joined)(tbx_tokens_t *tokens, const char *grp,
			      const char *const *token_ids, size_t cnt,
			      uint64_t *deleted);
	/** C's confirm: deletes the registrations of @p attempts, one txn. */
	int (*confirm)(tbx_tokens_t *tokens, const char *const *attempts,
		       size_t cnt);
	/** D: deletes rows (token, grp) for @p tokens, one txn. */
	int (*consume)(tbx_tokens_t *tokens, const char *grp,
		       const char *const *token_ids, size_t cnt,
		       uint64_t *deleted);
	/**
	 * Loser or orphan: one txn that deletes the tokens (every group) named
	 * by @p attempt's registrations and the registrations, only if they
	 * still exist.  *dropped = 1 when it did; *deleted (may be NULL)
	 * receives the token rows removed.
	 */
	int (*drop_attempt)(tbx_tokens_t *tokens, const char *attempt,
			    int *dropped, uint64_t *deleted);
	/** Up to @p limit registrations of @p send_grp, oldest first (by
	 *  created_ms, then attempt) and after @p after when not NULL, into a
	 *  malloc'ed array (*out, caller frees; NULL when *cnt is 0). */
	int (*registrations)(tbx_tokens_t *tokens, const char *send_grp,
			     const tbx__reg_t *after, size_t limit,
			     tbx__reg_t **out, size_t *cnt);
	/** The store's id (a UUID made when the file was created, see
	 *  store/db.c) into @p out.  A read. */
	int (*store_id)(tbx_tokens_t *tokens, char out[TBX_UUID_LEN + 1]);
	/** The sequence's current value (the last number taken).  A read;
	 *  on a shared connection, inside the caller's transaction. */
	int (*seq_current)(tbx_tokens_t *tokens, int64_t *seq);
	/**
	 * *issued = 1 when @p seq was issued by this store's history: a
	 * range of tbx_seq_ranges holds it (lo <= seq <= hi, or <= the
	 * current value for the open range).  A number in a gap between
	 * ranges, or above the current value, was never issued here: a
	 * store restored from an older backup starts its next range above
	 * every number its lost history issued (docs/architecture.md,
	 * token-store identity).  A read; on a shared connection, inside
	 * the caller's transaction.
	 */
	int (*seq_issued)(tbx_tokens_t *tokens, int64_t seq, int *issued);
	/** The ranges of tbx_seq_ranges into *count (the open one
	 *  included), for inspect; has(TBX_TOKENS_HAS_SEQ_RANGES) says
	 *  whether the store has them.  A read. */
	int (*seq_ranges)(tbx_tokens_t *tokens, int64_t *count);
	/** Records that (topic, grp) is in use now (used_ms), one txn;
	 *  *found = 0 when the subscription no longer exists (removed by
	 *  `inspect unsubscribe`). */
	int (*touch)(tbx_tokens_t *tokens, const char *topic, const char *grp,
		     int *found);
	/** Counts token rows of @p grp (NULL: all) and registrations of
	 *  @p grp as sender (NULL: all).  Either out pointer may be NULL. */
	int (*count)(tbx_tokens_t *tokens, const char *grp, int64_t *token_rows,
		     int64_t *registrations);
	/**
	 * The publisher's mint, with the ingress edge, in one transaction:
	 * removes up to @p sweep_max edge entries older than @p window_ms,
	 * takes the next sequence number, then per item in order: without a
	 * caller id, or with one not seen within the window, mints the
	 * item's token (a row per subscribed group) and records the caller
	 * id; with one seen, sets the verdict (the original's id, token and
	 * sequence number for a natural duplicate; a synthetic one adds to
	 * the entry's refused count).  *rows as for mint.  Items with in_set
	 * are minted as token sets instead, in the same transaction: one set
	 * per (topic, part) of the new items (a second when one reaches
	 * TBX_SET_BITS_MAX), a tbx_tset row per group subscribed with
	 * since_seq below the number, no registration; each new item gets
	 * its set and bit (in queue order), and its edge entry records them
	 * with the partition.  A natural duplicate gets the original's
	 * token or set, bit and partition, whichever it was minted with.
	 * TBX_ESCHEMA for in_set on a store that cannot record them.
	 */
	int (*publish_mint)(tbx_tokens_t *tokens, tbx__edge_item_t *items,
			    size_t cnt, int64_t window_ms, size_t sweep_max,
			    uint64_t *rows);
	/** Marks the edge entries of delivered items (those with a caller
	 *  id and verdict NEW or INFLIGHT), one txn. */
	int (*edge_delivered)(tbx_tokens_t *tokens,
			      const tbx__edge_item_t *items, size_t cnt);
	/** Edge entries, and synthetic duplicates refused against them. */
	int (*edge_count)(tbx_tokens_t *tokens, int64_t *entries,
			  int64_t *refused);
	/** Groups subscribed to @p topic.  A read. */
	int (*subscribers)(tbx_tokens_t *tokens, const char *topic,
			   int64_t *cnt);

	/*
	 * The read side and the repairs of `tokenbox inspect`, as for the
	 * service store (outbox/outbox.h): listings call @p fn per record
	 * in the order they name, records borrowed for the call, non-zero
	 * stops; *total (may be NULL) the records the filter takes.
	 */
	/** One read snapshot for the reads that follow, until read_end
	 *  (on a shared connection: the service store's snapshot). */
	int (*read_begin)(tbx_tokens_t *tokens);
	void (*read_end)(tbx_tokens_t *tokens);
	/** The schema version of the store. */
	int (*schema)(tbx_tokens_t *tokens, int *version);
	/** *yes = 1 when the store's tables hold @p what (TBX_TOKENS_HAS_*),
	 *  which each backend answers from its own schema versions. */
	int (*has)(tbx_tokens_t *tokens, int what, int *yes);
	/** The backend's text for the last failed call (NULL: none). */
	const char *(*errmsg)(tbx_tokens_t *tokens);
	/** Per group with token rows, by name: n[0] = rows, ms = the
	 *  oldest. */
	int (*tokens_summary)(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
			      void *opaque);
	/** Per sending group, by name: n[0] = attempts, n[1] =
	 *  registrations (one per token), ms = the oldest. */
	int (*registrations_summary)(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
				     void *opaque);
	/** Subscriptions, by topic and group. */
	int (*subscriptions_list)(tbx_tokens_t *tokens, tbx__sub_fn fn,
				  void *opaque);
	/** Groups with registrations (of tokens, and of token sets where
	 *  the store has them), by name. */
	int (*sender_groups)(tbx_tokens_t *tokens, tbx__str_fn fn,
			     void *opaque);
	/** The attempts @p send_grp registered, as the sweeper lists them
	 *  (oldest first, then by attempt). */
	int (*attempts)(tbx_tokens_t *tokens, const char *send_grp,
			tbx__attempt_fn fn, void *opaque);
	/** Token rows (every group) of the tokens @p attempt registered:
	 *  what drop_attempt would delete. */
	int (*attempt_token_rows)(tbx_tokens_t *tokens, const char *attempt,
				  int64_t *n);
	/** The token rows @p f takes, oldest first (then token, group). */
	int (*tokens_list)(tbx_tokens_t *tokens, const tbx__filter_t *f,
			   int64_t *total, tbx__token_fn fn, void *opaque);
	/** The rows of @p token, by group. */
	int (*token_rows)(tbx_tokens_t *tokens, const char *token,
			  tbx__token_fn fn, void *opaque);
	/** The registrations naming @p token, by attempt. */
	int (*token_registrations)(tbx_tokens_t *tokens, const char *token,
				   tbx__token_reg_fn fn, void *opaque);
	/** Resolves @p id to a token with rows or registrations: itself,
	 *  else the one starting with it.  *matches = 0, 1 (@p out set) or
	 *  2 for several. */
	int (*token_match)(tbx_tokens_t *tokens, const char *id,
			   char out[TBX_UUID_LEN + 1], int *matches);
	/**
	 * A repair, one transaction: looks up (topic, grp) and, when
	 * @p remove and it was last used at or before @p used_before_ms,
	 * removes it and, when the group has no other subscription, the
	 * group's token rows (tokens do not record their topic), and the
	 * group's token set rows of @p topic (sets record theirs) on a
	 * store that has them.
	 */
	int (*unsubscribe)(tbx_tokens_t *tokens, const char *topic,
			   const char *grp, int64_t used_before_ms, int remove,
			   tbx__unsub_t *res);
	/*
	 * Token sets (above).  Every one of these is NULL on a store whose
	 * schema predates them; has(TBX_TOKENS_HAS_SETS) says whether the
	 * store holds their tables.
	 */
	/**
	 * One transaction: takes the next sequence number (*seq), writes a
	 * tbx_breg row per request with an attempt (send_grp, row_id, its set
	 * ids) and, per set of every request, a tbx_tset row with every bit
	 * set per group subscribed to the set's topic with since_seq < *seq.
	 * *rows (may be NULL): the set rows created.
	 */
	int (*sets_mint)(tbx_tokens_t *tokens, const char *send_grp,
			 const tbx__set_req_t *reqs, size_t req_cnt,
			 int64_t *seq, uint64_t *rows);
	/** The same inside the transaction open on a shared connection, with
	 *  @p seq taken by seq_joined, and no registration (as mint_joined).
	 *  On PostgreSQL the statement may be deferred as mint_joined's. */
	int (*sets_mint_joined)(tbx_tokens_t *tokens,
				const tbx__set_item_t *sets, size_t cnt,
				int64_t seq, uint64_t *rows);
	/**
	 * The token check of @p n messages for @p grp: st[i] for refs[i]
	 * (repeats allowed), and mint_seq[i] (may be NULL) the set's mint_seq
	 * when its row exists.  One statement per distinct set, or one for
	 * all where the backend can.  A read; on a shared connection, inside
	 * the caller's transaction.
	 */
	int (*sets_test)(tbx_tokens_t *tokens, const char *grp,
			 const tbx__bit_ref_t *refs, size_t n,
			 tbx__bit_state_t *st, int64_t *mint_seq);
	/**
	 * D: clears the bits @p refs name in @p grp's rows (repeats and bits
	 * already clear allowed; a ref to a row that is gone or beyond nbits
	 * clears nothing), one UPDATE per set computed from the row as found,
	 * then deletes the sets among them whose bitmap is now empty, one
	 * transaction.  *cleared (may be NULL): bits that were set and are
	 * now clear; *deleted (may be NULL): rows deleted.
	 */
	int (*sets_consume)(tbx_tokens_t *tokens, const char *grp,
			    const tbx__bit_ref_t *refs, size_t n,
			    uint64_t *cleared, uint64_t *deleted);
	/** The same inside the transaction open on a shared connection (the
	 *  joined D+E).  On PostgreSQL *cleared and *deleted may be filled
	 *  only when the transaction's next statement has run. */
	int (*sets_consume_joined)(tbx_tokens_t *tokens, const char *grp,
				   const tbx__bit_ref_t *refs, size_t n,
				   uint64_t *cleared, uint64_t *deleted);
	/** C's confirm for set attempts: deletes their tbx_breg rows, one
	 *  transaction. */
	int (*sets_confirm)(tbx_tokens_t *tokens, const char *const *attempts,
			    size_t cnt);
	/**
	 * Loser or orphan of a set attempt: one transaction that deletes the
	 * rows (every group) of the sets @p attempt's registration names and
	 * the registration, only if it still exists.  *dropped = 1 when it
	 * did; *deleted (may be NULL): the set rows removed.
	 */
	int (*sets_drop_attempt)(tbx_tokens_t *tokens, const char *attempt,
				 int *dropped, uint64_t *deleted);
	/** Up to @p limit tbx_breg rows of @p send_grp, oldest first (by
	 *  created_ms, then attempt), after @p after when not NULL, into a
	 *  malloc'ed array as registrations() (msg_id holds the row_id). */
	int (*sets_registrations)(tbx_tokens_t *tokens, const char *send_grp,
				  const tbx__reg_t *after, size_t limit,
				  tbx__reg_t **out, size_t *cnt);
	/** Counts set rows of @p grp (NULL: all), their pending bits, and
	 *  tbx_breg rows of @p grp as sender (NULL: all).  Any out pointer
	 *  may be NULL. */
	int (*sets_count)(tbx_tokens_t *tokens, const char *grp, int64_t *rows,
			  int64_t *pending, int64_t *registrations);
	/** Set rows (every group) of the sets @p attempt's registration
	 *  names: what sets_drop_attempt would delete. */
	int (*sets_attempt_rows)(tbx_tokens_t *tokens, const char *attempt,
				 int64_t *n);
	/** Per group with set rows, by name: n[0] = rows, n[1] = pending
	 *  bits, ms = the oldest row. */
	int (*sets_summary)(tbx_tokens_t *tokens, tbx__grp_sum_fn fn,
			    void *opaque);
	/** The set rows @p f takes, oldest first (then set_id, group). */
	int (*sets_list)(tbx_tokens_t *tokens, const tbx__filter_t *f,
			 int64_t *total, tbx__set_fn fn, void *opaque);

	/** Closes and frees. */
	void (*close)(tbx_tokens_t *tokens);
} tbx_tokens_ops_t;

/** What a token store may lack, for has(): a table or a column that came
 *  with a later schema version of one backend (SQLite: the ingress edge
 *  with schema 4, the store's identity with schema 6, the sequence's
 *  ranges with schema 10, the token sets with schema 11; PostgreSQL's
 *  version 1 holds the first two, version 2 the ranges, version 3 the
 *  sets). */
enum {
	TBX_TOKENS_HAS_EDGE = 1,
	TBX_TOKENS_HAS_STORE_ID = 2,
	TBX_TOKENS_HAS_SEQ_RANGES = 3,
	TBX_TOKENS_HAS_SETS = 4,     /**< tbx_tset, tbx_breg: SQLite schema 11,
				       PostgreSQL token version 3 */
	TBX_TOKENS_HAS_EDGE_SETS = 5 /**< tbx_edge's tset, tbit, tpart:
					SQLite schema 14 */
};

/** Backends embed this first. */
struct tbx_tokens {
	const tbx_tokens_ops_t *ops;
};

/**
 * Opens the SQLite backend on @p path.  When @p shared is not NULL the
 * backend uses that connection (the service store's, when both stores are
 * one file) and does not close it; transactions then must not overlap.
 * A read-write opening starts a range of the sequence (seq_issued) in a
 * transaction of its own, so @p shared must not be inside one.
 */
int tbx_tokens_sqlite_open(const char *path, const tbx__db_opts_t *opts,
			   sqlite3 *shared, tbx_tokens_t **out, char *errstr,
			   size_t errstr_size);

struct tbx__pg;
/**
 * Opens the PostgreSQL backend: the token tables in schema @p schema of
 * the database @p conninfo names (created or migrated forward as
 * tbx_outbox_pg_open() does, with the store identity made on creation).
 * When @p shared is not NULL the backend uses that connection (the
 * service store's: S and T in one database, the joined path) and takes a
 * reference to it instead of connecting; transactions then must not
 * overlap.  opts->create = 0 refuses (TBX_ENOENT) a schema without token
 * tables, as a missing SQLite file is refused.  A read-write opening
 * migrates an older version and starts a range of the sequence
 * (seq_issued); one that cannot start it (a grant missing) opens, and
 * takes no number until it has.
 */
int tbx_tokens_pg_open(const char *conninfo, const char *schema,
		       struct tbx__pg *shared, const tbx__db_opts_t *opts,
		       tbx_tokens_t **out, char *errstr, size_t errstr_size);
/** Backend-specific: the connection of a token store of the PostgreSQL
 *  backend (borrowed; the service store's when shared), NULL for any
 *  other. */
struct tbx__pg *tbx_tokens_pg(tbx_tokens_t *t);

/* Thin wrappers so call sites read as verbs. */
static inline int tbx_tokens_exists(tbx_tokens_t *t, const char *token,
				    const char *grp, int *exists)
{
	return t->ops->exists(t, token, grp, exists);
}
static inline int tbx_tokens_exists_many(tbx_tokens_t *t, const char *grp,
					 const char *const *token_ids, size_t n,
					 int *exists)
{
	int err;

	if (t->ops->exists_many)
		return t->ops->exists_many(t, grp, token_ids, n, exists);
	for (size_t i = 0; i < n; i++)
		if ((err = t->ops->exists(t, token_ids[i], grp, &exists[i])))
			return err;
	return TBX_OK;
}
static inline int tbx_tokens_subscribe(tbx_tokens_t *t, const char *topic,
				       const char *grp, int64_t *since)
{
	return t->ops->subscribe(t, topic, grp, since);
}
static inline int tbx_tokens_subscription(tbx_tokens_t *t, const char *topic,
					  const char *grp, int64_t *since)
{
	return t->ops->subscription(t, topic, grp, since);
}
static inline int tbx_tokens_mint(tbx_tokens_t *t, const char *send_grp,
				  const tbx__mint_req_t *reqs, size_t cnt,
				  int64_t *seq, uint64_t *rows)
{
	return t->ops->mint(t, send_grp, reqs, cnt, seq, rows);
}
/** 1 when the joined operations can be used on this store. */
int tbx_tokens_joinable(tbx_tokens_t *t);
static inline int tbx_tokens_seq_joined(tbx_tokens_t *t, int64_t *seq)
{
	return t->ops->seq_joined(t, seq);
}
static inline int tbx_tokens_mint_joined(tbx_tokens_t *t,
					 const tbx__mint_item_t *items,
					 size_t cnt, int64_t seq,
					 uint64_t *rows)
{
	return t->ops->mint_joined(t, items, cnt, seq, rows);
}
static inline int tbx_tokens_consume_joined(tbx_tokens_t *t, const char *grp,
					    const char *const *ids, size_t cnt,
					    uint64_t *deleted)
{
	return t->ops->consume_joined(t, grp, ids, cnt, deleted);
}
static inline int tbx_tokens_confirm(tbx_tokens_t *t,
				     const char *const *attempts, size_t cnt)
{
	return t->ops->confirm(t, attempts, cnt);
}
static inline int tbx_tokens_consume(tbx_tokens_t *t, const char *grp,
				     const char *const *ids, size_t cnt,
				     uint64_t *deleted)
{
	return t->ops->consume(t, grp, ids, cnt, deleted);
}
static inline int tbx_tokens_drop_attempt(tbx_tokens_t *t, const char *attempt,
					  int *dropped, uint64_t *deleted)
{
	return t->ops->drop_attempt(t, attempt, dropped, deleted);
}
static inline int tbx_tokens_registrations(tbx_tokens_t *t,
					   const char *send_grp, size_t limit,
					   tbx__reg_t **out, size_t *cnt)
{
	return t->ops->registrations(t, send_grp, NULL, limit, out, cnt);
}
/* The same, starting after @p after in that order (NULL: the oldest). */
static inline int tbx_tokens_registrations_after(tbx_tokens_t *t,
						 const char *send_grp,
						 const tbx__reg_t *after,
						 size_t limit, tbx__reg_t **out,
						 size_t *cnt)
{
	return t->ops->registrations(t, send_grp, after, limit, out, cnt);
}
static inline int tbx_tokens_count(tbx_tokens_t *t, const char *grp,
				   int64_t *token_rows, int64_t *registrations)
{
	return t->ops->count(t, grp, token_rows, registrations);
}
static inline int tbx_tokens_publish_mint(tbx_tokens_t *t,
					  tbx__edge_item_t *items, size_t cnt,
					  int64_t window_ms, size_t sweep_max,
					  uint64_t *rows)
{
	return t->ops->publish_mint(t, items, cnt, window_ms, sweep_max, rows);
}
static inline int tbx_tokens_edge_delivered(tbx_tokens_t *t,
					    const tbx__edge_item_t *items,
					    size_t cnt)
{
	return t->ops->edge_delivered(t, items, cnt);
}
static inline int tbx_tokens_edge_count(tbx_tokens_t *t, int64_t *entries,
					int64_t *refused)
{
	return t->ops->edge_count(t, entries, refused);
}
static inline int tbx_tokens_subscribers(tbx_tokens_t *t, const char *topic,
					 int64_t *cnt)
{
	return t->ops->subscribers(t, topic, cnt);
}
static inline int tbx_tokens_store_id(tbx_tokens_t *t,
				      char out[TBX_UUID_LEN + 1])
{
	return t->ops->store_id(t, out);
}
static inline int tbx_tokens_seq_current(tbx_tokens_t *t, int64_t *seq)
{
	return t->ops->seq_current(t, seq);
}
static inline int tbx_tokens_seq_issued(tbx_tokens_t *t, int64_t seq,
					int *issued)
{
	return t->ops->seq_issued(t, seq, issued);
}
static inline int tbx_tokens_seq_ranges(tbx_tokens_t *t, int64_t *count)
{
	return t->ops->seq_ranges(t, count);
}
static inline int tbx_tokens_touch(tbx_tokens_t *t, const char *topic,
				   const char *grp, int *found)
{
	return t->ops->touch(t, topic, grp, found);
}
static inline int tbx_tokens_read_begin(tbx_tokens_t *t)
{
	return t->ops->read_begin(t);
}

static inline void tbx_tokens_read_end(tbx_tokens_t *t)
{
	t->ops->read_end(t);
}

static inline int tbx_tokens_schema(tbx_tokens_t *t, int *version)
{
	return t->ops->schema(t, version);
}

static inline int tbx_tokens_has(tbx_tokens_t *t, int what, int *yes)
{
	return t->ops->has(t, what, yes);
}

static inline const char *tbx_tokens_errmsg(tbx_tokens_t *t)
{
	return t->ops->errmsg(t);
}

static inline int tbx_tokens_tokens_summary(tbx_tokens_t *t, tbx__grp_sum_fn fn,
					    void *opaque)
{
	return t->ops->tokens_summary(t, fn, opaque);
}

static inline int tbx_tokens_registrations_summary(tbx_tokens_t *t,
						   tbx__grp_sum_fn fn,
						   void *opaque)
{
	return t->ops->registrations_summary(t, fn, opaque);
}

static inline int tbx_tokens_subscriptions_list(tbx_tokens_t *t, tbx__sub_fn fn,
						void *opaque)
{
	return t->ops->subscriptions_list(t, fn, opaque);
}

static inline int tbx_tokens_sender_groups(tbx_tokens_t *t, tbx__str_fn fn,
					   void *opaque)
{
	return t->ops->sender_groups(t, fn, opaque);
}

static inline int tbx_tokens_attempts(tbx_tokens_t *t, const char *send_grp,
				      tbx__attempt_fn fn, void *opaque)
{
	return t->ops->attempts(t, send_grp, fn, opaque);
}

static inline int tbx_tokens_attempt_token_rows(tbx_tokens_t *t,
						const char *attempt, int64_t *n)
{
	return t->ops->attempt_token_rows(t, attempt, n);
}

static inline int tbx_tokens_tokens_list(tbx_tokens_t *t,
					 const tbx__filter_t *f, int64_t *total,
					 tbx__token_fn fn, void *opaque)
{
	return t->ops->tokens_list(t, f, total, fn, opaque);
}

static inline int tbx_tokens_token_rows(tbx_tokens_t *t, const char *token,
					tbx__token_fn fn, void *opaque)
{
	return t->ops->token_rows(t, token, fn, opaque);
}

static inline int tbx_tokens_token_registrations(tbx_tokens_t *t,
						 const char *token,
						 tbx__token_reg_fn fn,
						 void *opaque)
{
	return t->ops->token_registrations(t, token, fn, opaque);
}

static inline int tbx_tokens_token_match(tbx_tokens_t *t, const char *id,
					 char out[TBX_UUID_LEN + 1],
					 int *matches)
{
	return t->ops->token_match(t, id, out, matches);
}

static inline int tbx_tokens_unsubscribe(tbx_tokens_t *t, const char *topic,
					 const char *grp,
					 int64_t used_before_ms, int remove,
					 tbx__unsub_t *res)
{
	return t->ops->unsubscribe(t, topic, grp, used_before_ms, remove, res);
}
/* Token sets: TBX_ESCHEMA from a store whose schema predates them. */
#define TBX__SETS_OP(t, op, ...)                                               \
	((t)->ops->op ? (t)->ops->op((t), __VA_ARGS__) : TBX_ESCHEMA)
static inline int tbx_tokens_sets_mint(tbx_tokens_t *t, const char *send_grp,
				       const tbx__set_req_t *reqs, size_t cnt,
				       int64_t *seq, uint64_t *rows)
{
	return TBX__SETS_OP(t, sets_mint, send_grp, reqs, cnt, seq, rows);
}
static inline int tbx_tokens_sets_mint_joined(tbx_tokens_t *t,
					      const tbx__set_item_t *sets,
					      size_t cnt, int64_t seq,
					      uint64_t *rows)
{
	return TBX__SETS_OP(t, sets_mint_joined, sets, cnt, seq, rows);
}
static inline int tbx_tokens_sets_test(tbx_tokens_t *t, const char *grp,
				       const tbx__bit_ref_t *refs, size_t n,
				       tbx__bit_state_t *st, int64_t *mint_seq)
{
	return TBX__SETS_OP(t, sets_test, grp, refs, n, st, mint_seq);
}
static inline int tbx_tokens_sets_consume(tbx_tokens_t *t, const char *grp,
					  const tbx__bit_ref_t *refs, size_t n,
					  uint64_t *cleared, uint64_t *deleted)
{
	return TBX__SETS_OP(t, sets_consume, grp, refs, n, cleared, deleted);
}
static inline int tbx_tokens_sets_consume_joined(tbx_tokens_t *t,
						 const char *grp,
						 const tbx__bit_ref_t *refs,
						 size_t n, uint64_t *cleared,
						 uint64_t *deleted)
{
	return TBX__SETS_OP(t, sets_consume_joined, grp, refs, n, cleared,
			    deleted);
}
static inline int tbx_tokens_sets_confirm(tbx_tokens_t *t,
					  const char *const *attempts,
					  size_t cnt)
{
	return TBX__SETS_OP(t, sets_confirm, attempts, cnt);
}
static inline int tbx_tokens_sets_drop_attempt(tbx_tokens_t *t,
					       const char *attempt,
					       int *dropped, uint64_t *deleted)
{
	return TBX__SETS_OP(t, sets_drop_attempt, attempt, dropped, deleted);
}
static inline int tbx_tokens_sets_registrations(tbx_tokens_t *t,
						const char *send_grp,
						const tbx__reg_t *after,
						size_t limit, tbx__reg_t **out,
						size_t *cnt)
{
	return TBX__SETS_OP(t, sets_registrations, send_grp, after, limit, out,
			    cnt);
}
static inline int tbx_tokens_sets_count(tbx_tokens_t *t, const char *grp,
					int64_t *rows, int64_t *pending,
					int64_t *registrations)
{
	return TBX__SETS_OP(t, sets_count, grp, rows, pending, registrations);
}
static inline int tbx_tokens_sets_attempt_rows(tbx_tokens_t *t,
					       const char *attempt, int64_t *n)
{
	return TBX__SETS_OP(t, sets_attempt_rows, attempt, n);
}
static inline int tbx_tokens_sets_summary(tbx_tokens_t *t, tbx__grp_sum_fn fn,
					  void *opaque)
{
	return TBX__SETS_OP(t, sets_summary, fn, opaque);
}
static inline int tbx_tokens_sets_list(tbx_tokens_t *t, const tbx__filter_t *f,
				       int64_t *total, tbx__set_fn fn,
				       void *opaque)
{
	return TBX__SETS_OP(t, sets_list, f, total, fn, opaque);
}
static inline void tbx_tokens_close(tbx_tokens_t *t)
{
	if (t)
		t->ops->close(t);
}

#endif
