#ifndef TBX_TESTS_HOP_H
#define TBX_TESTS_HOP_H

#include "tokenbox/tokenbox.h"

/* A pipeline hop for tests: the handler inserts (msg_id, key, payload,
 * topic, partition, offset, attempt) into @p table of the service store
 * and, when @p next_topic is set, sends one message there with the same
 * payload.  Payloads listed in @p reject are rejected; a payload listed in
 * @p retry asks to retry until its attempt number exceeds @p retry_times. */
typedef struct tt_hop {
	const char *table;
	const char *next_topic;
	const char *next_type;
	const char *reject; /**< payload to REJECT, or NULL */
	const char *retry;  /**< payload to RETRY, or NULL ("*": every one) */
	int retry_times;
	const char *die_on; /**< payloads whose handler kills the process,
			       comma-separated */
} tt_hop_t;

/** Creates the hop's table in the store file. */
void tt_hop_table(const char *store, const char *table);
tbx_verdict_t tt_hop_handle(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque);

#endif
