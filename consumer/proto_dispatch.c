/*
 * C, dispatch (docs/architecture.md): the registrations confirmed, the
 * rows' messages produced and every delivery report awaited; a message
 * the broker refuses for good is given up (dead-lettered) with its row.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crash.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/partition.h"
#include "consumer/producer.h"
#include "consumer/proto_internal.h"
#include "consumer/protocol.h"

/*
 * Dead-letters the messages of @p row whose delivery failed with a
 * permanent error (@p errs, one per message), after @p failures
 * attempts: to the incoming topic's dead-letter topic, without a token
 * (a report for an operator: no receiving group has a token for it) and
 * with the message's own tbx-id; what that does not take either — and
 * every message of a row that is itself a dead letter — is kept whole
 * in tbx_undelivered, from where `tokenbox inspect undelivered resend`
 * sends it as it was (its token still waits downstream).  A crash before
 * E gives the messages up again on redelivery: the dead-letter topic may
 * get a copy with the same tbx-id, tbx_undelivered keeps one line.
 * @returns TBX_OK when each such message went one way or the other.
 */
static int give_up(tbx__proto_t *proto, const tbx__row_t *row,
		   const rd_kafka_resp_err_t *errs, int failures)
{
	char dlq_topic[TBX_TOPIC_MAX + 1], att[12], reason[512];
	char fitted[DLQ_REASON_MAX + 4];
	rd_kafka_resp_err_t *dlq_errs = NULL;
	tbx__row_t dl, *dlp = &dl;
	int delivered = 0, err = TBX_OK;
	size_t k = 0;

	tbx__row_init(&dl);
	tbx__strlcpy(dl.msg_id, row->msg_id, sizeof(dl.msg_id));
	snprintf(att, sizeof(att), "%d", failures);
	tbx__dlq_topic_of(proto, row->in_topic, dlq_topic);
	/* A dead letter that cannot be delivered is not dead-lettered
	 * again: it goes to the table. */
	for (size_t j = 0; row->kind != TBX_ROW_DEAD_LETTER && j < row->msg_cnt;
	     j++) {
		const tbx__outmsg_t *m = &row->msgs[j];
		tbx_header_t *hdrs, h;
		size_t cnt = 0, pos = 0, blob_len = 0;
		void *blob = NULL;

		if (!errs[j] || !tbx__kafka_err_permanent(errs[j]))
			continue;
		snprintf(reason, sizeof(reason),
			 "undeliverable to %s after %d attempts: %s", m->topic,
			 failures, rd_kafka_err2str(errs[j]));
		while (tbx__hdrs_next(m->headers, m->headers_len, &pos, &h) ==
		       1)
			cnt++;
		if (!(hdrs = calloc(cnt + 5, sizeof(*hdrs)))) {
			err = TBX_ENOMEM;
			break;
		}
		cnt = pos = 0;
		while (tbx__hdrs_next(m->headers, m->headers_len, &pos, &h) ==
		       1)
			hdrs[cnt++] = h;
		hdrs[cnt++] =
		    (tbx_header_t){"tbx-dlq-topic", m->topic, strlen(m->topic)};
		hdrs[cnt++] =
		    (tbx_header_t){"tbx-dlq-attempts", att, strlen(att)};
		hdrs[cnt++] =
		    (tbx_header_t){"tbx-dlq-id", m->id, strlen(m->id)};
		hdrs[cnt++] = (tbx_header_t){"tbx-dlq-group", proto->group,
					     strlen(proto->group)};
		hdrs[cnt] = (tbx_header_t){"tbx-dlq-error", reason, 0};
		size_t others = tbx__wire_size(m->key_len, m->payload_len, hdrs,
					       cnt + 1, m->type);
		hdrs[cnt].len = strlen(reason);
		tbx__dlq_reason_fit(proto, &hdrs[cnt], others, fitted,
				    sizeof(fitted));
		cnt++;
		err = tbx__hdrs_encode(hdrs, cnt, &blob, &blob_len);
		free(hdrs);
		if (!err)
			err = tbx__row_add(&dl, dlq_topic, m->type, m->key,
					   m->key_len, m->payload,
					   m->payload_len, blob, blob_len);
		free(blob);
		if (err)
			break;
		/* The message's own id: a copy per give-up, one id. */
		tbx__strlcpy(dl.msgs[dl.msg_cnt - 1].id, m->id,
			     sizeof(dl.msgs[0].id));
	}
	if (!err && dl.msg_cnt) {
		char errstr[256];

		if (!(dlq_errs = calloc(dl.msg_cnt, sizeof(*dlq_errs))))
			err = TBX_ENOMEM;
		else
			tbx__dispatch(*proto->producer, proto->store_id, &dlp,
				      1, &delivered, NULL, dlq_errs, errstr,
				      sizeof(errstr), &proto->c_stop);
	}
	if (err)
		goto out;
	/* What the dead-letter topic did not take: the service store. */
	if ((err = tbx_outbox_begin(proto->store)))
		goto out;
	for (size_t j = 0; j < row->msg_cnt && !err; j++) {
		const tbx__outmsg_t *m = &row->msgs[j];
		int to_table = row->kind == TBX_ROW_DEAD_LETTER;

		if (!errs[j] || !tbx__kafka_err_permanent(errs[j]))
			continue;
		if (!to_table)
			to_table = dlq_errs[k++] != RD_KAFKA_RESP_ERR_NO_ERROR;
		snprintf(reason, sizeof(reason),
			 "undeliverable to %s after %d attempts: %s", m->topic,
			 failures, rd_kafka_err2str(errs[j]));
		if (to_table)
			err = tbx_outbox_undelivered_add(proto->store,
							 proto->group, row, m,
							 reason, failures);
	}
	if (err || (err = tbx_outbox_commit(proto->store))) {
		tbx_outbox_rollback(proto->store);
		goto out;
	}
	k = 0;
	for (size_t j = 0; j < row->msg_cnt; j++) {
		const tbx__outmsg_t *m = &row->msgs[j];
		int to_table = row->kind == TBX_ROW_DEAD_LETTER;

		if (!errs[j] || !tbx__kafka_err_permanent(errs[j]))
			continue;
		if (!to_table)
			to_table = dlq_errs[k++] != RD_KAFKA_RESP_ERR_NO_ERROR;
		proto->stats->undeliverable++;
		proto->stats->undelivered_stored += to_table;
		tbx__log(TBX_LOG_ERR,
			 "outbox row %s: message %s to %s given up after %d "
			 "attempts (%s): %s",
			 row->msg_id, m->id, m->topic, failures,
			 rd_kafka_err2str(errs[j]),
			 to_table ? "kept in the service store's "
				    "tbx_undelivered (tokenbox inspect "
				    "undelivered)"
				  : "dead-lettered");
	}
out:
	free(dlq_errs);
	tbx__row_clear(&dl);
	return err;
}

