/*
 * Fixtures of the register-cleanup tests (sweep_fixture.h).
 */
#include "sweep_fixture.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"
#include "store/msgs.h"
#include "store/pg.h"
#include "support.h"

int tt_sweep_stores_open(tt_sweep_env_t *env, char *err, size_t size)
{
	char url[2048];
	int rc;

	env->store = NULL;
	env->tokens = NULL;
	if (tt_pg_tier()) {
		rc = tbx_outbox_pg_open(
		    tt_store_url(env->s_desc, url, sizeof(url)),
		    tt_store_schema(env->s_desc), NULL, &env->store, err, size);
		if (!rc)
			rc = tbx_tokens_pg_open(
			    tt_store_url(env->t_desc, url, sizeof(url)),
			    tt_store_schema(env->t_desc),
			    env->one_file ? tbx_outbox_pg(env->store) : NULL,
			    NULL, &env->tokens, err, size);
	} else {
		rc = tbx_outbox_open(env->s_desc, NULL, &env->store, err, size);
		if (!rc)
			rc = tbx_tokens_sqlite_open(
			    env->t_desc, NULL,
			    env->one_file ? tbx_outbox_db(env->store) : NULL,
			    &env->tokens, err, size);
	}
	if (rc)
		tt_sweep_stores_close(env);
	return rc;
}

void tt_sweep_stores_close(tt_sweep_env_t *env)
{
	tbx_tokens_close(env->tokens);
	env->tokens = NULL;
	tbx_outbox_close(env->store);
	env->store = NULL;
}

void tt_sweep_env_open(tt_sweep_env_t *env, const char *dir, const char *tag,
		       int one_file, const char *topic,
		       const char *const *groups)
{
	char err[512], name[64];
	int64_t since;

	memset(env, 0, sizeof(*env));
	tbx__log_setup(TBX_LOG_ERR - 1, "test");
	env->own_dir = !dir;
	env->dir = dir ? strdup(dir) : tt_tmpdir();
	env->one_file = one_file;
	cr_assert(env->dir);
	if (tt_pg_tier()) {
		snprintf(name, sizeof(name), "%s_s", tag);
		env->s_desc = tt_store_new(env->dir, name);
		snprintf(name, sizeof(name), "%s_t", tag);
		env->t_desc = tt_tokens_new(env->dir, name, one_file);
	} else {
		env->s_desc = tt_path(env->dir, one_file ? "all.db" : "s.db");
		env->t_desc = tt_path(env->dir, one_file ? "all.db" : "t.db");
	}
	err[0] = '\0';
	cr_assert_eq(tt_sweep_stores_open(env, err, sizeof(err)), TBX_OK, "%s",
		     err);
	for (size_t i = 0; groups && groups[i]; i++)
		cr_assert_eq(
		    tbx_tokens_subscribe(env->tokens, topic, groups[i], &since),
		    TBX_OK);
}

void tt_sweep_env_close(tt_sweep_env_t *env)
{
	char sql[160];

	tt_sweep_stores_close(env);
	if (tt_pg_tier()) {
		snprintf(sql, sizeof(sql), "DROP SCHEMA \"%s\" CASCADE",
			 tt_store_schema(env->s_desc));
		tt_count(env->s_desc, sql);
		snprintf(sql, sizeof(sql),
			 "DROP SCHEMA IF EXISTS \"%s\" CASCADE",
			 tt_store_schema(env->t_desc));
		tt_count(env->s_desc, sql);
	}
	if (env->own_dir)
		tt_rmrf(env->dir);
	free(env->dir);
	free(env->s_desc);
	free(env->t_desc);
	memset(env, 0, sizeof(*env));
}

void tt_store_exec(const char *desc, const char *sql)
{
	sqlite3 *db;

	if (tt_pg_tier()) {
		tt_count(desc, sql);
		return;
	}
	cr_assert_eq(sqlite3_open(desc, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 10000);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK,
		     "%s: %s", sql, sqlite3_errmsg(db));
	sqlite3_close(db);
}

/*
 * A batch row of one record and one message to @p topic; with @p set (a
 * set id), the message's token, as B records it.
 */
typedef struct brow {
	tbx__obatch_t row;
	tbx__buf_t cover, wire;
	void *msgs;
	char in_id[TBX_UUID_LEN + 1], out_id[TBX_UUID_LEN + 1];
} brow_t;

