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
#include "consumer/stores.h"
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

/* The check on @p store: TBX_ESTATE with @p detail (the why) filled when
 * group @p grp has batch rows, TBX_OK when it has none (or the store
 * has no batch rows at all), else the store's error in @p errstr. */
static int layout_rows(tbx_outbox_t *store, const char *grp, const char *who,
		       const char *when, char *detail, size_t detail_size,
		       char *errstr, size_t errstr_size)
{
	tbx__filter_t f = {&grp, 1, INT64_MAX, 1};
	int64_t rows = 0;
	int err;

	err = tbx_outbox_obatch_list(store, &f, &rows, stop_at_first, NULL);
	if (err == TBX_ESCHEMA) /* a backend without batch rows: none */
		return TBX_OK;
	if (err)
		return tbx__seterr(errstr, errstr_size, err,
				   "cannot count the group's batch rows "
				   "(tbx_obatch) %s: %s (%s)",
				   when, tbx_strerror(err),
				   tbx_outbox_errmsg(store)
				       ? tbx_outbox_errmsg(store)
				       : "no detail");
	if (rows == 0)
		return TBX_OK;
	snprintf(detail, detail_size,
		 "group %s has %" PRId64
		 " batch row(s) (tbx_obatch, written with outbox.layout=batch) "
		 "and %s has outbox.layout=record, which does not resume "
		 "them: their records would be handled again and their "
		 "messages never sent",
		 grp, rows, who);
	return TBX_ESTATE;
}

/* The refusal's advice, after @p detail. */
static int refuse(const char *detail, const char *refused, const char *grp,
		  char *errstr, size_t errstr_size)
{
	return tbx__seterr(errstr, errstr_size, TBX_ESTATE,
			   "%s; %s (alarm layout_mixed). Run the group's "
			   "workers with outbox.layout=batch until `tokenbox "
			   "inspect outbox list --group %s` lists no batch "
			   "row, or finish them with `tokenbox inspect "
			   "redispatch --group %s`",
			   detail, refused, grp, grp);
}

int tbx__layout_check(tbx_worker_t *worker, const char *when, char *errstr,
		      size_t errstr_size)
{
	char detail[TBX_GROUP_MAX * 2 + 600], who[TBX_GROUP_MAX + 64],
	    refused[64];
	int err;

	if (worker->cfg->outbox_layout != TBX_LAYOUT_RECORD)
		return TBX_OK;
	snprintf(who, sizeof(who), "worker %s", worker->log_tag);
	err = layout_rows(worker->store, worker->group, who, when, detail,
			  sizeof(detail), errstr, errstr_size);
	if (err != TBX_ESTATE) {
		if (err)
			tbx__log(TBX_LOG_WARNING, "%s", errstr);
		return err;
	}
	/* Once per refusal, not per poll that repeats it. */
	if (!worker->layout_refused)
		alarm_record(worker, detail);
	snprintf(refused, sizeof(refused), "refused %s", when);
	return refuse(detail, refused, worker->group, errstr, errstr_size);
}

int tbx__layout_check_ro(const tbx__cfg_t *cfg, char *errstr,
			 size_t errstr_size)
{
	char detail[TBX_GROUP_MAX * 2 + 600];
	tbx_outbox_t *store = NULL;
	int err;

	if (cfg->outbox_layout != TBX_LAYOUT_RECORD)
		return TBX_OK;
	if ((err = tbx__stores_open_service_ro(cfg, &store, errstr,
					       errstr_size)) ||
	    !store)
		return err;
	err = layout_rows(store, cfg->group_id, "this configuration",
			  "for --check-config", detail, sizeof(detail), errstr,
			  errstr_size);
	tbx_outbox_close(store);
	if (err == TBX_ESTATE)
		return refuse(detail, "a start would be refused", cfg->group_id,
			      errstr, errstr_size);
	return err;
}
