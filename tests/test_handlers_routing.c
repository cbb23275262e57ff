/* Routing by topic and tbx-type, with a catch-all per topic. */
#include <criterion/criterion.h>

#include "handlers/router.h"

static tbx_verdict_t h1(tbx_ctx_t *c, const tbx_msg_t *m, void *o)
{
	return TBX_VERDICT_OK;
}

static tbx_verdict_t h2(tbx_ctx_t *c, const tbx_msg_t *m, void *o)
{
	return TBX_VERDICT_REJECT;
}

Test(routing, exact_type_wins_over_the_catch_all)
{
	tbx_router_t *r = tbx_router_new();
	int a, b;

	cr_assert_eq(tbx_router_add(r, "orders", "OrderPlaced", h1, &a),
		     TBX_OK);
	cr_assert_eq(tbx_router_add(r, "orders", NULL, h2, &b), TBX_OK);
	const tbx__route_t *route =
	    tbx_router_lookup(r, "orders", "OrderPlaced");
	cr_assert(route && route->fn == h1 && route->opaque == &a);
	route = tbx_router_lookup(r, "orders", "Other");
	cr_assert(route && route->fn == h2 && route->opaque == &b);
	route = tbx_router_lookup(r, "orders", NULL);
	cr_assert(route && route->fn == h2);
	tbx_router_destroy(r);
}

Test(routing, unknown_type_without_catch_all_finds_nothing)
{
	tbx_router_t *r = tbx_router_new();

	cr_assert_eq(tbx_router_add(r, "orders", "OrderPlaced", h1, NULL),
		     TBX_OK);
	cr_assert_null(tbx_router_lookup(r, "orders", "Other"));
	cr_assert_null(tbx_router_lookup(r, "orders", NULL));
	cr_assert_null(tbx_router_lookup(r, "payments", "OrderPlaced"));
	tbx_router_destroy(r);
}

Test(routing, duplicate_and_invalid_registrations_are_refused)
{
	tbx_router_t *r = tbx_router_new();

	cr_assert_eq(tbx_router_add(r, "t", "A", h1, NULL), TBX_OK);
	cr_assert_eq(tbx_router_add(r, "t", "A", h2, NULL), TBX_EEXIST);
	cr_assert_eq(tbx_router_add(r, "t", NULL, h1, NULL), TBX_OK);
	cr_assert_eq(tbx_router_add(r, "t", NULL, h1, NULL), TBX_EEXIST);
	cr_assert_eq(tbx_router_add(r, "", "A", h1, NULL), TBX_EINVAL);
	cr_assert_eq(tbx_router_add(r, "t", "", h1, NULL), TBX_EINVAL);
	cr_assert_eq(tbx_router_add(r, "t", "B", NULL, NULL), TBX_EINVAL);
	tbx_router_destroy(r);
}

Test(routing, topics_are_listed_once_in_registration_order)
{
	tbx_router_t *r = tbx_router_new();

	tbx_router_add(r, "b", "X", h1, NULL);
	tbx_router_add(r, "a", "X", h1, NULL);
	tbx_router_add(r, "b", "Y", h1, NULL);
	cr_assert_eq(tbx_router_topic_count(r), 2);
	cr_assert_str_eq(tbx_router_topic(r, 0), "b");
	cr_assert_str_eq(tbx_router_topic(r, 1), "a");
	cr_assert_null(tbx_router_topic(r, 2));
	tbx_router_destroy(r);
}
