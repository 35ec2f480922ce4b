/*
** mysql.c - the MySQL/MariaDB store: many workers on many machines sharing
** one InnoDB database through MariaDB Connector/C (mysql_conn.c holds the
** session).
**
** Concurrency model.  MySQL has no UPDATE ... RETURNING and no
** data-modifying CTE, so a transition is a short READ COMMITTED
** transaction that first locks the rows it will judge (SELECT ... FOR
** UPDATE, which reads their newest committed version), decides from what
** it locked, then writes by primary key with the predicate repeated in
** the UPDATE's WHERE.  A row locked by us cannot change until we commit,
** so a reclaim never overwrites a completion that landed in between
** (River #1302) and a late completion finds a state that no longer
** matches and writes only its late_commit mark.  The claim picks with
** SELECT id ... ORDER BY due_at, id LIMIT n FOR UPDATE SKIP LOCKED over
** the index (state, priority, due_at, id): concurrent claimers skip each
** other's rows instead of queueing on them, the order is unique (id last),
** and the rows are then written by primary key (solid_queue PR #164,
** #240: no range writes, no insert-intention gap locks).  Deadlocks (1213)
** can still happen between a claim and an operator's action; every
** transaction here is retried whole, a few times with backoff
** (TX_RETRIES) while the store's bound lasts, before DUE_EBUSY reaches
** the caller.  A lock wait timeout (1205: another session held a row or
** a table past the session's lock wait, which ends before the bound,
** mysql_conn.c) is DUE_EBUSY at once: retrying would wait again.
**
** Galera (mysql_conn.c: a URL listing the cluster's nodes).  Row locks
** and SKIP LOCKED hold on one node only; a transaction that touched rows
** another node changed meanwhile fails certification at COMMIT (or is
** aborted by the replicated write, at any statement) with 1213, which is
** the deadlock above: the whole transaction runs again, its COMMIT
** included, and a claim that lost simply picks again.  An abort that
** lands inside one of our multi-statement texts is caught by the
** savepoint check that ends each text of a transaction (mysql_conn.c;
** MariaDB runs the rest of that text, and would run the texts after it,
** outside the transaction) and, for claims, by claims_confirm after the
** COMMIT; a run-after child that such an abort still left held on an
** ended parent is released by the sweep of the next reclaim pass
** (mys_reclaim).  Nothing here uses
** GET_LOCK (mig_lock: not on Galera), LOCK TABLES or MyISAM; every table
** has a primary key.  due_wake is MEMORY, which Galera does not
** replicate: a wake-up reaches the listeners on the node that took the
** write at once, the others at their next poll.
**
** Clock.  Due times and leases are judged by the server's clock alone:
** DUE_MY_NOW, UTC_TIMESTAMP(6) in microseconds since the epoch, computed
** without local time, so right on a caller's connection in any time_zone.
** It is fixed at the statement's start (safe under statement-based
** replication; SYSDATE() is not and is never used), and at READ COMMITTED
** a statement that runs after our locks were granted sees the claims
** committed before them.
** Where C needs the time (the flow-control counts, the claim's
** claimed_at) it reads DUE_MY_NOW once, after taking its locks, and binds
** that value: still the server's clock.  Times are BIGINT microseconds
** since the epoch, UTC: exact, free of time zones and of DATETIME's
** rounding, and the same numbers the core uses.
**
** Schema history (bump DUE_SCHEMA_VERSION in due.h, add a step to
** `steps`, which due__migrate walks under GET_LOCK('due:init') (not on
** Galera: mig_lock), never edit
** a released step).  MySQL commits DDL implicitly, so a step is written to
** be re-runnable (IF NOT EXISTS) and records its version last:
**   1  the whole schema as of version 4 (this backend was born at 4):
**      due_meta, due_task (+ live_key), due_attempt, due_audit,
**      due_schedule, due_worker, due_kind, due_rate, and due_wake (the
**      listeners' wake-up counter, MySQL's stand-in for NOTIFY).
**   2..4  record the versions the other stores share; nothing to change.
**   6  records the version too (SQLite's running try moved into its task).
**   7  records the version too (SQLite's indexes: due_task_due dropped).
**   8  records the version too: it makes every store pass through `due
**      init`, which replaces a due_schedule procedure older than
**      ROUTINE_V (issue 36: run_at_us unbounded, a kind ending in a
**      newline let through).
**   9  records the version too: it makes every store pass through `due
**      init`, which creates the due_reschedule procedure (issue 38).
**  10  records the version too: it makes every store pass through `due
**      init`, which creates the due_schedule_on_key procedure (issue 38:
**      on_key).
**  11  run-after (issue 38 point 3): due_task gains after_n, after_left,
**      after_any_end and the held task's own time (after_at,
**      after_delay_us); due_after holds the edges, one row per (parent,
**      child) with `pending` while the parent has not ended yet (PRIMARY
**      KEY (parent, child) for the release, KEY (child, parent) for get
**      and prune).  Every existing task gets 0/0/0.  Re-runnable: MySQL 8
**      has no ADD COLUMN IF NOT EXISTS, so the ALTER is prepared only
**      when after_n is missing (information_schema), and a store whose
**      recorded version was set back (tests/cli/test_sql_submit.sh) or a
**      second `due init` on another Galera node passes through it.
**      after_children (a second ALTER, prepared only when that column
**      is missing) counts the run-after submits that named the task:
**      the submit writes every parent's row (lock_parents), so that on
**      Galera a child added through one node and its parent's finish
**      through another touch the same row and one of them fails
**      certification (1213, retried whole) instead of both committing
**      and the child missing its release.
*/
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <mysqld_error.h>

#include "base/base.h"
#include "store/flow.h"
#include "store/mysql_conn.h"
#include "store/mysql_wake.h"
#include "store/row.h"
#include "store/store.h"

/* Rows per reclaim or prune transaction: bounded batches (CONTRACT §9). */
#define BATCH_ROWS 1000
/* How often a keyed submit retries when the live task vanishes under it. */
#define KEY_TRIES 20
/* Whole-transaction retries after a deadlock. */
#define TX_RETRIES 5
/* A multi-row statement is sent once its text passes this many bytes. */
#define FLUSH_BYTES (4u << 20)
/* Candidates beyond the claim's room a group-limited pick looks at. */
#define GROUP_SCAN 1000

#define NOW DUE_MY_NOW
/*
** The server's now, read once by a transaction right after it locked its
** rows (SET_NOW), so every time it writes (updated_at, ended_at, due_at
** of a retry, the audit) is the same instant.
*/
#define SET_NOW "; SET @due_now = " NOW
#define NOW_V "@due_now"
#define USED_UP "attempt - attempt_base >= max_attempts"

/*
** The due_at of a task held by run-after: DUE_TIME_LAST
** (9999-12-31T23:59:59.999999Z, core/internal.h), later than anything a
** claim, upcoming, the overdue count or lateness ever asks for.
*/
#define HELD_AT "253402300799999999"

/* Column lists with every name quoted (`key` is a reserved word). */
#define MY_COL_(e, name) "`" #name "`, "
#define MY_COL_LAST_(e, name) "`" #name "`"
#define TASK_COLS DUE_TASK_COLUMNS(MY_COL_, MY_COL_LAST_)
#define ATTEMPT_COLS DUE_ATTEMPT_COLUMNS(MY_COL_, MY_COL_LAST_)
#define SCHED_COLS DUE_SCHED_COLUMNS(MY_COL_, MY_COL_LAST_)
#define KIND_COLS DUE_KIND_COLUMNS(MY_COL_, MY_COL_LAST_)

/*
** Run a transaction function again while it failed with a deadlock (its
** transaction was rolled back), with backoff, and not once the store's
** bound has passed since the first try (each try may have waited for
** locks before it lost).
*/
#define RETRY(rc, s, call)                                                     \
	for (int64_t t0_ = due__mono_us(), try_ = 0;; try_++) {                \
		(s)->deadlock = false;                                         \
		(rc) = (call);                                                 \
		if ((rc) != DUE_EBUSY || !(s)->deadlock ||                     \
		    try_ == TX_RETRIES ||                                      \
		    due__mono_us() - t0_ >= (s)->timeout_us)                   \
			break;                                                 \
		due__my_backoff((int)try_);                                    \
	}

/* A builder on the store's connection. */
#define SQL(b, s)                                                              \
	due_my_sql b;                                                          \
	due__my_sql_init(&b, &(s)->conn)

/* ------------------------------------------------------------------ */
/* Schema                                                              */
/* ------------------------------------------------------------------ */

#define TABLE_OPTS " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;"
/* The wake-up hint of listeners (mys_listen): not data, so MEMORY (no
   fsync, a table lock for one statement); empty after a restart, and the
   next bump inserts its rows again.  schema_v1; init_extras makes it again
   when it was dropped. */
#define WAKE_TABLE                                                             \
	"CREATE TABLE IF NOT EXISTS due_wake ("                                \
	" id TINYINT NOT NULL PRIMARY KEY,"                                    \
	" n BIGINT NOT NULL) ENGINE=MEMORY"
static const char sql_wake_table[] = WAKE_TABLE;
#define WORKER_COUNTER(c) " `" c "` BIGINT NOT NULL DEFAULT 0,"

static const char schema_v1[] =
    "CREATE TABLE IF NOT EXISTS due_meta ("
    " name VARCHAR(64) NOT NULL PRIMARY KEY,"
    " value VARCHAR(255) NOT NULL)" TABLE_OPTS
    /* AUTO_INCREMENT is persistent in InnoDB (MariaDB 10.2.4, MySQL 8),
       so an id is never reused after prune. */
    "CREATE TABLE IF NOT EXISTS due_task ("
    " id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " kind VARCHAR(128) NOT NULL,"
    " payload LONGBLOB NOT NULL,"
    " state VARCHAR(9) NOT NULL CHECK (state IN"
    "  ('SCHEDULED', 'CLAIMED', 'DONE', 'CANCELLED', 'DEAD')),"
    " due_at BIGINT NOT NULL,"
    " attempt INT NOT NULL DEFAULT 0,"
    " attempt_base INT NOT NULL DEFAULT 0,"
    " max_attempts INT NOT NULL CHECK (max_attempts >= 1),"
    " backoff_us BIGINT NOT NULL,"
    " backoff_cap_us BIGINT NOT NULL,"
    " lease_owner VARCHAR(512) NULL,"
    " lease_until BIGINT NULL,"
    " cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,"
    " `key` VARBINARY(512) NULL,"
    " result LONGBLOB NULL,"
    " last_error MEDIUMTEXT NULL,"
    " created_at BIGINT NOT NULL,"
    " updated_at BIGINT NOT NULL,"
    " priority SMALLINT NOT NULL DEFAULT 0,"
    " grp VARBINARY(255) NULL,"
    " timeout_us BIGINT NULL CHECK (timeout_us > 0),"
    /* The key while the task is live, else NULL: UNIQUE ignores NULLs,
       so a finished task's key can be used again. */
    " live_key VARBINARY(512) AS (IF(state IN ('SCHEDULED', 'CLAIMED'),"
    "  `key`, NULL)) STORED,"
    /* The time that matters in the task's state: when it is due, when its
       lease ends, when it finished.  One index (state, at_us, id) serves
       upcoming, reclaim and prune, where three cost every insert and
       every transition three index writes (docs/internals/mysql.md). */
    " at_us BIGINT AS (CASE state WHEN 'SCHEDULED' THEN due_at"
    "  WHEN 'CLAIMED' THEN lease_until ELSE updated_at END) STORED,"
    " CONSTRAINT claimed_iff_lease CHECK ("
    "  (state = 'CLAIMED' AND lease_owner IS NOT NULL"
    "   AND lease_until IS NOT NULL)"
    "  OR (state <> 'CLAIMED' AND lease_owner IS NULL"
    "   AND lease_until IS NULL)),"
    " UNIQUE KEY due_task_key (kind, live_key),"
    " KEY due_task_at (state, at_us, id),"
    " KEY due_task_claim (state, priority, due_at, id),"
    " KEY due_task_kind_claim (kind, state, priority, due_at, id))" TABLE_OPTS
    "CREATE TABLE IF NOT EXISTS due_attempt ("
    " task_id BIGINT NOT NULL,"
    " attempt INT NOT NULL,"
    " worker VARCHAR(512) NOT NULL,"
    " claimed_at BIGINT NOT NULL,"
    " due_at BIGINT NOT NULL,"
    " ended_at BIGINT NULL,"
    " outcome VARCHAR(16) NOT NULL DEFAULT 'RUNNING' CHECK (outcome IN"
    "  ('RUNNING', 'DONE', 'FAILED', 'LEASE_EXPIRED', 'CANCELLED',"
    "   'REQUEUED', 'KILLED', 'TIMED_OUT')),"
    " error MEDIUMTEXT NULL,"
    " late_commit VARCHAR(16) NULL,"
    " PRIMARY KEY (task_id, attempt),"
    " KEY due_attempt_claimed (claimed_at))" TABLE_OPTS
    "CREATE TABLE IF NOT EXISTS due_audit ("
    " id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " task_id BIGINT NOT NULL,"
    " at BIGINT NOT NULL,"
    " action VARCHAR(32) NOT NULL,"
    " detail TEXT NULL,"
    " KEY due_audit_task (task_id))" TABLE_OPTS
    "CREATE TABLE IF NOT EXISTS due_schedule ("
    " name VARCHAR(255) NOT NULL PRIMARY KEY,"
    " expr TEXT NOT NULL,"
    " kind VARCHAR(128) NOT NULL,"
    " tz VARCHAR(255) NOT NULL,"
    " payload LONGBLOB NOT NULL,"
    " misfire VARCHAR(8) NOT NULL CHECK (misfire IN ('skip', 'once')),"
    " overlap VARCHAR(8) NOT NULL CHECK (overlap IN ('allow', 'wait')),"
    " max_attempts INT NOT NULL,"
    " backoff_us BIGINT NOT NULL,"
    " backoff_cap_us BIGINT NOT NULL,"
    " next_slot BIGINT NOT NULL,"
    " last_slot BIGINT NULL,"
    " last_task BIGINT NULL,"
    " fired BIGINT NOT NULL DEFAULT 0,"
    " missed BIGINT NOT NULL DEFAULT 0,"
    " last_missed BIGINT NULL,"
    " created_at BIGINT NOT NULL,"
    " updated_at BIGINT NOT NULL)" TABLE_OPTS
    "CREATE TABLE IF NOT EXISTS due_worker ("
    " owner VARCHAR(512) NOT NULL PRIMARY KEY,"
    " started_at BIGINT NOT NULL,"
    " seen_at BIGINT NOT NULL," WORKER_COUNTER("claimed") WORKER_COUNTER(
	"done") WORKER_COUNTER("failed") WORKER_COUNTER("dead")
	WORKER_COUNTER("stale") WORKER_COUNTER("cancelled") WORKER_COUNTER(
	    "lease_lost") WORKER_COUNTER("claim_queries")
	    WORKER_COUNTER("empty_claims") WORKER_COUNTER(
		"reclaim_queries") " store_errors BIGINT NOT NULL DEFAULT "
				   "0)" TABLE_OPTS
				   "CREATE TABLE IF NOT EXISTS due_kind ("
				   " kind VARCHAR(128) NOT NULL PRIMARY KEY,"
				   " paused BOOLEAN NOT NULL DEFAULT FALSE,"
				   " rate_n INT NULL CHECK (rate_n > 0),"
				   " rate_us BIGINT NULL CHECK (rate_us > 0),"
				   " max_running INT NULL CHECK (max_running > "
				   "0),"
				   " max_running_per_group INT NULL CHECK "
				   "(max_running_per_group > 0),"
				   " timeout_us BIGINT NULL CHECK (timeout_us "
				   "> 0),"
				   " held_rate BIGINT NOT NULL DEFAULT 0,"
				   " held_running BIGINT NOT NULL DEFAULT 0,"
				   " held_group BIGINT NOT NULL DEFAULT 0,"
				   " updated_at BIGINT NOT NULL,"
				   " CONSTRAINT rate_whole CHECK ((rate_n IS "
				   "NULL) = (rate_us IS NULL)))" TABLE_OPTS
				   "CREATE TABLE IF NOT EXISTS due_rate ("
				   " id BIGINT NOT NULL AUTO_INCREMENT PRIMARY "
				   "KEY,"
				   " kind VARCHAR(128) NOT NULL,"
				   " at BIGINT NOT NULL,"
				   " KEY due_rate_kind (kind, at))" TABLE_OPTS
				       WAKE_TABLE ";"
				   "INSERT INTO due_meta (name, value) VALUES "
				   "('schema_version', '1')"
				   " ON DUPLICATE KEY UPDATE value = value";
#undef WORKER_COUNTER

#define RECORD(v) DUE_SCHEMA_RECORD(v)

/*
** Production scale (issue 15): due_lock, the named leases of lock_take
** (retention's one pruner at a time); the worker's `pruned` counter;
** due_task_state (state, id) for ls --state's pages in id order at any
** size (due_task_at orders by at_us: a DONE page was a filesort of every
** DONE task).  The claimed_at index the windowed metrics read is
** due_attempt_claimed, there since step 1.  Plain ADD COLUMN / ADD INDEX
** (MySQL 8 has no IF NOT EXISTS for them), each ALTER atomic.
*/
static const char schema_v5[] =
    "CREATE TABLE IF NOT EXISTS due_lock ("
    " name VARCHAR(128) NOT NULL PRIMARY KEY,"
    " owner VARCHAR(512) NOT NULL,"
    " until_us BIGINT NOT NULL)" TABLE_OPTS
    "ALTER TABLE due_worker ADD COLUMN pruned BIGINT NOT NULL DEFAULT 0;"
    "ALTER TABLE due_task ADD KEY due_task_state (state, id);" RECORD("5");

/* Run-after (docs/internals/mysql.md, "Run after"). */
static const char schema_v11[] =
    "SET @due_sql = IF((SELECT COUNT(*) FROM information_schema.columns"
    " WHERE table_schema = DATABASE() AND table_name = 'due_task'"
    " AND column_name = 'after_n') = 0,"
    " 'ALTER TABLE due_task ADD COLUMN after_n INT NOT NULL DEFAULT 0,"
    " ADD COLUMN after_left INT NOT NULL DEFAULT 0,"
    " ADD COLUMN after_any_end BOOLEAN NOT NULL DEFAULT FALSE,"
    " ADD COLUMN after_at BIGINT NULL,"
    " ADD COLUMN after_delay_us BIGINT NOT NULL DEFAULT 0', 'DO 0');"
    "PREPARE due_step FROM @due_sql; EXECUTE due_step;"
    " DEALLOCATE PREPARE due_step;"
    "SET @due_sql = IF((SELECT COUNT(*) FROM information_schema.columns"
    " WHERE table_schema = DATABASE() AND table_name = 'due_task'"
    " AND column_name = 'after_children') = 0,"
    " 'ALTER TABLE due_task ADD COLUMN after_children BIGINT NOT NULL"
    " DEFAULT 0', 'DO 0');"
    "PREPARE due_step FROM @due_sql; EXECUTE due_step;"
    " DEALLOCATE PREPARE due_step;"
    "CREATE TABLE IF NOT EXISTS due_after ("
    " parent BIGINT NOT NULL,"
    " child BIGINT NOT NULL,"
    " pending BOOLEAN NOT NULL,"
    " PRIMARY KEY (parent, child),"
    " KEY due_after_child (child, parent))" TABLE_OPTS RECORD("11");

static const char *const steps[DUE_SCHEMA_VERSION + 1] = {
    [1] = schema_v1,	 [2] = RECORD("2"), [3] = RECORD("3"),
    [4] = RECORD("4"),	 [5] = schema_v5,   [6] = RECORD("6"),
    [7] = RECORD("7"),	 [8] = RECORD("8"), [9] = RECORD("9"),
    [10] = RECORD("10"), [11] = schema_v11};

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

/* One statement's first row as integers: v[0..n) (0 when no row / NULL). */
static int ints(due_store *s, due_my_sql *b, const char *what, int64_t *v,
		int n)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	int rc = due__my_exec(s, b, what, &r);

	due__my_sql_free(b);
	for (int i = 0; i < n; i++)
		v[i] = 0;
	if (rc < 0)
		return rc;
	if (r && (row = mysql_fetch_row(r)))
		for (int i = 0; i < n; i++)
			v[i] = due__my_i64(row, i);
	mysql_free_result(r);
	return 0;
}

/* Run b (then free it); the matched rows in *affected when non-NULL. */
static int exec(due_store *s, due_my_sql *b, const char *what,
		uint64_t *affected)
{
	int rc = due__my_exec(s, b, what, NULL);

	due__my_sql_free(b);
	if (affected)
		*affected = rc == 0 ? s->affected : 0;
	return rc;
}

/*
** Run b, a write by id under the row lock this transaction took, with its
** predicate (state, attempt) repeated: 0 when it matched one row.  None
** matched means the row changed under our lock, which InnoDB never lets
** happen and Galera can (a write set from another node aborts our
** transaction; MariaDB runs the rest of a text outside it): the
** transaction is retried whole (RETRY), reading the row again.
*/
static int exec_one(due_store *s, due_my_sql *b, const char *what, due_id id)
{
	uint64_t n = 0;
	int rc = exec(s, b, what, &n);

	if (rc < 0 || n == 1)
		return rc;
	s->deadlock = true;
	return due__error_set(DUE_EBUSY,
			      "mysql store: %s of task %lld: the task changed "
			      "under the transaction's lock (Galera: another "
			      "node wrote it); retried",
			      what, (long long)id);
}

/* The server's now. */
static int server_now(due_store *s, due_time *out)
{
	SQL(b, s);
	due__my_add(&b, "SELECT " NOW);
	return ints(s, &b, "now", out, 1);
}

/*
** The doorbell (mysql_wake.c): KILL the sleeping queries of this
** database's listeners.  Only its own user's threads are listed without
** the PROCESS privilege, and those may be killed without one; a query
** that ended meanwhile answers 1094 (unknown thread), which is fine.
*/
static void ring(due_store *s)
{
	static const char sql[] =
	    "SELECT ID FROM information_schema.PROCESSLIST WHERE DB ="
	    " DATABASE() AND INFO = '" DUE_MY_BELL_SQL "'";
	MYSQL_RES *r = NULL;
	MYSQL_ROW row;
	char kill[48];

	if (due__my_run(s, sql, sizeof(sql) - 1, "ring listeners", &r) < 0) {
		due__error_clear();
		return;
	}
	while (r && (row = mysql_fetch_row(r)))
		if (row[0] && strlen(row[0]) < 24) {
			int k = snprintf(kill, sizeof(kill), "KILL QUERY %s",
					 row[0]);
			if (due__my_run(s, kill, (size_t)k, "ring listeners",
					NULL) < 0)
				due__error_clear();
		}
	mysql_free_result(r);
}

/*
** Wake listeners (mys_listen): bump the due_wake counter, after the
** transaction that made a task due committed.  A hint, not data: a
** failure only delays listeners until their safety poll, so it is not
** the caller's error.  The same statement lowers the doorbell's flag
** (row 2, mysql_wake.c): VALUES(n) tells the rows apart with no read of
** id (a producer may read n only, INTERFACE.md).  Affected rows, with
** CLIENT_FOUND_ROWS: 2 for the counter, and 2 for a flag that was raised
** (1 when it was down or missing): 4 means a listener sleeps, so ring
** it.  Inside a caller's transaction nobody is rung: the task is not
** committed yet, and a listener woken now would find nothing and then
** miss it until its next read.
*/
static void wake(due_store *s)
{
	static const char sql[] =
	    "INSERT INTO due_wake (id, n) VALUES (1, 1), (2, 0)"
	    " ON DUPLICATE KEY UPDATE n = IF(VALUES(n) = 1, n + 1, 0)";
	static const char in_tx[] = "INSERT INTO due_wake (id, n) VALUES (1, 1)"
				    " ON DUPLICATE KEY UPDATE n = n + 1";

	if (due__my_run(s, s->in_tx ? in_tx : sql,
			(s->in_tx ? sizeof(in_tx) : sizeof(sql)) - 1,
			"wake listeners", NULL) < 0) {
		/* said once a handle: the task is there, workers find it at
		   their safety poll; a dropped table is made again by init */
		if (!s->wake_warned)
			due__log("info", "mysql store", s->label,
				 "wake-ups: cannot bump due_wake (%s): "
				 "workers find new tasks at their safety "
				 "poll; `due init` makes a dropped due_wake "
				 "again",
				 due_error_last());
		s->wake_warned = true;
		due__error_clear();
		return;
	}
	if (s->in_tx)
		return;
	/* committed: this process's listeners now (and before the ring, so
	   that our own doorbell, woken, knows the change for ours) */
	due__my_local_poke();
	if (s->affected == 4)
		ring(s);
}

/* ' AND kind IN (...)' / NOT IN for a claim's kind filter. */
static void kind_filter(due_my_sql *b, const char *col,
			const char *const *kinds, size_t n, bool exclude)
{
	if (!n)
		return;
	due__my_add(b, " AND %s %sIN ", col, exclude ? "NOT " : "");
	due__my_list(b, kinds, n);
}

/* " (id1, id2, ...)" of the tasks l->items[from..]. */
static void id_list(due_my_sql *b, const due_task *t, size_t n)
{
	due__my_add(b, "(");
	for (size_t i = 0; i < n; i++)
		due__my_add(b, "%s%lld", i ? ", " : "", (long long)t[i].id);
	due__my_add(b, ")");
}

/* ------------------------------------------------------------------ */
/* Open, schema                                                        */
/* ------------------------------------------------------------------ */

static int mys_parse_url(void **cfg, const due_url *u)
{
	due_my_cfg *c = NULL;
	int rc = due__my_parse_url(&c, u->text, u->rest);

	*cfg = c;
	return rc;
}

static void mys_free_cfg(void *cfg) { due__my_cfg_free(cfg); }

/* `create` means nothing here: the database must exist (CREATE DATABASE). */
static int mys_open(due_store **out, const void *cfg, const due_open_params *p)
{
	return due__my_connect(out, cfg, p->timeout_us);
}

static void mys_close(due_store *s) { due__my_close(s); }

/* Schema version in the URL's database: -1 when there is no due schema. */
static int read_version(due_store *s, int *out)
{
	int64_t v[2];
	int rc;
	SQL(b, s);

	*out = -1;
	due__my_add(&b, "SELECT COUNT(*) FROM information_schema.tables"
			" WHERE table_schema = DATABASE()"
			" AND table_name = 'due_meta'");
	if ((rc = ints(s, &b, "read schema version", v, 1)) < 0 || !v[0])
		return rc;
	due__my_sql_init(&b, &s->conn);
	due__my_add(&b, "SELECT COUNT(*), MAX(CAST(value AS SIGNED))"
			" FROM due_meta WHERE name = 'schema_version'");
	if ((rc = ints(s, &b, "read schema version", v, 2)) == 0 && v[0])
		*out = (int)v[1];
	return rc;
}

