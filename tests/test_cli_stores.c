/*
 * Token stores as an operator meets them, multi-process: `tokenbox
 * mock-cluster`, `tokenbox worker` with the examples/hello plugin,
 * `tokenbox send`, `tokenbox init` and `tokenbox inspect` as children.
 *
 * No record may end counted as a duplicate that no worker of its group
 * processed: a misspelt tokens.path is refused, a record minted in
 * another token store is dead-lettered (or stops the worker), a pattern
 * subscription is refused, and a retired group's subscription is flagged
 * and can be removed.
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_child.h"
#include "fixture.h"

#define WAIT_MS (30000 * cc_time_factor())

/** The store id of the file @p db (malloc'ed). */
static char *store_id(const char *db)
{
	sqlite3 *conn = NULL;
	sqlite3_stmt *stmt = NULL;
	char *id = NULL;

	if (sqlite3_open_v2(db, &conn, SQLITE_OPEN_READONLY, NULL) ==
		SQLITE_OK &&
	    sqlite3_prepare_v2(conn, "SELECT store_id FROM tbx_store_info", -1,
			       &stmt, NULL) == SQLITE_OK &&
	    sqlite3_step(stmt) == SQLITE_ROW)
		id = strdup((const char *)sqlite3_column_text(stmt, 0));
	sqlite3_finalize(stmt);
	sqlite3_close(conn);
	cr_assert(id, "%s has no store id", db);
	return id;
}

static int wait_for(const char *db, const char *sql, long long want)
{
	return tt_wait_query(db, sql, want, WAIT_MS);
}

static int wait_log(const char *log, const char *text)
{
	return tt_wait_log(log, text, WAIT_MS);
}

typedef struct env {
	char *dir, *store, *tokens, *log;
	tt_mock_proc_t mock;
} env_t;

static env_t env_new(void)
{
	static const char *const topics[] = {"hello:2", "hello.dlq:1", NULL};
	env_t e;

	e.dir = tt_tmpdir();
	e.store = tt_path(e.dir, "service.db");
	e.tokens = tt_path(e.dir, "tokens.db");
	e.log = tt_path(e.dir, "worker.log");
	e.mock = tt_mock_proc_start(topics);
	return e;
}

static void env_free(env_t *e)
{
	tt_mock_proc_stop(&e->mock);
	tt_rmrf(e->dir);
	free(e->dir);
	free(e->store);
	free(e->tokens);
	free(e->log);
}

/** `tokenbox init --tokens PATH`: must succeed and print the id. */
static void init_tokens(const char *path)
{
	const char *args[] = {"init", "--tokens", path, NULL};
	cc_result_t res = cc_run(args);

	cr_assert(cc_exited(res.status, 0), "init: %d: %s", res.status,
		  res.err);
	cr_assert(strstr(res.out, "created, store id "), "%s", res.out);
	cc_result_free(&res);
}

/** Starts a hello worker of group "hello" on store.path @p e->store with
 *  the -X settings @p extra (NULL-ended), its output appended to the
 *  log. */
static pid_t worker_start(const env_t *e, const char *const extra[])
{
	static char boot[512], store[600], plugin[4200];
	const char *settings[] = {boot,
				  "group.id=hello",
				  store,
				  plugin,
				  "kafka.consumer.session.timeout.ms=4000",
				  "kafka.consumer.heartbeat.interval.ms=300",
				  "batch.max.ms=20",
				  "log.level=info",
				  NULL};

	snprintf(boot, sizeof(boot), "kafka.bootstrap.servers=%s",
		 e->mock.bootstraps);
	snprintf(store, sizeof(store), "store.path=%s", e->store);
	snprintf(plugin, sizeof(plugin), "plugin=%s",
		 tt_plugin_path("tbx_hello"));
	return tt_worker_start(settings, extra, e->log);
}

static void assert_log(int ok, const env_t *e, const char *what)
{
	tt_assert_log(ok, e->log, what);
}

/** `tokenbox send` of @p lines to "hello" with tokens from @p tokens. */
static cc_result_t send_lines(const env_t *e, const char *tokens,
			      const char *lines)
{
	const char *args[] = {
	    "send", "-b",    e->mock.bootstraps, "-t",	 "hello",
	    "-T",   "Hello", "--tokens",	 tokens, NULL};

	return cc_run_with(args, lines, strlen(lines), 60000);
}

static int stop_worker(pid_t pid)
{
	kill(pid, SIGTERM);
	return cc_wait(pid, WAIT_MS);
}

