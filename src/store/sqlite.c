/*
** sqlite.c - the embedded store: one SQLite file shared by many processes
** on one host.
**
** Concurrency model.  The file runs in WAL mode.  Every transition is one
** write transaction opened with BEGIN IMMEDIATE, which takes SQLite's single
** writer lock up front; inside it, reads and writes are serialized with every
** other process, so "check the predicate, then write" is atomic here.  Each
** predicate is nonetheless repeated in the WHERE clause of the writing
** statement (CONTRACT §9, River #1302), so the SQL states the rule by itself.
** Readers (get, list, stats) never block writers.
**
** Clock.  The store's clock is the host's wall clock, read after BEGIN
** IMMEDIATE has granted the lock, so the time used by a transition is
** ordered with the transitions before it.  All processes on the host share
** that clock (CONTRACT §3.1).  Times are integer microseconds.
**
** Durability.  synchronous=FULL by default: a COMMIT that returned has been
** fsynced, so an acknowledged add survives power loss.  `?sync=normal`
** trades that for speed: in WAL mode a process crash loses nothing, a power
** loss may lose the last commits (docs/internals/store.md).
**
** Idle cost.  claim and reclaim first look with a plain read (no lock, no
** write) and only open a write transaction when there is something to do.
**
** Flow control (docs/internals/flow.md).  A claim reads the due_kind rows
** under its write lock, serves each limited kind with exact counts, then
** fills the rest by priority with a loose index scan (see "The claim"
** below).  With no due_kind rows the extra cost is one empty read and one
** index probe per priority in use.
**
** Wake-ups.  Every transaction that may make work for another process (a
** submit, a retry, a requeue, a reclaim, a retry scheduled by fail)
** commits with due__sq_commit_wake, which touches the store's wake file;
** workers watch it with inotify (sqlite_conn.c).  A finish that releases
** a held child (run after) sets s->wake_pending, and its commit wakes
** them the same way.
**
** Run after (issue 38, docs/internals/store.md).  A task added after
** others (its parents) is held: SCHEDULED with due_at = HELD_AT, which no
** claim, due count or upcoming ever reaches, until every parent has
** ended; each edge is a due_after row (parent, child).  The release is
** part of the parent's finish, in its transaction (after_end): every path
** that moves a task to DONE, DEAD or CANCELLED calls it, and a parent
** without children pays one probe of due_after's primary key (a batch of
** completions folded into a claim, on a store without any edge, one seek
** for the whole batch: any_edge).  One
** writer at a time (BEGIN IMMEDIATE) means no finish can run between a
** submit's check of its parents and its insert.
**
** Layout.  This file holds the statements, the schema and the ops table;
** the connection under them (URL options, open, errors, the statement
** cache, transactions, the wake file, the row cursor) is sqlite_conn.c.
**
** Schema history (bump DUE_SCHEMA_VERSION in due.h, add a step to
** `steps` (due__migrate walks them), never edit a released step):
**   1  due_meta, due_task, due_attempt, due_audit and their indexes.
**   2  due_schedule (periodic schedules), due_worker (worker counters).
**   3  due_task and due_attempt rebuilt with their state and outcome
**      CHECKs spelled as OR chains (see schema_v3).
**   4  Flow control: due_task.priority, grp, timeout_us and the claim
**      indexes on priority; due_attempt rebuilt to admit TIMED_OUT;
**      due_kind, due_rate (see schema_v4).
**   5  Production scale: due_lock (retention's lease), due_worker.pruned,
**      one partial (id) index per state that has no bounded index yet
**      (the list by state, capped counts; see schema_v5).
**   6  due_task.claimed_at: the running try lives in its task row and its
**      attempt row is written once, when it ends (see schema_v6).
**   7  Fewer indexes on due_task: due_task_due dropped (its readers walk
**      due_task_claim one priority at a time), CANCELLED's and DEAD's
**      (id) indexes merged into one (see schema_v7).
**   8  No change here: version 8 makes PostgreSQL and MySQL stores run
**      `due init` for their fixed due_schedule() routine (pg.c); the
**      step records the version both stores share.
**   9  No change here: version 9 makes PostgreSQL and MySQL stores run
**      `due init` for their due_reschedule() routine (issue 38).
**  10  No change here: version 10 gives PostgreSQL's due_schedule() and
**      MySQL's routines on_key (issue 38).
**  11  Run after (issue 38): due_task.after_n, after_left, after_any_end,
**      after_at, after_delay_us; due_after, the edges (parent, child);
**      due_task_held (see schema_v11 and "Run after" below).
*/
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "store/flow.h"
#include "store/row.h"
#include "store/sqlite_conn.h"
#include "store/store.h"

enum stmt_id {
	ST_INSERT,
	ST_FIND_KEY,
	ST_PEEK_DUE,
	ST_CLAIM_ID,
	ST_CLAIM_ONE,
	ST_CLAIM_MANY,
	ST_CLOSE_MANY,
	ST_DONE_MANY, /* + k - 1: k tries DONE (done_stmt), k = 1..DONE_CHUNK */
	ST_DONE_MANY_END = ST_DONE_MANY + 16 - 1,
	ST_ATTEMPT_CLOSE,
	ST_ATTEMPT_RECLAIM,
	ST_EXTEND,
	ST_STATE_OF,
	ST_COMPLETE,
	ST_COMPLETE_CANCEL,
	ST_LATE_MARK,
	ST_FAIL,
	ST_PEEK_EXPIRED,
	ST_RECLAIM,
	ST_CANCEL_SCHED,
	ST_CANCEL_REQ,
	ST_GET,
	ST_ATTEMPTS,
	ST_LIST,
	ST_LIST_STATE, /* + due_state: one per state */
	ST_LIST_STATE_END = ST_LIST_STATE + DUE_STATE_COUNT - 1,
	ST_RETRY,
	ST_REQUEUE,
	ST_KILL,
	ST_AUDIT,
	ST_COUNT_STATE, /* + due_state */
	ST_COUNT_STATE_END = ST_COUNT_STATE + DUE_STATE_COUNT - 1,
	ST_KINDS_STATE, /* + due_state */
	ST_KINDS_STATE_END = ST_KINDS_STATE + DUE_STATE_COUNT - 1,
	ST_SPAN_STATE, /* + due_state: SCHEDULED, DONE, CANCELLED only */
	ST_SPAN_STATE_END = ST_SPAN_STATE + DUE_STATE_COUNT - 1,
	ST_ID_RANGE,
	ST_PROBE,
	ST_SCHED_KIND_NEXT,
	ST_SCHED_KIND_COUNT,
	ST_DUE_UNCLAIMED,
	ST_LATENESS,
	ST_PRUNE_ATTEMPTS,
	ST_PRUNE_AUDIT,
	ST_PRUNE_TASKS,
	ST_SCHED_GET,
	ST_SCHED_LIST,
	ST_SCHED_PUT,
	ST_SCHED_DEL,
	ST_SCHED_CAS,
	ST_SCHED_DONE,
	ST_WORKER_REPORT,
	ST_M_LATE,
	ST_M_DUR,
	ST_M_OUTCOMES,
	ST_M_STALE,
	ST_M_PERMIN,
	ST_M_WORKERS,
	ST_M_SCHED,
	ST_FLOW_KINDS,
	ST_PRIO_NEXT,
	ST_K_PICK,
	ST_K_RUNNING,
	ST_K_RATE,
	ST_K_DUE,
	ST_K_GROUPS,
	ST_K_GROUP_RUNNING,
	ST_RATE_LOG,
	ST_RATE_TRIM,
	ST_KIND_HELD,
	ST_ID_KIND,
	ST_KIND_GET,
	ST_KIND_LIST,
	ST_KIND_NEW,
	ST_KIND_SET,
	ST_KIND_DEL,
	ST_RATE_DEL,
	ST_LOCK_TAKE,
	ST_RESCHEDULE,
	ST_KEY_MOVE,
	ST_KEY_GIVE_UP,
	ST_INSERT_AFTER,
	ST_EDGE_ADD,
	ST_PARENTS,
	ST_CHILDREN,
	ST_EDGES_END,
	ST_HELD_OF,
	ST_COUNT_DOWN,
	ST_RELEASE,
	ST_CANCEL_HELD,
	ST_LIST_HELD,
	ST_PRUNE_AFTER,
	ST_ANY_EDGE,
	ST_COUNT
};

/*
** A held task's due_at: core's DUE_TIME_LAST, 9999-12-31T23:59:59.999999Z,
** after every time a submit or a reschedule may ask for (src/core/db.c),
** so no claim (due_at <= now), due count or upcoming read reaches it.
*/
#define HELD_AT 253402300799999999LL

/* Where a task has used its attempt budget (store.h). */
#define USED_UP "attempt - attempt_base >= max_attempts"

/*
** The tasks one prune batch deletes: finished before the cutoff ?1,
** oldest end first, ?2 of them (through due_task_finished).  The three
** deletes of a batch run under one write lock, so they pick the same set.
*/
#define PRUNE_PICK                                                             \
	"SELECT id FROM due_task WHERE state IN ('DONE', 'CANCELLED')"         \
	" AND updated_at < ?1 ORDER BY updated_at, id LIMIT ?2"

/*
** A task's running try, spelled as its attempt row would be: the task row
** holds it (worker = lease_owner, claimed_at, due_at) until it ends.
*/
#define RUNNING_TRY                                                            \
	"id, attempt, lease_owner, claimed_at, due_at, NULL, 'RUNNING', NULL," \
	" NULL"

/*
** Tries claimed since ?1 (the metrics window): the ended ones through
** due_attempt_claimed, the running ones through CLAIMED's lease index
** (what runs now).  Followed by " AND ..." or " GROUP BY ...".
*/
#define IN_WINDOW                                                              \
	" FROM (SELECT claimed_at, due_at, ended_at, outcome, late_commit"     \
	" FROM due_attempt WHERE claimed_at >= ?1 UNION ALL SELECT"            \
	" claimed_at, due_at, NULL, 'RUNNING', NULL FROM due_task INDEXED BY"  \
	" due_task_lease WHERE state = 'CLAIMED' AND claimed_at >= ?1)"        \
	" WHERE 1"

/*
** The attempt row of a try that ends: its task row's, before the update.
** OR FAIL: an INSERT ... SELECT may write several rows, so with the default
** ABORT SQLite opens a statement journal for each run to undo the rows
** already written on an error (18 % of this statement's instructions); an
** error here rolls the whole transaction back anyway.
*/
#define CLOSE_INTO                                                             \
	"INSERT OR FAIL INTO due_attempt (task_id, attempt, worker,"           \
	" claimed_at, due_at, ended_at, outcome, error)"

/*
** After CLOSE_INTO's SELECT: a try claimed by a worker still running the
** schema-5 code during an upgrade has its RUNNING row already (and no
** claimed_at in its task row: the SELECT falls back to updated_at); its
** end, by whichever worker, finishes that row instead of failing on its
** key, so a rolling upgrade cannot strand the task.
*/
#define CLOSE_UPSERT                                                           \
	" ON CONFLICT (task_id, attempt) DO UPDATE SET"                        \
	" ended_at = excluded.ended_at, outcome = excluded.outcome,"           \
	" error = excluded.error"

/* A due_kind row that keeps its kind out of the plain claim. */
#define FLOW_KIND                                                              \
	"(k.paused <> 0 OR k.rate_n IS NOT NULL OR k.max_running IS NOT NULL"  \
	" OR k.max_running_per_group IS NOT NULL)"

/*
** The distinct priorities of SCHEDULED tasks, lowest first, as rows of
** pr(p) (a last NULL row ends them): one seek on due_task_claim each.
** Since version 7 there is no index on due_at alone; what reads SCHEDULED
** tasks in due order walks each priority's range of due_task_claim.
*/
#define PRIORITIES                                                             \
	"WITH RECURSIVE pr(p) AS (SELECT min(priority) FROM due_task"          \
	" INDEXED BY due_task_claim WHERE state = 'SCHEDULED' UNION ALL"       \
	" SELECT (SELECT min(priority) FROM due_task INDEXED BY"               \
	" due_task_claim WHERE state = 'SCHEDULED' AND priority > pr.p)"       \
	" FROM pr WHERE pr.p IS NOT NULL) "

/* One state's page in id order, through the index named due_task_<ix>. */
#define LIST_STATE(ix, state)                                                  \
	"SELECT " DUE_TASK_COLS " FROM due_task INDEXED BY due_task_" ix       \
	" WHERE state = '" state "' AND (?2 IS NULL OR kind = ?2) AND id > ?3" \
	" ORDER BY id LIMIT ?4"

/* One state's rows counted on its index alone: all, or at most ?1. */
#define COUNT_ALL(ix, state)                                                   \
	"SELECT count(*) FROM due_task INDEXED BY due_task_" ix                \
	" WHERE state = '" state "'"
#define COUNT_CAPPED(ix, state)                                                \
	"SELECT count(*) FROM (SELECT 1 FROM due_task INDEXED BY due_task_" ix \
	" WHERE state = '" state "' LIMIT ?1)"

/* The lowest and highest id of one state, two seeks on its index. */
#define SPAN_OF(ix, state)                                                     \
	"SELECT (SELECT min(id) FROM due_task INDEXED BY due_task_" ix         \
	" WHERE state = '" state "'), (SELECT max(id) FROM due_task INDEXED"   \
	" BY due_task_" ix " WHERE state = '" state "')"

/* One state's tasks per kind, at most ?1 of them read. */
#define KINDS_OF(ix, state)                                                    \
	"SELECT kind, count(*) FROM (SELECT kind FROM due_task INDEXED BY"     \
	" due_task_" ix " WHERE state = '" state "' LIMIT ?1) GROUP BY kind"

