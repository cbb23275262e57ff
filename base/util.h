/*
 * Internal helpers shared by every part: ids, clocks, error text, logging,
 * crash points.  Internal across files: tbx__ prefix.
 */
#ifndef TBX_BASE_UTIL_H
#define TBX_BASE_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenbox/tokenbox.h"

/** Text length of a UUID (without NUL). */
#define TBX_UUID_LEN 36
/** Longest message id: a UUID, or the id derived for untokened ingress
 *  "u:<topic>:<partition>:<offset>" (Kafka topics are <= 249 bytes). */
#define TBX_MSGID_MAX 300
/** Longest consumer group id we accept. */
#define TBX_GROUP_MAX 255
/** Longest topic name Kafka accepts. */
#define TBX_TOPIC_MAX 249

/** Writes a fresh random (v4) UUID, lower-case text, into @p out. */
void tbx__uuid(char out[TBX_UUID_LEN + 1]);
/** @returns 1 if @p s (of @p len bytes, not NUL-terminated) is a UUID text. */
int tbx__is_uuid(const char *s, size_t len);
/** 1 when @p a and @p b name one file: the same string, or the same device
 *  and inode (a file that does not exist is no other file's). */
int tbx__same_file(const char *a, const char *b);

/** 1 when @p topic is a name Kafka accepts: 1 to 249 characters of
 *  [a-zA-Z0-9._-], and not "." or "..".  A regular expression ("^…") is
 *  none. */
int tbx__topic_valid(const char *topic);

/** Wall clock in ms since the epoch (for ages shown to people only). */
int64_t tbx__now_ms(void);
/** Monotonic clock in ms (for timeouts and backoff). */
int64_t tbx__mono_ms(void);

/** snprintf into @p buf that tolerates buf == NULL / size == 0.
 *  @returns @p err, so callers can `return tbx__seterr(...)`. */
int tbx__seterr(char *buf, size_t size, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** Copies @p s into a new allocation; NULL in, NULL out. */
char *tbx__strdup(const char *s);
/** Copies @p len bytes into a new allocation (len 0 -> non-NULL 1 byte). */
void *tbx__memdup(const void *p, size_t len);
/** Bounded copy that always terminates; @returns 0, or -1 if truncated. */
int tbx__strlcpy(char *dst, const char *src, size_t size);

/** Log levels, syslog numbering. */
enum {
	TBX_LOG_ERR = 3,
	TBX_LOG_WARNING = 4,
	TBX_LOG_NOTICE = 5,
	TBX_LOG_INFO = 6,
	TBX_LOG_DEBUG = 7
};
/** Level of a log.level value ("error" … "debug"); NOTICE if unknown. */
int tbx__log_level(const char *name);
/** Sets the process-wide level (default TBX_LOG_NOTICE) and a tag shown in
 *  every line (e.g. the worker id); @p tag is copied, NULL keeps
 *  the current one. */
void tbx__log_setup(int level, const char *tag);
/** Logs one line to stderr in the log format (timestamped in text and
 *  JSON).  Thread-safe. */
void tbx__log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Log formats (log.format). */
enum { TBX_LOGF_TEXT = 0, TBX_LOGF_JOURNAL = 1, TBX_LOGF_JSON = 2 };
/** Format of a log.format value; "auto" (or NULL): journal when standard
 *  error is the systemd journal's stream (JOURNAL_STREAM names its device
 *  and inode), else text. */
int tbx__log_format(const char *name);
/** Sets the process-wide format (default: tbx__log_format("auto")). */
void tbx__log_set_format(int format);
/** @returns the format in use. */
int tbx__log_get_format(void);
/** Level, format and tag from @p conf: log.level, raised to debug when a
 *  kafka debug key (kafka.debug, kafka.consumer.debug,
 *  kafka.producer.debug) is set, and log.format. */
void tbx__log_configure(const tbx_conf_t *conf, const char *tag);
/**
 * Logs @p what followed by the JSON object text @p json at @p level,
 * whatever log.level (the caller decides): "<ts> INFO tag[pid] what {...}"
 * in text, "<6>tag: what {...}" in journal, and the object as the member
 * @p what of the line's object in JSON.
 */
void tbx__log_object(int level, const char *what, const char *json);
/** 1 when a line at @p level would be logged. */
int tbx__log_enabled(int level);

/*
 * Crash points (fault injection for tests and the chaos harness).
 *
 * TBX_CRASH_AT=<rule>[,<rule>...] arms them; a rule is <name>[:<n>] (the
 * n-th passage, default the first) or <name>@<p> (each passage with
 * probability p); <name> may end in '*' to match a prefix, or be "*".  A
 * matching passage kills the process with SIGKILL, as a power cut would.
 * TBX_CRASH_SEED seeds the draws.  Unset: one call and a load.
 */
void tbx__crashpoint(const char *name);
/** Reads TBX_CRASH_AT now (workers and publishers do, when created), so
 *  that a malformed value stops the process at once. */
void tbx__crashpoints_arm(void);
/** Forgets the rules and reads TBX_CRASH_AT again: for a process forked
 *  after they were read (the handler test kit). */
void tbx__crashpoints_rearm(void);

#endif
