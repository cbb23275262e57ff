/*
 * Jaeger's HTTP query API for the otel tier (tests/test_otel_*.c): where
 * it is, and a GET that gives the body of a 200 answer.
 */
#ifndef TBX_TESTS_JAEGER_QUERY_H
#define TBX_TESTS_JAEGER_QUERY_H

#include <stddef.h>

/** GETs @p url within @p timeout_ms.
 *  @returns the body (malloc'ed, NUL-terminated), or NULL when no answer
 *  came or its status was not 200. */
char *tt_jaeger_get(const char *url, long timeout_ms);

/** The base URL of Jaeger's query API ("http://127.0.0.1:P") into
 *  @p out: TBX_JAEGER_QUERY, else the port after TBX_JAEGER_OTLP's (as
 *  scripts/jaeger.sh lays them out).  Asserts TBX_JAEGER_OTLP has a
 *  port. */
void tt_jaeger_query_base(char *out, size_t size);

#endif
