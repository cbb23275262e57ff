/*
 * The destination partition of an outgoing message, chosen before its
 * token set is minted (docs/batched-tokens.md, "The destination partition
 * is chosen before minting"): the partition librdkafka's producer would
 * choose for the message's key with the producer's configured
 * `partitioner`, from the topic's partition count in the cluster's
 * metadata.  The message is then produced to that partition explicitly
 * (RD_KAFKA_V_PARTITION), so every copy lands where its set was minted.
 *
 * A partitioner callback set with rd_kafka_topic_conf_set_partitioner_cb()
 * is not supported: tokenbox sets none and offers plugins no way to set
 * one; only the names librdkafka's `partitioner` property takes are.
 *
 * @locality the thread that owns the producer (not thread-safe).
 */
#ifndef TBX_CONSUMER_PARTITION_H
#define TBX_CONSUMER_PARTITION_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tbx__partitioner tbx__partitioner_t;

/** A partition count learnt from metadata is asked again after
 *  topic.metadata.refresh.interval.ms of the producer (librdkafka's
 *  default below when it has none); a failed WARN is logged at most once
 *  per this many ms. */
#define TBX_PARTITION_REFRESH_MS 300000
#define TBX_PARTITION_WARN_MS	 60000

/**
 * Reads @p producer's `partitioner` (the librdkafka property, as
 * kafka.partitioner or kafka.producer.partitioner set it; librdkafka's
 * default consistent_random without one) and its
 * topic.metadata.refresh.interval.ms.  @p unknown (may be NULL) is the
 * counter of partition counts that could not be learnt (the worker's
 * tbx_stats_t.partition_unknown); it must outlive the partitioner.
 * @returns TBX_OK with *@p out (the caller's: tbx__partitioner_destroy()),
 * TBX_ECONF for a partitioner name librdkafka does not have (@p errstr
 * says which), or TBX_ENOMEM.
 */
int tbx__partitioner_new(rd_kafka_t *producer, uint64_t *unknown,
			 tbx__partitioner_t **out, char *errstr,
			 size_t errstr_size);
/** Frees @p pt and its cache.  NULL: no-op. */
void tbx__partitioner_destroy(tbx__partitioner_t *pt);
/** The partitioner's name, e.g. "consistent_random"; valid while @p pt is. */
const char *tbx__partitioner_name(const tbx__partitioner_t *pt);

/**
 * The partition of @p topic for a message keyed @p key (@p key_len bytes;
 * NULL: no key; pass the key exactly as it will be produced, since
 * librdkafka tells a NULL key from an empty one).  As librdkafka's
 * producer does: a message without a key (NULL, or empty under
 * consistent_random), and every message under `random`, gets a random
 * partition; the others librdkafka's rd_kafka_msg_partitioner_*() of the
 * configured name.  The count comes from the cache, or from a metadata
 * request on @p producer (the same cluster the message goes to) when the
 * topic is not cached, its count is older than the refresh interval, or
 * tbx__partition_forget() dropped it; a request is repeated until
 * @p timeout_ms has passed.
 * @returns TBX_OK with *@p partition in [0, count), TBX_ETIMEOUT when the
 * count could not be learnt within @p timeout_ms (counted in *unknown and
 * logged at WARN, at most once per TBX_PARTITION_WARN_MS), TBX_EINVAL
 * (NULL producer or topic) or TBX_ENOMEM.
 */
int tbx__partition_choose(tbx__partitioner_t *pt, rd_kafka_t *producer,
			  const char *topic, const void *key, size_t key_len,
			  int timeout_ms, int32_t *partition);

/** Forgets the cached count of @p topic: the next choice asks the
 *  metadata.  For a delivery that failed with an unknown partition
 *  (RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION). */
void tbx__partition_forget(tbx__partitioner_t *pt, const char *topic);

/** The partition count of @p topic in the cache, or -1 (for tests and
 *  inspect). */
int32_t tbx__partition_cached(const tbx__partitioner_t *pt, const char *topic);

#endif
