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

/* 1 for the hexadecimal digits, either case. */
static const unsigned char hex_digit[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1,
    ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1, ['a'] = 1, ['b'] = 1,
    ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['A'] = 1, ['B'] = 1,
    ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1,
};

/* The lower-case form of each hexadecimal digit, 0 for every other byte. */
static const char hex_lower[256] = {
    ['0'] = '0', ['1'] = '1', ['2'] = '2', ['3'] = '3', ['4'] = '4',
    ['5'] = '5', ['6'] = '6', ['7'] = '7', ['8'] = '8', ['9'] = '9',
    ['a'] = 'a', ['b'] = 'b', ['c'] = 'c', ['d'] = 'd', ['e'] = 'e',
    ['f'] = 'f', ['A'] = 'a', ['B'] = 'b', ['C'] = 'c', ['D'] = 'd',
    ['E'] = 'e', ['F'] = 'f',
};

int tbx__uuid_lower(char dst[TBX_UUID_LEN + 1], const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	unsigned bad = 0;

	if (!s || len != TBX_UUID_LEN || s[8] != '-' || s[13] != '-' ||
	    s[18] != '-' || s[23] != '-')
		return 0;
	/* One pass: the check and the copy; a byte that is no digit reads
	 * as 0 and marks the whole text bad. */
	for (size_t i = 0; i < TBX_UUID_LEN; i++) {
		char c = hex_lower[u[i]];

		if (i == 8 || i == 13 || i == 18 || i == 23)
			c = '-';
		bad |= c == 0;
		dst[i] = c;
	}
	dst[TBX_UUID_LEN] = '\0';
	return !bad;
}

/* Checked for every id and token of every record, several times: a
 * table lookup per digit, the dashes where the layout has them. */
int tbx__is_uuid(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	unsigned bad = 0;

	if (!s || len != TBX_UUID_LEN || s[8] != '-' || s[13] != '-' ||
	    s[18] != '-' || s[23] != '-')
		return 0;
	for (size_t i = 0; i < 8; i++)
		bad |= hex_digit[u[i]] ^ 1u;
	for (size_t i = 9; i < 13; i++)
		bad |= hex_digit[u[i]] ^ 1u;
	for (size_t i = 14; i < 18; i++)
		bad |= hex_digit[u[i]] ^ 1u;
	for (size_t i = 19; i < 23; i++)
		bad |= hex_digit[u[i]] ^ 1u;
	for (size_t i = 24; i < TBX_UUID_LEN; i++)
		bad |= hex_digit[u[i]] ^ 1u;
	return !bad;
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
