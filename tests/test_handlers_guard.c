/*
 * A handler cannot end or escape the batch's transaction: whatever it runs
 * on tbx_ctx_db() — COMMIT, BEGIN, ROLLBACK, RELEASE of tokenbox's
 * savepoint, ATTACH, a pragma that weakens durability — is refused, the
 * handler sees the error, and every message still takes effect once.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/worker.h"
#include "fixture.h"

/* What the hostile handler tries, one per record, in turn. */
static const char *const attacks[] = {
    "COMMIT; BEGIN IMMEDIATE",
    "COMMIT",
    "END",
    "ROLLBACK",
    "BEGIN",
    "RELEASE tbx_msg",
    "ROLLBACK TO tbx_msg",
    "SAVEPOINT tbx_mine",
    "ATTACH ':memory:' AS other",
    "DETACH main",
    "PRAGMA synchronous = OFF",
    "PRAGMA main.synchronous = 0",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA locking_mode = EXCLUSIVE",
    "PRAGMA wal_checkpoint(TRUNCATE)",
    "PRAGMA foreign_keys = OFF",
    "PRAGMA user_version = 99",
};
#define ATTACKS (sizeof(attacks) / sizeof(attacks[0]))

typedef struct hostile {
	int calls;
	int refused[ATTACKS]; /* SQLITE_AUTH seen */
	int other[ATTACKS];   /* any other result */
	char errmsg[ATTACKS][128];
	sqlite3_stmt *commit; /* prepared before the worker ran */
} hostile_t;

static int effect(sqlite3 *db, const tbx_msg_t *msg)
{
	sqlite3_stmt *stmt;
	int rc;

	if (sqlite3_prepare_v2(db, "INSERT INTO effects(msg_id) VALUES (?)", -1,
			       &stmt, NULL) != SQLITE_OK)
		return 0;
	sqlite3_bind_text(stmt, 1, tbx_msg_id(msg), -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(stmt);
	sqlite3_finalize(stmt);
	return rc == SQLITE_DONE;
}

/* Record i tries attacks[i % ATTACKS] after its effect, then returns OK
 * whatever happened: the effect must still commit once. */
static tbx_verdict_t hostile_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				    void *opaque)
{
	hostile_t *h = opaque;
	sqlite3 *db = tbx_ctx_db(ctx);
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);
	int i = atoi(payload ? payload : "0") % (int)ATTACKS;
	int rc;

	h->calls++;
	if (!effect(db, msg))
		return TBX_VERDICT_RETRY;
	rc = sqlite3_exec(db, attacks[i], NULL, NULL, NULL);
	if ((rc & 0xff) == SQLITE_AUTH)
		h->refused[i]++;
	else
		h->other[i]++;
	snprintf(h->errmsg[i], sizeof(h->errmsg[i]), "%s", sqlite3_errmsg(db));
	return TBX_VERDICT_OK;
}

static tbx_verdict_t commit_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				   void *opaque)
{
	hostile_t *h = opaque;
	sqlite3 *db = tbx_ctx_db(ctx);
	size_t len;
	const char *payload = tbx_msg_payload(msg, &len);

	h->calls++;
	if (!effect(db, msg))
		return TBX_VERDICT_RETRY;
	if (payload && len == 6 && memcmp(payload, "commit", 6) == 0) {
		int rc = sqlite3_step(h->commit);
		sqlite3_reset(h->commit);
		h->other[0] = rc;
		snprintf(h->errmsg[0], sizeof(h->errmsg[0]), "%s",
			 sqlite3_errmsg(db));
	}
	return TBX_VERDICT_OK;
}

static void env_init(tt_env_t *e)
{
	static const char *const topics[] = {"in:1", "in.dlq:1", NULL};

	tt_env_init(e, topics);
	tt_hop_table(e->store, "effects");
}

static tbx_worker_t *worker(tt_env_t *e, tbx_handler_fn fn, hostile_t *h)
{
	char err[512];
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(e->cluster->bootstraps, "g", e->store, e->tokens, NULL),
	    err, sizeof(err));

	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", NULL, fn, h), TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	return w;
}

