/*
 * The batch rows of `tokenbox inspect outbox list|show` and `status`
 * (tools/inspect.h): the rows of tbx_obatch that workers with
 * outbox.layout = batch write, one per batch (docs/batched-tokens.md,
 * "The outbox row by the batch").  They are read as stored
 * (tbx_outbox_obatch_list()) and decoded here with the decoders the
 * worker uses (outbox/batchrow.h), so that a row whose columns do not
 * decode is shown as corrupt, with the reason, instead of stopping the
 * listing.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "outbox/batchrow.h"
#include "store/msgs.h"
#include "tools/cli.h"
#include "tools/inspect.h"

int insp_ob_decode(const tbx__obatch_t *row, insp_ob_t *ob)
{
	int err;

	memset(ob, 0, sizeof(*ob));
	err = tbx__obatch_check(row, &ob->cover, ob->why, sizeof(ob->why));
	if (err == TBX_ECORRUPT) {
		ob->corrupt = 1;
		return TBX_OK;
	}
	if (!err)
		/* Checked: it decodes. */
		err = tbx__wire_decode(row->wire, row->wire_len, ob->cover.n,
				       &ob->wire, &ob->nwire, ob->why,
				       sizeof(ob->why));
	if (err == TBX_ECORRUPT) {
		ob->corrupt = 1;
		return TBX_OK;
	}
	return err;
}

void insp_ob_free(insp_ob_t *ob)
{
	tbx__cover_free(&ob->cover);
	free(ob->wire);
	ob->wire = NULL;
}

const char *insp_ob_state(const tbx__obatch_t *row, const insp_ob_t *ob)
{
	if (ob->corrupt)
		return "corrupt";
	return row->attempt[0] ? "tokened" : "processed";
}

/* A message's text field (store/msgs.h) into @p dst, cut to fit; "" for
 * NULL. */
static void field_str(char *dst, size_t size, const tbx__mfield_t *f)
{
	size_t n = f->p ? f->len : 0;

	if (n >= size)
		n = size - 1;
	if (n)
		memcpy(dst, f->p, n);
	dst[n] = '\0';
}

static const char *tokfmt_name(int tokfmt)
{
	return tokfmt == 2 ? "set" : tokfmt == 1 ? "message" : NULL;
}

static const char *cover_kind(int kind, int json)
{
	switch (kind) {
	case TBX__COVER_DEAD_LETTER:
		return json ? "dead_letter" : "dead letter";
	case TBX__COVER_UNTOKENED:
		return "untokened";
	default:
		return "handled";
	}
}

/* A covered record's place, "orders[1]@42". */
static void rec_place(const tbx__cover_ent_t *e, char *buf, size_t size)
{
	snprintf(buf, size, "%s[%" PRId32 "]@%" PRId64, e->topic, e->partition,
		 e->offset);
}

/* A batch row as JSON; @p full (show) adds each message's payload and
 * headers, as a record row's show has them (insp_row_json()). */
