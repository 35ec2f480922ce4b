/*
** test_store.c - the store conformance suite: every transition of
** CONTRACT §2 and every refusal, through the public API, against a real
** store.  Each test gets a fresh store.  The suite runs on SQLite always,
** and on PostgreSQL too when DUE_TEST_PG_URL names a database (each test
** then works in its own schema, see tu_fresh_store()).  What only one
** backend has (SQLite's caller transactions here; PostgreSQL's server
** restarts, concurrent init, upgrades and wire behaviour in
** test_pg_store.c) is tested where that backend is.
**
** A few checks need what the API does not show or cannot write: audit
** rows, history dated in the past, CHECK constraints.  They go through
** sql() and friends on the test's own store, through the store's own raw
** SQL session (its admin group); the SQL stores differ only in how a time
** is written, which TS() and US() say once (int_times() asks the schema).
** A store without SQL has its own versions of those few statements
** (Redis's are in tu_redis.h, chosen by is_redis()).
** Where the statement only reads what the API shows, every store goes
** through the API instead.
**
** No timing assumptions.  Waits are for conditions, each with a deadline
** of HANG_MS that only guards against a hang; "not before due" is judged
** by the store's clock read after a claim (a claim that returned a task
** was made at or after its due time, so a clock read after it is too);
** "later" is the store's clock seen past a time, never a sleep.
*/
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
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

#include "core/admin.h"	   /* due__sql_*: raw SQL on the test's store */
#include "core/internal.h" /* due__prune_max, due__lock_take */
#include "due.h"
#include "store/sqlite_conn.h" /* due__sq_read_sql */
#include "store/store.h"       /* DUE_METRICS_WINDOW_US */
#define TU_FIXTURE	       /* setup, teardown, open_db, url, dir */
#define TU_TASKS	       /* add, claim_one, get, state_of */
#include "test_util.h"

#define LONG_LEASE 60000000LL
#define HOUR 3600000000LL
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
/* Direct SQL on this test's store                                     */
/* ------------------------------------------------------------------ */

static bool on_sqlite(void) { return strncmp(url, "sqlite:", 7) == 0; }
static int sql_try(char *val, size_t n, const char *fmt, ...);
/*
** Whether the store keeps times as integer microseconds (SQLite, MySQL)
** rather than as a timestamp type (PostgreSQL's timestamptz): asked of
** the schema, which compares due_at with an integer only in the first
** case.  Once per store.
*/
static bool int_times(void)
{
	static char asked[512];
	static bool answer;
	char err[256];

	if (strcmp(asked, url) != 0) {
		answer =
		    sql_try(err, sizeof(err),
			    "SELECT count(*) FROM due_task WHERE due_at < 0") ==
		    0;
		snprintf(asked, sizeof(asked), "%s", url);
	}
	return answer;
}

/* A few rotating buffers, so that one statement can hold several. */
static char *scratch(void)
{
	static char pool[16][112];
	static unsigned k;
	return pool[k++ % 16];
}

/* A time as an SQL literal: SQLite keeps microseconds, PostgreSQL a
   timestamptz. */
static const char *TS(due_time t)
{
	char *b = scratch();
	if (int_times())
		snprintf(b, 112, "%lld", (long long)t);
	else
		snprintf(b, 112,
			 "(timestamptz 'epoch' + %lld * interval "
			 "'1 microsecond')",
			 (long long)t);
	return b;
}

/* A time column read as microseconds. */
static const char *US(const char *col)
{
	char *b = scratch();
	if (int_times())
		snprintf(b, 112, "%s", col);
	else
		snprintf(b, 112, "(extract(epoch FROM %s) * 1000000)::int8",
			 col);
	return b;
}

/*
** Run one statement on this test's store, through the store's own raw SQL
** session (its admin group: core/admin.h), so no backend is named here.
** 0 with the first column of the first row in val ("" for none), or -1
** with the error.
*/
static int sql_vtry(char *val, size_t n, const char *fmt, va_list ap)
{
	char q[4096];
	due__sql *ses = NULL;
	int64_t v = 0;
	int rc;

	vsnprintf(q, sizeof(q), fmt, ap);
	val[0] = '\0';
	rc = due__sql_open(&ses, url);
	if (rc == DUE_EUNSUPPORTED)
		fail_msg("no SQL on %s: give it its own version (as Redis's in "
			 "tu_redis.h)",
			 url);
	if (rc == 0)
		rc = due__sql_exec(ses, q, 0, 0, 0, NULL, &v, 1);
	if (rc < 0)
		snprintf(val, n, "%s", due_error_last());
	else if (rc > 0)
		snprintf(val, n, "%lld", (long long)v);
	due__sql_close(ses);
	return rc < 0 ? -1 : 0;
}

static int sql_try(char *val, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = sql_vtry(val, n, fmt, ap);
	va_end(ap);
	return rc;
}

/* The first column as an integer, -1 for NULL or no row. */
static int64_t sql_int(const char *fmt, ...)
{
	char val[512];
	va_list ap;
	va_start(ap, fmt);
	int rc = sql_vtry(val, sizeof(val), fmt, ap);
	va_end(ap);
	if (rc < 0)
		fail_msg("%s: %s", fmt, val);
	return val[0] ? strtoll(val, NULL, 10) : -1;
}

#define sql(...) ((void)sql_int(__VA_ARGS__))

/*
** Redis has no SQL: its versions of the statements above are tu_redis.h's
** raw commands on this test's key prefix.  RD() keeps them out of a build
** without the backend, where is_redis() is never true.
*/
static bool is_redis(void) { return strncmp(url, "redis", 5) == 0; }
#ifdef DUE_WITH_REDIS
#define RD(x) (x)
#else
#define RD(x) (0)
#endif

/* Audit entries of task id (0: of every task) with this action and, when
   not NULL, this detail. */
static int64_t audit_count(due_id id, const char *action, const char *detail)
{
	char w[160] = "";
	if (is_redis())
		return RD(tu_rd_audit_count(id, action, detail));
	if (id)
		snprintf(w, sizeof(w), " AND task_id = %lld", (long long)id);
	if (detail)
		snprintf(w + strlen(w), sizeof(w) - strlen(w),
			 " AND detail = '%s'", detail);
	return sql_int("SELECT count(*) FROM due_audit WHERE action = '%s'%s",
		       action, w);
}

/* Every schedule's next slot set to `slot` (the scheduler's state). */
static void set_next_slots(due_db *db, due_time slot)
{
	if (!is_redis()) {
		sql("UPDATE due_schedule SET next_slot = %s", TS(slot));
		return;
	}
	due_cron_info_list *l = NULL;
	assert_int_equal(due_cron_list(db, &l), 0);
	for (size_t i = 0; i < l->count; i++)
		assert_int_equal(RD(tu_rd("HSET %s next_slot %lld",
					  tu_rd_key("c:%s", l->items[i].name),
					  (long long)slot)),
				 0);
	due_cron_info_list_free(l);
}

/* The stored schema version set to v. */
static void set_schema_version(int v)
{
	if (is_redis())
		(void)RD(
		    tu_rd("HSET %s schema_version %d", tu_rd_key("meta"), v));
	else
		sql("UPDATE due_meta SET value = '%d' WHERE name = "
		    "'schema_version'",
		    v);
}

/* Through the API: every try of every task (tries), the tasks at
   attempt 1 (first), and the distinct workers that made a try. */
static void tries_of(due_db *db, int64_t *tries, int64_t *first,
		     int64_t *workers)
{
	due_list_opts o = DUE_LIST_OPTS_INIT;
	char seen[16][64];
	int ns = 0;

	*tries = *first = *workers = 0;
	o.limit = 10000;
	o.attempts = true;
	for (;;) {
		due_task_list *l = NULL;
		assert_int_equal(due_list(db, &l, &o), 0);
		for (size_t i = 0; i < l->count; i++) {
			const due_task *t = &l->items[i];
			*tries += (int64_t)t->n_attempts;
			*first += t->attempt == 1;
			for (size_t a = 0; a < t->n_attempts; a++) {
				int k = 0;
				while (k < ns &&
				       strcmp(seen[k], t->attempts[a].worker))
					k++;
				if (k == ns && ns < 16)
					snprintf(seen[ns++], 64, "%s",
						 t->attempts[a].worker);
			}
			o.after = t->id;
		}
		size_t n = l->count;
		due_task_list_free(l);
		if (n < 10000)
			break;
	}
	*workers = ns;
}

/* ------------------------------------------------------------------ */
/* Waiting for conditions                                              */
/* ------------------------------------------------------------------ */

/* Reclaim until the lease of `id` has been taken back; the sums of what
   the passes reported go to sum. */
static void wait_reclaim(due_db *db, due_id id, due_reclaimed *sum)
{
	int64_t end = mono_ms() + HANG_MS;
	memset(sum, 0, sizeof(*sum));
	for (;;) {
		due_reclaimed r;
		assert_int_equal(due_reclaim_expired(db, &r), 0);
		sum->rescheduled += r.rescheduled;
		sum->dead += r.dead;
		sum->cancelled += r.cancelled;
		if (state_of(db, id) != DUE_CLAIMED)
			return;
		if (mono_ms() > end)
			fail_msg("lease of task %lld was never reclaimed",
				 (long long)id);
		tu_sleep_ms(1);
	}
}

/* Wait until the store's clock is past t. */
static void wait_store_past(due_db *db, due_time t)
{
	int64_t end = mono_ms() + HANG_MS;
	due_time now;
	for (;;) {
		assert_int_equal(due_now(db, &now), 0);
		if (now > t)
			return;
		if (mono_ms() > end)
			fail_msg("the store's clock never passed %lld",
				 (long long)t);
		tu_sleep_ms(1);
	}
}

/*
** Claim (polling, one at a time) until `id` is handed out; returns it.
** The claim that returns it is checked against the store's clock read
** just after: the claim came first, so that clock is at or past due_at.
** early counts the empty claims made while the task was not yet due.
*/
static due_task_list *claim_when_due(due_db *db, due_id id, due_time due_at,
				     int *early)
{
	int64_t end = mono_ms() + HANG_MS;
	*early = 0;
	for (;;) {
		due_task_list *l = NULL;
		due_time after;
		assert_int_equal(due_claim(db, &l, "w", NULL, 0, 1, LONG_LEASE),
				 0);
		assert_int_equal(due_now(db, &after), 0);
		if (l->count) {
			assert_int_equal(l->items[0].id, id);
			assert_true(after >= due_at);
			assert_true(l->items[0].due_at == due_at);
			return l;
		}
		due_task_list_free(l);
		*early += after < due_at;
		if (mono_ms() > end)
			fail_msg("task %lld never became claimable",
				 (long long)id);
		tu_sleep_ms(1);
	}
}

/* Tasks in the store, in any state. */
static int64_t task_count(due_db *db)
{
	due_stats st;
	int64_t n = 0;
	assert_int_equal(due_stats_get(db, &st), 0);
	for (int i = 0; i < DUE_STATE_COUNT; i++)
		n += st.counts[i];
	return n;
}

/* ------------------------------------------------------------------ */
/* Claims and the worker's transitions                                 */
/* ------------------------------------------------------------------ */

