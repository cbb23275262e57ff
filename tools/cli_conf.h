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

#endif
