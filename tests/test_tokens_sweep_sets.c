/*
 * Register-cleanup of token sets (tokens/sweep.c): a pass also walks the
 * group's tbx_breg registrations, oldest first, and judges each against
 * the group's batch rows (tbx_obatch): the row records the same attempt
 * -> the registration alone goes; no attempt yet -> left; another
 * attempt, or no row -> an orphan, dropped as ONE row (its sets, every
 * group's, and the registration) whatever its number of messages.  A
 * service store that cannot say what its batch rows hold never makes an
 * orphan.  Each case is built directly: sets minted with
 * tbx_tokens_sets_mint(), batch rows with the obatch operations.  The
 * worker's pass (tbx_worker_cleanup(), its stats) and `tokenbox inspect
 * status --check` are seen on the same cases.
 *
 * S and T in two files or in one (S's connection); in the pg tier
 * (TBX_PG_TIER=1) two schemas, apart or joined, on PostgreSQL's batch
 * rows (service version 4).
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "outbox/outbox.h"
#include "store/msgs.h"
#include "store/pg.h"
#include "cli_child.h"
#include "support.h"
#include "tokens/sweep.h"
#include "tokens/tokens.h"

#define GRP   "g1"  /* the sending group, whose worker sweeps */
#define OUT   "out" /* the topic the sets are minted for */
#define DOWN  "g2"  /* a group downstream, subscribed to OUT */
#define DOWN2 "g3"  /* another one */

typedef struct fx_env {
	char *dir;
	tbx_outbox_t *store;
	tbx_tokens_t *tokens;
	char *s_desc, *t_desc; /* "pg:SCHEMA" descriptors, or the files */
} fx_env_t;

static void fx_env_open(fx_env_t *env, int one_file)
{
	char err[512], url[2048];
	int64_t since;

	memset(env, 0, sizeof(*env));
	tbx__log_setup(TBX_LOG_ERR - 1, "test");
	env->dir = tt_tmpdir();
	if (tt_pg_tier()) {
		env->s_desc = tt_store_new(env->dir, "bsweep_s");
		env->t_desc = tt_tokens_new(env->dir, "bsweep_t", one_file);
		cr_assert_eq(tbx_outbox_pg_open(
				 tt_store_url(env->s_desc, url, sizeof(url)),
				 tt_store_schema(env->s_desc), NULL,
				 &env->store, err, sizeof(err)),
			     TBX_OK, "%s", err);
		cr_assert_eq(tbx_tokens_pg_open(
				 tt_store_url(env->t_desc, url, sizeof(url)),
				 tt_store_schema(env->t_desc),
				 one_file ? tbx_outbox_pg(env->store) : NULL,
				 NULL, &env->tokens, err, sizeof(err)),
			     TBX_OK, "%s", err);
	} else {
		env->s_desc = tt_path(env->dir, one_file ? "all.db" : "s.db");
		env->t_desc = tt_path(env->dir, one_file ? "all.db" : "t.db");
		cr_assert_eq(tbx_outbox_open(env->s_desc, NULL, &env->store,
					     err, sizeof(err)),
			     TBX_OK, "%s", err);
		cr_assert_eq(tbx_tokens_sqlite_open(
				 env->t_desc, NULL,
				 one_file ? tbx_outbox_db(env->store) : NULL,
				 &env->tokens, err, sizeof(err)),
			     TBX_OK, "%s", err);
	}
	cr_assert_eq(tbx_tokens_subscribe(env->tokens, OUT, DOWN, &since),
		     TBX_OK);
	cr_assert_eq(tbx_tokens_subscribe(env->tokens, OUT, DOWN2, &since),
		     TBX_OK);
}

static void fx_env_close(fx_env_t *env)
{
	char sql[160];

	tbx_tokens_close(env->tokens);
	tbx_outbox_close(env->store);
	if (tt_pg_tier()) {
		snprintf(sql, sizeof(sql), "DROP SCHEMA \"%s\" CASCADE",
			 tt_store_schema(env->s_desc));
		tt_count(env->s_desc, sql);
		snprintf(sql, sizeof(sql),
			 "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
			 tt_store_schema(env->t_desc));
		tt_count(env->s_desc, sql);
	}
	tt_rmrf(env->dir);
	free(env->dir);
	free(env->s_desc);
	free(env->t_desc);
}

