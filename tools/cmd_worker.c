/*
 * `tokenbox worker`: one worker process whose handlers come from plugins,
 * run until SIGTERM, SIGINT or SIGHUP.
 *
 * Start-up goes in this order, so that nothing is created before the
 * configuration is known to be good:
 *   1. the configuration: --config FILE, then every -X in order, into a
 *      tbx_conf_t; the command's own keys (plugin, plugin.args) are kept
 *      aside, everything else goes through tbx_conf_set(), which names the
 *      key, the value and why it refuses one;
 *   2. every plugin is dlopen()ed and its ABI version checked;
 *   3. tbx_worker_new(): required keys, stores opened (created, migrated);
 *   4. every plugin's tbx_plugin_init() registers its handlers; a worker
 *      left without any handler is a configuration error;
 *   5. tbx_worker_poll() until a signal; the first poll subscribes, and
 *      then systemd is told READY=1 (when NOTIFY_SOCKET is set).
 * --check-config stops after 4, with a worker that opens the stores
 * read-only and creates nothing.
 *
 * Shutdown.  The first SIGTERM/SIGINT/SIGHUP calls tbx_worker_stop(), so
 * that the poll loop finishes the batch in hand (dispatch, commit), leaves
 * the group and returns; the command then destroys the worker (closing the
 * stores), unloads the plugins and exits 0.  The same signal starts a bound
 * of shutdown.timeout.ms that ends the process with status 1 if that takes
 * too long (after writing the main thread's stack: SIGUSR2 to it), and a
 * second signal ends it at once with 128 + signal.  Both
 * exits are safe: the protocol resumes unfinished work on restart.  The
 * signals are blocked in every thread and taken by one thread of the
 * command with sigwaitinfo(), so that what it does (log through the
 * library's logger, stop the worker) needs no async-signal safety.
 *
 * Every line the command writes to stderr goes through the library's
 * logger (log.format), like the worker's own.
 *
 * The public API is used, like any program embedding the library, plus
 * dlopen() for the plugins (the executable exports the API to them, see
 * CMakeLists.txt) and three internals: the logger, the read-only worker of
 * --check-config and the count of topics handled.
 */
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "consumer/conf.h"
#include "consumer/stores.h"
#include "consumer/worker.h"
#include "store/pg.h"
#include "tokenbox/tokenbox.h"
#include "tools/cli.h"
#include "tools/cli_conf.h"

#define CMD "worker"

/* Exit status when a record from another token store stopped the worker
 * (token.store.mismatch=stop): distinct from a failure, so that a
 * supervisor does not restart into the same record. */
#define EXIT_STORE_MISMATCH 3

/* stats.interval.ms of the command unless configured: the library's
 * default is 0 (off), a long-running service wants the line. */
#define STATS_DEFAULT_MS "60000"

