/*
 * `inspect dead-letters replay` and the Kafka half of `dead-letters show`
 * (tools/inspect.h): reading a dead-letter topic from its beginning.
 *
 * A dead letter carries its origin in tbx-dlq-topic, -partition and
 * -offset; the service store's tbx_dead_letters rows say which group
 * recorded it.  Replay re-publishes the dead letters one group recorded to
 * their original topic with a fresh id and a token minted for that group
 * only (tbx__publish_replay): the other groups subscribed to the topic
 * handled the original and drop the replay as a duplicate.
 *
 * When several groups consume one topic and share its dead-letter topic,
 * each that dead-lettered a record sent a dead letter of the same origin
 * (and a dead letter can be dispatched twice).  tbx-dlq-group names the
 * group that sent it: a copy naming another group is never taken for
 * this one.  A copy without it (from a tokenbox older than the header)
 * may be any group's and is taken as before, as the first copy of its
 * origin.  What the group recorded is one dead letter per origin, so an
 * origin is replayed once per run, from the first of its copies that is
 * the group's own or unnamed (they carry the same key, payload, type and
 * non-tbx headers: the replay is the same from either), and its caller id
 * on the ingress edge is made of the group and the origin,
 * "replay:<group>:<partition>:<offset>" on the origin topic: a second
 * replay within ingress.dedup.window.ms, from any copy, is a natural
 * duplicate and is not sent again, while another group's replay of the
 * same record is its own.
 *
 * A dead letter the group recorded and the topic does not hold (still
 * pending dispatch, removed by retention, the topic recreated, or given
 * up as undeliverable) cannot be replayed: after the read, the recorded
 * ones whose origin was not found are named on standard error (the first
 * REPLAY_MISSING_SHOWN), counted in the summary line, and the exit status
 * is INSPECT_EXIT_NOT_REPLAYED.
 */
#include <inttypes.h>
#include <strings.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/str.h"
#include "consumer/publish.h"
#include "consumer/conf.h"
#include "tools/cli.h"
#include "tools/inspect.h"

/* The longest tbx-type (TBX_TYPE_MAX of the receivers). */
#define REPLAY_TYPE_MAX 255

/* Bounds on the waits for the brokers, ms. */
#define REPLAY_META_MS 10000
#define REPLAY_READ_MS 30000

/* Recorded dead letters missing from the topic named one per line; the
 * rest are counted. */
#define REPLAY_MISSING_SHOWN 10

tbx_conf_t *insp_kafka_conf(insp_t *in)
{
	const insp_opts_t *o = in->o;
	tbx_conf_t *conf = tbx_conf_new();
	char errstr[512];

	if (!conf) {
		tbx_cli_usage(INSPECT_CMD, "out of memory");
		return NULL;
	}
	if (tbx_cli_conf_apply(INSPECT_CMD, &o->conf, conf)) {
		tbx_conf_destroy(conf);
		return NULL;
	}
	if (o->servers && tbx_conf_set(conf, "kafka.bootstrap.servers",
				       o->servers, errstr, sizeof(errstr))) {
		tbx_cli_usage(INSPECT_CMD, "%s", errstr);
		tbx_conf_destroy(conf);
		return NULL;
	}
	if (!tbx_conf_get(conf, "kafka.bootstrap.servers")) {
		tbx_cli_usage(INSPECT_CMD,
			      "%s: --bootstrap-servers is required (or "
			      "kafka.bootstrap.servers in the configuration)",
			      o->cmd_name);
		tbx_conf_destroy(conf);
		return NULL;
	}
	return conf;
}

/* A reader of every record of one topic, up to its end when it started. */
typedef struct dlq_reader {
	rd_kafka_t *rk;
	rd_kafka_topic_partition_list_t *parts;
	int64_t *high; /* per partition: the end to read to */
	int *done;
	int left;
} dlq_reader_t;

static void reader_close(dlq_reader_t *r)
{
	if (r->rk) {
		rd_kafka_consumer_close(r->rk);
		rd_kafka_destroy(r->rk);
	}
	if (r->parts)
		rd_kafka_topic_partition_list_destroy(r->parts);
	free(r->high);
	free(r->done);
	memset(r, 0, sizeof(*r));
}

