/*
** test_pg_store.c - what only the PostgreSQL store has, on a real server:
** `due init` from several processes at once and on an empty schema, the
** column types and indexes, the claim's plan, due_backoff() in SQL,
** NOTIFY and due_schedule_pg_tx, the completion hook on the store's own
** connection, a session killed under a handle, another session's row
** lock and a stopped backend under a handle (both give up within the
** URL's timeout=; the durations are printed, never asserted), the upgrade
** from schema 1, and a schedule step racing a transaction that holds its
** slot's task.
** Every transition, refusal, schedule and metric that both stores share
** is in the conformance suite (test_store.c), which runs here too.
**
** No timing assumptions: a notification's absence is shown by a marker
** notified after it, which PostgreSQL delivers in commit order; waits
** for conditions have a deadline of HANG_MS that only guards a hang.
**
** It runs when DUE_TEST_PG_URL names a database (scripts/pg-test-cluster
** start DIR prints one).  Unset, it prints a note and passes, except under
** CI=true, where it fails: the PostgreSQL suite is never skipped silently.
** Each run works in its own schema, due_test_<pid> (the URL gets
** options=-csearch_path=...), emptied before every test and dropped at the
** end, so it never touches other data in that database.
*/
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/internal.h" /* due__lock_take */
#include "due.h"
#ifdef DUE_WITH_PG
#define TU_TASKS /* add, claim_one, get, state_of */
#endif
#include "test_util.h"

#ifdef DUE_WITH_PG
#include <libpq-fe.h>

#define STR_(x) #x
#define STR(x) STR_(x)
/* "7": the version a fresh or upgraded store records */
#define DUE_SCHEMA_VERSION_TEXT STR(DUE_SCHEMA_VERSION)

static char base_url[512]; /* DUE_TEST_PG_URL */
static char url[1024];	   /* ... with this run's search_path */
static char schema[64];	   /* due_test_<pid> */
static PGconn *adm;	   /* checks and direct SQL, in schema */

#define LONG_LEASE 60000000LL
#define HANG_MS                                                                \
	60000 /* a deadline guards against a hang, it claims nothing           \
	       */

static int64_t mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

/* base_url with options selecting `sch` (and more options, may be ""). */
static void url_for(char *out, size_t n, const char *sch, const char *more)
{
	snprintf(out, n, "%s%soptions=-csearch_path%%3D%s%s", base_url,
		 strchr(base_url, '?') ? "&" : "?", sch, more);
}

static PGconn *connect_to(const char *u)
{
	PGconn *c = PQconnectdb(u);
	if (PQstatus(c) != CONNECTION_OK)
		fail_msg("connect %s: %s", u, PQerrorMessage(c));
	PQclear(PQexec(c, "SET client_min_messages = warning"));
	return c;
}

static PGresult *q(PGconn *c, const char *fmt, va_list ap)
{
	char sql[2048];
	vsnprintf(sql, sizeof(sql), fmt, ap);
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
		fail_msg("%s: %s", sql, PQerrorMessage(c));
	return r;
}

/* Run SQL on adm; fail the test on error. */
static void sql(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	PQclear(q(adm, fmt, ap));
	va_end(ap);
}

/* First column of the first row as an integer (-1 for NULL or no row). */
static int64_t sql_int(const char *fmt, ...)
{
	va_list ap;
	int64_t v = -1;
	va_start(ap, fmt);
	PGresult *r = q(adm, fmt, ap);
	va_end(ap);
	if (PQntuples(r) && !PQgetisnull(r, 0, 0))
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return v;
}

/* First column of the first row as text into buf ("" for none). */
static const char *sql_text(char *buf, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	PGresult *r = q(adm, fmt, ap);
	va_end(ap);
	snprintf(buf, n, "%s",
		 PQntuples(r) && !PQgetisnull(r, 0, 0) ? PQgetvalue(r, 0, 0)
						       : "");
	PQclear(r);
	return buf;
}

static due_db *open_url(const char *u)
{
	due_db *db = NULL;
	if (due_open(&db, u, NULL) < 0)
		fail_msg("open %s: %s", u, due_error_last());
	assert_string_equal(due_db_backend(db), "postgres");
	return db;
}

static due_db *open_db(void) { return open_url(url); }

static int setup(void **state)
{
	(void)state;
	sql("TRUNCATE due_task, due_attempt, due_audit, due_schedule, "
	    "due_worker, due_kind, due_rate, due_after");
	return 0;
}

/* ------------------------------------------------------------------ */
/* Schema, plan, SQL backoff                                           */
/* ------------------------------------------------------------------ */

/* Child: wait for the go byte, then `due init` the schema in fd's URL. */
static void init_child(int go, const char *u)
{
	char c;
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;
	o.create = true;
	if (read(go, &c, 1) != 1)
		_exit(2);
	int rc = due_open(&db, u, &o);
	if (rc < 0)
		fprintf(stderr, "init child: %s\n", due_error_last());
	due_close(db);
	_exit(rc < 0 ? 1 : 0);
}

/* n `due init` of the store at u at once, released together; all must
   succeed. */
static void concurrent_inits(const char *u, int n)
{
	int go[2];
	pid_t pids[8];

	assert_true(n <= 8);
	assert_int_equal(pipe(go), 0);
	for (int i = 0; i < n; i++) {
		if ((pids[i] = fork()) == 0) {
			close(go[1]);
			init_child(go[0], u);
		}
	}
	close(go[0]);
	for (int i = 0; i < n; i++)
		assert_int_equal(write(go[1], "g", 1), 1);
	close(go[1]);
	for (int i = 0; i < n; i++) {
		int st;
		waitpid(pids[i], &st, 0);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
}

/*
** `due init` on PostgreSQL: an empty schema is refused and left empty;
** four inits at once all succeed and make one schema; an unreachable
** server is DUE_ESTORE.  (Older and newer schema versions are refused on
** both stores: test_store.c.)
*/
static void test_concurrent_init(void **state)
{
	(void)state;
	char sch[80], u[1200];
	due_db *db = NULL;

	snprintf(sch, sizeof(sch), "%s_init", schema);
	sql("DROP SCHEMA IF EXISTS %s CASCADE", sch);
	sql("CREATE SCHEMA %s", sch);
	url_for(u, sizeof(u), sch, "");
	/* an empty schema is refused, and nothing is created */
	assert_int_equal(due_open(&db, u, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "due init"));
	due_close(db);
	assert_int_equal(sql_int("SELECT count(*) FROM pg_tables WHERE "
				 "schemaname = '%s'",
				 sch),
			 0);
	/* four `due init` at once: all succeed, one schema */
	concurrent_inits(u, 4);
	assert_int_equal(sql_int("SELECT count(*) FROM %s.due_meta", sch), 1);
	db = open_url(u);
	due_close(db);
	sql("DROP SCHEMA %s CASCADE", sch);
	/* an unreachable server is DUE_ESTORE, with libpq's words */
	db = NULL;
	assert_int_equal(
	    due_open(&db, "postgres://127.0.0.1:1/due?connect_timeout=2", NULL),
	    DUE_ESTORE);
	assert_non_null(strstr(due_error_last(), "postgres store"));
	due_close(db);
}

/* The type of one column of this run's schema. */
static const char *column_type(char *buf, size_t n, const char *table,
			       const char *column)
{
	return sql_text(buf, n,
			"SELECT data_type FROM information_schema.columns"
			" WHERE table_schema = '%s' AND table_name = '%s' AND"
			" column_name = '%s'",
			schema, table, column);
}

/*
** Times are timestamptz (judged by the server's clock), payloads bytea,
** and the partial indexes the claim, reclaim, key and prune paths use are
** there.  (The CHECK constraints, on both stores: test_store.c.)
*/
static void test_schema_types_and_indexes(void **state)
{
	(void)state;
	char buf[64];

	assert_string_equal(column_type(buf, sizeof(buf), "due_task", "due_at"),
			    "timestamp with time zone");
	assert_string_equal(
	    column_type(buf, sizeof(buf), "due_task", "payload"), "bytea");
	assert_string_equal(
	    column_type(buf, sizeof(buf), "due_schedule", "payload"), "bytea");
	assert_string_equal(
	    column_type(buf, sizeof(buf), "due_schedule", "next_slot"),
	    "timestamp with time zone");
	assert_int_equal(
	    sql_int("SELECT count(*) FROM pg_indexes WHERE "
		    "schemaname = '%s' AND indexname IN ('due_task_due', "
		    "'due_task_lease', 'due_task_key', 'due_task_finished')",
		    schema),
	    4);
}

static void test_claim_plan_uses_partial_index(void **state)
{
	(void)state;
	char plan[8192] = "";
	due_db *db = open_db();
	due_submit items[200];
	due_submitted out[200];

	for (int i = 0; i < 200; i++)
		items[i] = (due_submit){"k", "", 0, DUE_SCHEDULE_OPTS_INIT};
	assert_int_equal(due_schedule_batch(db, out, items, 200), 0);
	/* the claim honours its limit whatever plan it gets (an inline
	   LIMIT subquery rescanned in a nested loop once claimed 25 of 10) */
	for (int i = 0; i < 8; i++) {
		due_task_list *l = NULL;
		assert_int_equal(due_claim(db, &l, "w", NULL, 0, 3, LONG_LEASE),
				 0);
		assert_int_equal(l->count, 3);
		due_task_list_free(l);
	}
	assert_int_equal(sql_int("SELECT count(*) FROM due_task WHERE state = "
				 "'CLAIMED'"),
			 24);
	sql("ANALYZE due_task");
	sql("SET enable_seqscan = off");
	PGresult *r =
	    PQexec(adm, "EXPLAIN SELECT id FROM due_task WHERE state = "
			"'SCHEDULED' AND due_at <= now() ORDER BY due_at "
			"LIMIT 10 FOR UPDATE SKIP LOCKED");
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	for (int i = 0, off = 0; i < PQntuples(r); i++) {
		int w = snprintf(plan + off, sizeof(plan) - (size_t)off, "%s\n",
				 PQgetvalue(r, i, 0));
		if (w < 0 || (size_t)(off + w) >= sizeof(plan))
			break;
		off += w;
	}
	PQclear(r);
	sql("RESET enable_seqscan");
	assert_non_null(strstr(plan, "due_task_due"));
	assert_non_null(strstr(plan, "Index Cond: (due_at <= now())"));
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 10);
	due_task_list_free(l);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task WHERE state = "
				 "'CLAIMED'"),
			 34);
	due_close(db);
}

static void test_backoff_function_matches_core(void **state)
{
	(void)state;
	const int64_t bases[] = {0, 1, 1000, 1000000, INT64_MAX / 3, INT64_MAX};
	const int64_t caps[] = {0, 5, 3600000000LL, INT64_MAX};
	const int32_t ns[] = {-1, 0, 1, 2, 3, 10, 31, 62, 63, 64, 65, 1000};

	for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++)
		for (size_t c = 0; c < sizeof(caps) / sizeof(caps[0]); c++)
			for (size_t n = 0; n < sizeof(ns) / sizeof(ns[0]);
			     n++) {
				if (caps[c] < bases[b])
					continue; /* refused by validation */
				int64_t want =
				    due_backoff_us(bases[b], caps[c], ns[n]);
				int64_t got = sql_int(
				    "SELECT due_backoff(%lld, %lld, %d)",
				    (long long)bases[b], (long long)caps[c],
				    ns[n]);
				if (got != want)
					fail_msg("due_backoff(%lld, %lld, %d) "
						 "= %lld, "
						 "core says %lld",
						 (long long)bases[b],
						 (long long)caps[c], ns[n],
						 (long long)got,
						 (long long)want);
			}
}

/*
** Wait for a notification on c whose payload is `want`; true when one
** whose payload is `before` (may be NULL) came first.  The channel is
** database-wide: other test binaries running at the same time (other
** schemas) notify on it too, so only our own payloads count.  Fails the
** test when `want` does not come within HANG_MS.
*/
static bool came_first(PGconn *c, const char *want, const char *before)
{
	int64_t end = mono_ms() + HANG_MS;
	bool first = false;
	for (;;) {
		PGnotify *nt;
		bool seen = false;
		PQconsumeInput(c);
		while (!seen && (nt = PQnotifies(c)) != NULL) {
			seen = strcmp(nt->extra, want) == 0;
			first |=
			    !seen && before && strcmp(nt->extra, before) == 0;
			PQfreemem(nt);
		}
		if (seen)
			return first;
		if (mono_ms() > end)
			fail_msg("no notification '%s'", want);
		fd_set fds;
		struct timeval tv = {0, 10000};
		FD_ZERO(&fds);
		FD_SET(PQsocket(c), &fds);
		select(PQsocket(c) + 1, &fds, NULL, NULL, &tv);
	}
}

