/*
 * The otel tier: spans exported by tokenbox's OTLP/HTTP exporter to a
 * real Jaeger (scripts/jaeger.sh), in both encodings (http/protobuf and
 * http/json), then read back through Jaeger's HTTP query API: one trace
 * across two services, parent to child, with the attributes, the event
 * and the status each span was given; and the same spans sent in either
 * encoding are the same trace to Jaeger.
 *
 * Needs TBX_JAEGER_OTLP (what `scripts/jaeger.sh start` prints); Jaeger's
 * query API is TBX_JAEGER_QUERY, else the port after the OTLP one (as
 * scripts/jaeger.sh lays them out).
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jaeger_query.h"
#include "support.h"
#include "tokenbox/tokenbox.h"
#include "trace/export.h"

static const char *from_list(const char *name, void *opaque)
{
	const char *const *kv = opaque;

	for (; kv[0]; kv += 2)
		if (strcmp(kv[0], name) == 0)
			return kv[1];
	return NULL;
}

static tbx__exporter_t *exporter_for(const char *service, const char *protocol)
{
	const char *kv[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
			    getenv("TBX_JAEGER_OTLP"),
			    "OTEL_SERVICE_NAME",
			    service,
			    "OTEL_BSP_SCHEDULE_DELAY",
			    "100",
			    "OTEL_EXPORTER_OTLP_PROTOCOL",
			    protocol,
			    NULL};
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	char err[512];

	cr_assert_eq(
	    tbx__otel_conf_read(&conf, "x", from_list, kv, err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_not(conf.disabled);
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)), "%s",
		  err);
	return e;
}

static cJSON *span_named(cJSON *spans, const char *name)
{
	cJSON *s;

	cJSON_ArrayForEach(s, spans)
	{
		cJSON *op = cJSON_GetObjectItem(s, "operationName");
		if (cJSON_IsString(op) && strcmp(op->valuestring, name) == 0)
			return s;
	}
	cr_assert_fail("no span %s", name);
	return NULL;
}

/* The value of tag @p key of a Jaeger span, as text ("" when absent). */
static const char *tag(cJSON *tags, const char *key, char *buf, size_t size)
{
	cJSON *t;

	buf[0] = '\0';
	cJSON_ArrayForEach(t, tags)
	{
		cJSON *k = cJSON_GetObjectItem(t, "key");
		cJSON *v = cJSON_GetObjectItem(t, "value");
		if (!cJSON_IsString(k) || strcmp(k->valuestring, key) != 0)
			continue;
		if (cJSON_IsString(v))
			snprintf(buf, size, "%s", v->valuestring);
		else if (cJSON_IsBool(v))
			snprintf(buf, size, "%s",
				 cJSON_IsTrue(v) ? "true" : "false");
		else if (cJSON_IsNumber(v))
			snprintf(buf, size, "%.0f", v->valuedouble);
	}
	return buf;
}

/* The span id of @p span's CHILD_OF reference ("" when none); a link is
 * a FOLLOWS_FROM reference, and there is one at most. */
static const char *parent_of(cJSON *span)
{
	cJSON *r;
	const char *parent = "";
	int children = 0, follows = 0;

	cJSON_ArrayForEach(r, cJSON_GetObjectItem(span, "references"))
	{
		const char *type =
		    cJSON_GetObjectItem(r, "refType")->valuestring;
		if (strcmp(type, "CHILD_OF") == 0) {
			children++;
			parent = cJSON_GetObjectItem(r, "spanID")->valuestring;
		} else {
			cr_expect_str_eq(type, "FOLLOWS_FROM");
			follows++;
		}
	}
	cr_expect_leq(children, 1);
	cr_expect_leq(follows, 1);
	return parent;
}

static const char *service_of(cJSON *trace, cJSON *span)
{
	const char *pid = cJSON_GetObjectItem(span, "processID")->valuestring;
	cJSON *p =
	    cJSON_GetObjectItem(cJSON_GetObjectItem(trace, "processes"), pid);

	return cJSON_GetObjectItem(p, "serviceName")->valuestring;
}

