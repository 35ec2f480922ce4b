/*
** test_store.c - the store conformance suite: every transition of
** CONTRACT §2 and every refusal, through the public API, against a real
** store.  Each test gets a fresh store.  The suite runs on SQLite always,
** and on PostgreSQL too when DUE_TEST_PG_URL names a database (each test
** then works in its own schema, see fresh_url()).
**
** Waits are for conditions with a deadline, never a bare sleep: a lease of
** 1 ms is expired once the store's clock has moved past it, which
** wait_reclaim() polls for.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "due.h"
#define TU_FIXTURE /* setup, teardown, open_db, url, dir */
#define TU_TASKS   /* add, claim_one, get, state_of */
#include "test_util.h"


/* Reclaim until the lease of `id` has been taken back (deadline 5 s). */
static void wait_reclaim(due_db *db, due_id id)
{
	for (int i = 0; i < 5000; i++) {
		due_reclaimed r;
		assert_int_equal(due_reclaim_expired(db, &r), 0);
		if (state_of(db, id) != DUE_CLAIMED)
			return;
		tu_sleep_ms(1);
	}
	fail_msg("lease of task %lld was never reclaimed", (long long)id);
}

/* ------------------------------------------------------------------ */

static void test_happy_path(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id id = add(db, "email", 0, 5);
	due_task_list *l = NULL;
	due_complete_outcome co;

	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 10, 30000000), 0);
	assert_int_equal(l->count, 1);
	due_task *c = &l->items[0];
	assert_int_equal(c->state, DUE_CLAIMED);
	assert_int_equal(c->attempt, 1);
	assert_string_equal(c->lease_owner, "w1");
	assert_true(c->lease_until > c->due_at);
	assert_memory_equal(c->payload, "p", 1);
	due_task_list_free(l);

	assert_int_equal(due_complete(db, &co, id, 1, "ok", 2), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_DONE);
	assert_true(t->has_result);
	assert_int_equal(t->result_len, 2);
	assert_memory_equal(t->result, "ok", 2);
	assert_null(t->lease_owner);
	assert_int_equal(t->lease_until, 0);
	assert_int_equal(t->n_attempts, 1);
	assert_string_equal(t->attempts[0].outcome, "DONE");
	assert_string_equal(t->attempts[0].worker, "w1");
	assert_true(t->attempts[0].ended_at >= t->attempts[0].claimed_at);
	due_task_free(t);
	due_close(db);
}

static void test_not_before_due(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id id = add(db, "k", 300000, 5);
	due_task_list *l = NULL;
	int empty_claims = 0;

	for (;;) {
		assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 10, 30000000), 0);
		if (l->count)
			break;
		due_task_list_free(l);
		empty_claims++;
		tu_sleep_ms(5);
		assert_true(empty_claims < 2000);
	}
	assert_true(empty_claims > 0);
	assert_int_equal(l->items[0].id, id);
	due_task_list_free(l);
	due_task *t = get(db, id);
	assert_true(t->attempts[0].claimed_at >= t->due_at);
	due_task_free(t);
	due_close(db);
}

static void test_claim_limit_and_kinds(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_task_list *l = NULL;
	const char *kinds[] = {"b"};

	for (int i = 0; i < 25; i++)
		add(db, "a", 0, 5);
	add(db, "b", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", kinds, 1, 10, 30000000), 0);
	assert_int_equal(l->count, 1);
	assert_string_equal(l->items[0].kind, "b");
	due_task_list_free(l);
	int sizes[4];
	for (int i = 0; i < 4; i++) {
		assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, 30000000), 0);
		sizes[i] = (int)l->count;
		due_task_list_free(l);
	}
	assert_int_equal(sizes[0], 10);
	assert_int_equal(sizes[1], 10);
	assert_int_equal(sizes[2], 5);
	assert_int_equal(sizes[3], 0);
	due_close(db);
}