/*
** True when a notification `kind` reached c before now.  A marker is
** notified and awaited: PostgreSQL delivers notifications in the order
** their transactions committed, so one sent by an earlier commit would
** have come first.
*/
static bool was_notified(PGconn *c, const char *kind)
{
	static int n;
	char mark[64];
	snprintf(mark, sizeof(mark), "mark-%d-%d", (int)getpid(), ++n);
	sql("NOTIFY due_task_new, '%s'", mark);
	return came_first(c, mark, kind);
}

static void exec_ok(PGconn *c, const char *s)
{
	PGresult *r = PQexec(c, s);
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		fail_msg("%s: %s", s, PQerrorMessage(c));
	PQclear(r);
}

static void test_tx_submit_and_notify(void **state)
{
	(void)state;
	PGconn *app = connect_to(url), *ear = connect_to(url);
	due_submitted s, again;
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	char close_kind[32], remind_kind[32];

	snprintf(close_kind, sizeof(close_kind), "close-%d", (int)getpid());
	snprintf(remind_kind, sizeof(remind_kind), "remind-%d", (int)getpid());
	exec_ok(ear, "LISTEN due_task_new");
	exec_ok(app, "CREATE TABLE orders (id int)");
	/* no transaction open: refused */
	assert_int_equal(due_schedule_pg_tx(app, &s, close_kind, "", 0, NULL),
			 DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "BEGIN"));
	/* bad input: refused before any SQL */
	exec_ok(app, "BEGIN");
	assert_int_equal(due_schedule_pg_tx(app, &s, "bad kind", "", 0, NULL),
			 DUE_EINVAL);
	/* rolled back with the caller's rows: no task, no wake-up */
	exec_ok(app, "INSERT INTO orders VALUES (1)");
	assert_int_equal(due_schedule_pg_tx(app, &s, close_kind, "o1", 2, NULL),
			 0);
	assert_true(s.id > 0);
	assert_false(was_notified(ear, close_kind)); /* not before commit */
	exec_ok(app, "ROLLBACK");
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), 0);
	assert_false(was_notified(ear, close_kind));
	/* committed with them: task present, listener woken with the kind */
	exec_ok(app, "BEGIN");
	exec_ok(app, "INSERT INTO orders VALUES (2)");
	o.key = "order-2";
	assert_int_equal(due_schedule_pg_tx(app, &s, close_kind, "o2", 2, &o),
			 0);
	assert_false(s.existed);
	assert_int_equal(
	    due_schedule_pg_tx(app, &again, close_kind, "o2", 2, &o), 0);
	assert_true(again.existed);
	assert_int_equal(again.id, s.id);
	exec_ok(app, "COMMIT");
	/* the caller's connection is left as it was: blocking, its own
	   session settings (the store's lock_timeout is for its own) */
	assert_int_equal(PQisnonblocking(app), 0);
	PGresult *lt = PQexec(app, "SHOW lock_timeout");
	assert_string_equal(PQgetvalue(lt, 0, 0), "0");
	PQclear(lt);
	came_first(ear, close_kind, NULL);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), 1);
	assert_int_equal(sql_int("SELECT count(*) FROM orders"), 1);
	due_db *db = open_db();
	due_task *t = get(db, s.id);
	assert_memory_equal(t->payload, "o2", 2);
	assert_string_equal(t->kind, close_kind);
	due_task_free(t);
	/* the ordinary submit notifies too */
	add(db, remind_kind, 0, 5);
	came_first(ear, remind_kind, NULL);
	due_close(db);
	/* a connection without the due schema: DUE_ESCHEMA */
	exec_ok(app, "BEGIN");
	exec_ok(app, "SET LOCAL search_path = pg_catalog");
	assert_int_equal(due_schedule_pg_tx(app, &s, close_kind, "", 0, NULL),
			 DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "due init"));
	exec_ok(app, "ROLLBACK");
	exec_ok(app, "DROP TABLE orders");
	PQfinish(app);
	PQfinish(ear);
}

/* ------------------------------------------------------------------ */
/* Completion: hooks and batches                                       */
/* ------------------------------------------------------------------ */

enum hook_mode {
	HOOK_WRITE,
	HOOK_REFUSE,
	HOOK_WRITE_IGNORING_ERRORS,
	HOOK_DEALLOCATE /* drop the session's prepared statements */
};

/* Write an effect row on the completion's own connection. */
static int hook_insert(void *conn, const due_task *task, void *payload)
{
	char sql_buf[128];
	enum hook_mode *mode = payload;
	if (*mode == HOOK_REFUSE)
		return 1;
	if (*mode == HOOK_DEALLOCATE) {
		PQclear(PQexec(conn, "DEALLOCATE ALL"));
		return 0;
	}
	snprintf(sql_buf, sizeof(sql_buf),
		 "INSERT INTO effect VALUES (%lld, %d)", (long long)task->id,
		 task->attempt);
	PGresult *r = PQexec(conn, sql_buf);
	int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : 1;
	PQclear(r);
	return *mode == HOOK_WRITE_IGNORING_ERRORS ? 0 : rc;
}