static const char *const sql_text[ST_COUNT] = {
    [ST_INSERT] =
	"INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"
	" backoff_us, backoff_cap_us, key, created_at, updated_at, priority,"
	" grp, timeout_us)"
	" VALUES (?1, ?2, 'SCHEDULED', ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10, "
	"?11)"
	" ON CONFLICT (kind, key) WHERE key IS NOT NULL AND"
	" state IN ('SCHEDULED', 'CLAIMED') DO NOTHING",
    [ST_FIND_KEY] = "SELECT id, state = 'CLAIMED' FROM due_task"
		    " WHERE kind = ?1 AND key = ?2"
		    " AND state IN ('SCHEDULED', 'CLAIMED')",
    [ST_PEEK_DUE] = PRIORITIES
    "SELECT 1 FROM pr WHERE pr.p IS NOT NULL AND EXISTS (SELECT 1"
    " FROM due_task INDEXED BY due_task_claim WHERE state = 'SCHEDULED'"
    " AND priority = pr.p AND due_at <= ?1) LIMIT 1",
    [ST_CLAIM_ID] =
	"UPDATE due_task SET state = 'CLAIMED', attempt = attempt + 1,"
	" lease_owner = ?1, lease_until = ?2 + ?3, updated_at = ?2,"
	" claimed_at = ?2"
	" WHERE id = ?4 AND state = 'SCHEDULED' AND due_at <= ?2"
	" RETURNING " DUE_TASK_COLS,
    [ST_CLAIM_ONE] =
	"UPDATE due_task SET state = 'CLAIMED', attempt = attempt + 1,"
	" lease_owner = ?1, lease_until = ?2, updated_at = ?3, claimed_at = ?3"
	" WHERE id = ?4 AND state = 'SCHEDULED'",
    /* the same for the ids of the JSON array ?4 (claim_picked) */
    [ST_CLAIM_MANY] =
	"UPDATE due_task SET state = 'CLAIMED', attempt = attempt + 1,"
	" lease_owner = ?1, lease_until = ?2, updated_at = ?3, claimed_at = ?3"
	" WHERE id IN (SELECT value FROM json_each(?4)) AND state = "
	"'SCHEDULED'",
    /* the running tries of the JSON array ?1 of [id, attempt] end at ?2
       as ST_ATTEMPT_CLOSE ends one (?3 .. ?6: its ?4 .. ?7), each looked
       up by primary key (complete_many) */
    [ST_CLOSE_MANY] = CLOSE_INTO
    " SELECT t.id, t.attempt, t.lease_owner,"
    " coalesce(t.claimed_at, t.updated_at), t.due_at, ?2,"
    " CASE WHEN t.cancel_requested THEN ?5 ELSE ?3 END,"
    " CASE WHEN t.cancel_requested THEN ?6 ELSE ?4 END"
    " FROM json_each(?1) AS j CROSS JOIN due_task AS t"
    " ON t.id = j.value ->> 0"
    " WHERE t.state = 'CLAIMED' AND t.attempt = j.value ->> 1" CLOSE_UPSERT,
    /* the running try of task ?1 (attempt ?2, or any when NULL) ends at
       ?3: outcome ?4 and error ?5, or ?6 and ?7 when a cancel was asked */
    [ST_ATTEMPT_CLOSE] = CLOSE_INTO
    " SELECT id, attempt, lease_owner, coalesce(claimed_at, updated_at),"
    " due_at, ?3, CASE WHEN cancel_requested THEN ?6 ELSE ?4 END,"
    " CASE WHEN cancel_requested THEN ?7 ELSE ?5 END FROM due_task"
    " WHERE id = ?1 AND state = 'CLAIMED' AND (?2 IS NULL OR attempt = "
    "?2)" CLOSE_UPSERT,
    /* the tries ST_RECLAIM ends, picked as it picks them */
    [ST_ATTEMPT_RECLAIM] = CLOSE_INTO
    " SELECT id, attempt, lease_owner, coalesce(claimed_at, updated_at),"
    " due_at, ?1, 'LEASE_EXPIRED', 'lease expired' FROM due_task"
    " WHERE id IN (SELECT id FROM due_task WHERE state = 'CLAIMED'"
    "   AND lease_until < ?1 ORDER BY lease_until LIMIT 1000)"
    " AND state = 'CLAIMED' AND lease_until < ?1" CLOSE_UPSERT,
    [ST_EXTEND] = "UPDATE due_task SET lease_until = ?3 + ?4, updated_at = ?3"
		  " WHERE id = ?1 AND attempt = ?2 AND state = 'CLAIMED'"
		  " AND cancel_requested = 0 AND lease_until >= ?3",
    [ST_STATE_OF] =
	"SELECT state, attempt, cancel_requested FROM due_task WHERE id = ?1",
    [ST_COMPLETE] =
	"UPDATE due_task SET state = 'DONE', result = ?3, last_error = NULL,"
	" lease_owner = NULL, lease_until = NULL, updated_at = ?4"
	" WHERE id = ?1 AND attempt = ?2 AND state = 'CLAIMED'"
	" AND cancel_requested = 0",
    [ST_COMPLETE_CANCEL] =
	"UPDATE due_task SET state = 'CANCELLED', lease_owner = NULL,"
	" lease_until = NULL, updated_at = ?3"
	" WHERE id = ?1 AND attempt = ?2 AND state = 'CLAIMED'"
	" AND cancel_requested = 1",
    [ST_LATE_MARK] = "UPDATE due_attempt SET late_commit = 'REJECTED_STALE'"
		     " WHERE task_id = ?1 AND attempt = ?2",
    [ST_FAIL] =
	"UPDATE due_task SET"
	" state = CASE WHEN cancel_requested THEN 'CANCELLED'"
	"   WHEN " USED_UP " THEN 'DEAD' ELSE 'SCHEDULED' END,"
	" due_at = CASE WHEN cancel_requested OR " USED_UP " THEN due_at"
	"   ELSE ?3 + due_backoff(backoff_us, backoff_cap_us,"
	"   attempt - attempt_base) END,"
	" last_error = ?4, lease_owner = NULL, lease_until = NULL,"
	" updated_at = ?3"
	" WHERE id = ?1 AND attempt = ?2 AND state = 'CLAIMED'"
	" RETURNING state",
    [ST_PEEK_EXPIRED] =
	"SELECT min(lease_until) FROM due_task WHERE state = 'CLAIMED'",
    [ST_RECLAIM] =
	"UPDATE due_task SET"
	" state = CASE WHEN cancel_requested THEN 'CANCELLED'"
	"   WHEN " USED_UP " THEN 'DEAD' ELSE 'SCHEDULED' END,"
	" due_at = CASE WHEN cancel_requested OR " USED_UP " THEN due_at"
	"   ELSE ?1 END,"
	" last_error = 'lease expired (held by ' || lease_owner || ')',"
	" lease_owner = NULL, lease_until = NULL, updated_at = ?1"
	" WHERE id IN (SELECT id FROM due_task WHERE state = 'CLAIMED'"
	"   AND lease_until < ?1 ORDER BY lease_until LIMIT 1000)"
	" AND state = 'CLAIMED' AND lease_until < ?1"
	" RETURNING id, attempt, state",
    /* a held task no longer waits (after_left > 0 only while held) */
    [ST_CANCEL_SCHED] =
	"UPDATE due_task SET state = 'CANCELLED', after_left = 0,"
	" updated_at = ?2 WHERE id = ?1 AND state = 'SCHEDULED'",
    [ST_CANCEL_REQ] =
	"UPDATE due_task SET cancel_requested = 1, updated_at = ?2"
	" WHERE id = ?1 AND state = 'CLAIMED'",
    [ST_GET] = "SELECT " DUE_TASK_COLS " FROM due_task WHERE id = ?1",
    [ST_ATTEMPTS] =
	"SELECT " DUE_ATTEMPT_COLS " FROM due_attempt WHERE task_id = ?1"
	" UNION ALL SELECT " RUNNING_TRY " FROM due_task"
	" WHERE id = ?1 AND state = 'CLAIMED' AND NOT EXISTS (SELECT 1 FROM"
	" due_attempt WHERE task_id = ?1 AND attempt = due_task.attempt)"
	" ORDER BY attempt",
    /* the list walks the primary key, or one state's partial (id) index
       when a state is asked (`due ls --state DEAD` among millions is a
       range); CLAIMED's is its lease index, sorted: what runs */
    [ST_LIST] = "SELECT " DUE_TASK_COLS " FROM due_task"
		" WHERE (?2 IS NULL OR kind = ?2) AND id > ?3"
		" ORDER BY id LIMIT ?4",
    [ST_LIST_STATE + DUE_SCHEDULED] = LIST_STATE("sched_id", "SCHEDULED"),
    [ST_LIST_STATE + DUE_CLAIMED] = LIST_STATE("lease", "CLAIMED"),
    [ST_LIST_STATE + DUE_DONE] = LIST_STATE("done_id", "DONE"),
    [ST_LIST_STATE + DUE_CANCELLED] = LIST_STATE("ended_id", "CANCELLED"),
    [ST_LIST_STATE + DUE_DEAD] = LIST_STATE("ended_id", "DEAD"),
    [ST_RETRY] =
	"UPDATE due_task SET state = 'SCHEDULED', due_at = ?2,"
	" attempt_base = attempt, cancel_requested = 0, updated_at = ?2"
	" WHERE id = ?1 AND state = 'DEAD'",
    [ST_REQUEUE] =
	"UPDATE due_task SET"
	" state = CASE WHEN cancel_requested THEN 'CANCELLED'"
	"   ELSE 'SCHEDULED' END,"
	" due_at = ?2, lease_owner = NULL, lease_until = NULL, updated_at = ?2"
	" WHERE id = ?1 AND state = 'CLAIMED' RETURNING attempt, state",
    [ST_KILL] = "UPDATE due_task SET"
		" state = CASE WHEN state = 'DEAD' OR cancel_requested THEN"
		"   'CANCELLED' ELSE 'DEAD' END,"
		" last_error = coalesce(last_error || '; ', '') || CASE WHEN"
		"   state = 'DEAD' THEN 'dead letter dismissed by operator'"
		"   ELSE 'killed by operator' END,"
		" lease_owner = NULL, lease_until = NULL, after_left = 0,"
		" updated_at = ?2"
		" WHERE id = ?1 AND state IN ('SCHEDULED', 'CLAIMED', 'DEAD')"
		" RETURNING attempt, state",
    [ST_AUDIT] = "INSERT INTO due_audit (task_id, at, action, detail)"
		 " VALUES (?1, ?2, ?3, ?4)",
    /* stats: CLAIMED and DEAD exact (bounded by what runs and what is
       dead), the others capped at ?1 rows (COUNT_CAP) */
    [ST_COUNT_STATE + DUE_SCHEDULED] = COUNT_CAPPED("sched_id", "SCHEDULED"),
    [ST_COUNT_STATE + DUE_CLAIMED] = COUNT_ALL("lease", "CLAIMED"),
    [ST_COUNT_STATE + DUE_DONE] = COUNT_CAPPED("done_id", "DONE"),
    [ST_COUNT_STATE + DUE_CANCELLED] = COUNT_CAPPED("ended_id", "CANCELLED"),
    [ST_COUNT_STATE + DUE_DEAD] = COUNT_ALL("ended_id", "DEAD"),
    /* metrics: per kind, read only when the state's count is exact */
    [ST_KINDS_STATE + DUE_SCHEDULED] = KINDS_OF("kind_claim", "SCHEDULED"),
    [ST_KINDS_STATE + DUE_CLAIMED] = KINDS_OF("lease", "CLAIMED"),
    [ST_KINDS_STATE + DUE_DONE] = KINDS_OF("done_id", "DONE"),
    [ST_KINDS_STATE + DUE_CANCELLED] = KINDS_OF("ended_id", "CANCELLED"),
    [ST_KINDS_STATE + DUE_DEAD] = KINDS_OF("ended_id", "DEAD"),
    /* the size probe before a capped count (counts_read) */
    [ST_SPAN_STATE + DUE_SCHEDULED] = SPAN_OF("sched_id", "SCHEDULED"),
    [ST_SPAN_STATE + DUE_DONE] = SPAN_OF("done_id", "DONE"),
    [ST_SPAN_STATE + DUE_CANCELLED] = SPAN_OF("ended_id", "CANCELLED"),
    /* the estimator's probes (estimate_read) */
    [ST_ID_RANGE] = "SELECT (SELECT min(id) FROM due_task),"
		    " (SELECT max(id) FROM due_task)",
    /* a big SCHEDULED per kind: the next kind (a loose scan), its count */
    [ST_SCHED_KIND_NEXT] =
	"SELECT kind FROM due_task INDEXED BY due_task_kind_claim"
	" WHERE state = 'SCHEDULED' AND kind > ?1 ORDER BY kind LIMIT 1",
    [ST_SCHED_KIND_COUNT] =
	"SELECT count(*) FROM (SELECT 1 FROM due_task INDEXED BY"
	" due_task_kind_claim WHERE state = 'SCHEDULED' AND kind = ?1"
	" LIMIT ?2)",
    /* one pass of probes: ?1 is a JSON array of rowids, each looked up by
       primary key in the array's order (one statement, not PROBE_PASS) */
    [ST_PROBE] = "SELECT t.state, t.kind FROM json_each(?1) AS j"
		 " CROSS JOIN due_task AS t ON t.id = j.value",
    /* per priority in use, the count walks due_task_claim's overdue
       entries only (no aggregate but count per entry) and the oldest is
       one seek */
    [ST_DUE_UNCLAIMED] = PRIORITIES
    "SELECT coalesce(sum((SELECT count(*) FROM due_task INDEXED BY"
    " due_task_claim WHERE state = 'SCHEDULED' AND priority = pr.p"
    " AND due_at <= ?1)), 0), min((SELECT min(due_at) FROM due_task"
    " INDEXED BY due_task_claim WHERE state = 'SCHEDULED'"
    " AND priority = pr.p)) FROM pr WHERE pr.p IS NOT NULL",
    [ST_LATENESS] = "SELECT claimed_at - due_at" IN_WINDOW,
    /* sorted by lateness() */
    [ST_PRUNE_ATTEMPTS] =
	"DELETE FROM due_attempt WHERE task_id IN (" PRUNE_PICK ")",
    [ST_PRUNE_AUDIT] =
	"DELETE FROM due_audit WHERE task_id IN (" PRUNE_PICK ")",
    [ST_SCHED_GET] =
	"SELECT " DUE_SCHED_COLS " FROM due_schedule WHERE name = ?1",
    [ST_SCHED_LIST] =
	"SELECT " DUE_SCHED_COLS " FROM due_schedule ORDER BY name",
    [ST_SCHED_PUT] =
	"INSERT INTO due_schedule (name, " DUE_SCHED_DEF_COLS ","
	" created_at, updated_at)"
	" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12)"
	" ON CONFLICT (name) DO UPDATE SET " DUE_SCHED_DEF_SET ","
	" updated_at = excluded.updated_at",
    [ST_SCHED_DEL] = "DELETE FROM due_schedule WHERE name = ?1",
    [ST_SCHED_CAS] = "UPDATE due_schedule SET next_slot = ?2, updated_at = ?3"
		     " WHERE name = ?1 AND next_slot = ?4",
    [ST_SCHED_DONE] =
	"UPDATE due_schedule SET last_slot = coalesce(?2, last_slot),"
	" last_task = coalesce(?3, last_task), fired = fired + ?4,"
	" missed = missed + ?5, last_missed = coalesce(?6, last_missed)"
	" WHERE name = ?1",
    [ST_WORKER_REPORT] =
	"INSERT INTO due_worker (owner, started_at, "
	"seen_at, " DUE_WORKER_COUNTER_COLS ", pruned)"
	" VALUES (?1, ?2, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"
	" ?14) ON CONFLICT (owner) DO UPDATE SET seen_at = "
	"excluded.seen_at, " DUE_WORKER_COUNTER_SET
	", pruned = excluded.pruned",
    [ST_M_LATE] = "SELECT due_bucket(claimed_at - due_at) AS b, count(*),"
		  " sum(claimed_at - due_at)" IN_WINDOW " GROUP BY b",
    [ST_M_DUR] = "SELECT due_bucket(ended_at - claimed_at) AS b, count(*),"
		 " sum(ended_at - claimed_at)" IN_WINDOW
		 " AND ended_at IS NOT NULL GROUP BY b",
    [ST_M_OUTCOMES] = "SELECT outcome, count(*)" IN_WINDOW " GROUP BY outcome",
    [ST_M_STALE] =
	"SELECT count(*)" IN_WINDOW " AND late_commit = 'REJECTED_STALE'",
    [ST_M_PERMIN] = "SELECT (?2 - ended_at) / 60000000 AS m, count(*)" IN_WINDOW
		    " AND outcome = 'DONE' AND ended_at > ?2 - 900000000"
		    " AND ended_at <= ?2 GROUP BY m",
    [ST_M_WORKERS] =
	"SELECT count(*), coalesce(sum(claim_queries), 0),"
	" coalesce(sum(empty_claims), 0), coalesce(sum(reclaim_queries), 0),"
	" coalesce(sum(store_errors), 0), coalesce(sum(pruned), 0),"
	" coalesce(sum(lease_lost), 0)"
	" FROM due_worker WHERE seen_at >= ?1",
    [ST_M_SCHED] = "SELECT count(*) FROM due_schedule",
    [ST_PRUNE_TASKS] =
	"DELETE FROM due_task WHERE id IN (" PRUNE_PICK ")"
	" AND state IN ('DONE', 'CANCELLED') AND updated_at < ?1",
    /* flow control (docs/internals/flow.md) */
    [ST_FLOW_KINDS] = "SELECT kind, paused, rate_n, rate_us, max_running,"
		      " max_running_per_group, timeout_us FROM due_kind"
		      " ORDER BY kind",
    [ST_PRIO_NEXT] = "SELECT min(priority) FROM due_task"
		     " WHERE state = 'SCHEDULED' AND priority > ?1",
    [ST_K_PICK] = "SELECT " DUE_TASK_COLS " FROM due_task"
		  " WHERE kind = ?1 AND state = 'SCHEDULED' AND due_at <= ?2"
		  " ORDER BY priority, due_at",
    [ST_K_RUNNING] = "SELECT count(*) FROM due_task WHERE state = 'CLAIMED'"
		     " AND kind = ?1 AND lease_until >= ?2",
    [ST_K_RATE] = "SELECT count(*), min(at) FROM due_rate"
		  " WHERE kind = ?1 AND at > ?2",
    [ST_K_DUE] = "SELECT count(*) FROM due_task WHERE kind = ?1"
		 " AND state = 'SCHEDULED' AND due_at <= ?2",
    [ST_K_GROUPS] =
	"SELECT grp, count(*) FROM due_task WHERE state = 'CLAIMED'"
	" AND kind = ?1 AND grp IS NOT NULL AND lease_until >= ?2 GROUP BY grp",
    [ST_K_GROUP_RUNNING] =
	"SELECT count(*) FROM due_task WHERE state = 'CLAIMED'"
	" AND kind = ?1 AND grp = ?2 AND lease_until >= ?3",
    [ST_RATE_LOG] = "INSERT INTO due_rate (kind, at) VALUES (?1, ?2)",
    [ST_RATE_TRIM] = "DELETE FROM due_rate WHERE kind = ?1 AND at <= ?2",
    [ST_KIND_HELD] =
	"UPDATE due_kind SET held_rate = held_rate + ?2,"
	" held_running = held_running + ?3, held_group = held_group + ?4"
	" WHERE kind = ?1",
    [ST_ID_KIND] = "SELECT kind, grp FROM due_task WHERE id = ?1"
		   " AND state = 'SCHEDULED' AND due_at <= ?2",
    [ST_KIND_GET] = "SELECT " DUE_KIND_COLS " FROM due_kind WHERE kind = ?1",
    [ST_KIND_LIST] = "SELECT " DUE_KIND_COLS " FROM due_kind ORDER BY kind",
    [ST_KIND_NEW] = "INSERT INTO due_kind (kind, updated_at) VALUES (?1, ?2)"
		    " ON CONFLICT (kind) DO NOTHING",
    [ST_KIND_SET] =
	"UPDATE due_kind SET"
	" paused = CASE WHEN ?2 < 0 THEN paused ELSE ?2 END,"
	" rate_n = CASE WHEN ?3 < 0 THEN rate_n WHEN ?3 = 0 THEN NULL"
	"   ELSE ?3 END,"
	" rate_us = CASE WHEN ?3 < 0 THEN rate_us WHEN ?3 = 0 THEN NULL"
	"   ELSE ?4 END,"
	" max_running = CASE WHEN ?5 < 0 THEN max_running WHEN ?5 = 0"
	"   THEN NULL ELSE ?5 END,"
	" max_running_per_group = CASE WHEN ?6 < 0 THEN max_running_per_group"
	"   WHEN ?6 = 0 THEN NULL ELSE ?6 END,"
	" timeout_us = CASE WHEN ?7 < 0 THEN timeout_us WHEN ?7 = 0 THEN NULL"
	"   ELSE ?7 END,"
	" updated_at = ?8 WHERE kind = ?1",
    [ST_KIND_DEL] = "DELETE FROM due_kind WHERE kind = ?1",
    [ST_RATE_DEL] = "DELETE FROM due_rate WHERE kind = ?1",
    /* issue 15: retention's lease */
    [ST_LOCK_TAKE] =
	"INSERT INTO due_lock (name, owner, until) VALUES (?1, ?2, ?3 + ?4)"
	" ON CONFLICT (name) DO UPDATE SET owner = excluded.owner,"
	" until = excluded.until"
	" WHERE due_lock.owner = excluded.owner OR due_lock.until <= ?3",
    /* issue 38: the due time ?2, the payload ?4 when ?3, re-checked; a
       held task keeps HELD_AT and takes the time asked as its own (?6
       the instant or NULL, ?7 the delay), applied at its release */
    [ST_RESCHEDULE] =
	"UPDATE due_task SET due_at = CASE WHEN after_left > 0 THEN due_at"
	" ELSE ?2 END, after_at = CASE WHEN after_left > 0 THEN ?6"
	" ELSE after_at END, after_delay_us = CASE WHEN after_left > 0"
	" THEN ?7 ELSE after_delay_us END, payload = CASE WHEN ?3 THEN ?4"
	" ELSE payload END, updated_at = ?5 WHERE id = ?1"
	" AND state = 'SCHEDULED'",
    /* on_key replace (?5 = 0) or later (?5 = 1): a waiting holder; a
       held one as ST_RESCHEDULE (?6, ?7), `later` judged against the
       earliest it could run if released now */
    [ST_KEY_MOVE] =
	"UPDATE due_task SET due_at = CASE WHEN after_left > 0 THEN due_at"
	" ELSE ?2 END, after_at = CASE WHEN after_left > 0 THEN ?6"
	" ELSE after_at END, after_delay_us = CASE WHEN after_left > 0"
	" THEN ?7 ELSE after_delay_us END, payload = ?3, updated_at = ?4"
	" WHERE id = ?1 AND state = 'SCHEDULED' AND (?5 = 0 OR CASE WHEN"
	" after_left > 0 THEN max(coalesce(after_at, ?4), ?4 + after_delay_us)"
	" ELSE due_at END < ?2)",
    /* on_key replace or later: a running holder gives up its key */
    [ST_KEY_GIVE_UP] = "UPDATE due_task SET key = NULL, updated_at = ?2"
		       " WHERE id = ?1 AND state = 'CLAIMED'",
    /* run after: ST_INSERT with the task's parents counted (?12 of them,
       ?13 still live, ?14 any end) and its own time (?15 the instant or
       NULL, ?16 the delay), due at ?3 (HELD_AT while ?13 > 0) */
    [ST_INSERT_AFTER] =
	"INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"
	" backoff_us, backoff_cap_us, key, created_at, updated_at, priority,"
	" grp, timeout_us, after_n, after_left, after_any_end, after_at,"
	" after_delay_us)"
	" VALUES (?1, ?2, 'SCHEDULED', ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10,"
	" ?11, ?12, ?13, ?14, ?15, ?16)"
	" ON CONFLICT (kind, key) WHERE key IS NOT NULL AND"
	" state IN ('SCHEDULED', 'CLAIMED') DO NOTHING",
    /* the edge parent ?1 -> child ?2, already counted (ended = 1) when
       the parent has ended: its state read in the same statement */
    [ST_EDGE_ADD] =
	"INSERT INTO due_after (parent, child, ended) SELECT id, ?2,"
	" state <> 'SCHEDULED' AND state <> 'CLAIMED' FROM due_task"
	" WHERE id = ?1",
    /* get: the parents of task ?1, ascending (due_after_child) */
    [ST_PARENTS] =
	"SELECT parent FROM due_after WHERE child = ?1 ORDER BY parent",
    /* the children parent ?1 has not released yet: one probe of the
       primary key, the whole cost of run-after for a task without */
    [ST_CHILDREN] = "SELECT child FROM due_after WHERE parent = ?1"
		    " AND ended = 0",
    /* has the store any run-after edge at all: NULL when none (one seek
       to the last key of due_after's primary key) */
    [ST_ANY_EDGE] = "SELECT max(parent) FROM due_after",
    [ST_EDGES_END] = "UPDATE due_after SET ended = 1 WHERE parent = ?1"
		     " AND ended = 0",
    /*
    ** A child's edge from a parent that ended at ?2 (release_one): what
    ** the held child ?1 waits for, then one of three writes, each
    ** re-checking it: a count down that is not the last (after_left only:
    ** no due or state index is touched, a fan-in of 1,000 pays that 999
    ** times), the last one (due at the later of its own instant and ?2 +
    ** its delay), or a cancel (?3 says why).
    */
    [ST_HELD_OF] = "SELECT after_left, after_any_end FROM due_task"
		   " WHERE id = ?1 AND state = 'SCHEDULED' AND after_left > 0",
    [ST_COUNT_DOWN] =
	"UPDATE due_task SET after_left = after_left - 1, updated_at = ?2"
	" WHERE id = ?1 AND state = 'SCHEDULED' AND after_left > 1",
    [ST_RELEASE] =
	"UPDATE due_task SET after_left = 0, due_at = max(coalesce(after_at,"
	" ?2), ?2 + coalesce(after_delay_us, 0)), updated_at = ?2"
	" WHERE id = ?1 AND state = 'SCHEDULED' AND after_left = 1",
    [ST_CANCEL_HELD] =
	"UPDATE due_task SET state = 'CANCELLED', after_left = 0,"
	" last_error = ?3, updated_at = ?2"
	" WHERE id = ?1 AND state = 'SCHEDULED' AND after_left > 0",
    /* `due ls --held`: the held tasks, through their own index */
    [ST_LIST_HELD] =
	"SELECT " DUE_TASK_COLS " FROM due_task INDEXED BY due_task_held"
	" WHERE after_left > 0 AND state = 'SCHEDULED'"
	" AND (?2 IS NULL OR kind = ?2) AND id > ?3 ORDER BY id LIMIT ?4",
    /* a pruned task's edges as a child (as a parent they stay: its
       children's `after` keeps naming it) */
    [ST_PRUNE_AFTER] = "DELETE FROM due_after WHERE child IN (" PRUNE_PICK ")",
};