#define WHERE " in its database"

static int mys_check_schema(due_store *s)
{
	int v, rc;

	if ((rc = due__my_ok(s)) < 0 || (rc = read_version(s, &v)) < 0)
		return rc;
	return due__schema_verdict(s->label, v, WHERE);
}

static int run_text(due_store *s, const char *sql, const char *what)
{
	return due__my_run(s, sql, strlen(sql), what, NULL);
}

/*
** The migration's transaction: GET_LOCK serializes concurrent `due init`
** runs (the later ones then read the current version and do nothing);
** the lock is the session's, released after the commit.  It waits as
** long as a row lock may (due__my_lock_secs), so it answers within the
** store's bound: a migration that runs longer makes the other `due init`
** fail with DUE_EBUSY, and run again it finds the schema current.  A
** lost connection took the transaction and the lock with it: nothing to
** roll back or release then (and the error stays the loss).  Not on Galera:
** MariaDB refuses GET_LOCK there (MDEV-30473, error 1235) or, where a
** build still allows it, it locks one node only.  There DDL runs in total
** order on every node (TOI) and every step is re-runnable except its
** plain ALTERs, so two `due init` racing on two nodes can make the later
** fail with a duplicate column; run again, it finds the schema current.
*/
static int mig_begin(due_store *s)
{
	return run_text(s, "START TRANSACTION", "begin");
}

static int mig_lock(due_store *s)
{
	int64_t got;
	SQL(b, s);

	if (s->galera)
		return 0;
	due__my_add(&b, "SELECT GET_LOCK('due:init', %u)",
		    due__my_lock_secs(s));
	if (ints(s, &b, "lock schema", &got, 1) < 0)
		return due_error_last_code();
	return got == 1 ? 0
			: due__error_set(DUE_EBUSY,
					 "mysql store %s: another `due init` "
					 "held the schema lock for %u s",
					 s->label, due__my_lock_secs(s));
}

/* Release mig_lock's lock (none on Galera). */
static void mig_unlock(due_store *s)
{
	if (!s->galera && !s->broken)
		(void)run_text(s, "DO RELEASE_LOCK('due:init')",
			       "unlock schema");
}

static int mig_commit(due_store *s)
{
	int rc = run_text(s, "COMMIT", "commit");

	mig_unlock(s);
	return rc;
}

static void mig_rollback(due_store *s)
{
	if (!s->broken)
		(void)run_text(s, "ROLLBACK", "rollback");
	mig_unlock(s);
}

/*
** due_schedule(): a submit from SQL, inside the caller's own transaction,
** for any language's MySQL/MariaDB driver (docs/INTERFACE.md):
**
**   START TRANSACTION; INSERT INTO orders ...;
**   CALL due_schedule('close-order', '42', 1800000000, NULL, NULL, NULL,
**                     @id);
**   COMMIT;
**
** A PROCEDURE, not a FUNCTION: a function that writes needs
** log_bin_trust_function_creators (or SUPER) once binary logging is on,
** and MySQL has no default arguments either way; an OUT parameter reads
** the same from every driver.  NULL for run_in_us, max_attempts or the
** payload means the default (0, 5, '').  It checks what
** due__submit_check() checks, in the same words, SIGNALing SQLSTATE 22023
** before anything is written.  The insert is insert_one()'s: the same
** defaults, the server's clock from UTC_TIMESTAMP(6) (DUE_MY_NOW: right
** in any session time_zone), on 1062 the live task of (kind, key) by a
** locking read (the newest committed row even under the caller's
** REPEATABLE READ snapshot; the key CAST to BINARY, else the text
** parameter against the VARBINARY column reads the unique index by kind
** alone), again when it ended meanwhile.  Parameters
** are bytes for the key and payload (v3, below) and utf8mb4_bin text
** for the kind.  A new task bumps due_wake: MEMORY is not transactional, so the
** bump is seen at once (a listener polling between the CALL and the
** COMMIT finds nothing yet and the task waits for its safety poll; a
** rollback costs a spurious wake-up).  SQL SECURITY INVOKER: the caller
** needs the rights due_schedule_mysql_tx needs, nothing is lent to it.
** Unlike PostgreSQL's function it cannot follow the caller: a routine's
** unqualified tables are those of the database it was created in.
**
** The same bounds as `due add`: run_at_us within 1970 .. 9999 (what
** --at accepts; BIGINT would take year 294247), and the kind tested for
** a character outside the allowed ones rather than matched whole with
** ^...$, whose $ (PCRE in MariaDB, ICU in MySQL) also matches before a
** final newline: 'k\n' passed.
**
** Not a schema step: created when missing or older than ROUTINE_V (its
** COMMENT), so re-running `due init` adds it.  MySQL has no CREATE OR
** REPLACE PROCEDURE: DROP IF EXISTS + CREATE under the init lock.
** v2: the bounds above (v1 had neither).  v3: the key and the payload
** are bytes (VARBINARY, LONGBLOB; the payload column is bytes anyway,
** so a binary payload is kept exactly) and the key is checked for UTF-8
** here, as due add checks it: as utf8mb4 text parameters a caller's
** session with a non-strict sql_mode had a bad byte turned into '?' on
** the way in (a warning only), so 'k\xff' and 'k\xfe'
** became one key and the second task was deduplicated onto the first.
** Callers send UTF-8 (a utf8mb4 connection, every driver's default).
*/
#define ROUTINE_V "due_schedule v3"

/* The parameters due_schedule and due_schedule_on_key begin with. */
#define SCHED_PARAMS                                                           \
	" IN p_kind VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,"  \
	" IN p_payload LONGBLOB,"                                              \
	" IN p_run_in_us BIGINT, IN p_run_at_us BIGINT,"                       \
	" IN p_key VARBINARY(4096),"                                           \
	" IN p_max_attempts INT"
#define SCHED_DECLARE                                                          \
	"  DECLARE msg VARCHAR(128) DEFAULT NULL;\n"                           \
	"  DECLARE now_us, found BIGINT;\n"                                    \
	"  DECLARE delay BIGINT DEFAULT COALESCE(p_run_in_us, 0);\n"           \
	"  DECLARE attempts INT DEFAULT COALESCE(p_max_attempts, 5);\n"        \
	"  DECLARE dup, tries INT DEFAULT 0;\n"
/* (after every variable of the procedure: MySQL wants them first) */
#define SCHED_HANDLER "  DECLARE CONTINUE HANDLER FOR 1062 SET dup = 1;\n"
/*
** Their checks, in due__submit_check()'s words after the routine's `name`;
** `more`: further ELSEIF branches of the procedure's own.
*/
#define SCHED_CHECKS(name, more)                                               \
	"  IF p_kind IS NULL OR p_kind = '' THEN\n"                            \
	"    SET msg = '" name ": invalid kind '''': empty';\n"                \
	"  ELSEIF CHAR_LENGTH(p_kind) > 128 THEN\n"                            \
	"    SET msg = CONCAT('" name ": invalid kind: ',"                     \
	" CHAR_LENGTH(p_kind), ' characters (at most 128)');\n"                \
	"  ELSEIF p_kind REGEXP '[^A-Za-z0-9_.:-]' THEN\n"                     \
	"    SET msg = LEFT(CONCAT('" name ": invalid kind ''',"               \
	" LEFT(p_kind, 40), ''': only letters, digits and _ - . : are"         \
	" allowed'), 128);\n"                                                  \
	"  ELSEIF delay < 0 THEN\n"                                            \
	"    SET msg = '" name ": invalid delay (run_in_us): negative';\n"     \
	"  ELSEIF delay > 3162240000000000 THEN\n"                             \
	"    SET msg = '" name ": invalid delay (run_in_us): more than 100"    \
	" years';\n"                                                           \
	"  ELSEIF p_run_at_us IS NOT NULL AND delay <> 0 THEN\n"               \
	"    SET msg = '" name ": give a delay (run_in_us) or a due time"      \
	" (run_at_us), not both';\n"                                           \
	"  ELSEIF p_run_at_us < 0 THEN\n"                                      \
	"    SET msg = '" name ": invalid due time (run_at_us): before"        \
	" 1970-01-01T00:00:00Z';\n"                                            \
	"  ELSEIF p_run_at_us > 253402300799999999 THEN\n"                     \
	"    SET msg = '" name ": invalid due time (run_at_us): after"         \
	" 9999-12-31T23:59:59Z';\n"                                            \
	"  ELSEIF p_key IS NOT NULL AND p_key <> CAST(CONVERT(p_key USING"     \
	" utf8mb4) AS BINARY) THEN\n"                                          \
	"    SET msg = '" name ": invalid key: not UTF-8';\n"                  \
	"  ELSEIF p_key = '' THEN\n"                                           \
	"    SET msg = '" name ": invalid key '''': empty';\n"                 \
	"  ELSEIF OCTET_LENGTH(p_key) > 512 THEN\n"                            \
	"    SET msg = CONCAT('" name ": invalid key: ',"                      \
	" OCTET_LENGTH(p_key), ' bytes (at most 512)');\n"                     \
	"  ELSEIF attempts < 1 OR attempts > 1000 THEN\n"                      \
	"    SET msg = CONCAT('" name ": invalid max_attempts ', attempts,"    \
	" ': must be 1..1000');\n"                                             \
	"  ELSEIF OCTET_LENGTH(p_payload) > 1048576 THEN\n"                    \
	"    SET msg = CONCAT('" name ": payload is ',"                        \
	" OCTET_LENGTH(p_payload), ' bytes, over the limit of 1048576"         \
	" bytes');\n" more "  END IF;\n"                                       \
	"  IF msg IS NOT NULL THEN\n"                                          \
	"    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = msg;\n"                \
	"  END IF;\n"
#define SCHED_INSERT                                                           \
	"INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"    \
	" backoff_us, backoff_cap_us, `key`, created_at, updated_at)"          \
	" VALUES (p_kind, COALESCE(p_payload, ''), 'SCHEDULED',"               \
	" COALESCE(p_run_at_us, now_us + delay), attempts, 1000000,"           \
	" 3600000000, p_key, now_us, now_us);\n"
#define SCHED_WAKE                                                             \
	"INSERT INTO due_wake (id, n) VALUES (1, 1)"                           \
	" ON DUPLICATE KEY UPDATE n = n + 1;\n"

static const char sql_schedule_proc[] =
    "CREATE PROCEDURE due_schedule(" SCHED_PARAMS ", OUT p_id BIGINT)"
    " MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '" ROUTINE_V "'\n"
    "BEGIN\n" SCHED_DECLARE SCHED_HANDLER "  SET p_id = NULL;\n" SCHED_CHECKS(
	"due_schedule", "") "  SET now_us = " NOW ";\n"
			    "  retry: LOOP\n"
			    "    SET dup = 0, tries = tries + 1;\n"
			    "    " SCHED_INSERT "    IF dup = 0 THEN\n"
			    "      SET p_id = LAST_INSERT_ID();\n"
			    "      " SCHED_WAKE "      LEAVE retry;\n"
			    "    END IF;\n"
			    "    SELECT MAX(id) INTO found FROM due_task WHERE"
			    " kind = p_kind AND live_key = CAST(p_key AS"
			    " BINARY) LOCK IN SHARE MODE;\n"
			    "    IF found IS NOT NULL THEN\n"
			    "      SET p_id = found;\n"
			    "      LEAVE retry;\n"
			    "    END IF;\n"
			    "    IF tries >= 20 THEN\n"
			    "      SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT ="
			    " 'due_schedule: the live task of this key keeps"
			    " changing; try again';\n"
			    "    END IF;\n"
			    "  END LOOP;\n"
			    "END";

/*
** due_schedule_on_key: due_schedule with on_key (issue 38, due.h
** due_on_key), a procedure of its own beside it (MySQL cannot overload a
** routine nor default a parameter; due_schedule, its calls and the
** EXECUTE grants users gave on it stay as they are):
**
**   CALL due_schedule_on_key('digest', 'u42', 600000000, NULL, 'user-42',
**                            NULL, 'later', @id);
**
** The arguments of due_schedule, then on_key: 'keep' (NULL too: the
** default, due_schedule's behaviour), 'replace' or 'later', matched
** exactly (any other spelling, and replace or later without a key,
** SIGNAL 22023 naming it before anything is written).  @id receives the
** task that holds the key afterwards.  replace / later lock the live task
** of (kind, key) FOR UPDATE (the newest committed row, whatever the
** caller's isolation) until the caller's COMMIT, and the UPDATE repeats
** what was judged: a waiting one takes the due time and payload (later:
** only when the new time is later) and due_wake is bumped when it
** moved; a running one keeps everything but its key (set to NULL, so
** its live_key is NULL) and a new task is inserted that holds it.  An
** insert that meets a holder a racing submit made (1062) looks again.
** Outside a transaction (autocommit) each statement commits alone: a
** holder that changed between the look and the write is looked at again
** (the row count, and the state read again).  Created when missing or
** older than ON_KEY_V, by init_extras.  v2 (schema 11): a holder held by
** run-after keeps the new time as its own, applied at its release (its
** due_at stays HELD_AT), by a statement of its own that runs only for a
** held holder: a producer granted what v1 needs (docs/INTERFACE.md) keeps
** working for every other holder.  v3: `later` moves a held holder only
** when the new time is strictly later than the earliest it could run
** were it released now, GREATEST(COALESCE(after_at, now), now +
** after_delay_us) (key_move, SQLite's ST_KEY_MOVE); v2 moved it always.
** So a held holder needs SELECT (after_left, after_at, after_delay_us)
** and UPDATE (after_at, after_delay_us); SELECT on after_at and
** after_delay_us is new in v3.  When that statement matches nothing
** (later and not later, or no longer held: under autocommit it may have
** been released meanwhile) the plain UPDATE below runs, which cannot
** move a row still held: its due_at is HELD_AT, and `due` is never later.
*/
#define ON_KEY_V "due_schedule_on_key v3"
static const char sql_schedule_on_key_proc[] =
    "CREATE PROCEDURE due_schedule_on_key(" SCHED_PARAMS
    ", IN p_on_key VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,"
    " OUT p_id BIGINT)"
    " MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '" ON_KEY_V "'\n"
    "BEGIN\n" SCHED_DECLARE
    "  DECLARE how, claimed, cnt, held INT DEFAULT NULL;\n"
    "  DECLARE due BIGINT;\n" SCHED_HANDLER "  SET p_id = NULL;\n"
    /* compared as bytes: no trailing-space padding, no case folding */
    "  SET how = CASE CAST(COALESCE(p_on_key, 'keep') AS BINARY)"
    " WHEN 'keep' THEN 0 WHEN 'replace' THEN 1 WHEN 'later' THEN 2 "
    "END;\n" SCHED_CHECKS(
	"due_schedule_on_key",
	"  ELSEIF how IS NULL THEN\n"
	"    SET msg = LEFT(CONCAT('due_schedule_on_key: invalid on_key ''',"
	" LEFT(p_on_key, 16), ''': must be keep, replace or later'), 128);\n"
	"  ELSEIF how <> 0 AND p_key IS NULL THEN\n"
	"    SET msg = CONCAT('due_schedule_on_key: on_key ', p_on_key,"
	" ' needs a key: it says what to do with the live task of the same"
	" key');\n") "  SET now_us = " NOW ";\n"
		     "  SET due = COALESCE(p_run_at_us, now_us + delay);\n"
		     "  retry: LOOP\n"
		     "    SET dup = 0, tries = tries + 1;\n"
		     "    IF tries > 20 THEN\n"
		     "      SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT ="
		     " 'due_schedule_on_key: the live task of this key keeps "
		     "changing;"
		     " try again';\n"
		     "    END IF;\n"
		     "    IF how <> 0 THEN\n"
		     "      SELECT MAX(id), MAX(state = 'CLAIMED'), MAX(due_at "
		     "= " HELD_AT ") INTO found, claimed, held"
		     " FROM due_task WHERE kind = p_kind AND live_key = "
		     "CAST(p_key AS"
		     " BINARY) FOR UPDATE;\n"
		     "      IF found IS NOT NULL AND claimed = 0 THEN\n"
		     "        SET cnt = 0;\n"
		     /* held (run-after): its own statement, so that only a
			held holder needs the run-after columns' grants */
		     "        IF held = 1 THEN\n"
		     "          UPDATE due_task SET after_at = p_run_at_us,"
		     " after_delay_us = IF(p_run_at_us IS NULL, delay, 0),"
		     " payload = COALESCE(p_payload, ''), updated_at = now_us"
		     " WHERE id = found AND state = 'SCHEDULED' AND after_left"
		     " > 0 AND (how = 1 OR GREATEST(COALESCE(after_at, now_us),"
		     " now_us + after_delay_us) < due);\n"
		     "          SET cnt = ROW_COUNT();\n"
		     "        END IF;\n"
		     "        IF cnt = 0 THEN\n"
		     "          UPDATE due_task SET due_at = due, payload = "
		     "COALESCE(p_payload,"
		     " ''), updated_at = now_us WHERE id = found AND state = "
		     "'SCHEDULED'"
		     " AND (how = 1 OR due_at < due);\n"
		     "          SET cnt = ROW_COUNT();\n"
		     "        END IF;\n"
		     "        IF cnt > 0 THEN\n"
		     "          " SCHED_WAKE "        ELSE\n"
		     "          SELECT COUNT(*) INTO cnt FROM due_task WHERE "
		     "id "
		     "= found"
		     " AND state = 'SCHEDULED' LOCK IN SHARE MODE;\n"
		     "          IF cnt = 0 THEN\n"
		     "            ITERATE retry;\n"
		     "          END IF;\n"
		     "        END IF;\n"
		     "        SET p_id = found;\n"
		     "        LEAVE retry;\n"
		     "      ELSEIF found IS NOT NULL THEN\n"
		     "        UPDATE due_task SET `key` = NULL, updated_at = "
		     "now_us"
		     " WHERE id = found AND state = 'CLAIMED';\n"
		     "        IF ROW_COUNT() = 0 THEN\n"
		     "          ITERATE retry;\n"
		     "        END IF;\n"
		     "      END IF;\n"
		     "    END IF;\n"
		     "    " SCHED_INSERT "    IF dup = 0 THEN\n"
		     "      SET p_id = LAST_INSERT_ID();\n"
		     "      " SCHED_WAKE "      LEAVE retry;\n"
		     "    END IF;\n"
		     "    IF how = 0 THEN\n"
		     "      SELECT MAX(id) INTO found FROM due_task WHERE kind "
		     "= p_kind"
		     " AND live_key = CAST(p_key AS BINARY) LOCK IN SHARE "
		     "MODE;\n"
		     "      IF found IS NOT NULL THEN\n"
		     "        SET p_id = found;\n"
		     "        LEAVE retry;\n"
		     "      END IF;\n"
		     "    END IF;\n"
		     "  END LOOP;\n"
		     "END";

/*
** due_reschedule: reschedule (store.h) from SQL, inside the caller's own
** transaction (issue 38), beside due_schedule:
**
**   START TRANSACTION; UPDATE orders ...;
**   CALL due_reschedule(41, 600000000, NULL, NULL, @outcome);
**   COMMIT;
**
** Arguments: the task id, then exactly one of run_in_us (from the
** server's clock, DUE_MY_NOW) and run_at_us (microseconds since the
** epoch), the payload (NULL keeps the task's, '' empties it), and an OUT
** parameter that receives the outcome's name: RESCHEDULED, TOO_LATE,
** ALREADY_FINISHED or NOT_FOUND.  Bad input SIGNALs SQLSTATE 22023 with
** due_schedule's bounds and words before anything is written.  The row
** is locked (FOR UPDATE) until the caller's COMMIT, judged on what was
** locked, and the UPDATE repeats state = 'SCHEDULED'; due_wake is bumped
** when it moved (as due_schedule does: MEMORY, seen at once).  Created
** when missing or older than RESCHED_V, by init_extras.  v2 (schema 11):
** a task held by run-after keeps the new time as its own (after_at,
** after_delay_us), applied at its release; its due_at stays HELD_AT.
*/
#define RESCHED_V "due_reschedule v2"
static const char sql_reschedule_proc[] =
    "CREATE PROCEDURE due_reschedule(IN p_id BIGINT,"
    " IN p_run_in_us BIGINT, IN p_run_at_us BIGINT, IN p_payload LONGBLOB,"
    " OUT p_outcome VARCHAR(32))"
    " MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '" RESCHED_V "'\n"
    "BEGIN\n"
    "  DECLARE msg VARCHAR(128) DEFAULT NULL;\n"
    "  DECLARE st VARCHAR(16) DEFAULT NULL;\n"
    "  DECLARE CONTINUE HANDLER FOR NOT FOUND SET st = NULL;\n"
    "  SET p_outcome = NULL;\n"
    "  IF p_id IS NULL OR p_id <= 0 THEN\n"
    "    SET msg = 'due_reschedule: invalid task id: ids are positive"
    " integers';\n"
    "  ELSEIF p_run_in_us IS NULL AND p_run_at_us IS NULL THEN\n"
    "    SET msg = 'due_reschedule: give a delay (run_in_us) or a due time"
    " (run_at_us)';\n"
    "  ELSEIF p_run_in_us IS NOT NULL AND p_run_at_us IS NOT NULL THEN\n"
    "    SET msg = 'due_reschedule: give a delay (run_in_us) or a due time"
    " (run_at_us), not both';\n"
    "  ELSEIF p_run_in_us < 0 THEN\n"
    "    SET msg = 'due_reschedule: invalid delay (run_in_us): negative';\n"
    "  ELSEIF p_run_in_us > 3162240000000000 THEN\n"
    "    SET msg = 'due_reschedule: invalid delay (run_in_us): more than"
    " 100 years';\n"
    "  ELSEIF p_run_at_us < 0 THEN\n"
    "    SET msg = 'due_reschedule: invalid due time (run_at_us): before"
    " 1970-01-01T00:00:00Z';\n"
    "  ELSEIF p_run_at_us > 253402300799999999 THEN\n"
    "    SET msg = 'due_reschedule: invalid due time (run_at_us): after"
    " 9999-12-31T23:59:59Z';\n"
    "  ELSEIF OCTET_LENGTH(p_payload) > 1048576 THEN\n"
    "    SET msg = CONCAT('due_reschedule: payload is ',"
    " OCTET_LENGTH(p_payload), ' bytes, over the limit of 1048576"
    " bytes');\n"
    "  END IF;\n"
    "  IF msg IS NOT NULL THEN\n"
    "    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = msg;\n"
    "  END IF;\n"
    "  SELECT state INTO st FROM due_task WHERE id = p_id FOR UPDATE;\n"
    "  IF st IS NULL THEN\n"
    "    SET p_outcome = 'NOT_FOUND';\n"
    "  ELSEIF st = 'CLAIMED' THEN\n"
    "    SET p_outcome = 'TOO_LATE';\n"
    "  ELSEIF st <> 'SCHEDULED' THEN\n"
    "    SET p_outcome = 'ALREADY_FINISHED';\n"
    "  ELSE\n"
    "    UPDATE due_task SET after_at = IF(after_left > 0, p_run_at_us,"
    " after_at), after_delay_us = IF(after_left > 0, COALESCE(p_run_in_us,"
    " 0), after_delay_us), due_at = IF(after_left > 0, due_at,"
    " COALESCE(p_run_at_us, " NOW " + p_run_in_us)),"
    " payload = COALESCE(p_payload, payload),"
    " updated_at = " NOW " WHERE id = p_id AND state = 'SCHEDULED';\n"
    "    INSERT INTO due_wake (id, n) VALUES (1, 1)"
    " ON DUPLICATE KEY UPDATE n = n + 1;\n"
    "    SET p_outcome = 'RESCHEDULED';\n"
    "  END IF;\n"
    "END";

/*
** due_schedule_after: a run-after submit from SQL (issue 38 point 3),
** inside the caller's own transaction, beside due_schedule (MySQL cannot
** overload a routine or default a parameter):
**
**   START TRANSACTION; INSERT INTO orders ...;
**   CALL due_schedule_after('ship', '42', 0, NULL, NULL, NULL,
**                           '[41, 42]', FALSE, @id);
**   COMMIT;
**
** The arguments of due_schedule, then the parents as a JSON array of task
** ids (what every driver makes of a list: json.dumps, JSON.stringify; it
** is the "after" of HTTP and of batch lines, and it needs no separator
** or whitespace rules: MySQL and MariaDB both read it with JSON_LENGTH,
** JSON_EXTRACT and JSON_TYPE), and after_any_end (NULL: FALSE).  Checks,
** before anything is written: due_schedule's, then the array (1..1000
** positive integers, none twice) SIGNAL 22023; every parent's row is
** written (after_children + 1, one prepared UPDATE over the checked ids,
** in primary-key order: lock_parents says why) and then read in share
** mode (the newest committed row, held to the caller's COMMIT: a
** parent's finish waits for it and then releases this child) and judged
** in the array's order: missing SIGNALs 23000 "parent task 41 not
** found", DEAD or CANCELLED (without after_any_end) 55000 "parent task
** 41 is DEAD (add with after_any_end to run after any end)", the
** parents' counts set back first (after_children - 1).  The task
** is held (due_at HELD_AT) while a parent is live, its own time kept in
** after_at / after_delay_us; with a key whose live holder exists, @id is
** the holder and nothing else is written.  Created when missing or
** older than AFTER_V, by init_extras.  v2 added the parents' write.  v3:
** an element is judged by its text (digits, no leading zero, at most
** 9223372036854775807) before it is cast: v2 tested JSON_TYPE, which
** MariaDB calls INTEGER for 1e0, and the CAST of 1e0 (or of a number
** past BIGINT) raised 1292, SQLSTATE 22007, instead of 22023 naming it.
*/
#define AFTER_V "due_schedule_after v3"
#define AFTER_ELEM "JSON_EXTRACT(p_after, CONCAT('$[', i, ']'))"
/* a refused parent: set the parents' counts back before the SIGNAL */
#define AFTER_UNDO                                                             \
	"      SET @due_after_d = -1;\n"                                       \
	"      EXECUTE due_after_touch USING @due_after_d;\n"                  \
	"      DEALLOCATE PREPARE due_after_touch;\n"
