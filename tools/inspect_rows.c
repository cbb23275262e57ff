/*
 * `tokenbox inspect outbox list|show` and `dead-letters list|show`: the
 * service store's pending outbox rows and its record of dead letters
 * (tools/inspect.h).  Rows are loaded with the store's own
 * tbx_outbox_row_load(), so `show` prints what the protocol would resume.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/inspect.h"

/* Shared WHERE of the listings: ?1 the --group values (JSON array or
 * NULL), ?2 the newest created_ms listed. */
#define OUTBOX_WHERE                                                           \
	" WHERE (?1 IS NULL OR o.grp IN (SELECT value FROM json_each(?1)))"    \
	" AND o.created_ms <= ?2"
#define DL_WHERE                                                               \
	" WHERE (?1 IS NULL OR d.grp IN (SELECT value FROM json_each(?1)))"    \
	" AND d.created_ms <= ?2"

static const char *state_name(const tbx__row_t *row)
{
	return row->attempt[0] ? "tokened" : "processed";
}

static const char *kind_name(int kind, int json)
{
	if (kind == TBX_ROW_DEAD_LETTER)
		return json ? "dead_letter" : "dead letter";
	return "handled";
}

/* The newest created_ms a listing takes (--older-than). */
static int64_t created_max(insp_t *in)
{
	return in->o->older_ms >= 0 ? in->now_ms - in->o->older_ms : INT64_MAX;
}

static void opt_str(cJSON *o, const char *key, const char *s)
{
	insp_json_add_str(o, key, s && *s ? s : NULL);
}

cJSON *insp_row_json(insp_t *in, const char *grp, const tbx__row_t *row,
		     int64_t msg_count, int with_messages)
{
	cJSON *o = cJSON_CreateObject(), *arr;

	if (!o)
		return NULL;
	insp_json_add_str(o, "group", grp);
	insp_json_add_str(o, "msg_id", row->msg_id);
	insp_json_add_str(o, "state", state_name(row));
	insp_json_add_str(o, "kind", kind_name(row->kind, 1));
	insp_json_add_str(o, "in_topic", row->in_topic);
	insp_json_add_int(o, "in_partition", row->in_partition);
	insp_json_add_int(o, "in_offset", row->in_offset);
	opt_str(o, "in_token", row->in_token);
	opt_str(o, "attempt", row->attempt);
	if (row->attempt[0])
		insp_json_add_int(o, "mint_seq", row->mint_seq);
	else
		cJSON_AddNullToObject(o, "mint_seq");
	insp_json_add_str(o, "error", row->error);
	insp_json_add_int(o, "created_ms", row->created_ms);
	insp_json_add_int(o, "age_ms", insp_age(in, row->created_ms));
	insp_json_add_int(o, "message_count", msg_count);
	if (!with_messages)
		return o;
	arr = cJSON_AddArrayToObject(o, "messages");
	for (size_t i = 0; i < row->msg_cnt; i++) {
		const tbx__outmsg_t *m = &row->msgs[i];
		cJSON *jm = cJSON_CreateObject(), *hs;
		tbx_header_t h;
		size_t pos = 0;
		int r;

		cJSON_AddItemToArray(arr, jm);
		insp_json_add_int(jm, "seq", (int64_t)i);
		insp_json_add_str(jm, "id", m->id);
		opt_str(jm, "token", m->token);
		insp_json_add_str(jm, "topic", m->topic);
		insp_json_add_str(jm, "type", m->type);
		cJSON_AddItemToObject(jm, "key",
				      insp_bytes_json(m->key, m->key_len));
		cJSON_AddItemToObject(
		    jm, "payload", insp_bytes_json(m->payload, m->payload_len));
		hs = cJSON_AddArrayToObject(jm, "headers");
		while ((r = tbx__hdrs_next(m->headers, m->headers_len, &pos,
					   &h)) == 1) {
			cJSON *jh = cJSON_CreateObject();
			cJSON_AddItemToArray(hs, jh);
			insp_json_add_str(jh, "name", h.name);
			cJSON_AddItemToObject(jh, "value",
					      insp_bytes_json(h.value, h.len));
		}
		if (r < 0)
			cJSON_AddItemToObject(
			    jm, "headers_malformed",
			    insp_bytes_json(m->headers, m->headers_len));
	}
	return o;
}

