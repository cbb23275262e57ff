/*
 * examples/vouchers: a bank of codes handed out by three workers of one
 * consumer group at once (one service store, one token store), loaded
 * with dlopen() as `tokenbox worker` does.  Every customer gets one code
 * however often it asks, no code goes to two customers, nothing is handed
 * out once the bank is empty.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "support.h"

#define WORKERS	  3
#define CUSTOMERS 20
#define REQUESTS  100 /* 5 per customer */

typedef struct env {
	char *dir, *store, *tokens;
	tt_cluster_t *cluster;
	tt_plugin_t plugin;
	tbx_worker_t *w[WORKERS];
} env_t;

static int all_assigned(void *opaque)
{
	env_t *e = opaque;

	return tt_assigned(e->w, WORKERS);
}

static void env_init(env_t *e, const char *args)
{
	char err[512];

	e->dir = tt_tmpdir();
	/* Files, or in the pg tier schemas (support.h). */
	e->store = tt_store_new(e->dir, "vouchers");
	e->tokens = tt_tokens_new(e->dir, "tokens", 1);
	e->cluster = tt_cluster_new(1);
	tt_cluster_topic(e->cluster, "voucher-requests", 6);
	tt_cluster_topic(e->cluster, "voucher-replies", 3);
	tt_cluster_topic(e->cluster, "voucher-requests.dlq", 1);
	tt_plugin_open(&e->plugin, "libtbx_vouchers.so");
	/* One group, one service store: the way several `tokenbox worker`
	 * processes of one service share a host. */
	for (int i = 0; i < WORKERS; i++) {
		e->w[i] = tbx_worker_new(
		    tt_conf(e->cluster->bootstraps, "voucher-service", e->store,
			    e->tokens, "cleanup.interval.ms", "100", NULL),
		    err, sizeof(err));
		cr_assert(e->w[i], "%s", err);
		cr_assert_eq(e->plugin.init(e->w[i], args), TBX_OK);
	}
	/* The first polls subscribe the group and join it. */
	for (int i = 0; i < WORKERS; i++)
		cr_assert_eq(tbx_worker_poll(e->w[i], 0, NULL), TBX_OK);
}

static void env_fini(env_t *e)
{
	for (int i = 0; i < WORKERS; i++)
		tbx_worker_destroy(e->w[i]);
	tt_plugin_close(&e->plugin);
	tt_cluster_destroy(e->cluster);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->store);
	free(e->tokens);
}

/* Publishes REQUESTS requests with tokens, customers c1..c20 taking turns:
 * {"customer": "cN"}, keyed by the customer. */
static void publish_requests(env_t *e)
{
	char err[512], key[32], payload[64];
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;
	size_t failed;

	tbx_conf_set(conf, "kafka.bootstrap.servers", e->cluster->bootstraps,
		     NULL, 0);
	cr_assert_eq(tt_stores_conf(conf, NULL, e->tokens, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_conf_set(conf, "log.level", "warning", NULL, 0);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "publisher: %s", err);
	for (int i = 0; i < REQUESTS; i++) {
		snprintf(key, sizeof(key), "c%d", 1 + i % CUSTOMERS);
		snprintf(payload, sizeof(payload), "{\"customer\":\"%s\"}",
			 key);
		tbx_out_t out = {.topic = "voucher-requests",
				 .type = "VoucherRequested",
				 .key = key,
				 .key_len = strlen(key),
				 .payload = payload,
				 .payload_len = strlen(payload)};
		cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	}
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(pub));
	tbx_publisher_destroy(pub);
}

/* Re-produces every tenth request, byte for byte: upstream re-sends. */
static size_t reproduce_some(env_t *e)
{
	tt_record_t *recs, *some;
	size_t cnt, n = 0;

	cnt = tt_read_topic(e->cluster->bootstraps, "voucher-requests", &recs);
	cr_assert_eq(cnt, REQUESTS);
	some = calloc(cnt, sizeof(*some));
	for (size_t i = 0; i < cnt; i += 10)
		some[n++] = recs[i]; /* borrowed: freed with recs */
	tt_reproduce(e->cluster->bootstraps, "voucher-requests", some, n);
	free(some);
	tt_records_free(recs, cnt);
	return n;
}

typedef struct progress {
	env_t *e;
	uint64_t want_consumed;
} progress_t;

/* Every record consumed, the bank created, no outbox row in flight, no
 * token left.  "consumed" alone can be reached early: a record polled by
 * a worker that loses its partition before the batch commits is polled
 * again by the next owner and counted twice, and that owner may not
 * have fetched the rest when the idle polls end.  The tokens say every
 * request took effect (a token that is never consumed still fails the
 * test, at the end of the wait). */
