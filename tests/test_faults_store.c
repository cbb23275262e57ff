/*
 * Countdown fault injection over a whole two-hop pipeline: for N = 1, 2,
 * 3, … the N-th store call fails (as a failing disk would), and the
 * pipeline must still handle every message exactly once at both hops and
 * leave no outbox row, token or registration behind.  The loop ends with
 * the first N that the run never reaches.  It runs with a file per store
 * and with one file for all of them (the joined path); in the pg tier
 * with a schema per store, joined or not, and again with every fault a
 * cut connection.
 *
 * Every case runs two pipelines beside each other on the same stores:
 * tokenbox's defaults (outbox.layout=record, tokens.format=message), and
 * the batched one (outbox.layout=batch, tokens.format=set for both hops'
 * workers and the publisher: batch rows, token sets).  The rounds
 * alternate between them, the parity flipped from one case to the next,
 * so that each layout meets the odd store calls of its rounds on one
 * path and the even ones on the other; once a layout has had a
 * fault-free round, the rounds that remain are the other's.  The suite
 * pays about the rounds of the longer layout, not of both.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer/worker.h"
#include "store/db.h"
#include "store/pg.h"
#include "support.h"

typedef struct round {
	const char *s1, *s2;
	int64_t n;
} round_t;

/* Outbox rows of either layout in @p store: per record, per batch and
 * the batch rows' covered ids. */
static int64_t rows_left(const char *store)
{
	return tt_count(store, "SELECT COUNT(*) FROM tbx_outbox") +
	       tt_count(store, "SELECT COUNT(*) FROM tbx_obatch") +
	       tt_count(store, "SELECT COUNT(*) FROM tbx_cover_msg");
}

static int round_done(void *opaque)
{
	round_t *r = opaque;

	return tt_count(r->s1, "SELECT COUNT(*) FROM hop1") >= r->n &&
	       tt_count(r->s2, "SELECT COUNT(*) FROM hop2") >= r->n &&
	       rows_left(r->s1) == 0 && rows_left(r->s2) == 0;
}

/* A tt_drive() condition: the four workers of @p opaque caught up. */
static int all_caught_up(void *opaque)
{
	return tt_caught_up(opaque, 4);
}

enum { RECORD, BATCH };
static const char *const layout_names[] = {"record", "batch"};

/* The workers of one pipeline: groups @p g1 on "in@p sfx" and @p g2 on
 * "out@p sfx", both layouts' hop tables shared. */
static void pipeline(tbx_worker_t *w[2], tt_hop_t hop[2], int layout,
		     const char *bootstraps, const char *s1, const char *s2,
		     const char *tokens)
{
	const char *sfx = layout == BATCH ? "b" : "";
	const char *lay = layout == BATCH ? "batch" : "record";
	const char *fmt = layout == BATCH ? "set" : "message";
	char g[2][8], in[8], out[8], err[512];

	snprintf(g[0], sizeof(g[0]), "g1%s", sfx);
	snprintf(g[1], sizeof(g[1]), "g2%s", sfx);
	snprintf(in, sizeof(in), "in%s", sfx);
	snprintf(out, sizeof(out), "out%s", sfx);
	hop[0] = (tt_hop_t){.table = "hop1",
			    .next_topic = layout == BATCH ? "outb" : "out",
			    .next_type = "Pong"};
	hop[1] = (tt_hop_t){.table = "hop2"};
	for (int i = 0; i < 2; i++) {
		w[i] = tbx_worker_new(tt_conf(bootstraps, g[i], i ? s2 : s1,
					      tokens, "cleanup.interval.ms",
					      "0", "outbox.layout", lay,
					      "tokens.format", fmt, NULL),
				      err, sizeof(err));
		cr_assert(w[i], "%s", err);
		cr_assert_eq(tbx_worker_register(w[i], i ? out : in,
						 i ? "Pong" : "Ping",
						 tt_hop_handle, &hop[i]),
			     TBX_OK);
		/* Not a test of the group: its partition at once. */
		tbx__worker_assign_directly(w[i]);
	}
}

/* Sessions of the pg tier's database that the server saw end without
 * goodbye: a client whose connection was cut. */
static int64_t abandoned(const char *store)
{
	return tt_count(store, "SELECT sessions_abandoned FROM "
			       "pg_stat_database WHERE datname = "
			       "current_database()");
}

/* @p conn_loss (PostgreSQL): the fault is a cut connection, not a failed
 * call.  @p first: the layout of the odd rounds. */
