/*
 * Configuration: every row of the property table lands in its own typed
 * field of tbx__cfg_t -- the default at first, then each value set by
 * name, converted -- and a copy carries the fields along.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/conf.h"

static const char *field_str(const tbx__cfg_t *cfg, const tbx__prop_t *p)
{
	const char *v;

	memcpy(&v, (const char *)cfg + p->offset, sizeof(v));
	return v;
}

static int64_t field_int(const tbx__cfg_t *cfg, const tbx__prop_t *p)
{
	int64_t v;

	memcpy(&v, (const char *)cfg + p->offset, sizeof(v));
	return v;
}

static int field_enum(const tbx__cfg_t *cfg, const tbx__prop_t *p)
{
	int v;

	memcpy(&v, (const char *)cfg + p->offset, sizeof(v));
	return v;
}

static size_t field_size(const tbx__prop_t *p)
{
	switch (p->type) {
	case TBX_PT_STR:
	case TBX_PT_PATH:
		return sizeof(const char *);
	case TBX_PT_INT:
		return sizeof(int64_t);
	case TBX_PT_ENUM:
		return sizeof(int);
	}
	return 0;
}

/* The field's value as the row would store @p text. */
static void assert_field_is(const tbx__cfg_t *cfg, const tbx__prop_t *p,
			    const char *text)
{
	switch (p->type) {
	case TBX_PT_STR:
	case TBX_PT_PATH:
		if (!text)
			cr_assert_null(field_str(cfg, p), "%s", p->name);
		else
			cr_assert_str_eq(field_str(cfg, p), text, "%s",
					 p->name);
		return;
	case TBX_PT_INT:
		cr_assert_eq(field_int(cfg, p), strtoll(text, NULL, 10),
			     "%s: %lld, expected %s", p->name,
			     (long long)field_int(cfg, p), text);
		return;
	case TBX_PT_ENUM:
		for (const tbx__s2i_t *e = p->s2i; e->str; e++)
			if (strcmp(e->str, text) == 0) {
				cr_assert_eq(field_enum(cfg, p), e->val,
					     "%s=%s: %d, expected %d", p->name,
					     text, field_enum(cfg, p), e->val);
				return;
			}
		cr_assert_fail("%s: '%s' is not one of its values", p->name,
			       text);
	}
}

Test(conf_fields, every_row_names_its_own_field)
{
	size_t n = 0;

	for (const tbx__prop_t *p = tbx__props; p->name; p++, n++) {
		char want[64];

		snprintf(want, sizeof(want), "%s", p->name);
		for (char *c = want; *c; c++)
			if (*c == '.')
				*c = '_';
		cr_assert_str_eq(p->field, want, "row %s", p->name);
		cr_assert_leq(p->offset + field_size(p), sizeof(tbx__cfg_t),
			      "%s", p->name);
		cr_assert_eq(p->type == TBX_PT_ENUM, p->s2i != NULL, "%s",
			     p->name);
		for (const tbx__prop_t *q = tbx__props; q != p; q++)
			cr_assert_neq(q->offset, p->offset, "%s and %s",
				      q->name, p->name);
	}
	cr_assert_gt(n, 0);
}

Test(conf_fields, defaults_land_in_the_fields)
{
	tbx_conf_t *conf = tbx_conf_new();
	const tbx__cfg_t *cfg = tbx__conf_cfg(conf);
	char err[512] = "";

	for (const tbx__prop_t *p = tbx__props; p->name; p++) {
		assert_field_is(cfg, p, p->def);
		/* A default is a value the row accepts. */
		cr_assert(!p->def || tbx_conf_set(conf, p->name, p->def, err,
						  sizeof(err)) == TBX_OK,
			  "%s=%s: %s", p->name, p->def, err);
	}
	cr_assert_eq(cfg->batch_max_messages, 500);
	cr_assert_eq(cfg->store_synchronous, TBX_SYNC_FULL);
	cr_assert_eq(cfg->ingress_untokened, TBX_UNTOKENED_REJECT);
	cr_assert_eq(cfg->tokens_create, 0);
	cr_assert_null(cfg->group_id);
	cr_assert_str_eq(cfg->dlq_suffix, ".dlq");
	tbx_conf_destroy(conf);
}

/* A valid value of @p p other than its default: the top of an INT range,
 * the longest string of the lower range ('a's; a port for
 * metrics.listen, a connection string for the URLs). */