#define SUBSCRIBED                                                             \
	"SELECT COUNT(*) FROM tbx_subscriptions WHERE topic = 'hello' AND "    \
	"grp = 'hello'"

/* ---- no token store made by mistake ------------------------------- */

Test(cli_stores, a_misspelt_tokens_path_is_refused_and_never_created,
     .timeout = 240)
{
	env_t e = env_new();
	char *typo = tt_path(e.dir, "tokns.db");
	char setting[600];
	const char *extra[] = {setting, NULL};
	struct stat st;
	cc_result_t res;
	pid_t pid;
	int status;
	char *log;

	init_tokens(e.tokens);
	snprintf(setting, sizeof(setting), "tokens.path=%s", typo);
	pid = worker_start(&e, extra);
	status = cc_wait(pid, WAIT_MS);
	log = tt_read_text(e.log);
	/* A configuration error, as --check-config says: exit 2, and no
	 * service store left behind. */
	cr_assert(cc_exited(status, 2), "status %d:\n%s", status, log);
	cr_expect(stat(e.store, &st) != 0, "%s was left behind", e.store);
	cr_expect(strstr(log, typo), "%s", log);
	cr_expect(strstr(log, "does not exist"), "%s", log);
	cr_expect(strstr(log, "tokenbox init --tokens"), "%s", log);
	cr_expect(strstr(log, "tokens.create=true"), "%s", log);
	free(log);
	cr_assert(stat(typo, &st) != 0, "%s was created", typo);

	/* A sender with the typo: refused too, nothing created. */
	res = send_lines(&e, typo, "a\nb\n");
	cr_assert(cc_exited(res.status, 1), "status %d: %s", res.status,
		  res.err);
	cr_expect(strstr(res.err, typo), "%s", res.err);
	cr_expect(strstr(res.err, "tokenbox init"), "%s", res.err);
	cr_expect_eq(cc_lines(res.err), 1, "%s", res.err);
	cc_result_free(&res);
	cr_assert(stat(typo, &st) != 0, "send created %s", typo);

	/* tokens.create=true is the deliberate way for a worker. */
	const char *create[] = {setting, "tokens.create=true", NULL};
	pid = worker_start(&e, create);
	assert_log(wait_for(typo, SUBSCRIBED, 1), &e,
		   "tokens.create=true did not create the store");
	cr_assert(cc_exited(stop_worker(pid), 0));
	free(typo);
	env_free(&e);
}

/* ---- inspect on the wrong pair of stores -------------------------- */

/** `tokenbox inspect -s S [-S T] status --check [--json]`. */
static cc_result_t inspect_status(const char *store, const char *tokens,
				  int json)
{
	const char *args[9] = {"inspect", "-s", store};
	size_t n = 3;

	if (tokens) {
		args[n++] = "-S";
		args[n++] = tokens;
	}
	args[n++] = "status";
	args[n++] = "--check";
	if (json)
		args[n++] = "--json";
	args[n] = NULL;
	return cc_run(args);
}

/** Checks `status --check` on @p store and @p tokens: exit 1 with each
 *  problem of @p want (NULL-ended) named in the text and in --json, or
 *  exit 0 with store_pair ok when @p want is empty. */
static void assert_pair(const char *store, const char *tokens,
			const char *const want[])
{
	cc_result_t res = inspect_status(store, tokens, 0);
	cJSON *doc, *pair, *problems;
	size_t cnt = 0;

	while (want[cnt])
		cnt++;
	cr_expect(cc_exited(res.status, cnt ? 1 : 0), "-s %s -S %s: %d: %s%s",
		  store, tokens ? tokens : "-", res.status, res.out, res.err);
	cr_expect_eq(!!strstr(res.out, "Wrong pair of stores"), cnt > 0, "%s",
		     res.out);
	for (size_t i = 0; i < cnt; i++)
		cr_expect(strstr(res.out, want[i]), "%s not in: %s", want[i],
			  res.out);
	cc_result_free(&res);

	res = inspect_status(store, tokens, 1);
	cr_expect(cc_exited(res.status, cnt ? 1 : 0), "--json: %d: %s",
		  res.status, res.err);
	doc = cJSON_Parse(res.out);
	cr_assert(doc, "%s", res.out);
	pair = cJSON_GetObjectItem(doc, "store_pair");
	problems = cJSON_GetObjectItem(pair, "problems");
	cr_assert(pair && problems, "%s", res.out);
	cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItem(pair, "ok")), cnt == 0);
	cr_expect_eq((size_t)cJSON_GetArraySize(problems), cnt, "%s", res.out);
	for (size_t i = 0; i < cnt; i++) {
		const cJSON *p;
		int found = 0;

		cJSON_ArrayForEach(p, problems)
		{
			found |=
			    strcmp(
				cJSON_GetObjectItem(p, "problem")->valuestring,
				want[i]) == 0 &&
			    strcmp(cJSON_GetObjectItem(p, "group")->valuestring,
				   "hello") == 0;
		}
		cr_expect(found, "%s not in: %s", want[i], res.out);
	}
	cJSON_Delete(doc);
	cc_result_free(&res);
}

