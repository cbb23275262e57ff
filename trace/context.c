/*
 * W3C Trace Context values, ids and the sampler (see context.h).
 */
#include "trace/context.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/str.h"
#include "tokenbox/tokenbox.h"

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1; /* upper case is invalid too */
}

/* @p n bytes from 2n lower-case hex digits. */
static int unhex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* Two hex digits per byte value: one lookup and a two-byte copy per
 * byte, the digits of every traceparent sent. */
static const char hex_pairs[256][2] = {
#define D(x) (char)((x) < 10 ? '0' + (x) : 'a' + (x)-10)
#define P(h, l)                                                                \
	{                                                                      \
		D(h), D(l)                                                     \
	}
#define R(h)                                                                   \
	P(h, 0), P(h, 1), P(h, 2), P(h, 3), P(h, 4), P(h, 5), P(h, 6),         \
	    P(h, 7), P(h, 8), P(h, 9), P(h, 10), P(h, 11), P(h, 12), P(h, 13), \
	    P(h, 14), P(h, 15)
    R(0), R(1), R(2),  R(3),  R(4),  R(5),  R(6),  R(7),
    R(8), R(9), R(10), R(11), R(12), R(13), R(14), R(15),
#undef R
#undef P
#undef D
};

void tbx__hex(const uint8_t *bytes, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		memcpy(out + 2 * i, hex_pairs[bytes[i]], 2);
	out[2 * n] = '\0';
}

int tbx__id_is_zero(const uint8_t *id, size_t n)
{
	uint64_t w, any = 0;
	size_t i = 0;

	/* Ids are 8 or 16 bytes: a word at a time. */
	for (; i + 8 <= n; i += 8) {
		memcpy(&w, id + i, 8);
		any |= w;
	}
	for (; i < n; i++)
		any |= id[i];
	return any == 0;
}

static int is_ows(char c)
{
	return c == ' ' || c == '\t';
}

int tbx__traceparent_parse(const char *s, size_t len, tbx__trace_ctx_t *out)
{
	tbx__trace_ctx_t ctx;
	uint8_t version, flags;

	while (len && is_ows(s[0])) {
		s++;
		len--;
	}
	while (len && is_ows(s[len - 1]))
		len--;
	if (len < TBX_TRACEPARENT_LEN)
		return -1;
	if (unhex(s, &version, 1) != 0 || version == 0xff)
		return -1;
	/* Version 00 is exactly 55 characters; a later version may append
	 * fields after a '-', and is read as 00 by what 00 defines. */
	if (version == 0
		? len != TBX_TRACEPARENT_LEN
		: len > TBX_TRACEPARENT_LEN && s[TBX_TRACEPARENT_LEN] != '-')
		return -1;
	if (s[2] != '-' || s[35] != '-' || s[52] != '-')
		return -1;
	if (unhex(s + 3, ctx.trace_id, TBX_TRACE_ID_SIZE) != 0 ||
	    unhex(s + 36, ctx.span_id, TBX_SPAN_ID_SIZE) != 0 ||
	    unhex(s + 53, &flags, 1) != 0)
		return -1;
	if (tbx__id_is_zero(ctx.trace_id, TBX_TRACE_ID_SIZE) ||
	    tbx__id_is_zero(ctx.span_id, TBX_SPAN_ID_SIZE))
		return -1;
	ctx.flags = flags & TBX_TRACE_FLAG_SAMPLED;
	*out = ctx;
	return 0;
}

void tbx__traceparent_format(const tbx__trace_ctx_t *ctx,
			     char out[TBX_TRACEPARENT_LEN + 1])
{
	uint8_t flags = ctx->flags & TBX_TRACE_FLAG_SAMPLED;

	memcpy(out, "00-", 3);
	tbx__hex(ctx->trace_id, TBX_TRACE_ID_SIZE, out + 3);
	out[35] = '-';
	tbx__hex(ctx->span_id, TBX_SPAN_ID_SIZE, out + 36);
	out[52] = '-';
	tbx__hex(&flags, 1, out + 53);
}

