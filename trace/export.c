/*
 * The OTLP/HTTP exporter, protobuf or JSON bodies (see export.h).
 *
 * The queue is a list of spans under a mutex that every holder keeps for
 * a few pointer moves only: the producer appends (or drops), the thread
 * takes the whole list and sends it in requests of batch_max spans
 * outside the lock.  `held` counts the spans queued and those taken but
 * not yet sent, so memory stays bounded by queue_max spans whatever the
 * collector does.
 *
 * Spans sent (or lost in a failed request) are not freed: the thread
 * clears them and hands them back on a free list, a stack under the
 * same lock, which tbx__exporter_span_new() pops on the thread that
 * makes spans.  A span freed on another thread than the one that
 * allocated it never returns to that thread's malloc cache: each new
 * span cost a malloc of some 500 instructions, each free as many on
 * the exporter's thread.  The spans on the list and those held are at
 * most queue_max (what the queue alone bounded before): a request's spans
 * that do not fit are freed.
 * Under AddressSanitizer a span on the list is poisoned but for its
 * link, so that a use after its hand-over is still caught.
 */
#include "trace/export.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"

#if defined(__SANITIZE_ADDRESS__)
#define TBX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TBX_ASAN 1
#endif
#endif
#ifdef TBX_ASAN
#include <sanitizer/asan_interface.h>
/* A span on the free list: everything but its link is off limits. */
#define SPAN_POISON(s)                                                         \
	ASAN_POISON_MEMORY_REGION((char *)(s) + sizeof((s)->next),             \
				  sizeof(*(s)) - sizeof((s)->next))
#define SPAN_UNPOISON(s) ASAN_UNPOISON_MEMORY_REGION((s), sizeof(*(s)))
#else
#define SPAN_POISON(s)	 ((void)(s))
#define SPAN_UNPOISON(s) ((void)(s))
#endif

/* ---- configuration ---- */

static const char *env_get(const char *name, void *opaque)
{
	(void)opaque;
	return getenv(name);
}

static int has_ctl(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s <= 0x20 || *s == 0x7f)
			return 1;
	return 0;
}

/* An http:// or https:// URL with a host, no spaces or control
 * characters, at most TBX_OTEL_URL_MAX bytes. */
static int check_url(const char *var, const char *url, char *errstr,
		     size_t errstr_size)
{
	const char *host;

	if (strncmp(url, "http://", 7) == 0)
		host = url + 7;
	else if (strncmp(url, "https://", 8) == 0)
		host = url + 8;
	else
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: '%s' is not an http:// or https:// URL",
				   var, url);
	if (!*host || *host == '/' || *host == ':' || has_ctl(url))
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: '%s' has no host, or has spaces or "
				   "control characters",
				   var, url);
	if (strlen(url) > TBX_OTEL_URL_MAX)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: longer than %d bytes", var,
				   TBX_OTEL_URL_MAX);
	return TBX_OK;
}

/* A whole decimal number from @p min to @p max; unset: @p *out kept. */
static int read_num(tbx__getenv_fn *get, void *opaque, const char *var,
		    long long min, long long max, long long *out, char *errstr,
		    size_t errstr_size)
{
	const char *v = get(var, opaque);
	long long n = 0;

	if (!v || !*v)
		return TBX_OK;
	for (const char *p = v; *p; p++) {
		if (*p < '0' || *p > '9' || n > (max - (*p - '0')) / 10)
			return tbx__seterr(errstr, errstr_size, TBX_ECONF,
					   "%s: '%s' is not a whole number "
					   "from %lld to %lld",
					   var, v, min, max);
		n = n * 10 + (*p - '0');
	}
	if (n < min)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: '%s' is not a whole number from %lld "
				   "to %lld",
				   var, v, min, max);
	*out = n;
	return TBX_OK;
}