static void usage(void)
{
	printf(
	    "Usage: tokenbox worker [--config FILE] [-X KEY=VALUE]... "
	    "[--check-config]\n"
	    "\n"
	    "Runs one tokenbox worker -- a member of one Kafka consumer group "
	    "whose\n"
	    "handlers come from plugins -- until SIGTERM, SIGINT or SIGHUP.\n"
	    "\n"
	    "Options:\n"
	    "  -c, --config FILE  read the configuration from FILE\n"
	    "  -X KEY=VALUE       set KEY after FILE was read; repeat for more "
	    "keys\n"
	    "                     (the last value of a key wins)\n"
	    "      --check-config check the configuration, load the plugins "
	    "and run\n"
	    "                     their init, check the stores read-only "
	    "(creating\n"
	    "                     nothing; with outbox.layout=record, that "
	    "the group\n"
	    "                     has no batch rows left), print a summary and "
	    "exit 0,\n"
	    "                     or 2 with the reason; no Kafka client is "
	    "started\n"
	    "  -h, --help         show this help\n"
	    "\n"
	    "Configuration.  FILE holds one KEY=VALUE per line, as "
	    "librdkafka's tools\n"
	    "read them: spaces around the key and the value are removed; blank "
	    "lines\n"
	    "and lines whose first non-blank character is '#' are skipped (a "
	    "'#'\n"
	    "elsewhere is part of the value).  The keys are those of\n"
	    "docs/configuration.md; 'kafka.' ones go to librdkafka.  Each is "
	    "checked\n"
	    "as it is read: an unknown key or a bad value stops the command "
	    "with a\n"
	    "message naming the line (FILE:LINE, or -X), the key, the value "
	    "and why.\n"
	    "group.id, store.path (or store.url) and kafka.bootstrap.servers "
	    "are\n"
	    "required.  Two keys belong to this command:\n"
	    "  plugin=PATH        load the handler plugin PATH, a shared "
	    "object;\n"
	    "                     repeat for more plugins.  At least one is "
	    "required.\n"
	    "                     A relative PATH with a '/' is taken from "
	    "FILE's\n"
	    "                     directory (from the current one with -X); a "
	    "bare\n"
	    "                     name is searched as dlopen(3) does, in the "
	    "library\n"
	    "                     path and not in that directory: write "
	    "./NAME for a\n"
	    "                     file there.\n"
	    "  plugin.args=TEXT   passed to the tbx_plugin_init() of the "
	    "plugin named\n"
	    "                     last before it (default: empty)\n"
	    "Unless set, stats.interval.ms is 60000 here: one line of counters "
	    "a\n"
	    "minute.\n"
	    "\n"
	    "Plugins.  A plugin exports tbx_plugin_abi_version() and "
	    "tbx_plugin_init()\n"
	    "(TBX_PLUGIN() of <tokenbox/plugin.h> defines both) and does not "
	    "link\n"
	    "libtokenbox: this command provides the library.  One built for "
	    "another\n"
	    "plugin ABI version than this tokenbox's (%d) is refused.  Its "
	    "init\n"
	    "registers handlers; one that fails stops the command, and so does "
	    "a\n"
	    "worker left without any handler.  See docs/handlers.md.\n"
	    "\n"
	    "Signals.  The first SIGTERM, SIGINT or SIGHUP stops the worker "
	    "after the\n"
	    "batch in hand: the batch is finished, dispatched and committed, "
	    "the\n"
	    "worker leaves the group, the stores are closed, and the command "
	    "exits 0\n"
	    "(SIGHUP reloads nothing: restart the worker to apply a new\n"
	    "configuration).  A stop still going after 5 s (or half of\n"
	    "shutdown.timeout.ms, if shorter) logs a WARN naming what it waits "
	    "for,\n"
	    "again every 10 s.  The batch's messages still without a delivery "
	    "report\n"
	    "half of shutdown.timeout.ms after the signal are given up "
	    "undelivered,\n"
	    "their outbox rows left for the next owner.  If the stop takes "
	    "longer than\n"
	    "shutdown.timeout.ms (default 30000), the command writes its main "
	    "thread's\n"
	    "stack to standard error and exits 1.  A second signal exits at "
	    "once with\n"
	    "status 128 + signal (143 for SIGTERM, 130 for SIGINT, 129 for "
	    "SIGHUP).\n"
	    "Both are safe: the protocol resumes unfinished work on restart, "
	    "though the\n"
	    "partitions wait for the group's session timeout before another "
	    "member\n"
	    "gets them.\n"
	    "\n"
	    "PostgreSQL.  store.url (and tokens.url) may name a PostgreSQL "
	    "database, a\n"
	    "libpq URL postgresql://..., with store.schema (default: the group "
	    "id) and\n"
	    "tokens.schema (default tokenbox_tokens); then the group's workers "
	    "may run\n"
	    "on several hosts.  Passwords come from libpq's own means (the "
	    "URL, "
	    "PGPASSWORD,\n"
	    "~/.pgpass, a service file); every message shows a URL with its "
	    "password as\n"
	    "***.  See docs/operations.md.\n"
	    "\n"
	    "Logs go to standard error, one line each (log.level, log.format): "
	    "in text\n"
	    "each line starts with its UTC time; under systemd (JOURNAL_STREAM "
	    "names\n"
	    "standard error) each starts with a syslog priority <N> for the "
	    "journal.\n"
	    "\n"
	    "systemd.  With NOTIFY_SOCKET set (Type=notify) the command sends "
	    "READY=1\n"
	    "once the worker has subscribed (its first poll), WATCHDOG=1 from "
	    "its poll\n"
	    "loop when WATCHDOG_USEC is set, and STOPPING=1 when a signal "
	    "stops it.\n"
	    "\n"
	    "Exit status: 0 after a clean stop (or --check-config found no "
	    "problem);\n"
	    "1 when the worker failed (a store that cannot be opened, a fatal "
	    "store\n"
	    "or Kafka error) or shutdown.timeout.ms passed; 2 for a bad "
	    "command line,\n"
	    "configuration or plugin, a token store that does not exist "
	    "(tokens.path,\n"
	    "or the schema of tokens.url, without tokens.create=true: no store "
	    "is\n"
	    "created then), a plugin that registers no handler, a worker on\n"
	    "outbox.layout=record whose group has batch rows left, or a "
	    "problem\n"
	    "--check-config found (nothing was consumed); 3 when a "
	    "record\n"
	    "minted in another token store (its tbx-store header) stopped the "
	    "worker\n"
	    "under token.store.mismatch=stop (the record is not consumed: fix\n"
	    "tokens.path and restart); 75 after a fatal Kafka consumer error "
	    "(the\n"
	    "client cannot go on: restart the process); 128 + N after a "
	    "second\n"
	    "signal N.\n"
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
	    "  $ tokenbox worker --config /etc/tokenbox/billing.conf "
	    "--check-config\n"
	    "  $ tokenbox worker --config /etc/tokenbox/billing.conf -X "
	    "log.level=info\n"
	    "On PostgreSQL, instead of store.path and tokens.path:\n"
	    "  "
	    "store.url=postgresql://billing@db1/pipeline?sslmode=verify-full\n"
	    "  store.schema=billing\n"
	    "  tokens.schema=tokenbox_tokens\n",
	    TBX_PLUGIN_ABI_VERSION);
}

