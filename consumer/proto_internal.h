/*
 * The protocol's functions shared between its files (protocol.c and
 * the consumer/proto_*.c of each phase), internal to tokenbox: not
 * in include/tokenbox/tokenbox.map, so never exported.
 *
 * @locality the worker's thread.
 */
#ifndef TBX_CONSUMER_PROTO_INTERNAL_H
#define TBX_CONSUMER_PROTO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "consumer/protocol.h"
#include "outbox/batchrow.h"

/* The most of a dead letter's tbx-dlq-error header. */
#define DLQ_REASON_MAX 1024

/* protocol.c */
int tbx__alarm_commit(tbx__proto_t *proto, const char *name,
		      const char *detail);
void tbx__stray_note(tbx__proto_t *proto, const struct tbx_msg *msg,
		     int32_t set_part);

/* proto_record.c */
int64_t tbx__backoff_ms(tbx__proto_t *proto, int attempt);
void tbx__dlq_topic_of(const tbx__proto_t *proto, const char *topic,
		       char dlq_topic[TBX_TOPIC_MAX + 1]);
size_t tbx__wire_size(size_t key_len, size_t payload_len,
		      const tbx_header_t *hdrs, size_t cnt, const char *type);
void tbx__dlq_reason_fit(const tbx__proto_t *proto, tbx_header_t *hdr,
			 size_t others, char *buf, size_t buf_size);
int tbx__process_one(tbx__proto_t *proto, tbx__batch_t *batch,
		     struct tbx_msg *msg);

/* proto_guard.c */
int tbx__first_of_part(const tbx__batch_t *batch, size_t i);
void tbx__isolation_count(const tbx__batch_t *batch);
int tbx__guard_clear(tbx__proto_t *proto, tbx__batch_t *batch);
void tbx__guard_release(tbx__proto_t *proto, tbx__batch_t *batch);

/* proto_process.c */
int tbx__phase_process(tbx__proto_t *proto, tbx__batch_t *batch);

/* proto_finish.c */
int tbx__e_statements(tbx__proto_t *proto, uint64_t *deleted,
		      uint64_t *cleared);
void tbx__e_committed(tbx__proto_t *proto, uint64_t consumed);
tbx__e_offset_t *tbx__e_offset(tbx__proto_t *proto, const tbx__part_t *part,
			       int create);
int tbx__e_waits(tbx__proto_t *proto, const tbx__part_t *part);
int tbx__phase_consume(tbx__proto_t *proto, tbx__batch_t *batch);
int tbx__phase_finish(tbx__proto_t *proto, tbx__batch_t *batch, int defer);

/* proto_tokens.c */
int tbx__phase_tokens(tbx__proto_t *proto, tbx__batch_t *batch);

/* proto_dispatch.c */
int tbx__phase_dispatch(tbx__proto_t *proto, tbx__batch_t *batch);

/* proto_obatch.c, proto_obatch_write.c (tbx__ob_write(),
 * tbx__ob_committed(), tbx__ob_written_free()) and proto_obatch_tokens.c
 * (tbx__ob_tokens()): outbox.layout = batch */
/** A's gen of one (topic, partition), as read under its lock or as its
 *  bump made it. */
typedef struct tbx__ob_gen {
	char topic[TBX_TOPIC_MAX + 1];
	int32_t part;
	int64_t gen; /**< -1: not read */
} tbx__ob_gen_t;
/** The batch row A inserted, kept until its commit for the memory. */
typedef struct tbx__ob_written {
	tbx__obatch_t row; /**< row_id "": none */
	tbx__buf_t cover, wire;
	tbx__cover_t dec; /**< cover, decoded from A's entries: the row's
			     cover_dec, then the resume memory's */
	void *msgs;
	size_t msgs_len;
	tbx__ob_gen_t *gens; /**< the partitions bumped, and their new gen */
	size_t gen_cnt;
} tbx__ob_written_t;
int tbx__ob_new(tbx__batch_t *batch, size_t *ob);
int tbx__ob_prepare(tbx__proto_t *proto, tbx__batch_t *batch);
/* Is @p msg ordered by its set's partition lock (a set bit), so that A
 * needs no lock of its id? */
int tbx__ob_set_locked(const struct tbx_msg *msg);
int tbx__ob_resume(tbx__proto_t *proto, tbx__batch_t *batch,
		   struct tbx_msg *msg, int *done);
int tbx__ob_write(tbx__proto_t *proto, tbx__batch_t *batch,
		  tbx__ob_written_t *out);
void tbx__ob_written_free(tbx__ob_written_t *w);
void tbx__ob_committed(tbx__proto_t *proto, tbx__ob_written_t *w);
int tbx__ob_tokens(tbx__proto_t *proto, tbx__batch_t *batch);
void tbx__ob_mark_delivered(tbx__batch_t *batch);
int tbx__ob_finishable(const tbx__batch_t *batch, const tbx__brow_t *brow);
/** Whether a pass (the recovery pass, inspect redispatch) takes batch
 *  row @p r (its cover decoded, @p c). */
typedef int (*tbx__ob_pick_fn)(void *arg, const tbx__obatch_t *r,
			       const tbx__cover_t *c);
/** Loads at most @p limit of the group's batch rows @p pick takes into
 *  @p batch's rows; *cnt the rows loaded. */
int tbx__ob_load_picked(tbx__proto_t *proto, tbx__batch_t *batch,
			tbx__ob_pick_fn pick, void *arg, size_t limit,
			size_t *cnt);
/** The batch rows of @p batch whose every record is done (F). */
size_t tbx__ob_done(const tbx__batch_t *batch);

/* proto_commit.c */
int tbx__row_done(const tbx__brow_t *brow);
void tbx__phase_commit(tbx__proto_t *proto, tbx__batch_t *batch);

#endif
