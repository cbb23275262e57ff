/*
 * The chaos harness (tests/chaos/README.md): a two-hop pipeline of
 * `tokenbox worker` processes attacked while it runs, then validated.
 */
#ifndef TBX_CHAOS_H
#define TBX_CHAOS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Topics and groups of the pipeline: svc-a consumes jobs and sends one
 * JobDone per job to events, which svc-b and svc-c both consume. */
#define CH_JOBS		 "jobs"
#define CH_EVENTS	 "events"
#define CH_PARTITIONS	 8
#define CH_GROUPS	 3
#define CH_BROKERS	 3
#define CH_COORDINATOR	 1 /* of every group; never taken down */
#define CH_WORKERS_MAX	 24
#define CH_PER_GROUP_MAX 4
#define CH_LINE_MAX	 1024

extern const char *const ch_group_names[CH_GROUPS]; /* svc-a, svc-b, svc-c */
/* Each group's effects table (chaos_effects_a, _b, _c): distinct, so that
 * the groups can share one file. */
extern const char *const ch_effects_tables[CH_GROUPS];
/* Their columns, in SQL both SQLite and PostgreSQL take: the plugin makes
 * the table with them, and tbx_chaos before the workers start when the
 * stores are on PostgreSQL. */
#define CH_EFFECTS_COLUMNS "(job TEXT NOT NULL, msg_id TEXT NOT NULL)"

typedef struct ch_opts {
	uint64_t seed;
	int duration_s;	   /* of the attacks; the drain comes after */
	int drain_s;	   /* at most, for the pipeline to settle */
	int messages;	   /* jobs published */
	int workers;	   /* worker processes at the start, >= 3 */
	double crash_prob; /* TBX_CRASH_AT='*@p' for armed workers */
	int broker_faults; /* 0: none */
	int disk_faults;   /* 0: none; -1: asked for but not possible */
	int one_file;	   /* 1: every store in one file (tokenbox's
			      default); 0: a file per service and one
			      for the tokens */
	int batch_rows;	   /* 1: the workers on outbox.layout=batch */
	int token_sets;	   /* 1: tokens.format=set for the publisher and
			      the workers' own messages (needs
			      batch_rows) */
	/* The stores on this PostgreSQL server (a libpq URL or key=value
	 * string) instead of SQLite files; NULL: files. */
	const char *store_url;
	int keep; /* keep the run directory */
	int verbose;
	const char *dir; /* run directory (created), or NULL: a temporary */
	char tokenbox[512], plugin[512];
	/* A real Kafka cluster instead of the mock (NULL: the mock), and
	 * the scripts/kafka.sh directory of its nodes (NULL: no broker
	 * faults there). */
	const char *bootstrap, *kafka_dir;
	char kafka_script[512];
} ch_opts_t;

/* The figures of one run. */
typedef struct ch_figures {
	/* what was done */
	long published, resent, kills, terms, crashes, exits, rebalances;
	long broker_faults, disk_faults, disk_reports;
	/* what the validator found */
	long handled_once, duplicated, lost, dead_lettered;
	long tokens_left, registrations_left, outbox_left, event_copies;
	long events_distinct, unclean_stops;
	/* event records whose token is not of the run's format, or whose
	 * tbx-tbit names another partition than the one it is on */
	long events_misformed;
	/* ms from the end of the attacks until the pipeline settled; -1:
	 * it did not */
	long drain_ms;
} ch_figures_t;

/* xorshift64*: the harness's decisions come from the seed alone. */
uint64_t ch_rand(uint64_t *state);
/* A uniform integer in [lo, hi]. */
long ch_between(uint64_t *state, long lo, long hi);

/* Where a run's stores are: SQLite files in @p dir, or schemas of the
 * PostgreSQL server @p url, a service store's schema <prefix>_svc_a … _c
 * and the token store's <prefix>_tokens.  @p one_file: one file for
 * every store (--layout one), or on PostgreSQL the workers' token store
 * on their service store's connection (the joined path). */