/* A plugin= entry, in configuration order. */
typedef struct plugin {
	char *path;
	char *args;  /* plugin.args, or NULL */
	char *where; /* "FILE:LINE" or "-X", for messages */
	char *dir;   /* a bare name's: where "./NAME" would be taken from */
	void *handle;
	tbx_plugin_init_fn init;
} plugin_t;

typedef struct worker_cmd {
	tbx_conf_t *conf; /* ours until tbx_worker_new() succeeds */
	plugin_t *plugins;
	size_t plugin_cnt, plugin_cap;
	int stats_set;	      /* stats.interval.ms was configured */
	const char *base_dir; /* of the file being read; NULL for -X */
} worker_cmd_t;

/* The command's own lines go through the library's logger, in the same
 * format as the worker's: "tokenbox worker: <message>". */
__attribute__((format(printf, 3, 0))) static int
vsay(int level, int status, const char *fmt, va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	tbx__log(level, "tokenbox " CMD ": %s", msg);
	return status;
}

/* An error of the command line, the configuration or a plugin.
 * @returns TBX_EXIT_USAGE. */
__attribute__((format(printf, 1, 2))) static int wusage(const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vsay(TBX_LOG_ERR, TBX_EXIT_USAGE, fmt, ap);
	va_end(ap);
	return rc;
}

/* A failure at run time.  @returns TBX_EXIT_FAIL. */
__attribute__((format(printf, 1, 2))) static int wfail(const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vsay(TBX_LOG_ERR, TBX_EXIT_FAIL, fmt, ap);
	va_end(ap);
	return rc;
}

/* News at @p level. */
__attribute__((format(printf, 2, 3))) static void say(int level,
						      const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(level, 0, fmt, ap);
	va_end(ap);
}

/* tbx_cli_getopt()'s errors, through the logger like the rest. */
static void report(const char *cmd, const char *msg)
{
	tbx__log(TBX_LOG_ERR, "tokenbox %s: %s", cmd ? cmd : CMD, msg);
}

static int out_of_memory(void)
{
	return wfail("out of memory");
}

static int plugin_add(worker_cmd_t *w, const char *where, const char *path)
{
	plugin_t *p;
	char *full = NULL;

	if (w->plugin_cnt == w->plugin_cap) {
		size_t cap = w->plugin_cap ? w->plugin_cap * 2 : 4;
		plugin_t *grown = realloc(w->plugins, cap * sizeof(*grown));
		if (!grown)
			return out_of_memory();
		w->plugins = grown;
		w->plugin_cap = cap;
	}
	/* A relative path with a '/' is the file's neighbour, so that a
	 * configuration works from any directory; a bare name stays a name
	 * for dlopen()'s search. */
	if (w->base_dir && path[0] != '/' && strchr(path, '/')) {
		size_t n = strlen(w->base_dir) + strlen(path) + 2;
		if (!(full = malloc(n)))
			return out_of_memory();
		snprintf(full, n, "%s/%s", w->base_dir, path);
	}
	p = &w->plugins[w->plugin_cnt];
	memset(p, 0, sizeof(*p));
	p->path = full ? full : strdup(path);
	p->where = strdup(where);
	if (!strchr(path, '/'))
		p->dir = strdup(w->base_dir ? w->base_dir : ".");
	if (!p->path || !p->where || (!strchr(path, '/') && !p->dir)) {
		free(p->path);
		free(p->where);
		free(p->dir);
		return out_of_memory();
	}
	w->plugin_cnt++;
	return 0;
}

/* Unloads the plugins, last loaded first, and frees their list. */
static void plugins_free(worker_cmd_t *w)
{
	for (size_t i = w->plugin_cnt; i-- > 0;) {
		if (w->plugins[i].handle)
			dlclose(w->plugins[i].handle);
		free(w->plugins[i].path);
		free(w->plugins[i].args);
		free(w->plugins[i].where);
		free(w->plugins[i].dir);
	}
	free(w->plugins);
	w->plugins = NULL;
	w->plugin_cnt = w->plugin_cap = 0;
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
			return wusage("%s: plugin: empty path", where);
		return plugin_add(w, where, value);
	}
	if (strcmp(key, "plugin.args") == 0) {
		char *copy;

		if (!w->plugin_cnt)
			return wusage("%s: plugin.args=%s: no plugin= "
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
		return wusage("%s: %s", where, errstr);
	if (strcmp(key, "stats.interval.ms") == 0)
		w->stats_set = 1;
	return 0;
}

static int config_set(void *arg, const char *where, const char *key,
		      const char *value)
{
	return apply(arg, where, key, value);
}

static int config_report(void *arg, const char *msg)
{
	(void)arg;
	return wusage("%s", msg);
}

/* Reads the properties file @p path; plugin= paths in it are relative to
 * its directory.  @returns 0 or an exit status. */
static int read_config(worker_cmd_t *w, const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir =
	    slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path))
		  : strdup(".");
	int rc;

	if (!dir)
		return out_of_memory();
	w->base_dir = dir;
	rc = tbx_cli_conf_read(path, config_set, config_report, w);
	w->base_dir = NULL;
	free(dir);
	return rc;
}

