/*
 * `tokenbox inspect`: shared declarations of its files.
 *
 *   cmd_inspect.c          the command line; dispatches to the others
 *   inspect_common.c       opening the stores, errors, group lists, the
 *                          sweeper's verdicts
 *   inspect_fmt.c          tables, ages, durations, bytes as
 *                          text/hex/base64, JSON helpers
 *   inspect_status.c       `status`
 *   inspect_pair.c         whether the two stores given are a pair
 *   inspect_rows.c         `outbox list|show`, `dead-letters list|show`
 *   inspect_obatch.c       the batch rows of `outbox list|show` and
 *                          `status` (outbox.layout = batch)
 *   inspect_tokens.c       `tokens list|show`, `orphans`, `cleanup`,
 *                          `redispatch`, `unsubscribe`
 *   inspect_undelivered.c  `undelivered list|show|resend`
 *   inspect_replay.c       `dead-letters replay`, reading a dead-letter
 *                          topic
 *
 * Everything is read and repaired through the stores' interfaces
 * (outbox/outbox.h, tokens/tokens.h: their read sides): no SQL here.
 * Read-only commands open both stores read-only, each command in one
 * read snapshot per store, so that what they print is one snapshot of
 * each; with SQLite in WAL mode they never block a worker nor wait for
 * one.  The repairs open the store they write: `cleanup` (without
 * --dry-run) runs the sweeper, `redispatch` the protocol's phases B–E
 * (consumer/recover.h), `unsubscribe` and `undelivered resend` one
 * repair call of the store's interface each.
 *
 * Exit statuses: 0 done; 1 a finding (--check) or an id not found;
 * 2 a bad command line, or a store or Kafka error; 3 (dead-letters
 * replay) dead letters the group recorded were not replayed.
 *
 * Locality: the main thread; one command per process.
 */
#ifndef TBX_TOOLS_INSPECT_H
#define TBX_TOOLS_INSPECT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/ids.h"
#include "outbox/batchrow.h"
#include "outbox/outbox.h"
#include "tokens/sweep.h"
#include "tokens/tokens.h"
#include "tools/cli_conf.h"
#include "tools/cli_store.h"
#include "trace/context.h"

#define INSPECT_CMD "inspect"

#define INSPECT_EXIT_OK	     0
#define INSPECT_EXIT_FINDING 1
#define INSPECT_EXIT_ERROR   2
/** dead-letters replay ran to the end, but dead letters the group recorded
 *  were not replayed: not in the topic, or the group not subscribed. */
#define INSPECT_EXIT_NOT_REPLAYED 3

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
	const char *schema, *tokens_schema; /**< --schema, --tokens-schema */
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
	/** status --since: an absolute time (ms since the epoch), or
	 *  since_ago_ms before now; both -1: not given */
	int64_t since_ms, since_ago_ms;
	int wide; /**< --wide: dead-letters list's errors whole */
	insp_cmd_t cmd;
	char cmd_name[32]; /**< "outbox list", for messages */
	const char *id;	   /**< operand of `show` */
} insp_opts_t;

/** A reason the stores given are not the pair the workers use
 *  (inspect_pair.c). */
typedef struct insp_problem {
	char key[40]; /**< token_store_mismatch, … (JSON, --check) */
	char grp[TBX_GROUP_MAX + 1];
	char text[1024];
} insp_problem_t;

/** The opened stores. */
typedef struct insp {
	const insp_opts_t *o;
	int64_t now_ms;	      /**< TBX_INSPECT_NOW_MS, or the wall clock */
	tbx_cli_store_t s;    /**< the service store as named */
	tbx_cli_store_t t;    /**< the token store (the --store file or
				 database when single) */
	int single;	      /**< one database for both stores: one file,
				 or one connection to two schemas */
	tbx_outbox_t *store;  /**< S, read-only */
	tbx_tokens_t *tokens; /**< T, read-only (on S's connection when
				 single) */
	int schema[2];
	insp_problem_t *pair; /**< insp_pair_check()'s findings */
	size_t pair_cnt;
} insp_t;

/*
 * cmd_inspect.c
 */
