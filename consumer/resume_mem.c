/*
 * The resume check's memory (consumer/resume_mem.h; docs/batched-tokens.md,
 * "The resume check").  A group's pending rows are a few per worker
 * (its own until their E, and what an earlier owner left), so rows are
 * a plain array searched in order, each through its cover's index; the
 * mgens, one per partition the worker has loaded, are kept sorted by
 * (topic, partition) for the check's look-up per record.
 */
#include "consumer/resume_mem.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/str.h"

/* A partition's mgen.  Absent from the array: unknown. */
typedef struct mgen {
	char *topic;
	int32_t part;
	int64_t gen;
} mgen_t;

struct tbx__resume_mem {
	char *grp;
	tbx__resume_row_t **rows;
	size_t nrows, caprows;
	mgen_t *gens; /* sorted by (topic, part) */
	size_t ngens, capgens;
	tbx__resume_stats_t stats;
};

static int mgen_cmp(const char *topic, int32_t part, const mgen_t *g)
{
	int c = strcmp(topic, g->topic);

	if (c)
		return c;
	return part < g->part ? -1 : part > g->part;
}

/* The index of (topic, part) in m->gens, or where it would go
 * (*found 0). */
static size_t mgen_find(const tbx__resume_mem_t *m, const char *topic,
			int32_t part, int *found)
{
	size_t lo = 0, hi = m->ngens;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = mgen_cmp(topic, part, &m->gens[mid]);

		if (!c) {
			*found = 1;
			return mid;
		}
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	*found = 0;
	return lo;
}

static int mgen_set(tbx__resume_mem_t *m, const char *topic, int32_t part,
		    int64_t gen)
{
	int found;
	size_t at = mgen_find(m, topic, part, &found);
	char *t;

	if (found) {
		m->gens[at].gen = gen;
		return TBX_OK;
	}
	if (m->ngens == m->capgens) {
		size_t cap = m->capgens ? 2 * m->capgens : 16;
		mgen_t *g = realloc(m->gens, cap * sizeof(*g));

		if (!g)
			return TBX_ENOMEM;
		m->gens = g;
		m->capgens = cap;
	}
	if (!(t = tbx__strdup(topic)))
		return TBX_ENOMEM;
	memmove(&m->gens[at + 1], &m->gens[at],
		(m->ngens - at) * sizeof(*m->gens));
	m->gens[at] = (mgen_t){t, part, gen};
	m->ngens++;
	return TBX_OK;
}

static void mgen_unset(tbx__resume_mem_t *m, const char *topic, int32_t part)
{
	int found;
	size_t at = mgen_find(m, topic, part, &found);

	if (!found)
		return;
	free(m->gens[at].topic);
	memmove(&m->gens[at], &m->gens[at + 1],
		(m->ngens - at - 1) * sizeof(*m->gens));
	m->ngens--;
}

static void row_free(tbx__resume_row_t *r)
{
	if (!r)
		return;
	tbx__cover_free(&r->cover);
	free(r);
}

static void rows_clear(tbx__resume_mem_t *m)
{
	for (size_t i = 0; i < m->nrows; i++)
		row_free(m->rows[i]);
	m->nrows = 0;
}

static void forget_all(tbx__resume_mem_t *m)
{
	rows_clear(m);
	for (size_t i = 0; i < m->ngens; i++)
		free(m->gens[i].topic);
	m->ngens = 0;
}

int tbx__resume_mem_new(const char *grp, tbx__resume_mem_t **out)
{
	tbx__resume_mem_t *m;

	*out = NULL;
	if (!grp || !*grp)
		return TBX_EINVAL;
	if (!(m = calloc(1, sizeof(*m))))
		return TBX_ENOMEM;
	if (!(m->grp = tbx__strdup(grp))) {
		free(m);
		return TBX_ENOMEM;
	}
	*out = m;
	return TBX_OK;
}

void tbx__resume_mem_destroy(tbx__resume_mem_t *m)
{
	if (!m)
		return;
	forget_all(m);
	free(m->rows);
	free(m->gens);
	free(m->grp);
	free(m);
}

/* A row of memory with @p src's id, attempt and mint_seq, no cover yet;
 * NULL when out of memory. */
static tbx__resume_row_t *row_new(const tbx__obatch_t *src)
{
	tbx__resume_row_t *r = calloc(1, sizeof(*r));

	if (r) {
		memcpy(r->row_id, src->row_id, sizeof(r->row_id));
		memcpy(r->attempt, src->attempt, sizeof(r->attempt));
		r->mint_seq = src->mint_seq;
	}
	return r;
}

/* A row copied out of the store's (or A's) columns, its cover decoded
 * again from the copy by outbox/batchrow.c: the one decoder. */