/* A batch row's count of failed dispatches, counted once a dispatch
 * however many of its records failed. */
typedef struct ob_failed {
	const char *row_id;
	int failures; /* 0: gone, or not counted */
} ob_failed_t;

/* Counts the failed dispatch of batch row @p row_id once in @p seen
 * (@p n of them): *failures its count after it. */
static void ob_dispatch_failed(tbx__proto_t *proto, ob_failed_t *seen,
			       size_t *n, const char *row_id, int *failures)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp(seen[i].row_id, row_id) == 0) {
			*failures = seen[i].failures;
			return;
		}
	if (tbx_outbox_obatch_dispatch_failed(proto->store, proto->group,
					      row_id, failures))
		*failures = 0;
	seen[*n].row_id = row_id;
	seen[(*n)++].failures = *failures;
}

/*
 * After C: a row whose delivery failed with a permanent error counts the
 * failure in S; once dispatch.retry.max retries are used up, and no
 * message of the row failed transiently, its permanently failed
 * messages are given up (give_up) and the row counts as delivered, so it
 * finishes and its partition goes on.  A record of a batch row
 * (@p obs[i] its batch row's id, NULL for a record row) counts in its
 * batch row, once a dispatch for all its records; each record is then
 * given up or not as a record row would be, and the batch row finishes
 * once each of its records was delivered or given up.
 */