/* An OTLP protocol's name; unset or empty: @p *out kept. */
static int read_protocol(const char *var, const char *v,
			 tbx__otlp_protocol_t *out, char *errstr,
			 size_t errstr_size)
{
	if (!v || !*v)
		return TBX_OK;
	if (strcmp(v, "http/protobuf") == 0) {
		*out = TBX_OTLP_HTTP_PROTOBUF;
		return TBX_OK;
	}
	if (strcmp(v, "http/json") == 0) {
		*out = TBX_OTLP_HTTP_JSON;
		return TBX_OK;
	}
	if (strcmp(v, "grpc") == 0)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: 'grpc' is not offered: tokenbox "
				   "exports OTLP over HTTP only; set it to "
				   "http/protobuf (the default) or http/json, "
				   "and the endpoint to the collector's "
				   "OTLP/HTTP port (4318 by convention)",
				   var);
	return tbx__seterr(errstr, errstr_size, TBX_ECONF,
			   "%s: '%s' is not a protocol (http/protobuf or "
			   "http/json; grpc is not offered)",
			   var, v);
}

int tbx__otel_conf_read(tbx__otel_conf_t *conf, const char *default_service,
			tbx__getenv_fn *get, void *opaque, char *errstr,
			size_t errstr_size)
{
	const char *v, *base, *traces;
	long long q = 2048, b = 512, d = 5000, t = 10000;
	int err;

	if (!get)
		get = env_get;
	memset(conf, 0, sizeof(*conf));
	conf->disabled = 1;

	v = get("OTEL_SDK_DISABLED", opaque);
	if (v && *v && strcasecmp(v, "true") != 0 &&
	    strcasecmp(v, "false") != 0)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "OTEL_SDK_DISABLED: '%s' is neither true "
				   "nor false",
				   v);
	if (v && strcasecmp(v, "true") == 0)
		return TBX_OK;
	v = get("OTEL_TRACES_EXPORTER", opaque);
	if (v && *v && strcmp(v, "otlp") != 0 && strcmp(v, "none") != 0)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "OTEL_TRACES_EXPORTER: '%s' is not offered "
				   "(otlp, or none for no traces)",
				   v);
	if (v && strcmp(v, "none") == 0)
		return TBX_OK;
	conf->protocol = TBX_OTLP_HTTP_PROTOBUF;
	if ((err = read_protocol("OTEL_EXPORTER_OTLP_PROTOCOL",
				 get("OTEL_EXPORTER_OTLP_PROTOCOL", opaque),
				 &conf->protocol, errstr, errstr_size)) ||
	    (err = read_protocol(
		 "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		 get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", opaque),
		 &conf->protocol, errstr, errstr_size)))
		return err;
	static const char *const refused[] = {
	    "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	    "OTEL_EXPORTER_OTLP_COMPRESSION",
	    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		v = get(refused[i], opaque);
		if (v && *v &&
		    !(strstr(refused[i], "COMPRESSION") &&
		      strcmp(v, "none") == 0))
			return tbx__seterr(errstr, errstr_size, TBX_ECONF,
					   "%s: not offered by tokenbox's "
					   "exporter (unset it, or put a "
					   "collector in between that adds "
					   "it)",
					   refused[i]);
	}

	base = get("OTEL_EXPORTER_OTLP_ENDPOINT", opaque);
	traces = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", opaque);
	if (traces && *traces) {
		if ((err = check_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
				     traces, errstr, errstr_size)))
			return err;
		tbx__strlcpy(conf->endpoint, traces, sizeof(conf->endpoint));
	} else if (base && *base) {
		size_t n = strlen(base);
		if ((err = check_url("OTEL_EXPORTER_OTLP_ENDPOINT", base,
				     errstr, errstr_size)))
			return err;
		if (n + sizeof("/v1/traces") > sizeof(conf->endpoint))
			return tbx__seterr(
			    errstr, errstr_size, TBX_ECONF,
			    "OTEL_EXPORTER_OTLP_ENDPOINT: longer than %d "
			    "bytes with /v1/traces",
			    TBX_OTEL_URL_MAX);
		snprintf(conf->endpoint, sizeof(conf->endpoint), "%s%s", base,
			 base[n - 1] == '/' ? "v1/traces" : "/v1/traces");
	}

	v = get("OTEL_SERVICE_NAME", opaque);
	if (!v || !*v)
		v = default_service;
	if (!v || !*v || strlen(v) > TBX_OTEL_SERVICE_MAX)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "OTEL_SERVICE_NAME: want 1 to %d bytes",
				   TBX_OTEL_SERVICE_MAX);
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return tbx__seterr(errstr, errstr_size, TBX_ECONF,
					   "OTEL_SERVICE_NAME: has control "
					   "characters");
	tbx__strlcpy(conf->service_name, v, sizeof(conf->service_name));

	if ((err = tbx__sampler_init(
		 &conf->sampler, get("OTEL_TRACES_SAMPLER", opaque),
		 get("OTEL_TRACES_SAMPLER_ARG", opaque), errstr, errstr_size)))
		return err;
	if ((err = read_num(get, opaque, "OTEL_BSP_MAX_QUEUE_SIZE", 1, 1000000,
			    &q, errstr, errstr_size)) ||
	    (err = read_num(get, opaque, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1,
			    1000000, &b, errstr, errstr_size)) ||
	    (err = read_num(get, opaque, "OTEL_BSP_SCHEDULE_DELAY", 1, 3600000,
			    &d, errstr, errstr_size)) ||
	    (err = read_num(get, opaque, "OTEL_EXPORTER_OTLP_TIMEOUT", 1,
			    600000, &t, errstr, errstr_size)) ||
	    (err = read_num(get, opaque, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", 1,
			    600000, &t, errstr, errstr_size)))
		return err;
	if (b > q) {
		if (get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", opaque))
			return tbx__seterr(
			    errstr, errstr_size, TBX_ECONF,
			    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE: %lld is more than "
			    "OTEL_BSP_MAX_QUEUE_SIZE (%lld)",
			    b, q);
		b = q;
	}
	conf->queue_max = (size_t)q;
	conf->batch_max = (size_t)b;
	conf->delay_ms = d;
	conf->timeout_ms = t;
	conf->disabled = conf->endpoint[0] == '\0';
	return TBX_OK;
}

