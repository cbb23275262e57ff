/*
 * `tokenbox inspect undelivered list|show|resend`: outgoing messages a
 * worker gave up on after dispatch.retry.max permanent delivery failures
 * and that the dead-letter topic did not take either (tbx_undelivered,
 * docs/architecture.md).  Each is kept whole — topic, key, payload, its
 * tbx-id and token, its headers — so that `resend` can send it as it
 * was once the cause is fixed (a topic created, a broker limit raised):
 * the receiving group still holds its token and handles it once.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/worker.h"
#include "tools/cli.h"
#include "tools/inspect.h"

#define UD_COLUMNS                                                             \
	"SELECT id, grp, msg_id, out_id, topic, type, key, payload, "          \
	"headers, token, mint_seq, error, attempts, created_ms FROM "          \
	"tbx_undelivered"
#define UD_WHERE                                                               \
	" WHERE (?1 IS NULL OR grp IN (SELECT value FROM json_each(?1)))"      \
	" AND created_ms <= ?2"

static const char *col(sqlite3_stmt *stmt, int i)
{
	const char *s = (const char *)sqlite3_column_text(stmt, i);
	return s ? s : "";
}

static int64_t created_max(const insp_t *in)
{
	return in->o->older_ms > 0 ? in->now_ms - in->o->older_ms : INT64_MAX;
}

static cJSON *ud_json(insp_t *in, sqlite3_stmt *stmt, int full)
{
	cJSON *o = cJSON_CreateObject();

	insp_json_add_int(o, "id", sqlite3_column_int64(stmt, 0));
	insp_json_add_str(o, "group", col(stmt, 1));
	insp_json_add_str(o, "msg_id", col(stmt, 2));
	insp_json_add_str(o, "out_id", col(stmt, 3));
	insp_json_add_str(o, "topic", col(stmt, 4));
	insp_json_add_str(o, "type", col(stmt, 5));
	insp_json_add_str(o, "error", col(stmt, 11));
	insp_json_add_int(o, "attempts", sqlite3_column_int64(stmt, 12));
	insp_json_add_int(o, "created_ms", sqlite3_column_int64(stmt, 13));
	insp_json_add_int(o, "age_ms",
			  in->now_ms - sqlite3_column_int64(stmt, 13));
	if (!full)
		return o;
	insp_json_add_str(o, "token",
			  sqlite3_column_text(stmt, 9) ? col(stmt, 9) : NULL);
	insp_json_add_int(o, "mint_seq", sqlite3_column_int64(stmt, 10));
	cJSON_AddItemToObject(
	    o, "key",
	    insp_bytes_json(sqlite3_column_blob(stmt, 6),
			    (size_t)sqlite3_column_bytes(stmt, 6)));
	cJSON_AddItemToObject(
	    o, "payload",
	    insp_bytes_json(sqlite3_column_blob(stmt, 7),
			    (size_t)sqlite3_column_bytes(stmt, 7)));
	cJSON *hdrs = cJSON_AddArrayToObject(o, "headers");
	const void *blob = sqlite3_column_blob(stmt, 8);
	size_t len = (size_t)sqlite3_column_bytes(stmt, 8), pos = 0;
	tbx_header_t h;
	while (tbx__hdrs_next(blob, len, &pos, &h) == 1) {
		cJSON *e = cJSON_CreateObject();
		insp_json_add_str(e, "name", h.name);
		cJSON_AddItemToObject(e, "value",
				      h.value ? insp_bytes_json(h.value, h.len)
					      : cJSON_CreateNull());
		cJSON_AddItemToArray(hdrs, e);
	}
	return o;
}

int insp_ud_list(insp_t *in)
{
	static const char sql[] =
	    UD_COLUMNS UD_WHERE " ORDER BY created_ms DESC, id DESC LIMIT ?3";
	static const char count_sql[] =
	    "SELECT count(*) FROM tbx_undelivered" UD_WHERE;
	sqlite3_stmt *stmt = NULL, *cnt_stmt = NULL;
	insp_tbl_t *tbl = NULL;
	cJSON *doc = NULL, *arr = NULL;
	char *groups = NULL, *groups2 = NULL;
	int64_t total = 0, shown = 0;
	int rc = INSPECT_EXIT_ERROR, r;

	if (!(stmt = insp_prepare(in, in->sdb, sql)) ||
	    !(cnt_stmt = insp_prepare(in, in->sdb, count_sql)) ||
	    insp_bind_groups(in, stmt, 1, &groups) ||
	    insp_bind_groups(in, cnt_stmt, 1, &groups2))
		goto out;
	sqlite3_bind_int64(stmt, 2, created_max(in));
	sqlite3_bind_int64(cnt_stmt, 2, created_max(in));
	sqlite3_bind_int64(stmt, 3, in->o->limit ? in->o->limit : -1);
	if (insp_step(in, cnt_stmt) < 0)
		goto out;
	total = sqlite3_column_int64(cnt_stmt, 0);
	if (in->o->json) {
		doc = cJSON_CreateObject();
		arr = cJSON_AddArrayToObject(doc, "undelivered");
	} else {
		tbl = insp_tbl_new(
		    "rrLLrL", (const char *const[]){"ID", "AGE", "GROUP",
						    "TOPIC", "ATT", "ERROR"});
	}
	while ((r = insp_step(in, stmt)) == SQLITE_ROW) {
		char age[32];

		shown++;
		if (doc) {
			cJSON_AddItemToArray(arr, ud_json(in, stmt, 0));
			continue;
		}
		insp_fmt_age(in->now_ms - sqlite3_column_int64(stmt, 13), age,
			     sizeof(age));
		insp_tbl_cellf(tbl, "%lld",
			       (long long)sqlite3_column_int64(stmt, 0));
		insp_tbl_cell(tbl, age);
		insp_tbl_cell(tbl, col(stmt, 1));
		insp_tbl_cell(tbl, col(stmt, 4));
		insp_tbl_cellf(tbl, "%lld",
			       (long long)sqlite3_column_int64(stmt, 12));
		insp_tbl_cell(tbl, col(stmt, 11));
	}
	if (r < 0)
		goto out;
	rc = insp_list_finish(in, &doc, tbl, total, shown,
			      "undelivered messages", " kept");
out:
	cJSON_Delete(doc);
	insp_tbl_free(tbl);
	sqlite3_finalize(stmt);
	sqlite3_finalize(cnt_stmt);
	cJSON_free(groups);
	cJSON_free(groups2);
	return rc;
}

/* The line of @p id as a prepared statement stepped to its row, or NULL
 * (after reporting) with *rc set. */