/* Opens a reader of o->topic.  @returns 0 or an exit status (reported). */
static int reader_open(insp_t *in, dlq_reader_t *r)
{
	const char *topic = in->o->topic;
	char errstr[512], group[64];
	const struct rd_kafka_metadata *md = NULL;
	tbx_conf_t *conf = insp_kafka_conf(in);
	rd_kafka_conf_t *kc;
	rd_kafka_resp_err_t err;
	int pcnt = -1, rc = INSPECT_EXIT_ERROR;

	memset(r, 0, sizeof(*r));
	if (!conf)
		return INSPECT_EXIT_ERROR;
	kc = tbx__conf_kafka(conf, "consumer", errstr, sizeof(errstr));
	tbx_conf_destroy(conf);
	if (!kc)
		return tbx_cli_usage(INSPECT_CMD, "%s", errstr);
	/* Partitions are assigned, never subscribed: the group only names
	 * the client, and no offset is committed. */
	snprintf(group, sizeof(group), "tokenbox-inspect-%ld", (long)getpid());
	if (rd_kafka_conf_set(kc, "group.id", group, errstr, sizeof(errstr)) ||
	    rd_kafka_conf_set(kc, "enable.auto.commit", "false", errstr,
			      sizeof(errstr)) ||
	    rd_kafka_conf_set(kc, "enable.partition.eof", "true", errstr,
			      sizeof(errstr))) {
		rd_kafka_conf_destroy(kc);
		return tbx_cli_usage(INSPECT_CMD, "%s", errstr);
	}
	if (!(r->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, errstr,
				   sizeof(errstr)))) {
		rd_kafka_conf_destroy(kc);
		return tbx_cli_usage(INSPECT_CMD, "%s", errstr);
	}
	err = rd_kafka_metadata(r->rk, 1, NULL, &md, REPLAY_META_MS);
	if (err) {
		rc = tbx_cli_usage(INSPECT_CMD,
				   "%s: cannot read the metadata: %s",
				   in->o->cmd_name, rd_kafka_err2str(err));
		goto fail;
	}
	for (int i = 0; i < md->topic_cnt; i++)
		if (strcmp(md->topics[i].topic, topic) == 0 &&
		    !md->topics[i].err)
			pcnt = md->topics[i].partition_cnt;
	rd_kafka_metadata_destroy(md);
	if (pcnt < 0) {
		rc = tbx_cli_usage(INSPECT_CMD, "%s: topic %s does not exist",
				   in->o->cmd_name, topic);
		goto fail;
	}
	r->parts = rd_kafka_topic_partition_list_new(pcnt);
	r->high = calloc((size_t)pcnt + 1, sizeof(*r->high));
	r->done = calloc((size_t)pcnt + 1, sizeof(*r->done));
	if (!r->parts || !r->high || !r->done) {
		rc = tbx_cli_usage(INSPECT_CMD, "out of memory");
		goto fail;
	}
	for (int p = 0; p < pcnt; p++) {
		int64_t low = 0;

		err = rd_kafka_query_watermark_offsets(
		    r->rk, topic, p, &low, &r->high[p], REPLAY_META_MS);
		if (err) {
			rc = tbx_cli_usage(INSPECT_CMD,
					   "%s: %s [%d]: cannot read the "
					   "offsets: %s",
					   in->o->cmd_name, topic, p,
					   rd_kafka_err2str(err));
			goto fail;
		}
		r->done[p] = r->high[p] <= low;
		r->left += !r->done[p];
		rd_kafka_topic_partition_list_add(r->parts, topic, p)->offset =
		    RD_KAFKA_OFFSET_BEGINNING;
	}
	if ((err = rd_kafka_assign(r->rk, r->parts))) {
		rc = tbx_cli_usage(INSPECT_CMD, "%s: %s", in->o->cmd_name,
				   rd_kafka_err2str(err));
		goto fail;
	}
	return 0;
fail:
	reader_close(r);
	return rc;
}

/*
 * The next record below the ends, or NULL when every partition is read
 * (*rc 0) or on an error (*rc an exit status, reported).  The caller
 * destroys the record.
 */
