/*
** verify_negative.c - the negative controls of `due verify`, and the
** query-plan boundary case.
**
** The negative controls show the failures the contract exists to prevent,
** by doing the known-wrong thing on purpose, in scratch tables of their
** own (naive_task, naive_effect) inside the case's scratch store, never
** in due's tables:
**
**   negative_naive_select_then_update  3 processes claim by SELECT then an
**       UPDATE without a state check: tasks get claimed twice (seed 000:
**       83 of 300).  PASS means the duplication did show.
**   negative_unfenced_late_commit      a stalled worker's late complete by
**       id only (no attempt check) overwrites the new holder's result and
**       adds a second effect.  PASS means the overwrite did show.
**
** row_locks_honoured is not a control but a probe of the engine (issue
** 23): connection A holds a row FOR UPDATE; B's FOR UPDATE SKIP LOCKED
** must not return it and B's FOR UPDATE NOWAIT must fail; after A's
** ROLLBACK, B's SKIP LOCKED must return it (so the probe is not
** vacuous).  An engine that accepts the syntax and does not lock
** (TiDB reads SKIP LOCKED as a plain read) fails here by name, instead of
** showing as contention or duplicate claims under load.  On Galera both
** sessions sit on one node: row locks there are node-local, which is what
** the claim relies on (certification settles the rest at COMMIT).
**
** boundary_partial_due_index fills the scratch store's own due_task (a
** scratch store is thrown away after its case) and reads the claim's
** query plan: it checks due's index, so it speaks each database's
** EXPLAIN (MySQL: ANALYZE FORMAT=JSON, the rows and pages really read).
**
** These speak raw SQL on purpose: the point is SQL that due itself never
** runs.  Each statement is written once, in the dialect every SQL store
** accepts, with $N placeholders and CAST(... AS bigint), which the
** store's backend turns into its own (core/admin.h, due__sql).  Values
** are still bound, never pasted.  The query plan is each database's own,
** so its backend fills the store and judges the plan
** (due__sql_plan_check).  A store without SQL (or row locks, or plans)
** has these skipped by cmd_verify.c, in its backend's words.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/verify.h"

/*
** A session of the case's scratch store (v_sql, verify_store.c), held
** through a pointer that raw_close() clears.
*/
typedef v_sql *raw;

static int raw_open(vctx *v, raw *r) { return (*r = v_sql_open(v)) ? 0 : -1; }

static void raw_close(raw *r)
{
	v_sql_close(*r);
	*r = NULL;
}

static int raw_exec(raw *r, const char *sql, int nparams, int64_t p1,
		    int64_t p2, const char *p3, int64_t *out, int cap)
{
	return *r ? v_sql_exec(*r, sql, nparams, p1, p2, p3, out, cap) : -1;
}

static int naive_setup(raw *r, int n)
{
	if (raw_exec(
		r,
		"CREATE TABLE naive_task (id bigint PRIMARY KEY, state text "
		"NOT NULL, attempt int NOT NULL DEFAULT 0, owner text, "
		"result text)",
		0, 0, 0, NULL, NULL, 0) < 0 ||
	    raw_exec(r,
		     "CREATE TABLE naive_effect (task_id bigint, attempt int, "
		     "worker text)",
		     0, 0, 0, NULL, NULL, 0) < 0)
		return -1;
	for (int i = 1; i <= n; i++)
		if (raw_exec(
			r,
			"INSERT INTO naive_task (id, state) VALUES ($1, 'S')",
			1, i, 0, NULL, NULL, 0) < 0)
			return -1;
	return 0;
}

/* Child process: the known-wrong claim loop. */
static void naive_child(vctx *v, int worker)
{
	raw r = NULL;
	char owner[16];
	int64_t ids[5];
	int idle = 0;

	snprintf(owner, sizeof(owner), "n%d", worker);
	if (raw_open(v, &r) < 0)
		_exit(2);
	while (idle < 3) {
		int n = raw_exec(&r,
				 "SELECT id FROM naive_task WHERE state = 'S' "
				 "ORDER BY id LIMIT 5",
				 0, 0, 0, NULL, ids, 5);
		if (n <= 0) {
			idle++;
			usleep(2000);
			continue;
		}
		idle = 0;
		usleep(200); /* the window between read and write */
		for (int i = 0; i < n; i++) {
			raw_exec(
			    &r,
			    "UPDATE naive_task SET state = 'C', owner = $3 "
			    "WHERE id = $1 AND $2 = $2",
			    3, ids[i], 0, owner, NULL, 0);
			raw_exec(&r,
				 "INSERT INTO naive_effect VALUES ($1, 1 + 0 *"
				 " CAST($2 AS bigint), $3)",
				 3, ids[i], 0, owner, NULL, 0);
		}
	}
	raw_close(&r);
	_exit(0);
}