size_t tbx__stored_ctx_encode(const tbx__trace_ctx_t *ctx,
			      const uint8_t *writer,
			      uint8_t out[TBX_STORED_CTX_WRITER_LEN])
{
	memcpy(out, ctx->trace_id, TBX_TRACE_ID_SIZE);
	memcpy(out + TBX_TRACE_ID_SIZE, ctx->span_id, TBX_SPAN_ID_SIZE);
	out[TBX_STORED_CTX_LEN - 1] = ctx->flags & TBX_TRACE_FLAG_SAMPLED;
	if (!writer)
		return TBX_STORED_CTX_LEN;
	memcpy(out + TBX_STORED_CTX_LEN, writer, TBX_SPAN_ID_SIZE);
	return TBX_STORED_CTX_WRITER_LEN;
}

int tbx__stored_ctx_decode(const void *val, size_t len, tbx__stored_ctx_t *out)
{
	const uint8_t *v = val;

	if (!v ||
	    (len != TBX_STORED_CTX_LEN && len != TBX_STORED_CTX_WRITER_LEN) ||
	    v[TBX_STORED_CTX_LEN - 1] & ~TBX_TRACE_FLAG_SAMPLED ||
	    tbx__id_is_zero(v, TBX_TRACE_ID_SIZE) ||
	    tbx__id_is_zero(v + TBX_TRACE_ID_SIZE, TBX_SPAN_ID_SIZE))
		return -1;
	memcpy(out->ctx.trace_id, v, TBX_TRACE_ID_SIZE);
	memcpy(out->ctx.span_id, v + TBX_TRACE_ID_SIZE, TBX_SPAN_ID_SIZE);
	out->ctx.flags = v[TBX_STORED_CTX_LEN - 1];
	out->has_writer = len == TBX_STORED_CTX_WRITER_LEN;
	if (out->has_writer)
		memcpy(out->writer, v + TBX_STORED_CTX_LEN, TBX_SPAN_ID_SIZE);
	else
		memset(out->writer, 0, TBX_SPAN_ID_SIZE);
	return 0;
}

/* tracestate's grammar (W3C Trace Context level 1, section 3.3.1). */
static int is_lcalpha(char c)
{
	return c >= 'a' && c <= 'z';
}
static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}
static int is_keychar(char c)
{
	return is_lcalpha(c) || is_digit(c) || c == '_' || c == '-' ||
	       c == '*' || c == '/';
}
/* nblk-chr: printable ASCII but ',' and '='. */
static int is_nblk(char c)
{
	return c >= 0x21 && c <= 0x7e && c != ',' && c != '=';
}

static int key_ok(const char *k, size_t n)
{
	const char *at = memchr(k, '@', n);

	if (!at) { /* simple-key: lcalpha 0*255(keychar) */
		if (n < 1 || n > 256 || !is_lcalpha(k[0]))
			return 0;
		for (size_t i = 1; i < n; i++)
			if (!is_keychar(k[i]))
				return 0;
		return 1;
	}
	/* tenant-id "@" system-id */
	size_t tn = (size_t)(at - k), sn = n - tn - 1;
	if (tn < 1 || tn > 241 || sn < 1 || sn > 14)
		return 0;
	if (!is_lcalpha(k[0]) && !is_digit(k[0]))
		return 0;
	for (size_t i = 1; i < tn; i++)
		if (!is_keychar(k[i]))
			return 0;
	if (!is_lcalpha(at[1]))
		return 0;
	for (size_t i = 1; i < sn; i++)
		if (!is_keychar(at[1 + i]))
			return 0;
	return 1;
}

/* value = 0*255(chr) nblk-chr, chr = %x20 / nblk-chr */
static int value_ok(const char *v, size_t n)
{
	if (n < 1 || n > 256 || !is_nblk(v[n - 1]))
		return 0;
	for (size_t i = 0; i + 1 < n; i++)
		if (v[i] != ' ' && !is_nblk(v[i]))
			return 0;
	return 1;
}

typedef struct member {
	const char *p;
	size_t len;  /* "key=value" */
	size_t klen; /* key */
	int keep;
} member_t;