/* The span ids and times of the trace sent in both encodings: only the
 * trace id differs between the two. */
typedef struct trace_plan {
	uint8_t a[8], b[8], c[8], linked[8]; /* linked: another trace's */
	uint64_t t;
	char svc_a[64], svc_b[64];
} trace_plan_t;

static void plan_new(trace_plan_t *p)
{
	tbx__span_id_new(p->a);
	tbx__span_id_new(p->b);
	tbx__span_id_new(p->c);
	tbx__span_id_new(p->linked);
	p->t = tbx__now_ns();
	snprintf(p->svc_a, sizeof(p->svc_a), "tbx-test-publisher-%d",
		 (int)getpid());
	snprintf(p->svc_b, sizeof(p->svc_b), "tbx-test-orders-%d",
		 (int)getpid());
}

/* Exports the plan's three spans over @p protocol in a new trace, whose
 * id goes to @p hex, and reads the trace back from Jaeger: its "data"
 * item (in @p *doc, the caller's to free). */
static cJSON *send_and_read(const trace_plan_t *p, const char *protocol,
			    char hex[33], cJSON **doc)
{
	char base[256], url[512];
	tbx__trace_ctx_t a, b, c;
	tbx__exporter_t *pub, *orders;
	uint64_t t = p->t;
	cJSON *trace = NULL;

	pub = exporter_for(p->svc_a, protocol);
	orders = exporter_for(p->svc_b, protocol);

	/* publish (producer) -> process (consumer) -> send (producer) */
	tbx__trace_id_new(a.trace_id);
	a.flags = b.flags = c.flags = TBX_TRACE_FLAG_SAMPLED;
	memcpy(b.trace_id, a.trace_id, 16);
	memcpy(c.trace_id, a.trace_id, 16);
	memcpy(a.span_id, p->a, 8);
	memcpy(b.span_id, p->b, 8);
	memcpy(c.span_id, p->c, 8);

	tbx__span_t *s1 = tbx__span_new("orders publish",
					TBX_SPAN_KIND_PRODUCER, &a, NULL, t);
	s1->end_ns = t + 1000000;
	tbx__attrs_str(&s1->attrs, "messaging.system", "kafka", 5);
	tbx__span_t *s2 =
	    tbx__span_new("orders process", TBX_SPAN_KIND_CONSUMER, &b,
			  a.span_id, t + 2000000);
	s2->end_ns = t + 5000000;
	tbx__attrs_str(&s2->attrs, "messaging.system", "kafka", 5);
	tbx__attrs_int(&s2->attrs, "messaging.kafka.offset", 4711);
	tbx__attrs_int(&s2->attrs, "negative", INT64_MIN);
	tbx__attrs_bool(&s2->attrs, "tokenbox.resumed", 0);
	tbx__attrs_str(&s2->attrs, "messaging.kafka.message.key",
		       "gr\xc3\xb6\xc3\x9f\x65 \xff", 9);
	tbx__attrs_str(&s2->attrs, "empty", "", 0);
	tbx__span_set_tracestate(s2, "rojo=00f067aa0ba902b7");
	tbx__span_event_t *ev =
	    tbx__span_add_event(s2, "duplicate dropped", t + 3000000);
	tbx__attrs_str(&ev->attrs, "tokenbox.drop.reason", "token consumed",
		       14);
	tbx__trace_ctx_t other = {.flags = TBX_TRACE_FLAG_SAMPLED};
	tbx__trace_id_new(other.trace_id);
	memcpy(other.span_id, p->linked, 8);
	tbx__span_link_t *ln = tbx__span_add_link(s2, &other);
	tbx__attrs_int(&ln->attrs, "n", 1);
	tbx__span_t *s3 = tbx__span_new("payments send", TBX_SPAN_KIND_PRODUCER,
					&c, b.span_id, t + 4000000);
	s3->end_ns = t + 4500000;
	tbx__span_set_status(s3, TBX_SPAN_STATUS_ERROR, "delivery failed");

	cr_assert_eq(tbx__exporter_enqueue(pub, s1), 0);
	cr_assert_eq(tbx__exporter_enqueue(orders, s2), 0);
	cr_assert_eq(tbx__exporter_enqueue(orders, s3), 0);
	tbx__exporter_destroy(pub, 30000);
	tbx__exporter_destroy(orders, 30000);

	tbx__hex(a.trace_id, 16, hex);
	tt_jaeger_query_base(base, sizeof(base));
	snprintf(url, sizeof(url), "%s/api/traces/%s", base, hex);
	/* Jaeger batches what it receives: poll until all three are in. */
	*doc = NULL;
	for (int i = 0; i < 300 * tt_time_factor(); i++) {
		char *body = tt_jaeger_get(url, 10000L);
		cJSON_Delete(*doc);
		*doc = body ? cJSON_Parse(body) : NULL;
		free(body);
		trace = *doc ? cJSON_GetArrayItem(
				   cJSON_GetObjectItem(*doc, "data"), 0)
			     : NULL;
		if (trace && cJSON_GetArraySize(
				 cJSON_GetObjectItem(trace, "spans")) == 3)
			break;
		trace = NULL;
		usleep(100000);
	}
	cr_assert(trace, "%s: Jaeger never returned the trace's 3 spans (%s)",
		  protocol, url);
	return trace;
}