/* @p arg of -X: KEY=VALUE, split at the first '=' and taken as is. */
static int apply_override(worker_cmd_t *w, const char *arg)
{
	const char *eq = strchr(arg, '=');
	char *key;
	int rc;

	if (!eq || eq == arg)
		return wusage("-X '%s': expected key=value", arg);
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

/* A bare name that dlopen() did not find: it was searched in the library
 * path, never in the current directory (nor the file's); say so, and
 * name the file that "./NAME" would load when there is one.
 * @returns an exit status. */
static int bare_name_fail(const plugin_t *p, const char *reason)
{
	char near[4096];
	int here;

	if (!strstr(reason, "No such file"))
		return wusage("%s: plugin %s: cannot load: %s", p->where,
			      p->path, reason);
	snprintf(near, sizeof(near), "%s/%s", p->dir, p->path);
	here = access(near, F_OK) == 0;
	return wusage("%s: plugin %s: cannot load: %s; a name without a '/' "
		      "is searched in the library path (LD_LIBRARY_PATH and "
		      "the system's, see dlopen(3)), not in the %s%s%s%s",
		      p->where, p->path, reason,
		      strcmp(p->dir, ".") == 0 ? "current directory"
					       : "configuration file's "
						 "directory",
		      here ? ": there is a file of that name there, write "
			     "plugin=./"
			   : "",
		      here ? p->path : "", here ? " to load it" : "");
}

/* Loads @p p and checks its ABI version.  @returns 0 or an exit status. */
static int plugin_load(plugin_t *p)
{
	int (*abi_version)(void);
	void *sym;
	int version;

	dlerror();
	if (!(p->handle = dlopen(p->path, RTLD_NOW | RTLD_LOCAL))) {
		if (p->dir)
			return bare_name_fail(p, dl_reason(p->path));
		return wusage("%s: plugin %s: cannot load: %s", p->where,
			      p->path, dl_reason(p->path));
	}
	/* ISO C has no cast from void * to a function pointer; POSIX
	 * guarantees the representation is the same. */
	sym = dlsym(p->handle, "tbx_plugin_abi_version");
	if (!sym)
		return wusage(
		    "%s: plugin %s: not a tokenbox plugin: it does not "
		    "export tbx_plugin_abi_version() (TBX_PLUGIN() of "
		    "<tokenbox/plugin.h> defines it)",
		    p->where, p->path);
	memcpy(&abi_version, &sym, sizeof(abi_version));
	version = abi_version();
	if (version != TBX_PLUGIN_ABI_VERSION)
		return wusage("%s: plugin %s: built for plugin ABI "
			      "version %d, but this tokenbox (%s) has "
			      "version %d: rebuild the plugin against "
			      "this tokenbox's headers",
			      p->where, p->path, version, tbx_version(),
			      TBX_PLUGIN_ABI_VERSION);
	sym = dlsym(p->handle, "tbx_plugin_init");
	if (!sym)
		return wusage("%s: plugin %s: not a tokenbox plugin: "
			      "it does not export tbx_plugin_init()",
			      p->where, p->path);
	memcpy(&p->init, &sym, sizeof(p->init));
	return 0;
}

/* The keys tbx_worker_new() requires (tokenbox.h).  Its errstr names the
 * one missing; this only chooses the exit status. */
static int lacks_required_key(const tbx_conf_t *conf)
{
	const tbx__cfg_t *cfg = tbx__conf_cfg(conf);
	const char *servers = tbx_conf_get(conf, "kafka.bootstrap.servers");

	return !cfg->group_id || !*cfg->group_id ||
	       ((!cfg->store_path || !*cfg->store_path) &&
		(!cfg->store_url || !*cfg->store_url)) ||
	       !servers || !*servers;
}

/*
 * Signals.  SIGTERM, SIGINT and SIGHUP are blocked in every thread (the
 * mask is set before any thread exists, and threads inherit it) and taken
 * by one thread with sigwaitinfo().  The first one stops the worker and
 * starts the shutdown bound; a second one, or the end of the bound, ends
 * the process with _exit().  SIGUSR1 from the main thread, with sig_quit
 * set, ends the thread.
 */
static pthread_mutex_t running_lock = PTHREAD_MUTEX_INITIALIZER;
static tbx_worker_t *running; /* under running_lock: NULL until created,
				 and again before it is destroyed */
static atomic_int stop_count, sig_quit;
static atomic_llong shutdown_ms = 30000;

/* What the main thread is doing once stopping, for the WARN lines of a
 * slow shutdown: the first after SLOW_FIRST_MS (or half the bound, if
 * shorter), then one every SLOW_EVERY_MS until the process exits. */
enum { STAGE_POLL, STAGE_CLOSE, STAGE_DESTROY, STAGE_PLUGINS };
static atomic_int stop_stage;
#define SLOW_FIRST_MS 5000LL
#define SLOW_EVERY_MS 10000LL

static const char *stage_name(int stage)
{
	switch (stage) {
	case STAGE_POLL:
		return "the batch in hand: its handlers and phases, or a "
		       "poll of the Kafka consumer";
	case STAGE_CLOSE:
		return "tbx_worker_close(): the rows still to deliver, the "
		       "final offset commit, leaving the group and closing "
		       "the Kafka consumer";
	case STAGE_DESTROY:
		return "tbx_worker_destroy(): closing the stores";
	default:
		return "the plugins being unloaded";
	}
}
static sigset_t sig_set;
static pthread_t sig_thread, main_thread;
static int have_sig_thread;

/*
 * The main thread's stack, written to standard error when the bound ends
 * the process: what a stop that overran it waits in, down to the call.
 * SIGUSR2 is sent to the main thread alone and handled there; the signal
 * thread waits up to STACK_WAIT_MS for the frames (a thread in
 * uninterruptible sleep never runs the handler) and exits either way.
 * Not with log.format=json.  Frames are "file(function+offset)" or
 * "file(+offset)": `addr2line -f -e FILE OFFSET` names a static function
 * (docs/operations.md).  Not the sanitizers' symbolized stack: their
 * symbolizer reads the debug information first (seconds on a loaded
 * machine), and it writes to ASAN_OPTIONS's log_path, where a test run
 * takes it for a sanitizer's report.
 */
#define STACK_WAIT_MS 2000
static atomic_int stack_written;

static void stack_write(int sig)
{
	static const char head[] = "tokenbox " CMD ": the main thread's stack "
				   "at the end of shutdown.timeout.ms:\n";
	void *frames[64];
	int n, saved = errno;

	(void)sig;
	if (write(STDERR_FILENO, head, sizeof(head) - 1) < 0)
		(void)0; /* nothing better to do with a failed write */
	n = backtrace(frames, (int)(sizeof(frames) / sizeof(frames[0])));
	backtrace_symbols_fd(frames, n, STDERR_FILENO);
	atomic_store(&stack_written, 1);
	errno = saved;
}

static void stack_dump(void)
{
	long long until = tbx__mono_ms() + STACK_WAIT_MS;

	/* Lines of plain text would break a stream of JSON objects. */
	if (tbx__log_get_format() == TBX_LOGF_JSON ||
	    pthread_kill(main_thread, SIGUSR2) != 0)
		return;
	while (!atomic_load(&stack_written) && tbx__mono_ms() < until) {
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (!atomic_load(&stack_written))
		tbx__log(TBX_LOG_ERR,
			 "tokenbox " CMD ": the main thread did "
			 "not answer for its stack within %d ms",
			 STACK_WAIT_MS);
}

static const char *sig_name(int sig)
{
	return sig == SIGTERM  ? "SIGTERM"
	       : sig == SIGINT ? "SIGINT"
	       : sig == SIGHUP ? "SIGHUP"
			       : "signal";
}

static void *signal_main(void *arg)
{
	long long started = 0, deadline = 0, next_warn = 0;
	int stopping = 0, first = 0, warned = 0;

	(void)arg;
	for (;;) {
		siginfo_t si;
		int sig;

		if (!stopping) {
			sig = sigwaitinfo(&sig_set, &si);
		} else {
			long long now = tbx__mono_ms(), wait_ms;
			struct timespec left;

			/* Silence is a bug: a stop that takes longer than
			 * expected says what it waits for, and does so
			 * before the bound ends the process. */
			if (now >= next_warn || (now >= deadline && !warned)) {
				const char *step = NULL;

				/* The worker lives while it is running. */
				pthread_mutex_lock(&running_lock);
				if (running &&
				    atomic_load(&stop_stage) <= STAGE_CLOSE)
					step = tbx__worker_step(running);
				tbx__log(TBX_LOG_WARNING,
					 "tokenbox " CMD ": still stopping "
					 "after %lld ms (%s): waiting for "
					 "%s%s%s; exits with status 1 at "
					 "shutdown.timeout.ms=%lld",
					 now - started, sig_name(first),
					 stage_name(atomic_load(&stop_stage)),
					 step ? "; now: " : "",
					 step ? step : "",
					 (long long)atomic_load(&shutdown_ms));
				pthread_mutex_unlock(&running_lock);
				next_warn = now + SLOW_EVERY_MS;
				warned = 1;
			}
			if (now >= deadline) {
				tbx__log(TBX_LOG_ERR,
					 "tokenbox " CMD ": the worker did not "
					 "stop within shutdown.timeout.ms "
					 "(%lld ms): exiting with status 1; "
					 "unfinished work resumes on restart",
					 (long long)atomic_load(&shutdown_ms));
				stack_dump();
				_exit(TBX_EXIT_FAIL);
			}
			wait_ms =
			    (next_warn < deadline ? next_warn : deadline) - now;
			left.tv_sec = (time_t)(wait_ms / 1000);
			left.tv_nsec = (long)(wait_ms % 1000) * 1000000L;
			sig = sigtimedwait(&sig_set, &si, &left);
			if (sig < 0 && errno == EAGAIN)
				continue;
		}
		if (sig < 0)
			continue; /* EINTR */
		if (sig == SIGUSR1) {
			if (atomic_load(&sig_quit))
				return NULL;
			continue;
		}
		if (atomic_fetch_add(&stop_count, 1)) {
			tbx__log(TBX_LOG_WARNING,
				 "tokenbox " CMD ": second signal (%s): "
				 "exiting at once; unfinished work resumes "
				 "on restart",
				 sig_name(sig));
			_exit(128 + sig);
		}
		tbx__log(TBX_LOG_NOTICE,
			 "tokenbox " CMD ": %s: finishing the batch in hand, "
			 "then stopping (shutdown.timeout.ms=%lld); a second "
			 "signal exits at once",
			 sig_name(sig), (long long)atomic_load(&shutdown_ms));
		pthread_mutex_lock(&running_lock);
		if (running)
			tbx_worker_stop(running);
		pthread_mutex_unlock(&running_lock);
		started = tbx__mono_ms();
		deadline = started + atomic_load(&shutdown_ms);
		next_warn =
		    started + (atomic_load(&shutdown_ms) / 2 < SLOW_FIRST_MS
				   ? atomic_load(&shutdown_ms) / 2
				   : SLOW_FIRST_MS);
		first = sig;
		stopping = 1;
	}
}

static void set_running(tbx_worker_t *worker)
{
	pthread_mutex_lock(&running_lock);
	running = worker;
	/* A signal during start-up: stop as soon as it runs. */
	if (worker && atomic_load(&stop_count))
		tbx_worker_stop(worker);
	pthread_mutex_unlock(&running_lock);
}

static int install_stack_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = stack_write;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	return sigaction(SIGUSR2, &sa, NULL);
}

static int install_signals(void)
{
	struct sigaction sa;
	int err = 0;

	sigemptyset(&sig_set);
	sigaddset(&sig_set, SIGTERM);
	sigaddset(&sig_set, SIGINT);
	sigaddset(&sig_set, SIGHUP);
	sigaddset(&sig_set, SIGUSR1);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigemptyset(&sa.sa_mask);
	main_thread = pthread_self();
	/* backtrace() loads libgcc_s at its first call, which allocates:
	 * done here, not in the signal handler. */
	{
		void *frame;
		(void)backtrace(&frame, 1);
	}
	/* A closed socket or pipe is an error return, not death. */
	if (sigaction(SIGPIPE, &sa, NULL) != 0 ||
	    install_stack_handler() != 0 ||
	    (err = pthread_sigmask(SIG_BLOCK, &sig_set, NULL)) != 0 ||
	    (err = pthread_create(&sig_thread, NULL, signal_main, NULL)) != 0)
		return wfail("cannot set up signal handling: %s",
			     strerror(err ? err : errno));
	have_sig_thread = 1;
	return 0;
}

static void stop_signal_thread(void)
{
	if (!have_sig_thread)
		return;
	atomic_store(&sig_quit, 1);
	pthread_kill(sig_thread, SIGUSR1);
	pthread_join(sig_thread, NULL);
	have_sig_thread = 0;
}

/*
 * systemd's notification protocol (sd_notify(3)), spoken directly: one
 * datagram of "KEY=VALUE" lines to the AF_UNIX socket NOTIFY_SOCKET names
 * (a path, or '@' for the abstract namespace).  Without NOTIFY_SOCKET
 * nothing is sent.
 */
static int notify_fd = -1;
static struct sockaddr_un notify_addr;
static socklen_t notify_len;
static long long watchdog_ms; /* ping interval; 0: no watchdog */

static void notify_open(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	const char *usec = getenv("WATCHDOG_USEC");
	const char *wpid = getenv("WATCHDOG_PID");
	size_t len;
	long long v;

	if (path && *path) {
		len = strlen(path);
		if ((path[0] != '/' && path[0] != '@') ||
		    len >= sizeof(notify_addr.sun_path)) {
			say(TBX_LOG_WARNING,
			    "NOTIFY_SOCKET='%s' is neither a socket path nor "
			    "an abstract name: systemd is not notified",
			    path);
		} else {
			memset(&notify_addr, 0, sizeof(notify_addr));
			notify_addr.sun_family = AF_UNIX;
			memcpy(notify_addr.sun_path, path, len);
			if (path[0] == '@')
				notify_addr.sun_path[0] = '\0';
			notify_len =
			    (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
					len);
			notify_fd =
			    socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
			if (notify_fd < 0)
				say(TBX_LOG_WARNING,
				    "NOTIFY_SOCKET: cannot create a socket: "
				    "%s: systemd is not notified",
				    strerror(errno));
		}
	}
	/* WATCHDOG_PID, when set, names the process meant. */
	if (notify_fd >= 0 && usec && *usec &&
	    (!wpid || !*wpid ||
	     (tbx_cli_to_int(wpid, 1, INT32_MAX, &v) == 0 &&
	      v == (long long)getpid()))) {
		if (tbx_cli_to_int(usec, 1, INT64_MAX, &v) == 0)
			watchdog_ms = v / 2000 > 0 ? v / 2000 : 1;
		else
			say(TBX_LOG_WARNING,
			    "WATCHDOG_USEC='%s' is not a positive integer: "
			    "no watchdog pings",
			    usec);
	}
}

static void notify(const char *msg)
{
	static int warned;

	if (notify_fd < 0)
		return;
	if (sendto(notify_fd, msg, strlen(msg), MSG_NOSIGNAL,
		   (const struct sockaddr *)&notify_addr, notify_len) < 0 &&
	    !warned++)
		say(TBX_LOG_WARNING, "cannot notify systemd (%.*s): %s",
		    (int)strcspn(msg, "\n"), msg, strerror(errno));
}

static void notify_close(void)
{
	if (notify_fd >= 0)
		close(notify_fd);
	notify_fd = -1;
}

typedef struct worker_opts {
	const char *config;
	const char **overrides; /* -X arguments, in order */
	size_t override_cnt;
	int check; /* --check-config */
} worker_opts_t;

/* @returns 0, -1 after --help, or an exit status. */
static int parse_args(int argc, char **argv, worker_opts_t *o)
{
	static const struct option longopts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"check-config", no_argument, NULL, 'C'},
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
				return wusage("--config given twice "
					      "('%s', '%s'): give one "
					      "file, and -X for the rest",
					      o->config, optarg);
			if (!*optarg)
				return wusage("--config: empty value");
			o->config = optarg;
			break;
		case 'C':
			o->check = 1;
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
		return wusage("unexpected argument '%s' (the "
			      "configuration file goes after --config)",
			      argv[optind]);
	return 0;
}