static const char schema_v1[] =
    "CREATE TABLE IF NOT EXISTS due_meta ("
    "  name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
    /* AUTOINCREMENT: an id is never reused after prune, so the
       idempotency key task-<id> stays unique forever. */
    "CREATE TABLE due_task ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  kind TEXT NOT NULL,"
    "  payload BLOB NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN"
    "    ('SCHEDULED', 'CLAIMED', 'DONE', 'CANCELLED', 'DEAD')),"
    "  due_at INTEGER NOT NULL,"
    "  attempt INTEGER NOT NULL DEFAULT 0,"
    "  attempt_base INTEGER NOT NULL DEFAULT 0,"
    "  max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),"
    "  backoff_us INTEGER NOT NULL,"
    "  backoff_cap_us INTEGER NOT NULL,"
    "  lease_owner TEXT,"
    "  lease_until INTEGER,"
    "  cancel_requested INTEGER NOT NULL DEFAULT 0,"
    "  key TEXT,"
    "  result BLOB,"
    "  last_error TEXT,"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  CONSTRAINT claimed_iff_lease CHECK ("
    "    (state = 'CLAIMED' AND lease_owner IS NOT NULL AND lease_until IS NOT "
    "NULL)"
    "    OR (state <> 'CLAIMED' AND lease_owner IS NULL AND lease_until IS "
    "NULL)));"
    "CREATE INDEX due_task_due ON due_task (due_at) WHERE state = 'SCHEDULED';"
    "CREATE INDEX due_task_lease ON due_task (lease_until) WHERE state = "
    "'CLAIMED';"
    "CREATE UNIQUE INDEX due_task_key ON due_task (kind, key)"
    "  WHERE key IS NOT NULL AND state IN ('SCHEDULED', 'CLAIMED');"
    "CREATE INDEX due_task_finished ON due_task (updated_at)"
    "  WHERE state IN ('DONE', 'CANCELLED');"
    "CREATE TABLE due_attempt ("
    "  task_id INTEGER NOT NULL,"
    "  attempt INTEGER NOT NULL,"
    "  worker TEXT NOT NULL,"
    "  claimed_at INTEGER NOT NULL,"
    "  due_at INTEGER NOT NULL,"
    "  ended_at INTEGER,"
    "  outcome TEXT NOT NULL DEFAULT 'RUNNING' CHECK (outcome IN ('RUNNING',"
    "    'DONE', 'FAILED', 'LEASE_EXPIRED', 'CANCELLED', 'REQUEUED', "
    "'KILLED')),"
    "  error TEXT,"
    "  late_commit TEXT,"
    "  PRIMARY KEY (task_id, attempt)) WITHOUT ROWID;"
    "CREATE INDEX due_attempt_claimed ON due_attempt (claimed_at);"
    "CREATE TABLE due_audit ("
    "  id INTEGER PRIMARY KEY,"
    "  task_id INTEGER NOT NULL,"
    "  at INTEGER NOT NULL,"
    "  action TEXT NOT NULL,"
    "  detail TEXT);"
    "CREATE INDEX due_audit_task ON due_audit (task_id);"
    "INSERT INTO due_meta (name, value) VALUES ('schema_version', '1');";

/* Version 1 -> 2.  Released steps are never edited. */
static const char schema_v2[] =
    "CREATE TABLE due_schedule ("
    "  name TEXT PRIMARY KEY,"
    "  expr TEXT NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  tz TEXT NOT NULL,"
    "  payload BLOB NOT NULL,"
    "  misfire TEXT NOT NULL CHECK (misfire IN ('skip', 'once')),"
    "  overlap TEXT NOT NULL CHECK (overlap IN ('allow', 'wait')),"
    "  max_attempts INTEGER NOT NULL,"
    "  backoff_us INTEGER NOT NULL,"
    "  backoff_cap_us INTEGER NOT NULL,"
    "  next_slot INTEGER NOT NULL,"
    "  last_slot INTEGER,"
    "  last_task INTEGER,"
    "  fired INTEGER NOT NULL DEFAULT 0,"
    "  missed INTEGER NOT NULL DEFAULT 0,"
    "  last_missed INTEGER,"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE due_worker ("
    "  owner TEXT PRIMARY KEY,"
    "  started_at INTEGER NOT NULL,"
    "  seen_at INTEGER NOT NULL,"
    "  claimed INTEGER NOT NULL DEFAULT 0, done INTEGER NOT NULL DEFAULT 0,"
    "  failed INTEGER NOT NULL DEFAULT 0, dead INTEGER NOT NULL DEFAULT 0,"
    "  stale INTEGER NOT NULL DEFAULT 0, cancelled INTEGER NOT NULL DEFAULT 0,"
    "  lease_lost INTEGER NOT NULL DEFAULT 0,"
    "  claim_queries INTEGER NOT NULL DEFAULT 0,"
    "  empty_claims INTEGER NOT NULL DEFAULT 0,"
    "  reclaim_queries INTEGER NOT NULL DEFAULT 0,"
    "  store_errors INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
    "UPDATE due_meta SET value = '2' WHERE name = 'schema_version';";

/*
** Version 2 -> 3.  SQLite codes a CHECK of the form `x IN (five or more
** constants)` by building a temporary b-tree of the constants for every
** row it writes: a b-tree created and two pages zeroed per statement, a
** third of a worker's CPU in the drain profile (docs/BENCHMARKS.md).  An
** OR chain of equalities says the same and is plain comparisons.  SQLite
** cannot alter a CHECK, so both tables are rebuilt as its documentation
** describes (lang_altertable.html, "other kinds of table schema changes"):
** new table, copy, drop, rename, indexes again.  The AUTOINCREMENT
** high-water mark is carried over, so an id freed by prune is never
** handed out again.  One transaction: all of it or none.
*/
static const char schema_v3[] =
    "CREATE TABLE due_task_v3 ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  kind TEXT NOT NULL,"
    "  payload BLOB NOT NULL,"
    "  state TEXT NOT NULL CHECK (state = 'SCHEDULED' OR state = 'CLAIMED'"
    "    OR state = 'DONE' OR state = 'CANCELLED' OR state = 'DEAD'),"
    "  due_at INTEGER NOT NULL,"
    "  attempt INTEGER NOT NULL DEFAULT 0,"
    "  attempt_base INTEGER NOT NULL DEFAULT 0,"
    "  max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),"
    "  backoff_us INTEGER NOT NULL,"
    "  backoff_cap_us INTEGER NOT NULL,"
    "  lease_owner TEXT,"
    "  lease_until INTEGER,"
    "  cancel_requested INTEGER NOT NULL DEFAULT 0,"
    "  key TEXT,"
    "  result BLOB,"
    "  last_error TEXT,"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  CONSTRAINT claimed_iff_lease CHECK ("
    "    (state = 'CLAIMED' AND lease_owner IS NOT NULL AND lease_until IS NOT "
    "NULL)"
    "    OR (state <> 'CLAIMED' AND lease_owner IS NULL AND lease_until IS "
    "NULL)));"
    "INSERT INTO due_task_v3 (id, kind, payload, state, due_at, attempt,"
    "  attempt_base, max_attempts, backoff_us, backoff_cap_us, lease_owner,"
    "  lease_until, cancel_requested, key, result, last_error, created_at,"
    "  updated_at)"
    "  SELECT id, kind, payload, state, due_at, attempt, attempt_base,"
    "  max_attempts, backoff_us, backoff_cap_us, lease_owner, lease_until,"
    "  cancel_requested, key, result, last_error, created_at, updated_at"
    "  FROM due_task ORDER BY id;"
    "DELETE FROM sqlite_sequence WHERE name = 'due_task_v3';"
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'due_task_v3', seq"
    "  FROM sqlite_sequence WHERE name = 'due_task';"
    "DROP TABLE due_task;"
    "ALTER TABLE due_task_v3 RENAME TO due_task;"
    "CREATE INDEX due_task_due ON due_task (due_at) WHERE state = 'SCHEDULED';"
    "CREATE INDEX due_task_lease ON due_task (lease_until) WHERE state = "
    "'CLAIMED';"
    "CREATE UNIQUE INDEX due_task_key ON due_task (kind, key)"
    "  WHERE key IS NOT NULL AND state IN ('SCHEDULED', 'CLAIMED');"
    "CREATE INDEX due_task_finished ON due_task (updated_at)"
    "  WHERE state IN ('DONE', 'CANCELLED');"
    "CREATE TABLE due_attempt_v3 ("
    "  task_id INTEGER NOT NULL,"
    "  attempt INTEGER NOT NULL,"
    "  worker TEXT NOT NULL,"
    "  claimed_at INTEGER NOT NULL,"
    "  due_at INTEGER NOT NULL,"
    "  ended_at INTEGER,"
    "  outcome TEXT NOT NULL DEFAULT 'RUNNING' CHECK (outcome = 'RUNNING'"
    "    OR outcome = 'DONE' OR outcome = 'FAILED' OR outcome = 'LEASE_EXPIRED'"
    "    OR outcome = 'CANCELLED' OR outcome = 'REQUEUED' OR outcome = "
    "'KILLED'),"
    "  error TEXT,"
    "  late_commit TEXT,"
    "  PRIMARY KEY (task_id, attempt)) WITHOUT ROWID;"
    "INSERT INTO due_attempt_v3 (task_id, attempt, worker, claimed_at, due_at,"
    "  ended_at, outcome, error, late_commit)"
    "  SELECT task_id, attempt, worker, claimed_at, due_at, ended_at, outcome,"
    "  error, late_commit FROM due_attempt;"
    "DROP TABLE due_attempt;"
    "ALTER TABLE due_attempt_v3 RENAME TO due_attempt;"
    "CREATE INDEX due_attempt_claimed ON due_attempt (claimed_at);"
    "UPDATE due_meta SET value = '3' WHERE name = 'schema_version';";

/*
** Version 3 -> 4: flow control (docs/internals/flow.md).  A task gains a
** priority, a group and its own time limit; the claim indexes carry the
** priority (due_task_claim for every claim, due_task_kind_claim for the
** per-kind claims of limited kinds); due_attempt is rebuilt (as in
** version 3) so that its outcome CHECK admits TIMED_OUT; due_kind holds
** each kind's settings and held-back counters, due_rate the claim times
** of rate-limited kinds inside their window.
*/
static const char schema_v4[] =
    "ALTER TABLE due_task ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE due_task ADD COLUMN grp TEXT;"
    "ALTER TABLE due_task ADD COLUMN timeout_us INTEGER;"
    "CREATE INDEX due_task_claim ON due_task (priority, due_at)"
    "  WHERE state = 'SCHEDULED';"
    "CREATE INDEX due_task_kind_claim ON due_task (kind, priority, due_at)"
    "  WHERE state = 'SCHEDULED';"
    "CREATE TABLE due_attempt_v4 ("
    "  task_id INTEGER NOT NULL,"
    "  attempt INTEGER NOT NULL,"
    "  worker TEXT NOT NULL,"
    "  claimed_at INTEGER NOT NULL,"
    "  due_at INTEGER NOT NULL,"
    "  ended_at INTEGER,"
    "  outcome TEXT NOT NULL DEFAULT 'RUNNING' CHECK (outcome = 'RUNNING'"
    "    OR outcome = 'DONE' OR outcome = 'FAILED'"
    "    OR outcome = 'LEASE_EXPIRED' OR outcome = 'CANCELLED'"
    "    OR outcome = 'REQUEUED' OR outcome = 'KILLED'"
    "    OR outcome = 'TIMED_OUT'),"
    "  error TEXT,"
    "  late_commit TEXT,"
    "  PRIMARY KEY (task_id, attempt)) WITHOUT ROWID;"
    "INSERT INTO due_attempt_v4 (task_id, attempt, worker, claimed_at, due_at,"
    "  ended_at, outcome, error, late_commit)"
    "  SELECT task_id, attempt, worker, claimed_at, due_at, ended_at, outcome,"
    "  error, late_commit FROM due_attempt;"
    "DROP TABLE due_attempt;"
    "ALTER TABLE due_attempt_v4 RENAME TO due_attempt;"
    "CREATE INDEX due_attempt_claimed ON due_attempt (claimed_at);"
    "CREATE TABLE due_kind ("
    "  kind TEXT PRIMARY KEY,"
    "  paused INTEGER NOT NULL DEFAULT 0,"
    "  rate_n INTEGER CHECK (rate_n > 0),"
    "  rate_us INTEGER CHECK (rate_us > 0),"
    "  max_running INTEGER CHECK (max_running > 0),"
    "  max_running_per_group INTEGER CHECK (max_running_per_group > 0),"
    "  timeout_us INTEGER CHECK (timeout_us > 0),"
    "  held_rate INTEGER NOT NULL DEFAULT 0,"
    "  held_running INTEGER NOT NULL DEFAULT 0,"
    "  held_group INTEGER NOT NULL DEFAULT 0,"
    "  updated_at INTEGER NOT NULL,"
    "  CONSTRAINT rate_whole CHECK ((rate_n IS NULL) = (rate_us IS NULL)))"
    "  WITHOUT ROWID;"
    "CREATE TABLE due_rate ("
    "  kind TEXT NOT NULL,"
    "  at INTEGER NOT NULL);"
    "CREATE INDEX due_rate_kind ON due_rate (kind, at);"
    "UPDATE due_meta SET value = '4' WHERE name = 'schema_version';";

/*
** Version 4 -> 5: production scale (issue 15).
**
**   due_lock     store-wide named leases (retention's one pruner at a
**                time): name, owner, until on the store's clock.
**   due_worker.pruned  the tasks a worker's retention deleted (its report).
**   due_task_sched_id, due_task_done_id, due_task_cancelled_id,
**   due_task_dead_id  (id) WHERE state = one state: `due ls --state S`
**                walks one state in id order, whatever the size of the
**                others, and stats sizes a state by its lowest and
**                highest id and counts it through them (index only,
**                capped; exact for DEAD).  CLAIMED needs none: its
**                lease index holds only what runs.  Keys are integers
**                appended at the right edge, and a partial index costs a
**                write only where its state is entered or left: the
**                drain pays for SCHEDULED's (submit, claim) and DONE's
**                (completion), measured in docs/internals/store.md.  The
**                planner never prefers them to a due_at or lease range
**                (no equality on an indexed column), and the list names
**                them with INDEXED BY.
**
** Nothing keeps counts: stats and metrics count index ranges capped at
** COUNT_CAP where a state may be small and estimate the others (see
** "Stats, prune" below).
*/
static const char schema_v5[] =
    "CREATE TABLE due_lock ("
    "  name TEXT PRIMARY KEY,"
    "  owner TEXT NOT NULL,"
    "  until INTEGER NOT NULL) WITHOUT ROWID;"
    "ALTER TABLE due_worker ADD COLUMN pruned INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX due_task_sched_id ON due_task (id)"
    "  WHERE state = 'SCHEDULED';"
    "CREATE INDEX due_task_done_id ON due_task (id) WHERE state = 'DONE';"
    "CREATE INDEX due_task_cancelled_id ON due_task (id)"
    "  WHERE state = 'CANCELLED';"
    "CREATE INDEX due_task_dead_id ON due_task (id) WHERE state = 'DEAD';"
    "UPDATE due_meta SET value = '5' WHERE name = 'schema_version';";

/*
** Version 5 -> 6: an attempt row is written once, when its try ends
** (issue 18).  The claim wrote a RUNNING row (two b-trees: the row and
** due_attempt_claimed) and the end rewrote it; now the claim writes the
** try's claim time into its task row (claimed_at; the worker is
** lease_owner, the due time due_at, both fixed while the task is CLAIMED)
** and the end inserts the finished row from the task row before it
** leaves CLAIMED.  Readers add the running try from the task row
** (RUNNING_TRY, IN_WINDOW).  The tries running at the upgrade move the
** same way: their claim time into their task, their RUNNING row deleted,
** so that their end inserts it again, finished.  claimed_at is not
** cleared when a try ends: only a CLAIMED task's is read.  A worker still
** running the schema-5 code through a rolling upgrade claims the old way
** (a RUNNING row, no claimed_at): its own end updates that row, and an end
** by a new worker (a reclaim after it died) finishes the same row
** (CLOSE_UPSERT) instead of failing on its key; a task's history shows
** that RUNNING row and not a second one from the task row.
*/
static const char schema_v6[] =
    "ALTER TABLE due_task ADD COLUMN claimed_at INTEGER;"
    "UPDATE due_task SET claimed_at = coalesce((SELECT a.claimed_at"
    "  FROM due_attempt a WHERE a.task_id = due_task.id"
    "  AND a.attempt = due_task.attempt AND a.outcome = 'RUNNING'),"
    "  updated_at) WHERE state = 'CLAIMED';"
    "DELETE FROM due_attempt WHERE outcome = 'RUNNING' AND (task_id, attempt)"
    "  IN (SELECT id, attempt FROM due_task WHERE state = 'CLAIMED');"
    "UPDATE due_meta SET value = '6' WHERE name = 'schema_version';";

/*
** Version 6 -> 7: fewer indexes for every task to keep (issue 18).  A
** statement that changes a task's state visits every partial index whose
** WHERE names the state (opens a cursor, tests old and new row), whether
** or not the task enters or leaves it (in a callgrind trial, dropping
** five of them took a drain's instructions per task down by a fifth).
**   due_task_due (due_at) duplicated due_task_claim (priority, due_at)
**                for the readers that want SCHEDULED tasks in due order
**                whatever their priority: the claim's peek, the overdue
**                count of stats and the wheel's refill (upcoming).  They
**                now walk due_task_claim one priority at a time
**                (PRIORITIES; a seek per priority in use, usually one).
**                A submit writes one index entry less and a claim
**                deletes one less.
**   due_task_cancelled_id and due_task_dead_id become one index on
**                (state, id) over both states: the same lists, counts and
**                spans (an equality on state, then id order), one index
**                less to visit.  The planner cannot pick it for the
**                SCHEDULED, CLAIMED or DONE queries of the hot path: its
**                WHERE is not implied by theirs.
** SCHEDULED's and DONE's (id) indexes stay: `due ls --state` and stats
** need them, and merging them into one (state, id) index over all states
** would let the planner choose it for every `state = 'SCHEDULED'` query
** (a walk of all due tasks for min(priority), measured).
*/
static const char schema_v7[] =
    "DROP INDEX due_task_due;"
    "DROP INDEX due_task_cancelled_id;"
    "DROP INDEX due_task_dead_id;"
    "CREATE INDEX due_task_ended_id ON due_task (state, id)"
    "  WHERE state = 'CANCELLED' OR state = 'DEAD';"
    "UPDATE due_meta SET value = '7' WHERE name = 'schema_version';";

/* Version 7 -> 8: PostgreSQL's and MySQL's alone (pg.c, mysql.c). */
static const char schema_v8[] = DUE_SCHEMA_RECORD("8");

/* Version 9: no change here either (the SQL stores' due_reschedule). */
static const char schema_v9[] = DUE_SCHEMA_RECORD("9");

/* Version 10: no change here either (the SQL stores' on_key). */
static const char schema_v10[] = DUE_SCHEMA_RECORD("10");

/*
** Version 10 -> 11: run after (issue 38).  A task gains
**   after_n         the parents it was added after (fixed);
**   after_left      those it still waits for: > 0 only while it is held
**                   (SCHEDULED, due_at HELD_AT); a cancel or kill of a
**                   held task sets it to 0;
**   after_any_end   1: any end of a parent counts, 0: DONE only;
**   after_at, after_delay_us  its own time, applied at the release:
**                   due_at = max(after_at, release + after_delay_us).
** The columns are added with their defaults (0, NULL): an existing task
** is after no task.  They are not declared NOT NULL: each such column
** costs every insert a check (4 of the 14 VM steps these columns and the
** index below added to a submit's INSERT), and only our statements write
** them.  due_after holds one row per (parent, child), keyed
** by parent for the release (a parent without children: one probe that
** finds nothing), with due_after_child for get and prune; `ended` says
** the parent's end was counted, so a DEAD parent retried and then DONE,
** or a DEAD one killed to CANCELLED, never counts an edge twice.
** due_task_held (id) WHERE after_left > 0 lists the held tasks (`due ls
** --held`); only a statement that writes after_left maintains it (SQLite
** skips a partial index whose columns and WHERE an UPDATE leaves alone),
** so the claim and the completion never touch it.
*/
static const char schema_v11[] =
    "ALTER TABLE due_task ADD COLUMN after_n INTEGER DEFAULT 0;"
    "ALTER TABLE due_task ADD COLUMN after_left INTEGER DEFAULT 0;"
    "ALTER TABLE due_task ADD COLUMN after_any_end INTEGER DEFAULT 0;"
    "ALTER TABLE due_task ADD COLUMN after_at INTEGER;"
    "ALTER TABLE due_task ADD COLUMN after_delay_us INTEGER DEFAULT 0;"
    "CREATE TABLE due_after ("
    "  parent INTEGER NOT NULL,"
    "  child INTEGER NOT NULL,"
    "  ended INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY (parent, child)) WITHOUT ROWID;"
    "CREATE INDEX due_after_child ON due_after (child);"
    "CREATE INDEX due_task_held ON due_task (id)"
    "  WHERE after_left > 0;" DUE_SCHEMA_RECORD("11");

_Static_assert(ST_COUNT <= DUE_SQ_MAX_STMTS, "raise DUE_SQ_MAX_STMTS");

const char *due__sq_read_sql(int i)
{
	static const enum stmt_id reads[] = {ST_DUE_UNCLAIMED,
					     ST_LATENESS,
					     ST_M_LATE,
					     ST_M_DUR,
					     ST_M_OUTCOMES,
					     ST_M_STALE,
					     ST_M_PERMIN,
					     ST_M_WORKERS,
					     ST_PRUNE_ATTEMPTS,
					     ST_PRUNE_AUDIT,
					     ST_PRUNE_TASKS,
					     ST_PEEK_DUE,
					     ST_PEEK_EXPIRED,
					     ST_PRIO_NEXT,
					     ST_K_RUNNING,
					     ST_K_DUE,
					     ST_K_GROUPS,
					     ST_ID_RANGE,
					     ST_PROBE,
					     ST_CLAIM_ID,
					     ST_CLAIM_ONE,
					     ST_CLAIM_MANY,
					     ST_CLOSE_MANY,
					     ST_COMPLETE,
					     ST_CANCEL_SCHED,
					     ST_STATE_OF,
					     ST_SCHED_KIND_NEXT,
					     ST_SCHED_KIND_COUNT,
					     ST_SPAN_STATE + DUE_SCHEDULED,
					     ST_SPAN_STATE + DUE_DONE,
					     ST_SPAN_STATE + DUE_CANCELLED,
					     ST_CHILDREN,
					     ST_PARENTS,
					     ST_LIST_HELD,
					     ST_PRUNE_AFTER,
					     ST_ANY_EDGE};
	const size_t n = sizeof(reads) / sizeof(reads[0]);

	/* then each state's list, count and per-kind read */
	if (i < 0)
		return NULL;
	if ((size_t)i < n)
		return sql_text[reads[i]];
	i -= (int)n;
	return i < 3 * DUE_STATE_COUNT
		   ? sql_text[(i < DUE_STATE_COUNT	 ? ST_LIST_STATE
			       : i < 2 * DUE_STATE_COUNT ? ST_COUNT_STATE
							 : ST_KINDS_STATE) +
			      i % DUE_STATE_COUNT]
		   : NULL;
}

/* The cached statement `id`, reset and unbound, or NULL (error set). */
static sqlite3_stmt *stmt(due_store *s, enum stmt_id id)
{
	return due__sq_stmt(s, (int)id, sql_text[id]);
}

/* A row.h cursor over statement st being stepped. */
#define SQ_ROWS(rows, s, st, what)                                             \
	due__sq_cur rows##_cur;                                                \
	due_rows rows;                                                         \
	due__sq_rows(&rows, &rows##_cur, s, st, what)

/* Schema version of the file: -1 when it has no due schema. */
static int read_version(due_store *s, int *out)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(
	    s->db, "SELECT value FROM due_meta WHERE name = 'schema_version'",
	    -1, &st, NULL);

	*out = -1;
	if (rc != SQLITE_OK) {
		if (strstr(sqlite3_errmsg(s->db), "no such table"))
			return 0;
		return due__sq_error(s, rc, "read schema version");
	}
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		*out = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return rc == SQLITE_ROW || rc == SQLITE_DONE
		   ? 0
		   : due__sq_error(s, rc, "read schema version");
}

static int due__sq_check_schema(due_store *s)
{
	int v, rc = read_version(s, &v);

	if (rc < 0)
		return rc;
	return due__schema_verdict(s->path, v, "");
}

/* Run one schema step (several statements) inside the open transaction. */
static int exec_step(due_store *s, const char *sql, const char *what)
{
	int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
	return rc == SQLITE_OK ? 0 : due__sq_error(s, rc, what);
}

static const char *const steps[DUE_SCHEMA_VERSION + 1] = {
    [1] = schema_v1, [2] = schema_v2,	[3] = schema_v3,  [4] = schema_v4,
    [5] = schema_v5, [6] = schema_v6,	[7] = schema_v7,  [8] = schema_v8,
    [9] = schema_v9, [10] = schema_v10, [11] = schema_v11};

/* WAL first (it cannot change inside a transaction), then the walk. */
static int due__sq_init_schema(due_store *s)
{
	const due_migration m = {.label = s->path,
				 .where = "",
				 .steps = steps,
				 .begin = due__sq_begin,
				 .read_version = read_version,
				 .exec = exec_step,
				 .commit = due__sq_commit,
				 .rollback = due__sq_rollback};
	int rc =
	    sqlite3_exec(s->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);

	if (rc != SQLITE_OK)
		return due__sq_error(s, rc, "enable WAL");
	return due__migrate(s, &m);
}

/* ------------------------------------------------------------------ */
/* Producer                                                            */
/* ------------------------------------------------------------------ */

/*
** Insert one checked submit with statements prepared on `db` (either ours,
** cached, or the caller's own connection).  Inside an open transaction.
**
** The new id is read with sqlite3_last_insert_rowid() when the INSERT
** changed one row (0 rows: the (kind, key) conflict, DO NOTHING), not with
** RETURNING: SQLite runs a RETURNING statement to its end into an
** ephemeral b-tree (a page allocated and zeroed) and reads it back, which
** was a quarter of a single submit's instructions (callgrind, 120k -> 91k
** per due_schedule).  `find` (the live task of a (kind, key)) is only
** needed on a conflict: NULL takes it from our statement cache then.
*/
/*
** on_key REPLACE or LATER, under the write lock, on the live holder out->id
** of (kind, key) that insert_one found: a waiting one takes the due time
** and payload (LATER: only a later time; out->moved says whether it did);
** a running one gives up the key and `ins` (still bound) inserts the new
** holder.  The states are re-checked where they are written.  `native`:
** the caller's connection, whose statements are prepared for this call.
*/
static int on_key(due_store *s, sqlite3_stmt *ins, bool native,
		  const due_submit *it, due_time due, due_time now,
		  bool claimed, due_submitted *out)
{
	enum stmt_id which = claimed ? ST_KEY_GIVE_UP : ST_KEY_MOVE;
	sqlite3_stmt *st = NULL;
	int rc;

	if (native ? sqlite3_prepare_v2(s->db, sql_text[which], -1, &st,
					NULL) != SQLITE_OK
		   : !(st = stmt(s, which)))
		return native ? due__sq_error(s, sqlite3_errcode(s->db),
					      "prepare on_key")
			      : due_error_last_code();
	sqlite3_bind_int64(st, 1, out->id);
	if (claimed) {
		sqlite3_bind_int64(st, 2, now);
	} else {
		sqlite3_bind_int64(st, 2, due);
		sqlite3_bind_blob(st, 3, it->payload ? it->payload : "",
				  (int)it->payload_len, SQLITE_STATIC);
		sqlite3_bind_int64(st, 4, now);
		sqlite3_bind_int(st, 5, it->opts.on_key == DUE_ON_KEY_LATER);
		if (it->opts.at != DUE_TIME_NONE) /* a held holder's own */
			sqlite3_bind_int64(st, 6, it->opts.at);
		sqlite3_bind_int64(st, 7, it->opts.delay_us);
	}
	rc = sqlite3_step(st);
	if (native)
		sqlite3_finalize(st);
	else
		sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return due__sq_error(s, rc, "on_key");
	if (!claimed) {
		out->moved = sqlite3_changes(s->db) == 1;
		return 0;
	}
	/* the key is free: the new task takes it (the lock is ours) */
	rc = sqlite3_step(ins);
	sqlite3_reset(ins);
	if (rc != SQLITE_DONE)
		return due__sq_error(s, rc, "insert task");
	if (sqlite3_changes(s->db) != 1)
		return due__error_set(DUE_ESTORE,
				      "sqlite store: the key of task %lld is "
				      "still held after it gave it up",
				      (long long)out->id);
	out->id = sqlite3_last_insert_rowid(s->db);
	out->existed = false;
	return 0;
}

/* Bind ST_INSERT's (and ST_INSERT_AFTER's) first 11 parameters. */
static void bind_task(sqlite3_stmt *ins, const due_submit *it, due_time due,
		      due_time now)
{
	const due_schedule_opts *o = &it->opts;

	sqlite3_bind_text(ins, 1, it->kind, -1, SQLITE_STATIC);
	sqlite3_bind_blob(ins, 2, it->payload ? it->payload : "",
			  (int)it->payload_len, SQLITE_STATIC);
	sqlite3_bind_int64(ins, 3, due);
	sqlite3_bind_int(ins, 4, o->max_attempts);
	sqlite3_bind_int64(ins, 5, o->backoff_us);
	sqlite3_bind_int64(ins, 6, o->backoff_cap_us);
	if (o->key)
		sqlite3_bind_text(ins, 7, o->key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(ins, 8, now);
	sqlite3_bind_int(ins, 9, o->priority);
	if (o->group)
		sqlite3_bind_text(ins, 10, o->group, -1, SQLITE_STATIC);
	if (o->timeout_us > 0)
		sqlite3_bind_int64(ins, 11, o->timeout_us);
}

/* The live holder of it's (kind, key) into out (existed); *claimed. */
static int find_holder(due_store *s, sqlite3_stmt *find, const due_submit *it,
		       due_submitted *out, bool *claimed)
{
	int rc;

	sqlite3_bind_text(find, 1, it->kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(find, 2, it->opts.key, -1, SQLITE_STATIC);
	rc = sqlite3_step(find);
	if (rc == SQLITE_ROW) {
		out->id = sqlite3_column_int64(find, 0);
		out->existed = true;
		out->moved = false;
		*claimed = sqlite3_column_int(find, 1) != 0;
	}
	sqlite3_reset(find);
	return rc == SQLITE_ROW ? 0 : due__sq_error(s, rc, "find task by key");
}

/*
** Statement `id` for one submit: our cached one, or (native) one prepared
** on the caller's connection for this call, which call_done finalizes.
*/
static sqlite3_stmt *call_stmt(due_store *s, bool native, enum stmt_id id)
{
	sqlite3_stmt *st = NULL;
	int rc;

	if (!native)
		return stmt(s, id);
	if ((rc = sqlite3_prepare_v2(s->db, sql_text[id], -1, &st, NULL)) !=
	    SQLITE_OK) {
		sqlite3_finalize(st);
		due__sq_error(s, rc, "prepare");
		return NULL;
	}
	due__sq_work_use(s, st);
	return st;
}

static void call_done(due_store *s, bool native, sqlite3_stmt *st)
{
	if (!native) {
		sqlite3_reset(st);
		return;
	}
	due__sq_work_take(s, st);
	sqlite3_finalize(st);
}

/*
** Run after: the parents of o, read under the write lock (or in the
** caller's transaction), which no finish can change before our commit.
** Each must exist (DUE_ENOTFOUND); DONE counts as done; DEAD or CANCELLED
** is refused (DUE_ESTATE) unless after_any_end, where it counts as ended.
** *live: the parents still SCHEDULED or CLAIMED, those the task waits for.
*/
static int parents_check(due_store *s, bool native, const due_schedule_opts *o,
			 int32_t *live)
{
	sqlite3_stmt *st = call_stmt(s, native, ST_STATE_OF);
	int rc = 0;

	*live = 0;
	if (!st)
		return due_error_last_code();
	for (size_t i = 0; rc == 0 && i < o->n_after; i++) {
		long long id = (long long)o->after[i];
		due_state ps = DUE_SCHEDULED;
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, o->after[i]);
		rc = sqlite3_step(st);
		if (rc == SQLITE_DONE)
			rc = due__error_set(DUE_ENOTFOUND,
					    "parent task %lld not found", id);
		else if (rc != SQLITE_ROW)
			rc = due__sq_error(s, rc, "read parent task");
		else if ((rc = due__sq_col_state(st, 0, &ps)) < 0)
			break;
		else if (ps == DUE_SCHEDULED || ps == DUE_CLAIMED)
			(*live)++;
		else if (ps != DUE_DONE && !o->after_any_end)
			rc = due__error_set(DUE_ESTATE,
					    "parent task %lld is %s (add with "
					    "after_any_end to run after any "
					    "end)",
					    id, due_state_name(ps));
	}
	call_done(s, native, st);
	return rc;
}

/* The edges of a new task `child` from each of its parents. */
static int edges_add(due_store *s, bool native, const due_schedule_opts *o,
		     due_id child)
{
	sqlite3_stmt *st = call_stmt(s, native, ST_EDGE_ADD);
	int rc = SQLITE_DONE;

	if (!st)
		return due_error_last_code();
	for (size_t i = 0; rc == SQLITE_DONE && i < o->n_after; i++) {
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, o->after[i]);
		sqlite3_bind_int64(st, 2, child);
		rc = sqlite3_step(st);
	}
	call_done(s, native, st);
	return rc == SQLITE_DONE ? 0 : due__sq_error(s, rc, "add edge");
}

/*
** insert_one of a task after others (o->n_after > 0; the core refused
** on_key replace and later with it): held (due_at HELD_AT) while a parent
** is live, else due as any task; its own time kept for the release.  A
** live holder of its key answers existed, and nothing is written.
*/
static int insert_after(due_store *s, bool native, sqlite3_stmt *find,
			const due_submit *it, due_time now, due_submitted *out)
{
	const due_schedule_opts *o = &it->opts;
	due_time due = o->at != DUE_TIME_NONE ? o->at : now + o->delay_us;
	sqlite3_stmt *ins;
	bool claimed = false;
	int32_t live;
	int rc;

	if ((rc = parents_check(s, native, o, &live)) < 0)
		return rc;
	if (!(ins = call_stmt(s, native, ST_INSERT_AFTER)))
		return due_error_last_code();
	bind_task(ins, it, live ? HELD_AT : due, now);
	sqlite3_bind_int64(ins, 12, (int64_t)o->n_after);
	sqlite3_bind_int(ins, 13, live);
	sqlite3_bind_int(ins, 14, o->after_any_end);
	if (o->at != DUE_TIME_NONE)
		sqlite3_bind_int64(ins, 15, o->at);
	sqlite3_bind_int64(ins, 16, o->delay_us);
	rc = sqlite3_step(ins);
	call_done(s, native, ins);
	if (rc != SQLITE_DONE)
		return due__sq_error(s, rc, "insert task");
	if (sqlite3_changes(s->db) == 1) {
		out->id = sqlite3_last_insert_rowid(s->db);
		out->existed = false;
		out->moved = false;
		return edges_add(s, native, o, out->id);
	}
	if (!find && !(find = stmt(s, ST_FIND_KEY)))
		return due_error_last_code();
	return find_holder(s, find, it, out, &claimed);
}

static int insert_one(due_store *s, sqlite3_stmt *ins, sqlite3_stmt *find,
		      const due_submit *it, due_time now, due_submitted *out)
{
	const due_schedule_opts *o = &it->opts;
	due_time due = o->at != DUE_TIME_NONE ? o->at : now + o->delay_us;
	bool native = find != NULL, claimed = false;
	int rc;

	if (o->n_after)
		return insert_after(s, native, find, it, now, out);
	bind_task(ins, it, due, now);
	rc = sqlite3_step(ins);
	sqlite3_reset(ins);
	if (rc != SQLITE_DONE)
		return due__sq_error(s, rc, "insert task");
	if (sqlite3_changes(s->db) == 1) {
		out->id = sqlite3_last_insert_rowid(s->db);
		out->existed = false;
		out->moved = false;
		return 0;
	}
	/* Conflict on (kind, key): the live task is the answer. */
	if (!find && !(find = stmt(s, ST_FIND_KEY)))
		return due_error_last_code();
	if ((rc = find_holder(s, find, it, out, &claimed)) < 0)
		return rc;
	if (o->on_key == DUE_ON_KEY_KEEP)
		return 0;
	return on_key(s, ins, native, it, due, now, claimed, out);
}

/*
** The payload limit: SQLite takes no string, blob or row longer than
** SQLITE_LIMIT_LENGTH (SQLITE_MAX_LENGTH, 1,000,000,000 bytes unless the
** library was built otherwise; read from the connection, which may only
** lower it).  A task's row must fit beside its payload, its result
** included (1 MiB by default), so a payload is at most that less
** SQ_ROW_ROOM, refused before anything is written.
*/
#define SQ_ROW_ROOM (4u << 20)

static int sq_payloads_fit(sqlite3 *db, const char *path,
			   const due_submit *items, size_t n)
{
	int lim = sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1);
	size_t max = lim > (int)SQ_ROW_ROOM ? (size_t)lim - SQ_ROW_ROOM : 0;
	size_t i = due__payload_over(items, n, max);
	char who[600];

	if (i == n)
		return 0;
	snprintf(who, sizeof(who), "sqlite store '%s'", path ? path : "");
	return due__store_payload_too_big(
	    who, i, n, items[i].payload_len, max,
	    "this SQLite takes in one task (SQLITE_LIMIT_LENGTH = %d, less "
	    "room for the row's other columns): SQLite's compile-time "
	    "SQLITE_MAX_LENGTH raises it (at most 2147483647); keep the "
	    "payload elsewhere and put its address in the task",
	    lim);
}

static int due__sq_schedule(due_store *s, due_submitted *out,
			    const due_submit *items, size_t n)
{
	sqlite3_stmt *ins;
	due_time now;
	int rc;

	if ((rc = sq_payloads_fit(s->db, s->path, items, n)) < 0 ||
	    (rc = due__sq_begin(s)) < 0)
		return rc;
	now = due_time_now_host();
	for (size_t i = 0; i < n; i++) {
		out[i].id = 0;
		if (!(ins = stmt(s, ST_INSERT))) {
			rc = due_error_last_code();
			goto fail;
		}
		if ((rc = insert_one(s, ins, NULL, &items[i], now, &out[i])) <
		    0)
			goto fail;
	}
	return due__sq_commit_wake(s);
fail:
	due__sq_rollback(s);
	return rc;
}

static int due__sq_native_tx(void *conn)
{
	return sqlite3_get_autocommit(conn) ? DUE_NATIVE_TX_NONE
					    : DUE_NATIVE_TX_OPEN;
}

/*
** Insert on the caller's connection, inside the transaction it holds
** (src/core/native.c checked it): statements prepared on that
** connection for this one call, never cached there.
*/
static int due__sq_schedule_on_native(void *conn, due_submitted *out,
				      const due_submit *it)
{
	due_store tmp = {.db = conn};
	sqlite3_stmt *ins = NULL, *find = NULL;
	int rc;

	if ((rc = sq_payloads_fit(conn, sqlite3_db_filename(conn, "main"), it,
				  1)) < 0)
		return rc;
	if ((rc = sqlite3_prepare_v2(conn, sql_text[ST_INSERT], -1, &ins,
				     NULL)) ||
	    (rc = sqlite3_prepare_v2(conn, sql_text[ST_FIND_KEY], -1, &find,
				     NULL))) {
		rc = strstr(sqlite3_errmsg(conn), "no such table")
			 ? due__error_set(DUE_ESCHEMA,
					  "database has no due schema: "
					  "run `due init`")
			 : due__sq_error(&tmp, rc, "prepare insert");
	} else {
		rc = insert_one(&tmp, ins, find, it, due_time_now_host(), out);
	}
	/* the caller's connection: its statements and the rows (the task
	   and its edges), counted now */
	if (ins) {
		due__sq_work_use(&tmp, ins);
		if (rc == 0 && out->existed)
			due__sq_work_use(&tmp, find);
		due__work_add(tmp.w_stmts, tmp.w_steps,
			      rc == 0 && !out->existed ? 1 + it->opts.n_after
						       : 0);
	}
	sqlite3_finalize(ins);
	sqlite3_finalize(find);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Claim                                                               */
/* ------------------------------------------------------------------ */

/*
** The claim (docs/internals/flow.md), planned by flow.c with the
** statements below.  Everything runs inside the claim's BEGIN IMMEDIATE,
** so the counts a limited kind is judged by cannot change under it: every
** other claim waits for SQLite's one write lock (so no lock and no
** restamp: the claim has one now).  The planner's reads and takes:
**
**   flow_read     the due_kind rows, ordered by kind (one step of a cached
**                 statement when there are none: the whole cost of flow
**                 control for a store that does not use it);
**   sq_take_kind  a limited kind's due tasks through due_task_kind_claim;
**   sq_prio_next  the distinct priorities in use, one probe of
**                 due_task_claim each (a loose index scan);
**   sq_take_prio  one priority's due tasks of the other kinds, in due_at
**                 order.
**
** Rows are picked first and claimed after (claim_picked): a statement
** still stepping over due_task must not see its own table change.
*/

/* The claim the planner's callbacks fill (due__flow.payload). */
typedef struct sq_claim {
	due_store *s;
	due_task_list *l;
	const char *owner;
	int64_t lease_us;
} sq_claim;

/* Every due_kind row into f (empty f when there are none). */
static int flow_read(due_store *s, due__flow *f)
{
	sqlite3_stmt *st = stmt(s, ST_FLOW_KINDS);
	int64_t v[DUE__FLOW_NCOLS];
	int rc;

	if (!st)
		return due_error_last_code();
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *kind = (const char *)sqlite3_column_text(st, 0);
		for (int i = 0; i < DUE__FLOW_NCOLS; i++)
			v[i] = sqlite3_column_int64(st, i + 1);
		if ((rc = due__flow_add(
			 f, kind, (size_t)sqlite3_column_bytes(st, 0), v)) < 0)
			break;
	}
	sqlite3_reset(st);
	if (rc < 0)
		return rc;
	return rc == SQLITE_DONE ? 0 : due__sq_error(s, rc, "read kinds");
}

/* One count(*) (and optionally a second column) of a bound statement. */
static int count_of(due_store *s, sqlite3_stmt *st, int64_t *n, int64_t *second)
{
	int rc = sqlite3_step(st);

	*n = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
	if (second)
		*second = rc == SQLITE_ROW ? sqlite3_column_int64(st, 1) : 0;
	sqlite3_reset(st);
	return rc == SQLITE_ROW ? 0 : due__sq_error(s, rc, "count");
}

/* due__flow_ops.running: tries of kind with a live lease (of group). */
static int sq_running(void *payload, const char *kind, const char *group,
		      due_time now, int64_t *n)
{
	due_store *s = ((sq_claim *)payload)->s;
	sqlite3_stmt *st = stmt(s, group ? ST_K_GROUP_RUNNING : ST_K_RUNNING);

	if (!st)
		return due_error_last_code();
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	if (group)
		sqlite3_bind_text(st, 2, group, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, group ? 3 : 2, now);
	return count_of(s, st, n, NULL);
}

/* due__flow_ops.rate: claims of kind logged after since, and the oldest. */
static int sq_rate(void *payload, const char *kind, due_time since,
		   int64_t *used, due_time *oldest)
{
	due_store *s = ((sq_claim *)payload)->s;
	sqlite3_stmt *st = stmt(s, ST_K_RATE);

	if (!st)
		return due_error_last_code();
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, since);
	return count_of(s, st, used, oldest);
}

/* due__flow_ops.log: the rate log and its trim, the held counters. */
static int sq_log(void *payload, const due__flow_kind *k, due_time now,
		  int64_t logged, int held)
{
	due_store *s = ((sq_claim *)payload)->s;
	sqlite3_stmt *st;
	int rc;

	for (int64_t i = 0; i < logged; i++) {
		if (!(st = stmt(s, ST_RATE_LOG)))
			return due_error_last_code();
		sqlite3_bind_text(st, 1, k->kind, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, now);
		if ((rc = due__sq_exec(s, st, "log rate")) < 0)
			return rc;
	}
	if (logged) {
		if (!(st = stmt(s, ST_RATE_TRIM)))
			return due_error_last_code();
		sqlite3_bind_text(st, 1, k->kind, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, now - k->rate_us);
		if ((rc = due__sq_exec(s, st, "trim rate")) < 0)
			return rc;
	}
	if (!held)
		return 0;
	if (!(st = stmt(s, ST_KIND_HELD)))
		return due_error_last_code();
	sqlite3_bind_text(st, 1, k->kind, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 2, (held & DUE__HELD_RATE) != 0);
	sqlite3_bind_int(st, 3, (held & DUE__HELD_RUNNING) != 0);
	sqlite3_bind_int(st, 4, (held & DUE__HELD_GROUP) != 0);
	return due__sq_exec(s, st, "count held");
}

/* due__flow_ops.groups: the live tries of every group of kind into g. */
static int sq_groups(void *payload, const char *kind, due_time now,
		     due__groups *g)
{
	due_store *s = ((sq_claim *)payload)->s;
	sqlite3_stmt *st = stmt(s, ST_K_GROUPS);
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, now);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t *slot =
		    due__group_slot(g, (const char *)sqlite3_column_text(st, 0),
				    (size_t)sqlite3_column_bytes(st, 0));
		if (!slot) {
			sqlite3_reset(st);
			return due__error_set(DUE_ENOMEM, "out of memory");
		}
		*slot = sqlite3_column_int64(st, 1);
	}
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : due__sq_error(s, rc, "count groups");
}

