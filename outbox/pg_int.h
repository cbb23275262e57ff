/*
 * The PostgreSQL backend of the service store, shared by its two files:
 * outbox/pg.c (what the protocol calls) and outbox/pg_read.c (the read
 * side and repairs of `tokenbox inspect`).  Internal to them.
 */
#ifndef TBX_OUTBOX_PG_INT_H
#define TBX_OUTBOX_PG_INT_H

#include "base/ids.h"
#include "outbox/outbox.h"
#include "store/pg.h"

/** The schema version of the service store's PostgreSQL tables. */
#define TBX_PG_OUTBOX_VERSION 6

typedef struct pg_store {
	tbx_outbox_t base; /* first: the ops see a tbx_outbox_t */
	tbx__pg_t *pg;
	char schema[TBX_PG_IDENT_MAX + 1];
	tbx__pg_stmts_t stmts; /* pg.c's statements */
	tbx__pg_stmts_t reads; /* pg_read.c's */
	tbx__pg_stmts_t batch; /* pg_batch.c's */
	int relaxed;	       /* relaxed(1): SET LOCAL after each BEGIN */
	int defer_writes;      /* defer_writes(1): exec() may defer writes */
	int version;	       /* tbx_schema_info.version */
	int reading;	       /* read_begin() opened the transaction */
} pg_store_t;

/** Sets up pg_read.c's statements on an opened store. */
int tbx__outbox_pg_read_init(pg_store_t *store);
/** Sets up pg_batch.c's statements on an opened store. */
int tbx__outbox_pg_batch_init(pg_store_t *store);

/* pg_batch.c: the batch rows (tbx_outbox_ops_t). */
int tbx__pgo_obatch_insert(tbx_outbox_t *base, const char *grp,
			   const tbx__obatch_t *row);
int tbx__pgo_obatch_set_attempt(tbx_outbox_t *base, const char *grp,
				const char *row_id, const char *attempt,
				int64_t mint_seq, const void *msgs,
				size_t msgs_len, const void *wire,
				size_t wire_len, int *won);
int tbx__pgo_obatch_delete(tbx_outbox_t *base, const char *grp,
			   const char *const *ids, size_t n, int64_t *deleted);
int tbx__pgo_obatch_load(tbx_outbox_t *base, const char *grp, tbx__obatch_fn fn,
			 void *opaque);
int tbx__pgo_obatch_dispatch_failed(tbx_outbox_t *base, const char *grp,
				    const char *row_id, int *failures);
int tbx__pgo_obatch_mark_stuck(tbx_outbox_t *base, const char *grp,
			       const char *row_id, int64_t now_ms);
int tbx__pgo_cover_msg_find(tbx_outbox_t *base, const char *grp,
			    const char *const *ids, size_t n,
			    char (*row_ids)[TBX_UUID_LEN + 1]);
/** The parameters of a statement on @p n partitions of @p grp: $1 the
 *  group, $2 the text[] of @p topics, $3 the int8[] of @p parts (A's
 *  Q_GENS_ENSURE and Q_GENS_LOCK, G's Q_INFLIGHT_GET_MANY).  On a
 *  failure @p p is freed. */
int tbx__pgo_parts_params(tbx__pg_params_t *p, const char *grp,
			  const char *const *topics, const int32_t *parts,
			  size_t n);
int tbx__pgo_gens_lock(tbx_outbox_t *base, const char *grp,
		       const char *const *topics, const int32_t *parts,
		       size_t n, int64_t *gens);
int tbx__pgo_gens_get(tbx_outbox_t *base, const char *grp, const char *topic,
		      const int32_t *parts, size_t n, int64_t *gens);
int tbx__pgo_gens_bump(tbx_outbox_t *base, const char *grp, const char *topic,
		       const int32_t *parts, size_t n, int64_t *gens);

/* pg_read.c: the read side (tbx_outbox_ops_t). */
int tbx__pgo_read_begin(tbx_outbox_t *base);
void tbx__pgo_read_end(tbx_outbox_t *base);
int tbx__pgo_schema(tbx_outbox_t *base, int *version);
const char *tbx__pgo_errmsg(tbx_outbox_t *base);
int tbx__pgo_groups(tbx_outbox_t *base, tbx__str_fn fn, void *opaque);
int tbx__pgo_rows_summary(tbx_outbox_t *base, int64_t created_max,
			  tbx__grp_sum_fn fn, void *opaque);
int tbx__pgo_rows_list(tbx_outbox_t *base, const tbx__filter_t *f,
		       int64_t *total, tbx__row_fn fn, void *opaque);
int tbx__pgo_row_match(tbx_outbox_t *base, const char *id,
		       char out[TBX_MSGID_MAX + 1], int *matches);
int tbx__pgo_row_groups(tbx_outbox_t *base, const char *msg_id,
			const tbx__filter_t *f, tbx__str_fn fn, void *opaque);
int tbx__pgo_token_uses(tbx_outbox_t *base, const char *token, int incoming,
			tbx__token_use_fn fn, void *opaque);
int tbx__pgo_dead_letters_summary(tbx_outbox_t *base, tbx__grp_sum_fn fn,
				  void *opaque);
int tbx__pgo_dead_letters_list(tbx_outbox_t *base, const tbx__filter_t *f,
			       int64_t *total, tbx__dl_fn fn, void *opaque);
int tbx__pgo_dead_letters_find(tbx_outbox_t *base, const char *id,
			       int by_number, const tbx__filter_t *f,
			       tbx__dl_fn fn, void *opaque);
int tbx__pgo_dead_letter_recorded(tbx_outbox_t *base, const char *grp,
				  const char *in_topic, int64_t partition,
				  int64_t offset, const char *dlq_topic,
				  int *found);
int tbx__pgo_dead_letter_replayed(tbx_outbox_t *base, const char *grp,
				  const char *in_topic, int64_t partition,
				  int64_t offset, const char *dlq_topic,
				  int64_t ms);
int tbx__pgo_dead_letter_groups(tbx_outbox_t *base, const char *dlq_topic,
				tbx__str_fn fn, void *opaque);
int tbx__pgo_undelivered_count(tbx_outbox_t *base, int64_t *n);
int tbx__pgo_undelivered_list(tbx_outbox_t *base, const tbx__filter_t *f,
			      int64_t *total, tbx__ud_fn fn, void *opaque);
int tbx__pgo_undelivered_get(tbx_outbox_t *base, int64_t id,
			     const tbx__filter_t *f, tbx__ud_fn fn,
			     void *opaque);
int tbx__pgo_undelivered_delete(tbx_outbox_t *base, int64_t id);
int tbx__pgo_alarms(tbx_outbox_t *base, tbx__alarm_fn fn, void *opaque);
int tbx__pgo_bindings(tbx_outbox_t *base, tbx__binding_fn fn, void *opaque);
int tbx__pgo_ingress_list(tbx_outbox_t *base, tbx__ingress_fn fn, void *opaque);
int tbx__pgo_count_older(tbx_outbox_t *base, const char *grp,
			 int64_t created_max, int64_t *rows);
int tbx__pgo_obatch_list(tbx_outbox_t *base, const tbx__filter_t *f,
			 int64_t *total, tbx__obatch_row_fn fn, void *opaque);

#endif