static void check_trace(const trace_plan_t *p, cJSON *trace)
{
	char a_hex[17], b_hex[17], buf[256];
	cJSON *spans = cJSON_GetObjectItem(trace, "spans"), *s;

	tbx__hex(p->a, 8, a_hex);
	tbx__hex(p->b, 8, b_hex);
	s = span_named(spans, "orders publish");
	cr_expect_str_eq(parent_of(s), "", "the root has no parent");
	cr_expect_str_eq(service_of(trace, s), p->svc_a);
	cr_expect_str_eq(
	    tag(cJSON_GetObjectItem(s, "tags"), "span.kind", buf, sizeof(buf)),
	    "producer");

	s = span_named(spans, "orders process");
	cr_expect_str_eq(parent_of(s), a_hex);
	cr_expect_str_eq(service_of(trace, s), p->svc_b);
	cr_expect_str_eq(tag(cJSON_GetObjectItem(s, "tags"),
			     "messaging.kafka.offset", buf, sizeof(buf)),
			 "4711");
	cr_expect_str_eq(tag(cJSON_GetObjectItem(s, "tags"),
			     "messaging.kafka.message.key", buf, sizeof(buf)),
			 "gr\xc3\xb6\xc3\x9f\x65 \xef\xbf\xbd");
	cr_expect_str_eq(
	    tag(cJSON_GetObjectItem(s, "tags"), "span.kind", buf, sizeof(buf)),
	    "consumer");
	{
		cJSON *log =
		    cJSON_GetArrayItem(cJSON_GetObjectItem(s, "logs"), 0);
		cr_assert(log, "the event is not there");
		cr_expect_str_eq(tag(cJSON_GetObjectItem(log, "fields"),
				     "tokenbox.drop.reason", buf, sizeof(buf)),
				 "token consumed");
		cr_expect_str_eq(tag(cJSON_GetObjectItem(log, "fields"),
				     "event", buf, sizeof(buf)),
				 "duplicate dropped");
	}

	s = span_named(spans, "payments send");
	cr_expect_str_eq(parent_of(s), b_hex);
	cr_expect_str_eq(
	    tag(cJSON_GetObjectItem(s, "tags"), "error", buf, sizeof(buf)),
	    "true");
	cr_expect_str_eq(tag(cJSON_GetObjectItem(s, "tags"),
			     "otel.status_description", buf, sizeof(buf)),
			 "delivery failed");
}

/* Removes every member "traceID" under @p o: what differs between the
 * two traces of the comparison. */
