/*
 * The metrics server and the textfile (see metrics.h).
 *
 * The server is libmicrohttpd, in a thread of its own, on the socket
 * bind_listen() opened.  It serves at most TBX_METRICS_CONNS connections
 * at once (more wait in the listen backlog), TBX_METRICS_CONNS_PER_IP of
 * them from one client address (more are closed at once), reads a request head
 * of at most about TBX_METRICS_REQUEST_MAX bytes (longer: 414 or 431), answers
 * once and closes ("Connection: close"); malformed requests get its 400.
 * libmicrohttpd's own timeout only counts idle time, so a client that
 * trickles one byte every few seconds (slowloris) would keep its
 * connection for ever: a watchdog thread shuts down every connection
 * older than TBX_METRICS_IDLE_MS, whatever it sends.  Responses are
 * small and written by libmicrohttpd without blocking its thread.
 */
#include "consumer/metrics.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"

/* A connection the watchdog watches: its socket and when it came. */
typedef struct conn {
	int fd; /* -1: free */
	int64_t deadline_ms;
} conn_t;

struct tbx__metrics {
	int lfd; /* -1: no server */
	int port;
	struct MHD_Daemon *mhd;
	pthread_t watchdog;
	int have_watchdog;
	pthread_mutex_t conns_lock; /* conns, stop */
	pthread_cond_t conns_cond;
	int stop;
	conn_t conns[TBX_METRICS_CONNS];
	uint64_t conns_cut;    /* by the watchdog, in all */
	uint64_t cut_logged;   /* conns_cut when last logged */
	int64_t cut_logged_ms; /* when, 0: never */
	pthread_mutex_t lock;  /* text and stats */
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

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status,
			       const char *type, const char *allow, char *body,
			       size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
	    len, body, body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result respond_text(struct MHD_Connection *conn,
				    unsigned status, const char *allow,
				    const char *msg)
{
	return respond(conn, status, "text/plain; charset=utf-8", allow,
		       tbx__strdup(msg), strlen(msg));
}

/* One request: answered on the first call, before any body is read. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **req_cls)
{
	tbx__metrics_t *m = cls;
	char *copy = NULL;
	int metrics = strcmp(url, "/metrics") == 0,
	    stats = strcmp(url, "/stats.json") == 0;

	(void)version, (void)upload, (void)upload_size, (void)req_cls;
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
				    "GET, HEAD",
				    "only GET and HEAD are served\n");
	if (!metrics && !stats)
		return respond_text(conn, MHD_HTTP_NOT_FOUND, NULL,
				    "served: /metrics, /stats.json\n");
	pthread_mutex_lock(&m->lock);
	if (metrics)
		copy = tbx__strdup(m->text ? m->text : "");
	else
		copy = tbx__strdup(m->stats ? m->stats : "{}");
	pthread_mutex_unlock(&m->lock);
	if (!copy)
		return respond_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, NULL,
				    "out of memory\n");
	return respond(conn, MHD_HTTP_OK,
		       metrics ? "text/plain; version=0.0.4; charset=utf-8"
			       : "application/json",
		       NULL, copy, strlen(copy));
}

/* Connections come and go on libmicrohttpd's thread; the watchdog sees
 * them in m->conns.  A slot is freed before libmicrohttpd closes the
 * socket, under the lock the watchdog holds while it shuts one down, so
 * it never touches a descriptor that was reused. */
static void on_connection(void *cls, struct MHD_Connection *conn,
			  void **socket_ctx,
			  enum MHD_ConnectionNotificationCode code)
{
	tbx__metrics_t *m = cls;
	const union MHD_ConnectionInfo *info;
	int fd;

	(void)socket_ctx;
	info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!info)
		return;
	fd = info->connect_fd;
	pthread_mutex_lock(&m->conns_lock);
	for (size_t i = 0; i < TBX_METRICS_CONNS; i++) {
		conn_t *c = &m->conns[i];
		if (code == MHD_CONNECTION_NOTIFY_STARTED && c->fd < 0) {
			c->fd = fd;
			c->deadline_ms = tbx__mono_ms() + TBX_METRICS_IDLE_MS;
			break;
		}
		if (code == MHD_CONNECTION_NOTIFY_CLOSED && c->fd == fd) {
			c->fd = -1;
			break;
		}
	}
	pthread_mutex_unlock(&m->conns_lock);
}

/* Ends connections past their deadline: shutdown() makes libmicrohttpd
 * see the connection end and close it on its own thread.  Cut
 * connections are counted (tokenbox_metrics_connections_cut_total) and
 * logged at WARN at most once a minute. */