/* Runs @p sql (no result) on the store @p desc: the file, or the schema
 * (tt_count() opens a file read-only). */
static void fx_exec(const char *desc, const char *sql)
{
	sqlite3 *db;

	if (tt_pg_tier()) {
		tt_count(desc, sql);
		return;
	}
	cr_assert_eq(sqlite3_open(desc, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 10000);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK,
		     "%s: %s", sql, sqlite3_errmsg(db));
	sqlite3_close(db);
}

/* A count on the token store (the file or the schema). */
static int64_t fx_t_count(fx_env_t *env, const char *sql)
{
	return tt_count(env->t_desc, sql);
}

/*
 * A batch row of one record and one message to OUT; with @p set (a set
 * id), the message's token, as B records it.
 */
typedef struct brow {
	tbx__obatch_t row;
	tbx__buf_t cover, wire;
	void *msgs;
	char in_id[TBX_UUID_LEN + 1], out_id[TBX_UUID_LEN + 1];
} brow_t;

static void brow_make(brow_t *b, const char *row_id, const char *set)
{
	tbx__cover_ent_t e;
	tbx__wire_ent_t w = {0, 0, 0};
	tbx__mfield_t f[TBX__MF_COUNT];
	char err[200];

	memset(b, 0, sizeof(*b));
	memset(f, 0, sizeof(f));
	tbx__uuid(b->in_id);
	tbx__uuid(b->out_id);
	tbx__strlcpy(b->row.row_id, row_id, sizeof(b->row.row_id));
	e = (tbx__cover_ent_t){TBX__COVER_HANDLED, "in", 0, 7, b->in_id,
			       TBX__REF_TOKEN,	   "",	 0, 0};
	tbx__uuid(e.ref_id);
	f[TBX__MF_ID] = (tbx__mfield_t){b->out_id, TBX_UUID_LEN};
	f[TBX__MF_TOPIC] = (tbx__mfield_t){OUT, strlen(OUT)};
	f[TBX__MF_TYPE] = (tbx__mfield_t){"Pong", 4};
	f[TBX__MF_PAYLOAD] = (tbx__mfield_t){"v", 1};
	if (set)
		f[TBX__MF_TOKEN] = (tbx__mfield_t){set, TBX_UUID_LEN};
	cr_assert_eq(tbx__cover_encode(&b->cover, &e, 1, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx__wire_encode(&b->wire, &w, 1), TBX_OK);
	cr_assert_eq(tbx__msgs_encode(f, 1, &b->msgs, &b->row.msgs_len),
		     TBX_OK);
	b->row.msgs = b->msgs;
	b->row.cover = b->cover.p;
	b->row.cover_len = b->cover.len;
	b->row.wire = b->wire.p;
	b->row.wire_len = b->wire.len;
	b->row.tokfmt = 2;
	b->row.created_ms = 1000;
	b->row.stuck_ms = -1;
}

static void brow_free(brow_t *b)
{
	tbx__buf_free(&b->cover);
	tbx__buf_free(&b->wire);
	free(b->msgs);
}

/* A: the group's batch row @p row_id, without an attempt. */
static void fx_row(fx_env_t *env, char row_id[TBX_UUID_LEN + 1])
{
	brow_t b;
	int err;

	tbx__uuid(row_id);
	brow_make(&b, row_id, NULL);
	cr_assert_eq(tbx_outbox_begin(env->store), TBX_OK);
	err = tbx_outbox_obatch_insert(env->store, GRP, &b.row);
	cr_assert_eq(err, TBX_OK, "obatch_insert: %s",
		     err == TBX_ESCHEMA ? "this backend has no batch rows yet"
					: tbx_outbox_errmsg(env->store));
	cr_assert_eq(tbx_outbox_commit(env->store), TBX_OK);
	brow_free(&b);
}

/* One attempt of B's first half: two sets (partitions 0 and 1) of OUT,
 * @p nbits messages each, minted and registered for @p row_id. */
typedef struct attempt {
	char id[TBX_UUID_LEN + 1];
	char sets[2][TBX_UUID_LEN + 1];
	int64_t seq;
} attempt_t;

static void fx_mint(fx_env_t *env, const char *row_id, uint32_t nbits,
		    attempt_t *a)
{
	tbx__set_item_t items[2];
	tbx__set_req_t req;
	uint64_t rows = 0;

	tbx__uuid(a->id);
	for (int i = 0; i < 2; i++) {
		tbx__uuid(a->sets[i]);
		items[i] = (tbx__set_item_t){a->sets[i], OUT, i, nbits};
	}
	req = (tbx__set_req_t){a->id, row_id, items, 2};
	cr_assert_eq(
	    tbx_tokens_sets_mint(env->tokens, GRP, &req, 1, &a->seq, &rows),
	    TBX_OK);
	cr_assert_eq(rows, 4, "2 sets x 2 groups");
}

/* B's second half: the attempt recorded on the row.  @returns won. */
static int fx_record(fx_env_t *env, const char *row_id, const attempt_t *a)
{
	brow_t b;
	int won = -1;

	brow_make(&b, row_id, a->sets[0]);
	cr_assert_eq(tbx_outbox_begin(env->store), TBX_OK);
	cr_assert_eq(tbx_outbox_obatch_set_attempt(
			 env->store, GRP, row_id, a->id, a->seq, b.msgs,
			 b.row.msgs_len, b.wire.p, b.wire.len, &won),
		     TBX_OK, "%s", tbx_outbox_errmsg(env->store));
	cr_assert_eq(tbx_outbox_commit(env->store), TBX_OK);
	brow_free(&b);
	return won;
}

/* Set rows (every group) of @p a still in the token store. */
static int64_t fx_set_rows(fx_env_t *env, const attempt_t *a)
{
	char sql[300];

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM tbx_tset WHERE set_id IN ('%s', '%s')",
		 a->sets[0], a->sets[1]);
	return fx_t_count(env, sql);
}

