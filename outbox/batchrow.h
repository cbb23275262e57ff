/*
 * The encodings of a batch row's own columns (tbx_obatch, beside the
 * messages in store/msgs.h's encoding; docs/batched-tokens.md, "The
 * outbox row by the batch"), and the index of a decoded cover that the
 * resume check looks records up in.  All integers big endian; strings
 * [u32 len][bytes].
 *
 *   wire:  u8 format (1), u32 count,
 *          count × { i32 partition, u16 index, u32 cover }
 *   cover: u8 format (1), u32 count,
 *          count × { u8 kind, str topic, i32 partition, i64 offset,
 *                    str msg_id, u8 ref, ref… }
 *          ref 0: nothing; ref 1: str token; ref 2: str set_id,
 *          u16 index; ref 3: str set_id, u16 index, i32 set_partition
 *          (a stray record: set_partition differs from partition).
 *
 * Both are read back from a file: the decoders trust nothing in them
 * and answer TBX_ECORRUPT with the reason for anything out of place.
 */
#ifndef TBX_OUTBOX_BATCHROW_H
#define TBX_OUTBOX_BATCHROW_H

#include <stddef.h>
#include <stdint.h>

#include "base/ids.h"

#define TBX__WIRE_FORMAT  1
#define TBX__COVER_FORMAT 1

/** A growing buffer the encoders append to.  Zero-initialise; free p. */
typedef struct tbx__buf {
	unsigned char *p;
	size_t len, cap;
} tbx__buf_t;

void tbx__buf_free(tbx__buf_t *b);

/** One outgoing message's place: the partition it is produced to (-1:
 *  through the partitioner, a row carried over from schema 8), its bit in
 *  its set (0 until B), and the cover entry of the record that queued
 *  it. */
typedef struct tbx__wire_ent {
	int32_t partition;
	uint16_t index;
	uint32_t cover;
} tbx__wire_ent_t;

/** A covered record's kind. */
enum {
	TBX__COVER_HANDLED = 0,
	TBX__COVER_DEAD_LETTER = 1,
	TBX__COVER_UNTOKENED = 2 /**< handled, ingress.untokened=offsets */
};

/** What a covered record's token was. */
enum {
	TBX__REF_NONE = 0,  /**< untokened or malformed */
	TBX__REF_TOKEN = 1, /**< per-message token: ref_id */
	TBX__REF_BIT = 2    /**< bit index of set ref_id, minted for set_part */
};

/** One covered record.  The decoder's strings point into its cover. */
typedef struct tbx__cover_ent {
	int kind;
	const char *topic;
	int32_t partition; /**< >= 0 */
	int64_t offset;	   /**< >= 0 */
	const char *msg_id;
	int ref;
	char ref_id[TBX_UUID_LEN + 1]; /**< "" for TBX__REF_NONE */
	uint16_t index;		       /**< TBX__REF_BIT */
	int32_t set_part; /**< TBX__REF_BIT: the set's partition; a record
			     is stray when it is not @p partition */
} tbx__cover_ent_t;

/** A decoded cover, with its index. */
typedef struct tbx__cover {
	tbx__cover_ent_t *ent;
	uint32_t n;
	char *strs;			/* the entries' strings */
	struct tbx__cover_bkey *by_bit; /* entries with a bit, sorted */
	uint32_t nbit;
	struct tbx__cover_okey *by_off; /* every entry, sorted */
} tbx__cover_t;

/**
 * Appends the wire column of @p n messages to @p b (which should be
 * empty).  @returns TBX_OK, TBX_EINVAL (more than 2^32 - 1 messages, a
 * partition below -1) or TBX_ENOMEM.
 */
int tbx__wire_encode(tbx__buf_t *b, const tbx__wire_ent_t *w, size_t n);

/**
 * Decodes a wire column whose cover has @p cover_n entries into a
 * malloc'd array *out of *n entries (NULL when 0).
 * @returns TBX_OK, TBX_ECORRUPT (@p err says why) or TBX_ENOMEM.
 */
int tbx__wire_decode(const void *blob, size_t len, uint32_t cover_n,
		     tbx__wire_ent_t **out, uint32_t *n, char *err,
		     size_t err_size);

/**
 * Appends the cover column of @p n records to @p b (which should be
 * empty).  Every entry is checked as the decoder checks it, and a cover
 * has at least one.
 * @returns TBX_OK, TBX_EINVAL (@p err says which entry and why) or
 * TBX_ENOMEM.
 */
int tbx__cover_encode(tbx__buf_t *b, const tbx__cover_ent_t *e, size_t n,
		      char *err, size_t err_size);

/**
 * Decodes a cover column into @p c and builds its index; free it with
 * tbx__cover_free() (also after a failure).
 * @returns TBX_OK, TBX_ECORRUPT (@p err says which entry and why) or
 * TBX_ENOMEM.
 */
int tbx__cover_decode(const void *blob, size_t len, tbx__cover_t *c, char *err,
		      size_t err_size);

/**
 * The cover that tbx__cover_decode() makes of what tbx__cover_encode()
 * wrote of @p e (@p n), made from the entries themselves: their strings
 * copied, the index built, no column decoded.  For entries the encoder
 * has just accepted (it checks each as the decoder does; the tests and
 * the fuzz target fuzz_cover hold the two covers equal).  Free @p c with
 * tbx__cover_free() (also after a failure).
 * @returns TBX_OK, TBX_EINVAL (no entry, or more than 2^32 - 1) or
 * TBX_ENOMEM.
 */
int tbx__cover_from(tbx__cover_t *c, const tbx__cover_ent_t *e, size_t n);

void tbx__cover_free(tbx__cover_t *c);

/** The first covered record whose token is bit @p index of set @p set_id,
 *  or -1. */
int64_t tbx__cover_find_bit(const tbx__cover_t *c, const char *set_id,
			    uint16_t index);

/** The first covered record at (@p topic, @p partition, @p offset), or
 *  -1. */
int64_t tbx__cover_find_offset(const tbx__cover_t *c, const char *topic,
			       int32_t partition, int64_t offset);

/** 1 when the partitions (@p topics[i], @p parts[i]) (@p n) are in the
 *  order of gens_lock (outbox/outbox.h): by topic in byte order, then
 *  partition, none twice, none NULL or below 0; else 0. */
int tbx__parts_sorted(const char *const *topics, const int32_t *parts,
		      size_t n);

#endif
