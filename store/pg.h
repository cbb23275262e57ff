/*
 * PostgreSQL helpers shared by the service store's and the token store's
 * PostgreSQL backends (outbox/pg*.c, tokens/pg*.c): one connection, its
 * transactions, a cache of named prepared statements, bound parameters and
 * binary results, and the mapping of server errors to tbx_err_t.
 *
 * A connection is made from a libpq connection string or URL
 * (postgresql://… or key=value …).  Credentials reach libpq through its
 * own means (the URL, PGPASSWORD, ~/.pgpass, a service file); the string
 * itself is never logged nor put in an error message: every message names
 * the connection by tbx__pg_redact()'s form, without password.
 *
 * Tables live in schemas named by the configuration.  A schema name is an
 * identifier, not a value, so it cannot be bound: it is validated
 * (tbx__pg_ident_check()) and written into the statement text, quoted, by
 * tbx__pg_stmts_init() in place of the markers @S (the service store's
 * schema) and @T (the token store's).  Every value is bound.
 *
 * Statements are prepared once per connection, under names unique to the
 * statement table (a prefix and an index), on first use.  After the
 * connection was lost and made again (tbx__pg_begin() reconnects), they
 * are prepared again.
 *
 * Results are binary: integers come back in network order and are read
 * with tbx__pg_i64(), text and bytea as their bytes.
 *
 * @locality the thread that uses the connection.
 */
#ifndef TBX_STORE_PG_H
#define TBX_STORE_PG_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

/** The longest schema name PostgreSQL keeps (NAMEDATALEN - 1). */
#define TBX_PG_IDENT_MAX 63
/** The most parameters one statement of tokenbox binds. */
#define TBX_PG_MAX_PARAMS 16
/** The most session settings of tbx__pg_set(). */
#define TBX_PG_MAX_SETS 4

typedef struct tbx__pg {
	PGconn *conn;
	char *conninfo;	  /**< as configured, for reconnecting; never logged */
	char where[256];  /**< the redacted form, for messages */
	unsigned gen;	  /**< bumps at every (re)connect */
	int refs;	  /**< a connection shared by S and T (joined) */
	int in_tx;	  /**< a transaction is open */
	char errmsg[512]; /**< the last server error, redacted */
	char sets[TBX_PG_MAX_SETS][2][160]; /**< tbx__pg_set()'s name, value */
	int nsets;
	/* The record's savepoint, deferred (tbx__pg_savepoint()). */
	char sp_name[32]; /**< its name, "" when none is deferred */
	int sp_send;	  /**< SAVEPOINT not sent yet */
	int sp_release;	  /**< RELEASE not sent yet */
	int sp_err;	  /**< a failed deferred statement: every call until the
			     transaction ends fails with it */
	/* Statements deferred by tbx__pg_defer(), in order. */
	struct tbx__pg_dq *dq;
	int dq_cnt, dq_cap;
	int dq_mark; /**< the first of them inside the record's savepoint */
	unsigned dq_texts; /**< texts deferred since BEGIN
			      (tbx__pg_defer_text()) */
	char state[6];	   /**< the SQLSTATE of the last failure, "" if none */
	/* Texts run through tbx__pg_query() and the savepoint commands,
	 * prepared once per connection as tbx_q<i> (least recently used
	 * goes first). */
	struct {
		char *sql;
		unsigned gen; /**< the connection it was prepared on */
		uint64_t used;
	} qc[16];
	uint64_t qc_tick;
} tbx__pg_t;

/**
 * @returns 1 when @p s is a libpq URL (postgresql:// or postgres://), 0
 * otherwise (an SQLite path).
 */
int tbx__pg_is_url(const char *s);

/**
 * Writes @p conninfo without its password to @p out (cut to @p size):
 * a URL's "user:password@" and its query's password=… (the key in any
 * case, percent-encoded or not), a key=value string's password value
 * (quoted or not) and any word of it that is not key=value (a password
 * whose key is mistyped) each become "***".  @returns @p out.
 */
const char *tbx__pg_redact(const char *conninfo, char *out, size_t size);
/**
 * Replaces in the message @p msg, in place, every occurrence of the
 * parts of @p conninfo that tbx__pg_redact() hides (libpq's complaint
 * about a malformed string may quote them).  @returns @p msg.
 */
