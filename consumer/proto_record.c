/*
 * A for one record (docs/architecture.md, "A: process"): the handler run
 * in the record's savepoint and its outbox row (tbx__process_one(),
 * run_handler()), the row resumed or found conflicting, the dead letters
 * and the store-mismatch rule, and, joined, B inside A (mint_in_A()).
 * The batch around it is proto_process.c's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/crash.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/str.h"
#include "consumer/alive.h"
#include "consumer/producer.h"
#include "consumer/proto_internal.h"
#include "consumer/protocol.h"

/* A partition whose first this many batches' worth of tokened records
 * after an assignment are all dropped as duplicates is more than the
 * redelivery of what the previous owner left uncommitted. */
#define DUP_PREFIX_BATCHES 4

/* Retry delay for the n-th attempt (1-based), with jitter. */
int64_t tbx__backoff_ms(tbx__proto_t *proto, int attempt)
{
	int64_t delay = proto->backoff_ms;

	for (int i = 1; i < attempt && delay < proto->backoff_max_ms; i++)
		delay *= 2;
	if (delay > proto->backoff_max_ms)
		delay = proto->backoff_max_ms;
	/* Full jitter in [delay/2, delay]: workers retrying the same
	 * failure do not march in step. */
	return delay / 2 + rand_r(&proto->rand_state) % (delay / 2 + 1);
}

static void row_fill(tbx__row_t *row, const struct tbx_msg *msg, int kind)
{
	tbx__strlcpy(row->msg_id, msg->id, sizeof(row->msg_id));
	/* No token of ours to consume for an untokened record (one minted
	 * before this group subscribed carries someone else's).  A batched
	 * record's token is its bit of the set. */
	row->in_set = !msg->untokened && msg->fmt == TBX_WF_SET;
	row->in_tbit = row->in_set ? msg->tset_index : 0;
	tbx__strlcpy(row->in_token,
		     msg->untokened ? ""
		     : row->in_set  ? msg->tset
				    : msg->token,
		     sizeof(row->in_token));
	tbx__strlcpy(row->in_topic, msg->topic, sizeof(row->in_topic));
	row->in_partition = msg->rkm->partition;
	row->in_offset = msg->rkm->offset;
	row->kind = kind;
	row->created_ms = tbx__now_ms();
}

/* Untokened and malformed records are deduplicated by offset: the
 * service store keeps the next offset per partition, moved in the
 * record's own savepoint. */
static int ingress_advance(tbx__proto_t *proto, const struct tbx_msg *msg)
{
	return tbx_outbox_ingress_set(proto->store, proto->group, msg->topic,
				      msg->rkm->partition,
				      msg->rkm->offset + 1);
}

/*
 * Joined (one file): B inside A.  The row gets a fresh attempt and one
 * token per outgoing message, numbered with the sequence number A took,
 * inside the record's savepoint: they commit or roll back with the row
 * and the handler's effects.  No registration is written, since no
 * attempt can be persisted without the row that names it.  The token
 * rows made are added to batch->minted (on PostgreSQL when the statement
 * has run: before A's commit).
 */
static int mint_in_A(tbx__proto_t *proto, tbx__batch_t *batch,
		     tbx__brow_t *brow)
{
	tbx__row_t *row = &brow->row;
	tbx__mint_item_t few[8], *items = few;
	int err;

	if (!proto->joined || row->msg_cnt == 0 || proto->batch_layout)
		return TBX_OK; /* a row that sends nothing needs no tokens;
				  a batch row's are made with it */
	if (row->msg_cnt > sizeof(few) / sizeof(few[0]) &&
	    !(items = malloc(row->msg_cnt * sizeof(*items))))
		return TBX_ENOMEM;
	tbx__brow_mint(brow, batch->mint_seq, items);
	if (brow->later)
		err = TBX_OK; /* written by rows_write() */
	else
		err = tbx_tokens_mint_joined(proto->tokens, items, row->msg_cnt,
					     batch->mint_seq, &batch->minted);
	if (items != few)
		free(items);
	if (err) {
		tbx__brow_unmint(brow);
		return err;
	}
	tbx__brow_set_state(brow, TBX_BROW_JOINED);
	return TBX_OK;
}

/* <topic><dlq.suffix>, the topic part shortened when the name would pass
 * Kafka's limit (the suffix was checked when it was configured). */
