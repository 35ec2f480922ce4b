/*
** test_worker.c - the C worker runtime: handlers in pool and inline mode,
** immediate mode, the completion-transaction hook, a handler seeing its
** lease lost when its task is cancelled, isolated pools, once-mode
** draining and stop, and the idle wheel worker's refills claiming nothing. Real
*threads against a real SQLite store.
*/
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "due.h"
#define TU_FIXTURE /* setup, teardown, open_db, url, dir */
#include "test_util.h"

static due_id add(due_db *db, const char *kind, const char *payload)
{
	due_submitted s;
	assert_int_equal(
	    due_schedule(db, &s, kind, payload, strlen(payload), NULL), 0);
	return s.id;
}

static due_worker *make_worker(due_exec_mode mode, int conc, bool once)
{
	due_worker_opts o = DUE_WORKER_OPTS_INIT;
	due_worker *w = NULL;
	o.url = url;
	o.owner = "test-worker";
	o.mode = mode;
	o.concurrency = conc;
	o.once = once;
	o.poll_us = 10000;
	o.log_level = 0;
	assert_int_equal(due_worker_new(&w, &o), 0);
	return w;
}

typedef struct counter {
	atomic_int calls;
	atomic_int max_parallel;
	atomic_int running;
	pthread_t inline_thread;
} counter;

static int echo_upper(due_job *job, void *payload)
{
	counter *c = payload;
	const due_task *t = due_job_task(job);
	char out[64];
	int now = atomic_fetch_add(&c->running, 1) + 1;
	int prev = atomic_load(&c->max_parallel);
	while (now > prev &&
	       !atomic_compare_exchange_weak(&c->max_parallel, &prev, now))
		;
	tu_sleep_ms(20);
	size_t n = t->payload_len < 63 ? t->payload_len : 63;
	for (size_t i = 0; i < n; i++)
		out[i] = (char)(t->payload[i] >= 'a' && t->payload[i] <= 'z'
				    ? t->payload[i] - 32
				    : t->payload[i]);
	atomic_fetch_add(&c->calls, 1);
	atomic_fetch_sub(&c->running, 1);
	if (strcmp(t->kind, "bad") == 0) {
		due_job_set_error(job, "bad kind fails");
		return 1;
	}
	return due_job_set_result(job, out, n);
}

static void check_result(due_db *db, due_id id, due_state st, const char *res)
{
	due_task *t = NULL;
	assert_int_equal(due_get(db, &t, id), 0);
	assert_int_equal(t->state, st);
	if (res) {
		assert_true(t->has_result);
		assert_memory_equal(t->result, res, strlen(res));
	}
	due_task_free(t);
}

static void test_pool_mode_once(void **state)
{
	(void)state;
	due_db *db = open_db();
	counter c = {0};
	due_id ids[12];
	for (int i = 0; i < 12; i++)
		ids[i] = add(db, "up", "abc");
	due_id bad = add(db, "bad", "x");
	due_worker *w = make_worker(DUE_MODE_POOL, 4, true);
	assert_int_equal(due_worker_register(w, NULL, echo_upper, &c, 0), 0);
	assert_int_equal(due_worker_run(w), 0);
	due_worker_stats st;
	due_worker_stats_get(w, &st);
	due_worker_free(w);
	assert_int_equal(atomic_load(&c.calls), 13);
	assert_true(atomic_load(&c.max_parallel) > 1);
	assert_true(atomic_load(&c.max_parallel) <= 4);
	for (int i = 0; i < 12; i++)
		check_result(db, ids[i], DUE_DONE, "ABC");
	check_result(db, bad, DUE_SCHEDULED, NULL);
	assert_int_equal(st.done, 12);
	assert_int_equal(st.failed, 1);
	due_close(db);
}

static void test_inline_mode_once(void **state)
{
	(void)state;
	due_db *db = open_db();
	counter c = {0};
	due_id ids[5];
	for (int i = 0; i < 5; i++)
		ids[i] = add(db, "up", "xy");
	due_worker *w = make_worker(DUE_MODE_INLINE, 3, true);
	assert_int_equal(due_worker_register(w, "up", echo_upper, &c, 0), 0);
	assert_int_equal(due_worker_run(w), 0);
	due_worker_free(w);
	assert_int_equal(atomic_load(&c.max_parallel), 1); /* one by one */
	for (int i = 0; i < 5; i++)
		check_result(db, ids[i], DUE_DONE, "XY");
	due_close(db);
}

