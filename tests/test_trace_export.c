/*
 * Spans encoded as OTLP/HTTP JSON and exported: the request's structure
 * by the OTLP JSON mapping, OpenTelemetry's environment variables checked,
 * and the exporter against a local collector (libmicrohttpd), one that
 * refuses, a port nobody listens on and a server that never answers: the
 * producer never waits, and every span is exported or counted as lost.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support.h"
#include "tokenbox/tokenbox.h"
#include "trace/export.h"

/* ---- the encoder ---- */

static cJSON *item(cJSON *o, const char *name)
{
	cJSON *i = cJSON_GetObjectItemCaseSensitive(o, name);
	cr_assert(i, "no member %s", name);
	return i;
}

/* The value object of attribute @p key in the array @p attrs. */
static cJSON *attr(cJSON *attrs, const char *key)
{
	cJSON *a;

	cJSON_ArrayForEach(a, attrs)
	{
		if (strcmp(item(a, "key")->valuestring, key) == 0)
			return item(a, "value");
	}
	cr_assert_fail("no attribute %s", key);
	return NULL;
}

static tbx__trace_ctx_t ctx_of(uint8_t fill, uint8_t flags)
{
	tbx__trace_ctx_t c;

	memset(c.trace_id, fill, sizeof(c.trace_id));
	memset(c.span_id, fill + 1, sizeof(c.span_id));
	c.flags = flags;
	return c;
}

