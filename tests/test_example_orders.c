/*
 * examples/orders: the demo's two services as one plugin, loaded with
 * dlopen() as `tokenbox worker` does and driven in process over the mock
 * cluster.  Each order is handled once by both services, whatever copies
 * upstream re-sends.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "tokenbox/testkit.h"

#define ORDERS	  500
#define CUSTOMERS 50

typedef struct env {
	char *dir, *orders_db, *payments_db, *tokens;
	tt_cluster_t *cluster;
	tt_plugin_t plugin;
} env_t;

static void env_init(env_t *e)
{
	e->dir = tt_tmpdir();
	/* Files, or in the pg tier schemas (support.h). */
	e->orders_db = tt_store_new(e->dir, "orders");
	e->payments_db = tt_store_new(e->dir, "payments");
	e->tokens = tt_tokens_new(e->dir, "tokens", 1);
	e->cluster = tt_cluster_new(1);
	tt_cluster_topic(e->cluster, "orders", 4);
	tt_cluster_topic(e->cluster, "payments", 4);
	tt_cluster_topic(e->cluster, "orders.dlq", 1);
	tt_cluster_topic(e->cluster, "payments.dlq", 1);
	tt_plugin_open(&e->plugin, "libtbx_orders.so");
}

static void env_fini(env_t *e)
{
	tt_plugin_close(&e->plugin);
	tt_cluster_destroy(e->cluster);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->orders_db);
	free(e->payments_db);
	free(e->tokens);
}

/* A worker of @p group whose handlers the plugin registers with @p args;
 * its first poll subscribes the group in the token store. */
static tbx_worker_t *plugin_worker(env_t *e, const char *group,
				   const char *store, const char *args)
{
	char err[512];
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(e->cluster->bootstraps, group, store, e->tokens,
		    "cleanup.interval.ms", "100", NULL),
	    err, sizeof(err));

	cr_assert(w, "%s", err);
	cr_assert_eq(e->plugin.init(w, args), TBX_OK, "init(\"%s\")", args);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	return w;
}

