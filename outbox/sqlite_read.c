/*
 * The SQLite backend of the service store: the read side and the repairs
 * of `tokenbox inspect` (outbox/outbox.h, "the read side").  Statements
 * are prepared once per store in the shared cache (store/stmt.h), every
 * value is bound, and each is reset as soon as its listing ends.
 *
 * The --group filter is bound as one JSON array and read back with
 * json_each() (store/db_read.h): one statement text whatever the number
 * of groups.
 *
 * @locality one thread at a time per store.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/str.h"
#include "outbox/sqlite_int.h"
#include "store/db_read.h"
#include "store/msgs.h"

/* Shared WHERE of the listings: ?1 the groups (JSON array or NULL), ?2
 * the newest created_ms taken. */
#define GRP_IN(col)                                                            \
	"(?1 IS NULL OR " col " IN (SELECT value FROM json_each(?1)))"

#define DL_COLUMNS                                                             \
	"SELECT d.id, d.grp, d.msg_id, d.in_topic, d.in_partition, "           \
	"d.in_offset, d.dlq_topic, d.error, d.attempts, d.created_ms, "        \
	"EXISTS (SELECT 1 FROM tbx_outbox o WHERE o.grp = d.grp AND o.msg_id " \
	"= d.msg_id AND o.kind = 1), d.replayed_ms FROM tbx_dead_letters d"
#define UD_COLUMNS                                                             \
	"SELECT id, grp, msg_id, out_id, topic, type, key, payload, "          \
	"headers, token, mint_seq, error, attempts, created_ms, tset, tbit, "  \
	"tpart FROM tbx_undelivered"

enum {
	R_BEGIN,
	R_END,
	R_SCHEMA,
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
	R_UD_DELETE,
	R_ALARMS,
	R_BINDINGS,
	R_INGRESS,
	R_COUNT_OLDER,
	R_OB_LIST,
	R_OB_COUNT,
	R__COUNT
};

_Static_assert(R__COUNT <= SQ_READ_STMTS, "read_slots[] too small");