Test(otlp_json, a_span_is_encoded_by_the_otlp_json_mapping)
{
	tbx__trace_ctx_t c = ctx_of(0xab, 1), other = ctx_of(0x12, 0);
	uint8_t parent[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	tbx__span_t *s = tbx__span_new("orders process", TBX_SPAN_KIND_CONSUMER,
				       &c, parent, 1700000000123456789ULL);
	tbx__span_t *root =
	    tbx__span_new("root", TBX_SPAN_KIND_PRODUCER, &other, NULL, 5);
	tbx__attrs_t res_attrs = {0};
	tbx__jbuf_t buf = {0};
	tbx__span_t *spans[2];
	cJSON *doc, *rs, *ss, *sp, *attrs, *v, *ev, *ln;

	cr_assert(s && root);
	s->end_ns = 1700000000223456789ULL;
	tbx__span_set_tracestate(s, "rojo=1");
	tbx__attrs_str(&s->attrs, "messaging.system", "kafka", 5);
	tbx__attrs_int(&s->attrs, "messaging.kafka.offset", -42);
	tbx__attrs_int(&s->attrs, "big", INT64_MAX);
	tbx__attrs_int(&s->attrs, "least", INT64_MIN);
	tbx__attrs_int(&s->attrs, "zero", 0);
	/* Keys not copied (literals), set twice too: the last value. */
	tbx__attrs_str_static(&s->attrs, "messaging.message.id", "m-1", 3);
	tbx__attrs_int_static(&s->attrs, "tokenbox.attempt", 1);
	tbx__attrs_str_static(&s->attrs, "messaging.message.id", "m-2", 3);
	tbx__attrs_int_static(&s->attrs, "tokenbox.attempt", 2);
	tbx__attrs_bool(&s->attrs, "retried", 1);
	tbx__attrs_str(&s->attrs, "key", "a\"b\\c\n\x01\xff\xc3\xa9", 10);
	tbx__attrs_str(&s->attrs, "messaging.system", "kafka2", 6);
	ev = NULL;
	tbx__span_event_t *e =
	    tbx__span_add_event(s, "duplicate dropped", 1700000000200000000ULL);
	cr_assert(e);
	tbx__attrs_str(&e->attrs, "tokenbox.drop.reason", "token consumed", 14);
	tbx__span_link_t *l = tbx__span_add_link(s, &other);
	cr_assert(l);
	tbx__attrs_int(&l->attrs, "n", 3);
	tbx__span_set_status(s, TBX_SPAN_STATUS_ERROR, "dead-lettered");
	tbx__attrs_str(&res_attrs, "service.instance.id", "w1", 2);

	spans[0] = s;
	spans[1] = root;
	tbx__otlp_resource_t res = {"order-service", &res_attrs};
	cr_assert_eq(tbx__otlp_json_encode(spans, 2, &res, &buf), 0);
	doc = cJSON_Parse(buf.p);
	cr_assert(doc, "not JSON: %s", buf.p);

	rs = cJSON_GetArrayItem(item(doc, "resourceSpans"), 0);
	attrs = item(item(rs, "resource"), "attributes");
	cr_expect_str_eq(
	    item(attr(attrs, "service.name"), "stringValue")->valuestring,
	    "order-service");
	cr_expect_str_eq(
	    item(attr(attrs, "telemetry.sdk.name"), "stringValue")->valuestring,
	    "tokenbox");
	cr_expect_str_eq(item(attr(attrs, "service.instance.id"), "stringValue")
			     ->valuestring,
			 "w1");
	ss = cJSON_GetArrayItem(item(rs, "scopeSpans"), 0);
	cr_expect_str_eq(item(item(ss, "scope"), "name")->valuestring,
			 "tokenbox");
	cr_assert_eq(cJSON_GetArraySize(item(ss, "spans")), 2);
	sp = cJSON_GetArrayItem(item(ss, "spans"), 0);

	/* Ids in lower-case hex, enums as integers, int64 as strings. */
	cr_expect_str_eq(item(sp, "traceId")->valuestring,
			 "abababababababababababababababab");
	cr_expect_str_eq(item(sp, "spanId")->valuestring, "acacacacacacacac");
	cr_expect_str_eq(item(sp, "parentSpanId")->valuestring,
			 "0102030405060708");
	cr_expect_str_eq(item(sp, "traceState")->valuestring, "rojo=1");
	cr_expect_str_eq(item(sp, "name")->valuestring, "orders process");
	cr_expect(cJSON_IsNumber(item(sp, "kind")));
	cr_expect_eq(item(sp, "kind")->valueint, 5);
	cr_expect_eq(item(sp, "flags")->valueint, 1);
	cr_expect_str_eq(item(sp, "startTimeUnixNano")->valuestring,
			 "1700000000123456789");
	cr_expect_str_eq(item(sp, "endTimeUnixNano")->valuestring,
			 "1700000000223456789");
	attrs = item(sp, "attributes");
	cr_expect_eq(cJSON_GetArraySize(attrs), 9, "a key set twice is one");
	cr_expect_str_eq(
	    item(attr(attrs, "messaging.message.id"), "stringValue")
		->valuestring,
	    "m-2");
	cr_expect_str_eq(
	    item(attr(attrs, "tokenbox.attempt"), "intValue")->valuestring,
	    "2");
	cr_expect_str_eq(
	    item(attr(attrs, "messaging.system"), "stringValue")->valuestring,
	    "kafka2");
	v = item(attr(attrs, "messaging.kafka.offset"), "intValue");
	cr_expect(cJSON_IsString(v));
	cr_expect_str_eq(v->valuestring, "-42");
	cr_expect_str_eq(item(attr(attrs, "big"), "intValue")->valuestring,
			 "9223372036854775807");
	cr_expect_str_eq(item(attr(attrs, "least"), "intValue")->valuestring,
			 "-9223372036854775808");
	cr_expect_str_eq(item(attr(attrs, "zero"), "intValue")->valuestring,
			 "0");
	cr_expect(cJSON_IsTrue(item(attr(attrs, "retried"), "boolValue")));
	/* Escaped, and an invalid byte (0xff) is U+FFFD. */
	cr_expect_str_eq(item(attr(attrs, "key"), "stringValue")->valuestring,
			 "a\"b\\c\n\x01\xef\xbf\xbd\xc3\xa9");
	cr_expect(strstr(buf.p, "\\u0001"));

	ev = cJSON_GetArrayItem(item(sp, "events"), 0);
	cr_expect_str_eq(item(ev, "name")->valuestring, "duplicate dropped");
	cr_expect_str_eq(item(ev, "timeUnixNano")->valuestring,
			 "1700000000200000000");
	cr_expect_str_eq(
	    item(attr(item(ev, "attributes"), "tokenbox.drop.reason"),
		 "stringValue")
		->valuestring,
	    "token consumed");
	ln = cJSON_GetArrayItem(item(sp, "links"), 0);
	cr_expect_str_eq(item(ln, "traceId")->valuestring,
			 "12121212121212121212121212121212");
	cr_expect_str_eq(item(ln, "spanId")->valuestring, "1313131313131313");
	cr_expect_str_eq(
	    item(attr(item(ln, "attributes"), "n"), "intValue")->valuestring,
	    "3");
	cr_expect_eq(item(item(sp, "status"), "code")->valueint, 2);
	cr_expect_str_eq(item(item(sp, "status"), "message")->valuestring,
			 "dead-lettered");

	/* A root span has no parent; an unset status is left out. */
	sp = cJSON_GetArrayItem(item(ss, "spans"), 1);
	cr_expect_null(cJSON_GetObjectItem(sp, "parentSpanId"));
	cr_expect_null(cJSON_GetObjectItem(sp, "status"));
	cr_expect_eq(item(sp, "kind")->valueint, 4);

	cJSON_Delete(doc);
	tbx__jbuf_free(&buf);
	tbx__attrs_free(&res_attrs);
	tbx__span_free(s);
	tbx__span_free(root);
}

Test(otlp_json, what_is_over_the_bounds_is_counted_as_dropped)
{
	tbx__trace_ctx_t c = ctx_of(0x33, 1);
	tbx__span_t *s =
	    tbx__span_new("s", TBX_SPAN_KIND_INTERNAL, &c, NULL, 1);
	tbx__jbuf_t buf = {0};
	char key[32], *big = malloc(TBX_SPAN_VALUE_MAX + 100);
	cJSON *doc, *sp;

	for (int i = 0; i < TBX_SPAN_ATTRS_MAX + 3; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		tbx__attrs_int(&s->attrs, key, i);
	}
	for (int i = 0; i < TBX_SPAN_EVENTS_MAX + 2; i++)
		tbx__span_add_event(s, "e", 1);
	memset(big, 'x', TBX_SPAN_VALUE_MAX + 100);
	tbx__attrs_str(&s->attrs, "k0", big, TBX_SPAN_VALUE_MAX + 100);
	tbx__otlp_resource_t res = {"svc", NULL};
	cr_assert_eq(tbx__otlp_json_encode(&s, 1, &res, &buf), 0);
	doc = cJSON_Parse(buf.p);
	cr_assert(doc);
	sp = cJSON_GetArrayItem(
	    item(cJSON_GetArrayItem(
		     item(cJSON_GetArrayItem(item(doc, "resourceSpans"), 0),
			  "scopeSpans"),
		     0),
		 "spans"),
	    0);
	cr_expect_eq(item(sp, "droppedAttributesCount")->valueint, 3);
	cr_expect_eq(item(sp, "droppedEventsCount")->valueint, 2);
	cr_expect_eq(cJSON_GetArraySize(item(sp, "events")),
		     TBX_SPAN_EVENTS_MAX);
	cr_expect_eq(
	    strlen(item(attr(item(sp, "attributes"), "k0"), "stringValue")
		       ->valuestring),
	    TBX_SPAN_VALUE_MAX, "a long value is cut");
	cJSON_Delete(doc);
	tbx__jbuf_free(&buf);
	tbx__span_free(s);
	free(big);
}

/* ---- configuration ---- */

static const char *from_list(const char *name, void *opaque)
{
	const char *const *kv = opaque;

	for (; kv[0]; kv += 2)
		if (strcmp(kv[0], name) == 0)
			return kv[1];
	return NULL;
}

static int conf_of(tbx__otel_conf_t *conf, char *err, const char **kv)
{
	return tbx__otel_conf_read(conf, "tokenbox", from_list, kv, err, 512);
}

Test(otel_conf, the_sdk_variables_are_read_and_checked)
{
	tbx__otel_conf_t conf;
	char err[512];

	const char *none[] = {NULL};
	cr_assert_eq(conf_of(&conf, err, none), TBX_OK);
	cr_expect(conf.disabled, "no endpoint: no tracing");

	const char *base[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
			      "http://127.0.0.1:4318", NULL};
	cr_assert_eq(conf_of(&conf, err, base), TBX_OK, "%s", err);
	cr_expect_not(conf.disabled);
	cr_expect_str_eq(conf.endpoint, "http://127.0.0.1:4318/v1/traces");
	cr_expect_str_eq(conf.service_name, "tokenbox");
	cr_expect_eq(conf.queue_max, 2048);
	cr_expect_eq(conf.batch_max, 512);
	cr_expect_eq(conf.delay_ms, 5000);
	cr_expect_eq(conf.timeout_ms, 10000);
	cr_expect_eq(conf.sampler.kind, TBX_SAMPLER_PARENT_ALWAYS_ON);

	const char *slash[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
			       "https://c.example/otlp/", NULL};
	cr_assert_eq(conf_of(&conf, err, slash), TBX_OK, "%s", err);
	cr_expect_str_eq(conf.endpoint, "https://c.example/otlp/v1/traces");

	const char *traces[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
				"http://a:1",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
				"http://b:2/custom",
				"OTEL_SERVICE_NAME",
				"orders",
				"OTEL_TRACES_SAMPLER",
				"parentbased_traceidratio",
				"OTEL_TRACES_SAMPLER_ARG",
				"0.01",
				"OTEL_BSP_MAX_QUEUE_SIZE",
				"100",
				"OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
				"10",
				"OTEL_BSP_SCHEDULE_DELAY",
				"250",
				"OTEL_EXPORTER_OTLP_TIMEOUT",
				"3000",
				"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
				"2000",
				"OTEL_EXPORTER_OTLP_PROTOCOL",
				"http/json",
				"OTEL_SDK_DISABLED",
				"false",
				NULL};
	cr_assert_eq(conf_of(&conf, err, traces), TBX_OK, "%s", err);
	cr_expect_str_eq(conf.endpoint, "http://b:2/custom", "used as is");
	cr_expect_str_eq(conf.service_name, "orders");
	cr_expect_eq(conf.sampler.kind, TBX_SAMPLER_PARENT_RATIO);
	cr_expect_float_eq(conf.sampler.ratio, 0.01, 1e-12);
	cr_expect_eq(conf.queue_max, 100);
	cr_expect_eq(conf.batch_max, 10);
	cr_expect_eq(conf.delay_ms, 250);
	cr_expect_eq(conf.timeout_ms, 2000, "the traces timeout wins");

	const char *disabled[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1",
				  "OTEL_SDK_DISABLED", "TRUE", NULL};
	cr_assert_eq(conf_of(&conf, err, disabled), TBX_OK);
	cr_expect(conf.disabled);
	const char *exp_none[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1",
				  "OTEL_TRACES_EXPORTER", "none", NULL};
	cr_assert_eq(conf_of(&conf, err, exp_none), TBX_OK);
	cr_expect(conf.disabled);
}

Test(otel_conf, bad_values_are_refused_with_the_variable_named)
{
	tbx__otel_conf_t conf;
	char err[512];
	static const struct {
		const char *var, *value, *says;
	} bad[] = {
	    {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf",
	     "JSON bodies only; set it to http/json"},
	    {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc", "http/json"},
	    {"OTEL_EXPORTER_OTLP_PROTOCOL", "udp", "not a protocol"},
	    {"OTEL_SDK_DISABLED", "yes", "neither true nor false"},
	    {"OTEL_TRACES_EXPORTER", "zipkin", "not offered"},
	    {"OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318", "not an http"},
	    {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://", "no host"},
	    {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://a b/", "no host"},
	    {"OTEL_TRACES_SAMPLER", "xray", "not one of"},
	    {"OTEL_TRACES_SAMPLER_ARG", "2", "ratio from 0 to 1"},
	    {"OTEL_BSP_MAX_QUEUE_SIZE", "0", "whole number"},
	    {"OTEL_BSP_MAX_QUEUE_SIZE", "12x", "whole number"},
	    {"OTEL_BSP_SCHEDULE_DELAY", "-5", "whole number"},
	    {"OTEL_EXPORTER_OTLP_TIMEOUT", "99999999999999999999",
	     "whole number"},
	    {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5000", "more than"},
	    {"OTEL_EXPORTER_OTLP_HEADERS", "a=b", "not offered"},
	    {"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", "not offered"},
	    {"OTEL_SERVICE_NAME", "a\tb", "control"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *kv[] = {"OTEL_EXPORTER_OTLP_ENDPOINT",
				    "http://127.0.0.1:4318",
				    "OTEL_TRACES_SAMPLER",
				    "traceidratio",
				    bad[i].var,
				    bad[i].value,
				    NULL};
		if (strcmp(bad[i].var, "OTEL_EXPORTER_OTLP_ENDPOINT") == 0)
			kv[0] = "UNUSED";
		if (strcmp(bad[i].var, "OTEL_TRACES_SAMPLER") == 0)
			kv[2] = "UNUSED";
		err[0] = '\0';
		cr_expect_eq(conf_of(&conf, err, kv), TBX_ECONF, "%s=%s taken",
			     bad[i].var, bad[i].value);
		cr_expect(strstr(err, bad[i].var) && strstr(err, bad[i].says),
			  "%s=%s: '%s'", bad[i].var, bad[i].value, err);
	}
}

/* ---- the exporter against local servers ---- */

typedef struct collector {
	struct MHD_Daemon *d;
	int port;
	unsigned status; /* what it answers */
	const char *answer;
	pthread_mutex_t lock;
	size_t requests, spans;
	char *last; /* the last body */
} collector_t;

typedef struct upload {
	char *p;
	size_t len;
} upload_t;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
				  const char *url, const char *method,
				  const char *version, const char *data,
				  size_t *data_size, void **con_cls)
{
	collector_t *c = cls;
	upload_t *u = *con_cls;
	struct MHD_Response *r;
	enum MHD_Result ret;

	(void)version;
	if (!u) {
		*con_cls = calloc(1, sizeof(upload_t));
		return MHD_YES;
	}
	if (*data_size) {
		u->p = realloc(u->p, u->len + *data_size + 1);
		memcpy(u->p + u->len, data, *data_size);
		u->len += *data_size;
		u->p[u->len] = '\0';
		*data_size = 0;
		return MHD_YES;
	}
	pthread_mutex_lock(&c->lock);
	c->requests++;
	if (strcmp(method, "POST") == 0 && strcmp(url, "/v1/traces") == 0 &&
	    u->p) {
		cJSON *doc = cJSON_Parse(u->p), *rs;
		cr_expect(doc, "the body is not JSON");
		cJSON_ArrayForEach(rs,
				   cJSON_GetObjectItem(doc, "resourceSpans"))
		{
			cJSON *ss;
			cJSON_ArrayForEach(
			    ss, cJSON_GetObjectItem(rs, "scopeSpans"))
			    c->spans += (size_t)cJSON_GetArraySize(
			    cJSON_GetObjectItem(ss, "spans"));
		}
		cJSON_Delete(doc);
		free(c->last);
		c->last = u->p;
		u->p = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	r = MHD_create_response_from_buffer(
	    strlen(c->answer), (void *)c->answer, MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(r, "Content-Type", "application/json");
	ret = MHD_queue_response(conn, c->status, r);
	MHD_destroy_response(r);
	return ret;
}

static void on_done(void *cls, struct MHD_Connection *conn, void **con_cls,
		    enum MHD_RequestTerminationCode toe)
{
	upload_t *u = *con_cls;

	(void)cls, (void)conn, (void)toe;
	if (u) {
		free(u->p);
		free(u);
	}
	*con_cls = NULL;
}

static void collector_start(collector_t *c, unsigned status, const char *answer)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->lock, NULL);
	c->status = status;
	c->answer = answer;
	c->d = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
	    on_request, c, MHD_OPTION_NOTIFY_COMPLETED, on_done, c,
	    MHD_OPTION_END);
	cr_assert(c->d);
	c->port = MHD_get_daemon_info(c->d, MHD_DAEMON_INFO_BIND_PORT)->port;
}

static void collector_stop(collector_t *c)
{
	MHD_stop_daemon(c->d);
	free(c->last);
	pthread_mutex_destroy(&c->lock);
}

static size_t collector_spans(collector_t *c)
{
	size_t n;

	pthread_mutex_lock(&c->lock);
	n = c->spans;
	pthread_mutex_unlock(&c->lock);
	return n;
}

static tbx__otel_conf_t conf_for(int port, size_t queue, size_t batch,
				 int64_t timeout_ms)
{
	tbx__otel_conf_t conf;
	char url[128], err[256];
	const char *kv[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", url, NULL};

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	cr_assert_eq(
	    tbx__otel_conf_read(&conf, "test", from_list, kv, err, sizeof(err)),
	    TBX_OK, "%s", err);
	conf.queue_max = queue;
	conf.batch_max = batch;
	conf.timeout_ms = timeout_ms;
	conf.delay_ms = 50;
	return conf;
}

static tbx__span_t *a_span(int i)
{
	tbx__trace_ctx_t c;
	tbx__span_t *s;

	tbx__trace_id_new(c.trace_id);
	tbx__span_id_new(c.span_id);
	c.flags = 1;
	s = tbx__span_new("work", TBX_SPAN_KIND_INTERNAL, &c, NULL,
			  tbx__now_ns());
	cr_assert(s);
	tbx__attrs_int(&s->attrs, "i", i);
	s->end_ns = tbx__now_ns();
	return s;
}

/* Polls @p done(@p opaque) until it holds, for at most @p seconds (times
 * the sanitizers' factor); an outcome, not a time, is what is checked. */
static int wait_for(int (*done)(void *), void *opaque, int seconds)
{
	for (int i = 0; i < seconds * 20 * tt_time_factor(); i++) {
		if (done(opaque))
			return 1;
		usleep(50000);
	}
	return done(opaque);
}

static int exported_all(void *opaque)
{
	void **p = opaque;
	tbx__exporter_stats_t st;

	tbx__exporter_stats(p[0], &st);
	return st.exported + st.failed == *(uint64_t *)p[1];
}

Test(exporter, every_span_reaches_the_collector, .timeout = 120)
{
	collector_t c;
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	tbx__exporter_stats_t st;
	char err[256];
	uint64_t want = 1000;
	void *args[2];

	collector_start(&c, 200, "{}");
	conf = conf_for(c.port, 4096, 100, 10000);
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)), "%s",
		  err);
	for (uint64_t i = 0; i < want; i++)
		cr_assert_eq(tbx__exporter_enqueue(e, a_span((int)i)), 0);
	tbx__exporter_kick(e);
	args[0] = e;
	args[1] = &want;
	cr_assert(wait_for(exported_all, args, 60), "not all exported");
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.exported, want);
	cr_expect_eq(st.failed, 0);
	cr_expect_eq(st.dropped, 0);
	cr_expect_geq(st.requests, 10, "batches of at most 100");
	cr_expect_eq(collector_spans(&c), want);
	pthread_mutex_lock(&c.lock);
	cr_expect(strstr(c.last, "\"service.name\""));
	cr_expect(strstr(c.last, "\"stringValue\":\"test\""));
	pthread_mutex_unlock(&c.lock);
	tbx__exporter_destroy(e, 5000);
	collector_stop(&c);
}

Test(exporter, what_is_queued_is_sent_at_shutdown, .timeout = 120)
{
	collector_t c;
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	char err[256];

	collector_start(&c, 200, "{}");
	conf = conf_for(c.port, 4096, 512, 10000);
	conf.delay_ms = 3600000; /* only the shutdown sends */
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 37; i++)
		tbx__exporter_enqueue(e, a_span(i));
	tbx__exporter_destroy(e, 30000);
	cr_expect_eq(collector_spans(&c), 37);
	collector_stop(&c);
}

