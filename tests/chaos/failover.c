/*
 * tbx_failover: how long the partitions of a SIGKILLed `tokenbox worker`
 * wait before another member of the group consumes them again, on a real
 * Kafka cluster (docs/reliability.md, "Rebalances").
 *
 * Each run: a fresh topic of --partitions partitions and a fresh group;
 * --workers `tokenbox worker` processes loading libtbx_chaos.so with role
 * f (every record handled leaves a row: partition, offset, the worker's
 * pid, the time); a publisher sends tokened ticks to every partition
 * every --interval-ms.  Once every partition is handled steadily by one
 * worker, the owner of one of them is killed with SIGKILL; the figure is
 * the time from the kill until every partition it owned has a row of
 * another worker.  Then the ticks stop, the group drains, and every tick
 * must have taken effect exactly once.
 *
 * It prints the figures; it asserts no time.  Exit status 0 when every
 * run's outcome held (every partition consumed again within --deadline-s,
 * nothing lost or doubled, every SIGTERM exit 0), 1 otherwise, 2 for a bad
 * command line.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tokenbox/tokenbox.h"
#include "tools/kafka_admin.h"

#define MAX_WORKERS 8
#define MAX_PARTS   64
#define MAX_RUNS    50
#define KEYS	    64 /* keys cycled over: every partition gets ticks */
#define ADMIN_MS    30000

typedef struct opts {
	const char *bootstraps, *tokenbox, *plugin, *dir;
	const char *strategies[2];
	int strategy_cnt;
	int runs, workers, partitions;
	int session_ms, heartbeat_ms, interval_ms, deadline_s;
	int keep;
} opts_t;

typedef struct run {
	const opts_t *o;
	const char *strategy;
	int no;
	char topic[96], group[96], store[PATH_MAX], tokens[PATH_MAX];
	char logdir[PATH_MAX];
	pid_t pids[MAX_WORKERS];
	tbx_publisher_t *pub;
	int64_t published;
	uint64_t key;
} run_t;

static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("failover: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* One integer of the service store; -1 when it cannot be read (not
 * created yet, locked past the busy timeout). */
static int64_t query(const run_t *r, const char *sql, int64_t a, int64_t b,
		     int64_t c)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *stmt = NULL;
	int64_t v = -1;

	if (access(r->store, F_OK) != 0 ||
	    sqlite3_open_v2(r->store, &db, SQLITE_OPEN_READONLY, NULL) !=
		SQLITE_OK) {
		sqlite3_close(db);
		return -1;
	}
	sqlite3_busy_timeout(db, 5000);
	if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) == SQLITE_OK) {
		const int64_t v3[3] = {a, b, c};

		for (int i = 0; i < sqlite3_bind_parameter_count(stmt); i++)
			sqlite3_bind_int64(stmt, i + 1, v3[i % 3]);
		if (sqlite3_step(stmt) == SQLITE_ROW &&
		    sqlite3_column_type(stmt, 0) != SQLITE_NULL)
			v = sqlite3_column_int64(stmt, 0);
	}
	sqlite3_finalize(stmt);
	sqlite3_close(db);
	return v;
}

