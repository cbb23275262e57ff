/*
 * `tokenbox demo` run as a child process: the whole pipeline (duplicates
 * at both hops, a worker restarted mid-stream) ends with every order taking
 * effect exactly once and an empty token store, without a warning in its
 * log, with the ingress publisher's tokens per message or in sets; bad
 * arguments exit 2.
 */
#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_child.h"
#include "support.h"

#define DEMO_TIMEOUT_MS 300000

static double num(const cJSON *obj, const char *name)
{
	const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, name);

	cr_assert(cJSON_IsNumber(item), "no number '%s' in the result", name);
	return item->valuedouble;
}

Test(cli_demo, every_order_takes_effect_exactly_once_at_both_hops,
     .timeout = 600)
{
	const char *args[] = {"demo",	"--messages", "2000", "--json",
			      "--seed", "7",	      NULL};
	cc_result_t res = cc_run_with(args, NULL, 0, DEMO_TIMEOUT_MS);
	cJSON *o, *once;

	cr_assert(res.status != -1, "the demo did not finish");
	o = cJSON_Parse(res.out);
	cr_assert(o, "stdout is not JSON: %s", res.out);
	once = cJSON_GetObjectItemCaseSensitive(o, "exactly_once");
	cr_assert(cJSON_IsTrue(once), "not exactly once: %s", res.out);
	cr_expect_eq(num(o, "messages"), 2000);
	cr_expect_eq(num(o, "orders_rows"), 2000);
	cr_expect_eq(num(o, "orders_distinct"), 2000);
	cr_expect_eq(num(o, "payments_rows"), 2000);
	cr_expect_eq(num(o, "payments_distinct"), 2000);
	cr_expect_gt(num(o, "duplicates_injected"), 0);
	cr_expect_gt(num(o, "duplicates_injected_orders"), 0);
	cr_expect_gt(num(o, "duplicates_injected_payments"), 0);
	cr_expect_gt(num(o, "duplicates_dropped"), 0);
	cr_expect_eq(num(o, "worker_restarts"), 1);
	cr_expect_eq(num(o, "tokens_left"), 0, "%s", res.out);
	cr_expect_eq(num(o, "registrations_left"), 0, "%s", res.out);
	cr_expect_gt(num(o, "elapsed_s"), 0);
	cr_expect(cc_exited(res.status, 0), "status %d", res.status);
	/* A healthy run alarms nobody: the copies it injects are proven
	 * duplicates (their tokens were seen alive), not a wrong store. */
	cr_expect(!strstr(res.err, " WARN ") && !strstr(res.err, " ERROR "),
		  "a healthy run logged a warning:\n%s", res.err);
	cJSON_Delete(o);
	cc_result_free(&res);
}

/* The demo's result for @p format ("message" or "set"): asserted to be
 * a finished run's JSON naming that format. */
static cJSON *demo_json(const char *format)
{
	const char *args[] = {
	    "demo", "--messages",      "300",  "--json", "--seed",
	    "11",   "--tokens-format", format, NULL};
	cc_result_t res = cc_run_with(args, NULL, 0, DEMO_TIMEOUT_MS);
	const cJSON *f;
	cJSON *o;

	cr_assert(res.status != -1, "%s: the demo did not finish", format);
	cr_assert(cc_exited(res.status, 0), "%s: status %d: %s", format,
		  res.status, res.err);
	o = cJSON_Parse(res.out);
	cr_assert(o, "%s: stdout is not JSON: %s", format, res.out);
	f = cJSON_GetObjectItemCaseSensitive(o, "tokens_format");
	cr_assert(cJSON_IsString(f) && strcmp(f->valuestring, format) == 0,
		  "%s", res.out);
	cr_expect(!strstr(res.err, " WARN ") && !strstr(res.err, " ERROR "),
		  "%s: a healthy run logged a warning:\n%s", format, res.err);
	cc_result_free(&res);
	return o;
}

/* The ingress publisher minting token sets (--tokens-format set) ends
 * as the per-message run does: every order once at both hops, nothing
 * left in the token store. */
