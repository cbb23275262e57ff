/*
 * The batched format's headers, tbx-tset and tbx-tbit
 * (docs/batched-tokens.md, "Wire format"): tbx__tbit_parse()'s rules and
 * boundaries, the format every combination of token headers is read as,
 * and that a worker never takes a batched record for an untokened one
 * (the receiver's own tests are test_worker_tsets.c).
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "consumer/msg.h"
#include "support.h"

#define ID    "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b"
#define TSET  "0190a1b2-c3d4-7e5f-8a6b-000000000001"
#define TOKEN "0190a1b2-c3d4-7e5f-8a6b-000000000002"
#define STORE "0190a1b2-c3d4-7e5f-8a6b-000000000003"
/* A sequence number no store issues for centuries (they are ms * 1000). */
#define NEVER_ISSUED "9000000000000000000"

static int parse(const char *v, int32_t *p, uint32_t *i)
{
	*p = -7;
	*i = 7;
	return tbx__tbit_parse(v, strlen(v), p, i);
}

Test(tbit, valid_values_and_their_boundaries)
{
	static const struct {
		const char *v;
		int32_t p;
		uint32_t i;
	} good[] = {
	    {"0:0", 0, 0},
	    {"1:2", 1, 2},
	    {"10:100", 10, 100},
	    {"0:65535", 0, 65535},
	    {"2147483647:0", 2147483647, 0},
	    {"2147483647:65535", 2147483647, 65535},
	    {"2147483646:65534", 2147483646, 65534},
	    {"1000000000:10000", 1000000000, 10000},
	};
	int32_t p;
	uint32_t i;

	for (size_t k = 0; k < sizeof(good) / sizeof(good[0]); k++) {
		cr_assert_eq(parse(good[k].v, &p, &i), TBX_OK, "%s", good[k].v);
		cr_assert_eq(p, good[k].p, "%s", good[k].v);
		cr_assert_eq(i, good[k].i, "%s", good[k].v);
	}
}

Test(tbit, everything_else_is_refused_and_leaves_the_outputs_alone)
{
	static const char *const bad[] = {
	    "", ":", "0", "0:", ":0", "00", "0;0", "0::0", "1:2:3", "0:0:",
	    /* out of range, and overflow of 32 and 64 bits */
	    "2147483648:0", "4294967295:0", "4294967296:0", "9999999999:0",
	    "18446744073709551617:0", "99999999999:0", "0:65536", "0:99999",
	    "0:4294967296", "0:100000", "2147483648:65536",
	    /* signs, spaces, other spellings */
	    "-1:0", "0:-1", "+1:0", "0:+1", "-0:0", " 1:0", "1:0 ", "1 :0",
	    "1: 0", "\t1:0", "1:0\n", "0x1:0", "1e3:0", "1.0:0", "1,0:0", "a:b",
	    "1:b", "\xef\xbc\x91:0",
	    /* leading zeros: one spelling per value */
	    "01:0", "0:01", "00:0", "0:00", "007:7", "0000000001:1",
	    "02147483647:0", "0:065535"};
	int32_t p;
	uint32_t i;

	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		cr_assert_eq(parse(bad[k], &p, &i), TBX_EINVAL, "'%s'", bad[k]);
		cr_assert(p == -7 && i == 7, "'%s' touched the outputs",
			  bad[k]);
	}
	/* A NUL inside the value is a byte like any other. */
	cr_assert_eq(tbx__tbit_parse("1:2\0", 4, &p, &i), TBX_EINVAL);
	cr_assert_eq(tbx__tbit_parse("1\0:2", 4, &p, &i), TBX_EINVAL);
	cr_assert_eq(tbx__tbit_parse(NULL, 3, &p, &i), TBX_EINVAL);
	cr_assert(p == -7 && i == 7);
}

/* The value is @p len bytes, not a C string: what follows is not read. */
Test(tbit, only_len_bytes_are_read)
{
	int32_t p;
	uint32_t i;

	cr_assert_eq(tbx__tbit_parse("12:34xyz", 4, &p, &i), TBX_OK);
	cr_assert(p == 12 && i == 3);
	cr_assert_eq(tbx__tbit_parse("12:34", 3, &p, &i), TBX_EINVAL);
	cr_assert_eq(tbx__tbit_parse("12:34", 0, &p, &i), TBX_EINVAL);
}