Test(cli_stores, inspect_says_when_it_is_given_the_wrong_pair_of_stores,
     .timeout = 240)
{
	env_t e = env_new();
	char *other = tt_path(e.dir, "other.db");
	char *single = tt_path(e.dir, "single.db");
	char setting[600], single_setting[600];
	const char *extra[] = {setting, NULL};
	const char *single_extra[] = {single_setting, NULL};
	const char *cleanup[] = {"inspect", "-s", e.store, "cleanup", NULL};
	const char *list[] = {"inspect", "-s", e.store, "outbox", "list", NULL};
	cc_result_t res;
	pid_t pid;

	init_tokens(e.tokens);
	init_tokens(other);
	snprintf(setting, sizeof(setting), "tokens.path=%s", e.tokens);
	pid = worker_start(&e, extra);
	assert_log(wait_for(e.tokens, SUBSCRIBED, 1), &e,
		   "the worker did not subscribe");
	cr_assert(cc_exited(stop_worker(pid), 0));

	/* Swapped. */
	assert_pair(e.tokens, e.store,
		    (const char *const[]){"tokens_is_a_service_store",
					  "store_is_a_token_store", NULL});
	/* The pair the worker uses. */
	assert_pair(e.store, e.tokens, (const char *const[]){NULL});
	/* The token store apart not given. */
	assert_pair(e.store, NULL,
		    (const char *const[]){"token_store_not_given", NULL});
	/* Another token store. */
	assert_pair(e.store, other,
		    (const char *const[]){"token_store_mismatch", NULL});

	/* A repair refuses such a pair; a listing warns. */
	res = cc_run(cleanup);
	cr_expect(cc_exited(res.status, 2), "%d: %s", res.status, res.err);
	cr_expect(strstr(res.err, "cleanup: refused"), "%s", res.err);
	cc_result_free(&res);
	res = cc_run(list);
	cr_expect(cc_exited(res.status, 0), "%d: %s", res.status, res.err);
	cr_expect(strstr(res.err, "warning: wrong pair of stores: group "
				  "hello's workers use the token store"),
		  "%s", res.err);
	cc_result_free(&res);

	/* Single-file mode: the file is its own workers' token store. */
	snprintf(single_setting, sizeof(single_setting), "store.path=%s",
		 single);
	pid = worker_start(&e, single_extra);
	assert_log(wait_for(single, SUBSCRIBED, 1), &e,
		   "the single-file worker did not subscribe");
	cr_assert(cc_exited(stop_worker(pid), 0));
	assert_pair(single, NULL, (const char *const[]){NULL});
	assert_pair(e.store, single,
		    (const char *const[]){"token_store_mismatch", NULL});
	free(other);
	free(single);
	env_free(&e);
}

/* ---- records minted in another token store ------------------------ */

/** Lines of @p text holding @p what, and @p also when not NULL. */
static int lines_with(const char *text, const char *what, const char *also)
{
	int n = 0;

	for (const char *p = text; *p;) {
		size_t len = strcspn(p, "\n");
		char *line = strndup(p, len);

		cr_assert(line);
		n += strstr(line, what) && (!also || strstr(line, also));
		free(line);
		p += len + (p[len] == '\n');
	}
	return n;
}

#define ASSIGNED "partition(s) of group hello"

