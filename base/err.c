/* Error codes: names, messages and retriability from TBX_ERRNO_MAP. */
#include "tokenbox/tokenbox.h"

/* Indexed by code; a number without a code has no name. */
static const struct {
	const char *name;
	const char *msg;
	int retriable;
} err_table[TBX__ERR_END] = {
#define TBX__ERR_ROW(name, value, retriable, msg)                              \
	[value] = {#name, msg, retriable},
    TBX_ERRNO_MAP(TBX__ERR_ROW)
#undef TBX__ERR_ROW
};

const char *tbx_version(void)
{
	return TBX_VERSION_STR;
}

/* 1 when @p err is a code of the map. */
static int known(int err)
{
	return err >= 0 && err < TBX__ERR_END && err_table[err].name;
}

const char *tbx_err_name(int err)
{
	return known(err) ? err_table[err].name : "UNKNOWN";
}

const char *tbx_strerror(int err)
{
	return known(err) ? err_table[err].msg : "unknown error";
}

int tbx_err_is_retriable(int err)
{
	return known(err) && err_table[err].retriable;
}
