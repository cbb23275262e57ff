/*
 * The PostgreSQL backend of the service store: the read side and the
 * repairs of `tokenbox inspect` (outbox/outbox.h, "the read side"), in
 * the orders SQLite's backend lists them (outbox/sqlite_read.c; the text
 * columns are of the "C" collation, byte order as in SQLite).
 *
 * The --group filter is bound as one text[] ($1, NULL for every group),
 * the time bound as $2 and the limit as $3 (NULL: none): one statement
 * text whatever the number of groups.
 *
 * @locality one thread at a time per store.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/str.h"
#include "outbox/pg_int.h"
#include "store/msgs.h"
#include "store/pg.h"

#define GRP_IN(col) "($1::text[] IS NULL OR " col " = ANY($1::text[]))"

#define DL_COLUMNS                                                             \
	"SELECT d.id, d.grp, d.msg_id, d.in_topic, d.in_partition, "           \
	"d.in_offset, d.dlq_topic, d.error, d.attempts, d.created_ms, "        \
	"EXISTS (SELECT 1 FROM @S.tbx_outbox o WHERE o.grp = d.grp AND "       \
	"o.msg_id = d.msg_id AND o.kind = 1), d.replayed_ms FROM "             \
	"@S.tbx_dead_letters d"
/* The set columns are version 6 on: a schema opened read-only at an
 * older one reads NULL there. */
#define UD_COLUMNS(set)                                                        \
	"SELECT id, grp, msg_id, out_id, topic, type, key, payload, "          \
	"headers, token, mint_seq, error, attempts, created_ms, " set          \
	" FROM @S.tbx_undelivered"
#define UD_SET	  "tset, tbit, tpart"
#define UD_NO_SET "NULL::text, NULL::integer, NULL::integer"

enum {
	R_GROUPS,
	R_GROUPS_BATCH,
	R_ROWS_SUMMARY,
	R_ROWS_LIST,
	R_ROWS_COUNT,
	R_ROW_EXACT,
	R_ROW_PREFIX,
	R_ROW_GROUPS,
	R_TOKEN_OUT,
	R_TOKEN_IN,
	R_DL_SUMMARY,
	R_DL_LIST,
	R_DL_COUNT,
	R_DL_BY_NUMBER,
	R_DL_BY_ID,
	R_DL_RECORDED,
	R_DL_GROUPS,
	R_DL_REPLAYED,
	R_UD_COUNT,
	R_UD_LIST,
	R_UD_COUNT_F,
	R_UD_GET,
	R_UD_LIST_V5,
	R_UD_GET_V5,
	R_UD_DELETE,
	R_ALARMS,
	R_BINDINGS,
	R_INGRESS,
	R_COUNT_OLDER,
	R_OB_LIST,
	R_OB_COUNT,
	R__COUNT
};

