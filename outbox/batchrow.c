/*
 * The wire and cover columns of a batch row (outbox/batchrow.h), and the
 * index of a decoded cover.
 */
#include "outbox/batchrow.h"

#include <stdlib.h>
#include <string.h>

#include "base/runsort.h"
#include "base/str.h"
#include "outbox/outbox.h"
#include "store/msgs.h"
#include "tokenbox/tokenbox.h"

#define HDR_LEN	     5	/* u8 format, u32 count */
#define WIRE_ENT_LEN 10 /* i32 partition, u16 index, u32 cover */
/* The least an entry takes: kind, a topic and an id of one byte each,
 * partition, offset, ref. */
#define COVER_ENT_MIN 24

struct tbx__cover_bkey {
	const char *id;
	uint32_t index;
	uint32_t ent;
};

struct tbx__cover_okey {
	const char *topic;
	int32_t partition;
	int64_t offset;
	uint32_t ent;
};

void tbx__buf_free(tbx__buf_t *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static int buf_room(tbx__buf_t *b, size_t n)
{
	size_t cap;
	unsigned char *p;

	if (b->cap - b->len >= n)
		return TBX_OK;
	if (SIZE_MAX - b->len < n)
		return TBX_ENOMEM;
	cap = b->cap ? b->cap : 256;
	while (cap - b->len < n)
		cap = cap > SIZE_MAX / 2 ? SIZE_MAX : 2 * cap;
	if (!(p = realloc(b->p, cap)))
		return TBX_ENOMEM;
	b->p = p;
	b->cap = cap;
	return TBX_OK;
}

/* Callers make room first. */
static void put_be(tbx__buf_t *b, uint64_t v, int bytes)
{
	for (int i = bytes - 1; i >= 0; i--)
		b->p[b->len++] = (unsigned char)(v >> (8 * i));
}

static int put_str(tbx__buf_t *b, const char *s)
{
	size_t len = strlen(s);

	if (len > UINT32_MAX - 1)
		return TBX_EINVAL;
	if (buf_room(b, 4 + len))
		return TBX_ENOMEM;
	put_be(b, len, 4);
	memcpy(b->p + b->len, s, len);
	b->len += len;
	return TBX_OK;
}

/* A reader over a blob that trusts none of its lengths. */
typedef struct cur {
	const unsigned char *b;
	size_t len, pos;
} cur_t;

static int get_be(cur_t *c, int bytes, uint64_t *v)
{
	if (c->len - c->pos < (size_t)bytes)
		return -1;
	*v = 0;
	for (int i = 0; i < bytes; i++)
		*v = *v << 8 | c->b[c->pos++];
	return 0;
}

static int get_str(cur_t *c, const unsigned char **p, size_t *len)
{
	uint64_t n;

	if (get_be(c, 4, &n) || c->len - c->pos < n)
		return -1;
	*p = c->b + c->pos;
	*len = (size_t)n;
	c->pos += (size_t)n;
	return 0;
}

/* 1 when @p s is a UUID in the lower-case text tokenbox writes
 * (tbx__is_uuid() without its upper-case digits), in one pass. */
static int uuid_text(const char *s, size_t len)
{
	unsigned bad = 0;

	if (len != TBX_UUID_LEN || s[8] != '-' || s[13] != '-' ||
	    s[18] != '-' || s[23] != '-')
		return 0;
	for (size_t i = 0; i < TBX_UUID_LEN; i++) {
		unsigned c = (unsigned char)s[i];

		if (i == 8 || i == 13 || i == 18 || i == 23)
			continue;
		bad |= !(c - '0' < 10u || c - 'a' < 6u);
	}
	return !bad;
}

/* A message id as the headers accept it: 1 to TBX_MSGID_MAX bytes, no
 * control character. */
static int msg_id_ok(const char *s, size_t len)
{
	if (len == 0 || len > TBX_MSGID_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch < 0x20 || ch == 0x7f)
			return 0;
	}
	return 1;
}

/* 1 when @p e refers to the token or set of @p prev, an entry that
 * passed ent_check(): a set's records follow each other, and its id is
 * then checked once. */
static int ref_same(const tbx__cover_ent_t *e, const tbx__cover_ent_t *prev)
{
	return e->ref != TBX__REF_NONE && prev->ref != TBX__REF_NONE &&
	       strcmp(e->ref_id, prev->ref_id) == 0;
}

