/*
 * The outgoing messages of an outbox row, encoded into one BLOB column
 * (tbx_outbox.msgs, schema 8), so that a row with its messages is one
 * B-tree entry to insert and to delete:
 *
 *   u8 format (1), u32 count,
 *   count × { 7 × { u32 len, bytes[len] } }           all big endian
 *
 * The seven fields of a message, in order: out_id, topic, type, key,
 * payload, headers, token.  len 0xffffffff is NULL (no bytes follow): no
 * key, a null payload, no headers, no token yet.  A row without messages
 * stores SQL NULL, not an empty list.  The blob is read back from a
 * file: the iterator trusts no length in it.
 */
#ifndef TBX_STORE_MSGS_H
#define TBX_STORE_MSGS_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#define TBX__MSGS_FORMAT 1

enum {
	TBX__MF_ID,
	TBX__MF_TOPIC,
	TBX__MF_TYPE,
	TBX__MF_KEY,
	TBX__MF_PAYLOAD,
	TBX__MF_HEADERS,
	TBX__MF_TOKEN,
	TBX__MF_COUNT
};

/** One field: @p p NULL is SQL NULL; otherwise @p len bytes at @p p. */
typedef struct tbx__mfield {
	const void *p;
	size_t len;
} tbx__mfield_t;

/**
 * Encodes @p n messages of TBX__MF_COUNT fields each (@p f[i *
 * TBX__MF_COUNT + field]) into a malloc'd blob.
 * @returns TBX_OK, TBX_EINVAL (a field of 4 GiB or more), TBX_ENOMEM.
 */
int tbx__msgs_encode(const tbx__mfield_t *f, size_t n, void **out,
		     size_t *out_len);

typedef struct tbx__msgs_iter {
	const unsigned char *b;
	size_t len, pos;
	uint32_t left; /**< messages not yet returned */
} tbx__msgs_iter_t;

/**
 * Starts reading @p blob (NULL or @p len 0: no messages).
 * @returns 0, or -1 when the header is malformed.  it->left is the
 * count the header announces.
 */
int tbx__msgs_iter_init(tbx__msgs_iter_t *it, const void *blob, size_t len);

/**
 * Reads the next message's fields into @p f (pointing into the blob).
 * @returns 1, 0 at the end (the blob ends exactly after the announced
 * messages), or -1 when a length runs past the blob, the count does not
 * match, or bytes trail.
 */
int tbx__msgs_iter_next(tbx__msgs_iter_t *it, tbx__mfield_t f[TBX__MF_COUNT]);

/**
 * Registers the aggregate tbx_pack_msgs(seq, out_id, topic, type, key,
 * payload, headers, token) on @p db: the messages of a row as one blob,
 * ordered by seq, NULL for none.  The migration to schema 8 uses it.
 * @returns the SQLite result code.
 */
int tbx__msgs_sql_register(sqlite3 *db);

#endif
