/*
 * The service store S: outbox rows, ingress offsets, dead-letter records.
 *
 * Tables (their columns and every schema version: the migrations in
 * store/db.c):
 *
 *   tbx_outbox        one row per (group, incoming tbx-id) in flight,
 *                     PRIMARY KEY (grp, msg_id); its outgoing messages in
 *                     one blob, column msgs (store/msgs.h; schema 8)
 *   tbx_ingress       the next offset per (group, topic, partition) of
 *                     untokened records
 *   tbx_dead_letters  a line per record dead-lettered
 *   tbx_inflight      the offsets an A is processing, per partition, and
 *                     the counts of its crashes and retries
 *   tbx_alarms        alarms a worker raised, for `inspect status --check`
 *   tbx_undelivered   outgoing messages given up on, kept whole
 *   tbx_bindings      the token store each group's workers use: its id
 *                     and where it is (schema 9)
 *   tbx_obatch        one row per (group, batch attempt) of the batched
 *                     design, its columns in outbox/batchrow.h
 *                     (schema 12, PostgreSQL service version 4;
 *                     nothing writes it yet)
 *   tbx_cover_msg     the per-message records a batch row covers
 *                     (schema 12, PostgreSQL version 4)
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

#include "base/ids.h"
#include "outbox/batchrow.h"
#include "store/db.h"
#include "store/filter.h"
#include "tokenbox/tokenbox.h"

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
	/** The partition to produce to (RD_KAFKA_V_PARTITION), chosen before
	 *  its token set was minted (tokens.format = set: the publisher's, or
	 *  A's for a batch row, which stores it in wire); -1, as
	 *  tbx__row_grow() leaves it: librdkafka's partitioner chooses.  Not
	 *  stored in a record row. */
	int32_t part;
	/** The token set of the message's token (tbx-tset) when it has one
	 *  instead of token: its bit is tbit, of the set minted for
	 *  partition part (tbx-tbit "part:tbit").  "" for a per-message
	 *  token.  Minted by the publisher, and by B (joined: A) for a batch
	 *  row of tokfmt 2, where msgs' token field holds the set id (token
	 *  then equals tset) and wire the bit; not stored in a record
	 *  row. */
	char tset[TBX_UUID_LEN + 1];
	uint32_t tbit;
	/** The one allocation that holds topic, type, key, payload and
	 *  headers when tbx__row_add() made the message (freed alone); NULL
	 *  when each field is an allocation of its own. */
	void *block;
} tbx__outmsg_t;

