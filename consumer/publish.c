/*
 * Publishing ingress: tokens minted for every consumer group subscribed to
 * the topic, then the records produced with the tbx-* headers.
 *
 * The queue is an outbox row kept in memory; the publisher has no service
 * store, so its tokens carry no registration.  A failed flush keeps the
 * minted batch for a retry with the same ids and tokens.  A crash between
 * minting and delivery leaves those tokens behind: they are never honoured
 * twice, since no record carries them.
 *
 * Messages queued with a caller id go through the ingress edge in the
 * same minting transaction (tokens/tokens.h publish_mint): a natural
 * duplicate reuses the original's id and token, or is not sent at all; a
 * synthetic one is refused.  The batch is dispatched as one view row per
 * message, so that every message keeps its own tbx-seq (an original's)
 * and its own delivery outcome.
 *
 * With tokens.format = set the tokens are token sets instead
 * (docs/batched-tokens.md): each message's partition is chosen before the
 * mint (consumer/partition.h), the mint makes one set per topic and
 * partition of the flush, and each message is produced to its partition
 * with tbx-tset and tbx-tbit.  Replays for one group (tbx__publish_replay)
 * keep per-message tokens: a set is minted for every subscribed group.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/crash.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/publish.h"
#include "consumer/stores.h"
#include "base/sha256.h"
#include "consumer/conf.h"
#include "consumer/msg.h"
#include "consumer/partition.h"
#include "consumer/producer.h"
#include "store/pg.h"
#include "tokens/tokens.h"

/* What the publisher keeps per queued message besides its outgoing
 * message: the edge's view of it and what became of it. */
typedef struct pub_msg {
	char *caller_id; /* NULL: none */
	char *grp;	 /* NULL: every subscribed group; else only this one */
	uint8_t fp[TBX_EDGE_FP_LEN];
	int64_t seq; /* tbx-seq to send */
	tbx__edge_verdict_t verdict;
	tbx_outcome_t outcome;
} pub_msg_t;

struct tbx_publisher {
	tbx_conf_t *conf;
	const tbx__cfg_t *cfg; /* conf's typed values */
	tbx_tokens_t *tokens;
	rd_kafka_t *producer;
	tbx__row_t queue;
	pub_msg_t *ext; /* one per queued message */
	size_t ext_cap;
	int flushed; /* the queue is the last flushed batch, finished */
	int minted;  /* the queue holds a minted batch not yet delivered */
	tbx_publisher_stats_t stats;
	char store_id[TBX_UUID_LEN + 1]; /* tbx-store of what it mints */
	int caller_reports; /* tbx__publisher_caller_reports_refusals() */
	char errstr[512];
	tbx__tracer_t *tracer;	   /* NULL: tracing off */
	tbx__partitioner_t *parts; /* tokens.format = set; else NULL */
};

void tbx__publisher_caller_reports_refusals(tbx_publisher_t *pub)
{
	pub->caller_reports = 1;
}

