/*
 * The encoding of an outbox row's outgoing messages (store/msgs.h), and
 * the SQL aggregate that builds it from the rows of the schema 7 table
 * tbx_outbox_msg during the migration to schema 8.
 */
#include "store/msgs.h"

#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"

#define HDR_LEN	  5 /* u8 format, u32 count */
#define NULL_LEN  UINT32_MAX
#define FIELD_MAX (UINT32_MAX - 1)

static unsigned char *put_u32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
	return p + 4;
}

static uint32_t get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

/* The encoded size of one message, or 0 when a field cannot be encoded. */
static size_t msg_size(const tbx__mfield_t *f)
{
	size_t total = 0;

	for (int i = 0; i < TBX__MF_COUNT; i++) {
		size_t len = f[i].p ? f[i].len : 0;

		if (len > FIELD_MAX || SIZE_MAX - total < 4 + len)
			return 0;
		total += 4 + len;
	}
	return total;
}

static unsigned char *put_msg(unsigned char *p, const tbx__mfield_t *f)
{
	for (int i = 0; i < TBX__MF_COUNT; i++) {
		if (!f[i].p) {
			p = put_u32(p, NULL_LEN);
			continue;
		}
		p = put_u32(p, (uint32_t)f[i].len);
		if (f[i].len)
			memcpy(p, f[i].p, f[i].len);
		p += f[i].len;
	}
	return p;
}

int tbx__msgs_encode(const tbx__mfield_t *f, size_t n, void **out,
		     size_t *out_len)
{
	unsigned char *blob, *p;
	size_t total = HDR_LEN;

	*out = NULL;
	*out_len = 0;
	if (n > UINT32_MAX)
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++) {
		size_t len = msg_size(f + i * TBX__MF_COUNT);

		if (!len)
			return TBX_EINVAL;
		if (SIZE_MAX - total < len)
			return TBX_ENOMEM;
		total += len;
	}
	if (!(blob = malloc(total)))
		return TBX_ENOMEM;
	blob[0] = TBX__MSGS_FORMAT;
	p = put_u32(blob + 1, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		p = put_msg(p, f + i * TBX__MF_COUNT);
	*out = blob;
	*out_len = total;
	return TBX_OK;
}

int tbx__msgs_iter_init(tbx__msgs_iter_t *it, const void *blob, size_t len)
{
	memset(it, 0, sizeof(*it));
	if (!blob || len == 0)
		return 0;
	if (len < HDR_LEN ||
	    ((const unsigned char *)blob)[0] != TBX__MSGS_FORMAT)
		return -1;
	it->b = blob;
	it->len = len;
	it->pos = HDR_LEN;
	it->left = get_u32(it->b + 1);
	return 0;
}

int tbx__msgs_iter_next(tbx__msgs_iter_t *it, tbx__mfield_t f[TBX__MF_COUNT])
{
	size_t at = it->pos;

	if (it->left == 0)
		return at == it->len ? 0 : -1; /* nothing may trail */
	for (int i = 0; i < TBX__MF_COUNT; i++) {
		uint32_t len;

		if (at > it->len || it->len - at < 4)
			return -1;
		len = get_u32(it->b + at);
		at += 4;
		if (len == NULL_LEN) {
			f[i].p = NULL;
			f[i].len = 0;
			continue;
		}
		if (it->len - at < len)
			return -1;
		f[i].p = it->b + at;
		f[i].len = len;
		at += len;
	}
	it->pos = at;
	it->left--;
	return 1;
}

/*
 * tbx_pack_msgs(): the aggregate keeps each message encoded with its seq
 * and sorts them when it is done, whatever order the rows came in.
 */
typedef struct pack_entry {
	int64_t seq;
	unsigned char *enc;
	size_t len;
} pack_entry_t;

typedef struct pack {
	pack_entry_t *v;
	size_t n, cap;
	int failed;
} pack_t;

