/*
** test_util.h - fixtures shared by the unit tests: a fresh store per test
** (a temp SQLite file, a private schema in the PostgreSQL database named
** by DUE_TEST_PG_URL, a private key prefix on the Redis server of
** DUE_TEST_REDIS_URL, a private database on the MariaDB server of
** DUE_TEST_MYSQL_URL), waiting helpers, and (TU_TASKS) the task helpers
** of the store suites.
**
** Backends.  The store suites run against every entry of tu_fixtures[]:
** its name (due_db_backend() of its stores), whether it can run here,
** how to make a fresh store's URL and how to drop it.  A new backend
** joins the conformance suite with one entry (and its build option's
** #ifdef); a suite runs them all with
**	for (size_t b = 0; b < TU_N_FIXTURES; b++)
**		if (tu_select_backend(tu_fixtures[b].name) == 0) ...
**
** A backend is never skipped silently: when CI=true and one cannot run
** (not built, or its server not given), tu_backend_check() fails the test
** binary.
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

typedef struct tu_fixture {
	const char *name;
	/* 0 when it can run here; else why not (static text). */
	const char *(*unavailable)(void);
	/* The URL of a fresh, empty store; dir gets a temp dir or "". */
	int (*fresh)(char *url, size_t n, char *dir, size_t dn);
	void (*drop)(const char *url, const char *dir);
} tu_fixture;

static int tu_missing_in_ci;

static inline void tu_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* --- SQLite: a file in its own temp directory --- */

static inline const char *tu_sqlite_unavailable(void) { return NULL; }

static inline int tu_sqlite_fresh(char *url, size_t n, char *dir, size_t dn)
{
	snprintf(dir, dn, "/tmp/due-test-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(url, n, "sqlite:%s/due.db", dir);
	return 0;
}

static inline void tu_sqlite_drop(const char *url, const char *dir)
{
	char cmd[512];
	(void)url;
	if (!dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

/* --- PostgreSQL: a private schema in DUE_TEST_PG_URL's database --- */

#ifdef DUE_WITH_PG
static char tu_schema[64];

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

static inline const char *tu_pg_unavailable(void)
{
	const char *pg = getenv("DUE_TEST_PG_URL");
	return pg && *pg ? NULL : "DUE_TEST_PG_URL is not set";
}

static inline int tu_pg_fresh(char *url, size_t n, char *dir, size_t dn)
{
	static int counter;
	const char *base = getenv("DUE_TEST_PG_URL");
	char sql[128];

	(void)dn;
	dir[0] = '\0';
	snprintf(tu_schema, sizeof(tu_schema), "due_t_%d_%d", (int)getpid(),
		 ++counter);
	snprintf(sql, sizeof(sql), "CREATE SCHEMA %s", tu_schema);
	if (tu_pg_exec(sql) < 0)
		return -1;
	snprintf(url, n, "%s%soptions=-csearch_path%%3D%s", base,
		 strchr(base, '?') ? "&" : "?", tu_schema);
	return 0;
}

static inline void tu_pg_drop(const char *url, const char *dir)
{
	char sql[128];
	(void)url;
	(void)dir;
	snprintf(sql, sizeof(sql), "DROP SCHEMA %s CASCADE", tu_schema);
	tu_pg_exec(sql);
}
#endif

/* --- Redis (DUE_TEST_REDIS_URL) and MySQL/MariaDB (DUE_TEST_MYSQL_URL):
       each backend's fixture in its own header --- */
#ifdef DUE_WITH_REDIS
#include "tu_redis.h" /* tu_redis_unavailable, _fresh, _drop */
#endif
#ifdef DUE_WITH_MYSQL
#include "tu_mysql.h" /* tu_mysql_unavailable, _fresh, _drop */
#endif

/* The backends of this build the suites run against. */
static const tu_fixture tu_fixtures[] = {
    {"sqlite", tu_sqlite_unavailable, tu_sqlite_fresh, tu_sqlite_drop},
#ifdef DUE_WITH_PG
    {"postgres", tu_pg_unavailable, tu_pg_fresh, tu_pg_drop},
#endif
#ifdef DUE_WITH_REDIS
    {"redis", tu_redis_unavailable, tu_redis_fresh, tu_redis_drop},
#endif
#ifdef DUE_WITH_MYSQL
    {"mysql", tu_mysql_unavailable, tu_mysql_fresh, tu_mysql_drop},
#endif
};
#define TU_N_FIXTURES (sizeof(tu_fixtures) / sizeof(tu_fixtures[0]))

/* The fixture tu_fresh_store and tu_drop_store use (tu_select_backend). */
static const tu_fixture *tu_fixture_now = &tu_fixtures[0];

/*
** Select backend `name` for the fixtures that follow: 0 when it can run
** here; else -1, after a NOTE, or under CI=true a FAIL that
** tu_backend_check() turns into a failing exit.
*/
static inline int tu_select_backend(const char *name)
{
	const char *why = "this build does not have it";
	const char *ci = getenv("CI");

	for (size_t i = 0; i < TU_N_FIXTURES; i++) {
		if (strcmp(tu_fixtures[i].name, name) != 0)
			continue;
		if (!(why = tu_fixtures[i].unavailable())) {
			tu_fixture_now = &tu_fixtures[i];
			return 0;
		}
		break;
	}
	if (ci && strcmp(ci, "true") == 0) {
		fprintf(stderr,
			"FAIL: CI=true but the %s suite did not run: "
			"%s\n",
			name, why);
		tu_missing_in_ci = 1;
	} else {
		printf("NOTE: %s suite not run: %s\n", name, why);
	}
	return -1;
}

static inline int tu_backend_check(void) { return tu_missing_in_ci ? 1 : 0; }

/*
** Make a fresh, initialized store of the selected backend and write its
** URL to url.  dir receives its temp directory, or "".
*/
static inline int tu_fresh_store(char *url, size_t n, char *dir, size_t dn)
{
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;
	int rc;

	o.create = true;
	dir[0] = '\0';
	if (tu_fixture_now->fresh(url, n, dir, dn) < 0)
		return -1;
	rc = due_open(&db, url, &o);
	if (rc < 0)
		fprintf(stderr, "init %s: %s\n", url, due_error_last());
	due_close(db);
	return rc < 0 ? -1 : 0;
}

static inline void tu_drop_store(const char *url, const char *dir)
{
	tu_fixture_now->drop(url, dir);
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
static inline due_id add(due_db *db, const char *kind, int64_t delay_us,
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
static inline int32_t claim_one(due_db *db, due_id id, int64_t lease_us)
{
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 10, lease_us), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, id);
	int32_t a = l->items[0].attempt;
	due_task_list_free(l);
	return a;
}

static inline due_task *get(due_db *db, due_id id)
{
	due_task *t = NULL;
	assert_int_equal(due_get(db, &t, id), 0);
	return t;
}

static inline due_state state_of(due_db *db, due_id id)
{
	due_task *t = get(db, id);
	due_state s = t->state;
	due_task_free(t);
	return s;
}
#endif /* TU_TASKS */

/* due_cron_tick() options with a lookahead and the default misfire grace. */
#define TU_LOOKAHEAD(us)                                                       \
	(&(due_cron_tick_opts){DUE_CRON_TICK_OPTS_VERSION, (us),               \
			       DUE_CRON_MISFIRE_GRACE_US})

#endif
