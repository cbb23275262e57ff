/*
 * tbx_bench: the driver of bench/run (see docs/performance.md), and the
 * contender child processes it starts (`tbx_bench contender ...`).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "store/pg.h"
#include "tokenbox/tokenbox.h"
#include "tokens/tokens.h"
#include "tools/cli.h"
#include "tools/kafka_admin.h"

#define NKINDS 5
static const char *const kinds[NKINDS] = {"plain", "inbox", "kafka-txn",
					  "tokenbox", "inbox-batched"};
enum { PLAIN, INBOX, TXN, TOKENBOX, INBOX_BATCHED };
/* The contenders of SQLite: inbox-batched runs on PostgreSQL only. */
#define SQLITE_KINDS ((1u << INBOX_BATCHED) - 1)

static const char usage_text[] =
    "Usage: tbx_bench [--messages N] [--quick] [--json] [--reps N]\n"
    "                 [--latency-messages N] [--latency-rate N]\n"
    "                 [--storage-messages N] [--sweeps 0|1]\n"
    "                 [--contenders LIST] [--downstream 0|1]\n"
    "                 [--token-store single|separate] [--out DIR]\n"
    "                 [--tokenbox PATH] [--keep] [--bootstrap-servers B]\n"
    "                 [--store-url URL] [--layout record|batch]\n"
    "                 [--tokens-format message|set]\n"
    "                 [--pg-workers LIST [--lock-sample-ms N]]\n"
    "\n"
    "Runs one workload (consume a record, write one row to a business table\n"
    "in an SQLite store, produce one record; 200-byte payloads, 8\n"
    "partitions) through four contenders side by side on one `tokenbox\n"
    "mock-cluster`, interleaved (plain inbox kafka-txn tokenbox, repeated),\n"
    "each contender a child process with its own group, topics and store\n"
    "(WAL, synchronous=FULL for all).  Then: end-to-end latency at a fixed\n"
    "rate, tokenbox with 1, 2 and 4 worker processes, tokenbox with batch\n"
    "sizes 1, 10, 100 and 1000, and the deduplication storage of tokenbox\n"
    "and inbox after --storage-messages records.\n"
    "\n"
    "Options:\n"
    "  --messages N          records per throughput run (default 200000;\n"
    "                        --quick: 5000), 1000..5000000\n"
    "  --quick               a short run for checking the harness: 1\n"
    "                        repetition, smaller latency, sweep and storage\n"
    "                        phases (under 2 minutes)\n"
    "  --json                print the results as JSON instead of the table\n"
    "                        (the summary line still comes last)\n"
    "  --reps N              interleaved repetitions, 1..20 (default 3;\n"
    "                        --quick: 1); figures are medians\n"
    "  --latency-messages N  records of the latency phase, 0 skips it\n"
    "                        (default 5000; --quick: 500)\n"
    "  --latency-rate N      records per second of the latency phase,\n"
    "                        1..100000 (default 1000)\n"
    "  --storage-messages N  records of the storage phase, 0 skips it\n"
    "                        (default 1000000; --quick: 10000)\n"
    "  --sweeps N            1: run the worker-count and batch-size sweeps\n"
    "                        (default), 0: skip them\n"
    "  --downstream N        1: a downstream group is subscribed to\n"
    "                        tokenbox's output topic, so that tokenbox mints\n"
    "                        a token per output as in a pipeline (default);\n"
    "                        0: none (outputs get registrations only)\n"
    "  --token-store MODE    tokenbox's token store: single (default, as\n"
    "                        tokenbox's own default: tokens.path empty, the\n"
    "                        service store's file) or separate (a file of\n"
    "                        its own, as a pipeline of services shares one)\n"
    "  --out DIR             where bench.json and the plot data go\n"
    "                        (default: bench/results of the source tree)\n"
    "  --tokenbox PATH       the tokenbox command that hosts the mock cluster\n"
    "                        (default: ../tokenbox next to this program)\n"
    "  --contenders LIST     comma-separated subset of plain, inbox,\n"
    "                        kafka-txn, tokenbox, inbox-batched (default:\n"
    "                        the first four; inbox-batched, PostgreSQL\n"
    "                        only, is the inbox with its business rows\n"
    "                        pipelined and its outbox rows out in one\n"
    "                        statement without BEGIN/COMMIT)\n"
    "  --keep                keep the stores under the work directory\n"
    "  --bootstrap-servers B run on the Apache Kafka cluster at B instead of\n"
    "                        a mock-cluster: the topics (replication factor\n"
    "                        of the broker's default) and groups carry a\n"
    "                        prefix of the run, bench-<pid>-, and stay;\n"
    "                        kafka-txn's transactions are real ones there\n"
    "  --store-url URL       every contender's store on this PostgreSQL\n"
    "                        server (a libpq URL or key=value string, never\n"
    "                        printed with its password) instead of SQLite:\n"
    "                        each run in a schema of its own\n"
    "                        (bench_<pid>_<n>, dropped at the end unless\n"
    "                        --keep), synchronous_commit on for all, and\n"
    "                        round trips and commits per record counted in\n"
    "                        place of SQLite's write transactions and\n"
    "                        fsyncs.  Contenders by default plain, inbox,\n"
    "                        inbox-batched, tokenbox; tokenbox's token\n"
    "                        store is a schema of the same database (the\n"
    "                        joined path); no sweeps and no storage phase\n"
    "  --layout L            tokenbox's outbox.layout: record (default, one\n"
    "                        outbox row per record) or batch (one per\n"
    "                        batch: docs/batched-tokens.md)\n"
    "  --tokens-format F     the token format minted: message (default, a\n"
    "                        token per message) or set (token sets: the\n"
    "                        publisher's records and, with --layout batch,\n"
    "                        tokenbox's outputs)\n"
    "  --pg-workers LIST     with --store-url: the worker phase on\n"
    "                        PostgreSQL, tokenbox with each count of LIST\n"
    "                        (comma-separated worker processes, 1..8, at\n"
    "                        most 4 counts, e.g. 1,3) on one group, one\n"
    "                        service schema and one token schema, in both\n"
    "                        configurations: outbox.layout=record with\n"
    "                        tokens.format=message (tokenbox's default)\n"
    "                        and outbox.layout=batch with tokens.format=set\n"
    "                        (the publisher's too); interleaved, --reps\n"
    "                        times, medians.  While the workers run, this\n"
    "                        process samples pg_stat_activity and pg_locks\n"
    "                        for their backends (application_name\n"
    "                        tbx_bench-<pid>-<n>): the lock waits seen,\n"
    "                        by lock type, mode, relation and statement,\n"
    "                        and whether a worker of the run held the\n"
    "                        lock.  After each run every record must have\n"
    "                        exactly one business row and no outbox row or\n"
    "                        token of the group may be left, or the run\n"
    "                        fails.  --layout and --tokens-format do not\n"
    "                        apply to this phase\n"
    "  --lock-sample-ms N    the sampler's interval, 1..1000 ms (default 5)\n"
    "  -h, --help            show this help\n"
    "\n"
    "The last line of standard output is one summary:\n"
    "  bench: tokenbox/plain=R tokenbox/inbox=R tokenbox/kafka-txn=R "
    "tokens_left=N\n"
    "followed by tokenbox/inbox-batched=R when inbox-batched ran.\n"
    "Exit status: 0 when every run completed, 1 when one failed, 2 for a bad\n"
    "command line.\n"
    "\n"
    "Environment: TBX_BENCH_CONTENDER_WRAP=\"/abs/command args\" runs each\n"
    "contender process under that command (bench/profile: callgrind).\n";

typedef struct cfg {
	long messages, reps, lat_messages, lat_rate, storage_messages, sweeps;
	long downstream;
	int separate_tokens;	   /* tokenbox: token store in its own file */
	const char *layout;	   /* tokenbox's outbox.layout */
	const char *tokens_format; /* the publisher's and tokenbox's */
	int quick, json, keep;
	unsigned mask; /* contenders to run, bit per kind */
	char out[PATH_MAX], tokenbox[PATH_MAX], self[PATH_MAX], work[256];
	const char *bootstrap; /* a real cluster, or NULL: the mock */
	char prefix[32];       /* of topics and groups on a real cluster */
	const char *store_url; /* PostgreSQL, or NULL: SQLite */
	int pg_workers[4];     /* --pg-workers: the counts, in order */
	int pg_worker_cnt;     /* 0: no PostgreSQL worker phase */
	long lock_sample_ms;
	char store_where[256]; /* store_url without its password */
	char pg_server[128];   /* the server's version and durability */
} cfg_t;

static cfg_t cfg;
static pid_t live[64]; /* contenders alive, killed on failure */
#define HAS(k) (cfg.mask & (1u << (k)))
static char bootstraps[512];
static pid_t cluster_pid;
static int topic_seq;

static void fail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
static int64_t t_start;

static void progress(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tbx_bench: [%5.1fs] ",
		(double)(bench_now_ns() - t_start) / 1e9);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

static void pg_drop_schemas(void);

static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tbx_bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
		if (live[i] > 0)
			kill(live[i], SIGKILL);
	if (cluster_pid > 0)
		kill(cluster_pid, SIGTERM);
	if (cfg.store_url && !cfg.keep) {
		static int dropping; /* fail() again from in there */
		if (!dropping++)
			pg_drop_schemas();
	}
	exit(1);
}

/* Interrupted: the contenders and the cluster go too (kill() and _exit()
 * are async-signal-safe). */
static void on_signal(int sig)
{
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
		if (live[i] > 0)
			kill(live[i], SIGKILL);
	if (cluster_pid > 0)
		kill(cluster_pid, SIGTERM);
	_exit(128 + sig);
}

int64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tbx_bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see --help)\n");
	return 2;
}

static int parse_num(const char *name, const char *v, long min, long max,
		     long *out)
{
	long long n;

	if (!v)
		return usage_error("%s needs a value%s", name, "");
	if (tbx_cli_to_int(v, min, max, &n) != 0) {
		fprintf(stderr,
			"tbx_bench: %s: '%s' is not an integer in %ld..%ld "
			"(see --help)\n",
			name, v, min, max);
		return 2;
	}
	*out = (long)n;
	return 0;
}

/* ---- processes ---- */

static void live_set(pid_t pid, int alive)
{
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
		if (alive ? live[i] == 0 : live[i] == pid) {
			live[i] = alive ? pid : 0;
			return;
		}
}

static pid_t spawn(char *const argv[], int *out_fd)
{
	int fds[2] = {-1, -1};
	pid_t pid;

	if (out_fd && pipe(fds))
		fail("pipe: %s", strerror(errno));
	if ((pid = fork()) < 0)
		fail("fork: %s", strerror(errno));
	if (pid == 0) {
		if (out_fd) {
			dup2(fds[1], 1);
			close(fds[0]);
			close(fds[1]);
		} else {
			/* mock-cluster prints its bootstraps: not ours */
			int null = open("/dev/null", O_WRONLY);
			if (null >= 0)
				dup2(null, 1);
		}
		execv(argv[0], argv);
		fprintf(stderr, "tbx_bench: exec %s: %s\n", argv[0],
			strerror(errno));
		_exit(127);
	}
	if (out_fd) {
		close(fds[1]);
		*out_fd = fds[0];
		live_set(pid, 1);
	}
	return pid;
}

typedef struct child {
	pid_t pid;
	int fd;
} child_t;