static void test_stale_after_reclaim(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id id = add(db, "k", 0, 5);
	due_complete_outcome co;
	due_fail_outcome fo;
	due_extend_outcome eo;

	assert_int_equal(claim_one(db, id, 1000), 1);
	wait_reclaim(db, id);
	assert_int_equal(state_of(db, id), DUE_SCHEDULED);
	assert_int_equal(claim_one(db, id, 30000000), 2);

	assert_int_equal(due_complete(db, &co, id, 1, "late", 4), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(due_fail(db, &fo, id, 1, "late"), 0);
	assert_int_equal(fo, DUE_FAIL_REJECTED_STALE);
	assert_int_equal(due_extend(db, &eo, id, 1, 30000000), 0);
	assert_int_equal(eo, DUE_EXTEND_LOST);

	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_CLAIMED);
	assert_int_equal(t->attempt, 2);
	assert_false(t->has_result);
	assert_int_equal(t->n_attempts, 2);
	assert_string_equal(t->attempts[0].outcome, "LEASE_EXPIRED");
	assert_string_equal(t->attempts[0].late_commit, "REJECTED_STALE");
	assert_string_equal(t->attempts[1].outcome, "RUNNING");
	due_task_free(t);

	assert_int_equal(due_extend(db, &eo, id, 2, 30000000), 0);
	assert_int_equal(eo, DUE_EXTEND_OK);
	assert_int_equal(due_complete(db, &co, id, 2, "new", 3), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	t = get(db, id);
	assert_memory_equal(t->result, "new", 3);
	due_task_free(t);
	due_close(db);
}

static void test_terminal_immutable(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id id = add(db, "k", 0, 5);
	due_complete_outcome co;
	due_fail_outcome fo;
	due_cancel_outcome cancel;

	claim_one(db, id, 30000000);
	assert_int_equal(due_complete(db, &co, id, 1, "r1", 2), 0);
	assert_int_equal(due_complete(db, &co, id, 1, "r2", 2), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(due_fail(db, &fo, id, 1, "x"), 0);
	assert_int_equal(fo, DUE_FAIL_REJECTED_STALE);
	assert_int_equal(due_cancel(db, &cancel, id), 0);
	assert_int_equal(cancel, DUE_CANCEL_TOO_LATE);
	assert_int_equal(due_retry(db, id), DUE_ESTATE);
	assert_int_equal(due_requeue(db, id), DUE_ESTATE);
	assert_int_equal(due_kill(db, NULL, id), DUE_ESTATE);
	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_DONE);
	assert_memory_equal(t->result, "r1", 2);
	due_task_free(t);

	/* A cancelled task stays cancelled. */
	due_id id2 = add(db, "k", 60000000, 5);
	assert_int_equal(due_cancel(db, &cancel, id2), 0);
	assert_int_equal(due_kill(db, NULL, id2), DUE_ESTATE);
	assert_int_equal(due_retry(db, id2), DUE_ESTATE);
	assert_int_equal(state_of(db, id2), DUE_CANCELLED);
	due_close(db);
}

static void test_cancel_outcomes(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cancel_outcome o;
	due_extend_outcome eo;
	due_complete_outcome co;

	due_id waiting = add(db, "k", 60000000, 5);
	assert_int_equal(due_cancel(db, &o, waiting), 0);
	assert_int_equal(o, DUE_CANCEL_CANCELLED);
	assert_int_equal(due_cancel(db, &o, waiting), 0);
	assert_int_equal(o, DUE_CANCEL_ALREADY_CANCELLED);
	assert_int_equal(due_cancel(db, &o, 999999), 0);
	assert_int_equal(o, DUE_CANCEL_NOT_FOUND);

	due_id running = add(db, "k", 0, 5);
	claim_one(db, running, 30000000);
	assert_int_equal(due_cancel(db, &o, running), 0);
	assert_int_equal(o, DUE_CANCEL_REQUESTED);
	assert_int_equal(due_extend(db, &eo, running, 1, 30000000), 0);
	assert_int_equal(eo, DUE_EXTEND_CANCEL_REQUESTED);
	assert_int_equal(due_complete(db, &co, running, 1, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_CANCELLED_BEFORE_COMMIT);
	due_task *t = get(db, running);
	assert_int_equal(t->state, DUE_CANCELLED);
	assert_false(t->has_result);
	assert_string_equal(t->attempts[0].outcome, "CANCELLED");
	due_task_free(t);

	due_id done = add(db, "k", 0, 5);
	claim_one(db, done, 30000000);
	assert_int_equal(due_complete(db, &co, done, 1, "r", 1), 0);
	assert_int_equal(due_cancel(db, &o, done), 0);
	assert_int_equal(o, DUE_CANCEL_TOO_LATE);

	/* fail of a cancel-requested try ends CANCELLED, not retried. */
	due_fail_outcome fo;
	due_id f = add(db, "k", 0, 5);
	claim_one(db, f, 30000000);
	assert_int_equal(due_cancel(db, &o, f), 0);
	assert_int_equal(due_fail(db, &fo, f, 1, "boom"), 0);
	assert_int_equal(fo, DUE_FAIL_CANCELLED);
	assert_int_equal(state_of(db, f), DUE_CANCELLED);
	due_close(db);
}

static void test_backoff_and_dead(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	due_fail_outcome fo;

	assert_int_equal(due_backoff_us(1000000, 3600000000LL, 1), 1000000);
	assert_int_equal(due_backoff_us(1000000, 3600000000LL, 3), 4000000);
	assert_int_equal(due_backoff_us(1000000, 3600000000LL, 40), 3600000000LL);
	assert_int_equal(due_backoff_us(INT64_MAX / 2, INT64_MAX, 5), INT64_MAX);

	o.max_attempts = 3;
	o.backoff_us = 200000;
	o.backoff_cap_us = 300000;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	int64_t expect[] = {200000, 300000};
	for (int a = 1; a <= 2; a++) {
		due_task_list *l = NULL;
		/* wait for the retry to become due, never claiming early */
		for (int i = 0;; i++) {
			assert_int_equal(due_claim(db, &l, "w", NULL, 0, 1, 30000000), 0);
			if (l->count)
				break;
			due_task_list_free(l);
			assert_true(i < 5000);
			tu_sleep_ms(1);
		}
		assert_int_equal(l->items[0].attempt, a);
		due_task_list_free(l);
		assert_int_equal(due_fail(db, &fo, s.id, a, "boom"), 0);
		assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
		due_task *t = get(db, s.id);
		assert_int_equal(t->state, DUE_SCHEDULED);
		assert_int_equal(t->due_at - t->updated_at, expect[a - 1]);
		assert_string_equal(t->last_error, "boom");
		assert_string_equal(t->attempts[a - 1].outcome, "FAILED");
		assert_string_equal(t->attempts[a - 1].error, "boom");
		due_task_free(t);
	}
	due_task_list *l = NULL;
	for (int i = 0;; i++) {
		assert_int_equal(due_claim(db, &l, "w", NULL, 0, 1, 30000000), 0);
		if (l->count)
			break;
		due_task_list_free(l);
		assert_true(i < 5000);
		tu_sleep_ms(1);
	}
	/* the retry was not claimed before its due time */
	due_task *t = get(db, s.id);
	for (size_t i = 1; i < t->n_attempts; i++)
		assert_true(t->attempts[i].claimed_at >= t->attempts[i].due_at);
	assert_true(t->attempts[1].claimed_at - t->attempts[0].ended_at >= 200000);
	due_task_free(t);
	due_task_list_free(l);
	assert_int_equal(due_fail(db, &fo, s.id, 3, "final"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	t = get(db, s.id);
	assert_int_equal(t->state, DUE_DEAD);
	assert_string_equal(t->last_error, "final");
	due_task_free(t);
	due_close(db);
}

static void test_reclaim_paths(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cancel_outcome co;

	due_id again = add(db, "k", 0, 5);
	claim_one(db, again, 1000);
	wait_reclaim(db, again);
	assert_int_equal(state_of(db, again), DUE_SCHEDULED);

	due_id dead = add(db, "k", 0, 1);
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, 1000), 0);
	due_task_list_free(l);
	wait_reclaim(db, dead);
	due_task *t = get(db, dead);
	assert_int_equal(t->state, DUE_DEAD);
	assert_non_null(strstr(t->last_error, "lease expired"));
	assert_string_equal(t->attempts[0].outcome, "LEASE_EXPIRED");
	due_task_free(t);

	due_id cancelled = add(db, "k", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, 1000), 0);
	due_task_list_free(l);
	assert_int_equal(due_cancel(db, &co, cancelled), 0);
	assert_int_equal(co, DUE_CANCEL_REQUESTED);
	wait_reclaim(db, cancelled);
	assert_int_equal(state_of(db, cancelled), DUE_CANCELLED);
	due_close(db);
}

static void test_operator(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_complete_outcome co;
	due_fail_outcome fo;
	due_state final;

	/* retry: fresh budget, counter keeps counting, old token stays dead */
	due_id id = add(db, "k", 0, 1);
	claim_one(db, id, 30000000);
	assert_int_equal(due_fail(db, &fo, id, 1, "x"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	assert_int_equal(due_requeue(db, id), DUE_ESTATE);
	assert_int_equal(due_retry(db, id), 0);
	assert_int_equal(due_retry(db, id), DUE_ESTATE);
	assert_int_equal(claim_one(db, id, 30000000), 2);
	assert_int_equal(due_complete(db, &co, id, 1, "old", 3), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(due_fail(db, &fo, id, 2, "y"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);

	/* kill dismisses a dead letter: CANCELLED, health no longer DOWN */
	bool up;
	assert_int_equal(due_health(db, &up, NULL), 0);
	assert_false(up);
	assert_int_equal(due_kill(db, &final, id), 0);
	assert_int_equal(final, DUE_CANCELLED);
	assert_int_equal(due_health(db, &up, NULL), 0);
	assert_true(up);
	due_task *dt = get(db, id);
	assert_non_null(strstr(dt->last_error, "dismissed"));
	assert_string_equal(dt->attempts[1].outcome, "FAILED"); /* history kept */
	due_task_free(dt);
	assert_int_equal(due_kill(db, NULL, id), DUE_ESTATE);
	assert_int_equal(due_retry(db, id), DUE_ESTATE);

	/* requeue: CLAIMED -> SCHEDULED, old holder fenced */
	due_id rq = add(db, "k", 0, 5);
	claim_one(db, rq, 30000000);
	assert_int_equal(due_requeue(db, rq), 0);
	assert_int_equal(state_of(db, rq), DUE_SCHEDULED);
	assert_int_equal(due_complete(db, &co, rq, 1, "old", 3), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	due_task *t = get(db, rq);
	assert_string_equal(t->attempts[0].outcome, "REQUEUED");
	assert_false(t->has_result);
	due_task_free(t);

	/* kill: waiting and running tasks end DEAD; the holder is fenced */
	due_id kw = add(db, "k", 60000000, 5);
	assert_int_equal(due_kill(db, &final, kw), 0);
	assert_int_equal(final, DUE_DEAD);
	due_id kr = add(db, "k", 0, 5);
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, 30000000), 0);
	due_task_list_free(l);
	assert_int_equal(due_kill(db, &final, kr), 0);
	assert_int_equal(final, DUE_DEAD);
	assert_int_equal(due_complete(db, &co, kr, 1, "late", 4), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	t = get(db, kr);
	assert_string_equal(t->attempts[0].outcome, "KILLED");
	due_task_free(t);

	assert_int_equal(due_retry(db, 999999), DUE_ENOTFOUND);
	assert_int_equal(due_kill(db, NULL, 999999), DUE_ENOTFOUND);
	assert_int_equal(due_requeue(db, 999999), DUE_ENOTFOUND);
	due_close(db);
}

static void test_idempotent_key(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted a, b, c, d;
	due_complete_outcome co;

	o.key = "order-42";
	assert_int_equal(due_schedule(db, &a, "close", "x", 1, &o), 0);
	assert_int_equal(due_schedule(db, &b, "close", "y", 1, &o), 0);
	assert_false(a.existed);
	assert_true(b.existed);
	assert_int_equal(a.id, b.id);
	/* same key, other kind: a different task */
	assert_int_equal(due_schedule(db, &c, "remind", "x", 1, &o), 0);
	assert_false(c.existed);
	assert_true(c.id != a.id);
	/* once terminal, the key is free again */
	due_task *t = NULL;
	assert_int_equal(due_claim_id(db, &t, a.id, "w", 30000000), 0);
	due_task_free(t);
	assert_int_equal(due_complete(db, &co, a.id, 1, "", 0), 0);
	assert_int_equal(due_schedule(db, &d, "close", "z", 1, &o), 0);
	assert_false(d.existed);
	assert_true(d.id > a.id);
	due_close(db);
}

/* Child: submit keys 0..n-1 of one kind, print ids to fd. */
static void key_child(int fd, int n)
{
	due_db *db = NULL;
	if (due_open(&db, url, NULL) < 0)
		_exit(2);
	for (int i = 0; i < n; i++) {
		due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
		char key[32];
		due_submitted s;
		snprintf(key, sizeof(key), "key-%d", i);
		o.key = key;
		o.delay_us = 3600000000LL;
		if (due_schedule(db, &s, "race", "", 0, &o) < 0)
			_exit(3);
		dprintf(fd, "%d %lld\n", i, (long long)s.id);
	}
	due_close(db);
	_exit(0);
}

static void test_idempotent_key_race(void **state)
{
	(void)state;
	enum { N = 200 };
	int fds[2][2];
	pid_t pids[2];

	for (int p = 0; p < 2; p++) {
		assert_int_equal(pipe(fds[p]), 0);
		pids[p] = fork();
		if (pids[p] == 0) {
			close(fds[p][0]);
			key_child(fds[p][1], N);
		}
		close(fds[p][1]);
	}
	long long ids[2][N];
	for (int p = 0; p < 2; p++) {
		FILE *f = fdopen(fds[p][0], "r");
		int k;
		long long id;
		while (fscanf(f, "%d %lld", &k, &id) == 2)
			ids[p][k] = id;
		fclose(f);
		int st;
		waitpid(pids[p], &st, 0);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	for (int k = 0; k < N; k++)
		assert_int_equal(ids[0][k], ids[1][k]);
	due_db *db = open_db();
	due_task_list *l = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	lo.limit = 1000;
	assert_int_equal(due_list(db, &l, &lo), 0);
	assert_int_equal(l->count, N);
	printf("key race: 2 processes x %d keys -> %zu rows\n", N, l->count);
	due_task_list_free(l);
	due_close(db);
}

/* Child: claim in batches until nothing is left; print claimed ids. */
static void claim_child(int fd, int worker)
{
	due_db *db = NULL;
	char owner[32];
	int empty = 0;

	snprintf(owner, sizeof(owner), "proc-%d", worker);
	if (due_open(&db, url, NULL) < 0)
		_exit(2);
	while (empty < 20) {
		due_task_list *l = NULL;
		if (due_claim(db, &l, owner, NULL, 0, 7, 60000000) < 0) {
			if (due_error_last_code() == DUE_EBUSY)
				continue;
			_exit(3);
		}
		empty = l->count ? 0 : empty + 1;
		for (size_t i = 0; i < l->count; i++) {
			due_complete_outcome co;
			dprintf(fd, "%lld\n", (long long)l->items[i].id);
			if (due_complete(db, &co, l->items[i].id,
					 l->items[i].attempt, "", 0) < 0 ||
			    co != DUE_COMPLETE_DONE)
				_exit(4);
		}
		due_task_list_free(l);
		if (!empty)
			continue;
		tu_sleep_ms(2);
	}
	due_close(db);
	_exit(0);
}

static void test_three_processes_claim(void **state)
{
	(void)state;
	enum { N = 300, P = 3 };
	due_db *db = open_db();
	due_submit items[N];
	due_submitted out[N];
	int seen[N + 1] = {0}, claims = 0, dups = 0;

	for (int i = 0; i < N; i++) {
		items[i] = (due_submit){"k", "", 0, DUE_SCHEDULE_OPTS_INIT};
	}
	assert_int_equal(due_schedule_batch(db, out, items, N), 0);
	int fds[P][2];
	pid_t pids[P];
	for (int p = 0; p < P; p++) {
		assert_int_equal(pipe(fds[p]), 0);
		pids[p] = fork();
		if (pids[p] == 0) {
			close(fds[p][0]);
			claim_child(fds[p][1], p);
		}
		close(fds[p][1]);
	}
	for (int p = 0; p < P; p++) {
		FILE *f = fdopen(fds[p][0], "r");
		long long id;
		while (fscanf(f, "%lld", &id) == 1) {
			long long idx = id - out[0].id + 1;
			assert_true(idx >= 1 && idx <= N);
			if (seen[idx]++)
				dups++;
			claims++;
		}
		fclose(f);
		int st;
		waitpid(pids[p], &st, 0);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	printf("three processes: tasks=%d claims=%d dup_claims=%d\n", N, claims,
	       dups);
	assert_int_equal(claims, N);
	assert_int_equal(dups, 0);
	due_stats st;
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_DONE], N);
	due_close(db);
}

static void test_batch_atomic(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_submit items[3] = {
		{"a", "", 0, DUE_SCHEDULE_OPTS_INIT},
		{"bad kind!", "", 0, DUE_SCHEDULE_OPTS_INIT},
		{"c", "", 0, DUE_SCHEDULE_OPTS_INIT},
	};
	due_submitted out[3];
	due_stats st;

	assert_int_equal(due_schedule_batch(db, out, items, 3), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "item 2"));
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], 0);
	items[1].kind = "b";
	assert_int_equal(due_schedule_batch(db, out, items, 3), 0);
	assert_true(out[0].id < out[1].id && out[1].id < out[2].id);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], 3);
	due_close(db);
}

