/*
 * The consumer-group worker: lifecycle (tbx_worker_new(), start, close,
 * destroy), subscription, the consumer's callbacks and the public
 * accessors.  The poll loop that builds and processes batches is
 * worker_poll.c; partitions, rebalances and offset commits are
 * worker_rebalance.c.
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

__attribute__((format(printf, 3, 4))) int
tbx__worker_fail(tbx_worker_t *worker, int err, const char *fmt, ...)
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
	proto->c_stop.since = &worker->stop_ms;
	proto->c_stop.wait_ms = worker->cfg->shutdown_timeout_ms / 2;
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
	atomic_init(&worker->stop_ms, 0);
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
	    tbx__stores_check(cfg, errstr, errstr_size) ||
	    tbx__layout_check_ro(cfg, errstr, errstr_size))
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
		return tbx__worker_fail(
		    worker, TBX_EINVAL,
		    "topic '%s': pattern subscriptions are not "
		    "supported (senders mint tokens per topic name "
		    "and cannot know which groups a pattern "
		    "covers); register each topic by its name",
		    topic);
	if (topic && !tbx__topic_valid(topic))
		return tbx__worker_fail(
		    worker, TBX_EINVAL,
		    "topic '%s' is not a Kafka topic name (1 to 249 "
		    "characters of a-z, A-Z, 0-9, '.', '_', '-'; "
		    "not '.' or '..')",
		    topic);
	return tbx_router_add(worker->router, topic, type, fn, opaque);
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

int tbx__worker_start(tbx_worker_t *worker)
{
	size_t n = tbx_router_topic_count(worker->router);
	int err;

	if (n == 0)
		return tbx__worker_fail(
		    worker, TBX_ESTATE, "%s",
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
			return tbx__worker_fail(
			    worker, err,
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
		tbx__worker_on_rebalance(worker->consumer,
					 RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS,
					 parts, worker);
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
		return tbx__worker_fail(worker, TBX_ECONF, "consumer: %s",
					rderr);
	}
	if (!tbx_conf_get(worker->conf, "kafka.auto.offset.reset") &&
	    !tbx_conf_get(worker->conf, "kafka.consumer.auto.offset.reset"))
		rd_kafka_conf_set(kc, "auto.offset.reset", "earliest", NULL, 0);
	rd_kafka_conf_set_rebalance_cb(kc, tbx__worker_on_rebalance);
	rd_kafka_conf_set_offset_commit_cb(kc, tbx__worker_on_commit);
	rd_kafka_conf_set_log_cb(kc, on_consumer_log);
	rd_kafka_conf_set_error_cb(kc, on_consumer_error);
	/* kafka.statistics.interval.ms: the JSON goes to the metrics. */
	rd_kafka_conf_set_stats_cb(kc, tbx__worker_on_stats);
	rd_kafka_conf_set_opaque(kc, worker);
	worker->consumer =
	    rd_kafka_new(RD_KAFKA_CONSUMER, kc, rderr, sizeof(rderr));
	if (!worker->consumer) {
		rd_kafka_conf_destroy(kc);
		return tbx__worker_fail(worker, TBX_EKAFKA,
					"cannot create the consumer: %s",
					rderr);
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
		return tbx__worker_fail(worker, TBX_EKAFKA, "%s failed: %s",
					worker->assign_direct ? "assignment"
							      : "subscribe",
					rd_kafka_err2str(rerr));
	worker->producer = tbx__producer_new(worker->conf, worker->errstr,
					     sizeof(worker->errstr));
	if (!worker->producer)
		return TBX_EKAFKA;
	return TBX_OK;
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
	long long none = 0;

	if (!worker)
		return;
	atomic_compare_exchange_strong(&worker->stop_ms, &none, tbx__mono_ms());
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
			tbx__worker_on_rebalance(
			    worker->consumer,
			    RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS, assigned,
			    worker);
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

const char *tbx__worker_step(const tbx_worker_t *worker)
{
	/* Phase that runs after the one that ended last (a failed phase
	 * goes to F). */
	static const char *const batch[] = {
	    "the batch in hand, G: its crash marker",
	    "the batch in hand, A: its handlers, its outbox rows",
	    "the batch in hand, B: minting its tokens",
	    "the batch in hand, C: dispatching its messages",
	    "the batch in hand, D: consuming its records' tokens",
	    "the batch in hand, E: finishing its outbox rows",
	    "the batch in hand, F: its offsets",
	};
	int phase;

	switch (atomic_load_explicit(&worker->doing, memory_order_relaxed)) {
	case TBX__DOING_RESUME:
		return "seeking the partitions whose retry wait is over";
	case TBX__DOING_RECOVER:
		return "the recovery pass: the group's committed offsets";
	case TBX__DOING_CLEANUP:
		return "the register-cleanup pass";
	case TBX__DOING_COLLECT:
		return "a poll of the Kafka consumer (rebalances are served "
		       "in it)";
	case TBX__DOING_LAYOUT:
		return "the outbox layout check of an assignment";
	case TBX__DOING_BATCH:
		phase = atomic_load_explicit(&worker->batch.phase_done,
					     memory_order_relaxed);
		return batch[phase < 0		    ? 0
			     : phase >= TBX_PHASE_F ? TBX_PHASE_F
						    : phase + 1];
	case TBX__DOING_REVOKE:
		return "a revocation: finishing delivered rows and the "
		       "synchronous commit of the revoked partitions' offsets";
	case TBX__DOING_CLOSE_FINISH:
		return "finishing the rows whose messages were delivered";
	case TBX__DOING_CLOSE_COMMIT:
		return "the final offset commit";
	case TBX__DOING_CLOSE_FIRST_ASSIGNMENT:
		return "the group's first assignment (librdkafka 2.0.2 aborts "
		       "when a consumer is destroyed before it)";
	case TBX__DOING_CLOSE_LEAVE:
		return "the revocation that leaving the group brings";
	case TBX__DOING_CLOSE_CONSUMER:
		return "rd_kafka_consumer_close(): the group's answer to the "
		       "leave, and the commits in flight";
	case TBX__DOING_CLOSE_FLUSH:
		return "the producer's messages still in flight";
	default:
		return NULL;
	}
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
	tbx__worker_doing(worker, TBX__DOING_CLOSE_FINISH);
	tbx__worker_finish_waiting(worker, "close", 1);
	if (worker->consumer) {
		/* Offsets of finished batches were stored; an async commit
		 * may still be in flight: commit them synchronously. */
		tbx__worker_doing(worker, TBX__DOING_CLOSE_COMMIT);
		rd_kafka_resp_err_t err =
		    rd_kafka_commit(worker->consumer, NULL, 0);
		if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET)
			tbx__log(TBX_LOG_INFO, "final commit: %s",
				 rd_kafka_err2str(err));
		tbx__worker_doing(worker, TBX__DOING_CLOSE_FIRST_ASSIGNMENT);
		if (await_first_assignment(worker)) {
			tbx__worker_doing(worker, TBX__DOING_CLOSE_LEAVE);
			leave_group(worker);
			tbx__worker_doing(worker, TBX__DOING_CLOSE_CONSUMER);
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
		tbx__worker_doing(worker, TBX__DOING_CLOSE_FLUSH);
		rd_kafka_flush(worker->producer,
			       worker->cfg->shutdown_timeout_ms <
				       worker->cfg->dispatch_timeout_ms
				   ? worker->cfg->shutdown_timeout_ms
				   : worker->cfg->dispatch_timeout_ms);
		rd_kafka_destroy(worker->producer);
		worker->producer = NULL;
	}
	tbx__worker_doing(worker, TBX__DOING_NONE);
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