Test(cli_stores, a_group_that_changes_token_store_is_warned_and_flagged,
     .timeout = 240)
{
	env_t e = env_new();
	char *other = tt_path(e.dir, "other.db"), *log;
	char setting[600], other_setting[600];
	const char *extra[] = {setting, NULL};
	const char *other_extra[] = {other_setting, NULL};
	cc_result_t res;
	pid_t pid;

	init_tokens(e.tokens);
	init_tokens(other);
	snprintf(setting, sizeof(setting), "tokens.path=%s", e.tokens);
	snprintf(other_setting, sizeof(other_setting), "tokens.path=%s", other);
	/* Started twice with one token store: nothing to say. */
	for (int i = 0; i < 2; i++) {
		unlink(e.log);
		pid = worker_start(&e, extra);
		assert_log(wait_log(e.log, ASSIGNED), &e,
			   "the worker was not assigned its partitions");
		cr_assert(cc_exited(stop_worker(pid), 0));
		log = tt_read_text(e.log);
		cr_expect(!strstr(log, "changed token store"), "%s", log);
		free(log);
	}
	cr_expect_eq(tt_query(e.store, "SELECT COUNT(*) FROM tbx_alarms"), 0);

	/* Then with another one: a WARN naming both, and an alarm. */
	unlink(e.log);
	pid = worker_start(&e, other_extra);
	assert_log(wait_log(e.log, ASSIGNED), &e,
		   "the worker on the other store was not assigned");
	cr_assert(cc_exited(stop_worker(pid), 0));
	log = tt_read_text(e.log);
	cr_expect(lines_with(log, "WARN", "group hello changed token store") ==
		      1,
		  "%s", log);
	cr_expect(strstr(log, e.tokens) && strstr(log, other), "%s", log);
	free(log);
	cr_expect_eq(tt_query(e.store, "SELECT count FROM tbx_alarms WHERE "
				       "grp = 'hello' AND name = "
				       "'token_store_changed'"),
		     1);
	/* The pair is right now, and status --check flags the alarm. */
	res = inspect_status(e.store, other, 0);
	cr_expect(cc_exited(res.status, 1), "%d: %s%s", res.status, res.out,
		  res.err);
	cr_expect(strstr(res.out, "token_store_changed"), "%s", res.out);
	cr_expect(!strstr(res.out, "Wrong pair of stores"), "%s", res.out);
	cc_result_free(&res);
	free(other);
	env_free(&e);
}

/* Sends 3 lines minted in tokens.db to a group whose token store is
 * another (@p tokens_setting; NULL: none, the service store's own).  Each
 * is dead-lettered naming both ids; none is a duplicate. */
static void mismatch_dead_letters(const char *tokens_setting)
{
	env_t e = env_new();
	const char *extra[] = {tokens_setting, NULL};
	const char *worker_tokens;
	char *ours, *theirs, *log;
	tt_record_t *recs;
	size_t cnt;
	cc_result_t res;
	pid_t pid;
	int status;

	init_tokens(e.tokens);
	if (tokens_setting) {
		worker_tokens = strchr(tokens_setting, '=') + 1;
		init_tokens(worker_tokens);
	} else {
		worker_tokens = e.store;
	}
	pid = worker_start(&e, extra);
	assert_log(wait_for(worker_tokens, SUBSCRIBED, 1), &e,
		   "the worker did not subscribe");
	res = send_lines(&e, e.tokens, "one\ntwo\nthree\n");
	cr_assert(cc_exited(res.status, 0), "send: %d: %s", res.status,
		  res.err);
	cc_result_free(&res);

	assert_log(wait_for(e.store,
			    "SELECT COUNT(*) FROM tbx_dead_letters WHERE "
			    "error LIKE 'token store mismatch%'",
			    3),
		   &e, "the records were not dead-lettered");
	ours = store_id(worker_tokens);
	theirs = store_id(e.tokens);
	cr_assert_str_neq(ours, theirs);
	cnt = tt_read_topic(e.mock.bootstraps, "hello.dlq", &recs);
	while (cnt < 3) {
		tt_records_free(recs, cnt);
		usleep(100000);
		cnt = tt_read_topic(e.mock.bootstraps, "hello.dlq", &recs);
	}
	cr_assert_eq(cnt, 3);
	for (size_t i = 0; i < cnt; i++) {
		cr_expect(
		    recs[i].dlq_error && strstr(recs[i].dlq_error, ours) &&
			strstr(recs[i].dlq_error, theirs),
		    "tbx-dlq-error '%s' lacks %s or %s",
		    recs[i].dlq_error ? recs[i].dlq_error : "", ours, theirs);
	}
	tt_records_free(recs, cnt);
	cr_expect(tt_query(e.store, "SELECT COUNT(*) FROM hello") <= 0,
		  "a handler ran");

	/* inspect status --check flags it. */
	const char *check[] = {"inspect", "--store", e.store,
			       "status",  "--check", NULL};
	res = cc_run(check);
	cr_expect(cc_exited(res.status, 1), "status --check: %d: %s",
		  res.status, res.err);
	cr_expect(strstr(res.out, "store_mismatch"), "%s", res.out);
	cc_result_free(&res);

	status = stop_worker(pid);
	log = tt_read_text(e.log);
	cr_assert(cc_exited(status, 0), "status %d:\n%s", status, log);
	cr_expect(strstr(log, "3 consumed, 0 processed, 0 duplicates dropped, "
			      "3 dead-lettered"),
		  "%s", log);
	/* One line per record, at ERROR: not an ERROR and a NOTICE. */
	cr_expect_eq(lines_with(log, "token store mismatch", NULL), 3, "%s",
		     log);
	cr_expect_eq(lines_with(log, "token store mismatch", "ERROR"), 3, "%s",
		     log);
	free(log);
	free(ours);
	free(theirs);
	env_free(&e);
}

