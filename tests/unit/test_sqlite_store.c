/*
** test_sqlite_store.c - what only the SQLite store has of run after
** (issue 38 point 3), on a real file: a chain of 1,000 held tasks
** added in the caller's own transaction (due_schedule_sqlite_tx) and
** cancelled, all of it, by one failure of its root; a cascade down a
** tree whose first cancelled child has no children of its own; each edge
** counted once when a DEAD parent is retried and then DONE, or killed
** again to CANCELLED; a held key holder moved by on_key stays held; the
** in-transaction submit rolled back and committed with the caller's
** rows; a released child wakes a listener (the wake file); prune drops
** a pruned child's edges and keeps a pruned parent's; the plans of the
** edge table's statements are index searches.  Every transition the
** stores share is in the conformance suite (test_store.c,
** test_after_*), which runs on SQLite too.
**
** SQLite has one writer at a time (BEGIN IMMEDIATE), so a parent cannot
** finish between a child's check of it and its insert: there is no
** insert/finish race to test here (test_pg_store.c and
** test_mysql_store.c have theirs).
*/
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "core/internal.h" /* DUE_TIME_LAST */
#include "due.h"
#include "store/sqlite_conn.h" /* due__sq_read_sql */
#define TU_FIXTURE	       /* setup, teardown, open_db, url, dir */
#define TU_TASKS	       /* add, claim_one, get, state_of */
#include "test_util.h"

#define LONG_LEASE 60000000LL
#define HOUR 3600000000LL
#define CHAIN 1000

/* The store's file, from the fixture's URL (sqlite:PATH[?options]). */
static const char *path_of(void)
{
	static char path[512];
	snprintf(path, sizeof(path), "%.*s", (int)strcspn(url + 7, "?"),
		 url + 7);
	return path;
}

/* A connection of the test's own on the store's file. */
static sqlite3 *raw(void)
{
	sqlite3 *c = NULL;
	assert_int_equal(sqlite3_open(path_of(), &c), SQLITE_OK);
	sqlite3_busy_timeout(c, 10000);
	return c;
}

