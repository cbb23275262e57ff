/*
 * Strings and buffers: bounded copies, duplicates and error text.
 */
#ifndef TBX_BASE_STR_H
#define TBX_BASE_STR_H

#include <stddef.h>
#include <stdint.h>

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

/** Longest text tbx__fmt_u64()/tbx__fmt_i64() write, with its NUL. */
#define TBX_FMT_INT_MAX 21
/** Writes @p v in decimal, as snprintf's "%" PRIu64 does, into @p buf of
 *  @p size bytes, always terminated.  For the per-record paths, where
 *  snprintf's format parsing is most of what formatting a number costs.
 *  @returns the length written, or -1 (buf empty) if it does not fit. */
int tbx__fmt_u64(char *buf, size_t size, uint64_t v);
/** The same as "%" PRId64 (a leading '-' for negatives). */
int tbx__fmt_i64(char *buf, size_t size, int64_t v);

#endif
