/*
 * `tokenbox send`: ingress from the command line.  Reads one message per
 * line from stdin and publishes each with tokens minted for every consumer
 * group subscribed to the topic (tbx_publish_id), flushing every
 * SEND_CHUNK messages and at the end of the input.
 *
 * Before reading anything it checks that the brokers answer and the topic
 * exists (tbx_publisher_check), so that a wrong address or topic fails at
 * once with librdkafka's reason, empty input included.  Every line that
 * is not published is reported with its number, and the exit status says
 * whether all were.
 *
 * Only the public API is used, like any user of the library.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/conf.h"
#include "consumer/publish.h"
#include "consumer/stores.h"
#include "tokenbox/tokenbox.h"
#include "tools/cli.h"
#include "tools/cli_conf.h"
#include "tools/cli_store.h"

#define CMD "send"

#define SEND_CHUNK    1000
#define SEND_MAX_LINE (1024 * 1024) /* bytes, without the newline */
/* A failed batch is retried with the same ids and tokens (receivers drop
 * the copies) this many times before send gives up. */
#define SEND_FLUSH_TRIES 3
/* Bound on the broker and topic check before the input is read. */
#define SEND_CHECK_MS 10000

/* The input was read to its end, but some lines were not published. */
#define SEND_EXIT_LINES 3

enum { OPT_TSCHEMA = 256 };

static void usage(void)
{
	printf(
	    "Usage: tokenbox send -b BOOTSTRAP -t TOPIC -T TYPE -S TOKENS "
	    "[options]\n"
	    "\n"
	    "Publishes one message per line of standard input (the trailing "
	    "newline\n"
	    "removed) to TOPIC, with tokens minted in the token store TOKENS "
	    "for every\n"
	    "consumer group subscribed to TOPIC.  Lines may hold up to 1 MiB.\n"
	    "An empty line is refused, not published as an empty message "
	    "(with\n"
	    "--key-delimiter, a line 'KEY' DELIM has an empty payload).\n"
	    "Before reading any input, the brokers and TOPIC are checked "
	    "(10 s at most).\n"
	    "\n"
	    "Options:\n"
	    "  -b, --bootstrap-servers B  Kafka brokers, host:port[,...]\n"
	    "  -t, --topic TOPIC          topic to publish to\n"
	    "  -T, --type TYPE            message type (the tbx-type header)\n"
	    "  -S, --tokens PATH|URL      the pipeline's token store: an "
	    "SQLite file,\n"
	    "                             or a PostgreSQL URL "
	    "(postgresql://...)\n"
	    "      --tokens-schema NAME   a URL's schema of the token store "
	    "(default\n"
	    "                             tokenbox_tokens)\n"
	    "  -k, --key K                Kafka key of every message\n"
	    "  -K, --key-delimiter DELIM  each line is KEY DELIM PAYLOAD, "
	    "split "
	    "at the\n"
	    "                             first DELIM (a line without it "
	    "fails)\n"
	    "  -H, --header NAME=VALUE    header on every message (repeatable; "
	    "names\n"
	    "                             starting with tbx- are reserved)\n"
	    "  -i, --id-from key|json:FIELD\n"
	    "                             the caller's id of each message: its "
	    "key, or\n"
	    "                             the top-level JSON string or integer "
	    "FIELD of\n"
	    "                             the payload.  The same id with the "
	    "same type,\n"
	    "                             key and payload within "
	    "ingress.dedup.window.ms\n"
	    "                             is not published again; with another "
	    "one it is\n"
	    "                             refused (see docs/architecture.md)\n"
	    "  -c, --config FILE          read key=value settings from FILE "
	    "(the "
	    "worker's\n"
	    "                             format; plugin= lines are ignored)\n"
	    "  -X KEY=VALUE               one setting, after --config: e.g.\n"
	    "                             -X kafka.security.protocol=SASL_SSL\n"
	    "                             -X tokens.format=set: token sets "
	    "instead of\n"
	    "                             a token per message (upgrade the "
	    "receiving\n"
	    "                             workers first: "
	    "docs/configuration.md)\n"
	    "  -h, --help                 show this help\n"
	    "\n"
	    "-b and -S may come from the configuration instead "
	    "(kafka.bootstrap.servers,\n"
	    "tokens.path, or tokens.url and tokens.schema).  A URL's password "
	    "comes from\n"
	    "the URL, PGPASSWORD, ~/.pgpass or a service file; no message "
	    "shows it.\n"
	    "Short options mean the same in every command: -S "
	    "is the\n"
	    "token store (it was -s here), -s the service store, -t a topic, "
	    "-c a\n"
	    "configuration file.\n"
	    "\n"
	    "Prints 'sent N messages to TOPIC' (and how many natural "
	    "duplicates were\n"
	    "not sent again, and how often a fatal error replaced the "
	    "producer); every\n"
	    "line not published is named on standard error.\n"
	    "Exit status: 0 every line was published (or was a natural "
	    "duplicate);\n"
	    "1 the brokers, the topic, the token store or the input failed "
	    "(lines\n"
	    "before it may have been sent: see the message); 2 bad command "
	    "line or\n"
	    "configuration, nothing sent; 3 the input was read to its end but "
	    "some\n"
	    "lines were not published (empty, malformed, or refused as "
	    "synthetic\n"
	    "duplicates); the last line of standard error lists their "
	    "numbers.\n");
}

