/*
 * Configuration internals: the property table and typed getters.
 */
#ifndef TBX_CONSUMER_CONF_H
#define TBX_CONSUMER_CONF_H

#include <librdkafka/rdkafka.h>
#include <stdint.h>

#include "tokenbox/tokenbox.h"

typedef enum tbx__prop_type {
	TBX_PT_STR,
	TBX_PT_PATH,
	TBX_PT_INT,
	TBX_PT_ENUM,
} tbx__prop_type_t;

/** One row of the property table; docs/configuration.md is made from it. */
typedef struct tbx__prop {
	const char *name;
	tbx__prop_type_t type;
	const char *def;     /**< default text; NULL: no default */
	int64_t min, max;    /**< INT range; STR/PATH length range */
	const char *enums;   /**< ENUM values, '|'-separated */
	const char *used_by; /**< "worker", "publisher" or "both" */
	int required; /**< 1: tbx_worker_new() refuses a conf without it */
	const char *doc;
} tbx__prop_t;

/** The table, terminated by a row with name NULL. */
extern const tbx__prop_t tbx__props[];

/** Typed getters for keys known to exist in the table (abort otherwise:
 *  a typo here is a programming error). */
int64_t tbx__conf_int(const tbx_conf_t *conf, const char *name);
const char *tbx__conf_str(const tbx_conf_t *conf, const char *name);

/**
 * Builds an rd_kafka_conf_t with every "kafka." (both) and
 * "kafka.<role>." pair applied; @p role is "consumer" or "producer".
 * @returns NULL with @p errstr set on failure.
 */
rd_kafka_conf_t *tbx__conf_kafka(const tbx_conf_t *conf, const char *role,
				 char *errstr, size_t errstr_size);

/** Checks that every required key of @p used_by ("worker"/"publisher")
 *  is set.  @returns TBX_OK or TBX_ECONF with @p errstr naming it. */
int tbx__conf_check_required(const tbx_conf_t *conf, const char *used_by,
			     char *errstr, size_t errstr_size);

#endif