static tbx_publisher_t *publisher(env_t *e)
{
	char err[512];
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;

	tbx_conf_set(conf, "kafka.bootstrap.servers", e->cluster->bootstraps,
		     NULL, 0);
	cr_assert_eq(tt_stores_conf(conf, NULL, e->tokens, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_conf_set(conf, "log.level", "warning", NULL, 0);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "publisher: %s", err);
	return pub;
}

static void publish(tbx_publisher_t *pub, const char *key, const char *payload)
{
	tbx_out_t out = {.topic = "orders",
			 .type = "OrderPlaced",
			 .key = key,
			 .key_len = strlen(key),
			 .payload = payload,
			 .payload_len = strlen(payload)};

	cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
}

static void flush(tbx_publisher_t *pub)
{
	size_t failed;

	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	tbx_publisher_destroy(pub);
}

/* Publishes orders [first, first + cnt) with tokens, keyed by customer:
 * {"order": "<i>", "amount": 100 + i}, customer-<i % 50>. */
static void publish_orders(env_t *e, int first, int cnt)
{
	tbx_publisher_t *pub = publisher(e);
	char key[32], payload[96];

	for (int i = first; i < first + cnt; i++) {
		snprintf(key, sizeof(key), "customer-%d", i % CUSTOMERS);
		snprintf(payload, sizeof(payload),
			 "{\"order\":\"%d\",\"amount\":%d}", i, 100 + i);
		publish(pub, key, payload);
	}
	flush(pub);
}

/* Rows of the table "orders" or "payments" in @p db, or -1 while the
 * plugin has not created it. */
static int64_t rows(const char *db, const char *table)
{
	int orders = strcmp(table, "orders") == 0;

	if (!tt_table_exists(db, table))
		return -1;
	return tt_count(db, orders ? "SELECT COUNT(*) FROM orders"
				   : "SELECT COUNT(*) FROM payments");
}

/* Re-produces every record of @p topic whose index % 10 is @p pick: about
 * 10% of them, byte for byte (same tbx-id, same tbx-token). */
static size_t reproduce_tenth(env_t *e, const char *topic, size_t pick)
{
	tt_record_t *recs, *some;
	size_t cnt, n = 0;

	cnt = tt_read_topic(e->cluster->bootstraps, topic, &recs);
	some = calloc(cnt + 1, sizeof(*some));
	for (size_t i = 0; i < cnt; i++)
		if (i % 10 == pick)
			some[n++] = recs[i]; /* borrowed: freed with recs */
	tt_reproduce(e->cluster->bootstraps, topic, some, n);
	free(some);
	tt_records_free(recs, cnt);
	return n;
}

typedef struct progress {
	env_t *e;
	tbx_worker_t **w;
	uint64_t want_consumed[2];
} progress_t;

/* Both tables hold every order, every record (copies included) was
 * consumed, and no outbox row is left. */
static int all_done(void *opaque)
{
	progress_t *p = opaque;
	tbx_stats_t st[2];

	tbx_worker_stats(p->w[0], &st[0]);
	tbx_worker_stats(p->w[1], &st[1]);
	return st[0].consumed >= p->want_consumed[0] &&
	       st[1].consumed >= p->want_consumed[1] &&
	       rows(p->e->orders_db, "orders") >= ORDERS &&
	       rows(p->e->payments_db, "payments") >= ORDERS &&
	       tt_count(p->e->orders_db, "SELECT COUNT(*) FROM tbx_outbox") ==
		   0 &&
	       tt_count(p->e->payments_db, "SELECT COUNT(*) FROM tbx_outbox") ==
		   0;
}

Test(example_orders, both_services_handle_each_order_once_despite_copies)
{
	env_t e;
	tbx_worker_t *w[2];
	tbx_stats_t st[2];
	size_t early, late_orders, late_payments;

	env_init(&e);
	/* One plugin, two services: separate groups and stores, one token
	 * store for the pipeline. */
	w[0] = plugin_worker(&e, "order-service", e.orders_db,
			     "role=order-service");
	w[1] = plugin_worker(&e, "payment-service", e.payments_db,
			     "role=payment-service");
	publish_orders(&e, 1, ORDERS);
	/* Upstream re-sends 10% before anything was handled... */
	early = reproduce_tenth(&e, "orders", 3);
	progress_t p = {&e, w, {ORDERS + early, ORDERS}};
	cr_assert(tt_drive(w, 2, all_done, &p, 5, 120),
		  "orders %lld, payments %lld",
		  (long long)rows(e.orders_db, "orders"),
		  (long long)rows(e.payments_db, "payments"));
	/* ... and another 10% at both hops once all was handled. */
	late_orders = reproduce_tenth(&e, "orders", 7);
	late_payments = reproduce_tenth(&e, "payments", 7);
	cr_assert_geq(late_orders, ORDERS / 10);
	cr_assert_geq(late_payments, ORDERS / 10);
	p.want_consumed[0] += late_orders;
	p.want_consumed[1] += late_payments;
	cr_assert(tt_drive(w, 2, all_done, &p, 20, 120));

	cr_assert_eq(rows(e.orders_db, "orders"), ORDERS);
	cr_assert_eq(tt_count(e.orders_db,
			      "SELECT COUNT(DISTINCT order_no) FROM orders"),
		     ORDERS);
	cr_assert_eq(rows(e.payments_db, "payments"), ORDERS);
	cr_assert_eq(tt_count(e.payments_db,
			      "SELECT COUNT(DISTINCT order_no) FROM payments"),
		     ORDERS);
	/* The payment of an order is the order's: same customer, same
	 * amount (order i: customer-(i % 50), amount 100 + i). */
	cr_assert_eq(
	    tt_count(e.payments_db,
		     "SELECT COUNT(*) FROM payments WHERE amount != 100 + "
		     "CAST(order_no AS INTEGER) OR customer != 'customer-' || "
		     "(CAST(order_no AS INTEGER) % 50)"),
	    0);
	cr_assert_eq(tt_count(e.orders_db,
			      "SELECT COUNT(*) FROM orders WHERE amount != 100 "
			      "+ CAST(order_no AS INTEGER)"),
		     0);
	/* Every copy was recognised as one, at both hops. */
	tbx_worker_stats(w[0], &st[0]);
	tbx_worker_stats(w[1], &st[1]);
	cr_assert_geq(st[0].duplicates_dropped + st[0].resumed,
		      early + late_orders);
	cr_assert_geq(st[1].duplicates_dropped + st[1].resumed, late_payments);
	cr_assert_eq(st[0].dead_lettered + st[1].dead_lettered, 0);
	cr_assert_eq(tbx_worker_cleanup(w[0], 0, NULL), TBX_OK);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cr_assert_eq(
	    tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_registrations"), 0);
	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	env_fini(&e);
}

/* ---- unit tests of order-service with the handler test kit ---------- */

/* The test kit's stores are SQLite files: its tests run in the SQLite
 * tier only. */
#define SQLITE_ONLY_KIT()                                                      \
	do {                                                                   \
		if (tt_pg_tier())                                              \
			cr_skip_test("the test kit's stores are SQLite "       \
				     "files");                                 \
	} while (0)

/* A kit of order-service running the plugin's handlers, "payments"
 * created for what they send. */
static tbx_testkit_t *order_kit(env_t *e)
{
	char err[512];
	tbx_testkit_t *kit = tbx_testkit_new("order-service", err, sizeof(err));

	cr_assert(kit, "%s", err);
	cr_assert_eq(
	    tbx_testkit_plugin(kit, e->plugin.init, "role=order-service"),
	    TBX_OK, "%s", tbx_testkit_errstr(kit));
	cr_assert_eq(tbx_testkit_topic(kit, "payments", 1), TBX_OK);
	return kit;
}

static tbx_out_t order_msg(const char *key, const char *payload)
{
	return (tbx_out_t){.topic = "orders",
			   .type = "OrderPlaced",
			   .key = key,
			   .key_len = strlen(key),
			   .payload = payload,
			   .payload_len = strlen(payload)};
}

Test(example_orders, an_order_is_stored_and_its_payment_requested)
{
	SQLITE_ONLY_KIT();
	env_t e;
	tbx_testkit_outcome_t outcome;
	tt_plugin_open(&e.plugin, "libtbx_orders.so");
	tbx_testkit_t *kit = order_kit(&e);
	tbx_out_t in =
	    order_msg("customer-7", "{\"order\":\"41\",\"amount\":1250}");
	const tbx_testkit_sent_t *sent;

	cr_assert_eq(tbx_testkit_handle(kit, &in, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(outcome, TBX_TESTKIT_PROCESSED);
	cr_assert_eq(tt_count(tbx_testkit_store_path(kit),
			      "SELECT COUNT(*) FROM orders WHERE order_no = "
			      "'41' AND amount = 1250"),
		     1);
	cr_assert_eq(tbx_testkit_sent_count(kit), 1);
	sent = tbx_testkit_sent(kit, 0);
	cr_assert_str_eq(sent->topic, "payments");
	cr_assert_str_eq(sent->type, "PaymentRequested");
	cr_assert_str_eq(sent->key, "customer-7");
	cr_assert_str_eq(sent->payload, "{\"order\":\"41\",\"amount\":1250}");
	cr_assert(sent->cause, "no tbx-cause");

	/* The same record again: dropped, nothing new. */
	cr_assert_eq(tbx_testkit_redeliver(kit, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(outcome, TBX_TESTKIT_DUPLICATE);
	cr_assert_eq(tt_count(tbx_testkit_store_path(kit),
			      "SELECT COUNT(*) FROM orders"),
		     1);
	cr_assert_eq(tbx_testkit_sent_count(kit), 1);
	tbx_testkit_destroy(kit);
	tt_plugin_close(&e.plugin);
}

Test(example_orders, an_order_that_is_not_one_is_dead_lettered_untouched)
{
	SQLITE_ONLY_KIT();
	env_t e;
	tbx_testkit_outcome_t outcome;
	tt_plugin_open(&e.plugin, "libtbx_orders.so");
	tbx_testkit_t *kit = order_kit(&e);
	tbx_out_t in = order_msg("customer-1", "{\"order\":17}");
	const tbx_testkit_sent_t *sent;

	cr_assert_eq(tbx_testkit_handle(kit, &in, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(outcome, TBX_TESTKIT_DEAD_LETTERED);
	cr_assert_eq(tbx_testkit_sent_count(kit), 1);
	sent = tbx_testkit_sent(kit, 0);
	cr_assert_str_eq(sent->topic, "orders.dlq");
	cr_assert_str_eq(sent->payload, "{\"order\":17}");
	cr_assert(sent->dlq_error && strstr(sent->dlq_error, "not an order"),
		  "%s", sent->dlq_error ? sent->dlq_error : "(none)");
	cr_assert_leq(rows(tbx_testkit_store_path(kit), "orders"), 0,
		      "no row was written");
	tbx_testkit_destroy(kit);
	tt_plugin_close(&e.plugin);
}

/* A crash at each point of the protocol an order passes: the restart
 * finishes it, one row and one payment request. */
Test(example_orders, a_crash_at_any_point_leaves_one_order_and_one_payment,
     .timeout = 600)
{
	SQLITE_ONLY_KIT();
	static const char *const points[] = {"A.handled", "A.committed",
					     "C.delivered", "E.deleted",
					     "F.committed"};
	env_t e;

	tt_plugin_open(&e.plugin, "libtbx_orders.so");
	for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
		tbx_testkit_t *kit = order_kit(&e);
		tbx_testkit_outcome_t outcome;
		tbx_out_t in = order_msg("customer-3",
					 "{\"order\":\"42\",\"amount\":990}");
		size_t cnt;

		cr_assert_eq(tbx_testkit_crash_at(kit, points[i]), TBX_OK);
		cr_assert_eq(tbx_testkit_handle(kit, &in, &outcome), TBX_OK,
			     "%s: %s", points[i], tbx_testkit_errstr(kit));
		cr_expect_neq(outcome, TBX_TESTKIT_DEAD_LETTERED, "%s",
			      points[i]);
		cr_expect_eq(tt_count(tbx_testkit_store_path(kit),
				      "SELECT COUNT(*) FROM orders"),
			     1, "%s", points[i]);
		/* Dispatch may repeat after a crash; the receiver drops the
		 * copy by its token: one payment request, maybe twice sent
		 * with one id.  Its effect counts once downstream. */
		cnt = tbx_testkit_sent_count(kit);
		cr_expect(cnt >= 1 && cnt <= 2, "%s: %zu sent", points[i], cnt);
		for (size_t j = 0; j < cnt; j++) {
			const tbx_testkit_sent_t *m = tbx_testkit_sent(kit, j);
			cr_expect(m->type &&
				      strcmp(m->type, "PaymentRequested") == 0,
				  "%s: %s %s %s", points[i], m->topic,
				  m->type ? m->type : "-",
				  m->dlq_error ? m->dlq_error : "-");
		}
		tbx_testkit_destroy(kit);
	}
	tt_plugin_close(&e.plugin);
}

Test(example_orders, a_crash_point_never_reached_is_an_error)
{
	SQLITE_ONLY_KIT();
	env_t e;
	tt_plugin_open(&e.plugin, "libtbx_orders.so");
	tbx_testkit_t *kit = order_kit(&e);
	tbx_out_t in =
	    order_msg("customer-1", "{\"order\":\"1\",\"amount\":1}");

	cr_assert_eq(tbx_testkit_crash_at(kit, "no.such.point"), TBX_OK);
	cr_assert_eq(tbx_testkit_handle(kit, &in, NULL), TBX_ENOENT);
	cr_assert(strstr(tbx_testkit_errstr(kit), "never reached"), "%s",
		  tbx_testkit_errstr(kit));
	tbx_testkit_destroy(kit);
	tt_plugin_close(&e.plugin);
}

Test(example_orders, init_refuses_a_missing_or_unknown_role)
{
	env_t e;
	char err[512];
	static const char *bad[] = {NULL,
				    "",
				    "role=",
				    "role=shipping",
				    "colour=red",
				    "role",
				    "role=order-service;size=3"};

	env_init(&e);
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(e.cluster->bootstraps, "g", e.orders_db, e.tokens, NULL),
	    err, sizeof(err));
	cr_assert(w, "%s", err);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(e.plugin.init(w, bad[i]), TBX_ECONF, "args \"%s\"",
			     bad[i] ? bad[i] : "(null)");
	/* Nothing was registered by the refusals: the role still can be. */
	cr_assert_eq(e.plugin.init(w, " role = order-service; "), TBX_OK);
	cr_assert_eq(e.plugin.init(w, "role=order-service"), TBX_EEXIST);
	/* Only the two entry points are exported. */
	cr_assert_null(dlsym(e.plugin.handle, "on_order"));
	tbx_worker_destroy(w);
	env_fini(&e);
}
