/*
 * tbx_floor on PostgreSQL (--store-url): the store operations a record
 * needs, counted in round trips (every statement, BEGIN and COMMIT is
 * one: the client waits for its answer) and timed, against one server.
 *
 * Each variant of each round runs in a schema of its own, made for it
 * and dropped after it, on one connection (tbx__pg_connect: the
 * connection string is validated and never printed unredacted), with
 * synchronous_commit on.  Keys are uuid (16 bytes), the statements
 * prepared before the clock starts, values bound.  Per batch, as the
 * PostgreSQL design of docs/architecture.md batches them:
 *
 *   plain   BEGIN, the business row per record, COMMIT
 *   inbox   BEGIN, the batch's ids in one INSERT ... SELECT unnest(...)
 *           ON CONFLICT DO NOTHING RETURNING (the duplicates are the ids
 *           not returned), the business row per record, COMMIT
 *   outbox  the inbox contender's: inbox, the rows, the batch's outbox
 *           rows in one INSERT ... unnest, COMMIT; then BEGIN, one
 *           DELETE ... = ANY, COMMIT
 *   token   the token protocol joined (S and T in one database): BEGIN,
 *           the advisory locks of the batch in one statement, the outbox
 *           rows looked up (= ANY), the tokens checked (= ANY), the
 *           batch's number under the shared subscription lock; per record
 *           a savepoint (the previous one released in the same round
 *           trip), the business row, the minted token and the outbox row
 *           in one statement; COMMIT.  Then BEGIN, the tokens and the
 *           outbox rows deleted (= ANY each), COMMIT.
 *   token-batched  the same without the savepoint per record, the minted
 *           tokens and outbox rows in one statement for the batch after
 *           the handlers: what the protocol costs when a handler's
 *           failure rolls back the batch instead of its savepoint.
 *   token-per-record  the token protocol as the store interface calls it
 *           record by record (row_find, exists, savepoint, the handler,
 *           mint_joined, row_insert, release; in E consume_joined for the
 *           batch, then row_delete per record): every lookup, insert and
 *           delete a statement per record, the savepoint and its release
 *           statements of their own.
 *
 * G (tokenbox's crash marker, a transaction of its own per batch) is left
 * out, as in the SQLite floor: three round trips a batch.
 */
#include <inttypes.h>
#include <stddef.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/floor.h"
#include "store/pg.h"

/* The advisory lock namespaces of docs/architecture.md. */
#define LOCK_MSG "1413634049"
#define LOCK_SUB "1413634050"

enum {
	Q_ROW,
	Q_INBOX,
	Q_OB_BATCH,
	Q_OB_DELETE,
	Q_LOCK,
	Q_OB_FIND,
	Q_TOK_CHECK,
	Q_SEQ,
	Q_MINT_OB,
	Q_MINT_OB_BATCH,
	Q_TOK_CONSUME,
	Q_OB_FIND1,
	Q_TOK_CHECK1,
	Q_MINT1,
	Q_OB_INSERT1,
	Q_OB_DELETE1,
	NQ
};