/* Every index, and partitions around every power of two, read back what
 * a sender writes ("%d:%u"); the next value up of each bound is refused. */
Test(tbit, what_senders_write_reads_back)
{
	char buf[32];
	int32_t p;
	uint32_t i;
	size_t checked = 0;

	for (uint32_t idx = 0; idx < TBX_TBIT_INDEX_END; idx++) {
		int n = snprintf(buf, sizeof(buf), "%d:%u", 7, idx);
		cr_assert_eq(tbx__tbit_parse(buf, (size_t)n, &p, &i), TBX_OK);
		cr_assert(p == 7 && i == idx, "%s", buf);
		checked++;
	}
	for (int bit = 0; bit <= 31; bit++) {
		int64_t base = (int64_t)1 << bit;
		for (int64_t part = base - 1; part <= base + 1; part++) {
			int n = snprintf(buf, sizeof(buf), "%" PRId64 ":%u",
					 part, 65535u);
			int want =
			    part < TBX_TBIT_PART_END ? TBX_OK : TBX_EINVAL;
			cr_assert_eq(tbx__tbit_parse(buf, (size_t)n, &p, &i),
				     want, "%s", buf);
			if (want == TBX_OK)
				cr_assert(p == part && i == 65535u, "%s", buf);
			checked++;
		}
	}
	cr_assert_eq(checked, 65536 + 32 * 3);
}

/* A record with the headers @p kv ("name", "value" pairs, NULL-ended),
 * parsed into *msg (filled with garbage first). */
static void parse_record(struct tbx_msg *msg, ...)
{
	rd_kafka_headers_t *h = rd_kafka_headers_new(8);
	const char *name;
	va_list ap;

	va_start(ap, msg);
	while ((name = va_arg(ap, const char *))) {
		const char *val = va_arg(ap, const char *);
		rd_kafka_header_add(h, name, -1, val, val ? -1 : 0);
	}
	va_end(ap);
	memset(msg, 0xa5, sizeof(*msg));
	msg->topic = "in";
	tbx__msg_parse_headers(msg, h, 3, 42);
	rd_kafka_headers_destroy(h);
}

static void assert_malformed(const struct tbx_msg *msg, const char *why)
{
	cr_assert_eq(msg->fmt, TBX_WF_MALFORMED);
	cr_assert_not_null(msg->malformed, "want '%s'", why);
	cr_assert_str_eq(msg->malformed, why);
	cr_assert(msg->untokened);
	cr_assert_str_eq(msg->token, "");
	cr_assert_str_eq(msg->tset, "");
}

/* A set or store id equal to the record before's is read from memory;
 * one that differs in a byte is checked whole, however alike. */
Test(tset_format, a_repeated_id_reads_the_same_and_another_is_checked)
{
	static const char upper[] = "0190A1B2-C3D4-7E5F-8A6B-000000000001";
	static const char bad[] = "0190a1b2-c3d4-7e5f-8a6b-00000000000g";
	struct tbx_msg msg;

	for (int k = 0; k < 2; k++) {
		parse_record(&msg, "tbx-id", ID, "tbx-tset", upper, "tbx-tbit",
			     "5:300", "tbx-seq", "9", "tbx-store", STORE, NULL);
		cr_assert_eq(msg.fmt, TBX_WF_SET, "parse %d", k);
		cr_assert_str_eq(msg.tset, TSET, "lower-cased, parse %d", k);
		cr_assert_str_eq(msg.store, STORE);
	}
	parse_record(&msg, "tbx-id", ID, "tbx-tset", bad, "tbx-tbit", "5:300",
		     "tbx-seq", "9", "tbx-store", STORE, NULL);
	assert_malformed(&msg, "tbx-tset is not a UUID");
	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit", "5:300",
		     "tbx-seq", "9", "tbx-store", bad, NULL);
	assert_malformed(&msg, "tbx-store is not a UUID");
	/* per message, after a set's record of the same store */
	parse_record(&msg, "tbx-id", ID, "tbx-token", TOKEN, "tbx-seq", "4",
		     "tbx-store", bad, NULL);
	cr_assert_eq(msg.fmt, TBX_WF_MALFORMED);
	cr_assert_str_eq(msg.malformed, "tbx-store is not a UUID");
	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit", "5:300",
		     "tbx-seq", "9", "tbx-store", STORE, NULL);
	cr_assert_eq(msg.fmt, TBX_WF_SET);
	cr_assert_str_eq(msg.tset, TSET);
	cr_assert_str_eq(msg.store, STORE);
}

