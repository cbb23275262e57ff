/* Topics on a real cluster through the admin API; see kafka_admin.h. */
#include "tools/kafka_admin.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void quiet_log(const rd_kafka_t *rk, int level, const char *fac,
		      const char *buf)
{
	(void)rk;
	(void)level;
	(void)fac;
	(void)buf;
}

static rd_kafka_t *admin_client(const char *bootstraps, char *errstr,
				size_t errstr_size)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;

	if (!conf) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	/* Errors come back as results: the log would repeat them. */
	rd_kafka_conf_set_log_cb(conf, quiet_log);
	if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, errstr,
			      errstr_size) != RD_KAFKA_CONF_OK ||
	    rd_kafka_conf_set(conf, "allow.auto.create.topics", "false", errstr,
			      errstr_size) != RD_KAFKA_CONF_OK) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	if (!(rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, errstr_size)))
		rd_kafka_conf_destroy(conf);
	return rk;
}

/* Waits for the result event of one admin request. */
static rd_kafka_event_t *admin_wait(rd_kafka_queue_t *q, long long deadline)
{
	while (now_ms() < deadline) {
		rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 100);
		if (ev)
			return ev;
	}
	return NULL;
}

/* 1 when the metadata lists every name (@p want_present) or none of them
 * (!@p want_present), each present one with @p min_parts[i] partitions
 * (when given) that all have a leader. */
static int topics_settled(rd_kafka_t *rk, const char *const *names,
			  const int *min_parts, size_t cnt, int want_present)
{
	const struct rd_kafka_metadata *md;
	int ok = 1;

	if (rd_kafka_metadata(rk, 1, NULL, &md, 5000))
		return 0;
	for (size_t i = 0; i < cnt && ok; i++) {
		const struct rd_kafka_metadata_topic *t = NULL;
		for (int j = 0; j < md->topic_cnt && !t; j++)
			if (strcmp(md->topics[j].topic, names[i]) == 0)
				t = &md->topics[j];
		if (!want_present) {
			ok = !t ||
			     t->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
			continue;
		}
		if (!t || t->err ||
		    (min_parts && t->partition_cnt < min_parts[i])) {
			ok = 0;
			continue;
		}
		for (int p = 0; p < t->partition_cnt; p++)
			if (t->partitions[p].err || t->partitions[p].leader < 0)
				ok = 0;
	}
	rd_kafka_metadata_destroy(md);
	return ok;
}

static int settle(rd_kafka_t *rk, const char *const *names,
		  const int *min_parts, size_t cnt, int want_present,
		  long long deadline, char *errstr, size_t errstr_size)
{
	while (!topics_settled(rk, names, min_parts, cnt, want_present)) {
		if (now_ms() >= deadline) {
			snprintf(errstr, errstr_size,
				 "the cluster's metadata did not show the "
				 "topics %s in time",
				 want_present ? "created" : "deleted");
			return -1;
		}
		struct timespec ts = {0, 100 * 1000000L};
		nanosleep(&ts, NULL);
	}
	return 0;
}

