/*
 * The otel tier: spans exported by tokenbox's OTLP/HTTP JSON exporter to a
 * real Jaeger (scripts/jaeger.sh), then read back through Jaeger's HTTP
 * query API: one trace across two services, parent to child, with the
 * attributes, the event and the status each span was given.
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

static tbx__exporter_t *exporter_for(const char *service)
{
	const char *kv[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
			    getenv("TBX_JAEGER_OTLP"),
			    "OTEL_SERVICE_NAME",
			    service,
			    "OTEL_BSP_SCHEDULE_DELAY",
			    "100",
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

static const char *parent_of(cJSON *span)
{
	cJSON *r =
	    cJSON_GetArrayItem(cJSON_GetObjectItem(span, "references"), 0);

	if (!r)
		return "";
	cr_expect_str_eq(cJSON_GetObjectItem(r, "refType")->valuestring,
			 "CHILD_OF");
	return cJSON_GetObjectItem(r, "spanID")->valuestring;
}

static const char *service_of(cJSON *trace, cJSON *span)
{
	const char *pid = cJSON_GetObjectItem(span, "processID")->valuestring;
	cJSON *p =
	    cJSON_GetObjectItem(cJSON_GetObjectItem(trace, "processes"), pid);

	return cJSON_GetObjectItem(p, "serviceName")->valuestring;
}

Test(otel_jaeger, one_trace_across_two_services_reads_back_parent_to_child,
     .timeout = 300)
{
	char svc_a[64], svc_b[64], hex[33], a_hex[17], b_hex[17], base[256],
	    url[512], buf[256];
	tbx__trace_ctx_t a, b, c;
	tbx__exporter_t *pub, *orders;
	uint64_t t = tbx__now_ns();
	cJSON *doc = NULL, *trace = NULL, *spans, *s;

	if (!getenv("TBX_JAEGER_OTLP") || !*getenv("TBX_JAEGER_OTLP"))
		cr_skip_test("the otel tier needs Jaeger: "
			     "TBX_JAEGER_OTLP=$(bash scripts/jaeger.sh start)");
	snprintf(svc_a, sizeof(svc_a), "tbx-test-publisher-%d", (int)getpid());
	snprintf(svc_b, sizeof(svc_b), "tbx-test-orders-%d", (int)getpid());
	pub = exporter_for(svc_a);
	orders = exporter_for(svc_b);

	/* publish (producer) -> process (consumer) -> send (producer) */
	tbx__trace_id_new(a.trace_id);
	tbx__span_id_new(a.span_id);
	a.flags = b.flags = c.flags = TBX_TRACE_FLAG_SAMPLED;
	memcpy(b.trace_id, a.trace_id, 16);
	memcpy(c.trace_id, a.trace_id, 16);
	tbx__span_id_new(b.span_id);
	tbx__span_id_new(c.span_id);

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
	tbx__attrs_bool(&s2->attrs, "tokenbox.resumed", 0);
	tbx__span_event_t *ev =
	    tbx__span_add_event(s2, "duplicate dropped", t + 3000000);
	tbx__attrs_str(&ev->attrs, "tokenbox.drop.reason", "token consumed",
		       14);
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
	tbx__hex(a.span_id, 8, a_hex);
	tbx__hex(b.span_id, 8, b_hex);
	tt_jaeger_query_base(base, sizeof(base));
	snprintf(url, sizeof(url), "%s/api/traces/%s", base, hex);
	/* Jaeger batches what it receives: poll until all three are in. */
	for (int i = 0; i < 300 * tt_time_factor(); i++) {
		char *body = tt_jaeger_get(url, 10000L);
		cJSON_Delete(doc);
		doc = body ? cJSON_Parse(body) : NULL;
		free(body);
		trace = doc ? cJSON_GetArrayItem(
				  cJSON_GetObjectItem(doc, "data"), 0)
			    : NULL;
		if (trace && cJSON_GetArraySize(
				 cJSON_GetObjectItem(trace, "spans")) == 3)
			break;
		trace = NULL;
		usleep(100000);
	}
	cr_assert(trace, "Jaeger never returned the trace's 3 spans (%s)", url);
	spans = cJSON_GetObjectItem(trace, "spans");

	s = span_named(spans, "orders publish");
	cr_expect_str_eq(parent_of(s), "", "the root has no parent");
	cr_expect_str_eq(service_of(trace, s), svc_a);
	cr_expect_str_eq(
	    tag(cJSON_GetObjectItem(s, "tags"), "span.kind", buf, sizeof(buf)),
	    "producer");

	s = span_named(spans, "orders process");
	cr_expect_str_eq(parent_of(s), a_hex);
	cr_expect_str_eq(service_of(trace, s), svc_b);
	cr_expect_str_eq(tag(cJSON_GetObjectItem(s, "tags"),
			     "messaging.kafka.offset", buf, sizeof(buf)),
			 "4711");
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
	cJSON_Delete(doc);
}