static void test_complete_hook(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_complete_outcome co;
	enum hook_mode fail = HOOK_REFUSE;

	sql("CREATE TABLE effect (task bigint PRIMARY KEY, attempt int)");
	due_id id = add(db, "k", 0, 5);
	claim_one(db, id, LONG_LEASE);
	/* the hook refuses: everything rolls back, the try stays CLAIMED */
	assert_int_equal(
	    due_complete_tx(db, &co, id, 1, "r", 1, hook_insert, &fail),
	    DUE_ERROR);
	assert_non_null(strstr(due_error_last(), "hook"));
	assert_int_equal(state_of(db, id), DUE_CLAIMED);
	assert_int_equal(sql_int("SELECT count(*) FROM effect"), 0);
	due_task *t = get(db, id);
	assert_string_equal(t->attempts[0].outcome, "RUNNING");
	due_task_free(t);
	/* the hook writes: its row commits with DONE */
	fail = HOOK_WRITE;
	assert_int_equal(
	    due_complete_tx(db, &co, id, 1, "r", 1, hook_insert, &fail), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_int_equal(state_of(db, id), DUE_DONE);
	assert_int_equal(sql_int("SELECT count(*) FROM effect"), 1);
	/* a late duplicate: refused, hook not called, no second effect */
	assert_int_equal(
	    due_complete_tx(db, &co, id, 1, "r", 1, hook_insert, &fail), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(sql_int("SELECT count(*) FROM effect"), 1);
	/* a hook whose SQL failed poisons the transaction even when it
	   returns 0: COMMIT answers ROLLBACK, and that is reported */
	due_id id2 = add(db, "k", 0, 5);
	claim_one(db, id2, LONG_LEASE);
	sql("INSERT INTO effect VALUES (%lld, 1)", (long long)id2);
	assert_int_equal(
	    due_complete_tx(db, &co, id2, 1, "r", 1, hook_insert, &fail),
	    DUE_ERROR);
	assert_int_equal(state_of(db, id2), DUE_CLAIMED);
	fail = HOOK_WRITE_IGNORING_ERRORS;
	assert_int_equal(
	    due_complete_tx(db, &co, id2, 1, "r", 1, hook_insert, &fail),
	    DUE_ERROR);
	assert_non_null(strstr(due_error_last(), "rolled back"));
	assert_int_equal(state_of(db, id2), DUE_CLAIMED);
	/* and the handle is usable afterwards */
	assert_int_equal(due_complete(db, &co, id2, 1, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	/* a session that lost our prepared statements: prepared again */
	due_id id3 = add(db, "k", 0, 5);
	claim_one(db, id3, LONG_LEASE);
	fail = HOOK_DEALLOCATE;
	assert_int_equal(
	    due_complete_tx(db, &co, id3, 1, "r", 1, hook_insert, &fail), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_int_equal(state_of(db, id3), DUE_DONE);
	add(db, "k", 0, 5);
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 5, LONG_LEASE), 0);
	assert_int_equal(l->count, 1);
	due_task_list_free(l);
	sql("DROP TABLE effect");
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Reconnects                                                          */
/* ------------------------------------------------------------------ */

static void test_reconnect(void **state)
{
	(void)state;
	char u[1200], app[64];
	due_task_list *l = NULL;
	due_time now;

	snprintf(app, sizeof(app), "due_reset_%d", (int)getpid());
	url_for(u, sizeof(u), schema, "");
	strncat(u, "&application_name=", sizeof(u) - strlen(u) - 1);
	strncat(u, app, sizeof(u) - strlen(u) - 1);
	due_db *db = open_url(u);
	due_id id = add(db, "k", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 1, LONG_LEASE), 0);
	due_task_list_free(l); /* the claim statement is now prepared */
	sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
	    "application_name = '%s'",
	    app);
	/* the session is gone once the server no longer lists it */
	for (int64_t end = mono_ms() + HANG_MS;
	     sql_int("SELECT count(*) FROM pg_stat_activity WHERE "
		     "application_name = '%s'",
		     app);
	     tu_sleep_ms(10))
		if (mono_ms() > end)
			fail_msg("session %s was never terminated", app);
	/* the call that meets the dead session reports the store error ... */
	int rc = due_now(db, &now);
	assert_int_equal(rc, DUE_ESTORE);
	assert_non_null(strstr(due_error_last(), "postgres store"));
	/* ... the next one reconnects and prepares its statements again */
	assert_int_equal(due_now(db, &now), 0);
	add(db, "k", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 1);
	assert_true(l->items[0].id != id);
	due_task_list_free(l);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Bounded waits (issue 35)                                            */
/* ------------------------------------------------------------------ */

/*
** A handle on this run's schema whose session is named app (app_<pid>)
** and whose waits keep to timeout=2s, so lock_timeout is 1.5 s.
*/
static due_db *open_named(char *app, size_t n, const char *name)
{
	char u[1300], more[128];

	snprintf(app, n, "%s_%d", name, (int)getpid());
	snprintf(more, sizeof(more), "&application_name=%s&timeout=2s", app);
	url_for(u, sizeof(u), schema, more);
	return open_url(u);
}

/* The pid of app's session (-1: none). */
static int64_t backend_of(const char *app)
{
	return sql_int("SELECT pid FROM pg_stat_activity WHERE "
		       "application_name = '%s'",
		       app);
}

/*
** Another session holds the task's row (an operator's SELECT ... FOR
** UPDATE): the lease renewal behind it gives up within the bound, the
** server saying so (lock_timeout), and the session stays usable.  The
** holder's session is ended by the server after 20 s idle in its
** transaction: that only guards a hang.
*/
static void test_row_lock_wait_is_bounded(void **state)
{
	(void)state;
	char app[64];
	due_extend_outcome eo;
	due_time now;
	due_db *db = open_named(app, sizeof(app), "due_lock");
	due_id id = add(db, "k", 0, 5);
	int32_t att = claim_one(db, id, LONG_LEASE);
	int64_t pid = backend_of(app), t0, took;
	PGconn *holder = connect_to(url);
	char hold[128];
	PGresult *r;
	int rc;

	exec_ok(holder, "BEGIN");
	exec_ok(holder,
		"SET LOCAL idle_in_transaction_session_timeout = '20s'");
	snprintf(hold, sizeof(hold),
		 "SELECT id FROM due_task WHERE id = %lld FOR UPDATE",
		 (long long)id);
	r = PQexec(holder, hold);
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	assert_int_equal(PQntuples(r), 1);
	PQclear(r);
	t0 = mono_ms();
	rc = due_extend(db, &eo, id, att, LONG_LEASE);
	took = mono_ms() - t0;
	print_message("extend behind a row lock, timeout=2s: %lld ms: %s\n",
		      (long long)took, due_error_last());
	assert_int_equal(rc, DUE_EBUSY);
	assert_non_null(strstr(due_error_last(), "extend"));
	assert_non_null(
	    strstr(due_error_last(), "a lock held by another session"));
	/* the same session answers the next call at once */
	assert_int_equal(due_now(db, &now), 0);
	assert_int_equal(backend_of(app), pid);
	exec_ok(holder, "ROLLBACK");
	PQfinish(holder);
	assert_int_equal(due_extend(db, &eo, id, att, LONG_LEASE), 0);
	assert_int_equal(eo, DUE_EXTEND_OK);
	due_close(db);
}

/* Resumes a stopped backend after 20 s unless told to stop: a hang guard. */
typedef struct resume_guard {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	pid_t pid;
} resume_guard;

static void *resume_later(void *p)
{
	resume_guard *g = p;
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	pthread_mutex_lock(&g->mu);
	while (!g->done && pthread_cond_timedwait(&g->cv, &g->mu, &until) == 0)
		;
	pthread_mutex_unlock(&g->mu);
	kill(g->pid, SIGCONT);
	return NULL;
}

/*
** The server stops answering a connected session (its backend stopped
** with SIGSTOP, as a frozen host would be): the call gives up at the
** bound with "no answer from the store at HOST:PORT in 2 s", and the
** next call connects again.  Needs the server on this host, run by us
** or by a user we may signal (scripts/pg-test-cluster's); otherwise the
** check says so and is not run.
*/
static void test_silent_server_is_bounded(void **state)
{
	(void)state;
	char app[64];
	due_time now;
	due_db *db = open_named(app, sizeof(app), "due_silent");
	resume_guard g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
			  false, 0};
	pthread_t th;
	int64_t t0, took;
	int rc;

	assert_int_equal(due_now(db, &now), 0);
	g.pid = (pid_t)backend_of(app);
	if (g.pid <= 0 || kill(g.pid, SIGSTOP) != 0) {
		print_message("NOTE: cannot stop backend %d (%s): the silent "
			      "server check was not run\n",
			      (int)g.pid, strerror(errno));
		due_close(db);
		return;
	}
	assert_int_equal(pthread_create(&th, NULL, resume_later, &g), 0);
	t0 = mono_ms();
	rc = due_now(db, &now);
	took = mono_ms() - t0;
	pthread_mutex_lock(&g.mu);
	g.done = true;
	pthread_cond_signal(&g.cv);
	pthread_mutex_unlock(&g.mu);
	pthread_join(th, NULL); /* it resumed the backend */
	print_message("a call to a stopped backend, timeout=2s: %lld ms: %s\n",
		      (long long)took, due_error_last());
	assert_int_equal(rc, DUE_ESTORE);
	assert_non_null(
	    strstr(due_error_last(), "no answer from the store at "));
	assert_non_null(strstr(due_error_last(), " in 2 s"));
	/* the next call has a session of its own */
	assert_int_equal(due_now(db, &now), 0);
	assert_int_equal(sql_int("SELECT count(*) FROM pg_stat_activity WHERE "
				 "application_name = '%s' AND pid <> %d",
				 app, (int)g.pid),
			 1);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Schema 2: upgrade, schedules, metrics                               */
/* ------------------------------------------------------------------ */

/* Columns and constraints of the version-2 tables in `sch`, as text. */
static void v2_shape(char *buf, size_t n, const char *sch)
{
	char cols[3000], cons[1000];
	sql_text(
	    cols, sizeof(cols),
	    "SELECT string_agg(table_name || '.' || "
	    "column_name || ' ' || data_type || ' ' || is_nullable || ' ' || "
	    "coalesce(column_default, ''), ', ' ORDER BY table_name, "
	    "ordinal_position) FROM information_schema.columns WHERE "
	    "table_schema = '%s' AND table_name IN ('due_schedule', "
	    "'due_worker')",
	    sch);
	sql_text(
	    cons, sizeof(cons),
	    "SELECT string_agg(conname || ' ' || "
	    "pg_get_constraintdef(c.oid), ', ' ORDER BY conname) FROM "
	    "pg_constraint c JOIN pg_namespace s ON s.oid = c.connamespace "
	    "WHERE s.nspname = '%s' AND conname LIKE 'due_%%'",
	    sch);
	snprintf(buf, n, "%s | %s", cols, cons);
}

/*
** Undo step 5 (scale) in `sch`: what a version-4 `due init` left.  Steps
** 1 to 4 are released and unchanged, so this is exactly a version-4
** store (storage parameters included: RESET is the default they had).
*/
/*
** Undo step 11 (run after) in `sch`, and the routines `due init` added
** with it: what a version-10 `due init` left.
*/
static void back_to_v10(const char *sch)
{
	sql("DROP FUNCTION %s.due_schedule_after(text, text, bigint[],"
	    " interval, timestamptz, text, integer, boolean)",
	    sch);
	sql("DROP FUNCTION %s.due_release(bigint[])", sch);
	sql("DROP TABLE %s.due_after", sch);
	sql("ALTER TABLE %s.due_task DROP COLUMN after_n, DROP COLUMN"
	    " after_left, DROP COLUMN after_any_end, DROP COLUMN after_at,"
	    " DROP COLUMN after_delay_us, DROP COLUMN is_parent",
	    sch);
	sql("UPDATE %s.due_meta SET value = '10'", sch);
}

static void back_to_v4(const char *sch)
{
	back_to_v10(sch);
	sql("DROP TABLE %s.due_lock", sch);
	sql("DROP INDEX %s.due_task_dead", sch);
	sql("DROP STATISTICS %s.due_task_kind_state", sch);
	sql("ALTER TABLE %s.due_worker DROP COLUMN pruned, RESET (fillfactor)",
	    sch);
	sql("ALTER TABLE %s.due_task RESET (autovacuum_vacuum_scale_factor,"
	    " autovacuum_vacuum_threshold, "
	    "autovacuum_vacuum_insert_scale_factor,"
	    " autovacuum_vacuum_insert_threshold,"
	    " autovacuum_analyze_scale_factor, autovacuum_analyze_threshold,"
	    " autovacuum_vacuum_cost_delay, autovacuum_vacuum_cost_limit)",
	    sch);
	sql("ALTER TABLE %s.due_attempt RESET (fillfactor,"
	    " autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,"
	    " autovacuum_vacuum_insert_scale_factor,"
	    " autovacuum_vacuum_insert_threshold, autovacuum_vacuum_cost_delay,"
	    " autovacuum_vacuum_cost_limit)",
	    sch);
	sql("ALTER TABLE %s.due_audit RESET (autovacuum_vacuum_scale_factor,"
	    " autovacuum_vacuum_threshold)",
	    sch);
	sql("UPDATE %s.due_meta SET value = '4'", sch);
}

/*
** Undo step 4 (flow control) in `sch`: what a version-3 `due init` left.
** Steps 1 to 3 are released and unchanged, so this is exactly a
** version-3 store.
*/
static void back_to_v3(const char *sch)
{
	back_to_v4(sch);
	sql("DROP TABLE %s.due_kind, %s.due_rate", sch, sch);
	sql("DROP INDEX %s.due_task_claim, %s.due_task_kind_claim", sch, sch);
	sql("ALTER TABLE %s.due_task DROP COLUMN priority, DROP COLUMN grp,"
	    " DROP COLUMN timeout_us",
	    sch);
	sql("ALTER TABLE %s.due_attempt DROP CONSTRAINT"
	    " due_attempt_outcome_check, ADD CONSTRAINT"
	    " due_attempt_outcome_check CHECK (outcome IN ('RUNNING', 'DONE',"
	    " 'FAILED', 'LEASE_EXPIRED', 'CANCELLED', 'REQUEUED', 'KILLED'))",
	    sch);
	sql("UPDATE %s.due_meta SET value = '3'", sch);
}

static void test_schema_upgrade_from_v1(void **state)
{
	(void)state;
	char sch[80], u[1200], buf[64], fresh[4200], upgraded[4200];
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;

	o.create = true;
	snprintf(sch, sizeof(sch), "%s_v1", schema);
	sql("DROP SCHEMA IF EXISTS %s CASCADE", sch);
	sql("CREATE SCHEMA %s", sch);
	url_for(u, sizeof(u), sch, "");
	assert_int_equal(due_open(&db, u, &o), 0);
	due_id waiting = add(db, "k", LONG_LEASE, 5);
	due_id running = add(db, "k", 0, 5);
	claim_one(db, running, LONG_LEASE);
	due_close(db);
	/*
	** Back to version 1 as the old `due init` left it: step 1 is released
	** and unchanged, and a new database runs it before step 2, so without
	** what step 2 added this is exactly a version-1 store.
	*/
	back_to_v3(sch);
	sql("DROP TABLE %s.due_schedule, %s.due_worker", sch, sch);
	sql("UPDATE %s.due_meta SET value = '1'", sch);

	/* without create: refused as older, and nothing changes */
	db = NULL;
	assert_int_equal(due_open(&db, u, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "older"));
	assert_non_null(strstr(due_error_last(), "due init"));
	due_close(db);
	assert_int_equal(
	    sql_int("SELECT count(*) FROM pg_tables WHERE "
		    "schemaname = '%s' AND tablename = 'due_schedule'",
		    sch),
	    0);

	/* an upgrade that fails half-way leaves version 1 intact */
	sql("CREATE TABLE %s.due_worker (x int)", sch);
	db = NULL;
	assert_true(due_open(&db, u, &o) < 0);
	assert_non_null(strstr(due_error_last(), "due_worker"));
	due_close(db);
	assert_string_equal(
	    sql_text(buf, sizeof(buf),
		     "SELECT value FROM "
		     "%s.due_meta WHERE name = 'schema_version'",
		     sch),
	    "1");
	assert_int_equal(
	    sql_int("SELECT count(*) FROM pg_tables WHERE "
		    "schemaname = '%s' AND tablename = 'due_schedule'",
		    sch),
	    0);
	sql("DROP TABLE %s.due_worker", sch);

	/* three `due init` at once upgrade it once */
	concurrent_inits(u, 3);
	assert_string_equal(
	    sql_text(buf, sizeof(buf),
		     "SELECT value FROM "
		     "%s.due_meta WHERE name = 'schema_version'",
		     sch),
	    DUE_SCHEMA_VERSION_TEXT);
	assert_int_equal(sql_int("SELECT count(*) FROM %s.due_meta", sch), 1);

	/* the tasks survived, untouched; the new tables work */
	db = open_url(u);
	assert_int_equal(state_of(db, waiting), DUE_SCHEDULED);
	due_task *t = get(db, running);
	assert_int_equal(t->state, DUE_CLAIMED);
	assert_int_equal(t->attempt, 1);
	assert_string_equal(t->lease_owner, "w1");
	assert_int_equal(t->n_attempts, 1);
	due_task_free(t);
	due_cron_def d = DUE_CRON_DEF_INIT;
	d.name = "nightly";
	d.expr = "0 2 * * *";
	d.kind = "k";
	assert_int_equal(due_cron_put(db, &d), 0);
	due_worker_stats ws = {.claimed = 1};
	assert_int_equal(due_worker_report(db, "w1", &ws), 0);
	due_close(db);

	/* and the upgraded schema is the one a new store gets */
	v2_shape(fresh, sizeof(fresh), schema);
	v2_shape(upgraded, sizeof(upgraded), sch);
	assert_non_null(strstr(fresh, "due_schedule.next_slot timestamp with "
				      "time zone NO"));
	assert_string_equal(upgraded, fresh);
	sql("DROP SCHEMA %s CASCADE", sch);
}

/* Columns, constraints and indexes of the flow-control tables in `sch`. */
static void v4_shape(char *buf, size_t n, const char *sch)
{
	char cols[4000], idx[2000];
	sql_text(cols, sizeof(cols),
		 "SELECT string_agg(table_name || '.' || column_name || ' ' ||"
		 " data_type || ' ' || is_nullable || ' ' ||"
		 " coalesce(column_default, ''), ', ' ORDER BY table_name,"
		 " column_name) FROM information_schema.columns WHERE"
		 " table_schema = '%s' AND table_name IN ('due_task',"
		 " 'due_attempt', 'due_kind', 'due_rate')",
		 sch);
	sql_text(idx, sizeof(idx),
		 "SELECT string_agg(replace(indexdef, '%s.', ''), ', '"
		 " ORDER BY indexname) FROM pg_indexes WHERE schemaname = '%s'",
		 sch, sch);
	int w = snprintf(buf, n, "%s | %s", cols, idx);
	assert_true(w >= 0 && (size_t)w < n); /* (and gcc sees it checked) */
}

/*
** Version 3 -> 4 (flow control): refused without `due init`; three inits
** at once upgrade it once; the tasks survive with priority 0, no group
** and no time limit of their own; the kinds work; and the upgraded
** schema is the one a new store gets.
*/
static void test_schema_upgrade_from_v3(void **state)
{
	(void)state;
	char sch[80], u[1200], buf[64], fresh[8000], upgraded[8000];
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;

	o.create = true;
	snprintf(sch, sizeof(sch), "%s_v3", schema);
	sql("DROP SCHEMA IF EXISTS %s CASCADE", sch);
	sql("CREATE SCHEMA %s", sch);
	url_for(u, sizeof(u), sch, "");
	assert_int_equal(due_open(&db, u, &o), 0);
	due_id waiting = add(db, "k", LONG_LEASE, 5);
	due_id running = add(db, "k", 0, 5);
	claim_one(db, running, LONG_LEASE);
	due_close(db);
	back_to_v3(sch);

	db = NULL;
	assert_int_equal(due_open(&db, u, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "older"));
	due_close(db);
	assert_int_equal(
	    sql_int("SELECT count(*) FROM pg_tables WHERE"
		    " schemaname = '%s' AND tablename = 'due_kind'",
		    sch),
	    0);

	concurrent_inits(u, 3);
	assert_string_equal(sql_text(buf, sizeof(buf),
				     "SELECT value FROM %s.due_meta"
				     " WHERE name = 'schema_version'",
				     sch),
			    DUE_SCHEMA_VERSION_TEXT);
	db = open_url(u);
	due_task *t = get(db, running);
	assert_int_equal(t->state, DUE_CLAIMED);
	assert_int_equal(t->priority, 0);
	assert_null(t->group);
	assert_int_equal(t->timeout_us, 0);
	assert_int_equal(t->n_attempts, 1);
	/* a try of an old task can end TIMED_OUT now */
	due_fail_outcome fo;
	assert_int_equal(due_fail_as(db, &fo, running, 1, "timed out after 1s",
				     DUE_OUT_TIMED_OUT),
			 0);
	due_task_free(t);
	t = get(db, running);
	assert_string_equal(t->attempts[0].outcome, "TIMED_OUT");
	due_task_free(t);
	assert_int_equal(state_of(db, waiting), DUE_SCHEDULED);
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	ks.paused = 1;
	assert_int_equal(due_kind_set(db, "k", &ks), 0);
	due_close(db);

	v4_shape(fresh, sizeof(fresh), schema);
	v4_shape(upgraded, sizeof(upgraded), sch);
	assert_non_null(strstr(fresh, "due_task_claim"));
	assert_string_equal(upgraded, fresh);
	sql("DROP SCHEMA %s CASCADE", sch);
}

/* ------------------------------------------------------------------ */
/* Flow control: limits across connections, the claim's plan           */
/* ------------------------------------------------------------------ */

static void kind_set(due_db *db, const char *kind, int paused, int rate_n,
		     int64_t rate_us, int max_running, int per_group)
{
	due_kind_settings k = DUE_KIND_SETTINGS_INIT;
	k.paused = paused;
	k.rate_n = rate_n;
	k.rate_us = rate_us;
	k.max_running = max_running;
	k.max_running_per_group = per_group;
	if (due_kind_set(db, kind, &k) < 0)
		fail_msg("kind set %s: %s", kind, due_error_last());
}

static due_id add_opts(due_db *db, const char *kind, int prio,
		       const char *group)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	o.priority = prio;
	o.group = group;
	if (due_schedule(db, &s, kind, "", 0, &o) < 0)
		fail_msg("schedule: %s", due_error_last());
	return s.id;
}

/*
** What only PostgreSQL's claim shows: a paused kind's task is not
** claimed by id either, nor offered by upcoming; the limited claim takes
** the kind's time limit onto its tasks and counts what it held back.
*/
static void test_flow_pause_and_limited_claim(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_task_list *l = NULL;
	due_task *t = NULL;
	due_upcoming *up = NULL;
	due_kind_info *ki = NULL;
	due_time now;

	due_id p = add_opts(db, "paused", 0, NULL);
	kind_set(db, "paused", 1, -1, 0, -1, -1);
	assert_int_equal(due_claim_id(db, &t, p, "w", LONG_LEASE), DUE_EBUSY);
	assert_int_equal(due_now(db, &now), 0);
	assert_int_equal(
	    due_upcoming_get(db, &up, NULL, 0, false, now + 3600000000LL, 10),
	    0);
	assert_int_equal(up->count, 0);
	due_upcoming_free(up);

	/* max_running 1 and a time limit: one claimed, one held */
	due_kind_settings k = DUE_KIND_SETTINGS_INIT;
	k.max_running = 1;
	k.timeout_us = 7000000;
	assert_int_equal(due_kind_set(db, "lim", &k), 0);
	add_opts(db, "lim", 0, NULL);
	due_id second = add_opts(db, "lim", 0, NULL);
	add_opts(db, "free", 0, NULL);
	for (int i = 0; i < 2; i++) { /* learn, then limited first */
		assert_int_equal(
		    due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
		if (i == 0) {
			assert_int_equal(l->count, 2);
			for (size_t j = 0; j < l->count; j++)
				if (strcmp(l->items[j].kind, "lim") == 0)
					assert_int_equal(l->items[j].timeout_us,
							 7000000);
		} else {
			assert_int_equal(l->count, 0);
			assert_int_equal(l->retry_in_us, 100000);
		}
		due_task_list_free(l);
	}
	assert_int_equal(due_claim_id(db, &t, second, "w", LONG_LEASE),
			 DUE_EBUSY);
	assert_int_equal(due_kind_get(db, &ki, "lim"), 0);
	assert_int_equal(ki->running, 1);
	assert_int_equal(ki->due, 1);
	assert_true(ki->held_running >= 1);
	assert_int_equal(ki->timeout_us, 7000000);
	due_kind_info_free(ki);
	/* resume the paused kind: claimable by id at once */
	kind_set(db, "paused", 0, -1, 0, -1, -1);
	assert_int_equal(due_claim_id(db, &t, p, "w", LONG_LEASE), 0);
	due_task_free(t);
	assert_int_equal(due_kind_remove(db, "lim"), 0);
	assert_int_equal(due_kind_remove(db, "lim"), DUE_ENOTFOUND);
	assert_int_equal(due_claim_id(db, &t, second, "w", LONG_LEASE), 0);
	due_task_free(t);
	due_close(db);
}

#define FLOW_THREADS 4

typedef struct flow_arg {
	const char *kinds[2];
	size_t n_kinds;
	const char *check; /* SQL: a count that must stay <= limit */
	int64_t limit;
	int64_t worst; /* the largest count seen */
	int64_t claimed;
	int64_t hold_ms; /* how long a claimed try runs */
	char err[256];
} flow_arg;

/*
** One worker on its own connection: claim, check the running count from
** a connection of its own, hold the tries a moment, complete them; until
** nothing of the kinds is left.
*/
static void *flow_worker(void *p)
{
	flow_arg *a = p;
	due_db *db = NULL;
	PGconn *c = PQconnectdb(url);
	int64_t end = mono_ms() + HANG_MS;

	if (due_open(&db, url, NULL) < 0 || PQstatus(c) != CONNECTION_OK) {
		snprintf(a->err, sizeof(a->err), "open: %s", due_error_last());
		goto done;
	}
	while (mono_ms() < end) {
		due_task_list *l = NULL;
		if (due_claim(db, &l, "fw", a->kinds, a->n_kinds, 3,
			      LONG_LEASE) < 0) {
			snprintf(a->err, sizeof(a->err), "claim: %s",
				 due_error_last());
			break;
		}
		PGresult *r = PQexec(c, a->check);
		int64_t n = PQresultStatus(r) == PGRES_TUPLES_OK
				? strtoll(PQgetvalue(r, 0, 0), NULL, 10)
				: 999;
		PQclear(r);
		if (n > a->worst)
			a->worst = n;
		a->claimed += (int64_t)l->count;
		if (l->count)
			tu_sleep_ms((int)a->hold_ms);
		for (size_t i = 0; i < l->count; i++) {
			due_completion cp = {l->items[i].id,
					     l->items[i].attempt, NULL, 0, 0};
			if (due_complete_batch(db, &cp, 1) < 0)
				snprintf(a->err, sizeof(a->err), "complete: %s",
					 due_error_last());
		}
		bool empty = l->count == 0;
		int64_t wait = l->retry_in_us;
		due_task_list_free(l);
		if (empty) {
			r = PQexec(c, "SELECT count(*) FROM due_task WHERE"
				      " state IN ('SCHEDULED', 'CLAIMED')");
			bool left = PQresultStatus(r) == PGRES_TUPLES_OK &&
				    strcmp(PQgetvalue(r, 0, 0), "0") != 0;
			PQclear(r);
			if (!left)
				break;
			tu_sleep_ms(wait > 0 ? (int)(wait / 1000) + 1 : 5);
		}
	}
done:
	due_close(db);
	PQfinish(c);
	return NULL;
}

/* Run FLOW_THREADS workers over a; the worst count and the total. */
static void run_flow(flow_arg *a, int64_t *worst, int64_t *claimed)
{
	pthread_t th[FLOW_THREADS];
	flow_arg args[FLOW_THREADS];

	*worst = *claimed = 0;
	for (int i = 0; i < FLOW_THREADS; i++) {
		args[i] = *a;
		assert_int_equal(
		    pthread_create(&th[i], NULL, flow_worker, &args[i]), 0);
	}
	for (int i = 0; i < FLOW_THREADS; i++) {
		pthread_join(th[i], NULL);
		if (args[i].err[0])
			fail_msg("worker %d: %s", i, args[i].err);
		if (args[i].worst > *worst)
			*worst = args[i].worst;
		*claimed += args[i].claimed;
	}
}

/*
** The most tries of `kind` (of one group, with by_group) ever running at
** once, from the history: at each claim time, the tries claimed at or
** before it and not yet ended.  A try's end (its completion's now())
** precedes the commit that frees its slot, which precedes the next
** claim's time (taken after the kind's lock), so this is exact.
*/
static int64_t most_at_once(const char *kind, bool by_group)
{
	return sql_int(
	    "WITH x AS (SELECT a.claimed_at, a.ended_at, t.grp FROM"
	    " due_attempt a JOIN due_task t ON t.id = a.task_id"
	    " WHERE t.kind = '%s')"
	    " SELECT coalesce(max((SELECT count(*) FROM x y WHERE"
	    " y.claimed_at <= x.claimed_at AND (y.ended_at IS NULL OR"
	    " y.ended_at > x.claimed_at)%s)), 0) FROM x",
	    kind, by_group ? " AND y.grp = x.grp" : "");
}

/*
** max_running 2 and max_running_per_group 1, claimed at once by four
** connections: the counts never pass the limits, and every task runs.
*/
static void test_flow_running_limits_across_connections(void **state)
{
	(void)state;
	due_db *db = open_db();
	int64_t worst, claimed;
	char grp[8];

	kind_set(db, "mr", -1, -1, 0, 2, -1);
	kind_set(db, "mg", -1, -1, 0, -1, 1);
	for (int i = 0; i < 30; i++)
		add_opts(db, "mr", i % 3, NULL);
	for (int i = 0; i < 40; i++) {
		snprintf(grp, sizeof(grp), "g%d", i % 4);
		add_opts(db, "mg", 0, grp);
	}
	add_opts(db, "free", 0, NULL);

	flow_arg a = {.kinds = {"mr", "free"},
		      .n_kinds = 2,
		      .check = "SELECT count(*) FROM due_task WHERE kind ="
			       " 'mr' AND state = 'CLAIMED'",
		      .limit = 2,
		      .hold_ms = 5};
	run_flow(&a, &worst, &claimed);
	assert_true(worst <= 2);
	assert_int_equal(claimed, 31);
	assert_true(most_at_once("mr", false) <= 2);
	assert_int_equal(most_at_once("mr", false) >= 1, 1);

	flow_arg g = {.kinds = {"mg"},
		      .n_kinds = 1,
		      .check = "SELECT coalesce(max(n), 0) FROM (SELECT"
			       " count(*) AS n FROM due_task WHERE kind = 'mg'"
			       " AND state = 'CLAIMED' GROUP BY grp) x",
		      .limit = 1,
		      .hold_ms = 5};
	run_flow(&g, &worst, &claimed);
	assert_true(worst <= 1);
	assert_int_equal(claimed, 40);
	assert_int_equal(most_at_once("mg", true), 1);
	/* and the groups ran beside each other */
	assert_true(most_at_once("mg", false) >= 2);
	assert_int_equal(
	    sql_int("SELECT count(*) FROM due_task WHERE state = 'DONE'"), 71);
	due_close(db);
}

/*
** rate 3 per 200 ms, claimed by four connections: no window of 200 ms of
** the attempts' claim times (the store's clock) holds more than 3.
*/
static void test_flow_rate_across_connections(void **state)
{
	(void)state;
	due_db *db = open_db();
	int64_t worst, claimed;

	kind_set(db, "rt", -1, 3, 200000, -1, -1);
	for (int i = 0; i < 24; i++)
		add_opts(db, "rt", 0, NULL);
	flow_arg a = {
	    .kinds = {"rt"}, .n_kinds = 1, .check = "SELECT 0", .hold_ms = 0};
	run_flow(&a, &worst, &claimed);
	assert_int_equal(claimed, 24);
	/* the windows (t - 200ms, t] ending at each claim time */
	assert_int_equal(
	    sql_int("WITH x AS (SELECT claimed_at FROM due_attempt)"
		    " SELECT max((SELECT count(*) FROM x y WHERE"
		    " y.claimed_at > x.claimed_at - interval '200 ms'"
		    " AND y.claimed_at <= x.claimed_at)) FROM x"),
	    3);
	assert_int_equal(sql_int("SELECT count(*) FROM due_attempt"), 24);
	due_close(db);
}

/* What explain_hook looks for and what it found. */
typedef struct plan_req {
	const char *like; /* a piece of the statement's SQL */
	const char *args;
	char plan[16384];
	char err[1024];
} plan_req;

/*
** A completion hook: on the store's own session (where its statements
** are prepared), EXPLAIN the prepared statement whose SQL is like
** req->like.  EXPLAIN without ANALYZE runs nothing.
*/
static int explain_hook(void *conn, const due_task *task, void *payload)
{
	(void)task;
	plan_req *q = payload;
	char buf[512];
	size_t off = 0;
	PGresult *r;

	snprintf(buf, sizeof(buf),
		 "SELECT name FROM pg_prepared_statements"
		 " WHERE statement LIKE '%s' LIMIT 1",
		 q->like);
	r = PQexec(conn, buf);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
		snprintf(q->err, sizeof(q->err), "no statement like %s",
			 q->like);
		PQclear(r);
		return 0;
	}
	snprintf(buf, sizeof(buf), "EXPLAIN EXECUTE %s(%s)",
		 PQgetvalue(r, 0, 0), q->args);
	PQclear(r);
	r = PQexec(conn, buf);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		snprintf(q->err, sizeof(q->err), "%s: %s", buf,
			 PQerrorMessage(conn));
	for (int i = 0; i < PQntuples(r); i++) {
		int w = snprintf(q->plan + off, sizeof(q->plan) - off, "%s\n",
				 PQgetvalue(r, i, 0));
		if (w < 0 || off + (size_t)w >= sizeof(q->plan))
			break;
		off += (size_t)w;
	}
	PQclear(r);
	return 0;
}

/*
** The claim of kinds without limits walks the priorities through
** due_task_claim: with 100k tasks pending over 10 priorities its plan
** never sorts the backlog, and it claims the lowest priority first.
*/
static void test_flow_claim_plan_priorities(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_task_list *l = NULL;

	sql("INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"
	    " backoff_us, backoff_cap_us, priority, created_at, updated_at)"
	    " SELECT 'bulk', '', 'SCHEDULED', now() - interval '1 hour' +"
	    " i * interval '1 ms', 5, 1000000, 60000000, (i %% 10) * 7 - 30,"
	    " now(), now() FROM generate_series(1, 100000) i");
	sql("ANALYZE due_task");
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 10);
	for (size_t i = 0; i < l->count; i++)
		assert_int_equal(l->items[i].priority, -30);
	due_task_list_free(l);
	/* the statement the store prepared, on its own session */
	static plan_req q = {.like = "WITH RECURSIVE pr AS%",
			     .args = "'w', 60000000, 10"};
	due_id h = add(db, "hook", 0, 5);
	due_complete_outcome co;
	due_task *ht = NULL;
	assert_int_equal(due_claim_id(db, &ht, h, "w", LONG_LEASE), 0);
	due_task_free(ht);
	assert_int_equal(
	    due_complete_tx(db, &co, h, 1, "", 0, explain_hook, &q), 0);
	if (q.err[0])
		fail_msg("%s", q.err);
	/* the pick (CTE p, up to CTE c) reads the index in order */
	char *pick = strstr(q.plan, "CTE p\n"), *end;
	assert_non_null(pick);
	assert_non_null(end = strstr(pick, "CTE c\n"));
	*end = 0;
	assert_non_null(strstr(pick, "Index Scan using due_task_claim"));
	assert_null(strstr(pick, "Sort"));
	assert_null(strstr(pick, "Bitmap"));
	assert_null(strstr(q.plan, "Seq Scan on due_task"));
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Schema 5: upgrade; cheap reads at size                              */
/* ------------------------------------------------------------------ */

/* The storage parameters of the due tables in `sch`, as text. */
static void v5_options(char *buf, size_t n, const char *sch)
{
	sql_text(buf, n,
		 "SELECT string_agg(c.relname || ' ' || array_to_string("
		 "c.reloptions, ','), '; ' ORDER BY c.relname) FROM pg_class c"
		 " JOIN pg_namespace s ON s.oid = c.relnamespace"
		 " WHERE s.nspname = '%s' AND c.reloptions IS NOT NULL",
		 sch);
}

/*
** Version 4 -> 5: refused without `due init`; three inits at once
** upgrade it once; the tasks survive and are counted; the lease, the
** worker's pruned count and the dead-letter index work; and the upgraded
** schema (columns, indexes, statistics, storage parameters) is the one
** a new store gets.
*/
static void test_schema_upgrade_from_v4(void **state)
{
	(void)state;
	char sch[80], u[1200], buf[64], fresh[8000], upgraded[8000];
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;
	due_fail_outcome fo;

	o.create = true;
	snprintf(sch, sizeof(sch), "%s_v4", schema);
	sql("DROP SCHEMA IF EXISTS %s CASCADE", sch);
	sql("CREATE SCHEMA %s", sch);
	url_for(u, sizeof(u), sch, "");
	assert_int_equal(due_open(&db, u, &o), 0);
	due_id waiting = add(db, "k", LONG_LEASE, 5);
	due_id dead = add(db, "k", 0, 1);
	claim_one(db, dead, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, dead, 1, "boom"), 0);
	due_close(db);
	back_to_v4(sch);

	db = NULL;
	assert_int_equal(due_open(&db, u, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "older"));
	due_close(db);
	assert_int_equal(
	    sql_int("SELECT count(*) FROM pg_tables WHERE"
		    " schemaname = '%s' AND tablename = 'due_lock'",
		    sch),
	    0);

	concurrent_inits(u, 3);
	assert_string_equal(sql_text(buf, sizeof(buf),
				     "SELECT value FROM %s.due_meta"
				     " WHERE name = 'schema_version'",
				     sch),
			    DUE_SCHEMA_VERSION_TEXT);
	db = open_url(u);
	assert_int_equal(state_of(db, waiting), DUE_SCHEDULED);
	due_stats st;
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.dead, 1);
	assert_int_equal(st.counts[DUE_SCHEDULED], 1);
	bool held = false;
	assert_int_equal(due__lock_take(db, &held, "prune", "w1", LONG_LEASE),
			 0);
	assert_true(held);
	assert_int_equal(due__lock_take(db, &held, "prune", "w2", LONG_LEASE),
			 0);
	assert_false(held);
	due_worker_stats ws = {.claimed = 1, .pruned = 7};
	assert_int_equal(due_worker_report(db, "w1", &ws), 0);
	due_metrics *m = NULL;
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->pruned, 7);
	assert_int_equal(m->n_kinds, 1);
	assert_int_equal(m->kinds[0].counts[DUE_DEAD], 1);
	due_metrics_free(m);
	due_close(db);

	v4_shape(fresh, sizeof(fresh), schema);
	v4_shape(upgraded, sizeof(upgraded), sch);
	assert_non_null(strstr(fresh, "due_task_dead"));
	assert_string_equal(upgraded, fresh);
	v5_options(fresh, sizeof(fresh), schema);
	v5_options(upgraded, sizeof(upgraded), sch);
	assert_non_null(strstr(fresh, "autovacuum_vacuum_scale_factor=0"));
	assert_non_null(strstr(fresh, "due_attempt fillfactor=85"));
	assert_string_equal(upgraded, fresh);
	assert_int_equal(
	    sql_int("SELECT count(*) FROM pg_statistic_ext x"
		    " JOIN pg_namespace s ON s.oid = x.stxnamespace"
		    " WHERE s.nspname = '%s' AND x.stxname ="
		    " 'due_task_kind_state'",
		    sch),
	    1);
	sql("SELECT column_name FROM information_schema.columns WHERE"
	    " table_schema = '%s' AND table_name = 'due_worker' AND"
	    " column_name = 'pruned'",
	    sch);
	sql("DROP SCHEMA %s CASCADE", sch);
}

