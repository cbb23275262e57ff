/*
 * The metrics server and the textfile (see metrics.h).
 *
 * The server is one thread polling the listening socket, a wake-up pipe
 * and at most TBX_METRICS_CONNS connections.  A connection sends one
 * request head of at most TBX_METRICS_REQUEST_MAX bytes within
 * TBX_METRICS_IDLE_MS, gets one response and is closed (HTTP/1.0 style,
 * "Connection: close"); anything else is refused with a 4xx status and
 * closed.  Responses are written with a send timeout, so a client that
 * does not read holds the thread for at most TBX_METRICS_IDLE_MS.
 */
#include "consumer/metrics.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"

typedef struct conn {
	int fd; /* -1: free */
	size_t len;
	int64_t deadline_ms;
	char buf[TBX_METRICS_REQUEST_MAX];
} conn_t;

struct tbx__metrics {
	int lfd; /* -1: no server */
	int wake[2];
	int port;
	pthread_t thread;
	int have_thread;
	conn_t conns[TBX_METRICS_CONNS];
	pthread_mutex_t lock; /* text and stats */
	char *text;
	char *stats;
	char *textfile; /* NULL: none */
	uint64_t textfile_errors;
	int textfile_failing; /* the last write failed: logged once */
};

int tbx__metrics_parse_listen(const char *value, char *host, size_t host_size,
			      int *port, char *errstr, size_t errstr_size)
{
	const char *colon = strrchr(value, ':'), *p, *hs = value;
	size_t hlen;
	long v = 0;

	if (!*value) {
		*port = -1;
		host[0] = '\0';
		return TBX_OK;
	}
	p = colon ? colon + 1 : value;
	if (!*p || strlen(p) > 5)
		goto bad;
	for (const char *d = p; *d; d++) {
		if (*d < '0' || *d > '9')
			goto bad;
		v = v * 10 + (*d - '0');
	}
	if (v > 65535)
		goto bad;
	hlen = colon ? (size_t)(colon - value) : 0;
	if (hlen >= 2 && value[0] == '[' && value[hlen - 1] == ']') {
		hs = value + 1;
		hlen -= 2;
	} else if (memchr(value, ':', hlen)) {
		goto bad; /* an IPv6 address needs its brackets */
	}
	if (colon && hlen == 0)
		goto bad;
	if (hlen >= host_size)
		goto bad;
	if (hlen) {
		memcpy(host, hs, hlen);
		host[hlen] = '\0';
	} else {
		tbx__strlcpy(host, "127.0.0.1", host_size);
	}
	*port = (int)v;
	return TBX_OK;
bad:
	return tbx__seterr(errstr, errstr_size, TBX_ECONF,
			   "metrics.listen: value '%s' is not PORT, HOST:PORT "
			   "or [IPv6]:PORT with PORT 0..65535",
			   value);
}

static int set_nonblock_cloexec(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
		       fcntl(fd, F_SETFD, FD_CLOEXEC) != 0
		   ? -1
		   : 0;
}

/* Writes all of @p len bytes, bounded by the socket's send timeout. */
static int send_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void respond(int fd, int head_only, const char *status, const char *type,
		    const char *extra, const char *body, size_t body_len)
{
	char head[512];
	struct timeval tv = {TBX_METRICS_IDLE_MS / 1000, 0};
	int fl = fcntl(fd, F_GETFL);
	int n;

	/* Blocking with a timeout from here: a response is written whole
	 * or the connection dropped. */
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	n = snprintf(head, sizeof(head),
		     "HTTP/1.1 %s\r\nContent-Type: %s\r\n"
		     "Content-Length: %zu\r\nConnection: close\r\n"
		     "Cache-Control: no-store\r\n%s\r\n",
		     status, type, body_len, extra ? extra : "");
	if (n < 0 || (size_t)n >= sizeof(head))
		return;
	if (send_all(fd, head, (size_t)n) == 0 && !head_only && body_len)
		send_all(fd, body, body_len);
}

static void respond_text(int fd, const char *status, const char *extra,
			 const char *msg)
{
	respond(fd, 0, status, "text/plain; charset=utf-8", extra, msg,
		strlen(msg));
}