static int all_done(void *opaque)
{
	progress_t *p = opaque;
	uint64_t consumed = 0;
	tbx_stats_t st;

	for (int i = 0; i < WORKERS; i++) {
		tbx_worker_stats(p->e->w[i], &st);
		consumed += st.consumed;
	}
	return consumed >= p->want_consumed &&
	       tt_table_exists(p->e->store, "vouchers") &&
	       tt_count(p->e->store, "SELECT COUNT(*) FROM tbx_outbox") == 0 &&
	       tt_count(p->e->tokens, "SELECT COUNT(*) FROM tbx_tokens") == 0;
}

/* The customer's code in the bank ("" when none), by customer number. */
typedef char code_t[16];

static void bank_row(void *opaque, int n, const char *const *vals)
{
	code_t *codes = opaque;
	int c;

	cr_assert_eq(n, 2);
	cr_assert(sscanf(vals[0], "c%d", &c) == 1 && c >= 1 && c <= CUSTOMERS,
		  "unknown customer '%s'", vals[0]);
	cr_assert_eq(codes[c][0], '\0', "%s holds two codes", vals[0]);
	snprintf(codes[c], sizeof(code_t), "%s", vals[1] ? vals[1] : "");
}

static void read_bank(env_t *e, code_t codes[CUSTOMERS + 1])
{
	memset(codes, 0, sizeof(code_t) * (CUSTOMERS + 1));
	tt_rows(e->store,
		"SELECT customer, code FROM vouchers WHERE customer IS NOT "
		"NULL",
		bank_row, codes);
}

/*
 * Replies, per customer: how many VoucherIssued and VoucherRefused (by
 * distinct tbx-id: re-dispatched copies share theirs), and the code the
 * issued ones carried, which must be the same every time.
 */
typedef struct answers {
	int issued, refused;
	code_t code;
} answers_t;

static size_t read_replies(env_t *e, answers_t ans[CUSTOMERS + 1])
{
	tt_record_t *recs;
	size_t cnt, distinct = 0;
	int n;

	memset(ans, 0, sizeof(answers_t) * (CUSTOMERS + 1));
	cnt = tt_read_topic(e->cluster->bootstraps, "voucher-replies", &recs);
	for (size_t i = 0; i < cnt; i++) {
		tt_record_t *r = &recs[i];
		int copy = 0;

		cr_assert(r->id && r->token && r->type && r->payload && r->key);
		for (size_t j = 0; j < i && !copy; j++)
			if (strcmp(recs[j].id, r->id) == 0) {
				cr_assert_str_eq(recs[j].payload, r->payload);
				cr_assert_str_eq(recs[j].token, r->token);
				copy = 1;
			}
		if (copy)
			continue;
		distinct++;
		cJSON *root = cJSON_Parse(r->payload);
		const cJSON *customer =
		    cJSON_GetObjectItemCaseSensitive(root, "customer");
		const cJSON *code =
		    cJSON_GetObjectItemCaseSensitive(root, "code");
		cr_assert(cJSON_IsString(customer), "%s", r->payload);
		cr_assert_str_eq(r->key, customer->valuestring);
		cr_assert(sscanf(customer->valuestring, "c%d", &n) == 1 &&
			  n >= 1 && n <= CUSTOMERS);
		if (strcmp(r->type, "VoucherIssued") == 0) {
			cr_assert(cJSON_IsString(code), "%s", r->payload);
			if (ans[n].issued++)
				cr_assert_str_eq(ans[n].code, code->valuestring,
						 "c%d got two codes", n);
			snprintf(ans[n].code, sizeof(code_t), "%s",
				 code->valuestring);
		} else {
			cr_assert_str_eq(r->type, "VoucherRefused");
			cr_assert(cJSON_IsNull(code), "%s", r->payload);
			ans[n].refused++;
		}
		cJSON_Delete(root);
	}
	tt_records_free(recs, cnt);
	return distinct;
}

/* Runs the requests through the three workers: 100 requests of 20
 * customers, 10% of them sent twice. */
