/*
 * W3C Trace Context: traceparent parsed and written by the rules of the
 * spec, tracestate checked and cut to its bound, ids random and never
 * repeated by a forked child, and the samplers of OTEL_TRACES_SAMPLER.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tokenbox/tokenbox.h"
#include "trace/context.h"

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static int parse(const char *s, tbx__trace_ctx_t *ctx)
{
	return tbx__traceparent_parse(s, strlen(s), ctx);
}

Test(traceparent, a_valid_value_round_trips)
{
	tbx__trace_ctx_t ctx;
	char out[TBX_TRACEPARENT_LEN + 1];
	static const uint8_t tid[16] = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3,
					0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d,
					0x0e, 0x0e, 0x47, 0x36};

	cr_assert_eq(parse(TP, &ctx), 0);
	cr_expect_arr_eq(ctx.trace_id, tid, 16);
	cr_expect_eq(ctx.span_id[0], 0x00);
	cr_expect_eq(ctx.span_id[7], 0xb7);
	cr_expect_eq(ctx.flags, TBX_TRACE_FLAG_SAMPLED);
	tbx__traceparent_format(&ctx, out);
	cr_expect_str_eq(out, TP);
}

Test(traceparent, what_the_spec_calls_invalid_is_refused)
{
	static const char *const bad[] = {
	    /* version ff */
	    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	    /* upper-case hex, anywhere */
	    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
	    "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
	    /* all-zero ids */
	    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
	    /* lengths of version 00 */
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
	    "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
	    /* separators and digits */
	    "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
	    "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
	    "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	    /* a later version: the 56th character must be '-' */
	    "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.x",
	    "",
	    "00",
	};
	tbx__trace_ctx_t ctx;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(parse(bad[i], &ctx), -1, "accepted '%s'", bad[i]);
	/* A NUL inside the value is a byte like any other: invalid. */
	cr_expect_eq(tbx__traceparent_parse(TP "\0", sizeof(TP), &ctx), -1);
}

Test(traceparent, a_later_version_is_read_by_what_00_defines)
{
	tbx__trace_ctx_t ctx;
	char out[TBX_TRACEPARENT_LEN + 1];

	cr_assert_eq(parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-"
			   "00f067aa0ba902b7-01-what-the-future-will-be-like",
			   &ctx),
		     0);
	tbx__traceparent_format(&ctx, out);
	cr_expect_str_eq(out, TP, "written as version 00");
	cr_expect_eq(parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-"
			   "00f067aa0ba902b7-01",
			   &ctx),
		     0);
}

Test(traceparent, unknown_flags_are_not_passed_on_and_ows_is_ignored)
{
	tbx__trace_ctx_t ctx;
	char out[TBX_TRACEPARENT_LEN + 1];

	cr_assert_eq(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-"
			   "00f067aa0ba902b7-ff",
			   &ctx),
		     0);
	cr_expect_eq(ctx.flags, TBX_TRACE_FLAG_SAMPLED);
	cr_assert_eq(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-"
			   "00f067aa0ba902b7-fe",
			   &ctx),
		     0);
	cr_expect_eq(ctx.flags, 0);
	tbx__traceparent_format(&ctx, out);
	cr_expect_str_eq(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-"
			      "00f067aa0ba902b7-00");
	cr_expect_eq(parse(" \t" TP "\t ", &ctx), 0);
}

static int norm(const char *in, char *out)
{
	return tbx__tracestate_normalize(in, strlen(in), out,
					 TBX_TRACESTATE_MAX + 1);
}