/* The statements explain_all_hook explains, with their arguments. */
#define N_READS 8
static plan_req reads[N_READS] = {
    {.like = "WITH e AS MATERIALIZED%l AS (SELECT count(*) AS n,%",
     .args = "300000000"},
    {.like = "WITH RECURSIVE e AS MATERIALIZED%", .args = "1000"},
    {.like = "WITH x AS (SELECT%width_bucket%",
     .args = "'{-2,-1}'::float8[], 2, 900000000"},
    {.like = "SELECT %FROM due_task WHERE state = _SCHEDULED_ AND $1%",
     .args = "'SCHEDULED', NULL, 0, 100"},
    {.like = "SELECT %FROM due_task WHERE state = _CLAIMED_ AND $1%",
     .args = "'CLAIMED', NULL, 0, 100"},
    {.like = "SELECT %FROM due_task WHERE state = _DONE_ AND $1%",
     .args = "'DONE', NULL, 0, 100"},
    {.like = "SELECT %FROM due_task WHERE state = _CANCELLED_ AND $1%",
     .args = "'CANCELLED', NULL, 0, 100"},
    {.like = "SELECT %FROM due_task WHERE state = _DEAD_ AND $1%",
     .args = "'DEAD', NULL, 0, 100"},
};

/* Explain every statement of `reads` as a generic plan (the worst). */
static int explain_all_hook(void *conn, const due_task *task, void *payload)
{
	(void)payload;
	PQclear(PQexec(conn, "SET LOCAL plan_cache_mode = force_generic_plan"));
	for (int i = 0; i < N_READS; i++)
		explain_hook(conn, task, &reads[i]);
	return 0;
}

