/* The harness's own Kafka clients: topic readers and the re-sender. */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chaos.h"

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static rd_kafka_t *client(rd_kafka_type_t type, const char *bootstraps)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char err[512];
	rd_kafka_t *rk;
	static const char *const kv[][2] = {
	    {"log_level", "0"},
	    {"enable.partition.eof", "true"},
	    {"enable.auto.commit", "false"},
	    {"group.id", "tbx-chaos-reader"},
	    {"fetch.wait.max.ms", "10"},
	};

	rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, err,
			  sizeof(err));
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++) {
		if (type == RD_KAFKA_PRODUCER && i > 0)
			break;
		rd_kafka_conf_set(conf, kv[i][0], kv[i][1], err, sizeof(err));
	}
	if (type == RD_KAFKA_PRODUCER)
		rd_kafka_conf_set(conf, "message.timeout.ms", "10000", err,
				  sizeof(err));
	if (!(rk = rd_kafka_new(type, conf, err, sizeof(err)))) {
		fprintf(stderr, "chaos: kafka client: %s\n", err);
		rd_kafka_conf_destroy(conf);
	}
	return rk;
}

long ch_read_topic(const char *bootstraps, const char *topic, int parts,
		   int timeout_ms, ch_record_fn fn, void *opaque)
{
	rd_kafka_t *rk = client(RD_KAFKA_CONSUMER, bootstraps);
	rd_kafka_topic_partition_list_t *list;
	int64_t deadline = mono_ms() + timeout_ms;
	long cnt = 0;
	int eofs = 0;

	if (!rk)
		return -1;
	list = rd_kafka_topic_partition_list_new(parts);
	for (int p = 0; p < parts; p++)
		rd_kafka_topic_partition_list_add(list, topic, p)->offset =
		    RD_KAFKA_OFFSET_BEGINNING;
	rd_kafka_assign(rk, list);
	rd_kafka_topic_partition_list_destroy(list);
	while (eofs < parts && mono_ms() < deadline) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
		if (!m)
			continue;
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
			eofs++;
		else if (!m->err) {
			cnt++;
			if (fn)
				fn(opaque, m);
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	return eofs == parts ? cnt : -1;
}

/* Produces a copy of @p m to its topic and partition. */
static int copy_out(rd_kafka_t *prod, const rd_kafka_message_t *m)
{
	rd_kafka_headers_t *hdrs = NULL, *copy = NULL;
	rd_kafka_resp_err_t err;

	if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR)
		copy = rd_kafka_headers_copy(hdrs);
	err = rd_kafka_producev(prod,
				RD_KAFKA_V_TOPIC(rd_kafka_topic_name(m->rkt)),
				RD_KAFKA_V_PARTITION(m->partition),
				RD_KAFKA_V_KEY(m->key, m->key_len),
				RD_KAFKA_V_VALUE(m->payload, m->len),
				RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
				RD_KAFKA_V_HEADERS(copy), RD_KAFKA_V_END);
	if (err && copy)
		rd_kafka_headers_destroy(copy);
	return err ? -1 : 0;
}

long ch_resend(const char *bootstraps, const char *topic, int parts,
	       uint64_t *rng, long max)
{
	rd_kafka_t *cons = client(RD_KAFKA_CONSUMER, bootstraps);
	rd_kafka_t *prod = client(RD_KAFKA_PRODUCER, bootstraps);
	rd_kafka_topic_partition_list_t *list;
	int p = (int)ch_between(rng, 0, parts - 1);
	int64_t deadline = mono_ms() + 5000;
	long sent = 0;

	if (!cons || !prod)
		goto out;
	/* From up to 2000 records before the end: librdkafka resolves the
	 * offset in the background, so a leader that is down only makes the
	 * loop below time out (rd_kafka_query_watermark_offsets() can block
	 * past its timeout then). */
	list = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(list, topic, p)->offset =
	    RD_KAFKA_OFFSET_TAIL(ch_between(rng, 1, 2000));
	rd_kafka_assign(cons, list);
	rd_kafka_topic_partition_list_destroy(list);
	while (sent < max && mono_ms() < deadline) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(cons, 100);
		int eof;
		if (!m)
			continue;
		eof = m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF;
		if (!m->err && copy_out(prod, m) == 0)
			sent++;
		rd_kafka_message_destroy(m);
		if (eof)
			break;
	}
	if (rd_kafka_flush(prod, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
		fprintf(stderr, "chaos: re-send: %d copies not confirmed\n",
			rd_kafka_outq_len(prod));
		rd_kafka_purge(prod, RD_KAFKA_PURGE_F_QUEUE |
					 RD_KAFKA_PURGE_F_INFLIGHT);
	}
out:
	if (cons) {
		rd_kafka_consumer_close(cons);
		rd_kafka_destroy(cons);
	}
	if (prod)
		rd_kafka_destroy(prod);
	return sent;
}