static rd_kafka_message_t *reader_next(insp_t *in, dlq_reader_t *r, int *rc)
{
	int64_t deadline = tbx__now_ms() + REPLAY_READ_MS;

	*rc = 0;
	while (r->left > 0) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(r->rk, 100);
		int p;

		if (!m) {
			if (tbx__now_ms() < deadline)
				continue;
			*rc = tbx_cli_usage(
			    INSPECT_CMD, "%s: %s: no record within %d ms",
			    in->o->cmd_name, in->o->topic, REPLAY_READ_MS);
			return NULL;
		}
		deadline = tbx__now_ms() + REPLAY_READ_MS;
		p = m->partition;
		if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
			*rc = tbx_cli_usage(INSPECT_CMD, "%s: %s: %s",
					    in->o->cmd_name, in->o->topic,
					    rd_kafka_message_errstr(m));
			rd_kafka_message_destroy(m);
			return NULL;
		}
		if (p < 0 || p >= r->parts->cnt || r->done[p]) {
			rd_kafka_message_destroy(m);
			continue;
		}
		if (m->err || m->offset + 1 >= r->high[p]) {
			r->done[p] = 1;
			r->left--;
		}
		if (m->err || m->offset >= r->high[p]) {
			rd_kafka_message_destroy(m);
			continue;
		}
		return m;
	}
	return NULL;
}

/* Header @p name of @p m as a NUL-terminated copy in @p buf ("" when
 * absent or too long). */
static const char *hdr(const rd_kafka_message_t *m, const char *name, char *buf,
		       size_t size)
{
	rd_kafka_headers_t *h = NULL;
	const void *v;
	size_t len;

	buf[0] = '\0';
	if (rd_kafka_message_headers(m, &h) || !h ||
	    rd_kafka_header_get_last(h, name, &v, &len) || !v || len >= size)
		return buf;
	memcpy(buf, v, len);
	buf[len] = '\0';
	return buf;
}

/* The origin of a dead letter.  @returns 1 when its headers carry one. */
static int origin(const rd_kafka_message_t *m, char *topic, size_t size,
		  int64_t *partition, int64_t *offset)
{
	char num[32];
	char *end;

	if (!*hdr(m, "tbx-dlq-topic", topic, size))
		return 0;
	*partition =
	    strtoll(hdr(m, "tbx-dlq-partition", num, sizeof(num)), &end, 10);
	if (!num[0] || *end)
		return 0;
	*offset = strtoll(hdr(m, "tbx-dlq-offset", num, sizeof(num)), &end, 10);
	return num[0] && !*end;
}

/* Whose dead letter @p m is, for group @p grp (tbx-dlq-group). */
typedef enum copy_of {
	COPY_OWN,     /* it names @p grp */
	COPY_UNNAMED, /* no tbx-dlq-group: a tokenbox older than it */
	COPY_OTHER,   /* it names another group (or none, with an empty or
			 null value) */
} copy_of_t;

static copy_of_t copy_of(const rd_kafka_message_t *m, const char *grp)
{
	rd_kafka_headers_t *h = NULL;
	const void *v;
	size_t len;

	if (rd_kafka_message_headers(m, &h) || !h ||
	    rd_kafka_header_get_last(h, "tbx-dlq-group", &v, &len))
		return COPY_UNNAMED;
	if (v && len == strlen(grp) && memcmp(v, grp, len) == 0)
		return COPY_OWN;
	return COPY_OTHER;
}

/* 1 when group @p grp recorded the dead letter of this origin in S. */
static int recorded_by(insp_t *in, const char *grp, const char *topic,
		       int64_t partition, int64_t offset, int *found)
{
	int err = tbx_outbox_dead_letter_recorded(
	    in->store, grp, topic, partition, offset, in->o->topic, found);

	return err ? (insp_s_fail(in, err), -1) : 0;
}

typedef struct first_group {
	char *grp;
	int n, oom;
} first_group_t;

static int count_group(void *opaque, const char *grp)
{
	first_group_t *f = opaque;

	if (f->n++ == 0 && !(f->grp = tbx__strdup(grp)))
		f->oom = 1;
	return 0;
}

/* The group whose dead letters are replayed: --group, or the only group
 * with dead letters of --topic in the store.  @returns 0 or an exit
 * status. */
