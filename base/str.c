/* Strings and buffers (base/str.h). */
#include "base/str.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tbx__seterr(char *buf, size_t size, int err, const char *fmt, ...)
{
	va_list ap;

	if (buf && size) {
		va_start(ap, fmt);
		vsnprintf(buf, size, fmt, ap);
		va_end(ap);
	}
	return err;
}

char *tbx__strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

void *tbx__memdup(const void *p, size_t len)
{
	void *copy = malloc(len ? len : 1);

	if (copy && len)
		memcpy(copy, p, len);
	return copy;
}

int tbx__strlcpy(char *dst, const char *src, size_t size)
{
	size_t n = strlen(src);

	if (size == 0)
		return -1;
	if (n >= size) {
		memcpy(dst, src, size - 1);
		dst[size - 1] = '\0';
		return -1;
	}
	memcpy(dst, src, n + 1);
	return 0;
}

int tbx__fmt_u64(char *buf, size_t size, uint64_t v)
{
	char tmp[TBX_FMT_INT_MAX];
	size_t n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	if (!buf || size < n + 1) {
		if (buf && size)
			buf[0] = '\0';
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		buf[i] = tmp[n - 1 - i];
	buf[n] = '\0';
	return (int)n;
}

int tbx__fmt_i64(char *buf, size_t size, int64_t v)
{
	int n;

	if (v >= 0)
		return tbx__fmt_u64(buf, size, (uint64_t)v);
	if (!buf || size < 2) {
		if (buf && size)
			buf[0] = '\0';
		return -1;
	}
	/* -(v + 1) + 1: INT64_MIN's magnitude without overflow. */
	n = tbx__fmt_u64(buf + 1, size - 1, (uint64_t)(-(v + 1)) + 1);
	if (n < 0) {
		buf[0] = '\0';
		return -1;
	}
	buf[0] = '-';
	return n + 1;
}
