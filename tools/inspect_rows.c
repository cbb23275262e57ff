/*
 * `tokenbox inspect outbox list|show` and `dead-letters list|show`: the
 * service store's pending outbox rows and its record of dead letters
 * (tools/inspect.h), read through the service store's interface.  Rows
 * are loaded with the store's own tbx_outbox_row_load(), so `show` prints
 * what the protocol would resume.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/str.h"
#include "tools/cli.h"
#include "tools/inspect.h"

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

cJSON *insp_row_json(insp_t *in, const char *grp, const tbx__row_t *row,
		     int64_t msg_count, int with_messages)
{
	cJSON *o, *arr;

	if (!(o = insp_jobj(NULL,
			    "group:s msg_id:s state:s kind:s in_topic:s "
			    "in_partition:i in_offset:i in_token:o attempt:o",
			    grp, row->msg_id, state_name(row),
			    kind_name(row->kind, 1), row->in_topic,
			    (int64_t)row->in_partition, row->in_offset,
			    row->in_token, row->attempt)))
		return NULL;
	/* A record in the batched format: its token is this bit of the
	 * set in_token names (docs/batched-tokens.md). */
	if (row->in_set)
		insp_json_add_int(o, "in_tbit", (int64_t)row->in_tbit);
	else
		cJSON_AddNullToObject(o, "in_tbit");
	if (row->attempt[0])
		insp_json_add_int(o, "mint_seq", row->mint_seq);
	else
		cJSON_AddNullToObject(o, "mint_seq");
	insp_jadd(o, "error:s created_ms:i age_ms:i message_count:i",
		  row->error, row->created_ms, insp_age(in, row->created_ms),
		  msg_count);
	if (!with_messages)
		return o;
	arr = cJSON_AddArrayToObject(o, "messages");
	for (size_t i = 0; i < row->msg_cnt; i++) {
		const tbx__outmsg_t *m = &row->msgs[i];
		cJSON *jm;

		jm = insp_jobj(arr,
			       "seq:i id:s token:o topic:s type:s key:j "
			       "payload:j",
			       (int64_t)i, m->id, m->token, m->topic, m->type,
			       insp_bytes_json(m->key, m->key_len),
			       insp_bytes_json(m->payload, m->payload_len));
		insp_hdrs_json(jm, m->headers, m->headers_len);
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
	if (row->in_set) {
		snprintf(buf, sizeof(buf), "%s bit %" PRIu32 " (token set)",
			 row->in_token, row->in_tbit);
		insp_kv("in token", buf, 2);
	} else {
		insp_kv("in token",
			row->in_token[0] ? row->in_token : "- (untokened)", 2);
	}
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

		printf("\n  message %zu of %zu\n", i + 1, row->msg_cnt);
		insp_kv("id", m->id, 4);
		insp_kv("token", m->token[0] ? m->token : "-", 4);
		insp_kv("topic", m->topic, 4);
		insp_kv("type", m->type, 4);
		insp_bytes_print("key", m->key, m->key_len, 4, 0, "(none)");
		insp_bytes_print("payload", m->payload, m->payload_len, 4, 0,
				 "(null)");
		insp_hdrs_print(m->headers, m->headers_len);
	}
}

/*
 * outbox list
 */

typedef struct listing {
	insp_t *in;
	insp_tbl_t *tbl;
	cJSON *arr;
	int64_t shown;
} listing_t;

static int outbox_row(void *opaque, const char *grp, const tbx__row_t *row,
		      int64_t msg_cnt)
{
	listing_t *l = opaque;
	char age[32];

	l->shown++;
	if (l->arr) {
		cJSON_AddItemToArray(
		    l->arr, insp_row_json(l->in, grp, row, msg_cnt, 0));
		return 0;
	}
	insp_fmt_age(insp_age(l->in, row->created_ms), age, sizeof(age));
	insp_tbl_cell(l->tbl, age);
	insp_tbl_cell(l->tbl, grp);
	insp_tbl_cell(l->tbl, row->msg_id);
	insp_tbl_cell(l->tbl, state_name(row));
	insp_tbl_cell(l->tbl,
		      row->kind == TBX_ROW_DEAD_LETTER ? "dlq" : "handled");
	insp_tbl_cellf(l->tbl, "%lld", (long long)msg_cnt);
	insp_tbl_cellf(l->tbl, "%s[%" PRId32 "]@%" PRId64, row->in_topic,
		       row->in_partition, row->in_offset);
	return 0;
}