static sqlite3_stmt *ud_find(insp_t *in, sqlite3 *db, int *rc)
{
	static const char sql[] = UD_COLUMNS " WHERE id = ?1 AND (?2 IS NULL "
					     "OR grp IN (SELECT value FROM "
					     "json_each(?2)))";
	sqlite3_stmt *stmt;
	char *end, *groups = NULL;
	long long id = strtoll(in->o->id, &end, 10);
	int r;

	*rc = INSPECT_EXIT_ERROR;
	if (*end || id <= 0) {
		*rc = tbx_cli_usage(INSPECT_CMD,
				    "%s: '%s' is not a line number (the ID "
				    "column of 'undelivered list')",
				    in->o->cmd_name, in->o->id);
		return NULL;
	}
	if (!(stmt = insp_prepare(in, db, sql)))
		return NULL;
	sqlite3_bind_int64(stmt, 1, id);
	if (insp_bind_groups(in, stmt, 2, &groups)) {
		sqlite3_finalize(stmt);
		return NULL;
	}
	r = insp_step(in, stmt);
	cJSON_free(groups);
	if (r == SQLITE_ROW)
		return stmt;
	sqlite3_finalize(stmt);
	if (r == SQLITE_DONE) {
		fprintf(stderr, "tokenbox inspect: no undelivered message %s\n",
			in->o->id);
		*rc = INSPECT_EXIT_FINDING;
	}
	return NULL;
}

