/*
 * tbx_chaos: attacks a running two-hop pipeline of `tokenbox worker`
 * processes and checks that every job still took effect exactly once.
 * See tests/chaos/README.md and docs/reliability.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chaos.h"
#include "tokens/tokens.h"
#include "tools/cli.h"
#include "tools/kafka_admin.h"

static const char usage_text[] =
    "Usage: tbx_chaos [options]\n"
    "\n"
    "Runs a two-hop pipeline (jobs -> svc-a -> events -> svc-b, svc-c) of\n"
    "`tokenbox worker` processes on a `tokenbox mock-cluster` process, and\n"
    "attacks it for --duration seconds: workers killed with SIGKILL, dying\n"
    "at random crash points, stopped and restarted, groups scaled up and\n"
    "down; brokers taken down, request errors, latency, leader and\n"
    "coordinator moves; the stores' disk filled; jobs re-sent upstream.\n"
    "Then it lets the pipeline drain, validates the stores and topics and\n"
    "prints one line of figures.\n"
    "\n"
    "Options:\n"
    "  -s, --seed N            seed of every decision (default: the clock);\n"
    "                          the same seed makes the same schedule\n"
    "  -d, --duration SECONDS  length of the attacks (default 60, 5..86400)\n"
    "  -D, --drain SECONDS     at most this long to settle afterwards\n"
    "                          (default 240, 10..3600)\n"
    "  -m, --messages N        jobs to publish (default 5000, 1..10000000)\n"
    "  -w, --workers N         worker processes at the start, spread over\n"
    "                          the three groups (default 5, 3..12)\n"
    "  -p, --crash-prob P      probability per crash-point passage for the\n"
    "                          workers started armed (default 0.002; 0 arms\n"
    "                          none)\n"
    "      --no-broker-faults  leave the brokers alone\n"
    "      --no-disk-faults    leave the disk alone\n"
    "      --layout one|files  one: every service's store and the token\n"
    "                          store in one file, tokenbox's default\n"
    "                          (default); files: a file per service and\n"
    "                          one for the tokens.  With --store-url, one:\n"
    "                          the workers reach the token store through\n"
    "                          their service store's connection (the\n"
    "                          joined path); files: through a connection\n"
    "                          of its own\n"
    "      --store-url URL     the stores on this PostgreSQL server (a libpq\n"
    "                          URL or key=value string) instead of SQLite\n"
    "                          files: each service's store in a schema of\n"
    "                          its own, chaos_PID_svc_a .. _c, the token\n"
    "                          store in chaos_PID_tokens (an earlier run's\n"
    "                          schemas of these names are dropped first;\n"
    "                          a run that passes drops its own unless\n"
    "                          --keep); disk faults are off\n"
    "      --outbox-layout record|batch\n"
    "                          the workers' outbox.layout: record, a row\n"
    "                          per record (default, tokenbox's); batch, a\n"
    "                          row per batch\n"
    "      --tokens-format message|set\n"
    "                          tokens.format of the publisher and of the\n"
    "                          workers' own messages: message, a token per\n"
    "                          message (default, tokenbox's); set, token\n"
    "                          sets (needs --outbox-layout batch: a worker\n"
    "                          on record refuses set)\n"
    "      --dir DIR           run directory (created; default: a new one\n"
    "                          under $TMPDIR or /tmp)\n"
    "      --keep              keep the run directory (it is always kept\n"
    "                          when the run fails)\n"
    "      --tokenbox PATH     the tokenbox executable (default: next to\n"
    "                          this build's tests)\n"
    "      --plugin PATH       the chaos handler plugin (default: next to\n"
    "                          this program)\n"
    "  -b, --bootstrap-servers B\n"
    "                          run on this Apache Kafka cluster instead of\n"
    "                          a mock-cluster process: its topics jobs,\n"
    "                          events, *.dlq and groups svc-a..c are\n"
    "                          deleted and created afresh.  Broker faults\n"
    "                          there need --kafka-dir\n"
    "      --kafka-dir DIR     the cluster's scripts/kafka.sh directory:\n"
    "                          broker faults become nodes killed (SIGKILL,\n"
    "                          also the groups' coordinator's) or stopped\n"
    "                          (SIGTERM, a controller each) and restarted,\n"
    "                          one at a time; leaders and coordinators move\n"
    "                          with them\n"
    "      --kafka-script PATH scripts/kafka.sh (default: this source\n"
    "                          tree's)\n"
    "  -v, --verbose           log every action; twice: workers log at\n"
    "                          level info\n"
    "  -h, --help              show this help\n"
    "\n"
    "Disk faults mount a small tmpfs for the stores, which needs root (or\n"
    "CAP_SYS_ADMIN); without it, and with --store-url, they are skipped\n"
    "and the summary says disk_faults=off.\n"
    "\n"
    "Exit status: 0 if every job took effect exactly once in each group,\n"
    "no token, registration or outbox row was left (token sets and batch\n"
    "rows included) and every JobDone carries a token of the run's format;\n"
    "1 otherwise; 2 for a\n"
    "bad command line, or when the run could not be carried out (the\n"
    "mock cluster did not start or ended, the --store-url server could\n"
    "not be reached or its stores not read).\n";

enum { ST_FREE, ST_RUNNING, ST_STOPPING, ST_RESTART };

typedef struct proc {
	int state;
	pid_t pid;
	int group;
	int armed;   /* started with crash points armed */
	int sigkill; /* we sent SIGKILL */
	int sigterm; /* we sent SIGTERM */
	int retire;  /* do not restart when it ends */
	int64_t at;  /* ST_STOPPING: deadline; ST_RESTART: when */
	unsigned serial;
} proc_t;

typedef struct run {
	ch_opts_t o;
	uint64_t rng;
	char dir[PATH_MAX - 64], store_dir[PATH_MAX], logs[PATH_MAX];
	/* the stores (files under store_dir, or schemas), the token
	 * store's name among them, and on PostgreSQL the tokens.url of the
	 * workers of --layout files and of the publisher */
	ch_stores_t stores;
	char tokens[PATH_MAX + 16];
	char tokens_url[4200];
	char bootstraps[1024];
	int mounted;
	/* the mock cluster and its control channel */
	pid_t mc_pid;
	int ctl_in, ctl_out;
	char ctl_buf[CH_LINE_MAX * 2];
	size_t ctl_len;
	/* workers */
	proc_t procs[CH_WORKERS_MAX];
	unsigned serial;
	/* faults in progress, undone at .at times (0: none) */
	int broker_down;
	int64_t broker_up_at;
	int rtt_broker;
	int64_t rtt_clear_at;
	int64_t disk_free_at;
	char ballast[PATH_MAX + 16];
	/* a real cluster's node taken down (0: none), its broker process,
	 * when it comes back, and the kafka.sh restart bringing it */
	int node_down, node_count;
	pid_t node_pid, restart_pid;
	int64_t node_up_at;
	int restart_failed;
	/* publisher thread */
	pthread_t pub_thread;
	atomic_long published;
	atomic_int pub_stop;
	int64_t pub_start_ms, pub_end_ms;
	ch_figures_t fig;
} run_t;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t t0;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	char line[1024];

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "chaos: %6.1fs %s\n", (double)(mono_ms() - t0) / 1000,
		line);
}

#define VERBOSE(r, ...)                                                        \
	do {                                                                   \
		if ((r)->o.verbose)                                            \
			say(__VA_ARGS__);                                      \
	} while (0)

/*
 * The mock cluster and its control channel.
 */