/* Reads the configuration.  @returns 0 or an exit status. */
static int configure(worker_cmd_t *w, const worker_opts_t *o)
{
	char errstr[512];
	int rc;

	if (!(w->conf = tbx_conf_new()))
		return out_of_memory();
	if (o->config && (rc = read_config(w, o->config)))
		return rc;
	for (size_t i = 0; i < o->override_cnt; i++)
		if ((rc = apply_override(w, o->overrides[i])))
			return rc;
	/* From here on, lines have the configured level and format. */
	tbx__conf_log_configure(w->conf, NULL);
	if (!w->plugin_cnt)
		return wusage("no plugin= given: nothing would handle "
			      "messages (see 'tokenbox help worker')");
	if (!w->stats_set &&
	    tbx_conf_set(w->conf, "stats.interval.ms", STATS_DEFAULT_MS, errstr,
			 sizeof(errstr)))
		return wfail("%s", errstr);
	atomic_store(&shutdown_ms, tbx__conf_cfg(w->conf)->shutdown_timeout_ms);
	return 0;
}

/* Runs every plugin's init on @p worker, then checks that some handler
 * was registered.  @returns 0 or an exit status. */
static int plugins_init(worker_cmd_t *w, tbx_worker_t *worker)
{
	int err;

	for (size_t i = 0; i < w->plugin_cnt; i++) {
		plugin_t *p = &w->plugins[i];
		if ((err = p->init(worker, p->args ? p->args : "")))
			return wusage("%s: plugin %s: tbx_plugin_init failed "
				      "(code %d: %s)",
				      p->where, p->path, err,
				      tbx_strerror(err));
	}
	if (tbx__worker_topic_count(worker) == 0)
		return wusage("no plugin registered a handler "
			      "(tbx_worker_register() in tbx_plugin_init()): "
			      "nothing would consume; %zu plugin(s) loaded, "
			      "the first %s",
			      w->plugin_cnt, w->plugins[0].path);
	return 0;
}

