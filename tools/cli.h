/*
 * Shared helpers of the `tokenbox` subcommands: the entry points, exit
 * statuses, strict option parsing with one-line errors, and stop signals.
 *
 * Every message names the command and, for a bad option, the option and
 * the value: "tokenbox mock-cluster: --brokers: '0' is out of range (1..16)".
 * Errors go to stderr on one line; help goes to stdout.
 *
 * Locality: the main thread, except where said otherwise.
 */
#ifndef TBX_TOOLS_CLI_H
#define TBX_TOOLS_CLI_H

#include <getopt.h>
#include <signal.h>

/* Exit statuses shared by every command. */
#define TBX_EXIT_OK    0 /* done, or stopped by SIGINT/SIGTERM */
#define TBX_EXIT_FAIL  1 /* the command could not do its work */
#define TBX_EXIT_USAGE 2 /* bad command line; nothing was done */
/* `tokenbox worker`: a fatal Kafka client error; restarting the process
 * is the cure (EX_TEMPFAIL of sysexits.h). */
#define TBX_EXIT_RESTART 75

/*
 * Command entry points.  argv[0] is the command's name ("mock-cluster");
 * options follow.  Each prints its help on stdout and returns TBX_EXIT_OK
 * for -h/--help, and returns a TBX_EXIT_* status otherwise.
 */
int tbx_cmd_mock_cluster(int argc, char **argv);
int tbx_cmd_send(int argc, char **argv);
int tbx_cmd_demo(int argc, char **argv);
int tbx_cmd_worker(int argc, char **argv);
int tbx_cmd_inspect(int argc, char **argv);
int tbx_cmd_init(int argc, char **argv);

/**
 * Prints "tokenbox CMD: <message>" and a newline to stderr.
 * @returns TBX_EXIT_USAGE, so that a caller can `return tbx_cli_usage(...)`.
 */
int tbx_cli_usage(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/**
 * Same line as tbx_cli_usage(), for failures at run time.
 * @returns TBX_EXIT_FAIL.
 */
int tbx_cli_fail(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/**
 * Same line again, for news that is neither a failure nor a usage error
 * (what a long-running command did).
 */
void tbx_cli_note(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Writes the line of tbx_cli_usage()/_fail()/_note() for @p cmd. */
typedef void (*tbx_cli_report_fn)(const char *cmd, const char *msg);
/**
 * Makes those lines go to @p fn instead of stderr (NULL: stderr again),
 * for a command whose lines go through a logger.
 */
void tbx_cli_set_reporter(tbx_cli_report_fn fn);

/**
 * The checks of tbx_cli_parse_int() without the message, for input that
 * is not a command line.
 * @returns 0 with *out set, -1 if @p arg is not an integer, -2 if it is
 * out of range (*out unchanged).
 */
int tbx_cli_to_int(const char *arg, long long min, long long max,
		   long long *out);

/**
 * Parses @p arg, the value of option @p opt, as a decimal integer in
 * [@p min, @p max]: no sign other than a leading '-', no spaces, no
 * trailing characters, no overflow.
 * @returns 0 with *out set, or TBX_EXIT_USAGE after printing e.g.
 * "tokenbox CMD: --brokers: 'x' is not an integer" (*out unchanged).
 */
int tbx_cli_parse_int(const char *cmd, const char *opt, const char *arg,
		      long long min, long long max, long long *out);

/**
 * getopt_long() with the errors of every command worded alike.  Call it in
 * a loop like getopt_long() (GNU rules: operands and options may mix,
 * "--" ends the options); @p shortopts must not begin with ':', '+' or '-'.
 * An unknown option or a missing value is reported through tbx_cli_usage()
 * ("unknown option '--frob'", "option '--brokers' needs a value", each
 * with a hint to `tokenbox help CMD`), and '?' is returned: the caller
 * then returns TBX_EXIT_USAGE.
 * Not reentrant (getopt's state is global): one command per process.
 */
int tbx_cli_getopt(const char *cmd, int argc, char **argv,
		   const char *shortopts, const struct option *longopts);

/**
 * Stop signals.
 *
 * tbx_cli_stop_signal is 0 until SIGINT or SIGTERM arrives, then that
 * signal's number.  Written only by the handler.
 */
extern volatile sig_atomic_t tbx_cli_stop_signal;

/** Called from the signal handler: must be async-signal-safe (set a flag,
 *  write(2) to a pipe, tbx_worker_stop()). */
typedef void (*tbx_cli_stop_fn)(void *opaque);

/**
 * Installs SIGINT and SIGTERM handlers that set tbx_cli_stop_signal and
 * then call @p fn(@p opaque) if @p fn is not NULL.  SA_RESTART is set, so
 * system calls are not interrupted.  Also ignores SIGPIPE, so that a
 * closed stdout or socket is an error return rather than death.
 * @returns 0, or -1 with errno set.
 */
int tbx_cli_on_stop(tbx_cli_stop_fn fn, void *opaque);

/**
 * Sleeps until a stop signal has arrived (at once if one already has), with
 * no window in which one could be missed.  Needs tbx_cli_on_stop() first.
 * @returns the signal's number.
 */
int tbx_cli_wait_stop(void);

/**
 * Sleeps until a stop signal has arrived or @p fd is ready to read (or at
 * end of file, hung up, in error), whichever comes first, with no window
 * in which a signal could be missed; a signal wins when both are there.
 * Needs tbx_cli_on_stop() first.  Reads nothing from @p fd.
 * @returns the signal's number, 0 when @p fd is ready, or -1 with errno
 * set if poll(2) fails.
 */
int tbx_cli_wait_stop_or_fd(int fd);

#endif