/* ---- the exporter ---- */

/* A kind of loss, logged at most once per TBX_EXPORT_WARN_MS. */
typedef struct warn_gate {
	int64_t last_ms; /* 0: never logged */
	uint64_t logged; /* the counter's value at the last line */
} warn_gate_t;

struct tbx__exporter {
	tbx__otel_conf_t conf;
	tbx__attrs_t res_attrs;
	CURL *curl;
	struct curl_slist *headers;

	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	tbx__span_t *head, *tail; /* the queue */
	size_t queued;		  /* in the list */
	size_t held;		  /* queued + taken, not yet sent */
	int kick, stop;
	int64_t deadline_ms; /* stop: the flush ends then (monotonic) */
	/* Spans sent, cleared, for tbx__exporter_span_new(): a stack
	 * linked by their next; with the spans held, at most queue_max. */
	tbx__span_t *free_head;
	size_t free_n;
	uint64_t reused; /* spans taken from it */

	/* Counters: atomics, read without the lock. */
	_Atomic uint64_t enqueued, dropped, exported, failed, requests,
	    request_errors;

	/* The thread's own. */
	warn_gate_t warn_drop, warn_fail;
	char errbuf[CURL_ERROR_SIZE];
	tbx__jbuf_t body, resp; /* body: http/json's */
	tbx__pbuf_t pbody;	/* http/protobuf's */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t on_body(char *p, size_t size, size_t n, void *opaque)
{
	tbx__jbuf_t *b = opaque;
	size_t len = size * n;

	/* Only a short answer is read (partialSuccess); the rest is
	 * skipped, never held. */
	if (b->len < 65536 && !b->oom) {
		size_t take = len < 65536 - b->len ? len : 65536 - b->len;
		char *q = realloc(b->p, b->len + take + 1);
		if (q) {
			b->p = q;
			memcpy(b->p + b->len, p, take);
			b->len += take;
			b->p[b->len] = '\0';
		} else {
			b->oom = 1;
		}
	}
	return len;
}

static void warn_drops(tbx__exporter_t *e);

/* Called by libcurl about once a second while a request is in flight:
 * says the spans dropped meanwhile, and aborts the request once the
 * shutdown's flush is over. */
static int on_progress(void *opaque, curl_off_t dt, curl_off_t dn,
		       curl_off_t ut, curl_off_t un)
{
	tbx__exporter_t *e = opaque;
	int64_t deadline;

	(void)dt, (void)dn, (void)ut, (void)un;
	warn_drops(e);
	pthread_mutex_lock(&e->lock);
	deadline = e->stop ? e->deadline_ms : 0;
	pthread_mutex_unlock(&e->lock);
	return deadline && tbx__mono_ms() >= deadline;
}

static void warn_rate(warn_gate_t *g, uint64_t now_count, const char *what,
		      const char *why)
{
	int64_t now = tbx__mono_ms();

	if (now_count == g->logged ||
	    (g->last_ms && now - g->last_ms < TBX_EXPORT_WARN_MS))
		return;
	tbx__log(TBX_LOG_WARNING,
		 "otel: %llu spans %s since the last report%s%s (%llu in all; "
		 "at most one such line per %d s)",
		 (unsigned long long)(now_count - g->logged), what,
		 why ? ": " : "", why ? why : "", (unsigned long long)now_count,
		 TBX_EXPORT_WARN_MS / 1000);
	g->logged = now_count;
	g->last_ms = now;
}

/* Spans dropped on a full queue, said at WARN (rate-limited).  Called
 * by the thread between requests and during one, from the progress
 * callback: a request that hangs is what fills the queue, and the drops
 * are said while it hangs, not once it ends. */
static void warn_drops(tbx__exporter_t *e)
{
	warn_rate(&e->warn_drop, atomic_load(&e->dropped),
		  "dropped, the export queue being full",
		  "the collector is slower than the spans come "
		  "(OTEL_BSP_MAX_QUEUE_SIZE)");
}

/* The number of spans the collector refused, from an OTLP
 * ExportTraceServiceResponse's partialSuccess (protobuf or JSON, as
 * the request was); 0 when none or unreadable. */
static uint64_t rejected_of(const tbx__jbuf_t *resp,
			    tbx__otlp_protocol_t protocol, size_t sent)
{
	cJSON *doc, *ps, *r;
	uint64_t n = 0;

	if (!resp->len || resp->oom)
		return 0;
	if (protocol == TBX_OTLP_HTTP_PROTOBUF) {
		n = tbx__otlp_proto_rejected((const uint8_t *)resp->p,
					     resp->len);
		return n > sent ? sent : n;
	}
	if (!(doc = cJSON_ParseWithLength(resp->p, resp->len)))
		return 0;
	ps = cJSON_GetObjectItemCaseSensitive(doc, "partialSuccess");
	r = ps ? cJSON_GetObjectItemCaseSensitive(ps, "rejectedSpans") : NULL;
	if (cJSON_IsString(r))
		n = strtoull(r->valuestring, NULL, 10);
	else if (cJSON_IsNumber(r) && r->valuedouble > 0)
		n = (uint64_t)r->valuedouble;
	cJSON_Delete(doc);
	return n > sent ? sent : n;
}

/* Clears the @p n spans of @p spans and puts them on the free list, as
 * many as it has room for; frees the rest. */
static void recycle(tbx__exporter_t *e, tbx__span_t **spans, size_t n)
{
	size_t keep = 0, alive;

	/* Cleared outside the lock; under it, as many as fit pushed at
	 * once.  The spans held (these @p n among them, until the caller
	 * counts them sent) and those on the list stay within queue_max,
	 * as the spans held alone did before there was a list. */
	for (size_t i = 0; i < n; i++)
		tbx__span_clear(spans[i]);
	pthread_mutex_lock(&e->lock);
	alive = e->held - n + e->free_n;
	if (alive < e->conf.queue_max)
		keep = e->conf.queue_max - alive < n ? e->conf.queue_max - alive
						     : n;
	for (size_t i = 0; i < keep; i++) {
		spans[i]->next = e->free_head;
		e->free_head = spans[i];
		SPAN_POISON(spans[i]);
	}
	e->free_n += keep;
	pthread_mutex_unlock(&e->lock);
	for (size_t i = keep; i < n; i++)
		free(spans[i]); /* cleared above */
}

/* Sends @p n spans in one request; hands them back (recycle()). */
static void send_batch(tbx__exporter_t *e, tbx__span_t **spans, size_t n)
{
	tbx__otlp_resource_t res = {e->conf.service_name, &e->res_attrs};
	char why[TBX_OTEL_URL_MAX + CURL_ERROR_SIZE + 64];
	long status = 0;
	CURLcode rc;
	uint64_t ok = 0;

	why[0] = '\0';
	e->body.len = 0;
	e->body.oom = 0;
	e->resp.len = 0;
	e->resp.oom = 0;
	if (e->conf.protocol == TBX_OTLP_HTTP_PROTOBUF) {
		if (tbx__otlp_proto_encode(spans, n, &res, &e->pbody) != 0) {
			snprintf(why, sizeof(why),
				 "out of memory encoding them");
			goto done;
		}
		curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS,
				 tbx__pbuf_data(&e->pbody));
		curl_easy_setopt(e->curl, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)tbx__pbuf_len(&e->pbody));
	} else {
		if (tbx__otlp_json_encode(spans, n, &res, &e->body) != 0) {
			snprintf(why, sizeof(why),
				 "out of memory encoding them");
			goto done;
		}
		curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, e->body.p);
		curl_easy_setopt(e->curl, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)e->body.len);
	}
	e->errbuf[0] = '\0';
	atomic_fetch_add(&e->requests, 1);
	rc = curl_easy_perform(e->curl);
	if (rc == CURLE_OK)
		curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
	if (rc == CURLE_ABORTED_BY_CALLBACK) {
		snprintf(why, sizeof(why),
			 "POST %s: aborted, the shutdown's flush time being up",
			 e->conf.endpoint);
	} else if (rc != CURLE_OK) {
		snprintf(why, sizeof(why), "POST %s: %s", e->conf.endpoint,
			 e->errbuf[0] ? e->errbuf : curl_easy_strerror(rc));
	} else if (status < 200 || status > 299) {
		snprintf(why, sizeof(why), "POST %s: HTTP status %ld",
			 e->conf.endpoint, status);
	} else {
		uint64_t rejected = rejected_of(&e->resp, e->conf.protocol, n);
		ok = n - rejected;
		if (rejected)
			snprintf(why, sizeof(why),
				 "the collector refused %llu of %zu",
				 (unsigned long long)rejected, n);
	}
