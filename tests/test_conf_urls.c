/*
 * The PostgreSQL keys: store.url and tokens.url are libpq connection
 * strings, checked when set, never echoed with their password; each
 * excludes its path; the schemas are checked names; the service store's
 * schema defaults to the group id.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <string.h>

#include "consumer/conf.h"
#include "consumer/stores.h"
#include "tokenbox/tokenbox.h"

static int set(tbx_conf_t *conf, const char *k, const char *v, char *err,
	       size_t size)
{
	err[0] = '\0';
	return tbx_conf_set(conf, k, v, err, size);
}

Test(conf_urls, urls_and_key_value_strings_are_taken)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];

	cr_assert_str_eq(tbx_conf_get(conf, "store.url"), "");
	cr_assert_str_eq(tbx_conf_get(conf, "tokens.url"), "");
	cr_assert_str_eq(tbx_conf_get(conf, "tokens.schema"),
			 "tokenbox_tokens");
	cr_assert_null(tbx_conf_get(conf, "store.schema"));
	cr_assert_eq(
	    set(conf, "store.url",
		"postgresql://svc@db.example:5433/shop?sslmode=require", err,
		sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(
	    set(conf, "store.url", "postgres:///shop", err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(set(conf, "tokens.url",
			 "host=/run/postgresql dbname=pipeline user=svc", err,
			 sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_str_eq(tbx__conf_cfg(conf)->tokens_url,
			 "host=/run/postgresql dbname=pipeline user=svc");
	cr_assert_eq(set(conf, "tokens.url", "", err, sizeof(err)), TBX_OK,
		     "empty: the service store's database");
	tbx_conf_destroy(conf);
}

Test(conf_urls, what_libpq_refuses_is_refused_with_the_key)
{
	static const char *const bad[] = {
	    "/var/lib/tokenbox/s.db",			/* a path */
	    "s.db",					/* a path */
	    "postgresql://h/db?no_such_option=1",	/* unknown parameter */
	    "host=h no_such_option=1",			/* unknown keyword */
	    "host='h",					/* unterminated */
	    "postgresql://h:5432/db?sslmode=require&x", /* no value */
	};
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(set(conf, "store.url", bad[i], err, sizeof(err)),
			     TBX_ECONF, "'%s' was taken", bad[i]);
		cr_assert(strstr(err, "store.url") &&
			      strstr(err, "PostgreSQL connection string"),
			  "%s", err);
		cr_assert_eq(set(conf, "tokens.url", bad[i], err, sizeof(err)),
			     TBX_ECONF, "'%s' was taken", bad[i]);
		cr_assert(strstr(err, "tokens.url"), "%s", err);
	}
	cr_assert_eq(set(conf, "store.url", "/var/lib/s.db", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "store.path"), "a path points at store.path: %s",
		  err);
	cr_assert_str_eq(tbx_conf_get(conf, "store.url"), "");
	tbx_conf_destroy(conf);
}

Test(conf_urls, a_refused_string_never_shows_its_password)
{
	static const char *const bad[] = {
	    "postgresql://svc:s3cret@h/db?no_such_option=1",
	    "host=h password=s3cret no_such_option=1",
	    "host=h password=s3cret dbname='x",
	    "password s3cret",
	};
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(set(conf, "store.url", bad[i], err, sizeof(err)),
			     TBX_ECONF, "'%s' was taken", bad[i]);
		cr_assert_null(strstr(err, "s3cret"), "%s", err);
	}
	tbx_conf_destroy(conf);
}

Test(conf_urls, schemas_are_checked_names)
{
	static const char *const bad[] = {
	    "",
	    "1st",
	    "pg_catalog",
	    ".x",
	    "a b",
	    "a;drop",
	    "\"x\"",
	    "a1234567890123456789012345678901234567890123456789012345678901234",
	};
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];

	cr_assert_eq(
	    set(conf, "store.schema", "billing-v2.eu_1", err, sizeof(err)),
	    TBX_OK, "%s", err);
	cr_assert_eq(
	    set(conf, "tokens.schema", "Pipeline_tokens", err, sizeof(err)),
	    TBX_OK, "%s", err);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(
		    set(conf, "store.schema", bad[i], err, sizeof(err)),
		    TBX_ECONF, "'%s' was taken", bad[i]);
		cr_assert(strstr(err, "store.schema"), "%s", err);
		cr_assert_eq(
		    set(conf, "tokens.schema", bad[i], err, sizeof(err)),
		    TBX_ECONF, "'%s' was taken", bad[i]);
		cr_assert(strstr(err, "tokens.schema"), "%s", err);
	}
	cr_assert_str_eq(tbx_conf_get(conf, "store.schema"), "billing-v2.eu_1");
	tbx_conf_destroy(conf);
}

