/*
 * The real broker of the `kafka` tier (scripts/kafka.sh): the pinned
 * Apache Kafka takes the consumer-group protocol of the librdkafka this
 * project builds with, and `tokenbox demo --bootstrap-servers` runs on it
 * exactly once.
 *
 * The pin is what this proves: Kafka 4.0.0 removed JoinGroup v0/v1, and
 * librdkafka before 2.11 (Debian 12 ships 2.0.2) detects two features by
 * JoinGroup v0 in the broker's ApiVersions; 4.0.1 and 4.1.0 restored them
 * (KAFKA-19444).  On plaintext, groups work on 4.0.0 as well (the join
 * tests pass there); the feature test fails there.
 */
#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <time.h>

#include "cli_child.h"
#include "support.h"

static const char *bootstrap(void)
{
	const char *b = tt_real_kafka();

	if (!b)
		cr_skip_test("needs a real cluster: run in the kafka tier "
			     "(TBX_KAFKA_TIER=1, TBX_KAFKA_BOOTSTRAP)");
	return b;
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac,
		   const char *buf)
{
	(void)rk;
	if (level <= 4)
		cr_log_warn("rdkafka %s: %s", fac, buf);
}

static void join_and_read(const char *boot, const char *strategy)
{
	tt_cluster_t *c = tt_cluster_new(1);
	char err[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_topic_partition_list_t *sub;
	rd_kafka_t *rk;
	time_t deadline = time(NULL) + 60 * tt_time_factor();
	int got = 0;

	cr_log_info("librdkafka %s on %s, %s", rd_kafka_version_str(), boot,
		    strategy);
	tt_cluster_topic(c, "pin", 2);
	tt_produce_plain(c->bootstraps, "pin", 1, "k", "joined", NULL);
	rd_kafka_conf_set_log_cb(conf, on_log);
	cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", boot, err,
				       sizeof(err)),
		     RD_KAFKA_CONF_OK);
	rd_kafka_conf_set(conf, "group.id", "pin", NULL, 0);
	rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", NULL, 0);
	rd_kafka_conf_set(conf, "session.timeout.ms", "6000", NULL, 0);
	rd_kafka_conf_set(conf, "partition.assignment.strategy", strategy, NULL,
			  0);
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
	cr_assert(rk, "%s", err);
	rd_kafka_poll_set_consumer(rk);
	sub = rd_kafka_topic_partition_list_new(1);
	rd_kafka_topic_partition_list_add(sub, "pin", RD_KAFKA_PARTITION_UA);
	cr_assert_eq(rd_kafka_subscribe(rk, sub), RD_KAFKA_RESP_ERR_NO_ERROR);
	rd_kafka_topic_partition_list_destroy(sub);
	/* A record arrives only through the group's assignment: JoinGroup,
	 * SyncGroup and OffsetFetch all went through. */
	while (!got && time(NULL) < deadline) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
		if (!m)
			continue;
		cr_assert(!m->err || m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF,
			  "%s", rd_kafka_message_errstr(m));
		got = !m->err && m->len == 6 &&
		      memcmp(m->payload, "joined", 6) == 0;
		rd_kafka_message_destroy(m);
	}
	cr_assert(got, "librdkafka %s got no assignment from %s in time",
		  rd_kafka_version_str(), boot);
	cr_assert_eq(rd_kafka_commit(rk, NULL, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	tt_cluster_destroy(c);
}

static atomic_int balanced_consumer, sasl;

/* 1 if @p buf ends with "Enabling feature <name>". */
static int enables(const char *buf, const char *name)
{
	const char *at = strstr(buf, "Enabling feature ");

	return at && strcmp(at + strlen("Enabling feature "), name) == 0;
}

static void on_feature(const rd_kafka_t *rk, int level, const char *fac,
		       const char *buf)
{
	(void)rk;
	(void)level;
	(void)fac;
	if (enables(buf, "BrokerBalancedConsumer"))
		atomic_store(&balanced_consumer, 1);
	if (enables(buf, "Sasl"))
		atomic_store(&sasl, 1);
}

/* librdkafka before 2.11 detects two features by JoinGroup v0 in the
 * broker's ApiVersions: BrokerBalancedConsumer and Sasl (which SASL/GSSAPI,
 * Kerberos, needs).  Kafka 4.0.0 lacks JoinGroup v0 and gets neither;
 * the pin restores both. */
Test(kafka_broker, librdkafka_finds_the_features_it_detects_by_joingroup_v0,
     .timeout = 120)
{
	const char *boot = bootstrap();
	char err[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	const struct rd_kafka_metadata *md;
	rd_kafka_t *rk;

	rd_kafka_conf_set_log_cb(conf, on_feature);
	cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", boot, err,
				       sizeof(err)),
		     RD_KAFKA_CONF_OK);
	cr_assert_eq(
	    rd_kafka_conf_set(conf, "debug", "feature", err, sizeof(err)),
	    RD_KAFKA_CONF_OK, "%s", err);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	cr_assert(rk, "%s", err);
	/* A metadata answer comes after the ApiVersions exchange. */
	cr_assert_eq(rd_kafka_metadata(rk, 0, NULL, &md, 30000),
		     RD_KAFKA_RESP_ERR_NO_ERROR);
	rd_kafka_metadata_destroy(md);
	rd_kafka_destroy(rk);
	cr_assert(atomic_load(&balanced_consumer),
		  "librdkafka %s does not see BrokerBalancedConsumer on %s: "
		  "no JoinGroup v0 (Kafka 4.0.0?)",
		  rd_kafka_version_str(), boot);
	cr_assert(atomic_load(&sasl),
		  "librdkafka %s does not see the Sasl feature on %s: no "
		  "JoinGroup v0 (Kafka 4.0.0?)",
		  rd_kafka_version_str(), boot);
}

Test(kafka_broker, librdkafka_joins_a_group_with_the_eager_protocol,
     .timeout = 300)
{
	join_and_read(bootstrap(), "range,roundrobin");
}

Test(kafka_broker, librdkafka_joins_a_group_with_cooperative_sticky,
     .timeout = 300)
{
	join_and_read(bootstrap(), "cooperative-sticky");
}

Test(kafka_broker, the_demo_takes_every_order_once_on_the_broker,
     .timeout = 600)
{
	const char *boot = bootstrap();
	const char *args[] = {
	    "demo", "--messages",	   "2000", "--json", "--seed",
	    "11",   "--bootstrap-servers", boot,   NULL};
	cc_result_t res;
	cJSON *o;

	tt_cluster_destroy(tt_cluster_new(1));
	res = cc_run_with(args, NULL, 0, 300000);
	cr_assert(res.status != -1, "the demo did not finish");
	o = cJSON_Parse(res.out);
	cr_assert(o, "stdout is not JSON: %s (stderr %s)", res.out, res.err);
	cr_assert(
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "exactly_once")),
	    "not exactly once: %s", res.out);
	cr_assert_str_eq(cJSON_GetStringValue(
			     cJSON_GetObjectItemCaseSensitive(o, "cluster")),
			 boot);
	cr_assert_gt(cJSON_GetObjectItemCaseSensitive(o, "duplicates_dropped")
			 ->valuedouble,
		     0);
	cr_assert(cc_exited(res.status, 0), "status %d", res.status);
	cJSON_Delete(o);
	cc_result_free(&res);
}