static int claim_picked(due_store *s, due_task_list *l, size_t from,
			const char *owner, due_time now, int64_t lease_us);
static int collect_tasks(due_store *s, sqlite3_stmt *st, due_task_list *l,
			 size_t cap, const char *what);

/*
** due__flow_ops.take_kind: the due tasks of kind p->k in (priority,
** due_at) order, each as due__flow_pick says, then claimed.
*/
static int sq_take_kind(void *payload, due__flow_pass *p)
{
	sq_claim *c = payload;
	due_store *s = c->s;
	due_task_list *l = c->l;
	sqlite3_stmt *st = stmt(s, ST_K_PICK);
	SQ_ROWS(r, s, st, "claim");
	size_t from = l->count;
	int rc, v = 0;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_text(st, 1, p->k->kind, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, p->now);
	while ((rc = r.ops->next(r.cur)) > 0) {
		size_t n = 0;
		const char *grp = r.ops->bytes(r.cur, DUE_TC_GRP, &n);
		if ((v = due__flow_pick(p, grp, n)) < 0 || v == DUE__PICK_STOP)
			break;
		if (v == DUE__PICK_TAKE &&
		    (rc = due__row_task(&r, &l->items[l->count++])) < 0)
			break;
	}
	sqlite3_reset(st);
	if (v < 0 || rc < 0)
		return v < 0 ? v : rc;
	return claim_picked(s, l, from, c->owner, p->now, c->lease_us);
}

/*
** The pick of the plain claim, for n_kinds kinds and with the kinds that
** have limits or are paused left out (filtered), prepared once per shape:
** the due tasks of one priority (?1) in due_at order, through
** due_task_claim.
*/
static sqlite3_stmt *claim_stmt(due_store *s, size_t n_kinds, bool exclude,
				bool filtered)
{
	char sql[2048 + 16 * 64];
	size_t off;
	int rc;

	if (s->claim && s->claim_kinds == n_kinds &&
	    s->claim_exclude == exclude && s->claim_flow == filtered) {
		sqlite3_reset(s->claim);
		sqlite3_clear_bindings(s->claim);
		due__sq_work_use(s, s->claim);
		return s->claim;
	}
	if (n_kinds > 64) {
		due__error_set(DUE_EINVAL, "too many kinds (at most 64)");
		return NULL;
	}
	due__sq_work_take(s, s->claim);
	sqlite3_finalize(s->claim);
	s->claim = NULL;
	off = (size_t)snprintf(sql, sizeof(sql),
			       "SELECT " DUE_TASK_COLS
			       " FROM due_task INDEXED BY due_task_claim"
			       " WHERE state = 'SCHEDULED' AND priority = ?1"
			       " AND due_at <= ?2");
	for (size_t i = 0; i < n_kinds; i++)
		off += (size_t)snprintf(sql + off, sizeof(sql) - off, "%s?%zu",
					i	  ? ", "
					: exclude ? " AND kind NOT IN ("
						  : " AND kind IN (",
					i + 4);
	if (n_kinds)
		off += (size_t)snprintf(sql + off, sizeof(sql) - off, ")");
	if (filtered)
		off += (size_t)snprintf(
		    sql + off, sizeof(sql) - off,
		    " AND NOT EXISTS (SELECT 1 FROM due_kind k"
		    " WHERE k.kind = due_task.kind AND " FLOW_KIND ")");
	snprintf(sql + off, sizeof(sql) - off, " ORDER BY due_at LIMIT ?3");
	rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
				&s->claim, NULL);
	if (rc != SQLITE_OK) {
		due__sq_error(s, rc, "prepare claim");
		return NULL;
	}
	s->claim_kinds = n_kinds;
	s->claim_exclude = exclude;
	s->claim_flow = filtered;
	due__sq_work_use(s, s->claim);
	return s->claim;
}

/* The lowest priority above `after` that a scheduled task has; *none. */
static int prio_next(due_store *s, int64_t after, int64_t *p, bool *none)
{
	sqlite3_stmt *st = stmt(s, ST_PRIO_NEXT);
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, after);
	rc = sqlite3_step(st);
	*none = rc != SQLITE_ROW || sqlite3_column_type(st, 0) == SQLITE_NULL;
	*p = *none ? 0 : sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	return rc == SQLITE_ROW ? 0 : due__sq_error(s, rc, "claim priority");
}

/* due__flow_ops.prio_next */
static int sq_prio_next(void *payload, int64_t after, int64_t *p, bool *none)
{
	return prio_next(((sq_claim *)payload)->s, after, p, none);
}

/* due__flow_ops.take_prio: one priority's due tasks, picked, claimed. */
static int sq_take_prio(void *payload, const due__flow *f, int64_t prio,
			int want, int64_t *taken)
{
	sq_claim *c = payload;
	due_task_list *l = c->l;
	size_t from = l->count;
	sqlite3_stmt *st =
	    claim_stmt(c->s, f->n_kinds, f->exclude, f->filtered);
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, prio);
	sqlite3_bind_int64(st, 2, f->now);
	sqlite3_bind_int(st, 3, want);
	for (size_t i = 0; i < f->n_kinds; i++)
		sqlite3_bind_text(st, (int)i + 4, f->kinds[i], -1,
				  SQLITE_STATIC);
	if ((rc = collect_tasks(c->s, st, l, from + (size_t)want, "claim")) < 0)
		return rc;
	*taken = (int64_t)(l->count - from);
	return claim_picked(c->s, l, from, c->owner, f->now, c->lease_us);
}

