/*
 * `tokenbox inspect`: shared declarations of its files.
 *
 *   cmd_inspect.c     options, opening the stores, `status`
 *   inspect_fmt.c     tables, ages, durations, bytes as text/hex/base64,
 *                     JSON helpers
 *   inspect_rows.c    `outbox list|show`, `dead-letters list|show`
 *   inspect_tokens.c  `tokens list|show`, `orphans`, `cleanup`,
 *                     `redispatch`
 *
 * Read-only commands open both files with tbx__db_open(readonly) and run
 * SELECTs only, each command in one read transaction per file, so that
 * what they print is one snapshot of each file; in WAL mode they never
 * block a worker nor wait for one.  `cleanup` (without --dry-run) and
 * `redispatch` write, through the library's own code paths (the sweeper,
 * the protocol's phases B–E).
 *
 * Exit statuses: 0 done; 1 a finding (--check) or an id not found;
 * 2 a bad command line, or a store or Kafka error.
 *
 * Locality: the main thread; one command per process.
 */
#ifndef TBX_TOOLS_INSPECT_H
#define TBX_TOOLS_INSPECT_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "outbox/outbox.h"
#include "tools/cli_conf.h"
#include "tokens/sweep.h"

#define INSPECT_CMD "inspect"

#define INSPECT_EXIT_OK	     0
#define INSPECT_EXIT_FINDING 1
#define INSPECT_EXIT_ERROR   2

/** Rows listed by default (--limit). */
#define INSPECT_DEFAULT_LIMIT 100
/** Default --older-than of redispatch and the "stuck" age of status. */
#define INSPECT_DEFAULT_STUCK_MS (10 * 60 * 1000)
/** Default --batch of cleanup and redispatch. */
#define INSPECT_DEFAULT_BATCH 1000
/** Default --idle-after: a subscription no worker used for this long is a
 *  finding of status --check, and unsubscribe refuses younger ones. */
#define INSPECT_DEFAULT_IDLE_MS (24 * 60 * 60 * 1000LL)
/** Default --busy-timeout, ms. */
#define INSPECT_DEFAULT_BUSY_MS 5000
/** Columns of a terminal the tables fit in. */
#define INSPECT_WIDTH 80

typedef enum insp_cmd {
	C_NONE = 0,
	C_STATUS,
	C_OUTBOX_LIST,
	C_OUTBOX_SHOW,
	C_TOKENS_LIST,
	C_TOKENS_SHOW,
	C_ORPHANS,
	C_CLEANUP,
	C_REDISPATCH,
	C_DL_LIST,
	C_DL_SHOW,
	C_DL_REPLAY,
	C_UNSUBSCRIBE,
	C_UD_LIST,
	C_UD_SHOW,
	C_UD_RESEND,
} insp_cmd_t;

typedef struct insp_opts {
	const char *store, *tokens;
	int json, check, dry_run;
	long long busy_ms;
	int64_t older_ms; /**< -1: not given */
	long long limit;  /**< 0: no limit */
	long long batch;
	const char **groups; /**< --group values (borrowed from argv) */
	size_t group_cnt;
	const char *servers;
	const char *topic;   /**< --topic: a dead-letter topic */
	tbx_cli_conf_t conf; /**< --config and -X */
	int yes;	     /**< --yes (unsubscribe) */
	int64_t idle_ms;     /**< --idle-after */
	insp_cmd_t cmd;
	char cmd_name[32]; /**< "outbox list", for messages */
	const char *id;	   /**< operand of `show` */
} insp_opts_t;

/** The opened stores. */
typedef struct insp {
	const insp_opts_t *o;
	int64_t now_ms;	   /**< TBX_INSPECT_NOW_MS, or the wall clock */
	const char *tpath; /**< the token store's path (== store path when
			      single) */
	int single;	   /**< one file for both stores */
	tbx_outbox_t *store;
	sqlite3 *sdb; /**< S's connection (the store's) */
	sqlite3 *tdb; /**< T's connection: sdb when single, else own */
	int schema[2];
} insp_t;

/*
 * cmd_inspect.c
 */
int tbx_cmd_inspect(int argc, char **argv);
/** Reports a store error of @p rc (a tbx_err_t) on @p path in one line.
 *  @returns INSPECT_EXIT_ERROR. */
