/* Crash points (base/crash.h). */
#include "base/crash.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"

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