/* due__flow_ops.id_kind: the kind and group of task id, when due. */
static int sq_id_kind(void *payload, due_id id, due_time now, char **kind,
		      char **grp)
{
	due_store *s = ((sq_claim *)payload)->s;
	sqlite3_stmt *st = stmt(s, ST_ID_KIND);
	const char *k, *g;
	int rc;

	*kind = *grp = NULL;
	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, now);
	if ((rc = sqlite3_step(st)) != SQLITE_ROW) {
		sqlite3_reset(st);
		return rc == SQLITE_DONE ? 0 : due__sq_error(s, rc, "claim");
	}
	k = (const char *)sqlite3_column_text(st, 0);
	g = (const char *)sqlite3_column_text(st, 1);
	*kind = k ? due__strdup_n(k, strlen(k)) : NULL;
	*grp = g ? due__strdup_n(g, strlen(g)) : NULL;
	sqlite3_reset(st);
	return !*kind || (g && !*grp)
		   ? due__error_set(DUE_ENOMEM, "out of memory")
		   : 0;
}

/* due__flow_ops.take_id: claim task id when it is due. */
static int sq_take_id(void *payload, due_id id, due_time now, int64_t *taken)
{
	sq_claim *c = payload;
	sqlite3_stmt *st = stmt(c->s, ST_CLAIM_ID);
	size_t from = c->l->count;
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_text(st, 1, c->owner, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, now);
	sqlite3_bind_int64(st, 3, c->lease_us);
	sqlite3_bind_int64(st, 4, id);
	rc = collect_tasks(c->s, st, c->l, from + 1, "claim");
	*taken = (int64_t)(c->l->count - from);
	return rc;
}

static const due__flow_ops sq_flow = {
    .running = sq_running,
    .rate = sq_rate,
    .groups = sq_groups,
    .take_kind = sq_take_kind,
    .prio_next = sq_prio_next,
    .take_prio = sq_take_prio,
    .id_kind = sq_id_kind,
    .take_id = sq_take_id,
    .log = sq_log,
};

/* Is anything due?  A lock-free read that keeps empty polls cheap. */
static int peek(due_store *s, enum stmt_id id, due_time now, bool *any)
{
	sqlite3_stmt *st = stmt(s, id);
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, now);
	rc = sqlite3_step(st);
	*any = rc == SQLITE_ROW;
	sqlite3_reset(st);
	return rc == SQLITE_ROW || rc == SQLITE_DONE
		   ? 0
		   : due__sq_error(s, rc, "peek");
}

/* Step a DUE_TASK_COLS statement into a list (at most cap rows). */
static int collect_tasks(due_store *s, sqlite3_stmt *st, due_task_list *l,
			 size_t cap, const char *what)
{
	SQ_ROWS(r, s, st, what);
	int rc = due__rows_tasks(&r, l, cap);

	sqlite3_reset(st);
	return rc;
}

/*
** Item i of a JSON array of integers written at buf + *off (cap bytes in
** all; 21 an integer): "[" before the first, "," before the others; the
** caller writes the closing "]".  By hand, not with jansson: these arrays
** carry a statement's ids on the claim's and the completion's hot path.
*/
static void json_int(char *buf, size_t cap, size_t *off, size_t i, int64_t v)
{
	*off += (size_t)snprintf(buf + *off, cap - *off, "%c%" PRId64,
				 i ? ',' : '[', v);
}

/* The same for an item that is the pair [v, w] (43 bytes). */
static void json_pair(char *buf, size_t cap, size_t *off, size_t i, int64_t v,
		      int64_t w)
{
	*off += (size_t)snprintf(buf + *off, cap - *off,
				 "%c[%" PRId64 ",%" PRId64 "]", i ? ',' : '[',
				 v, w);
}

/*
** Claim the picked rows l->items[from..].  We hold SQLite's only write
** lock (BEGIN IMMEDIATE) from the pick to the commit, so no other claim
** can interleave; the update still re-checks state = 'SCHEDULED' itself.
** Two or more rows: one UPDATE over a JSON array of their ids (issue 39:
** one statement a claim instead of one a task; a statement's own cost,
** its cursors on the table and every index opened and closed, was most
** of a one-row update: 136M -> 113M instructions for 4,000 tasks at
** c=16, drain 7-8 % faster).  From CLAIM_MANY_MIN rows: below, the
** array, json_each and the IN list's ephemeral index cost more than the
** statements they spare (callgrind, worker threads, 5,000 tasks: batches
** of 4 +2 %, of 8 -3 %, of 16 -6 %).  No RETURNING (SQLite would run it to its
** end into an ephemeral b-tree): the rows changed must be all of them,
** as under the lock they are; if not, the call fails and its transaction
** is rolled back (a store bug, not a state to claim through).  Fewer
** rows: each by primary key, dropped from the list when it did not change.
*/
enum { CLAIM_MANY_MIN = 6 };
static int fenced(due_store *s, sqlite3_stmt *st, const char *what, bool *hit);

/* The claimed row as the update wrote it. */
static int claimed(due_task *t, const char *owner, due_time now,
		   int64_t lease_us)
{
	t->state = DUE_CLAIMED;
	t->attempt++;
	t->lease_until = now + lease_us;
	t->updated_at = now;
	free(t->lease_owner);
	if (!(t->lease_owner = due__strdup_n(owner, strlen(owner))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	return 0;
}

static int claim_many(due_store *s, due_task_list *l, size_t from,
		      const char *owner, due_time now, int64_t lease_us)
{
	size_t n = l->count - from, cap = 1 + n * 21, off = 0;
	sqlite3_stmt *st = stmt(s, ST_CLAIM_MANY);
	char *ids;
	int rc;

	if (!st)
		return due_error_last_code();
	if (!(ids = malloc(cap)))
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t i = from; i < l->count; i++)
		json_int(ids, cap, &off, i - from, l->items[i].id);
	ids[off++] = ']';
	sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, now + lease_us);
	sqlite3_bind_int64(st, 3, now);
	sqlite3_bind_text(st, 4, ids, (int)off, SQLITE_STATIC);
	rc = due__sq_exec(s, st, "claim");
	free(ids);
	if (rc < 0)
		return rc;
	if ((size_t)sqlite3_changes(s->db) != n)
		return due__error_set(DUE_ERROR,
				      "claim: %d of %zu picked task(s) changed "
				      "under the write lock (store bug)",
				      sqlite3_changes(s->db), n);
	for (size_t i = from; i < l->count; i++)
		if ((rc = claimed(&l->items[i], owner, now, lease_us)) < 0)
			return rc;
	return 0;
}

static int claim_picked(due_store *s, due_task_list *l, size_t from,
			const char *owner, due_time now, int64_t lease_us)
{
	size_t kept = from;

	if (l->count - from >= CLAIM_MANY_MIN)
		return claim_many(s, l, from, owner, now, lease_us);
	for (size_t i = from; i < l->count; i++) {
		due_task *t = &l->items[i];
		sqlite3_stmt *st = stmt(s, ST_CLAIM_ONE);
		bool hit;
		int rc;
		if (!st)
			return due_error_last_code();
		sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, now + lease_us);
		sqlite3_bind_int64(st, 3, now);
		sqlite3_bind_int64(st, 4, t->id);
		if ((rc = fenced(s, st, "claim", &hit)) < 0)
			return rc;
		if (!hit) { /* not reachable under the write lock; drop it */
			due__task_clear(t);
			continue;
		}
		if ((rc = claimed(t, owner, now, lease_us)) < 0)
			return rc;
		l->items[kept++] = *t;
	}
	l->count = kept;
	return 0;
}

/*
** The claim inside an open transaction, as flow.c plans it: limited
** kinds, then the rest; each task carries the time limit of its try.  No
** attempt row: the running try is its task row's until it ends
** (schema_v6).  now is the transaction's clock.  Fills l (capacity limit).
*/
static int claim_locked(due_store *s, due_task_list *l, const char *owner,
			const char *const *kinds, size_t n_kinds, bool exclude,
			int limit, int64_t lease_us, due_id only_id,
			due_time now)
{
	sq_claim c = {s, l, owner, lease_us};
	due__flow f = {.now = now,
		       .kinds = kinds,
		       .n_kinds = n_kinds,
		       .exclude = exclude,
		       .ops = &sq_flow,
		       .payload = &c};
	int rc;

	if ((rc = flow_read(s, &f)) == 0 &&
	    (rc = due__flow_claim(&f, l, limit, only_id)) == 0)
		due__flow_finish(&f, l);
	due__flow_free(&f);
	return rc;
}

static int complete_one(due_store *s, due_completion *c, due_time now,
			bool edges, due_tx_hook hook, void *payload);
static int complete_many(due_store *s, due_completion *items, size_t n,
			 due_time now, bool edges);

/*
** *any: the store has a run-after edge (a row of due_after), read once
** under the write lock for a batch of completions: none means no task
** of the batch has a child, and each skips after_end's probe.  One read
** instead of one a task (issue 39: 2k instructions a task).  Only where
** no caller code runs between the completions (due__sq_complete_claim):
** a hook of due__sq_complete may submit a child of a task the same batch
** completes later, so that path probes each task.
*/
static int any_edge(due_store *s, bool *any)
{
	sqlite3_stmt *st = stmt(s, ST_ANY_EDGE);
	int64_t last = 1; /* max(parent): NULL reads 0, and ids start at 1 */
	int rc = st ? count_of(s, st, &last, NULL) : due_error_last_code();

	*any = rc < 0 || last != 0;
	return rc;
}

/* Whether a completion batch finished a task (due_wait's wake-up). */
static bool any_ended(const due_completion *items, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (items[i].outcome != DUE_COMPLETE_REJECTED_STALE)
			return true;
	return false;
}

/* Complete n tries, then claim: one BEGIN IMMEDIATE, one COMMIT. */
static int due__sq_complete_claim(due_store *s, due_completion *items, size_t n,
				  const char *owner, const char *const *kinds,
				  size_t n_kinds, bool exclude, int limit,
				  int64_t lease_us, due_task_list **out)
{
	due_task_list *l;
	bool edges = true;
	due_time now;
	int rc;

	*out = NULL;
	if ((rc = due__task_list_alloc(&l, (size_t)limit)) < 0)
		return rc;
	if ((rc = due__sq_begin(s)) < 0)
		goto fail;
	now = due_time_now_host();
	if (n > 1 && (rc = any_edge(s, &edges)) < 0)
		goto fail;
	if ((rc = complete_many(s, items, n, now, edges)) < 0)
		goto fail;
	if ((rc = claim_locked(s, l, owner, kinds, n_kinds, exclude, limit,
			       lease_us, 0, now)) < 0 ||
	    (rc = due__sq_commit_done(s, any_ended(items, n))) < 0)
		goto fail;
	*out = l;
	return 0;
fail:
	due__sq_rollback(s);
	due_task_list_free(l);
	return rc;
}

static int due__sq_claim(due_store *s, due_task_list **out, const char *owner,
			 const char *const *kinds, size_t n_kinds, bool exclude,
			 int limit, int64_t lease_us, due_id only_id)
{
	due_task_list *l;
	due_time now = due_time_now_host();
	bool any = true;
	int rc;

	if ((rc = due__task_list_alloc(&l, (size_t)limit)) < 0)
		return rc;
	if (!only_id && (rc = peek(s, ST_PEEK_DUE, now, &any)) < 0)
		goto out;
	if (!any) { /* nothing due: an empty list, no write lock taken */
		*out = l;
		return 0;
	}
	if ((rc = due__sq_begin(s)) < 0)
		goto out;
	now = due_time_now_host();
	if ((rc = claim_locked(s, l, owner, kinds, n_kinds, exclude, limit,
			       lease_us, only_id, now)) < 0 ||
	    (rc = due__sq_commit(s)) < 0) {
		due__sq_rollback(s);
		goto out;
	}
	*out = l;
	return 0;
out: /* an error leaves *out NULL and nothing allocated */
	due_task_list_free(l);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Extend, complete, fail                                              */
/* ------------------------------------------------------------------ */

/*
** Current (state, attempt, cancel_requested) of a task; found=false if
** none.  Every output is written first, so a caller never reads an
** unset one, whatever the path (the Release build checks this).
*/
static int state_of(due_store *s, due_id id, bool *found, due_state *state,
		    int32_t *attempt, bool *cancel)
{
	sqlite3_stmt *st = stmt(s, ST_STATE_OF);
	int rc;

	*found = false;
	*state = DUE_SCHEDULED;
	*attempt = 0;
	*cancel = false;
	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, id);
	rc = sqlite3_step(st);
	*found = rc == SQLITE_ROW;
	if (*found) {
		if (due__sq_col_state(st, 0, state) < 0) {
			sqlite3_reset(st);
			return DUE_ERROR;
		}
		*attempt = sqlite3_column_int(st, 1);
		*cancel = sqlite3_column_int(st, 2) != 0;
	}
	sqlite3_reset(st);
	return rc == SQLITE_ROW || rc == SQLITE_DONE
		   ? 0
		   : due__sq_error(s, rc, "read state");
}

static int due__sq_extend(due_store *s, due_extend_outcome *out, due_id id,
			  int32_t attempt, int64_t lease_us)
{
	sqlite3_stmt *st;
	bool found, cancel;
	due_state state;
	int32_t cur;
	int rc;

	if ((rc = due__sq_begin(s)) < 0)
		return rc;
	if (!(st = stmt(s, ST_EXTEND))) {
		rc = due_error_last_code();
		goto fail;
	}
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int(st, 2, attempt);
	sqlite3_bind_int64(st, 3, due_time_now_host());
	sqlite3_bind_int64(st, 4, lease_us);
	if ((rc = due__sq_exec(s, st, "extend")) < 0)
		goto fail;
	*out = DUE_EXTEND_OK;
	if (sqlite3_changes(s->db) == 0) {
		if ((rc = state_of(s, id, &found, &state, &cur, &cancel)) < 0)
			goto fail;
		*out = found && state == DUE_CLAIMED && cur == attempt && cancel
			   ? DUE_EXTEND_CANCEL_REQUESTED
			   : DUE_EXTEND_LOST;
	}
	return due__sq_commit(s);
fail:
	due__sq_rollback(s);
	return rc;
}

/*
** How a try ends: its outcome and error, and those when a cancel was
** asked while it ran (cancel_requested, read in the statement).
*/
typedef struct try_end {
	const char *outcome, *error;
	const char *cancel_outcome, *cancel_error;
} try_end;

/*
** End the running try of task id (of `attempt`, or whichever runs when
** attempt is 0): insert its finished attempt row from the task row, which
** must still be CLAIMED, so before the update that moves the task on.
** *ended: a try was running (1 row written).  Inside the transaction.
*/
static int close_try(due_store *s, due_id id, int32_t attempt, due_time now,
		     const try_end *e, bool *ended)
{
	sqlite3_stmt *st = stmt(s, ST_ATTEMPT_CLOSE);
	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, id);
	if (attempt > 0)
		sqlite3_bind_int(st, 2, attempt);
	sqlite3_bind_int64(st, 3, now);
	sqlite3_bind_text(st, 4, e->outcome, -1, SQLITE_STATIC);
	if (e->error)
		sqlite3_bind_text(st, 5, e->error, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, e->cancel_outcome, -1, SQLITE_STATIC);
	if (e->cancel_error)
		sqlite3_bind_text(st, 7, e->cancel_error, -1, SQLITE_STATIC);
	return fenced(s, st, "end attempt", ended);
}

/* The task update after close_try missed its row: not reachable. */
static int close_disagrees(due_id id, const char *what)
{
	return due__error_set(DUE_ERROR,
			      "%s of task %lld: its try ended but the task "
			      "did not change (store bug)",
			      what, (long long)id);
}

/* Mark (id, attempt)'s history row: its late commit was refused. */
static int mark_late(due_store *s, due_id id, int32_t attempt)
{
	sqlite3_stmt *st = stmt(s, ST_LATE_MARK);
	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int(st, 2, attempt);
	return due__sq_exec(s, st, "mark late commit");
}

/* Run a fenced update bound with (id, attempt, extra...); *hit = 1 row changed.
 */
static int fenced(due_store *s, sqlite3_stmt *st, const char *what, bool *hit)
{
	int rc = due__sq_exec(s, st, what);
	*hit = rc == 0 && sqlite3_changes(s->db) == 1;
	return rc;
}

/* ------------------------------------------------------------------ */
/* Run after: the release, part of every finish                        */
/* ------------------------------------------------------------------ */

/* A growable list of task ids (the release's work). */
typedef struct id_list {
	due_id *v;
	size_t n, cap;
} id_list;

static int ids_push(id_list *l, due_id id)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		due_id *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return due__error_set(DUE_ENOMEM, "out of memory");
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = id;
	return 0;
}

/*
** The children whose edge from `parent` has not been counted, appended to
** out, and those edges marked counted.  A parent without children costs
** the one probe of ST_CHILDREN.
*/
static int children_take(due_store *s, due_id parent, id_list *out)
{
	sqlite3_stmt *st = stmt(s, ST_CHILDREN);
	size_t from = out->n;
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, parent);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if ((rc = ids_push(out, sqlite3_column_int64(st, 0))) < 0)
			break;
	sqlite3_reset(st);
	if (rc < 0)
		return rc;
	if (rc != SQLITE_DONE)
		return due__sq_error(s, rc, "read children");
	if (out->n == from)
		return 0;
	if (!(st = stmt(s, ST_EDGES_END)))
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, parent);
	return due__sq_exec(s, st, "count edges");
}

/*
** Child `child`'s edge from `parent`, which ended in state `ended`: read
** what the child waits for (nothing when it is no longer held: cancelled,
** killed); a DONE parent, or any end for an after_any_end child, counts
** it down (ST_COUNT_DOWN, or ST_RELEASE for the last: the child is due,
** s->wake_pending set so that the commit wakes the workers); any other
** end cancels it (*cancelled).  Each write re-checks what was read.
*/
static int release_one(due_store *s, due_id child, due_id parent,
		       due_state ended, due_time now, bool *cancelled)
{
	sqlite3_stmt *st = stmt(s, ST_HELD_OF);
	int64_t left = 0;
	bool any = false, hit;
	char why[96];
	int rc;

	*cancelled = false;
	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, child);
	if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		left = sqlite3_column_int64(st, 0);
		any = sqlite3_column_int(st, 1) != 0;
	}
	sqlite3_reset(st);
	if (rc != SQLITE_ROW)
		return rc == SQLITE_DONE ? 0
					 : due__sq_error(s, rc, "read child");
	bool counts = ended == DUE_DONE || any;
	if (!(st = stmt(s, !counts    ? ST_CANCEL_HELD
			   : left > 1 ? ST_COUNT_DOWN
				      : ST_RELEASE)))
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, child);
	sqlite3_bind_int64(st, 2, now);
	if (!counts) {
		snprintf(why, sizeof(why), "parent task %lld ended %s",
			 (long long)parent, due_state_name(ended));
		sqlite3_bind_text(st, 3, why, -1, SQLITE_TRANSIENT);
	}
	if ((rc = fenced(s, st, "release child", &hit)) < 0)
		return rc;
	if (!hit) /* not reachable under the write lock */
		return due__error_set(DUE_ERROR,
				      "task %lld: held, but its release by "
				      "task %lld changed nothing (store bug)",
				      (long long)child, (long long)parent);
	*cancelled = !counts;
	if (counts && left == 1)
		s->wake_pending = true;
	return 0;
}

/*
** Task id has just ended in state `ended` (DONE, DEAD or CANCELLED),
** inside the transaction that ended it: each held child of it counts the
** end down (released at its last parent: due at the later of its own
** instant and now + its own delay), or, when the end was DEAD or
** CANCELLED and the child is not after_any_end, is CANCELLED itself, and
** then its own held children the same way.  Iterative (a list of the
** tasks cancelled so far, each taken in turn): a chain of any length
** costs no stack.  Each edge is counted once (children_take marks it),
** so a DEAD parent retried and then DONE, or killed again to CANCELLED,
** releases nothing twice and un-cancels nothing.
*/
static int after_end(due_store *s, due_id id, due_state ended, due_time now)
{
	id_list todo = {0}, kids = {0};
	due_id parent = id;
	size_t next = 0;
	int rc = children_take(s, id, &kids);

	/* the common case, no children: that probe, no allocation */
	while (rc == 0 && kids.n) {
		for (size_t k = 0; rc == 0 && k < kids.n; k++) {
			bool cancelled = false;
			rc = release_one(s, kids.v[k], parent,
					 parent == id ? ended : DUE_CANCELLED,
					 now, &cancelled);
			if (rc == 0 && cancelled)
				rc = ids_push(&todo, kids.v[k]);
		}
		kids.n = 0;
		/* the next cancelled task with children, in turn */
		while (rc == 0 && !kids.n && next < todo.n)
			rc = children_take(s, parent = todo.v[next++], &kids);
	}
	free(todo.v);
	free(kids.v);
	return rc;
}

/* after_end when `state` ends a task (DONE, DEAD, CANCELLED). */
static int after_if_ended(due_store *s, due_id id, due_state state,
			  due_time now)
{
	return state == DUE_DONE || state == DUE_DEAD || state == DUE_CANCELLED
		   ? after_end(s, id, state, now)
		   : 0;
}

/* A CLAIMED try of c whose cancel was asked ends CANCELLED at its commit. */
static int end_cancelled(due_store *s, const due_completion *c, due_time now,
			 bool *hit)
{
	sqlite3_stmt *st = stmt(s, ST_COMPLETE_CANCEL);

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, c->id);
	sqlite3_bind_int(st, 2, c->attempt);
	sqlite3_bind_int64(st, 3, now);
	return fenced(s, st, "complete (cancelled)", hit);
}

/*
** One completion inside the open transaction: the try's attempt row (DONE,
** or CANCELLED when a cancel was asked), then the task; no running try of
** that attempt is a late commit.  edges: the store may have run-after
** edges (false only when any_edge read none in this transaction).
*/
static int complete_one(due_store *s, due_completion *c, due_time now,
			bool edges, due_tx_hook hook, void *payload)
{
	static const try_end done = {"DONE", NULL, "CANCELLED",
				     "cancel requested before commit"};
	sqlite3_stmt *st;
	bool hit;
	int rc;

	if ((rc = close_try(s, c->id, c->attempt, now, &done, &hit)) < 0)
		return rc;
	if (!hit) {
		c->outcome = DUE_COMPLETE_REJECTED_STALE;
		return mark_late(s, c->id, c->attempt);
	}
	if (!(st = stmt(s, ST_COMPLETE)))
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, c->id);
	sqlite3_bind_int(st, 2, c->attempt);
	sqlite3_bind_blob(st, 3, c->result ? c->result : "", (int)c->result_len,
			  SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, now);
	if ((rc = fenced(s, st, "complete", &hit)) < 0)
		return rc;
	if (hit) {
		c->outcome = DUE_COMPLETE_DONE;
		if (edges && (rc = after_end(s, c->id, DUE_DONE, now)) < 0)
			return rc;
		return hook ? due__store_run_hook(hook, s->db, c, payload) : 0;
	}
	if ((rc = end_cancelled(s, c, now, &hit)) < 0)
		return rc;
	if (!hit)
		return close_disagrees(c->id, "complete");
	c->outcome = DUE_COMPLETE_CANCELLED_BEFORE_COMMIT;
	return edges ? after_end(s, c->id, DUE_CANCELLED, now) : 0;
}

