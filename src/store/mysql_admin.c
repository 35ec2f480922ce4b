/*
** mysql_admin.c - the admin group of the MySQL/MariaDB store (store.h,
** due_store_admin): what `due verify`, `due bench` and the tests need of
** it besides the store.
**
** Scratch stores.  A scratch store is a database of its own on the URL's
** server (CREATE DATABASE `due_scratch_NAME`, which refuses one that
** exists, utf8mb4_bin as due's tables; the URL's user needs CREATE and
** DROP), dropped with DROP DATABASE, and only when it is empty or holds
** due's tables.  On a
** multi-host URL (Galera) the first node that answers makes it, as the
** store itself connects, and the database replicates.
**
** Counters.  SHOW GLOBAL STATUS: Questions (every statement) and the
** Com_* counts by statement kind.  Each reading counts itself in
** Questions and Com_show_status, so a session reports both less the
** readings it has made: the move between two readings is the store's.
**
** Every connection here is a plain Connector/C session on what the
** store's parser read from the URL, without the store's session
** settings, but with its bound: connecting, each read and each write
** within the URL's timeout= (10 s by default), in whole seconds, as
** mysql_conn.c sets it.  The raw SQL session of `due verify`'s
** controls turns each $N into a positional ? bound to parameter N (so
** "$2 = $2" binds it twice) and CAST(... AS bigint) into AS SIGNED;
** InnoDB locks rows, so a held row is what a stalled write waits on.
** MySQL has no partial index: the plan check runs the claim's pick
** through the server's ANALYZE and counts the rows it read.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mysql.h>

#include "base/base.h"
#include "store/mysql_conn.h"
#include "store/store.h"

struct due_store_sql {
	MYSQL *m;
};

struct due_store_srv {
	MYSQL *m;
	long long reads; /* SHOW STATUS run so far, this one included */
};

/*
** A connection to the server of url, on its database when with_db, to
** the first host that answers (as the store connects).  0 with *out, or
** DUE_ESTORE naming the last host's error.
*/
static int connect_url(MYSQL **out, const due_url *url, bool with_db)
{
	due_my_cfg *c = NULL;
	int64_t bound = due__admin_bound_us(url);
	unsigned secs = (unsigned)((bound + 999999) / 1000000);
	int rc;

	*out = NULL;
	if ((rc = due__my_parse_url(&c, url->text, url->rest)) < 0) {
		due__my_cfg_free(c);
		return rc;
	}
	rc = due__error_set(DUE_ESTORE, "mysql store: no host to connect to");
	for (size_t i = 0; i < c->n_hosts && !*out; i++) {
		MYSQL *m = mysql_init(NULL);
		if (!m) {
			rc = due__error_set(DUE_ENOMEM, "out of memory");
			break;
		}
		/* the bound, as the store's own sessions (mysql_conn.c) */
		mysql_optionsv(m, MYSQL_OPT_CONNECT_TIMEOUT, &secs);
		mysql_optionsv(m, MYSQL_OPT_READ_TIMEOUT, &secs);
		mysql_optionsv(m, MYSQL_OPT_WRITE_TIMEOUT, &secs);
		if (mysql_real_connect(
			m, c->socket ? NULL : c->hosts[i], c->user, c->password,
			with_db ? c->db : NULL, c->socket ? 0 : c->ports[i],
			c->socket, 0)) {
			*out = m;
			rc = 0;
			break;
		}
		rc = due__error_set(DUE_ESTORE, "mysql store: %s",
				    mysql_error(m));
		mysql_close(m);
	}
	due__my_cfg_free(c);
	return rc;
}

/*
** Statements (no rows) on a new connection to url's server; a failure
** is said as "cannot DOING: why" (DUE_ESTORE).
*/
static int commands(const due_url *url, const char *const *sql, size_t n,
		    const char *doing)
{
	MYSQL *m;
	int rc = connect_url(&m, url, false);

	for (size_t i = 0; rc == 0 && i < n; i++)
		if (mysql_query(m, sql[i]) != 0)
			rc = due__error_set(DUE_ESTORE, "mysql store: %s",
					    mysql_errno(m) == 1007 /* exists */
						? "it already exists"
						: mysql_error(m));
	if (m)
		mysql_close(m);
	if (rc < 0 && rc != DUE_ENOMEM) {
		char why[768];
		snprintf(why, sizeof(why), "%s", due_error_last());
		rc = due__error_set(DUE_ESTORE, "cannot %s: %s", doing, why);
	}
	return rc;
}

