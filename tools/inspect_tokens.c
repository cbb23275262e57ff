/*
 * `tokenbox inspect tokens list|show`, `orphans`, `cleanup` and
 * `redispatch` (tools/inspect.h).
 *
 * Which registrations are orphans is decided by the sweeper's own rule
 * (tbx__sweep_classify), and `cleanup` runs the sweeper itself
 * (tbx__tokens_sweep_ex): its conditional drop in the token store is what
 * makes removing tokens safe while workers run, and nothing here second-
 * guesses it.  `redispatch` runs the protocol's phases B–E through
 * consumer/recover.h: the stores and a producer, no worker.  Everything
 * is read through the stores' interfaces.
 *
 * A registration is judged against the service store only when that store
 * is its sending group's: a group with rows there (outbox, batch rows,
 * ingress offsets, dead letters), or one named with --group.  Against another
 * group's store every registration would look like "no row", and a drop
 * would take the tokens of attempts still in flight.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "base/str.h"
#include "consumer/conf.h"
#include "consumer/recover.h"
#include "tools/cli.h"
#include "tools/inspect.h"

/*
 * tokens list
 */

typedef struct token_listing {
	insp_t *in;
	insp_tbl_t *tbl;
	cJSON *arr;
	int64_t shown;
} token_listing_t;

static int token_row(void *opaque, const tbx__token_rec_t *t)
{
	token_listing_t *l = opaque;
	char age[32];

	l->shown++;
	if (l->arr) {
		insp_jobj(l->arr,
			  "token:s group:s mint_seq:i created_ms:i age_ms:i",
			  t->token, t->grp, t->mint_seq, t->created_ms,
			  insp_age(l->in, t->created_ms));
		return 0;
	}
	insp_fmt_age(insp_age(l->in, t->created_ms), age, sizeof(age));
	insp_tbl_cell(l->tbl, age);
	insp_tbl_cell(l->tbl, t->token);
	insp_tbl_cell(l->tbl, t->grp);
	insp_tbl_cellf(l->tbl, "%lld", (long long)t->mint_seq);
	return 0;
}

/* The indexes of the bits set, as a JSON array. */
static cJSON *bits_json(const tbx__set_rec_t *r)
{
	cJSON *arr = cJSON_CreateArray();

	for (uint32_t i = 0; arr && r->bits && i < r->nbits; i++)
		if ((r->bits[i / 8] >> (i % 8)) & 1u)
			cJSON_AddItemToArray(arr, cJSON_CreateNumber(i));
	return arr;
}

static int set_row(void *opaque, const tbx__set_rec_t *r)
{
	token_listing_t *l = opaque;
	char age[32];

	l->shown++;
	if (l->arr) {
		insp_jobj(l->arr,
			  "set_id:s group:s topic:s partition:i nbits:i "
			  "pending:i bits:j mint_seq:i created_ms:i age_ms:i",
			  r->set_id, r->grp, r->topic, (int64_t)r->part,
			  (int64_t)r->nbits, (int64_t)r->pending, bits_json(r),
			  r->mint_seq, r->created_ms,
			  insp_age(l->in, r->created_ms));
		return 0;
	}
	insp_fmt_age(insp_age(l->in, r->created_ms), age, sizeof(age));
	insp_tbl_cell(l->tbl, age);
	insp_tbl_cell(l->tbl, r->set_id);
	insp_tbl_cell(l->tbl, r->grp);
	insp_tbl_cell(l->tbl, r->topic);
	insp_tbl_cellf(l->tbl, "%d", (int)r->part);
	insp_tbl_cellf(l->tbl, "%u", (unsigned)r->nbits);
	insp_tbl_cellf(l->tbl, "%u", (unsigned)r->pending);
	return 0;
}

/* The token sets the filter takes (a store of schema 11 or token
 * version 3): into @p doc's "sets", or a table into *tbl. */
static int sets_list(insp_t *in, const tbx__filter_t *f, cJSON *doc,
		     token_listing_t *l, int64_t *total)
{
	int has = 0, err;

	*total = 0;
	if ((err = insp_has_sets(in, &has)))
		return err;
	if (!has)
		return TBX_OK;
	if (doc)
		l->arr = cJSON_AddArrayToObject(doc, "sets");
	else
		l->tbl = insp_tbl_new(
		    "rlLLrrr",
		    (const char *const[]){"AGE", "SET", "GROUP", "TOPIC",
					  "PART", "BITS", "PENDING"});
	if ((err = tbx_tokens_sets_list(in->tokens, f, total, set_row, l)))
		return err;
	if (doc) {
		insp_json_add_int(doc, "sets_total", *total);
		insp_json_add_int(doc, "sets_shown", l->shown);
	}
	return TBX_OK;
}

int insp_tokens_list(insp_t *in)
{
	tbx__filter_t f = insp_filter(in, 1);
	token_listing_t l = {in, NULL, NULL, 0};
	token_listing_t sl = {in, NULL, NULL, 0};
	cJSON *doc = NULL;
	int64_t total = 0, sets_total = 0;
	int rc, err;

	if (in->o->json) {
		doc = cJSON_CreateObject();
		l.arr = cJSON_AddArrayToObject(doc, "tokens");
	} else {
		l.tbl = insp_tbl_new(
		    "rLLr",
		    (const char *const[]){"AGE", "TOKEN", "GROUP", "MINT SEQ"});
	}
	if ((err = tbx_tokens_tokens_list(in->tokens, &f, &total, token_row,
					  &l)) ||
	    (err = sets_list(in, &f, doc, &sl, &sets_total))) {
		rc = insp_t_fail(in, err);
	} else {
		rc = insp_list_finish(in, &doc, l.tbl, total, l.shown, "tokens",
				      "");
		/* --check finds set rows as it finds token rows. */
		if (rc == INSPECT_EXIT_OK && in->o->check && sl.shown)
			rc = INSPECT_EXIT_FINDING;
		/* The sets after the tokens, when there are any. */
		if (sl.tbl && sl.shown) {
			printf("\nToken sets (a row per set and receiving "
			       "group):\n");
			insp_tbl_print(sl.tbl, 0);
			if (sets_total > sl.shown)
				printf("… %" PRId64 " more (--limit)\n",
				       sets_total - sl.shown);
		}
	}
	cJSON_Delete(doc);
	insp_tbl_free(l.tbl);
	insp_tbl_free(sl.tbl);
	return rc;
}

/*
 * tokens show
 */

/* What a part of `tokens show` prints into: a JSON array, or text. */
typedef struct shown {
	insp_t *in;
	insp_tbl_t *tbl;
	cJSON *arr;
	int n;
	int err;       /* of the service store */
	char **served; /* token_registration: groups the store serves */
	size_t served_n;
} shown_t;

