/*
 * tokenbox — exactly-once message handling for Kafka consumer groups.
 *
 * This is the one public header: what is not declared here is not API.
 *
 * A worker consumes Kafka topics as a member of one consumer group and runs
 * the handler registered for each message's topic and type.  A handler writes
 * business tables through the service database connection it is given and
 * queues outgoing messages; both commit in one transaction of the service store
 * (SQLite or PostgreSQL) together with the outbox row.  Token-based
 * deduplication (see docs/architecture.md) makes every message take effect
 * exactly once per consumer group, whatever the broker redelivers, upstream
 * re-sends or the process crashes.
 *
 * Conventions
 *  - Functions that can fail return an int: TBX_OK (0) or a tbx_err_t code.
 *    Constructors return NULL on failure and write a reason into errstr.
 *  - `_destroy(NULL)` is a no-op.
 *  - Ownership is stated on every function.  Strings passed in are copied
 *    unless said otherwise; pointers returned by getters are borrowed and
 *    stay valid for the lifetime stated.
 *  - Threads: a handle is used by one thread at a time, except
 *    tbx_worker_stop(), which any thread or a signal handler may call.
 */
#ifndef TOKENBOX_TOKENBOX_H
#define TOKENBOX_TOKENBOX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TBX_VERSION_MAJOR 0
#define TBX_VERSION_MINOR 3
#define TBX_VERSION_PATCH 1
#define TBX_VERSION_STR	  "0.3.1"

/** Version of the plugin ABI (tbx_plugin_init). Bumped on any
 *  incompatible change to this header. */
#define TBX_PLUGIN_ABI_VERSION 3

/** @returns the library's version string, e.g. "0.3.1". */
const char *tbx_version(void);

/*
 * Error codes.
 *
 * Every function that can fail returns TBX_OK (0) or one of these codes,
 * always positive; a count or a found flag goes through an out-parameter.
 *
 * XX(NAME, value, retriable, "message").  The value is ABI: a code keeps its
 * number, and the number of a code removed is not given to another (16-18
 * were HEADER, PLUGIN and STOPPED, which nothing returned).  Retriable
 * errors are transient (a lock held too long, a broker away, a statement
 * that failed and was rolled back); retrying the same call later may
 * succeed, and the worker retries its batch after a backoff.  Fatal ones
 * need a change of input, configuration or environment; the worker stops
 * on them.  This column is the only retry policy.
 */
/* clang-format off */
#define TBX_ERRNO_MAP(XX)                                                        \
	XX(OK,        0, 0, "success")                                           \
	XX(INVAL,     1, 0, "invalid argument")                                  \
	XX(NOMEM,     2, 0, "out of memory")                                     \
	XX(CONF,      3, 0, "invalid configuration")                             \
	XX(STATE,     4, 0, "call not allowed in this state")                    \
	XX(EXIST,     5, 0, "already exists")                                    \
	XX(NOENT,     6, 0, "not found")                                         \
	XX(IO,        7, 1, "I/O error")                                         \
	XX(BUSY,      8, 1, "store locked by another process past busy_timeout") \
	XX(STORE,     9, 1, "store error")                                       \
	XX(NOTDB,    10, 0, "not a tokenbox database")                           \
	XX(SCHEMA,   11, 0, "store schema is newer than this tokenbox")          \
	XX(CORRUPT,  12, 0, "store file is corrupt")                             \
	XX(KAFKA,    13, 1, "Kafka client error")                                \
	XX(DELIVERY, 14, 1, "message delivery failed")                           \
	XX(TIMEOUT,  15, 1, "timed out")                                         \
	XX(MISMATCH, 19, 0, "record minted in another token store")              \
	XX(FATAL,    20, 0, "fatal Kafka client error: restart the process")
/* clang-format on */

typedef enum tbx_err {
#define TBX__ERR_ENUM(name, value, retriable, msg) TBX_E##name = value,
	TBX_ERRNO_MAP(TBX__ERR_ENUM)
#undef TBX__ERR_ENUM
	/** One past the largest code; a number in between without a name
	 *  is unknown. */
	TBX__ERR_END
} tbx_err_t;

#define TBX_OK TBX_EOK

