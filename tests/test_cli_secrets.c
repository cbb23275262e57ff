/*
 * Secrets and access: a PostgreSQL connection string is shown only
 * without its password (tbx__pg_redact, tbx__pg_censor, and what the
 * commands print), sslmode is honoured, and the SQLite stores are files
 * their owner alone may read.  No server is needed: the PostgreSQL cases
 * fail to connect, or meet a listener that answers as a server without
 * TLS does.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "cli_child.h"
#include "fixture.h"
#include "store/db.h"
#include "store/pg.h"
#include "tokenbox/tokenbox.h"

/* ---- tbx__pg_redact ------------------------------------------------- */

static void redacts(const char *in, const char *want)
{
	char out[512];

	tbx__pg_redact(in, out, sizeof(out));
	cr_expect_str_eq(out, want, "redact(%s)", in);
}

Test(redact, url_user_password)
{
	redacts("postgresql://alice:s3cret@db.example:5432/app",
		"postgresql://alice:***@db.example:5432/app");
	redacts("postgres://alice:s3cret@db.example/app?sslmode=require",
		"postgres://alice:***@db.example/app?sslmode=require");
	/* Several hosts; an '@' in the password. */
	redacts("postgresql://alice:p@ss@h1:5432,h2:5433/app",
		"postgresql://alice:***@h1:5432,h2:5433/app");
}

Test(redact, url_without_password_unchanged)
{
	redacts("postgresql://alice@db.example/app?sslmode=require",
		"postgresql://alice@db.example/app?sslmode=require");
	redacts("postgresql:///app?host=/tmp/sock&port=5432",
		"postgresql:///app?host=/tmp/sock&port=5432");
	redacts("postgresql://db.example/app", "postgresql://db.example/app");
}

Test(redact, url_query_password)
{
	redacts("postgresql://alice@h/app?password=s3cret",
		"postgresql://alice@h/app?password=***");
	redacts("postgresql://alice@h/app?sslmode=require&password=s3cret&"
		"connect_timeout=5",
		"postgresql://alice@h/app?sslmode=require&password=***&"
		"connect_timeout=5");
	/* Both places at once. */
	redacts("postgresql://alice:one@h/app?password=two",
		"postgresql://alice:***@h/app?password=***");
}

Test(redact, percent_encoded)
{
	/* libpq decodes the password and the query's keys. */
	redacts("postgresql://alice:p%40ss%3Aw%2Fd@h/app",
		"postgresql://alice:***@h/app");
	redacts("postgresql://h/app?%70assword=s3cret",
		"postgresql://h/app?%70assword=***");
	redacts("postgresql://h/app?pass%77ord=s3cret&x=1",
		"postgresql://h/app?pass%77ord=***&x=1");
	/* Refused by libpq, but quoted in its message: hidden too. */
	redacts("postgresql://h/app?PASSWORD=s3cret",
		"postgresql://h/app?PASSWORD=***");
}

Test(redact, key_value)
{
	redacts("host=db user=alice password=s3cret dbname=app",
		"host=db user=alice password=*** dbname=app");
	redacts("host=db password = s3cret dbname=app",
		"host=db password = *** dbname=app");
	redacts("host=db password='s3 cr\\'et' dbname=app",
		"host=db password=*** dbname=app");
	redacts("password=s3\\ cret host=db", "password=*** host=db");
	redacts("host=db PASSWORD=s3cret", "host=db PASSWORD=***");
	redacts("host=db dbname=app", "host=db dbname=app");
}

Test(redact, words_without_a_value)
{
	/* A mistyped key: the word may be the password. */
	redacts("host=db s3cret dbname=app", "host=db *** dbname=app");
	redacts("POSTGRESQL://alice:s3cret@h/app", "***");
}

Test(redact, cut_to_the_buffer)
{
	char out[16];

	tbx__pg_redact("postgresql://alice:s3cret@a-long-host-name/app", out,
		       sizeof(out));
	cr_expect_eq(strlen(out), sizeof(out) - 1);
	cr_expect_null(strstr(out, "s3"), "%s", out);
	tbx__pg_redact(NULL, out, sizeof(out));
	cr_expect_str_eq(out, "");
}

Test(redact, censor_a_message)
{
	char msg[] = "invalid percent-encoded token: \"s3%zzcret\"";
	char msg2[] =
	    "missing \"=\" after \"s3cret\" in connection info string";

	tbx__pg_censor("postgresql://alice:s3%zzcret@h/app", msg);
	cr_expect_str_eq(msg, "invalid percent-encoded token: \"***\"");
	tbx__pg_censor("host=h s3cret", msg2);
	cr_expect_str_eq(
	    msg2, "missing \"=\" after \"***\" in connection info string");
}

