/*
 * A PostgreSQL connection of the stores: see store/pg.h.
 */
#include "store/pg.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/str.h"
#include "store/db.h"
#include "store/db_int.h"
#include "tokenbox/tokenbox.h"

int tbx__pg_is_url(const char *s)
{
	return s && (strncmp(s, "postgresql://", 13) == 0 ||
		     strncmp(s, "postgres://", 11) == 0);
}

/* Appends @p n bytes of @p s to @p out (size @p size) at *len, cutting
 * what does not fit. */
static void put(char *out, size_t size, size_t *len, const char *s, size_t n)
{
	if (*len + 1 >= size)
		return;
	if (n > size - 1 - *len)
		n = size - 1 - *len;
	memcpy(out + *len, s, n);
	*len += n;
	out[*len] = '\0';
}

/* A span of a connection string that must not be shown. */
typedef void (*secret_fn)(void *opaque, const char *s, size_t n);

/* The value of hex digit @p c, or -1. */
static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* 1 when the @p n bytes at @p key, percent-decoded as libpq decodes a
 * URL's query, are "password" in any case (libpq takes only the lower
 * case, but refuses the others with a message that quotes the string). */
static int is_password_key(const char *key, size_t n, int decode)
{
	static const char want[] = "password";
	size_t k = 0;

	for (size_t i = 0; i < n; i++, k++) {
		int c = (unsigned char)key[i];
		if (decode && c == '%' && i + 2 < n &&
		    hexval(key[i + 1]) >= 0 && hexval(key[i + 2]) >= 0) {
			c = hexval(key[i + 1]) * 16 + hexval(key[i + 2]);
			i += 2;
		}
		if (k >= sizeof(want) - 1 || tolower(c) != want[k])
			return 0;
	}
	return k == sizeof(want) - 1;
}

/* A URL's secrets: the password of "user:password@" in the authority,
 * and the values of password=… in the query. */
static void url_secrets(const char *url, secret_fn fn, void *opaque)
{
	const char *auth = strstr(url, "//") + 2;
	const char *end = auth + strcspn(auth, "/?#");
	const char *at = NULL, *colon, *q;

	for (const char *p = auth; p < end; p++)
		if (*p == '@')
			at = p;
	colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
	if (colon)
		fn(opaque, colon + 1, (size_t)(at - colon - 1));
	if (!(q = strchr(end, '?')))
		return;
	for (q++; *q;) {
		size_t len = strcspn(q, "&");
		const char *eq = memchr(q, '=', len);
		if (eq && is_password_key(q, (size_t)(eq - q), 1))
			fn(opaque, eq + 1, len - (size_t)(eq + 1 - q));
		q += len;
		if (*q)
			q++;
	}
}

/* The end of a key=value string's value at @p v (quoted or not, with
 * backslash escapes, as libpq reads it). */
static const char *kv_value_end(const char *v)
{
	if (*v == '\'') {
		for (v++; *v && *v != '\''; v++)
			if (*v == '\\' && v[1])
				v++;
		return *v ? v + 1 : v;
	}
	for (; *v && !isspace((unsigned char)*v); v++)
		if (*v == '\\' && v[1])
			v++;
	return v;
}

/* key=value form: the values of password (in any case), and every word
 * that is not key=value (libpq quotes it whole in its complaint, and it
 * may be a password with its key mistyped). */
static void kv_secrets(const char *s, secret_fn fn, void *opaque)
{
	const char *p = s;

	for (;;) {
		const char *key = p + strspn(p, " \t\n\r\f\v");
		size_t klen = strcspn(key, " \t\n\r\f\v=");
		const char *v = key + klen, *vend;

		if (!*key)
			return;
		v += strspn(v, " \t\n\r\f\v");
		if (*v != '=') { /* a word without a value */
			fn(opaque, key, klen);
			p = key + klen;
			continue;
		}
		v++;
		v += strspn(v, " \t\n\r\f\v");
		vend = kv_value_end(v);
		if (!klen || is_password_key(key, klen, 0))
			fn(opaque, v, (size_t)(vend - v));
		p = vend;
	}
}

static void secrets(const char *conninfo, secret_fn fn, void *opaque)
{
	if (tbx__pg_is_url(conninfo))
		url_secrets(conninfo, fn, opaque);
	else
		kv_secrets(conninfo, fn, opaque);
}

/* The copy being made by tbx__pg_redact(). */
typedef struct redacting {
	const char *src; /* copied up to here */
	char *out;
	size_t size, len;
} redacting_t;

static void redact_span(void *opaque, const char *s, size_t n)
{
	redacting_t *r = opaque;

	if (!n)
		return;
	put(r->out, r->size, &r->len, r->src, (size_t)(s - r->src));
	put(r->out, r->size, &r->len, "***", 3);
	r->src = s + n;
}

const char *tbx__pg_redact(const char *conninfo, char *out, size_t size)
{
	redacting_t r = {conninfo, out, size, 0};

	if (!size)
		return out;
	out[0] = '\0';
	if (!conninfo)
		return out;
	secrets(conninfo, redact_span, &r);
	put(out, size, &r.len, r.src, strlen(r.src));
	return out;
}

/* A message being cleaned of a connection string's secrets. */
typedef struct censoring {
	char *msg;
} censoring_t;

static void censor_span(void *opaque, const char *s, size_t n)
{
	censoring_t *c = opaque;

	if (!n)
		return;
	/* Each occurrence becomes "***"; a shorter one becomes stars of
	 * its length. */
	for (char *p = c->msg; *p;) {
		size_t rest;
		if (strncmp(p, s, n) != 0) {
			p++;
			continue;
		}
		rest = strlen(p + n);
		if (n >= 3) {
			memcpy(p, "***", 3);
			memmove(p + 3, p + n, rest + 1);
			p += 3;
		} else {
			memset(p, '*', n);
			p += n;
		}
	}
}

char *tbx__pg_censor(const char *conninfo, char *msg)
{
	censoring_t c = {msg};

	if (conninfo && msg)
		secrets(conninfo, censor_span, &c);
	return msg;
}

int tbx__pg_ident_check(const char *key, const char *name, char *errstr,
			size_t errstr_size)
{
	size_t len = name ? strlen(name) : 0;

	if (!len || len > TBX_PG_IDENT_MAX)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: a schema name of 1 to %d bytes is "
				   "needed (got %zu)",
				   key, TBX_PG_IDENT_MAX, len);
	if (isdigit((unsigned char)name[0]) || name[0] == '.' ||
	    strncmp(name, "pg_", 3) == 0)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: '%s' cannot name a schema (it may not "
				   "start with a digit, a dot or pg_)",
				   key, name);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		if (!isalnum(c) && c != '_' && c != '.' && c != '-')
			return tbx__seterr(errstr, errstr_size, TBX_ECONF,
					   "%s: '%s' cannot name a schema: "
					   "only letters, digits, '_', '.' "
					   "and '-' are allowed",
					   key, name);
	}
	return TBX_OK;
}

