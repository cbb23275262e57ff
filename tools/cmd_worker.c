/*
 * `tokenbox worker`: one worker process whose handlers come from plugins,
 * run until SIGTERM or SIGINT.
 *
 * Start-up goes in this order, so that nothing is created before the
 * configuration is known to be good:
 *   1. the configuration: --config FILE, then every -X in order, into a
 *      tbx_conf_t; the command's own keys (plugin, plugin.args) are kept
 *      aside, everything else goes through tbx_conf_set(), which names the
 *      key, the value and why it refuses one;
 *   2. every plugin is dlopen()ed and its ABI version checked;
 *   3. tbx_worker_new(): required keys, stores opened (created, migrated);
 *   4. every plugin's tbx_plugin_init() registers its handlers;
 *   5. tbx_worker_run() until a signal.
 *
 * Shutdown.  The first SIGTERM/SIGINT calls tbx_worker_stop(), so that
 * tbx_worker_run() finishes the batch in hand (dispatch, commit), leaves
 * the group and returns; the command then destroys the worker (closing the
 * stores), unloads the plugins and exits 0.  The same signal arms a timer
 * of shutdown.timeout.ms that ends the process with status 1 if that takes
 * too long, and a second SIGTERM/SIGINT ends it at once with 128 + signal.
 * Both exits are safe: the protocol resumes unfinished work on restart.
 *
 * Only the public API is used, like any program embedding the library, plus
 * dlopen() for the plugins; the executable exports the API to them (see
 * CMakeLists.txt).
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tokenbox/tokenbox.h"
#include "tools/cli.h"

#define CMD "worker"

/* stats.interval.ms of the command unless configured: the library's
 * default is 0 (off), a long-running service wants the line. */
#define STATS_DEFAULT_MS "60000"

static void usage(void)
{
	printf(
	    "Usage: tokenbox worker [--config FILE] [-X KEY=VALUE]...\n"
	    "\n"
	    "Runs one tokenbox worker -- a member of one Kafka consumer group "
	    "whose\n"
	    "handlers come from plugins -- until SIGTERM or SIGINT.\n"
	    "\n"
	    "Options:\n"
	    "  -c, --config FILE  read the configuration from FILE\n"
	    "  -X KEY=VALUE       set KEY after FILE was read; repeat for "
	    "more keys\n"
	    "                     (the last value of a key wins)\n"
	    "  -h, --help         show this help\n"
	    "\n"
	    "Configuration.  FILE holds one KEY=VALUE per line, as "
	    "librdkafka's tools\n"
	    "read them: spaces around the key and the value are removed; "
	    "blank lines\n"
	    "and lines whose first non-blank character is '#' are skipped "
	    "(a '#'\n"
	    "elsewhere is part of the value).  The keys are those of\n"
	    "docs/configuration.md; 'kafka.' ones go to librdkafka.  Each is "
	    "checked\n"
	    "as it is read: an unknown key or a bad value stops the command "
	    "with a\n"
	    "message naming the line (FILE:LINE, or -X), the key, the value "
	    "and why.\n"
	    "group.id, store.path and kafka.bootstrap.servers are required.  "
	    "Two keys\n"
	    "belong to this command:\n"
	    "  plugin=PATH        load the handler plugin PATH, a shared "
	    "object "
	    "(as\n"
	    "                     dlopen(3) finds it: give a path with a '/'); "
	    "repeat\n"
	    "                     for more plugins.  At least one is "
	    "required.\n"
	    "  plugin.args=TEXT   passed to the tbx_plugin_init() of the "
	    "plugin named\n"
	    "                     last before it (default: empty)\n"
	    "Unless set, stats.interval.ms is 60000 here: one JSON line of "
	    "counters on\n"
	    "standard error a minute.\n"
	    "\n"
	    "Plugins.  A plugin exports tbx_plugin_abi_version() and "
	    "tbx_plugin_init()\n"
	    "(TBX_PLUGIN() of <tokenbox/plugin.h> defines both) and does not "
	    "link\n"
	    "libtokenbox: this command provides the library.  One built for "
	    "another\n"
	    "plugin ABI version than this tokenbox's (%d) is refused.  Its "
	    "init\n"
	    "registers handlers; one that fails stops the command.  See\n"
	    "docs/handlers.md.\n"
	    "\n"
	    "Signals.  The first SIGTERM or SIGINT stops the worker after the "
	    "batch in\n"
	    "hand: the batch is finished, dispatched and committed, the worker "
	    "leaves\n"
	    "the group, the stores are closed, and the command exits 0.  If "
	    "that takes\n"
	    "longer than shutdown.timeout.ms (default 30000), the command "
	    "exits "
	    "1.  A\n"
	    "second SIGTERM or SIGINT exits at once with status 128 + signal "
	    "(143 for\n"
	    "SIGTERM, 130 for SIGINT).  Both are safe: the protocol resumes "
	    "unfinished\n"
	    "work on restart, though the partitions wait for the group's "
	    "session\n"
	    "timeout before another member gets them.\n"
	    "\n"
	    "Logs go to standard error (log.level).\n"
	    "\n"
	    "Exit status: 0 after a clean stop; 1 when the worker failed (a "
	    "store that\n"
	    "cannot be opened, a fatal store or Kafka error) or "
	    "shutdown.timeout.ms\n"
	    "passed; 2 for a bad command line, configuration or plugin "
	    "(nothing was\n"
	    "consumed); 128 + N after a second signal N.\n"
	    "\n"
	    "Example:\n"
	    "  $ cat /etc/tokenbox/billing.conf\n"
	    "  # billing: one worker of the consumer group 'billing'\n"
	    "  kafka.bootstrap.servers=kafka1:9092,kafka2:9092\n"
	    "  group.id=billing\n"
	    "  store.path=/var/lib/billing/service.db\n"
	    "  tokens.path=/var/lib/pipeline/tokens.db\n"
	    "  plugin=/usr/local/lib/tokenbox/billing.so\n"
	    "  plugin.args=currency=EUR\n"
	    "  $ tokenbox worker --config /etc/tokenbox/billing.conf -X "
	    "log.level=info\n",
	    TBX_PLUGIN_ABI_VERSION);
}