static void *watchdog_main(void *arg)
{
	tbx__metrics_t *m = arg;

	pthread_mutex_lock(&m->conns_lock);
	while (!m->stop) {
		struct timespec ts;
		int64_t now = tbx__mono_ms();

		for (size_t i = 0; i < TBX_METRICS_CONNS; i++) {
			conn_t *c = &m->conns[i];
			if (c->fd >= 0 && now >= c->deadline_ms) {
				shutdown(c->fd, SHUT_RDWR);
				/* once: libmicrohttpd frees the slot */
				c->deadline_ms = INT64_MAX;
				m->conns_cut++;
			}
		}
		if (m->conns_cut > m->cut_logged &&
		    (!m->cut_logged_ms ||
		     now - m->cut_logged_ms >= TBX_METRICS_CUT_LOG_MS)) {
			tbx__log(TBX_LOG_WARNING,
				 "metrics: closed %" PRIu64
				 " connection(s) still open after %d ms "
				 "(slow, stalled or hostile clients of "
				 "metrics.listen; %" PRIu64 " in all)",
				 m->conns_cut - m->cut_logged,
				 TBX_METRICS_IDLE_MS, m->conns_cut);
			m->cut_logged = m->conns_cut;
			m->cut_logged_ms = now;
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += 250 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&m->conns_cond, &m->conns_lock, &ts);
	}
	pthread_mutex_unlock(&m->conns_lock);
	return NULL;
}

/* libmicrohttpd's own messages (a client's bad request, a refused
 * connection) are the clients' business: debug level. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	(void)cls;
	if (!tbx__log_enabled(TBX_LOG_DEBUG))
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	tbx__log(TBX_LOG_DEBUG, "metrics: libmicrohttpd: %s", line);
}

static int start_server(tbx__metrics_t *m)
{
	m->mhd = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG,
	    0, NULL, NULL, on_request, m, MHD_OPTION_LISTEN_SOCKET, m->lfd,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)TBX_METRICS_CONNS,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT,
	    (unsigned)TBX_METRICS_CONNS_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
	    (unsigned)((TBX_METRICS_IDLE_MS + 999) / 1000),
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT,
	    (size_t)TBX_METRICS_REQUEST_MAX * 2, MHD_OPTION_NOTIFY_CONNECTION,
	    on_connection, m, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, m,
	    MHD_OPTION_END);
	if (!m->mhd)
		return -1;
	if (pthread_create(&m->watchdog, NULL, watchdog_main, m) != 0)
		return -1;
	m->have_watchdog = 1;
	return 0;
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
		    listen(fd, 128) == 0 && set_nonblock_cloexec(fd) == 0) {
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
	m->lfd = -1;
	for (size_t i = 0; i < TBX_METRICS_CONNS; i++)
		m->conns[i].fd = -1;
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_init(&m->conns_lock, NULL);
	{
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&m->conns_cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	if (*textfile && !(m->textfile = strdup(textfile))) {
		tbx__metrics_destroy(m);
		return tbx__seterr(errstr, errstr_size, TBX_ENOMEM,
				   "out of memory");
	}
	if ((err = bind_listen(m, addr, errstr, errstr_size))) {
		tbx__metrics_destroy(m);
		return err;
	}
	if (m->lfd >= 0 && start_server(m) != 0) {
		tbx__metrics_destroy(m);
		return tbx__seterr(errstr, errstr_size, TBX_EIO,
				   "metrics: cannot start the server");
	}
	*out = m;
	return TBX_OK;
}

void tbx__metrics_destroy(tbx__metrics_t *m)
{
	if (!m)
		return;
	if (m->mhd) {
		/* Closes the listening socket too. */
		MHD_stop_daemon(m->mhd);
		m->lfd = -1;
	}
	if (m->have_watchdog) {
		pthread_mutex_lock(&m->conns_lock);
		m->stop = 1;
		pthread_cond_signal(&m->conns_cond);
		pthread_mutex_unlock(&m->conns_lock);
		pthread_join(m->watchdog, NULL);
	}
	if (m->lfd >= 0)
		close(m->lfd);
	pthread_cond_destroy(&m->conns_cond);
	pthread_mutex_destroy(&m->conns_lock);
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

uint64_t tbx__metrics_connections_cut(tbx__metrics_t *m)
{
	uint64_t n;

	if (!m)
		return 0;
	pthread_mutex_lock(&m->conns_lock);
	n = m->conns_cut;
	pthread_mutex_unlock(&m->conns_lock);
	return n;
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