static int replay_group(insp_t *in, char **grp)
{
	first_group_t f = {NULL, 0, 0};
	int err;

	if (in->o->group_cnt) {
		*grp = tbx__strdup(in->o->groups[0]);
		return *grp ? 0 : tbx_cli_usage(INSPECT_CMD, "out of memory");
	}
	*grp = NULL;
	if ((err = tbx_outbox_dead_letter_groups(in->store, in->o->topic,
						 count_group, &f))) {
		free(f.grp);
		return insp_s_fail(in, err);
	}
	if (f.n == 1 && f.grp) {
		*grp = f.grp;
		return 0;
	}
	free(f.grp);
	if (f.n == 0)
		return tbx_cli_usage(INSPECT_CMD,
				     "dead-letters replay: the store records "
				     "no dead letter sent to %s",
				     in->o->topic);
	if (f.oom)
		return tbx_cli_usage(INSPECT_CMD, "out of memory");
	return tbx_cli_usage(INSPECT_CMD,
			     "dead-letters replay: several groups sent dead "
			     "letters to %s: name one with --group",
			     in->o->topic);
}

/* 1 when @p grp is subscribed to @p topic in the token store. */
static int subscribed(insp_t *in, const char *topic, const char *grp, int *yes)
{
	int64_t since;
	int err = tbx_tokens_subscription(in->tokens, topic, grp, &since);

	if (err && err != TBX_ENOENT)
		return -1;
	*yes = !err;
	return 0;
}

/* The origins taken in this run: a set of "<partition>:<offset>:<topic>"
 * strings (open addressing, FNV-1a). */
typedef struct origins {
	char **slot;
	size_t cap, cnt;
} origins_t;

static uint64_t origin_hash(const char *key)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *key; key++)
		h = (h ^ (unsigned char)*key) * 1099511628211ULL;
	return h;
}

static void origins_free(origins_t *o)
{
	for (size_t i = 0; i < o->cap; i++)
		free(o->slot[i]);
	free(o->slot);
	memset(o, 0, sizeof(*o));
}

/* Puts @p key in @p o.  @returns 1 when it was new, 0 when it was there,
 * -1 when out of memory. */
static int origins_add(origins_t *o, const char *key)
{
	size_t i;

	if (2 * (o->cnt + 1) > o->cap) {
		origins_t grown = {NULL, o->cap ? 2 * o->cap : 64, 0};

		if (!(grown.slot = calloc(grown.cap, sizeof(*grown.slot))))
			return -1;
		for (size_t j = 0; j < o->cap; j++) {
			if (!o->slot[j])
				continue;
			i = origin_hash(o->slot[j]) & (grown.cap - 1);
			while (grown.slot[i])
				i = (i + 1) & (grown.cap - 1);
			grown.slot[i] = o->slot[j];
			grown.cnt++;
		}
		free(o->slot);
		*o = grown;
	}
	i = origin_hash(key) & (o->cap - 1);
	for (; o->slot[i]; i = (i + 1) & (o->cap - 1))
		if (strcmp(o->slot[i], key) == 0)
			return 0;
	if (!(o->slot[i] = tbx__strdup(key)))
		return -1;
	o->cnt++;
	return 1;
}

/* 1 when @p key is in @p o. */
static int origins_has(const origins_t *o, const char *key)
{
	if (!o->cap)
		return 0;
	for (size_t i = origin_hash(key) & (o->cap - 1); o->slot[i];
	     i = (i + 1) & (o->cap - 1))
		if (strcmp(o->slot[i], key) == 0)
			return 1;
	return 0;
}

/* The key of an origin in an origins_t. */
static void origin_key(const char *topic, int64_t partition, int64_t offset,
		       char *out, size_t size)
{
	snprintf(out, size, "%" PRId64 ":%" PRId64 ":%s", partition, offset,
		 topic);
}

/* The caller id of @p grp's replay of origin (@p partition, @p offset)
 * (the topic is the edge's other key): "replay:<group>:<partition>:
 * <offset>", with the group's SHA-256 in hex for a group too long to fit
 * TBX_CALLER_ID_MAX. */
