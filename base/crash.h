/*
 * Crash points: where tests and the chaos harness kill the process.
 */
#ifndef TBX_BASE_CRASH_H
#define TBX_BASE_CRASH_H

/*
 * TBX_CRASH_AT=<rule>[,<rule>...] arms them; a rule is <name>[:<n>] (the
 * n-th passage, default the first) or <name>@<p> (each passage with
 * probability p); <name> may end in '*' to match a prefix, or be "*".  A
 * matching passage kills the process with SIGKILL, as a power cut would.
 * TBX_CRASH_SEED seeds the draws.  Unset: one call and a load.
 */
void tbx__crashpoint(const char *name);
/** Reads TBX_CRASH_AT now (workers and publishers do, when created), so
 *  that a malformed value stops the process at once. */
void tbx__crashpoints_arm(void);
/** Forgets the rules and reads TBX_CRASH_AT again: for a process forked
 *  after they were read (the handler test kit). */
void tbx__crashpoints_rearm(void);

#endif