static const char *const rsql[R__COUNT] = {
    /* Deferred: a read transaction, the snapshot of the first read. */
    [R_BEGIN] = "BEGIN",
    [R_END] = "COMMIT",
    [R_SCHEMA] = "PRAGMA user_version",
    /* An ingress row below 0 is no offset (ingress_get reads it as
     * none; PostgreSQL's lock of a partition before its first offset
     * leaves one, outbox/pg.c): it serves no group and is not listed,
     * as on PostgreSQL (outbox/pg_read.c). */
    [R_GROUPS] = "SELECT grp FROM tbx_outbox UNION SELECT grp FROM "
		 "tbx_ingress WHERE next_offset >= 0 UNION SELECT grp FROM "
		 "tbx_dead_letters ORDER BY 1",
    /* Schema 12 on: a group with batch rows alone is served too. */
    [R_GROUPS_BATCH] = "SELECT grp FROM tbx_outbox UNION SELECT grp FROM "
		       "tbx_ingress WHERE next_offset >= 0 UNION SELECT grp "
		       "FROM tbx_dead_letters UNION SELECT grp FROM "
		       "tbx_obatch ORDER BY 1",
    [R_ROWS_SUMMARY] = "SELECT grp, sum(attempt IS NULL), sum(attempt IS NOT "
		       "NULL), sum(created_ms <= ?1), sum(stuck_ms IS NOT "
		       "NULL), min(created_ms) FROM tbx_outbox GROUP BY grp "
		       "ORDER BY grp",
    [R_ROWS_LIST] =
	"SELECT o.grp, o.msg_id, o.in_topic, o.in_partition, o.in_offset, "
	"o.in_token, o.attempt, o.mint_seq, o.kind, o.error, o.created_ms, "
	"o.msgs, o.in_tbit FROM tbx_outbox o WHERE " GRP_IN(
	    "o.grp") " AND o.created_ms <= ?2 ORDER BY o.created_ms, o.grp, "
		     "o.msg_id LIMIT ?3",
    [R_ROWS_COUNT] = "SELECT count(*) FROM tbx_outbox o WHERE " GRP_IN(
	"o.grp") " AND o.created_ms <= ?2",
    [R_ROW_EXACT] = "SELECT msg_id FROM tbx_outbox WHERE msg_id = ?1 LIMIT 1",
    [R_ROW_PREFIX] = "SELECT DISTINCT msg_id FROM tbx_outbox WHERE "
		     "substr(msg_id, 1, length(?1)) = ?1 LIMIT 2",
    [R_ROW_GROUPS] =
	"SELECT grp FROM tbx_outbox o WHERE o.msg_id = ?2 AND " GRP_IN(
	    "o.grp") " ORDER BY grp",
    /* Tokens are in the messages (store/msgs.h), and a row has them only
     * once it has an attempt: the rows in flight are read and matched. */
    [R_TOKEN_OUT] = "SELECT grp, msg_id, msgs FROM tbx_outbox WHERE "
		    "attempt IS NOT NULL AND msgs IS NOT NULL ORDER BY grp, "
		    "msg_id",
    [R_TOKEN_IN] = "SELECT grp, msg_id, in_topic, in_partition, in_offset "
		   "FROM tbx_outbox WHERE in_token = ?1 ORDER BY grp, msg_id",
    [R_DL_SUMMARY] = "SELECT d.grp, count(*), sum(EXISTS (SELECT 1 FROM "
		     "tbx_outbox o WHERE o.grp = d.grp AND o.msg_id = "
		     "d.msg_id AND o.kind = 1)), count(d.replayed_ms), "
		     "max(d.created_ms) FROM tbx_dead_letters d GROUP BY "
		     "d.grp ORDER BY d.grp",
    [R_DL_LIST] = DL_COLUMNS " WHERE " GRP_IN(
	"d.grp") " AND d.created_ms <= ?2 ORDER BY d.created_ms DESC, d.id "
		 "DESC LIMIT ?3",
    [R_DL_COUNT] = "SELECT count(*) FROM tbx_dead_letters d WHERE " GRP_IN(
	"d.grp") " AND d.created_ms <= ?2",
    [R_DL_BY_NUMBER] = DL_COLUMNS " WHERE d.id = CAST(?2 AS INTEGER) "
				  "AND " GRP_IN("d.grp"),
    [R_DL_BY_ID] =
	DL_COLUMNS " WHERE d.msg_id = ?2 AND " GRP_IN("d.grp") " ORDER BY d.id",
    [R_DL_RECORDED] = "SELECT 1 FROM tbx_dead_letters WHERE grp = ?1 AND "
		      "in_topic = ?2 AND in_partition = ?3 AND in_offset = ?4 "
		      "AND dlq_topic = ?5",
    [R_DL_GROUPS] = "SELECT DISTINCT grp FROM tbx_dead_letters WHERE "
		    "dlq_topic = ?1 ORDER BY grp",
    [R_DL_REPLAYED] = "UPDATE tbx_dead_letters SET replayed_ms = "
		      "coalesce(replayed_ms, ?6) WHERE grp = ?1 AND in_topic = "
		      "?2 AND in_partition = ?3 AND in_offset = ?4 AND "
		      "dlq_topic = ?5",
    [R_UD_COUNT] = "SELECT count(*) FROM tbx_undelivered",
    [R_UD_LIST] = UD_COLUMNS " WHERE " GRP_IN(
	"grp") " AND created_ms <= ?2 ORDER BY created_ms DESC, id DESC "
	       "LIMIT ?3",
    [R_UD_COUNT_F] = "SELECT count(*) FROM tbx_undelivered WHERE " GRP_IN(
	"grp") " AND created_ms <= ?2",
    [R_UD_GET] = UD_COLUMNS " WHERE id = ?2 AND " GRP_IN("grp"),
    [R_UD_DELETE] = "DELETE FROM tbx_undelivered WHERE id = ?1",
    [R_ALARMS] = "SELECT grp, name, count, first_ms, last_ms, detail FROM "
		 "tbx_alarms ORDER BY grp, name",
    [R_BINDINGS] = "SELECT grp, tokens_id, tokens_where, used_ms FROM "
		   "tbx_bindings ORDER BY grp",
    [R_INGRESS] = "SELECT grp, topic, \"partition\", next_offset FROM "
		  "tbx_ingress WHERE next_offset >= 0 ORDER BY grp, topic, "
		  "\"partition\"",
    [R_COUNT_OLDER] = "SELECT count(*) FROM tbx_outbox WHERE grp = ?1 AND "
		      "created_ms <= ?2",
    /* Schema 12 on. */
    [R_OB_LIST] = "SELECT grp, row_id, attempt, mint_seq, tokfmt, "
		  "created_ms, stuck_ms, dispatch_failures, cover, msgs, wire "
		  "FROM tbx_obatch WHERE " GRP_IN(
		      "grp") " AND created_ms <= ?2 ORDER BY created_ms, grp, "
			     "row_id LIMIT ?3",
    [R_OB_COUNT] = "SELECT count(*) FROM tbx_obatch WHERE " GRP_IN(
	"grp") " AND created_ms <= ?2",
};

