/*
** test_util.h - fixtures shared by the unit tests: a fresh store per test
** (a scratch store of the backend selected, made and dropped by the
** backend itself: core/admin.h), waiting helpers, and (TU_TASKS) the
** task helpers of the store suites.
**
** Backends.  The store suites run against every backend of this build,
** as the table of src/store/registry.c lists them (tu_fixtures[], filled
** from it); no backend is named here.  A backend with a server runs when
** the environment variable its admin group names is set (DUE_TEST_PG_URL,
** DUE_TEST_REDIS_URL, ...): each test gets a scratch store beside that
** URL (a schema, a key prefix, a database); a store in files gets one in
** a temp directory (`dir`).  A new backend joins the conformance suite by
** its line in registry.c; a suite runs them all with
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

#include "core/admin.h"
#include "due.h"

typedef struct tu_fixture {
	const char *name; /* due_db_backend() of its stores */
} tu_fixture;

/* The backends of this build (tu_fixtures_load fills it). */
#define TU_MAX_FIXTURES 16
static tu_fixture tu_fixtures[TU_MAX_FIXTURES];
static size_t tu_n_fixtures;
static int tu_missing_in_ci;
/* The scratch store of the test under way: its name ("" when none), and
   its store's (the schema, database, key prefix: due_scratch_NAME). */
static char tu_scratch_name[64];
static char tu_scratch_store[64];

/* Fill tu_fixtures from the table of backends; their number. */
static inline size_t tu_fixtures_load(void)
{
	const char *name;

	while (tu_n_fixtures < TU_MAX_FIXTURES &&
	       (name = due__admin_backend(tu_n_fixtures)))
		tu_fixtures[tu_n_fixtures++].name = name;
	return tu_n_fixtures;
}
#define TU_N_FIXTURES tu_fixtures_load()

static inline void tu_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* --- Each backend's own raw helpers, for the tests that need them --- */
#ifdef DUE_WITH_REDIS
#include "tu_redis.h" /* tu_redis_connect, tu_rd_*: raw commands */
#endif
#ifdef DUE_WITH_MYSQL
#include "tu_mysql.h" /* tu_mysql_connect, tu_mysql_run: raw SQL */
#endif

/* The fixture tu_fresh_store and tu_drop_store use (tu_select_backend). */
static const tu_fixture *tu_fixture_now = &tu_fixtures[0];

/*
** Why backend `name` cannot run here (static text), or NULL: its test
** server's variable is not set.
*/
static inline const char *tu_unavailable(const char *name)
{
	static char why[128];
	const char *env = due__admin_test_env(name), *url;

	if (!env)
		return NULL;
	url = getenv(env);
	if (url && *url)
		return NULL;
	snprintf(why, sizeof(why), "%s is not set", env);
	return why;
}

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
		if (!(why = tu_unavailable(name))) {
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
** The selected backend, beside its test server's URL (or, for a store in
** files, on its own); NULL after a message.
*/
static inline due_admin *tu_admin(void)
{
	const char *name = (tu_fixtures_load(), tu_fixture_now->name);
	const char *env = due__admin_test_env(name);
	due_admin *a = NULL;
	int rc = env ? due__admin_open(&a, getenv(env))
		     : due__admin_open_backend(&a, name);

	if (rc < 0)
		fprintf(stderr, "%s fixture: %s\n", name, due_error_last());
	return a;
}

/*
** Make a fresh, initialized store of the selected backend and write its
** URL to url.  dir receives its temp directory (a store in files), or "".
*/
static inline int tu_fresh_store(char *url, size_t n, char *dir, size_t dn)
{
	static int counter;
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_admin *a = tu_admin();
	due_db *db = NULL;
	int rc = -1;

	dir[0] = '\0';
	tu_scratch_name[0] = '\0';
	if (!a)
		return -1;
	if (!due__admin_test_env(due__admin_name(a))) {
		snprintf(dir, dn, "/tmp/due-test-XXXXXX");
		if (!mkdtemp(dir))
			goto done;
	}
	snprintf(tu_scratch_name, sizeof(tu_scratch_name), "due_t_%d_%d",
		 (int)getpid(), ++counter);
	due__scratch_store_name(tu_scratch_name, tu_scratch_store,
				sizeof(tu_scratch_store));
	if (due__scratch_make(a, tu_scratch_name, dir, url, n) < 0) {
		fprintf(stderr, "scratch store: %s\n", due_error_last());
		goto done;
	}
	o.create = true;
	rc = due_open(&db, url, &o);
	if (rc < 0)
		fprintf(stderr, "init %s: %s\n", url, due_error_last());
	due_close(db);
done:
	due__admin_free(a);
	return rc < 0 ? -1 : 0;
}

static inline void tu_drop_store(const char *url, const char *dir)
{
	due_admin *a = tu_admin();
	char cmd[512];

	(void)url;
	if (a && tu_scratch_name[0] &&
	    due__scratch_drop(a, tu_scratch_name, dir) < 0)
		fprintf(stderr, "drop %s: %s\n", tu_scratch_name,
			due_error_last());
	due__admin_free(a);
	if (!dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
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
