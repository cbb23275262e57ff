/*
 * `tokenbox send`: ingress from the command line.  Reads one payload per
 * line from stdin and publishes each with tokens minted for every consumer
 * group subscribed to the topic (tbx_publish), flushing every
 * SEND_CHUNK messages and at the end of the input.
 *
 * Only the public API is used, like any user of the library.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenbox/tokenbox.h"
#include "tools/cli.h"

#define CMD "send"

#define SEND_CHUNK    1000
#define SEND_MAX_LINE (1024 * 1024) /* bytes, without the newline */
/* A failed batch is retried with the same ids and tokens (receivers drop
 * the copies) this many times before send gives up. */
#define SEND_FLUSH_TRIES 3

static void usage(void)
{
	printf("Usage: tokenbox send --bootstrap-servers B --topic T --type "
	       "TYPE --tokens PATH\n"
	       "                     [--key K]\n"
	       "\n"
	       "Publishes one message per line of standard input (the "
	       "trailing newline\n"
	       "removed) to topic T, with tokens minted in the token store "
	       "PATH for every\n"
	       "consumer group subscribed to T.  Lines may hold up to 1 MiB.\n"
	       "\n"
	       "Options:\n"
	       "  -b, --bootstrap-servers B  Kafka brokers, host:port[,...]\n"
	       "  -t, --topic T              topic to publish to\n"
	       "  -T, --type TYPE            message type (the tbx-type "
	       "header)\n"
	       "  -k, --key K                Kafka key of every message "
	       "(default: none)\n"
	       "  -s, --tokens PATH          the pipeline's token store "
	       "(SQLite file)\n"
	       "  -h, --help                 show this help\n"
	       "\n"
	       "Prints 'sent N messages to T' when every message was "
	       "delivered.\n"
	       "Exit status: 0 on success, 1 when a message could not be "
	       "stored or\n"
	       "delivered, 2 for a bad command line.\n");
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

typedef struct send_opts {
	const char *servers, *topic, *type, *key, *tokens;
} send_opts_t;

static int parse_args(int argc, char **argv, send_opts_t *o)
{
	static const struct option longopts[] = {
	    {"bootstrap-servers", required_argument, NULL, 'b'},
	    {"topic", required_argument, NULL, 't'},
	    {"type", required_argument, NULL, 'T'},
	    {"key", required_argument, NULL, 'k'},
	    {"tokens", required_argument, NULL, 's'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int c;

	while ((c = tbx_cli_getopt(CMD, argc, argv, "b:t:T:k:s:h", longopts)) !=
	       -1) {
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
		case 'k':
			o->key = optarg;
			break;
		case 's':
			o->tokens = optarg;
			break;
		case 'h':
			usage();
			return -1;
		default:
			return TBX_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return tbx_cli_usage(CMD,
				     "unexpected argument '%s' (messages are "
				     "read from standard input)",
				     argv[optind]);
	{
		const struct {
			const char *value, *name;
		} required[] = {
		    {o->servers, "--bootstrap-servers"},
		    {o->topic, "--topic"},
		    {o->type, "--type"},
		    {o->tokens, "--tokens"},
		};
		for (size_t i = 0; i < sizeof(required) / sizeof(required[0]);
		     i++) {
			if (!required[i].value)
				return tbx_cli_usage(
				    CMD,
				    "%s is required (see 'tokenbox "
				    "help send')",
				    required[i].name);
			if (!*required[i].value)
				return tbx_cli_usage(CMD, "%s: empty value",
						     required[i].name);
		}
	}
	return 0;
}

/* Mints, produces and waits for the queued messages. */
static int flush(tbx_publisher_t *pub, const send_opts_t *o, size_t queued,
		 size_t *sent)
{
	size_t failed = 0;
	int err = TBX_OK;

	if (!queued)
		return TBX_EXIT_OK;
	for (int i = 0; i < SEND_FLUSH_TRIES; i++)
		if (!(err = tbx_publisher_flush(pub, &failed)))
			break;
	if (err) {
		if (failed > queued)
			failed = queued;
		return tbx_cli_fail(
		    CMD,
		    "%s (%zu of the last %zu messages to %s not "
		    "delivered, %zu delivered in all)",
		    tbx_publisher_errstr(pub), failed, queued, o->topic,
		    *sent + queued - failed);
	}
	*sent += queued;
	return TBX_EXIT_OK;
}

int tbx_cmd_send(int argc, char **argv)
{
	send_opts_t o = {0};
	tbx_conf_t *conf;
	tbx_publisher_t *pub = NULL;
	char errstr[512];
	char *line = NULL;
	size_t len, queued = 0, sent = 0, lineno = 0;
	int rc, r, err;

	if ((rc = parse_args(argc, argv, &o)))
		return rc < 0 ? TBX_EXIT_OK : rc;

	if (!(conf = tbx_conf_new()))
		return tbx_cli_fail(CMD, "out of memory");
	if (tbx_conf_set(conf, "tokens.path", o.tokens, errstr,
			 sizeof(errstr)) ||
	    tbx_conf_set(conf, "kafka.bootstrap.servers", o.servers, errstr,
			 sizeof(errstr))) {
		tbx_conf_destroy(conf);
		return tbx_cli_usage(CMD, "%s", errstr);
	}
	/* librdkafka retries unreachable brokers quietly; a failure ends in
	 * one line below, naming what was not delivered. */
	tbx_conf_set(conf, "kafka.log_level", "2", NULL, 0);
	if (!(pub = tbx_publisher_new(conf, errstr, sizeof(errstr)))) {
		tbx_conf_destroy(conf);
		return tbx_cli_fail(CMD, "%s", errstr);
	}
	if (!(line = malloc(SEND_MAX_LINE + 1))) {
		rc = tbx_cli_fail(CMD, "out of memory");
		goto out;
	}

	while ((r = read_line(stdin, line, &len)) == 1) {
		tbx_out_t out = {.topic = o.topic,
				 .type = o.type,
				 .key = o.key,
				 .key_len = o.key ? strlen(o.key) : 0,
				 .payload = line,
				 .payload_len = len};
		lineno++;
		if ((err = tbx_publish(pub, &out))) {
			rc = tbx_cli_fail(CMD, "line %zu: %s", lineno,
					  tbx_strerror(err));
			goto out;
		}
		if (++queued == SEND_CHUNK) {
			if ((rc = flush(pub, &o, queued, &sent)))
				goto out;
			queued = 0;
		}
	}
	/* What was read before a bad line goes out: lines 1..n-1 were
	 * valid, and a partial input is the caller's to resume. */
	if ((rc = flush(pub, &o, queued, &sent)))
		goto out;
	if (r == -2) {
		rc = tbx_cli_fail(CMD,
				  "line %zu is longer than 1 MiB (%d bytes); "
				  "%zu messages before it were sent to %s",
				  lineno + 1, SEND_MAX_LINE, sent, o.topic);
		goto out;
	}
	if (r == -1) {
		rc = tbx_cli_fail(CMD,
				  "cannot read standard input after line %zu: "
				  "%s; %zu messages were sent to %s",
				  lineno, strerror(errno), sent, o.topic);
		goto out;
	}
	printf("sent %zu messages to %s\n", sent, o.topic);
	rc = TBX_EXIT_OK;
out:
	free(line);
	tbx_publisher_destroy(pub);
	return rc;
}