static const char *const rsql[R__COUNT] = {
    /* An ingress row of -1 is a partition locked before its first
     * offset (pg.c, ingress_get): none. */
    [R_GROUPS] = "SELECT grp FROM @S.tbx_outbox UNION SELECT grp FROM "
		 "@S.tbx_ingress WHERE next_offset >= 0 UNION SELECT grp FROM "
		 "@S.tbx_dead_letters ORDER BY 1",
    /* Version 4 on: a group with batch rows alone is served too. */
    [R_GROUPS_BATCH] = "SELECT grp FROM @S.tbx_outbox UNION SELECT grp FROM "
		       "@S.tbx_ingress WHERE next_offset >= 0 UNION SELECT "
		       "grp FROM @S.tbx_dead_letters UNION SELECT grp FROM "
		       "@S.tbx_obatch ORDER BY 1",
    [R_ROWS_SUMMARY] = "SELECT grp, count(*) FILTER (WHERE attempt IS "
		       "NULL), count(*) FILTER (WHERE attempt IS NOT NULL), "
		       "count(*) FILTER (WHERE created_ms <= $1), count(*) "
		       "FILTER (WHERE stuck_ms IS NOT NULL), min(created_ms) "
		       "FROM @S.tbx_outbox GROUP BY grp ORDER BY grp",
    [R_ROWS_LIST] =
	"SELECT o.grp, o.msg_id, o.in_topic, o.in_partition, o.in_offset, "
	"o.in_token, o.attempt, o.mint_seq, o.kind, o.error, o.created_ms, "
	"o.msgs, o.in_tbit FROM @S.tbx_outbox o WHERE " GRP_IN(
	    "o.grp") " AND o.created_ms <= $2 ORDER BY o.created_ms, o.grp, "
		     "o.msg_id LIMIT $3",
    [R_ROWS_COUNT] = "SELECT count(*) FROM @S.tbx_outbox o WHERE " GRP_IN(
	"o.grp") " AND o.created_ms <= $2",
    [R_ROW_EXACT] = "SELECT msg_id FROM @S.tbx_outbox WHERE msg_id = $1 "
		    "LIMIT 1",
    [R_ROW_PREFIX] = "SELECT DISTINCT msg_id FROM @S.tbx_outbox WHERE "
		     "starts_with(msg_id, $1) LIMIT 2",
    [R_ROW_GROUPS] =
	"SELECT grp FROM @S.tbx_outbox o WHERE o.msg_id = $2 AND " GRP_IN(
	    "o.grp") " ORDER BY grp",
    /* Tokens are in the messages (store/msgs.h), and a row has them only
     * once it has an attempt: the rows in flight are read and matched. */
    [R_TOKEN_OUT] = "SELECT grp, msg_id, msgs FROM @S.tbx_outbox WHERE "
		    "attempt IS NOT NULL AND msgs IS NOT NULL ORDER BY grp, "
		    "msg_id",
    [R_TOKEN_IN] = "SELECT grp, msg_id, in_topic, in_partition, in_offset "
		   "FROM @S.tbx_outbox WHERE in_token = $1 ORDER BY grp, "
		   "msg_id",
    [R_DL_SUMMARY] = "SELECT d.grp, count(*), count(*) FILTER (WHERE EXISTS "
		     "(SELECT 1 FROM @S.tbx_outbox o WHERE o.grp = d.grp AND "
		     "o.msg_id = d.msg_id AND o.kind = 1)), "
		     "count(d.replayed_ms), max(d.created_ms) FROM "
		     "@S.tbx_dead_letters d GROUP BY d.grp ORDER BY d.grp",
    [R_DL_LIST] = DL_COLUMNS " WHERE " GRP_IN(
	"d.grp") " AND d.created_ms <= $2 ORDER BY d.created_ms DESC, d.id "
		 "DESC LIMIT $3",
    [R_DL_COUNT] = "SELECT count(*) FROM @S.tbx_dead_letters d WHERE " GRP_IN(
	"d.grp") " AND d.created_ms <= $2",
    [R_DL_BY_NUMBER] = DL_COLUMNS " WHERE d.id = $2 AND " GRP_IN("d.grp"),
    [R_DL_BY_ID] =
	DL_COLUMNS " WHERE d.msg_id = $2 AND " GRP_IN("d.grp") " ORDER BY d.id",
    [R_DL_RECORDED] = "SELECT 1 FROM @S.tbx_dead_letters WHERE grp = $1 AND "
		      "in_topic = $2 AND in_partition = $3 AND in_offset = $4 "
		      "AND dlq_topic = $5 LIMIT 1",
    [R_DL_GROUPS] = "SELECT DISTINCT grp FROM @S.tbx_dead_letters WHERE "
		    "dlq_topic = $1 ORDER BY grp",
    [R_DL_REPLAYED] = "UPDATE @S.tbx_dead_letters SET replayed_ms = "
		      "coalesce(replayed_ms, $6) WHERE grp = $1 AND in_topic = "
		      "$2 AND in_partition = $3 AND in_offset = $4 AND "
		      "dlq_topic = $5",
    [R_UD_COUNT] = "SELECT count(*) FROM @S.tbx_undelivered",
    [R_UD_LIST] = UD_COLUMNS(UD_SET) " WHERE " GRP_IN(
	"grp") " AND created_ms <= $2 ORDER BY created_ms DESC, id DESC "
	       "LIMIT $3",
    [R_UD_COUNT_F] = "SELECT count(*) FROM @S.tbx_undelivered WHERE " GRP_IN(
	"grp") " AND created_ms <= $2",
    [R_UD_GET] = UD_COLUMNS(UD_SET) " WHERE id = $2 AND " GRP_IN("grp"),
    [R_UD_LIST_V5] = UD_COLUMNS(UD_NO_SET) " WHERE " GRP_IN(
	"grp") " AND created_ms <= $2 ORDER BY created_ms DESC, id DESC "
	       "LIMIT $3",
    [R_UD_GET_V5] = UD_COLUMNS(UD_NO_SET) " WHERE id = $2 AND " GRP_IN("grp"),
    [R_UD_DELETE] = "DELETE FROM @S.tbx_undelivered WHERE id = $1",
    [R_ALARMS] = "SELECT grp, name, count, first_ms, last_ms, detail FROM "
		 "@S.tbx_alarms ORDER BY grp, name",
    [R_BINDINGS] = "SELECT grp, tokens_id, tokens_where, used_ms FROM "
		   "@S.tbx_bindings ORDER BY grp",
    [R_INGRESS] = "SELECT grp, topic, \"partition\", next_offset FROM "
		  "@S.tbx_ingress WHERE next_offset >= 0 ORDER BY grp, topic, "
		  "\"partition\"",
    [R_COUNT_OLDER] = "SELECT count(*) FROM @S.tbx_outbox WHERE grp = $1 "
		      "AND created_ms <= $2",
    /* Version 4 on. */
    [R_OB_LIST] = "SELECT grp, row_id, attempt, mint_seq, tokfmt, "
		  "created_ms, stuck_ms, dispatch_failures, cover, msgs, wire "
		  "FROM @S.tbx_obatch WHERE " GRP_IN(
		      "grp") " AND created_ms <= $2 ORDER BY created_ms, grp, "
			     "row_id LIMIT $3",
    [R_OB_COUNT] = "SELECT count(*) FROM @S.tbx_obatch WHERE " GRP_IN(
	"grp") " AND created_ms <= $2",
};