/* A plugin= entry, in configuration order. */
typedef struct plugin {
	char *path;
	char *args;  /* plugin.args, or NULL */
	char *where; /* "FILE:LINE" or "-X", for messages */
	void *handle;
	tbx_plugin_init_fn init;
} plugin_t;

typedef struct worker_cmd {
	tbx_conf_t *conf; /* ours until tbx_worker_new() succeeds */
	plugin_t *plugins;
	size_t plugin_cnt, plugin_cap;
	int stats_set; /* stats.interval.ms was configured */
} worker_cmd_t;

static int out_of_memory(void)
{
	return tbx_cli_fail(CMD, "out of memory");
}

static int plugin_add(worker_cmd_t *w, const char *where, const char *path)
{
	plugin_t *p;

	if (w->plugin_cnt == w->plugin_cap) {
		size_t cap = w->plugin_cap ? w->plugin_cap * 2 : 4;
		plugin_t *grown = realloc(w->plugins, cap * sizeof(*grown));
		if (!grown)
			return out_of_memory();
		w->plugins = grown;
		w->plugin_cap = cap;
	}
	p = &w->plugins[w->plugin_cnt];
	memset(p, 0, sizeof(*p));
	p->path = strdup(path);
	p->where = strdup(where);
	if (!p->path || !p->where) {
		free(p->path);
		free(p->where);
		return out_of_memory();
	}
	w->plugin_cnt++;
	return 0;
}

/*
 * Applies KEY=VALUE read at @p where ("FILE:LINE" or "-X").
 * @returns 0, or an exit status after printing why.
 */
static int apply(worker_cmd_t *w, const char *where, const char *key,
		 const char *value)
{
	char errstr[512];
	int err;

	if (strcmp(key, "plugin") == 0) {
		if (!*value)
			return tbx_cli_usage(CMD, "%s: plugin: empty path",
					     where);
		return plugin_add(w, where, value);
	}
	if (strcmp(key, "plugin.args") == 0) {
		char *copy;

		if (!w->plugin_cnt)
			return tbx_cli_usage(CMD,
					     "%s: plugin.args=%s: no plugin= "
					     "before it to apply to",
					     where, value);
		if (!(copy = strdup(value)))
			return out_of_memory();
		free(w->plugins[w->plugin_cnt - 1].args);
		w->plugins[w->plugin_cnt - 1].args = copy;
		return 0;
	}
	err = tbx_conf_set(w->conf, key, value, errstr, sizeof(errstr));
	if (err == TBX_ENOMEM)
		return out_of_memory();
	if (err)
		return tbx_cli_usage(CMD, "%s: %s", where, errstr);
	if (strcmp(key, "stats.interval.ms") == 0)
		w->stats_set = 1;
	return 0;
}

/* Removes leading and trailing white space in place. */
static char *trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

