/*
** floor.c - the bare-SQL floor: what the store itself allows for due's hot
** path, with no framework in between.
**
**   floor URL [--workload enqueue|drain|all|fill|drop] [--n N]
**             [--inflight K] [--commits 1|2|both] [--batch B] [--quiet]
**
** URL is `sqlite:PATH[?sync=normal|full]`, `postgres://...`, or (when built
** with them) `redis://[:PASS@]HOST:PORT/DB[?prefix=NAME]` (raw Lua over
** hiredis, keys under {floor:NAME}, see the Redis section) or
** `mysql://USER[:PASS]@HOST:PORT/DB[?socket=PATH]` (bare SQL over
** libmariadb, see the MariaDB section).  Everything
** happens in a scratch table of its own, floor_task (dropped and created
** again by each workload), shaped like due_task: the same columns due's
** claim and complete touch, the same partial indexes (due rows, leased
** rows), the same durability (SQLite: WAL, synchronous FULL unless
** ?sync=normal; PostgreSQL: whatever the server says, fsync on and the
** default synchronous_commit in bench/run's cluster).
**
** Workloads (one JSON object per line on stdout, like `due bench --json`,
** with cpu_us_per_task: this process's user + system CPU over the timed
** phase, per task, as `due bench` reports it; on SQLite also
** statements_per_task, vm_steps_per_task and rows_written_per_task
** (sqlite3_stmt_status RUN and VM_STEP summed over the connection's
** statements, sqlite3_total_changes64), `due bench`'s store work; on
** PostgreSQL wal_bytes_per_task, the server's WAL insert position moved
** over the phase):
**   enqueue  n/4 single-row INSERTs, each its own commit; then n rows in
**            multi-row INSERTs of --batch rows, one commit per batch
**   drain    n due rows, then K workers in flight modelled as batch K:
**            loop { claim K rows in ONE statement; complete them in ONE
**            statement }.  "2-commit": claim and complete each commit on
**            their own (what a worker does); "1-commit": completing batch
**            i and claiming batch i+1 share one transaction (the cheapest
**            the store can do).  On PostgreSQL every statement commits on
**            its own (no BEGIN/COMMIT round trips) and the 1-commit step is
**            ONE statement; on SQLite it is BEGIN, complete, claim, COMMIT.
**            tasks/s from first claim to last commit; afterwards every row
**            must be DONE with attempt 1.
**   fill     create floor_task with n due rows and leave it (for pgbench)
**   drop     drop floor_task
** Statements are prepared once and take bound parameters.  Progress (a line
** a second) goes to stderr unless --quiet.
**
** glibc's heap is told never to give memory back (tune_process): the SQLite
** claim's subquery and RETURNING build a temporary b-tree per statement,
** ~140 KiB that glibc returned to the kernel and faulted in again on every
** claim, 177,000 page faults in a 20,000-task drain.  How often that
** happened depended on the heap's layout, not on the SQL: a drain alone in
** its process took 15.7 us of CPU a task, the same drain after another one
** in the same process 6.2 (SQLite sync=normal, K=4).  `due bench` does
** not build those b-trees (2,000 faults a drain) and is not affected.
*/
#include <getopt.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <sqlite3.h>
#ifdef DUE_WITH_PG
#include <libpq-fe.h>
#endif
#ifdef DUE_WITH_REDIS
#include <hiredis/hiredis.h>
#endif
#ifdef DUE_WITH_MYSQL
#include <mysql.h>
#endif

#define MAX_K 1024
#define MAX_BATCH 10000

static const char payload[] =
    "{\"order\":123456,\"customer\":\"c-42\","
    "\"note\":\"close this unpaid order in 30m\"}....";
#define PAYLOAD_LEN ((int)sizeof(payload) - 1)

static bool quiet;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t wall_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A growing string for statements built at run time. */
typedef struct sbuf {
	char *s;
	size_t len, cap;
} sbuf;

static void die(const char *fmt, ...);

