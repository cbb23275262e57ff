/* Logging (base/log.h). */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/str.h"

/* Logging: one line per call, written with a single write(2) so lines from
 * several threads or processes sharing stderr do not interleave. */
static int log_level = TBX_LOG_NOTICE;
static char log_tag[64];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_format = -1; /* -1: not chosen yet, auto at first use */
/* The tag of the lines of this thread while a worker's call runs
 * (tbx__log_scope()); NULL: log_tag. */
static _Thread_local const char *scope_tag;

int tbx__log_level(const char *name)
{
	static const struct {
		const char *name;
		int level;
	} levels[] = {{"error", TBX_LOG_ERR},
		      {"warning", TBX_LOG_WARNING},
		      {"notice", TBX_LOG_NOTICE},
		      {"info", TBX_LOG_INFO},
		      {"debug", TBX_LOG_DEBUG}};

	for (size_t i = 0; name && i < sizeof(levels) / sizeof(levels[0]); i++)
		if (strcmp(levels[i].name, name) == 0)
			return levels[i].level;
	return TBX_LOG_NOTICE;
}

/* systemd sets JOURNAL_STREAM=<dev>:<ino> for a service whose standard
 * error is connected to the journal; a process whose stderr was
 * redirected elsewhere since has another device or inode. */
static int stderr_is_journal(void)
{
	const char *env = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char tail;

	if (!env || sscanf(env, "%llu:%llu%c", &dev, &ino, &tail) != 2)
		return 0;
	if (fstat(STDERR_FILENO, &st) != 0)
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

int tbx__log_format(const char *name)
{
	if (name && strcmp(name, "text") == 0)
		return TBX_LOGF_TEXT;
	if (name && strcmp(name, "journal") == 0)
		return TBX_LOGF_JOURNAL;
	if (name && strcmp(name, "json") == 0)
		return TBX_LOGF_JSON;
	return stderr_is_journal() ? TBX_LOGF_JOURNAL : TBX_LOGF_TEXT;
}

void tbx__log_set_format(int format)
{
	pthread_mutex_lock(&log_lock);
	log_format = format;
	pthread_mutex_unlock(&log_lock);
}

int tbx__log_get_format(void)
{
	int f;

	pthread_mutex_lock(&log_lock);
	if (log_format < 0)
		log_format = tbx__log_format(NULL);
	f = log_format;
	pthread_mutex_unlock(&log_lock);
	return f;
}

void tbx__log_setup(int level, const char *tag)
{
	pthread_mutex_lock(&log_lock);
	log_level = level;
	if (tag)
		tbx__strlcpy(log_tag, tag, sizeof(log_tag));
	pthread_mutex_unlock(&log_lock);
}

void tbx__log_set_tag(const char *tag)
{
	pthread_mutex_lock(&log_lock);
	tbx__strlcpy(log_tag, tag ? tag : "", sizeof(log_tag));
	pthread_mutex_unlock(&log_lock);
}

const char *tbx__log_scope(const char *tag)
{
	const char *prev = scope_tag;

	scope_tag = tag;
	return prev;
}

void tbx__log_configure(const char *level, const char *format, int debug,
			const char *tag)
{
	/* librdkafka's debug contexts log at debug level: asking for them
	 * and filtering them out would show nothing. */
	tbx__log_setup(debug ? TBX_LOG_DEBUG : tbx__log_level(level), tag);
	tbx__log_set_format(tbx__log_format(format));
}

/* The name of each level (syslog numbering) in a text line, and in JSON. */
/* clang-format off */
static const struct {
	const char *text;
	const char *json;
} level_names[8] = {
	{"EMERG",  "emerg"},
	{"ALERT",  "alert"},
	{"CRIT",   "crit"},
	{"ERROR",  "error"},	/* TBX_LOG_ERR */
	{"WARN",   "warning"},	/* TBX_LOG_WARNING */
	{"NOTICE", "notice"},	/* TBX_LOG_NOTICE */
	{"INFO",   "info"},	/* TBX_LOG_INFO */
	{"DEBUG",  "debug"},	/* TBX_LOG_DEBUG */
};
/* clang-format on */

/* A growable line. */
static void put(char **b, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (!*b)
		return;
	if (*len + n + 2 > *cap) {
		size_t c = (*cap + n + 2) * 2;
		char *g = realloc(*b, c);
		if (!g) {
			free(*b);
			*b = NULL;
			return;
		}
		*b = g;
		*cap = c;
	}
	memcpy(*b + *len, s, n);
	*len += n;
}

static void puts_(char **b, size_t *len, size_t *cap, const char *s)
{
	put(b, len, cap, s, strlen(s));
}

/* Appends @p s to the line as a JSON string, escaped. */
static void json_str(char **b, size_t *len, size_t *cap, const char *s)
{
	char esc[8];

	puts_(b, len, cap, "\"");
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			esc[0] = '\\';
			esc[1] = (char)*p;
			put(b, len, cap, esc, 2);
		} else if (*p < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", *p);
			puts_(b, len, cap, esc);
		} else {
			put(b, len, cap, (const char *)p, 1);
		}
	}
	puts_(b, len, cap, "\"");
}

/* The record this thread's lines are about: "<trace>/<span>", "" none. */
static _Thread_local char log_trace[32 + 1 + 16 + 1];

