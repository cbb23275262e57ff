/*
 * `tokenbox worker` as a child process: configuration and plugin errors
 * (exit 2, one line naming the key, the value and why), and end to end
 * against a `tokenbox mock-cluster` child with the examples/hello plugin:
 * a SIGTERM drains and exits 0, a second SIGTERM exits at once and a
 * restart finishes the work exactly once, shutdown.timeout.ms bounds a
 * slow drain.
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "cli_child.h"
#include "fixture.h"
#include "outbox/outbox.h"

#define WAIT_MS (30000 * cc_time_factor())

/* ---- files and paths ---------------------------------------------- */

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert(f, "%s: %s", path, strerror(errno));
	cr_assert(fputs(text, f) >= 0 && fclose(f) == 0);
}

/** @p tmpl with every "@DIR@" and "@PLUGIN@" replaced (malloc'ed). */
static char *expand(const char *tmpl, const char *dir, const char *plugin)
{
	char *out = NULL;
	size_t len = 0;

	cc_append(&out, &len, "", 0);
	for (const char *p = tmpl; *p;) {
		if (strncmp(p, "@DIR@", 5) == 0) {
			cc_append(&out, &len, dir, strlen(dir));
			p += 5;
		} else if (strncmp(p, "@PLUGIN@", 8) == 0) {
			cc_append(&out, &len, plugin, strlen(plugin));
			p += 8;
		} else {
			cc_append(&out, &len, p++, 1);
		}
	}
	return out;
}

/* ---- stores --------------------------------------------------------- */

/** 1 while another connection holds the write lock of @p db: the
 *  worker's phase A transaction is open (its handlers are running). */
static int write_locked(const char *db)
{
	sqlite3 *conn = NULL;
	int rc, locked = 0;

	if (sqlite3_open_v2(db, &conn, SQLITE_OPEN_READWRITE, NULL) ==
	    SQLITE_OK) {
		rc = sqlite3_exec(conn, "BEGIN IMMEDIATE", NULL, NULL, NULL);
		if (rc == SQLITE_BUSY)
			locked = 1;
		else if (rc == SQLITE_OK)
			sqlite3_exec(conn, "ROLLBACK", NULL, NULL, NULL);
	}
	sqlite3_close(conn);
	return locked;
}

/* ---- processes ------------------------------------------------------ */

/** Starts `tokenbox worker --config CONF [ARGS...]` with standard output
 *  and error appended to @p log. */