static void replay_caller_id(const char *grp, int64_t partition, int64_t offset,
			     char *out, size_t size)
{
	char hex[2 * TBX_SHA256_LEN + 8];
	int n = snprintf(out, size, "replay:%s:%" PRId64 ":%" PRId64, grp,
			 partition, offset);

	if (n >= 0 && (size_t)n < size && n <= TBX_CALLER_ID_MAX)
		return;
	{
		tbx__sha256_t h;
		uint8_t sum[TBX_SHA256_LEN];

		tbx__sha256_init(&h);
		tbx__sha256_update(&h, grp, strlen(grp));
		tbx__sha256_final(&h, sum);
		memcpy(hex, "sha256-", 7);
		for (size_t i = 0; i < TBX_SHA256_LEN; i++)
			snprintf(hex + 7 + 2 * i, 3, "%02x", sum[i]);
	}
	snprintf(out, size, "replay:%s:%" PRId64 ":%" PRId64, hex, partition,
		 offset);
}

typedef struct replayed {
	size_t sent, again, skipped, copies, failed, missing;
} replayed_t;

/* The replays queued since the last flush, at most REPLAY_BATCH. */
#define REPLAY_BATCH 500

typedef struct queued_origin {
	char topic[TBX_TOPIC_MAX + 1];
	int64_t partition, offset;
} queued_origin_t;

/* Flushes the @p queued replays (of the origins @p q) and counts their
 * outcomes; each that went out, now or before, is recorded as replayed
 * in @p wstore (the service store, opened for writing), so that
 * `dead-letters list` tells it from a dead letter not replayed.
 * @returns 0 or an exit status. */
static int replay_flush(insp_t *in, tbx_outbox_t *wstore, const char *grp,
			tbx_publisher_t *pub, const queued_origin_t *q,
			size_t queued, replayed_t *res)
{
	size_t failed = 0;
	int64_t now = tbx__now_ms();
	int err = TBX_OK, serr;

	if (!queued)
		return 0;
	for (int i = 0; i < 3; i++)
		if (!(err = tbx_publisher_flush(pub, &failed)) ||
		    err == TBX_EEXIST)
			break;
	for (size_t i = 0; i < queued; i++) {
		switch (tbx_publisher_outcome(pub, i, NULL)) {
		case TBX_OUTCOME_SENT:
		case TBX_OUTCOME_RESENT:
			res->sent++;
			break;
		case TBX_OUTCOME_DUPLICATE:
			res->again++;
			break;
		default:
			res->failed++;
			continue;
		}
		if ((serr = tbx_outbox_dead_letter_replayed(
			 wstore, grp, q[i].topic, q[i].partition, q[i].offset,
			 in->o->topic, now)))
			return insp_store_fail(in->s.name, serr,
					       tbx_outbox_errmsg(wstore));
	}
	if (err && err != TBX_EEXIST)
		return tbx_cli_usage(INSPECT_CMD, "dead-letters replay: %s",
				     tbx_publisher_errstr(pub));
	return 0;
}

/* Queues the replay of dead letter @p m (from @p topic, @p partition,
 * @p offset). */
static int replay_one(insp_t *in, tbx_publisher_t *pub, const char *grp,
		      const rd_kafka_message_t *m, const char *topic,
		      int64_t partition, int64_t offset)
{
	rd_kafka_headers_t *hs = NULL;
	tbx_header_t *extra = NULL;
	size_t cnt = 0, n = 0;
	char type[REPLAY_TYPE_MAX + 1], dlq_id[TBX_MSGID_MAX + 1],
	    own_id[TBX_MSGID_MAX + 1], caller[TBX_CALLER_ID_MAX + 1];
	const char *name;
	const void *v;
	size_t len;
	int err;

	if (!rd_kafka_message_headers(m, &hs) && hs)
		cnt = rd_kafka_header_cnt(hs);
	if (cnt && !(extra = calloc(cnt, sizeof(*extra))))
		return TBX_ENOMEM;
	for (size_t i = 0; i < cnt; i++) {
		if (rd_kafka_header_get_all(hs, i, &name, &v, &len))
			break;
		if (strncasecmp(name, "tbx-", 4) == 0)
			continue; /* ours: tbx-id, tbx-dlq-*, ... */
		extra[n++] = (tbx_header_t){name, v, len};
	}
	hdr(m, "tbx-type", type, sizeof(type));
	hdr(m, "tbx-dlq-id", dlq_id, sizeof(dlq_id));
	if (!*hdr(m, "tbx-id", own_id, sizeof(own_id)))
		snprintf(own_id, sizeof(own_id), "%s:%" PRId32 ":%" PRId64,
			 in->o->topic, m->partition, m->offset);
	replay_caller_id(grp, partition, offset, caller, sizeof(caller));
	tbx_out_t out = {.topic = topic,
			 .type = *type ? type : "tbx.dead-letter",
			 .key = m->key,
			 .key_len = m->key ? m->key_len : 0,
			 .payload = m->payload,
			 .payload_len = m->payload ? m->len : 0,
			 .headers = extra,
			 .header_cnt = n};
	err = tbx__publish_replay(pub, &out, caller, *dlq_id ? dlq_id : own_id,
				  grp);
	free(extra);
	return err;
}