Test(cli_stores, a_worker_without_tokens_path_dead_letters_foreign_records,
     .timeout = 240)
{
	mismatch_dead_letters(NULL);
}

Test(cli_stores, two_token_stores_in_one_pipeline_dead_letter_with_both_ids,
     .timeout = 240)
{
	char *dir = tt_tmpdir();
	char *other = tt_path(dir, "other-tokens.db");
	char setting[600];

	snprintf(setting, sizeof(setting), "tokens.path=%s", other);
	mismatch_dead_letters(setting);
	tt_rmrf(dir);
	free(dir);
	free(other);
}

Test(cli_stores, a_mismatch_with_stop_exits_3_and_consumes_nothing,
     .timeout = 240)
{
	env_t e = env_new();
	char *other = tt_path(e.dir, "other-tokens.db");
	char setting[600];
	const char *extra[] = {setting, "token.store.mismatch=stop", NULL};
	char *ours, *theirs, *log;
	cc_result_t res;
	pid_t pid;
	int status;

	init_tokens(e.tokens);
	init_tokens(other);
	snprintf(setting, sizeof(setting), "tokens.path=%s", other);
	pid = worker_start(&e, extra);
	assert_log(wait_for(other, SUBSCRIBED, 1), &e,
		   "the worker did not subscribe");
	res = send_lines(&e, e.tokens, "one\n");
	cr_assert(cc_exited(res.status, 0), "send: %s", res.err);
	cc_result_free(&res);

	status = cc_wait(pid, WAIT_MS);
	log = tt_read_text(e.log);
	ours = store_id(other);
	theirs = store_id(e.tokens);
	cr_assert(cc_exited(status, 3), "status %d:\n%s", status, log);
	cr_expect(strstr(log, ours) && strstr(log, theirs), "%s", log);
	cr_expect(strstr(log, "token.store.mismatch=stop"), "%s", log);
	free(log);
	cr_expect(tt_query(e.store, "SELECT COUNT(*) FROM hello") <= 0);
	cr_expect_eq(tt_query(e.store, "SELECT COUNT(*) FROM tbx_dead_letters"),
		     0);
	cr_expect_eq(tt_query(e.store, "SELECT count FROM tbx_alarms WHERE "
				       "name = 'store_mismatch'"),
		     1);
	free(ours);
	free(theirs);
	free(other);
	env_free(&e);
}

/* ---- subscriptions are what Kafka subscribes ---------------------- */

Test(cli_stores, a_pattern_subscription_is_refused_at_start, .timeout = 120)
{
	static const char *const topics[] = {"topic=^hell.*", "topic=a b",
					     "topic=.."};
	env_t e = env_new();

	init_tokens(e.tokens);
	for (size_t i = 0; i < sizeof(topics) / sizeof(topics[0]); i++) {
		char setting[600], args_setting[64];
		const char *extra[] = {setting, args_setting, NULL};
		pid_t pid;
		int status;
		char *log;

		snprintf(setting, sizeof(setting), "tokens.path=%s", e.tokens);
		snprintf(args_setting, sizeof(args_setting), "plugin.args=%s",
			 topics[i]);
		fclose(fopen(e.log, "w"));
		pid = worker_start(&e, extra);
		status = cc_wait(pid, WAIT_MS);
		log = tt_read_text(e.log);
		cr_expect(cc_exited(status, 2), "%s: status %d:\n%s", topics[i],
			  status, log);
		cr_expect(strstr(log, i == 0 ? "pattern subscriptions are not "
					       "supported"
					     : "is not a Kafka topic name"),
			  "%s:\n%s", topics[i], log);
		free(log);
	}
	cr_expect_eq(
	    tt_query(e.tokens, "SELECT COUNT(*) FROM tbx_subscriptions"), 0);
	env_free(&e);
}