/*
 * Reads one line into @p buf (SEND_MAX_LINE + 1 bytes) without its '\n'.
 * @returns 1 with *len set, 0 at the end of the input, -1 on a read error,
 * -2 for a line longer than SEND_MAX_LINE (the rest of it is not read).
 * Bytes are taken as they are, NULs included.
 */
static int read_line(FILE *in, char *buf, size_t *len)
{
	size_t n = 0;
	int c;

	while ((c = getc_unlocked(in)) != EOF && c != '\n') {
		if (n == SEND_MAX_LINE)
			return -2;
		buf[n++] = (char)c;
	}
	if (c == EOF) {
		if (ferror(in))
			return -1;
		if (n == 0)
			return 0;
	}
	*len = n;
	return 1;
}

typedef enum id_from { ID_NONE = 0, ID_KEY, ID_JSON } id_from_t;

typedef struct send_opts {
	const char *servers, *topic, *type, *key, *tokens, *delim;
	const char *tokens_schema; /* --tokens-schema */
	id_from_t id_from;
	const char *id_field; /* json:FIELD */
	tbx_header_t *headers;
	size_t header_cnt;
	tbx_cli_conf_t conf;
} send_opts_t;

static int add_header(send_opts_t *o, const char *arg)
{
	const char *eq = strchr(arg, '=');
	tbx_header_t *h;

	if (!eq || eq == arg)
		return tbx_cli_usage(CMD, "--header '%s': expected NAME=VALUE",
				     arg);
	if (strncasecmp(arg, "tbx-", 4) == 0)
		return tbx_cli_usage(CMD,
				     "--header '%s': names starting with tbx- "
				     "are reserved for tokenbox",
				     arg);
	h = &o->headers[o->header_cnt++];
	/* The name is cut from argv in place: argv outlives the command. */
	*(char *)eq = '\0';
	h->name = arg;
	h->value = eq + 1;
	h->len = strlen(eq + 1);
	return 0;
}

static int parse_id_from(send_opts_t *o, const char *arg)
{
	if (strcmp(arg, "key") == 0) {
		o->id_from = ID_KEY;
		return 0;
	}
	if (strncmp(arg, "json:", 5) == 0 && arg[5]) {
		o->id_from = ID_JSON;
		o->id_field = arg + 5;
		return 0;
	}
	return tbx_cli_usage(CMD,
			     "--id-from: '%s' is neither 'key' nor "
			     "'json:FIELD'",
			     arg);
}