Test(tracestate, valid_lists_are_normalised)
{
	char out[TBX_TRACESTATE_MAX + 1];

	cr_expect_eq(norm("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", out), 39);
	cr_expect_str_eq(out, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
	cr_expect_gt(norm(" a=1 ,\t, b=2 x ,", out), 0);
	cr_expect_str_eq(out, "a=1,b=2 x", "OWS and empty members go");
	cr_expect_eq(norm("", out), 0);
	cr_expect_str_eq(out, "");
	cr_expect_eq(norm(" , ,", out), 0);
	cr_expect_gt(norm("tenant1@sys=v,0t@s9_-*/=v", out), 0);
	cr_expect_gt(norm("a_-*/9=v", out), 0);
	cr_expect_gt(norm("k= leading space ok", out), 0);
}

Test(tracestate, what_the_grammar_refuses_discards_the_whole_value)
{
	char out[TBX_TRACESTATE_MAX + 1], big[600];
	static const char *const bad[] = {
	    "Rojo=1",		   /* upper case key */
	    "1abc=1",		   /* a simple key starts with a letter */
	    "a=1,a=2",		   /* a key twice */
	    "a",		   /* no '=' */
	    "a=",		   /* empty value */
	    "a=b=c",		   /* '=' in the value */
	    "a=b\x01",		   /* control character */
	    "a=b\xc3\xa9",	   /* not ASCII */
	    "t@=1",		   /* empty system id */
	    "@s=1",		   /* empty tenant id */
	    "t@S=1",		   /* upper case system id */
	    "t@s123456789abcde=1", /* system id of 15 */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(norm(bad[i], out), -1, "accepted '%s'", bad[i]);
		cr_expect_str_eq(out, "");
	}
	/* A key of 257 characters; a value of 257. */
	memset(big, 'k', 257);
	memcpy(big + 257, "=v", 3);
	cr_expect_eq(norm(big, out), -1);
	big[0] = 'a';
	big[1] = '=';
	memset(big + 2, 'v', 257);
	big[259] = '\0';
	cr_expect_eq(norm(big, out), -1);
	big[258] = '\0'; /* 256: the longest value */
	cr_expect_eq(norm(big, out), 258);
}

Test(tracestate, more_than_32_members_is_invalid)
{
	char in[1024], out[TBX_TRACESTATE_MAX + 1];
	size_t n = 0;

	for (int i = 0; i < 32; i++)
		n += (size_t)snprintf(in + n, sizeof(in) - n, "%sk%d=v",
				      i ? "," : "", i);
	cr_expect_gt(norm(in, out), 0, "32 members");
	snprintf(in + n, sizeof(in) - n, ",k32=v");
	cr_expect_eq(norm(in, out), -1, "33 members");
}

Test(tracestate, too_long_drops_long_members_first_then_from_the_end)
{
	char in[2048], out[TBX_TRACESTATE_MAX + 1];
	size_t n = 0;

	/* a=<200 v> then 10 members of 50: 201 + 10 * 51 = 711 > 512. */
	n += (size_t)snprintf(in, sizeof(in), "a=");
	memset(in + n, 'v', 200);
	n += 200;
	for (int i = 0; i < 10; i++) {
		n += (size_t)snprintf(in + n, sizeof(in) - n, ",k%d=", i);
		memset(in + n, 'w', 47);
		n += 47;
	}
	in[n] = '\0';
	int len = norm(in, out);
	cr_expect_gt(len, 0);
	cr_expect_leq(len, TBX_TRACESTATE_MAX);
	cr_expect(strncmp(out, "k0=", 3) == 0, "the long member goes: %.20s",
		  out);
	cr_expect(strstr(out, "k9="), "the short ones stay when they fit");

	/* 20 members of 40: 819 > 512: members leave from the end. */
	n = 0;
	for (int i = 0; i < 20; i++) {
		n += (size_t)snprintf(in + n, sizeof(in) - n,
				      "%sk%02d=", i ? "," : "", i);
		memset(in + n, 'w', 36);
		n += 36;
	}
	in[n] = '\0';
	len = norm(in, out);
	cr_expect_leq(len, TBX_TRACESTATE_MAX);
	cr_expect(strncmp(out, "k00=", 4) == 0);
	cr_expect(strstr(out, "k11=") && !strstr(out, "k12="), "%s", out);
}

Test(ids, random_distinct_and_never_zero)
{
	uint8_t a[16], b[16], s[8];

	for (int i = 0; i < 1000; i++) {
		tbx__trace_id_new(a);
		tbx__trace_id_new(b);
		tbx__span_id_new(s);
		cr_assert(!tbx__id_is_zero(a, 16));
		cr_assert(!tbx__id_is_zero(s, 8));
		cr_assert(memcmp(a, b, 16) != 0);
	}
}

Test(ids, a_forked_child_does_not_repeat_its_parents_ids)
{
	uint8_t mine[16], theirs[16];
	int fds[2];
	pid_t pid;
	int status;

	tbx__trace_id_new(mine); /* the state is seeded before fork() */
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		tbx__trace_id_new(theirs);
		_exit(write(fds[1], theirs, 16) == 16 ? 0 : 1);
	}
	tbx__trace_id_new(mine);
	cr_assert_eq(read(fds[0], theirs, 16), 16);
	waitpid(pid, &status, 0);
	cr_expect(memcmp(mine, theirs, 16) != 0,
		  "parent and child made the same trace id");
	close(fds[0]);
	close(fds[1]);
}

