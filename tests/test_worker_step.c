/*
 * What a worker is doing, for the warnings of a slow stop (`tokenbox
 * worker: still stopping after N ms …; now: …`, docs/operations.md): a stop
 * that overruns shutdown.timeout.ms must have said which step it waited
 * in, or its exit 1 tells an operator nothing.
 *
 * In the close: rd_kafka_consumer_close() is interposed (the library's
 * code, linked into this program, calls it) and held while the test reads
 * the step, a group that does not answer the leave, made on demand.  In a
 * batch: a handler reads the step while it runs.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "consumer/worker.h"
#include "fixture.h"

typedef rd_kafka_resp_err_t (*close_fn)(rd_kafka_t *);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int hold, held, release;

rd_kafka_resp_err_t rd_kafka_consumer_close(rd_kafka_t *rk)
{
	close_fn real = (close_fn)dlsym(RTLD_NEXT, "rd_kafka_consumer_close");

	pthread_mutex_lock(&lock);
	if (hold) {
		held = 1;
		pthread_cond_broadcast(&cond);
		while (!release)
			pthread_cond_wait(&cond, &lock);
	}
	pthread_mutex_unlock(&lock);
	return real(rk);
}

static void *closer(void *opaque)
{
	tbx_worker_close(opaque);
	return NULL;
}

Test(worker_step, a_close_held_by_the_group_names_its_step, .timeout = 300)
{
	tt_hop_env_t e;
	tt_want_t one;
	pthread_t thread;
	const char *step;

	tt_hop_env_start(&e, 1);
	one = (tt_want_t){e.store, "SELECT count(*) FROM hop1", 1};
	tt_publish(e.c->bootstraps, e.tokens, "in", "Ping", 1, 1, "a");
	cr_assert(tt_drive(&e.w, 1, tt_reached, &one, 5, 60),
		  "a-0 was not handled");
	cr_expect_null(tbx__worker_step(e.w),
		       "between polls a worker is in no step");

	pthread_mutex_lock(&lock);
	hold = 1;
	pthread_mutex_unlock(&lock);
	cr_assert_eq(pthread_create(&thread, NULL, closer, e.w), 0);
	pthread_mutex_lock(&lock);
	while (!held)
		pthread_cond_wait(&cond, &lock);
	/* The close waits in rd_kafka_consumer_close() now. */
	step = tbx__worker_step(e.w);
	cr_expect(step && strstr(step, "rd_kafka_consumer_close()") &&
		      strstr(step, "leave"),
		  "step: %s", step ? step : "(none)");
	release = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	pthread_join(thread, NULL);
	cr_expect_null(tbx__worker_step(e.w), "a closed worker is in no step");
	tt_hop_env_stop(&e);
}

/* A handler of type "Peek": notes the step of the worker it runs in. */
static char peeked[256];

static tbx_verdict_t peek(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque)
{
	const char *step = tbx__worker_step(opaque);

	(void)ctx;
	(void)msg;
	snprintf(peeked, sizeof(peeked), "%s", step ? step : "(none)");
	return TBX_VERDICT_OK;
}

static int peeked_once(void *opaque)
{
	(void)opaque;
	return peeked[0] != '\0';
}

Test(worker_step, a_handler_runs_in_phase_a_of_the_batch_in_hand,
     .timeout = 300)
{
	tt_hop_env_t e;

	tt_hop_env_start(&e, 1);
	cr_assert_eq(tbx_worker_register(e.w, "in", "Peek", peek, e.w), TBX_OK);
	cr_expect_null(tbx__worker_step(e.w), "no step before a poll");
	tt_publish(e.c->bootstraps, e.tokens, "in", "Peek", 1, 1, "p");
	cr_assert(tt_drive(&e.w, 1, peeked_once, NULL, 5, 60),
		  "the Peek record was not handled");
	cr_expect(strstr(peeked, "the batch in hand, A: its handlers"),
		  "step: %s", peeked);
	cr_expect_null(tbx__worker_step(e.w), "no step between polls");
	tt_hop_env_stop(&e);
}