/** @returns the code's name without prefix ("BUSY"), or "UNKNOWN" for a
 *  number that is no code (a negative one included).  Static. */
const char *tbx_err_name(int err);
/** @returns a human description of the code ("unknown error" for a number
 *  that is no code).  Static storage. */
const char *tbx_strerror(int err);
/** @returns 1 if retrying the failed call later may succeed, else 0 (also
 *  for a number that is no code). */
int tbx_err_is_retriable(int err);

/*
 * Configuration.
 *
 * String key/value pairs validated as they are set against one property
 * table (docs/configuration.md is generated from it).  Keys starting with
 * "kafka." go to librdkafka with the prefix removed, for both the consumer
 * and the producer; "kafka.consumer." and "kafka.producer." reach only one.
 */
typedef struct tbx_conf tbx_conf_t;

/** @returns a configuration holding the defaults, or NULL when out of
 *  memory.  The caller owns it. */
tbx_conf_t *tbx_conf_new(void);
/** Frees @p conf.  NULL is a no-op. */
void tbx_conf_destroy(tbx_conf_t *conf);
/** @returns a deep copy owned by the caller, or NULL when out of memory. */
tbx_conf_t *tbx_conf_dup(const tbx_conf_t *conf);
/**
 * Sets @p name to @p value after checking the value's type and range.
 * On failure the configuration is unchanged and @p errstr (if not NULL)
 * names the key, the value and why it was refused.
 * @returns TBX_OK, TBX_ECONF (bad value or unknown key) or TBX_ENOMEM.
 */
int tbx_conf_set(tbx_conf_t *conf, const char *name, const char *value,
		 char *errstr, size_t errstr_size);
/**
 * @returns the current value of @p name (the default when unset), or NULL
 * for an unknown key or an unset "kafka." key.  Borrowed: valid until the
 * next tbx_conf_set() of that key or tbx_conf_destroy().
 */
const char *tbx_conf_get(const tbx_conf_t *conf, const char *name);

/*
 * Incoming messages, as a handler sees them.  Every pointer returned is
 * borrowed and valid only during the handler call.
 */
typedef struct tbx_msg tbx_msg_t;

const char *tbx_msg_topic(const tbx_msg_t *msg);
int32_t tbx_msg_partition(const tbx_msg_t *msg);
int64_t tbx_msg_offset(const tbx_msg_t *msg);
/** Kafka key; NULL with *len = 0 when the record has none. */
const void *tbx_msg_key(const tbx_msg_t *msg, size_t *len);
/** Payload; NULL with *len = 0 for a null value. */
const void *tbx_msg_payload(const tbx_msg_t *msg, size_t *len);
/** tbx-type, or NULL when the record carries none. */
const char *tbx_msg_type(const tbx_msg_t *msg);
/** tbx-id (for untokened ingress: a stable id derived from the offset). */
const char *tbx_msg_id(const tbx_msg_t *msg);
/** tbx-cause, or NULL. */
const char *tbx_msg_cause(const tbx_msg_t *msg);
/** Which attempt this is for the message in this worker, from 1. */
int tbx_msg_attempt(const tbx_msg_t *msg);
/**
 * The W3C traceparent of the worker's process span of this record
 * (version 00, 55 characters), for a handler to start child spans with
 * an OpenTelemetry SDK or to put in an SQL comment; valid during the
 * handler call.  NULL when tracing is off or the record is not sampled
 * (docs/tracing.md).
 */
const char *tbx_msg_traceparent(const tbx_msg_t *msg);
/**
 * Finds the last header called @p name.
 * @returns TBX_OK with *value and *len set (value may be NULL for a null
 * header), or TBX_ENOENT.
 */
int tbx_msg_header(const tbx_msg_t *msg, const char *name, const void **value,
		   size_t *len);

/*
 * Handlers.
 */
typedef enum tbx_verdict {
	/** Commit the handler's writes and its queued messages. */
	TBX_VERDICT_OK = 0,
	/** Roll back; retry this message later (backoff); its partition
	 *  waits, other partitions go on.  After retry.max attempts the
	 *  message is dead-lettered. */
	TBX_VERDICT_RETRY = 1,
	/** Roll back; send the original message to the dead-letter topic. */
	TBX_VERDICT_REJECT = 2
} tbx_verdict_t;