typedef struct ch_stores {
	const char *url; /* NULL: SQLite files */
	const char *dir;
	char prefix[32];
	int one_file;
} ch_stores_t;

/* Store readers (read-only connections; a missing file, schema or table
 * counts 0).  @p store is a name ch_store_name() or ch_tokens_name()
 * gave; @p sql's one parameter, if any, is $1, bound to @p arg. */
long ch_count(const ch_stores_t *s, const char *store, const char *sql);
long ch_count_of(const ch_stores_t *s, const char *store, const char *sql,
		 const char *arg);

/* PostgreSQL (pg.c).  A count on the schema @p schema of @p url, as
 * ch_count_of(), on a read-only connection kept for the process. */
long ch_pg_count(const char *url, const char *schema, const char *sql,
		 const char *arg);
/* Closes that connection. */
void ch_pg_close(void);
/* Drops what an earlier run of that prefix left (pids come round again),
 * then makes each service schema with its effects table: on PostgreSQL
 * CREATE TABLE IF NOT EXISTS is not safe against itself, so the workers
 * must find the tables (docs/handlers.md).  @returns 0, or -1 with
 * @p err set. */
int ch_pg_setup(const ch_stores_t *s, char *err, size_t err_size);
/* Drops the run's schemas.  @returns 0, or -1 with @p err set. */
int ch_pg_drop(const ch_stores_t *s, char *err, size_t err_size);

/* Kafka: reads @p topic (partitions 0..@p parts-1) from the beginning to
 * its current end, calling @p fn for every record.  @returns the record
 * count, or -1 if the end was not reached within @p timeout_ms. */
typedef void (*ch_record_fn)(void *opaque, const void *rkmessage);
long ch_read_topic(const char *bootstraps, const char *topic, int parts,
		   int timeout_ms, ch_record_fn fn, void *opaque);
/* Copies up to @p max records from random offsets of random partitions of
 * @p topic back to it, byte for byte (headers too), as an upstream
 * service re-sending.  @returns the count re-sent (0 on trouble). */
long ch_resend(const char *bootstraps, const char *topic, int parts,
	       uint64_t *rng, long max);

/* What a run may not leave behind, in either outbox layout and token
 * format: group @p group's outbox rows in the service store @p db
 * (tbx_outbox; tbx_obatch and its tbx_cover_msg entries), the token
 * store's tokens (tbx_tokens; token set rows, tbx_tset) and
 * registrations (tbx_registrations; a batch row's, tbx_breg).  -1 if a
 * store could not be read. */
long ch_outbox_left(const ch_stores_t *s, const char *db, const char *group);
long ch_tokens_left(const ch_stores_t *s, const char *tokens);
long ch_registrations_left(const ch_stores_t *s, const char *tokens);

/* Where group @p g keeps its service store (a file's path, or a schema's
 * name), and where the token store is, in either layout. */
void ch_store_name(char *buf, size_t size, const ch_stores_t *s, int g);
void ch_tokens_name(char *buf, size_t size, const ch_stores_t *s);

/* Starts @p argv (argv[0] a path) with standard input from /dev/null and
 * standard output and error appended to @p log; the child puts the
 * NAME=VALUE strings of @p env_put (NULL-terminated; NULL: none) and
 * removes @p env_unset (NULL: none).  SIGTERM or SIGINT sent at any time
 * after, before the exec too, reaches the child with its default action
 * (spawn.c).  @p gate_fd: -1, or a descriptor the child reads one byte
 * from before anything else (a test holds it between fork and exec).
 * @returns the child's pid, or -1 with errno. */
pid_t ch_spawn(char *const argv[], const char *log, char *const env_put[],
	       const char *env_unset, int gate_fd);

/* The validator: reads the stores @p s and the topics, fills
 * the "found" half of @p fig.  @p token_sets: the events must carry
 * tbx-tset and tbx-tbit (tokens.format=set) instead of tbx-token.
 * @returns 0 if the run was exactly once. */
int ch_validate(const ch_stores_t *s, const char *bootstraps, int messages,
		int token_sets, ch_figures_t *fig);

#endif
