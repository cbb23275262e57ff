/*
 * Publishing ingress: tokens minted for every consumer group subscribed to
 * the topic, then the records produced with the tbx-* headers.
 *
 * The queue is an outbox row kept in memory; the publisher has no service
 * store, so its tokens carry no registration.  A crash between minting and
 * delivery leaves those tokens behind (visible with `tokenbox inspect`):
 * they are never honoured twice, since no record carries them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/worker.h"

struct tbx_publisher {
	tbx_conf_t *conf;
	tbx_tokens_t *tokens;
	rd_kafka_t *producer;
	tbx__row_t queue;
	char errstr[512];
};

tbx_publisher_t *tbx_publisher_new(tbx_conf_t *conf, char *errstr,
				   size_t errstr_size)
{
	tbx_publisher_t *pub;
	tbx__db_opts_t opts;
	const char *path;

	if (!conf) {
		tbx__seterr(errstr, errstr_size, TBX_EINVAL, "conf is NULL");
		return NULL;
	}
	path = tbx__conf_str(conf, "tokens.path");
	if (!*path)
		path = tbx__conf_str(conf, "store.path");
	if (!path || !*path) {
		tbx__seterr(errstr, errstr_size, TBX_ECONF,
			    "tokens.path: required configuration key is not "
			    "set (the token store of the receiving groups)");
		return NULL;
	}
	if (tbx__conf_check_required(conf, "publisher", errstr, errstr_size))
		return NULL;
	tbx__log_setup(tbx__log_level(tbx__conf_str(conf, "log.level")),
		       "publish");
	if (!(pub = calloc(1, sizeof(*pub)))) {
		tbx__seterr(errstr, errstr_size, TBX_ENOMEM, "out of memory");
		return NULL;
	}
	tbx__row_init(&pub->queue);
	tbx__db_opts_init(&opts);
	opts.synchronous_full =
	    strcmp(tbx__conf_str(conf, "store.synchronous"), "full") == 0;
	opts.busy_timeout_ms =
	    (int)tbx__conf_int(conf, "store.busy.timeout.ms");
	if (tbx_tokens_sqlite_open(path, &opts, NULL, &pub->tokens, errstr,
				   errstr_size))
		goto fail;
	if (!(pub->producer = tbx__producer_new(conf, errstr, errstr_size)))
		goto fail;
	pub->conf = conf;
	return pub;
fail:
	tbx_tokens_close(pub->tokens);
	free(pub);
	return NULL;
}

int tbx_publish(tbx_publisher_t *pub, const tbx_out_t *out)
{
	void *hdrs = NULL;
	size_t hdrs_len = 0;
	int err;

	if (!pub || !out || !out->topic || !*out->topic || !out->type ||
	    !*out->type || (out->header_cnt && !out->headers))
		return TBX_EINVAL;
	for (size_t i = 0; i < out->header_cnt; i++)
		if (!out->headers[i].name ||
		    strncmp(out->headers[i].name, "tbx-", 4) == 0)
			return TBX_EINVAL;
	if ((err = tbx__hdrs_encode(out->headers, out->header_cnt, &hdrs,
				    &hdrs_len)))
		return err;
	err = tbx__row_add(&pub->queue, out->topic, out->type, out->key,
			   out->key ? out->key_len : 0, out->payload,
			   out->payload_len, hdrs, hdrs_len);
	free(hdrs);
	return err;
}

int tbx_publisher_flush(tbx_publisher_t *pub, int timeout_ms, size_t *failed)
{
	tbx__row_t *queue = &pub->queue;
	tbx__mint_item_t *items;
	tbx__mint_req_t req;
	tbx__row_t *rows[1] = {queue};
	int delivered = 0, err;
	size_t undelivered = 0;

	(void)timeout_ms; /* bounded by dispatch.timeout.ms */
	if (failed)
		*failed = 0;
	if (queue->msg_cnt == 0)
		return TBX_OK;
	if (!(items = calloc(queue->msg_cnt, sizeof(*items))))
		return TBX_ENOMEM;
	for (size_t i = 0; i < queue->msg_cnt; i++) {
		tbx__uuid(queue->msgs[i].token);
		items[i].token = queue->msgs[i].token;
		items[i].topic = queue->msgs[i].topic;
	}
	req.attempt = NULL; /* no outbox row, so no registration */
	req.msg_id = NULL;
	req.items = items;
	req.item_cnt = queue->msg_cnt;
	err =
	    tbx_tokens_mint(pub->tokens, NULL, &req, 1, &queue->mint_seq, NULL);
	free(items);
	if (err) {
		if (failed)
			*failed = queue->msg_cnt;
		snprintf(pub->errstr, sizeof(pub->errstr),
			 "minting tokens failed: %s", tbx_strerror(err));
		return err;
	}
	err = tbx__dispatch(pub->producer, rows, 1, &delivered, pub->errstr,
			    sizeof(pub->errstr));
	if (!delivered)
		undelivered = queue->msg_cnt; /* conservative: per row */
	if (failed)
		*failed = undelivered;
	tbx__row_clear_msgs(queue);
	queue->mint_seq = 0;
	return err;
}

void tbx_publisher_destroy(tbx_publisher_t *pub)
{
	if (!pub)
		return;
	if (pub->producer) {
		rd_kafka_flush(pub->producer, 10000);
		rd_kafka_destroy(pub->producer);
	}
	tbx__row_clear(&pub->queue);
	tbx_tokens_close(pub->tokens);
	tbx_conf_destroy(pub->conf);
	free(pub);
}

const char *tbx_publisher_errstr(const tbx_publisher_t *pub)
{
	return pub ? pub->errstr : "";
}
