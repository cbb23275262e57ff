/*
 * The validator: what the run left in the stores and the topics.
 *
 * Every job is published once (plus re-sent copies); each of the three
 * groups must have recorded it exactly once in its chaos_effects_* table,
 * nothing may be dead-lettered (no job is poison), and the stores must end
 * empty in both layouts of the outbox and both token formats: no outbox
 * row (tbx_outbox; tbx_obatch and tbx_cover_msg), no token (tbx_tokens;
 * tbx_tset), no registration (tbx_registrations; tbx_breg).  The stores
 * are SQLite files, or PostgreSQL schemas read over libpq (pg.c): the
 * same statements, their one parameter $1 bound.
 */
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chaos.h"

const char *const ch_group_names[CH_GROUPS] = {"svc-a", "svc-b", "svc-c"};
const char *const ch_effects_tables[CH_GROUPS] = {
    "chaos_effects_a", "chaos_effects_b", "chaos_effects_c"};

void ch_store_name(char *buf, size_t size, const ch_stores_t *s, int g)
{
	if (s->url) /* svc-a: <prefix>_svc_a */
		snprintf(buf, size, "%s_svc_%c", s->prefix, 'a' + g);
	else
		snprintf(buf, size, "%s/%s.db", s->dir,
			 s->one_file ? "all" : ch_group_names[g]);
}

void ch_tokens_name(char *buf, size_t size, const ch_stores_t *s)
{
	if (s->url)
		snprintf(buf, size, "%s_tokens", s->prefix);
	else
		snprintf(buf, size, "%s/%s.db", s->dir,
			 s->one_file ? "all" : "tokens");
}

uint64_t ch_rand(uint64_t *state)
{
	uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ULL;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545f4914f6cdd1dULL;
}

long ch_between(uint64_t *state, long lo, long hi)
{
	if (hi <= lo)
		return lo;
	return lo + (long)(ch_rand(state) % (uint64_t)(hi - lo + 1));
}

long ch_count(const ch_stores_t *s, const char *db, const char *sql)
{
	return ch_count_of(s, db, sql, NULL);
}

long ch_count_of(const ch_stores_t *s, const char *db, const char *sql,
		 const char *arg)
{
	sqlite3 *conn = NULL;
	sqlite3_stmt *stmt = NULL;
	long n = 0;

	if (s->url)
		return ch_pg_count(s->url, db, sql, arg);
	if (access(db, F_OK) != 0)
		return 0;
	if (sqlite3_open_v2(db, &conn, SQLITE_OPEN_READONLY, NULL) !=
	    SQLITE_OK) {
		sqlite3_close(conn);
		return -1;
	}
	sqlite3_busy_timeout(conn, 10000);
	if (sqlite3_prepare_v2(conn, sql, -1, &stmt, NULL) != SQLITE_OK) {
		/* The table appears with the first record a store handles. */
		n = strstr(sqlite3_errmsg(conn), "no such table") ? 0 : -1;
	} else if (arg && sqlite3_bind_text(stmt, 1, arg, -1, SQLITE_STATIC) !=
			      SQLITE_OK) {
		n = -1;
	} else if (sqlite3_step(stmt) == SQLITE_ROW) {
		n = (long)sqlite3_column_int64(stmt, 0);
	} else {
		n = -1;
	}
	sqlite3_finalize(stmt);
	sqlite3_close(conn);
	return n;
}

/* Sums @p n counts of @p sqls on @p db (?1 bound to @p arg, or NULL);
 * -1 if one could not be read. */
static long count_sum(const ch_stores_t *s, const char *db,
		      const char *const *sqls, int n, const char *arg)
{
	long sum = 0;

	for (int i = 0; i < n; i++) {
		long v = ch_count_of(s, db, sqls[i], arg);
		if (v < 0)
			return -1;
		sum += v;
	}
	return sum;
}