int tbx_cmd_inspect(int argc, char **argv);

/*
 * inspect_common.c
 */
/** Checks --store, --tokens and their schemas into in->s and in->t.
 *  @returns 0, or an exit status after reporting. */
int insp_stores(insp_t *in);
/** Opens both stores read-only (see the top of this file). */
int insp_open(insp_t *in);
void insp_close(insp_t *in);
/** One read snapshot per store for what a command prints. */
int insp_read_begin(insp_t *in);
void insp_read_end(insp_t *in);
/**
 * Opens the stores a repair writes, read-write, never creating them: S
 * when @p store is not NULL, T when @p tokens is not NULL (on S's
 * connection when both are asked for and they are one file).
 * @returns 0, or an exit status after reporting.
 */
int insp_open_write(insp_t *in, int synchronous_full, tbx_outbox_t **store,
		    tbx_tokens_t **tokens);
/** The same, reporting nothing: @returns TBX_OK or the error, with
 *  @p errstr saying why (empty when it does not). */
int insp_open_write_err(insp_t *in, int synchronous_full, tbx_outbox_t **store,
			tbx_tokens_t **tokens, char *errstr,
			size_t errstr_size);
/** Reports a store error @p err (a tbx_err_t) on @p path (a name for
 *  messages: tbx_cli_store_t.name) in one line,
 *  with the backend's text @p msg (NULL: the error's).
 *  @returns INSPECT_EXIT_ERROR. */
int insp_store_fail(const char *path, int err, const char *msg);
/** The same for an error of the opened service or token store. */
int insp_s_fail(insp_t *in, int err);
int insp_t_fail(insp_t *in, int err);
/** The listing filter of the options: --group, --older-than (when
 *  @p older), --limit. */
tbx__filter_t insp_filter(const insp_t *in, int older);
/** *yes = 1 when the token store holds token sets (tokens.h, sets_*): a
 *  backend without the operations, or one that does not know the
 *  question (TBX_EINVAL from has()), has none.  @returns the error of
 *  has() otherwise. */
int insp_has_sets(insp_t *in, int *yes);
/** Groups the service store has rows of (outbox, ingress, dead letters):
 *  the groups whose registrations the sweeper may judge against it. */
int insp_served_groups(insp_t *in, char ***out, size_t *cnt);
/** Groups with registrations in the token store. */
int insp_reg_groups(insp_t *in, char ***out, size_t *cnt);
/** 1 if @p grp is in @p list. */
int insp_has(char *const *list, size_t cnt, const char *grp);
void insp_free_list(char **list, size_t cnt);

/** One attempt's registrations. */
typedef struct insp_reg {
	tbx__reg_t reg;
	char grp[TBX_GROUP_MAX + 1];
	int64_t tokens; /**< registrations (one per token id) */
	int verdict;	/**< tbx__sweep_verdict_t, or -1: not checked */
	char row_attempt[TBX_UUID_LEN + 1];
	int sets; /**< a registration of token sets (tbx_breg): reg.msg_id
		     holds its batch row's id, tokens is 0 */
} insp_reg_t;

/** Calls @p fn for each attempt registered by @p grp, oldest first,
 *  classified by the sweeper's rule; @p fn returns non-zero to stop. */
int insp_regs_each(insp_t *in, const char *grp,
		   int (*fn)(void *opaque, const insp_reg_t *reg),
		   void *opaque);
/** The same for the registrations of token sets of @p grp (none on a
 *  store without them), judged against the group's batch rows
 *  (tbx__sweep_sets_classify()); *why (may be NULL) receives the error of
 *  a service store that could not answer (verdicts TBX_SWEEP_UNCHECKED),
 *  else TBX_OK. */
int insp_set_regs_each(insp_t *in, const char *grp,
		       int (*fn)(void *opaque, const insp_reg_t *reg),
		       void *opaque, int *why);
/** "other attempt recorded", "no outbox row", … for a verdict. */
const char *insp_verdict_text(int verdict);
/** "winner", "other_attempt", "no_row", "in_flight" for JSON. */
const char *insp_verdict_key(int verdict);

/*
 * inspect_pair.c
 */
