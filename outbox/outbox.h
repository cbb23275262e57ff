/*
 * The service store S: outbox rows, ingress offsets, dead-letter records.
 *
 * Schema (version 1; migrations in store/db.c):
 *
 *   tbx_outbox(grp, msg_id, in_topic, in_partition, in_offset, in_token,
 *              attempt, mint_seq, kind, error, created_ms,
 *              PRIMARY KEY(grp, msg_id))
 *   tbx_outbox_msg(grp, msg_id, seq, out_id, topic, type, key, payload,
 *              headers, token, PRIMARY KEY(grp, msg_id, seq),
 *              FOREIGN KEY(grp, msg_id) REFERENCES tbx_outbox ON DELETE
 * CASCADE) tbx_ingress(grp, topic, partition, next_offset, PRIMARY KEY(grp,
 * topic, partition)) tbx_dead_letters(id INTEGER PRIMARY KEY, grp, msg_id,
 * in_topic, in_partition, in_offset, dlq_topic, error, attempts, created_ms)
 *
 * Outbox row lifecycle (one row per (consumer group, incoming tbx-id)):
 *
 *        A: handler OK / REJECT          B: first attempt recorded
 *   (none) ───────────────────► PROCESSED ─────────────────────► TOKENED
 *     ▲                         attempt NULL                   attempt set,
 *     │                         tokens NULL                    every out token
 * set │            E: after C dispatched and D consumed tokens      │
 *     └─────────────────────────────────────────────────────────────┘
 *
 * Invariants (checked by tbx_outbox_row_check()):
 *  - PROCESSED: attempt is NULL and no outgoing message has a token;
 *  - TOKENED: attempt is a UUID and every outgoing message has a token and
 *    the row has a mint_seq; attempt is never changed once set (B's UPDATE
 *    is conditional on attempt IS NULL);
 *  - a row is deleted only after its outgoing messages were delivered and
 *    its incoming token consumed (E after C and D).
 */
#ifndef TBX_OUTBOX_OUTBOX_H
#define TBX_OUTBOX_OUTBOX_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "store/db.h"

typedef struct tbx_outbox tbx_outbox_t;

enum { TBX_ROW_HANDLED = 0, TBX_ROW_DEAD_LETTER = 1 };

/** One outgoing message of an outbox row.  Owned by its row. */
typedef struct tbx__outmsg {
	char id[TBX_UUID_LEN + 1];    /**< tbx-id, minted in A */
	char token[TBX_UUID_LEN + 1]; /**< "" until B */
	char *topic;
	char *type;
	void *key; /**< NULL: no key */
	size_t key_len;
	void *payload; /**< NULL: null value */
	size_t payload_len;
	void *headers; /**< extra headers, tbx__hdrs_encode() format; NULL: none
			*/
	size_t headers_len;
} tbx__outmsg_t;

/** An outbox row with its outgoing messages. */
typedef struct tbx__row {
	char msg_id[TBX_MSGID_MAX + 1];
	char in_token[TBX_UUID_LEN + 1]; /**< "" for untokened ingress */
	char in_topic[TBX_TOPIC_MAX + 1];
	int32_t in_partition;
	int64_t in_offset;
	char attempt[TBX_UUID_LEN + 1]; /**< "" until B */
	int64_t mint_seq;		/**< 0 until B */
	int kind;			/**< TBX_ROW_* */
	char *error;			/**< dead-letter reason or NULL */
	int64_t created_ms;
	tbx__outmsg_t *msgs;
	size_t msg_cnt, msg_cap;
} tbx__row_t;

/** Zeroes @p row. */
void tbx__row_init(tbx__row_t *row);
/** Frees what @p row owns and zeroes it. */
void tbx__row_clear(tbx__row_t *row);
/** Appends an outgoing message, copying every field; mints its tbx-id.
 *  @returns TBX_OK or TBX_ENOMEM. */
int tbx__row_add(tbx__row_t *row, const char *topic, const char *type,
		 const void *key, size_t key_len, const void *payload,
		 size_t payload_len, const void *headers, size_t headers_len);
