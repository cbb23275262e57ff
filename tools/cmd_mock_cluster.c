/*
 * `tokenbox mock-cluster`: hosts librdkafka's mock Kafka cluster
 * (rdkafka_mock.h) as a process of its own, so that workers, `tokenbox
 * send`, kcat and tests in other processes can share one broker set
 * without a Kafka installation.
 *
 * The cluster lives in a dedicated rd_kafka_t that is never used as a
 * client: its brokers run on librdkafka's threads, and the main thread
 * sleeps until SIGINT or SIGTERM or, with --control, answers the commands
 * of mock_control.c meanwhile.
 */
#include <errno.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/ids.h"
#include "tools/cli.h"
#include "tools/mock_control.h"

#define CMD	    "mock-cluster"
#define BROKERS_MAX 16
#define PARTS_MAX   MCTL_PARTS_MAX

static const char usage_text[] =
    "Usage: tokenbox mock-cluster [--brokers N] [--topic NAME:PARTITIONS]...\n"
    "                             [--bootstrap-file PATH] [--control -]\n"
    "\n"
    "Hosts librdkafka's mock Kafka cluster (rdkafka_mock.h) in this process,\n"
    "for tests and demos without a Kafka installation.  Its brokers listen on\n"
    "random ports of 127.0.0.1.  Once they are up, the bootstrap servers are\n"
    "printed on standard output as one line (host:port pairs separated by\n"
    "commas, e.g. 127.0.0.1:40121), and the command runs until SIGINT or\n"
    "SIGTERM.  Everything is kept in memory and lost when it stops.\n"
    "\n"
    "Options:\n"
    "  -b, --brokers N              number of brokers, 1..16 (default 1)\n"
    "  -t, --topic NAME:PARTITIONS  create topic NAME with PARTITIONS\n"
    "                               partitions (1..1000); repeat for more\n"
    "                               topics.  NAME: 1..249 characters of\n"
    "                               a-z A-Z 0-9 . _ -, not \".\" or \"..\"\n"
    "  -f, --bootstrap-file PATH    also write the bootstrap line to PATH,\n"
    "                               atomically (a temporary file renamed),\n"
    "                               before printing it; PATH is removed at\n"
    "                               exit if it still holds that line\n"
    "  -c, --control -              once the bootstrap line is out, read\n"
    "                               commands that inject broker faults from\n"
    "                               standard input (\"-\", the only value);\n"
    "                               see below\n"
    "  -h, --help                   show this help\n"
    "\n"
    "Topics that --topic did not create are created on first use: with\n"
    "librdkafka 2.0.2 the mock cluster answers a metadata request for an\n"
    "unknown topic by creating it with 4 partitions, and librdkafka producers\n"
    "and consumers send one as soon as they produce to, subscribe to or look\n"
    "up a topic, whatever their allow.auto.create.topics says.  The mock has\n"
    "no admin API (CreateTopics): use --topic when the partition count\n"
    "matters.  Replication is not simulated: each partition's leader is a\n"
    "broker picked at random, and metadata lists up to 3 brokers as the\n"
    "replicas of every partition.\n"
    "\n"
    "Control channel (--control -): standard input is read one command per\n"
    "line, words separated by spaces or tabs.  Each command gets one line\n"
    "on standard output, written once the change is made: \"ok\", \"ok INFO\"\n"
    "or \"error: REASON\"; a refused command changes nothing.  Blank lines\n"
    "and lines whose first non-blank character is # get no answer; a line\n"
    "longer than 1024 bytes gets \"error: line too long\".  Applied and\n"
    "refused commands are also logged on standard error.  At the end of\n"
    "standard input the cluster runs on until SIGINT or SIGTERM.  ID is a\n"
    "broker id, 1..N for --brokers N.\n"
    "  broker down ID, broker up ID\n"
    "      close broker ID's connections and refuse new ones, or accept them\n"
    "      again; partition leaders do not move\n"
    "  rtt ID MS\n"
    "      delay broker ID's responses by MS ms, 0..60000 (0: no delay)\n"
    "  error REQUEST ERR [COUNT]\n"
    "      fail the next COUNT (1..1000, default 1) REQUEST requests, to any\n"
    "      broker, with ERR.  REQUEST: Produce Fetch ListOffsets Metadata\n"
    "      OffsetCommit OffsetFetch FindCoordinator JoinGroup Heartbeat\n"
    "      LeaveGroup SyncGroup ApiVersions InitProducerId AddPartitionsToTxn\n"
    "      AddOffsetsToTxn EndTxn TxnOffsetCommit.  ERR: a librdkafka error\n"
    "      name without RD_KAFKA_RESP_ERR_ (NOT_LEADER_FOR_PARTITION,\n"
    "      REQUEST_TIMED_OUT, NOT_COORDINATOR...) or a Kafka error code (-1,\n"
    "      1..32767); librdkafka's own negative codes are refused\n"
    "  clear REQUEST\n"
    "      drop the errors still pending for REQUEST\n"
    "  leader TOPIC PARTITION ID\n"
    "      make broker ID (-1: none) the leader of PARTITION (0..999) of\n"
    "      TOPIC; a TOPIC that does not exist yet is created with\n"
    "      PARTITION+1 partitions\n"
    "  coordinator group NAME ID, coordinator transaction NAME ID\n"
    "      make broker ID the coordinator of group NAME, or of\n"
    "      transactional.id NAME\n"
    "  help\n"
    "      answer \"ok commands: \" and the command names\n"
    "Command words are lower case; REQUEST and ERR names are matched\n"
    "without regard to case.\n"
    "\n"
    "Exit status: 0 once stopped by SIGINT or SIGTERM; 1 if the cluster, a\n"
    "topic or the bootstrap file could not be set up, or standard input is\n"
    "closed with --control; 2 for a bad command line.\n";