static int token_of(void *opaque, const tbx__token_rec_t *t)
{
	shown_t *s = opaque;
	char age[32], when[40];

	s->n++;
	if (s->arr) {
		insp_jobj(s->arr, "group:s mint_seq:i created_ms:i age_ms:i",
			  t->grp, t->mint_seq, t->created_ms,
			  insp_age(s->in, t->created_ms));
		return 0;
	}
	insp_fmt_age(insp_age(s->in, t->created_ms), age, sizeof(age));
	insp_fmt_time(t->created_ms, when, sizeof(when));
	insp_tbl_cell(s->tbl, t->grp);
	insp_tbl_cellf(s->tbl, "%lld", (long long)t->mint_seq);
	insp_tbl_cell(s->tbl, age);
	insp_tbl_cell(s->tbl, when);
	return 0;
}

/* The token's rows, one per receiving group. */
static int token_rows(insp_t *in, const char *token, cJSON *doc, int *found)
{
	shown_t s;
	int err;

	memset(&s, 0, sizeof(s));
	s.in = in;
	if (doc)
		s.arr = cJSON_AddArrayToObject(doc, "rows");
	else
		s.tbl = insp_tbl_new("Lrrl",
				     (const char *const[]){"GROUP", "MINT SEQ",
							   "AGE", "CREATED"});
	err = tbx_tokens_token_rows(in->tokens, token, token_of, &s);
	if (s.tbl) {
		if (s.n) {
			printf("  rows (one per receiving group):\n");
			insp_tbl_print(s.tbl, 4);
		} else {
			insp_kv("rows",
				"none (consumed by every group, or "
				"nobody subscribed)",
				2);
		}
		insp_tbl_free(s.tbl);
	}
	*found |= s.n > 0;
	return err ? (insp_t_fail(in, err), -1) : 0;
}

static const char *sweeper_text(int verdict)
{
	switch (verdict) {
	case TBX_SWEEP_WINNER:
		return "winner: recorded in its outbox row, the registration "
		       "awaits its confirm";
	case TBX_SWEEP_ORPHAN_OTHER_ATTEMPT:
		return "orphan: the outbox row recorded another attempt";
	case TBX_SWEEP_ORPHAN_NO_ROW:
		return "orphan: no outbox row";
	case TBX_SWEEP_IN_FLIGHT:
		return "in flight: its outbox row has no attempt yet";
	default:
		return "not checked: this store has no rows of the sender";
	}
}

static int registration_of(void *opaque, const tbx__reg_t *r,
			   const char *send_grp)
{
	shown_t *s = opaque;
	insp_t *in = s->in;
	insp_reg_t reg;
	char age[32], buf[700];

	memset(&reg, 0, sizeof(reg));
	reg.reg = *r;
	tbx__strlcpy(reg.grp, send_grp, sizeof(reg.grp));
	reg.verdict = -1;
	s->n++;
	if (insp_has(s->served, s->served_n, reg.grp) &&
	    (s->err = tbx__sweep_classify(in->store, reg.grp, &reg.reg,
					  &reg.verdict, reg.row_attempt)))
		return 1;
	if (s->arr) {
		insp_jobj(s->arr,
			  "attempt:s sender:s msg_id:s created_ms:i age_ms:i "
			  "verdict:s",
			  reg.reg.attempt, reg.grp, reg.reg.msg_id,
			  reg.reg.created_ms, insp_age(in, reg.reg.created_ms),
			  insp_verdict_key(reg.verdict));
		return 0;
	}
	insp_fmt_age(insp_age(in, reg.reg.created_ms), age, sizeof(age));
	insp_kv("attempt", reg.reg.attempt, 2);
	snprintf(buf, sizeof(buf), "%s ago by %s, for outbox row %s", age,
		 reg.grp, reg.reg.msg_id);
	insp_kv("registered", buf, 2);
	insp_kv("sweeper", sweeper_text(reg.verdict), 2);
	return 0;
}

/* The registration naming the token, with the sweeper's verdict when the
 * store is its sender's. */
static int token_registration(insp_t *in, const char *token, cJSON *doc,
			      int *found)
{
	shown_t s;
	int err;

	memset(&s, 0, sizeof(s));
	s.in = in;
	if (insp_served_groups(in, &s.served, &s.served_n))
		return -1;
	if (doc)
		s.arr = cJSON_AddArrayToObject(doc, "registrations");
	err = tbx_tokens_token_registrations(in->tokens, token, registration_of,
					     &s);
	insp_free_list(s.served, s.served_n);
	if (s.err)
		return insp_s_fail(in, s.err), -1;
	if (err)
		return insp_t_fail(in, err), -1;
	*found |= s.n > 0;
	if (!s.arr && !*found)
		insp_kv("registered",
			"no (a finished attempt's, or a "
			"publisher's)",
			2);
	return 0;
}

static int carried_by(void *opaque, const tbx__token_use_t *u)
{
	shown_t *s = opaque;
	char buf[900];

	s->n++;
	if (s->arr) {
		insp_jobj(
		    s->arr, "group:s msg_id:s seq:i out_id:s topic:s type:s",
		    u->grp, u->msg_id, u->seq, u->out_id, u->topic, u->type);
		return 0;
	}
	snprintf(buf, sizeof(buf),
		 "outbox row %s of %s, message %lld: %s to %s, type %s",
		 u->msg_id, u->grp, (long long)u->seq + 1, u->out_id, u->topic,
		 u->type);
	insp_kv("carried by", buf, 2);
	return 0;
}

static int consumed_by(void *opaque, const tbx__token_use_t *u)
{
	shown_t *s = opaque;
	char buf[900];

	s->n++;
	if (s->arr) {
		insp_jobj(s->arr,
			  "group:s msg_id:s in_topic:s in_partition:i "
			  "in_offset:i",
			  u->grp, u->msg_id, u->topic, u->partition, u->offset);
		return 0;
	}
	snprintf(buf, sizeof(buf), "outbox row %s of %s (%s [%lld] @%lld)",
		 u->msg_id, u->grp, u->topic, (long long)u->partition,
		 (long long)u->offset);
	insp_kv("consumed by", buf, 2);
	return 0;
}

/* Outbox rows of this store that send (outgoing) or consume (incoming)
 * the token. */
static int token_outbox(insp_t *in, const char *token, cJSON *doc, int *found)
{
	static const char *const label[2] = {"carried by", "consumed by"};
	static const char *const key[2] = {"carried_by", "consumed_by"};
	int err;

	for (int incoming = 0; incoming < 2; incoming++) {
		shown_t s;

		memset(&s, 0, sizeof(s));
		s.in = in;
		if (doc)
			s.arr = cJSON_AddArrayToObject(doc, key[incoming]);
		if ((err = tbx_outbox_token_uses(
			 in->store, token, incoming,
			 incoming ? consumed_by : carried_by, &s)))
			return insp_s_fail(in, err), -1;
		if (!s.arr && !s.n)
			insp_kv(label[incoming], "no outbox row of this store",
				2);
		*found |= s.n > 0;
	}
	return 0;
}