static sq_store_t *sq(tbx_outbox_t *base)
{
	return (sq_store_t *)base;
}

void tbx__outbox_sqlite_read_init(sq_store_t *store)
{
	tbx__stmts_init(&store->reads, store->db, rsql, store->read_slots,
			R__COUNT);
}

/* Prepares @p q; on failure the mapped error. */
#define PREPARE(stmt, store, q)                                                \
	do {                                                                   \
		int err_ = tbx__stmt_get(&(store)->reads, (q), &(stmt));       \
		if (err_)                                                      \
			return err_;                                           \
	} while (0)

/* Counts with the filter (no limit) into *total, when asked. */
static int filter_count(sq_store_t *store, int q, const tbx__filter_t *f,
			int64_t *total)
{
	sqlite3_stmt *stmt;
	char *json = NULL;
	int err;

	if (!total)
		return TBX_OK;
	PREPARE(stmt, store, q);
	if (!(err = tbx__db_bind_filter(stmt, f, 1, 2, 0, &json)))
		err = tbx__db_one_int(stmt, total);
	sqlite3_clear_bindings(stmt);
	free(json);
	return err;
}

/*
 * Transactions and identity.
 */

int tbx__sq_read_begin(tbx_outbox_t *base)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;

	PREPARE(stmt, store, R_BEGIN);
	return tbx__db_one_int(stmt, &(int64_t){0});
}

void tbx__sq_read_end(tbx_outbox_t *base)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;

	if (sqlite3_get_autocommit(store->db) ||
	    tbx__stmt_get(&store->reads, R_END, &stmt))
		return;
	tbx__db_one_int(stmt, &(int64_t){0});
}

int tbx__sq_schema(tbx_outbox_t *base, int *version)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int64_t v = 0;
	int err;

	PREPARE(stmt, store, R_SCHEMA);
	err = tbx__db_one_int(stmt, &v);
	*version = (int)v;
	return err;
}

const char *tbx__sq_errmsg(tbx_outbox_t *base)
{
	sqlite3 *db = sq(base)->db;
	int rc = sqlite3_errcode(db);

	if (sq(base)->exec_err[0])
		return sq(base)->exec_err;

	if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE)
		return NULL;
	return sqlite3_errmsg(db);
}

/*
 * Listings.
 */