/* The first column of the first row of `sql` on c, as an integer. */
static int64_t one_int(sqlite3 *c, const char *sql)
{
	sqlite3_stmt *st = NULL;
	int64_t v = -1;
	if (sqlite3_prepare_v2(c, sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(c));
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

static int64_t count_edges(void)
{
	sqlite3 *c = raw();
	int64_t n = one_int(c, "SELECT count(*) FROM due_after");
	sqlite3_close(c);
	return n;
}

static due_id add_after(due_db *db, const due_id *after, size_t n, bool any)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	o.after = after;
	o.n_after = n;
	o.after_any_end = any;
	assert_int_equal(due_schedule(db, &s, "c", "child", 5, &o), 0);
	assert_false(s.existed);
	return s.id;
}

static void assert_cancelled_by(due_db *db, due_id id, due_id parent,
				const char *how)
{
	char want[64];
	due_task *t = get(db, id);
	snprintf(want, sizeof(want), "parent task %lld ended %s",
		 (long long)parent, how);
	assert_int_equal(t->state, DUE_CANCELLED);
	assert_int_equal(t->after_left, 0);
	assert_non_null(t->last_error);
	if (strcmp(t->last_error, want) != 0)
		fail_msg("task %lld: last_error '%s', want '%s'", (long long)id,
			 t->last_error, want);
	due_task_free(t);
}

static int32_t left_of(due_db *db, due_id id)
{
	due_task *t = get(db, id);
	int32_t n = t->after_left;
	assert_int_equal(t->state, DUE_SCHEDULED);
	due_task_free(t);
	return n;
}

/* How many tasks the held filter lists (one page of 10,000). */
static size_t n_held(due_db *db)
{
	due_task_list *l = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	lo.held = true;
	lo.limit = 10000;
	assert_int_equal(due_list(db, &l, &lo), 0);
	size_t n = l->count;
	due_task_list_free(l);
	return n;
}

/*
** A chain of 1,000 held tasks, each after the one before, added in one
** transaction of the caller's own (due_schedule_sqlite_tx), is cancelled
** whole by one failure of its root: one step, no stack or trigger depth,
** each link's last_error naming the link before it.
*/
static void test_chain_1000_cancelled(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_fail_outcome fo;
	static due_id chain[CHAIN];
	due_submitted s;

	due_id root = add(db, "p", 0, 1);
	sqlite3 *c = raw();
	assert_int_equal(sqlite3_exec(c, "BEGIN IMMEDIATE", NULL, NULL, NULL),
			 SQLITE_OK);
	o.n_after = 1;
	for (int i = 0; i < CHAIN; i++) {
		o.after = i ? &chain[i - 1] : &root;
		assert_int_equal(due_schedule_sqlite_tx(c, &s, "c", "x", 1, &o),
				 0);
		chain[i] = s.id;
	}
	assert_int_equal(sqlite3_exec(c, "COMMIT", NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(n_held(db), CHAIN);
	assert_int_equal(one_int(c, "SELECT count(*) FROM due_after"), CHAIN);
	sqlite3_close(c);

	int32_t a = claim_one(db, root, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, root, a, "boom"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	assert_int_equal(n_held(db), 0);
	for (int i = 0; i < CHAIN; i++)
		assert_cancelled_by(db, chain[i], i ? chain[i - 1] : root,
				    i ? "CANCELLED" : "DEAD");
	due_stats st;
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], 0);
	assert_int_equal(st.counts[DUE_CANCELLED], CHAIN);
	due_close(db);
}

/*
** A kill cascades down a tree, whatever its shape: the root's first child
** (a) has no children, its second (b) a chain of two and a child whose
** other parent is live (cancelled all the same); an after_any_end child
** of the root is released instead.
*/
static void test_cascade_tree(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_state ks;
	due_time t0, t1;

	due_id root = add(db, "p", 0, 5), other = add(db, "q", HOUR, 5);
	due_id a = add_after(db, &root, 1, false);
	due_id b = add_after(db, &root, 1, false);
	due_id any = add_after(db, &root, 1, true);
	due_id x = add_after(db, &b, 1, false);
	due_id y = add_after(db, &x, 1, false);
	due_id two[2] = {other, b};
	due_id z = add_after(db, two, 2, false);
	assert_int_equal(n_held(db), 6);

	claim_one(db, root, LONG_LEASE);
	assert_int_equal(due_now(db, &t0), 0);
	assert_int_equal(due_kill(db, &ks, root), 0);
	assert_int_equal(due_now(db, &t1), 0);
	assert_int_equal(ks, DUE_DEAD);
	assert_cancelled_by(db, a, root, "DEAD");
	assert_cancelled_by(db, b, root, "DEAD");
	assert_cancelled_by(db, x, b, "CANCELLED");
	assert_cancelled_by(db, y, x, "CANCELLED");
	assert_cancelled_by(db, z, b, "CANCELLED");
	due_task *t = get(db, any);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->after_left, 0);
	assert_true(t->due_at >= t0 && t->due_at <= t1);
	due_task_free(t);
	assert_int_equal(n_held(db), 0);
	assert_int_equal(state_of(db, other), DUE_SCHEDULED);
	due_close(db);
}

/*
** Each edge counts once.  An after_any_end child of two parents: the
** first fails DEAD (one end counted), is retried by an operator and then
** completes DONE: its edge was counted already, the child still waits
** for the second.  A DEAD parent dismissed (kill: DEAD -> CANCELLED)
** counts nothing again either.
*/
static void test_edge_counted_once(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_fail_outcome fo;
	due_complete_outcome cc;
	due_state ks;

	due_id p = add(db, "p", 0, 1), q = add(db, "q", HOUR, 5);
	due_id pq[2] = {p, q};
	due_id c = add_after(db, pq, 2, true);
	assert_int_equal(
	    due_fail(db, &fo, p, claim_one(db, p, LONG_LEASE), "boom"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	assert_int_equal(left_of(db, c), 1);
	assert_int_equal(due_retry(db, p), 0);
	int32_t a = claim_one(db, p, LONG_LEASE);
	assert_int_equal(due_complete(db, &cc, p, a, "r", 1), 0);
	assert_int_equal(cc, DUE_COMPLETE_DONE);
	assert_int_equal(left_of(db, c), 1);

	due_id r = add(db, "r", 0, 1), s2 = add(db, "s", HOUR, 5);
	due_id rs[2] = {r, s2};
	due_id d = add_after(db, rs, 2, true);
	assert_int_equal(
	    due_fail(db, &fo, r, claim_one(db, r, LONG_LEASE), "boom"), 0);
	assert_int_equal(left_of(db, d), 1);
	assert_int_equal(due_kill(db, &ks, r), 0);
	assert_int_equal(ks, DUE_CANCELLED);
	assert_int_equal(left_of(db, d), 1);
	/* the last parents end: both children released */
	assert_int_equal(due_kill(db, &ks, q), 0);
	assert_int_equal(due_kill(db, &ks, s2), 0);
	assert_int_equal(left_of(db, c), 0);
	assert_int_equal(left_of(db, d), 0);
	due_close(db);
}

/*
** A held task that holds a key: a submit of that key with on_key
** replace moves it as a reschedule would (held still, its new time its
** own, applied at the release; the payload at once); `later` with an
** earlier time than its own leaves it alone.
*/
static void test_on_key_held(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	due_time t0, t1;

	due_id p = add(db, "p", 0, 5);
	o.after = &p;
	o.n_after = 1;
	o.key = "k";
	assert_int_equal(due_schedule(db, &s, "c", "one", 3, &o), 0);
	due_id c = s.id;
	o = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	o.key = "k";
	o.on_key = DUE_ON_KEY_REPLACE;
	o.delay_us = 2 * HOUR;
	assert_int_equal(due_schedule(db, &s, "c", "two", 3, &o), 0);
	assert_int_equal(s.id, c);
	assert_true(s.existed);
	assert_true(s.moved);
	o.on_key = DUE_ON_KEY_LATER;
	o.delay_us = HOUR;
	assert_int_equal(due_schedule(db, &s, "c", "three", 5, &o), 0);
	assert_int_equal(s.id, c);
	assert_false(s.moved);
	due_task *t = get(db, c);
	assert_int_equal(t->after_left, 1);
	assert_int_equal(t->due_at, DUE_TIME_LAST);
	assert_int_equal(t->payload_len, 3);
	assert_memory_equal(t->payload, "two", 3);
	due_task_free(t);

	int32_t a = claim_one(db, p, LONG_LEASE);
	assert_int_equal(due_now(db, &t0), 0);
	due_complete_outcome cc;
	assert_int_equal(due_complete(db, &cc, p, a, "r", 1), 0);
	assert_int_equal(due_now(db, &t1), 0);
	t = get(db, c);
	assert_int_equal(t->after_left, 0);
	assert_true(t->due_at >= t0 + 2 * HOUR && t->due_at <= t1 + 2 * HOUR);
	due_task_free(t);
	due_close(db);
}

/*
** due_schedule_sqlite_tx with parents: checked on the caller's
** connection (a missing one refused, nothing written), held, rolled back
** with the caller's rows (the task and its edges) or committed with them.
*/
static void test_tx_submit_after(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	due_id missing = 987654321;

	due_id p = add(db, "p", HOUR, 5);
	sqlite3 *c = raw();
	assert_int_equal(sqlite3_exec(c, "CREATE TABLE orders (id INTEGER)",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	o.after = &p;
	o.n_after = 1;
	assert_int_equal(sqlite3_exec(c,
				      "BEGIN IMMEDIATE;"
				      " INSERT INTO orders VALUES (1)",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(due_schedule_sqlite_tx(c, &s, "c", "x", 1, &o), 0);
	o.after = &missing;
	assert_int_equal(due_schedule_sqlite_tx(c, &s, "c", "y", 1, &o),
			 DUE_ENOTFOUND);
	assert_non_null(strstr(due_error_last(), "parent task 987654321"));
	assert_int_equal(sqlite3_exec(c, "ROLLBACK", NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(one_int(c, "SELECT count(*) FROM due_task"), 1);
	assert_int_equal(one_int(c, "SELECT count(*) FROM due_after"), 0);

	o.after = &p;
	assert_int_equal(sqlite3_exec(c,
				      "BEGIN IMMEDIATE;"
				      " INSERT INTO orders VALUES (2)",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(due_schedule_sqlite_tx(c, &s, "c", "x", 1, &o), 0);
	assert_int_equal(sqlite3_exec(c, "COMMIT", NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(one_int(c, "SELECT count(*) FROM orders"), 1);
	sqlite3_close(c);
	due_task *t = get(db, s.id);
	assert_int_equal(t->after_n, 1);
	assert_int_equal(t->after_left, 1);
	assert_int_equal(t->due_at, DUE_TIME_LAST);
	assert_non_null(t->after);
	assert_int_equal(t->after[0], p);
	due_task_free(t);
	due_close(db);
}

/* Wake-ups a listener got within 10 s (0: none came). */
static int listen_count(due_db *db, int fd)
{
	int n = 0;
	for (int tries = 0; n == 0 && tries < 100; tries++) {
		struct pollfd pf = {fd, POLLIN, 0};
		poll(&pf, 1, 100);
		assert_int_equal(due_listen_drain(db, &n), 0);
	}
	return n;
}

/*
** A child released by its parent's completion wakes the workers'
** listeners (the wake file), as a submit does: it is not left to a poll.
** A held child's submit is no wake-up's business, but harmless.
*/
static void test_release_wakes(void **state)
{
	(void)state;
	due_db *db = open_db(), *ldb = open_db();
	due_complete_outcome cc;
	int fd = -1, n = 0;

	assert_int_equal(due_listen(ldb, &fd), 0);
	due_id p = add(db, "p", 0, 5);
	int32_t a = claim_one(db, p, LONG_LEASE);
	due_id c = add_after(db, &p, 1, false);
	(void)listen_count(ldb, fd); /* the submits' wake-ups */
	assert_int_equal(due_listen_drain(ldb, &n), 0);
	assert_int_equal(due_complete(db, &cc, p, a, "r", 1), 0);
	assert_int_equal(cc, DUE_COMPLETE_DONE);
	assert_true(listen_count(ldb, fd) > 0);
	assert_int_equal(left_of(db, c), 0);
	claim_one(db, c, LONG_LEASE);
	due_close(ldb);
	due_close(db);
}

/*
** The "-done" file is touched after a commit that finished a task only
** while someone listens for finished tasks (due_listen_finished holds a
** shared flock on it): a touch on every finishing commit rode in every
** fdatasync of a sync=full drain (10-25 % of its rate).  An inotify watch
** of the test's own sees no change while nobody listens, and a listener
** is woken once one does.
*/
static void test_done_touch_only_when_listened(void **state)
{
	(void)state;
	due_db *db = open_db(), *ldb = open_db();
	due_complete_outcome cc;
	char done[600];
	char buf[4096]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	int ino, fd = -1;

	snprintf(done, sizeof(done), "%s-done", path_of());
	due_id t = add(db, "k", 0, 5);
	int32_t a = claim_one(db, t, LONG_LEASE);
	assert_int_equal(due_complete(db, &cc, t, a, "r", 1), 0);
	/* the file exists now (made by the first finishing commit) */
	ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	assert_true(ino >= 0);
	assert_true(inotify_add_watch(ino, done, IN_ATTRIB | IN_MODIFY) >= 0);
	t = add(db, "k", 0, 5);
	a = claim_one(db, t, LONG_LEASE);
	assert_int_equal(due_complete(db, &cc, t, a, "r", 1), 0);
	assert_int_equal(cc, DUE_COMPLETE_DONE);
	assert_true(read(ino, buf, sizeof(buf)) < 0); /* untouched */
	assert_int_equal(due_listen_finished(ldb, &fd), 0);
	assert_true(fd >= 0);
	t = add(db, "k", 0, 5);
	a = claim_one(db, t, LONG_LEASE);
	assert_int_equal(due_complete(db, &cc, t, a, "r", 1), 0);
	assert_true(read(ino, buf, sizeof(buf)) > 0); /* touched */
	assert_true(listen_count(ldb, fd) > 0);
	close(ino);
	due_close(ldb);
	due_close(db);
}

/*
** prune deletes a pruned task's edges where it is the child; the edges
** of a pruned parent stay, and its live child still names it.
*/
static void test_prune_edges(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_complete_outcome cc;
	int64_t deleted = 0;

	due_id p = add(db, "p", 0, 5);
	due_id c1 = add_after(db, &p, 1, false);
	due_id c2 = add_after(db, &p, 1, false);
	assert_int_equal(
	    due_complete(db, &cc, p, claim_one(db, p, LONG_LEASE), "r", 1), 0);
	/* c1 and c2 are due: c1 runs, c2 is moved an hour away */
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 2);
	int32_t a1 =
	    l->items[0].id == c1 ? l->items[0].attempt : l->items[1].attempt;
	due_task_list_free(l);
	due_reschedule_outcome rs;
	assert_int_equal(due_requeue(db, c2), 0);
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT;
	ro.delay_us = HOUR;
	assert_int_equal(due_reschedule(db, &rs, c2, &ro), 0);
	assert_int_equal(rs, DUE_RESCHEDULE_RESCHEDULED);
	assert_int_equal(due_complete(db, &cc, c1, a1, "r", 1), 0);
	assert_int_equal(count_edges(), 2);

	assert_int_equal(due_prune(db, &deleted, 0), 0);
	assert_int_equal(deleted, 2); /* p and c1 */
	assert_int_equal(count_edges(), 1);
	due_task *t = get(db, c2);
	assert_non_null(t->after);
	assert_int_equal(t->after[0], p);
	due_task_free(t);
	due_close(db);
}

/*
** The edge table is read by index only: the release's probe and its
** update by parent (the primary key), get's parents and prune by child
** (due_after_child), `due ls --held` through due_task_held, and a batch
** completion's one look for any edge (max of the primary key).
*/
static void test_after_plans(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_close(db);
	sqlite3 *c = raw();
	int seen = 0;

	for (int i = 0; due__sq_read_sql(i); i++) {
		const char *sq = due__sq_read_sql(i);
		char q[4096];
		sqlite3_stmt *st = NULL;
		if (!strstr(sq, "due_after") && !strstr(sq, "due_task_held"))
			continue;
		seen++;
		snprintf(q, sizeof(q), "EXPLAIN QUERY PLAN %s", sq);
		if (sqlite3_prepare_v2(c, q, -1, &st, NULL) != SQLITE_OK)
			fail_msg("%s: %s", q, sqlite3_errmsg(c));
		while (sqlite3_step(st) == SQLITE_ROW) {
			const char *d =
			    (const char *)sqlite3_column_text(st, 3);
			if (strstr(d, "SCAN due_after") ||
			    (strstr(d, "due_task_held") &&
			     !strstr(d, "SEARCH due_task USING INDEX "
					"due_task_held")))
				fail_msg("%s\n  plan: %s", sq, d);
		}
		sqlite3_finalize(st);
	}
	assert_int_equal(seen, 5); /* children, parents, held, prune, any */
	sqlite3_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	    T(test_chain_1000_cancelled),
	    T(test_cascade_tree),
	    T(test_edge_counted_once),
	    T(test_on_key_held),
	    T(test_tx_submit_after),
	    T(test_release_wakes),
	    T(test_prune_edges),
	    T(test_after_plans),
	    T(test_done_touch_only_when_listened),
#undef T
	};
	if (tu_select_backend("sqlite") != 0)
		return tu_backend_check();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