int tbx__tracestate_normalize(const char *s, size_t len, char *out,
			      size_t out_size)
{
	member_t m[TBX_TRACESTATE_MEMBERS];
	size_t cnt = 0, total = 0, pos = 0, w = 0;

	if (out_size < TBX_TRACESTATE_MAX + 1)
		return -1;
	out[0] = '\0';
	while (pos <= len) {
		size_t end = pos, a, b;
		const char *eq;

		while (end < len && s[end] != ',')
			end++;
		a = pos;
		b = end;
		while (a < b && is_ows(s[a]))
			a++;
		while (b > a && is_ows(s[b - 1]))
			b--;
		pos = end + 1;
		if (a == b)
			continue; /* an empty member */
		if (cnt == TBX_TRACESTATE_MEMBERS)
			return -1;
		eq = memchr(s + a, '=', b - a);
		if (!eq)
			return -1;
		m[cnt].p = s + a;
		m[cnt].len = b - a;
		m[cnt].klen = (size_t)(eq - (s + a));
		m[cnt].keep = 1;
		if (!key_ok(m[cnt].p, m[cnt].klen) ||
		    !value_ok(eq + 1, m[cnt].len - m[cnt].klen - 1))
			return -1;
		for (size_t i = 0; i < cnt; i++)
			if (m[i].klen == m[cnt].klen &&
			    memcmp(m[i].p, m[cnt].p, m[i].klen) == 0)
				return -1; /* a key twice */
		total += m[cnt].len + (cnt > 0);
		cnt++;
	}
	/* Too long: members over 128 characters go first, then members
	 * from the end (section 3.3.1.5). */
	for (size_t i = cnt; i-- > 0 && total > TBX_TRACESTATE_MAX;) {
		if (m[i].len > 128) {
			m[i].keep = 0;
			total -= m[i].len + 1;
		}
	}
	for (size_t i = cnt; i-- > 0 && total > TBX_TRACESTATE_MAX;) {
		if (m[i].keep) {
			m[i].keep = 0;
			total -= m[i].len + 1;
		}
	}
	for (size_t i = 0; i < cnt; i++) {
		if (!m[i].keep)
			continue;
		if (w)
			out[w++] = ',';
		memcpy(out + w, m[i].p, m[i].len);
		w += m[i].len;
	}
	out[w] = '\0';
	return (int)w;
}

/* Ids: xoshiro256** per thread, seeded from getrandom(); a child of
 * fork() seeds anew, or it would repeat its parent's ids. */
static unsigned long fork_gen = 1;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
	fork_gen++;
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, on_fork_child);
}

typedef struct rng {
	uint64_t s[4];
	unsigned long gen; /* fork_gen when seeded; 0: never */
} rng_t;