/* ---- a retired group's subscription -------------------------------- */

Test(cli_stores, a_retired_subscription_is_flagged_and_removed, .timeout = 240)
{
	env_t e = env_new();
	char setting[600];
	const char *extra[] = {setting, NULL};
	cc_result_t res;
	pid_t pid;
	const char *grp_tokens =
	    "SELECT COUNT(*) FROM tbx_tokens WHERE grp = 'hello'";

	init_tokens(e.tokens);
	snprintf(setting, sizeof(setting), "tokens.path=%s", e.tokens);
	pid = worker_start(&e, extra);
	assert_log(wait_for(e.tokens, SUBSCRIBED, 1), &e,
		   "the worker did not subscribe");
	cr_assert(cc_exited(stop_worker(pid), 0));

	/* The group is gone for good, yet collects a token per message. */
	res = send_lines(&e, e.tokens, "1\n2\n3\n4\n");
	cr_assert(cc_exited(res.status, 0), "send: %s", res.err);
	cc_result_free(&res);
	cr_assert_eq(tt_query(e.tokens, grp_tokens), 4);

	/* status --check flags a subscription unused for --idle-after. */
	{
		const char *args[] = {
		    "inspect", "--store", e.store,	  "--tokens", e.tokens,
		    "status",  "--check", "--idle-after", "0s",	      NULL};
		res = cc_run(args);
		cr_expect(cc_exited(res.status, 1), "%d: %s%s", res.status,
			  res.out, res.err);
		cr_expect(strstr(res.out, "(idle)"), "%s", res.out);
		cc_result_free(&res);
	}
	/* Used less than the default day ago: refused. */
	{
		const char *args[] = {"inspect",  "--store", e.store,
				      "--tokens", e.tokens,  "unsubscribe",
				      "--group",  "hello",   "--topic",
				      "hello",	  "--yes",   NULL};
		res = cc_run(args);
		cr_expect(cc_exited(res.status, 2), "%d: %s%s", res.status,
			  res.out, res.err);
		cr_expect(strstr(res.err, "--idle-after"), "%s", res.err);
		cc_result_free(&res);
	}
	/* Without --yes: says what would go, removes nothing. */
	{
		const char *args[] = {
		    "inspect",	    "--store", e.store, "--tokens", e.tokens,
		    "unsubscribe",  "--group", "hello", "--topic",  "hello",
		    "--idle-after", "0s",      NULL};
		res = cc_run(args);
		cr_expect(cc_exited(res.status, 0), "%d: %s", res.status,
			  res.err);
		cr_expect(strstr(res.out, "would remove 4 token row(s)"), "%s",
			  res.out);
		cc_result_free(&res);
		cr_assert_eq(tt_query(e.tokens, SUBSCRIBED), 1);
		cr_assert_eq(tt_query(e.tokens, grp_tokens), 4);
	}
	{
		const char *args[] = {
		    "inspect",	    "--store", e.store, "--tokens", e.tokens,
		    "unsubscribe",  "--group", "hello", "--topic",  "hello",
		    "--idle-after", "0s",      "--yes", NULL};
		res = cc_run(args);
		cr_expect(cc_exited(res.status, 0), "%d: %s", res.status,
			  res.err);
		cc_result_free(&res);
	}
	cr_expect_eq(tt_query(e.tokens, SUBSCRIBED), 0);
	cr_expect_eq(tt_query(e.tokens, grp_tokens), 0);

	/* Senders mint nothing for it any more. */
	res = send_lines(&e, e.tokens, "5\n6\n");
	cr_assert(cc_exited(res.status, 0), "send: %s", res.err);
	cc_result_free(&res);
	cr_expect_eq(tt_query(e.tokens, grp_tokens), 0);
	{
		const char *args[] = {"inspect",  "--store", e.store,
				      "--tokens", e.tokens,  "status",
				      "--check",  NULL};
		res = cc_run(args);
		cr_expect(cc_exited(res.status, 0), "%d: %s%s", res.status,
			  res.out, res.err);
		cc_result_free(&res);
	}
	env_free(&e);
}