/* The server's message without its trailing newline, into pg->errmsg. */
static void keep_msg(tbx__pg_t *pg, const char *msg)
{
	size_t n = 0;

	/* On one line: libpq's messages may hold "\n\t" before a hint,
	 * and a log line or a command's error is one line. */
	for (msg = msg && *msg ? msg : "unknown error";
	     *msg && n + 1 < sizeof(pg->errmsg); msg++) {
		if (*msg == '\n' || *msg == '\r' || *msg == '\t') {
			if (n && pg->errmsg[n - 1] != ' ')
				pg->errmsg[n++] = ' ';
			continue;
		}
		pg->errmsg[n++] = *msg;
	}
	while (n && pg->errmsg[n - 1] == ' ')
		n--;
	pg->errmsg[n] = '\0';
}

const char *tbx__pg_errmsg(const tbx__pg_t *pg)
{
	return pg->errmsg;
}

uint64_t tbx__pg_reconnects(const tbx__pg_t *pg)
{
	/* gen is 1 after tbx__pg_connect(); each reconnect adds one. */
	return pg && pg->gen > 1 ? pg->gen - 1 : 0;
}

/* The server's notices (a ROLLBACK with no transaction open, a handler's
 * RAISE NOTICE) go to the log, not to stderr. */
static void on_notice(void *arg, const char *msg)
{
	const tbx__pg_t *pg = arg;
	size_t n = strlen(msg);

	while (n && msg[n - 1] == '\n')
		n--;
	tbx__log(TBX_LOG_DEBUG, "postgresql: %s: %.*s", pg->where, (int)n, msg);
}

static int apply_set(tbx__pg_t *pg, const char *name, const char *value);

/* Session settings every connection gets, then the store's own. */
static int setup_session(tbx__pg_t *pg)
{
	static const char *const sets[] = {
	    "SET TIME ZONE 'UTC'",
	    "SET client_min_messages = warning",
	};
	for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
		PGresult *r = PQexec(pg->conn, sets[i]);
		int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		if (!ok)
			keep_msg(pg, PQerrorMessage(pg->conn));
		PQclear(r);
		if (!ok)
			return TBX_ESTORE;
	}
	for (int i = 0; i < pg->nsets; i++)
		if (apply_set(pg, pg->sets[i][0], pg->sets[i][1]))
			return TBX_ESTORE;
	return TBX_OK;
}

/* Opens pg->conn from pg->conninfo. */
static int open_conn(tbx__pg_t *pg)
{
	static const char *const keys[] = {"dbname",
					   "fallback_application_name", NULL};
	const char *vals[] = {pg->conninfo, "tokenbox", NULL};

	pg->conn = PQconnectdbParams(keys, vals, 1);
	if (!pg->conn) {
		keep_msg(pg, "out of memory");
		return TBX_ENOMEM;
	}
	if (PQstatus(pg->conn) != CONNECTION_OK) {
		keep_msg(pg, PQerrorMessage(pg->conn));
		PQfinish(pg->conn);
		pg->conn = NULL;
		return TBX_ESTORE;
	}
	if (PQserverVersion(pg->conn) < 120000) {
		snprintf(pg->errmsg, sizeof(pg->errmsg),
			 "PostgreSQL %d.%d is too old: tokenbox needs 12 or "
			 "later",
			 PQserverVersion(pg->conn) / 10000,
			 PQserverVersion(pg->conn) / 100 % 100);
		PQfinish(pg->conn);
		pg->conn = NULL;
		return TBX_ESTORE;
	}
	PQsetNoticeProcessor(pg->conn, on_notice, pg);
	if (setup_session(pg)) {
		PQfinish(pg->conn);
		pg->conn = NULL;
		return TBX_ESTORE;
	}
	pg->gen++;
	return TBX_OK;
}

int tbx__pg_connect(const char *conninfo, tbx__pg_t **out, char *errstr,
		    size_t errstr_size)
{
	char *err = NULL;
	PQconninfoOption *opts;
	tbx__pg_t *pg;
	int rc;

	*out = NULL;
	/* Parsed first, so that a malformed string is a configuration error
	 * and never reaches a log line whole. */
	opts = PQconninfoParse(conninfo, &err);
	if (!opts) {
		char red[256];
		size_t n = err ? strlen(err) : 0;
		while (n && (err[n - 1] == '\n' || err[n - 1] == ' '))
			err[--n] = '\0';
		rc = tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				 "%s: not a valid PostgreSQL connection "
				 "string: %s",
				 tbx__pg_redact(conninfo, red, sizeof(red)),
				 err ? tbx__pg_censor(conninfo, err)
				     : "out of memory");
		PQfreemem(err);
		return rc;
	}
	PQconninfoFree(opts);
	pg = calloc(1, sizeof(*pg));
	if (!pg || !(pg->conninfo = strdup(conninfo))) {
		free(pg);
		return tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				   "out of memory");
	}
	pg->refs = 1;
	tbx__pg_redact(conninfo, pg->where, sizeof(pg->where));
	if ((rc = open_conn(pg))) {
		tbx__seterr(errstr, errstr_size, rc, "%s: %s", pg->where,
			    pg->errmsg);
		free(pg->conninfo);
		free(pg);
		return rc;
	}
	*out = pg;
	return TBX_OK;
}

tbx__pg_t *tbx__pg_ref(tbx__pg_t *pg)
{
	pg->refs++;
	return pg;
}

static void dq_drop(tbx__pg_t *pg, int from);

void tbx__pg_unref(tbx__pg_t *pg)
{
	if (!pg || --pg->refs > 0)
		return;
	dq_drop(pg, 0);
	free(pg->dq);
	for (size_t i = 0; i < sizeof(pg->qc) / sizeof(pg->qc[0]); i++)
		free(pg->qc[i].sql);
	if (pg->conn)
		PQfinish(pg->conn);
	/* The string may hold a password: not left in freed memory. */
	explicit_bzero(pg->conninfo, strlen(pg->conninfo));
	free(pg->conninfo);
	free(pg);
}

/* 1 when the connection is gone (the server ended it, the network cut
 * it, or it was never remade). */
static int lost(const tbx__pg_t *pg)
{
	return !pg->conn || PQstatus(pg->conn) != CONNECTION_OK;
}

/* Makes the connection again after it was lost. */
static int reconnect(tbx__pg_t *pg)
{
	int err;

	if (pg->conn) {
		PQfinish(pg->conn);
		pg->conn = NULL;
	}
	if ((err = open_conn(pg))) {
		tbx__log(TBX_LOG_ERR, "postgresql: %s: reconnecting failed: %s",
			 pg->where, pg->errmsg);
		return err;
	}
	tbx__log(TBX_LOG_WARNING,
		 "postgresql: %s: the connection was lost and is made again",
		 pg->where);
	return TBX_OK;
}

