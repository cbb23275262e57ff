/*
 * Round trips to PostgreSQL, counted in the contender process: tbx_bench
 * is linked with --wrap for the libpq calls that send a statement and
 * wait for its answer (see bench/CMakeLists.txt), so that every caller
 * -- the hand-written contenders and tokenbox's backends alike -- goes
 * through these wrappers.  A pipeline's round trip is its sync.
 */
#include <libpq-fe.h>
#include <stdint.h>
#include <strings.h>

#include "bench/bench.h"

static bench_pq_counts_t counts;

void bench_pq_get(bench_pq_counts_t *out)
{
	*out = counts;
}

static void count(const char *sql)
{
	counts.round_trips++;
	if (sql && strncasecmp(sql, "COMMIT", 6) == 0)
		counts.commits++;
}

PGresult *__real_PQexec(PGconn *conn, const char *query);
PGresult *__wrap_PQexec(PGconn *conn, const char *query);
PGresult *__wrap_PQexec(PGconn *conn, const char *query)
{
	count(query);
	return __real_PQexec(conn, query);
}

PGresult *__real_PQexecParams(PGconn *conn, const char *command, int nParams,
			      const Oid *paramTypes,
			      const char *const *paramValues,
			      const int *paramLengths, const int *paramFormats,
			      int resultFormat);
PGresult *__wrap_PQexecParams(PGconn *conn, const char *command, int nParams,
			      const Oid *paramTypes,
			      const char *const *paramValues,
			      const int *paramLengths, const int *paramFormats,
			      int resultFormat);
PGresult *__wrap_PQexecParams(PGconn *conn, const char *command, int nParams,
			      const Oid *paramTypes,
			      const char *const *paramValues,
			      const int *paramLengths, const int *paramFormats,
			      int resultFormat)
{
	count(command);
	return __real_PQexecParams(conn, command, nParams, paramTypes,
				   paramValues, paramLengths, paramFormats,
				   resultFormat);
}

PGresult *__real_PQexecPrepared(PGconn *conn, const char *stmtName, int nParams,
				const char *const *paramValues,
				const int *paramLengths,
				const int *paramFormats, int resultFormat);
PGresult *__wrap_PQexecPrepared(PGconn *conn, const char *stmtName, int nParams,
				const char *const *paramValues,
				const int *paramLengths,
				const int *paramFormats, int resultFormat);
PGresult *__wrap_PQexecPrepared(PGconn *conn, const char *stmtName, int nParams,
				const char *const *paramValues,
				const int *paramLengths,
				const int *paramFormats, int resultFormat)
{
	count(NULL);
	return __real_PQexecPrepared(conn, stmtName, nParams, paramValues,
				     paramLengths, paramFormats, resultFormat);
}

PGresult *__real_PQprepare(PGconn *conn, const char *stmtName,
			   const char *query, int nParams,
			   const Oid *paramTypes);
PGresult *__wrap_PQprepare(PGconn *conn, const char *stmtName,
			   const char *query, int nParams,
			   const Oid *paramTypes);
PGresult *__wrap_PQprepare(PGconn *conn, const char *stmtName,
			   const char *query, int nParams,
			   const Oid *paramTypes)
{
	count(NULL);
	return __real_PQprepare(conn, stmtName, query, nParams, paramTypes);
}

int __real_PQpipelineSync(PGconn *conn);
int __wrap_PQpipelineSync(PGconn *conn);
int __wrap_PQpipelineSync(PGconn *conn)
{
	count(NULL);
	return __real_PQpipelineSync(conn);
}
