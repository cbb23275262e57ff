/*
 * Configuration: every value is checked where it is set, and the error
 * names the key, the value and the reason.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tokenbox/tokenbox.h"

static int set(tbx_conf_t *conf, const char *k, const char *v, char *err,
	       size_t n)
{
	return tbx_conf_set(conf, k, v, err, n);
}

Test(conf, defaults_are_readable)
{
	tbx_conf_t *conf = tbx_conf_new();

	cr_assert_str_eq(tbx_conf_get(conf, "batch.max.messages"), "500");
	cr_assert_str_eq(tbx_conf_get(conf, "ingress.untokened"), "reject");
	cr_assert_str_eq(tbx_conf_get(conf, "store.synchronous"), "full");
	cr_assert_null(tbx_conf_get(conf, "group.id"));
	cr_assert_null(tbx_conf_get(conf, "no.such.key"));
	tbx_conf_destroy(conf);
}

Test(conf, unknown_key_is_refused_with_its_name)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[256];

	cr_assert_eq(set(conf, "batch.max.mesages", "5", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "batch.max.mesages"), "%s", err);
	cr_assert(strstr(err, "unknown"), "%s", err);
	tbx_conf_destroy(conf);
}

Test(conf, an_unknown_key_suggests_the_nearest_known_one)
{
	static const struct {
		const char *typed, *meant;
	} close[] = {
	    {"batch.max.msgs", "batch.max.messages"},
	    {"batch.max.mesages", "batch.max.messages"},
	    {"tokens.pth", "tokens.path"},
	    {"stoer.path", "store.path"},
	    {"group_id", "group.id"},
	    {"Log.Level", "log.level"},
	};
	static const char *const far[] = {"frobnicate", "no.such.key",
					  "bootstrap.servers", "x"};
	tbx_conf_t *conf = tbx_conf_new();
	char err[256], want[128];

	for (size_t i = 0; i < sizeof(close) / sizeof(close[0]); i++) {
		cr_assert_eq(set(conf, close[i].typed, "5", err, sizeof(err)),
			     TBX_ECONF);
		snprintf(want, sizeof(want), "did you mean '%s'?",
			 close[i].meant);
		cr_expect(strstr(err, want), "%s: %s", close[i].typed, err);
		cr_expect(strstr(err, close[i].typed), "%s", err);
	}
	/* Nothing is suggested for a name that is no near miss. */
	for (size_t i = 0; i < sizeof(far) / sizeof(far[0]); i++) {
		cr_assert_eq(set(conf, far[i], "5", err, sizeof(err)),
			     TBX_ECONF);
		cr_expect(!strstr(err, "did you mean"), "%s: %s", far[i], err);
		cr_expect(strstr(err, "unknown configuration key"), "%s", err);
	}
	tbx_conf_destroy(conf);
}

/* A known key's last part alone is named as the key meant; a librdkafka
 * property without its prefix is said to be one; a name neither knows is
 * not called a librdkafka property. */
Test(conf, an_unknown_key_names_its_suffix_key_or_librdkafka)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];

	cr_assert_eq(set(conf, "layout", "batch", err, sizeof(err)), TBX_ECONF);
	cr_expect(strstr(err, "did you mean 'outbox.layout'?"), "%s", err);
	/* tokens.format and log.format: no guess between them */
	cr_assert_eq(set(conf, "format", "set", err, sizeof(err)), TBX_ECONF);
	cr_expect(!strstr(err, "did you mean"), "%s", err);
	cr_assert_eq(set(conf, "bootstrap.servers", "h:9092", err, sizeof(err)),
		     TBX_ECONF);
	cr_expect(strstr(err, "'kafka.bootstrap.servers'"), "%s", err);
	cr_assert_eq(set(conf, "frobnicate", "1", err, sizeof(err)), TBX_ECONF);
	cr_expect(strstr(err, "unknown configuration key") &&
		      strstr(err, "no librdkafka property") &&
		      !strstr(err, "kafka.frobnicate"),
		  "%s", err);
	tbx_conf_destroy(conf);
}

Test(conf, integer_out_of_range_names_key_value_and_range)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[256];

	cr_assert_eq(set(conf, "batch.max.messages", "0", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "batch.max.messages") && strstr(err, "0") &&
		      strstr(err, "1..100000"),
		  "%s", err);
	cr_assert_eq(set(conf, "batch.max.messages", "12x", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "not an integer"), "%s", err);
	cr_assert_eq(set(conf, "batch.max.messages", "", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert_eq(set(conf, "batch.max.messages", "99999999999999999999999",
			 err, sizeof(err)),
		     TBX_ECONF);
	/* a refused value leaves the old one */
	cr_assert_str_eq(tbx_conf_get(conf, "batch.max.messages"), "500");
	cr_assert_eq(
	    set(conf, "batch.max.messages", "100000", err, sizeof(err)),
	    TBX_OK);
	cr_assert_str_eq(tbx_conf_get(conf, "batch.max.messages"), "100000");
	tbx_conf_destroy(conf);
}

Test(conf, enum_lists_the_allowed_values)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[256];

	cr_assert_eq(set(conf, "ingress.untokened", "drop", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "reject|offsets"), "%s", err);
	cr_assert_eq(
	    set(conf, "ingress.untokened", "offsets", err, sizeof(err)),
	    TBX_OK);
	tbx_conf_destroy(conf);
}