static const char sql_schedule_after_proc[] =
    "CREATE PROCEDURE due_schedule_after(" SCHED_PARAMS
    ", IN p_after LONGTEXT, IN p_after_any_end BOOLEAN, OUT p_id BIGINT)"
    " MODIFIES SQL DATA SQL SECURITY INVOKER COMMENT '" AFTER_V "'\n"
    "BEGIN\n" SCHED_DECLARE "  DECLARE n, i, live INT DEFAULT 0;\n"
    "  DECLARE v BIGINT;\n"
    "  DECLARE el LONGTEXT;\n"
    "  DECLARE st VARCHAR(16);\n"
    "  DECLARE seen, mask LONGTEXT DEFAULT '';\n"
    "  DECLARE any_end BOOLEAN DEFAULT COALESCE(p_after_any_end, FALSE);\n"
    "  DECLARE CONTINUE HANDLER FOR NOT FOUND SET st = NULL;\n" SCHED_HANDLER
    "  SET p_id = NULL;\n" SCHED_CHECKS(
	"due_schedule_after",
	"  ELSEIF p_after IS NULL OR NOT "
	"JSON_VALID(p_after) THEN\n"
	"    SET msg = 'due_schedule_after: after must "
	"be a JSON array of"
	" task ids, like ''[41, 42]''';\n"
	"  ELSEIF JSON_TYPE(p_after) <> 'ARRAY' THEN\n"
	"    SET msg = 'due_schedule_after: after must "
	"be a JSON array of"
	" task ids, like ''[41, 42]''';\n"
	"  ELSEIF JSON_LENGTH(p_after) = 0 THEN\n"
	"    SET msg = 'due_schedule_after: after is "
	"empty: give the"
	" parents';\n"
	"  ELSEIF JSON_LENGTH(p_after) > 1000 THEN\n"
	"    SET msg = CONCAT('due_schedule_after: after "
	"lists ',"
	" JSON_LENGTH(p_after), ' tasks: at most "
	"1000');\n") "  SET n = JSON_LENGTH(p_after);\n"
		     "  WHILE msg IS NULL AND i < n DO\n"
		     /* judged as the element's text, cast only once it is
			digits that fit a BIGINT: CAST of 1e0 or of
			99999999999999999999 raised 1292 (22007) */
		     "    SET el = " AFTER_ELEM ", v = NULL;\n"
		     "    IF el IS NOT NULL AND el <> '' AND el NOT REGEXP"
		     " '[^0-9]' AND LEFT(el, 1) <> '0' AND (CHAR_LENGTH(el)"
		     " < 19 OR (CHAR_LENGTH(el) = 19 AND el <="
		     " '9223372036854775807')) THEN\n"
		     "      SET v = CAST(el AS SIGNED);\n"
		     "    END IF;\n"
		     "    IF v IS NULL OR v <= 0 THEN\n"
		     "      SET msg = "
		     "LEFT(CONCAT('due_schedule_after: "
		     "after: invalid task"
		     " id ', LEFT(" AFTER_ELEM ", 40), ': ids are positive "
		     "integers'),"
		     " 128);\n"
		     "    ELSEIF FIND_IN_SET(v, seen) > "
		     "0 THEN\n"
		     "      SET msg = "
		     "CONCAT('due_schedule_after: after "
		     "lists task ', v,"
		     " ' twice');\n"
		     "    ELSE\n"
		     "      SET seen = CONCAT(seen, "
		     "IF(i, ',', ''), v);\n"
		     "    END IF;\n"
		     "    SET i = i + 1;\n"
		     "  END WHILE;\n"
		     "  IF msg IS NOT NULL THEN\n"
		     "    SIGNAL SQLSTATE '22023' SET "
		     "MESSAGE_TEXT = msg;\n"
		     "  END IF;\n"
		     /* write every parent's row first (lock_parents) */
		     "  SET @due_after_sql = CONCAT('UPDATE due_task SET"
		     " after_children = after_children + ? WHERE id IN (',"
		     " seen, ')'), @due_after_d = 1;\n"
		     "  PREPARE due_after_touch FROM @due_after_sql;\n"
		     "  EXECUTE due_after_touch USING @due_after_d;\n"
		     "  SET i = 0;\n"
		     "  WHILE i < n DO\n"
		     "    SET v = CAST(" AFTER_ELEM " AS SIGNED), st = NULL;\n"
		     "    SELECT state INTO st FROM "
		     "due_task WHERE id = v LOCK IN SHARE"
		     " MODE;\n"
		     "    IF st IS NULL THEN\n"
		     "      SET msg = "
		     "CONCAT('due_schedule_after: parent "
		     "task ', v,"
		     " ' not found');\n" AFTER_UNDO
		     "      SIGNAL SQLSTATE '23000' SET "
		     "MESSAGE_TEXT = msg;\n"
		     "    ELSEIF st IN ('DEAD', "
		     "'CANCELLED') AND NOT any_end THEN\n"
		     "      SET msg = "
		     "CONCAT('due_schedule_after: parent "
		     "task ', v, ' is ',"
		     " st, ' (add with after_any_end to "
		     "run after any end)');\n" AFTER_UNDO
		     "      SIGNAL SQLSTATE '55000' SET "
		     "MESSAGE_TEXT = msg;\n"
		     "    END IF;\n"
		     "    SET mask = CONCAT(mask, IF(st "
		     "IN ('SCHEDULED', 'CLAIMED'), '1',"
		     " '0'));\n"
		     "    SET live = live + (st IN "
		     "('SCHEDULED', 'CLAIMED'));\n"
		     "    SET i = i + 1;\n"
		     "  END WHILE;\n"
		     "  DEALLOCATE PREPARE due_after_touch;\n"
		     "  SET now_us = " NOW ";\n"
		     "  retry: LOOP\n"
		     "    SET dup = 0, tries = tries + "
		     "1;\n"
		     "    INSERT INTO due_task (kind, "
		     "payload, state, due_at, "
		     "max_attempts,"
		     " backoff_us, backoff_cap_us, "
		     "`key`, created_at, updated_at, "
		     "after_n,"
		     " after_left, after_any_end, "
		     "after_at, after_delay_us)"
		     " VALUES (p_kind, "
		     "COALESCE(p_payload, ''), "
		     "'SCHEDULED',"
		     " IF(live > 0, " HELD_AT
		     ", COALESCE(p_run_at_us, now_us + "
		     "delay)),"
		     " attempts, 1000000, 3600000000, "
		     "p_key, now_us, now_us, n, live,"
		     " any_end, p_run_at_us, "
		     "IF(p_run_at_us IS NULL, delay, "
		     "0));\n"
		     "    IF dup = 0 THEN\n"
		     "      SET p_id = LAST_INSERT_ID(), "
		     "i = 0;\n"
		     "      WHILE i < n DO\n"
		     "        INSERT INTO due_after "
		     "(parent, child, pending) VALUES "
		     "(CAST(" AFTER_ELEM " AS SIGNED), p_id, SUBSTRING(mask, "
		     "i + 1, 1) = '1');\n"
		     "        SET i = i + 1;\n"
		     "      END WHILE;\n"
		     "      " SCHED_WAKE "      LEAVE retry;\n"
		     "    END IF;\n"
		     "    SELECT MAX(id) INTO found FROM "
		     "due_task WHERE kind = p_kind"
		     " AND live_key = CAST(p_key AS "
		     "BINARY) LOCK IN SHARE MODE;\n"
		     "    IF found IS NOT NULL THEN\n"
		     "      SET p_id = found;\n"
		     "      LEAVE retry;\n"
		     "    END IF;\n"
		     "    IF tries >= 20 THEN\n"
		     "      SIGNAL SQLSTATE '40001' SET "
		     "MESSAGE_TEXT = 'due_schedule_after:"
		     " the live task of this key keeps "
		     "changing; try again';\n"
		     "    END IF;\n"
		     "  END LOOP;\n"
		     "END";

/*
** What `due init` keeps beside the versioned schema, done only when
** needed (every due_open with create runs init): the byte-exact key and
** group columns (VARBINARY, NO PAD) of a database made by this backend
** before they were, and the due_schedule, due_schedule_on_key,
** due_reschedule and due_schedule_after procedures.
*/
static int init_extras(due_store *s)
{
	static const char alter[] =
	    "ALTER TABLE due_task MODIFY `key` VARBINARY(512) NULL,"
	    " MODIFY grp VARBINARY(255) NULL,"
	    " MODIFY live_key VARBINARY(512) AS (IF(state IN ('SCHEDULED',"
	    " 'CLAIMED'), `key`, NULL)) STORED";
	int64_t need[6];
	int rc;

	for (int locked = 0;; locked = 1) {
		SQL(b, s);
		due__my_add(
		    &b, "SELECT (SELECT COUNT(*) FROM information_schema"
			".columns WHERE table_schema = DATABASE() AND"
			" table_name = 'due_task' AND column_name = 'key'"
			" AND data_type <> 'varbinary'),"
			" (SELECT COUNT(*) = 0 FROM information_schema"
			".routines WHERE routine_schema = DATABASE() AND"
			" routine_name = 'due_schedule' AND routine_type"
			" = 'PROCEDURE' AND routine_comment = '" ROUTINE_V "'),"
			" (SELECT COUNT(*) = 0 FROM information_schema"
			".routines WHERE routine_schema = DATABASE() AND"
			" routine_name = 'due_reschedule' AND routine_type"
			" = 'PROCEDURE' AND routine_comment = '" RESCHED_V "'),"
			" (SELECT COUNT(*) = 0 FROM information_schema"
			".routines WHERE routine_schema = DATABASE() AND"
			" routine_name = 'due_schedule_on_key' AND routine_type"
			" = 'PROCEDURE' AND routine_comment = '" ON_KEY_V "'),"
			" (SELECT COUNT(*) = 0 FROM information_schema"
			".routines WHERE routine_schema = DATABASE() AND"
			" routine_name = 'due_schedule_after' AND routine_type"
			" = 'PROCEDURE' AND routine_comment = '" AFTER_V "'),"
			" (SELECT COUNT(*) = 0 FROM information_schema.tables"
			" WHERE table_schema = DATABASE() AND table_name ="
			" 'due_wake')");
		if ((rc = ints(s, &b, "read schema extras", need, 6)) < 0)
			goto out;
		if (!need[0] && !need[1] && !need[2] && !need[3] && !need[4] &&
		    !need[5])
			goto out;
		if (!locked) {
			if ((rc = mig_lock(s)) < 0)
				return rc;
			continue; /* read again under the lock */
		}
		if (need[0] && (rc = run_text(s, alter, "byte-exact keys")) < 0)
			goto out;
		/* an operator's DROP: every bump failed (a hint, so
		   silently) and workers waited for their safety poll */
		if (need[5] &&
		    (rc = run_text(s, sql_wake_table, "create due_wake")) < 0)
			goto out;
		if (need[1] &&
		    ((rc = run_text(s, "DROP PROCEDURE IF EXISTS due_schedule",
				    "drop procedure due_schedule")) < 0 ||
		     (rc = run_text(s, sql_schedule_proc,
				    "create procedure due_schedule")) < 0))
			goto out;
		if (need[2] &&
		    ((rc =
			  run_text(s, "DROP PROCEDURE IF EXISTS due_reschedule",
				   "drop procedure due_reschedule")) < 0 ||
		     (rc = run_text(s, sql_reschedule_proc,
				    "create procedure due_reschedule")) < 0))
			goto out;
		if (need[3] &&
		    ((rc = run_text(
			  s, "DROP PROCEDURE IF EXISTS due_schedule_on_key",
			  "drop procedure due_schedule_on_key")) < 0 ||
		     (rc = run_text(s, sql_schedule_on_key_proc,
				    "create procedure due_schedule_on_key")) <
			 0))
			goto out;
		if (need[4] &&
		    (rc = run_text(
			 s, "DROP PROCEDURE IF EXISTS due_schedule_after",
			 "drop procedure due_schedule_after")) == 0)
			rc = run_text(s, sql_schedule_after_proc,
				      "create procedure due_schedule_after");
		goto out;
	}
out:
	mig_unlock(s);
	return rc;
}

static int mys_init_schema(due_store *s)
{
	const due_migration m = {.label = s->label,
				 .where = WHERE,
				 .steps = steps,
				 .begin = mig_begin,
				 .lock = mig_lock,
				 .read_version = read_version,
				 .exec = run_text,
				 .commit = mig_commit,
				 .rollback = mig_rollback};
	int rc = due__my_ok(s);

	if (rc == 0)
		rc = due__migrate(s, &m);
	return rc < 0 ? rc : init_extras(s);
}

static int mys_now(due_store *s, due_time *out)
{
	int rc = due__my_ok(s);
	return rc < 0 ? rc : server_now(s, out);
}

static void *mys_native(due_store *s) { return s->conn; }

/* ------------------------------------------------------------------ */
/* Producer                                                            */
/* ------------------------------------------------------------------ */

/*
** The payload limit.  A statement is one packet of at most the session's
** max_allowed_packet (read at connect, mysql_conn.c), and a payload
** travels in it as hex, twice its size, beside the row's other values
** (kind, key and group escaped, numbers: under MY_ROW_ROOM together).  So
** one task's payload is at most (max_allowed_packet - MY_ROW_ROOM) / 2
** bytes; a larger one is refused before anything is sent (the server
** would answer 1153, or drop the connection: 2006).  The server's setting
** goes up to MY_PACKET_MAX.  A batch is split into statements that each
** fit (insert_rows), inside its one transaction.
*/
#define MY_ROW_ROOM (16u << 10)
#define MY_PACKET_MAX (1024ull << 20)

/* The largest payload s takes (SIZE_MAX: not known, a caller's conn). */
static size_t my_payload_max(const due_store *s)
{
	if (!s->packet)
		return SIZE_MAX;
	if (s->packet <= 2 * MY_ROW_ROOM)
		return 0;
	return (size_t)((s->packet - MY_ROW_ROOM) / 2);
}

/* 0, or DUE_ETOOBIG for the first of n payloads s cannot take. */
static int my_payloads_fit(const due_store *s, const due_submit *items,
			   size_t n)
{
	size_t max = my_payload_max(s), i = due__payload_over(items, n, max);
	unsigned long long need;
	char who[300];

	if (i == n)
		return 0;
	snprintf(who, sizeof(who), "mysql store %s", s->label);
	/* the setting that holds it, rounded up to a MiB */
	need = 2ull * items[i].payload_len + MY_ROW_ROOM;
	need = (need + (1u << 20) - 1) / (1u << 20) * (1u << 20);
	if (need > MY_PACKET_MAX)
		return due__store_payload_too_big(
		    who, i, n, items[i].payload_len, max,
		    "this server takes in one task (max_allowed_packet = %llu; "
		    "a payload is sent as hex, twice its size): no setting "
		    "takes it, max_allowed_packet is at most %llu, for "
		    "payloads up to %llu bytes",
		    (unsigned long long)s->packet, MY_PACKET_MAX,
		    (MY_PACKET_MAX - MY_ROW_ROOM) / 2);
	return due__store_payload_too_big(
	    who, i, n, items[i].payload_len, max,
	    "this server takes in one task (max_allowed_packet = %llu; a "
	    "payload is sent as hex, twice its size): raise max_allowed_packet "
	    "on the server to at least %llu (SET GLOBAL max_allowed_packet = "
	    "%llu, and in its config file)",
	    (unsigned long long)s->packet, need, need);
}

/*
** The same bound on a result (complete): 0, or DUE_ETOOBIG for the first
** result s cannot take, before anything is sent.  A worker then fails
** that try with this message (as for a result over max_result).
*/
static int my_results_fit(const due_store *s, const due_completion *items,
			  size_t n)
{
	size_t max = my_payload_max(s);

	for (size_t i = 0; i < n; i++)
		if (items[i].result_len > max)
			return due__error_set(
			    DUE_ETOOBIG,
			    "mysql store %s: result of task %lld is %zu bytes, "
			    "over the %zu bytes this server takes in one task "
			    "(max_allowed_packet = %llu; a result is sent as "
			    "hex, twice its size): raise max_allowed_packet on "
			    "the server",
			    s->label, (long long)items[i].id,
			    items[i].result_len, max,
			    (unsigned long long)s->packet);
	return 0;
}

#define INSERT_COLS                                                            \
	"INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"    \
	" backoff_us, backoff_cap_us, `key`, priority, grp, timeout_us,"       \
	" created_at, updated_at"
#define INSERT_HEAD INSERT_COLS ") VALUES "
/* A task added after others (run-after): its own time kept aside. */
#define INSERT_HEAD_AFTER                                                      \
	INSERT_COLS ", after_n, after_left, after_any_end, after_at,"          \
		    " after_delay_us) VALUES "

/*
** One submit's VALUES tuple; its times from `now`, an SQL expression of
** the server's now (NOW, or NOW_V set by the same transaction).  A
** run-after submit (n_after > 0, INSERT_HEAD_AFTER) waiting for `live`
** parents: held (due_at HELD_AT) when live > 0, its own time in
** after_at / after_delay_us either way.
*/
static void insert_values(due_my_sql *b, const due_submit *it, const char *now,
			  int32_t live)
{
	const due_schedule_opts *o = &it->opts;

	due__my_add(b, "(");
	due__my_str(b, it->kind);
	due__my_add(b, ", ");
	due__my_blob(b, it->payload, it->payload_len);
	if (o->n_after && live > 0)
		due__my_add(b, ", 'SCHEDULED', " HELD_AT ", ");
	else if (o->at != DUE_TIME_NONE)
		due__my_add(b, ", 'SCHEDULED', %lld, ", (long long)o->at);
	else
		due__my_add(b, ", 'SCHEDULED', %s + %lld, ", now,
			    (long long)o->delay_us);
	due__my_add(b, "%d, %lld, %lld, ", o->max_attempts,
		    (long long)o->backoff_us, (long long)o->backoff_cap_us);
	due__my_str(b, o->key);
	due__my_add(b, ", %d, ", o->priority);
	due__my_str(b, o->group);
	if (o->timeout_us > 0)
		due__my_add(b, ", %lld", (long long)o->timeout_us);
	else
		due__my_add(b, ", NULL");
	due__my_add(b, ", %s, %s", now, now);
	if (o->n_after) {
		due__my_add(b, ", %zu, %d, %d, ", o->n_after, (int)live,
			    o->after_any_end ? 1 : 0);
		if (o->at != DUE_TIME_NONE)
			due__my_add(b, "%lld, 0", (long long)o->at);
		else
			due__my_add(b, "NULL, %lld", (long long)o->delay_us);
	}
	due__my_add(b, ")");
}

/*
** "UPDATE due_task SET after_children = after_children + d WHERE id IN
** (the parents)": the submit's write of its parents' rows (lock_parents).
*/
static void touch_parents(due_my_sql *b, const due_schedule_opts *o, int d)
{
	due__my_add(b,
		    "UPDATE due_task SET after_children = after_children + %d"
		    " WHERE id IN (",
		    d);
	for (size_t i = 0; i < o->n_after; i++)
		due__my_add(b, "%s%lld", i ? ", " : "", (long long)o->after[i]);
	due__my_add(b, ")");
}

/*
** Run-after: lock it's parents and judge each.  First WRITE every
** parent's row (after_children + 1: a real change, so the row is in the
** transaction's write set), then read their states with a locking read
** (LOCK IN SHARE MODE: the newest committed rows, whatever the caller's
** isolation; the rows are ours already, X-locked by the UPDATE, which
** takes them in primary-key order, so two children of one parent queue on
** its row instead of both holding S and both wanting X), in the same
** round trip on our own connections (a caller's, due_schedule_mysql_tx,
** may not take several statements a text: two there).  A parent's
** finish locks its row FOR UPDATE before it reads its edges, so it
** either ran before us (we see it ended) or waits for
** our COMMIT and then reads our edges (its release runs in statements
** after its lock was granted: READ COMMITTED reads what committed before
** each statement).  On Galera the locks hold on one node only: there the
** write is what counts, since the finish writes the same row, so of a
** submit and a finish racing through two nodes one fails certification
** (1213) and is retried whole, reading the other's outcome (without it
** both committed and the child stayed held on a DONE parent:
** test_galera.sh).  *live[i]: parent i is SCHEDULED or CLAIMED (its edge
** is pending), malloc'd.  DUE_ENOTFOUND for the first missing parent,
** DUE_ESTATE for the first DEAD or CANCELLED one unless after_any_end, in
** the caller's order; the counts are then set back, so that nothing is
** changed either way (a caller's transaction may go on and commit).
*/
static int lock_parents(due_store *s, const due_schedule_opts *o, bool **live,
			int32_t *n_live)
{
	MYSQL_RES *r = NULL;
	MYSQL_ROW row;
	size_t n = o->n_after, got = 0, bad = n;
	int bad_st = 0;
	due_id *ids = NULL;
	char *st = NULL;
	int rc;
	SQL(b, s);

	*n_live = 0;
	if (!(*live = calloc(n, sizeof(**live))) ||
	    !(ids = calloc(n, sizeof(*ids))) || !(st = calloc(n, 1))) {
		rc = due__error_set(DUE_ENOMEM, "out of memory");
		goto out;
	}
	touch_parents(&b, o, 1);
	if (!s->own) { /* a caller's connection: one statement a text */
		if ((rc = exec(s, &b, "lock parents", NULL)) < 0)
			goto out;
	} else {
		due__my_add(&b, "; ");
	}
	due__my_add(&b, "SELECT id, state FROM due_task WHERE id IN (");
	for (size_t i = 0; i < n; i++)
		due__my_add(&b, "%s%lld", i ? ", " : "",
			    (long long)o->after[i]);
	due__my_add(&b, ") LOCK IN SHARE MODE");
	rc = due__my_exec(s, &b, "lock parents", &r);
	due__my_sql_free(&b);
	if (rc < 0)
		goto out;
	while (r && got < n && (row = mysql_fetch_row(r))) {
		due_state ps = DUE_DONE;
		ids[got] = due__my_i64(row, 0);
		if (row[1] && (rc = due_state_parse(&ps, row[1])) < 0)
			goto out;
		st[got++] = (char)ps;
	}
	for (size_t i = 0; i < n && bad == n; i++) {
		size_t k = 0;
		while (k < got && ids[k] != o->after[i])
			k++;
		if (k == got ||
		    ((st[k] == DUE_DEAD || st[k] == DUE_CANCELLED) &&
		     !o->after_any_end)) {
			bad = i;
			bad_st = k == got ? -1 : st[k];
		} else if (st[k] == DUE_SCHEDULED || st[k] == DUE_CLAIMED)
			(*live)[i] = true;
	}
	if (bad == n)
		goto out;
	/* refused: set the counts back first (nothing changed), then say why */
	touch_parents(&b, o, -1);
	if ((rc = exec(s, &b, "lock parents (undo)", NULL)) < 0)
		goto out;
	if (bad_st < 0)
		rc = due__error_set(DUE_ENOTFOUND, "parent task %lld not found",
				    (long long)o->after[bad]);
	else
		rc = due__error_set(
		    DUE_ESTATE,
		    "parent task %lld is %s (add with after_any_end "
		    "to run after any end)",
		    (long long)o->after[bad],
		    due_state_name((due_state)bad_st));
out:
	mysql_free_result(r);
	free(ids);
	free(st);
	for (size_t i = 0; rc == 0 && i < n; i++)
		*n_live += (*live)[i];
	return rc;
}

/*
** The live task of it's (kind, key): *id, or 0 when there is none now.  A
** locking read: it reads the newest committed row even inside a caller's
** REPEATABLE READ transaction, whose snapshot may predate the task that
** made the insert fail with 1062 (InnoDB already holds a shared lock on
** that duplicate entry, so this takes nothing more).
*/
static int find_live(due_store *s, const due_submit *it, due_id *id)
{
	SQL(b, s);

	due__my_add(&b, "SELECT id FROM due_task WHERE kind = ");
	due__my_str(&b, it->kind);
	due__my_add(&b, " AND live_key = ");
	due__my_str(&b, it->opts.key);
	due__my_add(&b, " LOCK IN SHARE MODE");
	return ints(s, &b, "find task by key", id, 1);
}

/*
** on_key REPLACE or LATER (due.h due_on_key), inside the submit's
** transaction: the live task of it's (kind, key) locked FOR UPDATE (the
** newest committed row, as find_live reads it), *id (0: none) and
** whether it is running.  Locked before any insert, so racing producers
** of one key queue on its row instead of each holding the shared lock a
** duplicate-key error takes (two of those wanting the row deadlock).
*/
static int lock_holder(due_store *s, const due_submit *it, due_id *id,
		       bool *claimed)
{
	int64_t v[2];
	int rc;
	SQL(b, s);

	due__my_add(&b, "SELECT id, state = 'CLAIMED' FROM due_task"
			" WHERE kind = ");
	due__my_str(&b, it->kind);
	due__my_add(&b, " AND live_key = ");
	due__my_str(&b, it->opts.key);
	due__my_add(&b, " FOR UPDATE");
	rc = ints(s, &b, "lock task by key", v, 2);
	*id = (due_id)v[0];
	*claimed = v[1] != 0;
	return rc;
}

/* The due time of a submit: its `at`, or the server's now + its delay. */
static void due_expr(due_my_sql *b, const due_schedule_opts *o)
{
	if (o->at != DUE_TIME_NONE)
		due__my_add(b, "%lld", (long long)o->at);
	else
		due__my_add(b, "(" NOW " + %lld)", (long long)o->delay_us);
}

/*
** The waiting holder `id` (locked by lock_holder) takes it's due time and
** payload; LATER: only a later one.  A holder held by run-after
** (after_left > 0, due_at HELD_AT) keeps the new time as its own
** (after_at / after_delay_us, applied at its release, as reschedule
** does), and LATER compares the new time with the earliest it could run
** were it released now, GREATEST(COALESCE(after_at, now), now +
** after_delay_us), as SQLite's ST_KEY_MOVE does (not with HELD_AT, which
** nothing is later than; and not always, as the first version moved a
** held holder for LATER too).  The state and, for LATER, the comparison
** are repeated in the UPDATE's WHERE, whose one NOW (fixed at the
** statement's start) is the new time and the release's now alike.
** *moved: LATER moved when the row matched; REPLACE always does (the row
** is ours and SCHEDULED: a caller's connection without CLIENT_FOUND_ROWS
** counts 0 when nothing changed).
*/
static int key_move(due_store *s, const due_submit *it, due_id id, bool *moved)
{
	bool later = it->opts.on_key == DUE_ON_KEY_LATER;
	uint64_t n = 0;
	int rc;
	SQL(b, s);

	/* a held holder (run-after) keeps the new time as its own, applied
	   at its release (as reschedule does): its due time is not known
	   before then */
	due__my_add(&b, "UPDATE due_task SET after_at = IF(after_left > 0, ");
	if (it->opts.at != DUE_TIME_NONE)
		due__my_add(&b,
			    "%lld, after_at), after_delay_us = IF(after_left"
			    " > 0, 0, after_delay_us)",
			    (long long)it->opts.at);
	else
		due__my_add(&b,
			    "NULL, after_at), after_delay_us = IF(after_left"
			    " > 0, %lld, after_delay_us)",
			    (long long)it->opts.delay_us);
	due__my_add(&b, ", due_at = IF(after_left > 0, due_at, ");
	due_expr(&b, &it->opts);
	due__my_add(&b, "), payload = ");
	due__my_blob(&b, it->payload, it->payload_len);
	due__my_add(&b,
		    ", updated_at = " NOW " WHERE id = %lld AND"
		    " state = 'SCHEDULED'",
		    (long long)id);
	if (later) {
		due__my_add(&b, " AND IF(after_left > 0, GREATEST(COALESCE("
				"after_at, " NOW "), " NOW " + after_delay_us),"
				" due_at) < ");
		due_expr(&b, &it->opts);
	}
	rc = exec(s, &b, "move task by key", &n);
	*moved = rc == 0 && (n == 1 || !later);
	return rc;
}