void tbx__dlq_topic_of(const tbx__proto_t *proto, const char *topic,
		       char dlq_topic[TBX_TOPIC_MAX + 1])
{
	if (snprintf(dlq_topic, TBX_TOPIC_MAX + 1, "%s%s", topic,
		     proto->dlq_suffix) >= TBX_TOPIC_MAX + 1)
		snprintf(dlq_topic, TBX_TOPIC_MAX + 1, "%.*s%s",
			 (int)(TBX_TOPIC_MAX - strlen(proto->dlq_suffix)),
			 topic, proto->dlq_suffix);
}

/* Bytes librdkafka counts for a message against message.max.bytes, an
 * upper bound: the record's fixed overhead, key, value, and per header
 * its name, value and two length varints; @p type is the tbx-type, for
 * the tbx-* headers produce_one() adds (tbx-id, tbx-token, tbx-seq,
 * tbx-type, tbx-cause). */
size_t tbx__wire_size(size_t key_len, size_t payload_len,
		      const tbx_header_t *hdrs, size_t cnt, const char *type)
{
	size_t size = 64 + key_len + payload_len;

	for (size_t i = 0; i < cnt; i++)
		size += 10 + strlen(hdrs[i].name) + hdrs[i].len;
	size += 5 * 10 + sizeof("tbx-id") + sizeof("tbx-token") +
		sizeof("tbx-seq") + sizeof("tbx-type") + sizeof("tbx-cause") +
		3 * TBX_UUID_LEN + 20 + strlen(type);
	return size;
}

/*
 * Fits the tbx-dlq-error header (@p hdr, whose value is the reason) so
 * that tokenbox's own headers never make a dead letter too large for the
 * producer's message.max.bytes: at most DLQ_REASON_MAX bytes, less when
 * the message is near the limit, cut on a UTF-8 boundary and marked with
 * "...".  @p buf holds the shortened text.
 */
void tbx__dlq_reason_fit(const tbx__proto_t *proto, tbx_header_t *hdr,
			 size_t others, char *buf, size_t buf_size)
{
	int64_t limit = tbx__producer_max_bytes(*proto->producer);
	int64_t room = limit - (int64_t)others;
	size_t keep = hdr->len;

	if (room < 0)
		room = 0; /* over without it: delivery decides */
	if ((int64_t)keep > room)
		keep = (size_t)room;
	if (keep > DLQ_REASON_MAX)
		keep = DLQ_REASON_MAX;
	if (keep >= buf_size)
		keep = buf_size - 1;
	if (keep == hdr->len)
		return;
	keep = keep > 3 ? keep - 3 : 0;
	while (keep &&
	       (((const unsigned char *)hdr->value)[keep] & 0xc0) == 0x80)
		keep--; /* not inside a UTF-8 sequence */
	memcpy(buf, hdr->value, keep);
	memcpy(buf + keep, "...", 4);
	hdr->value = buf;
	hdr->len = strlen(buf);
}

/* A row of @p msg exists (committed): the work is done, resume its
 * B–E; a row gone meanwhile was finished. */
static int resume_row(tbx__proto_t *proto, tbx__batch_t *batch,
		      struct tbx_msg *msg)
{
	tbx__brow_t *brow;
	size_t idx;
	int err;

	if (!(brow = tbx__batch_row_new(batch, &idx)))
		return TBX_ENOMEM;
	if ((err = tbx_outbox_row_load(proto->store, proto->group, msg->id,
				       &brow->row))) {
		tbx__batch_row_pop(batch);
		if (err != TBX_ENOENT)
			return err;
		/* Gone since it was found: a worker finished it (E, which
		 * takes no message lock, after D consumed the token) on a
		 * server store.  Done. */
		msg->state = TBX_MS_DROPPED;
		msg->trace.dropped = "its outbox row was finished meanwhile";
		proto->stats->duplicates_dropped++;
		return TBX_OK;
	}
	if (brow->row.attempt[0])
		tbx__brow_set_state(brow, TBX_BROW_RECORDED);
	msg->state = TBX_MS_ROW;
	msg->row = idx;
	msg->trace.resumed = 1;
	proto->stats->resumed++;
	return TBX_OK;
}

/*
 * The outbox row's insert found the row there: another worker's A
 * committed it after this A's row check.  The message lock of A makes
 * that impossible between workers that take it (docs/architecture.md,
 * "PostgreSQL: locking without a file lock"); the unique key is the
 * guard for one that does not.  The record's savepoint was rolled back
 * (the handler's effects with it): the committed row is resumed.
 */
static int row_conflict(tbx__proto_t *proto, tbx__batch_t *batch,
			struct tbx_msg *msg)
{
	char detail[TBX_TOPIC_MAX + TBX_MSGID_MAX + 128];
	int err;

