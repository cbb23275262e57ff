/*
 * The resume check's memory (docs/batched-tokens.md, "The resume
 * check"): the group's pending batch rows a worker knows of, and per
 * partition the gen it last read or wrote (mgen), so that A can tell
 * whether a pending row covers a record without a read of the store per
 * record.
 *
 * Invariants:
 *   - A partition without an mgen (never loaded, or dropped) answers
 *     TBX__RESUME_RELOAD for every record: memory is trusted for a
 *     partition only while the gen A reads under the partition's lock
 *     equals its mgen.
 *   - Memory is never too small for a partition it trusts: it holds
 *     every row covering the partition that was in the store when mgen
 *     was read (a load reads the gens, then the rows), plus the rows
 *     added since.  It may be too large (a row another worker's E
 *     deleted stays until the next load): A finds such a row gone when
 *     it loads it.
 *   - tbx__resume_mem_drop() (a rebalance, revoke or assign) and a load
 *     that fails forget everything, rows and mgens: nothing is trusted
 *     after either until the next load.
 *
 * Who calls what (A and E, with outbox.layout = batch: proto_obatch.c and
 * proto_obatch_write.c):
 * tbx__resume_mem_sync_gens() in A's transaction with the gens A read
 * while taking the batch's partitions' locks (the store's gens_lock);
 * tbx__resume_mem_check() per record; after A's commit tbx__resume_mem_add()
 * for the row it inserted and tbx__resume_mem_bumped() with the gens its bump
 * returned; after E's commit tbx__resume_mem_forget().  Not thread-safe: the
 * protocol's thread owns it.
 */
#ifndef TBX_CONSUMER_RESUME_MEM_H
#define TBX_CONSUMER_RESUME_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "base/ids.h"
#include "outbox/batchrow.h"
#include "outbox/outbox.h"

typedef struct tbx__resume_mem tbx__resume_mem_t;

/** What memory says of a record. */
typedef enum tbx__resume_ans {
	TBX__RESUME_NOT_COVERED = 0, /**< no pending row covers it */
	TBX__RESUME_COVERED = 1,     /**< pending row *row covers it */
	TBX__RESUME_RELOAD = 2	     /**< memory of its partition is stale
					or unknown: load, then ask again */
} tbx__resume_ans_t;

/** A record as the check sees it (its strings borrowed for the call). */
typedef struct tbx__resume_key {
	const char *topic;
	int32_t partition; /**< the partition it arrived on */
	int64_t offset;
	const char *set_id; /**< tbx-tset; NULL: no set bit (a per-message
			       token, untokened or malformed) */
	uint16_t index;	    /**< tbx-tbit's index, with set_id */
	int32_t set_part;   /**< tbx-tbit's partition, with set_id; not
			       partition for a stray record */
} tbx__resume_key_t;

/** A pending row held in memory; valid until the memory next changes
 *  (sync that loads, add, forget, drop). */
typedef struct tbx__resume_row {
	char row_id[TBX_UUID_LEN + 1];
	char attempt[TBX_UUID_LEN + 1]; /**< "" until B */
	int64_t mint_seq;
	tbx__cover_t cover; /**< decoded, indexed (outbox/batchrow.h) */
} tbx__resume_row_t;

/** Counters, for A to report. */
typedef struct tbx__resume_stats {
	uint64_t resume_reloads; /**< loads of the group's rows */
	uint64_t load_failures;	 /**< loads that failed (memory dropped) */
	uint64_t drops;		 /**< rebalances that dropped memory */
	uint64_t rows;		 /**< rows held now */
	uint64_t parts;		 /**< partitions with an mgen now */
} tbx__resume_stats_t;

/** An empty memory of group @p grp (copied).  *out owned by the
 *  caller.  @returns TBX_OK, TBX_EINVAL or TBX_ENOMEM. */
int tbx__resume_mem_new(const char *grp, tbx__resume_mem_t **out);

/** Frees @p m; NULL is a no-op. */
void tbx__resume_mem_destroy(tbx__resume_mem_t *m);

