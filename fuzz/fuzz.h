/*
 * Shared by the fuzz targets (fuzz/fuzz_*.c): each defines
 * LLVMFuzzerTestOneInput() and is linked either with libFuzzer (clang,
 * scripts/fuzz.sh) or with replay.c, which runs the checked-in corpus
 * through it as a test of the suite.
 *
 * A target checks properties of what the code under test returns, not
 * only that it does not crash: FUZZ_CHECK() aborts, which both libFuzzer
 * and the replay driver report as a failure with the input that caused it.
 */
#ifndef TBX_FUZZ_FUZZ_H
#define TBX_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* To the file descriptor: a target may have silenced stderr's FILE. */
#define FUZZ_CHECK(cond)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			dprintf(2, "%s:%d: fuzz check failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			abort();                                               \
		}                                                              \
	} while (0)

/* Reads the input front to back; past its end every read gives zeros. */
typedef struct fuzz_in {
	const uint8_t *p;
	size_t left;
} fuzz_in_t;

static inline uint8_t fuzz_u8(fuzz_in_t *in)
{
	if (!in->left)
		return 0;
	in->left--;
	return *in->p++;
}

/* Up to @p want bytes; *got receives how many there were. */
static inline const uint8_t *fuzz_bytes(fuzz_in_t *in, size_t want, size_t *got)
{
	const uint8_t *p = in->p;

	if (want > in->left)
		want = in->left;
	in->p += want;
	in->left -= want;
	*got = want;
	return p;
}

#endif