Test(exporter, refusals_and_partial_success_are_counted, .timeout = 120)
{
	collector_t c;
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	tbx__exporter_stats_t st;
	char err[256];
	uint64_t want = 20;
	void *args[2] = {NULL, &want};

	collector_start(&c, 503, "busy");
	conf = conf_for(c.port, 100, 10, 10000);
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 20; i++)
		tbx__exporter_enqueue(e, a_span(i));
	tbx__exporter_kick(e);
	args[0] = e;
	cr_assert(wait_for(exported_all, args, 60));
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.failed, 20);
	cr_expect_eq(st.exported, 0);
	cr_expect_eq(st.request_errors, st.requests);
	cr_expect_geq(st.requests, 2);
	tbx__exporter_destroy(e, 1000);
	collector_stop(&c);

	collector_start(&c, 200,
			"{\"partialSuccess\":{\"rejectedSpans\":\"3\","
			"\"errorMessage\":\"too old\"}}");
	conf = conf_for(c.port, 100, 10, 10000);
	conf.delay_ms = 3600000; /* one request, of all 10 */
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 10; i++)
		tbx__exporter_enqueue(e, a_span(i));
	want = 10;
	args[0] = e;
	tbx__exporter_kick(e);
	cr_assert(wait_for(exported_all, args, 60));
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.exported, 7);
	cr_expect_eq(st.failed, 3);
	tbx__exporter_destroy(e, 1000);
	collector_stop(&c);
}

