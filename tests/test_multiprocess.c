/*
 * The deployment as operators run it: a `tokenbox mock-cluster` process,
 * three `tokenbox worker` processes of order-service on a 6-partition
 * topic and one of payment-service, loading the orders example plugin;
 * 20,000 orders, 10% of them re-produced by a separate client; workers
 * killed with SIGKILL and restarted at random moments, and a fourth
 * worker added and removed to force rebalances.  Afterwards the business
 * tables must hold every order exactly once, and the stores nothing.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"

enum { ORDERS = 20000, ORDER_WORKERS = 3 };

typedef struct world {
	char *dir, *orders_db, *payments_db, *tokens;
	char bootstraps[1024];
} world_t;

/* Every child, so that a failed assertion does not leave processes that
 * hold the test runner's output open. */
static pid_t children[256];
static size_t child_cnt;

static pid_t remember(pid_t pid)
{
	if (child_cnt < sizeof(children) / sizeof(children[0]))
		children[child_cnt++] = pid;
	return pid;
}

static void kill_children(void)
{
	for (size_t i = 0; i < child_cnt; i++)
		kill(children[i], SIGKILL);
}

static pid_t start_worker(world_t *w, const char *role)
{
	char group[64], boot[1100], plugin[600], args[64];
	char stores[5][sizeof(tt_kv_t) + 2];
	int orders = strcmp(role, "order-service") == 0;
	tt_kv_t kv[5];
	/* Paths, or a server's URL and schemas (the pg tier). */
	int n =
	    tt_stores_kv(orders ? w->orders_db : w->payments_db, w->tokens, kv);
	const char *more[6] = {NULL};
	const char *settings[] = {group,
				  boot,
				  plugin,
				  args,
				  "kafka.consumer.session.timeout.ms=4000",
				  "kafka.consumer.heartbeat.interval.ms=300",
				  "kafka.consumer.fetch.wait.max.ms=10",
				  "cleanup.interval.ms=500",
				  "stats.interval.ms=0",
				  "log.level=error",
				  NULL};

	for (int i = 0; i < n; i++) {
		snprintf(stores[i], sizeof(stores[i]), "%.31s=%.2199s",
			 kv[i].key, kv[i].val);
		more[i] = stores[i];
	}
	snprintf(group, sizeof(group), "group.id=%s", role);
	snprintf(boot, sizeof(boot), "kafka.bootstrap.servers=%s",
		 w->bootstraps);
	snprintf(plugin, sizeof(plugin), "plugin=%s",
		 tt_plugin_path("tbx_orders"));
	snprintf(args, sizeof(args), "plugin.args=role=%s", role);
	return remember(tt_worker_start(settings, more, NULL));
}

/*
 * @p want_clean: SIGTERM must end it with exit 0.  Not asked of a worker
 * started moments ago: a signal that arrives before main() (exec, the
 * loader, a sanitizer's start-up) kills by its default action, whatever
 * the program does.  test_cli_worker.c checks the clean stop itself.
 */
static void stop_worker(pid_t pid, int sig, int want_clean)
{
	kill(pid, sig);
	int status = tt_wait(pid, 60);
	cr_assert(status != -1, "worker %d did not stop", (int)pid);
	if (want_clean)
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "worker %d: status %d after SIGTERM", (int)pid,
			  status);
}

static int count(const char *db, const char *sql)
{
	/* The tables appear with the first order a store handles: none
	 * yet (or a store not there yet) counts 0. */
	int64_t v = tt_query(db, sql);

	return v < 0 ? 0 : (int)v;
}

static int drained(world_t *w)
{
	return count(w->orders_db, "SELECT COUNT(DISTINCT order_no) FROM "
				   "orders") >= ORDERS &&
	       count(w->payments_db, "SELECT COUNT(DISTINCT order_no) FROM "
				     "payments") >= ORDERS &&
	       count(w->orders_db, "SELECT COUNT(*) FROM tbx_outbox") == 0 &&
	       count(w->payments_db, "SELECT COUNT(*) FROM tbx_outbox") == 0;
}