Test(cli_stores, init_help_and_errors, .timeout = 60)
{
	const char *help[] = {"init", "--help", NULL};
	const char *none[] = {"init", NULL};
	cc_result_t res = cc_run(help);

	cr_assert(cc_exited(res.status, 0));
	cr_expect(strstr(res.out, "Usage: tokenbox init"), "%s", res.out);
	cr_expect(strstr(res.out, "tbx-store"), "%s", res.out);
	cc_result_free(&res);
	res = cc_run(none);
	cr_assert(cc_exited(res.status, 2));
	cr_expect_eq(cc_lines(res.err), 1, "%s", res.err);
	cc_result_free(&res);
}

/* The short options mean what they mean in every command (README): -S
 * the token store, -s the service store; -t, a topic elsewhere, is not
 * init's. */
Test(cli_stores, init_short_options_are_the_commands_own, .timeout = 60)
{
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "t.db"), *store = tt_path(dir, "s.db");
	const char *by_s[] = {"init", "-S", tokens, "-s", store, NULL};
	const char *old_t[] = {"init", "-t", tokens, NULL};
	cc_result_t res = cc_run(by_s);

	cr_expect(cc_exited(res.status, 0), "%d: %s%s", res.status, res.out,
		  res.err);
	cr_expect(strstr(res.out, tokens) && strstr(res.out, store), "%s",
		  res.out);
	cc_result_free(&res);
	/* On SQLite both are the same kind of file. */
	cr_expect_eq(access(tokens, F_OK), 0, "-S made no token store");
	cr_expect_eq(access(store, F_OK), 0, "-s made no service store");
	res = cc_run(old_t);
	cr_expect(cc_exited(res.status, 2), "-t: %d", res.status);
	cr_expect(strstr(res.err, "-t") && cc_lines(res.err) == 1, "%s",
		  res.err);
	cc_result_free(&res);
	free(tokens);
	free(store);
	tt_rmrf(dir);
	free(dir);
}

/* ---- alarms ------------------------------------------------------- */

static void exec_sql(const char *db, const char *sql)
{
	sqlite3 *conn;

	cr_assert_eq(sqlite3_open(db, &conn), SQLITE_OK);
	sqlite3_busy_timeout(conn, 5000);
	cr_assert_eq(sqlite3_exec(conn, sql, NULL, NULL, NULL), SQLITE_OK, "%s",
		     sqlite3_errmsg(conn));
	sqlite3_close(conn);
}

Test(cli_stores, a_group_dropping_most_records_as_duplicates_is_warned,
     .timeout = 240)
{
	env_t e = env_new();
	char setting[600], *lines = NULL;
	size_t len = 0;
	const char *extra[] = {setting, NULL};
	cc_result_t res;
	pid_t pid;

	init_tokens(e.tokens);
	snprintf(setting, sizeof(setting), "tokens.path=%s", e.tokens);
	pid = worker_start(&e, extra);
	assert_log(wait_for(e.tokens, SUBSCRIBED, 1), &e,
		   "the worker did not subscribe");
	cr_assert(cc_exited(stop_worker(pid), 0));
	cc_append(&lines, &len, "", 0);
	for (int i = 0; i < 120; i++) {
		char line[16];
		snprintf(line, sizeof(line), "m%d\n", i);
		cc_append(&lines, &len, line, strlen(line));
	}
	res = send_lines(&e, e.tokens, lines);
	cr_assert(cc_exited(res.status, 0), "send: %s", res.err);
	cc_result_free(&res);
	free(lines);
	/* The tokens vanish (a store restored from a backup older than
	 * them, records re-produced by hand...): the records cannot be
	 * told from finished ones, but the share of them is alarming. */
	exec_sql(e.tokens, "DELETE FROM tbx_tokens");
	/* A redelivery after an assignment is taken for normal up to 4
	 * batches per partition: with batches of 5, each partition's 60 or
	 * so records are well past it. */
	const char *small[] = {setting, "batch.max.messages=5", NULL};
	pid = worker_start(&e, small);
	assert_log(wait_log(e.log, "likely causes"), &e, "no warning");
	assert_log(wait_for(e.store,
			    "SELECT COUNT(*) FROM tbx_alarms WHERE name = "
			    "'duplicate_share'",
			    1),
		   &e, "no alarm recorded");
	{
		const char *args[] = {"inspect",  "--store", e.store,
				      "--tokens", e.tokens,  "status",
				      "--check",  NULL};
		res = cc_run(args);
		cr_expect(cc_exited(res.status, 1), "%d: %s%s", res.status,
			  res.out, res.err);
		cr_expect(strstr(res.out, "duplicate_share"), "%s", res.out);
		cc_result_free(&res);
	}
	cr_assert(cc_exited(stop_worker(pid), 0));
	env_free(&e);
}

