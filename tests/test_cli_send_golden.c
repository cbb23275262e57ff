/*
 * `tokenbox send`'s error cases, as golden files: every case of
 * tests/data/send/<case>/ has
 *   args    the arguments after "send", one per line ("" for an empty
 *           one)
 *   stdin   the input (optional: empty)
 *   stdout, stderr, exit   what the command must print and return
 *   config  a file a case may name as $CASE/config (optional)
 *   produce-errors  present: every Produce request fails (retriably)
 *           while the case runs
 * $BOOTSTRAP (a mock cluster with topics "in" and "lonely"), $DIR (a fresh
 * directory per case, whose t.db has group "readers" subscribed to "in" only)
 * and $CASE (the case's directory) are substituted in args and in the outputs.
 * Lines librdkafka and the library log (they start with a timestamp) are left
 * out of stderr, and librdkafka's "(after …ms in state …)" is cut, since they
 * vary from run to run.  TBX_UPDATE_GOLDEN=1 rewrites the expected files.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>

#include "cli_child.h"
#include "support.h"

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, r;
	char chunk[4096];

	if (!f)
		return NULL;
	while ((r = fread(chunk, 1, sizeof(chunk), f)) > 0)
		cc_append(&buf, &n, chunk, r);
	fclose(f);
	if (!buf)
		buf = calloc(1, 1);
	if (len)
		*len = n;
	return buf;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert(f, "%s: %s", path, strerror(errno));
	fputs(text, f);
	fclose(f);
}

/* A malloc'ed copy of @p s with every @p from replaced by @p to. */
static char *replace_all(const char *s, const char *from, const char *to)
{
	size_t flen = strlen(from), tlen = strlen(to), n = 0;
	const char *p;
	char *out, *o;

	for (p = s; (p = strstr(p, from)); p += flen)
		n++;
	out = malloc(strlen(s) + n * (tlen > flen ? tlen - flen : 0) + 1);
	cr_assert(out);
	for (o = out; (p = strstr(s, from)); s = p + flen) {
		memcpy(o, s, (size_t)(p - s));
		o += p - s;
		memcpy(o, to, tlen);
		o += tlen;
	}
	memcpy(o, s, strlen(s) + 1);
	return out;
}

/* The ')' that closes the '(' at @p open, before @p end, or NULL.  The
 * text inside may hold parentheses of its own: "(after 0ms in state
 * CONNECT, 1 identical error(s) suppressed)" on a busy machine. */
static const char *closing(const char *open, const char *end)
{
	int depth = 0;

	for (const char *p = open; p < end; p++) {
		if (*p == '(')
			depth++;
		else if (*p == ')' && --depth == 0)
			return p;
	}
	return NULL;
}

/* stderr without log lines ("2026-…Z WARN[…] …") and with librdkafka's
 * "(after 0ms in state CONNECT…)" cut to "(after …)". */
static char *normalise(const char *err)
{
	char *out = malloc(strlen(err) + 1), *o = out;
	const char *line = err;

	cr_assert(out);
	while (*line) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line + 1) : strlen(line);
		int is_log = len > 20 && isdigit((unsigned char)line[0]) &&
			     line[4] == '-' && line[10] == 'T';

		if (!is_log) {
			const char *a = strstr(line, "(after ");
			const char *b =
			    a && a < line + len ? closing(a, line + len) : NULL;
			if (b) {
				memcpy(o, line, (size_t)(a - line));
				o += a - line;
				memcpy(o, "(after ...)", 11);
				o += 11;
				memcpy(o, b + 1, (size_t)(line + len - b - 1));
				o += line + len - b - 1;
			} else {
				memcpy(o, line, len);
				o += len;
			}
		}
		line += len;
	}
	*o = '\0';
	return out;
}

