/*
** floor.c - the bare-SQL floor: what the store itself allows for due's hot
** path, with no framework in between.
**
**   floor URL [--workload enqueue|drain|all|fill|drop] [--n N]
**             [--inflight K] [--commits 1|2|both] [--batch B] [--quiet]
**
** URL is `sqlite:PATH[?sync=normal|full]` or `postgres://...`.  Everything
** happens in a scratch table of its own, floor_task (dropped and created
** again by each workload), shaped like due_task: the same columns due's
** claim and complete touch, the same partial indexes (due rows, leased
** rows), the same durability (SQLite: WAL, synchronous FULL unless
** ?sync=normal; PostgreSQL: whatever the server says, fsync on and the
** default synchronous_commit in bench/run's cluster).
**
** Workloads (one JSON object per line on stdout, like `due bench --json`):
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
*/
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>
#ifdef DUE_WITH_PG
#include <libpq-fe.h>
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
		sqlite3_finalize(all[i]);
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
		sqlite3_finalize(sq_insk);
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
		sqlite3_finalize(sq_done);
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
    "sqlite",	    sq_create,	 sq_drop,      sq_insert_one,
    sq_insert_many, sq_begin_tx, sq_commit_tx, sq_claim_k,
    sq_complete,    NULL,	 sq_check,     NULL,
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

static const backend pg_backend = {
    "postgres", pg_create,  pg_drop,	pg_insert_one, pg_insert_many,
    NULL,	NULL,	    pg_claim_k, pg_complete,   pg_complete_claim,
    pg_check,	pg_analyze,
};
#endif

/* ------------------------------------------------------------------ */
/* Workloads                                                           */
/* ------------------------------------------------------------------ */

static const backend *be;

static void emit(const char *workload, const char *variant, long n, long conc,
		 double secs, long missing, long dups, bool check)
{
	printf("{\"workload\":\"%s\",\"variant\":\"%s\",\"store\":\"%s\",\"n\":"
	       "%ld,"
	       "\"concurrency\":%ld,\"seconds\":%.6f,\"tasks_per_s\":%.3f",
	       workload, variant, be->name, n, conc, secs,
	       secs > 0 ? n / secs : 0.0);
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
	double t0 = now_s();
	p.last = t0;
	for (long i = 0; i < single; i++) {
		be->insert_one();
		tick(&p, i + 1);
	}
	emit("floor-enqueue", "single", single, 1, now_s() - t0, 0, 0, false);

	be->create();
	p = (progress){"floor enqueue batch", n, 0, 0, 0};
	t0 = p.last = now_s();
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
	double t0 = p.last = now_s();
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
	be->check(&ok, &dups);
	emit("floor-drain", commits == 2 ? "2-commit" : "1-commit", n, k, secs,
	     n - ok, dups, true);
	be->drop();
}

static const char usage[] =
    "usage: floor URL [--workload enqueue|drain|all|fill|drop] [--n N]\n"
    "                 [--inflight K] [--commits 1|2|both] [--batch B] "
    "[--quiet]\n";

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
	} else {
		die("unknown store URL '%s' (sqlite:PATH or postgres://...)",
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
	if (sq) {
		sq_finalize_all();
		sqlite3_close(sq);
	}
	return 0;
}
