/*
 * `tokenbox inspect dead-letters replay`: a record one group dead-lettered
 * is re-published to its original topic and then takes effect exactly
 * once in that group — and not again in another group subscribed to the
 * topic, which handled the original — however often the replay is run.
 * `dead-letters show --topic` reads the dead letter's key, payload and
 * headers back from Kafka.
 */
#include <cjson/cJSON.h>

#include "cli_child.h"
#include "support.h"

typedef struct state {
	const char *s1, *s2;
	int64_t want1;
} state_t;

static int effects_done(void *opaque)
{
	state_t *st = opaque;

	return tt_count(st->s1, "SELECT COUNT(*) FROM hop1") >= st->want1 &&
	       tt_count(st->s2, "SELECT COUNT(*) FROM hop2") >= 2;
}

static int dead_lettered(void *opaque)
{
	state_t *st = opaque;

	return tt_count(st->s1, "SELECT COUNT(*) FROM tbx_dead_letters") >= 1 &&
	       tt_count(st->s1, "SELECT COUNT(*) FROM tbx_outbox") == 0 &&
	       tt_count(st->s2, "SELECT COUNT(*) FROM hop2") >= 2;
}

static tbx_worker_t *worker(const tt_cluster_t *c, const char *grp,
			    const char *store, const char *tokens,
			    tt_hop_t *hop)
{
	char err[256];
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(c->bootstraps, grp, store, tokens, NULL), err, sizeof(err));

	cr_assert(w, "%s", err);
	cr_assert_eq(tbx_worker_register(w, "in", "Ping", tt_hop_handle, hop),
		     TBX_OK);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK); /* subscribes */
	return w;
}

static cc_result_t replay(const tt_cluster_t *c, const char *s1,
			  const char *tokens)
{
	const char *args[] = {"inspect",     "-s",	     s1,       "-S",
			      tokens,	     "dead-letters", "replay", "-b",
			      c->bootstraps, "-t",	     "in.dlq", NULL};

	return cc_run(args);
}

/* `dead-letters list` of @p s1, as text or JSON. */
static cc_result_t dl_list(const char *s1, const char *tokens, int json)
{
	const char *args[] = {"inspect", "-s",	   s1,
			      "-S",	 tokens,   "dead-letters",
			      "list",	 "--wide", json ? "--json" : NULL,
			      NULL};

	return cc_run(args);
}

/* The STATE column of the only dead letter (line 2 of the table), and the
 * JSON's state and replayed_ms. */
static void check_state(const char *s1, const char *tokens, const char *want)
{
	cc_result_t res = dl_list(s1, tokens, 0);
	const char *line;

	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert((line = strchr(res.out, '\n')), "%s", res.out);
	cr_assert(strstr(line, "g1"), "%s", res.out);
	cr_assert(strstr(line, want), "want %s: %s", want, res.out);
	cc_result_free(&res);

	res = dl_list(s1, tokens, 1);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cJSON *doc = cJSON_Parse(res.out);
	cr_assert(doc, "%s", res.out);
	cJSON *d =
	    cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "dead_letters"), 0);
	cr_assert(d, "%s", res.out);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(d, "state")),
			 want);
	cJSON *at = cJSON_GetObjectItem(d, "replayed_ms");
	cr_assert(at, "%s", res.out);
	if (strcmp(want, "replayed") == 0)
		cr_assert(
		    cJSON_IsNumber(at) &&
			at->valuedouble >=
			    cJSON_GetObjectItem(d, "created_ms")->valuedouble,
		    "%s", res.out);
	else
		cr_assert(cJSON_IsNull(at), "%s", res.out);
	cJSON_Delete(doc);
	cc_result_free(&res);
}

/* `status` counts @p replayed dead letters replayed, of one recorded:
 * the text's header and g1's line, the JSON's total and g1's. */
static void check_status(const char *s1, const char *tokens, int64_t replayed)
{
	const char *args[] = {"inspect", "-s",	   s1,	 "-S",
			      tokens,	 "status", NULL, NULL};
	cc_result_t res = cc_run(args);
	long long rec, pend, rep;
	const char *at;
	char head[128];

	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	snprintf(head, sizeof(head),
		 "\nDead letters: 1 recorded (0 not yet dispatched, %lld "
		 "replayed)\n",
		 (long long)replayed);
	cr_assert((at = strstr(res.out, head)), "want '%s': %s", head + 1,
		  res.out);
	cr_assert((at = strstr(at + 1, "\n  g1 ")), "%s", res.out);
	cr_assert_eq(sscanf(at + 5, "%lld %lld %lld", &rec, &pend, &rep), 3,
		     "%s", res.out);
	cr_assert(rec == 1 && pend == 0 && rep == (long long)replayed, "%s",
		  res.out);
	cc_result_free(&res);

	args[6] = "--json";
	res = cc_run(args);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cJSON *doc = cJSON_Parse(res.out);
	cr_assert(doc, "%s", res.out);
	cJSON *dl = cJSON_GetObjectItem(doc, "dead_letters");
	cJSON *n = cJSON_GetObjectItem(dl, "replayed");
	cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(dl, "groups"), 0);
	cr_assert(cJSON_IsNumber(n) && (int64_t)n->valuedouble == replayed,
		  "%s", res.out);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(g, "group")),
			 "g1");
	n = cJSON_GetObjectItem(g, "replayed");
	cr_assert(cJSON_IsNumber(n) && (int64_t)n->valuedouble == replayed,
		  "%s", res.out);
	cJSON_Delete(doc);
	cc_result_free(&res);
}