/* The search for the dead letters the group recorded and the read did
 * not find. */
typedef struct missing {
	insp_t *in;
	const char *grp;
	origins_t *taken;	 /* the origins found (the reported ones are
				    added) */
	const origins_t *others; /* origins of which only other groups'
				    copies were found */
	size_t cnt;
	int oom;
} missing_t;

static int missing_one(void *opaque, const tbx__dl_rec_t *d)
{
	missing_t *ms = opaque;
	const char *topic = ms->in->o->topic;
	char key[TBX_TOPIC_MAX + 48];
	const char *why;

	if (strcmp(d->dlq_topic, topic) != 0)
		return 0;
	origin_key(d->in_topic, d->in_partition, d->in_offset, key,
		   sizeof(key));
	if (origins_has(ms->taken, key))
		return 0;
	if (origins_add(ms->taken, key) < 0) { /* one line per origin */
		ms->oom = 1;
		return 1;
	}
	if (++ms->cnt > REPLAY_MISSING_SHOWN)
		return 0;
	if (d->pending)
		why = "its outbox row is pending (not dispatched yet)";
	else if (origins_has(ms->others, key))
		why = "only other groups' dead letters of that record are "
		      "there (its own was removed, or undeliverable: see "
		      "'undelivered list')";
	else
		why = "removed since it was sent (retention, or the topic "
		      "deleted and created again), or undeliverable (see "
		      "'undelivered list')";
	tbx_cli_note(INSPECT_CMD,
		     "warning: dead-letters replay: dead letter %lld of %s "
		     "(%s [%lld] @%lld) is not in %s: %s; not replayed",
		     (long long)d->id, ms->grp, d->in_topic,
		     (long long)d->in_partition, (long long)d->in_offset, topic,
		     why);
	return 0;
}

/* Names on standard error the dead letters of @p grp sent to --topic
 * whose origin is not in @p taken, and counts them in res->missing.
 * @returns 0 or an exit status. */
static int report_missing(insp_t *in, const char *grp, origins_t *taken,
			  const origins_t *others, replayed_t *res)
{
	const char *const groups[] = {grp};
	tbx__filter_t f = TBX_FILTER_ALL;
	missing_t ms = {in, grp, taken, others, 0, 0};
	int64_t total = 0;
	int err;

	f.groups = groups;
	f.group_cnt = 1;
	err = tbx_outbox_dead_letters_list(in->store, &f, &total, missing_one,
					   &ms);
	if (err)
		return insp_s_fail(in, err);
	if (ms.oom)
		return tbx_cli_usage(INSPECT_CMD, "out of memory");
	if (ms.cnt > REPLAY_MISSING_SHOWN)
		tbx_cli_note(INSPECT_CMD,
			     "warning: dead-letters replay: and %zu more dead "
			     "letters of %s not in %s",
			     ms.cnt - REPLAY_MISSING_SHOWN, grp, in->o->topic);
	res->missing = ms.cnt;
	return 0;
}

