/*
 * Finishing outbox rows outside a worker's loop (consumer/recover.h).
 *
 * The phases B–E are the protocol's own (proto_*.c), reached through
 * tbx__proto_redispatch(), as the worker's recovery pass reaches them
 * through tbx__proto_recover(): they need the stores, the group, a
 * producer and the few settings below, which this handle gives a
 * protocol context of its own; there is no worker, no group membership,
 * no handler and no poll.
 */
#include "consumer/recover.h"

#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "consumer/producer.h"
#include "consumer/protocol.h"
#include "consumer/tracing.h"

/** The default service.name of what `inspect` dispatches. */
#define RECOVER_SERVICE "tokenbox-inspect"
/** How long the spans held at the end may take to reach the collector. */
#define RECOVER_FLUSH_MS 5000

struct tbx__recover {
	tbx__proto_t proto;
	tbx__batch_t batch;    /**< the rows B–E take, one call at a time */
	tbx__tracer_t *tracer; /**< send spans; NULL: tracing off */
	rd_kafka_t *producer;  /**< made at the first dispatch */
	tbx_stats_t stats;     /**< what the phases count (not reported) */
	char group[TBX_GROUP_MAX + 1];
	char store_id[TBX_UUID_LEN + 1]; /**< tbx-store of what is sent */
	char dlq_suffix[65];
	char errstr[512];
	int dispatch_timeout_ms, shutdown_timeout_ms;
};

tbx__recover_t *tbx__recover_new(tbx_conf_t *conf, const char *grp,
				 tbx_outbox_t *store, tbx_tokens_t *tokens,
				 char *errstr, size_t errstr_size)
{
	tbx__recover_t *r;
	tbx__proto_t *proto;
	int err;

	if (!conf || !grp || !store || !tokens) {
		tbx__seterr(errstr, errstr_size, TBX_EINVAL,
			    "recover: a configuration, a group and both "
			    "stores are needed");
		return NULL;
	}
	if (!(r = calloc(1, sizeof(*r)))) {
		tbx__seterr(errstr, errstr_size, TBX_ENOMEM, "out of memory");
		return NULL;
	}
	tbx__strlcpy(r->group, grp, sizeof(r->group));
	r->dispatch_timeout_ms = (int)tbx__conf_cfg(conf)->dispatch_timeout_ms;
	r->shutdown_timeout_ms = (int)tbx__conf_cfg(conf)->shutdown_timeout_ms;
	tbx__strlcpy(r->dlq_suffix, tbx__conf_cfg(conf)->dlq_suffix,
		     sizeof(r->dlq_suffix));
	/* tbx-store of what the phases dispatch: the token store's id. */
	if ((err = tbx_tokens_store_id(tokens, r->store_id))) {
		tbx__seterr(errstr, errstr_size, err,
			    "cannot read the token store's id");
		free(r);
		return NULL;
	}
	/* OTEL_* and otel.* as a worker reads them: each dispatch a send
	 * span (C swaps the batch's tracer in). */
	if ((err = tbx__tracer_new(conf, RECOVER_SERVICE, grp, &r->tracer,
				   errstr, errstr_size))) {
		free(r);
		return NULL;
	}
	r->batch.tracer = r->tracer;
	/* B–E need no handler guard and no backoff: no tbx__proto_init. */
	proto = &r->proto;
	proto->store = store;
	proto->tokens = tokens;
	proto->producer = &r->producer;
	proto->conf = conf;
	proto->stats = &r->stats;
	proto->errstr = r->errstr;
	proto->errstr_size = sizeof(r->errstr);
	proto->group = r->group;
	proto->store_id = r->store_id;
	proto->dlq_suffix = r->dlq_suffix;
	/* One file for both stores: D commits with E (the joined path). */
	proto->joined = tbx_tokens_joinable(tokens);
	proto->dispatch_retry_max = tbx__conf_cfg(conf)->dispatch_retry_max;
	return r;
}

int tbx__recover_older(tbx__recover_t *r, int64_t created_before_ms,
		       size_t limit, size_t *finished)
{
	r->errstr[0] = '\0';
	return tbx__proto_redispatch(&r->proto, &r->batch, created_before_ms,
				     limit, finished);
}

int tbx__recover_trace_to(tbx__recover_t *r, tbx__span_sink_fn *sink,
			  void *opaque)
{
	tbx__tracer_t *t = tbx__tracer_new_sink(r->group, sink, opaque);

	if (!t)
		return TBX_ENOMEM;
	tbx__tracer_free(r->tracer, 0);
	r->tracer = r->batch.tracer = t;
	return TBX_OK;
}

const char *tbx__recover_errstr(const tbx__recover_t *r)
{
	return r->errstr;
}

int tbx__recover_send(const tbx_conf_t *conf, const char *store_id,
		      tbx__row_t *row, int *delivered,
		      rd_kafka_resp_err_t *errs, char *errstr,
		      size_t errstr_size)
{
	rd_kafka_t *producer;
	tbx__tracer_t *tracer = NULL, *prev;
	int err;

	*delivered = 0;
	if ((err = tbx__tracer_new(conf, RECOVER_SERVICE, NULL, &tracer, errstr,
				   errstr_size)))
		return err;
	if (!(producer = tbx__producer_new(conf, errstr, errstr_size))) {
		tbx__tracer_free(tracer, 0);
		return TBX_EKAFKA;
	}
	prev = tbx__tracer_dispatch_swap(tracer);
	err = tbx__dispatch(producer, store_id, &row, 1, delivered, NULL, errs,
			    errstr, errstr_size, NULL);
	tbx__tracer_dispatch_swap(prev);
	rd_kafka_destroy(producer);
	/* The send span is held by the exporter: sent before the exit. */
	tbx__tracer_free(tracer, RECOVER_FLUSH_MS);
	return err ? TBX_EDELIVERY : TBX_OK;
}

void tbx__recover_destroy(tbx__recover_t *r)
{
	if (!r)
		return;
	if (r->producer) {
		rd_kafka_flush(r->producer,
			       r->shutdown_timeout_ms < r->dispatch_timeout_ms
				   ? r->shutdown_timeout_ms
				   : r->dispatch_timeout_ms);
		rd_kafka_destroy(r->producer);
	}
	tbx__batch_reset(&r->batch);
	tbx__batch_free(&r->batch);
	tbx__tracer_free(r->tracer, RECOVER_FLUSH_MS);
	free(r);
}