/**
 * A's first step for the batch's partitions @p parts (@p n) of
 * @p topic: reads their gen from @p store (one gens_get) into @p gens
 * (may be NULL), and when any differs from its mgen or has none, loads
 * memory again: every row of the group (one obatch_load) covering a
 * partition memory keeps an mgen for or these, replacing what memory
 * held, and the mgens of @p parts set to the gens read.  Inside the
 * transaction that holds the partitions' locks.  *reloaded (may be
 * NULL): 1 when it loaded.
 * @returns TBX_OK, or the store's error (TBX_ECORRUPT for a row that
 * does not decode, TBX_ESCHEMA for a store without batch rows), after
 * which memory is dropped whole, counted and logged at WARN.
 */
int tbx__resume_mem_sync(tbx__resume_mem_t *m, tbx_outbox_t *store,
			 const char *topic, const int32_t *parts, size_t n,
			 int64_t *gens, int *reloaded);

/**
 * tbx__resume_mem_sync() with the gens of @p parts already read under
 * their locks (@p gens, e.g. by the store's gens_lock): no read of its
 * own, the same comparison and load.
 */
int tbx__resume_mem_sync_gens(tbx__resume_mem_t *m, tbx_outbox_t *store,
			      const char *topic, const int32_t *parts, size_t n,
			      const int64_t *gens, int *reloaded);

/**
 * Which pending row covers @p key: by its set bit when it has one,
 * else (or not found so) by (topic, partition, offset).  @p gen is the
 * gen of the partition that orders the record (tbx__resume_key_part())
 * as A read it under that partition's lock: RELOAD when it is not the
 * partition's mgen, or the partition has none.  *row (may be NULL)
 * and *entry (may be NULL; the cover entry) are set for COVERED.
 */
tbx__resume_ans_t tbx__resume_mem_check(const tbx__resume_mem_t *m,
					const tbx__resume_key_t *key,
					int64_t gen,
					const tbx__resume_row_t **row,
					uint32_t *entry);

/** The partition whose gen orders @p key: the set's partition for a
 *  record with a set bit (a stray one's differs from where it arrived),
 *  else the partition it arrived on. */
int32_t tbx__resume_key_part(const tbx__resume_key_t *key);

/**
 * After A's commit: row @p row (its cover copied and decoded) enters
 * memory.  A row memory holds already is replaced.
 * @returns TBX_OK, TBX_ECORRUPT (a cover that does not decode; memory
 * unchanged) or TBX_ENOMEM (memory dropped whole).
 */
int tbx__resume_mem_add(tbx__resume_mem_t *m, const tbx__obatch_t *row);

/**
 * tbx__resume_mem_add() of a row whose cover A has decoded already,
 * @p cover (tbx__cover_from() of the entries it encoded the row's cover
 * from): memory takes it over (*cover is left empty, also after a
 * failure) instead of decoding the column again.
 * @returns TBX_OK, TBX_EINVAL (an empty cover) or TBX_ENOMEM (memory
 * dropped whole).
 */
int tbx__resume_mem_add_cover(tbx__resume_mem_t *m, const tbx__obatch_t *row,
			      tbx__cover_t *cover);

/**
 * After A's commit: its bump made the gens of @p parts (@p n) of
 * @p topic @p gens.  A partition whose mgen was gens[i] - 1 (A read it
 * under the lock it bumped under) gets mgen gens[i]; any other
 * partition loses its mgen (its next check answers RELOAD).
 */
void tbx__resume_mem_bumped(tbx__resume_mem_t *m, const char *topic,
			    const int32_t *parts, size_t n,
			    const int64_t *gens);

/** After E's commit: rows @p ids (@p n) leave memory (ids it does not
 *  hold are ignored). */
void tbx__resume_mem_forget(tbx__resume_mem_t *m, const char *const *ids,
			    size_t n);

/** A rebalance (revoke or assign): every row and mgen forgotten. */
void tbx__resume_mem_drop(tbx__resume_mem_t *m);

/** The counters, with the rows and partitions held now. */
void tbx__resume_mem_stats(const tbx__resume_mem_t *m,
			   tbx__resume_stats_t *stats);

#endif
