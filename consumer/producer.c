/*
 * Dispatch (C): the idempotent producer and the delivery-report wait.
 *
 * Every produced message carries a pointer to a status slot; the wait does
 * not return before every report arrived (librdkafka guarantees one per
 * message within message.timeout.ms), so no report can outlive its slot.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/crash.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/producer.h"
#include "consumer/tracing.h"

enum { DR_PENDING = 0, DR_OK = 1, DR_FAILED = 2 };

/*
 * Delivery errors that retrying the same message cannot cure: the broker
 * (or librdkafka before it) refuses the message itself or its topic.
 * Every other error is transient (a broker away, a leader moving, a
 * timeout, the producer restarted): it is retried without limit.  After
 * dispatch.retry.max retries of a permanent one the message is
 * dead-lettered (proto_dispatch.c).  docs/architecture.md shows this table.
 */
static const struct {
	rd_kafka_resp_err_t err;
	const char *why;
} permanent_errs[] = {
    {RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, "larger than message.max.bytes"},
    {RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE, "batch larger than allowed"},
    {RD_KAFKA_RESP_ERR_INVALID_MSG, "corrupt message"},
    {RD_KAFKA_RESP_ERR__BAD_MSG, "malformed message"},
    {RD_KAFKA_RESP_ERR_INVALID_RECORD, "record refused by the broker"},
    {RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP, "timestamp out of range"},
    {RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT, "message format"},
    {RD_KAFKA_RESP_ERR_POLICY_VIOLATION, "broker policy"},
    {RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION, "invalid topic name"},
    {RD_KAFKA_RESP_ERR__INVALID_ARG, "invalid topic or message"},
    /* librdkafka reports a missing topic only after
     * topic.metadata.propagation.max.ms: a broker that creates topics
     * would have created it by then. */
    {RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, "no such topic"},
    {RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, "no such topic"},
    {RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION, "no such partition"},
};

int tbx__kafka_err_permanent(rd_kafka_resp_err_t err)
{
	for (size_t i = 0;
	     i < sizeof(permanent_errs) / sizeof(permanent_errs[0]); i++)
		if (permanent_errs[i].err == err)
			return 1;
	return 0;
}

int64_t tbx__producer_max_bytes(rd_kafka_t *producer)
{
	char buf[32];
	size_t size = sizeof(buf);

	if (producer &&
	    rd_kafka_conf_get(rd_kafka_conf(producer), "message.max.bytes", buf,
			      &size) == RD_KAFKA_CONF_OK)
		return strtoll(buf, NULL, 10);
	return 1000000; /* librdkafka's default */
}

typedef struct dr_slot {
	int status;
	rd_kafka_resp_err_t err;
	tbx__span_t *span; /* the send span, when traced */
	uint64_t end_ns;
	int32_t partition;
	int64_t offset;
} dr_slot_t;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *rkm,
			void *opaque)
{
	dr_slot_t *slot = rkm->_private;

	if (!slot)
		return;
	slot->err = rkm->err;
	if (slot->span) {
		slot->end_ns = tbx__now_ns();
		slot->partition = rkm->partition;
		slot->offset = rkm->offset;
	}
	slot->status = rkm->err ? DR_FAILED : DR_OK;
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	int fatal = err == RD_KAFKA_RESP_ERR__FATAL;
	char buf[512];

	if (fatal && rd_kafka_fatal_error(rk, buf, sizeof(buf)) !=
			 RD_KAFKA_RESP_ERR_NO_ERROR)
		reason = buf;
	tbx__log(fatal ? TBX_LOG_ERR : TBX_LOG_INFO, "producer: %s: %s",
		 rd_kafka_err2name(err), reason);
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac,
		   const char *buf)
{
	tbx__log(level < TBX_LOG_WARNING ? TBX_LOG_WARNING : level,
		 "librdkafka %s: %s", fac, buf);
}

/* kafka.statistics.interval.ms: the producer's statistics are logged at
 * debug level (the consumer's also go to the worker's metrics). */
static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
	if (tbx__log_enabled(TBX_LOG_DEBUG))
		tbx__log_object(TBX_LOG_DEBUG, "rdkafka_producer_stats", json);
	return 0;
}