int tbx__sq_groups(tbx_outbox_t *base, tbx__str_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int version, err;

	/* Opened read-only, a file keeps its schema: before 12, no batch
	 * rows. */
	if ((err = tbx__sq_schema(base, &version)))
		return err;
	if (version >= 12)
		PREPARE(stmt, store, R_GROUPS_BATCH);
	else
		PREPARE(stmt, store, R_GROUPS);
	return tbx__db_each(stmt, tbx__db_str_row, (tbx__any_fn)fn, opaque);
}

int tbx__sq_rows_summary(tbx_outbox_t *base, int64_t created_max,
			 tbx__grp_sum_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;

	PREPARE(stmt, store, R_ROWS_SUMMARY);
	sqlite3_bind_int64(stmt, 1, created_max);
	return tbx__db_each(stmt, tbx__db_sum_row, (tbx__any_fn)fn, opaque);
}

static int row_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__row_t row;
	tbx__msgs_iter_t it;
	const void *blob;
	int stop;

	tbx__row_init(&row);
	tbx__strlcpy(row.msg_id, tbx__db_text(stmt, 1), sizeof(row.msg_id));
	tbx__strlcpy(row.in_topic, tbx__db_text(stmt, 2), sizeof(row.in_topic));
	row.in_partition = sqlite3_column_int(stmt, 3);
	row.in_offset = sqlite3_column_int64(stmt, 4);
	tbx__strlcpy(row.in_token, tbx__db_text(stmt, 5), sizeof(row.in_token));
	tbx__strlcpy(row.attempt, tbx__db_text(stmt, 6), sizeof(row.attempt));
	row.mint_seq = sqlite3_column_int64(stmt, 7);
	row.kind = sqlite3_column_int(stmt, 8);
	/* Borrowed for the call: the row is not the caller's to clear. */
	row.error = (char *)tbx__db_text_or_null(stmt, 9);
	row.created_ms = sqlite3_column_int64(stmt, 10);
	row.in_set = sqlite3_column_type(stmt, 12) != SQLITE_NULL;
	row.in_tbit = row.in_set ? (uint32_t)sqlite3_column_int64(stmt, 12) : 0;
	/* The count the blob announces; loading the row checks the rest. */
	blob = sqlite3_column_blob(stmt, 11);
	if (tbx__msgs_iter_init(&it, blob,
				(size_t)sqlite3_column_bytes(stmt, 11)) < 0)
		it.left = 0;
	stop = ((tbx__row_fn)fn)(opaque, tbx__db_text(stmt, 0), &row,
				 (int64_t)it.left);
	return stop;
}

int tbx__sq_rows_list(tbx_outbox_t *base, const tbx__filter_t *f,
		      int64_t *total, tbx__row_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	char *json = NULL;
	int err;

	if ((err = filter_count(store, R_ROWS_COUNT, f, total)))
		return err;
	PREPARE(stmt, store, R_ROWS_LIST);
	if (!(err = tbx__db_bind_filter(stmt, f, 1, 2, 3, &json)))
		err = tbx__db_each(stmt, row_row, (tbx__any_fn)fn, opaque);
	sqlite3_clear_bindings(stmt);
	free(json);
	return err;
}

int tbx__sq_row_match(tbx_outbox_t *base, const char *id,
		      char out[TBX_MSGID_MAX + 1], int *matches)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *exact, *prefix;

	PREPARE(exact, store, R_ROW_EXACT);
	PREPARE(prefix, store, R_ROW_PREFIX);
	return tbx__db_match(exact, prefix, id, out, TBX_MSGID_MAX + 1,
			     matches);
}

