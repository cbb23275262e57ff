/*
 * --config FILE and -X KEY=VALUE for the commands that talk to Kafka
 * besides the worker (`send`, `inspect redispatch`, `inspect dead-letters
 * replay`): the same file format as `tokenbox worker` reads, so that one
 * file (security settings included) serves every command.
 *
 * Locality: the main thread.
 */
#ifndef TBX_TOOLS_CLI_CONF_H
#define TBX_TOOLS_CLI_CONF_H

#include <stddef.h>

#include "tokenbox/tokenbox.h"

/** The --config file and the -X arguments of a command line, in order. */
typedef struct tbx_cli_conf {
	const char *file;	/**< NULL: none */
	const char **overrides; /**< -X values (borrowed from argv) */
	size_t override_cnt, override_cap;
} tbx_cli_conf_t;

/** Records --config @p arg.  @returns 0 or TBX_EXIT_USAGE (given twice,
 *  empty). */
int tbx_cli_conf_file(const char *cmd, tbx_cli_conf_t *cc, const char *arg);
/** Records -X @p arg.  @returns 0 or an exit status. */
int tbx_cli_conf_override(const char *cmd, tbx_cli_conf_t *cc, const char *arg);
/**
 * Applies the file, then every -X in order, to @p conf.  Lines of the
 * file are KEY=VALUE, '#' comments and blank lines as for the worker;
 * the worker's own keys plugin= and plugin.args= are skipped.  Each bad
 * line or value is reported naming FILE:LINE (or -X) and the key.
 * @returns 0 or TBX_EXIT_USAGE / TBX_EXIT_FAIL after printing why.
 */
int tbx_cli_conf_apply(const char *cmd, const tbx_cli_conf_t *cc,
		       tbx_conf_t *conf);
void tbx_cli_conf_free(tbx_cli_conf_t *cc);

/** Takes one KEY=VALUE of a properties file; @p where is "PATH:LINE".
 *  @returns 0 to go on, or an exit status that ends the reading. */
typedef int (*tbx_cli_conf_set_fn)(void *arg, const char *where,
				   const char *key, const char *value);
/** Reports an error of the file (@p msg names PATH or PATH:LINE) the
 *  caller's way.  @returns the exit status to return. */
typedef int (*tbx_cli_conf_report_fn)(void *arg, const char *msg);
/**
 * Reads the properties file @p path, the one format of `tokenbox worker
 * --config` and of the other commands' --config: KEY=VALUE lines, white
 * space around key and value trimmed, blank lines and '#' comments
 * skipped.  Calls @p take for each pair in order; a file that cannot be
 * opened or read, a NUL byte or a line without a key goes to @p report.
 * @returns 0, or the first non-zero status of @p take or @p report.
 */
int tbx_cli_conf_read(const char *path, tbx_cli_conf_set_fn take,
		      tbx_cli_conf_report_fn report, void *arg);

#endif
