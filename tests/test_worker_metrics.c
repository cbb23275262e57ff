/*
 * The metrics an operator scrapes: GET /metrics on metrics.listen in the
 * Prometheus text format, the same text in metrics.textfile, librdkafka's
 * statistics on GET /stats.json, and a server that refuses what is not a
 * scrape and closes idle connections.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "consumer/metrics.h"
#include "consumer/worker.h"
#include "support.h"

/** Sends @p request to 127.0.0.1:@p port and @returns the whole response
 *  (malloc'ed; "" when the server closed without one). */
static char *http(int port, const char *request)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	cr_assert(fd >= 0 && buf);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
		  "connect: %s", strerror(errno));
	cr_assert(write(fd, request, strlen(request)) ==
		  (ssize_t)strlen(request));
	for (;;) {
		ssize_t n;
		cr_assert(poll(&pfd, 1, 30000 * tt_time_factor()) == 1,
			  "no response");
		if (len + 1 == cap) {
			cap *= 2;
			cr_assert(buf = realloc(buf, cap));
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(fd);
	return buf;
}

/** The value of the sample line that starts with @p series (name and
 *  labels, exactly), or -1 when there is none. */
static double value_of(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p += !!p) {
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	}
	return -1;
}

/** Every line is a comment or "tokenbox_NAME{LABELS} NUMBER". */
static void assert_well_formed(const char *body)
{
	char *copy = strdup(body), *save = NULL;

	for (char *l = strtok_r(copy, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		char *brace, *end, *space;
		if (l[0] == '#') {
			cr_expect(strncmp(l, "# HELP tokenbox_", 16) == 0 ||
				      strncmp(l, "# TYPE tokenbox_", 16) == 0,
				  "'%s'", l);
			continue;
		}
		cr_expect(strncmp(l, "tokenbox_", 9) == 0, "'%s'", l);
		brace = strchr(l, '{');
		end = strrchr(l, '}');
		space = strrchr(l, ' ');
		cr_expect(brace && end && space && end < space,
			  "not NAME{LABELS} VALUE: '%s'", l);
		if (space) {
			char *num_end;
			strtod(space + 1, &num_end);
			cr_expect(*num_end == '\0' && num_end > space + 1,
				  "'%s'", l);
		}
	}
	free(copy);
}

static const char *body_of(const char *response)
{
	const char *b = strstr(response, "\r\n\r\n");

	cr_assert(b, "no head: '%s'", response);
	return b + 4;
}

typedef struct want {
	const char *db;
	int port;
} want_t;

/* Five rows handled and the metrics refreshed since. */
static int five_scraped(void *opaque)
{
	want_t *w = opaque;
	char *r;
	int ok;

	if (tt_count(w->db, "SELECT COUNT(*) FROM hop1") < 5)
		return 0;
	r = http(w->port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
	ok =
	    value_of(body_of(r), "tokenbox_processed_total{group=\"g1\"}") ==
		5 &&
	    value_of(body_of(r), "tokenbox_rdkafka_tx_total{group=\"g1\"}") > 0;
	free(r);
	return ok;
}

Test(metrics, scrape_textfile_and_librdkafka_statistics, .timeout = 180)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s1.db"), *tokens = tt_path(dir, "t.db");
	char *prom = tt_path(dir, "worker.prom");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop1"};
	char err[512], *r, *file;
	const char *body;
	want_t want = {store, 0};
	cJSON *stats;
	FILE *f;
	long size;

	tt_cluster_topic(c, "in", 2);
	tt_hop_table(store, "hop1");
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(c->bootstraps, "g1", store, tokens, "metrics.listen",
		    "127.0.0.1:0", "metrics.textfile", prom,
		    "metrics.interval.ms", "100",
		    "kafka.statistics.interval.ms", "100", NULL),
	    err, sizeof(err));
	cr_assert(w, "%s", err);
	want.port = tbx__metrics_port(w->metrics);
	cr_assert_gt(want.port, 0);

	/* Before any work: the counters are there, at zero. */
	r = http(want.port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
	cr_expect(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r);
	cr_expect(strstr(r, "Content-Type: text/plain; version=0.0.4"), "%s",
		  r);
	body = body_of(r);
	assert_well_formed(body);
	cr_expect_eq(value_of(body, "tokenbox_processed_total{group=\"g1\"}"),
		     0, "%s", body);
	cr_expect_eq(value_of(body, "tokenbox_outbox_pending{group=\"g1\"}"),
		     0);
	free(r);

	tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(c->bootstraps, tokens, "in", "Ping", 5, 2, "m");
	cr_assert(tt_drive(&w, 1, five_scraped, &want, 1, 60));

	/* The values moved. */
	r = http(want.port, "GET /metrics HTTP/1.1\r\n\r\n");
	body = body_of(r);
	assert_well_formed(body);
	cr_expect_eq(value_of(body, "tokenbox_consumed_total{group=\"g1\"}"),
		     5);
	cr_expect_eq(
	    value_of(body, "tokenbox_tokens_consumed_total{group=\"g1\"}"), 5);
	cr_expect_eq(
	    value_of(body, "tokenbox_assigned_partitions{group=\"g1\"}"), 2);
	cr_expect_geq(
	    value_of(body,
		     "tokenbox_batch_duration_seconds_count{group=\"g1\"}"),
	    1);
	cr_expect_eq(
	    value_of(body,
		     "tokenbox_batch_duration_seconds_count{group=\"g1\"}"),
	    value_of(body, "tokenbox_batch_duration_seconds_bucket{group="
			   "\"g1\",le=\"+Inf\"}"));
	/* Every record was read: no lag left on the partitions read
	 * (one without records has no position yet, and no sample). */
	{
		int lags = 0;
		for (const char *p = strstr(body, "\ntokenbox_consumer_lag{");
		     p; p = strstr(p + 1, "\ntokenbox_consumer_lag{")) {
			cr_expect(strncmp(strchr(p, '}'), "} 0\n", 4) == 0,
				  "%.80s", p + 1);
			lags++;
		}
		cr_expect_gt(lags, 0, "%s", body);
	}
	cr_expect(strstr(body, "# TYPE tokenbox_batch_duration_seconds "
			       "histogram\n"));
	free(r);

	/* The textfile: the same kind of text, written whole. */
	f = fopen(prom, "r");
	cr_assert(f, "%s: %s", prom, strerror(errno));
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	file = calloc(1, (size_t)size + 1);
	cr_assert(fread(file, 1, (size_t)size, f) == (size_t)size);
	fclose(f);
	assert_well_formed(file);
	cr_expect_eq(value_of(file, "tokenbox_processed_total{group=\"g1\"}"),
		     5, "%s", file);
	free(file);

	/* librdkafka's statistics, passed through. */
	r = http(want.port, "GET /stats.json HTTP/1.1\r\n\r\n");
	cr_expect(strstr(r, "Content-Type: application/json"), "%s", r);
	stats = cJSON_Parse(body_of(r));
	cr_expect(stats && cJSON_GetObjectItem(stats, "brokers"), "%s", r);
	cJSON_Delete(stats);
	free(r);

	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
	free(prom);
}

Test(metrics, the_server_refuses_what_is_not_a_scrape, .timeout = 120)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s1.db");
	char err[512], *r, buf[16];
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct pollfd pfd;
	int port, fd;
	tbx_worker_t *w =
	    tbx_worker_new(tt_conf("127.0.0.1:1", "g1", store, NULL,
				   "metrics.listen", "0", NULL),
			   err, sizeof(err));

	cr_assert(w, "%s", err);
	port = tbx__metrics_port(w->metrics);
	cr_assert_gt(port, 0);
	r = http(port, "POST /metrics HTTP/1.1\r\n\r\n");
	cr_expect(strncmp(r, "HTTP/1.1 405 ", 13) == 0, "%s", r);
	cr_expect(strstr(r, "Allow: GET, HEAD\r\n"), "%s", r);
	free(r);
	r = http(port, "GET /secrets HTTP/1.1\r\n\r\n");
	cr_expect(strncmp(r, "HTTP/1.1 404 ", 13) == 0, "%s", r);
	free(r);
	/* Not HTTP: libmicrohttpd closes without an answer, or says 400. */
	r = http(port, "hello\r\n\r\n");
	cr_expect(r[0] == '\0' || strncmp(r, "HTTP/1.1 400 ", 13) == 0, "%s",
		  r);
	free(r);
	r = http(port, "HEAD /metrics HTTP/1.0\r\n\r\n");
	cr_expect(strncmp(r, "HTTP/1.1 200 ", 13) == 0, "%s", r);
	cr_expect_str_empty(body_of(r), "HEAD has no body");
	free(r);
	{
		/* a head that never ends: 414 for its request target */
		char *big = malloc(TBX_METRICS_REQUEST_MAX * 2 + 1);
		memset(big, 'a', TBX_METRICS_REQUEST_MAX * 2);
		memcpy(big, "GET /", 5);
		big[TBX_METRICS_REQUEST_MAX * 2] = '\0';
		r = http(port, big);
		cr_expect(strncmp(r, "HTTP/1.1 414 ", 13) == 0 ||
			      strncmp(r, "HTTP/1.1 431 ", 13) == 0,
			  "%.40s", r);
		free(r);
		free(big);
	}

	/* An idle connection is closed by the server. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	pfd = (struct pollfd){.fd = fd, .events = POLLIN};
	cr_assert(poll(&pfd, 1,
		       (TBX_METRICS_IDLE_MS + 30000) * tt_time_factor()) == 1,
		  "the idle connection stayed open");
	cr_expect_eq(read(fd, buf, sizeof(buf)), 0);
	close(fd);

	/* Bad values are refused when set. */
	tbx_conf_t *conf = tbx_conf_new();
	cr_expect_eq(tbx_conf_set(conf, "metrics.listen", "localhost:http", err,
				  sizeof(err)),
		     TBX_ECONF);
	cr_expect(strstr(err, "metrics.listen"), "%s", err);
	cr_expect_eq(
	    tbx_conf_set(conf, "metrics.listen", "::1:9400", err, sizeof(err)),
	    TBX_ECONF);
	cr_expect_eq(
	    tbx_conf_set(conf, "metrics.listen", "70000", err, sizeof(err)),
	    TBX_ECONF);
	cr_expect_eq(tbx_conf_set(conf, "metrics.listen", "[::1]:9400", err,
				  sizeof(err)),
		     TBX_OK);
	tbx_conf_destroy(conf);

	tbx_worker_destroy(w);
	tt_rmrf(dir);
	free(dir);
	free(store);
}