/* The table's rows that are not malformed. */
Test(tset_format, batched_per_message_and_untokened)
{
	struct tbx_msg msg;

	/* batched: read whole, tokened by its set's bit */
	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit", "5:300",
		     "tbx-seq", "9", "tbx-store", STORE, "tbx-type", "Ping",
		     NULL);
	cr_assert_eq(msg.fmt, TBX_WF_SET);
	cr_assert_str_eq(msg.tset, TSET);
	cr_assert_eq(msg.tset_part, 5);
	cr_assert_eq(msg.tset_index, 300);
	cr_assert_eq(msg.seq, 9);
	cr_assert_str_eq(msg.store, STORE);
	cr_assert_str_eq(msg.id, ID);
	cr_assert_null(msg.malformed);
	cr_assert_not(msg.untokened, "its token is the set's bit");
	cr_assert_str_eq(msg.token, "");

	/* without tbx-store, as from a sender that writes none */
	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit", "0:0",
		     "tbx-seq", "1", NULL);
	cr_assert_eq(msg.fmt, TBX_WF_SET);
	cr_assert_str_eq(msg.store, "");
	cr_assert_null(msg.malformed);
	cr_assert_not(msg.untokened);

	/* per message: as today */
	parse_record(&msg, "tbx-id", ID, "tbx-token", TOKEN, "tbx-seq", "4",
		     NULL);
	cr_assert_eq(msg.fmt, TBX_WF_MSG);
	cr_assert_null(msg.malformed);
	cr_assert_not(msg.untokened);
	cr_assert_str_eq(msg.token, TOKEN);
	cr_assert_str_eq(msg.tset, "");
	cr_assert_eq(msg.tset_part, -1);
	cr_assert_eq(msg.seq, 4);

	/* none of the three */
	parse_record(&msg, "tbx-id", ID, "tbx-type", "Ping", NULL);
	cr_assert_eq(msg.fmt, TBX_WF_UNTOKENED);
	cr_assert_null(msg.malformed);
	cr_assert(msg.untokened);
	parse_record(&msg, NULL);
	cr_assert_eq(msg.fmt, TBX_WF_UNTOKENED);
	cr_assert_null(msg.malformed);
	cr_assert_str_eq(msg.id, "u:in:3:42");
}

/* The table's malformed row, each mix it lists, whatever else is there. */
Test(tset_format, every_mix_the_table_lists_is_malformed)
{
	struct tbx_msg msg;

	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-seq", "1",
		     NULL);
	assert_malformed(&msg, "tbx-tset without tbx-tbit");
	parse_record(&msg, "tbx-id", ID, "tbx-tbit", "0:1", "tbx-seq", "1",
		     NULL);
	assert_malformed(&msg, "tbx-tbit without tbx-tset");
	parse_record(&msg, "tbx-id", ID, "tbx-tbit", "0:1", "tbx-token", TOKEN,
		     "tbx-seq", "1", NULL);
	assert_malformed(&msg, "tbx-tbit without tbx-tset");
	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-token", TOKEN,
		     "tbx-seq", "1", NULL);
	assert_malformed(&msg, "tbx-tset with tbx-token");
	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit", "0:1",
		     "tbx-token", TOKEN, "tbx-seq", "1", NULL);
	assert_malformed(&msg, "tbx-tset with tbx-token");
	/* a tbx-token that is not a UUID is still a tbx-token */
	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit", "0:1",
		     "tbx-token", "x", "tbx-seq", "1", NULL);
	assert_malformed(&msg, "tbx-tset with tbx-token");
}

/* The value rules: tbx-tset a UUID, tbx-tbit as tbx__tbit_parse(), and
 * tbx-id and tbx-seq required as with tbx-token. */
