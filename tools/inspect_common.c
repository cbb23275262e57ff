/*
 * `tokenbox inspect`: what its commands share (tools/inspect.h): opening
 * the stores through their interfaces, reporting their errors in one
 * line, the lists of groups, and the sweeper's verdicts on registrations.
 *
 * What the protocol decides — which registrations are orphans — is asked
 * of the library's own code (tbx__sweep_classify), never re-implemented
 * here.
 */
#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "store/db.h"
#include "tools/cli.h"
#include "tools/inspect.h"

/*
 * Errors.
 */

int insp_store_fail(const char *path, int err, const char *msg)
{
	if (!msg)
		msg = tbx_strerror(err);
	switch (err) {
	case TBX_EBUSY:
		return tbx_cli_usage(INSPECT_CMD,
				     "%s: locked by another connection past "
				     "busy_timeout (--busy-timeout)",
				     path);
	case TBX_ECORRUPT:
		return tbx_cli_usage(INSPECT_CMD, "%s: file is corrupt (%s)",
				     path, msg);
	case TBX_ENOTDB:
		return tbx_cli_usage(
		    INSPECT_CMD, "%s: not a tokenbox database (%s)", path, msg);
	default:
		return tbx_cli_usage(INSPECT_CMD, "%s: %s", path, msg);
	}
}

int insp_s_fail(insp_t *in, int err)
{
	return insp_store_fail(in->s.name, err, tbx_outbox_errmsg(in->store));
}

int insp_t_fail(insp_t *in, int err)
{
	return insp_store_fail(in->t.name, err, tbx_tokens_errmsg(in->tokens));
}

/*
 * Opening.
 */

/* Reports a failed open in one line.  @returns INSPECT_EXIT_ERROR. */
static int open_fail(int err, const char *errstr)
{
	return tbx_cli_usage(INSPECT_CMD, "%s",
			     *errstr ? errstr : tbx_strerror(err));
}

int insp_stores(insp_t *in)
{
	const insp_opts_t *o = in->o;
	int rc;

	if ((rc = tbx_cli_store_set(INSPECT_CMD, &in->s, "--store", o->store,
				    "--schema", o->schema, NULL)))
		return rc;
	/* Without --tokens: the token tables of the --store file, or the
	 * token schema in the --store database. */
	if ((rc = tbx_cli_store_set(INSPECT_CMD, &in->t, "--tokens",
				    o->tokens ? o->tokens : o->store,
				    "--tokens-schema", o->tokens_schema,
				    TBX_CLI_TOKENS_SCHEMA)))
		return rc;
	in->single = tbx_cli_store_joined(&in->s, &in->t);
	return 0;
}

int insp_open(insp_t *in)
{
	const insp_opts_t *o = in->o;
	tbx__db_opts_t opts;
	char errstr[512] = "";
	int err;

	tbx__db_opts_init(&opts);
	opts.readonly = 1;
	opts.create = 0;
	opts.busy_timeout_ms = (int)o->busy_ms;
	if ((err = tbx_cli_open_outbox(&in->s, &opts, &in->store, errstr,
				       sizeof(errstr))))
		return open_fail(err, errstr);
	errstr[0] = '\0';
	/* One database: the token store reads through the service store's
	 * connection, in its snapshot. */
	if ((err = tbx_cli_open_tokens(&in->t, in->single ? in->store : NULL,
				       &opts, &in->tokens, errstr,
				       sizeof(errstr))))
		return open_fail(err, errstr);
	if ((err = tbx_outbox_schema(in->store, &in->schema[0])))
		return insp_s_fail(in, err);
	if ((err = tbx_tokens_schema(in->tokens, &in->schema[1])))
		return insp_t_fail(in, err);
	return 0;
}

void insp_close(insp_t *in)
{
	tbx_tokens_close(in->tokens);
	in->tokens = NULL;
	tbx_outbox_close(in->store);
	in->store = NULL;
}

int insp_read_begin(insp_t *in)
{
	int err;

	if ((err = tbx_outbox_read_begin(in->store)))
		return insp_s_fail(in, err);
	if ((err = tbx_tokens_read_begin(in->tokens)))
		return insp_t_fail(in, err);
	return 0;
}

