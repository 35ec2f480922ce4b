/*
** pg.c - the PostgreSQL store: many workers on many machines sharing one
** database through libpq.
**
** Concurrency model.  PostgreSQL runs every statement at READ COMMITTED.
** Each transition is ONE statement whose WHERE clause states the rule of
** store.h (state, attempt, lease_until < now()); data-modifying CTEs do the
** bookkeeping (attempt rows, audit rows, NOTIFY) in that same statement.
** When a row the statement wants to write was changed by a transaction that
** committed meanwhile, PostgreSQL re-reads the newest version and evaluates
** the WHERE clause again before writing (EvalPlanQual), so a reclaim never
** overwrites a completion that landed in between (River #1302), and a late
** complete finds a state that no longer matches and writes nothing.  Claim
** is UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) AND
** state = 'SCHEDULED': concurrent claimers skip each other's rows instead of
** queueing on them, and no try is handed out twice.  The picking SELECT is
** a MATERIALIZED CTE: written inline, the planner may run it as the inner
** side of a nested-loop semi join, re-executing it for every outer row;
** each rescan skips the rows this statement already updated and locks the
** next ones, so LIMIT 10 claimed 25 rows (seen with a generic plan on a
** small table).  The update then takes `id = ANY (ARRAY(SELECT id FROM
** p))`, which is always a primary-key index scan, whatever the statistics
** say.  Reclaim and prune pick the same way.  cancel and extend must
** report what they found, so they lock the row first (a FOR UPDATE CTE) and
** then write from what they locked.  Only schedule with keys (insert, then
** look up the live task on conflict) or with parents (mark and lock them,
** then insert), and complete with a hook need an explicit transaction.
** Run after's release is the one place where a statement's snapshot is
** not enough: a finishing statement calls the VOLATILE due_release(),
** whose statements each take a new snapshot (RELEASE, and
** docs/internals/after-postgres.md).
**
** Clock.  Due times and leases are judged by the database server's clock
** alone: now() (the transaction's start, a STABLE function, so the claim
** plan uses the partial index with `Index Cond: (due_at <= now())`) and
** clock_timestamp() for the end of a lease.  The host clock is never bound
** for them.  Times are timestamptz columns; they cross the wire in binary
** (int64 microseconds since 2000-01-01), which is exact, so no float
** conversion ever rounds a due time.
**
** Wire and session.  The connection, its prepared statements, errors and
** the binary encoding of parameters and results are pg_wire.c's; this
** file holds the statements.  A batch (schedule, complete) is one
** statement over arrays (unnest), so n items cost one round trip.
**
** URL.  postgres://... or postgresql://..., handed to libpq (its query
** carries libpq's own options, e.g. options=-csearch_path%3Dx) without
** due's own: pooler=transaction (behind PgBouncer in transaction mode:
** no named statements, no session settings, no LISTEN through it) and
** listen=URL (a direct server to LISTEN on); pg_wire.c tells how.
**
** Reads at scale (docs/internals/scale.md).  stats, metrics and `due ls
** --state` never scan the task or attempts table whole: the figures an
** operator acts on (CLAIMED, DEAD, the overdue backlog) are counted
** through the partial indexes that bound them; SCHEDULED, DONE and
** CANCELLED are the planner's row counts, counted exactly (never past
** CAP entries) only when those say small; the history is read through
** the claimed_at index for the last DUE_METRICS_WINDOW_US.  due init
** gives the queue tables churn-driven autovacuum settings and room for
** HOT updates (schema step 5).
**
** Notifications.  Every submit (and every transition that makes a task due
** again: retry, requeue, reclaim, a failed try's retry after its backoff,
** a held child released by its parent's end in due_release()) calls
** pg_notify('due_task_new', kind) in its own transaction, so a listener
** wakes only for committed tasks.
**
** Schema history (bump DUE_SCHEMA_VERSION in due.h, add a step to
** `steps`, which due__migrate walks under the init advisory lock, never
** edit a released step):
**   1  due_meta, due_task, due_attempt, due_audit, their indexes and the
**      due_backoff() function.
**   2  due_schedule (periodic schedules) and due_worker (worker reports).
**      A new database runs step 1 then step 2, so a fresh schema and an
**      upgraded one are the same by construction.
**   3  No change here: version 3 rebuilt SQLite's tables (their CHECKs,
**      src/store/sqlite.c); PostgreSQL's IN lists cost nothing, so the
**      step only records the version both stores share.
**   4  Flow control: due_task.priority, grp, timeout_us and the claim
**      indexes on priority; TIMED_OUT attempts; due_kind, due_rate.
**   5  Scale: due_lock, due_worker.pruned, due_task_dead, the (kind,
**      state) statistics, per-table autovacuum and fillfactor.
**   6  No change here: version 6 moved SQLite's running try into its
**      task row (src/store/sqlite.c); the step records the version.
**   7  No change here either: version 7 dropped SQLite's due_task_due
**      and merged two of its (id) indexes; the step records the version.
**   8  No table changes: the version makes every store pass through
**      `due init`, which recreates due_schedule() pinned to the schema
**      of due_task (issue 36: it had followed the caller's "$user"
**      schema) and bounded like `due add --at` (create_functions).
**   9  No table changes: the version makes every store pass through
**      `due init`, which creates due_reschedule() (issue 38) beside
**      due_schedule().
**  10  No table changes: `due init` adds due_schedule(..., on_key), the
**      overload that debounces by key (issue 38), beside the six-argument
**      one, which it keeps (and its grants).
**  11  Run after (issue 38 point 3, docs/internals/after-postgres.md):
**      due_task.after_n, after_left, after_any_end, after_at,
**      after_delay_us and is_parent; due_after, one row per (parent,
**      child) edge, pending until its parent's end is counted; `due init`
**      adds due_release() and due_schedule_after().
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "store/flow.h"
#include "store/pg_wire.h"
#include "store/row.h"
#include "store/store.h"

/* Rows per reclaim or prune statement: bounded batches (CONTRACT §9). */
#define BATCH_ROWS 1000

/* How often a keyed submit retries when the live task vanishes under it. */
#define KEY_TRIES 20

/* Serializes concurrent `due init` runs on one database ("due:init"). */
#define INIT_LOCK "7238803277619292532"

enum stmt_id {
	ST_NOW,
	ST_INSERT,
	ST_INSERT_ONE,
	ST_FIND_KEY,
	ST_CLAIM_ANY,
	ST_CLAIM_KINDS,
	ST_CLAIM_EXCLUDE,
	ST_CLAIM_ID,
	ST_EXTEND,
	ST_COMPLETE,
	ST_FAIL,
	ST_RECLAIM,
	ST_CANCEL,
	ST_GET,
	ST_ATTEMPTS,
	ST_LIST,
	ST_LIST_SCHEDULED, /* ST_LIST_SCHEDULED + state: due_state order */
	ST_LIST_CLAIMED,
	ST_LIST_DONE,
	ST_LIST_CANCELLED,
	ST_LIST_DEAD,
	ST_RETRY,
	ST_REQUEUE,
	ST_KILL,
	ST_STATS,
	ST_PRUNE,
	ST_SCHED_GET,
	ST_SCHED_LIST,
	ST_SCHED_PUT,
	ST_SCHED_REMOVE,
	ST_SCHED_FIRE,
	ST_SCHED_LAST_TASK,
	ST_METRICS,
	ST_METRICS_KINDS,
	ST_WORKER_REPORT,
	ST_UPC_ANY,
	ST_UPC_KINDS,
	ST_UPC_EXCLUDE,
	ST_CC_ANY,
	ST_CC_KINDS,
	ST_CC_EXCLUDE,
	ST_FLOW_LOCK,
	ST_FLOW_CLAIM,
	ST_KIND_PUT,
	ST_KIND_GET,
	ST_KIND_REMOVE,
	ST_LOCK_TAKE,
	ST_BYTES,
	ST_RESCHEDULE,
	ST_KEY_MOVE,
	ST_KEY_HOLDER,
	ST_KEY_GIVE_UP,
	ST_AFTER_MARK,
	ST_INSERT_AFTER,
	ST_AFTER_OF,
	ST_LIST_HELD,
	ST_COUNT
};

/* Where a task has used its attempt budget (store.h). */
#define USED_UP "attempt - attempt_base >= max_attempts"

#define US(x) "(" x ")::int8 * interval '1 microsecond'"

/*
** Run after (schema 11).  A held task is SCHEDULED with due_at HELD_AT
** (DUE_TIME_LAST, 9999-12-31T23:59:59.999999Z): no claim, due index,
** upcoming or lateness ever reaches it.
*/
#define HELD_AT "'9999-12-31T23:59:59.999999Z'::timestamptz"

/*
** The release of a finishing statement's rows (docs/internals/
** after-postgres.md): `src` is its UPDATE's CTE, whose
** RETURNING gives id and kid (is_parent, and the row ended).  The call
** happens only when a row is a parent (one flag read from the row the
** UPDATE wrote: nothing more for a task without children), and always
** after the UPDATE has run to completion (ARRAY pulls every row of src
** first), so every parent row is locked by then.  due_release() is
** VOLATILE: each of its statements takes a new snapshot, which sees a
** child whose insert committed while this statement waited for a
** parent's row lock (the child's submit holds it FOR SHARE until its
** commit); a CTE of this statement could not (its snapshot is older).
** The caller's statement must read rl, e.g. (SELECT count(*) FROM rl).
*/
#define RELEASE(src)                                                           \
	" rl AS (SELECT due_release(ARRAY(SELECT id FROM " src                 \
	" WHERE kid)) AS n WHERE EXISTS (SELECT 1 FROM " src " WHERE kid))"
#define ENDED(st) "(" st " IN ('DONE', 'DEAD', 'CANCELLED'))"

/*
** A new time for a task that may be held (reschedule): a
** held task keeps due_at HELD_AT and stores the time as its own, applied
** at its release; at (NULL: none) and delay as asked.
*/
#define HOLD_TIME(at, delay)                                                   \
	"after_at = CASE WHEN after_left > 0 THEN " at " ELSE after_at END,"   \
	" after_delay_us = CASE WHEN after_left > 0 THEN " delay               \
	" ELSE after_delay_us END"

/*
** on_key (ST_KEY_MOVE, ST_KEY_HOLDER): the due time a keyed submit asks
** for ($3 an instant or NULL, $4 a delay from now()), and the earliest a
** waiting holder runs: its due_at, or for a held one the time its release
** now would give it (max(after_at, now + after_delay_us), as due_release).
*/
#define KEY_DUE "coalesce($3::timestamptz, now() + " US("$4") ")"
#define KEY_EARLIEST                                                           \
	"CASE WHEN after_left > 0 THEN greatest(coalesce(after_at,"            \
	" '-infinity'), now() + " US(                                          \
	    "coalesce(after_delay_us, 0)") ") ELSE due_at END"

/*
** Flow control (docs/internals/flow.md).  A kind is limited when it has a
** rate or a running limit; the claim of the other kinds leaves paused and
** limited kinds alone (HELD_KINDS, an init plan over the small due_kind
** table, read once per statement).
*/
#define LIMITED                                                                \
	"(rate_n IS NOT NULL OR max_running IS NOT NULL"                       \
	" OR max_running_per_group IS NOT NULL)"
#define HELD_KINDS                                                             \
	"ARRAY(SELECT kind FROM due_kind WHERE paused OR " LIMITED ")"

/*
** The pick of the kinds without limits: the due tasks in (priority,
** due_at) order without sorting the backlog.  pr walks the distinct
** priorities of scheduled tasks lowest first, one probe of due_task_claim
** each (a loose index scan: min(priority) above the last); the LATERAL
** takes each priority's due tasks in due_at order from the same index.
** Both are pulled lazily under the outer LIMIT, so a claim that the first
** priority fills probes no further.  Ends "p AS MATERIALIZED (...)".
** The held kinds are tested on `kind || ''`, an expression without
** statistics, on purpose: on `kind` itself the planner judges "kind <>
** (a value it cannot see)" by the column's statistics, and with one or
** two kinds in the table it expects almost no row to pass, so it reads
** and sorts the whole priority through a bitmap scan instead of taking
** the first rows of the index in order (seen with 100k tasks of a kind).
** And "priority = p AND due_at <= now()" is written as a range of rows,
** (p, -infinity) .. (p, now()), which only due_task_claim can bound and
** deliver in order: given the equality, the planner preferred the due_at
** index (due_task_due, which upcoming needs) with the priority as a
** filter, reading every due task of the other priorities first.
*/
#define PICK_PRIO(filter, n)                                                   \
	"pr AS (SELECT (SELECT min(priority) FROM due_task"                    \
	" WHERE state = 'SCHEDULED') AS p UNION ALL SELECT (SELECT"            \
	" min(priority) FROM due_task WHERE state = 'SCHEDULED'"               \
	" AND priority > pr.p) FROM pr WHERE pr.p IS NOT NULL),"               \
	" p AS MATERIALIZED (SELECT q.id FROM pr CROSS JOIN LATERAL"           \
	" (SELECT id FROM due_task WHERE state = 'SCHEDULED'"                  \
	" AND (priority, due_at) >= (pr.p, '-infinity'::timestamptz)"          \
	" AND (priority, due_at) <= (pr.p, now())"                             \
	" AND (kind || '') <> ALL (" HELD_KINDS ")" filter                     \
	" ORDER BY priority, due_at"                                           \
	" LIMIT " n " FOR UPDATE SKIP LOCKED) q WHERE pr.p IS NOT NULL"        \
	" LIMIT " n ")"

/*
** Whether a limited kind the claim admits (filter on d.kind) has due
** tasks: the claim then runs the limited kinds' own transaction.  The
** inner EXISTS carries OFFSET 0 so that it stays a subplan run per
** due_kind row (none, on a store without limits): pulled up into a semi
** join, the planner (trusting stale statistics) aggregated every due task
** by kind first, reading the whole backlog on every claim.
*/
#define LIMITED_DUE(filter)                                                    \
	"EXISTS (SELECT 1 FROM due_kind d WHERE NOT d.paused AND " LIMITED     \
	    filter                                                             \
	" AND EXISTS (SELECT 1 FROM due_task t WHERE t.kind = d.kind"          \
	" AND t.state = 'SCHEDULED' AND t.due_at <= now() OFFSET 0))"

/*
** The claimed rows, then the kind's time limit (for a task without its
** own) and the LIMITED_DUE flag: one row with a NULL task when nothing
** was claimed, so the flag always comes back.
*/
#define CLAIMED_COLS                                                           \
	DUE_TASK_COLS ", (SELECT k.timeout_us FROM due_kind k"                 \
		      " WHERE k.kind = c.kind), fl.lim"
#define COL_KIND_TIMEOUT DUE_TC_COUNT
#define COL_LIMITED (DUE_TC_COUNT + 1)

/* The claim statement around a row picker (store.h: claim). */
#define CLAIM_SQL(pick, lim)                                                   \
	"WITH RECURSIVE " pick ","                                             \
	" c AS (UPDATE due_task t SET state = 'CLAIMED',"                      \
	" attempt = t.attempt + 1, lease_owner = $1::text,"                    \
	" lease_until = clock_timestamp() + " US(                              \
	    "$2") ", updated_at = now()"                                       \
		  " WHERE t.id = ANY (ARRAY(SELECT id FROM p))"                \
		  " RETURNING t.*),"                                           \
		  " a AS (INSERT INTO due_attempt (task_id, attempt, worker, " \
		  "claimed_at,"                                                \
		  " due_at) SELECT id, attempt, lease_owner, now(), due_at "   \
		  "FROM c),"                                                   \
		  " fl AS (SELECT " lim " AS lim)"                             \
		  " SELECT " CLAIMED_COLS " FROM fl LEFT JOIN c ON true"       \
		  " ORDER BY c.priority, c.due_at, c.id"

#define PICK_ID                                                                \
	"p AS MATERIALIZED (SELECT id FROM due_task WHERE state = 'SCHEDULED'" \
	" AND due_at <= now() AND id = $3::int8"                               \
	" AND kind <> ALL (" HELD_KINDS ") FOR UPDATE SKIP LOCKED)"

/* Whether task $3 is due and of a limited kind (not paused). */
#define LIMITED_ID                                                             \
	"EXISTS (SELECT 1 FROM due_task t JOIN due_kind d ON d.kind = t.kind"  \
	" WHERE t.id = $3::int8 AND t.state = 'SCHEDULED'"                     \
	" AND t.due_at <= now() AND NOT d.paused AND " LIMITED ")"

/*
** The limited kinds' claim, part 1 of flow.md, in its own transaction.
** ST_FLOW_LOCK locks the due_kind rows of the limited kinds the claim
** admits ($1 the kinds or NULL for all, $2 exclude them, $3 only that
** task's kind) that have due tasks, in kind order so two claimers never
** deadlock.  Then ST_FLOW_CLAIM runs once per locked kind: a NEW
** statement, so at READ COMMITTED its snapshot sees every claim of the
** kind that committed before our lock was granted.  Its time is
** statement_timestamp(), not now(): now() is the transaction's start,
** which may be before a claim that committed while we waited for the
** lock; the statement's start is after the lock, so the claim times of a
** kind grow in lock order, which the sliding window needs (a claim must
** never delete, as expired, a log row a later claim still counts).  The
** attempt's claimed_at and the due_rate row both get that time.
*/
static const char flow_lock_sql[] =
    "SELECT kind FROM due_kind d WHERE NOT paused AND " LIMITED
    " AND ($1::text[] IS NULL OR (kind = ANY ($1::text[])) <> $2::bool)"
    " AND ($3::int8 = 0 OR kind = (SELECT kind FROM due_task"
    " WHERE id = $3::int8)) AND EXISTS (SELECT 1 FROM due_task t"
    " WHERE t.kind = d.kind AND t.state = 'SCHEDULED'"
    " AND t.due_at <= now() OFFSET 0) ORDER BY kind COLLATE \"C\" FOR UPDATE";

/* Candidates beyond the claim's room a group-limited pick looks at. */
#define GROUP_SCAN "1000"

/*
** One limited kind $1 under its lock: $2 owner, $3 lease, $4 room left,
** $5 only this task (0: any).
**  k    the settings and the statement's time ts;
**  run  live tries by group (NULL: none), from the tasks' own leases;
**  rt   the claims logged inside the rate's window, and the oldest;
**  cap  min(room, rate left, running left);
**  fg   the groups at their limit, excluded in the pick itself;
**  cand the due tasks of the other groups in (priority, due_at) order
**       through due_task_kind_claim (a few beyond cap, to see what is
**       left and to fill past a group's own limit);
**  pick at most mg - running(group) per group, cap in all;
**  h    why due tasks were left, if a limit left them: 1 rate,
**       2 running, 3 group; its counter goes up by one (hu).
** Returns the claimed rows (CLAIMED_COLS), h.why and the microseconds to
** wait: until the oldest logged claim leaves the window (rate), or
** 100 ms (a running slot frees when a try ends).
*/
/* clang-format off */
static const char flow_claim_sql[] =
    "WITH k AS MATERIALIZED (SELECT rate_n, rate_us, max_running AS mr,"
    "   max_running_per_group AS mg, statement_timestamp() AS ts"
    "   FROM due_kind WHERE kind = $1::text),"
    " run AS MATERIALIZED (SELECT grp, count(*) AS n FROM due_task, k"
    "   WHERE kind = $1::text AND state = 'CLAIMED' AND lease_until >= k.ts"
    "   GROUP BY grp),"
    " rt AS MATERIALIZED (SELECT count(*) AS n, min(at) AS oldest"
    "   FROM due_rate r, k WHERE r.kind = $1::text AND k.rate_n IS NOT NULL"
    "   AND r.at > k.ts - " US("k.rate_us") "),"
    " cap AS MATERIALIZED (SELECT least($4::int8, rl, ml) AS n, rl, ml"
    "   FROM (SELECT CASE WHEN k.rate_n IS NULL THEN $4::int8"
    "     ELSE greatest(k.rate_n - rt.n, 0) END AS rl,"
    "   CASE WHEN k.mr IS NULL THEN $4::int8"
    "     ELSE greatest(k.mr - (SELECT coalesce(sum(n), 0) FROM run), 0)"
    "     END AS ml FROM k, rt) x),"
    " fg AS MATERIALIZED (SELECT run.grp FROM run, k"
    "   WHERE run.grp IS NOT NULL AND k.mg IS NOT NULL AND run.n >= k.mg),"
    " cand AS MATERIALIZED (SELECT id, grp, priority, due_at FROM due_task"
    "   WHERE kind = $1::text AND state = 'SCHEDULED' AND due_at <= now()"
    "   AND ($5::int8 = 0 OR id = $5::int8)"
    "   AND (grp IS NULL OR grp <> ALL (ARRAY(SELECT grp FROM fg)))"
    "   ORDER BY priority, due_at LIMIT (SELECT cap.n + CASE WHEN k.mg IS"
    "   NULL THEN 1 ELSE " GROUP_SCAN " END FROM cap, k)),"
    " pick AS MATERIALIZED (SELECT x.id FROM (SELECT cand.*, row_number()"
    "   OVER (PARTITION BY grp ORDER BY priority, due_at, id) AS rn"
    "   FROM cand) x LEFT JOIN run r ON r.grp = x.grp CROSS JOIN k"
    "   WHERE x.grp IS NULL OR k.mg IS NULL OR x.rn <= k.mg - coalesce(r.n, 0)"
    "   ORDER BY x.priority, x.due_at, x.id LIMIT (SELECT n FROM cap)),"
    " c AS (UPDATE due_task t SET state = 'CLAIMED',"
    "   attempt = t.attempt + 1, lease_owner = $2::text,"
    "   lease_until = clock_timestamp() + " US("$3") ", updated_at = now()"
    "   WHERE t.id = ANY (ARRAY(SELECT id FROM pick))"
    "   AND t.state = 'SCHEDULED' RETURNING t.*),"
    " a AS (INSERT INTO due_attempt (task_id, attempt, worker, claimed_at,"
    "   due_at) SELECT c.id, c.attempt, c.lease_owner, k.ts, c.due_at"
    "   FROM c, k),"
    " ri AS (INSERT INTO due_rate (kind, at) SELECT $1::text, k.ts"
    "   FROM c, k WHERE k.rate_n IS NOT NULL),"
    " rd AS (DELETE FROM due_rate r USING k WHERE r.kind = $1::text"
    "   AND k.rate_n IS NOT NULL AND r.at <= k.ts - " US("k.rate_us") "),"
    " g AS MATERIALIZED (SELECT (SELECT count(*) FROM c) AS got,"
    "   (SELECT count(*) FROM cand) AS seen, EXISTS (SELECT 1 FROM due_task"
    "   WHERE kind = $1::text AND state = 'SCHEDULED' AND due_at <= now()"
    "   AND ($5::int8 = 0 OR id = $5::int8)"
    "   AND grp = ANY (ARRAY(SELECT grp FROM fg))) AS grp_left),"
    " h AS MATERIALIZED (SELECT CASE WHEN g.got >= $4::int8"
    "   OR NOT (g.seen > g.got OR g.grp_left) THEN 0"
    "   WHEN g.got = cap.n AND cap.rl = cap.n THEN 1"
    "   WHEN g.got = cap.n AND cap.ml = cap.n THEN 2 ELSE 3 END AS why"
    "   FROM g, cap),"
    " hu AS (UPDATE due_kind d SET held_rate = held_rate + (why = 1)::int,"
    "   held_running = held_running + (why = 2)::int,"
    "   held_group = held_group + (why = 3)::int FROM h"
    "   WHERE d.kind = $1::text AND h.why > 0),"
    " fl AS (SELECT false AS lim)"
    " SELECT " CLAIMED_COLS ", h.why, CASE h.why WHEN 0 THEN 0"
    "   WHEN 1 THEN greatest(1, k.rate_us - (extract(epoch FROM k.ts -"
    "   coalesce(rt.oldest, k.ts)) * 1000000)::int8) ELSE 100000 END"
    " FROM h CROSS JOIN k CROSS JOIN rt CROSS JOIN fl LEFT JOIN c ON true"
    " ORDER BY c.priority, c.due_at, c.id";