/* SQLSTATE classes and codes tokenbox tells apart. */
static int map_state(const char *state)
{
	if (!state)
		return TBX_ESTORE;
	if (!strcmp(state, "40001") || !strcmp(state, "40P01") ||
	    !strcmp(state, "55P03"))
		return TBX_EBUSY;
	if (!strcmp(state, "53100") || !strncmp(state, "58", 2))
		return TBX_EIO;
	return TBX_ESTORE;
}

/* Logs a failed call and maps it. */
static int failed(tbx__pg_t *pg, const char *what, const PGresult *res)
{
	const char *state =
	    res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	int err = map_state(state);

	tbx__strlcpy(pg->state, state ? state : "", sizeof(pg->state));
	keep_msg(pg, res && *PQresultErrorMessage(res)
			 ? PQresultErrorMessage(res)
			 : PQerrorMessage(pg->conn));
	if (lost(pg))
		err = TBX_ESTORE;
	tbx__log(err == TBX_EBUSY ? TBX_LOG_WARNING : TBX_LOG_ERR,
		 "postgresql: %s: %s: %s%s%s", pg->where, what, pg->errmsg,
		 state ? " SQLSTATE " : "", state ? state : "");
	return err;
}

/* Countdown faults (store/db.h).  "connection lost" mode shuts the
 * socket down under libpq, as a network cut does. */
static int fault_conn_loss;

void tbx__fault_pg_conn_loss(int on)
{
	fault_conn_loss = on;
}

/* 1: fail the call @p what now, with @p *err. */
static int fault(tbx__pg_t *pg, const char *what, int *err)
{
	if (!tbx__db_fault_hit(what))
		return 0;
	if (fault_conn_loss && pg->conn) {
		shutdown(PQsocket(pg->conn), SHUT_RDWR);
		return 0; /* the call itself fails on the dead socket */
	}
	snprintf(pg->errmsg, sizeof(pg->errmsg), "fault injected");
	*err = TBX_EIO;
	return 1;
}

/* A statement of tbx__pg_defer(), its parameters copied. */
struct tbx__pg_dq {
	char *sql; /* a text (tbx__pg_defer_text()); else stmts, q */
	tbx__pg_stmts_t *stmts;
	int q;
	int n;
	char *vals[TBX_PG_MAX_PARAMS];
	int lens[TBX_PG_MAX_PARAMS];
	int fmts[TBX_PG_MAX_PARAMS];
	uint64_t *changes;
	int expect;
	char what[96];
};

/* More queued than this and they go before the next one is queued: the
 * server's answers to a pipeline wait in its socket buffer until the
 * pipeline is read, which must not fill up. */
#define DQ_MAX 64

static void dq_drop(tbx__pg_t *pg, int from)
{
	for (int i = from; i < pg->dq_cnt; i++) {
		for (int k = 0; k < pg->dq[i].n; k++)
			free(pg->dq[i].vals[k]);
		free(pg->dq[i].sql);
	}
	if (from < pg->dq_cnt)
		pg->dq_cnt = from;
	if (pg->dq_mark > pg->dq_cnt)
		pg->dq_mark = pg->dq_cnt;
}

/* Forgets the deferred savepoint and statements: the transaction ended. */
static void sp_clear(tbx__pg_t *pg)
{
	pg->sp_name[0] = '\0';
	pg->sp_send = pg->sp_release = 0;
	pg->sp_err = TBX_OK;
	dq_drop(pg, 0);
	pg->dq_mark = 0;
}

/* Runs a parameterless statement outside the cache. */
static int exec_plain(tbx__pg_t *pg, const char *sql)
{
	PGresult *res;
	int err = TBX_OK;

	if (lost(pg))
		return failed(pg, sql, NULL);
	res = PQexec(pg->conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK &&
	    PQresultStatus(res) != PGRES_TUPLES_OK)
		err = failed(pg, sql, res);
	PQclear(res);
	return err;
}

/*
 * One statement of a pipeline: a prepared one of a table (stmts, q) or a
 * text (sql, not prepared), with its parameters; dq when it is a
 * deferred one.
 */
typedef struct pipe_item {
	tbx__pg_stmts_t *stmts;
	int q;
	const char *sql;
	int n;
	const char *const *vals;
	const int *lens;
	const int *fmts;
	int rfmt; /* results: 1 binary, 0 text */
	struct tbx__pg_dq *dq;
	int prep;    /* sent PQsendPrepare first (a result of its own) */
	int dealloc; /* and DEALLOCATE before that (one more) */
	int qslot;   /* a text's slot of pg->qc once it is sent */
} pipe_item_t;

static const char *item_sql(const pipe_item_t *it)
{
	return it->stmts ? it->stmts->sql[it->q] : it->sql;
}

static int64_t res_changes(const PGresult *res)
{
	const char *t = PQcmdTuples((PGresult *)res);

	return t && *t ? strtoll(t, NULL, 10) : 0;
}

/* The slot of pg->qc for @p sql: the one that holds it on this
 * connection (*prep 0), else the least recently used, to be prepared
 * again (*prep 1; *dealloc 1 when its old text is prepared on this
 * connection and must go first).  -1 without memory. */
static int qc_slot(tbx__pg_t *pg, const char *sql, int *prep, int *dealloc)
{
	size_t n = sizeof(pg->qc) / sizeof(pg->qc[0]), pick = 0;
	int pick_free = 0;

	*prep = *dealloc = 0;
	pg->qc_tick++;
	for (size_t i = 0; i < n; i++) {
		int live = pg->qc[i].sql && pg->qc[i].gen == pg->gen;

		if (live && !strcmp(pg->qc[i].sql, sql)) {
			pg->qc[i].used = pg->qc_tick;
			return (int)i;
		}
		if (!live && !pick_free)
			pick = i, pick_free = 1;
		else if (live && !pick_free &&
			 pg->qc[i].used < pg->qc[pick].used)
			pick = i;
	}
	*dealloc = !pick_free;
	free(pg->qc[pick].sql);
	pg->qc[pick].gen = 0;
	if (!(pg->qc[pick].sql = strdup(sql)))
		return -1;
	pg->qc[pick].gen = pg->gen;
	pg->qc[pick].used = pg->qc_tick;
	*prep = 1;
	return (int)pick;
}

/* Forgets a slot whose DEALLOCATE or PREPARE failed. */
static void qc_drop(tbx__pg_t *pg, int slot)
{
	free(pg->qc[slot].sql);
	pg->qc[slot].sql = NULL;
	pg->qc[slot].gen = 0;
}

/* Sends one item (its PQsendPrepare first when this connection has not
 * prepared it).  @returns 1 when sent. */