/*
** stats, metrics and `due ls --state S --limit 100` at a size where the
** planner's choice means something (30,000 tasks, analyzed, seq scans
** allowed): every plan, generic, reads indexes and never scans due_task
** or due_attempt whole, nor starts parallel workers (the list by state
** is the planner's pick between the primary key in id order and the
** state's partial index, both indexes); the figures an
** operator acts on are exact, the big states are estimates with their
** bits set, and the small ones exact.
*/
static void test_reads_at_size(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_fail_outcome fo;
	due_stats st;
	due_metrics *m = NULL;

	due_id run = add(db, "op", 0, 5);
	claim_one(db, run, LONG_LEASE);
	due_id dead = add(db, "op", 0, 1);
	claim_one(db, dead, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, dead, 1, "x"), 0);
	add(db, "op", 0, 5); /* due now: one overdue */
	sql("INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"
	    " backoff_us, backoff_cap_us, created_at, updated_at)"
	    " SELECT 'bulk', '', CASE WHEN i %% 5 < 3 THEN 'SCHEDULED'"
	    " WHEN i %% 5 = 3 THEN 'DONE' ELSE 'CANCELLED' END,"
	    " now() + CASE WHEN i %% 5 < 3 THEN interval '1 day'"
	    " ELSE interval '-1 day' END, 5, 0, 0, now(), now()"
	    " FROM generate_series(1, 60000) i");
	sql("INSERT INTO due_attempt (task_id, attempt, worker, claimed_at,"
	    " due_at, ended_at, outcome) SELECT id, 1, 'w', now() - interval"
	    " '2 days', due_at, now() - interval '2 days', state FROM due_task"
	    " WHERE kind = 'bulk' AND state IN ('DONE', 'CANCELLED')");
	sql("VACUUM ANALYZE due_task");
	sql("VACUUM ANALYZE due_attempt");

	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_CLAIMED], 1);
	assert_int_equal(st.dead, 1);
	assert_int_equal(st.counts[DUE_DEAD], 1);
	assert_int_equal(st.due_unclaimed, 1);
	assert_true(st.oldest_due_unclaimed_ms >= 0);
	assert_int_equal(st.estimated, 1u << DUE_SCHEDULED | 1u << DUE_DONE |
					   1u << DUE_CANCELLED);
	/* estimates, but of the right order (36,001; 12,000; 12,000) */
	assert_true(st.counts[DUE_SCHEDULED] > 18000 &&
		    st.counts[DUE_SCHEDULED] < 72000);
	assert_true(st.counts[DUE_DONE] > 6000 && st.counts[DUE_DONE] < 24000);
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->window_us, 15LL * 60 * 1000000);
	assert_int_equal(m->kinds_estimated, st.estimated);
	assert_int_equal(m->n_kinds, 2);
	assert_string_equal(m->kinds[0].kind, "bulk");
	assert_string_equal(m->kinds[1].kind, "op");
	assert_true(m->kinds[0].counts[DUE_SCHEDULED] > 18000);
	assert_int_equal(m->kinds[1].counts[DUE_CLAIMED], 1);
	assert_int_equal(m->kinds[1].counts[DUE_DEAD], 1);
	/* the history is older than the window: none of it is read */
	assert_int_equal(m->outcomes[DUE_OUT_DONE], 0);
	assert_int_equal(m->lateness.count, 2);
	due_metrics_free(m);
	for (int s = 0; s < DUE_STATE_COUNT; s++) {
		due_list_opts lo = DUE_LIST_OPTS_INIT;
		due_task_list *l = NULL;
		lo.state = s;
		lo.limit = 100;
		assert_int_equal(due_list(db, &l, &lo), 0);
		assert_int_equal(l->count,
				 s == DUE_CLAIMED || s == DUE_DEAD ? 1 : 100);
		due_task_list_free(l);
	}

	/* the statements this session prepared, explained on it */
	due_id h = add(db, "hook", 0, 5);
	due_complete_outcome co;
	due_task *ht = NULL;
	assert_int_equal(due_claim_id(db, &ht, h, "w", LONG_LEASE), 0);
	due_task_free(ht);
	int rc = due_complete_tx(db, &co, h, 1, "", 0, explain_all_hook, NULL);
	for (int i = 0; i < N_READS; i++)
		if (reads[i].err[0])
			fail_msg("%s", reads[i].err);
	assert_int_equal(rc, 0);
	for (int i = 0; i < N_READS; i++) {
		plan_req *q = &reads[i];
		if (q->err[0])
			fail_msg("%s", q->err);
		if (strstr(q->plan, "Seq Scan on due_task") ||
		    strstr(q->plan, "Seq Scan on due_attempt") ||
		    strstr(q->plan, "Parallel") || !strstr(q->plan, "Index"))
			fail_msg("%s:\n%s", q->like, q->plan);
	}
	assert_non_null(strstr(reads[0].plan, "due_task_lease"));
	assert_non_null(strstr(reads[0].plan, "due_task_dead"));
	assert_non_null(strstr(reads[0].plan, "due_task_due"));
	assert_non_null(strstr(reads[0].plan, "due_attempt_claimed"));
	assert_non_null(strstr(reads[1].plan, "due_task_kind_claim"));
	assert_non_null(strstr(reads[2].plan, "due_attempt_claimed"));
	due_close(db);
}

