/*
 * Strings and buffers: bounded copies, duplicates and error text.
 */
#ifndef TBX_BASE_STR_H
#define TBX_BASE_STR_H

#include <stddef.h>

/** snprintf into @p buf that tolerates buf == NULL / size == 0.
 *  @returns @p err, so callers can `return tbx__seterr(...)`. */
int tbx__seterr(char *buf, size_t size, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** Copies @p s into a new allocation; NULL in, NULL out. */
char *tbx__strdup(const char *s);
/** Copies @p len bytes into a new allocation (len 0 -> non-NULL 1 byte). */
void *tbx__memdup(const void *p, size_t len);
/** Bounded copy that always terminates; @returns 0, or -1 if truncated. */
int tbx__strlcpy(char *dst, const char *src, size_t size);

#endif
