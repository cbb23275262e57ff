/*
 * Connects with libpq to the URL given as the only argument and runs
 * SELECT $1::int with the bound parameter 1: the test that the server of
 * scripts/pg.sh answers a program linked with libpq, as the PostgreSQL
 * stores will be.  Exits 0 when the answer is 1, else 1 with the reason.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc != 2 || strncmp(argv[1], "postgresql://", 13) != 0) {
		fprintf(stderr, "usage: %s postgresql://...\n", argv[0]);
		return 2;
	}
	PGconn *conn = PQconnectdb(argv[1]);
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
		fprintf(stderr, "select1: cannot connect: %s",
			conn ? PQerrorMessage(conn) : "out of memory\n");
		PQfinish(conn);
		return 1;
	}
	const char *params[1] = {"1"};
	PGresult *res = PQexecParams(conn, "SELECT $1::int", 1, NULL, params,
				     NULL, NULL, 0);
	int ok = res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK &&
		 PQntuples(res) == 1 && PQnfields(res) == 1 &&
		 strcmp(PQgetvalue(res, 0, 0), "1") == 0;
	if (!ok)
		fprintf(stderr, "select1: SELECT $1::int did not answer 1: %s",
			PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
	if (ok)
		printf("select1: libpq connected, SELECT $1::int = 1\n");
	return ok ? 0 : 1;
}