static void test_bad_input_changes_nothing(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	due_stats st;
	size_t big = (1u << 20) + 1;
	char *p = calloc(1, big);

	assert_int_equal(due_schedule(db, &s, "", "", 0, NULL), DUE_EINVAL);
	assert_int_equal(due_schedule(db, &s, "a b", "", 0, NULL), DUE_EINVAL);
	assert_int_equal(due_schedule(db, &s, "k", p, big, NULL), DUE_ETOOBIG);
	assert_non_null(strstr(due_error_last(), "limit"));
	o.delay_us = -1;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	o = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	o.max_attempts = 0;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	o = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	o.backoff_us = 10;
	o.backoff_cap_us = 5;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	due_task *t = NULL;
	assert_int_equal(due_get(db, &t, 424242), DUE_ENOTFOUND);
	assert_int_equal(due_get(db, &t, -1), DUE_EINVAL);
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "", NULL, 0, 1, 1000000), DUE_EINVAL);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 0, 1000000), DUE_EINVAL);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 1, 0), DUE_EINVAL);
	assert_int_equal(due_stats_get(db, &st), 0);
	for (int i = 0; i < DUE_STATE_COUNT; i++)
		assert_int_equal(st.counts[i], 0);
	free(p);
	due_close(db);
}

static int hook_insert(void *conn, const due_task *task, void *payload)
{
	char sql[128];
	int *fail = payload;
	if (*fail)
		return 1;
	snprintf(sql, sizeof(sql), "INSERT INTO effect VALUES (%lld, %d)",
		 (long long)task->id, task->attempt);
	return sqlite3_exec(conn, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : 1;
}

static int count_rows(sqlite3 *c, const char *sql)
{
	sqlite3_stmt *st;
	int n = -1;
	if (sqlite3_prepare_v2(c, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return n;
}

static void test_sqlite_transactions(void **state)
{
	(void)state;
	if (strncmp(url, "sqlite:", 7) != 0)
		return; /* PostgreSQL has its own transaction test */
	sqlite3 *c;
	due_submitted s;
	due_complete_outcome co;
	assert_int_equal(sqlite3_open(url + 7, &c), SQLITE_OK);
	assert_int_equal(sqlite3_exec(c, "CREATE TABLE orders (id INTEGER);"
				      "CREATE TABLE effect (task INTEGER PRIMARY KEY,"
				      " attempt INTEGER)", NULL, NULL, NULL), SQLITE_OK);
	/* without a transaction: refused */
	assert_int_equal(due_schedule_sqlite_tx(c, &s, "k", "", 0, NULL), DUE_EINVAL);
	/* rolled back with the caller's rows */
	sqlite3_exec(c, "BEGIN IMMEDIATE; INSERT INTO orders VALUES (1)", NULL, NULL, NULL);
	assert_int_equal(due_schedule_sqlite_tx(c, &s, "close", "o1", 2, NULL), 0);
	sqlite3_exec(c, "ROLLBACK", NULL, NULL, NULL);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM due_task"), 0);
	/* committed with them */
	sqlite3_exec(c, "BEGIN IMMEDIATE; INSERT INTO orders VALUES (2)", NULL, NULL, NULL);
	assert_int_equal(due_schedule_sqlite_tx(c, &s, "close", "o2", 2, NULL), 0);
	sqlite3_exec(c, "COMMIT", NULL, NULL, NULL);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM due_task"), 1);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM orders"), 1);

	/* completion hook: rows commit with DONE, or everything rolls back */
	due_db *db = open_db();
	int fail = 1;
	claim_one(db, s.id, 30000000);
	assert_int_equal(due_complete_tx(db, &co, s.id, 1, "r", 1, hook_insert,
					 &fail), DUE_ERROR);
	assert_int_equal(state_of(db, s.id), DUE_CLAIMED);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM effect"), 0);
	fail = 0;
	assert_int_equal(due_complete_tx(db, &co, s.id, 1, "r", 1, hook_insert,
					 &fail), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM effect"), 1);
	/* a late duplicate completion writes no second effect */
	assert_int_equal(due_complete_tx(db, &co, s.id, 1, "r", 1, hook_insert,
					 &fail), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM effect"), 1);
	due_close(db);
	sqlite3_close(c);
}

static void test_complete_batch(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id a = add(db, "k", 0, 5), b = add(db, "k", 0, 5), c = add(db, "k", 0, 5);
	due_task_list *l = NULL;
	due_cancel_outcome co;

	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, 30000000), 0);
	assert_int_equal(l->count, 3);
	due_task_list_free(l);
	assert_int_equal(due_cancel(db, &co, c), 0);
	due_completion items[3] = {
		{a, 1, "ra", 2, 0}, {b, 7, "rb", 2, 0}, {c, 1, "rc", 2, 0}};
	assert_int_equal(due_complete_batch(db, items, 3), 0);
	assert_int_equal(items[0].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(items[1].outcome, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(items[2].outcome, DUE_COMPLETE_CANCELLED_BEFORE_COMMIT);
	assert_int_equal(state_of(db, a), DUE_DONE);
	assert_int_equal(state_of(db, b), DUE_CLAIMED);
	assert_int_equal(state_of(db, c), DUE_CANCELLED);
	due_close(db);
}

static void test_stats_health_prune(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_fail_outcome fo;
	due_complete_outcome co;
	bool up;
	int64_t dead, deleted;

	due_id d = add(db, "k", 0, 1);
	due_id ok = add(db, "k", 0, 5);
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, 30000000), 0);
	due_task_list_free(l);
	assert_int_equal(due_health(db, &up, &dead), 0);
	assert_true(up);
	assert_int_equal(due_fail(db, &fo, d, 1, "x"), 0);
	assert_int_equal(due_complete(db, &co, ok, 1, "", 0), 0);
	assert_int_equal(due_health(db, &up, &dead), 0);
	assert_false(up);
	assert_int_equal(dead, 1);
	due_stats st;
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_DEAD], 1);
	assert_int_equal(st.counts[DUE_DONE], 1);
	assert_int_equal(st.claims_window, 2);
	assert_true(st.lateness_p50_us >= 0);
	assert_int_equal(due_prune(db, &deleted, 3600000000LL), 0);
	assert_int_equal(deleted, 0);
	tu_sleep_ms(5);
	assert_int_equal(due_prune(db, &deleted, 1000), 0);
	assert_int_equal(deleted, 1);
	assert_int_equal(state_of(db, d), DUE_DEAD);
	due_task *t = NULL;
	assert_int_equal(due_get(db, &t, ok), DUE_ENOTFOUND);
	/* ids are never reused after prune (idempotency keys stay unique) */
	due_id next = add(db, "k", 0, 5);
	assert_true(next > ok);
	due_close(db);
}