int tbx__sq_row_groups(tbx_outbox_t *base, const char *msg_id,
		       const tbx__filter_t *f, tbx__str_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	char *json = NULL;
	int err;

	PREPARE(stmt, store, R_ROW_GROUPS);
	if (!(err = tbx__db_bind_filter(stmt, f, 1, 0, 0, &json))) {
		sqlite3_bind_text(stmt, 2, msg_id, -1, SQLITE_STATIC);
		err = tbx__db_each(stmt, tbx__db_str_row, (tbx__any_fn)fn,
				   opaque);
	}
	sqlite3_clear_bindings(stmt);
	free(json);
	return err;
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
 * the token; a malformed blob holds no token that can be matched. */
static int use_out_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	const token_out_t *t = opaque;
	size_t tlen = strlen(t->token);
	tbx__mfield_t f[TBX__MF_COUNT];
	tbx__msgs_iter_t it;
	const void *blob;
	int64_t seq = 0;

	(void)fn;
	blob = sqlite3_column_blob(stmt, 2);
	if (tbx__msgs_iter_init(&it, blob,
				(size_t)sqlite3_column_bytes(stmt, 2)) < 0)
		return 0;
	for (; tbx__msgs_iter_next(&it, f) == 1; seq++) {
		const tbx__mfield_t *tok = &f[TBX__MF_TOKEN];
		tbx__token_use_t u;
		char *id, *topic, *type;
		int stop;

		if (!tok->p || tok->len != tlen ||
		    memcmp(tok->p, t->token, tlen) != 0)
			continue;
		memset(&u, 0, sizeof(u));
		u.grp = tbx__db_text(stmt, 0);
		u.msg_id = tbx__db_text(stmt, 1);
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

static int use_in_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__token_use_t u;

	memset(&u, 0, sizeof(u));
	u.grp = tbx__db_text(stmt, 0);
	u.msg_id = tbx__db_text(stmt, 1);
	u.topic = tbx__db_text(stmt, 2);
	u.partition = sqlite3_column_int64(stmt, 3);
	u.offset = sqlite3_column_int64(stmt, 4);
	return ((tbx__token_use_fn)fn)(opaque, &u);
}

int tbx__sq_token_uses(tbx_outbox_t *base, const char *token, int incoming,
		       tbx__token_use_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int q = incoming ? R_TOKEN_IN : R_TOKEN_OUT, err;

	token_out_t t = {token, fn, opaque};

	PREPARE(stmt, store, q);
	if (incoming) {
		sqlite3_bind_text(stmt, 1, token, -1, SQLITE_STATIC);
		err = tbx__db_each(stmt, use_in_row, (tbx__any_fn)fn, opaque);
	} else {
		err = tbx__db_each(stmt, use_out_row, (tbx__any_fn)fn, &t);
	}
	sqlite3_clear_bindings(stmt);
	return err;
}

/*
 * Dead letters.
 */

int tbx__sq_dead_letters_summary(tbx_outbox_t *base, tbx__grp_sum_fn fn,
				 void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;

	PREPARE(stmt, store, R_DL_SUMMARY);
	return tbx__db_each(stmt, tbx__db_sum_row, (tbx__any_fn)fn, opaque);
}

static int dl_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__dl_rec_t d;

	d.id = sqlite3_column_int64(stmt, 0);
	d.grp = tbx__db_text(stmt, 1);
	d.msg_id = tbx__db_text(stmt, 2);
	d.in_topic = tbx__db_text(stmt, 3);
	d.in_partition = sqlite3_column_int64(stmt, 4);
	d.in_offset = sqlite3_column_int64(stmt, 5);
	d.dlq_topic = tbx__db_text(stmt, 6);
	d.error = tbx__db_text_or_null(stmt, 7);
	d.attempts = sqlite3_column_int64(stmt, 8);
	d.created_ms = sqlite3_column_int64(stmt, 9);
	d.pending = sqlite3_column_int(stmt, 10);
	d.replayed_ms = sqlite3_column_type(stmt, 11) == SQLITE_NULL
			    ? -1
			    : sqlite3_column_int64(stmt, 11);
	return ((tbx__dl_fn)fn)(opaque, &d);
}

