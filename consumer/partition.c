/*
 * The destination partition chosen before minting: librdkafka's public
 * partitioner functions on a partition count learnt from the metadata and
 * cached per topic.
 *
 * What librdkafka's producer does (src/rdkafka_msg.c,
 * rd_kafka_msg_partitioner(), 2.0.2 and later): a message without a key
 * (a NULL key, or an empty one under consistent_random) goes to a random
 * "sticky" partition unless the partitioner is `random` itself; every
 * other message goes to the configured function.  Here the same split is
 * made, the random pick our own: librdkafka's random partitioner asks
 * rd_kafka_topic_partition_available(), which only a partitioner called
 * by the producer, under its topic lock, may call.  The keyed functions
 * read the key and the count only, so they are called without a topic
 * handle.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/partition.h"

typedef int32_t (*part_fn)(const rd_kafka_topic_t *rkt, const void *key,
			   size_t keylen, int32_t partition_cnt,
			   void *rkt_opaque, void *msg_opaque);

/* librdkafka's `partitioner` values (CONFIGURATION.md of 2.0.2). */
static const struct {
	const char *name;
	part_fn fn;	     /* NULL: random for every message */
	int empty_is_random; /* an empty key is as none */
} kinds[] = {
    {"random", NULL, 1},
    {"consistent", rd_kafka_msg_partitioner_consistent, 0},
    {"consistent_random", rd_kafka_msg_partitioner_consistent_random, 1},
    {"murmur2", rd_kafka_msg_partitioner_murmur2, 0},
    {"murmur2_random", rd_kafka_msg_partitioner_murmur2_random, 0},
    {"fnv1a", rd_kafka_msg_partitioner_fnv1a, 0},
    {"fnv1a_random", rd_kafka_msg_partitioner_fnv1a_random, 0},
};

typedef struct entry {
	char *topic;
	int32_t cnt;
	int64_t learnt_ms; /* tbx__mono_ms() */
} entry_t;

struct tbx__partitioner {
	size_t kind;
	int64_t refresh_ms; /* <= 0: only tbx__partition_forget() */
	uint64_t *unknown;
	uint64_t unknown_own; /* when the caller gives no counter */
	uint64_t warned;      /* *unknown when last logged */
	int64_t warned_ms;
	uint64_t rng;
	entry_t *cache;
	size_t cnt, cap;
};

int tbx__partitioner_new(rd_kafka_t *producer, uint64_t *unknown,
			 tbx__partitioner_t **out, char *errstr,
			 size_t errstr_size)
{
	char name[64] = "consistent_random", refresh[32];
	size_t size = sizeof(name);
	tbx__partitioner_t *pt;
	size_t kind = SIZE_MAX;

	*out = NULL;
	if (!producer)
		return tbx__seterr(errstr, errstr_size, TBX_EINVAL,
				   "partitioner: no producer");
	/* A topic property: rd_kafka_conf_get() finds it in the producer's
	 * default topic configuration, where kafka.partitioner put it. */
	if (rd_kafka_conf_get(rd_kafka_conf(producer), "partitioner", name,
			      &size) != RD_KAFKA_CONF_OK)
		snprintf(name, sizeof(name), "%s", "consistent_random");
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strcmp(name, kinds[i].name) == 0)
			kind = i;
	if (kind == SIZE_MAX)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "kafka.partitioner: '%s' is not one of "
				   "librdkafka's partitioners (random, "
				   "consistent, consistent_random, murmur2, "
				   "murmur2_random, fnv1a, fnv1a_random)",
				   name);
	if (!(pt = calloc(1, sizeof(*pt))))
		return tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				   "out of memory");
	pt->kind = kind;
	pt->refresh_ms = TBX_PARTITION_REFRESH_MS;
	size = sizeof(refresh);
	if (rd_kafka_conf_get(rd_kafka_conf(producer),
			      "topic.metadata.refresh.interval.ms", refresh,
			      &size) == RD_KAFKA_CONF_OK)
		pt->refresh_ms = strtoll(refresh, NULL, 10);
	pt->unknown = unknown ? unknown : &pt->unknown_own;
	pt->warned = *pt->unknown;
	pt->rng = (uint64_t)tbx__now_ms() * 0x9e3779b97f4a7c15ull ^
		  (uint64_t)getpid() ^ (uint64_t)(uintptr_t)pt;
	if (!pt->rng)
		pt->rng = 1;
	*out = pt;
	return TBX_OK;
}

void tbx__partitioner_destroy(tbx__partitioner_t *pt)
{
	if (!pt)
		return;
	for (size_t i = 0; i < pt->cnt; i++)
		free(pt->cache[i].topic);
	free(pt->cache);
	free(pt);
}

const char *tbx__partitioner_name(const tbx__partitioner_t *pt)
{
	return kinds[pt->kind].name;
}

static entry_t *find(const tbx__partitioner_t *pt, const char *topic)
{
	for (size_t i = 0; i < pt->cnt; i++)
		if (strcmp(pt->cache[i].topic, topic) == 0)
			return &pt->cache[i];
	return NULL;
}

