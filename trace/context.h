/*
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): the
 * `traceparent` and `tracestate` values that carry a trace from one
 * process to the next (in Kafka headers of those names), trace and span
 * ids, and the sampler that decides which traces are recorded.
 *
 * Everything here is pure and thread-safe, except the id generator's
 * per-thread state (thread-local, reseeded after fork()).
 */
#ifndef TBX_TRACE_CONTEXT_H
#define TBX_TRACE_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#define TBX_TRACE_ID_SIZE 16
#define TBX_SPAN_ID_SIZE  8
/** "00-" 32 hex "-" 16 hex "-" 2 hex. */
#define TBX_TRACEPARENT_LEN 55
/** The longest tracestate kept: the W3C spec asks a vendor to propagate
 *  at least 512 characters and lets it truncate past them. */
#define TBX_TRACESTATE_MAX 512
/** At most 32 list members in a tracestate. */
#define TBX_TRACESTATE_MEMBERS 32

/** The one trace flag of version 00: the caller recorded the trace. */
#define TBX_TRACE_FLAG_SAMPLED 0x01

typedef struct tbx__trace_ctx {
	uint8_t trace_id[TBX_TRACE_ID_SIZE];
	uint8_t span_id[TBX_SPAN_ID_SIZE];
	uint8_t flags; /* TBX_TRACE_FLAG_* */
} tbx__trace_ctx_t;

/**
 * Parses a traceparent value of @p len bytes (not NUL-terminated) by the
 * rules of W3C Trace Context level 1: version, trace id, parent id and
 * flags in lower-case hex, separated by '-'; version ff, an all-zero
 * trace id or parent id, upper-case hex, a version-00 value of any other
 * length than 55 are invalid.  A value of a later version is read by its
 * first 55 characters when the 56th is '-' or absent.  Spaces and tabs
 * around the value (HTTP's optional white space) are ignored.  Of the
 * flags only TBX_TRACE_FLAG_SAMPLED is kept: the others are not defined
 * and are not passed on.
 * @returns 0 with *out set, or -1 (invalid; *out untouched).
 */
int tbx__traceparent_parse(const char *s, size_t len, tbx__trace_ctx_t *out);

/** Writes @p ctx as a version-00 traceparent, NUL-terminated, into @p out
 *  (TBX_TRACEPARENT_LEN + 1 bytes). */
void tbx__traceparent_format(const tbx__trace_ctx_t *ctx,
			     char out[TBX_TRACEPARENT_LEN + 1]);

/**
 * Checks a tracestate value of @p len bytes and writes it normalised
 * into @p out (@p out_size >= TBX_TRACESTATE_MAX + 1): list members
 * "key=value" joined by ',' without the optional white space, empty
 * members dropped.  Invalid (the whole value is then discarded, as the
 * spec asks): a key or value outside the spec's grammar, a key twice,
 * more than TBX_TRACESTATE_MEMBERS members.  Longer than
 * TBX_TRACESTATE_MAX once normalised: members longer than 128 characters
 * are dropped first, then members from the end, until it fits.
 * @returns the length written (0: empty, nothing to pass on), or -1
 * (invalid; @p out is "").
 */
int tbx__tracestate_normalize(const char *s, size_t len, char *out,
			      size_t out_size);

/*
 * The trace context as tokenbox stores it with an outgoing message (in
 * the outbox row's headers, docs/tracing.md), in place of the 55
 * characters of a traceparent: the internal header TBX_STORED_CTX_HDR,
 * whose value is binary,
 *   trace id (16 bytes) | span id (8) | flags (1)             25 bytes
 * and, when the span that wrote the message is known (a sampled
 * message written by a tracing worker or publisher), that span's id
 * after it (8 bytes, all zero for a root): 33 bytes.  Any other length
 * is invalid.  Dispatch sends it as the version-00 traceparent of the
 * same ids and flags; it never leaves the process under its own name.
 */