static void pack_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	pack_t *pk = sqlite3_aggregate_context(ctx, sizeof(*pk));
	tbx__mfield_t f[TBX__MF_COUNT];
	pack_entry_t *e;
	size_t len;

	if (!pk) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	if (pk->failed || argc != 1 + TBX__MF_COUNT)
		return;
	for (int i = 0; i < TBX__MF_COUNT; i++) {
		sqlite3_value *v = argv[1 + i];
		int text = i == TBX__MF_ID || i == TBX__MF_TOPIC ||
			   i == TBX__MF_TYPE || i == TBX__MF_TOKEN;

		f[i].p = NULL;
		f[i].len = 0;
		if (sqlite3_value_type(v) == SQLITE_NULL)
			continue;
		/* The pointer first, then the length; a zero-length value
		 * is empty, not NULL. */
		f[i].p = text ? (const void *)sqlite3_value_text(v)
			      : sqlite3_value_blob(v);
		f[i].len = (size_t)sqlite3_value_bytes(v);
		if (!f[i].p)
			f[i].p = "";
	}
	if (pk->n == pk->cap) {
		size_t cap = pk->cap ? 2 * pk->cap : 4;
		pack_entry_t *nv = realloc(pk->v, cap * sizeof(*nv));

		if (!nv)
			goto nomem;
		pk->v = nv;
		pk->cap = cap;
	}
	if (!(len = msg_size(f))) {
		pk->failed = 1;
		return;
	}
	e = &pk->v[pk->n];
	if (!(e->enc = malloc(len)))
		goto nomem;
	put_msg(e->enc, f);
	e->len = len;
	e->seq = sqlite3_value_int64(argv[0]);
	pk->n++;
	return;
nomem:
	pk->failed = 2;
}

static int entry_cmp(const void *a, const void *b)
{
	int64_t x = ((const pack_entry_t *)a)->seq;
	int64_t y = ((const pack_entry_t *)b)->seq;

	return (x > y) - (x < y);
}

static void pack_final(sqlite3_context *ctx)
{
	pack_t *pk = sqlite3_aggregate_context(ctx, 0);
	unsigned char *blob = NULL, *p;
	size_t total = HDR_LEN;

	if (!pk || pk->n == 0) {
		sqlite3_result_null(ctx);
		goto out;
	}
	if (pk->failed == 2) {
		sqlite3_result_error_nomem(ctx);
		goto out;
	}
	if (pk->failed || pk->n > UINT32_MAX) {
		sqlite3_result_error(ctx, "tbx_pack_msgs: a message too large",
				     -1);
		goto out;
	}
	qsort(pk->v, pk->n, sizeof(pk->v[0]), entry_cmp);
	for (size_t i = 0; i < pk->n; i++) {
		if (SIZE_MAX - total < pk->v[i].len) {
			sqlite3_result_error_nomem(ctx);
			goto out;
		}
		total += pk->v[i].len;
	}
	if (!(blob = malloc(total))) {
		sqlite3_result_error_nomem(ctx);
		goto out;
	}
	blob[0] = TBX__MSGS_FORMAT;
	p = put_u32(blob + 1, (uint32_t)pk->n);
	for (size_t i = 0; i < pk->n; i++) {
		memcpy(p, pk->v[i].enc, pk->v[i].len);
		p += pk->v[i].len;
	}
	sqlite3_result_blob64(ctx, blob, (sqlite3_uint64)total, free);
out:
	if (pk) {
		for (size_t i = 0; i < pk->n; i++)
			free(pk->v[i].enc);
		free(pk->v);
		pk->v = NULL;
		pk->n = pk->cap = 0;
	}
}

int tbx__msgs_sql_register(sqlite3 *db)
{
	return sqlite3_create_function_v2(db, "tbx_pack_msgs",
					  1 + TBX__MF_COUNT, SQLITE_UTF8, NULL,
					  NULL, pack_step, pack_final, NULL);
}