static void drop_trace_ids(cJSON *o)
{
	cJSON *c;

	if (cJSON_IsObject(o))
		cJSON_DeleteItemFromObjectCaseSensitive(o, "traceID");
	cJSON_ArrayForEach(c, o) drop_trace_ids(c);
}

/* The trace's spans in operation-name order, each without its trace id
 * and with its process (service name and tags) in place of the
 * processID: what Jaeger says of the spans, whatever the trace's id. */
static cJSON *normalized(cJSON *trace)
{
	cJSON *out = cJSON_CreateArray(), *s;
	cJSON *spans = cJSON_GetObjectItem(trace, "spans");
	int n = cJSON_GetArraySize(spans);

	for (int k = 0; k < n; k++) { /* pick the smallest name left */
		cJSON *best = NULL;
		cJSON_ArrayForEach(s, spans)
		{
			const char *name =
			    cJSON_GetObjectItem(s, "operationName")
				->valuestring;
			if (cJSON_GetObjectItem(s, "picked"))
				continue;
			if (!best || strcmp(name, cJSON_GetObjectItem(
						      best, "operationName")
						      ->valuestring) < 0)
				best = s;
		}
		cJSON_AddTrueToObject(best, "picked");
		cJSON *copy = cJSON_Duplicate(best, 1);
		const char *pid =
		    cJSON_GetObjectItem(copy, "processID")->valuestring;
		cJSON *proc = cJSON_Duplicate(
		    cJSON_GetObjectItem(cJSON_GetObjectItem(trace, "processes"),
					pid),
		    1);
		cJSON_DeleteItemFromObject(copy, "processID");
		cJSON_DeleteItemFromObject(copy, "picked");
		cJSON_AddItemToObject(copy, "process", proc);
		drop_trace_ids(copy);
		cJSON_AddItemToArray(out, copy);
	}
	return out;
}

Test(otel_jaeger, one_trace_across_two_services_reads_back_parent_to_child,
     .timeout = 300)
{
	static const char *const protocols[] = {"http/protobuf", "http/json"};
	trace_plan_t p;
	char hex[33];
	cJSON *doc;

	if (!getenv("TBX_JAEGER_OTLP") || !*getenv("TBX_JAEGER_OTLP"))
		cr_skip_test("the otel tier needs Jaeger: "
			     "TBX_JAEGER_OTLP=$(bash scripts/jaeger.sh start)");
	for (int i = 0; i < 2; i++) {
		plan_new(&p);
		check_trace(&p, send_and_read(&p, protocols[i], hex, &doc));
		cJSON_Delete(doc);
	}
}

Test(otel_jaeger, http_protobuf_and_http_json_give_jaeger_the_same_trace,
     .timeout = 300)
{
	trace_plan_t p;
	char hex_pb[33], hex_json[33];
	cJSON *doc_pb, *doc_json, *pb, *json;

	if (!getenv("TBX_JAEGER_OTLP") || !*getenv("TBX_JAEGER_OTLP"))
		cr_skip_test("the otel tier needs Jaeger: "
			     "TBX_JAEGER_OTLP=$(bash scripts/jaeger.sh start)");
	plan_new(&p);
	pb = normalized(send_and_read(&p, "http/protobuf", hex_pb, &doc_pb));
	json = normalized(send_and_read(&p, "http/json", hex_json, &doc_json));
	cr_assert_str_neq(hex_pb, hex_json, "two traces");
	cr_assert_eq(cJSON_GetArraySize(pb), 3);
	if (!cJSON_Compare(pb, json, 1)) {
		char *a = cJSON_Print(pb), *b = cJSON_Print(json);
		cr_expect(
		    0,
		    "Jaeger's spans differ:\nhttp/protobuf: %s\nhttp/json: %s",
		    a, b);
		free(a);
		free(b);
	}
	cJSON_Delete(pb);
	cJSON_Delete(json);
	cJSON_Delete(doc_pb);
	cJSON_Delete(doc_json);
}