void insp_read_end(insp_t *in)
{
	if (in->tokens)
		tbx_tokens_read_end(in->tokens);
	if (in->store)
		tbx_outbox_read_end(in->store);
}

int insp_open_write(insp_t *in, int synchronous_full, tbx_outbox_t **store,
		    tbx_tokens_t **tokens)
{
	char errstr[512] = "";
	int err = insp_open_write_err(in, synchronous_full, store, tokens,
				      errstr, sizeof(errstr));

	return err ? open_fail(err, errstr) : 0;
}

int insp_open_write_err(insp_t *in, int synchronous_full, tbx_outbox_t **store,
			tbx_tokens_t **tokens, char *errstr, size_t errstr_size)
{
	tbx__db_opts_t opts;
	int err;

	tbx__db_opts_init(&opts);
	opts.create = 0;
	opts.synchronous_full = synchronous_full;
	opts.busy_timeout_ms = (int)in->o->busy_ms;
	errstr[0] = '\0';
	if (store && (err = tbx_cli_open_outbox(&in->s, &opts, store, errstr,
						errstr_size)))
		return err;
	if (tokens && (err = tbx_cli_open_tokens(
			   &in->t, store && in->single ? *store : NULL, &opts,
			   tokens, errstr, errstr_size))) {
		if (store) {
			tbx_outbox_close(*store);
			*store = NULL;
		}
		return err;
	}
	return TBX_OK;
}

int insp_has_sets(insp_t *in, int *yes)
{
	int err;

	*yes = 0;
	if (!in->tokens->ops->sets_list || !in->tokens->ops->sets_summary)
		return TBX_OK;
	err = tbx_tokens_has(in->tokens, TBX_TOKENS_HAS_SETS, yes);
	if (err == TBX_EINVAL) {
		*yes = 0;
		return TBX_OK;
	}
	return err;
}

tbx__filter_t insp_filter(const insp_t *in, int older)
{
	tbx__filter_t f = TBX_FILTER_ALL;

	f.groups = in->o->groups;
	f.group_cnt = in->o->group_cnt;
	if (older && in->o->older_ms >= 0)
		f.created_max = in->now_ms - in->o->older_ms;
	f.limit = in->o->limit;
	return f;
}

/*
 * Lists of groups.
 */

int insp_has(char *const *list, size_t cnt, const char *grp)
{
	for (size_t i = 0; i < cnt; i++)
		if (strcmp(list[i], grp) == 0)
			return 1;
	return 0;
}

void insp_free_list(char **list, size_t cnt)
{
	for (size_t i = 0; list && i < cnt; i++)
		free(list[i]);
	free(list);
}

typedef struct str_list {
	char **list;
	size_t n, cap;
	int oom;
} str_list_t;

static int add_str(void *opaque, const char *s)
{
	str_list_t *l = opaque;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		char **grown = realloc(l->list, cap * sizeof(*grown));
		if (!grown)
			return l->oom = 1;
		l->list = grown;
		l->cap = cap;
	}
	if (!(l->list[l->n] = tbx__strdup(s)))
		return l->oom = 1;
	l->n++;
	return 0;
}

/* Collects a listing's texts; @p err its result.  @returns 0 or -1
 * after reporting. */
static int str_list_end(str_list_t *l, int err, int (*fail)(insp_t *, int),
			insp_t *in, char ***out, size_t *cnt)
{
	if (err || l->oom) {
		insp_free_list(l->list, l->n);
		if (err)
			fail(in, err);
		else
			tbx_cli_usage(INSPECT_CMD, "out of memory");
		*out = NULL;
		*cnt = 0;
		return -1;
	}
	*out = l->list;
	*cnt = l->n;
	return 0;
}

int insp_served_groups(insp_t *in, char ***out, size_t *cnt)
{
	str_list_t l = {0};
	int err = tbx_outbox_groups(in->store, add_str, &l);

	return str_list_end(&l, err, insp_s_fail, in, out, cnt);
}

int insp_reg_groups(insp_t *in, char ***out, size_t *cnt)
{
	str_list_t l = {0};
	int err = tbx_tokens_sender_groups(in->tokens, add_str, &l);

	return str_list_end(&l, err, insp_t_fail, in, out, cnt);
}

/*
 * Registrations as the sweeper judges them.
 */