/* clang-format on */
#define COL_WHY (DUE_TC_COUNT + 2)
#define COL_RETRY (DUE_TC_COUNT + 3)

/*
** Finished tasks (due_wait): every statement that ends a task notifies
** DUE_PG_DONE_CHANNEL once, folded into one notification per transaction
** by PostgreSQL, and only while someone waits: a waiter keeps the
** due_lock row DUE_PG_WAIT_GATE alive (pg_wire.c, listen_done), and a
** completion reads it by primary key in the same statement.  Without
** the gate the notification cost the drain with 4 workers a third of
** its rate: every NOTIFY takes one lock at commit, so notifying commits
** queue behind each other (docs/internals/discovery.md).
*/
#define WAITED                                                                 \
	" AND EXISTS (SELECT 1 FROM due_lock WHERE name = '" DUE_PG_WAIT_GATE  \
	"' AND until > now())"

/* requeue and kill: one fenced update, attempt row, audit, notify. */
#define OPERATOR_SQL(set, where, outcome, action)                              \
	"WITH u AS (UPDATE due_task SET " set ", lease_owner = NULL,"          \
	" lease_until = NULL, updated_at = now() WHERE id = $1::int8 "         \
	"AND " where " RETURNING id, attempt, state, kind,"                    \
	" is_parent AND " ENDED(                                               \
	    "state") " AS kid),"                                               \
		     " e AS (UPDATE due_attempt a SET ended_at = now(), "      \
		     "outcome = "                                              \
		     "'" outcome "', error = '" action                         \
		     "' FROM u WHERE a.task_id = u.id"                         \
		     " AND a.attempt = u.attempt AND a.outcome = 'RUNNING'),"  \
		     " au AS (INSERT INTO due_audit (task_id, at, action, "    \
		     "detail)"                                                 \
		     " SELECT id, now(), '" action "', state FROM u),"         \
		     " n AS (SELECT pg_notify('due_task_new', kind) FROM u"    \
		     " WHERE state = 'SCHEDULED'),"                            \
		     " dn AS (SELECT pg_notify('" DUE_PG_DONE_CHANNEL          \
		     "', '') WHERE"                                            \
		     " EXISTS (SELECT 1 FROM u WHERE state <> "                \
		     "'SCHEDULED')" WAITED                                     \
		     ")," RELEASE("u") " SELECT (SELECT state FROM u),"        \
				       " (SELECT state FROM due_task WHERE "   \
				       "id = $1::int8),"                       \
				       " (SELECT count(*) FROM n), (SELECT "   \
				       "count(*) FROM dn),"                    \
				       " (SELECT count(*) FROM rl)"

/*
** The completion CTEs (store.h: complete).  Three of their predicates are
** written for the planner, whose statistics for a queue table are nearly
** always wrong (the table churns faster than ANALYZE runs, and a cached
** generic plan outlives the sizes it was made for):
**  - d fences on "lease_owner IS NOT NULL", which the claimed_iff_lease
**    CHECK makes the same as state = 'CLAIMED', because that equality
**    lets the planner AND in a bitmap scan of the partial lease index,
**    whose dead entries a bitmap scan never prunes: the scan grows with
**    every task ever completed since the last vacuum;
**  - the claim's update (CLAIM_SQL, COMPLETE_CLAIM_SQL) does not re-test
**    state = 'SCHEDULED' for the same reason: the picker locked its rows
**    FOR UPDATE and re-checked the predicate on their newest version, so
**    nothing can change them before this statement commits;
**  - l (late commits, rare) is gated by a one-time "EXISTS (SELECT 1 FROM
**    s)", so a plan that seq-scans due_attempt never runs on the hot path.
*/
#define COMPLETE_CTES                                                          \
	"i AS MATERIALIZED (SELECT * FROM unnest($1::int8[],"                  \
	" $2::int4[], $3::bytea[]) WITH ORDINALITY AS u(id, attempt,"          \
	" result, ord)),"                                                      \
	" d AS (UPDATE due_task t SET state = CASE WHEN t.cancel_requested"    \
	" THEN 'CANCELLED' ELSE 'DONE' END, result = CASE WHEN"                \
	" t.cancel_requested THEN NULL ELSE i.result END,"                     \
	" last_error = CASE WHEN t.cancel_requested THEN t.last_error END,"    \
	" lease_owner = NULL, lease_until = NULL, updated_at = now()"          \
	" FROM (SELECT DISTINCT ON (id, attempt) * FROM i"                     \
	" ORDER BY id, attempt, ord) i WHERE t.id = ANY ($1::int8[])"          \
	" AND t.id = i.id AND t.attempt = i.attempt"                           \
	" AND t.lease_owner IS NOT NULL"                                       \
	" RETURNING i.ord, t.id, t.attempt, t.state, t.is_parent AS kid),"     \
	" e AS (UPDATE due_attempt a SET ended_at = now(), outcome = d.state," \
	" error = CASE WHEN d.state = 'CANCELLED'"                             \
	" THEN 'cancel requested before commit' END,"                          \
	" late_commit = CASE WHEN EXISTS (SELECT 1 FROM i WHERE i.id = d.id"   \
	" AND i.attempt = d.attempt AND i.ord <> d.ord)"                       \
	" THEN 'REJECTED_STALE' ELSE a.late_commit END FROM d"                 \
	" WHERE a.task_id = d.id AND a.attempt = d.attempt"                    \
	" AND a.outcome = 'RUNNING'),"                                         \
	" s AS MATERIALIZED (SELECT id, attempt FROM i WHERE NOT EXISTS"       \
	" (SELECT 1 FROM d WHERE d.id = i.id AND d.attempt = i.attempt)),"     \
	" l AS (UPDATE due_attempt a SET late_commit = 'REJECTED_STALE'"       \
	" FROM s WHERE EXISTS (SELECT 1 FROM s) AND a.task_id = s.id"          \
	" AND a.attempt = s.attempt),"                                         \
	" dn AS (SELECT pg_notify('" DUE_PG_DONE_CHANNEL "', '')"              \
	" WHERE EXISTS (SELECT 1 FROM d)" WAITED ")," RELEASE("d")

/*
** Cheap reads at any size (docs/internals/scale.md).  stats and metrics
** count exactly only what an index bounds: CLAIMED (due_task_lease,
** bounded by what runs), DEAD (due_task_dead), the overdue backlog
** (due_task_due up to now()).  SCHEDULED, DONE and CANCELLED may be
** millions; for them EST_ROWS reads the planner's row count of their
** partial index (pg_class.reltuples scaled to the index's size now, as
** the planner itself scales it; -1 before the first VACUUM or ANALYZE),
** and only when it says small (< SMALL, or unknown) does h count them,
** through the index and never past CAP rows, so a stale estimate costs
** at most CAP index entries.  A count that stopped at CAP, or one not
** made, leaves an estimate.  The CASEs run their sub-selects only when
** taken (PostgreSQL evaluates an init plan on first use).
**   e  s_est, f_est (SCHEDULED; DONE + CANCELLED), t_est (the table),
**      done_share (DONE's part of the finished, from pg_stats)
**   h  s_n, f_n = {finished, DONE} counted (NULL: not counted), and
**      s_exact / f_exact
** e.serial is never read: current_schema() is PARALLEL UNSAFE, and one
** such call keeps the whole statement serial.  Every read here is small,
** but the planner judges "due_at <= now()" by the column's statistics
** over the whole table (finished tasks were due in the past too) and
** expects a third of the index, and a parallel worker's start-up (~10
** ms) then costs more than the read it shares.
*/
#define SMALL "10000"
/*
** The tries claimed in the last `us`, as a closed range on purpose: a
** generic plan cannot see now(), and an open "claimed_at >= now() - w"
** is guessed at a third of the table, which buys a parallel scan (worker
** start-up, ~10 ms, more than the read) or a seq scan of due_attempt; a
** closed range of unknown bounds is guessed small, which it is.
*/
#define CLAIMED_SINCE(us)                                                      \
	" claimed_at >= now() - " US(us) " AND claimed_at <= 'infinity'"
#define CAP "10001"
#define DUE_NSP                                                                \
	"(SELECT n.nspname FROM pg_class c JOIN pg_namespace n"                \
	" ON n.oid = c.relnamespace WHERE c.oid = to_regclass('due_task'))"
#define EST_ROWS(rel)                                                          \
	"(SELECT CASE WHEN c.reltuples < 0 THEN -1::float8"                    \
	" WHEN c.relpages = 0 THEN c.reltuples::float8"                        \
	" ELSE c.reltuples / c.relpages * (pg_relation_size(c.oid)"            \
	" / current_setting('block_size')::float8) END"                        \
	" FROM pg_class c WHERE c.oid = to_regclass('" rel "'))"
/* clang-format off */
#define GATE_CTES                                                              \
	"e AS MATERIALIZED (SELECT " EST_ROWS("due_task_due") " AS s_est, "    \
	EST_ROWS("due_task_finished") " AS f_est, "                            \
	EST_ROWS("due_task") " AS t_est,"                                      \
	" (SELECT (sum(u.f) FILTER (WHERE u.v = 'DONE')"                       \
	"   / nullif(sum(u.f), 0))::float8 FROM pg_stats st,"                  \
	"   unnest(st.most_common_vals::text::text[], st.most_common_freqs)"   \
	"   AS u(v, f) WHERE st.schemaname = " DUE_NSP                         \
	"   AND st.tablename = 'due_task' AND st.attname = 'state'"            \
	"   AND u.v IN ('DONE', 'CANCELLED')) AS done_share,"                 \
	" current_schema() AS serial),"                 \
	" g AS MATERIALIZED (SELECT e.*, CASE WHEN e.s_est < " SMALL           \
	"   THEN (SELECT count(*) FROM (SELECT 1 FROM due_task"                \
	"   WHERE state = 'SCHEDULED' ORDER BY due_at LIMIT " CAP ") x)"       \
	"   END AS s_n, CASE WHEN e.f_est < " SMALL " THEN (SELECT"            \
	"   ARRAY[count(*), count(*) FILTER (WHERE state = 'DONE')]"           \
	"   FROM (SELECT state FROM due_task WHERE state IN ('DONE',"          \
	"   'CANCELLED') ORDER BY updated_at LIMIT " CAP ") y) END AS f_n"     \
	"   FROM e),"                                                          \
	" h AS MATERIALIZED (SELECT g.*,"                                      \
	"   coalesce(g.s_n <= " SMALL ", false) AS s_exact,"                   \
	"   coalesce(g.f_n[1] <= " SMALL ", false) AS f_exact FROM g)"
/* clang-format on */