static int item_send(tbx__pg_t *pg, pipe_item_t *it)
{
	char name[24];

	if (!it->stmts) {
		it->qslot = qc_slot(pg, it->sql, &it->prep, &it->dealloc);
		if (it->qslot < 0) {
			it->prep = it->dealloc = 0;
			return PQsendQueryParams(pg->conn, it->sql, it->n, NULL,
						 it->vals, it->lens, it->fmts,
						 it->rfmt);
		}
		snprintf(name, sizeof(name), "tbx_q%d", it->qslot);
		if (it->dealloc) {
			char sql[40];

			snprintf(sql, sizeof(sql), "DEALLOCATE %s", name);
			if (!PQsendQueryParams(pg->conn, sql, 0, NULL, NULL,
					       NULL, NULL, 0))
				return 0;
		}
		if (it->prep &&
		    !PQsendPrepare(pg->conn, name, it->sql, 0, NULL))
			return 0;
		return PQsendQueryPrepared(pg->conn, name, it->n, it->vals,
					   it->lens, it->fmts, it->rfmt);
	}
	snprintf(name, sizeof(name), "tbx_%s%d", it->stmts->prefix, it->q);
	if (it->stmts->gen[it->q] != pg->gen) {
		if (!PQsendPrepare(pg->conn, name, it->stmts->sql[it->q], 0,
				   NULL))
			return 0;
		/* Once per pipeline: a later item of the same statement
		 * uses it (undone when the PREPARE fails). */
		it->stmts->gen[it->q] = pg->gen;
		it->prep = 1;
	}
	return PQsendQueryPrepared(pg->conn, name, it->n, it->vals, it->lens,
				   it->fmts, it->rfmt);
}

/* Reads one statement's result: its PGresult (NULL when the connection
 * broke) and the NULL that ends it. */
static PGresult *item_result(tbx__pg_t *pg)
{
	PGresult *res = PQgetResult(pg->conn), *more;

	if (res)
		while ((more = PQgetResult(pg->conn)))
			PQclear(more);
	return res;
}

/* Records the failed result @p r of @p it in *@p to (the caller's own
 * error for its statement, else the pipeline's), unless an earlier item
 * failed already (@p seen) or it only followed one (aborted). */
static void item_failed(tbx__pg_t *pg, const pipe_item_t *it, const PGresult *r,
			int *to, int seen)
{
	if (!seen && PQresultStatus(r) != PGRES_PIPELINE_ABORTED)
		*to = failed(pg, item_sql(it), r);
}

/*
 * Sends what is deferred -- the statements queued before the record's
 * savepoint, "RELEASE SAVEPOINT x" / "SAVEPOINT x", the statements
 * queued after it -- and @p fin (may be NULL), in one pipeline: one
 * round trip.  A failure before @p fin is kept (pg->sp_err): every call
 * fails until the transaction ends.  A failure of @p fin alone is its
 * caller's, as a statement's of its own would be.  Every item is a
 * countdown fault point (store/db.h), as a call of its own would be.
 */
static int pipe_run(tbx__pg_t *pg, pipe_item_t *fin, PGresult **res)
{
	int cnt = pg->dq_cnt + (fin ? 1 : 0) + 2, n = 0, sp_at = -1;
	int err = TBX_OK, fin_err = TBX_OK, broke = 0;
	char rel[64], sav[64];
	pipe_item_t few[16], *items = few;

	if (res)
		*res = NULL;
	if (cnt > (int)(sizeof(few) / sizeof(few[0])) &&
	    !(items = calloc((size_t)cnt, sizeof(*items))))
		return TBX_ENOMEM;
	for (int i = 0; i <= pg->dq_cnt; i++) {
		if (i == pg->dq_mark && (pg->sp_release || pg->sp_send)) {
			sp_at = n;
			if (pg->sp_release) {
				snprintf(rel, sizeof(rel),
					 "RELEASE SAVEPOINT %s", pg->sp_name);
				items[n++] = (pipe_item_t){.sql = rel};
			}
			if (pg->sp_send) {
				snprintf(sav, sizeof(sav), "SAVEPOINT %s",
					 pg->sp_name);
				items[n++] = (pipe_item_t){.sql = sav};
			}
		}
		if (i < pg->dq_cnt) {
			struct tbx__pg_dq *d = &pg->dq[i];

			/* A text's rows are dropped; a table's come in
			 * binary. */
			items[n++] =
			    (pipe_item_t){.stmts = d->stmts,
					  .q = d->q,
					  .sql = d->sql,
					  .n = d->n,
					  .vals = (const char *const *)d->vals,
					  .lens = d->lens,
					  .fmts = d->fmts,
					  .rfmt = d->sql == NULL,
					  .dq = d};
		}
	}
	if (fin)
		items[n++] = *fin;
	/* The fault points, in order; the savepoint's commands are one. */
	for (int i = 0; i < n && !err; i++) {
		if (sp_at >= 0 && i == sp_at + 1 && !items[i].stmts &&
		    items[sp_at].sql == rel && items[i].sql == sav)
			continue;
		if (fault(pg, item_sql(&items[i]), &err) && fin && i == n - 1) {
			/* Only the caller's statement: nothing was sent. */
			if (items != few)
				free(items);
			return err;
		}
	}
	if (!err && lost(pg))
		err = failed(pg, item_sql(&items[0]), NULL);
	if (!err && !PQenterPipelineMode(pg->conn))
		err = failed(pg, "pipeline", NULL);
	if (err)
		goto out;
	int sent = 0;
	for (; sent < n; sent++)
		if (!item_send(pg, &items[sent]))
			break;
	if (!PQpipelineSync(pg->conn))
		broke = 1;
	for (int i = 0; i < sent && !broke; i++) {
		PGresult *r;
		ExecStatusType st;

		/* DEALLOCATE (k 0), then PREPARE (k 1), when sent. */
		for (int k = !items[i].dealloc; k < 2 && items[i].prep; k++) {
			if (!(r = item_result(pg))) {
				broke = 1;
				break;
			}
			if (PQresultStatus(r) != PGRES_COMMAND_OK) {
				if (items[i].stmts)
					items[i].stmts->gen[items[i].q] = 0;
				else
					qc_drop(pg, items[i].qslot);
			}
			if (PQresultStatus(r) != PGRES_COMMAND_OK)
				item_failed(pg, &items[i], r,
					    fin && i == n - 1 ? &fin_err : &err,
					    err || fin_err);
			PQclear(r);
		}
		if (broke)
			break;
		if (!(r = item_result(pg))) {
			broke = 1;
			break;
		}
		st = PQresultStatus(r);
		if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
			struct tbx__pg_dq *d = items[i].dq;
			int64_t ch = res_changes(r);

			if (d && d->changes)
				*d->changes += (uint64_t)ch;
			if (d && d->expect && ch != d->expect && !err) {
				snprintf(pg->errmsg, sizeof(pg->errmsg),
					 "%s: a conflicting row exists",
					 d->what);
				tbx__log(TBX_LOG_WARNING, "postgresql: %s: %s",
					 pg->where, pg->errmsg);
				err = TBX_EEXIST;
			}
			if (fin && i == n - 1 && res && !err)
				*res = r;
			else
				PQclear(r);
			continue;
		}
		item_failed(pg, &items[i], r,
			    fin && i == n - 1 ? &fin_err : &err,
			    err || fin_err);
		PQclear(r);
	}
	if (!broke) {
		/* The sync point ends the pipeline. */
		PGresult *r = PQgetResult(pg->conn);

		if (!r || PQresultStatus(r) != PGRES_PIPELINE_SYNC)
			broke = 1;
		PQclear(r);
	}
	if (broke || sent < n || !PQexitPipelineMode(pg->conn)) {
		/* The connection broke under the pipeline (or is in a state
		 * that cannot be read any more): it is made again at the
		 * next BEGIN. */
		if (!err && !fin_err)
			err = failed(pg, item_sql(&items[sent < n ? sent : 0]),
				     NULL);
		if (!lost(pg)) {
			PQfinish(pg->conn);
			pg->conn = NULL;
		}
		err = err ? err : TBX_ESTORE;
	}