static void test_schema_checks(void **state)
{
	(void)state;
	due_db *db = NULL;
	if (strncmp(url, "sqlite:", 7) != 0)
		return;
	char other[600];
	snprintf(other, sizeof(other), "sqlite:%s/none.db", dir);
	assert_int_equal(due_open(&db, other, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "due init"));
	due_close(db);
	assert_int_equal(access(other + 7, F_OK), -1); /* not created */

	sqlite3 *c;
	assert_int_equal(sqlite3_open(url + 7, &c), SQLITE_OK);
	sqlite3_exec(c, "UPDATE due_meta SET value = '0'", NULL, NULL, NULL);
	db = NULL;
	assert_int_equal(due_open(&db, url, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "older"));
	due_close(db);
	sqlite3_exec(c, "UPDATE due_meta SET value = '99'", NULL, NULL, NULL);
	db = NULL;
	assert_int_equal(due_open(&db, url, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "newer"));
	due_close(db);
	sqlite3_close(c);

	db = NULL;
	assert_int_equal(due_open(&db, "mysql://x", NULL), DUE_EINVAL);
	due_close(db);
	db = NULL;
	assert_int_equal(due_open(&db, "sqlite:", NULL), DUE_EINVAL);
	due_close(db);
	db = NULL;
	assert_int_equal(due_open(&db, "sqlite:/tmp/x.db?sync=nope", NULL), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "sync=nope"));
	due_close(db);
}