static due_cron_def cron_def(const char *name, const char *expr,
			     const char *kind)
{
	due_cron_def d = DUE_CRON_DEF_INIT;
	d.name = name;
	d.expr = expr;
	d.kind = kind;
	return d;
}

/*
** A slot's task wakes listening workers like any submit: its kind is
** notified when the pass commits, and a pass that makes nothing notifies
** nothing.  (What a pass materializes, on both stores: test_store.c.)
*/
static void test_cron_fire_notifies(void **state)
{
	(void)state;
	PGconn *ear = connect_to(url);
	char kind[32];
	due_db *db = open_db();
	due_cron_tick_result r;
	due_cron_info_list *l = NULL;

	snprintf(kind, sizeof(kind), "sec-%d", (int)getpid());
	exec_ok(ear, "LISTEN due_task_new");
	due_cron_def d = cron_def("yearly", "0 0 1 1 *", kind);
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_tick(db, &r, NULL), 0);
	assert_int_equal(r.materialized, 0);
	assert_false(was_notified(ear, kind));
	/* its slot a second ago: the next pass makes its task */
	sql("UPDATE due_schedule SET next_slot = date_trunc('second', now())"
	    " - interval '1 second'");
	assert_int_equal(due_cron_tick(db, &r, NULL), 0);
	assert_int_equal(r.materialized, 1);
	came_first(ear, kind, NULL);
	assert_int_equal(due_cron_list(db, &l), 0);
	due_task *t = get(db, l->items[0].last_task);
	assert_string_equal(t->kind, kind);
	due_task_free(t);
	due_cron_info_list_free(l);
	PQfinish(ear);
	due_close(db);
}

/* Child: one scheduler pass; exit 0 when it materialized exactly one slot. */
static void one_tick_child(int go)
{
	due_db *db = NULL;
	due_cron_tick_result r;
	char c;
	int rc = 2;

	if (read(go, &c, 1) != 1)
		_exit(2);
	if (due_open(&db, url, NULL) == 0) {
		rc = due_cron_tick(db, &r, NULL) < 0		? 3
		     : r.materialized == 1 && r.lost_races == 0 ? 0
								: 4;
		if (rc == 3)
			fprintf(stderr, "tick: %s\n", due_error_last());
	}
	due_close(db);
	_exit(rc);
}

/*
** The same, with the live task committed while the step's statement runs:
** its insert waits for that transaction and then does nothing, and its
** snapshot cannot see the task.  The step looks it up afterwards, in the
** same transaction, and still records it.
*/
static void test_cron_fire_sees_concurrent_live_task(void **state)
{
	(void)state;
	int go[2];
	/* the child first, so it holds none of the handles opened below; it
	   ticks when told, while `other` holds the live task uncommitted */
	assert_int_equal(pipe(go), 0);
	pid_t kid = fork();
	if (kid == 0) {
		close(go[1]);
		one_tick_child(go[0]);
	}
	close(go[0]);
	PGconn *other = connect_to(url);
	due_db *db = open_db();
	due_cron_def d = cron_def("yearly", "0 0 1 1 *", "yk");
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_cron_info_list *l = NULL;
	due_submitted pre;
	char key[64];
	int st, waiting = 0;

	assert_int_equal(due_cron_put(db, &d), 0);
	sql("UPDATE due_schedule SET next_slot = date_trunc('second', now())"
	    " - interval '2 seconds'");
	int64_t slot = sql_int("SELECT extract(epoch FROM next_slot)::int8 "
			       "FROM due_schedule");
	snprintf(key, sizeof(key), "cron:yearly:%lld", (long long)slot);
	o.key = key;
	o.delay_us = 3600000000LL;
	exec_ok(other, "BEGIN");
	assert_int_equal(due_schedule_pg_tx(other, &pre, "yk", "", 0, &o), 0);
	assert_int_equal(write(go[1], "g", 1), 1);
	close(go[1]);
	/* the step's insert now waits for `other` */
	for (int64_t end = mono_ms() + HANG_MS; !waiting; tu_sleep_ms(10)) {
		waiting = (int)sql_int(
		    "SELECT count(*) FROM pg_stat_activity"
		    " WHERE wait_event_type = 'Lock' AND query LIKE"
		    " 'WITH s AS MATERIALIZED (SELECT name FROM "
		    "due_schedule%%'");
		if (!waiting && mono_ms() > end)
			fail_msg(
			    "the step never waited for the open transaction");
	}
	exec_ok(other, "COMMIT");
	waitpid(kid, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), 1);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->items[0].last_task, pre.id);
	assert_int_equal(l->items[0].last_slot, slot * 1000000);
	assert_int_equal(l->items[0].fired, 1);
	due_cron_info_list_free(l);
	PQfinish(other);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* on_key (issue 38): racing producers, the caller's transaction        */
/* ------------------------------------------------------------------ */

#define DEB_THREADS 8
#define DEB_ROUNDS 60

typedef struct {
	int me;
	due_on_key mode;
	const char *key;
	int64_t base; /* LATER: round j asks base + (j * 8 + me) ms */
	pthread_barrier_t *go;
	due_submitted out[DEB_ROUNDS];
	char err[256];
} deb_arg;

/* One producer on its own connection: DEB_ROUNDS keyed submits. */
static void *deb_producer(void *p)
{
	deb_arg *a = p;
	due_db *db = NULL;
	int rc = due_open(&db, url, NULL);

	pthread_barrier_wait(a->go);
	for (int j = 0; rc == 0 && j < DEB_ROUNDS; j++) {
		due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
		char pl[32];
		snprintf(pl, sizeof(pl), "t%d-%d", a->me, j);
		o.key = a->key;
		o.on_key = a->mode;
		o.at = a->base + ((int64_t)j * DEB_THREADS + a->me) * 1000;
		rc = due_schedule(db, &a->out[j], "deb", pl, strlen(pl), &o);
	}
	if (rc < 0)
		snprintf(a->err, sizeof(a->err), "%s", due_error_last());
	due_close(db);
	return NULL;
}

static void run_producers(deb_arg *args, due_on_key mode, const char *key,
			  int64_t base)
{
	pthread_t th[DEB_THREADS];
	pthread_barrier_t go;

	assert_int_equal(pthread_barrier_init(&go, NULL, DEB_THREADS), 0);
	for (int i = 0; i < DEB_THREADS; i++) {
		args[i] = (deb_arg){
		    .me = i, .mode = mode, .key = key, .base = base, .go = &go};
		assert_int_equal(
		    pthread_create(&th[i], NULL, deb_producer, &args[i]), 0);
	}
	for (int i = 0; i < DEB_THREADS; i++) {
		pthread_join(th[i], NULL);
		if (args[i].err[0])
			fail_msg("producer %d: %s", i, args[i].err);
	}
	pthread_barrier_destroy(&go);
}

/*
** 8 producers, each on its own connection, debounce one key at once
** (LATER, each asking later times, interleaved with the others'): every
** answer is the one task, which is left due at the latest time asked and
** with that submit's payload; no other task was made.  Then the holder
** runs and 8 producers REPLACE at once: exactly one answer is a new task
** (not existed), every other moved that one; the running task kept its
** state, try and payload and gave up the key.
*/
static void test_on_key_racing_producers(void **state)
{
	(void)state;
	static deb_arg args[DEB_THREADS];
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted first;
	due_time now;
	int moved = 0, fresh = 0;

	assert_int_equal(due_now(db, &now), 0);
	o.key = "deb-1";
	o.at = now + 3600000000LL;
	assert_int_equal(due_schedule(db, &first, "deb", "t-first", 7, &o), 0);
	run_producers(args, DUE_ON_KEY_LATER, "deb-1", o.at + 1000);
	for (int i = 0; i < DEB_THREADS; i++)
		for (int j = 0; j < DEB_ROUNDS; j++) {
			assert_int_equal(args[i].out[j].id, first.id);
			assert_true(args[i].out[j].existed);
			moved += args[i].out[j].moved;
		}
	assert_true(moved >= 1);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), 1);
	due_task *t = get(db, first.id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->due_at,
			 o.at + 1000 +
			     (int64_t)(DEB_ROUNDS * DEB_THREADS - 1) * 1000);
	char want[32];
	snprintf(want, sizeof(want), "t%d-%d", DEB_THREADS - 1, DEB_ROUNDS - 1);
	assert_int_equal(t->payload_len, strlen(want));
	assert_memory_equal(t->payload, want, strlen(want));
	due_task_free(t);

	/* the holder runs; 8 REPLACE at once */
	o.at = now - 1000000;
	o.key = "deb-2";
	assert_int_equal(due_schedule(db, &first, "deb", "run", 3, &o), 0);
	int32_t a = claim_one(db, first.id, LONG_LEASE);
	moved = 0;
	run_producers(args, DUE_ON_KEY_REPLACE, "deb-2", now + 3600000000LL);
	due_id holder = 0;
	for (int i = 0; i < DEB_THREADS; i++)
		for (int j = 0; j < DEB_ROUNDS; j++)
			if (!args[i].out[j].existed) {
				fresh++;
				holder = args[i].out[j].id;
			}
	assert_int_equal(fresh, 1);
	assert_true(holder != first.id);
	for (int i = 0; i < DEB_THREADS; i++)
		for (int j = 0; j < DEB_ROUNDS; j++) {
			assert_int_equal(args[i].out[j].id, holder);
			moved += args[i].out[j].moved;
		}
	assert_int_equal(moved, DEB_THREADS * DEB_ROUNDS - 1);
	t = get(db, first.id);
	assert_int_equal(t->state, DUE_CLAIMED);
	assert_int_equal(t->attempt, a);
	assert_null(t->key);
	assert_memory_equal(t->payload, "run", 3);
	due_task_free(t);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task WHERE"
				 " key = 'deb-2' AND state = 'SCHEDULED'"),
			 1);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), 3);
	due_close(db);
}