void tbx__partition_forget(tbx__partitioner_t *pt, const char *topic)
{
	entry_t *e = pt && topic ? find(pt, topic) : NULL;

	if (e)
		e->cnt = -1;
}

int32_t tbx__partition_cached(const tbx__partitioner_t *pt, const char *topic)
{
	const entry_t *e = find(pt, topic);

	return e ? e->cnt : -1;
}

/* One metadata request for @p topic: its partition count, or -1 with
 * *why set. */
static int32_t ask_count(rd_kafka_t *producer, rd_kafka_topic_t *rkt,
			 int timeout_ms, rd_kafka_resp_err_t *why)
{
	const struct rd_kafka_metadata *md = NULL;
	int32_t cnt = -1;

	*why = rd_kafka_metadata(producer, 0, rkt, &md, timeout_ms);
	if (*why)
		return -1;
	if (md->topic_cnt != 1)
		*why = RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
	else if (md->topics[0].err)
		*why = md->topics[0].err;
	else if (md->topics[0].partition_cnt <= 0)
		*why = RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION;
	else
		cnt = md->topics[0].partition_cnt;
	rd_kafka_metadata_destroy(md);
	return cnt;
}

/* Asks until a count comes or @p timeout_ms passed: a topic being
 * created, or a leader moving, answers with an error for a while. */
static int learn(tbx__partitioner_t *pt, rd_kafka_t *producer,
		 const char *topic, int timeout_ms, int32_t *cnt)
{
	int64_t deadline = tbx__mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	rd_kafka_resp_err_t why = RD_KAFKA_RESP_ERR__TIMED_OUT;
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(producer, topic, NULL);
	int64_t left;

	if (!rkt)
		return TBX_ENOMEM;
	*cnt = -1;
	while ((left = deadline - tbx__mono_ms()) > 0) {
		if ((*cnt = ask_count(producer, rkt, (int)left, &why)) > 0)
			break;
		left = deadline - tbx__mono_ms();
		if (left > 0) {
			struct timespec ts = {0, (left < 100 ? left : 100) *
						     1000000L};
			nanosleep(&ts, NULL);
		}
	}
	rd_kafka_topic_destroy(rkt);
	if (*cnt > 0)
		return TBX_OK;
	(*pt->unknown)++;
	int64_t now = tbx__mono_ms();
	if (!pt->warned_ms || now - pt->warned_ms >= TBX_PARTITION_WARN_MS) {
		tbx__log(TBX_LOG_WARNING,
			 "%s: partition count not learnt from the metadata "
			 "within %d ms (%s): no partition chosen; %" PRIu64
			 " such failure(s) since the last warning, %" PRIu64
			 " in all (partition_unknown)",
			 topic, timeout_ms, rd_kafka_err2str(why),
			 *pt->unknown - pt->warned, *pt->unknown);
		pt->warned = *pt->unknown;
		pt->warned_ms = now;
	}
	return TBX_ETIMEOUT;
}

/* Uniform enough in [0, n): xorshift64*, 64 bits reduced to n < 2^31. */
static int32_t pick(tbx__partitioner_t *pt, int32_t n)
{
	pt->rng ^= pt->rng >> 12;
	pt->rng ^= pt->rng << 25;
	pt->rng ^= pt->rng >> 27;
	return (int32_t)((pt->rng * 0x2545f4914f6cdd1dull >> 11) % (uint64_t)n);
}

int tbx__partition_choose(tbx__partitioner_t *pt, rd_kafka_t *producer,
			  const char *topic, const void *key, size_t key_len,
			  int timeout_ms, int32_t *partition)
{
	entry_t *e;
	int32_t cnt, p;
	int err;

	if (!pt || !producer || !topic)
		return TBX_EINVAL;
	e = find(pt, topic);
	if (!e || e->cnt <= 0 ||
	    (pt->refresh_ms > 0 &&
	     tbx__mono_ms() - e->learnt_ms >= pt->refresh_ms)) {
		if ((err = learn(pt, producer, topic, timeout_ms, &cnt)))
			return err;
		if (!e) {
			if (pt->cnt == pt->cap) {
				size_t cap = pt->cap ? pt->cap * 2 : 8;
				entry_t *c =
				    realloc(pt->cache, cap * sizeof(*c));
				if (!c)
					return TBX_ENOMEM;
				pt->cache = c;
				pt->cap = cap;
			}
			if (!(pt->cache[pt->cnt].topic = tbx__strdup(topic)))
				return TBX_ENOMEM;
			e = &pt->cache[pt->cnt++];
		}
		e->cnt = cnt;
		e->learnt_ms = tbx__mono_ms();
	}
	cnt = e->cnt;
	if (!kinds[pt->kind].fn || !key ||
	    (key_len == 0 && kinds[pt->kind].empty_is_random))
		p = pick(pt, cnt);
	else
		p = kinds[pt->kind].fn(NULL, key, key_len, cnt, NULL, NULL);
	if (p < 0 || p >= cnt) /* never from librdkafka's functions */
		return TBX_EINVAL;
	*partition = p;
	return TBX_OK;
}
