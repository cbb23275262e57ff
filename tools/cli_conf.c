/* --config FILE and -X KEY=VALUE for send and inspect (see cli_conf.h). */
#include "tools/cli_conf.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

int tbx_cli_conf_file(const char *cmd, tbx_cli_conf_t *cc, const char *arg)
{
	if (cc->file)
		return tbx_cli_usage(cmd,
				     "--config given twice ('%s', '%s'): give "
				     "one file, and -X for the rest",
				     cc->file, arg);
	if (!*arg)
		return tbx_cli_usage(cmd, "--config: empty value");
	cc->file = arg;
	return 0;
}

int tbx_cli_conf_override(const char *cmd, tbx_cli_conf_t *cc, const char *arg)
{
	const char *eq = strchr(arg, '=');

	if (!eq || eq == arg)
		return tbx_cli_usage(cmd, "-X '%s': expected key=value", arg);
	if (cc->override_cnt == cc->override_cap) {
		size_t cap = cc->override_cap ? cc->override_cap * 2 : 8;
		const char **grown =
		    realloc(cc->overrides, cap * sizeof(*grown));

		if (!grown)
			return tbx_cli_fail(cmd, "out of memory");
		cc->overrides = grown;
		cc->override_cap = cap;
	}
	cc->overrides[cc->override_cnt++] = arg;
	return 0;
}

void tbx_cli_conf_free(tbx_cli_conf_t *cc)
{
	free(cc->overrides);
	memset(cc, 0, sizeof(*cc));
}

static int set(const char *cmd, tbx_conf_t *conf, const char *where,
	       const char *key, const char *value)
{
	char errstr[512];
	int err;

	if (strcmp(key, "plugin") == 0 || strcmp(key, "plugin.args") == 0)
		return 0; /* the worker's */
	err = tbx_conf_set(conf, key, value, errstr, sizeof(errstr));
	if (err == TBX_ENOMEM)
		return tbx_cli_fail(cmd, "out of memory");
	if (err)
		return tbx_cli_usage(cmd, "%s: %s", where, errstr);
	return 0;
}

static char *trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

/* Formats one error of the file and hands it to @p report. */
__attribute__((format(printf, 3, 4))) static int
report_error(tbx_cli_conf_report_fn report, void *arg, const char *fmt, ...)
{
	char msg[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return report(arg, msg);
}

int tbx_cli_conf_read(const char *path, tbx_cli_conf_set_fn take,
		      tbx_cli_conf_report_fn report, void *arg)
{
	FILE *f = fopen(path, "r");
	/* fopen() took the path, so it fits PATH_MAX (a longer one is
	 * only cut in messages). */
	char *line = NULL, where[PATH_MAX + 24];
	size_t cap = 0, lineno = 0;
	ssize_t n;
	int rc = 0;

	if (!f)
		return report_error(report, arg, "%s: cannot open: %s", path,
				    strerror(errno));
	while (!rc && (n = getline(&line, &cap, f)) != -1) {
		char *s, *eq;

		lineno++;
		snprintf(where, sizeof(where), "%s:%zu", path, lineno);
		if (strlen(line) != (size_t)n) {
			rc = report_error(report, arg,
					  "%s: contains a NUL byte", where);
			break;
		}
		s = trim(line);
		if (!*s || *s == '#')
			continue;
		if (!(eq = strchr(s, '=')) || eq == s) {
			rc = report_error(report, arg,
					  "%s: expected key=value%s", where,
					  eq ? " (the key is empty)" : "");
			break;
		}
		*eq = '\0';
		rc = take(arg, where, trim(s), trim(eq + 1));
	}
	if (!rc && ferror(f))
		rc = report_error(report, arg, "%s: cannot read: %s", path,
				  strerror(errno));
	free(line);
	fclose(f);
	return rc;
}

/* What read_file() hands to tbx_cli_conf_read(). */
typedef struct file_ctx {
	const char *cmd;
	tbx_conf_t *conf;
} file_ctx_t;

static int file_set(void *arg, const char *where, const char *key,
		    const char *value)
{
	file_ctx_t *fc = arg;

	return set(fc->cmd, fc->conf, where, key, value);
}

static int file_report(void *arg, const char *msg)
{
	return tbx_cli_usage(((file_ctx_t *)arg)->cmd, "%s", msg);
}

static int read_file(const char *cmd, const char *path, tbx_conf_t *conf)
{
	file_ctx_t fc = {cmd, conf};

	return tbx_cli_conf_read(path, file_set, file_report, &fc);
}

int tbx_cli_conf_apply(const char *cmd, const tbx_cli_conf_t *cc,
		       tbx_conf_t *conf)
{
	int rc;

	if (cc->file && (rc = read_file(cmd, cc->file, conf)))
		return rc;
	for (size_t i = 0; i < cc->override_cnt; i++) {
		const char *arg = cc->overrides[i];
		const char *eq = strchr(arg, '=');
		char *key = strndup(arg, (size_t)(eq - arg));

		if (!key)
			return tbx_cli_fail(cmd, "out of memory");
		rc = set(cmd, conf, "-X", key, eq + 1);
		free(key);
		if (rc)
			return rc;
	}
	return 0;
}