/* Or its ids in binary (tbx__log_trace_ids()), written out as
 * log_trace only when a line is: set for every record, logged or not. */
static _Thread_local uint8_t log_ids[16 + 8];
static _Thread_local int log_ids_set;

void tbx__log_trace_ids(const uint8_t *trace_id, const uint8_t *span_id)
{
	log_trace[0] = '\0';
	if (!trace_id || !span_id) {
		log_ids_set = 0;
		return;
	}
	memcpy(log_ids, trace_id, 16);
	memcpy(log_ids + 16, span_id, 8);
	log_ids_set = 1;
}

/* log_trace from log_ids, when they were set. */
static void log_trace_text(void)
{
	static const char digits[] = "0123456789abcdef";
	char *o = log_trace;

	if (!log_ids_set)
		return;
	for (size_t i = 0; i < sizeof(log_ids); i++) {
		if (i == 16)
			*o++ = '/';
		*o++ = digits[log_ids[i] >> 4];
		*o++ = digits[log_ids[i] & 0xf];
	}
	*o = '\0';
}

void tbx__log_trace(const char *trace_id, const char *span_id)
{
	size_t t, s;

	log_ids_set = 0;
	if (!trace_id || !span_id) {
		log_trace[0] = '\0';
		return;
	}
	/* Set for every record, logged or not: copied, not formatted
	 * (snprintf cost more than the rest of a record's unsampled
	 * trace context). */
	t = strnlen(trace_id, 32);
	s = strnlen(span_id, 16);
	memcpy(log_trace, trace_id, t);
	log_trace[t] = '/';
	memcpy(log_trace + t + 1, span_id, s);
	log_trace[t + 1 + s] = '\0';
}

/* Writes one line: @p msg, or (@p what and the JSON object @p json). */
static void log_emit(int level, const char *msg, const char *what,
		     const char *json)
{
	size_t len = 0, cap = 256 + strlen(msg) + (json ? strlen(json) : 0);
	char *b = malloc(cap), head[160], tag[64];
	int format = tbx__log_get_format();
	struct timespec ts;
	struct tm tm;

	if (!b)
		return;
	log_trace_text();
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	if (scope_tag && *scope_tag) {
		tbx__strlcpy(tag, scope_tag, sizeof(tag));
	} else {
		pthread_mutex_lock(&log_lock);
		memcpy(tag, log_tag, sizeof(tag));
		pthread_mutex_unlock(&log_lock);
	}
	level &= 7;
	if (format == TBX_LOGF_JSON) {
		snprintf(head, sizeof(head),
			 "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\","
			 "\"level\":\"%s\",\"pid\":%d,\"tag\":",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
			 tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
			 level_names[level].json, (int)getpid());
		puts_(&b, &len, &cap, head);
		json_str(&b, &len, &cap, tag);
		puts_(&b, &len, &cap, ",\"msg\":");
		json_str(&b, &len, &cap, what ? what : msg);
		if (what) {
			puts_(&b, &len, &cap, ",");
			json_str(&b, &len, &cap, what);
			puts_(&b, &len, &cap, ":");
			puts_(&b, &len, &cap, json);
		}
		if (log_trace[0]) {
			puts_(&b, &len, &cap, ",\"trace_id\":\"");
			put(&b, &len, &cap, log_trace, 32);
			puts_(&b, &len, &cap, "\",\"span_id\":\"");
			puts_(&b, &len, &cap, log_trace + 33);
			puts_(&b, &len, &cap, "\"");
		}
		puts_(&b, &len, &cap, "}");
	} else {
		if (format == TBX_LOGF_JOURNAL)
			/* journald takes the <N> prefix as the priority and
			 * stamps the time itself. */
			snprintf(head, sizeof(head), "<%d>%s%s", level, tag,
				 tag[0] ? ": " : "");
		else
			snprintf(
			    head, sizeof(head),
			    "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s[%d] ",
			    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
			    tm.tm_hour, tm.tm_min, tm.tm_sec,
			    ts.tv_nsec / 1000000, level_names[level].text, tag,
			    (int)getpid());
		puts_(&b, &len, &cap, head);
		if (what) {
			puts_(&b, &len, &cap, what);
			puts_(&b, &len, &cap, " ");
			puts_(&b, &len, &cap, json);
		} else {
			/* One record per line: a message's own newlines
			 * would start unprefixed lines. */
			size_t from = len;
			puts_(&b, &len, &cap, msg);
			for (size_t i = from; b && i < len; i++)
				if (b[i] == '\n')
					b[i] = ' ';
		}
		if (log_trace[0]) {
			puts_(&b, &len, &cap, " trace=");
			puts_(&b, &len, &cap, log_trace);
		}
	}
	puts_(&b, &len, &cap, "\n");
	if (b) {
		ssize_t w = write(STDERR_FILENO, b, len);
		(void)w; /* nothing to do about a lost log line */
	}
	free(b);
}

void tbx__log(int level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_emit(level, msg, NULL, NULL);
}

void tbx__log_object(int level, const char *what, const char *json)
{
	log_emit(level, "", what, json);
}

int tbx__log_enabled(int level)
{
	return level <= log_level;
}