typedef struct tbx_ctx tbx_ctx_t;

struct sqlite3;
/**
 * @returns the service database connection of an SQLite service store
 * (store.path), inside the savepoint that holds this message's effects;
 * NULL when the service store is on PostgreSQL (tbx_ctx_pg()).  Borrowed,
 * valid during the handler call.
 * The handler must not BEGIN, COMMIT, ROLLBACK or RELEASE on it; it may use
 * nested SAVEPOINTs of its own and must release them before returning.
 * While the handler runs, the connection refuses (SQLITE_AUTH) BEGIN,
 * COMMIT, ROLLBACK, savepoints named tbx_*, ATTACH, DETACH and pragmas that
 * change durability or journaling (docs/handlers.md).
 */
struct sqlite3 *tbx_ctx_db(tbx_ctx_t *ctx);

struct pg_conn; /* libpq's PGconn */
/**
 * @returns the libpq connection of a PostgreSQL service store
 * (store.url), inside the transaction and the savepoint that hold this
 * message's effects; NULL when the service store is an SQLite file
 * (tbx_ctx_db()).  Borrowed, valid during the handler call; a handler
 * that includes <libpq-fe.h> uses it as a PGconn *.
 * The same rules as for tbx_ctx_db(): no BEGIN, COMMIT, ROLLBACK, END,
 * PREPARE TRANSACTION, savepoints named tbx_*, nor settings of the
 * transaction.  libpq cannot refuse them beforehand: after every handler
 * call the worker checks that the transaction is still open and the
 * message's savepoint still there.  A handler that ended the transaction
 * stops the worker (tbx_worker_poll() returns TBX_ESTATE): what the
 * batch's earlier records did may have committed with it
 * (docs/handlers.md).  A statement that fails aborts the transaction up
 * to the message's savepoint: the message is then retried, whatever the
 * handler returns.
 */
struct pg_conn *tbx_ctx_pg(tbx_ctx_t *ctx);

/**
 * Runs one SQL statement on the service store's connection, inside this
 * message's savepoint, on either backend: the portable way to write
 * business tables.  @p sql is one statement (no ';'-separated second
 * one) whose parameters are $1 … $n, each used; @p params holds @p n
 * texts (a NULL entry binds NULL; PostgreSQL converts text to the
 * column's type, SQLite stores it with the column's affinity).  Rows a
 * query returns are ignored.  @p changes (may be NULL) receives the rows
 * an INSERT, UPDATE or DELETE changed (other statements: not
 * meaningful).
 * On PostgreSQL, an INSERT, UPDATE, DELETE or MERGE with @p changes NULL
 * is queued and sent with the next statement that waits for an answer:
 * TBX_OK means queued.  If it fails there, the batch's transaction is
 * rolled back and the batch handled again at once with every statement
 * run as it is called, so that the failure is returned by the call that
 * made it; the handler may be called twice for a record.  Pass
 * @p changes to run a write at once.
 * Statements that would end or escape the transaction are refused before
 * they reach the database, with TBX_EINVAL (counted in handler_refused,
 * logged at ERROR): BEGIN, START, COMMIT, END, ROLLBACK (but ROLLBACK TO
 * a savepoint of the handler's own), ABORT, savepoints named tbx_*,
 * PREPARE TRANSACTION, COMMIT/ROLLBACK PREPARED, DEALLOCATE, DISCARD, and
 * SET/RESET of the settings tokenbox's transaction relies on.
 * @returns TBX_OK; TBX_EINVAL (refused, more than one statement, a
 * syntax error; on SQLite also a statement that does not prepare or a
 * parameter other than $1 … $n); TBX_ESTATE outside a handler call; or
 * the store's error (TBX_EBUSY, TBX_ESTORE, …), logged at WARN with the
 * database's message.  Each
 * failure also becomes the message's error reason (tbx_ctx_set_error())
 * unless the handler set one.
 */
int tbx_ctx_exec(tbx_ctx_t *ctx, const char *sql, const char *const *params,
		 int n, int64_t *changes);

