/*
 * `tokenbox inspect`: is it looking at the right pair of stores?
 *
 * Every worker records in its service store which token store its group
 * uses, by id and place (tbx_bindings, outbox/outbox.h), each time it
 * starts.  The stores given are compared with that record:
 *  - token_store_not_given: the --store's workers use a token store
 *    apart, and neither --tokens nor --tokens-schema names it (the
 *    file's own token tables, or the default token schema, are read
 *    instead);
 *  - token_store_mismatch: --tokens is not the token store they use;
 *  - tokens_is_a_service_store: --tokens is a service store whose own
 *    workers use another token store;
 *  - store_is_a_token_store: --store is the token store of the workers
 *    of --tokens: the two are swapped.
 * A store whose workers have not started since tokenbox recorded this
 * (schema 9; PostgreSQL: version 2) has no record and raises nothing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "tools/cli.h"
#include "tools/inspect.h"

typedef struct bindings {
	tbx__binding_t *b;
	size_t n;
	int oom;
} bindings_t;

static int add_binding(void *opaque, const tbx__binding_t *b)
{
	bindings_t *l = opaque;
	tbx__binding_t *grown = realloc(l->b, (l->n + 1) * sizeof(*grown));

	if (!grown)
		return l->oom = 1;
	l->b = grown;
	grown[l->n].grp = tbx__strdup(b->grp);
	grown[l->n].tokens_id = tbx__strdup(b->tokens_id);
	grown[l->n].tokens_where = tbx__strdup(b->tokens_where);
	grown[l->n].used_ms = b->used_ms;
	l->n++;
	if (!grown[l->n - 1].grp || !grown[l->n - 1].tokens_id ||
	    !grown[l->n - 1].tokens_where)
		return l->oom = 1;
	return 0;
}

static void bindings_free(bindings_t *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free((char *)l->b[i].grp);
		free((char *)l->b[i].tokens_id);
		free((char *)l->b[i].tokens_where);
	}
	free(l->b);
	memset(l, 0, sizeof(*l));
}

/* Adds a problem.  @returns 0, or -1 when out of memory. */
__attribute__((format(printf, 4, 5))) static int
problem(insp_t *in, const char *key, const char *grp, const char *fmt, ...)
{
	insp_problem_t *grown =
	    realloc(in->pair, (in->pair_cnt + 1) * sizeof(*grown));
	insp_problem_t *p;
	va_list ap;

	if (!grown)
		return -1;
	in->pair = grown;
	p = &grown[in->pair_cnt++];
	tbx__strlcpy(p->key, key, sizeof(p->key));
	tbx__strlcpy(p->grp, grp, sizeof(p->grp));
	va_start(ap, fmt);
	vsnprintf(p->text, sizeof(p->text), fmt, ap);
	va_end(ap);
	return 0;
}

/* The id of the token store @p t into @p id ("" for a store older than
 * store ids).  @returns TBX_OK or the error. */
static int tokens_id(tbx_tokens_t *t, char id[TBX_UUID_LEN + 1])
{
	int has = 0, err;

	id[0] = '\0';
	if ((err = tbx_tokens_has(t, TBX_TOKENS_HAS_STORE_ID, &has)) || !has)
		return err;
	return tbx_tokens_store_id(t, id);
}

/* The store id of the --store file when it is not the --tokens one: its
 * token tables', read on its connection.  "" for PostgreSQL, whose
 * service schema is never a token store. */
static int store_file_id(insp_t *in, const char *t_id,
			 char id[TBX_UUID_LEN + 1])
{
	tbx__db_opts_t opts;
	tbx_tokens_t *t = NULL;
	char errstr[512];
	int err;

	id[0] = '\0';
	if (in->single) {
		tbx__strlcpy(id, t_id, TBX_UUID_LEN + 1);
		return TBX_OK;
	}
	if (in->s.pg)
		return TBX_OK;
	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	opts.create = 0;
	opts.busy_timeout_ms = (int)in->o->busy_ms;
	if ((err = tbx_cli_open_tokens(&in->s, in->store, &opts, &t, errstr,
				       sizeof(errstr))))
		return err;
	err = tokens_id(t, id);
	tbx_tokens_close(t);
	return err;
}

/* The records of the --tokens file as a service store (none for a token
 * schema on PostgreSQL, or when --tokens is the --store). */