static void test_claim_id(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id now_id = add(db, "k", 0, 5), later = add(db, "k", 60000000, 5);
	due_task *t = NULL;

	assert_int_equal(due_claim_id(db, &t, later, "w", 30000000), DUE_EBUSY);
	assert_int_equal(due_claim_id(db, &t, now_id, "w", 30000000), 0);
	assert_int_equal(t->attempt, 1);
	due_task_free(t);
	assert_int_equal(due_claim_id(db, &t, now_id, "w2", 30000000), DUE_EBUSY);
	due_close(db);
}

static due_cron_def cron_def(const char *name, const char *expr, const char *kind)
{
	due_cron_def d = DUE_CRON_DEF_INIT;
	d.name = name;
	d.expr = expr;
	d.kind = kind;
	d.payload = "p";
	d.payload_len = 1;
	return d;
}

static void test_cron_definitions(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cron_def d = cron_def("report", "0 2 * * *", "report");
	due_schedule_list *l = NULL;

	d.tz = "Europe/Berlin";
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->count, 1);
	assert_string_equal(l->items[0].tz, "Europe/Berlin");
	due_time now;
	due_now(db, &now);
	assert_true(l->items[0].next_slot > now);
	/* 02:00 in Berlin is 00:00 or 01:00 UTC */
	int64_t sec_of_day = (l->items[0].next_slot / 1000000) % 86400;
	assert_true(sec_of_day == 0 || sec_of_day == 3600);
	due_schedule_list_free(l);

	/* bad definitions change nothing, and name what was wrong */
	due_cron_def b = cron_def("bad", "0 2 * 13 *", "k");
	assert_int_equal(due_cron_put(db, &b), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "month"));
	b = cron_def("bad", "0 2 * * *", "k");
	b.tz = "Mars/Olympus";
	assert_int_equal(due_cron_put(db, &b), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "Mars/Olympus"));
	b = cron_def("bad name", "0 2 * * *", "k");
	assert_int_equal(due_cron_put(db, &b), DUE_EINVAL);
	b = cron_def("never", "0 0 30 2 *", "k");
	assert_int_equal(due_cron_put(db, &b), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "never fires"));
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->count, 1);
	due_schedule_list_free(l);

	/* replace, then remove */
	d.expr = "30 3 * * *";
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_string_equal(l->items[0].expr, "30 3 * * *");
	due_schedule_list_free(l);
	assert_int_equal(due_cron_remove(db, "report"), 0);
	assert_int_equal(due_cron_remove(db, "report"), DUE_ENOTFOUND);
	due_close(db);
}

