/*
 * The incoming-message view and the handler context: header parsing (all
 * input from the network is checked here) and the calls handlers make.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/ids.h"
#include "base/log.h"
#include "consumer/guard.h"
#include "consumer/msg.h"

/* The tbx-* headers the parser reads, each as rd_kafka_header_get_last()
 * would answer for its name, found in one pass over the record's headers
 * (headers_scan()). */
enum { H_TYPE, H_CAUSE, H_ID, H_TOKEN, H_TSET, H_TBIT, H_STORE, H_SEQ, H_N };

typedef struct hval {
	const void *val; /**< may be NULL for a header without a value */
	size_t len;
	int present;
} hval_t;

/* Which of the headers above @p name is, or -1: the prefix, then a
 * switch on the next byte, so that most names cost one comparison. */
static int header_kind(const char *name)
{
	const char *r = name + 4;

	if (name[0] != 't' || name[1] != 'b' || name[2] != 'x' ||
	    name[3] != '-')
		return -1;
	switch (r[0]) {
	case 'c':
		return strcmp(r, "cause") == 0 ? H_CAUSE : -1;
	case 'i':
		return strcmp(r, "id") == 0 ? H_ID : -1;
	case 's':
		return strcmp(r, "store") == 0 ? H_STORE
		       : strcmp(r, "seq") == 0 ? H_SEQ
					       : -1;
	case 't':
		return strcmp(r, "type") == 0	 ? H_TYPE
		       : strcmp(r, "token") == 0 ? H_TOKEN
		       : strcmp(r, "tset") == 0	 ? H_TSET
		       : strcmp(r, "tbit") == 0	 ? H_TBIT
						 : -1;
	default:
		return -1;
	}
}

/* One pass over @p hdrs (may be NULL): the last occurrence of each header
 * of header_kind() in @p v. */
static void headers_scan(rd_kafka_headers_t *hdrs, hval_t v[H_N])
{
	const char *name;
	const void *val;
	size_t len;

	memset(v, 0, sizeof(*v) * H_N);
	if (!hdrs)
		return;
	for (size_t i = 0;
	     rd_kafka_header_get_all(hdrs, i, &name, &val, &len) ==
	     RD_KAFKA_RESP_ERR_NO_ERROR;
	     i++) {
		int k = header_kind(name);

		if (k < 0)
			continue;
		v[k].val = val;
		v[k].len = len;
		v[k].present = 1;
	}
}

/* Copies header @p h into @p dst if present.  @returns 1 present and
 * usable, 0 absent, -1 present but not fitting the rules. */
static int header_text(const hval_t *h, char *dst, size_t dst_size,
		       int want_uuid)
{
	const void *val = h->val;
	size_t len = h->len;

	if (!h->present)
		return 0;
	if (!val || len == 0 || len >= dst_size)
		return -1;
	if (want_uuid)
		/* Hex digits and dashes only: lower-cased as copied (dst_size
		 * is TBX_UUID_LEN + 1 for every UUID header). */
		return len == TBX_UUID_LEN && tbx__uuid_lower(dst, val, len)
			   ? 1
			   : -1;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = ((const unsigned char *)val)[i];
		if (c < 0x20 || c == 0x7f)
			return -1;
	}
	memcpy(dst, val, len);
	dst[len] = '\0';
	return 1;
}

/*
 * The last UUID text a header of one kind carried, raw and lower-cased:
 * the records of a batch repeat their token store's id and, run after
 * run, their token set's, so that most of them cost a comparison, not a
 * check and a copy.  Per thread: the worker parses on one.
 */
typedef struct uuid_memo {
	char raw[TBX_UUID_LEN];
	char low[TBX_UUID_LEN + 1]; /* "" until a valid text was seen */
} uuid_memo_t;

static _Thread_local uuid_memo_t memo_tset, memo_store;