/** Compares the stores given with the token store the --store's workers
 *  recorded (see the top of inspect_pair.c) into in->pair.
 *  @returns 0, or an exit status after reporting a store error. */
int insp_pair_check(insp_t *in);
/** One warning line on standard error per problem found. */
void insp_pair_warn(const insp_t *in);
void insp_pair_free(insp_t *in);

/*
 * inspect_status.c
 */
int insp_status(insp_t *in);

/*
 * inspect_rows.c
 */
int insp_outbox_list(insp_t *in);
int insp_outbox_show(insp_t *in);
int insp_dl_list(insp_t *in);
int insp_dl_show(insp_t *in);
/** `dead-letters replay` (inspect_replay.c). */
int insp_dl_replay(insp_t *in);
/** Prints group @p grp's dead-letter record of (@p in_topic, @p partition,
 *  @p offset) read from --topic (`dead-letters show` with
 *  --bootstrap-servers): key, payload and headers.  The copy whose
 *  tbx-dlq-group names @p grp, else the first without that header (from
 *  an older tokenbox); never one naming another group.  @returns 0, or
 *  an exit status. */
int insp_dl_record_print(insp_t *in, const char *grp, const char *in_topic,
			 int64_t partition, int64_t offset);
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
 * inspect_obatch.c: batch rows (tbx_obatch, outbox.layout = batch)
 */
/** A batch row decoded for display: its cover and wire, or why it does
 *  not decode (@p corrupt). */
typedef struct insp_ob {
	tbx__cover_t cover;
	tbx__wire_ent_t *wire;
	uint32_t nwire;
	int corrupt;
	char why[200];
} insp_ob_t;

/** Decodes @p row as a worker would load it (tbx__obatch_check()); a row
 *  that does not decode is TBX_OK with ob->corrupt set.  Free @p ob with
 *  insp_ob_free() (also after a failure).  @returns TBX_OK or
 *  TBX_ENOMEM. */
int insp_ob_decode(const tbx__obatch_t *row, insp_ob_t *ob);
void insp_ob_free(insp_ob_t *ob);
/** "processed", "tokened" or "corrupt". */
const char *insp_ob_state(const tbx__obatch_t *row, const insp_ob_t *ob);
/** `outbox list`'s batch rows, those @p f takes: into @p doc
 *  ("batches", "batches_total", "batches_shown"; "batches" null for a
 *  store without batch rows), or printed as a table after a title when
 *  any (after a blank line when @p sep), the corrupt ones named with
 *  why below it.  *shown: the rows listed.  @returns TBX_OK or the
 *  store's error. */
int insp_ob_list(insp_t *in, const tbx__filter_t *f, cJSON *doc, int sep,
		 int64_t *shown);
/** Resolves @p id among the batch rows of @p f's groups: *exact when a
 *  row is @p id, *matches 0, 1 (@p out set) or 2 for several. */
int insp_ob_match(insp_t *in, const tbx__filter_t *f, const char *id,
		  char out[TBX_UUID_LEN + 1], int *exact, int *matches);
/** Shows the batch rows of @p f's groups whose id is @p id: into
 *  @p arr, or printed (after a blank line when @p already rows were).
 *  *shown: how many. */
int insp_ob_show(insp_t *in, const tbx__filter_t *f, const char *id, cJSON *arr,
		 int already, int *shown);

/** `status`'s batch rows of one group. */
typedef struct insp_ob_grp {
	char *grp;
	int64_t rows, tokened, older, marked, corrupt, oldest_ms;
} insp_ob_grp_t;

/** Every batch row summed per group (by name): @p older those created at
 *  or before @p stuck_before, @p marked those a recovery pass marked
 *  stuck; @p corrupt_json one object per corrupt row (group, row_id,
 *  reason); @p none for a store without batch rows. */
typedef struct insp_ob_sum {
	insp_ob_grp_t *g;
	size_t n;
	int none;
	int64_t stuck_before;
	cJSON *corrupt_json;
	int err;
} insp_ob_sum_t;