/* Reads the properties file @p path.  @returns 0 or an exit status. */
static int read_config(worker_cmd_t *w, const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, *where = NULL;
	size_t cap = 0, lineno = 0, where_size;
	ssize_t n;
	int rc = 0;

	if (!f)
		return tbx_cli_usage(CMD, "%s: cannot open: %s", path,
				     strerror(errno));
	where_size = strlen(path) + 24;
	if (!(where = malloc(where_size))) {
		fclose(f);
		return out_of_memory();
	}
	while (!rc && (n = getline(&line, &cap, f)) != -1) {
		char *s, *eq;

		lineno++;
		snprintf(where, where_size, "%s:%zu", path, lineno);
		if (strlen(line) != (size_t)n) {
			rc = tbx_cli_usage(CMD, "%s: contains a NUL byte",
					   where);
			break;
		}
		s = trim(line);
		if (!*s || *s == '#')
			continue;
		if (!(eq = strchr(s, '=')) || eq == s) {
			rc = tbx_cli_usage(CMD, "%s: expected key=value%s",
					   where,
					   eq ? " (the key is empty)" : "");
			break;
		}
		*eq = '\0';
		rc = apply(w, where, trim(s), trim(eq + 1));
	}
	if (!rc && ferror(f))
		rc = tbx_cli_usage(CMD, "%s: cannot read: %s", path,
				   strerror(errno));
	free(line);
	free(where);
	fclose(f);
	return rc;
}

/* @p arg of -X: KEY=VALUE, split at the first '=' and taken as is. */
static int apply_override(worker_cmd_t *w, const char *arg)
{
	const char *eq = strchr(arg, '=');
	char *key;
	int rc;

	if (!eq || eq == arg)
		return tbx_cli_usage(CMD, "-X '%s': expected key=value", arg);
	if (!(key = strndup(arg, (size_t)(eq - arg))))
		return out_of_memory();
	rc = apply(w, "-X", key, eq + 1);
	free(key);
	return rc;
}

/* dlerror() usually begins with the path itself: drop it, the message
 * names the plugin already. */
static const char *dl_reason(const char *path)
{
	const char *e = dlerror();
	size_t len = strlen(path);

	if (!e)
		return "unknown dlopen error";
	if (strncmp(e, path, len) == 0 && strncmp(e + len, ": ", 2) == 0)
		return e + len + 2;
	return e;
}

/* Loads @p p and checks its ABI version.  @returns 0 or an exit status. */
static int plugin_load(plugin_t *p)
{
	int (*abi_version)(void);
	void *sym;
	int version;

	dlerror();
	if (!(p->handle = dlopen(p->path, RTLD_NOW | RTLD_LOCAL)))
		return tbx_cli_usage(CMD, "%s: plugin %s: cannot load: %s",
				     p->where, p->path, dl_reason(p->path));
	/* ISO C has no cast from void * to a function pointer; POSIX
	 * guarantees the representation is the same. */
	sym = dlsym(p->handle, "tbx_plugin_abi_version");
	if (!sym)
		return tbx_cli_usage(
		    CMD,
		    "%s: plugin %s: not a tokenbox plugin: it does not "
		    "export tbx_plugin_abi_version() (TBX_PLUGIN() of "
		    "<tokenbox/plugin.h> defines it)",
		    p->where, p->path);
	memcpy(&abi_version, &sym, sizeof(abi_version));
	version = abi_version();
	if (version != TBX_PLUGIN_ABI_VERSION)
		return tbx_cli_usage(CMD,
				     "%s: plugin %s: built for plugin ABI "
				     "version %d, but this tokenbox (%s) has "
				     "version %d: rebuild the plugin against "
				     "this tokenbox's headers",
				     p->where, p->path, version, tbx_version(),
				     TBX_PLUGIN_ABI_VERSION);
	sym = dlsym(p->handle, "tbx_plugin_init");
	if (!sym)
		return tbx_cli_usage(CMD,
				     "%s: plugin %s: not a tokenbox plugin: "
				     "it does not export tbx_plugin_init()",
				     p->where, p->path);
	memcpy(&p->init, &sym, sizeof(p->init));
	return 0;
}

/* The keys tbx_worker_new() requires (tokenbox.h).  Its errstr names the
 * one missing; this only chooses the exit status. */
static int lacks_required_key(const tbx_conf_t *conf)
{
	static const char *const keys[] = {"group.id", "store.path",
					   "kafka.bootstrap.servers"};

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *v = tbx_conf_get(conf, keys[i]);
		if (!v || !*v)
			return 1;
	}
	return 0;
}