static const char *const sql[NQ] = {
    [Q_ROW] = "INSERT INTO bench_rows (msg_id, part, off, payload) "
	      "VALUES ($1, $2::int4, $3::int8, $4::bytea)",
    [Q_INBOX] = "INSERT INTO inbox (id) SELECT unnest($1::uuid[]) "
		"ON CONFLICT DO NOTHING RETURNING id",
    [Q_OB_BATCH] = "INSERT INTO outbox (id, in_token, out_id, out_token, "
		   "topic, payload) SELECT i, t, o, m, $5, p FROM "
		   "unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], "
		   "$6::bytea[]) AS u(i, t, o, m, p)",
    [Q_OB_DELETE] = "DELETE FROM outbox WHERE id = ANY($1::uuid[])",
    [Q_LOCK] = "SELECT count(*) FROM (SELECT pg_advisory_xact_lock(" LOCK_MSG
	       ", k) FROM unnest($1::int4[]) AS k) AS l",
    [Q_OB_FIND] = "SELECT id FROM outbox WHERE id = ANY($1::uuid[])",
    [Q_TOK_CHECK] = "SELECT token FROM tokens WHERE grp = $2::int4 AND "
		    "token = ANY($1::uuid[])",
    [Q_SEQ] = "WITH l AS (SELECT pg_advisory_xact_lock_shared(" LOCK_SUB
	      ", 1)) SELECT nextval('mint_seq') FROM l",
    [Q_MINT_OB] = "WITH t AS (INSERT INTO tokens (token, grp) VALUES "
		  "($4::uuid, 2)) INSERT INTO outbox (id, in_token, out_id, "
		  "out_token, topic, payload) VALUES ($1::uuid, $2::uuid, "
		  "$3::uuid, $4::uuid, $5, $6::bytea) ON CONFLICT (id) DO "
		  "NOTHING",
    [Q_MINT_OB_BATCH] =
	"WITH t AS (INSERT INTO tokens (token, grp) SELECT "
	"unnest($4::uuid[]), 2) INSERT INTO outbox (id, in_token, out_id, "
	"out_token, topic, payload) SELECT i, t, o, m, $5, p FROM "
	"unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], "
	"$6::bytea[]) AS u(i, t, o, m, p) ON CONFLICT (id) DO NOTHING",
    [Q_TOK_CONSUME] = "DELETE FROM tokens WHERE grp = $2::int4 AND "
		      "token = ANY($1::uuid[])",
    [Q_OB_FIND1] = "SELECT id FROM outbox WHERE id = $1::uuid",
    [Q_TOK_CHECK1] = "SELECT 1 FROM tokens WHERE token = $1::uuid AND grp = "
		     "$2::int4",
    [Q_MINT1] = "INSERT INTO tokens (token, grp) VALUES ($1::uuid, 2)",
    [Q_OB_INSERT1] = "INSERT INTO outbox (id, in_token, out_id, out_token, "
		     "topic, payload) VALUES ($1::uuid, $2::uuid, $3::uuid, "
		     "$4::uuid, $5, $6::bytea) ON CONFLICT (id) DO NOTHING",
    [Q_OB_DELETE1] = "DELETE FROM outbox WHERE id = $1::uuid",
};

#define GRP_SELF "1"

typedef struct fpg {
	tbx__pg_t *pg;
	PGconn *conn;
	long rt; /* round trips of the phase being counted */
	/* the batch's arrays, as text */
	char *ids, *toks, *outs, *mints, *payloads, *keys;
	char payload_hex[2 * PAYLOAD_LEN + 8];
} fpg_t;

static int pg_fail(fpg_t *f, const char *what, PGresult *res)
{
	fprintf(stderr, "tbx_floor: %s: %s", what,
		res ? PQresultErrorMessage(res) : PQerrorMessage(f->conn));
	PQclear(res);
	return 1;
}

/* One simple statement: one round trip. */
static int exec(fpg_t *f, const char *text)
{
	PGresult *res = PQexec(f->conn, text);

	f->rt++;
	if (PQresultStatus(res) != PGRES_COMMAND_OK &&
	    PQresultStatus(res) != PGRES_TUPLES_OK)
		return pg_fail(f, text, res);
	PQclear(res);
	return 0;
}

/* One prepared statement: one round trip.  Parameters are text but for
 * bytea ones (lens[i] > 0: binary).  *rows: rows returned or changed. */
static int run(fpg_t *f, int q, int n, const char *const *vals, const int *lens,
	       long *rows)
{
	char name[8];
	int fmts[8] = {0};
	PGresult *res;

	for (int i = 0; i < n; i++)
		fmts[i] = lens && lens[i] > 0;
	snprintf(name, sizeof(name), "f%d", q);
	res = PQexecPrepared(f->conn, name, n, vals, lens, fmts, 0);
	f->rt++;
	if (PQresultStatus(res) == PGRES_TUPLES_OK) {
		if (rows)
			*rows = PQntuples(res);
	} else if (PQresultStatus(res) == PGRES_COMMAND_OK) {
		if (rows)
			*rows = atol(PQcmdTuples(res));
	} else {
		return pg_fail(f, sql[q], res);
	}
	PQclear(res);
	return 0;
}

