/*
 * examples/mailer: a campaign emails each user once, however many lists,
 * jobs, copies and workers select the user.  Two workers of one group
 * share the service store, loaded with dlopen() as `tokenbox worker`
 * does.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"
#include "tokenbox/testkit.h"

#define WORKERS 2
#define USERS	100 /* u001..u100 */

typedef struct env {
	char *dir, *store, *tokens;
	tt_cluster_t *cluster;
	tt_plugin_t plugin;
	tbx_worker_t *w[WORKERS];
	tbx_publisher_t *pub;
	int jobs;
} env_t;

static int all_assigned(void *opaque)
{
	env_t *e = opaque;

	return tt_assigned(e->w, WORKERS);
}

static void env_init(env_t *e)
{
	char err[512];
	tbx_conf_t *conf;

	memset(e, 0, sizeof(*e));
	e->dir = tt_tmpdir();
	/* Files, or in the pg tier schemas (support.h). */
	e->store = tt_store_new(e->dir, "mailer");
	e->tokens = tt_tokens_new(e->dir, "tokens", 1);
	e->cluster = tt_cluster_new(1);
	tt_cluster_topic(e->cluster, "campaign-jobs", 4);
	tt_cluster_topic(e->cluster, "emails", 4);
	tt_cluster_topic(e->cluster, "campaign-jobs.dlq", 1);
	tt_plugin_open(&e->plugin, "libtbx_mailer.so");
	for (int i = 0; i < WORKERS; i++) {
		e->w[i] = tbx_worker_new(
		    tt_conf(e->cluster->bootstraps, "mailer", e->store,
			    e->tokens, "cleanup.interval.ms", "100", NULL),
		    err, sizeof(err));
		cr_assert(e->w[i], "%s", err);
		cr_assert_eq(e->plugin.init(e->w[i], ""), TBX_OK);
	}
	for (int i = 0; i < WORKERS; i++)
		cr_assert_eq(tbx_worker_poll(e->w[i], 0, NULL), TBX_OK);
	/* Both members hold partitions before any job is sent, so that
	 * both get jobs however slowly the second joins. */
	cr_assert(tt_drive(e->w, WORKERS, all_assigned, e, 1, 120),
		  "the workers were not both assigned partitions");
	conf = tbx_conf_new();
	tbx_conf_set(conf, "kafka.bootstrap.servers", e->cluster->bootstraps,
		     NULL, 0);
	cr_assert_eq(tt_stores_conf(conf, NULL, e->tokens, err, sizeof(err)),
		     TBX_OK, "%s", err);
	tbx_conf_set(conf, "log.level", "warning", NULL, 0);
	e->pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(e->pub, "publisher: %s", err);
}

static void env_fini(env_t *e)
{
	tbx_publisher_destroy(e->pub);
	for (int i = 0; i < WORKERS; i++)
		tbx_worker_destroy(e->w[i]);
	tt_plugin_close(&e->plugin);
	tt_cluster_destroy(e->cluster);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->store);
	free(e->tokens);
}

/* Queues one job (key "job-<n>") with @p payload. */
static void job_raw(env_t *e, const char *payload)
{
	char key[32];

	snprintf(key, sizeof(key), "job-%d", ++e->jobs);
	tbx_out_t out = {.topic = "campaign-jobs",
			 .type = "CampaignSelected",
			 .key = key,
			 .key_len = strlen(key),
			 .payload = payload,
			 .payload_len = strlen(payload)};
	cr_assert_eq(tbx_publish(e->pub, &out), TBX_OK);
}

/* Queues a job selecting users [first, last] of a list for @p campaign. */
static void job(env_t *e, const char *campaign, int first, int last)
{
	cJSON *root = cJSON_CreateObject(), *users;
	char user[16], *payload;

	cJSON_AddStringToObject(root, "campaign", campaign);
	users = cJSON_AddArrayToObject(root, "users");
	for (int u = first; u <= last; u++) {
		snprintf(user, sizeof(user), "u%03d", u);
		cJSON_AddItemToArray(users, cJSON_CreateString(user));
	}
	payload = cJSON_PrintUnformatted(root);
	job_raw(e, payload);
	cJSON_free(payload);
	cJSON_Delete(root);
}

