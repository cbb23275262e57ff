/*
 * Finishing outbox rows outside a worker's loop, for `tokenbox inspect
 * redispatch`: the rows' phases B–E (record an attempt, dispatch,
 * consume the incoming tokens, delete the rows) with the same ids and
 * tokens, as a redelivery or the worker's recovery pass would run them,
 * through the stores' interfaces and a producer; no consumer, no group,
 * no handlers.  Safe while workers run (B's conditional record, C's same
 * ids and tokens, D and E idempotent).
 *
 * @locality one thread at a time per handle.
 */
#ifndef TBX_CONSUMER_RECOVER_H
#define TBX_CONSUMER_RECOVER_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "consumer/conf.h"
#include "consumer/tracing.h"
#include "outbox/outbox.h"
#include "tokens/tokens.h"

typedef struct tbx__recover tbx__recover_t;

/**
 * A handle that finishes group @p grp's rows of @p store, minting and
 * consuming in @p tokens (both borrowed; @p tokens shares @p store's
 * connection when they are one file).  @p conf (borrowed) gives the
 * producer's Kafka settings and dispatch.*, dlq.suffix; the producer is
 * made at the first dispatch.  Each dispatch records a send span when
 * tracing is configured (OTEL_* and the otel.* properties of @p conf, as
 * a worker; service.name by default "tokenbox-inspect").  NULL with
 * @p errstr set.
 */
tbx__recover_t *tbx__recover_new(tbx_conf_t *conf, const char *grp,
				 tbx_outbox_t *store, tbx_tokens_t *tokens,
				 char *errstr, size_t errstr_size);
/**
 * Finishes at most @p limit of the group's rows created at or before
 * @p created_before_ms (wall clock), oldest first.  *finished receives
 * the rows done; rows left (a message not delivered) make it
 * TBX_EDELIVERY.
 */
int tbx__recover_older(tbx__recover_t *r, int64_t created_before_ms,
		       size_t limit, size_t *finished);
/**
 * Hands the spans of @p r (each dispatch's send span, each call's batch
 * span) to @p sink instead of a collector (tbx__tracer_new_sink()): the
 * tests'.  @returns TBX_OK or TBX_ENOMEM.
 */
int tbx__recover_trace_to(tbx__recover_t *r, tbx__span_sink_fn *sink,
			  void *opaque);
/** What the last failure said ("" when nothing). */
const char *tbx__recover_errstr(const tbx__recover_t *r);
/**
 * Sends @p row's outgoing messages once as they are — their tbx-ids,
 * tokens (tbx-store = @p store_id, NULL: none), keys, payloads and
 * headers — through an idempotent producer made from @p conf, and waits
 * for their delivery reports: `inspect undelivered resend`.  Each
 * message is a send span when tracing is configured, as for
 * tbx__recover_new().  *delivered = 1 when every message was
 * acknowledged; @p errs (may be NULL) one result per message.
 * @returns TBX_OK, TBX_EDELIVERY (not every message delivered),
 * TBX_EKAFKA when no producer could be made or TBX_ECONF for a bad
 * OTEL_* setting (@p errstr says why).
 */
int tbx__recover_send(const tbx_conf_t *conf, const char *store_id,
		      tbx__row_t *row, int *delivered,
		      rd_kafka_resp_err_t *errs, char *errstr,
		      size_t errstr_size);
/** Waits for the producer's last messages, then frees the handle. */
void tbx__recover_destroy(tbx__recover_t *r);

#endif
