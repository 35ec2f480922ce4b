/*
** sqlite_admin.c - the admin group of the SQLite store (store.h,
** due_store_admin): what `due verify`, `due bench` and the tests need of
** it besides the store.
**
** Scratch stores.  A SQLite store is a file, so a scratch store is a file
** `due_scratch_NAME.db` in a directory that exists (--dir; make creates
** the file, empty, and refuses one that exists): beside the user's file
** (scratch_root: "PATH.scratch-XXXXXX", the same file system and the same
** host clock) or, with no store of the user's, wherever the caller says.
** The user's options (?sync=, ?busy_ms=, timeout=) carry over, so a
** case measures the store as it was given.  Dropping removes the file and
** its side files (-wal, -shm, -journal, -wake, -done), unless the file is
** neither empty nor a database of due's or of no tables; the directory
** is the caller's.  The server has no counters of its own: the process counts
** SQLite's work itself (due_store_work_read).
**
** The raw SQL session is a plain connection to the file (sqlite3_open,
** a 30 s busy timeout), not the store's: the controls of `due verify`
** write their own tables with it, in SQL written with $N placeholders,
** which become SQLite's ?N here.  SQLite has no row locks: one writer
** holds the whole database (BEGIN IMMEDIATE), which is what a stalled
** write waits on (sql_hold).  The plan check reads EXPLAIN QUERY PLAN of
** the claim's shape over the partial index of SCHEDULED tasks.
*/
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "store/sqlite_conn.h"
#include "store/store.h"

struct due_store_sql {
	sqlite3 *db;
};

struct due_store_srv {
	int none;
};

/* The file of a store URL, by the store's own parser; NULL on error. */
static char *file_of(const due_url *url)
{
	void *cfg = NULL;
	char *path = NULL;
	const char *p;

	if (due__sq_parse_url(&cfg, url) == 0 && (p = due__sq_cfg_path(cfg)))
		path = due__strdup_n(p, strlen(p));
	else if (cfg)
		due__error_set(DUE_ENOMEM, "out of memory");
	due__sq_free_cfg(cfg);
	return path;
}

static int sq_scratch_root(const due_url *url, char *out, size_t n)
{
	char *path;

	if (!url)
		return due__scratch_root_tmp(url, out, n);
	if (!(path = file_of(url)))
		return DUE_EINVAL;
	if (strlen(path) > 900) {
		free(path);
		return due__error_set(DUE_EINVAL, "store path too long");
	}
	snprintf(out, n, "%s.scratch-XXXXXX", path);
	free(path);
	return 0;
}

/* The file of scratch store name in dir into path; DUE_EINVAL when there
   is no dir, or it is not a directory. */
static int scratch_file(const char *dir, const char *name, bool make,
			char *path, size_t n)
{
	struct stat st;
	int w;

	if (!dir || !*dir)
		return due__error_set(DUE_EINVAL,
				      "a SQLite scratch store is %s in a "
				      "directory: give --dir DIR",
				      make ? "made" : "dropped");
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return due__error_set(
		    DUE_EINVAL, "scratch directory %s: %s", dir,
		    stat(dir, &st) != 0 ? strerror(errno) : "not a directory");
	w = snprintf(path, n, "%s/%s.db", dir, name);
	if (w < 0 || (size_t)w >= n)
		return due__error_set(DUE_EINVAL,
				      "scratch directory %.200s: "
				      "too long",
				      dir);
	return 0;
}

static int sq_scratch_make(const due_url *url, const char *name,
			   const char *dir, char *out, size_t n)
{
	const char *q = url ? strchr(url->text, '?') : NULL;
	char path[4096];
	int rc = scratch_file(dir, name, true, path, sizeof(path)), fd, w;

	if (rc < 0)
		return rc;
	/* the file is made here, so a name that exists is never taken */
	if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600)) < 0)
		return due__error_set(
		    DUE_ESTORE, "cannot make SQLite scratch store %s: %s", path,
		    errno == EEXIST ? "it already exists" : strerror(errno));
	close(fd);
	w = snprintf(out, n, "sqlite:%s%s", path, q ? q : "");
	if (w < 0 || (size_t)w >= n) {
		unlink(path);
		return due__error_set(DUE_EINVAL, "scratch store URL too long");
	}
	return 0;
}

