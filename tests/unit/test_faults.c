/*
** test_faults.c - the stores under odd inputs and failing disks, through
** the public API, on every backend of tu_fixtures[] (issue 22 points 6, 7,
** 10; issue 17 point 4):
**
**  - a due time of the epoch itself is kept (0 is an instant, not "unset");
**  - a task that completes DONE after a failed try shows no last_error
**    (its attempt history keeps the error);
**  - SQLite: a FIFO in place of the wake file never blocks a submit;
**  - SQLite: a disk that fails the n-th write or sync (a VFS over the
**    default one, SQLite's own way of testing I/O errors) gives a clean
**    DUE_ESTORE naming the store and the cause, rolls back, and leaves
**    the file intact with every acknowledged change in it, for every n.
**
** The process-level side (real `due` processes under `ulimit -f` and an
** LD_PRELOAD shim, a read-only store as another user) is
** tests/cli/test_store_faults.sh.
*/
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "due.h"
#define TU_FIXTURE /* setup, teardown, open_db, url, dir */
#define TU_TASKS   /* add, claim_one, get, state_of */
#include "test_util.h"

static const char *backend_now;

/* ------------------------------------------------------------------ */
/* Due times: the epoch is an instant (issue 22 point 7)               */
/* ------------------------------------------------------------------ */

static due_id add_at(due_db *db, due_time at)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	o.at = at;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	return s.id;
}

static void test_at_epoch_is_kept(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submit items[2] = {{"k", "", 0, DUE_SCHEDULE_OPTS_INIT},
			       {"k", "", 0, DUE_SCHEDULE_OPTS_INIT}};
	due_submitted s, b[2];
	due_time now;
	due_task *t;

	assert_int_equal(o.at, DUE_TIME_NONE);
	due_id epoch = add_at(db, 0);
	due_id second = add_at(db, 1000000);
	t = get(db, epoch);
	assert_int_equal(t->due_at, 0);
	due_task_free(t);
	t = get(db, second);
	assert_int_equal(t->due_at, 1000000);
	due_task_free(t);

	/* a batch keeps it too, beside an unset one (due now) */
	items[0].opts.at = 0;
	assert_int_equal(due_schedule_batch(db, b, items, 2), 0);
	assert_int_equal(due_now(db, &now), 0);
	t = get(db, b[0].id);
	assert_int_equal(t->due_at, 0);
	due_task_free(t);
	t = get(db, b[1].id);
	assert_true(t->due_at > now - 60000000 && t->due_at <= now);
	due_task_free(t);

	/* due long ago: claimed first, ordered by due time */
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 1, 30000000), 0);
	assert_int_equal(l->count, 1);
	assert_true(l->items[0].id == epoch || l->items[0].id == b[0].id);
	assert_int_equal(l->items[0].due_at, 0);
	due_task_list_free(l);

	/* before the epoch: refused, naming it; a delay beside it too */
	o.at = -1;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "before 1970"));
	o.at = 0;
	o.delay_us = 1000000;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "not both"));
	due_close(db);
}

/*
** Callers built against version 1 of the options (0 meant "unset", an
** `at` won over a delay) keep their meaning; a zero-filled struct gets
** every default; an unknown version is refused.
*/
static void test_at_old_versions(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o;
	due_submitted s;
	due_time now;
	due_task *t;

	assert_int_equal(due_now(db, &now), 0);
	memset(&o, 0, sizeof(o));
	o.version = 1;
	o.max_attempts = 5;
	o.delay_us = 3600000000LL; /* at 0: unset, the delay decides */
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	t = get(db, s.id);
	assert_true(t->due_at >= now + 3600000000LL - 60000000);
	due_task_free(t);
	o.at = 5000000; /* version 1: at wins over the delay */
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	t = get(db, s.id);
	assert_int_equal(t->due_at, 5000000);
	due_task_free(t);

	memset(&o, 0, sizeof(o)); /* version 0: every default, due now */
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	t = get(db, s.id);
	assert_true(t->due_at >= now - 60000000);
	assert_int_equal(t->max_attempts, 5);
	due_task_free(t);

	o.version = DUE_SCHEDULE_OPTS_VERSION + 1;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "version"));
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* DONE clears last_error (issue 22 point 6)                           */
/* ------------------------------------------------------------------ */