static void test_happy_path(void **state)
{
	(void)state;
	due_db *db = open_db();
	const unsigned char payload[] = {0, 1, 2, 0xff, 0, 'x'};
	const unsigned char result[] = {'r', 0, 0x80, 0};
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	due_task_list *l = NULL;
	due_complete_outcome co;
	due_time now;

	/* the store's clock is the host's, give or take a minute */
	assert_int_equal(due_now(db, &now), 0);
	assert_true(llabs(now - due_time_now_host()) < 60000000);
	assert_int_equal(
	    due_schedule(db, &s, "email", payload, sizeof(payload), NULL), 0);
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
	assert_int_equal(c->backoff_cap_us, HOUR);
	due_task_list_free(l);

	assert_int_equal(due_complete(db, &co, s.id, 1, result, sizeof(result)),
			 0);
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
	o.at = now + HOUR + 123457;
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

static void test_not_before_due(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id id = add(db, "k", 300000, 5);
	due_id later = add(db, "k", HOUR, 5);
	int early;

	due_task *t = get(db, id);
	due_time due_at = t->due_at;
	due_task_free(t);
	due_task_list *l = claim_when_due(db, id, due_at, &early);
	printf("not before due: %d empty claims before the due time\n", early);
	due_task_list_free(l);
	t = get(db, id);
	assert_true(t->attempts[0].claimed_at >= t->due_at);
	due_task_free(t);
	/* the one due in an hour was never handed out */
	assert_int_equal(state_of(db, later), DUE_SCHEDULED);
	due_close(db);
}

static void test_claim_limit_and_kinds(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_task_list *l = NULL;
	const char *kinds[] = {"b", "c"};
	due_claim_opts co = DUE_CLAIM_OPTS_INIT;

	for (int i = 0; i < 25; i++)
		add(db, "a", 0, 5);
	due_id b = add(db, "b", 0, 5);
	due_id c = add(db, "c", 0, 5);
	due_id d = add(db, "d", 0, 5);
	/* only the kinds asked for, in due order */
	assert_int_equal(due_claim(db, &l, "w", kinds, 2, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 2);
	assert_int_equal(l->items[0].id, b);
	assert_int_equal(l->items[1].id, c);
	due_task_list_free(l);
	/* every kind but the ones named */
	co.owner = "w";
	co.kinds = (const char *const[]){"a"};
	co.n_kinds = 1;
	co.exclude_kinds = true;
	co.limit = 10;
	assert_int_equal(due_claim_ex(db, &l, &co), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, d);
	due_task_list_free(l);
	/* the limit holds */
	int sizes[4];
	for (int i = 0; i < 4; i++) {
		assert_int_equal(
		    due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
		sizes[i] = (int)l->count;
		due_task_list_free(l);
	}
	assert_int_equal(sizes[0], 10);
	assert_int_equal(sizes[1], 10);
	assert_int_equal(sizes[2], 5);
	assert_int_equal(sizes[3], 0);
	due_close(db);
}

static void test_claim_id(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id now_id = add(db, "k", 0, 5), later = add(db, "k", 60000000, 5);
	due_task *t = NULL;

	assert_int_equal(due_claim_id(db, &t, later, "imm", LONG_LEASE),
			 DUE_EBUSY);
	assert_int_equal(due_claim_id(db, &t, now_id, "imm", LONG_LEASE), 0);
	assert_int_equal(t->attempt, 1);
	assert_string_equal(t->lease_owner, "imm");
	due_task_free(t);
	assert_int_equal(due_claim_id(db, &t, now_id, "w2", LONG_LEASE),
			 DUE_EBUSY);
	assert_int_equal(due_claim_id(db, &t, 99999999, "imm", LONG_LEASE),
			 DUE_EBUSY);
	/* only the claim that succeeded left an attempt */
	int64_t tries, first, workers;
	tries_of(db, &tries, &first, &workers);
	assert_int_equal(tries, 1);
	assert_int_equal(first, 1);
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
	/* stale after the reclaim, while SCHEDULED: refused, nothing moves */
	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	due_time before = t->updated_at;
	due_task_free(t);
	assert_int_equal(due_complete(db, &co, id, 1, "late", 4), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(due_fail(db, &fo, id, 1, "late"), 0);
	assert_int_equal(fo, DUE_FAIL_REJECTED_STALE);
	assert_int_equal(due_extend(db, &eo, id, 1, LONG_LEASE), 0);
	assert_int_equal(eo, DUE_EXTEND_LOST);
	t = get(db, id);
	assert_int_equal(t->updated_at, before);
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

	/* the holder extends (once the store's clock has moved on, the
	   lease moves with it) and completes */
	wait_store_past(db, lease - LONG_LEASE);
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

/*
** A lease that has lapsed by the store's clock cannot be extended, even
** before any reclaim: a running limit stops counting it at once, so its
** slot may already be another try's.  The refusal writes nothing: the
** try stays CLAIMED at its old lease until the reclaim, and its holder
** may still end it (fail: the worker's answer after its handler stopped).
*/
static void test_extend_lapsed(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id id = add(db, "k", 0, 5);
	due_extend_outcome eo;
	due_fail_outcome fo;

	/* a long lease first, so that a slow machine (valgrind) still
	   extends it while live: to 300 ms from the store's now */
	assert_int_equal(claim_one(db, id, LONG_LEASE), 1);
	assert_int_equal(due_extend(db, &eo, id, 1, 300000), 0);
	assert_int_equal(eo, DUE_EXTEND_OK);
	due_task *t = get(db, id);
	due_time lease = t->lease_until, upd = t->updated_at;
	due_task_free(t);
	wait_store_past(db, lease);
	assert_int_equal(due_extend(db, &eo, id, 1, LONG_LEASE), 0);
	assert_int_equal(eo, DUE_EXTEND_LOST);
	t = get(db, id);
	assert_int_equal(t->state, DUE_CLAIMED);
	assert_int_equal(t->attempt, 1);
	assert_int_equal(t->lease_until, lease);
	assert_int_equal(t->updated_at, upd);
	due_task_free(t);
	assert_int_equal(due_fail(db, &fo, id, 1, "stopped: lease lost"), 0);
	assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
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

	claim_one(db, id, LONG_LEASE);
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
	/* base 100 ms doubling, capped at 250 ms */
	const int64_t expect[] = {100000, 200000, 250000};
	due_time due_at;
	int early;

	assert_int_equal(due_backoff_us(1000000, HOUR, 1), 1000000);
	assert_int_equal(due_backoff_us(1000000, HOUR, 3), 4000000);
	assert_int_equal(due_backoff_us(1000000, HOUR, 40), HOUR);
	assert_int_equal(due_backoff_us(INT64_MAX / 2, INT64_MAX, 5),
			 INT64_MAX);

	o.max_attempts = 4;
	o.backoff_us = 100000;
	o.backoff_cap_us = 250000;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	due_task *t = get(db, s.id);
	due_at = t->due_at;
	due_task_free(t);
	for (int a = 1; a <= 4; a++) {
		const char *err = a < 4 ? "boom" : "final";
		due_task_list *l = claim_when_due(db, s.id, due_at, &early);
		assert_int_equal(l->items[0].attempt, a);
		due_task_list_free(l);
		assert_int_equal(due_fail(db, &fo, s.id, a, err), 0);
		t = get(db, s.id);
		due_attempt *at = &t->attempts[a - 1];
		assert_true(at->claimed_at >= at->due_at); /* never early */
		assert_string_equal(at->outcome, "FAILED");
		assert_string_equal(at->error, err);
		assert_string_equal(t->last_error, err);
		if (a < 4) {
			assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
			assert_int_equal(t->state, DUE_SCHEDULED);
			/* due = failure time + min(base * 2^(a-1), cap) */
			assert_int_equal(t->due_at - t->updated_at,
					 expect[a - 1]);
			assert_int_equal(t->due_at - at->ended_at,
					 expect[a - 1]);
			due_at = t->due_at;
		} else {
			assert_int_equal(fo, DUE_FAIL_DEAD);
			assert_int_equal(t->state, DUE_DEAD);
		}
		due_task_free(t);
	}
	t = get(db, s.id);
	assert_int_equal(t->n_attempts, 4);
	for (size_t i = 1; i < t->n_attempts; i++)
		assert_true(t->attempts[i].claimed_at -
				t->attempts[i - 1].ended_at >=
			    expect[i - 1]);
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
	assert_int_equal(l->count, 1);
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
	bool up;

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
	assert_int_equal(audit_count(id, "retry", NULL), 1);

	/* kill dismisses a dead letter: CANCELLED, health no longer DOWN */
	assert_int_equal(due_health(db, &up, NULL), 0);
	assert_false(up);
	assert_int_equal(due_kill(db, &final, id), 0);
	assert_int_equal(final, DUE_CANCELLED);
	assert_int_equal(due_health(db, &up, NULL), 0);
	assert_true(up);
	due_task *t = get(db, id);
	assert_non_null(strstr(t->last_error, "dismissed"));
	assert_string_equal(t->attempts[1].outcome,
			    "FAILED"); /* history kept */
	due_task_free(t);
	assert_int_equal(due_kill(db, NULL, id), DUE_ESTATE);
	assert_int_equal(due_retry(db, id), DUE_ESTATE);

	/* requeue: CLAIMED -> SCHEDULED, old holder fenced */
	due_id rq = add(db, "k", 0, 5);
	claim_one(db, rq, LONG_LEASE);
	assert_int_equal(due_requeue(db, rq), 0);
	assert_int_equal(state_of(db, rq), DUE_SCHEDULED);
	assert_int_equal(due_complete(db, &co, rq, 1, "old", 3), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	t = get(db, rq);
	assert_string_equal(t->attempts[0].outcome, "REQUEUED");
	assert_string_equal(t->attempts[0].late_commit, "REJECTED_STALE");
	assert_false(t->has_result);
	assert_null(t->lease_owner);
	due_task_free(t);
	assert_int_equal(due_requeue(db, rq), DUE_ESTATE);
	assert_int_equal(audit_count(rq, "requeue", "SCHEDULED"), 1);

	/* kill: waiting and running tasks end DEAD; the holder is fenced */
	due_id kw = add(db, "k", 60000000, 5);
	assert_int_equal(due_kill(db, &final, kw), 0);
	assert_int_equal(final, DUE_DEAD);
	/* a second kill dismisses the dead letter; a third is refused */
	assert_int_equal(due_kill(db, &final, kw), 0);
	assert_int_equal(final, DUE_CANCELLED);
	assert_int_equal(due_kill(db, &final, kw), DUE_ESTATE);
	assert_int_equal(claim_one(db, rq, LONG_LEASE), 2);
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
	/* 3 kills and 2 dismissals, each audited */
	assert_int_equal(audit_count(0, "kill", NULL), 5);

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
	/* same key, other kind: a different task */
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
	due_submit items[4] = {{"close", "", 0, k2},
			       {"close", "", 0, k1},
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
	assert_int_equal(task_count(db), 5);
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
		o.delay_us = HOUR;
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

/*
** due_store_work_read: an unknown version is refused; on SQLite a submit
** counts its statements (BEGIN, INSERT, COMMIT: no other) and its one
** row, the next use of those statements their VM steps; a keyed submit
** that finds the live task writes no row.  The other stores count
** nothing yet (due.h).
*/
static void test_store_work(void **state)
{
	(void)state;
	due_store_work w0 = {0}, w1, w2;
	due_schedule_opts k = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	assert_int_equal(due_store_work_read(&w0), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "version 0"));
	assert_int_equal(due_store_work_read(NULL), DUE_EINVAL);
	if (!on_sqlite())
		return;
	due_db *db = open_db();
	w0.version = w1.version = w2.version = DUE_STORE_WORK_VERSION;
	assert_int_equal(due_store_work_read(&w0), 0);
	add(db, "k", 0, 5);
	assert_int_equal(due_store_work_read(&w1), 0);
	assert_int_equal(w1.statements - w0.statements, 3);
	assert_int_equal(w1.rows_written - w0.rows_written, 1);
	add(db, "k", 0, 5);
	assert_int_equal(due_store_work_read(&w2), 0);
	assert_int_equal(w2.rows_written - w1.rows_written, 1);
	assert_true(w2.vm_steps - w1.vm_steps >= 10); /* the first's INSERT */

	k.key = "once";
	assert_int_equal(due_schedule(db, &s, "k", "p", 1, &k), 0);
	assert_false(s.existed);
	assert_int_equal(due_store_work_read(&w1), 0);
	assert_int_equal(due_schedule(db, &s, "k", "p", 1, &k), 0);
	assert_true(s.existed);
	assert_int_equal(due_store_work_read(&w2), 0);
	assert_int_equal(w2.rows_written - w1.rows_written, 0);
	assert_int_equal(w2.statements - w1.statements, 4); /* + the find */
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
	due_stats st;

	/* all or nothing: a bad item 2 writes none, and is named */
	due_submit three[3] = {
	    {"a", "", 0, DUE_SCHEDULE_OPTS_INIT},
	    {"bad kind!", "", 0, DUE_SCHEDULE_OPTS_INIT},
	    {"c", "", 0, DUE_SCHEDULE_OPTS_INIT},
	};
	assert_int_equal(due_schedule_batch(db, out, three, 3), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "item 2"));
	assert_int_equal(task_count(db), 0);

	/* a large one: ids in item order, each item's own fields */
	later.delay_us = HOUR;
	later.max_attempts = 7;
	for (int i = 0; i < N; i++) {
		snprintf(kinds[i], sizeof(kinds[i]), "k%d", i % 7);
		items[i] = (due_submit){
		    kinds[i], kinds[i], strlen(kinds[i]),
		    i % 2 ? later : (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT};
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
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], N);
	assert_int_equal(st.due_unclaimed, N / 2);
	due_close(db);
}

static void test_bad_input_changes_nothing(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
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
	assert_int_equal(due_claim(db, &l, "", NULL, 0, 1, 1000000),
			 DUE_EINVAL);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 0, 1000000),
			 DUE_EINVAL);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 1, 0), DUE_EINVAL);
	assert_int_equal(task_count(db), 0);
	free(p);
	due_close(db);
}

static int hook_insert(void *conn, const due_task *task, void *payload)
{
	char q[128];
	int *fail = payload;
	if (*fail)
		return 1;
	snprintf(q, sizeof(q), "INSERT INTO effect VALUES (%lld, %d)",
		 (long long)task->id, task->attempt);
	return sqlite3_exec(conn, q, NULL, NULL, NULL) == SQLITE_OK ? 0 : 1;
}

static int count_rows(sqlite3 *c, const char *q)
{
	sqlite3_stmt *st;
	int n = -1;
	if (sqlite3_prepare_v2(c, q, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return n;
}

static void test_sqlite_transactions(void **state)
{
	(void)state;
	if (!on_sqlite())
		return; /* test_pg_store.c has PostgreSQL's (its own connection
			   type) */
	sqlite3 *c;
	due_submitted s;
	due_complete_outcome co;
	assert_int_equal(sqlite3_open(url + 7, &c), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(c,
			 "CREATE TABLE orders (id INTEGER);"
			 "CREATE TABLE effect (task INTEGER PRIMARY KEY,"
			 " attempt INTEGER)",
			 NULL, NULL, NULL),
	    SQLITE_OK);
	/* without a transaction: refused */
	assert_int_equal(due_schedule_sqlite_tx(c, &s, "k", "", 0, NULL),
			 DUE_EINVAL);
	/* rolled back with the caller's rows */
	sqlite3_exec(c, "BEGIN IMMEDIATE; INSERT INTO orders VALUES (1)", NULL,
		     NULL, NULL);
	assert_int_equal(due_schedule_sqlite_tx(c, &s, "close", "o1", 2, NULL),
			 0);
	sqlite3_exec(c, "ROLLBACK", NULL, NULL, NULL);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM due_task"), 0);
	/* committed with them */
	sqlite3_exec(c, "BEGIN IMMEDIATE; INSERT INTO orders VALUES (2)", NULL,
		     NULL, NULL);
	assert_int_equal(due_schedule_sqlite_tx(c, &s, "close", "o2", 2, NULL),
			 0);
	sqlite3_exec(c, "COMMIT", NULL, NULL, NULL);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM due_task"), 1);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM orders"), 1);

	/* completion hook: rows commit with DONE, or everything rolls back */
	due_db *db = open_db();
	int fail = 1;
	claim_one(db, s.id, LONG_LEASE);
	assert_int_equal(
	    due_complete_tx(db, &co, s.id, 1, "r", 1, hook_insert, &fail),
	    DUE_ERROR);
	assert_int_equal(state_of(db, s.id), DUE_CLAIMED);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM effect"), 0);
	fail = 0;
	assert_int_equal(
	    due_complete_tx(db, &co, s.id, 1, "r", 1, hook_insert, &fail), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM effect"), 1);
	/* a late duplicate completion writes no second effect */
	assert_int_equal(
	    due_complete_tx(db, &co, s.id, 1, "r", 1, hook_insert, &fail), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(count_rows(c, "SELECT count(*) FROM effect"), 1);
	due_close(db);
	sqlite3_close(c);
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
	/* each item on its own: done, stale token, cancelled, an empty
	   result, and a repeat of the first within the same batch */
	due_completion items[5] = {{a, 1, "ra", 2, 0},
				   {b, 7, "rb", 2, 0},
				   {c, 1, "rc", 2, 0},
				   {d, 1, NULL, 0, 0},
				   {a, 1, "again", 5, 0}};
	assert_int_equal(due_complete_batch(db, items, 5), 0);
	assert_int_equal(items[0].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(items[1].outcome, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(items[2].outcome,
			 DUE_COMPLETE_CANCELLED_BEFORE_COMMIT);
	assert_int_equal(items[3].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(items[4].outcome, DUE_COMPLETE_REJECTED_STALE);
	due_task *t = get(db, a);
	assert_int_equal(t->state, DUE_DONE);
	assert_memory_equal(t->result, "ra", 2);
	/* the repeat is a late commit of that try, marked on it */
	assert_int_equal(t->n_attempts, 1);
	assert_non_null(t->attempts[0].late_commit);
	assert_string_equal(t->attempts[0].late_commit, "REJECTED_STALE");
	due_task_free(t);
	t = get(db, d);
	assert_true(t->has_result);
	assert_int_equal(t->result_len, 0);
	due_task_free(t);
	assert_int_equal(state_of(db, b), DUE_CLAIMED);
	assert_int_equal(state_of(db, c), DUE_CANCELLED);
	due_close(db);
}

/* Claim every due task as worker "w": there must be n. */
static void claim_all(due_db *db, size_t n)
{
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, n);
	due_task_list_free(l);
}

/*
** The worker's path, due_complete_and_claim: every completion fenced on
** its own with its own outcome, as due_complete_batch (SQLite writes a
** clean batch in two statements, others item by item: the outcomes,
** results and histories must not tell which).  20 tries with distinct
** results (more than one SQLite chunk of 16; one with a NUL inside, one
** empty); a batch with a cancel asked among clean tries; one with a stale
** token; the mixed batch of test_complete_batch.  Each then claims.
*/
static void test_complete_and_claim_batch(void **state)
{
	(void)state;
	enum { N = 20 };
	due_db *db = open_db();
	due_claim_opts co = DUE_CLAIM_OPTS_INIT;
	due_task_list *l = NULL;
	due_cancel_outcome cco;
	due_completion items[N];
	char res[N][16];
	size_t rl[N];
	due_id ids[N];
	due_task *t;

	co.owner = "w";
	co.limit = N;
	co.lease_us = LONG_LEASE;
	for (int i = 0; i < N; i++)
		ids[i] = add(db, "k", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, N, LONG_LEASE), 0);
	assert_int_equal(l->count, N);
	due_task_list_free(l);
	for (int i = 0; i < N; i++) {
		rl[i] = (size_t)snprintf(res[i], sizeof(res[i]), "r%d", i);
		items[i] = (due_completion){ids[i], 1, res[i], rl[i], 0};
	}
	items[3].result = "a\0b";
	items[3].result_len = rl[3] = 3;
	items[5].result = NULL;
	items[5].result_len = rl[5] = 0;
	due_id next = add(db, "k", 0, 5);
	/* (the 20 were claimed in one batch: more than SQLite's per-row
	   claims) */
	assert_int_equal(due_complete_and_claim(db, items, N, &co, &l), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, next);
	due_task_list_free(l);
	for (int i = 0; i < N; i++) {
		assert_int_equal(items[i].outcome, DUE_COMPLETE_DONE);
		t = get(db, ids[i]);
		assert_int_equal(t->state, DUE_DONE);
		assert_null(t->lease_owner);
		assert_true(t->has_result);
		assert_int_equal(t->result_len, rl[i]);
		if (rl[i])
			assert_memory_equal(t->result, items[i].result, rl[i]);
		assert_int_equal(t->n_attempts, 1);
		assert_string_equal(t->attempts[0].outcome, "DONE");
		assert_string_equal(t->attempts[0].worker, "w");
		due_task_free(t);
	}

	/* a cancel asked among clean tries: that one ends CANCELLED */
	due_id a = add(db, "k", 0, 5), b = add(db, "k", 0, 5),
	       c = add(db, "k", 0, 5), c2 = add(db, "k", 0, 5);
	claim_all(db, 4);
	assert_int_equal(due_cancel(db, &cco, b), 0);
	due_completion four[4] = {{a, 1, "ra", 2, 0},
				  {b, 1, "rb", 2, 0},
				  {c, 1, "rc", 2, 0},
				  {c2, 1, "rc2", 3, 0}};
	co.limit = 1; /* nothing else is due: it claims none */
	assert_int_equal(due_complete_and_claim(db, four, 4, &co, &l), 0);
	assert_int_equal(l->count, 0);
	due_task_list_free(l);
	assert_int_equal(four[0].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(four[1].outcome, DUE_COMPLETE_CANCELLED_BEFORE_COMMIT);
	assert_int_equal(four[2].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(four[3].outcome, DUE_COMPLETE_DONE);
	t = get(db, b);
	assert_int_equal(t->state, DUE_CANCELLED);
	assert_false(t->has_result);
	assert_int_equal(t->n_attempts, 1);
	assert_string_equal(t->attempts[0].outcome, "CANCELLED");
	due_task_free(t);
	t = get(db, c);
	assert_memory_equal(t->result, "rc", 2);
	due_task_free(t);

	/* a stale token beside clean tries: one attempt row each */
	due_id d = add(db, "k", 0, 5), e = add(db, "k", 0, 5),
	       d2 = add(db, "k", 0, 5), d3 = add(db, "k", 0, 5);
	claim_all(db, 4);
	due_completion stale[4] = {{d, 1, "rd", 2, 0},
				   {e, 9, "re", 2, 0},
				   {d2, 1, "rd2", 3, 0},
				   {d3, 1, "rd3", 3, 0}};
	assert_int_equal(due_complete_and_claim(db, stale, 4, &co, &l), 0);
	due_task_list_free(l);
	assert_int_equal(stale[0].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(stale[1].outcome, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(stale[2].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(stale[3].outcome, DUE_COMPLETE_DONE);
	for (int i = 0; i < 4; i += 2) {
		t = get(db, i ? d2 : d);
		assert_int_equal(t->state, DUE_DONE);
		assert_int_equal(t->n_attempts, 1);
		assert_string_equal(t->attempts[0].outcome, "DONE");
		assert_memory_equal(t->result, i ? "rd2" : "rd", i ? 3 : 2);
		due_task_free(t);
	}
	assert_int_equal(state_of(db, e), DUE_CLAIMED);

	/* done, stale, cancelled, empty, and the first again */
	due_id f = add(db, "k", 0, 5), g = add(db, "k", 0, 5),
	       h = add(db, "k", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
	due_task_list_free(l);
	assert_int_equal(due_cancel(db, &cco, g), 0);
	due_completion mixed[5] = {{f, 1, "rf", 2, 0},
				   {e, 7, "re", 2, 0},
				   {g, 1, "rg", 2, 0},
				   {h, 1, NULL, 0, 0},
				   {f, 1, "again", 5, 0}};
	assert_int_equal(due_complete_and_claim(db, mixed, 5, &co, &l), 0);
	due_task_list_free(l);
	assert_int_equal(mixed[0].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(mixed[1].outcome, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(mixed[2].outcome,
			 DUE_COMPLETE_CANCELLED_BEFORE_COMMIT);
	assert_int_equal(mixed[3].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(mixed[4].outcome, DUE_COMPLETE_REJECTED_STALE);
	t = get(db, f);
	assert_memory_equal(t->result, "rf", 2);
	assert_int_equal(t->n_attempts, 1);
	assert_non_null(t->attempts[0].late_commit);
	assert_string_equal(t->attempts[0].late_commit, "REJECTED_STALE");
	due_task_free(t);
	assert_int_equal(state_of(db, g), DUE_CANCELLED);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Several processes                                                   */
/* ------------------------------------------------------------------ */

/* Child: wait for go, then claim and complete in batches until nothing
   is left for a while; print the claimed ids. */
static void claim_child(int go, int fd, int worker)
{
	due_db *db = NULL;
	char owner[32], c;
	int empty = 0;

	snprintf(owner, sizeof(owner), "proc-%d", worker);
	/* a store error must be told, not end the child by SIGPIPE */
	signal(SIGPIPE, SIG_IGN);
	if (due_open(&db, url, NULL) < 0) {
		fprintf(stderr, "tick child: open: %s\n", due_error_last());
		_exit(2);
	}
	if (read(go, &c, 1) != 1)
		_exit(5);
	while (empty < 20) {
		due_task_list *l = NULL;
		if (due_claim(db, &l, owner, NULL, 0, 7, LONG_LEASE) < 0) {
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
	/* how the work was shared depends on the scheduler: said, not asserted
	 */
	int64_t tries, first, workers;
	tries_of(db, &tries, &first, &workers);
	printf(
	    "three processes: tasks=%d claims=%d dup_claims=%d workers=%lld\n",
	    N, claims, dups, (long long)workers);
	assert_int_equal(claims, N);
	assert_int_equal(dups, 0);
	due_stats st;
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_DONE], N);
	/* one try each, at attempt 1 */
	assert_int_equal(tries, N);
	assert_int_equal(first, N);
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
			assert_int_equal(
			    due_complete(db, &co, id, t->attempt, "fx", 2), 0);
			due_task_free(t);
		}
		if (i % 3 == 2)
			dprintf(to[1], "%lld\n", (long long)id);
		assert_int_equal(fscanf(answers, "%d", &o), 1);
		assert_true(o >= 0 && o < 5);
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
	printf(
	    "due vs cancel: %d rounds: CANCELLED=%d REQUESTED=%d TOO_LATE=%d "
	    "violations=%d\n",
	    ROUNDS, seen[DUE_CANCEL_CANCELLED], seen[DUE_CANCEL_REQUESTED],
	    seen[DUE_CANCEL_TOO_LATE], violations);
	assert_int_equal(violations, 0);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Reading: get, list, stats, health, prune; the schema's own checks   */
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
	int64_t deleted, nd;
	bool up;

	due_id dead = add(db, "a", 0, 1);
	due_id ok = add(db, "b", 0, 5);
	due_id run = add(db, "b", 0, 5);
	add(db, "a", HOUR, 5);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.due_unclaimed, 3);
	assert_true(st.oldest_due_unclaimed_ms >= 0);
	assert_int_equal(st.claims_window, 0);
	assert_int_equal(st.lateness_p50_us, -1);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 3);
	due_task_list_free(l);
	assert_int_equal(due_health(db, &up, &nd), 0);
	assert_true(up);
	assert_int_equal(nd, 0);
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
	assert_int_equal(due_prune(db, &deleted, HOUR), 0);
	assert_int_equal(deleted, 0);
	assert_int_equal(due_prune(db, &deleted, INT64_MAX), 0);
	assert_int_equal(deleted, 0);
	due_task *t = get(db, ok);
	wait_store_past(db, t->updated_at + 1000); /* `ok` is 1 ms old */
	due_task_free(t);
	due_metrics *m0 = NULL, *m1 = NULL;
	assert_int_equal(due_metrics_get(db, &m0), 0);
	assert_int_equal(due_prune(db, &deleted, 1000), 0);
	assert_int_equal(deleted, 1);
	t = NULL;
	assert_int_equal(due_get(db, &t, ok), DUE_ENOTFOUND);
	/* the metrics count the tries that remain: one DONE try fewer */
	assert_int_equal(due_metrics_get(db, &m1), 0);
	assert_int_equal(m1->outcomes[DUE_OUT_DONE],
			 m0->outcomes[DUE_OUT_DONE] - 1);
	assert_int_equal(m1->duration.count, m0->duration.count - 1);
	assert_int_equal(m1->lateness.count, m0->lateness.count - 1);
	int64_t per0 = 0, per1 = 0; /* `ok` ended well within 15 minutes */
	for (int i = 0; i < 15; i++)
		per0 += m0->done_per_min[i], per1 += m1->done_per_min[i];
	assert_int_equal(per1, per0 - 1);
	assert_int_equal(m1->kinds[1].counts[DUE_DONE], 0); /* kind b */
	due_metrics_free(m0);
	due_metrics_free(m1);
	/* and its history with it */
	if (is_redis())
		assert_int_equal(
		    RD(tu_rd("EXISTS %s", tu_rd_key("a:%lld", ok))), 0);
	else
		assert_int_equal(
		    sql_int("SELECT count(*) FROM due_attempt WHERE task_id = "
			    "%lld",
			    (long long)ok),
		    0);
	assert_int_equal(state_of(db, dead), DUE_DEAD);
	/* ids are never reused after prune (idempotency keys stay unique) */
	due_id next = add(db, "k", 0, 5);
	assert_true(next > run);
	due_close(db);
}

static void test_schema_checks(void **state)
{
	(void)state;
	due_db *db = NULL;
	char err[512];

	/* the schema refuses rows the state machine cannot hold: CLAIMED
	   exactly when both lease fields are set, and known states only.
	   Not on Redis: it has no schema to refuse a write (only the
	   store's scripts write its hashes), so there is nothing to check */
	db = open_db();
	due_id id = add(db, "k", 0, 5);
	due_close(db);
	if (!is_redis()) {
		assert_int_equal(sql_try(err, sizeof(err),
					 "UPDATE due_task SET state = "
					 "'CLAIMED'"),
				 -1);
		assert_non_null(strstr(err, "claimed_iff_lease"));
		assert_int_equal(sql_try(err, sizeof(err),
					 "UPDATE due_task SET state = "
					 "'NOPE'"),
				 -1);
		assert_int_equal(sql_try(err, sizeof(err),
					 "UPDATE due_task SET "
					 "lease_owner = 'w'"),
				 -1);
	}
	db = open_db();
	assert_int_equal(state_of(db, id), DUE_SCHEDULED);
	due_close(db);

	/* older and newer schemas are refused, and say so */
	set_schema_version(0);
	db = NULL;
	assert_int_equal(due_open(&db, url, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "older"));
	due_close(db);
	set_schema_version(99);
	db = NULL;
	assert_int_equal(due_open(&db, url, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "newer"));
	due_close(db);

	/* (an empty PostgreSQL schema: test_pg_store.c) */
	if (!on_sqlite())
		return;
	char other[600];
	snprintf(other, sizeof(other), "sqlite:%s/none.db", dir);
	db = NULL;
	assert_int_equal(due_open(&db, other, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "due init"));
	due_close(db);
	assert_int_equal(access(other + 7, F_OK), -1); /* not created */

	db = NULL;
	assert_int_equal(due_open(&db, "mysql://x", NULL), DUE_EINVAL);
	due_close(db);
	db = NULL;
	assert_int_equal(due_open(&db, "sqlite:", NULL), DUE_EINVAL);
	due_close(db);
	db = NULL;
	assert_int_equal(due_open(&db, "sqlite:/tmp/x.db?sync=nope", NULL),
			 DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "sync=nope"));
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Periodic schedules                                                  */
/* ------------------------------------------------------------------ */

static due_cron_def cron_def(const char *name, const char *expr,
			     const char *kind)
{
	due_cron_def d = DUE_CRON_DEF_INIT;
	d.name = name;
	d.expr = expr;
	d.kind = kind;
	d.payload = "p";
	d.payload_len = 1;
	return d;
}

static const due_cron_info *find_sched(const due_cron_info_list *l,
				       const char *name)
{
	for (size_t i = 0; i < l->count; i++)
		if (strcmp(l->items[i].name, name) == 0)
			return &l->items[i];
	fail_msg("no schedule %s", name);
	return NULL;
}

static void test_cron_definitions(void **state)
{
	(void)state;
	static const char bin[] = {'a', '\0', 'b', (char)0xff};
	const char *names[] = {"b", "B", "a_1", "a-1", "a.1"};
	due_db *db = open_db();
	due_cron_def d = cron_def("report", "0 2 * * *", "report");
	due_cron_info_list *l = NULL;
	const due_cron_info *i;
	due_time now;
	char err[512];

	/* every field is kept as given */
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
	/* the stored slot is exactly the one read back */
	if (is_redis())
		assert_int_equal(
		    RD(tu_rd("HGET %s next_slot", tu_rd_key("c:report"))),
		    i->next_slot);
	else
		assert_int_equal(sql_int("SELECT count(*) FROM due_schedule "
					 "WHERE next_slot = %s",
					 TS(i->next_slot)),
				 1);
	due_cron_info_list_free(l);

	/* a zone with summer time: 02:00 in Berlin is 00:00 or 01:00 UTC */
	due_cron_def bd = cron_def("berlin", "0 2 * * *", "k");
	bd.tz = "Europe/Berlin";
	assert_int_equal(due_cron_put(db, &bd), 0);
	assert_int_equal(due_cron_list(db, &l), 0);
	int64_t sec_of_day =
	    (find_sched(l, "berlin")->next_slot / 1000000) % 86400;
	assert_true(sec_of_day == 0 || sec_of_day == 3600);
	due_cron_info_list_free(l);

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
	assert_int_equal(l->count, 2);
	due_cron_info_list_free(l);

	/* a replace keeps the history and created_at */
	if (is_redis())
		(void)RD(tu_rd("HSET %s last_slot %lld last_task 42 fired 3 "
			       "missed 2 last_missed %lld created_at %lld",
			       tu_rd_key("c:report"), (long long)(now - HOUR),
			       (long long)(now - 2 * HOUR),
			       (long long)(now - 24 * HOUR)));
	else
		sql("UPDATE due_schedule SET last_slot = %s, last_task = 42, "
		    "fired = 3, missed = 2, last_missed = %s, created_at = %s "
		    "WHERE name = 'report'",
		    TS(now - HOUR), TS(now - 2 * HOUR), TS(now - 24 * HOUR));
	d.expr = "30 3 * * *";
	d.kind = "report2";
	d.tz = NULL;
	d.payload = "new";
	d.payload_len = 3;
	d.misfire = DUE_MISFIRE_SKIP;
	d.overlap = DUE_OVERLAP_ALLOW;
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->count, 2);
	i = find_sched(l, "report");
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
	assert_int_equal(i->last_slot, now - HOUR);
	assert_int_equal(i->last_missed, now - 2 * HOUR);
	assert_int_equal(i->created_at, now - 24 * HOUR);
	assert_true(i->updated_at >= now);
	due_cron_info_list_free(l);

	/* listed in byte order, whatever the database's collation */
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		assert_int_equal(
		    due_cron_put(
			db, &(due_cron_def){DUE_CRON_DEF_VERSION, names[k],
					    "@hourly", "k", NULL, NULL, 0,
					    DUE_MISFIRE_SKIP, DUE_OVERLAP_ALLOW,
					    5, 1000000, HOUR}),
		    0);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->count, 7);
	for (size_t k = 1; k < l->count; k++)
		assert_true(strcmp(l->items[k - 1].name, l->items[k].name) < 0);
	assert_string_equal(l->items[0].name, "B");
	assert_int_equal(l->items[0].payload_len, 0);
	assert_non_null(l->items[0].payload);
	due_cron_info_list_free(l);

	/* remove; a second remove finds nothing */
	assert_int_equal(due_cron_remove(db, "B"), 0);
	assert_int_equal(due_cron_remove(db, "B"), DUE_ENOTFOUND);
	assert_non_null(strstr(due_error_last(), "no schedule named 'B'"));
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->count, 6);
	due_cron_info_list_free(l);

	if (is_redis()) {
		/* no schema on Redis to check the policies (only the scripts
		   write, from values cron_put validated); a bare worker hash
		   (no counter written) reads as every counter at zero */
		(void)RD(tu_rd("HSET %s started_at %lld seen_at %lld",
			       tu_rd_key("w:bare"), (long long)now,
			       (long long)now));
		(void)RD(tu_rd("ZADD %s %lld bare", tu_rd_key("workers"),
			       (long long)now));
		due_metrics *m = NULL;
		assert_int_equal(due_metrics_get(db, &m), 0);
		assert_int_equal(m->workers, 1);
		assert_int_equal(m->claim_queries + m->empty_claims +
				     m->reclaim_queries + m->store_errors,
				 0);
		due_metrics_free(m);
		due_close(db);
		return;
	}
	/* the policies are checked by the schema too */
	assert_int_equal(sql_try(err, sizeof(err),
				 "UPDATE due_schedule SET "
				 "misfire = 'later'"),
			 -1);
	assert_int_equal(sql_try(err, sizeof(err),
				 "UPDATE due_schedule SET "
				 "overlap = 'queue'"),
			 -1);
	/* and a worker row starts with every counter at zero */
	sql("INSERT INTO due_worker (owner, started_at, seen_at) VALUES"
	    " ('bare', %s, %s)",
	    TS(now), TS(now));
	assert_int_equal(
	    sql_int("SELECT claimed + done + failed + dead + stale"
		    " + cancelled + lease_lost + claim_queries + empty_claims"
		    " + reclaim_queries + store_errors FROM due_worker"),
	    0);
	due_close(db);
}

/* Tasks of one schedule's slots: count, span, and whether each is due at
   its own slot (key "cron:<name>:<slot seconds>"). */
typedef struct slots {
	size_t n;
	int dups, gaps, misdue;
	int64_t first, last; /* slot seconds */
	int64_t keys[256];
} slots;

static slots slot_tasks(due_db *db, const char *kind)
{
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	slots s;

	memset(&s, 0, sizeof(s));
	lo.kind = kind;
	lo.limit = 10000;
	assert_int_equal(due_list(db, &l, &lo), 0);
	for (size_t i = 0; i < l->count && s.n < 256; i++) {
		const char *k = strrchr(l->items[i].key, ':');
		assert_non_null(k);
		int64_t slot = strtoll(k + 1, NULL, 10);
		s.misdue += l->items[i].due_at != slot * 1000000;
		s.keys[s.n++] = slot;
	}
	due_task_list_free(l);
	for (size_t i = 1; i < s.n; i++) /* insertion sort: n is small */
		for (size_t j = i; j > 0 && s.keys[j - 1] > s.keys[j]; j--) {
			int64_t t = s.keys[j];
			s.keys[j] = s.keys[j - 1];
			s.keys[j - 1] = t;
		}
	for (size_t i = 1; i < s.n; i++) {
		s.dups += s.keys[i] == s.keys[i - 1];
		s.gaps += s.keys[i] - s.keys[i - 1] > 1;
	}
	if (s.n) {
		s.first = s.keys[0];
		s.last = s.keys[s.n - 1];
	}
	return s;
}

/*
** A pass materializes exactly the slots up to now + lookahead, each due at
** its slot, and records the last one; the count is computed from the
** pass's own clock, so no assumption is made about when the pass ran.
*/
static void test_cron_fire_exact(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cron_def d = cron_def("sec", "* * * * * *", "seck");
	due_cron_tick_result r, r2;
	due_cron_info_list *l = NULL;

	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_list(db, &l), 0);
	due_time first = l->items[0].next_slot;
	due_cron_info_list_free(l);
	assert_int_equal(due_cron_tick(db, &r, TU_LOOKAHEAD(2500000)), 0);
	int64_t want = r.now + 2500000 >= first
			   ? (r.now + 2500000 - first) / 1000000 + 1
			   : 0;
	assert_true(want >= 2);
	assert_int_equal(r.materialized, want);
	assert_int_equal(r.missed, 0);
	assert_int_equal(r.lost_races, 0);
	slots s = slot_tasks(db, "seck");
	assert_int_equal(s.n, want);
	assert_int_equal(s.first * 1000000, first);
	assert_int_equal(s.dups + s.gaps + s.misdue, 0);

	/* the schedule records its last slot and task, and moved on */
	assert_int_equal(due_cron_list(db, &l), 0);
	const due_cron_info *i = &l->items[0];
	assert_int_equal(i->fired, s.n);
	assert_int_equal(i->last_slot, s.last * 1000000);
	assert_int_equal(i->next_slot, (s.last + 1) * 1000000);
	assert_int_equal(r.next_slot, i->next_slot);
	due_task *t = get(db, i->last_task);
	assert_int_equal(t->due_at, i->last_slot);
	assert_string_equal(t->kind, "seck");
	assert_int_equal(t->max_attempts, 5);
	due_task_free(t);

	/* a pass without lookahead makes only what fell due since */
	assert_int_equal(due_cron_tick(db, &r2, NULL), 0);
	int64_t more =
	    r2.now >= i->next_slot ? (r2.now - i->next_slot) / 1000000 + 1 : 0;
	assert_int_equal(r2.materialized, more);
	assert_int_equal(slot_tasks(db, "seck").n, s.n + (size_t)more);
	due_cron_info_list_free(l);
	due_close(db);
}

/* 00:00 UTC of 1 January of the year after the one holding t (us). */
static due_time next_new_year(due_time t)
{
	time_t sec = (time_t)(t / 1000000);
	struct tm tm;
	gmtime_r(&sec, &tm);
	struct tm ny = {.tm_year = tm.tm_year + 1, .tm_mon = 0, .tm_mday = 1};
	return (due_time)timegm(&ny) * 1000000;
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
	due_cron_info_list *l = NULL;
	due_submitted pre;
	due_time now;
	char key[64];

	assert_int_equal(due_cron_put(db, &d), 0);
	/* its slot two seconds ago (within the grace): due to fire now */
	assert_int_equal(due_now(db, &now), 0);
	due_time slot = (now / 1000000 - 2) * 1000000;
	set_next_slots(db, slot);
	snprintf(key, sizeof(key), "cron:yearly:%lld",
		 (long long)(slot / 1000000));
	o.key = key;
	o.delay_us = HOUR;
	assert_int_equal(due_schedule(db, &pre, "yk", "", 0, &o), 0);
	assert_int_equal(due_cron_tick(db, &r, NULL), 0);
	assert_int_equal(r.materialized, 1);
	assert_int_equal(r.lost_races, 0);
	assert_int_equal(task_count(db), 1);
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->items[0].last_task, pre.id);
	assert_int_equal(l->items[0].last_slot, slot);
	assert_int_equal(l->items[0].fired, 1);
	/* and on to next 1 January, 00:00 UTC */
	assert_int_equal(l->items[0].next_slot, next_new_year(slot));
	due_cron_info_list_free(l);
	due_close(db);
}

/* Child: wait for go, tick for `seconds`, report "materialized lost". */
static void tick_child(int go, int fd, int seconds)
{
	due_db *db = NULL;
	int64_t made = 0, lost = 0;
	char c;

	/* a store error must be told, not end the child by SIGPIPE */
	signal(SIGPIPE, SIG_IGN);
	if (due_open(&db, url, NULL) < 0) {
		fprintf(stderr, "tick child: open: %s\n", due_error_last());
		_exit(2);
	}
	if (read(go, &c, 1) != 1)
		_exit(5);
	for (int i = 0; i < seconds * 50; i++) {
		due_cron_tick_result r;
		if (due_cron_tick(db, &r, TU_LOOKAHEAD(1500000)) < 0) {
			fprintf(stderr, "tick: %s\n", due_error_last());
			_exit(3);
		}
		made += r.materialized;
		lost += r.lost_races;
		tu_sleep_ms(20);
	}
	dprintf(fd, "%lld %lld\n", (long long)made, (long long)lost);
	due_close(db);
	_exit(0);
}

static void test_cron_once_per_slot(void **state)
{
	(void)state;
	enum { P = 3 };
	due_db *db = open_db();
	due_cron_def d = cron_def("every-second", "* * * * * *", "tick");
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
			tick_child(go[0], fds[p][1], 4);
		}
		close(fds[p][1]);
	}
	close(go[0]);
	assert_int_equal(write(go[1], "ggg", P), P); /* all start at once */
	close(go[1]);
	for (int p = 0; p < P; p++) {
		FILE *f = fdopen(fds[p][0], "r");
		long long m = 0, x = 0;
		int got = fscanf(f, "%lld %lld", &m, &x), st;
		waitpid(pids[p], &st, 0);
		if (got != 2)
			fail_msg("scheduler %d reported nothing: %s %d", p,
				 WIFEXITED(st) ? "exit" : "signal",
				 WIFEXITED(st) ? WEXITSTATUS(st)
					       : WTERMSIG(st));
		made += m;
		lost += x;
		fclose(f);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	db = open_db();
	slots s = slot_tasks(db, "tick");
	printf("cron: %d schedulers x 4 s -> %zu slot tasks, dups=%d gaps=%d "
	       "won=%lld lost_races=%lld\n",
	       P, s.n, s.dups, s.gaps, made, lost);
	assert_true(s.n >= 4); /* each child ticked for 4 s at least */
	assert_int_equal(s.dups, 0);
	assert_int_equal(s.gaps, 0);
	assert_int_equal(s.misdue, 0);
	assert_int_equal(made, (long long)s.n); /* won == inserted */
	due_cron_info_list *l = NULL;
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->items[0].fired, (int64_t)s.n);
	assert_int_equal(l->items[0].missed, 0);
	assert_int_equal(l->items[0].last_slot, s.last * 1000000);
	assert_int_equal(l->items[0].next_slot, (s.last + 1) * 1000000);
	due_cron_info_list_free(l);
	due_close(db);
}

/* Move every schedule's next slot to ten minutes before the store's
   current minute: as if no scheduler had run since. */
static due_time rewind_schedules(due_db *db)
{
	due_time now;
	assert_int_equal(due_now(db, &now), 0);
	due_time slot = (now / 60000000) * 60000000 - 10 * 60000000LL;
	set_next_slots(db, slot);
	return slot;
}

/*
** Misfires, found by passes after ten minutes without a scheduler (the
** schedules are wound back in the store; nothing waits for real time).
** skip: the missed slots are counted, no task; once: one catch-up task due
** now, the others counted; both resume after now - grace, and the counts
** add up over passes.
*/
static void test_cron_misfire(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cron_def skip = cron_def("s", "* * * * *", "skipk");
	due_cron_def once = cron_def("o", "* * * * *", "oncek");
	due_cron_tick_result r1, r2;
	due_cron_info_list *l = NULL;
	const int64_t grace = DUE_CRON_MISFIRE_GRACE_US;

	once.misfire = DUE_MISFIRE_ONCE;
	assert_int_equal(due_cron_put(db, &skip), 0);
	assert_int_equal(due_cron_put(db, &once), 0);

	due_time from = rewind_schedules(db);
	assert_int_equal(due_cron_tick(db, &r1, NULL), 0);
	/* the same slots missed by both in one pass (one clock): once turns
	   the latest into its catch-up */
	assert_int_equal(due_cron_list(db, &l), 0);
	const due_cron_info *sk = find_sched(l, "s"), *on = find_sched(l, "o");
	printf("misfire: skip missed=%lld fired=%lld; once missed=%lld "
	       "fired=%lld\n",
	       (long long)sk->missed, (long long)sk->fired,
	       (long long)on->missed, (long long)on->fired);
	assert_true(sk->missed >= 10);
	assert_int_equal(on->missed + 1, sk->missed);
	assert_int_equal(sk->missed + on->missed, r1.missed);
	assert_int_equal(sk->fired + on->fired, r1.materialized);
	assert_int_equal(sk->last_missed % 60000000, 0);
	assert_true(sk->last_missed >= from);
	assert_true(sk->last_missed <= r1.now - grace);
	assert_true(sk->next_slot > r1.now);
	assert_true(on->next_slot > r1.now);
	/* skip: no task for a missed slot; at most the one within the grace */
	due_task_list *tl = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	lo.kind = "skipk";
	assert_int_equal(due_list(db, &tl, &lo), 0);
	assert_true(tl->count <= 1);
	for (size_t k = 0; k < tl->count; k++)
		assert_true(tl->items[k].due_at > r1.now - grace);
	due_task_list_free(tl);
	/* once: exactly one catch-up, due at the pass's now, keyed by the
	   latest missed slot; at most one more within the grace */
	lo.kind = "oncek";
	assert_int_equal(due_list(db, &tl, &lo), 0);
	int catch_up = 0;
	for (size_t k = 0; k < tl->count; k++) {
		if (tl->items[k].due_at != r1.now)
			continue;
		catch_up++;
		const char *key = strrchr(tl->items[k].key, ':');
		assert_int_equal(strtoll(key + 1, NULL, 10) * 1000000,
				 sk->last_missed);
	}
	assert_int_equal(catch_up, 1);
	assert_true(tl->count >= 1 && tl->count <= 2);
	assert_int_equal((int64_t)tl->count, on->fired);
	due_task_list_free(tl);
	int64_t sk_missed = sk->missed, on_missed = on->missed;
	due_cron_info_list_free(l);

	/* a second outage: the counts add up */
	rewind_schedules(db);
	assert_int_equal(due_cron_tick(db, &r2, NULL), 0);
	assert_int_equal(due_cron_list(db, &l), 0);
	sk = find_sched(l, "s");
	on = find_sched(l, "o");
	assert_int_equal(sk->missed + on->missed, r1.missed + r2.missed);
	assert_int_equal(on->missed - on_missed + 1, sk->missed - sk_missed);
	assert_int_equal(sk->fired + on->fired,
			 r1.materialized + r2.materialized);
	assert_true(sk->last_missed <= r2.now - grace);
	assert_true(sk->next_slot > r2.now);
	/* still no skip task for a slot missed when it was made */
	lo.kind = "skipk";
	assert_int_equal(due_list(db, &tl, &lo), 0);
	for (size_t k = 0; k < tl->count; k++)
		assert_true(tl->items[k].due_at > r1.now - grace);
	due_task_list_free(tl);
	due_cron_info_list_free(l);
	due_close(db);
}

static void test_cron_overlap_wait(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_cron_def d = cron_def("w", "* * * * * *", "waitk");
	due_cron_tick_result r;

	d.overlap = DUE_OVERLAP_WAIT;
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_tick(db, &r, TU_LOOKAHEAD(3000000)), 0);
	/* the first slot's task is live: later slots wait for it */
	assert_int_equal(r.materialized, 1);
	assert_int_equal(r.waiting, 1);
	assert_int_equal(slot_tasks(db, "waitk").n, 1);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Metrics                                                             */
/* ------------------------------------------------------------------ */

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
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 10, LONG_LEASE), 0);
	due_task_list_free(l);
	assert_int_equal(due_complete(db, &co, a, 1, "", 0), 0);
	assert_int_equal(due_fail(db, &fo, b, 1, "x"), 0);
	assert_int_equal(due_complete(db, &co, a, 1, "", 0), 0); /* stale */
	due_worker_stats ws = {
	    .claimed = 2, .done = 1, .claim_queries = 7, .empty_claims = 3};
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

#define T2026 1767225600000000LL /* 2026-01-01T00:00:00Z */

/* A column of worker `owner`'s row (a time in microseconds), -1 for none. */
static int64_t worker_field(const char *owner, const char *col)
{
	if (is_redis())
		return RD(tu_rd("HGET %s %s", tu_rd_key("w:%s", owner), col));
	return sql_int("SELECT %s FROM due_worker WHERE owner = '%s'",
		       strstr(col, "_at") ? US(col) : col, owner);
}
#define NO_END INT64_MIN

/* History rows are written for tasks that do not exist (ids from
   HIST_ID), so that they never meet the rows of real tasks. */
#define HIST_ID 900000

/*
** One history row claimed at hist_base + late_us (due at hist_base):
** lateness and duration in microseconds; dur_us = NO_END for a try still
** running.  hist_base is set by the test from the store's clock, so that
** the row lies inside the metrics window (DUE_METRICS_WINDOW_US) or, on
** purpose, outside it.
*/
static due_time hist_base;

static void attempt_row(int id, int64_t late_us, int64_t dur_us,
			const char *outcome, bool stale)
{
	/* Redis keeps the metrics as counters at write time: its record of
	   the try and what the store's scripts would have counted for it */
	if (is_redis()) {
		(void)RD(tu_rd_attempt(
		    HIST_ID + id, hist_base + late_us, hist_base,
		    dur_us == NO_END ? -1 : hist_base + late_us + dur_us,
		    outcome, stale, due_hist_bounds_ms, DUE_HIST_N));
		return;
	}
	sql("INSERT INTO due_attempt (task_id, attempt, worker, claimed_at,"
	    " due_at, ended_at, outcome, late_commit) VALUES (%d, 1, 'w', %s,"
	    " %s, %s, '%s', %s)",
	    HIST_ID + id, TS(hist_base + late_us), TS(hist_base),
	    dur_us == NO_END ? "NULL" : TS(hist_base + late_us + dur_us),
	    outcome, stale ? "'REJECTED_STALE'" : "NULL");
}

/* A finished try that ended `ago_ms` before `now`. */
static void ended_row(int id, due_time now, int64_t ago_ms, const char *outcome)
{
	due_time e = now - ago_ms * 1000;
	if (is_redis()) {
		(void)RD(tu_rd_attempt(HIST_ID + id, e - 1000000, e - 1000000,
				       e, outcome, false, due_hist_bounds_ms,
				       DUE_HIST_N));
		return;
	}
	sql("INSERT INTO due_attempt (task_id, attempt, worker, claimed_at,"
	    " due_at, ended_at, outcome) VALUES (%d, 1, 'w', %s, %s, %s, '%s')",
	    HIST_ID + id, TS(e - 1000000), TS(e - 1000000), TS(e), outcome);
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

/*
** The metrics to the microsecond, from history written at known times:
** histogram bounds, completions per minute, the workers' 5-minute window,
** kinds in byte order and at most 1000 of them.
*/
static void test_metrics_exact(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_metrics *m = NULL;
	due_cancel_outcome co;
	due_time now;
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
	/* the rows are claimed 10 minutes ago, inside the window; one
	   claimed in 2026 is long out of it and counts nowhere */
	assert_int_equal(due_now(db, &now), 0);
	hist_base = T2026;
	attempt_row(9, 0, 1000, "DONE", true);
	hist_base = now - 10 * 60000000LL;
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
	int64_t dur[DUE_HIST_N + 1] = {
	    [0] = 3, [1] = 1, [7] = 1, [13] = 1, [14] = 1};
	assert_buckets(&m->lateness, late);
	assert_buckets(&m->duration, dur);
	near(m->lateness.sum_ms,
	     -5 + 0 + 1 + 1.001 + 2 + 30000 + 30000.001 + 100000);
	near(m->duration.sum_ms, 1 + 1.001 + 250 + 30000 + 30000.001 + 0 - 3);
	assert_int_equal(m->outcomes[DUE_OUT_RUNNING], 1);
	assert_int_equal(m->outcomes[DUE_OUT_DONE], 2);
	for (int i = DUE_OUT_FAILED; i <= DUE_OUT_KILLED; i++)
		assert_int_equal(m->outcomes[i], 1);
	assert_int_equal(m->outcomes[DUE_OUT_REJECTED_STALE], 2);
	int64_t per = 0; /* the two DONE tries ended 8 and 10 minutes ago */
	for (int i = 0; i < 15; i++)
		per += m->done_per_min[i];
	assert_int_equal(per, 2);
	assert_int_equal(m->window_us, DUE_METRICS_WINDOW_US);
	due_metrics_free(m);

	/* completions per minute of the last 15, latest first */
	if (is_redis())
		(void)RD(tu_rd_attempts_clear(HIST_ID + 1, HIST_ID + 9));
	else
		sql("DELETE FROM due_attempt");
	assert_int_equal(due_now(db, &now), 0);
	ended_row(1, now, 30000, "DONE");
	ended_row(2, now, 90000, "DONE");
	ended_row(3, now, 100000, "DONE");
	ended_row(4, now, 870000, "DONE");  /* 14.5 min ago: the last minute */
	ended_row(5, now, 960000, "DONE");  /* 16 min ago: out of the window */
	ended_row(6, now, 30000, "FAILED"); /* not a completion */
	ended_row(7, now, -60000, "DONE");  /* in the future: not counted */
	assert_int_equal(due_metrics_get(db, &m), 0);
	int64_t per_min[15] = {[0] = 1, [1] = 2, [14] = 1};
	for (int i = 0; i < 15; i++)
		if (m->done_per_min[i] != per_min[i])
			fail_msg("done_per_min[%d] = %lld, want %lld", i,
				 (long long)m->done_per_min[i],
				 (long long)per_min[i]);
	/* the tries claimed in the window: all but the one of 16 min ago */
	assert_int_equal(m->outcomes[DUE_OUT_DONE], 5);
	assert_int_equal(m->duration.buckets[9], 6); /* 1 s each */
	due_metrics_free(m);

	/* worker reports: upserted; only the last 5 minutes count */
	due_worker_stats w1 = {.claimed = 3,
			       .done = 2,
			       .failed = 1,
			       .dead = 4,
			       .stale = 5,
			       .cancelled = 6,
			       .lease_lost = 7,
			       .claim_queries = 10,
			       .empty_claims = 4,
			       .reclaim_queries = 2,
			       .store_errors = 1};
	due_worker_stats w2 = {
	    .claim_queries = 5, .empty_claims = 1, .reclaim_queries = 3};
	due_worker_stats w3 = {.claim_queries = 1000, .store_errors = 1000};
	assert_int_equal(due_worker_report(db, "host-a:1", &w1), 0);
	assert_int_equal(due_worker_report(db, "host-b:2", &w2), 0);
	assert_int_equal(due_worker_report(db, "gone:3", &w3), 0);
	assert_int_equal(due_now(db, &now), 0);
	if (is_redis()) {
		(void)RD(tu_rd("HSET %s seen_at %lld started_at %lld",
			       tu_rd_key("w:gone:3"),
			       (long long)(now - 6 * 60000000LL),
			       (long long)(now - HOUR)));
		(void)RD(tu_rd("ZADD %s %lld gone:3", tu_rd_key("workers"),
			       (long long)(now - 6 * 60000000LL)));
	} else
		sql("UPDATE due_worker SET seen_at = %s, started_at = %s WHERE "
		    "owner = 'gone:3'",
		    TS(now - 6 * 60000000LL), TS(now - HOUR));
	int64_t started = worker_field("host-a:1", "started_at");
	wait_store_past(db, started); /* the next report is seen later */
	w1.claim_queries = 12;
	assert_int_equal(due_worker_report(db, "host-a:1", &w1), 0);
	assert_int_equal(worker_field("host-a:1", "started_at"), started);
	assert_true(worker_field("host-a:1", "seen_at") > started);
	static const char *const counters[] = {
	    "claimed",	    "done",
	    "failed",	    "dead",
	    "stale",	    "cancelled",
	    "lease_lost",   "claim_queries",
	    "empty_claims", "reclaim_queries",
	    "store_errors"};
	a[0] = '\0';
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		snprintf(a + strlen(a), sizeof(a) - strlen(a), "%s%lld",
			 i ? " " : "",
			 (long long)worker_field("host-a:1", counters[i]));
	assert_string_equal(a, "3 2 1 4 5 6 7 12 4 2 1");
	if (is_redis())
		assert_int_equal(RD(tu_rd("ZCARD %s", tu_rd_key("workers"))),
				 3);
	else
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
	int64_t want[3][DUE_STATE_COUNT] = {
	    {0, 1, 0, 0, 0}, {0, 0, 0, 1, 0}, {2, 0, 0, 0, 0}};
	for (int k = 0; k < 3; k++)
		for (int st = 0; st < DUE_STATE_COUNT; st++)
			assert_int_equal(m->kinds[k].counts[st], want[k][st]);
	/* the core's stats are left as the core filled them */
	assert_int_equal(m->stats.counts[DUE_SCHEDULED], 2);
	assert_int_equal(m->stats.counts[DUE_CLAIMED], 1);
	assert_true(m->stats.now > 0);
	due_metrics_free(m);

	/* at most 1000 kinds: the first by name */
	assert_int_equal(due_now(db, &now), 0);
	if (is_redis())
		(void)RD(tu_rd_kind_tasks(10001, 11005, "DONE"));
	else
		sql("WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
		    "FROM g"
		    " WHERE x < 1005) INSERT INTO due_task (kind, payload, "
		    "state, "
		    "due_at,"
		    " max_attempts, backoff_us, backoff_cap_us, created_at, "
		    "updated_at)"
		    " SELECT 'z' || (10000 + x), '', 'DONE', %s, 1, 0, 0, %s, "
		    "%s FROM "
		    "g",
		    TS(now), TS(now), TS(now));
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->n_kinds, 1000);
	assert_string_equal(m->kinds[0].kind, "KA");
	snprintf(b, sizeof(b), "z%d", 10000 + 997);
	assert_string_equal(m->kinds[999].kind, b);
	if (!(m->kinds_estimated & 1u << DUE_DONE))
		assert_int_equal(m->kinds[999].counts[DUE_DONE], 1);
	due_metrics_free(m);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Flow control (docs/internals/flow.md)                               */
/* ------------------------------------------------------------------ */

/* A task of kind due at `at` with a priority, a group and a time limit. */
static due_id add_flow(due_db *db, const char *kind, due_time at,
		       int32_t priority, const char *group, int64_t timeout_us)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	o.at = at;
	o.priority = priority;
	o.group = group;
	o.timeout_us = timeout_us;
	o.backoff_us = 1000;
	o.backoff_cap_us = 1000;
	assert_int_equal(due_schedule(db, &s, kind, "p", 1, &o), 0);
	return s.id;
}

/* due_kind_set with the fields given (-1: keep; rate_us with rate_n). */
static int kind_set(due_db *db, const char *kind, int paused, int32_t rate_n,
		    int64_t rate_us, int32_t max_running, int32_t per_group,
		    int64_t timeout_us)
{
	due_kind_settings k = DUE_KIND_SETTINGS_INIT;
	k.paused = paused;
	k.rate_n = rate_n;
	k.rate_us = rate_us;
	k.max_running = max_running;
	k.max_running_per_group = per_group;
	k.timeout_us = timeout_us;
	return due_kind_set(db, kind, &k);
}

static due_kind_info *kind_info(due_db *db, const char *kind)
{
	due_kind_info *k = NULL;
	assert_int_equal(due_kind_get(db, &k, kind), 0);
	assert_string_equal(k->kind, kind);
	return k;
}

/* Claim up to limit tasks of any kind (or of `kind`) as `owner`. */
static due_task_list *claim_n(due_db *db, const char *owner, const char *kind,
			      int limit, int64_t lease_us)
{
	due_task_list *l = NULL;
	const char *k[1] = {kind};
	assert_int_equal(due_claim(db, &l, owner, kind ? k : NULL, kind ? 1 : 0,
				   limit, lease_us),
			 0);
	return l;
}

static bool listed(const due_task_list *l, due_id id)
{
	for (size_t i = 0; i < l->count; i++)
		if (l->items[i].id == id)
			return true;
	return false;
}

/*
** Lowest priority first, then earliest due_at, across claims that each
** take a few: 3 priorities (and a not-yet-due task at the lowest one,
** which must wait), inserted in a scrambled order.
*/
static void test_flow_priority_order(void **state)
{
	(void)state;
	due_db *db = open_db();
	static const int32_t prio[] = {5, -3, 0, 5, -3, 32767, 0, -32768, 0};
	due_id ids[9];
	due_time now;

	assert_int_equal(due_now(db, &now), 0);
	for (int i = 0; i < 9; i++) /* due times 9 ms apart, scrambled */
		ids[i] =
		    add_flow(db, i % 2 ? "a" : "b",
			     now - 1000 * ((i * 5) % 9 + 1), prio[i], NULL, 0);
	due_id later = add_flow(db, "a", now + HOUR, -32768, NULL, 0);
	due_task *t = get(db, ids[1]);
	assert_int_equal(t->priority, -3);
	due_task_free(t);

	int32_t last_p = DUE_PRIORITY_MIN;
	due_time last_at = 0;
	int got = 0;
	for (;;) {
		due_task_list *l = claim_n(db, "w", NULL, 2, LONG_LEASE);
		size_t n = l->count;
		for (size_t i = 0; i < n; i++) {
			const due_task *c = &l->items[i];
			assert_true(c->id != later);
			assert_true(
			    c->priority > last_p ||
			    (c->priority == last_p && c->due_at >= last_at));
			last_p = c->priority, last_at = c->due_at;
			got++;
		}
		assert_int_equal(l->retry_in_us, 0);
		due_task_list_free(l);
		if (n == 0)
			break;
	}
	assert_int_equal(got, 9);
	assert_int_equal(last_p, 32767);
	assert_int_equal(state_of(db, later), DUE_SCHEDULED);
	due_close(db);
}

/* A paused kind: never claimed (not by id either), not upcoming; resume. */
static void test_flow_pause(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_upcoming *u = NULL;
	due_task *t = NULL;
	due_time now;

	assert_int_equal(due_now(db, &now), 0);
	due_id p1 = add_flow(db, "p", now - 2000, -5, NULL, 0);
	due_id p2 = add_flow(db, "p", now - 1000, 0, NULL, 0);
	due_id q = add_flow(db, "q", now, 0, NULL, 0);
	assert_int_equal(kind_set(db, "p", 1, -1, 0, -1, -1, -1), 0);

	due_task_list *l = claim_n(db, "w", NULL, 10, LONG_LEASE);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, q);
	assert_int_equal(l->retry_in_us, 0); /* a pause never sets it */
	due_task_list_free(l);
	l = claim_n(db, "w", "p", 10, LONG_LEASE);
	assert_int_equal(l->count, 0);
	due_task_list_free(l);
	assert_int_equal(due_claim_id(db, &t, p1, "w", LONG_LEASE), DUE_EBUSY);
	assert_null(t);
	assert_int_equal(
	    due_upcoming_get(db, &u, NULL, 0, false, now + HOUR, 100), 0);
	assert_int_equal(u->count, 0);
	due_upcoming_free(u);
	due_kind_info *k = kind_info(db, "p");
	assert_true(k->paused);
	assert_int_equal(k->due, 2);
	due_kind_info_free(k);
	const char *why = NULL;
	t = get(db, p1);
	assert_int_equal(due_task_hold(db, &why, t), 0);
	assert_string_equal(why, "paused");
	due_task_free(t);

	/* resumed: claimable again, in priority order */
	assert_int_equal(kind_set(db, "p", 0, -1, 0, -1, -1, -1), 0);
	assert_int_equal(
	    due_upcoming_get(db, &u, NULL, 0, false, now + HOUR, 100), 0);
	assert_int_equal(u->count, 2);
	due_upcoming_free(u);
	assert_int_equal(due_claim_id(db, &t, p2, "w", LONG_LEASE), 0);
	due_task_free(t);
	l = claim_n(db, "w", NULL, 10, LONG_LEASE);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, p1);
	due_task_list_free(l);
	due_close(db);
}

static void sqlite_undo_v7(void);

/* The ids of the tasks in state st, in list order (every page). */
static int list_ids(due_db *db, int st, due_id *ids, int max)
{
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	int n = 0;

	lo.state = st;
	lo.limit = 2;
	for (;;) {
		due_task_list *l = NULL;
		assert_int_equal(due_list(db, &l, &lo), 0);
		for (size_t i = 0; i < l->count && n < max; i++)
			ids[n++] = l->items[i].id;
		if (l->count == 0) {
			due_task_list_free(l);
			return n;
		}
		lo.after = l->items[l->count - 1].id;
		due_task_list_free(l);
	}
}

/*
** SQLite, version 6 -> 7: due_task_due and the CANCELLED and DEAD (id)
** indexes give way to one (state, id) index over both; what stats, the
** lists by state, upcoming and the claim read is the same before and
** after.
*/
static void test_sqlite_v6_upgrade(void **state)
{
	(void)state;
	if (!on_sqlite())
		return;
	due_db *db = open_db();
	due_cancel_outcome co;
	due_state ks;
	due_stats s0, s1;
	due_time now;
	due_id cancelled[3], dead[2], ids[8];

	assert_int_equal(due_now(db, &now), 0);
	due_id overdue = add_flow(db, "k", now - 2000000, 3, NULL, 0);
	due_id later = add_flow(db, "k", now + HOUR / 2, -1, NULL, 0);
	for (int i = 0; i < 3; i++) {
		cancelled[i] = add(db, "k", HOUR, 5);
		assert_int_equal(due_cancel(db, &co, cancelled[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		dead[i] = add(db, "k", HOUR, 5);
		assert_int_equal(due_kill(db, &ks, dead[i]), 0);
		assert_int_equal(ks, DUE_DEAD);
	}
	assert_int_equal(due_stats_get(db, &s0), 0);
	due_close(db);
	sqlite_undo_v7();
	db = NULL;
	assert_int_equal(due_open(&db, url, NULL), DUE_ESCHEMA);
	due_close(db);

	due_open_opts o = DUE_OPEN_OPTS_INIT;
	o.create = true;
	db = NULL;
	assert_int_equal(due_open(&db, url, &o), 0);
	assert_int_equal(
	    sql_int("SELECT value FROM due_meta WHERE name = 'schema_version'"),
	    DUE_SCHEMA_VERSION);
	assert_int_equal(sql_int("SELECT count(*) FROM sqlite_schema"
				 " WHERE type = 'index' AND name IN"
				 " ('due_task_due', 'due_task_cancelled_id',"
				 " 'due_task_dead_id')"),
			 0);
	assert_int_equal(sql_int("SELECT count(*) FROM sqlite_schema"
				 " WHERE name = 'due_task_ended_id'"),
			 1);
	assert_int_equal(due_stats_get(db, &s1), 0);
	for (int i = 0; i < DUE_STATE_COUNT; i++)
		assert_int_equal(s1.counts[i], s0.counts[i]);
	assert_int_equal(s1.counts[DUE_CANCELLED], 3);
	assert_int_equal(s1.counts[DUE_DEAD], 2);
	assert_int_equal(s1.due_unclaimed, 1);
	assert_true(s1.oldest_due_unclaimed_ms >= 2000);
	assert_int_equal(list_ids(db, DUE_CANCELLED, ids, 8), 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(ids[i], cancelled[i]);
	assert_int_equal(list_ids(db, DUE_DEAD, ids, 8), 2);
	for (int i = 0; i < 2; i++)
		assert_int_equal(ids[i], dead[i]);

	due_upcoming *u = NULL;
	assert_int_equal(
	    due_upcoming_get(db, &u, NULL, 0, false, now + HOUR, 10), 0);
	assert_int_equal(u->count, 2);
	assert_int_equal(u->ids[0], overdue);
	assert_int_equal(u->ids[1], later);
	due_upcoming_free(u);
	due_task_list *l = claim_n(db, "w", NULL, 10, LONG_LEASE);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, overdue);
	due_task_list_free(l);
	due_close(db);
}

/*
** What reads SCHEDULED tasks in due order reads them across priorities:
** the wheel's refill (upcoming: earliest first whatever the priority, cut
** at the limit), the overdue count and oldest of stats, and the claim's
** first look (SQLite walks due_task_claim one priority at a time since
** version 7).
*/
static void test_due_order_across_priorities(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_upcoming *u = NULL;
	due_stats st;
	due_time now;

	assert_int_equal(due_now(db, &now), 0);
	due_id a = add_flow(db, "k", now - 3000000, 5, NULL, 0);
	due_id b = add_flow(db, "k", now - 2000000, 0, NULL, 0);
	due_id c = add_flow(db, "k", now - 1000000, -2, NULL, 0);
	due_id d = add_flow(db, "k", now + HOUR / 2, 5, NULL, 0);
	add_flow(db, "k", now + 2 * HOUR, -2, NULL, 0);

	assert_int_equal(
	    due_upcoming_get(db, &u, NULL, 0, false, now + HOUR, 100), 0);
	assert_int_equal(u->count, 4);
	assert_int_equal(u->ids[0], a);
	assert_int_equal(u->ids[1], b);
	assert_int_equal(u->ids[2], c);
	assert_int_equal(u->ids[3], d);
	for (size_t i = 1; i < u->count; i++)
		assert_true(u->due_at[i - 1] <= u->due_at[i]);
	assert_false(u->truncated);
	due_upcoming_free(u);
	assert_int_equal(
	    due_upcoming_get(db, &u, NULL, 0, false, now + HOUR, 2), 0);
	assert_int_equal(u->count, 2);
	assert_int_equal(u->ids[0], a);
	assert_int_equal(u->ids[1], b);
	assert_true(u->truncated);
	due_upcoming_free(u);

	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.due_unclaimed, 3);
	assert_true(st.oldest_due_unclaimed_ms >= 3000);
	assert_true(st.oldest_due_unclaimed_ms < 3000 + 600000);

	/* the claim sees them, lowest priority number first */
	due_task_list *l = claim_n(db, "w", NULL, 10, LONG_LEASE);
	assert_int_equal(l->count, 3);
	assert_int_equal(l->items[0].id, c);
	assert_int_equal(l->items[1].id, b);
	assert_int_equal(l->items[2].id, a);
	due_task_list_free(l);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.due_unclaimed, 0);
	assert_int_equal(st.oldest_due_unclaimed_ms, 0);
	due_close(db);
}

/* A time shift of `col` back by us microseconds, as SQL. */
static const char *BACK(const char *col, int64_t us)
{
	char *b = scratch();
	if (int_times())
		snprintf(b, 112, "%s - %lld", col, (long long)us);
	else
		snprintf(b, 112, "%s - %lld * interval '1 microsecond'", col,
			 (long long)us);
	return b;
}

/* The rate log of kind moved `us` into the past. */
static void rate_back(const char *kind, int64_t us)
{
	(void)kind; /* only RD() reads it, and not in every build */
	if (is_redis())
		(void)RD(tu_rd_zshift(tu_rd_key("rate:%s", kind), -us));
	else
		sql("UPDATE due_rate SET at = %s", BACK("at", us));
}

/* Entries of the rate log (Redis: of kind; SQL: of every kind). */
static int64_t rate_count(const char *kind)
{
	(void)kind; /* only RD() reads it, and not in every build */
	if (is_redis())
		return RD(tu_rd("ZCARD %s", tu_rd_key("rate:%s", kind)));
	return sql_int("SELECT count(*) FROM due_rate");
}

/* rate N per window: N claims, then none until the log leaves the window. */
static void test_flow_rate(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_time now;

	assert_int_equal(due_now(db, &now), 0);
	for (int i = 0; i < 5; i++)
		add_flow(db, "r", now - 1000 * (5 - i), 0, NULL, 0);
	due_id other = add_flow(db, "o", now, 0, NULL, 0);
	assert_int_equal(kind_set(db, "r", -1, 2, HOUR, -1, -1, -1), 0);

	due_task_list *l = claim_n(db, "w", NULL, 10, LONG_LEASE);
	assert_int_equal(l->count, 3); /* 2 of r, and the other kind */
	assert_true(listed(l, other));
	assert_true(l->retry_in_us > 0 && l->retry_in_us <= HOUR);
	due_task_list_free(l);
	l = claim_n(db, "w", "r", 10, LONG_LEASE);
	assert_int_equal(l->count, 0);
	assert_true(l->retry_in_us > 0 && l->retry_in_us <= HOUR);
	due_task_list_free(l);
	due_task *t = NULL;
	assert_int_equal(due_claim_id(db, &t, 3, "w", LONG_LEASE), DUE_EBUSY);
	due_kind_info *k = kind_info(db, "r");
	assert_int_equal(k->rate_n, 2);
	assert_int_equal(k->rate_us, HOUR);
	assert_int_equal(k->rate_used, 2);
	assert_int_equal(k->due, 3);
	assert_true(k->held_rate >= 2);
	assert_int_equal(k->held_running, 0);
	due_kind_info_free(k);

	/* the log moved back past the window: the next claims are free
	   again, and the entries out of the window are deleted then */
	rate_back("r", HOUR);
	l = claim_n(db, "w", "r", 1, LONG_LEASE);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->retry_in_us, 0); /* the claim was full first */
	due_task_list_free(l);
	assert_int_equal(rate_count("r"), 1);
	l = claim_n(db, "w", "r", 10, LONG_LEASE);
	assert_int_equal(l->count, 1);
	assert_true(l->retry_in_us > 0);
	due_task_list_free(l);
	assert_int_equal(rate_count("r"), 2);
	due_close(db);
}

/* max_running holds across handles; a completion frees a slot. */
static void test_flow_max_running(void **state)
{
	(void)state;
	due_db *a = open_db(), *b = open_db();
	due_fail_outcome fo;
	due_time now;

	assert_int_equal(due_now(a, &now), 0);
	for (int i = 0; i < 4; i++)
		add_flow(a, "m", now - 1000 * (4 - i), 0, NULL, 0);
	assert_int_equal(kind_set(a, "m", -1, -1, 0, 2, -1, -1), 0);

	due_task_list *la = claim_n(a, "wa", NULL, 10, LONG_LEASE);
	assert_int_equal(la->count, 2);
	assert_true(la->retry_in_us > 0);
	due_task_list *lb = claim_n(b, "wb", NULL, 10, LONG_LEASE);
	assert_int_equal(lb->count, 0);
	assert_true(lb->retry_in_us > 0);
	due_task_list_free(lb);
	due_kind_info *k = kind_info(b, "m");
	assert_int_equal(k->running, 2);
	assert_int_equal(k->due, 2);
	assert_true(k->held_running >= 2);
	due_kind_info_free(k);

	due_complete_outcome co;
	assert_int_equal(
	    due_complete(a, &co, la->items[0].id, la->items[0].attempt, "r", 1),
	    0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	lb = claim_n(b, "wb", NULL, 10, LONG_LEASE);
	assert_int_equal(lb->count, 1);
	due_task_list_free(lb);
	/* a failure frees one too */
	assert_int_equal(
	    due_fail(a, &fo, la->items[1].id, la->items[1].attempt, "x"), 0);
	lb = claim_n(b, "wb", NULL, 10, LONG_LEASE);
	assert_int_equal(lb->count, 1);
	due_task_list_free(lb);
	due_task_list_free(la);
	due_close(a);
	due_close(b);
}

/* A full group is skipped: the tasks of other groups behind it run. */
static void test_flow_group_limit(void **state)
{
	(void)state;
	due_db *db = open_db();
	const char *why = NULL;
	due_time now;

	assert_int_equal(due_now(db, &now), 0);
	due_id a1 = add_flow(db, "g", now - 5000, 0, "A", 0);
	due_id a2 = add_flow(db, "g", now - 4000, 0, "A", 0);
	due_id a3 = add_flow(db, "g", now - 3500, 0, "A", 0);
	due_id b1 = add_flow(db, "g", now - 3000, 0, "B", 0);
	due_id n1 = add_flow(db, "g", now - 2000, 0, NULL, 0);
	due_id b2 = add_flow(db, "g", now - 1000, 0, "B", 0);
	assert_int_equal(kind_set(db, "g", -1, -1, 0, -1, 1, -1), 0);

	due_task_list *l = claim_n(db, "w", NULL, 1, LONG_LEASE);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, a1);
	assert_string_equal(l->items[0].group, "A");
	due_task_list_free(l);
	/* A is at its limit: B's first task and the groupless one, not b2 */
	l = claim_n(db, "w", NULL, 10, LONG_LEASE);
	assert_int_equal(l->count, 2);
	assert_true(listed(l, b1));
	assert_true(listed(l, n1));
	assert_true(l->retry_in_us > 0);
	due_task_list_free(l);
	assert_int_equal(state_of(db, a2), DUE_SCHEDULED);
	assert_int_equal(state_of(db, b2), DUE_SCHEDULED);
	due_task *t = get(db, a2);
	assert_int_equal(due_task_hold(db, &why, t), 0);
	assert_string_equal(why, "max_running_per_group");
	due_task_free(t);
	assert_int_equal(due_claim_id(db, &t, a3, "w", LONG_LEASE), DUE_EBUSY);
	due_kind_info *k = kind_info(db, "g");
	assert_int_equal(k->running, 3);
	assert_true(k->held_group >= 2);
	due_kind_info_free(k);
	due_close(db);
}

/* A lease that expires stops counting, before any reclaim runs. */
static void test_flow_expired_lease_frees_slot(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_time now;

	assert_int_equal(due_now(db, &now), 0);
	due_id first = add_flow(db, "m", now - 2000, 0, NULL, 0);
	due_id second = add_flow(db, "m", now - 1000, 0, NULL, 0);
	assert_int_equal(kind_set(db, "m", -1, -1, 0, 1, -1, -1), 0);
	due_task_list *l = claim_n(db, "w", NULL, 10, 50000);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, first);
	due_time until = l->items[0].lease_until;
	due_task_list_free(l);

	int64_t end = mono_ms() + HANG_MS;
	for (;;) {
		l = claim_n(db, "w", NULL, 10, LONG_LEASE);
		due_time after;
		assert_int_equal(due_now(db, &after), 0);
		if (l->count) {
			assert_int_equal(l->items[0].id, second);
			assert_true(after > until); /* not while it was live */
			due_task_list_free(l);
			break;
		}
		due_task_list_free(l);
		if (mono_ms() > end)
			fail_msg("the expired lease never freed its slot");
		tu_sleep_ms(5);
	}
	assert_int_equal(state_of(db, first), DUE_CLAIMED); /* not reclaimed */
	due_close(db);
}

