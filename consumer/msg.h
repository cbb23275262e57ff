/*
 * An incoming record as handlers see it (tbx_msg_t) with the protocol's
 * state of it, and the handler context (tbx_ctx_t): msg.c parses and
 * checks the tbx-* headers and implements the calls handlers make.
 *
 * @locality the worker's thread.
 */
#ifndef TBX_CONSUMER_MSG_H
#define TBX_CONSUMER_MSG_H

#include <librdkafka/rdkafka.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/tracing.h"
#include "outbox/outbox.h"

#define TBX_TYPE_MAX 255

struct tbx__part;

/* What A decided for one record of the batch. */
typedef enum tbx__mstate {
	TBX_MS_NEW = 0, /**< not looked at yet */
	TBX_MS_SKIPPED, /**< its partition blocked earlier in the batch */
	TBX_MS_BLOCKED, /**< RETRY (or a failed phase): resume here later */
	TBX_MS_DROPPED, /**< duplicate or below the ingress offset: done */
	TBX_MS_ROW,	/**< has an outbox row: done when the row finishes */
} tbx__mstate_t;

/* How a record carries its token, by its headers alone
 * (docs/batched-tokens.md, "Wire format"). */
typedef enum tbx__wirefmt {
	TBX_WF_UNTOKENED = 0, /**< none of tbx-token, tbx-tset, tbx-tbit */
	TBX_WF_MSG,	      /**< tbx-token: a per-message token (today's) */
	TBX_WF_SET,	  /**< tbx-tset and tbx-tbit: a bit of a token set */
	TBX_WF_MALFORMED, /**< a mix the table refuses, or a bad value */
} tbx__wirefmt_t;

/** tbx-tbit's largest partition + 1 and largest index + 1. */
#define TBX_TBIT_PART_END  2147483648LL
#define TBX_TBIT_INDEX_END 65536u

/** An incoming record as handlers see it, plus its protocol state. */
struct tbx_msg {
	rd_kafka_message_t *rkm; /**< owned by the batch */
	const char *topic;	 /**< borrowed from rkm */
	struct tbx__part *part;
	char id[TBX_MSGID_MAX + 1];
	char token[TBX_UUID_LEN + 1]; /**< "" when absent */
	char tset[TBX_UUID_LEN + 1];  /**< tbx-tset, "" when absent */
	int32_t tset_part;	      /**< tbx-tbit's partition, -1 absent */
	uint32_t tset_index;	      /**< tbx-tbit's index (0 when absent) */
	tbx__wirefmt_t fmt;	      /**< the headers' format */
	char cause[TBX_UUID_LEN + 1]; /**< "" when absent */
	char store[TBX_UUID_LEN + 1]; /**< tbx-store, "" when absent */
	char type[TBX_TYPE_MAX + 1];
	int has_type;
	int64_t seq; /**< tbx-seq, 0 when absent */
	const char
	    *malformed; /**< why the tbx-* headers are unusable, or NULL */
	int untokened;	/**< no usable token for this group */
	int attempt;	/**< for handlers: 1 + earlier RETRYs */
	int crashes;	/**< >0: killed the worker this often alone: poison */
	tbx__mstate_t state;
	size_t row; /**< index in the batch's rows when TBX_MS_ROW */
	int first;  /**< the first record of its partition in the batch */
	int keep;   /**< F: stays in the batch for the next one (isolation,
		       tbx__batch_keep()) */
	/* A's lookups for the whole batch (proto_process.c, prefetch()): -1 not
	 * looked up, else 0/1. */
	int pre_row;   /**< its outbox row existed when A began */
	int pre_token; /**< its token existed, asked after the row */
	int pre_bit;   /**< batched: its bit's tbx__bit_state_t, asked after
			  the row */
	tbx__msg_trace_t trace; /**< its trace (trace.on 0: tracing off) */
};

struct tbx__guard;

/** What a handler call gets (A, proto_record.c). */
struct tbx_ctx {
	tbx_outbox_t *store;	  /**< the service store: tbx_ctx_db() */
	struct tbx__guard *guard; /**< armed during the call: tbx_ctx_pg(),
				     tbx_ctx_exec() */
	const struct tbx_msg *msg;
	tbx__row_t *row; /**< where tbx_ctx_send queues */
	char *error;	 /**< tbx_ctx_set_error() */
	int send_failed; /**< a tbx_ctx_send() failed: never commit */
	int in_query;	 /**< inside tbx_ctx_query()'s row function */
	struct tbx__tracer *tracer; /**< NULL: tracing off */
};

/** The malformed reason of a batched record whose set exists with fewer
 *  bits than its tbx-tbit index (found by A's token check). */
#define TBX_TBIT_RANGE "tbx-tbit index is beyond its token set's bits (nbits)"

/**
 * Parses a tbx-tbit value, @p len bytes at @p v (not NUL-terminated):
 * "<partition>:<index>", two decimals of ASCII digits only (no sign,
 * space or other byte), 0 <= partition < 2^31, 0 <= index < 65,536, and
 * no leading zero (the one digit "0" apart), so that a value has one
 * spelling, the one senders write ("%d:%u").  Overflow is refused.
 * @returns TBX_OK with *@p part and *@p index set, else TBX_EINVAL and
 * both untouched.
 */
int tbx__tbit_parse(const char *v, size_t len, int32_t *part, uint32_t *index);

/** Reads and checks the tbx-* headers of @p msg->rkm. */
void tbx__msg_parse(struct tbx_msg *msg);
/** The header part of tbx__msg_parse(): @p hdrs (NULL: none) of the record
 *  at @p partition, @p offset of msg->topic, which is set. */
void tbx__msg_parse_headers(struct tbx_msg *msg, rd_kafka_headers_t *hdrs,
			    int32_t partition, int64_t offset);
/** Checks an outgoing message (topic name, type, reserved header names)
 *  and encodes its headers into *hdrs (malloc'ed, NULL when none).
 *  @returns TBX_OK, TBX_EINVAL (logged with the reason) or TBX_ENOMEM. */
int tbx__out_prepare(const tbx_out_t *out, const char *caller, void **hdrs,
		     size_t *hdrs_len);

#endif