/*
** Whether the file at path may be dropped: empty (made, never opened) or
** a SQLite database of due's (due_task) or of no tables.  0, or
** DUE_ESTORE saying why not.
*/
static int is_scratch(const char *path)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	struct stat sb;
	int all = -1, due = 0;

	if (stat(path, &sb) == 0 && sb.st_size == 0)
		return 0;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) ==
		SQLITE_OK &&
	    sqlite3_prepare_v2(db,
			       "SELECT count(*), count(*) FILTER (WHERE name ="
			       " 'due_task') FROM sqlite_master WHERE type ="
			       " 'table'",
			       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		all = sqlite3_column_int(st, 0);
		due = sqlite3_column_int(st, 1);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	if (all < 0)
		return due__error_set(DUE_ESTORE,
				      "will not drop %s: not a SQLite "
				      "database",
				      path);
	if (all > 0 && !due)
		return due__error_set(DUE_ESTORE,
				      "will not drop %s: it holds tables but "
				      "no due store",
				      path);
	return 0;
}

static int sq_scratch_drop(const due_url *url, const char *name,
			   const char *dir)
{
	static const char *const side[] = {"",	       "-wal",	"-shm",
					   "-journal", "-wake", "-done"};
	char base[4096], path[4200];
	int rc = scratch_file(dir, name, false, base, sizeof(base));

	(void)url;
	if (rc < 0)
		return rc;
	if (access(base, F_OK) == 0 && (rc = is_scratch(base)) < 0)
		return rc;
	for (size_t i = 0; i < sizeof(side) / sizeof(side[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", base, side[i]);
		if (unlink(path) != 0 && errno != ENOENT)
			rc = due__error_set(DUE_ESTORE, "cannot remove %s: %s",
					    path, strerror(errno));
	}
	return rc;
}

static int sq_server_open(due_store_srv **out, const due_url *url)
{
	(void)url;
	if (!(*out = calloc(1, sizeof(**out))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	return 0;
}

static int sq_server_read(due_store_srv *s, due_counters *out)
{
	(void)s;
	(void)out;
	return 0;
}

static void sq_server_close(due_store_srv *s) { free(s); }

static int sq_sql_open(due_store_sql **out, const due_url *url)
{
	due_store_sql *q = calloc(1, sizeof(*q));
	char *path = file_of(url);
	int rc = 0;

	*out = q;
	if (!q || !path)
		rc = q ? DUE_EINVAL
		       : due__error_set(DUE_ENOMEM, "out of memory");
	else if (sqlite3_open(path, &q->db) != SQLITE_OK)
		rc = due__error_set(DUE_ESTORE, "sqlite: %s: %s", path,
				    sqlite3_errmsg(q->db));
	else
		sqlite3_busy_timeout(q->db, 30000);
	free(path);
	return rc;
}

static void sq_sql_close(due_store_sql *q)
{
	if (q)
		sqlite3_close(q->db);
	free(q);
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

static int sq_sql_exec(due_store_sql *q, const char *sql, int nparams,
		       int64_t p1, int64_t p2, const char *p3, int64_t *out,
		       int cap)
{
	char text[8192];
	const char *lite = lite_params(sql, text, sizeof(text));
	sqlite3_stmt *st;
	int rc, n = 0;

	if (!lite) {
		due__error_set(DUE_EINVAL,
			       "sqlite: a statement of %zu bytes "
			       "is too long for a raw SQL session",
			       strlen(sql));
		return -1;
	}
	if (sqlite3_prepare_v2(q->db, lite, -1, &st, NULL) != SQLITE_OK) {
		due__error_set(DUE_ESTORE, "sqlite: %s", sqlite3_errmsg(q->db));
		return -1;
	}
	if (nparams > 0)
		sqlite3_bind_int64(st, 1, p1);
	if (nparams > 1)
		sqlite3_bind_int64(st, 2, p2);
	if (nparams > 2)
		sqlite3_bind_text(st, 3, p3, -1, SQLITE_TRANSIENT);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (out && n < cap)
			out[n++] = sqlite3_column_int64(st, 0);
	if (rc != SQLITE_DONE)
		due__error_set(DUE_ESTORE, "sqlite: %s", sqlite3_errmsg(q->db));
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? n : -1;
}

static int sq_sql_hold(due_store_sql *q, due_id id, const char **lock)
{
	(void)id; /* one lock for every row */
	*lock = "write_lock";
	return sq_sql_exec(q, "BEGIN IMMEDIATE", 0, 0, 0, NULL, NULL, 0) >= 0
		   ? 0
		   : -1;
}

/* The last column (EXPLAIN QUERY PLAN: detail) of every row, ';'-joined. */
static int plan_text(sqlite3 *db, const char *sql, char *buf, size_t n)
{
	sqlite3_stmt *st;
	size_t off = 0;

	buf[0] = '\0';
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	int col = sqlite3_column_count(st) - 1;
	while (sqlite3_step(st) == SQLITE_ROW && off < n)
		off += (size_t)snprintf(
		    buf + off, n - off, "%s;",
		    (const char *)sqlite3_column_text(st, col));
	sqlite3_finalize(st);
	return 0;
}

/*
** The claim's shape: one priority's due range of the partial index of
** SCHEDULED tasks, due_task_claim (since schema 7 there is no index on
** due_at alone).
*/
static int sq_plan_check(due_store_sql *q, due_time now, bool *pass,
			 char *detail, size_t dn, char *plans, size_t pn)
{
	static const char fill[] =
	    "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g"
	    " WHERE x < 40000) INSERT INTO due_task (kind, payload, state, "
	    "due_at,"
	    " max_attempts, backoff_us, backoff_cap_us, created_at, updated_at)"
	    " SELECT 'idx', x'', CASE WHEN x % 2 = 0 THEN 'DONE' ELSE "
	    "'SCHEDULED'"
	    " END, $1 + 3600000000, 5, 1000000, 3600000000, $1, $1 FROM g";
	char plan[16384];
	bool ok;

	ok = sq_sql_exec(q, fill, 1, now, 0, NULL, NULL, 0) >= 0 &&
	     plan_text(q->db,
		       "EXPLAIN QUERY PLAN SELECT id FROM due_task WHERE state"
		       " = 'SCHEDULED' AND priority = 0 AND due_at <= 1"
		       " ORDER BY priority, due_at LIMIT 10",
		       plan, sizeof(plan)) == 0;
	*pass = ok && strstr(plan, "USING INDEX due_task_claim"
				   " (priority=? AND due_at<?)");
	snprintf(detail, dn,
		 "tasks=40000 future=20000 finished=20000 plan=\"%s\"", plan);
	if (plans)
		snprintf(plans, pn, "%s\n", plan);
	return 0;
}

/*
** SQLite's memory statistics take a global mutex around every
** sqlite3_malloc and free, and nothing in due reads them (a library must
** not turn them off for its host; the due executable may).  Before any
** other SQLite call, as sqlite3_config() requires.  -7 % CPU per task in
** a SQLite drain (docs/internals/store.md).
*/
static void sq_process_own(void) { sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }

/* Every method is sq_<method> (store.h lists them). */
#define OP(m) .m = sq_##m,
const due_store_admin due__store_sqlite_admin = {
    .process_own = sq_process_own,
    .no_row_locks = "sqlite_has_no_row_locks (one writer holds the whole "
		    "database; claims cannot overlap)",
    DUE_STORE_ADMIN_METHODS(OP) DUE_STORE_SQL_METHODS(OP)
	DUE_STORE_STALL_METHODS(OP) DUE_STORE_PLAN_METHODS(OP)};
#undef OP
