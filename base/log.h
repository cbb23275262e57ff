/*
 * Logging: one line per call to standard error, in text, journal or
 * JSON format, with a process-wide level, and a tag: the process-wide
 * one, or the one of the worker whose call the thread runs
 * (tbx__log_scope()).  The ground floor: it reads no configuration, its
 * callers hand it the values.
 */
#ifndef TBX_BASE_LOG_H
#define TBX_BASE_LOG_H

#include <stdint.h>

#include "tokenbox/tokenbox.h"

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
/** Level, format and tag as configured: @p level a log.level value,
 *  raised to debug when @p debug (a kafka debug key is set: its lines are
 *  logged at debug level), @p format a log.format value; @p tag as for
 *  tbx__log_setup().  The caller reads them (consumer/conf.h,
 *  tbx__conf_log_configure()). */
void tbx__log_configure(const char *level, const char *format, int debug,
			const char *tag);
/** Sets the process-wide tag (copied; NULL: none). */
void tbx__log_set_tag(const char *tag);
/**
 * Makes @p tag the tag of the lines this thread logs from now on, in
 * place of the process-wide one (NULL: back to it), so that several
 * workers in one process, on one thread or several, each name themselves.
 * @p tag is not copied: it must stay valid until the scope is left by
 * restoring the tag this returns.  @locality the calling thread only.
 */
const char *tbx__log_scope(const char *tag);
/**
 * Logs @p what followed by the JSON object text @p json at @p level,
 * whatever log.level (the caller decides): "<ts> INFO tag[pid] what {...}"
 * in text, "<6>tag: what {...}" in journal, and the object as the member
 * @p what of the line's object in JSON.
 */
void tbx__log_object(int level, const char *what, const char *json);
/** 1 when a line at @p level would be logged. */
int tbx__log_enabled(int level);
/** The trace and span (hex ids) the lines of this thread are about:
 *  " trace=<trace>/<span>" ends a text line, members trace_id and
 *  span_id a JSON one.  NULL: none. */
void tbx__log_trace(const char *trace_id, const char *span_id);
/** The same from the ids in binary (16 and 8 bytes), copied: written
 *  out in hex only when a line is logged.  NULL: none. */
void tbx__log_trace_ids(const uint8_t *trace_id, const uint8_t *span_id);

#endif