/* The time limit handed out: the task's own, else its kind's, else 0. */
static void test_flow_timeout_effective(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_time now;

	assert_int_equal(due_now(db, &now), 0);
	due_id own = add_flow(db, "t", now - 3000, 0, NULL, 2000000);
	due_id kinds = add_flow(db, "t", now - 2000, 0, NULL, 0);
	due_id none = add_flow(db, "u", now - 1000, 0, NULL, 0);
	assert_int_equal(kind_set(db, "t", -1, -1, 0, -1, -1, 5000000), 0);

	due_task_list *l = claim_n(db, "w", NULL, 10, LONG_LEASE);
	assert_int_equal(l->count, 3);
	for (size_t i = 0; i < l->count; i++) {
		const due_task *c = &l->items[i];
		int64_t want = c->id == own	? 2000000
			       : c->id == kinds ? 5000000
						: 0;
		assert_int_equal(c->timeout_us, want);
	}
	due_task_list_free(l);
	due_task *t = get(db, kinds); /* the task's own: none */
	assert_int_equal(t->timeout_us, 0);
	due_task_free(t);
	t = get(db, own);
	assert_int_equal(t->timeout_us, 2000000);
	due_task_free(t);
	(void)none;
	due_close(db);
}

/* Claim task id once it is due again (its backoff), polling. */
static int32_t claim_again(due_db *db, due_id id)
{
	int64_t end = mono_ms() + HANG_MS;
	for (;;) {
		due_task_list *l = claim_n(db, "w", NULL, 1, LONG_LEASE);
		if (l->count) {
			assert_int_equal(l->items[0].id, id);
			int32_t a = l->items[0].attempt;
			due_task_list_free(l);
			return a;
		}
		due_task_list_free(l);
		if (mono_ms() > end)
			fail_msg("task %lld never came back", (long long)id);
		tu_sleep_ms(1);
	}
}