static int my_scratch_make(const due_url *url, const char *name,
			   const char *dir, char *out, size_t n)
{
	char sql[160], doing[128];
	const char *one[] = {sql};
	int rc;

	(void)dir;
	snprintf(sql, sizeof(sql),
		 "CREATE DATABASE `%s` CHARACTER SET utf8mb4 COLLATE "
		 "utf8mb4_bin",
		 name);
	snprintf(doing, sizeof(doing), "make scratch database %s", name);
	if ((rc = commands(url, one, 1, doing)) < 0)
		return rc;
	if ((rc = due__url_set_path(out, n, url->text, name)) < 0) {
		snprintf(sql, sizeof(sql), "DROP DATABASE `%s`", name);
		(void)commands(url, one, 1, doing);
	}
	return rc;
}

/*
** Whether database name may be dropped: absent (1: nothing to do), or
** empty or holding due_task (0); DUE_ESTORE otherwise or on failure.
*/
static int droppable(const due_url *url, const char *name, const char *doing)
{
	char sql[512];
	MYSQL *m;
	MYSQL_RES *r = NULL;
	MYSQL_ROW row;
	int rc = connect_url(&m, url, false);

	snprintf(sql, sizeof(sql),
		 "SELECT (SELECT COUNT(*) FROM information_schema.SCHEMATA"
		 " WHERE SCHEMA_NAME = '%s'), (SELECT COUNT(*) FROM"
		 " information_schema.TABLES WHERE TABLE_SCHEMA = '%s'),"
		 " (SELECT COUNT(*) FROM information_schema.TABLES WHERE"
		 " TABLE_SCHEMA = '%s' AND TABLE_NAME = 'due_task')",
		 name, name, name);
	if (rc < 0) {
		char why[768];
		snprintf(why, sizeof(why), "%s", due_error_last());
		return due__error_set(DUE_ESTORE, "cannot %s: %s", doing, why);
	}
	if (rc == 0 &&
	    (mysql_query(m, sql) != 0 || !(r = mysql_store_result(m)) ||
	     !(row = mysql_fetch_row(r)) || !row[0] || !row[1] || !row[2]))
		rc = due__error_set(DUE_ESTORE, "cannot %s: mysql store: %s",
				    doing, mysql_error(m));
	else if (rc == 0 && atoi(row[0]) == 0)
		rc = 1;
	else if (rc == 0 && atoi(row[1]) > 0 && atoi(row[2]) == 0)
		rc = due__error_set(DUE_ESTORE,
				    "will not drop database %s: it holds "
				    "tables but no due store",
				    name);
	if (r)
		mysql_free_result(r);
	if (m)
		mysql_close(m);
	return rc;
}