int insp_tokens_show(insp_t *in)
{
	cJSON *doc = NULL;
	char token[TBX_UUID_LEN + 1];
	int rc, err, n, found = 0;

	if ((err = tbx_tokens_token_match(in->tokens, in->o->id, token, &n)))
		return insp_t_fail(in, err);
	if (n > 1)
		return tbx_cli_usage(INSPECT_CMD,
				     "'%s' is the start of several ids; give "
				     "more of it",
				     in->o->id);
	if (!n)
		return tbx_cli_fail(INSPECT_CMD, "no token %s in %s", in->o->id,
				    in->t.name);
	if (in->o->json) {
		if (!(doc = cJSON_CreateObject()))
			return tbx_cli_usage(INSPECT_CMD, "out of memory");
		insp_json_add_str(doc, "token", token);
	} else {
		insp_kv("token", token, 0);
	}
	rc = INSPECT_EXIT_ERROR;
	if (token_rows(in, token, doc, &found) ||
	    token_registration(in, token, doc, &found) ||
	    token_outbox(in, token, doc, &found))
		goto out;
	rc = INSPECT_EXIT_OK;
	if (doc) {
		rc = insp_json_print(doc, rc);
		doc = NULL;
	}
out:
	cJSON_Delete(doc);
	return rc;
}

/*
 * orphans, cleanup --dry-run
 */

/* The WHY of an orphan in the tables: an attempt of token sets is judged
 * by its batch row. */
static const char *why_text(int sets, int verdict)
{
	if (!sets)
		return insp_verdict_text(verdict);
	switch (verdict) {
	case TBX_SWEEP_ORPHAN_NO_ROW:
		return "sets: no batch row";
	case TBX_SWEEP_ORPHAN_OTHER_ATTEMPT:
		return "sets: other attempt won";
	default:
		return "sets";
	}
}

typedef struct judged {
	insp_t *in;
	int64_t v[4];
	int64_t token_rows; /* of the orphans */
	int64_t sv[5];	    /* token sets: per tbx__sweep_verdict_t */
	int64_t set_rows;   /* of the set orphans */
	int set_why;	    /* a service store that could not answer */
	insp_tbl_t *tbl;
	cJSON *arr;
	int err;
} judged_t;

static void orphan_row(judged_t *j, const insp_reg_t *r, int64_t rows)
{
	char age[32];

	if (j->arr) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddItemToArray(j->arr, o);
		insp_json_add_str(o, "kind", r->sets ? "sets" : "tokens");
		insp_json_add_str(o, "group", r->grp);
		insp_json_add_str(o, "attempt", r->reg.attempt);
		insp_json_add_str(o, r->sets ? "row_id" : "msg_id",
				  r->reg.msg_id);
		insp_json_add_str(o, "reason", insp_verdict_key(r->verdict));
		insp_json_add_str(o, "row_attempt",
				  r->row_attempt[0] ? r->row_attempt : NULL);
		if (r->sets) {
			insp_json_add_int(o, "set_rows", rows);
		} else {
			insp_json_add_int(o, "registered_tokens", r->tokens);
			insp_json_add_int(o, "token_rows", rows);
		}
		insp_json_add_int(o, "created_ms", r->reg.created_ms);
		insp_json_add_int(o, "age_ms",
				  insp_age(j->in, r->reg.created_ms));
		return;
	}
	insp_fmt_age(insp_age(j->in, r->reg.created_ms), age, sizeof(age));
	insp_tbl_cell(j->tbl, age);
	insp_tbl_cell(j->tbl, r->grp);
	insp_tbl_cell(j->tbl, r->reg.attempt);
	insp_tbl_cell(j->tbl, r->reg.msg_id);
	insp_tbl_cellf(j->tbl, "%lld", (long long)rows);
	insp_tbl_cell(j->tbl, why_text(r->sets, r->verdict));
}

static int judge_one(void *opaque, const insp_reg_t *r)
{
	judged_t *j = opaque;
	int64_t rows = 0;

	if (r->verdict >= 0 && r->verdict < 4)
		j->v[r->verdict]++;
	if (!tbx__sweep_is_orphan(r->verdict))
		return 0;
	if ((j->err = tbx_tokens_attempt_token_rows(j->in->tokens,
						    r->reg.attempt, &rows))) {
		insp_t_fail(j->in, j->err);
		return 1;
	}
	j->token_rows += rows;
	orphan_row(j, r, rows);
	return 0;
}

/* A registration of token sets: an orphan is one row, its sets (every
 * group's) what the sweeper would drop with it. */
static int judge_set_one(void *opaque, const insp_reg_t *r)
{
	judged_t *j = opaque;
	int64_t rows = 0;

	if (r->verdict >= 0 && r->verdict < 5)
		j->sv[r->verdict]++;
	if (!tbx__sweep_is_orphan(r->verdict))
		return 0;
	if ((j->err = tbx_tokens_sets_attempt_rows(j->in->tokens,
						   r->reg.attempt, &rows))) {
		insp_t_fail(j->in, j->err);
		return 1;
	}
	j->set_rows += rows;
	orphan_row(j, r, rows);
	return 0;
}

/* The groups to judge: --group, else those the store serves that have
 * registrations; the others with registrations go to *skipped. */
static int groups_to_judge(insp_t *in, char ***judge, size_t *judge_n,
			   char ***skipped, size_t *skipped_n)
{
	char **served = NULL, **regs = NULL;
	size_t served_n = 0, regs_n = 0;
	int rc = -1;

	*judge = *skipped = NULL;
	*judge_n = *skipped_n = 0;
	if (insp_reg_groups(in, &regs, &regs_n))
		return -1;
	if (!(*judge = calloc(regs_n + in->o->group_cnt + 1, sizeof(char *))) ||
	    !(*skipped = calloc(regs_n + 1, sizeof(char *))))
		goto out;
	if (in->o->group_cnt) {
		for (size_t i = 0; i < in->o->group_cnt; i++)
			if (!insp_has(*judge, *judge_n, in->o->groups[i]) &&
			    !((*judge)[(*judge_n)++] =
				  tbx__strdup(in->o->groups[i])))
				goto out;
		rc = 0;
		goto out;
	}
	if (insp_served_groups(in, &served, &served_n))
		goto out;
	for (size_t i = 0; i < regs_n; i++) {
		int ok = insp_has(served, served_n, regs[i]);
		char ***list = ok ? judge : skipped;
		size_t *n = ok ? judge_n : skipped_n;
		if (!((*list)[(*n)++] = tbx__strdup(regs[i])))
			goto out;
	}
	rc = 0;
out:
	insp_free_list(regs, regs_n);
	insp_free_list(served, served_n);
	return rc;
}

