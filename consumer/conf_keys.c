/*
 * The error for a configuration key tokenbox does not know
 * (tbx_conf_set()): a likely slip of a known key named ("did you mean"),
 * the last part of one given alone ("layout" for outbox.layout), or a
 * librdkafka property given without its 'kafka.' prefix; else only that
 * neither knows it.
 */
#include <librdkafka/rdkafka.h>
#include <string.h>

#include "base/str.h"
#include "consumer/conf.h"

/* The edit distance of @p a and @p b (insertions, deletions,
 * substitutions and swaps of two neighbours, one each), or @p cap + 1
 * when it is over @p cap or a name is too long to judge. */
static size_t edit_distance(const char *a, const char *b, size_t cap)
{
	enum { MAX = 64 };
	size_t la = strlen(a), lb = strlen(b), d[3][MAX + 1];
	size_t *prev2 = d[0], *prev = d[1], *cur = d[2], *t;

	if (la > MAX || lb > MAX)
		return cap + 1;
	for (size_t j = 0; j <= lb; j++)
		prev[j] = j;
	for (size_t i = 1; i <= la; i++) {
		cur[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
			size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
			size_t best = sub < del ? sub : del;

			best = ins < best ? ins : best;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && prev2[j - 2] + 1 < best)
				best = prev2[j - 2] + 1;
			cur[j] = best;
		}
		t = prev2;
		prev2 = prev;
		prev = cur;
		cur = t;
	}
	return prev[lb] > cap ? cap + 1 : prev[lb];
}

/* 1 when @p name abbreviates @p known: as many dot-separated parts, each
 * one's letters found in order in the other's part, starting with the
 * same letter ("batch.max.msgs" of "batch.max.messages"). */
static int abbreviates(const char *name, const char *known)
{
	for (;;) {
		if (*name != *known || !*name || *name == '.')
			return 0;
		while (*name && *name != '.') {
			while (*known && *known != '.' && *known != *name)
				known++;
			if (*known != *name)
				return 0;
			name++;
			known++;
		}
		known += strcspn(known, ".");
		if (!*name || !*known)
			return !*name && !*known;
		name++;
		known++;
	}
}

/* The known key nearest to the unknown @p name, or NULL when none is
 * close enough to be a likely slip: at most a third of the longer name's
 * characters edited.  An abbreviation of a key beats a shorter edit to
 * another ("batch.max.msgs" is batch.max.messages, not batch.max.ms). */
static const char *nearest_key(const char *name)
{
	const char *best = NULL;
	size_t best_d = (size_t)-1;
	int best_abbr = 0;

	for (size_t i = 0; tbx__props[i].name; i++) {
		const char *known = tbx__props[i].name;
		size_t la = strlen(name), lb = strlen(known);
		size_t cap = (la > lb ? la : lb) / 3;
		size_t d = edit_distance(name, known, cap);
		int abbr = abbreviates(name, known);

		if (d > cap)
			continue;
		if (abbr > best_abbr || (abbr == best_abbr && d < best_d)) {
			best = known;
			best_d = d;
			best_abbr = abbr;
		}
	}
	return best;
}

/* The one known key whose last dot-separated parts are @p name
 * ("layout" of outbox.layout), or NULL when none or several are. */
static const char *suffix_key(const char *name)
{
	const char *found = NULL;
	size_t ln = strlen(name);

	for (size_t i = 0; tbx__props[i].name; i++) {
		const char *known = tbx__props[i].name;
		size_t lk = strlen(known);

		if (lk > ln && known[lk - ln - 1] == '.' &&
		    strcmp(known + lk - ln, name) == 0) {
			if (found)
				return NULL;
			found = known;
		}
	}
	return found;
}

/* 1 when librdkafka knows @p name as a property.  Asked with an empty
 * value: the question is the name's, and a value could act when set
 * (plugin.library.paths loads its libraries). */
static int kafka_knows(const char *name)
{
	rd_kafka_conf_t *scratch = rd_kafka_conf_new();
	char rderr[256];
	int known;

	if (!scratch)
		return 0;
	known = rd_kafka_conf_set(scratch, name, "", rderr, sizeof(rderr)) !=
		RD_KAFKA_CONF_UNKNOWN;
	rd_kafka_conf_destroy(scratch);
	return known;
}

int tbx__conf_unknown_key(const char *name, char *errstr, size_t errstr_size)
{
	const char *near = nearest_key(name);

	if (!near)
		near = suffix_key(name);
	if (near)
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: unknown configuration key; did you "
				   "mean '%s'?",
				   name, near);
	if (kafka_knows(name))
		return tbx__seterr(errstr, errstr_size, TBX_ECONF,
				   "%s: unknown configuration key; "
				   "librdkafka's property is set as "
				   "'kafka.%s' (or 'kafka.consumer.%s', "
				   "'kafka.producer.%s' for one client)",
				   name, name, name, name);
	return tbx__seterr(errstr, errstr_size, TBX_ECONF,
			   "%s: unknown configuration key, and no librdkafka "
			   "property either (docs/configuration.md lists the "
			   "keys)",
			   name);
}
