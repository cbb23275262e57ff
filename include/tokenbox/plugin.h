/*
 * tokenbox — writing a handler plugin for `tokenbox worker`.
 *
 * Header-only.  A plugin is a shared object that `tokenbox worker` loads
 * with dlopen() (configuration key plugin=PATH) and that exports two
 * functions:
 *
 *   int tbx_plugin_abi_version(void);
 *       returns the TBX_PLUGIN_ABI_VERSION the plugin was built with;
 *   int tbx_plugin_init(tbx_worker_t *worker, const char *args);
 *       registers the plugin's handlers on @p worker.
 *
 * TBX_PLUGIN(fn) defines both, so that a plugin is written as
 *
 *   #include <tokenbox/plugin.h>
 *
 *   static int my_init(tbx_worker_t *worker, const char *args)
 *   {
 *           return tbx_worker_register(worker, "orders", "OrderPlaced",
 *                                      on_order_placed, NULL);
 *   }
 *   TBX_PLUGIN(my_init);
 *
 * The command refuses a plugin whose tbx_plugin_abi_version() is not its
 * own TBX_PLUGIN_ABI_VERSION, then calls tbx_plugin_init() once, before the
 * worker's first poll, with the plugin.args text ("" when not set).  The
 * function registers the plugin's handlers and returns TBX_OK, or an error
 * code (tbx_err_t) that stops the command; a worker left without any
 * handler stops it too.  @p worker is borrowed: it stays valid until the
 * command destroys it, which happens before the plugin is unloaded.
 *
 * The init may read the worker's configuration with tbx_worker_conf_get():
 * "store.path" is the service store's file ("store.url" when the store is
 * on PostgreSQL), "group.id" the consumer group, "tokens.path" the token
 * store.  Handlers written with tbx_ctx_exec() run on either backend
 * (plugin ABI 3).
 *
 * `tokenbox worker --check-config` runs the init too, on a worker whose
 * stores are not open: the init should register its handlers and check
 * its arguments, and leave any other work to the handlers.
 *
 * A plugin does NOT link libtokenbox: the `tokenbox` process already holds
 * the library and exports its API to plugins; a second copy would split
 * the library's global state.  Leave the tbx_* symbols undefined (shared
 * objects may) and compile with this header's directory on the include
 * path, which the CMake target tokenbox::plugin (find_package(tokenbox))
 * and the pkg-config module tokenbox-plugin carry, and nothing else:
 * `cc -shared -fPIC $(pkg-config --cflags tokenbox-plugin) p.c -o p.so`.
 * docs/handlers.md has the rules and a CMake recipe.
 */
#ifndef TOKENBOX_PLUGIN_H
#define TOKENBOX_PLUGIN_H

#include "tokenbox.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TBX_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define TBX_PLUGIN_EXPORT
#endif

/** @returns the TBX_PLUGIN_ABI_VERSION the plugin was compiled with. */
TBX_PLUGIN_EXPORT int tbx_plugin_abi_version(void);
/** Registers the plugin's handlers on @p worker; see the top of this file. */
TBX_PLUGIN_EXPORT int tbx_plugin_init(tbx_worker_t *worker, const char *args);

/**
 * Defines the plugin's two entry points; @p init_fn is the plugin's own
 * init function, of type tbx_plugin_init_fn (checked at compile time).
 * Use it once per plugin, at file scope, followed by a semicolon.  The
 * entry points are exported with default visibility, so the plugin may be
 * built with -fvisibility=hidden.
 */
#define TBX_PLUGIN(init_fn)                                                    \
	TBX_PLUGIN_EXPORT int tbx_plugin_abi_version(void)                     \
	{                                                                      \
		return TBX_PLUGIN_ABI_VERSION;                                 \
	}                                                                      \
	TBX_PLUGIN_EXPORT int tbx_plugin_init(tbx_worker_t *worker,            \
					      const char *args)                \
	{                                                                      \
		tbx_plugin_init_fn tbx__plugin_fn = (init_fn);                 \
		return tbx__plugin_fn(worker, args);                           \
	}                                                                      \
	struct tbx__plugin_needs_a_semicolon

#ifdef __cplusplus
}
#endif
#endif /* TOKENBOX_PLUGIN_H */