/*
 * The rules of one entry, for the encoder (TBX_EINVAL) and the decoder
 * (TBX_ECORRUPT).  The strings are NUL-terminated here.  @p topic_ok: the
 * topic is the previous entry's, checked already; @p ref_ok: so is the
 * token or set id (ref_same()).
 */
static int ent_check(const tbx__cover_ent_t *e, uint32_t i, int code,
		     int topic_ok, int ref_ok, char *err, size_t err_size)
{
	if (e->kind < TBX__COVER_HANDLED || e->kind > TBX__COVER_UNTOKENED)
		return tbx__seterr(err, err_size, code,
				   "cover entry %u: unknown kind %d", i,
				   e->kind);
	if (!topic_ok && (!e->topic || !tbx__topic_valid(e->topic)))
		return tbx__seterr(err, err_size, code,
				   "cover entry %u: not a topic name", i);
	if (e->partition < 0)
		return tbx__seterr(err, err_size, code,
				   "cover entry %u: partition %d below 0", i,
				   e->partition);
	if (e->offset < 0)
		return tbx__seterr(err, err_size, code,
				   "cover entry %u: offset below 0", i);
	if (!e->msg_id || !msg_id_ok(e->msg_id, strlen(e->msg_id)))
		return tbx__seterr(err, err_size, code,
				   "cover entry %u: not a message id (1 to "
				   "%d bytes, no control character)",
				   i, TBX_MSGID_MAX);
	switch (e->ref) {
	case TBX__REF_NONE:
		if (e->ref_id[0])
			return tbx__seterr(err, err_size, code,
					   "cover entry %u: an id without a "
					   "token",
					   i);
		if (e->kind == TBX__COVER_HANDLED)
			return tbx__seterr(
			    err, err_size, code,
			    "cover entry %u: handled without a "
			    "token (kind 2 is handled untokened)",
			    i);
		break;
	case TBX__REF_TOKEN:
	case TBX__REF_BIT:
		if (!ref_ok && !uuid_text(e->ref_id, strlen(e->ref_id)))
			return tbx__seterr(err, err_size, code,
					   "cover entry %u: token id is not "
					   "UUID text",
					   i);
		if (e->kind == TBX__COVER_UNTOKENED)
			return tbx__seterr(err, err_size, code,
					   "cover entry %u: handled untokened "
					   "with a token",
					   i);
		if (e->ref == TBX__REF_BIT && e->set_part < 0)
			return tbx__seterr(err, err_size, code,
					   "cover entry %u: set partition %d "
					   "below 0",
					   i, e->set_part);
		break;
	default:
		return tbx__seterr(err, err_size, code,
				   "cover entry %u: unknown token reference %d",
				   i, e->ref);
	}
	return TBX_OK;
}

int tbx__wire_encode(tbx__buf_t *b, const tbx__wire_ent_t *w, size_t n)
{
	if (n > UINT32_MAX)
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++)
		if (w[i].partition < -1)
			return TBX_EINVAL;
	if (n > (SIZE_MAX - HDR_LEN) / WIRE_ENT_LEN ||
	    buf_room(b, HDR_LEN + n * WIRE_ENT_LEN))
		return TBX_ENOMEM;
	put_be(b, TBX__WIRE_FORMAT, 1);
	put_be(b, n, 4);
	for (size_t i = 0; i < n; i++) {
		put_be(b, (uint32_t)w[i].partition, 4);
		put_be(b, w[i].index, 2);
		put_be(b, w[i].cover, 4);
	}
	return TBX_OK;
}

int tbx__wire_decode(const void *blob, size_t len, uint32_t cover_n,
		     tbx__wire_ent_t **out, uint32_t *n, char *err,
		     size_t err_size)
{
	cur_t c = {blob, len, 0};
	tbx__wire_ent_t *w;
	uint64_t v = 0, count = 0;

	*out = NULL;
	*n = 0;
	if (!blob || len < HDR_LEN)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "wire: %zu bytes, shorter than its header",
				   blob ? len : 0);
	get_be(&c, 1, &v);
	if (v != TBX__WIRE_FORMAT)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "wire: unknown format %u", (unsigned)v);
	get_be(&c, 4, &count);
	if ((len - HDR_LEN) % WIRE_ENT_LEN ||
	    (len - HDR_LEN) / WIRE_ENT_LEN != count)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "wire: %zu bytes for %u messages (%d each)",
				   len - HDR_LEN, (unsigned)count,
				   WIRE_ENT_LEN);
	if (count == 0)
		return TBX_OK;
	if (!(w = malloc(count * sizeof(*w))))
		return TBX_ENOMEM;
	for (uint32_t i = 0; i < count; i++) {
		uint64_t part = 0, index = 0, cover = 0;

		get_be(&c, 4, &part);
		get_be(&c, 2, &index);
		get_be(&c, 4, &cover);
		w[i].partition = (int32_t)(uint32_t)part;
		w[i].index = (uint16_t)index;
		w[i].cover = (uint32_t)cover;
		if (w[i].partition < -1 || cover >= cover_n) {
			int32_t bad = w[i].partition;

			free(w);
			if (bad < -1)
				return tbx__seterr(err, err_size, TBX_ECORRUPT,
						   "wire entry %u: partition "
						   "%d below -1",
						   i, (int)bad);
			return tbx__seterr(err, err_size, TBX_ECORRUPT,
					   "wire entry %u: cover entry %u of "
					   "%u",
					   i, (unsigned)cover,
					   (unsigned)cover_n);
		}
	}
	*out = w;
	*n = (uint32_t)count;
	return TBX_OK;
}