static int tokens_file_bindings(insp_t *in, bindings_t *l)
{
	tbx__db_opts_t opts;
	tbx_outbox_t *store = NULL;
	char errstr[512];
	int err;

	if (in->single || in->t.pg)
		return TBX_OK;
	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	opts.create = 0;
	opts.busy_timeout_ms = (int)in->o->busy_ms;
	if ((err = tbx_cli_open_outbox(&in->t, &opts, &store, errstr,
				       sizeof(errstr))))
		return err;
	err = tbx_outbox_bindings(store, add_binding, l);
	tbx_outbox_close(store);
	return err;
}

/* The problems of the --store's own records. */
static int store_problems(insp_t *in, const bindings_t *s, const char *t_id)
{
	for (size_t i = 0; i < s->n; i++) {
		const tbx__binding_t *b = &s->b[i];
		int rc;

		if (strcmp(b->tokens_id, t_id) == 0)
			continue;
		if (in->single && !in->o->tokens && !in->o->tokens_schema)
			rc = problem(in, "token_store_not_given", b->grp,
				     "group %s's workers use the token store "
				     "%s (id %s), not the token tables of %s "
				     "(id %s): give it with --tokens%s",
				     b->grp, b->tokens_where, b->tokens_id,
				     in->t.name, t_id,
				     in->s.pg ? " (and --tokens-schema)" : "");
		else if (in->single)
			rc = problem(in, "token_store_mismatch", b->grp,
				     "group %s's workers use the token store "
				     "%s (id %s), not the token tables of %s "
				     "(id %s)",
				     b->grp, b->tokens_where, b->tokens_id,
				     in->t.name, t_id);
		else
			rc = problem(in, "token_store_mismatch", b->grp,
				     "group %s's workers use the token store "
				     "%s (id %s), not %s (id %s)",
				     b->grp, b->tokens_where, b->tokens_id,
				     in->t.name, t_id);
		if (rc)
			return rc;
	}
	return 0;
}

/* The problems of the --tokens file's own records as a service store. */
static int tokens_problems(insp_t *in, const bindings_t *s, const bindings_t *t,
			   const char *t_id, const char *s_id)
{
	for (size_t i = 0; i < t->n; i++) {
		const tbx__binding_t *b = &t->b[i];

		/* A file that is its own workers' token store (single-file
		 * mode) is a token store too. */
		if (strcmp(b->tokens_id, t_id) == 0)
			continue;
		if (problem(in, "tokens_is_a_service_store", b->grp,
			    "--tokens %s is the service store of group %s, "
			    "whose workers use the token store %s (id %s)",
			    in->t.name, b->grp, b->tokens_where, b->tokens_id))
			return -1;
		if (!s->n && *s_id && strcmp(b->tokens_id, s_id) == 0 &&
		    problem(in, "store_is_a_token_store", b->grp,
			    "--store %s is the token store of group %s, "
			    "whose service store is %s: the two are swapped",
			    in->s.name, b->grp, in->t.name))
			return -1;
	}
	return 0;
}

int insp_pair_check(insp_t *in)
{
	char t_id[TBX_UUID_LEN + 1], s_id[TBX_UUID_LEN + 1];
	bindings_t s = {0}, t = {0};
	int err, rc = 0;

	if ((err = tokens_id(in->tokens, t_id)))
		return insp_t_fail(in, err);
	/* A token store older than store ids cannot be told apart. */
	if (!*t_id)
		return 0;
	if ((err = tbx_outbox_bindings(in->store, add_binding, &s))) {
		bindings_free(&s);
		return insp_s_fail(in, err);
	}
	if ((err = store_file_id(in, t_id, s_id))) {
		rc = insp_store_fail(in->s.name, err, NULL);
		goto out;
	}
	if ((err = tokens_file_bindings(in, &t))) {
		rc = insp_store_fail(in->t.name, err, NULL);
		goto out;
	}
	if (s.oom || t.oom || store_problems(in, &s, t_id) ||
	    tokens_problems(in, &s, &t, t_id, s_id))
		rc = tbx_cli_usage(INSPECT_CMD, "out of memory");
out:
	bindings_free(&s);
	bindings_free(&t);
	return rc;
}

void insp_pair_warn(const insp_t *in)
{
	for (size_t i = 0; i < in->pair_cnt; i++)
		fprintf(stderr,
			"tokenbox %s: warning: wrong pair of stores: %s\n",
			INSPECT_CMD, in->pair[i].text);
}

void insp_pair_free(insp_t *in)
{
	free(in->pair);
	in->pair = NULL;
	in->pair_cnt = 0;
}
