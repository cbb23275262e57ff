/*
 * The bitmaps of token sets (tokens/tokens.h, schema 11): bit i in byte
 * i / 8, bit i % 8, bits beyond the set's count clear.  The SQL functions
 * the token store's statements compute them with, registered on every
 * connection tbx__db_open() opens (the service store's and the token
 * store's alike, so that a shared connection has them too), and the same
 * operations in C.
 */
#ifndef TBX_STORE_BITS_H
#define TBX_STORE_BITS_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

/** Bytes of a bitmap of @p nbits bits. */
#define TBX__BITS_BYTES(nbits) (((size_t)(nbits) + 7) / 8)

/** 1 when bit @p i of @p bits (@p len bytes) is set, 0 when clear or
 *  beyond the bitmap. */
static inline int tbx__bit_get(const uint8_t *bits, size_t len, uint32_t i)
{
	return (size_t)i / 8 < len && (bits[i / 8] >> (i % 8)) & 1u;
}

/** Sets bit @p i of @p bits (the caller checked i < 8 * len). */
static inline void tbx__bit_set(uint8_t *bits, uint32_t i)
{
	bits[i / 8] = (uint8_t)(bits[i / 8] | (1u << (i % 8)));
}

/** The bits set in @p len bytes. */
uint64_t tbx__bits_count(const uint8_t *bits, size_t len);

/** Fills @p out (TBX__BITS_BYTES(@p nbits) bytes) with bits 0 .. nbits - 1
 *  set and the rest of the last byte clear. */
void tbx__bits_fill(uint8_t *out, uint32_t nbits);

/**
 * Registers on @p db, deterministic and innocuous (safe in CHECK
 * constraints, indexes and views):
 *
 *   tbx_bits_clear(bits, mask)  bits AND NOT mask, the same length; an
 *                               error when either is not a blob or their
 *                               lengths differ
 *   tbx_bits_none(bits)         1 when no bit is set, else 0
 *   tbx_bits_count(bits)        the bits set
 *   tbx_bits_test(bits, i)      1 when bit i is set, 0 when clear, NULL
 *                               when i is beyond the bitmap
 *   tbx_bits_list(bits)         the indexes set as a JSON array text
 *
 * tbx_bits_none, tbx_bits_count and tbx_bits_list refuse a value that is
 * not a blob with an error, as tbx_bits_clear does.
 * @returns the SQLite result code.
 */
int tbx__bits_sql_register(sqlite3 *db);

#endif
