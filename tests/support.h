/*
 * Test fixtures shared by the suite: temporary directories, an in-process
 * librdkafka mock cluster, raw producing and reading back, counting rows in
 * the stores, and child processes.
 */
#ifndef TBX_TESTS_SUPPORT_H
#define TBX_TESTS_SUPPORT_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/ids.h"
#include "tokenbox/tokenbox.h"

/* Kafka protocol ApiKeys used with rd_kafka_mock_push_request_errors. */
enum {
	TT_API_PRODUCE = 0,
	TT_API_FETCH = 1,
	TT_API_OFFSET_COMMIT = 8,
	TT_API_JOIN_GROUP = 11,
	TT_API_HEARTBEAT = 12,
};

/** Multiplier for waits (TBX_TIME_FACTOR, 3 under sanitizers). */
int tt_time_factor(void);
/** A fresh directory under /tmp; the caller frees the string. */
char *tt_tmpdir(void);
/** rm -rf @p dir and frees nothing. */
void tt_rmrf(const char *dir);
/** malloc'ed "dir/name". */
char *tt_path(const char *dir, const char *name);

/** The real cluster of the `kafka` tier: TBX_KAFKA_BOOTSTRAP when the
 *  test runs in that tier (ctest sets TBX_KAFKA_TIER=1), else NULL. */
const char *tt_real_kafka(void);

typedef struct tt_cluster {
	rd_kafka_t *rk;
	rd_kafka_mock_cluster_t *mock; /**< NULL on a real cluster */
	char bootstraps[1024];
} tt_cluster_t;

/** An in-process mock cluster of @p brokers, or in the `kafka` tier the
 *  real cluster (whatever its size), emptied of the topics and groups of
 *  earlier tests (the tier's tests run one at a time).  Fault injection
 *  through @c mock is for the mock only. */
tt_cluster_t *tt_cluster_new(int brokers);
void tt_cluster_topic(tt_cluster_t *cluster, const char *topic, int partitions);
void tt_cluster_destroy(tt_cluster_t *cluster);

/** A worker/publisher conf for tests: short session timeouts, quiet logs.
 *  Extra "key", "value" pairs follow, NULL-terminated.  Aborts the test on
 *  a refused key. */
tbx_conf_t *tt_conf(const char *bootstraps, const char *group,
		    const char *store, const char *tokens, ...);

/** Creates the token store @p tokens if missing (`tokenbox init`). */
void tt_tokens_init(const char *tokens);
/** Records subscriptions (topic, group) in the token store @p tokens. */
void tt_subscribe(const char *tokens, const char *topic, const char *group);

/** A publisher on @p bootstraps minting into the existing token store
 *  @p tokens, logging at @p log_level; asserts it was created. */
tbx_publisher_t *tt_publisher(const char *bootstraps, const char *tokens,
			      const char *log_level);

/** Publishes @p cnt records of @p type on @p topic with tokens; keys cycle
 *  through @p key_cnt keys "key-<n>"; payloads "<prefix>-<i>". */
void tt_publish(const char *bootstraps, const char *tokens, const char *topic,
		const char *type, int cnt, int key_cnt, const char *prefix);

/** The most partitions tt_publish_sets() mints for. */
#define TT_SETS_MAX 8
/** A token set tt_publish_sets() minted. */
typedef struct tt_set {
	char id[TBX_UUID_LEN + 1];
	uint32_t nbits;
	int64_t seq; /**< its mint_seq, the records' tbx-seq */
} tt_set_t;
/** Publishes @p cnt records of @p type on @p topic in the batched format
 *  (docs/batched-tokens.md): one token set per partition 0 .. @p parts - 1
 *  minted in @p tokens with tbx_tokens_sets_mint() (a row per group
 *  subscribed), record i to partition i % @p parts with bit i / @p parts
 *  and key "key-<partition>", headers tbx-id, tbx-tset, tbx-tbit,
 *  tbx-seq, tbx-store, tbx-type; payloads "<prefix>-<i>".  Each set has
 *  @p spare bits more than records sent with it (never consumed, so its
 *  row stays).  @p sets (may be NULL) receives the @p parts sets. */