/* header_text() for a UUID header whose value often repeats. */
static int header_uuid(const hval_t *h, char dst[TBX_UUID_LEN + 1],
		       uuid_memo_t *memo)
{
	if (h->present && h->val && h->len == TBX_UUID_LEN && memo->low[0] &&
	    memcmp(h->val, memo->raw, TBX_UUID_LEN) == 0) {
		memcpy(dst, memo->low, TBX_UUID_LEN + 1);
		return 1;
	}
	int r = header_text(h, dst, TBX_UUID_LEN + 1, 1);

	if (r == 1) {
		memcpy(memo->raw, h->val, TBX_UUID_LEN);
		memcpy(memo->low, dst, TBX_UUID_LEN + 1);
	}
	return r;
}

void tbx__msg_parse(struct tbx_msg *msg)
{
	rd_kafka_message_t *rkm = msg->rkm;
	rd_kafka_headers_t *hdrs = NULL;

	msg->topic = rd_kafka_topic_name(rkm->rkt);
	if (rd_kafka_message_headers(rkm, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
		hdrs = NULL;
	tbx__msg_parse_headers(msg, hdrs, rkm->partition, rkm->offset);
}

/* Reads a decimal of at most @p max_digits digits from @p v (@p len bytes)
 * below @p end: digits only, no leading zero but "0" itself.  @returns 1
 * with *out set, else 0. */
static int decimal(const char *v, size_t len, size_t max_digits, int64_t end,
		   int64_t *out)
{
	int64_t n = 0;

	if (len == 0 || len > max_digits || (len > 1 && v[0] == '0'))
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return 0;
		n = n * 10 + (v[i] - '0'); /* max_digits keeps it in range */
	}
	if (n >= end)
		return 0;
	*out = n;
	return 1;
}

int tbx__tbit_parse(const char *v, size_t len, int32_t *part, uint32_t *index)
{
	const char *colon;
	int64_t p, i;

	if (!v || !(colon = memchr(v, ':', len)))
		return TBX_EINVAL;
	/* 2^31 - 1 has 10 digits, 65,535 has 5: longer is refused before
	 * any arithmetic, so nothing can overflow. */
	if (!decimal(v, (size_t)(colon - v), 10, TBX_TBIT_PART_END, &p) ||
	    !decimal(colon + 1, len - (size_t)(colon - v) - 1, 5,
		     TBX_TBIT_INDEX_END, &i))
		return TBX_EINVAL;
	*part = (int32_t)p;
	*index = (uint32_t)i;
	return TBX_OK;
}

/* tbx-seq: @returns 1 and *seq for a positive decimal, 0 absent, -1 present
 * but not one. */
static int header_seq(const hval_t *h, int64_t *seq)
{
	char text[24];
	int r = header_text(h, text, sizeof(text), 0);

	if (r == 1) {
		char *end;
		errno = 0;
		long long v = strtoll(text, &end, 10);
		if (*end || errno || v < 1 || !isdigit((unsigned char)text[0]))
			return -1;
		*seq = v;
	}
	return r;
}

/* tbx-tbit: @returns 1 with *part, *index, 0 absent, -1 present but not
 * tbx__tbit_parse()'s format. */
static int header_tbit(const hval_t *h, int32_t *part, uint32_t *index)
{
	if (!h->present)
		return 0;
	return tbx__tbit_parse(h->val, h->val ? h->len : 0, part, index) ==
		       TBX_OK
		   ? 1
		   : -1;
}

/* The batched format's headers (tbx-tset, tbx-tbit, either present) after
 * the id: the table of docs/batched-tokens.md, "Wire format".  The first
 * reason found is the record's.  @p tok: header_text()'s answer for
 * tbx-token. */
static void parse_tset(struct tbx_msg *msg, const hval_t *v, int has_id,
		       int tok)
{
	const char *why = NULL;
	int32_t part = -1;
	uint32_t index = 0;
	int set = header_uuid(&v[H_TSET], msg->tset, &memo_tset);
	int bit = header_tbit(&v[H_TBIT], &part, &index);
	int r;

	if (set != 0 && tok != 0)
		why = "tbx-tset with tbx-token";
	else if (set == 0)
		why = "tbx-tbit without tbx-tset";
	else if (bit == 0)
		why = "tbx-tset without tbx-tbit";
	else if (set < 0)
		why = "tbx-tset is not a UUID";
	else if (bit < 0)
		why = "tbx-tbit is not <partition>:<index> (decimals without "
		      "sign or leading zeros, partition below 2^31, index "
		      "below 65536)";
	else if (!has_id)
		/* As for tbx-token: copies need the id to be matched. */
		why = "tbx-tset without a valid tbx-id";
	if (!why) {
		r = header_uuid(&v[H_STORE], msg->store, &memo_store);
		if (r < 0) {
			msg->store[0] = '\0';
			why = "tbx-store is not a UUID";
		} else if (header_seq(&v[H_SEQ], &msg->seq) != 1) {
			why = "tbx-tset without a valid tbx-seq";
		}
	}
	/* The token is the set's bit, never tbx-token. */
	msg->token[0] = '\0';
	if (why) {
		/* No token this worker can check either way: untokened, and
		 * malformed, so dead-lettered by the ingress offset. */
		msg->tset[0] = '\0';
		msg->untokened = 1;
		msg->fmt = TBX_WF_MALFORMED;
		if (!msg->malformed)
			msg->malformed = why;
		return;
	}
	msg->fmt = TBX_WF_SET;
	msg->tset_part = part;
	msg->tset_index = index;
}

void tbx__msg_parse_headers(struct tbx_msg *msg, rd_kafka_headers_t *hdrs,
			    int32_t partition, int64_t offset)
{
	hval_t v[H_N];
	int r;

	headers_scan(hdrs, v);
	msg->id[0] = msg->token[0] = msg->cause[0] = msg->type[0] = '\0';
	msg->store[0] = msg->tset[0] = '\0';
	msg->tset_part = -1;
	msg->tset_index = 0;
	msg->fmt = TBX_WF_UNTOKENED;
	msg->has_type = 0;
	msg->seq = 0;
	msg->malformed = NULL;
	msg->untokened = 0;

	r = header_text(&v[H_TYPE], msg->type, sizeof(msg->type), 0);
	msg->has_type = r == 1;
	if (r < 0)
		msg->malformed = "tbx-type is empty, too long or not text";

	r = header_text(&v[H_CAUSE], msg->cause, sizeof(msg->cause), 1);
	if (r < 0) {
		msg->cause[0] = '\0'; /* tracing only: not worth a rejection */
	}

	r = header_text(&v[H_ID], msg->id, sizeof(msg->id), 1);
	if (r < 0 && !msg->malformed)
		msg->malformed = "tbx-id is not a UUID";
	int has_id = r == 1;
	if (r <= 0)
		/* A stable id for records without one: the same on every
		 * redelivery of this record. */
		snprintf(msg->id, sizeof(msg->id), "u:%s:%" PRId32 ":%" PRId64,
			 msg->topic, partition, offset);

	r = header_text(&v[H_TOKEN], msg->token, sizeof(msg->token), 1);
	if (v[H_TSET].present || v[H_TBIT].present) {
		parse_tset(msg, v, has_id, r);
		return;
	}
	if (r < 0) {
		msg->fmt = TBX_WF_MALFORMED;
		if (!msg->malformed)
			msg->malformed = "tbx-token is not a UUID";
	}
	if (r <= 0) {
		msg->token[0] = '\0';
		msg->untokened = 1;
		return;
	}
	msg->fmt = TBX_WF_MSG;
	if (!has_id && !msg->malformed)
		/* Its copies would get other derived ids and each find no
		 * outbox row while the token lives: a token needs its id. */
		msg->malformed = "tbx-token without a valid tbx-id";
	if (!has_id)
		msg->fmt = TBX_WF_MALFORMED;
	/* The token store that minted the token; absent from older
	 * senders (then the token is looked up in ours, as always). */
	r = header_uuid(&v[H_STORE], msg->store, &memo_store);
	if (r < 0) {
		msg->store[0] = '\0';
		msg->fmt = TBX_WF_MALFORMED;
		if (!msg->malformed)
			msg->malformed = "tbx-store is not a UUID";
	}
	if (header_seq(&v[H_SEQ], &msg->seq) != 1) {
		if (!msg->malformed)
			msg->malformed = "tbx-token without a valid tbx-seq";
		msg->fmt = TBX_WF_MALFORMED;
		msg->token[0] = '\0';
		msg->untokened = 1;
	}
}

const char *tbx_msg_topic(const tbx_msg_t *msg)
{
	return msg->topic;
}

int32_t tbx_msg_partition(const tbx_msg_t *msg)
{
	return msg->rkm->partition;
}

int64_t tbx_msg_offset(const tbx_msg_t *msg)
{
	return msg->rkm->offset;
}

const void *tbx_msg_key(const tbx_msg_t *msg, size_t *len)
{
	if (len)
		*len = msg->rkm->key ? msg->rkm->key_len : 0;
	return msg->rkm->key;
}

const void *tbx_msg_payload(const tbx_msg_t *msg, size_t *len)
{
	if (len)
		*len = msg->rkm->payload ? msg->rkm->len : 0;
	return msg->rkm->payload;
}

const char *tbx_msg_type(const tbx_msg_t *msg)
{
	return msg->has_type ? msg->type : NULL;
}

const char *tbx_msg_id(const tbx_msg_t *msg)
{
	return msg->id;
}

const char *tbx_msg_cause(const tbx_msg_t *msg)
{
	return msg->cause[0] ? msg->cause : NULL;
}

int tbx_msg_attempt(const tbx_msg_t *msg)
{
	return msg->attempt;
}

const char *tbx_msg_traceparent(const tbx_msg_t *msg)
{
	struct tbx_msg *m = (struct tbx_msg *)msg; /* formatted once */

	if (!msg || !msg->trace.on ||
	    !(msg->trace.ctx.flags & TBX_TRACE_FLAG_SAMPLED))
		return NULL;
	if (!m->trace.traceparent[0])
		tbx__traceparent_format(&m->trace.ctx, m->trace.traceparent);
	return m->trace.traceparent;
}

int tbx_msg_header(const tbx_msg_t *msg, const char *name, const void **value,
		   size_t *len)
{
	rd_kafka_headers_t *hdrs;
	size_t dummy;

	if (!len)
		len = &dummy;
	if (!name || rd_kafka_message_headers(msg->rkm, &hdrs) !=
			 RD_KAFKA_RESP_ERR_NO_ERROR)
		return TBX_ENOENT;
	if (rd_kafka_header_get_last(hdrs, name, value, len) !=
	    RD_KAFKA_RESP_ERR_NO_ERROR)
		return TBX_ENOENT;
	return TBX_OK;
}

struct sqlite3 *tbx_ctx_db(tbx_ctx_t *ctx)
{
	return ctx ? tbx_outbox_native(ctx->store, TBX_BACKEND_SQLITE) : NULL;
}

struct pg_conn *tbx_ctx_pg(tbx_ctx_t *ctx)
{
	if (!ctx)
		return NULL;
	if (ctx->guard)
		return tbx__guard_pg(ctx->guard);
	return tbx_outbox_native(ctx->store, TBX_BACKEND_PG);
}

/* tbx_ctx_exec() and tbx_ctx_query() (@p caller): the checks, the
 * refusal, and a failure logged and made the message's error reason. */
static int ctx_run(tbx_ctx_t *ctx, const char *caller, const char *sql,
		   const char *const *params, int n, int64_t *changes,
		   tbx_row_fn fn, void *arg)
{
	const struct tbx_msg *msg;
	int err;

	if (!ctx || !sql || n < 0 || (n > 0 && !params))
		return TBX_EINVAL;
	if (!ctx->guard || !ctx->guard->active || ctx->in_query)
		return TBX_ESTATE; /* only inside a handler call, not in a
				      row function */
	if (tbx__guard_sql(ctx->guard, sql)) {
		if (!ctx->error)
			ctx->error = tbx__strdup("the handler's statement "
						 "was refused: it would end "
						 "or escape the worker's "
						 "transaction");
		return TBX_EINVAL;
	}
	if (fn) {
		ctx->in_query = 1;
		err = tbx_outbox_query(ctx->store, sql, params, n, fn, arg);
		ctx->in_query = 0;
	} else {
		err = tbx_outbox_exec(ctx->store, sql, params, n, changes);
	}
	if (!err)
		return TBX_OK;
	msg = ctx->msg;
	tbx__log(TBX_LOG_WARNING, "%s [%" PRId32 "] @%" PRId64 ": %s: %s: %s",
		 msg->topic, msg->rkm->partition, msg->rkm->offset, caller,
		 tbx_strerror(err),
		 tbx_outbox_errmsg(ctx->store) ? tbx_outbox_errmsg(ctx->store)
					       : "");
	if (!ctx->error) {
		const char *why = tbx_outbox_errmsg(ctx->store);
		ctx->error = tbx__strdup(why && *why ? why : tbx_strerror(err));
	}
	return err;
}

int tbx_ctx_exec(tbx_ctx_t *ctx, const char *sql, const char *const *params,
		 int n, int64_t *changes)
{
	if (changes)
		*changes = 0;
	return ctx_run(ctx, "tbx_ctx_exec", sql, params, n, changes, NULL,
		       NULL);
}

int tbx_ctx_query(tbx_ctx_t *ctx, const char *sql, const char *const *params,
		  int n, tbx_row_fn fn, void *arg)
{
	if (!fn)
		return TBX_EINVAL;
	return ctx_run(ctx, "tbx_ctx_query", sql, params, n, NULL, fn, arg);
}

int tbx__out_prepare(const tbx_out_t *out, const char *caller, void **hdrs,
		     size_t *hdrs_len)
{
	*hdrs = NULL;
	*hdrs_len = 0;
	if (!out || !out->topic || !tbx__topic_valid(out->topic)) {
		tbx__log(TBX_LOG_ERR,
			 "%s: topic '%s' is not a valid Kafka topic "
			 "name",
			 caller, out && out->topic ? out->topic : "(null)");
		return TBX_EINVAL;
	}
	if (!out->type || !*out->type || strlen(out->type) > TBX_TYPE_MAX) {
		tbx__log(TBX_LOG_ERR, "%s: type must be 1 to %d bytes", caller,
			 TBX_TYPE_MAX);
		return TBX_EINVAL;
	}
	for (const char *c = out->type; *c; c++) {
		if ((unsigned char)*c < 0x20 || *c == 0x7f) {
			tbx__log(TBX_LOG_ERR,
				 "%s: type contains a control character",
				 caller);
			return TBX_EINVAL;
		}
	}
	if (out->header_cnt && !out->headers)
		return TBX_EINVAL;
	for (size_t i = 0; i < out->header_cnt; i++) {
		if (!out->headers[i].name ||
		    strncasecmp(out->headers[i].name, "tbx-", 4) == 0) {
			tbx__log(TBX_LOG_ERR, "%s: header name %s is reserved",
				 caller,
				 out->headers[i].name ? out->headers[i].name
						      : "(null)");
			return TBX_EINVAL;
		}
	}
	return tbx__hdrs_encode(out->headers, out->header_cnt, hdrs, hdrs_len);
}

int tbx_ctx_send(tbx_ctx_t *ctx, const tbx_out_t *out)
{
	const void *key;
	size_t key_len;
	void *hdrs;
	size_t hdrs_len;
	int err;

	if (!ctx)
		return TBX_EINVAL;
	if ((err = tbx__out_prepare(out, "tbx_ctx_send", &hdrs, &hdrs_len))) {
		ctx->send_failed = 1;
		return err;
	}
	if (ctx->tracer && ctx->msg->trace.on) {
		/* The traceparent of its send span, stored with the row. */
		void *traced;
		size_t traced_len;

		err = tbx__trace_out(ctx->tracer, &ctx->msg->trace, hdrs,
				     hdrs_len, &traced, &traced_len);
		free(hdrs);
		if (err) {
			ctx->send_failed = 1;
			return err;
		}
		hdrs = traced;
		hdrs_len = traced_len;
	}
	key = out->key;
	key_len = out->key_len;
	if (!key)
		key = tbx_msg_key(ctx->msg, &key_len);
	err = tbx__row_add(ctx->row, out->topic, out->type, key, key_len,
			   out->payload, out->payload_len, hdrs, hdrs_len);
	free(hdrs);
	if (err)
		ctx->send_failed = 1;
	return err;
}

void tbx_ctx_set_error(tbx_ctx_t *ctx, const char *reason)
{
	char *copy;

	if (!ctx || !reason)
		return;
	if (!(copy = strdup(reason)))
		return;
	free(ctx->error);
	ctx->error = copy;
}
