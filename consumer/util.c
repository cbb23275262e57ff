/* Internal helpers: ids, clocks, error text, logging, crash points. */
#include "consumer/util.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uuid/uuid.h>

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

int tbx__same_file(const char *a, const char *b)
{
	struct stat sa, sb;

	if (strcmp(a, b) == 0)
		return 1;
	return stat(a, &sa) == 0 && stat(b, &sb) == 0 &&
	       sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t tbx__now_ms(void)
{
	return clock_ms(CLOCK_REALTIME);
}

int64_t tbx__mono_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

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

/* Logging: one line per call, written with a single write(2) so lines from
 * several threads or processes sharing stderr do not interleave. */
static int log_level = TBX_LOG_NOTICE;
static char log_tag[64];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

int tbx__log_level(const char *name)
{
	static const struct {
		const char *name;
		int level;
	} levels[] = {{"error", TBX_LOG_ERR},
		      {"warning", TBX_LOG_WARNING},
		      {"notice", TBX_LOG_NOTICE},
		      {"info", TBX_LOG_INFO},
		      {"debug", TBX_LOG_DEBUG}};

	for (size_t i = 0; name && i < sizeof(levels) / sizeof(levels[0]); i++)
		if (strcmp(levels[i].name, name) == 0)
			return levels[i].level;
	return TBX_LOG_NOTICE;
}

void tbx__log_setup(int level, const char *tag)
{
	pthread_mutex_lock(&log_lock);
	log_level = level;
	if (tag)
		tbx__strlcpy(log_tag, tag, sizeof(log_tag));
	pthread_mutex_unlock(&log_lock);
}

void tbx__log(int level, const char *fmt, ...)
{
	static const char *names[] = {"EMERG", "ALERT",	 "CRIT", "ERROR",
				      "WARN",  "NOTICE", "INFO", "DEBUG"};
	char line[1024];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n;

	if (level > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	pthread_mutex_lock(&log_lock);
	n = snprintf(line, sizeof(line),
		     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s%s%s[%d] ",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
		     names[level & 7], log_tag[0] ? " " : "", log_tag,
		     (int)getpid());
	pthread_mutex_unlock(&log_lock);
	if (n < 0 || (size_t)n >= sizeof(line))
		n = 0;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += m;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}

/*
 * Crash points.  TBX_CRASH_AT is read once, at the first point reached:
 * a comma-separated list of rules, each "NAME[:N]" (the N-th passage, by
 * default the first) or "NAME@P" (every passage with probability P, a
 * decimal in (0, 1]).  NAME is a point's name, a prefix followed by '*'
 * ("sweep.*") or "*" alone.  TBX_CRASH_SEED (decimal) seeds the random
 * draws; without it the seed comes from the process id and the clock, and
 * is logged.  A malformed variable ends the process with status 2: a test
 * that meant to crash must not pass because nothing crashed.
 */
enum { CRASH_RULES_MAX = 16 };

typedef struct crash_rule {
	char name[64];
	int prefix;	/* name ended in '*': compare only its length */
	long countdown; /* > 0: the n-th passage; 0: probability */
	double prob;
} crash_rule_t;

static pthread_once_t crash_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t crash_lock = PTHREAD_MUTEX_INITIALIZER;
static int crash_armed;
static crash_rule_t crash_rules[CRASH_RULES_MAX];
static size_t crash_rule_cnt;
static uint64_t crash_rng;

static void crash_bad(const char *env, const char *why)
{
	tbx__log(TBX_LOG_ERR, "TBX_CRASH_AT='%s': %s", env, why);
	_exit(2);
}

static void crash_parse_rule(const char *env, const char *rule, size_t len)
{
	crash_rule_t *r = &crash_rules[crash_rule_cnt];
	size_t name_len = strcspn(rule, ":@");
	char num[64], *end;

	if (name_len > len)
		name_len = len;
	if (name_len == 0)
		crash_bad(env, "a rule has an empty point name");
	if (name_len >= sizeof(r->name))
		crash_bad(env, "a point name is too long");
	if (crash_rule_cnt == CRASH_RULES_MAX)
		crash_bad(env, "too many rules (at most 16)");
	memcpy(r->name, rule, name_len);
	r->name[name_len] = '\0';
	if (r->name[name_len - 1] == '*') {
		r->name[--name_len] = '\0';
		r->prefix = 1;
	}
	if (strchr(r->name, '*'))
		crash_bad(env, "'*' may only end a point name");
	r->countdown = 1;
	if (name_len + (size_t)r->prefix < len) {
		size_t nlen = len - name_len - (size_t)r->prefix - 1;
		char kind = rule[name_len + (size_t)r->prefix];

		if (nlen == 0 || nlen >= sizeof(num))
			crash_bad(env,
				  "a rule has an empty or overlong number");
		memcpy(num, rule + len - nlen, nlen);
		num[nlen] = '\0';
		errno = 0;
		if (kind == ':') {
			r->countdown = strtol(num, &end, 10);
			if (errno || *end || r->countdown < 1)
				crash_bad(env, "N in NAME:N must be an integer "
					       ">= 1");
		} else {
			r->countdown = 0;
			r->prob = strtod(num, &end);
			if (errno || *end || !(r->prob > 0.0 && r->prob <= 1.0))
				crash_bad(env,
					  "P in NAME@P must be a number in "
					  "(0, 1]");
		}
	}
	crash_rule_cnt++;
}

static void crash_init(void)
{
	const char *env = getenv("TBX_CRASH_AT");
	const char *seed = getenv("TBX_CRASH_SEED");

	if (!env || !*env)
		return;
	for (const char *p = env;;) {
		size_t len = strcspn(p, ",");
		crash_parse_rule(env, p, len);
		if (!p[len])
			break;
		p += len + 1;
	}
	if (seed && *seed) {
		char *end;
		errno = 0;
		crash_rng = strtoull(seed, &end, 10);
		if (errno || *end)
			crash_bad(seed, "TBX_CRASH_SEED must be a decimal "
					"integer");
	} else {
		crash_rng = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL ^
			    (uint64_t)tbx__mono_ms();
		tbx__log(TBX_LOG_INFO, "crash points armed, seed %llu",
			 (unsigned long long)crash_rng);
	}
	if (!crash_rng)
		crash_rng = 1;
	crash_armed = 1;
}

/* xorshift64*: a uniform draw in [0, 1). */
static double crash_draw(void)
{
	crash_rng ^= crash_rng >> 12;
	crash_rng ^= crash_rng << 25;
	crash_rng ^= crash_rng >> 27;
	return (double)((crash_rng * 0x2545f4914f6cdd1dULL) >> 11) /
	       9007199254740992.0;
}

void tbx__crashpoints_arm(void)
{
	pthread_once(&crash_once, crash_init);
}

void tbx__crashpoint(const char *name)
{
	int die = 0;

	pthread_once(&crash_once, crash_init);
	if (!crash_armed)
		return;
	pthread_mutex_lock(&crash_lock);
	for (size_t i = 0; i < crash_rule_cnt && !die; i++) {
		crash_rule_t *r = &crash_rules[i];

		if (r->prefix ? strncmp(name, r->name, strlen(r->name)) != 0
			      : strcmp(name, r->name) != 0)
			continue;
		if (r->countdown > 0)
			die = --r->countdown == 0;
		else
			die = crash_draw() < r->prob;
	}
	pthread_mutex_unlock(&crash_lock);
	if (!die)
		return;
	tbx__log(TBX_LOG_NOTICE, "crash point %s reached: SIGKILL", name);
	kill(getpid(), SIGKILL);
	_exit(137);
}