/**
 * Called by tbx_ctx_query() once per row, in the order the database
 * returns them: @p cols holds the row's @p ncols columns as text, NULL
 * for SQL NULL.  The texts are borrowed until fn returns; copy what you
 * keep.  @returns 0 to go on, non-zero to stop: the rows left are
 * skipped and tbx_ctx_query() returns TBX_OK.
 */
typedef int (*tbx_row_fn)(void *arg, int ncols, const char *const *cols);

/**
 * Runs one SQL statement as tbx_ctx_exec() does -- the same connection,
 * savepoint, parameters ($1 … $n, text, NULL binds NULL), refusals,
 * errors and error reason -- and hands the rows it returns to @p fn
 * (not NULL) with @p arg: a SELECT, or an INSERT/UPDATE/DELETE …
 * RETURNING.  The portable way to read business tables.
 *
 * Why a callback, and why text: the rows are the database's until the
 * statement is done (SQLite steps them, libpq holds the result), so the
 * call lends each row to @p fn and owns every buffer itself; nothing is
 * left to free, on any path (a cursor would have to be closed on every
 * path of the handler, and a copied result set would allocate the whole
 * result).  Text is the one representation both
 * backends give every column in: integers and text read alike on both
 * (strtoll() a number), a boolean is "t"/"f" on PostgreSQL but "1"/"0" on
 * SQLite (select CASE WHEN … THEN 1 ELSE 0 END for both), a BLOB/bytea
 * differs (encode it in SQL).  Column names are not passed: the two
 * databases name an expression differently; the SELECT list fixes the
 * order.  Stopping early is not an error: a handler that wants the first
 * row returns 1 after it.  A statement that changes rows has changed them
 * all however early @p fn stops (both databases run such a statement to
 * its end before its first row comes back).
 *
 * @p fn may call tbx_ctx_send() and tbx_ctx_set_error(), not
 * tbx_ctx_exec() nor tbx_ctx_query() (TBX_ESTATE: on SQLite the rows are
 * still being read from the tables; collect, then write after the call).
 *
 * @returns TBX_OK (the rows all read, or @p fn stopped them); TBX_EINVAL
 * (@p fn NULL, refused, more than one statement, a syntax error, …),
 * TBX_ESTATE, TBX_ENOMEM or the store's error, as tbx_ctx_exec(): logged
 * at WARN and made the message's error reason unless the handler set one.
 * On SQLite a failure may come after @p fn saw some rows; on PostgreSQL
 * none are seen, and the failure aborts the message's work back to its
 * savepoint (an OK verdict is then turned into a retry).
 */
int tbx_ctx_query(tbx_ctx_t *ctx, const char *sql, const char *const *params,
		  int n, tbx_row_fn fn, void *arg);

/** A Kafka header of an outgoing message. */
typedef struct tbx_header {
	const char *name;
	const void *value; /**< NULL for a null header */
	size_t len;
} tbx_header_t;

/** An outgoing message.  Names starting with "tbx-" are reserved. */
typedef struct tbx_out {
	const char *topic; /**< required */
	const char *type;  /**< tbx-type; required */
	const void *key;   /**< NULL: keep the incoming message's key */
	size_t key_len;
	const void *payload; /**< may be NULL */
	size_t payload_len;
	const tbx_header_t *headers; /**< extra headers, may be NULL */
	size_t header_cnt;
} tbx_out_t;

/**
 * Queues @p out to be dispatched once the handler's transaction commits.
 * Everything is copied.  Messages are discarded if the handler does not
 * return TBX_VERDICT_OK.
 * @returns TBX_OK, TBX_EINVAL (missing topic/type, reserved header name)
 * or TBX_ENOMEM.
 */
int tbx_ctx_send(tbx_ctx_t *ctx, const tbx_out_t *out);

/** Records why the handler rejects or retries; it travels in the
 *  tbx-dlq-error header of a dead-lettered message.  Copied. */
void tbx_ctx_set_error(tbx_ctx_t *ctx, const char *reason);

/**
 * A handler.  Runs on the worker's thread, inside the service store's write
 * transaction: keep it short and do not block on other workers.
 */
