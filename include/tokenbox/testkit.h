/*
 * tokenbox test kit — unit tests for handlers, without a Kafka broker.
 *
 * A kit is a temporary directory with a service store and a token store,
 * librdkafka's mock Kafka cluster in the test's own process, and a worker
 * of one consumer group whose handlers the test registers (or a plugin's
 * init registers).  tbx_testkit_handle() publishes one message with a
 * token, as a sender would, and runs the worker until the message is
 * finished; the test then looks at the service store (the handler's
 * tables) and at the messages the handler sent.  tbx_testkit_crash_at()
 * makes the next message kill the worker at one of the protocol's crash
 * points, in a child process, and recover in a new worker, as a restart
 * would: the test then checks that the message took effect once.
 * tbx_testkit_span() lists the OpenTelemetry spans the worker recorded
 * for the message (its process span, the send spans, the batch span).
 *
 * The kit's worker is assigned its partitions directly, without joining
 * its consumer group (a group's join costs the mock cluster's waits):
 * a message takes tens of milliseconds, the first one and a crash point
 * a second or two.
 *
 *   tbx_testkit_t *kit = tbx_testkit_new("billing", err, sizeof(err));
 *   tbx_testkit_register(kit, "orders", "OrderPlaced", on_order, NULL);
 *   tbx_testkit_topic(kit, "payments", 1);
 *   tbx_out_t in = {.topic = "orders", .type = "OrderPlaced",
 *                   .payload = "{\"order\":1}", .payload_len = 11};
 *   tbx_testkit_handle(kit, &in, &outcome);   // TBX_TESTKIT_PROCESSED
 *   tbx_testkit_sent(kit, 0)->type;           // "PaymentRequested"
 *   tbx_testkit_destroy(kit);
 *
 * Link tokenbox::testkit (CMake, find_package(tokenbox)): a static
 * library that brings the static tokenbox library with it.  A test that
 * loads a plugin with dlopen() must export those symbols to it
 * (ENABLE_EXPORTS).  docs/handlers.md shows a whole test.
 *
 * Conventions as in tokenbox.h: TBX_OK or a tbx_err_t code, the reason in
 * tbx_testkit_errstr().  One kit per test; a kit is used by one thread.
 */
#ifndef TOKENBOX_TESTKIT_H
#define TOKENBOX_TESTKIT_H

#include "tokenbox.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tbx_testkit tbx_testkit_t;

/** How a message ended. */
typedef enum tbx_testkit_outcome {
	/** The handler returned OK and its transaction committed (or, after
	 *  a crash, recovery finished the message). */
	TBX_TESTKIT_PROCESSED = 0,
	/** Dropped: its token was gone, it had been handled already. */
	TBX_TESTKIT_DUPLICATE = 1,
	/** Dead-lettered: REJECT, RETRY until retry.max, or no handler. */
	TBX_TESTKIT_DEAD_LETTERED = 2
} tbx_testkit_outcome_t;

/** A message the worker produced: what a handler sent (tbx_ctx_send)
 *  or a dead letter.  Strings are NUL-terminated copies (key and payload
 *  too); NULL when absent. */
typedef struct tbx_testkit_sent {
	const char *topic;
	int32_t partition;
	const char *type;  /**< tbx-type */
	const char *cause; /**< tbx-cause: the id of the message handled */
	const char *key;
	size_t key_len;
	const char *payload;
	size_t payload_len;
	const char *dlq_error; /**< tbx-dlq-error of a dead letter */
	/** Its traceparent header: the context of the send span that
	 *  produced it (tbx_testkit_span()). */
	const char *traceparent;
} tbx_testkit_sent_t;

/** Span kinds and status codes, numbered as OpenTelemetry's OTLP. */
typedef enum tbx_testkit_span_kind {
	TBX_TESTKIT_SPAN_INTERNAL = 1,
	TBX_TESTKIT_SPAN_PRODUCER = 4,
	TBX_TESTKIT_SPAN_CONSUMER = 5
} tbx_testkit_span_kind_t;

typedef enum tbx_testkit_span_status {
	TBX_TESTKIT_STATUS_UNSET = 0,
	TBX_TESTKIT_STATUS_OK = 1,
	TBX_TESTKIT_STATUS_ERROR = 2
} tbx_testkit_span_status_t;

/** An attribute: its value as text (a string as it is, an integer in
 *  decimal, a boolean "true" or "false"). */
typedef struct tbx_testkit_attr {
	const char *key;
	const char *value;
} tbx_testkit_attr_t;

typedef struct tbx_testkit_event {
	const char *name;
	const tbx_testkit_attr_t *attrs;
	size_t attr_count;
} tbx_testkit_event_t;

/** A link to another span (the batch span's to its records'). */
typedef struct tbx_testkit_link {
	char trace_id[33]; /**< lower-case hex */
	char span_id[17];
} tbx_testkit_link_t;

/** A span the kit's worker recorded, as an exporter would have sent it
 *  to a collector (docs/tracing.md lists them and their attributes). */
typedef struct tbx_testkit_span {
	const char *name; /**< "process orders", "send payments", ... */
	tbx_testkit_span_kind_t kind;
	char trace_id[33];  /**< lower-case hex */
	char span_id[17];   /**< lower-case hex */
	char parent_id[17]; /**< "" for a root span */
	tbx_testkit_span_status_t status;
	const char *status_message; /**< an ERROR's reason, else NULL */
	const tbx_testkit_attr_t *attrs;
	size_t attr_count;
	const tbx_testkit_event_t *events;
	size_t event_count;
	const tbx_testkit_link_t *links;
	size_t link_count;
} tbx_testkit_span_t;

