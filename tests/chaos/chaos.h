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
	int keep;	   /* keep the run directory */
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

/* Store readers (read-only connections; a missing file counts 0). */
long ch_count(const char *db, const char *sql);
/* The same, with @p arg bound to ?1. */
long ch_count_of(const char *db, const char *sql, const char *arg);

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
long ch_outbox_left(const char *db, const char *group);
long ch_tokens_left(const char *tokens);
long ch_registrations_left(const char *tokens);

/* Where group @p g keeps its service store, and where the token store is,
 * under @p store_dir in either layout. */
void ch_store_path(char *buf, size_t size, const char *store_dir, int one_file,
		   int g);
void ch_tokens_path(char *buf, size_t size, const char *store_dir,
		    int one_file);

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

/* The validator: reads the stores under @p store_dir and the topics, fills
 * the "found" half of @p fig.  @p token_sets: the events must carry
 * tbx-tset and tbx-tbit (tokens.format=set) instead of tbx-token.
 * @returns 0 if the run was exactly once. */
int ch_validate(const char *store_dir, int one_file, const char *bootstraps,
		int messages, int token_sets, ch_figures_t *fig);

#endif
