/* Prints docs/configuration.md from the property table (make confdoc). */
#include <stdio.h>

#include "consumer/conf.h"

int main(void)
{
	printf("# Configuration\n\n"
	       "<!-- Generated from the property table in consumer/conf.c by "
	       "`cmake --build build --target confdoc`; the test "
	       "configuration_doc_is_current fails when it is stale. -->\n\n"
	       "Workers and publishers take string key/value pairs "
	       "(`tbx_conf_set()`, `key=value` lines, or `-X key=value`). "
	       "Each value is checked when it is set; a bad one is refused "
	       "with a message that names the key, the value and why.\n\n"
	       "Keys starting with `kafka.` are handed to librdkafka without "
	       "the prefix, for both the consumer and the producer; "
	       "`kafka.consumer.` and `kafka.producer.` reach only one of "
	       "them. librdkafka checks them when they are set. "
	       "`kafka.bootstrap.servers` is required. tokenbox sets "
	       "`group.id` (from `group.id`), `enable.auto.commit=false`, "
	       "`enable.auto.offset.store=false`, "
	       "`enable.partition.eof` (off) and `enable.idempotence=true` "
	       "itself; setting them is an error. "
	       "Unless set, it also uses `auto.offset.reset=earliest` for "
	       "the consumer and `linger.ms=1` for the producer.\n\n"
	       "`plugin=PATH` and `plugin.args=TEXT` are not keys of this "
	       "table: they are lines of `tokenbox worker`'s configuration "
	       "(or `-X`), read by the command, which loads each plugin and "
	       "hands it the arguments; a relative `plugin=` path is taken "
	       "from the configuration file's directory "
	       "([operations.md](operations.md), `--check-config`; "
	       "[handlers.md](handlers.md)).\n\n"
	       "| key | type | default | range | used by | description |\n"
	       "| --- | --- | --- | --- | --- | --- |\n");
	for (size_t i = 0; tbx__props[i].name; i++) {
		const tbx__prop_t *p = &tbx__props[i];
		const char *type = "string";
		char range[64] = "";

		switch (p->type) {
		case TBX_PT_STR:
			snprintf(range, sizeof(range), "%lld..%lld chars",
				 (long long)p->min, (long long)p->max);
			break;
		case TBX_PT_PATH:
			type = "path";
			break;
		case TBX_PT_INT:
			type = "integer";
			snprintf(range, sizeof(range), "%lld..%lld",
				 (long long)p->min, (long long)p->max);
			break;
		case TBX_PT_ENUM:
			type = "enum";
			tbx__prop_enums(p, ", ", range, sizeof(range));
			break;
		}
		printf("| `%s` | %s | %s%s%s | %s | %s | %s%s |\n", p->name,
		       type, p->def && *p->def ? "`" : "",
		       p->def ? (*p->def ? p->def : "(empty)") : "(none)",
		       p->def && *p->def ? "`" : "", range, p->used_by,
		       p->required ? "**Required.** " : "", p->doc);
	}
	return 0;
}