/* TIMED_OUT is recorded on the attempt and is a failure: retry, dead. */
static void test_flow_fail_timed_out(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_fail_outcome fo;
	due_submitted s;

	o.max_attempts = 2;
	o.backoff_us = 1000;
	o.backoff_cap_us = 1000;
	assert_int_equal(due_schedule(db, &s, "k", "p", 1, &o), 0);
	int32_t a = claim_again(db, s.id);
	assert_int_equal(due_fail_as(db, &fo, s.id, a, "timed out after 1s",
				     DUE_OUT_TIMED_OUT),
			 0);
	assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
	a = claim_again(db, s.id);
	assert_int_equal(due_fail_as(db, &fo, s.id, a, "plain", DUE_OUT_FAILED),
			 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	due_task *t = get(db, s.id);
	assert_int_equal(t->state, DUE_DEAD);
	assert_int_equal(t->n_attempts, 2);
	assert_string_equal(t->attempts[0].outcome, "TIMED_OUT");
	assert_string_equal(t->attempts[0].error, "timed out after 1s");
	assert_string_equal(t->attempts[1].outcome, "FAILED");
	due_task_free(t);
	/* a bad outcome is refused and changes nothing */
	assert_int_equal(due_fail_as(db, &fo, s.id, a, "x", DUE_OUT_DONE),
			 DUE_EINVAL);
	assert_int_equal(state_of(db, s.id), DUE_DEAD);
	due_close(db);
}

static void assert_kind_eq(const due_kind_info *x, const due_kind_info *y)
{
	assert_int_equal(x->paused, y->paused);
	assert_int_equal(x->rate_n, y->rate_n);
	assert_int_equal(x->rate_us, y->rate_us);
	assert_int_equal(x->max_running, y->max_running);
	assert_int_equal(x->max_running_per_group, y->max_running_per_group);
	assert_int_equal(x->timeout_us, y->timeout_us);
	assert_int_equal(x->updated_at, y->updated_at);
}

/* Settings: set, keep, clear, list, remove; refusals change nothing. */
static void test_flow_kind_settings(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_kind_info_list *kl = NULL;
	due_kind_info *k = NULL;

	assert_int_equal(due_kind_get(db, &k, "s"), DUE_ENOTFOUND);
	assert_null(k);
	assert_int_equal(due_kind_list(db, &kl), 0);
	assert_int_equal(kl->count, 0);
	due_kind_info_list_free(kl);

	assert_int_equal(kind_set(db, "s", -1, 10, 1000000, 3, 2, 5000000), 0);
	k = kind_info(db, "s");
	assert_false(k->paused);
	assert_int_equal(k->rate_n, 10);
	assert_int_equal(k->rate_us, 1000000);
	assert_int_equal(k->max_running, 3);
	assert_int_equal(k->max_running_per_group, 2);
	assert_int_equal(k->timeout_us, 5000000);
	assert_int_equal(k->running, 0);
	assert_int_equal(k->rate_used, 0);
	assert_int_equal(k->held_rate + k->held_running + k->held_group, 0);
	assert_true(k->updated_at > 0);
	due_kind_info_free(k);

	/* -1 keeps, 0 clears */
	assert_int_equal(kind_set(db, "s", 1, 0, 0, -1, 0, -1), 0);
	k = kind_info(db, "s");
	assert_true(k->paused);
	assert_int_equal(k->rate_n, 0);
	assert_int_equal(k->rate_us, 0);
	assert_int_equal(k->max_running, 3);
	assert_int_equal(k->max_running_per_group, 0);
	assert_int_equal(k->timeout_us, 5000000);

	/* refusals: checked before the store, nothing changes */
	due_kind_settings bad = DUE_KIND_SETTINGS_INIT;
	assert_int_equal(due_kind_set(db, "s", &bad), DUE_EINVAL);
	assert_int_equal(due_kind_set(db, "new", &bad), DUE_EINVAL);
	assert_int_equal(kind_set(db, "s", -1, 5, 0, -1, -1, -1), DUE_EINVAL);
	assert_int_equal(kind_set(db, "s", -1, -2, 0, -1, -1, -1), DUE_EINVAL);
	assert_int_equal(kind_set(db, "s", 2, -1, 0, -1, -1, -1), DUE_EINVAL);
	assert_int_equal(kind_set(db, "s", -1, -1, 0, -5, -1, -1), DUE_EINVAL);
	assert_int_equal(kind_set(db, "s", -1, -1, 0, 2000000, -1, -1),
			 DUE_EINVAL);
	assert_int_equal(kind_set(db, "s", -1, -1, 0, -1, -1, -7), DUE_EINVAL);
	assert_int_equal(kind_set(db, "", 1, -1, 0, -1, -1, -1), DUE_EINVAL);
	bad.version = 99;
	bad.paused = 1;
	assert_int_equal(due_kind_set(db, "s", &bad), DUE_EINVAL);
	due_kind_info *same = kind_info(db, "s");
	assert_kind_eq(k, same);
	due_kind_info_free(same);
	due_kind_info_free(k);
	assert_int_equal(due_kind_get(db, &k, "new"), DUE_ENOTFOUND);

	/* list by name; remove; a second remove is refused */
	assert_int_equal(kind_set(db, "a", -1, -1, 0, -1, -1, 1000000), 0);
	assert_int_equal(due_kind_list(db, &kl), 0);
	assert_int_equal(kl->count, 2);
	assert_string_equal(kl->items[0].kind, "a");
	assert_string_equal(kl->items[1].kind, "s");
	assert_true(kl->items[1].paused);
	due_kind_info_list_free(kl);
	assert_int_equal(due_kind_remove(db, "s"), 0);
	assert_int_equal(due_kind_remove(db, "s"), DUE_ENOTFOUND);
	assert_int_equal(due_kind_get(db, &k, "s"), DUE_ENOTFOUND);
	assert_int_equal(due_kind_list(db, &kl), 0);
	assert_int_equal(kl->count, 1);
	due_kind_info_list_free(kl);

	/* removing a rate-limited kind forgets its log too */
	due_time now;
	assert_int_equal(due_now(db, &now), 0);
	add_flow(db, "r", now, 0, NULL, 0);
	assert_int_equal(kind_set(db, "r", -1, 1, HOUR, -1, -1, -1), 0);
	due_task_list *l = claim_n(db, "w", NULL, 10, LONG_LEASE);
	assert_int_equal(l->count, 1);
	due_task_list_free(l);
	assert_int_equal(rate_count("r"), 1);
	assert_int_equal(due_kind_remove(db, "r"), 0);
	assert_int_equal(rate_count("r"), 0);
	due_close(db);
}

/* SQLite: a store taken back to version 10 (step 11 undone): run after. */
static void sqlite_undo_v11(void)
{
	static const char *const undo[] = {
	    "DROP INDEX due_task_held",
	    "DROP TABLE due_after",
	    "ALTER TABLE due_task DROP COLUMN after_n",
	    "ALTER TABLE due_task DROP COLUMN after_left",
	    "ALTER TABLE due_task DROP COLUMN after_any_end",
	    "ALTER TABLE due_task DROP COLUMN after_at",
	    "ALTER TABLE due_task DROP COLUMN after_delay_us",
	    "UPDATE due_meta SET value = '10' WHERE name = 'schema_version'",
	};
	for (size_t i = 0; i < sizeof(undo) / sizeof(undo[0]); i++)
		sql("%s", undo[i]);
}

/*
** SQLite: a store taken back to version 5 (step 6 undone): each running
** try gets its RUNNING attempt row back from its task row, as a version 5
** claim wrote it.
*/
/* SQLite: a store taken back to version 6 (step 7 undone): its indexes. */
static void sqlite_undo_v7(void)
{
	sqlite_undo_v11(); /* steps 8..10 only recorded their version */
	static const char *const undo[] = {
	    "DROP INDEX due_task_ended_id",
	    "CREATE INDEX due_task_due ON due_task (due_at)"
	    " WHERE state = 'SCHEDULED'",
	    "CREATE INDEX due_task_cancelled_id ON due_task (id)"
	    " WHERE state = 'CANCELLED'",
	    "CREATE INDEX due_task_dead_id ON due_task (id)"
	    " WHERE state = 'DEAD'",
	    "UPDATE due_meta SET value = '6' WHERE name = 'schema_version'",
	};
	for (size_t i = 0; i < sizeof(undo) / sizeof(undo[0]); i++)
		sql("%s", undo[i]);
}

static void sqlite_undo_v6(void)
{
	sqlite_undo_v7();
	static const char *const undo[] = {
	    "INSERT INTO due_attempt (task_id, attempt, worker, claimed_at,"
	    " due_at) SELECT id, attempt, lease_owner, claimed_at, due_at"
	    " FROM due_task WHERE state = 'CLAIMED'",
	    "ALTER TABLE due_task DROP COLUMN claimed_at",
	    "UPDATE due_meta SET value = '5' WHERE name = 'schema_version'",
	};
	for (size_t i = 0; i < sizeof(undo) / sizeof(undo[0]); i++)
		sql("%s", undo[i]);
}

/* SQLite: a fresh store taken back to version 4 (steps 6, 5 undone). */
static void sqlite_undo_v5(void)
{
	sqlite_undo_v6();
	static const char *const undo[] = {
	    "DROP INDEX due_task_sched_id",
	    "DROP INDEX due_task_done_id",
	    "DROP INDEX due_task_cancelled_id",
	    "DROP INDEX due_task_dead_id",
	    "DROP TABLE due_lock",
	    "ALTER TABLE due_worker DROP COLUMN pruned",
	    "UPDATE due_meta SET value = '4' WHERE name = 'schema_version'",
	};
	for (size_t i = 0; i < sizeof(undo) / sizeof(undo[0]); i++)
		sql("%s", undo[i]);
}

/*
** A version 3 store upgrades in place: its tasks get priority 0, no
** group and no time limit, and are claimed as before.  SQLite only: the
** v3 layout is made from a fresh store by undoing step 4 (PostgreSQL's
** upgrades are tested in test_pg_store.c).
*/
static void test_flow_v3_upgrade(void **state)
{
	(void)state;
	if (!on_sqlite())
		return;
	due_db *db = open_db();
	due_id id = add(db, "k", 0, 5);
	due_close(db);
	sqlite_undo_v5();
	static const char *const undo[] = {
	    "DROP TABLE due_kind",
	    "DROP TABLE due_rate",
	    "DROP INDEX due_task_claim",
	    "DROP INDEX due_task_kind_claim",
	    "ALTER TABLE due_task DROP COLUMN priority",
	    "ALTER TABLE due_task DROP COLUMN grp",
	    "ALTER TABLE due_task DROP COLUMN timeout_us",
	    "UPDATE due_meta SET value = '3' WHERE name = 'schema_version'",
	};
	for (size_t i = 0; i < sizeof(undo) / sizeof(undo[0]); i++)
		sql("%s", undo[i]);
	db = NULL;
	assert_int_equal(due_open(&db, url, NULL), DUE_ESCHEMA);
	due_close(db);

	due_open_opts o = DUE_OPEN_OPTS_INIT;
	o.create = true;
	db = NULL;
	assert_int_equal(due_open(&db, url, &o), 0);
	assert_int_equal(
	    sql_int("SELECT value FROM due_meta WHERE name = 'schema_version'"),
	    DUE_SCHEMA_VERSION);
	due_task *t = get(db, id);
	assert_int_equal(t->priority, 0);
	assert_null(t->group);
	assert_int_equal(t->timeout_us, 0);
	due_task_free(t);
	claim_one(db, id, LONG_LEASE);
	assert_int_equal(kind_set(db, "k", 1, -1, 0, -1, -1, -1), 0);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Production scale (issue 15): retention's lease and prune, the       */
/* store's size, exact and estimated reads                             */
/* ------------------------------------------------------------------ */

/*
** n tasks of `kind` run to DONE through the API: one batch submit, then
** claims of that kind completed in batches until all n are done.
*/
static void done_many(due_db *db, const char *kind, int n)
{
	due_submit *items = calloc((size_t)n, sizeof(*items));
	due_submitted *out = calloc((size_t)n, sizeof(*out));
	due_completion *c = calloc((size_t)n, sizeof(*c));
	int done = 0;

	assert_non_null(items);
	assert_non_null(out);
	assert_non_null(c);
	for (int i = 0; i < n; i++)
		items[i] = (due_submit){kind, "", 0, DUE_SCHEDULE_OPTS_INIT};
	assert_int_equal(due_schedule_batch(db, out, items, (size_t)n), 0);
	int64_t end = mono_ms() + HANG_MS;
	while (done < n) {
		due_task_list *l = NULL;
		assert_int_equal(due_claim(db, &l, "w", &kind, 1,
					   n - done > 1000 ? 1000 : n - done,
					   LONG_LEASE),
				 0);
		for (size_t i = 0; i < l->count; i++)
			c[i] = (due_completion){l->items[i].id,
						l->items[i].attempt, "", 0, 0};
		assert_int_equal(due_complete_batch(db, c, l->count), 0);
		for (size_t i = 0; i < l->count; i++)
			assert_int_equal(c[i].outcome, DUE_COMPLETE_DONE);
		done += (int)l->count;
		due_task_list_free(l);
		if (mono_ms() > end)
			fail_msg("%d of %d tasks of %s done", done, n, kind);
	}
	free(items);
	free(out);
	free(c);
}

/* Every DONE and CANCELLED task's end moved `us` into the past. */
static void finished_back(int64_t us)
{
	if (is_redis())
		(void)RD(tu_rd_zshift(tu_rd_key("fin"), -us));
	else
		sql("UPDATE due_task SET updated_at = %s"
		    " WHERE state IN ('DONE', 'CANCELLED')",
		    BACK("updated_at", us));
}

/* Attempt rows of task id left in the store. */
static int64_t attempt_rows(due_id id)
{
	/* Redis keeps a running try's record in the task hash (its claim
	   time 'n') until the try ends, then in the task's a: hash; SQLite
	   in the task row (claimed_at, read when CLAIMED), then in
	   due_attempt */
	if (is_redis()) {
		int64_t n = RD(tu_rd("EXISTS %s", tu_rd_key("a:%lld", id)));
		return n + RD(tu_rd("HEXISTS %s n", tu_rd_key("t:%lld", id)));
	}
	if (on_sqlite())
		return sql_int("SELECT (SELECT count(*) FROM due_attempt WHERE"
			       " task_id = %lld) + (SELECT count(*) FROM"
			       " due_task WHERE id = %lld AND state ="
			       " 'CLAIMED')",
			       (long long)id, (long long)id);
	return sql_int("SELECT count(*) FROM due_attempt WHERE task_id = %lld",
		       (long long)id);
}

/*
** Retention's one-pruner-at-a-time lease: taken when free, renewed by
** its owner, refused to another owner while it runs (and that refusal
** takes nothing from the owner), taken by another once it ran out; names
** are independent.
*/
static void test_lock_take(void **state)
{
	(void)state;
	due_db *db = open_db();
	bool held = false;

	assert_int_equal(due__lock_take(db, &held, "prune", "a", LONG_LEASE),
			 0);
	assert_true(held);
	held = false;
	assert_int_equal(due__lock_take(db, &held, "prune", "a", LONG_LEASE),
			 0);
	assert_true(held); /* renewed by its owner */
	held = true;
	assert_int_equal(due__lock_take(db, &held, "prune", "b", LONG_LEASE),
			 0);
	assert_false(held); /* another owner's lease runs */
	assert_int_equal(due__lock_take(db, &held, "prune", "a", LONG_LEASE),
			 0);
	assert_true(held); /* b's refusal changed nothing */
	assert_int_equal(due__lock_take(db, &held, "prune", "b", LONG_LEASE),
			 0);
	assert_false(held);
	assert_int_equal(due__lock_take(db, &held, "other", "b", LONG_LEASE),
			 0);
	assert_true(held); /* names are independent */
	assert_int_equal(due__lock_take(db, &held, "prune", "a", 0),
			 DUE_EINVAL);
	assert_false(held);

	/* a short lease runs out (the store's clock), then b takes it and a
	   has lost it */
	assert_int_equal(due__lock_take(db, &held, "short", "a", 1000), 0);
	assert_true(held);
	int64_t end = mono_ms() + HANG_MS;
	for (held = false; !held; tu_sleep_ms(1)) {
		assert_int_equal(
		    due__lock_take(db, &held, "short", "b", LONG_LEASE), 0);
		if (!held && mono_ms() > end)
			fail_msg("an expired lease was never taken");
	}
	assert_int_equal(due__lock_take(db, &held, "short", "a", LONG_LEASE),
			 0);
	assert_false(held);
	assert_int_equal(due__lock_take(db, &held, "short", "b", LONG_LEASE),
			 0);
	assert_true(held);
	due_close(db);
}

/*
** prune with max_rows: oldest first, stops after max_rows, 0 = all (more
** than DUE_PRUNE_BATCH, so in several transactions), with the attempt
** rows; never SCHEDULED, CLAIMED, DEAD or a DONE task inside the
** retention.  Ends are moved into the past (finished_back), so the
** retention of an hour decides, not the test's speed.
*/
static void test_prune_max(void **state)
{
	(void)state;
	due_db *db = open_db();
	const int n = DUE_PRUNE_BATCH + 150;
	due_complete_outcome co;
	due_cancel_outcome cc;
	due_fail_outcome fo;
	due_stats st;
	int64_t deleted = -1;

	/* the oldest: one DONE task 3 h ago, then n DONE and one CANCELLED
	   2 h ago */
	due_id oldest = add(db, "first", 0, 5);
	claim_one(db, oldest, LONG_LEASE);
	assert_int_equal(due_complete(db, &co, oldest, 1, "", 0), 0);
	finished_back(HOUR);
	done_many(db, "old", n);
	due_id gone = add(db, "old", HOUR, 5);
	assert_int_equal(due_cancel(db, &cc, gone), 0);
	finished_back(2 * HOUR);

	/* what stays: waiting, running, dead, and a recent DONE */
	due_id sched = add(db, "keep", HOUR, 5);
	due_id run = add(db, "keep", 0, 5);
	claim_one(db, run, LONG_LEASE);
	due_id dead = add(db, "keep", 0, 1);
	claim_one(db, dead, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, dead, 1, "x"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	due_id recent = add(db, "keep", 0, 5);
	claim_one(db, recent, LONG_LEASE);
	assert_int_equal(due_complete(db, &co, recent, 1, "", 0), 0);
	if (!is_redis()) /* SQL: the kept rows are old too; state decides */
		sql("UPDATE due_task SET updated_at = %s WHERE id IN "
		    "(%lld, %lld, %lld)",
		    BACK("updated_at", 3 * HOUR), (long long)sched,
		    (long long)run, (long long)dead);

	assert_int_equal(due__prune_max(db, &deleted, HOUR, 1), 0);
	assert_int_equal(deleted, 1);
	due_task *t = NULL;
	assert_int_equal(due_get(db, &t, oldest), DUE_ENOTFOUND);
	assert_int_equal(attempt_rows(oldest), 0);
	assert_int_equal(due__prune_max(db, &deleted, HOUR, 5), 0);
	assert_int_equal(deleted, 5);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_DONE] + st.counts[DUE_CANCELLED],
			 n + 1 - 5 + 1);
	assert_int_equal(due__prune_max(db, &deleted, HOUR, -1), DUE_EINVAL);

	/* 0: everything older than the retention, batch after batch */
	assert_int_equal(due__prune_max(db, &deleted, HOUR, 0), 0);
	assert_int_equal(deleted, n + 1 - 5);
	assert_true(deleted > DUE_PRUNE_BATCH);
	assert_int_equal(due_get(db, &t, gone), DUE_ENOTFOUND);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.estimated, 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], 1);
	assert_int_equal(st.counts[DUE_CLAIMED], 1);
	assert_int_equal(st.counts[DUE_DEAD], 1);
	assert_int_equal(st.counts[DUE_DONE], 1);
	assert_int_equal(st.counts[DUE_CANCELLED], 0);
	assert_int_equal(state_of(db, sched), DUE_SCHEDULED);
	assert_int_equal(state_of(db, run), DUE_CLAIMED);
	assert_int_equal(state_of(db, dead), DUE_DEAD);
	assert_int_equal(state_of(db, recent), DUE_DONE);
	assert_int_equal(attempt_rows(run), 1);
	assert_int_equal(attempt_rows(recent), 1);
	assert_int_equal(due__prune_max(db, &deleted, HOUR, 0), 0);
	assert_int_equal(deleted, 0);
	due_close(db);
}