static const char *const sql_text[ST_COUNT] = {
    [ST_NOW] = "SELECT now()",
    [ST_INSERT] =
	"WITH i AS MATERIALIZED (SELECT nextval('due_task_id_seq') AS id,"
	" u.* FROM unnest($1::text[], $2::bytea[], $3::timestamptz[],"
	" $4::int8[], $5::int4[], $6::int8[], $7::int8[], $8::text[],"
	" $9::int4[], $10::text[], $11::int8[])"
	" WITH ORDINALITY AS u(kind, payload, at_ts, delay_us,"
	" max_attempts, backoff_us, backoff_cap_us, key, priority, grp,"
	" timeout_us, ord)),"
	" ins AS (INSERT INTO due_task (id, kind, payload, state, due_at,"
	" max_attempts, backoff_us, backoff_cap_us, key, priority, grp,"
	" timeout_us, created_at, updated_at) OVERRIDING SYSTEM VALUE"
	" SELECT id, kind, payload, 'SCHEDULED',"
	" coalesce(at_ts, now() + " US(
	    "delay_us") "), max_attempts,"
			" backoff_us, backoff_cap_us, key, priority, grp,"
			" timeout_us, now(), now() FROM i "
			"ORDER BY ord"
			" ON CONFLICT (kind, key) WHERE key IS NOT NULL AND"
			" state IN ('SCHEDULED', 'CLAIMED') DO NOTHING "
			"RETURNING id, kind),"
			" n AS (SELECT pg_notify('due_task_new', kind)"
			" FROM (SELECT DISTINCT kind FROM ins) k)"
			" SELECT i.ord, ins.id, (SELECT count(*) FROM n)"
			" FROM i LEFT JOIN ins ON ins.id = i.id ORDER BY i.ord",
    /* ST_INSERT for one task, with scalar parameters: no arrays to
       unnest and no join back to the input, 0.26 ms a submit instead of
       0.36 (pgbench, one client, a durable commit each).  One row with
       the new id, or none when (kind, key) conflicted. */
    [ST_INSERT_ONE] =
	"WITH ins AS (INSERT INTO due_task (kind, payload, state, due_at,"
	" max_attempts, backoff_us, backoff_cap_us, key, priority, grp,"
	" timeout_us, created_at, updated_at) VALUES ($1::text, $2::bytea,"
	" 'SCHEDULED', coalesce($3::timestamptz, now() + " US(
	    "$4") "), $5::int4, $6::int8, $7::int8, $8::text, $9::int4,"
		  " $10::text, $11::int8, now(), now())"
		  " ON CONFLICT (kind, key) WHERE key IS NOT NULL AND"
		  " state IN ('SCHEDULED', 'CLAIMED') DO NOTHING"
		  " RETURNING id, kind)"
		  " SELECT id, pg_notify('" DUE_PG_CHANNEL "', kind) FROM ins",
    [ST_FIND_KEY] =
	"SELECT id FROM due_task WHERE kind = $1::text AND key = $2::text"
	" AND state IN ('SCHEDULED', 'CLAIMED')",
    [ST_CLAIM_ANY] = CLAIM_SQL(PICK_PRIO("", "$3::int4"), LIMITED_DUE("")),
    [ST_CLAIM_KINDS] =
	CLAIM_SQL(PICK_PRIO(" AND kind = ANY ($4::text[])", "$3::int4"),
		  LIMITED_DUE(" AND d.kind = ANY ($4::text[])")),
    [ST_CLAIM_EXCLUDE] =
	CLAIM_SQL(PICK_PRIO(" AND kind <> ALL ($4::text[])", "$3::int4"),
		  LIMITED_DUE(" AND d.kind <> ALL ($4::text[])")),
    [ST_CLAIM_ID] = CLAIM_SQL(PICK_ID, LIMITED_ID),
    [ST_EXTEND] =
	"WITH cur AS (SELECT id, state, attempt, cancel_requested"
	" FROM due_task WHERE id = $1::int8 FOR UPDATE),"
	" u AS (UPDATE due_task t SET lease_until = clock_timestamp() + " US(
	    "$3") ", updated_at = now() FROM cur WHERE t.id = cur.id"
		  " AND t.state = 'CLAIMED' AND t.attempt = $2::int4"
		  " AND NOT t.cancel_requested"
		  " AND t.lease_until >= clock_timestamp() RETURNING t.id)"
		  " SELECT state, attempt, cancel_requested,"
		  " EXISTS (SELECT 1 FROM u) FROM cur",
    [ST_COMPLETE] = "WITH " COMPLETE_CTES
		    " SELECT i.ord, d.state, (SELECT count(*) FROM dn),"
		    " (SELECT count(*) FROM rl)"
		    " FROM i LEFT JOIN d ON d.ord = i.ord ORDER BY i.ord",
/*
** Complete a batch and claim the next in ONE statement (one round
** trip, one commit).  The rows are disjoint: completions touch
** CLAIMED rows, the claim SCHEDULED ones.  Every row comes back with
** the completions' outcomes, in order, as text in the last column;
** when nothing was claimed there is one row whose task is NULL.
*/
#define COMPLETE_CLAIM_SQL(filter, dfilter)                                    \
	"WITH RECURSIVE " COMPLETE_CTES ","                                    \
	" o AS (SELECT string_agg(coalesce(d.state, 'STALE'), ','"             \
	" ORDER BY i.ord) AS s FROM i LEFT JOIN d ON d.ord = i.ord),"          \
	" " PICK_PRIO(                                                         \
	    filter,                                                            \
	    "$6::int4") ","                                                    \
			" c AS (UPDATE due_task t SET state = 'CLAIMED',"      \
			" attempt = t.attempt + 1, lease_owner = $4::text,"    \
			" lease_until = clock_timestamp() + " US(              \
			    "$5") ", updated_at = now()"                       \
				  " WHERE t.id = ANY (ARRAY(SELECT id FROM "   \
				  "p))"                                        \
				  " RETURNING t.*),"                           \
				  " a AS (INSERT INTO due_attempt (task_id, "  \
				  "attempt, worker, "                          \
				  "claimed_at,"                                \
				  " due_at) SELECT id, attempt, lease_owner, " \
				  "now(), due_at "                             \
				  "FROM c),"                                   \
				  " fl AS (SELECT " LIMITED_DUE(               \
				      dfilter) " AS lim)"                      \
					       " SELECT " CLAIMED_COLS         \
					       ", o.s FROM o CROSS JOIN fl"    \
					       " CROSS JOIN (SELECT count(*)"  \
					       " FROM dn) dnn"                 \
					       " CROSS JOIN (SELECT count(*)"  \
					       " FROM rl) rln"                 \
					       " LEFT JOIN c ON true ORDER "   \
					       "BY c.priority, c.due_at, c.id"
    [ST_CC_ANY] = COMPLETE_CLAIM_SQL("", ""),
    [ST_CC_KINDS] = COMPLETE_CLAIM_SQL(" AND kind = ANY ($7::text[])",
				       " AND d.kind = ANY ($7::text[])"),
    [ST_CC_EXCLUDE] = COMPLETE_CLAIM_SQL(" AND kind <> ALL ($7::text[])",
					 " AND d.kind <> ALL ($7::text[])"),
    [ST_FLOW_LOCK] = flow_lock_sql,
    [ST_FLOW_CLAIM] = flow_claim_sql,
    /*
    ** A kind's settings: -1 keeps a field, 0 clears it (NULL), else the
    ** value; rate_us goes with rate_n.  Wakes listeners (a resume, a
    ** loosened limit).
    */
    [ST_KIND_PUT] =
	"WITH u AS (INSERT INTO due_kind AS k (kind, paused, rate_n, rate_us,"
	" max_running, max_running_per_group, timeout_us, updated_at)"
	" VALUES ($1::text, $2::int4 = 1, nullif(greatest($3::int4, 0), 0),"
	" CASE WHEN $3::int4 > 0 THEN $4::int8 END,"
	" nullif(greatest($5::int4, 0), 0), nullif(greatest($6::int4, 0), 0),"
	" nullif(greatest($7::int8, 0), 0), now())"
	" ON CONFLICT (kind) DO UPDATE SET"
	" paused = CASE WHEN $2::int4 = -1 THEN k.paused ELSE $2::int4 = 1 END,"
	" rate_n = CASE WHEN $3::int4 = -1 THEN k.rate_n ELSE excluded.rate_n"
	" END, rate_us = CASE WHEN $3::int4 = -1 THEN k.rate_us"
	" ELSE excluded.rate_us END,"
	" max_running = CASE WHEN $5::int4 = -1 THEN k.max_running"
	" ELSE excluded.max_running END,"
	" max_running_per_group = CASE WHEN $6::int4 = -1"
	" THEN k.max_running_per_group ELSE excluded.max_running_per_group END,"
	" timeout_us = CASE WHEN $7::int8 = -1 THEN k.timeout_us"
	" ELSE excluded.timeout_us END, updated_at = now() RETURNING kind),"
	" n AS (SELECT pg_notify('due_task_new', kind) FROM u)"
	" SELECT (SELECT count(*) FROM n)",
    /* Every kind ($1 NULL) or one, with its live counts (store.h). */
    /* clang-format off */
    [ST_KIND_GET] =
	"SELECT " DUE_KIND_COLS ","
	" (SELECT count(*) FROM due_task t WHERE t.kind = k.kind"
	"   AND t.state = 'CLAIMED' AND t.lease_until >= now()),"
	" CASE WHEN rate_n IS NULL THEN 0 ELSE (SELECT count(*) FROM due_rate r"
	"   WHERE r.kind = k.kind AND r.at > now() - " US("k.rate_us") ") END,"
	" (SELECT count(*) FROM due_task t WHERE t.kind = k.kind"
	"   AND t.state = 'SCHEDULED' AND t.due_at <= now()),"
	" CASE WHEN $2::text IS NULL THEN 0 ELSE (SELECT count(*) FROM due_task t"
	"   WHERE t.kind = k.kind AND t.grp = $2::text AND t.state = 'CLAIMED'"
	"   AND t.lease_until >= now()) END"
	" FROM due_kind k WHERE $1::text IS NULL OR kind = $1::text"
	" ORDER BY kind COLLATE \"C\"",
    /* clang-format on */
    [ST_KIND_REMOVE] =
	"WITH d AS (DELETE FROM due_kind WHERE kind = $1::text RETURNING kind),"
	" r AS (DELETE FROM due_rate WHERE kind = $1::text),"
	" n AS (SELECT pg_notify('due_task_new', kind) FROM d)"
	" SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM n)",
    [ST_FAIL] =
	"WITH f AS (UPDATE due_task SET"
	" state = CASE WHEN cancel_requested THEN 'CANCELLED'"
	"   WHEN " USED_UP " THEN 'DEAD' ELSE 'SCHEDULED' END,"
	" due_at = CASE WHEN cancel_requested OR " USED_UP " THEN due_at"
	"   ELSE now() + " US(
	    "due_backoff(backoff_us, backoff_cap_us,"
	    " attempt - attempt_base)") " END,"
					" last_error = $3::text, lease_owner = "
					"NULL, lease_until = NULL,"
					" updated_at = now()"
					" WHERE id = $1::int8 AND attempt = "
					"$2::int4 AND state = 'CLAIMED'"
					" RETURNING id, state, kind,"
					" is_parent AND " ENDED(
					    "state") " AS kid),"
						     " e AS (UPDATE "
						     "due_attempt a SET "
						     "ended_at = now(), "
						     "outcome = CASE"
						     " WHEN f.state = "
						     "'CANCELLED' THEN "
						     "'CANCELLED' ELSE "
						     "$4::text END,"
						     " error = $3::text FROM f "
						     "WHERE "
						     "a.task_id = $1::int8"
						     " AND a.attempt = "
						     "$2::int4 AND "
						     "a.outcome = 'RUNNING'),"
						     " l AS (UPDATE "
						     "due_attempt SET "
						     "late_commit = "
						     "'REJECTED_STALE'"
						     " WHERE task_id = "
						     "$1::int8 AND attempt "
						     "= $2::int4"
						     " AND NOT EXISTS (SELECT "
						     "1 FROM f)),"
						     /* a retry is due again
							after its backoff:
							listeners put it on
							their wheels, as for a
							submit */
						     " n AS (SELECT pg_notify("
						     "'due_task_new', kind) "
						     "FROM f"
						     " WHERE state = "
						     "'SCHEDULED'),"
						     " dn AS (SELECT "
						     "pg_notify("
						     "'" DUE_PG_DONE_CHANNEL
						     "', '') FROM f"
						     " WHERE state <> "
						     "'SCHEDULED'" WAITED
						     ")," RELEASE(
							 "f") " SELECT state, "
							      "(SELECT "
							      "count(*) FROM"
							      " n), (SELECT "
							      "count(*) FROM "
							      "dn),"
							      " (SELECT "
							      "count(*) FROM "
							      "rl) FROM f",
    [ST_RECLAIM] =
	"WITH p AS MATERIALIZED (SELECT id FROM due_task"
	" WHERE state = 'CLAIMED' AND lease_until < now()"
	" ORDER BY lease_until LIMIT $1::int4 FOR UPDATE SKIP LOCKED),"
	" r AS (UPDATE due_task t SET"
	" state = CASE WHEN cancel_requested THEN 'CANCELLED'"
	"   WHEN " USED_UP " THEN 'DEAD' ELSE 'SCHEDULED' END,"
	" due_at = CASE WHEN cancel_requested OR " USED_UP " THEN due_at"
	"   ELSE now() END,"
	" last_error = 'lease expired (held by ' || lease_owner || ')',"
	" lease_owner = NULL, lease_until = NULL, updated_at = now()"
	" WHERE t.id = ANY (ARRAY(SELECT id FROM p)) AND t.state = 'CLAIMED' "
	"AND t.lease_until < now()"
	" RETURNING t.id, t.attempt, t.state, t.kind,"
	" t.is_parent AND " ENDED(
	    "t.state") " AS kid),"
		       " e AS (UPDATE due_attempt a SET ended_at = now(),"
		       " outcome = 'LEASE_EXPIRED', error = 'lease expired' "
		       "FROM r"
		       " WHERE a.task_id = r.id AND a.attempt = r.attempt"
		       " AND a.outcome = 'RUNNING'),"
		       " n AS (SELECT pg_notify('due_task_new', kind) FROM"
		       " (SELECT DISTINCT kind FROM r WHERE state = "
		       "'SCHEDULED') k),"
		       " dn AS (SELECT pg_notify('" DUE_PG_DONE_CHANNEL
		       "', '') WHERE"
		       " EXISTS (SELECT 1 FROM r WHERE state <> "
		       "'SCHEDULED')" WAITED ")," RELEASE(
			   "r") " SELECT count(*) FILTER (WHERE state = "
				"'SCHEDULED'),"
				" count(*) FILTER (WHERE state = 'DEAD'),"
				" count(*) FILTER (WHERE state = 'CANCELLED'),"
				" (SELECT count(*) FROM n),"
				" (SELECT min(lease_until) FROM due_task WHERE "
				"state = 'CLAIMED'"
				"   AND lease_until >= now()), now(), (SELECT "
				"count(*) FROM dn),"
				" (SELECT count(*) FROM rl) FROM r",
    [ST_CANCEL] =
	"WITH cur AS (SELECT id, state FROM due_task WHERE id = $1::int8"
	" FOR UPDATE),"
	" u AS (UPDATE due_task t SET state = CASE WHEN t.state ="
	" 'SCHEDULED' THEN 'CANCELLED' ELSE t.state END,"
	" cancel_requested = t.cancel_requested OR t.state = 'CLAIMED',"
	" after_left = CASE WHEN t.state = 'SCHEDULED' THEN 0"
	" ELSE t.after_left END,"
	" updated_at = now() FROM cur WHERE t.id = cur.id"
	" AND t.state IN ('SCHEDULED', 'CLAIMED') RETURNING t.id, t.state,"
	" t.is_parent AND t.state = 'CANCELLED' AS kid),"
	" dn AS (SELECT pg_notify('" DUE_PG_DONE_CHANNEL "', '') FROM u"
	" WHERE state = 'CANCELLED'" WAITED
	")," RELEASE("u") " SELECT state, (SELECT count(*) FROM dn),"
			  " (SELECT count(*) FROM rl) FROM cur",
    [ST_GET] = "SELECT " DUE_TASK_COLS " FROM due_task WHERE id = $1::int8",
    [ST_ATTEMPTS] =
	"SELECT " DUE_ATTEMPT_COLS " FROM due_attempt"
	" WHERE task_id = ANY($1::int8[]) ORDER BY task_id, attempt",
    [ST_LIST] = "SELECT " DUE_TASK_COLS " FROM due_task"
		" WHERE ($1::text IS NULL OR state = $1::text)"
		" AND ($2::text IS NULL OR kind = $2::text)"
		" AND id > $3::int8 ORDER BY id LIMIT $4::int4",
/*
** `due ls --state S`: the state as a literal, so the planner sees which
** partial index holds it (due_task_due, due_task_lease, due_task_finished,
** due_task_dead) and how common it is: a rare state is read from its
** index and sorted, a common one walks the primary key in id order and
** stops at the limit.  Either way an index, at any size.  $1 (the same
** state, as ST_LIST binds it) is only tested for NULL: "state = $1"
** would join the literal in one equivalence class, and the generic plan
** then walked the primary key for a state that one row holds.
*/
#define LIST_SQL(st)                                                           \
	"SELECT " DUE_TASK_COLS " FROM due_task WHERE state = '" st "'"        \
	" AND $1::text IS NOT NULL AND ($2::text IS NULL OR kind = $2::text)"  \
	" AND id > $3::int8 ORDER BY id LIMIT $4::int4"
    [ST_LIST_SCHEDULED] = LIST_SQL("SCHEDULED"),
    [ST_LIST_CLAIMED] = LIST_SQL("CLAIMED"),
    [ST_LIST_DONE] = LIST_SQL("DONE"),
    [ST_LIST_CANCELLED] = LIST_SQL("CANCELLED"),
    [ST_LIST_DEAD] = LIST_SQL("DEAD"),
    [ST_RETRY] =
	"WITH u AS (UPDATE due_task SET state = 'SCHEDULED', due_at = now(),"
	" attempt_base = attempt, cancel_requested = false,"
	" updated_at = now() WHERE id = $1::int8 AND state = 'DEAD'"
	" RETURNING id, kind),"
	" au AS (INSERT INTO due_audit (task_id, at, action, detail)"
	" SELECT id, now(), 'retry', 'DEAD -> SCHEDULED, fresh attempt"
	" budget' FROM u),"
	" n AS (SELECT pg_notify('due_task_new', kind) FROM u)"
	" SELECT (SELECT count(*) FROM u),"
	" (SELECT state FROM due_task WHERE id = $1::int8),"
	" (SELECT count(*) FROM n)",
    [ST_REQUEUE] =
	OPERATOR_SQL("state = CASE WHEN cancel_requested THEN 'CANCELLED'"
		     " ELSE 'SCHEDULED' END, due_at = now()",
		     "state = 'CLAIMED'", "REQUEUED", "requeue"),
    [ST_KILL] = OPERATOR_SQL(
	"state = CASE WHEN state = 'DEAD' OR cancel_requested THEN"
	" 'CANCELLED' ELSE 'DEAD' END, last_error = coalesce(last_error ||"
	" '; ', '') || CASE WHEN state = 'DEAD' THEN 'dead letter dismissed"
	" by operator' ELSE 'killed by operator' END, after_left = 0",
	"state IN ('SCHEDULED', 'CLAIMED', 'DEAD')", "KILLED", "kill"),
    /*
    ** stats in one statement (one snapshot): GATE_CTES' estimates and
    ** bounded counts, the exact CLAIMED, DEAD and overdue figures, and
    ** the lateness of the claims in the window $1 (due_attempt_claimed).
    ** The overdue range is closed, both ends unknown to a generic plan
    ** (now() - 1000 years .. now(): due times are after 1970), for the
    ** reason CLAIMED_SINCE gives; with a constant lower end the planner
    ** still guessed a third of the index.
    */
    [ST_STATS] =
	"WITH " GATE_CTES ","
	" c AS (SELECT count(*) AS n FROM due_task WHERE state = 'CLAIMED'),"
	" dd AS (SELECT count(*) AS n FROM due_task WHERE state = 'DEAD'),"
	" d AS (SELECT count(*) AS n, min(due_at) AS m FROM due_task"
	" WHERE state = 'SCHEDULED'"
	" AND due_at >= now() - interval '1000 years' AND due_at <= now()),"
	" l AS (SELECT count(*) AS n,"
	" percentile_disc(0.5) WITHIN GROUP (ORDER BY late) AS p50,"
	" percentile_disc(0.99) WITHIN GROUP (ORDER BY late) AS p99,"
	" max(late) AS mx FROM (SELECT (extract(epoch FROM"
	" claimed_at - due_at) * 1000000)::int8 AS late FROM due_attempt"
	" WHERE" CLAIMED_SINCE(
	    "$1") ") x)"
		  " SELECT now(), h.s_est, h.s_n, h.f_est, h.f_n[1], h.f_n[2],"
		  " h.done_share, c.n, dd.n, d.n, d.m, l.n, l.p50, l.p99, l.mx"
		  " FROM h, c, dd, d, l",
    [ST_PRUNE] =
	"WITH v AS (SELECT id FROM due_task WHERE state IN ('DONE',"
	" 'CANCELLED') AND updated_at < now() - " US(
	    "$1") " ORDER BY updated_at LIMIT $2::int4 FOR UPDATE SKIP LOCKED),"
		  " da AS (DELETE FROM due_attempt WHERE task_id ="
		  " ANY (ARRAY(SELECT id FROM v))),"
		  " dd AS (DELETE FROM due_audit WHERE task_id ="
		  " ANY (ARRAY(SELECT id FROM v))),"
		  " de AS (DELETE FROM due_after WHERE child ="
		  " ANY (ARRAY(SELECT id FROM v))),"
		  " dt AS (DELETE FROM due_task WHERE id = ANY (ARRAY(SELECT "
		  "id FROM v))"
		  " AND state IN ('DONE', 'CANCELLED') RETURNING 1)"
		  " SELECT count(*) FROM dt",
    [ST_SCHED_GET] =
	"SELECT " DUE_SCHED_COLS " FROM due_schedule WHERE name = $1::text",
    /* Byte order, as SQLite's BINARY collation sorts. */
    [ST_SCHED_LIST] = "SELECT " DUE_SCHED_COLS
		      " FROM due_schedule ORDER BY name COLLATE \"C\"",
    [ST_SCHED_PUT] =
	"INSERT INTO due_schedule (name, " DUE_SCHED_DEF_COLS ","
	" created_at, updated_at) VALUES ($1::text, $2::text, $3::text,"
	" $4::text, $5::bytea, $6::text, $7::text, $8::int4, $9::int8,"
	" $10::int8, $11::timestamptz, now(), now())"
	" ON CONFLICT (name) DO UPDATE SET " DUE_SCHED_DEF_SET ","
	" updated_at = now()",
    [ST_SCHED_REMOVE] =
	"DELETE FROM due_schedule WHERE name = $1::text RETURNING 1",
    /*
    ** One scheduler step (store.h: cron_fire).  s locks the schedule row
    ** only while next_slot is still the slot we read: a scheduler that
    ** advanced it first makes s empty (re-checked on the newest version),
    ** and then nothing below writes.  $6 (kind) is NULL when the step
    ** inserts no task.  t is the slot's task: the new one, or the live one
    ** of the same (kind, key) that made the insert do nothing.
    */
    [ST_SCHED_FIRE] =
	"WITH s AS MATERIALIZED (SELECT name FROM due_schedule"
	" WHERE name = $1::text AND next_slot = $2::timestamptz"
	" FOR UPDATE),"
	" i AS (INSERT INTO due_task (kind, payload, state, due_at,"
	" max_attempts, backoff_us, backoff_cap_us, key, created_at,"
	" updated_at) SELECT $6::text, $7::bytea, 'SCHEDULED',"
	" coalesce($8::timestamptz, now() + " US(
	    "$9::int8") "),"
			" $10::int4, $11::int8, $12::int8, $13::text, now(), "
			"now()"
			" FROM s WHERE $6::text IS NOT NULL"
			" ON CONFLICT (kind, key) WHERE key IS NOT NULL AND"
			" state IN ('SCHEDULED', 'CLAIMED') DO NOTHING "
			"RETURNING id, kind),"
			" n AS (SELECT pg_notify('due_task_new', kind) FROM i),"
			" t AS (SELECT CASE WHEN $6::text IS NOT NULL THEN"
			" coalesce((SELECT id FROM i), (SELECT id FROM due_task"
			" WHERE kind = $6::text AND key = $13::text"
			" AND state IN ('SCHEDULED', 'CLAIMED'))) END AS id "
			"FROM s),"
			" u AS (UPDATE due_schedule d SET next_slot = "
			"$3::timestamptz,"
			" last_slot = CASE WHEN $6::text IS NULL THEN "
			"d.last_slot"
			"   ELSE $14::timestamptz END,"
			" last_task = CASE WHEN $6::text IS NULL THEN "
			"d.last_task"
			"   ELSE t.id END,"
			" fired = d.fired + CASE WHEN $6::text IS NULL THEN 0 "
			"ELSE 1 END,"
			" missed = d.missed + greatest($4::int8, 0),"
			" last_missed = CASE WHEN $4::int8 > 0 THEN "
			"$5::timestamptz"
			"   ELSE d.last_missed END,"
			" updated_at = now() FROM s, t WHERE d.name = s.name "
			"RETURNING 1)"
			" SELECT (SELECT count(*) FROM u), (SELECT id FROM t),"
			" (SELECT count(*) FROM n)",
    [ST_SCHED_LAST_TASK] =
	"UPDATE due_schedule SET last_task = $2::int8 WHERE name = $1::text",
    /*
    ** Every figure of due_metrics that comes from the attempts history, in
    ** one scan: a grouping set per histogram (lateness lb, duration db),
    ** per outcome, per minute of the last 15 (mi, DONE only), and the
    ** grand total () for the sums and the refused late commits.
    ** Bucket i holds bounds[i-1] < v <= bounds[i].  width_bucket() counts
    ** the lower bounds <= its operand, so over $1, the negated bounds in
    ** ascending order, width_bucket(-v) is the number of bounds >= v and
    ** $2 (the number of bounds) minus it is the number of bounds < v: the
    ** bucket.  Negative values land in 0, values over the last bound in
    ** $2 (+Inf).  Each row also carries the live workers' sums and the
    ** number of schedules.
    */
    [ST_METRICS] =
	"WITH x AS (SELECT"
	" (extract(epoch FROM claimed_at - due_at) * 1000)::float8 AS late,"
	" (extract(epoch FROM ended_at - claimed_at) * 1000)::float8 AS dur,"
	" outcome, late_commit,"
	" CASE WHEN outcome = 'DONE'"
	"   AND ended_at >= now() - interval '15 minutes'"
	"   AND ended_at < now() THEN ((extract(epoch FROM now() - ended_at)"
	"   * 1000000)::int8 - 1) / 60000000 END AS mi FROM due_attempt"
	" WHERE" CLAIMED_SINCE(
	    "$3") "),"
		  " y AS (SELECT *, $2::int4 - width_bucket(-late, "
		  "$1::float8[]) AS lb,"
		  " $2::int4 - width_bucket(-dur, $1::float8[]) AS db FROM x),"
		  " w AS (SELECT count(*) AS n,"
		  " coalesce(sum(claim_queries), 0)::int8 AS cq,"
		  " coalesce(sum(empty_claims), 0)::int8 AS ec,"
		  " coalesce(sum(reclaim_queries), 0)::int8 AS rq,"
		  " coalesce(sum(store_errors), 0)::int8 AS se,"
		  " coalesce(sum(pruned), 0)::int8 AS pr,"
		  " coalesce(sum(lease_lost), 0)::int8 AS ll FROM due_worker"
		  " WHERE seen_at >= now() - interval '5 minutes')"
		  " SELECT GROUPING(lb, db, outcome, mi), lb, db, outcome, mi,"
		  " count(*), sum(late), sum(dur),"
		  " count(*) FILTER (WHERE late_commit = 'REJECTED_STALE'),"
		  " (SELECT n FROM w), (SELECT cq FROM w), (SELECT ec FROM w),"
		  " (SELECT rq FROM w), (SELECT se FROM w),"
		  " (SELECT count(*) FROM due_schedule), (SELECT pr FROM w),"
		  " (SELECT ll FROM w)"
		  " FROM y GROUP BY GROUPING SETS ((lb), (db), (outcome), "
		  "(mi), ())",
    /*
    ** Counts by kind and state: CLAIMED and DEAD through their partial
    ** indexes; SCHEDULED, DONE and CANCELLED counted through theirs when
    ** GATE_CTES found the state small.  Else DONE and CANCELLED are the
    ** planner's (kind, state) frequencies (mv, from due_task_kind_state)
    ** times the table's rows, and SCHEDULED walks its kinds (ks: one
    ** probe of due_task_kind_claim per kind, a loose index scan): the
    ** frequency times the rows for a kind the statistics know, else (a
    ** kind too rare for them, or no statistics yet) a count that stops
    ** at CAP.  One row with a NULL kind when there are none; the flags
    ** come on every row.
    */
    /* clang-format off */
    [ST_METRICS_KINDS] =
	"WITH RECURSIVE " GATE_CTES ","
	" m AS (SELECT st.most_common_vals AS v, st.most_common_freqs AS f"
	"   FROM pg_stats_ext st WHERE st.schemaname = " DUE_NSP
	"   AND st.tablename = 'due_task'"
	"   AND st.statistics_name = 'due_task_kind_state'),"
	" mv AS MATERIALIZED (SELECT m.v[i][1] AS kind, m.v[i][2] AS state,"
	"   m.f[i] AS f FROM m, generate_subscripts(m.v, 1) AS i),"
	" ks(kind) AS (SELECT (SELECT min(kind) FROM due_task"
	"   WHERE state = 'SCHEDULED') WHERE NOT (SELECT s_exact FROM h)"
	"   UNION ALL SELECT (SELECT min(kind) FROM due_task"
	"   WHERE state = 'SCHEDULED' AND kind > ks.kind) FROM ks"
	"   WHERE ks.kind IS NOT NULL),"
	" k AS (SELECT kind, 0 AS s, count(*) AS n FROM (SELECT kind"
	"   FROM due_task WHERE state = 'SCHEDULED' AND (SELECT s_exact"
	"   FROM h) ORDER BY kind LIMIT " CAP ") q GROUP BY kind"
	" UNION ALL SELECT kind, 1, count(*) FROM due_task"
	"   WHERE state = 'CLAIMED' GROUP BY kind"
	" UNION ALL SELECT kind, CASE state WHEN 'DONE' THEN 2 ELSE 3 END,"
	"   count(*) FROM (SELECT kind, state FROM due_task"
	"   WHERE state IN ('DONE', 'CANCELLED') AND (SELECT f_exact FROM h)"
	"   ORDER BY updated_at LIMIT " CAP ") q GROUP BY kind, state"
	" UNION ALL SELECT kind, 4, count(*) FROM due_task"
	"   WHERE state = 'DEAD' GROUP BY kind"
	" UNION ALL SELECT kind, CASE state WHEN 'DONE' THEN 2 ELSE 3 END,"
	"   round(f * greatest(h.t_est, 0))::int8 FROM h, mv"
	"   WHERE state IN ('DONE', 'CANCELLED') AND NOT h.f_exact"
	" UNION ALL SELECT ks.kind, 0, coalesce(round(mv.f"
	"   * greatest(h.t_est, 0))::int8, (SELECT count(*) FROM (SELECT 1"
	"   FROM due_task t WHERE t.state = 'SCHEDULED' AND t.kind = ks.kind"
	"   LIMIT " CAP ") z)) FROM h, ks LEFT JOIN mv ON mv.kind = ks.kind"
	"   AND mv.state = 'SCHEDULED' WHERE ks.kind IS NOT NULL),"
	" x AS (SELECT kind,"
	"   coalesce(sum(n) FILTER (WHERE s = 0), 0)::int8 AS n0,"
	"   coalesce(sum(n) FILTER (WHERE s = 1), 0)::int8 AS n1,"
	"   coalesce(sum(n) FILTER (WHERE s = 2), 0)::int8 AS n2,"
	"   coalesce(sum(n) FILTER (WHERE s = 3), 0)::int8 AS n3,"
	"   coalesce(sum(n) FILTER (WHERE s = 4), 0)::int8 AS n4"
	"   FROM k GROUP BY kind ORDER BY kind COLLATE \"C\" LIMIT $1::int4)"
	" SELECT x.kind, x.n0, x.n1, x.n2, x.n3, x.n4, h.s_exact, h.f_exact"
	" FROM h LEFT JOIN x ON true ORDER BY x.kind COLLATE \"C\"",
/* clang-format on */
/*
** Upcoming: the store's now and next lease expiry always come back
** (one row with NULL id when nothing is due before $1).
*/
#define UPCOMING_SQL(filter)                                                   \
	"SELECT u.id, u.due_at, x.now, x.exp FROM (SELECT now() AS now,"       \
	" (SELECT min(lease_until) FROM due_task WHERE state = 'CLAIMED')"     \
	" AS exp) x LEFT JOIN LATERAL (SELECT id, due_at FROM due_task"        \
	" WHERE state = 'SCHEDULED'"                                           \
	" AND due_at < least($1::timestamptz, " HELD_AT ")" filter             \
	" AND kind <> ALL (ARRAY(SELECT kind FROM due_kind WHERE paused))"     \
	" ORDER BY due_at LIMIT $2::int4) u ON true ORDER BY u.due_at"
    [ST_UPC_ANY] = UPCOMING_SQL(""),
    [ST_UPC_KINDS] = UPCOMING_SQL(" AND kind = ANY ($3::text[])"),
    [ST_UPC_EXCLUDE] = UPCOMING_SQL(" AND kind <> ALL ($3::text[])"),
    /* $13: pruned, outside row.h's shared list (schema 5). */
    [ST_WORKER_REPORT] =
	"INSERT INTO due_worker (owner, started_at, "
	"seen_at, " DUE_WORKER_COUNTER_COLS ", pruned) VALUES ($1::text,"
	" now(), now(), $2::int8, $3::int8, $4::int8, $5::int8, $6::int8,"
	" $7::int8, $8::int8, $9::int8, $10::int8, $11::int8, $12::int8,"
	" $13::int8) ON CONFLICT (owner) DO UPDATE SET seen_at = "
	"now(), " DUE_WORKER_COUNTER_SET ", pruned = excluded.pruned",
    /*
    ** Take lock $1 for owner $2 until now + $3 us: insert it, or take it
    ** over when it expired, or renew it when it is already ours.  While
    ** another owner's lease runs the WHERE is false: no row comes back
    ** and nothing is written.  A racing insert waits on the unique index
    ** and then judges the winner's row, so one owner at a time.
    */
    [ST_LOCK_TAKE] =
	"INSERT INTO due_lock AS l (name, owner, until)"
	" VALUES ($1::text, $2::text, now() + " US(
	    "$3") ")"
		  " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner,"
		  " until = excluded.until"
		  " WHERE l.until < now() OR l.owner = excluded.owner "
		  "RETURNING 1",
    /*
    ** Every due_* table of the schema that holds due_meta (the one in
    ** the search_path), with its indexes and TOAST.
    */
    [ST_BYTES] = "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8"
		 " FROM pg_class c WHERE c.relkind = 'r'"
		 " AND c.relname LIKE 'due\\_%'"
		 " AND c.relnamespace = (SELECT relnamespace FROM pg_class"
		 " WHERE oid = 'due_meta'::regclass)",
    /*
    ** reschedule (issue 38), as cancel: lock the row and report the state
    ** it locked (the newest committed), write only when that is SCHEDULED
    ** (re-checked by the UPDATE), the new due_at from now() unless $2
    ** gives it, the payload $5 when $4 = 1; notify on commit.
    */
    [ST_RESCHEDULE] =
	"WITH cur AS (SELECT id, state FROM due_task WHERE id = $1::int8"
	" FOR UPDATE),"
	" u AS (UPDATE due_task t SET due_at = CASE WHEN t.after_left > 0"
	" THEN t.due_at ELSE coalesce($2::timestamptz, now() + " US(
	    "$3") ")"
		  " END, " HOLD_TIME(
		      "$2::timestamptz",
		      "$3::int8") ","
				  " payload = CASE WHEN $4::int4 = 1 THEN"
				  " $5::bytea ELSE t.payload END, updated_at = "
				  "now()"
				  " FROM cur WHERE t.id = cur.id AND t.state ="
				  " 'SCHEDULED' RETURNING t.kind, "
				  "t.after_left),"
				  " n AS (SELECT pg_notify('" DUE_PG_CHANNEL
				  "', kind) FROM u"
				  " WHERE after_left = 0)"
				  " SELECT cur.state, (SELECT count(*) FROM n)"
				  " FROM cur",
    /*
    ** on_key replace ($6 = 0) or later ($6 = 1) after a conflict (issue
    ** 38): the waiting holder of (kind, key) takes the due time (from
    ** now(), as ST_INSERT computes it) and the payload, LATER only when
    ** that is later than its own; the UPDATE re-checks both (READ
    ** COMMITTED re-reads a row changed meanwhile).  One row when it moved.
    ** A held holder (run after: after_left > 0) keeps due_at HELD_AT and
    ** takes the time as its own (HOLD_TIME, applied at its release), as
    ** reschedule does; LATER compares with the earliest it could run if
    ** released now (KEY_EARLIEST), as on every store.  Workers are woken
    ** only for a holder that is due by time.
    */
    [ST_KEY_MOVE] =
	"WITH u AS (UPDATE due_task SET due_at = CASE WHEN after_left > 0"
	" THEN due_at ELSE " KEY_DUE " END, " HOLD_TIME(
	    "$3::timestamptz",
	    "$4::int8") ", payload = $5::bytea, updated_at = now()"
			" WHERE kind = $1::text AND key = $2::text"
			" AND state = 'SCHEDULED'"
			" AND ($6::int4 = 0 OR " KEY_EARLIEST " < " KEY_DUE ")"
			" RETURNING id, kind, after_left),"
			" n AS (SELECT pg_notify('" DUE_PG_CHANNEL
			"', kind) FROM u WHERE after_left = 0)"
			" SELECT id, (SELECT count(*) FROM n) FROM u",
    /*
    ** It did not move: lock the live holder (the newest committed row)
    ** and say whether it runs (CLAIMED) and whether ST_KEY_MOVE would move
    ** it now.  No row: no live holder any more.
    */
    [ST_KEY_HOLDER] =
	"SELECT id, (state = 'CLAIMED')::int4, ($5::int4 = 0 OR " KEY_EARLIEST
	" < " KEY_DUE ")::int4 FROM due_task WHERE kind = $1::text"
	" AND key = $2::text AND state IN ('SCHEDULED', 'CLAIMED')"
	" FOR UPDATE",
    /* A running holder (locked by ST_KEY_HOLDER) gives up its key. */
    [ST_KEY_GIVE_UP] = "UPDATE due_task SET key = NULL, updated_at = now()"
		       " WHERE id = $1::int8 AND state = 'CLAIMED'"
		       " RETURNING id",
    /*
    ** Run after, a child's submit (insert_after), statement 1: mark its
    ** live parents as parents, so that their end calls due_release()
    ** (RELEASE).  Once marked, a parent is never written again here, so
    ** concurrent children of a marked parent share its row (FOR SHARE,
    ** next); two children of an unmarked one queue here, the second
    ** re-reading the row marked (never a share lock held while waiting
    ** for an exclusive one: no deadlock between children).
    */
    [ST_AFTER_MARK] =
	"UPDATE due_task SET is_parent = true WHERE id = ANY ($1::int8[])"
	" AND NOT is_parent AND state IN ('SCHEDULED', 'CLAIMED')",
    /*
    ** Statement 2: ST_INSERT_ONE's $1..$11, $12 the parents, $13 1 for
    ** after_any_end.  pa locks every parent FOR SHARE and reads its
    ** newest committed state (a locking read at READ COMMITTED follows
    ** a concurrent finish to its committed row); only pa's output is
    ** judged, never this statement's snapshot.  ck: the lowest missing
    ** parent, the lowest DEAD or CANCELLED one, the live ones.  The
    ** task is inserted only when none is missing and none ended unless
    ** after_any_end: held (due_at HELD_AT) while a parent is live, else
    ** due as any task; its edges pending for the live parents.  Notifies
    ** when it is due at once.  One row: missing, ended, ended's state,
    ** the new id (NULL: refused, or the key is held).
    */
    [ST_INSERT_AFTER] =
	"WITH pa AS MATERIALIZED (SELECT id, state FROM due_task"
	" WHERE id = ANY ($12::int8[]) ORDER BY id FOR SHARE),"
	" ck AS MATERIALIZED (SELECT (SELECT min(x) FROM unnest($12::int8[])"
	" x WHERE NOT EXISTS (SELECT 1 FROM pa WHERE pa.id = x)) AS missing,"
	" (SELECT min(id) FROM pa WHERE state IN ('DEAD', 'CANCELLED'))"
	" AS ended, (SELECT count(*) FROM pa WHERE state IN ('SCHEDULED',"
	" 'CLAIMED'))::int4 AS live),"
	" ins AS (INSERT INTO due_task (kind, payload, state, due_at,"
	" max_attempts, backoff_us, backoff_cap_us, key, priority, grp,"
	" timeout_us, created_at, updated_at, after_n, after_left,"
	" after_any_end, after_at, after_delay_us) SELECT $1::text, $2::bytea,"
	" 'SCHEDULED', CASE WHEN ck.live > 0 THEN " HELD_AT
	" ELSE coalesce($3::timestamptz, now() + " US(
	    "$4") ") END,"
		  " $5::int4, $6::int8, $7::int8, $8::text, $9::int4, "
		  "$10::text,"
		  " $11::int8, now(), now(), cardinality($12::int8[]), ck.live,"
		  " $13::int4 = 1, $3::timestamptz, $4::int8 FROM ck"
		  " WHERE ck.missing IS NULL AND (ck.ended IS NULL OR "
		  "$13::int4 = 1)"
		  " ON CONFLICT (kind, key) WHERE key IS NOT NULL AND"
		  " state IN ('SCHEDULED', 'CLAIMED') DO NOTHING"
		  " RETURNING id, kind, after_left),"
		  " ed AS (INSERT INTO due_after (parent, child, pending)"
		  " SELECT pa.id, ins.id, pa.state IN ('SCHEDULED', 'CLAIMED')"
		  " FROM pa, ins),"
		  " n AS (SELECT pg_notify('" DUE_PG_CHANNEL "', kind) FROM ins"
		  " WHERE after_left = 0)"
		  " SELECT ck.missing, ck.ended, (SELECT state FROM pa"
		  " WHERE pa.id = ck.ended), (SELECT id FROM ins),"
		  " (SELECT count(*) FROM n) FROM ck",
    /* get: the parents of task $1, ascending (due_after_child). */
    [ST_AFTER_OF] = "SELECT parent FROM due_after WHERE child = $1::int8"
		    " ORDER BY parent",
    /*
    ** `due ls --held`: held tasks are the SCHEDULED rows at HELD_AT, a
    ** range of due_task_due that holds nothing else; sorted by id.  $1
    ** is NULL or 'SCHEDULED' (the core refuses any other state).
    */
    [ST_LIST_HELD] = "SELECT " DUE_TASK_COLS " FROM due_task"
		     " WHERE state = 'SCHEDULED' AND due_at >= " HELD_AT
		     " AND after_left > 0"
		     " AND ($1::text IS NULL OR $1::text = 'SCHEDULED')"
		     " AND ($2::text IS NULL OR kind = $2::text)"
		     " AND id > $3::int8 ORDER BY id LIMIT $4::int4",
};