/* '{a,b,...}' of the uuids at offset @p field of the records. */
static void uuid_array(char *out, const rec_t *recs, long first, long n,
		       size_t field)
{
	size_t o = 0;

	out[o++] = '{';
	for (long i = first; i < first + n; i++) {
		if (i > first)
			out[o++] = ',';
		memcpy(out + o, (const char *)&recs[i] + field, 36);
		o += 36;
	}
	out[o++] = '}';
	out[o] = '\0';
}

/* The batch's payloads as a bytea[] ("\\x.." each, quoted). */
static void payload_array(fpg_t *f, long n)
{
	size_t o = 0, len = strlen(f->payload_hex);

	f->payloads[o++] = '{';
	for (long i = 0; i < n; i++) {
		if (i)
			f->payloads[o++] = ',';
		f->payloads[o++] = '"';
		f->payloads[o++] = '\\';
		memcpy(f->payloads + o, f->payload_hex, len);
		o += len;
		f->payloads[o++] = '"';
	}
	f->payloads[o++] = '}';
	f->payloads[o] = '\0';
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return x < y ? -1 : x > y;
}

/* The advisory lock keys of the batch: a 32-bit hash of each id, sorted
 * and without repeats, as '{k,...}'. */
static void lock_keys(fpg_t *f, const rec_t *recs, long first, long n)
{
	int *k = malloc((size_t)n * sizeof(*k));
	size_t o = 0;
	long m = 0;

	if (!k) {
		snprintf(f->keys, 3, "{}");
		return;
	}
	for (long i = 0; i < n; i++) {
		uint32_t h = 2166136261u;
		for (int j = 0; j < KEY_LEN; j++)
			h = (h ^ recs[first + i].id[j]) * 16777619u;
		k[i] = (int)(int32_t)h;
	}
	qsort(k, (size_t)n, sizeof(*k), cmp_int);
	f->keys[o++] = '{';
	for (long i = 0; i < n; i++) {
		if (i && k[i] == k[i - 1])
			continue;
		o += (size_t)snprintf(f->keys + o, 16, "%s%d", m++ ? "," : "",
				      k[i]);
	}
	f->keys[o++] = '}';
	f->keys[o] = '\0';
	free(k);
}

#define F_ID   offsetof(rec_t, id_text)
#define F_TOK  offsetof(rec_t, tok_text)
#define F_OUT  offsetof(rec_t, out_text)
#define F_MINT offsetof(rec_t, mint_text)

static int row(fpg_t *f, const rec_t *r, long i)
{
	char part[16], off[24];
	static const unsigned char zero[PAYLOAD_LEN];
	const char *v[4] = {r->id_text, part, off, (const char *)zero};
	int lens[4] = {0, 0, 0, PAYLOAD_LEN};

	snprintf(part, sizeof(part), "%ld", i % 8);
	snprintf(off, sizeof(off), "%ld", i / 8);
	return run(f, Q_ROW, 4, v, lens, NULL);
}

static int expect(long got, long want, const char *what)
{
	if (got == want)
		return 0;
	fprintf(stderr, "tbx_floor: %s: %ld rows, expected %ld\n", what, got,
		want);
	return 1;
}

/* token-per-record, one record of A: a statement for each step. */
static int record_each(fpg_t *f, const rec_t *r, long i)
{
	static const unsigned char zero[PAYLOAD_LEN];
	const char *p[6] = {r->id_text,	  r->tok_text, r->out_text,
			    r->mint_text, "bench-out", (const char *)zero};
	int lens[6] = {0, 0, 0, 0, 0, PAYLOAD_LEN};
	const char *chk[2] = {r->tok_text, GRP_SELF};
	long rows = 0;

	if (run(f, Q_OB_FIND1, 1, p, NULL, &rows) ||
	    expect(rows, 0, "outbox lookup") ||
	    run(f, Q_TOK_CHECK1, 2, chk, NULL, &rows) ||
	    expect(rows, 1, "token check") || exec(f, "SAVEPOINT r") ||
	    row(f, r, i) || run(f, Q_MINT1, 1, &p[3], NULL, NULL) ||
	    run(f, Q_OB_INSERT1, 6, p, lens, &rows) ||
	    expect(rows, 1, "outbox row") || exec(f, "RELEASE SAVEPOINT r"))
		return 1;
	return 0;
}

