/*
 * `tokenbox inspect status` (tools/inspect.h): one summary of both
 * stores — pending outbox rows, tokens, registrations judged as the
 * sweeper would, subscriptions, ingress offsets, dead letters,
 * undelivered messages, the ingress edge and the alarms workers raised —
 * read through the stores' interfaces in one snapshot of each.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "tools/cli.h"
#include "tools/inspect.h"

/*
 * status
 */

typedef struct grp_counts {
	char *grp;
	int64_t n[5]; /* the query's integer columns */
	int64_t oldest_ms;
	int checked;
	int64_t v[5]; /* per tbx__sweep_verdict_t */
} grp_counts_t;

typedef struct status {
	grp_counts_t *outbox, *tokens, *regs, *dls;
	size_t outbox_n, tokens_n, regs_n, dls_n;
	/* Token sets (schema 11, token version 3): per group, n[0] set
	 * rows, n[1] pending bits (sets_summary), n[2] registrations as
	 * sender (sets_count), oldest_ms the oldest row (0: none); and the
	 * registrations of every group. */
	int has_sets;
	grp_counts_t *sets;
	size_t sets_n;
	int64_t set_regs;
	int set_why;	       /* a service store that could not judge them */
	cJSON *subs, *ingress; /* gathered as JSON, printed either way */
	cJSON *alarms;
	int64_t undelivered; /* tbx_undelivered lines */
	int64_t seq;
	int64_t ranges;		    /* of the sequence (schema 10); -1: none */
	int64_t edge, edge_refused; /* the ingress edge (schema 4) */
	int64_t idle_subs, alarm_cnt;
	/* --since: its time (-1: not given), the dead letters recorded at
	 * or after it */
	int64_t dl_since_ms, dl_new;
	/* Batch rows (outbox.layout = batch), per group. */
	insp_ob_sum_t ob;
} status_t;

static void counts_free(grp_counts_t *g, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(g[i].grp);
	free(g);
}

typedef struct gathered {
	grp_counts_t *g;
	size_t n;
	int oom;
} gathered_t;

/* Collects one grp_counts_t per summary of a store's listing. */
static int gather_one(void *opaque, const tbx__grp_sum_t *sum)
{
	gathered_t *out = opaque;
	grp_counts_t *grown = realloc(out->g, (out->n + 1) * sizeof(*grown));

	if (!grown)
		return out->oom = 1;
	out->g = grown;
	memset(&grown[out->n], 0, sizeof(grown[0]));
	for (int i = 0; i < 4; i++)
		grown[out->n].n[i] = sum->n[i];
	grown[out->n].oldest_ms = sum->ms;
	if (!(grown[out->n].grp = tbx__strdup(sum->grp)))
		return out->oom = 1;
	out->n++;
	return 0;
}

/* The end of a summary listing: @p err its result, reported through
 * @p fail.  @returns 0 or -1. */
static int gathered(insp_t *in, gathered_t *g, int err,
		    int (*fail)(insp_t *, int), grp_counts_t **out, size_t *cnt)
{
	*out = g->g;
	*cnt = g->n;
	if (err)
		return fail(in, err), -1;
	if (g->oom)
		return tbx_cli_usage(INSPECT_CMD, "out of memory"), -1;
	return 0;
}

static int count_verdict(void *opaque, const insp_reg_t *reg)
{
	grp_counts_t *g = opaque;

	if (reg->verdict >= 0 && reg->verdict < 5)
		g->v[reg->verdict]++;
	return 0;
}

typedef struct status_ctx {
	insp_t *in;
	status_t *st;
} status_ctx_t;

static int add_sub(void *opaque, const tbx__sub_t *sub)
{
	status_ctx_t *c = opaque;
	insp_t *in = c->in;
	int idle = in->now_ms - sub->used_ms >= in->o->idle_ms;

	insp_jobj(c->st->subs,
		  "used_ms:i unused_for_ms:i idle:b topic:s group:s "
		  "since_seq:i created_ms:i age_ms:i",
		  sub->used_ms, in->now_ms - sub->used_ms, idle, sub->topic,
		  sub->grp, sub->since_seq, sub->created_ms,
		  insp_age(in, sub->created_ms));
	c->st->idle_subs += idle;
	return 0;
}

static int add_alarm(void *opaque, const tbx__alarm_t *a)
{
	status_ctx_t *c = opaque;

	insp_jobj(c->st->alarms,
		  "group:s alarm:s count:i first_ms:i last_ms:i detail:s",
		  a->grp, a->name, a->count, a->first_ms, a->last_ms,
		  a->detail);
	c->st->alarm_cnt += a->count;
	return 0;
}

static int add_ingress(void *opaque, const tbx__ingress_t *g)
{
	status_ctx_t *c = opaque;

	insp_jobj(c->st->ingress, "group:s topic:s partition:i next_offset:i",
		  g->grp, g->topic, g->partition, g->next_offset);
	return 0;
}

static int by_grp(const void *a, const void *b)
{
	return strcmp(((const grp_counts_t *)a)->grp,
		      ((const grp_counts_t *)b)->grp);
}

/* The set registrations of @p grp into its entry of st->sets, added
 * (without rows) when it has some and no set rows. */