static void every_failing_store_call(int single_file, int conn_loss, int first)
{
	char *dir = tt_tmpdir();
	/* One file, or a file each; in the pg tier a schema each, the token
	 * store joined or on a second connection string (support.h). */
	int one = single_file && !tt_pg_tier();
	char *s1 = tt_store_new(dir, one ? "all" : "s1");
	char *s2 = one ? strdup(s1) : tt_store_new(dir, "s2");
	char *tokens =
	    one ? strdup(s1) : tt_tokens_new(dir, "tokens", single_file);
	tt_cluster_t *c = tt_cluster_new(1);
	long cuts = 0;
	int64_t abandoned_before = 0;
	tt_hop_t hops[2][2];
	tbx_worker_t *w[2][2];
	tbx_publisher_t *pub[2];
	/* per layout: the last call a fault reached, and whether a round
	 * went without one (its loop is over) */
	long reached[2] = {0, 0};
	int over[2] = {0, 0};
	char err[512];
	long n;

	tt_cluster_topic(c, "in", 1);
	tt_cluster_topic(c, "out", 1);
	tt_cluster_topic(c, "inb", 1);
	tt_cluster_topic(c, "outb", 1);
	tt_hop_table(s1, "hop1");
	tt_hop_table(s2, "hop2");
	for (int l = RECORD; l <= BATCH; l++) {
		pipeline(w[l], hops[l], l, c->bootstraps, s1, s2, tokens);
		tbx_conf_t *pconf = tbx_conf_new();
		tbx_conf_set(pconf, "kafka.bootstrap.servers", c->bootstraps,
			     NULL, 0);
		tbx_conf_set(pconf, "tokens.format",
			     l == BATCH ? "set" : "message", NULL, 0);
		cr_assert_eq(
		    tt_stores_conf(pconf, NULL, tokens, err, sizeof(err)),
		    TBX_OK, "%s", err);
		pub[l] = tbx_publisher_new(pconf, err, sizeof(err));
		cr_assert(pub[l], "%s", err);
	}
	/* The four workers hold their partitions, and have polled to their
	 * ends, before the faults start. */
	round_t r = {s1, s2, 0};
	tbx_worker_t *all[4] = {w[0][0], w[0][1], w[1][0], w[1][1]};
	cr_assert(tt_drive(all, 4, all_caught_up, all, 4, 60));
	if (conn_loss) {
		abandoned_before = abandoned(s1);
		tbx__fault_pg_conn_loss(1);
	}

	for (n = 1; n < 400 && !(over[RECORD] && over[BATCH]); n++) {
		/* The layouts take turns; one whose loop is over leaves the
		 * rounds to the other.  Only its workers are polled: the
		 * countdown counts the store calls of its round alone. */
		int l = n % 2 ? first : !first;
		if (over[l])
			l = !l;
		/* Two messages on one key per round. */
		for (int i = 0; i < 2; i++) {
			char payload[32];
			snprintf(payload, sizeof(payload), "r%ld-%d", n, i);
			tbx_out_t out = {.topic = l == BATCH ? "inb" : "in",
					 .type = "Ping",
					 .key = "k",
					 .key_len = 1,
					 .payload = payload,
					 .payload_len = strlen(payload)};
			cr_assert_eq(tbx_publish(pub[l], &out), TBX_OK);
		}
		cr_assert_eq(tbx_publisher_flush(pub[l], NULL), TBX_OK);
		r.n += 2;
		tbx__fault_arm(n);
		cr_assert(tt_drive(w[l], 2, round_done, &r, 2, 60),
			  "%s: fault at store call %ld: the pipeline did not "
			  "recover",
			  layout_names[l], n);
		int fired = tbx__fault_fired();
		tbx__fault_arm(0);
		cuts += fired;
		/* Orphans of attempts cut short are the sweeper's. */
		cr_assert_eq(tbx_worker_cleanup(w[l][0], 0, NULL), TBX_OK);
		cr_assert_eq(tt_count(s1, "SELECT COUNT(*) - COUNT(DISTINCT "
					  "payload) FROM hop1"),
			     0, "%s: fault at call %ld: a handler ran twice",
			     layout_names[l], n);
		cr_assert_eq(tt_count(s2, "SELECT COUNT(*) - COUNT(DISTINCT "
					  "payload) FROM hop2"),
			     0, "%s: fault at call %ld: downstream ran twice",
			     layout_names[l], n);
		cr_assert_eq(tt_count(s1, "SELECT COUNT(*) FROM hop1"), r.n);
		cr_assert_eq(tt_count(s2, "SELECT COUNT(*) FROM hop2"), r.n);
		cr_assert_eq(
		    tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens") +
			tt_count(tokens, "SELECT COUNT(*) FROM tbx_tset"),
		    0, "%s: fault at call %ld: tokens left", layout_names[l],
		    n);
		cr_assert_eq(
		    tt_count(tokens, "SELECT COUNT(*) FROM "
				     "tbx_registrations") +
			tt_count(tokens, "SELECT COUNT(*) FROM tbx_breg"),
		    0, "%s: fault at call %ld: registrations left",
		    layout_names[l], n);
		if (fired)
			reached[l] = n;
		else
			over[l] = 1; /* a whole round without reaching n */
	}
	tbx__fault_pg_conn_loss(0);
	cr_log_info("faults injected at store calls 1..%ld of record "
		    "rounds, 1..%ld of batch rounds",
		    reached[RECORD], reached[BATCH]);
	cr_assert(over[RECORD] && over[BATCH],
		  "the loop must end with a fault-free round of each layout");
	for (int l = RECORD; l <= BATCH; l++)
		cr_assert_gt(reached[l], 10,
			     "%s: the fault loop covered too few calls",
			     layout_names[l]);
	if (conn_loss) {
		/* Every fault cut a connection for real: the server saw each
		 * session end without goodbye (its statistics count them;
		 * other tests on the server only add to the count). */
		long long deadline = 0;
		while (abandoned(s1) - abandoned_before < cuts &&
		       deadline++ < 600 * tt_time_factor())
			usleep(100000);
		cr_assert_geq(abandoned(s1) - abandoned_before, cuts,
			      "%ld connections cut, the server saw %lld end",
			      cuts,
			      (long long)(abandoned(s1) - abandoned_before));
	}
	for (int l = RECORD; l <= BATCH; l++) {
		tbx_publisher_destroy(pub[l]);
		tbx_worker_destroy(w[l][0]);
		tbx_worker_destroy(w[l][1]);
	}
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(s1);
	free(s2);
	free(tokens);
}