/*
** The running holder `id` (locked by lock_holder) gives up its key: its
** live_key becomes NULL, so the new task can hold it and the old one's
** finish or retry never touches it.  Nothing else of it changes.
*/
static int key_give_up(due_store *s, due_id id)
{
	SQL(b, s);

	due__my_add(&b,
		    "UPDATE due_task SET `key` = NULL, updated_at = " NOW
		    " WHERE id = %lld AND state = 'CLAIMED'",
		    (long long)id);
	return exec_one(s, &b, "give up key", id);
}

/*
** Insert one submit: out->id is the new id, or the live task's with
** existed = true when (kind, key) is taken (the UNIQUE index on live_key
** refuses the insert with 1062).  When that task ended between the two
** statements, insert again.  on_key REPLACE or LATER (a transaction:
** schedule_tx, or the caller's) first locks the holder: a waiting one is
** moved (key_move), a running one gives up the key (key_give_up) and the
** insert follows; an insert that still meets a holder (a racing submit
** made one) locks that one in turn.
*/
static int insert_task(due_store *s, const due_submit *it, due_submitted *out,
		       int32_t live)
{
	bool act = it->opts.key && it->opts.on_key != DUE_ON_KEY_KEEP;
	int rc;

	out->moved = false;
	for (int tries = 0; tries < KEY_TRIES; tries++) {
		if (act) {
			bool claimed = false;
			if ((rc = lock_holder(s, it, &out->id, &claimed)) < 0)
				return rc;
			if (out->id && !claimed) {
				out->existed = true;
				return key_move(s, it, out->id, &out->moved);
			}
			if (out->id && (rc = key_give_up(s, out->id)) < 0)
				return rc;
		}
		SQL(b, s);
		due__my_add(&b,
			    it->opts.n_after ? INSERT_HEAD_AFTER : INSERT_HEAD);
		insert_values(&b, it, NOW, live);
		rc = exec(s, &b, "insert task", NULL);
		if (rc == 0) {
			out->id = (due_id)s->insert_id;
			out->existed = false;
			return 0;
		}
		if (rc != DUE_ECONFLICT || !it->opts.key)
			return rc;
		due__error_clear();
		if (act)
			continue; /* lock the holder a racing submit made */
		if ((rc = find_live(s, it, &out->id)) < 0)
			return rc;
		if (out->id) {
			out->existed = true;
			return 0;
		}
	}
	return due__error_set(DUE_EBUSY,
			      "mysql store: the live task of kind '%s' key "
			      "'%s' keeps changing; retry",
			      it->kind, it->opts.key);
}

/*
** The edges of a new run-after task `child`: one row per parent, pending
** while that parent was live (lock_parents), so that its end releases
** the child once; an ended parent's edge is there for get only.
*/
static int insert_edges(due_store *s, const due_schedule_opts *o, due_id child,
			const bool *live)
{
	SQL(b, s);

	due__my_add(&b,
		    "INSERT INTO due_after (parent, child, pending) VALUES ");
	for (size_t i = 0; i < o->n_after; i++)
		due__my_add(&b, "%s(%lld, %lld, %d)", i ? ", " : "",
			    (long long)o->after[i], (long long)child,
			    live[i] ? 1 : 0);
	return exec(s, &b, "insert edges", NULL);
}

/*
** Insert one submit (insert_task); a run-after one locks and judges its
** parents first (lock_parents) and, when it made a new task, adds its
** edges, all in the caller's transaction (a keyed submit that found a
** live holder adds nothing: the holder answers, as for any key).
*/
static int insert_one(due_store *s, const due_submit *it, due_submitted *out)
{
	bool *live = NULL;
	int32_t n_live = 0;
	int rc;

	if (!it->opts.n_after)
		return insert_task(s, it, out, 0);
	if ((rc = lock_parents(s, &it->opts, &live, &n_live)) == 0 &&
	    (rc = insert_task(s, it, out, n_live)) == 0 && !out->existed)
		rc = insert_edges(s, &it->opts, out->id, live);
	free(live);
	return rc;
}

/*
** Whether a statement of len bytes still has room for it's VALUES tuple
** (insert_values: the payload as hex, the strings escaped, at most twice
** their bytes) within the session's max_allowed_packet.
*/
static bool packet_room(const due_store *s, size_t len, const due_submit *it)
{
	const due_schedule_opts *o = &it->opts;
	uint64_t v = 2 * (uint64_t)it->payload_len + 2 * strlen(it->kind) + 256;

	if (o->key)
		v += 2 * strlen(o->key);
	if (o->group)
		v += 2 * strlen(o->group);
	return !s->packet || len + v < s->packet;
}

/*
** Insert items[0..n) without keys as multi-row INSERTs of at most
** FLUSH_BYTES each, and never past max_allowed_packet (packet_room: a
** batch of payloads that each fit is never too large, it only takes more
** statements of the same transaction); InnoDB hands a simple insert
** consecutive ids (lock modes 0 and 1, checked at connect), every id_step
** apart.  The rows' times come from @due_now, read in the same round
** trip: the expression three times a row was a fifth of the server's
** work and of the text.
*/
static int insert_rows(due_store *s, const due_submit *items, size_t n,
		       due_submitted *out)
{
	size_t from = 0;
	int rc;

	while (from < n) {
		size_t i = from;
		SQL(b, s);
		due__my_add(&b, "SET @due_now = " NOW "; " INSERT_HEAD);
		for (;
		     i < n && (i == from || (b.len < FLUSH_BYTES &&
					     packet_room(s, b.len, &items[i])));
		     i++) {
			if (i > from)
				due__my_add(&b, ", ");
			insert_values(&b, &items[i], NOW_V, 0);
		}
		if ((rc = exec(s, &b, "insert tasks", NULL)) < 0)
			return rc;
		for (size_t j = from; j < i; j++) {
			out[j].id = (due_id)s->insert_id +
				    (due_id)(j - from) * s->id_step;
			out[j].existed = false;
			out[j].moved = false;
		}
		from = i;
	}
	return 0;
}

/* Submit items inside the open transaction (or alone, when n is 1). */
static int insert_items(due_store *s, const due_submit *items, size_t n,
			due_submitted *out)
{
	size_t i = 0;
	int rc;

	while (i < n) {
		size_t j = i;
		while (s->bulk_ids && j < n && !items[j].opts.key &&
		       !items[j].opts.n_after)
			j++;
		if (j - i > 1) {
			if ((rc = insert_rows(s, items + i, j - i, out + i)) <
			    0)
				return rc;
			i = j;
		} else if ((rc = insert_one(s, &items[i], &out[i])) < 0) {
			return rc;
		} else {
			i++;
		}
	}
	return 0;
}

static int schedule_tx(due_store *s, due_submitted *out,
		       const due_submit *items, size_t n)
{
	int rc;

	/* on_key replace or later locks the holder, run-after the parents:
	   a transaction */
	if (n == 1 && !items->opts.n_after &&
	    (!items->opts.key || items->opts.on_key == DUE_ON_KEY_KEEP))
		return insert_one(s, items, out);
	if ((rc = due__my_begin(s)) < 0)
		return rc;
	if ((rc = insert_items(s, items, n, out)) < 0 ||
	    (rc = due__my_commit(s)) < 0) {
		due__my_rollback(s);
		return rc;
	}
	return 0;
}

/* Schedule n checked submits in one transaction. */
static int mys_schedule(due_store *s, due_submitted *out,
			const due_submit *items, size_t n)
{
	int rc;

	if ((rc = due__my_ok(s)) < 0 || (rc = my_payloads_fit(s, items, n)) < 0)
		return rc;
	RETRY(rc, s, schedule_tx(s, out, items, n));
	if (rc == 0)
		wake(s);
	return rc;
}

/*
** The caller's transaction: open when the server says one is (or when
** autocommit is off, where the next statement opens one).  MySQL has no
** "failed transaction" state: an error rolls back a statement, a
** deadlock the whole transaction, which then is simply not open.
*/
static int mys_native_tx(void *conn)
{
	unsigned int st = 0;

	if (mariadb_get_infov(conn, MARIADB_CONNECTION_SERVER_STATUS, &st))
		return DUE_NATIVE_TX_NONE;
	return (st & SERVER_STATUS_IN_TRANS) || !(st & SERVER_STATUS_AUTOCOMMIT)
		   ? DUE_NATIVE_TX_OPEN
		   : DUE_NATIVE_TX_NONE;
}

/*
** Insert on the caller's connection, inside the transaction it holds
** (src/core/native.c checked it): plain statements, nothing of ours
** stays in their session.
*/
static int mys_schedule_on_native(void *conn, due_submitted *out,
				  const due_submit *it)
{
	due_store tmp = {.conn = conn, .own = false, .id_step = 1};
	const char *cs = mysql_character_set_name(conn);
	int rc;

	/* Keys and groups are stored as the bytes the connection sends
	   (VARBINARY): in another character set the same key would arrive
	   as other bytes, a second live task. */
	if (!cs || (strcmp(cs, "utf8mb4") != 0 && strcmp(cs, "utf8mb3") != 0 &&
		    strcmp(cs, "utf8") != 0))
		return due__error_set(
		    DUE_EINVAL,
		    "due_schedule_mysql_tx: the connection's character set "
		    "is '%s', not utf8mb4: call mysql_set_character_set(conn, "
		    "\"utf8mb4\") (or set MYSQL_SET_CHARSET_NAME before "
		    "connecting)",
		    cs ? cs : "(unknown)");
	snprintf(tmp.label, sizeof(tmp.label), "(caller's connection)");
	rc = insert_one(&tmp, it, out);
	if (rc < 0 && tmp.err == ER_NO_SUCH_TABLE)
		rc = due__error_set(DUE_ESCHEMA, "database has no due schema: "
						 "run `due init`");
	return rc;
}

/* ------------------------------------------------------------------ */
/* Claim                                                               */
/* ------------------------------------------------------------------ */

/*
** The claim (docs/internals/flow.md), one READ COMMITTED transaction,
** planned by flow.c with the statements below:
**
**   claim_start   the due_kind rows (one small read; empty without flow
**                 control), the server's now and the first priority probe;
**   my_lock       the rows of the limited kinds the claim serves locked
**                 FOR UPDATE in kind order (so two claimers never deadlock
**                 on them) and read again, then the server's now, read
**                 after the locks were granted: every count below sees
**                 each claim of those kinds that committed before our
**                 lock, and the claim times of a kind grow in lock order,
**                 which the sliding window needs;
**   my_take_kind  a limited kind's due tasks, counted and picked under its
**                 lock and claimed at once;
**   my_take_prio  the other kinds, one priority's due tasks in (due_at, id)
**                 order with FOR UPDATE SKIP LOCKED (the next probe of
**                 due_task_claim rides on it when picks come back short);
**   claim_picked  one round trip: UPDATE by primary key, the RUNNING
**                 attempt rows, the claimed rows back.
*/

/* The picked ids of a claim, before claim_picked reads the rows. */
typedef struct picks {
	due_task *t; /* only .id is set */
	size_t n, cap;
} picks;

/*
** The claim the planner's callbacks fill (due__flow.payload): l gets the
** limited kinds' tasks as they are claimed, p the others' picks, claimed
** at the end with the COMMIT riding on it.  A priority probe whose answer
** came back early (claim_start, or riding on a pick) waits in `probed`.
*/
typedef struct my_claim {
	due_store *s;
	due_task_list *l;
	const char *owner;
	int64_t lease_us;
	picks p;
	bool probed, none;
	int64_t prio;
} my_claim;

#define FLOW_COLS                                                              \
	"kind, paused, rate_n, rate_us, max_running, max_running_per_group,"   \
	" timeout_us"

/* The settings of one FLOW_COLS row. */
static void flow_row(MYSQL_ROW row, int64_t v[DUE__FLOW_NCOLS])
{
	for (int i = 0; i < DUE__FLOW_NCOLS; i++)
		v[i] = due__my_i64(row, i + 1);
}

#define FLOW_READ "SELECT " FLOW_COLS " FROM due_kind ORDER BY kind"

/* Every due_kind row, read by FLOW_READ as r, into f. */
static int flow_read(due__flow *f, MYSQL_RES *r)
{
	MYSQL_ROW row;
	int64_t v[DUE__FLOW_NCOLS];
	int rc = 0;

	while (rc == 0 && r && (row = mysql_fetch_row(r))) {
		flow_row(row, v);
		rc = due__flow_add(f, row[0], strlen(row[0]), v);
	}
	return rc;
}

/*
** due__flow_ops.lock: lock the due_kind rows of the limited kinds the
** claim serves (or only `only` when set), in kind order, and read their
** settings again under the lock.  Then read the server's now into f->now.
*/
static int my_lock(void *payload, due__flow *f, const char *only)
{
	due_store *s = ((my_claim *)payload)->s;
	MYSQL_RES *r = NULL;
	MYSQL_ROW row;
	int64_t v[DUE__FLOW_NCOLS];
	size_t n = 0;
	int rc = 0;
	SQL(b, s);

	due__my_add(&b, "SELECT " FLOW_COLS " FROM due_kind WHERE kind IN (");
	for (size_t i = 0; i < f->n; i++) {
		const due__flow_kind *k = &f->k[i];
		if (only ? !due__flow_limited(k) || strcmp(only, k->kind) != 0
			 : !due__flow_serves(f, k))
			continue;
		due__my_add(&b, n++ ? ", " : "");
		due__my_str(&b, k->kind);
	}
	due__my_add(&b, ") ORDER BY kind FOR UPDATE");
	if (n && (rc = due__my_exec(s, &b, "lock limited kinds", &r)) == 0) {
		while ((row = mysql_fetch_row(r))) {
			due__flow_kind *k =
			    (due__flow_kind *)due__flow_kind_find(f->k, f->n,
								  row[0]);
			flow_row(row, v);
			if (k)
				due__flow_set(k, v);
		}
		mysql_free_result(r);
	}
	due__my_sql_free(&b);
	return rc < 0 ? rc : server_now(s, &f->now);
}

/* due__flow_ops.restamp */
static int my_restamp(void *payload, due_time *now)
{
	return server_now(((my_claim *)payload)->s, now);
}

/*
** Over kind k: the tries holding a live lease at `at` (rate false), or
** the claims logged after `at` and the oldest of them (rate true).
*/
static int kind_count(due_store *s, bool rate, const char *kind, int64_t at,
		      int64_t v[2])
{
	SQL(b, s);
	if (rate)
		due__my_add(&b, "SELECT COUNT(*), MIN(at) FROM due_rate"
				" WHERE kind = ");
	else
		due__my_add(&b, "SELECT COUNT(*), 0 FROM due_task"
				" WHERE state = 'CLAIMED' AND kind = ");
	due__my_str(&b, kind);
	due__my_add(&b, " AND %s %lld",
		    rate ? "at >" : "lease_until >=", (long long)at);
	return ints(s, &b, "count", v, 2);
}

/* The live tries of every group of kind (or of one group) into g. */
static int groups_read(due_store *s, const char *kind, const char *grp,
		       due_time now, due__groups *g)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	int rc;
	SQL(b, s);

	due__my_add(&b, "SELECT grp, COUNT(*) FROM due_task WHERE"
			" state = 'CLAIMED' AND kind = ");
	due__my_str(&b, kind);
	due__my_add(&b, " AND grp IS NOT NULL AND lease_until >= %lld",
		    (long long)now);
	if (grp) {
		due__my_add(&b, " AND grp = ");
		due__my_str(&b, grp);
	}
	due__my_add(&b, " GROUP BY grp");
	rc = due__my_exec(s, &b, "count groups", &r);
	due__my_sql_free(&b);
	while (rc == 0 && r && (row = mysql_fetch_row(r))) {
		int64_t *slot = due__group_slot(g, row[0], strlen(row[0]));
		if (!slot)
			rc = due__error_set(DUE_ENOMEM, "out of memory");
		else
			*slot = due__my_i64(row, 1);
	}
	mysql_free_result(r);
	return rc;
}

/* due__flow_ops.running: of kind, or of one group of kind. */
static int my_running(void *payload, const char *kind, const char *grp,
		      due_time now, int64_t *n)
{
	due_store *s = ((my_claim *)payload)->s;
	due__groups g = {0};
	int64_t v[2];
	int rc;

	if (!grp) {
		rc = kind_count(s, false, kind, now, v);
		*n = v[0];
		return rc;
	}
	rc = groups_read(s, kind, grp, now, &g);
	*n = g.n ? g.g[0].n : 0;
	due__groups_free(&g);
	return rc;
}

/* due__flow_ops.rate */
static int my_rate(void *payload, const char *kind, due_time since, int64_t *n,
		   due_time *oldest)
{
	int64_t v[2];
	int rc = kind_count(((my_claim *)payload)->s, true, kind, since, v);

	*n = v[0];
	*oldest = v[1];
	return rc;
}

/* due__flow_ops.groups */
static int my_groups(void *payload, const char *kind, due_time now,
		     due__groups *g)
{
	return groups_read(((my_claim *)payload)->s, kind, NULL, now, g);
}

/* due__flow_ops.log: the rate log and its trim, the held counters. */
static int my_log(void *payload, const due__flow_kind *k, due_time now,
		  int64_t logged, int held)
{
	due_store *s = ((my_claim *)payload)->s;
	SQL(b, s);

	if (logged) {
		due__my_add(&b, "INSERT INTO due_rate (kind, at) VALUES ");
		for (int64_t i = 0; i < logged; i++) {
			due__my_add(&b, i ? ", (" : "(");
			due__my_str(&b, k->kind);
			due__my_add(&b, ", %lld)", (long long)now);
		}
		due__my_add(&b, "; DELETE FROM due_rate WHERE kind = ");
		due__my_str(&b, k->kind);
		due__my_add(&b, " AND at <= %lld;",
			    (long long)(now - k->rate_us));
	}
	if (held) {
		due__my_add(&b,
			    "UPDATE due_kind SET held_rate = held_rate + %d,"
			    " held_running = held_running + %d,"
			    " held_group = held_group + %d WHERE kind = ",
			    (held & DUE__HELD_RATE) != 0,
			    (held & DUE__HELD_RUNNING) != 0,
			    (held & DUE__HELD_GROUP) != 0);
		due__my_str(&b, k->kind);
	}
	return exec(s, &b, "log claims", NULL);
}

static int pick_add(picks *p, due_id id)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 16;
		due_task *t = realloc(p->t, cap * sizeof(*t));
		if (!t)
			return due__error_set(DUE_ENOMEM, "out of memory");
		p->t = t, p->cap = cap;
	}
	memset(&p->t[p->n], 0, sizeof(p->t[0]));
	p->t[p->n++].id = id;
	return 0;
}

static int claim_picked(due_store *s, const picks *p, due_task_list *l,
			const char *owner, int64_t lease_us, due_time now,
			bool commit);

/*
** due__flow_ops.take_kind: lock the due tasks of limited kind p->k in
** (priority, due_at, id) order, as many as the room and the groups'
** scan need, keep what due__flow_pick says, and claim them.
*/
static int my_take_kind(void *payload, due__flow_pass *p)
{
	my_claim *c = payload;
	due_store *s = c->s;
	MYSQL_RES *r;
	MYSQL_ROW row;
	picks ids = {0};
	int rc, v = 0;
	SQL(b, s);

	due__my_add(&b, "SELECT id, grp FROM due_task WHERE kind = ");
	due__my_str(&b, p->k->kind);
	due__my_add(&b,
		    " AND state = 'SCHEDULED' AND due_at <= %lld"
		    " ORDER BY priority, due_at, id LIMIT %lld"
		    " FOR UPDATE SKIP LOCKED",
		    (long long)p->now,
		    (long long)(p->room + (p->k->per_group ? GROUP_SCAN : 1)));
	rc = due__my_exec(s, &b, "claim", &r);
	due__my_sql_free(&b);
	while (rc == 0 && r && (row = mysql_fetch_row(r))) {
		v = due__flow_pick(p, row[1], row[1] ? strlen(row[1]) : 0);
		if (v < 0 || v == DUE__PICK_STOP)
			break;
		if (v == DUE__PICK_TAKE)
			rc = pick_add(&ids, due__my_i64(row, 0));
	}
	mysql_free_result(r);
	if (rc == 0 && v < 0)
		rc = v;
	if (rc == 0)
		rc = claim_picked(s, &ids, c->l, c->owner, c->lease_us, p->now,
				  false);
	free(ids.t);
	return rc;
}

/*
** The probe for the lowest priority above `after` that a scheduled task
** has (one index dive of due_task_claim): one row, COUNT(m) and MIN(m).
*/
static void probe_sql(due_my_sql *b, int64_t after)
{
	/*
	** The first probe has no bound: MariaDB's range optimizer mishandles
	** a constant below SMALLINT's range (priority > -32769 found nothing).
	*/
	due__my_add(b, "SELECT COUNT(m), MIN(m) FROM (SELECT MIN(priority) AS m"
		       " FROM due_task WHERE state = 'SCHEDULED'");
	if (after >= DUE_PRIORITY_MIN)
		due__my_add(b, " AND priority > %lld", (long long)after);
	due__my_add(b, ") x");
}

/* A probe's answer: *p, or *none when no priority is left. */
static void probe_read(MYSQL_RES *r, int64_t *p, bool *none)
{
	MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;

	*none = !row || due__my_i64(row, 0) == 0;
	*p = row ? due__my_i64(row, 1) : 0;
}

/* Append the ids of a result's first column to p. */
static int picks_of(MYSQL_RES *r, picks *p)
{
	MYSQL_ROW row;
	int rc = 0;

	while (rc == 0 && r && (row = mysql_fetch_row(r)))
		rc = pick_add(p, due__my_i64(row, 0));
	return rc;
}

/* The next probe after priority `prio`, in a round trip of its own. */
static int probe(due_store *s, int64_t *prio, bool *none)
{
	MYSQL_RES *r;
	int rc;
	SQL(b, s);

	probe_sql(&b, *prio);
	rc = due__my_exec_sets(s, &b, "claim priority", &r, 1);
	due__my_sql_free(&b);
	if (rc == 0)
		probe_read(r, prio, none);
	mysql_free_result(r);
	return rc;
}

/*
** due__flow_ops.prio_next: the answer that came back early when there is
** one (claim_start's first probe, or the one that rode on the last pick),
** else a probe of its own.
*/
static int my_prio_next(void *payload, int64_t after, int64_t *prio, bool *none)
{
	my_claim *c = payload;

	if (!c->probed) {
		*prio = after;
		return probe(c->s, prio, none);
	}
	c->probed = false;
	*prio = c->prio, *none = c->none;
	return 0;
}

/*
** due__flow_ops.take_prio: pick one priority's due tasks of the kinds
** without limits into c->p, in (due_at, id) order.  The probe for the
** next priority rides on the pick when this handle's last pick came back
** short (waiting workers, whose claims find fewer due tasks than free
** slots: one round trip less); otherwise my_prio_next sends it when it is
** needed (a drain's picks fill their claim and never need it).
*/
static int my_take_prio(void *payload, const due__flow *f, int64_t prio,
			int want, int64_t *taken)
{
	my_claim *c = payload;
	due_store *s = c->s;
	MYSQL_RES *r[2];
	bool ahead = s->pick_short, held = false;
	size_t from = c->p.n;
	int rc;
	SQL(b, s);

	for (size_t i = 0; i < f->n; i++)
		held |= f->k[i].paused || due__flow_limited(&f->k[i]);
	due__my_add(&b,
		    "SELECT id FROM due_task WHERE state = 'SCHEDULED'"
		    " AND priority = %lld AND due_at <= %lld",
		    (long long)prio, (long long)f->now);
	kind_filter(&b, "kind", f->kinds, f->n_kinds, f->exclude);
	if (held) {
		size_t n = 0;
		due__my_add(&b, " AND kind NOT IN (");
		for (size_t i = 0; i < f->n; i++)
			if (f->k[i].paused || due__flow_limited(&f->k[i])) {
				due__my_add(&b, n++ ? ", " : "");
				due__my_str(&b, f->k[i].kind);
			}
		due__my_add(&b, ")");
	}
	due__my_add(&b,
		    " ORDER BY due_at, id LIMIT %d"
		    " FOR UPDATE SKIP LOCKED",
		    want);
	if (ahead) {
		due__my_add(&b, "; ");
		probe_sql(&b, prio);
	}
	rc = due__my_exec_sets(s, &b, "claim", r, 2);
	due__my_sql_free(&b);
	if (rc == 0 && (rc = picks_of(r[0], &c->p)) == 0) {
		*taken = (int64_t)(c->p.n - from);
		s->pick_short = *taken < want;
		if ((c->probed = ahead))
			probe_read(r[1], &c->prio, &c->none);
	}
	mysql_free_result(r[0]);
	mysql_free_result(r[1]);
	return rc;
}

/*
** Claim the picked (locked) rows in one round trip: the UPDATE by primary
** key (re-checking state), their RUNNING attempts, and the rows back in
** (priority, due_at, id) order into l.
*/
static int claim_picked(due_store *s, const picks *p, due_task_list *l,
			const char *owner, int64_t lease_us, due_time now,
			bool commit)
{
	MYSQL_RES *r = NULL;
	due_my_cur cur;
	due_rows rows;
	int rc;
	SQL(b, s);

	if (!p->n)
		return 0;
	s->commit_rides = commit;
	due__my_add(&b, "UPDATE due_task FORCE INDEX (PRIMARY)"
			" SET state = 'CLAIMED', attempt = attempt + 1,"
			" lease_owner = ");
	due__my_str(&b, owner);
	due__my_add(&b,
		    ", lease_until = " NOW " + %lld, updated_at = %lld"
		    " WHERE state = 'SCHEDULED' AND id IN ",
		    (long long)lease_us, (long long)now);
	id_list(&b, p->t, p->n);
	/* the rows this UPDATE wrote (ours, stamped now), not every CLAIMED
	   one: on Galera a replicated claim can abort ours between two of
	   these statements and the rest of the text still runs, outside
	   any transaction, until the savepoint check (mysql_conn.c) */
	due__my_add(&b, "; INSERT INTO due_attempt (task_id, attempt, worker,"
			" claimed_at, due_at) SELECT id, attempt, lease_owner,"
			" updated_at, due_at FROM due_task WHERE id IN ");
	id_list(&b, p->t, p->n);
	due__my_add(&b,
		    " AND state = 'CLAIMED' AND updated_at = %lld"
		    " AND lease_owner = ",
		    (long long)now);
	due__my_str(&b, owner);
	due__my_add(&b,
		    "; SELECT " TASK_COLS " FROM due_task WHERE"
		    " state = 'CLAIMED' AND updated_at = %lld AND id IN ",
		    (long long)now);
	id_list(&b, p->t, p->n);
	due__my_add(&b, " AND lease_owner = ");
	due__my_str(&b, owner);
	due__my_add(&b, " ORDER BY priority, due_at, id");
	rc = due__my_exec(s, &b, "claim", &r);
	due__my_sql_free(&b);
	if (rc == 0) {
		due__my_rows(&rows, &cur, r);
		rc = due__rows_tasks(&rows, l, l->count + p->n);
	}
	mysql_free_result(r);
	return rc;
}