static pid_t worker_spawn(run_t *r, int i)
{
	const opts_t *o = r->o;
	char kv[14][PATH_MAX + 64], log[PATH_MAX + 32];
	char *argv[2 + 2 * 14 + 1];
	int k = 0, n = 0;
	pid_t pid;

	snprintf(kv[n++], sizeof(kv[0]), "group.id=%s", r->group);
	snprintf(kv[n++], sizeof(kv[0]), "store.path=%s", r->store);
	snprintf(kv[n++], sizeof(kv[0]), "tokens.path=%s", r->tokens);
	snprintf(kv[n++], sizeof(kv[0]), "tokens.create=true");
	snprintf(kv[n++], sizeof(kv[0]), "kafka.bootstrap.servers=%s",
		 o->bootstraps);
	snprintf(kv[n++], sizeof(kv[0]), "plugin=%s", o->plugin);
	snprintf(kv[n++], sizeof(kv[0]), "plugin.args=role=f:%s", r->topic);
	snprintf(kv[n++], sizeof(kv[0]),
		 "kafka.consumer.partition.assignment.strategy=%s",
		 r->strategy);
	snprintf(kv[n++], sizeof(kv[0]), "kafka.consumer.session.timeout.ms=%d",
		 o->session_ms);
	snprintf(kv[n++], sizeof(kv[0]),
		 "kafka.consumer.heartbeat.interval.ms=%d", o->heartbeat_ms);
	snprintf(kv[n++], sizeof(kv[0]), "kafka.consumer.fetch.wait.max.ms=10");
	snprintf(kv[n++], sizeof(kv[0]),
		 "kafka.consumer.auto.offset.reset="
		 "earliest");
	snprintf(kv[n++], sizeof(kv[0]), "stats.interval.ms=0");
	snprintf(kv[n++], sizeof(kv[0]), "log.level=info");
	argv[k++] = (char *)o->tokenbox;
	argv[k++] = "worker";
	for (int j = 0; j < n; j++) {
		argv[k++] = "-X";
		argv[k++] = kv[j];
	}
	argv[k] = NULL;
	snprintf(log, sizeof(log), "%s/worker-%d.log", r->logdir, i);
	if ((pid = fork()) == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd < 0 || dup2(fd, 2) < 0)
			_exit(127);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Waits up to @p timeout_s for @p pid; -1 on timeout (then killed). */
static int wait_for(pid_t pid, int timeout_s)
{
	int status;

	for (int i = 0; i < timeout_s * 20; i++) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			return status;
		if (w < 0 && errno != EINTR)
			return -1;
		sleep_ms(50);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

/* Publishes one tick per partition's worth of keys and flushes. */
static int tick(run_t *r)
{
	char key[16], payload[32];
	int err;

	for (int i = 0; i < r->o->partitions; i++) {
		int klen =
		    snprintf(key, sizeof(key), "k%" PRIu64, r->key++ % KEYS);
		int plen = snprintf(payload, sizeof(payload), "t%" PRId64,
				    r->published + i);
		tbx_out_t out = {.topic = r->topic,
				 .type = "Tick",
				 .key = key,
				 .key_len = (size_t)klen,
				 .payload = payload,
				 .payload_len = (size_t)plen};
		if ((err = tbx_publish(r->pub, &out))) {
			say("publish: %s", tbx_strerror(err));
			return -1;
		}
	}
	for (int i = 0; i < 3; i++)
		if (!(err = tbx_publisher_flush(r->pub, NULL)))
			break;
	if (err) {
		say("flush: %s", tbx_publisher_errstr(r->pub));
		return -1;
	}
	r->published += r->o->partitions;
	return 0;
}

/* The pid of the worker that handled partition @p p last since
 * @p since_ms; 0: none. */
static pid_t owner(const run_t *r, int p, int64_t since_ms)
{
	return (pid_t)query(r,
			    "SELECT pid FROM chaos_ticks WHERE part = ?1 AND "
			    "ms >= ?2 ORDER BY rowid DESC LIMIT 1",
			    p, since_ms, 0);
}

/* Waits until every partition was handled in the last 2 intervals by
 * the same worker it was handled by 2 s before, every worker handling
 * some: a settled assignment.  Fills @p owners.  @returns 0 or -1. */
static int settle(run_t *r, pid_t owners[MAX_PARTS], int64_t deadline)
{
	const opts_t *o = r->o;
	pid_t last[MAX_PARTS] = {0};
	int stable = 0;

	while (wall_ms() < deadline) {
		int all = 1, distinct = 0;

		if (tick(r))
			return -1;
		sleep_ms(o->interval_ms);
		for (int p = 0; p < o->partitions; p++) {
			owners[p] =
			    owner(r, p, wall_ms() - 4 * o->interval_ms - 1000);
			all &= owners[p] > 0 && owners[p] == last[p];
			last[p] = owners[p];
		}
		for (int i = 0; i < o->workers; i++)
			for (int p = 0; p < o->partitions; p++)
				if (owners[p] == r->pids[i]) {
					distinct++;
					break;
				}
		stable = all && distinct == o->workers ? stable + 1 : 0;
		if (stable * o->interval_ms >= 2000)
			return 0;
	}
	return -1;
}

static int int_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/*
 * One run.  @p ms receives the re-consumption time (-1: not measured).
 * @returns 0 when the outcome held.
 */
static int one_run(const opts_t *o, const char *strategy, int no, int64_t *ms)
{
	run_t r = {.o = o, .strategy = strategy, .no = no};
	const char *topics[1], *groups[1];
	int parts[1] = {o->partitions};
	pid_t owners[MAX_PARTS], victim;
	int64_t t0, seen[MAX_PARTS], rows, distinct, pending, deadline;
	char errstr[512], detail[1024] = "";
	size_t dl = 0;
	int victim_parts = 0, ok = 1, vi = -1;
	tbx_conf_t *conf;

	*ms = -1;
	snprintf(r.topic, sizeof(r.topic), "failover-%d-%s-%d", (int)getpid(),
		 strategy[0] == 'c' ? "coop" : "eager", no);
	snprintf(r.group, sizeof(r.group), "%s", r.topic);
	snprintf(r.store, sizeof(r.store), "%s/%s.db", o->dir, r.topic);
	snprintf(r.tokens, sizeof(r.tokens), "%s/tokens.db", o->dir);
	snprintf(r.logdir, sizeof(r.logdir), "%s/logs-%s", o->dir, r.topic);
	mkdir(r.logdir, 0755);
	topics[0] = r.topic;
	groups[0] = r.group;
	if (tbx_cli_create_topics(o->bootstraps, topics, parts, 1, ADMIN_MS,
				  errstr, sizeof(errstr))) {
		say("cannot create topic %s: %s", r.topic, errstr);
		return -1;
	}
	for (int i = 0; i < o->workers; i++)
		r.pids[i] = worker_spawn(&r, i);
	/* Every worker subscribes in the token store at start: the ticks
	 * carry tokens for the group from then on. */
	deadline = wall_ms() + (int64_t)o->deadline_s * 1000;
	while (wall_ms() < deadline &&
	       query(&r,
		     "SELECT COUNT(*) FROM sqlite_master WHERE name = "
		     "'tbx_outbox'",
		     0, 0, 0) < 1)
		sleep_ms(100);
	sleep_ms(500);
	conf = tbx_conf_new();
	if (!conf ||
	    tbx_conf_set(conf, "kafka.bootstrap.servers", o->bootstraps, errstr,
			 sizeof(errstr)) ||
	    tbx_conf_set(conf, "tokens.path", r.tokens, errstr,
			 sizeof(errstr)) ||
	    tbx_conf_set(conf, "log.level", "warning", errstr,
			 sizeof(errstr)) ||
	    !(r.pub = tbx_publisher_new(conf, errstr, sizeof(errstr)))) {
		say("publisher: %s", errstr);
		tbx_conf_destroy(conf);
		ok = 0;
		goto stop;
	}

	deadline = wall_ms() + (int64_t)o->deadline_s * 1000;
	if (settle(&r, owners, deadline)) {
		say("%s run %d: the group never settled (logs in %s)", strategy,
		    no, r.logdir);
		ok = 0;
		goto stop;
	}
	victim = owners[no % o->partitions];
	for (int i = 0; i < o->workers; i++)
		if (r.pids[i] == victim)
			vi = i;
	t0 = wall_ms();
	kill(victim, SIGKILL);
	wait_for(victim, 30);
	r.pids[vi] = 0;
	for (int p = 0; p < o->partitions; p++)
		seen[p] = owners[p] == victim ? -1 : 0;
	deadline = t0 + (int64_t)o->deadline_s * 1000;
	for (;;) {
		int left = 0;

		if (tick(&r)) {
			ok = 0;
			break;
		}
		for (int p = 0; p < o->partitions; p++) {
			int64_t at;

			if (seen[p] != -1)
				continue;
			at = query(
			    &r,
			    "SELECT MIN(ms) FROM chaos_ticks WHERE part = "
			    "?1 AND ms > ?2 AND pid <> ?3",
			    p, t0, victim);
			if (at > 0)
				seen[p] = at;
			else
				left++;
		}
		if (!left || wall_ms() >= deadline)
			break;
		sleep_ms(o->interval_ms);
	}
	for (int p = 0; p < o->partitions; p++) {
		if (owners[p] != victim)
			continue;
		victim_parts++;
		if (seen[p] < 0) {
			ok = 0;
			dl +=
			    (size_t)snprintf(detail + dl, sizeof(detail) - dl,
					     "%sp%d never", dl ? ", " : "", p);
			continue;
		}
		if (seen[p] - t0 > *ms)
			*ms = seen[p] - t0;
		dl += (size_t)snprintf(detail + dl, sizeof(detail) - dl,
				       "%sp%d %" PRId64 " ms", dl ? ", " : "",
				       p, seen[p] - t0);
		if (dl >= sizeof(detail))
			dl = sizeof(detail) - 1;
	}
	if (!ok)
		*ms = -1;

	/* Drain: every tick handled, once. */
	deadline = wall_ms() + (int64_t)o->deadline_s * 2000;
	do {
		sleep_ms(200);
		distinct =
		    query(&r, "SELECT COUNT(DISTINCT tick) FROM chaos_ticks", 0,
			  0, 0);
		pending = query(&r, "SELECT COUNT(*) FROM tbx_outbox", 0, 0, 0);
	} while (wall_ms() < deadline &&
		 (distinct != r.published || pending != 0));
	rows = query(&r, "SELECT COUNT(*) FROM chaos_ticks", 0, 0, 0);
	printf("failover: strategy=%s session.timeout.ms=%d "
	       "heartbeat.interval.ms=%d run=%d partitions_of_killed=%d "
	       "reconsumed_ms=%" PRId64 " (%s) published=%" PRId64
	       " handled_once=%" PRId64 " lost=%" PRId64 " duplicated=%" PRId64
	       "\n",
	       strategy, o->session_ms, o->heartbeat_ms, no, victim_parts, *ms,
	       detail, r.published, distinct, r.published - distinct,
	       rows - distinct);
	fflush(stdout);
	if (distinct != r.published || rows != distinct || pending != 0)
		ok = 0;

stop:
	for (int i = 0; i < o->workers; i++) {
		int status;

		if (r.pids[i] <= 0)
			continue;
		kill(r.pids[i], SIGTERM);
		status = wait_for(r.pids[i], 120);
		if (status == -1 || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			say("%s run %d: worker %d did not exit 0 after SIGTERM "
			    "(wait status %d; log %s/worker-%d.log)",
			    strategy, no, i, status, r.logdir, i);
			ok = 0;
		}
	}
	tbx_publisher_destroy(r.pub);
	tbx_cli_delete_topics(o->bootstraps, topics, 1, ADMIN_MS, errstr,
			      sizeof(errstr));
	tbx_cli_delete_groups(o->bootstraps, groups, 1, ADMIN_MS, errstr,
			      sizeof(errstr));
	return ok ? 0 : -1;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: tbx_failover --bootstrap-servers B --tokenbox PATH "
	    "--plugin PATH [options]\n"
	    "\n"
	    "Measures how long the partitions of a SIGKILLed tokenbox "
	    "worker wait\n"
	    "before another member of its group consumes them again, on "
	    "the Kafka\n"
	    "cluster at B (fresh topics and groups per run, deleted "
	    "afterwards).\n"
	    "\n"
	    "  --strategy S            range, cooperative-sticky or both "
	    "(default both)\n"
	    "  --runs N                runs per strategy (1..%d, default "
	    "3)\n"
	    "  --workers N             workers of the group (2..%d, "
	    "default 3)\n"
	    "  --partitions N          partitions of the topic (1..%d, "
	    "default 6)\n"
	    "  --session-timeout-ms N  kafka.consumer.session.timeout.ms "
	    "(default 6000)\n"
	    "  --heartbeat-interval-ms N\n"
	    "                          kafka.consumer.heartbeat.interval.ms "
	    "(default 2000)\n"
	    "  --interval-ms N         ticks to every partition every N ms "
	    "(default 50)\n"
	    "  --deadline-s N          the longest wait for a step (default "
	    "120)\n"
	    "  --dir DIR               stores and logs (default: a new "
	    "directory in /tmp,\n"
	    "                          removed unless a run failed)\n"
	    "\n"
	    "Prints one line per run and a summary per strategy.  Exit "
	    "status 0 when\n"
	    "every run's outcome held (every partition consumed again, "
	    "nothing lost\n"
	    "or doubled, every SIGTERM exit 0), 1 otherwise, 2 for a bad "
	    "command line.\n",
	    MAX_RUNS, MAX_WORKERS, MAX_PARTS);
}

static int int_arg(const char *name, const char *v, int lo, int hi, int *out)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < lo || n > hi) {
		fprintf(stderr,
			"tbx_failover: %s: want an integer %d..%d, not "
			"'%s'\n",
			name, lo, hi, v);
		return -1;
	}
	*out = (int)n;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"bootstrap-servers", required_argument, NULL, 'b'},
	    {"tokenbox", required_argument, NULL, 't'},
	    {"plugin", required_argument, NULL, 'p'},
	    {"strategy", required_argument, NULL, 's'},
	    {"runs", required_argument, NULL, 'r'},
	    {"workers", required_argument, NULL, 'w'},
	    {"partitions", required_argument, NULL, 'P'},
	    {"session-timeout-ms", required_argument, NULL, 'S'},
	    {"heartbeat-interval-ms", required_argument, NULL, 'H'},
	    {"interval-ms", required_argument, NULL, 'i'},
	    {"deadline-s", required_argument, NULL, 'd'},
	    {"dir", required_argument, NULL, 'D'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	opts_t o = {.runs = 3,
		    .workers = 3,
		    .partitions = 6,
		    .session_ms = 6000,
		    .heartbeat_ms = 2000,
		    .interval_ms = 50,
		    .deadline_s = 120};
	const char *strategy = "both";
	char dir[PATH_MAX];
	int c, failed = 0;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 'b':
			o.bootstraps = optarg;
			break;
		case 't':
			o.tokenbox = optarg;
			break;
		case 'p':
			o.plugin = optarg;
			break;
		case 's':
			strategy = optarg;
			break;
		case 'r':
			bad = int_arg("--runs", optarg, 1, MAX_RUNS, &o.runs);
			break;
		case 'w':
			bad = int_arg("--workers", optarg, 2, MAX_WORKERS,
				      &o.workers);
			break;
		case 'P':
			bad = int_arg("--partitions", optarg, 1, MAX_PARTS,
				      &o.partitions);
			break;
		case 'S':
			bad = int_arg("--session-timeout-ms", optarg, 1000,
				      3600000, &o.session_ms);
			break;
		case 'H':
			bad = int_arg("--heartbeat-interval-ms", optarg, 100,
				      3600000, &o.heartbeat_ms);
			break;
		case 'i':
			bad = int_arg("--interval-ms", optarg, 10, 10000,
				      &o.interval_ms);
			break;
		case 'd':
			bad = int_arg("--deadline-s", optarg, 10, 86400,
				      &o.deadline_s);
			break;
		case 'D':
			o.dir = optarg;
			o.keep = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			bad = 1;
		}
		if (bad)
			return 2;
	}
	if (optind < argc || !o.bootstraps || !*o.bootstraps || !o.tokenbox ||
	    !o.plugin) {
		fprintf(stderr, "tbx_failover: --bootstrap-servers, --tokenbox "
				"and --plugin are required (see --help)\n");
		return 2;
	}
	if (strcmp(strategy, "both") == 0) {
		o.strategies[o.strategy_cnt++] = "range";
		o.strategies[o.strategy_cnt++] = "cooperative-sticky";
	} else if (strcmp(strategy, "range") == 0 ||
		   strcmp(strategy, "cooperative-sticky") == 0) {
		o.strategies[o.strategy_cnt++] = strategy;
	} else {
		fprintf(stderr,
			"tbx_failover: --strategy: range, "
			"cooperative-sticky or both, not '%s'\n",
			strategy);
		return 2;
	}
	if (o.heartbeat_ms >= o.session_ms) {
		fprintf(stderr, "tbx_failover: --heartbeat-interval-ms must be "
				"below --session-timeout-ms\n");
		return 2;
	}
	if (!o.dir) {
		snprintf(dir, sizeof(dir), "/tmp/tbx-failover-XXXXXX");
		if (!mkdtemp(dir)) {
			fprintf(stderr, "tbx_failover: mkdtemp: %s\n",
				strerror(errno));
			return 1;
		}
		o.dir = dir;
	} else if (mkdir(o.dir, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "tbx_failover: --dir %s: %s\n", o.dir,
			strerror(errno));
		return 2;
	}

	for (int s = 0; s < o.strategy_cnt; s++) {
		int64_t ms[MAX_RUNS];
		int n = 0;

		for (int i = 1; i <= o.runs; i++) {
			int64_t t;
			if (one_run(&o, o.strategies[s], i, &t))
				failed++;
			if (t >= 0)
				ms[n++] = t;
		}
		qsort(ms, (size_t)n, sizeof(ms[0]), int_cmp);
		if (n)
			printf("failover: strategy=%s session.timeout.ms=%d "
			       "heartbeat.interval.ms=%d runs=%d "
			       "reconsumed_ms min=%" PRId64 " median=%" PRId64
			       " max=%" PRId64 "\n",
			       o.strategies[s], o.session_ms, o.heartbeat_ms, n,
			       ms[0], ms[n / 2], ms[n - 1]);
	}
	if (failed)
		say("%d run(s) failed; stores and logs kept in %s", failed,
		    o.dir);
	else if (!o.keep) {
		char cmd[PATH_MAX + 16];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", o.dir);
		if (system(cmd) != 0)
			say("cannot remove %s", o.dir);
	}
	return failed ? 1 : 0;
}