void insp_row_print(insp_t *in, const char *grp, const tbx__row_t *row)
{
	char when[40], age[32], buf[512];

	insp_fmt_time(row->created_ms, when, sizeof(when));
	insp_fmt_age(insp_age(in, row->created_ms), age, sizeof(age));
	insp_kv("outbox row", row->msg_id, 0);
	insp_kv("group", grp, 2);
	insp_kv("state",
		row->attempt[0]
		    ? "tokened (tokens assigned: awaits dispatch, or "
		      "was dispatched and awaits D/E)"
		    : "processed (no tokens yet)",
		2);
	insp_kv("kind", kind_name(row->kind, 0), 2);
	snprintf(buf, sizeof(buf), "%s [%" PRId32 "] @%" PRId64, row->in_topic,
		 row->in_partition, row->in_offset);
	insp_kv("incoming", buf, 2);
	insp_kv("in token", row->in_token[0] ? row->in_token : "- (untokened)",
		2);
	insp_kv("attempt", row->attempt[0] ? row->attempt : "-", 2);
	if (row->attempt[0]) {
		snprintf(buf, sizeof(buf), "%" PRId64, row->mint_seq);
		insp_kv("mint seq", buf, 2);
	}
	snprintf(buf, sizeof(buf), "%s (%s ago)", when, age);
	insp_kv("created", buf, 2);
	if (row->error)
		insp_kv("error", row->error, 2);
	snprintf(buf, sizeof(buf), "%zu", row->msg_cnt);
	insp_kv("messages", buf, 2);
	for (size_t i = 0; i < row->msg_cnt; i++) {
		const tbx__outmsg_t *m = &row->msgs[i];
		tbx_header_t h;
		/* Header values line up with the other values, or after the
		 * longest name. */
		size_t pos = 0, cnt = 0, width = 11;
		int r;

		while (tbx__hdrs_next(m->headers, m->headers_len, &pos, &h) ==
		       1) {
			cnt++;
			if (strlen(h.name) + 2 > width)
				width = strlen(h.name) + 2;
		}
		printf("\n  message %zu of %zu\n", i + 1, row->msg_cnt);
		insp_kv("id", m->id, 4);
		insp_kv("token", m->token[0] ? m->token : "-", 4);
		insp_kv("topic", m->topic, 4);
		insp_kv("type", m->type, 4);
		insp_bytes_print("key", m->key, m->key_len, 4, 0, "(none)");
		insp_bytes_print("payload", m->payload, m->payload_len, 4, 0,
				 "(null)");
		snprintf(buf, sizeof(buf), "%zu", cnt);
		insp_kv("headers", buf, 4);
		pos = 0;
		while ((r = tbx__hdrs_next(m->headers, m->headers_len, &pos,
					   &h)) == 1)
			insp_bytes_print(h.name, h.value, h.len, 6, width,
					 "(null)");
		if (r < 0)
			insp_bytes_print("(malformed)", m->headers,
					 m->headers_len, 6, width, "");
	}
}

/*
 * outbox list
 */