out:
	if (err) {
		/* Kept until the transaction ends; outside one there is
		 * nothing to keep it for. */
		if (pg->in_tx)
			pg->sp_err = err;
		if (res && *res) {
			PQclear(*res);
			*res = NULL;
		}
	}
	/* Sent: the savepoint is on the server, the release done. */
	if (pg->sp_send)
		pg->sp_send = 0;
	else if (pg->sp_release)
		pg->sp_name[0] = '\0';
	pg->sp_release = 0;
	dq_drop(pg, 0);
	pg->dq_mark = 0;
	if (items != few)
		free(items);
	return err ? err : fin_err;
}

/* What tbx__pg_run() and tbx__pg_defer() refuse before anything is sent:
 * a statement the table does not have, a parameter that failed, a
 * deferred failure of the transaction. */
static int run_check(const tbx__pg_stmts_t *stmts, int q,
		     const tbx__pg_params_t *params)
{
	if (q < 0 || q >= stmts->count || !stmts->sql[q])
		return TBX_EINVAL;
	if (params && params->err)
		return params->err;
	return stmts->pg->sp_err;
}

/* Copies @p n parameters into @p d: @p vals, binary where @p fmts says
 * so (@p lens bytes), else text; @p lens and @p fmts NULL: all text.
 * On failure nothing of them is kept.  @returns TBX_OK or TBX_ENOMEM. */
static int dq_params(struct tbx__pg_dq *d, int n, const char *const *vals,
		     const int *lens, const int *fmts)
{
	for (int i = 0; i < n; i++) {
		const char *v = vals[i];
		int fmt = fmts ? fmts[i] : 0;
		size_t len = fmt ? (size_t)lens[i] : (v ? strlen(v) + 1 : 0);

		d->lens[i] = lens ? lens[i] : 0;
		d->fmts[i] = fmt;
		d->n = i + 1;
		if (!v)
			continue;
		if (!(d->vals[i] = malloc(len ? len : 1))) {
			for (int k = 0; k < i; k++)
				free(d->vals[k]);
			return TBX_ENOMEM;
		}
		memcpy(d->vals[i], v, len);
	}
	return TBX_OK;
}

/* The next free entry of the queue, cleared (not counted yet: the
 * caller does pg->dq_cnt++ once it is filled); what is queued goes first
 * when the queue is full. */
static int dq_slot(tbx__pg_t *pg, struct tbx__pg_dq **d)
{
	int err;

	if (pg->dq_cnt >= DQ_MAX && (err = tbx__pg_flush(pg)))
		return err;
	if (pg->dq_cnt == pg->dq_cap) {
		int cap = pg->dq_cap ? pg->dq_cap * 2 : 16;
		void *p = realloc(pg->dq, (size_t)cap * sizeof(*pg->dq));

		if (!p)
			return TBX_ENOMEM;
		pg->dq = p;
		pg->dq_cap = cap;
	}
	*d = &pg->dq[pg->dq_cnt];
	memset(*d, 0, sizeof(**d));
	return TBX_OK;
}

int tbx__pg_defer(tbx__pg_stmts_t *stmts, int q, const tbx__pg_params_t *params,
		  uint64_t *changes, int expect, const char *what)
{
	tbx__pg_t *pg = stmts->pg;
	struct tbx__pg_dq *d;
	int err;

	if ((err = run_check(stmts, q, params)))
		return err;
	if (!pg->in_tx) {
		PGresult *res;
		int64_t ch;

		if ((err = tbx__pg_run(stmts, q, params, &res)))
			return err;
		ch = res_changes(res);
		PQclear(res);
		if (changes)
			*changes += (uint64_t)ch;
		if (expect && ch != expect) {
			snprintf(pg->errmsg, sizeof(pg->errmsg),
				 "%s: a conflicting row exists", what);
			return TBX_EEXIST;
		}
		return TBX_OK;
	}
	if ((err = dq_slot(pg, &d)))
		return err;
	d->stmts = stmts;
	d->q = q;
	d->changes = changes;
	d->expect = expect;
	tbx__strlcpy(d->what, what ? what : stmts->sql[q], sizeof(d->what));
	if (params && (err = dq_params(d, params->n, params->vals, params->lens,
				       params->fmts)))
		return err;
	pg->dq_cnt++;
	return TBX_OK;
}

int tbx__pg_defer_text(tbx__pg_t *pg, const char *sql, int n,
		       const char *const *vals)
{
	struct tbx__pg_dq *d;
	int err;

	if (!pg->in_tx)
		return TBX_ESTATE;
	if (n < 0 || n > TBX_PG_MAX_PARAMS)
		return TBX_EINVAL;
	if (pg->sp_err)
		return pg->sp_err;
	if ((err = dq_slot(pg, &d)))
		return err;
	if (!(d->sql = strdup(sql)))
		return TBX_ENOMEM;
	tbx__strlcpy(d->what, sql, sizeof(d->what));
	if ((err = dq_params(d, n, vals, NULL, NULL))) {
		free(d->sql);
		return err;
	}
	pg->dq_cnt++;
	pg->dq_texts++;
	return TBX_OK;
}

int tbx__pg_query(tbx__pg_t *pg, const char *sql, int n,
		  const char *const *vals, PGresult **res)
{
	pipe_item_t fin = {.sql = sql, .n = n, .vals = vals};

	*res = NULL;
	pg->state[0] = '\0';
	if (pg->sp_err)
		return pg->sp_err;
	/* A pipeline of one when nothing is deferred: one round trip, as
	 * PQexecParams() would be, with the text prepared once. */
	return pipe_run(pg, &fin, res);
}

int tbx__pg_exec(tbx__pg_t *pg, const char *sql)
{
	int err;

	if ((err = tbx__pg_flush(pg)))
		return err;
	if (fault(pg, sql, &err))
		return err;
	return exec_plain(pg, sql);
}

