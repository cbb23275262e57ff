/*
 * Rebalances: workers of one group in threads (tbx_worker_run), one added
 * and one removed mid-stream, under eager and cooperative-sticky
 * assignment; and a handler so slow that its worker is pushed out of the
 * group mid-batch, its partitions handed to another worker while it goes
 * on to dispatch that batch.  Every message must still take effect once at
 * both hops, with nothing left in the stores.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "support.h"

typedef struct runner {
	tbx_worker_t *w;
	pthread_t thread;
	int rc;
} runner_t;

static void *run(void *arg)
{
	runner_t *r = arg;

	r->rc = tbx_worker_run(r->w);
	return NULL;
}

typedef struct slow_hop {
	tt_hop_t hop;
	const char *slow; /* payload whose first attempt stalls */
	int stall_ms;
	int stalled;
} slow_hop_t;

static tbx_verdict_t slow_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				 void *opaque)
{
	slow_hop_t *s = opaque;
	size_t len;
	const char *p = tbx_msg_payload(msg, &len);

	/* Once, whichever worker gets it first. */
	if (s->slow && p && len == strlen(s->slow) &&
	    memcmp(p, s->slow, len) == 0 &&
	    !__atomic_exchange_n(&s->stalled, 1, __ATOMIC_SEQ_CST))
		usleep((useconds_t)s->stall_ms * 1000);
	return tt_hop_handle(ctx, msg, &s->hop);
}

typedef struct env {
	char *dir, *s1, *s2, *tokens;
	tt_cluster_t *c;
	const char *strategy;
} env_t;

static tbx_worker_t *mk(env_t *e, const char *group, const char *store,
			const char *topic, const char *type, void *hop,
			tbx_handler_fn fn)
{
	char err[512];
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(e->c->bootstraps, group, store, e->tokens,
		    "kafka.consumer.partition.assignment.strategy", e->strategy,
		    /* at least tt_conf()'s session.timeout.ms (librdkafka) */
		    "kafka.consumer.max.poll.interval.ms", "4000",
		    "batch.max.messages", "20", NULL),
	    err, sizeof(err));

	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, topic, type, fn, hop), TBX_OK);
	return w;
}

static void start(runner_t *r, tbx_worker_t *w)
{
	r->w = w;
	cr_assert_eq(pthread_create(&r->thread, NULL, run, r), 0);
}

static void stop(runner_t *r)
{
	tbx_worker_stop(r->w);
	pthread_join(r->thread, NULL);
	cr_assert_eq(r->rc, TBX_OK, "%s", tbx_worker_errstr(r->w));
	tbx_worker_destroy(r->w);
}

static int wait_for(env_t *e, int n, int timeout_s)
{
	time_t end = time(NULL) + (time_t)timeout_s * tt_time_factor();

	while (time(NULL) < end) {
		if (tt_count(e->s1,
			     "SELECT COUNT(DISTINCT payload) FROM hop1") >= n &&
		    tt_count(e->s2,
			     "SELECT COUNT(DISTINCT payload) FROM hop2") >= n &&
		    tt_count(e->s1, "SELECT COUNT(*) FROM tbx_outbox") == 0 &&
		    tt_count(e->s2, "SELECT COUNT(*) FROM tbx_outbox") == 0)
			return 1;
		usleep(100000);
	}
	return 0;
}

static void scenario(const char *strategy)
{
	env_t e = {.strategy = strategy};
	slow_hop_t hop1 = {
	    .hop = {.table = "hop1", .next_topic = "out", .next_type = "Pong"},
	    .slow = "a-7",
	    .stall_ms = 5500};
	slow_hop_t hop2 = {.hop = {.table = "hop2"}};
	runner_t r1, r2, r3, down;

	e.dir = tt_tmpdir();
	e.s1 = tt_path(e.dir, "s1.db");
	e.s2 = tt_path(e.dir, "s2.db");
	e.tokens = tt_path(e.dir, "tokens.db");
	e.c = tt_cluster_new(1);
	tt_cluster_topic(e.c, "in", 4);
	tt_cluster_topic(e.c, "out", 4);
	tt_hop_table(e.s1, "hop1");
	tt_hop_table(e.s2, "hop2");
	tt_subscribe(e.tokens, "in", "g1");
	tt_subscribe(e.tokens, "out", "g2");

	start(&down, mk(&e, "g2", e.s2, "out", "Pong", &hop2, slow_handle));
	start(&r1, mk(&e, "g1", e.s1, "in", "Ping", &hop1, slow_handle));
	start(&r2, mk(&e, "g1", e.s1, "in", "Ping", &hop1, slow_handle));
	/* "a-7" stalls its worker past max.poll.interval.ms mid-batch. */
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 60, 8, "a");
	/* A third member joins, then the first leaves: two rebalances. */
	usleep(1500000);
	start(&r3, mk(&e, "g1", e.s1, "in", "Ping", &hop1, slow_handle));
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 60, 8, "b");
	usleep(1500000);
	stop(&r1);
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 60, 8, "c");

	cr_assert(wait_for(&e, 180, 120), "%s: not every message arrived",
		  strategy);
	cr_assert(hop1.stalled, "the slow handler never ran");
	stop(&r2);
	stop(&r3);
	stop(&down);
	cr_assert_eq(tt_count(e.s1, "SELECT COUNT(*) FROM hop1"), 180,
		     "%s: a handler committed twice", strategy);
	cr_assert_eq(tt_count(e.s2, "SELECT COUNT(*) FROM hop2"), 180,
		     "%s: downstream took a message twice", strategy);
	/* orphans of attempts cut short by the rebalance are swept */
	tbx_worker_t *sweeper =
	    mk(&e, "g1", e.s1, "in", "Ping", &hop1, slow_handle);
	cr_assert_eq(tbx_worker_cleanup(sweeper, 0, NULL), TBX_OK);
	tbx_worker_destroy(sweeper);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cr_assert_eq(
	    tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_registrations"), 0);
	tt_cluster_destroy(e.c);
	tt_rmrf(e.dir);
	free(e.dir);
	free(e.s1);
	free(e.s2);
	free(e.tokens);
}

Test(rebalance, eager_assignment_keeps_every_message_once, .timeout = 300)
{
	scenario("range");
}

Test(rebalance, cooperative_sticky_assignment_keeps_every_message_once,
     .timeout = 300)
{
	scenario("cooperative-sticky");
}