/* A's share of a batch. */
static int phase_a(fpg_t *f, int v, const rec_t *recs, long first, long n)
{
	long rows = 0;

	uuid_array(f->ids, recs, first, n, F_ID);
	if (exec(f, "BEGIN ISOLATION LEVEL READ COMMITTED"))
		return 1;
	if (v == V_INBOX || v == V_OUTBOX) {
		const char *p[1] = {f->ids};
		if (run(f, Q_INBOX, 1, p, NULL, &rows) ||
		    expect(rows, n, "inbox"))
			return 1;
	}
	if (v == V_TOKEN_PER_RECORD) {
		const char *p[1] = {f->keys};
		lock_keys(f, recs, first, n);
		if (run(f, Q_LOCK, 1, p, NULL, NULL) ||
		    run(f, Q_SEQ, 0, NULL, NULL, NULL))
			return 1;
		for (long i = first; i < first + n; i++)
			if (record_each(f, &recs[i], i))
				return 1;
		return exec(f, "COMMIT");
	}
	if (v == V_TOKEN || v == V_TOKEN_BATCHED) {
		const char *p[2] = {f->keys, GRP_SELF};
		uuid_array(f->toks, recs, first, n, F_TOK);
		lock_keys(f, recs, first, n);
		if (run(f, Q_LOCK, 1, p, NULL, NULL))
			return 1;
		p[0] = f->ids;
		if (run(f, Q_OB_FIND, 1, p, NULL, &rows) ||
		    expect(rows, 0, "outbox lookup"))
			return 1;
		p[0] = f->toks;
		if (run(f, Q_TOK_CHECK, 2, p, NULL, &rows) ||
		    expect(rows, n, "token check"))
			return 1;
		if (run(f, Q_SEQ, 0, NULL, NULL, NULL))
			return 1;
	}
	for (long i = first; i < first + n; i++) {
		const rec_t *r = &recs[i];

		if (v == V_TOKEN &&
		    exec(f, i == first ? "SAVEPOINT r"
				       : "RELEASE SAVEPOINT r; SAVEPOINT r"))
			return 1;
		if (row(f, r, i))
			return 1;
		if (v == V_TOKEN) {
			static const unsigned char zero[PAYLOAD_LEN];
			const char *p[6] = {r->id_text,	 r->tok_text,
					    r->out_text, r->mint_text,
					    "bench-out", (const char *)zero};
			int lens[6] = {0, 0, 0, 0, 0, PAYLOAD_LEN};
			if (run(f, Q_MINT_OB, 6, p, lens, &rows) ||
			    expect(rows, 1, "outbox row"))
				return 1;
		}
	}
	if (v == V_OUTBOX || v == V_TOKEN_BATCHED) {
		const char *p[6] = {f->ids,   f->toks,	   f->outs,
				    f->mints, "bench-out", f->payloads};
		uuid_array(f->toks, recs, first, n, F_TOK);
		uuid_array(f->outs, recs, first, n, F_OUT);
		uuid_array(f->mints, recs, first, n, F_MINT);
		payload_array(f, n);
		if (run(f, v == V_OUTBOX ? Q_OB_BATCH : Q_MINT_OB_BATCH, 6, p,
			NULL, &rows) ||
		    expect(rows, n, "outbox rows"))
			return 1;
	}
	return exec(f, "COMMIT");
}

/* E's (and D's) share of a batch, after delivery. */
static int phase_e(fpg_t *f, int v, const rec_t *recs, long first, long n)
{
	const char *p[2] = {f->ids, GRP_SELF};
	long rows = 0;

	uuid_array(f->ids, recs, first, n, F_ID);
	if (exec(f, "BEGIN ISOLATION LEVEL READ COMMITTED"))
		return 1;
	if (v == V_TOKEN || v == V_TOKEN_BATCHED || v == V_TOKEN_PER_RECORD) {
		uuid_array(f->toks, recs, first, n, F_TOK);
		p[0] = f->toks;
		if (run(f, Q_TOK_CONSUME, 2, p, NULL, &rows) ||
		    expect(rows, n, "token consume"))
			return 1;
		p[0] = f->ids;
	}
	if (v == V_TOKEN_PER_RECORD) {
		for (long i = first; i < first + n; i++) {
			const char *one[1] = {recs[i].id_text};
			if (run(f, Q_OB_DELETE1, 1, one, NULL, &rows) ||
			    expect(rows, 1, "outbox delete"))
				return 1;
		}
		return exec(f, "COMMIT");
	}
	if (run(f, Q_OB_DELETE, 1, p, NULL, &rows) ||
	    expect(rows, n, "outbox delete"))
		return 1;
	return exec(f, "COMMIT");
}

