/*
 * Outbox rows in memory (outbox/outbox.h): building, freeing and checking
 * them against the row's state diagram.  Backend-neutral: every backend
 * of the service store loads into and stores from these.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "outbox/outbox.h"
#include "store/msgs.h"

/*
 * Rows in memory.
 */

void tbx__row_init(tbx__row_t *row)
{
	memset(row, 0, sizeof(*row));
}

static void outmsg_free(tbx__outmsg_t *m)
{
	if (m->block) {
		free(m->block);
	} else {
		free(m->topic);
		free(m->type);
		free(m->key);
		free(m->payload);
		free(m->headers);
	}
	memset(m, 0, sizeof(*m));
}

void tbx__row_clear_msgs(tbx__row_t *row)
{
	for (size_t i = 0; i < row->msg_cnt; i++)
		outmsg_free(&row->msgs[i]);
	/* The array stays for the next batch: no allocation per message. */
	row->msg_cnt = 0;
}

void tbx__row_clear(tbx__row_t *row)
{
	tbx__row_clear_msgs(row);
	free(row->msgs);
	free(row->error);
	tbx__row_init(row);
}

/* Appends a zeroed message slot.  @returns NULL when out of memory. */
tbx__outmsg_t *tbx__row_grow(tbx__row_t *row)
{
	if (row->msg_cnt == row->msg_cap) {
		size_t cap = row->msg_cap ? row->msg_cap * 2 : 4;
		tbx__outmsg_t *msgs;

		if (cap > SIZE_MAX / sizeof(*msgs))
			return NULL;
		if (!(msgs = realloc(row->msgs, cap * sizeof(*msgs))))
			return NULL;
		row->msgs = msgs;
		row->msg_cap = cap;
	}
	memset(&row->msgs[row->msg_cnt], 0, sizeof(row->msgs[0]));
	row->msgs[row->msg_cnt].part = -1;
	return &row->msgs[row->msg_cnt++];
}

int tbx__row_add(tbx__row_t *row, const char *topic, const char *type,
		 const void *key, size_t key_len, const void *payload,
		 size_t payload_len, const void *headers, size_t headers_len)
{
	tbx__outmsg_t *m;
	size_t topic_len, type_len, size;
	char *p;

	if (!row || !topic || !type)
		return TBX_EINVAL;
	if (!key)
		key_len = 0;
	if (!payload)
		payload_len = 0;
	if (!headers)
		headers_len = 0;
	topic_len = strlen(topic);
	type_len = strlen(type);
	/* One allocation for the five fields (two texts and their NULs):
	 * a handler's every tbx_ctx_send() copies them. */
	size = topic_len + type_len + 2;
	if (key_len > SIZE_MAX - size ||
	    payload_len > SIZE_MAX - size - key_len ||
	    headers_len > SIZE_MAX - size - key_len - payload_len)
		return TBX_ENOMEM;
	size += key_len + payload_len + headers_len;
	if (!(m = tbx__row_grow(row)))
		return TBX_ENOMEM;
	if (!(m->block = malloc(size))) {
		row->msg_cnt--;
		return TBX_ENOMEM;
	}
	tbx__uuid(m->id);
	p = m->block;
	m->topic = memcpy(p, topic, topic_len + 1);
	p += topic_len + 1;
	m->type = memcpy(p, type, type_len + 1);
	p += type_len + 1;
	/* NULL stays NULL; an empty key or payload is a non-NULL pointer
	 * (no key vs an empty key); empty headers are none. */
	if (key) {
		m->key = key_len ? memcpy(p, key, key_len) : p;
		m->key_len = key_len;
		p += key_len;
	}
	if (payload) {
		m->payload = payload_len ? memcpy(p, payload, payload_len) : p;
		m->payload_len = payload_len;
		p += payload_len;
	}
	if (headers_len) {
		m->headers = memcpy(p, headers, headers_len);
		m->headers_len = headers_len;
	}
	return TBX_OK;
}

/* @returns 1 when @p s is a NUL-terminated UUID text. */
static int is_uuid_str(const char *s)
{
	return tbx__is_uuid(s, strnlen(s, TBX_UUID_LEN + 1));
}

