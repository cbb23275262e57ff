/*
 * The metrics table of docs/operations.md, from the metric list of
 * consumer/metrics.h (TBX_METRIC_LIST): the names, types and HELP texts a
 * worker renders.
 *
 *   tbx_metricsdoc            prints the table
 *   tbx_metricsdoc --check F  exit 1 (and a diff-like note) when the table
 *                             between F's markers is not the one printed
 *   tbx_metricsdoc --update F rewrites the table between F's markers
 *
 * The markers are the lines BEGIN_MARK and END_MARK below; the prose
 * around them is F's own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/metrics.h"

#define BEGIN_MARK                                                             \
	"<!-- The metrics table is generated from TBX_METRIC_LIST in "         \
	"consumer/metrics.h by `cmake --build build --target metricsdoc`; "    \
	"the test metrics_doc_is_current fails when it is stale. -->\n"
#define END_MARK "<!-- End of the generated metrics table. -->\n"

/* The table, malloc'ed. */
static char *table(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	fputs("| metric | type | meaning |\n| --- | --- | --- |\n", f);
	for (size_t i = 0; i < TBX_M_COUNT; i++) {
		const tbx__metric_def_t *d = &tbx__metric_defs[i];

		fprintf(f, "| `tokenbox_%s%s%s%s` | %s | %s |\n", d->name,
			*d->labels ? "{" : "", d->labels, *d->labels ? "}" : "",
			d->type, d->help);
	}
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
		if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		} else {
			buf[n] = '\0';
		}
	}
	fclose(f);
	return buf;
}

/* The command's work on @p want, the table; *doc receives the file read
 * (the caller frees it). */
static int run(int argc, char **argv, const char *want, char **doc)
{
	char *begin, *end;
	FILE *f;

	if (argc == 1) {
		fputs(want, stdout);
		return 0;
	}
	if (argc != 3 || (strcmp(argv[1], "--update") != 0 &&
			  strcmp(argv[1], "--check") != 0)) {
		fprintf(stderr,
			"usage: tbx_metricsdoc [--check|--update FILE]\n");
		return 2;
	}
	if (!(*doc = slurp(argv[2]))) {
		fprintf(stderr, "tbx_metricsdoc: cannot read %s\n", argv[2]);
		return 2;
	}
	if (!(begin = strstr(*doc, BEGIN_MARK)) ||
	    !(end = strstr(begin, END_MARK))) {
		fprintf(stderr,
			"tbx_metricsdoc: %s has no generated metrics table "
			"(its markers are missing)\n",
			argv[2]);
		return 2;
	}
	begin += strlen(BEGIN_MARK);
	if (strcmp(argv[1], "--check") == 0) {
		int same = (size_t)(end - begin) == strlen(want) &&
			   memcmp(begin, want, strlen(want)) == 0;

		if (!same)
			fprintf(stderr,
				"tbx_metricsdoc: the metrics table of %s is "
				"stale; run `cmake --build build --target "
				"metricsdoc`.  It should be:\n%s",
				argv[2], want);
		return same ? 0 : 1;
	}
	if (!(f = fopen(argv[2], "wb")) ||
	    fwrite(*doc, 1, (size_t)(begin - *doc), f) !=
		(size_t)(begin - *doc) ||
	    fputs(want, f) == EOF || fputs(end, f) == EOF) {
		if (f)
			fclose(f);
		fprintf(stderr, "tbx_metricsdoc: cannot write %s\n", argv[2]);
		return 2;
	}
	if (fclose(f) != 0) {
		fprintf(stderr, "tbx_metricsdoc: cannot write %s\n", argv[2]);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	char *want = table(), *doc = NULL;
	int rc = want ? run(argc, argv, want, &doc) : 2;

	free(doc);
	free(want);
	return rc;
}
