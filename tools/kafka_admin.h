/*
 * Topics on a real Kafka cluster through librdkafka's admin API, for the
 * commands and harnesses that run on an existing cluster as well as on the
 * embedded mock (`tokenbox demo`, the benchmark, the chaos harness, the
 * test suite's real-broker tier).
 */
#ifndef TBX_TOOLS_KAFKA_ADMIN_H
#define TBX_TOOLS_KAFKA_ADMIN_H

#include <stddef.h>

/**
 * Creates the @p cnt topics @p names with @p partitions[i] partitions and
 * the broker's default replication factor, then waits until the cluster's
 * metadata shows each of them with a leader for every partition.  A topic
 * that exists already is accepted if it has at least the partitions asked
 * for.  @p timeout_ms bounds the whole.
 * @returns 0, or -1 with a message in @p errstr.
 */
int tbx_cli_create_topics(const char *bootstraps, const char *const *names,
			  const int *partitions, size_t cnt, int timeout_ms,
			  char *errstr, size_t errstr_size);

/**
 * Deletes the @p cnt topics @p names (a missing one is not an error) and
 * waits until the metadata no longer lists them.
 * @returns 0, or -1 with a message in @p errstr.
 */
int tbx_cli_delete_topics(const char *bootstraps, const char *const *names,
			  size_t cnt, int timeout_ms, char *errstr,
			  size_t errstr_size);

/**
 * Deletes the consumer groups @p names (@p cnt of them; NULL: every group
 * the cluster lists), with their committed offsets.  A group with members
 * cannot be deleted: a member that just left, or was killed and has not
 * yet timed out, keeps it so for a while, and such groups are tried again
 * until @p timeout_ms.  A group that does not exist is not an error.
 * @returns 0, or -1 with a message in @p errstr.
 */
int tbx_cli_delete_groups(const char *bootstraps, const char *const *names,
			  size_t cnt, int timeout_ms, char *errstr,
			  size_t errstr_size);

#endif
