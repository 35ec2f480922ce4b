/*
** test_worker.c - the C worker runtime: handlers in pool and inline mode,
** immediate mode, the completion-transaction hook, a handler seeing its
** lease lost when its task is cancelled, isolated pools, once-mode
** draining and stop, the idle wheel worker's refills claiming nothing, and
** flow control: time limits (own and the kind's), claims held back by a
** running limit without spinning, resume waking the worker, once-mode with
** paused and held kinds, DUE_PRIORITY/DUE_GROUP; fast pools and their
** relay claims.  Real threads against a
** real SQLite store.
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
	o.lease_us = 600000; /* renewed every 200 ms */
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

/* ------------------------------------------------------------------ */
/* Flow control: time limits, held-back kinds, pause and resume        */
/* ------------------------------------------------------------------ */

typedef struct limit_probe {
	atomic_int calls, stopped, returned_ok;
	atomic_llong seen_timeout_us;
} limit_probe;

/*
** Works until told to stop (the keeper's time limit), then returns 0 with
** a result anyway: the try must still fail, and no result be committed.
** A 20 s guard keeps a broken worker from hanging the test.
*/
static int until_stopped(due_job *job, void *payload)
{
	limit_probe *p = payload;
	atomic_fetch_add(&p->calls, 1);
	atomic_store(&p->seen_timeout_us, due_job_task(job)->timeout_us);
	for (int i = 0; i < 4000 && due_job_lease_held(job); i++)
		tu_sleep_ms(5);
	if (!due_job_lease_held(job))
		atomic_fetch_add(&p->stopped, 1);
	return due_job_set_result(job, "too late", 8);
}

/* Returns at once, well within any time limit. */
static int quick_ok(due_job *job, void *payload)
{
	limit_probe *p = payload;
	atomic_fetch_add(&p->calls, 1);
	atomic_fetch_add(&p->returned_ok, 1);
	return due_job_set_result(job, "ok", 2);
}

static void start_runner(runner *r, int64_t poll_us, bool no_wheel)
{
	due_worker_opts o = DUE_WORKER_OPTS_INIT;
	o.url = url;
	o.poll_us = poll_us;
	o.no_wheel = no_wheel;
	o.log_level = 0;
	assert_int_equal(due_worker_new(&r->w, &o), 0);
}

static void stop_runner(runner *r, due_worker_stats *st)
{
	due_worker_stop(r->w);
	pthread_join(r->th, NULL);
	assert_int_equal(r->rc, 0);
	if (st)
		due_worker_stats_get(r->w, st);
	due_worker_free(r->w);
}

/* DEAD after `tries` tries, each TIMED_OUT with "timed out after DUR". */
static void check_timed_out(due_db *db, due_id id, int tries, int64_t us)
{
	char dur[48], want[80];
	due_task *t = NULL;

	due_duration_format(dur, sizeof(dur), us);
	snprintf(want, sizeof(want), "timed out after %s", dur);
	assert_int_equal(due_get(db, &t, id), 0);
	assert_int_equal(t->state, DUE_DEAD);
	assert_false(t->has_result);
	assert_int_equal((int)t->n_attempts, tries);
	for (size_t i = 0; i < t->n_attempts; i++) {
		assert_string_equal(t->attempts[i].outcome, "TIMED_OUT");
		assert_non_null(t->attempts[i].error);
		assert_string_equal(t->attempts[i].error, want);
	}
	assert_string_equal(t->last_error, want);
	due_task_free(t);
}