int insp_dl_replay(insp_t *in)
{
	const insp_opts_t *o = in->o;
	dlq_reader_t r;
	tbx_publisher_t *pub = NULL;
	tbx_outbox_t *wstore = NULL;
	queued_origin_t *q = NULL;
	tbx_conf_t *conf = NULL;
	replayed_t res = {0};
	rd_kafka_message_t *m;
	origins_t taken = {NULL, 0, 0}, others = {NULL, 0, 0};
	char *grp = NULL, errstr[512], topic[TBX_TOPIC_MAX + 1],
	     key[TBX_TOPIC_MAX + 48];
	int64_t partition, offset;
	size_t queued = 0, considered = 0;
	int rc, found, yes, err, fresh;
	copy_of_t whose;

	memset(&r, 0, sizeof(r));
	if ((rc = replay_group(in, &grp)))
		return rc;
	if (!(q = calloc(REPLAY_BATCH, sizeof(*q)))) {
		rc = tbx_cli_usage(INSPECT_CMD, "out of memory");
		goto out;
	}
	/* Where the replays are recorded (tbx_dead_letters.replayed_ms). */
	if ((rc = insp_open_write(in, 1, &wstore, NULL)))
		goto out;
	if (!(conf = insp_kafka_conf(in))) {
		rc = INSPECT_EXIT_ERROR;
		goto out;
	}
	if (tbx_cli_store_conf_tokens(&in->t, conf, errstr, sizeof(errstr)) ||
	    tbx_conf_set(conf, "log.level", "error", errstr, sizeof(errstr))) {
		rc = tbx_cli_usage(INSPECT_CMD, "%s", errstr);
		goto out;
	}
	if (!(pub = tbx_publisher_new(conf, errstr, sizeof(errstr)))) {
		rc = tbx_cli_usage(INSPECT_CMD, "dead-letters replay: %s",
				   errstr);
		goto out;
	}
	conf = NULL;
	tbx__log_setup(TBX_LOG_ERR - 1, INSPECT_CMD);
	if ((rc = reader_open(in, &r)))
		goto out;
	while ((m = reader_next(in, &r, &rc))) {
		if (!origin(m, topic, sizeof(topic), &partition, &offset)) {
			res.skipped++; /* not a dead letter */
			rd_kafka_message_destroy(m);
			continue;
		}
		if (recorded_by(in, grp, topic, partition, offset, &found)) {
			rd_kafka_message_destroy(m);
			rc = INSPECT_EXIT_ERROR; /* reported */
			goto out;
		}
		whose = copy_of(m, grp);
		origin_key(topic, partition, offset, key, sizeof(key));
		if (!found || whose == COPY_OTHER) {
			/* Another group's: of a record this one did not
			 * dead-letter, or its own dead letter of one this
			 * one did (remembered for report_missing()). */
			res.skipped++;
			rd_kafka_message_destroy(m);
			if (found && origins_add(&others, key) < 0) {
				rc =
				    tbx_cli_usage(INSPECT_CMD, "out of memory");
				goto out;
			}
			continue;
		}
		/* One replay per origin the group recorded: another copy is
		 * the same dead letter dispatched twice, or an unnamed one
		 * (another group's from an older tokenbox, perhaps). */
		if ((fresh = origins_add(&taken, key)) < 0) {
			rd_kafka_message_destroy(m);
			rc = tbx_cli_usage(INSPECT_CMD, "out of memory");
			goto out;
		}
		if (!fresh) {
			res.copies++;
			rd_kafka_message_destroy(m);
			continue;
		}
		if (o->limit && (long long)considered >= o->limit) {
			rd_kafka_message_destroy(m);
			continue;
		}
		considered++;
		if (subscribed(in, topic, grp, &yes) || !yes) {
			tbx_cli_note(
			    INSPECT_CMD,
			    "warning: dead-letters replay: %s [%" PRId32
			    "] @%" PRId64 ": %s is not subscribed "
			    "to %s in the token store: not replayed "
			    "(it would be dropped as a duplicate)",
			    o->topic, m->partition, m->offset, grp, topic);
			res.failed++;
			rd_kafka_message_destroy(m);
			continue;
		}
		err = replay_one(in, pub, grp, m, topic, partition, offset);
		rd_kafka_message_destroy(m);
		if (err) {
			rc = tbx_cli_usage(INSPECT_CMD,
					   "dead-letters replay: %s",
					   tbx_strerror(err));
			goto out;
		}
		tbx__strlcpy(q[queued].topic, topic, sizeof(q[queued].topic));
		q[queued].partition = partition;
		q[queued].offset = offset;
		if (++queued == REPLAY_BATCH) {
			if ((rc = replay_flush(in, wstore, grp, pub, q, queued,
					       &res)))
				goto out;
			queued = 0;
		}
	}
	if (rc || (rc = replay_flush(in, wstore, grp, pub, q, queued, &res)) ||
	    (rc = report_missing(in, grp, &taken, &others, &res)))
		goto out;
	printf("replayed %zu dead letters of %s from %s", res.sent, grp,
	       o->topic);
	if (res.again)
		printf(", %zu replayed before (not sent again)", res.again);
	if (res.skipped)
		printf(", %zu records of other groups skipped", res.skipped);
	if (res.copies)
		printf(", %zu more copies of them skipped (sent twice, or "
		       "without tbx-dlq-group: another group's from an older "
		       "tokenbox)",
		       res.copies);
	if (res.missing)
		printf(", %zu recorded dead letters not found in %s",
		       res.missing, o->topic);
	printf("\n");
	fflush(stdout);
	rc = INSPECT_EXIT_OK;
	if (res.failed || res.missing) {
		tbx_cli_note(INSPECT_CMD,
			     "warning: dead-letters replay: %zu dead letters "
			     "of %s not replayed",
			     res.failed + res.missing, grp);
		rc = INSPECT_EXIT_NOT_REPLAYED;
	}
out:
	reader_close(&r);
	tbx_publisher_destroy(pub);
	tbx_outbox_close(wstore);
	free(q);
	tbx_conf_destroy(conf);
	origins_free(&taken);
	origins_free(&others);
	free(grp);
	return rc;
}

