/*
 * The handler test kit with handlers registered directly: outcomes of
 * each verdict, retries up to retry.max, the message's headers as the
 * handler sees them, and the kit's errors.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenbox/testkit.h"

typedef struct seen {
	int calls;
	tbx_verdict_t verdict;
	char tenant[32];
} seen_t;

/* Records the call and the "tenant" header, sends one Echo when OK. */
static tbx_verdict_t on_ping(tbx_ctx_t *ctx, const tbx_msg_t *msg, void *opaque)
{
	seen_t *s = opaque;
	const void *v;
	size_t len, plen;
	const void *payload = tbx_msg_payload(msg, &plen);

	s->calls++;
	if (tbx_msg_header(msg, "tenant", &v, &len) == TBX_OK && v &&
	    len < sizeof(s->tenant)) {
		memcpy(s->tenant, v, len);
		s->tenant[len] = '\0';
	}
	if (s->verdict == TBX_VERDICT_OK) {
		tbx_out_t out = {.topic = "echoes",
				 .type = "Echo",
				 .payload = payload,
				 .payload_len = plen};
		if (tbx_ctx_send(ctx, &out) != TBX_OK)
			return TBX_VERDICT_RETRY;
	} else {
		tbx_ctx_set_error(ctx, "told to");
	}
	return s->verdict;
}

static tbx_testkit_t *kit_new(seen_t *s)
{
	char err[512];
	tbx_testkit_t *kit = tbx_testkit_new("pinger", err, sizeof(err));

	cr_assert(kit, "%s", err);
	cr_assert_eq(tbx_testkit_set(kit, "retry.max", "2"), TBX_OK);
	cr_assert_eq(tbx_testkit_register(kit, "pings", "Ping", on_ping, s),
		     TBX_OK, "%s", tbx_testkit_errstr(kit));
	cr_assert_eq(tbx_testkit_topic(kit, "echoes", 1), TBX_OK);
	return kit;
}

static const tbx_header_t tenant = {"tenant", "acme", 4};
static const tbx_out_t ping = {.topic = "pings",
			       .type = "Ping",
			       .payload = "hi",
			       .payload_len = 2,
			       .headers = &tenant,
			       .header_cnt = 1};