static int64_t fx_breg(fx_env_t *env, const attempt_t *a)
{
	char sql[200];

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM tbx_breg WHERE attempt = '%s'", a->id);
	return fx_t_count(env, sql);
}

static tbx__sweep_stats_t fx_sweep(fx_env_t *env, size_t limit)
{
	tbx__sweep_stats_t st;

	cr_assert_eq(tbx_tokens_sweep(env->tokens, env->store, GRP, limit, &st),
		     TBX_OK);
	return st;
}

/* Every case on separate stores and on one. */
#define EACH_LAYOUT(one) for (int one = 0; one < 2; one++)

/* A loser crashed before dropping its own sets: swept as one row, its
 * sets of both groups gone; the winner's sets are untouched and only
 * its registration goes (recorded, awaiting its confirm). */
Test(sweep_sets, an_orphaned_attempt_is_swept_as_one_row)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t won, lost;
		char row[TBX_UUID_LEN + 1];
		tbx__sweep_stats_t st;

		fx_env_open(&env, one);
		fx_row(&env, row);
		fx_mint(&env, row, 300, &won);
		fx_mint(&env, row, 300, &lost);
		cr_assert_eq(fx_record(&env, row, &won), 1);
		cr_assert_eq(fx_record(&env, row, &lost), 0);
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 2, "layout %d", one);
		cr_assert_eq(st.set_orphans, 1);
		cr_assert_eq(st.set_rows_deleted, 4, "2 sets x 2 groups");
		cr_assert_eq(st.set_winners, 1);
		cr_assert_eq(st.set_in_flight + st.set_unchecked, 0);
		/* Counted apart from the per-message tokens. */
		cr_assert_eq(st.examined + st.orphans + st.tokens_deleted, 0);
		cr_assert_eq(fx_set_rows(&env, &lost), 0);
		cr_assert_eq(fx_breg(&env, &lost), 0);
		cr_assert_eq(fx_set_rows(&env, &won), 4, "in flight: kept");
		cr_assert_eq(fx_breg(&env, &won), 0, "the winner's alone");
		/* Nothing left to do. */
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 0);
		cr_assert_eq(fx_set_rows(&env, &won), 4);
		fx_env_close(&env);
	}
}