int tbx__sq_dead_letters_list(tbx_outbox_t *base, const tbx__filter_t *f,
			      int64_t *total, tbx__dl_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	char *json = NULL;
	int err;

	if ((err = filter_count(store, R_DL_COUNT, f, total)))
		return err;
	PREPARE(stmt, store, R_DL_LIST);
	if (!(err = tbx__db_bind_filter(stmt, f, 1, 2, 3, &json)))
		err = tbx__db_each(stmt, dl_row, (tbx__any_fn)fn, opaque);
	sqlite3_clear_bindings(stmt);
	free(json);
	return err;
}

int tbx__sq_dead_letters_find(tbx_outbox_t *base, const char *id, int by_number,
			      const tbx__filter_t *f, tbx__dl_fn fn,
			      void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	char *json = NULL;
	int q = by_number ? R_DL_BY_NUMBER : R_DL_BY_ID, err;

	PREPARE(stmt, store, q);
	if (!(err = tbx__db_bind_filter(stmt, f, 1, 0, 0, &json))) {
		sqlite3_bind_text(stmt, 2, id, -1, SQLITE_STATIC);
		err = tbx__db_each(stmt, dl_row, (tbx__any_fn)fn, opaque);
	}
	sqlite3_clear_bindings(stmt);
	free(json);
	return err;
}

int tbx__sq_dead_letter_recorded(tbx_outbox_t *base, const char *grp,
				 const char *in_topic, int64_t partition,
				 int64_t offset, const char *dlq_topic,
				 int *found)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int64_t one = 0;
	int err;

	PREPARE(stmt, store, R_DL_RECORDED);
	sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 2, in_topic, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 3, partition);
	sqlite3_bind_int64(stmt, 4, offset);
	sqlite3_bind_text(stmt, 5, dlq_topic, -1, SQLITE_STATIC);
	err = tbx__db_one_int(stmt, &one);
	sqlite3_clear_bindings(stmt);
	*found = one == 1;
	return err;
}

int tbx__sq_dead_letter_replayed(tbx_outbox_t *base, const char *grp,
				 const char *in_topic, int64_t partition,
				 int64_t offset, const char *dlq_topic,
				 int64_t ms)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int64_t none;
	int err;

	PREPARE(stmt, store, R_DL_REPLAYED);
	sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 2, in_topic, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 3, partition);
	sqlite3_bind_int64(stmt, 4, offset);
	sqlite3_bind_text(stmt, 5, dlq_topic, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 6, ms);
	err = tbx__db_one_int(stmt, &none);
	sqlite3_clear_bindings(stmt);
	return err;
}

int tbx__sq_dead_letter_groups(tbx_outbox_t *base, const char *dlq_topic,
			       tbx__str_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int err;

	PREPARE(stmt, store, R_DL_GROUPS);
	sqlite3_bind_text(stmt, 1, dlq_topic, -1, SQLITE_STATIC);
	err = tbx__db_each(stmt, tbx__db_str_row, (tbx__any_fn)fn, opaque);
	sqlite3_clear_bindings(stmt);
	return err;
}

/*
 * Undelivered messages.
 */

int tbx__sq_undelivered_count(tbx_outbox_t *base, int64_t *n)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;

	PREPARE(stmt, store, R_UD_COUNT);
	return tbx__db_one_int(stmt, n);
}