/**
 * Creates a kit for consumer group @p group: a temporary directory (under
 * TMPDIR), the stores and a mock cluster.  The worker is created at the
 * first tbx_testkit_handle().
 * @returns the kit, or NULL with @p errstr set.
 */
tbx_testkit_t *tbx_testkit_new(const char *group, char *errstr,
			       size_t errstr_size);
/** Destroys the worker, the cluster, and removes the directory. */
void tbx_testkit_destroy(tbx_testkit_t *kit);
/** @returns the text of the last error, "" if none. */
const char *tbx_testkit_errstr(const tbx_testkit_t *kit);

/** Sets a configuration key of the worker (docs/configuration.md), before
 *  the first tbx_testkit_handle().  The kit's defaults: short retry
 *  backoffs, log.level=warning. */
int tbx_testkit_set(tbx_testkit_t *kit, const char *key, const char *value);
/** Creates @p topic with @p partitions partitions on the mock cluster: the
 *  topics the handlers send to.  Handled topics and their dead-letter
 *  topics are created by the kit. */
int tbx_testkit_topic(tbx_testkit_t *kit, const char *topic, int partitions);
/** Registers a handler, as tbx_worker_register() (on every worker the kit
 *  creates, the recovering one included). */
int tbx_testkit_register(tbx_testkit_t *kit, const char *topic,
			 const char *type, tbx_handler_fn fn, void *opaque);
/** Has @p init (a plugin's init function) register its handlers with
 *  @p args on every worker the kit creates. */
int tbx_testkit_plugin(tbx_testkit_t *kit, tbx_plugin_init_fn init,
		       const char *args);
/** The service store's path: open it to set up or check the handler's
 *  tables (close it before the next tbx_testkit_handle()). */
const char *tbx_testkit_store_path(const tbx_testkit_t *kit);

/**
 * Publishes @p msg (topic and type required; key, payload and headers
 * optional) with a token minted for the kit's group, and runs the worker
 * until the message is finished.  *outcome (may be NULL) says how.
 * @returns TBX_OK, TBX_ETIMEOUT (not finished within 2 minutes), or the
 * error that stopped the worker.
 */
int tbx_testkit_handle(tbx_testkit_t *kit, const tbx_out_t *msg,
		       tbx_testkit_outcome_t *outcome);
/** Delivers the last message again, byte for byte (same id and token),
 *  as a broker's redelivery or an upstream re-send would, and runs the
 *  worker until it is finished (normally: TBX_TESTKIT_DUPLICATE). */
int tbx_testkit_redeliver(tbx_testkit_t *kit, tbx_testkit_outcome_t *outcome);

/**
 * Makes the next tbx_testkit_handle() run the worker in a child process
 * that is killed (SIGKILL) at crash point @p point, e.g. "A.committed",
 * "C.delivered", "E.deleted" (docs/architecture.md lists them), then run
 * a new worker in this process until the message is finished, as a
 * restart would.  That tbx_testkit_handle() returns TBX_ENOENT if the
 * child never reached the point.  Its outcome is what the new worker
 * saw; a message the child had finished before the point (E.deleted,
 * F.committed) is TBX_TESTKIT_PROCESSED.
 */
int tbx_testkit_crash_at(tbx_testkit_t *kit, const char *point);

/** Messages the worker produced so far, all topics, in topic and offset
 *  order: tbx_testkit_sent_count() reads what was produced since it was
 *  last called, tbx_testkit_sent() when @p i is beyond what was read.
 *  A returned pointer, and the strings it points to, stay valid until
 *  tbx_testkit_destroy(), whatever is called in between; an index may
 *  name another message once more were produced (the order is topic and
 *  offset).  NULL when @p i is out of range. */
size_t tbx_testkit_sent_count(tbx_testkit_t *kit);
const tbx_testkit_sent_t *tbx_testkit_sent(tbx_testkit_t *kit, size_t i);

/**
 * The spans the kit's worker recorded while it handled the last message
 * (the last tbx_testkit_handle() or tbx_testkit_redeliver()), in the
 * order they ended: the record's process span, a send span per message
 * it produced (ended at its delivery report), the batch span.  Tracing
 * is on in the kit's worker, every trace sampled, the spans kept in
 * memory instead of exported (otel.* export settings have no effect);
 * no collector is needed.  The worker of a crash point's child process
 * takes its spans with it: what the recovering worker did is listed.  A
 * returned pointer stays valid until tbx_testkit_destroy().  NULL when
 * @p i is out of range.
 */
size_t tbx_testkit_span_count(const tbx_testkit_t *kit);
const tbx_testkit_span_t *tbx_testkit_span(const tbx_testkit_t *kit, size_t i);
/** The first span of the last message named @p name, or NULL. */
const tbx_testkit_span_t *tbx_testkit_span_named(const tbx_testkit_t *kit,
						 const char *name);
/** The value of @p span's attribute @p key, or NULL. */
const char *tbx_testkit_span_attr(const tbx_testkit_span_t *span,
				  const char *key);
/** @p span's first event named @p name, or NULL. */
const tbx_testkit_event_t *
tbx_testkit_span_event(const tbx_testkit_span_t *span, const char *name);
/** The value of @p event's attribute @p key, or NULL. */
const char *tbx_testkit_event_attr(const tbx_testkit_event_t *event,
				   const char *key);

#ifdef __cplusplus
}
#endif
#endif /* TOKENBOX_TESTKIT_H */