done:
	if (ok < n) {
		if (ok == 0)
			atomic_fetch_add(&e->request_errors, 1);
		warn_rate(&e->warn_fail,
			  atomic_fetch_add(&e->failed, n - ok) + (n - ok),
			  "lost in failed exports", why);
	}
	recycle(e, spans, n);
	atomic_fetch_add(&e->exported, ok);
}

static void *export_main(void *arg)
{
	tbx__exporter_t *e = arg;
	tbx__span_t **batch = calloc(e->conf.batch_max, sizeof(*batch));

	for (;;) {
		tbx__span_t *list;
		int stopping;

		pthread_mutex_lock(&e->lock);
		if (!e->stop && !e->kick && e->queued < e->conf.batch_max) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += e->conf.delay_ms / 1000;
			ts.tv_nsec += (e->conf.delay_ms % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			while (!e->stop && !e->kick &&
			       e->queued < e->conf.batch_max &&
			       pthread_cond_timedwait(&e->cond, &e->lock,
						      &ts) != ETIMEDOUT)
				;
		}
		e->kick = 0;
		stopping = e->stop;
		list = e->head;
		e->head = e->tail = NULL;
		e->queued = 0;
		pthread_mutex_unlock(&e->lock);

		warn_drops(e);
		while (list) {
			size_t n = 0;
			while (list && n < e->conf.batch_max) {
				tbx__span_t *s = list;
				list = s->next;
				s->next = NULL;
				if (batch) {
					batch[n++] = s;
				} else { /* out of memory for the batch */
					atomic_fetch_add(&e->failed, 1);
					tbx__span_free(s);
					pthread_mutex_lock(&e->lock);
					e->held--;
					pthread_mutex_unlock(&e->lock);
				}
			}
			if (stopping && tbx__mono_ms() >= e->deadline_ms) {
				/* The flush's time is up: the rest is lost. */
				atomic_fetch_add(&e->failed, n);
				recycle(e, batch, n);
			} else if (n) {
				send_batch(e, batch, n);
			}
			pthread_mutex_lock(&e->lock);
			e->held -= n;
			pthread_mutex_unlock(&e->lock);
		}
		if (stopping)
			break;
	}
	free(batch);
	return NULL;
}

