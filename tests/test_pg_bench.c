/*
 * The benchmark on PostgreSQL (the pg tier): tbx_floor --store-url runs
 * every variant and prints its round trips, tbx_bench --store-url runs
 * plain, inbox, inbox-batched and tokenbox and reports each, tbx_bench
 * --pg-workers runs one and three tokenbox workers of a group in both
 * layouts and each record once, and neither prints the password of the
 * connection string nor leaves a schema behind.  Speeds and lock waits
 * are not checked.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

#define SECRET "sekret-of-the-bench"

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	cr_assert(f, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	cr_assert(fread(buf, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	return buf;
}

/* Runs @p argv with stdout to @p out and stderr to @p err; @returns the
 * exit status and *pid the child's. */
static int run(char *const argv[], const char *out, const char *err,
	       pid_t *child)
{
	pid_t pid = fork();
	int status;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	*child = pid;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The server's URL with a password that the server (trust) ignores and
 * that no output may show. */
static void url_with_password(char *out, size_t size)
{
	const char *url = tt_pg_url();

	if (strncmp(url, "postgres", 8) == 0)
		snprintf(out, size, "%s%spassword=" SECRET, url,
			 strchr(url, '?') ? "&" : "?");
	else
		snprintf(out, size, "%s password=" SECRET, url);
}

/* Schemas whose names start with @p prefix. */
static long schemas_like(const char *prefix)
{
	PGconn *conn = PQconnectdb(tt_pg_url());
	char like[160];
	const char *v[1] = {like};
	PGresult *res;
	long n;

	cr_assert_eq(PQstatus(conn), CONNECTION_OK, "%s", PQerrorMessage(conn));
	size_t o = 0;

	for (const char *c = prefix; *c && o + 3 < sizeof(like); c++) {
		if (*c == '_') /* a wildcard of LIKE */
			like[o++] = '\\';
		like[o++] = *c;
	}
	like[o++] = '%';
	like[o] = '\0';
	res = PQexecParams(conn,
			   "SELECT count(*) FROM pg_namespace WHERE nspname "
			   "LIKE $1",
			   1, NULL, v, NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s",
		     PQresultErrorMessage(res));
	n = atol(PQgetvalue(res, 0, 0));
	PQclear(res);
	PQfinish(conn);
	return n;
}

static void no_secret(const char *path)
{
	char *text = slurp(path);

	cr_assert_null(strstr(text, SECRET), "the password in %s:\n%s", path,
		       text);
	free(text);
}

static char *bin(const char *name)
{
	const char *dir = getenv("TBX_BIN_DIR");
	char *path = tt_path(dir ? dir : ".", name);

	if (access(path, X_OK) != 0) {
		free(path);
		cr_skip_test("%s is not built", name);
	}
	return path;
}

Test(pg_bench, floor_runs_every_variant_in_round_trips)
{
	char *dir = tt_tmpdir(), *out = tt_path(dir, "stdout"),
	     *err = tt_path(dir, "stderr"), *floor = bin("bench/tbx_floor");
	char url[2048], prefix[64];
	pid_t pid;

	url_with_password(url, sizeof(url));
	char *argv[] = {floor, "--store-url", url,   "--records",
			"600", "--batch",     "100", "--rounds",
			"1",   NULL};
	int status = run(argv, out, err, &pid);
	char *text = slurp(out), *errs = slurp(err);
	cr_assert_eq(status, 0, "tbx_floor failed:\n%s\n%s", text, errs);
	const char *names[] = {"\nplain ",	   "\ninbox ",
			       "\noutbox ",	   "\ntoken ",
			       "\ntoken-batched ", "\ntoken-per-record "};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *line = strstr(text, names[i]);
		cr_assert(line, "no line %s in:\n%s", names[i] + 1, text);
		cr_assert(strstr(line, "rt/record"), "%s", text);
	}
	no_secret(out);
	no_secret(err);
	snprintf(prefix, sizeof(prefix), "tbx_floor_%ld_", (long)pid);
	cr_assert_eq(schemas_like(prefix), 0, "schemas %s* left behind",
		     prefix);
	free(text);
	free(errs);
	tt_rmrf(dir);
	free(floor);
	free(out);
	free(err);
	free(dir);
}

static const cJSON *contender(const cJSON *root, const char *name)
{
	const cJSON *c;

	cJSON_ArrayForEach(c,
			   cJSON_GetObjectItemCaseSensitive(root, "contenders"))
	{
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
		if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
			return c;
	}
	return NULL;
}

static double num(const cJSON *c, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, name);

	cr_assert(cJSON_IsNumber(v), "no number %s", name);
	return v->valuedouble;
}