/* A port nobody listens on. */
static int dead_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

Test(exporter, a_dead_collector_loses_spans_counted_never_waited_for,
     .timeout = 120)
{
	tbx__otel_conf_t conf = conf_for(dead_port(), 50, 10, 2000);
	tbx__exporter_t *e;
	tbx__exporter_stats_t st;
	char err[256];
	uint64_t queued = 0, dropped = 0;

	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 5000; i++) {
		if (tbx__exporter_enqueue(e, a_span(i)) == 0)
			queued++;
		else
			dropped++;
	}
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.enqueued, queued);
	cr_expect_eq(st.dropped, dropped);
	/* How many were dropped depends on how fast the refusals come: the
	 * never-answering collector below pins that down. */
	tbx__exporter_destroy(e, 2000);

	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 500; i++)
		tbx__exporter_enqueue(e, a_span(i));
	tbx__exporter_kick(e);
	uint64_t all = 500;
	void *args[2] = {e, &all};
	/* Every span is either refused at the door or lost in a failed
	 * request; nothing stays held. */
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.enqueued + st.dropped, 500);
	all = st.enqueued;
	cr_assert(wait_for(exported_all, args, 60));
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.exported, 0);
	cr_expect_eq(st.failed, st.enqueued);
	cr_expect_gt(st.request_errors, 0);
	cr_expect_eq(st.held, 0);
	tbx__exporter_destroy(e, 2000);
}