/* tbx__pg_connect's errors: a malformed string, an unreachable server. */
Test(redact, connect_errors)
{
	static const char *const bad[] = {
	    "postgresql://alice:s3%zzcret@h/app",
	    "postgresql://h/app?password=s3%zzcret",
	    "host=h s3cret",
	    "host=h PASSWORD=s3cret",
	    "postgresql://alice:s3cret@/app?host=/nonexistent-tbx&port=1",
	    "host=/nonexistent-tbx port=1 password=s3cret",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tbx__pg_t *pg = NULL;
		char errstr[1024] = "";
		int err = tbx__pg_connect(bad[i], &pg, errstr, sizeof(errstr));

		cr_expect_neq(err, TBX_OK, "%s connected", bad[i]);
		cr_expect(*errstr, "%s: no message", bad[i]);
		cr_expect_null(strstr(errstr, "s3"), "%s: %s", bad[i], errstr);
		cr_expect_null(strchr(errstr, '\n'), "%s: not one line: %s",
			       bad[i], errstr);
	}
}

/* ---- SQLite files: the owner's only --------------------------------- */

static unsigned mode_of(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
	return (unsigned)st.st_mode & 07777;
}

static void expect_private(const char *path)
{
	char side[4200];

	cr_expect_eq(mode_of(path), 0600, "%s: mode %o", path, mode_of(path));
	for (int i = 0; i < 2; i++) {
		snprintf(side, sizeof(side), "%s-%s", path, i ? "shm" : "wal");
		if (access(side, F_OK) == 0)
			cr_expect_eq(mode_of(side), 0600, "%s: mode %o", side,
				     mode_of(side));
	}
}

Test(files, store_opened_by_the_library_is_0600)
{
	char *dir = tt_tmpdir(), *path = tt_path(dir, "s.db");
	char wal[4200], errstr[512];
	tbx__db_opts_t opts;
	sqlite3 *db = NULL;

	umask(022);
	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx__db_open(path, &opts, &db, errstr, sizeof(errstr)),
		     TBX_OK, "%s", errstr);
	/* A write while open: the WAL and its index exist now. */
	cr_assert_eq(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL),
		     SQLITE_OK);
	snprintf(wal, sizeof(wal), "%s-wal", path);
	cr_assert_eq(access(wal, F_OK), 0, "no WAL file");
	expect_private(path);
	sqlite3_close_v2(db);
	tt_rmrf(dir);
	free(path);
	free(dir);
}

Test(files, tokenbox_init_makes_0600_files)
{
	char *dir = tt_tmpdir(), *tokens = tt_path(dir, "tokens.db");
	char *store = tt_path(dir, "service.db");
	const char *args[] = {"init",	 "--tokens", tokens,
			      "--store", store,	     NULL};
	cc_result_t res;

	umask(022); /* the child inherits it */
	res = cc_run(args);
	cr_assert(cc_exited(res.status, 0), "%d: %s", res.status, res.err);
	expect_private(tokens);
	expect_private(store);
	cc_result_free(&res);
	tt_rmrf(dir);
	free(tokens);
	free(store);
	free(dir);
}

Test(files, existing_file_keeps_its_mode)
{
	char *dir = tt_tmpdir(), *path = tt_path(dir, "s.db");
	char errstr[512];
	tbx__db_opts_t opts;
	sqlite3 *db = NULL;
	FILE *f = fopen(path, "w");

	cr_assert(f);
	fclose(f);
	cr_assert_eq(chmod(path, 0640), 0);
	tbx__db_opts_init(&opts);
	cr_assert_eq(tbx__db_open(path, &opts, &db, errstr, sizeof(errstr)),
		     TBX_OK, "%s", errstr);
	cr_expect_eq(mode_of(path), 0640);
	sqlite3_close_v2(db);
	tt_rmrf(dir);
	free(path);
	free(dir);
}

/* ---- the commands' output and errors -------------------------------- */

/* No server: every command fails to connect, and says where without the
 * password, in each of its forms. */
Test(commands, errors_never_show_a_password)
{
	static const char *const urls[] = {
	    "postgresql://alice:s3cretPW@/db?host=/nonexistent-tbx&port=1",
	    "postgresql://alice@/db?host=/nonexistent-tbx&port=1&password="
	    "s3cretPW",
	    "postgresql://alice:s3cretPW%zz@/db?host=/nonexistent-tbx",
	    "postgresql://alice@/db?host=/nonexistent-tbx&PASSWORD=s3cretPW",
	};
	for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
		const char *inspect[] = {"inspect",  "-s",	urls[i],
					 "--schema", "billing", "status",
					 NULL};
		const char *inspect_t[] = {
		    "inspect", "-s",	 "/nonexistent.db", "-S",
		    urls[i],   "--json", "status",	    NULL};
		const char *init[] = {"init", "--tokens", urls[i], NULL};
		const char *send[] = {"send",  "-b", "127.0.0.1:1", "-t",
				      "t",     "-T", "T",	    "-S",
				      urls[i], NULL};
		const char *const *cmds[] = {inspect, inspect_t, init, send};

		for (size_t c = 0; c < 4; c++) {
			cc_result_t res =
			    cc_run_with(cmds[c], "x\n", 2, CC_RUN_TIMEOUT_MS);
			cr_expect(!cc_exited(res.status, 0), "%s %s: exit 0",
				  cmds[c][0], urls[i]);
			cr_expect(*res.err, "%s %s: no error", cmds[c][0],
				  urls[i]);
			cr_expect_null(strstr(res.out, "s3cret"),
				       "%s %s: stdout: %s", cmds[c][0], urls[i],
				       res.out);
			cr_expect_null(strstr(res.err, "s3cret"),
				       "%s %s: stderr: %s", cmds[c][0], urls[i],
				       res.err);
			cc_result_free(&res);
		}
	}
}

