/*
 * The headers blob of an outgoing message (outbox/outbox.h):
 *
 *   repeated { u16 name_len, name[name_len], u8 has_value, u32 len,
 *              value[len] }                          all big endian
 *
 * name_len counts the name's terminating NUL, which is stored: the
 * iterator hands out names as C strings pointing into the blob, without
 * copying (tbx_header_t has no name length, and librdkafka takes a C
 * string).  A null header has has_value 0 and len 0; an empty one
 * has_value 1 and len 0.  The blob is read back from the store, so the
 * iterator trusts nothing in it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/outbox.h"

#define NAME_MAX_LEN UINT16_MAX /* with its NUL */

static unsigned char *put_u16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
	return p + 2;
}

static unsigned char *put_u32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
	return p + 4;
}

static uint16_t get_u16(const unsigned char *p)
{
	return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

int tbx__hdrs_encode(const tbx_header_t *hdrs, size_t cnt, void **out,
		     size_t *out_len)
{
	unsigned char *blob, *p;
	size_t total = 0;

	*out = NULL;
	*out_len = 0;
	if (cnt == 0)
		return TBX_OK;
	if (!hdrs)
		return TBX_EINVAL;
	for (size_t i = 0; i < cnt; i++) {
		size_t name_len, val_len;

		if (!hdrs[i].name)
			return TBX_EINVAL;
		name_len = strlen(hdrs[i].name) + 1;
		val_len = hdrs[i].value ? hdrs[i].len : 0;
		if (name_len > NAME_MAX_LEN || val_len > UINT32_MAX)
			return TBX_EINVAL;
		if (SIZE_MAX - total < 2 + name_len + 1 + 4 ||
		    SIZE_MAX - total - (2 + name_len + 1 + 4) < val_len)
			return TBX_ENOMEM;
		total += 2 + name_len + 1 + 4 + val_len;
	}
	if (!(blob = malloc(total)))
		return TBX_ENOMEM;
	p = blob;
	for (size_t i = 0; i < cnt; i++) {
		size_t name_len = strlen(hdrs[i].name) + 1;
		size_t val_len = hdrs[i].value ? hdrs[i].len : 0;

		p = put_u16(p, (uint16_t)name_len);
		memcpy(p, hdrs[i].name, name_len);
		p += name_len;
		*p++ = hdrs[i].value ? 1 : 0;
		p = put_u32(p, (uint32_t)val_len);
		if (val_len)
			memcpy(p, hdrs[i].value, val_len);
		p += val_len;
	}
	*out = blob;
	*out_len = total;
	return TBX_OK;
}

int tbx__hdrs_next(const void *blob, size_t len, size_t *pos, tbx_header_t *hdr)
{
	const unsigned char *b = blob;
	size_t at = *pos, name_len, val_len;
	int has_value;

	if (at == len)
		return 0;
	if (at > len || !b)
		return -1;
	if (len - at < 2)
		return -1;
	name_len = get_u16(b + at);
	at += 2;
	/* A name is at least its NUL, ends with it and holds no other. */
	if (name_len == 0 || len - at < name_len ||
	    b[at + name_len - 1] != '\0' ||
	    memchr(b + at, '\0', name_len - 1) != NULL)
		return -1;
	hdr->name = (const char *)(b + at);
	at += name_len;
	if (len - at < 1 + 4)
		return -1;
	has_value = b[at];
	val_len = get_u32(b + at + 1);
	at += 1 + 4;
	if (has_value > 1 || (!has_value && val_len) || len - at < val_len)
		return -1;
	hdr->value = has_value ? (const void *)(b + at) : NULL;
	hdr->len = val_len;
	*pos = at + val_len;
	return 1;
}
