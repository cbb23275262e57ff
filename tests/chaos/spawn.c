/*
 * How the harness starts a process it may stop with a signal at any time
 * after, even before the child has called exec.
 *
 * tbx_chaos handles SIGTERM and SIGINT itself (on_signal() sets a flag),
 * and a forked child keeps that handler until it execs.  A SIGTERM sent
 * in that window, to a worker that had just been started, ran the
 * harness's handler in the child and was gone: the worker started, never
 * saw the signal, and was SIGKILLed 60 s later as one that "ignored
 * SIGTERM" (seed 3213471274 on Apache Kafka, which spawns a worker and
 * stops it 0.1 s later).  So the signals are blocked across fork(), the
 * child sets them back to their default action, then unblocks them: a
 * signal sent before that is pending and ends the child the default way,
 * and one sent after reaches the program.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chaos.h"

pid_t ch_spawn(char *const argv[], const char *log, char *const env_put[],
	       const char *env_unset, int gate_fd)
{
	sigset_t stops, old;
	pid_t pid;
	int err;

	sigemptyset(&stops);
	sigaddset(&stops, SIGTERM);
	sigaddset(&stops, SIGINT);
	if ((err = pthread_sigmask(SIG_BLOCK, &stops, &old)) != 0) {
		errno = err;
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		struct sigaction sa;
		int fd, null;
		char c;

		/* The test of the window holds the child here. */
		if (gate_fd >= 0)
			while (read(gate_fd, &c, 1) < 0 && errno == EINTR)
				;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = SIG_DFL;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGINT, &sa, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		null = open("/dev/null", O_RDONLY);
		if (null >= 0)
			dup2(null, 0);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		for (size_t i = 0; env_put && env_put[i]; i++)
			putenv(env_put[i]);
		if (env_unset)
			unsetenv(env_unset);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	err = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = err;
	return pid;
}