struct topic {
	char name[TBX_TOPIC_MAX + 1];
	int partitions;
};

static int check_topic_name(const char *arg, const char *name, size_t len)
{
	char why[512];

	if (len == 0)
		return tbx_cli_usage(
		    CMD, "--topic: '%s' has an empty topic name", arg);
	if (mctl_topic_check(name, len, why, sizeof(why)))
		return tbx_cli_usage(CMD, "--topic: %s", why);
	return 0;
}

/* Parses NAME:PARTITIONS into @p t, refusing a topic already in
 * @p topics[0..cnt). */
static int parse_topic(const char *arg, const struct topic *topics, size_t cnt,
		       struct topic *t)
{
	const char *colon = strrchr(arg, ':');
	long long parts;
	size_t len;
	int rc;

	if (!colon)
		return tbx_cli_usage(CMD,
				     "--topic: '%s' is not NAME:PARTITIONS "
				     "(e.g. orders:3)",
				     arg);
	len = (size_t)(colon - arg);
	if ((rc = check_topic_name(arg, arg, len)))
		return rc;
	if ((rc = tbx_cli_parse_int(CMD, "--topic partitions", colon + 1, 1,
				    PARTS_MAX, &parts)))
		return rc;
	memcpy(t->name, arg, len);
	t->name[len] = '\0';
	t->partitions = (int)parts;
	for (size_t i = 0; i < cnt; i++)
		if (strcmp(topics[i].name, t->name) == 0)
			return tbx_cli_usage(
			    CMD, "--topic: '%s' is given twice", t->name);
	return 0;
}

/* Writes "@p line\n" to @p path through a temporary file in the same
 * directory and rename(2), so that a reader sees all of it or nothing.
 * @returns 0, or -1 with errno set. */
