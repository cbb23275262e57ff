/*
 * The otel tier, end to end: `tokenbox demo` (publisher --orders-->
 * order-service --payments--> payment-service, duplicates injected at
 * both hops, order-service restarted half-way) exporting to a real
 * Jaeger; Jaeger's query API then holds, for every sampled order, one
 * trace of the publisher's send span, order-service's process span, its
 * send span and payment-service's process span, parent to child; a
 * dropped copy's span says why.  A dead or hanging collector never stops
 * or stalls the pipeline: every order still takes effect exactly once.
 *
 * Needs TBX_JAEGER_OTLP (what `scripts/jaeger.sh start` prints); the
 * query API is TBX_JAEGER_QUERY, else the next port.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "cli_child.h"
#include "jaeger_query.h"
#include "support.h"

#define DEMO_TIMEOUT_MS 300000
#define ORDERS		300

static long long now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (long long)tv.tv_sec * 1000000 + tv.tv_usec;
}

static double num(const cJSON *obj, const char *name)
{
	const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, name);

	cr_assert(cJSON_IsNumber(item), "no number '%s' in the result", name);
	return item->valuedouble;
}

/* Runs the demo with the environment set by the caller: every order
 * once at both hops. */
static void demo_exactly_once(void)
{
	const char *args[] = {"demo",	"--messages", "300", "--json",
			      "--seed", "7",	      NULL};
	cc_result_t res = cc_run_with(args, NULL, 0, DEMO_TIMEOUT_MS);
	cJSON *o;

	cr_assert(res.status != -1, "the demo did not finish: %s", res.err);
	o = cJSON_Parse(res.out);
	cr_assert(o, "stdout is not JSON: %s / %s", res.out, res.err);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "exactly_once")),
		  "not exactly once: %s", res.out);
	cr_expect_eq(num(o, "orders_rows"), ORDERS);
	cr_expect_eq(num(o, "payments_rows"), ORDERS);
	cr_expect_eq(num(o, "worker_restarts"), 1);
	cr_expect_gt(num(o, "duplicates_dropped"), 0);
	cr_expect(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cJSON_Delete(o);
	cc_result_free(&res);
}

static const char *str_of(cJSON *o, const char *key)
{
	cJSON *v = cJSON_GetObjectItem(o, key);
	return cJSON_IsString(v) ? v->valuestring : "";
}

static const char *service_of(cJSON *trace, cJSON *span)
{
	cJSON *procs = cJSON_GetObjectItem(trace, "processes");
	cJSON *p = cJSON_GetObjectItem(procs, str_of(span, "processID"));
	return str_of(p, "serviceName");
}

/* The span id of @p span's parent as Jaeger shows it: its CHILD_OF
 * reference ("" when none).  Jaeger turns the parent reference into a
 * FOLLOWS_FROM one when the span also carries a link to its parent, so
 * a parent is read from CHILD_OF only: such a span has none here. */
static const char *parent_of(cJSON *span)
{
	cJSON *r;

	cJSON_ArrayForEach(r, cJSON_GetObjectItem(span, "references"))
	{
		if (strcmp(str_of(r, "refType"), "CHILD_OF") == 0)
			return str_of(r, "spanID");
	}
	return "";
}

/* Whether @p span has a FOLLOWS_FROM reference (an OTLP link) into its
 * own trace.  tokenbox links only a batch span, the root of a trace of
 * its own, to spans of other traces: such a reference is a link that
 * duplicates the span's parent (or another span of its trace). */
static int links_own_trace(cJSON *span)
{
	cJSON *r;

	cJSON_ArrayForEach(r, cJSON_GetObjectItem(span, "references"))
	{
		if (strcmp(str_of(r, "refType"), "CHILD_OF") != 0 &&
		    strcmp(str_of(r, "traceID"), str_of(span, "traceID")) == 0)
			return 1;
	}
	return 0;
}

/* A span's event @p name (Jaeger: a log with field event=name), or
 * NULL. */
static cJSON *event_of(cJSON *span, const char *name)
{
	cJSON *log, *f;

	cJSON_ArrayForEach(log, cJSON_GetObjectItem(span, "logs"))
	{
		cJSON_ArrayForEach(f, cJSON_GetObjectItem(log, "fields"))
		{
			if (strcmp(str_of(f, "key"), "event") == 0 &&
			    strcmp(str_of(f, "value"), name) == 0)
				return log;
		}
	}
	return NULL;
}

static const char *field_of(cJSON *log, const char *key)
{
	cJSON *f;

	cJSON_ArrayForEach(f, cJSON_GetObjectItem(log, "fields"))
	{
		if (strcmp(str_of(f, "key"), key) == 0)
			return str_of(f, "value");
	}
	return "";
}

/* The span of @p trace by @p service named @p op whose parent is
 * @p parent ("" : none) and, when @p event, with that event. */