typedef tbx_verdict_t (*tbx_handler_fn)(tbx_ctx_t *ctx, const tbx_msg_t *msg,
					void *opaque);

/*
 * Workers.
 */
typedef struct tbx_worker tbx_worker_t;

/**
 * Creates a worker.  Required keys: group.id, store.path (an SQLite file)
 * or store.url (PostgreSQL), kafka.bootstrap.servers.  Opens (and
 * migrates) the stores, creating the service store if missing; a separate token
 * store (tokens.path) must exist unless tokens.create=true (TBX_ENOENT
 * otherwise, with @p errstr naming the path and how to create it).  Connects
 * lazily.
 *
 * On success the worker owns @p conf; on failure the caller still owns it
 * and @p errstr says why.
 */
tbx_worker_t *tbx_worker_new(tbx_conf_t *conf, char *errstr,
			     size_t errstr_size);

/**
 * Routes messages of @p topic whose tbx-type is @p type to @p fn.  A NULL
 * @p type registers the topic's catch-all.  Messages of a subscribed topic
 * with no matching handler are dead-lettered.  @p topic must be a Kafka
 * topic name; a pattern ("^…") is refused with TBX_EINVAL, since senders
 * mint tokens per topic name (tbx_worker_errstr() says why).  Call before
 * the first tbx_worker_poll()/tbx_worker_run().  @p opaque is passed to
 * @p fn as is.
 * @returns TBX_OK, TBX_EEXIST, TBX_EINVAL, TBX_ESTATE or TBX_ENOMEM.
 */
int tbx_worker_register(tbx_worker_t *worker, const char *topic,
			const char *type, tbx_handler_fn fn, void *opaque);

/**
 * Polls one batch (bounded by batch.max.messages and batch.max.ms, at most
 * @p timeout_ms of waiting for the first message) and takes it through the
 * whole protocol.  Subscribes on the first call.  Retriable failures
 * (tbx_err_is_retriable()) do not fail the call: the affected partitions
 * wait and are retried.  *@p consumed (when not NULL) is set to the number
 * of records consumed, 0 on failure.
 * @returns TBX_OK, or a fatal error: the worker cannot go on
 * (tbx_worker_errstr() says why); TBX_ESTATE after tbx_worker_close().
 */
int tbx_worker_poll(tbx_worker_t *worker, int timeout_ms, size_t *consumed);

/**
 * Polls batches until tbx_worker_stop(), then closes the worker.
 * @returns TBX_OK on a clean stop, or the fatal error that ended the loop
 * (tbx_worker_errstr() says more).
 */
int tbx_worker_run(tbx_worker_t *worker);

/**
 * Asks the worker to stop after the batch in hand.  Async-signal-safe and
 * callable from any thread: it only sets a flag and the time of the first
 * stop.  The batch's dispatch then waits for delivery reports at most half
 * of shutdown.timeout.ms; what is still without one is left undelivered,
 * its outbox row for the partition's next owner.
 */
void tbx_worker_stop(tbx_worker_t *worker);

/**
 * Finishes the batch in hand, commits offsets, leaves the group and
 * closes the Kafka clients.  Idempotent; tbx_worker_destroy() calls it.
 */
int tbx_worker_close(tbx_worker_t *worker);

/** Closes (if needed) and frees the worker and the conf it owns. */
void tbx_worker_destroy(tbx_worker_t *worker);

/**
 * @returns the worker's configuration value of @p name, as tbx_conf_get()
 * (e.g. "store.path", the service store a plugin's handlers write
 * through; "group.id").  Borrowed: valid until tbx_worker_destroy().
 * Plugins call it in tbx_plugin_init() to learn where they run.
 */
const char *tbx_worker_conf_get(const tbx_worker_t *worker, const char *name);

/** @returns the text of the last error, "" if none.  Borrowed: valid until
 *  the next call on @p worker. */
const char *tbx_worker_errstr(const tbx_worker_t *worker);

