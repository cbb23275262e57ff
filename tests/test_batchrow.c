/* The wire and cover columns of a batch row (outbox/batchrow.h): what is
 * written reads back exactly, anything else is refused with the reason,
 * and the cover's index finds records by bit and by offset. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/batchrow.h"
#include "tokenbox/tokenbox.h"

#define SET_A "01890a5d-ac96-774b-bcce-b302099a8057"
#define SET_B "01890a5d-ac96-774b-bcce-b302099a8058"
#define TOKEN "0190f3c2-1111-7000-8000-000000000001"

static tbx__cover_ent_t ent(int kind, const char *topic, int32_t part,
			    int64_t off, const char *id, int ref,
			    const char *ref_id, uint16_t index,
			    int32_t set_part)
{
	tbx__cover_ent_t e = {kind, topic, part,  off,	   id,
			      ref,  "",	   index, set_part};

	snprintf(e.ref_id, sizeof(e.ref_id), "%s", ref_id ? ref_id : "");
	return e;
}

/* One of each kind and reference, a stray one among them. */
static size_t sample(tbx__cover_ent_t *e)
{
	e[0] = ent(TBX__COVER_HANDLED, "in", 3, 17, "m-0", TBX__REF_BIT, SET_A,
		   0, 3);
	e[1] = ent(TBX__COVER_HANDLED, "in", 3, 18, "m-1", TBX__REF_TOKEN,
		   TOKEN, 0, 0);
	e[2] = ent(TBX__COVER_DEAD_LETTER, "in.x", 0, 0, "m-2", TBX__REF_NONE,
		   NULL, 0, 0);
	e[3] = ent(TBX__COVER_UNTOKENED, "in", 1, 9000000000LL, "u:in:1:9",
		   TBX__REF_NONE, NULL, 0, 0);
	e[4] = ent(TBX__COVER_HANDLED, "in", 2, 5, "m-4", TBX__REF_BIT, SET_B,
		   65535, 7);
	return 5;
}

static void encode(const tbx__cover_ent_t *e, size_t n, tbx__buf_t *b)
{
	char err[200];

	cr_assert_eq(tbx__cover_encode(b, e, n, err, sizeof(err)), TBX_OK, "%s",
		     err);
}