_Static_assert(ST_COUNT <= DUE_PG_MAX_STMTS, "raise DUE_PG_MAX_STMTS");

/* Run statement `id` (pg_wire.c: prepared once per session). */
static int run(due_store *s, enum stmt_id id, const due_pg_params *p,
	       const char *what, PGresult **out)
{
	return due__pg_run(s, (int)id, sql_text[id], p, what, out);
}

/* A row.h cursor over the rows of r. */
#define PG_ROWS(rows, r)                                                       \
	due_pg_cur rows##_cur;                                                 \
	due_rows rows;                                                         \
	due__pg_rows(&rows, &rows##_cur, r)

static const char schema_v1[] =
    "CREATE TABLE IF NOT EXISTS due_meta ("
    "  name text PRIMARY KEY, value text NOT NULL);"
    /* An identity is never reused after prune, so the idempotency key
       task-<id> stays unique forever.  The sequence is named because
       submit draws ids from it before inserting (see ST_INSERT). */
    "CREATE TABLE due_task ("
    "  id bigint GENERATED ALWAYS AS IDENTITY"
    "    (SEQUENCE NAME due_task_id_seq) PRIMARY KEY,"
    "  kind text NOT NULL,"
    "  payload bytea NOT NULL,"
    "  state text NOT NULL CHECK (state IN"
    "    ('SCHEDULED', 'CLAIMED', 'DONE', 'CANCELLED', 'DEAD')),"
    "  due_at timestamptz NOT NULL,"
    "  attempt integer NOT NULL DEFAULT 0,"
    "  attempt_base integer NOT NULL DEFAULT 0,"
    "  max_attempts integer NOT NULL CHECK (max_attempts >= 1),"
    "  backoff_us bigint NOT NULL,"
    "  backoff_cap_us bigint NOT NULL,"
    "  lease_owner text,"
    "  lease_until timestamptz,"
    "  cancel_requested boolean NOT NULL DEFAULT false,"
    "  key text,"
    "  result bytea,"
    "  last_error text,"
    "  created_at timestamptz NOT NULL,"
    "  updated_at timestamptz NOT NULL,"
    "  CONSTRAINT claimed_iff_lease CHECK ("
    "    (state = 'CLAIMED' AND lease_owner IS NOT NULL"
    "     AND lease_until IS NOT NULL)"
    "    OR (state <> 'CLAIMED' AND lease_owner IS NULL"
    "     AND lease_until IS NULL)));"
    "CREATE INDEX due_task_due ON due_task (due_at) WHERE state = 'SCHEDULED';"
    "CREATE INDEX due_task_lease ON due_task (lease_until)"
    "  WHERE state = 'CLAIMED';"
    "CREATE UNIQUE INDEX due_task_key ON due_task (kind, key)"
    "  WHERE key IS NOT NULL AND state IN ('SCHEDULED', 'CLAIMED');"
    "CREATE INDEX due_task_finished ON due_task (updated_at)"
    "  WHERE state IN ('DONE', 'CANCELLED');"
    "CREATE TABLE due_attempt ("
    "  task_id bigint NOT NULL,"
    "  attempt integer NOT NULL,"
    "  worker text NOT NULL,"
    "  claimed_at timestamptz NOT NULL,"
    "  due_at timestamptz NOT NULL,"
    "  ended_at timestamptz,"
    "  outcome text NOT NULL DEFAULT 'RUNNING' CHECK (outcome IN ('RUNNING',"
    "    'DONE', 'FAILED', 'LEASE_EXPIRED', 'CANCELLED', 'REQUEUED',"
    "    'KILLED')),"
    "  error text,"
    "  late_commit text,"
    "  PRIMARY KEY (task_id, attempt));"
    "CREATE INDEX due_attempt_claimed ON due_attempt (claimed_at);"
    "CREATE TABLE due_audit ("
    "  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    "  task_id bigint NOT NULL,"
    "  at timestamptz NOT NULL,"
    "  action text NOT NULL,"
    "  detail text);"
    "CREATE INDEX due_audit_task ON due_audit (task_id);"
    /* The backoff rule of due_backoff_us() (src/base/time.c): min(base *
       2^(n-1), cap), computed in numeric so it cannot overflow; past 64
       doublings any base >= 1 is over every int8 cap. */
    "CREATE FUNCTION due_backoff(base bigint, cap bigint, n integer)"
    "  RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$"
    "  SELECT CASE WHEN base <= 0 THEN 0::bigint"
    "    WHEN n > 64 THEN cap"
    "    ELSE least(base::numeric * 2::numeric ^ greatest(n - 1, 0),"
    "               cap::numeric)::bigint END $$;"
    "INSERT INTO due_meta (name, value) VALUES ('schema_version', '1');";

/* Version 1 -> 2: periodic schedules and worker reports. */
#define WORKER_COUNTER(c) "  " c " bigint NOT NULL DEFAULT 0,"
static const char schema_v2[] =
    "CREATE TABLE due_schedule ("
    "  name text PRIMARY KEY,"
    "  expr text NOT NULL,"
    "  kind text NOT NULL,"
    "  tz text NOT NULL,"
    "  payload bytea NOT NULL,"
    "  misfire text NOT NULL CHECK (misfire IN ('skip', 'once')),"
    "  overlap text NOT NULL CHECK (overlap IN ('allow', 'wait')),"
    "  max_attempts integer NOT NULL,"
    "  backoff_us bigint NOT NULL,"
    "  backoff_cap_us bigint NOT NULL,"
    "  next_slot timestamptz NOT NULL,"
    "  last_slot timestamptz,"
    "  last_task bigint,"
    "  fired bigint NOT NULL DEFAULT 0,"
    "  missed bigint NOT NULL DEFAULT 0,"
    "  last_missed timestamptz,"
    "  created_at timestamptz NOT NULL,"
    "  updated_at timestamptz NOT NULL);"
    "CREATE TABLE due_worker ("
    "  owner text PRIMARY KEY,"
    "  started_at timestamptz NOT NULL,"
    "  seen_at timestamptz NOT NULL," WORKER_COUNTER("claimed") WORKER_COUNTER(
	"done") WORKER_COUNTER("failed") WORKER_COUNTER("dead")
	WORKER_COUNTER("stale") WORKER_COUNTER("cancelled") WORKER_COUNTER(
	    "lease_lost") WORKER_COUNTER("claim_queries")
	    WORKER_COUNTER("empty_claims") WORKER_COUNTER(
		"reclaim_queries") "  store_errors bigint NOT NULL DEFAULT 0);"
				   "UPDATE due_meta SET value = '2' WHERE name "
				   "= 'schema_version';";
#undef WORKER_COUNTER

/* Version 2 -> 3: nothing to change on PostgreSQL (see the history). */
static const char schema_v3[] =
    "UPDATE due_meta SET value = '3' WHERE name = 'schema_version';";

/*
** Version 3 -> 4: flow control (docs/internals/flow.md).  A task gains a
** priority, a group and its own time limit; the claim indexes carry the
** priority (due_task_claim for every claim, due_task_kind_claim for the
** per-kind claims of limited kinds); an attempt may end TIMED_OUT;
** due_kind holds each kind's settings and held-back counters, due_rate
** the claim times of rate-limited kinds inside their window.
*/
static const char schema_v4[] =
    "ALTER TABLE due_task ADD COLUMN priority integer NOT NULL DEFAULT 0"
    "  CHECK (priority BETWEEN -32768 AND 32767),"
    "  ADD COLUMN grp text, ADD COLUMN timeout_us bigint"
    "  CHECK (timeout_us > 0);"
    "CREATE INDEX due_task_claim ON due_task (priority, due_at)"
    "  WHERE state = 'SCHEDULED';"
    "CREATE INDEX due_task_kind_claim ON due_task (kind, priority, due_at)"
    "  WHERE state = 'SCHEDULED';"
    "ALTER TABLE due_attempt DROP CONSTRAINT due_attempt_outcome_check,"
    "  ADD CONSTRAINT due_attempt_outcome_check CHECK (outcome IN"
    "  ('RUNNING', 'DONE', 'FAILED', 'LEASE_EXPIRED', 'CANCELLED',"
    "   'REQUEUED', 'KILLED', 'TIMED_OUT'));"
    "CREATE TABLE due_kind ("
    "  kind text PRIMARY KEY,"
    "  paused boolean NOT NULL DEFAULT false,"
    "  rate_n integer CHECK (rate_n > 0),"
    "  rate_us bigint CHECK (rate_us > 0),"
    "  max_running integer CHECK (max_running > 0),"
    "  max_running_per_group integer CHECK (max_running_per_group > 0),"
    "  timeout_us bigint CHECK (timeout_us > 0),"
    "  held_rate bigint NOT NULL DEFAULT 0,"
    "  held_running bigint NOT NULL DEFAULT 0,"
    "  held_group bigint NOT NULL DEFAULT 0,"
    "  updated_at timestamptz NOT NULL,"
    "  CONSTRAINT rate_whole CHECK ((rate_n IS NULL) = (rate_us IS NULL)));"
    "CREATE TABLE due_rate ("
    "  kind text NOT NULL,"
    "  at timestamptz NOT NULL);"
    "CREATE INDEX due_rate_kind ON due_rate (kind, at);"
    "UPDATE due_meta SET value = '4' WHERE name = 'schema_version';";

/*
** Version 4 -> 5: production scale (issue 15, docs/internals/scale.md).
**  - due_lock: retention's one-pruner-at-a-time lease (lock_take).
**  - due_worker.pruned: the tasks a worker's retention deleted.
**  - due_task_dead: DEAD rows by kind, so stats and metrics count dead
**    letters (total and per kind) from an index bounded by what is dead.
**  - due_task_kind_state: the planner's statistics of (kind, state)
**    pairs, read as the per-kind estimate of SCHEDULED, DONE and
**    CANCELLED when those states are too big to count.
**  - per-table storage settings: autovacuum driven by the churn rather
**    than the table's size, room for HOT updates where an update changes
**    no indexed column.  Each value and its reason: scale.md.
*/
static const char schema_v5[] =
    "CREATE TABLE due_lock ("
    "  name text PRIMARY KEY,"
    "  owner text NOT NULL,"
    "  until timestamptz NOT NULL) WITH (fillfactor = 50);"
    "ALTER TABLE due_worker ADD COLUMN pruned bigint NOT NULL DEFAULT 0;"
    "CREATE INDEX due_task_dead ON due_task (kind) WHERE state = 'DEAD';"
    "CREATE STATISTICS due_task_kind_state (mcv) ON kind, state"
    "  FROM due_task;"
    "ALTER TABLE due_task SET (autovacuum_vacuum_scale_factor = 0,"
    "  autovacuum_vacuum_threshold = 10000,"
    "  autovacuum_vacuum_insert_scale_factor = 0,"
    "  autovacuum_vacuum_insert_threshold = 100000,"
    "  autovacuum_analyze_scale_factor = 0.02,"
    "  autovacuum_analyze_threshold = 1000,"
    "  autovacuum_vacuum_cost_delay = 1,"
    "  autovacuum_vacuum_cost_limit = 1000);"
    "ALTER TABLE due_attempt SET (fillfactor = 85,"
    "  autovacuum_vacuum_scale_factor = 0,"
    "  autovacuum_vacuum_threshold = 10000,"
    "  autovacuum_vacuum_insert_scale_factor = 0,"
    "  autovacuum_vacuum_insert_threshold = 100000,"
    "  autovacuum_vacuum_cost_delay = 1,"
    "  autovacuum_vacuum_cost_limit = 1000);"
    "ALTER TABLE due_audit SET (autovacuum_vacuum_scale_factor = 0,"
    "  autovacuum_vacuum_threshold = 10000);"
    "ALTER TABLE due_worker SET (fillfactor = 50);"
    "UPDATE due_meta SET value = '5' WHERE name = 'schema_version';";

/* ------------------------------------------------------------------ */
/* Open, schema                                                        */
/* ------------------------------------------------------------------ */

/* The URL: pg_wire.c reads it (due__pg_parse_store_url), for the admin
   group too.  *cfg is a due_pg_cfg, also after a failure (free_cfg
   releases it). */
static int pg_parse_url(void **cfg, const due_url *u)
{
	due_pg_cfg *c = NULL;
	int rc = due__pg_parse_store_url(&c, u);

	*cfg = c;
	return rc;
}

static void pg_free_cfg(void *cfg) { due__pg_cfg_free(cfg); }

/*
** Connect to the URI.  `create` means nothing here: the database must
** exist; init_schema creates the tables.
*/
static int pg_open(due_store **out, const void *cfg, const due_open_params *p)
{
	return due__pg_connect(out, cfg, p->timeout_us);
}

static void pg_close(due_store *s) { due__pg_disconnect(s); }

/* Schema version in the search_path: -1 when there is no due schema. */
static int read_version(due_store *s, int *out)
{
	PGresult *r = NULL;
	int rc;

	*out = -1;
	rc = due__pg_query(
	    s,
	    "SELECT CASE WHEN to_regclass('due_meta') IS NULL THEN '-1'"
	    " ELSE NULL END",
	    "read schema version", &r);
	if (rc == 0 && PQntuples(r) == 1 && PQgetisnull(r, 0, 0)) {
		PQclear(r);
		rc = due__pg_query(s,
				   "SELECT value FROM due_meta"
				   " WHERE name = 'schema_version'",
				   "read schema version", &r);
		if (rc == 0 && PQntuples(r) == 1)
			*out = (int)strtol(PQgetvalue(r, 0, 0), NULL, 10);
	}
	PQclear(r);
	return rc;
}

#define WHERE " in its search_path"

static int pg_check_schema(due_store *s)
{
	int v, rc;

	if ((rc = due__pg_ok(s)) < 0 || (rc = read_version(s, &v)) < 0)
		return rc;
	return due__schema_verdict(s->label, v, WHERE);
}

/*
** The transaction-scoped advisory lock makes concurrent `due init` runs
** wait for each other: the later ones then read the current version and
** do nothing.
*/
static int init_lock(due_store *s)
{
	return due__pg_command(s, "SELECT pg_advisory_xact_lock(" INIT_LOCK ")",
			       "lock schema");
}

/* Version 5 -> 6: SQLite's alone; the version both stores share. */
static const char schema_v6[] =
    "UPDATE due_meta SET value = '6' WHERE name = 'schema_version';";

/* Version 6 -> 7: SQLite's alone too. */
static const char schema_v7[] =
    "UPDATE due_meta SET value = '7' WHERE name = 'schema_version';";

/*
** Version 7 -> 8: nothing in the tables.  The step exists so that a
** store of version 7, whose due_schedule() resolved due_task through the
** caller's search_path, is refused by this build until `due init` has
** replaced the function (create_functions runs after every walk).
*/
static const char schema_v8[] = DUE_SCHEMA_RECORD("8");

/*
** Version 8 -> 9: nothing in the tables either.  It makes a store of
** version 8, which has no due_reschedule() (issue 38), run `due init`,
** whose create_functions adds it.
*/
static const char schema_v9[] = DUE_SCHEMA_RECORD("9");

/*
** Version 9 -> 10: nothing in the tables.  It makes a store of version 9,
** whose due_schedule() has no on_key (issue 38), run `due init`, whose
** create_functions adds the overload that has it.
*/
static const char schema_v10[] = DUE_SCHEMA_RECORD("10");

/*
** Version 10 -> 11: run after (issue 38 point 3).  A task's own columns:
** after_n (its parents, fixed), after_left (those it still waits for; >
** 0 only while it is held: SCHEDULED with due_at HELD_AT), after_any_end,
** and the time it asked for, applied at its release: after_at (an
** instant, or NULL) and after_delay_us (counted from the release).
** is_parent says a task was ever named as a parent: the finishing
** statements call due_release() only for such rows (the gate that keeps
** a plain completion as cheap as before), and a child's submit sets it
** on its live parents before it locks them.  due_after holds the edges:
** by parent (its primary key) for the release, by child for get and
** prune; pending until the parent's end was counted, so that an edge
** counts once even when a DEAD parent is retried and ends again.  The
** new columns have constant defaults: ADD COLUMN rewrites nothing, and
** existing rows read 0 / 0 / false.  IF NOT EXISTS: a store whose
** due_meta was set back by hand (the CLI tests fake older versions that
** way) walks it again without error; a real step runs in one transaction.
*/
static const char schema_v11[] =
    "ALTER TABLE due_task"
    "  ADD COLUMN IF NOT EXISTS after_n integer NOT NULL DEFAULT 0,"
    "  ADD COLUMN IF NOT EXISTS after_left integer NOT NULL DEFAULT 0,"
    "  ADD COLUMN IF NOT EXISTS after_any_end boolean NOT NULL"
    "    DEFAULT false,"
    "  ADD COLUMN IF NOT EXISTS after_at timestamptz,"
    "  ADD COLUMN IF NOT EXISTS after_delay_us bigint,"
    "  ADD COLUMN IF NOT EXISTS is_parent boolean NOT NULL DEFAULT false;"
    "CREATE TABLE IF NOT EXISTS due_after ("
    "  parent bigint NOT NULL,"
    "  child bigint NOT NULL,"
    "  pending boolean NOT NULL,"
    "  PRIMARY KEY (parent, child));"
    "CREATE INDEX IF NOT EXISTS due_after_child ON due_after "
    "(child);" DUE_SCHEMA_RECORD("11");

static const char *const steps[DUE_SCHEMA_VERSION + 1] = {
    [1] = schema_v1, [2] = schema_v2,	[3] = schema_v3,  [4] = schema_v4,
    [5] = schema_v5, [6] = schema_v6,	[7] = schema_v7,  [8] = schema_v8,
    [9] = schema_v9, [10] = schema_v10, [11] = schema_v11};

/*
** due_schedule(): a submit from SQL, inside the caller's own transaction,
** for any language's PostgreSQL driver (docs/INTERFACE.md):
**
**   BEGIN; INSERT INTO orders ...;
**   SELECT due_schedule('close-order', '42', run_in => interval '30 min');
**   COMMIT;
**
** It checks what due__submit_check() checks, in the same words (a bad
** kind, a negative or absurd delay, a delay and a time together, the key,
** max_attempts, the default payload limit of 1 MiB), raising SQLSTATE 22023
** before anything is written.  The insert is ST_INSERT's for one row: the
** same defaults, the same ON CONFLICT on the live (kind, key), and then the
** live task's id; the same pg_notify, which PostgreSQL delivers on commit
** and drops on rollback.  A live task that ends between the conflict and
** the look-up (READ COMMITTED: each statement sees the newest commits) is
** retried, a few times.
**
** Where it writes.  The function is created in the schema that holds
** due_task (as `due init`'s connection resolved it) and pinned to it:
** its search_path is that schema and pg_temp (PIN_PATH), so the caller's
** path is never read.  A role whose own schema ("$user") holds a
** due_task, or a session with a temporary due_task, still writes the
** store's table.  pg_catalog is not named, so PostgreSQL searches it
** first: a function or operator of the same signature in the due schema
** cannot stand in for a built-in.  pg_temp is named last because it
** cannot be left out (unnamed, it is searched first for tables).
**
** Times.  run_at takes any timestamptz, 'infinity' included: it is
** refused outside what `due add --at` accepts (1970 .. 9999, the years
** RFC 3339 can write), with the same words; run_in is bounded by the 100
** years of a delay, which an infinite interval exceeds too.
**
** Not a schema step: CREATE OR REPLACE on every `due init`, so re-running
** init on an existing store adds it (or updates it) without a version
** (version 8 exists only to make stores of version 7 run init).
*/
/*
** The checks both due_schedule() functions make first, in the C API's
** words (SQLSTATE 22023, nothing written), and the insert both make:
** new_id, or NULL when (kind, key) is held; DUE is its due time.
*/
/* clang-format off */
#define SCHEDULE_CHECKS \
    "IF k IS NULL OR k = '' THEN RAISE EXCEPTION USING ERRCODE =" \
    " '22023', MESSAGE = 'due_schedule: invalid kind '''': empty'; END" \
    " IF;\n" \
    "IF length(k) > 128 THEN RAISE EXCEPTION USING ERRCODE = '22023'," \
    " MESSAGE = format('due_schedule: invalid kind: %s characters (at" \
    " most 128)', length(k)); END IF;\n" \
    "IF k !~ '^[A-Za-z0-9_.:-]+$' THEN RAISE EXCEPTION USING ERRCODE =" \
    " '22023', MESSAGE = format('due_schedule: invalid kind %L: only" \
    " letters, digits and _ - . : are allowed', k); END IF;\n" \
    "IF d IS NULL OR d < interval '0' THEN RAISE EXCEPTION USING" \
    " ERRCODE = '22023', MESSAGE = 'due_schedule: invalid delay" \
    " (run_in): ' || CASE WHEN d IS NULL THEN 'NULL' ELSE 'negative'" \
    " END; END IF;\n" \
    "IF d > interval '36600 days' THEN RAISE EXCEPTION USING ERRCODE =" \
    " '22023', MESSAGE = 'due_schedule: invalid delay (run_in): more" \
    " than 100 years'; END IF;\n" \
    "IF t IS NOT NULL AND d <> interval '0' THEN RAISE EXCEPTION USING" \
    " ERRCODE = '22023', MESSAGE = 'due_schedule: give a delay (run_in)" \
    " or an absolute due time (run_at), not both'; END IF;\n" \
    "IF t < 'epoch'::timestamptz THEN RAISE EXCEPTION USING ERRCODE =" \
    " '22023', MESSAGE = 'due_schedule: invalid due time (run_at):" \
    " before 1970-01-01T00:00:00Z'; END IF;\n" \
    "IF t > '9999-12-31T23:59:59.999999Z'::timestamptz THEN RAISE" \
    " EXCEPTION USING ERRCODE = '22023', MESSAGE = 'due_schedule: invalid" \
    " due time (run_at): after 9999-12-31T23:59:59Z'; END IF;\n" \
    "IF ky = '' THEN RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE =" \
    " 'due_schedule: invalid key '''': empty'; END IF;\n" \
    "IF octet_length(ky) > 512 THEN RAISE EXCEPTION USING ERRCODE =" \
    " '22023', MESSAGE = format('due_schedule: invalid key: %s bytes" \
    " (at most 512)', octet_length(ky)); END IF;\n" \
    "IF m IS NULL OR m < 1 OR m > 1000 THEN RAISE EXCEPTION USING" \
    " ERRCODE = '22023', MESSAGE = format('due_schedule: invalid" \
    " max_attempts %s: must be 1..1000', coalesce(m::text, 'NULL'));" \
    " END IF;\n" \
    "IF octet_length(p) > 1048576 THEN RAISE EXCEPTION USING ERRCODE =" \
    " '22023', MESSAGE = format('due_schedule: payload is %s bytes," \
    " over the limit of 1048576 bytes', octet_length(p)); END IF;\n"

#define SCHEDULE_INSERT(DUE) \
    "    INSERT INTO due_task (kind, payload, state, due_at, max_attempts," \
    " backoff_us, backoff_cap_us, key, created_at, updated_at)" \
    " VALUES (k, convert_to(p, 'UTF8'), 'SCHEDULED'," \
    " " DUE ", m, 1000000, 3600000000, ky, now(), now())" \
    " ON CONFLICT (kind, key) WHERE key IS NOT NULL AND" \
    " state IN ('SCHEDULED', 'CLAIMED') DO NOTHING RETURNING id INTO" \
    " new_id;\n"

static const char sql_schedule_fn[] =
    "CREATE OR REPLACE FUNCTION due_schedule(kind text, payload text,"
    " run_in interval DEFAULT '0', run_at timestamptz DEFAULT NULL,"
    " key text DEFAULT NULL, max_attempts integer DEFAULT 5)"
    " RETURNS bigint LANGUAGE plpgsql VOLATILE"
    " SET search_path FROM CURRENT AS $fn$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  k text := kind; p text := coalesce(payload, ''); ky text := key;\n"
    "  d interval := run_in; t timestamptz := run_at;\n"
    "  m integer := max_attempts; new_id bigint;\n"
    "BEGIN\n"
    SCHEDULE_CHECKS
    "  FOR i IN 1..5 LOOP\n"
    SCHEDULE_INSERT("coalesce(t, now() + d)")
    "    IF new_id IS NOT NULL THEN\n"
    "      PERFORM pg_notify('" DUE_PG_CHANNEL "', k); RETURN new_id;\n"
    "    END IF;\n"
    "    SELECT id INTO new_id FROM due_task WHERE due_task.kind = k AND"
    " due_task.key = ky AND state IN ('SCHEDULED', 'CLAIMED');\n"
    "    IF new_id IS NOT NULL THEN RETURN new_id; END IF;\n"
    "  END LOOP;\n"
    "  RAISE EXCEPTION 'due_schedule: the live task of key % kept"
    " changing; try again', ky;\n"
    "END $fn$";

/*
** due_schedule(..., on_key): the overload with on_key (issue 38, schema
** 10): 'keep' is the function above; 'replace' moves the waiting holder
** of (kind, key) to this due time and payload, 'later' only when this due
** time is later than its own; with either, a running holder gives up its
** key (and runs on) and a new task takes it.  It returns the id that now
** holds the key.  The holder is locked (FOR UPDATE: the newest committed
** row, kept until the caller's COMMIT) and its state judged on what was
** locked; each UPDATE re-checks it.  A move notifies as a submit does.
**
** Beside the six-argument function, never replacing it: dropping that
** one would drop the EXECUTE grants users gave on it.  PostgreSQL wants
** every parameter after a defaulted one defaulted, and a defaulted
** on_key would make every call without it ambiguous between the two: so
** this one has no defaults, and a call gives all seven arguments (named
** or not).  Calls without on_key resolve to the six-argument one.
*/
static const char sql_schedule_on_key_fn[] =
    "CREATE OR REPLACE FUNCTION due_schedule(kind text, payload text,"
    " run_in interval, run_at timestamptz, key text, max_attempts integer,"
    " on_key text)"
    " RETURNS bigint LANGUAGE plpgsql VOLATILE"
    " SET search_path FROM CURRENT AS $fn$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  k text := kind; p text := coalesce(payload, ''); ky text := key;\n"
    "  d interval := run_in; t timestamptz := run_at;\n"
    "  m integer := max_attempts; ok text := on_key; due timestamptz;\n"
    "  new_id bigint; running boolean; movable boolean; held boolean;\n"
    "BEGIN\n"
    SCHEDULE_CHECKS
    "IF ok IS NULL OR ok NOT IN ('keep', 'replace', 'later') THEN RAISE"
    " EXCEPTION USING ERRCODE = '22023', MESSAGE = format('due_schedule:"
    " invalid on_key %s: must be keep, replace or later',"
    " coalesce(quote_literal(ok), 'NULL')); END IF;\n"
    "IF ok <> 'keep' AND ky IS NULL THEN RAISE EXCEPTION USING ERRCODE ="
    " '22023', MESSAGE = format('due_schedule: on_key %s needs a key: it"
    " says what to do with the live task of the same key', ok); END IF;\n"
    "  due := coalesce(t, now() + d);\n"
    "  FOR i IN 1..20 LOOP\n"
    SCHEDULE_INSERT("due")
    "    IF new_id IS NOT NULL THEN\n"
    "      PERFORM pg_notify('" DUE_PG_CHANNEL "', k); RETURN new_id;\n"
    "    END IF;\n"
    "    IF ok = 'keep' THEN\n"
    "      SELECT id INTO new_id FROM due_task WHERE due_task.kind = k AND"
    " due_task.key = ky AND state IN ('SCHEDULED', 'CLAIMED');\n"
    "      IF new_id IS NOT NULL THEN RETURN new_id; END IF;\n"
    "      CONTINUE;\n"
    "    END IF;\n"
    "    SELECT id, state = 'CLAIMED', (ok = 'replace' OR due_at < due),"
    " due_at = " HELD_AT " INTO new_id, running, movable, held FROM"
    " due_task WHERE"
    " due_task.kind = k AND due_task.key = ky AND"
    " state IN ('SCHEDULED', 'CLAIMED') FOR UPDATE;\n"
    "    CONTINUE WHEN new_id IS NULL;\n"
    /* held by run after: the time becomes its own, applied at its
       release; `later` against the earliest a release now gives.  A
       statement of its own, planned only when it runs: a producer
       granted what the rest needs keeps working for every other holder
       (docs/INTERFACE.md names the grants a held one needs) */
    "    IF held AND NOT running THEN\n"
    "      UPDATE due_task SET after_at = t, after_delay_us ="
    " CASE WHEN t IS NULL THEN (extract(epoch FROM d) * 1000000)::int8"
    " ELSE 0 END, payload = convert_to(p, 'UTF8'), updated_at = now()"
    " WHERE due_task.id = new_id AND state = 'SCHEDULED' AND"
    " after_left > 0 AND (ok = 'replace' OR greatest(coalesce(after_at,"
    " '-infinity'), now() + " US("coalesce(after_delay_us, 0)") ") < due);\n"
    /* not FOUND with replace: not held after all (due at the end of
       time by its own run_at): the plain move below */
    "      IF FOUND OR ok = 'later' THEN RETURN new_id; END IF;\n"
    "    END IF;\n"
    "    IF NOT running THEN\n"
    "      IF NOT movable THEN RETURN new_id; END IF;\n"
    "      UPDATE due_task SET due_at = due, payload = convert_to(p, 'UTF8'),"
    " updated_at = now() WHERE due_task.id = new_id AND"
    " state = 'SCHEDULED' AND (ok = 'replace' OR due_at < due);\n"
    "      IF FOUND THEN\n"
    "        PERFORM pg_notify('" DUE_PG_CHANNEL "', k); RETURN new_id;\n"
    "      END IF;\n"
    "    ELSE\n"
    "      UPDATE due_task SET key = NULL, updated_at = now()"
    " WHERE due_task.id = new_id AND state = 'CLAIMED';\n"
    "    END IF;\n"
    "  END LOOP;\n"
    "  RAISE EXCEPTION 'due_schedule: the live task of key % kept"
    " changing; try again', ky;\n"
    "END $fn$";

/* clang-format on */

/*
** due_reschedule(): reschedule (store.h) from SQL, inside the caller's own
** transaction (issue 38), beside due_schedule():
**
**   BEGIN; UPDATE orders ...;
**   SELECT due_reschedule(41, run_in => interval '10 min');
**   COMMIT;
**
** It returns the outcome's name: RESCHEDULED, TOO_LATE, ALREADY_FINISHED
** or NOT_FOUND (docs/INTERFACE.md).  run_in counts from now(), the
** transaction's start (the store's clock); run_at is an instant; exactly
** one of them, with due_schedule()'s bounds and words (SQLSTATE 22023,
** nothing written).  payload NULL keeps the task's; '' empties it.  The
** row is locked (FOR UPDATE) until the caller's COMMIT, the state judged
** on what was locked and re-checked by the UPDATE; listeners are
** notified on commit.  Pinned to the schema of due_task as
** due_schedule() is.
*/
static const char sql_reschedule_fn[] =
    "CREATE OR REPLACE FUNCTION due_reschedule(id bigint,"
    " run_in interval DEFAULT NULL, run_at timestamptz DEFAULT NULL,"
    " payload text DEFAULT NULL)"
    " RETURNS text LANGUAGE plpgsql VOLATILE"
    " SET search_path FROM CURRENT AS $fn$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  i bigint := id; d interval := run_in; t timestamptz := run_at;\n"
    "  p text := payload; st text; k text;\n"
    "BEGIN\n"
    "IF i IS NULL OR i <= 0 THEN RAISE EXCEPTION USING ERRCODE = '22023',"
    " MESSAGE = format('due_reschedule: invalid task id %s: ids are"
    " positive integers', coalesce(i::text, 'NULL')); END IF;\n"
    "IF d IS NULL AND t IS NULL THEN RAISE EXCEPTION USING ERRCODE ="
    " '22023', MESSAGE = 'due_reschedule: give a delay (run_in) or an"
    " absolute due time (run_at)'; END IF;\n"
    "IF d IS NOT NULL AND t IS NOT NULL THEN RAISE EXCEPTION USING"
    " ERRCODE = '22023', MESSAGE = 'due_reschedule: give a delay (run_in)"
    " or an absolute due time (run_at), not both'; END IF;\n"
    "IF d < interval '0' THEN RAISE EXCEPTION USING ERRCODE = '22023',"
    " MESSAGE = 'due_reschedule: invalid delay (run_in): negative'; END"
    " IF;\n"
    "IF d > interval '36600 days' THEN RAISE EXCEPTION USING ERRCODE ="
    " '22023', MESSAGE = 'due_reschedule: invalid delay (run_in): more"
    " than 100 years'; END IF;\n"
    "IF t < 'epoch'::timestamptz THEN RAISE EXCEPTION USING ERRCODE ="
    " '22023', MESSAGE = 'due_reschedule: invalid due time (run_at):"
    " before 1970-01-01T00:00:00Z'; END IF;\n"
    "IF t > '9999-12-31T23:59:59.999999Z'::timestamptz THEN RAISE"
    " EXCEPTION USING ERRCODE = '22023', MESSAGE = 'due_reschedule:"
    " invalid due time (run_at): after 9999-12-31T23:59:59Z'; END IF;\n"
    "IF octet_length(p) > 1048576 THEN RAISE EXCEPTION USING ERRCODE ="
    " '22023', MESSAGE = format('due_reschedule: payload is %s bytes,"
    " over the limit of 1048576 bytes', octet_length(p)); END IF;\n"
    "  SELECT state, kind INTO st, k FROM due_task WHERE due_task.id = i"
    " FOR UPDATE;\n"
    "  IF st IS NULL THEN RETURN 'NOT_FOUND'; END IF;\n"
    "  IF st = 'CLAIMED' THEN RETURN 'TOO_LATE'; END IF;\n"
    "  IF st <> 'SCHEDULED' THEN RETURN 'ALREADY_FINISHED'; END IF;\n"
    "  UPDATE due_task SET due_at = CASE WHEN after_left > 0 THEN due_at"
    " ELSE coalesce(t, now() + d) END, after_at = CASE WHEN after_left > 0"
    " THEN t ELSE after_at END, after_delay_us = CASE WHEN after_left > 0"
    " THEN coalesce(extract(epoch FROM d) * 1000000, 0)::int8"
    " ELSE after_delay_us END,"
    " payload = coalesce(convert_to(p, 'UTF8'), due_task.payload),"
    " updated_at = now() WHERE due_task.id = i AND"
    " due_task.state = 'SCHEDULED';\n"
    "  PERFORM pg_notify('" DUE_PG_CHANNEL "', k);\n"
    "  RETURN 'RESCHEDULED';\n"
    "END $fn$";

/*
** due_release(parents): count the end of each of these tasks, which
** this transaction has just ended (DONE, DEAD or CANCELLED), in their
** waiting children (run after, schema 11).  Called by every statement
** that ends a task (RELEASE), and by nothing else.  One round per level,
** each a new statement, so a new snapshot (the function is VOLATILE):
**  e  flips the parents' pending edges (an edge counts once: a DEAD
**     parent that is retried and ends again finds none pending);
**  k  per child: how many of its edges ended here, and the lowest
**     parent among them that did not end DONE, with its state;
**  u  each child still held (SCHEDULED, after_left > 0, re-checked on
**     the newest row): with such a parent and not after_any_end it is
**     CANCELLED, last_error naming that parent, after_left 0; else
**     after_left goes down by k.n, and at 0 it is due at the later of
**     its after_at and now() + after_delay_us (now(): the transaction's
**     start, the store's clock as a submit reads it);
**  nw wakes workers for the released children, as a submit does; dn
**     wakes due_wait for the cancelled ones.
** The cancelled children that are parents themselves are the next
** round's parents, so a chain of any length is cancelled by iteration,
** never by recursion; each round's snapshot is taken after the round
** before locked its rows, so it sees a grandchild whose submit committed
** meanwhile.  Returns the number of children changed.
*/
#define RELEASE_CUT "(k.ender IS NOT NULL AND NOT t.after_any_end)"
static const char sql_release_fn[] =
    "CREATE OR REPLACE FUNCTION due_release(parents bigint[])"
    " RETURNS integer LANGUAGE plpgsql VOLATILE"
    " SET search_path FROM CURRENT AS $fn$\n"
    "DECLARE cur bigint[] := parents; n integer := 0; got integer;"
    " x bigint; y bigint;\n"
    "BEGIN\n"
    "  WHILE cardinality(cur) > 0 LOOP\n"
    "    WITH e AS (UPDATE due_after a SET pending = false"
    " FROM due_task p WHERE a.parent = ANY (cur) AND a.pending"
    " AND p.id = a.parent AND " ENDED(
	"p.state") " RETURNING a.parent, a.child, p.state),"
		   " k AS (SELECT child, count(*)::int4 AS n,"
		   " min(parent) FILTER (WHERE state <> 'DONE') AS ender,"
		   " (array_agg(state ORDER BY parent) FILTER (WHERE state <> "
		   "'DONE'))[1]"
		   " AS ender_state FROM e GROUP BY child),"
		   " u AS (UPDATE due_task t SET"
		   " state = CASE WHEN " RELEASE_CUT " THEN 'CANCELLED'"
		   " ELSE 'SCHEDULED' END,"
		   " after_left = CASE WHEN " RELEASE_CUT " THEN 0"
		   " ELSE greatest(t.after_left - k.n, 0) END,"
		   " due_at = CASE WHEN NOT " RELEASE_CUT
		   " AND t.after_left <= k.n"
		   " THEN greatest(coalesce(t.after_at, '-infinity'), now() "
		   "+ " US(
		       "coalesce(t.after_delay_us, 0)") ") ELSE t.due_at END,"
							" last_error = CASE "
							"WHEN " RELEASE_CUT
							" THEN format('parent "
							"task %s"
							" ended %s', k.ender, "
							"k.ender_state) ELSE "
							"t.last_error END,"
							" updated_at = now() "
							"FROM k WHERE t.id = "
							"k.child"
							" AND t.state = "
							"'SCHEDULED' AND "
							"t.after_left > 0"
							" RETURNING t.id, "
							"t.state, t.kind, "
							"t.after_left, "
							"t.is_parent),"
							" nw AS (SELECT "
							"pg_notify("
							"'" DUE_PG_CHANNEL
							"', kind) FROM"
							" (SELECT DISTINCT "
							"kind FROM u WHERE "
							"state = 'SCHEDULED'"
							" AND after_left = 0) "
							"q),"
							" dn AS (SELECT "
							"pg_notify("
							"'" DUE_PG_DONE_CHANNEL
							"', '') WHERE"
							" EXISTS (SELECT 1 "
							"FROM u WHERE state = "
							"'CANCELLED')" WAITED
							")"
							" SELECT "
							"coalesce(array_agg(id "
							"ORDER BY id) FILTER "
							"(WHERE"
							" state = 'CANCELLED' "
							"AND is_parent), "
							"'{}'), count(*),"
							" (SELECT count(*) "
							"FROM nw), (SELECT "
							"count(*) FROM dn)"
							" INTO cur, got, x, y "
							"FROM u;\n"
							"    n := n + got;\n"
							"  END LOOP;\n"
							"  RETURN n;\n"
							"END $fn$";

/*
** due_schedule_after(): due_schedule() with parents (run after, schema
** 11), in the caller's transaction:
**
**   SELECT due_schedule_after('ship', '{"order": 42}', ARRAY[41, 40]);
**
** The task is held until each parent is DONE (after_any_end: ended in
** any way), then due at run_at or now() + run_in counted from then,
** whichever is later.  due_schedule()'s checks and words first (22023),
** then the list's: 1..1000 positive ids, none twice (22023).  Then, as
** the C API's submit: the live parents are marked (is_parent) and every
** parent is locked FOR SHARE, so a parent's end either committed before
** (seen here: DONE counts at once) or waits for this transaction's
** COMMIT and then sees the edge.  A missing parent raises P0002
** (no_data_found) "parent task 41 not found"; a DEAD or CANCELLED one
** 55000 (object_not_in_prerequisite_state) "parent task 41 is DEAD
** (...)", unless after_any_end; nothing is written then (the mark on
** the live parents is undone with the caller's rollback, and is
** harmless if kept).  With a key, a live holder's id is returned as by
** due_schedule(), and nothing is added.  Returns the id.
*/
static const char sql_schedule_after_fn[] =
    "CREATE OR REPLACE FUNCTION due_schedule_after(kind text, payload text,"
    " after bigint[], run_in interval DEFAULT '0',"
    " run_at timestamptz DEFAULT NULL, key text DEFAULT NULL,"
    " max_attempts integer DEFAULT 5, after_any_end boolean DEFAULT false)"
    " RETURNS bigint LANGUAGE plpgsql VOLATILE"
    " SET search_path FROM CURRENT AS $fn$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "  k text := kind; p text := coalesce(payload, ''); ky text := key;\n"
    "  d interval := run_in; t timestamptz := run_at;\n"
    "  m integer := max_attempts; ps bigint[] := after;\n"
    "  anyend boolean := coalesce(after_any_end, false);\n"
    "  new_id bigint; missing bigint; ended bigint; ended_state text;\n"
    "  live integer; dup bigint; pids bigint[]; pstates text[];\n"
    "BEGIN\n" SCHEDULE_CHECKS
    "IF ps IS NULL OR cardinality(ps) = 0 THEN RAISE EXCEPTION USING"
    " ERRCODE = '22023', MESSAGE = 'due_schedule_after: after is empty:"
    " give 1..1000 parent task ids'; END IF;\n"
    "IF cardinality(ps) > 1000 THEN RAISE EXCEPTION USING ERRCODE ="
    " '22023', MESSAGE = format('due_schedule_after: after lists %s"
    " tasks: at most 1000', cardinality(ps)); END IF;\n"
    "SELECT x INTO dup FROM unnest(ps) x WHERE x IS NULL OR x <= 0"
    " LIMIT 1;\n"
    "IF FOUND THEN RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE ="
    " format('due_schedule_after: after: invalid task id %s',"
    " coalesce(dup::text, 'NULL')); END IF;\n"
    "SELECT x INTO dup FROM unnest(ps) x GROUP BY x HAVING count(*) > 1"
    " ORDER BY x LIMIT 1;\n"
    "IF dup IS NOT NULL THEN RAISE EXCEPTION USING ERRCODE = '22023',"
    " MESSAGE = format('due_schedule_after: after lists task %s twice',"
    " dup); END IF;\n"
    "  UPDATE due_task SET is_parent = true WHERE id = ANY (ps)"
    " AND NOT is_parent AND state IN ('SCHEDULED', 'CLAIMED');\n"
    "  FOR i IN 1..5 LOOP\n"
    "    SELECT coalesce(array_agg(q.id ORDER BY q.id), '{}'),"
    " coalesce(array_agg(q.state ORDER BY q.id), '{}') INTO pids, pstates"
    " FROM (SELECT id, state FROM due_task WHERE id = ANY (ps)"
    " ORDER BY id FOR SHARE) q;\n"
    "    SELECT min(x) INTO missing FROM unnest(ps) x"
    " WHERE x <> ALL (pids);\n"
    "    IF missing IS NOT NULL THEN RAISE EXCEPTION USING ERRCODE ="
    " 'P0002', MESSAGE = format('due_schedule_after: parent task %s not"
    " found', missing); END IF;\n"
    "    SELECT u.i, u.s INTO ended, ended_state FROM unnest(pids, pstates)"
    " u(i, s) WHERE u.s IN ('DEAD', 'CANCELLED') ORDER BY u.i LIMIT 1;\n"
    "    IF ended IS NOT NULL AND NOT anyend THEN RAISE EXCEPTION USING"
    " ERRCODE = '55000', MESSAGE = format('due_schedule_after: parent"
    " task %s is %s (add with after_any_end to run after any end)', ended,"
    " ended_state); END IF;\n"
    "    SELECT count(*) INTO live FROM unnest(pstates) u(s)"
    " WHERE u.s IN ('SCHEDULED', 'CLAIMED');\n"
    "    INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"
    " backoff_us, backoff_cap_us, key, created_at, updated_at, after_n,"
    " after_left, after_any_end, after_at, after_delay_us)"
    " VALUES (k, convert_to(p, 'UTF8'), 'SCHEDULED', CASE WHEN live > 0"
    " THEN " HELD_AT " ELSE coalesce(t, now() + d) END, m, 1000000,"
    " 3600000000, ky, now(), now(), cardinality(ps), live, anyend, t,"
    " (extract(epoch FROM d) * 1000000)::int8)"
    " ON CONFLICT (kind, key) WHERE key IS NOT NULL AND"
    " state IN ('SCHEDULED', 'CLAIMED') DO NOTHING RETURNING id INTO"
    " new_id;\n"
    "    IF new_id IS NOT NULL THEN\n"
    "      INSERT INTO due_after (parent, child, pending) SELECT u.i,"
    " new_id, u.s IN ('SCHEDULED', 'CLAIMED')"
    " FROM unnest(pids, pstates) u(i, s);\n"
    "      IF live = 0 THEN PERFORM pg_notify('" DUE_PG_CHANNEL "', k);"
    " END IF;\n"
    "      RETURN new_id;\n"
    "    END IF;\n"
    "    SELECT id INTO new_id FROM due_task WHERE due_task.kind = k AND"
    " due_task.key = ky AND state IN ('SCHEDULED', 'CLAIMED');\n"
    "    IF new_id IS NOT NULL THEN RETURN new_id; END IF;\n"
    "  END LOOP;\n"
    "  RAISE EXCEPTION 'due_schedule_after: the live task of key % kept"
    " changing; try again', ky;\n"
    "END $fn$";

/*
** This transaction's search_path (set_config(..., true): it ends with the
** transaction, also behind a pooler) becomes "<schema of due_task>,
** pg_temp", quoted by format's %I: CREATE FUNCTION then puts the function
** in that schema and SET search_path FROM CURRENT pins it there.  One row
** with the path, or none when due_task is not in the search_path.
*/
#define PIN_PATH                                                               \
	"SELECT pg_catalog.set_config('search_path', pg_catalog.format("       \
	"'%I, pg_temp', n.nspname), true) FROM pg_catalog.pg_class c"          \
	" JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"            \
	" WHERE c.oid = pg_catalog.to_regclass('due_task')"

static int pin_path(due_store *s)
{
	PGresult *r;
	int rc = due__pg_query(s, PIN_PATH, "find the schema of due_task", &r);

	if (rc == 0 && PQntuples(r) != 1)
		rc = due__error_set(DUE_ESCHEMA,
				    "store '%s': no due_task" WHERE, s->label);
	PQclear(r);
	return rc;
}

/*
** (Re)create due_schedule() (both) and due_reschedule() under the init
** lock, in its own transaction.
*/
static int create_functions(due_store *s)
{
	int rc;

	if ((rc = due__pg_begin(s)) < 0)
		return rc;
	if ((rc = init_lock(s)) < 0 || (rc = pin_path(s)) < 0 ||
	    (rc = due__pg_command(s, sql_schedule_fn,
				  "create function due_schedule")) < 0 ||
	    (rc = due__pg_command(s, sql_schedule_on_key_fn,
				  "create function due_schedule with on_key")) <
		0 ||
	    (rc = due__pg_command(s, sql_reschedule_fn,
				  "create function due_reschedule")) < 0 ||
	    (rc = due__pg_command(s, sql_release_fn,
				  "create function due_release")) < 0 ||
	    (rc = due__pg_command(s, sql_schedule_after_fn,
				  "create function due_schedule_after")) < 0) {
		due__pg_rollback(s);
		return rc;
	}
	return due__pg_commit(s);
}

static int pg_init_schema(due_store *s)
{
	const due_migration m = {.label = s->label,
				 .where = WHERE,
				 .steps = steps,
				 .begin = due__pg_begin,
				 .lock = init_lock,
				 .read_version = read_version,
				 .exec = due__pg_command,
				 .commit = due__pg_commit,
				 .rollback = due__pg_rollback};
	int rc = due__pg_ok(s);

	if (rc == 0)
		rc = due__migrate(s, &m);
	return rc < 0 ? rc : create_functions(s);
}

static int pg_now(due_store *s, due_time *out)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	if ((rc = due__pg_ok(s)) < 0 ||
	    (rc = run(s, ST_NOW, &p, "now", &r)) < 0)
		return rc;
	*out = due__pg_col_time(r, 0, 0);
	PQclear(r);
	return 0;
}