static void brow_make(brow_t *b, const char *topic, const char *row_id,
		      const char *set)
{
	tbx__cover_ent_t e;
	tbx__wire_ent_t w = {0, 0, 0};
	tbx__mfield_t f[TBX__MF_COUNT];
	char err[200];

	memset(b, 0, sizeof(*b));
	memset(f, 0, sizeof(f));
	tbx__uuid(b->in_id);
	tbx__uuid(b->out_id);
	tbx__strlcpy(b->row.row_id, row_id, sizeof(b->row.row_id));
	e = (tbx__cover_ent_t){TBX__COVER_HANDLED, "in", 0, 7, b->in_id,
			       TBX__REF_TOKEN,	   "",	 0, 0};
	tbx__uuid(e.ref_id);
	f[TBX__MF_ID] = (tbx__mfield_t){b->out_id, TBX_UUID_LEN};
	f[TBX__MF_TOPIC] = (tbx__mfield_t){topic, strlen(topic)};
	f[TBX__MF_TYPE] = (tbx__mfield_t){"Pong", 4};
	f[TBX__MF_PAYLOAD] = (tbx__mfield_t){"v", 1};
	if (set)
		f[TBX__MF_TOKEN] = (tbx__mfield_t){set, TBX_UUID_LEN};
	cr_assert_eq(tbx__cover_encode(&b->cover, &e, 1, err, sizeof(err)),
		     TBX_OK, "%s", err);
	cr_assert_eq(tbx__wire_encode(&b->wire, &w, 1), TBX_OK);
	cr_assert_eq(tbx__msgs_encode(f, 1, &b->msgs, &b->row.msgs_len),
		     TBX_OK);
	b->row.msgs = b->msgs;
	b->row.cover = b->cover.p;
	b->row.cover_len = b->cover.len;
	b->row.wire = b->wire.p;
	b->row.wire_len = b->wire.len;
	b->row.tokfmt = 2;
	/* A row of now: `inspect status --check` flags an old one. */
	b->row.created_ms = tbx__now_ms();
	b->row.stuck_ms = -1;
}

static void brow_free(brow_t *b)
{
	tbx__buf_free(&b->cover);
	tbx__buf_free(&b->wire);
	free(b->msgs);
}

void tt_brow_insert(tt_sweep_env_t *env, const char *grp, const char *topic,
		    char row_id[TBX_UUID_LEN + 1])
{
	brow_t b;
	int err;

	tbx__uuid(row_id);
	brow_make(&b, topic, row_id, NULL);
	cr_assert_eq(tbx_outbox_begin(env->store), TBX_OK);
	err = tbx_outbox_obatch_insert(env->store, grp, &b.row);
	cr_assert_eq(err, TBX_OK, "obatch_insert: %s",
		     err == TBX_ESCHEMA ? "this backend has no batch rows yet"
					: tbx_outbox_errmsg(env->store));
	cr_assert_eq(tbx_outbox_commit(env->store), TBX_OK);
	brow_free(&b);
}

uint64_t tt_sets_mint(tt_sweep_env_t *env, const char *grp, const char *topic,
		      const char *row_id, uint32_t nbits, tt_set_attempt_t *a)
{
	tbx__set_item_t items[2];
	tbx__set_req_t req;
	uint64_t rows = 0;

	tbx__uuid(a->id);
	for (int i = 0; i < 2; i++) {
		tbx__uuid(a->sets[i]);
		items[i] = (tbx__set_item_t){a->sets[i], topic, i, nbits};
	}
	req = (tbx__set_req_t){a->id, row_id, items, 2};
	cr_assert_eq(
	    tbx_tokens_sets_mint(env->tokens, grp, &req, 1, &a->seq, &rows),
	    TBX_OK);
	return rows;
}

int tt_sets_record(tt_sweep_env_t *env, const char *grp, const char *topic,
		   const char *row_id, const tt_set_attempt_t *a)
{
	brow_t b;
	int won = -1;

	brow_make(&b, topic, row_id, a->sets[0]);
	cr_assert_eq(tbx_outbox_begin(env->store), TBX_OK);
	cr_assert_eq(tbx_outbox_obatch_set_attempt(
			 env->store, grp, row_id, a->id, a->seq, b.msgs,
			 b.row.msgs_len, b.wire.p, b.wire.len, &won),
		     TBX_OK, "%s", tbx_outbox_errmsg(env->store));
	cr_assert_eq(tbx_outbox_commit(env->store), TBX_OK);
	brow_free(&b);
	return won;
}

int64_t tt_sets_rows(tt_sweep_env_t *env, const tt_set_attempt_t *a)
{
	char sql[300];

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM tbx_tset WHERE set_id IN ('%s', '%s')",
		 a->sets[0], a->sets[1]);
	return tt_count(env->t_desc, sql);
}

int64_t tt_sets_breg(tt_sweep_env_t *env, const tt_set_attempt_t *a)
{
	char sql[200];

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM tbx_breg WHERE attempt = '%s'", a->id);
	return tt_count(env->t_desc, sql);
}