static int sets_regs_of(insp_t *in, status_t *st, const char *grp)
{
	grp_counts_t *g = NULL, *grown;
	int64_t regs = 0;
	int err;

	for (size_t i = 0; i < st->sets_n && !g; i++)
		if (strcmp(st->sets[i].grp, grp) == 0)
			g = &st->sets[i];
	if ((err = tbx_tokens_sets_count(in->tokens, grp, NULL, NULL, &regs)))
		return insp_t_fail(in, err), -1;
	if (g) {
		g->n[2] = regs;
		return 0;
	}
	if (!regs)
		return 0;
	if (!(grown = realloc(st->sets, (st->sets_n + 1) * sizeof(*grown))))
		return tbx_cli_usage(INSPECT_CMD, "out of memory"), -1;
	st->sets = grown;
	g = &grown[st->sets_n];
	memset(g, 0, sizeof(*g));
	if (!(g->grp = tbx__strdup(grp)))
		return tbx_cli_usage(INSPECT_CMD, "out of memory"), -1;
	g->n[2] = regs;
	st->sets_n++;
	return 0;
}

/*
 * Set registrations are per sending group, which sets_summary (per
 * receiving group) does not give: counted for every group with set rows,
 * with token registrations, or served by this store, and in all (the
 * header's number, which also holds senders none of those name).
 */
static int sets_regs(insp_t *in, status_t *st, char **served, size_t served_n)
{
	size_t rows_n = st->sets_n;
	int err;

	if ((err = tbx_tokens_sets_count(in->tokens, NULL, NULL, NULL,
					 &st->set_regs)))
		return insp_t_fail(in, err), -1;
	for (size_t i = 0; i < rows_n; i++)
		if (sets_regs_of(in, st, st->sets[i].grp))
			return -1;
	for (size_t i = 0; i < st->regs_n; i++)
		if (sets_regs_of(in, st, st->regs[i].grp))
			return -1;
	for (size_t i = 0; i < served_n; i++)
		if (sets_regs_of(in, st, served[i]))
			return -1;
	if (st->sets_n)
		qsort(st->sets, st->sets_n, sizeof(st->sets[0]), by_grp);
	return 0;
}

static int status_gather(insp_t *in, status_t *st, int64_t stuck_before)
{
	status_ctx_t ctx = {in, st};
	gathered_t g[5];
	char **served = NULL;
	size_t served_n = 0;
	int has_ranges = 0, err;

	memset(g, 0, sizeof(g));
	if ((err = tbx_outbox_undelivered_count(in->store, &st->undelivered)))
		return insp_s_fail(in, err), -1;
	err =
	    tbx_outbox_rows_summary(in->store, stuck_before, gather_one, &g[0]);
	if (gathered(in, &g[0], err, insp_s_fail, &st->outbox, &st->outbox_n))
		return -1;
	err = tbx_tokens_tokens_summary(in->tokens, gather_one, &g[1]);
	if (gathered(in, &g[1], err, insp_t_fail, &st->tokens, &st->tokens_n))
		return -1;
	err = tbx_tokens_registrations_summary(in->tokens, gather_one, &g[2]);
	if (gathered(in, &g[2], err, insp_t_fail, &st->regs, &st->regs_n))
		return -1;
	if ((err = insp_ob_summary(in, stuck_before, &st->ob)))
		return insp_s_fail(in, err), -1;
	err = tbx_outbox_dead_letters_summary(in->store, gather_one, &g[3]);
	if (gathered(in, &g[3], err, insp_s_fail, &st->dls, &st->dls_n))
		return -1;
	if ((err = insp_has_sets(in, &st->has_sets)))
		return insp_t_fail(in, err), -1;
	if (st->has_sets) {
		err = tbx_tokens_sets_summary(in->tokens, gather_one, &g[4]);
		if (gathered(in, &g[4], err, insp_t_fail, &st->sets,
			     &st->sets_n))
			return -1;
	}
	if ((err = tbx_tokens_seq_current(in->tokens, &st->seq)))
		return insp_t_fail(in, err), -1;
	st->ranges = -1;
	if ((err = tbx_tokens_has(in->tokens, TBX_TOKENS_HAS_SEQ_RANGES,
				  &has_ranges)) ||
	    (has_ranges &&
	     (err = tbx_tokens_seq_ranges(in->tokens, &st->ranges))))
		return insp_t_fail(in, err), -1;
	if (insp_served_groups(in, &served, &served_n))
		return -1;
	if (st->has_sets && sets_regs(in, st, served, served_n)) {
		insp_free_list(served, served_n);
		return -1;
	}
	/* The set registrations of the groups this store serves, judged as
	 * the sweeper judges them. */
	for (size_t i = 0; i < st->sets_n; i++) {
		grp_counts_t *c = &st->sets[i];
		int why = TBX_OK;

		if (!c->n[2] || !insp_has(served, served_n, c->grp))
			continue;
		c->checked = 1;
		if (insp_set_regs_each(in, c->grp, count_verdict, c, &why)) {
			insp_free_list(served, served_n);
			return -1;
		}
		if (why)
			st->set_why = why;
	}
	for (size_t i = 0; i < st->regs_n; i++) {
		grp_counts_t *r = &st->regs[i];
		if (!insp_has(served, served_n, r->grp))
			continue;
		r->checked = 1;
		if (insp_regs_each(in, r->grp, count_verdict, r)) {
			insp_free_list(served, served_n);
			return -1;
		}
	}
	insp_free_list(served, served_n);

	st->subs = cJSON_CreateArray();
	st->ingress = cJSON_CreateArray();
	st->alarms = cJSON_CreateArray();
	if (!st->subs || !st->ingress || !st->alarms)
		return tbx_cli_usage(INSPECT_CMD, "out of memory"), -1;
	if ((err = tbx_tokens_subscriptions_list(in->tokens, add_sub, &ctx)))
		return insp_t_fail(in, err), -1;
	/* Alarms the workers of this service store raised. */
	if ((err = tbx_outbox_alarms(in->store, add_alarm, &ctx)))
		return insp_s_fail(in, err), -1;
	if ((err = tbx_outbox_ingress_list(in->store, add_ingress, &ctx)))
		return insp_s_fail(in, err), -1;
	return 0;
}