static pg_store_t *ps(tbx_outbox_t *base)
{
	return (pg_store_t *)base;
}

int tbx__outbox_pg_read_init(pg_store_t *store)
{
	return tbx__pg_stmts_init(&store->reads, store->pg, "svcr", rsql,
				  R__COUNT, store->schema, NULL);
}

/* Any callback; the row function casts it back to its own type. */
typedef void (*any_fn)(void);
/* Hands row @p i of @p res to the caller's function; non-zero stops. */
typedef int (*row_fn)(const PGresult *res, int i, any_fn fn, void *opaque);

/* Runs @p q with @p p (freed), calling @p row per row. */
static int each(pg_store_t *store, int q, tbx__pg_params_t *p, row_fn row,
		any_fn fn, void *opaque)
{
	PGresult *res;
	int err = tbx__pg_run(&store->reads, q, p, &res);

	if (p)
		tbx__pgp_free(p);
	if (err)
		return err;
	for (int i = 0, n = PQntuples(res); i < n; i++)
		if (row(res, i, fn, opaque))
			break;
	PQclear(res);
	return TBX_OK;
}

/* Column 0 of the first row of @p q (0 without one). */
static int one_int(pg_store_t *store, int q, tbx__pg_params_t *p, int64_t *out)
{
	int err = tbx__pg_run_i64(&store->reads, q, p, out, NULL);

	if (p)
		tbx__pgp_free(p);
	return err;
}

/* Text column @p col of row @p i, "" for NULL. */
static const char *text(const PGresult *res, int i, int col)
{
	const char *s = tbx__pg_text(res, i, col);

	return s ? s : "";
}

/* The filter: $1 the groups (NULL: all), then the time bound and the
 * limit (NULL: none) when asked. */
static void bind_filter(tbx__pg_params_t *p, const tbx__filter_t *f,
			int created, int limit)
{
	tbx__pgp_init(p);
	if (f && f->group_cnt)
		tbx__pgp_text_array(p, f->groups, f->group_cnt);
	else
		tbx__pgp_text(p, NULL);
	if (created)
		tbx__pgp_i64(p, f ? f->created_max : INT64_MAX);
	if (limit) {
		if (f && f->limit > 0)
			tbx__pgp_i64(p, f->limit);
		else
			tbx__pgp_text(p, NULL);
	}
}