/* Attempts registered by @p grp. */
static int64_t attempts_of(insp_t *in, const char *grp)
{
	int64_t n = 0;

	if (tbx_tokens_count(in->tokens, grp, NULL, &n))
		return 0;
	return n;
}

static void join(char *buf, size_t size, char *const *list, size_t n)
{
	size_t len = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < n && len < size; i++) {
		int w = snprintf(buf + len, size - len, "%s%s", i ? ", " : "",
				 list[i]);
		if (w < 0)
			break;
		len += (size_t)w;
	}
}

static void skipped_notes(insp_t *in, cJSON *doc, char *const *skipped,
			  size_t n)
{
	char note[700], num[48];
	cJSON *arr = doc ? cJSON_AddArrayToObject(doc, "unchecked") : NULL;

	for (size_t i = 0; i < n; i++) {
		int64_t attempts = attempts_of(in, skipped[i]);
		if (arr) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddItemToArray(arr, o);
			insp_json_add_str(o, "group", skipped[i]);
			insp_json_add_int(o, "attempts", attempts);
			continue;
		}
		snprintf(note, sizeof(note),
			 "%s registered by %s %s not checked: this store has "
			 "no rows of that group (name it with --group if this "
			 "is its store).",
			 insp_count_of(num, sizeof(num), attempts, "attempt",
				       "attempts"),
			 skipped[i], attempts == 1 ? "was" : "were");
		printf("\n");
		insp_wrap("note: ", note);
	}
}

/* orphans, and cleanup --dry-run (@p dry_run). */
static int judge(insp_t *in, int dry_run)
{
	char **groups = NULL, **skipped = NULL, line[1200], names[600];
	char n[5][48];
	size_t groups_n = 0, skipped_n = 0;
	judged_t j;
	cJSON *doc = NULL;
	int64_t orphans, checked = 0, set_orphans, set_checked = 0;
	int rc = INSPECT_EXIT_ERROR, has_sets = 0;

	memset(&j, 0, sizeof(j));
	j.in = in;
	if (groups_to_judge(in, &groups, &groups_n, &skipped, &skipped_n))
		goto out;
	if ((j.err = insp_has_sets(in, &has_sets))) {
		insp_t_fail(in, j.err);
		goto out;
	}
	if (in->o->json) {
		doc = cJSON_CreateObject();
		if (dry_run)
			cJSON_AddTrueToObject(doc, "dry_run");
		j.arr = cJSON_AddArrayToObject(doc, "orphans");
	} else {
		j.tbl = insp_tbl_new(
		    "rLLLrl",
		    (const char *const[]){"AGE", "SENDER", "ATTEMPT",
					  "MESSAGE ID", "TOKENS", "WHY"});
	}
	for (size_t i = 0; i < groups_n; i++) {
		int why = TBX_OK;

		if (insp_regs_each(in, groups[i], judge_one, &j) || j.err ||
		    insp_set_regs_each(in, groups[i], judge_set_one, &j,
				       &why) ||
		    j.err)
			goto out;
		if (why)
			j.set_why = why;
	}
	for (int v = 0; v < 4; v++)
		checked += j.v[v];
	for (int v = 0; v < 5; v++)
		set_checked += j.sv[v];
	orphans =
	    j.v[TBX_SWEEP_ORPHAN_OTHER_ATTEMPT] + j.v[TBX_SWEEP_ORPHAN_NO_ROW];
	set_orphans = j.sv[TBX_SWEEP_ORPHAN_OTHER_ATTEMPT] +
		      j.sv[TBX_SWEEP_ORPHAN_NO_ROW];
	rc = !dry_run && in->o->check &&
		     (orphans || set_orphans || j.sv[TBX_SWEEP_UNCHECKED])
		 ? INSPECT_EXIT_FINDING
		 : INSPECT_EXIT_OK;
	if (doc) {
		cJSON *arr = cJSON_AddArrayToObject(doc, "checked_groups");
		for (size_t i = 0; i < groups_n; i++)
			cJSON_AddItemToArray(arr, insp_json_str(groups[i]));
		skipped_notes(in, doc, skipped, skipped_n);
		insp_json_add_int(doc, "attempts_checked", checked);
		insp_json_add_int(doc, "winners", j.v[TBX_SWEEP_WINNER]);
		insp_json_add_int(doc, "in_flight", j.v[TBX_SWEEP_IN_FLIGHT]);
		insp_json_add_int(doc, "orphan_count", orphans);
		insp_json_add_int(doc, "orphan_token_rows", j.token_rows);
		/* null: a token store without token sets. */
		if (has_sets) {
			cJSON *o = cJSON_AddObjectToObject(doc, "token_sets");
			insp_json_add_int(o, "attempts_checked", set_checked);
			insp_json_add_int(o, "winners", j.sv[TBX_SWEEP_WINNER]);
			insp_json_add_int(o, "in_flight",
					  j.sv[TBX_SWEEP_IN_FLIGHT]);
			insp_json_add_int(o, "unchecked",
					  j.sv[TBX_SWEEP_UNCHECKED]);
			insp_json_add_int(o, "orphan_count", set_orphans);
			insp_json_add_int(o, "orphan_set_rows", j.set_rows);
		} else {
			cJSON_AddNullToObject(doc, "token_sets");
		}
		rc = insp_json_print(doc, rc);
		doc = NULL;
		goto out;
	}
	join(names, sizeof(names), groups, groups_n);
	insp_count_of(n[0], sizeof(n[0]), orphans, "orphaned attempt",
		      "orphaned attempts");
	insp_count_of(n[1], sizeof(n[1]), j.token_rows, "token row",
		      "token rows");
	insp_count_of(n[2], sizeof(n[2]), j.v[TBX_SWEEP_WINNER], "winner",
		      "winners");
	insp_count_of(n[3], sizeof(n[3]), j.v[TBX_SWEEP_IN_FLIGHT], "attempt",
		      "attempts");
	insp_count_of(n[4], sizeof(n[4]), checked, "attempt", "attempts");
	if (!groups_n)
		snprintf(line, sizeof(line), "%s",
			 skipped_n ? "No registrations of a group this store "
				     "has rows of."
				   : "No registrations.");
	else if (dry_run)
		snprintf(line, sizeof(line),
			 "cleanup would remove %s (%s) and the registrations "
			 "of %s, and leave %s in flight, of %s registered by "
			 "%s.",
			 n[0], n[1], n[2], n[3], n[4], names);
	else
		snprintf(line, sizeof(line),
			 "%s registered by %s: %s (%s), %s not yet confirmed, "
			 "%s in flight.",
			 n[4], names, n[0], n[1], n[2], n[3]);
	insp_wrap("", line);
	if (set_checked) {
		char s[5][48];

		insp_count_of(s[0], sizeof(s[0]), set_orphans,
			      "orphaned attempt", "orphaned attempts");
		insp_count_of(s[1], sizeof(s[1]), j.set_rows, "set row",
			      "set rows");
		insp_count_of(s[2], sizeof(s[2]), j.sv[TBX_SWEEP_WINNER],
			      "winner", "winners");
		insp_count_of(s[3], sizeof(s[3]), j.sv[TBX_SWEEP_IN_FLIGHT],
			      "attempt", "attempts");
		insp_count_of(s[4], sizeof(s[4]), set_checked, "attempt",
			      "attempts");
		if (dry_run)
			snprintf(line, sizeof(line),
				 "Token sets: cleanup would remove %s (%s) "
				 "and the registrations of %s, and leave %s "
				 "in flight, of %s.",
				 s[0], s[1], s[2], s[3], s[4]);
		else
			snprintf(line, sizeof(line),
				 "Token sets: %s registered: %s (%s), %s not "
				 "yet confirmed, %s in flight.",
				 s[4], s[0], s[1], s[2], s[3]);
		insp_wrap("", line);
	}
	if (j.sv[TBX_SWEEP_UNCHECKED]) {
		snprintf(line, sizeof(line),
			 "%" PRId64 " registration(s) of token sets not "
			 "checked: the service store %s; cleanup leaves "
			 "them.",
			 j.sv[TBX_SWEEP_UNCHECKED],
			 tbx__sweep_unchecked_text(j.set_why));
		insp_wrap("warning: ", line);
	}
	if (orphans || set_orphans)
		insp_tbl_print(j.tbl, 2);
	skipped_notes(in, NULL, skipped, skipped_n);
out:
	cJSON_Delete(doc);
	insp_tbl_free(j.tbl);
	insp_free_list(groups, groups_n);
	insp_free_list(skipped, skipped_n);
	return rc;
}