tbx__exporter_t *tbx__exporter_new(const tbx__otel_conf_t *conf,
				   const tbx__attrs_t *resource_attrs,
				   char *errstr, size_t errstr_size)
{
	tbx__exporter_t *e;
	pthread_condattr_t ca;
	int64_t connect_ms;

	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK) {
		tbx__seterr(errstr, errstr_size, TBX_EIO,
			    "otel: libcurl does not start: %s",
			    curl_easy_strerror(curl_init_rc));
		return NULL;
	}
	if (!(e = calloc(1, sizeof(*e)))) {
		tbx__seterr(errstr, errstr_size, TBX_ENOMEM, "out of memory");
		return NULL;
	}
	e->conf = *conf;
	if (resource_attrs) {
		for (size_t i = 0; i < resource_attrs->n; i++) {
			const tbx__attr_t *a = &resource_attrs->v[i];
			if (a->type == TBX_ATTR_STRING)
				tbx__attrs_str(&e->res_attrs, a->key, a->v.s,
					       a->len);
			else if (a->type == TBX_ATTR_INT)
				tbx__attrs_int(&e->res_attrs, a->key, a->v.i);
			else
				tbx__attrs_bool(&e->res_attrs, a->key, a->v.b);
		}
	}
	if (!(e->curl = curl_easy_init()) ||
	    !(e->headers = curl_slist_append(
		  NULL, conf->protocol == TBX_OTLP_HTTP_PROTOBUF
			    ? "Content-Type: application/x-protobuf"
			    : "Content-Type: application/json"))) {
		tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
			    "otel: cannot set up libcurl");
		goto fail;
	}
	connect_ms = conf->timeout_ms < 5000 ? conf->timeout_ms : 5000;
	curl_easy_setopt(e->curl, CURLOPT_URL, e->conf.endpoint);
	curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, e->headers);
	curl_easy_setopt(e->curl, CURLOPT_POST, 1L);
	curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)conf->timeout_ms);
	curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)connect_ms);
	curl_easy_setopt(e->curl, CURLOPT_ERRORBUFFER, e->errbuf);
	curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, &e->resp);
	curl_easy_setopt(e->curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(e->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(e->curl, CURLOPT_XFERINFODATA, e);
	curl_easy_setopt(e->curl, CURLOPT_USERAGENT,
			 "tokenbox/" TBX_VERSION_STR);
	/* No redirects: a collector answers, it does not send elsewhere. */
	curl_easy_setopt(e->curl, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e->curl, CURLOPT_PROTOCOLS_STR, "http,https");

	pthread_mutex_init(&e->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&e->thread, NULL, export_main, e) != 0) {
		tbx__seterr(errstr, errstr_size, TBX_EIO,
			    "otel: cannot start the export thread");
		pthread_cond_destroy(&e->cond);
		pthread_mutex_destroy(&e->lock);
		goto fail;
	}
	return e;
fail:
	curl_slist_free_all(e->headers);
	if (e->curl)
		curl_easy_cleanup(e->curl);
	tbx__attrs_free(&e->res_attrs);
	free(e);
	return NULL;
}