/*
** on_key through due_schedule_pg_tx, in the caller's transaction: the
** move is seen by nobody until COMMIT, is undone by ROLLBACK, and is
** notified on commit only.
*/
static void test_on_key_in_caller_tx(void **state)
{
	(void)state;
	PGconn *app = connect_to(url), *ear = connect_to(url);
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s, r;
	due_time now;
	char kind[32];

	snprintf(kind, sizeof(kind), "deb-tx-%d", (int)getpid());
	assert_int_equal(due_now(db, &now), 0);
	o.key = "k";
	o.at = now + 3600000000LL;
	assert_int_equal(due_schedule(db, &s, kind, "a", 1, &o), 0);
	exec_ok(ear, "LISTEN due_task_new");
	o.on_key = DUE_ON_KEY_LATER;
	o.at = now + 7200000000LL;
	exec_ok(app, "BEGIN");
	assert_int_equal(due_schedule_pg_tx(app, &r, kind, "b", 1, &o), 0);
	assert_true(r.existed && r.moved && r.id == s.id);
	due_task *t = get(db, s.id);
	assert_int_equal(t->due_at, now + 3600000000LL); /* not yet */
	due_task_free(t);
	exec_ok(app, "ROLLBACK");
	assert_false(was_notified(ear, kind));
	t = get(db, s.id);
	assert_int_equal(t->due_at, now + 3600000000LL);
	assert_memory_equal(t->payload, "a", 1);
	due_task_free(t);
	exec_ok(app, "BEGIN");
	assert_int_equal(due_schedule_pg_tx(app, &r, kind, "b", 1, &o), 0);
	assert_true(r.existed && r.moved && r.id == s.id);
	exec_ok(app, "COMMIT");
	came_first(ear, kind, NULL);
	t = get(db, s.id);
	assert_int_equal(t->due_at, now + 7200000000LL);
	assert_memory_equal(t->payload, "b", 1);
	due_task_free(t);
	PQfinish(app);
	PQfinish(ear);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Run after (schema 11)                                               */
/* ------------------------------------------------------------------ */

/* A task of kind "c" after the n tasks of `after`, through the C API. */
static due_id child_after(due_db *db, const due_id *after, size_t n)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	o.after = after;
	o.n_after = n;
	assert_int_equal(due_schedule(db, &s, "c", "child", 5, &o), 0);
	return s.id;
}

/* How many sessions wait for a lock now. */
static int64_t lock_waiters(void)
{
	return sql_int("SELECT count(*) FROM pg_stat_activity"
		       " WHERE wait_event_type = 'Lock'"
		       " AND datname = current_database()");
}

/* Wait (HANG_MS at most) until a session waits for a row lock. */
static void wait_lock_waiter(void)
{
	int64_t end = mono_ms() + HANG_MS;
	while (lock_waiters() < 1) {
		if (mono_ms() > end)
			fail_msg("no session came to wait for a lock");
		usleep(5000);
	}
}

/* Held or not: after_left and whether due_at is DUE_TIME_LAST. */
static void assert_after(due_db *db, due_id id, int32_t left, bool held)
{
	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->after_left, left);
	if (held)
		assert_int_equal(t->due_at, DUE_TIME_LAST);
	else
		assert_true(t->due_at < DUE_TIME_LAST);
	due_task_free(t);
}

typedef struct finish_arg {
	due_id id;
	int32_t attempt;
	int rc;
	due_complete_outcome out;
	int in_hook[2]; /* the hook says it runs (-1: no hook) */
	int go[2];	/* ... and waits for a byte here */
} finish_arg;

/* In the completion's open transaction: say so, wait for the go. */
static int hook_hold(void *conn, const due_task *task, void *payload)
{
	finish_arg *a = payload;
	char c = 'h';
	(void)conn;
	(void)task;
	if (write(a->in_hook[1], &c, 1) != 1 || read(a->go[0], &c, 1) != 1)
		return 1;
	return 0;
}

/* Thread: complete the parent on a handle of its own. */
static void *finish_parent(void *p)
{
	finish_arg *a = p;
	due_db *db = open_db();
	a->rc = a->in_hook[0] < 0
		    ? due_complete(db, &a->out, a->id, a->attempt, "r", 1)
		    : due_complete_tx(db, &a->out, a->id, a->attempt, "r", 1,
				      hook_hold, a);
	due_close(db);
	return NULL;
}

typedef struct child_arg {
	due_id parent, id;
	int rc;
} child_arg;

/* Thread: submit a child of `parent` on a handle of its own. */
static void *submit_child(void *p)
{
	child_arg *a = p;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s = {0};
	o.after = &a->parent;
	o.n_after = 1;
	a->rc = due_schedule(db, &s, "c", "late", 4, &o);
	a->id = s.id;
	due_close(db);
	return NULL;
}

/*
** The child's submit first: its transaction (the caller's, through
** due_schedule_pg_tx) holds the parent locked; the parent's completion
** on another connection waits for its COMMIT, and then releases the
** child, which its statement's own snapshot (taken before the child
** committed) could not see.  Round 0: the parent had no child (the
** submit marks it, is_parent); round 1: it had one (FOR SHARE only).
*/
static void test_after_child_submit_races_finish(void **state)
{
	(void)state;
	PGconn *app = connect_to(url);
	due_db *db = open_db();

	for (int round = 0; round < 2; round++) {
		setup(NULL); /* nothing due from the round before */
		due_id p = add(db, "p", 0, 5), early = 0;
		int32_t a = claim_one(db, p, LONG_LEASE);
		if (round == 1)
			early = child_after(db, &p, 1);
		due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
		due_submitted s;
		o.after = &p;
		o.n_after = 1;
		exec_ok(app, "BEGIN");
		assert_int_equal(due_schedule_pg_tx(app, &s, "c", "x", 1, &o),
				 0);
		finish_arg f = {.id = p, .attempt = a, .in_hook = {-1, -1}};
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, finish_parent, &f),
				 0);
		wait_lock_waiter(); /* the completion waits for our COMMIT */
		assert_int_equal(state_of(db, p), DUE_CLAIMED);
		exec_ok(app, "COMMIT");
		assert_int_equal(pthread_join(th, NULL), 0);
		assert_int_equal(f.rc, 0);
		assert_int_equal(f.out, DUE_COMPLETE_DONE);
		assert_after(db, s.id, 0, false);
		if (early)
			assert_after(db, early, 0, false);
		assert_int_equal(sql_int("SELECT count(*) FROM due_after"
					 " WHERE parent = %lld AND pending",
					 (long long)p),
				 0);
	}
	PQfinish(app);
	due_close(db);
}

/*
** The parent's completion first: its transaction is open (a completion
** hook holds it) when a child is submitted; the submit waits for the
** parent's row, then reads it DONE: the child is due at once, waiting
** for nothing.  Round 0 without an earlier child (the submit's mark
** waits), round 1 with one (its FOR SHARE waits; the earlier child is
** released by the completion).
*/
static void test_after_finish_races_child_submit(void **state)
{
	(void)state;
	due_db *db = open_db();

	for (int round = 0; round < 2; round++) {
		setup(NULL); /* nothing due from the round before */
		due_id p = add(db, "p", 0, 5), early = 0;
		int32_t a = claim_one(db, p, LONG_LEASE);
		char c = 'g';
		if (round == 1)
			early = child_after(db, &p, 1);
		finish_arg f = {.id = p, .attempt = a};
		assert_int_equal(pipe(f.in_hook), 0);
		assert_int_equal(pipe(f.go), 0);
		pthread_t tf, tc;
		assert_int_equal(pthread_create(&tf, NULL, finish_parent, &f),
				 0);
		assert_int_equal(read(f.in_hook[0], &c, 1), 1);
		child_arg ca = {.parent = p};
		assert_int_equal(pthread_create(&tc, NULL, submit_child, &ca),
				 0);
		wait_lock_waiter(); /* the submit waits for the parent */
		assert_int_equal(write(f.go[1], &c, 1), 1);
		assert_int_equal(pthread_join(tf, NULL), 0);
		assert_int_equal(pthread_join(tc, NULL), 0);
		assert_int_equal(f.rc, 0);
		assert_int_equal(f.out, DUE_COMPLETE_DONE);
		assert_int_equal(ca.rc, 0);
		assert_after(db, ca.id, 0, false);
		due_task *t = get(db, ca.id);
		assert_int_equal(t->after_n, 1);
		assert_non_null(t->after);
		assert_int_equal(t->after[0], p);
		due_task_free(t);
		if (early)
			assert_after(db, early, 0, false);
		for (int i = 0; i < 2; i++) {
			close(f.in_hook[i]);
			close(f.go[i]);
		}
	}
	due_close(db);
}

#define CHAIN 1000

/*
** A chain of 1,000 (each after the one before) is cancelled in one step
** by its head's cancel: every link CANCELLED, naming the one before it,
** no edge left pending, nothing held.  The time is printed, not
** asserted.
*/
static void test_after_chain_of_1000_cancelled(void **state)
{
	(void)state;
	due_db *db = open_db();
	static due_id ids[CHAIN + 1];
	due_cancel_outcome co;

	ids[0] = add(db, "p", LONG_LEASE, 5);
	for (int i = 1; i <= CHAIN; i++)
		ids[i] = child_after(db, &ids[i - 1], 1);
	assert_after(db, ids[CHAIN], 1, true);
	int64_t t0 = mono_ms();
	assert_int_equal(due_cancel(db, &co, ids[0]), 0);
	print_message("cancel of a chain of %d: %lld ms\n", CHAIN,
		      (long long)(mono_ms() - t0));
	assert_int_equal(co, DUE_CANCEL_CANCELLED);
	assert_int_equal(
	    sql_int("SELECT count(*) FROM due_task WHERE state = 'CANCELLED'"),
	    CHAIN + 1);
	assert_int_equal(
	    sql_int("SELECT count(*) FROM due_task t JOIN due_after a"
		    " ON a.child = t.id WHERE t.last_error ="
		    " format('parent task %%s ended CANCELLED', a.parent)"
		    " AND t.after_left = 0 AND t.attempt = 0"),
	    CHAIN);
	assert_int_equal(sql_int("SELECT count(*) FROM due_after"
				 " WHERE pending"),
			 0);
	due_task_list *l = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	lo.held = true;
	assert_int_equal(due_list(db, &l, &lo), 0);
	assert_int_equal(l->count, 0);
	due_task_list_free(l);
	due_close(db);
}

/* The statement fails on adm with SQLSTATE `code` and text `needle`. */
static void sql_refused(const char *code, const char *needle, const char *fmt,
			...)
{
	char q_buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(q_buf, sizeof(q_buf), fmt, ap);
	va_end(ap);
	PGresult *r = PQexec(adm, q_buf);
	const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	if (PQresultStatus(r) != PGRES_FATAL_ERROR || !st ||
	    strcmp(st, code) != 0 || !strstr(PQerrorMessage(adm), needle))
		fail_msg("%s: want %s '%s', got %s %s", q_buf, code, needle,
			 st ? st : "-", PQerrorMessage(adm));
	PQclear(r);
}