/* Counts with the filter (no limit) into *total, when asked. */
static int filter_count(pg_store_t *store, int q, const tbx__filter_t *f,
			int64_t *total)
{
	tbx__pg_params_t p;

	if (!total)
		return TBX_OK;
	bind_filter(&p, f, 1, 0);
	return one_int(store, q, &p, total);
}

static int str_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	return ((tbx__str_fn)fn)(opaque, text(res, i, 0));
}

/* (group, integers…, time): the last column the time, up to four
 * between. */
static int sum_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	tbx__grp_sum_t sum;
	int cols = PQnfields(res);

	memset(&sum, 0, sizeof(sum));
	sum.grp = text(res, i, 0);
	for (int c = 1; c < cols - 1 && c <= 4; c++)
		sum.n[c - 1] = tbx__pg_i64(res, i, c);
	sum.ms = tbx__pg_i64(res, i, cols - 1);
	return ((tbx__grp_sum_fn)fn)(opaque, &sum);
}

/*
 * Transactions and identity.
 */

int tbx__pgo_read_begin(tbx_outbox_t *base)
{
	pg_store_t *store = ps(base);
	int err;

	if ((err = tbx__pg_begin(store->pg)))
		return err;
	/* One snapshot for every read until read_end. */
	if ((err = tbx__pg_exec(store->pg, "SET TRANSACTION ISOLATION LEVEL "
					   "REPEATABLE READ"))) {
		tbx__pg_rollback(store->pg);
		return err;
	}
	store->reading = 1;
	return TBX_OK;
}

void tbx__pgo_read_end(tbx_outbox_t *base)
{
	pg_store_t *store = ps(base);

	if (!store->reading)
		return;
	store->reading = 0;
	tbx__pg_rollback(store->pg);
}

int tbx__pgo_schema(tbx_outbox_t *base, int *version)
{
	*version = ps(base)->version;
	return TBX_OK;
}

const char *tbx__pgo_errmsg(tbx_outbox_t *base)
{
	const char *msg = tbx__pg_errmsg(ps(base)->pg);

	return *msg ? msg : NULL;
}

/*
 * Listings.
 */

int tbx__pgo_groups(tbx_outbox_t *base, tbx__str_fn fn, void *opaque)
{
	/* Opened read-only, a schema keeps its version: before 4, no batch
	 * rows. */
	return each(ps(base),
		    ps(base)->version >= 4 ? R_GROUPS_BATCH : R_GROUPS, NULL,
		    str_row, (any_fn)fn, opaque);
}

int tbx__pgo_rows_summary(tbx_outbox_t *base, int64_t created_max,
			  tbx__grp_sum_fn fn, void *opaque)
{
	tbx__pg_params_t p;

	tbx__pgp_init(&p);
	tbx__pgp_i64(&p, created_max);
	return each(ps(base), R_ROWS_SUMMARY, &p, sum_row, (any_fn)fn, opaque);
}

static int row_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	tbx__row_t row;
	tbx__msgs_iter_t it;
	const void *blob;
	size_t len;

	tbx__row_init(&row);
	tbx__strlcpy(row.msg_id, text(res, i, 1), sizeof(row.msg_id));
	tbx__strlcpy(row.in_topic, text(res, i, 2), sizeof(row.in_topic));
	row.in_partition = (int32_t)tbx__pg_i64(res, i, 3);
	row.in_offset = tbx__pg_i64(res, i, 4);
	tbx__strlcpy(row.in_token, text(res, i, 5), sizeof(row.in_token));
	tbx__strlcpy(row.attempt, text(res, i, 6), sizeof(row.attempt));
	row.mint_seq = tbx__pg_i64(res, i, 7);
	row.kind = (int)tbx__pg_i64(res, i, 8);
	/* Borrowed for the call: the row is not the caller's to clear. */
	row.error = (char *)tbx__pg_text(res, i, 9);
	row.created_ms = tbx__pg_i64(res, i, 10);
	row.in_set = !PQgetisnull(res, i, 12);
	row.in_tbit = row.in_set ? (uint32_t)tbx__pg_i64(res, i, 12) : 0;
	/* The count the value announces; loading the row checks the rest. */
	blob = tbx__pg_bytea(res, i, 11, &len);
	if (tbx__msgs_iter_init(&it, blob, len) < 0)
		it.left = 0;
	return ((tbx__row_fn)fn)(opaque, text(res, i, 0), &row,
				 (int64_t)it.left);
}

