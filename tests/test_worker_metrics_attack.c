/*
 * The metrics endpoint (metrics.listen) faces the network: hostile
 * clients attack it while the worker handles records -- request heads
 * too long, heads that never end, clients that trickle a byte at a time
 * (slowloris), garbage bytes, and many connections held open.  The worker
 * handles every record, and the endpoint answers a scrape during the
 * attack and after it.  The attackers come from one address (127.0.0.2),
 * the scraper from another (127.0.0.1), as a Prometheus server scrapes
 * from its own host: one client address gets at most
 * TBX_METRICS_CONNS_PER_IP connections.  Every attack is bounded in count and
 * time and sends only to 127.0.0.1.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "consumer/metrics.h"
#include "consumer/worker.h"
#include "fixture.h"
#include "support.h"

#define RECORDS 300

static int port_;
static atomic_int stop_; /* a safety: the attacks end on their own */

/* A connection to the endpoint from @p from (an address of the loopback
 * range) within 2 s, or -1 (a full backlog drops the handshake, which the
 * kernel would retry for minutes). */
static int dial_from(const char *from)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port_)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct pollfd pfd = {.fd = fd, .events = POLLOUT};
	int soerr = 0;
	socklen_t sl = sizeof(soerr);

	struct sockaddr_in src = {.sin_family = AF_INET};

	if (fd < 0)
		return -1;
	inet_pton(AF_INET, from, &src.sin_addr);
	if (bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0) {
		close(fd);
		return -1;
	}
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 &&
	    (errno != EINPROGRESS || poll(&pfd, 1, 2000) != 1 ||
	     getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 ||
	     soerr != 0)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The attackers come from 127.0.0.2, the scraper from 127.0.0.1. */
static int dial(void)
{
	return dial_from("127.0.0.2");
}

/* Sends @p len bytes without waiting for the server; @returns 0, or -1
 * once the server closed (or its buffers are full). */
static int push(int fd, const void *p, size_t len)
{
	ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

	return n < 0 && errno != EAGAIN ? -1 : 0;
}

/* 1 when the server has closed @p fd. */
static int closed_by_server(int fd)
{
	char b[256];
	ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);

	return n == 0 || (n < 0 && errno != EAGAIN);
}

static atomic_int cuts_; /* slowloris connections the server ended */

/* Slowloris: SLOTS connections, each sending a request head one byte a
 * second and reconnecting when cut, for 15 s. */