static void flush(env_t *e)
{
	size_t failed;

	cr_assert_eq(tbx_publisher_flush(e->pub, &failed), TBX_OK, "%s",
		     tbx_publisher_errstr(e->pub));
}

typedef struct progress {
	env_t *e;
	uint64_t want_consumed;
} progress_t;

static int all_done(void *opaque)
{
	progress_t *p = opaque;
	uint64_t consumed = 0;
	tbx_stats_t st;

	for (int i = 0; i < WORKERS; i++) {
		tbx_worker_stats(p->e->w[i], &st);
		consumed += st.consumed;
	}
	return consumed >= p->want_consumed &&
	       tt_count(p->e->store, "SELECT COUNT(*) FROM tbx_outbox") == 0;
}

/* The emails of (campaign, user), told apart by tbx-id. */
typedef struct email {
	char campaign[16], user[16];
	char *id;
} email_t;

Test(example_mailer, each_user_gets_one_email_per_campaign_whatever_selects_it)
{
	env_t e;
	tt_record_t *recs, *copies;
	size_t cnt, n_copies = 0, n_emails = 0;
	email_t *emails;
	tbx_stats_t st;
	int workers_busy = 0;

	env_init(&e);
	/* Three overlapping lists, each selected by three jobs: list A
	 * u001..u040, B u031..u070, C u061..u100.  The summer campaign
	 * selects B twice; one job names a user twice; one is no job. */
	for (int round = 0; round < 3; round++) {
		job(&e, "spring", 1, 40);
		job(&e, "spring", 31, 70);
		job(&e, "spring", 61, 100);
	}
	job(&e, "summer", 31, 70);
	job(&e, "summer", 31, 70);
	job_raw(&e, "{\"campaign\":\"spring\",\"users\":[\"u001\",\"u050\","
		    "\"u001\",\"u100\"]}");
	job_raw(&e, "{\"campaign\":\"spring\",\"users\":[\"u001\",7]}");
	flush(&e);
	/* Upstream re-sends every other job: same ids, same tokens. */
	cnt = tt_read_topic(e.cluster->bootstraps, "campaign-jobs", &recs);
	cr_assert_eq(cnt, (size_t)e.jobs);
	copies = calloc(cnt, sizeof(*copies));
	for (size_t i = 0; i < cnt; i += 2)
		copies[n_copies++] = recs[i]; /* borrowed */
	tt_reproduce(e.cluster->bootstraps, "campaign-jobs", copies, n_copies);
	free(copies);
	tt_records_free(recs, cnt);

	progress_t p = {&e, (uint64_t)e.jobs + n_copies};
	cr_assert(tt_drive(e.w, WORKERS, all_done, &p, 20, 120),
		  "the jobs were not all handled");

	/* The sent table: one row per (campaign, user). */
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM sent"),
		     USERS + 40);
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM sent WHERE "
				       "campaign = 'spring'"),
		     USERS);
	/* "user" quoted: on PostgreSQL, user alone is current_user. */
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(DISTINCT \"user\") FROM "
				       "sent WHERE campaign = 'spring'"),
		     USERS);
	cr_assert_eq(tt_count(e.store,
			      "SELECT COUNT(*) FROM sent WHERE "
			      "campaign = 'summer' AND \"user\" BETWEEN "
			      "'u031' AND 'u070'"),
		     40);
	/* The job that was no job went to the dead-letter topic whole:
	 * nothing of it was sent (u001 came from list A anyway). */
	cr_assert_eq(tt_count(e.store, "SELECT COUNT(*) FROM tbx_dead_letters"),
		     1);

	/* The emails topic: one tbx-id per (campaign, user); copies of a
	 * re-dispatch carry the same id and token. */
	cnt = tt_read_topic(e.cluster->bootstraps, "emails", &recs);
	emails = calloc(cnt + 1, sizeof(*emails));
	for (size_t i = 0; i < cnt; i++) {
		tt_record_t *r = &recs[i];
		cJSON *root;
		const cJSON *campaign, *user;
		size_t j;

		cr_assert(r->id && r->token && r->payload && r->key);
		cr_assert_str_eq(r->type, "EmailRequested");
		root = cJSON_Parse(r->payload);
		campaign = cJSON_GetObjectItemCaseSensitive(root, "campaign");
		user = cJSON_GetObjectItemCaseSensitive(root, "user");
		cr_assert(cJSON_IsString(campaign) && cJSON_IsString(user),
			  "%s", r->payload);
		cr_assert_str_eq(r->key, user->valuestring, "keyed by user");
		for (j = 0; j < n_emails; j++)
			if (strcmp(emails[j].campaign, campaign->valuestring) ==
				0 &&
			    strcmp(emails[j].user, user->valuestring) == 0)
				break;
		if (j < n_emails) {
			cr_assert_str_eq(
			    emails[j].id, r->id, "%s got two emails for %s",
			    user->valuestring, campaign->valuestring);
		} else {
			snprintf(emails[j].campaign, sizeof(emails[j].campaign),
				 "%s", campaign->valuestring);
			snprintf(emails[j].user, sizeof(emails[j].user), "%s",
				 user->valuestring);
			emails[j].id = r->id;
			n_emails++;
		}
		for (size_t k = 0; k < i; k++)
			if (strcmp(recs[k].id, r->id) == 0)
				cr_assert_str_eq(recs[k].token, r->token);
		cJSON_Delete(root);
	}
	cr_assert_eq(n_emails, USERS + 40);
	free(emails);
	tt_records_free(recs, cnt);

	for (int i = 0; i < WORKERS; i++) {
		tbx_worker_stats(e.w[i], &st);
		workers_busy += st.processed > 0;
	}
	cr_assert_eq(workers_busy, WORKERS, "a worker had no job");
	cr_assert_eq(tbx_worker_cleanup(e.w[0], 0, NULL), TBX_OK);
	cr_assert_eq(tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cr_assert_eq(
	    tt_count(e.tokens, "SELECT COUNT(*) FROM tbx_registrations"), 0);
	env_fini(&e);
}