/* Keys of the slot tasks of a schedule, sorted (seconds). */
static size_t slot_keys(due_db *db, const char *kind, int64_t *out, size_t cap)
{
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	size_t n = 0;
	lo.kind = kind;
	lo.limit = 10000;
	assert_int_equal(due_list(db, &l, &lo), 0);
	for (size_t i = 0; i < l->count && n < cap; i++) {
		const char *k = strrchr(l->items[i].key, ':');
		assert_non_null(k);
		out[n++] = strtoll(k + 1, NULL, 10);
	}
	due_task_list_free(l);
	for (size_t i = 1; i < n; i++) /* insertion sort: n is small */
		for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
			int64_t t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

static void tick_child(int seconds)
{
	due_db *db = NULL;
	if (due_open(&db, url, NULL) < 0)
		_exit(2);
	for (int i = 0; i < seconds * 50; i++) {
		due_cron_tick_result r;
		if (due_cron_tick(db, &r, &(due_cron_tick_opts){DUE_CRON_TICK_OPTS_VERSION, 1500000, DUE_CRON_MISFIRE_GRACE_US}) < 0)
			_exit(3);
		tu_sleep_ms(20);
	}
	due_close(db);
	_exit(0);
}

static void test_cron_once_per_slot(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cron_def d = cron_def("every-second", "* * * * * *", "tick");
	int64_t keys[200];
	pid_t kids[3];

	assert_int_equal(due_cron_put(db, &d), 0);
	due_close(db); /* the children open their own; they inherit nothing */
	for (int i = 0; i < 3; i++)
		if ((kids[i] = fork()) == 0)
			tick_child(4);
	for (int i = 0; i < 3; i++) {
		int st;
		waitpid(kids[i], &st, 0);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	db = open_db();
	size_t n = slot_keys(db, "tick", keys, 200);
	int gaps = 0, dups = 0;
	for (size_t i = 1; i < n; i++) {
		dups += keys[i] == keys[i - 1];
		gaps += keys[i] - keys[i - 1] > 1;
	}
	printf("cron: 3 schedulers x 4 s -> %zu slot tasks, dups=%d gaps=%d\n", n,
	       dups, gaps);
	assert_true(n >= 4);
	assert_int_equal(dups, 0);
	assert_int_equal(gaps, 0);
	due_schedule_list *l = NULL;
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->items[0].fired, (int64_t)n);
	due_schedule_list_free(l);
	due_close(db);
}

static void test_cron_misfire(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cron_def skip = cron_def("s", "* * * * * *", "skipk");
	due_cron_def once = cron_def("o", "* * * * * *", "oncek");
	due_cron_tick_result r;
	int64_t keys[100];

	once.misfire = DUE_MISFIRE_ONCE;
	assert_int_equal(due_cron_put(db, &skip), 0);
	assert_int_equal(due_cron_put(db, &once), 0);
	/* no scheduler runs for 3.5 s, then one pass with a 1 s grace */
	tu_sleep_ms(3500);
	assert_int_equal(due_cron_tick(db, &r, &(due_cron_tick_opts){DUE_CRON_TICK_OPTS_VERSION, 0, 1000000}), 0);
	assert_true(r.missed >= 3);
	due_schedule_list *l = NULL;
	assert_int_equal(due_cron_list(db, &l), 0);
	const due_schedule_info *o = !strcmp(l->items[0].name, "o") ? &l->items[0]
								    : &l->items[1];
	const due_schedule_info *sk = o == &l->items[0] ? &l->items[1] : &l->items[0];
	printf("misfire: skip missed=%lld fired=%lld; once missed=%lld fired=%lld\n",
	       (long long)sk->missed, (long long)sk->fired, (long long)o->missed,
	       (long long)o->fired);
	assert_true(sk->missed >= 2);
	assert_true(sk->last_missed > 0);
	assert_true(o->fired >= 1);
	assert_int_equal(o->missed + 1, sk->missed);
	due_schedule_list_free(l);
	/* skip: no task for the missed slots (at most the in-grace one);
	   once: exactly one catch-up task for them, due now */
	size_t ns = slot_keys(db, "skipk", keys, 100);
	size_t no = slot_keys(db, "oncek", keys, 100);
	assert_true(ns <= 1);
	assert_true(no >= 1 && no <= 2);
	due_close(db);
}

static void test_cron_overlap_wait(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cron_def d = cron_def("w", "* * * * * *", "waitk");
	due_cron_tick_result r;
	int64_t keys[100];

	d.overlap = DUE_OVERLAP_WAIT;
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_tick(db, &r, &(due_cron_tick_opts){DUE_CRON_TICK_OPTS_VERSION, 3000000, DUE_CRON_MISFIRE_GRACE_US}), 0);
	/* the first slot's task is live: later slots wait for it */
	assert_int_equal(r.materialized, 1);
	assert_int_equal(r.waiting, 1);
	assert_int_equal(slot_keys(db, "waitk", keys, 100), 1);
	due_close(db);
}

