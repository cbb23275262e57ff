/*
 * The bitmaps of token sets (store/bits.h).  The SQL functions refuse
 * what is not a bitmap with an error rather than guess: a NULL or a text
 * where a blob belongs, or a mask of another length than the bitmap it
 * clears, is a bug of the statement, and a statement that fails rolls its
 * transaction back instead of writing a wrong bitmap.
 */
#include "store/bits.h"

#include <string.h>

uint64_t tbx__bits_count(const uint8_t *bits, size_t len)
{
	uint64_t n = 0;

	for (size_t i = 0; i < len; i++)
		n += (uint64_t)__builtin_popcount(bits[i]);
	return n;
}

void tbx__bits_fill(uint8_t *out, uint32_t nbits)
{
	size_t len = TBX__BITS_BYTES(nbits);

	if (!len)
		return;
	memset(out, 0xff, len);
	if (nbits % 8)
		out[len - 1] = (uint8_t)((1u << (nbits % 8)) - 1);
}

/* Argument @p i as a bitmap: 0 with *bits and *len set, else -1 after
 * reporting the error on @p ctx. */
static int bitmap_arg(sqlite3_context *ctx, sqlite3_value **argv, int i,
		      const char *fn, const uint8_t **bits, size_t *len)
{
	char msg[96];

	if (sqlite3_value_type(argv[i]) != SQLITE_BLOB) {
		sqlite3_snprintf((int)sizeof(msg), msg,
				 "%s: argument %d is not a blob", fn, i + 1);
		sqlite3_result_error(ctx, msg, -1);
		return -1;
	}
	*bits = sqlite3_value_blob(argv[i]);
	*len = (size_t)sqlite3_value_bytes(argv[i]);
	if (*len && !*bits) {
		sqlite3_result_error_nomem(ctx);
		return -1;
	}
	return 0;
}

static void fn_clear(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	const uint8_t *bits, *mask;
	size_t len, mlen;
	uint8_t *out;

	(void)argc;
	if (bitmap_arg(ctx, argv, 0, "tbx_bits_clear", &bits, &len) ||
	    bitmap_arg(ctx, argv, 1, "tbx_bits_clear", &mask, &mlen))
		return;
	if (len != mlen) {
		sqlite3_result_error(ctx,
				     "tbx_bits_clear: the mask's length is not "
				     "the bitmap's",
				     -1);
		return;
	}
	if (!(out = sqlite3_malloc64(len ? len : 1))) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	for (size_t i = 0; i < len; i++)
		out[i] = (uint8_t)(bits[i] & ~mask[i]);
	sqlite3_result_blob64(ctx, out, len, sqlite3_free);
}

static void fn_none(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	const uint8_t *bits;
	size_t len;
	int none = 1;

	(void)argc;
	if (bitmap_arg(ctx, argv, 0, "tbx_bits_none", &bits, &len))
		return;
	for (size_t i = 0; none && i < len; i++)
		none = bits[i] == 0;
	sqlite3_result_int(ctx, none);
}

static void fn_count(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	const uint8_t *bits;
	size_t len;

	(void)argc;
	if (bitmap_arg(ctx, argv, 0, "tbx_bits_count", &bits, &len))
		return;
	sqlite3_result_int64(ctx, (sqlite3_int64)tbx__bits_count(bits, len));
}

static void fn_test(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	const uint8_t *bits;
	sqlite3_int64 i;
	size_t len;

	(void)argc;
	if (bitmap_arg(ctx, argv, 0, "tbx_bits_test", &bits, &len))
		return;
	if (sqlite3_value_type(argv[1]) != SQLITE_INTEGER) {
		sqlite3_result_error(ctx,
				     "tbx_bits_test: argument 2 is not an "
				     "integer",
				     -1);
		return;
	}
	i = sqlite3_value_int64(argv[1]);
	if (i < 0 || (uint64_t)i / 8 >= len) {
		sqlite3_result_null(ctx);
		return;
	}
	sqlite3_result_int(ctx, tbx__bit_get(bits, len, (uint32_t)i));
}

static void fn_list(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	const uint8_t *bits;
	sqlite3_str *s;
	size_t len;
	int first = 1;

	(void)argc;
	if (bitmap_arg(ctx, argv, 0, "tbx_bits_list", &bits, &len))
		return;
	s = sqlite3_str_new(sqlite3_context_db_handle(ctx));
	sqlite3_str_appendchar(s, 1, '[');
	for (size_t i = 0; i < len * 8; i++) {
		if (!tbx__bit_get(bits, len, (uint32_t)i))
			continue;
		sqlite3_str_appendf(s, first ? "%llu" : ",%llu",
				    (unsigned long long)i);
		first = 0;
	}
	sqlite3_str_appendchar(s, 1, ']');
	if (sqlite3_str_errcode(s)) {
		sqlite3_free(sqlite3_str_finish(s));
		sqlite3_result_error_nomem(ctx);
		return;
	}
	sqlite3_result_text(ctx, sqlite3_str_finish(s), -1, sqlite3_free);
}

int tbx__bits_sql_register(sqlite3 *db)
{
	static const struct {
		const char *name;
		int argc;
		void (*fn)(sqlite3_context *, int, sqlite3_value **);
	} fns[] = {
	    {"tbx_bits_clear", 2, fn_clear}, {"tbx_bits_none", 1, fn_none},
	    {"tbx_bits_count", 1, fn_count}, {"tbx_bits_test", 2, fn_test},
	    {"tbx_bits_list", 1, fn_list},
	};
	const int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS;
	int rc = SQLITE_OK;

	for (size_t i = 0; rc == SQLITE_OK && i < sizeof(fns) / sizeof(fns[0]);
	     i++)
		rc = sqlite3_create_function_v2(db, fns[i].name, fns[i].argc,
						flags, NULL, fns[i].fn, NULL,
						NULL, NULL);
	return rc;
}