/* What the store occupies: something, and more after many tasks. */
static void test_store_bytes(void **state)
{
	(void)state;
	enum { N = 500, ROUNDS = 8, LEN = 2048 };
	due_db *db = open_db();
	static due_submit items[N];
	static due_submitted out[N];
	static char payload[LEN];
	int64_t b0 = 0, b1 = 0;

	assert_int_equal(due_store_bytes(db, &b0), 0);
	assert_true(b0 > 0);
	memset(payload, 'x', sizeof(payload));
	for (int i = 0; i < N; i++)
		items[i] =
		    (due_submit){"big", payload, LEN, DUE_SCHEDULE_OPTS_INIT};
	for (int r = 0; r < ROUNDS; r++)
		assert_int_equal(due_schedule_batch(db, out, items, N), 0);
	assert_int_equal(due_store_bytes(db, &b1), 0);
	if (b1 <= b0)
		fail_msg("%d tasks of %d bytes: %lld bytes, before %lld",
			 N * ROUNDS, LEN, (long long)b1, (long long)b0);
	due_close(db);
}

/*
** stats and metrics: with few tasks every count is exact and no bit is
** set; the transitions keep them so; window_us is the metrics window and
** `pruned` sums the live workers' reports.
*/
static void test_stats_exact(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_complete_outcome co;
	due_cancel_outcome cc;
	due_fail_outcome fo;
	due_metrics *m = NULL;
	due_stats st;
	due_time now;

	add(db, "a", HOUR, 5);
	add(db, "a", HOUR, 5);
	add(db, "a", HOUR, 5);
	due_id run = add(db, "b", 0, 5);
	claim_one(db, run, LONG_LEASE);
	due_id dead = add(db, "b", 0, 1);
	claim_one(db, dead, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, dead, 1, "x"), 0);
	due_id ok = add(db, "a", 0, 5);
	claim_one(db, ok, LONG_LEASE);
	assert_int_equal(due_complete(db, &co, ok, 1, "", 0), 0);
	due_id cx = add(db, "a", HOUR, 5);
	assert_int_equal(due_cancel(db, &cc, cx), 0);
	add(db, "c", 0, 5);
	add(db, "c", 0, 5);

	assert_int_equal(due_stats_get(db, &st), 0);
	int64_t want[DUE_STATE_COUNT] = {5, 1, 1, 1, 1};
	for (int i = 0; i < DUE_STATE_COUNT; i++)
		assert_int_equal(st.counts[i], want[i]);
	assert_int_equal(st.estimated, 0);
	assert_int_equal(st.dead, 1);
	assert_int_equal(st.due_unclaimed, 2);

	due_worker_stats w1 = {.pruned = 3}, w2 = {.pruned = 4},
			 w3 = {.pruned = 1000};
	assert_int_equal(due_worker_report(db, "live-1", &w1), 0);
	assert_int_equal(due_worker_report(db, "live-2", &w2), 0);
	assert_int_equal(due_worker_report(db, "gone", &w3), 0);
	assert_int_equal(due_now(db, &now), 0);
	if (is_redis()) {
		(void)RD(tu_rd("HSET %s seen_at %lld", tu_rd_key("w:gone"),
			       (long long)(now - 6 * 60000000LL)));
		(void)RD(tu_rd("ZADD %s %lld gone", tu_rd_key("workers"),
			       (long long)(now - 6 * 60000000LL)));
	} else
		sql("UPDATE due_worker SET seen_at = %s WHERE owner = 'gone'",
		    TS(now - 6 * 60000000LL));
	w1.pruned = 5; /* a report replaces the last one */
	assert_int_equal(due_worker_report(db, "live-1", &w1), 0);

	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->window_us, DUE_METRICS_WINDOW_US);
	assert_int_equal(m->pruned, 9);
	assert_int_equal(m->kinds_estimated, 0);
	assert_int_equal(m->n_kinds, 3);
	int64_t kw[3][DUE_STATE_COUNT] = {
	    {3, 0, 1, 1, 0}, {0, 1, 0, 0, 1}, {2, 0, 0, 0, 0}};
	for (int k = 0; k < 3; k++)
		for (int i = 0; i < DUE_STATE_COUNT; i++)
			assert_int_equal(m->kinds[k].counts[i], kw[k][i]);
	due_metrics_free(m);

	/* the transitions keep them exact: requeue, retry, prune */
	assert_int_equal(due_requeue(db, run), 0);
	assert_int_equal(due_retry(db, dead), 0);
	assert_int_equal(due_stats_get(db, &st), 0);
	int64_t want2[DUE_STATE_COUNT] = {7, 0, 1, 1, 0};
	for (int i = 0; i < DUE_STATE_COUNT; i++)
		assert_int_equal(st.counts[i], want2[i]);
	assert_int_equal(st.dead, 0);
	assert_int_equal(st.due_unclaimed, 4);
	assert_int_equal(st.estimated, 0);
	due_close(db);
}

