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
 *
 * Every statement goes through tbx_ctx_exec() with $1 … $n text
 * parameters, in SQL both databases take (TEXT and BIGINT columns), so
 * the same plugin runs on an SQLite service store (store.path) and on a
 * PostgreSQL one (store.url: the tables in the service schema, found by
 * the search_path tokenbox sets).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tokenbox/plugin.h>

#include "chaos.h" /* CH_EFFECTS_COLUMNS */

#define JOB_MAX 64

/* One table per role, so that the three services can share one file;
 * chaos_ticks last (role f).  tbx_chaos makes the effects tables before
 * the workers start when the stores are on PostgreSQL, where CREATE TABLE
 * IF NOT EXISTS is not safe against itself (docs/handlers.md). */
enum { ROLE_A, ROLE_B, ROLE_C, ROLE_F, ROLES };
static const char *const table_sql[ROLES] = {
    "CREATE TABLE IF NOT EXISTS chaos_effects_a" CH_EFFECTS_COLUMNS,
    "CREATE TABLE IF NOT EXISTS chaos_effects_b" CH_EFFECTS_COLUMNS,
    "CREATE TABLE IF NOT EXISTS chaos_effects_c" CH_EFFECTS_COLUMNS,
    "CREATE TABLE IF NOT EXISTS chaos_ticks(tick TEXT NOT NULL, "
    "part BIGINT NOT NULL, off BIGINT NOT NULL, pid BIGINT NOT NULL, "
    "ms BIGINT NOT NULL)",
};
static const char *const insert_sql[ROLES] = {
    "INSERT INTO chaos_effects_a(job, msg_id) VALUES ($1, $2)",
    "INSERT INTO chaos_effects_b(job, msg_id) VALUES ($1, $2)",
    "INSERT INTO chaos_effects_c(job, msg_id) VALUES ($1, $2)",
    "INSERT INTO chaos_ticks(tick, part, off, pid, ms) VALUES ($1, $2, $3, "
    "$4, $5)",
};
static const int roles[] = {ROLE_A, ROLE_B, ROLE_C}; /* handlers' opaque */

/* Per role: a statement of this process made (or found) the table and
 * no insert failed since.  A failed insert clears it, so that the retry
 * makes the table again (the first record's transaction rolled back, or
 * another store).  Set once per process, it spares every later record
 * the DDL. */
static int table_ready[ROLES];

/* Inserts @p params into @p role's table, making the table first unless
 * this process did.  On PostgreSQL the insert is queued and sent with the
 * next statement that waits (docs/handlers.md): its failure comes back
 * from this call when the batch is handled again.
 * @returns 0, or -1 with the reason set by tbx_ctx_exec() (a full disk,
 * a lost connection, say: retried). */
static int insert_row(tbx_ctx_t *ctx, int role, const char *const *params,
		      int n)
{
	if (!table_ready[role]) {
		if (tbx_ctx_exec(ctx, table_sql[role], NULL, 0, NULL) != TBX_OK)
			return -1;
		table_ready[role] = 1;
	}
	if (tbx_ctx_exec(ctx, insert_sql[role], params, n, NULL) != TBX_OK) {
		table_ready[role] = 0;
		return -1;
	}
	return 0;
}

/* @returns 0, or -1 with the reason set (a full disk, say: retried). */
static int record(tbx_ctx_t *ctx, const tbx_msg_t *msg, int role,
		  const char *job, size_t len)
{
	char text[JOB_MAX + 1];
	const char *params[2] = {text, tbx_msg_id(msg)};

	memcpy(text, job, len); /* len <= JOB_MAX (job_of()) */
	text[len] = '\0';
	return insert_row(ctx, role, params, 2);
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
	char tick[JOB_MAX + 1], part[24], off[24], pid[24], ms[24];
	const char *params[5] = {tick, part, off, pid, ms};
	struct timespec ts;
	const char *payload;
	size_t len;

	(void)opaque;
	if (!(payload = job_of(ctx, msg, &len)))
		return TBX_VERDICT_REJECT;
	memcpy(tick, payload, len); /* len <= JOB_MAX (job_of()) */
	tick[len] = '\0';
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(part, sizeof(part), "%d", (int)tbx_msg_partition(msg));
	snprintf(off, sizeof(off), "%lld", (long long)tbx_msg_offset(msg));
	snprintf(pid, sizeof(pid), "%lld", (long long)getpid());
	snprintf(ms, sizeof(ms), "%lld",
		 (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	return insert_row(ctx, ROLE_F, params, 5) ? TBX_VERDICT_RETRY
						  : TBX_VERDICT_OK;
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
