/*
 * The consumer-group loop: lifecycle, subscription, rebalances, batches
 * and partitions that wait for a retry.
 *
 * Batches are built from rd_kafka_consumer_poll(): librdkafka 2.0's batch
 * consume calls can skip or repeat offsets around pause, seek and
 * rebalance.  A batch is processed between polls, so the rebalance
 * callback (served inside poll) only ever sees a batch being collected; it
 * drops the records of revoked partitions from it.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/crash.h"
#include "base/file.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/producer.h"
#include "consumer/resume_mem.h"
#include "consumer/stores.h"
#include "consumer/worker.h"
#include "store/db.h"
#include "tokens/sweep.h"

/* How long after a refused offset commit it is sent again, ms. */
#define RECOMMIT_DELAY_MS 500

__attribute__((format(printf, 3, 4))) static int
fail(tbx_worker_t *worker, int err, const char *fmt, ...)
{
	const char *scope = tbx__log_scope(worker->log_tag);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(worker->errstr, sizeof(worker->errstr), fmt, ap);
	va_end(ap);
	tbx__log(TBX_LOG_ERR, "%s", worker->errstr);
	tbx__log_scope(scope);
	return err;
}

/* The protocol's context, from the worker's stores, producer, handlers,
 * settings and stats (the settings are read into the worker first). */
static void worker_proto_init(tbx_worker_t *worker)
{
	tbx__proto_t *proto = &worker->proto;

	proto->store = worker->store;
	proto->tokens = worker->tokens;
	proto->producer = &worker->producer;
	proto->conf = worker->conf;
	proto->router = worker->router;
	proto->stats = &worker->stats;
	proto->errstr = worker->errstr;
	proto->errstr_size = sizeof(worker->errstr);
	proto->group = worker->group;
	proto->store_id = worker->store_id;
	proto->dlq_suffix = worker->cfg->dlq_suffix;
	proto->joined = worker->joined;
	proto->batch_max = (int)worker->cfg->batch_max_messages;
	proto->retry_max = (int)worker->cfg->retry_max;
	proto->backoff_ms = (int)worker->cfg->retry_backoff_ms;
	proto->backoff_max_ms = (int)worker->cfg->retry_backoff_max_ms;
	proto->untokened_offsets =
	    worker->cfg->ingress_untokened == TBX_UNTOKENED_OFFSETS;
	proto->mismatch_stop =
	    worker->cfg->token_store_mismatch == TBX_MISMATCH_STOP;
	proto->dispatch_retry_max = worker->cfg->dispatch_retry_max;
	proto->defer_finish = worker->joined && worker->cfg->finish_defer &&
			      !worker->cfg->store_url[0];
	proto->batch_layout = worker->cfg->outbox_layout == TBX_LAYOUT_BATCH;
	proto->own_sets =
	    proto->batch_layout && worker->cfg->tokens_format == TBX_TOKFMT_SET;
	proto->dispatch_timeout_ms = (int)worker->cfg->dispatch_timeout_ms;
	tbx__proto_init(proto);
}

/* Records in the service store which token store the group's workers
 * use, for `tokenbox inspect` to tell a wrong pair of stores; in a
 * transaction of its own.  A group that used another token store before
 * is told at WARN and raises the token_store_changed alarm: records
 * minted in the other store will be dead-lettered as mismatched.
 * @returns TBX_OK or the error, with @p errstr set. */
static int record_binding(tbx_worker_t *worker, const tbx__cfg_t *cfg,
			  char *errstr, size_t errstr_size)
{
	char where[600], detail[1600];
	tbx__binding_prev_t prev;
	int err, changed = 0;

	tbx__stores_tokens_where(cfg, where, sizeof(where));
	if (!(err = tbx_outbox_begin(worker->store)) &&
	    !(err = tbx_outbox_binding_set(worker->store, worker->group,
					   worker->store_id, where, &prev))) {
		changed =
		    prev.found && strcmp(prev.tokens_id, worker->store_id) != 0;
		if (changed) {
			snprintf(detail, sizeof(detail),
				 "the group's workers used token store %s "
				 "(%s); this worker uses %s (%s)",
				 prev.tokens_id, prev.tokens_where,
				 worker->store_id, where);
			err =
			    tbx_outbox_alarm_add(worker->store, worker->group,
						 "token_store_changed", detail);
		}
	}
	if (!err)
		err = tbx_outbox_commit(worker->store);
	else
		tbx_outbox_rollback(worker->store);
	if (err)
		tbx__seterr(errstr, errstr_size, err,
			    "cannot record the token store in the service "
			    "store: %s (%s)",
			    tbx_strerror(err),
			    tbx_outbox_errmsg(worker->store)
				? tbx_outbox_errmsg(worker->store)
				: "no detail");
	else if (changed)
		tbx__log(TBX_LOG_WARNING,
			 "group %s changed token store: its workers used "
			 "token store %s (%s), last started %" PRId64
			 " s ago; this worker uses %s (%s). Records minted in "
			 "the other store will be dead-lettered as a store "
			 "mismatch: check tokens.path/tokens.url (alarm "
			 "token_store_changed)",
			 worker->group, prev.tokens_id, prev.tokens_where,
			 (tbx__now_ms() - prev.used_ms) / 1000,
			 worker->store_id, where);
	return err;
}

tbx_worker_t *tbx_worker_new(tbx_conf_t *conf, char *errstr, size_t errstr_size)
{
	int err;

	return tbx__worker_new_err(conf, &err, errstr, errstr_size);
}