/*
** Among many tasks (written by the store's own bulk SQL, not on Redis):
** CLAIMED, DEAD and due_unclaimed stay exact; any other count is exact
** unless its bit says it is an estimate.
*/
static void test_stats_exact_at_size(void **state)
{
	(void)state;
	if (is_redis())
		return;
	enum { BULK = 20000 };
	due_db *db = open_db();
	due_fail_outcome fo;
	due_metrics *m = NULL;
	due_stats st;
	due_time now;

	due_id run = add(db, "b", 0, 5);
	claim_one(db, run, LONG_LEASE);
	due_id dead = add(db, "b", 0, 1);
	claim_one(db, dead, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, dead, 1, "x"), 0);
	add(db, "c", 0, 5);
	assert_int_equal(due_now(db, &now), 0);
	sql("WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g"
	    " WHERE x < %d) INSERT INTO due_task (kind, payload, state, due_at,"
	    " max_attempts, backoff_us, backoff_cap_us, created_at, updated_at)"
	    " SELECT 'bulk', '', 'SCHEDULED', %s, 5, 0, 0, %s, %s FROM g",
	    BULK, TS(now + HOUR), TS(now), TS(now));

	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_CLAIMED], 1);
	assert_int_equal(st.counts[DUE_DEAD], 1);
	assert_int_equal(st.dead, 1);
	assert_int_equal(st.due_unclaimed, 1);
	assert_int_equal(st.estimated & (1u << DUE_CLAIMED | 1u << DUE_DEAD),
			 0);
	if (!(st.estimated & 1u << DUE_SCHEDULED))
		assert_int_equal(st.counts[DUE_SCHEDULED], BULK + 1);
	else
		assert_true(st.counts[DUE_SCHEDULED] > 0);
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->stats.due_unclaimed, 1);
	assert_int_equal(m->n_kinds, 3);
	assert_string_equal(m->kinds[0].kind, "b");
	assert_string_equal(m->kinds[1].kind, "bulk");
	assert_int_equal(m->kinds[0].counts[DUE_CLAIMED], 1);
	assert_int_equal(m->kinds[0].counts[DUE_DEAD], 1);
	if (!(m->kinds_estimated & 1u << DUE_SCHEDULED))
		assert_int_equal(m->kinds[1].counts[DUE_SCHEDULED], BULK);
	due_metrics_free(m);
	due_close(db);
}

/*
** SQLite: a version 4 store upgrades to 5 in place: the counters start
** from the tasks it holds and follow every transition after; the lease,
** the worker's pruned count and the list by state work.
*/
static void test_sqlite_v4_upgrade(void **state)
{
	(void)state;
	if (!on_sqlite())
		return;
	due_db *db = open_db();
	due_complete_outcome co;
	due_fail_outcome fo;
	due_metrics *m = NULL;
	due_stats st;
	bool held = false;

	add(db, "a", HOUR, 5);
	add(db, "a", HOUR, 5);
	due_id ok = add(db, "b", 0, 5);
	claim_one(db, ok, LONG_LEASE);
	assert_int_equal(due_complete(db, &co, ok, 1, "", 0), 0);
	due_id dead = add(db, "b", 0, 1);
	claim_one(db, dead, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, dead, 1, "x"), 0);
	due_close(db);
	sqlite_undo_v5();
	db = NULL;
	assert_int_equal(due_open(&db, url, NULL), DUE_ESCHEMA);
	due_close(db);

	due_open_opts o = DUE_OPEN_OPTS_INIT;
	o.create = true;
	db = NULL;
	assert_int_equal(due_open(&db, url, &o), 0);
	assert_int_equal(
	    sql_int("SELECT value FROM due_meta WHERE name = 'schema_version'"),
	    DUE_SCHEMA_VERSION);
	assert_int_equal(due_stats_get(db, &st), 0);
	int64_t want[DUE_STATE_COUNT] = {2, 0, 1, 0, 1};
	for (int i = 0; i < DUE_STATE_COUNT; i++)
		assert_int_equal(st.counts[i], want[i]);
	assert_int_equal(due_retry(db, dead), 0);
	add(db, "c", HOUR, 5);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], 4);
	assert_int_equal(st.counts[DUE_DEAD], 0);
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->n_kinds, 3);
	assert_int_equal(m->kinds[1].counts[DUE_SCHEDULED], 1); /* b */
	assert_int_equal(m->kinds[1].counts[DUE_DONE], 1);
	due_metrics_free(m);
	assert_int_equal(due__lock_take(db, &held, "prune", "w", HOUR), 0);
	assert_true(held);
	due_worker_stats ws = {.pruned = 2};
	assert_int_equal(due_worker_report(db, "w", &ws), 0);
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->pruned, 2);
	due_metrics_free(m);
	due_close(db);
}

/*
** SQLite: a version 5 store upgrades to 6 in place.  Its running tries
** have RUNNING attempt rows (a version 5 claim wrote them); after the
** upgrade each is its task row's, seen as before (history, metrics), and
** ends as any other: completed, failed, reclaimed, requeued, killed, each
** with one finished row and its claim time kept.  A late commit on a try
** ended after the upgrade is still marked.
*/
static void test_sqlite_v5_upgrade(void **state)
{
	(void)state;
	if (!on_sqlite())
		return;
	due_db *db = open_db();
	due_complete_outcome co;
	due_fail_outcome fo;
	due_metrics *m0 = NULL, *m1 = NULL;
	due_reclaimed rec;
	due_state killed;
	due_id run[5];

	for (int i = 0; i < 5; i++) {
		run[i] = add(db, "k", 0, 5);
		claim_one(db, run[i], i == 2 ? 1000 : LONG_LEASE);
	}
	due_id done = add(db, "k", 0, 5);
	claim_one(db, done, LONG_LEASE);
	assert_int_equal(due_complete(db, &co, done, 1, "", 0), 0);
	due_task *t0 = get(db, run[0]);
	assert_int_equal(t0->n_attempts, 1);
	assert_string_equal(t0->attempts[0].outcome, "RUNNING");
	assert_int_equal(due_metrics_get(db, &m0), 0);
	due_close(db);
	sqlite_undo_v6();
	assert_int_equal(
	    sql_int("SELECT count(*) FROM due_attempt WHERE outcome ="
		    " 'RUNNING'"),
	    5);
	db = NULL;
	assert_int_equal(due_open(&db, url, NULL), DUE_ESCHEMA);
	due_close(db);

	due_open_opts o = DUE_OPEN_OPTS_INIT;
	o.create = true;
	db = NULL;
	assert_int_equal(due_open(&db, url, &o), 0);
	assert_int_equal(
	    sql_int("SELECT value FROM due_meta WHERE name = 'schema_version'"),
	    DUE_SCHEMA_VERSION);
	/* the running tries moved into their tasks, seen as before */
	assert_int_equal(
	    sql_int("SELECT count(*) FROM due_attempt WHERE outcome ="
		    " 'RUNNING'"),
	    0);
	due_task *t1 = get(db, run[0]);
	assert_int_equal(t1->n_attempts, 1);
	assert_int_equal(t1->attempts[0].attempt, 1);
	assert_string_equal(t1->attempts[0].outcome, "RUNNING");
	assert_string_equal(t1->attempts[0].worker, t0->attempts[0].worker);
	assert_int_equal(t1->attempts[0].claimed_at,
			 t0->attempts[0].claimed_at);
	assert_int_equal(t1->attempts[0].due_at, t0->attempts[0].due_at);
	assert_int_equal(t1->attempts[0].ended_at, 0);
	due_task_free(t1);
	assert_int_equal(due_metrics_get(db, &m1), 0);
	assert_int_equal(m1->outcomes[DUE_OUT_RUNNING], 5);
	assert_int_equal(m1->outcomes[DUE_OUT_RUNNING],
			 m0->outcomes[DUE_OUT_RUNNING]);
	assert_int_equal(m1->lateness.count, m0->lateness.count);
	due_metrics_free(m0);
	due_metrics_free(m1);

	/* each ends with one finished row, its claim time kept */
	assert_int_equal(due_complete(db, &co, run[0], 1, "", 0), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_int_equal(due_fail(db, &fo, run[1], 1, "boom"), 0);
	assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
	/* run[2]: its 1 ms lease has expired, or soon will */
	for (int tries = 0; state_of(db, run[2]) == DUE_CLAIMED; tries++) {
		assert_true(tries < 1000);
		assert_int_equal(due_reclaim_expired(db, &rec), 0);
		if (!rec.rescheduled)
			usleep(10000);
	}
	assert_int_equal(due_requeue(db, run[3]), 0);
	assert_int_equal(due_kill(db, &killed, run[4]), 0);
	assert_int_equal(killed, DUE_DEAD);
	static const char *const outcome[5] = {
	    "DONE", "FAILED", "LEASE_EXPIRED", "REQUEUED", "KILLED"};
	for (int i = 0; i < 5; i++) {
		due_task *t = get(db, run[i]);
		assert_int_equal(t->n_attempts, 1);
		assert_string_equal(t->attempts[0].outcome, outcome[i]);
		assert_true(t->attempts[0].ended_at > 0);
		if (i == 0)
			assert_int_equal(t->attempts[0].claimed_at,
					 t0->attempts[0].claimed_at);
		due_task_free(t);
	}
	assert_int_equal(
	    sql_int("SELECT count(*) FROM due_attempt WHERE task_id IN"
		    " (%lld, %lld, %lld, %lld, %lld)",
		    (long long)run[0], (long long)run[1], (long long)run[2],
		    (long long)run[3], (long long)run[4]),
	    5);
	/* a late commit of an ended try is marked on its row */
	assert_int_equal(due_complete(db, &co, run[2], 1, "", 0), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	due_task *t2 = get(db, run[2]);
	assert_string_equal(t2->attempts[0].late_commit, "REJECTED_STALE");
	due_task_free(t2);
	due_task_free(t0);
	due_close(db);
}

/*
** SQLite, a rolling upgrade: a worker still running the schema-5 code
** claims the old way (a RUNNING attempt row, no claimed_at in the task)
** and dies; a new worker's reclaim finishes that row instead of failing on
** its key (which would leave the task CLAIMED for good), and the history
** shows one try, not the row plus one made from the task.
*/
static void test_sqlite_old_worker_running_row(void **state)
{
	(void)state;
	if (!on_sqlite())
		return;
	due_db *db = open_db();
	due_reclaimed rec;
	due_id id = add(db, "k", 0, 5);

	claim_one(db, id, 1000);
	sql("INSERT INTO due_attempt (task_id, attempt, worker, claimed_at,"
	    " due_at) SELECT id, attempt, lease_owner, updated_at, due_at"
	    " FROM due_task WHERE id = %lld",
	    (long long)id);
	sql("UPDATE due_task SET claimed_at = NULL WHERE id = %lld",
	    (long long)id);
	due_task *t0 = get(db, id);
	assert_int_equal(t0->n_attempts, 1);
	assert_string_equal(t0->attempts[0].outcome, "RUNNING");
	for (int tries = 0; state_of(db, id) == DUE_CLAIMED; tries++) {
		assert_true(tries < 1000);
		assert_int_equal(due_reclaim_expired(db, &rec), 0);
		if (!rec.rescheduled)
			usleep(10000);
	}
	due_task *t1 = get(db, id);
	assert_int_equal(t1->state, DUE_SCHEDULED);
	assert_int_equal(t1->n_attempts, 1);
	assert_string_equal(t1->attempts[0].outcome, "LEASE_EXPIRED");
	assert_int_equal(t1->attempts[0].claimed_at,
			 t0->attempts[0].claimed_at);
	assert_true(t1->attempts[0].ended_at > 0);
	due_task_free(t0);
	due_task_free(t1);
	due_close(db);
}

/* |got - want| <= tol_pct % of want, or fail naming the figure. */
static void within(const char *what, int64_t got, int64_t want, int tol_pct)
{
	int64_t d = got > want ? got - want : want - got;
	if (d * 100 > want * tol_pct)
		fail_msg("%s: %lld, truth %lld (tolerance %d %%)", what,
			 (long long)got, (long long)want, tol_pct);
}

/*
** SQLite above the cap (10,001 rows a count reads): the big states carry
** their bits and the estimator's figures (a sample of rowids, see
** docs/internals/store.md) stay within 25 % of the truth each, their sum
** within 10 %, with the states interleaved in id order and a gap that
** prune would leave; CLAIMED and DEAD stay exact; per kind, a small kind
** of a big SCHEDULED is counted exactly on due_task_kind_claim.  A
** correctness check of the estimator (its figures for this file are the
** same every run), not a timing.
*/
static void test_sqlite_estimates(void **state)
{
	(void)state;
	if (!on_sqlite())
		return;
	enum { N = 60000 };
	due_db *db = open_db();
	due_fail_outcome fo;
	due_metrics *m = NULL;
	due_stats st;
	due_time now;

	due_id run = add(db, "b", 0, 5);
	claim_one(db, run, LONG_LEASE);
	due_id dead = add(db, "b", 0, 1);
	claim_one(db, dead, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, dead, 1, "x"), 0);
	assert_int_equal(due_now(db, &now), 0);
	/* ids dead+1 .. dead+N: x % 4 = 0 SCHEDULED e1, 1 SCHEDULED e2,
	   2 DONE e2, 3 CANCELLED e2; then the finished ones of a sixth of
	   the ids deleted, as prune leaves a hole */
	sql("WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g"
	    " WHERE x < %d) INSERT INTO due_task (id, kind, payload, state,"
	    " due_at, max_attempts, backoff_us, backoff_cap_us, created_at,"
	    " updated_at) SELECT %lld + x, CASE x %% 4 WHEN 0 THEN 'e1' ELSE"
	    " 'e2' END, '', CASE x %% 4 WHEN 0 THEN 'SCHEDULED' WHEN 1 THEN"
	    " 'SCHEDULED' WHEN 2 THEN 'DONE' ELSE 'CANCELLED' END, %s, 5, 0,"
	    " 0, %s, %s FROM g",
	    N, (long long)dead, TS(now + HOUR), TS(now), TS(now));
	sql("DELETE FROM due_task WHERE id > %lld AND id <= %lld"
	    " AND state IN ('DONE', 'CANCELLED')",
	    (long long)dead + 20000, (long long)dead + 30000);
	for (int i = 0; i < 3; i++)
		add(db, "r", HOUR, 5);

	const uint32_t big =
	    1u << DUE_SCHEDULED | 1u << DUE_DONE | 1u << DUE_CANCELLED;
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.estimated, big);
	assert_int_equal(st.counts[DUE_CLAIMED], 1);
	assert_int_equal(st.counts[DUE_DEAD], 1);
	assert_int_equal(st.dead, 1);
	within("SCHEDULED", st.counts[DUE_SCHEDULED], N / 2 + 3, 25);
	within("DONE", st.counts[DUE_DONE], N / 4 - 2500, 25);
	within("CANCELLED", st.counts[DUE_CANCELLED], N / 4 - 2500, 25);
	within("all three",
	       st.counts[DUE_SCHEDULED] + st.counts[DUE_DONE] +
		   st.counts[DUE_CANCELLED],
	       N - 5000 + 3, 10);

	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->kinds_estimated, big);
	assert_int_equal(m->n_kinds, 4);
	assert_string_equal(m->kinds[0].kind, "b");
	assert_string_equal(m->kinds[1].kind, "e1");
	assert_string_equal(m->kinds[2].kind, "e2");
	assert_string_equal(m->kinds[3].kind, "r");
	assert_int_equal(m->kinds[0].counts[DUE_CLAIMED], 1);
	assert_int_equal(m->kinds[0].counts[DUE_DEAD], 1);
	within("e1 SCHEDULED", m->kinds[1].counts[DUE_SCHEDULED], N / 4, 25);
	within("e2 SCHEDULED", m->kinds[2].counts[DUE_SCHEDULED], N / 4, 25);
	within("e2 DONE", m->kinds[2].counts[DUE_DONE], N / 4 - 2500, 25);
	assert_int_equal(m->kinds[3].counts[DUE_SCHEDULED], 3);
	due_metrics_free(m);

	/* 40,000 more SCHEDULED e1 after them: SCHEDULED (70,003) is now
	   proved big by the sample alone (over 4x the cap), not counted,
	   and so is e1 per kind; DONE and CANCELLED are still counted up
	   to the cap */
	sql("WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g"
	    " WHERE x < 40000) INSERT INTO due_task (kind, payload, state,"
	    " due_at, max_attempts, backoff_us, backoff_cap_us, created_at,"
	    " updated_at) SELECT 'e1', '', 'SCHEDULED', %s, 5, 0, 0, %s, %s"
	    " FROM g",
	    TS(now + HOUR), TS(now), TS(now));
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.estimated, big);
	assert_int_equal(st.counts[DUE_CLAIMED], 1);
	assert_int_equal(st.counts[DUE_DEAD], 1);
	within("SCHEDULED, bigger", st.counts[DUE_SCHEDULED], N / 2 + 40003,
	       25);
	within("DONE, bigger", st.counts[DUE_DONE], N / 4 - 2500, 25);
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->kinds_estimated, big);
	assert_int_equal(m->n_kinds, 4);
	within("e1 SCHEDULED, bigger", m->kinds[1].counts[DUE_SCHEDULED],
	       N / 4 + 40000, 25);
	assert_int_equal(m->kinds[3].counts[DUE_SCHEDULED], 3);
	assert_int_equal(m->kinds[0].counts[DUE_CLAIMED], 1);
	due_metrics_free(m);
	due_close(db);
}

/*
** SQLite: the reads of stats, metrics, prune and `due ls --state S` go
** through indexes, never a scan of due_task or due_attempt, and the
** per-state (id) indexes stay out of every plan that does not name them
** (the claim's probes, its updates: EXPLAIN QUERY PLAN of the store's own
** statements, due__sq_read_sql).
*/
/* A stand-in for the store's due_bucket(): plans only, never run. */
static void no_bucket(sqlite3_context *cx, int n, sqlite3_value **v)
{
	(void)n, (void)v;
	sqlite3_result_int(cx, 0);
}

static void test_sqlite_read_plans(void **state)
{
	(void)state;
	if (!on_sqlite())
		return;
	due_db *db = open_db();
	due_close(db);
	char path[512];
	sqlite3 *c = NULL;
	snprintf(path, sizeof(path), "%.*s", (int)strcspn(url + 7, "?"),
		 url + 7);
	assert_int_equal(sqlite3_open_v2(path, &c, SQLITE_OPEN_READONLY, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_create_function(c, "due_bucket", 1,
						 SQLITE_UTF8, NULL, no_bucket,
						 NULL, NULL),
			 SQLITE_OK);
	for (int i = 0; due__sq_read_sql(i); i++) {
		char q[4096];
		sqlite3_stmt *st = NULL;
		snprintf(q, sizeof(q), "EXPLAIN QUERY PLAN %s",
			 due__sq_read_sql(i));
		if (sqlite3_prepare_v2(c, q, -1, &st, NULL) != SQLITE_OK)
			fail_msg("%s: %s", q, sqlite3_errmsg(c));
		while (sqlite3_step(st) == SQLITE_ROW) {
			const char *d =
			    (const char *)sqlite3_column_text(st, 3);
			/* a walk of a partial index: CLAIMED's or DEAD's
			   (what runs, what is dead), or capped by a LIMIT;
			   an (id) index only where it is named */
			const char *sq = due__sq_read_sql(i);
			bool bounded = strstr(d, "SCAN due_task USING") &&
				       (strstr(d, "due_task_lease") ||
					strstr(d, "due_task_ended_id") ||
					strstr(sq, "LIMIT ?"));
			if ((strstr(d, "SCAN due_task") && !bounded) ||
			    strstr(d, "SCAN due_attempt") ||
			    (strstr(d, "_id ") && !strstr(sq, "INDEXED BY")))
				fail_msg("%s\n  plan: %s", sq, d);
		}
		sqlite3_finalize(st);
	}
	sqlite3_close(c);
}

/* ------------------------------------------------------------------ */
/* Reschedule (issue 38)                                               */
/* ------------------------------------------------------------------ */

/* Reschedule id to `at` (DUE_TIME_NONE: store now + delay); the outcome. */
static due_reschedule_outcome resched(due_db *db, due_id id, due_time at,
				      int64_t delay_us, const char *payload)
{
	due_reschedule_opts o = DUE_RESCHEDULE_OPTS_INIT;
	due_reschedule_outcome out = DUE_RESCHEDULE_NOT_FOUND;

	o.at = at;
	o.delay_us = delay_us;
	if (payload) {
		o.set_payload = true;
		o.payload = payload;
		o.payload_len = strlen(payload);
	}
	assert_int_equal(due_reschedule(db, &out, id, &o), 0);
	return out;
}

static void assert_payload(const due_task *t, const char *p)
{
	assert_int_equal(t->payload_len, strlen(p));
	assert_memory_equal(t->payload, p, strlen(p));
}

/*
** Every outcome: a waiting task moves (at and delay, later and earlier,
** payload replaced or kept), a due one not yet claimed too; a CLAIMED
** try is TOO_LATE with its lease, attempt and due time untouched (a
** cancel requested or not); DONE, DEAD and CANCELLED are
** ALREADY_FINISHED; a paused kind's task moves; bad input writes nothing.
*/
static void test_reschedule_outcomes(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_reschedule_opts o = DUE_RESCHEDULE_OPTS_INIT;
	due_reschedule_outcome out;
	due_complete_outcome co;
	due_fail_outcome fo;
	due_cancel_outcome cn;
	due_time now, after;
	due_task *t, *u;

	due_id w = add(db, "k", HOUR, 5);
	assert_int_equal(due_now(db, &now), 0);
	assert_int_equal(resched(db, w, now + 2 * HOUR + 7, 0, "new"),
			 DUE_RESCHEDULE_RESCHEDULED);
	t = get(db, w);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->due_at, now + 2 * HOUR + 7);
	assert_int_equal(t->attempt, 0);
	assert_payload(t, "new");
	due_task_free(t);
	/* a delay counts from the store's clock; the payload is kept */
	assert_int_equal(due_now(db, &now), 0);
	assert_int_equal(resched(db, w, DUE_TIME_NONE, 3 * HOUR, NULL),
			 DUE_RESCHEDULE_RESCHEDULED);
	assert_int_equal(due_now(db, &after), 0);
	t = get(db, w);
	assert_true(t->due_at >= now + 3 * HOUR);
	assert_true(t->due_at <= after + 3 * HOUR);
	assert_payload(t, "new");
	due_task_free(t);
	/* an empty payload is a payload */
	assert_int_equal(resched(db, w, DUE_TIME_NONE, HOUR, ""),
			 DUE_RESCHEDULE_RESCHEDULED);
	t = get(db, w);
	assert_int_equal(t->payload_len, 0);
	due_task_free(t);

	/* bad input: refused, nothing written */
	t = get(db, w);
	assert_int_equal(due_reschedule(db, &out, w, NULL), DUE_EINVAL);
	o.delay_us = -1;
	assert_int_equal(due_reschedule(db, &out, w, &o), DUE_EINVAL);
	o.delay_us = 5;
	o.at = now;
	assert_int_equal(due_reschedule(db, &out, w, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "not both"));
	o = (due_reschedule_opts)DUE_RESCHEDULE_OPTS_INIT;
	o.at = -1;
	assert_int_equal(due_reschedule(db, &out, w, &o), DUE_EINVAL);
	assert_int_equal(due_reschedule(db, &out, 0, &o), DUE_EINVAL);
	o = (due_reschedule_opts)DUE_RESCHEDULE_OPTS_INIT;
	o.set_payload = true;
	o.payload_len = 3;
	assert_int_equal(due_reschedule(db, &out, w, &o), DUE_EINVAL);
	o.version = 99;
	assert_int_equal(due_reschedule(db, &out, w, &o), DUE_EINVAL);
	u = get(db, w);
	assert_int_equal(u->due_at, t->due_at);
	assert_int_equal(u->payload_len, t->payload_len);
	due_task_free(u);
	due_task_free(t);

	/* due and not yet claimed: still waiting, moved later */
	due_id d = add(db, "k", 0, 5);
	assert_int_equal(resched(db, d, DUE_TIME_NONE, HOUR, NULL),
			 DUE_RESCHEDULE_RESCHEDULED);
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 0);
	due_task_list_free(l);
	/* and back to now: claimable at once */
	assert_int_equal(resched(db, d, DUE_TIME_NONE, 0, NULL),
			 DUE_RESCHEDULE_RESCHEDULED);
	claim_one(db, d, LONG_LEASE);

	/* CLAIMED: TOO_LATE, the try untouched */
	t = get(db, d);
	assert_int_equal(resched(db, d, DUE_TIME_NONE, HOUR, "x"),
			 DUE_RESCHEDULE_TOO_LATE);
	u = get(db, d);
	assert_int_equal(u->state, DUE_CLAIMED);
	assert_int_equal(u->attempt, t->attempt);
	assert_int_equal(u->lease_until, t->lease_until);
	assert_string_equal(u->lease_owner, t->lease_owner);
	assert_int_equal(u->due_at, t->due_at);
	assert_payload(u, "p");
	due_task_free(u);
	due_task_free(t);
	/* a cancel requested: still TOO_LATE */
	assert_int_equal(due_cancel(db, &cn, d), 0);
	assert_int_equal(cn, DUE_CANCEL_REQUESTED);
	assert_int_equal(resched(db, d, DUE_TIME_NONE, 0, NULL),
			 DUE_RESCHEDULE_TOO_LATE);
	assert_int_equal(due_complete(db, &co, d, 1, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_CANCELLED_BEFORE_COMMIT);
	/* CANCELLED, DONE, DEAD: ALREADY_FINISHED; none: NOT_FOUND */
	assert_int_equal(resched(db, d, DUE_TIME_NONE, 0, NULL),
			 DUE_RESCHEDULE_ALREADY_FINISHED);
	due_id done = add(db, "k", 0, 5);
	claim_one(db, done, LONG_LEASE);
	assert_int_equal(due_complete(db, &co, done, 1, "r", 1), 0);
	assert_int_equal(resched(db, done, DUE_TIME_NONE, 0, NULL),
			 DUE_RESCHEDULE_ALREADY_FINISHED);
	assert_int_equal(state_of(db, done), DUE_DONE);
	due_id dead = add(db, "k", 0, 1);
	claim_one(db, dead, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, dead, 1, "x"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	assert_int_equal(resched(db, dead, DUE_TIME_NONE, 0, NULL),
			 DUE_RESCHEDULE_ALREADY_FINISHED);
	assert_int_equal(state_of(db, dead), DUE_DEAD);
	assert_int_equal(resched(db, 99999999, DUE_TIME_NONE, 0, NULL),
			 DUE_RESCHEDULE_NOT_FOUND);

	/* a paused kind's task is waiting: it moves */
	assert_int_equal(kind_set(db, "pk", 1, -1, -1, -1, -1, -1), 0);
	due_id p = add(db, "pk", 0, 5);
	assert_int_equal(resched(db, p, DUE_TIME_NONE, HOUR, "q"),
			 DUE_RESCHEDULE_RESCHEDULED);
	t = get(db, p);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_payload(t, "q");
	due_task_free(t);
	assert_string_equal(
	    due_reschedule_outcome_name(DUE_RESCHEDULE_ALREADY_FINISHED),
	    "ALREADY_FINISHED");
	due_close(db);
}

/* Wake-ups a listener got within 10 s (0: none came). */
static int listen_count(due_db *db, int fd)
{
	int n = 0;
	for (int tries = 0; n == 0 && tries < 100; tries++) {
		struct pollfd p = {fd, POLLIN, 0};
		poll(&p, 1, 100);
		assert_int_equal(due_listen_drain(db, &n), 0);
	}
	return n;
}

/*
** The claim honours the new time, earlier and later: moved earlier, the
** task is handed out at the new time (not before, the store's clock);
** moved later, not at the old one.  What a worker's wheel reads
** (upcoming) has the new time, and listeners are woken.
*/
static void test_reschedule_claim_honours_new_time(void **state)
{
	(void)state;
	due_db *db = open_db(), *ldb = open_db();
	due_upcoming *up = NULL;
	due_time now, at;
	int early, fd = -1, n;
	bool listens = due_listen(ldb, &fd) == 0;

	if (listens) /* what came before is not ours to count */
		assert_int_equal(due_listen_drain(ldb, &n), 0);
	due_id e = add(db, "k", HOUR, 5);
	due_id lt = add(db, "k", 300000, 5);
	assert_int_equal(due_now(db, &now), 0);
	at = now + 400000;
	assert_int_equal(resched(db, e, at, 0, NULL),
			 DUE_RESCHEDULE_RESCHEDULED);
	if (listens)
		assert_true(listen_count(ldb, fd) > 0);
	assert_int_equal(resched(db, lt, DUE_TIME_NONE, HOUR, NULL),
			 DUE_RESCHEDULE_RESCHEDULED);
	assert_int_equal(
	    due_upcoming_get(db, &up, NULL, 0, false, now + 2 * HOUR, 10), 0);
	assert_int_equal(up->count, 2);
	assert_int_equal(up->ids[0], e);
	assert_int_equal(up->due_at[0], at);
	assert_int_equal(up->ids[1], lt);
	assert_true(up->due_at[1] >= now + HOUR);
	due_upcoming_free(up);
	/* earlier: claimed at the new time, never before it */
	due_task_list *l = claim_when_due(db, e, at, &early);
	due_task_list_free(l);
	/* later: past its old time, it is not claimable */
	wait_store_past(db, now + 400000);
	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 0);
	due_task_list_free(l);
	assert_int_equal(state_of(db, lt), DUE_SCHEDULED);
	due_close(ldb);
	due_close(db);
}