static int parse_args(int argc, char **argv, send_opts_t *o)
{
	static const struct option longopts[] = {
	    {"bootstrap-servers", required_argument, NULL, 'b'},
	    {"topic", required_argument, NULL, 't'},
	    {"type", required_argument, NULL, 'T'},
	    {"tokens", required_argument, NULL, 'S'},
	    {"tokens-schema", required_argument, NULL, OPT_TSCHEMA},
	    {"key", required_argument, NULL, 'k'},
	    {"key-delimiter", required_argument, NULL, 'K'},
	    {"header", required_argument, NULL, 'H'},
	    {"id-from", required_argument, NULL, 'i'},
	    {"config", required_argument, NULL, 'c'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int c, rc;

	/* At most every other argument is a -H value. */
	if (!(o->headers = calloc((size_t)argc + 1, sizeof(*o->headers))))
		return tbx_cli_fail(CMD, "out of memory");
	while ((c = tbx_cli_getopt(CMD, argc, argv, "b:t:T:S:k:K:H:i:c:X:h",
				   longopts)) != -1) {
		rc = 0;
		switch (c) {
		case 'b':
			o->servers = optarg;
			break;
		case 't':
			o->topic = optarg;
			break;
		case 'T':
			o->type = optarg;
			break;
		case 'S':
			o->tokens = optarg;
			break;
		case OPT_TSCHEMA:
			o->tokens_schema = optarg;
			break;
		case 'k':
			o->key = optarg;
			break;
		case 'K':
			if (!*optarg)
				return tbx_cli_usage(CMD, "--key-delimiter: "
							  "empty value");
			o->delim = optarg;
			break;
		case 'H':
			rc = add_header(o, optarg);
			break;
		case 'i':
			rc = parse_id_from(o, optarg);
			break;
		case 'c':
			rc = tbx_cli_conf_file(CMD, &o->conf, optarg);
			break;
		case 'X':
			rc = tbx_cli_conf_override(CMD, &o->conf, optarg);
			break;
		case 'h':
			usage();
			return -1;
		default:
			return TBX_EXIT_USAGE;
		}
		if (rc)
			return rc;
	}
	if (optind < argc)
		return tbx_cli_usage(CMD,
				     "unexpected argument '%s' (messages are "
				     "read from standard input)",
				     argv[optind]);
	if (o->key && o->delim)
		return tbx_cli_usage(CMD, "--key and --key-delimiter exclude "
					  "each other: one key for every "
					  "message, or one per line");
	if (o->id_from == ID_KEY && !o->key && !o->delim)
		return tbx_cli_usage(CMD, "--id-from key needs a key: "
					  "--key-delimiter (one per line) or "
					  "--key");
	{
		const struct {
			const char *value, *name;
			int required;
		} opts[] = {
		    {o->servers, "--bootstrap-servers", 0},
		    {o->topic, "--topic", 1},
		    {o->type, "--type", 1},
		    {o->tokens, "--tokens", 0},
		};
		for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
			if (!opts[i].value && opts[i].required)
				return tbx_cli_usage(
				    CMD,
				    "%s is required (see 'tokenbox "
				    "help send')",
				    opts[i].name);
			if (opts[i].value && !*opts[i].value)
				return tbx_cli_usage(CMD, "%s: empty value",
						     opts[i].name);
		}
	}
	return 0;
}

/* Line numbers, for the report of what was not published. */
typedef struct lines {
	size_t *v;
	size_t cnt, cap;
} lines_t;

static int lines_add(lines_t *l, size_t lineno)
{
	if (l->cnt == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		size_t *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -1;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->cnt++] = lineno;
	return 0;
}

/* "3, 5-9, 12" into @p buf, cut with ", ..." when it does not fit. */
static void lines_format(const lines_t *l, char *buf, size_t size)
{
	size_t pos = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < l->cnt; i++) {
		size_t j = i;
		int n;

		while (j + 1 < l->cnt && l->v[j + 1] == l->v[j] + 1)
			j++;
		if (j > i)
			n = snprintf(buf + pos, size - pos, "%s%zu-%zu",
				     i ? ", " : "", l->v[i], l->v[j]);
		else
			n = snprintf(buf + pos, size - pos, "%s%zu",
				     i ? ", " : "", l->v[i]);
		if (n < 0 || (size_t)n >= size - pos - 8) {
			snprintf(buf + pos, size - pos, ", ...");
			return;
		}
		pos += (size_t)n;
		i = j;
	}
}

/* What send keeps per queued message. */
typedef struct queued {
	size_t lineno;
	char *caller_id; /* NULL: none */
} queued_t;

typedef struct send_state {
	const send_opts_t *o;
	tbx_publisher_t *pub;
	queued_t *q;
	size_t queued;
	size_t sent, duplicates;
	lines_t failed; /* every line not published */
} send_state_t;

static void queue_clear(send_state_t *st)
{
	for (size_t i = 0; i < st->queued; i++)
		free(st->q[i].caller_id);
	st->queued = 0;
}

/* Mints, produces and waits for the queued messages, then reports each
 * line that was not published.  @returns 0, or TBX_EXIT_FAIL when the
 * batch could not be delivered (the input stops there). */
