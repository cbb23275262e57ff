/*
 * The otel tier: the trace collector dies in the middle of a run.  The
 * deployment of `tokenbox demo` as processes -- a `tokenbox mock-cluster`,
 * order-service and payment-service as `tokenbox worker` processes with
 * the orders example plugin -- traces every record to a Jaeger of its own
 * (scripts/jaeger.sh, on ports no other test uses) while orders keep
 * coming.  Jaeger is frozen (SIGSTOP: connections hang), then killed
 * (SIGKILL), then started again on the same port.  Throughout, every
 * order takes effect once at both hops and orders published while the
 * collector is gone are handled; the lost spans are counted
 * (spans_dropped_total, spans_failed_total), logged at WARN, and once the
 * loss lasts, `inspect status --check` flags span_export_loss; after the
 * restart, Jaeger's query API finds the whole trace of an order published
 * after it.  Only outcomes are asserted, each waited for within a bound.
 *
 * Needs TBX_JAEGER_OTLP (the tier's Jaeger, left alone: only its port is
 * read, to put this test's Jaeger beside it) and TBX_SOURCE_DIR.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_child.h"
#include "fixture.h"
#include "jaeger_query.h"

/* Waits for an outcome, before the time factor. */
#define WAIT_MS	 60000
#define ROUND	 10 /* orders published at a time */
#define ORDERS_T "orders"
#define PAYS_T	 "payments"

typedef struct world {
	char *dir, *jdir, *orders_db, *payments_db, *tokens;
	char *order_log, *pay_log, *order_prom, *pay_prom;
	char endpoint[64], query[64];
	int port_base;
	tt_mock_proc_t mock;
	pid_t order, pay;
	tbx_publisher_t *pub;
	int sent; /* orders published: 0 .. sent-1 */
} world_t;

static world_t w;

static void wait_ms(int ms)
{
	usleep((useconds_t)ms * 1000);
}

/* ---- this test's Jaeger ---------------------------------------------- */