Test(pg_bench, bench_reports_plain_inbox_inbox_batched_and_tokenbox,
     .timeout = 600)
{
	char *dir = tt_tmpdir(), *out = tt_path(dir, "stdout"),
	     *err = tt_path(dir, "stderr"), *res = tt_path(dir, "results"),
	     *bench = bin("bench/tbx_bench"), *tokenbox = bin("tokenbox");
	char url[2048], prefix[64];
	pid_t pid;

	url_with_password(url, sizeof(url));
	char *argv[] = {
	    bench,  "--store-url",	  url,	    "--quick", "--messages",
	    "1000", "--latency-messages", "0",	    "--json",  "--out",
	    res,    "--tokenbox",	  tokenbox, NULL};
	int status = run(argv, out, err, &pid);
	char *text = slurp(out), *errs = slurp(err);
	cr_assert_eq(status, 0, "tbx_bench failed:\n%s\n%s", text, errs);

	/* The JSON, then the summary line last. */
	char *last = text + strlen(text);
	while (last > text && last[-1] == '\n')
		*--last = '\0';
	char *summary = strrchr(text, '\n');
	cr_assert(summary, "%s", text);
	*summary++ = '\0';
	cr_assert(strncmp(summary, "bench: tokenbox/plain=", 22) == 0 &&
		      strstr(summary, "tokens_left=0") &&
		      !strstr(summary, "tokenbox/inbox=n/a"),
		  "summary: %s", summary);
	cJSON *root = cJSON_Parse(text);
	cr_assert(root, "not JSON:\n%s", text);
	const cJSON *store = cJSON_GetObjectItemCaseSensitive(root, "store");
	cr_assert(cJSON_IsString(store) &&
		      strncmp(store->valuestring, "postgres", 8) == 0,
		  "store: %s", text);
	const char *names[] = {"plain", "inbox", "tokenbox", "inbox-batched"};
	for (size_t i = 0; i < 4; i++) {
		const cJSON *c = contender(root, names[i]);
		cr_assert(c, "no contender %s:\n%s", names[i], text);
		cr_assert_gt(num(c, "msgs_per_s"), 0, "%s", names[i]);
		cr_assert_gt(num(c, "round_trips_per_record"), 0, "%s",
			     names[i]);
		cr_assert_gt(num(c, "commits_per_1k"), 0, "%s", names[i]);
	}
	cr_assert_eq(num(contender(root, "inbox"), "dedup_rows_left"), 1000);
	cr_assert_eq(num(contender(root, "tokenbox"), "dedup_rows_left"), 0);
	/* inbox-batched: the inbox's outcome (it checks itself that each
	 * id has one business row and no outbox row is left, and fails the
	 * run otherwise), its business rows pipelined: counted round trips,
	 * not times. */
	cr_assert_eq(num(contender(root, "inbox-batched"), "dedup_rows_left"),
		     1000);
	cr_assert_geq(num(contender(root, "inbox"), "round_trips_per_record"),
		      1.0);
	cr_assert_lt(
	    num(contender(root, "inbox-batched"), "round_trips_per_record"),
	    0.2);
	cr_assert(strstr(summary, " tokenbox/inbox-batched="), "summary: %s",
		  summary);
	cr_assert_null(contender(root, "kafka-txn"));
	cJSON_Delete(root);

	no_secret(out);
	no_secret(err);
	char *json = tt_path(res, "bench.json"),
	     *txt = tt_path(res, "bench.txt");
	no_secret(json);
	no_secret(txt);
	snprintf(prefix, sizeof(prefix), "bench_%ld_", (long)pid);
	cr_assert_eq(schemas_like(prefix), 0, "schemas %s* left behind",
		     prefix);
	free(json);
	free(txt);
	free(text);
	free(errs);
	tt_rmrf(dir);
	free(bench);
	free(tokenbox);
	free(res);
	free(out);
	free(err);
	free(dir);
}

/* The configuration of --pg-workers's output with @p layout and
 * @p workers among @p arr, or NULL. */
static const cJSON *pgw_entry(const cJSON *arr, const char *layout, int workers)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, arr)
	{
		const cJSON *l = cJSON_GetObjectItemCaseSensitive(c, "layout");
		if (cJSON_IsString(l) && strcmp(l->valuestring, layout) == 0 &&
		    num(c, "workers") == workers)
			return c;
	}
	return NULL;
}

/* --pg-workers: tokenbox with one and with three worker processes of one
 * group on one service schema and one token schema, in both layouts.
 * The outcome only: every record has exactly one business row (the
 * bench also fails the run when an outbox row, a token or a
 * registration of the group is left); how many lock waits the sampler
 * saw is a measurement, not asserted. */
