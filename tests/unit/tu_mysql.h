/*
** tu_mysql.h - the MySQL/MariaDB fixture of the store suites: each fresh
** store is its own database due_t_<pid>_<n> on the server of
** DUE_TEST_MYSQL_URL (mysql://user[:password]@host[:port]/db[?socket=P]),
** dropped afterwards.  Included by test_util.h under DUE_WITH_MYSQL.
*/
#ifndef TU_MYSQL_H
#define TU_MYSQL_H

#include <mysql.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tu_mysql_db[64];

static inline const char *tu_mysql_unavailable(void)
{
	const char *u = getenv("DUE_TEST_MYSQL_URL");
	return u && *u ? NULL : "DUE_TEST_MYSQL_URL is not set";
}

/*
** Connect to the server of URL u (with its database when db is true).
** NULL with the error in err on failure.
*/
static inline MYSQL *tu_mysql_connect(const char *u, bool db, char *err,
				      size_t en)
{
	char user[128] = "root", pass[128] = "", host[256] = "127.0.0.1",
	     sock[512] = "";
	const char *p, *at, *slash, *q;
	char name[128] = "";
	unsigned port = 3306;
	MYSQL *m;

	if (!u || !(p = strstr(u, "//")) || !(slash = strchr(p + 2, '/'))) {
		snprintf(err, en, "bad URL %.100s", u ? u : "(none)");
		return NULL;
	}
	p += 2;
	at = memchr(p, '@', (size_t)(slash - p));
	if (at) {
		const char *c = memchr(p, ':', (size_t)(at - p));
		snprintf(user, sizeof(user), "%.*s", (int)((c ? c : at) - p),
			 p);
		if (c)
			snprintf(pass, sizeof(pass), "%.*s", (int)(at - c - 1),
				 c + 1);
		p = at + 1;
	}
	{
		const char *c = memchr(p, ':', (size_t)(slash - p));
		snprintf(host, sizeof(host), "%.*s", (int)((c ? c : slash) - p),
			 p);
		if (c)
			port = (unsigned)atoi(c + 1);
	}
	if ((q = strstr(slash, "?socket=")))
		snprintf(sock, sizeof(sock), "%s", q + 8);
	snprintf(name, sizeof(name), "%.*s", (int)strcspn(slash + 1, "?"),
		 slash + 1);
	if (!(m = mysql_init(NULL)))
		return NULL;
	if (!mysql_real_connect(m, *sock ? NULL : host, user,
				*pass ? pass : NULL, db ? name : NULL, port,
				*sock ? sock : NULL, 0)) {
		snprintf(err, en, "%s", mysql_error(m));
		mysql_close(m);
		return NULL;
	}
	return m;
}

/*
** Run one statement on the server of DUE_TEST_MYSQL_URL (no database
** selected).  0 or -1 with the error on stderr.
*/
static inline int tu_mysql_exec(const char *sql)
{
	char err[512];
	MYSQL *m = tu_mysql_connect(getenv("DUE_TEST_MYSQL_URL"), false, err,
				    sizeof(err));
	int ok = m && mysql_query(m, sql) == 0;

	if (!ok)
		fprintf(stderr, "mysql fixture: %s: %s\n", sql,
			m ? mysql_error(m) : err);
	if (m)
		mysql_close(m);
	return ok ? 0 : -1;
}

/*
** q in MySQL's word order: "WITH ... INSERT INTO t (...) SELECT ..." (the
** suites' PostgreSQL/SQLite order) becomes "INSERT INTO t (...) WITH ...
** SELECT ...".  Anything else is returned as it is.
*/
static inline const char *tu_mysql_dialect(const char *q, char *buf, size_t n)
{
	const char *ins = strstr(q, ") INSERT INTO "), *sel;

	if (strncmp(q, "WITH ", 5) != 0 || !ins ||
	    !(sel = strstr(ins, ") SELECT ")))
		return q;
	snprintf(buf, n, "%.*s %.*s%s", (int)(sel + 1 - (ins + 2)), ins + 2,
		 (int)(ins + 1 - q), q, sel + 1);
	return buf;
}

/*
** Run statement q on the store at url (the suites' direct SQL): 0 with
** the first column of the first row in val ("" for none or NULL), or -1
** with the error.  The session reads || as concatenation, as the other
** stores' SQL does.
*/
static inline int tu_mysql_run(const char *url, char *val, size_t n,
			       const char *q)
{
	MYSQL *m = tu_mysql_connect(url, true, val, n);
	char fix[4096];
	MYSQL_RES *r;
	MYSQL_ROW row;
	int ok;

	if (!m)
		return -1;
	/* the suites' generated rows (MariaDB's name, then MySQL's) */
	(void)mysql_query(m, "SET max_recursive_iterations = 100000");
	(void)mysql_query(m, "SET cte_max_recursion_depth = 100000");
	ok = mysql_query(m, "SET sql_mode = CONCAT(@@sql_mode,"
			    " ',PIPES_AS_CONCAT')") == 0 &&
	     mysql_query(m, tu_mysql_dialect(q, fix, sizeof(fix))) == 0;
	if (ok && (r = mysql_store_result(m))) {
		if ((row = mysql_fetch_row(r)) && row[0])
			snprintf(val, n, "%s", row[0]);
		mysql_free_result(r);
	}
	if (!ok)
		snprintf(val, n, "%s", mysql_error(m));
	mysql_close(m);
	return ok ? 0 : -1;
}

static inline int tu_mysql_fresh(char *url, size_t n, char *dir, size_t dn)
{
	static int counter;
	const char *base = getenv("DUE_TEST_MYSQL_URL");
	const char *p = strstr(base, "//"), *slash, *q;
	char sql[128];

	(void)dn;
	dir[0] = '\0';
	if (!p || !(slash = strchr(p + 2, '/')))
		return -1;
	snprintf(tu_mysql_db, sizeof(tu_mysql_db), "due_t_%d_%d", (int)getpid(),
		 ++counter);
	snprintf(sql, sizeof(sql),
		 "CREATE DATABASE %s CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
		 tu_mysql_db);
	if (tu_mysql_exec(sql) < 0)
		return -1;
	q = strchr(slash, '?');
	snprintf(url, n, "%.*s/%s%s", (int)(slash - base), base, tu_mysql_db,
		 q ? q : "");
	return 0;
}

static inline void tu_mysql_drop(const char *url, const char *dir)
{
	char sql[192];

	(void)url;
	(void)dir;
	/* a failed test may leave a transaction open on its tables: wait
	   for its metadata lock a while, not a year, then leave the rest */
	snprintf(sql, sizeof(sql),
		 "SET STATEMENT lock_wait_timeout = 20 FOR"
		 " DROP DATABASE IF EXISTS %s",
		 tu_mysql_db);
	tu_mysql_exec(sql);
}

#endif /* TU_MYSQL_H */
