/*
** test_pg_store.c - the PostgreSQL store on a real server: every transition
** and every refusal of store.h, plus what only PostgreSQL has (the claim
** plan, due_backoff() in SQL, NOTIFY, due_schedule_pg_tx, reconnects, a
** concurrent `due init`, the upgrade from schema 1, schedules fired by
** compare-and-set from several processes, metrics computed in SQL).  The generic conformance suite (test_store.c)
** runs on PostgreSQL too; this file goes deeper into the backend.
**
** It runs when DUE_TEST_PG_URL names a database (scripts/pg-test-cluster
** start DIR prints one).  Unset, it prints a note and passes, except under
** CI=true, where it fails: the PostgreSQL suite is never skipped silently.
** Each run works in its own schema, due_test_<pid> (the URL gets
** options=-csearch_path=...), emptied before every test and dropped at the
** end, so it never touches other data in that database.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "due.h"
#define TU_TASKS /* add, claim_one, get, state_of */
#include "test_util.h"

#ifdef DUE_WITH_PG
#include <libpq-fe.h>

static char base_url[512]; /* DUE_TEST_PG_URL */
static char url[1024];     /* ... with this run's search_path */
static char schema[64];    /* due_test_<pid> */
static PGconn *adm;        /* checks and direct SQL, in schema */

#define LONG_LEASE 60000000LL

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
		 PQntuples(r) && !PQgetisnull(r, 0, 0) ? PQgetvalue(r, 0, 0) : "");
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

static due_db *open_db(void)
{
	return open_url(url);
}


/* Reclaim until the lease of `id` was taken back (deadline 5 s). */
static void wait_reclaim(due_db *db, due_id id, due_reclaimed *sum)
{
	memset(sum, 0, sizeof(*sum));
	for (int i = 0; i < 5000; i++) {
		due_reclaimed r;
		assert_int_equal(due_reclaim_expired(db, &r), 0);
		sum->rescheduled += r.rescheduled;
		sum->dead += r.dead;
		sum->cancelled += r.cancelled;
		if (state_of(db, id) != DUE_CLAIMED)
			return;
		tu_sleep_ms(1);
	}
	fail_msg("lease of task %lld was never reclaimed", (long long)id);
}

/* Claim (polling) until `id` is handed out; returns the claimed task. */
static due_task_list *claim_when_due(due_db *db, due_id id)
{
	for (int i = 0; i < 5000; i++) {
		due_task_list *l = NULL;
		assert_int_equal(due_claim(db, &l, "w", NULL, 0, 1, LONG_LEASE), 0);
		if (l->count) {
			assert_int_equal(l->items[0].id, id);
			return l;
		}
		due_task_list_free(l);
		tu_sleep_ms(1);
	}
	fail_msg("task %lld never became claimable", (long long)id);
	return NULL;
}

static int setup(void **state)
{
	(void)state;
	sql("TRUNCATE due_task, due_attempt, due_audit, due_schedule, due_worker");
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

static void test_concurrent_init_and_schema_checks(void **state)
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
				 "schemaname = '%s'", sch), 0);
	/* four `due init` at once: all succeed, one schema */
	concurrent_inits(u, 4);
	assert_int_equal(sql_int("SELECT count(*) FROM %s.due_meta", sch), 1);
	db = open_url(u);
	due_close(db);
	/* older and newer schemas are refused */
	sql("UPDATE %s.due_meta SET value = '0'", sch);
	db = NULL;
	assert_int_equal(due_open(&db, u, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "older"));
	due_close(db);
	sql("UPDATE %s.due_meta SET value = '99'", sch);
	db = NULL;
	assert_int_equal(due_open(&db, u, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "newer"));
	due_close(db);
	sql("DROP SCHEMA %s CASCADE", sch);
	/* an unreachable server is DUE_ESTORE, with libpq's words */
	db = NULL;
	assert_int_equal(due_open(&db, "postgres://127.0.0.1:1/due?connect_timeout=2",
				  NULL), DUE_ESTORE);
	assert_non_null(strstr(due_error_last(), "postgres store"));
	due_close(db);
}

static void test_schema_constraints(void **state)
{
	(void)state;
	char buf[64];
	due_db *db = open_db();
	due_id id = add(db, "k", 0, 5);
	PGresult *r;

	/* CLAIMED exactly when both lease fields are set */
	r = PQexec(adm, "UPDATE due_task SET state = 'CLAIMED'");
	assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
	assert_non_null(strstr(PQresultErrorMessage(r), "claimed_iff_lease"));
	PQclear(r);
	r = PQexec(adm, "UPDATE due_task SET state = 'NOPE'");
	assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
	PQclear(r);
	assert_string_equal(sql_text(buf, sizeof(buf), "SELECT data_type FROM "
		"information_schema.columns WHERE table_schema = '%s' AND "
		"table_name = 'due_task' AND column_name = 'due_at'", schema),
		"timestamp with time zone");
	assert_string_equal(sql_text(buf, sizeof(buf), "SELECT data_type FROM "
		"information_schema.columns WHERE table_schema = '%s' AND "
		"table_name = 'due_task' AND column_name = 'payload'", schema),
		"bytea");
	assert_int_equal(sql_int("SELECT count(*) FROM pg_indexes WHERE "
		"schemaname = '%s' AND indexname IN ('due_task_due', "
		"'due_task_lease', 'due_task_key', 'due_task_finished')", schema), 4);
	assert_int_equal(state_of(db, id), DUE_SCHEDULED);
	due_close(db);
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
		assert_int_equal(due_claim(db, &l, "w", NULL, 0, 3, LONG_LEASE), 0);
		assert_int_equal(l->count, 3);
		due_task_list_free(l);
	}
	assert_int_equal(sql_int("SELECT count(*) FROM due_task WHERE state = "
				 "'CLAIMED'"), 24);
	sql("ANALYZE due_task");
	sql("SET enable_seqscan = off");
	PGresult *r = PQexec(adm, "EXPLAIN SELECT id FROM due_task WHERE state = "
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
				 "'CLAIMED'"), 34);
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
			for (size_t n = 0; n < sizeof(ns) / sizeof(ns[0]); n++) {
				if (caps[c] < bases[b])
					continue; /* refused by validation */
				int64_t want = due_backoff_us(bases[b], caps[c], ns[n]);
				int64_t got = sql_int("SELECT due_backoff(%lld, %lld, %d)",
						      (long long)bases[b],
						      (long long)caps[c], ns[n]);
				if (got != want)
					fail_msg("due_backoff(%lld, %lld, %d) = %lld, "
						 "core says %lld", (long long)bases[b],
						 (long long)caps[c], ns[n],
						 (long long)got, (long long)want);
			}
}

/* ------------------------------------------------------------------ */
/* Worker transitions                                                  */
/* ------------------------------------------------------------------ */

static void test_happy_path_binary(void **state)
{
	(void)state;
	due_db *db = open_db();
	const unsigned char payload[] = {0, 1, 2, 0xff, 0, 'x'};
	const unsigned char result[] = {'r', 0, 0x80, 0};
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	due_complete_outcome co;
	due_task_list *l = NULL;
	due_time now;

	assert_int_equal(due_now(db, &now), 0);
	assert_true(llabs(now - due_time_now_host()) < 60000000);
	assert_int_equal(due_schedule(db, &s, "mail", payload, sizeof(payload),
				      NULL), 0);
	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 10, 30000000), 0);
	assert_int_equal(l->count, 1);
	due_task *c = &l->items[0];
	assert_int_equal(c->id, s.id);
	assert_int_equal(c->state, DUE_CLAIMED);
	assert_int_equal(c->attempt, 1);
	assert_string_equal(c->lease_owner, "w1");
	assert_true(c->lease_until >= c->due_at + 30000000);
	assert_int_equal(c->payload_len, sizeof(payload));
	assert_memory_equal(c->payload, payload, sizeof(payload));
	assert_int_equal(c->max_attempts, 5);
	assert_int_equal(c->backoff_us, 1000000);
	assert_int_equal(c->backoff_cap_us, 3600000000LL);
	due_task_list_free(l);
	assert_int_equal(due_complete(db, &co, s.id, 1, result, sizeof(result)), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	due_task *t = get(db, s.id);
	assert_int_equal(t->state, DUE_DONE);
	assert_true(t->has_result);
	assert_int_equal(t->result_len, sizeof(result));
	assert_memory_equal(t->result, result, sizeof(result));
	assert_null(t->lease_owner);
	assert_int_equal(t->lease_until, 0);
	assert_int_equal(t->n_attempts, 1);
	assert_string_equal(t->attempts[0].outcome, "DONE");
	assert_string_equal(t->attempts[0].worker, "w1");
	assert_int_equal(t->attempts[0].due_at, t->due_at);
	assert_true(t->attempts[0].claimed_at >= t->due_at);
	assert_true(t->attempts[0].ended_at >= t->attempts[0].claimed_at);
	due_task_free(t);

	/* an absolute due time is kept to the microsecond */
	o.at = now + 3600000000LL + 123457;
	assert_int_equal(due_schedule(db, &s, "later", "", 0, &o), 0);
	t = get(db, s.id);
	assert_int_equal(t->due_at, o.at);
	assert_int_equal(t->payload_len, 0);
	assert_false(t->has_result);
	due_task_free(t);
	/* not due: not claimable, and claim_id says busy */
	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 10, 30000000), 0);
	assert_int_equal(l->count, 0);
	due_task_list_free(l);
	assert_int_equal(due_claim_id(db, &t, s.id, "w1", 30000000), DUE_EBUSY);
	due_close(db);
}