int insp_ud_show(insp_t *in)
{
	char when[40], age[32];
	sqlite3_stmt *stmt;
	int rc;

	if (!(stmt = ud_find(in, in->sdb, &rc)))
		return rc;
	if (in->o->json) {
		rc = insp_json_print(ud_json(in, stmt, 1), INSPECT_EXIT_OK);
		sqlite3_finalize(stmt);
		return rc;
	}
	insp_fmt_time(sqlite3_column_int64(stmt, 13), when, sizeof(when));
	insp_fmt_age(in->now_ms - sqlite3_column_int64(stmt, 13), age,
		     sizeof(age));
	printf("Undelivered message %lld\n",
	       (long long)sqlite3_column_int64(stmt, 0));
	insp_kv("group", col(stmt, 1), 2);
	insp_kv("outbox row", col(stmt, 2), 2);
	insp_kv("tbx-id", col(stmt, 3), 2);
	insp_kv("topic", col(stmt, 4), 2);
	insp_kv("type", col(stmt, 5), 2);
	insp_kv("tbx-token",
		sqlite3_column_text(stmt, 9) ? col(stmt, 9) : "(none)", 2);
	insp_kv("error", col(stmt, 11), 2);
	printf("  %-12s %lld\n", "attempts",
	       (long long)sqlite3_column_int64(stmt, 12));
	printf("  %-12s %s (%s ago)\n", "given up", when, age);
	insp_bytes_print("key", sqlite3_column_blob(stmt, 6),
			 (size_t)sqlite3_column_bytes(stmt, 6), 2, 0, "(none)");
	insp_bytes_print("payload", sqlite3_column_blob(stmt, 7),
			 (size_t)sqlite3_column_bytes(stmt, 7), 2, 0, "(null)");
	const void *blob = sqlite3_column_blob(stmt, 8);
	size_t len = (size_t)sqlite3_column_bytes(stmt, 8), pos = 0;
	tbx_header_t h;
	while (tbx__hdrs_next(blob, len, &pos, &h) == 1)
		insp_bytes_print(h.name, h.value, h.len, 2, 0, "(null)");
	sqlite3_finalize(stmt);
	return INSPECT_EXIT_OK;
}

/* Copies a stored blob (NULL stays NULL). */
static int blob_dup(sqlite3_stmt *stmt, int i, void **out, size_t *len)
{
	const void *p = sqlite3_column_blob(stmt, i);

	*len = (size_t)sqlite3_column_bytes(stmt, i);
	*out = NULL;
	if (sqlite3_column_type(stmt, i) == SQLITE_NULL)
		return TBX_OK;
	if (!(*out = malloc(*len ? *len : 1)))
		return TBX_ENOMEM;
	if (*len)
		memcpy(*out, p, *len);
	return TBX_OK;
}

/*
 * The id of the token store the message's token was minted in, for its
 * tbx-store header, or NULL (no header: receivers then check the token as
 * for a sender older than store ids).  The token store is inspect's
 * --tokens, which the worker that gave the message up used too.
 */
static const char *token_store_id(insp_t *in, char out[TBX_UUID_LEN + 1])
{
	sqlite3_stmt *stmt = NULL;
	const char *id = NULL;

	if (!in->tdb || in->schema[1] < 6 ||
	    sqlite3_prepare_v2(in->tdb,
			       "SELECT store_id FROM tbx_store_info WHERE "
			       "id = ?1",
			       -1, &stmt, NULL) != SQLITE_OK ||
	    sqlite3_bind_int(stmt, 1, 1) != SQLITE_OK)
		goto out;
	if (sqlite3_step(stmt) == SQLITE_ROW &&
	    sqlite3_column_type(stmt, 0) == SQLITE_TEXT) {
		tbx__strlcpy(out, (const char *)sqlite3_column_text(stmt, 0),
			     TBX_UUID_LEN + 1);
		id = out;
	}
out:
	sqlite3_finalize(stmt);
	return id;
}

/*
 * Sends the line as it was first sent — its topic, key, payload, tbx-id,
 * tbx-token, tbx-seq and headers — through an idempotent producer, and
 * deletes the line once the broker acknowledged it.  Sending it twice is
 * harmless: the receiving group handles one tbx-id with one token once.
 */