int insp_store_fail(const char *path, int err, sqlite3 *db);
/** Prepares @p sql on @p db; reports and returns NULL on failure. */
sqlite3_stmt *insp_prepare(insp_t *in, sqlite3 *db, const char *sql);
/** Steps; @returns SQLITE_ROW, SQLITE_DONE, or -1 after reporting. */
int insp_step(insp_t *in, sqlite3_stmt *stmt);
/** Runs a one-integer query with optional text parameter @p p1. */
int insp_count(insp_t *in, sqlite3 *db, const char *sql, const char *p1,
	       int64_t *out);
/** Binds --group values as a JSON array at @p idx (NULL when none). */
int insp_bind_groups(insp_t *in, sqlite3_stmt *stmt, int idx, char **json);
/** Groups the service store has rows of (outbox, ingress, dead letters):
 *  the groups whose registrations the sweeper may judge against it. */
int insp_served_groups(insp_t *in, char ***out, size_t *cnt);
/**
 * Resolves @p id: itself when @p exact_sql (?1 = id) finds a row, else
 * the one id that @p prefix_sql (?1 = id, distinct ids, LIMIT 2) finds
 * starting with it — tables cut long ids.
 * @returns 0 with *out malloc'ed (NULL: no match), or an exit status.
 */
int insp_resolve_id(insp_t *in, sqlite3 *db, const char *exact_sql,
		    const char *prefix_sql, const char *id, char **out);
/** Prints @p text wrapped at INSPECT_WIDTH after @p first, the other
 *  lines indented to line up with the first. */
void insp_wrap(const char *first, const char *text);
/** Groups with registrations in the token store. */
int insp_reg_groups(insp_t *in, char ***out, size_t *cnt);
/** 1 if @p grp is in @p list. */
int insp_has(char *const *list, size_t cnt, const char *grp);
void insp_free_list(char **list, size_t cnt);

/*
 * inspect_rows.c
 */
int insp_outbox_list(insp_t *in);
int insp_outbox_show(insp_t *in);
int insp_dl_list(insp_t *in);
int insp_dl_show(insp_t *in);
/** `dead-letters replay` (inspect_replay.c). */
int insp_dl_replay(insp_t *in);
/** Prints the dead-letter record of (@p in_topic, @p partition, @p offset)
 *  read from --topic (`dead-letters show` with --bootstrap-servers):
 *  key, payload and headers.  @returns 0, or an exit status. */
int insp_dl_record_print(insp_t *in, const char *in_topic, int64_t partition,
			 int64_t offset);
/** A configuration for a Kafka client of inspect: --config, -X, then
 *  --bootstrap-servers.  NULL after reporting why. */
tbx_conf_t *insp_kafka_conf(insp_t *in);
/** Prints a loaded outbox row (human) or returns it as JSON. */
void insp_row_print(insp_t *in, const char *grp, const tbx__row_t *row);
/** @p msg_count: the row's outgoing messages (they are included when
 *  @p with_messages). */
cJSON *insp_row_json(insp_t *in, const char *grp, const tbx__row_t *row,
		     int64_t msg_count, int with_messages);

/*
 * inspect_undelivered.c
 */
int insp_ud_list(insp_t *in);
int insp_ud_show(insp_t *in);
/** Re-sends one line as it was first sent; writes the service store. */
int insp_ud_resend(insp_t *in);

/*
 * inspect_tokens.c
 */
int insp_tokens_list(insp_t *in);
int insp_tokens_show(insp_t *in);
int insp_orphans(insp_t *in);
int insp_cleanup(insp_t *in);
int insp_redispatch(insp_t *in);
int insp_unsubscribe(insp_t *in);

/** One attempt's registrations. */
typedef struct insp_reg {
	tbx__reg_t reg;
	char grp[TBX_GROUP_MAX + 1];
	int64_t tokens; /**< registrations (one per token id) */
	int verdict;	/**< tbx__sweep_verdict_t, or -1: not checked */
	char row_attempt[TBX_UUID_LEN + 1];
} insp_reg_t;

/** Calls @p fn for each attempt registered by @p grp, oldest first,
 *  classified by the sweeper's rule; @p fn returns non-zero to stop. */
int insp_regs_each(insp_t *in, const char *grp,
		   int (*fn)(void *opaque, const insp_reg_t *reg),
		   void *opaque);
