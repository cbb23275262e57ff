/*
 * Publisher internals for the tokenbox command (not API): re-publishing a
 * dead letter (`tokenbox inspect dead-letters replay`), and `tokenbox
 * send`'s own report of refused messages.
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

/**
 * Tells @p pub that its caller reports each refused synthetic duplicate
 * itself, with what only it knows (`tokenbox send`: the input's line
 * number): the publisher then logs a refusal at INFO, not WARN, so that
 * it is reported once.  Counted as before (tbx_publisher_stats()).
 */
void tbx__publisher_caller_reports_refusals(tbx_publisher_t *pub);

#endif