Test(guard, every_statement_that_ends_or_escapes_the_transaction_is_refused)
{
	tt_env_t e;
	hostile_t h = {0};
	char payloads[ATTACKS][8];
	const char *list[ATTACKS];
	tbx_stats_t st;

	env_init(&e);
	tbx_worker_t *w = worker(&e, hostile_handle, &h);
	for (size_t i = 0; i < ATTACKS; i++) {
		snprintf(payloads[i], sizeof(payloads[i]), "%zu", i);
		list[i] = payloads[i];
	}
	tt_env_publish(&e, "in", "Hit", list, ATTACKS);
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM effects", ATTACKS};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 10, 60),
		  "the worker did not process every record");
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));
	for (size_t i = 0; i < ATTACKS; i++) {
		cr_expect_eq(h.refused[i], 1, "'%s' was not refused (%s)",
			     attacks[i], h.errmsg[i]);
		cr_expect_eq(h.other[i], 0, "'%s' ran (%s)", attacks[i],
			     h.errmsg[i]);
	}
	/* One effect per message, each committed with its outbox row and
	 * finished; the worker never stopped. */
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM effects"),
		     (int64_t)ATTACKS);
	cr_assert_eq(
	    tt_count(e.store, "SELECT COUNT(DISTINCT msg_id) FROM effects"),
	    (int64_t)ATTACKS);
	cr_assert_eq(h.calls, (int)ATTACKS, "handlers ran again");
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cr_assert_eq(tt_count(e.store, "PRAGMA user_version"),
		     TBX_SCHEMA_VERSION);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.handler_refused, ATTACKS, "refused: %llu",
		     (unsigned long long)st.handler_refused);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* A COMMIT prepared outside the handler escapes the authorizer: the
 * commit hook refuses it, SQLite rolls the batch back, and the record is
 * dead-lettered without its handler; the others take effect once. */
Test(guard, a_commit_prepared_before_the_handler_is_rolled_back)
{
	tt_env_t e;
	hostile_t h = {0};
	const char *list[] = {"a", "commit", "b"};
	tt_record_t *recs;
	size_t cnt;

	env_init(&e);
	tbx_worker_t *w = worker(&e, commit_handle, &h);
	cr_assert_eq(sqlite3_prepare_v2(tbx_outbox_db(w->store), "COMMIT", -1,
					&h.commit, NULL),
		     SQLITE_OK);
	tt_env_publish(&e, "in", "Hit", list, 3);
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM effects", 2};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 10, 60));
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));
	cr_assert_eq(h.other[0] & 0xff, SQLITE_CONSTRAINT,
		     "COMMIT gave %d (%s)", h.other[0], h.errmsg[0]);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM effects"), 2);
	cr_assert_eq(
	    tt_count(e.store, "SELECT COUNT(DISTINCT msg_id) FROM effects"), 2);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	cnt = tt_read_topic(e.cluster->bootstraps, "in.dlq", &recs);
	cr_assert_eq(cnt, 1);
	cr_assert_str_eq(recs[0].payload, "commit");
	cr_assert(recs[0].dlq_error &&
		  strstr(recs[0].dlq_error, "tried to commit"));
	tt_records_free(recs, cnt);
	sqlite3_finalize(h.commit);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* What tbx_ctx_exec() refuses by the statement's first keywords, on
 * either backend, before the database sees it. */
static const char *const exec_attacks[] = {
    "COMMIT",
    "  commit work",
    "/* a comment */ COMMIT",
    "-- a comment\nEND",
    "END TRANSACTION",
    "ABORT",
    "ROLLBACK",
    "rollback transaction",
    "ROLLBACK PREPARED 'x'",
    "BEGIN",
    "START TRANSACTION",
    "RELEASE tbx_msg",
    "release savepoint \"tbx_msg\"",
    "ROLLBACK TO tbx_msg",
    "ROLLBACK TRANSACTION TO SAVEPOINT tbx_msg",
    "SAVEPOINT tbx_mine",
    "PREPARE TRANSACTION 'x'",
    "COMMIT PREPARED 'x'",
    "SET synchronous_commit = off",
    "SET LOCAL lock_timeout = 0",
    "set session statement_timeout to 0",
    "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
    "SET ROLE other",
    "RESET ALL",
    "DEALLOCATE ALL",
    "DISCARD ALL",
};
#define EXEC_ATTACKS (sizeof(exec_attacks) / sizeof(exec_attacks[0]))