static cJSON *ob_json(insp_t *in, const char *grp, const tbx__obatch_t *row,
		      const insp_ob_t *ob, int full)
{
	cJSON *o, *recs, *msgs;
	tbx__msgs_iter_t it;
	tbx__mfield_t f[TBX__MF_COUNT];
	uint32_t i = 0;

	o = insp_jobj(NULL,
		      "group:s row_id:s state:s attempt:o token_format:s "
		      "created_ms:i age_ms:i dispatch_failures:i",
		      grp, row->row_id, insp_ob_state(row, ob), row->attempt,
		      tokfmt_name(row->tokfmt), row->created_ms,
		      insp_age(in, row->created_ms), row->dispatch_failures);
	if (!o)
		return NULL;
	if (row->attempt[0])
		insp_json_add_int(o, "mint_seq", row->mint_seq);
	else
		cJSON_AddNullToObject(o, "mint_seq");
	if (row->stuck_ms >= 0)
		insp_json_add_int(o, "stuck_ms", row->stuck_ms);
	else
		cJSON_AddNullToObject(o, "stuck_ms");
	if (ob->corrupt) {
		insp_json_add_str(o, "corrupt", ob->why);
		cJSON_AddNullToObject(o, "records");
		cJSON_AddNullToObject(o, "messages");
		return o;
	}
	cJSON_AddNullToObject(o, "corrupt");
	recs = cJSON_AddArrayToObject(o, "records");
	for (uint32_t k = 0; k < ob->cover.n; k++) {
		const tbx__cover_ent_t *e = &ob->cover.ent[k];
		cJSON *r = insp_jobj(
		    recs,
		    "topic:s partition:i offset:i kind:s msg_id:s token:o",
		    e->topic, (int64_t)e->partition, e->offset,
		    cover_kind(e->kind, 1), e->msg_id, e->ref_id);

		if (e->ref == TBX__REF_BIT)
			insp_jadd(r, "tbit:i set_partition:i",
				  (int64_t)e->index, (int64_t)e->set_part);
		else
			insp_jadd(r, "tbit:j set_partition:j", NULL, NULL);
	}
	msgs = cJSON_AddArrayToObject(o, "messages");
	if (tbx__msgs_iter_init(&it, row->msgs, row->msgs_len))
		return o; /* checked: not reached */
	while (tbx__msgs_iter_next(&it, f) == 1 && i < ob->nwire) {
		const tbx__wire_ent_t *w = &ob->wire[i];
		char id[TBX_MSGID_MAX + 1] = "", topic[256] = "", tok[64] = "";
		char type[256] = "";
		cJSON *m;

		field_str(id, sizeof(id), &f[TBX__MF_ID]);
		field_str(topic, sizeof(topic), &f[TBX__MF_TOPIC]);
		field_str(tok, sizeof(tok), &f[TBX__MF_TOKEN]);
		field_str(type, sizeof(type), &f[TBX__MF_TYPE]);
		m = insp_jobj(
		    msgs,
		    "seq:i id:s topic:s type:s key:j token:o record:i "
		    "payload_bytes:i",
		    (int64_t)i, id, topic, type,
		    insp_bytes_json(f[TBX__MF_KEY].p, f[TBX__MF_KEY].len), tok,
		    (int64_t)w->cover,
		    (int64_t)(f[TBX__MF_PAYLOAD].p ? f[TBX__MF_PAYLOAD].len
						   : 0));
		if (w->partition >= 0)
			insp_json_add_int(m, "partition", w->partition);
		else
			cJSON_AddNullToObject(m, "partition");
		if (full) {
			cJSON_AddItemToObject(
			    m, "payload",
			    insp_bytes_json(f[TBX__MF_PAYLOAD].p,
					    f[TBX__MF_PAYLOAD].len));
			insp_hdrs_json(m, f[TBX__MF_HEADERS].p,
				       f[TBX__MF_HEADERS].len);
		}
		i++;
	}
	return o;
}

/*
 * outbox list
 */

typedef struct ob_listing {
	insp_t *in;
	insp_tbl_t *tbl;
	cJSON *arr;
	int64_t shown;
	char **corrupt; /* "ROW ID: why" of the corrupt rows listed */
	size_t corrupt_n;
	int err;
} ob_listing_t;

static int ob_listed(void *opaque, const char *grp, const tbx__obatch_t *row)
{
	ob_listing_t *l = opaque;
	char age[32], from[300];
	insp_ob_t ob;

	if ((l->err = insp_ob_decode(row, &ob))) {
		insp_ob_free(&ob);
		return 1;
	}
	l->shown++;
	if (l->arr) {
		cJSON_AddItemToArray(l->arr, ob_json(l->in, grp, row, &ob, 0));
		insp_ob_free(&ob);
		return 0;
	}
	insp_fmt_age(insp_age(l->in, row->created_ms), age, sizeof(age));
	insp_tbl_cell(l->tbl, age);
	insp_tbl_cell(l->tbl, grp);
	insp_tbl_cell(l->tbl, row->row_id);
	insp_tbl_cell(l->tbl, insp_ob_state(row, &ob));
	insp_tbl_cell(l->tbl, ob.corrupt ? "-" : tokfmt_name(row->tokfmt));
	insp_tbl_cellf(l->tbl, "%" PRId64, row->dispatch_failures);
	if (ob.corrupt) {
		char line[400], **grown;

		insp_tbl_cell(l->tbl, "-");
		insp_tbl_cell(l->tbl, "-");
		insp_tbl_cell(l->tbl, "-");
		snprintf(line, sizeof(line), "%s: %s", row->row_id, ob.why);
		grown = realloc(l->corrupt,
				(l->corrupt_n + 1) * sizeof(*l->corrupt));
		if (grown) {
			l->corrupt = grown;
			if ((grown[l->corrupt_n] = tbx__strdup(line)))
				l->corrupt_n++;
		}
	} else {
		insp_tbl_cellf(l->tbl, "%" PRIu32, ob.cover.n);
		insp_tbl_cellf(l->tbl, "%" PRIu32, ob.nwire);
		rec_place(&ob.cover.ent[0], from, sizeof(from));
		if (ob.cover.n > 1)
			insp_tbl_cellf(l->tbl, "%s +%" PRIu32, from,
				       ob.cover.n - 1);
		else
			insp_tbl_cell(l->tbl, from);
	}
	insp_ob_free(&ob);
	return 0;
}