tbx_publisher_t *tbx_publisher_new(tbx_conf_t *conf, char *errstr,
				   size_t errstr_size)
{
	const tbx__cfg_t *cfg;
	tbx_publisher_t *pub;

	if (!conf) {
		tbx__seterr(errstr, errstr_size, TBX_EINVAL, "conf is NULL");
		return NULL;
	}
	tbx__crashpoints_arm();
	cfg = tbx__conf_cfg(conf);
	if (!tbx__stores_tokens_set(cfg)) {
		tbx__seterr(errstr, errstr_size, TBX_ECONF,
			    "tokens.path: required configuration key is not "
			    "set (the token store of the receiving groups; "
			    "tokens.url on PostgreSQL)");
		return NULL;
	}
	if (tbx__conf_check_required(conf, "publisher", errstr, errstr_size))
		return NULL;
	tbx__conf_log_configure(conf, NULL);
	if (!(pub = calloc(1, sizeof(*pub)))) {
		tbx__seterr(errstr, errstr_size, TBX_ENOMEM, "out of memory");
		return NULL;
	}
	tbx__row_init(&pub->queue);
	if (tbx__stores_open_publisher(cfg, &pub->tokens, errstr, errstr_size))
		goto fail;
	if (tbx_tokens_store_id(pub->tokens, pub->store_id)) {
		char where[600];

		tbx__seterr(
		    errstr, errstr_size, TBX_ESTORE,
		    "%s: cannot read the token store's id",
		    tbx__stores_tokens_where(cfg, where, sizeof(where)));
		goto fail;
	}
	if (cfg->tokens_format == TBX_TOKFMT_SET) {
		int yes = 0;
		char where[600];

		if (tbx_tokens_has(pub->tokens, TBX_TOKENS_HAS_EDGE_SETS,
				   &yes) ||
		    !yes) {
			tbx__seterr(
			    errstr, errstr_size, TBX_ECONF,
			    "tokens.format = set: the token store %s cannot "
			    "record token sets at the ingress edge (it needs "
			    "SQLite schema 14 or PostgreSQL token version 4; "
			    "opened read-only it is not migrated)",
			    tbx__stores_tokens_where(cfg, where,
						     sizeof(where)));
			goto fail;
		}
	}
	if (!(pub->producer = tbx__producer_new(conf, errstr, errstr_size)))
		goto fail;
	if (cfg->tokens_format == TBX_TOKFMT_SET &&
	    tbx__partitioner_new(pub->producer, &pub->stats.partition_unknown,
				 &pub->parts, errstr, errstr_size)) {
		rd_kafka_destroy(pub->producer);
		goto fail;
	}
	/* Each message starts a trace, or continues a traceparent given. */
	if (tbx__tracer_new(conf, "tokenbox-publisher", NULL, &pub->tracer,
			    errstr, errstr_size)) {
		tbx__partitioner_destroy(pub->parts);
		rd_kafka_destroy(pub->producer);
		goto fail;
	}
	pub->conf = conf;
	pub->cfg = cfg;
	return pub;
fail:
	tbx_tokens_close(pub->tokens);
	free(pub);
	return NULL;
}

/* Forgets a finished batch before the first message of the next. */
static void batch_reset(tbx_publisher_t *pub)
{
	for (size_t i = 0; i < pub->queue.msg_cnt; i++) {
		free(pub->ext[i].caller_id);
		free(pub->ext[i].grp);
	}
	tbx__row_clear_msgs(&pub->queue);
	pub->queue.mint_seq = 0;
	pub->flushed = 0;
}

/* 1 when @p id may be a caller id: 1..TBX_CALLER_ID_MAX bytes, no control
 * character (it is shown in errors and logs). */
static int caller_id_ok(const char *id)
{
	size_t len = strlen(id);

	if (len == 0 || len > TBX_CALLER_ID_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)id[i] < 0x20 || id[i] == 0x7f)
			return 0;
	return 1;
}

static void put_len(tbx__sha256_t *h, int present, size_t len)
{
	uint8_t b[5] = {(uint8_t)present, (uint8_t)(len >> 24),
			(uint8_t)(len >> 16), (uint8_t)(len >> 8),
			(uint8_t)len};

	tbx__sha256_update(h, b, sizeof(b));
}

/* SHA-256 of the type, key and payload, each length-prefixed (and marked
 * absent or present), so that no two different messages share an input. */
static void fingerprint(const tbx_out_t *out, uint8_t fp[TBX_EDGE_FP_LEN])
{
	static const char tag[] = "tbx-edge-1";
	tbx__sha256_t h;

	tbx__sha256_init(&h);
	tbx__sha256_update(&h, tag, sizeof(tag));
	put_len(&h, 1, strlen(out->type));
	tbx__sha256_update(&h, out->type, strlen(out->type));
	put_len(&h, out->key != NULL, out->key ? out->key_len : 0);
	if (out->key)
		tbx__sha256_update(&h, out->key, out->key_len);
	put_len(&h, out->payload != NULL, out->payload ? out->payload_len : 0);
	if (out->payload)
		tbx__sha256_update(&h, out->payload, out->payload_len);
	tbx__sha256_final(&h, fp);
}

