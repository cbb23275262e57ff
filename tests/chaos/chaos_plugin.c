/*
 * The chaos harness's handlers, loaded by `tokenbox worker` with
 * plugin=libtbx_chaos.so and plugin.args=role=a|b|c:
 *
 *   a  consumes "jobs" (Job):        records the job, sends JobDone
 *                                    to "events" (same key)
 *   b  consumes "events" (JobDone):  records the job
 *   c  consumes "events" (JobDone):  records the job (a second group)
 *
 *   f:TOPIC  consumes TOPIC (Tick):  records the tick with its
 *                                    partition, offset, the worker's pid
 *                                    and the time (tbx_failover)
 *
 * Each handler inserts one row into its role's table (chaos_effects_a,
 * _b or _c; chaos_ticks) in the handler's transaction.  The table has no unique
 * constraint on purpose: a handler that took effect twice leaves two rows,
 * which the validator counts.
 */
#include <sqlite3.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tokenbox/plugin.h>

#define JOB_MAX 64

/* One table per role, so that the three services can share one file. */
static const char *const table_sql[] = {
    "CREATE TABLE IF NOT EXISTS chaos_effects_a(job TEXT NOT NULL, "
    "msg_id TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_effects_b(job TEXT NOT NULL, "
    "msg_id TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_effects_c(job TEXT NOT NULL, "
    "msg_id TEXT NOT NULL)",
};
static const char *const insert_sql[] = {
    "INSERT INTO chaos_effects_a(job, msg_id) VALUES (?, ?)",
    "INSERT INTO chaos_effects_b(job, msg_id) VALUES (?, ?)",
    "INSERT INTO chaos_effects_c(job, msg_id) VALUES (?, ?)",
};
static const int roles[] = {0, 1, 2}; /* the handlers' opaque */

/* @returns 0, or -1 with the reason set (a full disk, say: retried). */
static int record(tbx_ctx_t *ctx, const tbx_msg_t *msg, int role,
		  const char *job, size_t len)
{
	sqlite3 *db = tbx_ctx_db(ctx);
	sqlite3_stmt *stmt = NULL;
	int rc;

	if (sqlite3_prepare_v2(db, insert_sql[role], -1, &stmt, NULL) !=
	    SQLITE_OK) {
		/* First use in this store: the table does not exist yet. */
		sqlite3_finalize(stmt);
		stmt = NULL;
		if (sqlite3_exec(db, table_sql[role], NULL, NULL, NULL) !=
			SQLITE_OK ||
		    sqlite3_prepare_v2(db, insert_sql[role], -1, &stmt, NULL) !=
			SQLITE_OK) {
			tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
			sqlite3_finalize(stmt);
			return -1;
		}
	}
	sqlite3_bind_text(stmt, 1, job, (int)len, SQLITE_TRANSIENT);
	sqlite3_bind_text(stmt, 2, tbx_msg_id(msg), -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(stmt);
	if (rc != SQLITE_DONE)
		tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
	return rc == SQLITE_DONE ? 0 : -1;
}

/* @returns the job id (the payload) or NULL after setting a REJECT. */
static const char *job_of(tbx_ctx_t *ctx, const tbx_msg_t *msg, size_t *len)
{
	const char *job = tbx_msg_payload(msg, len);

	if (!job || *len == 0 || *len > JOB_MAX ||
	    memchr(job, '\0', *len) != NULL) {
		tbx_ctx_set_error(ctx, "payload is not a job id");
		return NULL;
	}
	return job;
}

static tbx_verdict_t on_job(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque)
{
	const char *job;
	size_t len;

	if (!(job = job_of(ctx, msg, &len)))
		return TBX_VERDICT_REJECT;
	if (record(ctx, msg, *(const int *)opaque, job, len))
		return TBX_VERDICT_RETRY;
	tbx_out_t out = {.topic = "events",
			 .type = "JobDone",
			 .payload = job,
			 .payload_len = len};
	if (tbx_ctx_send(ctx, &out) != TBX_OK) {
		tbx_ctx_set_error(ctx, "cannot queue JobDone");
		return TBX_VERDICT_RETRY;
	}
	return TBX_VERDICT_OK;
}

static tbx_verdict_t on_done(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque)
{
	const char *job;
	size_t len;

	if (!(job = job_of(ctx, msg, &len)))
		return TBX_VERDICT_REJECT;
	return record(ctx, msg, *(const int *)opaque, job, len)
		   ? TBX_VERDICT_RETRY
		   : TBX_VERDICT_OK;
}

/* Role f: which worker handled which record of a partition, and when
 * (wall clock, ms), for the fail-over measurement. */
static tbx_verdict_t on_tick(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque)
{
	static const char create[] =
	    "CREATE TABLE IF NOT EXISTS chaos_ticks(tick TEXT NOT NULL, "
	    "part INTEGER NOT NULL, off INTEGER NOT NULL, pid INTEGER NOT "
	    "NULL, ms INTEGER NOT NULL)";
	static const char insert[] = "INSERT INTO chaos_ticks(tick, part, off, "
				     "pid, ms) VALUES (?, ?, ?, ?, ?)";
	sqlite3 *db = tbx_ctx_db(ctx);
	sqlite3_stmt *stmt = NULL;
	struct timespec ts;
	const char *tick;
	size_t len;
	int rc;

	(void)opaque;
	if (!(tick = job_of(ctx, msg, &len)))
		return TBX_VERDICT_REJECT;
	if (sqlite3_exec(db, create, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, insert, -1, &stmt, NULL) != SQLITE_OK) {
		tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
		sqlite3_finalize(stmt);
		return TBX_VERDICT_RETRY;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	sqlite3_bind_text(stmt, 1, tick, (int)len, SQLITE_TRANSIENT);
	sqlite3_bind_int(stmt, 2, tbx_msg_partition(msg));
	sqlite3_bind_int64(stmt, 3, tbx_msg_offset(msg));
	sqlite3_bind_int64(stmt, 4, (sqlite3_int64)getpid());
	sqlite3_bind_int64(
	    stmt, 5, (sqlite3_int64)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	rc = sqlite3_step(stmt);
	if (rc != SQLITE_DONE)
		tbx_ctx_set_error(ctx, sqlite3_errmsg(db));
	sqlite3_finalize(stmt);
	return rc == SQLITE_DONE ? TBX_VERDICT_OK : TBX_VERDICT_RETRY;
}

static int chaos_init(tbx_worker_t *worker, const char *args)
{
	if (strncmp(args, "role=f:", 7) == 0 && args[7])
		return tbx_worker_register(worker, args + 7, "Tick", on_tick,
					   NULL);
	if (strcmp(args, "role=a") == 0)
		return tbx_worker_register(worker, "jobs", "Job", on_job,
					   (void *)&roles[0]);
	if (strcmp(args, "role=b") == 0 || strcmp(args, "role=c") == 0)
		return tbx_worker_register(worker, "events", "JobDone", on_done,
					   (void *)&roles[args[5] - 'a']);
	return TBX_EINVAL;
}

TBX_PLUGIN(chaos_init);