/* Batch rows (outbox.layout = batch, tbx_obatch) are listed after the
 * record rows, with the same filter (tools/inspect_obatch.c). */
int insp_outbox_list(insp_t *in)
{
	tbx__filter_t f = insp_filter(in, 1);
	listing_t l = {in, NULL, NULL, 0};
	cJSON *doc = NULL;
	int64_t total = 0, ob_shown = 0;
	int rc = INSPECT_EXIT_OK, err;

	if (in->o->json) {
		doc = cJSON_CreateObject();
		l.arr = cJSON_AddArrayToObject(doc, "rows");
	} else {
		l.tbl = insp_tbl_new(
		    "rLLllrL",
		    (const char *const[]){"AGE", "GROUP", "MESSAGE ID", "STATE",
					  "KIND", "OUT", "FROM"});
	}
	if ((err =
		 tbx_outbox_rows_list(in->store, &f, &total, outbox_row, &l))) {
		rc = insp_s_fail(in, err);
	} else if (doc) {
		if ((err = insp_ob_list(in, &f, doc, 0, &ob_shown)))
			rc = insp_s_fail(in, err);
		else
			rc = insp_list_finish(in, &doc, NULL, total, l.shown,
					      "outbox rows", " pending");
		if (!err && in->o->check && ob_shown)
			rc = INSPECT_EXIT_FINDING;
	} else {
		/* The record rows' table, or "no outbox rows" when neither
		 * kind has any to show. */
		if (l.shown)
			rc = insp_list_finish(in, &doc, l.tbl, total, l.shown,
					      "outbox rows", " pending");
		if ((err = insp_ob_list(in, &f, NULL, l.shown > 0, &ob_shown)))
			rc = insp_s_fail(in, err);
		else if (!l.shown && !ob_shown)
			rc = insp_list_finish(in, &doc, l.tbl, total, 0,
					      "outbox rows", " pending");
		else if (in->o->check)
			rc = INSPECT_EXIT_FINDING;
	}
	cJSON_Delete(doc);
	insp_tbl_free(l.tbl);
	return rc;
}

typedef struct shown_rows {
	insp_t *in;
	const char *id;
	cJSON *arr;
	int shown, err;
} shown_rows_t;

static int show_row(void *opaque, const char *grp)
{
	shown_rows_t *s = opaque;
	tbx__row_t row;
	int err;

	tbx__row_init(&row);
	if ((err = tbx_outbox_row_load(s->in->store, grp, s->id, &row))) {
		if (err == TBX_ENOENT)
			return 0;
		s->err = err;
		return 1;
	}
	if (s->arr) {
		cJSON_AddItemToArray(
		    s->arr,
		    insp_row_json(s->in, grp, &row, (int64_t)row.msg_cnt, 1));
	} else {
		if (s->shown)
			printf("\n");
		insp_row_print(s->in, grp, &row);
	}
	s->shown++;
	tbx__row_clear(&row);
	return 0;
}

/* ID names an outbox row's message id or a batch row's id (outbox.layout
 * = batch): an exact id of either kind first, else the one id of either
 * kind that starts with it. */
int insp_outbox_show(insp_t *in)
{
	tbx__filter_t f = insp_filter(in, 0);
	char id[TBX_MSGID_MAX + 1], ob_id[TBX_UUID_LEN + 1];
	shown_rows_t s = {in, id, NULL, 0, TBX_OK};
	cJSON *doc = NULL, *obs = NULL;
	int rc, err, n, ob_n, ob_exact, ob_shown = 0, rec_exact;

	if ((err = tbx_outbox_row_match(in->store, in->o->id, id, &n)) ||
	    (err = insp_ob_match(in, &f, in->o->id, ob_id, &ob_exact, &ob_n)))
		return insp_s_fail(in, err);
	rec_exact = n == 1 && strcmp(id, in->o->id) == 0;
	if (rec_exact || ob_exact) {
		n = rec_exact;
		ob_n = ob_exact;
	} else if (n + ob_n > 1) {
		return tbx_cli_usage(INSPECT_CMD,
				     "'%s' is the start of several ids; give "
				     "more of it",
				     in->o->id);
	}
	if (!n && !ob_n)
		return tbx_cli_fail(INSPECT_CMD, "no outbox row %s", in->o->id);
	if (in->o->json) {
		doc = cJSON_CreateObject();
		s.arr = cJSON_AddArrayToObject(doc, "rows");
		obs = cJSON_AddArrayToObject(doc, "batches");
	}
	err =
	    n ? tbx_outbox_row_groups(in->store, id, &f, show_row, &s) : TBX_OK;
	if (!err && !s.err && ob_n)
		err = insp_ob_show(in, &f, ob_id, obs, s.shown, &ob_shown);
	if (err || s.err)
		rc = insp_s_fail(in, s.err ? s.err : err);
	else if (!s.shown && !ob_shown)
		rc = tbx_cli_fail(INSPECT_CMD, "no outbox row %s of that group",
				  n ? id : ob_id);
	else if (doc)
		rc = insp_json_print(doc, INSPECT_EXIT_OK), doc = NULL;
	else
		rc = INSPECT_EXIT_OK;
	cJSON_Delete(doc);
	return rc;
}