/* Appends @p h, encoded, to the header blob *hdrs. */
static int hdrs_append(void **hdrs, size_t *hdrs_len, const tbx_header_t *h)
{
	void *one, *joined;
	size_t one_len;
	int err;

	if ((err = tbx__hdrs_encode(h, 1, &one, &one_len)))
		return err;
	if (!(joined = realloc(*hdrs, *hdrs_len + one_len))) {
		free(one);
		return TBX_ENOMEM;
	}
	memcpy((char *)joined + *hdrs_len, one, one_len);
	free(one);
	*hdrs = joined;
	*hdrs_len += one_len;
	return TBX_OK;
}

/* Queues @p out; @p extra (a reserved header) is appended to its
 * headers, and @p grp limits its tokens to one group. */
static int queue_msg(tbx_publisher_t *pub, const tbx_out_t *out,
		     const char *caller_id, const tbx_header_t *extra,
		     const char *grp)
{
	pub_msg_t *ext;
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
	if (pub->flushed)
		batch_reset(pub);
	pub->errstr[0] = '\0';
	if (caller_id && !caller_id_ok(caller_id)) {
		snprintf(pub->errstr, sizeof(pub->errstr),
			 "caller id: must be 1 to %d bytes without control "
			 "characters",
			 TBX_CALLER_ID_MAX);
		return TBX_EINVAL;
	}
	if ((err = tbx__out_prepare(out, "tbx_publish", &hdrs, &hdrs_len)))
		return err;
	if (extra && (err = hdrs_append(&hdrs, &hdrs_len, extra))) {
		free(hdrs);
		return err;
	}
	if (pub->tracer) {
		void *traced;
		size_t traced_len;

		err = tbx__trace_out(pub->tracer, NULL, hdrs, hdrs_len, &traced,
				     &traced_len);
		free(hdrs);
		if (err)
			return err;
		hdrs = traced;
		hdrs_len = traced_len;
	}
	if (pub->queue.msg_cnt == pub->ext_cap) {
		size_t cap = pub->ext_cap ? pub->ext_cap * 2 : 16;

		if (!(ext = realloc(pub->ext, cap * sizeof(*ext)))) {
			free(hdrs);
			return TBX_ENOMEM;
		}
		pub->ext = ext;
		pub->ext_cap = cap;
	}
	ext = &pub->ext[pub->queue.msg_cnt];
	memset(ext, 0, sizeof(*ext));
	if ((caller_id && !(ext->caller_id = tbx__strdup(caller_id))) ||
	    (grp && !(ext->grp = tbx__strdup(grp)))) {
		free(ext->caller_id);
		free(hdrs);
		return TBX_ENOMEM;
	}
	if (caller_id)
		fingerprint(out, ext->fp);
	err = tbx__row_add(&pub->queue, out->topic, out->type, out->key,
			   out->key ? out->key_len : 0, out->payload,
			   out->payload_len, hdrs, hdrs_len);
	free(hdrs);
	if (err) {
		free(ext->caller_id);
		free(ext->grp);
		memset(ext, 0, sizeof(*ext));
	}
	return err;
}

int tbx_publish_id(tbx_publisher_t *pub, const tbx_out_t *out,
		   const char *caller_id)
{
	return queue_msg(pub, out, caller_id, NULL, NULL);
}

int tbx__publish_replay(tbx_publisher_t *pub, const tbx_out_t *out,
			const char *caller_id, const char *replay_of,
			const char *grp)
{
	tbx_header_t h = {"tbx-replay-of", replay_of,
			  replay_of ? strlen(replay_of) : 0};

	if (!replay_of || !*replay_of || !grp || !*grp)
		return TBX_EINVAL;
	return queue_msg(pub, out, caller_id, &h, grp);
}