/** Counters since tbx_worker_new().  Fields are only ever appended. */
typedef struct tbx_stats {
	uint64_t consumed;	     /**< records polled */
	uint64_t processed;	     /**< handler committed OK */
	uint64_t duplicates_dropped; /**< token gone: already done */
	uint64_t resumed;	     /**< outbox row found: recovery */
	uint64_t retries;	  /**< RETRY verdicts, and partitions held back
				     because a phase or a delivery failed */
	uint64_t dead_lettered;	  /**< sent to the dead-letter topic */
	uint64_t untokened;	  /**< records without a usable token */
	uint64_t dispatched;	  /**< outgoing messages delivered */
	uint64_t tokens_created;  /**< token rows minted */
	uint64_t tokens_consumed; /**< own tokens consumed after work: token
				     rows deleted, token set bits cleared */
	uint64_t attempts_lost;	  /**< token sets discarded: another won */
	uint64_t orphans_swept;	  /**< registrations removed as orphans */
	uint64_t batches;
	uint64_t stuck_rows;	  /**< outbox rows the recovery pass found
				       below their committed offset */
	uint64_t rows_recovered;  /**< of those, rows it finished */
	uint64_t commits_retried; /**< offset commits the group refused
				     (e.g. during a rebalance), sent again */
	uint64_t handler_refused; /**< statements a handler issued on
				     tbx_ctx_db() that would end or escape
				     the transaction (COMMIT, BEGIN, …),
				     refused */
	uint64_t dispatch_failed_permanent; /**< deliveries of outgoing
					       messages that failed with a
					       permanent error */
	uint64_t undeliverable;	     /**< outgoing messages given up after
					dispatch.retry.max retries */
	uint64_t undelivered_stored; /**< of those, kept in the service
					store (the dead-letter topic did
					not take them either) */
	uint64_t producer_restarts;  /**< producers replaced after a fatal
					error */
	uint64_t store_mismatches;   /**< records minted in another token store
					(tbx-store): dead-lettered, or the
					worker stopped */
	uint64_t duplicate_alarms;   /**< warnings that an unusual share of
					records was dropped as duplicates */
	uint64_t commit_alarms;	     /**< alarms that the group refused the
					offset commits of a partition for
					commit.behind.alarm.ms: its committed
					offset stays behind the records
					processed */
	uint64_t rows_conflicted;    /**< outbox rows another worker's A
					committed first (PostgreSQL, a
					worker that took no lock): the
					handler's effects rolled back, the
					row resumed */
	uint64_t handler_ended_txn;  /**< handlers that ended the worker's
					transaction on tbx_ctx_pg()
					(COMMIT, ROLLBACK): the worker
					stopped */
	uint64_t store_reconnects;   /**< connections to the stores' server
					(PostgreSQL) found lost and made
					again; the batch in hand was retried
					(SQLite: 0) */
	uint64_t partition_unknown;  /**< destination partition counts that
					could not be learnt from the
					metadata in time (the batched
					protocol's choice of a partition
					before minting: A of a worker with
					outbox.layout = batch and
					tokens.format = set; the batch is
					retried) */
	uint64_t set_orphans_swept;  /**< registrations of token sets
					(one per attempt) removed as orphans
					by register-cleanup */
	uint64_t set_rows_swept;     /**< token set rows (one per set and
					receiving group) removed with them */
	uint64_t set_regs_unchecked; /**< registrations of token sets that
					register-cleanup left unjudged: the
					service store could not say what its
					batch rows hold (none in its schema,
					or one that does not decode) */
	uint64_t resume_reloads;     /**< outbox.layout=batch: loads of
					the group's batch rows by the
					resume check (a partition's gen
					moved, or its memory was empty) */
	uint64_t resume_load_failures; /**< such loads that failed (a row
					  that does not decode, a store
					  error): the memory was dropped
					  and the batch left for
					  redelivery */
	uint64_t resume_drops;	       /**< the resume check's memory dropped
					  at a rebalance */
	uint64_t stray_records;	       /**< outbox.layout=batch: records
					  whose tbx-tbit names another
					  partition than the one they
					  arrived on (copied by hand, or by
					  a tool that does not keep
					  partitions), checked against their
					  set's partition; counted by each A
					  that meets one */
} tbx_stats_t;

/** Copies the counters into @p stats. */
void tbx_worker_stats(const tbx_worker_t *worker, tbx_stats_t *stats);

