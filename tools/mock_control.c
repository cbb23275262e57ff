/*
 * The control channel of `tokenbox mock-cluster` (see mock_control.h).
 *
 * Every command calls one function of rdkafka_mock.h.  Those return once
 * the change is made (the broker commands wait for the mock cluster's
 * thread to apply them, the error stacks are changed under the cluster's
 * lock), so "ok" is only written after a client request sent from then on
 * would see it.
 */
#include "tools/mock_control.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/ids.h"
#include "tools/cli.h"

#define CMD "mock-cluster"

/* Most words a command has ("leader TOPIC PARTITION ID"), plus one to tell
 * a surplus word. */
#define WORDS_MAX 5
/* `error REQUEST ERR COUNT`: COUNT's range. */
#define ERR_COUNT_MAX 1000
/* `rtt ID MS`: MS's range. */
#define RTT_MS_MAX 60000

#define COMMANDS "broker, rtt, error, clear, leader, coordinator, help"

/* The Kafka protocol requests that librdkafka 2.0.2's mock cluster serves,
 * with their ApiKey (librdkafka's RD_KAFKAP_* numbers, which its public
 * headers do not define).  An error pushed for any other request would
 * never be used. */
/* clang-format off */
static const struct request {
	const char *name;
	int16_t api_key;
} requests[] = {
	{"Produce",             0},
	{"Fetch",               1},
	{"ListOffsets",         2},
	{"Metadata",            3},
	{"OffsetCommit",        8},
	{"OffsetFetch",         9},
	{"FindCoordinator",    10},
	{"JoinGroup",          11},
	{"Heartbeat",          12},
	{"LeaveGroup",         13},
	{"SyncGroup",          14},
	{"ApiVersions",        18},
	{"InitProducerId",     22},
	{"AddPartitionsToTxn", 24},
	{"AddOffsetsToTxn",    25},
	{"EndTxn",             26},
	{"TxnOffsetCommit",    28},
};
/* clang-format on */

#define REQUEST_CNT (sizeof(requests) / sizeof(requests[0]))

/* One command's outcome: the answer line (without newline) and what to
 * log on stderr (empty: nothing). */
typedef struct result {
	char answer[512];
	char log[600];
} result_t;

static void set_error(result_t *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(result_t *res, const char *fmt, ...)
{
	char reason[sizeof(res->answer) - 8];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	snprintf(res->answer, sizeof(res->answer), "error: %s", reason);
	snprintf(res->log, sizeof(res->log), "control: refused: %s", reason);
}

static void set_ok(result_t *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "ok", and "control: <what was done>" for the log. */
static void set_ok(result_t *res, const char *fmt, ...)
{
	char what[sizeof(res->log) - 16];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(res->answer, sizeof(res->answer), "ok");
	snprintf(res->log, sizeof(res->log), "control: %s", what);
}

int mctl_topic_check(const char *name, size_t len, char *why, size_t size)
{
	if (len > TBX_TOPIC_MAX) {
		snprintf(why, size,
			 "the topic name is %zu characters long (at most %d)",
			 len, TBX_TOPIC_MAX);
		return -1;
	}
	if ((len == 1 && name[0] == '.') ||
	    (len == 2 && name[0] == '.' && name[1] == '.')) {
		snprintf(why, size, "'%.*s' is not a valid topic name",
			 (int)len, name);
		return -1;
	}
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-')) {
			snprintf(why, size,
				 "'%.*s' is not a valid topic name (only a-z "
				 "A-Z 0-9 . _ - are allowed)",
				 (int)len, name);
			return -1;
		}
	}
	return 0;
}

/* Parses @p arg, the command's argument @p what, as an integer in
 * [@p min, @p max]; on failure sets the error answer. */
static int parse_num(result_t *res, const char *what, const char *arg,
		     long long min, long long max, long long *out)
{
	switch (tbx_cli_to_int(arg, min, max, out)) {
	case 0:
		return 0;
	case -1:
		set_error(res, "%s '%s' is not an integer", what, arg);
		return -1;
	default:
		set_error(res, "%s '%s' is out of range (%lld..%lld)", what,
			  arg, min, max);
		return -1;
	}
}

