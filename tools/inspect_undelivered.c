/*
 * `tokenbox inspect undelivered list|show|resend`: outgoing messages a
 * worker gave up on after dispatch.retry.max permanent delivery failures
 * and that the dead-letter topic did not take either (tbx_undelivered,
 * docs/architecture.md).  Each is kept whole — topic, key, payload, its
 * tbx-id and token (or set bit and partition), its headers — so that
 * `resend` can send it as it
 * was once the cause is fixed (a topic created, a broker limit raised):
 * the receiving group still holds its token and handles it once.  Read
 * and removed through the service store's interface.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/str.h"
#include "consumer/recover.h"
#include "tools/cli.h"
#include "tools/inspect.h"

/* A stored blob as it was read before: an empty one shows as none. */
static const void *shown(const void *p, size_t len)
{
	return len ? p : NULL;
}

static cJSON *ud_json(insp_t *in, const tbx__ud_rec_t *u, int full)
{
	cJSON *o, *hdrs;
	tbx_header_t h;
	size_t pos = 0;

	o = insp_jobj(NULL,
		      "id:i group:s msg_id:s out_id:s topic:s type:s error:s "
		      "attempts:i created_ms:i age_ms:i",
		      u->id, u->grp, u->msg_id, u->out_id, u->topic, u->type,
		      u->error, u->attempts, u->created_ms,
		      in->now_ms - u->created_ms);
	if (!full)
		return o;
	insp_jadd(
	    o, "token:s mint_seq:i key:j payload:j", u->token, u->mint_seq,
	    insp_bytes_json(shown(u->key, u->key_len), u->key_len),
	    insp_bytes_json(shown(u->payload, u->payload_len), u->payload_len));
	/* A bit of a token set: its set, bit and the set's partition. */
	if (u->tset)
		insp_jadd(o, "tset:s tbit:i partition:i", u->tset, u->tbit,
			  u->tpart);
	hdrs = cJSON_AddArrayToObject(o, "headers");
	while (tbx__hdrs_next(u->headers, u->headers_len, &pos, &h) == 1) {
		tbx_header_t sh[2];
		insp_hdr_text_t text;
		size_t k = insp_hdr_shown(&h, sh, &text);
		for (size_t x = 0; x < k; x++)
			insp_jobj(hdrs, "name:s value:j", sh[x].name,
				  sh[x].value
				      ? insp_bytes_json(sh[x].value, sh[x].len)
				      : NULL);
	}
	return o;
}

typedef struct ud_listing {
	insp_t *in;
	insp_tbl_t *tbl;
	cJSON *arr;
	int64_t shown;
} ud_listing_t;

static int ud_row(void *opaque, const tbx__ud_rec_t *u)
{
	ud_listing_t *l = opaque;
	char age[32];

	l->shown++;
	if (l->arr) {
		cJSON_AddItemToArray(l->arr, ud_json(l->in, u, 0));
		return 0;
	}
	insp_fmt_age(l->in->now_ms - u->created_ms, age, sizeof(age));
	insp_tbl_cellf(l->tbl, "%lld", (long long)u->id);
	insp_tbl_cell(l->tbl, age);
	insp_tbl_cell(l->tbl, u->grp);
	insp_tbl_cell(l->tbl, u->topic);
	insp_tbl_cellf(l->tbl, "%lld", (long long)u->attempts);
	insp_tbl_cell(l->tbl, u->error);
	return 0;
}

int insp_ud_list(insp_t *in)
{
	tbx__filter_t f = insp_filter(in, 0);
	ud_listing_t l = {in, NULL, NULL, 0};
	cJSON *doc = NULL;
	int64_t total = 0;
	int rc, err;

	/* --older-than 0 takes every line here. */
	if (in->o->older_ms > 0)
		f.created_max = in->now_ms - in->o->older_ms;
	if (in->o->json) {
		doc = cJSON_CreateObject();
		l.arr = cJSON_AddArrayToObject(doc, "undelivered");
	} else {
		l.tbl = insp_tbl_new(
		    "rrLLrL", (const char *const[]){"ID", "AGE", "GROUP",
						    "TOPIC", "ATT", "ERROR"});
	}
	if ((err = tbx_outbox_undelivered_list(in->store, &f, &total, ud_row,
					       &l)))
		rc = insp_s_fail(in, err);
	else
		rc = insp_list_finish(in, &doc, l.tbl, total, l.shown,
				      "undelivered messages", " kept");
	cJSON_Delete(doc);
	insp_tbl_free(l.tbl);
	return rc;
}