/*
 * dead-letters list|show
 */

/* pending: its outbox row is not finished; sent: delivered to the
 * dead-letter topic; replayed: sent, and `dead-letters replay` sent it
 * back to its origin topic since. */
static const char *dl_state(const tbx__dl_rec_t *d)
{
	if (d->pending)
		return "pending";
	return d->replayed_ms >= 0 ? "replayed" : "sent";
}

static cJSON *dl_json(insp_t *in, const tbx__dl_rec_t *d)
{
	cJSON *o =
	    insp_jobj(NULL,
		      "id:i group:s msg_id:s in_topic:s in_partition:i "
		      "in_offset:i dlq_topic:s error:s attempts:i "
		      "created_ms:i age_ms:i state:s",
		      d->id, d->grp, d->msg_id, d->in_topic, d->in_partition,
		      d->in_offset, d->dlq_topic, d->error, d->attempts,
		      d->created_ms, insp_age(in, d->created_ms), dl_state(d));

	if (d->replayed_ms >= 0)
		cJSON_AddNumberToObject(o, "replayed_ms",
					(double)d->replayed_ms);
	else
		cJSON_AddNullToObject(o, "replayed_ms");
	return o;
}

static int dl_row(void *opaque, const tbx__dl_rec_t *d)
{
	listing_t *l = opaque;
	char age[32];

	l->shown++;
	if (l->arr) {
		cJSON_AddItemToArray(l->arr, dl_json(l->in, d));
		return 0;
	}
	insp_fmt_age(insp_age(l->in, d->created_ms), age, sizeof(age));
	insp_tbl_cellf(l->tbl, "%lld", (long long)d->id);
	insp_tbl_cell(l->tbl, age);
	insp_tbl_cell(l->tbl, d->grp);
	insp_tbl_cellf(l->tbl, "%s[%lld]@%lld", d->in_topic,
		       (long long)d->in_partition, (long long)d->in_offset);
	insp_tbl_cellf(l->tbl, "%lld", (long long)d->attempts);
	insp_tbl_cell(l->tbl, dl_state(d));
	insp_tbl_cell(l->tbl, d->error ? d->error : "-");
	return 0;
}

int insp_dl_list(insp_t *in)
{
	tbx__filter_t f = insp_filter(in, 1);
	listing_t l = {in, NULL, NULL, 0};
	cJSON *doc = NULL;
	int64_t total = 0;
	int rc, err;

	if (in->o->json) {
		doc = cJSON_CreateObject();
		l.arr = cJSON_AddArrayToObject(doc, "dead_letters");
	} else {
		/* --wide: no column is cut to the width (a terminal wraps
		 * the lines); --json always holds the whole error. */
		l.tbl = insp_tbl_new(in->o->wide ? "rrllrll" : "rrLLrlL",
				     (const char *const[]){"ID", "AGE", "GROUP",
							   "FROM", "ATT",
							   "STATE", "ERROR"});
	}
	if ((err = tbx_outbox_dead_letters_list(in->store, &f, &total, dl_row,
						&l)))
		rc = insp_s_fail(in, err);
	else
		rc = insp_list_finish(in, &doc, l.tbl, total, l.shown,
				      "dead letters", " recorded");
	cJSON_Delete(doc);
	insp_tbl_free(l.tbl);
	return rc;
}