int insp_orphans(insp_t *in)
{
	return judge(in, 0);
}

/*
 * cleanup
 */

#define CLEANUP_LISTED 20 /* dropped orphans listed in tables */

typedef struct swept {
	insp_t *in;
	const char *grp;
	tbx__sweep_stats_t sum;
	size_t in_flight; /* of the last batch: those stay at the head */
	size_t set_in_flight, set_unchecked; /* of the last batch, sets */
	size_t listed, dropped;
	insp_tbl_t *tbl;
	cJSON *arr;
} swept_t;

static void on_swept(void *opaque, const tbx__reg_t *reg, int sets, int verdict,
		     int removed, uint64_t deleted)
{
	swept_t *s = opaque;
	char age[32];

	if (!removed || !tbx__sweep_is_orphan(verdict))
		return;
	s->dropped++;
	if (s->arr) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddItemToArray(s->arr, o);
		insp_json_add_str(o, "kind", sets ? "sets" : "tokens");
		insp_json_add_str(o, "group", s->grp);
		insp_json_add_str(o, "attempt", reg->attempt);
		insp_json_add_str(o, sets ? "row_id" : "msg_id", reg->msg_id);
		insp_json_add_str(o, "reason", insp_verdict_key(verdict));
		insp_json_add_int(o, sets ? "set_rows" : "token_rows",
				  (int64_t)deleted);
		insp_json_add_int(o, "created_ms", reg->created_ms);
		return;
	}
	if (s->listed++ >= CLEANUP_LISTED)
		return;
	insp_fmt_age(insp_age(s->in, reg->created_ms), age, sizeof(age));
	insp_tbl_cell(s->tbl, age);
	insp_tbl_cell(s->tbl, s->grp);
	insp_tbl_cell(s->tbl, reg->attempt);
	insp_tbl_cell(s->tbl, reg->msg_id);
	insp_tbl_cellf(s->tbl, "%llu", (unsigned long long)deleted);
	insp_tbl_cell(s->tbl, why_text(sets, verdict));
}

/* Registrations of token sets of @p grp. */
static int64_t set_attempts_of(insp_t *in, const char *grp)
{
	int64_t n = 0;

	if (tbx_tokens_sets_count(in->tokens, grp, NULL, NULL, &n))
		return 0;
	return n;
}

/* cleanup's token-set counts into @p o: "token_sets", null on a token
 * store without them. */
static void sets_json(cJSON *o, const tbx__sweep_stats_t *st, size_t in_flight,
		      size_t unchecked, int has_sets)
{
	cJSON *s;

	if (!has_sets) {
		cJSON_AddNullToObject(o, "token_sets");
		return;
	}
	s = cJSON_AddObjectToObject(o, "token_sets");
	insp_json_add_int(s, "orphans", (int64_t)st->set_orphans);
	insp_json_add_int(s, "set_rows", (int64_t)st->set_rows_deleted);
	insp_json_add_int(s, "winners", (int64_t)st->set_winners);
	insp_json_add_int(s, "in_flight", (int64_t)in_flight);
	insp_json_add_int(s, "unchecked", (int64_t)unchecked);
}

/* Names the file a sweeper error came from: S when its connection says
 * so, else the token store (where the sweeper writes). */
static int sweep_fail(insp_t *in, int err)
{
	const char *msg = tbx_outbox_errmsg(in->store);

	if (msg)
		return insp_store_fail(in->s.name, err, msg);
	return insp_store_fail(in->t.name, err, NULL);
}

