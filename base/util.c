/* Internal helpers: ids, clocks, error text, logging, crash points. */
#include "base/util.h"

#include <ctype.h>
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
static int log_format = -1; /* -1: not chosen yet, auto at first use */

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

/* systemd sets JOURNAL_STREAM=<dev>:<ino> for a service whose standard
 * error is connected to the journal; a process whose stderr was
 * redirected elsewhere since has another device or inode. */
static int stderr_is_journal(void)
{
	const char *env = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char tail;

	if (!env || sscanf(env, "%llu:%llu%c", &dev, &ino, &tail) != 2)
		return 0;
	if (fstat(STDERR_FILENO, &st) != 0)
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

int tbx__log_format(const char *name)
{
	if (name && strcmp(name, "text") == 0)
		return TBX_LOGF_TEXT;
	if (name && strcmp(name, "journal") == 0)
		return TBX_LOGF_JOURNAL;
	if (name && strcmp(name, "json") == 0)
		return TBX_LOGF_JSON;
	return stderr_is_journal() ? TBX_LOGF_JOURNAL : TBX_LOGF_TEXT;
}

void tbx__log_set_format(int format)
{
	pthread_mutex_lock(&log_lock);
	log_format = format;
	pthread_mutex_unlock(&log_lock);
}

int tbx__log_get_format(void)
{
	int f;

	pthread_mutex_lock(&log_lock);
	if (log_format < 0)
		log_format = tbx__log_format(NULL);
	f = log_format;
	pthread_mutex_unlock(&log_lock);
	return f;
}

void tbx__log_setup(int level, const char *tag)
{
	pthread_mutex_lock(&log_lock);
	log_level = level;
	if (tag)
		tbx__strlcpy(log_tag, tag, sizeof(log_tag));
	pthread_mutex_unlock(&log_lock);
}

void tbx__log_configure(const tbx_conf_t *conf, const char *tag)
{
	static const char *const debug_keys[] = {
	    "kafka.debug", "kafka.consumer.debug", "kafka.producer.debug"};
	int level = tbx__log_level(tbx_conf_get(conf, "log.level"));

	/* librdkafka's debug contexts log at debug level: asking for them
	 * and filtering them out would show nothing. */
	for (size_t i = 0; i < sizeof(debug_keys) / sizeof(debug_keys[0]);
	     i++) {
		const char *v = tbx_conf_get(conf, debug_keys[i]);
		if (v && *v)
			level = TBX_LOG_DEBUG;
	}
	tbx__log_setup(level, tag);
	tbx__log_set_format(tbx__log_format(tbx_conf_get(conf, "log.format")));
}

static const char *const level_names[] = {"EMERG", "ALERT",  "CRIT", "ERROR",
					  "WARN",  "NOTICE", "INFO", "DEBUG"};
static const char *const level_json[] = {"emerg",   "alert",  "crit", "error",
					 "warning", "notice", "info", "debug"};

/* A growable line. */
static void put(char **b, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (!*b)
		return;
	if (*len + n + 2 > *cap) {
		size_t c = (*cap + n + 2) * 2;
		char *g = realloc(*b, c);
		if (!g) {
			free(*b);
			*b = NULL;
			return;
		}
		*b = g;
		*cap = c;
	}
	memcpy(*b + *len, s, n);
	*len += n;
}

static void puts_(char **b, size_t *len, size_t *cap, const char *s)
{
	put(b, len, cap, s, strlen(s));
}

/* Appends @p s to the line as a JSON string, escaped. */
static void json_str(char **b, size_t *len, size_t *cap, const char *s)
{
	char esc[8];

	puts_(b, len, cap, "\"");
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			esc[0] = '\\';
			esc[1] = (char)*p;
			put(b, len, cap, esc, 2);
		} else if (*p < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", *p);
			puts_(b, len, cap, esc);
		} else {
			put(b, len, cap, (const char *)p, 1);
		}
	}
	puts_(b, len, cap, "\"");
}

/* Writes one line: @p msg, or (@p what and the JSON object @p json). */
static void log_emit(int level, const char *msg, const char *what,
		     const char *json)
{
	size_t len = 0, cap = 256 + strlen(msg) + (json ? strlen(json) : 0);
	char *b = malloc(cap), head[160], tag[64];
	int format = tbx__log_get_format();
	struct timespec ts;
	struct tm tm;

	if (!b)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	pthread_mutex_lock(&log_lock);
	memcpy(tag, log_tag, sizeof(tag));
	pthread_mutex_unlock(&log_lock);
	level &= 7;
	if (format == TBX_LOGF_JSON) {
		snprintf(head, sizeof(head),
			 "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\","
			 "\"level\":\"%s\",\"pid\":%d,\"tag\":",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
			 tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
			 level_json[level], (int)getpid());
		puts_(&b, &len, &cap, head);
		json_str(&b, &len, &cap, tag);
		puts_(&b, &len, &cap, ",\"msg\":");
		json_str(&b, &len, &cap, what ? what : msg);
		if (what) {
			puts_(&b, &len, &cap, ",");
			json_str(&b, &len, &cap, what);
			puts_(&b, &len, &cap, ":");
			puts_(&b, &len, &cap, json);
		}
		puts_(&b, &len, &cap, "}");
	} else {
		if (format == TBX_LOGF_JOURNAL)
			/* journald takes the <N> prefix as the priority and
			 * stamps the time itself. */
			snprintf(head, sizeof(head), "<%d>%s%s", level, tag,
				 tag[0] ? ": " : "");
		else
			snprintf(
			    head, sizeof(head),
			    "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s[%d] ",
			    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
			    tm.tm_hour, tm.tm_min, tm.tm_sec,
			    ts.tv_nsec / 1000000, level_names[level], tag,
			    (int)getpid());
		puts_(&b, &len, &cap, head);
		if (what) {
			puts_(&b, &len, &cap, what);
			puts_(&b, &len, &cap, " ");
			puts_(&b, &len, &cap, json);
		} else {
			/* One record per line: a message's own newlines
			 * would start unprefixed lines. */
			size_t from = len;
			puts_(&b, &len, &cap, msg);
			for (size_t i = from; b && i < len; i++)
				if (b[i] == '\n')
					b[i] = ' ';
		}
	}
	puts_(&b, &len, &cap, "\n");
	if (b) {
		ssize_t w = write(STDERR_FILENO, b, len);
		(void)w; /* nothing to do about a lost log line */
	}
	free(b);
}

void tbx__log(int level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_emit(level, msg, NULL, NULL);
}

void tbx__log_object(int level, const char *what, const char *json)
{
	log_emit(level, "", what, json);
}

int tbx__log_enabled(int level)
{
	return level <= log_level;
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

void tbx__crashpoints_rearm(void)
{
	pthread_once(&crash_once, crash_init);
	pthread_mutex_lock(&crash_lock);
	crash_armed = 0;
	crash_rule_cnt = 0;
	memset(crash_rules, 0, sizeof(crash_rules));
	crash_init();
	pthread_mutex_unlock(&crash_lock);
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
