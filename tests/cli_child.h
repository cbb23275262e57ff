/*
 * Running the `tokenbox` command as a child process in tests.
 *
 * Header-only (static inline, so that a test using part of it does not
 * warn) and self-contained: the command is $TBX_BIN_DIR/tokenbox, and
 * waits stretch with TBX_TIME_FACTOR like the rest of the suite.
 */
#ifndef TBX_TESTS_CLI_CHILD_H
#define TBX_TESTS_CLI_CHILD_H

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "orphan.h"

/** Longest a cc_run() child may take, in ms before the time factor. */
#define CC_RUN_TIMEOUT_MS 60000

/** What a finished child left. */
typedef struct cc_result {
	int status; /**< wait status; -1 if it was killed at the timeout */
	char *out;  /**< standard output, NUL-terminated (malloc'ed) */
	char *err;  /**< standard error, NUL-terminated (malloc'ed) */
	size_t out_len, err_len;
} cc_result_t;

/** TBX_TIME_FACTOR (3 under sanitizers), at least 1. */
static inline int cc_time_factor(void)
{
	const char *env = getenv("TBX_TIME_FACTOR");
	int f = env ? atoi(env) : 1;

	return f > 0 ? f : 1;
}

/** Monotonic clock in ms. */
static inline long long cc_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/** "$TBX_BIN_DIR/tokenbox" (static storage). */
static inline const char *cc_bin(void)
{
	static char path[4096];
	const char *dir = getenv("TBX_BIN_DIR");

	cr_assert(dir && *dir, "TBX_BIN_DIR is not set (run through ctest)");
	snprintf(path, sizeof(path), "%s/tokenbox", dir);
	return path;
}

/** 1 when wait status @p status is a normal exit with @p code. */
static inline int cc_exited(int status, int code)
{
	return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code;
}

/** Lines in @p s (a last line without '\n' counts). */
static inline int cc_lines(const char *s)
{
	int n = 0;

	for (const char *p = s; *p; p++)
		if (*p == '\n' || p[1] == '\0')
			n++;
	return n;
}

static inline void cc_append(char **buf, size_t *len, const char *p, size_t n)
{
	char *grown = realloc(*buf, *len + n + 1);

	cr_assert(grown, "out of memory");
	if (n)
		memcpy(grown + *len, p, n);
	*len += n;
	grown[*len] = '\0';
	*buf = grown;
}

/**
 * Starts tokenbox with @p args (NULL-terminated, args[0] the command; may
 * be empty) on fds @p in, @p out, @p err (-1: /dev/null for input, ours
 * for output).  Every fd in @p close_fds is closed in the child.
 */