static void id_with_random(uint8_t id[16], uint64_t r56)
{
	memset(id, 0xab, 16);
	for (int i = 15; i >= 9; i--) {
		id[i] = (uint8_t)(r56 & 0xff);
		r56 >>= 8;
	}
}

Test(sampler, the_names_of_otel_traces_sampler)
{
	tbx__sampler_t s;
	char err[256];
	uint8_t id[16];
	tbx__trace_ctx_t on = {.flags = 1}, off = {.flags = 0};

	tbx__trace_id_new(id);
	cr_assert_eq(tbx__sampler_init(&s, NULL, NULL, err, sizeof(err)), 0);
	cr_expect_eq(s.kind, TBX_SAMPLER_PARENT_ALWAYS_ON, "the default");
	cr_expect_eq(tbx__sampler_decide(&s, id, NULL), 1);
	cr_expect_eq(tbx__sampler_decide(&s, id, &off), 0);
	cr_expect_eq(tbx__sampler_decide(&s, id, &on), 1);

	cr_assert_eq(tbx__sampler_init(&s, "always_off", NULL, err, 256), 0);
	cr_expect_eq(tbx__sampler_decide(&s, id, &on), 0);
	cr_assert_eq(tbx__sampler_init(&s, "always_on", "junk", err, 256), 0,
		     "the argument is read by the ratio samplers only");
	cr_expect_eq(tbx__sampler_decide(&s, id, &off), 1);
	cr_assert_eq(
	    tbx__sampler_init(&s, "parentbased_always_off", NULL, err, 256), 0);
	cr_expect_eq(tbx__sampler_decide(&s, id, NULL), 0);
	cr_expect_eq(tbx__sampler_decide(&s, id, &on), 1);

	cr_expect_eq(tbx__sampler_init(&s, "jaeger_remote", NULL, err, 256),
		     TBX_ECONF);
	cr_expect(strstr(err, "OTEL_TRACES_SAMPLER: 'jaeger_remote'"), "%s",
		  err);
	static const char *const bad_args[] = {"1.5", "-0.1",	"nan",	"inf",
					       "abc", "0x1p-2", "0.5x", "."};
	for (size_t i = 0; i < sizeof(bad_args) / sizeof(bad_args[0]); i++) {
		cr_expect_eq(tbx__sampler_init(&s, "traceidratio", bad_args[i],
					       err, sizeof(err)),
			     TBX_ECONF, "took '%s'", bad_args[i]);
		cr_expect(strstr(err, "OTEL_TRACES_SAMPLER_ARG"), "%s", err);
	}
}

Test(sampler, the_ratio_is_decided_by_the_trace_ids_random_bits)
{
	tbx__sampler_t s;
	char err[256];
	uint8_t id[16];
	tbx__trace_ctx_t off = {.flags = 0}, on = {.flags = 1};
	const uint64_t span = 1ULL << 56;
	int sampled = 0;

	cr_assert_eq(tbx__sampler_init(&s, "traceidratio", "0.25", err, 256),
		     0);
	id_with_random(id, 0);
	cr_expect_eq(tbx__sampler_decide(&s, id, NULL), 0);
	id_with_random(id, span - 1);
	cr_expect_eq(tbx__sampler_decide(&s, id, NULL), 1);
	id_with_random(id, span / 4 * 3); /* the threshold itself */
	cr_expect_eq(tbx__sampler_decide(&s, id, NULL), 1);
	id_with_random(id, span / 4 * 3 - 1);
	cr_expect_eq(tbx__sampler_decide(&s, id, NULL), 0);
	/* The leftmost 9 bytes do not count. */
	id[0] = 0;
	id[8] = 0xff;
	cr_expect_eq(tbx__sampler_decide(&s, id, NULL), 0);
	/* Not parent-based: the parent's flag does not count. */
	id_with_random(id, span - 1);
	cr_expect_eq(tbx__sampler_decide(&s, id, &off), 1);

	for (int i = 0; i < 20000; i++) {
		tbx__trace_id_new(id);
		sampled += tbx__sampler_decide(&s, id, NULL);
	}
	cr_expect(sampled > 4000 && sampled < 6000, "%d of 20000", sampled);

	cr_assert_eq(
	    tbx__sampler_init(&s, "parentbased_traceidratio", "0", err, 256),
	    0);
	id_with_random(id, span - 1);
	cr_expect_eq(tbx__sampler_decide(&s, id, NULL), 0, "ratio 0: none");
	cr_expect_eq(tbx__sampler_decide(&s, id, &on), 1, "the parent wins");
	cr_assert_eq(
	    tbx__sampler_init(&s, "parentbased_traceidratio", "1", err, 256),
	    0);
	id_with_random(id, 0);
	cr_expect_eq(tbx__sampler_decide(&s, id, NULL), 1, "ratio 1: all");
	cr_expect_eq(tbx__sampler_decide(&s, id, &off), 0, "the parent wins");
}