int tbx__pgo_rows_list(tbx_outbox_t *base, const tbx__filter_t *f,
		       int64_t *total, tbx__row_fn fn, void *opaque)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	int err;

	if ((err = filter_count(store, R_ROWS_COUNT, f, total)))
		return err;
	bind_filter(&p, f, 1, 1);
	return each(store, R_ROWS_LIST, &p, row_row, (any_fn)fn, opaque);
}

int tbx__pgo_row_match(tbx_outbox_t *base, const char *id,
		       char out[TBX_MSGID_MAX + 1], int *matches)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	PGresult *res;
	int n, err;

	*matches = 0;
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, id);
	err = tbx__pg_run(&store->reads, R_ROW_EXACT, &p, &res);
	tbx__pgp_free(&p);
	if (err)
		return err;
	n = PQntuples(res);
	PQclear(res);
	if (n > 0) {
		tbx__strlcpy(out, id, TBX_MSGID_MAX + 1);
		*matches = 1;
		return TBX_OK;
	}
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, id);
	err = tbx__pg_run(&store->reads, R_ROW_PREFIX, &p, &res);
	tbx__pgp_free(&p);
	if (err)
		return err;
	n = PQntuples(res);
	if (n > 0)
		tbx__strlcpy(out, text(res, 0, 0), TBX_MSGID_MAX + 1);
	*matches = n > 2 ? 2 : n;
	PQclear(res);
	return TBX_OK;
}

int tbx__pgo_row_groups(tbx_outbox_t *base, const char *msg_id,
			const tbx__filter_t *f, tbx__str_fn fn, void *opaque)
{
	tbx__pg_params_t p;

	bind_filter(&p, f, 0, 0);
	tbx__pgp_text(&p, msg_id);
	return each(ps(base), R_ROW_GROUPS, &p, str_row, (any_fn)fn, opaque);
}

/* A text field of a stored message as a new C string ("" for NULL or a
 * value holding a NUL); NULL when out of memory. */
static char *field_cstr(const tbx__mfield_t *f)
{
	size_t len = f->p && !memchr(f->p, '\0', f->len) ? f->len : 0;
	char *s = malloc(len + 1);

	if (s) {
		if (len)
			memcpy(s, f->p, len);
		s[len] = '\0';
	}
	return s;
}

typedef struct token_out {
	const char *token;
	tbx__token_use_fn fn;
	void *opaque;
} token_out_t;

/* Calls the caller's function for each message of the row that carries
 * the token; a malformed value holds no token that can be matched. */
static int use_out_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	const token_out_t *t = opaque;
	const char *token = t->token;
	size_t tlen = strlen(token);
	tbx__mfield_t f[TBX__MF_COUNT];
	tbx__msgs_iter_t it;
	const void *blob;
	size_t len;
	int64_t seq = 0;

	(void)fn;

	blob = tbx__pg_bytea(res, i, 2, &len);
	if (tbx__msgs_iter_init(&it, blob, len) < 0)
		return 0;
	for (; tbx__msgs_iter_next(&it, f) == 1; seq++) {
		const tbx__mfield_t *tok = &f[TBX__MF_TOKEN];
		tbx__token_use_t u;
		char *id, *topic, *type;
		int stop;

		if (!tok->p || tok->len != tlen ||
		    memcmp(tok->p, token, tlen) != 0)
			continue;
		memset(&u, 0, sizeof(u));
		u.grp = text(res, i, 0);
		u.msg_id = text(res, i, 1);
		u.seq = seq;
		u.out_id = id = field_cstr(&f[TBX__MF_ID]);
		u.topic = topic = field_cstr(&f[TBX__MF_TOPIC]);
		u.type = type = field_cstr(&f[TBX__MF_TYPE]);
		stop = id && topic && type ? t->fn(t->opaque, &u) : 1;
		free(id);
		free(topic);
		free(type);
		if (stop)
			return 1;
	}
	return 0;
}

