/*
 * Membership: what the group gives this worker, said at the default log
 * level, and a worker the group leaves without partitions.
 *
 * Each assignment and revocation is logged at NOTICE with its partitions
 * (per topic, runs of numbers as ranges: "orders [0-3,7]").  A worker
 * with no partition for TBX__UNASSIGNED_SESSIONS × session.timeout.ms on
 * end (since it subscribed, or since it lost its last partition) is
 * idle while it counts as a member: more workers than partitions, a
 * group that keeps rebalancing, or a topic with fewer partitions than
 * thought.  That is logged at WARN, counted (unassigned_alarms) and
 * marked in the service store (the no_assignment alarm of `inspect
 * status --check`), once per such stretch: a partition assigned ends it
 * (logged), and a new stretch warns again.  session.timeout.ms is the
 * consumer's own (librdkafka's default when not set).
 *
 * A partition assigned as long without one fetch response (its high
 * watermark still unknown to the client) is warned of the same way, once
 * per partition and assignment (fetch_stall_alarms, the fetch_stall
 * alarm): its leader unreachable that long, or a client that dropped the
 * partition's fetch start (librdkafka 2.0.2 did, when a resume raced the
 * assignment: worker_rebalance.c).  A partition the worker holds paused
 * is not fetched on purpose and not judged, nor is one whose high
 * watermark the client knows (fetched once, in this assignment or an
 * earlier one of the process: a fetch start lost at a reassignment goes
 * unseen).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/worker.h"

/* Appends @p s to @p buf (of @p size, holding *len), cut with "..." when
 * it does not fit. */
static void append(char *buf, size_t size, size_t *len, const char *s)
{
	size_t n = strlen(s);

	if (*len + n + 4 > size) {
		if (*len + 4 <= size) {
			memcpy(buf + *len, "...", 4);
			*len = size; /* full: nothing more */
		}
		return;
	}
	memcpy(buf + *len, s, n + 1);
	*len += n;
}

void tbx__membership_format(const rd_kafka_topic_partition_list_t *parts,
			    char *buf, size_t size)
{
	rd_kafka_topic_partition_list_t *sorted;
	size_t len = 0;
	char num[48];

	buf[0] = '\0';
	if (!parts || parts->cnt == 0) {
		append(buf, size, &len, "none");
		return;
	}
	if (!(sorted = rd_kafka_topic_partition_list_copy(parts))) {
		append(buf, size, &len, "?");
		return;
	}
	rd_kafka_topic_partition_list_sort(sorted, NULL, NULL);
	for (int i = 0; i < sorted->cnt;) {
		const char *topic = sorted->elems[i].topic;

		if (i > 0)
			append(buf, size, &len, ", ");
		append(buf, size, &len, topic);
		append(buf, size, &len, " [");
		for (int first = 1; i < sorted->cnt &&
				    strcmp(sorted->elems[i].topic, topic) == 0;
		     first = 0) {
			int32_t lo = sorted->elems[i].partition, hi = lo;

			while (i + 1 < sorted->cnt &&
			       strcmp(sorted->elems[i + 1].topic, topic) == 0 &&
			       sorted->elems[i + 1].partition == hi + 1)
				hi = sorted->elems[++i].partition;
			i++;
			if (hi == lo)
				snprintf(num, sizeof(num), "%s%" PRId32,
					 first ? "" : ",", lo);
			else
				snprintf(num, sizeof(num),
					 "%s%" PRId32 "-%" PRId32,
					 first ? "" : ",", lo, hi);
			append(buf, size, &len, num);
		}
		append(buf, size, &len, "]");
	}
	rd_kafka_topic_partition_list_destroy(sorted);
}

void tbx__membership_changed(tbx_worker_t *worker, int assigned,
			     const rd_kafka_topic_partition_list_t *parts,
			     int lost)
{
	char list[1024];
	int64_t now = tbx__mono_ms();

	tbx__membership_format(parts, list, sizeof(list));
	if (assigned) {
		tbx__log(TBX_LOG_NOTICE,
			 "assigned %d partition(s) of group %s: %s; %zu in all",
			 parts ? parts->cnt : 0, worker->group, list,
			 worker->part_cnt);
		if (worker->part_cnt > 0) {
			if (worker->unassigned_alarm_ms)
				tbx__log(TBX_LOG_NOTICE,
					 "partitions again after %" PRId64
					 " ms without any; the no_assignment "
					 "alarm stays in the service store "
					 "until removed",
					 now - worker->unassigned_since_ms);
			worker->unassigned_since_ms = 0;
			worker->unassigned_alarm_ms = 0;
		}
	} else {
		tbx__log(TBX_LOG_NOTICE,
			 "%s %d partition(s) of group %s: %s; %zu left",
			 lost ? "lost (the group moved on without this "
				"worker)"
			      : "revoked",
			 parts ? parts->cnt : 0, worker->group, list,
			 worker->part_cnt);
		if (worker->part_cnt == 0 && !worker->unassigned_since_ms)
			worker->unassigned_since_ms = now;
	}
}

