/*
 * The destination partition chosen before minting (consumer/partition.c):
 * for every partitioner librdkafka has, the partition chosen for a key is
 * the one librdkafka's own producer assigns to a message with that key
 * and no partition, read back from its delivery report; a message
 * produced to the chosen partition explicitly lands there; and a topic
 * whose partition count cannot be learnt gives TBX_ETIMEOUT, counted.
 * On the mock cluster: its faults (a topic's metadata error) are the
 * mock's.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "consumer/conf.h"
#include "consumer/partition.h"
#include "consumer/producer.h"
#include "support.h"

#define PARTS 7	  /* odd, so that no two hashes agree by luck */
#define KEYS  400 /* keyed messages per partitioner */

static const char *const NAMES[] = {
    "random",	      "consistent", "consistent_random", "murmur2",
    "murmur2_random", "fnv1a",	    "fnv1a_random",
};
#define NAME_CNT (sizeof(NAMES) / sizeof(NAMES[0]))

typedef struct report {
	int done;
	rd_kafka_resp_err_t err;
	int32_t partition;
} report_t;

static void on_report(rd_kafka_t *rk, const rd_kafka_message_t *rkm,
		      void *opaque)
{
	report_t *r = rkm->_private;

	(void)rk;
	(void)opaque;
	r->err = rkm->err;
	r->partition = rkm->partition;
	r->done = 1;
}

/* A plain librdkafka producer with @p conf's producer settings (the same
 * partitioner) and a delivery report per message into its report_t. */
static rd_kafka_t *plain_producer(const tbx_conf_t *conf)
{
	char err[512];
	rd_kafka_conf_t *kc =
	    tbx__conf_kafka(conf, "producer", err, sizeof(err));
	rd_kafka_t *rk;

	cr_assert(kc, "%s", err);
	rd_kafka_conf_set_dr_msg_cb(kc, on_report);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, err, sizeof(err));
	cr_assert(rk, "%s", err);
	return rk;
}

static void produce(rd_kafka_t *rk, const char *topic, int32_t partition,
		    const void *key, size_t key_len, report_t *r)
{
	cr_assert_eq(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
				       RD_KAFKA_V_PARTITION(partition),
				       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
				       RD_KAFKA_V_KEY(key, key_len),
				       RD_KAFKA_V_VALUE("v", 1),
				       RD_KAFKA_V_OPAQUE(r), RD_KAFKA_V_END),
		     RD_KAFKA_RESP_ERR_NO_ERROR);
}

static void flush(rd_kafka_t *rk, const report_t *r, size_t cnt)
{
	cr_assert_eq(rd_kafka_flush(rk, 60000 * tt_time_factor()),
		     RD_KAFKA_RESP_ERR_NO_ERROR);
	for (size_t i = 0; i < cnt; i++)
		cr_assert(r[i].done && !r[i].err, "message %zu: %s", i,
			  rd_kafka_err2str(r[i].err));
}

/* Key @p k: text keys of many lengths, then binary keys with NULs and
 * high bytes.  @returns its length. */
static size_t make_key(int k, char *buf, size_t size)
{
	if (k % 2 == 0)
		return (size_t)snprintf(buf, size, "key-%d-%.*s", k, k % 37,
					"abcdefghijklmnopqrstuvwxyz0123456789");
	size_t len = (size_t)(k % 23) + 1;
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)((k * 131 + (int)i * 17) & 0xff);
	return len;
}

static tbx_conf_t *conf_for(const tt_cluster_t *c, const char *dir,
			    const char *partitioner, const char *refresh)
{
	char *store = tt_path(dir, "s.db"), *tokens = tt_path(dir, "t.db");
	tbx_conf_t *conf =
	    partitioner ? tt_conf(c->bootstraps, "g1", store, tokens,
				  "kafka.producer.partitioner", partitioner,
				  "kafka.topic.metadata.refresh.interval.ms",
				  refresh, NULL)
			: tt_conf(c->bootstraps, "g1", store, tokens,
				  "kafka.topic.metadata.refresh.interval.ms",
				  refresh, NULL);
	free(store);
	free(tokens);
	return conf;
}