/*
** Child of test_wait: on its own connection, once told to go and a little
** later (the parent is waiting by then), complete `a` (attempt aa), cancel
** the waiting `b`, fail `c` (attempt ca, its budget used up: DEAD).
*/
static void finish_child(int go, due_id a, int32_t aa, due_id b, due_id c,
			 int32_t ca)
{
	due_db *db = NULL;
	due_complete_outcome co;
	due_cancel_outcome xo;
	due_fail_outcome fo;
	char g;

	if (due_open(&db, url, NULL) < 0 || read(go, &g, 1) != 1)
		_exit(2);
	usleep(500000);
	if (due_complete(db, &co, a, aa, "r1", 2) < 0 ||
	    co != DUE_COMPLETE_DONE)
		_exit(3);
	usleep(200000);
	if (due_cancel(db, &xo, b) < 0 || xo != DUE_CANCEL_CANCELLED)
		_exit(4);
	if (due_fail(db, &fo, c, ca, "boom") < 0 || fo != DUE_FAIL_DEAD)
		_exit(5);
	due_close(db);
	_exit(0);
}

/*
** due_wait (issue 38): a finished task at once; a task another
** connection finishes (DONE, CANCELLED, DEAD) as soon as it does, well
** before the 5 s re-read that would find it without a wake-up (or, on a
** store that polls, within its 1 s backoff); a timeout that is honest
** (not before the time, the task as it is); refusals.
*/
static void test_wait(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_task *t = NULL;
	int go[2], st;
	int64_t t0, ms;
	pid_t pid;

	/* refusals, nothing waited */
	assert_int_equal(due_wait(db, &t, 0, -1), DUE_EINVAL);
	assert_null(t);
	assert_int_equal(due_wait(db, &t, 987654321, -1), DUE_ENOTFOUND);
	assert_null(t);

	/* finished already: at once, with its result, whatever the timeout */
	due_id done = add(db, "w", 0, 5);
	assert_int_equal(due_complete(db, &(due_complete_outcome){0}, done,
				      claim_one(db, done, LONG_LEASE), "ok", 2),
			 0);
	t0 = mono_ms();
	assert_int_equal(due_wait(db, &t, done, -1), 0);
	assert_true(mono_ms() - t0 < 2000);
	assert_int_equal(t->state, DUE_DONE);
	assert_int_equal(t->result_len, 2);
	assert_memory_equal(t->result, "ok", 2);
	due_task_free(t);
	assert_int_equal(due_wait(db, &t, done, 0), 0);
	due_task_free(t);

	/* an honest timeout: not before the time, the task as it is */
	due_id later = add(db, "w", HOUR, 5);
	t0 = mono_ms();
	assert_int_equal(due_wait(db, &t, later, 300000), DUE_ETIMEDOUT);
	ms = mono_ms() - t0;
	assert_true(ms >= 300 && ms < 10000);
	assert_non_null(t);
	assert_int_equal(t->state, DUE_SCHEDULED);
	due_task_free(t);
	t = NULL;
	assert_int_equal(due_wait(db, &t, later, 0), DUE_ETIMEDOUT);
	due_task_free(t);

	/* finished by another connection while we wait */
	due_id a = add(db, "w", 0, 5);
	int32_t aa = claim_one(db, a, LONG_LEASE);
	due_id c = add(db, "w", 0, 1);
	int32_t ca = claim_one(db, c, LONG_LEASE);
	assert_int_equal(pipe(go), 0);
	if ((pid = fork()) == 0) {
		close(go[1]);
		finish_child(go[0], a, aa, later, c, ca);
	}
	close(go[0]);
	assert_int_equal(write(go[1], "g", 1), 1);
	close(go[1]);
	t0 = mono_ms();
	assert_int_equal(due_wait(db, &t, a, 60000000), 0);
	ms = mono_ms() - t0;
	printf("wait: woken %lld ms after the wait began (the child "
	       "completes at 500 ms)\n",
	       (long long)ms);
	assert_true(ms < 4500); /* the re-read without a wake-up: 5 s */
	assert_int_equal(t->state, DUE_DONE);
	assert_memory_equal(t->result, "r1", 2);
	due_task_free(t);
	assert_int_equal(due_wait(db, &t, later, 60000000), 0);
	assert_int_equal(t->state, DUE_CANCELLED);
	due_task_free(t);
	assert_int_equal(due_wait(db, &t, c, 60000000), 0);
	assert_int_equal(t->state, DUE_DEAD);
	assert_string_equal(t->last_error, "boom");
	due_task_free(t);
	waitpid(pid, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Debounce by key: on_key (issue 38)                                  */
/* ------------------------------------------------------------------ */

/* Submit kind "deb" with key, at `at`, payload p, on_key k; *out. */
static void submit_key(due_db *db, due_submitted *out, const char *key,
		       due_time at, const char *p, due_on_key k)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	o.key = key;
	o.at = at;
	o.on_key = k;
	memset(out, 0xA5, sizeof(*out));
	assert_int_equal(due_schedule(db, out, "deb", p, strlen(p), &o), 0);
}

/* The task's due time and payload are `at` and p. */
static void assert_due_payload(due_db *db, due_id id, due_time at,
			       const char *p)
{
	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->due_at, at);
	assert_int_equal(t->payload_len, strlen(p));
	assert_memory_equal(t->payload, p, strlen(p));
	due_task_free(t);
}

/*
** keep (the default) leaves a waiting holder; replace moves it to any
** time with the new payload; later moves it only to a later time (the
** payload with it), and an earlier or equal one changes nothing.  Bad
** on_key input is refused and writes nothing.
*/
static void test_on_key_waiting(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s, r;
	due_time now;

	assert_int_equal(due_now(db, &now), 0);
	submit_key(db, &s, "a", now + HOUR, "p1", DUE_ON_KEY_KEEP);
	assert_false(s.existed);
	assert_false(s.moved);
	/* keep: the holder, untouched */
	submit_key(db, &r, "a", now + 2 * HOUR, "p2", DUE_ON_KEY_KEEP);
	assert_int_equal(r.id, s.id);
	assert_true(r.existed);
	assert_false(r.moved);
	assert_due_payload(db, s.id, now + HOUR, "p1");
	/* replace: later, then earlier */
	submit_key(db, &r, "a", now + 2 * HOUR, "p3", DUE_ON_KEY_REPLACE);
	assert_int_equal(r.id, s.id);
	assert_true(r.existed);
	assert_true(r.moved);
	assert_due_payload(db, s.id, now + 2 * HOUR, "p3");
	submit_key(db, &r, "a", now + HOUR / 2, "p4", DUE_ON_KEY_REPLACE);
	assert_true(r.existed && r.moved && r.id == s.id);
	assert_due_payload(db, s.id, now + HOUR / 2, "p4");
	/* later: earlier and equal change nothing, later moves */
	submit_key(db, &r, "a", now + HOUR / 4, "p5", DUE_ON_KEY_LATER);
	assert_true(r.existed && !r.moved && r.id == s.id);
	assert_due_payload(db, s.id, now + HOUR / 2, "p4");
	submit_key(db, &r, "a", now + HOUR / 2, "p6", DUE_ON_KEY_LATER);
	assert_true(r.existed && !r.moved && r.id == s.id);
	assert_due_payload(db, s.id, now + HOUR / 2, "p4");
	submit_key(db, &r, "a", now + 3 * HOUR, "p7", DUE_ON_KEY_LATER);
	assert_true(r.existed && r.moved && r.id == s.id);
	assert_due_payload(db, s.id, now + 3 * HOUR, "p7");
	/* a delay counts from the store's clock */
	o.key = "a";
	o.delay_us = 4 * HOUR;
	o.on_key = DUE_ON_KEY_LATER;
	assert_int_equal(due_schedule(db, &r, "deb", "p8", 2, &o), 0);
	assert_true(r.existed && r.moved && r.id == s.id);
	due_task *t = get(db, s.id);
	assert_true(t->due_at >= now + 4 * HOUR);
	assert_int_equal(t->attempt, 0);
	due_task_free(t);

	/* bad input: refused, nothing written */
	o = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	o.on_key = DUE_ON_KEY_REPLACE; /* no key */
	assert_int_equal(due_schedule(db, &r, "deb", "x", 1, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "needs a key"));
	o.key = "a";
	o.on_key = (due_on_key)7;
	assert_int_equal(due_schedule(db, &r, "deb", "x", 1, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "on_key"));
	t = get(db, s.id);
	assert_memory_equal(t->payload, "p8", 2);
	due_task_free(t);
	due_task_list *l = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	lo.kind = "deb";
	assert_int_equal(due_list(db, &l, &lo), 0);
	assert_int_equal(l->count, 1);
	due_task_list_free(l);
	/* a version 3 struct is read as keep, whatever its padding holds */
	o = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	o.version = 3;
	o.key = "a";
	o.on_key = DUE_ON_KEY_REPLACE;
	o.at = now + HOUR;
	assert_int_equal(due_schedule(db, &r, "deb", "x", 1, &o), 0);
	assert_true(r.existed && !r.moved && r.id == s.id);
	due_close(db);
}

/*
** A running holder is never touched by replace or later: it gives up the
** key and runs on, and the submit makes a new task that holds the key
** (its finish does not release the new holder's key).  keep still answers
** with the running task.  A batch's second item with the key of its first
** moves it.
*/
static void test_on_key_running(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_submitted s, r, k;
	due_complete_outcome co;
	due_time now;

	for (int m = DUE_ON_KEY_REPLACE; m <= DUE_ON_KEY_LATER; m++) {
		const char *key = m == DUE_ON_KEY_REPLACE ? "run-r" : "run-l";
		assert_int_equal(due_now(db, &now), 0);
		submit_key(db, &s, key, now, "old", DUE_ON_KEY_KEEP);
		int32_t a = claim_one(db, s.id, LONG_LEASE);
		due_task *before = get(db, s.id);
		submit_key(db, &k, key, now + HOUR, "k", DUE_ON_KEY_KEEP);
		assert_true(k.existed && !k.moved && k.id == s.id);
		submit_key(db, &r, key, now + HOUR, "new", (due_on_key)m);
		assert_true(r.id != s.id);
		assert_false(r.existed);
		assert_false(r.moved);
		due_task *t = get(db, s.id);
		assert_int_equal(t->state, DUE_CLAIMED);
		assert_int_equal(t->attempt, a);
		assert_int_equal(t->lease_until, before->lease_until);
		assert_int_equal(t->due_at, before->due_at);
		assert_memory_equal(t->payload, "old", 3);
		due_task_free(t);
		due_task_free(before);
		t = get(db, r.id);
		assert_non_null(t->key);
		assert_string_equal(t->key, key);
		due_task_free(t);
		assert_due_payload(db, r.id, now + HOUR, "new");
		/* the old task finishing leaves the key with the new one */
		assert_int_equal(due_complete(db, &co, s.id, a, "r", 1), 0);
		assert_int_equal(co, DUE_COMPLETE_DONE);
		submit_key(db, &k, key, now + 2 * HOUR, "k", DUE_ON_KEY_KEEP);
		assert_true(k.existed && k.id == r.id);
	}

	/* one batch: the second item moves the first's task */
	assert_int_equal(due_now(db, &now), 0);
	due_submit items[3];
	due_submitted out[3];
	const char *pl[3] = {"b1", "b2", "b3"};
	for (int i = 0; i < 3; i++) {
		items[i].kind = "deb";
		items[i].payload = pl[i];
		items[i].payload_len = 2;
		items[i].opts = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
		items[i].opts.key = "batch";
		items[i].opts.at = now + (i + 1) * HOUR;
	}
	items[1].opts.on_key = DUE_ON_KEY_LATER;
	items[2].opts.on_key = DUE_ON_KEY_KEEP;
	memset(out, 0xA5, sizeof(out));
	assert_int_equal(due_schedule_batch(db, out, items, 3), 0);
	assert_false(out[0].existed);
	assert_false(out[0].moved);
	assert_true(out[1].existed && out[1].moved && out[1].id == out[0].id);
	assert_true(out[2].existed && !out[2].moved && out[2].id == out[0].id);
	assert_due_payload(db, out[0].id, now + 2 * HOUR, "b2");
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Run after (issue 38 point 3)                                        */
/* ------------------------------------------------------------------ */

/* A task of kind "c" after the n ids of `after`; any: after_any_end. */
static int add_after(due_db *db, due_id *id, const due_id *after, size_t n,
		     bool any, int64_t delay_us, due_time at)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	int rc;

	o.after = after;
	o.n_after = n;
	o.after_any_end = any;
	o.delay_us = delay_us;
	o.at = at;
	memset(&s, 0xA5, sizeof(s));
	if ((rc = due_schedule(db, &s, "c", "child", 5, &o)) == 0) {
		assert_false(s.existed);
		*id = s.id;
	}
	return rc;
}

static due_id child_of(due_db *db, const due_id *after, size_t n, bool any)
{
	due_id id = 0;
	assert_int_equal(add_after(db, &id, after, n, any, 0, DUE_TIME_NONE),
			 0);
	return id;
}

/* Held: SCHEDULED, waiting for `left` of its `n` parents, never due. */
static void assert_held(due_db *db, due_id id, int32_t n, int32_t left)
{
	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->after_n, n);
	assert_int_equal(t->after_left, left);
	assert_int_equal(t->due_at, DUE_TIME_LAST);
	due_task_free(t);
}

/* Released: SCHEDULED, waiting for none, due within [lo, hi]. */
static void assert_released(due_db *db, due_id id, due_time lo, due_time hi)
{
	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->after_left, 0);
	assert_true(t->due_at >= lo);
	assert_true(t->due_at <= hi);
	due_task_free(t);
}