static cJSON *find(cJSON *trace, const char *service, const char *op,
		   const char *parent, const char *event)
{
	cJSON *s;

	cJSON_ArrayForEach(s, cJSON_GetObjectItem(trace, "spans"))
	{
		if (strcmp(service_of(trace, s), service) == 0 &&
		    strcmp(str_of(s, "operationName"), op) == 0 &&
		    strcmp(parent_of(s), parent) == 0 &&
		    (!event || event_of(s, event)))
			return s;
	}
	return NULL;
}

typedef struct tally {
	int traces;	/* with the publisher's span */
	int complete;	/* the four spans, parent to child */
	int dropped;	/* process spans of dropped copies that say why */
	int self_links; /* spans with a link into their own trace */
} tally_t;

static tally_t count(cJSON *doc)
{
	tally_t t = {0};
	cJSON *trace, *s;

	cJSON_ArrayForEach(trace, cJSON_GetObjectItem(doc, "data"))
	{
		cJSON *pub = find(trace, "publisher", "send orders", "", NULL);
		cJSON *proc, *send, *pay;

		cJSON_ArrayForEach(s, cJSON_GetObjectItem(trace, "spans"))
		{
			cJSON *ev = event_of(s, "duplicate dropped");
			if (ev && *field_of(ev, "tokenbox.reason"))
				t.dropped++;
			t.self_links += links_own_trace(s);
		}
		if (!pub)
			continue;
		t.traces++;
		proc = find(trace, "order-service", "process orders",
			    str_of(pub, "spanID"), "processed");
		if (!proc)
			continue;
		send = find(trace, "order-service", "send payments",
			    str_of(proc, "spanID"), NULL);
		if (!send)
			continue;
		pay = find(trace, "payment-service", "process payments",
			   str_of(send, "spanID"), "processed");
		if (pay)
			t.complete++;
	}
	return t;
}

Test(otel_demo, sampled_orders_are_one_trace_through_both_hops, .timeout = 900)
{
	char base[256], url[512];
	long long since = now_us() - 1000000;
	tally_t t = {0};

	cr_assert(setenv("OTEL_EXPORTER_OTLP_ENDPOINT",
			 getenv("TBX_JAEGER_OTLP"), 1) == 0);
	setenv("OTEL_BSP_SCHEDULE_DELAY", "100", 1);
	setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio", 1);
	setenv("OTEL_TRACES_SAMPLER_ARG", "0.5", 1);
	demo_exactly_once();

	tt_jaeger_query_base(base, sizeof(base));
	snprintf(url, sizeof(url),
		 "%s/api/traces?service=publisher&start=%lld&limit=100000",
		 base, since);
	/* Jaeger stores what it received a moment later: asked until every
	 * sampled order's trace is whole. */
	for (int i = 0; i < 600 * tt_time_factor(); i++) {
		char *body = tt_jaeger_get(url, 30000L);
		cJSON *doc = body ? cJSON_Parse(body) : NULL;

		free(body);
		if (doc) {
			t = count(doc);
			cJSON_Delete(doc);
		}
		if (t.traces > 0 && t.complete == t.traces && t.dropped > 0)
			break;
		usleep(100000);
	}
	/* About half of the orders sampled, by the trace id. */
	cr_expect_gt(t.traces, ORDERS / 5, "%d sampled traces", t.traces);
	cr_expect_lt(t.traces, ORDERS * 4 / 5, "%d sampled traces", t.traces);
	cr_expect_eq(t.complete, t.traces,
		     "%d of %d sampled orders are whole traces", t.complete,
		     t.traces);
	cr_expect_gt(t.dropped, 0, "no dropped copy's span says why");
	cr_expect_eq(t.self_links, 0,
		     "%d spans carry a link into their own trace (Jaeger: "
		     "FOLLOWS_FROM), e.g. to their parent",
		     t.self_links);
}

/* A listening socket that never accepts: requests to it hang. */
static int hanging_collector(int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(fd >= 0);
	cr_assert(bind(fd, (struct sockaddr *)&a, len) == 0);
	cr_assert(listen(fd, 1) == 0);
	cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	*port = ntohs(a.sin_port);
	return fd;
}

Test(otel_demo, a_dead_collector_never_stops_the_pipeline, .timeout = 900)
{
	int fd, port;
	char url[64];

	/* Nothing listens there: every export fails at once. */
	fd = hanging_collector(&port);
	close(fd);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url, 1);
	setenv("OTEL_BSP_SCHEDULE_DELAY", "50", 1);
	demo_exactly_once();
}

Test(otel_demo, a_hanging_collector_never_stalls_the_pipeline, .timeout = 900)
{
	int fd, port;
	char url[64];

	/* Connections queue, no answer ever comes: each export waits out
	 * its timeout, with the spans held up to the queue's bound. */
	fd = hanging_collector(&port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url, 1);
	setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "600000", 1);
	setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64", 1);
	setenv("OTEL_BSP_SCHEDULE_DELAY", "50", 1);
	demo_exactly_once();
	close(fd);
}
