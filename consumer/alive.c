/* Tokens seen alive (consumer/alive.h). */
#include "consumer/alive.h"

#include <pthread.h>
#include <stdint.h>

static uint64_t slots[TBX__ALIVE_SLOTS]; /* 0: empty */
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

/* FNV-1a over the three strings, each with its terminating NUL, so that
 * ("ab", "c") and ("a", "bc") differ.  Never 0, the empty slot. */
static uint64_t fingerprint(const char *store_id, const char *group,
			    const char *token)
{
	const char *parts[3] = {store_id, group, token};
	uint64_t h = 14695981039346656037ull;

	for (int i = 0; i < 3; i++) {
		const unsigned char *p = (const unsigned char *)parts[i];

		for (; p && *p; p++)
			h = (h ^ *p) * 1099511628211ull;
		h = (h ^ 0) * 1099511628211ull;
	}
	return h ? h : 1;
}

void tbx__alive_note(const char *store_id, const char *group, const char *token)
{
	uint64_t h = fingerprint(store_id, group, token);

	pthread_mutex_lock(&slots_lock);
	slots[h % TBX__ALIVE_SLOTS] = h;
	pthread_mutex_unlock(&slots_lock);
}

int tbx__alive_seen(const char *store_id, const char *group, const char *token)
{
	uint64_t h = fingerprint(store_id, group, token);
	int seen;

	pthread_mutex_lock(&slots_lock);
	seen = slots[h % TBX__ALIVE_SLOTS] == h;
	pthread_mutex_unlock(&slots_lock);
	return seen;
}
