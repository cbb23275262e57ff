/*
 * Publisher internals for the tokenbox command (not API): re-publishing a
 * dead letter (`tokenbox inspect dead-letters replay`).
 *
 * @locality the publisher's thread.
 */
#ifndef TBX_CONSUMER_PUBLISH_H
#define TBX_CONSUMER_PUBLISH_H

#include "tokenbox/tokenbox.h"

/**
 * Like tbx_publish_id(), for a dead letter's replay: the record carries
 * the reserved header tbx-replay-of = @p replay_of (the original message's
 * id), and its token is minted only for group @p grp, the group that
 * dead-lettered it: other groups subscribed to the topic, which handled
 * the original, drop the replay as a duplicate.
 * @returns as tbx_publish_id(); TBX_EINVAL for an empty @p replay_of or
 * @p grp.
 */
int tbx__publish_replay(tbx_publisher_t *pub, const tbx_out_t *out,
			const char *caller_id, const char *replay_of,
			const char *grp);

#endif