Test(cli_demo, token_sets_at_ingress_end_as_message_tokens_do, .timeout = 900)
{
	static const char *const same[] = {
	    "messages",	     "orders_rows",	   "orders_distinct",
	    "payments_rows", "payments_distinct",  "worker_restarts",
	    "tokens_left",   "registrations_left", "token_sets_left"};
	cJSON *msg = demo_json("message"), *set = demo_json("set");

	cr_assert(cJSON_IsTrue(
	    cJSON_GetObjectItemCaseSensitive(set, "exactly_once")));
	cr_assert(cJSON_IsTrue(
	    cJSON_GetObjectItemCaseSensitive(msg, "exactly_once")));
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
		cr_expect_eq(num(set, same[i]), num(msg, same[i]), "%s",
			     same[i]);
	cr_expect_eq(num(set, "payments_distinct"), 300);
	cr_expect_eq(num(set, "token_sets_left"), 0);
	cr_expect_gt(num(set, "duplicates_dropped"), 0);
	cJSON_Delete(msg);
	cJSON_Delete(set);
}

Test(cli_demo, keep_leaves_the_stores_in_the_directory, .timeout = 600)
{
	char *dir = tt_tmpdir();
	char *keep = tt_path(dir, "stores");
	char *orders = tt_path(keep, "order-service.db");
	char *payments = tt_path(keep, "payment-service.db");
	char *tokens = tt_path(keep, "tokens.db");
	const char *args[] = {"demo", "--messages", "50", "--keep", keep, NULL};
	cc_result_t res = cc_run_with(args, NULL, 0, DEMO_TIMEOUT_MS);

	cr_assert(cc_exited(res.status, 0), "status %d: %s", res.status,
		  res.err);
	cr_expect(strstr(res.out, "exactly once: yes"), "%s", res.out);
	cr_expect(strstr(res.out, keep), "the summary does not name %s", keep);
	cr_expect_eq(tt_count(orders, "SELECT COUNT(DISTINCT order_no) "
				      "FROM orders"),
		     50);
	cr_expect_eq(tt_count(payments, "SELECT COUNT(*) FROM payments"), 50);
	cr_expect_eq(tt_count(tokens, "SELECT COUNT(*) FROM tbx_tokens"), 0);
	cc_result_free(&res);

	/* Run again into the same, now non-empty, directory: refused. */
	res = cc_run(args);
	cr_expect(cc_exited(res.status, 2), "status %d", res.status);
	cr_expect(strstr(res.err, "not empty"), "%s", res.err);
	cr_expect_eq(cc_lines(res.err), 1, "%s", res.err);
	cc_result_free(&res);

	tt_rmrf(dir);
	free(dir);
	free(keep);
	free(orders);
	free(payments);
	free(tokens);
}

Test(cli_demo, bad_arguments_exit_2_naming_the_option, .timeout = 120)
{
	static const struct {
		const char *args[4];
		const char *key;
	} cases[] = {
	    {{"--messages", "0"}, "--messages"},
	    {{"--messages", "1000001"}, "--messages"},
	    {{"--messages", "ten"}, "--messages"},
	    {{"--messages"}, "--messages"},
	    {{"--seed", "-1"}, "--seed"},
	    {{"--keep", ""}, "--keep"},
	    {{"--bootstrap-servers", ""}, "--bootstrap-servers"},
	    {{"--bootstrap-servers"}, "--bootstrap-servers"},
	    {{"--tokens-format", "sets"}, "--tokens-format"},
	    {{"--tokens-format", ""}, "--tokens-format"},
	    {{"--tokens-format"}, "--tokens-format"},
	    {{"--frobnicate"}, "--frobnicate"},
	    {{"surplus"}, "surplus"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[6] = {"demo"};
		cc_result_t res;

		for (size_t j = 0; cases[i].args[j]; j++)
			args[j + 1] = cases[i].args[j];
		res = cc_run(args);
		cr_assert(cc_exited(res.status, 2), "case %zu: status %d", i,
			  res.status);
		cr_assert_str_empty(res.out, "case %zu: %s", i, res.out);
		cr_assert(strstr(res.err, cases[i].key), "case %zu: %s", i,
			  res.err);
		cr_assert(strncmp(res.err, "tokenbox demo: ", 15) == 0,
			  "case %zu: %s", i, res.err);
		cr_assert_eq(cc_lines(res.err), 1, "case %zu: %s", i, res.err);
		cc_result_free(&res);
	}
}