static int write_effect(void *conn, const due_task *task, void *payload)
{
	(void)payload;
	sqlite3_stmt *st;
	int ok = sqlite3_prepare_v2(conn, "INSERT INTO effect VALUES (?1, ?2)",
				    -1, &st, NULL) == SQLITE_OK;
	if (ok) {
		sqlite3_bind_int64(st, 1, task->id);
		sqlite3_bind_int(st, 2, task->attempt);
		ok = sqlite3_step(st) == SQLITE_DONE;
	}
	sqlite3_finalize(st);
	return ok ? 0 : 1;
}

static int hooked(due_job *job, void *payload)
{
	(void)payload;
	due_job_set_tx_hook(job, write_effect, NULL);
	return due_job_set_result(job, "r", 1);
}

static void test_tx_hook(void **state)
{
	(void)state;
	due_db *db = open_db();
	sqlite3 *c;
	assert_int_equal(sqlite3_open(url + 7, &c), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(c,
			 "CREATE TABLE effect (task INTEGER PRIMARY "
			 "KEY, attempt INTEGER)",
			 NULL, NULL, NULL),
	    SQLITE_OK);
	due_id id = add(db, "fx", "");
	due_worker *w = make_worker(DUE_MODE_POOL, 2, true);
	assert_int_equal(due_worker_register(w, "fx", hooked, NULL, 0), 0);
	assert_int_equal(due_worker_run(w), 0);
	due_worker_free(w);
	check_result(db, id, DUE_DONE, "r");
	sqlite3_stmt *st;
	sqlite3_prepare_v2(c, "SELECT count(*) FROM effect WHERE task = ?1", -1,
			   &st, NULL);
	sqlite3_bind_int64(st, 1, id);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(st, 0), 1);
	sqlite3_finalize(st);
	sqlite3_close(c);
	due_close(db);
}

typedef struct cancel_probe {
	atomic_bool started;
	atomic_bool saw_lost;
} cancel_probe;

static int wait_for_cancel(due_job *job, void *payload)
{
	cancel_probe *p = payload;
	atomic_store(&p->started, true);
	for (int i = 0; i < 1000 && due_job_lease_held(job); i++)
		tu_sleep_ms(5);
	atomic_store(&p->saw_lost, !due_job_lease_held(job));
	return due_job_set_result(job, "too late",
				  8); /* the store must refuse */
}

typedef struct runner {
	due_worker *w;
	pthread_t th;
	int rc;
} runner;

static void *run_thread(void *arg)
{
	runner *r = arg;
	r->rc = due_worker_run(r->w);
	return NULL;
}

static void test_cancel_reaches_handler(void **state)
{
	(void)state;
	due_db *db = open_db();
	cancel_probe p = {0};
	due_cancel_outcome co;
	due_worker_opts o = DUE_WORKER_OPTS_INIT;
	runner r = {0};
	o.url = url;
	o.lease_us = 150000; /* renewed every 50 ms */
	o.poll_us = 10000;
	o.log_level = 0;
	assert_int_equal(due_worker_new(&r.w, &o), 0);
	assert_int_equal(due_worker_register(r.w, "c", wait_for_cancel, &p, 0),
			 0);
	due_id id = add(db, "c", "");
	pthread_create(&r.th, NULL, run_thread, &r);
	for (int i = 0; i < 2000 && !atomic_load(&p.started); i++)
		tu_sleep_ms(5);
	assert_true(atomic_load(&p.started));
	assert_int_equal(due_cancel(db, &co, id), 0);
	assert_int_equal(co, DUE_CANCEL_REQUESTED);
	for (int i = 0; i < 2000; i++) {
		due_task *t = NULL;
		assert_int_equal(due_get(db, &t, id), 0);
		bool fin = t->state == DUE_CANCELLED;
		due_task_free(t);
		if (fin)
			break;
		tu_sleep_ms(5);
	}
	due_worker_stop(r.w);
	pthread_join(r.th, NULL);
	assert_int_equal(r.rc, 0);
	due_worker_stats st;
	due_worker_stats_get(r.w, &st);
	due_worker_free(r.w);
	assert_true(atomic_load(&p.saw_lost));
	assert_int_equal(st.lease_lost, 1);
	check_result(db, id, DUE_CANCELLED, NULL);
	due_task *t = NULL;
	assert_int_equal(due_get(db, &t, id), 0);
	assert_false(t->has_result);
	due_task_free(t);
	due_close(db);
}