static void status_free(status_t *st)
{
	counts_free(st->outbox, st->outbox_n);
	counts_free(st->tokens, st->tokens_n);
	counts_free(st->regs, st->regs_n);
	counts_free(st->dls, st->dls_n);
	counts_free(st->sets, st->sets_n);
	cJSON_Delete(st->subs);
	cJSON_Delete(st->ingress);
	cJSON_Delete(st->alarms);
	insp_ob_summary_free(&st->ob);
}

/* Adds "<prefix>created_ms" and "<prefix>age_ms" (null when none). */
static void add_time(insp_t *in, cJSON *o, const char *created_key,
		     const char *age_key, int64_t ms, int have)
{
	if (!have) {
		cJSON_AddNullToObject(o, created_key);
		cJSON_AddNullToObject(o, age_key);
		return;
	}
	insp_json_add_int(o, created_key, ms);
	insp_json_add_int(o, age_key, insp_age(in, ms));
}

/* One group's object in @p arr: its name, its first counts under
 * @p names (NULL-terminated), and the time of @p c under @p created and
 * @p age.  @returns the object, for the caller's further keys. */
static cJSON *add_group(insp_t *in, cJSON *arr, const grp_counts_t *c,
			const char *const *names, const char *created,
			const char *age)
{
	cJSON *g = cJSON_CreateObject();

	cJSON_AddItemToArray(arr, g);
	insp_json_add_str(g, "group", c->grp);
	for (int k = 0; names[k]; k++)
		insp_json_add_int(g, names[k], c->n[k]);
	add_time(in, g, created, age, c->oldest_ms, 1);
	return g;
}

typedef struct totals {
	int64_t processed, tokened, stuck, below, oldest;
	int64_t tokens, tokens_oldest;
	int64_t attempts, reg_tokens, orphans, unchecked;
	int64_t dl, dl_pending, dl_replayed;
	int64_t set_rows, set_pending, set_regs, sets_oldest;
	int64_t set_orphans, set_unchecked, set_unjudged;
	int64_t ob_rows, ob_tokened, ob_older, ob_marked, ob_corrupt, ob_oldest;
} totals_t;

static void status_totals(const status_t *st, totals_t *t)
{
	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < st->outbox_n; i++) {
		const grp_counts_t *g = &st->outbox[i];
		t->processed += g->n[0];
		t->tokened += g->n[1];
		t->stuck += g->n[2];
		t->below += g->n[3];
		if (!t->oldest || g->oldest_ms < t->oldest)
			t->oldest = g->oldest_ms;
	}
	for (size_t i = 0; i < st->tokens_n; i++) {
		t->tokens += st->tokens[i].n[0];
		if (!t->tokens_oldest ||
		    st->tokens[i].oldest_ms < t->tokens_oldest)
			t->tokens_oldest = st->tokens[i].oldest_ms;
	}
	for (size_t i = 0; i < st->regs_n; i++) {
		const grp_counts_t *g = &st->regs[i];
		t->attempts += g->n[0];
		t->reg_tokens += g->n[1];
		if (g->checked)
			t->orphans += g->v[TBX_SWEEP_ORPHAN_OTHER_ATTEMPT] +
				      g->v[TBX_SWEEP_ORPHAN_NO_ROW];
		else
			t->unchecked += g->n[0];
	}
	for (size_t i = 0; i < st->dls_n; i++) {
		t->dl += st->dls[i].n[0];
		t->dl_pending += st->dls[i].n[1];
		t->dl_replayed += st->dls[i].n[2];
	}
	for (size_t i = 0; i < st->ob.n; i++) {
		const insp_ob_grp_t *g = &st->ob.g[i];
		t->ob_rows += g->rows;
		t->ob_tokened += g->tokened;
		t->ob_older += g->older;
		t->ob_marked += g->marked;
		t->ob_corrupt += g->corrupt;
		if (!t->ob_oldest || g->oldest_ms < t->ob_oldest)
			t->ob_oldest = g->oldest_ms;
	}
	t->set_regs = st->set_regs;
	for (size_t i = 0; i < st->sets_n; i++) {
		const grp_counts_t *g = &st->sets[i];
		t->set_rows += g->n[0];
		t->set_pending += g->n[1];
		if (g->checked) {
			t->set_orphans += g->v[TBX_SWEEP_ORPHAN_OTHER_ATTEMPT] +
					  g->v[TBX_SWEEP_ORPHAN_NO_ROW];
			t->set_unjudged += g->v[TBX_SWEEP_UNCHECKED];
		} else {
			t->set_unchecked += g->n[2];
		}
		if (g->n[0] &&
		    (!t->sets_oldest || g->oldest_ms < t->sets_oldest))
			t->sets_oldest = g->oldest_ms;
	}
}