static void permanent_failures(tbx__proto_t *proto, tbx__row_t **rows,
			       const char *const *obs, size_t cnt,
			       int *delivered, const rd_kafka_resp_err_t *errs)
{
	int64_t retry_max = proto->dispatch_retry_max;
	ob_failed_t *seen = NULL;
	size_t k = 0, nseen = 0;

	for (size_t i = 0; i < cnt && !seen; i++)
		if (obs[i] && !(seen = calloc(cnt, sizeof(*seen))))
			return; /* counted at the next redelivery */
	for (size_t i = 0; i < cnt; k += rows[i]->msg_cnt, i++) {
		int perm = 0, transient = 0, failures;

		if (delivered[i])
			continue;
		for (size_t j = 0; j < rows[i]->msg_cnt; j++) {
			if (!errs[k + j])
				continue;
			if (tbx__kafka_err_permanent(errs[k + j]))
				perm++;
			else
				transient++;
		}
		if (!perm)
			continue;
		proto->stats->dispatch_failed_permanent += (uint64_t)perm;
		if (obs[i])
			ob_dispatch_failed(proto, seen, &nseen, obs[i],
					   &failures);
		else if (tbx_outbox_dispatch_failed(proto->store, proto->group,
						    rows[i]->msg_id, &failures))
			failures = 0;
		if (failures == 0)
			continue; /* gone, or not counted: next time */
		tbx__log(TBX_LOG_WARNING,
			 "outbox row %s: delivery failed with a permanent "
			 "error (attempt %d of %" PRId64 ")",
			 rows[i]->msg_id, failures, 1 + retry_max);
		if (failures <= retry_max || transient)
			continue;
		if (give_up(proto, rows[i], errs + k, failures) == TBX_OK)
			delivered[i] = 1;
	}
	free(seen);
}

/* Does C dispatch @p brow's messages? */
static int dispatched(const tbx__brow_t *brow)
{
	return (brow->state == TBX_BROW_RECORDED ||
		brow->state == TBX_BROW_JOINED) &&
	       brow->row.msg_cnt > 0;
}

/* Is @p attempt among the @p n of @p attempts (the last first: a batch
 * row's records are mostly next to each other)? */
static int attempt_listed(const char **attempts, size_t n, const char *attempt)
{
	for (size_t i = n; i-- > 0;)
		if (strcmp(attempts[i], attempt) == 0)
			return 1;
	return 0;
}