/* Reads the child's JSON line and reaps it; *rss_kb its peak RSS. */
static cJSON *child_finish(child_t *c, long *rss_kb)
{
	char buf[65536];
	size_t len = 0;
	ssize_t n;
	struct rusage ru;
	int status;
	cJSON *j;

	while ((n = read(c->fd, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	close(c->fd);
	if (wait4(c->pid, &status, 0, &ru) < 0)
		fail("wait4: %s", strerror(errno));
	live_set(c->pid, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail("a contender failed (status %d); its messages are above",
		     status);
	if (!(j = cJSON_Parse(buf)))
		fail("a contender printed no result: '%s'", buf);
	if (rss_kb)
		*rss_kb = ru.ru_maxrss;
	return j;
}

static double jnum(const cJSON *j, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* ---- the cluster, topics and preloading ---- */

typedef struct run {
	int kind;
	char in[64], out[64], group[64], dir[PATH_MAX];
	char schema[64], tschema[64]; /* PostgreSQL: service, tokens */
	long messages, batch;
	int downstream;	    /* a downstream group subscribed to the output */
	const char *layout; /* tokenbox's outbox.layout */
	const char *tokens_format; /* the publisher's and tokenbox's */
	char app_name[64];	   /* PostgreSQL workers: application_name */
} run_t;

static char **cluster_argv;
static int cluster_argc, cluster_cap;

static void argv_push(const char *s)
{
	if (cluster_argc + 2 > cluster_cap) {
		cluster_cap = cluster_cap ? cluster_cap * 2 : 64;
		cluster_argv =
		    realloc(cluster_argv, (size_t)cluster_cap * sizeof(char *));
		if (!cluster_argv)
			fail("out of memory");
	}
	cluster_argv[cluster_argc++] = strdup(s);
	cluster_argv[cluster_argc] = NULL;
}

/* Names the topics of a run; the cluster creates them at start. */
static void run_plan(run_t *r, int kind, long messages, long batch,
		     const char *tag)
{
	char spec[128];
	int n = ++topic_seq;

	memset(r, 0, sizeof(*r));
	r->kind = kind;
	r->messages = messages;
	r->batch = batch;
	r->downstream = (int)cfg.downstream;
	r->layout = cfg.layout;
	r->tokens_format = cfg.tokens_format;
	snprintf(r->in, sizeof(r->in), "%sin-%s-%d", cfg.prefix, tag, n);
	snprintf(r->out, sizeof(r->out), "%sout-%s-%d", cfg.prefix, tag, n);
	snprintf(r->group, sizeof(r->group), "%s%s-%s-%d", cfg.prefix,
		 kinds[kind], tag, n);
	snprintf(r->dir, sizeof(r->dir), "%s/run-%d", cfg.work, n);
	if (cfg.store_url) {
		snprintf(r->schema, sizeof(r->schema), "bench_%ld_%d",
			 (long)getpid(), n);
		snprintf(r->tschema, sizeof(r->tschema), "bench_%ld_%d_t",
			 (long)getpid(), n);
	}
	snprintf(spec, sizeof(spec), "%s:%d", r->in, BENCH_PARTITIONS);
	argv_push("--topic");
	argv_push(spec);
	snprintf(spec, sizeof(spec), "%s:%d", r->out, BENCH_PARTITIONS);
	argv_push("--topic");
	argv_push(spec);
}

/* A real cluster: the planned topics ("--topic name:partitions" in
 * cluster_argv) created through the admin API. */
static void real_cluster_start(void)
{
	const char *names[64];
	int parts[64];
	size_t cnt = 0;
	char err[512];

	snprintf(bootstraps, sizeof(bootstraps), "%s", cfg.bootstrap);
	for (int i = 0; i + 1 < cluster_argc; i++) {
		char *colon;
		if (strcmp(cluster_argv[i], "--topic") != 0)
			continue;
		colon = strrchr(cluster_argv[++i], ':');
		if (!colon)
			continue;
		*colon = '\0';
		names[cnt] = cluster_argv[i];
		parts[cnt++] = atoi(colon + 1);
		if (cnt == sizeof(names) / sizeof(names[0])) {
			if (tbx_cli_create_topics(bootstraps, names, parts, cnt,
						  120000, err, sizeof(err)))
				fail("%s: %s", bootstraps, err);
			cnt = 0;
		}
	}
	if (cnt && tbx_cli_create_topics(bootstraps, names, parts, cnt, 120000,
					 err, sizeof(err)))
		fail("%s: %s", bootstraps, err);
}

static void cluster_start(void)
{
	char bootfile[PATH_MAX + 16];
	FILE *f;

	if (cfg.bootstrap) {
		real_cluster_start();
		return;
	}

	snprintf(bootfile, sizeof(bootfile), "%s/bootstrap", cfg.work);
	argv_push("--bootstrap-file");
	argv_push(bootfile);
	/* librdkafka 2.0.2's mock cluster is sometimes very slow to create
	 * the topics (rd_kafka_mock_topic_create() waiting on the mock
	 * thread, up to seconds per topic): a cluster that is not up within
	 * 60 s is replaced. */
	for (int attempt = 1;; attempt++) {
		int status;

		cluster_pid = spawn(cluster_argv, NULL);
		for (int i = 0; i < 1200 && access(bootfile, F_OK) != 0; i++)
			usleep(50000);
		if ((f = fopen(bootfile, "r")))
			break;
		kill(cluster_pid, SIGKILL);
		waitpid(cluster_pid, &status, 0);
		cluster_pid = 0;
		if (attempt == 3)
			fail("%s mock-cluster did not start (3 attempts)",
			     cfg.tokenbox);
		progress("mock-cluster did not start within 60 s; again\n");
	}
	if (!fgets(bootstraps, sizeof(bootstraps), f))
		fail("%s: empty bootstrap file", bootfile);
	fclose(f);
	bootstraps[strcspn(bootstraps, "\n")] = '\0';
}

/* tokenbox on PostgreSQL: its token store is a schema of the server. */
static int pg_tokens(const run_t *r)
{
	return cfg.store_url && r->kind == TOKENBOX;
}

/* Opens the run's token store at @p tokens_path, or its schema on
 * PostgreSQL (created when missing). */
static tbx_tokens_t *tokens_open(const run_t *r, const char *tokens_path)
{
	tbx__db_opts_t opts;
	tbx_tokens_t *t;
	char err[512];

	tbx__db_opts_init(&opts);
	if (pg_tokens(r)) {
		if (tbx_tokens_pg_open(cfg.store_url, r->tschema, NULL, &opts,
				       &t, err, sizeof(err)))
			fail("the token store in schema %s: %s", r->tschema,
			     err);
	} else if (tbx_tokens_sqlite_open(tokens_path, &opts, NULL, &t, err,
					  sizeof(err))) {
		fail("the token store %s: %s", tokens_path, err);
	}
	return t;
}

/* Creates the token store if it does not exist: every contender's
 * records are published with tokens, and a publisher never creates a
 * token store. */
static void token_store_create(const run_t *r, const char *tokens_path)
{
	tbx_tokens_close(tokens_open(r, tokens_path));
}

static void subscribe(const run_t *r, const char *tokens_path,
		      const char *topic, const char *group)
{
	tbx_tokens_t *t = tokens_open(r, tokens_path);
	int64_t since;

	if (tbx_tokens_subscribe(t, topic, group, &since))
		fail("subscribe %s to %s in %s", group, topic,
		     pg_tokens(r) ? r->tschema : tokens_path);
	tbx_tokens_close(t);
}

static void path_in(char *out, size_t size, const run_t *r, const char *name)
{
	snprintf(out, size, "%s/%s", r->dir, name);
}

/* tokenbox's token store: by default the service store's file (tokens.path
 * empty), with --token-store separate a file of its own. */
static const char *token_file(const run_t *r)
{
	return r->kind == TOKENBOX && !cfg.separate_tokens ? "service.db"
							   : "tokens.db";
}

/* The run's directory, and its subscriptions: tokenbox's group first, so
 * that the records published next carry tokens for it. */
static void run_prepare(const run_t *r)
{
	char tokens[PATH_MAX + 16];

	if (mkdir(r->dir, 0700) && errno != EEXIST)
		fail("mkdir %s: %s", r->dir, strerror(errno));
	path_in(tokens, sizeof(tokens), r, token_file(r));
	token_store_create(r, tokens);
	if (r->kind == TOKENBOX) {
		subscribe(r, tokens, r->in, r->group);
		if (r->downstream)
			subscribe(r, tokens, r->out, "downstream");
	}
}

static tbx_publisher_t *publisher(const run_t *r)
{
	char tokens[PATH_MAX + 16], err[512];
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;

	path_in(tokens, sizeof(tokens), r, token_file(r));
	if (pg_tokens(r) &&
	    (tbx_conf_set(conf, "tokens.url", cfg.store_url, err,
			  sizeof(err)) ||
	     tbx_conf_set(conf, "tokens.schema", r->tschema, err, sizeof(err))))
		fail("publisher conf: %s", err);
	if (tbx_conf_set(conf, "kafka.bootstrap.servers", bootstraps, err,
			 sizeof(err)) ||
	    (!pg_tokens(r) &&
	     tbx_conf_set(conf, "tokens.path", tokens, err, sizeof(err))) ||
	    tbx_conf_set(conf, "kafka.compression.type", "lz4", err,
			 sizeof(err)) ||
	    tbx_conf_set(conf, "tokens.format", r->tokens_format, err,
			 sizeof(err)) ||
	    tbx_conf_set(conf, "log.level", "warning", err, sizeof(err)) ||
	    /* The driver never traces: with OTEL_* set (bench/run
	     * --tracing), only the contender's worker does, starting each
	     * record's trace, its sampler deciding. */
	    tbx_conf_set(conf, "otel.sdk.disabled", "true", err, sizeof(err)))
		fail("publisher conf: %s", err);
	if (!(pub = tbx_publisher_new(conf, err, sizeof(err))))
		fail("publisher: %s", err);
	return pub;
}

/* Every input record is published with tokens (tbx_publisher), for every
 * contender, so that all read records of the same size. */
static void publish(tbx_publisher_t *pub, const run_t *r, long first, long cnt,
		    int flush_each)
{
	char key[32], payload[BENCH_PAYLOAD_LEN + 1], ts[24];
	static const char filler[] =
	    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do "
	    "eiusmod tempor incididunt ut labore et dolore magna aliqua ut "
	    "enim "
	    "ad minim veniam quis nostrud exercitation ullamco laboris nisi ut "
	    "aliquip ex ea commodo consequat";

	for (long i = first; i < first + cnt; i++) {
		snprintf(key, sizeof(key), "customer-%ld", i % 1000);
		int n = snprintf(payload, sizeof(payload),
				 "{\"order\":%ld,\"amount\":%ld,\"note\":\"", i,
				 100 + i % 900);
		for (size_t k = (size_t)n; k < sizeof(payload) - 1; k++)
			payload[k] =
			    filler[(k - (size_t)n) % (sizeof(filler) - 1)];
		payload[BENCH_PAYLOAD_LEN] = '\0';
		memcpy(payload + BENCH_PAYLOAD_LEN - 2, "\"}", 2);
		snprintf(ts, sizeof(ts), "%" PRId64, bench_now_ns());
		tbx_header_t h = {BENCH_TS_HEADER, ts, strlen(ts)};
		tbx_out_t out = {.topic = r->in,
				 .type = "BenchIn",
				 .key = key,
				 .key_len = strlen(key),
				 .payload = payload,
				 .payload_len = BENCH_PAYLOAD_LEN,
				 .headers = &h,
				 .header_cnt = 1};
		if (tbx_publish(pub, &out))
			fail("publish: %s", tbx_publisher_errstr(pub));
		if (flush_each || (i - first) % 10000 == 9999)
			if (tbx_publisher_flush(pub, NULL))
				fail("flush: %s", tbx_publisher_errstr(pub));
	}
	if (tbx_publisher_flush(pub, NULL))
		fail("flush: %s", tbx_publisher_errstr(pub));
}

/*
 * Spawns a contender, under the command that TBX_BENCH_CONTENDER_WRAP
 * names when it is set (words split at spaces, no quoting): bench/profile
 * runs the contender under callgrind so.  Only the contender: the driver,
 * its publisher and the mock cluster run as they are.
 */
static pid_t spawn_wrapped(char *const argv[], int *out_fd)
{
	const char *env = getenv("TBX_BENCH_CONTENDER_WRAP");
	char *words, *tok, *save = NULL, *all[96];
	size_t n = 0, argc = 0;
	pid_t pid;

	if (!env || !*env)
		return spawn(argv, out_fd);
	while (argv[argc])
		argc++;
	if (!(words = strdup(env)))
		fail("out of memory%s", "");
	for (tok = strtok_r(words, " ", &save); tok;
	     tok = strtok_r(NULL, " ", &save)) {
		if (n + argc + 1 >= sizeof(all) / sizeof(all[0]))
			fail("TBX_BENCH_CONTENDER_WRAP: too many words%s", "");
		all[n++] = tok;
	}
	if (n == 0)
		fail("TBX_BENCH_CONTENDER_WRAP: no command in '%s'", env);
	for (size_t i = 0; i <= argc; i++)
		all[n + i] = argv[i];
	pid = spawn(all, out_fd);
	free(words);
	return pid;
}

static child_t contender_start(const run_t *r, long messages, int until_rows,
			       int samples)
{
	char n[24], b[24], s[24];
	child_t c;

	snprintf(n, sizeof(n), "%ld", messages);
	snprintf(b, sizeof(b), "%ld", r->batch);
	snprintf(s, sizeof(s), "%d", samples);
	char *argv[] = {cfg.self,
			"contender",
			"--kind",
			(char *)kinds[r->kind],
			"--bootstrap",
			bootstraps,
			"--in",
			(char *)r->in,
			"--out",
			(char *)r->out,
			"--group",
			(char *)r->group,
			"--dir",
			(char *)r->dir,
			"--messages",
			n,
			"--batch",
			b,
			"--samples",
			s,
			"--token-store",
			cfg.separate_tokens ? "separate" : "single",
			"--layout",
			(char *)r->layout,
			"--tokens-format",
			(char *)r->tokens_format,
			NULL,
			NULL,
			NULL,
			NULL,
			NULL,
			NULL,
			NULL,
			NULL};
	size_t a = sizeof(argv) / sizeof(argv[0]) - 8; /* the NULLs */

	if (cfg.store_url) {
		argv[a++] = "--schema";
		argv[a++] = (char *)r->schema;
		if (r->kind == TOKENBOX) {
			argv[a++] = "--tokens-schema";
			argv[a++] = (char *)r->tschema;
		}
		if (r->app_name[0]) {
			argv[a++] = "--app-name";
			argv[a++] = (char *)r->app_name;
		}
	}
	if (until_rows)
		argv[a++] = "--until-rows";
	c.pid = spawn_wrapped(argv, &c.fd);
	return c;
}

/* ---- the measurements ---- */

typedef struct tp {
	double rate, txn_per_k, sync_per_k, rss_mb;
	double rt_per_rec, commits_per_k; /* PostgreSQL */
	long long dedup_rows, downstream, store_bytes;
} tp_t;

static double rate_of(const cJSON *j)
{
	double span = (jnum(j, "t_end_ns") - jnum(j, "t_first_end_ns")) / 1e9;
	double n = jnum(j, "processed") - jnum(j, "first_batch");

	return span > 0 && n > 0 ? n / span : 0;
}

/* One throughput run: preloaded input, one contender process. */
static tp_t throughput_run(const run_t *r)
{
	tbx_publisher_t *pub;
	child_t c;
	long rss;
	cJSON *j;
	tp_t t;

	run_prepare(r);
	pub = publisher(r);
	publish(pub, r, 0, r->messages, 0);
	tbx_publisher_destroy(pub);
	c = contender_start(r, r->messages, 0, 0);
	j = child_finish(&c, &rss);
	t.rate = rate_of(j);
	t.txn_per_k = jnum(j, "write_txns") * 1000 / jnum(j, "processed");
	t.sync_per_k = jnum(j, "syncs") * 1000 / jnum(j, "processed");
	t.rt_per_rec = jnum(j, "pg_round_trips") / jnum(j, "processed");
	t.commits_per_k = jnum(j, "pg_commits") * 1000 / jnum(j, "processed");
	t.rss_mb = rss / 1024.0;
	t.dedup_rows = (long long)jnum(j, "dedup_rows");
	t.downstream = (long long)jnum(j, "downstream_tokens");
	t.store_bytes = (long long)jnum(j, "store_bytes");
	/* tokenbox with tracing on (OTEL_* in the environment). */
	if (cJSON_GetObjectItem(j, "spans_enqueued"))
		progress("%-9s spans: %.0f enqueued, %.0f exported, %.0f "
			 "dropped (queue full), %.0f failed, %.0f held\n",
			 kinds[r->kind], jnum(j, "spans_enqueued"),
			 jnum(j, "spans_exported"), jnum(j, "spans_dropped"),
			 jnum(j, "spans_failed"), jnum(j, "spans_held"));
	cJSON_Delete(j);
	if (cfg.store_url)
		progress("%-13s %8.0f msg/s  %.3f round trips/record  (%s, %ld "
			 "records)\n",
			 kinds[r->kind], t.rate, t.rt_per_rec, r->group,
			 r->messages);
	else
		progress("%-9s %8.0f msg/s  (%s, %ld records)\n",
			 kinds[r->kind], t.rate, r->group, r->messages);
	return t;
}

static rd_kafka_t *reader_new(const char *topic, int assign)
{
	rd_kafka_conf_t *kc = rd_kafka_conf_new();
	char err[512], group[96];
	rd_kafka_t *rk;

	snprintf(group, sizeof(group), "bench-reader-%s", topic);
	if (rd_kafka_conf_set(kc, "bootstrap.servers", bootstraps, err,
			      sizeof(err)) ||
	    rd_kafka_conf_set(kc, "group.id", group, err, sizeof(err)) ||
	    rd_kafka_conf_set(kc, "enable.auto.commit", "false", err,
			      sizeof(err)) ||
	    rd_kafka_conf_set(kc, "fetch.wait.max.ms", "5", err, sizeof(err)))
		fail("reader conf: %s", err);
	if (!(rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof(err))))
		fail("reader: %s", err);
	if (assign) {
		rd_kafka_topic_partition_list_t *l =
		    rd_kafka_topic_partition_list_new(BENCH_PARTITIONS);
		for (int p = 0; p < BENCH_PARTITIONS; p++)
			rd_kafka_topic_partition_list_add(l, topic, p)->offset =
			    RD_KAFKA_OFFSET_BEGINNING;
		rd_kafka_assign(rk, l);
		rd_kafka_topic_partition_list_destroy(l);
	}
	return rk;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/* Reads what arrived on the output; latencies of timed records in ms. */
static size_t reader_drain(rd_kafka_t *rk, double *lat, size_t *lat_cnt,
			   size_t lat_cap, int wait_ms)
{
	rd_kafka_message_t *m;
	size_t got = 0;

	while ((m = rd_kafka_consumer_poll(rk, wait_ms))) {
		int64_t now = bench_now_ns();
		rd_kafka_headers_t *h = NULL;
		const void *v = NULL;
		size_t len = 0;
		char ts[24];

		wait_ms = 0;
		if (!m->err) {
			got++;
			if (!rd_kafka_message_headers(m, &h) &&
			    !rd_kafka_header_get_last(h, BENCH_TS_HEADER, &v,
						      &len) &&
			    v && len < sizeof(ts) && *lat_cnt < lat_cap) {
				memcpy(ts, v, len);
				ts[len] = '\0';
				lat[(*lat_cnt)++] =
				    (double)(now - strtoll(ts, NULL, 10)) / 1e6;
			}
		}
		rd_kafka_message_destroy(m);
	}
	return got;
}

/* Latency at a fixed rate: records published live, read back from the
 * output by a consumer in this process; from the publisher's call to the
 * reader's poll returning the output. */
static void latency_run(const run_t *r, double *p50, double *p99)
{
	size_t n = (size_t)r->messages, lat_cnt = 0, got = 0;
	double *lat = calloc(n + 1, sizeof(*lat));
	tbx_publisher_t *pub;
	rd_kafka_t *rd;
	int64_t start, deadline;
	long sent = 0;
	child_t c;
	cJSON *j;

	if (!lat)
		fail("out of memory");
	run_prepare(r);
	pub = publisher(r);
	rd = reader_new(r->out, 1);
	c = contender_start(r, r->messages + 1, 0, 0);
	/* A warm-up record: the contender has joined its group once its
	 * output shows up. */
	publish(pub, r, 0, 1, 1);
	deadline = bench_now_ns() + 120 * (int64_t)1000000000;
	while (!got && bench_now_ns() < deadline)
		got = reader_drain(rd, lat, &lat_cnt, 0, 100);
	if (!got)
		fail("%s: the warm-up record never came out", kinds[r->kind]);
	start = bench_now_ns();
	while (sent < r->messages) {
		long due = (long)((double)(bench_now_ns() - start) / 1e9 *
				  (double)cfg.lat_rate) +
			   1;
		if (due > r->messages)
			due = r->messages;
		if (due > sent) {
			publish(pub, r, 1 + sent, due - sent, 0);
			sent = due;
		}
		got += reader_drain(rd, lat, &lat_cnt, n, 1);
	}
	deadline = bench_now_ns() + 60 * (int64_t)1000000000;
	while (lat_cnt < n && bench_now_ns() < deadline)
		got += reader_drain(rd, lat, &lat_cnt, n, 100);
	j = child_finish(&c, NULL);
	cJSON_Delete(j);
	rd_kafka_consumer_close(rd);
	rd_kafka_destroy(rd);
	tbx_publisher_destroy(pub);
	if (lat_cnt < n)
		fail("%s: %zu of %zu latency records came out", kinds[r->kind],
		     lat_cnt, n);
	qsort(lat, lat_cnt, sizeof(*lat), cmp_double);
	*p50 = pct(lat, lat_cnt, 0.50);
	*p99 = pct(lat, lat_cnt, 0.99);
	free(lat);
	progress("%-9s latency p50 %.1f ms p99 %.1f ms\n", kinds[r->kind], *p50,
		 *p99);
}

/*
 * tokenbox with @p workers processes on one group and one store.  The
 * window starts when the last worker has finished its first batch, so
 * that a worker joining late (a rebalance) is not inside it: rate =
 * business rows written from then on / (last end - that moment).
 */
static double workers_run(const run_t *r, int workers)
{
	tbx_publisher_t *pub;
	child_t c[8];
	double t0 = 0, t1 = 0, rows0 = 0, rate;

	run_prepare(r);
	pub = publisher(r);
	publish(pub, r, 0, r->messages, 0);
	tbx_publisher_destroy(pub);
	for (int i = 0; i < workers; i++)
		c[i] = contender_start(r, r->messages, 1, 0);
	for (int i = 0; i < workers; i++) {
		cJSON *j = child_finish(&c[i], NULL);
		double a = jnum(j, "t_first_end_ns"), b = jnum(j, "t_end_ns");
		progress("  worker %d: first batch done at %.2fs, last at "
			 "%.2fs, %ld outputs\n",
			 i, (a - (double)t_start) / 1e9,
			 (b - (double)t_start) / 1e9,
			 (long)jnum(j, "processed"));
		if (a > t0) {
			t0 = a;
			rows0 = jnum(j, "rows_at_first");
		}
		if (b > t1)
			t1 = b;
		cJSON_Delete(j);
	}
	rate = t1 > t0 && t0 > 0 && rows0 < (double)r->messages
		   ? ((double)r->messages - rows0) / ((t1 - t0) / 1e9)
		   : 0;
	progress("tokenbox  %d worker(s): %.0f msg/s\n", workers, rate);
	return rate;
}

/* Adds @p v to the number @p name of @p obj (made when missing). */
static void json_add_to(cJSON *obj, const char *name, double v)
{
	cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, name);

	if (n)
		cJSON_SetNumberValue(n, n->valuedouble + v);
	else
		cJSON_AddNumberToObject(obj, name, v);
}

/* ---- tokenbox workers on PostgreSQL: the lock waits between them ---- */

/*
 * What the sampler asks every tick: the run's backends that are running
 * a statement (application_name, set by the workers from PGAPPNAME), what
 * each waits for (wait_event_type; "CPU" when nothing), and for a wait on
 * a heavyweight lock the lock it has not been granted (type, mode, the
 * relation or the advisory namespace), the statement, and who holds it:
 * a worker of the same run, or someone else.  pg_locks is read only for
 * the backends that wait on a lock (the lateral subquery's condition on
 * a.wait_event_type gates it).
 */
static const char sample_sql[] =
    "SELECT coalesce(a.wait_event_type, 'CPU'), coalesce(a.wait_event, ''),"
    " coalesce(l.locktype, ''), coalesce(l.mode, ''), coalesce(l.rel, ''),"
    " CASE WHEN a.wait_event_type = 'Lock' THEN a.query ELSE '' END,"
    " coalesce(l.held, '') "
    "FROM pg_stat_activity a LEFT JOIN LATERAL (SELECT k.locktype, k.mode,"
    " CASE WHEN k.locktype = 'advisory' THEN 'advisory namespace ' ||"
    " k.classid::text ELSE coalesce(n.nspname || '.' || c.relname, '') END"
    " AS rel, (SELECT CASE WHEN count(*) = 0 THEN 'none seen'"
    " WHEN bool_and(b.application_name = $1) THEN 'a worker of the run'"
    " ELSE 'other: ' || string_agg(DISTINCT b.backend_type || ' ' ||"
    " coalesce(b.application_name, ''), ', ') END FROM pg_stat_activity b"
    " WHERE b.pid = ANY (pg_blocking_pids(a.pid))) AS held FROM pg_locks k"
    " LEFT JOIN pg_class c ON c.oid = k.relation LEFT JOIN pg_namespace n"
    " ON n.oid = c.relnamespace WHERE a.wait_event_type = 'Lock' AND"
    " k.pid = a.pid AND NOT k.granted LIMIT 1) l ON true "
    "WHERE a.application_name = $1 AND a.state = 'active'";

#define WAIT_CATS 16 /* wait_event_types, "CPU" among them */
#define WAIT_KEYS 64 /* kinds of lock waits */
#define WAIT_EVS  64 /* other waits: type and wait_event */

/* A backend of the run seen in a sample: its wait_event_type, for a
 * lock wait the kind of wait (key, else -1), for another wait its
 * wait_event (ev, else -1). */
typedef struct wait_obs {
	int64_t t;
	short cat, key, ev;
} wait_obs_t;

typedef struct sampler {
	pthread_t thread;
	atomic_int stop;
	const run_t *run;
	tbx__pg_t *pg;
	int64_t *ticks; /* when each sample was taken */
	size_t tick_cnt, tick_cap;
	wait_obs_t *obs;
	size_t obs_cnt, obs_cap;
	char cats[WAIT_CATS][32];
	int cat_cnt;
	char keys[WAIT_KEYS][512];
	int key_cnt;
	char evs[WAIT_EVS][64];
	int ev_cnt;
	char err[512]; /* why sampling stopped early, or empty */
} sampler_t;

/* The index of @p text in @p tab (added when new), -1 when full. */
static int intern(char *tab, size_t width, int *cnt, int cap, const char *text)
{
	for (int i = 0; i < *cnt; i++)
		if (strcmp(tab + (size_t)i * width, text) == 0)
			return i;
	if (*cnt == cap)
		return -1;
	snprintf(tab + (size_t)*cnt * width, width, "%s", text);
	return (*cnt)++;
}

/* @p q as one line, the run's schema names replaced by @S and @T (they
 * differ from run to run), at most @p size - 1 bytes. */
static void statement_of(const run_t *r, const char *q, char *out, size_t size)
{
	size_t o = 0, ls = strlen(r->schema), lt = strlen(r->tschema);
	int space = 0;

	while (*q && o + 4 < size) {
		int quoted = *q == '"';
		const char *p = q + quoted;

		if (strncmp(p, r->tschema, lt) == 0 &&
		    (!quoted || p[lt] == '"')) {
			memcpy(out + o, "@T", 2);
			o += 2;
			q = p + lt + quoted;
			space = 0;
			continue;
		}
		if (strncmp(p, r->schema, ls) == 0 &&
		    (quoted ? p[ls] == '"' : p[ls] != '_')) {
			memcpy(out + o, "@S", 2);
			o += 2;
			q = p + ls + quoted;
			space = 0;
			continue;
		}
		if (*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r') {
			if (!space && o)
				out[o++] = ' ';
			space = 1;
		} else {
			out[o++] = *q;
			space = 0;
		}
		q++;
	}
	if (*q && o >= 3)
		memcpy(out + o - 3, "...", 3);
	out[o] = '\0';
}

static int sampler_push(sampler_t *s, int64_t t, int cat, int key, int ev)
{
	if (s->obs_cnt == s->obs_cap) {
		size_t cap = s->obs_cap ? s->obs_cap * 2 : 4096;
		wait_obs_t *n = realloc(s->obs, cap * sizeof(*n));
		if (!n)
			return -1;
		s->obs = n;
		s->obs_cap = cap;
	}
	s->obs[s->obs_cnt++] =
	    (wait_obs_t){t, (short)cat, (short)key, (short)ev};
	return 0;
}

static void *sampler_main(void *arg)
{
	sampler_t *s = arg;
	const char *v[1] = {s->run->app_name};
	struct timespec pause = {cfg.lock_sample_ms / 1000,
				 cfg.lock_sample_ms % 1000 * 1000000};

	while (!atomic_load(&s->stop)) {
		int64_t t = bench_now_ns();
		PGresult *res = PQexecParams(s->pg->conn, sample_sql, 1, NULL,
					     v, NULL, NULL, 0);

		if (PQresultStatus(res) != PGRES_TUPLES_OK) {
			snprintf(s->err, sizeof(s->err), "%s",
				 PQresultErrorMessage(res));
			PQclear(res);
			break;
		}
		if (s->tick_cnt == s->tick_cap) {
			size_t cap = s->tick_cap ? s->tick_cap * 2 : 4096;
			int64_t *n = realloc(s->ticks, cap * sizeof(*n));
			if (!n) {
				snprintf(s->err, sizeof(s->err),
					 "out of memory");
				PQclear(res);
				break;
			}
			s->ticks = n;
			s->tick_cap = cap;
		}
		s->ticks[s->tick_cnt++] = t;
		for (int i = 0; i < PQntuples(res); i++) {
			const char *type = PQgetvalue(res, i, 0);
			char key[512], stmt[300];
			int cat = intern(&s->cats[0][0], sizeof(s->cats[0]),
					 &s->cat_cnt, WAIT_CATS, type),
			    k = -1, ev = -1;

			if (strcmp(type, "Lock") && strcmp(type, "CPU")) {
				char evk[sizeof(s->evs[0])];

				snprintf(evk, sizeof(evk), "%s:%s", type,
					 PQgetvalue(res, i, 1));
				ev = intern(&s->evs[0][0], sizeof(s->evs[0]),
					    &s->ev_cnt, WAIT_EVS, evk);
				if (ev < 0) { /* the last one: the rest */
					ev = WAIT_EVS - 1;
					snprintf(s->evs[ev], sizeof(s->evs[ev]),
						 "(other)");
				}
			}
			if (strcmp(type, "Lock") == 0) {
				char rel[160];

				statement_of(s->run, PQgetvalue(res, i, 5),
					     stmt, sizeof(stmt));
				statement_of(s->run, PQgetvalue(res, i, 4), rel,
					     sizeof(rel));
				if (!*PQgetvalue(res, i, 2))
					snprintf(key, sizeof(key),
						 "%s (granted before pg_locks "
						 "was read) | %s",
						 PQgetvalue(res, i, 1), stmt);
				else
					snprintf(key, sizeof(key),
						 "%s %s%s%s | held by %s | %s",
						 PQgetvalue(res, i, 2),
						 PQgetvalue(res, i, 3),
						 *rel ? " on " : "", rel,
						 PQgetvalue(res, i, 6), stmt);
				k = intern(&s->keys[0][0], sizeof(s->keys[0]),
					   &s->key_cnt, WAIT_KEYS, key);
				if (k < 0) { /* the last one: the rest */
					k = WAIT_KEYS - 1;
					snprintf(s->keys[k], sizeof(s->keys[k]),
						 "(other kinds: more than %d)",
						 WAIT_KEYS - 1);
				}
			}
			if (cat < 0)
				cat = WAIT_CATS - 1;
			if (sampler_push(s, t, cat, k, ev)) {
				snprintf(s->err, sizeof(s->err),
					 "out of memory");
				break;
			}
		}
		PQclear(res);
		if (s->err[0])
			break;
		nanosleep(&pause, NULL);
	}
	return NULL;
}

static void sampler_start(sampler_t *s, const run_t *r)
{
	char err[512];

	memset(s, 0, sizeof(*s));
	s->run = r;
	atomic_init(&s->stop, 0);
	if (tbx__pg_connect(cfg.store_url, &s->pg, err, sizeof(err)))
		fail("the lock-wait sampler: %s", err);
	if (pthread_create(&s->thread, NULL, sampler_main, s))
		fail("the lock-wait sampler: pthread_create failed");
}

static void sampler_stop(sampler_t *s)
{
	atomic_store(&s->stop, 1);
	pthread_join(s->thread, NULL);
	tbx__pg_unref(s->pg);
	s->pg = NULL;
	if (s->err[0])
		fail("the lock-wait sampler stopped: %s", s->err);
}

static void sampler_free(sampler_t *s)
{
	free(s->ticks);
	free(s->obs);
}

/*
 * After a run of workers: every record has exactly one business row,
 * and the group has no outbox row (either layout), token (either
 * format) or registration left.  Anything else fails the bench.
 */
static void pg_workers_check(const run_t *r, long long *rows,
			     long long *distinct)
{
	tbx__pg_t *pg;
	char err[512], sql[1024];
	const char *v[1] = {r->group};
	long long outbox, tokens;
	PGresult *res;

	if (tbx__pg_connect(cfg.store_url, &pg, err, sizeof(err)))
		fail("the outcome check: %s", err);
	snprintf(sql, sizeof(sql),
		 "SELECT (SELECT count(*) FROM \"%s\".bench_rows), (SELECT "
		 "count(DISTINCT msg_id) FROM \"%s\".bench_rows), (SELECT "
		 "count(*) FROM \"%s\".tbx_outbox WHERE grp = $1) + (SELECT "
		 "count(*) FROM \"%s\".tbx_obatch WHERE grp = $1), (SELECT "
		 "count(*) FROM \"%s\".tbx_tokens WHERE grp = $1) + (SELECT "
		 "count(*) FROM \"%s\".tbx_tset WHERE grp = $1) + (SELECT "
		 "count(*) FROM \"%s\".tbx_registrations WHERE send_grp = $1) "
		 "+ (SELECT count(*) FROM \"%s\".tbx_breg WHERE send_grp = $1)",
		 r->schema, r->schema, r->schema, r->schema, r->tschema,
		 r->tschema, r->tschema, r->tschema);
	res = PQexecParams(pg->conn, sql, 1, NULL, v, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		fail("the outcome check: %s", PQresultErrorMessage(res));
	*rows = atoll(PQgetvalue(res, 0, 0));
	*distinct = atoll(PQgetvalue(res, 0, 1));
	outbox = atoll(PQgetvalue(res, 0, 2));
	tokens = atoll(PQgetvalue(res, 0, 3));
	PQclear(res);
	tbx__pg_unref(pg);
	if (*rows != r->messages || *distinct != r->messages || outbox ||
	    tokens)
		fail("%s: not exactly once: %lld business rows for %ld "
		     "records (%lld distinct ids), %lld outbox rows and %lld "
		     "tokens and registrations of the group left",
		     r->group, *rows, r->messages, *distinct, outbox, tokens);
}

/*
 * tokenbox with @p workers processes of one group on the run's two
 * schemas, the lock waits of their backends sampled meanwhile.  The
 * window is workers_run()'s; the samples are counted in it and over the
 * whole run (the group's joins and rebalances included).  @returns the
 * run's figures as a JSON object.
 */
static cJSON *pg_workers_run(run_t *r, int workers, long rep)
{
	tbx_publisher_t *pub;
	child_t c[8];
	sampler_t smp;
	double t0 = 0, t1 = 0, rows0 = 0, rate;
	long long rows, distinct, lock_win = 0, lock_all = 0;
	long cat_win[WAIT_CATS] = {0}, key_win[WAIT_KEYS] = {0},
	     key_all[WAIT_KEYS] = {0}, ev_win[WAIT_EVS] = {0};
	size_t ticks_win = 0;
	cJSON *j = cJSON_CreateObject(), *types = cJSON_CreateObject(),
	      *waits = cJSON_CreateArray(), *by_win = cJSON_CreateObject(),
	      *by_all = cJSON_CreateObject(), *evs = cJSON_CreateObject();

	run_prepare(r);
	pub = publisher(r);
	publish(pub, r, 0, r->messages, 0);
	tbx_publisher_destroy(pub);
	sampler_start(&smp, r);
	for (int i = 0; i < workers; i++)
		c[i] = contender_start(r, r->messages, 1, 0);
	for (int i = 0; i < workers; i++) {
		cJSON *w = child_finish(&c[i], NULL);
		double a = jnum(w, "t_first_end_ns"), b = jnum(w, "t_end_ns");
		if (a > t0) {
			t0 = a;
			rows0 = jnum(w, "rows_at_first");
		}
		if (b > t1)
			t1 = b;
		cJSON_Delete(w);
	}
	sampler_stop(&smp);
	pg_workers_check(r, &rows, &distinct);
	rate = t1 > t0 && t0 > 0 && rows0 < (double)r->messages
		   ? ((double)r->messages - rows0) / ((t1 - t0) / 1e9)
		   : 0;
	for (size_t i = 0; i < smp.tick_cnt; i++)
		ticks_win += smp.ticks[i] >= t0 && smp.ticks[i] <= t1;
	for (size_t i = 0; i < smp.obs_cnt; i++) {
		const wait_obs_t *o = &smp.obs[i];
		int in = o->t >= t0 && o->t <= t1;

		cat_win[o->cat] += in;
		if (o->ev >= 0)
			ev_win[o->ev] += in;
		if (o->key >= 0) {
			key_all[o->key]++;
			key_win[o->key] += in;
			lock_all++;
			lock_win += in;
		}
	}
	for (int k = 0; k < smp.cat_cnt; k++)
		cJSON_AddNumberToObject(types, smp.cats[k], cat_win[k]);
	for (int k = 0; k < smp.ev_cnt; k++)
		if (ev_win[k])
			json_add_to(evs, smp.evs[k], ev_win[k]);
	for (int k = 0; k < smp.key_cnt; k++) {
		/* The lock type: the key's first word. */
		char type[32];
		size_t tl = strcspn(smp.keys[k], " ");
		snprintf(type, sizeof(type), "%.*s", (int)tl, smp.keys[k]);
		json_add_to(by_all, type, key_all[k]);
		if (key_win[k])
			json_add_to(by_win, type, key_win[k]);
	}
	for (int k = 0; k < smp.key_cnt; k++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "wait", smp.keys[k]);
		cJSON_AddNumberToObject(o, "in_window", key_win[k]);
		cJSON_AddNumberToObject(o, "whole_run", key_all[k]);
		cJSON_AddItemToArray(waits, o);
	}
	cJSON_AddStringToObject(j, "layout", r->layout);
	cJSON_AddStringToObject(j, "tokens_format", r->tokens_format);
	cJSON_AddNumberToObject(j, "workers", workers);
	cJSON_AddNumberToObject(j, "rep", (double)rep + 1);
	cJSON_AddStringToObject(j, "group", r->group);
	cJSON_AddStringToObject(j, "application_name", r->app_name);
	cJSON_AddNumberToObject(j, "messages", (double)r->messages);
	cJSON_AddNumberToObject(j, "business_rows", (double)rows);
	cJSON_AddNumberToObject(j, "distinct_ids", (double)distinct);
	cJSON_AddNumberToObject(j, "msgs_per_s", rate);
	cJSON_AddNumberToObject(j, "window_s", t1 > t0 ? (t1 - t0) / 1e9 : 0);
	cJSON_AddNumberToObject(j, "samples", (double)smp.tick_cnt);
	cJSON_AddNumberToObject(j, "samples_in_window", (double)ticks_win);
	cJSON_AddItemToObject(j, "backends_in_window_by_wait_type", types);
	cJSON_AddItemToObject(j, "other_waits_in_window_by_event", evs);
	cJSON_AddNumberToObject(j, "lock_waits_in_window", (double)lock_win);
	cJSON_AddNumberToObject(j, "lock_waits_whole_run", (double)lock_all);
	cJSON_AddItemToObject(j, "lock_waits_in_window_by_type", by_win);
	cJSON_AddItemToObject(j, "lock_waits_whole_run_by_type", by_all);
	cJSON_AddItemToObject(j, "lock_waits", waits);
	progress("tokenbox  %s/%s, %d worker(s): %.0f msg/s; %zu samples "
		 "(%zu in the window), lock waits seen %lld (%lld in the "
		 "window)\n",
		 r->layout, r->tokens_format, workers, rate, smp.tick_cnt,
		 ticks_win, lock_all, lock_win);
	sampler_free(&smp);
	return j;
}

/* Storage: the input is fed in chunks, so that the mock cluster's
 * per-partition log limit (5 MiB) never trims unread records. */
static cJSON *storage_run(const run_t *r)
{
	long chunk = r->messages / 10 > 50000 ? 50000 : r->messages / 10;
	tbx_publisher_t *pub;
	rd_kafka_t *rd;
	child_t c;
	cJSON *j;
	long sent = 0;

	if (chunk < 1)
		chunk = r->messages;
	run_prepare(r);
	pub = publisher(r);
	rd = reader_new(r->out, 0);
	c = contender_start(r, r->messages, 0, 20);
	while (sent < r->messages) {
		long n =
		    r->messages - sent < chunk ? r->messages - sent : chunk;
		long long done = 0;

		publish(pub, r, sent, n, 0);
		sent += n;
		/* Wait until the contender is at most one chunk behind. */
		for (;;) {
			done = 0;
			for (int p = 0; p < BENCH_PARTITIONS; p++) {
				int64_t lo, hi;
				if (rd_kafka_query_watermark_offsets(
					rd, r->out, p, &lo, &hi, 10000) == 0)
					done += hi;
			}
			if (done >= sent - chunk)
				break;
			usleep(200000);
		}
	}
	j = child_finish(&c, NULL);
	rd_kafka_destroy(rd);
	tbx_publisher_destroy(pub);
	progress("storage %-9s %ld records: %.0f rows\n", kinds[r->kind],
		 r->messages, jnum(j, "dedup_rows"));
	return j;
}

/* The largest value of column @p col of a storage run's samples
 * ([processed, rows, bytes, outbox rows]); -1 when none has it. */
static double sample_peak(const cJSON *res, int col)
{
	const cJSON *s,
	    *samples = cJSON_GetObjectItemCaseSensitive(res, "samples");
	double peak = -1;

	cJSON_ArrayForEach(s, samples)
	{
		const cJSON *v = cJSON_GetArrayItem(s, col);
		if (cJSON_IsNumber(v) && v->valuedouble > peak)
			peak = v->valuedouble;
	}
	return peak;
}

/* ---- output ---- */

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * The PostgreSQL worker runs by configuration (layout and worker count):
 * the median rate over the repetitions and its ratio to the first count
 * of the list, the samples and lock waits summed over them, each kind
 * of lock wait with its counts.
 */
static cJSON *pg_workers_summary(cJSON *const *res, long reps)
{
	cJSON *arr = cJSON_CreateArray();
	int cnt = cfg.pg_worker_cnt;

	for (int cf = 0; cf < 2; cf++) {
		double first = 0;

		for (int wi = 0; wi < cnt; wi++) {
			cJSON *o = cJSON_CreateObject(),
			      *runs = cJSON_CreateArray(),
			      *types = cJSON_CreateObject(),
			      *by_win = cJSON_CreateObject(),
			      *by_all = cJSON_CreateObject(),
			      *evs = cJSON_CreateObject(),
			      *waits = cJSON_CreateArray(), *x;
			double rates[20], med, sw = 0, lw = 0, la = 0;
			int n = 0;

			for (long rep = 0; rep < reps && n < 20; rep++) {
				const cJSON *j = res[(rep * 2 + cf) * cnt + wi],
					    *e;
				rates[n++] = jnum(j, "msgs_per_s");
				cJSON_AddItemToArray(
				    runs, cJSON_CreateNumber(rates[n - 1]));
				sw += jnum(j, "samples_in_window");
				lw += jnum(j, "lock_waits_in_window");
				la += jnum(j, "lock_waits_whole_run");
				cJSON_ArrayForEach(
				    e,
				    cJSON_GetObjectItemCaseSensitive(
					j, "backends_in_window_by_wait_type"))
				    json_add_to(types, e->string,
						e->valuedouble);
				cJSON_ArrayForEach(
				    e, cJSON_GetObjectItemCaseSensitive(
					   j, "other_waits_in_window_by_event"))
				    json_add_to(evs, e->string, e->valuedouble);
				cJSON_ArrayForEach(
				    e, cJSON_GetObjectItemCaseSensitive(
					   j, "lock_waits_in_window_by_type"))
				    json_add_to(by_win, e->string,
						e->valuedouble);
				cJSON_ArrayForEach(
				    e, cJSON_GetObjectItemCaseSensitive(
					   j, "lock_waits_whole_run_by_type"))
				    json_add_to(by_all, e->string,
						e->valuedouble);
				cJSON_ArrayForEach(
				    e, cJSON_GetObjectItemCaseSensitive(
					   j, "lock_waits"))
				{
					const char *what =
					    cJSON_GetObjectItemCaseSensitive(
						e, "wait")
						->valuestring;
					cJSON *w = NULL;
					cJSON_ArrayForEach(x, waits) if (
					    strcmp(
						cJSON_GetObjectItem(x, "wait")
						    ->valuestring,
						what) == 0) w = x;
					if (!w) {
						w = cJSON_CreateObject();
						cJSON_AddStringToObject(
						    w, "wait", what);
						cJSON_AddItemToArray(waits, w);
					}
					json_add_to(w, "in_window",
						    jnum(e, "in_window"));
					json_add_to(w, "whole_run",
						    jnum(e, "whole_run"));
				}
			}
			med = median(rates, n);
			if (wi == 0)
				first = med;
			cJSON_AddStringToObject(o, "layout",
						cf ? "batch" : "record");
			cJSON_AddStringToObject(o, "tokens_format",
						cf ? "set" : "message");
			cJSON_AddNumberToObject(o, "workers",
						cfg.pg_workers[wi]);
			cJSON_AddNumberToObject(o, "msgs_per_s", med);
			cJSON_AddItemToObject(o, "runs_msgs_per_s", runs);
			cJSON_AddNumberToObject(o, "x_first_count",
						first > 0 ? med / first : 0);
			cJSON_AddNumberToObject(o, "samples_in_window", sw);
			cJSON_AddItemToObject(
			    o, "backends_in_window_by_wait_type", types);
			cJSON_AddItemToObject(
			    o, "other_waits_in_window_by_event", evs);
			cJSON_AddNumberToObject(o, "lock_waits_in_window", lw);
			cJSON_AddNumberToObject(o, "lock_waits_whole_run", la);
			cJSON_AddItemToObject(o, "lock_waits_in_window_by_type",
					      by_win);
			cJSON_AddItemToObject(o, "lock_waits_whole_run_by_type",
					      by_all);
			cJSON_AddItemToObject(o, "lock_waits", waits);
			cJSON_AddItemToArray(arr, o);
		}
	}
	return arr;
}

/* "N (type n, type n)": the lock waits @p name of @p c, by lock type. */
static void by_type(char *text, size_t size, size_t *len, const cJSON *c,
		    const char *name)
{
	char key[64];
	const cJSON *e;
	int first = 1;

	*len += (size_t)snprintf(text + *len, *len < size ? size - *len : 0,
				 "%.0f", jnum(c, name));
	snprintf(key, sizeof(key), "%s_by_type", name);
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(c, key))
	{
		*len += (size_t)snprintf(
		    text + *len, *len < size ? size - *len : 0, "%s%s %.0f",
		    first ? " (" : ", ", e->string, e->valuedouble);
		first = 0;
	}
	if (!first)
		*len += (size_t)snprintf(text + *len,
					 *len < size ? size - *len : 0, ")");
}

/* The table of the PostgreSQL worker runs, appended to @p text at
 * @p len; @returns the new length (as OUT() counts it). */
static size_t pg_workers_text(char *text, size_t size, size_t len,
			      const cJSON *conf)
{
	const cJSON *c, *e;
	static const char *const types[] = {"CPU", "IO", "LWLock", "Lock"};

#define PUT(...)                                                               \
	len += (size_t)snprintf(text + len, len < size ? size - len : 0,       \
				__VA_ARGS__)
	PUT("\ntokenbox worker processes of one group on PostgreSQL (%ld "
	    "records a run, %ld run(s) each, interleaved; medians): the "
	    "run's backends sampled every %ld ms, counted in the rate's "
	    "window\n\n",
	    cfg.messages, cfg.reps, cfg.lock_sample_ms);
	PUT("| layout / tokens | workers | msg/s | x %d | samples | "
	    "backends seen: CPU / IO / LWLock / Lock / other | lock waits | "
	    "lock waits, whole run |\n",
	    cfg.pg_workers[0]);
	PUT("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	cJSON_ArrayForEach(c, conf)
	{
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(
		    c, "backends_in_window_by_wait_type");
		double other = 0;

		PUT("| %s / %s | %.0f | %.0f | %.2f | %.0f | ",
		    cJSON_GetObjectItem(c, "layout")->valuestring,
		    cJSON_GetObjectItem(c, "tokens_format")->valuestring,
		    jnum(c, "workers"), jnum(c, "msgs_per_s"),
		    jnum(c, "x_first_count"), jnum(c, "samples_in_window"));
		for (size_t i = 0; i < 4; i++)
			PUT("%.0f / ", jnum(t, types[i]));
		cJSON_ArrayForEach(e, t)
		{
			size_t i = 0;
			while (i < 4 && strcmp(e->string, types[i]))
				i++;
			if (i == 4)
				other += e->valuedouble;
		}
		PUT("%.0f | ", other);
		by_type(text, size, &len, c, "lock_waits_in_window");
		PUT(" | ");
		by_type(text, size, &len, c, "lock_waits_whole_run");
		PUT(" |\n");
	}
	PUT("\nother waits in the window (backends seen, type:wait_event):\n");
	cJSON_ArrayForEach(c, conf)
	{
		int any = 0;

		PUT("  %s / %s, %.0f worker(s):",
		    cJSON_GetObjectItem(c, "layout")->valuestring,
		    cJSON_GetObjectItem(c, "tokens_format")->valuestring,
		    jnum(c, "workers"));
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(
					  c, "other_waits_in_window_by_event"))
		{
			PUT("%s %s %.0f", any ? "," : "", e->string,
			    e->valuedouble);
			any = 1;
		}
		PUT("%s\n", any ? "" : " none");
	}
	cJSON_ArrayForEach(c, conf)
	{
		const cJSON *w =
		    cJSON_GetObjectItemCaseSensitive(c, "lock_waits");

		if (!cJSON_GetArraySize(w))
			continue;
		PUT("\nlock waits, %s / %s, %.0f worker(s) (in the window, "
		    "whole run: kind | holder | statement):\n",
		    cJSON_GetObjectItem(c, "layout")->valuestring,
		    cJSON_GetObjectItem(c, "tokens_format")->valuestring,
		    jnum(c, "workers"));
		cJSON_ArrayForEach(e, w)
		    PUT("  %.0f, %.0f: %s\n", jnum(e, "in_window"),
			jnum(e, "whole_run"),
			cJSON_GetObjectItem(e, "wait")->valuestring);
	}
#undef PUT
	return len;
}

static void write_file(const char *name, const char *text)
{
	char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", cfg.out, name);
	if (!(f = fopen(path, "w")) || fputs(text, f) < 0 || fclose(f))
		fail("cannot write %s: %s", path, strerror(errno));
}

static void rm_rf(const char *dir)
{
	char *argv[] = {"/bin/rm", "-rf", (char *)dir, NULL};
	pid_t pid = spawn(argv, NULL);
	int status;

	waitpid(pid, &status, 0);
}

/* --store-url: connects once (the string validated by libpq, the
 * server reachable), notes the server's version and durability, and
 * hands the string to the contenders in their environment. */
static int pg_check(void)
{
	tbx__pg_t *pg;
	char err[512];
	PGresult *res;

	tbx__pg_redact(cfg.store_url, cfg.store_where, sizeof(cfg.store_where));
	if (tbx__pg_connect(cfg.store_url, &pg, err, sizeof(err))) {
		fprintf(stderr, "tbx_bench: --store-url: %s\n", err);
		return 2;
	}
	res = PQexec(pg->conn, "SELECT current_setting('server_version'), "
			       "current_setting('fsync'), "
			       "current_setting('synchronous_commit')");
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		snprintf(cfg.pg_server, sizeof(cfg.pg_server),
			 "PostgreSQL %s, fsync=%s", PQgetvalue(res, 0, 0),
			 PQgetvalue(res, 0, 1));
	PQclear(res);
	tbx__pg_unref(pg);
	if (setenv("TBX_BENCH_STORE_URL", cfg.store_url, 1)) {
		fprintf(stderr, "tbx_bench: setenv: %s\n", strerror(errno));
		return 2;
	}
	return 0;
}

/* Drops the runs' schemas (--store-url, without --keep). */
static void pg_drop_schemas(void)
{
	tbx__pg_t *pg;
	char err[512], sql[256];

	if (tbx__pg_connect(cfg.store_url, &pg, err, sizeof(err))) {
		progress("the schemas bench_%ld_* stay: %s\n", (long)getpid(),
			 err);
		return;
	}
	for (int n = 1; n <= topic_seq; n++) {
		snprintf(sql, sizeof(sql),
			 "DROP SCHEMA IF EXISTS \"bench_%ld_%d\" CASCADE; "
			 "DROP SCHEMA IF EXISTS \"bench_%ld_%d_t\" CASCADE",
			 (long)getpid(), n, (long)getpid(), n);
		if (tbx__pg_exec(pg, sql))
			progress("drop schema bench_%ld_%d: %s\n",
				 (long)getpid(), n, tbx__pg_errmsg(pg));
	}
	tbx__pg_unref(pg);
}

static int parse_args(int argc, char **argv)
{
	long v;
	int rc, set_msgs = 0, set_reps = 0, set_lat = 0, set_sto = 0;
	int set_mask = 0, set_sweeps = 0, set_sample = 0;
	char *slash;

	cfg.reps = 3;
	cfg.messages = 200000;
	cfg.lat_messages = 5000;
	cfg.lat_rate = 1000;
	cfg.storage_messages = 1000000;
	cfg.sweeps = 1;
	cfg.downstream = 1;
	cfg.layout = "record";
	cfg.tokens_format = "message";
	cfg.mask = SQLITE_KINDS;
	cfg.lock_sample_ms = 5;
	if (!realpath("/proc/self/exe", cfg.self))
		return usage_error("cannot find this program: %s%s",
				   strerror(errno), "");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i],
			   *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(usage_text, stdout);
			return -1;
		} else if (strcmp(a, "--quick") == 0) {
			cfg.quick = 1;
		} else if (strcmp(a, "--json") == 0) {
			cfg.json = 1;
		} else if (strcmp(a, "--keep") == 0) {
			cfg.keep = 1;
		} else if (strcmp(a, "--bootstrap-servers") == 0) {
			if (!val || !*val || strlen(val) >= sizeof(bootstraps))
				return usage_error("--bootstrap-servers: want "
						   "host:port[,host:port...]%s",
						   "");
			cfg.bootstrap = val;
			snprintf(cfg.prefix, sizeof(cfg.prefix), "bench-%ld-",
				 (long)getpid());
			i++;
		} else if (strcmp(a, "--store-url") == 0) {
			if (!val || !*val || strlen(val) > 4096)
				return usage_error("--store-url: want a "
						   "PostgreSQL URL or "
						   "connection string%s",
						   "");
			cfg.store_url = val;
			i++;
		} else if (strcmp(a, "--contenders") == 0) {
			char list[256], *tok, *save = NULL;
			if (!val || !*val || strlen(val) >= sizeof(list))
				return usage_error("%s needs a list", a);
			snprintf(list, sizeof(list), "%s", val);
			cfg.mask = 0;
			set_mask = 1;
			for (tok = strtok_r(list, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				int k = 0;
				while (k < NKINDS && strcmp(tok, kinds[k]))
					k++;
				if (k == NKINDS)
					return usage_error(
					    "--contenders: unknown contender "
					    "'%s'",
					    tok);
				cfg.mask |= 1u << k;
			}
			i++;
		} else if (strcmp(a, "--messages") == 0) {
			if ((rc = parse_num(a, val, 1000, 5000000,
					    &cfg.messages)))
				return rc;
			set_msgs = 1;
			i++;
		} else if (strcmp(a, "--reps") == 0) {
			if ((rc = parse_num(a, val, 1, 20, &cfg.reps)))
				return rc;
			set_reps = 1;
			i++;
		} else if (strcmp(a, "--latency-messages") == 0) {
			if ((rc = parse_num(a, val, 0, 1000000,
					    &cfg.lat_messages)))
				return rc;
			set_lat = 1;
			i++;
		} else if (strcmp(a, "--latency-rate") == 0) {
			if ((rc = parse_num(a, val, 1, 100000, &cfg.lat_rate)))
				return rc;
			i++;
		} else if (strcmp(a, "--storage-messages") == 0) {
			if ((rc = parse_num(a, val, 0, 100000000,
					    &cfg.storage_messages)))
				return rc;
			set_sto = 1;
			i++;
		} else if (strcmp(a, "--downstream") == 0) {
			if ((rc = parse_num(a, val, 0, 1, &cfg.downstream)))
				return rc;
			i++;
		} else if (strcmp(a, "--token-store") == 0) {
			if (!val ||
			    (strcmp(val, "single") && strcmp(val, "separate")))
				return usage_error("--token-store: expected "
						   "single or separate, not "
						   "'%s'",
						   val ? val : "");
			cfg.separate_tokens = strcmp(val, "separate") == 0;
			i++;
		} else if (strcmp(a, "--layout") == 0 ||
			   strcmp(a, "--tokens-format") == 0) {
			int lay = a[2] == 'l';
			const char *x = lay ? "record" : "message",
				   *y = lay ? "batch" : "set";
			if (!val || (strcmp(val, x) && strcmp(val, y)))
				return usage_error("%s: expected %s or %s, "
						   "not '%s'",
						   a, x, y, val ? val : "");
			*(lay ? &cfg.layout : &cfg.tokens_format) =
			    strcmp(val, x) ? y : x;
			i++;
		} else if (strcmp(a, "--pg-workers") == 0) {
			char list[64], *tok, *save = NULL;
			if (!val || !*val || strlen(val) >= sizeof(list))
				return usage_error("%s needs a list of worker "
						   "counts, e.g. 1,3",
						   a);
			snprintf(list, sizeof(list), "%s", val);
			cfg.pg_worker_cnt = 0;
			for (tok = strtok_r(list, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				long long n;
				if (tbx_cli_to_int(tok, 1, 8, &n))
					return usage_error(
					    "--pg-workers: '%s' is not a "
					    "worker count in 1..8",
					    tok);
				for (int k = 0; k < cfg.pg_worker_cnt; k++)
					if (cfg.pg_workers[k] == (int)n)
						return usage_error(
						    "--pg-workers: %lld twice",
						    n);
				if (cfg.pg_worker_cnt == 4)
					return usage_error("--pg-workers: at "
							   "most 4 counts%s",
							   "");
				cfg.pg_workers[cfg.pg_worker_cnt++] = (int)n;
			}
			if (!cfg.pg_worker_cnt)
				return usage_error("%s needs a list of worker "
						   "counts, e.g. 1,3",
						   a);
			i++;
		} else if (strcmp(a, "--lock-sample-ms") == 0) {
			if ((rc = parse_num(a, val, 1, 1000,
					    &cfg.lock_sample_ms)))
				return rc;
			set_sample = 1;
			i++;
		} else if (strcmp(a, "--sweeps") == 0) {
			if ((rc = parse_num(a, val, 0, 1, &cfg.sweeps)))
				return rc;
			set_sweeps = 1;
			i++;
		} else if (strcmp(a, "--out") == 0 ||
			   strcmp(a, "--tokenbox") == 0) {
			char *dst = a[2] == 'o' ? cfg.out : cfg.tokenbox;
			if (!val || !*val)
				return usage_error("%s needs a value%s", a, "");
			if (strlen(val) >= PATH_MAX - 64)
				return usage_error("%s: path too long%s", a,
						   "");
			snprintf(dst, PATH_MAX, "%s", val);
			i++;
		} else {
			return usage_error("unknown argument '%s'%s", a, "");
		}
	}
	if (cfg.pg_worker_cnt && !cfg.store_url)
		return usage_error("--pg-workers: only with --store-url (on "
				   "SQLite, --sweeps runs 1, 2 and 4 "
				   "workers)%s",
				   "");
	if (set_sample && !cfg.pg_worker_cnt)
		return usage_error("--lock-sample-ms: only with "
				   "--pg-workers%s",
				   "");
	if (!cfg.store_url && (cfg.mask & ~SQLITE_KINDS))
		return usage_error("--contenders: inbox-batched runs on "
				   "PostgreSQL only (--store-url)%s",
				   "");
	if (cfg.store_url) {
		if (set_sweeps && cfg.sweeps)
			return usage_error("--sweeps 1: not with --store-url "
					   "(the sweeps run on SQLite)%s",
					   "");
		if (set_sto && cfg.storage_messages)
			return usage_error("--storage-messages: not with "
					   "--store-url (the storage phase "
					   "runs on SQLite)%s",
					   "");
		if (cfg.separate_tokens)
			return usage_error("--token-store separate: not with "
					   "--store-url (tokenbox's token "
					   "store is a schema of the same "
					   "database)%s",
					   "");
		cfg.sweeps = 0;
		cfg.storage_messages = 0;
		set_sto = 1;
		if (!set_mask)
			cfg.mask = 1u << PLAIN | 1u << INBOX |
				   1u << INBOX_BATCHED | 1u << TOKENBOX;
		if ((rc = pg_check()))
			return rc;
	}
	if (cfg.quick) {
		if (!set_msgs)
			cfg.messages = 5000;
		if (!set_reps)
			cfg.reps = 1;
		if (!set_lat)
			cfg.lat_messages = 500;
		if (!set_sto)
			cfg.storage_messages = 10000;
	}
	(void)v;
	if (!cfg.tokenbox[0]) {
		snprintf(cfg.tokenbox, sizeof(cfg.tokenbox), "%s", cfg.self);
		if ((slash = strrchr(cfg.tokenbox, '/')))
			*slash = '\0';
		if ((slash = strrchr(cfg.tokenbox, '/')))
			*slash = '\0';
		if (strlen(cfg.tokenbox) + 10 < sizeof(cfg.tokenbox))
			memcpy(cfg.tokenbox + strlen(cfg.tokenbox), "/tokenbox",
			       10);
	}
	if (access(cfg.tokenbox, X_OK) != 0)
		return usage_error("--tokenbox: cannot run '%s': %s",
				   cfg.tokenbox, strerror(errno));
	/* Checked before anything starts (spawn_wrapped() runs it). */
	const char *wrap = getenv("TBX_BENCH_CONTENDER_WRAP");
	if (wrap && *wrap) {
		char cmd[PATH_MAX];
		size_t len = strcspn(wrap + strspn(wrap, " "), " ");

		snprintf(cmd, sizeof(cmd), "%.*s", (int)len,
			 wrap + strspn(wrap, " "));
		if (cmd[0] != '/' || access(cmd, X_OK) != 0)
			return usage_error(
			    "TBX_BENCH_CONTENDER_WRAP: cannot run "
			    "'%s' (an absolute path, run without "
			    "a PATH search)",
			    cmd);
	}
	if (!cfg.out[0])
		snprintf(cfg.out, sizeof(cfg.out), "%s/bench/results",
			 TBX_BENCH_SOURCE_DIR);
	if (mkdir(cfg.out, 0755) && errno != EEXIST)
		return usage_error("--out: cannot create '%s': %s", cfg.out,
				   strerror(errno));
	return 0;
}

int bench_driver_main(int argc, char **argv)
{
	int rc = parse_args(argc, argv);
	char tmpl[] = "/tmp/tbx_bench.XXXXXX", date[64], text[32768];
	long reps, nb, sweep_msgs[4];
	static const int worker_cnts[3] = {1, 2, 4};
	static const long batch_sizes[4] = {1, 10, 100, 1000};
	run_t *tp_runs, lat_runs[NKINDS], w_runs[3], b_runs[4], s_runs[2];
	tp_t *tps;
	double lat50[NKINDS] = {0}, lat99[NKINDS] = {0}, w_rate[3] = {0},
	       b_rate[4] = {0}, med[NKINDS];
	cJSON *s_res[2] = {NULL, NULL};
	long long tokens_left = 0;
	time_t now = time(NULL);

	if (rc)
		return rc < 0 ? 0 : rc;
	t_start = bench_now_ns();
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	if (!mkdtemp(tmpl))
		fail("mkdtemp: %s", strerror(errno));
	snprintf(cfg.work, sizeof(cfg.work), "%s", tmpl);
	strftime(date, sizeof(date), "%Y-%m-%d %H:%M %Z", localtime(&now));
	reps = cfg.reps;

	/* Plan every run, so the cluster creates every topic at start. */
	argv_push(cfg.tokenbox);
	argv_push("mock-cluster");
	tp_runs = calloc((size_t)(reps * NKINDS), sizeof(*tp_runs));
	tps = calloc((size_t)(reps * NKINDS), sizeof(*tps));
	if (!tp_runs || !tps)
		fail("out of memory");
	for (long i = 0; i < reps; i++)
		for (int k = 0; k < NKINDS; k++)
			if (HAS(k))
				run_plan(&tp_runs[i * NKINDS + k], k,
					 cfg.messages, BENCH_BATCH_MAX, "tp");
	if (cfg.lat_messages)
		for (int k = 0; k < NKINDS; k++)
			if (HAS(k))
				run_plan(&lat_runs[k], k, cfg.lat_messages,
					 BENCH_BATCH_MAX, "lat");
	/* PostgreSQL workers: per repetition, record then batch, each
	 * worker count in the order given. */
	long pgw_n = cfg.pg_worker_cnt ? reps * 2 * cfg.pg_worker_cnt : 0;
	run_t *pgw_runs = calloc((size_t)pgw_n + 1, sizeof(*pgw_runs));
	cJSON **pgw_res = calloc((size_t)pgw_n + 1, sizeof(*pgw_res));
	if (!pgw_runs || !pgw_res)
		fail("out of memory");
	for (long i = 0; i < pgw_n; i++) {
		run_t *r = &pgw_runs[i];
		int batch = (int)(i / cfg.pg_worker_cnt % 2);

		run_plan(r, TOKENBOX, cfg.messages, BENCH_BATCH_MAX, "pgw");
		r->layout = batch ? "batch" : "record";
		r->tokens_format = batch ? "set" : "message";
		snprintf(r->app_name, sizeof(r->app_name), "tbx_bench-%ld-%d",
			 (long)getpid(), topic_seq);
	}
	if (!HAS(TOKENBOX))
		cfg.sweeps = 0;
	if (!HAS(TOKENBOX) || !HAS(INBOX))
		cfg.storage_messages = 0;
	nb = cfg.sweeps ? 4 : 0;
	for (int i = 0; i < 3 && cfg.sweeps; i++)
		run_plan(&w_runs[i], TOKENBOX, cfg.messages, BENCH_BATCH_MAX,
			 "workers");
	for (int i = 0; i < nb; i++) {
		/* Batch size 1 costs several commits per record: fewer
		 * records keep the sweep short. */
		sweep_msgs[i] = batch_sizes[i] * 2000;
		if (sweep_msgs[i] > cfg.messages)
			sweep_msgs[i] = cfg.messages;
		/* The first batch is not timed: leave some after it. */
		if (sweep_msgs[i] < 3 * batch_sizes[i])
			sweep_msgs[i] = 3 * batch_sizes[i];
		run_plan(&b_runs[i], TOKENBOX, sweep_msgs[i], batch_sizes[i],
			 "batch");
	}
	if (cfg.storage_messages)
		for (int i = 0; i < 2; i++) {
			run_plan(&s_runs[i], i ? INBOX : TOKENBOX,
				 cfg.storage_messages, BENCH_BATCH_MAX,
				 "storage");
			s_runs[i].downstream = 0;
		}
	cluster_start();
	progress("%s %s, work directory %s\n",
		 cfg.bootstrap ? "Apache Kafka at" : "mock cluster", bootstraps,
		 cfg.work);

	/* Interleaved: plain inbox kafka-txn tokenbox, plain inbox ... */
	for (long i = 0; i < reps * NKINDS; i++)
		if (HAS(i % NKINDS))
			tps[i] = throughput_run(&tp_runs[i]);
	if (cfg.lat_messages)
		for (int k = 0; k < NKINDS; k++)
			if (HAS(k))
				latency_run(&lat_runs[k], &lat50[k], &lat99[k]);
	for (long i = 0; i < pgw_n; i++)
		pgw_res[i] = pg_workers_run(
		    &pgw_runs[i], cfg.pg_workers[i % cfg.pg_worker_cnt],
		    i / (2 * cfg.pg_worker_cnt));
	for (int i = 0; i < 3 && cfg.sweeps; i++)
		w_rate[i] = workers_run(&w_runs[i], worker_cnts[i]);
	for (int i = 0; i < nb; i++)
		b_rate[i] = throughput_run(&b_runs[i]).rate;
	if (cfg.storage_messages)
		for (int i = 0; i < 2; i++)
			s_res[i] = storage_run(&s_runs[i]);
	if (cluster_pid > 0) {
		kill(cluster_pid, SIGTERM);
		waitpid(cluster_pid, NULL, 0);
		cluster_pid = 0;
	}

	/* Figures per contender: medians over the repetitions. */
	cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
	tp_t agg[NKINDS];
	for (int k = 0; k < NKINDS; k++) {
		double v[6][64];
		int n = 0;
		cJSON *c = cJSON_CreateObject(), *runs = cJSON_CreateArray();

		memset(&agg[k], 0, sizeof(agg[k]));
		med[k] = 0;
		if (!HAS(k)) {
			cJSON_Delete(c);
			cJSON_Delete(runs);
			continue;
		}
		for (long i = 0; i < reps && n < 64; i++, n++) {
			tp_t *t = &tps[i * NKINDS + k];
			v[0][n] = t->rate;
			v[1][n] = t->txn_per_k;
			v[2][n] = t->sync_per_k;
			v[3][n] = t->rss_mb;
			v[4][n] = t->rt_per_rec;
			v[5][n] = t->commits_per_k;
			cJSON_AddItemToArray(runs, cJSON_CreateNumber(t->rate));
			if (k == TOKENBOX)
				tokens_left += t->dedup_rows;
			agg[k].dedup_rows = t->dedup_rows;
			agg[k].downstream = t->downstream;
			agg[k].store_bytes = t->store_bytes;
		}
		agg[k].rate = med[k] = median(v[0], n);
		agg[k].txn_per_k = median(v[1], n);
		agg[k].sync_per_k = median(v[2], n);
		agg[k].rss_mb = median(v[3], n);
		agg[k].rt_per_rec = median(v[4], n);
		agg[k].commits_per_k = median(v[5], n);
		cJSON_AddStringToObject(c, "name", kinds[k]);
		cJSON_AddNumberToObject(c, "msgs_per_s", agg[k].rate);
		cJSON_AddItemToObject(c, "runs_msgs_per_s", runs);
		if (cfg.lat_messages) {
			cJSON_AddNumberToObject(c, "p50_ms", lat50[k]);
			cJSON_AddNumberToObject(c, "p99_ms", lat99[k]);
		}
		if (cfg.store_url) {
			cJSON_AddNumberToObject(c, "round_trips_per_record",
						agg[k].rt_per_rec);
			cJSON_AddNumberToObject(c, "commits_per_1k",
						agg[k].commits_per_k);
		} else {
			cJSON_AddNumberToObject(c, "write_txns_per_1k",
						agg[k].txn_per_k);
			cJSON_AddNumberToObject(c, "fsyncs_per_1k",
						agg[k].sync_per_k);
		}
		cJSON_AddNumberToObject(c, "peak_rss_mb", agg[k].rss_mb);
		if (agg[k].dedup_rows >= 0)
			cJSON_AddNumberToObject(c, "dedup_rows_left",
						(double)agg[k].dedup_rows);
		else
			cJSON_AddNullToObject(c, "dedup_rows_left");
		if (k == TOKENBOX)
			cJSON_AddNumberToObject(c, "downstream_tokens",
						(double)agg[k].downstream);
		cJSON_AddNumberToObject(c, "store_bytes",
					(double)agg[k].store_bytes);
		cJSON_AddItemToArray(arr, c);
	}
	cJSON_AddStringToObject(root, "date", date);
	{
		char host[256] = "";
		gethostname(host, sizeof(host) - 1);
		cJSON_AddStringToObject(root, "host", host);
		cJSON_AddNumberToObject(root, "cpus",
					(double)sysconf(_SC_NPROCESSORS_ONLN));
		double load[3] = {0};
		if (getloadavg(load, 3) == 3)
			cJSON_AddNumberToObject(root, "loadavg_1m_at_end",
						load[0]);
	}
	cJSON_AddStringToObject(root, "tokenbox", tbx_version());
	cJSON_AddStringToObject(root, "librdkafka", rd_kafka_version_str());
	cJSON_AddStringToObject(root, "cluster",
				cfg.bootstrap ? cfg.bootstrap : "mock");
	if (cfg.store_url) {
		cJSON_AddStringToObject(root, "store", cfg.store_where);
		cJSON_AddStringToObject(root, "store_server", cfg.pg_server);
	} else {
		cJSON_AddStringToObject(root, "store", "sqlite");
	}
	cJSON_AddNumberToObject(root, "messages", (double)cfg.messages);
	cJSON_AddNumberToObject(root, "reps", (double)reps);
	cJSON_AddNumberToObject(root, "partitions", BENCH_PARTITIONS);
	cJSON_AddNumberToObject(root, "payload_bytes", BENCH_PAYLOAD_LEN);
	cJSON_AddStringToObject(
	    root, "count_method",
	    cfg.store_url
		? "libpq calls of the contender process (linked with --wrap): "
		  "round trips = PQexec, PQexecParams, PQexecPrepared, "
		  "PQprepare and PQpipelineSync calls, commits = those that "
		  "send COMMIT"
		: "in-process counting SQLite VFS: fsyncs = xSync calls, write "
		  "transactions = WAL write-lock acquisitions");
	cJSON_AddStringToObject(
	    root, "latency_method",
	    "records published live at latency_rate by tbx_publisher (stamped "
	    "before its flush); latency = an in-driver consumer's poll "
	    "returning the output - the stamp");
	cJSON_AddNumberToObject(root, "latency_messages",
				(double)cfg.lat_messages);
	cJSON_AddNumberToObject(root, "latency_rate", (double)cfg.lat_rate);
	cJSON_AddItemToObject(root, "contenders", arr);
	if (cfg.sweeps) {
		cJSON *w = cJSON_CreateArray(), *b = cJSON_CreateArray();
		for (int i = 0; i < 3; i++) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "workers", worker_cnts[i]);
			cJSON_AddNumberToObject(o, "messages",
						(double)cfg.messages);
			cJSON_AddNumberToObject(o, "msgs_per_s", w_rate[i]);
			cJSON_AddItemToArray(w, o);
		}
		for (int i = 0; i < 4; i++) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "batch",
						(double)batch_sizes[i]);
			cJSON_AddNumberToObject(o, "messages",
						(double)sweep_msgs[i]);
			cJSON_AddNumberToObject(o, "msgs_per_s", b_rate[i]);
			cJSON_AddItemToArray(b, o);
		}
		cJSON_AddItemToObject(root, "tokenbox_workers", w);
		cJSON_AddItemToObject(root, "tokenbox_batch_sizes", b);
	}
	if (cfg.storage_messages) {
		cJSON *s = cJSON_CreateArray();
		for (int i = 0; i < 2; i++) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "name",
						kinds[s_runs[i].kind]);
			cJSON_AddNumberToObject(o, "messages",
						(double)cfg.storage_messages);
			cJSON_AddNumberToObject(o, "dedup_rows",
						jnum(s_res[i], "dedup_rows"));
			cJSON_AddNumberToObject(o, "dedup_rows_peak",
						sample_peak(s_res[i], 1));
			if (s_runs[i].kind == TOKENBOX) {
				cJSON_AddNumberToObject(
				    o, "outbox_rows",
				    jnum(s_res[i], "outbox_rows"));
				cJSON_AddNumberToObject(
				    o, "outbox_rows_peak",
				    sample_peak(s_res[i], 3));
			}
			cJSON_AddNumberToObject(o, "store_bytes",
						jnum(s_res[i], "store_bytes"));
			cJSON_AddItemToObject(
			    o, "samples_processed_rows_bytes_outbox",
			    cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(
						s_res[i], "samples"),
					    1));
			cJSON_AddItemToArray(s, o);
		}
		cJSON_AddItemToObject(root, "storage", s);
	}
	cJSON *pgw_conf = pgw_n ? pg_workers_summary(pgw_res, reps) : NULL;
	if (pgw_conf) {
		cJSON *o = cJSON_CreateObject(), *runs = cJSON_CreateArray();
		cJSON_AddNumberToObject(o, "messages", (double)cfg.messages);
		cJSON_AddNumberToObject(o, "sample_ms",
					(double)cfg.lock_sample_ms);
		cJSON_AddStringToObject(
		    o, "method",
		    "the driver samples pg_stat_activity every sample_ms for "
		    "the run's backends (application_name) running a "
		    "statement, and pg_locks for those waiting on a "
		    "heavyweight lock; a lock wait is one backend seen "
		    "waiting in one sample; the window is the rate's");
		cJSON_AddItemToObject(o, "configurations", pgw_conf);
		for (long i = 0; i < pgw_n; i++) {
			cJSON_AddItemToArray(runs, pgw_res[i]);
			pgw_res[i] = NULL;
		}
		cJSON_AddItemToObject(o, "runs", runs);
		cJSON_AddItemToObject(root, "tokenbox_pg_workers", o);
	}
	char summary[512], ratio[3][16];
	for (int k = 0; k < 3; k++) {
		if (med[k] > 0 && HAS(TOKENBOX))
			snprintf(ratio[k], sizeof(ratio[k]), "%.2f",
				 med[TOKENBOX] / med[k]);
		else
			snprintf(ratio[k], sizeof(ratio[k]), "n/a");
	}
	if (HAS(TOKENBOX))
		snprintf(summary, sizeof(summary),
			 "bench: tokenbox/plain=%s tokenbox/inbox=%s "
			 "tokenbox/kafka-txn=%s tokens_left=%lld",
			 ratio[PLAIN], ratio[INBOX], ratio[TXN], tokens_left);
	else
		snprintf(summary, sizeof(summary),
			 "bench: tokenbox/plain=n/a tokenbox/inbox=n/a "
			 "tokenbox/kafka-txn=n/a tokens_left=n/a");
	if (HAS(INBOX_BATCHED)) {
		size_t sl = strlen(summary);
		if (med[INBOX_BATCHED] > 0 && HAS(TOKENBOX))
			snprintf(summary + sl, sizeof(summary) - sl,
				 " tokenbox/inbox-batched=%.2f",
				 med[TOKENBOX] / med[INBOX_BATCHED]);
		else
			snprintf(summary + sl, sizeof(summary) - sl,
				 " tokenbox/inbox-batched=n/a");
	}
	cJSON_AddStringToObject(root, "summary", summary);

	/* The table. */
	size_t len = 0;