typedef struct progress {
	tbx_worker_t *w;
	uint64_t processed;
} progress_t;

static int processed_at_least(void *opaque)
{
	progress_t *p = opaque;
	tbx_stats_t st;

	tbx_worker_stats(p->w, &st);
	return st.processed >= p->processed;
}

Test(metrics, consumer_lag_counts_the_records_not_read_yet, .timeout = 180)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s1.db"), *tokens = tt_path(dir, "t.db");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop1"};
	char err[512], *r;
	const char *series = "tokenbox_consumer_lag{group=\"g1\",topic=\"in\","
			     "partition=\"0\"}";
	double lag;

	tt_cluster_topic(c, "in", 1);
	tt_hop_table(store, "hop1");
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(c->bootstraps, "g1", store, tokens, "metrics.listen", "0",
		    "batch.max.messages", "1", NULL),
	    err, sizeof(err));
	cr_assert(w, "%s", err);
	tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(c->bootstraps, tokens, "in", "Ping", 5, 1, "m");

	/* One record of five handled: four are left to read. */
	progress_t p = {w, 1};
	cr_assert(tt_drive(&w, 1, processed_at_least, &p, 0, 60));
	tbx__worker_metrics_refresh(w, 1);
	r = http(tbx__metrics_port(w->metrics),
		 "GET /metrics HTTP/1.1\r\n\r\n");
	lag = value_of(body_of(r), series);
	free(r);
	p.processed = 5;
	cr_assert(tt_drive(&w, 1, processed_at_least, &p, 0, 60));
	cr_expect_gt(lag, 0, "lag %g after one record of five", lag);
	cr_expect_leq(lag, 4);

	/* All read: none left. */
	tbx__worker_metrics_refresh(w, 1);
	r = http(tbx__metrics_port(w->metrics),
		 "GET /metrics HTTP/1.1\r\n\r\n");
	cr_expect_eq(value_of(body_of(r), series), 0, "%s", r);
	free(r);

	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}