static void copy_file(const char *from, const char *to)
{
	char *text = NULL;
	size_t len = 0, n;
	char chunk[65536];
	FILE *in = fopen(from, "rb"), *out;

	cr_assert(in, "%s: %s", from, strerror(errno));
	cc_append(&text, &len, "", 0);
	while ((n = fread(chunk, 1, sizeof(chunk), in)) > 0)
		cc_append(&text, &len, chunk, n);
	fclose(in);
	out = fopen(to, "wb");
	cr_assert(out, "%s: %s", to, strerror(errno));
	cr_assert_eq(fwrite(text, 1, len, out), len);
	cr_assert_eq(fclose(out), 0);
	free(text);
}

/*
 * A token store restored from a backup taken before three records were
 * minted: each must be dead-lettered as never issued, none dropped as a
 * duplicate.  @p extra: the worker's further settings (NULL-ended, at most
 * three); batch.max.messages=1 judges each record in a batch of its own,
 * so that whatever the worker or its dead letters take from the restored
 * sequence in one batch is there when the next record is judged.
 * @p joined: one file for both stores (every A takes a number).
 */
static void restored_drops_nothing(const char *const extra_in[], int joined)
{
	env_t e = env_new();
	const char *tokens = joined ? e.store : e.tokens;
	char setting[600], *backup = tt_path(e.dir, "backup.db"), *log;
	char wal[600], shm[600];
	const char *extra[5] = {setting, NULL};
	cc_result_t res;
	pid_t pid;
	int status;

	for (size_t i = 0; extra_in && extra_in[i] && i < 3; i++)
		extra[i + 1] = extra_in[i];
	snprintf(wal, sizeof(wal), "%s-wal", tokens);
	snprintf(shm, sizeof(shm), "%s-shm", tokens);
	init_tokens(tokens);
	snprintf(setting, sizeof(setting), "tokens.path=%s", tokens);
	pid = worker_start(&e, extra);
	assert_log(wait_for(tokens, SUBSCRIBED, 1), &e,
		   "the worker did not subscribe");
	cr_assert(cc_exited(stop_worker(pid), 0));
	/* Every process closed the store: the backup is the whole file. */
	copy_file(tokens, backup);
	res = send_lines(&e, tokens, "one\ntwo\nthree\n");
	cr_assert(cc_exited(res.status, 0), "send: %s", res.err);
	cc_result_free(&res);
	/* Restored: the three tokens, and the numbers they took, are gone
	 * (the id is the same: it is the same store). */
	unlink(wal);
	unlink(shm);
	copy_file(backup, tokens);
	cr_assert_eq(tt_query(tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);

	pid = worker_start(&e, extra);
	assert_log(wait_for(e.store,
			    "SELECT COUNT(*) FROM tbx_dead_letters WHERE "
			    "error LIKE '%never issued%'",
			    3),
		   &e, "the records were not dead-lettered");
	status = stop_worker(pid);
	log = tt_read_text(e.log);
	cr_assert(cc_exited(status, 0), "status %d:\n%s", status, log);
	cr_expect(strstr(log, "3 consumed, 0 processed, 0 duplicates dropped, "
			      "3 dead-lettered"),
		  "%s", log);
	free(log);
	free(backup);
	env_free(&e);
}

Test(cli_stores, a_token_store_restored_from_an_older_backup_drops_nothing,
     .timeout = 240)
{
	restored_drops_nothing(NULL, 0);
}

/* The same with every record judged in a batch of its own: the numbers
 * the restored store issues again after the first (to the worker's dead
 * letters, or a joined A) must not make the lost ones look issued. */
Test(cli_stores, a_restored_token_store_drops_nothing_one_record_per_batch,
     .timeout = 240)
{
	const char *extra[] = {"batch.max.messages=1", NULL};

	restored_drops_nothing(extra, 0);
}

/* One file for both stores, restored whole: every batch's A takes a number
 * from the restored sequence before it judges its record. */
Test(cli_stores, a_restored_single_file_drops_nothing_one_record_per_batch,
     .timeout = 240)
{
	const char *extra[] = {"batch.max.messages=1", NULL};

	restored_drops_nothing(extra, 1);
}