int tbx_cli_create_topics(const char *bootstraps, const char *const *names,
			  const int *partitions, size_t cnt, int timeout_ms,
			  char *errstr, size_t errstr_size)
{
	long long deadline = now_ms() + timeout_ms;
	rd_kafka_t *rk = admin_client(bootstraps, errstr, errstr_size);
	rd_kafka_NewTopic_t *nt[64];
	rd_kafka_queue_t *q = NULL;
	rd_kafka_event_t *ev = NULL;
	size_t made = 0;
	int rc = -1;

	if (!rk)
		return -1;
	if (cnt > sizeof(nt) / sizeof(nt[0])) {
		snprintf(errstr, errstr_size, "too many topics at once");
		goto out;
	}
	for (; made < cnt; made++) {
		/* -1: the broker's default.replication.factor. */
		if (!(nt[made] =
			  rd_kafka_NewTopic_new(names[made], partitions[made],
						-1, errstr, errstr_size)))
			goto out;
	}
	q = rd_kafka_queue_new(rk);
	rd_kafka_CreateTopics(rk, nt, cnt, NULL, q);
	if (!(ev = admin_wait(q, deadline))) {
		snprintf(errstr, errstr_size,
			 "no answer from %s to CreateTopics", bootstraps);
		goto out;
	}
	if (rd_kafka_event_error(ev)) {
		snprintf(errstr, errstr_size, "CreateTopics: %s",
			 rd_kafka_event_error_string(ev));
		goto out;
	}
	{
		const rd_kafka_CreateTopics_result_t *res =
		    rd_kafka_event_CreateTopics_result(ev);
		size_t n = 0;
		const rd_kafka_topic_result_t **tr =
		    rd_kafka_CreateTopics_result_topics(res, &n);
		for (size_t i = 0; i < n; i++) {
			rd_kafka_resp_err_t err =
			    rd_kafka_topic_result_error(tr[i]);
			if (err &&
			    err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
				snprintf(
				    errstr, errstr_size,
				    "cannot create topic %s: %s",
				    rd_kafka_topic_result_name(tr[i]),
				    rd_kafka_topic_result_error_string(tr[i]));
				goto out;
			}
		}
	}
	if (settle(rk, names, partitions, cnt, 1, deadline, errstr,
		   errstr_size)) {
		/* An old topic with fewer partitions never settles. */
		size_t len = strlen(errstr);
		snprintf(errstr + len, errstr_size - len,
			 " (or one exists with fewer partitions than asked)");
		goto out;
	}
	rc = 0;
out:
	if (ev)
		rd_kafka_event_destroy(ev);
	if (q)
		rd_kafka_queue_destroy(q);
	for (size_t i = 0; i < made; i++)
		rd_kafka_NewTopic_destroy(nt[i]);
	rd_kafka_destroy(rk);
	return rc;
}

int tbx_cli_delete_topics(const char *bootstraps, const char *const *names,
			  size_t cnt, int timeout_ms, char *errstr,
			  size_t errstr_size)
{
	long long deadline = now_ms() + timeout_ms;
	rd_kafka_t *rk = admin_client(bootstraps, errstr, errstr_size);
	rd_kafka_DeleteTopic_t *dt[256];
	rd_kafka_queue_t *q = NULL;
	rd_kafka_event_t *ev = NULL;
	size_t made = 0;
	int rc = -1;

	if (!rk)
		return -1;
	if (cnt == 0) {
		rc = 0;
		goto out;
	}
	if (cnt > sizeof(dt) / sizeof(dt[0])) {
		snprintf(errstr, errstr_size, "too many topics at once");
		goto out;
	}
	for (; made < cnt; made++)
		dt[made] = rd_kafka_DeleteTopic_new(names[made]);
	q = rd_kafka_queue_new(rk);
	rd_kafka_DeleteTopics(rk, dt, cnt, NULL, q);
	if (!(ev = admin_wait(q, deadline))) {
		snprintf(errstr, errstr_size,
			 "no answer from %s to DeleteTopics", bootstraps);
		goto out;
	}
	if (rd_kafka_event_error(ev)) {
		snprintf(errstr, errstr_size, "DeleteTopics: %s",
			 rd_kafka_event_error_string(ev));
		goto out;
	}
	{
		const rd_kafka_DeleteTopics_result_t *res =
		    rd_kafka_event_DeleteTopics_result(ev);
		size_t n = 0;
		const rd_kafka_topic_result_t **tr =
		    rd_kafka_DeleteTopics_result_topics(res, &n);
		for (size_t i = 0; i < n; i++) {
			rd_kafka_resp_err_t err =
			    rd_kafka_topic_result_error(tr[i]);
			if (err &&
			    err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
				snprintf(
				    errstr, errstr_size,
				    "cannot delete topic %s: %s",
				    rd_kafka_topic_result_name(tr[i]),
				    rd_kafka_topic_result_error_string(tr[i]));
				goto out;
			}
		}
	}
	rc = settle(rk, names, NULL, cnt, 0, deadline, errstr, errstr_size);
out:
	if (ev)
		rd_kafka_event_destroy(ev);
	if (q)
		rd_kafka_queue_destroy(q);
	for (size_t i = 0; i < made; i++)
		rd_kafka_DeleteTopic_destroy(dt[i]);
	rd_kafka_destroy(rk);
	return rc;
}

