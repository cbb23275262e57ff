/*
 * tbx_floor's records and its PostgreSQL variants (bench/floor.c,
 * bench/floor_pg.c).
 */
#ifndef TBX_BENCH_FLOOR_H
#define TBX_BENCH_FLOOR_H

#define KEY_LEN	    16
#define PAYLOAD_LEN 200

typedef struct rec {
	unsigned char id[KEY_LEN];   /* the record's id */
	unsigned char tok[KEY_LEN];  /* its incoming token */
	unsigned char out[KEY_LEN];  /* the outgoing message's id */
	unsigned char mint[KEY_LEN]; /* the token minted for it */
	char id_text[37];
	char tok_text[37], out_text[37], mint_text[37];
} rec_t;

/* The variants: the four of both stores; on PostgreSQL only,
 * token-batched, the token protocol without a savepoint per record, and
 * token-per-record, its lookups, inserts and deletes one statement per
 * record each; on SQLite only, token-sets, the store work of
 * docs/batched-tokens.md (sets of bits per batch, one outbox row per
 * batch). */
enum {
	V_PLAIN,
	V_INBOX,
	V_OUTBOX,
	V_TOKEN,
	V_TOKEN_BATCHED,
	V_TOKEN_PER_RECORD,
	V_TOKEN_SETS,
	NVARIANTS
};
extern const char *const floor_variant_names[NVARIANTS];

/**
 * Runs the variants of @p mask against the PostgreSQL server @p url,
 * @p rounds times interleaved, each variant of each round in a fresh
 * schema (dropped afterwards), and prints per variant the medians of
 * round trips, microseconds and CPU microseconds per record.
 * @returns 0, or 1 when a store operation failed (said on stderr).
 */
int floor_pg_main(const char *url, const rec_t *recs, long n, long batch,
		  unsigned mask, long rounds);

#endif