int tbx__cover_encode(tbx__buf_t *b, const tbx__cover_ent_t *e, size_t n,
		      char *err, size_t err_size)
{
	int rc;

	if (n == 0)
		return tbx__seterr(err, err_size, TBX_EINVAL,
				   "cover: no record covered");
	if (n > UINT32_MAX)
		return tbx__seterr(err, err_size, TBX_EINVAL,
				   "cover: %zu records, too many", n);
	if (buf_room(b, HDR_LEN))
		return TBX_ENOMEM;
	put_be(b, TBX__COVER_FORMAT, 1);
	put_be(b, n, 4);
	for (size_t i = 0; i < n; i++) {
		int stray;

		/* A topic repeated from the entry before passed already. */
		int topic_ok = i && e[i].topic && e[i - 1].topic &&
			       (e[i].topic == e[i - 1].topic ||
				strcmp(e[i].topic, e[i - 1].topic) == 0);

		if ((rc = ent_check(e + i, (uint32_t)i, TBX_EINVAL, topic_ok,
				    i && ref_same(e + i, e + i - 1), err,
				    err_size)))
			return rc;
		stray =
		    e[i].ref == TBX__REF_BIT && e[i].set_part != e[i].partition;
		if (buf_room(b, 1))
			return TBX_ENOMEM;
		put_be(b, (uint64_t)e[i].kind, 1);
		if ((rc = put_str(b, e[i].topic)))
			return rc;
		if (buf_room(b, 12))
			return TBX_ENOMEM;
		put_be(b, (uint32_t)e[i].partition, 4);
		put_be(b, (uint64_t)e[i].offset, 8);
		if ((rc = put_str(b, e[i].msg_id)) || buf_room(b, 1))
			return rc ? rc : TBX_ENOMEM;
		put_be(b, stray ? 3 : (uint64_t)e[i].ref, 1);
		if (e[i].ref == TBX__REF_NONE)
			continue;
		if ((rc = put_str(b, e[i].ref_id)))
			return rc;
		if (e[i].ref == TBX__REF_TOKEN)
			continue;
		if (buf_room(b, 6))
			return TBX_ENOMEM;
		put_be(b, e[i].index, 2);
		if (stray)
			put_be(b, (uint32_t)e[i].set_part, 4);
	}
	return TBX_OK;
}

/* Copies @p len bytes to the arena as a NUL-terminated string. */
static const char *arena_str(char **arena, const unsigned char *p, size_t len)
{
	char *s = *arena;

	memcpy(s, p, len);
	s[len] = '\0';
	*arena += len + 1;
	return s;
}

static int bkey_cmp(const struct tbx__cover_bkey *x,
		    const struct tbx__cover_bkey *y)
{
	int c = strcmp(x->id, y->id);

	if (c)
		return c;
	if (x->index != y->index)
		return x->index < y->index ? -1 : 1;
	return (x->ent > y->ent) - (x->ent < y->ent);
}

/* A cover's entries share one copy of a topic they repeat (the
 * decoder's and tbx__cover_from()'s arena): the same pointer is the same
 * topic. */
static int okey_cmp(const struct tbx__cover_okey *x,
		    const struct tbx__cover_okey *y)
{
	int c = x->topic == y->topic ? 0 : strcmp(x->topic, y->topic);

	if (c)
		return c;
	if (x->partition != y->partition)
		return x->partition < y->partition ? -1 : 1;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return (x->ent > y->ent) - (x->ent < y->ent);
}