tbx__span_t *tbx__exporter_span_new(tbx__exporter_t *e, const char *name,
				    tbx__span_kind_t kind,
				    const tbx__trace_ctx_t *ctx,
				    const uint8_t *parent_id, uint64_t start_ns)
{
	tbx__span_t *span = NULL;

	if (e) {
		pthread_mutex_lock(&e->lock);
		if ((span = e->free_head)) {
			e->free_head = span->next;
			e->free_n--;
			e->reused++;
		}
		pthread_mutex_unlock(&e->lock);
	}
	if (!span)
		return tbx__span_new(name, kind, ctx, parent_id, start_ns);
	SPAN_UNPOISON(span);
	if (!tbx__span_init(span, name, kind, ctx, parent_id, start_ns)) {
		free(span);
		return NULL;
	}
	return span;
}

int tbx__exporter_enqueue(tbx__exporter_t *e, tbx__span_t *span)
{
	int wake = 0;

	if (!span)
		return -1;
	if (!e) {
		tbx__span_free(span);
		return -1;
	}
	span->next = NULL;
	pthread_mutex_lock(&e->lock);
	if (e->held >= e->conf.queue_max || e->stop) {
		pthread_mutex_unlock(&e->lock);
		atomic_fetch_add(&e->dropped, 1);
		tbx__span_free(span);
		return -1;
	}
	if (e->tail)
		e->tail->next = span;
	else
		e->head = span;
	e->tail = span;
	e->queued++;
	e->held++;
	wake = e->queued == e->conf.batch_max;
	pthread_mutex_unlock(&e->lock);
	atomic_fetch_add(&e->enqueued, 1);
	if (wake)
		pthread_cond_signal(&e->cond);
	return 0;
}