	proto->stats->rows_conflicted++;
	snprintf(detail, sizeof(detail),
		 "%s [%" PRId32 "] @%" PRId64
		 ": outbox row %s was committed by another worker while this "
		 "one handled the record",
		 msg->topic, msg->rkm->partition, msg->rkm->offset, msg->id);
	tbx__log(TBX_LOG_WARNING,
		 "%s (a worker that does not lock the message?); the "
		 "handler's effects are rolled back and the committed row is "
		 "resumed",
		 detail);
	/* Seen by `inspect status --check`; commits or rolls back with A. */
	if ((err = tbx_outbox_savepoint(proto->store)))
		return err;
	if ((err = tbx_outbox_alarm_add(proto->store, proto->group,
					"row_conflict", detail))) {
		tbx_outbox_undo(proto->store);
		return err;
	}
	if ((err = tbx_outbox_release(proto->store)))
		return err;
	return resume_row(proto, batch, msg);
}

/*
 * Queues the original record for the dead-letter topic through a row of
 * its own, in a savepoint.  Headers other than tbx-* are kept, and
 * tbx-dlq-* ones say where it came from, why, and which group sent it
 * (several groups of one topic share its dead-letter topic).  One line at
 * @p level says so.
 */
static int dead_letter_at(tbx__proto_t *proto, tbx__batch_t *batch,
			  struct tbx_msg *msg, const char *reason, int attempts,
			  int by_offset, int level)
{
	char dlq_topic[TBX_TOPIC_MAX + 1], num[2][24], att[12];
	char fitted[DLQ_REASON_MAX + 4];
	const char *type = msg->has_type ? msg->type : "tbx.dead-letter";
	rd_kafka_headers_t *in = NULL;
	tbx_header_t *hdrs = NULL;
	size_t hcnt = 0, key_len, payload_len, idx, blob_len = 0;
	const void *key, *payload;
	void *blob = NULL;
	tbx__brow_t *brow;
	uint64_t minted = batch->minted;
	int err, conflict = TBX_OK;

	tbx__dlq_topic_of(proto, msg->topic, dlq_topic);
	if (rd_kafka_message_headers(msg->rkm, &in) !=
	    RD_KAFKA_RESP_ERR_NO_ERROR)
		in = NULL;
	hdrs = calloc((in ? rd_kafka_header_cnt(in) : 0) + 7, sizeof(*hdrs));
	if (!hdrs)
		return TBX_ENOMEM;
	for (size_t i = 0; in; i++) {
		const char *name;
		const void *val;
		size_t len;
		if (rd_kafka_header_get_all(in, i, &name, &val, &len))
			break;
		if (strncmp(name, "tbx-", 4) == 0)
			continue;
		/* Traced: the dead letter continues the record's trace. */
		if (msg->trace.on && (strcmp(name, "traceparent") == 0 ||
				      strcmp(name, "tracestate") == 0))
			continue;
		hdrs[hcnt++] = (tbx_header_t){name, val, len};
	}
	snprintf(num[0], sizeof(num[0]), "%" PRId32, msg->rkm->partition);
	snprintf(num[1], sizeof(num[1]), "%" PRId64, msg->rkm->offset);
	snprintf(att, sizeof(att), "%d", attempts);
	hdrs[hcnt++] = (tbx_header_t){"tbx-dlq-error", reason, strlen(reason)};
	hdrs[hcnt++] =
	    (tbx_header_t){"tbx-dlq-topic", msg->topic, strlen(msg->topic)};
	hdrs[hcnt++] =
	    (tbx_header_t){"tbx-dlq-partition", num[0], strlen(num[0])};
	hdrs[hcnt++] = (tbx_header_t){"tbx-dlq-offset", num[1], strlen(num[1])};
	hdrs[hcnt++] = (tbx_header_t){"tbx-dlq-attempts", att, strlen(att)};
	hdrs[hcnt++] = (tbx_header_t){"tbx-dlq-id", msg->id, strlen(msg->id)};
	hdrs[hcnt++] =
	    (tbx_header_t){"tbx-dlq-group", proto->group, strlen(proto->group)};
	key = tbx_msg_key(msg, &key_len);
	payload = tbx_msg_payload(msg, &payload_len);
	/* The reason is the one header whose size tokenbox does not
	 * control: it must not push the dead letter over the limit. */
	for (size_t i = 0; i < hcnt; i++)
		if (strcmp(hdrs[i].name, "tbx-dlq-error") == 0) {
			size_t len = hdrs[i].len;
			hdrs[i].len = 0;
			size_t others = tbx__wire_size(key_len, payload_len,
						       hdrs, hcnt, type);
			hdrs[i].len = len;
			tbx__dlq_reason_fit(proto, &hdrs[i], others, fitted,
					    sizeof(fitted));
		}
	err = tbx__hdrs_encode(hdrs, hcnt, &blob, &blob_len);
	free(hdrs);
	if (!err && batch->tracer && msg->trace.on) {
		void *traced = NULL;
		size_t traced_len = 0;

		err = tbx__trace_out(batch->tracer, &msg->trace, blob, blob_len,
				     &traced, &traced_len);
		free(blob);
		blob = traced;
		blob_len = traced_len;
	}
	if (err)
		return err;

	if (!(brow = tbx__batch_row_new(batch, &idx))) {
		free(blob);
		return TBX_ENOMEM;
	}
	row_fill(&brow->row, msg, TBX_ROW_DEAD_LETTER);
	brow->set_part =
	    msg->tset_part >= 0 ? msg->tset_part : msg->rkm->partition;
	/* outbox.layout = batch: one of the batch row's records. */
	brow->later = proto->batch_layout;
	brow->row.error = tbx__strdup(reason);
	err = tbx__row_add(&brow->row, dlq_topic, type, key, key_len, payload,
			   payload_len, blob, blob_len);
	free(blob);
	if (!err && !(err = tbx_outbox_savepoint(proto->store))) {
		if (!(err = mint_in_A(proto, batch, brow)) &&
		    (brow->later ||
		     !(err = conflict = tbx_outbox_row_insert(
			   proto->store, proto->group, &brow->row))) &&
		    !(err = tbx_outbox_dead_letter_add(proto->store,
						       proto->group, &brow->row,
						       dlq_topic, attempts)) &&
		    (!by_offset || !(err = ingress_advance(proto, msg))))
			err = tbx_outbox_release(proto->store);
		if (err)
			batch->minted = minted; /* rolled back with them */
		if (err && tbx_outbox_undo(proto->store) == TBX_OK &&
		    conflict == TBX_EEXIST) {
			tbx__batch_row_pop(batch);
			return row_conflict(proto, batch, msg);
		}
	}
	if (err) {
		tbx__batch_row_pop(batch);
		return err;
	}
	tbx__log(level,
		 "%s [%" PRId32 "] @%" PRId64 ": dead-lettered to %s: %s",
		 msg->topic, msg->rkm->partition, msg->rkm->offset, dlq_topic,
		 reason);
	msg->state = TBX_MS_ROW;
	msg->row = idx;
	tbx__trace_note_dead_letter(&msg->trace, reason);
	batch->dead_lettered++;
	return TBX_OK;
}