/* A registration whose row is gone (finished, or never recorded with
 * it) is an orphan; one whose row records it is a winner. */
Test(sweep_sets, no_row_is_an_orphan_and_the_same_attempt_a_winner)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t gone, won;
		char row[TBX_UUID_LEN + 1], none[TBX_UUID_LEN + 1];
		tbx__sweep_stats_t st;

		fx_env_open(&env, one);
		tbx__uuid(none);
		fx_mint(&env, none, 1, &gone);
		fx_row(&env, row);
		fx_mint(&env, row, 65536, &won);
		cr_assert_eq(fx_record(&env, row, &won), 1);
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 2);
		cr_assert_eq(st.set_orphans, 1);
		cr_assert_eq(st.set_rows_deleted, 4);
		cr_assert_eq(st.set_winners, 1);
		cr_assert_eq(fx_set_rows(&env, &gone), 0);
		cr_assert_eq(fx_breg(&env, &gone), 0);
		cr_assert_eq(fx_set_rows(&env, &won), 4);
		cr_assert_eq(fx_breg(&env, &won), 0);
		fx_env_close(&env);
	}
}

/* An attempt between mint and record (its row has no attempt yet) is
 * left, young or old: the rule is the row's, not an age (as for
 * per-message tokens).  Recorded, it is then a winner. */
Test(sweep_sets, an_attempt_not_yet_recorded_is_left_however_old)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t a;
		char row[TBX_UUID_LEN + 1], sql[400];
		tbx__sweep_stats_t st;

		fx_env_open(&env, one);
		fx_row(&env, row);
		fx_mint(&env, row, 5, &a);
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 1);
		cr_assert_eq(st.set_in_flight, 1);
		cr_assert_eq(st.set_orphans + st.set_winners, 0);
		cr_assert_eq(fx_breg(&env, &a), 1);
		cr_assert_eq(fx_set_rows(&env, &a), 4);
		/* A day old: still the row's to decide. */
		snprintf(sql, sizeof(sql),
			 "UPDATE tbx_breg SET created_ms = 1 WHERE attempt = "
			 "'%.36s'",
			 a.id);
		fx_exec(env.t_desc, sql);
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_in_flight, 1);
		cr_assert_eq(fx_breg(&env, &a), 1);
		cr_assert_eq(fx_set_rows(&env, &a), 4);
		cr_assert_eq(fx_record(&env, row, &a), 1);
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_winners, 1);
		cr_assert_eq(fx_breg(&env, &a), 0);
		cr_assert_eq(fx_set_rows(&env, &a), 4);
		fx_env_close(&env);
	}
}

/* A pass takes at most its limit, oldest first, and the worker's cursor
 * goes on after a full pass of attempts in flight to the orphans behind
 * them. */