static int use_in_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	tbx__token_use_t u;

	memset(&u, 0, sizeof(u));
	u.grp = text(res, i, 0);
	u.msg_id = text(res, i, 1);
	u.topic = text(res, i, 2);
	u.partition = tbx__pg_i64(res, i, 3);
	u.offset = tbx__pg_i64(res, i, 4);
	return ((tbx__token_use_fn)fn)(opaque, &u);
}

int tbx__pgo_token_uses(tbx_outbox_t *base, const char *token, int incoming,
			tbx__token_use_fn fn, void *opaque)
{
	tbx__pg_params_t p;
	token_out_t t = {token, fn, opaque};

	if (incoming) {
		tbx__pgp_init(&p);
		tbx__pgp_text(&p, token);
		return each(ps(base), R_TOKEN_IN, &p, use_in_row, (any_fn)fn,
			    opaque);
	}
	return each(ps(base), R_TOKEN_OUT, NULL, use_out_row, NULL, &t);
}

/*
 * Dead letters.
 */

int tbx__pgo_dead_letters_summary(tbx_outbox_t *base, tbx__grp_sum_fn fn,
				  void *opaque)
{
	return each(ps(base), R_DL_SUMMARY, NULL, sum_row, (any_fn)fn, opaque);
}

static int dl_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	tbx__dl_rec_t d;

	d.id = tbx__pg_i64(res, i, 0);
	d.grp = text(res, i, 1);
	d.msg_id = text(res, i, 2);
	d.in_topic = text(res, i, 3);
	d.in_partition = tbx__pg_i64(res, i, 4);
	d.in_offset = tbx__pg_i64(res, i, 5);
	d.dlq_topic = text(res, i, 6);
	d.error = tbx__pg_text(res, i, 7);
	d.attempts = tbx__pg_i64(res, i, 8);
	d.created_ms = tbx__pg_i64(res, i, 9);
	d.pending = (int)tbx__pg_i64(res, i, 10);
	d.replayed_ms = PQgetisnull(res, i, 11) ? -1 : tbx__pg_i64(res, i, 11);
	return ((tbx__dl_fn)fn)(opaque, &d);
}

int tbx__pgo_dead_letters_list(tbx_outbox_t *base, const tbx__filter_t *f,
			       int64_t *total, tbx__dl_fn fn, void *opaque)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	int err;

	if ((err = filter_count(store, R_DL_COUNT, f, total)))
		return err;
	bind_filter(&p, f, 1, 1);
	return each(store, R_DL_LIST, &p, dl_row, (any_fn)fn, opaque);
}

/* @p s as a record number: decimal digits only, no sign. */
static int parse_number(const char *s, int64_t *n)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -1;
	*n = strtoll(s, &end, 10);
	return *end || *n < 0 ? -1 : 0;
}

int tbx__pgo_dead_letters_find(tbx_outbox_t *base, const char *id,
			       int by_number, const tbx__filter_t *f,
			       tbx__dl_fn fn, void *opaque)
{
	tbx__pg_params_t p;
	int64_t number;

	bind_filter(&p, f, 0, 0);
	if (by_number) {
		/* Not a number names no record (SQLite's CAST gives 0,
		 * which no record has). */
		if (parse_number(id, &number)) {
			tbx__pgp_free(&p);
			return TBX_OK;
		}
		tbx__pgp_i64(&p, number);
	} else {
		tbx__pgp_text(&p, id);
	}
	return each(ps(base), by_number ? R_DL_BY_NUMBER : R_DL_BY_ID, &p,
		    dl_row, (any_fn)fn, opaque);
}

int tbx__pgo_dead_letter_recorded(tbx_outbox_t *base, const char *grp,
				  const char *in_topic, int64_t partition,
				  int64_t offset, const char *dlq_topic,
				  int *found)
{
	tbx__pg_params_t p;
	int64_t one = 0;
	int err;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, in_topic);
	tbx__pgp_i64(&p, partition);
	tbx__pgp_i64(&p, offset);
	tbx__pgp_text(&p, dlq_topic);
	err = one_int(ps(base), R_DL_RECORDED, &p, &one);
	*found = one == 1;
	return err;
}