static int flush(send_state_t *st)
{
	const send_opts_t *o = st->o;
	lines_t undelivered = {0};
	size_t failed = 0;
	int err = TBX_OK, rc = TBX_EXIT_OK;
	char ranges[512];

	if (!st->queued)
		return TBX_EXIT_OK;
	for (int i = 0; i < SEND_FLUSH_TRIES; i++)
		if (!(err = tbx_publisher_flush(st->pub, &failed)) ||
		    err == TBX_EEXIST)
			break;
	for (size_t i = 0; i < st->queued; i++) {
		int outcome = tbx_publisher_outcome(st->pub, i, NULL);

		switch (outcome) {
		case TBX_OUTCOME_SENT:
		case TBX_OUTCOME_RESENT:
			st->sent++;
			break;
		case TBX_OUTCOME_DUPLICATE:
			st->duplicates++;
			break;
		case TBX_OUTCOME_REFUSED:
			tbx_cli_note(CMD,
				     "line %zu: caller id '%s' refused: a "
				     "different message was published with "
				     "this id within ingress.dedup.window.ms "
				     "(synthetic duplicate)",
				     st->q[i].lineno, st->q[i].caller_id);
			lines_add(&st->failed, st->q[i].lineno);
			break;
		default: /* undelivered, or not even minted */
			lines_add(&undelivered, st->q[i].lineno);
			lines_add(&st->failed, st->q[i].lineno);
			break;
		}
	}
	if (err && err != TBX_EEXIST) {
		lines_format(&undelivered, ranges, sizeof(ranges));
		rc = tbx_cli_fail(CMD, "%s; line%s %s not delivered to %s",
				  tbx_publisher_errstr(st->pub),
				  undelivered.cnt == 1 ? "" : "s", ranges,
				  o->topic);
	}
	free(undelivered.v);
	queue_clear(st);
	return rc;
}

/* The caller id of a line from the JSON payload's top-level @p field.
 * @returns a malloc'ed id, or NULL with *why set. */
static char *json_id(const char *payload, size_t len, const char *field,
		     const char **why)
{
	cJSON *doc = cJSON_ParseWithLength(payload, len);
	const cJSON *v;
	char *id = NULL;
	char num[32];

	if (!doc || !cJSON_IsObject(doc)) {
		*why = "the payload is not a JSON object";
	} else if (!(v = cJSON_GetObjectItemCaseSensitive(doc, field))) {
		*why = "the payload has no such field";
	} else if (cJSON_IsString(v) && v->valuestring) {
		if (!(id = strdup(v->valuestring)))
			*why = "out of memory";
	} else if (cJSON_IsNumber(v) &&
		   v->valuedouble == (double)(long long)v->valuedouble) {
		snprintf(num, sizeof(num), "%lld", (long long)v->valuedouble);
		if (!(id = strdup(num)))
			*why = "out of memory";
	} else {
		*why = "the field is neither a string nor an integer";
	}
	cJSON_Delete(doc);
	return id;
}

/* A bad line: named on stderr and counted, the input goes on. */
static void line_fails(send_state_t *st, size_t lineno, const char *why)
{
	tbx_cli_note(CMD, "line %zu: %s", lineno, why);
	lines_add(&st->failed, lineno);
}

/* The first @p dlen bytes of @p d in @p s (@p len bytes, NULs allowed). */
static char *find(char *s, size_t len, const char *d, size_t dlen)
{
	for (size_t i = 0; i + dlen <= len; i++)
		if (memcmp(s + i, d, dlen) == 0)
			return s + i;
	return NULL;
}

/* @p s in @p buf with each control character written as a C escape
 * ("\t", "\x1b"), so that a message shows what it names. */
static void escape(const char *s, char *buf, size_t size)
{
	static const char *const named[] = {['\t'] = "\\t",
					    ['\n'] = "\\n",
					    ['\r'] = "\\r",
					    ['\v'] = "\\v",
					    ['\f'] = "\\f"};
	size_t pos = 0;

	buf[0] = '\0';
	for (; *s && pos + 5 < size; s++) {
		unsigned char c = (unsigned char)*s;

		if (c < sizeof(named) / sizeof(named[0]) && named[c])
			pos += (size_t)snprintf(buf + pos, size - pos, "%s",
						named[c]);
		else if (c < 0x20 || c == 0x7f || c == '\\')
			pos +=
			    (size_t)snprintf(buf + pos, size - pos,
					     c == '\\' ? "\\\\" : "\\x%02x", c);
		else
			buf[pos++] = (char)c;
		buf[pos] = '\0';
	}
}

/* Splits, identifies and queues one line.  @returns 0, or an exit status
 * that stops the input. */