int tbx__pg_savepoint(tbx__pg_t *pg, const char *name)
{
	if (!pg->in_tx)
		return TBX_ESTATE;
	if (strlen(name) >= sizeof(pg->sp_name) ||
	    (pg->sp_name[0] && strcmp(pg->sp_name, name) != 0))
		return TBX_EINVAL;
	if (pg->sp_err)
		return pg->sp_err;
	tbx__strlcpy(pg->sp_name, name, sizeof(pg->sp_name));
	pg->sp_send = 1;
	pg->dq_mark = pg->dq_cnt;
	return TBX_OK;
}

int tbx__pg_release(tbx__pg_t *pg)
{
	if (pg->sp_err)
		return pg->sp_err;
	if (!pg->sp_name[0])
		return TBX_ESTATE;
	if (pg->sp_send) {
		/* Never sent: nothing to release, unless a release of the
		 * one before is still due. */
		pg->sp_send = 0;
		if (!pg->sp_release)
			pg->sp_name[0] = '\0';
	} else {
		pg->sp_release = 1;
	}
	return TBX_OK;
}

int tbx__pg_flush(tbx__pg_t *pg)
{
	char sql[128];
	int err;

	if (pg->sp_err)
		return pg->sp_err;
	if (pg->dq_cnt)
		return pipe_run(pg, NULL, NULL);
	if (!pg->sp_send && !pg->sp_release)
		return TBX_OK;
	snprintf(sql, sizeof(sql), "%s%s%s%s%s",
		 pg->sp_release ? "RELEASE SAVEPOINT " : "",
		 pg->sp_release ? pg->sp_name : "",
		 pg->sp_release && pg->sp_send ? "; " : "",
		 pg->sp_send ? "SAVEPOINT " : "",
		 pg->sp_send ? pg->sp_name : "");
	if (!pg->sp_send)
		pg->sp_name[0] = '\0';
	pg->sp_send = pg->sp_release = 0;
	if (fault(pg, sql, &err) || (err = exec_plain(pg, sql)))
		pg->sp_err = err;
	return err;
}

int tbx__pg_undo(tbx__pg_t *pg)
{
	char sql[128];
	int err;

	if (pg->sp_err)
		return pg->sp_err;
	if (!pg->sp_name[0])
		return TBX_ESTATE;
	if (pg->sp_release && !pg->sp_send)
		return TBX_ESTATE; /* released already */
	/* What was queued inside it never ran. */
	dq_drop(pg, pg->dq_mark);
	if (pg->sp_send) {
		/* Never sent, so nothing ran after it. */
		pg->sp_send = 0;
		if (!pg->sp_release)
			pg->sp_name[0] = '\0';
		return TBX_OK;
	}
	snprintf(sql, sizeof(sql),
		 "ROLLBACK TO SAVEPOINT %s; RELEASE SAVEPOINT %s", pg->sp_name,
		 pg->sp_name);
	pg->sp_name[0] = '\0';
	if (fault(pg, sql, &err) || (err = exec_plain(pg, sql)))
		pg->sp_err = err;
	return err;
}

int tbx__pg_begin(tbx__pg_t *pg)
{
	int err;

	if (pg->in_tx) {
		tbx__log(TBX_LOG_ERR,
			 "postgresql: %s: BEGIN inside a "
			 "transaction",
			 pg->where);
		return TBX_ESTATE;
	}
	if (lost(pg) && (err = reconnect(pg)))
		return err;
	if (fault(pg, "BEGIN", &err))
		return err;
	if ((err = exec_plain(pg, "BEGIN ISOLATION LEVEL READ COMMITTED")))
		return err;
	sp_clear(pg);
	pg->dq_texts = 0;
	pg->in_tx = 1;
	return TBX_OK;
}

int tbx__pg_commit(tbx__pg_t *pg)
{
	PGresult *res;
	int err = TBX_OK;

	pg->in_tx = 0;
	if (pg->sp_err) {
		err = pg->sp_err;
		tbx__pg_rollback(pg);
		return err;
	}
	if (pg->dq_cnt) {
		/* COMMIT releases every savepoint: only what is queued is
		 * still to be sent. */
		pg->sp_send = pg->sp_release = 0;
		if ((err = pipe_run(pg, NULL, NULL))) {
			tbx__pg_rollback(pg);
			return err;
		}
	}
	sp_clear(pg); /* COMMIT releases every savepoint */
	if (fault(pg, "COMMIT", &err)) {
		tbx__pg_rollback(pg);
		return err;
	}
	if (lost(pg))
		return failed(pg, "COMMIT", NULL);
	res = PQexec(pg->conn, "COMMIT");
	/* A transaction that failed earlier answers COMMIT with ROLLBACK:
	 * a success status, but nothing committed. */
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		err = failed(pg, "COMMIT", res);
	else if (strcmp(PQcmdStatus(res), "COMMIT") != 0) {
		snprintf(pg->errmsg, sizeof(pg->errmsg),
			 "the transaction had failed and was rolled back");
		tbx__log(TBX_LOG_ERR, "postgresql: %s: COMMIT: %s", pg->where,
			 pg->errmsg);
		err = TBX_ESTORE;
	}
	PQclear(res);
	return err;
}

void tbx__pg_rollback(tbx__pg_t *pg)
{
	PGresult *res;

	pg->in_tx = 0;
	sp_clear(pg);
	if (lost(pg))
		return;
	res = PQexec(pg->conn, "ROLLBACK");
	PQclear(res);
}

void tbx__pgp_init(tbx__pg_params_t *p)
{
	memset(p, 0, sizeof(*p));
}

void tbx__pgp_free(tbx__pg_params_t *p)
{
	for (int i = 0; i < p->n; i++)
		free(p->owned[i]);
	p->n = 0;
}

/* The next slot, or NULL when full (recorded). */
static int slot(tbx__pg_params_t *p)
{
	if (p->n >= TBX_PG_MAX_PARAMS) {
		if (!p->err)
			p->err = TBX_EINVAL;
		return -1;
	}
	p->vals[p->n] = NULL;
	p->lens[p->n] = 0;
	p->fmts[p->n] = 0;
	p->owned[p->n] = NULL;
	return p->n++;
}

void tbx__pgp_text(tbx__pg_params_t *p, const char *s)
{
	int i = slot(p);
	if (i >= 0)
		p->vals[i] = s;
}

void tbx__pgp_opt_text(tbx__pg_params_t *p, const char *s)
{
	tbx__pgp_text(p, s && *s ? s : NULL);
}

void tbx__pgp_i64(tbx__pg_params_t *p, int64_t v)
{
	int i = slot(p);
	if (i < 0)
		return;
	snprintf(p->nums[i], sizeof(p->nums[i]), "%" PRId64, v);
	p->vals[i] = p->nums[i];
}