int tbx_publish(tbx_publisher_t *pub, const tbx_out_t *out)
{
	return tbx_publish_id(pub, out, NULL);
}

/* 1 when message @p i repeats the id of an earlier message of the batch
 * (a caller id queued twice: the edge names the first one's id). */
static int earlier_in_batch(const tbx__row_t *queue, size_t i)
{
	for (size_t j = 0; j < i; j++)
		if (strcmp(queue->msgs[j].id, queue->msgs[i].id) == 0)
			return 1;
	return 0;
}

static int producer_renew(tbx_publisher_t *pub);

/* tokens.format = set: the partition of message @p m, chosen before the
 * mint as the producer's partitioner would (a producer is made first
 * when a fatal error left none). */
static int choose_partition(tbx_publisher_t *pub, const tbx__outmsg_t *m,
			    int32_t *part)
{
	int err;

	if (!pub->producer && (err = producer_renew(pub)))
		return err;
	err = tbx__partition_choose(pub->parts, pub->producer, m->topic, m->key,
				    m->key ? m->key_len : 0,
				    (int)pub->cfg->dispatch_timeout_ms, part);
	if (err == TBX_ETIMEOUT)
		snprintf(pub->errstr, sizeof(pub->errstr),
			 "topic %s: its partition count was not learnt from "
			 "the metadata within dispatch.timeout.ms "
			 "(partition_unknown): nothing was minted or sent; "
			 "flush again to retry",
			 m->topic);
	else if (err)
		snprintf(pub->errstr, sizeof(pub->errstr),
			 "topic %s: cannot choose a partition: %s", m->topic,
			 tbx_strerror(err));
	return err;
}

/* One token-store transaction for the whole queue: one sequence number,
 * one token per new message, a token row per subscribed group (or, with
 * tokens.format = set, one set per topic and partition), and the edge's
 * verdict on every message with a caller id. */
static int mint(tbx_publisher_t *pub)
{
	tbx__row_t *queue = &pub->queue;
	tbx__edge_item_t *items;
	int err;

	if (!(items = calloc(queue->msg_cnt, sizeof(*items))))
		return TBX_ENOMEM;
	for (size_t i = 0; i < queue->msg_cnt; i++) {
		items[i].topic = queue->msgs[i].topic;
		items[i].caller_id = pub->ext[i].caller_id;
		items[i].grp = pub->ext[i].grp;
		items[i].fp = pub->ext[i].fp;
		memcpy(items[i].msg_id, queue->msgs[i].id, TBX_UUID_LEN + 1);
		tbx__uuid(items[i].token);
		items[i].part = -1;
		/* A replay for one group keeps a per-message token. */
		if (pub->parts && !items[i].grp) {
			if ((err = choose_partition(pub, &queue->msgs[i],
						    &items[i].part))) {
				free(items);
				return err;
			}
			items[i].in_set = 1;
		}
	}
	/* The sweep keeps ahead of the inserts: the table stays bounded
	 * by the window. */
	err = tbx_tokens_publish_mint(pub->tokens, items, queue->msg_cnt,
				      pub->cfg->ingress_dedup_window_ms,
				      2 * queue->msg_cnt + 100, NULL);
	if (err) {
		free(items);
		snprintf(pub->errstr, sizeof(pub->errstr),
			 "minting tokens failed: %s", tbx_strerror(err));
		return err;
	}
	for (size_t i = 0; i < queue->msg_cnt; i++) {
		tbx__outmsg_t *m = &queue->msgs[i];
		pub_msg_t *ext = &pub->ext[i];

		memcpy(m->id, items[i].msg_id, TBX_UUID_LEN + 1);
		/* The token, or the set and bit, the mint gave (or the
		 * original's, for a natural duplicate), and its partition:
		 * kept for a retried flush. */
		memcpy(m->token, items[i].token, TBX_UUID_LEN + 1);
		memcpy(m->tset, items[i].set_id, TBX_UUID_LEN + 1);
		m->tbit = items[i].bit;
		m->part = m->tset[0] ? items[i].part : -1;
		if (m->tset[0])
			m->token[0] = '\0';
		ext->seq = items[i].seq;
		ext->verdict = items[i].verdict;
		ext->outcome = TBX_OUTCOME_PENDING;
		if (ext->verdict == TBX_EDGE_INFLIGHT &&
		    earlier_in_batch(queue, i))
			ext->verdict = TBX_EDGE_DONE;
		if (ext->verdict == TBX_EDGE_DONE) {
			ext->outcome = TBX_OUTCOME_DUPLICATE;
			pub->stats.duplicates++;
			tbx__log(TBX_LOG_INFO,
				 "publish: caller id '%s' on %s: natural "
				 "duplicate of message %s, not published again",
				 ext->caller_id, m->topic, m->id);
		} else if (ext->verdict == TBX_EDGE_SYNTHETIC) {
			ext->outcome = TBX_OUTCOME_REFUSED;
			pub->stats.refused++;
			tbx__log(pub->caller_reports ? TBX_LOG_INFO
						     : TBX_LOG_WARNING,
				 "publish: caller id '%s' on %s refused: a "
				 "different message was published with this "
				 "id within ingress.dedup.window.ms "
				 "(synthetic duplicate)",
				 ext->caller_id, m->topic);
		}
	}
	free(items);
	pub->minted = 1;
	return TBX_OK;
}