static int row_make(const char *grp, const tbx__obatch_t *src,
		    tbx__resume_row_t **out)
{
	tbx__resume_row_t *r = row_new(src);
	char err[200];
	int rc;

	*out = NULL;
	if (!r)
		return TBX_ENOMEM;
	if ((rc = tbx__cover_decode(src->cover, src->cover_len, &r->cover, err,
				    sizeof(err)))) {
		if (rc == TBX_ECORRUPT)
			tbx__log(TBX_LOG_ERR,
				 "group %s: batch row %s: %s: not kept in the "
				 "resume check's memory",
				 grp, src->row_id, err);
		row_free(r);
		return rc;
	}
	*out = r;
	return TBX_OK;
}

static int rows_push(tbx__resume_mem_t *m, tbx__resume_row_t *r)
{
	if (m->nrows == m->caprows) {
		size_t cap = m->caprows ? 2 * m->caprows : 8;
		tbx__resume_row_t **p = realloc(m->rows, cap * sizeof(*p));

		if (!p)
			return TBX_ENOMEM;
		m->rows = p;
		m->caprows = cap;
	}
	m->rows[m->nrows++] = r;
	return TBX_OK;
}

static int has_mgen(const tbx__resume_mem_t *m, const char *topic, int32_t part)
{
	int found;

	mgen_find(m, topic, part, &found);
	return found;
}

/* Does @p cover cover a record of a partition memory keeps an mgen for
 * (where it arrived, or its set's partition)? */
static int covers_known(const tbx__resume_mem_t *m, const tbx__cover_t *cover)
{
	for (uint32_t i = 0; i < cover->n; i++) {
		const tbx__cover_ent_t *e = &cover->ent[i];

		if (has_mgen(m, e->topic, e->partition) ||
		    (e->ref == TBX__REF_BIT &&
		     has_mgen(m, e->topic, e->set_part)))
			return 1;
	}
	return 0;
}

typedef struct load_ctx {
	tbx__resume_mem_t *m;
	int err;
} load_ctx_t;

static int on_row(void *opaque, const tbx__obatch_t *row,
		  const tbx__cover_t *cover)
{
	load_ctx_t *ctx = opaque;
	tbx__resume_row_t *r;

	if (!covers_known(ctx->m, cover))
		return 0;
	if ((ctx->err = row_make(ctx->m->grp, row, &r)))
		return 1;
	if ((ctx->err = rows_push(ctx->m, r))) {
		row_free(r);
		return 1;
	}
	return 0;
}

static void load_failed(tbx__resume_mem_t *m, int err)
{
	forget_all(m);
	m->stats.load_failures++;
	tbx__log(TBX_LOG_WARNING,
		 "group %s: the resume check's memory could not be loaded "
		 "(%s): dropped, every partition reloads at its next batch",
		 m->grp, tbx_err_name(err));
}

/* Loads the group's rows covering a partition with an mgen, once the
 * mgens of @p parts are @p gens.  On failure memory is dropped whole. */
static int reload(tbx__resume_mem_t *m, tbx_outbox_t *store, const char *topic,
		  const int32_t *parts, size_t n, const int64_t *gens)
{
	load_ctx_t ctx = {m, TBX_OK};
	int err = TBX_OK;

	m->stats.resume_reloads++;
	rows_clear(m);
	for (size_t i = 0; i < n && !err; i++)
		err = mgen_set(m, topic, parts[i], gens[i]);
	if (!err)
		err = tbx_outbox_obatch_load(store, m->grp, on_row, &ctx);
	if (!err)
		err = ctx.err;
	if (err)
		load_failed(m, err);
	return err;
}

int tbx__resume_mem_sync_gens(tbx__resume_mem_t *m, tbx_outbox_t *store,
			      const char *topic, const int32_t *parts, size_t n,
			      const int64_t *gens, int *reloaded)
{
	int stale = 0, err = TBX_OK;

	if (reloaded)
		*reloaded = 0;
	if (!m || !store || !topic || (n && (!parts || !gens)))
		return TBX_EINVAL;
	for (size_t i = 0; i < n && !stale; i++) {
		int found;
		size_t at = mgen_find(m, topic, parts[i], &found);

		stale = !found || m->gens[at].gen != gens[i];
	}
	if (stale) {
		err = reload(m, store, topic, parts, n, gens);
		if (!err && reloaded)
			*reloaded = 1;
	}
	return err;
}

