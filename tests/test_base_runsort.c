/*
 * base/runsort.h: the natural merge sort gives qsort()'s order, keeps
 * equal keys in their order (stable), and ends on keys all equal, sorted,
 * reversed, in runs or at random, of every length up to a few hundred.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/runsort.h"

typedef struct key {
	int v;	  /* what is sorted on */
	size_t i; /* where it was: stability */
} rkey_t;

static int key_cmp(const rkey_t *a, const rkey_t *b)
{
	return (a->v > b->v) - (a->v < b->v);
}

TBX__RUN_SORT(key_sort, rkey_t, key_cmp)

static int key_qcmp(const void *a, const void *b)
{
	const rkey_t *x = a, *y = b;
	int c = key_cmp(x, y);

	return c ? c : (x->i > y->i) - (x->i < y->i);
}

static uint64_t rng = 88172645463325252ull;

static int next(int mod)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (int)(rng % (uint64_t)mod);
}

enum shape { ALL_EQUAL, SORTED, REVERSED, RUNS, RANDOM, FEW_VALUES };

static void fill(rkey_t *k, size_t n, enum shape s)
{
	for (size_t i = 0; i < n; i++) {
		switch (s) {
		case ALL_EQUAL:
			k[i].v = 7;
			break;
		case SORTED:
			k[i].v = (int)i;
			break;
		case REVERSED:
			k[i].v = (int)(n - i);
			break;
		case RUNS: /* ascending runs of up to 40 */
			k[i].v = (int)(i % 40) * 3 + (int)(i / 40) % 3;
			break;
		case RANDOM:
			k[i].v = next(1000000);
			break;
		case FEW_VALUES:
			k[i].v = next(4);
			break;
		}
		k[i].i = i;
	}
}

Test(runsort, gives_the_order_of_a_stable_qsort_for_every_shape)
{
	for (int s = ALL_EQUAL; s <= FEW_VALUES; s++) {
		for (size_t n = 0; n <= 300; n += n < 20 ? 1 : 37) {
			rkey_t *a = calloc(n + 1, sizeof(*a));
			rkey_t *want = calloc(n + 1, sizeof(*want));
			rkey_t *tmp = calloc(n + 1, sizeof(*tmp));

			cr_assert(a && want && tmp);
			fill(a, n, (enum shape)s);
			memcpy(want, a, n * sizeof(*a));
			/* The index as a last key: qsort() made stable. */
			qsort(want, n, sizeof(*want), key_qcmp);
			key_sort(a, tmp, n);
			for (size_t i = 0; i < n; i++)
				cr_assert(
				    a[i].v == want[i].v && a[i].i == want[i].i,
				    "shape %d, %zu keys: at %zu (%d, from "
				    "%zu) where (%d, from %zu) belongs",
				    s, n, i, a[i].v, a[i].i, want[i].v,
				    want[i].i);
			free(a);
			free(want);
			free(tmp);
		}
	}
}