static int64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The schema of one run: made, search_path set, tables, statements. */
static int schema_make(fpg_t *f, const char *schema)
{
	char text[512];

	snprintf(text, sizeof(text),
		 "CREATE SCHEMA \"%s\"; SET search_path TO \"%s\"; "
		 "SET synchronous_commit = on",
		 schema, schema);
	if (exec(f, text) ||
	    exec(f, "CREATE TABLE bench_rows (id bigserial PRIMARY KEY, "
		    "msg_id text NOT NULL, part int, off bigint, payload "
		    "bytea);"
		    "CREATE TABLE inbox (id uuid PRIMARY KEY);"
		    "CREATE TABLE tokens (token uuid NOT NULL, grp int NOT "
		    "NULL, PRIMARY KEY (token, grp));"
		    "CREATE TABLE outbox (id uuid PRIMARY KEY, in_token uuid, "
		    "out_id uuid, out_token uuid, topic text, payload bytea);"
		    "CREATE SEQUENCE mint_seq"))
		return 1;
	for (int q = 0; q < NQ; q++) {
		char name[8];
		PGresult *res;

		snprintf(name, sizeof(name), "f%d", q);
		res = PQprepare(f->conn, name, sql[q], 0, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			return pg_fail(f, sql[q], res);
		PQclear(res);
	}
	return 0;
}

static int schema_drop(fpg_t *f, const char *schema)
{
	char text[256];

	snprintf(text, sizeof(text),
		 "DEALLOCATE ALL; RESET search_path; DROP SCHEMA \"%s\" "
		 "CASCADE",
		 schema);
	return exec(f, text);
}

/* The senders' tokens, before the clock. */
static int tokens_preload(fpg_t *f, const rec_t *recs, long n)
{
	char *arr = malloc((size_t)n * 37 + 8);
	const char *p[1];
	PGresult *res;
	int rc;

	if (!arr)
		return 1;
	uuid_array(arr, recs, 0, n, F_TOK);
	p[0] = arr;
	res = PQexecParams(f->conn,
			   "INSERT INTO tokens (token, grp) SELECT "
			   "unnest($1::uuid[]), " GRP_SELF,
			   1, NULL, p, NULL, NULL, 0);
	rc = PQresultStatus(res) != PGRES_COMMAND_OK
		 ? pg_fail(f, "token preload", res)
		 : 0;
	if (!rc)
		PQclear(res);
	free(arr);
	return rc || exec(f, "VACUUM ANALYZE tokens");
}

typedef struct figures {
	double rt, rt_a, rt_e, us, cpu_us;
} figures_t;

static int variant_run(fpg_t *f, int v, long round, const rec_t *recs, long n,
		       long batch, figures_t *fig)
{
	char schema[64];
	long rt_a = 0, rt_e = 0;
	int64_t t0, c0;
	int err;

	snprintf(schema, sizeof(schema), "tbx_floor_%ld_%ld_%s", (long)getpid(),
		 round, floor_variant_names[v]);
	for (char *c = schema; *c; c++)
		if (*c == '-')
			*c = '_';
	if (schema_make(f, schema))
		return 1;
	err = v >= V_TOKEN && tokens_preload(f, recs, n);
	t0 = clock_ns(CLOCK_MONOTONIC);
	c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	for (long first = 0; first < n && !err; first += batch) {
		long cnt = n - first < batch ? n - first : batch;

		f->rt = 0;
		err = phase_a(f, v, recs, first, cnt);
		rt_a += f->rt;
		f->rt = 0;
		if (!err && v != V_PLAIN && v != V_INBOX)
			err = phase_e(f, v, recs, first, cnt);
		rt_e += f->rt;
	}
	fig->us = (double)(clock_ns(CLOCK_MONOTONIC) - t0) / 1e3 / (double)n;
	fig->cpu_us =
	    (double)(clock_ns(CLOCK_PROCESS_CPUTIME_ID) - c0) / 1e3 / (double)n;
	fig->rt_a = (double)rt_a / (double)n;
	fig->rt_e = (double)rt_e / (double)n;
	fig->rt = fig->rt_a + fig->rt_e;
	if (err)
		exec(f, "ROLLBACK");
	return schema_drop(f, schema) || err;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, long n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int floor_pg_main(const char *url, const rec_t *recs, long n, long batch,
		  unsigned mask, long rounds)
{
	char err[512], where[256];
	fpg_t f;
	figures_t *figs;
	size_t arr = (size_t)batch * 40 + 8;
	int rc = 0;

	memset(&f, 0, sizeof(f));
	if (tbx__pg_connect(url, &f.pg, err, sizeof(err))) {
		fprintf(stderr, "tbx_floor: --store-url: %s\n", err);
		return 1;
	}
	f.conn = f.pg->conn;
	figs = calloc((size_t)(rounds * NVARIANTS), sizeof(*figs));
	f.ids = malloc(arr);
	f.toks = malloc(arr);
	f.outs = malloc(arr);
	f.mints = malloc(arr);
	f.keys = malloc((size_t)batch * 13 + 8);
	f.payloads = malloc((size_t)batch * (2 * PAYLOAD_LEN + 8) + 8);
	if (!figs || !f.ids || !f.toks || !f.outs || !f.mints || !f.keys ||
	    !f.payloads) {
		fprintf(stderr, "tbx_floor: out of memory\n");
		rc = 1;
		goto out;
	}
	memcpy(f.payload_hex, "\\x", 2);
	for (int i = 0; i < PAYLOAD_LEN; i++)
		memcpy(f.payload_hex + 2 + 2 * i, "00", 2);
	f.payload_hex[2 + 2 * PAYLOAD_LEN] = '\0';
	{
		PGresult *res = PQexec(f.conn, "SHOW fsync");
		const char *fsync = PQresultStatus(res) == PGRES_TUPLES_OK
					? PQgetvalue(res, 0, 0)
					: "?";
		printf("floor: %ld records a variant, %ld a transaction, "
		       "PostgreSQL %d.%d at %s (fsync=%s, "
		       "synchronous_commit=on), %ld round(s) interleaved, "
		       "medians\n",
		       n, batch, PQserverVersion(f.conn) / 10000,
		       PQserverVersion(f.conn) % 10000,
		       tbx__pg_redact(url, where, sizeof(where)), fsync,
		       rounds);
		PQclear(res);
	}
	for (long r = 0; r < rounds && !rc; r++)
		for (int v = 0; v < NVARIANTS && !rc; v++)
			if (mask & (1u << v))
				rc = variant_run(&f, v, r, recs, n, batch,
						 &figs[r * NVARIANTS + v]);
	for (int v = 0; v < NVARIANTS && !rc; v++) {
		double us[64], cpu[64];
		figures_t *fg = &figs[v];
		long m = rounds < 64 ? rounds : 64;

		if (!(mask & (1u << v)))
			continue;
		for (long r = 0; r < m; r++) {
			us[r] = figs[r * NVARIANTS + v].us;
			cpu[r] = figs[r * NVARIANTS + v].cpu_us;
		}
		printf("%-16s %6.3f rt/record (A %.3f, E %.3f) %8.2f "
		       "us/record %8.2f cpu us/record\n",
		       floor_variant_names[v], fg->rt, fg->rt_a, fg->rt_e,
		       median(us, m), median(cpu, m));
	}
	fflush(stdout);
out:
	free(figs);
	free(f.ids);
	free(f.toks);
	free(f.outs);
	free(f.mints);
	free(f.keys);
	free(f.payloads);
	tbx__pg_unref(f.pg);
	return rc;
}