Test(sweep_sets, passes_are_bounded_and_reach_what_is_behind)
{
	fx_env_t env;
	attempt_t flight[3], orphan;
	char rows[3][TBX_UUID_LEN + 1], none[TBX_UUID_LEN + 1], sql[400];
	tbx__sweep_cursor_t cur;
	tbx__sweep_stats_t st;

	fx_env_open(&env, 0);
	for (int i = 0; i < 3; i++) {
		fx_row(&env, rows[i]);
		fx_mint(&env, rows[i], 2, &flight[i]);
		snprintf(sql, sizeof(sql),
			 "UPDATE tbx_breg SET created_ms = %d WHERE attempt = "
			 "'%.36s'",
			 10 + i, flight[i].id);
		fx_exec(env.t_desc, sql);
	}
	tbx__uuid(none);
	fx_mint(&env, none, 2, &orphan);
	memset(&cur, 0, sizeof(cur));
	cr_assert_eq(
	    tbx__tokens_sweep_resume(env.tokens, env.store, GRP, 3, &cur, &st),
	    TBX_OK);
	cr_assert_eq(st.set_examined, 3);
	cr_assert_eq(st.set_in_flight, 3);
	cr_assert_eq(fx_breg(&env, &orphan), 1);
	cr_assert_eq(
	    tbx__tokens_sweep_resume(env.tokens, env.store, GRP, 3, &cur, &st),
	    TBX_OK);
	cr_assert_eq(st.set_examined, 1);
	cr_assert_eq(st.set_orphans, 1);
	cr_assert_eq(fx_breg(&env, &orphan), 0);
	cr_assert_eq(fx_set_rows(&env, &orphan), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(fx_set_rows(&env, &flight[i]), 4);
	fx_env_close(&env);
}

/* A service store that cannot say what its batch rows hold (here: its
 * obatch operations taken away, as on a backend without batch rows)
 * leaves every registration unjudged, counted, and never an orphan. */
Test(sweep_sets, a_store_without_batch_rows_makes_no_orphan)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t a;
		char none[TBX_UUID_LEN + 1];
		tbx_outbox_ops_t bare;
		const tbx_outbox_ops_t *real;
		tbx__sweep_stats_t st;
		int v[1];
		tbx__reg_t reg;

		fx_env_open(&env, one);
		tbx__uuid(none);
		fx_mint(&env, none, 3, &a); /* no row: would be an orphan */
		real = env.store->ops;
		bare = *real;
		bare.obatch_load = NULL;
		env.store->ops = &bare;
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 1);
		cr_assert_eq(st.set_unchecked, 1);
		cr_assert_eq(st.set_unchecked_err, TBX_ESCHEMA);
		cr_assert_eq(st.set_orphans + st.set_winners + st.set_in_flight,
			     0);
		cr_assert_eq(fx_breg(&env, &a), 1);
		cr_assert_eq(fx_set_rows(&env, &a), 4);
		memset(&reg, 0, sizeof(reg));
		tbx__strlcpy(reg.attempt, a.id, sizeof(reg.attempt));
		tbx__strlcpy(reg.msg_id, none, sizeof(reg.msg_id));
		cr_assert_eq(tbx__sweep_sets_classify(env.store, GRP, &reg, 1,
						      v, NULL, NULL),
			     TBX_OK);
		cr_assert_eq(v[0], TBX_SWEEP_UNCHECKED);
		env.store->ops = real;
		/* With its batch rows, the same registration is an orphan
		 * (both backends have them). */
		if (real->obatch_load) {
			st = fx_sweep(&env, 100);
			cr_assert_eq(st.set_orphans, 1);
			cr_assert_eq(fx_set_rows(&env, &a), 0);
		}
		fx_env_close(&env);
	}
}

/* unsubscribe counts the group's set rows of the topic, and removes
 * them with the subscription; another group's stay. */
Test(sweep_sets, unsubscribe_removes_the_groups_set_rows_of_the_topic)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t a;
		char row[TBX_UUID_LEN + 1];
		tbx__unsub_t u;

		fx_env_open(&env, one);
		tbx__uuid(row);
		fx_mint(&env, row, 4, &a);
		cr_assert_eq(tbx_tokens_unsubscribe(env.tokens, OUT, DOWN,
						    INT64_MAX, 0, &u),
			     TBX_OK);
		cr_assert(u.found);
		cr_assert_eq(u.set_rows, 2);
		cr_assert_eq(u.set_deleted, 0);
		cr_assert_eq(fx_set_rows(&env, &a), 4, "a dry run");
		cr_assert_eq(tbx_tokens_unsubscribe(env.tokens, OUT, DOWN,
						    INT64_MAX, 1, &u),
			     TBX_OK);
		cr_assert(u.removed);
		cr_assert_eq(u.set_deleted, 2);
		cr_assert_eq(fx_set_rows(&env, &a), 2, "g3's are kept");
		cr_assert_eq(fx_t_count(&env, "SELECT count(*) FROM tbx_tset "
					      "WHERE grp = '" DOWN "'"),
			     0);
		fx_env_close(&env);
	}
}

/* A listing of the batch rows that fails (here: the table dropped, as a
 * service store of an older schema opened without migrating) leaves the
 * registrations unjudged too, and the pass's per-message part stands. */