static cJSON *status_json(insp_t *in, const status_t *st, const totals_t *t,
			  int64_t stuck_ms)
{
	cJSON *doc = cJSON_CreateObject(), *o, *arr, *g;

	if (!doc)
		return NULL;
	/* A URL is shown redacted, with its schema (a file has none). */
	o = cJSON_AddObjectToObject(doc, "store");
	insp_json_add_str(o, "path", in->s.pg ? in->s.url : in->s.where);
	if (in->s.pg)
		insp_json_add_str(o, "schema", in->s.schema);
	insp_json_add_int(o, "schema_version", in->schema[0]);
	o = cJSON_AddObjectToObject(doc, "token_store");
	insp_json_add_str(o, "path", in->t.pg ? in->t.url : in->t.where);
	if (in->t.pg)
		insp_json_add_str(o, "schema", in->t.schema);
	insp_json_add_int(o, "schema_version", in->schema[1]);
	cJSON_AddBoolToObject(o, "same_file", in->single);
	o = cJSON_AddObjectToObject(doc, "store_pair");
	cJSON_AddBoolToObject(o, "ok", in->pair_cnt == 0);
	arr = cJSON_AddArrayToObject(o, "problems");
	for (size_t i = 0; i < in->pair_cnt; i++)
		insp_jobj(arr, "problem:s group:s detail:s", in->pair[i].key,
			  in->pair[i].grp, in->pair[i].text);
	insp_json_add_int(doc, "now_ms", in->now_ms);

	o = cJSON_AddObjectToObject(doc, "outbox");
	insp_json_add_int(o, "pending", t->processed + t->tokened);
	insp_json_add_int(o, "processed", t->processed);
	insp_json_add_int(o, "tokened", t->tokened);
	insp_json_add_int(o, "stuck_after_ms", stuck_ms);
	insp_json_add_int(o, "stuck", t->stuck);
	insp_json_add_int(o, "below_committed", t->below);
	add_time(in, o, "oldest_created_ms", "oldest_age_ms", t->oldest,
		 st->outbox_n > 0);
	arr = cJSON_AddArrayToObject(o, "groups");
	for (size_t i = 0; i < st->outbox_n; i++)
		add_group(in, arr, &st->outbox[i],
			  (const char *const[]){"processed", "tokened", "stuck",
						"below_committed", NULL},
			  "oldest_created_ms", "oldest_age_ms");

	/* Batch rows (outbox.layout = batch); null for a store without. */
	if (st->ob.none) {
		cJSON_AddNullToObject(doc, "batch_rows");
	} else {
		o = cJSON_AddObjectToObject(doc, "batch_rows");
		insp_jadd(o,
			  "rows:i tokened:i stuck:i marked_stuck:i corrupt:i",
			  t->ob_rows, t->ob_tokened, t->ob_older, t->ob_marked,
			  t->ob_corrupt);
		add_time(in, o, "oldest_created_ms", "oldest_age_ms",
			 t->ob_oldest, st->ob.n > 0);
		arr = cJSON_AddArrayToObject(o, "groups");
		for (size_t i = 0; i < st->ob.n; i++) {
			const insp_ob_grp_t *b = &st->ob.g[i];
			g = insp_jobj(arr,
				      "group:s rows:i tokened:i stuck:i "
				      "marked_stuck:i corrupt:i",
				      b->grp, b->rows, b->tokened, b->older,
				      b->marked, b->corrupt);
			add_time(in, g, "oldest_created_ms", "oldest_age_ms",
				 b->oldest_ms, 1);
		}
		cJSON_AddItemToObject(o, "corrupt_rows",
				      cJSON_Duplicate(st->ob.corrupt_json, 1));
	}

	o = cJSON_AddObjectToObject(doc, "tokens");
	insp_json_add_int(o, "rows", t->tokens);
	add_time(in, o, "oldest_created_ms", "oldest_age_ms", t->tokens_oldest,
		 st->tokens_n > 0);
	arr = cJSON_AddArrayToObject(o, "groups");
	for (size_t i = 0; i < st->tokens_n; i++)
		add_group(in, arr, &st->tokens[i],
			  (const char *const[]){"rows", NULL},
			  "oldest_created_ms", "oldest_age_ms");

	o = cJSON_AddObjectToObject(doc, "registrations");
	insp_json_add_int(o, "attempts", t->attempts);
	insp_json_add_int(o, "tokens", t->reg_tokens);
	insp_json_add_int(o, "orphans", t->orphans);
	insp_json_add_int(o, "unchecked_attempts", t->unchecked);
	arr = cJSON_AddArrayToObject(o, "groups");
	for (size_t i = 0; i < st->regs_n; i++) {
		const grp_counts_t *c = &st->regs[i];
		static const char *const keys[4] = {
		    "winners", "orphans_other_attempt", "orphans_no_row",
		    "in_flight"};
		g = add_group(in, arr, c,
			      (const char *const[]){"attempts", "tokens", NULL},
			      "oldest_created_ms", "oldest_age_ms");
		cJSON_AddBoolToObject(g, "checked", c->checked);
		for (int v = 0; v < 4; v++) {
			if (c->checked)
				insp_json_add_int(g, keys[v], c->v[v]);
			else
				cJSON_AddNullToObject(g, keys[v]);
		}
	}

	/* null: a store whose schema has no token sets. */
	if (!st->has_sets) {
		cJSON_AddNullToObject(doc, "token_sets");
	} else {
		o = cJSON_AddObjectToObject(doc, "token_sets");
		insp_json_add_int(o, "rows", t->set_rows);
		insp_json_add_int(o, "pending", t->set_pending);
		insp_json_add_int(o, "registrations", t->set_regs);
		insp_json_add_int(o, "orphans", t->set_orphans);
		insp_json_add_int(o, "unchecked_attempts", t->set_unchecked);
		insp_json_add_int(o, "unchecked", t->set_unjudged);
		add_time(in, o, "oldest_created_ms", "oldest_age_ms",
			 t->sets_oldest, t->set_rows > 0);
		arr = cJSON_AddArrayToObject(o, "groups");
		for (size_t i = 0; i < st->sets_n; i++) {
			const grp_counts_t *c = &st->sets[i];

			g = cJSON_CreateObject();
			cJSON_AddItemToArray(arr, g);
			insp_json_add_str(g, "group", c->grp);
			insp_json_add_int(g, "rows", c->n[0]);
			insp_json_add_int(g, "pending", c->n[1]);
			insp_json_add_int(g, "registrations", c->n[2]);
			cJSON_AddBoolToObject(g, "checked", c->checked);
			for (int v = 0; v < 5; v++) {
				static const char *const keys[5] = {
				    "winners", "orphans_other_attempt",
				    "orphans_no_row", "in_flight", "unchecked"};
				if (c->checked)
					insp_json_add_int(g, keys[v], c->v[v]);
				else
					cJSON_AddNullToObject(g, keys[v]);
			}
			add_time(in, g, "oldest_created_ms", "oldest_age_ms",
				 c->oldest_ms, c->n[0] > 0);
		}
	}

	o = cJSON_AddObjectToObject(doc, "subscriptions");
	insp_json_add_int(o, "sequence", st->seq);
	if (st->ranges >= 0)
		insp_json_add_int(o, "sequence_ranges", st->ranges);
	else
		cJSON_AddNullToObject(o, "sequence_ranges");
	insp_json_add_int(o, "idle_after_ms", in->o->idle_ms);
	insp_json_add_int(o, "idle", st->idle_subs);
	cJSON_AddItemToObject(o, "list", cJSON_Duplicate(st->subs, 1));
	cJSON_AddItemToObject(doc, "ingress", cJSON_Duplicate(st->ingress, 1));
	cJSON_AddItemToObject(doc, "alarms", cJSON_Duplicate(st->alarms, 1));

	o = cJSON_AddObjectToObject(doc, "undelivered");
	insp_json_add_int(o, "messages", st->undelivered);
	o = cJSON_AddObjectToObject(doc, "dead_letters");
	insp_json_add_int(o, "recorded", t->dl);
	insp_json_add_int(o, "pending", t->dl_pending);
	insp_json_add_int(o, "replayed", t->dl_replayed);
	if (st->dl_since_ms >= 0) {
		char when[40];

		insp_fmt_time(st->dl_since_ms, when, sizeof(when));
		cJSON_AddStringToObject(o, "since", when);
		insp_json_add_int(o, "since_ms", st->dl_since_ms);
		insp_json_add_int(o, "recorded_since", st->dl_new);
	}
	arr = cJSON_AddArrayToObject(o, "groups");
	for (size_t i = 0; i < st->dls_n; i++)
		add_group(in, arr, &st->dls[i],
			  (const char *const[]){"recorded", "pending",
						"replayed", NULL},
			  "latest_created_ms", "latest_age_ms");
	return doc;
}