static void *pg_native(due_store *s) { return s->conn; }

/* ------------------------------------------------------------------ */
/* Producer                                                            */
/* ------------------------------------------------------------------ */

/* The arrays of ST_INSERT. */
#define INSERT_COLS 11

/*
** The payload limit.  PostgreSQL holds no value, and takes no message,
** of 1 GB or more (MaxAllocSize, 2^30 - 1 bytes: a bytea, the Bind
** message that carries it, the tuple formed before TOAST moves it out,
** the DataRow that sends the row back with its other columns).  A task's
** row must fit beside it, its result included (1 MiB by default): one
** task's payload is at most PG_PAYLOAD_MAX, a larger one is refused
** before anything is sent.  No setting raises it.  A batch's payloads go
** in statements of at most PG_CHUNK_BYTES (one task's alone when larger)
** inside one transaction, so a batch of many is never too large for one
** message and stays all or none.
*/
#define PG_VALUE_MAX ((size_t)0x3fffffff)
#define PG_PAYLOAD_MAX (PG_VALUE_MAX - (4u << 20))
#define PG_CHUNK_BYTES ((size_t)16 << 20)

static int pg_payloads_fit(const due_submit *items, size_t n)
{
	size_t i = due__payload_over(items, n, PG_PAYLOAD_MAX);

	if (i == n)
		return 0;
	return due__store_payload_too_big(
	    "postgres store", i, n, items[i].payload_len, PG_PAYLOAD_MAX,
	    "a PostgreSQL store takes in one task (PostgreSQL holds no value "
	    "of 1 GB or more, and the row's other columns need room): no "
	    "setting raises it; keep the payload elsewhere and put its "
	    "address in the task");
}