/* dead_letter_at() with its line at NOTICE: an outcome the handler or the
 * record's form decided, counted and listed, not a fault of the worker. */
static int dead_letter(tbx__proto_t *proto, tbx__batch_t *batch,
		       struct tbx_msg *msg, const char *reason, int attempts,
		       int by_offset)
{
	return dead_letter_at(proto, batch, msg, reason, attempts, by_offset,
			      TBX_LOG_NOTICE);
}

/*
 * A record whose token was minted in another token store (tbx-store), or
 * whose number this store never issued: its token's absence from ours
 * proves nothing, so it is never a duplicate.  Dead-lettered with
 * @p reason (deduplicated by the ingress offset, as malformed records
 * are), or, with token.store.mismatch=stop, TBX_EMISMATCH stops the
 * worker before anything of it is committed.
 */
static int store_mismatch(tbx__proto_t *proto, tbx__batch_t *batch,
			  struct tbx_msg *msg, const char *reason)
{
	int64_t next;
	int err;

	if ((err =
		 tbx_outbox_ingress_get(proto->store, proto->group, msg->topic,
					msg->rkm->partition, &next)))
		return err;
	if (next >= 0 && msg->rkm->offset < next) {
		/* Dead-lettered already: a redelivery. */
		msg->state = TBX_MS_DROPPED;
		msg->trace.dropped = "minted in another token store, and "
				     "dead-lettered already (below the "
				     "ingress offset)";
		proto->stats->duplicates_dropped++;
		return TBX_OK;
	}
	proto->stats->store_mismatches++;
	snprintf(proto->mismatch_detail, sizeof(proto->mismatch_detail),
		 "%s [%" PRId32 "] @%" PRId64 ": %s", msg->topic,
		 msg->rkm->partition, msg->rkm->offset, reason);
	if (proto->mismatch_stop) {
		tbx__log(TBX_LOG_ERR,
			 "%s; stopping the worker (token.store.mismatch=stop)",
			 proto->mismatch_detail);
		snprintf(proto->errstr, proto->errstr_size,
			 "%.440s; stopped (token.store.mismatch=stop)",
			 proto->mismatch_detail);
		return TBX_EMISMATCH;
	}
	/* One line, at ERROR: the dead letter's names the record, where it
	 * went and the reason. */
	if ((err =
		 dead_letter_at(proto, batch, msg, reason, 0, 1, TBX_LOG_ERR)))
		return err;
	/* Seen by `inspect status`; commits or rolls back with A. */
	if (!(err = tbx_outbox_savepoint(proto->store))) {
		if ((err = tbx_outbox_alarm_add(proto->store, proto->group,
						"store_mismatch",
						proto->mismatch_detail)))
			tbx_outbox_undo(proto->store);
		else
			err = tbx_outbox_release(proto->store);
	}
	return err;
}

