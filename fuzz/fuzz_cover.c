/*
 * Fuzz target: the cover column of a batch row as it is read back from
 * the service store (tbx__cover_decode() in outbox/batchrow.c).  The
 * store is a file anybody with access may have written.
 *
 * Input: the column itself.
 *
 * Checked: the decoder never reads outside the column (the sanitizers)
 * and answers TBX_OK or TBX_ECORRUPT with a reason; a column it accepts
 * has one spelling (its entries encode back to exactly the same bytes);
 * the index finds every entry by its offset and by its bit (the first
 * entry with that key); and the cover made from the entries
 * (tbx__cover_from(), A's own row) is the decoded one.
 */
#include <string.h>

#include "fuzz/fuzz.h"
#include "outbox/batchrow.h"
#include "tokenbox/tokenbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tbx__cover_t c, f = {0};
	tbx__buf_t b = {0};
	char err[256] = "";
	int rc = tbx__cover_decode(data, size, &c, err, sizeof(err));

	FUZZ_CHECK(rc == TBX_OK || rc == TBX_ECORRUPT || rc == TBX_ENOMEM);
	if (rc == TBX_ECORRUPT)
		FUZZ_CHECK(err[0] != '\0');
	if (rc == TBX_OK) {
		FUZZ_CHECK(c.n > 0);
		FUZZ_CHECK(tbx__cover_encode(&b, c.ent, c.n, err,
					     sizeof(err)) == TBX_OK);
		FUZZ_CHECK(b.len == size && memcmp(b.p, data, size) == 0);
		FUZZ_CHECK(tbx__cover_from(&f, c.ent, c.n) == TBX_OK);
		FUZZ_CHECK(f.n == c.n && f.nbit == c.nbit);
		for (uint32_t i = 0; i < c.n; i++) {
			const tbx__cover_ent_t *e = &c.ent[i];
			int64_t at = tbx__cover_find_offset(
			    &c, e->topic, e->partition, e->offset);

			FUZZ_CHECK(at >= 0 && at <= i);
			FUZZ_CHECK(strcmp(c.ent[at].topic, e->topic) == 0 &&
				   c.ent[at].partition == e->partition &&
				   c.ent[at].offset == e->offset);
			FUZZ_CHECK(tbx__cover_find_offset(&f, e->topic,
							  e->partition,
							  e->offset) == at);
			FUZZ_CHECK(f.ent[i].kind == e->kind &&
				   f.ent[i].ref == e->ref &&
				   f.ent[i].index == e->index &&
				   f.ent[i].set_part == e->set_part &&
				   strcmp(f.ent[i].msg_id, e->msg_id) == 0 &&
				   strcmp(f.ent[i].ref_id, e->ref_id) == 0);
			if (e->ref != TBX__REF_BIT)
				continue;
			at = tbx__cover_find_bit(&c, e->ref_id, e->index);
			FUZZ_CHECK(at >= 0 && at <= i);
			FUZZ_CHECK(c.ent[at].ref == TBX__REF_BIT &&
				   c.ent[at].index == e->index &&
				   strcmp(c.ent[at].ref_id, e->ref_id) == 0);
			FUZZ_CHECK(
			    tbx__cover_find_bit(&f, e->ref_id, e->index) == at);
		}
	}
	tbx__buf_free(&b);
	tbx__cover_free(&c);
	tbx__cover_free(&f);
	return 0;
}
