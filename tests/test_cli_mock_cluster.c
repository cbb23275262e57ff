/*
 * `tokenbox mock-cluster` run as a child process, used by real librdkafka
 * clients in this process: the bootstrap line, the bootstrap file, topics,
 * stopping by signal, and the refusal of bad arguments.
 */
#include <dirent.h>
#include <librdkafka/rdkafka.h>
#include <regex.h>
#include <sys/stat.h>

#include "cli_child.h"

#define WAIT_MS (10000 * cc_time_factor())

/* A running mock cluster. */
typedef struct mc {
	pid_t pid;
	int out_fd;
	char *bootstraps;
} mc_t;

static mc_t mc_start(const char *const args[])
{
	mc_t mc;

	mc.pid = cc_spawn(args, &mc.out_fd, NULL);
	mc.bootstraps = cc_read_line(mc.out_fd, WAIT_MS);
	cr_assert(mc.bootstraps, "no bootstrap line on stdout");
	return mc;
}

/* Sends @p sig and checks a clean exit 0. */
static void mc_stop(mc_t *mc, int sig)
{
	int status;

	cr_assert_eq(kill(mc->pid, sig), 0);
	status = cc_wait(mc->pid, WAIT_MS);
	cr_assert(cc_exited(status, 0),
		  "mock-cluster did not exit 0 on signal %d (status %d)", sig,
		  status);
	close(mc->out_fd);
	free(mc->bootstraps);
}

/* "127.0.0.1:PORT" repeated @p brokers times, comma-separated. */
static int is_bootstrap_line(const char *line, int brokers)
{
	regex_t re;
	char pattern[256];
	int ok;

	snprintf(
	    pattern, sizeof(pattern),
	    "^127\\.0\\.0\\.1:[0-9]{1,5}(,127\\.0\\.0\\.1:[0-9]{1,5}){%d}$",
	    brokers - 1);
	cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
	ok = regexec(&re, line, 0, NULL, 0) == 0;
	regfree(&re);
	return ok;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	size_t n;

	if (!f)
		return NULL;
	buf = calloc(1, 4096);
	cr_assert(buf);
	n = fread(buf, 1, 4095, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int dir_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	cr_assert(d);
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static rd_kafka_t *client(rd_kafka_type_t type, const char *bootstraps)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char errstr[256];
	rd_kafka_t *rk;

	cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps,
				       errstr, sizeof(errstr)),
		     RD_KAFKA_CONF_OK, "%s", errstr);
	/* librdkafka 2.0.2 refuses assign() without a group.id; assign()
	 * joins no group, and nothing is committed. */
	if (type == RD_KAFKA_CONSUMER &&
	    (rd_kafka_conf_set(conf, "group.id", "tbx-test-reader", errstr,
			       sizeof(errstr)) != RD_KAFKA_CONF_OK ||
	     rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr,
			       sizeof(errstr)) != RD_KAFKA_CONF_OK))
		cr_assert_fail("%s", errstr);
	rk = rd_kafka_new(type, conf, errstr, sizeof(errstr));
	cr_assert(rk, "rd_kafka_new: %s", errstr);
	return rk;
}

/* Partition count of @p topic as the cluster reports it (looking a topic
 * up creates it if unknown). */
static int partition_count(rd_kafka_t *rk, const char *topic)
{
	const struct rd_kafka_metadata *md;
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
	int n;

	cr_assert_eq(rd_kafka_metadata(rk, 0, rkt, &md, WAIT_MS), 0);
	cr_assert_eq(md->topic_cnt, 1);
	cr_assert_eq(md->topics[0].err, 0, "%s",
		     rd_kafka_err2str(md->topics[0].err));
	n = md->topics[0].partition_cnt;
	rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	return n;
}