/*
 * Signals.  Everything the handlers touch is set up before they are
 * installed, and they only read it, write(2) prepared lines, set the
 * worker's stop flag, arm a timer and _exit(): all async-signal-safe.
 */
static tbx_worker_t *volatile running; /* NULL until created, and again
					  before it is destroyed */
static volatile sig_atomic_t stop_count;
static timer_t shutdown_timer;
static int have_timer;
static struct itimerspec shutdown_in;
static unsigned shutdown_alarm_s; /* alarm() fallback, rounded up */
static char stop_line[2][256], second_line[2][160], timeout_line[256];

static void say(const char *line)
{
	ssize_t w = write(STDERR_FILENO, line, strlen(line));
	(void)w; /* nothing to do about a lost log line */
}

/* Called by the SIGINT/SIGTERM handler of tools/cli.c, which has set
 * tbx_cli_stop_signal and blocks both signals while it runs. */
static void on_stop(void *opaque)
{
	int sig = tbx_cli_stop_signal;
	int i = sig == SIGINT;

	(void)opaque;
	if (stop_count++) {
		say(second_line[i]);
		_exit(128 + sig);
	}
	tbx_worker_stop(running);
	say(stop_line[i]);
	if (!have_timer ||
	    timer_settime(shutdown_timer, 0, &shutdown_in, NULL) != 0)
		alarm(shutdown_alarm_s);
}

static void on_shutdown_timeout(int sig)
{
	(void)sig;
	say(timeout_line);
	_exit(TBX_EXIT_FAIL);
}

static int install_signals(long long timeout_ms)
{
	static const char *const names[2] = {"SIGTERM", "SIGINT"};
	struct sigevent sev;
	struct sigaction sa;

	for (int i = 0; i < 2; i++) {
		snprintf(stop_line[i], sizeof(stop_line[i]),
			 "tokenbox worker: %s: finishing the batch in hand, "
			 "then stopping (shutdown.timeout.ms=%lld); a second "
			 "signal exits at once\n",
			 names[i], timeout_ms);
		snprintf(second_line[i], sizeof(second_line[i]),
			 "tokenbox worker: second signal (%s): exiting at "
			 "once; unfinished work resumes on restart\n",
			 names[i]);
	}
	snprintf(timeout_line, sizeof(timeout_line),
		 "tokenbox worker: the worker did not stop within "
		 "shutdown.timeout.ms (%lld ms): exiting with status 1; "
		 "unfinished work resumes on restart\n",
		 timeout_ms);

	shutdown_in.it_value.tv_sec = (time_t)(timeout_ms / 1000);
	shutdown_in.it_value.tv_nsec = (long)(timeout_ms % 1000) * 1000000;
	shutdown_alarm_s = (unsigned)((timeout_ms + 999) / 1000);
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGALRM;
	/* Called twice (at start and once the bound is known): one timer. */
	if (!have_timer)
		have_timer =
		    timer_create(CLOCK_MONOTONIC, &sev, &shutdown_timer) == 0;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_shutdown_timeout;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) != 0 ||
	    tbx_cli_on_stop(on_stop, NULL) != 0)
		return tbx_cli_fail(CMD, "cannot install signal handlers: %s",
				    strerror(errno));
	return 0;
}

typedef struct worker_opts {
	const char *config;
	const char **overrides; /* -X arguments, in order */
	size_t override_cnt;
} worker_opts_t;