tbx_worker_t *tbx__worker_new_err(tbx_conf_t *conf, int *errp, char *errstr,
				  size_t errstr_size)
{
	const tbx__cfg_t *cfg;
	tbx_worker_t *worker;
	const char *scope;
	int err;

	if (!conf) {
		*errp = tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				    "conf is NULL");
		return NULL;
	}
	tbx__crashpoints_arm();
	if ((*errp =
		 tbx__conf_check_required(conf, "worker", errstr, errstr_size)))
		return NULL;
	if (!(worker = calloc(1, sizeof(*worker)))) {
		*errp = tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				    "out of memory");
		return NULL;
	}
	cfg = tbx__conf_cfg(conf);
	tbx__strlcpy(worker->group, cfg->group_id, sizeof(worker->group));
	if (*cfg->worker_id)
		tbx__strlcpy(worker->log_tag, cfg->worker_id,
			     sizeof(worker->log_tag));
	else
		snprintf(worker->log_tag, sizeof(worker->log_tag), "%s/%d",
			 worker->group, (int)getpid());
	/* The level and format are the process's; the tag is the worker's
	 * own, in every call of it: several workers share a process. */
	tbx__conf_log_configure(conf, NULL);
	scope = tbx__log_scope(worker->log_tag);

	if ((err = tbx__stores_open_worker(cfg, &worker->store, &worker->tokens,
					   errstr, errstr_size)))
		goto fail;
	if ((err = tbx_tokens_store_id(worker->tokens, worker->store_id))) {
		char where[600];

		tbx__seterr(
		    errstr, errstr_size, err,
		    "%s: cannot read the token store's id",
		    tbx__stores_tokens_where(cfg, where, sizeof(where)));
		goto fail;
	}
	if ((err = record_binding(worker, cfg, errstr, errstr_size)))
		goto fail;
	/* One layout per group: before the worker joins it. */
	worker->cfg = cfg;
	if ((err = tbx__layout_check(worker, "at start", errstr, errstr_size)))
		goto fail;
	worker->joined = tbx_tokens_joinable(worker->tokens);
	/* tokens.format = set needs outbox.layout = batch: refused with the
	 * required keys (tbx__conf_check_required()). */
	/* outbox.layout = batch, stage 1 (docs/batched-tokens.md): a
	 * service store with batch rows. */
	if (cfg->outbox_layout == TBX_LAYOUT_BATCH) {
		if ((err = tbx__stores_batch_ready(cfg, worker->store, errstr,
						   errstr_size)))
			goto fail;
		if (cfg->tokens_format == TBX_TOKFMT_SET) {
			int yes = 0;

			if ((err = tbx_tokens_has(worker->tokens,
						  TBX_TOKENS_HAS_SETS, &yes)) ||
			    !yes) {
				char where[600];

				err = tbx__seterr(
				    errstr, errstr_size,
				    err ? err : TBX_ESCHEMA,
				    "tokens.format=set: the token store %s "
				    "cannot hold token sets (tbx_tset, "
				    "tbx_breg); migrate it or use "
				    "tokens.format=message",
				    tbx__stores_tokens_where(cfg, where,
							     sizeof(where)));
				goto fail;
			}
		}
		if ((err = tbx__resume_mem_new(worker->group,
					       &worker->proto.rmem))) {
			tbx__seterr(errstr, errstr_size, err,
				    "outbox.layout=batch: %s",
				    tbx_strerror(err));
			goto fail;
		}
	}
	if (!(worker->router = tbx_router_new())) {
		err = tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				  "out of memory");
		goto fail;
	}
	/* OTEL_* and otel.*: off (NULL) unless an endpoint is given. */
	if ((err = tbx__tracer_new(conf, worker->group, worker->group,
				   &worker->batch.tracer, errstr, errstr_size)))
		goto fail;
	/* The recovery pass's dispatches record send spans too. */
	worker->recovery.tracer = worker->batch.tracer;
	atomic_init(&worker->stop, 0);
	worker->conf = conf;
	worker->cfg = cfg;
	/* G relaxes the service store's durability for its own commit and
	 * restores this level afterwards (tbx_outbox_relaxed()). */
	worker_proto_init(worker);
	if ((err = tbx__worker_metrics_start(worker, errstr, errstr_size))) {
		worker->conf = NULL;
		goto fail;
	}
	tbx__worker_metrics_refresh(worker, 1);
	*errp = TBX_OK;
	tbx__log_scope(scope);
	return worker;
fail:
	tbx__tracer_free(worker->batch.tracer, 0);
	tbx__resume_mem_destroy(worker->proto.rmem);
	*errp = err;
	tbx_tokens_close(worker->tokens);
	tbx_outbox_close(worker->store);
	tbx_router_destroy(worker->router);
	tbx__log_scope(scope);
	free(worker);
	return NULL;
}

tbx_worker_t *tbx__worker_new_check(tbx_conf_t *conf, char *errstr,
				    size_t errstr_size)
{
	const tbx__cfg_t *cfg = tbx__conf_cfg(conf);
	tbx_worker_t *worker;

	if (tbx__conf_check_required(conf, "worker", errstr, errstr_size) ||
	    tbx__stores_check(cfg, errstr, errstr_size))
		return NULL;
	if (!(worker = calloc(1, sizeof(*worker))) ||
	    !(worker->router = tbx_router_new())) {
		free(worker);
		tbx__seterr(errstr, errstr_size, TBX_ENOMEM, "out of memory");
		return NULL;
	}
	tbx__strlcpy(worker->group, cfg->group_id, sizeof(worker->group));
	/* Never started: tbx_worker_poll() refuses it. */
	worker->closed = 1;
	atomic_init(&worker->stop, 1);
	worker->conf = conf;
	worker->cfg = cfg;
	return worker;
}

const char *tbx__worker_log_tag(const tbx_worker_t *worker)
{
	return worker->log_tag;
}

size_t tbx__worker_topic_count(const tbx_worker_t *worker)
{
	return tbx_router_topic_count(worker->router);
}

const char *tbx__worker_topic(const tbx_worker_t *worker, size_t i)
{
	return tbx_router_topic(worker->router, i);
}

const char *tbx_worker_conf_get(const tbx_worker_t *worker, const char *name)
{
	return worker ? tbx_conf_get(worker->conf, name) : NULL;
}

int tbx_worker_register(tbx_worker_t *worker, const char *topic,
			const char *type, tbx_handler_fn fn, void *opaque)
{
	if (!worker)
		return TBX_EINVAL;
	if (worker->started)
		return TBX_ESTATE;
	/* Tokens are minted per topic name: a pattern would subscribe the
	 * group to topics whose senders mint nothing for it. */
	if (topic && *topic == '^')
		return fail(worker, TBX_EINVAL,
			    "topic '%s': pattern subscriptions are not "
			    "supported (senders mint tokens per topic name "
			    "and cannot know which groups a pattern "
			    "covers); register each topic by its name",
			    topic);
	if (topic && !tbx__topic_valid(topic))
		return fail(worker, TBX_EINVAL,
			    "topic '%s' is not a Kafka topic name (1 to 249 "
			    "characters of a-z, A-Z, 0-9, '.', '_', '-'; "
			    "not '.' or '..')",
			    topic);
	return tbx_router_add(worker->router, topic, type, fn, opaque);
}

