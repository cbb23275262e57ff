/*
 * Children a test starts die with the test.  Criterion ends a test at its
 * first failed assertion, before the test's own clean-up: a worker or a
 * mock cluster it started would live on, holding ctest's output pipe, and
 * ctest would wait for the test's whole TIMEOUT instead of reporting the
 * failure.
 */
#ifndef TT_ORPHAN_H
#define TT_ORPHAN_H

#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

/** In a child just forked from @p parent: SIGKILL when the parent ends
 *  (or has already ended). */
static inline void tt_child_dies_with(pid_t parent)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
		_exit(127);
}

#endif
