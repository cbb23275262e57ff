/*
 * Fuzz target: the tbx-* headers of an incoming Kafka record, as the
 * worker reads them (tbx__msg_parse_headers() in consumer/msg.c).  Every
 * byte of a header comes from whoever produced the record.
 *
 * Input: u8 topic length, then that many bytes mapped onto Kafka's topic
 * characters; i32 partition; i64 offset; then headers until the input
 * ends, each:
 *   u8 name: < 0xc0 picks a name from NAMES (mod its size), else the
 *            next (byte & 0x3f) bytes are the name as is;
 *   u8 value length, 0xff for a null value, then that many bytes.
 *
 * Checked: the parsed id, token, cause and type are NUL-terminated text of
 * the rules in docs/architecture.md; a record is tokened only with a
 * lower-case UUID token equal to its last tbx-token header and a positive
 * tbx-seq, and, unless it is malformed (dead-lettered), a UUID id; a derived id
 * names the record's place whole.  A record with tbx-tset or tbx-tbit
 * never carries a tbx-token: it is read as batched (docs/batched-tokens.md,
 * "Wire format"; its token is the set's bit) only with a UUID tbx-tset
 * equal to the last one, a tbx-tbit that is the canonical spelling of its
 * partition and index, within their bounds, a UUID id and a positive
 * tbx-seq, and is otherwise untokened and malformed (dead-lettered).
 */
#include <ctype.h>
#include <librdkafka/rdkafka.h>
#include <string.h>
#include <strings.h>

#include "base/ids.h"
#include "consumer/worker.h"
#include "fuzz/fuzz.h"

static const char *const NAMES[] = {
    "tbx-id",	     "tbx-token", "tbx-seq", "tbx-type", "tbx-cause",
    "tbx-dlq-error", "x-other",	  "TBX-ID",  "tbx-tset", "tbx-tbit",
};
#define NAME_CNT (sizeof(NAMES) / sizeof(NAMES[0]))

static const char TOPIC_CHARS[] =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";

static int is_lower_uuid(const char *s)
{
	if (!tbx__is_uuid(s, strlen(s)))
		return 0;
	for (; *s; s++)
		if (isupper((unsigned char)*s))
			return 0;
	return 1;
}