static void status_print(insp_t *in, const status_t *st, const totals_t *t,
			 int64_t stuck_ms)
{
	char age[32], dur[32], head[48], note[512], n1[48], n2[48];
	insp_tbl_t *tbl;

	insp_fmt_duration(stuck_ms, dur, sizeof(dur));
	if (in->s.pg)
		printf("store   %s, schema %s (version %d)\n", in->s.url,
		       in->s.schema, in->schema[0]);
	else
		printf("store   %s (schema %d)\n", in->s.where, in->schema[0]);
	if (in->single && in->t.pg)
		printf("tokens  the same database, schema %s (version %d)\n",
		       in->t.schema, in->schema[1]);
	else if (in->single)
		printf("tokens  the same file\n");
	else if (in->t.pg)
		printf("tokens  %s, schema %s (version %d)\n", in->t.url,
		       in->t.schema, in->schema[1]);
	else
		printf("tokens  %s (schema %d)\n", in->t.where, in->schema[1]);
	if (in->pair_cnt) {
		printf("\nWrong pair of stores (store_pair): %zu problem%s; "
		       "what follows is not the pipeline's state\n",
		       in->pair_cnt, in->pair_cnt == 1 ? "" : "s");
		for (size_t i = 0; i < in->pair_cnt; i++) {
			char text[sizeof(in->pair[i].text) + 64];

			snprintf(text, sizeof(text), "%s (%s)",
				 in->pair[i].text, in->pair[i].key);
			insp_wrap("  - ", text);
		}
	}

	insp_fmt_age(insp_age(in, t->oldest), age, sizeof(age));
	printf("\nOutbox: %s pending (%" PRId64 " processed, %" PRId64
	       " tokened)",
	       insp_count_of(n1, sizeof(n1), t->processed + t->tokened, "row",
			     "rows"),
	       t->processed, t->tokened);
	if (st->outbox_n)
		printf(", oldest %s, %" PRId64 " older than %s", age, t->stuck,
		       dur);
	if (t->below)
		printf(", %" PRId64 " below the committed offset", t->below);
	printf("\n");
	if (st->outbox_n) {
		snprintf(head, sizeof(head), "OLDER THAN %s", dur);
		tbl = insp_tbl_new(
		    "Lrrrr", (const char *const[]){"GROUP", "PROCESSED",
						   "TOKENED", "OLDEST", head});
		for (size_t i = 0; i < st->outbox_n; i++) {
			const grp_counts_t *g = &st->outbox[i];
			insp_fmt_age(insp_age(in, g->oldest_ms), age,
				     sizeof(age));
			insp_tbl_cell(tbl, g->grp);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[0]);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[1]);
			insp_tbl_cell(tbl, age);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[2]);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	if (t->ob_rows) {
		const cJSON *c;

		insp_fmt_age(insp_age(in, t->ob_oldest), age, sizeof(age));
		printf("\nBatch rows (outbox.layout = batch): %s pending "
		       "(%" PRId64 " tokened), oldest %s, %" PRId64
		       " older than %s",
		       insp_count_of(n1, sizeof(n1), t->ob_rows, "row", "rows"),
		       t->ob_tokened, age, t->ob_older, dur);
		if (t->ob_marked)
			printf(", %" PRId64 " marked stuck", t->ob_marked);
		if (t->ob_corrupt)
			printf(", %" PRId64 " corrupt", t->ob_corrupt);
		printf("\n");
		snprintf(head, sizeof(head), "OLDER THAN %s", dur);
		tbl = insp_tbl_new(
		    "Lrrrrrr",
		    (const char *const[]){"GROUP", "ROWS", "TOKENED", "OLDEST",
					  head, "STUCK", "CORRUPT"});
		for (size_t i = 0; i < st->ob.n; i++) {
			const insp_ob_grp_t *b = &st->ob.g[i];
			insp_fmt_age(insp_age(in, b->oldest_ms), age,
				     sizeof(age));
			insp_tbl_cell(tbl, b->grp);
			insp_tbl_cellf(tbl, "%" PRId64, b->rows);
			insp_tbl_cellf(tbl, "%" PRId64, b->tokened);
			insp_tbl_cell(tbl, age);
			insp_tbl_cellf(tbl, "%" PRId64, b->older);
			insp_tbl_cellf(tbl, "%" PRId64, b->marked);
			insp_tbl_cellf(tbl, "%" PRId64, b->corrupt);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
		cJSON_ArrayForEach(c, st->ob.corrupt_json)
		{
			snprintf(note, sizeof(note),
				 "batch row %s of %s does not decode: %s; no "
				 "worker can finish it",
				 cJSON_GetObjectItem(c, "row_id")->valuestring,
				 cJSON_GetObjectItem(c, "group")->valuestring,
				 cJSON_GetObjectItem(c, "reason")->valuestring);
			insp_wrap("  corrupt: ", note);
		}
	}

	insp_fmt_age(insp_age(in, t->tokens_oldest), age, sizeof(age));
	printf("\nTokens: %s",
	       insp_count_of(n1, sizeof(n1), t->tokens, "row", "rows"));
	if (st->tokens_n)
		printf(", oldest %s", age);
	printf("\n");
	if (st->tokens_n) {
		tbl = insp_tbl_new(
		    "Lrr", (const char *const[]){"GROUP", "TOKENS", "OLDEST"});
		for (size_t i = 0; i < st->tokens_n; i++) {
			const grp_counts_t *g = &st->tokens[i];
			insp_fmt_age(insp_age(in, g->oldest_ms), age,
				     sizeof(age));
			insp_tbl_cell(tbl, g->grp);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[0]);
			insp_tbl_cell(tbl, age);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	printf(
	    "\nRegistrations: %s (%s), %" PRId64 " orphaned now",
	    insp_count_of(n1, sizeof(n1), t->attempts, "attempt", "attempts"),
	    insp_count_of(n2, sizeof(n2), t->reg_tokens, "token", "tokens"),
	    t->orphans);
	if (t->unchecked)
		printf(", %" PRId64 " not checked", t->unchecked);
	printf("\n");
	if (st->regs_n) {
		tbl = insp_tbl_new(
		    "Lrrrrrr", (const char *const[]){
				   "SENDER", "ATTEMPTS", "ORPHANS", "IN FLIGHT",
				   "WINNERS", "TOKENS", "OLDEST"});
		for (size_t i = 0; i < st->regs_n; i++) {
			const grp_counts_t *g = &st->regs[i];
			insp_fmt_age(insp_age(in, g->oldest_ms), age,
				     sizeof(age));
			insp_tbl_cell(tbl, g->grp);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[0]);
			if (g->checked) {
				insp_tbl_cellf(
				    tbl, "%" PRId64,
				    g->v[TBX_SWEEP_ORPHAN_OTHER_ATTEMPT] +
					g->v[TBX_SWEEP_ORPHAN_NO_ROW]);
				insp_tbl_cellf(tbl, "%" PRId64,
					       g->v[TBX_SWEEP_IN_FLIGHT]);
				insp_tbl_cellf(tbl, "%" PRId64,
					       g->v[TBX_SWEEP_WINNER]);
			} else {
				insp_tbl_cell(tbl, "?");
				insp_tbl_cell(tbl, "?");
				insp_tbl_cell(tbl, "?");
			}
			insp_tbl_cellf(tbl, "%" PRId64, g->n[1]);
			insp_tbl_cell(tbl, age);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	/* Token sets: shown when there are any. */
	if (t->set_rows || t->set_regs) {
		insp_fmt_age(insp_age(in, t->sets_oldest), age, sizeof(age));
		printf(
		    "\nToken sets: %s (%" PRId64 " pending), %s",
		    insp_count_of(n1, sizeof(n1), t->set_rows, "row", "rows"),
		    t->set_pending,
		    insp_count_of(n2, sizeof(n2), t->set_regs, "registration",
				  "registrations"));
		if (t->set_rows)
			printf(", oldest %s", age);
		if (t->set_regs)
			printf(", %" PRId64 " orphaned now", t->set_orphans);
		if (t->set_unchecked)
			printf(", %" PRId64 " not checked", t->set_unchecked);
		printf("\n");
		tbl = insp_tbl_new(
		    "Lrrrr", (const char *const[]){"GROUP", "ROWS", "PENDING",
						   "REGISTRATIONS", "OLDEST"});
		for (size_t i = 0; i < st->sets_n; i++) {
			const grp_counts_t *g = &st->sets[i];
			if (g->n[0])
				insp_fmt_age(insp_age(in, g->oldest_ms), age,
					     sizeof(age));
			insp_tbl_cell(tbl, g->grp);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[0]);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[1]);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[2]);
			insp_tbl_cell(tbl, g->n[0] ? age : "-");
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
		if (t->set_unjudged) {
			snprintf(note, sizeof(note),
				 "%" PRId64 " registration(s) of token sets "
				 "could not be judged: the service store %s; "
				 "register-cleanup leaves them.",
				 t->set_unjudged,
				 tbx__sweep_unchecked_text(st->set_why));
			insp_wrap("  warning: ", note);
		}
	}

	insp_fmt_duration(in->o->idle_ms, dur, sizeof(dur));
	printf("\nSubscriptions: %d (sequence at %" PRId64,
	       cJSON_GetArraySize(st->subs), st->seq);
	if (st->ranges >= 0)
		printf(", %" PRId64 " range%s", st->ranges,
		       st->ranges == 1 ? "" : "s");
	printf("), %" PRId64 " unused for %s or more\n", st->idle_subs, dur);
	if (cJSON_GetArraySize(st->subs)) {
		const cJSON *s;
		tbl = insp_tbl_new(
		    "LLrrr", (const char *const[]){"TOPIC", "GROUP", "SINCE",
						   "AGE", "UNUSED FOR"});
		cJSON_ArrayForEach(s, st->subs)
		{
			insp_fmt_age((int64_t)cJSON_GetObjectItem(s, "age_ms")
					 ->valuedouble,
				     age, sizeof(age));
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "topic")->valuestring);
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "group")->valuestring);
			insp_tbl_cellf(
			    tbl, "%" PRId64,
			    (int64_t)cJSON_GetObjectItem(s, "since_seq")
				->valuedouble);
			insp_tbl_cell(tbl, age);
			insp_fmt_age(
			    (int64_t)cJSON_GetObjectItem(s, "unused_for_ms")
				->valuedouble,
			    age, sizeof(age));
			insp_tbl_cellf(
			    tbl, "%s%s", age,
			    cJSON_IsTrue(cJSON_GetObjectItem(s, "idle"))
				? " (idle)"
				: "");
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	printf("\nIngress offsets: %s\n",
	       insp_count_of(n1, sizeof(n1), cJSON_GetArraySize(st->ingress),
			     "partition", "partitions"));
	if (cJSON_GetArraySize(st->ingress)) {
		const cJSON *s;
		tbl = insp_tbl_new(
		    "LLrr", (const char *const[]){"GROUP", "TOPIC", "PARTITION",
						  "NEXT OFFSET"});
		cJSON_ArrayForEach(s, st->ingress)
		{
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "group")->valuestring);
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "topic")->valuestring);
			insp_tbl_cellf(
			    tbl, "%" PRId64,
			    (int64_t)cJSON_GetObjectItem(s, "partition")
				->valuedouble);
			insp_tbl_cellf(
			    tbl, "%" PRId64,
			    (int64_t)cJSON_GetObjectItem(s, "next_offset")
				->valuedouble);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}

	printf("\nDead letters: %" PRId64 " recorded (%" PRId64
	       " not yet dispatched, %" PRId64 " replayed)\n",
	       t->dl, t->dl_pending, t->dl_replayed);
	if (st->dls_n) {
		tbl = insp_tbl_new("Lrrrr", (const char *const[]){
						"GROUP", "RECORDED", "PENDING",
						"REPLAYED", "LATEST"});
		for (size_t i = 0; i < st->dls_n; i++) {
			const grp_counts_t *g = &st->dls[i];
			insp_fmt_age(insp_age(in, g->oldest_ms), age,
				     sizeof(age));
			insp_tbl_cell(tbl, g->grp);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[0]);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[1]);
			insp_tbl_cellf(tbl, "%" PRId64, g->n[2]);
			insp_tbl_cell(tbl, age);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
	}
	if (st->dl_since_ms >= 0) {
		char when[40];

		insp_fmt_time(st->dl_since_ms, when, sizeof(when));
		snprintf(note, sizeof(note), "%" PRId64 " recorded since %s%s",
			 st->dl_new, when,
			 st->dl_new ? ": see 'tokenbox inspect dead-letters "
				      "list'."
				    : ".");
		insp_wrap(st->dl_new ? "  NEW: " : "  ", note);
	}

	if (st->edge) {
		printf("\nIngress edge: %" PRId64 " caller ids within "
		       "ingress.dedup.window.ms, %" PRId64
		       " synthetic duplicates refused\n",
		       st->edge, st->edge_refused);
	}

	printf("\nAlarms: %d\n", cJSON_GetArraySize(st->alarms));
	if (cJSON_GetArraySize(st->alarms)) {
		const cJSON *s;
		tbl = insp_tbl_new(
		    "LLrr",
		    (const char *const[]){"GROUP", "ALARM", "COUNT", "LAST"});
		cJSON_ArrayForEach(s, st->alarms)
		{
			insp_fmt_age(in->now_ms - (int64_t)cJSON_GetObjectItem(
						      s, "last_ms")
						      ->valuedouble,
				     age, sizeof(age));
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "group")->valuestring);
			insp_tbl_cell(
			    tbl, cJSON_GetObjectItem(s, "alarm")->valuestring);
			insp_tbl_cellf(tbl, "%" PRId64,
				       (int64_t)cJSON_GetObjectItem(s, "count")
					   ->valuedouble);
			insp_tbl_cell(tbl, age);
		}
		insp_tbl_print(tbl, 2);
		insp_tbl_free(tbl);
		cJSON_ArrayForEach(s, st->alarms)
		{
			const cJSON *d = cJSON_GetObjectItem(s, "detail");
			if (!cJSON_IsString(d))
				continue;
			snprintf(note, sizeof(note), "%s %s: %s",
				 cJSON_GetObjectItem(s, "group")->valuestring,
				 cJSON_GetObjectItem(s, "alarm")->valuestring,
				 d->valuestring);
			insp_wrap("  last: ", note);
		}
	}

	if (st->undelivered) {
		char line[200];
		snprintf(line, sizeof(line),
			 "%" PRId64 " outgoing message(s) given up after "
			 "permanent delivery failures; see 'tokenbox inspect "
			 "undelivered list'.",
			 st->undelivered);
		printf("\n");
		insp_wrap("Undelivered: ", line);
	}
	if (t->tokened) {
		printf("\n");
		insp_wrap("note: ",
			  "a tokened row awaits dispatch, or was "
			  "dispatched and awaits its token consume and "
			  "delete (D, E); the stores do not tell which.");
	}
	if (t->below) {
		printf("\n");
		insp_wrap("note: ",
			  "a worker's recovery pass found rows below their "
			  "partition's committed offset (their records will "
			  "not be delivered again: retention, an offset "
			  "reset) and could not finish them yet; its log "
			  "says why.  `redispatch` finishes them too.");
	}
	for (size_t i = 0; i < st->regs_n; i++) {
		if (st->regs[i].checked)
			continue;
		snprintf(note, sizeof(note),
			 "registrations of %s were not checked: this store "
			 "has no rows of that group (name it with --group "
			 "if this is its store).",
			 st->regs[i].grp);
		printf("\n");
		insp_wrap("note: ", note);
	}
}