/* @p path into @p out, followed by the file it names from the working
 * directory when it is relative: store.path and tokens.path are taken
 * from there, not from the configuration file's directory. */
static void path_resolved(const char *path, char *out, size_t size)
{
	char cwd[4096];

	if (*path && *path != '/' && getcwd(cwd, sizeof(cwd)))
		snprintf(out, size, "%s (%s/%s)", path, cwd, path);
	else
		snprintf(out, size, "%s", path);
}

/* --check-config: the checks of a start, read-only, and a summary on
 * standard output.  @returns an exit status. */
static int check_config(worker_cmd_t *w)
{
	char errstr[512], store[8400], tokens[8400];
	tbx_worker_t *worker;
	const tbx__cfg_t *cfg;
	int rc;

	/* What the worker would open, URLs redacted. */
	cfg = tbx__conf_cfg(w->conf);
	if (cfg->store_url && *cfg->store_url) {
		char red[512];
		snprintf(store, sizeof(store), "%s (schema %s)",
			 tbx__pg_redact(cfg->store_url, red, sizeof(red)),
			 cfg->store_schema && *cfg->store_schema
			     ? cfg->store_schema
			     : cfg->group_id);
	} else {
		path_resolved(cfg->store_path ? cfg->store_path : "", store,
			      sizeof(store));
	}
	if (!*cfg->tokens_path && !*cfg->tokens_url &&
	    !(cfg->store_url && *cfg->store_url))
		snprintf(tokens, sizeof(tokens), "(the same file)");
	else if (*cfg->tokens_path && !*cfg->tokens_url)
		path_resolved(cfg->tokens_path, tokens, sizeof(tokens));
	else
		tbx__stores_tokens_where(cfg, tokens, sizeof(tokens));
	if (!(worker = tbx__worker_new_check(w->conf, errstr, sizeof(errstr))))
		return wusage("%s", errstr);
	w->conf = NULL; /* the worker owns it */
	if ((rc = plugins_init(w, worker))) {
		tbx_worker_destroy(worker);
		return rc;
	}
	printf("configuration OK: group %s, store %s, token store %s\n",
	       tbx_worker_conf_get(worker, "group.id"), store, tokens);
	for (size_t i = 0; i < w->plugin_cnt; i++)
		printf("plugin %s\n", w->plugins[i].path);
	for (size_t i = 0; i < tbx__worker_topic_count(worker); i++)
		printf("topic %s\n", tbx__worker_topic(worker, i));
	tbx_worker_destroy(worker);
	return TBX_EXIT_OK;
}