static int my_scratch_drop(const due_url *url, const char *name,
			   const char *dir)
{
	char sql[160], wait[64], doing[128];
	/* a failed test may leave a transaction open on its tables: wait
	   for its metadata lock within the bound, then leave the rest */
	const char *two[] = {wait, sql};
	int64_t secs = due__admin_bound_us(url) / 1000000 - 1;
	int rc;

	(void)dir;
	snprintf(doing, sizeof(doing), "drop scratch database %s", name);
	if ((rc = droppable(url, name, doing)) != 0)
		return rc > 0 ? 0 : rc;
	snprintf(wait, sizeof(wait), "SET SESSION lock_wait_timeout = %lld",
		 (long long)(secs < 1 ? 1 : secs));
	snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`", name);
	return commands(url, two, 2, doing);
}

static int my_server_open(due_store_srv **out, const due_url *url)
{
	if (!(*out = calloc(1, sizeof(**out))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	return connect_url(&(*out)->m, url, false);
}

static int my_server_read(due_store_srv *s, due_counters *out)
{
	static const char q[] =
	    "SHOW GLOBAL STATUS WHERE Variable_name = 'Questions'"
	    " OR Variable_name LIKE 'Com\\_%'";
	MYSQL_RES *r;
	int rc = 0;

	if (mysql_query(s->m, q) || !(r = mysql_store_result(s->m)))
		return due__error_set(DUE_ESTORE, "mysql store: %s",
				      mysql_error(s->m));
	s->reads++;
	for (MYSQL_ROW row; rc == 0 && (row = mysql_fetch_row(r));) {
		double v = (double)strtoll(row[1], NULL, 10);
		bool all = strcmp(row[0], "Questions") == 0;
		if (all || strcmp(row[0], "Com_show_status") == 0)
			v -= (double)s->reads; /* this session's readings */
		rc = due__counter_add(out, row[0], v,
				      all ? DUE_COUNTER_QUERIES
					  : DUE_COUNTER_QUERY);
	}
	mysql_free_result(r);
	return rc;
}

static void my_server_close(due_store_srv *s)
{
	if (s && s->m)
		mysql_close(s->m);
	free(s);
}

static int my_sql_open(due_store_sql **out, const due_url *url)
{
	int rc;

	if (!(*out = calloc(1, sizeof(**out))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	if ((rc = connect_url(&(*out)->m, url, true)) != 0)
		return rc;
	/* the shared dialect: || concatenates, and a recursive WITH makes
	   the rows a test asks for (MariaDB's name, then MySQL's) */
	(void)mysql_query((*out)->m, "SET max_recursive_iterations = 100000");
	(void)mysql_query((*out)->m, "SET cte_max_recursion_depth = 100000");
	if (mysql_query((*out)->m, "SET sql_mode = CONCAT(@@sql_mode, "
				   "',PIPES_AS_CONCAT')") != 0)
		return due__error_set(DUE_ESTORE, "mysql: %s",
				      mysql_error((*out)->m));
	return 0;
}

/*
** sql in MySQL's word order: "WITH ... INSERT INTO t (...) SELECT ..."
** (the shared dialect's order, PostgreSQL's and SQLite's) becomes
** "INSERT INTO t (...) WITH ... SELECT ...", into buf (n bytes).
** Anything else is sql as it is; NULL if it does not fit.
*/
static const char *my_order(const char *sql, char *buf, size_t n)
{
	const char *ins = strstr(sql, ") INSERT INTO "), *sel;

	if (strncmp(sql, "WITH ", 5) != 0 || !ins ||
	    !(sel = strstr(ins, ") SELECT ")))
		return sql;
	int w = snprintf(buf, n, "%.*s %.*s%s", (int)(sel + 1 - (ins + 2)),
			 ins + 2, (int)(ins + 1 - sql), sql, sel + 1);
	return w >= 0 && (size_t)w < n ? buf : NULL;
}

static void my_sql_close(due_store_sql *q)
{
	if (q && q->m)
		mysql_close(q->m);
	free(q);
}

/* The text of sql for MySQL, with its binds in `in` (nb of them). */
static bool my_text(const char *sql, char *text, size_t n, MYSQL_BIND *in,
		    size_t *nb, int64_t *vals, const char *p3,
		    unsigned long *p3len)
{
	size_t i = 0;
	const char *q = sql;

	*nb = 0;
	for (; *q && i + 16 < n; q++) {
		if (strncmp(q, "AS bigint)", 10) == 0) {
			i += (size_t)snprintf(text + i, n - i, "AS SIGNED)");
			q += 9;
		} else if (*q == '$' && q[1] >= '1' && q[1] <= '3' && *nb < 8) {
			int k = *++q - '1';
			text[i++] = '?';
			if (k == 2) {
				in[*nb].buffer_type = MYSQL_TYPE_STRING;
				in[*nb].buffer = (void *)p3;
				in[*nb].buffer_length = *p3len;
				in[*nb].length = p3len;
			} else {
				in[*nb].buffer_type = MYSQL_TYPE_LONGLONG;
				in[*nb].buffer = &vals[k];
			}
			(*nb)++;
		} else {
			text[i++] = *q;
		}
	}
	text[i] = '\0';
	return *q == '\0';
}

static int my_sql_exec(due_store_sql *q, const char *sql, int nparams,
		       int64_t p1, int64_t p2, const char *p3, int64_t *out,
		       int cap)
{
	char text[8192], order[8192];
	MYSQL_BIND in[8], col;
	int64_t vals[3] = {p1, p2, 0}, v = 0;
	unsigned long p3len = p3 ? (unsigned long)strlen(p3) : 0;
	size_t nb = 0;
	int n = -1;
	MYSQL_STMT *st = mysql_stmt_init(q->m);

	(void)nparams; /* each $N binds its own */
	memset(in, 0, sizeof(in));
	const char *ordered = my_order(sql, order, sizeof(order));
	if (!ordered ||
	    !my_text(ordered, text, sizeof(text), in, &nb, vals, p3, &p3len)) {
		due__error_set(DUE_EINVAL,
			       "mysql: a statement of %zu bytes "
			       "is too long for a raw SQL session",
			       strlen(sql));
		goto done;
	}
	if (!st || mysql_stmt_prepare(st, text, strlen(text)) != 0 ||
	    (nb && mysql_stmt_bind_param(st, in) != 0) ||
	    mysql_stmt_execute(st) != 0) {
		due__error_set(DUE_ESTORE, "mysql: %s",
			       st ? mysql_stmt_error(st) : mysql_error(q->m));
		goto done;
	}
	n = 0;
	if (mysql_stmt_field_count(st) > 0) {
		memset(&col, 0, sizeof(col));
		col.buffer_type = MYSQL_TYPE_LONGLONG;
		col.buffer = &v;
		if (mysql_stmt_bind_result(st, &col) != 0) {
			due__error_set(DUE_ESTORE, "mysql: %s",
				       mysql_stmt_error(st));
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

static int my_sql_hold(due_store_sql *q, due_id id, const char **lock)
{
	return due__sql_hold_row(q, id, lock, my_sql_exec);
}

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

static int my_plan(MYSQL *m, const char *sql, my_plan_t *p, char *plans,
		   size_t pn)
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
	if (plans) {
		size_t off = strlen(plans);
		snprintf(plans + off, pn - off, "%s\n", row[0]);
	}
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
static int my_plan_check(due_store_sql *q, due_time now, bool *pass,
			 char *detail, size_t dn, char *plans, size_t pn)
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
	my_plan_t idx = {.rows = -1, .pages = -1}, scan = idx;
	bool ok;

	my_quiet(q->m, "SET SESSION max_recursive_iterations = 100000");
	my_quiet(q->m, "SET SESSION cte_max_recursion_depth = 100000");
	ok = my_sql_exec(q, fill, 1, now, 0, NULL, NULL, 0) >= 0;
	my_quiet(q->m, "ANALYZE TABLE due_task");
	snprintf(sql, sizeof(sql), pick, "", (long long)now);
	ok = ok && my_plan(q->m, sql, &idx, plans, pn) == 0;
	snprintf(sql, sizeof(sql), pick,
		 "IGNORE INDEX (due_task_at, due_task_claim,"
		 " due_task_kind_claim, due_task_key)",
		 (long long)now);
	ok = ok && my_plan(q->m, sql, &scan, plans, pn) == 0;
	/* rows unknown (no ANALYZE on this server): the plan alone */
	bool counted = idx.rows < 0 || (idx.rows < 20 && scan.rows >= 20000);
	*pass = ok && strcmp(idx.key, "due_task_claim") == 0 &&
		strcmp(idx.access, "ALL") != 0 && counted;
	snprintf(detail, dn,
		 "tasks=40000 future=20000 finished=20000 index=%s access=%s "
		 "rows_read=%ld pages=%ld without_due_indexes=[access=%s "
		 "rows_read=%ld pages=%ld]",
		 idx.key[0] ? idx.key : "none",
		 idx.access[0] ? idx.access : "?", idx.rows, idx.pages,
		 scan.access[0] ? scan.access : "?", scan.rows, scan.pages);
	return 0;
}

/* Every method is my_<method> (store.h lists them). */
#define OP(m) .m = my_##m,
const due_store_admin due__store_mysql_admin = {
    .test_env = "DUE_TEST_MYSQL_URL",
    .counters = DUE_COUNTER_QUERY | DUE_COUNTER_QUERIES,
    .scratch_root = due__scratch_root_tmp,
    .scratch_make = my_scratch_make,
    .scratch_drop = my_scratch_drop,
    DUE_STORE_SQL_METHODS(OP) DUE_STORE_STALL_METHODS(OP)
	DUE_STORE_PLAN_METHODS(OP) OP(server_open) OP(server_read)
	    OP(server_close)};
#undef OP