static void produce_one(const char *bootstraps, const char *topic,
			int32_t partition, const char *key, const char *value)
{
	rd_kafka_t *rk = client(RD_KAFKA_PRODUCER, bootstraps);
	rd_kafka_resp_err_t err;

	err = rd_kafka_producev(
	    rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
	    RD_KAFKA_V_KEY(key, strlen(key)),
	    RD_KAFKA_V_VALUE((void *)value, strlen(value)),
	    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
	cr_assert_eq(err, 0, "producev: %s", rd_kafka_err2str(err));
	cr_assert_eq(rd_kafka_flush(rk, WAIT_MS), 0, "flush timed out");
	cr_assert_eq(rd_kafka_outq_len(rk), 0);
	rd_kafka_destroy(rk);
}

/* Reads @p partition of @p topic from the beginning until a record with
 * @p value shows up (no consumer group: assign). @returns its offset. */
static int64_t consume_until(const char *bootstraps, const char *topic,
			     int32_t partition, const char *key,
			     const char *value)
{
	rd_kafka_t *rk = client(RD_KAFKA_CONSUMER, bootstraps);
	rd_kafka_topic_partition_list_t *parts =
	    rd_kafka_topic_partition_list_new(1);
	long long deadline = cc_now_ms() + WAIT_MS;
	int64_t offset = -1;

	rd_kafka_topic_partition_list_add(parts, topic, partition)->offset =
	    RD_KAFKA_OFFSET_BEGINNING;
	cr_assert_eq(rd_kafka_assign(rk, parts), 0);
	while (offset < 0 && cc_now_ms() < deadline) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
		if (!m)
			continue;
		if (!m->err && m->len == strlen(value) &&
		    memcmp(m->payload, value, m->len) == 0) {
			cr_assert_eq(m->key_len, strlen(key));
			cr_assert_eq(memcmp(m->key, key, m->key_len), 0);
			cr_assert_eq(m->partition, partition);
			offset = m->offset;
		}
		rd_kafka_message_destroy(m);
	}
	rd_kafka_topic_partition_list_destroy(parts);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	cr_assert(offset >= 0, "the record never came back");
	return offset;
}

Test(mock_cluster, serves_producers_and_consumers_through_its_bootstrap_line,
     .timeout = 120)
{
	char dir[] = "/tmp/tbx-mock-cluster-XXXXXX";
	char path[sizeof(dir) + 16];
	char value[64];
	char *content;
	mc_t mc;
	rd_kafka_t *rk;

	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/bootstrap", dir);
	{
		const char *args[] = {
		    "mock-cluster",   "--topic",	  "orders:3", "--topic",
		    "audit.log-v1:1", "--bootstrap-file", path,	      NULL};
		mc = mc_start(args);
	}
	cr_assert(is_bootstrap_line(mc.bootstraps, 1), "bootstrap line '%s'",
		  mc.bootstraps);

	/* The file is in place, whole, before the line is printed. */
	content = read_file(path);
	cr_assert(content, "no bootstrap file");
	cr_assert_eq(strlen(content), strlen(mc.bootstraps) + 1);
	cr_assert_eq(strncmp(content, mc.bootstraps, strlen(mc.bootstraps)), 0);
	cr_assert_eq(content[strlen(mc.bootstraps)], '\n');
	free(content);
	cr_assert_eq(dir_entries(dir), 1, "a temporary file was left behind");

	rk = client(RD_KAFKA_PRODUCER, mc.bootstraps);
	cr_assert_eq(partition_count(rk, "orders"), 3);
	cr_assert_eq(partition_count(rk, "audit.log-v1"), 1);
	rd_kafka_destroy(rk);

	snprintf(value, sizeof(value), "hello-%ld", (long)getpid());
	produce_one(mc.bootstraps, "orders", 2, "order-7", value);
	cr_assert_eq(
	    consume_until(mc.bootstraps, "orders", 2, "order-7", value), 0);

	mc_stop(&mc, SIGTERM);
	cr_assert_eq(access(path, F_OK), -1, "bootstrap file not removed");
	cr_assert_eq(dir_entries(dir), 0);
	rmdir(dir);
}