int insp_cleanup(insp_t *in)
{
	char **groups = NULL, **skipped = NULL, line[600];
	size_t groups_n = 0, skipped_n = 0, batch = (size_t)in->o->batch;
	tbx_tokens_t *tokens = NULL;
	insp_tbl_t *sum_tbl = NULL, *tbl = NULL;
	cJSON *doc = NULL, *garr = NULL, *arr = NULL;
	swept_t total;
	int rc = INSPECT_EXIT_ERROR, err = TBX_OK, more = 0, has_sets = 0;

	if (in->o->dry_run)
		return judge(in, 1);
	memset(&total, 0, sizeof(total));
	if (groups_to_judge(in, &groups, &groups_n, &skipped, &skipped_n))
		goto out;
	if ((err = insp_has_sets(in, &has_sets))) {
		rc = insp_t_fail(in, err);
		goto out;
	}
	/* The sweeper reads S through the read-only store opened by
	 * insp_open() and writes T through a connection of its own. */
	if ((rc = insp_open_write(in, 1, NULL, &tokens))) {
		rc = INSPECT_EXIT_ERROR;
		goto out;
	}
	rc = INSPECT_EXIT_ERROR;
	if (in->o->json) {
		doc = cJSON_CreateObject();
		garr = cJSON_AddArrayToObject(doc, "groups");
		arr = cJSON_AddArrayToObject(doc, "dropped");
	} else {
		sum_tbl = insp_tbl_new(
		    "Lrrrr",
		    (const char *const[]){"SENDER", "ORPHANS", "TOKEN ROWS",
					  "WINNERS", "IN FLIGHT"});
		tbl = insp_tbl_new(
		    "rLLLrl",
		    (const char *const[]){"AGE", "SENDER", "ATTEMPT",
					  "MESSAGE ID", "TOKENS", "WHY"});
	}
	for (size_t i = 0; i < groups_n && !err; i++) {
		swept_t s;
		tbx__sweep_stats_t st;

		memset(&s, 0, sizeof(s));
		s.in = in;
		s.grp = groups[i];
		s.tbl = tbl;
		s.arr = arr;
		s.listed = total.listed;
		/* Bounded batches, until a batch removes nothing or sees
		 * everything: attempts in flight stay at the head of the
		 * list and are seen again by every batch. */
		do {
			err = tbx__tokens_sweep_ex(tokens, in->store, s.grp,
						   batch, &st, on_swept, &s);
			s.sum.examined += st.examined;
			s.sum.winners += st.winners;
			s.sum.orphans += st.orphans;
			s.sum.tokens_deleted += st.tokens_deleted;
			s.in_flight = st.in_flight;
			s.sum.set_examined += st.set_examined;
			s.sum.set_winners += st.set_winners;
			s.sum.set_orphans += st.set_orphans;
			s.sum.set_rows_deleted += st.set_rows_deleted;
			s.set_in_flight = st.set_in_flight;
			s.set_unchecked = st.set_unchecked;
			if (st.set_unchecked_err)
				s.sum.set_unchecked_err = st.set_unchecked_err;
		} while (!err && ((st.examined == batch &&
				   st.winners + st.orphans > 0) ||
				  (st.set_examined == batch &&
				   st.set_winners + st.set_orphans > 0)));
		/* The last batch was all in flight: anything behind it was
		 * not examined. */
		if (!err && st.examined == batch &&
		    st.winners + st.orphans == 0 &&
		    attempts_of(in, s.grp) > (int64_t)s.in_flight)
			more = 1;
		if (!err && st.set_examined == batch &&
		    st.set_winners + st.set_orphans == 0 &&
		    set_attempts_of(in, s.grp) >
			(int64_t)(s.set_in_flight + s.set_unchecked))
			more = 1;
		total.sum.orphans += s.sum.orphans;
		total.sum.winners += s.sum.winners;
		total.sum.tokens_deleted += s.sum.tokens_deleted;
		total.in_flight += s.in_flight;
		total.sum.set_examined += s.sum.set_examined;
		total.sum.set_orphans += s.sum.set_orphans;
		total.sum.set_winners += s.sum.set_winners;
		total.sum.set_rows_deleted += s.sum.set_rows_deleted;
		total.set_in_flight += s.set_in_flight;
		total.set_unchecked += s.set_unchecked;
		if (s.sum.set_unchecked_err)
			total.sum.set_unchecked_err = s.sum.set_unchecked_err;
		total.listed = s.listed;
		total.dropped += s.dropped;
		if (garr) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddItemToArray(garr, o);
			insp_json_add_str(o, "group", s.grp);
			insp_json_add_int(o, "orphans", (int64_t)s.sum.orphans);
			insp_json_add_int(o, "token_rows",
					  (int64_t)s.sum.tokens_deleted);
			insp_json_add_int(o, "winners", (int64_t)s.sum.winners);
			insp_json_add_int(o, "in_flight", (int64_t)s.in_flight);
			sets_json(o, &s.sum, s.set_in_flight, s.set_unchecked,
				  has_sets);
		} else {
			insp_tbl_cell(sum_tbl, s.grp);
			insp_tbl_cellf(sum_tbl, "%zu", s.sum.orphans);
			insp_tbl_cellf(
			    sum_tbl, "%llu",
			    (unsigned long long)s.sum.tokens_deleted);
			insp_tbl_cellf(sum_tbl, "%zu", s.sum.winners);
			insp_tbl_cellf(sum_tbl, "%zu", s.in_flight);
		}
	}
	rc = INSPECT_EXIT_OK;
	if (doc) {
		insp_json_add_int(doc, "orphans", (int64_t)total.sum.orphans);
		insp_json_add_int(doc, "token_rows",
				  (int64_t)total.sum.tokens_deleted);
		insp_json_add_int(doc, "winners", (int64_t)total.sum.winners);
		insp_json_add_int(doc, "in_flight", (int64_t)total.in_flight);
		sets_json(doc, &total.sum, total.set_in_flight,
			  total.set_unchecked, has_sets);
		cJSON_AddBoolToObject(doc, "more", more);
		skipped_notes(in, doc, skipped, skipped_n);
		if (err)
			insp_json_add_str(doc, "error", tbx_strerror(err));
		rc = insp_json_print(doc, rc);
		doc = NULL;
	} else {
		char n[4][48];

		snprintf(line, sizeof(line),
			 "cleanup removed %s (%s) and the registrations of %s; "
			 "%s left in flight.",
			 insp_count_of(n[0], sizeof(n[0]),
				       (int64_t)total.sum.orphans,
				       "orphaned attempt", "orphaned attempts"),
			 insp_count_of(n[1], sizeof(n[1]),
				       (int64_t)total.sum.tokens_deleted,
				       "token row", "token rows"),
			 insp_count_of(n[2], sizeof(n[2]),
				       (int64_t)total.sum.winners, "winner",
				       "winners"),
			 insp_count_of(n[3], sizeof(n[3]),
				       (int64_t)total.in_flight, "attempt",
				       "attempts"));
		insp_wrap("", line);
		if (groups_n)
			insp_tbl_print(sum_tbl, 2);
		if (total.sum.set_examined) {
			char m[4][48];

			snprintf(
			    line, sizeof(line),
			    "Token sets: removed %s (%s) and the "
			    "registrations of %s; %s left in flight.",
			    insp_count_of(m[0], sizeof(m[0]),
					  (int64_t)total.sum.set_orphans,
					  "orphaned attempt",
					  "orphaned attempts"),
			    insp_count_of(m[1], sizeof(m[1]),
					  (int64_t)total.sum.set_rows_deleted,
					  "set row", "set rows"),
			    insp_count_of(m[2], sizeof(m[2]),
					  (int64_t)total.sum.set_winners,
					  "winner", "winners"),
			    insp_count_of(m[3], sizeof(m[3]),
					  (int64_t)total.set_in_flight,
					  "attempt", "attempts"));
			printf("\n");
			insp_wrap("", line);
		}
		if (total.set_unchecked) {
			snprintf(line, sizeof(line),
				 "%zu registration(s) of token sets not "
				 "checked, and kept: the service store %s.",
				 total.set_unchecked,
				 tbx__sweep_unchecked_text(
				     total.sum.set_unchecked_err));
			printf("\n");
			insp_wrap("warning: ", line);
		}
		if (total.dropped) {
			printf("\nOrphaned attempts dropped:\n");
			insp_tbl_print(tbl, 2);
			if (total.dropped > CLEANUP_LISTED)
				printf("  … %zu more (--json lists all)\n",
				       total.dropped - CLEANUP_LISTED);
		}
		if (more) {
			printf("\n");
			insp_wrap("note: ",
				  "a whole batch was in flight; attempts "
				  "behind it were not examined (a larger "
				  "--batch reaches them).");
		}
		skipped_notes(in, NULL, skipped, skipped_n);
	}
	if (err)
		rc = sweep_fail(in, err);