/*
** How many of items[0..n) go in the next statement (at least one); a
** submit with parents goes alone (insert_after), and ends a chunk.
*/
static size_t chunk_of(const due_submit *items, size_t n)
{
	size_t k = 1, bytes = items[0].payload_len;

	if (items[0].opts.n_after > 0)
		return 1;
	while (k < n && items[k].opts.n_after == 0 &&
	       bytes + items[k].payload_len <= PG_CHUNK_BYTES)
		bytes += items[k++].payload_len;
	return k;
}

/*
** A submit's columns, in the order ST_INSERT_ONE and ST_INSERT_AFTER
** take them: kind, payload, at (NULL: none), delay, max_attempts,
** backoff, backoff cap, key, priority, group (NULL: none) and time limit
** (NULL: the kind's).
*/
static void task_params(due_pg_params *p, const due_submit *it)
{
	const due_schedule_opts *o = &it->opts;

	due__pg_text(p, it->kind);
	due__pg_bin(p, it->payload, it->payload_len);
	if (o->at != DUE_TIME_NONE)
		due__pg_time(p, o->at);
	else
		due__pg_text(p, NULL);
	due__pg_int(p, o->delay_us);
	due__pg_int(p, o->max_attempts);
	due__pg_int(p, o->backoff_us);
	due__pg_int(p, o->backoff_cap_us);
	due__pg_text(p, o->key);
	due__pg_int(p, o->priority);
	due__pg_text(p, o->group);
	if (o->timeout_us > 0)
		due__pg_int(p, o->timeout_us);
	else
		due__pg_text(p, NULL);
}

/* insert_batch for one submit: ST_INSERT_ONE. */
static int insert_one(due_store *s, const due_submit *it, due_submitted *out)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	task_params(&p, it);
	if ((rc = run(s, ST_INSERT_ONE, &p, "insert task", &r)) < 0)
		return rc;
	out->id = PQntuples(r) ? due__pg_col_int(r, 0, 0) : 0;
	out->existed = false;
	PQclear(r);
	return 0;
}

/*
** Insert n checked submits with one statement over arrays.  out[i].id
** gets the new id, or 0 when (kind, key) conflicted with a live task.
** Ids are drawn from the sequence in item order, so a batch's ids ascend.
*/
static int insert_batch(due_store *s, const due_submit *items, size_t n,
			due_submitted *out)
{
	static const uint32_t oids[INSERT_COLS] = {
	    DUE_PG_OID_TEXT, DUE_PG_OID_BYTEA, DUE_PG_OID_TIMESTAMPTZ,
	    DUE_PG_OID_INT8, DUE_PG_OID_INT4,  DUE_PG_OID_INT8,
	    DUE_PG_OID_INT8, DUE_PG_OID_TEXT,  DUE_PG_OID_INT4,
	    DUE_PG_OID_TEXT, DUE_PG_OID_INT8};
	due_pg_buf b[INSERT_COLS] = {{0}};
	due_pg_params p = {0};
	PGresult *r = NULL;
	int rc = 0;

	if (n == 1)
		return insert_one(s, items, out);
	for (int c = 0; c < INSERT_COLS; c++)
		due__pg_arr_head(&b[c], oids[c], n);
	for (size_t i = 0; i < n; i++) {
		const due_schedule_opts *o = &items[i].opts;
		due__pg_arr_text(&b[0], items[i].kind);
		due__pg_arr_bytes(&b[1], items[i].payload,
				  items[i].payload_len);
		if (o->at != DUE_TIME_NONE)
			due__pg_arr_i64(&b[2], o->at - DUE_PG_EPOCH_US);
		else
			due__pg_arr_bytes(&b[2], NULL, SIZE_MAX);
		due__pg_arr_i64(&b[3], o->delay_us);
		due__pg_arr_i32(&b[4], o->max_attempts);
		due__pg_arr_i64(&b[5], o->backoff_us);
		due__pg_arr_i64(&b[6], o->backoff_cap_us);
		due__pg_arr_text(&b[7], o->key);
		due__pg_arr_i32(&b[8], o->priority);
		due__pg_arr_text(&b[9], o->group); /* NULL: no group */
		if (o->timeout_us > 0)
			due__pg_arr_i64(&b[10], o->timeout_us);
		else /* NULL: the kind's */
			due__pg_arr_bytes(&b[10], NULL, SIZE_MAX);
	}
	for (int c = 0; c < INSERT_COLS && rc == 0; c++)
		rc = due__pg_array(&p, &b[c]);
	if (rc == 0 && (rc = run(s, ST_INSERT, &p, "insert task", &r)) == 0) {
		for (int i = 0; i < PQntuples(r) && (size_t)i < n; i++) {
			out[i].id = due__pg_col_int(r, i, 1);
			out[i].existed = false;
		}
		PQclear(r);
	}
	due__pg_bufs_free(b, INSERT_COLS);
	return rc;
}

/*
** Run after: insert one submit with parents (ST_AFTER_MARK, then
** ST_INSERT_AFTER), inside the submit's transaction (pg_schedule opens
** one; or the caller's).  out->id is the new id, or 0 when (kind, key)
** is held by a live task.  A missing parent is DUE_ENOTFOUND, a DEAD or
** CANCELLED one DUE_ESTATE (unless after_any_end), naming the lowest
** such id; nothing of the task is written then (the caller rolls back).
*/
static int insert_after(due_store *s, const due_submit *it, due_submitted *out)
{
	const due_schedule_opts *o = &it->opts;
	due_pg_buf b = {0};
	due_pg_params p = {0}, m = {0};
	PGresult *r = NULL;
	int rc;

	due__pg_arr_head(&b, DUE_PG_OID_INT8, o->n_after);
	for (size_t i = 0; i < o->n_after; i++)
		due__pg_arr_i64(&b, o->after[i]);
	if ((rc = due__pg_array(&m, &b)) < 0 ||
	    (rc = run(s, ST_AFTER_MARK, &m, "mark the parents", &r)) < 0)
		goto done;
	PQclear(r);
	r = NULL;
	task_params(&p, it);
	if ((rc = due__pg_array(&p, &b)) < 0)
		goto done;
	due__pg_int(&p, o->after_any_end ? 1 : 0);
	if ((rc = run(s, ST_INSERT_AFTER, &p, "insert task after", &r)) < 0)
		goto done;
	out->existed = false;
	out->id = 0;
	if (!due__pg_col_null(r, 0, 0))
		rc = due__error_set(DUE_ENOTFOUND, "parent task %lld not found",
				    (long long)due__pg_col_int(r, 0, 0));
	else if (!due__pg_col_null(r, 0, 1) && !o->after_any_end)
		rc = due__error_set(
		    DUE_ESTATE,
		    "parent task %lld is %s (add with after_any_end to run "
		    "after any end)",
		    (long long)due__pg_col_int(r, 0, 1), PQgetvalue(r, 0, 2));
	else
		out->id = due__pg_col_int(r, 0, 3);
done:
	PQclear(r);
	free(b.p);
	return rc;
}

/* One submit: with parents insert_after, else insert_batch. */
static int insert_item(due_store *s, const due_submit *it, due_submitted *out)
{
	if (it->opts.n_after > 0)
		return insert_after(s, it, out);
	return insert_batch(s, it, 1, out);
}

/* The live task of it's (kind, key): *id, or 0 when there is none now. */
static int find_live(due_store *s, const due_submit *it, due_id *id)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	due__pg_text(&p, it->kind);
	due__pg_text(&p, it->opts.key);
	if ((rc = run(s, ST_FIND_KEY, &p, "find task by key", &r)) < 0)
		return rc;
	*id = PQntuples(r) ? due__pg_col_int(r, 0, 0) : 0;
	PQclear(r);
	return 0;
}

/* The parameters $1..$5 of ST_KEY_MOVE and ST_KEY_HOLDER. */
static void key_params(due_pg_params *p, const due_submit *it)
{
	due__pg_text(p, it->kind);
	due__pg_text(p, it->opts.key);
	if (it->opts.at != DUE_TIME_NONE)
		due__pg_time(p, it->opts.at);
	else
		due__pg_text(p, NULL);
	due__pg_int(p, it->opts.delay_us);
}

/*
** on_key REPLACE or LATER (issue 38) for an item whose insert conflicted,
** inside the submit's transaction.  A waiting holder takes the item's due
** time and payload (ST_KEY_MOVE: existed, moved).  When that moved
** nothing, the holder is locked and read (ST_KEY_HOLDER): waiting, and
** LATER's time is not later, it is the answer (existed, not moved);
** running, it gives up its key (ST_KEY_GIVE_UP) and the item is inserted
** again, as the key's new holder.  out->id stays 0 when the holder changed
** meanwhile (it ended, or became waiting again): the caller goes round
** again, as for KEEP.
*/
static int on_key(due_store *s, const due_submit *it, due_submitted *out)
{
	int32_t later = it->opts.on_key == DUE_ON_KEY_LATER;
	due_pg_params p = {0};
	PGresult *r;
	due_id id;
	bool claimed, would_move;
	int rc;

	key_params(&p, it);
	due__pg_bin(&p, it->payload, it->payload_len);
	due__pg_int(&p, later);
	if ((rc = run(s, ST_KEY_MOVE, &p, "move the task of the key", &r)) < 0)
		return rc;
	out->id = PQntuples(r) ? due__pg_col_int(r, 0, 0) : 0;
	out->existed = out->moved = out->id != 0;
	PQclear(r);
	if (out->id)
		return 0;

	p = (due_pg_params){0};
	key_params(&p, it);
	due__pg_int(&p, later);
	if ((rc = run(s, ST_KEY_HOLDER, &p, "lock the task of the key", &r)) <
	    0)
		return rc;
	if (PQntuples(r) == 0) { /* it ended: the key is free */
		PQclear(r);
		return insert_batch(s, it, 1, out);
	}
	id = due__pg_col_int(r, 0, 0);
	claimed = due__pg_col_int(r, 0, 1) != 0;
	would_move = due__pg_col_int(r, 0, 2) != 0;
	PQclear(r);
	if (!claimed) {
		/* waiting again (a retry) and movable: move it next round */
		if (!would_move) {
			out->id = id;
			out->existed = true;
		}
		return 0;
	}
	p = (due_pg_params){0};
	due__pg_int(&p, id);
	if ((rc = run(s, ST_KEY_GIVE_UP, &p, "give up the key", &r)) < 0)
		return rc;
	if (PQntuples(r) != 1)
		rc = due__error_set(DUE_ESTORE,
				    "postgres store: running task %lld locked "
				    "but did not give up its key",
				    (long long)id);
	PQclear(r);
	return rc < 0 ? rc : insert_batch(s, it, 1, out);
}

/*
** Submit items: insert them all (a statement per chunk_of), then give
** every item whose (kind, key) conflicted the live task's id (existed =
** true), or, with on_key REPLACE or LATER, move that task or give its key
** to a new one (on_key).  When that task ended between our insert and our
** look-up, insert again.  Items are settled in order, so an item acts on
** the task an earlier item of the batch made or moved.  With keys, or
** more than one chunk, this runs inside a transaction (ours or the
** caller's), so all or none commit.
*/
static int insert_items(due_store *s, const due_submit *items, size_t n,
			due_submitted *out)
{
	int rc;

	for (size_t i = 0; i < n; i++) {
		out[i].id = 0;
		out[i].moved = false;
	}
	for (size_t i = 0, k; i < n; i += k) {
		k = chunk_of(items + i, n - i);
		rc = items[i].opts.n_after > 0
			 ? insert_after(s, items + i, out + i)
			 : insert_batch(s, items + i, k, out + i);
		if (rc < 0)
			return rc;
	}
	for (size_t i = 0; i < n; i++) {
		for (int tries = 0; out[i].id == 0; tries++) {
			if (tries == KEY_TRIES)
				return due__error_set(
				    DUE_EBUSY,
				    "postgres store: the live task of kind "
				    "'%s' key '%s' keeps changing; retry",
				    items[i].kind, items[i].opts.key);
			if (items[i].opts.on_key != DUE_ON_KEY_KEEP) {
				if ((rc = on_key(s, &items[i], &out[i])) < 0)
					return rc;
				continue;
			}
			if ((rc = find_live(s, &items[i], &out[i].id)) < 0)
				return rc;
			out[i].existed = out[i].id != 0;
			if (!out[i].id &&
			    (rc = insert_item(s, &items[i], &out[i])) < 0)
				return rc;
		}
	}
	return 0;
}

/*
** Schedule n checked submits: one statement (which also notifies), or,
** when keys are involved, one transaction with the look-ups.
*/
static int pg_schedule(due_store *s, due_submitted *out,
		       const due_submit *items, size_t n)
{
	bool keyed = false;
	int rc;

	for (size_t i = 0; i < n; i++) /* parents: two statements each */
		keyed |= items[i].opts.key != NULL || items[i].opts.n_after > 0;
	if ((rc = pg_payloads_fit(items, n)) < 0 || (rc = due__pg_ok(s)) < 0)
		return rc;
	if (!keyed && chunk_of(items, n) == n)
		return insert_items(s, items, n, out);
	if ((rc = due__pg_begin(s)) < 0)
		return rc;
	if ((rc = insert_items(s, items, n, out)) < 0) {
		due__pg_rollback(s);
		return rc;
	}
	return due__pg_commit(s);
}

static int pg_native_tx(void *conn)
{
	switch (PQtransactionStatus(conn)) {
	case PQTRANS_INTRANS: return DUE_NATIVE_TX_OPEN;
	case PQTRANS_INERROR: return DUE_NATIVE_TX_FAILED;
	default: return DUE_NATIVE_TX_NONE;
	}
}

/*
** Insert on the caller's connection, inside the transaction it holds
** (src/core/native.c checked it): unnamed statements, so nothing of
** ours stays in their session.
*/
static int pg_schedule_on_native(void *conn, due_submitted *out,
				 const due_submit *it)
{
	due_store tmp = {.conn = conn, .own = false};
	int rc = insert_items(&tmp, it, 1, out);

	if (rc < 0 && (strcmp(tmp.sqlstate, "42P01") == 0 ||
		       strcmp(tmp.sqlstate, "42883") == 0))
		rc = due__error_set(DUE_ESCHEMA,
				    "database has no due schema in "
				    "its search_path: run `due init`");
	return rc;
}

/* ------------------------------------------------------------------ */
/* Claim                                                               */
/* ------------------------------------------------------------------ */

