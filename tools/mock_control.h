/*
 * `tokenbox mock-cluster --control -`: broker faults injected while the
 * cluster runs, by commands read one per line from a file descriptor
 * (standard input), each answered by one line ("ok", "ok <info>" or
 * "error: <reason>") on a stdio stream (standard output).  The grammar is
 * in cmd_mock_cluster.c's help text and docs/operations.md.
 *
 * Locality: the main thread; one control channel per process.
 */
#ifndef TBX_TOOLS_MOCK_CONTROL_H
#define TBX_TOOLS_MOCK_CONTROL_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stddef.h>
#include <stdio.h>

/** Longest command line, in bytes without its newline. */
#define MCTL_LINE_MAX 1024
/** Most partitions a topic may have (--topic; `leader` PARTITION is less). */
#define MCTL_PARTS_MAX 1000

/** What the commands act on (borrowed; outlives mctl_serve()). */
typedef struct mctl {
	rd_kafka_mock_cluster_t *mcluster;
	int brokers; /* broker ids are 1..brokers */
} mctl_t;

/**
 * Answers the commands read from @p fd on @p out until a stop signal
 * (SIGINT, SIGTERM) arrives; at end of file on @p fd, notes it on stderr
 * and keeps waiting for the signal.  Applied faults and refused commands
 * are logged on stderr, one line each.  Needs tbx_cli_on_stop() first.
 * @returns the signal's number.
 */
int mctl_serve(const mctl_t *ctl, int fd, FILE *out);

/**
 * Kafka's rule for topic names (kafka.common.internals.Topic.validate),
 * for @p name of @p len bytes (not NUL-terminated), @p len > 0.
 * @returns 0, or -1 with the problem written into @p why (naming the
 * topic, no trailing period).
 */
int mctl_topic_check(const char *name, size_t len, char *why, size_t size);

#endif