static void print_stats(const tbx_worker_t *worker)
{
	tbx_stats_t st;

	tbx_worker_stats(worker, &st);
	say(TBX_LOG_NOTICE,
	    "stopped: %llu consumed, %llu processed, %llu duplicates "
	    "dropped, %llu dead-lettered, %llu dispatched",
	    (unsigned long long)st.consumed, (unsigned long long)st.processed,
	    (unsigned long long)st.duplicates_dropped,
	    (unsigned long long)st.dead_lettered,
	    (unsigned long long)st.dispatched);
}

/* tbx_worker_run() with systemd's notifications: READY=1 once the first
 * poll has subscribed, WATCHDOG=1 from the loop, STOPPING=1 at the end.
 * @returns TBX_OK or the error that ended the loop. */
static int run(tbx_worker_t *worker)
{
	long long next_ping = 0;
	int ready = 0, err = TBX_OK;
	char status[160];

	while (!atomic_load(&stop_count)) {
		if ((err = tbx_worker_poll(worker, 100, NULL)))
			break;
		if (!ready) {
			snprintf(status, sizeof(status),
				 "READY=1\nSTATUS=group %s: subscribed to %zu "
				 "topic(s)",
				 tbx_worker_conf_get(worker, "group.id"),
				 tbx__worker_topic_count(worker));
			notify(status);
			ready = 1;
		}
		if (watchdog_ms && tbx__mono_ms() >= next_ping) {
			notify("WATCHDOG=1");
			next_ping = tbx__mono_ms() + watchdog_ms;
		}
	}
	notify("STOPPING=1");
	atomic_store(&stop_stage, STAGE_CLOSE);
	tbx_worker_close(worker);
	return err;
}

