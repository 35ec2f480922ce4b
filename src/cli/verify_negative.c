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
** These speak raw SQL to SQLite, PostgreSQL or MySQL on purpose: the
** point is SQL that due itself never runs.  Each statement is written
** once, in the dialect all accept, with $N placeholders (raw_exec turns
** them into SQLite's ?N, or MySQL's positional ? with one bind per
** occurrence, and MySQL's CAST(... AS SIGNED) for bigint).  Values are
** still bound, never pasted.  Redis has no SQL: cmd_verify.c skips these
** there and says so.  The same session is lent to verify_stall.c (v_sql_*
** in verify.h), whose case holds another client's lock with it.
*/
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef DUE_WITH_PG
#include <libpq-fe.h>
#endif
#ifdef DUE_WITH_MYSQL
#include <mysql.h>
#endif

#include "cli/verify.h"

/*
** A tiny raw-SQL session on the scratch store: SQLite, PostgreSQL or MySQL.
** Other files get it as the opaque v_sql (verify.h; v_sql_open() and its
** kin follow raw_exec() below).
*/
typedef struct v_sql {
	sqlite3 *lite;
#ifdef DUE_WITH_PG
	PGconn *pg;
#endif
#ifdef DUE_WITH_MYSQL
	MYSQL *my;
#endif
} raw;

static int raw_open(vctx *v, raw *r)
{
	memset(r, 0, sizeof(*r));
	if (v->sqlite) {
		/* the file of sqlite:PATH[?options] */
		char path[2400];
		snprintf(path, sizeof(path), "%.*s",
			 (int)strcspn(v->url + 7, "?"), v->url + 7);
		if (sqlite3_open(path, &r->lite) != SQLITE_OK)
			return -1;
		sqlite3_busy_timeout(r->lite, 30000);
		return 0;
	}
#ifdef DUE_WITH_MYSQL
	if (v->backend == V_MYSQL)
		return (r->my = v_mysql_connect(v->url, true)) ? 0 : -1;
#endif
#ifdef DUE_WITH_PG
	r->pg = PQconnectdb(v->url);
	return PQstatus(r->pg) == CONNECTION_OK ? 0 : -1;
#else
	return -1;
#endif
}

static void raw_close(raw *r)
{
	sqlite3_close(r->lite);
#ifdef DUE_WITH_MYSQL
	if (r->my)
		mysql_close(r->my);
#endif
#ifdef DUE_WITH_PG
	if (r->pg)
		PQfinish(r->pg);
#endif
}

bool v_negative_mysql_ready(void)
{
#ifdef DUE_WITH_MYSQL
	return true;
#else
	return false;
#endif
}

bool v_plan_mysql_ready(void)
{
#ifdef DUE_WITH_MYSQL
	return true;
#else
	return false;
#endif
}

/* sql with SQLite's ?N for every $N, into buf (n bytes); NULL if long. */
static const char *lite_params(const char *sql, char *buf, size_t n)
{
	size_t i = 0;

	for (; *sql; sql++) {
		if (i + 1 == n)
			return NULL;
		buf[i++] =
		    *sql == '$' && sql[1] >= '1' && sql[1] <= '9' ? '?' : *sql;
	}
	buf[i] = '\0';
	return buf;
}

#ifdef DUE_WITH_MYSQL
/*
** raw_exec on MySQL: each $N of sql becomes a positional ? bound to
** parameter N (so "$2 = $2" binds p2 twice), and "AS bigint)" becomes
** "AS SIGNED)".  Returns the row count (first column into out), or -1.
*/
static int my_exec(MYSQL *m, const char *sql, int64_t p1, int64_t p2,
		   const char *p3, int64_t *out, int cap)
{
	char text[1024];
	MYSQL_BIND in[8], col;
	int64_t vals[3] = {p1, p2, 0}, v = 0;
	unsigned long p3len = p3 ? (unsigned long)strlen(p3) : 0;
	size_t i = 0, nb = 0;
	int n = -1;
	MYSQL_STMT *st = mysql_stmt_init(m);

	memset(in, 0, sizeof(in));
	for (const char *q = sql; *q && i + 16 < sizeof(text); q++) {
		if (strncmp(q, "AS bigint)", 10) == 0) {
			i += (size_t)snprintf(text + i, sizeof(text) - i,
					      "AS SIGNED)");
			q += 9;
		} else if (*q == '$' && q[1] >= '1' && q[1] <= '3' && nb < 8) {
			int k = *++q - '1';
			text[i++] = '?';
			if (k == 2) {
				in[nb].buffer_type = MYSQL_TYPE_STRING;
				in[nb].buffer = (void *)p3;
				in[nb].buffer_length = p3len;
				in[nb].length = &p3len;
			} else {
				in[nb].buffer_type = MYSQL_TYPE_LONGLONG;
				in[nb].buffer = &vals[k];
			}
			nb++;
		} else {
			text[i++] = *q;
		}
	}
	text[i] = '\0';
	if (!st || mysql_stmt_prepare(st, text, strlen(text)) != 0 ||
	    (nb && mysql_stmt_bind_param(st, in) != 0) ||
	    mysql_stmt_execute(st) != 0)
		goto done;
	n = 0;
	if (mysql_stmt_field_count(st) > 0) {
		memset(&col, 0, sizeof(col));
		col.buffer_type = MYSQL_TYPE_LONGLONG;
		col.buffer = &v;
		if (mysql_stmt_bind_result(st, &col) != 0) {
			n = -1;
			goto done;
		}
		while (mysql_stmt_fetch(st) == 0)
			if (out && n < cap)
				out[n++] = v;
	}
done:
	if (st)
		mysql_stmt_close(st);
	return n;
}
#endif

/*
** Run sql with up to two int64 parameters ($1 $2; nparams of them) and an
** optional text parameter as the third.  If out is given, it receives the
** first column of up to cap rows; returns the row count, or -1 on error.
*/
static int raw_exec(raw *r, const char *sql, int nparams, int64_t p1,
		    int64_t p2, const char *p3, int64_t *out, int cap)
{
	int n = 0;
	if (r->lite) {
		const char *lite;
		char text[1024];
		sqlite3_stmt *st;
		int rc;
		if (!(lite = lite_params(sql, text, sizeof(text))) ||
		    sqlite3_prepare_v2(r->lite, lite, -1, &st, NULL) !=
			SQLITE_OK)
			return -1;
		if (nparams > 0)
			sqlite3_bind_int64(st, 1, p1);
		if (nparams > 1)
			sqlite3_bind_int64(st, 2, p2);
		if (nparams > 2)
			sqlite3_bind_text(st, 3, p3, -1, SQLITE_TRANSIENT);
		while ((rc = sqlite3_step(st)) == SQLITE_ROW)
			if (out && n < cap)
				out[n++] = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
		return rc == SQLITE_DONE ? n : -1;
	}
#ifdef DUE_WITH_MYSQL
	if (r->my)
		return my_exec(r->my, sql, p1, p2, p3, out, cap);
#endif
#ifdef DUE_WITH_PG
	char b1[32], b2[32];
	const char *vals[3] = {b1, b2, p3};
	snprintf(b1, sizeof(b1), "%lld", (long long)p1);
	snprintf(b2, sizeof(b2), "%lld", (long long)p2);
	PGresult *res =
	    PQexecParams(r->pg, sql, nparams, NULL, vals, NULL, NULL, 0);
	ExecStatusType s = PQresultStatus(res);
	if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK) {
		PQclear(res);
		return -1;
	}
	for (int i = 0; out && i < PQntuples(res) && n < cap; i++)
		out[n++] = strtoll(PQgetvalue(res, i, 0), NULL, 10);
	PQclear(res);
	return n;
#else
	return -1;
#endif
}

