/*
 * plugin.args for the example plugins: "key=value" pairs separated by ','
 * or ';', blanks around keys and values ignored.
 *
 *   plugin_arg_t a;
 *   const char *p = args ? args : "";
 *   int rc;
 *
 *   while ((rc = plugin_arg_next(&p, &a)) == 1)
 *           ... a.key, a.val ...
 *   if (rc < 0)
 *           ... a.pair (a.pair_len bytes) is malformed ...
 *
 * Header-only (static functions), so that each plugin stays one shared
 * object built from its own sources, linking nothing but what it names.
 */
#ifndef TBX_EXAMPLES_PLUGIN_ARGS_H
#define TBX_EXAMPLES_PLUGIN_ARGS_H

#include <string.h>

#define PLUGIN_ARG_MAX 256 /* bytes of a key or a value, with the NUL */

typedef struct plugin_arg {
	char key[PLUGIN_ARG_MAX];
	char val[PLUGIN_ARG_MAX];
	const char *pair; /* the pair as written, for messages */
	int pair_len;
} plugin_arg_t;

static int plugin_arg_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Copies [@p p, @p end) without its blanks into @p out.
 * @returns its length, or -1 when it is empty or too long. */
static int plugin_arg_copy(const char *p, const char *end,
			   char out[PLUGIN_ARG_MAX])
{
	while (p < end && plugin_arg_blank(*p))
		p++;
	while (end > p && plugin_arg_blank(end[-1]))
		end--;
	if (end == p || end - p >= PLUGIN_ARG_MAX)
		return -1;
	memcpy(out, p, (size_t)(end - p));
	out[end - p] = '\0';
	return (int)(end - p);
}

/*
 * Reads the next pair of @p *args into @p arg and moves @p *args past it.
 * @returns 1 for a pair, 0 at the end, -1 for a pair without '=', with an
 * empty key or value, or one longer than PLUGIN_ARG_MAX - 1 (arg->pair
 * names it).
 */
static int plugin_arg_next(const char **args, plugin_arg_t *arg)
{
	const char *p = *args, *end, *eq;

	while (*p == ';' || *p == ',' || plugin_arg_blank(*p))
		p++;
	if (!*p)
		return 0;
	end = p + strcspn(p, ";,");
	*args = end;
	arg->pair = p;
	arg->pair_len = (int)(end - p);
	if (!(eq = memchr(p, '=', (size_t)(end - p))) ||
	    plugin_arg_copy(p, eq, arg->key) < 0 ||
	    plugin_arg_copy(eq + 1, end, arg->val) < 0)
		return -1;
	return 1;
}

#endif