Test(cli_replay, a_replayed_dead_letter_takes_effect_exactly_once,
     .timeout = 300)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "tokens.db");
	char *s1 = tt_path(dir, "s1.db");
	char *s2 = tt_path(dir, "s2.db");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop1 = {.table = "hop1", .reject = "m-1"};
	tt_hop_t hop2 = {.table = "hop2"};
	tbx_worker_t *w[2];
	state_t st = {s1, s2, 1};
	cc_result_t res;
	tt_record_t *recs;
	size_t cnt;
	const char *orig_id = NULL;
	char orig[64] = "";

	tt_cluster_topic(c, "in", 1);
	tt_cluster_topic(c, "in.dlq", 1);
	tt_hop_table(s1, "hop1");
	tt_hop_table(s2, "hop2");
	w[0] = worker(c, "g1", s1, tokens, &hop1);
	w[1] = worker(c, "g2", s2, tokens, &hop2);
	tt_publish(c->bootstraps, tokens, "in", "Ping", 2, 1, "m");
	cr_assert(tt_drive(w, 2, dead_lettered, &st, 5, 90));
	cr_assert_eq(tt_count(s1, "SELECT COUNT(*) FROM hop1"), 1);
	cnt = tt_read_topic(c->bootstraps, "in", &recs);
	for (size_t i = 0; i < cnt; i++)
		if (recs[i].payload && strcmp(recs[i].payload, "m-1") == 0)
			snprintf(orig, sizeof(orig), "%s", recs[i].id);
	tt_records_free(recs, cnt);
	cr_assert(*orig);

	/* Sent to in.dlq, not replayed yet: an operator's to look at. */
	check_state(s1, tokens, "sent");
	check_status(s1, tokens, 0);

	/* The handler is fixed; the dead letter goes back. */
	hop1.reject = NULL;
	res = replay(c, s1, tokens);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert_str_eq(res.out,
			 "replayed 1 dead letters of g1 from in.dlq\n");
	cc_result_free(&res);
	check_state(s1, tokens, "replayed");
	check_status(s1, tokens, 1);
	st.want1 = 2;
	cr_assert(tt_drive(w, 2, effects_done, &st, 10, 90));

	/* Twice: the second replay sends nothing. */
	res = replay(c, s1, tokens);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert_str_eq(res.out, "replayed 0 dead letters of g1 from in.dlq, "
				  "1 replayed before (not sent again)\n");
	cc_result_free(&res);
	check_state(s1, tokens, "replayed");
	check_status(s1, tokens, 1);
	cr_assert(tt_drive(w, 2, effects_done, &st, 10, 90));

	cr_assert_eq(tt_count(s1, "SELECT COUNT(*) FROM hop1"), 2);
	cr_assert_eq(tt_count(s1, "SELECT COUNT(*) FROM hop1 WHERE payload "
				  "= 'm-1'"),
		     1, "the dead letter took effect once in g1");
	cr_assert_eq(tt_count(s2, "SELECT COUNT(*) FROM hop2"), 2,
		     "g2 handled the original and not the replay");
	cnt = tt_read_topic(c->bootstraps, "in", &recs);
	cr_assert_eq(cnt, 3, "two originals and one replay");
	for (size_t i = 0; i < cnt; i++) {
		const void *v;
		size_t len;

		if (rd_kafka_header_get_last(recs[i].headers, "tbx-replay-of",
					     &v, &len))
			continue;
		cr_assert(!orig_id, "one replay only");
		orig_id = "seen";
		cr_assert_eq(len, strlen(orig));
		cr_assert(memcmp(v, orig, len) == 0);
		cr_assert_str_eq(recs[i].payload, "m-1");
		cr_assert_str_neq(recs[i].id, orig, "a fresh id");
	}
	cr_assert(orig_id, "no record with tbx-replay-of");
	tt_records_free(recs, cnt);
	cr_assert_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);

	/* show: the record's key, payload and headers from Kafka. */
	const char *show[] = {"inspect", "-s",		 s1,	 "-S",
			      tokens,	 "dead-letters", "show", "1",
			      "-b",	 c->bootstraps,	 "-t",	 "in.dlq",
			      NULL};
	res = cc_run(show);
	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_assert(strstr(res.out, "payload      \"m-1\""), "%s", res.out);
	cr_assert(strstr(res.out, "key          \"key-0\""), "%s", res.out);
	cr_assert(strstr(res.out, "tbx-dlq-error"), "%s", res.out);
	cr_assert(strstr(res.out, "state        replayed: sent back to in at "),
		  "%s", res.out);
	cc_result_free(&res);

	tbx_worker_destroy(w[0]);
	tbx_worker_destroy(w[1]);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
	free(s1);
	free(s2);
}