static void sb_add(sbuf *b, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(b->s ? b->s + b->len : NULL,
				  b->s ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			die("out of memory");
		if (b->s && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		b->cap = (b->cap + (size_t)n + 1) * 2;
		if (!(b->s = realloc(b->s, b->cap)))
			die("out of memory");
	}
}

static void die(const char *fmt, ...)
{
	va_list ap;
	fputs("floor: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* ------------------------------------------------------------------ */
/* The backend interface: a handful of operations, nothing more        */
/* ------------------------------------------------------------------ */

/* Store work counters; has_* says which a backend fills. */
struct work {
	bool has_sql, has_wal, has_exec;
	uint64_t statements, vm_steps, rows_written; /* SQLite */
	uint64_t wal_bytes;			     /* PostgreSQL */
	double exec_us; /* PostgreSQL: pg_stat_statements' execution time */
};

typedef struct backend {
	const char *name;
	void (*create)(void); /* drop + create floor_task */
	void (*drop)(void);
	void (*insert_one)(void);   /* autocommit */
	void (*insert_many)(int k); /* one statement, one commit */
	void (*begin)(void);	    /* NULL: statements autocommit */
	void (*commit)(void);
	int (*claim)(int k, int64_t *ids, int *att);
	void (*complete)(int n, const int64_t *ids, const int *att);
	/* complete ids/att and claim the next k into them, one commit; NULL:
	   begin, complete, claim, commit */
	int (*complete_claim)(int n, int64_t *ids, int *att, int k);
	void (*check)(long *done, long *dups);
	void (*analyze)(void); /* after a fill; may be NULL */
	/*
	** The store work so far into w (work_of), or NULL: SQLite counts
	** statements run, VM steps and rows written; PostgreSQL the WAL
	** written.  Read at a phase's start and at emit().
	*/
	void (*work)(struct work *w);
} backend;

/* ------------------------------------------------------------------ */
/* SQLite                                                              */
/* ------------------------------------------------------------------ */

static sqlite3 *sq;
static sqlite3_stmt *sq_ins1, *sq_begin, *sq_commit, *sq_claim;
static sqlite3_stmt *sq_insk; /* multi-row insert prepared for sq_insk_n rows */
static int sq_insk_n;
static sqlite3_stmt *sq_done; /* complete prepared for sq_done_n slots */
static int sq_done_n;

/* Runs and VM steps of statements finalized so far (sq_work). */
static uint64_t sq_gone_runs, sq_gone_steps;

/* Keep a statement's counts, then finalize it. */
static void sq_finalize(sqlite3_stmt *st)
{
	if (st) {
		sq_gone_runs +=
		    (uint64_t)sqlite3_stmt_status(st, SQLITE_STMTSTATUS_RUN, 0);
		sq_gone_steps += (uint64_t)sqlite3_stmt_status(
		    st, SQLITE_STMTSTATUS_VM_STEP, 0);
	}
	sqlite3_finalize(st);
}

/*
** Statements run and VM steps (sqlite3_stmt_status RUN and VM_STEP of
** every statement of the connection, the finalized ones' kept), rows
** written (sqlite3_total_changes64): the figures `due bench` reports from
** due_store_work_read.  The DDL run through sqlite3_exec is not counted.
*/
static void sq_work(struct work *w)
{
	w->has_sql = true;
	w->statements = sq_gone_runs;
	w->vm_steps = sq_gone_steps;
	for (sqlite3_stmt *st = sqlite3_next_stmt(sq, NULL); st;
	     st = sqlite3_next_stmt(sq, st)) {
		w->statements +=
		    (uint64_t)sqlite3_stmt_status(st, SQLITE_STMTSTATUS_RUN, 0);
		w->vm_steps += (uint64_t)sqlite3_stmt_status(
		    st, SQLITE_STMTSTATUS_VM_STEP, 0);
	}
	w->rows_written = (uint64_t)sqlite3_total_changes64(sq);
}

static void sq_die(const char *what)
{
	die("sqlite: %s: %s", what, sqlite3_errmsg(sq));
}

static sqlite3_stmt *sq_prep(const char *sql)
{
	sqlite3_stmt *st;
	if (sqlite3_prepare_v3(sq, sql, -1, SQLITE_PREPARE_PERSISTENT, &st,
			       NULL) != SQLITE_OK)
		die("sqlite: prepare %.60s...: %s", sql, sqlite3_errmsg(sq));
	return st;
}

static void sq_run(sqlite3_stmt *st, const char *what)
{
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		;
	if (rc != SQLITE_DONE)
		sq_die(what);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
}

static void sq_exec(const char *sql)
{
	char *err = NULL;
	if (sqlite3_exec(sq, sql, NULL, NULL, &err) != SQLITE_OK)
		die("sqlite: %s: %s", sql, err ? err : "?");
}

static void sq_finalize_all(void)
{
	sqlite3_stmt *all[] = {sq_ins1,	 sq_begin, sq_commit,
			       sq_claim, sq_insk,  sq_done};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		sq_finalize(all[i]);
	sq_ins1 = sq_begin = sq_commit = sq_claim = sq_insk = sq_done = NULL;
	sq_insk_n = sq_done_n = 0;
}

static void sq_open(const char *url)
{
	const char *p = url + 7;
	char path[4096];
	bool normal = false;

	if (strncmp(p, "//", 2) == 0)
		p += 2; /* sqlite:///abs/path */
	size_t len = strcspn(p, "?");
	if (len >= sizeof(path))
		die("path too long");
	memcpy(path, p, len);
	path[len] = '\0';
	if (p[len] == '?')
		normal = strstr(p + len, "sync=normal") != NULL;
	if (sqlite3_open_v2(path, &sq,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				SQLITE_OPEN_NOMUTEX,
			    NULL) != SQLITE_OK)
		sq_die("open");
	sqlite3_busy_timeout(sq, 30000);
	sq_exec("PRAGMA journal_mode = WAL");
	sq_exec(normal ? "PRAGMA synchronous = NORMAL"
		       : "PRAGMA synchronous = FULL");
}

static void sq_drop(void)
{
	sq_finalize_all();
	sq_exec("DROP TABLE IF EXISTS floor_task");
}

static void sq_create(void)
{
	sq_drop();
	sq_exec("CREATE TABLE floor_task ("
		"  id INTEGER PRIMARY KEY AUTOINCREMENT,"
		"  kind TEXT NOT NULL,"
		"  payload BLOB NOT NULL,"
		"  state TEXT NOT NULL,"
		"  due_at INTEGER NOT NULL,"
		"  attempt INTEGER NOT NULL DEFAULT 0,"
		"  lease_owner TEXT,"
		"  lease_until INTEGER,"
		"  result BLOB,"
		"  updated_at INTEGER NOT NULL);"
		"CREATE INDEX floor_task_due ON floor_task (due_at)"
		"  WHERE state = 'SCHEDULED';"
		"CREATE INDEX floor_task_lease ON floor_task (lease_until)"
		"  WHERE state = 'CLAIMED';");
	sq_ins1 =
	    sq_prep("INSERT INTO floor_task (kind, payload, state, due_at,"
		    " updated_at) VALUES ('bench', ?1, 'SCHEDULED', ?2, ?2)");
	sq_begin = sq_prep("BEGIN IMMEDIATE");
	sq_commit = sq_prep("COMMIT");
	sq_claim = sq_prep(
	    "UPDATE floor_task SET state = 'CLAIMED', attempt = attempt + 1,"
	    " lease_owner = ?1, lease_until = ?2 + ?3, updated_at = ?2"
	    " WHERE id IN (SELECT id FROM floor_task WHERE state = 'SCHEDULED'"
	    " AND due_at <= ?2 ORDER BY due_at LIMIT ?4)"
	    " AND state = 'SCHEDULED' RETURNING id, attempt");
}

static void sq_insert_one(void)
{
	sqlite3_bind_blob(sq_ins1, 1, payload, PAYLOAD_LEN, SQLITE_STATIC);
	sqlite3_bind_int64(sq_ins1, 2, wall_us());
	sq_run(sq_ins1, "insert");
}

static void sq_insert_many(int k)
{
	if (sq_insk_n != k) {
		/* VALUES ('bench', ?1, 'SCHEDULED', ?2, ?2), ... one payload
		 * per row */
		sbuf b = {0};
		sb_add(&b,
		       "INSERT INTO floor_task (kind, payload, state, due_at,"
		       " updated_at) VALUES ");
		for (int i = 0; i < k; i++)
			sb_add(&b, "%s('bench', ?%d, 'SCHEDULED', ?1, ?1)",
			       i ? "," : "", i + 2);
		sq_finalize(sq_insk);
		sq_insk = sq_prep(b.s);
		sq_insk_n = k;
		free(b.s);
	}
	sq_run(sq_begin, "begin");
	sqlite3_bind_int64(sq_insk, 1, wall_us());
	for (int i = 0; i < k; i++)
		sqlite3_bind_blob(sq_insk, i + 2, payload, PAYLOAD_LEN,
				  SQLITE_STATIC);
	sq_run(sq_insk, "insert batch");
	sq_run(sq_commit, "commit");
}

static void sq_begin_tx(void) { sq_run(sq_begin, "begin"); }

static void sq_commit_tx(void) { sq_run(sq_commit, "commit"); }

static int sq_claim_k(int k, int64_t *ids, int *att)
{
	int n = 0, rc;
	int64_t now = wall_us();

	sqlite3_bind_text(sq_claim, 1, "floor", -1, SQLITE_STATIC);
	sqlite3_bind_int64(sq_claim, 2, now);
	sqlite3_bind_int64(sq_claim, 3, 30000000);
	sqlite3_bind_int(sq_claim, 4, k);
	while ((rc = sqlite3_step(sq_claim)) == SQLITE_ROW && n < k) {
		ids[n] = sqlite3_column_int64(sq_claim, 0);
		att[n++] = sqlite3_column_int(sq_claim, 1);
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		sq_die("claim");
	sqlite3_reset(sq_claim);
	sqlite3_clear_bindings(sq_claim);
	return n;
}

/*
** Complete up to sq_done_n tasks in one statement: the id list is a rowid
** lookup, the attempt of each row is checked against the one it was
** claimed with (the fencing token).  Unused slots bind id -1.
*/
static void sq_complete(int n, const int64_t *ids, const int *att)
{
	if (sq_done_n < n) {
		sbuf b = {0};
		sb_add(
		    &b,
		    "UPDATE floor_task SET state = 'DONE', result = ?1,"
		    " lease_owner = NULL, lease_until = NULL, updated_at = ?2"
		    " WHERE state = 'CLAIMED' AND id IN (");
		for (int i = 0; i < n; i++)
			sb_add(&b, "%s?%d", i ? "," : "", 3 + 2 * i);
		sb_add(&b, ") AND attempt = CASE id");
		for (int i = 0; i < n; i++)
			sb_add(&b, " WHEN ?%d THEN ?%d", 3 + 2 * i, 4 + 2 * i);
		sb_add(&b, " END");
		sq_finalize(sq_done);
		sq_done = sq_prep(b.s);
		sq_done_n = n;
		free(b.s);
	}
	sqlite3_bind_blob(sq_done, 1, "ok", 2, SQLITE_STATIC);
	sqlite3_bind_int64(sq_done, 2, wall_us());
	for (int i = 0; i < sq_done_n; i++) {
		sqlite3_bind_int64(sq_done, 3 + 2 * i, i < n ? ids[i] : -1);
		sqlite3_bind_int(sq_done, 4 + 2 * i, i < n ? att[i] : -1);
	}
	sq_run(sq_done, "complete");
	if (sqlite3_changes(sq) != n)
		die("sqlite: complete changed %d rows, expected %d",
		    sqlite3_changes(sq), n);
}

static void sq_check(long *done, long *dups)
{
	sqlite3_stmt *st =
	    sq_prep("SELECT count(*) FILTER (WHERE state = 'DONE'),"
		    " coalesce(sum(attempt - 1) FILTER (WHERE attempt > 1), 0) "
		    "FROM floor_task");
	if (sqlite3_step(st) != SQLITE_ROW)
		sq_die("check");
	*done = (long)sqlite3_column_int64(st, 0);
	*dups = (long)sqlite3_column_int64(st, 1);
	sqlite3_finalize(st);
}

static const backend sqlite_backend = {
    "sqlite",	 sq_create,    sq_drop,	   sq_insert_one, sq_insert_many,
    sq_begin_tx, sq_commit_tx, sq_claim_k, sq_complete,	  NULL,
    sq_check,	 NULL,	       sq_work,
};

/* ------------------------------------------------------------------ */
/* PostgreSQL                                                          */
/* ------------------------------------------------------------------ */

#ifdef DUE_WITH_PG
static PGconn *pg;
static int pg_insk_n;

static void pg_ok(PGresult *r, const char *what)
{
	ExecStatusType s = PQresultStatus(r);
	if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
		die("postgres: %.60s: %s", what, PQerrorMessage(pg));
}

static void pg_exec(const char *sql)
{
	PGresult *r = PQexec(pg, sql);
	pg_ok(r, sql);
	PQclear(r);
}

static void pg_prepare(const char *name, const char *sql)
{
	PGresult *r = PQprepare(pg, name, sql, 0, NULL);
	pg_ok(r, name);
	PQclear(r);
}

static void quiet_notice(void *arg, const char *msg)
{
	(void)arg;
	(void)msg; /* "table does not exist, skipping" */
}

static void pg_open(const char *url)
{
	pg = PQconnectdb(url);
	if (PQstatus(pg) != CONNECTION_OK)
		die("postgres: %s", PQerrorMessage(pg));
	PQsetNoticeProcessor(pg, quiet_notice, NULL);
}

static void pg_deallocate(void)
{
	pg_exec("DEALLOCATE ALL");
	pg_insk_n = 0;
}

static void pg_drop(void)
{
	pg_deallocate();
	pg_exec("DROP TABLE IF EXISTS floor_task");
}

/*
** Completion fenced by the attempt.  "lease_owner IS NOT NULL" stands for
** state = 'CLAIMED' (they go together) so that the planner cannot AND in a
** bitmap scan of the partial lease index, whose dead entries a bitmap scan
** never prunes; for the same reason the claim does not re-test state: its
** picker locked the rows and re-checked them (src/store/pg.c does both).
*/
#define FLOOR_PG_DONE                                                          \
	"UPDATE floor_task t SET state = 'DONE', result = $3,"                 \
	" lease_owner = NULL, lease_until = NULL, updated_at = now()"          \
	" FROM unnest($1::int8[], $2::int4[]) AS u(id, attempt)"               \
	" WHERE t.id = ANY ($1::int8[]) AND t.id = u.id"                       \
	" AND t.attempt = u.attempt AND t.lease_owner IS NOT NULL"

static void pg_create(void)
{
	pg_drop();
	pg_exec("CREATE TABLE floor_task ("
		"  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
		"  kind text NOT NULL,"
		"  payload bytea NOT NULL,"
		"  state text NOT NULL,"
		"  due_at timestamptz NOT NULL,"
		"  attempt integer NOT NULL DEFAULT 0,"
		"  lease_owner text,"
		"  lease_until timestamptz,"
		"  result bytea,"
		"  updated_at timestamptz NOT NULL);"
		"CREATE INDEX floor_task_due ON floor_task (due_at)"
		"  WHERE state = 'SCHEDULED';"
		"CREATE INDEX floor_task_lease ON floor_task (lease_until)"
		"  WHERE state = 'CLAIMED'");
	pg_prepare(
	    "ins1",
	    "INSERT INTO floor_task (kind, payload, state, due_at,"
	    " updated_at) VALUES ('bench', $1, 'SCHEDULED', now(), now())");
	pg_prepare(
	    "claim",
	    "UPDATE floor_task SET state = 'CLAIMED', attempt = attempt + 1,"
	    " lease_owner = $1, lease_until = clock_timestamp() + $2::int8"
	    " * interval '1 microsecond', updated_at = now()"
	    " WHERE id = ANY (ARRAY (SELECT id FROM floor_task"
	    " WHERE state = 'SCHEDULED' AND due_at <= now() ORDER BY due_at"
	    " LIMIT $3 FOR UPDATE SKIP LOCKED))"
	    " RETURNING id, attempt");
	pg_prepare("done", FLOOR_PG_DONE);
	pg_prepare(
	    "done_claim",
	    "WITH d AS (" FLOOR_PG_DONE " RETURNING t.id),"
	    " c AS (UPDATE floor_task SET state = 'CLAIMED',"
	    " attempt = attempt + 1, lease_owner = $4,"
	    " lease_until = clock_timestamp() + $5::int8"
	    " * interval '1 microsecond', updated_at = now()"
	    " WHERE id = ANY (ARRAY (SELECT id FROM floor_task"
	    " WHERE state = 'SCHEDULED' AND due_at <= now() ORDER BY due_at"
	    " LIMIT $6 FOR UPDATE SKIP LOCKED)) RETURNING id, attempt)"
	    " SELECT c.id, c.attempt, (SELECT count(*) FROM d)"
	    " FROM (SELECT 1) one LEFT JOIN c ON true");
}

static void pg_insert_one(void)
{
	const char *v[1] = {payload};
	int len[1] = {PAYLOAD_LEN}, fmt[1] = {1};
	PGresult *r = PQexecPrepared(pg, "ins1", 1, v, len, fmt, 0);
	pg_ok(r, "insert");
	PQclear(r);
}

static void pg_insert_many(int k)
{
	static const char *v[MAX_BATCH];
	static int len[MAX_BATCH], fmt[MAX_BATCH];

	if (pg_insk_n != k) {
		sbuf b = {0};
		sb_add(&b,
		       "INSERT INTO floor_task (kind, payload, state, due_at,"
		       " updated_at) VALUES ");
		for (int i = 0; i < k; i++)
			sb_add(&b,
			       "%s('bench', $%d::bytea, 'SCHEDULED', now(), "
			       "now())",
			       i ? "," : "", i + 1);
		if (pg_insk_n) {
			PGresult *r = PQexec(pg, "DEALLOCATE insk");
			PQclear(r);
		}
		pg_prepare("insk", b.s);
		pg_insk_n = k;
		free(b.s);
	}
	for (int i = 0; i < k; i++) {
		v[i] = payload;
		len[i] = PAYLOAD_LEN;
		fmt[i] = 1;
	}
	PGresult *r = PQexecPrepared(pg, "insk", k, v, len, fmt, 0);
	pg_ok(r, "insert batch");
	PQclear(r);
}

static int pg_claim_k(int k, int64_t *ids, int *att)
{
	char kbuf[16];
	const char *v[3] = {"floor", "30000000", kbuf};
	snprintf(kbuf, sizeof(kbuf), "%d", k);
	PGresult *r = PQexecPrepared(pg, "claim", 3, v, NULL, NULL, 0);
	pg_ok(r, "claim");
	int n = PQntuples(r);
	for (int i = 0; i < n && i < k; i++) {
		ids[i] = strtoll(PQgetvalue(r, i, 0), NULL, 10);
		att[i] = atoi(PQgetvalue(r, i, 1));
	}
	PQclear(r);
	return n < k ? n : k;
}

typedef struct pg_arrays {
	char ids[MAX_K * 22 + 4], att[MAX_K * 12 + 4];
} pg_arrays;

static void pg_arrays_put(pg_arrays *x, int n, const int64_t *ids,
			  const int *att)
{
	size_t oa = 0, ob = 0;
	x->ids[oa++] = '{';
	x->att[ob++] = '{';
	for (int i = 0; i < n; i++) {
		oa += (size_t)snprintf(x->ids + oa, sizeof(x->ids) - oa,
				       "%s%" PRId64, i ? "," : "", ids[i]);
		ob += (size_t)snprintf(x->att + ob, sizeof(x->att) - ob, "%s%d",
				       i ? "," : "", att[i]);
	}
	snprintf(x->ids + oa, sizeof(x->ids) - oa, "}");
	snprintf(x->att + ob, sizeof(x->att) - ob, "}");
}

static void pg_complete(int n, const int64_t *ids, const int *att)
{
	pg_arrays x;
	pg_arrays_put(&x, n, ids, att);
	const char *v[3] = {x.ids, x.att, "ok"};
	int len[3] = {0, 0, 2}, fmt[3] = {0, 0, 1};
	PGresult *r = PQexecPrepared(pg, "done", 3, v, len, fmt, 0);
	pg_ok(r, "complete");
	if (atoi(PQcmdTuples(r)) != n)
		die("postgres: complete changed %s rows, expected %d",
		    PQcmdTuples(r), n);
	PQclear(r);
}

/* One statement, so one round trip and one commit: the completions in a
   data-modifying CTE (always run to the end), the claim as the main update. */
static int pg_complete_claim(int n, int64_t *ids, int *att, int k)
{
	pg_arrays x;
	char kbuf[16];
	pg_arrays_put(&x, n, ids, att);
	snprintf(kbuf, sizeof(kbuf), "%d", k);
	const char *v[6] = {x.ids, x.att, "ok", "floor", "30000000", kbuf};
	int len[6] = {0, 0, 2, 0, 0, 0}, fmt[6] = {0, 0, 1, 0, 0, 0};
	PGresult *r = PQexecPrepared(pg, "done_claim", 6, v, len, fmt, 0);
	pg_ok(r, "complete+claim");
	int got = PQntuples(r), done = atoi(PQgetvalue(r, 0, 2));
	if (done != n)
		die("postgres: complete changed %d rows, expected %d", done, n);
	if (PQgetisnull(r, 0, 0))
		got = 0;
	for (int i = 0; i < got && i < k; i++) {
		ids[i] = strtoll(PQgetvalue(r, i, 0), NULL, 10);
		att[i] = atoi(PQgetvalue(r, i, 1));
	}
	PQclear(r);
	return got < k ? got : k;
}

static void pg_check(long *done, long *dups)
{
	PGresult *r = PQexec(
	    pg, "SELECT count(*) FILTER (WHERE state = 'DONE'),"
		" coalesce(sum(attempt - 1) FILTER (WHERE attempt > 1), 0)"
		" FROM floor_task");
	pg_ok(r, "check");
	*done = atol(PQgetvalue(r, 0, 0));
	*dups = atol(PQgetvalue(r, 0, 1));
	PQclear(r);
}

/*
** Statistics for the planner.  Without them, on a table just filled, the
** planner ANDs a bitmap of the whole partial index of due rows with the
** claimed ids (every claim then reads all the due index: a cost that grows
** with the backlog); autovacuum would get there later.  The floor is the
** best the store can do, so it analyzes.
*/
static void pg_analyze(void) { pg_exec("ANALYZE floor_task"); }

/*
** The server's WAL insert position in bytes: its difference over a phase
** is the WAL written (by every session of the cluster: bench/run's is
** private).  Exact at once, unlike pg_stat_wal, which a session adds to
** when its statistics are flushed.
*/
static void pg_work(struct work *w)
{
	PGresult *r = PQexec(pg, "SELECT pg_wal_lsn_diff("
				 "pg_current_wal_insert_lsn(), '0/0')::bigint");
	pg_ok(r, "wal position");
	w->has_wal = true;
	w->wal_bytes = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	/*
	** The server's execution time of this database's statements, when
	** it preloads pg_stat_statements (bench/run's cluster does); these
	** readings' own statements left out, as `due bench` does.
	*/
	r = PQexec(pg, "SELECT coalesce(sum(total_exec_time), 0) * 1000"
		       " FROM pg_stat_statements WHERE dbid = (SELECT oid"
		       " FROM pg_database WHERE datname = current_database())"
		       " AND query NOT LIKE '%pg_stat_statements%' AND query"
		       " NOT LIKE '%pg_current_wal_insert_lsn%'");
	w->has_exec = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	if (w->has_exec)
		w->exec_us = strtod(PQgetvalue(r, 0, 0), NULL);
	PQclear(r);
}

static const backend pg_backend = {
    "postgres", pg_create,  pg_drop,	pg_insert_one, pg_insert_many,
    NULL,	NULL,	    pg_claim_k, pg_complete,   pg_complete_claim,
    pg_check,	pg_analyze, pg_work,
};
#endif

/* ------------------------------------------------------------------ */
/* Redis                                                               */
/* ------------------------------------------------------------------ */

#ifdef DUE_WITH_REDIS
/*
** The least a fenced queue must do on Redis, every transition one Lua
** script on Redis's clock (TIME), every key under one hash tag
** {floor:NAME}: a due zset (id scored by due time in µs), a lease zset
** (id scored by lease expiry) and a task hash (kind, payload, state,
** attempt, due_at, lease_owner, lease_until, result, updated_at).  Claim
** pops due ids in due order, attempt+1 and the lease in the same script;
** complete checks state and attempt (the fencing token) in the script.
** No history, no indexes per state, no idempotency keys, no PUBLISH.
** "One commit" here is one script: a round trip and one AOF write.
*/
static redisContext *rd;
static char rd_tag[160]; /* {floor:NAME} */
static char rd_sha[5][41];
enum { RD_ENQ, RD_CLAIM, RD_DONE, RD_DONE_CLAIM, RD_CHECK };

#define RD_LUA_NOW                                                             \
	"local t = redis.call('TIME')\n"                                       \
	"local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
/* claim: ARGV[1] tag, [2] owner, [3] lease µs, [4] k -> {id, attempt...} */
#define RD_LUA_CLAIM_BODY                                                      \
	"local ids = redis.call('ZRANGEBYSCORE', tag .. ':due', '-inf', now,"  \
	" 'LIMIT', 0, k)\n"                                                    \
	"local out = {}\n"                                                     \
	"for _, id in ipairs(ids) do\n"                                        \
	"  local tk = tag .. ':t:' .. id\n"                                    \
	"  redis.call('ZREM', tag .. ':due', id)\n"                            \
	"  local a = redis.call('HINCRBY', tk, 'attempt', 1)\n"                \
	"  redis.call('HSET', tk, 'state', 'CLAIMED', 'lease_owner', owner,"   \
	" 'lease_until', now + lease, 'updated_at', now)\n"                    \
	"  redis.call('ZADD', tag .. ':lease', now + lease, id)\n"             \
	"  out[#out + 1] = tonumber(id)\n"                                     \
	"  out[#out + 1] = a\n"                                                \
	"end\n"
/* complete: pairs id, attempt from ARGV[first] on -> count done */
#define RD_LUA_DONE_BODY                                                       \
	"local done = 0\n"                                                     \
	"for i = first, #ARGV, 2 do\n"                                         \
	"  local tk = tag .. ':t:' .. ARGV[i]\n"                               \
	"  local st = redis.call('HMGET', tk, 'state', 'attempt')\n"           \
	"  if st[1] == 'CLAIMED' and st[2] == ARGV[i + 1] then\n"              \
	"    redis.call('HSET', tk, 'state', 'DONE', 'result', 'ok',"          \
	" 'lease_owner', '', 'lease_until', 0, 'updated_at', now)\n"           \
	"    redis.call('ZREM', tag .. ':lease', ARGV[i])\n"                   \
	"    done = done + 1\n"                                                \
	"  end\n"                                                              \
	"end\n"

static const char *const rd_lua[5] = {
    /* enqueue: ARGV[1] tag, [2] payload, [3] count -> first id */
    RD_LUA_NOW "local tag, p = ARGV[1], ARGV[2]\n"
	       "local first\n"
	       "for i = 1, tonumber(ARGV[3]) do\n"
	       "  local id = redis.call('INCR', tag .. ':seq')\n"
	       "  first = first or id\n"
	       "  redis.call('HSET', tag .. ':t:' .. id, 'kind', 'bench',"
	       " 'payload', p, 'state', 'SCHEDULED', 'attempt', 0,"
	       " 'due_at', now, 'updated_at', now)\n"
	       "  redis.call('ZADD', tag .. ':due', now, id)\n"
	       "end\n"
	       "return first\n",
    RD_LUA_NOW
    "local tag, owner = ARGV[1], ARGV[2]\n"
    "local lease, k = tonumber(ARGV[3]), tonumber(ARGV[4])\n" RD_LUA_CLAIM_BODY
    "return out\n",
    RD_LUA_NOW "local tag, first = ARGV[1], 2\n" RD_LUA_DONE_BODY
	       "return done\n",
    /* complete + claim: ARGV[1] tag, [2] owner, [3] lease, [4] k, then
       pairs -> {done, id, attempt...} */
    RD_LUA_NOW "local tag, owner = ARGV[1], ARGV[2]\n"
	       "local lease, k, first = tonumber(ARGV[3]), tonumber(ARGV[4]), "
	       "5\n" RD_LUA_DONE_BODY RD_LUA_CLAIM_BODY
	       "table.insert(out, 1, done)\n"
	       "return out\n",
    /* check: ARGV[1] tag -> {done, duplicates} */
    "local tag = ARGV[1]\n"
    "local n = tonumber(redis.call('GET', tag .. ':seq') or '0')\n"
    "local done, dups = 0, 0\n"
    "for id = 1, n do\n"
    "  local st = redis.call('HMGET', tag .. ':t:' .. id, 'state', 'attempt')\n"
    "  if st[1] == 'DONE' then done = done + 1 end\n"
    "  local a = tonumber(st[2] or '0')\n"
    "  if a > 1 then dups = dups + a - 1 end\n"
    "end\n"
    "return {done, dups}\n",
};

static void rd_die(const char *what, redisReply *r)
{
	die("redis: %s: %s", what,
	    r && r->type == REDIS_REPLY_ERROR ? r->str
	    : rd->err			      ? rd->errstr
					      : "unexpected reply");
}

static redisReply *rd_cmd(const char *what, int argc, const char **argv,
			  const size_t *len)
{
	redisReply *r = redisCommandArgv(rd, argc, argv, len);
	if (!r || r->type == REDIS_REPLY_ERROR)
		rd_die(what, r);
	return r;
}

/* EVALSHA script with args (the tag first); the reply, checked. */
static redisReply *rd_eval(int script, int argc, const char **argv,
			   const size_t *len)
{
	const char *a[4 + 2 * MAX_K + 8];
	size_t l[4 + 2 * MAX_K + 8];
	a[0] = "EVALSHA";
	a[1] = rd_sha[script];
	a[2] = "0";
	a[3] = rd_tag;
	l[0] = 7;
	l[1] = 40;
	l[2] = 1;
	l[3] = strlen(rd_tag);
	for (int i = 0; i < argc; i++) {
		a[4 + i] = argv[i];
		l[4 + i] = len ? len[i] : strlen(argv[i]);
	}
	return rd_cmd("script", 4 + argc, a, l);
}

static void rd_open(const char *url)
{
	char host[256] = "127.0.0.1", pass[256] = "", name[128] = "bench";
	int port = 6379, db = 0;
	const char *p = url + strlen("redis://"), *q;

	if ((q = strchr(p, '@')) && q < p + strcspn(p, "/?")) {
		const char *c = memchr(p, ':', (size_t)(q - p));
		snprintf(pass, sizeof(pass), "%.*s", (int)(q - (c ? c + 1 : p)),
			 c ? c + 1 : p);
		p = q + 1;
	}
	size_t hl = strcspn(p, ":/?");
	if (hl)
		snprintf(host, sizeof(host), "%.*s", (int)hl, p);
	p += hl;
	if (*p == ':')
		port = (int)strtol(p + 1, (char **)&p, 10);
	if (*p == '/')
		db = (int)strtol(p + 1, (char **)&p, 10);
	if ((q = strstr(p, "prefix=")))
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(q + 7, "&"),
			 q + 7);
	snprintf(rd_tag, sizeof(rd_tag), "{floor:%s}", name);
	if (!(rd = redisConnect(host, port)) || rd->err)
		die("redis: connect %s:%d: %s", host, port,
		    rd ? rd->errstr : "out of memory");
	if (pass[0]) {
		const char *a[2] = {"AUTH", pass};
		freeReplyObject(rd_cmd("AUTH", 2, a, NULL));
	}
	char dbs[16];
	snprintf(dbs, sizeof(dbs), "%d", db);
	const char *a[2] = {"SELECT", dbs};
	freeReplyObject(rd_cmd("SELECT", 2, a, NULL));
	for (int i = 0; i < 5; i++) {
		const char *s[3] = {"SCRIPT", "LOAD", rd_lua[i]};
		redisReply *r = rd_cmd("SCRIPT LOAD", 3, s, NULL);
		snprintf(rd_sha[i], sizeof(rd_sha[i]), "%s", r->str);
		freeReplyObject(r);
	}
}

/* Delete the floor's keys: every task hash by id, then the sets. */
static void rd_drop(void)
{
	static const char lua[] =
	    "local tag = ARGV[1]\n"
	    "local n = tonumber(redis.call('GET', tag .. ':seq') or '0')\n"
	    "for id = 1, n, 1000 do\n"
	    "  local ks = {}\n"
	    "  for j = id, math.min(n, id + 999) do\n"
	    "    ks[#ks + 1] = tag .. ':t:' .. j\n"
	    "  end\n"
	    "  redis.call('UNLINK', unpack(ks))\n"
	    "end\n"
	    "redis.call('DEL', tag .. ':seq', tag .. ':due', tag .. ':lease')\n"
	    "return n\n";
	const char *a[4] = {"EVAL", lua, "0", rd_tag};
	freeReplyObject(rd_cmd("drop", 4, a, NULL));
}

static void rd_create(void) { rd_drop(); }

static void rd_insert_many(int k)
{
	char kb[16];
	snprintf(kb, sizeof(kb), "%d", k);
	const char *a[2] = {payload, kb};
	size_t l[2] = {PAYLOAD_LEN, strlen(kb)};
	freeReplyObject(rd_eval(RD_ENQ, 2, a, l));
}

static void rd_insert_one(void) { rd_insert_many(1); }

static int rd_take(redisReply *r, int from, int64_t *ids, int *att, int k)
{
	int n = 0;
	if (r->type != REDIS_REPLY_ARRAY)
		rd_die("claim", r);
	for (size_t i = (size_t)from; i + 1 < r->elements && n < k; i += 2) {
		ids[n] = r->element[i]->integer;
		att[n++] = (int)r->element[i + 1]->integer;
	}
	return n;
}

static int rd_claim_k(int k, int64_t *ids, int *att)
{
	char kb[16];
	snprintf(kb, sizeof(kb), "%d", k);
	const char *a[3] = {"floor", "30000000", kb};
	redisReply *r = rd_eval(RD_CLAIM, 3, a, NULL);
	int n = rd_take(r, 0, ids, att, k);
	freeReplyObject(r);
	return n;
}

typedef struct rd_pairs {
	char buf[MAX_K][2][24];
	const char *a[8 + 2 * MAX_K];
} rd_pairs;

static int rd_pairs_put(rd_pairs *x, int at, int n, const int64_t *ids,
			const int *att)
{
	for (int i = 0; i < n; i++) {
		snprintf(x->buf[i][0], 24, "%" PRId64, ids[i]);
		snprintf(x->buf[i][1], 24, "%d", att[i]);
		x->a[at++] = x->buf[i][0];
		x->a[at++] = x->buf[i][1];
	}
	return at;
}

static void rd_complete(int n, const int64_t *ids, const int *att)
{
	static rd_pairs x;
	int argc = rd_pairs_put(&x, 0, n, ids, att);
	redisReply *r = rd_eval(RD_DONE, argc, x.a, NULL);
	if (r->integer != n)
		die("redis: complete changed %lld tasks, expected %d",
		    r->integer, n);
	freeReplyObject(r);
}

static int rd_complete_claim(int n, int64_t *ids, int *att, int k)
{
	static rd_pairs x;
	char kb[16];
	snprintf(kb, sizeof(kb), "%d", k);
	x.a[0] = "floor";
	x.a[1] = "30000000";
	x.a[2] = kb;
	int argc = rd_pairs_put(&x, 3, n, ids, att);
	redisReply *r = rd_eval(RD_DONE_CLAIM, argc, x.a, NULL);
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
	    r->element[0]->integer != n)
		die("redis: complete changed %lld tasks, expected %d",
		    r->type == REDIS_REPLY_ARRAY && r->elements
			? r->element[0]->integer
			: -1LL,
		    n);
	int got = rd_take(r, 1, ids, att, k);
	freeReplyObject(r);
	return got;
}

static void rd_check(long *done, long *dups)
{
	redisReply *r = rd_eval(RD_CHECK, 0, NULL, NULL);
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
		rd_die("check", r);
	*done = (long)r->element[0]->integer;
	*dups = (long)r->element[1]->integer;
	freeReplyObject(r);
}

static const backend redis_backend = {
    "redis", rd_create,	 rd_drop,     rd_insert_one,	 rd_insert_many, NULL,
    NULL,    rd_claim_k, rd_complete, rd_complete_claim, rd_check,	 NULL,
};
#endif

/* ------------------------------------------------------------------ */
/* MariaDB / MySQL                                                     */
/* ------------------------------------------------------------------ */

#ifdef DUE_WITH_MYSQL
/*
** Bare SQL over libmariadb, shaped like the PostgreSQL floor but with what
** MySQL lacks: no UPDATE ... RETURNING, so a claim is SELECT ... ORDER BY
** due_at, id LIMIT k FOR UPDATE SKIP LOCKED, then UPDATE by primary key,
** then COMMIT (three round trips, one commit); no partial indexes, so
** (state, due_at, id) and (state, lease_until).  READ COMMITTED, InnoDB,
** UTC_TIMESTAMP(6) (the server's clock, fixed at statement start),
** CLIENT_FOUND_ROWS so that affected rows count matched rows.  Statements
** go as text (one round trip each, no prepare); the payload is escaped
** once.  Autocommit is off: every operation ends with its own COMMIT.
*/
static MYSQL *my;
static char *my_payload; /* the payload as a quoted SQL literal */
static sbuf my_sql;

static void my_die(const char *what)
{
	die("mariadb: %.80s: %s", what, mysql_error(my));
}

static void my_q(const char *sql)
{
	if (mysql_real_query(my, sql, strlen(sql)))
		my_die(sql);
	MYSQL_RES *r = mysql_store_result(my);
	if (r)
		mysql_free_result(r);
	else if (mysql_field_count(my))
		my_die(sql);
}

static void my_commit(void)
{
	if (mysql_commit(my))
		my_die("commit");
}

static void my_open(const char *url)
{
	char user[128] = "root", pass[128] = "", host[256] = "127.0.0.1",
	     db[128] = "due", sock[512] = "";
	unsigned port = 3306;
	const char *p = strstr(url, "://") + 3, *q;
	const char *end = p + strcspn(p, "/?");

	if ((q = memchr(p, '@', (size_t)(end - p)))) {
		const char *c = memchr(p, ':', (size_t)(q - p));
		snprintf(user, sizeof(user), "%.*s", (int)((c ? c : q) - p), p);
		if (c)
			snprintf(pass, sizeof(pass), "%.*s", (int)(q - c - 1),
				 c + 1);
		p = q + 1;
	}
	size_t hl = strcspn(p, ":/?");
	if (hl)
		snprintf(host, sizeof(host), "%.*s", (int)hl, p);
	p += hl;
	if (*p == ':')
		port = (unsigned)strtoul(p + 1, (char **)&p, 10);
	if (*p == '/' && p[1] && p[1] != '?')
		snprintf(db, sizeof(db), "%.*s", (int)strcspn(p + 1, "?"),
			 p + 1);
	if ((q = strstr(p, "socket=")))
		snprintf(sock, sizeof(sock), "%.*s", (int)strcspn(q + 7, "&"),
			 q + 7);
	mysql_library_init(0, NULL, NULL);
	if (!(my = mysql_init(NULL)))
		die("mariadb: out of memory");
	if (!mysql_real_connect(my, host, user, pass[0] ? pass : NULL, db, port,
				sock[0] ? sock : NULL, CLIENT_FOUND_ROWS))
		my_die("connect");
	my_q("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
	my_q("SET SESSION time_zone = '+00:00'");
	if (mysql_autocommit(my, 0))
		my_die("autocommit off");
	static const char hex[] = "0123456789abcdef";
	my_payload = malloc(2 * PAYLOAD_LEN + 4);
	if (!my_payload)
		die("out of memory");
	char *o = my_payload;
	*o++ = 'X';
	*o++ = '\'';
	for (int i = 0; i < PAYLOAD_LEN; i++) {
		*o++ = hex[(unsigned char)payload[i] >> 4];
		*o++ = hex[(unsigned char)payload[i] & 15];
	}
	*o++ = '\'';
	*o = '\0';
}

static void my_drop(void)
{
	my_q("DROP TABLE IF EXISTS floor_task");
	my_commit();
}

static void my_create(void)
{
	my_drop();
	my_q("CREATE TABLE floor_task ("
	     "  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
	     "  kind VARCHAR(255) NOT NULL,"
	     "  payload LONGBLOB NOT NULL,"
	     "  state VARCHAR(16) NOT NULL,"
	     "  due_at DATETIME(6) NOT NULL,"
	     "  attempt INT NOT NULL DEFAULT 0,"
	     "  lease_owner VARCHAR(255),"
	     "  lease_until DATETIME(6),"
	     "  result LONGBLOB,"
	     "  updated_at DATETIME(6) NOT NULL,"
	     "  KEY floor_task_due (state, due_at, id),"
	     "  KEY floor_task_lease (state, lease_until)"
	     ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4");
	my_commit();
}

static void my_insert_many(int k)
{
	my_sql.len = 0;
	sb_add(&my_sql, "INSERT INTO floor_task (kind, payload, state, due_at,"
			" updated_at) VALUES ");
	for (int i = 0; i < k; i++)
		sb_add(&my_sql,
		       "%s('bench', %s, 'SCHEDULED', UTC_TIMESTAMP(6),"
		       " UTC_TIMESTAMP(6))",
		       i ? "," : "", my_payload);
	my_q(my_sql.s);
	my_commit();
}

static void my_insert_one(void) { my_insert_many(1); }

/* In the open transaction: lock up to k due rows, claim them by id. */
static int my_claim_in_tx(int k, int64_t *ids, int *att)
{
	char sql[256];
	int n = 0;
	snprintf(sql, sizeof(sql),
		 "SELECT id, attempt FROM floor_task WHERE state = 'SCHEDULED'"
		 " AND due_at <= UTC_TIMESTAMP(6) ORDER BY due_at, id LIMIT %d"
		 " FOR UPDATE SKIP LOCKED",
		 k);
	if (mysql_real_query(my, sql, strlen(sql)))
		my_die("claim select");
	MYSQL_RES *r = mysql_store_result(my);
	if (!r)
		my_die("claim select");
	for (MYSQL_ROW row; n < k && (row = mysql_fetch_row(r));) {
		ids[n] = strtoll(row[0], NULL, 10);
		att[n++] = atoi(row[1]) + 1;
	}
	mysql_free_result(r);
	if (n == 0)
		return 0;
	my_sql.len = 0;
	sb_add(&my_sql,
	       "UPDATE floor_task SET state = 'CLAIMED', attempt = attempt + 1,"
	       " lease_owner = 'floor', lease_until = UTC_TIMESTAMP(6) +"
	       " INTERVAL 30000000 MICROSECOND, updated_at = UTC_TIMESTAMP(6)"
	       " WHERE id IN (");
	for (int i = 0; i < n; i++)
		sb_add(&my_sql, "%s%" PRId64, i ? "," : "", ids[i]);
	sb_add(&my_sql, ")");
	my_q(my_sql.s);
	if ((int)mysql_affected_rows(my) != n)
		die("mariadb: claim changed %llu rows, expected %d",
		    (unsigned long long)mysql_affected_rows(my), n);
	return n;
}

static int my_claim_k(int k, int64_t *ids, int *att)
{
	int n = my_claim_in_tx(k, ids, att);
	my_commit();
	return n;
}

static void my_complete_in_tx(int n, const int64_t *ids, const int *att)
{
	my_sql.len = 0;
	sb_add(&my_sql, "UPDATE floor_task SET state = 'DONE', result = 'ok',"
			" lease_owner = NULL, lease_until = NULL,"
			" updated_at = UTC_TIMESTAMP(6)"
			" WHERE state = 'CLAIMED' AND id IN (");
	for (int i = 0; i < n; i++)
		sb_add(&my_sql, "%s%" PRId64, i ? "," : "", ids[i]);
	sb_add(&my_sql, ") AND attempt = CASE id");
	for (int i = 0; i < n; i++)
		sb_add(&my_sql, " WHEN %" PRId64 " THEN %d", ids[i], att[i]);
	sb_add(&my_sql, " END");
	my_q(my_sql.s);
	if ((int)mysql_affected_rows(my) != n)
		die("mariadb: complete changed %llu rows, expected %d",
		    (unsigned long long)mysql_affected_rows(my), n);
}

static void my_complete(int n, const int64_t *ids, const int *att)
{
	my_complete_in_tx(n, ids, att);
	my_commit();
}

static int my_complete_claim(int n, int64_t *ids, int *att, int k)
{
	my_complete_in_tx(n, ids, att);
	int got = my_claim_in_tx(k, ids, att);
	my_commit();
	return got;
}

static void my_check(long *done, long *dups)
{
	static const char sql[] =
	    "SELECT COALESCE(SUM(state = 'DONE'), 0),"
	    " COALESCE(SUM(IF(attempt > 1, attempt - 1, 0)), 0)"
	    " FROM floor_task";
	if (mysql_real_query(my, sql, sizeof(sql) - 1))
		my_die("check");
	MYSQL_RES *r = mysql_store_result(my);
	MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
	if (!row)
		my_die("check");
	*done = atol(row[0]);
	*dups = atol(row[1]);
	mysql_free_result(r);
	my_commit();
}

/* Index statistics after a fill, as the PostgreSQL floor's ANALYZE. */
static void my_analyze(void)
{
	my_q("ANALYZE TABLE floor_task");
	my_commit();
}

static const backend mysql_backend = {
    "mysql",  my_create,  my_drop,    my_insert_one, my_insert_many,
    NULL,     NULL,	  my_claim_k, my_complete,   my_complete_claim,
    my_check, my_analyze,
};
#endif

/* ------------------------------------------------------------------ */
/* Workloads                                                           */
/* ------------------------------------------------------------------ */

static const backend *be;

/*
** User + system CPU of this process, in seconds (getrusage).  A phase
** marks it where its clock starts (phase_start), and emit() reports the
** CPU spent since, per task: the floor's side of issue 18's per-task
** budget, beside the same figure of `due bench`.  The server's own CPU
** (PostgreSQL, Redis, MariaDB) is not in it.
*/
static double phase_cpu;
static struct work phase_work; /* the store work at the phase's start */

static double cpu_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static double phase_start(void)
{
	if (be->work)
		be->work(&phase_work);
	phase_cpu = cpu_now();
	return now_s();
}

static void emit(const char *workload, const char *variant, long n, long conc,
		 double secs, long missing, long dups, bool check)
{
	double cpu = cpu_now() - phase_cpu;
	struct work w = {0};

	if (be->work)
		be->work(&w);

	printf("{\"workload\":\"%s\",\"variant\":\"%s\",\"store\":\"%s\",\"n\":"
	       "%ld,"
	       "\"concurrency\":%ld,\"seconds\":%.6f,\"tasks_per_s\":%.3f,"
	       "\"cpu_us_per_task\":%.3f",
	       workload, variant, be->name, n, conc, secs,
	       secs > 0 ? n / secs : 0.0, n > 0 ? cpu * 1e6 / n : 0.0);
	if (w.has_sql && n > 0)
		printf(
		    ",\"statements_per_task\":%.3f,\"vm_steps_per_task\":%.3f,"
		    "\"rows_written_per_task\":%.3f",
		    (double)(w.statements - phase_work.statements) / n,
		    (double)(w.vm_steps - phase_work.vm_steps) / n,
		    (double)(w.rows_written - phase_work.rows_written) / n);
	if (w.has_wal && n > 0)
		printf(",\"wal_bytes_per_task\":%.1f",
		       (double)(w.wal_bytes - phase_work.wal_bytes) / n);
	if (w.has_exec && phase_work.has_exec && n > 0)
		printf(",\"server_us_per_task\":%.3f",
		       (w.exec_us - phase_work.exec_us) / n);
	if (check)
		printf(",\"duplicates\":%ld,\"missing\":%ld", dups, missing);
	printf("}\n");
	fflush(stdout);
}

typedef struct progress {
	const char *label;
	long total;
	double t0, last;
	long last_n;
} progress;

static void tick(progress *p, long n)
{
	double t = now_s();
	if (quiet || t - p->last < 1.0)
		return;
	fprintf(stderr, "  %s: %ld/%ld done, %.0f tasks/s\n", p->label, n,
		p->total, (double)(n - p->last_n) / (t - p->last));
	p->last = t;
	p->last_n = n;
}

static void fill(long n, long batch)
{
	be->create();
	for (long done = 0; done < n;) {
		long k = n - done < batch ? n - done : batch;
		be->insert_many((int)k);
		done += k;
	}
	if (be->analyze)
		be->analyze();
}

static void w_enqueue(long n, long batch)
{
	long single =
	    n / 4 > 0 ? n / 4 : 1; /* one commit each: fewer, as due bench */
	progress p = {"floor enqueue single", single, 0, 0, 0};

	be->create();
	double t0 = phase_start();
	p.last = t0;
	for (long i = 0; i < single; i++) {
		be->insert_one();
		tick(&p, i + 1);
	}
	emit("floor-enqueue", "single", single, 1, now_s() - t0, 0, 0, false);

	be->create();
	p = (progress){"floor enqueue batch", n, 0, 0, 0};
	t0 = p.last = phase_start();
	for (long done = 0; done < n;) {
		long k = n - done < batch ? n - done : batch;
		be->insert_many((int)k);
		done += k;
		tick(&p, done);
	}
	emit("floor-enqueue", "batch", n, batch, now_s() - t0, 0, 0, false);
	be->drop();
}

static void tx_begin(void)
{
	if (be->begin)
		be->begin();
}

static void tx_commit(void)
{
	if (be->commit)
		be->commit();
}

static void w_drain(long n, int k, int commits, long batch)
{
	int64_t ids[MAX_K];
	int att[MAX_K];
	long done = 0, dups = 0, ok = 0;
	char label[64];

	fill(n, batch);
	snprintf(label, sizeof(label), "floor drain %d-commit k=%d", commits,
		 k);
	progress p = {label, n, 0, 0, 0};
	double t0 = p.last = phase_start();
	if (commits == 2) {
		for (;;) {
			tx_begin();
			int got = be->claim(k, ids, att);
			tx_commit();
			if (got == 0)
				break;
			tx_begin();
			be->complete(got, ids, att);
			tx_commit();
			done += got;
			tick(&p, done);
		}
	} else {
		tx_begin();
		int got = be->claim(k, ids, att);
		tx_commit();
		while (got > 0) {
			int was = got;
			if (be->complete_claim) {
				got = be->complete_claim(was, ids, att, k);
			} else {
				tx_begin();
				be->complete(was, ids, att);
				got = be->claim(k, ids, att);
				tx_commit();
			}
			done += was;
			tick(&p, done);
		}
	}
	double secs = now_s() - t0;
	phase_cpu -= cpu_now(); /* the check is not the drain's */
	be->check(&ok, &dups);
	phase_cpu += cpu_now();
	emit("floor-drain", commits == 2 ? "2-commit" : "1-commit", n, k, secs,
	     n - ok, dups, true);
	be->drop();
}

static const char usage[] =
    "usage: floor URL [--workload enqueue|drain|all|fill|drop] [--n N]\n"
    "                 [--inflight K] [--commits 1|2|both] [--batch B] "
    "[--quiet]\n";

/*
** Keep freed memory in the heap: see the header (glibc only).  And no
** SQLite memory statistics, as the due executable (src/cli/main.c): the
** floor is the cheapest the store allows.
*/
static void tune_process(void)
{
	sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
#ifdef __GLIBC__
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"workload", required_argument, NULL, 'w'},
	    {"n", required_argument, NULL, 'n'},
	    {"inflight", required_argument, NULL, 'k'},
	    {"commits", required_argument, NULL, 'c'},
	    {"batch", required_argument, NULL, 'b'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {0}};
	const char *workload = "all", *commits = "both";
	long n = 20000, k = 4, batch = 1000;
	int opt;

	tune_process();
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'w': workload = optarg; break;
		case 'n': n = atol(optarg); break;
		case 'k': k = atol(optarg); break;
		case 'c': commits = optarg; break;
		case 'b': batch = atol(optarg); break;
		case 'q': quiet = true; break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (optind != argc - 1 || n < 1 || k < 1 || k > MAX_K || batch < 1 ||
	    batch > MAX_BATCH ||
	    (strcmp(commits, "1") && strcmp(commits, "2") &&
	     strcmp(commits, "both"))) {
		fputs(usage, stderr);
		return 2;
	}
	const char *url = argv[optind];
	if (strncmp(url, "sqlite:", 7) == 0) {
		sq_open(url);
		be = &sqlite_backend;
	} else if (strncmp(url, "postgres://", 11) == 0 ||
		   strncmp(url, "postgresql://", 13) == 0) {
#ifdef DUE_WITH_PG
		pg_open(url);
		be = &pg_backend;
#else
		die("built without PostgreSQL");
#endif
	} else if (strncmp(url, "redis://", 8) == 0) {
#ifdef DUE_WITH_REDIS
		rd_open(url);
		be = &redis_backend;
#else
		die("built without Redis");
#endif
	} else if (strncmp(url, "mysql://", 8) == 0 ||
		   strncmp(url, "mariadb://", 10) == 0) {
#ifdef DUE_WITH_MYSQL
		my_open(url);
		be = &mysql_backend;
#else
		die("built without MySQL/MariaDB");
#endif
	} else {
		die("unknown store URL '%s' (sqlite:PATH, postgres://...,"
		    " redis://... or mysql://...)",
		    url);
	}
	/* SQLite's default variable limit is 32766: one per row plus one */
	if (be == &sqlite_backend && batch > 30000)
		batch = 30000;

	bool all = !strcmp(workload, "all");
	if (!strcmp(workload, "fill")) {
		fill(n, batch);
	} else if (!strcmp(workload, "drop")) {
		be->drop();
	} else if (all || !strcmp(workload, "enqueue") ||
		   !strcmp(workload, "drain")) {
		if (all || !strcmp(workload, "enqueue"))
			w_enqueue(n, batch);
		if (all || !strcmp(workload, "drain")) {
			if (strcmp(commits, "1"))
				w_drain(n, (int)k, 2, batch);
			if (strcmp(commits, "2"))
				w_drain(n, (int)k, 1, batch);
		}
	} else {
		fputs(usage, stderr);
		return 2;
	}
#ifdef DUE_WITH_PG
	if (pg)
		PQfinish(pg);
#endif
#ifdef DUE_WITH_REDIS
	if (rd)
		redisFree(rd);
#endif
#ifdef DUE_WITH_MYSQL
	if (my) {
		mysql_close(my);
		mysql_library_end();
	}
	free(my_payload);
	free(my_sql.s);
#endif
	if (sq) {
		sq_finalize_all();
		sqlite3_close(sq);
	}
	return 0;
}
