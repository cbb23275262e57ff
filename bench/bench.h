/*
 * tbx_bench: the side-by-side benchmark of bench/run.
 *
 * One executable plays two roles.  The driver (bench_driver_main) starts a
 * `tokenbox mock-cluster`, preloads input topics and runs each contender as
 * a child process of its own (this executable again, `contender ...`), so
 * that getrusage() gives each its own peak RSS and no librdkafka thread
 * crosses a fork.  A contender (bench_contender_main) consumes its input
 * topic, writes one business row per record in its SQLite store (with
 * --store-url: its schema on a PostgreSQL server), produces one outgoing
 * record per record, and prints one JSON object of figures on standard
 * output when it is done.
 */
#ifndef TBX_BENCH_BENCH_H
#define TBX_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* The workload, the same for every contender. */
#define BENCH_PARTITIONS      8
#define BENCH_PAYLOAD_LEN     200
#define BENCH_TS_HEADER	      "bench-t0"
#define BENCH_BATCH_MAX	      500 /* tokenbox's batch.max.messages default */
#define BENCH_BATCH_MAX_MS    100 /* tokenbox's batch.max.ms default */
#define BENCH_BATCH_MAX_LIMIT 100000
/* librdkafka's default (500 ms) would dominate the latency figures: the
 * mock cluster holds a fetch for that long when no record is waiting. */
#define BENCH_FETCH_WAIT_MS "10"
/* The mock cluster waits up to session.timeout.ms - 1 s for the members
 * of a rebalancing group (librdkafka's default 45 s would stall the
 * worker-count runs whenever a member comes or goes). */
#define BENCH_SESSION_TIMEOUT_MS "6000"

/* Counting VFS (countvfs.c). */
typedef struct bench_io_counts {
	uint64_t syncs;	     /**< xSync calls, any file */
	uint64_t write_txns; /**< WAL write-lock acquisitions */
} bench_io_counts_t;

/** Registers the counting VFS as the default one.  Call before any
 *  SQLite connection is opened.  @returns 0 or an SQLite error code. */
int bench_countvfs_register(void);
void bench_countvfs_get(bench_io_counts_t *counts);

/* PostgreSQL round trips of this process (countpq.c): every libpq call
 * that sends a statement and waits for its answer, COMMITs among them. */
typedef struct bench_pq_counts {
	uint64_t round_trips;
	uint64_t commits;
} bench_pq_counts_t;

void bench_pq_get(bench_pq_counts_t *counts);

/** CLOCK_MONOTONIC in nanoseconds (shared by every process of the host). */
int64_t bench_now_ns(void);

int bench_contender_main(int argc, char **argv);
int bench_driver_main(int argc, char **argv);

#endif