/*
** An in-process handler past its own time limit sees due_job_lease_held()
** turn false; its try fails TIMED_OUT although it returned 0, and the
** task goes DEAD after its two attempts.  A task with the same limit whose
** handler returns in time is DONE.
*/
static void test_task_timeout_inprocess(void **state)
{
	(void)state;
	due_db *db = open_db();
	limit_probe p = {0}, q = {0};
	due_schedule_opts so = DUE_SCHEDULE_OPTS_INIT;
	due_submitted slow, fast;
	due_worker_stats st;
	runner r = {0};

	so.max_attempts = 2;
	so.backoff_us = 10000;
	so.timeout_us = 1000000; /* under ASan and a loaded -j, 300 ms was
				    close to what the quick one can take */
	assert_int_equal(due_schedule(db, &slow, "slow", "", 0, &so), 0);
	assert_int_equal(due_schedule(db, &fast, "fast", "", 0, &so), 0);
	start_runner(&r, 20000, false);
	assert_int_equal(due_worker_register(r.w, "slow", until_stopped, &p, 0),
			 0);
	assert_int_equal(due_worker_register(r.w, "fast", quick_ok, &q, 0), 0);
	pthread_create(&r.th, NULL, run_thread, &r);
	assert_true(wait_state(db, slow.id, DUE_DEAD));
	assert_true(wait_state(db, fast.id, DUE_DONE));
	stop_runner(&r, &st);
	check_timed_out(db, slow.id, 2, so.timeout_us);
	check_result(db, fast.id, DUE_DONE, "ok");
	assert_int_equal(atomic_load(&p.calls), 2);
	assert_int_equal(atomic_load(&p.stopped), 2);
	assert_int_equal(atomic_load(&p.seen_timeout_us), so.timeout_us);
	assert_int_equal(st.failed, 1); /* the first try; the second: dead */
	assert_int_equal(st.dead, 1);
	assert_int_equal(st.done, 1);
	assert_int_equal(st.lease_lost, 0);
	due_close(db);
}

/* Ignores every stop until the test lets it go. */
static int deaf(due_job *job, void *payload)
{
	atomic_bool *release = payload;
	(void)job;
	for (int i = 0; i < 60000 && !atomic_load(release); i++)
		tu_sleep_ms(1);
	return 0;
}

/*
** A handler that ignores its time limit does not hold its task for ever:
** past max(grace, lease) after the limit the keeper stops renewing, the
** lease expires and the store takes the task back (one attempt: DEAD,
** LEASE_EXPIRED) while the handler still runs.
*/
static void test_timeout_deaf_handler(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts so = DUE_SCHEDULE_OPTS_INIT;
	due_worker_opts o = DUE_WORKER_OPTS_INIT;
	atomic_bool release = false;
	due_submitted s;
	due_task *t = NULL;
	runner r = {0};

	so.max_attempts = 1;
	so.timeout_us = 200000;
	assert_int_equal(due_schedule(db, &s, "deaf", "", 0, &so), 0);
	o.url = url;
	o.poll_us = 20000;
	o.lease_us = 300000;
	o.grace_us = 0;
	o.log_level = 0;
	assert_int_equal(due_worker_new(&r.w, &o), 0);
	assert_int_equal(due_worker_register(r.w, "deaf", deaf, &release, 0),
			 0);
	pthread_create(&r.th, NULL, run_thread, &r);
	assert_true(wait_state(db, s.id, DUE_DEAD));
	atomic_store(&release, true);
	stop_runner(&r, NULL);
	assert_int_equal(due_get(db, &t, s.id), 0);
	assert_int_equal(t->n_attempts, 1);
	assert_string_equal(t->attempts[0].outcome, "LEASE_EXPIRED");
	due_task_free(t);
	due_close(db);
}

/* The kind's time limit applies to a task without its own (inline mode). */
static void test_kind_timeout_inline(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	due_schedule_opts so = DUE_SCHEDULE_OPTS_INIT;
	limit_probe p = {0};
	due_submitted s;
	runner r = {0};
	due_worker_opts o = DUE_WORKER_OPTS_INIT;

	ks.timeout_us = 250000;
	assert_int_equal(due_kind_set(db, "kt", &ks), 0);
	so.max_attempts = 2;
	so.backoff_us = 10000;
	assert_int_equal(due_schedule(db, &s, "kt", "", 0, &so), 0);
	o.url = url;
	o.mode = DUE_MODE_INLINE;
	o.poll_us = 20000;
	o.log_level = 0;
	assert_int_equal(due_worker_new(&r.w, &o), 0);
	assert_int_equal(due_worker_register(r.w, "kt", until_stopped, &p, 0),
			 0);
	pthread_create(&r.th, NULL, run_thread, &r);
	assert_true(wait_state(db, s.id, DUE_DEAD));
	stop_runner(&r, NULL);
	check_timed_out(db, s.id, 2, ks.timeout_us);
	assert_int_equal(atomic_load(&p.stopped), 2);
	assert_int_equal(atomic_load(&p.seen_timeout_us), ks.timeout_us);
	due_close(db);
}

typedef struct gate {
	atomic_int running, max_running, calls;
	atomic_bool open;
} gate;