tbx__part_t *tbx__part_get(tbx_worker_t *worker, const char *topic,
			   int32_t partition, int create)
{
	tbx__part_t *part;

	for (size_t i = 0; i < worker->part_cnt; i++) {
		part = &worker->parts[i];
		if (part->partition == partition &&
		    strcmp(part->topic, topic) == 0)
			return part;
	}
	if (!create)
		return NULL;
	if (worker->part_cnt == worker->part_cap) {
		size_t cap = worker->part_cap ? worker->part_cap * 2 : 16;
		tbx__part_t *grown =
		    realloc(worker->parts, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		/* Batch records point at parts: collection never spans a
		 * realloc because assignment happens before records of the
		 * new partitions arrive, and revocation only shrinks. */
		for (size_t i = 0; i < worker->batch.cnt; i++)
			worker->batch.msgs[i].part =
			    grown +
			    (worker->batch.msgs[i].part - worker->parts);
		worker->parts = grown;
		worker->part_cap = cap;
	}
	part = &worker->parts[worker->part_cnt++];
	memset(part, 0, sizeof(*part));
	tbx__strlcpy(part->topic, topic, sizeof(part->topic));
	part->partition = partition;
	part->count_offset = -1;
	for (size_t i = 0; i < tbx_router_topic_count(worker->router); i++)
		if (strcmp(tbx_router_topic(worker->router, i), topic) == 0)
			part->since = worker->since[i];
	return part;
}

static void part_remove(tbx_worker_t *worker, const char *topic,
			int32_t partition)
{
	tbx__part_t *part = tbx__part_get(worker, topic, partition, 0);
	size_t idx;

	if (!part)
		return;
	idx = (size_t)(part - worker->parts);
	/* The batch must not keep records of a partition being removed:
	 * the caller dropped them first.  Records of the moved last part
	 * are re-pointed. */
	tbx__part_t *last = &worker->parts[worker->part_cnt - 1];
	for (size_t i = 0; i < worker->batch.cnt; i++)
		if (worker->batch.msgs[i].part == last)
			worker->batch.msgs[i].part = part;
	worker->parts[idx] = *last;
	worker->part_cnt--;
}

static rd_kafka_topic_partition_list_t *one_part(const tbx__part_t *part,
						 int64_t offset)
{
	rd_kafka_topic_partition_list_t *list =
	    rd_kafka_topic_partition_list_new(1);

	rd_kafka_topic_partition_list_add(list, part->topic, part->partition)
	    ->offset = offset;
	return list;
}

/* Pauses @p part and arranges to restart it at @p offset after a backoff
 * of @p delay_ms (a hold F decided). */
static void part_hold(tbx_worker_t *worker, tbx__part_t *part, int64_t offset,
		      int64_t delay_ms)
{
	rd_kafka_topic_partition_list_t *list;

	part->seek_offset = offset;
	part->resume_at_ms = tbx__mono_ms() + delay_ms;
	if (part->paused)
		return;
	part->paused = 1;
	list = one_part(part, offset);
	rd_kafka_pause_partitions(worker->consumer, list);
	rd_kafka_topic_partition_list_destroy(list);
	tbx__log(TBX_LOG_INFO,
		 "%s [%" PRId32 "] waits %" PRId64
		 " ms, then resumes at offset %" PRId64,
		 part->topic, part->partition, delay_ms, offset);
}

/* Resumes partitions whose wait is over: seek back to the first record
 * not done, then resume fetching.  Records fetched before the seek are
 * discarded by librdkafka (the seek bumps the fetch version). */
static void resume_due(tbx_worker_t *worker)
{
	int64_t now = tbx__mono_ms();

	for (size_t i = 0; i < worker->part_cnt; i++) {
		tbx__part_t *part = &worker->parts[i];
		rd_kafka_topic_partition_list_t *list;
		rd_kafka_error_t *error;

		if (!part->paused || now < part->resume_at_ms)
			continue;
		list = one_part(part, part->seek_offset);
		error = rd_kafka_seek_partitions(worker->consumer, list, 5000);
		if (error) {
			tbx__log(TBX_LOG_WARNING,
				 "%s [%" PRId32 "]: seek failed: %s; retrying",
				 part->topic, part->partition,
				 rd_kafka_error_string(error));
			rd_kafka_error_destroy(error);
			rd_kafka_topic_partition_list_destroy(list);
			part->resume_at_ms =
			    now + worker->cfg->retry_backoff_ms;
			continue;
		}
		rd_kafka_resume_partitions(worker->consumer, list);
		rd_kafka_topic_partition_list_destroy(list);
		part->paused = 0;
	}
}

/* Drops the batch unprocessed while its partitions stay assigned: each is
 * held at its first record in the batch, to be fetched again from there
 * (the consumer's position is past the records polled, and past those
 * kept from the last batch). */
static void batch_abandon(tbx_worker_t *worker)
{
	tbx__batch_t *batch = &worker->batch;

	/* No record of a paused partition is in a batch (batch_push()):
	 * the first of each partition pauses it. */
	for (size_t i = 0; i < batch->cnt; i++)
		if (!batch->msgs[i].part->paused)
			part_hold(worker, batch->msgs[i].part,
				  batch->msgs[i].rkm->offset, 0);
	tbx__batch_reset(batch);
}

/* Drops batch records of partitions in @p parts (revoked). */
static void batch_drop(tbx_worker_t *worker,
		       const rd_kafka_topic_partition_list_t *parts)
{
	tbx__batch_t *batch = &worker->batch;
	size_t kept = 0;

	for (size_t i = 0; i < batch->cnt; i++) {
		struct tbx_msg *msg = &batch->msgs[i];
		int revoked = 0;
		for (int j = 0; j < parts->cnt && !revoked; j++)
			revoked =
			    parts->elems[j].partition == msg->rkm->partition &&
			    strcmp(parts->elems[j].topic, msg->topic) == 0;
		if (revoked)
			rd_kafka_message_destroy(msg->rkm);
		else
			batch->msgs[kept++] = *msg;
	}
	batch->cnt = kept;
}

/* Stores @p offsets and, when @p async, commits them asynchronously
 * (else the caller's synchronous commit of the stored offsets follows). */
static void offsets_commit(tbx_worker_t *worker,
			   rd_kafka_topic_partition_list_t *offsets, int async)
{
	rd_kafka_resp_err_t rerr;

	if (!offsets->cnt)
		return;
	if ((rerr = rd_kafka_offsets_store(worker->consumer, offsets)))
		tbx__log(TBX_LOG_INFO, "offsets store: %s",
			 rd_kafka_err2str(rerr));
	if (async && (rerr = rd_kafka_commit(worker->consumer, offsets, 1)))
		tbx__log(TBX_LOG_INFO, "commit: %s", rd_kafka_err2str(rerr));
}

/*
 * finish.defer: commits the D+E that wait for a next batch (proto_finish.c)
 * in a transaction of their own, then stores and commits the offsets
 * that were behind them, waiting for the commit when @p sync.  A failure
 * leaves rows and offsets waiting for the next batch or flush, and is
 * counted as a failed phase.  @returns TBX_OK or the store's error.
 */
static int finish_waiting(tbx_worker_t *worker, const char *when, int sync)
{
	rd_kafka_topic_partition_list_t *offsets;
	size_t rows = tbx__proto_waiting(&worker->proto);
	int err;

	if (rows && (err = tbx__proto_flush(&worker->proto))) {
		worker->stats.retries++;
		tbx__log(TBX_LOG_WARNING,
			 "%s: finishing %zu delivered rows failed: %s (their "
			 "offsets wait; tried again with the next batch)",
			 when, rows, tbx_strerror(err));
		return err;
	}
	if (!worker->consumer)
		return TBX_OK;
	offsets = rd_kafka_topic_partition_list_new(4);
	tbx__proto_take_ready(&worker->proto, offsets);
	offsets_commit(worker, offsets, !sync);
	rd_kafka_topic_partition_list_destroy(offsets);
	return TBX_OK;
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
			 rd_kafka_topic_partition_list_t *parts, void *opaque)
{
	tbx_worker_t *worker = opaque;
	int coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
	rd_kafka_error_t *error = NULL;

	/* Nothing the resume check's memory holds is trusted after a
	 * rebalance (docs/batched-tokens.md, "The resume check"). */
	if (worker->proto.rmem) {
		tbx__resume_mem_drop(worker->proto.rmem);
		tbx__ob_stats(&worker->proto);
	}
	if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		worker->assigned_once = 1;
		/* At the next step, outside the callback, before a record
		 * of these partitions is processed. */
		worker->layout_due = 1;
		for (int i = 0; i < parts->cnt; i++)
			tbx__part_get(worker, parts->elems[i].topic,
				      parts->elems[i].partition, 1);
		tbx__membership_changed(worker, 1, parts, 0);
		/* At the next poll, outside the callback: rows of these
		 * partitions left below their committed offset. */
		worker->recovery_due = 1;
		if (coop)
			error = rd_kafka_incremental_assign(rk, parts);
		else
			rd_kafka_assign(rk, parts);
		/* librdkafka may keep a pause flag of an earlier assignment;
		 * tokenbox's own wait state was dropped with the revoke. */
		rd_kafka_resume_partitions(rk, parts);
	} else {
		/* Revoked (or an error): what is done was stored after the
		 * last batch (the rows whose D+E wait are finished first);
		 * commit it now while we still own it.  Records of these
		 * partitions in the batch being collected are dropped
		 * unprocessed: the next owner starts from the committed
		 * offset. */
		int lost = rd_kafka_assignment_lost(rk);

		finish_waiting(worker, "revocation", 1);
		if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS && !lost)
			rd_kafka_commit(rk, NULL, 0);
		tbx__proto_forget(&worker->proto, parts);
		batch_drop(worker, parts);
		for (int i = 0; i < parts->cnt; i++)
			part_remove(worker, parts->elems[i].topic,
				    parts->elems[i].partition);
		tbx__membership_changed(worker, 0, parts, lost);
		if (coop)
			error = rd_kafka_incremental_unassign(rk, parts);
		else
			rd_kafka_assign(rk, NULL);
	}
	if (error) {
		tbx__log(TBX_LOG_ERR, "rebalance: %s",
			 rd_kafka_error_string(error));
		rd_kafka_error_destroy(error);
	}
}

