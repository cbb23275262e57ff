/*
 * Metrics an operator scrapes: the Prometheus text format (version 0.0.4)
 * on GET /metrics from a small HTTP server thread of the worker
 * (metrics.listen), and a file rewritten by rename for node_exporter's
 * textfile collector (metrics.textfile).
 *
 * The worker's thread renders the text every metrics.interval.ms
 * (metrics_render.c reads its counters, partitions and store) and hands
 * it over with tbx__metrics_publish(); the server thread only serves the
 * last text handed over, so a scrape never touches the worker's state.
 *
 * @locality tbx__metrics_new/_publish/_set_stats/_destroy: the worker's
 * thread; the server has its own.
 */
#ifndef TBX_CONSUMER_METRICS_H
#define TBX_CONSUMER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "tokenbox/tokenbox.h"

typedef struct tbx__metrics tbx__metrics_t;

/** Connections served at once; more wait in the listen backlog. */
#define TBX_METRICS_CONNS 256
/** Connections from one client address at once; more are closed as they
 *  come, so that one client cannot take every connection. */
#define TBX_METRICS_CONNS_PER_IP 32
/** A connection is closed this long after it came, whatever it sends. */
#define TBX_METRICS_IDLE_MS 5000
/** Longest request head read (request line and headers). */
#define TBX_METRICS_REQUEST_MAX 4096

/**
 * Checks a metrics.listen value: "" (off), "PORT" (127.0.0.1), or
 * "HOST:PORT" with HOST an IPv4 address, a name, or "[IPv6]"; PORT
 * 0..65535 (0: any free port).  @p host (at least 256 bytes) and *port
 * receive the parts.
 * @returns TBX_OK, or TBX_ECONF with @p errstr saying why.
 */
int tbx__metrics_parse_listen(const char *value, char *host, size_t host_size,
			      int *port, char *errstr, size_t errstr_size);

/**
 * Starts the server on @p addr, a metrics.listen value (may be "": none), and
 * remembers
 * @p textfile (may be "": none).  *out is NULL when both are off.
 * @returns TBX_OK, TBX_ECONF (bad value), TBX_EIO (cannot bind, with the
 * address and the reason in @p errstr) or TBX_ENOMEM.
 */
int tbx__metrics_new(const char *addr, const char *textfile,
		     tbx__metrics_t **out, char *errstr, size_t errstr_size);
/** Stops the server thread and frees everything.  NULL: no-op. */
void tbx__metrics_destroy(tbx__metrics_t *m);
/** The port the server listens on (the one chosen for port 0), or 0. */
int tbx__metrics_port(const tbx__metrics_t *m);

/**
 * Hands over @p text (malloc'ed; taken over) as what GET /metrics
 * serves from now on, and rewrites the textfile with it.  A failed
 * textfile write is logged (WARN) and counted in
 * tokenbox_metrics_textfile_errors_total.
 */
void tbx__metrics_publish(tbx__metrics_t *m, char *text);
/** Write failures of the textfile so far. */
uint64_t tbx__metrics_textfile_errors(const tbx__metrics_t *m);
/** Hands over librdkafka's last statistics JSON (copied), served on
 *  GET /stats.json. */
void tbx__metrics_set_stats(tbx__metrics_t *m, const char *json);

#endif