Test(tset_format, values_and_the_headers_a_set_requires)
{
	struct tbx_msg msg;
	const char *bad_bits[] = {"",	  "1",	     "1:",	     "-1:0",
				  "01:0", "0:65536", "2147483648:0", "1:2:3",
				  " 1:2"};

	parse_record(&msg, "tbx-id", ID, "tbx-tset", "not-a-uuid", "tbx-tbit",
		     "0:1", "tbx-seq", "1", NULL);
	assert_malformed(&msg, "tbx-tset is not a UUID");
	parse_record(&msg, "tbx-id", ID, "tbx-tset", "", "tbx-tbit", "0:1",
		     "tbx-seq", "1", NULL);
	assert_malformed(&msg, "tbx-tset is not a UUID");
	parse_record(&msg, "tbx-id", ID, "tbx-tset", NULL, "tbx-tbit", "0:1",
		     "tbx-seq", "1", NULL);
	assert_malformed(&msg, "tbx-tset is not a UUID");
	for (size_t k = 0; k < sizeof(bad_bits) / sizeof(bad_bits[0]); k++) {
		parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit",
			     bad_bits[k], "tbx-seq", "1", NULL);
		cr_assert_eq(msg.fmt, TBX_WF_MALFORMED, "'%s'", bad_bits[k]);
		cr_assert(strncmp(msg.malformed, "tbx-tbit is not", 15) == 0,
			  "'%s': %s", bad_bits[k], msg.malformed);
	}
	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit", NULL,
		     "tbx-seq", "1", NULL);
	cr_assert(strncmp(msg.malformed, "tbx-tbit is not", 15) == 0);

	parse_record(&msg, "tbx-tset", TSET, "tbx-tbit", "0:1", "tbx-seq", "1",
		     NULL);
	assert_malformed(&msg, "tbx-tset without a valid tbx-id");
	cr_assert_str_eq(msg.id, "u:in:3:42");
	/* an id that is not a UUID: the first reason stays */
	parse_record(&msg, "tbx-id", "x", "tbx-tset", TSET, "tbx-tbit", "0:1",
		     "tbx-seq", "1", NULL);
	assert_malformed(&msg, "tbx-id is not a UUID");

	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit", "0:1",
		     NULL);
	assert_malformed(&msg, "tbx-tset without a valid tbx-seq");
	const char *bad_seqs[] = {"0",	"-1", "x",  "",
				  "+1", " 1", "1x", "99999999999999999999"};
	for (size_t k = 0; k < sizeof(bad_seqs) / sizeof(bad_seqs[0]); k++) {
		parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit",
			     "0:1", "tbx-seq", bad_seqs[k], NULL);
		assert_malformed(&msg, "tbx-tset without a valid tbx-seq");
	}
	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit", "0:1",
		     "tbx-seq", "1", "tbx-store", "nope", NULL);
	assert_malformed(&msg, "tbx-store is not a UUID");
	cr_assert_str_eq(msg.store, "");
}

/* As for every tbx-* header: the last occurrence counts, a UUID is
 * lower-cased, and only the exact names are tokenbox's. */
Test(tset_format, last_occurrence_case_and_names)
{
	struct tbx_msg msg;

	parse_record(&msg, "tbx-id", ID, "tbx-tset", "not-a-uuid", "tbx-tbit",
		     "bad", "tbx-seq", "1", "tbx-tset",
		     "0190A1B2-C3D4-7E5F-8A6B-00000000000F", "tbx-tbit", "2:3",
		     NULL);
	cr_assert_eq(msg.fmt, TBX_WF_SET);
	cr_assert_str_eq(msg.tset, "0190a1b2-c3d4-7e5f-8a6b-00000000000f");
	cr_assert(msg.tset_part == 2 && msg.tset_index == 3);
	parse_record(&msg, "tbx-id", ID, "tbx-tset", TSET, "tbx-tbit", "2:3",
		     "tbx-tbit", "2:x", "tbx-seq", "1", NULL);
	cr_assert_eq(msg.fmt, TBX_WF_MALFORMED);
	parse_record(&msg, "tbx-id", ID, "TBX-TSET", TSET, "tbx-tbitx", "2:3",
		     "tbx-token", TOKEN, "tbx-seq", "1", NULL);
	cr_assert_eq(msg.fmt, TBX_WF_MSG, "other names are not tokenbox's");
	cr_assert_null(msg.malformed);
}