rd_kafka_t *tbx__producer_new(const tbx_conf_t *conf, char *errstr,
			      size_t errstr_size)
{
	char rderr[512], timeout[24];
	rd_kafka_conf_t *kc =
	    tbx__conf_kafka(conf, "producer", errstr, errstr_size);
	rd_kafka_t *rk;

	if (!kc)
		return NULL;
	snprintf(timeout, sizeof(timeout), "%" PRId64,
		 tbx__conf_cfg(conf)->dispatch_timeout_ms);
	/* Idempotence keeps order and drops the producer's own retries'
	 * duplicates; tokens cover everything else. */
	if (rd_kafka_conf_set(kc, "enable.idempotence", "true", rderr,
			      sizeof(rderr)) != RD_KAFKA_CONF_OK ||
	    rd_kafka_conf_set(kc, "message.timeout.ms", timeout, rderr,
			      sizeof(rderr)) != RD_KAFKA_CONF_OK) {
		tbx__seterr(errstr, errstr_size, TBX_ECONF, "producer: %s",
			    rderr);
		rd_kafka_conf_destroy(kc);
		return NULL;
	}
	if (!tbx_conf_get(conf, "kafka.linger.ms") &&
	    !tbx_conf_get(conf, "kafka.producer.linger.ms"))
		rd_kafka_conf_set(kc, "linger.ms", "1", NULL, 0);
	/* A message to a topic that does not exist fails with UNKNOWN_TOPIC
	 * (permanent) only after this long; past dispatch.timeout.ms it
	 * would time out first (transient) and be retried for ever. */
	if (!tbx_conf_get(conf, "kafka.topic.metadata.propagation.max.ms") &&
	    !tbx_conf_get(conf,
			  "kafka.producer.topic.metadata.propagation.max.ms")) {
		char half[24];
		snprintf(half, sizeof(half), "%" PRId64,
			 tbx__conf_cfg(conf)->dispatch_timeout_ms / 2);
		rd_kafka_conf_set(kc, "topic.metadata.propagation.max.ms", half,
				  NULL, 0);
	}
	rd_kafka_conf_set_dr_msg_cb(kc, on_delivery);
	rd_kafka_conf_set_error_cb(kc, on_error);
	rd_kafka_conf_set_log_cb(kc, on_log);
	rd_kafka_conf_set_stats_cb(kc, on_stats);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, rderr, sizeof(rderr));
	if (!rk) {
		rd_kafka_conf_destroy(kc);
		tbx__seterr(errstr, errstr_size, TBX_EKAFKA,
			    "cannot create the producer: %s", rderr);
		return NULL;
	}
	return rk;
}