int insp_outbox_list(insp_t *in)
{
	static const char sql[] =
	    "SELECT o.grp, o.msg_id, o.in_topic, o.in_partition, o.in_offset, "
	    "o.in_token, o.attempt, o.mint_seq, o.kind, o.error, o.created_ms, "
	    "(SELECT count(*) FROM tbx_outbox_msg m WHERE m.grp = o.grp AND "
	    "m.msg_id = o.msg_id) FROM tbx_outbox o" OUTBOX_WHERE
	    " ORDER BY o.created_ms, o.grp, o.msg_id LIMIT ?3";
	static const char count_sql[] =
	    "SELECT count(*) FROM tbx_outbox o" OUTBOX_WHERE;
	sqlite3_stmt *stmt = NULL, *cnt_stmt = NULL;
	insp_tbl_t *tbl = NULL;
	cJSON *doc = NULL, *arr = NULL;
	char *groups = NULL, *groups2 = NULL;
	int64_t total = 0, shown = 0;
	int rc = INSPECT_EXIT_ERROR, r;

	if (!(stmt = insp_prepare(in, in->sdb, sql)) ||
	    !(cnt_stmt = insp_prepare(in, in->sdb, count_sql)))
		goto out;
	if (insp_bind_groups(in, stmt, 1, &groups) ||
	    insp_bind_groups(in, cnt_stmt, 1, &groups2))
		goto out;
	sqlite3_bind_int64(stmt, 2, created_max(in));
	sqlite3_bind_int64(cnt_stmt, 2, created_max(in));
	sqlite3_bind_int64(stmt, 3, in->o->limit ? in->o->limit : -1);
	if ((r = insp_step(in, cnt_stmt)) < 0)
		goto out;
	total = sqlite3_column_int64(cnt_stmt, 0);
	if (in->o->json) {
		doc = cJSON_CreateObject();
		arr = cJSON_AddArrayToObject(doc, "rows");
	} else {
		tbl = insp_tbl_new(
		    "rLLllrL",
		    (const char *const[]){"AGE", "GROUP", "MESSAGE ID", "STATE",
					  "KIND", "OUT", "FROM"});
	}
	while ((r = insp_step(in, stmt)) == SQLITE_ROW) {
		tbx__row_t row;
		const char *grp = (const char *)sqlite3_column_text(stmt, 0);
		const char *s;
		char age[32];

		tbx__row_init(&row);
		s = (const char *)sqlite3_column_text(stmt, 1);
		tbx__strlcpy(row.msg_id, s ? s : "", sizeof(row.msg_id));
		s = (const char *)sqlite3_column_text(stmt, 2);
		tbx__strlcpy(row.in_topic, s ? s : "", sizeof(row.in_topic));
		row.in_partition = sqlite3_column_int(stmt, 3);
		row.in_offset = sqlite3_column_int64(stmt, 4);
		s = (const char *)sqlite3_column_text(stmt, 5);
		tbx__strlcpy(row.in_token, s ? s : "", sizeof(row.in_token));
		s = (const char *)sqlite3_column_text(stmt, 6);
		tbx__strlcpy(row.attempt, s ? s : "", sizeof(row.attempt));
		row.mint_seq = sqlite3_column_int64(stmt, 7);
		row.kind = sqlite3_column_int(stmt, 8);
		s = (const char *)sqlite3_column_text(stmt, 9);
		row.error = s ? tbx__strdup(s) : NULL;
		row.created_ms = sqlite3_column_int64(stmt, 10);
		shown++;
		if (doc) {
			cJSON_AddItemToArray(
			    arr,
			    insp_row_json(in, grp ? grp : "", &row,
					  sqlite3_column_int64(stmt, 11), 0));
		} else {
			insp_fmt_age(insp_age(in, row.created_ms), age,
				     sizeof(age));
			insp_tbl_cell(tbl, age);
			insp_tbl_cell(tbl, grp);
			insp_tbl_cell(tbl, row.msg_id);
			insp_tbl_cell(tbl, state_name(&row));
			insp_tbl_cell(tbl, row.kind == TBX_ROW_DEAD_LETTER
					       ? "dlq"
					       : "handled");
			insp_tbl_cellf(
			    tbl, "%lld",
			    (long long)sqlite3_column_int64(stmt, 11));
			insp_tbl_cellf(tbl, "%s[%" PRId32 "]@%" PRId64,
				       row.in_topic, row.in_partition,
				       row.in_offset);
		}
		tbx__row_clear(&row);
	}
	if (r < 0)
		goto out;
	rc = insp_list_finish(in, &doc, tbl, total, shown, "outbox rows",
			      " pending");
out:
	cJSON_Delete(doc);
	insp_tbl_free(tbl);
	sqlite3_finalize(stmt);
	sqlite3_finalize(cnt_stmt);
	cJSON_free(groups);
	cJSON_free(groups2);
	return rc;
}