Test(faults, every_failing_store_call_is_recovered_exactly_once, .timeout = 500)
{
	every_failing_store_call(0, 0, RECORD);
}

/* One file (on PostgreSQL: one database, the joined path): A mints the
 * tokens and D's deletes go with E; a failure anywhere in those
 * transactions takes all of it back. */
Test(faults, every_failing_store_call_in_one_file_is_recovered_exactly_once,
     .timeout = 500)
{
	every_failing_store_call(1, 0, BATCH);
}

/* PostgreSQL: each store call in turn finds its connection cut (the
 * socket shut down under libpq, as a network would).  The call fails,
 * the next transaction connects again, and still every message takes
 * effect once.  Joined, and with the token store on a connection of its
 * own. */
Test(faults, every_lost_connection_is_recovered_exactly_once, .timeout = 500)
{
	if (!tt_pg_tier())
		cr_skip_test("connections are PostgreSQL's (the pg tier)");
	every_failing_store_call(1, 1, RECORD);
}

Test(faults, every_lost_connection_of_two_databases_is_recovered_exactly_once,
     .timeout = 500)
{
	if (!tt_pg_tier())
		cr_skip_test("connections are PostgreSQL's (the pg tier)");
	every_failing_store_call(0, 1, BATCH);
}

/* The disk fills up during a handler: A's COMMIT fails, and so does the
 * release of G's marker.  The worker lives on; once the disk has room the
 * batch is processed whole, not one record at a time as after a death,
 * and every message takes effect once. */
static int full_disk_once;

static tbx_verdict_t fill_disk_then_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
					   void *opaque)
{
	if (!full_disk_once) {
		full_disk_once = 1;
		tbx__fault_disk_full(1);
	}
	return tt_hop_handle(ctx, msg, opaque);
}

static int hop1_has_8(void *opaque)
{
	const char *s1 = opaque;

	return tt_count(s1, "SELECT COUNT(DISTINCT payload) FROM hop1") == 8 &&
	       tt_count(s1, "SELECT COUNT(*) FROM tbx_outbox") == 0;
}

Test(faults, a_full_disk_is_no_death_of_the_batch, .timeout = 300)
{
	char *dir = tt_tmpdir();
	char *s1 = tt_store_new(dir, "s1");
	char *tokens = tt_tokens_new(dir, "tokens", 0);
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop1 = {
	    .table = "hop1", .next_topic = "out", .next_type = "Pong"};
	tbx_stats_t st;
	tbx_worker_t *w;
	char err[512];
	uint64_t batches_failed;

	tt_cluster_topic(c, "in", 1);
	tt_cluster_topic(c, "out", 1);
	tt_subscribe(tokens, "in", "g1");
	tt_hop_table(s1, "hop1");
	tt_publish(c->bootstraps, tokens, "in", "Ping", 8, 1, "m");
	w = tbx_worker_new(tt_conf(c->bootstraps, "g1", s1, tokens,
				   "cleanup.interval.ms", "0", NULL),
			   err, sizeof(err));
	cr_assert(w, "%s", err);
	tbx_worker_register(w, "in", "Ping", fill_disk_then_handle, &hop1);

	/* Until a batch failed on the full disk. */
	for (int i = 0; i < 3000; i++) {
		tbx_worker_poll(w, 10, NULL);
		tbx_worker_stats(w, &st);
		if (full_disk_once && st.retries > 0)
			break;
	}
	cr_assert(full_disk_once && st.retries > 0,
		  "no batch failed on the full disk");
	cr_assert_eq(tt_count(s1, "SELECT COUNT(*) FROM hop1"), 0);
	batches_failed = st.batches;
	tbx__fault_disk_full(0);

	cr_assert(tt_drive(&w, 1, hop1_has_8, s1, 20, 60),
		  "the batch was not processed once the disk had room");
	tbx_worker_stats(w, &st);
	/* After a death the 8 records would go one batch each. */
	cr_assert_lt(st.batches - batches_failed, 8,
		     "%" PRIu64 " batches after the disk recovered: the "
		     "marker left by the failed release was taken for a "
		     "death",
		     st.batches - batches_failed);
	cr_assert_eq(tt_count(s1, "SELECT COUNT(*) FROM hop1"), 8);
	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(s1);
	free(tokens);
}