void tbx__pgp_bytea(tbx__pg_params_t *p, const void *v, size_t len)
{
	int i = slot(p);
	if (i < 0)
		return;
	if (len > INT32_MAX) {
		if (!p->err)
			p->err = TBX_EINVAL;
		return;
	}
	/* A non-NULL pointer for an empty value: libpq reads NULL as SQL
	 * NULL. */
	p->vals[i] = v ? (len ? v : "") : NULL;
	p->lens[i] = (int)len;
	p->fmts[i] = 1;
}

/* Appends @p s quoted as an array element to the growing @p buf. */
static int append_elem(char **buf, size_t *len, size_t *cap, const char *s,
		       size_t n)
{
	size_t need = *len + 2 * n + 4;

	if (need > *cap) {
		size_t ncap = *cap ? *cap : 64;
		char *nb;
		while (ncap < need)
			ncap *= 2;
		if (!(nb = realloc(*buf, ncap)))
			return TBX_ENOMEM;
		*buf = nb;
		*cap = ncap;
	}
	if (*len > 1)
		(*buf)[(*len)++] = ',';
	(*buf)[(*len)++] = '"';
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"' || s[i] == '\\')
			(*buf)[(*len)++] = '\\';
		(*buf)[(*len)++] = s[i];
	}
	(*buf)[(*len)++] = '"';
	(*buf)[*len] = '\0';
	return TBX_OK;
}

/* Builds "{…}" from @p n strings got through @p get. */
static void text_array(tbx__pg_params_t *p, size_t n,
		       const char *(*get)(const void *ctx, size_t i),
		       const void *ctx)
{
	char *buf = malloc(64);
	size_t len = 1, cap = 64;
	int i = slot(p);

	if (i < 0) {
		free(buf);
		return;
	}
	if (!buf)
		goto nomem;
	buf[0] = '{';
	buf[1] = '\0';
	for (size_t k = 0; k < n; k++) {
		const char *s = get(ctx, k);
		if (append_elem(&buf, &len, &cap, s, strlen(s)))
			goto nomem;
	}
	if (len + 2 > cap) {
		char *nb = realloc(buf, len + 2);
		if (!nb)
			goto nomem;
		buf = nb;
	}
	buf[len++] = '}';
	buf[len] = '\0';
	p->vals[i] = p->owned[i] = buf;
	return;
nomem:
	free(buf);
	if (!p->err)
		p->err = TBX_ENOMEM;
}

static const char *get_ptr(const void *ctx, size_t i)
{
	return ((const char *const *)ctx)[i];
}

void tbx__pgp_text_array(tbx__pg_params_t *p, const char *const *v, size_t n)
{
	text_array(p, n, get_ptr, v);
}

struct strided {
	const char *base;
	size_t stride;
};

static const char *get_strided(const void *ctx, size_t i)
{
	const struct strided *s = ctx;
	return s->base + i * s->stride;
}

void tbx__pgp_text_array_of(tbx__pg_params_t *p, const void *base,
			    size_t stride, size_t n)
{
	struct strided s = {base, stride};
	text_array(p, n, get_strided, &s);
}

static void put_be32(unsigned char *b, uint32_t v)
{
	b[0] = (unsigned char)(v >> 24);
	b[1] = (unsigned char)(v >> 16);
	b[2] = (unsigned char)(v >> 8);
	b[3] = (unsigned char)v;
}

/* The binary form array_recv() reads: dimensions, a flag for NULLs, the
 * element type, each dimension's length and lower bound, then each
 * element as its length and bytes. */
void tbx__pgp_bytea_array(tbx__pg_params_t *p, const void *const *v,
			  const size_t *lens, size_t n)
{
	size_t len = 20, at = 0;
	unsigned char *buf;
	int i = slot(p);

	if (i < 0)
		return;
	for (size_t k = 0; k < n; k++) {
		if (lens[k] > INT32_MAX || len > INT32_MAX - 4 - lens[k]) {
			if (!p->err)
				p->err = TBX_EINVAL;
			return;
		}
		len += 4 + lens[k];
	}
	if (!(buf = malloc(len))) {
		if (!p->err)
			p->err = TBX_ENOMEM;
		return;
	}
	put_be32(buf, 1);		 /* one dimension */
	put_be32(buf + 4, 0);		 /* no NULLs */
	put_be32(buf + 8, 17);		 /* bytea's type oid */
	put_be32(buf + 12, (uint32_t)n); /* its length */
	put_be32(buf + 16, 1);		 /* its lower bound */
	at = 20;
	for (size_t k = 0; k < n; k++) {
		put_be32(buf + at, (uint32_t)lens[k]);
		at += 4;
		if (lens[k])
			memcpy(buf + at, v[k], lens[k]);
		at += lens[k];
	}
	p->vals[i] = p->owned[i] = (char *)buf;
	p->lens[i] = (int)len;
	p->fmts[i] = 1;
}

void tbx__pgp_i64_array(tbx__pg_params_t *p, const int64_t *v, size_t n)
{
	size_t cap = 2 + n * 21, len = 1;
	char *buf = malloc(cap + 1);
	int i = slot(p);

	if (i < 0) {
		free(buf);
		return;
	}
	if (!buf) {
		if (!p->err)
			p->err = TBX_ENOMEM;
		return;
	}
	buf[0] = '{';
	for (size_t k = 0; k < n; k++)
		len += (size_t)snprintf(buf + len, cap + 1 - len, "%s%" PRId64,
					k ? "," : "", v[k]);
	buf[len++] = '}';
	buf[len] = '\0';
	p->vals[i] = p->owned[i] = buf;
}

/* Writes @p name quoted as an identifier. */
static size_t quote_ident(char *out, const char *name)
{
	size_t n = 0;
	out[n++] = '"';
	for (; *name; name++) {
		if (*name == '"')
			out[n++] = '"';
		out[n++] = *name;
	}
	out[n++] = '"';
	return n;
}

/* @p tmpl with @S and @T replaced; malloc'ed. */
static char *fill(const char *tmpl, const char *s_schema, const char *t_schema)
{
	size_t len = strlen(tmpl), extra = 0, n = 0;
	char *out;

	for (const char *p = tmpl; *p; p++)
		if (p[0] == '@' && (p[1] == 'S' || p[1] == 'T'))
			extra += 2 * TBX_PG_IDENT_MAX + 2;
	if (!(out = malloc(len + extra + 1)))
		return NULL;
	for (const char *p = tmpl; *p; p++) {
		if (p[0] == '@' && (p[1] == 'S' || p[1] == 'T')) {
			const char *schema = p[1] == 'S' ? s_schema : t_schema;
			n += quote_ident(out + n, schema ? schema : "public");
			p++;
		} else {
			out[n++] = *p;
		}
	}
	out[n] = '\0';
	return out;
}