/* C: confirm, produce, await every report. */
int tbx__phase_dispatch(tbx__proto_t *proto, tbx__batch_t *batch)
{
	const char **attempts = NULL, **sattempts = NULL, **obs = NULL;
	tbx__row_t **rows = NULL;
	int *delivered = NULL;
	rd_kafka_resp_err_t *errs = NULL;
	size_t cnt = 0, acnt = 0, scnt = 0, msgs = 0;
	int err = TBX_OK;
	char errstr[256];

	for (size_t i = 0; i < batch->row_cnt; i++) {
		tbx__brow_t *brow = &batch->rows[i];
		if (brow->row.msg_cnt == 0 && brow->state != TBX_BROW_GONE)
			/* nothing to send */
			tbx__brow_set_state(brow, TBX_BROW_DELIVERED);
		else if (brow->state == TBX_BROW_RECORDED ||
			 brow->state == TBX_BROW_JOINED) {
			cnt++;
			msgs += brow->row.msg_cnt;
		}
	}
	if (cnt == 0)
		return TBX_OK;
	attempts = calloc(cnt, sizeof(*attempts));
	sattempts = calloc(cnt, sizeof(*sattempts));
	rows = calloc(cnt, sizeof(*rows));
	obs = calloc(cnt, sizeof(*obs));
	delivered = calloc(cnt, sizeof(*delivered));
	errs = calloc(msgs, sizeof(*errs));
	if (!attempts || !sattempts || !rows || !obs || !delivered || !errs) {
		err = TBX_ENOMEM;
		goto out;
	}
	cnt = 0;
	for (size_t i = 0; i < batch->row_cnt; i++) {
		tbx__brow_t *brow = &batch->rows[i];
		/* A batch row's attempt of token sets (tokfmt 2) is
		 * registered in tbx_breg. */
		int sets = brow->ob && batch->obs[brow->ob - 1].tokfmt == 2;
		const char **list = sets ? sattempts : attempts;
		size_t *n = sets ? &scnt : &acnt;

		if (!dispatched(brow))
			continue;
		/* An attempt made in A (joined) was never registered; a
		 * batch row's records share one. */
		if (brow->state == TBX_BROW_RECORDED &&
		    !(brow->ob && *n &&
		      attempt_listed(list, *n, brow->row.attempt)))
			list[(*n)++] = brow->row.attempt;
		obs[cnt] = brow->ob ? batch->obs[brow->ob - 1].row_id : NULL;
		rows[cnt++] = &brow->row;
	}
	/* Confirm before dispatch: a finished row never leaves a
	 * registration behind, so the sweeper may treat "no row" as an
	 * orphan. */
	if (acnt && (err = tbx_tokens_confirm(proto->tokens, attempts, acnt)))
		goto out;
	if (scnt &&
	    (err = tbx_tokens_sets_confirm(proto->tokens, sattempts, scnt)))
		goto out;
	tbx__crashpoint("C.confirmed");
	tbx__producer_check(proto->producer, proto->conf, proto->stats,
			    proto->errstr, proto->errstr_size);
	/* The batch's tracer for every dispatch of C, the dead letters of
	 * messages given up included: each is a send span of its own. */
	tbx__tracer_t *prev = tbx__tracer_dispatch_swap(batch->tracer);
	err = tbx__dispatch(*proto->producer, proto->store_id, rows, cnt,
			    delivered, NULL, errs, errstr, sizeof(errstr),
			    &proto->c_stop);
	if (err)
		tbx__log(TBX_LOG_WARNING, "dispatch: %s", errstr);
	if (err && proto->parts) {
		/* A partition the broker does not know: the topic's count
		 * is asked again for the next choice (the message itself
		 * keeps the partition its set was minted for). */
		for (size_t i = 0, k = 0; i < cnt; k += rows[i++]->msg_cnt)
			for (size_t j = 0; j < rows[i]->msg_cnt; j++)
				if (errs[k + j] ==
				    RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION)
					tbx__partition_forget(
					    proto->parts,
					    rows[i]->msgs[j].topic);
	}
	tbx__crashpoint("C.delivered");
	/* A fatal error during this dispatch: a new producer for the
	 * retry. */
	tbx__producer_check(proto->producer, proto->conf, proto->stats,
			    proto->errstr, proto->errstr_size);
	if (err)
		permanent_failures(proto, rows, obs, cnt, delivered, errs);
	tbx__tracer_dispatch_swap(prev);
	cnt = 0;
	for (size_t i = 0; i < batch->row_cnt; i++) {
		tbx__brow_t *brow = &batch->rows[i];
		if (!dispatched(brow) || !delivered[cnt++])
			continue;
		tbx__brow_set_state(brow, TBX_BROW_DELIVERED);
		proto->stats->dispatched += brow->row.msg_cnt;
	}
	err = TBX_OK; /* undelivered rows wait for redelivery */
out:
	free(attempts);
	free(sattempts);
	free(obs);
	free(rows);
	free(delivered);
	free(errs);
	return err;
}