void v_negative_naive_select_then_update(vctx *v)
{
	enum { N = 300 };
	raw r = NULL;
	pid_t kids[3];
	int64_t claims = -1, dup_tasks = -1, multi = -1;

	if (raw_open(v, &r) < 0 || naive_setup(&r, N) < 0) {
		v_case(v, "negative_naive_select_then_update", false,
		       "error=setup");
		raw_close(&r);
		return;
	}
	for (int i = 0; i < 3; i++)
		if ((kids[i] = v_fork()) == 0)
			naive_child(v, i + 1);
	for (int i = 0; i < 3; i++)
		v_reap(kids[i], 60000);
	raw_exec(&r, "SELECT count(*) FROM naive_effect", 0, 0, 0, NULL,
		 &claims, 1);
	raw_exec(
	    &r,
	    "SELECT count(*) FROM (SELECT task_id FROM naive_effect GROUP BY "
	    "task_id HAVING count(*) > 1) d",
	    0, 0, 0, NULL, &dup_tasks, 1);
	raw_exec(
	    &r,
	    "SELECT count(*) FROM (SELECT task_id FROM naive_effect GROUP BY "
	    "task_id HAVING count(DISTINCT worker) > 1) d",
	    0, 0, 0, NULL, &multi, 1);
	raw_close(&r);
	v_case(v, "negative_naive_select_then_update", dup_tasks > 0,
	       "expect_duplicate tasks=%d claims=%lld "
	       "tasks_claimed_more_than_once=%lld "
	       "by_multiple_workers=%lld effects=%lld duplicate_effects=%lld",
	       N, (long long)claims, (long long)dup_tasks, (long long)multi,
	       (long long)claims, (long long)(claims - N));
}

/*
** The stalled-worker timeline of sigstop_late_commit_rejected, with the
** completion written the unfenced way: by id only.
*/
void v_negative_unfenced_late_commit(vctx *v)
{
	raw r = NULL;
	int64_t att = 0, eff = 0, res_is_a = 0;
	bool ok;

	if (raw_open(v, &r) < 0 || naive_setup(&r, 1) < 0) {
		v_case(v, "negative_unfenced_late_commit", false,
		       "error=setup");
		raw_close(&r);
		return;
	}
	const char *claim =
	    "UPDATE naive_task SET state = 'C', attempt = attempt + 1,"
	    " owner = $3 WHERE id = $1 AND state = 'S' AND $2 = $2";
	const char *unfenced = "UPDATE naive_task SET state = 'D', result = $3 "
			       "WHERE id = $1 AND $2 = $2";
	const char *effect = "INSERT INTO naive_effect VALUES ($1, $2, $3)";
	/* A claims attempt 1 and stalls; its lease expires and is reclaimed */
	ok = raw_exec(&r, claim, 3, 1, 0, "A", NULL, 0) >= 0;
	ok &= raw_exec(&r, "UPDATE naive_task SET state = 'S' WHERE id = 1", 0,
		       0, 0, NULL, NULL, 0) >= 0;
	/* B claims attempt 2 and completes */
	ok &= raw_exec(&r, claim, 3, 1, 0, "B", NULL, 0) >= 0;
	ok &= raw_exec(&r, unfenced, 3, 1, 0, "B", NULL, 0) >= 0;
	ok &= raw_exec(&r, effect, 3, 1, 2, "B", NULL, 0) >= 0;
	/* A resumes, notices nothing the store enforces, and commits */
	ok &= raw_exec(&r, unfenced, 3, 1, 0, "A", NULL, 0) >= 0;
	ok &= raw_exec(&r, effect, 3, 1, 1, "A", NULL, 0) >= 0;
	raw_exec(&r, "SELECT attempt FROM naive_task WHERE id = 1", 0, 0, 0,
		 NULL, &att, 1);
	raw_exec(&r, "SELECT count(*) FROM naive_effect", 0, 0, 0, NULL, &eff,
		 1);
	raw_exec(&r, "SELECT count(*) FROM naive_task WHERE result = 'A'", 0, 0,
		 0, NULL, &res_is_a, 1);
	raw_close(&r);
	v_case(
	    v, "negative_unfenced_late_commit", ok && res_is_a == 1 && eff == 2,
	    "expect_overwrite_and_duplicate after_b=[D,2,B] final=[D,%lld,%s] "
	    "effects_no_unique=%lld old_worker=[attempt=1 outcome=DONE]",
	    (long long)att, res_is_a ? "A" : "B", (long long)eff);
}