static int queue_line(send_state_t *st, char *line, size_t len, size_t lineno)
{
	const send_opts_t *o = st->o;
	const char *key = o->key, *payload = line, *why = NULL;
	size_t key_len = o->key ? strlen(o->key) : 0, payload_len = len;
	char *caller_id = NULL;
	int err;

	/* A stray blank line (an editor's last newline, a paste) is not a
	 * message: refused, named, not published as an empty one. */
	if (len == 0) {
		line_fails(st, lineno,
			   "empty line: nothing to publish (not sent as an "
			   "empty message)");
		return 0;
	}

	if (o->delim) {
		size_t dlen = strlen(o->delim);
		char *d = find(line, len, o->delim, dlen);

		if (!d) {
			char msg[300], shown[200];

			escape(o->delim, shown, sizeof(shown));
			snprintf(msg, sizeof(msg), "no key delimiter '%s'",
				 shown);
			line_fails(st, lineno, msg);
			return 0;
		}
		key = line;
		key_len = (size_t)(d - line);
		payload = d + dlen;
		payload_len = len - key_len - dlen;
	}
	if (o->id_from == ID_KEY) {
		if (key_len == 0 || memchr(key, '\0', key_len)) {
			line_fails(st, lineno,
				   "--id-from key: the key is empty or holds "
				   "a NUL byte");
			return 0;
		}
		if (!(caller_id = strndup(key, key_len)))
			return tbx_cli_fail(CMD, "out of memory");
	} else if (o->id_from == ID_JSON &&
		   !(caller_id =
			 json_id(payload, payload_len, o->id_field, &why))) {
		char msg[300];

		snprintf(msg, sizeof(msg), "--id-from json:%s: %s", o->id_field,
			 why);
		line_fails(st, lineno, msg);
		return 0;
	}
	tbx_out_t out = {.topic = o->topic,
			 .type = o->type,
			 .key = key,
			 .key_len = key_len,
			 .payload = payload,
			 .payload_len = payload_len,
			 .headers = o->headers,
			 .header_cnt = o->header_cnt};
	if ((err = tbx_publish_id(st->pub, &out, caller_id))) {
		if (err == TBX_EINVAL) {
			line_fails(st, lineno,
				   *tbx_publisher_errstr(st->pub)
				       ? tbx_publisher_errstr(st->pub)
				       : tbx_strerror(err));
			free(caller_id);
			return 0;
		}
		free(caller_id);
		return tbx_cli_fail(CMD, "line %zu: %s", lineno,
				    tbx_strerror(err));
	}
	st->q[st->queued].lineno = lineno;
	st->q[st->queued++].caller_id = caller_id;
	if (st->queued == SEND_CHUNK)
		return flush(st);
	return 0;
}

/* The configuration: --config, -X, then the options, which win. */
static int configure(const send_opts_t *o, tbx_conf_t *conf)
{
	tbx_cli_store_t tokens;
	char errstr[512];
	int rc;

	if ((rc = tbx_cli_conf_apply(CMD, &o->conf, conf)))
		return rc;
	if (o->tokens_schema && !o->tokens)
		return tbx_cli_usage(CMD, "--tokens-schema is the schema of "
					  "--tokens: --tokens is needed with "
					  "it");
	if (o->tokens &&
	    (rc = tbx_cli_store_set(CMD, &tokens, "--tokens", o->tokens,
				    "--tokens-schema", o->tokens_schema,
				    TBX_CLI_TOKENS_SCHEMA)))
		return rc;
	if ((o->tokens && tbx_cli_store_conf_tokens(&tokens, conf, errstr,
						    sizeof(errstr))) ||
	    (o->servers && tbx_conf_set(conf, "kafka.bootstrap.servers",
					o->servers, errstr, sizeof(errstr))))
		return tbx_cli_usage(CMD, "%s", errstr);
	if (!tbx_conf_get(conf, "kafka.bootstrap.servers"))
		return tbx_cli_usage(CMD, "--bootstrap-servers is required (or "
					  "kafka.bootstrap.servers in the "
					  "configuration; see 'tokenbox help "
					  "send')");
	if (!tbx__stores_tokens_set(tbx__conf_cfg(conf)))
		return tbx_cli_usage(CMD,
				     "--tokens is required (or tokens.path or "
				     "tokens.url in the configuration; see "
				     "'tokenbox help send')");
	return 0;
}