/* A broker id, 1..brokers (or also -1 with @p none_ok). */
static int parse_broker(const mctl_t *ctl, result_t *res, const char *arg,
			int none_ok, int32_t *id)
{
	long long v;

	if (none_ok && strcmp(arg, "-1") == 0) {
		*id = -1;
		return 0;
	}
	if (parse_num(res, none_ok ? "broker ID (or -1)" : "broker ID", arg, 1,
		      ctl->brokers, &v))
		return -1;
	*id = (int32_t)v;
	return 0;
}

static const struct request *find_request(const char *name)
{
	for (size_t i = 0; i < REQUEST_CNT; i++)
		if (strcasecmp(requests[i].name, name) == 0)
			return &requests[i];
	return NULL;
}

static int parse_request(result_t *res, const char *arg,
			 const struct request **req)
{
	char known[512];
	size_t off = 0;

	if ((*req = find_request(arg)))
		return 0;
	known[0] = '\0';
	for (size_t i = 0; i < REQUEST_CNT && off < sizeof(known); i++) {
		int n = snprintf(known + off, sizeof(known) - off, "%s%s",
				 i ? " " : "", requests[i].name);
		if (n > 0)
			off += (size_t)n;
	}
	set_error(res, "unknown request '%s' (one of: %s)", arg, known);
	return -1;
}

/*
 * ERR: a librdkafka error name without RD_KAFKA_RESP_ERR_, or a decimal
 * code.  Only codes a broker can send: Kafka's positive codes and -1
 * (UNKNOWN, Kafka's UNKNOWN_SERVER_ERROR).  librdkafka's own codes
 * (-199..-101, names starting with '_') never come from a broker, and 0 is
 * success.
 */
static int parse_error(result_t *res, const char *arg, rd_kafka_resp_err_t *err)
{
	const struct rd_kafka_err_desc *descs;
	size_t cnt;
	long long v;

	if ((arg[0] >= '0' && arg[0] <= '9') || arg[0] == '-') {
		switch (tbx_cli_to_int(arg, -32768, 32767, &v)) {
		case 0:
			break;
		case -1:
			set_error(res,
				  "ERR '%s' is not an error name or an "
				  "integer",
				  arg);
			return -1;
		default:
			set_error(res,
				  "error code '%s' is out of range (-1 or "
				  "1..32767)",
				  arg);
			return -1;
		}
	} else {
		rd_kafka_get_err_descs(&descs, &cnt);
		for (size_t i = 0; i < cnt; i++)
			if (descs[i].name &&
			    strcasecmp(descs[i].name, arg) == 0) {
				v = descs[i].code;
				goto found;
			}
		set_error(res,
			  "unknown error name '%s' (a librdkafka error name "
			  "without RD_KAFKA_RESP_ERR_, e.g. "
			  "NOT_LEADER_FOR_PARTITION, or a number)",
			  arg);
		return -1;
	}
found:
	if (v == 0) {
		set_error(res,
			  "'%s' is NO_ERROR, not an error (to drop "
			  "pushed errors: clear REQUEST)",
			  arg);
		return -1;
	}
	if (v < -1) {
		rd_kafka_get_err_descs(&descs, &cnt);
		for (size_t i = 0; i < cnt; i++)
			if (descs[i].name && descs[i].code == v) {
				set_error(res,
					  "'%s' is librdkafka's internal error "
					  "%s (%lld), which no broker sends; "
					  "use a broker error (-1 or "
					  "1..32767)",
					  arg, descs[i].name, v);
				return -1;
			}
		set_error(res,
			  "error code '%s' is out of range (-1 or 1..32767)",
			  arg);
		return -1;
	}
	*err = (rd_kafka_resp_err_t)v;
	return 0;
}

/* Says what librdkafka refused (it should not, after our checks). */
static void mock_failed(result_t *res, rd_kafka_resp_err_t err)
{
	set_error(res, "the mock cluster refused it: %s",
		  rd_kafka_err2str(err));
}

static void cmd_broker(const mctl_t *ctl, char **w, int n, result_t *res)
{
	rd_kafka_resp_err_t err;
	int32_t id;
	int down;

	if (n != 3 || (strcmp(w[1], "down") && strcmp(w[1], "up"))) {
		set_error(res, "usage: broker down ID | broker up ID");
		return;
	}
	down = strcmp(w[1], "down") == 0;
	if (parse_broker(ctl, res, w[2], 0, &id))
		return;
	err = down ? rd_kafka_mock_broker_set_down(ctl->mcluster, id)
		   : rd_kafka_mock_broker_set_up(ctl->mcluster, id);
	if (err)
		mock_failed(res, err);
	else
		set_ok(res, "broker %d %s", (int)id, w[1]);
}