Test(conf, strings_refuse_control_characters_and_empty_group)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[256];

	cr_assert_eq(set(conf, "group.id", "", err, sizeof(err)), TBX_ECONF);
	cr_assert_eq(set(conf, "group.id", "a\nb", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "control character"), "%s", err);
	tbx_conf_destroy(conf);
}

Test(conf, kafka_keys_are_checked_by_librdkafka)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];

	cr_assert_eq(set(conf, "kafka.no.such.property", "1", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "kafka.no.such.property"), "%s", err);
	cr_assert_eq(
	    set(conf, "kafka.session.timeout.ms", "abc", err, sizeof(err)),
	    TBX_ECONF);
	cr_assert_eq(set(conf, "kafka.consumer.session.timeout.ms", "6000", err,
			 sizeof(err)),
		     TBX_OK);
	cr_assert_str_eq(
	    tbx_conf_get(conf, "kafka.consumer.session.timeout.ms"), "6000");
	tbx_conf_destroy(conf);
}

Test(conf, kafka_keys_that_tokenbox_manages_are_refused)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];

	cr_assert_eq(
	    set(conf, "kafka.enable.auto.commit", "true", err, sizeof(err)),
	    TBX_ECONF);
	cr_assert(strstr(err, "set by tokenbox"), "%s", err);
	cr_assert_eq(set(conf, "kafka.producer.enable.idempotence", "false",
			 err, sizeof(err)),
		     TBX_ECONF);
	cr_assert_eq(set(conf, "kafka.group.id", "x", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert(strstr(err, "use group.id"), "%s", err);
	tbx_conf_destroy(conf);
}

Test(conf, worker_refuses_a_conf_without_required_keys)
{
	tbx_conf_t *conf = tbx_conf_new();
	char err[512];

	cr_assert_eq(set(conf, "group.id", "g", err, sizeof(err)), TBX_OK);
	cr_assert_null(tbx_worker_new(conf, err, sizeof(err)));
	cr_assert(strstr(err, "store.path"), "%s", err);
	cr_assert_eq(set(conf, "store.path", "/tmp/x.db", err, sizeof(err)),
		     TBX_OK);
	cr_assert_null(tbx_worker_new(conf, err, sizeof(err)));
	cr_assert(strstr(err, "kafka.bootstrap.servers"), "%s", err);
	tbx_conf_destroy(conf); /* still ours: tbx_worker_new failed */
}

Test(conf, dup_is_deep)
{
	tbx_conf_t *conf = tbx_conf_new();
	tbx_conf_t *copy;

	cr_assert_eq(tbx_conf_set(conf, "group.id", "g", NULL, 0), TBX_OK);
	cr_assert_eq(tbx_conf_set(conf, "kafka.linger.ms", "5", NULL, 0),
		     TBX_OK);
	copy = tbx_conf_dup(conf);
	tbx_conf_destroy(conf);
	cr_assert_str_eq(tbx_conf_get(copy, "group.id"), "g");
	cr_assert_str_eq(tbx_conf_get(copy, "kafka.linger.ms"), "5");
	tbx_conf_destroy(copy);
	tbx_conf_destroy(NULL);
}

Test(errors, every_code_has_a_name_and_a_message)
{
	static const int codes[] = {
#define CODE(name, value, retriable, msg) TBX_E##name,
	    TBX_ERRNO_MAP(CODE)
#undef CODE
	};

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		cr_assert_neq(strcmp(tbx_err_name(codes[i]), "UNKNOWN"), 0);
		cr_assert_gt(strlen(tbx_strerror(codes[i])), 3);
	}
	cr_assert_str_eq(tbx_err_name(TBX_EBUSY), "BUSY");
	cr_assert(tbx_err_is_retriable(TBX_EBUSY));
	cr_assert(!tbx_err_is_retriable(TBX_ESCHEMA));
	cr_assert_str_eq(tbx_err_name(9999), "UNKNOWN");
	cr_assert_str_eq(tbx_version(), TBX_VERSION_STR);
}

/* One sign: a negated code is no code. */
Test(errors, a_negative_number_is_unknown)
{
	cr_assert_str_eq(tbx_err_name(-TBX_EBUSY), "UNKNOWN");
	cr_assert_str_eq(tbx_strerror(-TBX_EBUSY), "unknown error");
	cr_assert_not(tbx_err_is_retriable(-TBX_EBUSY));
}

/* The values are ABI: removing a code leaves the others' numbers as they
 * were, and its number names nothing. */
Test(errors, codes_keep_their_numbers)
{
	cr_assert_eq(TBX_OK, 0);
	cr_assert_eq(TBX_EINVAL, 1);
	cr_assert_eq(TBX_ESTORE, 9);
	cr_assert_eq(TBX_ETIMEOUT, 15);
	cr_assert_eq(TBX_EMISMATCH, 19);
	cr_assert_eq(TBX_EFATAL, 20);
	for (int e = 16; e <= 18; e++) {
		cr_assert_str_eq(tbx_err_name(e), "UNKNOWN");
		cr_assert_str_eq(tbx_strerror(e), "unknown error");
	}
}

/* The map is the only retry policy: a store error (a statement failed and
 * its transaction was rolled back) is retried, as the worker retries the
 * batch it failed. */
Test(errors, a_store_error_is_retriable)
{
	cr_assert(tbx_err_is_retriable(TBX_ESTORE));
	cr_assert(tbx_err_is_retriable(TBX_EDELIVERY));
	cr_assert_not(tbx_err_is_retriable(TBX_ECORRUPT));
	cr_assert_not(tbx_err_is_retriable(TBX_EFATAL));
}