/*
 * The handler left A's transaction ended (@p gs TBX_GUARD_ENDED) or its
 * record's savepoint gone (TBX_GUARD_BROKEN); A is then rolled back.
 * SQLite: nothing of the batch committed (the commit hook turned a COMMIT
 * into a ROLLBACK, or the handler rolled back): the batch is retried, the
 * record dead-lettered when it was a COMMIT.  PostgreSQL: a COMMIT cannot
 * be refused there; the batch's earlier records and this handler's
 * effects may have committed, this record without its outbox row, so the
 * worker stops (TBX_ESTATE, fatal) rather than run the handler again.  A
 * savepoint released or rolled back past: A rolls back whole, the record
 * is dead-lettered when the batch is retried.
 */
static int handler_broke(tbx__proto_t *proto, struct tbx_msg *msg,
			 tbx__guard_state_t gs)
{
	tbx__part_t *part = msg->part;
	int sqlite = tbx_outbox_native(proto->store, TBX_BACKEND_SQLITE) != 0;
	int err = TBX_ESTORE;

	if (gs == TBX_GUARD_BROKEN) {
		part->broke_next = msg->rkm->offset + 1;
		part->broke_savepoint = 1;
		proto->stats->handler_refused++;
		snprintf(proto->errstr, proto->errstr_size,
			 "%s [%" PRId32 "] @%" PRId64
			 ": the handler released or rolled back tokenbox's "
			 "savepoint of the record (or left a query running) "
			 "on tbx_ctx_pg(); the batch was rolled back and the "
			 "record is dead-lettered",
			 msg->topic, msg->rkm->partition, msg->rkm->offset);
	} else if (sqlite && proto->guard.commit_refused) {
		/* Its handler would do it again: dead-letter it. */
		part->broke_next = msg->rkm->offset + 1;
		part->broke_savepoint = 0;
		snprintf(proto->errstr, proto->errstr_size,
			 "%s [%" PRId32 "] @%" PRId64
			 ": the handler tried to commit the worker's "
			 "transaction; the batch was rolled back and "
			 "the record is dead-lettered",
			 msg->topic, msg->rkm->partition, msg->rkm->offset);
	} else if (sqlite) {
		/* A's transaction is gone, and with it everything of the
		 * batch: nothing committed (the guard refuses COMMIT), so
		 * the batch is simply retried. */
		snprintf(proto->errstr, proto->errstr_size,
			 "%s [%" PRId32 "] @%" PRId64
			 ": the worker's transaction ended while the "
			 "handler ran (a ROLLBACK on tbx_ctx_db(), "
			 "or a store error); the batch is retried",
			 msg->topic, msg->rkm->partition, msg->rkm->offset);
	} else {
		proto->stats->handler_ended_txn++;
		proto->txn_ended = 1; /* an alarm, once A is rolled back */
		snprintf(proto->errstr, proto->errstr_size,
			 "%s [%" PRId32 "] @%" PRId64
			 ": the handler ended the worker's transaction on "
			 "tbx_ctx_pg() (COMMIT or ROLLBACK): the batch's "
			 "earlier records may have committed with their "
			 "outbox rows, and this record's effects without "
			 "its row; the worker stops, fix the handler before "
			 "restarting it (the record would be handled again)",
			 msg->topic, msg->rkm->partition, msg->rkm->offset);
		err = TBX_ESTATE;
	}
	tbx__log(TBX_LOG_ERR, "%s", proto->errstr);
	return err;
}

/* Runs the handler in a savepoint; OK inserts the outbox row with it. */
static int run_handler(tbx__proto_t *proto, tbx__batch_t *batch,
		       struct tbx_msg *msg, int by_offset)
{
	const tbx__route_t *route = tbx_router_lookup(
	    proto->router, msg->topic, msg->has_type ? msg->type : NULL);
	tbx__part_t *part = msg->part;
	tbx__guard_state_t gs;
	tbx_verdict_t verdict;
	tbx__brow_t *brow;
	tbx_ctx_t ctx;
	size_t idx;
	int err, attempts;
	char reason[TBX_TYPE_MAX + TBX_TOPIC_MAX + 64];