#define SLOTS 24
static void *slowloris(void *arg)
{
	static const char head[] = "GET /metrics HTTP/1.1\r\nX-Slow: ";
	int fds[SLOTS];

	(void)arg;
	for (int i = 0; i < SLOTS; i++) {
		fds[i] = dial();
		if (fds[i] >= 0)
			push(fds[i], head, sizeof(head) - 1);
	}
	for (int t = 0; t < 15 && !atomic_load(&stop_); t++) {
		for (int i = 0; i < SLOTS; i++) {
			if (fds[i] >= 0 && closed_by_server(fds[i])) {
				atomic_fetch_add(&cuts_, 1);
				close(fds[i]);
				fds[i] = -1;
			}
			if (fds[i] < 0 || push(fds[i], "a", 1) != 0) {
				if (fds[i] >= 0)
					close(fds[i]);
				fds[i] = dial();
				if (fds[i] >= 0)
					push(fds[i], head, sizeof(head) - 1);
			}
		}
		sleep(1);
	}
	for (int i = 0; i < SLOTS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return NULL;
}

/* Heads that never end (1 MiB of header bytes each), oversized heads
 * (64 KiB at once), garbage (bytes of every value), each 20 times. */
static void *heads_and_garbage(void *arg)
{
	char *buf = malloc(65536);

	(void)arg;
	for (int round = 0; round < 20 && !atomic_load(&stop_); round++) {
		int fd = dial();
		if (fd >= 0) { /* endless */
			push(fd, "GET /metrics HTTP/1.1\r\nX-Long: ", 31);
			memset(buf, 'x', 4096);
			for (int k = 0; k < 256 && push(fd, buf, 4096) == 0;
			     k++)
				usleep(1000);
			close(fd);
		}
		if ((fd = dial()) >= 0) { /* oversized, at once */
			memcpy(buf, "GET /metrics HTTP/1.1\r\nX-Big: ", 30);
			memset(buf + 30, 'y', 65536 - 34);
			memcpy(buf + 65536 - 4, "\r\n\r\n", 4);
			push(fd, buf, 65536);
			close(fd);
		}
		if ((fd = dial()) >= 0) { /* garbage */
			for (int i = 0; i < 4096; i++)
				buf[i] = (char)(i * 131 + round);
			push(fd, buf, 4096);
			push(fd, "\r\n\r\n", 4);
			close(fd);
		}
	}
	free(buf);
	return NULL;
}

/* Many connections: 400 opened and held, silent, for a while. */
static void *many(void *arg)
{
	int fds[400], n = 0;

	(void)arg;
	for (int i = 0; i < 400; i++)
		if ((fds[n] = dial()) >= 0)
			n++;
	for (int t = 0; t < 15 && !atomic_load(&stop_); t++)
		sleep(1);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return NULL;
}

/* A scrape: GET /metrics, the whole response (malloc'ed; "" when the
 * server closed without one).  Waits at most 60 s (times the sanitizers'
 * factor) for it. */
static char *scrape(void)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	int fd;
	struct pollfd pfd;

	for (int i = 0;
	     (fd = dial_from("127.0.0.1")) < 0 && i < 60 * tt_time_factor();
	     i++)
		usleep(100000);
	cr_assert(fd >= 0, "cannot connect");
	cr_assert(push(fd, req, sizeof(req) - 1) == 0);
	pfd = (struct pollfd){.fd = fd, .events = POLLIN};
	for (;;) {
		ssize_t n;
		if (poll(&pfd, 1, 60000 * tt_time_factor()) != 1)
			break;
		if (len + 1 == cap)
			cr_assert(buf = realloc(buf, cap *= 2));
		if ((n = read(fd, buf + len, cap - len - 1)) <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(fd);
	return buf;
}

static double processed_of(const char *r)
{
	const char *series = "\ntokenbox_processed_total{group=\"g1\"} ";
	const char *p = strstr(r, series);

	return p ? strtod(p + strlen(series), NULL) : -1;
}

typedef struct state {
	const char *store;
	int64_t want;
	int scraped_during; /* scrapes answered while attacked */
} state_t;

static int processed(void *opaque)
{
	state_t *st = opaque;

	return tt_count(st->store, "SELECT COUNT(*) FROM hop1") >= st->want;
}

/* Scrapes from a thread of its own while the attack runs: 3 s in (the
 * attackers are in) and 9 s in (past the first connections' deadline). */
static void *scrape_during(void *arg)
{
	state_t *st = arg;

	for (int i = 0; i < 2; i++) {
		char *r;
		sleep(i ? 6 : 3);
		r = scrape();
		st->scraped_during +=
		    strncmp(r, "HTTP/1.1 200 ", 13) == 0 &&
		    strstr(r, "tokenbox_processed_total") != NULL;
		free(r);
	}
	return NULL;
}

Test(metrics_attack, the_worker_and_the_endpoint_survive_hostile_clients,
     .timeout = 600)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s1.db"), *tokens = tt_path(dir, "t.db");
	tt_cluster_t *c = tt_cluster_new(1);
	tt_hop_t hop = {.table = "hop1"};
	state_t st = {store, RECORDS / 2, 0};
	pthread_t attackers[3], good;
	char err[512], *r;
	int tries;

	tt_cluster_topic(c, "in", 2);
	tt_hop_table(store, "hop1");
	tbx_worker_t *w = tbx_worker_new(
	    tt_conf(c->bootstraps, "g1", store, tokens, "metrics.listen",
		    "127.0.0.1:0", "metrics.interval.ms", "100", NULL),
	    err, sizeof(err));
	cr_assert(w, "%s", err);
	port_ = tbx__metrics_port(w->metrics);
	cr_assert_gt(port_, 0);
	tbx_worker_register(w, "in", "Ping", tt_hop_handle, &hop);
	cr_assert_eq(tbx_worker_poll(w, 0, NULL), TBX_OK);
	tt_publish(c->bootstraps, tokens, "in", "Ping", RECORDS / 2, 7, "a");

	int64_t t0 = tbx__mono_ms();
	atomic_store(&stop_, 0);
	cr_assert_eq(pthread_create(&attackers[0], NULL, slowloris, NULL), 0);
	cr_assert_eq(
	    pthread_create(&attackers[1], NULL, heads_and_garbage, NULL), 0);
	cr_assert_eq(pthread_create(&attackers[2], NULL, many, NULL), 0);
	cr_assert_eq(pthread_create(&good, NULL, scrape_during, &st), 0);

	/* The worker works on through the attack: half the records are
	 * there when it starts, half come 5 s in. */
	cr_assert(tt_drive(&w, 1, processed, &st, 1, 300),
		  "the worker did not handle its records under attack");
	sleep(5);
	tt_publish(c->bootstraps, tokens, "in", "Ping", RECORDS / 2, 7, "b");
	st.want = RECORDS;
	cr_assert(tt_drive(&w, 1, processed, &st, 1, 300),
		  "the worker did not handle its records under attack");
	fprintf(stderr, "metrics_attack: records handled after %lld ms\n",
		(long long)(tbx__mono_ms() - t0));
	pthread_join(good, NULL);
	fprintf(stderr,
		"metrics_attack: scrape during the attack after %lld ms\n",
		(long long)(tbx__mono_ms() - t0));
	cr_expect_eq(st.scraped_during, 2,
		     "a scrape was not answered during the attack");
	for (int i = 0; i < 3; i++)
		pthread_join(attackers[i], NULL);
	cr_expect_gt(atomic_load(&cuts_), 0,
		     "no trickling client was cut by the server");

	cr_expect_eq(tt_count(store, "SELECT COUNT(*) FROM hop1"), RECORDS);
	cr_expect_eq(tt_count(store, "SELECT COUNT(DISTINCT payload) FROM "
				     "hop1"),
		     RECORDS, "each record once");

	/* After the attack: a scrape answers, with every record counted
	 * (the text is refreshed every 100 ms by the worker's thread). */
	for (tries = 0; tries < 100; tries++) {
		tbx_worker_poll(w, 100, NULL);
		r = scrape();
		cr_assert(strncmp(r, "HTTP/1.1 200 ", 13) == 0, "%.60s", r);
		if (processed_of(r) == RECORDS) {
			free(r);
			break;
		}
		free(r);
	}
	cr_expect_lt(tries, 100, "the scrape never showed every record");
	fprintf(stderr, "metrics_attack: done after %lld ms\n",
		(long long)(tbx__mono_ms() - t0));

	tbx_worker_destroy(w);
	tt_cluster_destroy(c);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}

/* libmicrohttpd's own timeout counts idle time only: a client trickling
 * a byte every half second is never idle.  The server still closes it
 * (TBX_METRICS_IDLE_MS after it came), long before the client would
 * stop trickling. */
Test(metrics_attack, a_trickling_client_is_cut_whatever_it_sends,
     .timeout = 300)
{
	tbx__metrics_t *m;
	char err[256];
	int fd, cut = 0, logfd, saved;
	/* Trickles far longer than the server's bound, then gives up. */
	int rounds = 4 * TBX_METRICS_IDLE_MS / 500 * tt_time_factor();
	char *dir = tt_tmpdir(), *logpath = tt_path(dir, "log"), *log;

	/* The log goes to stderr: into a file for this test. */
	tbx__log_setup(TBX_LOG_INFO, "test");
	logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert(logfd >= 0);
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	cr_assert(saved >= 0 && dup2(logfd, STDERR_FILENO) >= 0);
	close(logfd);

	cr_assert_eq(tbx__metrics_new("127.0.0.1:0", "", &m, err, sizeof(err)),
		     TBX_OK, "%s", err);
	port_ = tbx__metrics_port(m);
	fd = dial_from("127.0.0.1");
	cr_assert(fd >= 0);
	cr_assert_eq(push(fd, "GET /metrics HTTP/1.1\r\nX-Slow: ", 31), 0);
	for (int i = 0; i < rounds && !cut; i++) {
		usleep(500000);
		cut = closed_by_server(fd) || push(fd, "a", 1) != 0;
	}
	cr_expect(cut, "the server kept a trickling connection for %d s",
		  rounds / 2);
	close(fd);
	/* Counted, and said at WARN (the watchdog's next round, 250 ms on). */
	for (int i = 0;
	     i < 40 * tt_time_factor() && tbx__metrics_connections_cut(m) == 0;
	     i++)
		usleep(100000);
	cr_expect_eq(tbx__metrics_connections_cut(m), 1);
	tbx__metrics_destroy(m);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	log = tt_read_text(logpath);
	cr_expect(strstr(log, "WARN") &&
		      strstr(log, "metrics: closed 1 connection(s) still open"),
		  "%s", log);
	free(log);
	unlink(logpath);
	free(logpath);
	tt_rmrf(dir);
	free(dir);
}