static void complete_ok(due_db *db, due_id id, int32_t attempt)
{
	due_complete_outcome co;
	assert_int_equal(due_complete(db, &co, id, attempt, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
}

/* How many tasks the store holds (every state). */
static size_t n_tasks(due_db *db)
{
	due_task_list *l = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	lo.limit = 10000;
	assert_int_equal(due_list(db, &l, &lo), 0);
	size_t n = l->count;
	due_task_list_free(l);
	return n;
}

/*
** A child of two parents is held (never claimed, due_at DUE_TIME_LAST,
** listed by the held filter) until both are DONE, then due at once by
** the store's clock; get lists its parents ascending.
*/
static void test_after_fan_in(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_time t0, t1;
	due_task_list *l = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;

	/* p2 waits (an hour) while p1 is claimed alone: claim_one */
	due_id p1 = add(db, "p", 0, 5), p2 = add(db, "p", HOUR, 5);
	due_id both[2] = {p2, p1};
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT;
	due_reschedule_outcome rs;
	due_id c = child_of(db, both, 2, false);
	assert_held(db, c, 2, 2);
	due_task *t = get(db, c);
	assert_non_null(t->after);
	assert_int_equal(t->after[0], p1);
	assert_int_equal(t->after[1], p2);
	assert_false(t->after_any_end);
	due_task_free(t);
	lo.held = true;
	assert_int_equal(due_list(db, &l, &lo), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, c);
	assert_int_equal(l->items[0].after_left, 2);
	due_task_list_free(l);
	lo.state = DUE_DEAD;
	assert_int_equal(due_list(db, &l, &lo), DUE_EINVAL);

	int32_t a1 = claim_one(db, p1, LONG_LEASE);
	complete_ok(db, p1, a1);
	assert_held(db, c, 2, 1);
	assert_int_equal(due_reschedule(db, &rs, p2, &ro), 0); /* due now */
	assert_int_equal(due_now(db, &t0), 0);
	int32_t a2 = claim_one(db, p2, LONG_LEASE);
	complete_ok(db, p2, a2);
	assert_int_equal(due_now(db, &t1), 0);
	assert_released(db, c, t0, t1);
	lo = (due_list_opts)DUE_LIST_OPTS_INIT;
	lo.held = true;
	assert_int_equal(due_list(db, &l, &lo), 0);
	assert_int_equal(l->count, 0);
	due_task_list_free(l);
	claim_one(db, c, LONG_LEASE);
	due_close(db);
}

/*
** The child's own delay counts from its release; an absolute time is
** kept when it is later than the release, else it is due at release.
*/
static void test_after_delay_and_at(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_time t0, t1, added;
	due_id p = add(db, "p", 0, 5), cd, ca, cp;

	assert_int_equal(due_now(db, &added), 0);
	assert_int_equal(add_after(db, &cd, &p, 1, false, HOUR, DUE_TIME_NONE),
			 0);
	assert_int_equal(add_after(db, &ca, &p, 1, false, 0, added + 2 * HOUR),
			 0);
	assert_int_equal(add_after(db, &cp, &p, 1, false, 0, added - HOUR), 0);
	assert_held(db, cd, 1, 1);
	assert_held(db, ca, 1, 1);
	assert_held(db, cp, 1, 1);
	int32_t a = claim_one(db, p, LONG_LEASE);
	assert_int_equal(due_now(db, &t0), 0);
	complete_ok(db, p, a);
	assert_int_equal(due_now(db, &t1), 0);
	assert_released(db, cd, t0 + HOUR, t1 + HOUR);
	assert_released(db, ca, added + 2 * HOUR, added + 2 * HOUR);
	assert_released(db, cp, t0, t1);
	claim_one(db, cp, LONG_LEASE);
	due_close(db);
}

/*
** Parents that must exist: one DONE counts at once (the child is due at
** once), one missing is DUE_ENOTFOUND, one DEAD or CANCELLED is
** DUE_ESTATE unless after_any_end; bad lists are DUE_EINVAL; nothing is
** written by a refused submit or batch.
*/
static void test_after_parents_checked(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_time t0, t1;
	due_cancel_outcome co;
	due_fail_outcome fo;
	due_id c;

	due_id done = add(db, "p", 0, 5);
	complete_ok(db, done, claim_one(db, done, LONG_LEASE));
	due_id dead = add(db, "p", 0, 1);
	assert_int_equal(
	    due_fail(db, &fo, dead, claim_one(db, dead, LONG_LEASE), "boom"),
	    0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	due_id gone = add(db, "p", HOUR, 5);
	assert_int_equal(due_cancel(db, &co, gone), 0);
	assert_int_equal(co, DUE_CANCEL_CANCELLED);
	due_id live = add(db, "p", HOUR, 5);
	size_t before = n_tasks(db);

	assert_int_equal(due_now(db, &t0), 0);
	c = child_of(db, &done, 1, false);
	assert_int_equal(due_now(db, &t1), 0);
	due_task *t = get(db, c);
	assert_int_equal(t->after_n, 1);
	assert_int_equal(t->after_left, 0);
	assert_true(t->due_at >= t0 && t->due_at <= t1);
	due_task_free(t);
	before++;

	due_id missing[2] = {live, 999999999};
	assert_int_equal(add_after(db, &c, missing, 2, false, 0, DUE_TIME_NONE),
			 DUE_ENOTFOUND);
	assert_non_null(strstr(due_error_last(), "999999999"));
	assert_int_equal(add_after(db, &c, &dead, 1, false, 0, DUE_TIME_NONE),
			 DUE_ESTATE);
	assert_non_null(strstr(due_error_last(), "DEAD"));
	assert_int_equal(add_after(db, &c, &gone, 1, false, 0, DUE_TIME_NONE),
			 DUE_ESTATE);
	assert_non_null(strstr(due_error_last(), "CANCELLED"));
	assert_int_equal(n_tasks(db), before);

	/* bad lists */
	due_id twice[2] = {live, live}, zero = 0;
	assert_int_equal(add_after(db, &c, twice, 2, false, 0, DUE_TIME_NONE),
			 DUE_EINVAL);
	assert_int_equal(add_after(db, &c, &zero, 1, false, 0, DUE_TIME_NONE),
			 DUE_EINVAL);
	assert_int_equal(add_after(db, &c, NULL, 0, true, 0, DUE_TIME_NONE),
			 DUE_EINVAL);
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	o.after = &live;
	o.n_after = 1;
	o.key = "k";
	o.on_key = DUE_ON_KEY_REPLACE;
	assert_int_equal(due_schedule(db, &s, "c", "x", 1, &o), DUE_EINVAL);
	o.on_key = DUE_ON_KEY_KEEP;
	o.n_after = DUE_AFTER_MAX + 1;
	assert_int_equal(due_schedule(db, &s, "c", "x", 1, &o), DUE_EINVAL);
	assert_int_equal(n_tasks(db), before);

	/* a batch whose second item names a missing parent writes nothing */
	due_submit items[2];
	due_submitted out[2];
	for (int i = 0; i < 2; i++) {
		items[i].kind = "c";
		items[i].payload = "b";
		items[i].payload_len = 1;
		items[i].opts = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
		items[i].opts.after = i == 0 ? &live : &missing[1];
		items[i].opts.n_after = 1;
	}
	assert_int_equal(due_schedule_batch(db, out, items, 2), DUE_ENOTFOUND);
	assert_int_equal(n_tasks(db), before);

	/* any end: DEAD and CANCELLED parents count as ended */
	due_id ended[2] = {dead, gone};
	assert_int_equal(due_now(db, &t0), 0);
	c = child_of(db, ended, 2, true);
	assert_int_equal(due_now(db, &t1), 0);
	assert_released(db, c, t0, t1);
	t = get(db, c);
	assert_true(t->after_any_end);
	due_task_free(t);
	due_close(db);
}

/* CANCELLED with a last_error naming `parent`. */
static void assert_cancelled_by(due_db *db, due_id id, due_id parent)
{
	char want[40];
	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_CANCELLED);
	assert_non_null(t->last_error);
	snprintf(want, sizeof(want), "%lld", (long long)parent);
	if (!strstr(t->last_error, want))
		fail_msg("task %lld's last_error '%s' does not name %s",
			 (long long)id, t->last_error, want);
	assert_int_equal(t->attempt, 0);
	due_task_free(t);
}

/*
** A parent that ends DEAD (its last failure, its lease expired with no
** attempt left, kill) or CANCELLED (cancel while waiting, a cancel
** request met by its commit) cancels its waiting children, and theirs
** (a chain), in the same step; an after_any_end child is released
** instead.  A child already cancelled by its parent stays so when the
** DEAD parent is retried and then DONE.
*/
static void test_after_end_cancels(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_fail_outcome fo;
	due_cancel_outcome co;
	due_complete_outcome cc;
	due_reclaimed rr;
	due_state ks;
	due_time t0, t1;

	/* fail -> DEAD: a chain cancelled, an any-end child released */
	due_id p = add(db, "p", 0, 1);
	due_id c1 = child_of(db, &p, 1, false);
	due_id c2 = child_of(db, &c1, 1, false);
	due_id c3 = child_of(db, &c2, 1, false);
	due_id any = child_of(db, &p, 1, true);
	int32_t a = claim_one(db, p, LONG_LEASE);
	assert_int_equal(due_now(db, &t0), 0);
	assert_int_equal(due_fail(db, &fo, p, a, "boom"), 0);
	assert_int_equal(due_now(db, &t1), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	assert_cancelled_by(db, c1, p);
	assert_cancelled_by(db, c2, c1);
	assert_cancelled_by(db, c3, c2);
	assert_released(db, any, t0, t1);
	claim_one(db, any, LONG_LEASE);
	/* retry of the DEAD parent: its cancelled children stay so */
	assert_int_equal(due_retry(db, p), 0);
	complete_ok(db, p, claim_one(db, p, LONG_LEASE));
	assert_cancelled_by(db, c1, p);

	/* cancel while waiting */
	p = add(db, "p", HOUR, 5);
	c1 = child_of(db, &p, 1, false);
	assert_int_equal(due_cancel(db, &co, p), 0);
	assert_int_equal(co, DUE_CANCEL_CANCELLED);
	assert_cancelled_by(db, c1, p);

	/* a cancel request met by the running parent's commit */
	p = add(db, "p", 0, 5);
	c1 = child_of(db, &p, 1, false);
	a = claim_one(db, p, LONG_LEASE);
	assert_int_equal(due_cancel(db, &co, p), 0);
	assert_int_equal(co, DUE_CANCEL_REQUESTED);
	assert_held(db, c1, 1, 1); /* the parent has not ended yet */
	assert_int_equal(due_complete(db, &cc, p, a, "r", 1), 0);
	assert_int_equal(cc, DUE_COMPLETE_CANCELLED_BEFORE_COMMIT);
	assert_cancelled_by(db, c1, p);

	/* kill of a running parent */
	p = add(db, "p", 0, 5);
	c1 = child_of(db, &p, 1, false);
	claim_one(db, p, LONG_LEASE);
	assert_int_equal(due_kill(db, &ks, p), 0);
	assert_cancelled_by(db, c1, p);

	/* the lease of its last attempt expires */
	p = add(db, "p", 0, 1);
	c1 = child_of(db, &p, 1, false);
	claim_one(db, p, 1000);
	wait_reclaim(db, p, &rr);
	assert_int_equal(state_of(db, p), DUE_DEAD);
	assert_cancelled_by(db, c1, p);
	due_close(db);
}

/*
** A parent's failed try with attempts left keeps its children held; its
** DONE releases them once: a late commit of the old try and a second
** parent's DONE each count once (a child of two parents is still held
** after the first's late commit).  A cancelled child is left alone by
** its parent's DONE.
*/
static void test_after_retry_releases_once(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	due_fail_outcome fo;
	due_complete_outcome cc;
	due_cancel_outcome co;
	due_reclaimed rr;

	o.backoff_us = 1000; /* the retry due at once, about */
	o.backoff_cap_us = 1000;
	assert_int_equal(due_schedule(db, &s, "p", "p", 1, &o), 0);
	due_id p = s.id, q = add(db, "q", HOUR, 5);
	due_id pq[2] = {p, q};
	due_id c = child_of(db, pq, 2, false);
	due_id dropped = child_of(db, &p, 1, false);
	assert_int_equal(due_cancel(db, &co, dropped), 0);
	assert_int_equal(co, DUE_CANCEL_CANCELLED);

	int32_t a1 = claim_one(db, p, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, p, a1, "once"), 0);
	assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
	assert_held(db, c, 2, 2);
	/* a lease that expires with attempts left: held still */
	due_task *t = get(db, p);
	wait_store_past(db, t->due_at);
	due_task_free(t);
	int32_t a2 = claim_one(db, p, 1000);
	wait_reclaim(db, p, &rr);
	assert_int_equal(rr.rescheduled, 1);
	assert_held(db, c, 2, 2);
	int32_t a3 = claim_one(db, p, LONG_LEASE);
	complete_ok(db, p, a3);
	assert_held(db, c, 2, 1);
	/* the old tries' late commits change nothing */
	assert_int_equal(due_complete(db, &cc, p, a2, "late", 4), 0);
	assert_int_equal(cc, DUE_COMPLETE_REJECTED_STALE);
	assert_int_equal(due_fail(db, &fo, p, a1, "late"), 0);
	assert_int_equal(fo, DUE_FAIL_REJECTED_STALE);
	assert_held(db, c, 2, 1);
	assert_int_equal(state_of(db, dropped), DUE_CANCELLED);
	due_close(db);
}

/*
** A held task: reschedule answers RESCHEDULED and keeps it held (the
** new time is its own, applied at release); cancel cancels it, and its
** parent's DONE then leaves it CANCELLED.
*/
static void test_after_reschedule_cancel_held(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT;
	due_reschedule_outcome rs;
	due_cancel_outcome co;
	due_time now;

	due_id p = add(db, "p", 0, 5);
	due_id c = child_of(db, &p, 1, false);
	due_id x = child_of(db, &p, 1, false);
	assert_int_equal(due_now(db, &now), 0);
	ro.at = now + 2 * HOUR;
	assert_int_equal(due_reschedule(db, &rs, c, &ro), 0);
	assert_int_equal(rs, DUE_RESCHEDULE_RESCHEDULED);
	assert_held(db, c, 1, 1);
	assert_int_equal(due_cancel(db, &co, x), 0);
	assert_int_equal(co, DUE_CANCEL_CANCELLED);
	complete_ok(db, p, claim_one(db, p, LONG_LEASE));
	assert_released(db, c, now + 2 * HOUR, now + 2 * HOUR);
	assert_int_equal(state_of(db, x), DUE_CANCELLED);
	due_close(db);
}

/* Task `id`'s payload is p. */
static void assert_payload_of(due_db *db, due_id id, const char *p)
{
	due_task *t = get(db, id);
	assert_payload(t, p);
	due_task_free(t);
}

/* A keyed add with on_key `k`, a delay or an instant, on the holder h. */
static void key_on_held(due_db *db, due_id h, bool moved, int64_t delay_us,
			due_time at, const char *p, due_on_key k)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	o.key = "held-key";
	o.delay_us = delay_us;
	o.at = at;
	o.on_key = k;
	memset(&s, 0xA5, sizeof(s));
	assert_int_equal(due_schedule(db, &s, "c", p, strlen(p), &o), 0);
	assert_int_equal(s.id, h);
	assert_true(s.existed);
	assert_int_equal(s.moved, moved);
}

/*
** on_key replace or later meeting a held holder (run after), the same on
** every store: it stays held (still waiting for its parent), takes the
** payload and the time asked as its own, applied at its release; replace
** always, later only when the time asked is later than the earliest a
** release now would give it (max(its instant, now + its delay)).  keep
** changes nothing.  The release then makes it due at the last time taken.
*/
static void test_on_key_held(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	due_time now, then;

	due_id p = add(db, "p", 0, 5);
	assert_int_equal(due_now(db, &now), 0);
	o.key = "held-key";
	o.after = &p;
	o.n_after = 1;
	o.at = now + 2 * HOUR;
	assert_int_equal(due_schedule(db, &s, "c", "a", 1, &o), 0);
	due_id h = s.id;
	assert_held(db, h, 1, 1);

	/* later, earlier than its own instant: nothing changes */
	key_on_held(db, h, false, 0, now + HOUR, "b", DUE_ON_KEY_LATER);
	assert_held(db, h, 1, 1);
	assert_payload_of(db, h, "a");
	/* later, a delay that ends before it: nothing either */
	key_on_held(db, h, false, HOUR, DUE_TIME_NONE, "b", DUE_ON_KEY_LATER);
	assert_payload_of(db, h, "a");
	/* keep: nothing */
	key_on_held(db, h, false, 0, now + 5 * HOUR, "b", DUE_ON_KEY_KEEP);
	assert_payload_of(db, h, "a");
	/* later, later: taken, still held */
	key_on_held(db, h, true, 0, now + 3 * HOUR, "c", DUE_ON_KEY_LATER);
	assert_held(db, h, 1, 1);
	assert_payload_of(db, h, "c");
	/* replace, earlier: taken */
	key_on_held(db, h, true, 0, now + HOUR, "d", DUE_ON_KEY_REPLACE);
	assert_held(db, h, 1, 1);
	assert_payload_of(db, h, "d");
	/* later, a delay past its instant: taken (its own time is a delay) */
	key_on_held(db, h, true, 90 * 60000000LL, DUE_TIME_NONE, "e",
		    DUE_ON_KEY_LATER);
	/* later, an instant before now + that delay: nothing */
	key_on_held(db, h, false, 0, now + 80 * 60000000LL, "f",
		    DUE_ON_KEY_LATER);
	assert_held(db, h, 1, 1);
	assert_payload_of(db, h, "e");

	complete_ok(db, p, claim_one(db, p, LONG_LEASE));
	assert_int_equal(due_now(db, &then), 0);
	assert_released(db, h, now + 90 * 60000000LL, then + 90 * 60000000LL);
	assert_payload_of(db, h, "e");
	due_close(db);
}

/*
** SQLite: a version 10 store upgrades to 11 in place (what `due init`
** does): its tasks are after no task (after_n, after_left and
** after_any_end 0, no parents), are claimed and finished as before, and
** can be parents: a task added after two of them is held until one is
** DONE and the other ends, and listed as held meanwhile.
*/
static void test_sqlite_v10_upgrade(void **state)
{
	(void)state;
	if (!on_sqlite())
		return;
	due_db *db = open_db();
	due_cancel_outcome co;
	due_time now;

	due_id later = add(db, "k", HOUR, 5), run = add(db, "k", 0, 5);
	int32_t a = claim_one(db, run, LONG_LEASE);
	due_id done = add(db, "k", 0, 5);
	complete_ok(db, done, claim_one(db, done, LONG_LEASE));
	due_close(db);
	sqlite_undo_v11();
	db = NULL;
	assert_int_equal(due_open(&db, url, NULL), DUE_ESCHEMA);
	due_close(db);

	due_open_opts o = DUE_OPEN_OPTS_INIT;
	o.create = true;
	db = NULL;
	assert_int_equal(due_open(&db, url, &o), 0);
	assert_int_equal(
	    sql_int("SELECT value FROM due_meta WHERE name = 'schema_version'"),
	    DUE_SCHEMA_VERSION);
	assert_int_equal(sql_int("SELECT count(*) FROM sqlite_schema WHERE"
				 " name IN ('due_after', 'due_after_child',"
				 " 'due_task_held')"),
			 3);
	due_id old[3] = {later, run, done};
	for (int i = 0; i < 3; i++) {
		due_task *t = get(db, old[i]);
		assert_int_equal(t->after_n, 0);
		assert_int_equal(t->after_left, 0);
		assert_false(t->after_any_end);
		assert_null(t->after);
		due_task_free(t);
	}
	/* a child of the old tasks: held by the two live ones */
	due_id both[3] = {later, run, done};
	due_id c = child_of(db, both, 3, true);
	assert_held(db, c, 3, 2);
	due_task *t = get(db, c);
	assert_non_null(t->after);
	assert_int_equal(t->after[0], later);
	assert_int_equal(t->after[1], run);
	assert_int_equal(t->after[2], done);
	due_task_free(t);
	due_task_list *l = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	lo.held = true;
	assert_int_equal(due_list(db, &l, &lo), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, c);
	due_task_list_free(l);
	/* the running one finishes as before the upgrade; the other is
	   cancelled: any end counts, the child is due */
	complete_ok(db, run, a);
	assert_held(db, c, 3, 1);
	assert_int_equal(due_cancel(db, &co, later), 0);
	assert_int_equal(co, DUE_CANCEL_CANCELLED);
	assert_int_equal(due_now(db, &now), 0);
	assert_released(db, c, now - HOUR, now);
	claim_one(db, c, LONG_LEASE);
	due_close(db);
}

/*
** A chain of 30 (each after the one before) runs in order, one at a
** time; a fan-in of 200 parents releases its child at the last DONE, in
** one batch of completions.
*/
static void test_after_chain_and_wide_fan_in(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_id chain[30], ps[200];

	chain[0] = add(db, "p", 0, 5);
	for (int i = 1; i < 30; i++)
		chain[i] = child_of(db, &chain[i - 1], 1, false);
	for (int i = 0; i < 30; i++) {
		if (i + 1 < 30)
			assert_held(db, chain[i + 1], 1, 1);
		complete_ok(db, chain[i], claim_one(db, chain[i], LONG_LEASE));
	}
	due_task_list *l = NULL;
	for (int i = 0; i < 200; i++)
		ps[i] = add(db, "f", HOUR, 5);
	due_id c = child_of(db, ps, 200, false);
	assert_held(db, c, 200, 200);
	due_task *t = get(db, c);
	for (int i = 0; i < 200; i++)
		assert_int_equal(t->after[i], ps[i]);
	due_task_free(t);
	/* make the parents due: move each to now */
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT;
	due_reschedule_outcome rs;
	for (int i = 0; i < 200; i++) {
		assert_int_equal(due_reschedule(db, &rs, ps[i], &ro), 0);
		assert_int_equal(rs, DUE_RESCHEDULE_RESCHEDULED);
	}
	const char *f[] = {"f"};
	assert_int_equal(due_claim(db, &l, "w", f, 1, 200, LONG_LEASE), 0);
	assert_int_equal(l->count, 200);
	due_completion cs[200];
	for (int i = 0; i < 200; i++)
		cs[i] = (due_completion){l->items[i].id, l->items[i].attempt,
					 "r", 1, DUE_COMPLETE_REJECTED_STALE};
	assert_int_equal(due_complete_batch(db, cs, 199), 0);
	assert_held(db, c, 200, 1);
	assert_int_equal(due_complete_batch(db, cs + 199, 1), 0);
	assert_int_equal(cs[199].outcome, DUE_COMPLETE_DONE);
	t = get(db, c);
	assert_int_equal(t->after_left, 0);
	assert_true(t->due_at < DUE_TIME_LAST);
	due_task_free(t);
	due_task_list_free(l);
	due_close(db);
}

/*
** An edge counts once even where a parent ends twice: a DEAD parent that
** an operator retries and then completes, or kills (DEAD -> CANCELLED),
** does not count down its after_any_end child again.  The child of two
** parents stays held for the second.
*/
static void test_after_edge_counted_once(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_fail_outcome fo;
	due_state ks;

	due_id a = add(db, "p", 0, 1), b = add(db, "q", HOUR, 5);
	due_id ab[2] = {a, b};
	due_id c = child_of(db, ab, 2, true);
	assert_int_equal(
	    due_fail(db, &fo, a, claim_one(db, a, LONG_LEASE), "x"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	assert_held(db, c, 2, 1);
	assert_int_equal(due_retry(db, a), 0);
	complete_ok(db, a, claim_one(db, a, LONG_LEASE));
	assert_held(db, c, 2, 1);
	due_id d = add(db, "p", 0, 1);
	due_id db2[2] = {d, b};
	due_id c2 = child_of(db, db2, 2, true);
	assert_int_equal(
	    due_fail(db, &fo, d, claim_one(db, d, LONG_LEASE), "x"), 0);
	assert_held(db, c2, 2, 1);
	assert_int_equal(due_kill(db, &ks, d), 0); /* a dead letter dismissed */
	assert_held(db, c2, 2, 1);
	due_close(db);
}

/*
** due_parent_results: one JSON object by parent id with each parent's
** state and result (base64 when not UTF-8, null when none), read for a
** task from a claim (no parent list of its own); bounded: a result that
** would pass the bound is left out with its size.
*/
static void test_after_parent_results(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_complete_outcome co;
	due_task_list *l = NULL;
	char *text = NULL, want[512];
	const char *ck[] = {"c"};

	due_id p1 = add(db, "p", 0, 5);
	assert_int_equal(
	    due_complete(db, &co, p1, claim_one(db, p1, LONG_LEASE), "one", 3),
	    0);
	due_id p2 = add(db, "p", 0, 5);
	assert_int_equal(due_complete(db, &co, p2,
				      claim_one(db, p2, LONG_LEASE), "\xff\x01",
				      2),
			 0);
	due_id both[2] = {p1, p2};
	due_id c = child_of(db, both, 2, false);
	assert_int_equal(due_claim(db, &l, "w", ck, 1, 1, LONG_LEASE), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, c);
	assert_int_equal(l->items[0].after_n, 2);
	assert_int_equal(due_parent_results(db, &text, &l->items[0], 0), 0);
	snprintf(want, sizeof(want),
		 "{\"%lld\":{\"result\":\"one\",\"state\":\"DONE\"},"
		 "\"%lld\":{\"result_b64\":\"/wE=\",\"state\":\"DONE\"}}",
		 (long long)p1, (long long)p2);
	assert_string_equal(text, want);
	free(text);
	/* 60 bytes: the first entry fits, the second's result does not */
	assert_int_equal(due_parent_results(db, &text, &l->items[0], 60), 0);
	snprintf(want, sizeof(want),
		 "{\"%lld\":{\"result\":\"one\",\"state\":\"DONE\"},"
		 "\"%lld\":{\"result_omitted\":2,\"state\":\"DONE\"}}",
		 (long long)p1, (long long)p2);
	assert_string_equal(text, want);
	free(text);
	due_task_list_free(l);
	/* a task with no parents: {} */
	due_task *t = get(db, p1);
	assert_int_equal(due_parent_results(db, &text, t, 0), 0);
	assert_string_equal(text, "{}");
	free(text);
	due_task_free(t);
	due_close(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	    T(test_happy_path),
	    T(test_not_before_due),
	    T(test_claim_limit_and_kinds),
	    T(test_claim_id),
	    T(test_stale_after_reclaim),
	    T(test_extend_lapsed),
	    T(test_terminal_immutable),
	    T(test_cancel_outcomes),
	    T(test_backoff_and_dead),
	    T(test_reclaim_paths),
	    T(test_operator),
	    T(test_idempotent_key),
	    T(test_idempotent_key_race),
	    T(test_batch_schedule),
	    T(test_store_work),
	    T(test_bad_input_changes_nothing),
	    T(test_sqlite_transactions),
	    T(test_complete_batch),
	    T(test_complete_and_claim_batch),
	    T(test_three_processes_claim),
	    T(test_due_vs_cancel_race),
	    T(test_list_stats_prune),
	    T(test_schema_checks),
	    T(test_cron_definitions),
	    T(test_cron_fire_exact),
	    T(test_cron_fire_finds_live_task),
	    T(test_cron_once_per_slot),
	    T(test_cron_misfire),
	    T(test_cron_overlap_wait),
	    T(test_metrics),
	    T(test_metrics_exact),
	    T(test_flow_priority_order),
	    T(test_flow_pause),
	    T(test_flow_rate),
	    T(test_flow_max_running),
	    T(test_flow_group_limit),
	    T(test_flow_expired_lease_frees_slot),
	    T(test_flow_timeout_effective),
	    T(test_flow_fail_timed_out),
	    T(test_flow_kind_settings),
	    T(test_flow_v3_upgrade),
	    T(test_lock_take),
	    T(test_prune_max),
	    T(test_store_bytes),
	    T(test_stats_exact),
	    T(test_stats_exact_at_size),
	    T(test_sqlite_v4_upgrade),
	    T(test_sqlite_v5_upgrade),
	    T(test_sqlite_v6_upgrade),
	    T(test_sqlite_v10_upgrade),
	    T(test_due_order_across_priorities),
	    T(test_sqlite_old_worker_running_row),
	    T(test_sqlite_estimates),
	    T(test_sqlite_read_plans),
	    T(test_reschedule_outcomes),
	    T(test_reschedule_claim_honours_new_time),
	    T(test_wait),
	    T(test_on_key_waiting),
	    T(test_on_key_running),
	    T(test_on_key_held),
	    T(test_after_fan_in),
	    T(test_after_delay_and_at),
	    T(test_after_parents_checked),
	    T(test_after_end_cancels),
	    T(test_after_retry_releases_once),
	    T(test_after_reschedule_cancel_held),
	    T(test_after_chain_and_wide_fan_in),
	    T(test_after_parent_results),
	    T(test_after_edge_counted_once),
#undef T
	};
	int failed = 0;

	/* DUE_TEST_FILTER=test_wait runs the tests that match (cmocka's
	   pattern: * and ?), for a developer's quick run */
	if (getenv("DUE_TEST_FILTER"))
		cmocka_set_test_filter(getenv("DUE_TEST_FILTER"));
	/* every backend of this build: one line in tu_fixtures[] adds one */
	for (size_t b = 0; b < TU_N_FIXTURES; b++) {
		if (tu_select_backend(tu_fixtures[b].name) != 0)
			continue;
		char name[64];
		snprintf(name, sizeof(name), "store conformance (%s)",
			 tu_fixtures[b].name);
		failed += _cmocka_run_group_tests(
		    name, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
	}
	return failed ? 1 : tu_backend_check();
}