void tbx__exporter_kick(tbx__exporter_t *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->kick = 1;
	pthread_cond_signal(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

void tbx__exporter_stats(tbx__exporter_t *e, tbx__exporter_stats_t *st)
{
	memset(st, 0, sizeof(*st));
	if (!e)
		return;
	st->enqueued = atomic_load(&e->enqueued);
	st->dropped = atomic_load(&e->dropped);
	st->exported = atomic_load(&e->exported);
	st->failed = atomic_load(&e->failed);
	st->requests = atomic_load(&e->requests);
	st->request_errors = atomic_load(&e->request_errors);
	pthread_mutex_lock(&e->lock);
	st->held = e->held;
	st->reused = e->reused;
	st->free_spans = e->free_n;
	pthread_mutex_unlock(&e->lock);
}

void tbx__exporter_destroy(tbx__exporter_t *e, int64_t flush_ms)
{
	tbx__exporter_stats_t st;

	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stop = 1;
	e->deadline_ms = tbx__mono_ms() + (flush_ms > 0 ? flush_ms : 0);
	pthread_cond_signal(&e->cond);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->thread, NULL);
	tbx__exporter_stats(e, &st);
	if (st.dropped || st.failed)
		tbx__log(TBX_LOG_WARNING,
			 "otel: exporter stopped: %llu spans exported, %llu "
			 "dropped (queue full), %llu lost in failed exports "
			 "or at shutdown",
			 (unsigned long long)st.exported,
			 (unsigned long long)st.dropped,
			 (unsigned long long)st.failed);
	while (e->free_head) {
		tbx__span_t *s = e->free_head;
		e->free_head = s->next;
		SPAN_UNPOISON(s);
		free(s); /* cleared when it was put there */
	}
	pthread_cond_destroy(&e->cond);
	pthread_mutex_destroy(&e->lock);
	curl_slist_free_all(e->headers);
	curl_easy_cleanup(e->curl);
	tbx__jbuf_free(&e->body);
	tbx__pbuf_free(&e->pbody);
	tbx__jbuf_free(&e->resp);
	tbx__attrs_free(&e->res_attrs);
	free(e);
}
