/*
 * Rebalances as operators cause them, under both assignment strategies:
 * a `tokenbox mock-cluster` process and `tokenbox worker` processes of one
 * group (the orders example plugin) on a 6-partition topic; members join,
 * a member is SIGTERMed while the rebalance its neighbour's join started
 * is under way, another is SIGKILLed during the next, and one is SIGTERMed
 * before it ever had an assignment.  Afterwards: every order took effect
 * once, the group's committed offsets reached the end of every partition
 * (so its lag is 0), every SIGTERM ended its worker with status 0, and no
 * worker logged a commit refused by the rebalance as a warning.
 *
 * Each step waits for the progress it needs (orders handled so far, a log
 * line); nothing asserts how long anything took.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"

enum { ORDERS = 3000, PARTITIONS = 6, MAX_WORKERS = 8 };

typedef struct world {
	const char *strategy;
	char *dir, *orders_db, *tokens;
	tt_mock_proc_t cluster;
	pid_t pids[MAX_WORKERS];
	char *logs[MAX_WORKERS];
	int cnt;
} world_t;

/* Static: a failed assertion leaves scenario() by longjmp, and the
 * test's fini still needs the children to kill. */
static world_t the_world_storage;
static world_t *the_world;

static void kill_children(void)
{
	if (!the_world)
		return;
	for (int i = 0; i < the_world->cnt; i++)
		if (the_world->pids[i] > 0)
			kill(the_world->pids[i], SIGKILL);
	if (the_world->cluster.pid > 0)
		kill(the_world->cluster.pid, SIGKILL);
}

/* Starts a worker whose standard error goes to its own log file.
 * @returns its index. */
static int start_worker(world_t *w)
{
	char store[600], tokens[600], boot[300], plugin[600], strategy[100];
	const char *settings[] = {"group.id=order-service",
				  store,
				  tokens,
				  boot,
				  plugin,
				  "plugin.args=role=order-service",
				  strategy,
				  "kafka.consumer.session.timeout.ms=6000",
				  "kafka.consumer.heartbeat.interval.ms=500",
				  "kafka.consumer.fetch.wait.max.ms=10",
				  "batch.max.messages=50",
				  "stats.interval.ms=0",
				  "log.level=info",
				  NULL};
	int i = w->cnt++;

	cr_assert(i < MAX_WORKERS);
	snprintf(store, sizeof(store), "store.path=%s", w->orders_db);
	snprintf(tokens, sizeof(tokens), "tokens.path=%s", w->tokens);
	snprintf(boot, sizeof(boot), "kafka.bootstrap.servers=%s",
		 w->cluster.bootstraps);
	snprintf(plugin, sizeof(plugin), "plugin=%s",
		 tt_plugin_path("tbx_orders"));
	snprintf(strategy, sizeof(strategy),
		 "kafka.consumer.partition.assignment.strategy=%s",
		 w->strategy);
	char name[32];
	snprintf(name, sizeof(name), "worker-%d.log", i);
	w->logs[i] = tt_path(w->dir, name);
	w->pids[i] = tt_worker_start(settings, NULL, w->logs[i]);
	return i;
}

static int log_has(world_t *w, int i, const char *text)
{
	char *log = tt_read_text(w->logs[i]);
	int found = strstr(log, text) != NULL;

	free(log);
	return found;
}

/* Ends worker @p i with @p sig.  @returns its wait status. */
static int stop_worker(world_t *w, int i, int sig)
{
	kill(w->pids[i], sig);
	int status = tt_wait(w->pids[i], 90);
	w->pids[i] = 0;
	cr_assert(status != -1, "%s: worker %d did not stop", w->strategy, i);
	return status;
}

static void expect_clean_exit(world_t *w, int i, int status)
{
	char *log = tt_read_text(w->logs[i]);

	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "%s: worker %d: wait status %d after SIGTERM (%s); its "
		  "log:\n%s",
		  w->strategy, i, status,
		  WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exit",
		  log);
	free(log);
}

static int count(world_t *w, const char *sql)
{
	/* The plugin creates its table when the first worker starts. */
	if (access(w->orders_db, F_OK) != 0 ||
	    tt_count(w->orders_db, "SELECT COUNT(*) FROM sqlite_master WHERE "
				   "name = 'orders'") == 0)
		return 0;
	return (int)tt_count(w->orders_db, sql);
}

static void wait_orders(world_t *w, int n)
{
	time_t end = time(NULL) + 120 * tt_time_factor();

	while (time(NULL) < end &&
	       count(w, "SELECT COUNT(DISTINCT order_no) FROM orders") < n)
		usleep(50000);
}

/* Sum over the partitions of (end offset - committed offset): the lag
 * an operator's monitoring shows.  -1 when it cannot be read. */
