/*
 * Finishing outbox rows outside a worker's loop (consumer/recover.h).
 *
 * The phases B–E are the protocol's own (protocol.c), reached through
 * tbx__worker_redispatch(), the call the worker's recovery pass makes:
 * they read a worker's stores, group, producer and a few settings (its
 * configuration's typed fields), so this handle carries exactly those in
 * a worker structure that never joins a group, runs no handler and polls
 * nothing.
 */
#include "consumer/recover.h"

#include <stdlib.h>
#include <string.h>

#include "consumer/worker.h"

struct tbx__recover {
	tbx_worker_t worker;
};

tbx__recover_t *tbx__recover_new(tbx_conf_t *conf, const char *grp,
				 tbx_outbox_t *store, tbx_tokens_t *tokens,
				 char *errstr, size_t errstr_size)
{
	tbx__recover_t *r;
	tbx_worker_t *w;
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
	w = &r->worker;
	w->conf = conf;
	w->store = store;
	w->tokens = tokens;
	tbx__strlcpy(w->group, grp, sizeof(w->group));
	/* One file for both stores: D commits with E (the joined path). */
	w->joined = tbx_tokens_joinable(tokens);
	/* The settings B–E read: dispatch.*, shutdown.timeout.ms,
	 * dlq.suffix. */
	w->cfg = tbx__conf_cfg(conf);
	/* tbx-store of what the phases dispatch: the token store's id. */
	if ((err = tbx_tokens_store_id(tokens, w->store_id))) {
		tbx__seterr(errstr, errstr_size, err,
			    "cannot read the token store's id");
		free(r);
		return NULL;
	}
	atomic_init(&w->stop, 0);
	return r;
}

int tbx__recover_older(tbx__recover_t *r, int64_t created_before_ms,
		       size_t limit, size_t *finished)
{
	r->worker.errstr[0] = '\0';
	return tbx__worker_redispatch(&r->worker, created_before_ms, limit,
				      finished);
}

const char *tbx__recover_errstr(const tbx__recover_t *r)
{
	return r->worker.errstr;
}

int tbx__recover_send(const tbx_conf_t *conf, const char *store_id,
		      tbx__row_t *row, int *delivered,
		      rd_kafka_resp_err_t *errs, char *errstr,
		      size_t errstr_size)
{
	rd_kafka_t *producer;
	int err;

	*delivered = 0;
	if (!(producer = tbx__producer_new(conf, errstr, errstr_size)))
		return TBX_EKAFKA;
	err = tbx__dispatch(producer, store_id, &row, 1, delivered, NULL, errs,
			    errstr, errstr_size);
	rd_kafka_destroy(producer);
	return err ? TBX_EDELIVERY : TBX_OK;
}

void tbx__recover_destroy(tbx__recover_t *r)
{
	tbx_worker_t *w;

	if (!r)
		return;
	w = &r->worker;
	if (w->producer) {
		rd_kafka_flush(w->producer, w->cfg->shutdown_timeout_ms <
						    w->cfg->dispatch_timeout_ms
						? w->cfg->shutdown_timeout_ms
						: w->cfg->dispatch_timeout_ms);
		rd_kafka_destroy(w->producer);
	}
	tbx__batch_reset(&w->batch);
	free(w->batch.msgs);
	free(w->batch.rows);
	free(w->batch.ids);
	free(r);
}
