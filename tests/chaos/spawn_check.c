/*
 * tbx_chaos_spawn_check: a SIGTERM that the harness sends to a process it
 * has just started, before the child has exec'd, must end the child
 * (spawn.c).  Like tbx_chaos, the check handles SIGTERM itself; it holds
 * the child of ch_spawn() between fork and exec, sends SIGTERM, then lets
 * it go on.  The child must end by SIGTERM; before spawn.c, the handler
 * inherited from the harness took the signal in the child, which then
 * ran the program (here `sleep 30`) as if never told to stop.
 *
 * Exit status 0 if it did, 1 if not.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chaos.h"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

int main(void)
{
	char *argv[] = {"/bin/sleep", "30", NULL};
	struct sigaction sa;
	int gate[2], status;
	pid_t pid;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (pipe(gate) != 0) {
		perror("tbx_chaos_spawn_check: pipe");
		return 1;
	}
	pid = ch_spawn(argv, "/dev/null", NULL, NULL, gate[0]);
	if (pid < 0) {
		perror("tbx_chaos_spawn_check: fork");
		return 1;
	}
	close(gate[0]);
	/* The child is held between fork and exec: stop it there. */
	kill(pid, SIGTERM);
	if (write(gate[1], "x", 1) != 1)
		perror("tbx_chaos_spawn_check: write");
	close(gate[1]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			perror("tbx_chaos_spawn_check: waitpid");
			return 1;
		}
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) {
		printf("a SIGTERM sent between fork and exec ended the "
		       "child\n");
		return 0;
	}
	printf("a SIGTERM sent between fork and exec was lost: the child "
	       "ran %s and ended with status 0x%x\n",
	       argv[0], status);
	return 1;
}