/*
** Every task row of r (rows whose id is NULL skipped) as a new list in
** *out.  0 or a negative code, with *out left NULL.
*/
static int tasks_of(const PGresult *r, due_task_list **out)
{
	due_task_list *l;
	PG_ROWS(rows, r);
	int rc;

	*out = NULL;
	if ((rc = due__task_list_alloc(&l, (size_t)PQntuples(r))) < 0)
		return rc;
	if ((rc = due__rows_tasks(&rows, l, (size_t)PQntuples(r))) < 0) {
		due_task_list_free(l);
		return rc;
	}
	*out = l;
	return 0;
}

/*
** The claimed rows of r as a new list in *out (tasks_of), each carrying
** the time limit of its try: its own, else its kind's (COL_KIND_TIMEOUT).
*/
static int claimed_of(const PGresult *r, due_task_list **out)
{
	int rc = tasks_of(r, out);
	size_t j = 0;

	for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
		if (due__pg_col_null(r, i, DUE_TC_ID))
			continue;
		if (j < (*out)->count && (*out)->items[j].timeout_us == 0)
			(*out)->items[j].timeout_us =
			    due__pg_col_int(r, i, COL_KIND_TIMEOUT);
		j++;
	}
	return rc;
}

/* Move every task of *src to the end of dst; frees *src. */
static int append_tasks(due_task_list *dst, due_task_list **src)
{
	due_task_list *l = *src;
	due_task *items;

	*src = NULL;
	if (!l)
		return 0;
	if (l->count) {
		items = realloc(dst->items,
				(dst->count + l->count) * sizeof(*items));
		if (!items) {
			due_task_list_free(l);
			return due__error_set(DUE_ENOMEM, "out of memory");
		}
		memcpy(items + dst->count, l->items, l->count * sizeof(*items));
		dst->items = items;
		dst->count += l->count;
		l->count = 0;
	}
	if (l->retry_in_us > 0 &&
	    (dst->retry_in_us == 0 || l->retry_in_us < dst->retry_in_us))
		dst->retry_in_us = l->retry_in_us;
	due_task_list_free(l);
	return 0;
}

/*
** Part 1 of the claim (flow.md): the limited kinds the claim admits that
** have due tasks, up to `limit` tasks (or exactly `only_id`), in ONE
** transaction: lock their due_kind rows in kind order (ST_FLOW_LOCK),
** then claim each under its limits with a new statement (ST_FLOW_CLAIM:
** counts, pick, claim, rate log, held counters) until the claim is full.
** Kinds are served in name order.  *out is a new list whose retry_in_us
** is set when a limit left due tasks; on failure nothing was claimed.
*/
static int claim_limited(due_store *s, due_task_list **out, const char *owner,
			 const char *const *kinds, size_t n_kinds, bool exclude,
			 int limit, int64_t lease_us, due_id only_id)
{
	due_pg_buf kb = {0};
	due_pg_params p = {0};
	PGresult *lr = NULL, *r = NULL;
	due_task_list *got = NULL, *l = NULL;
	int rc, left = limit;

	*out = NULL;
	if ((rc = due__task_list_alloc(&l, 0)) < 0)
		return rc;
	if (n_kinds)
		rc = due__pg_texts(&p, &kb, kinds, n_kinds);
	else {
		due__pg_text(&p, NULL);
		rc = 0;
	}
	due__pg_text(&p, exclude ? "true" : "false");
	due__pg_int(&p, only_id);
	if (rc < 0 || (rc = due__pg_begin(s)) < 0)
		goto done;
	if ((rc = run(s, ST_FLOW_LOCK, &p, "lock limited kinds", &lr)) < 0)
		goto fail;
	for (int i = 0; i < PQntuples(lr) && left > 0; i++) {
		due_pg_params q = {0};
		char *kind = due__pg_col_text(lr, i, 0);
		if (!kind) {
			rc = due__error_set(DUE_ENOMEM, "out of memory");
			goto fail;
		}
		due__pg_text(&q, kind);
		due__pg_text(&q, owner);
		due__pg_int(&q, lease_us);
		due__pg_int(&q, left);
		due__pg_int(&q, only_id);
		rc = run(s, ST_FLOW_CLAIM, &q, "claim limited kind", &r);
		free(kind);
		if (rc < 0 || (rc = claimed_of(r, &got)) < 0)
			goto fail;
		if (PQntuples(r) > 0 && due__pg_col_int(r, 0, COL_WHY) > 0)
			got->retry_in_us = due__pg_col_int(r, 0, COL_RETRY);
		PQclear(r);
		r = NULL;
		left -= (int)got->count;
		if ((rc = append_tasks(l, &got)) < 0)
			goto fail;
	}
	rc = due__pg_commit(s);
	goto done;
fail:
	due__pg_rollback(s);
done:
	if (rc < 0) /* rolled back: nothing was claimed */
		due_task_list_free(l);
	else
		*out = l;
	due_task_list_free(got);
	PQclear(r);
	PQclear(lr);
	free(kb.p);
	return rc;
}
/*
** Part 1 (claim_limited) after part 2 has claimed into *l: l gains its
** tasks.  When l already holds tasks, a failure of part 1 is not the
** claim's: those tasks are claimed and must reach the worker, so the
** error is dropped (the next claim tries the limited kinds again).
*/
static int then_limited(due_store *s, due_task_list *l, const char *owner,
			const char *const *kinds, size_t n_kinds, bool exclude,
			int limit, int64_t lease_us, due_id only_id)
{
	due_task_list *m = NULL;
	int rc = claim_limited(s, &m, owner, kinds, n_kinds, exclude, limit,
			       lease_us, only_id);

	if (rc < 0 && l->count > 0) {
		due__error_clear();
		return 0;
	}
	return rc < 0 ? rc : append_tasks(l, &m);
}

/*
** Claim up to `limit` due tasks (or exactly `only_id` when due), in the
** two parts of flow.md.
**
** Part 2, the kinds without limits, is ONE prepared statement (pick with
** FOR UPDATE SKIP LOCKED, update, record the RUNNING attempt, return the
** rows): it leaves paused and limited kinds alone with a subquery on
** due_kind, and also says whether a limited kind it admits has due tasks
** (COL_LIMITED).  A store without limited kinds therefore pays no extra
** round trip.  The kind filter (only these, or with `exclude` all but
** these) is a bound text[], so there are four shapes in all.
**
** Part 1, the limited kinds, is claim_limited's transaction.  flow.md
** serves them first; which part runs first here is decided by what the
** previous claim on this session learned (s->flow_first): when it saw due
** tasks of limited kinds, part 1 runs before part 2; else part 2 runs
** first and, when it says limited kinds have due tasks and the claim has
** room left, part 1 follows in the same call.  The order only decides who
** gets the room of one claim; every limit is exact either way, since
** part 1 counts under the kinds' locks and part 2 never takes their
** tasks.  An empty claim is an empty list.
*/
static int pg_claim(due_store *s, due_task_list **out, const char *owner,
		    const char *const *kinds, size_t n_kinds, bool exclude,
		    int limit, int64_t lease_us, due_id only_id)
{
	enum stmt_id id = only_id    ? ST_CLAIM_ID
			  : !n_kinds ? ST_CLAIM_ANY
			  : exclude  ? ST_CLAIM_EXCLUDE
				     : ST_CLAIM_KINDS;
	bool first = !only_id && s->flow_first, lim;
	due_task_list *l = NULL, *u = NULL;
	due_pg_buf kb = {0};
	due_pg_params p = {0};
	PGresult *r = NULL;
	int rc, left;

	*out = NULL;
	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	if (first)
		rc = claim_limited(s, &l, owner, kinds, n_kinds, exclude, limit,
				   lease_us, 0);
	else
		rc = due__task_list_alloc(&l, 0);
	if (rc < 0)
		return rc;
	left = limit - (int)l->count;
	if (only_id ? l->count > 0 : left <= 0)
		goto done;
	due__pg_text(&p, owner);
	due__pg_int(&p, lease_us);
	due__pg_int(&p, only_id ? only_id : left);
	if ((id == ST_CLAIM_KINDS || id == ST_CLAIM_EXCLUDE) &&
	    (rc = due__pg_texts(&p, &kb, kinds, n_kinds)) < 0)
		goto done;
	if ((rc = run(s, id, &p, "claim", &r)) < 0 ||
	    (rc = claimed_of(r, &u)) < 0)
		goto done;
	lim = PQntuples(r) > 0 && due__pg_col_int(r, 0, COL_LIMITED);
	if (!only_id)
		s->flow_first = lim;
	left -= (int)u->count;
	if ((rc = append_tasks(l, &u)) < 0)
		goto done;
	if (lim && !first && (only_id ? l->count == 0 : left > 0))
		rc = then_limited(s, l, owner, kinds, n_kinds, exclude,
				  only_id ? 1 : left, lease_us, only_id);
done:
	if (rc < 0 && l->count > 0) { /* claimed: hand them out */
		due__error_clear();
		rc = 0;
	}
	if (rc == 0)
		*out = l;
	else
		due_task_list_free(l);
	PQclear(r);
	free(kb.p);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Extend, complete, fail                                              */
/* ------------------------------------------------------------------ */

static int pg_extend(due_store *s, due_extend_outcome *out, due_id id,
		     int32_t attempt, int64_t lease_us)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_int(&p, id);
	due__pg_int(&p, attempt);
	due__pg_int(&p, lease_us);
	if ((rc = run(s, ST_EXTEND, &p, "extend", &r)) < 0)
		return rc;
	*out = DUE_EXTEND_LOST;
	if (PQntuples(r) == 1) {
		due_state st = DUE_SCHEDULED;
		due__pg_col_state(r, 0, 0, &st);
		if (due__pg_col_int(r, 0, 3))
			*out = DUE_EXTEND_OK;
		else if (st == DUE_CLAIMED &&
			 due__pg_col_int(r, 0, 1) == attempt &&
			 due__pg_col_int(r, 0, 2))
			*out = DUE_EXTEND_CANCEL_REQUESTED;
	}
	PQclear(r);
	return 0;
}

/*
** Run the completion hook for every row that became DONE.  The hook gets
** our connection in blocking mode, as libpq hands connections out (its
** statements are its own to wait for); ours go on in non-blocking mode
** (pg_wire.c: bounded waits).  Nothing is left unsent between statements,
** so switching never waits.
*/
static int run_hooks(due_store *s, const due_completion *items, size_t n,
		     due_tx_hook hook, void *payload)
{
	int rc = 0;

	PQsetnonblocking(s->conn, 0);
	for (size_t i = 0; hook && i < n && rc == 0; i++)
		if (items[i].outcome == DUE_COMPLETE_DONE)
			rc = due__store_run_hook(hook, s->conn, &items[i],
						 payload);
	PQsetnonblocking(s->conn, 1);
	return rc;
}

/* The completions as parameters $1..$3 (ids, attempts, results). */
static int bind_completions(due_pg_params *p, due_pg_buf b[3],
			    const due_completion *items, size_t n)
{
	int rc = 0;

	due__pg_arr_head(&b[0], DUE_PG_OID_INT8, n);
	due__pg_arr_head(&b[1], DUE_PG_OID_INT4, n);
	due__pg_arr_head(&b[2], DUE_PG_OID_BYTEA, n);
	for (size_t i = 0; i < n; i++) {
		due__pg_arr_i64(&b[0], items[i].id);
		due__pg_arr_i32(&b[1], items[i].attempt);
		due__pg_arr_bytes(&b[2], items[i].result, items[i].result_len);
	}
	for (int c = 0; c < 3 && rc == 0; c++)
		rc = due__pg_array(p, &b[c]);
	return rc;
}

/* The fenced completion statement over arrays; fills each outcome. */
static int complete_rows(due_store *s, due_completion *items, size_t n)
{
	due_pg_buf b[3] = {{0}};
	due_pg_params p = {0};
	PGresult *r = NULL;
	int rc = bind_completions(&p, b, items, n);

	if (rc == 0 && (rc = run(s, ST_COMPLETE, &p, "complete", &r)) == 0) {
		for (int i = 0; i < PQntuples(r) && (size_t)i < n; i++) {
			const char *st = PQgetvalue(r, i, 1);
			items[i].outcome =
			    due__pg_col_null(r, i, 1)
				? DUE_COMPLETE_REJECTED_STALE
			    : strcmp(st, "DONE") == 0
				? DUE_COMPLETE_DONE
				: DUE_COMPLETE_CANCELLED_BEFORE_COMMIT;
		}
		PQclear(r);
	}
	due__pg_bufs_free(b, 3);
	return rc;
}

/*
** Complete n tries.  Each row is fenced on its own (CLAIMED, its attempt)
** in one statement; without a hook that statement is the transaction.
** With a hook: BEGIN, the statement, the hook for each DONE row on our
** PGconn, COMMIT; a hook that fails rolls everything back (DUE_ERROR).
** A try listed twice completes once, with its first item; the repeat is
** REJECTED_STALE, as it would be one statement later, and marked so on
** the try's row (late_commit, set by the same update that ends it).
*/
static int pg_complete(due_store *s, due_completion *items, size_t n,
		       due_tx_hook hook, void *payload)
{
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	if (!hook)
		return complete_rows(s, items, n);
	if ((rc = due__pg_begin(s)) < 0)
		return rc;
	if ((rc = complete_rows(s, items, n)) < 0 ||
	    (rc = run_hooks(s, items, n, hook, payload)) < 0) {
		due__pg_rollback(s);
		return rc;
	}
	return due__pg_commit(s);
}

/* The outcomes string of a combined statement ("DONE,STALE,...") */
static void read_outcomes(const PGresult *r, int col, due_completion *items,
			  size_t n)
{
	const char *p = PQgetvalue(r, 0, col);
	for (size_t i = 0; i < n; i++) {
		items[i].outcome = !strncmp(p, "DONE", 4) ? DUE_COMPLETE_DONE
				   : !strncmp(p, "CANCELLED", 9)
				       ? DUE_COMPLETE_CANCELLED_BEFORE_COMMIT
				       : DUE_COMPLETE_REJECTED_STALE;
		const char *comma = p ? strchr(p, ',') : NULL;
		p = comma ? comma + 1 : "";
	}
}

/*
** Complete n tries and claim the next batch with ONE statement: one
** round trip and one commit (one WAL flush) per batch, the shape of the
** one-commit floor.  Each completion is fenced on its own row as in
** complete_rows().
*/
static int pg_complete_claim(due_store *s, due_completion *items, size_t n,
			     const char *owner, const char *const *kinds,
			     size_t n_kinds, bool exclude, int limit,
			     int64_t lease_us, due_task_list **out)
{
	enum stmt_id id = !n_kinds  ? ST_CC_ANY
			  : exclude ? ST_CC_EXCLUDE
				    : ST_CC_KINDS;
	due_pg_buf b[4] = {{0}};
	due_pg_params p = {0};
	PGresult *r = NULL;
	int rc;

	*out = NULL;
	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	/*
	** Limited kinds first (pg_claim): complete on its own, so the
	** finished tries no longer hold running slots, then claim.  Once
	** the completions committed, a failed claim is an empty one (the
	** caller must not complete again), as after the one statement.
	*/
	if (s->flow_first) {
		if ((rc = complete_rows(s, items, n)) < 0)
			return rc;
		if (pg_claim(s, out, owner, kinds, n_kinds, exclude, limit,
			     lease_us, 0) < 0) {
			due__error_clear();
			return due__task_list_alloc(out, 0);
		}
		return 0;
	}
	rc = bind_completions(&p, b, items, n);
	due__pg_text(&p, owner);
	due__pg_int(&p, lease_us);
	due__pg_int(&p, limit);
	if (rc == 0 && n_kinds)
		rc = due__pg_texts(&p, &b[3], kinds, n_kinds);
	if (rc < 0 || (rc = run(s, id, &p, "complete and claim", &r)) < 0)
		goto done;
	if (PQntuples(r) > 0)
		read_outcomes(r, PQnfields(r) - 1, items, n);
	/* a NULL task: nothing was claimed */
	if ((rc = claimed_of(r, out)) < 0)
		goto done;
	s->flow_first = PQntuples(r) > 0 && due__pg_col_int(r, 0, COL_LIMITED);
	if (s->flow_first && (int)(*out)->count < limit &&
	    then_limited(s, *out, owner, kinds, n_kinds, exclude,
			 limit - (int)(*out)->count, lease_us, 0) < 0)
		due__error_clear(); /* committed: an empty claim (above) */
done:
	PQclear(r);
	due__pg_bufs_free(b, 4);
	return rc;
}

static int pg_fail(due_store *s, due_fail_outcome *out, due_id id,
		   int32_t attempt, const char *error, due_outcome as)
{
	due_pg_params p = {0};
	PGresult *r;
	due_state ns = DUE_SCHEDULED;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_int(&p, id);
	due__pg_int(&p, attempt);
	due__pg_text(&p, error);
	due__pg_text(&p, due_outcome_name(as == DUE_OUT_TIMED_OUT
					      ? DUE_OUT_TIMED_OUT
					      : DUE_OUT_FAILED));
	if ((rc = run(s, ST_FAIL, &p, "fail", &r)) < 0)
		return rc;
	if (PQntuples(r) == 0)
		*out = DUE_FAIL_REJECTED_STALE;
	else if ((rc = due__pg_col_state(r, 0, 0, &ns)) == 0)
		*out = due__fail_outcome_of(ns);
	PQclear(r);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Reclaim                                                             */
/* ------------------------------------------------------------------ */

/*
** Take back expired leases in batches of BATCH_ROWS, each one statement
** that re-checks state and lease_until < now() as it writes.  Also
** reports the earliest lease still running (and the server's now), so the
** worker can sleep until exactly then.
*/
static int pg_reclaim(due_store *s, due_reclaimed *out)
{
	int64_t got;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	do {
		due_pg_params p = {0};
		PGresult *r;
		due__pg_int(&p, BATCH_ROWS);
		if ((rc = run(s, ST_RECLAIM, &p, "reclaim", &r)) < 0)
			return rc;
		out->rescheduled += due__pg_col_int(r, 0, 0);
		out->dead += due__pg_col_int(r, 0, 1);
		out->cancelled += due__pg_col_int(r, 0, 2);
		/* next_expiry is 0 when none is CLAIMED */
		out->next_expiry = due__pg_col_time(r, 0, 4);
		out->now = due__pg_col_time(r, 0, 5);
		got = due__pg_col_int(r, 0, 0) + due__pg_col_int(r, 0, 1) +
		      due__pg_col_int(r, 0, 2);
		PQclear(r);
	} while (got == BATCH_ROWS);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Cancel, get, list                                                   */
/* ------------------------------------------------------------------ */

/* One statement: lock the row, report its state, cancel or request. */
static int pg_cancel(due_store *s, due_cancel_outcome *out, due_id id)
{
	due_pg_params p = {0};
	PGresult *r;
	due_state st = DUE_SCHEDULED;
	bool found;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_int(&p, id);
	if ((rc = run(s, ST_CANCEL, &p, "cancel", &r)) < 0)
		return rc;
	found = PQntuples(r) > 0;
	if (!found || (rc = due__pg_col_state(r, 0, 0, &st)) == 0)
		*out = due__cancel_outcome_of(found, st);
	PQclear(r);
	return rc;
}

/* One statement (ST_RESCHEDULE): lock, report, move when SCHEDULED. */
static int pg_reschedule(due_store *s, due_reschedule_outcome *out, due_id id,
			 const due_reschedule_opts *o)
{
	due_submit one = {.payload = o->payload, .payload_len = o->payload_len};
	due_pg_params p = {0};
	due_state st = DUE_SCHEDULED;
	PGresult *r;
	bool found;
	int rc;

	if ((o->set_payload && (rc = pg_payloads_fit(&one, 1)) < 0) ||
	    (rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_int(&p, id);
	if (o->at != DUE_TIME_NONE)
		due__pg_time(&p, o->at);
	else
		due__pg_text(&p, NULL);
	due__pg_int(&p, o->delay_us);
	due__pg_int(&p, o->set_payload);
	if (o->set_payload)
		due__pg_bin(&p, o->payload, o->payload_len);
	else
		due__pg_text(&p, NULL);
	if ((rc = run(s, ST_RESCHEDULE, &p, "reschedule", &r)) < 0)
		return rc;
	found = PQntuples(r) > 0;
	if (!found || (rc = due__pg_col_state(r, 0, 0, &st)) == 0)
		*out = due__reschedule_outcome_of(found, st);
	PQclear(r);
	return rc;
}

/*
** Load the attempts history of n tasks (sorted by id, as get and list
** return them) with one statement.
*/
static int load_attempts(due_store *s, due_task *tasks, size_t n)
{
	due_pg_buf b = {0};
	due_pg_params p = {0};
	PGresult *r = NULL;
	int rc;

	due__pg_arr_head(&b, DUE_PG_OID_INT8, n);
	for (size_t i = 0; i < n; i++)
		due__pg_arr_i64(&b, tasks[i].id);
	if ((rc = due__pg_array(&p, &b)) == 0 &&
	    (rc = run(s, ST_ATTEMPTS, &p, "read attempts", &r)) == 0) {
		PG_ROWS(rows, r);
		rc = due__rows_attempts(&rows, tasks, n);
	}
	PQclear(r);
	free(b.p);
	return rc;
}

/*
** t->after: the parents of a task added after others (ST_AFTER_OF),
** ascending; left NULL when the edges are gone (never for a task that
** is not pruned) or do not number after_n.
*/
static int load_parents(due_store *s, due_task *t)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc, n;

	if (t->after_n <= 0)
		return 0;
	due__pg_int(&p, t->id);
	if ((rc = run(s, ST_AFTER_OF, &p, "read parents", &r)) < 0)
		return rc;
	n = PQntuples(r);
	if (n == t->after_n && !(t->after = malloc((size_t)n * sizeof(due_id))))
		rc = due__error_set(DUE_ENOMEM, "out of memory");
	for (int i = 0; rc == 0 && t->after && i < n; i++)
		t->after[i] = due__pg_col_int(r, i, 0);
	PQclear(r);
	return rc;
}

static int pg_get(due_store *s, due_task **out, due_id id)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_int(&p, id);
	if ((rc = run(s, ST_GET, &p, "get", &r)) < 0)
		return rc;
	PG_ROWS(rows, r);
	rc = due__rows_task_get(&rows, out, id);
	PQclear(r);
	if (rc == 0 && ((rc = load_attempts(s, *out, 1)) < 0 ||
			(rc = load_parents(s, *out)) < 0)) {
		due_task_free(*out);
		*out = NULL;
	}
	return rc;
}

static int pg_list(due_store *s, due_task_list **out, const due_list_opts *o)
{
	due_task_list *l = NULL;
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_text(&p, o->state >= 0 ? due_state_name((due_state)o->state)
				       : NULL);
	due__pg_text(&p, o->kind);
	due__pg_int(&p, o->after);
	due__pg_int(&p, o->limit);
	if ((rc = run(s,
		      o->held ? ST_LIST_HELD
		      : o->state >= 0
			  ? (enum stmt_id)(ST_LIST_SCHEDULED + o->state)
			  : ST_LIST,
		      &p, "list", &r)) < 0)
		return rc;
	if ((rc = tasks_of(r, &l)) == 0 && o->attempts && l->count)
		rc = load_attempts(s, l->items, l->count);
	PQclear(r);
	if (rc < 0) {
		due_task_list_free(l);
		return rc;
	}
	*out = l;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Operator                                                            */
/* ------------------------------------------------------------------ */

/* The error for an operator action on a task in the wrong state. */
static int wrong_state(const PGresult *r, int col, due_id id,
		       const char *action, const char *needed)
{
	return due__store_wrong_state(
	    id, action,
	    due__pg_col_null(r, 0, col) ? NULL : PQgetvalue(r, 0, col), needed);
}

/* DEAD -> SCHEDULED due now with a fresh budget; audited.  One statement. */
static int pg_retry(due_store *s, due_id id)
{
	due_pg_params p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_int(&p, id);
	rc = run(s, ST_RETRY, &p, "retry", &r);
	if (rc == DUE_ECONFLICT)
		return due__store_retry_conflict(id);
	if (rc < 0)
		return rc;
	if (due__pg_col_int(r, 0, 0) == 0)
		rc = wrong_state(r, 1, id, "retry", "DEAD");
	PQclear(r);
	return rc;
}

/*
** requeue and kill: one statement that writes only when the state allows
** it, closes the running attempt with `outcome`, audits and notifies.
** *final receives the state written.
*/
static int pg_operator(due_store *s, enum stmt_id sid, due_id id,
		       const char *action, const char *needed, due_state *final)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_int(&p, id);
	if ((rc = run(s, sid, &p, action, &r)) < 0)
		return rc;
	if (due__pg_col_null(r, 0, 0))
		rc = wrong_state(r, 1, id, action, needed);
	else
		rc = due__pg_col_state(r, 0, 0, final);
	PQclear(r);
	return rc;
}

static int pg_requeue(due_store *s, due_id id)
{
	due_state final = DUE_SCHEDULED;
	return pg_operator(s, ST_REQUEUE, id, "requeue", "CLAIMED", &final);
}

static int pg_kill(due_store *s, due_state *out, due_id id)
{
	return pg_operator(s, ST_KILL, id, "kill", "SCHEDULED, CLAIMED or DEAD",
			   out);
}

/* ------------------------------------------------------------------ */
/* Stats, prune                                                        */
/* ------------------------------------------------------------------ */

/*
** SCHEDULED, DONE and CANCELLED from ST_STATS' columns 1..6 (GATE_CTES):
** exact when counted below CAP, else the estimate (never below what a
** count that stopped at CAP saw), DONE's share from pg_stats, or from
** the rows counted when there are no statistics yet.
*/
static void stats_big(const PGresult *r, due_stats *out)
{
	double s_est = due__pg_col_f64(r, 0, 1);
	double f_est = due__pg_col_f64(r, 0, 3), share;
	bool s_n = !due__pg_col_null(r, 0, 2), f_n = !due__pg_col_null(r, 0, 4);
	int64_t fin = f_n ? due__pg_col_int(r, 0, 4) : 0;
	int64_t done = f_n ? due__pg_col_int(r, 0, 5) : 0;

	out->counts[DUE_SCHEDULED] = s_n ? due__pg_col_int(r, 0, 2) : 0;
	if (!s_n || out->counts[DUE_SCHEDULED] > 10000) {
		out->estimated |= 1u << DUE_SCHEDULED;
		if (s_est > (double)out->counts[DUE_SCHEDULED])
			out->counts[DUE_SCHEDULED] = (int64_t)(s_est + 0.5);
	}
	if (f_n && fin <= 10000) {
		out->counts[DUE_DONE] = done;
		out->counts[DUE_CANCELLED] = fin - done;
		return;
	}
	out->estimated |= (1u << DUE_DONE) | (1u << DUE_CANCELLED);
	share = !due__pg_col_null(r, 0, 6) ? due__pg_col_f64(r, 0, 6)
		: fin > 0		   ? (double)done / (double)fin
					   : 1.0;
	if (f_est < (double)fin)
		f_est = (double)fin;
	out->counts[DUE_DONE] = (int64_t)(f_est * share + 0.5);
	out->counts[DUE_CANCELLED] =
	    (int64_t)(f_est + 0.5) - out->counts[DUE_DONE];
}

/*
** Counts, due backlog and lateness percentiles in one statement (one
** snapshot); which counts are estimates: GATE_CTES.  Percentiles are
** percentile_disc, the same nearest-rank rule as the SQLite store.  -1
** when no claim happened in the window.
*/
static int pg_stats(due_store *s, due_stats *out)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_int(&p, DUE_STATS_WINDOW_US);
	if ((rc = run(s, ST_STATS, &p, "stats", &r)) < 0)
		return rc;
	out->now = due__pg_col_time(r, 0, 0);
	out->estimated = 0;
	stats_big(r, out);
	out->counts[DUE_CLAIMED] = due__pg_col_int(r, 0, 7);
	out->counts[DUE_DEAD] = due__pg_col_int(r, 0, 8);
	out->dead = out->counts[DUE_DEAD];
	out->due_unclaimed = due__pg_col_int(r, 0, 9);
	if (!due__pg_col_null(r, 0, 10))
		out->oldest_due_unclaimed_ms =
		    (out->now - due__pg_col_time(r, 0, 10)) / 1000;
	out->window_us = DUE_STATS_WINDOW_US;
	out->claims_window = due__pg_col_int(r, 0, 11);
	out->lateness_p50_us =
	    due__pg_col_null(r, 0, 12) ? -1 : due__pg_col_int(r, 0, 12);
	out->lateness_p99_us =
	    due__pg_col_null(r, 0, 13) ? -1 : due__pg_col_int(r, 0, 13);
	out->lateness_max_us =
	    due__pg_col_null(r, 0, 14) ? -1 : due__pg_col_int(r, 0, 14);
	PQclear(r);
	return 0;
}

/*
** Delete finished tasks with their history in batches of at most
** DUE_PRUNE_BATCH, oldest end first (due_task_finished), each batch its
** own statement and transaction, until a batch finds nothing or max_rows
** (0: no bound) are gone.  The deleting statement re-checks the state, so
** DEAD, SCHEDULED and CLAIMED are never touched.  A retention longer than
** the epoch deletes nothing.
*/
static int pg_prune(due_store *s, int64_t *deleted, int64_t older_than_us,
		    int64_t max_rows)
{
	const int64_t max_us = 1000LL * 366 * 86400 * 1000000; /* 1000 years */
	int64_t n, want;
	int rc;

	*deleted = 0;
	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	do {
		due_pg_params p = {0};
		PGresult *r;
		want = DUE_PRUNE_BATCH;
		if (max_rows > 0 && max_rows - *deleted < want)
			want = max_rows - *deleted;
		due__pg_int(&p,
			    older_than_us < max_us ? older_than_us : max_us);
		due__pg_int(&p, want);
		if ((rc = run(s, ST_PRUNE, &p, "prune", &r)) < 0)
			return rc;
		n = due__pg_col_int(r, 0, 0);
		*deleted += n;
		PQclear(r);
	} while (n > 0 && (max_rows == 0 || *deleted < max_rows));
	return 0;
}

/* ------------------------------------------------------------------ */
/* Schedules                                                           */
/* ------------------------------------------------------------------ */

static int pg_cron_get(due_store *s, due_cron_info **out, const char *name)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	*out = NULL;
	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_text(&p, name);
	if ((rc = run(s, ST_SCHED_GET, &p, "read schedule", &r)) < 0)
		return rc;
	PG_ROWS(rows, r);
	rc = due__rows_sched_get(&rows, out, name);
	PQclear(r);
	return rc;
}