v_sql *v_sql_open(vctx *v)
{
	raw *r = malloc(sizeof(*r));

	if (r && raw_open(v, r) < 0) {
		raw_close(r);
		free(r);
		r = NULL;
	}
	return r;
}

int v_sql_exec(v_sql *s, const char *sql, int nparams, int64_t p1, int64_t p2,
	       const char *p3, int64_t *out, int cap)
{
	return raw_exec(s, sql, nparams, p1, p2, p3, out, cap);
}

void v_sql_close(v_sql *s)
{
	if (s) {
		raw_close(s);
		free(s);
	}
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
	raw r;
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
	raw r;
	pid_t kids[3];
	int64_t claims = -1, dup_tasks = -1, multi = -1;

	if (raw_open(v, &r) < 0 || naive_setup(&r, N) < 0) {
		v_case(v, "negative_naive_select_then_update", false,
		       "error=setup");
		raw_close(&r);
		return;
	}
	for (int i = 0; i < 3; i++)
		if ((kids[i] = fork()) == 0)
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
	raw r;
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

/* All rows of a query's first column, joined with newlines, into buf. */
static int raw_text(raw *r, const char *sql, char *buf, size_t n)
{
	size_t off = 0;
	buf[0] = '\0';
	if (r->lite) {
		sqlite3_stmt *st;
		if (sqlite3_prepare_v2(r->lite, sql, -1, &st, NULL) !=
		    SQLITE_OK)
			return -1;
		int col = sqlite3_column_count(st) -
			  1; /* EXPLAIN QUERY PLAN: detail */
		while (sqlite3_step(st) == SQLITE_ROW && off < n)
			off += (size_t)snprintf(
			    buf + off, n - off, "%s\n",
			    (const char *)sqlite3_column_text(st, col));
		sqlite3_finalize(st);
		return 0;
	}
#ifdef DUE_WITH_PG
	PGresult *res = PQexec(r->pg, sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		PQclear(res);
		return -1;
	}
	for (int i = 0; i < PQntuples(res) && off < n; i++)
		off += (size_t)snprintf(buf + off, n - off, "%s\n",
					PQgetvalue(res, i, 0));
	PQclear(res);
	return 0;
#else
	return -1;
#endif
}

/* "Buffers: shared hit=N read=M" of the plan's first node: N + M. */
static long plan_buffers(const char *plan)
{
	const char *b = strstr(plan, "Buffers: shared");
	long total = 0;
	if (!b)
		return 0;
	const char *eol = strchr(b, '\n');
	for (const char *k = b; k && (!eol || k < eol); k++) {
		if (strncmp(k, "hit=", 4) == 0 || strncmp(k, "read=", 5) == 0)
			total += strtol(strchr(k, '=') + 1, NULL, 10);
	}
	return total;
}

static long rows_removed(const char *plan)
{
	const char *b = strstr(plan, "Rows Removed by Filter: ");
	return b ? strtol(b + 24, NULL, 10) : 0;
}

#ifdef DUE_WITH_MYSQL
/* The text value of "name": in json after its first "table": object. */
static void json_field(const char *json, const char *name, char *out, size_t n)
{
	char pat[48];
	const char *t = strstr(json, "\"table\": {"), *p;

	out[0] = '\0';
	snprintf(pat, sizeof(pat), "\"%s\": ", name);
	if (!t || !(p = strstr(t, pat)))
		return;
	p += strlen(pat);
	p += *p == '"';
	snprintf(out, n, "%.*s", (int)strcspn(p, "\",\n}"), p);
}

/*
** The plan of the query sql (a SELECT): its first table's access type,
** the index chosen ("" for none), and the rows and pages it really read
** (MariaDB's ANALYZE FORMAT=JSON runs it; where the server has no such
** statement, MySQL 8, EXPLAIN FORMAT=JSON and the counts stay -1).
** 0, or -1 when neither statement printed a plan.
*/
typedef struct my_plan_t {
	char access[32], key[64];
	long rows, pages;
} my_plan_t;

static int my_plan(MYSQL *m, const char *sql, my_plan_t *p)
{
	static const char *const how[] = {"ANALYZE FORMAT=JSON ",
					  "EXPLAIN FORMAT=JSON "};
	char q[1024], num[32];
	MYSQL_RES *res = NULL;
	MYSQL_ROW row = NULL;

	memset(p, 0, sizeof(*p));
	p->rows = p->pages = -1;
	for (size_t i = 0; i < 2 && !row; i++) {
		snprintf(q, sizeof(q), "%s%s", how[i], sql);
		if (mysql_query(m, q) != 0 || !(res = mysql_store_result(m)))
			continue;
		if (!(row = mysql_fetch_row(res)) || !row[0]) {
			mysql_free_result(res);
			row = NULL;
		}
	}
	if (!row)
		return -1;
	json_field(row[0], "access_type", p->access, sizeof(p->access));
	json_field(row[0], "key", p->key, sizeof(p->key));
	json_field(row[0], "r_rows", num, sizeof(num));
	if (num[0])
		p->rows = strtol(num, NULL, 10);
	json_field(row[0], "pages_accessed", num, sizeof(num));
	if (num[0])
		p->pages = strtol(num, NULL, 10);
	mysql_free_result(res);
	return 0;
}

/* Run a statement whose result (if any) is not needed. */
static void my_quiet(MYSQL *m, const char *sql)
{
	if (mysql_query(m, sql) == 0)
		mysql_free_result(mysql_store_result(m));
}

/*
** MySQL has no partial index: due's claim reads (state, priority,
** due_at, id), so an empty claim over 20,000 future tasks and 20,000
** finished ones reads the range of due SCHEDULED rows only (none), where
** the same query kept off due's indexes reads the whole table.  The
** server's ANALYZE runs the claim's pick as mysql.c sends it (one
** priority, then due_at, id) and counts the rows it read (r_rows).
*/
static void my_partial_due_index(vctx *v, raw *r)
{
	static const char fill[] =
	    "INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"
	    " backoff_us, backoff_cap_us, created_at, updated_at)"
	    " WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g"
	    " WHERE x < 40000) SELECT 'idx', '', IF(x % 2 = 0, 'DONE',"
	    " 'SCHEDULED'), $1 + 3600000000, 5, 1000000, 3600000000, $1, $1"
	    " FROM g";
	static const char pick[] =
	    "SELECT id FROM due_task %s WHERE state = 'SCHEDULED' AND"
	    " priority = 0 AND due_at <= %lld ORDER BY due_at, id LIMIT 10"
	    " FOR UPDATE SKIP LOCKED";
	char sql[512];
	my_plan_t idx, scan;
	due_time now = 0;
	bool ok;

	my_quiet(r->my, "SET SESSION max_recursive_iterations = 100000");
	my_quiet(r->my, "SET SESSION cte_max_recursion_depth = 100000");
	ok = due_now(v->db, &now) == 0 &&
	     raw_exec(r, fill, 1, now, 0, NULL, NULL, 0) >= 0;
	my_quiet(r->my, "ANALYZE TABLE due_task");
	snprintf(sql, sizeof(sql), pick, "", (long long)now);
	ok = ok && my_plan(r->my, sql, &idx) == 0;
	snprintf(sql, sizeof(sql), pick,
		 "IGNORE INDEX (due_task_at, due_task_claim,"
		 " due_task_kind_claim, due_task_key)",
		 (long long)now);
	ok = ok && my_plan(r->my, sql, &scan) == 0;
	/* rows unknown (no ANALYZE on this server): the plan alone */
	bool counted = idx.rows < 0 || (idx.rows < 20 && scan.rows >= 20000);
	v_case(v, "boundary_partial_due_index",
	       ok && strcmp(idx.key, "due_task_claim") == 0 &&
		   strcmp(idx.access, "ALL") != 0 && counted,
	       "tasks=40000 future=20000 finished=20000 index=%s access=%s "
	       "rows_read=%ld pages=%ld without_due_indexes=[access=%s "
	       "rows_read=%ld pages=%ld]",
	       idx.key[0] ? idx.key : "none", idx.access[0] ? idx.access : "?",
	       idx.rows, idx.pages, scan.access[0] ? scan.access : "?",
	       scan.rows, scan.pages);
}
#endif

/*
** The due index is partial (WHERE state = 'SCHEDULED') and the claim
** compares due_at with a STABLE now(): an empty claim over 20,000 future
** tasks and 20,000 finished ones reads a handful of buffers.  The
** clock_timestamp() form cannot use the bound and filters every row.
*/
void v_boundary_partial_due_index(vctx *v)
{
	static const char fill_pg[] =
	    "INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"
	    " backoff_us, backoff_cap_us, created_at, updated_at)"
	    " SELECT 'idx', ''::bytea, CASE WHEN g % 2 = 0 THEN 'DONE' ELSE"
	    " 'SCHEDULED' END, now() + interval '1 hour', 5, 1000000, "
	    "3600000000,"
	    " now(), now() FROM generate_series(1, 40000) g";
	static const char fill_lite[] =
	    "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g"
	    " WHERE x < 40000) INSERT INTO due_task (kind, payload, state, "
	    "due_at,"
	    " max_attempts, backoff_us, backoff_cap_us, created_at, updated_at)"
	    " SELECT 'idx', x'', CASE WHEN x % 2 = 0 THEN 'DONE' ELSE "
	    "'SCHEDULED'"
	    " END, $1 + 3600000000, 5, 1000000, 3600000000, $1, $1 FROM g";
	static const char q_now[] =
	    "EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM due_task WHERE state ="
	    " 'SCHEDULED' AND due_at <= now() ORDER BY due_at LIMIT 10 FOR "
	    "UPDATE"
	    " SKIP LOCKED";
	static const char q_clock[] =
	    "EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM due_task WHERE state ="
	    " 'SCHEDULED' AND due_at <= clock_timestamp() ORDER BY due_at "
	    "LIMIT 10"
	    " FOR UPDATE SKIP LOCKED";
	static char p1[16384], p2[16384];
	raw r;
	bool ok;

	if (raw_open(v, &r) < 0) {
		v_case(v, "boundary_partial_due_index", false, "error=connect");
		return;
	}
	if (v->sqlite) {
		ok =
		    raw_exec(&r, fill_lite, 1, due_time_now_host(), 0, NULL,
			     NULL, 0) >= 0 &&
		    raw_text(
			&r,
			"EXPLAIN QUERY PLAN SELECT id FROM due_task WHERE state"
			" = 'SCHEDULED' AND priority = 0 AND due_at <= 1"
			" ORDER BY priority, due_at LIMIT 10",
			p1, sizeof(p1)) == 0;
		/* the claim's shape: one priority's due range of the
		   partial index of SCHEDULED tasks, due_task_claim (since
		   schema 7 there is no index on due_at alone) */
		bool uses = ok && strstr(p1, "USING INDEX due_task_claim"
					     " (priority=? AND due_at<?)");
		raw_close(&r);
		for (char *c = p1; *c; c++)
			if (*c == '\n')
				*c = ';';
		v_case(v, "boundary_partial_due_index", uses,
		       "tasks=40000 future=20000 finished=20000 plan=\"%s\"",
		       p1);
		return;
	}
#ifdef DUE_WITH_MYSQL
	if (r.my) {
		my_partial_due_index(v, &r);
		raw_close(&r);
		return;
	}
#endif
	ok = raw_exec(&r, fill_pg, 0, 0, 0, NULL, NULL, 0) >= 0 &&
	     raw_exec(&r, "ANALYZE due_task", 0, 0, 0, NULL, NULL, 0) >= 0 &&
	     raw_text(&r, q_now, p1, sizeof(p1)) == 0 &&
	     raw_text(&r, q_clock, p2, sizeof(p2)) == 0;
	raw_close(&r);
	bool idx = ok && strstr(p1, "Index Cond: (due_at <= now())") &&
		   strstr(p1, "due_task_due");
	long b_now = plan_buffers(p1), b_clock = plan_buffers(p2);
	long removed = rows_removed(p2);
	if (v->verbose)
		fprintf(stderr,
			"--- now() plan:\n%s--- clock_timestamp() plan:\n%s",
			p1, p2);
	v_case(v, "boundary_partial_due_index",
	       idx && b_now < 20 && removed == 20000 && b_clock > b_now,
	       "tasks=40000 future=20000 finished=20000 now_index_cond=%s "
	       "now_buffers=%ld clock_timestamp_buffers=%ld "
	       "clock_timestamp_rows_removed_by_filter=%ld",
	       idx ? "yes" : "no", b_now, b_clock, removed);
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
	raw a, b;
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