static int ud_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__ud_rec_t u;

	u.id = sqlite3_column_int64(stmt, 0);
	u.grp = tbx__db_text(stmt, 1);
	u.msg_id = tbx__db_text(stmt, 2);
	u.out_id = tbx__db_text(stmt, 3);
	u.topic = tbx__db_text(stmt, 4);
	u.type = tbx__db_text(stmt, 5);
	u.key = sqlite3_column_blob(stmt, 6);
	u.key_len = (size_t)sqlite3_column_bytes(stmt, 6);
	u.payload = sqlite3_column_blob(stmt, 7);
	u.payload_len = (size_t)sqlite3_column_bytes(stmt, 7);
	u.headers = sqlite3_column_blob(stmt, 8);
	u.headers_len = (size_t)sqlite3_column_bytes(stmt, 8);
	/* An empty blob reads as a NULL pointer: tell it from SQL NULL. */
	if (!u.key && sqlite3_column_type(stmt, 6) != SQLITE_NULL)
		u.key = "";
	if (!u.payload && sqlite3_column_type(stmt, 7) != SQLITE_NULL)
		u.payload = "";
	u.token = tbx__db_text_or_null(stmt, 9);
	u.mint_seq = sqlite3_column_int64(stmt, 10);
	u.error = tbx__db_text(stmt, 11);
	u.attempts = sqlite3_column_int64(stmt, 12);
	u.created_ms = sqlite3_column_int64(stmt, 13);
	u.tset = tbx__db_text_or_null(stmt, 14);
	u.tbit = u.tset ? sqlite3_column_int64(stmt, 15) : 0;
	u.tpart = u.tset ? sqlite3_column_int64(stmt, 16) : -1;
	return ((tbx__ud_fn)fn)(opaque, &u);
}

int tbx__sq_undelivered_list(tbx_outbox_t *base, const tbx__filter_t *f,
			     int64_t *total, tbx__ud_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	char *json = NULL;
	int err;

	if ((err = filter_count(store, R_UD_COUNT_F, f, total)))
		return err;
	PREPARE(stmt, store, R_UD_LIST);
	if (!(err = tbx__db_bind_filter(stmt, f, 1, 2, 3, &json)))
		err = tbx__db_each(stmt, ud_row, (tbx__any_fn)fn, opaque);
	sqlite3_clear_bindings(stmt);
	free(json);
	return err;
}

int tbx__sq_undelivered_get(tbx_outbox_t *base, int64_t id,
			    const tbx__filter_t *f, tbx__ud_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	char *json = NULL;
	int err;

	PREPARE(stmt, store, R_UD_GET);
	if (!(err = tbx__db_bind_filter(stmt, f, 1, 0, 0, &json))) {
		sqlite3_bind_int64(stmt, 2, id);
		err = tbx__db_each(stmt, ud_row, (tbx__any_fn)fn, opaque);
	}
	sqlite3_clear_bindings(stmt);
	free(json);
	return err;
}

int tbx__sq_undelivered_delete(tbx_outbox_t *base, int64_t id)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int64_t none;

	PREPARE(stmt, store, R_UD_DELETE);
	sqlite3_bind_int64(stmt, 1, id);
	return tbx__db_one_int(stmt, &none);
}

/*
 * Alarms, ingress offsets, counts.
 */

static int alarm_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__alarm_t a;

	a.grp = tbx__db_text(stmt, 0);
	a.name = tbx__db_text(stmt, 1);
	a.count = sqlite3_column_int64(stmt, 2);
	a.first_ms = sqlite3_column_int64(stmt, 3);
	a.last_ms = sqlite3_column_int64(stmt, 4);
	a.detail = tbx__db_text_or_null(stmt, 5);
	return ((tbx__alarm_fn)fn)(opaque, &a);
}

int tbx__sq_alarms(tbx_outbox_t *base, tbx__alarm_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;

	PREPARE(stmt, store, R_ALARMS);
	return tbx__db_each(stmt, alarm_row, (tbx__any_fn)fn, opaque);
}

static int binding_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__binding_t b;

	b.grp = tbx__db_text(stmt, 0);
	b.tokens_id = tbx__db_text(stmt, 1);
	b.tokens_where = tbx__db_text(stmt, 2);
	b.used_ms = sqlite3_column_int64(stmt, 3);
	return ((tbx__binding_fn)fn)(opaque, &b);
}

int tbx__sq_bindings(tbx_outbox_t *base, tbx__binding_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int version, err;

	/* Opened read-only, a file keeps its schema: before 9, none. */
	if ((err = tbx__sq_schema(base, &version)) || version < 9)
		return err;
	PREPARE(stmt, store, R_BINDINGS);
	return tbx__db_each(stmt, binding_row, (tbx__any_fn)fn, opaque);
}