static int produce_one(rd_kafka_t *rk, const char *store_id,
		       const tbx__row_t *row, const tbx__outmsg_t *m,
		       dr_slot_t *slot)
{
	char seq[24], tp[TBX_TRACEPARENT_LEN + 1];
	rd_kafka_headers_t *hdrs = rd_kafka_headers_new(8);
	tbx__trace_hdrs_t th = {0};
	tbx_header_t h;
	size_t pos = 0;
	int r;
	rd_kafka_resp_err_t err;

	/* Per message: base/str.h's formatter, not snprintf. */
	tbx__fmt_i64(seq, sizeof(seq), row->mint_seq);
	rd_kafka_header_add(hdrs, "tbx-id", -1, m->id, -1);
	if (m->tset[0] && m->part >= 0) {
		/* A bit of a token set (docs/batched-tokens.md, wire
		 * format): the set, and "<partition>:<index>". */
		char tbit[24];
		int n = tbx__fmt_i64(tbit, sizeof(tbit), m->part);

		tbit[n++] = ':';
		tbx__fmt_u64(tbit + n, sizeof(tbit) - (size_t)n, m->tbit);
		rd_kafka_header_add(hdrs, "tbx-tset", -1, m->tset, -1);
		rd_kafka_header_add(hdrs, "tbx-tbit", -1, tbit, -1);
	} else if (m->token[0]) {
		rd_kafka_header_add(hdrs, "tbx-token", -1, m->token, -1);
	}
	if (m->token[0] || (m->tset[0] && m->part >= 0)) {
		rd_kafka_header_add(hdrs, "tbx-seq", -1, seq, -1);
		if (store_id && *store_id)
			rd_kafka_header_add(hdrs, "tbx-store", -1, store_id,
					    -1);
	}
	rd_kafka_header_add(hdrs, "tbx-type", -1, m->type, -1);
	if (tbx__is_uuid(row->msg_id, strlen(row->msg_id)))
		rd_kafka_header_add(hdrs, "tbx-cause", -1, row->msg_id, -1);
	/* One pass over the stored headers: the others go to Kafka as
	 * they are, the trace headers are noted, for this dispatch's send
	 * span and for the traceparent the message leaves with (the send
	 * span's, not the stored one: tracing.h), added after the pass. */
	while ((r = tbx__hdrs_next(m->headers, m->headers_len, &pos, &h)) ==
	       1) {
		if (!tbx__trace_hdrs_note(&th, &h))
			rd_kafka_header_add(hdrs, h.name, -1, h.value,
					    h.value ? (ssize_t)h.len : 0);
	}
	slot->span = tbx__trace_send_begin_hdrs(tbx__tracer_dispatch(),
						m->topic, m->id, &th, tp);
	if (th.bad_sc && !th.has_sc)
		tbx__log(TBX_LOG_WARNING,
			 "outbox row %s: message %s: its stored trace context "
			 "is malformed; sent without it",
			 row->msg_id, m->id);
	if (slot->span || th.has_sc) {
		/* The stored context in binary: sent as the W3C traceparent
		 * of the same ids and flags, or of the send span. */
		if (!slot->span)
			tbx__traceparent_format(&th.sc.ctx, tp);
		rd_kafka_header_add(hdrs, "traceparent", 11, tp,
				    TBX_TRACEPARENT_LEN);
	} else if (th.traceparent.value) {
		rd_kafka_header_add(hdrs, "traceparent", 11,
				    th.traceparent.value,
				    (ssize_t)th.traceparent.len);
	}
	if (th.tracestate.value)
		rd_kafka_header_add(hdrs, "tracestate", 10, th.tracestate.value,
				    (ssize_t)th.tracestate.len);
	if (r < 0)
		tbx__log(TBX_LOG_WARNING,
			 "outbox row %s: stored headers are malformed; sent "
			 "without the rest",
			 row->msg_id);
	/* RD_KAFKA_MSG_F_COPY: the row may be freed before delivery.  A full
	 * local queue is drained by serving delivery reports (MSG_F_BLOCK
	 * would wait forever: reports are served on this thread). */
	do {
		err = rd_kafka_producev(
		    rk, RD_KAFKA_V_TOPIC(m->topic),
		    RD_KAFKA_V_PARTITION(m->part >= 0 ? m->part
						      : RD_KAFKA_PARTITION_UA),
		    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
		    RD_KAFKA_V_KEY(m->key, m->key ? m->key_len : 0),
		    RD_KAFKA_V_VALUE(m->payload,
				     m->payload ? m->payload_len : 0),
		    RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(slot),
		    RD_KAFKA_V_END);
		if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
			rd_kafka_poll(rk, 100);
	} while (err == RD_KAFKA_RESP_ERR__QUEUE_FULL);
	if (err) {
		rd_kafka_headers_destroy(hdrs); /* not consumed on failure */
		slot->status = DR_FAILED;
		slot->err = err;
		tbx__log(TBX_LOG_WARNING, "produce to %s failed: %s", m->topic,
			 rd_kafka_err2str(err));
		return TBX_EKAFKA;
	}
	return TBX_OK;
}

/* 1 when @p stop says to give up the reports still to come. */
static int stop_due(const tbx__dispatch_stop_t *stop, int64_t *waited)
{
	long long since;

	if (!stop || !stop->since ||
	    !(since = atomic_load_explicit(stop->since, memory_order_relaxed)))
		return 0;
	*waited = tbx__mono_ms() - since;
	return *waited >= stop->wait_ms;
}