int insp_ob_list(insp_t *in, const tbx__filter_t *f, cJSON *doc, int sep,
		 int64_t *shown)
{
	ob_listing_t l = {in, NULL, NULL, 0, NULL, 0, TBX_OK};
	int64_t total = 0;
	int err;

	*shown = 0;
	if (doc) {
		l.arr = cJSON_CreateArray();
	} else {
		l.tbl = insp_tbl_new(
		    "rLLllrrrl", (const char *const[]){"AGE", "GROUP", "ROW ID",
						       "STATE", "FMT", "FAIL",
						       "RECS", "OUT", "FROM"});
	}
	err = tbx_outbox_obatch_list(in->store, f, &total, ob_listed, &l);
	if (err == TBX_ESCHEMA) {
		/* A store from before batch rows: none. */
		if (doc)
			cJSON_AddNullToObject(doc, "batches");
		cJSON_Delete(l.arr);
		insp_tbl_free(l.tbl);
		return TBX_OK;
	}
	if (!err)
		err = l.err;
	if (!err && doc) {
		cJSON_AddItemToObject(doc, "batches", l.arr);
		l.arr = NULL;
		insp_json_add_int(doc, "batches_total", total);
		insp_json_add_int(doc, "batches_shown", l.shown);
	} else if (!err && l.shown) {
		printf("%sBatch rows (outbox.layout = batch, a row per "
		       "batch):\n",
		       sep ? "\n" : "");
		insp_tbl_print(l.tbl, 0);
		if (total > l.shown)
			printf("… %" PRId64 " more (--limit)\n",
			       total - l.shown);
		for (size_t i = 0; i < l.corrupt_n; i++) {
			char first[64];

			snprintf(first, sizeof(first), "corrupt: ");
			insp_wrap(first, l.corrupt[i]);
		}
	}
	*shown = l.shown;
	insp_free_list(l.corrupt, l.corrupt_n);
	cJSON_Delete(l.arr);
	insp_tbl_free(l.tbl);
	return err;
}

/*
 * outbox show
 */

typedef struct ob_match {
	const char *id;
	size_t id_len;
	char first[TBX_UUID_LEN + 1]; /* the first row id matched */
	int exact, others;	      /* exact: a row is id; others: prefix
				       * matches of another id */
} ob_match_t;

static int ob_matched(void *opaque, const char *grp, const tbx__obatch_t *row)
{
	ob_match_t *m = opaque;

	(void)grp;
	if (strcmp(row->row_id, m->id) == 0) {
		m->exact = 1;
		tbx__strlcpy(m->first, row->row_id, sizeof(m->first));
	} else if (strncmp(row->row_id, m->id, m->id_len) == 0) {
		if (!m->first[0])
			tbx__strlcpy(m->first, row->row_id, sizeof(m->first));
		else if (strcmp(m->first, row->row_id) != 0)
			m->others = 1;
	}
	return 0;
}

int insp_ob_match(insp_t *in, const tbx__filter_t *f, const char *id,
		  char out[TBX_UUID_LEN + 1], int *exact, int *matches)
{
	ob_match_t m = {id, strlen(id), "", 0, 0};
	tbx__filter_t all = *f;
	int err;

	all.limit = 0;
	all.created_max = INT64_MAX;
	*exact = 0;
	*matches = 0;
	out[0] = '\0';
	err = tbx_outbox_obatch_list(in->store, &all, NULL, ob_matched, &m);
	if (err == TBX_ESCHEMA)
		return TBX_OK;
	if (err)
		return err;
	*exact = m.exact;
	*matches = m.exact ? 1 : m.first[0] ? 1 + m.others : 0;
	tbx__strlcpy(out, m.first, TBX_UUID_LEN + 1);
	return TBX_OK;
}

typedef struct ob_shown {
	insp_t *in;
	const char *id;
	cJSON *arr;
	int shown, err;
} ob_shown_t;