/*
 * The result of an offset commit.  The group refuses commits while it
 * rebalances (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID);
 * a member that keeps its partitions through the rebalance (cooperative
 * assignment) and has nothing more to process would not commit again, and
 * the group's committed offsets would stay behind the records it
 * processed.  So a refused commit is sent again from the poll loop: the
 * stored offsets of the partitions still assigned.
 */
static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
		      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
	tbx_worker_t *worker = opaque;
	rd_kafka_resp_err_t first = err;

	tbx__commit_watch_result(worker, err, offsets);
	for (int i = 0; offsets && !first && i < offsets->cnt; i++)
		first = offsets->elems[i].err;
	if (!first || first == RD_KAFKA_RESP_ERR__NO_OFFSET)
		return;
	worker->stats.commits_retried++;
	if (!worker->recommit) {
		worker->recommit = 1;
		worker->next_recommit_ms = tbx__mono_ms() + RECOMMIT_DELAY_MS;
	}
	/* Refusals of a rebalance are expected; anything else is news. */
	tbx__log(first == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS ||
			 first == RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION ||
			 first == RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID
		     ? TBX_LOG_INFO
		     : TBX_LOG_WARNING,
		 "offset commit refused (%s): committing again in %d ms",
		 rd_kafka_err2str(first), RECOMMIT_DELAY_MS);
}

/* Sends the commit on_commit() asked for, once it is due. */
static void recommit_due(tbx_worker_t *worker)
{
	if (!worker->recommit || !worker->consumer ||
	    tbx__mono_ms() < worker->next_recommit_ms)
		return;
	worker->recommit = 0;
	rd_kafka_commit(worker->consumer, NULL, 1);
}

static void on_consumer_log(const rd_kafka_t *rk, int level, const char *fac,
			    const char *buf)
{
	const tbx_worker_t *worker = rd_kafka_opaque(rk);
	/* librdkafka's own threads log too: named after the worker. */
	const char *scope = tbx__log_scope(worker ? worker->log_tag : NULL);

	/* Commits refused around a rebalance are expected: what they
	 * covered is redelivered and deduplicated. */
	if (strcmp(fac, "COMMITFAIL") == 0 && level >= TBX_LOG_WARNING)
		level = TBX_LOG_INFO;
	tbx__log(level < TBX_LOG_WARNING ? TBX_LOG_WARNING : level,
		 "librdkafka %s: %s", fac, buf);
	tbx__log_scope(scope);
}

static void on_consumer_error(rd_kafka_t *rk, int err, const char *reason,
			      void *opaque)
{
	tbx__log(err == RD_KAFKA_RESP_ERR__FATAL ? TBX_LOG_ERR : TBX_LOG_INFO,
		 "consumer: %s: %s", rd_kafka_err2name(err), reason);
}

/* Subscribes the group in the token store (so senders mint its tokens
 * from now on), then to Kafka. */
static int start_clients(tbx_worker_t *worker, size_t n);

static int start(tbx_worker_t *worker)
{
	size_t n = tbx_router_topic_count(worker->router);
	int err;

	if (n == 0)
		return fail(worker, TBX_ESTATE, "%s",
			    "no handler registered: nothing to consume");
	/* A failed start is retried by the next poll from scratch. */
	free(worker->since);
	if (!(worker->since = calloc(n, sizeof(*worker->since))))
		return TBX_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *topic = tbx_router_topic(worker->router, i);
		if ((err = tbx_tokens_subscribe(worker->tokens, topic,
						worker->group,
						&worker->since[i])))
			return fail(worker, err,
				    "cannot record the subscription to %s in "
				    "the token store",
				    topic);
	}
	if ((err = start_clients(worker, n))) {
		if (worker->consumer) {
			rd_kafka_destroy(worker->consumer);
			worker->consumer = NULL;
		}
		if (worker->producer) {
			rd_kafka_destroy(worker->producer);
			worker->producer = NULL;
		}
		return err;
	}
	worker->next_cleanup_ms =
	    tbx__mono_ms() + worker->cfg->cleanup_interval_ms;
	worker->next_recovery_ms =
	    tbx__mono_ms() + worker->cfg->recovery_interval_ms;
	worker->next_stats_ms = tbx__mono_ms() + worker->cfg->stats_interval_ms;
	worker->started = 1;
	/* No partition until the group assigns some (membership.c);
	 * tbx__worker_assign_directly() has assigned them already. */
	if (worker->part_cnt == 0)
		worker->unassigned_since_ms = tbx__mono_ms();
	tbx__worker_metrics_refresh(worker, 1);
	tbx__log(TBX_LOG_NOTICE,
		 "started: joining group %s for %zu topic(s), waiting for "
		 "partitions",
		 worker->group, n);
	return TBX_OK;
}

void tbx__worker_assign_directly(tbx_worker_t *worker)
{
	worker->assign_direct = 1;
}

int tbx__worker_trace_to(tbx_worker_t *worker, tbx__span_sink_fn *sink,
			 void *opaque)
{
	tbx__tracer_t *t = tbx__tracer_new_sink(worker->group, sink, opaque);

	if (!t)
		return TBX_ENOMEM;
	tbx__tracer_free(worker->batch.tracer, 0);
	worker->batch.tracer = worker->recovery.tracer = t;
	return TBX_OK;
}

/* tbx__worker_assign_directly(): every partition of @p topics, from the
 * group's committed offsets, through the rebalance callback's own path
 * (the group is not joined: the callback is not called otherwise). */
static rd_kafka_resp_err_t
assign_directly(tbx_worker_t *worker,
		const rd_kafka_topic_partition_list_t *topics)
{
	rd_kafka_topic_partition_list_t *parts =
	    rd_kafka_topic_partition_list_new(topics->cnt);
	rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;

	for (int i = 0; !err && i < topics->cnt; i++) {
		const struct rd_kafka_metadata *md = NULL;
		rd_kafka_topic_t *rkt = rd_kafka_topic_new(
		    worker->consumer, topics->elems[i].topic, NULL);

		err = rd_kafka_metadata(worker->consumer, 0, rkt, &md, 10000);
		if (!err && (md->topic_cnt != 1 || md->topics[0].err))
			err = md->topic_cnt == 1
				  ? md->topics[0].err
				  : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
		for (int j = 0; !err && j < md->topics[0].partition_cnt; j++)
			rd_kafka_topic_partition_list_add(
			    parts, topics->elems[i].topic,
			    md->topics[0].partitions[j].id);
		if (md)
			rd_kafka_metadata_destroy(md);
		rd_kafka_topic_destroy(rkt);
	}
	if (!err)
		on_rebalance(worker->consumer,
			     RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, parts,
			     worker);
	rd_kafka_topic_partition_list_destroy(parts);
	return err;
}