/* due__flow_ops.id_kind: the kind and group of task id when it is due. */
static int my_id_kind(void *payload, due_id id, due_time now, char **kind,
		      char **grp)
{
	due_store *s = ((my_claim *)payload)->s;
	MYSQL_RES *r;
	MYSQL_ROW row;
	int rc;
	SQL(b, s);

	*kind = *grp = NULL;
	due__my_add(&b,
		    "SELECT kind, grp FROM due_task WHERE id = %lld"
		    " AND state = 'SCHEDULED' AND due_at <= %lld",
		    (long long)id, (long long)now);
	rc = due__my_exec(s, &b, "claim", &r);
	due__my_sql_free(&b);
	if (rc == 0 && r && (row = mysql_fetch_row(r))) {
		*kind = due__strdup_n(row[0], strlen(row[0]));
		*grp = row[1] ? due__strdup_n(row[1], strlen(row[1])) : NULL;
		if (!*kind || (row[1] && !*grp))
			rc = due__error_set(DUE_ENOMEM, "out of memory");
	}
	mysql_free_result(r);
	return rc;
}

/* due__flow_ops.take_id: pick task id, locked, when it is due. */
static int my_take_id(void *payload, due_id id, due_time now, int64_t *taken)
{
	my_claim *c = payload;
	MYSQL_RES *r = NULL;
	int rc;
	SQL(b, c->s);

	due__my_add(&b,
		    "SELECT id FROM due_task WHERE id = %lld"
		    " AND state = 'SCHEDULED' AND due_at <= %lld"
		    " FOR UPDATE SKIP LOCKED",
		    (long long)id, (long long)now);
	rc = due__my_exec(c->s, &b, "claim", &r);
	due__my_sql_free(&b);
	if (rc == 0)
		rc = picks_of(r, &c->p);
	*taken = (int64_t)c->p.n;
	mysql_free_result(r);
	return rc;
}

static const due__flow_ops my_flow = {
    .running = my_running,
    .rate = my_rate,
    .groups = my_groups,
    .take_kind = my_take_kind,
    .prio_next = my_prio_next,
    .take_prio = my_take_prio,
    .id_kind = my_id_kind,
    .take_id = my_take_id,
    .log = my_log,
    .lock = my_lock,
    .restamp = my_restamp,
};