static int count_none(void *opaque, const tbx__dl_rec_t *d)
{
	(void)opaque;
	(void)d;
	return 0;
}

/* --since: the dead letters recorded at or after its time, @p recorded
 * less those recorded before it (one snapshot). */
static int dead_letters_since(insp_t *in, status_t *st, int64_t recorded)
{
	const insp_opts_t *o = in->o;
	int64_t before = 0;
	int err;

	st->dl_since_ms = o->since_ms >= 0	 ? o->since_ms
			  : o->since_ago_ms >= 0 ? in->now_ms - o->since_ago_ms
						 : -1;
	if (st->dl_since_ms < 0)
		return 0;
	tbx__filter_t f = {NULL, 0, st->dl_since_ms - 1, 1};
	if (st->dl_since_ms > 0 &&
	    (err = tbx_outbox_dead_letters_list(in->store, &f, &before,
						count_none, NULL)))
		return insp_s_fail(in, err);
	st->dl_new = recorded - before;
	return 0;
}

int insp_status(insp_t *in)
{
	int64_t stuck_ms =
	    in->o->older_ms >= 0 ? in->o->older_ms : INSPECT_DEFAULT_STUCK_MS;
	status_t st;
	totals_t t;
	int rc, edge;

	memset(&st, 0, sizeof(st));
	if (status_gather(in, &st, in->now_ms - stuck_ms)) {
		status_free(&st);
		return INSPECT_EXIT_ERROR;
	}
	/* Shown only when in use: the edge is a publisher's table. */
	if ((rc = tbx_tokens_has(in->tokens, TBX_TOKENS_HAS_EDGE, &edge)) ||
	    (edge && (rc = tbx_tokens_edge_count(in->tokens, &st.edge,
						 &st.edge_refused)))) {
		status_free(&st);
		return insp_t_fail(in, rc);
	}
	status_totals(&st, &t);
	if ((rc = dead_letters_since(in, &st, t.dl))) {
		status_free(&st);
		return rc;
	}
	rc = in->o->check &&
		     (t.orphans > 0 || t.set_orphans > 0 ||
		      t.set_unjudged > 0 || t.stuck > 0 || t.below > 0 ||
		      t.ob_older > 0 || t.ob_marked > 0 || t.ob_corrupt > 0 ||
		      st.alarm_cnt > 0 || st.idle_subs > 0 || st.undelivered ||
		      st.dl_new > 0 || in->pair_cnt > 0)
		 ? INSPECT_EXIT_FINDING
		 : INSPECT_EXIT_OK;
	if (in->o->json)
		rc = insp_json_print(status_json(in, &st, &t, stuck_ms), rc);
	else
		status_print(in, &st, &t, stuck_ms);
	status_free(&st);
	return rc;
}