static int start_clients(tbx_worker_t *worker, size_t n)
{
	rd_kafka_topic_partition_list_t *topics;
	rd_kafka_conf_t *kc;
	char rderr[512];
	rd_kafka_resp_err_t rerr;

	if (!(kc = tbx__conf_kafka(worker->conf, "consumer", worker->errstr,
				   sizeof(worker->errstr))))
		return TBX_ECONF;
	if (rd_kafka_conf_set(kc, "group.id", worker->group, rderr,
			      sizeof(rderr)) != RD_KAFKA_CONF_OK ||
	    rd_kafka_conf_set(kc, "enable.auto.commit", "false", rderr,
			      sizeof(rderr)) != RD_KAFKA_CONF_OK ||
	    rd_kafka_conf_set(kc, "enable.auto.offset.store", "false", rderr,
			      sizeof(rderr)) != RD_KAFKA_CONF_OK) {
		rd_kafka_conf_destroy(kc);
		return fail(worker, TBX_ECONF, "consumer: %s", rderr);
	}
	if (!tbx_conf_get(worker->conf, "kafka.auto.offset.reset") &&
	    !tbx_conf_get(worker->conf, "kafka.consumer.auto.offset.reset"))
		rd_kafka_conf_set(kc, "auto.offset.reset", "earliest", NULL, 0);
	rd_kafka_conf_set_rebalance_cb(kc, on_rebalance);
	rd_kafka_conf_set_offset_commit_cb(kc, on_commit);
	rd_kafka_conf_set_log_cb(kc, on_consumer_log);
	rd_kafka_conf_set_error_cb(kc, on_consumer_error);
	/* kafka.statistics.interval.ms: the JSON goes to the metrics. */
	rd_kafka_conf_set_stats_cb(kc, tbx__worker_on_stats);
	rd_kafka_conf_set_opaque(kc, worker);
	worker->consumer =
	    rd_kafka_new(RD_KAFKA_CONSUMER, kc, rderr, sizeof(rderr));
	if (!worker->consumer) {
		rd_kafka_conf_destroy(kc);
		return fail(worker, TBX_EKAFKA,
			    "cannot create the consumer: %s", rderr);
	}
	rd_kafka_poll_set_consumer(worker->consumer);
	topics = rd_kafka_topic_partition_list_new((int)n);
	for (size_t i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(
		    topics, tbx_router_topic(worker->router, i),
		    RD_KAFKA_PARTITION_UA);
	if (worker->assign_direct)
		rerr = assign_directly(worker, topics);
	else
		rerr = rd_kafka_subscribe(worker->consumer, topics);
	rd_kafka_topic_partition_list_destroy(topics);
	if (rerr)
		return fail(worker, TBX_EKAFKA, "%s failed: %s",
			    worker->assign_direct ? "assignment" : "subscribe",
			    rd_kafka_err2str(rerr));
	worker->producer = tbx__producer_new(worker->conf, worker->errstr,
					     sizeof(worker->errstr));
	if (!worker->producer)
		return TBX_EKAFKA;
	return TBX_OK;
}

static int batch_push(tbx_worker_t *worker, rd_kafka_message_t *rkm)
{
	tbx__batch_t *batch = &worker->batch;
	tbx__part_t *part;
	struct tbx_msg *msg;
	const char *topic = rd_kafka_topic_name(rkm->rkt);

	part = tbx__part_get(worker, topic, rkm->partition, 0);
	if (!part || part->paused) {
		/* Fetched before the pause (or after a revoke): it will be
		 * fetched again from the seek offset. */
		rd_kafka_message_destroy(rkm);
		return 0;
	}
	if (!(msg = tbx__batch_push(batch))) {
		rd_kafka_message_destroy(rkm);
		return -1;
	}
	msg->rkm = rkm;
	msg->part = part;
	tbx__msg_parse(msg);
	if (worker->batch.tracer) {
		rd_kafka_headers_t *hdrs = NULL;

		if (rd_kafka_message_headers(rkm, &hdrs))
			hdrs = NULL;
		tbx__trace_begin(worker->batch.tracer, &msg->trace, hdrs);
	}
	msg->attempt = 1; /* G counts earlier RETRYs from the store */
	worker->stats.consumed++;
	return 1;
}

/* Collects up to batch.max.messages records: waits up to @p timeout_ms for
 * the first, then up to batch.max.ms for the batch to fill.  A batch that
 * starts with records kept from the last one (the rest of a suspect
 * range, tbx__batch_keep()) only adds what the consumer already holds,
 * without waiting: it still polls, so that rebalances are served (one
 * drops the kept records of the partitions it revokes, batch_drop()). */
static int collect(tbx_worker_t *worker, int timeout_ms)
{
	int64_t first_deadline = tbx__mono_ms() + timeout_ms;
	int64_t batch_deadline = 0;
	int polled = 0, got = 0, kept = worker->batch.cnt > 0;

	while (worker->batch.cnt < (size_t)worker->cfg->batch_max_messages &&
	       !atomic_load(&worker->stop)) {
		int64_t now = tbx__mono_ms(), wait;
		rd_kafka_message_t *rkm;

		if (worker->batch.cnt == 0) {
			if (polled && now >= first_deadline)
				break;
			wait = first_deadline - now;
		} else if (kept) {
			if (polled && !got)
				break;
			wait = 0;
		} else {
			if (now >= batch_deadline)
				break;
			wait = batch_deadline - now;
		}
		if (wait < 0)
			wait = 0;
		if (wait > 100)
			wait = 100; /* notice tbx_worker_stop() promptly */
		rkm = rd_kafka_consumer_poll(worker->consumer, (int)wait);
		polled = 1;
		got = 0;
		if (rkm && rkm->err) {
			if (rkm->err == RD_KAFKA_RESP_ERR__MAX_POLL_EXCEEDED)
				/* The group moved our partitions elsewhere
				 * while a batch ran; its work stays exactly
				 * once (tokens, outbox rows), and we rejoin. */
				tbx__log(
				    TBX_LOG_ERR,
				    "a batch took longer than "
				    "max.poll.interval.ms: the worker left "
				    "the group and rejoins; shorten the "
				    "handlers, lower batch.max.messages or "
				    "raise kafka.consumer.max.poll."
				    "interval.ms");
			else if (rkm->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
				tbx__log(TBX_LOG_WARNING, "consume: %s",
					 rd_kafka_message_errstr(rkm));
			rd_kafka_message_destroy(rkm);
			rkm = NULL;
		}
		/* A fatal error (fenced by a newer member with the same
		 * group.instance.id, ...) ends the consumer for good: stop,
		 * so that a supervisor starts a fresh process.  It reaches
		 * the error callback, not always a message. */
		char fatal[256];
		rd_kafka_resp_err_t ferr = rd_kafka_fatal_error(
		    worker->consumer, fatal, sizeof(fatal));
		if (ferr) {
			if (rkm)
				rd_kafka_message_destroy(rkm);
			return fail(worker, TBX_EFATAL,
				    "fatal consumer error %s: %s; the worker "
				    "stops (restart it)",
				    rd_kafka_err2name(ferr), fatal);
		}
		if (!rkm)
			continue;
		got = 1;
		if (batch_push(worker, rkm) < 0)
			return TBX_ENOMEM;
		if (worker->batch.cnt == 1)
			batch_deadline =
			    tbx__mono_ms() + worker->cfg->batch_max_ms;
	}
	return TBX_OK;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

/* One line of counters, a JSON object, through the logger. */
static void maybe_stats(tbx_worker_t *worker)
{
	int64_t now = tbx__mono_ms(), pending = -1;
	float sorted[1024], p50 = 0, p99 = 0;
	const tbx_stats_t *st = &worker->stats;
	const struct {
		const char *name;
		uint64_t value;
	} counters[] = {
	    {"consumed", st->consumed},
	    {"processed", st->processed},
	    {"duplicates_dropped", st->duplicates_dropped},
	    {"resumed", st->resumed},
	    {"retries", st->retries},
	    {"dead_lettered", st->dead_lettered},
	    {"untokened", st->untokened},
	    {"dispatched", st->dispatched},
	    {"tokens_created", st->tokens_created},
	    {"tokens_consumed", st->tokens_consumed},
	    {"attempts_lost", st->attempts_lost},
	    {"orphans_swept", st->orphans_swept},
	    {"batches", st->batches},
	    {"stuck_rows", st->stuck_rows},
	    {"rows_recovered", st->rows_recovered},
	    {"commits_retried", st->commits_retried},
	    {"store_mismatches", st->store_mismatches},
	    {"duplicate_alarms", st->duplicate_alarms},
	    {"handler_refused", st->handler_refused},
	    {"dispatch_failed_permanent", st->dispatch_failed_permanent},
	    {"undeliverable", st->undeliverable},
	    {"undelivered_stored", st->undelivered_stored},
	    {"producer_restarts", st->producer_restarts},
	    {"commit_alarms", st->commit_alarms},
	    {"unassigned_alarms", worker->unassigned_alarms},
	    {"rows_conflicted", st->rows_conflicted},
	    {"handler_ended_txn", st->handler_ended_txn},
	    {"store_reconnects", st->store_reconnects},
	    {"partition_unknown", st->partition_unknown},
	    {"set_orphans_swept", st->set_orphans_swept},
	    {"set_rows_swept", st->set_rows_swept},
	    {"set_regs_unchecked", st->set_regs_unchecked},
	    {"resume_reloads", st->resume_reloads},
	    {"resume_load_failures", st->resume_load_failures},
	    {"resume_drops", st->resume_drops},
	    {"stray_records", st->stray_records},
	};
	cJSON *obj;
	char *text;

	if (worker->cfg->stats_interval_ms <= 0 || now < worker->next_stats_ms)
		return;
	worker->next_stats_ms = now + worker->cfg->stats_interval_ms;
	if (worker->lat_cnt) {
		memcpy(sorted, worker->lat, worker->lat_cnt * sizeof(float));
		qsort(sorted, worker->lat_cnt, sizeof(float), cmp_float);
		p50 = sorted[(worker->lat_cnt - 1) / 2];
		p99 = sorted[(worker->lat_cnt - 1) * 99 / 100];
	}
	tbx_outbox_count(worker->store, worker->group, &pending);
	if (!(obj = cJSON_CreateObject()))
		return;
	cJSON_AddNumberToObject(obj, "ts_ms", (double)tbx__now_ms());
	cJSON_AddStringToObject(obj, "group", worker->group);
	cJSON_AddNumberToObject(obj, "pid", (double)getpid());
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		cJSON_AddNumberToObject(obj, counters[i].name,
					(double)counters[i].value);
	cJSON_AddNumberToObject(obj, "outbox_pending", (double)pending);
	cJSON_AddNumberToObject(obj, "batch_ms_p50", (double)p50);
	cJSON_AddNumberToObject(obj, "batch_ms_p99", (double)p99);
	text = cJSON_PrintUnformatted(obj);
	cJSON_Delete(obj);
	if (text)
		tbx__log_object(TBX_LOG_INFO, "stats", text);
	free(text);
}

/*
 * The recovery pass: rows whose record lies below its partition's
 * committed offset are never delivered again (retention deleted the
 * record, an offset reset or auto.offset.reset jumped past it), so no
 * redelivery resumes them.  After an assignment and every
 * recovery.interval.ms, the owner finishes those of its partitions.
 * Safe against another worker on the same rows for the reasons
 * tbx__proto_redispatch is (docs/architecture.md).
 */
static void maybe_recover(tbx_worker_t *worker)
{
	rd_kafka_topic_partition_list_t *list;
	rd_kafka_resp_err_t rerr;
	int64_t now = tbx__mono_ms();

	if (!worker->recovery_due && (worker->cfg->recovery_interval_ms <= 0 ||
				      now < worker->next_recovery_ms))
		return;
	worker->recovery_due = 0;
	worker->next_recovery_ms = now + worker->cfg->recovery_interval_ms;
	if (worker->part_cnt == 0)
		return;
	list = rd_kafka_topic_partition_list_new((int)worker->part_cnt);
	for (size_t i = 0; i < worker->part_cnt; i++)
		rd_kafka_topic_partition_list_add(list, worker->parts[i].topic,
						  worker->parts[i].partition);
	rerr = rd_kafka_committed(worker->consumer, list, 10000);
	if (rerr) {
		/* Tried again at the next interval. */
		tbx__log(TBX_LOG_WARNING,
			 "recovery pass: committed offsets not known: %s",
			 rd_kafka_err2str(rerr));
		rd_kafka_topic_partition_list_destroy(list);
		return;
	}
	for (int i = 0; i < list->cnt; i++) {
		rd_kafka_topic_partition_t *tp = &list->elems[i];
		size_t found, finished;

		/* No offset committed yet: nothing lies below it. */
		if (tp->err || tp->offset < 0)
			continue;
		tbx__proto_recover(&worker->proto, &worker->recovery, tp->topic,
				   tp->partition, tp->offset,
				   (size_t)worker->cfg->cleanup_batch_size,
				   &found, &finished);
	}
	rd_kafka_topic_partition_list_destroy(list);
}

/*
 * Records that the group still uses its subscriptions (for `inspect
 * status`, which flags those no worker used for long).  One that was
 * removed meanwhile (`inspect unsubscribe`) is taken again: senders
 * stopped minting for the group, and with the old number its records
 * would look finished; with a new one, those minted in between are
 * untokened and go by ingress.untokened.
 */
static void touch_subscriptions(tbx_worker_t *worker)
{
	for (size_t i = 0; i < tbx_router_topic_count(worker->router); i++) {
		const char *topic = tbx_router_topic(worker->router, i);
		int found = 1;

		if (tbx_tokens_touch(worker->tokens, topic, worker->group,
				     &found) ||
		    found)
			continue;
		tbx__log(TBX_LOG_ERR,
			 "the subscription of group %s to %s was removed from "
			 "the token store while the group runs; subscribing "
			 "again (records sent meanwhile have no token for "
			 "this group: ingress.untokened decides)",
			 worker->group, topic);
		if (tbx_tokens_subscribe(worker->tokens, topic, worker->group,
					 &worker->since[i]))
			continue;
		for (size_t j = 0; j < worker->part_cnt; j++)
			if (strcmp(worker->parts[j].topic, topic) == 0)
				worker->parts[j].since = worker->since[i];
	}
}

static void maybe_cleanup(tbx_worker_t *worker)
{
	int64_t now = tbx__mono_ms();

	if (worker->cfg->cleanup_interval_ms <= 0 ||
	    now < worker->next_cleanup_ms)
		return;
	worker->next_cleanup_ms = now + worker->cfg->cleanup_interval_ms;
	tbx_worker_cleanup(worker, 0, NULL);
	touch_subscriptions(worker);
}

/* Applies F's result: holds back the partitions with a record not done
 * (pause, then seek back to it after the wait), and stores and commits
 * (asynchronously) the offsets after what is done. */
static void apply_outcome(tbx_worker_t *worker,
			  const tbx__proto_result_t *result)
{
	rd_kafka_topic_partition_list_t *offsets =
	    rd_kafka_topic_partition_list_new(8);

	for (size_t i = 0; i < result->part_cnt; i++) {
		const tbx__part_outcome_t *out = &result->parts[i];

		if (out->hold)
			part_hold(worker, out->part, out->seek, out->wait_ms);
		if (out->commit >= 0)
			rd_kafka_topic_partition_list_add(
			    offsets, out->part->topic, out->part->partition)
			    ->offset = out->commit;
	}
	/* finish.defer: the offsets behind rows whose D+E committed with
	 * this batch's A. */
	tbx__proto_take_ready(&worker->proto, offsets);
	offsets_commit(worker, offsets, 1);
	rd_kafka_topic_partition_list_destroy(offsets);
	tbx__crashpoint("F.committed");
}

/*
 * One batch: G, then A–E through the protocol, then F's decision, which
 * is applied here (protocol.h).  A failed G or A–E still gets its F: the
 * records not done are held back for redelivery.
 * @returns TBX_OK or the error that stopped a phase.
 */
static int process_batch(tbx_worker_t *worker)
{
	tbx__proto_t *proto = &worker->proto;
	tbx__batch_t *batch = &worker->batch;
	tbx__proto_result_t result;
	int err;

	if (batch->cnt == 0)
		/* No next batch to finish the waiting rows with. */
		return tbx__proto_waiting(proto)
			   ? finish_waiting(worker, "idle poll", 0)
			   : TBX_OK;
	if (batch->tracer) { /* the batch span's times */
		batch->began_ns = tbx__now_ns();
		memset(batch->phase_ns, 0, sizeof(batch->phase_ns));
	}
	tbx__proto_start(proto, batch);
	err = tbx__batch_phase(batch, TBX_PHASE_G,
			       tbx__proto_guard(proto, batch)); /* G */
	if (!err)
		err = tbx__proto_process(proto, batch); /* A–E */
	tbx__proto_finish(proto, batch, err, &result);	/* F */
	apply_outcome(worker, &result);
	if (batch->tracer) {
		tbx__batch_phase(batch, TBX_PHASE_F, 0);
		tbx__trace_batch(batch->tracer, batch->msgs, batch->cnt,
				 batch->began_ns, batch->phase_ns);
	}
	return err;
}

static int worker_poll(tbx_worker_t *worker, int timeout_ms, size_t *consumed)
{
	int err;
	size_t cnt;

	if (consumed)
		*consumed = 0;
	if (!worker || timeout_ms < 0)
		return TBX_EINVAL;
	if (worker->closed)
		return TBX_ESTATE;
	if (!worker->started && (err = start(worker)))
		return err;
	resume_due(worker);
	maybe_recover(worker);
	recommit_due(worker);
	tbx__commit_watch_check(worker);
	tbx__membership_check(worker);
	if (worker->batch.tracer)
		tbx__trace_loss_check(worker->batch.tracer, tbx__mono_ms(),
				      worker->cfg->trace_loss_window_ms,
				      worker->store, worker->group);
	maybe_cleanup(worker);
	if ((err = collect(worker, timeout_ms))) {
		batch_abandon(worker);
		return err;
	}
	if (worker->layout_due) {
		/* Refused, or a store error: checked again at every poll,
		 * the batch held back meanwhile, so that a caller that goes
		 * on polling handles nothing beside the batch rows. */
		err = tbx__layout_check(worker, "at an assignment",
					worker->errstr, sizeof(worker->errstr));
		worker->layout_due = err != TBX_OK;
		if (err == TBX_ESTATE && !worker->layout_refused) {
			/* logged at ERROR once, as fail() */
			const char *scope = tbx__log_scope(worker->log_tag);

			tbx__log(TBX_LOG_ERR, "%s", worker->errstr);
			tbx__log_scope(scope);
		}
		worker->layout_refused = err == TBX_ESTATE;
		if (err) {
			batch_abandon(worker);
			return tbx_err_is_retriable(err) ? TBX_OK : err;
		}
	}
	cnt = worker->batch.cnt;
	int64_t began = tbx__mono_ms();
	err = process_batch(worker);
	/* The rest of a suspect range stays for the next batch. */
	tbx__batch_keep(&worker->batch);
	tbx__proto_reconnect_check(&worker->proto);
	tbx__proto_stray_check(&worker->proto);
	if (cnt) {
		worker->lat[worker->lat_next] = (float)(tbx__mono_ms() - began);
		worker->lat_next = (worker->lat_next + 1) % 1024;
		if (worker->lat_cnt < 1024)
			worker->lat_cnt++;
		tbx__worker_metrics_batch(worker, tbx__mono_ms() - began);
	}
	maybe_stats(worker);
	tbx__worker_metrics_refresh(worker, 0);
	if (err && !tbx_err_is_retriable(err))
		return err;
	if (consumed)
		*consumed = cnt;
	return TBX_OK;
}

int tbx_worker_poll(tbx_worker_t *worker, int timeout_ms, size_t *consumed)
{
	const char *scope;
	int err;

	if (!worker)
		return worker_poll(worker, timeout_ms, consumed);
	scope = tbx__log_scope(worker->log_tag);
	err = worker_poll(worker, timeout_ms, consumed);
	tbx__log_scope(scope);
	return err;
}

int tbx_worker_run(tbx_worker_t *worker)
{
	int err;

	if (!worker)
		return TBX_EINVAL;
	while (!atomic_load(&worker->stop)) {
		if ((err = tbx_worker_poll(worker, 100, NULL))) {
			tbx_worker_close(worker);
			return err;
		}
	}
	return tbx_worker_close(worker);
}

void tbx_worker_stop(tbx_worker_t *worker)
{
	if (worker)
		atomic_store(&worker->stop, 1);
}

/*
 * Unsubscribes and serves the revocation that follows before the consumer
 * is closed: librdkafka 2.0 can abort in rd_kafka_consumer_close() when it
 * meets an assignment still in progress (a rebalance under way; librdkafka
 * issues 4308, 4312, 4792).  Records polled meanwhile are not processed:
 * their offsets are not committed, so the next owner gets them.
 */
static void leave_group(tbx_worker_t *worker)
{
	int64_t deadline =
	    tbx__mono_ms() + (worker->cfg->shutdown_timeout_ms < 10000
				  ? worker->cfg->shutdown_timeout_ms
				  : 10000);
	if (worker->assign_direct) {
		rd_kafka_topic_partition_list_t *assigned = NULL;

		/* No group to leave: revoked as the group would. */
		if (!rd_kafka_assignment(worker->consumer, &assigned) &&
		    assigned && assigned->cnt)
			on_rebalance(worker->consumer,
				     RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS,
				     assigned, worker);
		if (assigned)
			rd_kafka_topic_partition_list_destroy(assigned);
		return;
	}
	rd_kafka_unsubscribe(worker->consumer);
	/* Poll at least once: the revocation is served inside poll. */
	while (tbx__mono_ms() < deadline) {
		rd_kafka_topic_partition_list_t *assigned = NULL;
		rd_kafka_message_t *rkm;
		int cnt = 0;

		if ((rkm = rd_kafka_consumer_poll(worker->consumer, 100)))
			rd_kafka_message_destroy(rkm);
		tbx__batch_reset(&worker->batch);
		if (!rd_kafka_assignment(worker->consumer, &assigned) &&
		    assigned)
			cnt = assigned->cnt;
		if (assigned)
			rd_kafka_topic_partition_list_destroy(assigned);
		if (cnt == 0)
			break;
	}
}

/* 1 when the consumer was configured with the cooperative-sticky
 * assignor (alone or among others). */
static int sticky_assignor(rd_kafka_t *rk)
{
	char value[256];
	size_t size = sizeof(value);

	return rd_kafka_conf_get(rd_kafka_conf(rk),
				 "partition.assignment.strategy", value,
				 &size) == RD_KAFKA_CONF_OK &&
	       strstr(value, "cooperative-sticky") != NULL;
}

/*
 * librdkafka 2.0.2 aborts in rd_kafka_destroy() (assertion 'assignor_state'
 * in rd_kafka_sticky_assignor_state_destroy, librdkafka issue 4312, fixed
 * in 2.3.0) when a cooperative-sticky consumer is destroyed after its first
 * JoinGroup response and before its first SyncGroup response: the assignor
 * is chosen, its state not yet made.  Leaving the group in between makes
 * it discard the SyncGroup response, so the window never closes.  A
 * worker stopped before its first assignment therefore first waits for
 * it (serving the rebalance callback), at most half of
 * shutdown.timeout.ms.  @returns 1 when the consumer may be destroyed.
 */
static int await_first_assignment(tbx_worker_t *worker)
{
	rd_kafka_t *rk = worker->consumer;
	int64_t deadline =
	    tbx__mono_ms() + worker->cfg->shutdown_timeout_ms / 2;

	if (worker->assigned_once || !sticky_assignor(rk))
		return 1;
	tbx__log(TBX_LOG_INFO, "stopping before the first assignment: "
			       "waiting for it before leaving the group");
	while (!worker->assigned_once && tbx__mono_ms() < deadline) {
		rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 100);
		if (rkm)
			rd_kafka_message_destroy(rkm);
		tbx__batch_reset(&worker->batch);
	}
	if (worker->assigned_once ||
	    strcmp(rd_kafka_rebalance_protocol(rk), "NONE") == 0)
		return 1;
	return 0;
}

static int worker_close(tbx_worker_t *worker)
{
	if (worker->closed)
		return TBX_OK;
	worker->closed = 1;
	tbx__batch_reset(&worker->batch);
	if (worker->consumer &&
	    rd_kafka_fatal_error(worker->consumer, NULL, 0)) {
		/* After a fatal error the consumer can neither commit nor
		 * leave the group, and librdkafka 2.0.2's close waits for
		 * ever for a group that will not answer: destroy it
		 * locally.  What it did not commit is redelivered. */
		rd_kafka_destroy_flags(worker->consumer,
				       RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
		worker->consumer = NULL;
	}
	/* The rows whose D+E wait, and their offsets (finish.defer). */
	finish_waiting(worker, "close", 1);
	if (worker->consumer) {
		/* Offsets of finished batches were stored; an async commit
		 * may still be in flight: commit them synchronously. */
		rd_kafka_resp_err_t err =
		    rd_kafka_commit(worker->consumer, NULL, 0);
		if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET)
			tbx__log(TBX_LOG_INFO, "final commit: %s",
				 rd_kafka_err2str(err));
		if (await_first_assignment(worker)) {
			leave_group(worker);
			rd_kafka_consumer_close(worker->consumer);
			rd_kafka_destroy(worker->consumer);
		} else {
			/* Destroying it would abort the process. */
			tbx__log(
			    TBX_LOG_WARNING,
			    "the group assigned nothing within %lld ms of "
			    "the stop: the consumer is left open "
			    "(librdkafka 2.0.2 would abort destroying it); "
			    "the group drops it after its session timeout",
			    (long long)worker->cfg->shutdown_timeout_ms / 2);
		}
		worker->consumer = NULL;
	}
	if (worker->producer) {
		rd_kafka_flush(worker->producer,
			       worker->cfg->shutdown_timeout_ms <
				       worker->cfg->dispatch_timeout_ms
				   ? worker->cfg->shutdown_timeout_ms
				   : worker->cfg->dispatch_timeout_ms);
		rd_kafka_destroy(worker->producer);
		worker->producer = NULL;
	}
	return TBX_OK;
}

int tbx_worker_close(tbx_worker_t *worker)
{
	const char *scope;
	int err;

	if (!worker)
		return TBX_OK;
	scope = tbx__log_scope(worker->log_tag);
	err = worker_close(worker);
	tbx__log_scope(scope);
	return err;
}

void tbx_worker_destroy(tbx_worker_t *worker)
{
	const char *scope;

	if (!worker)
		return;
	scope = tbx__log_scope(worker->log_tag);
	worker_close(worker);
	tbx__worker_metrics_stop(worker);
	tbx__proto_free(&worker->proto);
	tbx__resume_mem_destroy(worker->proto.rmem);
	worker->proto.rmem = NULL;
	tbx__tracer_free(worker->batch.tracer, 2000);
	tbx__batch_free(&worker->batch);
	tbx__batch_free(&worker->recovery);
	free(worker->parts);
	free(worker->since);
	tbx_tokens_close(worker->tokens);
	tbx_outbox_close(worker->store);
	tbx_router_destroy(worker->router);
	tbx_conf_destroy(worker->conf);
	tbx__log_scope(scope);
	free(worker);
}

const char *tbx_worker_errstr(const tbx_worker_t *worker)
{
	return worker ? worker->errstr : "";
}

void tbx_worker_stats(const tbx_worker_t *worker, tbx_stats_t *stats)
{
	if (worker && stats)
		*stats = worker->stats;
}

int tbx_worker_cleanup(tbx_worker_t *worker, size_t limit, size_t *swept)
{
	tbx__sweep_stats_t st;
	const char *scope;
	int err;

	if (!worker)
		return TBX_EINVAL;
	scope = tbx__log_scope(worker->log_tag);
	err = tbx__tokens_sweep_resume(
	    worker->tokens, worker->store, worker->group,
	    limit ? limit : (size_t)worker->cfg->cleanup_batch_size,
	    &worker->sweep_at, &st);
	worker->stats.orphans_swept += st.orphans;
	worker->stats.set_orphans_swept += st.set_orphans;
	worker->stats.set_rows_swept += st.set_rows_deleted;
	/* Logged at WARN by the sweep, per pass. */
	worker->stats.set_regs_unchecked += st.set_unchecked;
	if (st.orphans)
		tbx__log(TBX_LOG_INFO,
			 "cleanup: %zu orphaned attempt(s), %" PRIu64
			 " token row(s) removed",
			 st.orphans, st.tokens_deleted);
	if (st.set_orphans)
		tbx__log(TBX_LOG_INFO,
			 "cleanup: %zu orphaned attempt(s) of token sets, "
			 "%" PRIu64 " set row(s) removed",
			 st.set_orphans, st.set_rows_deleted);
	if (err)
		tbx__log(TBX_LOG_WARNING,
			 "cleanup: the pass failed: %s (tried again at the "
			 "next cleanup.interval.ms)",
			 tbx_strerror(err));
	if (swept)
		*swept = st.orphans + st.set_orphans;
	tbx__log_scope(scope);
	return err;
}