/*
** The completions of one call with no hook (due__sq_complete_claim), in
** two statements for up to DONE_CHUNK of them instead of two each (issue
** 39: a statement's own cost, its cursors on the table and each index,
** was most of a one-row write): ST_CLOSE_MANY ends every try named, then
** one ST_DONE_MANY a chunk writes the results, fenced on (id, attempt,
** CLAIMED, no cancel asked) per row as ST_COMPLETE is.  Any other case
** goes item by item, as complete_one: fewer than DONE_MANY_MIN (at four
** the two ways cost the same, callgrind), a task named twice,
** or a try that was not running (a stale completion: the first statement
** changed fewer rows than items; its rows are written again by the same
** upsert, which changes nothing).  A chunk that wrote fewer rows than its
** items holds cancels asked before commit: those end CANCELLED, one by
** one.  All under the write lock, so nothing moves between the
** statements; run after's releases follow their chunk's write (a child
** is held until its parents end, so it is never one of the tries here).
*/
enum { DONE_CHUNK = ST_DONE_MANY_END - ST_DONE_MANY + 1, DONE_MANY_MIN = 4 };

static bool same_task_twice(const due_completion *items, size_t n)
{
	for (size_t i = 1; i < n; i++)
		for (size_t j = 0; j < i; j++)
			if (items[i].id == items[j].id)
				return true;
	return false;
}

/* ST_DONE_MANY for k items: ?1 now, item j at ?(2+3j) id, ?(3+3j) result,
   ?(4+3j) attempt; its text made only the first time it is prepared */
static sqlite3_stmt *done_stmt(due_store *s, size_t k)
{
	int id = ST_DONE_MANY + (int)k - 1;
	char sql[512 + DONE_CHUNK * 96];
	size_t off = 0;

	if (s->st[id])
		return due__sq_stmt(s, id, NULL);
#define ADD(...)                                                               \
	off += (size_t)snprintf(sql + off, sizeof(sql) - off, __VA_ARGS__)
	ADD("UPDATE due_task SET state = 'DONE', result = CASE id");
	for (size_t j = 0; j < k; j++)
		ADD(" WHEN ?%zu THEN ?%zu", 2 + 3 * j, 3 + 3 * j);
	ADD(" END, last_error = NULL, lease_owner = NULL, lease_until = NULL,"
	    " updated_at = ?1 WHERE id IN (");
	for (size_t j = 0; j < k; j++)
		ADD("%s?%zu", j ? ", " : "", 2 + 3 * j);
	ADD(") AND state = 'CLAIMED' AND cancel_requested = 0"
	    " AND attempt = CASE id");
	for (size_t j = 0; j < k; j++)
		ADD(" WHEN ?%zu THEN ?%zu", 2 + 3 * j, 4 + 3 * j);
	ADD(" END");
#undef ADD
	return due__sq_stmt(s, id, sql);
}

/* The chunk's tries that did not end DONE: cancelled before commit. */
static int done_rest(due_store *s, due_completion *items, size_t k,
		     due_time now)
{
	for (size_t j = 0; j < k; j++) {
		due_completion *c = &items[j];
		sqlite3_stmt *st;
		bool hit = false;
		int rc;

		if ((rc = end_cancelled(s, c, now, &hit)) < 0)
			return rc;
		if (hit) {
			c->outcome = DUE_COMPLETE_CANCELLED_BEFORE_COMMIT;
			continue;
		}
		if (!(st = stmt(s, ST_STATE_OF)))
			return due_error_last_code();
		sqlite3_bind_int64(st, 1, c->id);
		rc = sqlite3_step(st);
		hit = rc == SQLITE_ROW &&
		      sqlite3_column_int(st, 1) == c->attempt &&
		      !strcmp((const char *)sqlite3_column_text(st, 0), "DONE");
		sqlite3_reset(st);
		if (rc != SQLITE_ROW && rc != SQLITE_DONE)
			return due__sq_error(s, rc, "complete");
		if (!hit)
			return close_disagrees(c->id, "complete");
		c->outcome = DUE_COMPLETE_DONE;
	}
	return 0;
}

static int done_chunk(due_store *s, due_completion *items, size_t k,
		      due_time now, bool edges)
{
	sqlite3_stmt *st = done_stmt(s, k);
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, now);
	for (size_t j = 0; j < k; j++) {
		const due_completion *c = &items[j];
		sqlite3_bind_int64(st, (int)(2 + 3 * j), c->id);
		sqlite3_bind_blob(st, (int)(3 + 3 * j),
				  c->result ? c->result : "",
				  (int)c->result_len, SQLITE_STATIC);
		sqlite3_bind_int(st, (int)(4 + 3 * j), c->attempt);
	}
	if ((rc = due__sq_exec(s, st, "complete")) < 0)
		return rc;
	if ((size_t)sqlite3_changes(s->db) == k)
		for (size_t j = 0; j < k; j++)
			items[j].outcome = DUE_COMPLETE_DONE;
	else if ((rc = done_rest(s, items, k, now)) < 0)
		return rc;
	for (size_t j = 0; edges && j < k; j++)
		if ((rc = after_end(s, items[j].id,
				    items[j].outcome == DUE_COMPLETE_DONE
					? DUE_DONE
					: DUE_CANCELLED,
				    now)) < 0)
			return rc;
	return 0;
}

static int complete_many(due_store *s, due_completion *items, size_t n,
			 due_time now, bool edges)
{
	static const try_end done = {"DONE", NULL, "CANCELLED",
				     "cancel requested before commit"};
	size_t cap = 1 + n * 43, off = 0;
	sqlite3_stmt *st;
	char *pairs;
	int rc;

	if (n >= DONE_MANY_MIN && !same_task_twice(items, n)) {
		if (!(st = stmt(s, ST_CLOSE_MANY)))
			return due_error_last_code();
		if (!(pairs = malloc(cap)))
			return due__error_set(DUE_ENOMEM, "out of memory");
		for (size_t i = 0; i < n; i++)
			json_pair(pairs, cap, &off, i, items[i].id,
				  items[i].attempt);
		pairs[off++] = ']';
		sqlite3_bind_text(st, 1, pairs, (int)off, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, now);
		sqlite3_bind_text(st, 3, done.outcome, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 5, done.cancel_outcome, -1,
				  SQLITE_STATIC);
		sqlite3_bind_text(st, 6, done.cancel_error, -1, SQLITE_STATIC);
		rc = due__sq_exec(s, st, "end attempt");
		free(pairs);
		if (rc < 0)
			return rc;
		if ((size_t)sqlite3_changes(s->db) == n) {
			for (size_t i = 0; i < n; i += DONE_CHUNK)
				if ((rc = done_chunk(s, items + i,
						     n - i < DONE_CHUNK
							 ? n - i
							 : DONE_CHUNK,
						     now, edges)) < 0)
					return rc;
			return 0;
		}
	}
	for (size_t i = 0; i < n; i++)
		if ((rc = complete_one(s, &items[i], now, edges, NULL, NULL)) <
		    0)
			return rc;
	return 0;
}

static int due__sq_complete(due_store *s, due_completion *items, size_t n,
			    due_tx_hook hook, void *payload)
{
	due_time now;
	int rc;

	if ((rc = due__sq_begin(s)) < 0)
		return rc;
	now = due_time_now_host();
	for (size_t i = 0; i < n; i++)
		if ((rc = complete_one(s, &items[i], now, true, hook,
				       payload)) < 0)
			goto fail;
	return due__sq_commit_done(s, any_ended(items, n));
fail:
	due__sq_rollback(s);
	return rc;
}

static int due__sq_fail(due_store *s, due_fail_outcome *out, due_id id,
			int32_t attempt, const char *error, due_outcome as)
{
	const try_end e = {as == DUE_OUT_TIMED_OUT ? "TIMED_OUT" : "FAILED",
			   error, "CANCELLED", error};
	sqlite3_stmt *st;
	due_time now;
	bool ended;
	int rc;

	if ((rc = due__sq_begin(s)) < 0)
		return rc;
	now = due_time_now_host();
	if ((rc = close_try(s, id, attempt, now, &e, &ended)) < 0)
		goto fail;
	if (!ended) { /* not its running try: a late commit */
		*out = DUE_FAIL_REJECTED_STALE;
		if ((rc = mark_late(s, id, attempt)) < 0)
			goto fail;
		return due__sq_commit(s);
	}
	if (!(st = stmt(s, ST_FAIL))) {
		rc = due_error_last_code();
		goto fail;
	}
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int(st, 2, attempt);
	sqlite3_bind_int64(st, 3, now);
	sqlite3_bind_text(st, 4, error, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		due_state ns = DUE_SCHEDULED;
		if (due__sq_col_state(st, 0, &ns) < 0) {
			sqlite3_reset(st);
			rc = DUE_ERROR;
			goto fail;
		}
		*out = due__fail_outcome_of(ns);
		sqlite3_reset(st);
		rc = after_if_ended(s, id, ns, now);
	} else if (rc == SQLITE_DONE) {
		sqlite3_reset(st);
		rc = close_disagrees(id, "fail");
	} else {
		sqlite3_reset(st);
		rc = due__sq_error(s, rc, "fail");
	}
	if (rc < 0)
		goto fail;
	return *out == DUE_FAIL_RETRY_SCHEDULED ? due__sq_commit_wake(s)
						: due__sq_commit_done(s, true);
fail:
	due__sq_rollback(s);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Reclaim                                                             */
/* ------------------------------------------------------------------ */

typedef struct reclaimed_row {
	due_id id;
	int32_t attempt;
	due_state state;
} reclaimed_row;

static int reclaim_batch(due_store *s, due_time now, due_reclaimed *out,
			 bool *more)
{
	reclaimed_row rows[1000];
	size_t n = 0;
	sqlite3_stmt *st = stmt(s, ST_ATTEMPT_RECLAIM);
	int64_t ended;
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, now);
	if ((rc = due__sq_exec(s, st, "end expired attempts")) < 0)
		return rc;
	ended = sqlite3_changes64(s->db);
	if (!(st = stmt(s, ST_RECLAIM)))
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, now);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < 1000) {
		rows[n].id = sqlite3_column_int64(st, 0);
		rows[n].attempt = sqlite3_column_int(st, 1);
		rows[n].state = DUE_SCHEDULED;
		if (due__sq_col_state(st, 2, &rows[n].state) < 0) {
			sqlite3_reset(st);
			return DUE_ERROR;
		}
		n++;
	}
	sqlite3_reset(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return due__sq_error(s, rc, "reclaim");
	for (size_t i = 0; i < n; i++) {
		if (rows[i].state == DUE_DEAD)
			out->dead++;
		else if (rows[i].state == DUE_CANCELLED)
			out->cancelled++;
		else
			out->rescheduled++;
		if ((rc = after_if_ended(s, rows[i].id, rows[i].state, now)) <
		    0)
			return rc;
	}
	if (ended != (int64_t)n)
		return due__error_set(DUE_ERROR,
				      "reclaim: %lld tries ended, %zu tasks "
				      "reclaimed (store bug)",
				      (long long)ended, n);
	*more = n == 1000;
	return 0;
}

/* Earliest lease expiry among CLAIMED tasks (0 when none): one index read. */
static int next_expiry(due_store *s, due_time *out)
{
	sqlite3_stmt *st = stmt(s, ST_PEEK_EXPIRED);
	int rc;

	if (!st)
		return due_error_last_code();
	rc = sqlite3_step(st);
	*out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
	sqlite3_reset(st);
	return rc == SQLITE_ROW ? 0 : due__sq_error(s, rc, "peek leases");
}

static int due__sq_reclaim(due_store *s, due_reclaimed *out)
{
	bool more = true;
	int rc;

	memset(out, 0, sizeof(*out));
	while (more) {
		out->now = due_time_now_host();
		if ((rc = next_expiry(s, &out->next_expiry)) < 0)
			return rc;
		if (out->next_expiry == 0 || out->next_expiry >= out->now)
			return 0;
		if ((rc = due__sq_begin(s)) < 0)
			return rc;
		if ((rc = reclaim_batch(s, due_time_now_host(), out, &more)) <
			0 ||
		    (rc = out->rescheduled ? due__sq_commit_wake(s)
					   : due__sq_commit(s)) < 0) {
			due__sq_rollback(s);
			return rc;
		}
		if (out->dead || out->cancelled) /* due_wait's wake-up */
			due__sq_notify_done(s);
		more = true; /* re-read the next expiry */
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Cancel, get, list                                                   */
/* ------------------------------------------------------------------ */

static int cancel_locked(due_store *s, due_cancel_outcome *out, due_id id)
{
	due_time now = due_time_now_host();
	bool found, cancel;
	due_state state;
	int32_t attempt;
	sqlite3_stmt *st;
	int rc;

	if ((rc = state_of(s, id, &found, &state, &attempt, &cancel)) < 0)
		return rc;
	*out = due__cancel_outcome_of(found, state);
	if (*out == DUE_CANCEL_CANCELLED)
		st = stmt(s, ST_CANCEL_SCHED);
	else if (*out == DUE_CANCEL_REQUESTED)
		st = stmt(s, ST_CANCEL_REQ);
	else
		return 0; /* nothing to write */
	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, now);
	if ((rc = due__sq_exec(s, st, "cancel")) < 0)
		return rc;
	/* a waiting task cancelled is a CANCELLED parent (held ones too) */
	return *out == DUE_CANCEL_CANCELLED && sqlite3_changes(s->db) == 1
		   ? after_end(s, id, DUE_CANCELLED, now)
		   : 0;
}

static int due__sq_cancel(due_store *s, due_cancel_outcome *out, due_id id)
{
	int rc;

	if ((rc = due__sq_begin(s)) < 0)
		return rc;
	if ((rc = cancel_locked(s, out, id)) < 0) {
		due__sq_rollback(s);
		return rc;
	}
	return due__sq_commit_done(s, *out == DUE_CANCEL_CANCELLED);
}

/*
** Reschedule under the write lock: read the state, and when SCHEDULED
** write the new due time (the host's clock, read under the lock: the
** store's) with the state re-checked in the UPDATE.
*/
static int reschedule_locked(due_store *s, due_reschedule_outcome *out,
			     due_id id, const due_reschedule_opts *o)
{
	due_time now = due_time_now_host();
	bool found, cancel;
	due_state state;
	int32_t attempt;
	sqlite3_stmt *st;
	int rc;

	if ((rc = state_of(s, id, &found, &state, &attempt, &cancel)) < 0)
		return rc;
	if ((*out = due__reschedule_outcome_of(found, state)) !=
	    DUE_RESCHEDULE_RESCHEDULED)
		return 0; /* nothing to write */
	if (!(st = stmt(s, ST_RESCHEDULE)))
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2,
			   o->at != DUE_TIME_NONE ? o->at : now + o->delay_us);
	sqlite3_bind_int(st, 3, o->set_payload);
	if (o->set_payload)
		sqlite3_bind_blob(st, 4, o->payload, (int)o->payload_len,
				  SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 4);
	sqlite3_bind_int64(st, 5, now);
	if (o->at != DUE_TIME_NONE) /* a held task's own time */
		sqlite3_bind_int64(st, 6, o->at);
	sqlite3_bind_int64(st, 7, o->at != DUE_TIME_NONE ? 0 : o->delay_us);
	return due__sq_exec(s, st, "reschedule");
}

static int due__sq_reschedule(due_store *s, due_reschedule_outcome *out,
			      due_id id, const due_reschedule_opts *o)
{
	due_submit one = {.payload = o->payload, .payload_len = o->payload_len};
	int rc;

	if ((o->set_payload &&
	     (rc = sq_payloads_fit(s->db, s->path, &one, 1)) < 0) ||
	    (rc = due__sq_begin(s)) < 0)
		return rc;
	if ((rc = reschedule_locked(s, out, id, o)) < 0) {
		due__sq_rollback(s);
		return rc;
	}
	return *out == DUE_RESCHEDULE_RESCHEDULED ? due__sq_commit_wake(s)
						  : due__sq_commit(s);
}

/* The attempt history of task t (ordered by attempt). */
static int load_attempts(due_store *s, due_task *t)
{
	sqlite3_stmt *st = stmt(s, ST_ATTEMPTS);
	SQ_ROWS(r, s, st, "read attempts");
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, t->id);
	rc = due__rows_attempts(&r, t, 1);
	sqlite3_reset(st);
	return rc;
}

/*
** Run after: the ids of t's parents, ascending, into t->after (after_n of
** them); left NULL when it has none, or when its edges are not all there.
*/
static int load_parents(due_store *s, due_task *t)
{
	sqlite3_stmt *st;
	size_t n = 0;
	int rc;

	if (t->after_n <= 0)
		return 0;
	if (!(st = stmt(s, ST_PARENTS)))
		return due_error_last_code();
	if (!(t->after = malloc((size_t)t->after_n * sizeof(*t->after))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	sqlite3_bind_int64(st, 1, t->id);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < (size_t)t->after_n)
		t->after[n++] = sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return due__sq_error(s, rc, "read parents");
	if (rc == SQLITE_ROW || n != (size_t)t->after_n) { /* not all there */
		free(t->after);
		t->after = NULL;
	}
	return 0;
}

static int due__sq_get(due_store *s, due_task **out, due_id id)
{
	sqlite3_stmt *st = stmt(s, ST_GET);
	SQ_ROWS(r, s, st, "get");
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, id);
	rc = due__rows_task_get(&r, out, id);
	sqlite3_reset(st);
	if (rc == 0 && ((rc = load_parents(s, *out)) < 0 ||
			(rc = load_attempts(s, *out)) < 0)) {
		due_task_free(*out);
		*out = NULL;
	}
	return rc;
}

static int due__sq_list(due_store *s, due_task_list **out,
			const due_list_opts *o)
{
	sqlite3_stmt *st =
	    stmt(s, o->held	    ? ST_LIST_HELD
		    : o->state >= 0 ? (enum stmt_id)(ST_LIST_STATE + o->state)
				    : ST_LIST);
	due_task_list *l;
	int rc;

	if (!st)
		return due_error_last_code();
	if ((rc = due__task_list_alloc(&l, (size_t)o->limit)) < 0)
		return rc;
	if (o->kind)
		sqlite3_bind_text(st, 2, o->kind, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, o->after);
	sqlite3_bind_int(st, 4, o->limit);
	rc = collect_tasks(s, st, l, (size_t)o->limit, "list");
	for (size_t i = 0; rc == 0 && o->attempts && i < l->count; i++)
		rc = load_attempts(s, &l->items[i]);
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

static int audit(due_store *s, due_id id, due_time now, const char *action,
		 const char *detail)
{
	sqlite3_stmt *st = stmt(s, ST_AUDIT);
	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, now);
	sqlite3_bind_text(st, 3, action, -1, SQLITE_STATIC);
	if (detail)
		sqlite3_bind_text(st, 4, detail, -1, SQLITE_TRANSIENT);
	return due__sq_exec(s, st, "audit");
}

/* The error for an operator action on a task in the wrong state. */
static int wrong_state(due_store *s, due_id id, const char *action,
		       const char *needed)
{
	bool found, cancel;
	due_state state;
	int32_t attempt;
	int rc = state_of(s, id, &found, &state, &attempt, &cancel);

	if (rc < 0)
		return rc;
	return due__store_wrong_state(
	    id, action, found ? due_state_name(state) : NULL, needed);
}

static int retry_locked(due_store *s, due_id id, due_time now)
{
	sqlite3_stmt *st = stmt(s, ST_RETRY);
	bool hit;
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, now);
	rc = fenced(s, st, "retry", &hit);
	if (rc == DUE_ECONFLICT)
		return due__store_retry_conflict(id);
	if (rc < 0)
		return rc;
	if (!hit)
		return wrong_state(s, id, "retry", "DEAD");
	return audit(s, id, now, "retry",
		     "DEAD -> SCHEDULED, fresh attempt budget");
}

static int due__sq_retry(due_store *s, due_id id)
{
	int rc;
	if ((rc = due__sq_begin(s)) < 0)
		return rc;
	if ((rc = retry_locked(s, id, due_time_now_host())) < 0) {
		due__sq_rollback(s);
		return rc;
	}
	return due__sq_commit_wake(s);
}

/*
** Requeue and kill share a shape: end the running try (if any) with
** `outcome` (whether or not a cancel was asked), then one fenced
** UPDATE ... RETURNING attempt, state; audit.
*/
static int operator_locked(due_store *s, enum stmt_id sid, due_id id,
			   const char *action, const char *needed,
			   const char *outcome, due_state *final)
{
	const try_end e = {outcome, action, outcome, action};
	due_time now = due_time_now_host();
	int32_t attempt = 0;
	sqlite3_stmt *st;
	bool ended;
	int rc;

	*final = DUE_SCHEDULED;
	if ((rc = close_try(s, id, 0, now, &e, &ended)) < 0)
		return rc;
	if (!(st = stmt(s, sid)))
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, now);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		attempt = sqlite3_column_int(st, 0);
		if (due__sq_col_state(st, 1, final) < 0) {
			sqlite3_reset(st);
			return DUE_ERROR;
		}
		while ((rc = sqlite3_step(st)) == SQLITE_ROW)
			;
	}
	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return due__sq_error(s, rc, action);
	if (attempt == 0 && sqlite3_changes(s->db) == 0)
		return ended ? close_disagrees(id, action)
			     : wrong_state(s, id, action, needed);
	if ((rc = after_if_ended(s, id, *final, now)) < 0)
		return rc;
	return audit(s, id, now, action, due_state_name(*final));
}

static int operator_tx(due_store *s, enum stmt_id sid, due_id id,
		       const char *action, const char *needed,
		       const char *outcome, due_state *final)
{
	int rc;
	if ((rc = due__sq_begin(s)) < 0)
		return rc;
	if ((rc = operator_locked(s, sid, id, action, needed, outcome, final)) <
	    0) {
		due__sq_rollback(s);
		return rc;
	}
	return *final == DUE_SCHEDULED ? due__sq_commit_wake(s)
				       : due__sq_commit_done(s, true);
}

static int due__sq_requeue(due_store *s, due_id id)
{
	due_state final = DUE_SCHEDULED;
	return operator_tx(s, ST_REQUEUE, id, "requeue", "CLAIMED", "REQUEUED",
			   &final);
}