/* The order of a claim's list: priority, due_at, id. */
static int cmp_claimed(const void *a, const void *b)
{
	const due_task *x = a, *y = b;

	if (x->priority != y->priority)
		return x->priority < y->priority ? -1 : 1;
	if (x->due_at != y->due_at)
		return x->due_at < y->due_at ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/*
** The claim's first round trip: every due_kind row into f, the server's
** now into f->now and, when `probe`, the first priority probe into c's
** `probed`.  These reads take no lock, so unless a batch's completion
** writes ride here (complete_and_claim) they run before the transaction:
** START TRANSACTION rides on the claim's first locking statement instead,
** and a claim that finds no scheduled task at all costs this one round
** trip and no COMMIT.  my_lock locks the limited kinds' rows and reads
** now again.
*/
static int claim_start(due_store *s, due__flow *f, my_claim *c, bool probe)
{
	MYSQL_RES *r[3];
	MYSQL_ROW row;
	bool outside = s->begin_pending && !s->defer_len;
	int rc;
	SQL(b, s);

	due__my_add(&b, FLOW_READ "; SELECT " NOW);
	if (probe) {
		due__my_add(&b, "; ");
		probe_sql(&b, DUE_PRIORITY_MIN - 1);
	}
	if (outside)
		s->begin_pending = false; /* rides on the next statement */
	rc = due__my_exec_sets(s, &b, "claim", r, 3);
	if (outside && s->in_tx)
		s->begin_pending = true;
	due__my_sql_free(&b);
	if (rc == 0 && (rc = flow_read(f, r[0])) == 0) {
		row = r[1] ? mysql_fetch_row(r[1]) : NULL;
		f->now = row ? due__my_i64(row, 0) : 0;
		probe_read(r[2], &c->prio, &c->none);
		c->probed = true;
	}
	for (int i = 0; i < 3; i++)
		mysql_free_result(r[i]);
	return rc;
}

/*
** The claim inside an open transaction, as flow.c plans it: limited
** kinds, then the rest, then the rows; each task carries the time limit
** of its try.  Fills l.  Without limited kinds a claim is three round
** trips: claim_start, one pick (with the next probe when picks come back
** short), and claim_picked with the COMMIT riding on it (the transaction
** is over when this returns 0 having claimed); one when there is no
** scheduled task at all.
*/
static int claim_locked(due_store *s, due_task_list *l, const char *owner,
			const char *const *kinds, size_t n_kinds, bool exclude,
			int limit, int64_t lease_us, due_id only_id)
{
	my_claim c = {.s = s, .l = l, .owner = owner, .lease_us = lease_us};
	due__flow f = {.kinds = kinds,
		       .n_kinds = n_kinds,
		       .exclude = exclude,
		       .ops = &my_flow,
		       .payload = &c};
	int rc;

	if ((rc = claim_start(s, &f, &c, !only_id)) < 0 ||
	    (rc = due__flow_claim(&f, l, limit, only_id)) < 0 ||
	    (rc = claim_picked(s, &c.p, l, owner, lease_us, f.now, true)) < 0)
		goto done;
	if (l->count > 1) /* limited kinds were claimed first */
		qsort(l->items, l->count, sizeof(l->items[0]), cmp_claimed);
	due__flow_finish(&f, l);
done:
	free(c.p.t);
	due__flow_free(&f);
	return rc;
}

typedef struct claim_args {
	const char *owner;
	const char *const *kinds;
	size_t n_kinds;
	bool exclude;
	int limit;
	int64_t lease_us;
	due_id only_id;
} claim_args;

/* What complete_locked does with the batch's last writes. */
enum {
	LAST_RUN,    /* send them (a hook runs next, in the transaction) */
	LAST_DEFER,  /* let them ride on the claim's first round trip */
	LAST_COMMIT, /* send them with the COMMIT riding on them */
};

static int complete_locked(due_store *s, due_completion *items, size_t n,
			   int last);

/*
** One claim transaction (after completing items[0..n) in it, when n):
** *out a new list on success, NULL with everything rolled back on error.
*/
/*
** Galera: keep in l only the claims the cluster holds after our COMMIT,
** by one causal read (wsrep_sync_wait): the rows CLAIMED by us at the
** attempt we were given.  The savepoint around each transaction
** (mysql_conn.c, GALERA_COMMIT) stops most claims that a brute-force
** abort emptied, but not all: with it alone, 4 handler runs twice at
** attempt 1 in 1 of 15 bench drains with multi_writer=1 (3 of 21 without
** either); with this check 0 in 15, one claim's row dropped here.  The
** rows not ours are dropped (another claim runs them).  Not Galera: our
** locks held, nothing to ask.
*/
static int claims_confirm(due_store *s, due_task_list *l, const char *owner)
{
	MYSQL_RES *r = NULL;
	MYSQL_ROW row;
	size_t keep = 0, n = l->count, got = 0;
	due_id *ids;
	int32_t *att;
	int rc;
	SQL(b, s);

	if (!s->galera || !n)
		return 0;
	due__my_add(&b, "SELECT id, attempt FROM due_task WHERE id IN (");
	for (size_t i = 0; i < n; i++)
		due__my_add(&b, "%s%lld", i ? ", " : "",
			    (long long)l->items[i].id);
	due__my_add(&b, ") AND state = 'CLAIMED' AND lease_owner = ");
	due__my_str(&b, owner);
	rc = due__my_exec(s, &b, "confirm claim", &r);
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	ids = calloc(n, sizeof(*ids));
	att = calloc(n, sizeof(*att));
	if (!ids || !att) {
		free(ids);
		free(att);
		mysql_free_result(r);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	while (r && got < n && (row = mysql_fetch_row(r))) {
		ids[got] = due__my_i64(row, 0);
		att[got++] = (int32_t)due__my_i64(row, 1);
	}
	mysql_free_result(r);
	for (size_t i = 0; i < n; i++) {
		bool ours = false;
		for (size_t k = 0; k < got && !ours; k++)
			ours = ids[k] == l->items[i].id &&
			       att[k] == l->items[i].attempt;
		if (ours)
			l->items[keep++] = l->items[i];
		else
			due__task_clear(&l->items[i]);
	}
	l->count = keep;
	free(ids);
	free(att);
	return 0;
}

/*
** Galera, after a COMMIT that carried completions: 1 when one of them did
** not take (its task is still CLAIMED at the try's attempt: nothing moves
** a task back to CLAIMED at the same attempt, so our write is not there),
** else 0.  The COMMIT of a transaction aborted between the savepoint check
** and the COMMIT succeeds with nothing in it (see claims_confirm); the
** caller runs the transaction again.  A read that fails says 0: the
** COMMIT answered, so the completions stand.
*/
static int completions_lost(due_store *s, const due_completion *items, size_t n)
{
	MYSQL_RES *r = NULL;
	MYSQL_ROW row;
	bool any = false;
	int lost = 0;
	SQL(b, s);

	if (!s->galera)
		return 0;
	due__my_add(&b, "SELECT id, attempt FROM due_task WHERE state ="
			" 'CLAIMED' AND id IN (");
	for (size_t i = 0; i < n; i++)
		if (items[i].outcome != DUE_COMPLETE_REJECTED_STALE) {
			due__my_add(&b, "%s%lld", any ? ", " : "",
				    (long long)items[i].id);
			any = true;
		}
	due__my_add(&b, ")");
	if (!any || due__my_exec(s, &b, "confirm completions", &r) < 0) {
		due__my_sql_free(&b);
		s->deadlock = false;
		return 0;
	}
	due__my_sql_free(&b);
	while (!lost && r && (row = mysql_fetch_row(r)))
		for (size_t i = 0; i < n && !lost; i++)
			lost =
			    items[i].outcome != DUE_COMPLETE_REJECTED_STALE &&
			    items[i].id == due__my_i64(row, 0) &&
			    items[i].attempt == due__my_i64(row, 1);
	mysql_free_result(r);
	if (lost) {
		s->deadlock = true;
		due__error_set(
		    DUE_EBUSY,
		    "mysql store: a completion's COMMIT did not take "
		    "(Galera aborted the transaction); retried");
	}
	return lost;
}

static int claim_tx(due_store *s, due_task_list **out, const claim_args *a,
		    due_completion *items, size_t n)
{
	due_task_list *l;
	int rc;

	*out = NULL;
	if ((rc = due__task_list_alloc(&l, (size_t)a->limit)) < 0)
		return rc;
	if ((rc = due__my_begin(s)) < 0)
		goto fail;
	if ((n && (rc = complete_locked(s, items, n, LAST_DEFER)) < 0) ||
	    (rc = claim_locked(s, l, a->owner, a->kinds, a->n_kinds, a->exclude,
			       a->limit, a->lease_us, a->only_id)) < 0 ||
	    (rc = due__my_commit(s)) < 0)
		goto fail;
	if (n && completions_lost(s, items, n)) {
		/* nothing of it committed: run it again (claims that took
		   anyway are not handed out; their leases expire) */
		due_task_list_free(l);
		return DUE_EBUSY;
	}
	if (claims_confirm(s, l, a->owner) < 0) {
		/* committed: the completions in it stand, so this must not
		   fail (RETRY would run them again and report them stale); the
		   claims it could not confirm are not handed out (their leases
		   expire and they are reclaimed) rather than risk a try the
		   cluster did not give us */
		s->deadlock = false;
		for (size_t i = 0; i < l->count; i++)
			due__task_clear(&l->items[i]);
		l->count = 0;
	}
	*out = l;
	return 0;
fail:
	due__my_rollback(s);
	due_task_list_free(l);
	return rc;
}

static int mys_claim(due_store *s, due_task_list **out, const char *owner,
		     const char *const *kinds, size_t n_kinds, bool exclude,
		     int limit, int64_t lease_us, due_id only_id)
{
	const claim_args a = {owner, kinds,    n_kinds, exclude,
			      limit, lease_us, only_id};
	int rc;

	*out = NULL;
	if ((rc = due__my_ok(s)) < 0)
		return rc;
	RETRY(rc, s, claim_tx(s, out, &a, NULL, 0));
	return rc;
}

/* Complete n tries and claim the next batch: one transaction, one commit. */
static int mys_complete_claim(due_store *s, due_completion *items, size_t n,
			      const char *owner, const char *const *kinds,
			      size_t n_kinds, bool exclude, int limit,
			      int64_t lease_us, due_task_list **out)
{
	const claim_args a = {owner, kinds,    n_kinds, exclude,
			      limit, lease_us, 0};
	int rc;

	*out = NULL;
	if ((rc = due__my_ok(s)) < 0 || (rc = my_results_fit(s, items, n)) < 0)
		return rc;
	s->released = false;
	RETRY(rc, s, claim_tx(s, out, &a, items, n));
	if (rc == 0 && s->released) /* children due now */
		wake(s);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Run-after: the release of children, part of every end of a task    */
/* ------------------------------------------------------------------ */

/* " (id1, id2, ...)" of ids[0..n). */
static void ids_sql(due_my_sql *b, const due_id *ids, size_t n)
{
	due__my_add(b, "(");
	for (size_t i = 0; i < n; i++)
		due__my_add(b, "%s%lld", i ? ", " : "", (long long)ids[i]);
	due__my_add(b, ")");
}

/* A held child to cancel: the parent (DEAD or CANCELLED) that ends it. */
typedef struct doomed {
	due_id child, parent;
	bool dead;
} doomed;

/*
** One level of the release, for the parents f[0..n), which this
** transaction ended and holds locked (@due_now set): after the cancels
** of the level before (c[0..nc): their own children are this level's
** parents), one round trip of
**   the held children (SCHEDULED, after_left > 0) that a parent of f
**     ended DEAD or CANCELLED cancels (not after_any_end), locked FOR
**     UPDATE and returned: the next level cancels them, and closes
**     those edges in the statement that cancels;
**   every held child's after_left less its pending edges from f's
**     parents that ended DONE (any end, for an after_any_end child),
**     and those edges closed (pending = FALSE), in ONE statement: a
**     derived count (a multi-table UPDATE changes a row once however
**     many edges join it) joined to the edges it counts;
**   the other pending edges of f closed, those whose child is not held
**     (ended, or released): a parent ends once, and an operator's retry
**     of a DEAD parent releases nothing twice;
**   the children that reached 0 made due at the later of their after_at
**     and @due_now + after_delay_us (last: its matched rows say whether a
**     child was released, s->released).
** Every UPDATE repeats state = 'SCHEDULED' and after_left > 0 (or = 0
** with the held due_at) in its WHERE.  Reads here see the committed rows
** of every child added before the parents' locks were granted (READ
** COMMITTED: each statement reads what committed before it).
**
** Why an edge is closed only by the statement that counts its child
** down or cancels it: on Galera, a write set from another node can abort
** this transaction between two statements of one text, and MariaDB runs
** the rest of the text outside any transaction (docs/internals/mysql.md,
** "Brute-force aborts"); the transaction is then retried whole, but what
** ran autocommitted stays.  A close of its own after a rolled-back count
** left the edge closed and the child held for ever, out of the sweep's
** sight.  Now a statement that runs alone changes nothing or does a
** whole step (an ended parent is read as committed: a rolled-back end is
** not seen), so what such an abort can leave is a pending edge of an
** ended parent, which the sweep (mys_reclaim) releases.  Each join's
** order and indexes are fixed (STRAIGHT_JOIN, FORCE INDEX: left to
** itself the optimizer read the parents through the (state, id) range of
** every DEAD and CANCELLED task, once per edge, and the derived count
** whole per edge).  MySQL may write the first table of a multi-table
** UPDATE as it meets its rows and the others once each at the end: the
** first is the derived count (not written) or, in the cancel, the edges
** (each met once), so every condition on a child is judged on what was
** read, and each child is written once.
*/
static int release_level(due_store *s, const due_id *f, size_t n,
			 const doomed *c, size_t nc, MYSQL_RES **r)
{
	int rc;
	SQL(b, s);

	if (nc) {
		due__my_add(&b,
			    "UPDATE due_after e FORCE INDEX"
			    " (due_after_child) STRAIGHT_JOIN due_task k"
			    " FORCE INDEX (PRIMARY) ON k.id = e.child"
			    " STRAIGHT_JOIN due_task p FORCE INDEX (PRIMARY)"
			    " ON p.id = e.parent SET k.state = 'CANCELLED',"
			    " k.last_error = CASE k.id");
		for (size_t i = 0; i < nc; i++)
			due__my_add(
			    &b, " WHEN %lld THEN 'parent task %lld ended %s'",
			    (long long)c[i].child, (long long)c[i].parent,
			    c[i].dead ? "DEAD" : "CANCELLED");
		due__my_add(&b, " END, k.after_left = 0, k.updated_at = " NOW_V
				", e.pending = FALSE WHERE e.pending AND"
				" p.state IN ('DEAD', 'CANCELLED') AND"
				" k.state = 'SCHEDULED' AND k.after_left > 0"
				" AND NOT k.after_any_end AND e.child IN (");
		for (size_t i = 0; i < nc; i++)
			due__my_add(&b, "%s%lld", i ? ", " : "",
				    (long long)c[i].child);
		due__my_add(&b, "); ");
	}
	due__my_add(&b, "SELECT e.child, e.parent, p.state = 'DEAD' FROM"
			" due_after e JOIN due_task p ON p.id = e.parent"
			" JOIN due_task c ON c.id = e.child WHERE e.pending"
			" AND p.state IN ('DEAD', 'CANCELLED')"
			" AND c.state = 'SCHEDULED' AND c.after_left > 0"
			" AND NOT c.after_any_end AND e.parent IN ");
	ids_sql(&b, f, n);
	due__my_add(&b, " ORDER BY e.child, e.parent FOR UPDATE;"
			" UPDATE (SELECT e2.child, COUNT(*) AS n FROM"
			" due_after e2 JOIN due_task p2 ON p2.id = e2.parent"
			" JOIN due_task k ON k.id = e2.child WHERE e2.pending"
			" AND (p2.state = 'DONE' OR (k.after_any_end AND"
			" p2.state IN ('DEAD', 'CANCELLED'))) AND e2.parent"
			" IN ");
	ids_sql(&b, f, n);
	due__my_add(&b, " GROUP BY e2.child) x STRAIGHT_JOIN due_after e"
			" FORCE INDEX (due_after_child) ON e.child = x.child"
			" STRAIGHT_JOIN due_task p FORCE INDEX (PRIMARY) ON"
			" p.id = e.parent STRAIGHT_JOIN due_task c FORCE INDEX"
			" (PRIMARY) ON c.id = e.child"
			" SET c.after_left = c.after_left - x.n,"
			" e.pending = FALSE WHERE e.pending AND (p.state ="
			" 'DONE' OR (c.after_any_end AND p.state IN ('DEAD',"
			" 'CANCELLED'))) AND c.state = 'SCHEDULED' AND"
			" c.after_left > 0 AND e.parent IN ");
	ids_sql(&b, f, n);
	due__my_add(&b, "; UPDATE due_after e LEFT JOIN due_task c FORCE"
			" INDEX (PRIMARY) ON c.id = e.child SET e.pending ="
			" FALSE WHERE e.pending"
			" AND (c.id IS NULL OR c.state <> 'SCHEDULED' OR"
			" c.after_left = 0) AND e.parent IN ");
	ids_sql(&b, f, n);
	due__my_add(&b,
		    "; UPDATE due_task c JOIN due_after e ON e.child = c.id"
		    " SET c.due_at = GREATEST(COALESCE(c.after_at, 0), " NOW_V
		    " + c.after_delay_us), c.updated_at = " NOW_V
		    " WHERE c.state = 'SCHEDULED' AND c.after_n > 0"
		    " AND c.after_left = 0 AND c.due_at = " HELD_AT
		    " AND e.parent IN ");
	ids_sql(&b, f, n);
	rc = due__my_exec_sets(s, &b, "release children", r, 1);
	due__my_sql_free(&b);
	if (rc == 0 && s->affected)
		s->released = true;
	return rc;
}

/*
** Release the children of the tasks ended[0..n) (run-after), inside the
** transaction that ended them, which holds their rows locked and set
** @due_now: level by level (release_level), each level's cancelled
** children the next level's parents, until a level cancels none.  A
** chain of any length is a loop, one round trip a level, never a
** recursion (no stack, no trigger or CTE depth).  s->released when a
** child became due (the caller wakes listeners after its COMMIT).
*/
static int release(due_store *s, const due_id *ended, size_t n)
{
	due_id *f = NULL;
	doomed *c = NULL;
	size_t nc = 0;
	int rc = 0;

	if (!n)
		return 0;
	if (!(f = malloc(n * sizeof(*f))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	memcpy(f, ended, n * sizeof(*f));
	while (n && rc == 0) {
		MYSQL_RES *r = NULL;
		MYSQL_ROW row;
		size_t rows, k = 0;
		doomed *next = NULL;

		rc = release_level(s, f, n, c, nc, &r);
		rows = r ? (size_t)mysql_num_rows(r) : 0;
		if (rc == 0 && rows && !(next = malloc(rows * sizeof(*next))))
			rc = due__error_set(DUE_ENOMEM, "out of memory");
		while (rc == 0 && r && (row = mysql_fetch_row(r))) {
			due_id child = due__my_i64(row, 0);
			if (k && next[k - 1].child == child)
				continue; /* named by its first parent */
			next[k++] = (doomed){child, due__my_i64(row, 1),
					     due__my_i64(row, 2) != 0};
		}
		mysql_free_result(r);
		free(c);
		c = next, nc = k;
		if (rc == 0 && nc) {
			due_id *nf = realloc(f, nc * sizeof(*f));
			if (!nf) {
				rc =
				    due__error_set(DUE_ENOMEM, "out of memory");
				break;
			}
			f = nf;
			for (size_t i = 0; i < nc; i++)
				f[i] = c[i].child;
		}
		n = nc;
	}
	free(f);
	free(c);
	return rc;
}

/* release() of the tasks picked in p (their ids, in p's order). */
static int release_picks(due_store *s, const picks *p)
{
	due_id *ids = malloc(p->n * sizeof(*ids));
	int rc;

	if (!ids)
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t i = 0; i < p->n; i++)
		ids[i] = p->t[i].id;
	rc = release(s, ids, p->n);
	free(ids);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Extend, complete, fail                                              */
/* ------------------------------------------------------------------ */

/*
** One fenced UPDATE; when it matched no row, read why (the state is only
** reported, so reading it after the write is enough).
*/
static int mys_extend(due_store *s, due_extend_outcome *out, due_id id,
		      int32_t attempt, int64_t lease_us)
{
	uint64_t hit;
	int64_t v[3];
	int rc;
	SQL(b, s);

	*out = DUE_EXTEND_LOST;
	if ((rc = due__my_ok(s)) < 0)
		return rc;
	due__my_add(&b,
		    "UPDATE due_task SET lease_until = " NOW " + %lld,"
		    " updated_at = " NOW " WHERE id = %lld AND attempt = %d"
		    " AND state = 'CLAIMED' AND NOT cancel_requested"
		    " AND lease_until >= " NOW,
		    (long long)lease_us, (long long)id, attempt);
	RETRY(rc, s, due__my_exec(s, &b, "extend", NULL));
	hit = s->affected;
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	if (hit) {
		*out = DUE_EXTEND_OK;
		return 0;
	}
	due__my_sql_init(&b, &s->conn);
	due__my_add(&b,
		    "SELECT state = 'CLAIMED', attempt, cancel_requested"
		    " FROM due_task WHERE id = %lld",
		    (long long)id);
	if ((rc = ints(s, &b, "extend", v, 3)) == 0 && v[0] &&
	    v[1] == attempt && v[2])
		*out = DUE_EXTEND_CANCEL_REQUESTED;
	return rc;
}

/* The locked (state, attempt, cancel) of each try of a batch. */
typedef struct tried {
	due_id id;
	int64_t attempt;
	bool claimed, cancel, used, kids;
} tried;

/*
** Lock the batch's rows and read them; in the same round trip, after
** the locks were granted (its own statement: READ COMMITTED reads what
** committed before it, so a child whose submit held a parent's row
** (written, after_children) until its COMMIT is seen), which of them
** have pending run-after edges (kids): only those need a release.
*/
static int lock_tries(due_store *s, const due_completion *items, size_t n,
		      tried **out, size_t *count)
{
	MYSQL_RES *r[2];
	MYSQL_ROW row;
	tried *t;
	int rc;
	SQL(b, s);

	*out = NULL;
	*count = 0;
	due__my_add(&b, "SELECT id, attempt, state = 'CLAIMED',"
			" cancel_requested FROM due_task WHERE id IN (");
	for (size_t i = 0; i < n; i++)
		due__my_add(&b, "%s%lld", i ? ", " : "",
			    (long long)items[i].id);
	due__my_add(&b, ") FOR UPDATE" SET_NOW "; SELECT DISTINCT parent FROM"
			" due_after WHERE pending AND parent IN (");
	for (size_t i = 0; i < n; i++)
		due__my_add(&b, "%s%lld", i ? ", " : "",
			    (long long)items[i].id);
	due__my_add(&b, ")");
	rc = due__my_exec_sets(s, &b, "complete", r, 2);
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	if (!(t = calloc(n, sizeof(*t)))) {
		mysql_free_result(r[0]);
		mysql_free_result(r[1]);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	while (r[0] && *count < n && (row = mysql_fetch_row(r[0]))) {
		tried *x = &t[(*count)++];
		x->id = due__my_i64(row, 0);
		x->attempt = due__my_i64(row, 1);
		x->claimed = due__my_i64(row, 2) != 0;
		x->cancel = due__my_i64(row, 3) != 0;
	}
	while (r[1] && (row = mysql_fetch_row(r[1]))) {
		due_id p = due__my_i64(row, 0);
		for (size_t j = 0; j < *count; j++)
			t[j].kids |= t[j].id == p;
	}
	mysql_free_result(r[0]);
	mysql_free_result(r[1]);
	*out = t;
	return 0;
}

/* Take b back to its first `len` bytes. */
static void cut(due_my_sql *b, size_t len)
{
	b->len = len;
	if (b->p)
		b->p[len] = '\0';
}

/*
** The fence of items[from..to) whose outcome is `o`, as an OR of
** (id, attempt) pairs over columns `id` and `att`: a primary-key range
** each, on due_task (id) and on due_attempt (task_id, attempt).  False
** (no pair) when none has that outcome.
*/
static bool pairs(due_my_sql *b, const due_completion *items, size_t from,
		  size_t to, due_complete_outcome o, const char *id,
		  const char *att)
{
	size_t n = 0;

	for (size_t i = from; i < to; i++)
		if (items[i].outcome == o)
			due__my_add(
			    b, "%s(%s = %lld AND %s = %d)", n++ ? " OR " : "(",
			    id, (long long)items[i].id, att, items[i].attempt);
	if (n)
		due__my_add(b, ")");
	return n != 0;
}

/*
** The statements of items[from..to), whose outcomes are decided: at most
** one UPDATE of due_task and one of due_attempt per outcome, each with
** every predicate of its rows in its WHERE (the pair, the task still
** CLAIMED, the attempt still RUNNING), whatever the size of the batch.
*/
static void complete_sql(due_my_sql *b, const due_completion *items,
			 size_t from, size_t to)
{
	static const struct {
		due_complete_outcome o;
		const char *state, *outcome, *error;
	} end[] = {
	    {DUE_COMPLETE_DONE, "DONE", "DONE", "NULL"},
	    {DUE_COMPLETE_CANCELLED_BEFORE_COMMIT, "CANCELLED", "CANCELLED",
	     "'cancel requested before commit'"},
	};
	size_t mark;

	for (size_t e = 0; e < sizeof(end) / sizeof(end[0]); e++) {
		mark = b->len;
		due__my_add(b,
			    "UPDATE due_task FORCE INDEX (PRIMARY)"
			    " SET state = '%s', result = ",
			    end[e].state);
		if (end[e].o == DUE_COMPLETE_DONE) {
			due__my_add(b, "CASE id");
			for (size_t i = from; i < to; i++)
				if (items[i].outcome == end[e].o) {
					due__my_add(b, " WHEN %lld THEN ",
						    (long long)items[i].id);
					due__my_blob(b, items[i].result,
						     items[i].result_len);
				}
			due__my_add(b, " END, last_error = NULL,");
		} else {
			due__my_add(b, "NULL,");
		}
		due__my_add(b, " lease_owner = NULL, lease_until = NULL,"
			       " updated_at = " NOW_V
			       " WHERE state = 'CLAIMED' AND ");
		if (!pairs(b, items, from, to, end[e].o, "id", "attempt")) {
			cut(b, mark); /* nothing with this outcome */
			continue;
		}
		due__my_add(b,
			    "; UPDATE due_attempt SET ended_at = " NOW_V
			    ", outcome = '%s', error = %s"
			    " WHERE outcome = 'RUNNING' AND ",
			    end[e].outcome, end[e].error);
		pairs(b, items, from, to, end[e].o, "task_id", "attempt");
		due__my_add(b, ";");
	}
	mark = b->len;
	due__my_add(b, "UPDATE due_attempt SET late_commit = 'REJECTED_STALE'"
		       " WHERE ");
	if (pairs(b, items, from, to, DUE_COMPLETE_REJECTED_STALE, "task_id",
		  "attempt"))
		due__my_add(b, ";");
	else
		cut(b, mark);
}

/*
** Complete n tries inside the open transaction: lock their rows, decide
** each outcome from what is locked (a try listed twice completes once,
** the repeat is REJECTED_STALE), then write them in one multi-statement
** round trip per FLUSH_BYTES of results (a handful of statements each,
** not two per try: the server's work per statement is what a drain pays),
** the last one as `last` says.
*/
static int complete_locked(due_store *s, due_completion *items, size_t n,
			   int last)
{
	picks ended = {0}; /* the ended tasks with children */
	tried *t;
	size_t nt, from = 0, bytes = 0;
	int rc;
	SQL(b, s);

	if ((rc = lock_tries(s, items, n, &t, &nt)) < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		due_completion *c = &items[i];
		tried *x = NULL;
		for (size_t j = 0; j < nt && !x; j++)
			if (t[j].id == c->id)
				x = &t[j];
		c->outcome = DUE_COMPLETE_REJECTED_STALE;
		if (x && x->claimed && !x->used && x->attempt == c->attempt) {
			x->used = true;
			c->outcome = x->cancel
					 ? DUE_COMPLETE_CANCELLED_BEFORE_COMMIT
					 : DUE_COMPLETE_DONE;
			if (x->kids && (rc = pick_add(&ended, c->id)) < 0)
				goto out;
		}
	}
	/* children to release: their statements follow ours */
	if (ended.n)
		last = LAST_RUN;
	for (size_t i = 0; i < n && rc == 0; i++) {
		due_completion *c = &items[i];
		bytes += 2 * c->result_len + 160; /* its WHEN and pairs */
		/* a statement is one packet: the next result must fit too */
		if (bytes >= FLUSH_BYTES || i + 1 == n ||
		    (s->packet &&
		     bytes + 2 * items[i + 1].result_len + MY_ROW_ROOM >
			 s->packet)) {
			complete_sql(&b, items, from, i + 1);
			if (i + 1 == n && last == LAST_DEFER) {
				rc = due__my_defer(s, &b);
			} else {
				s->commit_rides =
				    i + 1 == n && last == LAST_COMMIT;
				rc = exec(s, &b, "complete", NULL);
			}
			due__my_sql_init(&b, &s->conn);
			from = i + 1, bytes = 0;
		}
	}
	if (rc == 0 && ended.n)
		rc = release_picks(s, &ended);
out:
	due__my_sql_free(&b);
	free(ended.t);
	free(t);
	return rc;
}

static int complete_tx(due_store *s, due_completion *items, size_t n,
		       due_tx_hook hook, void *payload)
{
	int rc;

	if ((rc = due__my_begin(s)) < 0)
		return rc;
	if ((rc = complete_locked(s, items, n, hook ? LAST_RUN : LAST_COMMIT)) <
	    0)
		goto fail;
	if (hook) /* its statements are its own: not our deadline */
		due__my_unarm();
	for (size_t i = 0; hook && i < n; i++)
		if (items[i].outcome == DUE_COMPLETE_DONE &&
		    (rc = due__store_run_hook(hook, s->conn, &items[i],
					      payload)) < 0)
			goto fail;
	if ((rc = due__my_commit(s)) == 0)
		return completions_lost(s, items, n) ? DUE_EBUSY : 0;
fail:
	due__my_rollback(s);
	return rc;
}

/*
** Complete n tries in ONE transaction; a hook runs on our MYSQL* inside
** it for each DONE row, and one that fails rolls everything back.  A
** transaction that deadlocked is run again whole, hook included (the
** hook's own writes were rolled back with it).
*/
static int mys_complete(due_store *s, due_completion *items, size_t n,
			due_tx_hook hook, void *payload)
{
	int rc;

	if ((rc = due__my_ok(s)) < 0 || (rc = my_results_fit(s, items, n)) < 0)
		return rc;
	s->released = false;
	RETRY(rc, s, complete_tx(s, items, n, hook, payload));
	if (rc == 0 && s->released) /* children due now */
		wake(s);
	return rc;
}

typedef struct fail_args {
	due_id id;
	int32_t attempt;
	const char *error;
	due_outcome as;
} fail_args;

static int fail_tx(due_store *s, due_fail_outcome *out, const fail_args *a)
{
	int64_t v[7];
	const char *st;
	int rc;
	SQL(b, s);

	if ((rc = due__my_begin(s)) < 0)
		return rc;
	due__my_add(&b,
		    "SELECT COUNT(*), MAX(state = 'CLAIMED' AND attempt = %d),"
		    " MAX(cancel_requested), MAX(" USED_UP "), MAX(backoff_us),"
		    " MAX(backoff_cap_us), MAX(attempt - attempt_base)"
		    " FROM due_task WHERE id = %lld FOR UPDATE" SET_NOW,
		    a->attempt, (long long)a->id);
	if ((rc = ints(s, &b, "fail", v, 7)) < 0)
		goto fail;
	due__my_sql_init(&b, &s->conn);
	if (!v[1]) {
		*out = DUE_FAIL_REJECTED_STALE;
		due__my_add(&b,
			    "UPDATE due_attempt SET late_commit ="
			    " 'REJECTED_STALE' WHERE task_id = %lld"
			    " AND attempt = %d",
			    (long long)a->id, a->attempt);
	} else {
		st = v[2] ? "CANCELLED" : v[3] ? "DEAD" : "SCHEDULED";
		*out = due__fail_outcome_of(v[2]   ? DUE_CANCELLED
					    : v[3] ? DUE_DEAD
						   : DUE_SCHEDULED);
		due__my_add(&b, "UPDATE due_task SET state = '%s'", st);
		if (!v[2] && !v[3])
			due__my_add(&b, ", due_at = " NOW_V " + %lld",
				    (long long)due_backoff_us(v[4], v[5],
							      (int32_t)v[6]));
		due__my_add(&b, ", last_error = ");
		due__my_str(&b, a->error);
		due__my_add(&b,
			    ", lease_owner = NULL, lease_until = NULL,"
			    " updated_at = " NOW_V " WHERE id = %lld"
			    " AND state = 'CLAIMED' AND attempt = %d",
			    (long long)a->id, a->attempt);
		if ((rc = exec_one(s, &b, "fail", a->id)) < 0 ||
		    ((v[2] || v[3]) && (rc = release(s, &a->id, 1)) < 0))
			goto fail;
		due__my_sql_init(&b, &s->conn);
		due__my_add(&b,
			    "UPDATE due_attempt SET ended_at = " NOW_V
			    ", outcome = '%s', error = ",
			    v[2] ? "CANCELLED"
				 : due_outcome_name(a->as == DUE_OUT_TIMED_OUT
							? DUE_OUT_TIMED_OUT
							: DUE_OUT_FAILED));
		due__my_str(&b, a->error);
		due__my_add(&b,
			    " WHERE task_id = %lld AND attempt = %d"
			    " AND outcome = 'RUNNING'",
			    (long long)a->id, a->attempt);
	}
	if ((rc = exec(s, &b, "fail", NULL)) < 0 ||
	    (rc = due__my_commit(s)) < 0)
		goto fail;
	return 0;
fail:
	due__my_rollback(s);
	return rc;
}

static int mys_fail(due_store *s, due_fail_outcome *out, due_id id,
		    int32_t attempt, const char *error, due_outcome as)
{
	const fail_args a = {id, attempt, error, as};
	int rc;

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	s->released = false;
	RETRY(rc, s, fail_tx(s, out, &a));
	/* a retry is due again (after its backoff): listeners refill and
	   put it on their wheels before it is due, as for a submit; so are
	   the children an end released */
	if (rc == 0 && (*out == DUE_FAIL_RETRY_SCHEDULED || s->released))
		wake(s);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Reclaim                                                             */
/* ------------------------------------------------------------------ */

#define REQUEUE_STATE                                                          \
	"CASE WHEN cancel_requested THEN 'CANCELLED' WHEN " USED_UP            \
	" THEN 'DEAD' ELSE 'SCHEDULED' END"

/*
** One batch of expired leases: lock them (SKIP LOCKED: a row another
** transaction holds is being completed or extended right now), then
** write them by primary key with the predicate repeated.  *got counts the
** rows taken back.
*/
static int reclaim_tx(due_store *s, due_reclaimed *out, int64_t *got)
{
	MYSQL_RES *r = NULL;
	MYSQL_ROW row;
	picks p = {0};
	due_id ended[BATCH_ROWS];
	size_t n_ended = 0;
	int rc;
	SQL(b, s);

	*got = 0;
	if ((rc = due__my_begin(s)) < 0)
		return rc;
	due__my_add(&b,
		    "SELECT id FROM due_task WHERE state = 'CLAIMED'"
		    " AND at_us < " NOW " AND lease_until < " NOW
		    " ORDER BY at_us, id"
		    " LIMIT %d FOR UPDATE SKIP LOCKED" SET_NOW,
		    BATCH_ROWS);
	rc = due__my_exec(s, &b, "reclaim", &r);
	due__my_sql_free(&b);
	if (rc < 0 || (rc = picks_of(r, &p)) < 0)
		goto fail;
	mysql_free_result(r);
	r = NULL;
	due__my_sql_init(&b, &s->conn);
	if (p.n) {
		due__my_add(&b, "UPDATE due_attempt a JOIN due_task t"
				" ON a.task_id = t.id AND a.attempt = t.attempt"
				" SET a.ended_at = " NOW_V ","
				" a.outcome = 'LEASE_EXPIRED',"
				" a.error = 'lease expired'"
				" WHERE a.outcome = 'RUNNING' AND t.state ="
				" 'CLAIMED' AND t.lease_until < " NOW
				" AND t.id IN ");
		id_list(&b, p.t, p.n);
		due__my_add(&b,
			    "; UPDATE due_task SET due_at = CASE WHEN"
			    " cancel_requested OR " USED_UP " THEN due_at"
			    " ELSE " NOW_V " END, state = " REQUEUE_STATE ","
			    " last_error = CONCAT('lease expired (held by ',"
			    " lease_owner, ')'), lease_owner = NULL,"
			    " lease_until = NULL, updated_at = " NOW_V
			    " WHERE state = 'CLAIMED' AND lease_until < " NOW
			    " AND id IN ");
		id_list(&b, p.t, p.n);
		due__my_add(&b, "; SELECT state, id FROM due_task"
				" WHERE id IN ");
		id_list(&b, p.t, p.n);
		due__my_add(&b, "; ");
		rc = due__my_exec(s, &b, "reclaim", &r);
		due__my_sql_free(&b);
		if (rc < 0)
			goto fail;
		while (r && (row = mysql_fetch_row(r))) {
			bool end = true;
			if (strcmp(row[0], "SCHEDULED") == 0)
				out->rescheduled++, end = false;
			else if (strcmp(row[0], "DEAD") == 0)
				out->dead++;
			else if (strcmp(row[0], "CANCELLED") == 0)
				out->cancelled++;
			else
				end = false;
			if (end)
				ended[n_ended++] = due__my_i64(row, 1);
		}
		mysql_free_result(r);
		r = NULL;
		/* the tries that ended the task end its waiting children */
		if ((rc = release(s, ended, n_ended)) < 0)
			goto fail;
	}
	if ((rc = due__my_commit(s)) < 0)
		goto fail;
	*got = (int64_t)p.n;
	free(p.t);
	return 0;
fail:
	due__my_rollback(s);
	mysql_free_result(r);
	free(p.t);
	return rc;
}

/*
** The run-after sweep's probe (s->after_sweep): the ended parents (DONE,
** DEAD, CANCELLED) that still have a pending edge to a held child, at
** most BATCH_ROWS of them.  Read from the held children's side, the range
** (SCHEDULED, HELD_AT) of due_task_at, then each one's edges
** (due_after_child) and their parents (primary key): its cost follows the
** number of held tasks, not the size of the store.
*/
#define SWEEP_FROM                                                             \
	" FROM due_task c FORCE INDEX (due_task_at) JOIN due_after e FORCE"    \
	" INDEX (due_after_child) ON e.child = c.id JOIN due_task p FORCE"     \
	" INDEX (PRIMARY) ON p.id = e.parent WHERE c.state ="                  \
	" 'SCHEDULED' AND c.at_us = " HELD_AT " AND e.pending AND p.state IN"  \
	" ('DONE', 'DEAD', 'CANCELLED')"
#define SWEEP_PROBE                                                            \
	"SELECT DISTINCT e.parent" SWEEP_FROM " ORDER BY e.parent LIMIT 1000"
/* whether there is anything to sweep (mys_upcoming) */
#define SWEEP_ANY "SELECT EXISTS (SELECT 1" SWEEP_FROM ")"

/*
** Release what the sweep's probe found, cand[0..n): lock those parents
** FOR UPDATE that have ended (the predicate read again under the lock),
** set @due_now, and run release() on them, the routine every end runs,
** in one transaction.  Exactly once by construction: release() counts
** down only PENDING edges and closes them in the same transaction (on
** Galera, a racing release of the same edge through another node writes
** the same edge and child rows, so one of the two fails certification
** and is retried, then finds the edge closed); a parent whose edges
** were closed meanwhile releases nothing.
*/
static int sweep_tx(due_store *s, const due_id *cand, size_t n)
{
	MYSQL_RES *r = NULL;
	MYSQL_ROW row;
	picks p = {0};
	int rc;
	SQL(b, s);

	if ((rc = due__my_begin(s)) < 0)
		return rc;
	due__my_add(&b, "SELECT id FROM due_task WHERE id IN ");
	ids_sql(&b, cand, n);
	due__my_add(&b, " AND state IN ('DONE', 'DEAD', 'CANCELLED')"
			" ORDER BY id FOR UPDATE" SET_NOW);
	rc = due__my_exec(s, &b, "release stranded children", &r);
	due__my_sql_free(&b);
	while (rc == 0 && r && (row = mysql_fetch_row(r)))
		rc = pick_add(&p, due__my_i64(row, 0));
	mysql_free_result(r);
	if (rc < 0)
		goto fail;
	if (p.n && (rc = release_picks(s, &p)) < 0)
		goto fail;
	if ((rc = due__my_commit(s)) < 0)
		goto fail;
	free(p.t);
	return 0;
fail:
	due__my_rollback(s);
	free(p.t);
	return rc;
}

/*
** Take back expired leases in batches of BATCH_ROWS, each its own
** transaction; then report the earliest lease still running and the
** server's now, so the worker can sleep until exactly then.  With
** s->after_sweep (every Galera session: docs/internals/mysql.md, "The
** race with the parent's finish") the same round trip runs the sweep's
** probe, and a parent it finds gets its release (sweep_tx): a child left
** held on an ended parent is released by the next reclaim pass.
*/
static int mys_reclaim(due_store *s, due_reclaimed *out)
{
	MYSQL_RES *r[2] = {NULL, NULL};
	MYSQL_ROW row;
	int64_t got;
	due_id cand[1000];
	size_t n_cand = 0;
	int rc;
	SQL(b, s);

	memset(out, 0, sizeof(*out));
	if ((rc = due__my_ok(s)) < 0)
		return rc;
	s->released = false;
	do {
		due_reclaimed one = {0};
		RETRY(rc, s, reclaim_tx(s, &one, &got));
		if (rc < 0)
			return rc;
		out->rescheduled += one.rescheduled;
		out->dead += one.dead;
		out->cancelled += one.cancelled;
	} while (got == BATCH_ROWS);
	due__my_add(&b, "SELECT " NOW ", COUNT(m), MIN(m) FROM (SELECT"
			" MIN(at_us) AS m FROM due_task"
			" WHERE state = 'CLAIMED' AND at_us >= " NOW ") x");
	if (s->after_sweep)
		due__my_add(&b, "; " SWEEP_PROBE);
	rc = due__my_exec_sets(s, &b, "reclaim", r, s->after_sweep ? 2 : 1);
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	if (r[0] && (row = mysql_fetch_row(r[0]))) {
		out->now = due__my_i64(row, 0);
		out->next_expiry =
		    due__my_i64(row, 1) ? due__my_i64(row, 2) : 0;
	}
	while (r[1] && n_cand < 1000 && (row = mysql_fetch_row(r[1])))
		cand[n_cand++] = due__my_i64(row, 0);
	mysql_free_result(r[0]);
	mysql_free_result(r[1]);
	if (n_cand) {
		RETRY(rc, s, sweep_tx(s, cand, n_cand));
		if (rc < 0)
			return rc;
	}
	if (out->rescheduled || s->released)
		wake(s);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Cancel, get, list                                                   */
/* ------------------------------------------------------------------ */

/* The state of task id, locked: *state NULL when there is no such task. */
static int lock_state(due_store *s, due_id id, char **state, int64_t *attempt)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	int rc;
	SQL(b, s);

	*state = NULL;
	due__my_add(&b,
		    "SELECT state, attempt FROM due_task WHERE id = %lld"
		    " FOR UPDATE" SET_NOW,
		    (long long)id);
	rc = due__my_exec(s, &b, "lock task", &r);
	due__my_sql_free(&b);
	if (rc == 0 && r && (row = mysql_fetch_row(r))) {
		if (!(*state = due__strdup_n(row[0], strlen(row[0]))))
			rc = due__error_set(DUE_ENOMEM, "out of memory");
		if (attempt)
			*attempt = due__my_i64(row, 1);
	}
	mysql_free_result(r);
	return rc;
}

/*
** Galera, after the COMMIT of a cancel that wrote: 1 when it did not take
** (a waiting task not CANCELLED, a running try at `attempt` without the
** request), else 0; see completions_lost.  A CANCELLED answer is a promise
** that the task never runs: it is not given on a COMMIT that was empty.
*/
static int cancel_lost(due_store *s, due_id id, due_state st, int64_t attempt)
{
	int64_t v[2];
	int lost;
	SQL(b, s);

	if (!s->galera)
		return 0;
	due__my_add(&b,
		    "SELECT COUNT(*), MAX(state = 'CANCELLED') FROM due_task"
		    " WHERE id = %lld AND (state = 'CANCELLED' OR state <> "
		    "'CLAIMED' OR attempt <> %lld OR cancel_requested)",
		    (long long)id, (long long)attempt);
	if (ints(s, &b, "confirm cancel", v, 2) < 0) {
		s->deadlock = false; /* the COMMIT answered: it stands */
		return 0;
	}
	/* waiting: CANCELLED now; running: the request, or the try over */
	lost = st == DUE_SCHEDULED ? !v[1] : !v[0];
	if (lost) {
		s->deadlock = true;
		due__error_set(DUE_EBUSY,
			       "mysql store: the cancel of task %lld did not "
			       "take (Galera aborted the transaction); retried",
			       (long long)id);
	}
	return lost;
}

static int cancel_tx(due_store *s, due_cancel_outcome *out, due_id id)
{
	due_state st = DUE_SCHEDULED;
	char *state = NULL;
	int64_t attempt = 0;
	bool wrote = false;
	int rc;
	SQL(b, s);

	if ((rc = due__my_begin(s)) < 0)
		return rc;
	if ((rc = lock_state(s, id, &state, &attempt)) < 0)
		goto fail;
	if (state && (rc = due_state_parse(&st, state)) < 0)
		goto fail;
	if (state && (st == DUE_SCHEDULED || st == DUE_CLAIMED)) {
		due__my_add(&b,
			    "UPDATE due_task SET %s, updated_at = " NOW
			    " WHERE id = %lld AND state = ",
			    st == DUE_SCHEDULED
				? "state = 'CANCELLED', after_left = 0"
				: "cancel_requested = TRUE",
			    (long long)id);
		due__my_str(&b, state);
		if ((rc = exec_one(s, &b, "cancel", id)) < 0 ||
		    (st == DUE_SCHEDULED && (rc = release(s, &id, 1)) < 0))
			goto fail;
		wrote = true;
	}
	if ((rc = due__my_commit(s)) < 0)
		goto fail;
	if (wrote && cancel_lost(s, id, st, attempt)) {
		free(state);
		return DUE_EBUSY;
	}
	*out = due__cancel_outcome_of(state != NULL, st);
	free(state);
	return 0;
fail:
	due__my_rollback(s);
	free(state);
	return rc;
}

static int mys_cancel(due_store *s, due_cancel_outcome *out, due_id id)
{
	int rc;

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	s->released = false;
	RETRY(rc, s, cancel_tx(s, out, id));
	if (rc == 0 && s->released) /* any-end children due now */
		wake(s);
	return rc;
}

/*
** reschedule (issue 38), as cancel_tx: lock the row (lock_state, which
** reads the server's now into @due_now), decide from the state it
** locked, and write only when SCHEDULED, the state repeated in the
** UPDATE's WHERE; the new due_at is o->at or @due_now + the delay.
** On Galera a COMMIT that did not take is found by reading due_at back
** (RESCHEDULED is a promise about when the task runs): retried whole.
*/
static void due_at_expr(due_my_sql *b, const due_reschedule_opts *o)
{
	if (o->at != DUE_TIME_NONE)
		due__my_int(b, o->at);
	else
		due__my_add(b, NOW_V " + %lld", (long long)o->delay_us);
}

static int reschedule_lost(due_store *s, due_id id,
			   const due_reschedule_opts *o)
{
	int64_t v = 0;
	SQL(b, s);

	if (!s->galera)
		return 0;
	due__my_add(&b,
		    "SELECT COUNT(*) FROM due_task WHERE id = %lld AND"
		    " (after_left > 0 OR due_at = ",
		    (long long)id);
	due_at_expr(&b, o);
	due__my_add(&b, ")");
	if (ints(s, &b, "confirm reschedule", &v, 1) < 0) {
		s->deadlock = false; /* the COMMIT answered: it stands */
		return 0;
	}
	if (v)
		return 0;
	s->deadlock = true;
	due__error_set(DUE_EBUSY,
		       "mysql store: the reschedule of task %lld did not take "
		       "(Galera aborted the transaction); retried",
		       (long long)id);
	return 1;
}

static int reschedule_tx(due_store *s, due_reschedule_outcome *out, due_id id,
			 const due_reschedule_opts *o)
{
	due_state st = DUE_SCHEDULED;
	char *state = NULL;
	int rc;
	SQL(b, s);

	if ((rc = due__my_begin(s)) < 0)
		return rc;
	if ((rc = lock_state(s, id, &state, NULL)) < 0)
		goto fail;
	if (state && (rc = due_state_parse(&st, state)) < 0)
		goto fail;
	*out = due__reschedule_outcome_of(state != NULL, st);
	if (*out == DUE_RESCHEDULE_RESCHEDULED) {
		/* a held task (run-after) keeps the time as its own, applied
		   at its release; MySQL assigns left to right, after_left is
		   not assigned, and due_at last */
		due__my_add(&b, "UPDATE due_task SET after_at = IF(after_left"
				" > 0, ");
		if (o->at != DUE_TIME_NONE)
			due__my_add(&b,
				    "%lld, after_at), after_delay_us ="
				    " IF(after_left > 0, 0, after_delay_us)",
				    (long long)o->at);
		else
			due__my_add(&b,
				    "NULL, after_at), after_delay_us ="
				    " IF(after_left > 0, %lld, after_delay_us)",
				    (long long)o->delay_us);
		due__my_add(&b, ", due_at = IF(after_left > 0, due_at, ");
		due_at_expr(&b, o);
		due__my_add(&b, ")");
		if (o->set_payload) {
			due__my_add(&b, ", payload = ");
			due__my_blob(&b, o->payload, o->payload_len);
		}
		due__my_add(&b,
			    ", updated_at = " NOW_V " WHERE id = %lld AND"
			    " state = 'SCHEDULED'",
			    (long long)id);
		if ((rc = exec_one(s, &b, "reschedule", id)) < 0)
			goto fail;
	}
	if ((rc = due__my_commit(s)) < 0)
		goto fail;
	free(state);
	if (*out != DUE_RESCHEDULE_RESCHEDULED)
		return 0;
	if (reschedule_lost(s, id, o))
		return DUE_EBUSY;
	wake(s);
	return 0;
fail:
	due__my_rollback(s);
	free(state);
	return rc;
}

static int mys_reschedule(due_store *s, due_reschedule_outcome *out, due_id id,
			  const due_reschedule_opts *o)
{
	due_submit one = {.payload = o->payload, .payload_len = o->payload_len};
	int rc;

	if ((rc = due__my_ok(s)) < 0 ||
	    (o->set_payload && (rc = my_payloads_fit(s, &one, 1)) < 0))
		return rc;
	RETRY(rc, s, reschedule_tx(s, out, id, o));
	return rc;
}

/* The attempts history of n tasks (ordered by id) with one statement. */
static int load_attempts(due_store *s, due_task *tasks, size_t n)
{
	MYSQL_RES *r;
	due_my_cur cur;
	due_rows rows;
	int rc;
	SQL(b, s);

	due__my_add(&b, "SELECT " ATTEMPT_COLS " FROM due_attempt"
			" WHERE task_id IN ");
	id_list(&b, tasks, n);
	due__my_add(&b, " ORDER BY task_id, attempt");
	rc = due__my_exec(s, &b, "read attempts", &r);
	due__my_sql_free(&b);
	if (rc == 0) {
		due__my_rows(&rows, &cur, r);
		rc = due__rows_attempts(&rows, tasks, n);
	}
	mysql_free_result(r);
	return rc;
}

/*
** A run-after task's parents, ascending (due_after_child): t->after,
** NULL when its edges are gone.
*/
static int load_after(due_store *s, due_task *t)
{
	MYSQL_RES *r = NULL;
	MYSQL_ROW row;
	size_t n = 0, rows;
	int rc;
	SQL(b, s);

	due__my_add(&b,
		    "SELECT parent FROM due_after WHERE child = %lld"
		    " ORDER BY parent",
		    (long long)t->id);
	rc = due__my_exec(s, &b, "read parents", &r);
	due__my_sql_free(&b);
	rows = r ? (size_t)mysql_num_rows(r) : 0;
	if (rc == 0 && rows && !(t->after = malloc(rows * sizeof(*t->after))))
		rc = due__error_set(DUE_ENOMEM, "out of memory");
	while (rc == 0 && r && n < rows && (row = mysql_fetch_row(r)))
		t->after[n++] = due__my_i64(row, 0);
	mysql_free_result(r);
	return rc;
}

static int mys_get(due_store *s, due_task **out, due_id id)
{
	MYSQL_RES *r;
	due_my_cur cur;
	due_rows rows;
	int rc;
	SQL(b, s);

	*out = NULL;
	if ((rc = due__my_ok(s)) < 0)
		return rc;
	due__my_add(&b, "SELECT " TASK_COLS " FROM due_task WHERE id = %lld",
		    (long long)id);
	rc = due__my_exec(s, &b, "get", &r);
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	due__my_rows(&rows, &cur, r);
	rc = due__rows_task_get(&rows, out, id);
	mysql_free_result(r);
	if (rc == 0 && (*out)->after_n > 0)
		rc = load_after(s, *out);
	if (rc == 0 && (rc = load_attempts(s, *out, 1)) < 0) {
		due_task_free(*out);
		*out = NULL;
	}
	return rc;
}

static int mys_list(due_store *s, due_task_list **out, const due_list_opts *o)
{
	due_task_list *l = NULL;
	MYSQL_RES *r;
	due_my_cur cur;
	due_rows rows;
	int rc;
	SQL(b, s);

	*out = NULL;
	if ((rc = due__my_ok(s)) < 0)
		return rc;
	/* A page of one state walks due_task_state (state, id) in id order:
	   100 index entries, however many tasks the state holds. */
	due__my_add(&b, "SELECT " TASK_COLS " FROM due_task%s WHERE id > %lld",
		    o->held	    ? " FORCE INDEX (due_task_at)"
		    : o->state >= 0 ? " FORCE INDEX (due_task_state)"
				    : "",
		    (long long)o->after);
	/* held (run-after): SCHEDULED at HELD_AT, one at_us of due_task_at
	   (state, at_us, id), walked in id order */
	if (o->held)
		due__my_add(&b, " AND state = 'SCHEDULED' AND at_us = " HELD_AT
				" AND after_left > 0");
	else if (o->state >= 0)
		due__my_add(&b, " AND state = '%s'",
			    due_state_name((due_state)o->state));
	if (o->kind) {
		due__my_add(&b, " AND kind = ");
		due__my_str(&b, o->kind);
	}
	due__my_add(&b, " ORDER BY id LIMIT %d", o->limit);
	rc = due__my_exec(s, &b, "list", &r);
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	if ((rc = due__task_list_alloc(&l, r ? mysql_num_rows(r) : 0)) == 0) {
		due__my_rows(&rows, &cur, r);
		rc = due__rows_tasks(&rows, l, r ? mysql_num_rows(r) : 0);
	}
	mysql_free_result(r);
	if (rc == 0 && o->attempts && l->count)
		rc = load_attempts(s, l->items, l->count);
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

/* DEAD -> SCHEDULED due now with a fresh budget; audited. */
static int retry_tx(due_store *s, due_id id)
{
	char *state = NULL;
	int rc;
	SQL(b, s);

	if ((rc = due__my_begin(s)) < 0)
		return rc;
	if ((rc = lock_state(s, id, &state, NULL)) < 0)
		goto fail;
	if (!state || strcmp(state, "DEAD") != 0) {
		rc = due__store_wrong_state(id, "retry", state, "DEAD");
		goto fail;
	}
	due__my_add(
	    &b,
	    "UPDATE due_task SET state = 'SCHEDULED', due_at = " NOW_V ","
	    " attempt_base = attempt, cancel_requested = FALSE,"
	    " updated_at = " NOW_V " WHERE id = %lld AND state = 'DEAD';"
	    " INSERT INTO due_audit (task_id, at, action, detail)"
	    " VALUES (%lld, " NOW_V ", 'retry',"
	    " 'DEAD -> SCHEDULED, fresh attempt budget')",
	    (long long)id, (long long)id);
	rc = exec(s, &b, "retry", NULL);
	if (rc == DUE_ECONFLICT)
		rc = due__store_retry_conflict(id);
	if (rc < 0 || (rc = due__my_commit(s)) < 0)
		goto fail;
	free(state);
	return 0;
fail:
	due__my_rollback(s);
	free(state);
	return rc;
}

static int mys_retry(due_store *s, due_id id)
{
	int rc;

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	RETRY(rc, s, retry_tx(s, id));
	if (rc == 0)
		wake(s);
	return rc;
}

/*
** requeue (kill = false) and kill: lock the row, check its state, write
** the new one, close the running attempt, audit.  *final: the state
** written.
*/
static int operator_tx(due_store *s, bool kill, due_id id, due_state *final)
{
	const char *action = kill ? "kill" : "requeue";
	char *state = NULL;
	int64_t v[2], attempt = 0;
	bool ok;
	int rc;
	SQL(b, s);

	if ((rc = due__my_begin(s)) < 0)
		return rc;
	if ((rc = lock_state(s, id, &state, &attempt)) < 0)
		goto fail;
	ok = state && (kill ? strcmp(state, "DONE") != 0 &&
				  strcmp(state, "CANCELLED") != 0
			    : strcmp(state, "CLAIMED") == 0);
	if (!ok) {
		rc = due__store_wrong_state(id, action, state,
					    kill ? "SCHEDULED, CLAIMED or DEAD"
						 : "CLAIMED");
		goto fail;
	}
	if (kill)
		due__my_add(&b,
			    /* MySQL assigns left to right: last_error
			       reads the old state, so it goes first */
			    "UPDATE due_task SET last_error = CONCAT(COALESCE("
			    "CONCAT(last_error, '; '), ''), CASE WHEN state ="
			    " 'DEAD' THEN 'dead letter dismissed by operator'"
			    " ELSE 'killed by operator' END), state = CASE WHEN"
			    " state = 'DEAD' OR cancel_requested THEN"
			    " 'CANCELLED' ELSE 'DEAD' END, after_left = 0,");
	else
		due__my_add(&b, "UPDATE due_task SET state = CASE WHEN"
				" cancel_requested THEN 'CANCELLED' ELSE"
				" 'SCHEDULED' END, due_at = " NOW_V ",");
	due__my_add(&b,
		    " lease_owner = NULL, lease_until = NULL,"
		    " updated_at = " NOW_V " WHERE id = %lld AND attempt = %lld"
		    " AND state = ",
		    (long long)id, (long long)attempt);
	due__my_str(&b, state);
	if ((rc = exec_one(s, &b, action, id)) < 0)
		goto fail;
	due__my_sql_init(&b, &s->conn);
	due__my_add(&b,
		    "UPDATE due_attempt SET ended_at = " NOW_V
		    ", outcome = '%s',"
		    " error = '%s' WHERE task_id = %lld AND attempt = %lld"
		    " AND outcome = 'RUNNING';"
		    " INSERT INTO due_audit (task_id, at, action, detail)"
		    " SELECT id, " NOW_V ", '%s', state FROM due_task"
		    " WHERE id = %lld;"
		    " SELECT state = 'CANCELLED', state = 'DEAD' FROM due_task"
		    " WHERE id = %lld",
		    kill ? "KILLED" : "REQUEUED", action, (long long)id,
		    (long long)attempt, action, (long long)id, (long long)id);
	if ((rc = ints(s, &b, action, v, 2)) < 0 ||
	    ((v[0] || v[1]) && (rc = release(s, &id, 1)) < 0) ||
	    (rc = due__my_commit(s)) < 0)
		goto fail;
	*final = v[0] ? DUE_CANCELLED : v[1] ? DUE_DEAD : DUE_SCHEDULED;
	free(state);
	return 0;
fail:
	due__my_rollback(s);
	free(state);
	return rc;
}

static int mys_requeue(due_store *s, due_id id)
{
	due_state final = DUE_SCHEDULED;
	int rc;

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	s->released = false;
	RETRY(rc, s, operator_tx(s, false, id, &final));
	if (rc == 0 && (final == DUE_SCHEDULED || s->released))
		wake(s);
	return rc;
}

static int mys_kill(due_store *s, due_state *out, due_id id)
{
	int rc;

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	s->released = false;
	RETRY(rc, s, operator_tx(s, true, id, out));
	if (rc == 0 && s->released) /* any-end children due now */
		wake(s);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Stats, prune                                                        */
/* ------------------------------------------------------------------ */

/*
** Lateness percentiles (nearest rank) over the claims of the window,
** unsorted from the server: due__lateness_fill sorts them.
*/
static int lateness(due_store *s, due_stats *out)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	int64_t *v = NULL;
	size_t n = 0;
	int rc;
	SQL(b, s);

	out->window_us = DUE_STATS_WINDOW_US;
	due__my_add(&b,
		    "SELECT claimed_at - due_at AS late FROM due_attempt"
		    " FORCE INDEX (due_attempt_claimed)"
		    " WHERE claimed_at >= %lld",
		    (long long)(out->now - DUE_STATS_WINDOW_US));
	rc = due__my_exec(s, &b, "lateness", &r);
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	if (r && mysql_num_rows(r) &&
	    !(v = malloc(mysql_num_rows(r) * sizeof(*v)))) {
		mysql_free_result(r);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	while (r && (row = mysql_fetch_row(r)))
		v[n++] = due__my_i64(row, 0);
	mysql_free_result(r);
	due__lateness_fill(out, v, n);
	free(v);
	return 0;
}

/*
** Counting.  InnoDB keeps no row count: COUNT(*) walks an index, so a
** count costs what it counts.  CLAIMED and DEAD are counted exactly, each
** an index range of due_task_state (what runs, what waits for a person),
** and so is the overdue range of due_task_at.  SCHEDULED, DONE and
** CANCELLED can hold millions: est_rows() first asks the optimizer
** (EXPLAIN: InnoDB's records_in_range, a few B-tree dives, no scan) and
** counts exactly only when it says fewer than EXACT_BELOW; above, the
** estimate is the answer, its bit set in `estimated` (kinds_estimated).
*/
#define EXACT_BELOW 10000

/* The optimizer's row estimate of b's SELECT (its `rows` column). */
static int est_rows(due_store *s, due_my_sql *b, int64_t *out)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	int rc = due__my_exec(s, b, "estimate", &r);

	due__my_sql_free(b);
	*out = 0;
	if (rc < 0)
		return rc;
	if (r && (row = mysql_fetch_row(r))) {
		MYSQL_FIELD *f = mysql_fetch_fields(r);
		for (unsigned i = 0; i < mysql_num_fields(r); i++)
			if (strcmp(f[i].name, "rows") == 0)
				*out = due__my_i64(row, (int)i);
	}
	mysql_free_result(r);
	return 0;
}

/*
** The tasks in `state` (of `kind` when not NULL): exact when the
** optimizer estimates fewer than EXACT_BELOW (or `exact`), else that
** estimate with *est set.
*/
static int count_state(due_store *s, const char *kind, due_state state,
		       bool exact, int64_t *n, bool *est)
{
	int64_t e = 0;
	int rc;

	*est = false;
	for (int pass = exact ? 1 : 0; pass < 2; pass++) {
		SQL(b, s);
		due__my_add(&b, "%sSELECT COUNT(*) FROM due_task%s WHERE",
			    pass ? "" : "EXPLAIN ",
			    kind ? " FORCE INDEX (due_task_kind_claim)"
				 : " FORCE INDEX (due_task_state)");
		if (kind) {
			due__my_add(&b, " kind = ");
			due__my_str(&b, kind);
			due__my_add(&b, " AND");
		}
		due__my_add(&b, " state = '%s'", due_state_name(state));
		if (!pass) {
			if ((rc = est_rows(s, &b, &e)) < 0)
				return rc;
			if (e >= EXACT_BELOW) {
				*n = e;
				*est = true;
				return 0;
			}
		} else if ((rc = ints(s, &b, "stats", n, 1)) < 0) {
			return rc;
		}
	}
	return 0;
}

static int mys_stats(due_store *s, due_stats *out)
{
	int64_t v[3];
	int rc;
	SQL(b, s);

	if ((rc = due__my_ok(s)) < 0 || (rc = server_now(s, &out->now)) < 0)
		return rc;
	out->estimated = 0;
	for (int st = 0; st < DUE_STATE_COUNT; st++) {
		bool exact = st == DUE_CLAIMED || st == DUE_DEAD, est;
		if ((rc = count_state(s, NULL, (due_state)st, exact,
				      &out->counts[st], &est)) < 0)
			return rc;
		if (est)
			out->estimated |= 1u << st;
	}
	out->dead = out->counts[DUE_DEAD];
	due__my_add(&b,
		    "SELECT COUNT(*), COUNT(at_us), MIN(at_us) FROM due_task"
		    " FORCE INDEX (due_task_at)"
		    " WHERE state = 'SCHEDULED' AND at_us <= %lld",
		    (long long)out->now);
	if ((rc = ints(s, &b, "stats", v, 3)) < 0)
		return rc;
	out->due_unclaimed = v[0];
	if (v[1])
		out->oldest_due_unclaimed_ms = (out->now - v[2]) / 1000;
	return lateness(s, out);
}

/* A prune candidate: a finished task and its end. */
typedef struct fin {
	int64_t at, id;
} fin;

static int fin_cmp(const void *a, const void *b)
{
	const fin *x = a, *y = b;
	if (x->at != y->at)
		return x->at < y->at ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/*
** One batch: the `want` (<= BATCH_ROWS) oldest finished tasks ended
** before the cutoff, with their history, in one transaction; *n deleted.
** Each state's oldest are locked through due_task_at (state, at_us, id;
** a finished task's at_us is its end), the two lists merged by end, and
** the DELETE repeats state and cutoff.
*/
static int prune_tx(due_store *s, int64_t older_than_us, int64_t want,
		    int64_t *n)
{
	static const char *const states[] = {"DONE", "CANCELLED"};
	fin *f = NULL;
	size_t nf = 0;
	picks p = {0};
	int rc;

	*n = 0;
	if (!(f = malloc(2 * (size_t)want * sizeof(*f))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	if ((rc = due__my_begin(s)) < 0)
		goto fail;
	for (int i = 0; i < 2; i++) {
		MYSQL_RES *r;
		MYSQL_ROW row;
		SQL(b, s);
		if (!i) /* the cutoff, once: both states judged by it */
			due__my_add(&b, "SET @due_cut = " NOW " - %lld; ",
				    (long long)older_than_us);
		due__my_add(&b,
			    "SELECT id, at_us FROM due_task"
			    " FORCE INDEX (due_task_at) WHERE state = '%s'"
			    " AND at_us < @due_cut ORDER BY at_us, id"
			    " LIMIT %lld FOR UPDATE SKIP LOCKED",
			    states[i], (long long)want);
		rc = due__my_exec(s, &b, "prune", &r);
		due__my_sql_free(&b);
		if (rc < 0)
			goto fail;
		while (r && (row = mysql_fetch_row(r)))
			f[nf++] =
			    (fin){due__my_i64(row, 1), due__my_i64(row, 0)};
		mysql_free_result(r);
	}
	if (nf > 1)
		qsort(f, nf, sizeof(*f), fin_cmp);
	for (size_t i = 0; i < nf && (int64_t)i < want; i++)
		if ((rc = pick_add(&p, f[i].id)) < 0)
			goto fail;
	if (p.n) {
		SQL(b, s);
		due__my_add(&b, "DELETE FROM due_attempt WHERE task_id IN ");
		id_list(&b, p.t, p.n);
		due__my_add(&b, "; DELETE FROM due_audit WHERE task_id IN ");
		id_list(&b, p.t, p.n);
		/* its edges as a child (as a parent they stay: a child's
		   `after` keeps naming it) */
		due__my_add(&b, "; DELETE FROM due_after WHERE child IN ");
		id_list(&b, p.t, p.n);
		due__my_add(&b, "; DELETE FROM due_task WHERE state IN"
				" ('DONE', 'CANCELLED') AND at_us < @due_cut"
				" AND id IN ");
		id_list(&b, p.t, p.n);
		if ((rc = exec(s, &b, "prune", NULL)) < 0)
			goto fail;
		*n = (int64_t)s->affected;
	}
	if ((rc = due__my_commit(s)) < 0)
		goto fail;
	free(f);
	free(p.t);
	return 0;
fail:
	due__my_rollback(s);
	free(f);
	free(p.t);
	*n = 0;
	return rc;
}

/*
** Delete finished tasks with their history, oldest first, in batches of
** at most BATCH_ROWS (DUE_PRUNE_BATCH), each its own transaction, until a
** batch finds nothing or max_rows (0: no limit) are gone.  DEAD is never
** touched.  A retention longer than the epoch deletes nothing.
*/
static int mys_prune(due_store *s, int64_t *deleted, int64_t older_than_us,
		     int64_t max_rows)
{
	const int64_t max_us = 1000LL * 366 * 86400 * 1000000; /* 1000 years */
	int64_t n, want;
	int rc;

	*deleted = 0;
	if ((rc = due__my_ok(s)) < 0)
		return rc;
	if (older_than_us > max_us)
		older_than_us = max_us;
	do {
		want = BATCH_ROWS;
		if (max_rows > 0 && max_rows - *deleted < want)
			want = max_rows - *deleted;
		if (want <= 0)
			break;
		RETRY(rc, s, prune_tx(s, older_than_us, want, &n));
		if (rc < 0)
			return rc;
		*deleted += n;
	} while (n > 0);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Schedules                                                           */
/* ------------------------------------------------------------------ */

static int sched_read(due_store *s, const char *name, due_cron_info **one,
		      due_cron_info_list **all)
{
	MYSQL_RES *r;
	due_my_cur cur;
	due_rows rows;
	int rc;
	SQL(b, s);

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	due__my_add(&b, "SELECT " SCHED_COLS " FROM due_schedule");
	if (name) {
		due__my_add(&b, " WHERE name = ");
		due__my_str(&b, name);
	}
	due__my_add(&b, " ORDER BY name");
	rc = due__my_exec(s, &b, "read schedule", &r);
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	due__my_rows(&rows, &cur, r);
	rc = name ? due__rows_sched_get(&rows, one, name)
		  : due__rows_sched_list(&rows, all);
	mysql_free_result(r);
	return rc;
}

static int mys_cron_get(due_store *s, due_cron_info **out, const char *name)
{
	*out = NULL;
	return sched_read(s, name, out, NULL);
}

static int mys_cron_list(due_store *s, due_cron_info_list **out)
{
	*out = NULL;
	return sched_read(s, NULL, NULL, out);
}

#define SET_NEW_(c) "`" #c "` = VALUES(`" #c "`), "
#define SET_NEW_LAST_(c) "`" #c "` = VALUES(`" #c "`)"

/* Insert or replace a definition; a replace keeps the firing history. */
static int mys_cron_put(due_store *s, const due_cron_def *d, due_time next_slot)
{
	int rc;
	SQL(b, s);

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	{
		due_submit it = {.kind = d->kind,
				 .payload = d->payload,
				 .payload_len = d->payload_len};
		if ((rc = my_payloads_fit(s, &it, 1)) < 0) {
			due__my_sql_free(&b);
			return rc;
		}
	}
	due__my_add(&b, "INSERT INTO due_schedule (name, " DUE_SCHED_DEF_COLS
			", created_at, updated_at) VALUES (");
	due__my_str(&b, d->name);
	due__my_add(&b, ", ");
	due__my_str(&b, d->expr);
	due__my_add(&b, ", ");
	due__my_str(&b, d->kind);
	due__my_add(&b, ", ");
	due__my_str(&b, d->tz ? d->tz : "UTC");
	due__my_add(&b, ", ");
	due__my_blob(&b, d->payload, d->payload_len);
	due__my_add(&b,
		    ", '%s', '%s', %d, %lld, %lld, %lld, " NOW ", " NOW
		    ") ON DUPLICATE KEY UPDATE " DUE_SCHED_DEF_COLUMNS(
			SET_NEW_, SET_NEW_LAST_) ", updated_at = " NOW,
		    due__misfire_name(d->misfire),
		    due__overlap_name(d->overlap), d->max_attempts,
		    (long long)d->backoff_us, (long long)d->backoff_cap_us,
		    (long long)next_slot);
	RETRY(rc, s, due__my_exec(s, &b, "save schedule", NULL));
	due__my_sql_free(&b);
	return rc;
}

static int mys_cron_remove(due_store *s, const char *name)
{
	uint64_t n;
	int rc;
	SQL(b, s);

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	due__my_add(&b, "DELETE FROM due_schedule WHERE name = ");
	due__my_str(&b, name);
	if ((rc = exec(s, &b, "remove schedule", &n)) < 0)
		return rc;
	return n ? 0 : due__store_no_schedule(name);
}

/*
** One scheduler step (store.h: cron_fire) in one transaction: lock the
** schedule row, compare next_slot with what the scheduler read (another
** scheduler that advanced it first wins: nothing is written), insert the
** slot's task (or find the live one of its key), record it.
*/
static int fire_tx(due_store *s, const due_cron_fire *f, bool *won,
		   due_id *task_id)
{
	due_submitted sub = {0};
	int64_t v[2];
	int rc;
	SQL(b, s);

	*won = false;
	*task_id = 0;
	if ((rc = due__my_begin(s)) < 0)
		return rc;
	due__my_add(&b,
		    "SELECT COUNT(*), MAX(next_slot = %lld) FROM"
		    " due_schedule WHERE name = ",
		    (long long)f->expect);
	due__my_str(&b, f->name);
	due__my_add(&b, " FOR UPDATE");
	if ((rc = ints(s, &b, "fire schedule", v, 2)) < 0)
		goto fail;
	if (!v[1]) { /* lost the race (or removed): nothing written */
		due__my_rollback(s);
		return 0;
	}
	if (f->task && (rc = insert_one(s, f->task, &sub)) < 0)
		goto fail;
	due__my_sql_init(&b, &s->conn);
	due__my_add(&b, "UPDATE due_schedule SET next_slot = %lld,",
		    (long long)f->next);
	if (f->task)
		due__my_add(&b,
			    " last_slot = %lld, last_task = %lld,"
			    " fired = fired + 1,",
			    (long long)f->slot, (long long)sub.id);
	if (f->missed > 0)
		due__my_add(&b, " missed = missed + %lld, last_missed = %lld,",
			    (long long)f->missed, (long long)f->last_missed);
	due__my_add(&b, " updated_at = " NOW " WHERE name = ");
	due__my_str(&b, f->name);
	if ((rc = exec(s, &b, "fire schedule", NULL)) < 0 ||
	    (rc = due__my_commit(s)) < 0)
		goto fail;
	*won = true;
	*task_id = sub.id;
	return 0;
fail:
	due__my_rollback(s);
	return rc;
}

static int mys_cron_fire(due_store *s, const due_cron_fire *f, bool *won,
			 due_id *task_id)
{
	int rc;

	*won = false;
	*task_id = 0;
	if ((rc = due__my_ok(s)) < 0)
		return rc;
	RETRY(rc, s, fire_tx(s, f, won, task_id));
	if (rc == 0 && *task_id)
		wake(s);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Metrics, worker reports                                             */
/* ------------------------------------------------------------------ */

/* Kind `name` appended to m->kinds, its counts zero. */
static int kind_add(due_metrics *m, size_t *cap, const char *name)
{
	if (m->n_kinds == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		due_kind_counts *n = realloc(m->kinds, c * sizeof(*n));
		if (!n)
			return due__error_set(DUE_ENOMEM, "out of memory");
		m->kinds = n, *cap = c;
	}
	memset(&m->kinds[m->n_kinds], 0, sizeof(m->kinds[0]));
	if (!(m->kinds[m->n_kinds].kind = due__strdup_n(name, strlen(name))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	m->n_kinds++;
	return 0;
}

/*
** Task counts by kind and state (the first 1000 kinds by name).  The
** kinds: a loose index scan of due_task_kind_claim (one dive per kind).
** Each (kind, state): count_state() (exact CLAIMED and DEAD, the rest
** exact below EXACT_BELOW, else the optimizer's estimate, its bit in
** kinds_estimated): a few statements per kind, never a scan of the table.
*/
static int metrics_kinds(due_store *s, due_metrics *m)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	size_t cap = 0;
	int rc;
	SQL(b, s);

	m->kinds_estimated = 0;
	due__my_add(&b, "SELECT kind FROM due_task FORCE INDEX"
			" (due_task_kind_claim) GROUP BY kind ORDER BY kind"
			" LIMIT 1000");
	rc = due__my_exec(s, &b, "metrics", &r);
	due__my_sql_free(&b);
	while (rc == 0 && r && (row = mysql_fetch_row(r)))
		rc = kind_add(m, &cap, row[0]);
	mysql_free_result(r);
	for (size_t i = 0; rc == 0 && i < m->n_kinds; i++)
		for (int st = 0; rc == 0 && st < DUE_STATE_COUNT; st++) {
			bool est;
			rc = count_state(s, m->kinds[i].kind, (due_state)st,
					 st == DUE_CLAIMED || st == DUE_DEAD,
					 &m->kinds[i].counts[st], &est);
			if (est)
				m->kinds_estimated |= 1u << st;
		}
	return rc;
}

/* A histogram of `expr` (microseconds) over the attempts matching where. */
static int hist(due_store *s, const char *expr, const char *where,
		due_histogram *h)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	int rc;
	SQL(b, s);

	due__my_add(&b, "SELECT CASE");
	for (int i = 0; i < DUE_HIST_N; i++)
		due__my_add(&b, " WHEN (%s) / 1000.0 <= %.17g THEN %d", expr,
			    due_hist_bounds_ms[i], i);
	due__my_add(&b,
		    " ELSE %d END AS bk, COUNT(*), SUM(%s) FROM due_attempt"
		    " FORCE INDEX (due_attempt_claimed)%s GROUP BY bk",
		    DUE_HIST_N, expr, where);
	rc = due__my_exec(s, &b, "histogram", &r);
	due__my_sql_free(&b);
	while (rc == 0 && r && (row = mysql_fetch_row(r))) {
		int64_t bk = due__my_i64(row, 0), n = due__my_i64(row, 1);
		if (bk < 0 || bk > DUE_HIST_N)
			continue;
		h->buckets[bk] += n;
		h->count += n;
		h->sum_ms += (row[2] ? strtod(row[2], NULL) : 0) / 1000.0;
	}
	mysql_free_result(r);
	return rc;
}

/*
** Outcomes, refused late commits and DONE per minute of the last 15, of
** the tries claimed since `from` (due_attempt_claimed): their cost follows
** the recent rate, not the length of the history.
*/
static int outcomes(due_store *s, due_metrics *m, due_time now, due_time from)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	int rc;
	SQL(b, s);

	due__my_add(&b,
		    "SELECT outcome, COUNT(*),"
		    " COALESCE(SUM(late_commit = 'REJECTED_STALE'), 0)"
		    " FROM due_attempt FORCE INDEX (due_attempt_claimed)"
		    " WHERE claimed_at >= %lld GROUP BY outcome",
		    (long long)from);
	rc = due__my_exec(s, &b, "outcomes", &r);
	due__my_sql_free(&b);
	while (rc == 0 && r && (row = mysql_fetch_row(r))) {
		int i = due__outcome_parse(row[0]);
		if (i >= 0 && i < DUE_OUT_REJECTED_STALE)
			m->outcomes[i] = due__my_i64(row, 1);
		m->outcomes[DUE_OUT_REJECTED_STALE] += due__my_i64(row, 2);
	}
	mysql_free_result(r);
	if (rc < 0)
		return rc;
	due__my_sql_init(&b, &s->conn);
	due__my_add(&b,
		    "SELECT (%lld - ended_at) DIV 60000000 AS mi, COUNT(*)"
		    " FROM due_attempt FORCE INDEX (due_attempt_claimed)"
		    " WHERE claimed_at >= %lld AND outcome = 'DONE'"
		    " AND ended_at > %lld AND ended_at <= %lld GROUP BY mi",
		    (long long)now, (long long)from,
		    (long long)(now - 900000000LL), (long long)now);
	rc = due__my_exec(s, &b, "throughput", &r);
	due__my_sql_free(&b);
	while (rc == 0 && r && (row = mysql_fetch_row(r))) {
		int64_t mi = due__my_i64(row, 0);
		if (mi >= 0 && mi < 15)
			m->done_per_min[mi] = due__my_i64(row, 1);
	}
	mysql_free_result(r);
	return rc;
}

static int workers(due_store *s, due_metrics *m, due_time now)
{
	int64_t v[8];
	int rc;
	SQL(b, s);

	due__my_add(&b,
		    "SELECT COUNT(*), COALESCE(SUM(pruned), 0),"
		    " COALESCE(SUM(claim_queries), 0),"
		    " COALESCE(SUM(empty_claims), 0),"
		    " COALESCE(SUM(reclaim_queries), 0),"
		    " COALESCE(SUM(store_errors), 0),"
		    " (SELECT COUNT(*) FROM due_schedule),"
		    " COALESCE(SUM(lease_lost), 0)"
		    " FROM due_worker WHERE seen_at >= %lld",
		    (long long)(now - 300LL * 1000000));
	if ((rc = ints(s, &b, "workers", v, 8)) < 0)
		return rc;
	m->workers = v[0];
	m->pruned = v[1];
	m->claim_queries = v[2];
	m->empty_claims = v[3];
	m->reclaim_queries = v[4];
	m->store_errors = v[5];
	m->n_schedules = (size_t)v[6];
	m->lease_lost = v[7];
	return 0;
}

static int mys_metrics(due_store *s, due_metrics *m)
{
	due_time now;
	char where[128];
	int rc;

	m->n_kinds = 0;
	m->kinds = NULL;
	memset(&m->lateness, 0, sizeof(m->lateness));
	memset(&m->duration, 0, sizeof(m->duration));
	memset(m->outcomes, 0, sizeof(m->outcomes));
	memset(m->done_per_min, 0, sizeof(m->done_per_min));
	if ((rc = due__my_ok(s)) < 0 || (rc = server_now(s, &now)) < 0)
		return rc;
	m->window_us = DUE_METRICS_WINDOW_US;
	snprintf(where, sizeof(where), " WHERE claimed_at >= %lld",
		 (long long)(now - DUE_METRICS_WINDOW_US));
	if ((rc = metrics_kinds(s, m)) < 0 ||
	    (rc = hist(s, "claimed_at - due_at", where, &m->lateness)) < 0 ||
	    (rc = hist(s, "ended_at - claimed_at",
		       strcat(where, " AND ended_at IS NOT NULL"),
		       &m->duration)) < 0 ||
	    (rc = outcomes(s, m, now, now - DUE_METRICS_WINDOW_US)) < 0 ||
	    (rc = workers(s, m, now)) < 0) {
		for (size_t i = 0; i < m->n_kinds; i++)
			free(m->kinds[i].kind);
		free(m->kinds);
		m->kinds = NULL;
		m->n_kinds = 0;
	}
	return rc;
}

#define UCOL_NEW_(c) "`" #c "` = VALUES(`" #c "`), "
#define UCOL_NEW_LAST_(c) "`" #c "` = VALUES(`" #c "`)"

/* Upsert the worker's row: started_at on first report, seen_at = now. */
static int mys_worker_report(due_store *s, const char *owner,
			     const due_worker_stats *st)
{
	int64_t v[DUE_WORKER_N_COUNTERS];
	int rc;
	SQL(b, s);

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	due__worker_counters(st, v);
	due__my_add(&b,
		    "INSERT INTO due_worker (owner, started_at, "
		    "seen_at, pruned, " DUE_WORKER_COUNTER_COLS ") VALUES (");
	due__my_str(&b, owner);
	due__my_add(&b, ", " NOW ", " NOW ", %lld", (long long)st->pruned);
	for (int i = 0; i < DUE_WORKER_N_COUNTERS; i++)
		due__my_add(&b, ", %lld", (long long)v[i]);
	due__my_add(
	    &b,
	    ") ON DUPLICATE KEY UPDATE seen_at = "
	    "VALUES(seen_at), pruned = VALUES(pruned), " DUE_WORKER_COUNTERS(
		UCOL_NEW_, UCOL_NEW_LAST_));
	RETRY(rc, s, due__my_exec(s, &b, "worker report", NULL));
	due__my_sql_free(&b);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Discovery: upcoming tasks                                           */
/* ------------------------------------------------------------------ */

/*
** The ids and due times of tasks due before `until` through due_task_at
** (state, at_us, id; a scheduled task's at_us is its due_at), never of a
** paused kind; then the server's now and
** the next lease expiry.
*/
static int mys_upcoming(due_store *s, due_upcoming *out,
			const char *const *kinds, size_t n_kinds, bool exclude,
			due_time until, int limit)
{
	MYSQL_RES *r, *sets[2] = {NULL, NULL};
	MYSQL_ROW row;
	due_my_cur cur;
	due_rows rows;
	int64_t v[3];
	bool sweep;
	int rc;
	SQL(b, s);

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	due__my_add(&b,
		    "SELECT id, due_at FROM due_task WHERE state = 'SCHEDULED'"
		    " AND at_us < %lld AND due_at < %lld",
		    (long long)until, (long long)until);
	kind_filter(&b, "kind", kinds, n_kinds, exclude);
	due__my_add(&b,
		    " AND kind NOT IN (SELECT kind FROM due_kind WHERE paused)"
		    " ORDER BY at_us, id LIMIT %d",
		    limit);
	rc = due__my_exec(s, &b, "upcoming", &r);
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	due__my_rows(&rows, &cur, r);
	rc = due__rows_upcoming(&rows, out, limit);
	mysql_free_result(r);
	if (rc < 0)
		return rc;
	due__my_sql_init(&b, &s->conn);
	due__my_add(&b, "SELECT " NOW ", COUNT(m), MIN(m) FROM (SELECT"
			" MIN(at_us) AS m FROM due_task"
			" WHERE state = 'CLAIMED') x");
	/* the run-after sweep (s->after_sweep), at most once a second: a
	   child left held on an ended parent makes the next expiry now, so
	   the worker's next step is a reclaim pass, which releases it (a
	   worker with the wheel reclaims only when the refill reports an
	   expired lease) */
	sweep = s->after_sweep && due__mono_us() - s->sweep_probed >= 1000000;
	if (sweep) {
		due__my_add(&b, "; " SWEEP_ANY);
		s->sweep_probed = due__mono_us();
	}
	rc = due__my_exec_sets(s, &b, "upcoming", sets, sweep ? 2 : 1);
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	row = sets[0] ? mysql_fetch_row(sets[0]) : NULL;
	for (int i = 0; i < 3; i++)
		v[i] = row ? due__my_i64(row, i) : 0;
	out->now = v[0];
	out->next_expiry = v[1] ? v[2] : 0;
	if (sets[1] && (row = mysql_fetch_row(sets[1])) &&
	    due__my_i64(row, 0) &&
	    (!out->next_expiry || out->now < out->next_expiry))
		out->next_expiry = out->now - 1; /* "expired": reclaim now */
	mysql_free_result(sets[0]);
	mysql_free_result(sets[1]);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Kinds: settings and what they hold back                             */
/* ------------------------------------------------------------------ */

/* A setting: -1 keeps the column, 0 clears it (NULL), else the value. */
static void kind_set(due_my_sql *b, const char *col, int64_t v, const char *sep)
{
	if (v < 0)
		due__my_add(b, "%s = %s%s", col, col, sep);
	else if (v == 0)
		due__my_add(b, "%s = NULL%s", col, sep);
	else
		due__my_add(b, "%s = %lld%s", col, (long long)v, sep);
}

static int mys_kind_put(due_store *s, const char *kind,
			const due_kind_settings *set)
{
	int rc;
	SQL(b, s);

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	due__my_add(&b, "INSERT IGNORE INTO due_kind (kind, updated_at)"
			" VALUES (");
	due__my_str(&b, kind);
	due__my_add(&b, ", " NOW "); UPDATE due_kind SET ");
	if (set->paused >= 0)
		due__my_add(&b, "paused = %d, ", set->paused == 1);
	if (set->rate_n >= 0) {
		kind_set(&b, "rate_n", set->rate_n, ", ");
		kind_set(&b, "rate_us", set->rate_n ? set->rate_us : 0, ", ");
	}
	kind_set(&b, "max_running", set->max_running, ", ");
	kind_set(&b, "max_running_per_group", set->max_running_per_group, ", ");
	kind_set(&b, "timeout_us", set->timeout_us, ", ");
	due__my_add(&b, "updated_at = " NOW " WHERE kind = ");
	due__my_str(&b, kind);
	if ((rc = due__my_begin(s)) < 0)
		goto done;
	/* the COMMIT rides (on Galera with the savepoint's check): a COMMIT
	   of its own in the text had the check sent after it (1305) */
	s->commit_rides = true;
	rc = due__my_exec(s, &b, "save kind settings", NULL);
	if (rc < 0)
		due__my_rollback(s);
	else
		wake(s); /* a resume, a loosened limit */
done:
	due__my_sql_free(&b);
	return rc;
}

/* One kind (or every kind: NULL) into *out, with the live counts. */
static int kinds_read(due_store *s, const char *kind, const char *group,
		      due_kind_info_list **out)
{
	MYSQL_RES *r;
	due_my_cur cur;
	due_rows rows;
	due_time now;
	int rc;
	SQL(b, s);

	*out = NULL;
	if ((rc = due__my_ok(s)) < 0 || (rc = server_now(s, &now)) < 0)
		return rc;
	due__my_add(&b,
		    "SELECT " KIND_COLS ","
		    " (SELECT COUNT(*) FROM due_task t WHERE t.kind = k.kind"
		    "  AND t.state = 'CLAIMED' AND t.lease_until >= %lld),"
		    " CASE WHEN rate_n IS NULL THEN 0 ELSE (SELECT COUNT(*)"
		    "  FROM due_rate r WHERE r.kind = k.kind"
		    "  AND r.at > %lld - k.rate_us) END,"
		    " (SELECT COUNT(*) FROM due_task t WHERE t.kind = k.kind"
		    "  AND t.state = 'SCHEDULED' AND t.due_at <= %lld),",
		    (long long)now, (long long)now, (long long)now);
	if (group) {
		due__my_add(&b, " (SELECT COUNT(*) FROM due_task t"
				" WHERE t.kind = k.kind AND t.grp = ");
		due__my_str(&b, group);
		due__my_add(&b,
			    " AND t.state = 'CLAIMED'"
			    " AND t.lease_until >= %lld)",
			    (long long)now);
	} else {
		due__my_add(&b, " 0");
	}
	due__my_add(&b, " FROM due_kind k");
	if (kind) {
		due__my_add(&b, " WHERE kind = ");
		due__my_str(&b, kind);
	}
	due__my_add(&b, " ORDER BY kind");
	rc = due__my_exec(s, &b, "read kind settings", &r);
	due__my_sql_free(&b);
	if (rc < 0)
		return rc;
	due__my_rows(&rows, &cur, r);
	rc = due__flow_kinds_of(out, &rows);
	mysql_free_result(r);
	return rc;
}

static int mys_kind_get(due_store *s, due_kind_info **out, const char *kind,
			const char *group)
{
	due_kind_info_list *l;
	int rc;

	*out = NULL;
	if ((rc = kinds_read(s, kind, group, &l)) < 0)
		return rc;
	return due__kind_info_take_one(out, l, kind);
}

static int mys_kind_list(due_store *s, due_kind_info_list **out)
{
	return kinds_read(s, NULL, NULL, out);
}

/* Forget the kind's settings and its rate log. */
static int mys_kind_remove(due_store *s, const char *kind)
{
	uint64_t n = 0;
	int rc;
	SQL(b, s);

	if ((rc = due__my_ok(s)) < 0)
		return rc;
	due__my_add(&b, "DELETE FROM due_rate WHERE kind = ");
	due__my_str(&b, kind);
	due__my_add(&b, "; DELETE FROM due_kind WHERE kind = ");
	due__my_str(&b, kind);
	if ((rc = exec(s, &b, "remove kind settings", &n)) < 0)
		return rc;
	if (!n)
		return due__store_no_kind(kind);
	wake(s);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Notifications: the binary log, or a wake-up counter polled          */
/* ------------------------------------------------------------------ */

/* The due_wake counter (0 when its row is gone: a restarted server). */
static int wake_read(due_store *s, int64_t *n)
{
	SQL(b, s);
	due__my_add(&b, "SELECT n FROM due_wake WHERE id = 1");
	return ints(s, &b, "read wake-ups", n, 1);
}

/*
** MySQL has no LISTEN.  Everything that makes a task due (a submit,
** retry, requeue, a reclaim that rescheduled, a failed try's retry after
** its backoff, a schedule's task, a kind resumed or removed) bumps the
** one-row due_wake counter after its commit; due_notify() bumps it for a
** caller's own transaction.  A listener learns of a bump in one of three
** ways (issue 39), chosen at listen time and said in one log line:
**
**  - the binary log, when the server keeps one and the user may read it:
**    a reader thread (mysql_wake.c) follows it as a replica does and
**    writes an eventfd at each change of due_wake, within a millisecond
**    or so of the bump's commit.  No counter read then.
**  - else the doorbell: a thread (mysql_wake.c) sleeps in a query that
**    the bump KILLs (wake(), ring()) and writes the same eventfd.  No
**    counter read here either.
**  - else (or ?wake=poll, or Galera, or while a lost link is down) a poll
**    of the counter, paced by a timerfd: one primary-key read, bounded
**    like every statement (the timerfd only paces the polls, it bounds no
**    wait), that reports a wake-up when the counter changed.  The pace
**    adapts: once a second while nothing changes, so an idle worker makes
**    at most one query a second; every WAKE_FAST_MS for WAKE_FAST_FOR_MS
**    after a change was seen, so while tasks flow from another process
**    each is seen within about WAKE_FAST_MS.  A task submitted into an
**    idle store is still seen within about a second.
**
** *fd is an epoll of both (the eventfd stays quiet when polling).  A task
** this process made due (a submit, a parent's end releasing a child) is
** seen at once either way: wake() fires this process's timerfds
** (due__my_local_poke).  docs/internals/discovery.md.
*/
/* The fast pace: 4 ticks a second at most.  A consumer may take more
   than 5 wake-ups without a note in a second for a dead session (the
   HTTP claims watcher, src/http/claims.c EMPTY_MAX): 25 ms (measured:
   a flow's p50 17 ms) made it drop and reopen its handle. */
#define WAKE_FAST_MS 250
#define WAKE_FAST_FOR_MS 3000

/* Pace s->timer_fd: every WAKE_FAST_MS when fast, else every second. */
static void wake_pace(due_store *s, bool fast)
{
	struct itimerspec slow = {{1, 0}, {1, 0}};
	struct itimerspec quick = {{0, WAKE_FAST_MS * 1000000L},
				   {0, WAKE_FAST_MS * 1000000L}};

	if (fast == s->wake_fast)
		return;
	s->wake_fast = fast;
	(void)timerfd_settime(s->timer_fd, 0, fast ? &quick : &slow, NULL);
}

/*
** The binlog reader, else the doorbell (mysql_wake.c), unless ?wake=poll
** or Galera: its eventfd joins the timerfd in listen_fd.  One line says
** which is in use, and why not the better ones.  No doorbell on Galera:
** due_wake is not replicated there, and a KILL reaches one node only.
*/
static void wake_binlog(due_store *s)
{
	char why[512], why2[512];
	unsigned secs = (unsigned)((s->timeout_us + 999999) / 1000000);

	if (s->cfg->wake_poll) {
		due__log("info", "mysql store", s->label,
			 "wake-ups: polling due_wake (wake=poll)");
		return;
	}
	/* a node's log holds no other node's due_wake: MEMORY tables are
	   not replicated by Galera (mysql.md, "Galera") */
	if (s->galera) {
		due__log("info", "mysql store", s->label,
			 "wake-ups: polling due_wake (Galera)");
		return;
	}
	if (due__my_wake_start(&s->wake, s->cfg, s->node, s->label,
			       secs ? secs : 1, s->wake_fd, why,
			       sizeof(why)) == 0) {
		due__log("info", "mysql store", s->label, "wake-ups: binlog");
		return;
	}
	why2[0] = '\0';
	if (due__my_bell_start(&s->wake, due__my_local_gen, s->cfg, s->node,
			       s->label, secs ? secs : 1, s->wake_fd, why2,
			       sizeof(why2)) == 0)
		due__log("info", "mysql store", s->label,
			 "wake-ups: doorbell (binlog: %s)", why);
	else
		due__log(
		    "info", "mysql store", s->label,
		    "wake-ups: polling due_wake (binlog: %s; doorbell: %s)",
		    why, why2);
}

/* s->listen_fd: an epoll of the timerfd and the reader's eventfd. */
static int listen_fds(due_store *s)
{
	struct epoll_event ev = {.events = EPOLLIN};

	s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	s->listen_fd = epoll_create1(EPOLL_CLOEXEC);
	if (s->wake_fd < 0 || s->listen_fd < 0 ||
	    epoll_ctl(s->listen_fd, EPOLL_CTL_ADD, s->timer_fd, &ev) < 0 ||
	    epoll_ctl(s->listen_fd, EPOLL_CTL_ADD, s->wake_fd, &ev) < 0)
		return due__error_set(DUE_ESTORE, "mysql store: listen: %s",
				      strerror(errno));
	return 0;
}

static int mys_listen(due_store *s, int *fd)
{
	/* the first tick at once: the worker checks delivery at start */
	struct itimerspec every = {{1, 0}, {0, 1000000}};
	int rc;

	if (s->listen_fd < 0) {
		if ((rc = due__my_ok(s)) < 0 ||
		    (rc = wake_read(s, &s->wake_seen)) < 0)
			return rc;
		if (s->timer_fd < 0)
			s->timer_fd = timerfd_create(
			    CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (s->timer_fd < 0 ||
		    timerfd_settime(s->timer_fd, 0, &every, NULL) < 0)
			return due__error_set(DUE_ESTORE,
					      "mysql store: timerfd: %s",
					      strerror(errno));
		s->wake_fast = false;
		s->wake_gen = due__my_local_gen();
		if ((rc = listen_fds(s)) < 0)
			return rc;
		due__my_local_add(s->timer_fd);
		wake_binlog(s);
	}
	*fd = s->listen_fd;
	return 0;
}

/* A tick of the poll: read the counter (unless the binlog is live). */
static void wake_tick(due_store *s, int *count)
{
	int64_t n, now;
	uint64_t gen;
	bool ours;

	if (due__my_wake_live(s->wake))
		return; /* the binlog tells: no read */
	if (s->in_tx || due__my_ok(s) < 0 || wake_read(s, &n) < 0) {
		due__error_clear(); /* shows at the next call that needs it */
		return;
	}
	/* a change this process wrote since the last read was (likely) its
	   own, poked at once anyway: no fast pace for it (a worker's start-up
	   probe would keep an idle fleet polling fast) */
	gen = due__my_local_gen();
	ours = gen != s->wake_gen;
	s->wake_gen = gen;
	now = due__mono_us();
	if (n != s->wake_seen) {
		*count = 1;
		if (!ours)
			s->wake_fast_until = now + WAKE_FAST_FOR_MS * 1000;
	}
	s->wake_seen = n;
	/* re-armed on every change: a local poke (our own bump, so a
	   change) set the timer back to its 1 s period */
	if (*count)
		s->wake_fast = false;
	wake_pace(s, now < s->wake_fast_until);
}

static int mys_listen_drain(due_store *s, int *count)
{
	uint64_t v;

	*count = 0;
	if (s->wake_fd >= 0 &&
	    read(s->wake_fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		*count = 1; /* the binlog reader saw due_wake change */
	if (s->timer_fd >= 0 &&
	    read(s->timer_fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
		wake_tick(s, count);
	return 0;
}

static int mys_notify(due_store *s)
{
	int rc = due__my_ok(s);

	if (rc == 0)
		wake(s);
	return rc;
}

/*
** Finished tasks (due_wait): none here.  MySQL has no NOTIFY, and a
** due_wake-style counter bumped by every completion would be one more
** statement on the drain's hot path, for a wake-up that reaches a waiter
** no sooner than its own read where the counter is polled (the binary
** log would carry it at once, but only where log_bin and the grants
** allow); a waiter reads the task itself with a backoff (50 ms to 1 s),
** a primary-key read, which costs the drain nothing.
*/
static int mys_listen_done(due_store *s, int *fd)
{
	(void)s;
	if (!fd)
		return 0;
	*fd = -1;
	return due__error_set(DUE_EUNSUPPORTED,
			      "mysql store: no notifications of finished "
			      "tasks: they are polled for");
}

/* ------------------------------------------------------------------ */
/* Retention's lease, size                                             */
/* ------------------------------------------------------------------ */

/*
** One upsert decides on the server's clock: a free name is inserted, an
** expired or our own lease is taken or renewed, another's running lease
** is left as it was (nothing written).  The owner is set first and the
** until follows it, with conditions that read the same whether the
** server assigns in order (the default) or simultaneously
** (SIMULTANEOUS_ASSIGNMENT).  The same round trip reads back whether the
** row now says ours until the instant this call set (@due_now + ttl).
*/
static int mys_lock_take(due_store *s, bool *held, const char *name,
			 const char *owner, int64_t ttl_us)
{
	int64_t v;
	int rc;
	SQL(b, s);

	*held = false;
	if ((rc = due__my_ok(s)) < 0)
		return rc;
	due__my_add(&b, "SET @due_now = " NOW "; INSERT INTO due_lock (name,"
			" owner, until_us) VALUES (");
	due__my_str(&b, name);
	due__my_add(&b, ", ");
	due__my_str(&b, owner);
	due__my_add(
	    &b,
	    ", @due_now + %lld) ON DUPLICATE KEY UPDATE"
	    " owner = IF(owner = VALUES(owner) OR until_us < @due_now,"
	    " VALUES(owner), owner),"
	    " until_us = IF(owner = VALUES(owner) OR until_us < @due_now,"
	    " VALUES(until_us), until_us);"
	    " SELECT COUNT(*) FROM due_lock WHERE name = ",
	    (long long)ttl_us);
	due__my_str(&b, name);
	due__my_add(&b, " AND owner = ");
	due__my_str(&b, owner);
	due__my_add(&b, " AND until_us = @due_now + %lld", (long long)ttl_us);
	rc = ints(s, &b, "take lock", &v, 1); /* a lost race: the next try */
	if (rc == 0)
		*held = v == 1;
	return rc;
}

/*
** The due tables' data_length + index_length from information_schema:
** InnoDB's own estimate (pages in use, from its statistics), not an
** exact byte count, and it lags until the statistics are recalculated.
*/
static int mys_bytes(due_store *s, int64_t *out)
{
	int rc;
	SQL(b, s);

	*out = 0;
	if ((rc = due__my_ok(s)) < 0)
		return rc;
	due__my_add(&b, "SELECT COALESCE(SUM(data_length + index_length), 0)"
			" FROM information_schema.TABLES WHERE table_schema"
			" = DATABASE() AND table_name LIKE 'due!_%%'"
			" ESCAPE '!'");
	return ints(s, &b, "store size", out, 1);
}

static const char *const schemes[] = {"mysql", "mariadb", NULL};

/* Every method is mys_<method> (store.h lists them; mysql_ is the library's
 * prefix). */
#define OP(m) .m = mys_##m,
const due_store_ops due__store_mysql = {
    .version = DUE_STORE_OPS_VERSION,
    .name = "mysql",
    .schemes = schemes,
    .caps = DUE_STORE_CAP_NOTIFY | DUE_STORE_CAP_TX_SUBMIT |
	    DUE_STORE_CAP_ADMIN | DUE_STORE_CAP_SQL | DUE_STORE_CAP_ROW_LOCKS |
	    DUE_STORE_CAP_STALL | DUE_STORE_CAP_PLAN,
    .admin = &due__store_mysql_admin,
    DUE_STORE_METHODS(OP) DUE_STORE_NOTIFY_METHODS(OP)
	DUE_STORE_TX_SUBMIT_METHODS(OP)};
#undef OP