long ch_outbox_left(const ch_stores_t *s, const char *db, const char *group)
{
	static const char *const sqls[] = {
	    "SELECT COUNT(*) FROM tbx_outbox WHERE grp = $1",
	    "SELECT COUNT(*) FROM tbx_obatch WHERE grp = $1",
	    "SELECT COUNT(*) FROM tbx_cover_msg WHERE grp = $1",
	};

	return count_sum(s, db, sqls, 3, group);
}

long ch_tokens_left(const ch_stores_t *s, const char *tokens)
{
	static const char *const sqls[] = {"SELECT COUNT(*) FROM tbx_tokens",
					   "SELECT COUNT(*) FROM tbx_tset"};

	return count_sum(s, tokens, sqls, 2, NULL);
}

long ch_registrations_left(const ch_stores_t *s, const char *tokens)
{
	static const char *const sqls[] = {
	    "SELECT COUNT(*) FROM tbx_registrations",
	    "SELECT COUNT(*) FROM tbx_breg"};

	return count_sum(s, tokens, sqls, 2, NULL);
}

/* Distinct tbx-id values of a topic, and records without one or without
 * a token of the run's format. */
typedef struct ids {
	char **v;
	size_t cnt, cap;
	int token_sets; /* tbx-tset and tbx-tbit, not tbx-token */
	long untokened, misplaced;
} ids_t;

/* Header @p name of @p hdrs NUL-terminated in @p buf; 0 if present and
 * short enough. */
static int header_str(rd_kafka_headers_t *hdrs, const char *name, char *buf,
		      size_t size)
{
	const void *v = NULL;
	size_t len = 0;

	if (rd_kafka_header_get_last(hdrs, name, &v, &len) || !v || len >= size)
		return -1;
	memcpy(buf, v, len);
	buf[len] = '\0';
	return 0;
}

/* Whether @p m carries a token of the run's format: tbx-token alone, or
 * tbx-tset with a tbx-tbit "<partition>:<index>" naming the partition the
 * record is on (the worker chose it before minting and produced there). */
static int token_ok(const ids_t *ids, rd_kafka_headers_t *hdrs,
		    const rd_kafka_message_t *m, int *misplaced)
{
	char token[64], tset[64], tbit[32], *end;
	int has_token = !header_str(hdrs, "tbx-token", token, sizeof(token));
	int has_tset = !header_str(hdrs, "tbx-tset", tset, sizeof(tset));
	int has_tbit = !header_str(hdrs, "tbx-tbit", tbit, sizeof(tbit));
	long part;

	*misplaced = 0;
	if (!ids->token_sets)
		return has_token && !has_tset && !has_tbit;
	if (has_token || !has_tset || !has_tbit)
		return 0;
	errno = 0;
	part = strtol(tbit, &end, 10);
	if (errno || end == tbit || *end != ':')
		return 0;
	*misplaced = part != (long)m->partition;
	return 1;
}