int tbx__pg_stmts_init(tbx__pg_stmts_t *stmts, tbx__pg_t *pg,
		       const char *prefix, const char *const *tmpl, int count,
		       const char *s_schema, const char *t_schema)
{
	memset(stmts, 0, sizeof(*stmts));
	stmts->pg = pg;
	tbx__strlcpy(stmts->prefix, prefix, sizeof(stmts->prefix));
	stmts->sql = calloc((size_t)count, sizeof(*stmts->sql));
	stmts->gen = calloc((size_t)count, sizeof(*stmts->gen));
	stmts->count = count;
	if (!stmts->sql || !stmts->gen)
		goto nomem;
	for (int i = 0; i < count; i++)
		if (tmpl[i] &&
		    !(stmts->sql[i] = fill(tmpl[i], s_schema, t_schema)))
			goto nomem;
	return TBX_OK;
nomem:
	tbx__pg_stmts_free(stmts);
	return TBX_ENOMEM;
}

void tbx__pg_stmts_free(tbx__pg_stmts_t *stmts)
{
	if (stmts->sql)
		for (int i = 0; i < stmts->count; i++)
			free(stmts->sql[i]);
	free(stmts->sql);
	free(stmts->gen);
	stmts->sql = NULL;
	stmts->gen = NULL;
	stmts->count = 0;
}

int tbx__pg_run(tbx__pg_stmts_t *stmts, int q, const tbx__pg_params_t *params,
		PGresult **res)
{
	tbx__pg_t *pg = stmts->pg;
	PGresult *r;
	char name[24];
	int err = TBX_OK;

	if (res)
		*res = NULL;
	if ((err = run_check(stmts, q, params)))
		return err;
	if (pg->dq_cnt || pg->sp_send || pg->sp_release) {
		pipe_item_t fin = {.stmts = stmts, .q = q, .rfmt = 1};

		if (params) {
			fin.n = params->n;
			fin.vals = params->vals;
			fin.lens = params->lens;
			fin.fmts = params->fmts;
		}
		return pipe_run(pg, &fin, res);
	}
	snprintf(name, sizeof(name), "tbx_%s%d", stmts->prefix, q);
	if (fault(pg, stmts->sql[q], &err))
		return err;
	if (lost(pg))
		return failed(pg, name, NULL);
	if (stmts->gen[q] != pg->gen) {
		r = PQprepare(pg->conn, name, stmts->sql[q], 0, NULL);
		if (PQresultStatus(r) != PGRES_COMMAND_OK) {
			err = failed(pg, stmts->sql[q], r);
			PQclear(r);
			return err;
		}
		PQclear(r);
		stmts->gen[q] = pg->gen;
	}
	r = PQexecPrepared(pg->conn, name, params ? params->n : 0,
			   params ? params->vals : NULL,
			   params ? params->lens : NULL,
			   params ? params->fmts : NULL, 1);
	if (PQresultStatus(r) != PGRES_COMMAND_OK &&
	    PQresultStatus(r) != PGRES_TUPLES_OK) {
		err = failed(pg, stmts->sql[q], r);
		PQclear(r);
		return err;
	}
	if (res)
		*res = r;
	else
		PQclear(r);
	return TBX_OK;
}

int tbx__pg_run_i64(tbx__pg_stmts_t *stmts, int q,
		    const tbx__pg_params_t *params, int64_t *n, int *found)
{
	PGresult *res;
	int err;

	*n = 0;
	if (found)
		*found = 0;
	if ((err = tbx__pg_run(stmts, q, params, &res)))
		return err;
	if (PQntuples(res) > 0 && PQnfields(res) > 0) {
		*n = tbx__pg_i64(res, 0, 0);
		if (found)
			*found = 1;
	}
	PQclear(res);
	return TBX_OK;
}

int64_t tbx__pg_i64(const PGresult *res, int row, int col)
{
	const unsigned char *v;
	int len;
	uint64_t u = 0;

	if (PQgetisnull(res, row, col))
		return 0;
	v = (const unsigned char *)PQgetvalue(res, row, col);
	len = PQgetlength(res, row, col);
	if (len != 1 && len != 2 && len != 4 && len != 8)
		return 0;
	for (int i = 0; i < len; i++)
		u = u << 8 | v[i];
	/* Sign-extend the narrower types. */
	if (len < 8 && len > 1 && (v[0] & 0x80))
		u |= ~(uint64_t)0 << (8 * len);
	return (int64_t)u;
}

int tbx__pg_null(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col);
}

const char *tbx__pg_text(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

const void *tbx__pg_bytea(const PGresult *res, int row, int col, size_t *len)
{
	if (PQgetisnull(res, row, col)) {
		*len = 0;
		return NULL;
	}
	*len = (size_t)PQgetlength(res, row, col);
	return PQgetvalue(res, row, col);
}

int tbx__pg_text_to(const PGresult *res, int row, int col, char *out,
		    size_t size)
{
	const char *s = tbx__pg_text(res, row, col);
	size_t len;

	out[0] = '\0';
	if (!s)
		return TBX_OK;
	len = (size_t)PQgetlength(res, row, col);
	if (len >= size)
		return TBX_ECORRUPT;
	memcpy(out, s, len);
	out[len] = '\0';
	return TBX_OK;
}

int tbx__pg_fail(tbx__pg_t *pg, const char *what, const PGresult *res)
{
	return failed(pg, what, res);
}

/* set_config(name, value, false) on the connection. */
static int apply_set(tbx__pg_t *pg, const char *name, const char *value)
{
	const char *vals[2] = {name, value};
	PGresult *res;
	int err = TBX_OK;

	res = PQexecParams(pg->conn, "SELECT set_config($1, $2, false)", 2,
			   NULL, vals, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		err = failed(pg, "set_config", res);
	PQclear(res);
	return err;
}

int tbx__pg_option_given(const tbx__pg_t *pg, const char *name)
{
	PQconninfoOption *opts;
	int given = 0;

	if (!pg->conn || !(opts = PQconninfo(pg->conn)))
		return 0;
	for (PQconninfoOption *o = opts; o->keyword; o++)
		if (!strcmp(o->keyword, "options") && o->val &&
		    strstr(o->val, name))
			given = 1;
	PQconninfoFree(opts);
	return given;
}

int tbx__pg_set(tbx__pg_t *pg, const char *name, const char *value)
{
	int i;

	if (pg->in_tx || strlen(name) >= sizeof(pg->sets[0][0]) ||
	    strlen(value) >= sizeof(pg->sets[0][1]))
		return TBX_EINVAL;
	for (i = 0; i < pg->nsets; i++)
		if (!strcmp(pg->sets[i][0], name))
			break;
	if (i == TBX_PG_MAX_SETS)
		return TBX_EINVAL;
	if (lost(pg))
		return failed(pg, "set_config", NULL);
	tbx__strlcpy(pg->sets[i][0], name, sizeof(pg->sets[i][0]));
	tbx__strlcpy(pg->sets[i][1], value, sizeof(pg->sets[i][1]));
	if (i == pg->nsets)
		pg->nsets++;
	return apply_set(pg, name, value);
}