static int mc_start(run_t *r)
{
	int in[2], out[2];
	char log[PATH_MAX + 32];
	char topics[4][64];

	snprintf(topics[0], sizeof(topics[0]), "%s:%d", CH_JOBS, CH_PARTITIONS);
	snprintf(topics[1], sizeof(topics[1]), "%s:%d", CH_EVENTS,
		 CH_PARTITIONS);
	snprintf(topics[2], sizeof(topics[2]), "%s.dlq:1", CH_JOBS);
	snprintf(topics[3], sizeof(topics[3]), "%s.dlq:1", CH_EVENTS);
	snprintf(log, sizeof(log), "%s/mock-cluster.log", r->logs);
	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		return -1;
	r->mc_pid = fork();
	if (r->mc_pid < 0)
		return -1;
	if (r->mc_pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(in[0], 0);
		dup2(out[1], 1);
		if (fd >= 0)
			dup2(fd, 2);
		char *argv[] = {r->o.tokenbox, "mock-cluster",
				"--brokers",   "3",
				"--topic",     topics[0],
				"--topic",     topics[1],
				"--topic",     topics[2],
				"--topic",     topics[3],
				"--control",   "-",
				NULL};
		if (!r->o.broker_faults) /* no control channel needed */
			argv[12] = NULL;
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	r->ctl_in = in[1];
	r->ctl_out = out[0];
	return 0;
}

/* Reads one line from the cluster's stdout within @p timeout_ms. */
static int ctl_line(run_t *r, char *line, size_t size, int timeout_ms)
{
	int64_t deadline = mono_ms() + timeout_ms;

	for (;;) {
		char *nl = memchr(r->ctl_buf, '\n', r->ctl_len);
		if (nl) {
			size_t n = (size_t)(nl - r->ctl_buf);
			snprintf(line, size, "%.*s", (int)n, r->ctl_buf);
			memmove(r->ctl_buf, nl + 1, r->ctl_len - n - 1);
			r->ctl_len -= n + 1;
			return 0;
		}
		int64_t left = deadline - mono_ms();
		struct pollfd pfd = {r->ctl_out, POLLIN, 0};
		if (left <= 0 || r->ctl_len == sizeof(r->ctl_buf))
			return -1;
		if (poll(&pfd, 1, (int)left) <= 0)
			continue;
		ssize_t got = read(r->ctl_out, r->ctl_buf + r->ctl_len,
				   sizeof(r->ctl_buf) - r->ctl_len);
		if (got <= 0)
			return -1;
		r->ctl_len += (size_t)got;
	}
}

/* Sends one control command; @returns 0 if it was answered "ok". */
static int ctl(run_t *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int ctl(run_t *r, const char *fmt, ...)
{
	char cmd[256], reply[CH_LINE_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(cmd, sizeof(cmd) - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(cmd) - 1)
		return -1;
	cmd[n++] = '\n';
	if (write(r->ctl_in, cmd, (size_t)n) != n) {
		say("control: cannot write to mock-cluster: %s",
		    strerror(errno));
		return -1;
	}
	if (ctl_line(r, reply, sizeof(reply), 10000) != 0) {
		say("control: no answer to '%.*s'", n - 1, cmd);
		return -1;
	}
	if (strncmp(reply, "ok", 2) != 0) {
		say("control: '%.*s': %s", n - 1, cmd, reply);
		return -1;
	}
	VERBOSE(r, "broker fault: %.*s", n - 1, cmd);
	return 0;
}

/*
 * Workers.
 */

/* The file a worker's stdout and stderr go to. */
static void worker_log(const run_t *r, const proc_t *p, char *path, size_t size)
{
	snprintf(path, size, "%s/worker-%03u-%s.log", r->logs, p->serial,
		 ch_group_names[p->group]);
}

/* The last line of @p path, without its newline ("" if none). */
static void last_line(const char *path, char *out, size_t size)
{
	char line[512];
	FILE *f;

	out[0] = '\0';
	if (!(f = fopen(path, "r")))
		return;
	while (fgets(line, sizeof(line), f))
		snprintf(out, size, "%s", line);
	fclose(f);
	out[strcspn(out, "\n")] = '\0';
}

/* Prints the last @p want lines of a worker's log: a worker that did not
 * stop cleanly says why there, and CI keeps only this program's output. */
static void log_tail(const run_t *r, const proc_t *p, int want)
{
	char path[PATH_MAX + 64], ring[80][512];
	int n = 0;
	FILE *f;

	if (want > 80)
		want = 80;
	worker_log(r, p, path, sizeof(path));
	if (!(f = fopen(path, "r")))
		return;
	while (fgets(ring[n % want], sizeof(ring[0]), f)) {
		/* A line longer than the slot goes on in the next one. */
		ring[n % want][strcspn(ring[n % want], "\n")] = '\0';
		n++;
	}
	fclose(f);
	for (int i = n > want ? n - want : 0; i < n; i++)
		fprintf(stderr, "chaos:   | %s\n", ring[i % want]);
}

static void worker_spawn(run_t *r, proc_t *p)
{
	char kv[17][4300], log[PATH_MAX + 64], crash[64], seed[64];
	char store[PATH_MAX];
	const char *group = ch_group_names[p->group];
	char *argv[2 + 2 * 17 + 1];
	int k = 0, n = 0;

	p->serial = ++r->serial;
	p->armed = r->o.crash_prob > 0 && ch_between(&r->rng, 0, 1) == 1;
	snprintf(kv[n++], sizeof(kv[0]), "group.id=%s", group);
	ch_store_name(store, sizeof(store), &r->stores, p->group);
	if (r->stores.url) {
		/* A schema per service; the token store's beside them, on
		 * the service connection (one) or on one of its own. */
		snprintf(kv[n++], sizeof(kv[0]), "store.url=%s", r->stores.url);
		snprintf(kv[n++], sizeof(kv[0]), "store.schema=%s", store);
		if (!r->o.one_file)
			snprintf(kv[n++], sizeof(kv[0]), "tokens.url=%s",
				 r->tokens_url);
		snprintf(kv[n++], sizeof(kv[0]), "tokens.schema=%s", r->tokens);
	} else {
		snprintf(kv[n++], sizeof(kv[0]), "store.path=%s", store);
		snprintf(kv[n++], sizeof(kv[0]), "tokens.path=%s", r->tokens);
	}
	snprintf(kv[n++], sizeof(kv[0]), "tokens.create=true");
	snprintf(kv[n++], sizeof(kv[0]), "kafka.bootstrap.servers=%s",
		 r->bootstraps);
	snprintf(kv[n++], sizeof(kv[0]), "plugin=%s", r->o.plugin);
	snprintf(kv[n++], sizeof(kv[0]), "plugin.args=role=%c", 'a' + p->group);
	snprintf(kv[n++], sizeof(kv[0]),
		 "kafka.consumer.session.timeout.ms=6000");
	snprintf(kv[n++], sizeof(kv[0]),
		 "kafka.consumer.heartbeat.interval.ms=500");
	snprintf(kv[n++], sizeof(kv[0]), "kafka.consumer.fetch.wait.max.ms=10");
	snprintf(kv[n++], sizeof(kv[0]), "cleanup.interval.ms=500");
	snprintf(kv[n++], sizeof(kv[0]), "stats.interval.ms=0");
	snprintf(kv[n++], sizeof(kv[0]), "outbox.layout=%s",
		 r->o.batch_rows ? "batch" : "record");
	snprintf(kv[n++], sizeof(kv[0]), "tokens.format=%s",
		 r->o.token_sets ? "set" : "message");
	snprintf(kv[n++], sizeof(kv[0]), "log.level=%s",
		 r->o.verbose > 1 ? "info" : "warning");
	argv[k++] = r->o.tokenbox;
	argv[k++] = "worker";
	for (int i = 0; i < n; i++) {
		argv[k++] = "-X";
		argv[k++] = kv[i];
	}
	argv[k] = NULL;
	worker_log(r, p, log, sizeof(log));
	snprintf(crash, sizeof(crash), "TBX_CRASH_AT=*@%g", r->o.crash_prob);
	snprintf(seed, sizeof(seed), "TBX_CRASH_SEED=%llu",
		 (unsigned long long)(r->o.seed * 1000003ULL + p->serial));
	char *env[] = {crash, seed, NULL};
	/* A worker may be stopped the moment it is started (ch_spawn()). */
	p->pid = ch_spawn(argv, log, p->armed ? env : NULL,
			  p->armed ? NULL : "TBX_CRASH_AT", -1);
	if (p->pid < 0) {
		say("fork: %s", strerror(errno));
		p->state = ST_RESTART;
		p->at = mono_ms() + 1000;
		return;
	}
	p->state = ST_RUNNING;
	p->sigkill = p->sigterm = p->retire = 0;
	VERBOSE(r, "worker %u (%s%s) started, pid %d", p->serial, group,
		p->armed ? ", armed" : "", (int)p->pid);
}

static proc_t *proc_new(run_t *r, int group)
{
	for (int i = 0; i < CH_WORKERS_MAX; i++) {
		proc_t *p = &r->procs[i];
		if (p->state == ST_FREE) {
			memset(p, 0, sizeof(*p));
			p->group = group;
			return p;
		}
	}
	return NULL;
}

static int group_size(const run_t *r, int group)
{
	int n = 0;

	for (int i = 0; i < CH_WORKERS_MAX; i++)
		n += r->procs[i].state != ST_FREE &&
		     r->procs[i].group == group && !r->procs[i].retire;
	return n;
}

/* A random running worker, or NULL. */
static proc_t *pick_running(run_t *r)
{
	proc_t *run[CH_WORKERS_MAX];
	int n = 0;

	for (int i = 0; i < CH_WORKERS_MAX; i++)
		if (r->procs[i].state == ST_RUNNING)
			run[n++] = &r->procs[i];
	return n ? run[ch_between(&r->rng, 0, n - 1)] : NULL;
}

static void stop(run_t *r, proc_t *p, int sig, int retire)
{
	kill(p->pid, sig);
	p->sigkill |= sig == SIGKILL;
	p->sigterm |= sig == SIGTERM;
	p->retire = retire;
	p->state = ST_STOPPING;
	p->at = mono_ms() + 60000;
	if (sig == SIGKILL)
		r->fig.kills++;
	else
		r->fig.terms++;
	r->fig.rebalances++;
}

/* Whether a worker ended with status 1 because its store was on the full
 * disk when it started: its last log line says so.  That is the refusal a
 * worker owes an operator, whether or not a SIGTERM was on its way. */
static int refused_full_disk(const run_t *r, const proc_t *p, int status)
{
	char log[PATH_MAX + 64], last[512];

	if (!WIFEXITED(status) || WEXITSTATUS(status) != 1)
		return 0;
	worker_log(r, p, log, sizeof(log));
	last_line(log, last, sizeof(last));
	return strstr(last, "tokenbox worker:") && strstr(last, "disk is full");
}

/* Collects ended workers: counts crashes and failures, schedules
 * restarts. */
static void reap(run_t *r, int restart)
{
	int64_t now = mono_ms();

	for (int i = 0; i < CH_WORKERS_MAX; i++) {
		proc_t *p = &r->procs[i];
		int status;

		if (p->state != ST_RUNNING && p->state != ST_STOPPING)
			continue;
		if (waitpid(p->pid, &status, WNOHANG) != p->pid) {
			if (p->state == ST_STOPPING && now > p->at) {
				say("worker %u (pid %d) ignored SIGTERM for "
				    "60 s: SIGKILL",
				    p->serial, (int)p->pid);
				log_tail(r, p, 70);
				r->fig.unclean_stops++;
				kill(p->pid, SIGKILL);
				p->sigkill = 1;
				p->at = now + 60000;
			}
			continue;
		}
		if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
		    !p->sigkill) {
			r->fig.crashes++;
			r->fig.rebalances++;
			VERBOSE(r, "worker %u died at a crash point",
				p->serial);
		} else if (p->sigterm && !p->sigkill &&
			   !(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
			   !(WIFSIGNALED(status) &&
			     WTERMSIG(status) == SIGTERM) &&
			   !refused_full_disk(r, p, status)) {
			/* SIGTERM before main() ends a young worker by the
			 * default action: not a failure.  Nor is a worker
			 * that was refusing to start on the full disk when
			 * the signal came.  Anything else is. */
			say("worker %u (pid %d, %s) stopped with status "
			    "0x%x: see %s",
			    p->serial, (int)p->pid, ch_group_names[p->group],
			    status, r->logs);
			log_tail(r, p, 70);
			r->fig.unclean_stops++;
		} else if (!p->sigkill &&
			   (!p->sigterm || refused_full_disk(r, p, status))) {
			char log[PATH_MAX + 64], last[512];
			worker_log(r, p, log, sizeof(log));
			last_line(log, last, sizeof(last));
			say("worker %u (pid %d, %s) ended by itself, status "
			    "0x%x: %s",
			    p->serial, (int)p->pid, ch_group_names[p->group],
			    status, last);
			r->fig.exits++;
			r->fig.rebalances++;
		}
		if (p->retire || !restart) {
			p->state = ST_FREE;
		} else {
			p->state = ST_RESTART;
			p->at = now + ch_between(&r->rng, 0, 800);
		}
	}
	for (int i = 0; i < CH_WORKERS_MAX; i++) {
		proc_t *p = &r->procs[i];
		if (p->state == ST_RESTART && now >= p->at)
			worker_spawn(r, p);
	}
}

/*
 * Disk trouble: the stores live on a small tmpfs that a ballast file fills.
 */

static int disk_mount(run_t *r)
{
	if (mkdir(r->store_dir, 0755) != 0 && errno != EEXIST)
		return -1;
	if (!r->o.disk_faults)
		return 0;
	if (mount("tbx-chaos", r->store_dir, "tmpfs", MS_NOSUID | MS_NODEV,
		  "size=256m,mode=0755") != 0) {
		say("disk faults off: cannot mount a tmpfs on %s: %s",
		    r->store_dir, strerror(errno));
		r->o.disk_faults = -1;
		return 0;
	}
	r->mounted = 1;
	return 0;
}

static void disk_fill(run_t *r)
{
	struct statvfs st;
	char buf[65536];
	int fd;

	snprintf(r->ballast, sizeof(r->ballast), "%s/ballast", r->store_dir);
	fd = open(r->ballast, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || statvfs(r->store_dir, &st) != 0) {
		say("disk fault: %s: %s", r->ballast, strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	memset(buf, 0, sizeof(buf));
	/* Fill it to the last byte. */
	for (;;) {
		ssize_t w = write(fd, buf, sizeof(buf));
		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			break;
		}
	}
	for (;;) {
		ssize_t w = write(fd, buf, 1);
		if (w <= 0)
			break;
	}
	close(fd);
	r->fig.disk_faults++;
	r->disk_free_at = mono_ms() + ch_between(&r->rng, 2000, 6000);
	VERBOSE(r, "disk fault: %s full", r->store_dir);
}

static void disk_free(run_t *r)
{
	if (!r->disk_free_at)
		return;
	unlink(r->ballast);
	r->disk_free_at = 0;
	VERBOSE(r, "disk fault over");
}

/*
 * Broker faults.
 */

typedef struct req_fault {
	const char *request;
	const char *errors[3];
} req_fault_t;

static const req_fault_t req_faults[] = {
    {"Produce",
     {"NOT_LEADER_FOR_PARTITION", "REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS"}},
    {"Fetch",
     {"NOT_LEADER_FOR_PARTITION", "UNKNOWN_TOPIC_OR_PART",
      "REPLICA_NOT_AVAILABLE"}},
    {"OffsetCommit",
     {"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "REQUEST_TIMED_OUT"}},
    {"JoinGroup",
     {"COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR",
      "COORDINATOR_NOT_AVAILABLE"}},
    {"Heartbeat",
     {"REBALANCE_IN_PROGRESS", "NOT_COORDINATOR",
      "COORDINATOR_LOAD_IN_PROGRESS"}},
};
/* Not attacked: SyncGroup errors, group coordinator moves, and the
 * coordinator's broker going down.  With them, librdkafka 2.0.2's mock
 * group coordinator aborts on its own assertions (member_sync_set and
 * member_add: !member->resp) when a member's JoinGroup or SyncGroup is
 * sent again while its first one is pending in the mock.  Every group is
 * coordinated by broker CH_COORDINATOR, set before any worker starts. */

/*
 * Broker faults on a real cluster started by scripts/kafka.sh --dir DIR:
 * node I's broker process is DIR/node-I/pid, and `kafka.sh restart`
 * brings it back on its storage.
 */

static pid_t node_pid(run_t *r, int node)
{
	char path[PATH_MAX];
	long pid = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/node-%d/pid", r->o.kafka_dir, node);
	if ((f = fopen(path, "r"))) {
		if (fscanf(f, "%ld", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	return (pid_t)pid;
}

/* The node whose broker leads the __consumer_offsets partition of
 * @p group: its coordinator (Utils.abs(groupId.hashCode()) % partitions,
 * as the broker computes it).  0 if unknown. */
static int coordinator_of(run_t *r, const char *group)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	const struct rd_kafka_metadata *md;
	rd_kafka_topic_t *rkt;
	rd_kafka_t *rk;
	int32_t h = 0;
	int node = 0;

	rd_kafka_conf_set(conf, "bootstrap.servers", r->bootstraps, NULL, 0);
	rd_kafka_conf_set(conf, "log_level", "0", NULL, 0);
	if (!(rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, NULL, 0))) {
		rd_kafka_conf_destroy(conf);
		return 0;
	}
	for (const char *c = group; *c; c++)
		h = (int32_t)((uint32_t)h * 31u + (unsigned char)*c);
	h = h == INT32_MIN ? 0 : h < 0 ? -h : h;
	rkt = rd_kafka_topic_new(rk, "__consumer_offsets", NULL);
	if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == 0) {
		if (md->topic_cnt == 1 && md->topics[0].partition_cnt > 0) {
			const struct rd_kafka_metadata_topic *t =
			    &md->topics[0];
			int32_t p = h % t->partition_cnt;
			for (int i = 0; i < t->partition_cnt; i++)
				if (t->partitions[i].id == p)
					node = t->partitions[i].leader;
		}
		rd_kafka_metadata_destroy(md);
	}
	rd_kafka_topic_destroy(rkt);
	rd_kafka_destroy(rk);
	return node > 0 && node <= r->node_count ? node : 0;
}

static void real_broker_fault(run_t *r)
{
	long kind = ch_between(&r->rng, 0, 2);
	int node = (int)ch_between(&r->rng, 1, r->node_count);
	const char *group = ch_group_names[ch_between(&r->rng, 0, 2)];
	pid_t pid;

	if (r->node_down || r->node_count < 2)
		return; /* one at a time: the others keep every partition */
	if (kind == 1 && !(node = coordinator_of(r, group)))
		return;
	if ((pid = node_pid(r, node)) <= 0 || kill(pid, 0) != 0)
		return;
	kill(pid, kind == 2 ? SIGTERM : SIGKILL);
	r->node_down = node;
	r->node_pid = pid;
	r->node_up_at = mono_ms() + ch_between(&r->rng, 1000, 5000);
	r->fig.broker_faults++;
	VERBOSE(r, "broker fault: node %d %s%s%s", node,
		kind == 2 ? "stopped (SIGTERM)" : "killed (SIGKILL)",
		kind == 1 ? ", coordinator of " : "", kind == 1 ? group : "");
}

/* Brings the node taken down back once its time came (@p all: now, and
 * waits for it). */
static void real_node_expire(run_t *r, int all)
{
	int status;

	if (!r->node_down)
		return;
	if (!r->restart_pid) {
		if (!all && mono_ms() < r->node_up_at)
			return;
		/* A stopped broker finishes its controlled shutdown first. */
		for (int64_t dl = mono_ms() + 60000;
		     kill(r->node_pid, 0) == 0 && (all || mono_ms() < dl);) {
			if (!all)
				return;
			usleep(100000);
		}
		char node[16], log[PATH_MAX + 32];
		snprintf(node, sizeof(node), "%d", r->node_down);
		snprintf(log, sizeof(log), "%s/kafka-restart.log", r->logs);
		if ((r->restart_pid = fork()) == 0) {
			int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
			if (fd >= 0) {
				dup2(fd, 1);
				dup2(fd, 2);
			}
			char *argv[] = {"bash",
					r->o.kafka_script,
					"restart",
					"--node",
					node,
					"--dir",
					(char *)r->o.kafka_dir,
					NULL};
			execvp(argv[0], argv);
			_exit(127);
		}
		if (r->restart_pid < 0) {
			r->restart_pid = 0;
			return;
		}
	}
	if (waitpid(r->restart_pid, &status, all ? 0 : WNOHANG) !=
	    r->restart_pid)
		return;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		say("node %d did not restart (see %s/kafka-restart.log)",
		    r->node_down, r->logs);
		r->restart_failed = 1;
	} else {
		VERBOSE(r, "node %d back", r->node_down);
	}
	r->restart_pid = 0;
	r->node_down = 0;
}

static void broker_fault(run_t *r)
{
	int64_t now = mono_ms();
	long kind = ch_between(&r->rng, 0, 4);
	int b = (int)ch_between(&r->rng, 1, CH_BROKERS);
	int ok = -1;

	if (r->o.bootstrap) {
		real_broker_fault(r);
		return;
	}
	switch (kind) {
	case 0: /* a broker down for a while (one at a time), never the
		 * groups' coordinator (see below) */
		if (r->broker_down || b == CH_COORDINATOR)
			return;
		if ((ok = ctl(r, "broker down %d", b)) == 0) {
			r->broker_down = b;
			r->broker_up_at = now + ch_between(&r->rng, 1000, 5000);
		}
		break;
	case 1:
	case 2: { /* request errors */
		const req_fault_t *f = &req_faults[ch_between(
		    &r->rng, 0,
		    sizeof(req_faults) / sizeof(req_faults[0]) - 1)];
		const char *e = f->errors[ch_between(&r->rng, 0, 2)];
		if (!e)
			e = f->errors[0];
		ok = ctl(r, "error %s %s %ld", f->request, e,
			 ch_between(&r->rng, 1, 5));
		break;
	}
	case 3: /* latency on one broker */
		if (r->rtt_broker)
			return;
		if ((ok = ctl(r, "rtt %d %ld", b,
			      ch_between(&r->rng, 20, 400))) == 0) {
			r->rtt_broker = b;
			r->rtt_clear_at = now + ch_between(&r->rng, 1000, 6000);
		}
		break;
	default: /* a leader moves */
		ok = ctl(r, "leader %s %ld %d",
			 ch_between(&r->rng, 0, 1) ? CH_EVENTS : CH_JOBS,
			 ch_between(&r->rng, 0, CH_PARTITIONS - 1), b);
		break;
	}
	if (ok == 0)
		r->fig.broker_faults++;
}

static void faults_expire(run_t *r, int all)
{
	int64_t now = mono_ms();

	real_node_expire(r, all);
	if (r->broker_down && (all || now >= r->broker_up_at)) {
		ctl(r, "broker up %d", r->broker_down);
		r->broker_down = 0;
	}
	if (r->rtt_broker && (all || now >= r->rtt_clear_at)) {
		ctl(r, "rtt %d 0", r->rtt_broker);
		r->rtt_broker = 0;
	}
	if (r->disk_free_at && (all || now >= r->disk_free_at))
		disk_free(r);
	if (all && r->o.broker_faults && !r->o.bootstrap)
		for (size_t i = 0;
		     i < sizeof(req_faults) / sizeof(req_faults[0]); i++)
			ctl(r, "clear %s", req_faults[i].request);
}

/*
 * The upstream service: a publisher thread that spreads the jobs over the
 * first 80% of the attacks.
 */

static void *publisher_main(void *arg)
{
	run_t *r = arg;
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;
	char err[512], key[32], job[32];
	long next = 0;

	tbx_conf_set(conf, "kafka.bootstrap.servers", r->bootstraps, NULL, 0);
	if (r->stores.url) {
		tbx_conf_set(conf, "tokens.url", r->tokens_url, NULL, 0);
		tbx_conf_set(conf, "tokens.schema", r->tokens, NULL, 0);
	} else {
		tbx_conf_set(conf, "tokens.path", r->tokens, NULL, 0);
	}
	tbx_conf_set(conf, "tokens.format", r->o.token_sets ? "set" : "message",
		     NULL, 0);
	tbx_conf_set(conf, "log.level", "error", NULL, 0);
	if (!(pub = tbx_publisher_new(conf, err, sizeof(err)))) {
		say("publisher: %s", err);
		tbx_conf_destroy(conf);
		return NULL;
	}
	while (next < r->o.messages && !atomic_load(&r->pub_stop)) {
		int64_t now = mono_ms(), span = r->pub_end_ms - r->pub_start_ms;
		long due = span <= 0 || now >= r->pub_end_ms
			       ? r->o.messages
			       : (long)((double)r->o.messages *
					(double)(now - r->pub_start_ms) /
					(double)span);
		if (due <= next) {
			usleep(20000);
			continue;
		}
		for (long n = 0; next < due && n < 200; next++, n++) {
			snprintf(key, sizeof(key), "key-%ld", next % 211);
			snprintf(job, sizeof(job), "job-%ld", next);
			tbx_out_t out = {.topic = CH_JOBS,
					 .type = "Job",
					 .key = key,
					 .key_len = strlen(key),
					 .payload = job,
					 .payload_len = strlen(job)};
			if (tbx_publish(pub, &out) != TBX_OK) {
				say("publisher: %s", tbx_publisher_errstr(pub));
				goto out;
			}
		}
		/* A failed flush keeps the batch and its ids: retry. */
		while (tbx_publisher_flush(pub, NULL) != TBX_OK &&
		       !atomic_load(&r->pub_stop)) {
			VERBOSE(r, "publisher: %s (retrying)",
				tbx_publisher_errstr(pub));
			usleep(200000);
		}
		atomic_store(&r->published, next);
	}
out:
	tbx_publisher_destroy(pub);
	return NULL;
}

/*
 * The run.
 */

/* @returns 1 (and says why) if the mock cluster process has ended: the
 * run cannot go on. */
static int cluster_gone(run_t *r)
{
	char log[PATH_MAX + 32], last[512];
	int status;

	if (r->mc_pid <= 0 || waitpid(r->mc_pid, &status, WNOHANG) != r->mc_pid)
		return 0;
	r->mc_pid = -1;
	snprintf(log, sizeof(log), "%s/mock-cluster.log", r->logs);
	last_line(log, last, sizeof(last));
	say("mock-cluster ended (status 0x%x): %s", status, last);
	return 1;
}

static int settled(run_t *r)
{
	char db[PATH_MAX + 32];

	char sql[128];

	for (int g = 0; g < CH_GROUPS; g++) {
		ch_store_name(db, sizeof(db), &r->stores, g);
		snprintf(sql, sizeof(sql), "SELECT COUNT(DISTINCT job) FROM %s",
			 ch_effects_tables[g]);
		if (ch_count(&r->stores, db, sql) < r->o.messages ||
		    ch_outbox_left(&r->stores, db, ch_group_names[g]) != 0)
			return 0;
	}
	return ch_tokens_left(&r->stores, r->tokens) == 0 &&
	       ch_registrations_left(&r->stores, r->tokens) == 0;
}

static void progress(run_t *r, const char *phase)
{
	char db[PATH_MAX + 32];
	long done[CH_GROUPS];

	for (int g = 0; g < CH_GROUPS; g++) {
		char sql[128];

		ch_store_name(db, sizeof(db), &r->stores, g);
		snprintf(sql, sizeof(sql), "SELECT COUNT(DISTINCT job) FROM %s",
			 ch_effects_tables[g]);
		done[g] = ch_count(&r->stores, db, sql);
	}
	say("%s: published %ld/%d, handled a=%ld b=%ld c=%ld, kills %ld, "
	    "crashes %ld, broker faults %ld, disk faults %ld",
	    phase, atomic_load(&r->published), r->o.messages, done[0], done[1],
	    done[2], r->fig.kills, r->fig.crashes, r->fig.broker_faults,
	    r->fig.disk_faults);
}

static void attack(run_t *r)
{
	long what = ch_between(&r->rng, 0, 99);
	proc_t *p;

	if (what < 25) { /* SIGKILL, restarted shortly */
		if ((p = pick_running(r)))
			stop(r, p, SIGKILL, 0);
	} else if (what < 32) { /* a clean stop and restart */
		if ((p = pick_running(r)))
			stop(r, p, SIGTERM, 0);
	} else if (what < 45) { /* scale a group up or down */
		int g = (int)ch_between(&r->rng, 0, CH_GROUPS - 1);
		if (ch_between(&r->rng, 0, 1) &&
		    group_size(r, g) < CH_PER_GROUP_MAX &&
		    (p = proc_new(r, g))) {
			worker_spawn(r, p);
			r->fig.rebalances++;
			VERBOSE(r, "scale up %s", ch_group_names[g]);
		} else if (group_size(r, g) > 1) {
			for (int i = 0; i < CH_WORKERS_MAX; i++) {
				p = &r->procs[i];
				if (p->state == ST_RUNNING && p->group == g) {
					stop(r, p,
					     ch_between(&r->rng, 0, 1)
						 ? SIGTERM
						 : SIGKILL,
					     1);
					VERBOSE(r, "scale down %s",
						ch_group_names[g]);
					break;
				}
			}
		}
	} else if (what < 75) {
		if (r->o.broker_faults)
			broker_fault(r);
	} else if (what < 83) {
		if (r->o.disk_faults > 0 && !r->disk_free_at)
			disk_fill(r);
	} else if (atomic_load(&r->published) > 0) { /* upstream re-sends */
		long n = ch_resend(r->bootstraps, CH_JOBS, CH_PARTITIONS,
				   &r->rng, ch_between(&r->rng, 1, 50));
		r->fig.resent += n;
		VERBOSE(r, "re-sent %ld jobs", n);
	}
}

/* Counts the workers' reports of a full disk. */
static long disk_reports(const run_t *r)
{
	char cmd[PATH_MAX + 128], line[64];
	long n = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd),
		 "cat '%s'/worker-*.log 2>/dev/null | grep -c 'disk is full'",
		 r->logs);
	if ((f = popen(cmd, "r"))) {
		if (fgets(line, sizeof(line), f))
			n = strtol(line, NULL, 10);
		pclose(f);
	}
	return n;
}

static int subscribe_groups(run_t *r)
{
	static const char *const topic_of[CH_GROUPS] = {CH_JOBS, CH_EVENTS,
							CH_EVENTS};
	tbx__db_opts_t opts;
	tbx_tokens_t *t;
	char err[512];
	int64_t since;
	int rc = 0;

	tbx__db_opts_init(&opts);
	if ((r->stores.url
		 ? tbx_tokens_pg_open(r->tokens_url, r->tokens, NULL, &opts, &t,
				      err, sizeof(err))
		 : tbx_tokens_sqlite_open(r->tokens, &opts, NULL, &t, err,
					  sizeof(err))) != TBX_OK) {
		say("token store: %s", err);
		return -1;
	}
	for (int g = 0; g < CH_GROUPS && !rc; g++)
		rc = tbx_tokens_subscribe(t, topic_of[g], ch_group_names[g],
					  &since);
	tbx_tokens_close(t);
	return rc ? -1 : 0;
}

/* A real cluster: the pipeline's topics and groups afresh, and its
 * nodes for broker faults. */
static int real_setup(run_t *r)
{
	const char *topics[4] = {CH_JOBS, CH_EVENTS, CH_JOBS ".dlq",
				 CH_EVENTS ".dlq"};
	const int parts[4] = {CH_PARTITIONS, CH_PARTITIONS, 1, 1};
	char err[512], path[PATH_MAX];
	FILE *f;

	snprintf(r->bootstraps, sizeof(r->bootstraps), "%s", r->o.bootstrap);
	if (tbx_cli_delete_topics(r->bootstraps, topics, 4, 60000, err,
				  sizeof(err)) ||
	    tbx_cli_delete_groups(r->bootstraps, ch_group_names, CH_GROUPS,
				  60000, err, sizeof(err)) ||
	    tbx_cli_create_topics(r->bootstraps, topics, parts, 4, 60000, err,
				  sizeof(err))) {
		say("%s: %s", r->bootstraps, err);
		return -1;
	}
	if (!r->o.kafka_dir) {
		r->o.broker_faults = 0;
		return 0;
	}
	snprintf(path, sizeof(path), "%s/brokers", r->o.kafka_dir);
	if (!(f = fopen(path, "r")) || fscanf(f, "%d", &r->node_count) != 1) {
		say("--kafka-dir: %s: no cluster of scripts/kafka.sh", path);
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	return 0;
}

static int run(run_t *r)
{
	int64_t end, next_attack, next_progress;
	int rc = 2;

	t0 = mono_ms();
	snprintf(r->store_dir, sizeof(r->store_dir), "%s/stores", r->dir);
	snprintf(r->logs, sizeof(r->logs), "%s/logs", r->dir);
	r->stores.url = r->o.store_url;
	r->stores.dir = r->store_dir;
	r->stores.one_file = r->o.one_file;
	snprintf(r->stores.prefix, sizeof(r->stores.prefix), "chaos_%d",
		 (int)getpid());
	ch_tokens_name(r->tokens, sizeof(r->tokens), &r->stores);
	if (mkdir(r->logs, 0755) != 0 || disk_mount(r) != 0) {
		say("cannot set up %s: %s", r->dir, strerror(errno));
		return 2;
	}
	if (r->stores.url) {
		char err[512];
		const char *url = r->stores.url;
		/* --layout files: another text, so that the workers reach
		 * the token store through a connection of its own. */
		if (r->o.one_file)
			snprintf(r->tokens_url, sizeof(r->tokens_url), "%s",
				 url);
		else if (strncmp(url, "postgres", 8) == 0) /* a URL */
			snprintf(r->tokens_url, sizeof(r->tokens_url),
				 "%s%capplication_name=tbx-chaos-tokens", url,
				 strchr(url, '?') ? '&' : '?');
		else /* key=value … */
			snprintf(r->tokens_url, sizeof(r->tokens_url),
				 "%s application_name=tbx-chaos-tokens", url);
		if (ch_pg_setup(&r->stores, err, sizeof(err)) != 0) {
			say("--store-url: %s", err);
			return 2;
		}
	}
	if (r->o.bootstrap) {
		if (real_setup(r) != 0)
			return 2;
	} else if (mc_start(r) != 0 ||
		   ctl_line(r, r->bootstraps, sizeof(r->bootstraps), 30000) !=
		       0) {
		say("mock-cluster did not start (see %s/mock-cluster.log)",
		    r->logs);
		return 2;
	}
	if (r->o.broker_faults && !r->o.bootstrap && ctl(r, "help") != 0) {
		say("mock-cluster has no control channel");
		return 2;
	}
	for (int g = 0; g < CH_GROUPS && r->o.broker_faults && !r->o.bootstrap;
	     g++)
		if (ctl(r, "coordinator group %s %d", ch_group_names[g],
			CH_COORDINATOR) != 0)
			return 2;
	if (subscribe_groups(r) != 0)
		return 2;
	char where[sizeof(r->tokens) + 160];
	if (r->stores.url)
		snprintf(where, sizeof(where),
			 "PostgreSQL schemas %s_svc_a.._c and %s (%s)",
			 r->stores.prefix, r->tokens,
			 r->o.one_file ? "the joined path"
				       : "the tokens on a connection of "
					 "their own");
	else
		snprintf(where, sizeof(where), "%s",
			 r->o.one_file ? "one file" : "a file per service");
	say("seed %llu, %d jobs, %d workers, %ds of attacks, crash "
	    "probability %g, broker faults %s, disk faults %s, stores in %s, "
	    "outbox.layout=%s, tokens.format=%s; run directory %s",
	    (unsigned long long)r->o.seed, r->o.messages, r->o.workers,
	    r->o.duration_s, r->o.crash_prob, r->o.broker_faults ? "on" : "off",
	    r->o.disk_faults > 0 ? "on" : "off", where,
	    r->o.batch_rows ? "batch" : "record",
	    r->o.token_sets ? "set" : "message", r->dir);
	for (int i = 0; i < r->o.workers; i++)
		worker_spawn(r, proc_new(r, i % CH_GROUPS));

	r->pub_start_ms = mono_ms();
	end = r->pub_start_ms + (int64_t)r->o.duration_s * 1000;
	r->pub_end_ms = r->pub_start_ms + (int64_t)r->o.duration_s * 800;
	if (pthread_create(&r->pub_thread, NULL, publisher_main, r) != 0) {
		say("cannot start the publisher thread");
		return 2;
	}
	next_attack = mono_ms() + 1000;
	next_progress = mono_ms() + 10000;
	while (!interrupted && mono_ms() < end) {
		if (cluster_gone(r)) {
			atomic_store(&r->pub_stop, 1);
			pthread_join(r->pub_thread, NULL);
			return 2;
		}
		reap(r, 1);
		faults_expire(r, 0);
		if (mono_ms() >= next_attack) {
			attack(r);
			next_attack =
			    mono_ms() + ch_between(&r->rng, 200, 1500);
		}
		if (mono_ms() >= next_progress) {
			progress(r, "attacks");
			next_progress = mono_ms() + 10000;
		}
		usleep(50000);
	}

	/* The drain: faults undone, armed workers replaced by clean ones,
	 * every group at its starting size. */
	faults_expire(r, 1);
	for (int i = 0; i < CH_WORKERS_MAX; i++) {
		proc_t *p = &r->procs[i];
		if (p->state == ST_RUNNING && p->armed)
			stop(r, p, SIGTERM, 0);
	}
	r->o.crash_prob = 0;
	for (int g = 0; g < CH_GROUPS; g++)
		while (group_size(r, g) <
		       (r->o.workers + CH_GROUPS - 1 - g) / CH_GROUPS) {
			proc_t *p = proc_new(r, g);
			if (!p)
				break;
			worker_spawn(r, p);
		}
	progress(r, "attacks over");
	int64_t drain_start = mono_ms();
	end = drain_start + (int64_t)r->o.drain_s * 1000;
	next_progress = mono_ms() + 10000;
	int ok = 0;
	while (!interrupted && mono_ms() < end) {
		if (cluster_gone(r)) {
			atomic_store(&r->pub_stop, 1);
			pthread_join(r->pub_thread, NULL);
			return 2;
		}
		reap(r, 1);
		if (atomic_load(&r->published) >= r->o.messages &&
		    (ok = settled(r))) {
			r->fig.drain_ms = (long)(mono_ms() - drain_start);
			break;
		}
		if (mono_ms() >= next_progress) {
			progress(r, "drain");
			next_progress = mono_ms() + 10000;
		}
		usleep(250000);
	}
	atomic_store(&r->pub_stop, 1);
	pthread_join(r->pub_thread, NULL);
	r->fig.published = atomic_load(&r->published);
	if (!ok)
		say("the pipeline did not settle within %ds", r->o.drain_s);
	else
		progress(r, "settled");

	/* Every worker stops cleanly. */
	for (int i = 0; i < CH_WORKERS_MAX; i++)
		if (r->procs[i].state == ST_RUNNING)
			stop(r, &r->procs[i], SIGTERM, 1);
	for (int64_t dl = mono_ms() + 90000; mono_ms() < dl;) {
		int busy = 0;
		reap(r, 0);
		for (int i = 0; i < CH_WORKERS_MAX; i++)
			busy |= r->procs[i].state != ST_FREE;
		if (!busy)
			break;
		usleep(100000);
	}
	r->fig.disk_reports = disk_reports(r);
	rc = ch_validate(&r->stores, r->bootstraps, r->o.messages,
			 r->o.token_sets, &r->fig);
	if (rc < 0)
		rc = 2;
	if (!ok || r->fig.unclean_stops || interrupted)
		rc = rc ? rc : 1;
	if (r->restart_failed)
		rc = 2;
	return rc;
}

static void teardown(run_t *r)
{
	for (int i = 0; i < CH_WORKERS_MAX; i++)
		if (r->procs[i].state == ST_RUNNING ||
		    r->procs[i].state == ST_STOPPING) {
			kill(r->procs[i].pid, SIGKILL);
			waitpid(r->procs[i].pid, NULL, 0);
		}
	if (r->mc_pid > 0) {
		close(r->ctl_in);
		kill(r->mc_pid, SIGTERM);
		waitpid(r->mc_pid, NULL, 0);
		close(r->ctl_out);
	}
	if (r->mounted && umount2(r->store_dir, MNT_DETACH) != 0)
		say("umount %s: %s", r->store_dir, strerror(errno));
	if (r->stores.url)
		ch_pg_close();
}

static int parse_long(const char *opt, const char *arg, long lo, long hi,
		      long *out)
{
	long long v;

	if (tbx_cli_to_int(arg, lo, hi, &v) != 0) {
		fprintf(stderr,
			"tbx_chaos: %s: '%s' is not an integer in %ld..%ld\n",
			opt, arg, lo, hi);
		return -1;
	}
	*out = (long)v;
	return 0;
}

static int parse_args(int argc, char **argv, ch_opts_t *o)
{
	static const struct option longopts[] = {
	    {"seed", required_argument, NULL, 's'},
	    {"duration", required_argument, NULL, 'd'},
	    {"drain", required_argument, NULL, 'D'},
	    {"messages", required_argument, NULL, 'm'},
	    {"workers", required_argument, NULL, 'w'},
	    {"crash-prob", required_argument, NULL, 'p'},
	    {"no-broker-faults", no_argument, NULL, 'B'},
	    {"no-disk-faults", no_argument, NULL, 'K'},
	    {"layout", required_argument, NULL, 'L'},
	    {"store-url", required_argument, NULL, 'U'},
	    {"outbox-layout", required_argument, NULL, 'O'},
	    {"tokens-format", required_argument, NULL, 'F'},
	    {"dir", required_argument, NULL, 'R'},
	    {"keep", no_argument, NULL, 'k'},
	    {"tokenbox", required_argument, NULL, 'T'},
	    {"plugin", required_argument, NULL, 'P'},
	    {"bootstrap-servers", required_argument, NULL, 'b'},
	    {"kafka-dir", required_argument, NULL, 'Z'},
	    {"kafka-script", required_argument, NULL, 'S'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	char self[PATH_MAX];
	ssize_t n;
	long v;
	int c;

	o->seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	o->duration_s = 60;
	o->drain_s = 240;
	o->messages = 5000;
	o->workers = 5;
	o->crash_prob = 0.002;
	o->broker_faults = 1;
	o->disk_faults = 1;
	o->one_file = 1;
	/* Defaults: the build tree, <build>/tests/chaos/tbx_chaos. */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	const char *here = dirname(self);
	snprintf(o->plugin, sizeof(o->plugin), "%s/libtbx_chaos.so", here);
	snprintf(o->tokenbox, sizeof(o->tokenbox), "%s/../../tokenbox", here);
	snprintf(o->kafka_script, sizeof(o->kafka_script),
		 "%s/scripts/kafka.sh", TBX_CHAOS_SOURCE_DIR);
	while ((c = getopt_long(argc, argv, "s:d:D:m:w:p:b:vh", longopts,
				NULL)) != -1) {
		switch (c) {
		case 's': {
			char *end;
			errno = 0;
			o->seed = strtoull(optarg, &end, 10);
			if (errno || end == optarg || *end ||
			    optarg[0] == '-') {
				fprintf(stderr,
					"tbx_chaos: --seed: '%s' is not a "
					"non-negative integer\n",
					optarg);
				return 2;
			}
			break;
		}
		case 'd':
			if (parse_long("--duration", optarg, 5, 86400, &v))
				return 2;
			o->duration_s = (int)v;
			break;
		case 'D':
			if (parse_long("--drain", optarg, 10, 3600, &v))
				return 2;
			o->drain_s = (int)v;
			break;
		case 'm':
			if (parse_long("--messages", optarg, 1, 10000000, &v))
				return 2;
			o->messages = (int)v;
			break;
		case 'w':
			if (parse_long("--workers", optarg, 3, 12, &v))
				return 2;
			o->workers = (int)v;
			break;
		case 'p': {
			char *end;
			errno = 0;
			o->crash_prob = strtod(optarg, &end);
			if (errno || end == optarg || *end ||
			    !(o->crash_prob >= 0 && o->crash_prob <= 0.1)) {
				fprintf(stderr,
					"tbx_chaos: --crash-prob: '%s' is not "
					"a number in [0, 0.1]\n",
					optarg);
				return 2;
			}
			break;
		}
		case 'B':
			o->broker_faults = 0;
			break;
		case 'K':
			o->disk_faults = 0;
			break;
		case 'L':
			if (strcmp(optarg, "one") == 0 ||
			    strcmp(optarg, "files") == 0) {
				o->one_file = optarg[0] == 'o';
				break;
			}
			fprintf(stderr,
				"tbx_chaos: --layout: '%s' is neither 'one' "
				"nor 'files'\n",
				optarg);
			return 2;
		case 'U':
			if (!*optarg) {
				fprintf(stderr, "tbx_chaos: --store-url: "
						"empty\n");
				return 2;
			}
			o->store_url = optarg;
			break;
		case 'O':
			if (strcmp(optarg, "record") == 0 ||
			    strcmp(optarg, "batch") == 0) {
				o->batch_rows = optarg[0] == 'b';
				break;
			}
			fprintf(stderr,
				"tbx_chaos: --outbox-layout: '%s' is neither "
				"'record' nor 'batch'\n",
				optarg);
			return 2;
		case 'F':
			if (strcmp(optarg, "message") == 0 ||
			    strcmp(optarg, "set") == 0) {
				o->token_sets = optarg[0] == 's';
				break;
			}
			fprintf(stderr,
				"tbx_chaos: --tokens-format: '%s' is neither "
				"'message' nor 'set'\n",
				optarg);
			return 2;
		case 'R':
			o->dir = optarg;
			break;
		case 'k':
			o->keep = 1;
			break;
		case 'T':
			snprintf(o->tokenbox, sizeof(o->tokenbox), "%s",
				 optarg);
			break;
		case 'P':
			snprintf(o->plugin, sizeof(o->plugin), "%s", optarg);
			break;
		case 'b':
			if (!*optarg) {
				fprintf(stderr, "tbx_chaos: "
						"--bootstrap-servers: empty\n");
				return 2;
			}
			o->bootstrap = optarg;
			break;
		case 'Z':
			o->kafka_dir = optarg;
			break;
		case 'S':
			snprintf(o->kafka_script, sizeof(o->kafka_script), "%s",
				 optarg);
			break;
		case 'v':
			o->verbose++;
			break;
		case 'h':
			fputs(usage_text, stdout);
			exit(0);
		default:
			fprintf(stderr, "Try 'tbx_chaos --help'.\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "tbx_chaos: unexpected argument '%s'\n",
			argv[optind]);
		return 2;
	}
	if (access(o->tokenbox, X_OK) != 0) {
		fprintf(stderr, "tbx_chaos: --tokenbox: %s: %s\n", o->tokenbox,
			strerror(errno));
		return 2;
	}
	if (o->token_sets && !o->batch_rows) {
		fprintf(stderr, "tbx_chaos: --tokens-format set needs "
				"--outbox-layout batch (a worker on "
				"outbox.layout=record refuses "
				"tokens.format=set)\n");
		return 2;
	}
	/* The disk under a PostgreSQL server is not the harness's to fill:
	 * the summary says disk_faults=off. */
	if (o->store_url)
		o->disk_faults = 0;
	if (o->kafka_dir && !o->bootstrap) {
		fprintf(stderr, "tbx_chaos: --kafka-dir needs "
				"--bootstrap-servers\n");
		return 2;
	}
	if (o->kafka_dir && access(o->kafka_script, R_OK) != 0) {
		fprintf(stderr, "tbx_chaos: --kafka-script: %s: %s\n",
			o->kafka_script, strerror(errno));
		return 2;
	}
	if (access(o->plugin, R_OK) != 0) {
		fprintf(stderr, "tbx_chaos: --plugin: %s: %s\n", o->plugin,
			strerror(errno));
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static run_t r;
	struct sigaction sa;
	int rc;

	if ((rc = parse_args(argc, argv, &r.o)))
		return rc;
	r.rng = r.o.seed ? r.o.seed : 1;
	if (r.o.dir) {
		snprintf(r.dir, sizeof(r.dir), "%s", r.o.dir);
		if (mkdir(r.dir, 0755) != 0) {
			fprintf(stderr, "tbx_chaos: --dir: %s: %s\n", r.dir,
				strerror(errno));
			return 2;
		}
	} else {
		const char *tmp = getenv("TMPDIR");
		snprintf(r.dir, sizeof(r.dir), "%s/tbx-chaos.XXXXXX",
			 tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(r.dir)) {
			fprintf(stderr, "tbx_chaos: mkdtemp %s: %s\n", r.dir,
				strerror(errno));
			return 2;
		}
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	r.fig.drain_ms = -1;
	rc = run(&r);
	teardown(&r);

	const ch_figures_t *f = &r.fig;
	char disk[32];
	if (r.o.disk_faults > 0)
		snprintf(disk, sizeof(disk), "%ld", f->disk_faults);
	else
		snprintf(disk, sizeof(disk), "off");
	/* From the end of the attacks until every job was handled and
	 * nothing was left: "-" when that never came. */
	char drain[32] = "-";
	if (f->drain_ms >= 0)
		snprintf(drain, sizeof(drain), "%.1fs",
			 (double)f->drain_ms / 1000.0);
	if (rc == 2) /* nothing was validated: no figures to show */
		printf("chaos: seed=%llu duration=%ds aborted: the run could "
		       "not be carried out (see the messages above)\n",
		       (unsigned long long)r.o.seed, r.o.duration_s);
	else
		printf(
		    "chaos: seed=%llu duration=%ds store=%s layout=%s "
		    "outbox_layout=%s "
		    "tokens_format=%s messages=%ld resent=%ld "
		    "kills=%ld crashes=%ld stops=%ld rebalances=%ld "
		    "broker_faults=%ld disk_faults=%s handled_once=%ld "
		    "duplicated=%ld lost=%ld dead_lettered=%ld tokens_left=%ld "
		    "registrations_left=%ld outbox_left=%ld drain=%s\n",
		    (unsigned long long)r.o.seed, r.o.duration_s,
		    r.o.store_url ? "postgresql" : "sqlite",
		    r.o.one_file ? "one" : "files",
		    r.o.batch_rows ? "batch" : "record",
		    r.o.token_sets ? "set" : "message", f->published, f->resent,
		    f->kills, f->crashes, f->terms, f->rebalances,
		    f->broker_faults, disk, f->handled_once, f->duplicated,
		    f->lost, f->dead_lettered, f->tokens_left,
		    f->registrations_left, f->outbox_left, drain);
	if (f->disk_faults)
		fprintf(stderr,
			"chaos: workers reported a full disk %ld time(s)\n",
			f->disk_reports);
	if (f->exits || f->unclean_stops)
		fprintf(stderr,
			"chaos: %ld worker(s) ended by themselves, %ld did "
			"not stop cleanly (logs in %s)\n",
			f->exits, f->unclean_stops, r.logs);
	if (rc == 0 && !r.o.keep && !f->exits) {
		char cmd[PATH_MAX + 16], err[512];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r.dir);
		if (system(cmd) != 0)
			fprintf(stderr, "tbx_chaos: could not remove %s\n",
				r.dir);
		if (r.stores.url && ch_pg_drop(&r.stores, err, sizeof(err)))
			fprintf(stderr,
				"tbx_chaos: could not drop the schemas "
				"%s_*: %s\n",
				r.stores.prefix, err);
	} else {
		fprintf(stderr, "chaos: run directory kept: %s\n", r.dir);
		if (r.stores.url)
			fprintf(stderr,
				"chaos: schemas kept: %s_svc_a, %s_svc_b, "
				"%s_svc_c, %s\n",
				r.stores.prefix, r.stores.prefix,
				r.stores.prefix, r.tokens);
	}
	return rc;
}