static int is_clean_text(const char *s, size_t max)
{
	size_t len = strnlen(s, max + 1);

	if (len > max)
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in_t in = {data, size};
	char topic[TBX_TOPIC_MAX + 1];
	struct tbx_msg msg;
	rd_kafka_headers_t *hdrs = rd_kafka_headers_new(8);
	const void *last_token = NULL, *last_tset = NULL, *last_tbit = NULL;
	size_t last_token_len = 0, last_tset_len = 0, last_tbit_len = 0, n;
	int has_tset = 0, has_tbit = 0;
	int has_hdrs = 0;
	uint32_t partition = 0;
	uint64_t offset = 0;

	size_t tlen = fuzz_u8(&in) % TBX_TOPIC_MAX + 1;
	for (size_t i = 0; i < tlen; i++)
		topic[i] =
		    TOPIC_CHARS[fuzz_u8(&in) % (sizeof(TOPIC_CHARS) - 1)];
	topic[tlen] = '\0';
	for (int i = 0; i < 4; i++)
		partition = partition << 8 | fuzz_u8(&in);
	for (int i = 0; i < 8; i++)
		offset = offset << 8 | fuzz_u8(&in);

	while (in.left) {
		char name[64];
		uint8_t sel = fuzz_u8(&in), vlen;
		const uint8_t *val;

		if (sel < 0xc0) {
			snprintf(name, sizeof(name), "%s",
				 NAMES[sel % NAME_CNT]);
		} else {
			const uint8_t *raw = fuzz_bytes(&in, sel & 0x3f, &n);
			memcpy(name, raw, n);
			name[n] = '\0';
		}
		vlen = fuzz_u8(&in);
		if (vlen == 0xff) {
			val = NULL;
			n = 0;
		} else {
			val = fuzz_bytes(&in, vlen, &n);
		}
		rd_kafka_header_add(hdrs, name, -1, val, (ssize_t)n);
		has_hdrs = 1;
		if (strcmp(name, "tbx-token") == 0) {
			last_token = val;
			last_token_len = n;
		} else if (strcmp(name, "tbx-tset") == 0) {
			last_tset = val;
			last_tset_len = n;
			has_tset = 1;
		} else if (strcmp(name, "tbx-tbit") == 0) {
			last_tbit = val;
			last_tbit_len = n;
			has_tbit = 1;
		}
	}

	memset(&msg, 0xa5, sizeof(msg)); /* garbage the parser must reset */
	msg.topic = topic;
	tbx__msg_parse_headers(&msg, has_hdrs ? hdrs : NULL, (int32_t)partition,
			       (int64_t)offset);

	FUZZ_CHECK(memchr(msg.id, '\0', sizeof(msg.id)) != NULL);
	FUZZ_CHECK(msg.id[0] != '\0');
	FUZZ_CHECK(is_clean_text(msg.id, TBX_MSGID_MAX));
	FUZZ_CHECK(msg.cause[0] == '\0' || is_lower_uuid(msg.cause));
	FUZZ_CHECK(msg.has_type == 0 || msg.has_type == 1);
	if (msg.has_type)
		FUZZ_CHECK(msg.type[0] &&
			   is_clean_text(msg.type, TBX_TYPE_MAX));
	FUZZ_CHECK(msg.untokened == 0 || msg.untokened == 1);
	if (msg.untokened || msg.fmt == TBX_WF_SET) {
		/* A set's token is its bit (checked below), never a
		 * tbx-token. */
		FUZZ_CHECK(msg.token[0] == '\0');
	} else {
		FUZZ_CHECK(is_lower_uuid(msg.token));
		/* A malformed record is dead-lettered, by its derived id. */
		FUZZ_CHECK(msg.malformed || is_lower_uuid(msg.id));
		FUZZ_CHECK(msg.seq >= 1);
		FUZZ_CHECK(last_token && last_token_len == TBX_UUID_LEN &&
			   strncasecmp(last_token, msg.token, TBX_UUID_LEN) ==
			       0);
	}
	FUZZ_CHECK(msg.fmt >= TBX_WF_UNTOKENED && msg.fmt <= TBX_WF_MALFORMED);
	if (has_tset || has_tbit) {
		FUZZ_CHECK(msg.fmt == TBX_WF_SET ||
			   msg.fmt == TBX_WF_MALFORMED);
		if (msg.fmt == TBX_WF_SET)
			FUZZ_CHECK(!msg.untokened);
		else
			FUZZ_CHECK(msg.untokened && msg.malformed);
	}
	if (msg.fmt == TBX_WF_SET) {
		char bit[32];
		int len = snprintf(bit, sizeof(bit), "%d:%u", msg.tset_part,
				   msg.tset_index);

		FUZZ_CHECK(has_tset && has_tbit);
		FUZZ_CHECK(is_lower_uuid(msg.tset) && is_lower_uuid(msg.id));
		FUZZ_CHECK(last_tset && last_tset_len == TBX_UUID_LEN &&
			   strncasecmp(last_tset, msg.tset, TBX_UUID_LEN) == 0);
		FUZZ_CHECK(msg.tset_part >= 0 &&
			   msg.tset_index < TBX_TBIT_INDEX_END);
		FUZZ_CHECK(last_tbit && len > 0 &&
			   (size_t)len == last_tbit_len &&
			   memcmp(bit, last_tbit, last_tbit_len) == 0);
		FUZZ_CHECK(msg.seq >= 1);
	} else {
		FUZZ_CHECK(msg.tset[0] == '\0' && msg.tset_part == -1);
	}
	/* A derived id names the record: u:TOPIC:PARTITION:OFFSET, whole. */
	if (strncmp(msg.id, "u:", 2) == 0) {
		char want[TBX_MSGID_MAX + 1];
		int len = snprintf(want, sizeof(want), "u:%s:%d:%lld", topic,
				   (int)(int32_t)partition,
				   (long long)(int64_t)offset);
		FUZZ_CHECK(len > 0 && (size_t)len < sizeof(want));
		FUZZ_CHECK(strcmp(msg.id, want) == 0);
	}
	rd_kafka_headers_destroy(hdrs);
	return 0;
}
