/*
 * Fuzz target: a tbx-tbit header value as tbx__tbit_parse() reads it
 * (consumer/msg.c).  The whole input is the value, any bytes.
 *
 * Checked against a reading written another way (strtoll on the two
 * parts): the value is accepted exactly when it is two runs of ASCII
 * digits around one colon, without a leading zero, with the partition
 * below 2^31 and the index below 65,536; then the outputs are those
 * numbers and write back ("%d:%u") to the input byte for byte; else the
 * outputs are untouched.
 */
#include <stdlib.h>
#include <string.h>

#include "consumer/msg.h"
#include "fuzz/fuzz.h"

/* 1 when @p s (@p len bytes) is a run of 1..max digits without a leading
 * zero; *v its value. */
static int digits(const uint8_t *s, size_t len, size_t max, long long *v)
{
	char buf[16];

	if (len == 0 || len > max || (len > 1 && s[0] == '0'))
		return 0;
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	memcpy(buf, s, len);
	buf[len] = '\0';
	*v = strtoll(buf, NULL, 10);
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *colon = size ? memchr(data, ':', size) : NULL;
	long long p = -1, i = -1;
	int32_t part = -7;
	uint32_t index = 7;
	int want =
	    colon && digits(data, (size_t)(colon - data), 12, &p) &&
	    digits(colon + 1, size - (size_t)(colon - data) - 1, 12, &i) &&
	    p < 2147483648LL && i < 65536;
	int got = tbx__tbit_parse((const char *)data, size, &part, &index);

	FUZZ_CHECK(got == TBX_OK || got == TBX_EINVAL);
	FUZZ_CHECK((got == TBX_OK) == want);
	if (got == TBX_OK) {
		char back[32];
		int len = snprintf(back, sizeof(back), "%d:%u", part, index);

		FUZZ_CHECK(part == p && index == (uint32_t)i);
		FUZZ_CHECK(len > 0 && (size_t)len == size &&
			   memcmp(back, data, size) == 0);
	} else {
		FUZZ_CHECK(part == -7 && index == 7);
	}
	return 0;
}
