/* base/str.h's integer formatters: the same text as snprintf's. */
#include "base/str.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void same_u64(uint64_t v)
{
	char want[32], got[TBX_FMT_INT_MAX];
	int n = tbx__fmt_u64(got, sizeof(got), v);

	snprintf(want, sizeof(want), "%" PRIu64, v);
	cr_assert_str_eq(got, want);
	cr_assert_eq(n, (int)strlen(want));
}

static void same_i64(int64_t v)
{
	char want[32], got[TBX_FMT_INT_MAX];
	int n = tbx__fmt_i64(got, sizeof(got), v);

	snprintf(want, sizeof(want), "%" PRId64, v);
	cr_assert_str_eq(got, want);
	cr_assert_eq(n, (int)strlen(want));
}

Test(str_fmt, matches_snprintf_at_the_edges)
{
	uint64_t p = 1;

	same_u64(0);
	same_u64(UINT64_MAX);
	same_i64(0);
	same_i64(-1);
	same_i64(INT64_MAX);
	same_i64(INT64_MIN);
	for (int i = 0; i < 20; i++, p *= 10) {
		same_u64(p);
		same_u64(p - 1);
		same_i64((int64_t)(p - 1));
		same_i64(-(int64_t)(p - 1));
	}
}

Test(str_fmt, matches_snprintf_on_many_values)
{
	uint64_t x = 0x9e3779b97f4a7c15u;

	for (int i = 0; i < 100000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		same_u64(x >> (i % 64));
		same_i64((int64_t)x >> (i % 64));
	}
}

Test(str_fmt, too_small_a_buffer_is_refused_and_terminated)
{
	char buf[4];

	cr_assert_eq(tbx__fmt_u64(buf, sizeof(buf), 1234), -1);
	cr_assert_str_eq(buf, "");
	cr_assert_eq(tbx__fmt_u64(buf, sizeof(buf), 123), 3);
	cr_assert_str_eq(buf, "123");
	cr_assert_eq(tbx__fmt_i64(buf, sizeof(buf), -123), -1);
	cr_assert_str_eq(buf, "");
	cr_assert_eq(tbx__fmt_i64(buf, sizeof(buf), -12), 3);
	cr_assert_str_eq(buf, "-12");
	cr_assert_eq(tbx__fmt_i64(buf, 1, -1), -1);
	cr_assert_str_eq(buf, "");
	cr_assert_eq(tbx__fmt_u64(NULL, 0, 5), -1);
}
