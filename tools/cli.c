/* Shared helpers of the `tokenbox` subcommands (see cli.h). */
#include "tools/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void vreport(const char *cmd, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static tbx_cli_report_fn reporter;

void tbx_cli_set_reporter(tbx_cli_report_fn fn)
{
	reporter = fn;
}

static void vreport(const char *cmd, const char *fmt, va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (reporter) {
		reporter(cmd, msg);
		return;
	}
	fprintf(stderr, "tokenbox%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "",
		msg);
	fflush(stderr);
}

int tbx_cli_usage(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(cmd, fmt, ap);
	va_end(ap);
	return TBX_EXIT_USAGE;
}

int tbx_cli_fail(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(cmd, fmt, ap);
	va_end(ap);
	return TBX_EXIT_FAIL;
}

void tbx_cli_note(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(cmd, fmt, ap);
	va_end(ap);
}

int tbx_cli_to_int(const char *arg, long long min, long long max,
		   long long *out)
{
	const char *digits = arg[0] == '-' ? arg + 1 : arg;
	char *end;
	long long v;

	/* strtoll alone would take " 12", "+12" and "12abc". */
	if (*digits < '0' || *digits > '9')
		return -1;
	errno = 0;
	v = strtoll(arg, &end, 10);
	if (*end != '\0')
		return -1;
	if (errno == ERANGE || v < min || v > max)
		return -2;
	*out = v;
	return 0;
}

int tbx_cli_parse_int(const char *cmd, const char *opt, const char *arg,
		      long long min, long long max, long long *out)
{
	switch (tbx_cli_to_int(arg, min, max, out)) {
	case 0:
		return 0;
	case -1:
		return tbx_cli_usage(cmd, "%s: '%s' is not an integer", opt,
				     arg);
	default:
		return tbx_cli_usage(cmd,
				     "%s: '%s' is out of range (%lld..%lld)",
				     opt, arg, min, max);
	}
}

/* Prints @p arg up to any '=' ("--brokers=" -> "--brokers"). */
static int optlen(const char *arg)
{
	size_t n = strcspn(arg, "=");

	return n > 200 ? 200 : (int)n;
}

/* @returns 1 if @p arg is "--NAME[=...]" for the long option, or an
 * abbreviation of it, whose val is @p val. */
static int is_long_for(const char *arg, int val, const struct option *longopts)
{
	int len;

	if (arg[0] != '-' || arg[1] != '-' || !longopts)
		return 0;
	len = optlen(arg + 2);
	for (const struct option *o = longopts; o->name; o++)
		if (!o->flag && o->val == val && len > 0 &&
		    strncmp(o->name, arg + 2, (size_t)len) == 0)
			return 1;
	return 0;
}

/* @returns how many long options "--NAME" abbreviates. */
static int prefix_count(const char *arg, const struct option *longopts)
{
	int len, n = 0;

	if (arg[0] != '-' || arg[1] != '-' || !longopts)
		return 0;
	len = optlen(arg + 2);
	for (const struct option *o = longopts; len > 0 && o->name; o++)
		n += strncmp(o->name, arg + 2, (size_t)len) == 0;
	return n;
}

int tbx_cli_getopt(const char *cmd, int argc, char **argv,
		   const char *shortopts, const struct option *longopts)
{
	char spec[128];
	const char *arg;
	int c;

	/* A leading ':' makes getopt_long() quiet and tell a missing value
	 * (':') from an unknown option ('?'). */
	snprintf(spec, sizeof(spec), ":%s", shortopts);
	opterr = 0;
	c = getopt_long(argc, argv, spec, longopts, NULL);
	if (c != '?' && c != ':')
		return c;

	/* The option in error is argv[optind - 1], except for an unknown
	 * short option inside a cluster ("-xb"): look at optopt first. */
	arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
	if (c == ':' && is_long_for(arg, optopt, longopts))
		tbx_cli_usage(cmd,
			      "option '%.*s' needs a value "
			      "(see 'tokenbox help %s')",
			      optlen(arg), arg, cmd);
	else if (c == ':')
		tbx_cli_usage(cmd,
			      "option '-%c' needs a value "
			      "(see 'tokenbox help %s')",
			      optopt, cmd);
	else if (optopt && is_long_for(arg, optopt, longopts))
		tbx_cli_usage(cmd,
			      "option '%.*s' takes no value "
			      "(see 'tokenbox help %s')",
			      optlen(arg), arg, cmd);
	else if (optopt)
		tbx_cli_usage(cmd,
			      "unknown option '-%c' (see 'tokenbox help %s')",
			      optopt, cmd);
	else
		tbx_cli_usage(cmd, "%s option '%.*s' (see 'tokenbox help %s')",
			      prefix_count(arg, longopts) > 1 ? "ambiguous"
							      : "unknown",
			      optlen(arg), arg, cmd);
	return '?';
}