static int due__sq_kill(due_store *s, due_state *out, due_id id)
{
	return operator_tx(s, ST_KILL, id, "kill", "SCHEDULED, CLAIMED or DEAD",
			   "KILLED", out);
}

/* ------------------------------------------------------------------ */
/* Stats, prune                                                        */
/* ------------------------------------------------------------------ */

/* Lateness percentiles over claims recorded in the last window. */
static int lateness(due_store *s, due_stats *out)
{
	sqlite3_stmt *st = stmt(s, ST_LATENESS);
	int64_t *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	if (!st)
		return due_error_last_code();
	out->window_us = DUE_STATS_WINDOW_US;
	sqlite3_bind_int64(st, 1, out->now - DUE_STATS_WINDOW_US);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			int64_t *nv = realloc(v, (cap = cap ? cap * 2 : 256) *
						     sizeof(*v));
			if (!nv) {
				free(v);
				sqlite3_reset(st);
				return due__error_set(DUE_ENOMEM,
						      "out of memory");
			}
			v = nv;
		}
		v[n++] = sqlite3_column_int64(st, 0);
	}
	sqlite3_reset(st);
	if (rc != SQLITE_DONE) {
		free(v);
		return due__sq_error(s, rc, "lateness");
	}
	due__lateness_fill(out, v, n);
	free(v);
	return 0;
}

/*
** The counts.  Nothing is kept up to date by the transitions (a counter
** cost the drain 10-14 %): each state is counted on its own partial index.
** CLAIMED and DEAD in full (bounded by what runs and what is dead).
** SCHEDULED, DONE and CANCELLED are first sized by two seeks on their
** (id) index: a state whose ids span fewer than COUNT_CAP is small and
** counted (exact).  Any other may be big: estimate_read's sample is taken
** once, and a state it proves big (sure_big) gets its figure from the
** sample with its bit set in `estimated`, without being counted; only a
** state the sample cannot tell from small is counted, up to COUNT_CAP
** rows (below the cap exact, at the cap big).  So a big store reads two
** seeks a state and the sample, never 10,001 index entries a big state.
*/
#define COUNT_CAP 10001

/*
** The estimator: PROBE_PASS rowids spread evenly over [min(id), max(id)]
** (one in each of PROBE_PASS equal strata, at a fixed pseudo-random
** offset inside it, so that no period in the ids can alias with the
** step), each looked up by primary key (a pass in one statement:
** est_pass).  A probe lands on a live task (a hit: its state and kind
** are recorded) or in a gap (ids are AUTOINCREMENT, so what prune
** deleted stays a hole).  The live tasks are
** span * hits / probes: exact when the ids have no gap, unbiased when
** they have.  Passes are added, with other offsets, until HITS_MIN hits
** or PROBE_PASSES passes (a mostly pruned id range).  Constant cost: at
** most PROBE_PASS * PROBE_PASSES primary-key lookups, no write.  The
** offsets are the same every call, so on a store that did not change the
** probes read the pages the last call read: 256 leaves and their parents
** stay in SQLite's default 2 MB page cache, 512 did not (0.11 ms against
** 0.77 ms a sample at a million tasks).
*/
#define PROBE_PASS 256
#define PROBE_PASSES 8
#define HITS_MIN 128

/*
** A state (or a kind) the sample proves to hold at least `cap` tasks: at
** least BIG_HITS hits and an estimate of 4 x cap.  For one that holds
** fewer, whose expected hits are lambda < cap's, that takes max(12,
** 4 lambda) hits: below 1e-4 for any lambda if the hits were Poisson, and
** a stratified sample varies less.  Such a state is not counted.
*/
#define BIG_HITS 12

static bool sure_big(int64_t hits, double n, int64_t cap)
{
	return hits >= BIG_HITS && n >= 4.0 * (double)cap;
}

typedef struct est_hit {
	char *kind; /* NULL unless kinds were asked for */
	int state;
} est_hit;

typedef struct est {
	int64_t live;		       /* the live tasks, estimated */
	int64_t n_hits;		       /* probes that landed on a task */
	int64_t hits[DUE_STATE_COUNT]; /* probes that landed on each state */
	est_hit *hit;		       /* each hit, when kinds were asked */
	size_t n_hit;
} est;

static void est_free(est *e)
{
	for (size_t i = 0; i < e->n_hit; i++)
		free(e->hit[i].kind);
	free(e->hit);
	memset(e, 0, sizeof(*e));
}

/* A fixed xorshift sequence: the probes' offsets, the same every call. */
static uint64_t est_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Record one hit (and its kind when `kinds`); 0 or DUE_ENOMEM. */
static int est_record(est *e, sqlite3_stmt *st, bool kinds)
{
	due_state ss = DUE_SCHEDULED;

	if (due__sq_col_state(st, 0, &ss) < 0)
		return 0;
	e->hits[ss]++;
	if (!kinds)
		return 0;
	if (e->n_hit % 256 == 0) {
		est_hit *n = realloc(e->hit, (e->n_hit + 256) * sizeof(*n));
		if (!n)
			return due__error_set(DUE_ENOMEM, "out of memory");
		e->hit = n;
	}
	const char *k = (const char *)sqlite3_column_text(st, 1);
	if (!(e->hit[e->n_hit].kind = due__strdup_n(k, strlen(k))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	e->hit[e->n_hit++].state = (int)ss;
	return 0;
}

/*
** One pass of PROBE_PASS probes over [lo, lo + span); *hits += landed.
** The probes' ids go to ST_PROBE as one JSON array, ascending: one
** statement a pass (0.12 ms at a million tasks, against 0.20 ms for
** PROBE_PASS steps of a single-id lookup).
*/
static int est_pass(due_store *s, est *e, int64_t lo, int64_t span, uint64_t *x,
		    bool kinds, int64_t *hits)
{
	sqlite3_stmt *st = stmt(s, ST_PROBE);
	char ids[PROBE_PASS * 21 + 2];
	size_t n = 0;
	int rc;

	if (!st)
		return due_error_last_code();
	for (int64_t i = 0; i < PROBE_PASS; i++) {
		/* stratum i is [span*i/P, span*(i+1)/P); u in [0, 1) */
		double u = (double)(est_next(x) >> 11) / 9007199254740992.0;
		int64_t id =
		    lo + (int64_t)((double)span * ((double)i + u) / PROBE_PASS);
		json_int(ids, sizeof(ids), &n, (size_t)i, id);
	}
	ids[n++] = ']';
	sqlite3_bind_text(st, 1, ids, (int)n, SQLITE_TRANSIENT);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		(*hits)++;
		if ((rc = est_record(e, st, kinds)) < 0)
			break;
	}
	sqlite3_reset(st);
	if (rc < 0)
		return rc;
	return rc == SQLITE_DONE ? 0 : due__sq_error(s, rc, "estimate");
}

/* Sample the task table (see above) into *e, inside the open read. */
static int estimate_read(due_store *s, est *e, bool kinds)
{
	sqlite3_stmt *st = stmt(s, ST_ID_RANGE);
	int64_t lo = 0, hi = -1, probes = 0, hits = 0;
	uint64_t x = 0x9e3779b97f4a7c15u;
	int rc;

	memset(e, 0, sizeof(*e));
	if (!st)
		return due_error_last_code();
	if ((rc = sqlite3_step(st)) == SQLITE_ROW &&
	    sqlite3_column_type(st, 0) != SQLITE_NULL) {
		lo = sqlite3_column_int64(st, 0);
		hi = sqlite3_column_int64(st, 1);
	}
	sqlite3_reset(st);
	if (rc != SQLITE_ROW)
		return due__sq_error(s, rc, "estimate");
	for (int p = 0; hi >= lo && p < PROBE_PASSES && hits < HITS_MIN; p++) {
		if ((rc = est_pass(s, e, lo, hi - lo + 1, &x, kinds, &hits)) <
		    0) {
			est_free(e);
			return rc;
		}
		probes += PROBE_PASS;
	}
	e->n_hits = hits;
	if (probes)
		e->live = (int64_t)((double)(hi - lo + 1) * (double)hits /
				    (double)probes);
	return 0;
}

/* State i's share of the sample's live estimate. */
static double est_state(const est *e, int i)
{
	return e->n_hits
		   ? (double)e->live * (double)e->hits[i] / (double)e->n_hits
		   : 0.0;
}

/*
** The big states' figures from the sample: the live tasks less the
** states counted exactly, shared among the big ones by their hits (each
** at least COUNT_CAP, which its capped count or the sample proved).  With
** one big state and no gap in the ids, that is exact.
*/
static void estimate_apply(const est *e, due_stats *out)
{
	int64_t rest = e->live, hits = 0;
	int big = 0;

	for (int i = 0; i < DUE_STATE_COUNT; i++) {
		if (out->estimated & 1u << i) {
			hits += e->hits[i];
			big++;
		} else
			rest -= out->counts[i];
	}
	for (int i = 0; i < DUE_STATE_COUNT; i++) {
		if (!(out->estimated & 1u << i))
			continue;
		int64_t n = big == 1 ? rest
			    : hits
				? (int64_t)((double)rest * (double)e->hits[i] /
					    (double)hits)
				: 0;
		out->counts[i] = n < COUNT_CAP ? COUNT_CAP : n;
	}
}

/* State i counted on its index: all (CLAIMED, DEAD) or up to COUNT_CAP;
** its bit set in out->estimated when it reached the cap. */
static int count_state(due_store *s, int i, due_stats *out)
{
	sqlite3_stmt *st = stmt(s, (enum stmt_id)(ST_COUNT_STATE + i));
	bool capped = i != DUE_CLAIMED && i != DUE_DEAD;
	int rc;

	if (!st)
		return due_error_last_code();
	if (capped)
		sqlite3_bind_int64(st, 1, COUNT_CAP);
	if ((rc = sqlite3_step(st)) == SQLITE_ROW)
		out->counts[i] = sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	if (rc != SQLITE_ROW)
		return due__sq_error(s, rc, "stats");
	if (capped && out->counts[i] >= COUNT_CAP)
		out->estimated |= 1u << i;
	return 0;
}

/* The ids of state i (SCHEDULED, DONE, CANCELLED) span at least
** COUNT_CAP: it may be big.  *n gets 0 when it has no task. */
static int span_state(due_store *s, int i, int64_t *n)
{
	sqlite3_stmt *st = stmt(s, (enum stmt_id)(ST_SPAN_STATE + i));
	int rc;

	*n = 0;
	if (!st)
		return due_error_last_code();
	if ((rc = sqlite3_step(st)) == SQLITE_ROW &&
	    sqlite3_column_type(st, 0) != SQLITE_NULL)
		*n = sqlite3_column_int64(st, 1) - sqlite3_column_int64(st, 0) +
		     1;
	sqlite3_reset(st);
	return rc == SQLITE_ROW ? 0 : due__sq_error(s, rc, "stats");
}

/* Each state's count (see "The counts" above). */
static int counts_sized(due_store *s, due_stats *out)
{
	uint32_t maybe = 0;
	int rc = 0;

	out->estimated = 0;
	for (int i = 0; rc == 0 && i < DUE_STATE_COUNT; i++) {
		int64_t span = 0;
		out->counts[i] = 0;
		if (i == DUE_CLAIMED || i == DUE_DEAD)
			rc = count_state(s, i, out);
		else if ((rc = span_state(s, i, &span)) == 0 && span) {
			if (span < COUNT_CAP)
				rc = count_state(s, i, out);
			else
				maybe |= 1u << i;
		}
	}
	if (rc < 0 || !maybe)
		return rc;
	est e;
	if ((rc = estimate_read(s, &e, false)) < 0)
		return rc;
	for (int i = 0; rc == 0 && i < DUE_STATE_COUNT; i++) {
		if (!(maybe & 1u << i))
			continue;
		if (sure_big(e.hits[i], est_state(&e, i), COUNT_CAP))
			out->estimated |= 1u << i;
		else
			rc = count_state(s, i, out);
	}
	if (rc == 0 && out->estimated)
		estimate_apply(&e, out);
	est_free(&e);
	return rc;
}

/*
** The counts (counts_sized), then the overdue tasks through due_task_due
** (bounded by what is overdue).
*/
static int counts_read(due_store *s, due_stats *out)
{
	sqlite3_stmt *st;
	int rc;

	if ((rc = counts_sized(s, out)) < 0)
		return rc;
	out->dead = out->counts[DUE_DEAD];
	if (!(st = stmt(s, ST_DUE_UNCLAIMED)))
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, out->now);
	if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		out->due_unclaimed = sqlite3_column_int64(st, 0);
		if (out->due_unclaimed) /* then the oldest SCHEDULED is due */
			out->oldest_due_unclaimed_ms =
			    (out->now - sqlite3_column_int64(st, 1)) / 1000;
	}
	sqlite3_reset(st);
	return rc == SQLITE_ROW ? 0 : due__sq_error(s, rc, "stats");
}

/* Open a read transaction: the statements after it see one snapshot. */
static int read_begin(due_store *s)
{
	int rc = sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL);
	return rc == SQLITE_OK ? 0 : due__sq_error(s, rc, "begin read");
}

static int due__sq_stats(due_store *s, due_stats *out)
{
	int rc;

	if ((rc = read_begin(s)) < 0)
		return rc;
	out->now = due_time_now_host();
	if ((rc = counts_read(s, out)) == 0)
		rc = lateness(s, out);
	due__sq_rollback(s);
	return rc;
}

/*
** Delete one batch of at most `max` finished tasks (oldest end first,
** PRUNE_PICK) with their attempt and audit rows and their edges as a
** child, inside the open write transaction; *n gets the number of tasks
** deleted.
*/
static int prune_batch(due_store *s, due_time cutoff, int64_t max, int64_t *n)
{
	static const enum stmt_id order[] = {ST_PRUNE_ATTEMPTS, ST_PRUNE_AUDIT,
					     ST_PRUNE_AFTER, ST_PRUNE_TASKS};
	int rc;

	*n = 0;
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		sqlite3_stmt *st = stmt(s, order[i]);
		if (!st)
			return due_error_last_code();
		sqlite3_bind_int64(st, 1, cutoff);
		sqlite3_bind_int64(st, 2, max);
		if ((rc = due__sq_exec(s, st, "prune")) < 0)
			return rc;
		if (order[i] == ST_PRUNE_TASKS)
			*n = sqlite3_changes(s->db);
	}
	return 0;
}

/*
** Batches of DUE_PRUNE_BATCH tasks, one write transaction each, its
** cutoff on the clock read under the lock (as every transition's), until
** max_rows are deleted (0: no limit) or a batch comes back short.
*/
static int due__sq_prune(due_store *s, int64_t *deleted, int64_t older_than_us,
			 int64_t max_rows)
{
	int64_t n = 0, want;
	int rc;

	*deleted = 0;
	do {
		want = DUE_PRUNE_BATCH;
		if (max_rows && max_rows - *deleted < want)
			want = max_rows - *deleted;
		if ((rc = due__sq_begin(s)) < 0)
			return rc;
		if ((rc = prune_batch(s, due_time_now_host() - older_than_us,
				      want, &n)) < 0 ||
		    (rc = due__sq_commit(s)) < 0) {
			due__sq_rollback(s);
			return rc;
		}
		*deleted += n;
	} while (n == want && (!max_rows || *deleted < max_rows));
	return 0;
}

/*
** Retention's lease: one upsert that takes the row when it is new, ours
** or expired (until <= now), and otherwise changes nothing, so
** sqlite3_changes() says whether we hold it.  Inside BEGIN IMMEDIATE, on
** the clock read under the lock.
*/
static int due__sq_lock_take(due_store *s, bool *held, const char *name,
			     const char *owner, int64_t ttl_us)
{
	sqlite3_stmt *st;
	int rc;

	*held = false;
	if ((rc = due__sq_begin(s)) < 0)
		return rc;
	if (!(st = stmt(s, ST_LOCK_TAKE))) {
		rc = due_error_last_code();
		goto fail;
	}
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, due_time_now_host());
	sqlite3_bind_int64(st, 4, ttl_us);
	if ((rc = due__sq_exec(s, st, "take lock")) < 0)
		goto fail;
	*held = sqlite3_changes(s->db) == 1;
	if ((rc = due__sq_commit(s)) < 0)
		*held = false;
	return rc;
fail:
	due__sq_rollback(s);
	return rc;
}

/* The size of file `path` added to *out; a missing file adds nothing. */
static int add_size(due_store *s, const char *path, int64_t *out)
{
	struct stat sb;

	if (stat(path, &sb) == 0) {
		*out += (int64_t)sb.st_size;
		return 0;
	}
	if (errno == ENOENT)
		return 0;
	return due__error_set(DUE_ESTORE, "sqlite store %s: stat %s: %s",
			      s->path, path, strerror(errno));
}

/* The database file and its write-ahead log (the -shm is an index). */
static int due__sq_bytes(due_store *s, int64_t *out)
{
	const char *file = sqlite3_db_filename(s->db, "main");
	char wal[4096];
	int rc;

	*out = 0;
	if (!file || !*file)
		return 0; /* a temporary database has no file */
	if ((rc = add_size(s, file, out)) < 0)
		return rc;
	if ((size_t)snprintf(wal, sizeof(wal), "%s-wal", file) >= sizeof(wal))
		return due__error_set(
		    DUE_ESTORE, "sqlite store %s: path too long", s->path);
	return add_size(s, wal, out);
}

/* ------------------------------------------------------------------ */
/* Schedules                                                           */
/* ------------------------------------------------------------------ */

static int due__sq_cron_get(due_store *s, due_cron_info **out, const char *name)
{
	sqlite3_stmt *st = stmt(s, ST_SCHED_GET);
	SQ_ROWS(r, s, st, "read schedule");
	int rc;

	*out = NULL;
	if (!st)
		return due_error_last_code();
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	rc = due__rows_sched_get(&r, out, name);
	sqlite3_reset(st);
	return rc;
}

static int due__sq_cron_list(due_store *s, due_cron_info_list **out)
{
	sqlite3_stmt *st = stmt(s, ST_SCHED_LIST);
	SQ_ROWS(r, s, st, "list schedules");
	int rc;

	*out = NULL;
	if (!st)
		return due_error_last_code();
	rc = due__rows_sched_list(&r, out);
	sqlite3_reset(st);
	return rc;
}

static int due__sq_cron_put(due_store *s, const due_cron_def *d,
			    due_time next_slot)
{
	due_submit it = {.kind = d->kind,
			 .payload = d->payload,
			 .payload_len = d->payload_len};
	sqlite3_stmt *st;
	int rc;

	if ((rc = sq_payloads_fit(s->db, s->path, &it, 1)) < 0 ||
	    (rc = due__sq_begin(s)) < 0)
		return rc;
	if (!(st = stmt(s, ST_SCHED_PUT))) {
		rc = due_error_last_code();
		goto fail;
	}
	sqlite3_bind_text(st, 1, d->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, d->expr, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, d->kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, d->tz, -1, SQLITE_STATIC);
	sqlite3_bind_blob(st, 5, d->payload ? d->payload : "",
			  (int)d->payload_len, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, due__misfire_name(d->misfire), -1,
			  SQLITE_STATIC);
	sqlite3_bind_text(st, 7, due__overlap_name(d->overlap), -1,
			  SQLITE_STATIC);
	sqlite3_bind_int(st, 8, d->max_attempts);
	sqlite3_bind_int64(st, 9, d->backoff_us);
	sqlite3_bind_int64(st, 10, d->backoff_cap_us);
	sqlite3_bind_int64(st, 11, next_slot);
	sqlite3_bind_int64(st, 12, due_time_now_host());
	if ((rc = due__sq_exec(s, st, "save schedule")) < 0)
		goto fail;
	return due__sq_commit(s);
fail:
	due__sq_rollback(s);
	return rc;
}

static int due__sq_cron_remove(due_store *s, const char *name)
{
	sqlite3_stmt *st = stmt(s, ST_SCHED_DEL);
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if ((rc = due__sq_exec(s, st, "remove schedule")) < 0)
		return rc;
	if (sqlite3_changes(s->db) == 0)
		return due__store_no_schedule(name);
	return 0;
}

/* The bookkeeping after a won compare-and-set.  Inside the transaction. */
static int sched_done(due_store *s, const due_cron_fire *f, due_id task)
{
	sqlite3_stmt *st = stmt(s, ST_SCHED_DONE);
	if (!st)
		return due_error_last_code();
	sqlite3_bind_text(st, 1, f->name, -1, SQLITE_STATIC);
	if (f->task) {
		sqlite3_bind_int64(st, 2, f->slot);
		sqlite3_bind_int64(st, 3, task);
	}
	sqlite3_bind_int(st, 4, f->task ? 1 : 0);
	sqlite3_bind_int64(st, 5, f->missed);
	if (f->missed > 0 && f->last_missed > 0)
		sqlite3_bind_int64(st, 6, f->last_missed);
	return due__sq_exec(s, st, "schedule bookkeeping");
}

static int due__sq_cron_fire(due_store *s, const due_cron_fire *f, bool *won,
			     due_id *task_id)
{
	sqlite3_stmt *st, *ins, *find;
	due_submitted sub = {0};
	due_time now;
	int rc;

	*won = false;
	*task_id = 0;
	if ((rc = due__sq_begin(s)) < 0)
		return rc;
	now = due_time_now_host();
	if (!(st = stmt(s, ST_SCHED_CAS))) {
		rc = due_error_last_code();
		goto fail;
	}
	sqlite3_bind_text(st, 1, f->name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, f->next);
	sqlite3_bind_int64(st, 3, now);
	sqlite3_bind_int64(st, 4, f->expect);
	if ((rc = due__sq_exec(s, st, "advance schedule")) < 0)
		goto fail;
	if (sqlite3_changes(s->db) == 0)
		return due__sq_commit(s); /* another scheduler advanced it */
	*won = true;
	if (f->task) {
		if (!(ins = stmt(s, ST_INSERT)) ||
		    !(find = stmt(s, ST_FIND_KEY))) {
			rc = due_error_last_code();
			goto fail;
		}
		if ((rc = insert_one(s, ins, find, f->task, now, &sub)) < 0)
			goto fail;
		*task_id = sub.id;
	}
	if ((rc = sched_done(s, f, sub.id)) < 0)
		goto fail;
	return f->task ? due__sq_commit_wake(s) : due__sq_commit(s);
fail:
	due__sq_rollback(s);
	*won = false;
	return rc;
}

/* ------------------------------------------------------------------ */
/* Metrics, worker reports                                             */
/* ------------------------------------------------------------------ */

static int hist(due_store *s, enum stmt_id id, due_time since, due_histogram *h)
{
	sqlite3_stmt *st = stmt(s, id);
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, since);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int b = sqlite3_column_int(st, 0);
		int64_t n = sqlite3_column_int64(st, 1);
		if (b < 0 || b > DUE_HIST_N)
			continue;
		h->buckets[b] += n;
		h->count += n;
		h->sum_ms += sqlite3_column_double(st, 2) / 1000.0;
	}
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : due__sq_error(s, rc, "histogram");
}

