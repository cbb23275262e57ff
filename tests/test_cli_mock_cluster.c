/*
 * `tokenbox mock-cluster` run as a child process, used by real librdkafka
 * clients in this process: the bootstrap line, the bootstrap file, topics,
 * stopping by signal, the refusal of bad arguments, and the faults that
 * --control injects.
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
	int in_fd;  /* its standard input with --control, else -1 */
	int err_fd; /* its standard error with --control, else -1 */
	char *bootstraps;
} mc_t;

/* The running cluster, killed by kill_cluster() when an assertion fails,
 * so that no process is left behind; 0 once it exited. */
static pid_t cluster_pid;

static void kill_cluster(void)
{
	if (cluster_pid > 0)
		kill(cluster_pid, SIGKILL);
}

static mc_t mc_start(const char *const args[])
{
	mc_t mc = {.in_fd = -1, .err_fd = -1};

	mc.pid = cluster_pid = cc_spawn(args, &mc.out_fd, NULL);
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
	cluster_pid = 0;
	cr_assert(cc_exited(status, 0),
		  "mock-cluster did not exit 0 on signal %d (status %d)", sig,
		  status);
	close(mc->out_fd);
	if (mc->in_fd >= 0)
		close(mc->in_fd);
	if (mc->err_fd >= 0)
		close(mc->err_fd);
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

/* Delivery reports of the producers of client_with(). */
static int dr_cnt;
static rd_kafka_resp_err_t dr_err;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m,
			void *opaque)
{
	(void)rk;
	(void)opaque;
	dr_cnt++;
	dr_err = m->err;
}

/* A client with extra properties @p kv ("key", "value", ..., NULL; may be
 * NULL); producers report deliveries to dr_cnt and dr_err. */
static rd_kafka_t *client_with(rd_kafka_type_t type, const char *bootstraps,
			       const char *const *kv)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char errstr[256];
	rd_kafka_t *rk;

	cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps,
				       errstr, sizeof(errstr)),
		     RD_KAFKA_CONF_OK, "%s", errstr);
	for (size_t i = 0; kv && kv[i]; i += 2)
		cr_assert_eq(rd_kafka_conf_set(conf, kv[i], kv[i + 1], errstr,
					       sizeof(errstr)),
			     RD_KAFKA_CONF_OK, "%s", errstr);
	if (type == RD_KAFKA_PRODUCER)
		rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
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

static rd_kafka_t *client(rd_kafka_type_t type, const char *bootstraps)
{
	return client_with(type, bootstraps, NULL);
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
     .timeout = 120, .fini = kill_cluster)
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

Test(mock_cluster, lists_every_broker_and_exits_0_on_sigint, .timeout = 60,
     .fini = kill_cluster)
{
	const char *args[] = {"mock-cluster", "--brokers", "3", NULL};
	mc_t mc = mc_start(args);

	cr_assert(is_bootstrap_line(mc.bootstraps, 3), "bootstrap line '%s'",
		  mc.bootstraps);
	mc_stop(&mc, SIGINT);
}

/* The behaviour `tokenbox help mock-cluster` describes. */
Test(mock_cluster, creates_unknown_topics_with_4_partitions_on_lookup,
     .timeout = 60, .fini = kill_cluster)
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
	    {{"--control", "foo"}, "--control: 'foo' is not supported"},
	    {{"--control", ""}, "--control"},
	    {{"-c", "/dev/stdin"}, "--control"},
	    {{"--control"}, "--control"},
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

/*
 * --control: commands on the child's standard input, answers on its
 * standard output, its log on a pipe read at the end.
 */