Test(pg_bench, pg_workers_process_every_record_once_in_both_layouts,
     .timeout = 900)
{
	char *dir = tt_tmpdir(), *out = tt_path(dir, "stdout"),
	     *err = tt_path(dir, "stderr"), *res = tt_path(dir, "results"),
	     *bench = bin("bench/tbx_bench"), *tokenbox = bin("tokenbox");
	char url[2048], prefix[64];
	pid_t pid;

	url_with_password(url, sizeof(url));
	char *argv[] = {bench,
			"--store-url",
			url,
			"--contenders",
			"tokenbox",
			"--pg-workers",
			"1,3",
			"--quick",
			"--messages",
			"1000",
			"--latency-messages",
			"0",
			"--json",
			"--out",
			res,
			"--tokenbox",
			tokenbox,
			NULL};
	int status = run(argv, out, err, &pid);
	char *text = slurp(out), *errs = slurp(err);
	cr_assert_eq(status, 0, "tbx_bench failed:\n%s\n%s", text, errs);

	char *summary = strrchr(text, '\n');
	while (summary && summary > text && summary[1] == '\0') {
		*summary = '\0';
		summary = strrchr(text, '\n');
	}
	cr_assert(summary, "%s", text);
	*summary = '\0';
	cJSON *root = cJSON_Parse(text);
	cr_assert(root, "not JSON:\n%s", text);
	const cJSON *pgw =
	    cJSON_GetObjectItemCaseSensitive(root, "tokenbox_pg_workers");
	cr_assert(pgw, "no tokenbox_pg_workers:\n%s", text);
	const cJSON *runs = cJSON_GetObjectItemCaseSensitive(pgw, "runs"),
		    *conf =
			cJSON_GetObjectItemCaseSensitive(pgw, "configurations");
	cr_assert_eq(cJSON_GetArraySize(runs), 4, "%s", text);
	cr_assert_eq(cJSON_GetArraySize(conf), 4, "%s", text);
	const char *layouts[] = {"record", "batch"};
	const int counts[] = {1, 3};
	for (size_t l = 0; l < 2; l++)
		for (size_t w = 0; w < 2; w++) {
			const cJSON *r = pgw_entry(runs, layouts[l], counts[w]);
			cr_assert(r, "no run %s/%d:\n%s", layouts[l], counts[w],
				  text);
			cr_assert_eq(num(r, "business_rows"), 1000, "%s/%d",
				     layouts[l], counts[w]);
			cr_assert_eq(num(r, "distinct_ids"), 1000, "%s/%d",
				     layouts[l], counts[w]);
			cr_assert(pgw_entry(conf, layouts[l], counts[w]),
				  "no configuration %s/%d", layouts[l],
				  counts[w]);
			const cJSON *f = cJSON_GetObjectItemCaseSensitive(
			    r, "tokens_format");
			cr_assert(cJSON_IsString(f) &&
				      strcmp(f->valuestring,
					     l ? "set" : "message") == 0,
				  "%s/%d", layouts[l], counts[w]);
		}
	cJSON_Delete(root);

	no_secret(out);
	no_secret(err);
	snprintf(prefix, sizeof(prefix), "bench_%ld_", (long)pid);
	cr_assert_eq(schemas_like(prefix), 0, "schemas %s* left behind",
		     prefix);
	free(text);
	free(errs);
	tt_rmrf(dir);
	free(bench);
	free(tokenbox);
	free(res);
	free(out);
	free(err);
	free(dir);
}

/* --pg-workers and --lock-sample-ms are checked before anything runs. */
Test(pg_bench, pg_workers_options_are_validated)
{
	char *dir = tt_tmpdir(), *out = tt_path(dir, "stdout"),
	     *err = tt_path(dir, "stderr"), *bench = bin("bench/tbx_bench");
	char url[2048];
	pid_t pid;

	url_with_password(url, sizeof(url));
	struct {
		const char *args[4];
		const char *says;
	} bad[] = {
	    {{"--pg-workers", "1,3", NULL}, "only with --store-url"},
	    {{"--store-url", url, "--pg-workers", "0"}, "1..8"},
	    {{"--store-url", url, "--pg-workers", "1,9"}, "1..8"},
	    {{"--store-url", url, "--pg-workers", "3,3"}, "twice"},
	    {{"--store-url", url, "--pg-workers", "1,2,3,4,5"}, "at most 4"},
	    {{"--store-url", url, "--pg-workers", "1,x"}, "'x'"},
	    {{"--lock-sample-ms", "5", NULL}, "only with --pg-workers"},
	    {{"--store-url", url, "--lock-sample-ms", "0"}, "1..1000"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *argv[6] = {bench};
		size_t n = 1;
		for (size_t k = 0; k < 4 && bad[i].args[k]; k++)
			argv[n++] = (char *)bad[i].args[k];
		argv[n] = NULL;
		int status = run(argv, out, err, &pid);
		char *errs = slurp(err);
		cr_assert_eq(status, 2, "case %zu: status %d:\n%s", i, status,
			     errs);
		cr_assert(strstr(errs, bad[i].says), "case %zu: %s", i, errs);
		cr_assert_null(strstr(errs, SECRET), "case %zu: %s", i, errs);
		free(errs);
	}
	tt_rmrf(dir);
	free(bench);
	free(out);
	free(err);
	free(dir);
}