#define OUT(...)                                                               \
	len += (size_t)snprintf(text + len,                                    \
				len < sizeof(text) ? sizeof(text) - len : 0,   \
				__VA_ARGS__)
	if (cfg.bootstrap)
		OUT("tokenbox %s bench, %s, %ld CPUs; librdkafka %s, Apache "
		    "Kafka at %s\n",
		    tbx_version(), date, sysconf(_SC_NPROCESSORS_ONLN),
		    rd_kafka_version_str(), cfg.bootstrap);
	else
		OUT("tokenbox %s bench, %s, %ld CPUs; librdkafka %s, `tokenbox "
		    "mock-cluster`\n",
		    tbx_version(), date, sysconf(_SC_NPROCESSORS_ONLN),
		    rd_kafka_version_str());
	if (cfg.store_url)
		OUT("workload: %ld records per run, %d partitions, %d-byte "
		    "payloads, batches of up to %d records / %d ms; every "
		    "store "
		    "on %s (%s), a schema per run, synchronous_commit=on; %ld "
		    "interleaved run(s), medians\n\n",
		    cfg.messages, BENCH_PARTITIONS, BENCH_PAYLOAD_LEN,
		    BENCH_BATCH_MAX, BENCH_BATCH_MAX_MS, cfg.store_where,
		    cfg.pg_server, reps);
	else
		OUT("workload: %ld records per run, %d partitions, %d-byte "
		    "payloads, batches of up to %d records / %d ms; every "
		    "store "
		    "WAL + synchronous=FULL; %ld interleaved run(s), "
		    "medians\n\n",
		    cfg.messages, BENCH_PARTITIONS, BENCH_PAYLOAD_LEN,
		    BENCH_BATCH_MAX, BENCH_BATCH_MAX_MS, reps);
	if (cfg.store_url)
		OUT("| contender | msg/s | p50 ms | p99 ms | round "
		    "trips/record "
		    "| commits/1k | peak RSS MB | dedup rows left |\n");
	else
		OUT("| contender | msg/s | p50 ms | p99 ms | write txns/1k | "
		    "fsyncs/1k | peak RSS MB | dedup rows left |\n");
	OUT("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	for (int k = 0; k < NKINDS; k++) {
		char rows[32] = "-", p50[16] = "-", p99[16] = "-";
		if (!HAS(k))
			continue;
		if (agg[k].dedup_rows >= 0)
			snprintf(rows, sizeof(rows), "%lld", agg[k].dedup_rows);
		if (cfg.lat_messages) {
			snprintf(p50, sizeof(p50), "%.1f", lat50[k]);
			snprintf(p99, sizeof(p99), "%.1f", lat99[k]);
		}
		if (cfg.store_url)
			OUT("| %s%s | %.0f | %s | %s | %.3f | %.1f | %.1f | %s "
			    "|\n",
			    kinds[k], k == TXN && !cfg.bootstrap ? " (*)" : "",
			    agg[k].rate, p50, p99, agg[k].rt_per_rec,
			    agg[k].commits_per_k, agg[k].rss_mb, rows);
		else
			OUT("| %s%s | %.0f | %s | %s | %.1f | %.1f | %.1f | %s "
			    "|\n",
			    kinds[k], k == TXN && !cfg.bootstrap ? " (*)" : "",
			    agg[k].rate, p50, p99, agg[k].txn_per_k,
			    agg[k].sync_per_k, agg[k].rss_mb, rows);
	}
	if (HAS(TXN) && !cfg.bootstrap)
		OUT("\n(*) librdkafka's mock cluster writes no transaction "
		    "markers and "
		    "drops TxnOffsetCommit: kafka-txn's row is a lower bound "
		    "on its "
		    "cost.\n");
	if (cfg.store_url)
		OUT("round trips and commits: the contender process's libpq "
		    "calls that wait for the server (PQexec, PQexecParams, "
		    "PQexecPrepared, PQprepare, PQpipelineSync), counted from "
		    "its first poll.\n");
	else
		OUT("fsyncs and write transactions: counted by an in-process "
		    "SQLite VFS (xSync calls; WAL write-lock acquisitions).\n");
	if (cfg.lat_messages)
		OUT("latency: %ld records at %ld/s per contender, publish call "
		    "-> output read back by a consumer.\n",
		    cfg.lat_messages, cfg.lat_rate);
	if (cfg.sweeps) {
		OUT("\ntokenbox worker processes (%ld records):", cfg.messages);
		for (int i = 0; i < 3; i++)
			OUT(" %d: %.0f msg/s%s", worker_cnts[i], w_rate[i],
			    i < 2 ? "," : "\n");
		OUT("tokenbox batch.max.messages:");
		for (int i = 0; i < 4; i++)
			OUT(" %ld: %.0f msg/s (%ld records)%s", batch_sizes[i],
			    b_rate[i], sweep_msgs[i], i < 3 ? "," : "\n");
	}
	if (pgw_conf)
		len = pg_workers_text(text, sizeof(text), len, pgw_conf);
	if (cfg.storage_messages) {
		OUT("\ndeduplication storage after %ld records:",
		    cfg.storage_messages);
		for (int i = 0; i < 2; i++)
			OUT(" %s %.0f rows (stores %.1f MB)%s",
			    kinds[s_runs[i].kind], jnum(s_res[i], "dedup_rows"),
			    jnum(s_res[i], "store_bytes") / 1e6,
			    i ? "\n" : ",");
		for (int i = 0; i < 2; i++) {
			if (s_runs[i].kind != TOKENBOX)
				continue;
			OUT("tokenbox while running: at most %.0f token rows "
			    "and %.0f outbox rows at a sample; outbox rows "
			    "left %.0f\n",
			    sample_peak(s_res[i], 1), sample_peak(s_res[i], 3),
			    jnum(s_res[i], "outbox_rows"));
		}
	}