int insp_outbox_show(insp_t *in)
{
	sqlite3_stmt *stmt = NULL;
	cJSON *doc = NULL, *arr = NULL;
	char *id = NULL, *groups = NULL;
	int rc, r, shown = 0;

	if ((rc = insp_resolve_id(
		 in, in->sdb, "SELECT 1 FROM tbx_outbox WHERE msg_id = ?1",
		 "SELECT DISTINCT msg_id FROM tbx_outbox WHERE "
		 "substr(msg_id, 1, length(?1)) = ?1 LIMIT 2",
		 in->o->id, &id)))
		return rc;
	if (!id)
		return tbx_cli_fail(INSPECT_CMD, "no outbox row %s", in->o->id);
	rc = INSPECT_EXIT_ERROR;
	if (!(stmt = insp_prepare(in, in->sdb,
				  "SELECT grp FROM tbx_outbox o WHERE "
				  "o.msg_id = ?2 AND (?1 IS NULL OR o.grp IN "
				  "(SELECT value FROM json_each(?1))) ORDER "
				  "BY grp")) ||
	    insp_bind_groups(in, stmt, 1, &groups))
		goto out;
	sqlite3_bind_text(stmt, 2, id, -1, SQLITE_STATIC);
	if (in->o->json) {
		doc = cJSON_CreateObject();
		arr = cJSON_AddArrayToObject(doc, "rows");
	}
	while ((r = insp_step(in, stmt)) == SQLITE_ROW) {
		char *grp =
		    tbx__strdup((const char *)sqlite3_column_text(stmt, 0));
		tbx__row_t row;
		int err;

		tbx__row_init(&row);
		if (!grp ||
		    (err = tbx_outbox_row_load(in->store, grp, id, &row))) {
			if (grp && err == TBX_ENOENT) {
				free(grp);
				continue;
			}
			insp_store_fail(in->o->store, grp ? err : TBX_ENOMEM,
					in->sdb);
			free(grp);
			r = -1;
			break;
		}
		if (doc) {
			cJSON_AddItemToArray(
			    arr, insp_row_json(in, grp, &row,
					       (int64_t)row.msg_cnt, 1));
		} else {
			if (shown)
				printf("\n");
			insp_row_print(in, grp, &row);
		}
		shown++;
		tbx__row_clear(&row);
		free(grp);
	}
	if (r < 0)
		goto out;
	if (!shown) {
		rc = tbx_cli_fail(INSPECT_CMD, "no outbox row %s of that group",
				  id);
		goto out;
	}
	rc = INSPECT_EXIT_OK;
	if (doc) {
		rc = insp_json_print(doc, rc);
		doc = NULL;
	}
out:
	cJSON_Delete(doc);
	sqlite3_finalize(stmt);
	cJSON_free(groups);
	free(id);
	return rc;
}

/*
 * dead-letters list|show
 */

#define DL_COLUMNS                                                             \
	"SELECT d.id, d.grp, d.msg_id, d.in_topic, d.in_partition, "           \
	"d.in_offset, d.dlq_topic, d.error, d.attempts, d.created_ms, "        \
	"EXISTS (SELECT 1 FROM tbx_outbox o WHERE o.grp = d.grp AND o.msg_id " \
	"= d.msg_id AND o.kind = 1) FROM tbx_dead_letters d"

static const char *col(sqlite3_stmt *stmt, int i)
{
	const char *s = (const char *)sqlite3_column_text(stmt, i);

	return s ? s : "";
}