/*
** Per-kind counts.  A state whose total stats counted exactly (its bit
** clear in m->stats.estimated) is read per kind on its index, at most
** COUNT_CAP rows (should it have grown past the cap since, it becomes an
** estimate); a big state is shared among kinds by the sample's hits, its
** bit set in kinds_estimated (a kind no probe landed on is left out).
** The (kind, state, n) rows are gathered, sorted by kind (byte order) and
** folded into m->kinds, the first 1000 kinds.
*/
typedef struct tally_row {
	char *kind;
	int state;
	int64_t n;
} tally_row;

typedef struct tally {
	tally_row *v;
	size_t n, cap;
} tally;

static void tally_free(tally *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->v[i].kind);
	free(r->v);
}

/* Append (kind, state, n); the kind is copied.  0 or DUE_ENOMEM. */
static int tally_add(tally *r, const char *kind, int state, int64_t n)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		tally_row *v = realloc(r->v, cap * sizeof(*v));
		if (!v)
			return due__error_set(DUE_ENOMEM, "out of memory");
		r->v = v;
		r->cap = cap;
	}
	if (!(r->v[r->n].kind = due__strdup_n(kind, strlen(kind))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	r->v[r->n].state = state;
	r->v[r->n++].n = n;
	return 0;
}

static int cmp_tally_row(const void *a, const void *b)
{
	const tally_row *x = a, *y = b;
	int c = strcmp(x->kind, y->kind);
	return c ? c : (x->state > y->state) - (x->state < y->state);
}

/* State i per kind on its index; *big when it reached the cap. */
static int kinds_exact(due_store *s, int i, tally *r, bool *big)
{
	sqlite3_stmt *st = stmt(s, (enum stmt_id)(ST_KINDS_STATE + i));
	size_t from = r->n;
	int64_t sum = 0;
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(
	    st, 1, i == DUE_CLAIMED || i == DUE_DEAD ? INT64_MAX : COUNT_CAP);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t n = sqlite3_column_int64(st, 1);
		sum += n;
		if ((rc = tally_add(r, (const char *)sqlite3_column_text(st, 0),
				    i, n)) < 0)
			break;
	}
	sqlite3_reset(st);
	if (rc < 0)
		return rc;
	if (rc != SQLITE_DONE)
		return due__sq_error(s, rc, "kinds");
	*big = i != DUE_CLAIMED && i != DUE_DEAD && sum >= COUNT_CAP;
	while (*big && r->n > from) /* grew past the cap: estimate it */
		free(r->v[--r->n].kind);
	return 0;
}

static int cmp_hit_kind(const void *a, const void *b)
{
	const est_hit *x = a, *y = b;
	return strcmp(x->kind, y->kind);
}

/* One step of the loose scan: the kind after `after`; *found false at
** the end.  The kind is copied into buf (kinds are at most 128 bytes). */
static int sched_kind_next(due_store *s, const char *after, char *buf,
			   size_t len, bool *found)
{
	sqlite3_stmt *st = stmt(s, ST_SCHED_KIND_NEXT);
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_text(st, 1, after, -1, SQLITE_TRANSIENT);
	*found = (rc = sqlite3_step(st)) == SQLITE_ROW;
	if (*found)
		snprintf(buf, len, "%s",
			 (const char *)sqlite3_column_text(st, 0));
	sqlite3_reset(st);
	return rc == SQLITE_ROW || rc == SQLITE_DONE
		   ? 0
		   : due__sq_error(s, rc, "kinds");
}

/* SCHEDULED tasks of `kind`, at most `cap` counted. */
static int sched_kind_count(due_store *s, const char *kind, int64_t cap,
			    int64_t *n)
{
	sqlite3_stmt *st = stmt(s, ST_SCHED_KIND_COUNT);
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, cap);
	if ((rc = sqlite3_step(st)) == SQLITE_ROW)
		*n = sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	return rc == SQLITE_ROW ? 0 : due__sq_error(s, rc, "kinds");
}

/*
** A big SCHEDULED per kind, through due_task_kind_claim: every kind is
** found by a loose scan (one probe each, the first 1000 by name).  A kind
** the sample proves to hold KIND_CAP or more (sure_big) gets its share of
** the sample's hits (hits: the sample's SCHEDULED hits, sorted by kind)
** uncounted; any other is counted exactly when it has fewer than KIND_CAP
** while the counted kinds together stay within COUNT_CAP index entries,
** else it gets its share, at least what was counted of it, at least 1.
*/
#define KIND_CAP 1001

static int kinds_sched_big(due_store *s, due_metrics *m, est_hit *hits,
			   size_t n_hits, tally *r)
{
	char kind[256] = "";
	int64_t budget = COUNT_CAP;
	size_t h = 0;
	bool found = true;
	int rc = 0;

	for (int k = 0; rc == 0 && k < 1000; k++) {
		if ((rc = sched_kind_next(s, kind, kind, sizeof(kind),
					  &found)) < 0 ||
		    !found)
			break;
		int64_t hk = 0, n = 0;
		while (h < n_hits && strcmp(hits[h].kind, kind) < 0)
			h++;
		for (; h < n_hits && strcmp(hits[h].kind, kind) == 0; h++)
			hk++;
		double share = (double)m->stats.counts[DUE_SCHEDULED] *
			       (double)hk / (double)(n_hits ? n_hits : 1);
		int64_t cap = budget < KIND_CAP ? budget : KIND_CAP;
		if (sure_big(hk, share, KIND_CAP))
			cap = 0; /* not counted: its share */
		else if (cap > 0 &&
			 (rc = sched_kind_count(s, kind, cap, &n)) < 0)
			break;
		budget -= n;
		if (n >= cap) { /* not all of it counted */
			if ((int64_t)share > n)
				n = (int64_t)share;
			if (n < 1)
				n = 1;
		}
		rc = tally_add(r, kind, DUE_SCHEDULED, n);
	}
	return rc;
}

/*
** The big states' figures per kind from the sample *e (see kinds, below):
** its SCHEDULED hits are moved to the front of e->hit and sorted by kind;
** e keeps every kind (est_free frees them).
*/
static int kinds_estimated(due_store *s, due_metrics *m, est *e, tally *r)
{
	size_t n_sched = 0, from = r->n;
	int rc = 0;

	for (size_t i = 0; i < e->n_hit; i++) { /* SCHEDULED's hits apart */
		if (e->hit[i].state == DUE_SCHEDULED) {
			est_hit t = e->hit[n_sched];
			e->hit[n_sched++] = e->hit[i];
			e->hit[i] = t;
		} else if (rc == 0 &&
			   m->kinds_estimated & 1u << e->hit[i].state)
			rc = tally_add(r, e->hit[i].kind, e->hit[i].state, 1);
	}
	for (size_t i = from; rc == 0 && i < r->n; i++) {
		int st = r->v[i].state;
		r->v[i].n = (int64_t)((double)m->stats.counts[st] /
				      (double)e->hits[st]);
	}
	if (rc == 0 && m->kinds_estimated & 1u << DUE_SCHEDULED) {
		if (n_sched > 1)
			qsort(e->hit, n_sched, sizeof(*e->hit), cmp_hit_kind);
		rc = kinds_sched_big(s, m, e->hit, n_sched, r);
	}
	return rc;
}

/* Fold the sorted rows into m->kinds (the first 1000 kinds). */
static int kinds_fold(due_metrics *m, tally *r)
{
	size_t distinct = 0;

	if (r->n > 1) /* r->v is NULL while empty: qsort wants a pointer */
		qsort(r->v, r->n, sizeof(*r->v), cmp_tally_row);
	for (size_t i = 0; i < r->n; i++)
		if (!i || strcmp(r->v[i - 1].kind, r->v[i].kind) != 0)
			distinct++;
	if (distinct > 1000)
		distinct = 1000;
	if (distinct && !(m->kinds = calloc(distinct, sizeof(*m->kinds))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t i = 0; i < r->n; i++) {
		if (!m->n_kinds ||
		    strcmp(m->kinds[m->n_kinds - 1].kind, r->v[i].kind) != 0) {
			if (m->n_kinds == distinct)
				break;
			m->kinds[m->n_kinds++].kind = r->v[i].kind;
			r->v[i].kind = NULL; /* moved */
		}
		m->kinds[m->n_kinds - 1].counts[r->v[i].state] += r->v[i].n;
	}
	return 0;
}

static int kinds(due_store *s, due_metrics *m)
{
	tally r = {0};
	est e = {0};
	bool sampled = false;
	int rc = 0;

	m->kinds_estimated = m->stats.estimated;
	/* the sample first, while the pages stats just probed are cached */
	if (m->kinds_estimated && (rc = estimate_read(s, &e, true)) == 0)
		sampled = true;
	for (int i = 0; rc == 0 && i < DUE_STATE_COUNT; i++) {
		bool big = false;
		if (!(m->kinds_estimated & 1u << i) &&
		    (rc = kinds_exact(s, i, &r, &big)) == 0 && big)
			m->kinds_estimated |= 1u << i;
	}
	if (rc == 0 && m->kinds_estimated && !sampled &&
	    (rc = estimate_read(s, &e, true)) == 0)
		sampled = true;
	if (rc == 0 && m->kinds_estimated)
		rc = kinds_estimated(s, m, &e, &r);
	if (rc == 0)
		rc = kinds_fold(m, &r);
	if (sampled)
		est_free(&e);
	tally_free(&r);
	return rc;
}

static int outcomes(due_store *s, due_metrics *m, due_time now)
{
	sqlite3_stmt *st = stmt(s, ST_M_OUTCOMES);
	due_time since = now - DUE_METRICS_WINDOW_US;
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, since);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int i = due__outcome_parse(
		    (const char *)sqlite3_column_text(st, 0));
		if (i >= 0 && i < DUE_OUT_REJECTED_STALE)
			m->outcomes[i] = sqlite3_column_int64(st, 1);
	}
	sqlite3_reset(st);
	if (rc != SQLITE_DONE || !(st = stmt(s, ST_M_STALE)))
		return rc != SQLITE_DONE ? due__sq_error(s, rc, "outcomes")
					 : DUE_ERROR;
	sqlite3_bind_int64(st, 1, since);
	if ((rc = sqlite3_step(st)) == SQLITE_ROW)
		m->outcomes[DUE_OUT_REJECTED_STALE] =
		    sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	if (!(st = stmt(s, ST_M_PERMIN)))
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, since);
	sqlite3_bind_int64(st, 2, now);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t mi = sqlite3_column_int64(st, 0);
		if (mi >= 0 && mi < 15)
			m->done_per_min[mi] = sqlite3_column_int64(st, 1);
	}
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : due__sq_error(s, rc, "throughput");
}

static int workers(due_store *s, due_metrics *m, due_time now)
{
	sqlite3_stmt *st = stmt(s, ST_M_WORKERS);
	int rc;

	if (!st)
		return due_error_last_code();
	sqlite3_bind_int64(st, 1, now - 300LL * 1000000);
	if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		m->workers = sqlite3_column_int64(st, 0);
		m->claim_queries = sqlite3_column_int64(st, 1);
		m->empty_claims = sqlite3_column_int64(st, 2);
		m->reclaim_queries = sqlite3_column_int64(st, 3);
		m->store_errors = sqlite3_column_int64(st, 4);
		m->pruned = sqlite3_column_int64(st, 5);
		m->lease_lost = sqlite3_column_int64(st, 6);
	}
	sqlite3_reset(st);
	if (rc != SQLITE_ROW || !(st = stmt(s, ST_M_SCHED)))
		return rc != SQLITE_ROW ? due__sq_error(s, rc, "workers")
					: DUE_ERROR;
	if ((rc = sqlite3_step(st)) == SQLITE_ROW)
		m->n_schedules = (size_t)sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	return rc == SQLITE_ROW ? 0 : due__sq_error(s, rc, "schedules");
}

/*
** One read transaction: the per-kind counts (kinds, above: exact, or
** estimated with their bits set), and the histograms, outcomes and completions
** per minute of the tries claimed in the last DUE_METRICS_WINDOW_US,
** found through due_attempt_claimed: their cost follows the recent rate.
*/
static int due__sq_metrics(due_store *s, due_metrics *m)
{
	due_time now, since;
	int rc;

	if ((rc = read_begin(s)) < 0)
		return rc;
	now = due_time_now_host();
	since = now - DUE_METRICS_WINDOW_US;
	m->window_us = DUE_METRICS_WINDOW_US;
	if ((rc = kinds(s, m)) == 0 &&
	    (rc = hist(s, ST_M_LATE, since, &m->lateness)) == 0 &&
	    (rc = hist(s, ST_M_DUR, since, &m->duration)) == 0 &&
	    (rc = outcomes(s, m, now)) == 0)
		rc = workers(s, m, now);
	due__sq_rollback(s);
	return rc;
}

static int due__sq_worker_report(due_store *s, const char *owner,
				 const due_worker_stats *w)
{
	sqlite3_stmt *st = stmt(s, ST_WORKER_REPORT);
	int64_t v[DUE_WORKER_N_COUNTERS];

	if (!st)
		return due_error_last_code();
	due__worker_counters(w, v);
	sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, due_time_now_host());
	for (int i = 0; i < DUE_WORKER_N_COUNTERS; i++)
		sqlite3_bind_int64(st, 3 + i, v[i]);
	sqlite3_bind_int64(st, 3 + DUE_WORKER_N_COUNTERS, w->pruned);
	return due__sq_exec(s, st, "worker report");
}

/* ------------------------------------------------------------------ */
/* Discovery: upcoming tasks and wake-ups                              */
/* ------------------------------------------------------------------ */

/*
** One priority's SCHEDULED tasks due before ?1 in due order, at most ?2:
** ?3 the priority, then the kinds.  due_task_claim (priority, due_at) is
** the only due-order index since version 7.
*/
static sqlite3_stmt *upcoming_stmt(due_store *s, size_t n_kinds, bool exclude)
{
	char sql[1024 + 16 * 64];
	size_t off;

	if (s->upc && s->upc_kinds == n_kinds && s->upc_exclude == exclude) {
		sqlite3_reset(s->upc);
		sqlite3_clear_bindings(s->upc);
		due__sq_work_use(s, s->upc);
		return s->upc;
	}
	due__sq_work_take(s, s->upc);
	sqlite3_finalize(s->upc);
	s->upc = NULL;
	off = (size_t)snprintf(
	    sql, sizeof(sql),
	    "SELECT id, due_at FROM due_task INDEXED BY due_task_claim"
	    " WHERE state = 'SCHEDULED' AND priority = ?3 AND due_at < ?1"
	    " AND NOT EXISTS (SELECT 1 FROM due_kind k"
	    " WHERE k.kind = due_task.kind AND k.paused <> 0)");
	for (size_t i = 0; i < n_kinds; i++)
		off += (size_t)snprintf(sql + off, sizeof(sql) - off, "%s?%zu",
					i	  ? ", "
					: exclude ? " AND kind NOT IN ("
						  : " AND kind IN (",
					i + 4);
	snprintf(sql + off, sizeof(sql) - off, "%s ORDER BY due_at LIMIT ?2",
		 n_kinds ? ")" : "");
	int rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
				    &s->upc, NULL);
	if (rc != SQLITE_OK) {
		due__sq_error(s, rc, "prepare upcoming");
		return NULL;
	}
	s->upc_kinds = n_kinds;
	s->upc_exclude = exclude;
	due__sq_work_use(s, s->upc);
	return s->upc;
}

/*
** Each priority in use, lowest first, at most `limit` of its tasks; then
** merged in due order and cut to `limit`.  One read transaction, so that
** the priorities and their tasks are one snapshot.
*/
static int due__sq_upcoming(due_store *s, due_upcoming *out,
			    const char *const *kinds, size_t n_kinds,
			    bool exclude, due_time until, int limit)
{
	int64_t p = DUE_PRIORITY_MIN - 1;
	size_t read = 0, n_prio = 0;
	bool none = false, full = false;
	int rc;

	if ((rc = read_begin(s)) < 0)
		return rc;
	out->now = due_time_now_host();
	for (;;) {
		sqlite3_stmt *st;
		size_t before = out->count;

		if ((rc = prio_next(s, p, &p, &none)) < 0 || none)
			break;
		if (!(st = upcoming_stmt(s, n_kinds, exclude))) {
			rc = due_error_last_code();
			break;
		}
		SQ_ROWS(r, s, st, "upcoming");
		sqlite3_bind_int64(st, 1, until);
		sqlite3_bind_int(st, 2, limit);
		sqlite3_bind_int64(st, 3, p);
		for (size_t i = 0; i < n_kinds; i++)
			sqlite3_bind_text(st, (int)i + 4, kinds[i], -1,
					  SQLITE_STATIC);
		rc = due__rows_upcoming(&r, out, limit);
		sqlite3_reset(st);
		if (rc < 0)
			break;
		read += out->count - before;
		full = full || out->count - before == (size_t)limit;
		n_prio++;
	}
	if (rc == 0 && n_prio > 1)
		rc = due__upcoming_merge(out, limit);
	if (rc == 0) {
		out->truncated = full || read > (size_t)limit;
		rc = next_expiry(s, &out->next_expiry);
	}
	due__sq_rollback(s);
	return rc;
}

static const char *const schemes[] = {"sqlite", NULL};

/* ------------------------------------------------------------------ */
/* Flow control: the kinds' settings                                   */
/* ------------------------------------------------------------------ */

static int due__sq_kind_put(due_store *s, const char *kind,
			    const due_kind_settings *set)
{
	sqlite3_stmt *st;
	due_time now;
	int rc;

	if ((rc = due__sq_begin(s)) < 0)
		return rc;
	now = due_time_now_host();
	if (!(st = stmt(s, ST_KIND_NEW))) {
		rc = due_error_last_code();
		goto fail;
	}
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, now);
	if ((rc = due__sq_exec(s, st, "create kind")) < 0)
		goto fail;
	if (!(st = stmt(s, ST_KIND_SET))) {
		rc = due_error_last_code();
		goto fail;
	}
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 2, set->paused);
	sqlite3_bind_int(st, 3, set->rate_n);
	sqlite3_bind_int64(st, 4, set->rate_us);
	sqlite3_bind_int(st, 5, set->max_running);
	sqlite3_bind_int(st, 6, set->max_running_per_group);
	sqlite3_bind_int64(st, 7, set->timeout_us);
	sqlite3_bind_int64(st, 8, now);
	if ((rc = due__sq_exec(s, st, "set kind")) < 0)
		goto fail;
	return due__sq_commit_wake(s);
fail:
	due__sq_rollback(s);
	return rc;
}

/* What kind k holds now: running, rate_used, due, group_running. */
static int kind_live(due_store *s, due_kind_info *k, const char *group,
		     due_time now)
{
	sq_claim c = {.s = s}; /* the claim's counts, outside a claim */
	sqlite3_stmt *st;
	due_time oldest;
	int rc;

	if ((rc = sq_running(&c, k->kind, NULL, now, &k->running)) < 0 ||
	    (k->rate_n && (rc = sq_rate(&c, k->kind, now - k->rate_us,
					&k->rate_used, &oldest)) < 0) ||
	    (group &&
	     (rc = sq_running(&c, k->kind, group, now, &k->group_running)) < 0))
		return rc;
	if (!(st = stmt(s, ST_K_DUE)))
		return due_error_last_code();
	sqlite3_bind_text(st, 1, k->kind, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, now);
	return count_of(s, st, &k->due, NULL);
}

/*
** Rows of ST_KIND_GET / ST_KIND_LIST (bound) into l, with their live
** counts, read in one transaction so that they agree.
*/
static int kind_rows(due_store *s, sqlite3_stmt *st, due_kind_info_list *l,
		     const char *group)
{
	SQ_ROWS(r, s, st, "read kinds");
	due_time now = due_time_now_host();
	int rc = due__rows_kinds(&r, l, NULL);

	sqlite3_reset(st);
	for (size_t i = 0; rc == 0 && i < l->count; i++)
		rc = kind_live(s, &l->items[i], group, now);
	return rc;
}

/* One read transaction over the kinds: kind NULL for every one. */
static int kind_read(due_store *s, due_kind_info_list **out, const char *kind,
		     const char *group)
{
	sqlite3_stmt *st;
	int rc;

	*out = NULL;
	if ((rc = due__kind_info_list_alloc(out, 0)) < 0)
		return rc;
	if ((rc = sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL)) !=
	    SQLITE_OK) {
		rc = due__sq_error(s, rc, "begin read");
		goto done;
	}
	if (!(st = stmt(s, kind ? ST_KIND_GET : ST_KIND_LIST))) {
		rc = due_error_last_code();
		goto done;
	}
	if (kind)
		sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	rc = kind_rows(s, st, *out, group);
done:
	due__sq_rollback(s);
	if (rc < 0) {
		due_kind_info_list_free(*out);
		*out = NULL;
	}
	return rc;
}

static int due__sq_kind_get(due_store *s, due_kind_info **out, const char *kind,
			    const char *group)
{
	due_kind_info_list *l = NULL;
	int rc;

	*out = NULL;
	if ((rc = kind_read(s, &l, kind, group)) < 0)
		return rc;
	return due__kind_info_take_one(out, l, kind);
}

static int due__sq_kind_list(due_store *s, due_kind_info_list **out)
{
	return kind_read(s, out, NULL, NULL);
}

/* Forget a kind's settings and its rate log; wakes workers (a resume). */
static int due__sq_kind_remove(due_store *s, const char *kind)
{
	sqlite3_stmt *st;
	int rc;

	if ((rc = due__sq_begin(s)) < 0)
		return rc;
	if (!(st = stmt(s, ST_KIND_DEL))) {
		rc = due_error_last_code();
		goto fail;
	}
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	if ((rc = due__sq_exec(s, st, "remove kind")) < 0)
		goto fail;
	if (sqlite3_changes(s->db) == 0) {
		rc = due__store_no_kind(kind);
		goto fail;
	}
	if (!(st = stmt(s, ST_RATE_DEL))) {
		rc = due_error_last_code();
		goto fail;
	}
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	if ((rc = due__sq_exec(s, st, "remove rate log")) < 0)
		goto fail;
	return due__sq_commit_wake(s);
fail:
	due__sq_rollback(s);
	return rc;
}

/* Every method is due__sq_<method> (store.h lists them). */
#define OP(m) .m = due__sq_##m,
const due_store_ops due__store_sqlite = {
    .version = DUE_STORE_OPS_VERSION,
    .name = "sqlite",
    .schemes = schemes,
    .caps = DUE_STORE_CAP_HOST_CLOCK | DUE_STORE_CAP_NOTIFY |
	    DUE_STORE_CAP_TX_SUBMIT | DUE_STORE_CAP_ADMIN | DUE_STORE_CAP_SQL |
	    DUE_STORE_CAP_STALL | DUE_STORE_CAP_PLAN,
    .admin = &due__store_sqlite_admin,
    DUE_STORE_METHODS(OP) DUE_STORE_NOTIFY_METHODS(OP)
	DUE_STORE_TX_SUBMIT_METHODS(OP)};
#undef OP