static _Thread_local rng_t rng;

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void rng_seed(rng_t *r)
{
	uint64_t seed[4] = {0};
	size_t got = 0;

	pthread_once(&atfork_once, register_atfork);
	while (got < sizeof(seed)) {
		ssize_t n =
		    getrandom((char *)seed + got, sizeof(seed) - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got < sizeof(seed)) {
		/* No getrandom(): time, pid and an address, mixed. */
		struct timespec ts;
		uint64_t x;
		clock_gettime(CLOCK_REALTIME, &ts);
		x = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^
		    (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)r;
		for (int i = 0; i < 4; i++)
			seed[i] ^= splitmix(&x);
	}
	if (!(seed[0] | seed[1] | seed[2] | seed[3]))
		seed[0] = 1;
	memcpy(r->s, seed, sizeof(seed));
	r->gen = fork_gen;
}

static uint64_t rng_next(void)
{
	uint64_t *s = rng.s, result, t;

	if (rng.gen != fork_gen)
		rng_seed(&rng);
	result = rotl(s[1] * 5, 7) * 9;
	t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

/* W3C Trace Context asks ids to be random, not secret: a word of the
 * generator per 8 bytes, drawn again in the unlikely case of all zero
 * (an invalid id). */
void tbx__trace_id_new(uint8_t id[TBX_TRACE_ID_SIZE])
{
	uint64_t a, b;

	do {
		a = rng_next();
		b = rng_next();
	} while (!(a | b));
	memcpy(id, &a, 8);
	memcpy(id + 8, &b, 8);
}

void tbx__span_id_new(uint8_t id[TBX_SPAN_ID_SIZE])
{
	uint64_t a;

	do
		a = rng_next();
	while (!a);
	memcpy(id, &a, 8);
}

/* 2^56: the rightmost 7 bytes of a trace id. */
#define RANDOM_SPAN 72057594037927936.0

static int parse_ratio(const char *arg, double *out)
{
	char *end;
	double v;

	if (!arg || !*arg) {
		*out = 1.0;
		return 0;
	}
	/* Decimal only: strtod would take "nan", "inf" and hex too. */
	for (const char *p = arg; *p; p++)
		if (!is_digit(*p) && !strchr(".eE+-", *p))
			return -1;
	v = strtod(arg, &end);
	if (*end || end == arg || !isfinite(v) || v < 0.0 || v > 1.0)
		return -1;
	*out = v;
	return 0;
}

int tbx__sampler_init(tbx__sampler_t *s, const char *name, const char *arg,
		      char *errstr, size_t errstr_size)
{
	static const struct {
		const char *name;
		tbx__sampler_kind_t kind;
	} names[] = {
	    {"always_on", TBX_SAMPLER_ALWAYS_ON},
	    {"always_off", TBX_SAMPLER_ALWAYS_OFF},
	    {"traceidratio", TBX_SAMPLER_RATIO},
	    {"parentbased_always_on", TBX_SAMPLER_PARENT_ALWAYS_ON},
	    {"parentbased_always_off", TBX_SAMPLER_PARENT_ALWAYS_OFF},
	    {"parentbased_traceidratio", TBX_SAMPLER_PARENT_RATIO},
	};
	size_t i;

	if (!name || !*name)
		name = "parentbased_always_on";
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(name, names[i].name) == 0)
			break;
	if (i == sizeof(names) / sizeof(names[0]))
		return tbx__seterr(
		    errstr, errstr_size, TBX_ECONF,
		    "OTEL_TRACES_SAMPLER: '%s' is not one of always_on, "
		    "always_off, traceidratio, parentbased_always_on, "
		    "parentbased_always_off, parentbased_traceidratio",
		    name);
	s->kind = names[i].kind;
	s->ratio = 1.0;
	if (s->kind == TBX_SAMPLER_RATIO ||
	    s->kind == TBX_SAMPLER_PARENT_RATIO) {
		if (parse_ratio(arg, &s->ratio) != 0)
			return tbx__seterr(errstr, errstr_size, TBX_ECONF,
					   "OTEL_TRACES_SAMPLER_ARG: '%s' is "
					   "not a ratio from 0 to 1 (a decimal "
					   "number, e.g. 0.25)",
					   arg);
	}
	s->threshold = (uint64_t)((1.0 - s->ratio) * RANDOM_SPAN);
	if (s->ratio <= 0.0)
		s->threshold = (uint64_t)RANDOM_SPAN;
	return TBX_OK;
}

static int by_ratio(const tbx__sampler_t *s,
		    const uint8_t trace_id[TBX_TRACE_ID_SIZE])
{
	uint64_t r = 0;

	for (int i = 9; i < TBX_TRACE_ID_SIZE; i++)
		r = r << 8 | trace_id[i];
	return r >= s->threshold;
}

int tbx__sampler_decide(const tbx__sampler_t *s,
			const uint8_t trace_id[TBX_TRACE_ID_SIZE],
			const tbx__trace_ctx_t *parent)
{
	switch (s->kind) {
	case TBX_SAMPLER_ALWAYS_ON:
		return 1;
	case TBX_SAMPLER_ALWAYS_OFF:
		return 0;
	case TBX_SAMPLER_RATIO:
		return by_ratio(s, trace_id);
	case TBX_SAMPLER_PARENT_ALWAYS_ON:
		return parent ? parent->flags & TBX_TRACE_FLAG_SAMPLED : 1;
	case TBX_SAMPLER_PARENT_ALWAYS_OFF:
		return parent ? parent->flags & TBX_TRACE_FLAG_SAMPLED : 0;
	case TBX_SAMPLER_PARENT_RATIO:
		return parent ? parent->flags & TBX_TRACE_FLAG_SAMPLED
			      : by_ratio(s, trace_id);
	}
	return 0;
}