static void test_claim_kinds_and_id(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_task_list *l = NULL;
	const char *kinds[] = {"b", "c"};
	due_claim_opts co = DUE_CLAIM_OPTS_INIT;

	for (int i = 0; i < 5; i++)
		add(db, "a", 0, 5);
	due_id b = add(db, "b", 0, 5);
	due_id c = add(db, "c", 0, 5);
	due_id d = add(db, "d", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", kinds, 2, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 2);
	assert_int_equal(l->items[0].id, b);
	assert_int_equal(l->items[1].id, c);
	due_task_list_free(l);
	co.owner = "w";
	co.kinds = (const char *const[]){"a"};
	co.n_kinds = 1;
	co.exclude_kinds = true;
	co.limit = 10;
	assert_int_equal(due_claim_ex(db, &l, &co), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, d);
	due_task_list_free(l);
	/* claim by id: one claim, then busy */
	due_id e = add(db, "e", 0, 5);
	due_task *t = NULL;
	assert_int_equal(due_claim_id(db, &t, e, "imm", LONG_LEASE), 0);
	assert_int_equal(t->attempt, 1);
	assert_string_equal(t->lease_owner, "imm");
	due_task_free(t);
	assert_int_equal(due_claim_id(db, &t, e, "imm", LONG_LEASE), DUE_EBUSY);
	assert_int_equal(due_claim_id(db, &t, 99999999, "imm", LONG_LEASE),
			 DUE_EBUSY);
	assert_int_equal(sql_int("SELECT count(*) FROM due_attempt"), 4);
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
	due_reclaimed rr;

	assert_int_equal(claim_one(db, id, 1000), 1);
	wait_reclaim(db, id, &rr);
	assert_int_equal(rr.rescheduled, 1);
	assert_int_equal(state_of(db, id), DUE_SCHEDULED);
	/* stale after the reclaim, while SCHEDULED: refused, nothing moves */
	int64_t before = sql_int("SELECT (extract(epoch FROM updated_at) * 1e6)"
				 "::int8 FROM due_task");
	assert_int_equal(due_complete(db, &co, id, 1, "late", 4), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(due_fail(db, &fo, id, 1, "late"), 0);
	assert_int_equal(fo, DUE_FAIL_REJECTED_STALE);
	assert_int_equal(due_extend(db, &eo, id, 1, LONG_LEASE), 0);
	assert_int_equal(eo, DUE_EXTEND_LOST);
	assert_int_equal(sql_int("SELECT (extract(epoch FROM updated_at) * 1e6)"
				 "::int8 FROM due_task"), before);
	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_false(t->has_result);
	assert_non_null(strstr(t->last_error, "lease expired (held by w1)"));
	due_task_free(t);

	/* and while a newer try holds it */
	assert_int_equal(claim_one(db, id, LONG_LEASE), 2);
	assert_int_equal(due_complete(db, &co, id, 1, "late", 4), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(due_fail(db, &fo, id, 1, "late"), 0);
	assert_int_equal(fo, DUE_FAIL_REJECTED_STALE);
	assert_int_equal(due_extend(db, &eo, id, 1, LONG_LEASE), 0);
	assert_int_equal(eo, DUE_EXTEND_LOST);
	t = get(db, id);
	assert_int_equal(t->state, DUE_CLAIMED);
	assert_int_equal(t->attempt, 2);
	assert_false(t->has_result);
	assert_int_equal(t->n_attempts, 2);
	assert_string_equal(t->attempts[0].outcome, "LEASE_EXPIRED");
	assert_string_equal(t->attempts[0].late_commit, "REJECTED_STALE");
	assert_string_equal(t->attempts[1].outcome, "RUNNING");
	assert_null(t->attempts[1].late_commit);
	assert_int_equal(t->attempts[1].ended_at, 0);
	due_time lease = t->lease_until;
	due_task_free(t);

	/* the holder extends and completes */
	tu_sleep_ms(2);
	assert_int_equal(due_extend(db, &eo, id, 2, LONG_LEASE), 0);
	assert_int_equal(eo, DUE_EXTEND_OK);
	t = get(db, id);
	assert_true(t->lease_until > lease);
	due_task_free(t);
	assert_int_equal(due_complete(db, &co, id, 2, "new", 3), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	/* and a repeat is stale and changes nothing */
	assert_int_equal(due_complete(db, &co, id, 2, "again", 5), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(due_extend(db, &eo, id, 2, LONG_LEASE), 0);
	assert_int_equal(eo, DUE_EXTEND_LOST);
	t = get(db, id);
	assert_int_equal(t->state, DUE_DONE);
	assert_memory_equal(t->result, "new", 3);
	assert_string_equal(t->attempts[1].outcome, "DONE");
	due_task_free(t);
	due_close(db);
}

static void test_cancel_outcomes(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cancel_outcome o;
	due_extend_outcome eo;
	due_complete_outcome co;
	due_fail_outcome fo;

	due_id waiting = add(db, "k", 60000000, 5);
	assert_int_equal(due_cancel(db, &o, waiting), 0);
	assert_int_equal(o, DUE_CANCEL_CANCELLED);
	assert_int_equal(due_cancel(db, &o, waiting), 0);
	assert_int_equal(o, DUE_CANCEL_ALREADY_CANCELLED);
	assert_int_equal(due_cancel(db, &o, 99999999), 0);
	assert_int_equal(o, DUE_CANCEL_NOT_FOUND);

	due_id running = add(db, "k", 0, 5);
	claim_one(db, running, LONG_LEASE);
	assert_int_equal(due_cancel(db, &o, running), 0);
	assert_int_equal(o, DUE_CANCEL_REQUESTED);
	assert_int_equal(due_cancel(db, &o, running), 0);
	assert_int_equal(o, DUE_CANCEL_REQUESTED);
	due_task *t = get(db, running);
	assert_int_equal(t->state, DUE_CLAIMED);
	assert_true(t->cancel_requested);
	due_task_free(t);
	assert_int_equal(due_extend(db, &eo, running, 1, LONG_LEASE), 0);
	assert_int_equal(eo, DUE_EXTEND_CANCEL_REQUESTED);
	assert_int_equal(due_complete(db, &co, running, 1, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_CANCELLED_BEFORE_COMMIT);
	t = get(db, running);
	assert_int_equal(t->state, DUE_CANCELLED);
	assert_false(t->has_result);
	assert_null(t->lease_owner);
	assert_string_equal(t->attempts[0].outcome, "CANCELLED");
	assert_true(t->attempts[0].ended_at > 0);
	due_task_free(t);
	assert_int_equal(due_cancel(db, &o, running), 0);
	assert_int_equal(o, DUE_CANCEL_ALREADY_CANCELLED);

	due_id done = add(db, "k", 0, 5);
	claim_one(db, done, LONG_LEASE);
	assert_int_equal(due_complete(db, &co, done, 1, "r", 1), 0);
	assert_int_equal(due_cancel(db, &o, done), 0);
	assert_int_equal(o, DUE_CANCEL_TOO_LATE);
	assert_int_equal(state_of(db, done), DUE_DONE);

	due_id dead = add(db, "k", 0, 1);
	claim_one(db, dead, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, dead, 1, "x"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	assert_int_equal(due_cancel(db, &o, dead), 0);
	assert_int_equal(o, DUE_CANCEL_TOO_LATE);
	assert_int_equal(state_of(db, dead), DUE_DEAD);

	/* fail of a cancel-requested try ends CANCELLED, not retried */
	due_id f = add(db, "k", 0, 5);
	claim_one(db, f, LONG_LEASE);
	assert_int_equal(due_cancel(db, &o, f), 0);
	assert_int_equal(due_fail(db, &fo, f, 1, "boom"), 0);
	assert_int_equal(fo, DUE_FAIL_CANCELLED);
	t = get(db, f);
	assert_int_equal(t->state, DUE_CANCELLED);
	assert_string_equal(t->attempts[0].outcome, "CANCELLED");
	due_task_free(t);
	due_close(db);
}

static void test_backoff_and_dead(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	due_fail_outcome fo;
	const int64_t expect[] = {300000, 600000, 1000000};

	o.max_attempts = 4;
	o.backoff_us = 300000;
	o.backoff_cap_us = 1000000;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	for (int a = 1; a <= 4; a++) {
		due_task_list *l = claim_when_due(db, s.id);
		assert_int_equal(l->items[0].attempt, a);
		due_task_list_free(l);
		assert_int_equal(due_fail(db, &fo, s.id, a, "boom"), 0);
		due_task *t = get(db, s.id);
		due_attempt *at = &t->attempts[a - 1];
		assert_true(at->claimed_at >= at->due_at); /* never early */
		assert_string_equal(at->outcome, "FAILED");
		assert_string_equal(at->error, "boom");
		if (a < 4) {
			assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
			assert_int_equal(t->state, DUE_SCHEDULED);
			/* due = failure time + min(base * 2^(a-1), cap) */
			assert_int_equal(t->due_at - t->updated_at, expect[a - 1]);
			assert_int_equal(t->due_at - at->ended_at, expect[a - 1]);
			/* claimable again only once due */
			due_task_list *none = NULL;
			assert_int_equal(due_claim(db, &none, "w", NULL, 0, 1,
						   LONG_LEASE), 0);
			assert_int_equal(none->count, 0);
			due_task_list_free(none);
		} else {
			assert_int_equal(fo, DUE_FAIL_DEAD);
			assert_int_equal(t->state, DUE_DEAD);
		}
		due_task_free(t);
	}
	due_task *t = get(db, s.id);
	for (size_t i = 1; i < t->n_attempts; i++)
		assert_true(t->attempts[i].claimed_at - t->attempts[i - 1].ended_at >=
			    expect[i - 1]);
	assert_string_equal(t->last_error, "boom");
	due_task_free(t);
	due_close(db);
}

static void test_reclaim_paths(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cancel_outcome co;
	due_reclaimed rr;
	due_task_list *l = NULL;

	due_id again = add(db, "k", 0, 5);
	claim_one(db, again, 1000);
	wait_reclaim(db, again, &rr);
	assert_int_equal(rr.rescheduled, 1);
	due_task *t = get(db, again);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_string_equal(t->attempts[0].outcome, "LEASE_EXPIRED");
	assert_true(t->due_at <= t->updated_at); /* due now */
	due_task_free(t);
	claim_one(db, again, LONG_LEASE); /* out of the way */

	due_id dead = add(db, "k", 0, 1);
	claim_one(db, dead, 1000);
	wait_reclaim(db, dead, &rr);
	assert_int_equal(rr.dead, 1);
	t = get(db, dead);
	assert_int_equal(t->state, DUE_DEAD);
	assert_non_null(strstr(t->last_error, "lease expired"));
	assert_string_equal(t->attempts[0].outcome, "LEASE_EXPIRED");
	due_task_free(t);

	due_id cancelled = add(db, "k", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, 1000), 0);
	due_task_list_free(l);
	assert_int_equal(due_cancel(db, &co, cancelled), 0);
	assert_int_equal(co, DUE_CANCEL_REQUESTED);
	wait_reclaim(db, cancelled, &rr);
	assert_int_equal(rr.cancelled, 1);
	assert_int_equal(state_of(db, cancelled), DUE_CANCELLED);

	/* a live lease is never taken back */
	assert_int_equal(due_reclaim_expired(db, &rr), 0);
	assert_int_equal(rr.rescheduled + rr.dead + rr.cancelled, 0);
	assert_int_equal(state_of(db, again), DUE_CLAIMED);
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
	claim_one(db, id, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, id, 1, "x"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	assert_int_equal(due_requeue(db, id), DUE_ESTATE);
	assert_non_null(strstr(due_error_last(), "DEAD"));
	assert_int_equal(due_retry(db, id), 0);
	assert_int_equal(due_retry(db, id), DUE_ESTATE);
	assert_int_equal(claim_one(db, id, LONG_LEASE), 2);
	assert_int_equal(due_complete(db, &co, id, 1, "old", 3), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(due_fail(db, &fo, id, 2, "y"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	assert_int_equal(sql_int("SELECT count(*) FROM due_audit WHERE task_id = "
				 "%lld AND action = 'retry'", (long long)id), 1);

	/* requeue: CLAIMED -> SCHEDULED, old holder fenced */
	due_id rq = add(db, "k", 0, 5);
	claim_one(db, rq, LONG_LEASE);
	assert_int_equal(due_requeue(db, rq), 0);
	assert_int_equal(state_of(db, rq), DUE_SCHEDULED);
	assert_int_equal(due_complete(db, &co, rq, 1, "old", 3), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	due_task *t = get(db, rq);
	assert_string_equal(t->attempts[0].outcome, "REQUEUED");
	assert_string_equal(t->attempts[0].late_commit, "REJECTED_STALE");
	assert_false(t->has_result);
	assert_null(t->lease_owner);
	due_task_free(t);
	assert_int_equal(due_requeue(db, rq), DUE_ESTATE);
	assert_int_equal(sql_int("SELECT count(*) FROM due_audit WHERE task_id = "
				 "%lld AND action = 'requeue' AND detail = "
				 "'SCHEDULED'", (long long)rq), 1);

	/* kill: waiting and running tasks end DEAD; the holder is fenced */
	due_id kw = add(db, "k", 60000000, 5);
	assert_int_equal(due_kill(db, &final, kw), 0);
	assert_int_equal(final, DUE_DEAD);
	/* a second kill dismisses the dead letter; a third is refused */
	assert_int_equal(due_kill(db, &final, kw), 0);
	assert_int_equal(final, DUE_CANCELLED);
	assert_int_equal(due_kill(db, &final, kw), DUE_ESTATE);
	claim_one(db, rq, LONG_LEASE);
	assert_int_equal(due_kill(db, &final, rq), 0);
	assert_int_equal(final, DUE_DEAD);
	assert_int_equal(due_complete(db, &co, rq, 2, "late", 4), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	t = get(db, rq);
	assert_string_equal(t->attempts[1].outcome, "KILLED");
	assert_non_null(strstr(t->last_error, "killed by operator"));
	due_task_free(t);
	/* kill of a cancel-requested try ends CANCELLED */
	due_cancel_outcome cc;
	due_id kc = add(db, "k", 0, 5);
	claim_one(db, kc, LONG_LEASE);
	assert_int_equal(due_cancel(db, &cc, kc), 0);
	assert_int_equal(due_kill(db, &final, kc), 0);
	assert_int_equal(final, DUE_CANCELLED);
	assert_int_equal(sql_int("SELECT count(*) FROM due_audit WHERE action = "
				 "'kill'"), 4); /* 3 kills and 1 dismissal */

	/* retry refused while a live task holds the same (kind, key) */
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s1, s2;
	o.key = "dup";
	assert_int_equal(due_schedule(db, &s1, "k", "", 0, &o), 0);
	assert_int_equal(due_kill(db, NULL, s1.id), 0);
	assert_int_equal(due_schedule(db, &s2, "k", "", 0, &o), 0);
	assert_false(s2.existed);
	assert_int_equal(due_retry(db, s1.id), DUE_ECONFLICT);
	assert_int_equal(state_of(db, s1.id), DUE_DEAD);

	assert_int_equal(due_retry(db, 99999999), DUE_ENOTFOUND);
	assert_int_equal(due_kill(db, NULL, 99999999), DUE_ENOTFOUND);
	assert_int_equal(due_requeue(db, 99999999), DUE_ENOTFOUND);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Producer                                                            */
/* ------------------------------------------------------------------ */

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
	due_task *t = get(db, a.id);
	assert_memory_equal(t->payload, "x", 1); /* the first one stays */
	assert_string_equal(t->key, "order-42");
	due_task_free(t);
	assert_int_equal(due_schedule(db, &c, "remind", "x", 1, &o), 0);
	assert_false(c.existed);
	assert_true(c.id != a.id);
	/* while CLAIMED the key is still held */
	assert_int_equal(due_claim_id(db, &t, a.id, "w", LONG_LEASE), 0);
	due_task_free(t);
	assert_int_equal(due_schedule(db, &b, "close", "y", 1, &o), 0);
	assert_true(b.existed);
	assert_int_equal(b.id, a.id);
	/* once terminal, the key is free again */
	assert_int_equal(due_complete(db, &co, a.id, 1, "", 0), 0);
	assert_int_equal(due_schedule(db, &d, "close", "z", 1, &o), 0);
	assert_false(d.existed);
	assert_true(d.id > a.id);

	/* a batch: keyed duplicates inside it and against the store */
	due_schedule_opts k1 = DUE_SCHEDULE_OPTS_INIT, k2 = k1;
	k1.key = "order-42";
	k2.key = "order-43";
	due_submit items[4] = {{"close", "", 0, k2}, {"close", "", 0, k1},
			       {"close", "", 0, k2},
			       {"other", "", 0, DUE_SCHEDULE_OPTS_INIT}};
	due_submitted out[4];
	assert_int_equal(due_schedule_batch(db, out, items, 4), 0);
	assert_false(out[0].existed);
	assert_true(out[1].existed);
	assert_int_equal(out[1].id, d.id);
	assert_true(out[2].existed);
	assert_int_equal(out[2].id, out[0].id);
	assert_false(out[3].existed);
	assert_true(out[3].id > out[0].id);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), 5);
	due_close(db);
}

static void test_batch_schedule(void **state)
{
	(void)state;
	enum { N = 500 };
	due_db *db = open_db();
	static due_submit items[N];
	static due_submitted out[N];
	static char kinds[N][16];
	due_schedule_opts later = DUE_SCHEDULE_OPTS_INIT;

	later.delay_us = 3600000000LL;
	later.max_attempts = 7;
	for (int i = 0; i < N; i++) {
		snprintf(kinds[i], sizeof(kinds[i]), "k%d", i % 7);
		items[i] = (due_submit){kinds[i], kinds[i], strlen(kinds[i]),
					i % 2 ? later : (due_schedule_opts)
							DUE_SCHEDULE_OPTS_INIT};
	}
	assert_int_equal(due_schedule_batch(db, out, items, N), 0);
	for (int i = 1; i < N; i++)
		assert_true(out[i].id > out[i - 1].id);
	for (int i = 0; i < N; i += 97) {
		due_task *t = get(db, out[i].id);
		assert_string_equal(t->kind, kinds[i]);
		assert_memory_equal(t->payload, kinds[i], strlen(kinds[i]));
		assert_int_equal(t->max_attempts, i % 2 ? 7 : 5);
		due_task_free(t);
	}
	due_stats st;
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], N);
	assert_int_equal(st.due_unclaimed, N / 2);
	due_close(db);
}

/*
** Wait up to ms for a notification on c whose payload is `want`.  The
** channel is database-wide: other test binaries running at the same time
** (other schemas) notify on it too, so only our own kinds count.
*/
static bool notified(PGconn *c, int ms, const char *want)
{
	bool seen = false;
	for (int waited = 0; waited <= ms && !seen; waited += 10) {
		PGnotify *nt;
		PQconsumeInput(c);
		while ((nt = PQnotifies(c)) != NULL) {
			seen |= strcmp(nt->extra, want) == 0;
			PQfreemem(nt);
		}
		if (seen)
			break;
		fd_set fds;
		struct timeval tv = {0, 10000};
		FD_ZERO(&fds);
		FD_SET(PQsocket(c), &fds);
		select(PQsocket(c) + 1, &fds, NULL, NULL, &tv);
	}
	return seen;
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
	assert_int_equal(due_schedule_pg_tx(app, &s, close_kind, "o1", 2, NULL), 0);
	assert_true(s.id > 0);
	assert_false(notified(ear, 50, close_kind));
	exec_ok(app, "ROLLBACK");
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), 0);
	assert_false(notified(ear, 100, close_kind));
	/* committed with them: task present, listener woken with the kind */
	exec_ok(app, "BEGIN");
	exec_ok(app, "INSERT INTO orders VALUES (2)");
	o.key = "order-2";
	assert_int_equal(due_schedule_pg_tx(app, &s, close_kind, "o2", 2, &o), 0);
	assert_false(s.existed);
	assert_int_equal(due_schedule_pg_tx(app, &again, close_kind, "o2", 2, &o),
			 0);
	assert_true(again.existed);
	assert_int_equal(again.id, s.id);
	exec_ok(app, "COMMIT");
	assert_true(notified(ear, 2000, close_kind));
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), 1);
	assert_int_equal(sql_int("SELECT count(*) FROM orders"), 1);
	due_db *db = open_db();
	due_task *t = get(db, s.id);
	assert_memory_equal(t->payload, "o2", 2);
	assert_string_equal(t->kind, close_kind);
	due_task_free(t);
	/* the ordinary submit notifies too */
	add(db, remind_kind, 0, 5);
	assert_true(notified(ear, 2000, remind_kind));
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
	snprintf(sql_buf, sizeof(sql_buf), "INSERT INTO effect VALUES (%lld, %d)",
		 (long long)task->id, task->attempt);
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
	assert_int_equal(due_complete_tx(db, &co, id, 1, "r", 1, hook_insert,
					 &fail), DUE_ERROR);
	assert_non_null(strstr(due_error_last(), "hook"));
	assert_int_equal(state_of(db, id), DUE_CLAIMED);
	assert_int_equal(sql_int("SELECT count(*) FROM effect"), 0);
	due_task *t = get(db, id);
	assert_string_equal(t->attempts[0].outcome, "RUNNING");
	due_task_free(t);
	/* the hook writes: its row commits with DONE */
	fail = HOOK_WRITE;
	assert_int_equal(due_complete_tx(db, &co, id, 1, "r", 1, hook_insert,
					 &fail), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_int_equal(state_of(db, id), DUE_DONE);
	assert_int_equal(sql_int("SELECT count(*) FROM effect"), 1);
	/* a late duplicate: refused, hook not called, no second effect */
	assert_int_equal(due_complete_tx(db, &co, id, 1, "r", 1, hook_insert,
					 &fail), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(sql_int("SELECT count(*) FROM effect"), 1);
	/* a hook whose SQL failed poisons the transaction even when it
	   returns 0: COMMIT answers ROLLBACK, and that is reported */
	due_id id2 = add(db, "k", 0, 5);
	claim_one(db, id2, LONG_LEASE);
	sql("INSERT INTO effect VALUES (%lld, 1)", (long long)id2);
	assert_int_equal(due_complete_tx(db, &co, id2, 1, "r", 1, hook_insert,
					 &fail), DUE_ERROR);
	assert_int_equal(state_of(db, id2), DUE_CLAIMED);
	fail = HOOK_WRITE_IGNORING_ERRORS;
	assert_int_equal(due_complete_tx(db, &co, id2, 1, "r", 1, hook_insert,
					 &fail), DUE_ERROR);
	assert_non_null(strstr(due_error_last(), "rolled back"));
	assert_int_equal(state_of(db, id2), DUE_CLAIMED);
	/* and the handle is usable afterwards */
	assert_int_equal(due_complete(db, &co, id2, 1, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	/* a session that lost our prepared statements: prepared again */
	due_id id3 = add(db, "k", 0, 5);
	claim_one(db, id3, LONG_LEASE);
	fail = HOOK_DEALLOCATE;
	assert_int_equal(due_complete_tx(db, &co, id3, 1, "r", 1, hook_insert,
					 &fail), 0);
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

static void test_complete_batch(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id a = add(db, "k", 0, 5), b = add(db, "k", 0, 5),
	       c = add(db, "k", 0, 5), d = add(db, "k", 0, 5);
	due_task_list *l = NULL;
	due_cancel_outcome co;

	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 4);
	due_task_list_free(l);
	assert_int_equal(due_cancel(db, &co, c), 0);
	due_completion items[5] = {{a, 1, "ra", 2, 0},
				   {b, 7, "rb", 2, 0},
				   {c, 1, "rc", 2, 0},
				   {d, 1, NULL, 0, 0},
				   {a, 1, "again", 5, 0}};
	assert_int_equal(due_complete_batch(db, items, 5), 0);
	assert_int_equal(items[0].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(items[1].outcome, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(items[2].outcome, DUE_COMPLETE_CANCELLED_BEFORE_COMMIT);
	assert_int_equal(items[3].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(items[4].outcome, DUE_COMPLETE_REJECTED_STALE);
	due_task *t = get(db, a);
	assert_int_equal(t->state, DUE_DONE);
	assert_memory_equal(t->result, "ra", 2);
	due_task_free(t);
	t = get(db, d);
	assert_true(t->has_result);
	assert_int_equal(t->result_len, 0);
	due_task_free(t);
	assert_int_equal(state_of(db, b), DUE_CLAIMED);
	assert_int_equal(state_of(db, c), DUE_CANCELLED);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Concurrency, reconnects                                             */
/* ------------------------------------------------------------------ */

/* Child: wait for go, claim in batches until nothing is left for a while. */
static void claim_child(int go, int fd, int worker)
{
	due_db *db = NULL;
	char owner[32], c;
	int empty = 0;

	snprintf(owner, sizeof(owner), "proc-%d", worker);
	if (due_open(&db, url, NULL) < 0)
		_exit(2);
	if (read(go, &c, 1) != 1)
		_exit(5);
	while (empty < 20) {
		due_task_list *l = NULL;
		if (due_claim(db, &l, owner, NULL, 0, 7, LONG_LEASE) < 0)
			_exit(3);
		empty = l->count ? 0 : empty + 1;
		for (size_t i = 0; i < l->count; i++)
			dprintf(fd, "%lld\n", (long long)l->items[i].id);
		due_task_list_free(l);
		if (empty)
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
	static due_submit items[N];
	static due_submitted out[N];
	int seen[N + 1] = {0}, claims = 0, dups = 0, go[2], fds[P][2];
	pid_t pids[P];

	for (int i = 0; i < N; i++)
		items[i] = (due_submit){"k", "", 0, DUE_SCHEDULE_OPTS_INIT};
	assert_int_equal(due_schedule_batch(db, out, items, N), 0);
	assert_int_equal(pipe(go), 0);
	for (int p = 0; p < P; p++) {
		assert_int_equal(pipe(fds[p]), 0);
		if ((pids[p] = fork()) == 0) {
			close(fds[p][0]);
			close(go[1]);
			claim_child(go[0], fds[p][1], p);
		}
		close(fds[p][1]);
	}
	close(go[0]);
	assert_int_equal(write(go[1], "ggg", 3), 3); /* all start at once */
	close(go[1]);
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
	printf("postgres, three processes: tasks=%d claims=%d dup_claims=%d\n",
	       N, claims, dups);
	assert_int_equal(claims, N);
	assert_int_equal(dups, 0);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task WHERE state = "
				 "'CLAIMED' AND attempt = 1"), N);
	assert_int_equal(sql_int("SELECT count(*) FROM due_attempt"), N);
	assert_int_equal(sql_int("SELECT count(DISTINCT worker) FROM due_attempt"),
			 P);
	due_close(db);
}

/* Child: cancel every id read from `in`, answer the outcome on `out`. */
static void cancel_child(int in, int out)
{
	due_db *db = NULL;
	long long id;
	FILE *f = fdopen(in, "r");

	if (due_open(&db, url, NULL) < 0)
		_exit(2);
	while (fscanf(f, "%lld", &id) == 1) {
		due_cancel_outcome o;
		if (due_cancel(db, &o, id) < 0)
			_exit(3);
		dprintf(out, "%d\n", (int)o);
	}
	due_close(db);
	_exit(0);
}

/*
** Seed 000's race: a task falls due while another process cancels it.
** Every round must land in an allowed pair (CONTRACT §3.6): CANCELLED and
** never run, REQUESTED and no result, or TOO_LATE and exactly the result.
*/
static void test_due_vs_cancel_race(void **state)
{
	(void)state;
	enum { ROUNDS = 200 };
	int to[2], from[2], seen[5] = {0}, violations = 0;
	pid_t pid;

	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	if ((pid = fork()) == 0) {
		close(to[1]);
		close(from[0]);
		cancel_child(to[0], from[1]);
	}
	due_db *db = open_db(); /* after the fork: the child opens its own */
	close(to[0]);
	close(from[1]);
	FILE *answers = fdopen(from[0], "r");
	for (int i = 0; i < ROUNDS; i++) {
		due_id id = add(db, "race", 0, 5);
		due_task *t = NULL;
		due_complete_outcome co = DUE_COMPLETE_REJECTED_STALE;
		int o;
		/* the cancel is sent before the claim, between claim and
		   complete, or after: the first third races for real */
		if (i % 3 == 0)
			dprintf(to[1], "%lld\n", (long long)id);
		bool ran = due_claim_id(db, &t, id, "w", LONG_LEASE) == 0;
		if (i % 3 == 1)
			dprintf(to[1], "%lld\n", (long long)id);
		if (ran) {
			assert_int_equal(due_complete(db, &co, id, t->attempt, "fx",
						      2), 0);
			due_task_free(t);
		}
		if (i % 3 == 2)
			dprintf(to[1], "%lld\n", (long long)id);
		assert_int_equal(fscanf(answers, "%d", &o), 1);
		t = get(db, id);
		bool ok = (o == DUE_CANCEL_CANCELLED && !ran &&
			   t->state == DUE_CANCELLED && t->n_attempts == 0) ||
			  (o == DUE_CANCEL_REQUESTED && ran &&
			   co == DUE_COMPLETE_CANCELLED_BEFORE_COMMIT &&
			   t->state == DUE_CANCELLED && !t->has_result) ||
			  (o == DUE_CANCEL_TOO_LATE && ran &&
			   co == DUE_COMPLETE_DONE && t->state == DUE_DONE &&
			   t->has_result);
		violations += !ok;
		seen[o]++;
		due_task_free(t);
	}
	close(to[1]);
	fclose(answers);
	int st;
	waitpid(pid, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("postgres, due vs cancel: %d rounds: CANCELLED=%d REQUESTED=%d "
	       "TOO_LATE=%d violations=%d\n", ROUNDS, seen[0], seen[1], seen[2],
	       violations);
	assert_int_equal(violations, 0);
	due_close(db);
}

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
	    "application_name = '%s'", app);
	for (int i = 0; i < 500 && sql_int("SELECT count(*) FROM pg_stat_activity"
					   " WHERE application_name = '%s'", app);
	     i++)
		tu_sleep_ms(10);
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
/* Reading: get, list, stats, prune                                    */
/* ------------------------------------------------------------------ */

static void test_list_stats_prune(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_fail_outcome fo;
	due_complete_outcome co;
	due_task_list *l = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_stats st;
	int64_t deleted;

	due_id dead = add(db, "a", 0, 1);
	due_id ok = add(db, "b", 0, 5);
	due_id run = add(db, "b", 0, 5);
	add(db, "a", 3600000000LL, 5);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.due_unclaimed, 3);
	assert_true(st.oldest_due_unclaimed_ms >= 0);
	assert_int_equal(st.claims_window, 0);
	assert_int_equal(st.lateness_p50_us, -1);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 3);
	due_task_list_free(l);
	assert_int_equal(due_fail(db, &fo, dead, 1, "x"), 0);
	assert_int_equal(due_complete(db, &co, ok, 1, "", 0), 0);

	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], 1);
	assert_int_equal(st.counts[DUE_CLAIMED], 1);
	assert_int_equal(st.counts[DUE_DONE], 1);
	assert_int_equal(st.counts[DUE_DEAD], 1);
	assert_int_equal(st.dead, 1);
	assert_int_equal(st.due_unclaimed, 0);
	assert_int_equal(st.oldest_due_unclaimed_ms, 0);
	assert_int_equal(st.claims_window, 3);
	assert_int_equal(st.window_us, 300000000LL);
	assert_true(st.lateness_p50_us >= 0);
	assert_true(st.lateness_p99_us >= st.lateness_p50_us);
	assert_true(st.lateness_max_us >= st.lateness_p99_us);
	assert_true(st.now > 0);
	bool up;
	int64_t nd;
	assert_int_equal(due_health(db, &up, &nd), 0);
	assert_false(up);
	assert_int_equal(nd, 1);

	/* list: filters, paging, attempts */
	lo.kind = "b";
	lo.attempts = true;
	assert_int_equal(due_list(db, &l, &lo), 0);
	assert_int_equal(l->count, 2);
	assert_int_equal(l->items[0].id, ok);
	assert_int_equal(l->items[1].id, run);
	assert_int_equal(l->items[0].n_attempts, 1);
	assert_string_equal(l->items[0].attempts[0].outcome, "DONE");
	assert_string_equal(l->items[1].attempts[0].outcome, "RUNNING");
	due_task_list_free(l);
	lo = (due_list_opts)DUE_LIST_OPTS_INIT;
	lo.limit = 2;
	assert_int_equal(due_list(db, &l, &lo), 0);
	assert_int_equal(l->count, 2);
	assert_int_equal(l->items[0].n_attempts, 0);
	lo.after = l->items[1].id;
	due_task_list_free(l);
	assert_int_equal(due_list(db, &l, &lo), 0);
	assert_int_equal(l->count, 2);
	assert_true(l->items[0].id > lo.after);
	due_task_list_free(l);
	lo = (due_list_opts)DUE_LIST_OPTS_INIT;
	lo.state = DUE_CLAIMED;
	assert_int_equal(due_list(db, &l, &lo), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, run);
	due_task_list_free(l);
	assert_int_equal(due_dead(db, &l, 10), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, dead);
	assert_int_equal(l->items[0].n_attempts, 1);
	due_task_list_free(l);

	/* prune: DONE/CANCELLED older than the retention, never DEAD */
	assert_int_equal(due_prune(db, &deleted, 3600000000LL), 0);
	assert_int_equal(deleted, 0);
	assert_int_equal(due_prune(db, &deleted, INT64_MAX), 0);
	assert_int_equal(deleted, 0);
	tu_sleep_ms(5);
	assert_int_equal(due_prune(db, &deleted, 1000), 0);
	assert_int_equal(deleted, 1);
	due_task *t = NULL;
	assert_int_equal(due_get(db, &t, ok), DUE_ENOTFOUND);
	assert_int_equal(sql_int("SELECT count(*) FROM due_attempt WHERE task_id = "
				 "%lld", (long long)ok), 0);
	assert_int_equal(state_of(db, dead), DUE_DEAD);
	due_id next = add(db, "k", 0, 5);
	assert_true(next > run);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Schema 2: upgrade, schedules, metrics                               */
/* ------------------------------------------------------------------ */

/* Columns and constraints of the version-2 tables in `sch`, as text. */
static void v2_shape(char *buf, size_t n, const char *sch)
{
	char cols[3000], cons[1000];
	sql_text(cols, sizeof(cols), "SELECT string_agg(table_name || '.' || "
		"column_name || ' ' || data_type || ' ' || is_nullable || ' ' || "
		"coalesce(column_default, ''), ', ' ORDER BY table_name, "
		"ordinal_position) FROM information_schema.columns WHERE "
		"table_schema = '%s' AND table_name IN ('due_schedule', "
		"'due_worker')", sch);
	sql_text(cons, sizeof(cons), "SELECT string_agg(conname || ' ' || "
		"pg_get_constraintdef(c.oid), ', ' ORDER BY conname) FROM "
		"pg_constraint c JOIN pg_namespace s ON s.oid = c.connamespace "
		"WHERE s.nspname = '%s' AND conname LIKE 'due_%%'", sch);
	snprintf(buf, n, "%s | %s", cols, cons);
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
	sql("DROP TABLE %s.due_schedule, %s.due_worker", sch, sch);
	sql("UPDATE %s.due_meta SET value = '1'", sch);

	/* without create: refused as older, and nothing changes */
	db = NULL;
	assert_int_equal(due_open(&db, u, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "older"));
	assert_non_null(strstr(due_error_last(), "due init"));
	due_close(db);
	assert_int_equal(sql_int("SELECT count(*) FROM pg_tables WHERE "
		"schemaname = '%s' AND tablename = 'due_schedule'", sch), 0);

	/* an upgrade that fails half-way leaves version 1 intact */
	sql("CREATE TABLE %s.due_worker (x int)", sch);
	db = NULL;
	assert_true(due_open(&db, u, &o) < 0);
	assert_non_null(strstr(due_error_last(), "due_worker"));
	due_close(db);
	assert_string_equal(sql_text(buf, sizeof(buf), "SELECT value FROM "
		"%s.due_meta WHERE name = 'schema_version'", sch), "1");
	assert_int_equal(sql_int("SELECT count(*) FROM pg_tables WHERE "
		"schemaname = '%s' AND tablename = 'due_schedule'", sch), 0);
	sql("DROP TABLE %s.due_worker", sch);

	/* three `due init` at once upgrade it once */
	concurrent_inits(u, 3);
	assert_string_equal(sql_text(buf, sizeof(buf), "SELECT value FROM "
		"%s.due_meta WHERE name = 'schema_version'", sch), "3");
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

static due_cron_def cron_def(const char *name, const char *expr,
			     const char *kind)
{
	due_cron_def d = DUE_CRON_DEF_INIT;
	d.name = name;
	d.expr = expr;
	d.kind = kind;
	return d;
}

static void test_cron_definitions_pg(void **state)
{
	(void)state;
	static const char bin[] = {'a', '\0', 'b', (char)0xff};
	const char *names[] = {"b", "B", "a_1", "a-1", "a.1"};
	due_db *db = open_db();
	due_cron_def d = cron_def("report", "0 2 * * *", "report");
	due_schedule_list *l = NULL;
	const due_schedule_info *i;
	due_time now;
	PGresult *r;
	char buf[64];

	d.tz = "Asia/Kolkata";
	d.payload = bin;
	d.payload_len = sizeof(bin);
	d.misfire = DUE_MISFIRE_ONCE;
	d.overlap = DUE_OVERLAP_WAIT;
	d.max_attempts = 7;
	d.backoff_us = 2000000;
	d.backoff_cap_us = 10000000;
	assert_int_equal(due_now(db, &now), 0);
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->count, 1);
	i = &l->items[0];
	assert_string_equal(i->name, "report");
	assert_string_equal(i->expr, "0 2 * * *");
	assert_string_equal(i->kind, "report");
	assert_string_equal(i->tz, "Asia/Kolkata");
	assert_int_equal(i->payload_len, sizeof(bin));
	assert_memory_equal(i->payload, bin, sizeof(bin));
	assert_int_equal(i->misfire, DUE_MISFIRE_ONCE);
	assert_int_equal(i->overlap, DUE_OVERLAP_WAIT);
	assert_int_equal(i->max_attempts, 7);
	assert_int_equal(i->backoff_us, 2000000);
	assert_int_equal(i->backoff_cap_us, 10000000);
	/* 02:00 in Kolkata is 20:30 UTC, and the slot is whole seconds */
	assert_true(i->next_slot > now);
	assert_int_equal((i->next_slot / 1000000) % 86400, 20 * 3600 + 1800);
	assert_int_equal(i->next_slot % 1000000, 0);
	assert_int_equal(i->last_slot, 0);
	assert_int_equal(i->last_task, 0);
	assert_int_equal(i->fired, 0);
	assert_int_equal(i->missed, 0);
	assert_int_equal(i->last_missed, 0);
	assert_true(i->created_at >= now && i->updated_at == i->created_at);
	due_schedule_list_free(l);
	/* the stored slot is exactly the one read back */
	assert_int_equal(sql_int("SELECT (extract(epoch FROM next_slot) * "
				 "1000000)::int8 %% 86400000000 FROM due_schedule"),
			 (20 * 3600 + 1800) * 1000000LL);

	/* a replace keeps the history and created_at */
	sql("UPDATE due_schedule SET last_slot = now() - interval '1 hour',"
	    " last_task = 42, fired = 3, missed = 2, last_missed = now() -"
	    " interval '2 hours', created_at = now() - interval '1 day'");
	d.expr = "30 3 * * *";
	d.kind = "report2";
	d.tz = NULL;
	d.payload = "new";
	d.payload_len = 3;
	d.misfire = DUE_MISFIRE_SKIP;
	d.overlap = DUE_OVERLAP_ALLOW;
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->count, 1);
	i = &l->items[0];
	assert_string_equal(i->expr, "30 3 * * *");
	assert_string_equal(i->kind, "report2");
	assert_string_equal(i->tz, "UTC");
	assert_memory_equal(i->payload, "new", 3);
	assert_int_equal(i->payload_len, 3);
	assert_int_equal(i->misfire, DUE_MISFIRE_SKIP);
	assert_int_equal(i->overlap, DUE_OVERLAP_ALLOW);
	assert_int_equal((i->next_slot / 1000000) % 86400, 3 * 3600 + 1800);
	assert_int_equal(i->last_task, 42);
	assert_int_equal(i->fired, 3);
	assert_int_equal(i->missed, 2);
	assert_true(i->last_slot > 0 && i->last_missed > 0);
	assert_true(i->last_missed < i->last_slot);
	assert_true(i->created_at < i->updated_at - 86000LL * 1000000);
	due_schedule_list_free(l);

	/* listed in byte order (as SQLite sorts), whatever the collation */
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		assert_int_equal(due_cron_put(db, &(due_cron_def){
			DUE_CRON_DEF_VERSION, names[k], "@hourly", "k", NULL,
			NULL, 0, DUE_MISFIRE_SKIP, DUE_OVERLAP_ALLOW, 5, 1000000,
			3600000000LL}), 0);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->count, 6);
	for (size_t k = 1; k < l->count; k++)
		assert_true(strcmp(l->items[k - 1].name, l->items[k].name) < 0);
	assert_string_equal(l->items[0].name, "B");
	assert_int_equal(l->items[0].payload_len, 0);
	assert_non_null(l->items[0].payload);
	due_schedule_list_free(l);

	/* remove; a second remove finds nothing */
	assert_int_equal(due_cron_remove(db, "B"), 0);
	assert_int_equal(due_cron_remove(db, "B"), DUE_ENOTFOUND);
	assert_non_null(strstr(due_error_last(), "no schedule named 'B'"));
	assert_int_equal(sql_int("SELECT count(*) FROM due_schedule"), 5);

	/* the policies are checked by the schema too */
	r = PQexec(adm, "UPDATE due_schedule SET misfire = 'later'");
	assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
	PQclear(r);
	r = PQexec(adm, "UPDATE due_schedule SET overlap = 'queue'");
	assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
	PQclear(r);
	sql("INSERT INTO due_worker (owner, started_at, seen_at) VALUES"
	    " ('bare', now(), now())");
	assert_int_equal(sql_int("SELECT claimed + done + failed + dead + stale"
		" + cancelled + lease_lost + claim_queries + empty_claims"
		" + reclaim_queries + store_errors FROM due_worker"), 0);
	assert_string_equal(sql_text(buf, sizeof(buf), "SELECT data_type FROM "
		"information_schema.columns WHERE table_schema = '%s' AND "
		"table_name = 'due_schedule' AND column_name = 'payload'",
		schema), "bytea");
	due_close(db);
}

/* Slot tasks of schedule `name`: count, distinct keys, span, bad due_at. */
typedef struct slots {
	int64_t n, distinct, first, last, misdue;
} slots;

static slots slot_tasks(const char *name)
{
	slots s;
	const char *w = "FROM due_task WHERE key LIKE 'cron:%s:%%'";
	char q[256];

#define SLOT_SQL(expr) (snprintf(q, sizeof(q), "SELECT " expr " %s", w), \
			sql_int(q, name))
	s.n = SLOT_SQL("count(*)");
	s.distinct = SLOT_SQL("count(DISTINCT key)");
	s.first = SLOT_SQL("min(split_part(key, ':', 3)::int8)");
	s.last = SLOT_SQL("max(split_part(key, ':', 3)::int8)");
	/* each slot's task is due exactly at its slot */
	s.misdue = SLOT_SQL("count(*) FILTER (WHERE due_at <> "
			    "to_timestamp(split_part(key, ':', 3)::int8))");
#undef SLOT_SQL
	return s;
}

static void test_cron_fire_exact_and_notify(void **state)
{
	(void)state;
	PGconn *ear = connect_to(url);
	char kind[32];
	due_db *db = open_db();
	due_cron_tick_result r;
	due_schedule_list *l = NULL;
	due_task *t;

	snprintf(kind, sizeof(kind), "sec-%d", (int)getpid());
	exec_ok(ear, "LISTEN due_task_new");
	due_cron_def d = cron_def("sec", "* * * * * *", kind);
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_tick(db, &r, &(due_cron_tick_opts){DUE_CRON_TICK_OPTS_VERSION, 2500000, DUE_CRON_MISFIRE_GRACE_US}), 0);
	assert_true(r.materialized >= 2 && r.materialized <= 3);
	assert_int_equal(r.lost_races, 0);
	assert_true(notified(ear, 2000, kind));
	slots s = slot_tasks("sec");
	assert_int_equal(s.n, r.materialized);
	assert_int_equal(s.distinct, s.n);
	assert_int_equal(s.last - s.first + 1, s.n);
	assert_int_equal(s.misdue, 0);

	/* the schedule records its last slot and task, and moved on */
	assert_int_equal(due_cron_list(db, &l), 0);
	const due_schedule_info *i = &l->items[0];
	assert_int_equal(i->fired, s.n);
	assert_int_equal(i->last_slot, s.last * 1000000);
	assert_int_equal(i->next_slot, (s.last + 1) * 1000000);
	assert_int_equal(r.next_slot, i->next_slot);
	t = get(db, i->last_task);
	assert_int_equal(t->due_at, i->last_slot);
	assert_string_equal(t->kind, kind);
	assert_int_equal(t->max_attempts, 5);
	due_task_free(t);
	due_schedule_list_free(l);

	/* nothing more to do before the next slot */
	assert_int_equal(due_cron_tick(db, &r, NULL), 0);
	assert_int_equal(r.materialized, 0);
	assert_int_equal(slot_tasks("sec").n, s.n);
	PQfinish(ear);
	due_close(db);
}

/*
** A slot whose task is already in the store as a live task of the same
** (kind, key), e.g. materialized by a run cut short: the step still
** advances and records that task, inserting no second one.
*/
static void test_cron_fire_finds_live_task(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cron_def d = cron_def("yearly", "0 0 1 1 *", "yk");
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_cron_tick_result r;
	due_schedule_list *l = NULL;
	due_submitted pre;
	char key[64];

	assert_int_equal(due_cron_put(db, &d), 0);
	sql("UPDATE due_schedule SET next_slot = date_trunc('second', now())"
	    " - interval '2 seconds'");
	int64_t slot = sql_int("SELECT extract(epoch FROM next_slot)::int8 "
			       "FROM due_schedule");
	snprintf(key, sizeof(key), "cron:yearly:%lld", (long long)slot);
	o.key = key;
	o.delay_us = 3600000000LL;
	assert_int_equal(due_schedule(db, &pre, "yk", "", 0, &o), 0);
	assert_int_equal(due_cron_tick(db, &r, NULL), 0);
	assert_int_equal(r.materialized, 1);
	assert_int_equal(r.lost_races, 0);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), 1);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->items[0].last_task, pre.id);
	assert_int_equal(l->items[0].last_slot, slot * 1000000);
	assert_int_equal(l->items[0].fired, 1);
	/* and on to next 1 January, 00:00 UTC */
	assert_true(l->items[0].next_slot > slot * 1000000);
	assert_int_equal(sql_int("SELECT count(*) FROM due_schedule WHERE "
		"next_slot = date_trunc('year', now() AT TIME ZONE 'UTC' + "
		"interval '1 year') AT TIME ZONE 'UTC'"), 1);
	due_schedule_list_free(l);
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
		rc = due_cron_tick(db, &r, NULL) < 0 ? 3
		     : r.materialized == 1 && r.lost_races == 0 ? 0 : 4;
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
	due_schedule_list *l = NULL;
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
	for (int i = 0; i < 500 && !waiting; i++) {
		waiting = (int)sql_int("SELECT count(*) FROM pg_stat_activity"
			" WHERE wait_event_type = 'Lock' AND query LIKE"
			" 'WITH s AS MATERIALIZED (SELECT name FROM due_schedule%%'");
		if (!waiting)
			tu_sleep_ms(10);
	}
	assert_true(waiting > 0);
	exec_ok(other, "COMMIT");
	waitpid(kid, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task"), 1);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->items[0].last_task, pre.id);
	assert_int_equal(l->items[0].last_slot, slot * 1000000);
	assert_int_equal(l->items[0].fired, 1);
	due_schedule_list_free(l);
	PQfinish(other);
	due_close(db);
}

/* Missed slots (misfire skip) add up across passes; no task is made. */
static void test_cron_missed_accumulate(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cron_def d = cron_def("minutely", "* * * * *", "mk");
	due_cron_tick_result r1, r2;
	due_schedule_list *l = NULL;

	assert_int_equal(due_cron_put(db, &d), 0);
	for (int pass = 0; pass < 2; pass++) {
		sql("UPDATE due_schedule SET next_slot = date_trunc('minute', "
		    "now()) - interval '10 minutes'");
		assert_int_equal(due_cron_tick(db, pass ? &r2 : &r1, NULL), 0);
	}
	assert_true(r1.missed >= 10 && r2.missed >= 10);
	assert_int_equal(due_cron_list(db, &l), 0);
	const due_schedule_info *i = &l->items[0];
	assert_int_equal(i->missed, r1.missed + r2.missed);
	assert_int_equal(i->fired, r1.materialized + r2.materialized);
	/* no task for a missed slot; at most the in-grace one, made once
	   (the second pass finds it live when it fires that slot again) */
	assert_true(sql_int("SELECT count(*) FROM due_task") <= 1);
	assert_int_equal(sql_int("SELECT count(*) FROM due_task WHERE"
		" due_at <= to_timestamp(%lld)",
		(long long)(i->last_missed / 1000000)), 0);
	assert_int_equal(i->last_missed % 60000000, 0);
	assert_true(i->last_missed <= r2.now - DUE_CRON_MISFIRE_GRACE_US);
	assert_true(i->next_slot > r2.now);
	due_schedule_list_free(l);
	due_close(db);
}

/* Child: tick for `seconds`, then report "materialized lost_races". */
static void tick_child(int go, int fd, int seconds)
{
	due_db *db = NULL;
	int64_t made = 0, lost = 0;
	char c;

	if (due_open(&db, url, NULL) < 0)
		_exit(2);
	if (read(go, &c, 1) != 1)
		_exit(5);
	for (int i = 0; i < seconds * 100; i++) {
		due_cron_tick_result r;
		if (due_cron_tick(db, &r, &(due_cron_tick_opts){DUE_CRON_TICK_OPTS_VERSION, 1500000, DUE_CRON_MISFIRE_GRACE_US}) < 0) {
			fprintf(stderr, "tick: %s\n", due_error_last());
			_exit(3);
		}
		made += r.materialized;
		lost += r.lost_races;
		tu_sleep_ms(10);
	}
	dprintf(fd, "%lld %lld\n", (long long)made, (long long)lost);
	due_close(db);
	_exit(0);
}

static void test_cron_two_schedulers_once_per_slot(void **state)
{
	(void)state;
	enum { P = 2 };
	due_db *db = open_db();
	due_cron_def d = cron_def("every-second", "* * * * * *", "tick");
	due_schedule_list *l = NULL;
	int go[2], fds[P][2];
	long long made = 0, lost = 0;
	pid_t pids[P];

	assert_int_equal(due_cron_put(db, &d), 0);
	due_close(db); /* the children open their own; they inherit nothing */
	assert_int_equal(pipe(go), 0);
	for (int p = 0; p < P; p++) {
		assert_int_equal(pipe(fds[p]), 0);
		if ((pids[p] = fork()) == 0) {
			close(fds[p][0]);
			close(go[1]);
			tick_child(go[0], fds[p][1], 5);
		}
		close(fds[p][1]);
	}
	close(go[0]);
	assert_int_equal(write(go[1], "gg", 2), 2);
	close(go[1]);
	for (int p = 0; p < P; p++) {
		FILE *f = fdopen(fds[p][0], "r");
		long long m = 0, x = 0;
		assert_int_equal(fscanf(f, "%lld %lld", &m, &x), 2);
		made += m;
		lost += x;
		fclose(f);
		int st;
		waitpid(pids[p], &st, 0);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	slots s = slot_tasks("every-second");
	printf("postgres cron: 2 schedulers x 5 s -> %lld slot tasks (keys "
	       "%lld..%lld), won=%lld lost_races=%lld\n", (long long)s.n,
	       (long long)s.first, (long long)s.last, made, lost);
	assert_true(s.n >= 5);
	assert_int_equal(s.distinct, s.n);            /* no slot twice */
	assert_int_equal(s.last - s.first + 1, s.n);  /* no slot skipped */
	assert_int_equal(s.misdue, 0);
	assert_int_equal(made, s.n);                  /* won == inserted */
	db = open_db();
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->items[0].fired, s.n);
	assert_int_equal(l->items[0].missed, 0);
	assert_int_equal(l->items[0].last_slot, s.last * 1000000);
	assert_int_equal(l->items[0].next_slot, (s.last + 1) * 1000000);
	due_schedule_list_free(l);
	due_close(db);
}

/*
** One history row at a fixed, old time: lateness and duration in
** microseconds; dur_us = NO_END for a try still running.
*/
#define NO_END INT64_MIN
static void attempt_row(int id, int64_t late_us, int64_t dur_us,
			const char *outcome, bool stale)
{
	char ended[96] = "NULL";
	if (dur_us != NO_END)
		snprintf(ended, sizeof(ended), "t + %lld * interval "
			 "'1 microsecond'", (long long)(late_us + dur_us));
	sql("INSERT INTO due_attempt (task_id, attempt, worker, claimed_at,"
	    " due_at, ended_at, outcome, late_commit) SELECT %d, 1, 'w',"
	    " t + %lld * interval '1 microsecond', t, %s, '%s', %s FROM"
	    " (SELECT timestamptz '2026-01-01 00:00:00+00' AS t) x", id,
	    (long long)late_us, ended, outcome,
	    stale ? "'REJECTED_STALE'" : "NULL");
}

/* A finished try that ended `ago_ms` before the database's now. */
static void ended_row(int id, int64_t ago_ms, const char *outcome)
{
	sql("INSERT INTO due_attempt (task_id, attempt, worker, claimed_at,"
	    " due_at, ended_at, outcome) SELECT %d, 1, 'w', e - interval"
	    " '1 second', e - interval '1 second', e, '%s' FROM (SELECT now() -"
	    " %lld * interval '1 millisecond' AS e) x", id, outcome,
	    (long long)ago_ms);
}

static void near(double got, double want)
{
	double d = got - want;
	if (d > 1e-6 || d < -1e-6)
		fail_msg("got %.9f, want %.9f", got, want);
}

static void assert_buckets(const due_histogram *h, const int64_t *want)
{
	int64_t n = 0;
	for (int b = 0; b <= DUE_HIST_N; b++) {
		if (h->buckets[b] != want[b])
			fail_msg("bucket %d (<= %g ms): got %lld, want %lld", b,
				 b < DUE_HIST_N ? due_hist_bounds_ms[b] : 1e300,
				 (long long)h->buckets[b], (long long)want[b]);
		n += want[b];
	}
	assert_int_equal(h->count, n);
}

static void test_metrics_pg(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_metrics *m = NULL;
	due_cancel_outcome co;
	char a[64], b[64];

	/* an empty store: all zero */
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->n_kinds, 0);
	assert_int_equal(m->lateness.count + m->duration.count, 0);
	assert_int_equal(m->workers + m->claim_queries, 0);
	assert_int_equal(m->n_schedules, 0);
	for (int i = 0; i < DUE_OUT_COUNT; i++)
		assert_int_equal(m->outcomes[i], 0);
	due_metrics_free(m);

	/*
	** Histograms on the bucket bounds (1 2 5 ... 30000 ms, then +Inf):
	** a value equal to a bound is in that bound's bucket, one microsecond
	** more is in the next; negative values count in the first.
	*/
	attempt_row(1, -5000, NO_END, "RUNNING", false);
	attempt_row(2, 0, 1000, "DONE", false);
	attempt_row(3, 1000, 1001, "FAILED", true);
	attempt_row(4, 1001, 250000, "LEASE_EXPIRED", false);
	attempt_row(5, 2000, 30000000, "CANCELLED", false);
	attempt_row(6, 30000000, 30000001, "REQUEUED", true);
	attempt_row(7, 30000001, 0, "KILLED", false);
	attempt_row(8, 100000000, -3000, "DONE", false);
	assert_int_equal(due_metrics_get(db, &m), 0);
	int64_t late[DUE_HIST_N + 1] = {[0] = 3, [1] = 2, [13] = 1, [14] = 2};
	int64_t dur[DUE_HIST_N + 1] = {[0] = 3, [1] = 1, [7] = 1, [13] = 1,
				       [14] = 1};
	assert_buckets(&m->lateness, late);
	assert_buckets(&m->duration, dur);
	near(m->lateness.sum_ms, -5 + 0 + 1 + 1.001 + 2 + 30000 + 30000.001 +
				 100000);
	near(m->duration.sum_ms, 1 + 1.001 + 250 + 30000 + 30000.001 + 0 - 3);
	assert_int_equal(m->outcomes[DUE_OUT_RUNNING], 1);
	assert_int_equal(m->outcomes[DUE_OUT_DONE], 2);
	for (int i = DUE_OUT_FAILED; i <= DUE_OUT_KILLED; i++)
		assert_int_equal(m->outcomes[i], 1);
	assert_int_equal(m->outcomes[DUE_OUT_REJECTED_STALE], 2);
	for (int i = 0; i < 15; i++) /* all that long ago */
		assert_int_equal(m->done_per_min[i], 0);
	due_metrics_free(m);

	/* completions per minute of the last 15, latest first */
	sql("TRUNCATE due_attempt");
	ended_row(1, 30000, "DONE");
	ended_row(2, 90000, "DONE");
	ended_row(3, 100000, "DONE");
	ended_row(4, 870000, "DONE");      /* 14.5 min ago: the last minute */
	ended_row(5, 960000, "DONE");      /* 16 min ago: not counted */
	ended_row(6, 30000, "FAILED");     /* not a completion */
	ended_row(7, -60000, "DONE");      /* in the future: not counted */
	assert_int_equal(due_metrics_get(db, &m), 0);
	int64_t per_min[15] = {[0] = 1, [1] = 2, [14] = 1};
	for (int i = 0; i < 15; i++)
		if (m->done_per_min[i] != per_min[i])
			fail_msg("done_per_min[%d] = %lld, want %lld", i,
				 (long long)m->done_per_min[i],
				 (long long)per_min[i]);
	assert_int_equal(m->outcomes[DUE_OUT_DONE], 6);
	assert_int_equal(m->duration.buckets[9], 7); /* 1 s each */
	due_metrics_free(m);

	/* worker reports: upserted; only the last 5 minutes count */
	due_worker_stats w1 = {.claimed = 3, .done = 2, .failed = 1, .dead = 4,
			       .stale = 5, .cancelled = 6, .lease_lost = 7,
			       .claim_queries = 10, .empty_claims = 4,
			       .reclaim_queries = 2, .store_errors = 1};
	due_worker_stats w2 = {.claim_queries = 5, .empty_claims = 1,
			       .reclaim_queries = 3};
	due_worker_stats w3 = {.claim_queries = 1000, .store_errors = 1000};
	assert_int_equal(due_worker_report(db, "host-a:1", &w1), 0);
	assert_int_equal(due_worker_report(db, "host-b:2", &w2), 0);
	assert_int_equal(due_worker_report(db, "gone:3", &w3), 0);
	sql("UPDATE due_worker SET seen_at = now() - interval '6 minutes',"
	    " started_at = now() - interval '1 hour' WHERE owner = 'gone:3'");
	sql_text(a, sizeof(a), "SELECT started_at FROM due_worker WHERE "
		 "owner = 'host-a:1'");
	tu_sleep_ms(5);
	w1.claim_queries = 12;
	assert_int_equal(due_worker_report(db, "host-a:1", &w1), 0);
	assert_string_equal(sql_text(b, sizeof(b), "SELECT started_at FROM "
		"due_worker WHERE owner = 'host-a:1'"), a);
	assert_int_equal(sql_int("SELECT count(*) FROM due_worker WHERE owner = "
		"'host-a:1' AND seen_at > started_at"), 1);
	assert_string_equal(sql_text(b, sizeof(b), "SELECT concat_ws(' ', "
		"claimed, done, failed, dead, stale, cancelled, lease_lost, "
		"claim_queries, empty_claims, reclaim_queries, store_errors) "
		"FROM due_worker WHERE owner = 'host-a:1'"),
		"3 2 1 4 5 6 7 12 4 2 1");
	assert_int_equal(sql_int("SELECT count(*) FROM due_worker"), 3);

	/* tasks by kind and state, by name in byte order; schedules */
	add(db, "kb", LONG_LEASE, 5);
	add(db, "kb", LONG_LEASE, 5);
	due_id claimed = add(db, "KA", 0, 5);
	claim_one(db, claimed, LONG_LEASE);
	due_id gone = add(db, "ka", LONG_LEASE, 5);
	assert_int_equal(due_cancel(db, &co, gone), 0);
	due_cron_def d = cron_def("c1", "@hourly", "kb");
	assert_int_equal(due_cron_put(db, &d), 0);
	d.name = "c2";
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->workers, 2);
	assert_int_equal(m->claim_queries, 17);
	assert_int_equal(m->empty_claims, 5);
	assert_int_equal(m->reclaim_queries, 5);
	assert_int_equal(m->store_errors, 1);
	assert_int_equal(m->n_schedules, 2);
	assert_int_equal(m->n_kinds, 3);
	assert_string_equal(m->kinds[0].kind, "KA");
	assert_string_equal(m->kinds[1].kind, "ka");
	assert_string_equal(m->kinds[2].kind, "kb");
	int64_t want[3][DUE_STATE_COUNT] = {{0, 1, 0, 0, 0}, {0, 0, 0, 1, 0},
					    {2, 0, 0, 0, 0}};
	for (int k = 0; k < 3; k++)
		for (int st = 0; st < DUE_STATE_COUNT; st++)
			assert_int_equal(m->kinds[k].counts[st], want[k][st]);
	/* the core's stats are left as the core filled them */
	assert_int_equal(m->stats.counts[DUE_SCHEDULED], 2);
	assert_int_equal(m->stats.counts[DUE_CLAIMED], 1);
	assert_true(m->stats.now > 0);
	due_metrics_free(m);

	/* at most 1000 kinds: the first by name */
	sql("INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"
	    " backoff_us, backoff_cap_us, created_at, updated_at) SELECT 'z' ||"
	    " lpad(g::text, 4, '0'), '', 'DONE', now(), 1, 0, 0, now(), now()"
	    " FROM generate_series(1, 1005) g");
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->n_kinds, 1000);
	assert_string_equal(m->kinds[0].kind, "KA");
	assert_string_equal(m->kinds[999].kind, "z0997");
	assert_int_equal(m->kinds[999].counts[DUE_DONE], 1);
	due_metrics_free(m);
	due_close(db);
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
		 "CASCADE; CREATE SCHEMA %s", schema, schema);
	PGresult *r = PQexec(c, sqlbuf);
	rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
	if (rc < 0)
		fprintf(stderr, "FAIL: %s", PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
	o.create = true;
	if (rc == 0 && due_open(&db, url, &o) < 0) {
		fprintf(stderr, "FAIL: due init %s: %s\n", url, due_error_last());
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
	snprintf(sqlbuf, sizeof(sqlbuf), "SET client_min_messages = warning; "
		 "DROP SCHEMA IF EXISTS %s, %s_init, %s_v1 CASCADE", schema, schema,
		 schema);
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
		T(test_concurrent_init_and_schema_checks),
		T(test_schema_constraints),
		T(test_claim_plan_uses_partial_index),
		T(test_backoff_function_matches_core),
		T(test_happy_path_binary),
		T(test_claim_kinds_and_id),
		T(test_stale_after_reclaim),
		T(test_cancel_outcomes),
		T(test_backoff_and_dead),
		T(test_reclaim_paths),
		T(test_operator),
		T(test_idempotent_key),
		T(test_batch_schedule),
		T(test_tx_submit_and_notify),
		T(test_complete_hook),
		T(test_complete_batch),
		T(test_three_processes_claim),
		T(test_due_vs_cancel_race),
		T(test_reconnect),
		T(test_list_stats_prune),
		T(test_schema_upgrade_from_v1),
		T(test_cron_definitions_pg),
		T(test_cron_fire_exact_and_notify),
		T(test_cron_fire_finds_live_task),
		T(test_cron_fire_sees_concurrent_live_task),
		T(test_cron_missed_accumulate),
		T(test_cron_two_schedulers_once_per_slot),
		T(test_metrics_pg),
#undef T
	};
	int failed;

	if (make_run_schema() < 0) {
		drop_run_schema();
		return 1;
	}
	failed = cmocka_run_group_tests_name("postgres store", tests, NULL, NULL);
	drop_run_schema();
	return failed ? 1 : 0;
}
#endif /* DUE_WITH_PG */

int main(void)
{
	if (tu_select_backend("postgres") != 0)
		return tu_backend_check();
#ifdef DUE_WITH_PG
	return run_pg_suite();
#else
	return 1;
#endif
}
