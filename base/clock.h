/*
 * Clocks in milliseconds.
 */
#ifndef TBX_BASE_CLOCK_H
#define TBX_BASE_CLOCK_H

#include <stdint.h>

/** Wall clock in ms since the epoch (for ages shown to people only). */
int64_t tbx__now_ms(void);
/** Monotonic clock in ms (for timeouts and backoff). */
int64_t tbx__mono_ms(void);

#endif