static void test_metrics(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_fail_outcome fo;
	due_complete_outcome co;
	due_metrics *m = NULL;

	due_id a = add(db, "mk1", 0, 5), b = add(db, "mk2", 0, 1);
	add(db, "mk2", 60000000, 5);
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, 30000000), 0);
	due_task_list_free(l);
	assert_int_equal(due_complete(db, &co, a, 1, "", 0), 0);
	assert_int_equal(due_fail(db, &fo, b, 1, "x"), 0);
	assert_int_equal(due_complete(db, &co, a, 1, "", 0), 0); /* stale */
	due_worker_stats ws = {.claimed = 2, .done = 1, .claim_queries = 7,
			       .empty_claims = 3};
	assert_int_equal(due_worker_report(db, "wk-1", &ws), 0);
	ws.claim_queries = 9;
	assert_int_equal(due_worker_report(db, "wk-1", &ws), 0);
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->n_kinds, 2);
	assert_string_equal(m->kinds[0].kind, "mk1");
	assert_int_equal(m->kinds[0].counts[DUE_DONE], 1);
	assert_int_equal(m->kinds[1].counts[DUE_DEAD], 1);
	assert_int_equal(m->kinds[1].counts[DUE_SCHEDULED], 1);
	assert_int_equal(m->lateness.count, 2);
	assert_int_equal(m->duration.count, 2);
	assert_int_equal(m->outcomes[DUE_OUT_DONE], 1);
	assert_int_equal(m->outcomes[DUE_OUT_FAILED], 1);
	assert_int_equal(m->outcomes[DUE_OUT_REJECTED_STALE], 1);
	assert_int_equal(m->done_per_min[0], 1);
	assert_int_equal(m->workers, 1);
	assert_int_equal(m->claim_queries, 9);
	assert_int_equal(m->empty_claims, 3);
	assert_int_equal(m->stats.dead, 1);
	int64_t sum = 0;
	for (int i = 0; i <= DUE_HIST_N; i++)
		sum += m->lateness.buckets[i];
	assert_int_equal(sum, 2);
	due_metrics_free(m);
	due_close(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(test_happy_path),
		T(test_not_before_due),
		T(test_claim_limit_and_kinds),
		T(test_stale_after_reclaim),
		T(test_terminal_immutable),
		T(test_cancel_outcomes),
		T(test_backoff_and_dead),
		T(test_reclaim_paths),
		T(test_operator),
		T(test_idempotent_key),
		T(test_idempotent_key_race),
		T(test_three_processes_claim),
		T(test_batch_atomic),
		T(test_bad_input_changes_nothing),
		T(test_sqlite_transactions),
		T(test_complete_batch),
		T(test_stats_health_prune),
		T(test_schema_checks),
		T(test_claim_id),
		T(test_cron_definitions),
		T(test_cron_once_per_slot),
		T(test_cron_misfire),
		T(test_cron_overlap_wait),
		T(test_metrics),
#undef T
	};
	int failed = 0;
	const char *backends[2] = {"sqlite", "postgres"};

	for (int b = 0; b < 2; b++) {
		if (tu_select_backend(backends[b]) != 0)
			continue;
		char name[64];
		snprintf(name, sizeof(name), "store conformance (%s)", backends[b]);
		failed += _cmocka_run_group_tests(name, tests,
						  sizeof(tests) / sizeof(tests[0]),
						  NULL, NULL);
	}
	return failed ? 1 : tu_backend_check();
}