/** Token rows (every group) an orphan drop of @p attempt would delete. */
int insp_attempt_token_rows(insp_t *in, const char *attempt, int64_t *rows);
/** "other attempt recorded", "no outbox row", … for a verdict. */
const char *insp_verdict_text(int verdict);
/** "winner", "other_attempt", "no_row", "in_flight" for JSON. */
const char *insp_verdict_key(int verdict);

/*
 * inspect_fmt.c
 */
/** A table: columns of text, aligned, fitted to INSPECT_WIDTH by
 *  shortening the shrinkable columns with "…". */
typedef struct insp_tbl insp_tbl_t;

/** @p spec: one char per column: 'l' left, 'r' right; upper case ('L',
 *  'R') for columns that may be shortened.  @p heads: the titles. */
insp_tbl_t *insp_tbl_new(const char *spec, const char *const *heads);
/** Adds the next cell (the text is copied and cleaned of control
 *  characters); rows fill left to right. */
void insp_tbl_cell(insp_tbl_t *t, const char *text);
void insp_tbl_cellf(insp_tbl_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void insp_tbl_print(insp_tbl_t *t, int indent);
void insp_tbl_free(insp_tbl_t *t);

/** "45s", "12m05s", "3h04m", "2d03h"; negative ages print as "0s". */
void insp_fmt_age(int64_t ms, char *buf, size_t size);
/** Milliseconds from @p then_ms, a time read from a store, to in->now_ms;
 *  saturated at INT64_MIN/INT64_MAX, since the file may hold any value. */
int64_t insp_age(const insp_t *in, int64_t then_ms);
/** "2023-11-14T22:13:20.000Z"; "-" for 0. */
void insp_fmt_time(int64_t ms, char *buf, size_t size);
/** Parses "10m": an integer and one of ms|s|m|h|d.  @returns 0, or
 *  INSPECT_EXIT_ERROR after printing why. */
int insp_parse_duration(const char *opt, const char *arg, int64_t *ms);
/** "10m" for 600000, the largest unit that divides it. */
void insp_fmt_duration(int64_t ms, char *buf, size_t size);

/** 1 when the bytes are UTF-8 text with no control characters other
 *  than tab, newline and carriage return. */
int insp_is_text(const void *p, size_t len);
/** A copy of @p s for display: control characters and invalid UTF-8
 *  replaced with '?'.  Never NULL ("" when out of memory). */
char *insp_clean(const char *s);
/** Bytes as JSON: null for NULL, {"bytes":N,"text":"…"} for text,
 *  {"bytes":N,"base64":"…"} otherwise. */
cJSON *insp_bytes_json(const void *p, size_t len);
/** Prints bytes after a label padded to @p width (0: the usual): quoted
 *  text, text lines, or a hex dump, each line indented by @p indent;
 *  @p none for NULL. */
void insp_bytes_print(const char *label, const void *p, size_t len, int indent,
		      size_t width, const char *none);
/** "1 attempt" / "2 attempts" into @p buf; @returns @p buf. */
const char *insp_count_of(char *buf, size_t size, int64_t n, const char *one,
			  const char *many);
/** A `show` line: label, then @p value cleaned and wrapped to fit. */
void insp_kv(const char *label, const char *value, int indent);
/** A JSON string of text read from a store (cleaned of invalid UTF-8). */
cJSON *insp_json_str(const char *s);
/** cJSON_AddItemToObject with a string that may be NULL (-> null). */
void insp_json_add_str(cJSON *obj, const char *key, const char *s);
void insp_json_add_int(cJSON *obj, const char *key, int64_t v);
/** Prints @p doc formatted, then frees it.  @returns the exit status
 *  @p rc, or INSPECT_EXIT_ERROR when out of memory. */
int insp_json_print(cJSON *doc, int rc);
/**
 * The end of a list command: --check's finding; then *doc with "total"
 * and "shown" (printed and freed, *doc set to NULL), or "no NOUN match"
 * (or "no NOUN" + @p idle when nothing was filtered), or the table and how
 * many --limit left out.  @returns the exit status.
 */
int insp_list_finish(insp_t *in, cJSON **doc, insp_tbl_t *tbl, int64_t total,
		     int64_t shown, const char *noun, const char *idle);

#endif
