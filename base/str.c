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