Test(sweep_sets, a_failed_listing_of_batch_rows_makes_no_orphan)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t a;
		char none[TBX_UUID_LEN + 1];
		tbx__sweep_stats_t st;

		fx_env_open(&env, one);
		tbx__uuid(none);
		fx_mint(&env, none, 3, &a);
		fx_exec(env.s_desc, tt_pg_tier()
					? "DROP TABLE tbx_obatch CASCADE"
					: "DROP TABLE tbx_obatch");
		st = fx_sweep(&env, 100);
		cr_assert_eq(st.set_examined, 1);
		cr_assert_eq(
		    st.set_unchecked, 1,
		    "layout %d: %zu in flight, %zu orphans, %zu winners", one,
		    st.set_in_flight, st.set_orphans, st.set_winners);
		cr_assert_neq(st.set_unchecked_err, TBX_OK);
		cr_assert_eq(st.set_orphans, 0);
		cr_assert_eq(fx_breg(&env, &a), 1);
		cr_assert_eq(fx_set_rows(&env, &a), 4);
		fx_env_close(&env);
	}
}

/* The worker's register-cleanup (tbx_worker_cleanup(), what its loop
 * runs every cleanup.interval.ms) sweeps an orphaned registration of
 * token sets and counts it in the worker's stats; a registration whose
 * row has no attempt yet is left and counted nowhere. */
Test(sweep_sets, the_workers_cleanup_counts_what_it_swept, .timeout = 120)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t gone, flying;
		char row[TBX_UUID_LEN + 1], none[TBX_UUID_LEN + 1];
		tt_cluster_t *c = tt_cluster_new(1);
		tbx_worker_t *w;
		tbx_stats_t st;
		size_t swept = 0;
		char err[512];

		fx_env_open(&env, one);
		tbx__uuid(none);
		fx_mint(&env, none, 5, &gone);
		fx_row(&env, row);
		fx_mint(&env, row, 5, &flying);
		w = tbx_worker_new(tt_conf(c->bootstraps, GRP, env.s_desc,
					   env.t_desc, "cleanup.interval.ms",
					   "0", NULL),
				   err, sizeof(err));
		cr_assert(w, "%s", err);
		cr_assert_eq(tbx_worker_cleanup(w, 0, &swept), TBX_OK);
		cr_assert_eq(swept, 1, "layout %d", one);
		tbx_worker_stats(w, &st);
		cr_assert_eq(st.set_orphans_swept, 1, "layout %d", one);
		cr_assert_eq(st.set_rows_swept, 4, "2 sets x 2 groups");
		cr_assert_eq(st.set_regs_unchecked, 0);
		cr_assert_eq(st.orphans_swept, 0);
		cr_assert_eq(fx_breg(&env, &gone), 0);
		cr_assert_eq(fx_set_rows(&env, &gone), 0);
		cr_assert_eq(fx_breg(&env, &flying), 1, "in flight: left");
		cr_assert_eq(fx_set_rows(&env, &flying), 4);
		/* A second pass finds nothing more: the counters stand. */
		cr_assert_eq(tbx_worker_cleanup(w, 0, &swept), TBX_OK);
		cr_assert_eq(swept, 0);
		tbx_worker_stats(w, &st);
		cr_assert_eq(st.set_orphans_swept, 1);
		cr_assert_eq(st.set_rows_swept, 4);
		tbx_worker_destroy(w);
		tt_cluster_destroy(c);
		fx_env_close(&env);
	}
}

/* Runs `tokenbox inspect` on @p env's stores with @p cmd
 * (NULL-terminated): the files, or in the pg tier the server's URL and
 * the schemas. */
static cc_result_t fx_inspect(const fx_env_t *env, const char *const *cmd)
{
	static char url[2][2200];
	const char *argv[64] = {"inspect"};
	size_t n = 1;

	argv[n++] = "-s";
	argv[n++] = tt_pg_tier()
			? tt_store_url(env->s_desc, url[0], sizeof(url[0]))
			: env->s_desc;
	if (tt_pg_tier()) {
		argv[n++] = "--schema";
		argv[n++] = tt_store_schema(env->s_desc);
	}
	argv[n++] = "-S";
	argv[n++] = tt_pg_tier()
			? tt_store_url(env->t_desc, url[1], sizeof(url[1]))
			: env->t_desc;
	if (tt_pg_tier()) {
		argv[n++] = "--tokens-schema";
		argv[n++] = tt_store_schema(env->t_desc);
	}
	for (size_t i = 0; cmd[i] && n < 63; i++)
		argv[n++] = cmd[i];
	argv[n] = NULL;
	return cc_run(argv);
}