Test(multiprocess, three_workers_killed_at_random_keep_every_order_once,
     .timeout = 600, .fini = kill_children)
{
	world_t w;
	pid_t order[ORDER_WORKERS], payment, extra = 0;
	unsigned seed = (unsigned)time(NULL);
	int kills = 0, rebalances = 0;
	tt_mock_proc_t mock = {0};

	memset(&w, 0, sizeof(w));
	w.dir = tt_tmpdir();
	/* Files, or in the pg tier schemas of one database (support.h). */
	w.orders_db = tt_store_new(w.dir, "order_service");
	w.payments_db = tt_store_new(w.dir, "payment_service");
	w.tokens = tt_tokens_new(w.dir, "tokens", 1);
	cr_log_info("seed %u", seed);

	if (tt_real_kafka()) {
		/* The kafka tier: the real broker, emptied, with the same
		 * topics. */
		tt_cluster_t *real = tt_cluster_new(1);
		tt_cluster_topic(real, "orders", 6);
		tt_cluster_topic(real, "payments", 6);
		tt_cluster_topic(real, "orders.dlq", 1);
		tt_cluster_topic(real, "payments.dlq", 1);
		snprintf(w.bootstraps, sizeof(w.bootstraps), "%s",
			 real->bootstraps);
		tt_cluster_destroy(real);
	} else {
		static const char *const topics[] = {"orders:6", "payments:6",
						     "orders.dlq:1",
						     "payments.dlq:1", NULL};
		mock = tt_mock_proc_start(topics);
		remember(mock.pid);
		snprintf(w.bootstraps, sizeof(w.bootstraps), "%s",
			 mock.bootstraps);
	}

	/* Subscriptions first, so every order is tokened for both groups. */
	tt_subscribe(w.tokens, "orders", "order-service");
	tt_subscribe(w.tokens, "payments", "payment-service");
	for (int i = 0; i < ORDER_WORKERS; i++)
		order[i] = start_worker(&w, "order-service");
	payment = start_worker(&w, "payment-service");
	tt_publish_orders(w.bootstraps, w.tokens, ORDERS, 997);
	cr_log_info("published %d orders", ORDERS);

	/* Chaos for a while: kills, restarts, a member coming and going,
	 * and upstream re-sending a tenth of the orders. */
	time_t chaos_end = time(NULL) + 25;
	int resent = 0;
	while (time(NULL) < chaos_end) {
		usleep(500000 + rand_r(&seed) % 1500000);
		int i = (int)(rand_r(&seed) % ORDER_WORKERS);
		if (rand_r(&seed) % 4 == 0) {
			stop_worker(payment, SIGKILL, 0);
			payment = start_worker(&w, "payment-service");
		} else {
			stop_worker(order[i], SIGKILL, 0);
			usleep(rand_r(&seed) % 500000);
			order[i] = start_worker(&w, "order-service");
		}
		kills++;
		cr_log_info("kill %d", kills);
		if (!extra && rand_r(&seed) % 3 == 0) {
			extra = start_worker(&w, "order-service");
			rebalances++;
		} else if (extra && rand_r(&seed) % 2 == 0) {
			stop_worker(extra, SIGTERM, 0);
			extra = 0;
			rebalances++;
		}
		if (!resent) {
			/* A tenth of the orders, byte for byte. */
			tt_record_t *recs;
			size_t cnt =
			    tt_read_topic(w.bootstraps, "orders", &recs);
			tt_record_t *tenth =
			    calloc(cnt / 10 + 1, sizeof(*tenth));
			size_t k = 0;
			for (size_t j = 0; j < cnt; j += 10)
				tenth[k++] = recs[j]; /* borrowed */
			tt_reproduce(w.bootstraps, "orders", tenth, k);
			free(tenth);
			tt_records_free(recs, cnt);
			resent = (int)k;
		}
	}
	if (extra)
		stop_worker(extra, SIGTERM, 0);
	cr_assert_gt(resent, 0);

	cr_log_info("chaos over: kills %d, rebalances %d", kills, rebalances);
	time_t end = time(NULL) + 240 * tt_time_factor();
	while (time(NULL) < end && !drained(&w))
		usleep(200000);
	cr_assert(drained(&w), "the pipeline did not drain (seed %u)", seed);
	/* A sweep interval or two for the orphans of killed attempts. */
	time_t sweep_end = time(NULL) + 30 * tt_time_factor();
	while (time(NULL) < sweep_end &&
	       (tt_count(w.tokens, "SELECT COUNT(*) FROM tbx_tokens") ||
		tt_count(w.tokens, "SELECT COUNT(*) FROM tbx_registrations")))
		usleep(200000);
	for (int i = 0; i < ORDER_WORKERS; i++)
		stop_worker(order[i], SIGTERM, 1);
	stop_worker(payment, SIGTERM, 1);
	if (mock.pid)
		tt_mock_proc_stop(&mock);

	cr_log_info("kills %d, rebalances %d, re-sent %d", kills, rebalances,
		    resent);
	cr_assert_eq(tt_count(w.orders_db, "SELECT COUNT(*) FROM orders"),
		     ORDERS, "an order took effect twice (seed %u)", seed);
	cr_assert_eq(tt_count(w.payments_db, "SELECT COUNT(*) FROM payments"),
		     ORDERS, "a payment took effect twice (seed %u)", seed);
	cr_assert_eq(tt_count(w.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cr_assert_eq(
	    tt_count(w.tokens, "SELECT COUNT(*) FROM tbx_registrations"), 0);
	tt_rmrf(w.dir);
	free(w.dir);
	free(w.orders_db);
	free(w.payments_db);
	free(w.tokens);
}