/** Drops every outgoing message (the row stays). */
void tbx__row_clear_msgs(tbx__row_t *row);
/** Asserts the lifecycle invariants above; @returns 1 when they hold. */
int tbx_outbox_row_check(const tbx__row_t *row);

/** Encodes headers as [u16 name_len][name][u8 has_value][u32 len][value]…
 *  (big endian).  *out is malloc'ed (NULL when @p cnt is 0). */
int tbx__hdrs_encode(const tbx_header_t *hdrs, size_t cnt, void **out,
		     size_t *out_len);
/** Iterates an encoded blob: call with *pos = 0 until it returns 0.
 *  @returns 1 with the next header (pointers into @p blob), 0 at the end,
 *  -1 when the blob is malformed. */
int tbx__hdrs_next(const void *blob, size_t len, size_t *pos,
		   tbx_header_t *hdr);

/** Opens the store (see tbx__db_open).  *out owned by the caller. */
int tbx_outbox_open(const char *path, const tbx__db_opts_t *opts,
		    tbx_outbox_t **out, char *errstr, size_t errstr_size);
/** Closes the store and its connection.  NULL is a no-op. */
void tbx_outbox_close(tbx_outbox_t *store);
/** The connection (borrowed; handlers write business tables through it). */
sqlite3 *tbx_outbox_db(tbx_outbox_t *store);

/* Transactions: BEGIN IMMEDIATE (takes the write lock), COMMIT, ROLLBACK;
 * one savepoint level for a message ("SAVEPOINT tbx_msg"). */
int tbx_outbox_begin(tbx_outbox_t *store);
int tbx_outbox_commit(tbx_outbox_t *store);
int tbx_outbox_rollback(tbx_outbox_t *store);
int tbx_outbox_savepoint(tbx_outbox_t *store);
int tbx_outbox_release(tbx_outbox_t *store);
/** ROLLBACK TO and RELEASE: undoes the message's writes. */
int tbx_outbox_undo(tbx_outbox_t *store);

/**
 * Looks up the row (grp, msg_id).  *found = 0/1; @p attempt (may be NULL)
 * receives the attempt id or "" when the row has none.
 */
int tbx_outbox_row_find(tbx_outbox_t *store, const char *grp,
			const char *msg_id, int *found,
			char attempt[TBX_UUID_LEN + 1]);
/** Inserts @p row and its outgoing messages (inside the caller's txn). */
int tbx_outbox_row_insert(tbx_outbox_t *store, const char *grp,
			  const tbx__row_t *row);
/** Loads the row and its messages into @p row (cleared first).
 *  @returns TBX_OK or TBX_ENOENT. */
int tbx_outbox_row_load(tbx_outbox_t *store, const char *grp,
			const char *msg_id, tbx__row_t *row);
/**
 * B's record: UPDATE … SET attempt WHERE attempt IS NULL, then the tokens of
 * the messages and mint_seq, inside the caller's transaction.  *won = 1 when
 * this attempt was recorded, 0 when the row has another attempt or is gone.
 */
int tbx_outbox_row_set_attempt(tbx_outbox_t *store, const char *grp,
			       const tbx__row_t *row, int *won);
/** Deletes the row and its messages (E), inside the caller's txn. */
int tbx_outbox_row_delete(tbx_outbox_t *store, const char *grp,
			  const char *msg_id);

/** Next offset to process for untokened ingress; *next = -1 when none. */
int tbx_outbox_ingress_get(tbx_outbox_t *store, const char *grp,
			   const char *topic, int32_t partition, int64_t *next);
/** Sets it (upsert), inside the caller's txn. */
int tbx_outbox_ingress_set(tbx_outbox_t *store, const char *grp,
			   const char *topic, int32_t partition, int64_t next);

/** Records a dead-lettered message for inspection (caller's txn). */
int tbx_outbox_dead_letter_add(tbx_outbox_t *store, const char *grp,
			       const tbx__row_t *row, const char *dlq_topic,
			       int attempts);