/* Blocks until the test opens the gate; counts how many run at once. */
static int gated(due_job *job, void *payload)
{
	gate *g = payload;
	int now = atomic_fetch_add(&g->running, 1) + 1;
	int prev = atomic_load(&g->max_running);
	(void)job;
	while (now > prev &&
	       !atomic_compare_exchange_weak(&g->max_running, &prev, now))
		;
	while (!atomic_load(&g->open))
		tu_sleep_ms(2);
	atomic_fetch_add(&g->calls, 1);
	atomic_fetch_sub(&g->running, 1);
	return 0;
}

static int count_state(due_db *db, const due_id *ids, int n, due_state want)
{
	int k = 0;
	for (int i = 0; i < n; i++) {
		due_task *t = NULL;
		assert_int_equal(due_get(db, &t, ids[i]), 0);
		k += t->state == want;
		due_task_free(t);
	}
	return k;
}

/* Wait (up to 60 s, a hang guard) until n tasks are DONE; assert they are. */
static void wait_done(due_db *db, const due_id *ids, int n)
{
	for (int i = 0; i < 30000 && count_state(db, ids, n, DUE_DONE) < n;
	     i += 10)
		tu_sleep_ms(20);
	assert_int_equal(count_state(db, ids, n, DUE_DONE), n);
}

/*
** A kind with max_running 1, a handler that holds its slot and 19 more due
** tasks: while they are held back, the worker claims again only after the
** store's retry_in_us, never in a loop.  The bound on claim queries is a
** resource check (a spinning claimer makes thousands in the hold), not a
** timing claim; the hold itself is a plain sleep.  Once the gate opens,
** every task runs, one at a time.  Both discovery modes.
*/
static void held_no_spin(bool no_wheel)
{
	due_db *db = open_db();
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	due_worker_stats st0, st1;
	gate g = {0};
	due_id ids[20];
	runner r = {0};

	ks.max_running = 1;
	assert_int_equal(due_kind_set(db, "held", &ks), 0);
	for (int i = 0; i < 20; i++)
		ids[i] = add(db, "held", "");
	start_runner(&r, no_wheel ? 1000000 : 0, no_wheel);
	assert_int_equal(due_worker_register(r.w, "held", gated, &g, 0), 0);
	pthread_create(&r.th, NULL, run_thread, &r);
	for (int i = 0; i < 30000 && atomic_load(&g.running) == 0; i++)
		tu_sleep_ms(2);
	assert_int_equal(atomic_load(&g.running), 1);
	due_worker_stats_get(r.w, &st0);
	tu_sleep_ms(2000); /* the hold */
	due_worker_stats_get(r.w, &st1);
	assert_int_equal(atomic_load(&g.running), 1);
	assert_int_equal(st1.claimed, 1);
	/* 100 ms re-polls: about 20 in the hold; a spin would be thousands */
	assert_true(st1.claim_queries - st0.claim_queries < 100);
	assert_true(st1.claim_queries - st0.claim_queries >= 1);
	atomic_store(&g.open, true);
	wait_done(db, ids, 20);
	assert_int_equal(atomic_load(&g.max_running), 1);
	stop_runner(&r, NULL);
	due_close(db);
}

/*
** All n gated handlers must be running at once (a 60 s hang guard); then
** the gate opens and the n tasks must end DONE.
*/
static void gate_all_running(gate *g, due_db *db, const due_id *ids, int n)
{
	for (int i = 0; i < 30000 && atomic_load(&g->running) < n; i++)
		tu_sleep_ms(2);
	assert_int_equal(atomic_load(&g->running), n);
	atomic_store(&g->open, true);
	wait_done(db, ids, n);
}

/* A quick no-op, unless the payload says "gate": then gated(). */
static int quick_or_gated(due_job *job, void *payload)
{
	gate *g = payload;
	const due_task *t = due_job_task(job);
	if (t->payload_len == 4 && memcmp(t->payload, "gate", 4) == 0)
		return gated(job, g);
	atomic_fetch_add(&g->calls, 1);
	return 0;
}

/* n tasks in one transaction, all due now, each with this payload. */
static void add_batch(due_db *db, due_id *ids, int n, const char *kind,
		      const char *payload)
{
	due_submit items[64];
	due_submitted out[64];
	for (int done = 0; done < n;) {
		int k = n - done < 64 ? n - done : 64;
		for (int i = 0; i < k; i++)
			items[i] = (due_submit){kind, payload, strlen(payload),
						DUE_SCHEDULE_OPTS_INIT};
		assert_int_equal(due_schedule_batch(db, out, items, (size_t)k),
				 0);
		for (int i = 0; i < k; i++)
			ids[done + i] = out[i].id;
		done += k;
	}
}