/* The parser reads every header in one pass: names that differ from
 * tokenbox's in one byte, or share a prefix with them, are not taken for
 * them, and the last occurrence of each name still counts. */
Test(tset_format, near_names_are_not_tokenboxs)
{
	static const char *near[] = {
	    "tbx-",	 "tbx-t",     "tbx-tok", "tbx-tokens", "tbx-se",
	    "tbx-seqq",	 "tbx-stor",  "tbx-i",	 "tbx-idx",    "tbx-c",
	    "tbx-typ",	 "tbx-tse",   "tbx-tbi", "tbx_token",  "tbx-Token",
	    "xbx-token", "tbx-tbitt",
	};
	struct tbx_msg msg;

	for (size_t i = 0; i < sizeof(near) / sizeof(near[0]); i++) {
		parse_record(&msg, "tbx-id", ID, near[i], "garbage",
			     "tbx-token", TOKEN, "tbx-seq", "1", NULL);
		cr_assert_eq(msg.fmt, TBX_WF_MSG, "%s", near[i]);
		cr_assert_null(msg.malformed, "%s", near[i]);
		cr_assert_str_eq(msg.token, TOKEN);
	}
	parse_record(&msg, "tbx-id", ID, "tbx-token", TOKEN, "tbx-seq", "1",
		     "tbx-store", STORE, "tbx-seq", "2", "tbx-token",
		     "0190A1B2-C3D4-7E5F-8A6B-0000000000FF", NULL);
	cr_assert_eq(msg.fmt, TBX_WF_MSG);
	cr_assert_str_eq(msg.token, "0190a1b2-c3d4-7e5f-8a6b-0000000000ff");
	cr_assert_eq(msg.seq, 2);
	cr_assert_str_eq(msg.store, STORE);
}

/* tbx__uuid_lower() checks and lower-cases in one pass: it agrees with
 * tbx__is_uuid() on every byte at every position. */
Test(uuid_lower, agrees_with_is_uuid_at_every_position)
{
	char dst[TBX_UUID_LEN + 1], in[TBX_UUID_LEN + 1];

	cr_assert(tbx__uuid_lower(dst, "0190A1B2-C3D4-7E5F-8A6B-7C8D9E0F1A2B",
				  TBX_UUID_LEN));
	cr_assert_str_eq(dst, "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b");
	cr_assert_not(tbx__uuid_lower(dst, ID, TBX_UUID_LEN - 1));
	cr_assert_not(tbx__uuid_lower(dst, NULL, TBX_UUID_LEN));
	for (size_t pos = 0; pos < TBX_UUID_LEN; pos++) {
		for (int b = 0; b < 256; b++) {
			memcpy(in, ID, sizeof(in));
			in[pos] = (char)b;
			int want = tbx__is_uuid(in, TBX_UUID_LEN);
			cr_assert_eq(tbx__uuid_lower(dst, in, TBX_UUID_LEN),
				     want, "byte %d at %zu", b, pos);
			if (!want)
				continue;
			for (size_t k = 0; k < TBX_UUID_LEN; k++)
				cr_assert_eq(dst[k],
					     in[k] >= 'A' && in[k] <= 'F'
						 ? in[k] - 'A' + 'a'
						 : in[k]);
			cr_assert_eq(dst[TBX_UUID_LEN], '\0');
		}
	}
}

/* Garbage in either header never reads as a usable token: every record
 * with one of them is either a whole batched record or malformed. */