/* What ud_find hands on: the line, shown or copied by @p fn. */
typedef struct ud_found {
	insp_t *in;
	int (*fn)(struct ud_found *f, const tbx__ud_rec_t *u);
	int rc;
	int found;
	tbx__row_t *row; /* resend: the line as an outbox row */
	int64_t id;
} ud_found_t;

static int ud_found_one(void *opaque, const tbx__ud_rec_t *u)
{
	ud_found_t *f = opaque;

	f->found = 1;
	f->id = u->id;
	f->rc = f->fn(f, u);
	return 1;
}

/* Finds the line --id names in @p store and hands it to f->fn.
 * @returns 0, or an exit status after reporting. */
static int ud_find(insp_t *in, tbx_outbox_t *store, ud_found_t *f)
{
	tbx__filter_t filter = insp_filter(in, 0);
	char *end;
	long long id = strtoll(in->o->id, &end, 10);
	int err;

	if (*end || id <= 0)
		return tbx_cli_usage(INSPECT_CMD,
				     "%s: '%s' is not a line number (the ID "
				     "column of 'undelivered list')",
				     in->o->cmd_name, in->o->id);
	if ((err = tbx_outbox_undelivered_get(store, id, &filter, ud_found_one,
					      f)))
		return insp_store_fail(in->s.name, err,
				       tbx_outbox_errmsg(store));
	if (!f->found) {
		fprintf(stderr, "tokenbox inspect: no undelivered message %s\n",
			in->o->id);
		return INSPECT_EXIT_FINDING;
	}
	return f->rc;
}

static int ud_print(ud_found_t *f, const tbx__ud_rec_t *u)
{
	insp_t *in = f->in;
	char when[40], age[32];
	tbx_header_t h;
	size_t pos = 0;

	if (in->o->json)
		return insp_json_print(ud_json(in, u, 1), INSPECT_EXIT_OK);
	insp_fmt_time(u->created_ms, when, sizeof(when));
	insp_fmt_age(in->now_ms - u->created_ms, age, sizeof(age));
	printf("Undelivered message %lld\n", (long long)u->id);
	insp_kv("group", u->grp, 2);
	insp_kv("outbox row", u->msg_id, 2);
	insp_kv("tbx-id", u->out_id, 2);
	insp_kv("topic", u->topic, 2);
	insp_kv("type", u->type, 2);
	if (u->tset) {
		char tbit[48];

		snprintf(tbit, sizeof(tbit), "%lld:%lld", (long long)u->tpart,
			 (long long)u->tbit);
		insp_kv("tbx-tset", u->tset, 2);
		insp_kv("tbx-tbit", tbit, 2);
	} else {
		insp_kv("tbx-token", u->token ? u->token : "(none)", 2);
	}
	insp_kv("error", u->error, 2);
	printf("  %-12s %lld\n", "attempts", (long long)u->attempts);
	printf("  %-12s %s (%s ago)\n", "given up", when, age);
	insp_bytes_print("key", shown(u->key, u->key_len), u->key_len, 2, 0,
			 "(none)");
	insp_bytes_print("payload", shown(u->payload, u->payload_len),
			 u->payload_len, 2, 0, "(null)");
	while (tbx__hdrs_next(u->headers, u->headers_len, &pos, &h) == 1) {
		tbx_header_t sh[2];
		insp_hdr_text_t text;
		size_t k = insp_hdr_shown(&h, sh, &text);
		for (size_t x = 0; x < k; x++)
			insp_bytes_print(sh[x].name, sh[x].value, sh[x].len, 2,
					 0, "(null)");
	}
	return INSPECT_EXIT_OK;
}

int insp_ud_show(insp_t *in)
{
	ud_found_t f = {in, ud_print, 0, 0, NULL, 0};

	return ud_find(in, in->store, &f);
}

/* Copies a stored blob (NULL stays NULL). */
static int blob_dup(const void *p, size_t len, void **out, size_t *out_len)
{
	*out_len = len;
	*out = NULL;
	if (!p)
		return TBX_OK;
	if (!(*out = malloc(len ? len : 1)))
		return TBX_ENOMEM;
	if (len)
		memcpy(*out, p, len);
	return TBX_OK;
}