static void other_value(const tbx__prop_t *p, char *buf, size_t size)
{
	switch (p->type) {
	case TBX_PT_INT:
		snprintf(
		    buf, size, "%lld",
		    (long long)(p->def && strtoll(p->def, NULL, 10) == p->max
				    ? p->min
				    : p->max));
		return;
	case TBX_PT_STR:
	case TBX_PT_PATH: {
		size_t len = p->min > 3 ? (size_t)p->min : 3;

		if (p->offset == offsetof(tbx__cfg_t, metrics_listen)) {
			snprintf(buf, size, "9100");
			return;
		}
		if (p->offset == offsetof(tbx__cfg_t, store_url) ||
		    p->offset == offsetof(tbx__cfg_t, tokens_url)) {
			snprintf(buf, size, "host=aaa");
			return;
		}
		memset(buf, 'a', len);
		buf[len] = '\0';
		return;
	}
	case TBX_PT_ENUM:
		break;
	}
}

Test(conf_fields, a_value_set_by_name_lands_in_its_field)
{
	tbx_conf_t *conf = tbx_conf_new();
	const tbx__cfg_t *cfg = tbx__conf_cfg(conf);
	char err[512], value[64];

	for (const tbx__prop_t *p = tbx__props; p->name; p++) {
		if (p->type == TBX_PT_ENUM) {
			/* Every value, so that each text maps to its own. */
			for (const tbx__s2i_t *e = p->s2i; e->str; e++) {
				cr_assert_eq(tbx_conf_set(conf, p->name, e->str,
							  err, sizeof(err)),
					     TBX_OK, "%s=%s: %s", p->name,
					     e->str, err);
				assert_field_is(cfg, p, e->str);
				for (const tbx__s2i_t *f = p->s2i; f != e; f++)
					cr_assert_neq(f->val, e->val, "%s",
						      p->name);
			}
			continue;
		}
		other_value(p, value, sizeof(value));
		cr_assert_eq(
		    tbx_conf_set(conf, p->name, value, err, sizeof(err)),
		    TBX_OK, "%s=%s: %s", p->name, value, err);
		assert_field_is(cfg, p, value);
		cr_assert_str_eq(tbx_conf_get(conf, p->name), value);
	}
	tbx_conf_destroy(conf);
}

Test(conf_fields, a_copy_carries_the_fields)
{
	tbx_conf_t *conf = tbx_conf_new(), *copy;
	const tbx__cfg_t *cfg;
	char err[256];

	cr_assert_eq(
	    tbx_conf_set(conf, "batch.max.messages", "7", err, sizeof(err)),
	    TBX_OK);
	cr_assert_eq(
	    tbx_conf_set(conf, "store.synchronous", "normal", err, sizeof(err)),
	    TBX_OK);
	cr_assert_eq(tbx_conf_set(conf, "group.id", "g", err, sizeof(err)),
		     TBX_OK);
	copy = tbx_conf_dup(conf);
	tbx_conf_destroy(conf);
	cfg = tbx__conf_cfg(copy);
	for (const tbx__prop_t *p = tbx__props; p->name; p++)
		assert_field_is(cfg, p, tbx_conf_get(copy, p->name));
	cr_assert_eq(cfg->batch_max_messages, 7);
	cr_assert_eq(cfg->store_synchronous, TBX_SYNC_NORMAL);
	cr_assert_str_eq(cfg->group_id, "g");
	tbx_conf_destroy(copy);
}

Test(conf_fields, a_refused_value_leaves_the_field)
{
	tbx_conf_t *conf = tbx_conf_new();
	const tbx__cfg_t *cfg = tbx__conf_cfg(conf);
	char err[256];

	cr_assert_eq(tbx_conf_set(conf, "retry.max", "12", err, sizeof(err)),
		     TBX_OK);
	cr_assert_eq(tbx_conf_set(conf, "retry.max", "1001", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert_eq(tbx_conf_set(conf, "retry.max", "x", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert_eq(cfg->retry_max, 12);
	cr_assert_eq(tbx_conf_set(conf, "ingress.untokened", "offsets", err,
				  sizeof(err)),
		     TBX_OK);
	cr_assert_eq(
	    tbx_conf_set(conf, "ingress.untokened", "drop", err, sizeof(err)),
	    TBX_ECONF);
	cr_assert_eq(cfg->ingress_untokened, TBX_UNTOKENED_OFFSETS);
	cr_assert_eq(
	    tbx_conf_set(conf, "dlq.suffix", "-dead", err, sizeof(err)),
	    TBX_OK);
	cr_assert_eq(tbx_conf_set(conf, "dlq.suffix", "/x", err, sizeof(err)),
		     TBX_ECONF);
	cr_assert_str_eq(cfg->dlq_suffix, "-dead");
	tbx_conf_destroy(conf);
}