void tt_publish_sets(const char *bootstraps, const char *tokens,
		     const char *topic, const char *type, int cnt, int parts,
		     int spare, const char *prefix, tt_set_t *sets);

/** A record read back from a topic. */
typedef struct tt_record {
	int32_t partition;
	int64_t offset;
	char *key;     /**< NUL-terminated copy or NULL */
	char *payload; /**< NUL-terminated copy or NULL */
	char *id, *token, *type, *seq, *cause,
	    *dlq_error; /**< headers or NULL */
	rd_kafka_headers_t *headers;
} tt_record_t;

/** Reads every record of @p topic from the beginning to the high
 *  watermark. @returns the count; *out malloc'ed (tt_records_free). */
size_t tt_read_topic(const char *bootstraps, const char *topic,
		     tt_record_t **out);
void tt_records_free(tt_record_t *records, size_t cnt);
/** Re-produces @p rec byte for byte (key, value, headers) to @p topic,
 *  same partition. */
void tt_reproduce(const char *bootstraps, const char *topic,
		  const tt_record_t *records, size_t cnt);
/** Produces a record without tokens (a foreign producer). */
void tt_produce_plain(const char *bootstraps, const char *topic,
		      int32_t partition, const char *key, const char *payload,
		      const char *type);

/** 1 in the pg tier (TBX_PG_TIER=1): the stores are PostgreSQL schemas. */
int tt_pg_tier(void);
/** A new store for this test, malloc'ed: "@p dir/@p name.db", or in the
 *  pg tier "pg:t_<name>_<pid>_<n>", a schema on $TBX_PG_URL that no
 *  other test uses (a leftover of that name from an earlier run is
 *  dropped).  @p name: letters, digits and '_'. */
char *tt_store_new(const char *dir, const char *name);
/** As tt_store_new() for a token store; in the pg tier "pg2:…" unless
 *  @p joined (hop.h: with "pg:" stores a worker takes the joined path,
 *  with "pg2:" the path of two databases, as with one SQLite file or
 *  two). */
char *tt_tokens_new(const char *dir, const char *name, int joined);

/** Runs a query returning one integer (NULL: 0) on the store @p db, an
 *  SQLite file or "pg:SCHEMA" (hop.h: the query runs with search_path
 *  set to SCHEMA); asserts it ran. */
int64_t tt_count(const char *db, const char *sql);
/** tt_count() on "pg:SCHEMA" @p store, or -1 when it fails (a table not
 *  there yet). */
int64_t tt_pg_value(const char *store, const char *sql);
/** Called by tt_rows() for each row: its @p n columns as text (NULL for
 *  NULL), valid during the call. */
typedef void (*tt_row_fn)(void *opaque, int n, const char *const *vals);
/** Runs @p sql on the store @p store (as tt_count()) and calls @p fn for
 *  every row (up to 16 columns); asserts it ran.  @returns the rows. */
size_t tt_rows(const char *store, const char *sql, tt_row_fn fn, void *opaque);
/** 1 when the table @p table exists in @p store (a file not there yet
 *  has none). */
int tt_table_exists(const char *store, const char *table);
/** PRAGMA integrity_check is "ok"; always 1 on PostgreSQL. */
int tt_integrity_ok(const char *db);

/** Polls every worker in turn until @p done(opaque) is true and every
 *  worker saw @p idle_polls empty polls in a row, or @p timeout_s.
 *  @returns 1 on success. */
int tt_drive(tbx_worker_t **workers, int cnt, int (*done)(void *), void *opaque,
	     int idle_polls, int timeout_s);

/** 1 once every worker of @p workers holds at least one partition: a
 *  group's members all assigned before anything is sent. */
int tt_assigned(tbx_worker_t **workers, int cnt);

