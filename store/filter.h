/*
 * What the read side of the stores' interfaces (outbox/outbox.h,
 * tokens/tokens.h) takes and hands back: a filter for listings, and the
 * callback a listing calls per record.  Backend-neutral.
 */
#ifndef TBX_STORE_FILTER_H
#define TBX_STORE_FILTER_H

#include <stddef.h>
#include <stdint.h>

/** Which records a listing takes. */
typedef struct tbx__filter {
	const char *const *groups; /**< only these groups; none: every group */
	size_t group_cnt;
	int64_t created_max; /**< only records created at or before (ms) */
	int64_t limit;	     /**< at most this many; 0: all */
} tbx__filter_t;

/** Every record: every group, any time, no limit. */
#define TBX_FILTER_ALL                                                         \
	{                                                                      \
		NULL, 0, INT64_MAX, 0                                          \
	}

/** Called per text value (a group name, an id); non-zero stops. */
typedef int (*tbx__str_fn)(void *opaque, const char *s);

/**
 * A summary per group: @p n's meaning is the operation's; @p ms the
 * oldest (or latest, as the operation says) creation time.
 */
typedef struct tbx__grp_sum {
	const char *grp;
	int64_t n[4];
	int64_t ms;
} tbx__grp_sum_t;

typedef int (*tbx__grp_sum_fn)(void *opaque, const tbx__grp_sum_t *sum);

#endif
