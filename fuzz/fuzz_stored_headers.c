/*
 * Fuzz target: the headers blob of an outgoing message as it is read back
 * from the service store (tbx__hdrs_next() in outbox/hdrs.c).  The store
 * is a file anybody with access may have written, so every byte counts.
 *
 * Input: the blob itself.
 *
 * Checked: the iterator never reads outside the blob (the sanitizers), each
 * header's name is a C string inside the blob and its value lies inside
 * it, the position only moves forward, and a blob read to its end without
 * an error encodes back (tbx__hdrs_encode()) to exactly the same bytes.
 */
#include <string.h>

#include "fuzz/fuzz.h"
#include "outbox/outbox.h"

#define MAX_HEADERS 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static tbx_header_t hdrs[MAX_HEADERS];
	size_t cnt = 0, pos = 0, last = 0;
	int r;

	while ((r = tbx__hdrs_next(data, size, &pos, &hdrs[cnt])) == 1) {
		const tbx_header_t *h = &hdrs[cnt];
		const uint8_t *name = (const uint8_t *)h->name;

		FUZZ_CHECK(pos > last && pos <= size);
		FUZZ_CHECK(name >= data && name < data + size);
		FUZZ_CHECK(memchr(name, '\0', (size_t)(data + size - name)));
		if (h->value) {
			const uint8_t *v = h->value;
			FUZZ_CHECK(v >= data && v + h->len <= data + size);
		} else {
			FUZZ_CHECK(h->len == 0);
		}
		last = pos;
		if (++cnt == MAX_HEADERS)
			return 0;
	}
	FUZZ_CHECK(r == 0 || r == -1);
	if (r == 0) {
		void *blob;
		size_t len;

		FUZZ_CHECK(pos == size);
		FUZZ_CHECK(tbx__hdrs_encode(hdrs, cnt, &blob, &len) == TBX_OK);
		FUZZ_CHECK(len == size);
		FUZZ_CHECK(len == 0 || memcmp(blob, data, len) == 0);
		free(blob);
	}
	return 0;
}