Test(tset_format, garbage_values)
{
	struct tbx_msg msg;
	unsigned seed = 24;
	char val[48];

	for (int n = 0; n < 20000; n++) {
		size_t len = (size_t)rand_r(&seed) % sizeof(val);
		rd_kafka_headers_t *h = rd_kafka_headers_new(4);
		int which = rand_r(&seed) % 3;

		for (size_t k = 0; k < len; k++)
			val[k] =
			    (char)(rand_r(&seed) % 3 == 0
				       ? "0123456789:-+ "[rand_r(&seed) % 14]
				       : rand_r(&seed));
		rd_kafka_header_add(h, "tbx-id", -1, ID, -1);
		rd_kafka_header_add(h, "tbx-seq", -1, "1", -1);
		rd_kafka_header_add(h, "tbx-tset", -1, which == 1 ? val : TSET,
				    which == 1 ? (ssize_t)len : -1);
		rd_kafka_header_add(h, "tbx-tbit", -1, which != 1 ? val : "0:0",
				    which != 1 ? (ssize_t)len : -1);
		memset(&msg, 0xa5, sizeof(msg));
		msg.topic = "in";
		tbx__msg_parse_headers(&msg, h, 0, 0);
		rd_kafka_headers_destroy(h);
		cr_assert(msg.token[0] == '\0');
		if (msg.fmt == TBX_WF_SET) {
			char back[32];
			snprintf(back, sizeof(back), "%d:%u", msg.tset_part,
				 msg.tset_index);
			cr_assert(tbx__is_uuid(msg.tset, strlen(msg.tset)));
			cr_assert_null(msg.malformed);
			cr_assert_not(msg.untokened);
			if (which != 1)
				cr_assert(strlen(back) == len &&
					  memcmp(back, val, len) == 0);
		} else {
			cr_assert_eq(msg.fmt, TBX_WF_MALFORMED);
			cr_assert(msg.untokened);
			cr_assert_not_null(msg.malformed);
			cr_assert_str_eq(msg.tset, "");
		}
	}
}

static int both_done(void *opaque)
{
	const char *store = opaque;

	return tt_count(store, "SELECT COUNT(*) FROM hop1") >= 1 &&
	       tt_count(store, "SELECT COUNT(*) FROM tbx_dead_letters") >= 1;
}

/*
 * A record in the batched format is never handled as untokened (here
 * ingress.untokened=offsets would run its handler) and never dropped
 * unproven: its set was never minted and its tbx-seq never issued by the
 * group's token store, so it is dead-lettered as a token store mismatch.
 * A per-message record beside it is handled as ever.
 */
Test(tset_worker, a_batched_record_of_no_set_is_never_untokened)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	char *store = tt_path(dir, "s1.db");
	tt_cluster_t *c = tt_cluster_new(1);
	char err[256], id[TBX_UUID_LEN + 1], tset[TBX_UUID_LEN + 1];
	tt_record_t *recs, hand = {.partition = 0, .payload = "batched"};
	size_t cnt;
	tbx_stats_t st;

	tt_cluster_topic(c, "in", 1);
	tt_cluster_topic(c, "in.dlq", 1);
	tt_hop_table(store, "hop1");
	tt_hop_t hop = {.table = "hop1"};
	tbx_worker_t *w =
	    tbx_worker_new(tt_conf(c->bootstraps, "g1", store, tokens,
				   "ingress.untokened", "offsets", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(c->bootstraps, tokens, "in", "Ping", 1, 1, "m");
	tbx__uuid(id);
	tbx__uuid(tset);
	hand.headers = rd_kafka_headers_new(8);
	rd_kafka_header_add(hand.headers, "tbx-id", -1, id, -1);
	rd_kafka_header_add(hand.headers, "tbx-tset", -1, tset, -1);
	rd_kafka_header_add(hand.headers, "tbx-tbit", -1, "0:0", -1);
	rd_kafka_header_add(hand.headers, "tbx-seq", -1, NEVER_ISSUED, -1);
	rd_kafka_header_add(hand.headers, "tbx-type", -1, "Ping", -1);
	tt_reproduce(c->bootstraps, "in", &hand, 1);
	rd_kafka_headers_destroy(hand.headers);

	cr_assert(tt_drive(&w, 1, both_done, store, 5, 60));
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM hop1"), 1,
		     "only the per-message record is handled");
	cr_assert_eq(tt_count(store, "SELECT COUNT(*) FROM tbx_dead_letters"),
		     1);
	cnt = tt_read_topic(c->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 1, "one dead letter");
	cr_assert(
	    strncmp(
		recs[0].dlq_error,
		"token store mismatch: the record's tbx-seq " NEVER_ISSUED
		" was never issued",
		strlen(
		    "token store mismatch: the record's tbx-seq " NEVER_ISSUED
		    " was never issued")) == 0,
	    "%s", recs[0].dlq_error);
	cr_assert_str_eq(recs[0].payload, "batched");
	tt_records_free(recs, cnt);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.dead_lettered, 1);
	cr_assert_eq(st.processed, 1);
	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
	free(store);
}
