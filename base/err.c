/* Error codes: names, messages and retriability from TBX_ERRNO_MAP. */
#include "tokenbox/tokenbox.h"

static const struct {
	const char *name;
	const char *msg;
	int retriable;
} err_table[] = {
#define TBX__ERR_ROW(name, retriable, msg) {#name, msg, retriable},
    TBX_ERRNO_MAP(TBX__ERR_ROW)
#undef TBX__ERR_ROW
};

const char *tbx_version(void)
{
	return TBX_VERSION_STR;
}

const char *tbx_err_name(int err)
{
	if (err < 0)
		err = -err;
	if (err >= TBX__ERR_COUNT)
		return "UNKNOWN";
	return err_table[err].name;
}

const char *tbx_strerror(int err)
{
	if (err < 0)
		err = -err;
	if (err >= TBX__ERR_COUNT)
		return "unknown error";
	return err_table[err].msg;
}

int tbx_err_is_retriable(int err)
{
	if (err < 0)
		err = -err;
	if (err >= TBX__ERR_COUNT)
		return 0;
	return err_table[err].retriable;
}