/**
 * Runs register-cleanup now for this worker's group, at most @p limit
 * registrations of each kind, per-message tokens and token sets (0:
 * cleanup.batch.size).  @p swept (may be NULL) receives how many
 * orphaned attempts (of both kinds) were removed.
 */
int tbx_worker_cleanup(tbx_worker_t *worker, size_t limit, size_t *swept);

/*
 * Publishing ingress: messages from outside any handler, with tokens
 * minted for every consumer group subscribed to their topic.
 */
typedef struct tbx_publisher tbx_publisher_t;

/**
 * Required keys: tokens.path (or store.path), kafka.bootstrap.servers.
 * The token store must exist: a publisher never creates one (`tokenbox
 * init` does).  Every record it mints carries the store's id (tbx-store).
 * On success the publisher owns @p conf; on failure the caller does.
 */
tbx_publisher_t *tbx_publisher_new(tbx_conf_t *conf, char *errstr,
				   size_t errstr_size);
/**
 * Queues @p out (copied); a NULL key means no key.
 * @returns TBX_OK, TBX_EINVAL (invalid topic or type, reserved header
 * name), TBX_ENOMEM, or TBX_ESTATE while a failed flush is pending.
 */
int tbx_publish(tbx_publisher_t *pub, const tbx_out_t *out);

/** Longest caller-supplied id, in bytes. */
#define TBX_CALLER_ID_MAX 255

/**
 * Queues @p out (copied) under a caller-supplied id @p caller_id (copied;
 * NULL: the same as tbx_publish()): the id the message has outside the
 * pipeline, e.g. an order number or an upstream event id, 1 to
 * TBX_CALLER_ID_MAX bytes without control characters.
 *
 * At the flush, the ingress edge (a table in the token store, shared by
 * every publisher of the pipeline, docs/architecture.md "Ingress edge")
 * compares the message with what was published under the same (topic,
 * caller id) within ingress.dedup.window.ms, by a SHA-256 fingerprint of
 * its type, key and payload (extra headers are not part of it):
 *  - not seen: published with a fresh tbx-id and token, and remembered;
 *  - same fingerprint, a *natural duplicate* (a retry of the same message):
 *    not published again when the original was delivered
 *    (TBX_OUTCOME_DUPLICATE); when its delivery was never confirmed (a
 *    publisher that failed or died), sent again with the original's
 *    tbx-id, token and tbx-seq (TBX_OUTCOME_RESENT), so receivers take
 *    it at most once whichever copies arrive;
 *  - another fingerprint, a *synthetic duplicate* (a different message
 *    reusing the id): refused, never published (TBX_OUTCOME_REFUSED), a
 *    WARN log line names the id, and tbx_publisher_flush() returns
 *    TBX_EEXIST.
 * The message's tbx-id is a UUID minted by tokenbox, not @p caller_id.
 * @returns TBX_OK, TBX_EINVAL (as tbx_publish(), or a bad @p caller_id),
 * TBX_ENOMEM, or TBX_ESTATE while a failed flush is pending.
 */
int tbx_publish_id(tbx_publisher_t *pub, const tbx_out_t *out,
		   const char *caller_id);

/**
 * Mints the tokens of every queued message in one token-store transaction
 * (which also checks caller ids against the ingress edge, see
 * tbx_publish_id()), produces them and waits for every delivery report
 * (at most dispatch.timeout.ms).
 *
 * On a delivery failure the batch stays queued with its ids and tokens:
 * call tbx_publisher_flush() again to send the undelivered messages
 * again, and receivers handle each message once however many copies the
 * retries deliver.  Until then tbx_publish() refuses new messages.
 * A fatal producer error (e.g. the idempotent producer's
 * OUT_OF_ORDER_SEQUENCE_NUMBER) replaces the producer (logged at ERROR,
 * counted in producer_restarts), and the messages it did not deliver are
 * sent once more in the same call, with the same ids and tokens.
 * @returns TBX_OK when every message was delivered or was a natural
 * duplicate; TBX_EEXIST when the rest was, but one or more messages were
 * refused as synthetic duplicates (the batch is finished); else an error
 * and the batch stays.  @p failed (may be NULL) receives how many
 * messages were not delivered, refused ones included.
 * tbx_publisher_outcome() tells which.
 */