/**
 * Counts one more dispatch of row (grp, msg_id) that failed with a
 * permanent error (its own S transaction, or the caller's).  *failures
 * receives the count after it, 0 when the row is gone.
 */
int tbx_outbox_dispatch_failed(tbx_outbox_t *store, const char *grp,
			       const char *msg_id, int *failures);
/**
 * Keeps outgoing message @p m of @p row, given up on, in tbx_undelivered
 * with its tbx-id, token and headers (caller's txn).  A second call for
 * the same message changes nothing.
 */
int tbx_outbox_undelivered_add(tbx_outbox_t *store, const char *grp,
			       const tbx__row_t *row, const tbx__outmsg_t *m,
			       const char *error, int attempts);

/**
 * Crash detection, per (group, topic, partition): the offsets an A is
 * about to process, committed before its handlers run.  If it is still
 * there at the next batch, that A never committed: the process died in it
 * (or A failed).  See consumer/protocol.c phase_guard().
 */
typedef struct tbx__inflight {
	int64_t first, last;   /**< range of the A in progress; -1: none */
	int crashes;	       /**< lone As at count_offset that died */
	int64_t suspect_until; /**< process one record at a time up to here;
				    -1: not suspect */
	int lone;	       /**< the A covers first and no other record of
				    any partition (schema 4) */
	int64_t count_offset;  /**< the record crashes and retries count
				    for; -1: none (schema 4) */
	int retries;	       /**< RETRY verdicts at count_offset */
} tbx__inflight_t;

/** *found = 0 when the partition has no row. */
int tbx_outbox_inflight_get(tbx_outbox_t *store, const char *grp,
			    const char *topic, int32_t partition,
			    tbx__inflight_t *f, int *found);
/** Upsert, inside the caller's transaction. */
int tbx_outbox_inflight_put(tbx_outbox_t *store, const char *grp,
			    const char *topic, int32_t partition,
			    const tbx__inflight_t *f);
/** Delete, inside the caller's transaction. */
int tbx_outbox_inflight_delete(tbx_outbox_t *store, const char *grp,
			       const char *topic, int32_t partition);
/** Ends the A in progress (first = last = -1, lone = 0) and keeps the
 *  suspicion and the counts, inside the caller's transaction. */
int tbx_outbox_inflight_release(tbx_outbox_t *store, const char *grp,
				const char *topic, int32_t partition);

/** A message id, for listings. */
typedef struct tbx__msgid {
	char id[TBX_MSGID_MAX + 1];
} tbx__msgid_t;

/** Ids of @p grp's rows created at or before @p created_before_ms (wall
 *  clock), oldest first, at most @p limit, into a malloc'ed array (*out,
 *  caller frees; NULL when *cnt is 0). */
int tbx_outbox_rows_older(tbx_outbox_t *store, const char *grp,
			  int64_t created_before_ms, size_t limit,
			  tbx__msgid_t **out, size_t *cnt);

/** Ids of @p grp's rows whose record lies below @p offset in @p topic
 *  [@p partition], lowest offset first, at most @p limit, into a
 *  malloc'ed array (*out, caller frees; NULL when *cnt is 0). */
int tbx_outbox_rows_below(tbx_outbox_t *store, const char *grp,
			  const char *topic, int32_t partition, int64_t offset,
			  size_t limit, tbx__msgid_t **out, size_t *cnt);
/** Marks the row as found stuck by the recovery pass at @p now_ms (wall
 *  clock) unless it is marked already (caller's transaction or none). */
int tbx_outbox_row_mark_stuck(tbx_outbox_t *store, const char *grp,
			      const char *msg_id, int64_t now_ms);

/** Counts rows pending for @p grp (NULL: all groups). */
int tbx_outbox_count(tbx_outbox_t *store, const char *grp, int64_t *rows);

/**
 * Counts one more occurrence of alarm @p name of @p grp (tbx_alarms:
 * count, first and last time, the latest @p detail), inside the caller's
 * transaction or savepoint.  `tokenbox inspect status` shows them.
 */
int tbx_outbox_alarm_add(tbx_outbox_t *store, const char *grp, const char *name,
			 const char *detail);

#endif