/* Answers the request head in @p c->buf (complete, NUL-terminated). */
static void serve(tbx__metrics_t *m, conn_t *c)
{
	char method[16], target[256], version[16];
	const char *path;
	char *copy = NULL;
	int head_only;
	size_t qlen;

	if (sscanf(c->buf, "%15s %255s %15s", method, target, version) != 3 ||
	    strncmp(version, "HTTP/1.", 7) != 0 || target[0] != '/') {
		respond_text(c->fd, "400 Bad Request", NULL,
			     "expected: GET /metrics HTTP/1.1\n");
		return;
	}
	head_only = strcmp(method, "HEAD") == 0;
	if (!head_only && strcmp(method, "GET") != 0) {
		respond_text(c->fd, "405 Method Not Allowed",
			     "Allow: GET, HEAD\r\n",
			     "only GET and HEAD are served\n");
		return;
	}
	qlen = strcspn(target, "?");
	target[qlen] = '\0';
	path = target;
	pthread_mutex_lock(&m->lock);
	if (strcmp(path, "/metrics") == 0)
		copy = tbx__strdup(m->text ? m->text : "");
	else if (strcmp(path, "/stats.json") == 0)
		copy = tbx__strdup(m->stats ? m->stats : "{}");
	pthread_mutex_unlock(&m->lock);
	if (strcmp(path, "/metrics") == 0 && copy)
		respond(c->fd, head_only, "200 OK",
			"text/plain; version=0.0.4; charset=utf-8", NULL, copy,
			strlen(copy));
	else if (strcmp(path, "/stats.json") == 0 && copy)
		respond(c->fd, head_only, "200 OK", "application/json", NULL,
			copy, strlen(copy));
	else if (copy == NULL && (strcmp(path, "/metrics") == 0 ||
				  strcmp(path, "/stats.json") == 0))
		respond_text(c->fd, "503 Service Unavailable", NULL,
			     "out of memory\n");
	else
		respond_text(c->fd, "404 Not Found", NULL,
			     "served: /metrics, /stats.json\n");
	free(copy);
}

static void conn_close(conn_t *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->len = 0;
}

/* Reads what @p c has sent; answers once the head is complete. */
static void conn_read(tbx__metrics_t *m, conn_t *c)
{
	ssize_t n;

	n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len, 0);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(c);
		return;
	}
	c->len += (size_t)n;
	c->buf[c->len] = '\0';
	if (strstr(c->buf, "\r\n\r\n") || strstr(c->buf, "\n\n")) {
		serve(m, c);
		conn_close(c);
	} else if (c->len == sizeof(c->buf) - 1) {
		respond_text(c->fd, "431 Request Header Fields Too Large", NULL,
			     "request head too long\n");
		conn_close(c);
	}
}

static void *server_main(void *arg)
{
	tbx__metrics_t *m = arg;
	struct pollfd pfd[TBX_METRICS_CONNS + 2];

	for (;;) {
		size_t n = 0, free_slots = 0;
		int64_t now = tbx__mono_ms(), wait = 1000;

		pfd[n++] = (struct pollfd){.fd = m->wake[0], .events = POLLIN};
		for (size_t i = 0; i < TBX_METRICS_CONNS; i++) {
			conn_t *c = &m->conns[i];
			if (c->fd < 0) {
				free_slots++;
				continue;
			}
			if (now >= c->deadline_ms) {
				conn_close(c); /* idle: never sent a head */
				free_slots++;
				continue;
			}
			if (c->deadline_ms - now < wait)
				wait = c->deadline_ms - now;
		}
		/* Full: new connections wait in the backlog. */
		pfd[n++] = (struct pollfd){.fd = free_slots ? m->lfd : -1,
					   .events = POLLIN};
		for (size_t i = 0; i < TBX_METRICS_CONNS; i++)
			pfd[n++] = (struct pollfd){.fd = m->conns[i].fd,
						   .events = POLLIN};
		if (poll(pfd, n, (int)wait) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents)
			break; /* tbx__metrics_destroy() */
		for (size_t i = 0; i < TBX_METRICS_CONNS; i++)
			if (m->conns[i].fd >= 0 && pfd[2 + i].revents)
				conn_read(m, &m->conns[i]);
		if (pfd[1].fd >= 0 && pfd[1].revents) {
			int fd = accept(m->lfd, NULL, NULL);
			if (fd < 0)
				continue;
			if (set_nonblock_cloexec(fd) != 0) {
				close(fd);
				continue;
			}
			for (size_t i = 0; i < TBX_METRICS_CONNS; i++) {
				conn_t *c = &m->conns[i];
				if (c->fd >= 0)
					continue;
				c->fd = fd;
				c->len = 0;
				c->deadline_ms =
				    tbx__mono_ms() + TBX_METRICS_IDLE_MS;
				fd = -1;
				break;
			}
			if (fd >= 0)
				close(fd);
		}
	}
	for (size_t i = 0; i < TBX_METRICS_CONNS; i++)
		conn_close(&m->conns[i]);
	return NULL;
}

static int bind_listen(tbx__metrics_t *m, const char *addr, char *errstr,
		       size_t errstr_size)
{
	char host[300], portstr[16];
	struct addrinfo hints, *res = NULL, *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int port, err, one = 1, saved = 0;

	if ((err = tbx__metrics_parse_listen(addr, host, sizeof(host), &port,
					     errstr, errstr_size)))
		return err;
	if (port < 0)
		return TBX_OK;
	snprintf(portstr, sizeof(portstr), "%d", port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if ((err = getaddrinfo(host, portstr, &hints, &res)) != 0)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "metrics.listen: '%s': %s", addr,
				   gai_strerror(err));
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
				ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, 16) == 0 && set_nonblock_cloexec(fd) == 0) {
			m->lfd = fd;
			break;
		}
		saved = errno;
		close(fd);
	}
	freeaddrinfo(res);
	if (m->lfd < 0)
		return tbx__seterr(errstr, errstr_size, TBX_EIO,
				   "metrics.listen: cannot listen on %s: %s",
				   addr, strerror(saved));
	if (getsockname(m->lfd, (struct sockaddr *)&ss, &sl) == 0)
		m->port = ss.ss_family == AF_INET6
			      ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
			      : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	tbx__log(TBX_LOG_NOTICE, "metrics: serving GET /metrics on %s%s%s:%d",
		 strchr(host, ':') ? "[" : "", host,
		 strchr(host, ':') ? "]" : "", m->port);
	return TBX_OK;
}