/* A worker of `conc` slots in r with fn for kind (quiet), not started. */
static void new_runner(runner *r, int conc, const char *kind, due_handler_fn fn,
		       void *arg)
{
	due_worker_opts o = DUE_WORKER_OPTS_INIT;
	o.url = url;
	o.concurrency = conc;
	o.log_level = 0;
	assert_int_equal(due_worker_new(&r->w, &o), 0);
	assert_int_equal(due_worker_register(r->w, kind, fn, arg, 0), 0);
}

/*
** Pool threads are woken in a chain (pool.c): the claimer wakes one, and
** each that takes a job wakes the next while jobs are left.  Handlers that
** block must still all run at once: 8 slots, 8 tasks held by a gate, all 8
** running before it opens.
*/
static void test_pool_starts_every_slot(void **state)
{
	(void)state;
	due_db *db = open_db();
	gate g = {0};
	due_id ids[8];
	runner r = {0};

	for (int i = 0; i < 8; i++)
		ids[i] = add(db, "gated", "");
	new_runner(&r, 8, "gated", gated, &g);
	pthread_create(&r.th, NULL, run_thread, &r);
	gate_all_running(&g, db, ids, 8);
	assert_int_equal(atomic_load(&g.max_running), 8);
	stop_runner(&r, NULL);
	due_close(db);
}

/*
** A fast pool (pool.c: handlers that return within microseconds) runs a
** claim's jobs one after the other on the thread the claim woke.  A job
** that then blocks must not hold the rest back: 64 quick tasks make the
** pool fast, then 8 tasks submitted in one transaction (claimed in one
** batch) all block on a gate; all 8 must be running at once before it
** opens, which only the stall check (waking the other threads) allows.
*/
static void test_fast_pool_slow_job(void **state)
{
	(void)state;
	due_db *db = open_db();
	gate g = {0};
	due_id warm[64], ids[8];
	runner r = {0};

	new_runner(&r, 8, "gated", gated, &g);
	atomic_store(&g.open, true);
	for (int i = 0; i < 64; i++)
		warm[i] = add(db, "gated", "");
	pthread_create(&r.th, NULL, run_thread, &r);
	wait_done(db, warm, 64);

	atomic_store(&g.open, false);
	atomic_store(&g.max_running, 0);
	add_batch(db, ids, 8, "gated", "");
	gate_all_running(&g, db, ids, 8);
	stop_runner(&r, NULL);
	due_close(db);
}

/*
** Relay claims (claimer.c): while a fast pool drains a backlog, its thread
** claims the next batch itself and queues it without waking the others.
** 1,000 quick tasks, then 8 that block: the relay claims those too, and
** the stall check must still start all 8 at once (without it, the relay's
** thread runs them one after the other).
*/
static void test_relay_slow_batch(void **state)
{
	(void)state;
	due_db *db = open_db();
	gate g = {0};
	static due_id quick[1000];
	due_id ids[8];
	runner r = {0};

	new_runner(&r, 8, "q", quick_or_gated, &g);
	add_batch(db, quick, 1000, "q", "");
	add_batch(db, ids, 8, "q", "gate");
	pthread_create(&r.th, NULL, run_thread, &r);
	gate_all_running(&g, db, ids, 8);
	wait_done(db, quick, 1000);
	assert_int_equal(atomic_load(&g.calls), 1008);
	stop_runner(&r, NULL);
	due_close(db);
}

/*
** A stop while relays drain a backlog: every try claimed (by the claimer
** or a relay) runs once and is committed before due_worker_run() returns;
** none is left CLAIMED, none runs twice.
*/
static void test_relay_stop(void **state)
{
	(void)state;
	due_db *db = open_db();
	gate g = {.open = true};
	static due_id ids[5000];
	due_worker_stats st;
	due_stats ss;
	runner r = {0};

	new_runner(&r, 4, "q", quick_or_gated, &g);
	add_batch(db, ids, 5000, "q", "");
	pthread_create(&r.th, NULL, run_thread, &r);
	for (int i = 0; i < 30000 && atomic_load(&g.calls) < 500; i++)
		tu_sleep_ms(1);
	stop_runner(&r, &st);
	assert_int_equal(due_stats_get(db, &ss), 0);
	assert_int_equal(ss.counts[DUE_CLAIMED], 0);
	assert_true(st.claimed >= 500);
	assert_int_equal(st.done, st.claimed);
	assert_int_equal(atomic_load(&g.calls), st.claimed);
	assert_int_equal(count_state(db, ids, 5000, DUE_DONE), st.done);
	due_close(db);
}