int insp_ob_summary(insp_t *in, int64_t stuck_before, insp_ob_sum_t *sum);
void insp_ob_summary_free(insp_ob_sum_t *sum);

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
/** Parses an RFC 3339 time ("2026-11-27T15:04:05Z", fraction and a
 *  "+01:00" offset allowed) into *abs_ms, or a duration ("1h", as
 *  insp_parse_duration()) back from now into *ago_ms (the other is -1).
 *  @returns 0, or INSPECT_EXIT_ERROR after printing why. */
int insp_parse_since(const char *opt, const char *arg, int64_t *abs_ms,
		     int64_t *ago_ms);

/** 1 when the bytes are UTF-8 text with no control characters other
 *  than tab, newline and carriage return. */
int insp_is_text(const void *p, size_t len);
/** A copy of @p s for display: control characters and invalid UTF-8
 *  replaced with '?'.  Never NULL ("" when out of memory). */
char *insp_clean(const char *s);
/** Bytes as JSON: null for NULL, {"bytes":N,"text":"…"} for text,
 *  {"bytes":N,"base64":"…"} otherwise. */
cJSON *insp_bytes_json(const void *p, size_t len);
/** Room for what insp_hdr_shown() writes. */
typedef struct insp_hdr_text {
	char tp[TBX_TRACEPARENT_LEN + 1];
	char writer[2 * TBX_SPAN_ID_SIZE + 1];
} insp_hdr_text_t;
/**
 * A stored header as inspect shows it, into @p out (up to 2): the trace
 * context stored in binary (TBX_STORED_CTX_HDR) as the traceparent it is
 * sent as, and, when it names the span that wrote the message, that
 * span's id as tbx-trace-parent ("" for a root); any other header as it
 * is.  The text is kept in @p text.  @returns the headers written.
 */
size_t insp_hdr_shown(const tbx_header_t *h, tbx_header_t out[2],
		      insp_hdr_text_t *text);
/** A stored message's headers (@p len bytes at @p hdrs, the encoding of
 *  store/msgs.h) as a `show` prints them, after its other fields: a
 *  line "headers N" at indent 4, then each header (insp_hdr_shown())
 *  at indent 6, the values lined up after the longest name; headers
 *  that do not decode follow as their bytes, "(malformed)". */
void insp_hdrs_print(const void *hdrs, size_t len);
/** The same as members of the message object @p jm: "headers", an
 *  array of {"name", "value"} (value as insp_bytes_json()), and, for
 *  headers that do not decode, "headers_malformed" with their bytes. */
void insp_hdrs_json(cJSON *jm, const void *hdrs, size_t len);
/** Prints bytes after a label padded to @p width (0: the usual): quoted
 *  text, text lines, or a hex dump, each line indented by @p indent;
 *  @p none for NULL. */
void insp_bytes_print(const char *label, const void *p, size_t len, int indent,
		      size_t width, const char *none);
/** "1 attempt" / "2 attempts" into @p buf; @returns @p buf. */
const char *insp_count_of(char *buf, size_t size, int64_t n, const char *one,
			  const char *many);
/** Prints @p text wrapped at INSPECT_WIDTH after @p first, the other
 *  lines indented to line up with the first. */
void insp_wrap(const char *first, const char *text);
/** A `show` line: label, then @p value cleaned and wrapped to fit. */
void insp_kv(const char *label, const char *value, int indent);
/** A JSON string of text read from a store (cleaned of invalid UTF-8). */
cJSON *insp_json_str(const char *s);
/** cJSON_AddItemToObject with a string that may be NULL (-> null). */
void insp_json_add_str(cJSON *obj, const char *key, const char *s);
void insp_json_add_int(cJSON *obj, const char *key, int64_t v);
/**
 * One JSON object from @p spec, space-separated "key:type" fields whose
 * values follow in order: s a string (NULL: null), o an optional string
 * (NULL or "": null), i an int64_t, b an int (a boolean), j a cJSON item
 * (taken over; NULL: null).  Appended to @p into when it is an array.
 * @returns the object.
 */
cJSON *insp_jobj(cJSON *into, const char *spec, ...);
/** Adds @p spec's fields (as insp_jobj) to the object @p obj. */
void insp_jadd(cJSON *obj, const char *spec, ...);
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