#define FX_INSPECT(env, ...)                                                   \
	fx_inspect((env), (const char *const[]){__VA_ARGS__, NULL})

/* An orphaned registration of token sets is, alone in the stores, a
 * finding of `inspect status --check` (exit 1, named); the same
 * registration recorded by its row is none (exit 0). */
Test(sweep_sets, status_check_flags_an_orphaned_set_registration_alone,
     .timeout = 120)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t won, lost;
		char row[TBX_UUID_LEN + 1];
		cc_result_t res;

		fx_env_open(&env, one);
		/* GRP's worker has consumed its input: the store serves
		 * GRP, whose registrations inspect judges. */
		cr_assert_eq(tbx_outbox_begin(env.store), TBX_OK);
		cr_assert_eq(tbx_outbox_ingress_set(env.store, GRP, "in", 0, 8),
			     TBX_OK);
		cr_assert_eq(tbx_outbox_commit(env.store), TBX_OK);
		fx_row(&env, row);
		fx_mint(&env, row, 3, &won);
		cr_assert_eq(fx_record(&env, row, &won), 1);
		res = FX_INSPECT(&env, "status", "--check");
		cr_assert(cc_exited(res.status, 0),
			  "layout %d: the row's own attempt is no finding: "
			  "%s%s",
			  one, res.out, res.err);
		cc_result_free(&res);

		fx_mint(&env, row, 3, &lost);
		res = FX_INSPECT(&env, "status", "--check");
		cr_assert(cc_exited(res.status, 1),
			  "layout %d: another attempt's registration: %s%s",
			  one, res.out, res.err);
		cr_assert(strstr(res.out, "1 orphaned now"), "%s", res.out);
		cc_result_free(&res);
		fx_env_close(&env);
	}
}

/* A group whose only rows in the service store are batch rows
 * (tbx_obatch: no tbx_outbox, tbx_ingress or tbx_dead_letters row of it)
 * is served by the store: `status --check` judges its set registrations
 * and flags an orphan, `orphans` lists it, and `cleanup` removes it,
 * leaving the row's own attempt alone. */
Test(sweep_sets, a_group_with_batch_rows_alone_is_judged, .timeout = 120)
{
	EACH_LAYOUT(one)
	{
		fx_env_t env;
		attempt_t won, lost;
		char row[TBX_UUID_LEN + 1];
		cc_result_t res;

		fx_env_open(&env, one);
		fx_row(&env, row);
		fx_mint(&env, row, 3, &won);
		cr_assert_eq(fx_record(&env, row, &won), 1);
		fx_mint(&env, row, 3, &lost);
		res = FX_INSPECT(&env, "status", "--check");
		cr_assert(cc_exited(res.status, 1),
			  "layout %d: an orphan of a group with batch rows "
			  "alone: %s%s",
			  one, res.out, res.err);
		cr_assert(strstr(res.out, "1 orphaned now"), "%s", res.out);
		cc_result_free(&res);
		res = FX_INSPECT(&env, "orphans", "--json");
		cr_assert(cc_exited(res.status, 0), "%s%s", res.out, res.err);
		cr_assert(strstr(res.out, lost.id), "%s", res.out);
		cr_assert(strstr(res.out, "\"checked_groups\":\t[\"" GRP "\"]"),
			  "%s", res.out);
		cc_result_free(&res);
		res = FX_INSPECT(&env, "cleanup");
		cr_assert(cc_exited(res.status, 0), "%s%s", res.out, res.err);
		cc_result_free(&res);
		cr_assert_eq(fx_breg(&env, &lost), 0, "layout %d", one);
		cr_assert_eq(fx_set_rows(&env, &lost), 0);
		cr_assert_eq(fx_breg(&env, &won), 0, "the winner's alone");
		cr_assert_eq(fx_set_rows(&env, &won), 4, "in flight: kept");
		res = FX_INSPECT(&env, "status", "--check");
		cr_assert(cc_exited(res.status, 0), "layout %d: %s%s", one,
			  res.out, res.err);
		cc_result_free(&res);
		fx_env_close(&env);
	}
}