static void cmd_rtt(const mctl_t *ctl, char **w, int n, result_t *res)
{
	rd_kafka_resp_err_t err;
	long long ms;
	int32_t id;

	if (n != 3) {
		set_error(res, "usage: rtt ID MS");
		return;
	}
	if (parse_broker(ctl, res, w[1], 0, &id) ||
	    parse_num(res, "MS", w[2], 0, RTT_MS_MAX, &ms))
		return;
	err = rd_kafka_mock_broker_set_rtt(ctl->mcluster, id, (int)ms);
	if (err)
		mock_failed(res, err);
	else
		set_ok(res, "broker %d rtt %lld ms", (int)id, ms);
}

static void cmd_error(const mctl_t *ctl, char **w, int n, result_t *res)
{
	rd_kafka_resp_err_t errs[ERR_COUNT_MAX];
	const struct request *req;
	rd_kafka_resp_err_t err;
	long long cnt = 1;

	if (n != 3 && n != 4) {
		set_error(res, "usage: error REQUEST ERR [COUNT]");
		return;
	}
	if (parse_request(res, w[1], &req) || parse_error(res, w[2], &err) ||
	    (n == 4 && parse_num(res, "COUNT", w[3], 1, ERR_COUNT_MAX, &cnt)))
		return;
	for (long long i = 0; i < cnt; i++)
		errs[i] = err;
	rd_kafka_mock_push_request_errors_array(ctl->mcluster, req->api_key,
						(size_t)cnt, errs);
	if (cnt == 1)
		set_ok(res, "the next %s request fails with %s (%d)", req->name,
		       rd_kafka_err2name(err), (int)err);
	else
		set_ok(res, "the next %lld %s requests fail with %s (%d)", cnt,
		       req->name, rd_kafka_err2name(err), (int)err);
}

static void cmd_clear(const mctl_t *ctl, char **w, int n, result_t *res)
{
	const struct request *req;

	if (n != 2) {
		set_error(res, "usage: clear REQUEST");
		return;
	}
	if (parse_request(res, w[1], &req))
		return;
	rd_kafka_mock_clear_request_errors(ctl->mcluster, req->api_key);
	set_ok(res, "%s errors cleared", req->name);
}

static void cmd_leader(const mctl_t *ctl, char **w, int n, result_t *res)
{
	char why[512];
	rd_kafka_resp_err_t err;
	long long part;
	int32_t id;

	if (n != 4) {
		set_error(res, "usage: leader TOPIC PARTITION ID");
		return;
	}
	if (mctl_topic_check(w[1], strlen(w[1]), why, sizeof(why))) {
		set_error(res, "%s", why);
		return;
	}
	if (parse_num(res, "PARTITION", w[2], 0, MCTL_PARTS_MAX - 1, &part) ||
	    parse_broker(ctl, res, w[3], 1, &id))
		return;
	err = rd_kafka_mock_partition_set_leader(ctl->mcluster, w[1],
						 (int32_t)part, id);
	/* 2.0.2 answers UNKNOWN_TOPIC_OR_PART; later versions may not. */
	if (err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
	    err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION)
		set_error(res, "topic '%s' has no partition %lld", w[1], part);
	else if (err)
		mock_failed(res, err);
	else if (id == -1)
		set_ok(res, "%s [%lld] has no leader", w[1], part);
	else
		set_ok(res, "%s [%lld] leader is broker %d", w[1], part,
		       (int)id);
}

static void cmd_coordinator(const mctl_t *ctl, char **w, int n, result_t *res)
{
	rd_kafka_resp_err_t err;
	int32_t id;

	if (n != 4 || (strcmp(w[1], "group") && strcmp(w[1], "transaction"))) {
		set_error(res, "usage: coordinator group NAME ID | "
			       "coordinator transaction NAME ID");
		return;
	}
	if (parse_broker(ctl, res, w[3], 0, &id))
		return;
	err = rd_kafka_mock_coordinator_set(ctl->mcluster, w[1], w[2], id);
	if (err)
		mock_failed(res, err);
	else
		set_ok(res, "%s '%s' coordinator is broker %d", w[1], w[2],
		       (int)id);
}