/* 1 when message @p i still has to be delivered. */
static int to_send(const pub_msg_t *ext)
{
	return (ext->verdict == TBX_EDGE_NEW ||
		ext->verdict == TBX_EDGE_INFLIGHT) &&
	       ext->outcome != TBX_OUTCOME_SENT &&
	       ext->outcome != TBX_OUTCOME_RESENT;
}

/* Replaces the producer after a fatal error (see tbx__producer_renew:
 * the minted batch keeps its ids and tokens, so a re-send is dropped by
 * the receivers if the broken producer had delivered it after all). */
static int producer_renew(tbx_publisher_t *pub)
{
	return tbx__producer_renew(&pub->producer, pub->conf, "publisher",
				   &pub->stats.producer_restarts, pub->errstr,
				   sizeof(pub->errstr));
}

/* Marks the edge entries of the batch's delivered messages, so that a
 * later natural duplicate is not sent again.  A failure only costs a
 * harmless copy later (same id and token): logged, not returned. */
static void edge_delivered(tbx_publisher_t *pub)
{
	tbx__row_t *queue = &pub->queue;
	tbx__edge_item_t *items;
	size_t n = 0;
	int err;

	for (size_t i = 0; i < queue->msg_cnt; i++)
		n += pub->ext[i].caller_id &&
		     (pub->ext[i].outcome == TBX_OUTCOME_SENT ||
		      pub->ext[i].outcome == TBX_OUTCOME_RESENT);
	if (!n)
		return;
	if (!(items = calloc(n, sizeof(*items)))) {
		err = TBX_ENOMEM;
		goto out;
	}
	n = 0;
	for (size_t i = 0; i < queue->msg_cnt; i++) {
		if (!pub->ext[i].caller_id ||
		    (pub->ext[i].outcome != TBX_OUTCOME_SENT &&
		     pub->ext[i].outcome != TBX_OUTCOME_RESENT))
			continue;
		items[n].topic = queue->msgs[i].topic;
		items[n].caller_id = pub->ext[i].caller_id;
		memcpy(items[n].msg_id, queue->msgs[i].id, TBX_UUID_LEN + 1);
		items[n++].verdict = TBX_EDGE_NEW;
	}
	err = tbx_tokens_edge_delivered(pub->tokens, items, n);
	free(items);
out:
	if (err)
		tbx__log(TBX_LOG_WARNING,
			 "publish: cannot record the delivery of %zu "
			 "message(s) with caller ids: %s; a re-send within "
			 "ingress.dedup.window.ms goes out again with the same "
			 "id and token",
			 n, tbx_strerror(err));
}

