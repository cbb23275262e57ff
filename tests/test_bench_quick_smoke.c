/*
 * The benchmark harness works end to end: a short `tbx_bench --quick` run
 * completes, prints well-formed JSON with every contender and section,
 * and ends with the summary line, tokenbox leaving no token behind while
 * the inbox keeps an id per record.  Speeds are not checked: they live in
 * bench/ (docs/performance.md), never in assertions.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"

enum { MESSAGES = 2000 };

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

static char bench[512], tokenbox[512];

static void paths(void)
{
	const char *bin = getenv("TBX_BIN_DIR");

	snprintf(bench, sizeof(bench), "%s/bench/tbx_bench", bin ? bin : ".");
	snprintf(tokenbox, sizeof(tokenbox), "%s/tokenbox", bin ? bin : ".");
}

/* Runs tbx_bench with stdout to @p out; @returns the exit status. */
static int run(char *const argv[], const char *out)
{
	pid_t pid = fork();
	int status;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		FILE *f = freopen(out, "w", stdout);
		if (!f)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const cJSON *contender(const cJSON *root, const char *name)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "contenders"))
	{
		if (strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name) ==
		    0)
			return c;
	}
	cr_assert_fail("no contender %s in the JSON", name);
	return NULL;
}

Test(bench, quick_run_prints_json_and_a_summary_with_no_tokens_left,
     .timeout = 600)
{
	char *dir = tt_tmpdir(), *out = tt_path(dir, "stdout"), *text, *last;
	char msgs[16], store_msgs[16];
	regex_t re;
	cJSON *root, *file;

	paths();
	snprintf(msgs, sizeof(msgs), "%d", MESSAGES);
	snprintf(store_msgs, sizeof(store_msgs), "%d", MESSAGES);
	char *argv[] = {bench,	    "--quick",
			"--json",   "--messages",
			msgs,	    "--latency-messages",
			"200",	    "--storage-messages",
			store_msgs, "--out",
			dir,	    "--tokenbox",
			tokenbox,   NULL};
	cr_assert_eq(run(argv, out), 0, "tbx_bench failed");

	/* Everything before the last line is the JSON document. */
	text = slurp(out);
	cr_assert(strlen(text) > 2 && text[strlen(text) - 1] == '\n');
	text[strlen(text) - 1] = '\0';
	last = strrchr(text, '\n');
	cr_assert(last, "one line only: %s", text);
	*last++ = '\0';
	cr_assert_eq(regcomp(&re,
			     "^bench: tokenbox/plain=[0-9]+\\.[0-9]{2} "
			     "tokenbox/inbox=[0-9]+\\.[0-9]{2} "
			     "tokenbox/kafka-txn=[0-9]+\\.[0-9]{2} "
			     "tokens_left=0$",
			     REG_EXTENDED | REG_NOSUB),
		     0);
	cr_assert_eq(regexec(&re, last, 0, NULL, 0), 0,
		     "bad summary line: '%s'", last);
	regfree(&re);

	root = cJSON_Parse(text);
	cr_assert(root, "stdout is not JSON before the summary");
	cr_assert_str_eq(cJSON_GetObjectItem(root, "summary")->valuestring,
			 last);
	cr_assert_eq(
	    cJSON_GetArraySize(cJSON_GetObjectItem(root, "contenders")), 4);
	const char *names[] = {"plain", "inbox", "kafka-txn", "tokenbox"};
	for (int i = 0; i < 4; i++) {
		const cJSON *c = contender(root, names[i]);
		cr_assert_gt(cJSON_GetObjectItem(c, "msgs_per_s")->valuedouble,
			     0, "%s", names[i]);
		cr_assert_gt(cJSON_GetObjectItem(c, "p99_ms")->valuedouble, 0,
			     "%s", names[i]);
		cr_assert_gt(
		    cJSON_GetObjectItem(c, "fsyncs_per_1k")->valuedouble, 0,
		    "%s", names[i]);
	}
	cr_assert_eq(
	    cJSON_GetObjectItem(contender(root, "tokenbox"), "dedup_rows_left")
		->valueint,
	    0);
	cr_assert_eq(
	    cJSON_GetObjectItem(contender(root, "inbox"), "dedup_rows_left")
		->valueint,
	    MESSAGES);
	cr_assert_eq(
	    cJSON_GetArraySize(cJSON_GetObjectItem(root, "tokenbox_workers")),
	    3);
	cr_assert_eq(cJSON_GetArraySize(
			 cJSON_GetObjectItem(root, "tokenbox_batch_sizes")),
		     4);
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "storage")),
		     2);

	/* The same document is written under --out, with the plot data. */
	char *json_path = tt_path(dir, "bench.json");
	char *file_text = slurp(json_path);
	file = cJSON_Parse(file_text);
	cr_assert(file, "bench.json is not JSON");
	cr_assert_str_eq(cJSON_GetObjectItem(file, "summary")->valuestring,
			 last);
	char *dat = tt_path(dir, "throughput.dat");
	cr_assert_eq(access(dat, R_OK), 0);

	cJSON_Delete(file);
	cJSON_Delete(root);
	free(file_text);
	free(json_path);
	free(dat);
	free(text);
	tt_rmrf(dir);
	free(out);
	free(dir);
}

Test(bench, bad_options_are_refused_with_status_2)
{
	char *dir = tt_tmpdir(), *out = tt_path(dir, "stdout");

	paths();
	char *bad_num[] = {bench, "--messages", "12x", NULL};
	char *unknown[] = {bench, "--fast", NULL};
	char *kind[] = {bench, "--contenders", "plain,kafka", NULL};
	char *help[] = {bench, "--help", NULL};
	char *batched[] = {bench, "--contenders", "inbox,inbox-batched", NULL};
	cr_assert_eq(run(bad_num, out), 2);
	cr_assert_eq(run(unknown, out), 2);
	cr_assert_eq(run(kind, out), 2);
	/* inbox-batched pipelines PostgreSQL's statements: not on SQLite. */
	cr_assert_eq(run(batched, out), 2);
	cr_assert_eq(run(help, out), 0);
	char *text = slurp(out);
	cr_assert(strstr(text, "Usage: tbx_bench"), "%s", text);
	free(text);
	tt_rmrf(dir);
	free(out);
	free(dir);
}
