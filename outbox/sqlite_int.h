/*
 * The SQLite backend of the service store, shared by its two files:
 * outbox/sqlite.c (what the protocol calls) and outbox/sqlite_read.c
 * (the read side and repairs of `tokenbox inspect`).  Internal to them.
 */
#ifndef TBX_OUTBOX_SQLITE_INT_H
#define TBX_OUTBOX_SQLITE_INT_H

#include <sqlite3.h>

#include "base/ids.h"
#include "outbox/outbox.h"
#include "store/stmt.h"

/** Statement slots of each file. */
#define SQ_STMTS       40
#define SQ_READ_STMTS  32
#define SQ_BATCH_STMTS 12

typedef struct sq_store {
	tbx_outbox_t base; /* first: the ops see a tbx_outbox_t */
	sqlite3 *db;
	int sync_full;	    /* the configured level: synchronous=FULL */
	char exec_err[256]; /* why the last exec() failed, until the next
			       exec() or begin(); "" when it did not */
	tbx__stmts_t stmts; /* sqlite.c's statements (store/stmt.h) */
	sqlite3_stmt *slots[SQ_STMTS];
	tbx__stmts_t reads; /* sqlite_read.c's */
	sqlite3_stmt *read_slots[SQ_READ_STMTS];
	tbx__stmts_t batch; /* sqlite_batch.c's */
	sqlite3_stmt *batch_slots[SQ_BATCH_STMTS];
} sq_store_t;

/** Sets up sqlite_read.c's statements on an opened store. */
void tbx__outbox_sqlite_read_init(sq_store_t *store);
/** Sets up sqlite_batch.c's statements on an opened store. */
void tbx__outbox_sqlite_batch_init(sq_store_t *store);

/* sqlite_batch.c: the batch rows (tbx_outbox_ops_t). */
int tbx__sq_obatch_insert(tbx_outbox_t *base, const char *grp,
			  const tbx__obatch_t *row);
int tbx__sq_obatch_set_attempt(tbx_outbox_t *base, const char *grp,
			       const char *row_id, const char *attempt,
			       int64_t mint_seq, const void *msgs,
			       size_t msgs_len, const void *wire,
			       size_t wire_len, int *won);
int tbx__sq_obatch_delete(tbx_outbox_t *base, const char *grp,
			  const char *const *ids, size_t n, int64_t *deleted);
int tbx__sq_obatch_dispatch_failed(tbx_outbox_t *base, const char *grp,
				   const char *row_id, int *failures);
int tbx__sq_obatch_mark_stuck(tbx_outbox_t *base, const char *grp,
			      const char *row_id, int64_t now_ms);
int tbx__sq_obatch_load(tbx_outbox_t *base, const char *grp, tbx__obatch_fn fn,
			void *opaque);
int tbx__sq_cover_msg_find(tbx_outbox_t *base, const char *grp,
			   const char *const *ids, size_t n,
			   char (*row_ids)[TBX_UUID_LEN + 1]);
int tbx__sq_gens_lock(tbx_outbox_t *base, const char *grp,
		      const char *const *topics, const int32_t *parts, size_t n,
		      int64_t *gens);
int tbx__sq_gens_get(tbx_outbox_t *base, const char *grp, const char *topic,
		     const int32_t *parts, size_t n, int64_t *gens);
int tbx__sq_gens_bump(tbx_outbox_t *base, const char *grp, const char *topic,
		      const int32_t *parts, size_t n, int64_t *gens);

/* sqlite_read.c: the read side (tbx_outbox_ops_t). */
int tbx__sq_read_begin(tbx_outbox_t *base);
void tbx__sq_read_end(tbx_outbox_t *base);
int tbx__sq_schema(tbx_outbox_t *base, int *version);
const char *tbx__sq_errmsg(tbx_outbox_t *base);
int tbx__sq_groups(tbx_outbox_t *base, tbx__str_fn fn, void *opaque);
int tbx__sq_rows_summary(tbx_outbox_t *base, int64_t created_max,
			 tbx__grp_sum_fn fn, void *opaque);
int tbx__sq_rows_list(tbx_outbox_t *base, const tbx__filter_t *f,
		      int64_t *total, tbx__row_fn fn, void *opaque);
int tbx__sq_row_match(tbx_outbox_t *base, const char *id,
		      char out[TBX_MSGID_MAX + 1], int *matches);
int tbx__sq_row_groups(tbx_outbox_t *base, const char *msg_id,
		       const tbx__filter_t *f, tbx__str_fn fn, void *opaque);
int tbx__sq_token_uses(tbx_outbox_t *base, const char *token, int incoming,
		       tbx__token_use_fn fn, void *opaque);
int tbx__sq_dead_letters_summary(tbx_outbox_t *base, tbx__grp_sum_fn fn,
				 void *opaque);
int tbx__sq_dead_letters_list(tbx_outbox_t *base, const tbx__filter_t *f,
			      int64_t *total, tbx__dl_fn fn, void *opaque);
int tbx__sq_dead_letters_find(tbx_outbox_t *base, const char *id, int by_number,
			      const tbx__filter_t *f, tbx__dl_fn fn,
			      void *opaque);
int tbx__sq_dead_letter_recorded(tbx_outbox_t *base, const char *grp,
				 const char *in_topic, int64_t partition,
				 int64_t offset, const char *dlq_topic,
				 int *found);
int tbx__sq_dead_letter_replayed(tbx_outbox_t *base, const char *grp,
				 const char *in_topic, int64_t partition,
				 int64_t offset, const char *dlq_topic,
				 int64_t ms);
int tbx__sq_dead_letter_groups(tbx_outbox_t *base, const char *dlq_topic,
			       tbx__str_fn fn, void *opaque);
int tbx__sq_undelivered_count(tbx_outbox_t *base, int64_t *n);
int tbx__sq_undelivered_list(tbx_outbox_t *base, const tbx__filter_t *f,
			     int64_t *total, tbx__ud_fn fn, void *opaque);
int tbx__sq_undelivered_get(tbx_outbox_t *base, int64_t id,
			    const tbx__filter_t *f, tbx__ud_fn fn,
			    void *opaque);
int tbx__sq_undelivered_delete(tbx_outbox_t *base, int64_t id);
int tbx__sq_alarms(tbx_outbox_t *base, tbx__alarm_fn fn, void *opaque);
int tbx__sq_bindings(tbx_outbox_t *base, tbx__binding_fn fn, void *opaque);
int tbx__sq_ingress_list(tbx_outbox_t *base, tbx__ingress_fn fn, void *opaque);
int tbx__sq_count_older(tbx_outbox_t *base, const char *grp,
			int64_t created_max, int64_t *rows);
int tbx__sq_obatch_list(tbx_outbox_t *base, const tbx__filter_t *f,
			int64_t *total, tbx__obatch_row_fn fn, void *opaque);

#endif
