/*
 * The worker's poll loop (tbx_worker_poll()): collects a batch from
 * rd_kafka_consumer_poll(), drives it through the protocol and applies
 * its outcome, and between batches the periodic work: stats, recovery of
 * pending rows, touching the subscriptions and the token sweep.
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

int tbx__worker_batch_push(tbx_worker_t *worker, rd_kafka_message_t *rkm)
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
 * drops the kept records of the partitions it revokes,
 * tbx__worker_batch_drop()). */
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
			return tbx__worker_fail(
			    worker, TBX_EFATAL,
			    "fatal consumer error %s: %s; the worker "
			    "stops (restart it)",
			    rd_kafka_err2name(ferr), fatal);
		}
		if (!rkm)
			continue;
		got = 1;
		if (tbx__worker_batch_push(worker, rkm) < 0)
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
	    {"fetch_stall_alarms", worker->fetch_stall_alarms},
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
			tbx__part_hold(worker, out->part, out->seek,
				       out->wait_ms);
		if (out->commit >= 0)
			rd_kafka_topic_partition_list_add(
			    offsets, out->part->topic, out->part->partition)
			    ->offset = out->commit;
	}
	/* finish.defer: the offsets behind rows whose D+E committed with
	 * this batch's A. */
	tbx__proto_take_ready(&worker->proto, offsets);
	tbx__worker_offsets_commit(worker, offsets, 1);
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
			   ? tbx__worker_finish_waiting(worker, "idle poll", 0)
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
	if (!worker->started && (err = tbx__worker_start(worker)))
		return err;
	tbx__worker_doing(worker, TBX__DOING_RESUME);
	tbx__worker_resume_due(worker);
	tbx__worker_doing(worker, TBX__DOING_RECOVER);
	maybe_recover(worker);
	tbx__worker_doing(worker, TBX__DOING_NONE);
	tbx__worker_recommit_due(worker);
	tbx__commit_watch_check(worker);
	tbx__membership_check(worker);
	tbx__fetch_check(worker);
	if (worker->batch.tracer)
		tbx__trace_loss_check(worker->batch.tracer, tbx__mono_ms(),
				      worker->cfg->trace_loss_window_ms,
				      worker->store, worker->group);
	tbx__worker_doing(worker, TBX__DOING_CLEANUP);
	maybe_cleanup(worker);
	tbx__worker_doing(worker, TBX__DOING_COLLECT);
	err = collect(worker, timeout_ms);
	tbx__worker_doing(worker, TBX__DOING_NONE);
	if (err) {
		tbx__worker_batch_abandon(worker);
		return err;
	}
	if (worker->layout_due) {
		/* Refused, or a store error: checked again at every poll,
		 * the batch held back meanwhile, so that a caller that goes
		 * on polling handles nothing beside the batch rows. */
		tbx__worker_doing(worker, TBX__DOING_LAYOUT);
		err = tbx__layout_check(worker, "at an assignment",
					worker->errstr, sizeof(worker->errstr));
		tbx__worker_doing(worker, TBX__DOING_NONE);
		worker->layout_due = err != TBX_OK;
		if (err == TBX_ESTATE && !worker->layout_refused) {
			/* logged at ERROR once, as tbx__worker_fail() */
			const char *scope = tbx__log_scope(worker->log_tag);

			tbx__log(TBX_LOG_ERR, "%s", worker->errstr);
			tbx__log_scope(scope);
		}
		worker->layout_refused = err == TBX_ESTATE;
		if (err) {
			tbx__worker_batch_abandon(worker);
			return tbx_err_is_retriable(err) ? TBX_OK : err;
		}
	}
	cnt = worker->batch.cnt;
	int64_t began = tbx__mono_ms();
	atomic_store_explicit(&worker->batch.phase_done, -1,
			      memory_order_relaxed);
	tbx__worker_doing(worker, TBX__DOING_BATCH);
	err = process_batch(worker);
	tbx__worker_doing(worker, TBX__DOING_NONE);
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