/* @returns 0, -1 after --help, or an exit status. */
static int parse_args(int argc, char **argv, worker_opts_t *o)
{
	static const struct option longopts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int c;

	/* At most every other argument is a -X value. */
	if (!(o->overrides = calloc((size_t)argc + 1, sizeof(char *))))
		return out_of_memory();
	while ((c = tbx_cli_getopt(CMD, argc, argv, "c:X:h", longopts)) != -1) {
		switch (c) {
		case 'c':
			if (o->config)
				return tbx_cli_usage(
				    CMD,
				    "--config given twice "
				    "('%s', '%s'): give one "
				    "file, and -X for the rest",
				    o->config, optarg);
			if (!*optarg)
				return tbx_cli_usage(CMD, "--config: empty "
							  "value");
			o->config = optarg;
			break;
		case 'X':
			o->overrides[o->override_cnt++] = optarg;
			break;
		case 'h':
			usage();
			return -1;
		default:
			return TBX_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return tbx_cli_usage(CMD,
				     "unexpected argument '%s' (the "
				     "configuration file goes after --config)",
				     argv[optind]);
	return 0;
}

/* Reads the configuration and loads the plugins.  @returns 0 or an exit
 * status. */
static int configure(worker_cmd_t *w, const worker_opts_t *o,
		     long long *timeout_ms)
{
	char errstr[512];
	const char *v;
	int rc;

	if (!(w->conf = tbx_conf_new()))
		return out_of_memory();
	if (o->config && (rc = read_config(w, o->config)))
		return rc;
	for (size_t i = 0; i < o->override_cnt; i++)
		if ((rc = apply_override(w, o->overrides[i])))
			return rc;
	if (!w->plugin_cnt)
		return tbx_cli_usage(CMD,
				     "no plugin= given: nothing would handle "
				     "messages (see 'tokenbox help worker')");
	if (!w->stats_set &&
	    tbx_conf_set(w->conf, "stats.interval.ms", STATS_DEFAULT_MS, errstr,
			 sizeof(errstr)))
		return tbx_cli_fail(CMD, "%s", errstr);
	/* Range-checked when set (100..3600000), else the default. */
	v = tbx_conf_get(w->conf, "shutdown.timeout.ms");
	*timeout_ms = v ? strtoll(v, NULL, 10) : 0;
	if (*timeout_ms <= 0)
		return tbx_cli_fail(CMD, "shutdown.timeout.ms: no value");
	return 0;
}

static void print_stats(const tbx_worker_t *worker)
{
	tbx_stats_t st;

	tbx_worker_stats(worker, &st);
	fprintf(stderr,
		"tokenbox worker: stopped: %llu consumed, %llu processed, "
		"%llu duplicates dropped, %llu dead-lettered, %llu "
		"dispatched\n",
		(unsigned long long)st.consumed,
		(unsigned long long)st.processed,
		(unsigned long long)st.duplicates_dropped,
		(unsigned long long)st.dead_lettered,
		(unsigned long long)st.dispatched);
}

int tbx_cmd_worker(int argc, char **argv)
{
	worker_opts_t o = {0};
	worker_cmd_t w = {0};
	tbx_worker_t *worker = NULL;
	char errstr[512];
	long long timeout_ms = 0;
	int rc, err;

	/* First of all: a SIGTERM during start-up must stop the worker
	 * cleanly, not kill it (the default action).  The bound is re-armed
	 * once the configuration is read. */
	if ((rc = install_signals(30000)))
		goto out;
	if ((rc = parse_args(argc, argv, &o))) {
		rc = rc < 0 ? TBX_EXIT_OK : rc;
		goto out;
	}
	if ((rc = configure(&w, &o, &timeout_ms)))
		goto out;
	if ((rc = install_signals(timeout_ms)))
		goto out;
	for (size_t i = 0; i < w.plugin_cnt; i++)
		if ((rc = plugin_load(&w.plugins[i])))
			goto out;

	/* On success the worker owns the configuration. */
	if (!(worker = tbx_worker_new(w.conf, errstr, sizeof(errstr)))) {
		rc =
		    lacks_required_key(w.conf) ? TBX_EXIT_USAGE : TBX_EXIT_FAIL;
		tbx_cli_usage(CMD, "%s", errstr);
		goto out;
	}
	w.conf = NULL;
	for (size_t i = 0; i < w.plugin_cnt; i++) {
		plugin_t *p = &w.plugins[i];
		if ((err = p->init(worker, p->args ? p->args : ""))) {
			rc = tbx_cli_usage(CMD,
					   "%s: plugin %s: tbx_plugin_init "
					   "failed (code %d: %s)",
					   p->where, p->path, err,
					   tbx_strerror(err));
			goto out;
		}
	}

	running = worker;
	if (stop_count) /* a signal came during start-up */
		tbx_worker_stop(worker);
	err = tbx_worker_run(worker);
	running = NULL;
	if (err) {
		rc = tbx_cli_fail(CMD, "worker failed: %s: %s",
				  tbx_err_name(err), tbx_worker_errstr(worker));
		goto out;
	}
	print_stats(worker);
	rc = TBX_EXIT_OK;
out:
	running = NULL;
	/* Handlers and their state belong to the plugins: the worker goes
	 * first, then the plugins, last loaded first. */
	tbx_worker_destroy(worker);
	tbx_conf_destroy(w.conf);
	for (size_t i = w.plugin_cnt; i-- > 0;) {
		if (w.plugins[i].handle)
			dlclose(w.plugins[i].handle);
		free(w.plugins[i].path);
		free(w.plugins[i].args);
		free(w.plugins[i].where);
	}
	free(w.plugins);
	free(o.overrides);
	if (have_timer)
		timer_delete(shutdown_timer);
	return rc;
}