out:
	cJSON_Delete(doc);
	insp_tbl_free(sum_tbl);
	insp_tbl_free(tbl);
	tbx_tokens_close(tokens);
	insp_free_list(groups, groups_n);
	insp_free_list(skipped, skipped_n);
	return rc;
}

/*
 * redispatch
 */

typedef struct redone {
	int64_t found, finished, left;
	int64_t registered; /* attempts of the group still registered */
	int err;
	char errstr[512];
} redone_t;

/* Counting a group's batch rows (outbox.layout=batch) created at or
 * before a time. */
typedef struct ob_older {
	int64_t before, n;
} ob_older_t;

static int ob_older(void *opaque, const tbx__obatch_t *row,
		    const tbx__cover_t *cover)
{
	ob_older_t *c = opaque;

	(void)cover;
	c->n += row->created_ms <= c->before;
	return 0;
}

/* The group's rows redispatch takes: record rows and batch rows (a
 * store without batch rows has none). */
static int64_t rows_older(tbx_outbox_t *store, const char *grp, int64_t before)
{
	ob_older_t c = {before, 0};
	int64_t n = -1;
	int err;

	if (tbx_outbox_count_older(store, grp, before, &n))
		return -1;
	err = tbx_outbox_obatch_load(store, grp, ob_older, &c);
	if (err && err != TBX_ESCHEMA)
		return -1;
	return n + c.n;
}

static int redispatch_group(insp_t *in, const char *grp, int64_t before,
			    redone_t *res)
{
	const insp_opts_t *o = in->o;
	/* --config and -X (checked by insp_redispatch): the producer's
	 * Kafka settings, dispatch.* and store.synchronous. */
	tbx_conf_t *conf = insp_kafka_conf(in);
	tbx_outbox_t *store = NULL;
	tbx_tokens_t *tokens = NULL;
	tbx__recover_t *rec = NULL;
	size_t batch = (size_t)o->batch;

	memset(res, 0, sizeof(*res));
	if (!conf) {
		res->err = TBX_ENOMEM;
		return -1;
	}
	if ((res->err = insp_open_write_err(
		 in, tbx__conf_cfg(conf)->store_synchronous == TBX_SYNC_FULL,
		 &store, &tokens, res->errstr, sizeof(res->errstr)))) {
		if (!res->errstr[0])
			snprintf(res->errstr, sizeof(res->errstr), "%s",
				 tbx_strerror(res->err));
		tbx_conf_destroy(conf);
		return -1;
	}
	if (!(rec = tbx__recover_new(conf, grp, store, tokens, res->errstr,
				     sizeof(res->errstr)))) {
		res->err = TBX_ESTORE;
		goto out;
	}
	res->found = rows_older(store, grp, before);
	while (res->found > 0) {
		size_t want = batch, done = 0;

		if (o->limit && (int64_t)want > o->limit - res->finished)
			want = (size_t)(o->limit - res->finished);
		if (want == 0)
			break;
		res->err = tbx__recover_older(rec, before, want, &done);
		res->finished += (int64_t)done;
		/* A batch that did not finish everything it took has rows
		 * that failed to deliver: taking them again now would
		 * fail again. */
		if (res->err || done < want)
			break;
	}
	if (res->err)
		snprintf(res->errstr, sizeof(res->errstr), "%s%s%s",
			 tbx_strerror(res->err),
			 *tbx__recover_errstr(rec) ? ": " : "",
			 tbx__recover_errstr(rec));
	res->left = rows_older(store, grp, before);
out:
	tbx__recover_destroy(rec);
	tbx_tokens_close(tokens);
	tbx_outbox_close(store);
	tbx_conf_destroy(conf);
	return res->err ? -1 : 0;
}