int tbx_publisher_flush(tbx_publisher_t *pub, size_t *failed)
{
	tbx__row_t *queue;
	tbx__row_t *views = NULL, **rows = NULL;
	int *delivered = NULL;
	rd_kafka_resp_err_t *errs = NULL;
	size_t *which = NULL;
	size_t undelivered = 0, refused = 0, cnt = 0;
	const char *first_refused = NULL;
	int err;

	if (failed)
		*failed = 0;
	if (!pub)
		return TBX_EINVAL;
	queue = &pub->queue;
	if (queue->msg_cnt == 0 || pub->flushed)
		return TBX_OK;
	/* A retried batch keeps its tokens and ids: copies are dropped by
	 * the receivers. */
	if (!pub->minted && (err = mint(pub))) {
		if (failed)
			*failed = queue->msg_cnt;
		return err;
	}
	views = calloc(queue->msg_cnt, sizeof(*views));
	rows = calloc(queue->msg_cnt, sizeof(*rows));
	delivered = calloc(queue->msg_cnt, sizeof(*delivered));
	which = calloc(queue->msg_cnt, sizeof(*which));
	errs = calloc(queue->msg_cnt, sizeof(*errs));
	if (!views || !rows || !delivered || !which || !errs) {
		err = TBX_ENOMEM;
		snprintf(pub->errstr, sizeof(pub->errstr), "out of memory");
		if (failed)
			*failed = queue->msg_cnt;
		goto out;
	}
	/* A producer that a fatal error broke in an earlier flush is
	 * replaced first (a failed creation leaves none: dispatch then
	 * reports every message undelivered). */
	producer_renew(pub);
	for (int round = 0;; round++) {
		uint64_t restarts = pub->stats.producer_restarts;

		/* One view per message still to send: its own tbx-seq, its
		 * own delivery report.  The views borrow the queue's
		 * messages. */
		cnt = 0;
		for (size_t i = 0; i < queue->msg_cnt; i++) {
			if (!to_send(&pub->ext[i]))
				continue;
			views[cnt].msgs = &queue->msgs[i];
			views[cnt].msg_cnt = views[cnt].msg_cap = 1;
			views[cnt].mint_seq = pub->ext[i].seq;
			rows[cnt] = &views[cnt];
			which[cnt++] = i;
		}
		tbx__tracer_t *prev = tbx__tracer_dispatch_swap(pub->tracer);
		err =
		    cnt ? tbx__dispatch(pub->producer, pub->store_id, rows, cnt,
					delivered, &undelivered, errs,
					pub->errstr, sizeof(pub->errstr), NULL)
			: TBX_OK;
		tbx__tracer_dispatch_swap(prev);
		for (size_t k = 0; k < cnt; k++) {
			pub_msg_t *ext = &pub->ext[which[k]];

			if (!delivered[k]) {
				ext->outcome = TBX_OUTCOME_UNDELIVERED;
				pub->stats.undelivered++;
				/* The count learnt is stale: asked again at
				 * the next choice (the message keeps its
				 * partition: its set was minted for it). */
				if (pub->parts &&
				    errs[k] ==
					RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION)
					tbx__partition_forget(
					    pub->parts,
					    queue->msgs[which[k]].topic);
			} else if (ext->verdict == TBX_EDGE_INFLIGHT) {
				ext->outcome = TBX_OUTCOME_RESENT;
				pub->stats.resent++;
			} else {
				ext->outcome = TBX_OUTCOME_SENT;
				pub->stats.sent++;
			}
		}
		/* A fatal error during this dispatch: a new producer, and
		 * what the old one did not deliver is sent once more at
		 * once, with the same ids and tokens. */
		if (!err || round > 0 || producer_renew(pub) ||
		    pub->stats.producer_restarts == restarts)
			break;
	}
	for (size_t i = 0; i < queue->msg_cnt; i++) {
		if (pub->ext[i].outcome != TBX_OUTCOME_REFUSED)
			continue;
		if (!refused++)
			first_refused = pub->ext[i].caller_id;
	}
	if (failed)
		*failed = undelivered + refused;
	if (err)
		goto out;
	edge_delivered(pub);
	pub->minted = 0;
	pub->flushed = 1;
	if (refused) {
		snprintf(pub->errstr, sizeof(pub->errstr),
			 "caller id '%s' refused: a different message was "
			 "published with this id within "
			 "ingress.dedup.window.ms (synthetic duplicate)%s",
			 first_refused,
			 refused > 1 ? "; and others (see the outcomes)" : "");
		err = TBX_EEXIST;
	}
out:
	free(views);
	free(rows);
	free(delivered);
	free(which);
	free(errs);
	return err;
}

