/*
 * A plugin whose init succeeds without registering a handler: `tokenbox
 * worker` must refuse to run it (tests/test_cli_worker.c).
 */
#include <tokenbox/plugin.h>

static int empty_init(tbx_worker_t *worker, const char *args)
{
	(void)worker;
	(void)args;
	return TBX_OK;
}
TBX_PLUGIN(empty_init);