/* The worker's producer, and a partitioner on it counting into *unknown. */
static rd_kafka_t *worker_producer(const tbx_conf_t *conf, uint64_t *unknown,
				   tbx__partitioner_t **pt)
{
	char err[512];
	rd_kafka_t *rk = tbx__producer_new(conf, err, sizeof(err));

	cr_assert(rk, "%s", err);
	cr_assert_eq(tbx__partitioner_new(rk, unknown, pt, err, sizeof(err)),
		     TBX_OK, "%s", err);
	return rk;
}

Test(partition, every_partitioner_chooses_what_the_producer_assigns)
{
	char *dir = tt_tmpdir();
	tt_cluster_t *c = tt_cluster_new(3);
	int timeout = 30000 * tt_time_factor();
	size_t compared = 0;

	tt_cluster_topic(c, "out", PARTS);
	for (size_t n = 0; n < NAME_CNT; n++) {
		const char *name = NAMES[n];
		int random_for_all = strcmp(name, "random") == 0;
		int empty_random =
		    random_for_all || strcmp(name, "consistent_random") == 0;
		tbx_conf_t *conf = conf_for(c, dir, name, "300000");
		uint64_t unknown = 0;
		tbx__partitioner_t *pt;
		rd_kafka_t *mine = worker_producer(conf, &unknown, &pt);
		rd_kafka_t *theirs = plain_producer(conf);
		report_t *r = calloc(KEYS + 1, sizeof(*r));
		int32_t *chosen = calloc(KEYS + 1, sizeof(*chosen));
		int seen[PARTS] = {0};
		char key[64];

		cr_assert_str_eq(tbx__partitioner_name(pt), name,
				 "read from the producer's configuration");
		/* KEYS keys, then the empty key (not a NULL one) */
		for (int k = 0; k <= KEYS; k++) {
			size_t len =
			    k < KEYS ? make_key(k, key, sizeof(key)) : 0;
			cr_assert_eq(tbx__partition_choose(pt, mine, "out", key,
							   len, timeout,
							   &chosen[k]),
				     TBX_OK, "%s key %d", name, k);
			cr_assert(chosen[k] >= 0 && chosen[k] < PARTS);
			seen[chosen[k]]++;
			produce(theirs, "out", RD_KAFKA_PARTITION_UA, key, len,
				&r[k]);
		}
		flush(theirs, r, KEYS + 1);
		for (int k = 0; k <= KEYS; k++) {
			if (random_for_all || (k == KEYS && empty_random))
				continue;
			cr_assert_eq(chosen[k], r[k].partition,
				     "%s: key %d: chosen %d, the producer "
				     "assigned %d",
				     name, k, chosen[k], r[k].partition);
			compared++;
		}
		for (int p = 0; p < PARTS; p++)
			cr_assert(seen[p] > 0, "%s: partition %d never chosen",
				  name, p);
		/* No key: a random partition under every partitioner, as the
		 * producer's; produced there explicitly, it lands there. */
		for (int k = 0; k < PARTS * 4; k++) {
			cr_assert_eq(tbx__partition_choose(pt, mine, "out",
							   NULL, 0, timeout,
							   &chosen[k]),
				     TBX_OK);
			cr_assert(chosen[k] >= 0 && chosen[k] < PARTS);
			memset(&r[k], 0, sizeof(r[k]));
			produce(theirs, "out", chosen[k], NULL, 0, &r[k]);
		}
		flush(theirs, r, PARTS * 4);
		for (int k = 0; k < PARTS * 4; k++)
			cr_assert_eq(r[k].partition, chosen[k]);
		cr_assert_eq(tbx__partition_cached(pt, "out"), PARTS);
		cr_assert_eq(unknown, 0);
		free(r);
		free(chosen);
		rd_kafka_destroy(theirs);
		rd_kafka_destroy(mine);
		tbx__partitioner_destroy(pt);
		tbx_conf_destroy(conf);
	}
	/* every keyed message but under random, and the empty key but under
	 * random and consistent_random */
	cr_assert_eq(compared, 6 * KEYS + 5);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
}

