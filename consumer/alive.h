/*
 * Tokens seen alive: a process-wide memory of the tokens the workers of
 * this process found in their token store (step 2 of A), so that a
 * record dropped later for a missing token can be told apart.  Its token
 * was seen alive, so it was consumed: a proven duplicate (a redelivery,
 * a re-send, a copy).  A token never seen alive may never have existed
 * in this store (a wrong token store, tokens deleted or lost): only
 * those records count toward the duplicate-share warning (protocol.c).
 *
 * The memory is bounded (TBX__ALIVE_SLOTS fingerprints, direct-mapped:
 * a newer token may push out an older one) and lost with the process; a
 * token it forgot counts as never seen, as before it existed.  Keyed by
 * token store id, group and token, so the workers of several groups and
 * stores in one process, and a worker recreated in the same process,
 * share it without mixing.
 *
 * @locality any thread (a mutex).
 */
#ifndef TBX_CONSUMER_ALIVE_H
#define TBX_CONSUMER_ALIVE_H

/** Fingerprints held: 8 bytes each, in the process's zeroed data. */
#define TBX__ALIVE_SLOTS (1u << 17)

/** Notes that @p token of @p group was found in token store @p store_id. */
void tbx__alive_note(const char *store_id, const char *group,
		     const char *token);
/** 1 when tbx__alive_note() was called for these, and not forgotten. */
int tbx__alive_seen(const char *store_id, const char *group, const char *token);

#endif