/* A conf with group g, brokers and the pairs given (NULL-terminated). */
static tbx_conf_t *conf_of(const char *k, ...)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];
	va_list ap;

	cr_assert_eq(set(conf, "group.id", "g", err, sizeof(err)), TBX_OK);
	cr_assert_eq(set(conf, "kafka.bootstrap.servers", "127.0.0.1:1", err,
			 sizeof(err)),
		     TBX_OK);
	va_start(ap, k);
	for (; k; k = va_arg(ap, const char *)) {
		const char *v = va_arg(ap, const char *);
		cr_assert_eq(set(conf, k, v, err, sizeof(err)), TBX_OK, "%s",
			     err);
	}
	va_end(ap);
	return conf;
}

Test(conf_urls, a_store_is_a_path_or_a_url_never_both)
{
	tbx_conf_t *conf;
	char err[512];

	conf = conf_of(NULL);
	cr_assert_null(tbx_worker_new(conf, err, sizeof(err)));
	cr_assert(strstr(err, "store.path") && strstr(err, "store.url"), "%s",
		  err);
	tbx_conf_destroy(conf);

	conf = conf_of("store.path", "/nonexistent/s.db", "store.url",
		       "postgresql:///x", NULL);
	cr_assert_null(tbx_worker_new(conf, err, sizeof(err)));
	cr_assert(strstr(err, "store.path and store.url are both set"), "%s",
		  err);
	tbx_conf_destroy(conf);

	conf =
	    conf_of("store.path", "/nonexistent/s.db", "tokens.path",
		    "/nonexistent/t.db", "tokens.url", "postgresql:///x", NULL);
	cr_assert_null(tbx_worker_new(conf, err, sizeof(err)));
	cr_assert(strstr(err, "tokens.path and tokens.url are both set"), "%s",
		  err);
	cr_assert_null(tbx_publisher_new(conf, err, sizeof(err)));
	cr_assert(strstr(err, "tokens.path and tokens.url are both set"), "%s",
		  err);
	tbx_conf_destroy(conf);
}

/* The schema's default is the group id: one that cannot name a schema is
 * refused before any connection is tried, saying what to set. */
Test(conf_urls, a_group_id_that_is_no_schema_name_needs_store_schema)
{
	tbx_conf_t *conf =
	    conf_of("store.url", "postgresql://nobody@/x?host=/nonexistent",
		    "group.id", "orders service", NULL);
	char err[512];

	cr_assert_null(tbx_worker_new(conf, err, sizeof(err)));
	cr_assert(strstr(err, "store.schema") && strstr(err, "group id"), "%s",
		  err);
	tbx_conf_destroy(conf);
}

Test(conf_urls, the_token_store_is_named_without_its_password)
{
	tbx_conf_t *conf =
	    conf_of("store.url", "postgresql://svc:s3cret@db/shop", NULL);
	const tbx__cfg_t *cfg = tbx__conf_cfg(conf);
	char where[600], err[512];

	cr_assert(tbx__stores_tokens_set(cfg));
	tbx__stores_tokens_where(cfg, where, sizeof(where));
	cr_assert_null(strstr(where, "s3cret"), "%s", where);
	cr_assert(strstr(where, "db/shop") && strstr(where, "tokenbox_tokens"),
		  "%s", where);
	cr_assert_eq(
	    set(conf, "tokens.url", "host=t password=s3cret", err, sizeof(err)),
	    TBX_OK);
	tbx__stores_tokens_where(cfg, where, sizeof(where));
	cr_assert_null(strstr(where, "s3cret"), "%s", where);
	cr_assert(strstr(where, "host=t"), "%s", where);
	tbx_conf_destroy(conf);
}