int tbx_publisher_outcome(const tbx_publisher_t *pub, size_t index,
			  const char **id)
{
	if (!pub || index >= pub->queue.msg_cnt)
		return -1;
	if (id)
		*id = pub->queue.msgs[index].id;
	return (int)pub->ext[index].outcome;
}

void tbx_publisher_stats(const tbx_publisher_t *pub,
			 tbx_publisher_stats_t *stats)
{
	if (!stats)
		return;
	if (!pub) {
		memset(stats, 0, sizeof(*stats));
		return;
	}
	*stats = pub->stats;
	/* The token store's connection counts its own (SQLite: 0). */
	stats->store_reconnects =
	    tbx__pg_reconnects(tbx_tokens_pg(pub->tokens));
}

/* The last error librdkafka reported to the check's client. */
typedef struct check_err {
	char reason[384];
	int all_down; /* every bootstrap broker failed once */
} check_err_t;

static void check_on_error(rd_kafka_t *rk, int err, const char *reason,
			   void *opaque)
{
	check_err_t *ce = opaque;

	/* "1/1 brokers are down" follows the reason why: keep that. */
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
		ce->all_down = 1;
		if (ce->reason[0])
			return;
	}
	snprintf(ce->reason, sizeof(ce->reason), "%s", reason);
}

static void check_on_log(const rd_kafka_t *rk, int level, const char *fac,
			 const char *buf)
{
	/* Silent: the reason reaches the caller through check_on_error. */
}

/* Kafka's rule for topic names. */
static int topic_name_ok(const char *topic)
{
	size_t len = strlen(topic);

	if (len == 0 || len > TBX_TOPIC_MAX || strcmp(topic, ".") == 0 ||
	    strcmp(topic, "..") == 0)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)topic[i]) && topic[i] != '.' &&
		    topic[i] != '_' && topic[i] != '-')
			return 0;
	return 1;
}