int tbx_cmd_worker(int argc, char **argv)
{
	worker_opts_t o = {0};
	worker_cmd_t w = {0};
	tbx_worker_t *worker = NULL;
	char errstr[512];
	int rc, err;

	/* First of all: a SIGTERM during start-up must stop the worker
	 * cleanly, not kill it (the default action). */
	if ((rc = install_signals()))
		goto out;
	tbx_cli_set_reporter(report);
	if ((rc = parse_args(argc, argv, &o))) {
		rc = rc < 0 ? TBX_EXIT_OK : rc;
		goto out;
	}
	if ((rc = configure(&w, &o)))
		goto out;
	for (size_t i = 0; i < w.plugin_cnt; i++)
		if ((rc = plugin_load(&w.plugins[i])))
			goto out;
	if (o.check) {
		rc = check_config(&w);
		goto out;
	}
	notify_open();

	/* On success the worker owns the configuration.  A token store
	 * that does not exist is the configuration's fault, as
	 * --check-config says: nothing was created, and a restart would
	 * fail the same way.  So is outbox.layout=record for a group with
	 * batch rows left (TBX_ESTATE, consumer/layout.c), and any setting
	 * the worker refuses (TBX_ECONF: tokens.format=set without
	 * outbox.layout=batch, a store given twice). */
	if (!(worker =
		  tbx__worker_new_err(w.conf, &err, errstr, sizeof(errstr)))) {
		rc = lacks_required_key(w.conf) || err == TBX_ENOENT ||
			     err == TBX_ESTATE || err == TBX_ECONF
			 ? wusage("%s", errstr)
			 : wfail("%s", errstr);
		goto out;
	}
	w.conf = NULL;
	/* One worker: the process's lines outside its calls are its too. */
	tbx__log_set_tag(tbx__worker_log_tag(worker));
	if ((rc = plugins_init(&w, worker)))
		goto out;

	set_running(worker);
	err = run(worker);
	if (err == TBX_EMISMATCH) {
		wfail("stopped: %s", tbx_worker_errstr(worker));
		rc = EXIT_STORE_MISMATCH;
		goto out;
	}
	if (err) {
		rc = wfail("worker failed: %s: %s", tbx_err_name(err),
			   tbx_worker_errstr(worker));
		if (err == TBX_EFATAL)
			rc = TBX_EXIT_RESTART;
		goto out;
	}
	print_stats(worker);
	rc = TBX_EXIT_OK;
out:
	set_running(NULL);
	/* Handlers and their state belong to the plugins: the worker goes
	 * first, then the plugins, last loaded first. */
	atomic_store(&stop_stage, STAGE_DESTROY);
	tbx_worker_destroy(worker);
	atomic_store(&stop_stage, STAGE_PLUGINS);
	tbx_conf_destroy(w.conf);
	plugins_free(&w);
	free(o.overrides);
	notify_close();
	stop_signal_thread();
	tbx_cli_set_reporter(NULL);
	return rc;
}
