/*
 * Fuzz target: the wire column of a batch row as it is read back from
 * the service store (tbx__wire_decode() in outbox/batchrow.c).
 *
 * Input: a big-endian u32, the number of entries of the row's cover,
 * then the column.
 *
 * Checked: the decoder never reads outside the column (the sanitizers)
 * and answers TBX_OK or TBX_ECORRUPT with a reason; what it accepts has
 * every partition >= -1 and every cover entry within the cover, and
 * encodes back to exactly the same bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz.h"
#include "outbox/batchrow.h"
#include "tokenbox/tokenbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in_t in = {data, size};
	uint32_t cover_n = 0, n = 0;
	tbx__wire_ent_t *w = NULL;
	tbx__buf_t b = {0};
	char err[256] = "";
	int rc;

	for (int i = 0; i < 4; i++)
		cover_n = cover_n << 8 | fuzz_u8(&in);
	rc = tbx__wire_decode(in.left ? in.p : NULL, in.left, cover_n, &w, &n,
			      err, sizeof(err));
	FUZZ_CHECK(rc == TBX_OK || rc == TBX_ECORRUPT || rc == TBX_ENOMEM);
	if (rc == TBX_ECORRUPT)
		FUZZ_CHECK(err[0] != '\0' && !w && n == 0);
	if (rc == TBX_OK) {
		for (uint32_t i = 0; i < n; i++)
			FUZZ_CHECK(w[i].partition >= -1 &&
				   w[i].cover < cover_n);
		FUZZ_CHECK(tbx__wire_encode(&b, w, n) == TBX_OK);
		FUZZ_CHECK(b.len == in.left && memcmp(b.p, in.p, in.left) == 0);
	}
	tbx__buf_free(&b);
	free(w);
	return 0;
}
