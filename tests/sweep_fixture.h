/*
 * Fixtures of the register-cleanup tests (test_tokens_sweep*.c,
 * test_crash_sweep_sets.c), above support.h's: a service store and a
 * token store, apart or in one file (in the pg tier two schemas, apart or
 * joined), and the token sets' attempts built directly: batch rows with
 * the obatch operations, sets minted with tbx_tokens_sets_mint().
 */
#ifndef TBX_TESTS_SWEEP_FIXTURE_H
#define TBX_TESTS_SWEEP_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "base/ids.h"
#include "outbox/outbox.h"
#include "tokens/tokens.h"

/** S and T of one case. */
typedef struct tt_sweep_env {
	char *dir; /* owned when tt_sweep_env_open() was given none */
	int own_dir;
	int one_file; /* T in S's file (pg tier: through S's connection) */
	tbx_outbox_t *store;
	tbx_tokens_t *tokens;
	char *s_desc, *t_desc; /* "pg:SCHEMA" / "pg2:SCHEMA" (hop.h), or
				  the files' paths */
} tt_sweep_env_t;

/** Opens S and T in @p dir (NULL: a new temporary one, removed by
 *  tt_sweep_env_close()): two files, or with @p one_file one file whose
 *  token store shares S's connection; in the pg tier the schemas
 *  "<tag>_s" and "<tag>_t", through two connections or S's one.  Then
 *  subscribes each of the NULL-terminated @p groups to @p topic. */
void tt_sweep_env_open(tt_sweep_env_t *env, const char *dir, const char *tag,
		       int one_file, const char *topic,
		       const char *const *groups);
/** Closes both stores, drops the pg tier's schemas, removes an owned
 *  directory. */
void tt_sweep_env_close(tt_sweep_env_t *env);

/** Opens @p env's stores again, as tt_sweep_env_open() did, without
 *  asserting (for a child process).  @returns a TBX_E* code, the reason
 *  in @p err. */
int tt_sweep_stores_open(tt_sweep_env_t *env, char *err, size_t size);
/** Closes @p env's stores, keeping their files or schemas. */
void tt_sweep_stores_close(tt_sweep_env_t *env);

/** Runs @p sql (no result) on the store @p desc: the file (opened for
 *  writing, unlike tt_count()), or the schema. */
void tt_store_exec(const char *desc, const char *sql);

/** An attempt of B's first half for token sets: two sets (partitions 0
 *  and 1) of one topic. */
typedef struct tt_set_attempt {
	char id[TBX_UUID_LEN + 1];
	char sets[2][TBX_UUID_LEN + 1];
	int64_t seq;
} tt_set_attempt_t;

/** A: @p grp's batch row @p row_id (a new id), of one record and one
 *  message to @p topic, without an attempt. */
void tt_brow_insert(tt_sweep_env_t *env, const char *grp, const char *topic,
		    char row_id[TBX_UUID_LEN + 1]);
/** B's first half: @p a minted (a new id, two sets of @p nbits bits) and
 *  registered for @p row_id.  @returns the set rows minted (2 per
 *  subscribed group). */
uint64_t tt_sets_mint(tt_sweep_env_t *env, const char *grp, const char *topic,
		      const char *row_id, uint32_t nbits, tt_set_attempt_t *a);
/** B's second half: @p a recorded on the row.  @returns won. */
int tt_sets_record(tt_sweep_env_t *env, const char *grp, const char *topic,
		   const char *row_id, const tt_set_attempt_t *a);
/** Set rows (every group's) of @p a still in T. */
int64_t tt_sets_rows(tt_sweep_env_t *env, const tt_set_attempt_t *a);
/** Registrations (tbx_breg) of @p a still in T: 0 or 1. */
int64_t tt_sets_breg(tt_sweep_env_t *env, const tt_set_attempt_t *a);

#endif
