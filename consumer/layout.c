/*
 * One outbox layout per group (outbox.layout; docs/batched-tokens.md,
 * "One layout per group").  A worker with outbox.layout = record does
 * not look at batch rows (tbx_obatch): the records a batch row covers
 * would be handled again when they are redelivered, and its messages
 * would never be sent.  So such a worker refuses to start while its
 * group has batch rows, and stops when an assignment finds some (written
 * meanwhile by a worker of the group on 'batch'): an error naming the
 * group and the count (logged at ERROR by the worker at an assignment,
 * returned by tbx_worker_new() at start, as its other refusals are), and
 * the layout_mixed alarm in the service store
 * (its count is the number of refusals; `inspect status --check` flags
 * it).  A worker on 'batch' resumes record rows, so it needs no check.
 */
#include <inttypes.h>
#include <stdio.h>

#include "base/log.h"
#include "base/str.h"
#include "consumer/worker.h"

static int stop_at_first(void *opaque, const char *grp,
			 const tbx__obatch_t *row)
{
	(void)opaque;
	(void)grp;
	(void)row;
	return 1;
}

/* Records the alarm in a transaction of its own; a failure is logged
 * (the ERROR line says the rest). */
static void alarm_record(tbx_worker_t *worker, const char *detail)
{
	int err = tbx_outbox_begin(worker->store);

	if (!err && ((err = tbx_outbox_alarm_add(worker->store, worker->group,
						 "layout_mixed", detail)) ||
		     (err = tbx_outbox_commit(worker->store))))
		tbx_outbox_rollback(worker->store);
	if (err)
		tbx__log(TBX_LOG_WARNING,
			 "cannot record the layout_mixed alarm in the service "
			 "store: %s",
			 tbx_strerror(err));
}

int tbx__layout_check(tbx_worker_t *worker, const char *when, char *errstr,
		      size_t errstr_size)
{
	const char *grp = worker->group;
	tbx__filter_t f = {&grp, 1, INT64_MAX, 1};
	char detail[TBX_GROUP_MAX * 2 + 600];
	int64_t rows = 0;
	int err;

	if (worker->cfg->outbox_layout != TBX_LAYOUT_RECORD)
		return TBX_OK;
	err = tbx_outbox_obatch_list(worker->store, &f, &rows, stop_at_first,
				     NULL);
	if (err == TBX_ESCHEMA) /* a backend without batch rows: none */
		return TBX_OK;
	if (err) {
		tbx__seterr(errstr, errstr_size, err,
			    "cannot count the group's batch rows (tbx_obatch) "
			    "%s: %s (%s)",
			    when, tbx_strerror(err),
			    tbx_outbox_errmsg(worker->store)
				? tbx_outbox_errmsg(worker->store)
				: "no detail");
		tbx__log(TBX_LOG_WARNING, "%s", errstr);
		return err;
	}
	if (rows == 0)
		return TBX_OK;
	snprintf(detail, sizeof(detail),
		 "group %s has %" PRId64
		 " batch row(s) (tbx_obatch, written with outbox.layout=batch) "
		 "and worker %s has outbox.layout=record, which does not "
		 "resume them: their records would be handled again and their "
		 "messages never sent",
		 grp, rows, worker->log_tag);
	/* Once per refusal, not per poll that repeats it. */
	if (!worker->layout_refused)
		alarm_record(worker, detail);
	tbx__seterr(errstr, errstr_size, TBX_ESTATE,
		    "%s; refused %s (alarm layout_mixed). Run the group's "
		    "workers with outbox.layout=batch until `tokenbox inspect "
		    "outbox list --group %s` lists no batch row, or finish "
		    "them with `tokenbox inspect redispatch --group %s`",
		    detail, when, grp, grp);
	return TBX_ESTATE;
}