static void dl_print(insp_t *in, const tbx__dl_rec_t *d)
{
	char when[40], age[32], buf[600];

	insp_fmt_time(d->created_ms, when, sizeof(when));
	insp_fmt_age(insp_age(in, d->created_ms), age, sizeof(age));
	snprintf(buf, sizeof(buf), "%lld", (long long)d->id);
	insp_kv("dead letter", buf, 0);
	insp_kv("group", d->grp, 2);
	insp_kv("message id", d->msg_id, 2);
	snprintf(buf, sizeof(buf), "%s [%lld] @%lld", d->in_topic,
		 (long long)d->in_partition, (long long)d->in_offset);
	insp_kv("from", buf, 2);
	insp_kv("to", d->dlq_topic, 2);
	insp_kv("error", d->error ? d->error : "-", 2);
	snprintf(buf, sizeof(buf), "%lld", (long long)d->attempts);
	insp_kv("attempts", buf, 2);
	snprintf(buf, sizeof(buf), "%s (%s ago)", when, age);
	insp_kv("created", buf, 2);
	if (d->pending) {
		insp_kv("state",
			"pending: its outbox row (below) is not finished", 2);
	} else if (d->replayed_ms >= 0) {
		insp_fmt_time(d->replayed_ms, when, sizeof(when));
		insp_fmt_age(insp_age(in, d->replayed_ms), age, sizeof(age));
		snprintf(buf, sizeof(buf),
			 "replayed: sent back to %s at %s (%s ago)",
			 d->in_topic, when, age);
		insp_kv("state", buf, 2);
	} else {
		insp_kv("state", "sent: delivered, its outbox row is finished",
			2);
	}
}

typedef struct dl_shown {
	insp_t *in;
	cJSON *arr;
	int shown;
	int err;  /* of the service store */
	int fail; /* an exit status already reported */
} dl_shown_t;

static int dl_show_one(void *opaque, const tbx__dl_rec_t *d)
{
	dl_shown_t *s = opaque;
	insp_t *in = s->in;
	int err = TBX_ENOENT;
	tbx__row_t row;

	tbx__row_init(&row);
	if (d->pending &&
	    (err = tbx_outbox_row_load(in->store, d->grp, d->msg_id, &row)) &&
	    err != TBX_ENOENT) {
		s->err = err;
		return 1;
	}
	if (s->arr) {
		cJSON *o = dl_json(in, d);
		cJSON_AddItemToArray(s->arr, o);
		cJSON_AddItemToObject(o, "outbox_row",
				      err ? cJSON_CreateNull()
					  : insp_row_json(in, d->grp, &row,
							  (int64_t)row.msg_cnt,
							  1));
	} else {
		if (s->shown)
			printf("\n");
		dl_print(in, d);
		if (!err) {
			printf("\n");
			insp_row_print(in, d->grp, &row);
		}
		if (in->o->topic && (s->fail = insp_dl_record_print(
					 in, d->grp, d->in_topic,
					 d->in_partition, d->in_offset))) {
			tbx__row_clear(&row);
			return 1;
		}
	}
	tbx__row_clear(&row);
	s->shown++;
	return 0;
}

int insp_dl_show(insp_t *in)
{
	const char *id = in->o->id;
	int by_number = strspn(id, "0123456789") == strlen(id);
	tbx__filter_t f = insp_filter(in, 0);
	dl_shown_t s = {in, NULL, 0, TBX_OK, 0};
	cJSON *doc = NULL;
	int rc, err;

	if (in->o->json) {
		doc = cJSON_CreateObject();
		s.arr = cJSON_AddArrayToObject(doc, "dead_letters");
	}
	err = tbx_outbox_dead_letters_find(in->store, id, by_number, &f,
					   dl_show_one, &s);
	if (s.fail)
		rc = INSPECT_EXIT_ERROR; /* reported */
	else if (err || s.err)
		rc = insp_s_fail(in, s.err ? s.err : err);
	else if (!s.shown)
		rc = tbx_cli_fail(INSPECT_CMD, "no dead letter %s", id);
	else if (doc)
		rc = insp_json_print(doc, INSPECT_EXIT_OK), doc = NULL;
	else
		rc = INSPECT_EXIT_OK;
	cJSON_Delete(doc);
	return rc;
}