static int msg_check(const tbx__row_t *row, size_t i)
{
	const tbx__outmsg_t *m = &row->msgs[i];
	tbx_header_t hdr;
	size_t pos = 0;
	int r;

	if (!is_uuid_str(m->id) || !m->topic || !*m->topic || !m->type)
		return 0;
	if ((!m->key && m->key_len) || (!m->payload && m->payload_len) ||
	    (!m->headers && m->headers_len))
		return 0;
	while ((r = tbx__hdrs_next(m->headers, m->headers_len, &pos, &hdr)) ==
	       1)
		;
	if (r < 0)
		return 0;
	/* PROCESSED: no token; TOKENED: every message has one. */
	if (row->attempt[0])
		return is_uuid_str(m->token);
	return m->token[0] == '\0';
}

int tbx_outbox_row_check(const tbx__row_t *row)
{
	if (!row || !row->msg_id[0] || row->msg_cnt > row->msg_cap ||
	    (row->msg_cnt && !row->msgs))
		return 0;
	if (row->kind != TBX_ROW_HANDLED && row->kind != TBX_ROW_DEAD_LETTER)
		return 0;
	/* A set's bit needs the set (tokens/tokens.h, TBX_SET_BITS_MAX). */
	if (row->in_set && (!row->in_token[0] || row->in_tbit >= 65536u))
		return 0;
	if (!row->in_set && row->in_tbit != 0)
		return 0;
	if (row->attempt[0]) {
		/* TOKENED */
		if (!is_uuid_str(row->attempt) || row->mint_seq <= 0)
			return 0;
	} else if (row->mint_seq != 0) {
		/* PROCESSED */
		return 0;
	}
	for (size_t i = 0; i < row->msg_cnt; i++)
		if (!msg_check(row, i))
			return 0;
	return 1;
}

/*
 * The outgoing messages of a row as the one column value backends store
 * (store/msgs.h).
 */

int tbx__row_msgs_encode(const tbx__row_t *row, void **blob, size_t *len)
{
	tbx__mfield_t *f;
	int err;

	*blob = NULL;
	*len = 0;
	if (row->msg_cnt == 0)
		return TBX_OK;
	if (!(f = calloc(row->msg_cnt, TBX__MF_COUNT * sizeof(*f))))
		return TBX_ENOMEM;
	for (size_t i = 0; i < row->msg_cnt; i++) {
		const tbx__outmsg_t *m = &row->msgs[i];
		tbx__mfield_t *g = f + i * TBX__MF_COUNT;
		const char *topic = m->topic ? m->topic : "";
		const char *type = m->type ? m->type : "";

		g[TBX__MF_ID] = (tbx__mfield_t){m->id, strlen(m->id)};
		g[TBX__MF_TOPIC] = (tbx__mfield_t){topic, strlen(topic)};
		g[TBX__MF_TYPE] = (tbx__mfield_t){type, strlen(type)};
		g[TBX__MF_KEY] = (tbx__mfield_t){m->key, m->key_len};
		g[TBX__MF_PAYLOAD] =
		    (tbx__mfield_t){m->payload, m->payload_len};
		g[TBX__MF_HEADERS] =
		    (tbx__mfield_t){m->headers, m->headers_len};
		if (m->token[0])
			g[TBX__MF_TOKEN] =
			    (tbx__mfield_t){m->token, strlen(m->token)};
	}
	err = tbx__msgs_encode(f, row->msg_cnt, blob, len);
	free(f);
	return err;
}

/* A text field of the blob into a fixed buffer: NULL is "", and a value
 * that does not fit or holds a NUL was not written by tokenbox. */
static int field_text(const tbx__mfield_t *f, char *dst, size_t size)
{
	if (!f->p) {
		dst[0] = '\0';
		return TBX_OK;
	}
	if (f->len >= size || memchr(f->p, '\0', f->len))
		return TBX_ESTORE;
	memcpy(dst, f->p, f->len);
	dst[f->len] = '\0';
	return TBX_OK;
}