/*
** The claim's query plan over 20,000 future tasks and 20,000 finished
** ones: each database reads its own plan, so the store's backend fills
** the scratch store and judges it (core/admin.h, due__sql_plan_check:
** SQLite's partial index of one priority's due range, PostgreSQL's index
** condition against now() and the buffers read, MySQL's rows read with
** and without due's indexes).
*/
void v_boundary_partial_due_index(vctx *v)
{
	char detail[2048], *plans = v->verbose ? malloc(65536) : NULL;
	due_time now = 0;
	bool pass = false;
	raw r = NULL;

	if (raw_open(v, &r) < 0) {
		free(plans);
		v_case(v, "boundary_partial_due_index", false, "error=connect");
		return;
	}
	if (due_now(v->db, &now) < 0 ||
	    due__sql_plan_check(r, now, &pass, detail, sizeof(detail), plans,
				plans ? 65536 : 0) < 0) {
		pass = false;
		snprintf(detail, sizeof(detail), "error=plan");
	}
	raw_close(&r);
	if (plans)
		fputs(plans, stderr);
	free(plans);
	v_case(v, "boundary_partial_due_index", pass, "%s", detail);
}

/* A probe statement's outcome as text: rows, or "error". */
static const char *probe_str(int n, char *buf, size_t len)
{
	if (n < 0)
		return "error";
	snprintf(buf, len, "%d_rows", n);
	return buf;
}

void v_row_locks_honoured(vctx *v)
{
	raw a = NULL, b = NULL;
	int64_t ids[2];
	int held = -1, skip = -1, nowait = -1, after = -1;
	char s1[16], s2[16], s3[16];
	bool setup = raw_open(v, &a) == 0 && raw_open(v, &b) == 0 &&
		     raw_exec(&a,
			      "CREATE TABLE lock_probe (id bigint PRIMARY "
			      "KEY)",
			      0, 0, 0, NULL, NULL, 0) == 0 &&
		     raw_exec(&a, "INSERT INTO lock_probe (id) VALUES ($1)", 1,
			      1, 0, NULL, NULL, 0) == 0 &&
		     raw_exec(&a, "BEGIN", 0, 0, 0, NULL, NULL, 0) == 0;

	if (setup)
		held = raw_exec(&a,
				"SELECT id FROM lock_probe WHERE id = $1 "
				"FOR UPDATE",
				1, 1, 0, NULL, ids, 2);
	if (held == 1) {
		skip = raw_exec(&b,
				"SELECT id FROM lock_probe FOR UPDATE SKIP "
				"LOCKED",
				0, 0, 0, NULL, ids, 2);
		nowait = raw_exec(&b,
				  "SELECT id FROM lock_probe WHERE id = $1 "
				  "FOR UPDATE NOWAIT",
				  1, 1, 0, NULL, ids, 2);
		raw_exec(&a, "ROLLBACK", 0, 0, 0, NULL, NULL, 0);
		after = raw_exec(&b,
				 "SELECT id FROM lock_probe FOR UPDATE SKIP "
				 "LOCKED",
				 0, 0, 0, NULL, ids, 2);
	}
	raw_close(&a);
	raw_close(&b);
	if (held != 1) {
		v_case(v, "row_locks_honoured", false,
		       "error=setup held=%d (could not create, fill or lock "
		       "the probe table)",
		       held);
		return;
	}
	bool pass = skip == 0 && nowait < 0 && after == 1;
	v_case(v, "row_locks_honoured", pass,
	       "skip_locked_while_held=%s nowait_while_held=%s "
	       "skip_locked_after=%s%s",
	       probe_str(skip, s1, sizeof(s1)),
	       probe_str(nowait, s2, sizeof(s2)),
	       probe_str(after, s3, sizeof(s3)),
	       pass ? ""
	       : skip > 0
		   ? " diagnosis=\"SKIP LOCKED returned a row another "
		     "transaction holds FOR UPDATE: this engine does not lock "
		     "rows (TiDB ignores SKIP LOCKED); claimers would all pick "
		     "the same tasks, so it is not a supported store\""
		   : " diagnosis=\"the engine does not lock rows the way the "
		     "claim needs (FOR UPDATE, SKIP LOCKED, NOWAIT)\"");
}