	if (!route) {
		snprintf(reason, sizeof(reason),
			 "no handler for type '%s' on topic %s",
			 msg->has_type ? msg->type : "(none)", msg->topic);
		return dead_letter(proto, batch, msg, reason, 0, by_offset);
	}
	if (msg->crashes) {
		/* Its handler killed the worker every time it ran alone:
		 * running it again would only do so again. */
		snprintf(reason, sizeof(reason),
			 "the worker died %d times in a row while handling "
			 "this record alone",
			 msg->crashes);
		return dead_letter(proto, batch, msg, reason, msg->crashes,
				   by_offset);
	}
	if (part->broke_next == msg->rkm->offset + 1) {
		/* Its handler tried to commit A, or broke its savepoint; it
		 * would again. */
		part->broke_next = 0;
		return dead_letter(
		    proto, batch, msg,
		    part->broke_savepoint
			? "the handler released or rolled back tokenbox's "
			  "savepoint of the record (refused: savepoints "
			  "named tbx_* are tokenbox's)"
			: "the handler tried to commit the worker's "
			  "transaction (refused: COMMIT on tbx_ctx_db() is "
			  "not allowed)",
		    msg->attempt, by_offset);
	}
	if (!(brow = tbx__batch_row_new(batch, &idx)))
		return TBX_ENOMEM;
	row_fill(&brow->row, msg, TBX_ROW_HANDLED);
	brow->set_part =
	    msg->tset_part >= 0 ? msg->tset_part : msg->rkm->partition;
	if ((err = tbx_outbox_savepoint(proto->store))) {
		tbx__batch_row_pop(batch);
		return err;
	}
	memset(&ctx, 0, sizeof(ctx));
	ctx.store = proto->store;
	ctx.guard = &proto->guard;
	ctx.msg = msg;
	ctx.row = &brow->row;
	ctx.tracer = batch->tracer;
	/* The handler's time, for a sampled record's span only. */
	uint64_t h0 =
	    msg->trace.on && (msg->trace.ctx.flags & TBX_TRACE_FLAG_SAMPLED)
		? tbx__now_ns()
		: 0;
	tbx__guard_enter(&proto->guard, msg);
	verdict = route->fn(&ctx, msg, route->opaque);
	tbx__guard_leave(&proto->guard);
	if (h0)
		msg->trace.handler_ns = tbx__now_ns() - h0;
	tbx__crashpoint("A.handled");
	gs = tbx__guard_check(&proto->guard);
	if (gs == TBX_GUARD_ENDED || gs == TBX_GUARD_BROKEN) {
		free(ctx.error);
		tbx__batch_row_pop(batch);
		return handler_broke(proto, msg, gs);
	}
	if (gs == TBX_GUARD_ABORTED && verdict == TBX_VERDICT_OK) {
		/* PostgreSQL: a statement failed and aborted the
		 * transaction up to the record's savepoint; nothing of the
		 * handler can commit. */
		tbx__log(TBX_LOG_WARNING,
			 "%s [%" PRId32 "] @%" PRId64
			 ": a statement of the handler failed and aborted "
			 "its work, but it returned OK; retrying the record",
			 msg->topic, msg->rkm->partition, msg->rkm->offset);
		verdict = TBX_VERDICT_RETRY;
	}
	if (verdict == TBX_VERDICT_OK && ctx.send_failed) {
		tbx__log(TBX_LOG_WARNING,
			 "%s @%" PRId64 ": a tbx_ctx_send() "
			 "failed; retrying the record",
			 msg->topic, msg->rkm->offset);
		verdict = TBX_VERDICT_RETRY;
	}
	if (verdict == TBX_VERDICT_OK) {
		uint64_t minted = batch->minted;
		int conflict = TBX_OK;

		/* Where the store writes many rows in one statement, the
		 * row (and its tokens) waits for the end of A. */
		brow->later = proto->batch_layout ||
			      tbx_outbox_batches_rows(proto->store);
		if (!(err = mint_in_A(proto, batch, brow)) &&
		    (brow->later ||
		     !(err = conflict = tbx_outbox_row_insert(
			   proto->store, proto->group, &brow->row))) &&
		    (!by_offset || !(err = ingress_advance(proto, msg))))
			err = tbx_outbox_release(proto->store);
		free(ctx.error);
		if (err) {
			int undo = tbx_outbox_undo(proto->store);
			batch->minted = minted; /* rolled back with them */
			tbx__batch_row_pop(batch);
			if (conflict == TBX_EEXIST && undo == TBX_OK)
				return row_conflict(proto, batch, msg);
			return err;
		}
		msg->state = TBX_MS_ROW;
		msg->row = idx;
		batch->processed++;
		return TBX_OK;
	}