static atomic_int slow_running;

static atomic_bool slow_release;

/* Blocks until the test releases it: no timing assumption about how long
   the fast tasks take. */
static int slow_handler(due_job *job, void *payload)
{
	(void)job;
	(void)payload;
	atomic_fetch_add(&slow_running, 1);
	while (!atomic_load(&slow_release))
		tu_sleep_ms(2);
	return 0;
}

/* Wait up to 60 s (a hang guard, not a timing claim) for a task's state. */
static bool wait_state(due_db *db, due_id id, due_state want)
{
	for (int k = 0; k < 30000; k++) {
		due_task *t = NULL;
		assert_int_equal(due_get(db, &t, id), 0);
		bool d = t->state == want;
		due_task_free(t);
		if (d)
			return true;
		tu_sleep_ms(2);
	}
	return false;
}

static void test_isolated_pool(void **state)
{
	(void)state;
	due_db *db = open_db();
	counter c = {0};
	due_id slow1 = add(db, "slow", ""), slow2 = add(db, "slow", "");
	due_id fast[8];
	for (int i = 0; i < 8; i++)
		fast[i] = add(db, "fast", "f");
	atomic_store(&slow_running, 0);
	atomic_store(&slow_release, false);
	due_worker *w = make_worker(DUE_MODE_POOL, 2, false);
	assert_int_equal(due_worker_register(w, "slow", slow_handler, NULL, 1),
			 0);
	assert_int_equal(due_worker_register(w, NULL, echo_upper, &c, 0), 0);
	runner r = {w, 0, 0};
	pthread_create(&r.th, NULL, run_thread, &r);
	/* every fast task finishes while a slow one is held: they do not
	   queue behind it; the slow pool of 1 ran exactly one at a time */
	for (int i = 0; i < 8; i++)
		assert_true(wait_state(db, fast[i], DUE_DONE));
	for (int k = 0; k < 30000 && atomic_load(&slow_running) == 0; k++)
		tu_sleep_ms(2);
	assert_int_equal(atomic_load(&slow_running), 1);
	due_task *s2 = NULL, *s1 = NULL;
	assert_int_equal(due_get(db, &s1, slow1), 0);
	assert_int_equal(due_get(db, &s2, slow2), 0);
	assert_true(s1->state != DUE_DONE && s2->state != DUE_DONE);
	due_task_free(s1);
	due_task_free(s2);
	for (int i = 0; i < 8; i++)
		check_result(db, fast[i], DUE_DONE, "F");
	atomic_store(&slow_release, true);
	assert_true(wait_state(db, slow1, DUE_DONE));
	assert_true(wait_state(db, slow2, DUE_DONE));
	assert_int_equal(atomic_load(&slow_running), 2);
	due_worker_stop(w);
	pthread_join(r.th, NULL);
	due_worker_free(w);
	due_close(db);
}

static void test_immediate_submit(void **state)
{
	(void)state;
	due_db *db = open_db();
	counter c = {0};
	due_worker_opts o = DUE_WORKER_OPTS_INIT;
	runner r = {0};
	o.url = url;
	o.poll_us = 60000000; /* discovery would take a minute */
	o.log_level = 0;
	assert_int_equal(due_worker_new(&r.w, &o), 0);
	assert_int_equal(due_worker_register(r.w, NULL, echo_upper, &c, 0), 0);
	pthread_create(&r.th, NULL, run_thread, &r);
	/* the first (empty) claim has happened: from now on only the
	   immediate claim can find the task before the minute-long poll */
	due_worker_stats st = {0};
	for (int i = 0; i < 30000 && st.claim_queries == 0; i++) {
		due_worker_stats_get(r.w, &st);
		tu_sleep_ms(2);
	}
	assert_true(st.claim_queries > 0);
	due_submitted s;
	assert_int_equal(due_worker_submit(r.w, db, &s, "now", "hi", 2, NULL),
			 0);
	assert_true(wait_state(db, s.id, DUE_DONE));
	check_result(db, s.id, DUE_DONE, "HI");
	due_worker_stop(r.w);
	pthread_join(r.th, NULL);
	due_worker_free(r.w);
	due_close(db);
}