Test(mock_cluster, lists_every_broker_and_exits_0_on_sigint, .timeout = 60)
{
	const char *args[] = {"mock-cluster", "--brokers", "3", NULL};
	mc_t mc = mc_start(args);

	cr_assert(is_bootstrap_line(mc.bootstraps, 3), "bootstrap line '%s'",
		  mc.bootstraps);
	mc_stop(&mc, SIGINT);
}

/* The behaviour `tokenbox help mock-cluster` describes. */
Test(mock_cluster, creates_unknown_topics_with_4_partitions_on_lookup,
     .timeout = 60)
{
	const char *args[] = {"mock-cluster", NULL};
	mc_t mc = mc_start(args);
	rd_kafka_t *rk = client(RD_KAFKA_CONSUMER, mc.bootstraps);

	cr_assert_eq(partition_count(rk, "never-created"), 4);
	rd_kafka_destroy(rk);
	mc_stop(&mc, SIGTERM);
}

Test(mock_cluster, unwritable_bootstrap_file_exits_1, .timeout = 60)
{
	const char *args[] = {"mock-cluster", "--bootstrap-file",
			      "/nonexistent-dir/bootstrap", NULL};
	cc_result_t res = cc_run(args);

	cr_assert(cc_exited(res.status, 1), "status %d", res.status);
	cr_assert_str_empty(res.out);
	cr_assert(strstr(res.err, "--bootstrap-file"), "stderr: %s", res.err);
	cc_result_free(&res);
}

Test(mock_cluster, bad_arguments_exit_2_naming_the_option, .timeout = 120)
{
	static char long_name[300];
	static const struct {
		const char *args[6];
		const char *key;
	} cases[] = {
	    {{"--brokers", "0"}, "--brokers"},
	    {{"--brokers", "17"}, "--brokers"},
	    {{"--brokers", "three"}, "--brokers"},
	    {{"--brokers", "3x"}, "--brokers"},
	    {{"--brokers", ""}, "--brokers"},
	    {{"--brokers", "99999999999999999999"}, "--brokers"},
	    {{"--brokers"}, "--brokers"},
	    {{"--topic", "orders"}, "--topic"},
	    {{"--topic", "orders:0"}, "--topic"},
	    {{"--topic", "orders:1001"}, "--topic"},
	    {{"--topic", "orders:x"}, "--topic"},
	    {{"--topic", "bad/name:1"}, "--topic"},
	    {{"--topic", "a b:1"}, "--topic"},
	    {{"--topic", ":1"}, "--topic"},
	    {{"--topic", ".:1"}, "--topic"},
	    {{"--topic", "..:1"}, "--topic"},
	    {{"--topic", long_name}, "--topic"},
	    {{"--topic", "a:1", "--topic", "a:2"}, "--topic"},
	    {{"--bootstrap-file", ""}, "--bootstrap-file"},
	    {{"--frobnicate"}, "--frobnicate"},
	    {{"--b", "1"}, "ambiguous option '--b'"},
	    {{"--help=yes"}, "--help"},
	    {{"-x"}, "-x"},
	    {{"surplus"}, "surplus"},
	};

	memset(long_name, 'a', 250);
	memcpy(long_name + 250, ":1", 3);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[8] = {"mock-cluster"};
		cc_result_t res;

		for (size_t j = 0; cases[i].args[j]; j++)
			args[j + 1] = cases[i].args[j];
		res = cc_run(args);
		cr_assert(cc_exited(res.status, 2),
			  "case %zu (%s %s): status %d", i, cases[i].args[0],
			  cases[i].args[1] ? cases[i].args[1] : "", res.status);
		cr_assert_str_empty(res.out, "case %zu: stdout '%s'", i,
				    res.out);
		cr_assert(strstr(res.err, cases[i].key),
			  "case %zu: stderr does not name %s: %s", i,
			  cases[i].key, res.err);
		cr_assert(strncmp(res.err, "tokenbox mock-cluster: ", 23) == 0,
			  "case %zu: %s", i, res.err);
		cr_assert_eq(cc_lines(res.err), 1, "case %zu: %s", i, res.err);
		cc_result_free(&res);
	}
}