/*
 * Stop signals.  The handler sets the flag, wakes tbx_cli_wait_stop()
 * through a self-pipe (whichever thread the signal lands on) and calls the
 * user's function.
 */
volatile sig_atomic_t tbx_cli_stop_signal;
static tbx_cli_stop_fn stop_fn;
static void *stop_opaque;
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
	int saved = errno;

	tbx_cli_stop_signal = sig;
	if (stop_pipe[1] >= 0) {
		ssize_t w = write(stop_pipe[1], "", 1);
		(void)w; /* full pipe: a wake-up is pending anyway */
	}
	if (stop_fn)
		stop_fn(stop_opaque);
	errno = saved;
}

int tbx_cli_on_stop(tbx_cli_stop_fn fn, void *opaque)
{
	struct sigaction sa;

	if (stop_pipe[0] < 0) {
		if (pipe(stop_pipe) != 0)
			return -1;
		for (int i = 0; i < 2; i++) {
			int fl = fcntl(stop_pipe[i], F_GETFL);
			if (fl == -1 ||
			    fcntl(stop_pipe[i], F_SETFL, fl | O_NONBLOCK) ||
			    fcntl(stop_pipe[i], F_SETFD, FD_CLOEXEC))
				return -1;
		}
	}
	stop_fn = fn;
	stop_opaque = opaque;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	/* One handler at a time: SIGINT and SIGTERM block each other. */
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	if (sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL))
		return -1;

	sa.sa_handler = SIG_IGN;
	sa.sa_flags = 0;
	sigemptyset(&sa.sa_mask);
	return sigaction(SIGPIPE, &sa, NULL);
}

/* Empties the self-pipe: one wake-up is enough for any number of
 * signals, and the flag says which. */
static void drain_stop_pipe(void)
{
	char buf[16];

	while (read(stop_pipe[0], buf, sizeof(buf)) > 0)
		;
}

int tbx_cli_wait_stop(void)
{
	struct pollfd pfd = {.fd = stop_pipe[0], .events = POLLIN};
	char buf[16];

	while (!tbx_cli_stop_signal) {
		/* Without tbx_cli_on_stop() (fd -1) this polls the flag. */
		if (poll(&pfd, 1, pfd.fd < 0 ? 100 : -1) > 0) {
			ssize_t r = read(pfd.fd, buf, sizeof(buf));
			(void)r;
		}
	}
	return tbx_cli_stop_signal;
}

int tbx_cli_wait_stop_or_fd(int fd)
{
	struct pollfd pfd[2] = {{.fd = stop_pipe[0], .events = POLLIN},
				{.fd = fd, .events = POLLIN}};

	while (!tbx_cli_stop_signal) {
		/* Without tbx_cli_on_stop() (fd -1, which poll() skips) this
		 * polls the flag. */
		int n = poll(pfd, 2, pfd[0].fd < 0 ? 100 : -1);
		if (n < 0 && errno != EINTR)
			return -1;
		if (n <= 0)
			continue;
		if (pfd[0].revents)
			drain_stop_pipe();
		/* POLLHUP, POLLERR, POLLNVAL too: read() then tells. */
		if (pfd[1].revents && !tbx_cli_stop_signal)
			return 0;
	}
	return tbx_cli_stop_signal;
}