static int64_t group_lag(rd_kafka_t *rk)
{
	rd_kafka_topic_partition_list_t *parts =
	    rd_kafka_topic_partition_list_new(PARTITIONS);
	int64_t lag = 0;

	for (int p = 0; p < PARTITIONS; p++)
		rd_kafka_topic_partition_list_add(parts, "orders", p);
	if (rd_kafka_committed(rk, parts, 5000)) {
		rd_kafka_topic_partition_list_destroy(parts);
		return -1;
	}
	for (int p = 0; p < PARTITIONS && lag >= 0; p++) {
		int64_t lo, hi, committed = parts->elems[p].offset;
		if (parts->elems[p].err || rd_kafka_query_watermark_offsets(
					       rk, "orders", p, &lo, &hi, 5000))
			lag = -1;
		else
			lag += hi - (committed < 0 ? lo : committed);
	}
	rd_kafka_topic_partition_list_destroy(parts);
	return lag;
}

static rd_kafka_t *lag_reader(world_t *w)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char err[256];

	cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers",
				       w->cluster.bootstraps, err, sizeof(err)),
		     RD_KAFKA_CONF_OK);
	cr_assert_eq(rd_kafka_conf_set(conf, "group.id", "order-service", err,
				       sizeof(err)),
		     RD_KAFKA_CONF_OK);
	rd_kafka_t *rk =
	    rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
	cr_assert(rk, "%s", err);
	return rk;
}

static void scenario(const char *strategy)
{
	static const char *const topics[] = {"orders:6", "payments:6",
					     "orders.dlq:1", NULL};
	world_t *w = &the_world_storage;

	memset(w, 0, sizeof(*w));
	w->strategy = strategy;
	the_world = w;
	w->dir = tt_tmpdir();
	w->orders_db = tt_path(w->dir, "order-service.db");
	w->tokens = tt_path(w->dir, "tokens.db");
	w->cluster = tt_mock_proc_start(topics);
	tt_subscribe(w->tokens, "orders", "order-service");

	int a = start_worker(w), b = start_worker(w);
	tt_publish_orders(w->cluster.bootstraps, w->tokens, ORDERS, 97);
	wait_orders(w, ORDERS / 10);

	/* A member joins; the rebalance it starts is under way when another
	 * member is told to stop. */
	int c = start_worker(w);
	usleep(300000);
	expect_clean_exit(w, a, stop_worker(w, a, SIGTERM));
	wait_orders(w, ORDERS / 3);

	/* Another joins, and a member dies during that rebalance. */
	int d = start_worker(w);
	usleep(300000);
	stop_worker(w, b, SIGKILL);

	/* One is stopped before its first assignment: once it subscribed,
	 * the group needs seconds to assign it anything. */
	int e = start_worker(w);
	time_t end = time(NULL) + 60 * tt_time_factor();
	while (time(NULL) < end && !log_has(w, e, "started:"))
		usleep(20000);
	cr_assert(log_has(w, e, "started:"), "worker %d never started", e);
	cr_assert(!log_has(w, e, "assigned "));
	expect_clean_exit(w, e, stop_worker(w, e, SIGTERM));

	/* Every order handled, nothing pending, and the group's lag 0. */
	rd_kafka_t *rk = lag_reader(w);
	int64_t lag = -1;
	int done = 0;
	end = time(NULL) + 180 * tt_time_factor();
	while (time(NULL) < end && !done) {
		done = count(w, "SELECT COUNT(DISTINCT order_no) FROM "
				"orders") == ORDERS &&
		       count(w, "SELECT COUNT(*) FROM tbx_outbox") == 0 &&
		       (lag = group_lag(rk)) == 0;
		if (!done)
			usleep(200000);
	}
	rd_kafka_destroy(rk);
	cr_assert_eq(count(w, "SELECT COUNT(DISTINCT order_no) FROM orders"),
		     ORDERS, "%s: not every order was handled", strategy);
	cr_assert_eq(count(w, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	cr_assert_eq(lag, 0,
		     "%s: the group's committed offsets stay behind the "
		     "records it processed (lag %lld)",
		     strategy, (long long)lag);

	expect_clean_exit(w, c, stop_worker(w, c, SIGTERM));
	expect_clean_exit(w, d, stop_worker(w, d, SIGTERM));
	cr_assert_eq(count(w, "SELECT COUNT(*) FROM orders"), ORDERS,
		     "%s: an order took effect twice", strategy);
	for (int i = 0; i < w->cnt; i++) {
		cr_assert(!log_has(w, i, "WARN librdkafka COMMITFAIL"),
			  "%s: worker %d warned of a commit the rebalance "
			  "refused",
			  strategy, i);
		cr_assert(!log_has(w, i, "Assertion"),
			  "%s: worker %d hit an assertion", strategy, i);
	}
	tt_mock_proc_stop(&w->cluster);
	w->cluster.pid = 0;
	for (int i = 0; i < w->cnt; i++)
		free(w->logs[i]);
	the_world = NULL;
	tt_rmrf(w->dir);
	free(w->dir);
	free(w->orders_db);
	free(w->tokens);
}

Test(rebalance_processes, eager_members_join_leave_and_die, .timeout = 600,
     .fini = kill_children)
{
	scenario("range");
}

Test(rebalance_processes, cooperative_members_join_leave_and_die,
     .timeout = 600, .fini = kill_children)
{
	scenario("cooperative-sticky");
}