/* The consumer's session.timeout.ms, as librdkafka took it. */
static int64_t session_timeout_ms(tbx_worker_t *worker)
{
	char value[64];
	size_t size = sizeof(value);
	long long v;

	if (rd_kafka_conf_get(rd_kafka_conf(worker->consumer),
			      "session.timeout.ms", value,
			      &size) != RD_KAFKA_CONF_OK ||
	    (v = atoll(value)) <= 0)
		return 45000; /* librdkafka's default */
	return v;
}

/* Records the alarm @p name in a transaction of its own; a failure is
 * logged (the WARN line has been written already). */
static void alarm_record(tbx_worker_t *worker, const char *name,
			 const char *detail)
{
	int err = tbx_outbox_begin(worker->store);

	if (!err && ((err = tbx_outbox_alarm_add(worker->store, worker->group,
						 name, detail)) ||
		     (err = tbx_outbox_commit(worker->store))))
		tbx_outbox_rollback(worker->store);
	if (err)
		tbx__log(TBX_LOG_WARNING,
			 "cannot record the %s alarm in the service store: %s",
			 name, tbx_strerror(err));
}

void tbx__membership_check(tbx_worker_t *worker)
{
	int64_t now = tbx__mono_ms(), session, after;
	char detail[TBX_GROUP_MAX * 2 + 512];

	if (!worker->consumer || worker->part_cnt > 0 ||
	    !worker->unassigned_since_ms || worker->unassigned_alarm_ms)
		return;
	if (!worker->session_ms)
		worker->session_ms = session_timeout_ms(worker);
	session = worker->session_ms;
	after = TBX__UNASSIGNED_SESSIONS * session;
	if (now - worker->unassigned_since_ms < after)
		return;
	worker->unassigned_alarm_ms = now;
	worker->unassigned_alarms++;
	snprintf(detail, sizeof(detail),
		 "worker %s of group %s has had no partition for %" PRId64
		 " ms (%d x session.timeout.ms %" PRId64
		 "): more workers than partitions, or a group that does not "
		 "settle",
		 worker->log_tag, worker->group,
		 now - worker->unassigned_since_ms, TBX__UNASSIGNED_SESSIONS,
		 session);
	tbx__log(TBX_LOG_WARNING, "%s; it consumes nothing meanwhile", detail);
	alarm_record(worker, "no_assignment", detail);
}

void tbx__fetch_check(tbx_worker_t *worker)
{
	char detail[TBX_GROUP_MAX * 2 + TBX_TOPIC_MAX + 512];
	int64_t now, after;

	if (!worker->consumer || worker->part_cnt == 0)
		return;
	if (!worker->session_ms)
		worker->session_ms = session_timeout_ms(worker);
	now = tbx__mono_ms();
	after = TBX__UNASSIGNED_SESSIONS * worker->session_ms;
	for (size_t i = 0; i < worker->part_cnt; i++) {
		tbx__part_t *part = &worker->parts[i];
		int64_t lo, hi;

		if (part->fetch_seen || part->fetch_alarmed || part->paused)
			continue;
		/* Every fetch response sets the partition's high watermark,
		 * of an empty partition too: the cached one, no request. */
		if (!rd_kafka_get_watermark_offsets(
			worker->consumer, part->topic, part->partition, &lo,
			&hi) &&
		    hi >= 0) {
			part->fetch_seen = 1;
			continue;
		}
		if (now - part->assigned_ms < after)
			continue;
		part->fetch_alarmed = 1;
		worker->fetch_stall_alarms++;
		snprintf(detail, sizeof(detail),
			 "worker %s of group %s: %s [%" PRId32
			 "] assigned %" PRId64 " ms ago (%d x "
			 "session.timeout.ms %" PRId64
			 ") and never fetched: no fetch response from its "
			 "leader (unreachable), or the client lost the "
			 "partition's fetch start",
			 worker->log_tag, worker->group, part->topic,
			 part->partition, now - part->assigned_ms,
			 TBX__UNASSIGNED_SESSIONS, worker->session_ms);
		tbx__log(TBX_LOG_WARNING,
			 "%s; its records wait (a restart of the worker "
			 "fetches it again)",
			 detail);
		alarm_record(worker, "fetch_stall", detail);
	}
}