int tbx__metrics_new(const char *addr, const char *textfile,
		     tbx__metrics_t **out, char *errstr, size_t errstr_size)
{
	tbx__metrics_t *m;
	int err;

	*out = NULL;
	if (!*addr && !*textfile)
		return TBX_OK;
	if (!(m = calloc(1, sizeof(*m))))
		return tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				   "out of memory");
	m->lfd = m->wake[0] = m->wake[1] = -1;
	for (size_t i = 0; i < TBX_METRICS_CONNS; i++)
		m->conns[i].fd = -1;
	pthread_mutex_init(&m->lock, NULL);
	if (*textfile && !(m->textfile = strdup(textfile))) {
		tbx__metrics_destroy(m);
		return tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				   "out of memory");
	}
	if ((err = bind_listen(m, addr, errstr, errstr_size))) {
		tbx__metrics_destroy(m);
		return err;
	}
	if (m->lfd >= 0) {
		if (pipe(m->wake) != 0 || set_nonblock_cloexec(m->wake[0]) ||
		    set_nonblock_cloexec(m->wake[1]) ||
		    (err = pthread_create(&m->thread, NULL, server_main, m))) {
			tbx__metrics_destroy(m);
			return tbx__seterr(errstr, errstr_size, TBX_EIO,
					   "metrics: cannot start the server "
					   "thread");
		}
		m->have_thread = 1;
	}
	*out = m;
	return TBX_OK;
}

void tbx__metrics_destroy(tbx__metrics_t *m)
{
	if (!m)
		return;
	if (m->have_thread) {
		ssize_t w = write(m->wake[1], "", 1);
		(void)w;
		pthread_join(m->thread, NULL);
	}
	for (int i = 0; i < 2; i++)
		if (m->wake[i] >= 0)
			close(m->wake[i]);
	if (m->lfd >= 0)
		close(m->lfd);
	pthread_mutex_destroy(&m->lock);
	free(m->text);
	free(m->stats);
	free(m->textfile);
	free(m);
}

int tbx__metrics_port(const tbx__metrics_t *m)
{
	return m && m->lfd >= 0 ? m->port : 0;
}

uint64_t tbx__metrics_textfile_errors(const tbx__metrics_t *m)
{
	return m ? m->textfile_errors : 0;
}

/* Writes @p text to PATH.tmp.PID, then renames it over PATH, so that a
 * collector reads the old file or the new one, never half of one. */
static int write_textfile(const char *path, const char *text, char *why,
			  size_t why_size)
{
	size_t n = strlen(path) + 32;
	char *tmp = malloc(n);
	FILE *f;
	int ok;

	if (!tmp)
		return tbx__seterr(why, why_size, -1, "out of memory");
	snprintf(tmp, n, "%s.tmp.%d", path, (int)getpid());
	if (!(f = fopen(tmp, "w"))) {
		tbx__seterr(why, why_size, -1, "%s: %s", tmp, strerror(errno));
		free(tmp);
		return -1;
	}
	ok = fputs(text, f) >= 0;
	ok = (fclose(f) == 0) && ok;
	if (!ok || rename(tmp, path) != 0) {
		tbx__seterr(why, why_size, -1, "%s: %s", ok ? path : tmp,
			    strerror(errno));
		unlink(tmp);
		free(tmp);
		return -1;
	}
	free(tmp);
	return 0;
}

void tbx__metrics_publish(tbx__metrics_t *m, char *text)
{
	char why[512];

	if (!m) {
		free(text);
		return;
	}
	if (m->textfile && text) {
		if (write_textfile(m->textfile, text, why, sizeof(why)) != 0) {
			m->textfile_errors++;
			if (!m->textfile_failing)
				tbx__log(TBX_LOG_WARNING,
					 "metrics.textfile: cannot write: %s "
					 "(retried every metrics.interval.ms; "
					 "counted in "
					 "tokenbox_metrics_textfile_errors_"
					 "total)",
					 why);
			m->textfile_failing = 1;
		} else if (m->textfile_failing) {
			tbx__log(TBX_LOG_NOTICE,
				 "metrics.textfile: written again");
			m->textfile_failing = 0;
		}
	}
	pthread_mutex_lock(&m->lock);
	free(m->text);
	m->text = text;
	pthread_mutex_unlock(&m->lock);
}

void tbx__metrics_set_stats(tbx__metrics_t *m, const char *json)
{
	char *copy;

	if (!m || !(copy = tbx__strdup(json)))
		return;
	pthread_mutex_lock(&m->lock);
	free(m->stats);
	m->stats = copy;
	pthread_mutex_unlock(&m->lock);
}
