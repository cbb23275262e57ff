/*
 * Dispatch (C): the idempotent producer and the wait for every delivery
 * report (producer.c).
 *
 * @locality the thread that owns the producer.
 */
#ifndef TBX_CONSUMER_PRODUCER_H
#define TBX_CONSUMER_PRODUCER_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdint.h>

#include "consumer/conf.h"
#include "outbox/outbox.h"

rd_kafka_t *tbx__producer_new(const tbx_conf_t *conf, char *errstr,
			      size_t errstr_size);
/** Replaces *@p producer after a fatal error, or creates it when there is
 *  none, from @p conf: counted in *@p restarts, logged at ERROR as @p who.
 *  Safe for every caller, since whatever the broken producer did not
 *  report delivered is sent again with the same tbx-id and tbx-token, and
 *  a copy it did deliver is dropped by the receivers.  @returns TBX_OK
 *  when there is a usable producer; else @p errstr says why. */
int tbx__producer_renew(rd_kafka_t **producer, const tbx_conf_t *conf,
			const char *who, uint64_t *restarts, char *errstr,
			size_t errstr_size);
/** The worker's tbx__producer_renew() (counted in
 *  @p stats->producer_restarts and logged), or creates it when there is
 *  none, from @p conf.  @returns TBX_OK when there is a usable producer;
 *  else @p errstr says why. */
int tbx__producer_check(rd_kafka_t **producer, const tbx_conf_t *conf,
			tbx_stats_t *stats, char *errstr, size_t errstr_size);
/** 1 when retrying a delivery that failed with @p err cannot succeed
 *  (the message or its topic is refused): the table in producer.c. */
int tbx__kafka_err_permanent(rd_kafka_resp_err_t err);
/** The producer's message.max.bytes (librdkafka's default without one). */
int64_t tbx__producer_max_bytes(rd_kafka_t *producer);
/** What ends a dispatch's wait for its reports early: a stop.  Once the
 *  worker's stop (*@p since, a tbx__mono_ms(); 0: none yet) is
 *  @p wait_ms old, the messages still without a report are purged from
 *  the producer and reported undelivered, as a crash would leave them. */
typedef struct tbx__dispatch_stop {
	const atomic_llong *since;
	int64_t wait_ms;
} tbx__dispatch_stop_t;

/**
 * Produces every outgoing message of @p rows (NULL entries skipped) with
 * the tbx-* headers (tbx-store = @p store_id with every token) and waits for
 * every delivery report.  delivered[i] = 1 when all messages of rows[i] were
 * acknowledged.  @p errs (may be NULL) receives each message's result, rows
 * in order, messages in order.  A NULL @p producer delivers nothing
 * (RD_KAFKA_RESP_ERR__FATAL).  @p stop (may be NULL, as its since): see
 * tbx__dispatch_stop_t.
 * @returns TBX_OK when all were, else TBX_EDELIVERY (or TBX_EKAFKA).
 */
int tbx__dispatch(rd_kafka_t *producer, const char *store_id,
		  tbx__row_t *const *rows, size_t cnt, int *delivered,
		  size_t *undelivered, rd_kafka_resp_err_t *errs, char *errstr,
		  size_t errstr_size, const tbx__dispatch_stop_t *stop);

#endif