	/* RETRY or REJECT: undo the handler's writes and messages. */
	tbx__batch_row_pop(batch);
	if ((err = tbx_outbox_undo(proto->store))) {
		free(ctx.error);
		return err;
	}
	if (verdict == TBX_VERDICT_RETRY) {
		attempts = msg->attempt;
		proto->stats->retries++;
		if (attempts <= proto->retry_max) {
			free(ctx.error);
			/* Counted in the store with A (tbx__guard_clear). */
			if (part->count_offset != msg->rkm->offset) {
				part->count_offset = msg->rkm->offset;
				part->crashes = 0;
			}
			part->retries = attempts;
			part->batch_blocked = 1;
			part->batch_delay_ms = tbx__backoff_ms(proto, attempts);
			msg->trace.backoff_ms = part->batch_delay_ms;
			msg->state = TBX_MS_BLOCKED;
			return TBX_OK;
		}
		snprintf(reason, sizeof(reason), "retries exhausted: %s",
			 ctx.error ? ctx.error : "handler asked to retry");
	} else {
		attempts = msg->attempt;
		snprintf(reason, sizeof(reason), "%s",
			 ctx.error ? ctx.error
				   : (verdict == TBX_VERDICT_REJECT
					  ? "rejected by the handler"
					  : "handler returned an invalid "
					    "verdict"));
	}
	free(ctx.error);
	return dead_letter(proto, batch, msg, reason, attempts, by_offset);
}

/* Untokened and malformed records: by the ingress offset, dead-lettered
 * or (ingress.untokened=offsets) handled. */
static int by_ingress(tbx__proto_t *proto, tbx__batch_t *batch,
		      struct tbx_msg *msg)
{
	int64_t next;
	int err;

	proto->stats->untokened++;
	if ((err =
		 tbx_outbox_ingress_get(proto->store, proto->group, msg->topic,
					msg->rkm->partition, &next)))
		return err;
	if (next >= 0 && msg->rkm->offset < next) {
		msg->state = TBX_MS_DROPPED;
		msg->trace.dropped = "below the ingress offset";
		proto->stats->duplicates_dropped++;
		return TBX_OK;
	}
	if (msg->malformed)
		return dead_letter(proto, batch, msg, msg->malformed, 0, 1);
	if (!proto->untokened_offsets)
		return dead_letter(proto, batch, msg,
				   "record without a token for this "
				   "group (ingress.untokened=reject)",
				   0, 1);
	return run_handler(proto, batch, msg, 1);
}

/* A for one record, inside the batch's S transaction. */
int tbx__process_one(tbx__proto_t *proto, tbx__batch_t *batch,
		     struct tbx_msg *msg)
{
	char attempt[TBX_UUID_LEN + 1];
	char alive[TBX_UUID_LEN + 16]; /* the token, or "<set>:<index>" */
	size_t len;
	size_t idx;
	int found, err, exists;

	/* 1. An outbox row: the work is done, resume its B–E.  A copy in the
	 * same batch as its original joins the original's row: looked up in
	 * the batch first, since the batch's row check (prefetch()) was made
	 * before the original had its row. */
	if (tbx__batch_row_find(batch, msg->id, &idx)) {
		msg->state = TBX_MS_ROW;
		msg->row = idx;
		msg->trace.dropped = "a copy of a record earlier in the batch";
		proto->stats->duplicates_dropped++;
		return TBX_OK;
	}
	if (msg->pre_row >= 0)
		found = msg->pre_row;
	else if ((err = tbx_outbox_row_find(proto->store, proto->group, msg->id,
					    &found, attempt)))
		return err;
	if (found)
		return resume_row(proto, batch, msg);
	/* outbox.layout = batch: a pending batch row covering the record
	 * (memory, or tbx_cover_msg for the per-message format). */
	if (proto->batch_layout) {
		int done;

		if ((err = tbx__ob_resume(proto, batch, msg, &done)) || done)
			return err;
	}

	/* A token minted in another token store was never ours either,
	 * whatever its number. */
	if (!msg->malformed && !msg->untokened && msg->store[0] &&
	    strcmp(msg->store, proto->store_id) != 0) {
		char reason[256];

		snprintf(reason, sizeof(reason),
			 "token store mismatch: the record was minted in token "
			 "store %s, this group's token store is %s (check "
			 "tokens.path)",
			 msg->store, proto->store_id);
		return store_mismatch(proto, batch, msg, reason);
	}

