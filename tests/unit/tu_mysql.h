/*
** tu_mysql.h - raw SQL on a MySQL/MariaDB store for the tests that read
** or write its tables themselves (test_store.c's direct SQL,
** test_mysql_store.c).  The fixture itself (a fresh store per test: a
** scratch database) is the backend's (test_util.h, core/admin.h).
** Included by test_util.h under DUE_WITH_MYSQL.
*/
#ifndef TU_MYSQL_H
#define TU_MYSQL_H

#include <mysql.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

#endif /* TU_MYSQL_H */