/* The line as a one-message outbox row, for tbx__dispatch. */
static int ud_copy(ud_found_t *f, const tbx__ud_rec_t *u)
{
	tbx__row_t *row = f->row;
	tbx__outmsg_t *m;

	if (!(m = tbx__row_grow(row)))
		return tbx_cli_usage(INSPECT_CMD, "out of memory");
	tbx__strlcpy(row->msg_id, u->msg_id, sizeof(row->msg_id));
	row->mint_seq = u->mint_seq;
	tbx__strlcpy(m->id, u->out_id, sizeof(m->id));
	tbx__strlcpy(m->token, u->token ? u->token : "", sizeof(m->token));
	if (u->tset) {
		/* Its set bit, produced to the partition the set was minted
		 * for (tbx-tset, tbx-tbit). */
		tbx__strlcpy(m->tset, u->tset, sizeof(m->tset));
		m->tbit = (uint32_t)u->tbit;
		m->part = (int32_t)u->tpart;
	}
	if (!(m->topic = tbx__strdup(u->topic)) ||
	    !(m->type = tbx__strdup(u->type)) ||
	    blob_dup(u->key, u->key_len, &m->key, &m->key_len) ||
	    blob_dup(u->payload, u->payload_len, &m->payload,
		     &m->payload_len) ||
	    blob_dup(u->headers, u->headers_len, &m->headers, &m->headers_len))
		return tbx_cli_usage(INSPECT_CMD, "out of memory");
	return 0;
}

/*
 * The id of the token store the message's token was minted in, for its
 * tbx-store header, or NULL (no header: receivers then check the token as
 * for a sender older than store ids).  The token store is inspect's
 * --tokens, which the worker that gave the message up used too.
 */
static const char *token_store_id(insp_t *in, char out[TBX_UUID_LEN + 1])
{
	int has = 0;

	if (!in->tokens ||
	    tbx_tokens_has(in->tokens, TBX_TOKENS_HAS_STORE_ID, &has) || !has ||
	    tbx_tokens_store_id(in->tokens, out))
		return NULL;
	return out;
}

/*
 * Sends the line as it was first sent — its topic, key, payload, tbx-id,
 * tbx-token (or tbx-tset and tbx-tbit, to the partition its set was
 * minted for), tbx-seq and headers — through an idempotent producer, and
 * deletes the line once the broker acknowledged it.  Sending it twice is
 * harmless: the receiving group handles one tbx-id with one token once.
 */
int insp_ud_resend(insp_t *in)
{
	tbx_outbox_t *store = NULL;
	tbx_conf_t *conf = NULL;
	rd_kafka_resp_err_t rerr = RD_KAFKA_RESP_ERR_NO_ERROR;
	tbx__row_t row;
	tbx__outmsg_t *m;
	char errstr[512] = "", store_id[TBX_UUID_LEN + 1];
	ud_found_t f = {in, ud_copy, 0, 0, &row, 0};
	int rc, delivered = 0, err;

	tbx__row_init(&row);
	if ((rc = insp_open_write(in, 1, &store, NULL)))
		return rc;
	if ((rc = ud_find(in, store, &f)))
		goto out;
	rc = INSPECT_EXIT_ERROR;
	m = &row.msgs[0];
	if (!(conf = tbx_conf_new()) ||
	    tbx_conf_set(conf, "kafka.bootstrap.servers", in->o->servers,
			 errstr, sizeof(errstr))) {
		rc = tbx_cli_usage(INSPECT_CMD, "resend: %s",
				   *errstr ? errstr : "out of memory");
		goto out;
	}
	err = tbx__recover_send(conf, token_store_id(in, store_id), &row,
				&delivered, &rerr, errstr, sizeof(errstr));
	if (err && err != TBX_EDELIVERY && !delivered) {
		rc = tbx_cli_usage(INSPECT_CMD, "resend: %s", errstr);
		goto out;
	}
	if (!delivered) {
		rc = tbx_cli_usage(INSPECT_CMD,
				   "resend: %s to %s not delivered: %s; the "
				   "line is kept",
				   m->id, m->topic, rd_kafka_err2str(rerr));
		goto out;
	}
	if ((err = tbx_outbox_undelivered_delete(store, f.id))) {
		rc = insp_store_fail(in->s.name, err, tbx_outbox_errmsg(store));
		goto out;
	}
	if (in->o->json) {
		rc = insp_json_print(insp_jobj(NULL,
					       "id:i out_id:s topic:s "
					       "delivered:b",
					       f.id, m->id, m->topic, 1),
				     INSPECT_EXIT_OK);
	} else {
		printf("resent %s to %s; line %lld removed\n", m->id, m->topic,
		       (long long)f.id);
		rc = INSPECT_EXIT_OK;
	}
out:
	tbx_conf_destroy(conf);
	tbx__row_clear(&row);
	tbx_outbox_close(store);
	return rc;
}