int insp_ud_resend(insp_t *in)
{
	tbx__db_opts_t opts;
	sqlite3 *db = NULL;
	sqlite3_stmt *stmt = NULL, *del = NULL;
	tbx_conf_t *conf = NULL;
	rd_kafka_t *producer = NULL;
	rd_kafka_resp_err_t rerr = RD_KAFKA_RESP_ERR_NO_ERROR;
	tbx__row_t row, *rowp = &row;
	tbx__outmsg_t *m;
	char errstr[512] = "", busy[24], store_id[TBX_UUID_LEN + 1];
	int rc = INSPECT_EXIT_ERROR, delivered = 0, err;

	tbx__row_init(&row);
	tbx__db_opts_init(&opts);
	opts.create = 0;
	opts.busy_timeout_ms = (int)in->o->busy_ms;
	if ((err = tbx__db_open(in->o->store, &opts, &db, errstr,
				sizeof(errstr))))
		return tbx_cli_usage(INSPECT_CMD, "%s", errstr);
	if (!(stmt = ud_find(in, db, &rc)))
		goto out;
	if (!(row.msgs = calloc(1, sizeof(*row.msgs)))) {
		rc = tbx_cli_usage(INSPECT_CMD, "out of memory");
		goto out;
	}
	row.msg_cap = row.msg_cnt = 1;
	m = &row.msgs[0];
	tbx__strlcpy(row.msg_id, col(stmt, 2), sizeof(row.msg_id));
	row.mint_seq = sqlite3_column_int64(stmt, 10);
	tbx__strlcpy(m->id, col(stmt, 3), sizeof(m->id));
	tbx__strlcpy(m->token, col(stmt, 9), sizeof(m->token));
	if (!(m->topic = tbx__strdup(col(stmt, 4))) ||
	    !(m->type = tbx__strdup(col(stmt, 5))) ||
	    blob_dup(stmt, 6, &m->key, &m->key_len) ||
	    blob_dup(stmt, 7, &m->payload, &m->payload_len) ||
	    blob_dup(stmt, 8, &m->headers, &m->headers_len)) {
		rc = tbx_cli_usage(INSPECT_CMD, "out of memory");
		goto out;
	}
	snprintf(busy, sizeof(busy), "%lld", in->o->busy_ms);
	if (!(conf = tbx_conf_new()) ||
	    tbx_conf_set(conf, "kafka.bootstrap.servers", in->o->servers,
			 errstr, sizeof(errstr)) ||
	    !(producer = tbx__producer_new(conf, errstr, sizeof(errstr)))) {
		rc = tbx_cli_usage(INSPECT_CMD, "resend: %s",
				   *errstr ? errstr : "out of memory");
		goto out;
	}
	tbx__dispatch(producer, token_store_id(in, store_id), &rowp, 1,
		      &delivered, NULL, &rerr, errstr, sizeof(errstr));
	if (!delivered) {
		rc = tbx_cli_usage(INSPECT_CMD,
				   "resend: %s to %s not delivered: %s; the "
				   "line is kept",
				   m->id, m->topic, rd_kafka_err2str(rerr));
		goto out;
	}
	if (!(del = insp_prepare(in, db,
				 "DELETE FROM tbx_undelivered WHERE id = ?1")))
		goto out;
	sqlite3_bind_int64(del, 1, sqlite3_column_int64(stmt, 0));
	if (insp_step(in, del) < 0)
		goto out;
	if (in->o->json) {
		cJSON *doc = cJSON_CreateObject();
		insp_json_add_int(doc, "id", sqlite3_column_int64(stmt, 0));
		insp_json_add_str(doc, "out_id", m->id);
		insp_json_add_str(doc, "topic", m->topic);
		cJSON_AddBoolToObject(doc, "delivered", 1);
		rc = insp_json_print(doc, INSPECT_EXIT_OK);
	} else {
		printf("resent %s to %s; line %lld removed\n", m->id, m->topic,
		       (long long)sqlite3_column_int64(stmt, 0));
		rc = INSPECT_EXIT_OK;
	}
out:
	sqlite3_finalize(del);
	sqlite3_finalize(stmt);
	if (producer)
		rd_kafka_destroy(producer);
	tbx_conf_destroy(conf);
	tbx__row_clear(&row);
	sqlite3_close_v2(db);
	return rc;
}