/** An outbox row with its outgoing messages. */
typedef struct tbx__row {
	char msg_id[TBX_MSGID_MAX + 1];
	/** The incoming record's token: a per-message token's id, or with
	 *  in_set the id of the token set whose bit in_tbit it is; "" for
	 *  untokened ingress. */
	char in_token[TBX_UUID_LEN + 1];
	int in_set;	  /**< 1: in_token is a token set, in_tbit its bit */
	uint32_t in_tbit; /**< the record's bit in set in_token (in_set) */
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
/** Appends a zeroed message slot, part -1 (a backend loading a row fills
 *  it).
 *  @returns NULL when out of memory. */
tbx__outmsg_t *tbx__row_grow(tbx__row_t *row);
/** Drops every outgoing message (the row stays). */
void tbx__row_clear_msgs(tbx__row_t *row);
/** Encodes the outgoing messages of @p row as one value (store/msgs.h)
 *  into a malloc'ed *blob; a row without messages: *blob NULL.
 *  @returns TBX_OK, TBX_EINVAL or TBX_ENOMEM. */
int tbx__row_msgs_encode(const tbx__row_t *row, void **blob, size_t *len);
/** Appends the messages of a stored value to @p row (@p msg_id names it
 *  in the log).  @returns TBX_OK, TBX_ENOMEM, or TBX_ESTORE (logged) for
 *  a malformed value. */
int tbx__row_msgs_decode(const void *blob, size_t len, const char *msg_id,
			 tbx__row_t *row);
/** B's record of the attempt, for a backend: the stored messages
 *  (@p stored_blob) are the truth; @p row must match them one for one
 *  (same count, same ids, else TBX_ESTATE, logged), and each gets the
 *  token of its namesake.  *blob (malloc'ed) is the encoding to store. */
int tbx__row_msgs_tokened(const void *stored_blob, size_t stored_len,
			  const tbx__row_t *row, void **blob, size_t *blob_len);
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

/** What rows_find() found for one message id. */
typedef struct tbx__row_hit {
	int found;			/**< the row (grp, id) exists */
	char attempt[TBX_UUID_LEN + 1]; /**< its attempt, "" when none */
} tbx__row_hit_t;

/** A message id, for listings. */
typedef struct tbx__msgid {
	char id[TBX_MSGID_MAX + 1];
} tbx__msgid_t;

/** A dead-letter record (tbx_dead_letters), for inspection. */
typedef struct tbx__dl_rec {
	int64_t id; /**< its number */
	const char *grp, *msg_id, *in_topic, *dlq_topic;
	const char *error; /**< NULL: none */
	int64_t in_partition, in_offset, attempts, created_ms;
	int pending; /**< its dead-letter outbox row is not finished */
	/** When `inspect dead-letters replay` first sent it back to its
	 *  origin topic; -1: never. */
	int64_t replayed_ms;
} tbx__dl_rec_t;

/** An outgoing message given up on (tbx_undelivered). */
typedef struct tbx__ud_rec {
	int64_t id; /**< its number */
	const char *grp, *msg_id, *out_id, *topic, *type, *error;
	const char *token;		     /**< NULL: none */
	const void *key, *payload, *headers; /**< NULL: none */
	size_t key_len, payload_len, headers_len;
	int64_t mint_seq, attempts, created_ms;
	/** A bit of a token set instead of a token (SQLite schema 16): the
	 *  set's id, NULL for none; its bit, and the partition the set was
	 *  minted for (-1 with no set). */
	const char *tset;
	int64_t tbit, tpart;
} tbx__ud_rec_t;

/** An alarm a worker raised (tbx_outbox_alarm_add). */
typedef struct tbx__alarm {
	const char *grp, *name;
	const char *detail; /**< NULL: none */
	int64_t count, first_ms, last_ms;
} tbx__alarm_t;

/** The token store a group's workers use (tbx_outbox_binding_set). */
typedef struct tbx__binding {
	const char *grp;
	const char *tokens_id;	  /**< the token store's id */
	const char *tokens_where; /**< its path, or URL (redacted) and schema */
	int64_t used_ms;	  /**< when a worker last started with it */
} tbx__binding_t;

/** What binding_set replaced: @c found is 0 when the group had no row. */
typedef struct tbx__binding_prev {
	int found;
	char tokens_id[TBX_UUID_LEN + 1];
	char tokens_where[600];
	int64_t used_ms;
} tbx__binding_prev_t;

/** An ingress offset (tbx_outbox_ingress_set). */
typedef struct tbx__ingress {
	const char *grp, *topic;
	int64_t partition, next_offset;
} tbx__ingress_t;

/** An outbox row that carries a token (outgoing: @p seq, @p out_id,
 *  @p topic, @p type) or consumes it (incoming: @p topic, @p partition,
 *  @p offset). */
typedef struct tbx__token_use {
	const char *grp, *msg_id, *topic;
	const char *out_id, *type; /**< outgoing only */
	int64_t seq;		   /**< outgoing only */
	int64_t partition, offset; /**< incoming only */
} tbx__token_use_t;

/** A batch row of tbx_obatch (docs/batched-tokens.md, "The outbox row by
 *  the batch"): its columns, the blobs encoded (store/msgs.h,
 *  outbox/batchrow.h) and borrowed. */
typedef struct tbx__obatch {
	char row_id[TBX_UUID_LEN + 1];
	char attempt[TBX_UUID_LEN + 1]; /**< "" until B */
	int64_t mint_seq;		/**< 0 until B */
	int tokfmt;			/**< 2 sets, 1 per-message tokens */
	int64_t created_ms;
	int64_t stuck_ms; /**< -1: not marked */
	int64_t dispatch_failures;
	const void *cover;
	size_t cover_len;
	const void *msgs; /**< NULL: no message */
	size_t msgs_len;
	const void *wire;
	size_t wire_len;
	/** Inserting: NULL, or @p cover as tbx__cover_from() made it of the
	 *  entries tbx__cover_encode() wrote @p cover from (A's own row);
	 *  the store takes it for the decoded column instead of decoding
	 *  and checking @p cover again.  Loading: NULL. */
	const tbx__cover_t *cover_dec;
} tbx__obatch_t;

/** A batch row loaded, with its cover decoded and indexed (both valid
 *  during the call only). */
typedef int (*tbx__obatch_fn)(void *opaque, const tbx__obatch_t *row,
			      const tbx__cover_t *cover);

/**
 * A batch row's columns checked against each other, as every backend
 * checks a row it inserts or loads (outbox/batchrow.c): cover decodes
 * into @p c (freed by the caller, also after a failure), wire decodes
 * against it, msgs has as many messages as wire, each with a token
 * exactly when the row has an attempt, a known token format, UUID text.
 * @returns TBX_OK, TBX_ECORRUPT (@p err says why) or TBX_ENOMEM.
 */
int tbx__obatch_check(const tbx__obatch_t *row, tbx__cover_t *c, char *err,
		      size_t err_size);
/**
 * tbx__obatch_check() of a row the store inserts: its cover_dec when A
 * made it (tbx__cover_from(); the column is not decoded again), else its
 * cover decoded into @p own.  *@p cover is set to the one checked, for
 * the insert to read; free @p own (left empty in the first case) with
 * tbx__cover_free(), also after a failure.
 * @returns as tbx__obatch_check().
 */
int tbx__obatch_check_insert(const tbx__obatch_t *row, tbx__cover_t *own,
			     const tbx__cover_t **cover, char *err,
			     size_t err_size);
/**
 * B's record checked before it is written: @p attempt UUID text,
 * @p mint_seq not 0, @p wire decodes and has an entry per message of
 * @p msgs, each with a token.  @returns TBX_OK or TBX_EINVAL (@p err says
 * why).
 */
int tbx__obatch_attempt_check(const char *attempt, int64_t mint_seq,
			      const void *msgs, size_t msgs_len,
			      const void *wire, size_t wire_len, char *err,
			      size_t err_size);

typedef int (*tbx__row_fn)(void *opaque, const char *grp, const tbx__row_t *row,
			   int64_t msg_cnt);
/** A batch row of @p grp as stored, not checked (obatch_list). */
typedef int (*tbx__obatch_row_fn)(void *opaque, const char *grp,
				  const tbx__obatch_t *row);
typedef int (*tbx__dl_fn)(void *opaque, const tbx__dl_rec_t *rec);
typedef int (*tbx__ud_fn)(void *opaque, const tbx__ud_rec_t *rec);
typedef int (*tbx__alarm_fn)(void *opaque, const tbx__alarm_t *alarm);
typedef int (*tbx__binding_fn)(void *opaque, const tbx__binding_t *binding);
typedef int (*tbx__ingress_fn)(void *opaque, const tbx__ingress_t *ingress);
typedef int (*tbx__token_use_fn)(void *opaque, const tbx__token_use_t *use);

/**
 * The service store's interface: a struct of function pointers, so that a
 * server-backed store can be added beside the SQLite backend
 * (outbox/sqlite.c) without touching the protocol.  Call sites use the
 * tbx_outbox_* wrappers below.  Every call returns TBX_OK or a tbx_err_t.
 */
typedef struct tbx_outbox_ops {
	const char *name;
	/** Closes the store and its connection. */
	void (*close)(tbx_outbox_t *store);

	/* Transactions: begin takes the write lock (BEGIN IMMEDIATE);
	 * one savepoint level for a message ("SAVEPOINT tbx_msg"); undo is
	 * ROLLBACK TO and RELEASE: it undoes the message's writes. */
	int (*begin)(tbx_outbox_t *store);
	int (*commit)(tbx_outbox_t *store);
	int (*rollback)(tbx_outbox_t *store);
	int (*savepoint)(tbx_outbox_t *store);
	int (*release)(tbx_outbox_t *store);
	int (*undo)(tbx_outbox_t *store);

	/** Looks up the row (grp, msg_id).  *found = 0/1; @p attempt (may
	 *  be NULL) receives the attempt id or "" when the row has none. */
	int (*row_find)(tbx_outbox_t *store, const char *grp,
			const char *msg_id, int *found,
			char attempt[TBX_UUID_LEN + 1]);
	/** row_find for @p n message ids (any order, repeats allowed) in
	 *  one statement where the backend can: out[i] for ids[i].  Inside
	 *  the caller's transaction.  PostgreSQL: one round trip
	 *  (msg_id = ANY($2)); SQLite: the cached row_find per id. */
	int (*rows_find)(tbx_outbox_t *store, const char *grp,
			 const char *const *ids, size_t n, tbx__row_hit_t *out);
	/** Inserts the @p n rows (caller's txn) in one statement; NULL
	 *  where the backend has no use for it (SQLite: row_insert per
	 *  row costs no round trip).  TBX_EEXIST when any of them is there
	 *  already; the transaction can then only roll back.  PostgreSQL:
	 *  one INSERT ... SELECT FROM unnest(...), sent as row_insert's is
	 *  (store/pg.h, tbx__pg_defer()). */
	int (*rows_insert)(tbx_outbox_t *store, const char *grp,
			   const tbx__row_t *const *rows, size_t n);
	/** Inserts @p row and its outgoing messages (caller's txn).
	 *  TBX_EEXIST when the row (grp, msg_id) is there already and
	 *  nothing was inserted.  SQLite: at once, the transaction stays
	 *  usable (A rolls back to the record's savepoint and resumes the
	 *  committed row).  PostgreSQL: the INSERT ... ON CONFLICT DO
	 *  NOTHING goes with the transaction's next statement (store/pg.h,
	 *  tbx__pg_defer()), so TBX_EEXIST comes from a later call or the
	 *  commit, and the transaction can only roll back (A is retried
	 *  whole and finds the committed row). */
	int (*row_insert)(tbx_outbox_t *store, const char *grp,
			  const tbx__row_t *row);
	/** Loads the row and its messages into @p row (cleared first), from
	 *  one snapshot.  TBX_ENOENT when there is none. */
	int (*row_load)(tbx_outbox_t *store, const char *grp,
			const char *msg_id, tbx__row_t *row);
	/** B's record: sets the attempt only where the row has none, then
	 *  the tokens of the messages and mint_seq, inside the caller's
	 *  transaction.  *won = 1 when this attempt was recorded, 0 when the
	 *  row has another attempt or is gone. */
	int (*row_set_attempt)(tbx_outbox_t *store, const char *grp,
			       const tbx__row_t *row, int *won);
	/** Deletes the row and its messages (E), inside the caller's txn. */
	int (*row_delete)(tbx_outbox_t *store, const char *grp,
			  const char *msg_id);
	/** row_delete for @p n message ids (repeats allowed), inside the
	 *  caller's transaction; PostgreSQL: one statement. */
	int (*rows_delete)(tbx_outbox_t *store, const char *grp,
			   const char *const *ids, size_t n);

	/** Next offset to process for untokened ingress; *next = -1 when
	 *  none.  ingress_set: upsert, inside the caller's txn.  A row
	 *  below 0 (PostgreSQL's lock of a partition before its first
	 *  offset) is none in every backend: read as -1, not listed, and
	 *  serving no group (groups, ingress_list). */
	int (*ingress_get)(tbx_outbox_t *store, const char *grp,
			   const char *topic, int32_t partition, int64_t *next);
	int (*ingress_set)(tbx_outbox_t *store, const char *grp,
			   const char *topic, int32_t partition, int64_t next);

	/** Records a dead-lettered message for inspection (caller's txn). */
	int (*dead_letter_add)(tbx_outbox_t *store, const char *grp,
			       const tbx__row_t *row, const char *dlq_topic,
			       int attempts);
	/** Counts one more dispatch of row (grp, msg_id) that failed with a
	 *  permanent error (its own transaction, or the caller's).
	 *  *failures receives the count after it, 0 when the row is gone. */
	int (*dispatch_failed)(tbx_outbox_t *store, const char *grp,
			       const char *msg_id, int *failures);
	/** Keeps outgoing message @p m of @p row, given up on, whole with
	 *  its tbx-id, token and headers (caller's txn); a message with a
	 *  set bit (tset, tbit, part) keeps them instead of a token, or is
	 *  refused with TBX_ESCHEMA by a store that cannot keep them.  A
	 *  second call for the same message changes nothing. */
	int (*undelivered_add)(tbx_outbox_t *store, const char *grp,
			       const tbx__row_t *row, const tbx__outmsg_t *m,
			       const char *error, int attempts);

	/** The crash marker of (grp, topic, partition): get (*found = 0
	 *  when none), put (upsert), delete, and release (ends the A in
	 *  progress, keeps the suspicion and the counts); the writes inside
	 *  the caller's transaction.  delete keeps a row whose gen is above
	 *  0 (gen never goes back), with its marker and counts cleared: get
	 *  then finds it as G reads a partition without one (first and last
	 *  -1, no suspect range, no counts). */
	int (*inflight_get)(tbx_outbox_t *store, const char *grp,
			    const char *topic, int32_t partition,
			    tbx__inflight_t *f, int *found);
	/** inflight_get for @p n partitions at once (PostgreSQL: one
	 *  statement), (topics[i], parts[i]) into f[i] and found[i]; f[i]
	 *  is left as it was where found[i] is 0.  NULL: inflight_get for
	 *  each (tbx_outbox_inflight_get_many()). */
	int (*inflight_get_many)(tbx_outbox_t *store, const char *grp,
				 const char *const *topics,
				 const int32_t *parts, size_t n,
				 tbx__inflight_t *f, int *found);
	int (*inflight_put)(tbx_outbox_t *store, const char *grp,
			    const char *topic, int32_t partition,
			    const tbx__inflight_t *f);
	int (*inflight_delete)(tbx_outbox_t *store, const char *grp,
			       const char *topic, int32_t partition);
	int (*inflight_release)(tbx_outbox_t *store, const char *grp,
				const char *topic, int32_t partition);

	/** Ids of @p grp's rows created at or before @p created_before_ms
	 *  (wall clock), oldest first, at most @p limit, into a malloc'ed
	 *  array (*out, caller frees; NULL when *cnt is 0). */
	int (*rows_older)(tbx_outbox_t *store, const char *grp,
			  int64_t created_before_ms, size_t limit,
			  tbx__msgid_t **out, size_t *cnt);
	/** Ids of @p grp's rows whose record lies below @p offset in
	 *  @p topic [@p partition], lowest offset first, at most @p limit,
	 *  as rows_older. */
	int (*rows_below)(tbx_outbox_t *store, const char *grp,
			  const char *topic, int32_t partition, int64_t offset,
			  size_t limit, tbx__msgid_t **out, size_t *cnt);
	/** Marks the row as found stuck by the recovery pass at @p now_ms
	 *  unless it is marked already (caller's transaction or none). */
	int (*row_mark_stuck)(tbx_outbox_t *store, const char *grp,
			      const char *msg_id, int64_t now_ms);
	/** Counts rows pending for @p grp (NULL: all groups). */
	int (*count)(tbx_outbox_t *store, const char *grp, int64_t *rows);
	/** Counts one more occurrence of alarm @p name of @p grp (count,
	 *  first and last time, the latest @p detail), inside the caller's
	 *  transaction or savepoint. */
	int (*alarm_add)(tbx_outbox_t *store, const char *grp, const char *name,
			 const char *detail);
	/** Records that @p grp's workers use the token store of id
	 *  @p tokens_id at @p tokens_where, now, inside the caller's
	 *  transaction; the row it replaced into @p prev (may be NULL). */
	int (*binding_set)(tbx_outbox_t *store, const char *grp,
			   const char *tokens_id, const char *tokens_where,
			   tbx__binding_prev_t *prev);

	/*
	 * The read side and the repairs of `tokenbox inspect`.  A listing
	 * calls its function per record in the order it names; the record
	 * and its strings are borrowed for the call; a non-zero return
	 * stops the listing, which then returns TBX_OK.  *total (may be
	 * NULL) receives the records the filter takes, before its limit.
	 */
	/** One read snapshot for the reads that follow, until
	 *  read_end. */
	int (*read_begin)(tbx_outbox_t *store);
	void (*read_end)(tbx_outbox_t *store);
	/** The schema version of the store. */
	int (*schema)(tbx_outbox_t *store, int *version);
	/** The backend's text for the last failed call (NULL: none). */
	const char *(*errmsg)(tbx_outbox_t *store);
	/** Groups with rows, ingress offsets or dead letters, by name. */
	int (*groups)(tbx_outbox_t *store, tbx__str_fn fn, void *opaque);
	/** Per group with rows, by name: n = processed, tokened, created at
	 *  or before @p created_max, marked stuck; ms = the oldest. */
	int (*rows_summary)(tbx_outbox_t *store, int64_t created_max,
			    tbx__grp_sum_fn fn, void *opaque);
	/** The rows @p f takes, oldest first (then group, id), without
	 *  their messages, with the number of their messages. */
	int (*rows_list)(tbx_outbox_t *store, const tbx__filter_t *f,
			 int64_t *total, tbx__row_fn fn, void *opaque);
	/** Resolves @p id to a row's message id: @p id itself when a row
	 *  has it, else the one id starting with it.  *matches = 0, 1 (with
	 *  @p out set), or 2 for several. */
	int (*row_match)(tbx_outbox_t *store, const char *id,
			 char out[TBX_MSGID_MAX + 1], int *matches);
	/** Groups of @p f with a row of @p msg_id, by name. */
	int (*row_groups)(tbx_outbox_t *store, const char *msg_id,
			  const tbx__filter_t *f, tbx__str_fn fn, void *opaque);
	/** Rows of @p token: outgoing messages carrying it (@p incoming 0,
	 *  by group, id, seq), or rows whose record carried it (1). */
	int (*token_uses)(tbx_outbox_t *store, const char *token, int incoming,
			  tbx__token_use_fn fn, void *opaque);
	/** Per group with dead letters, by name: n = recorded, pending,
	 *  replayed (tbx_dead_letters.replayed_ms set); ms = the latest. */
	int (*dead_letters_summary)(tbx_outbox_t *store, tbx__grp_sum_fn fn,
				    void *opaque);
	/** The dead letters @p f takes, newest first. */
	int (*dead_letters_list)(tbx_outbox_t *store, const tbx__filter_t *f,
				 int64_t *total, tbx__dl_fn fn, void *opaque);
	/** The dead letters of @p f named @p id: its number when
	 *  @p by_number, else its message id (in number order). */
	int (*dead_letters_find)(tbx_outbox_t *store, const char *id,
				 int by_number, const tbx__filter_t *f,
				 tbx__dl_fn fn, void *opaque);
	/** *found = 1 when @p grp recorded a dead letter of this origin
	 *  sent to @p dlq_topic. */
	int (*dead_letter_recorded)(tbx_outbox_t *store, const char *grp,
				    const char *in_topic, int64_t partition,
				    int64_t offset, const char *dlq_topic,
				    int *found);
	/** Records that @p grp's dead letter of this origin sent to
	 *  @p dlq_topic was replayed at @p ms (a repair, one statement); a
	 *  dead letter replayed before keeps its first time. */
	int (*dead_letter_replayed)(tbx_outbox_t *store, const char *grp,
				    const char *in_topic, int64_t partition,
				    int64_t offset, const char *dlq_topic,
				    int64_t ms);
	/** Groups that sent dead letters to @p dlq_topic, by name. */
	int (*dead_letter_groups)(tbx_outbox_t *store, const char *dlq_topic,
				  tbx__str_fn fn, void *opaque);
	/** Undelivered messages: how many; the ones @p f takes, newest
	 *  first; the one numbered @p id if @p f takes it (none: @p fn is
	 *  not called); and removing it (a repair, one transaction). */
	int (*undelivered_count)(tbx_outbox_t *store, int64_t *n);
	int (*undelivered_list)(tbx_outbox_t *store, const tbx__filter_t *f,
				int64_t *total, tbx__ud_fn fn, void *opaque);
	int (*undelivered_get)(tbx_outbox_t *store, int64_t id,
			       const tbx__filter_t *f, tbx__ud_fn fn,
			       void *opaque);
	int (*undelivered_delete)(tbx_outbox_t *store, int64_t id);
	/** Alarms, by group and name. */
	int (*alarms)(tbx_outbox_t *store, tbx__alarm_fn fn, void *opaque);
	/** The token stores recorded by binding_set, by group; none in a
	 *  store of a schema without them. */
	int (*bindings)(tbx_outbox_t *store, tbx__binding_fn fn, void *opaque);
	/** Ingress offsets, by group, topic and partition. */
	int (*ingress_list)(tbx_outbox_t *store, tbx__ingress_fn fn,
			    void *opaque);
	/** Counts @p grp's rows created at or before @p created_max. */
	int (*count_older)(tbx_outbox_t *store, const char *grp,
			   int64_t created_max, int64_t *rows);
	/** The batch rows (tbx_obatch) @p f takes, oldest first (then
	 *  group, row id), with their columns as stored: not checked, so
	 *  that a row whose columns do not decode is listed too (the caller
	 *  decodes it, tbx__obatch_check()).  A row id too long for
	 *  row_id is cut and ends in "...", which no check takes for UUID
	 *  text.  TBX_ESCHEMA for a store whose schema has no batch rows
	 *  (SQLite before 12, PostgreSQL service before version 4). */
	int (*obatch_list)(tbx_outbox_t *store, const tbx__filter_t *f,
			   int64_t *total, tbx__obatch_row_fn fn, void *opaque);

	/*
	 * What differs between an embedded and a server store.
	 */
	/** A's lock on the messages it may handle: for each of @p ids
	 *  (@p n, any order, repeats allowed), a lock on (grp, id) held
	 *  until the transaction ends, taken in one key order, inside the
	 *  transaction begin() opened and before any savepoint.  SQLite:
	 *  nothing (begin() took the file's write lock).  PostgreSQL: the
	 *  advisory locks of docs/architecture.md ("PostgreSQL: locking
	 *  without a file lock"). */
	int (*lock_ids)(tbx_outbox_t *store, const char *grp,
			const char *const *ids, size_t n);
	/** @p on: the next transaction commits without waiting for its
	 *  sync (G's marker: a crash of the process keeps it, a power cut
	 *  may lose a count); off: as configured.  SQLite: synchronous=
	 *  NORMAL; PostgreSQL: synchronous_commit=off for it. */
	int (*relaxed)(tbx_outbox_t *store, int on);
	/** The connection handlers use, if the store is of @p backend
	 *  (TBX_BACKEND_*): sqlite3 * or PGconn *, borrowed; NULL
	 *  otherwise.  TBX_BACKEND_PG sends what is deferred first (what
	 *  runs on the connection comes after it); TBX_BACKEND_PG_PEEK
	 *  does not: for a look at the connection's state only. */
	void *(*native)(tbx_outbox_t *store, int backend);
	/** @p on: exec() may defer a write whose changes are not asked for
	 *  (PostgreSQL: sent with the next statement that waits for an
	 *  answer, its failure found then and failing the transaction);
	 *  off: every statement runs at once.  NULL where a statement costs
	 *  no round trip (SQLite). */
	void (*defer_writes)(tbx_outbox_t *store, int on);
	/** The statements exec() deferred since the transaction began. */
	unsigned (*deferred)(const tbx_outbox_t *store);
	/** Runs a handler's statement @p sql with @p n text parameters
	 *  ($1 … $n; NULL binds NULL) on the store's connection, inside
	 *  the transaction in progress; *changes (may be NULL) receives the
	 *  rows it changed.  @returns TBX_OK, TBX_EINVAL (a statement that
	 *  does not prepare, or more than one statement) or the mapped
	 *  error, with errmsg() saying why. */
	int (*exec)(tbx_outbox_t *store, const char *sql,
		    const char *const *params, int n, int64_t *changes);
	/** As exec(), and @p fn gets each row the statement returns: its
	 *  columns as text (NULL for SQL NULL), until @p fn returns
	 *  non-zero (the other rows are skipped; TBX_OK).  TBX_ENOMEM
	 *  when a value cannot be had as text. */
	int (*query)(tbx_outbox_t *store, const char *sql,
		     const char *const *params, int n, tbx_row_fn fn,
		     void *arg);

	/*
	 * Batch rows (tbx_obatch, tbx_cover_msg, tbx_inflight.gen;
	 * docs/batched-tokens.md).  Called by a worker with outbox.layout =
	 * batch (consumer/proto_obatch.c).
	 * NULL in a backend that does not have them: the wrappers answer
	 * TBX_ESCHEMA.
	 */
	/** A: inserts @p row (attempt "" and mint_seq 0, or both set) with
	 *  a tbx_cover_msg entry per covered record with a per-message
	 *  token, inside the transaction begin() opened.  The blobs are
	 *  checked first (wire against cover, and against msgs' count):
	 *  TBX_EINVAL, errmsg() says why.  A row id or a covered
	 *  per-message id the group has already fails the statement (the
	 *  store's error).  PostgreSQL: both INSERTs go with the
	 *  transaction's next statement (store/pg.h, tbx__pg_defer()), so
	 *  that failure, TBX_EEXIST, comes from a later call or the
	 *  commit, and the transaction can then only roll back. */
	int (*obatch_insert)(tbx_outbox_t *store, const char *grp,
			     const tbx__obatch_t *row);
	/** B: records @p attempt and @p mint_seq with the messages' tokens
	 *  (@p msgs) and indexes (@p wire) on row @p row_id, only while it
	 *  has no attempt.  *won: 1 recorded; 0 the row had one, or is
	 *  gone.  TBX_EINVAL for a message without a token, or a wire
	 *  column that does not decode or does not match msgs; its cover
	 *  entries are checked against the row's cover when it is
	 *  loaded. */
	int (*obatch_set_attempt)(tbx_outbox_t *store, const char *grp,
				  const char *row_id, const char *attempt,
				  int64_t mint_seq, const void *msgs,
				  size_t msgs_len, const void *wire,
				  size_t wire_len, int *won);
	/** E: deletes the rows @p ids (@p n) and their tbx_cover_msg
	 *  entries; *deleted (may be NULL) the rows that were there. */
	int (*obatch_delete)(tbx_outbox_t *store, const char *grp,
			     const char *const *ids, size_t n,
			     int64_t *deleted);
	/** The resume check's reload: every row of @p grp, by row id, to
	 *  @p fn until it returns non-zero (then TBX_OK).  A row whose
	 *  columns do not decode stops the listing: TBX_ECORRUPT, logged
	 *  at ERROR, errmsg() naming the row and what is wrong. */
	int (*obatch_load)(tbx_outbox_t *store, const char *grp,
			   tbx__obatch_fn fn, void *opaque);
	/** C: counts one more dispatch of batch row @p row_id that failed
	 *  with a permanent error, as dispatch_failed does for a record
	 *  row: *failures the count after it, 0 when the row is gone. */
	int (*obatch_dispatch_failed)(tbx_outbox_t *store, const char *grp,
				      const char *row_id, int *failures);
	/** Marks batch row @p row_id as found stuck by the recovery pass at
	 *  @p now_ms unless it is marked already, as row_mark_stuck. */
	int (*obatch_mark_stuck)(tbx_outbox_t *store, const char *grp,
				 const char *row_id, int64_t now_ms);
	/** The rows covering per-message records @p ids (@p n):
	 *  row_ids[i] is the row covering ids[i], or "". */
	int (*cover_msg_find)(tbx_outbox_t *store, const char *grp,
			      const char *const *ids, size_t n,
			      char (*row_ids)[TBX_UUID_LEN + 1]);
	/** A, first, inside the transaction begin() opened and before any
	 *  savepoint: the lock of each partition (@p topics[i],
	 *  @p parts[i]) of @p grp (@p n, sorted by topic in byte order,
	 *  then partition, none twice), held until the transaction ends,
	 *  and gens[i] its gen read under that lock (0 for a partition
	 *  without a row).  SQLite: plain reads (begin() took the file's
	 *  write lock, which orders every A).  PostgreSQL: a tbx_inflight
	 *  row made for each partition without one (a cleared marker, gen
	 *  0; INSERT … ON CONFLICT DO NOTHING, sent with the next
	 *  statement), then every row locked FOR UPDATE and its gen read by
	 *  one statement, in (topic, partition) order, so that two A's of
	 *  one partition are ordered and A's of different partitions never
	 *  wait for each other (docs/batched-tokens.md, "PostgreSQL without
	 *  serialising workers").  @returns TBX_OK, TBX_EINVAL (not sorted),
	 *  or the store's error (TBX_BUSY: the rows kept being deleted under
	 *  it, or lock_timeout). */
	int (*gens_lock)(tbx_outbox_t *store, const char *grp,
			 const char *const *topics, const int32_t *parts,
			 size_t n, int64_t *gens);
	/** gens[i]: tbx_inflight.gen of (@p grp, @p topic, @p parts[i]); 0
	 *  for a partition without a row. */
	int (*gens_get)(tbx_outbox_t *store, const char *grp, const char *topic,
			const int32_t *parts, size_t n, int64_t *gens);
	/** A, at commit: adds 1 to gen of each of @p parts (a row with a
	 *  cleared marker made for a partition without one); gens[i] (may
	 *  be NULL) the new value (a partition named twice: 1 more the
	 *  second time).  Added to the value the row holds when the
	 *  statement finds it, so gen never goes down and concurrent
	 *  bumps all count.  PostgreSQL: one statement, the partitions
	 *  locked in ascending order. */
	int (*gens_bump)(tbx_outbox_t *store, const char *grp,
			 const char *topic, const int32_t *parts, size_t n,
			 int64_t *gens);
} tbx_outbox_ops_t;

/** The first versions of the service store with batch rows (tbx_obatch,
 *  tbx_cover_msg, tbx_inflight.gen): SQLite schema 12, PostgreSQL
 *  service version 4.  A worker with outbox.layout = batch refuses a
 *  store below them. */
#define TBX_OUTBOX_OBATCH_SQLITE 12
#define TBX_OUTBOX_OBATCH_PG	 4

/** The backends, for native(). */
enum { TBX_BACKEND_SQLITE = 1, TBX_BACKEND_PG = 2, TBX_BACKEND_PG_PEEK = 3 };

/** Backends embed this first. */
struct tbx_outbox {
	const tbx_outbox_ops_t *ops;
};

/** Opens the SQLite backend on @p path (see tbx__db_open).  *out owned by
 *  the caller. */
int tbx_outbox_sqlite_open(const char *path, const tbx__db_opts_t *opts,
			   tbx_outbox_t **out, char *errstr,
			   size_t errstr_size);
/**
 * Opens the PostgreSQL backend: connects to @p conninfo (a libpq URL or
 * key=value string), creates the schema @p schema and the service store's
 * tables in it, or migrates them forward, in one transaction under a lock
 * that serialises concurrent openers.  opts->readonly opens without
 * creating or migrating (TBX_ENOENT when the tables are not there);
 * opts->synchronous_full and busy_timeout_ms map to synchronous_commit
 * and lock_timeout.  *out owned by the caller.
 */
int tbx_outbox_pg_open(const char *conninfo, const char *schema,
		       const tbx__db_opts_t *opts, tbx_outbox_t **out,
		       char *errstr, size_t errstr_size);
/** Opens the service store at @p path: the SQLite backend. */
static inline int tbx_outbox_open(const char *path, const tbx__db_opts_t *opts,
				  tbx_outbox_t **out, char *errstr,
				  size_t errstr_size)
{
	return tbx_outbox_sqlite_open(path, opts, out, errstr, errstr_size);
}
/**
 * Backend-specific: the SQLite connection of a store of the SQLite
 * backend (borrowed), NULL for any other.  Handlers write their business
 * tables through it (tbx_ctx_db), the handler guard watches it, and a
 * token store in the same file shares it (the joined path).
 */
sqlite3 *tbx_outbox_db(tbx_outbox_t *store);
struct tbx__pg;
/** Backend-specific: the connection of a store of the PostgreSQL backend
 *  (borrowed), NULL for any other; a token store in the same database
 *  shares it (tbx_tokens_pg_open). */
struct tbx__pg *tbx_outbox_pg(tbx_outbox_t *store);

/* Thin wrappers so call sites read as verbs. */

static inline void tbx_outbox_close(tbx_outbox_t *store)
{
	if (store)
		store->ops->close(store);
}

static inline int tbx_outbox_begin(tbx_outbox_t *store)
{
	return store->ops->begin(store);
}

static inline int tbx_outbox_commit(tbx_outbox_t *store)
{
	return store->ops->commit(store);
}

static inline int tbx_outbox_rollback(tbx_outbox_t *store)
{
	return store->ops->rollback(store);
}

static inline int tbx_outbox_savepoint(tbx_outbox_t *store)
{
	return store->ops->savepoint(store);
}

static inline int tbx_outbox_release(tbx_outbox_t *store)
{
	return store->ops->release(store);
}

static inline int tbx_outbox_undo(tbx_outbox_t *store)
{
	return store->ops->undo(store);
}

static inline int tbx_outbox_row_find(tbx_outbox_t *store, const char *grp,
				      const char *msg_id, int *found,
				      char attempt[TBX_UUID_LEN + 1])
{
	return store->ops->row_find(store, grp, msg_id, found, attempt);
}

static inline int tbx_outbox_rows_find(tbx_outbox_t *store, const char *grp,
				       const char *const *ids, size_t n,
				       tbx__row_hit_t *out)
{
	return store->ops->rows_find(store, grp, ids, n, out);
}

/** 1 when the backend inserts many rows in one statement (rows_insert). */
static inline int tbx_outbox_batches_rows(const tbx_outbox_t *store)
{
	return store->ops->rows_insert != NULL;
}
static inline int tbx_outbox_rows_insert(tbx_outbox_t *store, const char *grp,
					 const tbx__row_t *const *rows,
					 size_t n)
{
	return store->ops->rows_insert(store, grp, rows, n);
}

static inline int tbx_outbox_row_insert(tbx_outbox_t *store, const char *grp,
					const tbx__row_t *row)
{
	return store->ops->row_insert(store, grp, row);
}

static inline int tbx_outbox_row_load(tbx_outbox_t *store, const char *grp,
				      const char *msg_id, tbx__row_t *row)
{
	return store->ops->row_load(store, grp, msg_id, row);
}

static inline int tbx_outbox_row_set_attempt(tbx_outbox_t *store,
					     const char *grp,
					     const tbx__row_t *row, int *won)
{
	return store->ops->row_set_attempt(store, grp, row, won);
}

static inline int tbx_outbox_row_delete(tbx_outbox_t *store, const char *grp,
					const char *msg_id)
{
	return store->ops->row_delete(store, grp, msg_id);
}

static inline int tbx_outbox_rows_delete(tbx_outbox_t *store, const char *grp,
					 const char *const *ids, size_t n)
{
	return store->ops->rows_delete(store, grp, ids, n);
}

static inline int tbx_outbox_ingress_get(tbx_outbox_t *store, const char *grp,
					 const char *topic, int32_t partition,
					 int64_t *next)
{
	return store->ops->ingress_get(store, grp, topic, partition, next);
}

static inline int tbx_outbox_ingress_set(tbx_outbox_t *store, const char *grp,
					 const char *topic, int32_t partition,
					 int64_t next)
{
	return store->ops->ingress_set(store, grp, topic, partition, next);
}

static inline int tbx_outbox_dead_letter_add(tbx_outbox_t *store,
					     const char *grp,
					     const tbx__row_t *row,
					     const char *dlq_topic,
					     int attempts)
{
	return store->ops->dead_letter_add(store, grp, row, dlq_topic,
					   attempts);
}

static inline int tbx_outbox_dispatch_failed(tbx_outbox_t *store,
					     const char *grp,
					     const char *msg_id, int *failures)
{
	return store->ops->dispatch_failed(store, grp, msg_id, failures);
}

static inline int tbx_outbox_undelivered_add(tbx_outbox_t *store,
					     const char *grp,
					     const tbx__row_t *row,
					     const tbx__outmsg_t *m,
					     const char *error, int attempts)
{
	return store->ops->undelivered_add(store, grp, row, m, error, attempts);
}

static inline int tbx_outbox_inflight_get(tbx_outbox_t *store, const char *grp,
					  const char *topic, int32_t partition,
					  tbx__inflight_t *f, int *found)
{
	return store->ops->inflight_get(store, grp, topic, partition, f, found);
}

static inline int tbx_outbox_inflight_get_many(tbx_outbox_t *store,
					       const char *grp,
					       const char *const *topics,
					       const int32_t *parts, size_t n,
					       tbx__inflight_t *f, int *found)
{
	int err = TBX_OK;

	if (store->ops->inflight_get_many)
		return store->ops->inflight_get_many(store, grp, topics, parts,
						     n, f, found);
	for (size_t i = 0; i < n && !err; i++)
		err = store->ops->inflight_get(store, grp, topics[i], parts[i],
					       &f[i], &found[i]);
	return err;
}

static inline int tbx_outbox_inflight_put(tbx_outbox_t *store, const char *grp,
					  const char *topic, int32_t partition,
					  const tbx__inflight_t *f)
{
	return store->ops->inflight_put(store, grp, topic, partition, f);
}

static inline int tbx_outbox_inflight_delete(tbx_outbox_t *store,
					     const char *grp, const char *topic,
					     int32_t partition)
{
	return store->ops->inflight_delete(store, grp, topic, partition);
}

static inline int tbx_outbox_inflight_release(tbx_outbox_t *store,
					      const char *grp,
					      const char *topic,
					      int32_t partition)
{
	return store->ops->inflight_release(store, grp, topic, partition);
}

static inline int tbx_outbox_rows_older(tbx_outbox_t *store, const char *grp,
					int64_t created_before_ms, size_t limit,
					tbx__msgid_t **out, size_t *cnt)
{
	return store->ops->rows_older(store, grp, created_before_ms, limit, out,
				      cnt);
}

static inline int tbx_outbox_rows_below(tbx_outbox_t *store, const char *grp,
					const char *topic, int32_t partition,
					int64_t offset, size_t limit,
					tbx__msgid_t **out, size_t *cnt)
{
	return store->ops->rows_below(store, grp, topic, partition, offset,
				      limit, out, cnt);
}

static inline int tbx_outbox_row_mark_stuck(tbx_outbox_t *store,
					    const char *grp, const char *msg_id,
					    int64_t now_ms)
{
	return store->ops->row_mark_stuck(store, grp, msg_id, now_ms);
}

static inline int tbx_outbox_count(tbx_outbox_t *store, const char *grp,
				   int64_t *rows)
{
	return store->ops->count(store, grp, rows);
}

static inline int tbx_outbox_alarm_add(tbx_outbox_t *store, const char *grp,
				       const char *name, const char *detail)
{
	return store->ops->alarm_add(store, grp, name, detail);
}
static inline int tbx_outbox_binding_set(tbx_outbox_t *store, const char *grp,
					 const char *tokens_id,
					 const char *tokens_where,
					 tbx__binding_prev_t *prev)
{
	return store->ops->binding_set(store, grp, tokens_id, tokens_where,
				       prev);
}

static inline int tbx_outbox_read_begin(tbx_outbox_t *store)
{
	return store->ops->read_begin(store);
}

static inline void tbx_outbox_read_end(tbx_outbox_t *store)
{
	store->ops->read_end(store);
}

static inline int tbx_outbox_schema(tbx_outbox_t *store, int *version)
{
	return store->ops->schema(store, version);
}

static inline const char *tbx_outbox_errmsg(tbx_outbox_t *store)
{
	return store->ops->errmsg(store);
}

static inline int tbx_outbox_groups(tbx_outbox_t *store, tbx__str_fn fn,
				    void *opaque)
{
	return store->ops->groups(store, fn, opaque);
}

static inline int tbx_outbox_rows_summary(tbx_outbox_t *store,
					  int64_t created_max,
					  tbx__grp_sum_fn fn, void *opaque)
{
	return store->ops->rows_summary(store, created_max, fn, opaque);
}

static inline int tbx_outbox_rows_list(tbx_outbox_t *store,
				       const tbx__filter_t *f, int64_t *total,
				       tbx__row_fn fn, void *opaque)
{
	return store->ops->rows_list(store, f, total, fn, opaque);
}

static inline int tbx_outbox_row_match(tbx_outbox_t *store, const char *id,
				       char out[TBX_MSGID_MAX + 1],
				       int *matches)
{
	return store->ops->row_match(store, id, out, matches);
}

static inline int tbx_outbox_row_groups(tbx_outbox_t *store, const char *msg_id,
					const tbx__filter_t *f, tbx__str_fn fn,
					void *opaque)
{
	return store->ops->row_groups(store, msg_id, f, fn, opaque);
}

static inline int tbx_outbox_token_uses(tbx_outbox_t *store, const char *token,
					int incoming, tbx__token_use_fn fn,
					void *opaque)
{
	return store->ops->token_uses(store, token, incoming, fn, opaque);
}

static inline int tbx_outbox_dead_letters_summary(tbx_outbox_t *store,
						  tbx__grp_sum_fn fn,
						  void *opaque)
{
	return store->ops->dead_letters_summary(store, fn, opaque);
}

static inline int tbx_outbox_dead_letters_list(tbx_outbox_t *store,
					       const tbx__filter_t *f,
					       int64_t *total, tbx__dl_fn fn,
					       void *opaque)
{
	return store->ops->dead_letters_list(store, f, total, fn, opaque);
}

static inline int tbx_outbox_dead_letters_find(tbx_outbox_t *store,
					       const char *id, int by_number,
					       const tbx__filter_t *f,
					       tbx__dl_fn fn, void *opaque)
{
	return store->ops->dead_letters_find(store, id, by_number, f, fn,
					     opaque);
}

static inline int tbx_outbox_dead_letter_recorded(
    tbx_outbox_t *store, const char *grp, const char *in_topic,
    int64_t partition, int64_t offset, const char *dlq_topic, int *found)
{
	return store->ops->dead_letter_recorded(store, grp, in_topic, partition,
						offset, dlq_topic, found);
}

static inline int tbx_outbox_dead_letter_replayed(
    tbx_outbox_t *store, const char *grp, const char *in_topic,
    int64_t partition, int64_t offset, const char *dlq_topic, int64_t ms)
{
	return store->ops->dead_letter_replayed(store, grp, in_topic, partition,
						offset, dlq_topic, ms);
}

static inline int tbx_outbox_dead_letter_groups(tbx_outbox_t *store,
						const char *dlq_topic,
						tbx__str_fn fn, void *opaque)
{
	return store->ops->dead_letter_groups(store, dlq_topic, fn, opaque);
}

static inline int tbx_outbox_undelivered_count(tbx_outbox_t *store, int64_t *n)
{
	return store->ops->undelivered_count(store, n);
}

static inline int tbx_outbox_undelivered_list(tbx_outbox_t *store,
					      const tbx__filter_t *f,
					      int64_t *total, tbx__ud_fn fn,
					      void *opaque)
{
	return store->ops->undelivered_list(store, f, total, fn, opaque);
}

static inline int tbx_outbox_undelivered_get(tbx_outbox_t *store, int64_t id,
					     const tbx__filter_t *f,
					     tbx__ud_fn fn, void *opaque)
{
	return store->ops->undelivered_get(store, id, f, fn, opaque);
}

static inline int tbx_outbox_undelivered_delete(tbx_outbox_t *store, int64_t id)
{
	return store->ops->undelivered_delete(store, id);
}

static inline int tbx_outbox_alarms(tbx_outbox_t *store, tbx__alarm_fn fn,
				    void *opaque)
{
	return store->ops->alarms(store, fn, opaque);
}
static inline int tbx_outbox_bindings(tbx_outbox_t *store, tbx__binding_fn fn,
				      void *opaque)
{
	return store->ops->bindings(store, fn, opaque);
}

static inline int tbx_outbox_ingress_list(tbx_outbox_t *store,
					  tbx__ingress_fn fn, void *opaque)
{
	return store->ops->ingress_list(store, fn, opaque);
}

static inline int tbx_outbox_count_older(tbx_outbox_t *store, const char *grp,
					 int64_t created_max, int64_t *rows)
{
	return store->ops->count_older(store, grp, created_max, rows);
}

/* What differs between an embedded and a server store (see the ops). */

static inline int tbx_outbox_lock_ids(tbx_outbox_t *store, const char *grp,
				      const char *const *ids, size_t n)
{
	return store->ops->lock_ids(store, grp, ids, n);
}

static inline int tbx_outbox_relaxed(tbx_outbox_t *store, int on)
{
	return store->ops->relaxed(store, on);
}

static inline void *tbx_outbox_native(tbx_outbox_t *store, int backend)
{
	return store->ops->native(store, backend);
}

/** Asks exec() to defer writes (@p on) or not; @returns 1 when the
 *  backend can. */
static inline int tbx_outbox_defer_writes(tbx_outbox_t *store, int on)
{
	if (!store->ops->defer_writes)
		return 0;
	store->ops->defer_writes(store, on);
	return 1;
}

static inline unsigned tbx_outbox_deferred(const tbx_outbox_t *store)
{
	return store->ops->deferred ? store->ops->deferred(store) : 0;
}

static inline int tbx_outbox_exec(tbx_outbox_t *store, const char *sql,
				  const char *const *params, int n,
				  int64_t *changes)
{
	return store->ops->exec(store, sql, params, n, changes);
}

static inline int tbx_outbox_query(tbx_outbox_t *store, const char *sql,
				   const char *const *params, int n,
				   tbx_row_fn fn, void *arg)
{
	return store->ops->query(store, sql, params, n, fn, arg);
}

/* Batch rows: TBX_ESCHEMA where the backend has none yet. */
#define TBX__OBATCH_OP(s, op, ...)                                             \
	((s)->ops->op ? (s)->ops->op((s), __VA_ARGS__) : TBX_ESCHEMA)

static inline int tbx_outbox_obatch_list(tbx_outbox_t *store,
					 const tbx__filter_t *f, int64_t *total,
					 tbx__obatch_row_fn fn, void *opaque)
{
	return TBX__OBATCH_OP(store, obatch_list, f, total, fn, opaque);
}

static inline int tbx_outbox_obatch_insert(tbx_outbox_t *store, const char *grp,
					   const tbx__obatch_t *row)
{
	return TBX__OBATCH_OP(store, obatch_insert, grp, row);
}

static inline int tbx_outbox_obatch_set_attempt(
    tbx_outbox_t *store, const char *grp, const char *row_id,
    const char *attempt, int64_t mint_seq, const void *msgs, size_t msgs_len,
    const void *wire, size_t wire_len, int *won)
{
	return TBX__OBATCH_OP(store, obatch_set_attempt, grp, row_id, attempt,
			      mint_seq, msgs, msgs_len, wire, wire_len, won);
}

static inline int tbx_outbox_obatch_delete(tbx_outbox_t *store, const char *grp,
					   const char *const *ids, size_t n,
					   int64_t *deleted)
{
	return TBX__OBATCH_OP(store, obatch_delete, grp, ids, n, deleted);
}

static inline int tbx_outbox_obatch_load(tbx_outbox_t *store, const char *grp,
					 tbx__obatch_fn fn, void *opaque)
{
	return TBX__OBATCH_OP(store, obatch_load, grp, fn, opaque);
}

static inline int tbx_outbox_obatch_dispatch_failed(tbx_outbox_t *store,
						    const char *grp,
						    const char *row_id,
						    int *failures)
{
	*failures = 0;
	return TBX__OBATCH_OP(store, obatch_dispatch_failed, grp, row_id,
			      failures);
}

static inline int tbx_outbox_obatch_mark_stuck(tbx_outbox_t *store,
					       const char *grp,
					       const char *row_id,
					       int64_t now_ms)
{
	return TBX__OBATCH_OP(store, obatch_mark_stuck, grp, row_id, now_ms);
}

static inline int tbx_outbox_cover_msg_find(tbx_outbox_t *store,
					    const char *grp,
					    const char *const *ids, size_t n,
					    char (*row_ids)[TBX_UUID_LEN + 1])
{
	return TBX__OBATCH_OP(store, cover_msg_find, grp, ids, n, row_ids);
}

static inline int tbx_outbox_gens_lock(tbx_outbox_t *store, const char *grp,
				       const char *const *topics,
				       const int32_t *parts, size_t n,
				       int64_t *gens)
{
	return TBX__OBATCH_OP(store, gens_lock, grp, topics, parts, n, gens);
}

static inline int tbx_outbox_gens_get(tbx_outbox_t *store, const char *grp,
				      const char *topic, const int32_t *parts,
				      size_t n, int64_t *gens)
{
	return TBX__OBATCH_OP(store, gens_get, grp, topic, parts, n, gens);
}

static inline int tbx_outbox_gens_bump(tbx_outbox_t *store, const char *grp,
				       const char *topic, const int32_t *parts,
				       size_t n, int64_t *gens)
{
	return TBX__OBATCH_OP(store, gens_bump, grp, topic, parts, n, gens);
}

#endif