/* Prints dead letter @p m of the dead-letter topic. */
static void record_print(insp_t *in, const rd_kafka_message_t *m)
{
	rd_kafka_headers_t *hs = NULL;
	const char *name;
	const void *v;
	size_t len, cnt = 0;
	char at[64];

	printf("\n");
	snprintf(at, sizeof(at), "%s [%" PRId32 "] @%" PRId64, in->o->topic,
		 m->partition, m->offset);
	insp_kv("record", at, 0);
	insp_bytes_print("key", m->key, m->key_len, 2, 0, "(none)");
	insp_bytes_print("payload", m->payload, m->len, 2, 0, "(null)");
	if (!rd_kafka_message_headers(m, &hs) && hs)
		cnt = rd_kafka_header_cnt(hs);
	snprintf(at, sizeof(at), "%zu", cnt);
	insp_kv("headers", at, 2);
	for (size_t i = 0; i < cnt; i++)
		if (!rd_kafka_header_get_all(hs, i, &name, &v, &len))
			insp_bytes_print(name, v, len, 4, 20, "(null)");
}

int insp_dl_record_print(insp_t *in, const char *grp, const char *in_topic,
			 int64_t partition, int64_t offset)
{
	dlq_reader_t r;
	rd_kafka_message_t *m, *unnamed = NULL;
	char topic[TBX_TOPIC_MAX + 1];
	int64_t p, o;
	size_t others = 0;
	int rc, shown = 0;

	if ((rc = reader_open(in, &r)))
		return rc;
	/* The group's own copy; else the first without tbx-dlq-group (an
	 * older tokenbox's, perhaps another group's); never another
	 * group's. */
	while (!shown && (m = reader_next(in, &r, &rc))) {
		if (!origin(m, topic, sizeof(topic), &p, &o) ||
		    strcmp(topic, in_topic) != 0 || p != partition ||
		    o != offset) {
			rd_kafka_message_destroy(m);
			continue;
		}
		switch (copy_of(m, grp)) {
		case COPY_OWN:
			record_print(in, m);
			shown = 1;
			break;
		case COPY_UNNAMED:
			if (!unnamed) {
				unnamed = m;
				continue;
			}
			break;
		case COPY_OTHER:
			others++;
			break;
		}
		rd_kafka_message_destroy(m);
	}
	if (!rc && !shown && unnamed) {
		record_print(in, unnamed);
		printf("  (no tbx-dlq-group: written by a tokenbox older than "
		       "it, this is the first\n"
		       "   dead letter of the record in %s, perhaps another "
		       "group's)\n",
		       in->o->topic);
		shown = 1;
	}
	if (unnamed)
		rd_kafka_message_destroy(unnamed);
	reader_close(&r);
	if (rc)
		return rc;
	if (!shown && others)
		printf("\n  (no record of it in %s; other groups' dead "
		       "letters of the same record: %zu)\n",
		       in->o->topic, others);
	else if (!shown)
		printf("\n  (no record of it in %s)\n", in->o->topic);
	return 0;
}