/* A cover's entries come in the order their records were polled: a run
 * per partition, and per incoming set, so a batch takes a few passes of
 * TBX__RUN_SORT where qsort() takes log2(n).  Every key differs (the
 * entry's index is the last field): the order is the one qsort() gave. */
_Static_assert(sizeof(struct tbx__cover_bkey) <= sizeof(struct tbx__cover_okey),
	       "cover_index() sorts either key in one buffer");

TBX__RUN_SORT(sort_okeys, struct tbx__cover_okey, okey_cmp)
TBX__RUN_SORT(sort_bkeys, struct tbx__cover_bkey, bkey_cmp)

static int cover_index(tbx__cover_t *c)
{
	struct tbx__cover_okey *tmp;

	c->nbit = 0;
	if (!(c->by_off = malloc(c->n * sizeof(*c->by_off))) ||
	    !(c->by_bit = malloc(c->n * sizeof(*c->by_bit))) ||
	    !(tmp = malloc(c->n * sizeof(*tmp))))
		return TBX_ENOMEM;
	for (uint32_t i = 0; i < c->n; i++) {
		const tbx__cover_ent_t *e = &c->ent[i];

		c->by_off[i] = (struct tbx__cover_okey){e->topic, e->partition,
							e->offset, i};
		if (e->ref == TBX__REF_BIT)
			c->by_bit[c->nbit++] =
			    (struct tbx__cover_bkey){e->ref_id, e->index, i};
	}
	/* tmp has room for either key (an okey is the larger). */
	sort_okeys(c->by_off, tmp, c->n);
	sort_bkeys(c->by_bit, (struct tbx__cover_bkey *)(void *)tmp, c->nbit);
	free(tmp);
	return TBX_OK;
}

static int cover_entry(cur_t *cur, uint32_t i, tbx__cover_ent_t *e,
		       const tbx__cover_ent_t *prev, char **arena, char *err,
		       size_t err_size)
{
	const unsigned char *p;
	size_t len;
	uint64_t v;

	if (get_be(cur, 1, &v))
		goto short_;
	e->kind = (int)v;
	if (get_str(cur, &p, &len))
		goto short_;
	if (len == 0 || len > TBX_TOPIC_MAX || memchr(p, '\0', len))
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "cover entry %u: not a topic name", i);
	/* The previous entry's topic again: its copy (okey_cmp()). */
	if (prev && strncmp(prev->topic, (const char *)p, len) == 0 &&
	    prev->topic[len] == '\0')
		e->topic = prev->topic;
	else
		e->topic = arena_str(arena, p, len);
	if (get_be(cur, 4, &v))
		goto short_;
	e->partition = (int32_t)(uint32_t)v;
	if (get_be(cur, 8, &v))
		goto short_;
	e->offset = (int64_t)v;
	if (get_str(cur, &p, &len))
		goto short_;
	if (!msg_id_ok((const char *)p, len))
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "cover entry %u: not a message id (1 to "
				   "%d bytes, no control character)",
				   i, TBX_MSGID_MAX);
	e->msg_id = arena_str(arena, p, len);
	if (get_be(cur, 1, &v))
		goto short_;
	e->ref = v == 3 ? TBX__REF_BIT : (int)v;
	e->set_part = e->partition;
	if (v == TBX__REF_TOKEN || v == TBX__REF_BIT || v == 3) {
		if (get_str(cur, &p, &len))
			goto short_;
		if (!uuid_text((const char *)p, len))
			return tbx__seterr(err, err_size, TBX_ECORRUPT,
					   "cover entry %u: token id is not "
					   "UUID text",
					   i);
		memcpy(e->ref_id, p, len);
		e->ref_id[len] = '\0';
	}
	if (v == TBX__REF_BIT || v == 3) {
		uint64_t index;

		if (get_be(cur, 2, &index))
			goto short_;
		e->index = (uint16_t)index;
	}
	if (v == 3) {
		uint64_t sp;

		if (get_be(cur, 4, &sp))
			goto short_;
		e->set_part = (int32_t)(uint32_t)sp;
		if (e->set_part == e->partition)
			return tbx__seterr(err, err_size, TBX_ECORRUPT,
					   "cover entry %u: a stray reference "
					   "to the record's own partition",
					   i);
	}
	return ent_check(e, i, TBX_ECORRUPT, prev && e->topic == prev->topic,
			 prev && ref_same(e, prev), err, err_size);