static void run(env_t *e)
{
	size_t copies;

	publish_requests(e);
	copies = reproduce_some(e);
	progress_t p = {e, REQUESTS + copies};
	cr_assert(tt_drive(e->w, WORKERS, all_done, &p, 20, 120),
		  "the requests were not all handled");
	cr_assert_eq(tt_count(e->tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cr_assert_eq(
	    tt_count(e->store, "SELECT COUNT(*) FROM tbx_dead_letters"), 0);
}

/* A bank of 25 after the 100 requests of run(): exactly 20 codes went
 * out, the lowest, one per customer, and every request got its one
 * reply with the customer's code. */
static void check_twenty_codes(env_t *e)
{
	code_t bank[CUSTOMERS + 1];
	answers_t ans[CUSTOMERS + 1];

	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM vouchers"), 25);
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(customer) FROM vouchers"),
		     CUSTOMERS, "exactly 20 codes went out");
	cr_assert_eq(
	    tt_count(e->store, "SELECT COUNT(DISTINCT customer) FROM vouchers"),
	    CUSTOMERS);
	/* The lowest codes went, the highest stayed in the bank. */
	cr_assert_eq(tt_count(e->store, "SELECT COUNT(*) FROM vouchers WHERE "
					"customer IS NULL AND code <= 'V0020'"),
		     0);
	/* One reply per request (a copy of a request is not a request), all
	 * issued, each customer always the code the bank gave it. */
	cr_assert_eq(read_replies(e, ans), REQUESTS);
	read_bank(e, bank);
	for (int n = 1; n <= CUSTOMERS; n++) {
		cr_assert_eq(ans[n].issued, REQUESTS / CUSTOMERS, "c%d", n);
		cr_assert_eq(ans[n].refused, 0, "c%d", n);
		cr_assert_str_eq(ans[n].code, bank[n], "c%d", n);
		for (int m = 1; m < n; m++)
			cr_assert_str_neq(bank[m], bank[n],
					  "c%d and c%d share a code", m, n);
	}
}

Test(example_vouchers,
     hundred_requests_of_twenty_customers_on_three_workers_take_twenty_codes)
{
	env_t e;
	int workers_busy = 0;
	tbx_stats_t st;

	env_init(&e, "codes=25");
	/* Every member holds partitions before any request is sent, so that
	 * the requests are spread however slowly the others join: on a real
	 * broker the first member can otherwise take all six partitions and
	 * handle every request before the group rebalances. */
	cr_assert(tt_drive(e.w, WORKERS, all_assigned, &e, 1, 120),
		  "the workers were not all assigned partitions");
	run(&e);
	check_twenty_codes(&e);
	/* The group shared the partitions. */
	for (int i = 0; i < WORKERS; i++) {
		tbx_worker_stats(e.w[i], &st);
		workers_busy += st.processed > 0;
	}
	cr_assert_geq(workers_busy, 2, "the requests were not spread");
	env_fini(&e);
}

/* ---- workers on threads of their own --------------------------------- */

/* A worker polled by a thread of its own (tbx_worker_poll() in a loop),
 * so that batches of different workers overlap as those of separate
 * processes do; tt_drive() polls them in turn instead.  The worker stays
 * open when the thread stops. */
typedef struct poller {
	tbx_worker_t *w;
	pthread_t thread;
	atomic_int *stop;
	int rc;
} poller_t;

static void *poller_main(void *arg)
{
	poller_t *p = arg;

	while (!atomic_load(p->stop) && p->rc == TBX_OK)
		p->rc = tbx_worker_poll(p->w, 100, NULL);
	return NULL;
}

/*
 * The requests of run(), each worker polled by a thread of its own, as
 * `tokenbox worker` processes run.  On SQLite their batches take turns
 * under the store's write lock.  On PostgreSQL they run at once: two
 * workers aim at the same lowest code, the second waits for the first's
 * row lock and finds the code gone; it must take the next one, not
 * refuse, and never the same one.
 */
Test(example_vouchers, workers_on_threads_of_their_own_take_twenty_codes,
     .timeout = 600)
{
	env_t e;
	poller_t pollers[WORKERS];
	atomic_int stop;
	size_t copies;
	time_t end;
	int done = 0;

	env_init(&e, "codes=25");
	atomic_init(&stop, 0);
	for (int i = 0; i < WORKERS; i++) {
		pollers[i] = (poller_t){.w = e.w[i], .stop = &stop};
		cr_assert_eq(pthread_create(&pollers[i].thread, NULL,
					    poller_main, &pollers[i]),
			     0);
	}
	publish_requests(&e);
	copies = reproduce_some(&e);
	end = time(NULL) + 120 * tt_time_factor();
	while (!done && time(NULL) < end) {
		done =
		    tt_table_exists(e.store, "vouchers") &&
		    tt_count(e.store, "SELECT COUNT(customer) FROM vouchers") >=
			CUSTOMERS &&
		    tt_count(e.store, "SELECT COUNT(*) FROM tbx_outbox") == 0;
		if (!done)
			usleep(100000);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(pollers[i].thread, NULL);
	for (int i = 0; i < WORKERS; i++)
		cr_assert_eq(pollers[i].rc, TBX_OK, "%s",
			     tbx_worker_errstr(e.w[i]));
	cr_assert(done, "the codes did not all go out");
	/* The rest (copies included) in turn, to the last record. */
	progress_t p = {&e, REQUESTS + copies};
	cr_assert(tt_drive(e.w, WORKERS, all_done, &p, 20, 120),
		  "the requests were not all handled");
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_dead_letters"),
		     0);
	check_twenty_codes(&e);
	env_fini(&e);
}

Test(example_vouchers, an_empty_bank_refuses_and_never_gives_a_code_twice)
{
	env_t e;
	code_t bank[CUSTOMERS + 1];
	answers_t ans[CUSTOMERS + 1];
	int served = 0, refused = 0;

	env_init(&e, "codes=10");
	run(&e);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM vouchers"), 10);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(customer) FROM vouchers"),
		     10, "the whole bank went out");
	cr_assert_eq(
	    tt_count(e.store, "SELECT COUNT(DISTINCT customer) FROM vouchers"),
	    10);
	cr_assert_eq(read_replies(&e, ans), REQUESTS);
	read_bank(&e, bank);
	for (int n = 1; n <= CUSTOMERS; n++) {
		if (bank[n][0]) {
			/* Served: every answer is its one code. */
			served++;
			cr_assert_eq(ans[n].issued, REQUESTS / CUSTOMERS);
			cr_assert_eq(ans[n].refused, 0, "c%d", n);
			cr_assert_str_eq(ans[n].code, bank[n], "c%d", n);
		} else {
			/* Came too late: refused every time. */
			refused++;
			cr_assert_eq(ans[n].issued, 0, "c%d", n);
			cr_assert_eq(ans[n].refused, REQUESTS / CUSTOMERS);
		}
		for (int m = 1; m < n; m++)
			cr_assert(!bank[n][0] || strcmp(bank[m], bank[n]) != 0,
				  "c%d and c%d share a code", m, n);
	}
	cr_assert_eq(served, 10);
	cr_assert_eq(refused, CUSTOMERS - 10);
	env_fini(&e);
}