static inline pid_t cc_fork(const char *const args[], int in, int out, int err,
			    const int *close_fds, int close_cnt)
{
	const char *argv[64];
	size_t n = 0;
	pid_t pid, parent;

	argv[n++] = cc_bin();
	for (size_t i = 0; args[i] && n < 63; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	parent = getpid();
	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		tt_child_dies_with(parent);
		int devnull = in < 0 ? open("/dev/null", O_RDONLY) : in;
		if (dup2(devnull, 0) < 0 || (out >= 0 && dup2(out, 1) < 0) ||
		    (err >= 0 && dup2(err, 2) < 0))
			_exit(127);
		for (int i = 0; i < close_cnt; i++)
			if (close_fds[i] > 2)
				close(close_fds[i]);
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return pid;
}

/**
 * Waits up to @p timeout_ms for @p pid.
 * @returns the wait status, or -1 on timeout (the child is then killed).
 */
static inline int cc_wait(pid_t pid, int timeout_ms)
{
	long long deadline = cc_now_ms() + timeout_ms;
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return status;
		if (r < 0 && errno != EINTR)
			return -1;
		if (cc_now_ms() >= deadline)
			break;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

/**
 * Starts tokenbox with @p args, standard input /dev/null, standard output
 * on a pipe (*out_fd, the caller closes it) and standard error on a pipe
 * too when @p err_fd is not NULL (else inherited).
 */
static inline pid_t cc_spawn(const char *const args[], int *out_fd, int *err_fd)
{
	int out_p[2], err_p[2] = {-1, -1};
	pid_t pid;

	cr_assert(pipe(out_p) == 0, "pipe: %s", strerror(errno));
	if (err_fd)
		cr_assert(pipe(err_p) == 0, "pipe: %s", strerror(errno));
	int fds[] = {out_p[0], out_p[1], err_p[0], err_p[1]};
	pid = cc_fork(args, -1, out_p[1], err_p[1], fds, 4);
	close(out_p[1]);
	*out_fd = out_p[0];
	if (err_fd) {
		close(err_p[1]);
		*err_fd = err_p[0];
	}
	return pid;
}

/**
 * Reads one line from @p fd within @p timeout_ms.
 * @returns it without its '\n' (malloc'ed), or NULL at EOF or timeout.
 */
static inline char *cc_read_line(int fd, int timeout_ms)
{
	long long deadline = cc_now_ms() + timeout_ms;
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	char *line = NULL;
	size_t len = 0;

	cc_append(&line, &len, "", 0);
	while (cc_now_ms() < deadline) {
		char c;
		ssize_t r;
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		r = read(fd, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r != 1)
			break;
		if (c == '\n')
			return line;
		cc_append(&line, &len, &c, 1);
	}
	free(line);
	return NULL;
}

/**
 * Runs tokenbox with @p args until it exits, feeding it @p in (@p in_len
 * bytes; NULL: /dev/null) on standard input and capturing its standard
 * output and error; killed after @p timeout_ms (times the time factor).
 */
static inline cc_result_t cc_run_with(const char *const args[], const void *in,
				      size_t in_len, int timeout_ms)
{
	cc_result_t res = {0};
	long long deadline =
	    cc_now_ms() + (long long)timeout_ms * cc_time_factor();
	int out_p[2], err_p[2], in_p[2] = {-1, -1};
	size_t written = 0;
	char buf[65536];
	pid_t pid;

	/* The child may exit before it read all its input. */
	signal(SIGPIPE, SIG_IGN);
	cr_assert(pipe(out_p) == 0 && pipe(err_p) == 0, "pipe: %s",
		  strerror(errno));
	if (in)
		cr_assert(pipe(in_p) == 0, "pipe: %s", strerror(errno));
	int all[] = {out_p[0], out_p[1], err_p[0], err_p[1], in_p[0], in_p[1]};
	pid = cc_fork(args, in_p[0], out_p[1], err_p[1], all, 6);
	close(out_p[1]);
	close(err_p[1]);
	if (in) {
		close(in_p[0]);
		fcntl(in_p[1], F_SETFL, fcntl(in_p[1], F_GETFL) | O_NONBLOCK);
		if (in_len == 0) {
			close(in_p[1]);
			in_p[1] = -1;
		}
	}
	struct pollfd fds[3] = {{.fd = out_p[0], .events = POLLIN},
				{.fd = err_p[0], .events = POLLIN},
				{.fd = in_p[1], .events = POLLOUT}};

	cc_append(&res.out, &res.out_len, "", 0);
	cc_append(&res.err, &res.err_len, "", 0);
	while ((fds[0].fd >= 0 || fds[1].fd >= 0) && cc_now_ms() < deadline) {
		if (poll(fds, 3, 100) <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			ssize_t n;
			if (fds[i].fd < 0 || !fds[i].revents)
				continue;
			n = read(fds[i].fd, buf, sizeof(buf));
			if (n > 0) {
				if (i == 0)
					cc_append(&res.out, &res.out_len, buf,
						  (size_t)n);
				else
					cc_append(&res.err, &res.err_len, buf,
						  (size_t)n);
			} else if (n == 0 || errno != EINTR) {
				close(fds[i].fd);
				fds[i].fd = -1;
			}
		}
		if (fds[2].fd >= 0 && fds[2].revents) {
			ssize_t n = write(fds[2].fd, (const char *)in + written,
					  in_len - written);
			if (n > 0)
				written += (size_t)n;
			if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
			    written == in_len) {
				close(fds[2].fd);
				fds[2].fd = -1;
			}
		}
	}
	for (int i = 0; i < 3; i++)
		if (fds[i].fd >= 0)
			close(fds[i].fd);
	res.status = cc_wait(
	    pid, (int)(deadline > cc_now_ms() ? deadline - cc_now_ms() : 0));
	return res;
}

/**
 * Runs tokenbox with @p args (standard input /dev/null) until it exits,
 * capturing its standard output and error; killed after
 * CC_RUN_TIMEOUT_MS (times the time factor).
 */
static inline cc_result_t cc_run(const char *const args[])
{
	return cc_run_with(args, NULL, 0, CC_RUN_TIMEOUT_MS);
}

static inline void cc_result_free(cc_result_t *res)
{
	free(res->out);
	free(res->err);
	res->out = res->err = NULL;
}

#endif