static pid_t worker_start(const char *conf, const char *log,
			  const char *const extra[])
{
	const char *args[16] = {"worker", "--config", conf};
	size_t n = 3;

	for (size_t i = 0; extra && extra[i] && n < 15; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	return tt_tokenbox_start(args, log);
}

/* ---- a pipeline with the hello plugin ------------------------------- */

typedef struct setup {
	char *dir, *conf, *log, *store, *tokens;
	tt_mock_proc_t cluster;
} setup_t;

#define SUBSCRIBED                                                             \
	"SELECT COUNT(*) FROM tbx_subscriptions WHERE topic = 'hello' AND "    \
	"grp = 'hello'"
#define HELLO_ROWS	   "SELECT COUNT(*) FROM hello"
#define HELLO_DISTINCT_IDS "SELECT COUNT(DISTINCT msg_id) FROM hello"
#define OUTBOX_ROWS	   "SELECT COUNT(*) FROM tbx_outbox"
#define GROUP_TOKENS	   "SELECT COUNT(*) FROM tbx_tokens WHERE grp = 'hello'"

/** A cluster, and a configuration file for group "hello" that loads the
 *  hello plugin with @p plugin_args and sets @p extra (lines). */
static setup_t setup_new(const char *plugin_args, const char *extra)
{
	static const char *const topics[] = {"hello:2", "hello.replies:2",
					     NULL};
	setup_t s;
	char text[8192];

	s.dir = tt_tmpdir();
	s.conf = tt_path(s.dir, "worker.conf");
	s.log = tt_path(s.dir, "worker.log");
	s.store = tt_path(s.dir, "service.db");
	s.tokens = tt_path(s.dir, "tokens.db");
	s.cluster = tt_mock_proc_start(topics);
	snprintf(text, sizeof(text),
		 "# the hello service\n"
		 "kafka.bootstrap.servers = %s\n"
		 "group.id = hello\n"
		 "store.path = %s\n"
		 "tokens.path = %s\n"
		 "tokens.create = true\n"
		 "\n"
		 "# a killed member is noticed in 3 s\n"
		 "kafka.consumer.session.timeout.ms = 4000\n"
		 "kafka.consumer.heartbeat.interval.ms = 300\n"
		 "kafka.consumer.fetch.wait.max.ms = 10\n"
		 "batch.max.ms = 20\n"
		 "log.level = info\n"
		 "plugin = %s\n"
		 "plugin.args = %s\n"
		 "%s",
		 s.cluster.bootstraps, s.store, s.tokens,
		 tt_plugin_path("tbx_hello"), plugin_args, extra ? extra : "");
	write_file(s.conf, text);
	return s;
}

static void setup_free(setup_t *s)
{
	tt_mock_proc_stop(&s->cluster);
	tt_rmrf(s->dir);
	free(s->dir);
	free(s->conf);
	free(s->log);
	free(s->store);
	free(s->tokens);
}

/** Starts the worker and waits for its subscription row: from then on,
 *  publishers mint tokens for group "hello". */
static pid_t start_subscribed(const setup_t *s, const char *const extra[])
{
	pid_t pid = worker_start(s->conf, s->log, extra);

	tt_assert_log(tt_wait_query(s->tokens, SUBSCRIBED, 1, WAIT_MS), s->log,
		      "the worker did not subscribe");
	return pid;
}

/** Waits until the worker's phase A holds the service store's lock. */
static void wait_handling(const setup_t *s)
{
	long long deadline = cc_now_ms() + WAIT_MS;
	int locked = 0;

	while (!locked && cc_now_ms() < deadline) {
		locked = write_locked(s->store);
		if (!locked)
			usleep(10000);
	}
	tt_assert_log(locked, s->log, "the worker never started handling");
}

/** Sends SIGTERM to @p pid and @returns its wait status and, in
 *  *elapsed_ms, how long it took to exit. */
static int term_and_wait(pid_t pid, int timeout_ms, long long *elapsed_ms)
{
	long long t0 = cc_now_ms();
	int status;

	kill(pid, SIGTERM);
	status = cc_wait(pid, timeout_ms);
	*elapsed_ms = cc_now_ms() - t0;
	return status;
}

/** Every message took effect once, and nothing is left in flight. */
static void assert_exactly_once(const setup_t *s, int cnt)
{
	cr_expect_eq(tt_query(s->store, HELLO_ROWS), cnt);
	cr_expect_eq(tt_query(s->store, HELLO_DISTINCT_IDS), cnt);
	cr_expect_eq(tt_query(s->store, OUTBOX_ROWS), 0, "outbox rows left");
	cr_expect_eq(tt_query(s->tokens, GROUP_TOKENS), 0, "tokens left");
	cr_expect(tt_integrity_ok(s->store));
	cr_expect(tt_integrity_ok(s->tokens));
}

/* ---- end to end ----------------------------------------------------- */

Test(cli_worker, sigterm_drains_the_batch_and_exits_0, .timeout = 240)
{
	/* The drain is what is checked here, not its speed: a bound a loaded
	 * machine cannot reach.  Exit status 0 already says the stop ended
	 * within it (past it, the worker exits 1). */
	char extra[64];
	setup_t s;
	pid_t pid;
	long long elapsed;
	tt_record_t *recs;
	size_t cnt;
	char *log;
	int status;

	snprintf(extra, sizeof(extra), "shutdown.timeout.ms = %d\n",
		 60000 * cc_time_factor());
	s = setup_new("reply=hello.replies", extra);
	pid = start_subscribed(&s, NULL);
	tt_publish(s.cluster.bootstraps, s.tokens, "hello", "Hello", 10, 3,
		   "hi");
	tt_assert_log(tt_wait_query(s.store, HELLO_ROWS, 10, WAIT_MS), s.log,
		      "the hello rows did not appear");

	status = term_and_wait(pid, 70000 * cc_time_factor(), &elapsed);
	log = tt_read_text(s.log);
	cr_assert(cc_exited(status, 0), "status %d after %lld ms:\n%s", status,
		  elapsed, log);
	cr_expect(strstr(log, "SIGTERM: finishing the batch in hand"), "%s",
		  log);
	cr_expect(strstr(log, "stopped: 10 consumed, 10 processed"), "%s", log);
	assert_exactly_once(&s, 10);

	/* The replies were dispatched before the worker stopped. */
	cnt = tt_read_topic(s.cluster.bootstraps, "hello.replies", &recs);
	cr_expect_eq(cnt, 10);
	for (size_t i = 0; i < cnt; i++)
		cr_expect(recs[i].payload &&
			      strncmp(recs[i].payload, "hello, hi-", 10) == 0,
			  "reply '%s'", recs[i].payload ? recs[i].payload : "");
	tt_records_free(recs, cnt);
	free(log);
	setup_free(&s);
}

Test(cli_worker, second_sigterm_exits_at_once_and_a_restart_finishes_once,
     .timeout = 300)
{
	/* A minute per record: the batch in hand cannot end while this test
	 * runs, however slow the machine, so the first SIGTERM's drain is
	 * still waiting for it when the second signal comes, and an exit
	 * with its rows uncommitted can only be the second signal's.  The
	 * stop's own bound is longer still. */
	setup_t s =
	    setup_new("delay.ms=60000", "shutdown.timeout.ms=3600000\n");
	const char *const no_delay[] = {"-X", "plugin.args=", NULL};
	pid_t pid = start_subscribed(&s, NULL);
	long long elapsed;
	char *log;
	int status;

	tt_publish(s.cluster.bootstraps, s.tokens, "hello", "Hello", 20, 4,
		   "hi");
	wait_handling(&s);
	kill(pid, SIGTERM);
	/* Signals of one kind do not queue: the second is sent once the
	 * first was handled. */
	tt_assert_log(
	    tt_wait_log(s.log, "SIGTERM: finishing the batch in hand", WAIT_MS),
	    s.log, "no sign of the first SIGTERM");
	kill(pid, SIGTERM);
	status = cc_wait(pid, WAIT_MS);
	log = tt_read_text(s.log);
	cr_assert(cc_exited(status, 128 + SIGTERM), "status %d:\n%s", status,
		  log);
	cr_expect(strstr(log, "second signal (SIGTERM): exiting at once"), "%s",
		  log);
	free(log);
	/* It died inside its first batch, not after it: nothing handled
	 * was committed (the hello table comes with the first commit: -1
	 * when there is none). */
	cr_assert_leq(tt_query(s.store, HELLO_ROWS), 0);

	/* A restart without the delay finishes it, each message once. */
	pid = start_subscribed(&s, no_delay);
	tt_assert_log(tt_wait_query(s.store, HELLO_ROWS, 20, WAIT_MS), s.log,
		      "the restart did not finish the work");
	status = term_and_wait(pid, WAIT_MS, &elapsed);
	tt_assert_log(cc_exited(status, 0), s.log,
		      "the restart did not exit 0");
	assert_exactly_once(&s, 20);
	setup_free(&s);
}

Test(cli_worker, shutdown_timeout_bounds_a_slow_drain, .timeout = 240)
{
	/* A minute per record, and one second to stop: the drain cannot
	 * finish the batch in hand before the bound, however slow the
	 * machine. */
	setup_t s = setup_new("delay.ms=60000", "shutdown.timeout.ms=1000\n");
	pid_t pid = start_subscribed(&s, NULL);
	long long elapsed;
	char *log;
	int status;

	tt_publish(s.cluster.bootstraps, s.tokens, "hello", "Hello", 20, 4,
		   "hi");
	wait_handling(&s);
	status = term_and_wait(pid, WAIT_MS, &elapsed);
	log = tt_read_text(s.log);
	cr_assert(cc_exited(status, 1), "status %d:\n%s", status, log);
	/* The bound is the behaviour checked: the stop ended at it, not when
	 * the batch in hand would have (a minute on).  Measured from before
	 * the SIGTERM, so not below it; the margin above is for a loaded
	 * machine, where the worker and this test may wait seconds for a
	 * CPU, and stays well under the minute. */
	cr_expect(elapsed >= 900 && elapsed < 1000 + 15000 * cc_time_factor(),
		  "exited after %lld ms", elapsed);
	cr_expect(strstr(log, "did not stop within shutdown.timeout.ms "
			      "(1000 ms)"),
		  "%s", log);
	/* Not silent before that: a WARN line said what the stop waited
	 * for. */
	const char *slow = strstr(log, "still stopping after ");
	const char *line = slow, *warn;
	while (line && line > log && line[-1] != '\n')
		line--;
	warn = line ? strstr(line, " WARN ") : NULL;
	cr_expect(
	    slow && warn && warn < slow &&
		strstr(slow, "(SIGTERM): waiting for the batch in hand") &&
		slow < strstr(log, "did not stop within"),
	    "no WARN line saying what the stop waited for:\n%s", log);
	/* And the main thread's stack at the bound, down to the handler's
	 * sleep: what a stop that overran it waits in. */
	const char *stack = strstr(log, "the main thread's stack at the end "
					"of shutdown.timeout.ms:\n");
	cr_expect(
	    stack && strstr(stack, "nanosleep"),
	    "no stack of the main thread down to the handler's sleep:\n%s",
	    log);
	free(log);
	cr_expect(tt_integrity_ok(s.store));
	setup_free(&s);
}

/* ---- configuration errors ------------------------------------------- */

typedef struct error_case {
	const char *conf;    /* @DIR@, @PLUGIN@ replaced; NULL: no file */
	const char *args[6]; /* after the --config, NULL-ended */
	const char *want[5]; /* substrings of stderr, NULL-ended */
	int lines;	     /* stderr lines: 1 unless the plugin talks */
} error_case_t;

/* A configuration that passes: errors come from what a case adds. */
#define GOOD_CONF                                                              \
	"kafka.bootstrap.servers=127.0.0.1:1\n"                                \
	"group.id=g\n"                                                         \
	"store.path=@DIR@/service.db\n"

/* The same without store.path, for a file whose dir is not known. */
#define GOOD_CONF_NO_STORE                                                     \
	"kafka.bootstrap.servers=127.0.0.1:1\n"                                \
	"group.id=g\n"

static void run_error_cases(const error_case_t *cases, size_t cnt)
{
	for (size_t i = 0; i < cnt; i++) {
		const error_case_t *c = &cases[i];
		char *dir = tt_tmpdir();
		char *conf = tt_path(dir, "w.conf");
		char *store = tt_path(dir, "service.db");
		char *text =
		    c->conf ? expand(c->conf, dir, tt_plugin_path("tbx_hello"))
			    : NULL;
		const char *args[12] = {"worker", "--config", conf};
		size_t n = 3;
		cc_result_t res;

		if (text)
			write_file(conf, text);
		char *owned[6] = {NULL};
		for (size_t j = 0; c->args[j]; j++) {
			const char *at = strstr(c->args[j], "@CONF@");
			if (at) {
				/* "KEY=@CONF@": the configuration file */
				size_t len = strlen(c->args[j]) + strlen(conf);
				owned[j] = malloc(len);
				cr_assert(owned[j]);
				snprintf(owned[j], len, "%.*s%s",
					 (int)(at - c->args[j]), c->args[j],
					 conf);
			}
			args[n++] = owned[j] ? owned[j] : c->args[j];
		}
		args[n] = NULL;
		res = cc_run(args);
		cr_assert(cc_exited(res.status, 2), "case %zu: status %d: %s",
			  i, res.status, res.err);
		cr_expect_str_empty(res.out, "case %zu: %s", i, res.out);
		cr_expect_eq(cc_lines(res.err), c->lines ? c->lines : 1,
			     "case %zu: %s", i, res.err);
		for (size_t j = 0; c->want[j]; j++)
			cr_expect(strstr(res.err, c->want[j]),
				  "case %zu: '%s' not in: %s", i, c->want[j],
				  res.err);
		cr_expect(strstr(res.err, "tokenbox worker: "), "case %zu: %s",
			  i, res.err);
		cc_result_free(&res);
		for (size_t j = 0; j < 6; j++)
			free(owned[j]);
		free(text);
		free(store);
		free(conf);
		tt_rmrf(dir);
		free(dir);
	}
}

Test(cli_worker, config_errors_name_the_line_key_value_and_why, .timeout = 120)
{
	static const error_case_t cases[] = {
	    /* an unknown key is an error, not ignored */
	    {"# comment\n\n  frobnicate = yes\n",
	     {NULL},
	     {"w.conf:3: ", "frobnicate", "unknown configuration key"},
	     0},
	    /* a bad value */
	    {"group.id=g\nbatch.max.messages = 0\n",
	     {NULL},
	     {"w.conf:2: ", "batch.max.messages", "0", "out of range"},
	     0},
	    {"log.level=loud\n",
	     {NULL},
	     {"w.conf:1: ", "log.level", "'loud'", "not one of"},
	     0},
	    /* librdkafka's keys are checked by librdkafka */
	    {"kafka.frob.nicate=1\n",
	     {NULL},
	     {"w.conf:1: ", "kafka.frob.nicate", "librdkafka"},
	     0},
	    {"kafka.enable.auto.commit=true\n",
	     {NULL},
	     {"w.conf:1: ", "enable.auto.commit", "set by tokenbox itself"},
	     0},
	    /* a line without '=' */
	    {"group.id=g\nstore.path /tmp/x.db\n",
	     {NULL},
	     {"w.conf:2: expected key=value"},
	     0},
	    {"=value\n", {NULL}, {"w.conf:1: expected key=value"}, 0},
	    /* plugin.args needs a plugin= before it */
	    {GOOD_CONF "plugin.args=topic=x\nplugin=@PLUGIN@\n",
	     {NULL},
	     {"w.conf:4: ", "plugin.args=topic=x", "no plugin= before it"},
	     0},
	    {GOOD_CONF "plugin=\n", {NULL}, {"w.conf:4: ", "plugin: empty"}, 0},
	    /* no plugin at all */
	    {GOOD_CONF,
	     {NULL},
	     {"no plugin= given", "nothing would handle"},
	     0},
	    /* a required key missing: the library names it */
	    {"kafka.bootstrap.servers=127.0.0.1:1\n"
	     "store.path=@DIR@/service.db\nplugin=@PLUGIN@\n",
	     {NULL},
	     {"group.id", "required"},
	     0},
	    {"group.id=g\nstore.path=@DIR@/service.db\nplugin=@PLUGIN@\n",
	     {NULL},
	     {"kafka.bootstrap.servers", "required"},
	     0},
	    /* -X overrides: checked the same way, after the file */
	    {GOOD_CONF "plugin=@PLUGIN@\n",
	     {"-X", "retry.max=many"},
	     {"-X: ", "retry.max", "'many'", "not an integer"},
	     0},
	    {GOOD_CONF "plugin=@PLUGIN@\n",
	     {"-X", "retry.max"},
	     {"-X 'retry.max': expected key=value"},
	     0},
	    {GOOD_CONF "plugin=@PLUGIN@\n",
	     {"-X", "shutdown.timeout.ms=50"},
	     {"-X: ", "shutdown.timeout.ms", "50", "out of range"},
	     0},
	    /* the file itself, and the command line */
	    {NULL, {NULL}, {"w.conf", "cannot open"}, 0},
	    {GOOD_CONF "plugin=@PLUGIN@\n",
	     {"surplus"},
	     {"unexpected argument 'surplus'"},
	     0},
	    {GOOD_CONF "plugin=@PLUGIN@\n",
	     {"--frobnicate"},
	     {"--frobnicate"},
	     0},
	};

	run_error_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

Test(cli_worker, plugin_errors_name_the_plugin_and_why, .timeout = 120)
{
	char abi_theirs[64], abi_ours[64], conf_badabi[8192];

	snprintf(abi_theirs, sizeof(abi_theirs), "plugin ABI version %d",
		 TBX_PLUGIN_ABI_VERSION + 1);
	snprintf(abi_ours, sizeof(abi_ours), "has version %d",
		 TBX_PLUGIN_ABI_VERSION);
	snprintf(conf_badabi, sizeof(conf_badabi), GOOD_CONF "plugin=%s\n",
		 tt_plugin_path("tbx_hello_badabi"));
	const error_case_t cases[] = {
	    {GOOD_CONF "plugin=@DIR@/missing.so\n",
	     {NULL},
	     {"w.conf:4: ", "missing.so", "cannot load", "No such file"},
	     0},
	    {GOOD_CONF "plugin=@DIR@/w.conf\n",
	     {NULL},
	     {"w.conf:4: ", "/w.conf: cannot load"},
	     0},
	    {conf_badabi,
	     {NULL},
	     {"tbx_hello_badabi", abi_theirs, abi_ours},
	     0},
	    /* a shared object that is no plugin, found in the library
	     * path by its bare name */
	    {GOOD_CONF "plugin=libsqlite3.so.0\n",
	     {NULL},
	     {"plugin libsqlite3.so.0: not a tokenbox plugin",
	      "tbx_plugin_abi_version"},
	     0},
	    /* hello refuses an unknown argument: its own line, then ours */
	    {GOOD_CONF "plugin=@PLUGIN@\nplugin.args=frob=1\n",
	     {NULL},
	     {"hello: plugin.args: unknown key 'frob'",
	      "tbx_plugin_init failed (code 1: invalid argument)"},
	     2},
	    {GOOD_CONF "plugin=@PLUGIN@\n",
	     {"-X", "plugin.args=delay.ms=-5"},
	     {"delay.ms=-5", "tbx_plugin_init failed"},
	     2},
	};

	run_error_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

/* A bare name is dlopen()'s to search, in the library path: a plugin
 * beside the configuration (or in the current directory, with -X) is not
 * found so, and the error says why and what to write instead. */
Test(cli_worker, a_bare_plugin_name_not_found_says_where_it_was_searched,
     .timeout = 60)
{
	char *dir = tt_tmpdir();
	char *conf = tt_path(dir, "w.conf");
	char *plugin = tt_path(dir, "transfers.so");
	char *text = expand(GOOD_CONF "plugin=transfers.so\n", dir, "");
	const char *in_file[] = {"worker", "--config", conf, NULL};
	const char *by_x[] = {
	    "worker", "--config", conf, "-X", "plugin=transfers.so", NULL};
	const char *absent[] = {"worker", "--config",	       conf,
				"-X",	  "plugin=nothere.so", NULL};
	const char *fixed[] = {"worker",
			       "--config",
			       conf,
			       "-X",
			       "plugin=./transfers.so",
			       "-X",
			       "store.path=service.db",
			       "--check-config",
			       NULL};
	cc_result_t res;

	cr_assert(symlink(tt_plugin_path("tbx_hello"), plugin) == 0, "%s",
		  strerror(errno));
	write_file(conf, text);
	cr_assert(chdir(dir) == 0, "%s", strerror(errno));

	res = cc_run(in_file);
	cr_assert(cc_exited(res.status, 2), "status %d: %s", res.status,
		  res.err);
	cr_expect(strstr(res.err, "w.conf:4: plugin transfers.so: cannot "
				  "load: "),
		  "%s", res.err);
	cr_expect(strstr(res.err, "searched in the library path"), "%s",
		  res.err);
	cr_expect(strstr(res.err, "not in the configuration file's directory"),
		  "%s", res.err);
	cr_expect(strstr(res.err, "write plugin=./transfers.so"), "%s",
		  res.err);
	cr_expect_eq(cc_lines(res.err), 1, "%s", res.err);
	cc_result_free(&res);

	/* With -X the current directory is the one "./" refers to. */
	write_file(conf, GOOD_CONF_NO_STORE);
	res = cc_run(by_x);
	cr_assert(cc_exited(res.status, 2), "status %d: %s", res.status,
		  res.err);
	cr_expect(strstr(res.err, "-X: plugin transfers.so: cannot load: "),
		  "%s", res.err);
	cr_expect(strstr(res.err, "not in the current directory"), "%s",
		  res.err);
	cr_expect(strstr(res.err, "write plugin=./transfers.so"), "%s",
		  res.err);
	cc_result_free(&res);

	/* No such file here either: no suggestion. */
	res = cc_run(absent);
	cr_assert(cc_exited(res.status, 2), "status %d: %s", res.status,
		  res.err);
	cr_expect(strstr(res.err, "searched in the library path"), "%s",
		  res.err);
	cr_expect(!strstr(res.err, "plugin=./"), "%s", res.err);
	cc_result_free(&res);

	/* The suggestion works. */
	res = cc_run(fixed);
	cr_expect(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cc_result_free(&res);
	free(text);
	free(plugin);
	free(conf);
	tt_rmrf(dir);
	free(dir);
}

Test(cli_worker, a_refused_plugin_creates_no_store, .timeout = 60)
{
	char *dir = tt_tmpdir();
	char *conf = tt_path(dir, "w.conf");
	char *store = tt_path(dir, "service.db");
	char *text = expand(GOOD_CONF "plugin=@DIR@/missing.so\n", dir, "");
	const char *args[] = {"worker", "--config", conf, NULL};
	cc_result_t res;
	struct stat st;

	write_file(conf, text);
	res = cc_run(args);
	cr_assert(cc_exited(res.status, 2), "status %d: %s", res.status,
		  res.err);
	cr_expect(stat(store, &st) != 0, "%s was created", store);
	cc_result_free(&res);
	free(text);
	free(store);
	free(conf);
	tt_rmrf(dir);
	free(dir);
}

Test(cli_worker, help_tells_the_format_keys_signals_and_exit_codes,
     .timeout = 60)
{
	const char *args[] = {"worker", "--help", NULL};
	cc_result_t res = cc_run(args);
	static const char *const want[] = {
	    "Usage: tokenbox worker",
	    "--config FILE",
	    "-X KEY=VALUE",
	    "'#'",
	    "plugin=PATH",
	    "plugin.args=TEXT",
	    "SIGTERM",
	    "shutdown.timeout.ms",
	    "143",
	    "Exit status",
	    "stats.interval.ms",
	    "Example:",
	};

	cr_assert(cc_exited(res.status, 0));
	cr_assert_str_empty(res.err);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_expect(strstr(res.out, want[i]), "'%s' not in:\n%s", want[i],
			  res.out);
	cc_result_free(&res);
}

/* ---- logs, signals and systemd ------------------------------------- */

/** The device:inode of @p path, as systemd's JOURNAL_STREAM gives them. */
static void journal_stream_of(const char *path, char *out, size_t size)
{
	struct stat st;

	cr_assert(stat(path, &st) == 0, "%s: %s", path, strerror(errno));
	snprintf(out, size, "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
}

/** 1 when @p line starts with an RFC 3339 UTC time with milliseconds. */
static int timestamped(const char *line)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ ";

	for (size_t i = 0; shape[i]; i++) {
		char c = line[i];
		if (shape[i] == 'd' ? !(c >= '0' && c <= '9') : c != shape[i])
			return 0;
	}
	return 1;
}

Test(cli_worker, sighup_drains_and_exits_0_with_journal_priorities,
     .timeout = 240)
{
	/* log.level stays at notice: the kafka debug key must imply
	 * debug for librdkafka's group lines to show. */
	setup_t s =
	    setup_new("reply=hello.replies", "log.level = notice\n"
					     "kafka.consumer.debug = cgrp\n");
	char stream[64], *log, *line, *save = NULL;
	int status, debug_lines = 0, lines = 0;
	pid_t pid;

	/* The log file is the worker's stderr: systemd names it so. */
	write_file(s.log, "");
	journal_stream_of(s.log, stream, sizeof(stream));
	setenv("JOURNAL_STREAM", stream, 1);
	pid = start_subscribed(&s, NULL);
	unsetenv("JOURNAL_STREAM");
	tt_publish(s.cluster.bootstraps, s.tokens, "hello", "Hello", 5, 1,
		   "hi");
	tt_assert_log(tt_wait_query(s.store, HELLO_ROWS, 5, WAIT_MS), s.log,
		      "the hello rows did not appear");

	kill(pid, SIGHUP);
	status = cc_wait(pid, WAIT_MS);
	log = tt_read_text(s.log);
	cr_assert(cc_exited(status, 0), "status %d:\n%s", status, log);
	/* "<N>" then the worker's name, "hello/<pid>: " */
	cr_expect(strstr(log, ": tokenbox worker: SIGHUP: finishing the "
			      "batch in hand"),
		  "%s", log);
	cr_expect(strstr(log, ": tokenbox worker: stopped: 5 consumed, 5 "
			      "processed"),
		  "%s", log);
	cr_expect(strstr(log, "<5>hello/"), "%s", log);
	assert_exactly_once(&s, 5);
	for (line = strtok_r(log, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		lines++;
		cr_expect(line[0] == '<' && line[1] >= '0' && line[1] <= '7' &&
			      line[2] == '>',
			  "no priority prefix: '%s'", line);
		debug_lines += strncmp(line, "<7>", 3) == 0 &&
			       strstr(line, "librdkafka CGRP") != NULL;
	}
	cr_expect_gt(lines, 2);
	cr_expect_gt(debug_lines, 0, "no librdkafka debug line");
	free(log);
	setup_free(&s);
}

/** Receives one datagram from @p fd within @p timeout_ms into @p buf
 *  (NUL-terminated).  @returns its length, or -1 on timeout. */
static ssize_t recv_within(int fd, char *buf, size_t size, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	ssize_t n;

	if (poll(&pfd, 1, timeout_ms) <= 0)
		return -1;
	n = recv(fd, buf, size - 1, 0);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

Test(cli_worker, systemd_is_notified_ready_watchdog_and_stopping,
     .timeout = 240)
{
	setup_t s = setup_new("", "stats.interval.ms = 100\n");
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	char *sock = tt_path(s.dir, "notify.sock"), buf[512], *log, *line,
	     *save = NULL;
	int fd = socket(AF_UNIX, SOCK_DGRAM, 0), watchdogs = 0, ready = 0,
	    stopping = 0, stats = 0, status;
	pid_t pid;

	cr_assert(fd >= 0);
	cr_assert(strlen(sock) < sizeof(addr.sun_path));
	memcpy(addr.sun_path, sock, strlen(sock) + 1);
	cr_assert(bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0,
		  "bind %s: %s", sock, strerror(errno));
	setenv("NOTIFY_SOCKET", sock, 1);
	setenv("WATCHDOG_USEC", "200000", 1);
	pid = start_subscribed(&s, NULL);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");

	/* READY=1 first, then the watchdog's pings every 100 ms. */
	while (watchdogs < 3 &&
	       recv_within(fd, buf, sizeof(buf), WAIT_MS) > 0) {
		if (strncmp(buf, "READY=1\n", 8) == 0) {
			cr_expect_eq(watchdogs, 0, "READY after a ping");
			cr_expect(strstr(buf, "STATUS=group hello: "
					      "subscribed to 1 topic"),
				  "%s", buf);
			ready++;
		} else if (strcmp(buf, "WATCHDOG=1") == 0) {
			watchdogs++;
		}
	}
	cr_assert_eq(ready, 1);
	cr_assert_eq(watchdogs, 3);
	kill(pid, SIGTERM);
	while (!stopping && recv_within(fd, buf, sizeof(buf), WAIT_MS) > 0)
		stopping = strcmp(buf, "STOPPING=1") == 0;
	status = cc_wait(pid, WAIT_MS);
	cr_expect(stopping, "no STOPPING=1");
	log = tt_read_text(s.log);
	cr_expect(cc_exited(status, 0), "status %d:\n%s", status, log);
	/* Not the journal: every line, the stats included, is timestamped. */
	for (line = strtok_r(log, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		cr_expect(timestamped(line), "no time: '%s'", line);
		stats += strstr(line, " stats {\"ts_ms\":") != NULL;
	}
	cr_expect_gt(stats, 0, "no stats line");
	free(log);
	close(fd);
	free(sock);
	setup_free(&s);
}

/** Runs `tokenbox worker ARGS` with @p env_name=@p env_value set (NULL:
 *  none) and stderr in a file; @returns the status, *err the stderr. */
static int run_env(const char *const args[], const char *env_name,
		   const char *env_value, char **err)
{
	char *dir = tt_tmpdir();
	char *path = tt_path(dir, "stderr");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600), status;
	pid_t pid;

	cr_assert(fd >= 0);
	if (env_name && strcmp(env_value, "@STDERR@") == 0) {
		char stream[64];
		journal_stream_of(path, stream, sizeof(stream));
		setenv(env_name, stream, 1);
	} else if (env_name) {
		setenv(env_name, env_value, 1);
	}
	pid = cc_fork(args, -1, -1, fd, &fd, 1);
	if (env_name)
		unsetenv(env_name);
	close(fd);
	status = cc_wait(pid, WAIT_MS);
	*err = tt_read_text(path);
	tt_rmrf(dir);
	free(dir);
	free(path);
	return status;
}

Test(cli_worker, error_lines_take_the_log_format, .timeout = 60)
{
	char *dir = tt_tmpdir();
	char *conf = tt_path(dir, "w.conf");
	char *text = expand(GOOD_CONF, dir, "");
	const char *plain[] = {"worker", "--config", conf, NULL};
	const char *json[] = {"worker", "--config",	   conf,
			      "-X",	"log.format=json", NULL};
	const char *forced[] = {"worker", "--config",	     conf,
				"-X",	  "log.format=text", NULL};
	const char *bad_option[] = {"worker", "--frob", NULL};
	char *err, ts[64];
	cJSON *obj;
	int status;

	write_file(conf, text);
	/* stderr is the journal's stream: a priority, no time */
	status = run_env(plain, "JOURNAL_STREAM", "@STDERR@", &err);
	cr_expect(cc_exited(status, 2), "status %d", status);
	cr_expect(strncmp(err, "<3>tokenbox worker: no plugin= given", 36) == 0,
		  "%s", err);
	free(err);
	/* a bad option too */
	status = run_env(bad_option, "JOURNAL_STREAM", "@STDERR@", &err);
	cr_expect(cc_exited(status, 2), "status %d", status);
	cr_expect(strncmp(err, "<3>tokenbox worker: unknown option '--frob'",
			  43) == 0,
		  "%s", err);
	free(err);
	/* JOURNAL_STREAM naming another file: text */
	status = run_env(plain, "JOURNAL_STREAM", "1:1", &err);
	cr_expect(cc_exited(status, 2));
	cr_expect(timestamped(err) && strstr(err, " ERROR [") &&
		      strstr(err, "] tokenbox worker: no plugin= given"),
		  "%s", err);
	free(err);
	/* log.format=text wins over the journal */
	status = run_env(forced, "JOURNAL_STREAM", "@STDERR@", &err);
	cr_expect(cc_exited(status, 2));
	cr_expect(timestamped(err), "%s", err);
	free(err);
	/* json: one object per line */
	status = run_env(json, NULL, NULL, &err);
	cr_expect(cc_exited(status, 2));
	cr_expect_eq(cc_lines(err), 1, "%s", err);
	obj = cJSON_Parse(err);
	cr_assert(obj, "not JSON: %s", err);
	cr_expect_str_eq(cJSON_GetObjectItem(obj, "level")->valuestring,
			 "error");
	snprintf(ts, sizeof(ts), "%s ",
		 cJSON_GetObjectItem(obj, "ts")->valuestring);
	cr_expect(timestamped(ts) && strlen(ts) == 25, "%s", err);
	cr_expect(strstr(cJSON_GetObjectItem(obj, "msg")->valuestring,
			 "tokenbox worker: no plugin= given"),
		  "%s", err);
	cJSON_Delete(obj);
	free(err);
	free(text);
	free(conf);
	tt_rmrf(dir);
	free(dir);
}

Test(cli_worker, a_plugin_that_registers_nothing_exits_2, .timeout = 60)
{
	char *dir = tt_tmpdir();
	char *conf = tt_path(dir, "w.conf");
	char *text = expand(GOOD_CONF "plugin=@PLUGIN@\n", dir,
			    tt_plugin_path("tbx_empty"));
	const char *args[] = {"worker", "--config", conf, NULL};
	cc_result_t res;

	write_file(conf, text);
	res = cc_run(args);
	cr_expect(cc_exited(res.status, 2), "status %d: %s", res.status,
		  res.err);
	cr_expect(strstr(res.err, "tokenbox worker: no plugin registered a "
				  "handler"),
		  "%s", res.err);
	cc_result_free(&res);
	free(text);
	free(conf);
	tt_rmrf(dir);
	free(dir);
}

/* ---- --check-config ------------------------------------------------- */

Test(cli_worker, check_config_passes_a_good_one_and_creates_nothing,
     .timeout = 60)
{
	char *dir = tt_tmpdir();
	char *conf = tt_path(dir, "w.conf");
	char *store = tt_path(dir, "service.db");
	char *link = tt_path(dir, "plugins");
	char examples[4096];
	/* relative to the file's directory, whatever the current one */
	char *text = expand(GOOD_CONF "plugin=plugins/libtbx_hello.so\n"
				      "plugin.args=topic=greetings\n",
			    dir, "");
	const char *args[] = {"worker", "--config", conf, "--check-config",
			      NULL};
	cc_result_t res;
	struct stat st;

	snprintf(examples, sizeof(examples), "%s", tt_plugin_path("tbx_hello"));
	*strrchr(examples, '/') = '\0';
	cr_assert(symlink(examples, link) == 0, "%s", strerror(errno));
	write_file(conf, text);
	res = cc_run(args);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_expect(strstr(res.out, "configuration OK: group g, store "), "%s",
		  res.out);
	cr_expect(strstr(res.out, "topic greetings\n"), "%s", res.out);
	cr_expect(strstr(res.out, "/plugins/libtbx_hello.so\n"), "%s", res.out);
	cr_expect(stat(store, &st) != 0, "%s was created", store);
	cc_result_free(&res);
	free(text);
	free(link);
	free(store);
	free(conf);
	tt_rmrf(dir);
	free(dir);
}

/* store.path and tokens.path are taken from the working directory, not
 * from the configuration file's (as plugin= is): --check-config names
 * the file a relative one resolves to, and creates neither. */
Test(cli_worker, check_config_names_the_file_a_relative_path_resolves_to,
     .timeout = 60)
{
	char *dir = tt_tmpdir();
	char *conf = tt_path(dir, "w.conf");
	char *text = expand(GOOD_CONF "plugin=@PLUGIN@\n", dir,
			    tt_plugin_path("tbx_hello"));
	const char *args[] = {"worker",
			      "--config",
			      conf,
			      "-X",
			      "store.path=tbx-rel-check-s.db",
			      "-X",
			      "tokens.path=tbx-rel-check-t.db",
			      "-X",
			      "tokens.create=true",
			      "--check-config",
			      NULL};
	char cwd[4096], want[8400];
	cc_result_t res;
	struct stat st;

	cr_assert(getcwd(cwd, sizeof(cwd)));
	write_file(conf, text);
	res = cc_run(args);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	snprintf(want, sizeof(want),
		 "store tbx-rel-check-s.db (%s/tbx-rel-check-s.db), token "
		 "store tbx-rel-check-t.db (%s/tbx-rel-check-t.db)",
		 cwd, cwd);
	cr_expect(strstr(res.out, want), "%s\nwanted: %s", res.out, want);
	cr_expect(stat("tbx-rel-check-s.db", &st) != 0,
		  "the store was created");
	cr_expect(stat("tbx-rel-check-t.db", &st) != 0,
		  "the token store was created");
	cc_result_free(&res);
	free(text);
	free(conf);
	tt_rmrf(dir);
	free(dir);
}

Test(cli_worker, check_config_refuses_with_exit_2_and_the_reason,
     .timeout = 120)
{
	static const error_case_t cases[] = {
	    /* the store is no tokenbox file */
	    {GOOD_CONF "plugin=@PLUGIN@\n",
	     {"-X", "store.path=@CONF@", "--check-config"},
	     {"w.conf", "not a tokenbox"},
	     0},
	    /* the store cannot be created */
	    {GOOD_CONF "plugin=@PLUGIN@\n",
	     {"-X", "store.path=/proc/no/such/dir/s.db", "--check-config"},
	     {"store.path", "/proc/no/such/dir", "cannot be created"},
	     0},
	    /* no plugin, and a plugin that registers nothing */
	    {GOOD_CONF, {"--check-config"}, {"no plugin= given"}, 0},
	    {GOOD_CONF "plugin=@DIR@/../missing.so\n",
	     {"--check-config"},
	     {"missing.so", "cannot load"},
	     0},
	    /* a plugin whose init refuses its arguments */
	    {GOOD_CONF "plugin=@PLUGIN@\nplugin.args=frob=1\n",
	     {"--check-config"},
	     {"tbx_plugin_init failed"},
	     2},
	    /* a required key */
	    {"group.id=g\nstore.path=@DIR@/s.db\nplugin=@PLUGIN@\n",
	     {"--check-config"},
	     {"kafka.bootstrap.servers", "required"},
	     0},
	};

	run_error_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

/* A token store apart that does not exist: --check-config and a start
 * give the same answer, exit 2 with the reason, and neither leaves a
 * file behind. */
Test(cli_worker, a_missing_token_store_is_refused_by_check_and_start_alike,
     .timeout = 60)
{
	char *dir = tt_tmpdir();
	char *conf = tt_path(dir, "w.conf");
	char *store = tt_path(dir, "service.db");
	char *tokens = tt_path(dir, "tokens.db");
	char setting[4200];
	char *text = expand(GOOD_CONF "plugin=@PLUGIN@\n", dir,
			    tt_plugin_path("tbx_hello"));
	const char *check[] = {"worker", "--config",	   conf, "-X",
			       setting,	 "--check-config", NULL};
	const char *start[] = {"worker", "--config", conf, "-X", setting, NULL};
	const char *const *runs[] = {check, start};
	struct stat st;

	snprintf(setting, sizeof(setting), "tokens.path=%s", tokens);
	write_file(conf, text);
	for (size_t i = 0; i < 2; i++) {
		cc_result_t res = cc_run(runs[i]);

		cr_expect(cc_exited(res.status, 2), "%s: status %d: %s",
			  i ? "start" : "check", res.status, res.err);
		cr_expect_str_empty(res.out, "%s", res.out);
		cr_expect(strstr(res.err, "tokens.path: token store ") &&
			      strstr(res.err, tokens) &&
			      strstr(res.err, "does not exist") &&
			      strstr(res.err, "tokenbox init --tokens"),
			  "%s", res.err);
		cr_expect(stat(store, &st) != 0, "%s left %s behind",
			  i ? "start" : "check", store);
		cr_expect(stat(tokens, &st) != 0, "%s created %s",
			  i ? "start" : "check", tokens);
		cc_result_free(&res);
	}
	free(text);
	free(tokens);
	free(store);
	free(conf);
	tt_rmrf(dir);
	free(dir);
}

/* tokens.format=set for the worker's own messages needs
 * outbox.layout=batch: --check-config refuses the combination as a start
 * does, exit 2 with the same reason, and neither makes a store; with
 * outbox.layout=batch the check passes. */
Test(cli_worker,
     tokens_format_set_without_batch_rows_refused_by_check_and_start,
     .timeout = 60)
{
	char *dir = tt_tmpdir();
	char *conf = tt_path(dir, "w.conf");
	char *store = tt_path(dir, "service.db");
	char *text = expand(GOOD_CONF "plugin=@PLUGIN@\n", dir,
			    tt_plugin_path("tbx_hello"));
	const char *check[] = {"worker", "--config",	      conf,
			       "-X",	 "tokens.format=set", "--check-config",
			       NULL};
	const char *start[] = {"worker", "--config",	      conf,
			       "-X",	 "tokens.format=set", NULL};
	const char *const *runs[] = {check, start};
	const char *batch[] = {"worker",
			       "--config",
			       conf,
			       "-X",
			       "tokens.format=set",
			       "-X",
			       "outbox.layout=batch",
			       "--check-config",
			       NULL};
	struct stat st;
	cc_result_t res;

	write_file(conf, text);
	for (size_t i = 0; i < 2; i++) {
		res = cc_run(runs[i]);
		cr_expect(cc_exited(res.status, 2), "%s: status %d: %s",
			  i ? "start" : "check", res.status, res.err);
		cr_expect_str_empty(res.out, "%s", res.out);
		cr_expect(strstr(res.err, "tokens.format=set: a worker mints "
					  "token sets for its own messages "
					  "only with outbox.layout=batch"),
			  "%s: %s", i ? "start" : "check", res.err);
		cr_expect(stat(store, &st) != 0, "%s made %s",
			  i ? "start" : "check", store);
		cc_result_free(&res);
	}
	res = cc_run(batch);
	cr_expect(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_expect(strstr(res.out, "configuration OK"), "%s", res.out);
	cc_result_free(&res);
	free(text);
	free(store);
	free(conf);
	tt_rmrf(dir);
	free(dir);
}

Test(cli_worker, the_shipped_example_configurations_work_from_anywhere,
     .timeout = 60)
{
	static const char *const confs[] = {
	    "examples/orders/order-service.conf",
	    "examples/orders/payment-service.conf",
	    "examples/vouchers/vouchers.conf", "examples/mailer/mailer.conf"};
	char *dir = tt_tmpdir();
	char store[4200], tokens[4200], conf[4200];

	/* The test runs in the build's tests folder: a plugin= path taken
	 * from the current directory would not be found. */
	snprintf(store, sizeof(store), "store.path=%s/s.db", dir);
	snprintf(tokens, sizeof(tokens), "tokens.path=%s/t.db", dir);
	{
		/* The pipeline's token store is made first, as the
		 * examples' READMEs do. */
		const char *init[] = {"init", "--tokens", tokens + 12, NULL};
		cc_result_t res = cc_run(init);

		cr_assert(cc_exited(res.status, 0), "init: %s", res.err);
		cc_result_free(&res);
	}
	for (size_t i = 0; i < sizeof(confs) / sizeof(confs[0]); i++) {
		const char *args[] = {
		    "worker", "--config",	conf, "-X", store, "-X",
		    tokens,   "--check-config", NULL};
		cc_result_t res;

		snprintf(conf, sizeof(conf), "%s/%s", getenv("TBX_SOURCE_DIR"),
			 confs[i]);
		res = cc_run(args);
		cr_expect(cc_exited(res.status, 0), "%s: status %d: %s",
			  confs[i], res.status, res.err);
		cr_expect(strstr(res.out, "configuration OK"), "%s: %s",
			  confs[i], res.out);
		cc_result_free(&res);
	}
	tt_rmrf(dir);
	free(dir);
}

/* One layout per group: `tokenbox worker` on outbox.layout=record for a
 * group with a batch row left refuses to start with exit status 2 (a
 * restart would fail the same way), naming the group and the count.
 * --check-config says so first, read-only: it records no alarm. */
Test(cli_worker, a_record_worker_beside_batch_rows_exits_2, .timeout = 60)
{
	char *dir = tt_tmpdir();
	char *conf = tt_path(dir, "w.conf");
	char *store = tt_path(dir, "service.db");
	char *text = expand(GOOD_CONF "plugin=@PLUGIN@\n", dir,
			    tt_plugin_path("tbx_hello"));
	const char *start[] = {"worker", "--config", conf, NULL};
	const char *check[] = {"worker", "--config", conf, "--check-config",
			       NULL};
	cc_result_t res;

	tbx_outbox_close(tt_outbox_open(store));
	cr_assert_eq(tt_store_sql_try(store,
				      "INSERT INTO tbx_obatch (grp, row_id, "
				      "tokfmt, created_ms, cover, wire) VALUES "
				      "('g', "
				      "'00000000-0000-7000-8000-000000000001', "
				      "1, 0, X'00', X'0100000000')",
				      NULL),
		     0);
	write_file(conf, text);
	res = cc_run(check);
	cr_expect(cc_exited(res.status, 2), "--check-config: status %d: %s",
		  res.status, res.err);
	cr_expect(strstr(res.err, "group g has 1 batch row(s)") &&
		      strstr(res.err, "a start would be refused") &&
		      strstr(res.err, "layout_mixed") &&
		      !strstr(res.out, "configuration OK"),
		  "--check-config: %s%s", res.out, res.err);
	cc_result_free(&res);
	cr_expect_eq(tt_query(store, "SELECT COUNT(*) FROM tbx_alarms"), 0,
		     "--check-config recorded an alarm");
	res = cc_run(start);
	cr_expect(cc_exited(res.status, 2), "status %d: %s", res.status,
		  res.err);
	cr_expect(strstr(res.err, "group g has 1 batch row(s)") &&
		      strstr(res.err, "outbox.layout=record") &&
		      strstr(res.err, "layout_mixed"),
		  "%s", res.err);
	cc_result_free(&res);
	cr_expect_eq(tt_query(store, "SELECT COUNT(*) FROM tbx_alarms WHERE "
				     "name = 'layout_mixed'"),
		     1, "the start's refusal recorded no layout_mixed alarm");
	free(text);
	free(store);
	free(conf);
	tt_rmrf(dir);
	free(dir);
}
