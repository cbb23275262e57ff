/*
 * mailer — a campaign ("push") that emails each user at most once, as a
 * handler plugin.
 *
 * Topic "campaign-jobs", type CampaignSelected, payload
 * {"campaign": "spring", "users": ["u1", "u2", …]}: a job has selected a
 * list of users for a campaign.  Lists overlap, several jobs select the
 * same list, jobs run on several workers, and upstream re-sends jobs.
 * Whatever selects a user, the user gets one EmailRequested per campaign,
 * on the topic "emails", key = the user, payload
 * {"campaign": "spring", "user": "u1"}.  A mail sender consuming "emails"
 * (a tokenbox worker of its own group) then sends each email once.
 *
 * The handler records sent(campaign, user) with INSERT … ON CONFLICT DO
 * NOTHING and queues the email only when the row is new.  That business
 * key and the outgoing message commit in one transaction with the job's
 * outbox row: the row exists exactly when the email is on its way.
 *
 * It runs on either service store, an SQLite file (store.path) or
 * PostgreSQL (store.url): its statements go through tbx_ctx_exec(), with
 * $1 … $n parameters, in SQL both databases accept.
 *
 * plugin.args: none.  The plugin does not link libtokenbox: the tbx_*
 * symbols come from the host that loads it (`tokenbox worker`).
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <tokenbox/tokenbox.h>

#define PLUGIN	      "libtbx_mailer"
#define JOBS	      "campaign-jobs"
#define EMAILS	      "emails"
#define NAME_MAX_LEN  128 /* bytes of a campaign or user name */
#define PLUGIN_EXPORT __attribute__((visibility("default")))

PLUGIN_EXPORT int tbx_plugin_abi_version(void);
PLUGIN_EXPORT int tbx_plugin_init(tbx_worker_t *worker, const char *args);

/* Types both SQLite and PostgreSQL take; "user" quoted, as PostgreSQL
 * reserves the word (and SQLite accepts the quotes). */
static const char table_sql[] = "CREATE TABLE IF NOT EXISTS sent("
				" campaign TEXT NOT NULL,"
				" \"user\" TEXT NOT NULL,"
				" job_id TEXT NOT NULL," /* tbx-id of the job */
				" sent_at BIGINT NOT NULL,"
				" PRIMARY KEY (campaign, \"user\"))";
static const char insert_sql[] =
    "INSERT INTO sent(campaign, \"user\", job_id, sent_at) "
    "VALUES ($1, $2, $3, $4) ON CONFLICT (campaign, \"user\") DO NOTHING";

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int name_ok(const cJSON *item)
{
	size_t n;

	return cJSON_IsString(item) && (n = strlen(item->valuestring)) >= 1 &&
	       n <= NAME_MAX_LEN;
}

/* Queues one EmailRequested for (@p campaign, @p user), keyed by the user.
 * @returns TBX_OK or an error code. */
static int send_email(tbx_ctx_t *ctx, const char *campaign, const char *user)
{
	cJSON *root = cJSON_CreateObject();
	char *payload = NULL;
	int err = TBX_ENOMEM;

	if (root && cJSON_AddStringToObject(root, "campaign", campaign) &&
	    cJSON_AddStringToObject(root, "user", user) &&
	    (payload = cJSON_PrintUnformatted(root))) {
		tbx_out_t out = {.topic = EMAILS,
				 .type = "EmailRequested",
				 .key = user,
				 .key_len = strlen(user),
				 .payload = payload,
				 .payload_len = strlen(payload)};
		err = tbx_ctx_send(ctx, &out);
	}
	cJSON_free(payload);
	cJSON_Delete(root);
	return err;
}

/*
 * The handler: for every user of the job, a new sent row means a new
 * email.  A user selected twice — by this job, an overlapping list,
 * another job, a job handled on another worker sharing the store — finds
 * the row and is skipped.  On SQLite the store's write lock, held by a
 * worker for its whole batch, orders the jobs of every worker.  On
 * PostgreSQL two workers may insert the same (campaign, user) at once:
 * the primary key makes the second wait for the first's commit and then
 * insert nothing (or insert it, should the first roll back).  Either way
 * two jobs never both find a user unsent.
 */
static tbx_verdict_t on_job(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque)
{
	size_t len;
	const void *payload = tbx_msg_payload(msg, &len);
	const cJSON *campaign, *users, *user;
	char at[24];
	const char *params[4];
	int64_t changes;
	cJSON *root;
	int rc;

	(void)opaque;
	root = payload ? cJSON_ParseWithLength(payload, len) : NULL;
	campaign = cJSON_GetObjectItemCaseSensitive(root, "campaign");
	users = cJSON_GetObjectItemCaseSensitive(root, "users");
	/* Check the whole job before writing anything: a bad one is
	 * dead-lettered as a whole, not half sent. */
	rc = name_ok(campaign) && cJSON_IsArray(users);
	cJSON_ArrayForEach(user, users) rc = rc && name_ok(user);
	if (!rc) {
		cJSON_Delete(root);
		tbx_ctx_set_error(ctx, "not a campaign job: expected "
				       "{\"campaign\": \"<name>\", \"users\": "
				       "[\"<user>\", …]}");
		return TBX_VERDICT_REJECT;
	}
	/* The first job a store sees creates the table, inside its own
	 * savepoint; later jobs find it there.  A failed statement made
	 * the message's error reason (what the database said): the job is
	 * retried. */
	if (tbx_ctx_exec(ctx, table_sql, NULL, 0, NULL) != TBX_OK) {
		cJSON_Delete(root);
		return TBX_VERDICT_RETRY;
	}
	snprintf(at, sizeof(at), "%" PRId64, wall_ms());
	params[0] = campaign->valuestring;
	params[2] = tbx_msg_id(msg);
	params[3] = at;
	cJSON_ArrayForEach(user, users)
	{
		params[1] = user->valuestring;
		if (tbx_ctx_exec(ctx, insert_sql, params, 4, &changes) !=
		    TBX_OK) {
			cJSON_Delete(root);
			return TBX_VERDICT_RETRY;
		}
		/* 0 changes: this user already has this campaign's email. */
		if (changes == 0)
			continue;
		if (send_email(ctx, campaign->valuestring, user->valuestring) !=
		    TBX_OK) {
			cJSON_Delete(root);
			tbx_ctx_set_error(ctx, "cannot queue an email");
			return TBX_VERDICT_RETRY;
		}
	}
	cJSON_Delete(root);
	/* RETRY rolls back the rows and drops the queued emails together. */
	return TBX_VERDICT_OK;
}

int tbx_plugin_abi_version(void)
{
	return TBX_PLUGIN_ABI_VERSION;
}

/* plugin.args: none (empty or absent). */
int tbx_plugin_init(tbx_worker_t *worker, const char *args)
{
	int err;

	if (args && args[strspn(args, " \t")] != '\0') {
		fprintf(stderr,
			PLUGIN ": plugin.args: takes none, got \"%s\"\n", args);
		return TBX_ECONF;
	}
	err =
	    tbx_worker_register(worker, JOBS, "CampaignSelected", on_job, NULL);
	if (err != TBX_OK)
		fprintf(stderr, PLUGIN ": cannot register on %s: %s\n", JOBS,
			tbx_strerror(err));
	return err;
}