short_:
	return tbx__seterr(err, err_size, TBX_ECORRUPT,
			   "cover entry %u: runs past the end of the column",
			   i);
}

int tbx__cover_decode(const void *blob, size_t len, tbx__cover_t *c, char *err,
		      size_t err_size)
{
	cur_t cur = {blob, len, 0};
	uint64_t v = 0, count = 0;
	char *arena;
	int rc;

	memset(c, 0, sizeof(*c));
	if (!blob || len < HDR_LEN)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "cover: %zu bytes, shorter than its header",
				   blob ? len : 0);
	get_be(&cur, 1, &v);
	if (v != TBX__COVER_FORMAT)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "cover: unknown format %u", (unsigned)v);
	get_be(&cur, 4, &count);
	if (count == 0)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "cover: no record covered");
	/* Bounded by the bytes there before anything is allocated. */
	if (count > (len - HDR_LEN) / COVER_ENT_MIN)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "cover: %u records announced in %zu bytes",
				   (unsigned)count, len - HDR_LEN);
	if (!(c->ent = calloc(count, sizeof(*c->ent))) ||
	    !(c->strs = malloc(len + 2 * count)))
		return TBX_ENOMEM;
	c->n = (uint32_t)count;
	arena = c->strs;
	for (uint32_t i = 0; i < c->n; i++)
		if ((rc = cover_entry(&cur, i, &c->ent[i],
				      i ? &c->ent[i - 1] : NULL, &arena, err,
				      err_size)))
			return rc;
	if (cur.pos != len)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "cover: %zu bytes trail its %u records",
				   len - cur.pos, c->n);
	return cover_index(c);
}

int tbx__cover_from(tbx__cover_t *c, const tbx__cover_ent_t *e, size_t n)
{
	size_t room = 0;
	char *arena;

	memset(c, 0, sizeof(*c));
	if (n == 0 || n > UINT32_MAX)
		return TBX_EINVAL;
	for (size_t i = 0; i < n; i++)
		room += strlen(e[i].topic) + strlen(e[i].msg_id) + 2;
	if (!(c->ent = malloc(n * sizeof(*c->ent))) ||
	    !(c->strs = malloc(room)))
		return TBX_ENOMEM;
	c->n = (uint32_t)n;
	arena = c->strs;
	for (size_t i = 0; i < n; i++) {
		tbx__cover_ent_t *d = &c->ent[i];

		*d = e[i];
		if (i && strcmp(e[i].topic, e[i - 1].topic) == 0)
			d->topic = c->ent[i - 1].topic;
		else
			d->topic =
			    arena_str(&arena, (const unsigned char *)e[i].topic,
				      strlen(e[i].topic));
		d->msg_id =
		    arena_str(&arena, (const unsigned char *)e[i].msg_id,
			      strlen(e[i].msg_id));
		/* As the decoder has them: set_part is partition unless the
		 * entry is a set's bit. */
		if (d->ref != TBX__REF_BIT)
			d->set_part = d->partition;
		if (d->ref == TBX__REF_NONE || d->ref == TBX__REF_TOKEN)
			d->index = 0;
	}
	return cover_index(c);
}

void tbx__cover_free(tbx__cover_t *c)
{
	free(c->ent);
	free(c->strs);
	free(c->by_bit);
	free(c->by_off);
	memset(c, 0, sizeof(*c));
}