Test(testkit, ok_is_processed_and_its_message_listed)
{
	seen_t s = {.verdict = TBX_VERDICT_OK};
	tbx_testkit_t *kit = kit_new(&s);
	tbx_testkit_outcome_t outcome;

	cr_assert_eq(tbx_testkit_handle(kit, &ping, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_expect_eq(outcome, TBX_TESTKIT_PROCESSED);
	cr_expect_eq(s.calls, 1);
	cr_expect_str_eq(s.tenant, "acme");
	cr_assert_eq(tbx_testkit_sent_count(kit), 1);
	cr_expect_str_eq(tbx_testkit_sent(kit, 0)->topic, "echoes");
	cr_expect_str_eq(tbx_testkit_sent(kit, 0)->type, "Echo");
	cr_expect_str_eq(tbx_testkit_sent(kit, 0)->payload, "hi");
	cr_expect_null(tbx_testkit_sent(kit, 1));
	/* The worker runs: its configuration is fixed. */
	cr_expect_eq(tbx_testkit_set(kit, "retry.max", "3"), TBX_ESTATE);
	tbx_testkit_destroy(kit);
}

Test(testkit, a_listed_message_stays_valid_until_the_kit_is_destroyed)
{
	seen_t s = {.verdict = TBX_VERDICT_OK};
	tbx_testkit_t *kit = kit_new(&s);
	const tbx_testkit_sent_t *first;
	tbx_testkit_outcome_t outcome;
	tbx_out_t again = ping;

	cr_assert_eq(tbx_testkit_handle(kit, &ping, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(tbx_testkit_sent_count(kit), 1);
	cr_assert(first = tbx_testkit_sent(kit, 0));
	/* More kit calls: another message, the listing read again. */
	again.payload = "ho";
	cr_assert_eq(tbx_testkit_handle(kit, &again, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(tbx_testkit_sent_count(kit), 2);
	cr_expect_eq(tbx_testkit_sent(kit, 0), first);
	cr_expect_str_eq(first->type, "Echo");
	cr_expect_str_eq(first->payload, "hi");
	cr_expect_str_eq(tbx_testkit_sent(kit, 1)->payload, "ho");
	tbx_testkit_destroy(kit);
}

Test(testkit, reject_and_exhausted_retries_are_dead_lettered)
{
	seen_t s = {.verdict = TBX_VERDICT_REJECT};
	tbx_testkit_t *kit = kit_new(&s);
	tbx_testkit_outcome_t outcome;
	const tbx_testkit_sent_t *dl;

	cr_assert_eq(tbx_testkit_handle(kit, &ping, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_expect_eq(outcome, TBX_TESTKIT_DEAD_LETTERED);
	cr_expect_eq(s.calls, 1);

	/* RETRY: the first attempt and retry.max (2) more. */
	s.calls = 0;
	s.verdict = TBX_VERDICT_RETRY;
	cr_assert_eq(tbx_testkit_handle(kit, &ping, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_expect_eq(outcome, TBX_TESTKIT_DEAD_LETTERED);
	cr_expect_eq(s.calls, 3);
	cr_assert_eq(tbx_testkit_sent_count(kit), 2);
	for (size_t i = 0; i < 2; i++) {
		dl = tbx_testkit_sent(kit, i);
		cr_expect_str_eq(dl->topic, "pings.dlq");
		cr_expect(dl->dlq_error && strstr(dl->dlq_error, "told to"),
			  "%s", dl->dlq_error ? dl->dlq_error : "(none)");
	}
	tbx_testkit_destroy(kit);
}

Test(testkit, a_message_without_a_handler_is_dead_lettered)
{
	seen_t s = {.verdict = TBX_VERDICT_OK};
	tbx_testkit_t *kit = kit_new(&s);
	tbx_testkit_outcome_t outcome;
	tbx_out_t other = ping;

	other.type = "Pong";
	cr_assert_eq(tbx_testkit_handle(kit, &other, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_expect_eq(outcome, TBX_TESTKIT_DEAD_LETTERED);
	cr_expect_eq(s.calls, 0);
	tbx_testkit_destroy(kit);
}

Test(testkit, misuse_is_refused_with_a_reason)
{
	seen_t s = {.verdict = TBX_VERDICT_OK};
	tbx_testkit_t *kit = kit_new(&s);
	char err[256];

	cr_expect_null(tbx_testkit_new("", err, sizeof(err)));
	cr_expect_eq(tbx_testkit_set(kit, "no.such.key", "1"), TBX_ECONF);
	cr_expect(strstr(tbx_testkit_errstr(kit), "no.such.key"), "%s",
		  tbx_testkit_errstr(kit));
	cr_expect_eq(tbx_testkit_redeliver(kit, NULL), TBX_ESTATE);
	cr_expect_eq(tbx_testkit_crash_at(kit, "A.*"), TBX_EINVAL);
	cr_expect_eq(tbx_testkit_topic(kit, "x", 0), TBX_EINVAL);
	tbx_testkit_destroy(kit);
}

/* The spans of one message: its process span, a send span per message it
 * produced, parent to child, as an exporter would have sent them. */
Test(testkit, the_spans_of_a_message_are_listed)
{
	seen_t s = {.verdict = TBX_VERDICT_OK};
	tbx_testkit_t *kit = kit_new(&s);
	tbx_testkit_outcome_t outcome;
	const tbx_testkit_span_t *proc, *send;
	const tbx_testkit_event_t *ev;
	const tbx_testkit_sent_t *echo;

	cr_assert_eq(tbx_testkit_handle(kit, &ping, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(outcome, TBX_TESTKIT_PROCESSED);
	proc = tbx_testkit_span_named(kit, "process pings");
	send = tbx_testkit_span_named(kit, "send echoes");
	cr_assert(proc && send, "%zu spans", tbx_testkit_span_count(kit));
	cr_expect_eq(proc->kind, TBX_TESTKIT_SPAN_CONSUMER);
	cr_expect_str_eq(proc->parent_id, "", "no traceparent: a new trace");
	cr_expect_eq(proc->status, TBX_TESTKIT_STATUS_OK);
	cr_expect(tbx_testkit_span_event(proc, "processed"));
	cr_expect_str_eq(tbx_testkit_span_attr(proc, "messaging.system"),
			 "kafka");
	cr_expect_str_eq(
	    tbx_testkit_span_attr(proc, "messaging.destination.name"), "pings");
	cr_expect_str_eq(
	    tbx_testkit_span_attr(proc, "messaging.consumer.group.name"),
	    "pinger");
	cr_expect_str_eq(tbx_testkit_span_attr(proc, "tokenbox.type"), "Ping");
	cr_expect_str_eq(tbx_testkit_span_attr(proc, "tokenbox.attempt"), "1");
	cr_expect_eq(send->kind, TBX_TESTKIT_SPAN_PRODUCER);
	cr_expect_str_eq(send->trace_id, proc->trace_id);
	cr_expect_str_eq(send->parent_id, proc->span_id);
	cr_expect_str_eq(tbx_testkit_span_attr(send, "messaging.kafka.offset"),
			 "0");
	/* The message carries its send span's context. */
	cr_assert_eq(tbx_testkit_sent_count(kit), 1);
	echo = tbx_testkit_sent(kit, 0);
	cr_assert(echo->traceparent);
	cr_expect(strstr(echo->traceparent, send->span_id), "%s",
		  echo->traceparent);
	cr_expect(strstr(echo->traceparent, send->trace_id), "%s",
		  echo->traceparent);

	/* The same message again: its span says why it was dropped. */
	cr_assert_eq(tbx_testkit_redeliver(kit, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(outcome, TBX_TESTKIT_DUPLICATE);
	cr_expect_null(tbx_testkit_span_named(kit, "send echoes"),
		       "a dropped copy sends nothing");
	proc = tbx_testkit_span_named(kit, "process pings");
	cr_assert(proc);
	ev = tbx_testkit_span_event(proc, "duplicate dropped");
	cr_assert(ev);
	cr_expect(tbx_testkit_event_attr(ev, "tokenbox.reason"));
	cr_expect_null(tbx_testkit_span(kit, tbx_testkit_span_count(kit)));
	tbx_testkit_destroy(kit);
}

Test(testkit, a_dead_letters_span_says_why)
{
	seen_t s = {.verdict = TBX_VERDICT_REJECT};
	tbx_testkit_t *kit = kit_new(&s);
	tbx_testkit_outcome_t outcome;
	const tbx_testkit_span_t *proc, *dl;
	const char *why;

	cr_assert_eq(tbx_testkit_handle(kit, &ping, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	cr_assert_eq(outcome, TBX_TESTKIT_DEAD_LETTERED);
	proc = tbx_testkit_span_named(kit, "process pings");
	dl = tbx_testkit_span_named(kit, "send pings.dlq");
	cr_assert(proc && dl);
	cr_expect_eq(proc->status, TBX_TESTKIT_STATUS_ERROR);
	cr_expect(proc->status_message &&
		      strstr(proc->status_message, "told to"),
		  "%s", proc->status_message);
	why = tbx_testkit_event_attr(
	    tbx_testkit_span_event(proc, "dead-lettered"), "tokenbox.reason");
	cr_expect(why && strstr(why, "told to"), "%s", why ? why : "(none)");
	cr_expect_str_eq(dl->parent_id, proc->span_id);
	tbx_testkit_destroy(kit);
}

/* The batch span: the phases' times, linked to the records' spans. */
Test(testkit, the_batch_span_times_the_phases_and_links_its_records)
{
	static const char *const phases[] = {"g", "a", "b", "c", "d", "e", "f"};
	seen_t s = {.verdict = TBX_VERDICT_OK};
	tbx_testkit_t *kit = kit_new(&s);
	tbx_testkit_outcome_t outcome;
	const tbx_testkit_span_t *proc, *batch;
	char key[64], ev[2];
	int linked = 0;

	cr_assert_eq(tbx_testkit_handle(kit, &ping, &outcome), TBX_OK, "%s",
		     tbx_testkit_errstr(kit));
	proc = tbx_testkit_span_named(kit, "process pings");
	batch = tbx_testkit_span_named(kit, "process batch");
	cr_assert(proc && batch);
	cr_expect_eq(batch->kind, TBX_TESTKIT_SPAN_CONSUMER);
	cr_expect_str_eq(batch->parent_id, "");
	cr_expect_str_neq(batch->trace_id, proc->trace_id,
			  "a trace of its own, linked");
	cr_expect_str_eq(
	    tbx_testkit_span_attr(batch, "messaging.batch.message_count"), "1");
	for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
		const char *v;

		snprintf(key, sizeof(key), "tokenbox.phase.%s.duration_ns",
			 phases[i]);
		v = tbx_testkit_span_attr(batch, key);
		cr_expect(v && atoll(v) >= 0, "no %s", key);
		ev[0] = (char)(phases[i][0] - 'a' + 'A');
		ev[1] = '\0';
		cr_expect(
		    tbx_testkit_event_attr(tbx_testkit_span_event(batch, ev),
					   "tokenbox.phase.duration_ns"),
		    "no event %s", ev);
	}
	for (size_t i = 0; i < batch->link_count; i++)
		linked +=
		    strcmp(batch->links[i].trace_id, proc->trace_id) == 0 &&
		    strcmp(batch->links[i].span_id, proc->span_id) == 0;
	cr_expect_eq(linked, 1, "the record's process span is not linked");
	tbx_testkit_destroy(kit);
}