#define TBX_STORED_CTX_HDR	  "tbx-tc"
#define TBX_STORED_CTX_LEN	  25
#define TBX_STORED_CTX_WRITER_LEN 33

typedef struct tbx__stored_ctx {
	tbx__trace_ctx_t ctx;
	int has_writer;			  /* the writer's span is known */
	uint8_t writer[TBX_SPAN_ID_SIZE]; /* all zero: a root */
} tbx__stored_ctx_t;

/** Encodes @p ctx (flags: only sampled is kept) and, when @p writer is
 *  not NULL, the writer's span id, into @p out.  @returns the length,
 *  TBX_STORED_CTX_LEN or TBX_STORED_CTX_WRITER_LEN. */
size_t tbx__stored_ctx_encode(const tbx__trace_ctx_t *ctx,
			      const uint8_t *writer,
			      uint8_t out[TBX_STORED_CTX_WRITER_LEN]);
/** Decodes a value of TBX_STORED_CTX_HDR.  @returns 0, or -1 when it is
 *  not of the layout above or its trace or span id is all zero. */
int tbx__stored_ctx_decode(const void *val, size_t len, tbx__stored_ctx_t *out);

/** Lower-case hex of @p n bytes into @p out (2n + 1 bytes, terminated). */
void tbx__hex(const uint8_t *bytes, size_t n, char *out);
/** 1 when all @p n bytes are zero. */
int tbx__id_is_zero(const uint8_t *id, size_t n);

/** A random trace id (never all zero).  Thread-safe. */
void tbx__trace_id_new(uint8_t id[TBX_TRACE_ID_SIZE]);
/** A random span id (never all zero).  Thread-safe. */
void tbx__span_id_new(uint8_t id[TBX_SPAN_ID_SIZE]);

/** The samplers of OTEL_TRACES_SAMPLER. */
typedef enum tbx__sampler_kind {
	TBX_SAMPLER_ALWAYS_ON,
	TBX_SAMPLER_ALWAYS_OFF,
	TBX_SAMPLER_RATIO,
	TBX_SAMPLER_PARENT_ALWAYS_ON,
	TBX_SAMPLER_PARENT_ALWAYS_OFF,
	TBX_SAMPLER_PARENT_RATIO,
} tbx__sampler_kind_t;

typedef struct tbx__sampler {
	tbx__sampler_kind_t kind;
	double ratio; /* TBX_SAMPLER_*RATIO: 0..1 */
	/* The rejection threshold over the trace id's 56 random bits:
	 * sampled when those bits >= threshold (2^56: never). */
	uint64_t threshold;
} tbx__sampler_t;

/**
 * Sets up @p s from OTEL_TRACES_SAMPLER's value @p name ("always_on",
 * "always_off", "traceidratio", "parentbased_always_on",
 * "parentbased_always_off", "parentbased_traceidratio"; NULL or "": the
 * SDKs' default, parentbased_always_on) and OTEL_TRACES_SAMPLER_ARG's
 * @p arg (the ratio, a decimal number from 0 to 1; NULL or "": 1; read
 * only by the ratio samplers).
 * @returns TBX_OK, or TBX_ECONF with @p errstr saying why.
 */
int tbx__sampler_init(tbx__sampler_t *s, const char *name, const char *arg,
		      char *errstr, size_t errstr_size);

/**
 * Decides whether a span of trace @p trace_id is recorded.  @p parent is
 * the remote parent's context (NULL: a root span).  The parent-based
 * samplers follow a parent's sampled flag; the ratio is applied to the
 * rightmost 7 bytes of the trace id, the part W3C Trace Context level 2
 * makes random, so every process that sees a trace decides alike
 * (OpenTelemetry's TraceIdRatioBased: sampled when those 56 bits are at
 * least (1 - ratio) * 2^56).
 * @returns 1 (record and set the sampled flag) or 0.
 */
int tbx__sampler_decide(const tbx__sampler_t *s,
			const uint8_t trace_id[TBX_TRACE_ID_SIZE],
			const tbx__trace_ctx_t *parent);

#endif