Test(commands, a_schema_is_for_a_url_only)
{
	const char *inspect[] = {"inspect", "-s",     "/tmp/s.db", "--schema",
				 "billing", "status", NULL};
	const char *send[] = {
	    "send", "-b",	 "127.0.0.1:1",	    "-t",  "t", "-T", "T",
	    "-S",   "/tmp/t.db", "--tokens-schema", "tok", NULL};
	const char *const *cmds[] = {inspect, send};

	for (size_t c = 0; c < 2; c++) {
		cc_result_t res = cc_run(cmds[c]);
		cr_expect(cc_exited(res.status, 2), "%s: %d", cmds[c][0],
			  res.status);
		cr_expect(strstr(res.err, "applies to a PostgreSQL URL"), "%s",
			  res.err);
		cr_expect_eq(cc_lines(res.err), 1, "%s", res.err);
		cc_result_free(&res);
	}
}

/* ---- sslmode ---------------------------------------------------------- */

/* A TCP listener on 127.0.0.1 that answers PostgreSQL's SSLRequest with
 * 'N', as a server without TLS does (the pg tier's server listens on a
 * Unix socket only, where libpq never uses TLS). */
typedef struct no_tls {
	int fd, port;
	int asked; /* SSLRequests answered */
	volatile int stop;
	pthread_t thread;
} no_tls_t;

/* Reads @p n bytes within 10 s (times the factor); @returns 0 or -1. */
static int read_all(int fd, unsigned char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd p = {fd, POLLIN, 0};
		ssize_t r;
		if (poll(&p, 1, 10000 * tt_time_factor()) <= 0)
			return -1;
		if ((r = read(fd, buf + got, n - got)) <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static void *no_tls_serve(void *arg)
{
	no_tls_t *s = arg;

	while (!s->stop) {
		struct pollfd p = {s->fd, POLLIN, 0};
		unsigned char req[8], rest[64];
		int c;

		if (poll(&p, 1, 50) <= 0 || (c = accept(s->fd, NULL, NULL)) < 0)
			continue;
		/* SSLRequest: length 8, code 80877103. */
		if (!read_all(c, req, 8) && req[3] == 8 && req[4] == 0x04 &&
		    req[5] == 0xd2 && req[6] == 0x16 && req[7] == 0x2f &&
		    write(c, "N", 1) == 1) {
			s->asked++;
			/* libpq gives up and closes: wait for that. */
			while (read(c, rest, sizeof(rest)) > 0)
				;
		}
		close(c);
	}
	return NULL;
}

static void no_tls_start(no_tls_t *s)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);

	memset(s, 0, sizeof(*s));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(s->fd >= 0);
	cr_assert_eq(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(s->fd, 8), 0);
	cr_assert_eq(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
	s->port = ntohs(a.sin_port);
	cr_assert_eq(pthread_create(&s->thread, NULL, no_tls_serve, s), 0);
}

static void no_tls_stop(no_tls_t *s)
{
	s->stop = 1;
	pthread_join(s->thread, NULL);
	close(s->fd);
}

Test(commands, sslmode_require_refuses_a_server_without_tls)
{
	no_tls_t srv;
	char url[256];

	no_tls_start(&srv);
	snprintf(url, sizeof(url),
		 "postgresql://alice:s3cretPW@127.0.0.1:%d/db?sslmode=require&"
		 "connect_timeout=10",
		 srv.port);
	{
		const char *inspect[] = {"inspect", "-s",     url, "--schema",
					 "billing", "status", NULL};
		const char *init[] = {"init", "--tokens", url, NULL};
		const char *const *cmds[] = {inspect, init};

		for (size_t c = 0; c < 2; c++) {
			cc_result_t res = cc_run(cmds[c]);
			cr_expect(!cc_exited(res.status, 0), "%s: exit 0",
				  cmds[c][0]);
			cr_expect(strstr(res.err, "SSL"),
				  "%s: the error does not say why: %s",
				  cmds[c][0], res.err);
			cr_expect(strstr(res.err, "alice:***@127.0.0.1"),
				  "%s: the error does not name the URL: %s",
				  cmds[c][0], res.err);
			cr_expect(strstr(res.err, "sslmode=require"), "%s",
				  res.err);
			cr_expect_null(strstr(res.err, "s3cret"), "%s",
				       res.err);
			cr_expect_eq(cc_lines(res.err), 1, "%s", res.err);
			cc_result_free(&res);
		}
	}
	no_tls_stop(&srv);
	cr_expect_geq(srv.asked, 2, "libpq did not ask for TLS");
}