/* Without kafka.partitioner, librdkafka's default: consistent_random. */
Test(partition, the_default_is_librdkafkas)
{
	char *dir = tt_tmpdir();
	tt_cluster_t *c = tt_cluster_new(1);
	tbx_conf_t *conf = conf_for(c, dir, NULL, "300000");
	tbx__partitioner_t *pt;
	rd_kafka_t *mine = worker_producer(conf, NULL, &pt);

	cr_assert_str_eq(tbx__partitioner_name(pt), "consistent_random");
	rd_kafka_destroy(mine);
	tbx__partitioner_destroy(pt);
	tbx_conf_destroy(conf);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
}

/* A message produced to a partition explicitly lands in it, whatever its
 * key would hash to: what lets every copy land where its set was minted. */
Test(partition, an_explicit_partition_is_where_a_message_lands)
{
	char *dir = tt_tmpdir();
	tt_cluster_t *c = tt_cluster_new(1);
	tbx_conf_t *conf = conf_for(c, dir, "murmur2", "300000");
	rd_kafka_t *theirs = plain_producer(conf);
	report_t r[PARTS] = {{0}};
	tt_record_t *recs;
	size_t cnt;

	tt_cluster_topic(c, "out", PARTS);
	/* one key for all: murmur2 would put every one in one partition */
	for (int p = 0; p < PARTS; p++)
		produce(theirs, "out", p, "same-key", 8, &r[p]);
	flush(theirs, r, PARTS);
	for (int p = 0; p < PARTS; p++)
		cr_assert_eq(r[p].partition, p);
	cnt = tt_read_topic(c->bootstraps, "out", &recs);
	cr_assert_eq(cnt, PARTS);
	int seen[PARTS] = {0};
	for (size_t i = 0; i < cnt; i++) {
		cr_assert_str_eq(recs[i].key, "same-key");
		seen[recs[i].partition]++;
	}
	for (int p = 0; p < PARTS; p++)
		cr_assert_eq(seen[p], 1, "partition %d", p);
	tt_records_free(recs, cnt);
	rd_kafka_destroy(theirs);
	tbx_conf_destroy(conf);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
}

/* The metadata names the topic with an error: no count within the time
 * given is TBX_ETIMEOUT, counted once per failed choice. */