static int pg_cron_list(due_store *s, due_cron_info_list **out)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	*out = NULL;
	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	if ((rc = run(s, ST_SCHED_LIST, &p, "list schedules", &r)) < 0)
		return rc;
	PG_ROWS(rows, r);
	rc = due__rows_sched_list(&rows, out);
	PQclear(r);
	return rc;
}

/* Insert or replace a definition; a replace keeps the firing history. */
static int pg_cron_put(due_store *s, const due_cron_def *d, due_time next_slot)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	due_submit it = {.kind = d->kind,
			 .payload = d->payload,
			 .payload_len = d->payload_len};

	if ((rc = pg_payloads_fit(&it, 1)) < 0 || (rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_text(&p, d->name);
	due__pg_text(&p, d->expr);
	due__pg_text(&p, d->kind);
	due__pg_text(&p, d->tz ? d->tz : "UTC");
	due__pg_bin(&p, d->payload, d->payload_len);
	due__pg_text(&p, due__misfire_name(d->misfire));
	due__pg_text(&p, due__overlap_name(d->overlap));
	due__pg_int(&p, d->max_attempts);
	due__pg_int(&p, d->backoff_us);
	due__pg_int(&p, d->backoff_cap_us);
	due__pg_time(&p, next_slot);
	if ((rc = run(s, ST_SCHED_PUT, &p, "save schedule", &r)) < 0)
		return rc;
	PQclear(r);
	return 0;
}

static int pg_cron_remove(due_store *s, const char *name)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_text(&p, name);
	if ((rc = run(s, ST_SCHED_REMOVE, &p, "remove schedule", &r)) < 0)
		return rc;
	if (PQntuples(r) == 0)
		rc = due__store_no_schedule(name);
	PQclear(r);
	return rc;
}

/*
** One scheduler step (store.h: cron_fire) in one transaction: the
** ST_SCHED_FIRE statement advances next_slot by compare-and-set, inserts
** the slot's task (notifying) and records it.  When the insert did nothing
** because a live task of the same (kind, key) exists that the statement's
** snapshot could not see (it committed while the statement ran), that
** task is looked up afterwards in the same transaction; when it has ended
** meanwhile, the step is rolled back and run again, as a keyed submit
** does.  A lost race writes nothing: *won = false.
*/
static int pg_cron_fire(due_store *s, const due_cron_fire *f, bool *won,
			due_id *task_id)
{
	const due_submit *t = f->task;
	int rc;

	*won = false;
	*task_id = 0;
	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	for (int tries = 0; tries < KEY_TRIES; tries++) {
		due_pg_params p = {0};
		PGresult *r;
		due_id id;

		due__pg_text(&p, f->name);
		due__pg_time(&p, f->expect);
		due__pg_time(&p, f->next);
		due__pg_int(&p, f->missed);
		if (f->missed > 0)
			due__pg_time(&p, f->last_missed);
		else
			due__pg_text(&p, NULL);
		due__pg_text(&p, t ? t->kind : NULL);
		if (t)
			due__pg_bin(&p, t->payload, t->payload_len);
		else
			due__pg_text(&p, NULL);
		if (t && t->opts.at != DUE_TIME_NONE)
			due__pg_time(&p, t->opts.at);
		else
			due__pg_text(&p, NULL);
		due__pg_int(&p, t ? t->opts.delay_us : 0);
		due__pg_int(&p, t ? t->opts.max_attempts : 0);
		due__pg_int(&p, t ? t->opts.backoff_us : 0);
		due__pg_int(&p, t ? t->opts.backoff_cap_us : 0);
		due__pg_text(&p, t ? t->opts.key : NULL);
		due__pg_time(&p, f->slot);
		if ((rc = due__pg_begin(s)) < 0)
			return rc;
		if ((rc = run(s, ST_SCHED_FIRE, &p, "fire schedule", &r)) < 0)
			goto fail;
		*won = due__pg_col_int(r, 0, 0) > 0;
		id = due__pg_col_int(r, 0, 1);
		PQclear(r);
		if (!*won) {
			due__pg_rollback(s); /* nothing was written */
			return 0;
		}
		if (t && id == 0) {
			due_pg_params q = {0};
			if ((rc = find_live(s, t, &id)) < 0)
				goto fail;
			if (id == 0) { /* it ended meanwhile: step again */
				due__pg_rollback(s);
				*won = false;
				continue;
			}
			due__pg_text(&q, f->name);
			due__pg_int(&q, id);
			if ((rc = run(s, ST_SCHED_LAST_TASK, &q,
				      "fire schedule", &r)) < 0)
				goto fail;
			PQclear(r);
		}
		if ((rc = due__pg_commit(s)) < 0) {
			*won = false;
			return rc;
		}
		*task_id = id;
		return 0;
	}
	return due__error_set(
	    DUE_EBUSY,
	    "postgres store: the live task of schedule '%s' keeps changing; "
	    "retry",
	    f->name);
fail:
	*won = false;
	due__pg_rollback(s);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Metrics, worker reports                                             */
/* ------------------------------------------------------------------ */

/* Most kinds listed in due_metrics (the first ones by name). */
#define METRICS_KINDS 1000

/*
** Task counts by kind and state (ST_METRICS_KINDS); kinds_estimated from
** its flags (s_exact, f_exact).
*/
static int metrics_kinds(due_store *s, due_metrics *out)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc, n;

	due__pg_int(&p, METRICS_KINDS);
	if ((rc = run(s, ST_METRICS_KINDS, &p, "metrics", &r)) < 0)
		return rc;
	n = PQntuples(r);
	if (n > 0 && due__pg_col_int(r, 0, 6) == 0)
		out->kinds_estimated |= 1u << DUE_SCHEDULED;
	if (n > 0 && due__pg_col_int(r, 0, 7) == 0)
		out->kinds_estimated |=
		    (1u << DUE_DONE) | (1u << DUE_CANCELLED);
	if (n > 0 && !(out->kinds = calloc((size_t)n, sizeof(*out->kinds)))) {
		PQclear(r);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	for (int i = 0; i < n && !due__pg_col_null(r, i, 0); i++) {
		due_kind_counts *k = &out->kinds[i];
		if (!(k->kind = due__pg_col_text(r, i, 0))) {
			PQclear(r);
			return due__error_set(DUE_ENOMEM, "out of memory");
		}
		for (int st = 0; st < DUE_STATE_COUNT; st++)
			k->counts[st] = due__pg_col_int(r, i, 1 + st);
		out->n_kinds++;
	}
	PQclear(r);
	return 0;
}

/* One row of ST_METRICS, by the grouping set it belongs to. */
static void metrics_row(const PGresult *r, int i, due_metrics *out)
{
	int64_t n = due__pg_col_int(r, i, 5);
	int64_t b;

	switch (due__pg_col_int(r, i, 0)) { /* GROUPING(lb, db, outcome, mi) */
	case 7:				    /* (lb) */
	case 11: {			    /* (db) */
		bool late = due__pg_col_int(r, i, 0) == 7;
		due_histogram *h = late ? &out->lateness : &out->duration;
		if (due__pg_col_null(r, i, late ? 1 : 2))
			break; /* the unended tries of the (db) set */
		b = due__pg_col_int(r, i, late ? 1 : 2);
		if (b < 0)
			b = 0;
		if (b > DUE_HIST_N)
			b = DUE_HIST_N;
		h->buckets[b] += n;
		h->count += n;
		break;
	}
	case 13: /* (outcome) */
		if ((b = due__outcome_parse(PQgetvalue(r, i, 3))) >= 0)
			out->outcomes[b] += n;
		break;
	case 14: /* (mi) */
		b = due__pg_col_int(r, i, 4);
		if (!due__pg_col_null(r, i, 4) && b >= 0 && b < 15)
			out->done_per_min[b] += n;
		break;
	case 15: /* () */
		out->lateness.sum_ms = due__pg_col_f64(r, i, 6);
		out->duration.sum_ms = due__pg_col_f64(r, i, 7);
		out->outcomes[DUE_OUT_REJECTED_STALE] =
		    due__pg_col_int(r, i, 8);
		out->workers = due__pg_col_int(r, i, 9);
		out->claim_queries = due__pg_col_int(r, i, 10);
		out->empty_claims = due__pg_col_int(r, i, 11);
		out->reclaim_queries = due__pg_col_int(r, i, 12);
		out->store_errors = due__pg_col_int(r, i, 13);
		out->n_schedules = (size_t)due__pg_col_int(r, i, 14);
		out->pruned = due__pg_col_int(r, i, 15);
		out->lease_lost = due__pg_col_int(r, i, 16);
		break;
	default: break;
	}
}

/*
** Everything of due_metrics but stats (the core's) in two statements: the
** counts by kind, and one scan of the attempts history (ST_METRICS).
*/
static int pg_metrics(due_store *s, due_metrics *out)
{
	due_pg_buf b = {0};
	due_pg_params p = {0};
	PGresult *r = NULL;
	int rc;

	out->n_kinds = 0;
	out->kinds = NULL;
	memset(&out->lateness, 0, sizeof(out->lateness));
	memset(&out->duration, 0, sizeof(out->duration));
	memset(out->outcomes, 0, sizeof(out->outcomes));
	memset(out->done_per_min, 0, sizeof(out->done_per_min));
	out->workers = out->claim_queries = out->empty_claims = 0;
	out->reclaim_queries = out->store_errors = 0;
	out->n_schedules = 0;
	out->kinds_estimated = 0;
	out->pruned = 0;
	out->window_us = DUE_METRICS_WINDOW_US;
	if ((rc = due__pg_ok(s)) < 0 || (rc = metrics_kinds(s, out)) < 0)
		goto done;
	/* The bounds negated, ascending (see ST_METRICS). */
	due__pg_arr_head(&b, DUE_PG_OID_FLOAT8, DUE_HIST_N);
	for (int i = DUE_HIST_N - 1; i >= 0; i--)
		due__pg_arr_f64(&b, -due_hist_bounds_ms[i]);
	if ((rc = due__pg_array(&p, &b)) < 0)
		goto done;
	due__pg_int(&p, DUE_HIST_N);
	due__pg_int(&p, DUE_METRICS_WINDOW_US);
	if ((rc = run(s, ST_METRICS, &p, "metrics", &r)) < 0)
		goto done;
	for (int i = 0; i < PQntuples(r); i++)
		metrics_row(r, i, out);
	PQclear(r);
done:
	free(b.p);
	if (rc < 0) {
		for (size_t i = 0; i < out->n_kinds; i++)
			free(out->kinds[i].kind);
		free(out->kinds);
		out->kinds = NULL;
		out->n_kinds = 0;
	}
	return rc;
}

/* Upsert the worker's row: started_at on first report, seen_at = now. */
static int pg_worker_report(due_store *s, const char *owner,
			    const due_worker_stats *st)
{
	int64_t v[DUE_WORKER_N_COUNTERS];
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__worker_counters(st, v);
	due__pg_text(&p, owner);
	for (int i = 0; i < DUE_WORKER_N_COUNTERS; i++)
		due__pg_int(&p, v[i]);
	due__pg_int(&p, st->pruned);
	if ((rc = run(s, ST_WORKER_REPORT, &p, "worker report", &r)) < 0)
		return rc;
	PQclear(r);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Discovery: upcoming tasks, LISTEN/NOTIFY                            */
/* ------------------------------------------------------------------ */

/*
** The ids and due times of tasks due before `until` (one indexed read
** that also reports the server's now and the next lease expiry).
*/
static int pg_upcoming(due_store *s, due_upcoming *out,
		       const char *const *kinds, size_t n_kinds, bool exclude,
		       due_time until, int limit)
{
	enum stmt_id id = !n_kinds  ? ST_UPC_ANY
			  : exclude ? ST_UPC_EXCLUDE
				    : ST_UPC_KINDS;
	due_pg_buf kb = {0};
	due_pg_params p = {0};
	PGresult *r = NULL;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_time(&p, until);
	due__pg_int(&p, limit);
	if ((!n_kinds || (rc = due__pg_texts(&p, &kb, kinds, n_kinds)) == 0) &&
	    (rc = run(s, id, &p, "upcoming", &r)) == 0) {
		PG_ROWS(rows, r);
		if (PQntuples(r) > 0) {
			out->now = due__pg_col_time(r, 0, 2);
			out->next_expiry = due__pg_col_time(r, 0, 3);
		}
		rc = due__rows_upcoming(&rows, out, limit);
	}
	PQclear(r);
	free(kb.p);
	return rc;
}

/*
** Wake-ups (pg_wire.c): LISTEN on this session, or on a direct connection
** to ?listen=, or behind a pooler without it a once-a-second read of what
** submits change.  *fd becomes readable when a submit may have happened;
** a reset connection re-listens and its socket may change: callers ask
** again each time.
*/
static int pg_listen(due_store *s, int *fd) { return due__pg_listen(s, fd); }

static int pg_listen_drain(due_store *s, int *count)
{
	return due__pg_listen_drain(s, count);
}

static int pg_notify(due_store *s) { return due__pg_notify(s); }

/* Finished tasks, for due_wait (pg_wire.c). */
static int pg_listen_done(due_store *s, int *fd)
{
	return due__pg_listen_done(s, fd);
}

static const char *const schemes[] = {"postgres", "postgresql", NULL};

/* Every method is pg_<method> (store.h lists them). */
/* ------------------------------------------------------------------ */
/* Kinds: settings and what they hold back                             */
/* ------------------------------------------------------------------ */

/* Apply the checked changes of *set (-1: keep) to the kind's row. */
static int pg_kind_put(due_store *s, const char *kind,
		       const due_kind_settings *set)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_text(&p, kind);
	due__pg_int(&p, set->paused);
	due__pg_int(&p, set->rate_n);
	due__pg_int(&p, set->rate_us);
	due__pg_int(&p, set->max_running);
	due__pg_int(&p, set->max_running_per_group);
	due__pg_int(&p, set->timeout_us);
	if ((rc = run(s, ST_KIND_PUT, &p, "save kind settings", &r)) < 0)
		return rc;
	PQclear(r);
	return 0;
}

/*
** ST_KIND_GET for one kind (or every kind: NULL) into *out, with the
** live counts.
*/
static int kinds_read(due_store *s, const char *kind, const char *group,
		      due_kind_info_list **out)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	*out = NULL;
	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_text(&p, kind);
	due__pg_text(&p, group);
	if ((rc = run(s, ST_KIND_GET, &p, "read kind settings", &r)) < 0)
		return rc;
	PG_ROWS(rows, r);
	rc = due__flow_kinds_of(out, &rows);
	PQclear(r);
	return rc;
}

static int pg_kind_get(due_store *s, due_kind_info **out, const char *kind,
		       const char *group)
{
	due_kind_info_list *l;
	int rc;

	*out = NULL;
	if ((rc = kinds_read(s, kind, group, &l)) < 0)
		return rc;
	return due__kind_info_take_one(out, l, kind);
}

static int pg_kind_list(due_store *s, due_kind_info_list **out)
{
	return kinds_read(s, NULL, NULL, out);
}

/* Forget the kind's settings and its rate log; wakes listeners. */
static int pg_kind_remove(due_store *s, const char *kind)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_text(&p, kind);
	if ((rc = run(s, ST_KIND_REMOVE, &p, "remove kind settings", &r)) < 0)
		return rc;
	if (due__pg_col_int(r, 0, 0) == 0)
		rc = due__store_no_kind(kind);
	PQclear(r);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Retention's lease, size                                             */
/* ------------------------------------------------------------------ */

/* store.h: lock_take.  One statement (ST_LOCK_TAKE), the server's clock. */
static int pg_lock_take(due_store *s, bool *held, const char *name,
			const char *owner, int64_t ttl_us)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	*held = false;
	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	due__pg_text(&p, name);
	due__pg_text(&p, owner);
	due__pg_int(&p, ttl_us);
	if ((rc = run(s, ST_LOCK_TAKE, &p, "take lock", &r)) < 0)
		return rc;
	*held = PQntuples(r) == 1;
	PQclear(r);
	return 0;
}

/* pg_total_relation_size() summed over the due_* tables (ST_BYTES). */
static int pg_bytes(due_store *s, int64_t *out)
{
	due_pg_params p = {0};
	PGresult *r;
	int rc;

	*out = 0;
	if ((rc = due__pg_ok(s)) < 0 ||
	    (rc = run(s, ST_BYTES, &p, "store size", &r)) < 0)
		return rc;
	*out = due__pg_col_int(r, 0, 0);
	PQclear(r);
	return 0;
}

#define OP(m) .m = pg_##m,
const due_store_ops due__store_pg = {
    .version = DUE_STORE_OPS_VERSION,
    .name = "postgres",
    .schemes = schemes,
    .caps = DUE_STORE_CAP_NOTIFY | DUE_STORE_CAP_TX_SUBMIT |
	    DUE_STORE_CAP_ADMIN | DUE_STORE_CAP_SQL | DUE_STORE_CAP_ROW_LOCKS |
	    DUE_STORE_CAP_STALL | DUE_STORE_CAP_PLAN,
    .admin = &due__store_pg_admin,
    DUE_STORE_METHODS(OP) DUE_STORE_NOTIFY_METHODS(OP)
	DUE_STORE_TX_SUBMIT_METHODS(OP)};
#undef OP