static int golden_case(const char *case_dir, const char *name,
		       tt_cluster_t *cluster, int update)
{
	const char *bootstraps = cluster->bootstraps;
	char *errs_path = tt_path(case_dir, "produce-errors");
	char *errs_file = read_file(errs_path, NULL);
	char *dir = tt_tmpdir();
	char *tokens = tt_path(dir, "t.db");
	char *args_path = tt_path(case_dir, "args");
	char *in_path = tt_path(case_dir, "stdin");
	char *out_path = tt_path(case_dir, "stdout");
	char *err_path = tt_path(case_dir, "stderr");
	char *exit_path = tt_path(case_dir, "exit");
	char *args_text = read_file(args_path, NULL), *line, *save = NULL;
	char *input;
	size_t in_len = 0, argc = 1;
	const char *argv[64] = {"send"};
	char *expanded[64];
	cc_result_t res;
	char *out, *err, *tmp, *want_out, *want_err, *want_exit, code[16];
	int ok = 1;

	cr_assert(args_text, "%s: no args file", name);
	tt_subscribe(tokens, "in", "readers");
	input = read_file(in_path, &in_len);
	for (line = strtok_r(args_text, "\n", &save); line && argc < 62;
	     line = strtok_r(NULL, "\n", &save)) {
		char *a = replace_all(line, "$DIR", dir);
		char *b = replace_all(a, "$BOOTSTRAP", bootstraps);
		char *c = replace_all(b, "$CASE", case_dir);
		/* "" stands for an empty argument. */
		char *d = strcmp(c, "\"\"") == 0 ? calloc(1, 1)
						 : replace_all(c, "\\t", "\t");

		free(a);
		free(b);
		free(c);
		expanded[argc] = d;
		argv[argc] = expanded[argc];
		argc++;
	}
	argv[argc] = NULL;
	if (errs_file) {
		rd_kafka_resp_err_t errs[1000];

		for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
			errs[i] = RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS;
		rd_kafka_mock_push_request_errors_array(
		    cluster->mock, TT_API_PRODUCE,
		    sizeof(errs) / sizeof(errs[0]), errs);
	}
	res = cc_run_with(argv, input ? input : "", in_len, 60000);
	if (errs_file)
		rd_kafka_mock_clear_request_errors(cluster->mock,
						   TT_API_PRODUCE);
	tmp = replace_all(res.out, dir, "$DIR");
	out = replace_all(tmp, bootstraps, "$BOOTSTRAP");
	free(tmp);
	tmp = normalise(res.err);
	err = replace_all(tmp, dir, "$DIR");
	free(tmp);
	tmp = err;
	err = replace_all(tmp, bootstraps, "$BOOTSTRAP");
	free(tmp);
	tmp = err;
	err = replace_all(tmp, case_dir, "$CASE");
	free(tmp);
	snprintf(code, sizeof(code), "%d\n",
		 res.status != -1 && WIFEXITED(res.status)
		     ? WEXITSTATUS(res.status)
		     : -1);
	if (update) {
		write_file(out_path, out);
		write_file(exit_path, code);
		write_file(err_path, err);
	}
	want_out = read_file(out_path, NULL);
	want_err = read_file(err_path, NULL);
	want_exit = read_file(exit_path, NULL);
	if (strcmp(want_out ? want_out : "", out) != 0) {
		cr_expect_fail(
		    "%s: stdout differs\n--- expected\n%s--- got\n%s", name,
		    want_out ? want_out : "(no file)\n", out);
		ok = 0;
	}
	if (!want_exit || strcmp(want_exit, code) != 0) {
		cr_expect_fail("%s: exit %s, expected %s (stderr: %s)", name,
			       code, want_exit ? want_exit : "(no file)", err);
		ok = 0;
	}
	if (strcmp(want_err ? want_err : "", err) != 0) {
		cr_expect_fail(
		    "%s: stderr differs\n--- expected\n%s--- got\n%s", name,
		    want_err ? want_err : "(none)\n", err);
		ok = 0;
	}
	for (size_t i = 1; i < argc; i++)
		free(expanded[i]);
	free(args_text);
	free(input);
	free(errs_path);
	free(errs_file);
	free(out);
	free(err);
	free(want_out);
	free(want_err);
	free(want_exit);
	free(args_path);
	free(in_path);
	free(out_path);
	free(err_path);
	free(exit_path);
	cc_result_free(&res);
	tt_rmrf(dir);
	free(dir);
	free(tokens);
	return ok;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

Test(cli_send, error_cases_match_the_golden_files, .timeout = 900)
{
	const char *src = getenv("TBX_SOURCE_DIR");
	const char *update_env = getenv("TBX_UPDATE_GOLDEN");
	const char *only = getenv("TBX_GOLDEN_CASE");
	int update = update_env && strcmp(update_env, "1") == 0;
	char root[4096], *names[256];
	size_t cnt = 0, failed = 0;
	struct dirent *e;
	tt_cluster_t *c;
	DIR *d;

	cr_assert(src, "TBX_SOURCE_DIR is not set (run through ctest)");
	snprintf(root, sizeof(root), "%s/tests/data/send", src);
	c = tt_cluster_new(1);
	tt_cluster_topic(c, "in", 1);
	tt_cluster_topic(c, "lonely", 1);
	d = opendir(root);
	cr_assert(d, "%s: %s", root, strerror(errno));
	while ((e = readdir(d)) && cnt < 256)
		if (e->d_name[0] != '.' && (!only || !strcmp(only, e->d_name)))
			names[cnt++] = strdup(e->d_name);
	closedir(d);
	qsort(names, cnt, sizeof(names[0]), by_name);
	cr_assert_gt(cnt, 0, "no cases in %s", root);
	for (size_t i = 0; i < cnt; i++) {
		char *case_dir = tt_path(root, names[i]);
		failed += !golden_case(case_dir, names[i], c, update);
		free(case_dir);
		free(names[i]);
	}
	tt_cluster_destroy(c);
	cr_expect_eq(failed, 0, "%zu of %zu golden cases failed%s", failed, cnt,
		     update ? " (rewritten)" : "");
}

/* librdkafka's reason may carry parentheses of its own when it folds
 * repeated errors (seen on a loaded machine): the whole "(after …)" goes. */
Test(cli_send, normalise_cuts_the_whole_after_clause)
{
	char *got = normalise(
	    "tokenbox send: x failed: Connection refused (after 0ms in state "
	    "CONNECT, 1 identical error(s) suppressed); nothing was sent\n"
	    "2026-11-24T06:00:00.000Z WARN[tokenbox] a log line\n"
	    "y (after 5ms in state CONNECT)\n");

	cr_assert_str_eq(got, "tokenbox send: x failed: Connection refused "
			      "(after ...); nothing was sent\n"
			      "y (after ...)\n");
	free(got);
}