char *tbx__pg_censor(const char *conninfo, char *msg);

/**
 * Checks a schema name: 1 to 63 bytes of [A-Za-z0-9_.-], not starting
 * with a digit, "pg_" or a dot.
 * @returns TBX_OK or TBX_ECONF with @p errstr saying why (naming @p key).
 */
int tbx__pg_ident_check(const char *key, const char *name, char *errstr,
			size_t errstr_size);

/**
 * Connects to @p conninfo with application_name=tokenbox (unless the
 * string sets one) and a UTC time zone, and checks that the server is
 * PostgreSQL 12 or later.
 * @returns TBX_OK with *pg set (refs 1), or TBX_ESTORE / TBX_EINVAL (a
 * malformed string) / TBX_ENOMEM with @p errstr saying why, redacted.
 */
int tbx__pg_connect(const char *conninfo, tbx__pg_t **pg, char *errstr,
		    size_t errstr_size);
/**
 * Sets the session parameter @p name to @p value (set_config(), bound)
 * now, outside a transaction, and again after every reconnect, so that
 * a connection made again keeps what the store configured
 * (synchronous_commit, lock_timeout, default_transaction_read_only).
 * A second call for one name replaces its value.
 * @returns TBX_OK, TBX_EINVAL (too many, too long, or inside a
 * transaction) or the mapped error.
 */
int tbx__pg_set(tbx__pg_t *pg, const char *name, const char *value);

/**
 * @returns 1 when the connection string (or PGOPTIONS) sets the session
 * parameter @p name through libpq's options (-c name=value), 0 otherwise.
 */
int tbx__pg_option_given(const tbx__pg_t *pg, const char *name);

/**
 * Records and logs the failure of a call on @p pg that a backend ran
 * itself (PQexecParams of a handler's statement; @p res may be NULL),
 * as tbx__pg_run() does its own.  @returns the mapped error.
 */
int tbx__pg_fail(tbx__pg_t *pg, const char *what, const PGresult *res);

/** Takes another reference to @p pg (a joined token store). */
tbx__pg_t *tbx__pg_ref(tbx__pg_t *pg);
/** Drops a reference; the last one closes the connection.  NULL is
 *  accepted. */
void tbx__pg_unref(tbx__pg_t *pg);

/**
 * Opens a transaction, BEGIN ISOLATION LEVEL READ COMMITTED (what the
 * locking of docs/architecture.md needs, whatever the server's default).
 * A connection found lost is made again first.
 * @returns TBX_OK or the mapped error.
 */
int tbx__pg_begin(tbx__pg_t *pg);
/** COMMIT.  A failed or lost commit: the transaction is gone either way
 *  (the caller must not assume it took effect, nor that it did not).
 *  @returns TBX_OK or the mapped error. */
int tbx__pg_commit(tbx__pg_t *pg);
/** ROLLBACK; never fails (a lost connection rolled back already). */
void tbx__pg_rollback(tbx__pg_t *pg);
/** Runs one parameterless statement that is not cached (SAVEPOINT x,
 *  SET …, DDL).  @returns TBX_OK or the mapped error. */
int tbx__pg_exec(tbx__pg_t *pg, const char *sql);

/**
 * Savepoints without round trips of their own.  tbx__pg_savepoint() only
 * notes the savepoint @p name (one at a time, a plain identifier);
 * tbx__pg_release() notes its release.  What is noted goes to the server
 * as one simple query ("RELEASE SAVEPOINT x; SAVEPOINT x") before the
 * next statement on the connection: tbx__pg_run(), tbx__pg_exec(),
 * tbx__pg_flush() (which a backend calls before it runs a statement of
 * its own or hands the raw connection out).  A release of a savepoint
 * never sent sends nothing; COMMIT drops a pending release (COMMIT
 * releases it).  A deferred statement that fails fails the call that
 * sent it and every later call until the transaction ends (ROLLBACK,
 * COMMIT fails), as a failed savepoint would.
 * @returns TBX_OK or the mapped error (tbx__pg_savepoint(): TBX_EINVAL
 * for a name too long, TBX_ESTATE outside a transaction).
 */