const char *insp_verdict_text(int verdict)
{
	switch (verdict) {
	case TBX_SWEEP_WINNER:
		return "winner";
	case TBX_SWEEP_ORPHAN_OTHER_ATTEMPT:
		return "other attempt won";
	case TBX_SWEEP_ORPHAN_NO_ROW:
		return "no outbox row";
	case TBX_SWEEP_IN_FLIGHT:
		return "in flight";
	default:
		return "not checked";
	}
}

const char *insp_verdict_key(int verdict)
{
	switch (verdict) {
	case TBX_SWEEP_WINNER:
		return "winner";
	case TBX_SWEEP_ORPHAN_OTHER_ATTEMPT:
		return "other_attempt";
	case TBX_SWEEP_ORPHAN_NO_ROW:
		return "no_row";
	case TBX_SWEEP_IN_FLIGHT:
		return "in_flight";
	default:
		return "unchecked";
	}
}

typedef struct regs_each {
	insp_t *in;
	const char *grp;
	int (*fn)(void *opaque, const insp_reg_t *reg);
	void *opaque;
	int err; /* of the service store */
} regs_each_t;

static int judge_attempt(void *opaque, const tbx__reg_t *reg, int64_t tokens)
{
	regs_each_t *e = opaque;
	insp_reg_t r;

	memset(&r, 0, sizeof(r));
	r.reg = *reg;
	r.tokens = tokens;
	tbx__strlcpy(r.grp, e->grp, sizeof(r.grp));
	if ((e->err = tbx__sweep_classify(e->in->store, e->grp, &r.reg,
					  &r.verdict, r.row_attempt)))
		return 1;
	return e->fn(e->opaque, &r);
}

int insp_regs_each(insp_t *in, const char *grp,
		   int (*fn)(void *opaque, const insp_reg_t *reg), void *opaque)
{
	regs_each_t e = {in, grp, fn, opaque, TBX_OK};
	int err = tbx_tokens_attempts(in->tokens, grp, judge_attempt, &e);

	if (e.err)
		return insp_s_fail(in, e.err), -1;
	if (err)
		return insp_t_fail(in, err), -1;
	return 0;
}

/* Registrations of token sets are read a page at a time. */
#define SET_REGS_PAGE 1000

int insp_set_regs_each(insp_t *in, const char *grp,
		       int (*fn)(void *opaque, const insp_reg_t *reg),
		       void *opaque, int *why)
{
	tbx__reg_t after, *regs = NULL;
	int *verdicts = NULL, has = 0, page_why = TBX_OK, stop = 0, err;
	char(*rows)[TBX_UUID_LEN + 1] = NULL;
	size_t cnt = 0;

	if (why)
		*why = TBX_OK;
	if ((err = insp_has_sets(in, &has)))
		return insp_t_fail(in, err), -1;
	if (!has)
		return 0;
	memset(&after, 0, sizeof(after));
	if (!(verdicts = malloc(SET_REGS_PAGE * sizeof(*verdicts))) ||
	    !(rows = malloc(SET_REGS_PAGE * sizeof(*rows)))) {
		free(verdicts);
		return tbx_cli_usage(INSPECT_CMD, "out of memory"), -1;
	}
	do {
		if ((err = tbx_tokens_sets_registrations(
			 in->tokens, grp, cnt ? &after : NULL, SET_REGS_PAGE,
			 &regs, &cnt))) {
			insp_t_fail(in, err);
			break;
		}
		if ((err =
			 tbx__sweep_sets_classify(in->store, grp, regs, cnt,
						  verdicts, rows, &page_why))) {
			insp_s_fail(in, err);
			break;
		}
		if (page_why && why)
			*why = page_why;
		for (size_t i = 0; i < cnt && !stop; i++) {
			insp_reg_t r;

			memset(&r, 0, sizeof(r));
			r.reg = regs[i];
			r.sets = 1;
			r.verdict = verdicts[i];
			tbx__strlcpy(r.grp, grp, sizeof(r.grp));
			tbx__strlcpy(r.row_attempt, rows[i],
				     sizeof(r.row_attempt));
			stop = fn(opaque, &r);
		}
		if (cnt)
			after = regs[cnt - 1];
		free(regs);
		regs = NULL;
	} while (!stop && cnt == SET_REGS_PAGE);
	free(regs);
	free(verdicts);
	free(rows);
	return err ? -1 : 0;
}
