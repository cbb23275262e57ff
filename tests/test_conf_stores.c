/*
 * Which file is the token store, decided once (consumer/stores.c) for the
 * worker, the publisher and --check-config: tokens.path, else the service
 * store's file; the service store's file under another name is one file
 * for both stores.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "consumer/stores.h"
#include "consumer/worker.h"
#include "support.h"

/* Entries of @p dir that are not "." or "..". */
static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	cr_assert(d, "%s", dir);
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

Test(conf_stores, the_token_store_is_tokens_path_else_store_path)
{
	tbx_conf_t *conf = tbx_conf_new();
	const tbx__cfg_t *cfg = tbx__conf_cfg(conf);
	char err[256];

	cr_assert_str_eq(tbx__stores_tokens_path(cfg), "");
	cr_assert_eq(
	    tbx_conf_set(conf, "store.path", "/s/svc.db", err, sizeof(err)),
	    TBX_OK);
	cr_assert_str_eq(tbx__stores_tokens_path(cfg), "/s/svc.db");
	cr_assert_eq(
	    tbx_conf_set(conf, "tokens.path", "/s/tok.db", err, sizeof(err)),
	    TBX_OK);
	cr_assert_str_eq(tbx__stores_tokens_path(cfg), "/s/tok.db");
	tbx_conf_destroy(conf);
}

/* The service store's file under another name is found to be that file
 * once the worker has created it: one file, one connection, even though
 * tokens.create is false. */
Test(conf_stores, the_service_store_under_another_name_is_one_file)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s.db"), *other = tt_path(dir, "./s.db");
	tbx_conf_t *conf = tt_conf("127.0.0.1:1", "g", store, other,
				   "tokens.create", "false", NULL);
	tbx_worker_t *w;
	char err[512];

	w = tbx_worker_new(conf, err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_expect(w->joined, "the token store was opened on its own");
	tbx_worker_destroy(w);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(other);
}

/* A publisher without tokens.path takes the service store's file, as a
 * worker with that configuration does, and never creates it. */
Test(conf_stores, a_publisher_without_tokens_path_uses_the_service_store)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s.db");
	tbx_conf_t *conf = tbx_conf_new();
	tbx_publisher_t *pub;
	tbx_worker_t *w;
	char err[512];

	cr_assert_eq(tbx_conf_set(conf, "kafka.bootstrap.servers",
				  "127.0.0.1:1", err, sizeof(err)),
		     TBX_OK);
	cr_assert_eq(tbx_conf_set(conf, "store.path", store, err, sizeof(err)),
		     TBX_OK);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert_null(pub);
	cr_expect(strstr(err, store) && strstr(err, "does not exist"), "%s",
		  err);
	cr_expect_eq(entries(dir), 0);

	w = tbx_worker_new(tt_conf("127.0.0.1:1", "g", store, NULL, NULL), err,
			   sizeof(err));
	cr_assert(w, "%s", err);
	cr_expect(w->joined);
	tbx_worker_destroy(w);
	pub = tbx_publisher_new(conf, err, sizeof(err));
	cr_assert(pub, "%s", err);
	tbx_publisher_destroy(pub);
	tt_rmrf(dir);
	free(dir);
	free(store);
}

/* --check-config: a missing service store needs a directory it can be
 * created in; a missing token store apart is refused as the worker
 * refuses it, unless tokens.create=true; nothing is created. */
Test(conf_stores, check_config_creates_nothing_and_names_the_key)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s.db"), *tokens = tt_path(dir, "t.db");
	tbx_conf_t *conf = tt_conf("127.0.0.1:1", "g", store, tokens,
				   "tokens.create", "false", NULL);
	char err[512];
	tbx_worker_t *w;

	cr_assert_eq(tbx__stores_check(tbx__conf_cfg(conf), err, sizeof(err)),
		     TBX_ENOENT);
	cr_expect(strstr(err, "tokens.path") && strstr(err, tokens) &&
		      strstr(err, "does not exist") &&
		      strstr(err, "tokenbox init --tokens"),
		  "%s", err);
	cr_expect_eq(entries(dir), 0);
	cr_assert_eq(
	    tbx_conf_set(conf, "tokens.create", "true", err, sizeof(err)),
	    TBX_OK);
	cr_assert_eq(tbx__stores_check(tbx__conf_cfg(conf), err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_expect_eq(entries(dir), 0);
	cr_assert_eq(tbx_conf_set(conf, "tokens.path", "/proc/no/such/t.db",
				  err, sizeof(err)),
		     TBX_OK);
	cr_assert_neq(tbx__stores_check(tbx__conf_cfg(conf), err, sizeof(err)),
		      TBX_OK);
	cr_expect(strstr(err, "tokens.path") && strstr(err, "/proc/no/such"),
		  "%s", err);
	w = tbx__worker_new_check(conf, err, sizeof(err));
	cr_assert_null(w);
	cr_expect(strstr(err, "tokens.path"), "%s", err);
	cr_expect_eq(entries(dir), 0);
	tbx_conf_destroy(conf);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}

/* A start refused for a token store apart that does not exist leaves
 * nothing behind: no service store, no token store; the error is
 * TBX_ENOENT, which the command turns into exit status 2. */
Test(conf_stores, a_start_refused_for_a_missing_token_store_creates_nothing)
{
	char *dir = tt_tmpdir();
	char *store = tt_path(dir, "s.db"), *tokens = tt_path(dir, "t.db");
	tbx_conf_t *conf = tt_conf("127.0.0.1:1", "g", store, tokens,
				   "tokens.create", "false", NULL);
	tbx_worker_t *w;
	char err[512];
	int code = TBX_OK;

	w = tbx__worker_new_err(conf, &code, err, sizeof(err));
	cr_assert_null(w);
	cr_expect_eq(code, TBX_ENOENT, "%d: %s", code, err);
	cr_expect(strstr(err, tokens) && strstr(err, "does not exist"), "%s",
		  err);
	cr_expect_eq(entries(dir), 0, "a refused start left a file behind");
	/* The same with tokens.create=true makes both. */
	cr_assert_eq(
	    tbx_conf_set(conf, "tokens.create", "true", err, sizeof(err)),
	    TBX_OK);
	w = tbx__worker_new_err(conf, &code, err, sizeof(err));
	cr_assert(w, "%s", err);
	cr_expect_eq(code, TBX_OK);
	cr_expect(!w->joined);
	tbx_worker_destroy(w);
	cr_expect_geq(entries(dir), 2);
	tt_rmrf(dir);
	free(dir);
	free(store);
	free(tokens);
}