static cJSON *dl_json(insp_t *in, sqlite3_stmt *stmt)
{
	cJSON *o = cJSON_CreateObject();
	int64_t created = sqlite3_column_int64(stmt, 9);

	if (!o)
		return NULL;
	insp_json_add_int(o, "id", sqlite3_column_int64(stmt, 0));
	insp_json_add_str(o, "group", col(stmt, 1));
	insp_json_add_str(o, "msg_id", col(stmt, 2));
	insp_json_add_str(o, "in_topic", col(stmt, 3));
	insp_json_add_int(o, "in_partition", sqlite3_column_int64(stmt, 4));
	insp_json_add_int(o, "in_offset", sqlite3_column_int64(stmt, 5));
	insp_json_add_str(o, "dlq_topic", col(stmt, 6));
	insp_json_add_str(o, "error",
			  (const char *)sqlite3_column_text(stmt, 7));
	insp_json_add_int(o, "attempts", sqlite3_column_int64(stmt, 8));
	insp_json_add_int(o, "created_ms", created);
	insp_json_add_int(o, "age_ms", insp_age(in, created));
	insp_json_add_str(o, "state",
			  sqlite3_column_int(stmt, 10) ? "pending" : "sent");
	return o;
}

int insp_dl_list(insp_t *in)
{
	static const char sql[] =
	    DL_COLUMNS DL_WHERE " ORDER BY d.created_ms DESC, d.id DESC LIMIT "
				"?3";
	static const char count_sql[] =
	    "SELECT count(*) FROM tbx_dead_letters d" DL_WHERE;
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
		arr = cJSON_AddArrayToObject(doc, "dead_letters");
	} else {
		tbl = insp_tbl_new("rrLLrlL", (const char *const[]){
						  "ID", "AGE", "GROUP", "FROM",
						  "ATT", "STATE", "ERROR"});
	}
	while ((r = insp_step(in, stmt)) == SQLITE_ROW) {
		char age[32];

		shown++;
		if (doc) {
			cJSON_AddItemToArray(arr, dl_json(in, stmt));
			continue;
		}
		insp_fmt_age(insp_age(in, sqlite3_column_int64(stmt, 9)), age,
			     sizeof(age));
		insp_tbl_cellf(tbl, "%lld",
			       (long long)sqlite3_column_int64(stmt, 0));
		insp_tbl_cell(tbl, age);
		insp_tbl_cell(tbl, col(stmt, 1));
		insp_tbl_cellf(tbl, "%s[%lld]@%lld", col(stmt, 3),
			       (long long)sqlite3_column_int64(stmt, 4),
			       (long long)sqlite3_column_int64(stmt, 5));
		insp_tbl_cellf(tbl, "%lld",
			       (long long)sqlite3_column_int64(stmt, 8));
		insp_tbl_cell(tbl, sqlite3_column_int(stmt, 10) ? "pending"
								: "sent");
		insp_tbl_cell(tbl, sqlite3_column_type(stmt, 7) == SQLITE_NULL
				       ? "-"
				       : col(stmt, 7));
	}
	if (r < 0)
		goto out;
	rc = insp_list_finish(in, &doc, tbl, total, shown, "dead letters",
			      " recorded");
out:
	cJSON_Delete(doc);
	insp_tbl_free(tbl);
	sqlite3_finalize(stmt);
	sqlite3_finalize(cnt_stmt);
	cJSON_free(groups);
	cJSON_free(groups2);
	return rc;
}