static void collect_id(void *opaque, const void *rkmessage)
{
	const rd_kafka_message_t *m = rkmessage;
	ids_t *ids = opaque;
	rd_kafka_headers_t *hdrs;
	const void *id = NULL;
	size_t id_len = 0;
	int misplaced = 0;

	if (rd_kafka_message_headers(m, &hdrs) ||
	    rd_kafka_header_get_last(hdrs, "tbx-id", &id, &id_len) || !id ||
	    !token_ok(ids, hdrs, m, &misplaced)) {
		ids->untokened++;
		return;
	}
	ids->misplaced += misplaced;
	if (ids->cnt == ids->cap) {
		size_t cap = ids->cap ? ids->cap * 2 : 1024;
		char **v = realloc(ids->v, cap * sizeof(*v));
		if (!v)
			return;
		ids->v = v;
		ids->cap = cap;
	}
	if ((ids->v[ids->cnt] = malloc(id_len + 1))) {
		memcpy(ids->v[ids->cnt], id, id_len);
		ids->v[ids->cnt++][id_len] = '\0';
	}
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int ch_validate(const ch_stores_t *s, const char *bootstraps, int messages,
		int token_sets, ch_figures_t *fig)
{
	char db[1024], tokens[1024], dlq[64], sql[3][160];
	ids_t ids = {.token_sets = token_sets};
	long events;

	fig->handled_once = fig->duplicated = fig->lost = 0;
	fig->outbox_left = 0;
	for (int g = 0; g < CH_GROUPS; g++) {
		const char *t = ch_effects_tables[g];
		long once, dup, distinct, out;

		ch_store_name(db, sizeof(db), s, g);
		/* PostgreSQL before 16 wants the subquery named. */
		snprintf(sql[0], sizeof(sql[0]),
			 "SELECT COUNT(*) FROM (SELECT job FROM %s GROUP BY "
			 "job HAVING COUNT(*) = 1) AS j",
			 t);
		snprintf(sql[1], sizeof(sql[1]),
			 "SELECT COUNT(*) FROM (SELECT job FROM %s GROUP BY "
			 "job HAVING COUNT(*) > 1) AS j",
			 t);
		snprintf(sql[2], sizeof(sql[2]),
			 "SELECT COUNT(DISTINCT job) FROM %s", t);

		once = ch_count(s, db, sql[0]);
		dup = ch_count(s, db, sql[1]);
		distinct = ch_count(s, db, sql[2]);
		out = ch_outbox_left(s, db, ch_group_names[g]);
		if (once < 0 || dup < 0 || distinct < 0 || out < 0) {
			fprintf(stderr, "chaos: cannot read %s\n", db);
			return -1;
		}
		fig->handled_once += once;
		fig->duplicated += dup;
		fig->lost += messages > distinct ? messages - distinct : 0;
		fig->outbox_left += out;
	}
	ch_tokens_name(tokens, sizeof(tokens), s);
	fig->tokens_left = ch_tokens_left(s, tokens);
	fig->registrations_left = ch_registrations_left(s, tokens);

	/* Dead letters: nothing in this workload is poison. */
	fig->dead_lettered = 0;
	for (int t = 0; t < 2; t++) {
		snprintf(dlq, sizeof(dlq), "%s.dlq", t ? CH_EVENTS : CH_JOBS);
		long n = ch_read_topic(bootstraps, dlq, 1, 30000, NULL, NULL);
		if (n < 0) {
			fprintf(stderr, "chaos: cannot read topic %s\n", dlq);
			return -1;
		}
		fig->dead_lettered += n;
	}
	/* The events topic: one id per job, copies share it. */
	events = ch_read_topic(bootstraps, CH_EVENTS, CH_PARTITIONS, 60000,
			       collect_id, &ids);
	if (events < 0) {
		fprintf(stderr, "chaos: cannot read topic %s\n", CH_EVENTS);
		return -1;
	}
	qsort(ids.v, ids.cnt, sizeof(*ids.v), cmp_str);
	fig->events_distinct = 0;
	for (size_t i = 0; i < ids.cnt; i++)
		if (i == 0 || strcmp(ids.v[i], ids.v[i - 1]) != 0)
			fig->events_distinct++;
	fig->event_copies = events - fig->events_distinct;
	for (size_t i = 0; i < ids.cnt; i++)
		free(ids.v[i]);
	free(ids.v);
	fig->events_misformed = ids.untokened + ids.misplaced;
	if (ids.untokened)
		fprintf(stderr,
			"chaos: %ld event record(s) without tbx-id or without "
			"%s\n",
			ids.untokened,
			token_sets ? "tbx-tset and tbx-tbit (or with tbx-token)"
				   : "tbx-token (or with tbx-tset, tbx-tbit)");
	if (ids.misplaced)
		fprintf(stderr,
			"chaos: %ld event record(s) on another partition "
			"than their tbx-tbit names\n",
			ids.misplaced);
	if (fig->events_misformed)
		return 1;
	if (fig->tokens_left < 0 || fig->registrations_left < 0)
		return -1;
	return fig->duplicated || fig->lost || fig->dead_lettered ||
		       fig->tokens_left || fig->registrations_left ||
		       fig->outbox_left || fig->events_distinct != messages
		   ? 1
		   : 0;
}