/** 1 once every worker holds its partitions, none held back for a retry,
 *  and has polled every record of them (its position at the high
 *  watermark): an outcome to wait for instead of a quiet time. */
int tt_caught_up(tbx_worker_t **workers, int cnt);

/** fork+exec @p argv with extra environment "K=V" strings (NULL-ended). */
pid_t tt_spawn(char *const argv[], char *const env[]);
/** Waits up to @p timeout_s; @returns the wait status, or -1 on timeout
 *  (the child is then killed). */
int tt_wait(pid_t pid, int timeout_s);

/** Reads the int64 numbers @p procs forked children write to the pipe
 *  @p fd (closed here) into @p out (at most @p max: asserted), then
 *  reaps the children and asserts each exited 0.  @returns the count. */
size_t tt_collect_i64(int fd, int64_t *out, size_t max, int procs);

/** An example plugin loaded as `tokenbox worker` loads it. */
typedef struct tt_plugin {
	void *handle;
	tbx_plugin_init_fn init;
} tt_plugin_t;

/** dlopen()s $TBX_EXAMPLES_DIR/@p file and checks its entry points and
 *  ABI version (asserts). */
void tt_plugin_open(tt_plugin_t *p, const char *file);
void tt_plugin_close(tt_plugin_t *p);

#include "hop.h"

/** The two hops of the crash and one-file tests, in process: @p w[0] is
 *  group g1 on "in" (type Ping, @p hop1) with stores @p s1 and @p t1,
 *  @p w[1] group g2 on "out" (type Pong, @p hop2) with @p s2 and @p t2. */
void tt_hop_pair(tbx_worker_t *w[2], const char *bootstraps, const char *s1,
		 const char *t1, const char *s2, const char *t2, tt_hop_t *hop1,
		 tt_hop_t *hop2);

/** The whole crash case of one crash point (docs/architecture.md, "Crash
 *  points"): publish,
 *  run a child worker with TBX_CRASH_AT=@p point, check it died by
 *  SIGKILL, recover in process, and check every invariant.  @p point may
 *  name several children run in turn, separated by '|': each a
 *  TBX_CRASH_AT value, "-" for a child that runs until idle and exits
 *  0, or "!<rules>" for a child armed with rules that must never fire
 *  (it too must run until idle and exit 0).  Children at "sweep.*"
 *  points run the sweeper every millisecond.  With @p single_file, every
 *  death is also checked for the joined path's promises: no row with
 *  messages lacks an attempt, and nothing is registered. */
void tt_crash_case(const char *point, int single_file);
/** tt_crash_case() with @p setting ("key=value", or NULL) for every
 *  child worker as well. */
void tt_crash_case_with(const char *point, int single_file,
			const char *setting);
/** tt_crash_case_with() with hop 1's records in the batched format
 *  (tt_publish_sets(): a token set per partition), and at the end no
 *  token set left. */
void tt_crash_case_batched(const char *point, int single_file,
			   const char *setting);
/** tt_crash_case_with() (@p batched: tt_crash_case_batched()) with hop 1
 *  on outbox.layout=batch, killed and restarted, and at the end no batch
 *  row nor tbx_cover_msg entry left. */
void tt_crash_case_rows(const char *point, int single_file, const char *setting,
			int batched);
/** As tt_crash_case_rows(), hop 1 with tokens.format=set: its own
 *  messages in token sets (tokfmt 2), each checked to carry tbx-tset and
 *  a tbx-tbit naming the partition it was delivered to, copies with the
 *  same set and bit, and no tbx_tset or tbx_breg row left. */
void tt_crash_case_rows_sets(const char *point, int single_file,
			     const char *setting, int batched);
/** Called, when set, after each step (child run) of a crash case with
 *  its step number from 0 and the stores of hop 1. */
extern void (*tt_crash_step_hook)(int step, const char *s1, const char *tokens);
/** Hop 1's recovering worker's stats at the end of the last crash case. */
extern tbx_stats_t tt_crash_hop1_stats;

#endif