/* A text field as a new string (NULL is ""). */
static int field_str(const tbx__mfield_t *f, char **dst)
{
	*dst = NULL;
	if (f->p && memchr(f->p, '\0', f->len))
		return TBX_ESTORE;
	if (!(*dst = malloc(f->len + 1)))
		return TBX_ENOMEM;
	if (f->len)
		memcpy(*dst, f->p, f->len);
	(*dst)[f->len] = '\0';
	return TBX_OK;
}

/* NULL stays NULL, empty is a non-NULL empty buffer (no key vs an empty
 * key). */
static int field_blob(const tbx__mfield_t *f, void **dst, size_t *len)
{
	*dst = NULL;
	*len = 0;
	if (!f->p)
		return TBX_OK;
	if (!(*dst = tbx__memdup(f->p, f->len)))
		return TBX_ENOMEM;
	*len = f->len;
	return TBX_OK;
}

int tbx__row_msgs_decode(const void *blob, size_t len, const char *msg_id,
			 tbx__row_t *row)
{
	tbx__msgs_iter_t it;
	tbx__mfield_t f[TBX__MF_COUNT];
	int r = -1, err = TBX_OK;

	if (tbx__msgs_iter_init(&it, blob, len) < 0)
		goto bad;
	while ((r = tbx__msgs_iter_next(&it, f)) == 1) {
		tbx__outmsg_t *m = tbx__row_grow(row);

		if (!m)
			return TBX_ENOMEM;
		if ((err = field_text(&f[TBX__MF_ID], m->id, sizeof(m->id))) ||
		    (err = field_text(&f[TBX__MF_TOKEN], m->token,
				      sizeof(m->token))) ||
		    (err = field_str(&f[TBX__MF_TOPIC], &m->topic)) ||
		    (err = field_str(&f[TBX__MF_TYPE], &m->type)) ||
		    (err = field_blob(&f[TBX__MF_KEY], &m->key, &m->key_len)) ||
		    (err = field_blob(&f[TBX__MF_PAYLOAD], &m->payload,
				      &m->payload_len)) ||
		    (err = field_blob(&f[TBX__MF_HEADERS], &m->headers,
				      &m->headers_len)))
			break;
		/* An empty headers blob is "none" in memory. */
		if (m->headers && m->headers_len == 0) {
			free(m->headers);
			m->headers = NULL;
		}
	}
	if (err == TBX_ENOMEM)
		return err;
	if (!err && r == 0)
		return TBX_OK;
bad:
	tbx__log(TBX_LOG_ERR,
		 "outbox row %s: its stored messages are malformed (%s)",
		 msg_id,
		 err ? "a text field too long or holding a NUL"
		     : "a length runs past the blob, or bytes trail");
	return TBX_ESTORE;
}

int tbx__row_msgs_tokened(const void *stored_blob, size_t stored_len,
			  const tbx__row_t *row, void **blob, size_t *blob_len)
{
	tbx__row_t stored;
	int err;

	*blob = NULL;
	*blob_len = 0;
	tbx__row_init(&stored);
	if ((err = tbx__row_msgs_decode(stored_blob, stored_len, row->msg_id,
					&stored)))
		goto out;
	if (stored.msg_cnt != row->msg_cnt) {
		tbx__log(TBX_LOG_ERR,
			 "outbox row %s: %zu stored message(s), %zu in memory; "
			 "the row in memory differs from the stored one",
			 row->msg_id, stored.msg_cnt, row->msg_cnt);
		err = TBX_ESTATE;
		goto out;
	}
	for (size_t i = 0; i < row->msg_cnt; i++) {
		if (strcmp(stored.msgs[i].id, row->msgs[i].id) != 0) {
			tbx__log(TBX_LOG_ERR,
				 "outbox row %s: message %zu (%s) is not in "
				 "the store; the row in memory differs from "
				 "the stored one",
				 row->msg_id, i, row->msgs[i].id);
			err = TBX_ESTATE;
			goto out;
		}
		memcpy(stored.msgs[i].token, row->msgs[i].token,
		       sizeof(stored.msgs[i].token));
	}
	err = tbx__row_msgs_encode(&stored, blob, blob_len);
out:
	tbx__row_clear(&stored);
	return err;
}