static int ingress_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__ingress_t g;

	g.grp = tbx__db_text(stmt, 0);
	g.topic = tbx__db_text(stmt, 1);
	g.partition = sqlite3_column_int64(stmt, 2);
	g.next_offset = sqlite3_column_int64(stmt, 3);
	return ((tbx__ingress_fn)fn)(opaque, &g);
}

int tbx__sq_ingress_list(tbx_outbox_t *base, tbx__ingress_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;

	PREPARE(stmt, store, R_INGRESS);
	return tbx__db_each(stmt, ingress_row, (tbx__any_fn)fn, opaque);
}

int tbx__sq_count_older(tbx_outbox_t *base, const char *grp,
			int64_t created_max, int64_t *rows)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	int err;

	PREPARE(stmt, store, R_COUNT_OLDER);
	sqlite3_bind_text(stmt, 1, grp, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 2, created_max);
	err = tbx__db_one_int(stmt, rows);
	sqlite3_clear_bindings(stmt);
	return err;
}

/* A text column into a fixed buffer, as stored: one too long is cut and
 * ends in "..." (outbox.h, obatch_list). */
static void ob_text(sqlite3_stmt *stmt, int i, char *dst, size_t size)
{
	const char *t = tbx__db_text(stmt, i);

	if (strlen(t) < size) {
		tbx__strlcpy(dst, t, size);
		return;
	}
	memcpy(dst, t, size - 4);
	memcpy(dst + size - 4, "...", 4);
}

static int ob_row(sqlite3_stmt *stmt, tbx__any_fn fn, void *opaque)
{
	tbx__obatch_t row;

	memset(&row, 0, sizeof(row));
	ob_text(stmt, 1, row.row_id, sizeof(row.row_id));
	ob_text(stmt, 2, row.attempt, sizeof(row.attempt));
	row.mint_seq = sqlite3_column_int64(stmt, 3);
	row.tokfmt = sqlite3_column_int(stmt, 4);
	row.created_ms = sqlite3_column_int64(stmt, 5);
	row.stuck_ms = sqlite3_column_type(stmt, 6) == SQLITE_NULL
			   ? -1
			   : sqlite3_column_int64(stmt, 6);
	row.dispatch_failures = sqlite3_column_int64(stmt, 7);
	row.cover = sqlite3_column_blob(stmt, 8);
	row.cover_len = (size_t)sqlite3_column_bytes(stmt, 8);
	row.msgs = sqlite3_column_blob(stmt, 9);
	row.msgs_len = (size_t)sqlite3_column_bytes(stmt, 9);
	row.wire = sqlite3_column_blob(stmt, 10);
	row.wire_len = (size_t)sqlite3_column_bytes(stmt, 10);
	return ((tbx__obatch_row_fn)fn)(opaque, tbx__db_text(stmt, 0), &row);
}

int tbx__sq_obatch_list(tbx_outbox_t *base, const tbx__filter_t *f,
			int64_t *total, tbx__obatch_row_fn fn, void *opaque)
{
	sq_store_t *store = sq(base);
	sqlite3_stmt *stmt;
	char *json = NULL;
	int version, err;

	/* Opened read-only, a file keeps its schema: before 12, no batch
	 * rows. */
	if ((err = tbx__sq_schema(base, &version)))
		return err;
	if (version < 12)
		return TBX_ESCHEMA;
	if ((err = filter_count(store, R_OB_COUNT, f, total)))
		return err;
	PREPARE(stmt, store, R_OB_LIST);
	if (!(err = tbx__db_bind_filter(stmt, f, 1, 2, 3, &json)))
		err = tbx__db_each(stmt, ob_row, (tbx__any_fn)fn, opaque);
	sqlite3_clear_bindings(stmt);
	free(json);
	return err;
}