#undef OUT
	/* Plot data (bench/plot.gp). */
	{
		char dat[2048];
		size_t dl = 0;
		for (int k = 0; k < NKINDS; k++)
			if (HAS(k))
				dl += (size_t)snprintf(
				    dat + dl, sizeof(dat) - dl, "%s %.1f\n",
				    kinds[k], med[k]);
		write_file("throughput.dat", dat);
		for (int i = 0; i < 2 && cfg.storage_messages; i++) {
			cJSON *smp, *s = cJSON_GetObjectItemCaseSensitive(
					s_res[i], "samples");
			char *buf = malloc(65536), name[64];
			dl = (size_t)snprintf(buf, 65536, "0 0\n");
			cJSON_ArrayForEach(smp, s)
			{
				dl += (size_t)snprintf(
				    buf + dl, 65536 - dl, "%.0f %.0f\n",
				    cJSON_GetArrayItem(smp, 0)->valuedouble,
				    cJSON_GetArrayItem(smp, 1)->valuedouble);
			}
			snprintf(name, sizeof(name), "storage-%s.dat",
				 kinds[s_runs[i].kind]);
			write_file(name, buf);
			free(buf);
		}
	}
	if (!cfg.storage_messages)
		for (int k = 0; k < NKINDS; k++) {
			char path[PATH_MAX + 64];
			snprintf(path, sizeof(path), "%s/storage-%s.dat",
				 cfg.out, kinds[k]);
			unlink(path); /* not from this run */
		}
	char *json = cJSON_Print(root);
	write_file("bench.json", json);
	write_file("bench.txt", text);
	if (cfg.json)
		printf("%s\n", json);
	else
		fputs(text, stdout);
	printf("%s\n", summary);
	cJSON_free(json);
	cJSON_Delete(root);
	for (int i = 0; i < 2; i++)
		cJSON_Delete(s_res[i]);
	if (!cfg.keep)
		rm_rf(cfg.work);
	if (cfg.store_url && !cfg.keep)
		pg_drop_schemas();
	free(tp_runs);
	free(tps);
	free(pgw_runs);
	free(pgw_res);
	for (int i = 0; i < cluster_argc; i++)
		free(cluster_argv[i]);
	free(cluster_argv);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "contender") == 0)
		return bench_contender_main(argc - 1, argv + 1);
	return bench_driver_main(argc, argv);
}