static int three_dead_letters(void *opaque)
{
	env_t *e = opaque;

	return tt_count(e->store, "SELECT COUNT(*) FROM tbx_dead_letters") ==
		   3 &&
	       tt_count(e->store, "SELECT COUNT(*) FROM tbx_outbox") == 0;
}

Test(example_vouchers, a_malformed_request_is_dead_lettered_untouched)
{
	env_t e;
	char err[512];
	size_t failed;

	env_init(&e, "codes=3");
	tbx_conf_t *conf = tbx_conf_new();
	tbx_conf_set(conf, "kafka.bootstrap.servers", e.cluster->bootstraps,
		     NULL, 0);
	cr_assert_eq(tt_stores_conf(conf, NULL, e.tokens, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_publisher_t *pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "%s", err);
	const char *bad[][2] = {{"c2", "{\"customer\":\"c1\"}"},
				{"c3", "{\"name\":\"c3\"}"},
				{"c4", "not json"}};
	for (size_t i = 0; i < 3; i++) {
		tbx_out_t out = {.topic = "voucher-requests",
				 .type = "VoucherRequested",
				 .key = bad[i][0],
				 .key_len = strlen(bad[i][0]),
				 .payload = bad[i][1],
				 .payload_len = strlen(bad[i][1])};
		cr_assert_eq(tbx_publish(pub, &out), TBX_OK);
	}
	cr_assert_eq(tbx_publisher_flush(pub, &failed), TBX_OK);
	tbx_publisher_destroy(pub);
	cr_assert(tt_drive(e.w, WORKERS, three_dead_letters, &e, 5, 60));
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_dead_letters"),
		     3);
	cr_assert(!tt_table_exists(e.store, "vouchers"),
		  "a rejected request leaves nothing behind");
	env_fini(&e);
}

Test(example_vouchers, init_refuses_a_bad_bank_size)
{
	env_t e;
	static const char *bad[] = {"codes=0", "codes=10000",	 "codes=x",
				    "codes=",  "codes=5;bank=2", "size=5",
				    "codes=5x"};

	env_init(&e, NULL); /* default: 20 codes */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(e.plugin.init(e.w[0], bad[i]), TBX_ECONF, "%s",
			     bad[i]);
	env_fini(&e);
}
