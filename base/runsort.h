/*
 * A natural merge sort, for keys that mostly come in ascending runs (a
 * batch's records: a run per partition, and per incoming set).
 *
 * TBX__RUN_SORT(name, T, cmp) defines
 *     static void name(T *a, T *tmp, size_t n);
 * which sorts the @p n keys of @p a by cmp(const T *, const T *) (< 0, 0,
 * > 0), using @p tmp (room for @p n keys).  Each pass merges neighbouring
 * non-descending runs into the other buffer and the two swap, so keys
 * already in order cost one pass of n - 1 comparisons and no copy, and k
 * runs cost about log2(k) passes where qsort() takes log2(n).  Stable:
 * keys that compare equal keep their order.
 */
#ifndef TBX_BASE_RUNSORT_H
#define TBX_BASE_RUNSORT_H

#include <stddef.h>
#include <string.h>

#define TBX__RUN_SORT(name, T, cmp)                                            \
	static void name(T *a, T *tmp, size_t n)                               \
	{                                                                      \
		T *src = a, *dst = tmp;                                        \
		for (int sorted = n < 2; !sorted;) {                           \
			for (size_t i = 0; i < n;) {                           \
				size_t j = i + 1, k;                           \
				while (j < n &&                                \
				       cmp(&src[j - 1], &src[j]) <= 0)         \
					j++;                                   \
				if (j == n) {                                  \
					/* one run: sorted, in src */          \
					if (i == 0) {                          \
						sorted = 1;                    \
						break;                         \
					}                                      \
					memcpy(dst + i, src + i,               \
					       (n - i) * sizeof(T));           \
					break;                                 \
				}                                              \
				k = j + 1;                                     \
				while (k < n &&                                \
				       cmp(&src[k - 1], &src[k]) <= 0)         \
					k++;                                   \
				for (size_t x = i, y = j, o = i; o < k; o++)   \
					dst[o] = y == k || (x < j &&           \
							    cmp(&src[x],       \
								&src[y]) <= 0) \
						     ? src[x++]                \
						     : src[y++];               \
				i = k;                                         \
			}                                                      \
			if (!sorted) {                                         \
				T *t = src;                                    \
				src = dst;                                     \
				dst = t;                                       \
			}                                                      \
		}                                                              \
		if (src != a)                                                  \
			memcpy(a, src, n * sizeof(T));                         \
	}

#endif