int64_t tbx__cover_find_bit(const tbx__cover_t *c, const char *set_id,
			    uint16_t index)
{
	struct tbx__cover_bkey key = {set_id, index, 0};
	size_t lo = 0, hi = c->nbit;

	/* The first key not below (set_id, index, 0). */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (bkey_cmp(&c->by_bit[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < c->nbit && c->by_bit[lo].index == index &&
	    strcmp(c->by_bit[lo].id, set_id) == 0)
		return c->by_bit[lo].ent;
	return -1;
}

int64_t tbx__cover_find_offset(const tbx__cover_t *c, const char *topic,
			       int32_t partition, int64_t offset)
{
	struct tbx__cover_okey key = {topic, partition, offset, 0};
	size_t lo = 0, hi = c->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (okey_cmp(&c->by_off[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < c->n && c->by_off[lo].partition == partition &&
	    c->by_off[lo].offset == offset &&
	    strcmp(c->by_off[lo].topic, topic) == 0)
		return c->by_off[lo].ent;
	return -1;
}

/*
 * A batch row's columns against each other, for every backend
 * (outbox/outbox.h).
 */

/* tbx__obatch_check() of the row's columns but its cover, against the
 * decoded @p c. */
static int check_decoded(const tbx__obatch_t *row, const tbx__cover_t *c,
			 char *err, size_t err_size)
{
	tbx__msgs_iter_t it;
	tbx__mfield_t f[TBX__MF_COUNT];
	tbx__wire_ent_t *w = NULL;
	uint32_t nw = 0, nm = 0;
	int rc, has_attempt = row->attempt[0] != '\0';

	if ((rc = tbx__wire_decode(row->wire, row->wire_len, c->n, &w, &nw, err,
				   err_size)))
		return rc;
	free(w);
	if (tbx__msgs_iter_init(&it, row->msgs, row->msgs_len))
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "msgs: malformed header");
	while ((rc = tbx__msgs_iter_next(&it, f)) == 1) {
		if (!f[TBX__MF_TOKEN].p != !has_attempt)
			return tbx__seterr(err, err_size, TBX_ECORRUPT,
					   "msgs: message %u %s a token", nm,
					   has_attempt ? "without" : "with");
		nm++;
	}
	if (rc < 0)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "msgs: message %u runs past the column, or "
				   "bytes trail",
				   nm);
	if (nm != nw)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "wire: %u entries for %u messages", nw, nm);
	if (row->tokfmt != 1 && row->tokfmt != 2)
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "unknown token format %d", row->tokfmt);
	if (!tbx__is_uuid(row->row_id, strlen(row->row_id)) ||
	    (has_attempt && !tbx__is_uuid(row->attempt, strlen(row->attempt))))
		return tbx__seterr(err, err_size, TBX_ECORRUPT,
				   "row id or attempt is not UUID text");
	return TBX_OK;
}

int tbx__obatch_check(const tbx__obatch_t *row, tbx__cover_t *c, char *err,
		      size_t err_size)
{
	int rc;

	if ((rc = tbx__cover_decode(row->cover, row->cover_len, c, err,
				    err_size)))
		return rc;
	return check_decoded(row, c, err, err_size);
}

int tbx__obatch_check_insert(const tbx__obatch_t *row, tbx__cover_t *own,
			     const tbx__cover_t **cover, char *err,
			     size_t err_size)
{
	*cover = row->cover_dec ? row->cover_dec : own;
	if (row->cover_dec)
		return check_decoded(row, row->cover_dec, err, err_size);
	return tbx__obatch_check(row, own, err, err_size);
}

int tbx__obatch_attempt_check(const char *attempt, int64_t mint_seq,
			      const void *msgs, size_t msgs_len,
			      const void *wire, size_t wire_len, char *err,
			      size_t err_size)
{
	tbx__wire_ent_t *w = NULL;
	tbx__msgs_iter_t it;
	tbx__mfield_t f[TBX__MF_COUNT];
	uint32_t nw = 0, nm = 0;
	int r;

	if (!tbx__is_uuid(attempt, strlen(attempt)) || mint_seq == 0)
		return tbx__seterr(err, err_size, TBX_EINVAL,
				   "an attempt needs UUID text and a sequence");
	/* The cover is not at hand: its count is checked when the row is
	 * loaded. */
	if (tbx__wire_decode(wire, wire_len, UINT32_MAX, &w, &nw, err,
			     err_size))
		return TBX_EINVAL;
	free(w);
	if (tbx__msgs_iter_init(&it, msgs, msgs_len))
		return tbx__seterr(err, err_size, TBX_EINVAL,
				   "msgs: malformed header");
	while ((r = tbx__msgs_iter_next(&it, f)) == 1) {
		if (!f[TBX__MF_TOKEN].p)
			return tbx__seterr(err, err_size, TBX_EINVAL,
					   "msgs: message %u without a token",
					   nm);
		nm++;
	}
	if (r < 0 || nm != nw)
		return tbx__seterr(err, err_size, TBX_EINVAL,
				   "msgs: %u messages, or bytes trail, for %u "
				   "wire entries",
				   nm, nw);
	return TBX_OK;
}

int tbx__parts_sorted(const char *const *topics, const int32_t *parts, size_t n)
{
	if (n && (!topics || !parts))
		return 0;
	for (size_t i = 0; i < n; i++) {
		int c;

		if (!topics[i] || parts[i] < 0)
			return 0;
		if (i == 0)
			continue;
		c = strcmp(topics[i - 1], topics[i]);
		if (c > 0 || (c == 0 && parts[i - 1] >= parts[i]))
			return 0;
	}
	return 1;
}
