/*
 * Configuration internals: the property table and the typed fields it
 * fills.
 *
 * Every tokenbox property (not the "kafka." ones) is a field of
 * tbx__cfg_t.  Its row in tbx__props[] carries the field's offset, so
 * tbx_conf_set() checks a value against the row and stores it, converted,
 * in the field; code reads cfg->batch_max_messages, never a string name.
 * A row names its field through a macro that checks the field's type, so a
 * misspelt field, or one of the wrong type, does not compile.  A new key
 * is a field here and a row in conf.c (test_conf_fields checks that each
 * row names its own field).
 */
#ifndef TBX_CONSUMER_CONF_H
#define TBX_CONSUMER_CONF_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenbox/tokenbox.h"

typedef enum tbx__prop_type {
	TBX_PT_STR,  /**< const char * field */
	TBX_PT_PATH, /**< const char * field */
	TBX_PT_INT,  /**< int64_t field */
	TBX_PT_ENUM, /**< int field: the s2i value of the text */
} tbx__prop_type_t;

/* Values of the ENUM fields (the rows' s2i lists map text to them). */
/** token.store.mismatch */
enum { TBX_MISMATCH_DLQ, TBX_MISMATCH_STOP };
/** tokens.format */
enum { TBX_TOKFMT_MESSAGE, TBX_TOKFMT_SET };
/** ingress.untokened */
enum { TBX_UNTOKENED_REJECT, TBX_UNTOKENED_OFFSETS };
/** outbox.layout */
enum { TBX_LAYOUT_RECORD, TBX_LAYOUT_BATCH };
/** store.synchronous */
enum { TBX_SYNC_FULL, TBX_SYNC_NORMAL };
/** log.format: 'auto'; the others are base/util.h's TBX_LOGF_* */
enum { TBX_CFG_LOGF_AUTO = -1 };
/* log.level takes base/util.h's TBX_LOG_*; tokens.create is 0 or 1. */

/**
 * The tokenbox properties, one field per row of tbx__props[] (the field
 * is the key with '.' as '_').  Strings are borrowed from the
 * configuration that holds them, valid until it is destroyed or the key
 * is set again; a key without a default and not set is NULL.
 */
typedef struct tbx__cfg {
	const char *group_id;
	const char *store_path;
	const char *store_url;
	const char *store_schema;
	const char *tokens_path;
	const char *tokens_url;
	const char *tokens_schema;
	int tokens_create;
	int token_store_mismatch;
	int64_t batch_max_messages;
	int64_t batch_max_ms;
	int finish_defer;
	int outbox_layout;
	int64_t retry_max;
	int64_t retry_backoff_ms;
	int64_t retry_backoff_max_ms;
	const char *dlq_suffix;
	int ingress_untokened;
	int store_synchronous;
	int64_t store_busy_timeout_ms;
	int64_t cleanup_interval_ms;
	int64_t cleanup_batch_size;
	int64_t recovery_interval_ms;
	int64_t commit_behind_alarm_ms;
	int64_t dispatch_timeout_ms;
	int64_t dispatch_retry_max;
	int64_t shutdown_timeout_ms;
	int64_t stats_interval_ms;
	int64_t ingress_dedup_window_ms;
	int tokens_format;
	int log_level;
	int log_format;
	const char *metrics_listen;
	const char *metrics_textfile;
	int64_t metrics_interval_ms;
	const char *worker_id;
	/* otel.*: tracing (consumer/tracing.c reads them by name) */
	const char *otel_exporter_otlp_endpoint,
	    *otel_exporter_otlp_traces_endpoint, *otel_service_name;
	const char *otel_traces_sampler, *otel_traces_sampler_arg,
	    *otel_sdk_disabled;
	const char *otel_traces_exporter, *otel_exporter_otlp_protocol;
	const char *otel_bsp_max_queue_size, *otel_bsp_max_export_batch_size,
	    *otel_bsp_schedule_delay;
	const char *otel_exporter_otlp_timeout;
	int64_t trace_loss_window_ms;
} tbx__cfg_t;

/** One text of an ENUM property and the field's value for it. */
typedef struct tbx__s2i {
	const char *str;
	int val;
} tbx__s2i_t;

/** One row of the property table; docs/configuration.md is made from it. */
typedef struct tbx__prop {
	const char *name;
	tbx__prop_type_t type;
	size_t offset;	       /**< offsetof(tbx__cfg_t, field) */
	const char *field;     /**< the field's name, checked by the tests */
	const char *def;       /**< default text; NULL: no default */
	int64_t min, max;      /**< INT range; STR/PATH length range */
	const tbx__s2i_t *s2i; /**< ENUM values, in the order shown; ends
				  with str NULL */
	const char *used_by;   /**< "worker", "publisher" or "both" */
	int required; /**< 1: tbx_worker_new() refuses a conf without it */
	const char *doc;
} tbx__prop_t;

/** The table, terminated by a row with name NULL. */
extern const tbx__prop_t tbx__props[];

/** The typed values of @p conf, valid while @p conf lives (each field
 *  until its key is set again). */
const tbx__cfg_t *tbx__conf_cfg(const tbx_conf_t *conf);

/** Writes the ENUM texts of @p prop to @p buf, joined by @p sep. */
void tbx__prop_enums(const tbx__prop_t *prop, const char *sep, char *buf,
		     size_t size);

/**
 * Builds an rd_kafka_conf_t with every "kafka." (both) and
 * "kafka.<role>." pair applied; @p role is "consumer" or "producer".
 * @returns NULL with @p errstr set on failure.
 */
rd_kafka_conf_t *tbx__conf_kafka(const tbx_conf_t *conf, const char *role,
				 char *errstr, size_t errstr_size);

/** Checks that every required key of @p used_by ("worker"/"publisher")
 *  is set (for a worker: store.path or store.url), and that a store is
 *  not given both a path and a URL.  @returns TBX_OK or TBX_ECONF with
 *  @p errstr naming it. */
int tbx__conf_check_required(const tbx_conf_t *conf, const char *used_by,
			     char *errstr, size_t errstr_size);

/** Hands the logging settings of @p conf to base/log.h
 *  (tbx__log_configure()): log.level, raised to debug when a kafka debug
 *  key (kafka.debug, kafka.consumer.debug, kafka.producer.debug) is set,
 *  log.format, and @p tag (NULL keeps the process-wide tag). */
void tbx__conf_log_configure(const tbx_conf_t *conf, const char *tag);

/* conf_keys.c */
/** The error (TBX_ECONF, @p errstr) for @p name, a key tokenbox does not
 *  know: a near miss of a known key or its last part alone named, a
 *  librdkafka property without 'kafka.' said so. */
int tbx__conf_unknown_key(const char *name, char *errstr, size_t errstr_size);

#endif