static void ob_print(insp_t *in, const char *grp, const tbx__obatch_t *row,
		     const insp_ob_t *ob)
{
	char when[40], age[32], buf[600];
	tbx__msgs_iter_t it;
	tbx__mfield_t f[TBX__MF_COUNT];
	uint32_t i = 0;

	insp_fmt_time(row->created_ms, when, sizeof(when));
	insp_fmt_age(insp_age(in, row->created_ms), age, sizeof(age));
	insp_kv("batch row", row->row_id, 0);
	insp_kv("group", grp, 2);
	insp_kv("state",
		ob->corrupt ? "corrupt (its columns do not decode: no worker "
			      "can finish it)"
		: row->attempt[0]
		    ? "tokened (tokens assigned: awaits dispatch, or was "
		      "dispatched and awaits D/E)"
		    : "processed (no tokens yet)",
		2);
	if (ob->corrupt)
		insp_kv("corrupt", ob->why, 2);
	insp_kv("attempt", row->attempt[0] ? row->attempt : "-", 2);
	if (row->attempt[0]) {
		snprintf(buf, sizeof(buf), "%" PRId64, row->mint_seq);
		insp_kv("mint seq", buf, 2);
	}
	if (tokfmt_name(row->tokfmt))
		snprintf(buf, sizeof(buf), "%s (%s)", tokfmt_name(row->tokfmt),
			 row->tokfmt == 2 ? "token sets"
					  : "a token per message");
	else
		snprintf(buf, sizeof(buf), "unknown (%d)", row->tokfmt);
	insp_kv("tokens", buf, 2);
	snprintf(buf, sizeof(buf), "%s (%s ago)", when, age);
	insp_kv("created", buf, 2);
	if (row->stuck_ms >= 0) {
		insp_fmt_time(row->stuck_ms, when, sizeof(when));
		insp_fmt_age(insp_age(in, row->stuck_ms), age, sizeof(age));
		snprintf(buf, sizeof(buf),
			 "%s (%s ago), by a worker's recovery pass", when, age);
		insp_kv("stuck", buf, 2);
	}
	snprintf(buf, sizeof(buf), "%" PRId64 " (dispatches refused for good)",
		 row->dispatch_failures);
	insp_kv("failures", buf, 2);
	if (ob->corrupt)
		return;
	snprintf(buf, sizeof(buf), "%" PRIu32, ob->cover.n);
	insp_kv("records", buf, 2);
	for (uint32_t k = 0; k < ob->cover.n; k++) {
		const tbx__cover_ent_t *e = &ob->cover.ent[k];
		char place[320];

		snprintf(place, sizeof(place), "%s [%" PRId32 "] @%" PRId64,
			 e->topic, e->partition, e->offset);
		if (e->ref == TBX__REF_BIT)
			snprintf(buf, sizeof(buf),
				 "%s, %s, id %s, token set %s bit %u (minted "
				 "for partition %" PRId32 ")",
				 place, cover_kind(e->kind, 0), e->msg_id,
				 e->ref_id, (unsigned)e->index, e->set_part);
		else if (e->ref_id[0])
			snprintf(buf, sizeof(buf), "%s, %s, id %s, token %s",
				 place, cover_kind(e->kind, 0), e->msg_id,
				 e->ref_id);
		else
			snprintf(buf, sizeof(buf), "%s, %s, id %s, no token",
				 place, cover_kind(e->kind, 0), e->msg_id);
		snprintf(place, sizeof(place), "%" PRIu32, k + 1);
		insp_kv(place, buf, 4);
	}
	snprintf(buf, sizeof(buf), "%" PRIu32, ob->nwire);
	insp_kv("messages", buf, 2);
	if (tbx__msgs_iter_init(&it, row->msgs, row->msgs_len))
		return;
	while (tbx__msgs_iter_next(&it, f) == 1 && i < ob->nwire) {
		const tbx__wire_ent_t *w = &ob->wire[i];
		char s[300];

		printf("\n  message %" PRIu32 " of %" PRIu32 "\n", i + 1,
		       ob->nwire);
		field_str(s, sizeof(s), &f[TBX__MF_ID]);
		insp_kv("id", s, 4);
		field_str(s, sizeof(s), &f[TBX__MF_TOKEN]);
		insp_kv("token", s[0] ? s : "-", 4);
		field_str(s, sizeof(s), &f[TBX__MF_TOPIC]);
		insp_kv("topic", s, 4);
		if (w->partition >= 0)
			snprintf(s, sizeof(s), "%" PRId32, w->partition);
		else
			snprintf(s, sizeof(s), "- (the partitioner's)");
		insp_kv("partition", s, 4);
		field_str(s, sizeof(s), &f[TBX__MF_TYPE]);
		insp_kv("type", s, 4);
		snprintf(s, sizeof(s), "%" PRIu32, w->cover + 1);
		insp_kv("record", s, 4);
		insp_bytes_print("key", f[TBX__MF_KEY].p, f[TBX__MF_KEY].len, 4,
				 0, "(none)");
		insp_bytes_print("payload", f[TBX__MF_PAYLOAD].p,
				 f[TBX__MF_PAYLOAD].len, 4, 0, "(null)");
		insp_hdrs_print(f[TBX__MF_HEADERS].p, f[TBX__MF_HEADERS].len);
		i++;
	}
}

