/*
 * Jaeger's HTTP query API for the otel tier (jaeger_query.h).
 */
#include "jaeger_query.h"

#include <criterion/criterion.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/otlp_json.h"

static size_t on_body(char *p, size_t size, size_t n, void *opaque)
{
	tbx__jbuf_t *b = opaque;
	char *q = realloc(b->p, b->len + size * n + 1);

	cr_assert(q);
	b->p = q;
	memcpy(b->p + b->len, p, size * n);
	b->len += size * n;
	b->p[b->len] = '\0';
	return size * n;
}

char *tt_jaeger_get(const char *url, long timeout_ms)
{
	CURL *c = curl_easy_init();
	tbx__jbuf_t b = {0};
	long status = 0;

	cr_assert(c, "curl_easy_init failed");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	if (status != 200) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

void tt_jaeger_query_base(char *out, size_t size)
{
	const char *q = getenv("TBX_JAEGER_QUERY");
	const char *otlp = getenv("TBX_JAEGER_OTLP"), *colon;

	if (q && *q) {
		snprintf(out, size, "%s", q);
		return;
	}
	cr_assert(otlp && *otlp, "TBX_JAEGER_OTLP is not set");
	colon = strrchr(otlp, ':');
	cr_assert(colon, "TBX_JAEGER_OTLP has no port: %s", otlp);
	snprintf(out, size, "%.*s:%d", (int)(colon - otlp), otlp,
		 atoi(colon + 1) + 1);
}