/* The binary form of the context stored with an outgoing message
 * decodes to exactly what was encoded, with and without the span that
 * wrote it; any other layout is refused. */
Test(stored_ctx, round_trips_exactly_and_refuses_other_layouts)
{
	tbx__trace_ctx_t ctx = {.flags = 0};
	tbx__stored_ctx_t sc;
	uint8_t out[TBX_STORED_CTX_WRITER_LEN];
	const uint8_t writer[TBX_SPAN_ID_SIZE] = {1, 2, 3, 4, 5, 6, 7, 8};
	const uint8_t root[TBX_SPAN_ID_SIZE] = {0};
	char tp[TBX_TRACEPARENT_LEN + 1];

	cr_assert_eq(tbx__traceparent_parse(
			 "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-"
			 "00",
			 55, &ctx),
		     0);
	cr_assert_eq(tbx__stored_ctx_encode(&ctx, NULL, out),
		     TBX_STORED_CTX_LEN);
	cr_assert_eq(tbx__stored_ctx_decode(out, TBX_STORED_CTX_LEN, &sc), 0);
	cr_expect_not(sc.has_writer);
	tbx__traceparent_format(&sc.ctx, tp);
	cr_expect_str_eq(
	    tp, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");

	ctx.flags = TBX_TRACE_FLAG_SAMPLED | 0x80; /* unknown flags dropped */
	cr_assert_eq(tbx__stored_ctx_encode(&ctx, writer, out),
		     TBX_STORED_CTX_WRITER_LEN);
	cr_assert_eq(
	    tbx__stored_ctx_decode(out, TBX_STORED_CTX_WRITER_LEN, &sc), 0);
	cr_expect(sc.has_writer);
	cr_expect_eq(memcmp(sc.writer, writer, sizeof(writer)), 0);
	cr_expect_eq(memcmp(sc.ctx.trace_id, ctx.trace_id, TBX_TRACE_ID_SIZE),
		     0);
	cr_expect_eq(memcmp(sc.ctx.span_id, ctx.span_id, TBX_SPAN_ID_SIZE), 0);
	cr_expect_eq(sc.ctx.flags, TBX_TRACE_FLAG_SAMPLED);
	cr_assert_eq(tbx__stored_ctx_encode(&ctx, root, out),
		     TBX_STORED_CTX_WRITER_LEN);
	cr_assert_eq(
	    tbx__stored_ctx_decode(out, TBX_STORED_CTX_WRITER_LEN, &sc), 0);
	cr_expect(sc.has_writer && tbx__id_is_zero(sc.writer, 8), "a root");

	/* Other lengths, unknown flags, zero ids. */
	for (size_t len = 0; len <= TBX_STORED_CTX_WRITER_LEN; len++)
		if (len != TBX_STORED_CTX_LEN &&
		    len != TBX_STORED_CTX_WRITER_LEN)
			cr_expect_eq(tbx__stored_ctx_decode(out, len, &sc), -1,
				     "length %zu", len);
	cr_expect_eq(tbx__stored_ctx_decode(NULL, TBX_STORED_CTX_LEN, &sc), -1);
	out[TBX_STORED_CTX_LEN - 1] = 0x02;
	cr_expect_eq(tbx__stored_ctx_decode(out, TBX_STORED_CTX_LEN, &sc), -1);
	out[TBX_STORED_CTX_LEN - 1] = 0x01;
	memset(out, 0, TBX_TRACE_ID_SIZE);
	cr_expect_eq(tbx__stored_ctx_decode(out, TBX_STORED_CTX_LEN, &sc), -1);
	cr_assert_eq(tbx__stored_ctx_encode(&ctx, NULL, out),
		     TBX_STORED_CTX_LEN);
	memset(out + TBX_TRACE_ID_SIZE, 0, TBX_SPAN_ID_SIZE);
	cr_expect_eq(tbx__stored_ctx_decode(out, TBX_STORED_CTX_LEN, &sc), -1);
}
