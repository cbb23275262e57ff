/*
 * Fuzz target: the configuration of `tokenbox worker` -- a properties file
 * (--config FILE) and -X KEY=VALUE arguments -- as the command reads them
 * (read_config() and apply_override() of tools/cmd_worker.c, included
 * here for its static functions) down to the property table's checks
 * (tbx_conf_set() in consumer/conf.c) and librdkafka's for kafka.* keys.
 * Nothing is loaded or opened: plugin= is only recorded.
 *
 * Input: the file's bytes.  Then each line of it is applied again as one
 * -X argument (up to a NUL byte, as a command line would cut it).
 *
 * Checked: no memory error or undefined behaviour (the sanitizers); the
 * only outcomes are "accepted" and a usage error (exit status 2) with a
 * message; a file that is accepted is accepted again on a fresh
 * configuration and every key it set reads back the same from a copy.
 */
#include "tools/cmd_worker.c"

#include "consumer/conf.h"
#include "fuzz/fuzz.h"

static char path[64];

static void remove_file(void)
{
	unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int fd;

	snprintf(path, sizeof(path), "/tmp/tbx-fuzz-conf.XXXXXX");
	if ((fd = mkstemp(path)) < 0) {
		perror("fuzz_config: mkstemp");
		exit(1);
	}
	close(fd);
	atexit(remove_file);
	/* The command's messages (the fuzzer makes millions) go nowhere;
	 * FUZZ_CHECK and the sanitizers write to file descriptor 2. */
	if (!(stderr = fopen("/dev/null", "w")))
		exit(1);
	return 0;
}

static void forget(worker_cmd_t *w)
{
	tbx_conf_destroy(w->conf);
	plugins_free(w); /* nothing is loaded: apply() only lists them */
	memset(w, 0, sizeof(*w));
}

static int write_file(const uint8_t *data, size_t size)
{
	FILE *f = fopen(path, "wb");

	if (!f)
		return -1;
	if (size && fwrite(data, 1, size, f) != size) {
		fclose(f);
		return -1;
	}
	return fclose(f);
}

/* Every property the table has reads back the same from @p a and @p b,
 * as text and in its typed field. */
static void same_values(const tbx_conf_t *a, const tbx_conf_t *b)
{
	const char *fa = (const char *)tbx__conf_cfg(a);
	const char *fb = (const char *)tbx__conf_cfg(b);

	for (size_t i = 0; tbx__props[i].name; i++) {
		const tbx__prop_t *p = &tbx__props[i];
		const char *va = tbx_conf_get(a, p->name);
		const char *vb = tbx_conf_get(b, p->name);
		FUZZ_CHECK((va == NULL) == (vb == NULL));
		FUZZ_CHECK(!va || strcmp(va, vb) == 0);
		if (p->type == TBX_PT_INT) {
			FUZZ_CHECK(memcmp(fa + p->offset, fb + p->offset,
					  sizeof(int64_t)) == 0);
		} else if (p->type == TBX_PT_ENUM) {
			FUZZ_CHECK(memcmp(fa + p->offset, fb + p->offset,
					  sizeof(int)) == 0);
		} else {
			const char *sa, *sb;
			memcpy(&sa, fa + p->offset, sizeof(sa));
			memcpy(&sb, fb + p->offset, sizeof(sb));
			FUZZ_CHECK((sa == NULL) == (sb == NULL));
			FUZZ_CHECK(!sa || strcmp(sa, sb) == 0);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	worker_cmd_t w = {0}, again = {0};
	int rc;

	FUZZ_CHECK(write_file(data, size) == 0);
	FUZZ_CHECK((w.conf = tbx_conf_new()) != NULL);
	rc = read_config(&w, path);
	FUZZ_CHECK(rc == 0 || rc == TBX_EXIT_USAGE);
	if (rc == 0) {
		tbx_conf_t *copy = tbx_conf_dup(w.conf);

		FUZZ_CHECK(copy);
		same_values(w.conf, copy);
		tbx_conf_destroy(copy);
		FUZZ_CHECK((again.conf = tbx_conf_new()) != NULL);
		FUZZ_CHECK(read_config(&again, path) == 0);
		same_values(w.conf, again.conf);
		FUZZ_CHECK(w.plugin_cnt == again.plugin_cnt);
		forget(&again);
	}

	/* Each line as -X. */
	for (size_t at = 0; at < size;) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);
		size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
		char *arg = strndup((const char *)data + at, len);

		FUZZ_CHECK(arg);
		rc = apply_override(&w, arg);
		FUZZ_CHECK(rc == 0 || rc == TBX_EXIT_USAGE);
		free(arg);
		at += len + 1;
	}
	forget(&w);
	return 0;
}
