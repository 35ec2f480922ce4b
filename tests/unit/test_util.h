/*
** test_util.h - fixtures shared by the unit tests: a fresh store per test
** (a temp SQLite file, or a private schema in the PostgreSQL database named
** by DUE_TEST_PG_URL), waiting helpers, and (TU_TASKS) the task helpers
** of the store suites.
**
** PostgreSQL is never skipped silently: when CI=true and DUE_TEST_PG_URL
** is unset, tu_backend_check() fails the test binary.
*/
#ifndef DUE_TEST_UTIL_H
#define DUE_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef DUE_WITH_PG
#include <libpq-fe.h>
#endif

#include "due.h"

static const char *tu_backend = "sqlite";
static int tu_pg_missing_in_ci;
static char tu_schema[64] __attribute__((unused));

static inline void tu_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* 0 when `name` can run here; prints why not otherwise. */
static inline int tu_select_backend(const char *name)
{
	tu_backend = name;
	if (strcmp(name, "sqlite") == 0)
		return 0;
	const char *pg = getenv("DUE_TEST_PG_URL");
	const char *ci = getenv("CI");
#ifndef DUE_WITH_PG
	pg = NULL;
#endif
	if (pg && *pg)
		return 0;
	if (ci && strcmp(ci, "true") == 0) {
		fprintf(stderr, "FAIL: CI=true but DUE_TEST_PG_URL is not set (or "
				"this build has no PostgreSQL): the PostgreSQL "
				"suite did not run\n");
		tu_pg_missing_in_ci = 1;
	} else {
		printf("NOTE: DUE_TEST_PG_URL not set: PostgreSQL suite not run\n");
	}
	return -1;
}

static inline int tu_backend_check(void)
{
	return tu_pg_missing_in_ci ? 1 : 0;
}

#ifdef DUE_WITH_PG
static inline void tu_quiet_notice(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

static inline int tu_pg_exec(const char *sql)
{
	PGconn *c = PQconnectdb(getenv("DUE_TEST_PG_URL"));
	int ok = PQstatus(c) == CONNECTION_OK;
	if (ok) {
		PQsetNoticeProcessor(c, tu_quiet_notice, NULL);
		PGresult *r = PQexec(c, sql);
		ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		if (!ok)
			fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
		PQclear(r);
	} else {
		fprintf(stderr, "connect: %s", PQerrorMessage(c));
	}
	PQfinish(c);
	return ok ? 0 : -1;
}
#endif

/*
** Make a fresh, initialized store and write its URL to url.  For SQLite,
** dir receives the temp directory holding it.
*/
static inline int tu_fresh_store(char *url, size_t n, char *dir, size_t dn)
{
	static int counter __attribute__((unused));
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;
	int rc;

	o.create = true;
	dir[0] = '\0';
	if (strcmp(tu_backend, "sqlite") == 0) {
		snprintf(dir, dn, "/tmp/due-test-XXXXXX");
		if (!mkdtemp(dir))
			return -1;
		snprintf(url, n, "sqlite:%s/due.db", dir);
	} else {
#ifdef DUE_WITH_PG
		const char *base = getenv("DUE_TEST_PG_URL");
		char sql[128];
		snprintf(tu_schema, sizeof(tu_schema), "due_t_%d_%d", (int)getpid(),
			 ++counter);
		snprintf(sql, sizeof(sql), "CREATE SCHEMA %s", tu_schema);
		if (tu_pg_exec(sql) < 0)
			return -1;
		snprintf(url, n, "%s%soptions=-csearch_path%%3D%s", base,
			 strchr(base, '?') ? "&" : "?", tu_schema);
#else
		return -1;
#endif
	}
	rc = due_open(&db, url, &o);
	if (rc < 0)
		fprintf(stderr, "init %s: %s\n", url, due_error_last());
	due_close(db);
	return rc < 0 ? -1 : 0;
}

static inline void tu_drop_store(const char *url, const char *dir)
{
	char cmd[512];
	if (strncmp(url, "sqlite:", 7) == 0 && dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
		return;
	}
#ifdef DUE_WITH_PG
	snprintf(cmd, sizeof(cmd), "DROP SCHEMA %s CASCADE", tu_schema);
	tu_pg_exec(cmd);
#endif
}

#ifdef TU_FIXTURE
/*
** The per-test fixture of the cmocka suites that define TU_FIXTURE
** before including this header (after cmocka.h): a
** fresh store in `url` (and `dir` for SQLite) before each test, dropped
** after it.
*/
static char url[512] __attribute__((unused));
static char dir[256] __attribute__((unused));

static inline int setup(void **state)
{
	(void)state;
	return tu_fresh_store(url, sizeof(url), dir, sizeof(dir));
}

static inline int teardown(void **state)
{
	(void)state;
	tu_drop_store(url, dir);
	return 0;
}

/* A handle on this test's store; fails the test when it cannot open. */
static inline due_db *open_db(void)
{
	due_db *db = NULL;
	if (due_open(&db, url, NULL) < 0)
		fail_msg("open %s: %s", url, due_error_last());
	return db;
}
#endif /* TU_FIXTURE */

#ifdef TU_TASKS
/*
** Task helpers of the store suites (cmocka asserts: include cmocka.h
** first).  add: a task of `kind` due after delay_us, payload "p".
*/
static due_id add(due_db *db, const char *kind, int64_t delay_us,
		  int32_t max_attempts)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	o.delay_us = delay_us;
	o.max_attempts = max_attempts;
	assert_int_equal(due_schedule(db, &s, kind, "p", 1, &o), 0);
	assert_false(s.existed);
	return s.id;
}

/* Claim exactly one task, which must be `id`; returns its attempt. */
static int32_t claim_one(due_db *db, due_id id, int64_t lease_us)
{
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 10, lease_us), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, id);
	int32_t a = l->items[0].attempt;
	due_task_list_free(l);
	return a;
}

static due_task *get(due_db *db, due_id id)
{
	due_task *t = NULL;
	assert_int_equal(due_get(db, &t, id), 0);
	return t;
}

static due_state state_of(due_db *db, due_id id)
{
	due_task *t = get(db, id);
	due_state s = t->state;
	due_task_free(t);
	return s;
}
#endif /* TU_TASKS */

#endif