static int write_atomic(const char *path, const char *line)
{
	size_t size = strlen(path) + 32;
	char *tmp = malloc(size);
	size_t len = strlen(line);
	int fd, saved;

	if (!tmp)
		return -1;
	snprintf(tmp, size, "%s.tmp.%ld", path, (long)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		goto fail;
	for (size_t off = 0; off <= len;) {
		/* The newline goes last, from a separate buffer. */
		const char *p = off < len ? line + off : "\n";
		size_t n = off < len ? len - off : 1;
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			goto fail_fd;
		off += (size_t)w;
	}
	if (close(fd) != 0) {
		fd = -1;
		goto fail_fd;
	}
	if (rename(tmp, path) != 0)
		goto fail;
	free(tmp);
	return 0;

fail_fd:
	saved = errno;
	if (fd >= 0)
		close(fd);
	errno = saved;
fail:
	saved = errno;
	unlink(tmp);
	free(tmp);
	errno = saved;
	return -1;
}

/* Removes @p path if it still holds "@p line\n": another cluster may have
 * taken the path over since. */
static void remove_if_ours(const char *path, const char *line)
{
	size_t len = strlen(line);
	char *buf = malloc(len + 2);
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (buf && f) {
		n = fread(buf, 1, len + 2, f);
		if (n == len + 1 && memcmp(buf, line, len) == 0 &&
		    buf[len] == '\n')
			unlink(path);
		else
			tbx_cli_fail(CMD,
				     "left %s in place: another process has "
				     "replaced it",
				     path);
	}
	if (f)
		fclose(f);
	free(buf);
}

static int run(int brokers, const struct topic *topics, size_t topic_cnt,
	       const char *bootstrap_file, int control)
{
	rd_kafka_mock_cluster_t *mcluster = NULL;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk = NULL;
	const char *bootstraps;
	int file_written = 0;
	char errstr[512];
	int rc = TBX_EXIT_FAIL;

	if (tbx_cli_on_stop(NULL, NULL) != 0) {
		rd_kafka_conf_destroy(conf);
		return tbx_cli_fail(CMD, "cannot install signal handlers: %s",
				    strerror(errno));
	}
	/* The host handle has no bootstrap.servers of its own; warnings and
	 * errors still reach stderr, the notice about that does not. */
	if (rd_kafka_conf_set(conf, "client.id", "tokenbox-mock-cluster",
			      errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK ||
	    rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr)) !=
		RD_KAFKA_CONF_OK) {
		rd_kafka_conf_destroy(conf);
		return tbx_cli_fail(CMD, "%s", errstr);
	}
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (!rk) {
		rd_kafka_conf_destroy(conf);
		return tbx_cli_fail(CMD, "cannot create the host handle: %s",
				    errstr);
	}
	mcluster = rd_kafka_mock_cluster_new(rk, brokers);
	if (!mcluster) {
		tbx_cli_fail(CMD, "cannot start a mock cluster of %d broker%s",
			     brokers, brokers == 1 ? "" : "s");
		goto out;
	}
	/* Replication factor 1: nothing is replicated.  (librdkafka 2.0.2's
	 * mock ignores it and lists min(3, brokers) replicas.) */
	for (size_t i = 0; i < topic_cnt; i++) {
		rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(
		    mcluster, topics[i].name, topics[i].partitions, 1);
		if (err) {
			tbx_cli_fail(CMD, "cannot create topic '%s': %s",
				     topics[i].name, rd_kafka_err2str(err));
			goto out;
		}
	}
	bootstraps = rd_kafka_mock_cluster_bootstraps(mcluster);

	if (bootstrap_file) {
		if (write_atomic(bootstrap_file, bootstraps) != 0) {
			tbx_cli_fail(CMD,
				     "--bootstrap-file: cannot write %s: %s",
				     bootstrap_file, strerror(errno));
			goto out;
		}
		file_written = 1;
	}
	printf("%s\n", bootstraps);
	if (fflush(stdout) != 0) {
		tbx_cli_fail(CMD, "cannot write to standard output: %s",
			     strerror(errno));
		goto out;
	}

	if (control) {
		mctl_t ctl = {.mcluster = mcluster, .brokers = brokers};
		mctl_serve(&ctl, STDIN_FILENO, stdout);
	} else {
		tbx_cli_wait_stop();
	}
	rc = TBX_EXIT_OK;
out:
	if (file_written)
		remove_if_ours(bootstrap_file, bootstraps);
	if (mcluster)
		rd_kafka_mock_cluster_destroy(mcluster);
	rd_kafka_destroy(rk);
	return rc;
}

int tbx_cmd_mock_cluster(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"brokers", required_argument, NULL, 'b'},
	    {"topic", required_argument, NULL, 't'},
	    {"bootstrap-file", required_argument, NULL, 'f'},
	    {"control", required_argument, NULL, 'c'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *bootstrap_file = NULL;
	struct topic *topics;
	size_t topic_cnt = 0;
	long long brokers = 1;
	int c, control = 0, rc = 0;

	/* At most one topic per argument. */
	topics = calloc((size_t)argc + 1, sizeof(*topics));
	if (!topics)
		return tbx_cli_fail(CMD, "out of memory");
	while (!rc && (c = tbx_cli_getopt(CMD, argc, argv, "b:t:f:c:h",
					  longopts)) != -1) {
		switch (c) {
		case 'b':
			rc = tbx_cli_parse_int(CMD, "--brokers", optarg, 1,
					       BROKERS_MAX, &brokers);
			break;
		case 't':
			rc = parse_topic(optarg, topics, topic_cnt,
					 &topics[topic_cnt]);
			if (!rc)
				topic_cnt++;
			break;
		case 'f':
			if (!*optarg)
				rc = tbx_cli_usage(CMD, "--bootstrap-file: "
							"the path is empty");
			bootstrap_file = optarg;
			break;
		case 'c':
			/* Room for a FIFO or socket path later. */
			if (strcmp(optarg, "-") != 0)
				rc = tbx_cli_usage(
				    CMD,
				    "--control: '%s' is not supported; the "
				    "only value is '-' (standard input)",
				    optarg);
			control = 1;
			break;
		case 'h':
			fputs(usage_text, stdout);
			free(topics);
			return TBX_EXIT_OK;
		default:
			rc = TBX_EXIT_USAGE;
			break;
		}
	}
	if (!rc && optind < argc)
		rc = tbx_cli_usage(CMD,
				   "unexpected argument '%s' (see 'tokenbox "
				   "help " CMD "')",
				   argv[optind]);
	/* Before anything opens a file: a closed standard input is the
	 * lowest free descriptor, and the next file opened (the signal
	 * self-pipe) would be read as commands. */
	if (!rc && control && fcntl(STDIN_FILENO, F_GETFL) == -1)
		rc = tbx_cli_fail(CMD, "--control: standard input is not open");
	if (!rc)
		rc = run((int)brokers, topics, topic_cnt, bootstrap_file,
			 control);
	free(topics);
	return rc;
}