/* One DeleteGroups round: @returns the groups left non-empty, or -1. */
static int delete_groups_once(rd_kafka_t *rk, const char *const *names,
			      size_t cnt, long long deadline, char *errstr,
			      size_t errstr_size)
{
	rd_kafka_DeleteGroup_t *dg[256];
	rd_kafka_queue_t *q;
	rd_kafka_event_t *ev;
	size_t n = 0;
	int non_empty = 0;

	for (; n < cnt && n < sizeof(dg) / sizeof(dg[0]); n++)
		dg[n] = rd_kafka_DeleteGroup_new(names[n]);
	q = rd_kafka_queue_new(rk);
	rd_kafka_DeleteGroups(rk, dg, n, NULL, q);
	rd_kafka_DeleteGroup_destroy_array(dg, n);
	if (!(ev = admin_wait(q, deadline))) {
		rd_kafka_queue_destroy(q);
		snprintf(errstr, errstr_size, "no answer to DeleteGroups");
		return -1;
	}
	if (rd_kafka_event_error(ev)) {
		snprintf(errstr, errstr_size, "DeleteGroups: %s",
			 rd_kafka_event_error_string(ev));
		non_empty = -1;
	} else {
		size_t rn = 0;
		const rd_kafka_group_result_t **gr =
		    rd_kafka_DeleteGroups_result_groups(
			rd_kafka_event_DeleteGroups_result(ev), &rn);
		for (size_t i = 0; i < rn && non_empty >= 0; i++) {
			const rd_kafka_error_t *ge =
			    rd_kafka_group_result_error(gr[i]);
			rd_kafka_resp_err_t err =
			    ge ? rd_kafka_error_code(ge)
			       : RD_KAFKA_RESP_ERR_NO_ERROR;
			if (err == RD_KAFKA_RESP_ERR_NON_EMPTY_GROUP) {
				non_empty++;
				snprintf(errstr, errstr_size,
					 "consumer group %s stays non-empty",
					 rd_kafka_group_result_name(gr[i]));
			} else if (err &&
				   err !=
				       RD_KAFKA_RESP_ERR_GROUP_ID_NOT_FOUND) {
				snprintf(errstr, errstr_size,
					 "cannot delete consumer group %s: %s",
					 rd_kafka_group_result_name(gr[i]),
					 rd_kafka_error_string(ge));
				non_empty = -1;
			}
		}
	}
	rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(q);
	return non_empty;
}

int tbx_cli_delete_groups(const char *bootstraps, const char *const *names,
			  size_t cnt, int timeout_ms, char *errstr,
			  size_t errstr_size)
{
	long long deadline = now_ms() + timeout_ms;
	rd_kafka_t *rk = admin_client(bootstraps, errstr, errstr_size);
	int rc = -1;

	if (!rk)
		return -1;
	for (;;) {
		const struct rd_kafka_group_list *list = NULL;
		const char *all[256];
		size_t n = 0;
		int left;
		/* Only groups the cluster lists: DeleteGroups of one that
		 * does not exist waits for a coordinator, which a fresh
		 * cluster without __consumer_offsets never has. */
		rd_kafka_resp_err_t err =
		    rd_kafka_list_groups(rk, NULL, &list, 10000);

		if (err) {
			snprintf(errstr, errstr_size,
				 "cannot list the consumer groups: %s",
				 rd_kafka_err2str(err));
			break;
		}
		for (int i = 0;
		     i < list->group_cnt && n < sizeof(all) / sizeof(all[0]);
		     i++) {
			int wanted = !names;
			for (size_t j = 0; j < cnt && !wanted; j++)
				wanted = strcmp(names[j],
						list->groups[i].group) == 0;
			if (wanted)
				all[n++] = list->groups[i].group;
		}
		left = n ? delete_groups_once(rk, all, n, deadline, errstr,
					      errstr_size)
			 : 0;
		if (list)
			rd_kafka_group_list_destroy(list);
		if (left <= 0) {
			rc = left;
			break;
		}
		if (now_ms() >= deadline)
			break;
		struct timespec ts = {0, 200 * 1000000L};
		nanosleep(&ts, NULL);
	}
	rd_kafka_destroy(rk);
	return rc;
}
