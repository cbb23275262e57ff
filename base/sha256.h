/*
 * SHA-256 (FIPS 180-4), for the payload fingerprints of the ingress edge.
 *
 * @locality any thread; a context is used by one thread at a time.
 */
#ifndef TBX_BASE_SHA256_H
#define TBX_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define TBX_SHA256_LEN 32

typedef struct tbx__sha256 {
	uint32_t h[8];
	uint64_t len; /* bytes hashed so far */
	uint8_t buf[64];
	size_t buf_len;
} tbx__sha256_t;

void tbx__sha256_init(tbx__sha256_t *ctx);
void tbx__sha256_update(tbx__sha256_t *ctx, const void *data, size_t len);
void tbx__sha256_final(tbx__sha256_t *ctx, uint8_t out[TBX_SHA256_LEN]);

#endif