/*
** An idle worker with the timing wheel: its refills (one per safety poll)
** claim nothing; a task that becomes due is fired by the wheel and claimed.
*/
static void test_idle_wheel_refills_only(void **state)
{
	(void)state;
	due_db *db = open_db();
	counter c = {0};
	due_worker_opts o = DUE_WORKER_OPTS_INIT;
	due_worker_stats st0, st1;
	runner r = {0};
	o.url = url;
	o.poll_us = 20000; /* safety poll: many refills in a short test */
	o.log_level = 0;
	assert_int_equal(due_worker_new(&r.w, &o), 0);
	assert_int_equal(due_worker_register(r.w, NULL, echo_upper, &c, 0), 0);
	pthread_create(&r.th, NULL, run_thread, &r);
	/* past the start (one claim round), then ten idle refills */
	for (int i = 0; i < 2000; i++) {
		due_worker_stats_get(r.w, &st0);
		if (st0.refills >= 2)
			break;
		tu_sleep_ms(2);
	}
	assert_true(st0.refills >= 2);
	for (int i = 0; i < 2000; i++) {
		due_worker_stats_get(r.w, &st1);
		if (st1.refills >= st0.refills + 10)
			break;
		tu_sleep_ms(2);
	}
	assert_true(st1.refills >= st0.refills + 10);
	assert_int_equal(st1.claim_queries, st0.claim_queries);
	assert_int_equal(st1.reclaim_queries, st0.reclaim_queries);
	/* due in 100 ms: the refill loads it, the wheel fires and claims it */
	due_submitted s;
	due_schedule_opts so = DUE_SCHEDULE_OPTS_INIT;
	so.delay_us = 100000;
	assert_int_equal(due_schedule(db, &s, "later", "x", 1, &so), 0);
	bool done = false;
	for (int i = 0; i < 2500 && !done; i++) {
		due_task *t = NULL;
		assert_int_equal(due_get(db, &t, s.id), 0);
		done = t->state == DUE_DONE;
		due_task_free(t);
		if (!done)
			tu_sleep_ms(2);
	}
	assert_true(done);
	due_worker_stats_get(r.w, &st1);
	assert_true(st1.wheel_fired >= 1);
	assert_true(st1.claim_queries > st0.claim_queries);
	due_worker_stop(r.w);
	pthread_join(r.th, NULL);
	assert_int_equal(r.rc, 0);
	due_worker_free(r.w);
	due_close(db);
}

static void test_register_errors(void **state)
{
	(void)state;
	due_worker *w = make_worker(DUE_MODE_POOL, 1, true);
	counter c = {0};
	assert_int_equal(due_worker_run(w), DUE_EINVAL); /* no handler */
	assert_int_equal(due_worker_register(w, "bad kind", echo_upper, &c, 0),
			 DUE_EINVAL);
	assert_int_equal(due_worker_register(w, NULL, echo_upper, &c, 2),
			 DUE_EINVAL);
	assert_int_equal(due_worker_register(w, "k", NULL, &c, 0), DUE_EINVAL);
	assert_int_equal(due_worker_register(w, "k", echo_upper, &c, 0), 0);
	assert_int_equal(due_worker_register(w, "k", echo_upper, &c, 0),
			 DUE_EINVAL);
	due_worker_free(w);
	due_worker_opts o = DUE_WORKER_OPTS_INIT;
	assert_int_equal(due_worker_new(&w, &o), DUE_EINVAL); /* no url */
	o.url = url;
	o.concurrency = 0;
	assert_int_equal(due_worker_new(&w, &o), DUE_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	    T(test_pool_mode_once),
	    T(test_inline_mode_once),
	    T(test_tx_hook),
	    T(test_cancel_reaches_handler),
	    T(test_isolated_pool),
	    T(test_immediate_submit),
	    T(test_idle_wheel_refills_only),
	    T(test_register_errors),
#undef T
	};
	return cmocka_run_group_tests_name("worker runtime (sqlite)", tests,
					   NULL, NULL);
}