static void summary(const send_state_t *st)
{
	tbx_publisher_stats_t ps;
	char dups[96] = "", restarts[192] = "";

	tbx_publisher_stats(st->pub, &ps);
	if (st->duplicates)
		snprintf(dups, sizeof(dups),
			 "%zu natural duplicates not sent again",
			 st->duplicates);
	/* Logged at ERROR when it happened; said again here, since the
	 * run still succeeded. */
	if (ps.producer_restarts)
		snprintf(restarts, sizeof(restarts),
			 "%sthe producer was replaced %" PRIu64
			 " time%s after a fatal error; its undelivered "
			 "messages were sent again with their ids and tokens",
			 dups[0] ? "; " : "", ps.producer_restarts,
			 ps.producer_restarts == 1 ? "" : "s");
	if (dups[0] || restarts[0])
		printf("sent %zu messages to %s (%s%s)\n", st->sent,
		       st->o->topic, dups, restarts);
	else
		printf("sent %zu messages to %s\n", st->sent, st->o->topic);
	fflush(stdout);
}

int tbx_cmd_send(int argc, char **argv)
{
	send_opts_t o = {0};
	send_state_t st = {0};
	tbx_conf_t *conf = NULL;
	char errstr[512], ranges[512];
	char *line = NULL;
	size_t len, lineno = 0, groups = 0;
	int rc, r;

	if ((rc = parse_args(argc, argv, &o)))
		goto out;
	if (!(conf = tbx_conf_new())) {
		rc = tbx_cli_fail(CMD, "out of memory");
		goto out;
	}
	if ((rc = configure(&o, conf)))
		goto out;
	st.o = &o;
	if (!(st.pub = tbx_publisher_new(conf, errstr, sizeof(errstr)))) {
		rc = tbx_cli_fail(CMD, "%s", errstr);
		goto out;
	}
	conf = NULL; /* the publisher's now */
	/* flush() names each refused line: the publisher's own WARN would
	 * say it a second time. */
	tbx__publisher_caller_reports_refusals(st.pub);
	/* Fail fast, before any input is read. */
	if (tbx_publisher_check(st.pub, o.topic, SEND_CHECK_MS, &groups)) {
		rc = tbx_cli_fail(CMD, "%s; nothing was sent",
				  tbx_publisher_errstr(st.pub));
		goto out;
	}
	if (groups == 0)
		tbx_cli_note(CMD,
			     "warning: no consumer group is subscribed to %s "
			     "in the token store: the messages carry tokens "
			     "for no group (start the receiving workers "
			     "first; a group that subscribes later treats "
			     "them as untokened)",
			     o.topic);
	if (!(line = malloc(SEND_MAX_LINE + 1)) ||
	    !(st.q = calloc(SEND_CHUNK, sizeof(*st.q)))) {
		rc = tbx_cli_fail(CMD, "out of memory");
		goto out;
	}

	while ((r = read_line(stdin, line, &len)) == 1)
		if ((rc = queue_line(&st, line, len, ++lineno)))
			goto out;
	/* What was read before a bad line goes out: lines 1..n-1 were
	 * valid, and a partial input is the caller's to resume. */
	if ((rc = flush(&st)))
		goto out;
	if (r == -2) {
		rc = tbx_cli_fail(CMD,
				  "line %zu is longer than 1 MiB (%d bytes); "
				  "%zu messages before it were sent to %s",
				  lineno + 1, SEND_MAX_LINE, st.sent, o.topic);
		goto out;
	}
	if (r == -1) {
		rc = tbx_cli_fail(CMD,
				  "cannot read standard input after line %zu: "
				  "%s; %zu messages were sent to %s",
				  lineno, strerror(errno), st.sent, o.topic);
		goto out;
	}
	summary(&st);
	if (st.failed.cnt) {
		lines_format(&st.failed, ranges, sizeof(ranges));
		tbx_cli_note(CMD, "%zu of %zu lines not published; lines: %s",
			     st.failed.cnt, lineno, ranges);
		rc = SEND_EXIT_LINES;
	} else {
		rc = TBX_EXIT_OK;
	}
out:
	if (st.q)
		queue_clear(&st);
	free(st.q);
	free(st.failed.v);
	free(line);
	tbx_publisher_destroy(st.pub);
	tbx_conf_destroy(conf);
	free(o.headers);
	tbx_cli_conf_free(&o.conf);
	return rc < 0 ? TBX_EXIT_OK : rc;
}