static int port_free(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

	cr_assert(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

/* Three free ports P, P+1, P+2 (scripts/jaeger.sh's layout) above the
 * tier's Jaeger. */
static int pick_port_base(void)
{
	const char *otlp = getenv("TBX_JAEGER_OTLP");
	const char *colon = strrchr(otlp, ':');
	int base;

	cr_assert(colon, "TBX_JAEGER_OTLP has no port: %s", otlp);
	base = atoi(colon + 1) + 10;
	for (int i = 0; i < 50; i++, base += 3) {
		if (base + 2 > 65000)
			base = 20000;
		if (port_free(base) && port_free(base + 1) &&
		    port_free(base + 2))
			return base;
	}
	cr_assert_fail("no three free ports for a second Jaeger");
	return 0;
}

/* scripts/jaeger.sh @p cmd on this test's directory and ports. */
static void jaeger(const char *cmd)
{
	char script[4096], port[16];
	const char *src = getenv("TBX_SOURCE_DIR");
	int status;

	cr_assert(src && *src, "TBX_SOURCE_DIR is not set (run through ctest)");
	snprintf(script, sizeof(script), "%s/scripts/jaeger.sh", src);
	snprintf(port, sizeof(port), "%d", w.port_base);
	char *const argv[] = {"/bin/bash", script,	  (char *)cmd, "--dir",
			      w.jdir,	   "--port-base", port,	       NULL};
	status = tt_wait(tt_spawn(argv, NULL), 300 * tt_time_factor());
	cr_assert(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "scripts/jaeger.sh %s failed (status %d); its log is "
		  "%s/jaeger.log",
		  cmd, status, w.jdir);
}

static pid_t jaeger_pid(void)
{
	char *path = tt_path(w.jdir, "pid");
	char *text = tt_read_text(path);
	pid_t pid = (pid_t)atoi(text);

	free(text);
	free(path);
	return pid;
}

/* Sends @p sig to this test's Jaeger and reaps it: the test is the
 * subreaper of the Jaeger that scripts/jaeger.sh left behind, so its pid
 * is gone once this returns, and a new start is not refused as "runs
 * already" by a zombie. */
static void jaeger_end(int sig)
{
	pid_t pid = jaeger_pid();

	cr_assert(pid > 0);
	cr_assert(kill(pid, sig) == 0, "kill %d: %s", (int)pid,
		  strerror(errno));
	cr_assert(tt_wait(pid, 60 * tt_time_factor()) != -1,
		  "Jaeger (%d) did not end on signal %d", (int)pid, sig);
}

/* ---- the deployment ---------------------------------------------------- */

static pid_t start_worker(const char *role, const char *log, const char *prom)
{
	char group[64], boot[1100], plugin[600], args[64], store[700],
	    tokens[700], endpoint[128], textfile[700];
	/* otel.exporter.otlp.timeout: an export to the frozen Jaeger hangs
	 * until it is killed; nothing but the queue's bound keeps a worker
	 * going meanwhile.  trace.loss.window.ms: the sustained loss is
	 * flagged after two windows of 5 s, not of a minute. */
	const char *settings[] = {group,
				  boot,
				  plugin,
				  args,
				  store,
				  tokens,
				  endpoint,
				  textfile,
				  "metrics.interval.ms=200",
				  "otel.bsp.schedule.delay=100",
				  "otel.bsp.max.queue.size=64",
				  "otel.exporter.otlp.timeout=600000",
				  "trace.loss.window.ms=5000",
				  "kafka.consumer.session.timeout.ms=6000",
				  "kafka.consumer.heartbeat.interval.ms=300",
				  "kafka.consumer.fetch.wait.max.ms=10",
				  "batch.max.ms=20",
				  "stats.interval.ms=0",
				  "log.level=info",
				  NULL};
	int orders = strcmp(role, "order-service") == 0;

	snprintf(group, sizeof(group), "group.id=%s", role);
	snprintf(boot, sizeof(boot), "kafka.bootstrap.servers=%s",
		 w.mock.bootstraps);
	snprintf(plugin, sizeof(plugin), "plugin=%s",
		 tt_plugin_path("tbx_orders"));
	snprintf(args, sizeof(args), "plugin.args=role=%s", role);
	snprintf(store, sizeof(store), "store.path=%s",
		 orders ? w.orders_db : w.payments_db);
	snprintf(tokens, sizeof(tokens), "tokens.path=%s", w.tokens);
	snprintf(endpoint, sizeof(endpoint), "otel.exporter.otlp.endpoint=%s",
		 w.endpoint);
	snprintf(textfile, sizeof(textfile), "metrics.textfile=%s", prom);
	return tt_worker_start(settings, NULL, log);
}

static void cleanup(void)
{
	if (w.order > 0)
		kill(w.order, SIGKILL);
	if (w.pay > 0)
		kill(w.pay, SIGKILL);
	if (w.mock.pid > 0)
		kill(w.mock.pid, SIGKILL);
	if (w.jdir) {
		pid_t pid = jaeger_pid();
		if (pid > 0)
			kill(pid, SIGKILL);
	}
}

/* The counter @p name of group @p group in the metrics textfile @p prom;
 * 0 before the file or the series is there. */
static long long metric(const char *prom, const char *name, const char *group)
{
	char series[256], *text = tt_read_text(prom), *at;
	long long v = 0;

	snprintf(series, sizeof(series), "\n%s{group=\"%s\"} ", name, group);
	if ((at = strstr(text, series)))
		v = strtoll(at + strlen(series), NULL, 10);
	free(text);
	return v;
}

static long long order_metric(const char *name)
{
	return metric(w.order_prom, name, "order-service");
}

static long long pay_metric(const char *name)
{
	return metric(w.pay_prom, name, "payment-service");
}

static int count(const char *db, const char *sql)
{
	int64_t v = tt_query(db, sql); /* -1: no table yet */

	return v < 0 ? 0 : (int)v;
}

static void fail_with_logs(const char *what)
{
	char *a = tt_read_text(w.order_log), *b = tt_read_text(w.pay_log);

	cr_assert_fail("%s\n--- order-service:\n%s\n--- payment-service:\n%s",
		       what, a, b);
	free(a);
	free(b);
}

/* Publishes @p n more orders, keyed "order-<n>" (one trace each), and
 * waits until both hops handled every order published so far: the
 * workers are not stopped or stalled, whatever the collector does. */
static void round_through(int n)
{
	char key[32], payload[64], what[128];
	long long deadline;

	for (int i = 0; i < n; i++, w.sent++) {
		snprintf(key, sizeof(key), "order-%d", w.sent);
		snprintf(payload, sizeof(payload),
			 "{\"order\": \"%d\", \"amount\": %d}", w.sent,
			 100 + w.sent % 900);
		tbx_out_t out = {.topic = "orders",
				 .type = "OrderPlaced",
				 .key = key,
				 .key_len = strlen(key),
				 .payload = payload,
				 .payload_len = strlen(payload)};
		cr_assert_eq(tbx_publish(w.pub, &out), TBX_OK, "%s",
			     tbx_publisher_errstr(w.pub));
	}
	cr_assert_eq(tbx_publisher_flush(w.pub, NULL), TBX_OK, "%s",
		     tbx_publisher_errstr(w.pub));
	deadline = cc_now_ms() + (long long)WAIT_MS * tt_time_factor();
	while (count(w.orders_db, "SELECT COUNT(DISTINCT order_no) FROM "
				  "orders") < w.sent ||
	       count(w.payments_db, "SELECT COUNT(DISTINCT order_no) FROM "
				    "payments") < w.sent) {
		if (cc_now_ms() >= deadline) {
			snprintf(what, sizeof(what),
				 "the workers did not handle the %d orders "
				 "published so far",
				 w.sent);
			fail_with_logs(what);
		}
		wait_ms(20);
	}
}

/* 1 when a line of @p log at WARN has @p text. */
static int warned(const char *log, const char *text)
{
	char *all = tt_read_text(log), *line = all, *end;
	int found = 0;

	for (; !found && line; line = end ? end + 1 : NULL) {
		if ((end = strchr(line, '\n')))
			*end = '\0';
		found = strstr(line, " WARN ") && strstr(line, text);
	}
	free(all);
	return found;
}

/* `tokenbox inspect status --check` on order-service's store: 1 when it
 * exits 1 naming span_export_loss. */
static int loss_flagged(void)
{
	const char *args[] = {"inspect", "--store", w.orders_db, "--tokens",
			      w.tokens,	 "status",  "--check",	 NULL};
	cc_result_t r = cc_run(args);
	int flagged =
	    cc_exited(r.status, 1) && strstr(r.out, "span_export_loss");

	cc_result_free(&r);
	return flagged;
}

/* ---- Jaeger's query API ------------------------------------------------ */

static const char *str_of(cJSON *o, const char *key)
{
	cJSON *v = cJSON_GetObjectItem(o, key);
	return cJSON_IsString(v) ? v->valuestring : "";
}

static const char *tag_of(cJSON *span, const char *key)
{
	cJSON *t;

	cJSON_ArrayForEach(t, cJSON_GetObjectItem(span, "tags"))
	{
		if (strcmp(str_of(t, "key"), key) == 0)
			return str_of(t, "value");
	}
	return "";
}

static const char *service_of(cJSON *trace, cJSON *span)
{
	cJSON *p = cJSON_GetObjectItem(cJSON_GetObjectItem(trace, "processes"),
				       str_of(span, "processID"));
	return str_of(p, "serviceName");
}

/* The span id of @p span's CHILD_OF reference ("" when none): a link
 * (FOLLOWS_FROM) is not a parent, and Jaeger shows a parent that a link
 * duplicates as FOLLOWS_FROM (test_otel_demo checks there is none). */
static const char *parent_of(cJSON *span)
{
	cJSON *r;

	cJSON_ArrayForEach(r, cJSON_GetObjectItem(span, "references"))
	{
		if (strcmp(str_of(r, "refType"), "CHILD_OF") == 0)
			return str_of(r, "spanID");
	}
	return "";
}

static cJSON *child_of(cJSON *trace, const char *service, const char *op,
		       const char *parent)
{
	cJSON *s;

	cJSON_ArrayForEach(s, cJSON_GetObjectItem(trace, "spans"))
	{
		if (strcmp(service_of(trace, s), service) == 0 &&
		    strcmp(str_of(s, "operationName"), op) == 0 &&
		    strcmp(parent_of(s), parent) == 0)
			return s;
	}
	return NULL;
}

/* The number of orders from @p first on whose whole trace Jaeger holds:
 * order-service's process span of the order (no parent: the publisher
 * traces nothing), its send span and payment-service's process span,
 * parent to child. */
static int whole_traces_from(int first)
{
	char url[512];
	char *body;
	cJSON *doc, *trace;
	int n = 0;

	snprintf(url, sizeof(url),
		 "%s/api/traces?service=order-service&limit=100000", w.query);
	if (!(body = tt_jaeger_get(url, 10000L)))
		return 0;
	doc = cJSON_Parse(body);
	free(body);
	cJSON_ArrayForEach(trace, cJSON_GetObjectItem(doc, "data"))
	{
		cJSON *proc =
		    child_of(trace, "order-service", "process orders", "");
		cJSON *send;
		const char *key = proc ? tag_of(proc, "messaging.kafka."
						      "message.key")
				       : "";

		if (strncmp(key, "order-", 6) != 0 || atoi(key + 6) < first)
			continue;
		send = child_of(trace, "order-service", "send payments",
				str_of(proc, "spanID"));
		if (send &&
		    child_of(trace, "payment-service", "process payments",
			     str_of(send, "spanID")))
			n++;
	}
	cJSON_Delete(doc);
	return n;
}

/* Publishes rounds until Jaeger holds a whole trace of an order from
 * @p first on. */
static void traces_arrive_from(int first, const char *when)
{
	long long deadline =
	    cc_now_ms() + (long long)2 * WAIT_MS * tt_time_factor();
	char what[160];

	while (!whole_traces_from(first)) {
		if (cc_now_ms() >= deadline) {
			snprintf(what, sizeof(what),
				 "%s: Jaeger (%s) holds no whole trace of "
				 "orders %d to %d",
				 when, w.query, first, w.sent - 1);
			fail_with_logs(what);
		}
		round_through(ROUND);
		wait_ms(500);
	}
}

/* ---- the test ---------------------------------------------------------- */

Test(otel_kill, a_collector_frozen_then_killed_mid_run_never_stops_a_worker,
     .timeout = 900, .fini = cleanup)
{
	static const char *const topics[] = {
	    "orders:2", "payments:2", "orders.dlq:1", "payments.dlq:1", NULL};
	long long dropped, failed, pay_failed, exported;
	long long deadline;
	int frozen_at, killed_at, after_restart;

	if (!getenv("TBX_JAEGER_OTLP") || !*getenv("TBX_JAEGER_OTLP"))
		cr_skip_test("the otel tier needs Jaeger: "
			     "TBX_JAEGER_OTLP=$(bash scripts/jaeger.sh start)");
	/* Jaeger's process, left by scripts/jaeger.sh, becomes our child
	 * when the script exits: this test can reap it once killed. */
	cr_assert(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);

	memset(&w, 0, sizeof(w));
	w.dir = tt_tmpdir();
	w.jdir = tt_path(w.dir, "jaeger");
	w.orders_db = tt_path(w.dir, "order-service.db");
	w.payments_db = tt_path(w.dir, "payment-service.db");
	w.tokens = tt_path(w.dir, "tokens.db");
	w.order_log = tt_path(w.dir, "order-service.log");
	w.pay_log = tt_path(w.dir, "payment-service.log");
	w.order_prom = tt_path(w.dir, "order-service.prom");
	w.pay_prom = tt_path(w.dir, "payment-service.prom");
	w.port_base = pick_port_base();
	snprintf(w.endpoint, sizeof(w.endpoint), "http://127.0.0.1:%d",
		 w.port_base);
	snprintf(w.query, sizeof(w.query), "http://127.0.0.1:%d",
		 w.port_base + 1);
	jaeger("start");

	w.mock = tt_mock_proc_start(topics);
	tt_tokens_init(w.tokens);
	tt_subscribe(w.tokens, "orders", "order-service");
	tt_subscribe(w.tokens, "payments", "payment-service");
	w.order = start_worker("order-service", w.order_log, w.order_prom);
	w.pay = start_worker("payment-service", w.pay_log, w.pay_prom);
	w.pub = tt_publisher(w.mock.bootstraps, w.tokens, "error");

	/* The collector up: the orders' traces reach it. */
	traces_arrive_from(0, "with Jaeger up");
	cr_expect(tt_wait_log(w.order_log, "otel: tracing on", 1000));

	/* Frozen: connections are accepted by the kernel and never
	 * answered.  The export in flight hangs (its timeout is longer than
	 * the test), the queue fills, and further spans are dropped, not
	 * waited for. */
	cr_assert(kill(jaeger_pid(), SIGSTOP) == 0);
	frozen_at = w.sent;
	dropped = order_metric("tokenbox_spans_dropped_total");
	deadline = cc_now_ms() + (long long)4 * WAIT_MS * tt_time_factor();
	do {
		round_through(ROUND);
		if (cc_now_ms() >= deadline)
			fail_with_logs("no span was dropped while Jaeger was "
				       "frozen");
	} while (order_metric("tokenbox_spans_dropped_total") == dropped);
	/* Said at WARN while the export still hangs, not once it ends. */
	deadline = cc_now_ms() + (long long)WAIT_MS * tt_time_factor();
	while (!warned(w.order_log, "dropped, the export queue being full")) {
		if (cc_now_ms() >= deadline)
			fail_with_logs("no WARN line about dropped spans while "
				       "the export to the frozen Jaeger hangs");
		wait_ms(100);
	}
	/* A worker stopped now (its export hanging) stops within its
	 * shutdown's flush bound, and one started now runs. */
	kill(w.pay, SIGTERM);
	cr_expect(cc_exited(cc_wait(w.pay, WAIT_MS * tt_time_factor()), 0),
		  "payment-service did not exit 0 on SIGTERM with Jaeger "
		  "frozen");
	unlink(w.pay_prom); /* the counters start again with the process */
	w.pay = start_worker("payment-service", w.pay_log, w.pay_prom);
	round_through(ROUND);

	/* Killed: what was in flight fails, every export after it too. */
	failed = order_metric("tokenbox_spans_failed_total");
	pay_failed = pay_metric("tokenbox_spans_failed_total");
	jaeger_end(SIGKILL);
	killed_at = w.sent;
	round_through(ROUND);
	deadline = cc_now_ms() + (long long)4 * WAIT_MS * tt_time_factor();
	while (order_metric("tokenbox_spans_failed_total") == failed ||
	       pay_metric("tokenbox_spans_failed_total") == pay_failed) {
		if (cc_now_ms() >= deadline)
			fail_with_logs("no span was counted as failed after "
				       "Jaeger was killed");
		round_through(ROUND);
		wait_ms(200);
	}

	/* Orders keep coming while the collector stays gone: the loss
	 * lasts, and is flagged for the operator. */
	deadline = cc_now_ms() + (long long)6 * WAIT_MS * tt_time_factor();
	while (!loss_flagged()) {
		if (cc_now_ms() >= deadline)
			fail_with_logs("inspect status --check never flagged "
				       "span_export_loss");
		round_through(ROUND / 2);
		wait_ms(500);
	}
	cr_expect(warned(w.order_log, "spans lost in failed exports"),
		  "no WARN line about failed exports");
	cr_expect(warned(w.pay_log, "spans lost in failed exports"),
		  "no WARN line about failed exports");
	cr_expect(warned(w.order_log, "span_export_loss") ||
		      warned(w.order_log, "spans lost in the last"),
		  "no WARN line about the sustained loss");

	/* Started again on the same port: spans are exported again. */
	exported = order_metric("tokenbox_spans_exported_total");
	jaeger("start");
	after_restart = w.sent;
	traces_arrive_from(after_restart, "after Jaeger's restart");
	cr_expect_gt(order_metric("tokenbox_spans_exported_total"), exported);

	/* Both workers ran all along and stop cleanly. */
	cr_assert_eq(waitpid(w.order, NULL, WNOHANG), 0,
		     "order-service exited");
	cr_assert_eq(waitpid(w.pay, NULL, WNOHANG), 0,
		     "payment-service exited");
	tbx_publisher_destroy(w.pub);
	w.pub = NULL;
	kill(w.order, SIGTERM);
	kill(w.pay, SIGTERM);
	cr_expect(cc_exited(cc_wait(w.order, WAIT_MS * tt_time_factor()), 0),
		  "order-service did not exit 0 on SIGTERM");
	cr_expect(cc_exited(cc_wait(w.pay, WAIT_MS * tt_time_factor()), 0),
		  "payment-service did not exit 0 on SIGTERM");
	w.order = w.pay = 0;

	/* Every order took effect once at each hop; nothing is left. */
	cr_expect_eq(count(w.orders_db, "SELECT COUNT(*) FROM orders"), w.sent);
	cr_expect_eq(
	    count(w.orders_db, "SELECT COUNT(DISTINCT order_no) FROM orders"),
	    w.sent);
	cr_expect_eq(count(w.payments_db, "SELECT COUNT(*) FROM payments"),
		     w.sent);
	cr_expect_eq(count(w.payments_db,
			   "SELECT COUNT(DISTINCT order_no) FROM payments"),
		     w.sent);
	cr_expect_eq(count(w.orders_db, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	cr_expect_eq(count(w.payments_db, "SELECT COUNT(*) FROM tbx_outbox"),
		     0);
	cr_log_info("%d orders; Jaeger frozen at order %d, killed at %d, "
		    "back at %d",
		    w.sent, frozen_at, killed_at, after_restart);

	jaeger_end(SIGTERM);
	tt_mock_proc_stop(&w.mock);
	w.mock.pid = 0;
	tt_rmrf(w.dir);
}
