/*
 * tbx_testkit_time: how long the handler test kit (testkit/testkit.c)
 * takes per message, as a handler's unit test sees it: the first message
 * (the kit's worker starts), the next ones, a redelivery, a sent-message
 * listing, and a crash at a point with its recovery.  It prints the
 * figures; it checks nothing (the tests check outcomes, never timing).
 *
 *   tbx_testkit_time [MESSAGES [CRASHES]]   (default 10 and 3)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenbox/testkit.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static tbx_verdict_t on_ping(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque)
{
	size_t len;
	const void *payload = tbx_msg_payload(msg, &len);
	tbx_out_t out = {.topic = "echoes",
			 .type = "Echo",
			 .payload = payload,
			 .payload_len = len};

	(void)opaque;
	return tbx_ctx_send(ctx, &out) ? TBX_VERDICT_RETRY : TBX_VERDICT_OK;
}

static int fail(tbx_testkit_t *kit, const char *what)
{
	fprintf(stderr, "tbx_testkit_time: %s: %s\n", what,
		tbx_testkit_errstr(kit));
	tbx_testkit_destroy(kit);
	return 1;
}

int main(int argc, char **argv)
{
	static const char *const points[] = {"A.committed", "C.delivered",
					     "E.deleted"};
	int msgs = argc > 1 ? atoi(argv[1]) : 10;
	int crashes = argc > 2 ? atoi(argv[2]) : 3;
	tbx_out_t ping = {.topic = "pings",
			  .type = "Ping",
			  .payload = "hi",
			  .payload_len = 2};
	tbx_testkit_outcome_t outcome;
	char err[512];
	double t0 = now_s(), t, first, rest = 0, crash = 0;
	tbx_testkit_t *kit = tbx_testkit_new("timer", err, sizeof(err));

	if (!kit) {
		fprintf(stderr, "tbx_testkit_time: %s\n", err);
		return 1;
	}
	if (tbx_testkit_register(kit, "pings", "Ping", on_ping, NULL) ||
	    tbx_testkit_topic(kit, "echoes", 1))
		return fail(kit, "set-up");
	if (tbx_testkit_handle(kit, &ping, &outcome))
		return fail(kit, "first message");
	first = now_s() - t0;
	for (int i = 1; i < msgs; i++) {
		t = now_s();
		if (tbx_testkit_handle(kit, &ping, &outcome))
			return fail(kit, "message");
		rest += now_s() - t;
	}
	t = now_s();
	if (tbx_testkit_redeliver(kit, &outcome))
		return fail(kit, "redelivery");
	double redeliver = now_s() - t;
	t = now_s();
	size_t sent = tbx_testkit_sent_count(kit);
	double listing = now_s() - t;
	for (int i = 0; i < crashes; i++) {
		t = now_s();
		if (tbx_testkit_crash_at(kit, points[i % 3]) ||
		    tbx_testkit_handle(kit, &ping, &outcome))
			return fail(kit, points[i % 3]);
		crash += now_s() - t;
	}
	t = now_s();
	tbx_testkit_destroy(kit);
	printf("first message (kit and worker start) %8.3f s\n", first);
	if (msgs > 1)
		printf("each further message                 %8.3f s (%d)\n",
		       rest / (msgs - 1), msgs - 1);
	printf("redelivery                           %8.3f s\n", redeliver);
	printf("sent messages listed                 %8.3f s (%zu)\n", listing,
	       sent);
	if (crashes)
		printf("each crash point and its recovery    %8.3f s (%d)\n",
		       crash / crashes, crashes);
	printf("destroy                              %8.3f s\n", now_s() - t);
	printf("total                                %8.3f s\n", now_s() - t0);
	return 0;
}