int tbx_publisher_check(tbx_publisher_t *pub, const char *topic, int timeout_ms,
			size_t *groups)
{
	check_err_t ce = {{0}, 0};
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_conf_t *kc;
	rd_kafka_t *rk;
	rd_kafka_resp_err_t rerr;
	char rderr[256];
	int64_t subs = 0, deadline;
	int err, found = 0;

	if (groups)
		*groups = 0;
	if (!pub || !topic || timeout_ms < 0)
		return TBX_EINVAL;
	if (!topic_name_ok(topic))
		return tbx__seterr(pub->errstr, sizeof(pub->errstr), TBX_EINVAL,
				   "topic '%s' is not a valid Kafka topic name "
				   "(1 to %d of [a-zA-Z0-9._-], not '.' or "
				   "'..')",
				   topic, TBX_TOPIC_MAX);
	if ((err = tbx_tokens_subscribers(pub->tokens, topic, &subs)))
		return tbx__seterr(pub->errstr, sizeof(pub->errstr), err,
				   "token store: cannot read the subscriptions "
				   "of %s: %s",
				   topic, tbx_strerror(err));
	if (!(kc = tbx__conf_kafka(pub->conf, "producer", pub->errstr,
				   sizeof(pub->errstr))))
		return TBX_ECONF;
	rd_kafka_conf_set_error_cb(kc, check_on_error);
	rd_kafka_conf_set_log_cb(kc, check_on_log);
	rd_kafka_conf_set_opaque(kc, &ce);
	if (!(rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, rderr, sizeof(rderr)))) {
		rd_kafka_conf_destroy(kc);
		return tbx__seterr(pub->errstr, sizeof(pub->errstr), TBX_EKAFKA,
				   "cannot create a client: %s", rderr);
	}
	/* Every topic: asking for this one could create it.  Short waits,
	 * serving the error callback between them, for the reason. */
	deadline = tbx__now_ms() + timeout_ms;
	do {
		int64_t left = deadline - tbx__now_ms();

		rerr = rd_kafka_metadata(rk, 1, NULL, &md,
					 left < 200 ? (int)(left > 0 ? left : 0)
						    : 200);
		rd_kafka_poll(rk, 0);
	} while ((rerr == RD_KAFKA_RESP_ERR__TRANSPORT ||
		  rerr == RD_KAFKA_RESP_ERR__TIMED_OUT) &&
		 !ce.all_down && tbx__now_ms() < deadline);
	if (rerr == RD_KAFKA_RESP_ERR__TRANSPORT ||
	    rerr == RD_KAFKA_RESP_ERR__TIMED_OUT) {
		err = tbx__seterr(
		    pub->errstr, sizeof(pub->errstr), TBX_ETIMEOUT,
		    "cannot reach the brokers of %s: %s",
		    tbx_conf_get(pub->conf, "kafka.bootstrap.servers"),
		    ce.reason[0] ? ce.reason : rd_kafka_err2str(rerr));
	} else if (rerr) {
		err = tbx__seterr(pub->errstr, sizeof(pub->errstr), TBX_EKAFKA,
				  "metadata request failed: %s%s%s",
				  rd_kafka_err2str(rerr),
				  ce.reason[0] ? ": " : "", ce.reason);
	} else {
		rd_kafka_resp_err_t terr = RD_KAFKA_RESP_ERR_NO_ERROR;

		for (int i = 0; i < md->topic_cnt && !found; i++)
			if (strcmp(md->topics[i].topic, topic) == 0) {
				found = 1;
				terr = md->topics[i].err;
			}
		if (found && terr == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
			found = 0;
		if (!found)
			err = tbx__seterr(
			    pub->errstr, sizeof(pub->errstr), TBX_ENOENT,
			    "topic %s does not exist on the brokers of %s",
			    topic,
			    tbx_conf_get(pub->conf, "kafka.bootstrap.servers"));
		else if (terr)
			err = tbx__seterr(pub->errstr, sizeof(pub->errstr),
					  TBX_EKAFKA, "topic %s: %s", topic,
					  rd_kafka_err2str(terr));
		else
			err = TBX_OK;
	}
	if (md)
		rd_kafka_metadata_destroy(md);
	rd_kafka_destroy(rk);
	if (!err && groups)
		*groups = (size_t)subs;
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
	for (size_t i = 0; i < pub->queue.msg_cnt; i++) {
		free(pub->ext[i].caller_id);
		free(pub->ext[i].grp);
	}
	free(pub->ext);
	tbx__row_clear(&pub->queue);
	tbx__tracer_free(pub->tracer, 2000);
	tbx__partitioner_destroy(pub->parts);
	tbx_tokens_close(pub->tokens);
	tbx_conf_destroy(pub->conf);
	free(pub);
}

const char *tbx_publisher_errstr(const tbx_publisher_t *pub)
{
	return pub ? pub->errstr : "";
}