static void test_held_no_spin_wheel(void **state)
{
	(void)state;
	held_no_spin(false);
}

static void test_held_no_spin_poll(void **state)
{
	(void)state;
	held_no_spin(true);
}

/*
** Resuming a paused kind wakes the worker through the store's
** notification: with a safety poll of an hour, only the wake-up can get
** its tasks claimed before the test's (hang-guard) deadline.
*/
static void test_resume_wakes(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	counter c = {0};
	due_worker_stats st;
	runner r = {0};
	due_id ids[3];

	ks.paused = 1;
	assert_int_equal(due_kind_set(db, "p", &ks), 0);
	for (int i = 0; i < 3; i++)
		ids[i] = add(db, "p", "x");
	start_runner(&r, 3600LL * 1000000, false);
	assert_int_equal(due_worker_register(r.w, NULL, echo_upper, &c, 0), 0);
	pthread_create(&r.th, NULL, run_thread, &r);
	/* running, and another kind is claimed at once: the paused one not */
	due_id other = add(db, "other", "y");
	assert_true(wait_state(db, other, DUE_DONE));
	assert_int_equal(count_state(db, ids, 3, DUE_SCHEDULED), 3);
	ks.paused = 0;
	assert_int_equal(due_kind_set(db, "p", &ks), 0);
	for (int i = 0; i < 3; i++)
		assert_true(wait_state(db, ids[i], DUE_DONE));
	stop_runner(&r, &st);
	assert_true(st.notifications >= 2); /* the submit's and the resume's */
	due_close(db);
}

/*
** Once-mode: tasks of a paused kind do not keep the worker running; tasks
** held back by a running limit do, until they are all done.
*/
static void test_once_paused_and_held(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	counter c = {0};
	due_id paused = add(db, "p", "x"), held[5];
	due_worker *w;

	ks.paused = 1;
	assert_int_equal(due_kind_set(db, "p", &ks), 0);
	ks = (due_kind_settings)DUE_KIND_SETTINGS_INIT;
	ks.max_running = 1;
	assert_int_equal(due_kind_set(db, "one", &ks), 0);
	for (int i = 0; i < 5; i++)
		held[i] = add(db, "one", "y");
	w = make_worker(DUE_MODE_POOL, 4, true);
	assert_int_equal(due_worker_register(w, NULL, echo_upper, &c, 0), 0);
	assert_int_equal(due_worker_run(w), 0);
	due_worker_free(w);
	assert_int_equal(count_state(db, held, 5, DUE_DONE), 5);
	assert_int_equal(atomic_load(&c.max_parallel), 1);
	check_result(db, paused, DUE_SCHEDULED, NULL);
	due_close(db);
}

/* A command sees the task's priority and group in its environment. */
static void test_exec_priority_group_env(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_exec_opts eo = DUE_EXEC_OPTS_INIT;
	due_schedule_opts so = DUE_SCHEDULE_OPTS_INIT;
	due_submitted a, b;
	due_worker *w;

	eo.command = "printf '%s/%s' \"$DUE_PRIORITY\" \"${DUE_GROUP-none}\"";
	so.priority = -7;
	so.group = "cust-1";
	assert_int_equal(due_schedule(db, &a, "env", "", 0, &so), 0);
	so.priority = 0;
	so.group = NULL;
	assert_int_equal(due_schedule(db, &b, "env", "", 0, &so), 0);
	w = make_worker(DUE_MODE_POOL, 2, true);
	assert_int_equal(
	    due_worker_register(w, "env", due_exec_handler, &eo, 0), 0);
	assert_int_equal(due_worker_run(w), 0);
	due_worker_free(w);
	check_result(db, a.id, DUE_DONE, "-7/cust-1");
	check_result(db, b.id, DUE_DONE, "0/none");
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
	    T(test_task_timeout_inprocess),
	    T(test_timeout_deaf_handler),
	    T(test_kind_timeout_inline),
	    T(test_held_no_spin_wheel),
	    T(test_pool_starts_every_slot),
	    T(test_fast_pool_slow_job),
	    T(test_relay_slow_batch),
	    T(test_relay_stop),
	    T(test_held_no_spin_poll),
	    T(test_resume_wakes),
	    T(test_once_paused_and_held),
	    T(test_exec_priority_group_env),
#undef T
	};
	return cmocka_run_group_tests_name("worker runtime (sqlite)", tests,
					   NULL, NULL);
}