int tbx__pg_savepoint(tbx__pg_t *pg, const char *name);
int tbx__pg_release(tbx__pg_t *pg);
/** Rolls back to the savepoint and releases it, one round trip; nothing
 *  when it was never sent.  @returns TBX_OK or the mapped error. */
int tbx__pg_undo(tbx__pg_t *pg);
/** Sends what is deferred.  @returns TBX_OK or the mapped error. */
int tbx__pg_flush(tbx__pg_t *pg);

/** The parameters of one statement: text, int64 (as text) and bytea
 *  (binary), or NULL. */
typedef struct tbx__pg_params {
	int n;
	int err; /**< the first failure of a tbx__pgp_*() call */
	const char *vals[TBX_PG_MAX_PARAMS];
	int lens[TBX_PG_MAX_PARAMS];
	int fmts[TBX_PG_MAX_PARAMS];
	char nums[TBX_PG_MAX_PARAMS][24];
	char *owned[TBX_PG_MAX_PARAMS];
} tbx__pg_params_t;

void tbx__pgp_init(tbx__pg_params_t *p);
/** Frees what the array parameters own. */
void tbx__pgp_free(tbx__pg_params_t *p);
/** Text (borrowed until the statement ran); NULL binds NULL. */
void tbx__pgp_text(tbx__pg_params_t *p, const char *s);
/** Text, or NULL for a NULL or empty string (optional columns). */
void tbx__pgp_opt_text(tbx__pg_params_t *p, const char *s);
void tbx__pgp_i64(tbx__pg_params_t *p, int64_t v);
/** Bytea (borrowed); a NULL pointer binds NULL, a non-NULL one of length
 *  0 an empty value. */
void tbx__pgp_bytea(tbx__pg_params_t *p, const void *v, size_t len);
/** A text[] of @p n strings ("{…}" with every element quoted). */
void tbx__pgp_text_array(tbx__pg_params_t *p, const char *const *v, size_t n);
/** A text[] of the strings at @p base + i * @p stride, @p n of them (an
 *  array of structs whose first member is a char[]). */
void tbx__pgp_text_array_of(tbx__pg_params_t *p, const void *base,
			    size_t stride, size_t n);
/** An int8[] of @p n values. */
void tbx__pgp_i64_array(tbx__pg_params_t *p, const int64_t *v, size_t n);
/** A bytea[] of @p n values of @p lens bytes each, sent in binary (a NULL
 *  pointer binds an empty value).  The statement casts it:
 *  $n::bytea[]. */
void tbx__pgp_bytea_array(tbx__pg_params_t *p, const void *const *v,
			  const size_t *lens, size_t n);

/** A table of statements of one store on one connection. */
typedef struct tbx__pg_stmts {
	tbx__pg_t *pg;	/**< borrowed */
	char prefix[8]; /**< statement names are prefix + index */
	char **sql;	/**< the texts with the schemas filled in */
	unsigned *gen;	/**< the connection generation each was prepared in
			     (0: not yet) */
	int count;
} tbx__pg_stmts_t;

/**
 * Fills @p stmts from @p tmpl (@p count texts), putting the quoted
 * @p s_schema in place of every @S and @p t_schema of every @T (either
 * may be NULL when no text uses it).
 * @returns TBX_OK or TBX_ENOMEM.
 */
int tbx__pg_stmts_init(tbx__pg_stmts_t *stmts, tbx__pg_t *pg,
		       const char *prefix, const char *const *tmpl, int count,
		       const char *s_schema, const char *t_schema);
void tbx__pg_stmts_free(tbx__pg_stmts_t *stmts);

/**
 * Runs statement @p q with @p params (NULL: none), preparing it first if
 * this connection has not.  Every failure is logged (WARN for a lock
 * timeout, deadlock or serialization failure; ERROR otherwise), with the
 * statement's name and the server's message.
 * @returns TBX_OK with *res set when @p res is not NULL (caller
 * PQclear()s it; rows in binary), or the mapped error (*res NULL):
 * TBX_EBUSY (deadlock, serialization failure, lock timeout), TBX_EIO
 * (disk full), TBX_ESTORE (a lost connection and anything else), or a
 * parameter's failure (TBX_ENOMEM).
 */
int tbx__pg_run(tbx__pg_stmts_t *stmts, int q, const tbx__pg_params_t *params,
		PGresult **res);