/*
** due_schedule_after() in SQL: a held child (no wake-up while held),
** its parents listed; a missing parent P0002 naming it, a DEAD one 55000
** naming the state, bad lists 22023, none of them writing; after_any_end
** takes the DEAD parent as ended (due at once, notified); the parent's
** DONE releases the held one at its own delay counted from then, and
** wakes listeners with its kind.
*/
static void test_schedule_after_sql(void **state)
{
	(void)state;
	due_db *db = open_db();
	PGconn *ear = connect_to(url);
	due_fail_outcome fo;
	due_time t0, t1;
	char kind[32];

	snprintf(kind, sizeof(kind), "after-sql-%d", (int)getpid());
	due_id dead = add(db, "p", 0, 1);
	assert_int_equal(
	    due_fail(db, &fo, dead, claim_one(db, dead, LONG_LEASE), "boom"),
	    0);
	due_id p = add(db, "p", LONG_LEASE, 5);
	exec_ok(ear, "LISTEN due_task_new");
	due_id c = sql_int("SELECT due_schedule_after('%s', 'x',"
			   " ARRAY[%lld], run_in => interval '1 hour')",
			   kind, (long long)p);
	assert_true(c > 0);
	assert_after(db, c, 1, true);
	due_task *t = get(db, c);
	assert_int_equal(t->after_n, 1);
	assert_int_equal(t->after[0], p);
	due_task_free(t);
	assert_false(was_notified(ear, kind));

	int64_t n = sql_int("SELECT count(*) FROM due_task");
	sql_refused("P0002", "parent task 999999999 not found",
		    "SELECT due_schedule_after('%s', 'x', ARRAY[%lld,"
		    " 999999999])",
		    kind, (long long)p);
	sql_refused("55000", "is DEAD",
		    "SELECT due_schedule_after('%s', 'x', ARRAY[%lld])", kind,
		    (long long)dead);
	sql_refused("22023", "twice",
		    "SELECT due_schedule_after('%s', 'x', ARRAY[%lld, %lld])",
		    kind, (long long)p, (long long)p);
	sql_refused("22023", "empty",
		    "SELECT due_schedule_after('%s', 'x', '{}'::bigint[])",
		    kind);
	sql_refused("22023", "invalid kind",
		    "SELECT due_schedule_after('bad kind', 'x', ARRAY[1])");
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), n);

	/* any end: the DEAD parent counts as ended */
	due_id any = sql_int("SELECT due_schedule_after('%s', 'y',"
			     " ARRAY[%lld], after_any_end => true)",
			     kind, (long long)dead);
	assert_after(db, any, 0, false);
	came_first(ear, kind, NULL);

	/* the parent's DONE releases the held one, one hour from then */
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT;
	due_reschedule_outcome rs;
	claim_one(db, any, LONG_LEASE);
	assert_int_equal(due_reschedule(db, &rs, p, &ro), 0);
	int32_t a = claim_one(db, p, LONG_LEASE);
	due_complete_outcome co;
	assert_int_equal(due_now(db, &t0), 0);
	assert_int_equal(due_complete(db, &co, p, a, "r", 1), 0);
	assert_int_equal(due_now(db, &t1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	came_first(ear, kind, NULL);
	t = get(db, c);
	assert_int_equal(t->after_left, 0);
	assert_true(t->due_at >= t0 + 3600000000LL);
	assert_true(t->due_at <= t1 + 3600000000LL);
	due_task_free(t);

	/* a producer role: due_schedule()'s grants are not enough; with
	   the ones docs/internals/after-postgres.md adds, it works */
	char role[40];
	snprintf(role, sizeof(role), "due_after_prod_%d", (int)getpid());
	due_id q = add(db, "p", LONG_LEASE, 5);
	sql("DROP ROLE IF EXISTS %s", role);
	sql("CREATE ROLE %s", role);
	sql("GRANT USAGE ON SCHEMA %s TO %s", schema, role);
	sql("GRANT INSERT, SELECT (id, kind, key, state) ON due_task TO %s",
	    role);
	sql("SET ROLE %s", role);
	sql_refused("42501", "permission denied",
		    "SELECT due_schedule_after('%s', 'r', ARRAY[%lld])", kind,
		    (long long)q);
	sql("RESET ROLE");
	sql("GRANT SELECT (is_parent), UPDATE (is_parent) ON due_task TO %s",
	    role);
	sql("GRANT INSERT ON due_after TO %s", role);
	sql("SET ROLE %s", role);
	assert_true(sql_int("SELECT due_schedule_after('%s', 'r',"
			    " ARRAY[%lld])",
			    kind, (long long)q) > 0);
	sql("RESET ROLE");

	/* a held holder of a key takes a keyed move as its own time, C and
	   SQL alike (test_store's test_on_key_held has the rule), and stays
	   held; in SQL it is a statement of its own, needing its own grants */
	due_schedule_opts ko = DUE_SCHEDULE_OPTS_INIT;
	due_submitted ks, ks2;
	ko.key = "hk";
	ko.after = &q;
	ko.n_after = 1;
	ko.delay_us = 2 * 3600000000LL;
	assert_int_equal(due_schedule(db, &ks, "hk", "a", 1, &ko), 0);
	ko.after = NULL;
	ko.n_after = 0;
	ko.delay_us = 3600000000LL;
	ko.on_key = DUE_ON_KEY_REPLACE;
	assert_int_equal(due_schedule(db, &ks2, "hk", "b", 1, &ko), 0);
	assert_true(ks2.existed && ks2.moved && ks2.id == ks.id);
	assert_after(db, ks.id, 1, true);
	assert_int_equal(sql_int("SELECT after_delay_us FROM due_task WHERE"
				 " id = %lld",
				 (long long)ks.id),
			 3600000000LL);
	/* later, 30 min: before its own hour: nothing */
	assert_int_equal(sql_int("SELECT due_schedule('hk', 'c', interval"
				 " '30 minutes', NULL, 'hk', 5, 'later')"),
			 ks.id);
	t = get(db, ks.id);
	assert_memory_equal(t->payload, "b", 1);
	due_task_free(t);
	/* later, 2 hours: taken, still held; then replace by an instant */
	assert_int_equal(sql_int("SELECT due_schedule('hk', 'c', interval"
				 " '2 hours', NULL, 'hk', 5, 'later')"),
			 ks.id);
	assert_int_equal(sql_int("SELECT after_delay_us FROM due_task WHERE"
				 " id = %lld AND after_at IS NULL AND"
				 " convert_from(payload, 'UTF8') = 'c'",
				 (long long)ks.id),
			 2 * 3600000000LL);
	assert_after(db, ks.id, 1, true);
	sql("GRANT SELECT (due_at), UPDATE (due_at, payload, updated_at, key)"
	    " ON due_task TO %s",
	    role);
	sql("SET ROLE %s", role);
	sql_refused("42501", "permission denied",
		    "SELECT due_schedule('hk', 'd', interval '0',"
		    " '2100-01-01T00:00:00Z', 'hk', 5, 'replace')");
	sql("RESET ROLE");
	sql("GRANT SELECT (after_left, after_at, after_delay_us), UPDATE"
	    " (after_at, after_delay_us) ON due_task TO %s",
	    role);
	sql("SET ROLE %s", role);
	assert_int_equal(sql_int("SELECT due_schedule('hk', 'd', interval"
				 " '0', '2100-01-01T00:00:00Z', 'hk', 5,"
				 " 'replace')"),
			 ks.id);
	sql("RESET ROLE");
	assert_int_equal(sql_int("SELECT count(*) FROM due_task WHERE id ="
				 " %lld AND after_at = '2100-01-01T00:00:00Z'"
				 " AND after_delay_us = 0 AND"
				 " convert_from(payload, 'UTF8') = 'd'",
				 (long long)ks.id),
			 1);
	assert_after(db, ks.id, 1, true);
	sql("DROP OWNED BY %s", role);
	sql("DROP ROLE %s", role);
	PQfinish(ear);
	due_close(db);
}

/* Columns of due_task and due_after, and every index, in `sch`. */
static void v11_shape(char *buf, size_t n, const char *sch)
{
	char cols[6000], idx[3000];
	sql_text(cols, sizeof(cols),
		 "SELECT string_agg(table_name || '.' || column_name || ' ' ||"
		 " data_type || ' ' || is_nullable || ' ' ||"
		 " coalesce(column_default, ''), ', ' ORDER BY table_name,"
		 " column_name) FROM information_schema.columns WHERE"
		 " table_schema = '%s' AND table_name IN ('due_task',"
		 " 'due_after')",
		 sch);
	sql_text(idx, sizeof(idx),
		 "SELECT string_agg(replace(indexdef, '%s.', ''), ', '"
		 " ORDER BY indexname) FROM pg_indexes WHERE schemaname = '%s'",
		 sch, sch);
	snprintf(buf, n, "%s | %s", cols, idx);
}

/*
** Version 10 -> 11 (run after): refused without `due init`; three inits
** at once upgrade it once; the tasks survive waiting for nothing (0 / 0
** / false, no parents); run-after works on the upgraded store (a child
** of the running task held, released by its DONE); and the upgraded
** schema (columns, indexes, the two routines) is the one a new store
** gets.
*/
static void test_schema_upgrade_from_v10(void **state)
{
	(void)state;
	char sch[80], u[1200], buf[64], fresh[9100], upgraded[9100];
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;
	due_complete_outcome co;

	o.create = true;
	snprintf(sch, sizeof(sch), "%s_v10", schema);
	sql("DROP SCHEMA IF EXISTS %s CASCADE", sch);
	sql("CREATE SCHEMA %s", sch);
	url_for(u, sizeof(u), sch, "");
	assert_int_equal(due_open(&db, u, &o), 0);
	due_id waiting = add(db, "k", LONG_LEASE, 5);
	due_id running = add(db, "k", 0, 5);
	int32_t a = claim_one(db, running, LONG_LEASE);
	due_close(db);
	back_to_v10(sch);

	db = NULL;
	assert_int_equal(due_open(&db, u, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "older"));
	due_close(db);
	concurrent_inits(u, 3);
	assert_string_equal(sql_text(buf, sizeof(buf),
				     "SELECT value FROM %s.due_meta"
				     " WHERE name = 'schema_version'",
				     sch),
			    DUE_SCHEMA_VERSION_TEXT);
	db = open_url(u);
	due_task *t = get(db, waiting);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->after_n, 0);
	assert_int_equal(t->after_left, 0);
	assert_false(t->after_any_end);
	assert_null(t->after);
	due_task_free(t);
	due_id c = child_after(db, &running, 1);
	assert_after(db, c, 1, true);
	assert_int_equal(due_complete(db, &co, running, a, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_after(db, c, 0, false);
	due_close(db);

	v11_shape(fresh, sizeof(fresh), schema);
	v11_shape(upgraded, sizeof(upgraded), sch);
	assert_non_null(strstr(fresh, "due_after_child"));
	assert_non_null(strstr(fresh, "due_task.is_parent"));
	assert_string_equal(upgraded, fresh);
	assert_int_equal(sql_int("SELECT count(*) FROM pg_proc f JOIN"
				 " pg_namespace s ON s.oid = f.pronamespace"
				 " WHERE s.nspname = '%s' AND f.proname IN"
				 " ('due_release', 'due_schedule_after')",
				 sch),
			 2);
	sql("DROP SCHEMA %s CASCADE", sch);
}

/* ------------------------------------------------------------------ */

/* Make this run's schema, initialized; 0 or -1. */
static int make_run_schema(void)
{
	PGconn *c;
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;
	int rc;

	snprintf(base_url, sizeof(base_url), "%s", getenv("DUE_TEST_PG_URL"));
	snprintf(schema, sizeof(schema), "due_test_%d", (int)getpid());
	url_for(url, sizeof(url), schema, "");
	c = PQconnectdb(base_url);
	if (PQstatus(c) != CONNECTION_OK) {
		fprintf(stderr, "FAIL: cannot connect to DUE_TEST_PG_URL: %s",
			PQerrorMessage(c));
		PQfinish(c);
		return -1;
	}
	char sqlbuf[256];
	snprintf(sqlbuf, sizeof(sqlbuf),
		 "SET client_min_messages = warning; DROP SCHEMA IF EXISTS %s "
		 "CASCADE; CREATE SCHEMA %s",
		 schema, schema);
	PGresult *r = PQexec(c, sqlbuf);
	rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
	if (rc < 0)
		fprintf(stderr, "FAIL: %s", PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
	o.create = true;
	if (rc == 0 && due_open(&db, url, &o) < 0) {
		fprintf(stderr, "FAIL: due init %s: %s\n", url,
			due_error_last());
		rc = -1;
	}
	due_close(db);
	if (rc == 0) {
		adm = PQconnectdb(url);
		rc = PQstatus(adm) == CONNECTION_OK ? 0 : -1;
		PQclear(PQexec(adm, "SET client_min_messages = warning"));
	}
	return rc;
}

/* Drop this run's schemas (also what a failed test left behind). */
static void drop_run_schema(void)
{
	char sqlbuf[512];
	PGconn *c = PQconnectdb(base_url);
	snprintf(
	    sqlbuf, sizeof(sqlbuf),
	    "SET client_min_messages = warning; "
	    "DROP SCHEMA IF EXISTS %s, %s_init, %s_v1, %s_v3, %s_v4, %s_v10"
	    " CASCADE",
	    schema, schema, schema, schema, schema, schema);
	PGresult *r = PQexec(c, sqlbuf);
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		fprintf(stderr, "could not drop schema %s: %s", schema,
			PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
	PQfinish(adm);
	adm = NULL;
}

static int run_pg_suite(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup(f, setup)
	    T(test_concurrent_init),
	    T(test_schema_types_and_indexes),
	    T(test_claim_plan_uses_partial_index),
	    T(test_backoff_function_matches_core),
	    T(test_tx_submit_and_notify),
	    T(test_complete_hook),
	    T(test_reconnect),
	    T(test_row_lock_wait_is_bounded),
	    T(test_silent_server_is_bounded),
	    T(test_schema_upgrade_from_v1),
	    T(test_schema_upgrade_from_v3),
	    T(test_flow_pause_and_limited_claim),
	    T(test_flow_running_limits_across_connections),
	    T(test_flow_rate_across_connections),
	    T(test_flow_claim_plan_priorities),
	    T(test_cron_fire_notifies),
	    T(test_cron_fire_sees_concurrent_live_task),
	    T(test_schema_upgrade_from_v4),
	    T(test_reads_at_size),
	    T(test_on_key_racing_producers),
	    T(test_on_key_in_caller_tx),
	    T(test_after_child_submit_races_finish),
	    T(test_after_finish_races_child_submit),
	    T(test_after_chain_of_1000_cancelled),
	    T(test_schedule_after_sql),
	    T(test_schema_upgrade_from_v10),
#undef T
	};
	int failed;

	if (make_run_schema() < 0) {
		drop_run_schema();
		return 1;
	}
	failed =
	    cmocka_run_group_tests_name("postgres store", tests, NULL, NULL);
	drop_run_schema();
	return failed ? 1 : 0;
}
#endif /* DUE_WITH_PG */

int main(void)
{
#ifdef DUE_WITH_PG
	if (tu_select_backend("postgres") != 0)
		return tu_backend_check();
	return run_pg_suite();
#else
	/* left out by the build option, not by a missing server: under
	   CI=true too (as test_mysql_store.c) */
	printf("NOTE: postgres store suite not run: this build has no "
	       "PostgreSQL (-DDUE_WITH_PG=OFF)\n");
	return 0;
#endif
}