static mc_t mc_start_ctl(const char *const args[])
{
	mc_t mc = {.in_fd = -1, .err_fd = -1};
	int in_p[2], out_p[2], err_p[2];

	/* A child that died must fail the test, not kill it. */
	signal(SIGPIPE, SIG_IGN);
	cr_assert(pipe(in_p) == 0 && pipe(out_p) == 0 && pipe(err_p) == 0,
		  "pipe: %s", strerror(errno));
	int fds[] = {in_p[0], in_p[1], out_p[0], out_p[1], err_p[0], err_p[1]};
	mc.pid = cluster_pid =
	    cc_fork(args, in_p[0], out_p[1], err_p[1], fds, 6);
	close(in_p[0]);
	close(out_p[1]);
	close(err_p[1]);
	mc.in_fd = in_p[1];
	mc.out_fd = out_p[0];
	mc.err_fd = err_p[0];
	mc.bootstraps = cc_read_line(mc.out_fd, WAIT_MS);
	cr_assert(mc.bootstraps, "no bootstrap line on stdout");
	return mc;
}

static void ctl_write(mc_t *mc, const void *data, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t w =
		    write(mc->in_fd, (const char *)data + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		cr_assert(w > 0, "write to mock-cluster: %s", strerror(errno));
		off += (size_t)w;
	}
}

static void ctl_puts(mc_t *mc, const char *text)
{
	ctl_write(mc, text, strlen(text));
}

