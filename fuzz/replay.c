/*
 * Runs files through a fuzz target without libFuzzer: each argument is a
 * file, or a directory whose files are all run (sorted, so that a failure
 * names the same file every time).  The normal and the sanitizer builds
 * run the checked-in corpus this way as tests (fuzz/CMakeLists.txt).
 * Exits 0 when every file passed; a failing check aborts.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz/fuzz.h"

/* Optional in a target, as with libFuzzer. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *data = NULL;
	size_t size = 0, cap = 0, n;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	do {
		if (size == cap) {
			uint8_t *grown;
			cap = cap ? cap * 2 : 4096;
			if (!(grown = realloc(data, cap))) {
				fprintf(stderr, "replay: out of memory\n");
				free(data);
				fclose(f);
				return -1;
			}
			data = grown;
		}
		n = fread(data + size, 1, cap - size, f);
		size += n;
	} while (n > 0);
	if (ferror(f)) {
		fprintf(stderr, "replay: %s: read error\n", path);
		free(data);
		fclose(f);
		return -1;
	}
	fclose(f);
	/* A copy of exactly @p size bytes, so that ASan sees reads past it. */
	uint8_t *exact = malloc(size ? size : 1);
	if (!exact) {
		free(data);
		return -1;
	}
	if (size)
		memcpy(exact, data, size);
	free(data);
	fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
	LLVMFuzzerTestOneInput(exact, size);
	free(exact);
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, size_t *files)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t cnt = 0, cap = 0;
	int rc = 0;

	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (cnt == cap) {
			char **grown;
			cap = cap ? cap * 2 : 64;
			if (!(grown = realloc(names, cap * sizeof(*names)))) {
				rc = -1;
				break;
			}
			names = grown;
		}
		size_t len = strlen(dir) + strlen(e->d_name) + 2;
		if (!(names[cnt] = malloc(len))) {
			rc = -1;
			break;
		}
		snprintf(names[cnt], len, "%s/%s", dir, e->d_name);
		cnt++;
	}
	closedir(d);
	if (cnt)
		qsort(names, cnt, sizeof(*names), by_name);
	for (size_t i = 0; i < cnt; i++) {
		if (!rc && run_file(names[i]) < 0)
			rc = -1;
		free(names[i]);
	}
	free(names);
	*files += cnt;
	return rc;
}

int main(int argc, char **argv)
{
	size_t files = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		struct stat st;

		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i],
				strerror(errno));
			return 1;
		}
		if (S_ISDIR(st.st_mode)) {
			if (run_dir(argv[i], &files) < 0)
				return 1;
		} else {
			if (run_file(argv[i]) < 0)
				return 1;
			files++;
		}
	}
	if (files == 0) {
		fprintf(stderr, "replay: no input files\n");
		return 1;
	}
	fprintf(stderr, "replay: %zu files passed\n", files);
	return 0;
}