int tbx__pgo_dead_letter_replayed(tbx_outbox_t *base, const char *grp,
				  const char *in_topic, int64_t partition,
				  int64_t offset, const char *dlq_topic,
				  int64_t ms)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	int err;

	/* One statement: a transaction of its own unless one is open. */
	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_text(&p, in_topic);
	tbx__pgp_i64(&p, partition);
	tbx__pgp_i64(&p, offset);
	tbx__pgp_text(&p, dlq_topic);
	tbx__pgp_i64(&p, ms);
	err = tbx__pg_run(&store->reads, R_DL_REPLAYED, &p, NULL);
	tbx__pgp_free(&p);
	return err;
}

int tbx__pgo_dead_letter_groups(tbx_outbox_t *base, const char *dlq_topic,
				tbx__str_fn fn, void *opaque)
{
	tbx__pg_params_t p;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, dlq_topic);
	return each(ps(base), R_DL_GROUPS, &p, str_row, (any_fn)fn, opaque);
}

/*
 * Undelivered messages.
 */

int tbx__pgo_undelivered_count(tbx_outbox_t *base, int64_t *n)
{
	return one_int(ps(base), R_UD_COUNT, NULL, n);
}

static int ud_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	tbx__ud_rec_t u;

	/* A bit of a token set keeps its set, bit and partition; NULL for
	 * a per-message token. */
	u.tset = tbx__pg_text(res, i, 14);
	u.tbit = u.tset ? tbx__pg_i64(res, i, 15) : 0;
	u.tpart = u.tset ? tbx__pg_i64(res, i, 16) : -1;
	u.id = tbx__pg_i64(res, i, 0);
	u.grp = text(res, i, 1);
	u.msg_id = text(res, i, 2);
	u.out_id = text(res, i, 3);
	u.topic = text(res, i, 4);
	u.type = text(res, i, 5);
	/* libpq gives an empty value a non-NULL pointer: an empty key is
	 * told from none. */
	u.key = tbx__pg_bytea(res, i, 6, &u.key_len);
	u.payload = tbx__pg_bytea(res, i, 7, &u.payload_len);
	u.headers = tbx__pg_bytea(res, i, 8, &u.headers_len);
	u.token = tbx__pg_text(res, i, 9);
	u.mint_seq = tbx__pg_i64(res, i, 10);
	u.error = text(res, i, 11);
	u.attempts = tbx__pg_i64(res, i, 12);
	u.created_ms = tbx__pg_i64(res, i, 13);
	return ((tbx__ud_fn)fn)(opaque, &u);
}

int tbx__pgo_undelivered_list(tbx_outbox_t *base, const tbx__filter_t *f,
			      int64_t *total, tbx__ud_fn fn, void *opaque)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	int err;

	if ((err = filter_count(store, R_UD_COUNT_F, f, total)))
		return err;
	bind_filter(&p, f, 1, 1);
	return each(store, store->version < 6 ? R_UD_LIST_V5 : R_UD_LIST, &p,
		    ud_row, (any_fn)fn, opaque);
}

int tbx__pgo_undelivered_get(tbx_outbox_t *base, int64_t id,
			     const tbx__filter_t *f, tbx__ud_fn fn,
			     void *opaque)
{
	tbx__pg_params_t p;

	bind_filter(&p, f, 0, 0);
	tbx__pgp_i64(&p, id);
	return each(ps(base), ps(base)->version < 6 ? R_UD_GET_V5 : R_UD_GET,
		    &p, ud_row, (any_fn)fn, opaque);
}

int tbx__pgo_undelivered_delete(tbx_outbox_t *base, int64_t id)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	int err;

	/* One statement: a transaction of its own unless one is open. */
	tbx__pgp_init(&p);
	tbx__pgp_i64(&p, id);
	err = tbx__pg_run(&store->reads, R_UD_DELETE, &p, NULL);
	tbx__pgp_free(&p);
	return err;
}

/*
 * Alarms, ingress offsets, counts.
 */

static int alarm_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	tbx__alarm_t a;

	a.grp = text(res, i, 0);
	a.name = text(res, i, 1);
	a.count = tbx__pg_i64(res, i, 2);
	a.first_ms = tbx__pg_i64(res, i, 3);
	a.last_ms = tbx__pg_i64(res, i, 4);
	a.detail = tbx__pg_text(res, i, 5);
	return ((tbx__alarm_fn)fn)(opaque, &a);
}