int tbx__resume_mem_sync(tbx__resume_mem_t *m, tbx_outbox_t *store,
			 const char *topic, const int32_t *parts, size_t n,
			 int64_t *gens, int *reloaded)
{
	int64_t *read = gens;
	int err;

	if (reloaded)
		*reloaded = 0;
	if (!m || !store || !topic || (n && !parts))
		return TBX_EINVAL;
	if (!n)
		return TBX_OK;
	if (!read && !(read = malloc(n * sizeof(*read))))
		return TBX_ENOMEM;
	if ((err = tbx_outbox_gens_get(store, m->grp, topic, parts, n, read)))
		load_failed(m, err);
	else
		err = tbx__resume_mem_sync_gens(m, store, topic, parts, n, read,
						reloaded);
	if (read != gens)
		free(read);
	return err;
}

int32_t tbx__resume_key_part(const tbx__resume_key_t *key)
{
	return key->set_id ? key->set_part : key->partition;
}

tbx__resume_ans_t tbx__resume_mem_check(const tbx__resume_mem_t *m,
					const tbx__resume_key_t *key,
					int64_t gen,
					const tbx__resume_row_t **row,
					uint32_t *entry)
{
	int found;
	size_t at = mgen_find(m, key->topic, tbx__resume_key_part(key), &found);

	if (!found || m->gens[at].gen != gen)
		return TBX__RESUME_RELOAD;
	for (int by_off = !key->set_id; by_off < 2; by_off++)
		for (size_t i = 0; i < m->nrows; i++) {
			const tbx__cover_t *c = &m->rows[i]->cover;
			int64_t e = by_off
					? tbx__cover_find_offset(c, key->topic,
								 key->partition,
								 key->offset)
					: tbx__cover_find_bit(c, key->set_id,
							      key->index);

			if (e < 0)
				continue;
			if (row)
				*row = m->rows[i];
			if (entry)
				*entry = (uint32_t)e;
			return TBX__RESUME_COVERED;
		}
	return TBX__RESUME_NOT_COVERED;
}

static int add_row(tbx__resume_mem_t *m, tbx__resume_row_t *r);

int tbx__resume_mem_add(tbx__resume_mem_t *m, const tbx__obatch_t *row)
{
	tbx__resume_row_t *r;
	int err;

	if (!m || !row)
		return TBX_EINVAL;
	if ((err = row_make(m->grp, row, &r)))
		return err;
	return add_row(m, r);
}

int tbx__resume_mem_add_cover(tbx__resume_mem_t *m, const tbx__obatch_t *row,
			      tbx__cover_t *cover)
{
	tbx__resume_row_t *r;

	if (!m || !row || !cover || !cover->n) {
		if (cover)
			tbx__cover_free(cover);
		return TBX_EINVAL;
	}
	if (!(r = row_new(row))) {
		tbx__cover_free(cover);
		return TBX_ENOMEM;
	}
	r->cover = *cover; /* moved */
	memset(cover, 0, sizeof(*cover));
	return add_row(m, r);
}

/* Row @p r (owned) enters memory, replacing one of its id. */
static int add_row(tbx__resume_mem_t *m, tbx__resume_row_t *r)
{
	int err;

	for (size_t i = 0; i < m->nrows; i++)
		if (!strcmp(m->rows[i]->row_id, r->row_id)) {
			row_free(m->rows[i]);
			m->rows[i] = r;
			return TBX_OK;
		}
	if ((err = rows_push(m, r))) {
		/* A row memory cannot hold: trust nothing rather than
		 * miss it. */
		row_free(r);
		load_failed(m, err);
	}
	return err;
}

void tbx__resume_mem_bumped(tbx__resume_mem_t *m, const char *topic,
			    const int32_t *parts, size_t n, const int64_t *gens)
{
	for (size_t i = 0; i < n; i++) {
		int found;
		size_t at = mgen_find(m, topic, parts[i], &found);

		if (found && m->gens[at].gen == gens[i] - 1)
			m->gens[at].gen = gens[i];
		else if (found)
			mgen_unset(m, topic, parts[i]);
	}
}

void tbx__resume_mem_forget(tbx__resume_mem_t *m, const char *const *ids,
			    size_t n)
{
	for (size_t k = 0; k < n; k++)
		for (size_t i = 0; i < m->nrows; i++) {
			if (strcmp(m->rows[i]->row_id, ids[k]))
				continue;
			row_free(m->rows[i]);
			memmove(&m->rows[i], &m->rows[i + 1],
				(m->nrows - i - 1) * sizeof(*m->rows));
			m->nrows--;
			break;
		}
}

void tbx__resume_mem_drop(tbx__resume_mem_t *m)
{
	forget_all(m);
	m->stats.drops++;
}

void tbx__resume_mem_stats(const tbx__resume_mem_t *m,
			   tbx__resume_stats_t *stats)
{
	*stats = m->stats;
	stats->rows = m->nrows;
	stats->parts = m->ngens;
}