static void dl_print(insp_t *in, sqlite3_stmt *stmt)
{
	char when[40], age[32], buf[600];
	int64_t created = sqlite3_column_int64(stmt, 9);

	insp_fmt_time(created, when, sizeof(when));
	insp_fmt_age(insp_age(in, created), age, sizeof(age));
	snprintf(buf, sizeof(buf), "%lld",
		 (long long)sqlite3_column_int64(stmt, 0));
	insp_kv("dead letter", buf, 0);
	insp_kv("group", col(stmt, 1), 2);
	insp_kv("message id", col(stmt, 2), 2);
	snprintf(buf, sizeof(buf), "%s [%lld] @%lld", col(stmt, 3),
		 (long long)sqlite3_column_int64(stmt, 4),
		 (long long)sqlite3_column_int64(stmt, 5));
	insp_kv("from", buf, 2);
	insp_kv("to", col(stmt, 6), 2);
	insp_kv("error",
		sqlite3_column_type(stmt, 7) == SQLITE_NULL ? "-"
							    : col(stmt, 7),
		2);
	snprintf(buf, sizeof(buf), "%lld",
		 (long long)sqlite3_column_int64(stmt, 8));
	insp_kv("attempts", buf, 2);
	snprintf(buf, sizeof(buf), "%s (%s ago)", when, age);
	insp_kv("created", buf, 2);
	insp_kv("state",
		sqlite3_column_int(stmt, 10)
		    ? "pending: its outbox row (below) is not finished"
		    : "sent: delivered, its outbox row is finished",
		2);
}

int insp_dl_show(insp_t *in)
{
	const char *id = in->o->id;
	int by_number = strspn(id, "0123456789") == strlen(id);
	sqlite3_stmt *stmt = NULL;
	cJSON *doc = NULL, *arr = NULL;
	char *groups = NULL;
	int rc = INSPECT_EXIT_ERROR, r, shown = 0;

	if (!(stmt = insp_prepare(
		  in, in->sdb,
		  by_number ? DL_COLUMNS " WHERE d.id = CAST(?2 AS INTEGER) "
					 "AND (?1 IS NULL OR d.grp IN (SELECT "
					 "value FROM json_each(?1)))"
			    : DL_COLUMNS " WHERE d.msg_id = ?2 AND (?1 IS NULL "
					 "OR d.grp IN (SELECT value FROM "
					 "json_each(?1))) ORDER BY d.id")) ||
	    insp_bind_groups(in, stmt, 1, &groups))
		goto out;
	sqlite3_bind_text(stmt, 2, id, -1, SQLITE_STATIC);
	if (in->o->json) {
		doc = cJSON_CreateObject();
		arr = cJSON_AddArrayToObject(doc, "dead_letters");
	}
	while ((r = insp_step(in, stmt)) == SQLITE_ROW) {
		const char *grp = col(stmt, 1);
		int pending = sqlite3_column_int(stmt, 10), err = TBX_ENOENT;
		tbx__row_t row;

		tbx__row_init(&row);
		if (pending &&
		    (err = tbx_outbox_row_load(in->store, grp, col(stmt, 2),
					       &row)) &&
		    err != TBX_ENOENT) {
			insp_store_fail(in->o->store, err, in->sdb);
			r = -1;
			break;
		}
		if (doc) {
			cJSON *o = dl_json(in, stmt);
			cJSON_AddItemToArray(arr, o);
			if (err)
				cJSON_AddNullToObject(o, "outbox_row");
			else
				cJSON_AddItemToObject(
				    o, "outbox_row",
				    insp_row_json(in, grp, &row,
						  (int64_t)row.msg_cnt, 1));
		} else {
			if (shown)
				printf("\n");
			dl_print(in, stmt);
			if (!err) {
				printf("\n");
				insp_row_print(in, grp, &row);
			}
			if (in->o->topic &&
			    insp_dl_record_print(
				in, col(stmt, 3), sqlite3_column_int64(stmt, 4),
				sqlite3_column_int64(stmt, 5))) {
				tbx__row_clear(&row);
				r = -1;
				break;
			}
		}
		tbx__row_clear(&row);
		shown++;
	}
	if (r < 0)
		goto out;
	if (!shown) {
		rc = tbx_cli_fail(INSPECT_CMD, "no dead letter %s", id);
		goto out;
	}
	rc = INSPECT_EXIT_OK;
	if (doc) {
		rc = insp_json_print(doc, rc);
		doc = NULL;
	}
out:
	cJSON_Delete(doc);
	sqlite3_finalize(stmt);
	cJSON_free(groups);
	return rc;
}