Test(example_mailer, init_takes_no_arguments)
{
	env_t e;

	env_init(&e);
	cr_assert_eq(e.plugin.init(e.w[0], "campaign=spring"), TBX_ECONF);
	/* NULL is no arguments: accepted, and then refused by the worker,
	 * which has polled already. */
	cr_assert_eq(e.plugin.init(e.w[0], NULL), TBX_ESTATE);
	env_fini(&e);
}

/* The test kit's stores are SQLite files: its tests run in the SQLite
 * tier only. */
#define SQLITE_ONLY_KIT()                                                      \
	do {                                                                   \
		if (tt_pg_tier())                                              \
			cr_skip_test("the test kit's stores are SQLite "       \
				     "files");                                 \
	} while (0)

/* ---- unit tests with the handler test kit ---------------------------- */

static tbx_testkit_t *mailer_kit(tt_plugin_t *plugin)
{
	char err[512];
	tbx_testkit_t *kit = tbx_testkit_new("mailer", err, sizeof(err));

	cr_assert(kit, "%s", err);
	cr_assert_eq(tbx_testkit_plugin(kit, plugin->init, ""), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(tbx_testkit_topic(kit, "emails", 1), TBX_OK);
	return kit;
}

static tbx_out_t job_msg(const char *payload)
{
	return (tbx_out_t){.topic = "campaign-jobs",
			   .type = "CampaignSelected",
			   .key = "job-1",
			   .key_len = 5,
			   .payload = payload,
			   .payload_len = strlen(payload)};
}

Test(example_mailer, a_job_emails_each_user_it_names_once)
{
	SQLITE_ONLY_KIT();
	tt_plugin_t plugin;
	tbx_testkit_outcome_t outcome;

	tt_plugin_open(&plugin, "libtbx_mailer.so");
	tbx_testkit_t *kit = mailer_kit(&plugin);
	tbx_out_t in = job_msg("{\"campaign\":\"spring\",\"users\":[\"u001\","
			       "\"u002\",\"u001\"]}");

	cr_assert_eq(tbx_testkit_handle(kit, &in, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(outcome, TBX_TESTKIT_PROCESSED);
	cr_assert_eq(
	    tt_count(tbx_testkit_store_path(kit), "SELECT COUNT(*) FROM sent"),
	    2);
	cr_assert_eq(tbx_testkit_sent_count(kit), 2);
	for (size_t i = 0; i < 2; i++) {
		const tbx_testkit_sent_t *m = tbx_testkit_sent(kit, i);
		cr_assert_str_eq(m->topic, "emails");
		cr_assert_str_eq(m->type, "EmailRequested");
		cr_assert(strstr(m->payload, "\"spring\""), "%s", m->payload);
	}
	/* A second job naming u002 again sends nothing new. */
	in = job_msg("{\"campaign\":\"spring\",\"users\":[\"u002\"]}");
	cr_assert_eq(tbx_testkit_handle(kit, &in, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(outcome, TBX_TESTKIT_PROCESSED);
	cr_assert_eq(tbx_testkit_sent_count(kit), 2);
	tbx_testkit_destroy(kit);
	tt_plugin_close(&plugin);
}

Test(example_mailer, a_job_that_is_no_job_sends_nothing)
{
	SQLITE_ONLY_KIT();
	tt_plugin_t plugin;
	tbx_testkit_outcome_t outcome;

	tt_plugin_open(&plugin, "libtbx_mailer.so");
	tbx_testkit_t *kit = mailer_kit(&plugin);
	tbx_out_t in = job_msg("{\"campaign\":\"spring\",\"users\":[\"u001\","
			       "7]}");

	cr_assert_eq(tbx_testkit_handle(kit, &in, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(outcome, TBX_TESTKIT_DEAD_LETTERED);
	cr_assert_eq(tbx_testkit_sent_count(kit), 1);
	cr_assert_str_eq(tbx_testkit_sent(kit, 0)->topic, "campaign-jobs.dlq");
	tbx_testkit_destroy(kit);
	tt_plugin_close(&plugin);
}

Test(example_mailer, a_crash_after_the_commit_still_emails_once, .timeout = 300)
{
	SQLITE_ONLY_KIT();
	tt_plugin_t plugin;
	tbx_testkit_outcome_t outcome;

	tt_plugin_open(&plugin, "libtbx_mailer.so");
	tbx_testkit_t *kit = mailer_kit(&plugin);
	tbx_out_t in = job_msg("{\"campaign\":\"spring\",\"users\":[\"u001\","
			       "\"u002\"]}");
	size_t cnt;

	cr_assert_eq(tbx_testkit_crash_at(kit, "A.committed"), TBX_OK);
	cr_assert_eq(tbx_testkit_handle(kit, &in, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(outcome, TBX_TESTKIT_PROCESSED);
	cr_assert_eq(
	    tt_count(tbx_testkit_store_path(kit), "SELECT COUNT(*) FROM sent"),
	    2);
	/* Committed before the crash, dispatched by the recovery: each
	 * email once. */
	cnt = tbx_testkit_sent_count(kit);
	cr_assert_eq(cnt, 2);
	tbx_testkit_destroy(kit);
	tt_plugin_close(&plugin);
}