int tbx_publisher_flush(tbx_publisher_t *pub, size_t *failed);

/** What became of one message of the last flushed batch. */
typedef enum tbx_outcome {
	TBX_OUTCOME_PENDING = 0,    /**< not flushed, or its minting failed */
	TBX_OUTCOME_SENT = 1,	    /**< delivered */
	TBX_OUTCOME_RESENT = 2,	    /**< natural duplicate whose original's
					 delivery was unconfirmed: delivered
					 again with the original's id and token */
	TBX_OUTCOME_DUPLICATE = 3,  /**< natural duplicate of a delivered
					 message (or of one earlier in the
					 batch): not published again */
	TBX_OUTCOME_REFUSED = 4,    /**< synthetic duplicate: not published */
	TBX_OUTCOME_UNDELIVERED = 5 /**< delivery failed; still queued */
} tbx_outcome_t;

/**
 * @returns the outcome of message @p index (0-based, in the order queued)
 * of the batch of the last tbx_publisher_flush() call, or -1 when there is
 * no such message.  @p id (may be NULL) receives its tbx-id (the
 * original's for a natural duplicate), borrowed until the next
 * tbx_publish*() or tbx_publisher_destroy().
 */
int tbx_publisher_outcome(const tbx_publisher_t *pub, size_t index,
			  const char **id);

/** Publisher counters since tbx_publisher_new().  Only ever appended. */
typedef struct tbx_publisher_stats {
	uint64_t sent;	      /**< delivered with a fresh id and token */
	uint64_t resent;      /**< natural duplicates delivered again */
	uint64_t duplicates;  /**< natural duplicates not published again */
	uint64_t refused;     /**< synthetic duplicates refused */
	uint64_t undelivered; /**< failed deliveries (per flush attempt) */
	uint64_t producer_restarts; /**< producers replaced after a fatal
				       error (the undelivered messages were
				       sent again with their ids and
				       tokens) */
	uint64_t store_reconnects;  /**< connections to the token store's
				       server (PostgreSQL) found lost and
				       made again (SQLite: 0) */
	uint64_t partition_unknown; /**< tokens.format = set: flushes that
				       failed because a topic's partition
				       count was not learnt within
				       dispatch.timeout.ms (nothing sent) */
} tbx_publisher_stats_t;

/** Copies the counters into @p stats. */
void tbx_publisher_stats(const tbx_publisher_t *pub,
			 tbx_publisher_stats_t *stats);
/**
 * Checks, before anything is published, what a first flush would find:
 * that @p topic is a valid Kafka topic name, that the brokers answer a
 * metadata request within @p timeout_ms, and that @p topic exists there
 * (topics are not created by the check).  A separate short-lived client
 * with the publisher's Kafka settings makes the request, so that a
 * failure carries librdkafka's own reason (e.g. "Connection refused"),
 * which tbx_publisher_errstr() then returns.  @p groups (may be NULL)
 * receives the number of consumer groups subscribed to @p topic in the
 * token store: 0 means the messages would carry tokens for no group.
 * @returns TBX_OK, TBX_EINVAL (invalid name), TBX_ETIMEOUT (no broker
 * answered), TBX_ENOENT (no such topic), TBX_EKAFKA or a store error.
 */
int tbx_publisher_check(tbx_publisher_t *pub, const char *topic, int timeout_ms,
			size_t *groups);

/** Frees the publisher and its conf.  A batch still queued is dropped;
 *  if it was minted, its tokens stay in the token store unused. */
void tbx_publisher_destroy(tbx_publisher_t *pub);
const char *tbx_publisher_errstr(const tbx_publisher_t *pub);

/*
 * Plugins: a shared object loaded by `tokenbox worker` exports
 *
 *   int tbx_plugin_abi_version(void);   // return TBX_PLUGIN_ABI_VERSION
 *   int tbx_plugin_init(tbx_worker_t *worker, const char *args);
 */
typedef int (*tbx_plugin_init_fn)(tbx_worker_t *worker, const char *args);

#ifdef __cplusplus
}
#endif
#endif /* TOKENBOX_TOKENBOX_H */
