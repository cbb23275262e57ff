/* Ids and names (base/ids.h). */
#include "base/ids.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <uuid/uuid.h>

#include "base/clock.h"

/*
 * Version 7 UUIDs (RFC 9562): 48 bits of Unix time in milliseconds, then
 * 74 random bits from a per-thread pool of getrandom() bytes.  Time first
 * makes ids and tokens minted close together sort close together: the
 * B-tree pages an insert or a delete touches are few and hot, where
 * random (version 4) keys dirty a page per key.  The random bits keep
 * ids unique across processes and hosts; they are not secrets.  libuuid
 * formats them.  The pool: libuuid's uuid_generate_random() makes five
 * system calls per UUID (getrandom, and getpid, getppid, getuid, gettid
 * to reseed random()), and the protocol
 * takes three UUIDs per message; the pool makes it one call per 16 UUIDs.
 * A forked child must not reuse its parent's pool (both would hand out the
 * same ids), so the pool is emptied in the child at fork.
 */
static _Thread_local unsigned char uuid_pool[256];
static _Thread_local size_t uuid_pool_left;
static pthread_once_t uuid_once = PTHREAD_ONCE_INIT;

static void uuid_pool_forget(void)
{
	uuid_pool_left = 0;
}

static void uuid_atfork(void)
{
	pthread_atfork(NULL, NULL, uuid_pool_forget);
}

static int uuid_pool_fill(void)
{
	size_t got = 0;

	while (got < sizeof(uuid_pool)) {
		ssize_t n =
		    getrandom(uuid_pool + got, sizeof(uuid_pool) - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	uuid_pool_left = sizeof(uuid_pool);
	return 0;
}

void tbx__uuid(char out[TBX_UUID_LEN + 1])
{
	uint64_t ms = (uint64_t)tbx__now_ms();
	uuid_t u;

	pthread_once(&uuid_once, uuid_atfork);
	if (uuid_pool_left < sizeof(u) && uuid_pool_fill() != 0) {
		uuid_generate_random(u); /* no getrandom(): libuuid's way */
	} else {
		memcpy(u, uuid_pool + sizeof(uuid_pool) - uuid_pool_left,
		       sizeof(u));
		uuid_pool_left -= sizeof(u);
	}
	/* Version 7 (RFC 9562): the first 48 bits are the Unix time in
	 * milliseconds, big-endian, the other 74 random. */
	for (int i = 5; i >= 0; i--, ms >>= 8)
		u[i] = (unsigned char)(ms & 0xff);
	u[6] = (unsigned char)((u[6] & 0x0f) | 0x70); /* version 7 */
	u[8] = (unsigned char)((u[8] & 0x3f) | 0x80); /* RFC 9562 variant */
	uuid_unparse_lower(u, out);
}

int tbx__is_uuid(const char *s, size_t len)
{
	if (!s || len != TBX_UUID_LEN)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return 0;
		} else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
			     (c >= 'A' && c <= 'F'))) {
			return 0;
		}
	}
	return 1;
}

int tbx__topic_valid(const char *topic)
{
	size_t len = topic ? strlen(topic) : 0;

	if (len == 0 || len > TBX_TOPIC_MAX || strcmp(topic, ".") == 0 ||
	    strcmp(topic, "..") == 0)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = topic[i];
		if (!isalnum((unsigned char)c) && c != '.' && c != '_' &&
		    c != '-')
			return 0;
	}
	return 1;
}