static due_id add_retrying(due_db *db)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	o.max_attempts = 3;
	o.backoff_us = 0; /* the retry is due at once */
	o.backoff_cap_us = 0;
	assert_int_equal(due_schedule(db, &s, "k", "p", 1, &o), 0);
	return s.id;
}

/* Claim `id` and fail its try with `error`: it is due again at once. */
static void fail_once(due_db *db, due_id id, const char *error)
{
	due_fail_outcome fo;
	int32_t a = claim_one(db, id, 30000000);

	assert_int_equal(due_fail(db, &fo, id, a, error), 0);
	assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
	due_task *t = get(db, id);
	assert_string_equal(t->last_error, error);
	due_task_free(t);
}

static void assert_done_without_error(due_db *db, due_id id)
{
	due_task *t = get(db, id);

	assert_int_equal(t->state, DUE_DONE);
	assert_null(t->last_error);
	assert_int_equal(t->n_attempts, 2);
	assert_string_equal(t->attempts[0].outcome, "FAILED");
	assert_string_equal(t->attempts[0].error, "boom");
	assert_string_equal(t->attempts[1].outcome, "DONE");
	due_task_free(t);
}

static void test_done_clears_last_error(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_complete_outcome co;
	due_id a = add_retrying(db);

	fail_once(db, a, "boom");
	int32_t at = claim_one(db, a, 30000000);
	assert_int_equal(due_complete(db, &co, a, at, "ok", 2), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_done_without_error(db, a);

	/* the worker's path: complete a batch and claim in one call */
	due_id b = add_retrying(db);
	fail_once(db, b, "boom");
	due_completion c = {b, claim_one(db, b, 30000000), "ok", 2, 0};
	due_claim_opts copts = DUE_CLAIM_OPTS_INIT;
	due_task_list *l = NULL;
	copts.owner = "w1";
	assert_int_equal(due_complete_and_claim(db, &c, 1, &copts, &l), 0);
	assert_int_equal(c.outcome, DUE_COMPLETE_DONE);
	due_task_list_free(l);
	assert_done_without_error(db, b);

	/* a try that fails for good keeps its error */
	due_id d = add_retrying(db);
	due_fail_outcome fo;
	for (int i = 0; i < 3; i++) {
		int32_t n = claim_one(db, d, 30000000);
		assert_int_equal(due_fail(db, &fo, d, n, "still boom"), 0);
	}
	assert_int_equal(fo, DUE_FAIL_DEAD);
	due_task *t = get(db, d);
	assert_string_equal(t->last_error, "still boom");
	due_task_free(t);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* SQLite: the wake file is never waited on (issue 22 point 10)        */
/* ------------------------------------------------------------------ */

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "FAIL: a submit blocked on the wake FIFO\n";
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(98);
	_exit(99);
}

static void test_wake_fifo_never_blocks(void **state)
{
	(void)state;
	char wake[600];
	due_submitted s;
	int fd;

	if (strcmp(backend_now, "sqlite") != 0)
		skip();
	snprintf(wake, sizeof(wake), "%s/due.db-wake", dir);
	unlink(wake);
	assert_int_equal(mkfifo(wake, 0666), 0);
	due_db *db = open_db();
	signal(SIGALRM, on_alarm);
	alarm(20); /* a hang fails the binary instead of the ctest timeout */
	assert_int_equal(due_schedule(db, &s, "k", "", 0, NULL), 0);
	assert_true(s.id > 0);
	assert_int_equal(due_notify(db), 0);
	/* a listener is told why it must poll, and does not block either */
	assert_int_equal(due_listen(db, &fd), DUE_ESTATE);
	assert_non_null(strstr(due_error_last(), "not a regular file"));
	alarm(0);
	due_close(db);
}

/* ------------------------------------------------------------------ */

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(test_at_epoch_is_kept),
		T(test_at_old_versions),
		T(test_done_clears_last_error),
		T(test_wake_fifo_never_blocks),
#undef T
	};
	int failed = 0;

	for (size_t b = 0; b < TU_N_FIXTURES; b++) {
		char name[64];
		if (tu_select_backend(tu_fixtures[b].name) != 0)
			continue;
		backend_now = tu_fixtures[b].name;
		snprintf(name, sizeof(name), "store faults (%s)", backend_now);
		failed += _cmocka_run_group_tests(name, tests,
						  sizeof(tests) / sizeof(tests[0]),
						  NULL, NULL);
	}
	return failed ? 1 : tu_backend_check();
}