	/* A token minted before this group subscribed was never ours. */
	if (!msg->untokened && msg->seq < msg->part->since)
		msg->untokened = 1;

	if (msg->malformed || msg->untokened)
		return by_ingress(proto, batch, msg);

	/* 2. Under S's write lock: no row and no token means done.  A
	 * batched record's token is its bit of the set. */
	if (msg->fmt == TBX_WF_SET) {
		tbx__bit_ref_t ref = {msg->tset, msg->tset_index};
		tbx__bit_state_t st;

		if (msg->pre_bit >= 0)
			st = (tbx__bit_state_t)msg->pre_bit;
		else if ((err = tbx_tokens_sets_test(
			      proto->tokens, proto->group, &ref, 1, &st, NULL)))
			return err;
		if (st == TBX_BIT_RANGE) {
			/* Its set exists and has fewer bits: no sender
			 * wrote this, and no bit of ours is its token. */
			msg->malformed = TBX_TBIT_RANGE;
			msg->untokened = 1;
			return by_ingress(proto, batch, msg);
		}
		if (st == TBX_BIT_CLEAR) {
			/* The set's row is here, minted in this store:
			 * the bit was consumed, a proven duplicate. */
			msg->state = TBX_MS_DROPPED;
			msg->trace.dropped = "its token (a set's bit) was "
					     "consumed";
			proto->stats->duplicates_dropped++;
			return TBX_OK;
		}
		/* "<set>:<index>", per record: no snprintf (base/str.h). */
		len = strnlen(msg->tset, sizeof(alive) - 2);
		memcpy(alive, msg->tset, len);
		alive[len++] = ':';
		if (tbx__fmt_u64(alive + len, sizeof(alive) - len,
				 msg->tset_index) < 0)
			alive[len] = '\0';
		exists = st == TBX_BIT_SET;
	} else {
		if (msg->pre_token >= 0)
			exists = msg->pre_token;
		else if ((err = tbx_tokens_exists(proto->tokens, msg->token,
						  proto->group, &exists)))
			return err;
		tbx__strlcpy(alive, msg->token, sizeof(alive));
	}
	/* After an assignment the records the previous owner finished but
	 * did not commit come again, all dropped: that prefix ends with the
	 * partition's first record that has work.  Drops are judged by
	 * their share after it, and by the prefix's length. */
	if (msg->part->settled)
		proto->dup_window_seen++;
	if (!exists) {
		int issued;

		/* A number this store never issued: the token was minted in
		 * a history it does not have (restored from an older backup,
		 * or another store for a sender without tbx-store).  The
		 * store's ranges say which numbers its history issued; a
		 * restored store never issues its lost numbers again
		 * (tokens/tokens.h, seq_issued). */
		if ((err = tbx_tokens_seq_issued(proto->tokens, msg->seq,
						 &issued)))
			return err;
		if (!issued) {
			char reason[256];

			if (msg->part->settled)
				proto->dup_window_seen--;
			snprintf(reason, sizeof(reason),
				 "token store mismatch: the record's tbx-seq "
				 "%" PRId64 " was never issued by this group's "
				 "token store %s: restored from an older "
				 "backup, or another store",
				 msg->seq, proto->store_id);
			return store_mismatch(proto, batch, msg, reason);
		}
		msg->state = TBX_MS_DROPPED;
		msg->trace.dropped = "its token was consumed";
		proto->stats->duplicates_dropped++;
		/* A token this process saw alive was consumed: a proven
		 * duplicate (a redelivery, a re-send, a copy), whatever
		 * their share.  Only the others may mean a store that never
		 * had the token. */
		if (tbx__alive_seen(proto->store_id, proto->group, alive)) {
			if (msg->part->settled)
				proto->dup_window_seen--;
			return TBX_OK;
		}
		if (msg->part->settled)
			proto->dup_window_dropped++;
		else if (++msg->part->prefix_drops ==
			 (uint64_t)DUP_PREFIX_BATCHES *
			     (uint64_t)proto->batch_max)
			snprintf(proto->dup_prefix, sizeof(proto->dup_prefix),
				 "%s [%" PRId32 "]: %" PRIu64, msg->topic,
				 msg->rkm->partition, msg->part->prefix_drops);
		return TBX_OK;
	}
	msg->part->settled = 1;
	tbx__alive_note(proto->store_id, proto->group, alive);
	/* 3. The handler. */
	return run_handler(proto, batch, msg, 0);
}