/** Runs @p q and returns the first column of its first row as an int64
 *  (*n = 0 and *found = 0 without a row; @p found may be NULL). */
int tbx__pg_run_i64(tbx__pg_stmts_t *stmts, int q,
		    const tbx__pg_params_t *params, int64_t *n, int *found);

/**
 * Statements whose result the caller does not wait for.  Inside a
 * transaction, tbx__pg_defer() copies @p params and queues statement
 * @p q; what is queued goes to the server in order, with the deferred
 * savepoint commands, in one pipeline (one round trip) together with the
 * next statement on the connection (tbx__pg_run(), tbx__pg_query(),
 * tbx__pg_exec(), tbx__pg_flush(), tbx__pg_commit()).  When it has run,
 * its count of changed rows is added to *@p changes (may be NULL); when
 * @p expect is not 0 and that count differs, it fails with TBX_EEXIST
 * ("@p what: a conflicting row exists").  A queued statement that fails
 * fails the call that sent it and every later call until the
 * transaction ends, as a failed deferred savepoint does: the caller of a
 * deferred statement accepts that its failure ends the transaction.
 * tbx__pg_undo() drops the statements queued inside the savepoint it
 * rolls back; ROLLBACK drops them all.  Outside a transaction the
 * statement runs at once, with the same checks.
 * @returns TBX_OK, TBX_ENOMEM, a parameter's failure, an earlier
 * deferred failure, or (outside a transaction) the statement's.
 */
int tbx__pg_defer(tbx__pg_stmts_t *stmts, int q, const tbx__pg_params_t *params,
		  uint64_t *changes, int expect, const char *what);

/**
 * tbx__pg_defer() for a text, as tbx__pg_query() would run it (prepared
 * once per connection, @p n text parameters @p vals copied, its rows
 * dropped): queued inside a transaction and sent with the next statement,
 * its failure kept as a deferred one's is.  Counted in pg->dq_texts.
 * @returns TBX_OK, TBX_ESTATE outside a transaction, TBX_EINVAL (more
 * than TBX_PG_MAX_PARAMS parameters), TBX_ENOMEM, or an earlier deferred
 * failure.
 */
int tbx__pg_defer_text(tbx__pg_t *pg, const char *sql, int n,
		       const char *const *vals);

/**
 * Runs a statement given as text (a handler's: text parameters and text
 * results, the types inferred by the server), sending what is deferred
 * with it.  The text is prepared once per connection and kept among the
 * 16 texts last run, so a handler's statement repeated for every record
 * is parsed once.  @returns TBX_OK with *res (the caller PQclear()s
 * it), or the mapped error with pg->state set (*res NULL).
 */
int tbx__pg_query(tbx__pg_t *pg, const char *sql, int n,
		  const char *const *vals, PGresult **res);

/** Reads an integer column (int2, int4, int8 or bool) of a binary
 *  result; NULL reads 0. */
int64_t tbx__pg_i64(const PGresult *res, int row, int col);
/** 1 when the value is NULL. */
int tbx__pg_null(const PGresult *res, int row, int col);
/** A text column's bytes, NUL-terminated (libpq adds the NUL); NULL for
 *  a NULL value. */
const char *tbx__pg_text(const PGresult *res, int row, int col);
/** A bytea column: its bytes and length; NULL for a NULL value. */
const void *tbx__pg_bytea(const PGresult *res, int row, int col, size_t *len);
/** Copies a text column into @p out (@p size bytes); a NULL value or
 *  one too long for @p out gives "" and TBX_ECORRUPT for the latter. */
int tbx__pg_text_to(const PGresult *res, int row, int col, char *out,
		    size_t size);

/** How many times @p pg's connection was lost and made again (its
 *  generation less the first connect); 0 for NULL (a store of another
 *  backend). */
uint64_t tbx__pg_reconnects(const tbx__pg_t *pg);

/** The redacted message of the last failure on @p pg. */
const char *tbx__pg_errmsg(const tbx__pg_t *pg);

/** While @p on, the countdown fault of store/db.h cuts the connection
 *  (shuts its socket down) instead of failing the call, so the call fails
 *  as on a lost network and the next transaction reconnects. */
void tbx__fault_pg_conn_loss(int on);

#endif