int tbx__dispatch(rd_kafka_t *producer, const char *store_id,
		  tbx__row_t *const *rows, size_t cnt, int *delivered,
		  size_t *undelivered, rd_kafka_resp_err_t *errs, char *errstr,
		  size_t errstr_size, const tbx__dispatch_stop_t *stop)
{
	size_t total = 0, k = 0, pending;
	dr_slot_t *slots;
	int err = TBX_OK, purged = 0;
	int64_t waited = 0;

	if (!producer) { /* a fatal error destroyed it; none yet */
		for (size_t i = 0; i < cnt; i++) {
			delivered[i] = 0;
			for (size_t j = 0;
			     errs && rows[i] && j < rows[i]->msg_cnt; j++, k++)
				errs[k] = RD_KAFKA_RESP_ERR__FATAL;
		}
		if (undelivered)
			*undelivered = cnt;
		return tbx__seterr(errstr, errstr_size, TBX_EKAFKA,
				   "no producer (it is being recreated)");
	}

	for (size_t i = 0; i < cnt; i++)
		if (rows[i])
			total += rows[i]->msg_cnt;
	slots = calloc(total ? total : 1, sizeof(*slots));
	if (!slots)
		return TBX_ENOMEM;
	for (size_t i = 0; i < cnt; i++) {
		if (!rows[i])
			continue;
		for (size_t j = 0; j < rows[i]->msg_cnt; j++, k++)
			produce_one(producer, store_id, rows[i],
				    &rows[i]->msgs[j], &slots[k]);
	}
	tbx__crashpoint("C.produced");
	/* Wait for every report: bounded by message.timeout.ms, and once
	 * the worker stops by half its shutdown.timeout.ms (worker.c): an
	 * unreachable leader must not hold the stop past its bound.  What
	 * is purged is undelivered, its row left for redelivery, as after a
	 * crash in C; a copy the broker did take is dropped downstream by
	 * its token. */
	for (;;) {
		rd_kafka_flush(producer, 100);
		pending = 0;
		for (k = 0; k < total; k++)
			pending += slots[k].status == DR_PENDING;
		if (!pending)
			break;
		if (!purged && stop_due(stop, &waited)) {
			tbx__log(TBX_LOG_WARNING,
				 "stopping: %zu message(s) still without a "
				 "delivery report %lld ms after the stop "
				 "(half of shutdown.timeout.ms): given up "
				 "undelivered, their rows left to the "
				 "partitions' next owner, which sends them "
				 "again (a copy the broker did take is "
				 "dropped by its token)",
				 pending, (long long)waited);
			rd_kafka_purge(producer, RD_KAFKA_PURGE_F_QUEUE |
						     RD_KAFKA_PURGE_F_INFLIGHT);
			purged = 1;
		}
	}

	for (k = 0; k < total; k++)
		if (slots[k].span)
			tbx__trace_send_end(tbx__tracer_dispatch(),
					    slots[k].span, slots[k].err,
					    slots[k].partition, slots[k].offset,
					    slots[k].end_ns);
	k = 0;
	if (undelivered)
		*undelivered = 0;
	for (size_t i = 0; i < cnt; i++) {
		if (!rows[i]) {
			delivered[i] = 0;
			continue;
		}
		delivered[i] = 1;
		for (size_t j = 0; j < rows[i]->msg_cnt; j++, k++) {
			if (errs)
				errs[k] = slots[k].status == DR_OK
					      ? RD_KAFKA_RESP_ERR_NO_ERROR
					      : slots[k].err;
			if (slots[k].status == DR_OK)
				continue;
			delivered[i] = 0;
			if (undelivered)
				(*undelivered)++;
			err = tbx__seterr(errstr, errstr_size, TBX_EDELIVERY,
					  "delivery to %s failed: %s",
					  rows[i]->msgs[j].topic,
					  rd_kafka_err2str(slots[k].err));
		}
	}
	free(slots);
	return err;
}

/*
 * A fatal error (the idempotent producer lost track of its sequence
 * numbers: OUT_OF_ORDER_SEQUENCE_NUMBER, an expired producer id, ...)
 * leaves a producer unable to send anything again.  It is replaced by a
 * new one, with a new producer id.  That is safe for the worker and the
 * publisher alike: every message the old one did not deliver is still
 * held (in its outbox row, or in the publisher's minted batch), and it
 * is sent again with the same tbx-id and tbx-token, so a copy the old
 * producer did deliver is dropped downstream by its token; the
 * idempotent producer only ever deduplicated its own retries, which
 * tokens cover anyway.  Also creates the producer when there is none (a
 * creation failed).
 */
int tbx__producer_renew(rd_kafka_t **producer, const tbx_conf_t *conf,
			const char *who, uint64_t *restarts, char *errstr,
			size_t errstr_size)
{
	char reason[512];
	rd_kafka_resp_err_t err;

	if (*producer) {
		err = rd_kafka_fatal_error(*producer, reason, sizeof(reason));
		if (!err)
			return TBX_OK;
		(*restarts)++;
		tbx__log(TBX_LOG_ERR,
			 "%s: fatal error %s: %s; replacing the producer "
			 "(undelivered messages are sent again with their "
			 "ids and tokens)",
			 who, rd_kafka_err2name(err), reason);
		/* Every dispatch waited for its reports: no message of
		 * ours is left in it.  Purge what may be, then destroy. */
		rd_kafka_purge(*producer, RD_KAFKA_PURGE_F_QUEUE |
					      RD_KAFKA_PURGE_F_INFLIGHT);
		rd_kafka_poll(*producer, 0);
		rd_kafka_destroy(*producer);
		*producer = NULL;
	}
	*producer = tbx__producer_new(conf, errstr, errstr_size);
	if (!*producer) {
		tbx__log(TBX_LOG_ERR,
			 "%s: %s; tried again before the next "
			 "delivery",
			 who, errstr);
		return TBX_EKAFKA;
	}
	return TBX_OK;
}

int tbx__producer_check(rd_kafka_t **producer, const tbx_conf_t *conf,
			tbx_stats_t *stats, char *errstr, size_t errstr_size)
{
	return tbx__producer_renew(producer, conf, "producer",
				   &stats->producer_restarts, errstr,
				   errstr_size);
}