/*
 * Runs the command in @p line (NUL-terminated, no newline; split in
 * place).  @returns 0 for a blank or comment line (no answer), 1 with
 * @p res set otherwise.
 */
static int exec_line(const mctl_t *ctl, char *line, size_t len, result_t *res)
{
	size_t first = strspn(line, " \t");
	char *w[WORDS_MAX + 1] = {NULL};
	char *save = NULL;
	int n = 0;

	res->log[0] = '\0';
	if (first == len || line[first] == '#')
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)line[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f) {
			set_error(res, "control character 0x%02x in the line",
				  c);
			return 1;
		}
	}
	for (char *t = strtok_r(line, " \t", &save); t && n <= WORDS_MAX;
	     t = strtok_r(NULL, " \t", &save))
		w[n++] = t;
	if (n == 0) /* cannot be: blank lines returned above */
		return 0;
	if (n > WORDS_MAX) {
		set_error(res, "too many words for '%s'", w[0]);
		return 1;
	}
	if (strcmp(w[0], "broker") == 0)
		cmd_broker(ctl, w, n, res);
	else if (strcmp(w[0], "rtt") == 0)
		cmd_rtt(ctl, w, n, res);
	else if (strcmp(w[0], "error") == 0)
		cmd_error(ctl, w, n, res);
	else if (strcmp(w[0], "clear") == 0)
		cmd_clear(ctl, w, n, res);
	else if (strcmp(w[0], "leader") == 0)
		cmd_leader(ctl, w, n, res);
	else if (strcmp(w[0], "coordinator") == 0)
		cmd_coordinator(ctl, w, n, res);
	else if (strcmp(w[0], "help") == 0 && n == 1)
		snprintf(res->answer, sizeof(res->answer),
			 "ok commands: " COMMANDS);
	else if (strcmp(w[0], "help") == 0)
		set_error(res, "usage: help");
	else
		set_error(res,
			  "unknown command '%.64s' (commands: " COMMANDS ")",
			  w[0]);
	return 1;
}

/* Writes "@p answer\n" to @p out at once.  A reader that went away is
 * reported once; the commands still apply. */
static void answer(FILE *out, const char *text)
{
	static int reported;

	fputs(text, out);
	putc('\n', out);
	if (fflush(out) != 0 && !reported) {
		tbx_cli_note(CMD,
			     "control: cannot write answers to standard "
			     "output: %s; commands are still applied",
			     strerror(errno));
		reported = 1;
	}
}

static void run_line(const mctl_t *ctl, FILE *out, char *line, size_t len)
{
	result_t res;

	line[len] = '\0';
	if (!exec_line(ctl, line, len, &res))
		return;
	answer(out, res.answer);
	if (res.log[0])
		tbx_cli_note(CMD, "%s", res.log);
}

int mctl_serve(const mctl_t *ctl, int fd, FILE *out)
{
	char line[MCTL_LINE_MAX + 1];
	size_t len = 0;
	int discarding = 0; /* in a line too long, answered already */
	char buf[4096];

	for (;;) {
		int sig = tbx_cli_wait_stop_or_fd(fd);
		ssize_t r;

		if (sig > 0)
			return sig;
		r = sig < 0 ? -1 : read(fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (len > 0 && !discarding)
				run_line(ctl, out, line, len);
			if (r < 0)
				tbx_cli_note(CMD,
					     "control: cannot read standard "
					     "input (%s); running until "
					     "SIGINT or SIGTERM",
					     strerror(errno));
			else
				tbx_cli_note(CMD,
					     "control: end of standard input; "
					     "running until SIGINT or SIGTERM");
			return tbx_cli_wait_stop();
		}
		for (ssize_t i = 0; i < r && !tbx_cli_stop_signal; i++) {
			if (buf[i] == '\n') {
				if (!discarding)
					run_line(ctl, out, line, len);
				len = 0;
				discarding = 0;
			} else if (discarding) {
				continue;
			} else if (len == MCTL_LINE_MAX) {
				answer(out, "error: line too long");
				tbx_cli_note(CMD,
					     "control: refused: a line "
					     "longer than %d bytes",
					     MCTL_LINE_MAX);
				discarding = 1;
				len = 0;
			} else {
				line[len++] = buf[i];
			}
		}
	}
}