/* Occurrences of @p needle in @p s. */
static int count(const char *s, const char *needle)
{
	int n = 0;

	for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Sends "@p line\n" and returns the answer line (malloc'ed). */
static char *ctl(mc_t *mc, const char *line)
{
	char *answer;

	ctl_write(mc, line, strlen(line));
	ctl_write(mc, "\n", 1);
	answer = cc_read_line(mc->out_fd, WAIT_MS);
	cr_assert(answer, "no answer to '%s'", line);
	return answer;
}

static void ctl_ok(mc_t *mc, const char *line)
{
	char *answer = ctl(mc, line);

	cr_assert_str_eq(answer, "ok", "'%s' answered '%s'", line, answer);
	free(answer);
}

/* @p line is answered "error: ..." containing @p key. */
static void ctl_refused(mc_t *mc, const char *line, const char *key)
{
	char *answer = ctl(mc, line);

	cr_assert(strncmp(answer, "error: ", 7) == 0 && strstr(answer, key),
		  "'%s' answered '%s', not an error naming '%s'", line, answer,
		  key);
	free(answer);
}

#define HELP_ANSWER                                                            \
	"ok commands: broker, rtt, error, clear, leader, coordinator, help"

/* Reads the child's standard error until a line containing @p text. */
static int err_has_line(mc_t *mc, const char *text)
{
	char *line;

	while ((line = cc_read_line(mc->err_fd, WAIT_MS))) {
		int found = strstr(line, text) != NULL;
		free(line);
		if (found)
			return 1;
	}
	return 0;
}

/* Leader of @p topic [@p partition] in fresh metadata. */
static int32_t leader_of(rd_kafka_t *rk, const char *topic, int32_t partition)
{
	const struct rd_kafka_metadata *md;
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
	int32_t leader = -2;

	cr_assert_eq(rd_kafka_metadata(rk, 0, rkt, &md, WAIT_MS), 0);
	cr_assert_eq(md->topic_cnt, 1);
	for (int i = 0; i < md->topics[0].partition_cnt; i++)
		if (md->topics[0].partitions[i].id == partition)
			leader = md->topics[0].partitions[i].leader;
	rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	cr_assert_neq(leader, -2, "no partition %d in the metadata",
		      (int)partition);
	return leader;
}

static void produce_async(rd_kafka_t *rk, const char *topic, const char *value)
{
	rd_kafka_resp_err_t err = rd_kafka_producev(
	    rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
	    RD_KAFKA_V_VALUE((void *)value, strlen(value)),
	    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);

	cr_assert_eq(err, 0, "producev: %s", rd_kafka_err2str(err));
}

/* Produces one record with a producer of @p kv and @returns the error of
 * its delivery report. */
static rd_kafka_resp_err_t
produce_report(const char *bootstraps, const char *topic, const char *const *kv)
{
	rd_kafka_t *rk = client_with(RD_KAFKA_PRODUCER, bootstraps, kv);

	dr_cnt = 0;
	produce_async(rk, topic, "v");
	cr_assert_eq(rd_kafka_flush(rk, WAIT_MS), 0, "flush timed out");
	cr_assert_eq(dr_cnt, 1);
	rd_kafka_destroy(rk);
	return dr_err;
}

Test(mock_cluster_control, answers_ok_to_every_valid_command, .timeout = 120,
     .fini = kill_cluster)
{
	static const char *const requests[] = {
	    "Produce",	       "Fetch",
	    "ListOffsets",     "Metadata",
	    "OffsetCommit",    "OffsetFetch",
	    "FindCoordinator", "JoinGroup",
	    "Heartbeat",       "LeaveGroup",
	    "SyncGroup",       "ApiVersions",
	    "InitProducerId",  "AddPartitionsToTxn",
	    "AddOffsetsToTxn", "EndTxn",
	    "TxnOffsetCommit"};
	const char *args[] = {"mock-cluster", "--brokers", "3", "--topic",
			      "orders:3",     "--control", "-", NULL};
	mc_t mc = mc_start_ctl(args);
	char line[128], *answer;

	answer = ctl(&mc, "help");
	cr_assert_str_eq(answer, HELP_ANSWER);
	free(answer);
	ctl_ok(&mc, "broker down 2");
	ctl_ok(&mc, "broker up 2");
	ctl_ok(&mc, "broker down 3");
	ctl_ok(&mc, "broker down 3"); /* already down */
	ctl_ok(&mc, "broker up 3");
	ctl_ok(&mc, "rtt 3 250");
	ctl_ok(&mc, "rtt 3 0");
	ctl_ok(&mc, "rtt 1 60000");
	ctl_ok(&mc, "rtt 1 0");
	ctl_ok(&mc, "error Produce NOT_LEADER_FOR_PARTITION");
	ctl_ok(&mc, "error Fetch REQUEST_TIMED_OUT 5");
	ctl_ok(&mc, "error JoinGroup REBALANCE_IN_PROGRESS 1000");
	ctl_ok(&mc, "error produce not_coordinator 2"); /* any case */
	ctl_ok(&mc, "error Heartbeat 27");		/* a number */
	ctl_ok(&mc, "error Metadata -1"); /* UNKNOWN_SERVER_ERROR */
	ctl_ok(&mc, "error SyncGroup UNKNOWN_MEMBER_ID");
	ctl_ok(&mc, "error OffsetCommit COORDINATOR_LOAD_IN_PROGRESS 3");
	for (size_t i = 0; i < sizeof(requests) / sizeof(requests[0]); i++) {
		snprintf(line, sizeof(line), "error %s NOT_COORDINATOR",
			 requests[i]);
		ctl_ok(&mc, line);
		snprintf(line, sizeof(line), "clear %s", requests[i]);
		ctl_ok(&mc, line);
	}
	ctl_ok(&mc, "leader orders 1 3");
	ctl_ok(&mc, "leader orders 1 -1");
	ctl_ok(&mc, "leader orders 1 2");
	ctl_ok(&mc, "coordinator group billing 2");
	ctl_ok(&mc, "coordinator transaction tx-1 3");
	ctl_ok(&mc, " \t broker\t down   1 \t"); /* any spaces and tabs */
	ctl_ok(&mc, "broker up 1");

	/* No answer for blank and comment lines: the next answer is the
	 * one to help. */
	ctl_puts(&mc, "\n \t \n# broker down 3\n  # rtt 1 10\n");
	answer = ctl(&mc, "help");
	cr_assert_str_eq(answer, HELP_ANSWER);
	free(answer);

	/* A command in pieces, and two in one write. */
	ctl_puts(&mc, "bro");
	ctl_puts(&mc, "ker down 2");
	answer = ctl(&mc, "");
	cr_assert_str_eq(answer, "ok");
	free(answer);
	ctl_puts(&mc, "broker up 2\nhelp\n");
	answer = cc_read_line(mc.out_fd, WAIT_MS);
	cr_assert_str_eq(answer, "ok");
	free(answer);
	answer = cc_read_line(mc.out_fd, WAIT_MS);
	cr_assert_str_eq(answer, HELP_ANSWER);
	free(answer);

	/* Stopped while it waits for the next command. */
	cr_assert_eq(kill(mc.pid, SIGTERM), 0);
	cr_assert(cc_exited(cc_wait(mc.pid, WAIT_MS), 0));
	cluster_pid = 0;
	/* Each applied command is logged; the commented ones were not. */
	{
		char log[65536];
		size_t len = 0;
		ssize_t r;

		while (len < sizeof(log) - 1 &&
		       (r = read(mc.err_fd, log + len, sizeof(log) - 1 - len)) >
			   0)
			len += (size_t)r;
		log[len] = '\0';
		cr_assert(strstr(log, "tokenbox mock-cluster: control: broker "
				      "2 down\n"),
			  "log: %s", log);
		cr_assert(strstr(log, "control: the next 5 Fetch requests "
				      "fail with REQUEST_TIMED_OUT (7)\n"),
			  "log: %s", log);
		cr_assert(strstr(log, "control: orders [1] leader is broker "
				      "2\n"),
			  "log: %s", log);
		cr_assert_null(strstr(log, "rtt 10"), "log: %s", log);
		cr_assert_eq(count(log, "control: broker 3 down\n"), 2,
			     "log: %s", log);
	}
	mc.pid = 0;
	close(mc.in_fd);
	close(mc.out_fd);
	close(mc.err_fd);
	free(mc.bootstraps);
}

Test(mock_cluster_control, refuses_bad_commands_and_goes_on_serving,
     .timeout = 120, .fini = kill_cluster)
{
	static char long_topic[300];
	static const struct {
		const char *line;
		const char *key;
	} cases[] = {
	    {"frobnicate", "unknown command 'frobnicate'"},
	    {"Broker down 1", "unknown command 'Broker'"},
	    {"HELP", "unknown command 'HELP'"},
	    {"broker", "usage: broker down ID"},
	    {"broker sideways 1", "usage: broker down ID"},
	    {"broker Down 1", "usage: broker down ID"},
	    {"broker down", "usage: broker down ID"},
	    {"broker up 1 2", "usage: broker down ID"},
	    {"broker down 0", "broker ID '0' is out of range (1..2)"},
	    {"broker down 3", "broker ID '3' is out of range (1..2)"},
	    {"broker down -1", "out of range (1..2)"},
	    {"broker up x", "broker ID 'x' is not an integer"},
	    {"broker up 1x", "not an integer"},
	    {"broker up +1", "not an integer"},
	    {"rtt 1", "usage: rtt ID MS"},
	    {"rtt 1 10 10", "usage: rtt ID MS"},
	    {"rtt 3 10", "broker ID '3' is out of range"},
	    {"rtt 1 -5", "MS '-5' is out of range (0..60000)"},
	    {"rtt 1 60001", "MS '60001' is out of range (0..60000)"},
	    {"rtt 1 fast", "MS 'fast' is not an integer"},
	    {"error Produce", "usage: error REQUEST ERR [COUNT]"},
	    {"error Produce 6 1 1", "usage: error REQUEST ERR [COUNT]"},
	    {"error Frob NOT_COORDINATOR", "unknown request 'Frob'"},
	    {"error Produce NOT_AN_ERROR", "unknown error name 'NOT_AN_ERROR'"},
	    {"error Produce RD_KAFKA_RESP_ERR_NOT_COORDINATOR",
	     "unknown error name"},
	    {"error Produce _TRANSPORT", "librdkafka's internal error"},
	    {"error Produce _timed_out", "librdkafka's internal error"},
	    {"error Produce -195", "librdkafka's internal error _TRANSPORT"},
	    {"error Produce -2", "out of range (-1 or 1..32767)"},
	    {"error Produce NO_ERROR", "NO_ERROR, not an error"},
	    {"error Produce 0", "NO_ERROR, not an error"},
	    {"error Produce 40000", "out of range (-1 or 1..32767)"},
	    {"error Produce 6x", "not an error name or an integer"},
	    {"error Produce 6 0", "COUNT '0' is out of range (1..1000)"},
	    {"error Produce 6 1001", "COUNT '1001' is out of range (1..1000)"},
	    {"error Produce 6 many", "COUNT 'many' is not an integer"},
	    {"clear", "usage: clear REQUEST"},
	    {"clear Produce Fetch", "usage: clear REQUEST"},
	    {"clear Frob", "unknown request 'Frob'"},
	    {"leader orders 0", "usage: leader TOPIC PARTITION ID"},
	    {"leader orders 0 1 1", "usage: leader TOPIC PARTITION ID"},
	    {"leader bad/name 0 1", "'bad/name' is not a valid topic name"},
	    {"leader .. 0 1", "'..' is not a valid topic name"},
	    {long_topic, "the topic name is 250 characters long"},
	    {"leader orders -1 1", "PARTITION '-1' is out of range (0..999)"},
	    {"leader orders 1000 1", "PARTITION '1000' is out of range"},
	    {"leader orders 2 1", "topic 'orders' has no partition 2"},
	    {"leader orders 0 0", "broker ID (or -1) '0' is out of range"},
	    {"leader orders 0 3", "out of range (1..2)"},
	    {"leader orders 0 -2", "out of range (1..2)"},
	    {"coordinator group billing", "usage: coordinator group NAME ID"},
	    {"coordinator consumer billing 1", "usage: coordinator group"},
	    {"coordinator group billing 9", "broker ID '9' is out of range"},
	    {"coordinator transaction tx -1", "out of range (1..2)"},
	    {"help me", "usage: help"},
	    {"broker down 1\r", "control character 0x0d"},
	    {"broker up 1 2 3 4 5 6", "too many words for 'broker'"},
	};
	const char *args[] = {"mock-cluster", "--brokers", "2", "--topic",
			      "orders:2",     "--control", "-", NULL};
	mc_t mc = mc_start_ctl(args);
	char line[1200], *answer;
	rd_kafka_t *rk;

	snprintf(long_topic, sizeof(long_topic), "leader %0250d 0 1", 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ctl_refused(&mc, cases[i].line, cases[i].key);

	/* A NUL byte is a control character too. */
	ctl_write(&mc, "help\0x\n", 7);
	answer = cc_read_line(mc.out_fd, WAIT_MS);
	cr_assert_str_eq(answer, "error: control character 0x00 in the line");
	free(answer);

	/* 1024 bytes are a line; 1025 are one answer, the rest of the line
	 * being dropped. */
	memset(line, ' ', sizeof(line));
	memcpy(line, "help", 4);
	line[1024] = '\0';
	answer = ctl(&mc, line);
	cr_assert_str_eq(answer, HELP_ANSWER);
	free(answer);
	line[1024] = ' ';
	line[1025] = '\0';
	ctl_refused(&mc, line, "line too long");
	memset(line, 'x', sizeof(line) - 1);
	line[sizeof(line) - 1] = '\0';
	ctl_refused(&mc, line, "line too long");
	answer = ctl(&mc, "help");
	cr_assert_str_eq(answer, HELP_ANSWER);
	free(answer);

	/* Nothing changed the cluster, which still serves. */
	ctl_ok(&mc, "broker down 1");
	ctl_ok(&mc, "broker up 1");
	rk = client(RD_KAFKA_PRODUCER, mc.bootstraps);
	cr_assert_eq(partition_count(rk, "orders"), 2);
	rd_kafka_destroy(rk);
	mc_stop(&mc, SIGINT);
}

/* The pushed errors go to the next COUNT Produce requests: a producer
 * allowed 2 retries fails on the third error, one allowed 3 succeeds.
 * NOT_ENOUGH_REPLICAS, because librdkafka 2.0.2 does not count the
 * resends after NOT_LEADER_FOR_PARTITION (a metadata refresh, then the
 * same batch again) against message.send.max.retries: 5 of those still
 * end in a delivery with 2 retries allowed. */
Test(mock_cluster_control, error_fails_the_next_count_requests, .timeout = 120,
     .fini = kill_cluster)
{
	const char *args[] = {"mock-cluster", "--topic", "events:1",
			      "--control",    "-",	 NULL};
	const char *two_retries[] = {"message.send.max.retries", "2",
				     "retry.backoff.ms", "10", NULL};
	const char *three_retries[] = {"message.send.max.retries", "3",
				       "retry.backoff.ms", "10", NULL};
	mc_t mc = mc_start_ctl(args);

	ctl_ok(&mc, "error Produce NOT_ENOUGH_REPLICAS 3");
	cr_assert_eq(produce_report(mc.bootstraps, "events", two_retries),
		     RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);

	ctl_ok(&mc, "error Produce NOT_ENOUGH_REPLICAS 3");
	cr_assert_eq(produce_report(mc.bootstraps, "events", three_retries), 0);

	ctl_ok(&mc, "error Produce NOT_LEADER_FOR_PARTITION 5");
	cr_assert_eq(produce_report(mc.bootstraps, "events", two_retries), 0);

	/* Not retriable: the first attempt's error is the report's. */
	ctl_ok(&mc, "error Produce TOPIC_AUTHORIZATION_FAILED");
	cr_assert_eq(produce_report(mc.bootstraps, "events", NULL),
		     RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);

	/* clear drops what is left. */
	ctl_ok(&mc, "error Produce TOPIC_AUTHORIZATION_FAILED 5");
	ctl_ok(&mc, "clear Produce");
	cr_assert_eq(produce_report(mc.bootstraps, "events", NULL), 0);
	mc_stop(&mc, SIGTERM);
}

Test(mock_cluster_control, broker_down_stalls_clients_until_up, .timeout = 120,
     .fini = kill_cluster)
{
	const char *args[] = {"mock-cluster", "--topic", "events:1",
			      "--control",    "-",	 NULL};
	const char *kv[] = {"reconnect.backoff.ms", "50",
			    "reconnect.backoff.max.ms", "500", NULL};
	const struct rd_kafka_metadata *md;
	mc_t mc = mc_start_ctl(args);
	rd_kafka_t *rk = client_with(RD_KAFKA_PRODUCER, mc.bootstraps, kv);

	cr_assert_eq(partition_count(rk, "events"), 1);
	ctl_ok(&mc, "broker down 1");

	/* Neither metadata nor a record gets through while it is down. */
	cr_assert_neq(rd_kafka_metadata(rk, 1, NULL, &md, 2000), 0,
		      "metadata from a broker that is down");
	dr_cnt = 0;
	produce_async(rk, "events", "during");
	cr_assert_neq(rd_kafka_flush(rk, 2000), 0,
		      "a record delivered by a broker that is down");
	cr_assert_eq(dr_cnt, 0);

	ctl_ok(&mc, "broker up 1");
	cr_assert_eq(rd_kafka_flush(rk, WAIT_MS), 0, "not delivered once up");
	cr_assert_eq(dr_cnt, 1);
	cr_assert_eq(dr_err, 0, "%s", rd_kafka_err2str(dr_err));
	cr_assert_eq(rd_kafka_metadata(rk, 1, NULL, &md, WAIT_MS), 0);
	rd_kafka_metadata_destroy(md);
	rd_kafka_destroy(rk);
	mc_stop(&mc, SIGTERM);
}

Test(mock_cluster_control, leader_moves_a_partition, .timeout = 120,
     .fini = kill_cluster)
{
	const char *args[] = {"mock-cluster", "--brokers", "3", "--topic",
			      "orders:2",     "--control", "-", NULL};
	mc_t mc = mc_start_ctl(args);
	rd_kafka_t *rk = client(RD_KAFKA_PRODUCER, mc.bootstraps);

	ctl_ok(&mc, "leader orders 1 2");
	cr_assert_eq(leader_of(rk, "orders", 1), 2);
	ctl_ok(&mc, "leader orders 1 3");
	cr_assert_eq(leader_of(rk, "orders", 1), 3);
	ctl_ok(&mc, "leader orders 1 -1");
	cr_assert_eq(leader_of(rk, "orders", 1), -1);
	ctl_ok(&mc, "leader orders 1 1");
	cr_assert_eq(leader_of(rk, "orders", 1), 1);

	/* An unknown topic is created with PARTITION+1 partitions. */
	ctl_ok(&mc, "leader fresh 5 2");
	cr_assert_eq(partition_count(rk, "fresh"), 6);
	cr_assert_eq(leader_of(rk, "fresh", 5), 2);
	rd_kafka_destroy(rk);
	mc_stop(&mc, SIGTERM);
}

Test(mock_cluster_control, end_of_input_leaves_the_cluster_running,
     .timeout = 120, .fini = kill_cluster)
{
	const char *args[] = {"mock-cluster", "--control", "-", NULL};
	mc_t mc = mc_start_ctl(args);
	rd_kafka_t *rk;
	int status;

	/* A last line without a newline is still a command. */
	ctl_puts(&mc, "help");
	close(mc.in_fd);
	mc.in_fd = -1;
	{
		char *answer = cc_read_line(mc.out_fd, WAIT_MS);
		cr_assert_str_eq(answer, HELP_ANSWER);
		free(answer);
	}
	cr_assert(err_has_line(&mc, "control: end of standard input"));

	rk = client(RD_KAFKA_PRODUCER, mc.bootstraps);
	cr_assert_eq(partition_count(rk, "after-eof"), 4);
	rd_kafka_destroy(rk);
	cr_assert_eq(waitpid(mc.pid, &status, WNOHANG), 0,
		     "mock-cluster exited at the end of its input");
	mc_stop(&mc, SIGTERM);
}

/* Without --control, standard input is left alone: what was written to
 * it is still there after the command stopped. */
Test(mock_cluster_control, without_control_standard_input_is_not_read,
     .timeout = 60, .fini = kill_cluster)
{
	const char *args[] = {"mock-cluster", NULL};
	int in_p[2], out_p[2], status;
	char *bootstraps, buf[64];
	ssize_t n;
	pid_t pid;

	cr_assert(pipe(in_p) == 0 && pipe(out_p) == 0);
	int fds[] = {in_p[1], out_p[0], out_p[1]};
	pid = cluster_pid = cc_fork(args, in_p[0], out_p[1], -1, fds, 3);
	close(out_p[1]);
	cr_assert_eq(write(in_p[1], "broker down 1\n", 14), 14);
	bootstraps = cc_read_line(out_p[0], WAIT_MS);
	cr_assert(bootstraps, "no bootstrap line");
	cr_assert_eq(kill(pid, SIGTERM), 0);
	status = cc_wait(pid, WAIT_MS);
	cluster_pid = 0;
	cr_assert(cc_exited(status, 0), "status %d", status);
	cr_assert(cc_read_line(out_p[0], 1000) == NULL, "an answer came");
	n = read(in_p[0], buf, sizeof(buf));
	cr_assert_eq(n, 14, "standard input was read");
	free(bootstraps);
	close(in_p[0]);
	close(in_p[1]);
	close(out_p[0]);
}