static int ob_show_one(void *opaque, const char *grp, const tbx__obatch_t *row)
{
	ob_shown_t *s = opaque;
	insp_ob_t ob;

	if (strcmp(row->row_id, s->id) != 0)
		return 0;
	if ((s->err = insp_ob_decode(row, &ob))) {
		insp_ob_free(&ob);
		return 1;
	}
	if (s->arr) {
		cJSON *o = ob_json(s->in, grp, row, &ob, 1);
		cJSON_AddItemToArray(s->arr, o);
	} else {
		if (s->shown)
			printf("\n");
		ob_print(s->in, grp, row, &ob);
	}
	s->shown++;
	insp_ob_free(&ob);
	return 0;
}

int insp_ob_show(insp_t *in, const tbx__filter_t *f, const char *id, cJSON *arr,
		 int already, int *shown)
{
	ob_shown_t s = {in, id, arr, already, TBX_OK};
	tbx__filter_t all = *f;
	int err;

	all.limit = 0;
	all.created_max = INT64_MAX;
	err = tbx_outbox_obatch_list(in->store, &all, NULL, ob_show_one, &s);
	*shown = s.shown - already;
	if (err == TBX_ESCHEMA)
		return TBX_OK;
	return err ? err : s.err;
}

/*
 * status
 */

static int ob_summed(void *opaque, const char *grp, const tbx__obatch_t *row)
{
	insp_ob_sum_t *sum = opaque;
	insp_ob_grp_t *g = NULL;
	insp_ob_t ob;

	if ((sum->err = insp_ob_decode(row, &ob))) {
		insp_ob_free(&ob);
		return 1;
	}
	if (sum->n && strcmp(sum->g[sum->n - 1].grp, grp) == 0)
		g = &sum->g[sum->n - 1];
	for (size_t i = 0; !g && i < sum->n; i++)
		if (strcmp(sum->g[i].grp, grp) == 0)
			g = &sum->g[i];
	if (!g) {
		insp_ob_grp_t *grown =
		    realloc(sum->g, (sum->n + 1) * sizeof(*grown));
		if (!grown) {
			insp_ob_free(&ob);
			sum->err = TBX_ENOMEM;
			return 1;
		}
		sum->g = grown;
		g = &grown[sum->n];
		memset(g, 0, sizeof(*g));
		if (!(g->grp = tbx__strdup(grp))) {
			insp_ob_free(&ob);
			sum->err = TBX_ENOMEM;
			return 1;
		}
		g->oldest_ms = row->created_ms;
		sum->n++;
	}
	g->rows++;
	g->tokened += row->attempt[0] != '\0';
	g->older += row->created_ms <= sum->stuck_before;
	g->marked += row->stuck_ms >= 0;
	g->corrupt += ob.corrupt;
	if (row->created_ms < g->oldest_ms)
		g->oldest_ms = row->created_ms;
	if (ob.corrupt && sum->corrupt_json)
		insp_jobj(sum->corrupt_json, "group:s row_id:s reason:s", grp,
			  row->row_id, ob.why);
	insp_ob_free(&ob);
	return 0;
}

static int by_grp(const void *a, const void *b)
{
	return strcmp(((const insp_ob_grp_t *)a)->grp,
		      ((const insp_ob_grp_t *)b)->grp);
}

int insp_ob_summary(insp_t *in, int64_t stuck_before, insp_ob_sum_t *sum)
{
	tbx__filter_t all = TBX_FILTER_ALL;
	int err;

	memset(sum, 0, sizeof(*sum));
	sum->stuck_before = stuck_before;
	if (!(sum->corrupt_json = cJSON_CreateArray()))
		return TBX_ENOMEM;
	err = tbx_outbox_obatch_list(in->store, &all, NULL, ob_summed, sum);
	if (err == TBX_ESCHEMA) {
		sum->none = 1;
		return TBX_OK;
	}
	if (!err)
		err = sum->err;
	if (!err && sum->n)
		qsort(sum->g, sum->n, sizeof(sum->g[0]), by_grp);
	return err;
}

void insp_ob_summary_free(insp_ob_sum_t *sum)
{
	for (size_t i = 0; i < sum->n; i++)
		free(sum->g[i].grp);
	free(sum->g);
	cJSON_Delete(sum->corrupt_json);
	memset(sum, 0, sizeof(*sum));
}