Test(partition, an_unknown_count_times_out_and_is_counted)
{
	char *dir = tt_tmpdir();
	tt_cluster_t *c = tt_cluster_new(1);
	tbx_conf_t *conf = conf_for(c, dir, "murmur2", "-1");
	uint64_t unknown = 0;
	tbx__partitioner_t *pt;
	rd_kafka_t *mine;
	int32_t p = -5;

	if (!c->mock)
		cr_skip_test("needs the mock cluster's faults");
	tt_cluster_topic(c, "hidden", 3);
	rd_kafka_mock_topic_set_error(c->mock, "hidden",
				      RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
	mine = worker_producer(conf, &unknown, &pt);
	cr_assert_eq(
	    tbx__partition_choose(pt, mine, "hidden", "k", 1, 1500, &p),
	    TBX_ETIMEOUT);
	cr_assert_eq(p, -5, "no partition given");
	cr_assert_eq(unknown, 1);
	cr_assert_eq(tbx__partition_cached(pt, "hidden"), -1);
	cr_assert_eq(
	    tbx__partition_choose(pt, mine, "hidden", NULL, 0, 500, &p),
	    TBX_ETIMEOUT);
	cr_assert_eq(unknown, 2);
	/* the error gone, the count is learnt */
	rd_kafka_mock_topic_set_error(c->mock, "hidden",
				      RD_KAFKA_RESP_ERR_NO_ERROR);
	cr_assert_eq(tbx__partition_choose(pt, mine, "hidden", "k", 1,
					   30000 * tt_time_factor(), &p),
		     TBX_OK);
	cr_assert(p >= 0 && p < 3);
	cr_assert_eq(tbx__partition_cached(pt, "hidden"), 3);
	cr_assert_eq(unknown, 2);
	rd_kafka_destroy(mine);
	tbx__partitioner_destroy(pt);
	tbx_conf_destroy(conf);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
}

/* A learnt count is used without asking again (the metadata's error is
 * not seen) until tbx__partition_forget() after an unknown partition, or
 * the refresh interval, drops it. */
Test(partition, the_count_is_cached_until_forgotten_or_stale)
{
	char *dir = tt_tmpdir();
	tt_cluster_t *c = tt_cluster_new(1);
	tbx_conf_t *never = conf_for(c, dir, "fnv1a", "-1");
	tbx_conf_t *often = conf_for(c, dir, "fnv1a", "1");
	uint64_t unknown = 0;
	tbx__partitioner_t *pt, *pt2;
	rd_kafka_t *mine, *mine2;
	int timeout = 30000 * tt_time_factor();
	int32_t p;

	if (!c->mock)
		cr_skip_test("needs the mock cluster's faults");
	tt_cluster_topic(c, "out", PARTS);
	mine = worker_producer(never, &unknown, &pt);
	mine2 = worker_producer(often, &unknown, &pt2);
	cr_assert_eq(
	    tbx__partition_choose(pt, mine, "out", "k", 1, timeout, &p),
	    TBX_OK);
	cr_assert_eq(
	    tbx__partition_choose(pt2, mine2, "out", "k", 1, timeout, &p),
	    TBX_OK);
	rd_kafka_mock_topic_set_error(c->mock, "out",
				      RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(
		    tbx__partition_choose(pt, mine, "out", "k", 1, 1000, &p),
		    TBX_OK, "from the cache");
	cr_assert_eq(unknown, 0);
	/* refresh interval 1 ms: after 20 ms the count is asked again */
	struct timespec ts = {0, 20 * 1000000L};
	nanosleep(&ts, NULL);
	cr_assert_eq(tbx__partition_choose(pt2, mine2, "out", "k", 1, 1000, &p),
		     TBX_ETIMEOUT);
	cr_assert_eq(unknown, 1);
	/* an unknown partition reported: forgotten, asked again */
	tbx__partition_forget(pt, "out");
	cr_assert_eq(tbx__partition_cached(pt, "out"), -1);
	cr_assert_eq(tbx__partition_choose(pt, mine, "out", "k", 1, 1000, &p),
		     TBX_ETIMEOUT);
	cr_assert_eq(unknown, 2);
	rd_kafka_destroy(mine);
	rd_kafka_destroy(mine2);
	tbx__partitioner_destroy(pt);
	tbx__partitioner_destroy(pt2);
	tbx_conf_destroy(never);
	tbx_conf_destroy(often);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
}

/* A name librdkafka does not know is refused with the configuration,
 * before any producer (tbx__partitioner_new() refuses, with TBX_ECONF,
 * only a name a later librdkafka may add that it does not mirror). */
Test(partition, an_unknown_partitioner_is_refused)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];

	cr_assert_eq(tbx_conf_set(conf, "kafka.producer.partitioner",
				  "roundrobin", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "partitioner"), "%s", err);
	for (size_t n = 0; n < NAME_CNT; n++)
		cr_assert_eq(tbx_conf_set(conf, "kafka.partitioner", NAMES[n],
					  err, sizeof(err)),
			     TBX_OK, "%s: %s", NAMES[n], err);
	tbx_conf_destroy(conf);
}
