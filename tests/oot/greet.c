/*
 * The smallest plugin: one handler for the topic "greetings", and the
 * store it will write through, learnt in its init.
 */
#include <stdio.h>
#include <tokenbox/plugin.h>

static tbx_verdict_t on_greeting(tbx_ctx_t *ctx, const tbx_msg_t *msg,
				 void *opaque)
{
	(void)ctx;
	(void)msg;
	(void)opaque;
	return TBX_VERDICT_OK;
}

static int greet_init(tbx_worker_t *worker, const char *args)
{
	(void)args;
	fprintf(stderr, "greet: store %s\n",
		tbx_worker_conf_get(worker, "store.path"));
	return tbx_worker_register(worker, "greetings", NULL, on_greeting,
				   NULL);
}
TBX_PLUGIN(greet_init);