typedef struct exec_probe {
	int calls;
	int results[EXEC_ATTACKS];
	int own_savepoint; /* TBX_OK expected */
	int effect;
	int pg_is_null;
} exec_probe_t;

static tbx_verdict_t exec_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				 void *opaque)
{
	exec_probe_t *p = opaque;
	const char *id = tbx_msg_id(msg);
	int64_t changes = 0;

	p->calls++;
	p->pg_is_null = tbx_ctx_pg(ctx) == NULL;
	for (size_t i = 0; i < EXEC_ATTACKS; i++)
		p->results[i] =
		    tbx_ctx_exec(ctx, exec_attacks[i], NULL, 0, NULL);
	/* Savepoints of the handler's own are its business. */
	p->own_savepoint = tbx_ctx_exec(ctx, "SAVEPOINT mine", NULL, 0, NULL);
	if (!p->own_savepoint)
		p->own_savepoint =
		    tbx_ctx_exec(ctx, "RELEASE mine", NULL, 0, NULL);
	p->effect = tbx_ctx_exec(ctx, "INSERT INTO effects(msg_id) VALUES ($1)",
				 &id, 1, &changes);
	if (p->effect == TBX_OK && changes != 1)
		p->effect = -1;
	return TBX_VERDICT_OK;
}

Test(guard, tbx_ctx_exec_refuses_what_would_end_the_transaction)
{
	tt_env_t e;
	exec_probe_t p = {0};
	const char *list[] = {"x"};
	tbx_stats_t st;

	env_init(&e);
	tbx_worker_t *w = worker(&e, exec_handle, (hostile_t *)(void *)&p);
	tt_env_publish(&e, "in", "Hit", list, 1);
	tt_want_t want = {e.store, "SELECT COUNT(*) FROM effects", 1};
	cr_assert(tt_drive(&w, 1, tt_reached, &want, 10, 60));
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));
	for (size_t i = 0; i < EXEC_ATTACKS; i++)
		cr_expect_eq(p.results[i], TBX_EINVAL, "'%s' gave %d",
			     exec_attacks[i], p.results[i]);
	cr_assert_eq(p.own_savepoint, TBX_OK);
	cr_assert_eq(p.effect, TBX_OK);
	cr_assert(p.pg_is_null, "tbx_ctx_pg() on an SQLite store");
	cr_assert_eq(p.calls, 1);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM effects"), 1);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_outbox"), 0);
	tbx_worker_stats(w, &st);
	cr_assert_eq(st.handler_refused, EXEC_ATTACKS, "refused: %llu",
		     (unsigned long long)st.handler_refused);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}

/* A statement that fails gives the handler an error and the message its
 * reason: the dead letter says what the database said. */
static tbx_verdict_t failing_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				    void *opaque)
{
	int *res = opaque;
	const char *id = tbx_msg_id(msg);

	*res = tbx_ctx_exec(ctx, "INSERT INTO no_such_table VALUES ($1)", &id,
			    1, NULL);
	return TBX_VERDICT_REJECT;
}

Test(guard, a_failed_tbx_ctx_exec_is_the_dead_letters_reason)
{
	tt_env_t e;
	const char *list[] = {"x"};
	tt_record_t *recs;
	size_t cnt;
	int res = -1;

	env_init(&e);
	tbx_worker_t *w = worker(&e, failing_handle, (hostile_t *)(void *)&res);
	tt_env_publish(&e, "in", "Hit", list, 1);
	cr_assert(tt_drive(&w, 1, NULL, NULL, 10, 60));
	for (int i = 0;; i++) {
		cnt = tt_read_topic(e.cluster->bootstraps, "in.dlq", &recs);
		if (cnt || i == 100)
			break;
		tt_records_free(recs, cnt);
		cr_assert(tt_drive(&w, 1, NULL, NULL, 5, 60));
	}
	cr_assert_eq(res, TBX_EINVAL);
	cr_assert_eq(cnt, 1);
	cr_assert(recs[0].dlq_error &&
		      strstr(recs[0].dlq_error, "no such table"),
		  "%s", recs[0].dlq_error ? recs[0].dlq_error : "(none)");
	tt_records_free(recs, cnt);
	tbx_worker_destroy(w);
	tt_env_fini(&e);
}