int insp_redispatch(insp_t *in)
{
	int64_t before = in->now_ms - in->o->older_ms, found = 0;
	char **groups = NULL, when[40], dur[32], line[700];
	size_t groups_n = 0;
	redone_t *res = NULL;
	insp_tbl_t *tbl = NULL;
	cJSON *doc = NULL, *arr = NULL;
	int rc = INSPECT_EXIT_ERROR, failed = -1;

	{
		tbx_conf_t *check = insp_kafka_conf(in);

		if (!check)
			goto out;
		tbx_conf_destroy(check);
	}
	if (in->o->group_cnt) {
		if (!(groups = calloc(in->o->group_cnt, sizeof(*groups))))
			goto oom;
		for (size_t i = 0; i < in->o->group_cnt; i++)
			if (!(groups[groups_n++] =
				  tbx__strdup(in->o->groups[i])))
				goto oom;
	} else if (insp_served_groups(in, &groups, &groups_n)) {
		goto out;
	}
	if (!(res = calloc(groups_n + 1, sizeof(*res))))
		goto oom;
	for (size_t i = 0; i < groups_n; i++) {
		if (redispatch_group(in, groups[i], before, &res[i]) ||
		    res[i].left > 0)
			if (failed < 0)
				failed = (int)i;
		found += res[i].found;
		/* Rows finished here may leave attempts of earlier crashes
		 * registered with no row: cleanup's to sweep, now that the
		 * group has no row to say this store is its own. */
		if (res[i].found)
			res[i].registered = attempts_of(in, groups[i]);
	}
	insp_fmt_time(before, when, sizeof(when));
	insp_fmt_duration(in->o->older_ms, dur, sizeof(dur));
	if (in->o->json) {
		doc = cJSON_CreateObject();
		insp_json_add_int(doc, "older_than_ms", in->o->older_ms);
		insp_json_add_int(doc, "created_before_ms", before);
		arr = cJSON_AddArrayToObject(doc, "groups");
	} else {
		printf("redispatch: rows created at or before %s (older than "
		       "%s)\n",
		       when, dur);
		tbl = insp_tbl_new("Lrrr",
				   (const char *const[]){"GROUP", "FOUND",
							 "FINISHED", "LEFT"});
	}
	for (size_t i = 0; i < groups_n; i++) {
		const redone_t *r = &res[i];
		/* Groups of ingress offsets or dead letters only, or with
		 * younger rows, are not worth a line unless named. */
		if (!r->found && !r->err && !in->o->group_cnt)
			continue;
		if (doc) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddItemToArray(arr, o);
			insp_json_add_str(o, "group", groups[i]);
			insp_json_add_int(o, "found", r->found);
			insp_json_add_int(o, "finished", r->finished);
			insp_json_add_int(o, "left", r->left);
			insp_json_add_int(o, "registered_attempts",
					  r->registered);
			insp_json_add_str(o, "error",
					  r->err ? r->errstr : NULL);
		} else {
			insp_tbl_cell(tbl, groups[i]);
			insp_tbl_cellf(tbl, "%" PRId64, r->found);
			insp_tbl_cellf(tbl, "%" PRId64, r->finished);
			insp_tbl_cellf(tbl, "%" PRId64, r->left);
		}
	}
	rc = INSPECT_EXIT_OK;
	if (doc) {
		rc = insp_json_print(doc, rc);
		doc = NULL;
	} else if (found || in->o->group_cnt) {
		insp_tbl_print(tbl, 2);
		for (size_t i = 0; i < groups_n; i++) {
			char note[600], num[48];
			if (!res[i].registered)
				continue;
			snprintf(
			    note, sizeof(note),
			    "%s of %s %s still registered (from earlier "
			    "crashes, or workers at work): 'cleanup "
			    "--group %s' sweeps the orphans among them.",
			    insp_count_of(num, sizeof(num), res[i].registered,
					  "attempt", "attempts"),
			    groups[i], res[i].registered == 1 ? "is" : "are",
			    groups[i]);
			printf("\n");
			insp_wrap("note: ", note);
		}
	} else {
		printf("  no outbox rows that old\n");
	}
	if (failed >= 0) {
		const redone_t *r = &res[failed];
		if (r->err)
			snprintf(line, sizeof(line), "%s: %s", groups[failed],
				 r->errstr);
		else
			snprintf(line, sizeof(line),
				 "%s: %" PRId64 " rows not finished (not "
				 "delivered within dispatch.timeout.ms?)",
				 groups[failed], r->left);
		rc = tbx_cli_usage(INSPECT_CMD, "redispatch: %s", line);
	}
	goto out;
oom:
	rc = tbx_cli_usage(INSPECT_CMD, "out of memory");
out:
	cJSON_Delete(doc);
	insp_tbl_free(tbl);
	insp_free_list(groups, groups_n);
	free(res);
	return rc;
}

/*
 * unsubscribe: removes (topic, group) from the token store, so that
 * senders stop minting token rows for a retired group, and the group's
 * token rows once it has no subscription left (tokens do not record their
 * topic: while the group subscribes to another topic they are kept).  One
 * transaction on a connection of its own.  A subscription used less than
 * --idle-after ago is refused: a worker of the group may still run, and
 * records sent for it would carry no token of its own.
 */
int insp_unsubscribe(insp_t *in)
{
	const char *grp = in->o->groups[0], *topic = in->o->topic;
	tbx_tokens_t *tokens = NULL;
	tbx__unsub_t u;
	char age[32], dur[32];
	int64_t used, others, rows, deleted;
	int rc, err, sets = 0;

	if ((rc = insp_open_write(in, 1, NULL, &tokens)))
		return rc;
	rc = INSPECT_EXIT_ERROR;
	if ((err = tbx_tokens_unsubscribe(tokens, topic, grp,
					  in->now_ms - in->o->idle_ms,
					  in->o->yes, &u))) {
		rc =
		    insp_store_fail(in->t.name, err, tbx_tokens_errmsg(tokens));
		goto out;
	}
	used = u.used_ms;
	others = u.others;
	rows = u.token_rows;
	deleted = u.deleted;
	if (!u.found) {
		tbx_cli_note(INSPECT_CMD,
			     "%s: group %s has no subscription to %s",
			     in->t.name, grp, topic);
		rc = INSPECT_EXIT_FINDING;
		goto out;
	}
	insp_fmt_age(in->now_ms - used, age, sizeof(age));
	insp_fmt_duration(in->o->idle_ms, dur, sizeof(dur));
	if (in->now_ms - used < in->o->idle_ms) {
		rc = tbx_cli_usage(
		    INSPECT_CMD,
		    "unsubscribe: a worker of %s used its subscription to %s "
		    "%s ago, less than --idle-after %s: stop every worker of "
		    "the group first (a running one would take the records "
		    "sent afterwards for finished work), then wait, or give "
		    "a shorter --idle-after",
		    grp, topic, age, dur);
		goto out;
	}
	if ((err = insp_has_sets(in, &sets))) {
		rc = insp_t_fail(in, err);
		goto out;
	}
	if (in->o->json) {
		cJSON *doc = insp_jobj(
		    NULL,
		    "group:s topic:s unused_for_ms:i removed:b "
		    "other_subscriptions:i token_rows:i token_rows_kept:b",
		    grp, topic, in->now_ms - used, in->o->yes, others,
		    in->o->yes ? deleted : (others ? 0 : rows), others > 0);

		/* The group's token set rows of the topic (null: a store
		 * without token sets): removed with it, whatever its other
		 * subscriptions. */
		if (sets)
			insp_json_add_int(doc, "set_rows",
					  in->o->yes ? u.set_deleted
						     : u.set_rows);
		else
			cJSON_AddNullToObject(doc, "set_rows");
		rc = insp_json_print(doc, INSPECT_EXIT_OK);
		goto out;
	}
	printf("%s subscription of %s to %s (unused for %s)\n",
	       in->o->yes ? "removed the" : "would remove the", grp, topic,
	       age);
	if (others)
		printf("kept %s's %" PRId64 " token row(s): tokens do not "
		       "record their topic, and %s still subscribes to %" PRId64
		       " other topic(s)\n",
		       grp, rows, grp, others);
	else
		printf("%s %" PRId64 " token row(s) of %s\n",
		       in->o->yes ? "removed" : "would remove",
		       in->o->yes ? deleted : rows, grp);
	if (sets && (u.set_rows || u.set_deleted))
		printf("%s %" PRId64 " token set row(s) of %s for %s\n",
		       in->o->yes ? "removed" : "would remove",
		       in->o->yes ? u.set_deleted : u.set_rows, grp, topic);
	if (!in->o->yes)
		printf("nothing removed: add --yes to remove them\n");
	rc = INSPECT_EXIT_OK;
out:
	tbx_tokens_close(tokens);
	return rc;
}
