/*
 * tbx_otlp_sink: an OTLP/HTTP trace collector that costs nearly nothing,
 * for bench/run --tracing.  It answers every POST to /v1/traces with
 * 200 and an empty ExportTraceServiceResponse (no partial success) and
 * discards the body, so that what tracing costs tokenbox can be told
 * apart from what a real collector (Jaeger) costs the same CPUs.  It
 * keeps nothing and checks nothing but the method and the path: it is
 * a measuring device, not a collector.
 *
 *   tbx_otlp_sink [--port P] [--pid-file FILE]
 *
 * Listens on 127.0.0.1 (port 0, the default: one the kernel picks),
 * prints the endpoint ("http://127.0.0.1:P") on stdout once it
 * listens, and on SIGTERM or SIGINT prints to stderr the requests and
 * body bytes it received, then exits 0.  One thread of libmicrohttpd
 * serves every connection (epoll), kept alive as the exporter asks.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static atomic_uint_fast64_t requests, bytes, refused;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	/* An empty message is an ExportTraceServiceResponse without a
	 * partial success, in protobuf; the JSON exporter reads {} too. */
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"application/x-protobuf");
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
				  const char *url, const char *method,
				  const char *version, const char *data,
				  size_t *data_size, void **state)
{
	static int seen; /* a non-NULL marker: the head was read */

	(void)cls;
	(void)version;
	(void)data;
	if (!*state) {
		*state = &seen;
		return MHD_YES; /* the body's chunks follow */
	}
	if (*data_size) {
		atomic_fetch_add(&bytes, *data_size);
		*data_size = 0; /* discarded */
		return MHD_YES;
	}
	if (strcmp(method, "POST") != 0 || strcmp(url, "/v1/traces") != 0) {
		atomic_fetch_add(&refused, 1);
		return answer(conn, MHD_HTTP_NOT_FOUND);
	}
	atomic_fetch_add(&requests, 1);
	return answer(conn, MHD_HTTP_OK);
}

static int parse_port(const char *s, unsigned *port)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > 65535 || s[0] == '-')
		return -1;
	*port = (unsigned)v;
	return 0;
}

int main(int argc, char **argv)
{
	const char *pid_file = NULL;
	unsigned port = 0;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct MHD_Daemon *d;
	const union MHD_DaemonInfo *info;
	struct sigaction act = {.sa_handler = on_signal};

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
			if (parse_port(argv[++i], &port) != 0) {
				fprintf(stderr,
					"tbx_otlp_sink: --port wants 0..65535, "
					"not '%s'\n",
					argv[i]);
				return 2;
			}
		} else if (strcmp(argv[i], "--pid-file") == 0 && i + 1 < argc) {
			pid_file = argv[++i];
		} else {
			fprintf(stderr, "usage: tbx_otlp_sink [--port P] "
					"[--pid-file FILE]\n");
			return strcmp(argv[i], "--help") == 0 ? 0 : 2;
		}
	}
	sigaction(SIGTERM, &act, NULL);
	sigaction(SIGINT, &act, NULL);
	signal(SIGPIPE, SIG_IGN);

	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	d = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)port,
	    NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, &sa,
	    MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
	if (!d) {
		fprintf(stderr,
			"tbx_otlp_sink: cannot listen on 127.0.0.1:%u\n", port);
		return 1;
	}
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	if (!info || !info->port) {
		fprintf(stderr, "tbx_otlp_sink: no port bound\n");
		MHD_stop_daemon(d);
		return 1;
	}
	if (pid_file) {
		FILE *f = fopen(pid_file, "w");
		if (!f || fprintf(f, "%ld\n", (long)getpid()) < 0 ||
		    fclose(f) != 0) {
			fprintf(stderr, "tbx_otlp_sink: cannot write %s\n",
				pid_file);
			MHD_stop_daemon(d);
			return 1;
		}
	}
	printf("http://127.0.0.1:%u\n", (unsigned)info->port);
	fflush(stdout);
	while (!stop)
		pause();
	MHD_stop_daemon(d);
	fprintf(stderr,
		"tbx_otlp_sink: %" PRIuFAST64 " requests, %" PRIuFAST64
		" body bytes, %" PRIuFAST64 " refused\n",
		atomic_load(&requests), atomic_load(&bytes),
		atomic_load(&refused));
	return 0;
}
