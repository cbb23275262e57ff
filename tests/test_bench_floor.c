/*
 * The benchmark's small tools: tbx_floor (the store operations alone,
 * bench/floor.c) runs each variant to the end and refuses bad options,
 * and the plot script (bench/plot.gp) draws what a run measured, also
 * when the storage phase was skipped.  No speed is checked.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"

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

static void put(const char *dir, const char *name, const char *text)
{
	char *path = tt_path(dir, name);
	FILE *f = fopen(path, "w");

	cr_assert(f, "cannot write %s", path);
	cr_assert_geq(fputs(text, f), 0);
	cr_assert_eq(fclose(f), 0);
	free(path);
}

/* Runs @p argv in @p cwd with stdout and stderr to @p out; @returns the
 * exit status. */
static int run(char *const argv[], const char *cwd, const char *out)
{
	pid_t pid = fork();
	int status;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (!freopen(out, "w", stdout) || dup2(1, 2) < 0 ||
		    (cwd && chdir(cwd)))
			_exit(126);
		execvp(argv[0], argv);
		_exit(127);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char floor_bin[512];

static void paths(void)
{
	const char *bin = getenv("TBX_BIN_DIR");

	snprintf(floor_bin, sizeof(floor_bin), "%s/bench/tbx_floor",
		 bin ? bin : ".");
}

Test(bench_floor, every_variant_runs_and_prints_its_line)
{
	char *dir = tt_tmpdir(), *out = tt_path(dir, "stdout"),
	     *stores = tt_path(dir, "stores");

	paths();
	char *argv[] = {floor_bin, "--records", "600",	"--batch",
			"100",	   "--dir",	stores, NULL};
	int status = run(argv, NULL, out);
	char *text = slurp(out);
	cr_assert_eq(status, 0, "tbx_floor failed:\n%s", text);
	const char *names[] = {"\nplain ", "\ninbox ", "\noutbox ", "\ntoken ",
			       "\ntoken-sets "};
	for (size_t i = 0; i < 5; i++)
		cr_assert(strstr(text, names[i]), "no line %s in:\n%s",
			  names[i] + 1, text);
	/* token-sets consumed every incoming bit (its sets are gone), took
	 * its outbox rows out, wrote a row per record and minted a set per
	 * destination partition (6) of each of its 6 batches, a bit per
	 * record. */
	cr_assert(strstr(text, "token-sets rows left: own sets 0, outbox rows "
			       "0, business rows 600, minted sets 36 (600 "
			       "bits)\n"),
		  "%s", text);
	cr_assert(strstr(text, "us/record"), "%s", text);
	/* Its store files are removed; the directory given stays. */
	char *wal = tt_path(stores, "floor-token.db-wal");
	struct stat st;
	cr_assert_neq(stat(wal, &st), 0, "%s left behind", wal);
	free(wal);
	free(text);
	tt_rmrf(dir);
	free(stores);
	free(out);
	free(dir);
}

Test(bench_floor, bad_options_are_refused_with_status_2)
{
	char *dir = tt_tmpdir(), *out = tt_path(dir, "stdout");

	paths();
	char *few[] = {floor_bin, "--records", "10", NULL};
	char *word[] = {floor_bin, "--batch", "5x", NULL};
	char *variant[] = {floor_bin, "--variants", "plain,ledger", NULL};
	char *unknown[] = {floor_bin, "--fast", NULL};
	char *sets_pg[] = {floor_bin,	 "--store-url", "postgresql://nowhere",
			   "--variants", "token-sets",	NULL};
	char *help[] = {floor_bin, "--help", NULL};
	cr_assert_eq(run(few, NULL, out), 2);
	cr_assert_eq(run(word, NULL, out), 2);
	cr_assert_eq(run(variant, NULL, out), 2);
	char *text = slurp(out);
	cr_assert(strstr(text, "unknown variant 'ledger'"), "%s", text);
	free(text);
	cr_assert_eq(run(unknown, NULL, out), 2);
	cr_assert_eq(run(sets_pg, NULL, out), 2);
	text = slurp(out);
	cr_assert(strstr(text, "token-sets runs on SQLite only"), "%s", text);
	free(text);
	cr_assert_eq(run(help, NULL, out), 0);
	text = slurp(out);
	cr_assert(strstr(text, "Usage: tbx_floor"), "%s", text);
	free(text);
	tt_rmrf(dir);
	free(out);
	free(dir);
}

/* gnuplot is not a build dependency (bench/run installs it when it
 * can): without it there is nothing to check. */
static int have_gnuplot(void)
{
	return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

static void plot_in(const char *dir)
{
	char script[1024], *out = tt_path(dir, "plot.out"),
			   *png = tt_path(dir, "bench.png");
	const char *src = getenv("TBX_SOURCE_DIR");
	struct stat st;

	snprintf(script, sizeof(script), "%s/bench/plot.gp", src ? src : ".");
	char *argv[] = {"gnuplot", script, NULL};
	int status = run(argv, dir, out);
	char *text = slurp(out);
	cr_assert_eq(status, 0, "gnuplot failed:\n%s", text);
	free(text);
	cr_assert_eq(stat(png, &st), 0, "no %s", png);
	cr_assert_gt(st.st_size, 0);
	free(png);
	free(out);
}

static const char throughput[] = "plain 92211.0\ninbox 35879.0\n"
				 "kafka-txn 52796.0\ntokenbox 22341.0\n";

Test(bench_plot, draws_throughput_alone_when_the_storage_phase_was_skipped)
{
	char *dir = tt_tmpdir();

	if (!have_gnuplot()) {
		tt_rmrf(dir);
		free(dir);
		cr_skip_test("gnuplot not installed");
	}
	put(dir, "throughput.dat", throughput);
	plot_in(dir);
	char *out = tt_path(dir, "plot.out"), *text = slurp(out);
	cr_assert(strstr(text, "throughput only"), "%s", text);
	free(text);
	free(out);
	tt_rmrf(dir);
	free(dir);
}

Test(bench_plot, draws_both_panels_after_a_storage_phase)
{
	char *dir = tt_tmpdir();

	if (!have_gnuplot()) {
		tt_rmrf(dir);
		free(dir);
		cr_skip_test("gnuplot not installed");
	}
	put(dir, "throughput.dat", throughput);
	put(dir, "storage-inbox.dat", "0 0\n1000 1000\n2000 2000\n");
	put(dir, "storage-tokenbox.dat", "0 0\n1000 500\n2000 0\n");
	plot_in(dir);
	char *out = tt_path(dir, "plot.out"), *text = slurp(out);
	cr_assert_null(strstr(text, "throughput only"), "%s", text);
	free(text);
	free(out);
	tt_rmrf(dir);
	free(dir);
}