Test(batchrow, a_cover_reads_back_exactly)
{
	tbx__cover_ent_t e[5];
	size_t n = sample(e);
	tbx__buf_t b = {0};
	tbx__cover_t c;
	char err[200];

	encode(e, n, &b);
	cr_assert_eq(tbx__cover_decode(b.p, b.len, &c, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(c.n, n);
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(c.ent[i].kind, e[i].kind);
		cr_assert_str_eq(c.ent[i].topic, e[i].topic);
		cr_assert_eq(c.ent[i].partition, e[i].partition);
		cr_assert_eq(c.ent[i].offset, e[i].offset);
		cr_assert_str_eq(c.ent[i].msg_id, e[i].msg_id);
		cr_assert_eq(c.ent[i].ref, e[i].ref);
		cr_assert_str_eq(c.ent[i].ref_id, e[i].ref_id);
		if (e[i].ref == TBX__REF_BIT) {
			cr_assert_eq(c.ent[i].index, e[i].index);
			cr_assert_eq(c.ent[i].set_part, e[i].set_part);
		}
	}
	/* The stray entry is the only one with a ref byte of 3. */
	tbx__cover_free(&c);
	tbx__buf_free(&b);
}

/* The exact bytes of one entry of each reference. */
Test(batchrow, the_cover_bytes_are_as_documented)
{
	tbx__cover_ent_t e[3];
	tbx__buf_t b = {0};
	/* clang-format off */
	static const unsigned char want[] = {
	    1, 0, 0, 0, 3,			/* format, count */
	    1, 0, 0, 0, 1, 't', 0, 0, 0, 3,	/* dead letter, "t", part 3 */
	    0, 0, 0, 0, 0, 0, 1, 0,		/* offset 256 */
	    0, 0, 0, 1, 'm', 0,			/* "m", ref none */
	    0, 0, 0, 0, 1, 'u', 0x7f, 0xff, 0xff, 0xfe, /* handled, "u" */
	    0, 0, 0, 0, 0, 0, 0, 0,
	    0, 0, 0, 1, 'n', 1,			/* "n", ref token */
	    0, 0, 0, 36, '0', '1', '9', '0', 'f', '3', 'c', '2', '-', '1',
	    '1', '1', '1', '-', '7', '0', '0', '0', '-', '8', '0', '0', '0',
	    '-', '0', '0', '0', '0', '0', '0', '0', '0', '0', '0', '0', '1',
	    2, 0, 0, 0, 1, 'v', 0, 0, 0, 0,	/* untokened, "v", part 0 */
	    0, 0, 0, 0, 0, 0, 0, 9,		/* offset 9 */
	    0, 0, 0, 1, 'o', 0};		/* "o", ref none */
	/* clang-format on */

	e[0] = ent(TBX__COVER_DEAD_LETTER, "t", 3, 256, "m", TBX__REF_NONE,
		   NULL, 0, 0);
	e[1] = ent(TBX__COVER_HANDLED, "u", 0x7ffffffe, 0, "n", TBX__REF_TOKEN,
		   TOKEN, 0, 0);
	e[2] = ent(TBX__COVER_UNTOKENED, "v", 0, 9, "o", TBX__REF_NONE, NULL, 0,
		   0);
	encode(e, 3, &b);
	cr_assert_eq(b.len, sizeof(want));
	cr_assert_eq(memcmp(b.p, want, sizeof(want)), 0);
	tbx__buf_free(&b);
}

Test(batchrow, a_stray_reference_carries_the_sets_partition)
{
	tbx__cover_ent_t e[2];
	tbx__buf_t own = {0}, stray = {0};

	e[0] = ent(TBX__COVER_HANDLED, "t", 1, 0, "m", TBX__REF_BIT, SET_A, 258,
		   1);
	encode(e, 1, &own);
	e[1] = e[0];
	e[1].set_part = 4;
	encode(e + 1, 1, &stray);
	/* ref 2: id, index; ref 3: id, index, the set's partition. */
	cr_assert_eq(own.p[own.len - 2 - 36 - 4 - 1], 2);
	cr_assert_eq(own.p[own.len - 2], 1);
	cr_assert_eq(own.p[own.len - 1], 2);
	cr_assert_eq(stray.len, own.len + 4);
	cr_assert_eq(stray.p[stray.len - 4 - 2 - 36 - 4 - 1], 3);
	cr_assert_eq(stray.p[stray.len - 1], 4);
	tbx__buf_free(&own);
	tbx__buf_free(&stray);
}

/* Every strict prefix, and the whole with a byte more, is refused; a
 * whole column with any one byte changed either reads back as a valid
 * cover or is refused: never a read past its end (the sanitizer build). */
Test(batchrow, a_truncated_or_trailing_cover_is_refused)
{
	tbx__cover_ent_t e[5];
	size_t n = sample(e);
	tbx__buf_t b = {0};
	tbx__cover_t c;
	char err[200];

	encode(e, n, &b);
	for (size_t len = 0; len < b.len; len++) {
		unsigned char *copy = malloc(len ? len : 1);

		memcpy(copy, b.p, len);
		cr_assert_eq(tbx__cover_decode(copy, len, &c, err, sizeof(err)),
			     TBX_ECORRUPT, "prefix of %zu bytes", len);
		cr_assert(err[0]);
		tbx__cover_free(&c);
		free(copy);
	}
	{
		unsigned char *more = malloc(b.len + 1);

		memcpy(more, b.p, b.len);
		more[b.len] = 0;
		cr_assert_eq(
		    tbx__cover_decode(more, b.len + 1, &c, err, sizeof(err)),
		    TBX_ECORRUPT);
		cr_assert(strstr(err, "trail"), "%s", err);
		tbx__cover_free(&c);
		free(more);
	}
	for (size_t i = 0; i < b.len; i++) {
		unsigned char *copy = malloc(b.len);
		int rc;

		memcpy(copy, b.p, b.len);
		copy[i] ^= 0xa5;
		rc = tbx__cover_decode(copy, b.len, &c, err, sizeof(err));
		cr_assert(rc == TBX_OK || rc == TBX_ECORRUPT);
		tbx__cover_free(&c);
		free(copy);
	}
	tbx__buf_free(&b);
}

/* Patches one entry's bytes and expects the reason. */
static void refused(const tbx__cover_ent_t *good, size_t at, unsigned char v,
		    const char *why)
{
	tbx__buf_t b = {0};
	tbx__cover_t c;
	char err[200];

	encode(good, 1, &b);
	cr_assert(at < b.len);
	b.p[at] = v;
	cr_assert_eq(tbx__cover_decode(b.p, b.len, &c, err, sizeof(err)),
		     TBX_ECORRUPT, "byte %zu = %u", at, v);
	cr_assert(strstr(err, why), "'%s' lacks '%s'", err, why);
	tbx__cover_free(&c);
	tbx__buf_free(&b);
}

Test(batchrow, every_field_of_a_cover_entry_is_checked)
{
	tbx__cover_ent_t e = ent(TBX__COVER_HANDLED, "tt", 1, 2, "mm",
				 TBX__REF_BIT, SET_A, 9, 1);
	/* 0 format, 1..4 count; 5 kind; 6..9 topic length, 10..11 "tt";
	 * 12..15 partition; 16..23 offset; 24..27 id length, 28..29 "mm";
	 * 30 ref; 31..34 set id length, 35..70 the id; 71..72 index;
	 * 73..76 a stray set's partition. */
	refused(&e, 0, 2, "unknown format");
	refused(&e, 4, 0, "no record");
	refused(&e, 4, 9, "announced");
	refused(&e, 5, 3, "unknown kind 3");
	refused(&e, 5, 2, "handled untokened with a token");
	refused(&e, 10, '*', "not a topic name");
	refused(&e, 10, 0, "not a topic name");
	refused(&e, 12, 0x80, "partition -2147483647 below 0");
	refused(&e, 16, 0x80, "offset below 0");
	refused(&e, 28, 0x07, "not a message id");
	refused(&e, 30, 4, "unknown token reference 4");
	refused(&e, 35, 'g', "not UUID text");
	refused(&e, 35, 'A', "not UUID text");
	refused(&e, 34, 40, "runs past");
	e.ref = TBX__REF_NONE;
	e.ref_id[0] = '\0';
	e.kind = TBX__COVER_DEAD_LETTER;
	refused(&e, 5, TBX__COVER_HANDLED, "handled without a token");
	/* A stray reference to the record's own partition has another
	 * spelling (ref 2) and is refused. */
	e = ent(TBX__COVER_HANDLED, "tt", 1, 2, "mm", TBX__REF_BIT, SET_A, 9,
		5);
	refused(&e, 76, 1, "stray reference to the record's own partition");
	refused(&e, 73, 0x80, "set partition");
}

Test(batchrow, the_encoder_refuses_what_the_decoder_would)
{
	tbx__cover_ent_t e = ent(TBX__COVER_HANDLED, "bad topic", 0, 0, "m",
				 TBX__REF_TOKEN, TOKEN, 0, 0);
	tbx__buf_t b = {0};
	char err[200];

	cr_assert_eq(tbx__cover_encode(&b, &e, 1, err, sizeof(err)),
		     TBX_EINVAL);
	cr_assert(strstr(err, "cover entry 0: not a topic name"), "%s", err);
	e.topic = "t";
	snprintf(e.ref_id, sizeof(e.ref_id), "%s", "not-a-uuid");
	tbx__buf_free(&b);
	cr_assert_eq(tbx__cover_encode(&b, &e, 1, err, sizeof(err)),
		     TBX_EINVAL);
	cr_assert(strstr(err, "not UUID text"), "%s", err);
	tbx__buf_free(&b);
	/* A row covers at least one record. */
	cr_assert_eq(tbx__cover_encode(&b, &e, 0, err, sizeof(err)),
		     TBX_EINVAL);
	cr_assert(strstr(err, "no record covered"), "%s", err);
	tbx__buf_free(&b);
}

/* A token or set id equal to the entry before's is checked once; one
 * that differs is checked whole, in the encoder and in the decoder. */
Test(batchrow, an_id_after_the_same_one_is_read_and_another_checked)
{
	tbx__cover_ent_t e[3] = {ent(TBX__COVER_HANDLED, "tt", 1, 2, "m1",
				     TBX__REF_BIT, SET_A, 9, 1),
				 ent(TBX__COVER_HANDLED, "tt", 1, 3, "m2",
				     TBX__REF_BIT, SET_A, 9, 2),
				 ent(TBX__COVER_HANDLED, "tt", 1, 4, "m3",
				     TBX__REF_BIT, SET_A, 9, 3)};
	tbx__buf_t b = {0};
	tbx__cover_t c;
	char err[200];
	size_t at;

	encode(e, 3, &b);
	cr_assert_eq(tbx__cover_decode(b.p, b.len, &c, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(c.n, 3);
	tbx__cover_free(&c);
	/* The third entry's set id, one digit made a 'g' in the blob: the
	 * second's is SET_A, so the third is checked. */
	at = b.len - 1 - 2 - 4; /* its id's last byte, before index, part */
	cr_assert_eq(b.p[at], (unsigned char)SET_A[TBX_UUID_LEN - 1]);
	b.p[at] = 'g';
	cr_assert_eq(tbx__cover_decode(b.p, b.len, &c, err, sizeof(err)),
		     TBX_ECORRUPT);
	cr_assert(strstr(err, "cover entry 2: token id is not UUID text"), "%s",
		  err);
	tbx__cover_free(&c);
	tbx__buf_free(&b);
	/* And the encoder, past an entry of the same id. */
	snprintf(e[2].ref_id, sizeof(e[2].ref_id), "%.*sG", TBX_UUID_LEN - 1,
		 SET_A);
	cr_assert_eq(tbx__cover_encode(&b, e, 3, err, sizeof(err)), TBX_EINVAL);
	cr_assert(strstr(err, "cover entry 2: token id is not UUID text"), "%s",
		  err);
	tbx__buf_free(&b);
}

Test(batchrow, a_wire_column_reads_back_and_is_checked)
{
	tbx__wire_ent_t w[3] = {{-1, 0, 0}, {0, 65535, 1}, {2147483647, 7, 1}};
	tbx__wire_ent_t *out;
	tbx__buf_t b = {0};
	uint32_t n;
	char err[200];
	static const unsigned char want[] = {
	    1, 0,    0,	   0,	 3,    0xff, 0xff, 0xff, 0xff, 0, 0, 0,
	    0, 0,    0,	   0,	 0,    0,    0,	   0xff, 0xff, 0, 0, 0,
	    1, 0x7f, 0xff, 0xff, 0xff, 0,    7,	   0,	 0,    0, 1};

	cr_assert_eq(tbx__wire_encode(&b, w, 3), TBX_OK);
	cr_assert_eq(b.len, sizeof(want));
	cr_assert_eq(memcmp(b.p, want, sizeof(want)), 0);
	cr_assert_eq(
	    tbx__wire_decode(b.p, b.len, 2, &out, &n, err, sizeof(err)), TBX_OK,
	    "%s", err);
	cr_assert_eq(n, 3);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(out[i].partition, w[i].partition);
		cr_assert_eq(out[i].index, w[i].index);
		cr_assert_eq(out[i].cover, w[i].cover);
	}
	free(out);
	/* A cover entry past the cover. */
	cr_assert_eq(
	    tbx__wire_decode(b.p, b.len, 1, &out, &n, err, sizeof(err)),
	    TBX_ECORRUPT);
	cr_assert(strstr(err, "wire entry 1: cover entry 1 of 1"), "%s", err);
	/* A partition below -1. */
	b.p[5] = 0x80;
	cr_assert_eq(
	    tbx__wire_decode(b.p, b.len, 2, &out, &n, err, sizeof(err)),
	    TBX_ECORRUPT);
	cr_assert(strstr(err, "below -1"), "%s", err);
	b.p[5] = 0xff;
	/* Lengths: short, long, count off by one, format. */
	cr_assert_eq(
	    tbx__wire_decode(b.p, b.len - 1, 2, &out, &n, err, sizeof(err)),
	    TBX_ECORRUPT);
	cr_assert_eq(tbx__wire_decode(b.p, 4, 2, &out, &n, err, sizeof(err)),
		     TBX_ECORRUPT);
	b.p[4] = 2;
	cr_assert_eq(
	    tbx__wire_decode(b.p, b.len, 2, &out, &n, err, sizeof(err)),
	    TBX_ECORRUPT);
	b.p[4] = 3;
	b.p[0] = 0;
	cr_assert_eq(
	    tbx__wire_decode(b.p, b.len, 2, &out, &n, err, sizeof(err)),
	    TBX_ECORRUPT);
	cr_assert(strstr(err, "unknown format"), "%s", err);
	tbx__buf_free(&b);
	/* The encoder refuses a partition below -1. */
	w[0].partition = -2;
	cr_assert_eq(tbx__wire_encode(&b, w, 3), TBX_EINVAL);
	tbx__buf_free(&b);
}

/* The index, checked against a linear search over a cover of 2,000
 * records on 4 partitions with bits of 10 sets and repeats. */
Test(batchrow, the_index_finds_what_a_scan_finds)
{
	enum { N = 2000 };
	static char ids[N][16], sets[10][TBX_UUID_LEN + 1];
	tbx__cover_ent_t *e = calloc(N, sizeof(*e));
	tbx__buf_t b = {0};
	tbx__cover_t c;
	char err[200];

	for (int s = 0; s < 10; s++)
		snprintf(sets[s], sizeof(sets[s]),
			 "01890a5d-ac96-774b-bcce-b302099a80%02d", s);
	for (int i = 0; i < N; i++) {
		snprintf(ids[i], sizeof(ids[i]), "m-%d", i);
		/* Every 7th record a copy of the one before (same bit). */
		int j = i % 7 == 6 ? i - 1 : i;

		e[i] =
		    ent(j % 5 == 4 ? TBX__COVER_UNTOKENED : TBX__COVER_HANDLED,
			i % 2 ? "a" : "b", i % 4, i / 4, ids[i],
			j % 5 == 4 ? TBX__REF_NONE : TBX__REF_BIT,
			j % 5 == 4 ? NULL : sets[j % 10],
			(uint16_t)(j * 31 % 65536), i % 4);
	}
	encode(e, N, &b);
	cr_assert_eq(tbx__cover_decode(b.p, b.len, &c, err, sizeof(err)),
		     TBX_OK, "%s", err);
	for (int s = 0; s < 11; s++)
		for (int idx = 0; idx < N * 31; idx += 31) {
			const char *set = s < 10 ? sets[s] : SET_A;
			int64_t want = -1;

			for (int i = 0; i < N && want < 0; i++)
				if (e[i].ref == TBX__REF_BIT &&
				    e[i].index == (uint16_t)idx &&
				    strcmp(e[i].ref_id, set) == 0)
					want = i;
			cr_assert_eq(
			    tbx__cover_find_bit(&c, set, (uint16_t)idx), want,
			    "set %d index %d", s, idx);
		}
	for (int i = 0; i < N; i++) {
		cr_assert_eq(tbx__cover_find_offset(
				 &c, e[i].topic, e[i].partition, e[i].offset),
			     i);
		cr_assert_eq(tbx__cover_find_offset(&c, e[i].topic,
						    e[i].partition + 4,
						    e[i].offset),
			     -1);
	}
	cr_assert_eq(tbx__cover_find_offset(&c, "a", 0, 0), -1);
	cr_assert_eq(tbx__cover_find_offset(&c, "c", 0, 0), -1);
	tbx__cover_free(&c);
	tbx__buf_free(&b);
	free(e);
}

/* Every field of every entry, and what the index finds for each, the
 * same in @p a and @p b. */
static void covers_equal(const tbx__cover_t *a, const tbx__cover_t *b)
{
	cr_assert_eq(a->n, b->n);
	cr_assert_eq(a->nbit, b->nbit);
	for (uint32_t i = 0; i < a->n; i++) {
		const tbx__cover_ent_t *x = &a->ent[i], *y = &b->ent[i];

		cr_assert_eq(x->kind, y->kind);
		cr_assert_str_eq(x->topic, y->topic);
		cr_assert_eq(x->partition, y->partition);
		cr_assert_eq(x->offset, y->offset);
		cr_assert_str_eq(x->msg_id, y->msg_id);
		cr_assert_eq(x->ref, y->ref);
		cr_assert_str_eq(x->ref_id, y->ref_id);
		cr_assert_eq(x->index, y->index, "entry %u", i);
		cr_assert_eq(x->set_part, y->set_part, "entry %u", i);
		cr_assert_eq(tbx__cover_find_offset(a, x->topic, x->partition,
						    x->offset),
			     tbx__cover_find_offset(b, x->topic, x->partition,
						    x->offset));
		cr_assert_eq(tbx__cover_find_bit(a, x->ref_id, x->index),
			     tbx__cover_find_bit(b, x->ref_id, x->index));
	}
}

/* A's row goes into the store and the resume memory by the cover made
 * from its entries (tbx__cover_from()), not by decoding the column it
 * has just encoded: the two must be the same cover, whatever the order
 * of the entries (in order, reversed, interleaved, shuffled: the
 * index's sort merges runs). */
Test(batchrow, a_cover_made_from_its_entries_is_the_decoded_one)
{
	enum { N = 1500 };
	static char ids[N][16], sets[6][TBX_UUID_LEN + 1];
	static const char *const topics[] = {"orders", "orders.b", "a"};
	tbx__cover_ent_t *e = calloc(N, sizeof(*e)), s[5];
	char err[200];
	unsigned seed = 7;

	for (int k = 0; k < 6; k++)
		snprintf(sets[k], sizeof(sets[k]),
			 "01890a5d-ac96-774b-bcce-b302099a80%02d", 50 - k);
	for (int order = 0; order < 5; order++) {
		size_t n = N;
		tbx__buf_t b = {0};
		tbx__cover_t dec, from;

		if (order == 4) {
			n = sample(s);
			memcpy(e, s, sizeof(s));
		}
		for (int i = 0; order < 4 && i < N; i++) {
			/* 0: in order; 1: reversed; 2: three partitions
			 * interleaved; 3: shuffled. */
			int j = order == 1   ? N - 1 - i
				: order == 2 ? (i % 3) * (N / 3) + i / 3
					     : i;

			snprintf(ids[i], sizeof(ids[i]), "m-%d", i);
			e[i] = ent(j % 9 == 8 ? TBX__COVER_DEAD_LETTER
					      : TBX__COVER_HANDLED,
				   topics[j / 700], j % 3, j / 3, ids[i],
				   j % 9 == 8	? TBX__REF_NONE
				   : j % 9 == 7 ? TBX__REF_TOKEN
						: TBX__REF_BIT,
				   j % 9 == 8	? NULL
				   : j % 9 == 7 ? TOKEN
						: sets[(j / 100) % 6],
				   (uint16_t)(j % 9 == 7 ? 0 : j),
				   j % 50 == 0 ? (j % 3) + 1 : j % 3);
		}
		for (size_t i = n; order == 3 && i > 1; i--) {
			size_t r = (seed = seed * 1103515245u + 12345u) % i;
			tbx__cover_ent_t t = e[i - 1];

			e[i - 1] = e[r];
			e[r] = t;
		}
		encode(e, n, &b);
		cr_assert_eq(
		    tbx__cover_decode(b.p, b.len, &dec, err, sizeof(err)),
		    TBX_OK, "%s", err);
		cr_assert_eq(tbx__cover_from(&from, e, n), TBX_OK);
		covers_equal(&dec, &from);
		/* And the index finds each entry by its keys: the first
		 * entry with them. */
		for (size_t i = 0; i < n; i++) {
			int64_t at = tbx__cover_find_offset(
			    &from, e[i].topic, e[i].partition, e[i].offset);

			cr_assert(at >= 0 && (size_t)at <= i);
			if (e[i].ref != TBX__REF_BIT)
				continue;
			at =
			    tbx__cover_find_bit(&from, e[i].ref_id, e[i].index);
			cr_assert(at >= 0 && (size_t)at <= i);
			cr_assert_eq(from.ent[at].index, e[i].index);
		}
		tbx__cover_free(&dec);
		tbx__cover_free(&from);
		tbx__buf_free(&b);
	}
	{
		tbx__cover_t none;

		cr_assert_eq(tbx__cover_from(&none, e, 0), TBX_EINVAL);
		tbx__cover_free(&none);
	}
	free(e);
}
