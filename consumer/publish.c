/*
 * Publishing ingress: tokens minted for every consumer group subscribed to
 * the topic, then the records produced with the tbx-* headers.
 *
 * The queue is an outbox row kept in memory; the publisher has no service
 * store, so its tokens carry no registration.  A failed flush keeps the
 * minted batch for a retry with the same ids and tokens.  A crash between
 * minting and delivery leaves those tokens behind: they are never honoured
 * twice, since no record carries them.
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
	int minted; /* the queue holds a minted batch not yet delivered */
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
	tbx__crashpoints_arm();
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
	tbx__log_setup(tbx__log_level(tbx__conf_str(conf, "log.level")), NULL);
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
	void *hdrs;
	size_t hdrs_len;
	int err;

	if (!pub)
		return TBX_EINVAL;
	if (pub->minted) {
		snprintf(pub->errstr, sizeof(pub->errstr),
			 "a failed flush is pending: call "
			 "tbx_publisher_flush() again to retry it");
		return TBX_ESTATE;
	}
	if ((err = tbx__out_prepare(out, "tbx_publish", &hdrs, &hdrs_len)))
		return err;
	err = tbx__row_add(&pub->queue, out->topic, out->type, out->key,
			   out->key ? out->key_len : 0, out->payload,
			   out->payload_len, hdrs, hdrs_len);
	free(hdrs);
	return err;
}

/* One token-store transaction for the whole queue: one sequence number,
 * one token per message, a token row per subscribed group. */
static int mint(tbx_publisher_t *pub)
{
	tbx__row_t *queue = &pub->queue;
	tbx__mint_item_t *items;
	tbx__mint_req_t req;
	int err;

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
		for (size_t i = 0; i < queue->msg_cnt; i++)
			queue->msgs[i].token[0] = '\0';
		snprintf(pub->errstr, sizeof(pub->errstr),
			 "minting tokens failed: %s", tbx_strerror(err));
		return err;
	}
	pub->minted = 1;
	return TBX_OK;
}

int tbx_publisher_flush(tbx_publisher_t *pub, size_t *failed)
{
	tbx__row_t *queue;
	tbx__row_t *rows[1];
	int delivered = 0, err;
	size_t undelivered = 0;

	if (failed)
		*failed = 0;
	if (!pub)
		return TBX_EINVAL;
	queue = &pub->queue;
	rows[0] = queue;
	if (queue->msg_cnt == 0)
		return TBX_OK;
	/* A retried batch keeps its tokens and ids: copies are dropped by
	 * the receivers. */
	if (!pub->minted && (err = mint(pub))) {
		if (failed)
			*failed = queue->msg_cnt;
		return err;
	}
	err = tbx__dispatch(pub->producer, rows, 1, &delivered, &undelivered,
			    pub->errstr, sizeof(pub->errstr));
	if (failed)
		*failed = undelivered;
	if (err)
		return err;
	tbx__row_clear_msgs(queue);
	queue->mint_seq = 0;
	pub->minted = 0;
	return TBX_OK;
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