/* A server that takes connections into its backlog and never reads or
 * answers: every request hangs until its timeout. */
Test(exporter, a_collector_that_never_answers_never_stalls_the_producer,
     .timeout = 180)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	tbx__otel_conf_t conf;
	tbx__exporter_t *e;
	tbx__exporter_stats_t st;
	char err[256];

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	cr_assert(listen(fd, 16) == 0);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	/* A request timeout far longer than the test: only the shutdown's
	 * bound can end the stuck request. */
	conf = conf_for(ntohs(sa.sin_port), 100, 10, 600000);
	cr_assert(e = tbx__exporter_new(&conf, NULL, err, sizeof(err)));
	for (int i = 0; i < 10; i++)
		tbx__exporter_enqueue(e, a_span(i));
	tbx__exporter_kick(e);
	/* The thread is stuck in its request now, or about to be; the
	 * producer goes on regardless, 100000 spans, and is never held. */
	for (int i = 0; i < 100000; i++)
		tbx__exporter_enqueue(e, a_span(i));
	tbx__exporter_stats(e, &st);
	cr_expect_eq(st.exported, 0);
	cr_expect_leq(st.held, 100, "the queue's bound holds");
	cr_expect_eq(st.enqueued + st.dropped, 100010);
	cr_expect_geq(st.dropped, 100010 - 100 - 10);
	/* Shutdown ends the stuck request within its bound (the test's
	 * timeout would catch a hang). */
	tbx__exporter_destroy(e, 500);
	close(fd);
}