int tbx__pgo_alarms(tbx_outbox_t *base, tbx__alarm_fn fn, void *opaque)
{
	return each(ps(base), R_ALARMS, NULL, alarm_row, (any_fn)fn, opaque);
}

static int binding_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	tbx__binding_t b;

	b.grp = text(res, i, 0);
	b.tokens_id = text(res, i, 1);
	b.tokens_where = text(res, i, 2);
	b.used_ms = tbx__pg_i64(res, i, 3);
	return ((tbx__binding_fn)fn)(opaque, &b);
}

int tbx__pgo_bindings(tbx_outbox_t *base, tbx__binding_fn fn, void *opaque)
{
	/* Opened read-only, a schema keeps its version: before 2, none. */
	if (ps(base)->version < 2)
		return TBX_OK;
	return each(ps(base), R_BINDINGS, NULL, binding_row, (any_fn)fn,
		    opaque);
}

static int ingress_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	tbx__ingress_t g;

	g.grp = text(res, i, 0);
	g.topic = text(res, i, 1);
	g.partition = tbx__pg_i64(res, i, 2);
	g.next_offset = tbx__pg_i64(res, i, 3);
	return ((tbx__ingress_fn)fn)(opaque, &g);
}

int tbx__pgo_ingress_list(tbx_outbox_t *base, tbx__ingress_fn fn, void *opaque)
{
	return each(ps(base), R_INGRESS, NULL, ingress_row, (any_fn)fn, opaque);
}

int tbx__pgo_count_older(tbx_outbox_t *base, const char *grp,
			 int64_t created_max, int64_t *rows)
{
	tbx__pg_params_t p;

	tbx__pgp_init(&p);
	tbx__pgp_text(&p, grp);
	tbx__pgp_i64(&p, created_max);
	return one_int(ps(base), R_COUNT_OLDER, &p, rows);
}

/* A text column into a fixed buffer, as stored: one too long is cut and
 * ends in "..." (outbox.h, obatch_list). */
static void ob_text(const PGresult *res, int i, int col, char *dst, size_t size)
{
	const char *t = text(res, i, col);

	if (strlen(t) < size) {
		tbx__strlcpy(dst, t, size);
		return;
	}
	memcpy(dst, t, size - 4);
	memcpy(dst + size - 4, "...", 4);
}

static int ob_row(const PGresult *res, int i, any_fn fn, void *opaque)
{
	tbx__obatch_t row;

	memset(&row, 0, sizeof(row));
	ob_text(res, i, 1, row.row_id, sizeof(row.row_id));
	ob_text(res, i, 2, row.attempt, sizeof(row.attempt));
	row.mint_seq = tbx__pg_i64(res, i, 3);
	row.tokfmt = (int)tbx__pg_i64(res, i, 4);
	row.created_ms = tbx__pg_i64(res, i, 5);
	row.stuck_ms = tbx__pg_null(res, i, 6) ? -1 : tbx__pg_i64(res, i, 6);
	row.dispatch_failures = tbx__pg_i64(res, i, 7);
	row.cover = tbx__pg_bytea(res, i, 8, &row.cover_len);
	row.msgs = tbx__pg_bytea(res, i, 9, &row.msgs_len);
	row.wire = tbx__pg_bytea(res, i, 10, &row.wire_len);
	return ((tbx__obatch_row_fn)fn)(opaque, text(res, i, 0), &row);
}

int tbx__pgo_obatch_list(tbx_outbox_t *base, const tbx__filter_t *f,
			 int64_t *total, tbx__obatch_row_fn fn, void *opaque)
{
	pg_store_t *store = ps(base);
	tbx__pg_params_t p;
	int err;

	/* Opened read-only, a schema keeps its version: before 4, no batch
	 * rows. */
	if (store->version < 4)
		return TBX_ESCHEMA;
	if ((err = filter_count(store, R_OB_COUNT, f, total)))
		return err;
	bind_filter(&p, f, 1, 1);
	return each(store, R_OB_LIST, &p, ob_row, (any_fn)fn, opaque);
}
