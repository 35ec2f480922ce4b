/*
** sqlite_conn.c - the SQLite connection under sqlite.c (see
** sqlite_conn.h): the URL and its options, open, errors, the statement
** cache, transactions, the wake file and the row cursor.
**
** URL (the backend's parse_url; url.c has split off the scheme):
**   sqlite:PATH            relative or absolute path
**   sqlite:///abs/path     absolute path, URL style
**   ?sync=full|normal      durability (default full)
**   ?busy_ms=N             how long a writer waits for the file lock
** Unknown options are errors that name them: a typo in `sync=norml` must
** not silently give a different durability.
**
** Transactions.  Every write is one BEGIN IMMEDIATE transaction, which
** takes SQLite's single writer lock up front; the busy handler below waits
** for it in short steps, because our transactions are short.
**
** Errors.  due__sq_error is the one translator of SQLite's codes; its
** message names the store's file, the step and the cause beneath an I/O
** error (e.g. "sqlite store '/var/due.db': commit: disk I/O error (write:
** File too large)").  A write that fails (a full disk, an I/O error) fails
** its COMMIT; SQLite rolls the transaction back and so do we
** (due__sq_commit), so the handle is ready for the next call and nothing
** of the failed transaction is in the file.  (A failed fsync is the one
** ambiguity: the commit's frames may be in the -wal, and a later recovery
** may find it committed although it was reported failed; no acknowledged
** change is ever lost.)
**
** Read-only stores.  A store this user cannot write still answers reads
** (see "Read-only stores" below, at open); writes are refused up front.
**
** Wake-ups.  Every transaction that may make work for another process
** touches the file "<store>-wake" after it commits (due__sq_commit_wake).
** Listeners watch that file with inotify, which reaches every process on
** the host.  The file carries no data and a lost wake-up costs only
** lateness: workers still poll, slowly.  So touching it never blocks and
** never fails a commit: whatever is at that path and is not a regular
** file (a FIFO, a symlink, a device) is left alone (open_wake).
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "store/sqlite_conn.h"

/* ------------------------------------------------------------------ */
/* Errors and statements                                               */
/* ------------------------------------------------------------------ */

/* The due code of a native SQLite result code. */
static int code_of(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED: return DUE_EBUSY;
	case SQLITE_NOMEM: return DUE_ENOMEM;
	case SQLITE_CONSTRAINT: return DUE_ECONFLICT;
	case SQLITE_TOOBIG: return DUE_ETOOBIG;
	case SQLITE_IOERR:
	case SQLITE_CANTOPEN:
	case SQLITE_READONLY:
	case SQLITE_FULL:
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
	case SQLITE_PERM: return DUE_ESTORE;
	default: return DUE_ERROR;
	}
}

/* The step of an I/O error, from SQLite's extended code; NULL: unknown. */
static const char *io_step(int ext)
{
	switch (ext) {
	case SQLITE_IOERR_READ:
	case SQLITE_IOERR_SHORT_READ: return "read";
	case SQLITE_IOERR_WRITE: return "write";
	case SQLITE_IOERR_FSYNC:
	case SQLITE_IOERR_DIR_FSYNC: return "sync";
	case SQLITE_IOERR_TRUNCATE: return "truncate";
	case SQLITE_IOERR_SHMOPEN:
	case SQLITE_IOERR_SHMSIZE:
	case SQLITE_IOERR_SHMMAP: return "shared-memory (-shm) file";
	case SQLITE_IOERR_DELETE: return "delete";
	default: return NULL;
	}
}

/*
** The errno beneath an I/O error.  SQLite keeps one per connection, read
** when the statement failed, which a later call may have cleared; each
** file also keeps the errno of its last failure, so ask the database file
** and then its journal (the -wal, where most writes go).  0: none known.
*/
static int io_errno(sqlite3 *db)
{
	sqlite3_file *j = NULL;
	int e = sqlite3_system_errno(db);

	if (e <= 0)
		sqlite3_file_control(db, "main", SQLITE_FCNTL_LAST_ERRNO, &e);
	if (e <= 0 &&
	    sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER,
				 &j) == SQLITE_OK &&
	    j && j->pMethods)
		j->pMethods->xFileControl(j, SQLITE_FCNTL_LAST_ERRNO, &e);
	return e > 0 ? e : 0;
}

/*
** What lies beneath a failure, into buf, e.g. " (write: File too large)";
** "" when there is nothing to add.  SQLITE_FULL's own text already says
** "database or disk is full"; a write-protected store says so; an I/O
** error says its step and the errno.  (A CANTOPEN's errno is the last of
** SQLite's retries, ENOENT of the read-only retry after EACCES: not told.)
*/
static void cause_of(sqlite3 *db, int rc, char *buf, size_t n)
{
	const char *step = io_step(db ? sqlite3_extended_errcode(db) : rc);
	int e = db && (rc & 0xff) == SQLITE_IOERR ? io_errno(db) : 0;

	buf[0] = '\0';
	if ((rc & 0xff) == SQLITE_READONLY)
		snprintf(buf, n, " (the store is read-only to this user)");
	else if ((rc & 0xff) != SQLITE_IOERR)
		return;
	else if (step && e)
		snprintf(buf, n, " (%s: %s)", step, strerror(e));
	else if (step || e)
		snprintf(buf, n, " (%s)", step ? step : strerror(e));
}

int due__sq_error(due_store *s, int rc, const char *what)
{
	sqlite3 *db = s ? s->db : NULL;
	const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
	char cause[128];

	cause_of(db, rc, cause, sizeof(cause));
	if (s && s->path && (rc & 0xff) == SQLITE_BUSY) {
		char dur[48];
		due__bound_format(dur, sizeof(dur), (int64_t)s->busy_ms * 1000);
		return due__error_set(DUE_EBUSY,
				      "no answer from the store at %s in %s: "
				      "%s: database is locked (another "
				      "process holds its write lock; the URL's "
				      "timeout= or busy_ms= waits longer)",
				      s->path, dur, what);
	}
	if (s && s->path)
		return due__error_set(code_of(rc),
				      "sqlite store '%s': %s: %s%s", s->path,
				      what, msg, cause);
	return due__error_set(code_of(rc), "sqlite store: %s: %s%s", what, msg,
			      cause);
}

sqlite3_stmt *due__sq_stmt(due_store *s, int id, const char *sql)
{
	sqlite3_stmt *st = s->st[id];
	int rc;

	if (st) {
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
		due__sq_work_use(s, st);
		return st;
	}
	rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
				&s->st[id], NULL);
	if (rc != SQLITE_OK) {
		due__sq_error(s, rc, "prepare");
		return NULL;
	}
	due__sq_work_use(s, s->st[id]);
	return s->st[id];
}

void due__sq_work_take(due_store *s, sqlite3_stmt *st)
{
	if (st)
		s->w_steps += (uint64_t)sqlite3_stmt_status(
		    st, SQLITE_STMTSTATUS_VM_STEP, 1);
}

void due__sq_work_use(due_store *s, sqlite3_stmt *st)
{
	s->w_stmts++;
	due__sq_work_take(s, st);
}

void due__sq_work_flush(due_store *s)
{
	int64_t t = sqlite3_total_changes64(s->db);

	/* a connection opened again (immutable) counts from 0 */
	due__work_add(s->w_stmts, s->w_steps,
		      (uint64_t)(t >= s->w_changes ? t - s->w_changes : t));
	s->w_stmts = s->w_steps = 0;
	s->w_changes = t;
}

int due__sq_exec(due_store *s, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : due__sq_error(s, rc, what);
}

/* BEGIN IMMEDIATE (0) or COMMIT (1), prepared once like any statement. */
static int tx(due_store *s, int which, const char *what)
{
	static const char *const sql[2] = {"BEGIN IMMEDIATE", "COMMIT"};
	int rc;

	if (!s->tx[which] &&
	    (rc = sqlite3_prepare_v3(s->db, sql[which], -1,
				     SQLITE_PREPARE_PERSISTENT, &s->tx[which],
				     NULL)) != SQLITE_OK)
		return due__sq_error(s, rc, "prepare");
	due__sq_work_use(s, s->tx[which]);
	return due__sq_exec(s, s->tx[which], what);
}

int due__sq_begin(due_store *s)
{
	if (s->readonly)
		return due__error_set(
		    DUE_ESTORE,
		    "sqlite store '%s' is read-only to this user: changing it "
		    "needs write access to the file and to its directory",
		    s->path);
	s->wake_pending = false;
	return tx(s, 0, "begin");
}

int due__sq_commit(due_store *s)
{
	bool wake = s->wake_pending;
	int rc;

	s->wake_pending = false;
	if ((rc = tx(s, 1, "commit")) < 0) {
		due__sq_rollback(s);
		return rc;
	}
	due__sq_work_flush(s);
	if (wake)
		due__sq_notify(s);
	return 0;
}

int due__sq_commit_wake(due_store *s)
{
	s->wake_pending = true;
	return due__sq_commit(s);
}

int due__sq_commit_done(due_store *s, bool done)
{
	int rc = due__sq_commit(s);
	if (rc == 0 && done)
		due__sq_notify_done(s);
	return rc;
}

void due__sq_rollback(due_store *s)
{
	s->wake_pending = false;
	if (sqlite3_get_autocommit(s->db))
		return;
	sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
	s->w_stmts++;
	due__sq_work_flush(s);
}

/*
** Open the wake file for touching, creating it when missing, without ever
** blocking: anyone who can write the directory can put a FIFO there (or
** a symlink, or a device node), and a plain open(O_WRONLY) of a FIFO
** waits for a reader, forever, after the submit has committed.  So a path
** that exists and is not a regular file is never opened; the open itself
** is O_NONBLOCK (a FIFO that appears in between opens at once or fails
** with ENXIO), O_NOFOLLOW and O_NOCTTY; and what was opened is checked
** again.  Returns the descriptor, or -1 with errno set (EINVAL: not a
** regular file).
*/
static int open_wake(const char *path)
{
	struct stat st;
	int fd;

	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		errno = EINVAL;
		return -1;
	}
	fd = open(path,
		  O_WRONLY | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY |
		      O_CLOEXEC,
		  0666);
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	return fd;
}

/*
** Wake listeners: touch the wake file (creating it if needed).  Best
** effort and never blocking (open_wake): it runs after a commit, so it
** must not fail or delay what was committed; a lost wake-up costs
** lateness, never a task.  Always 0.
**
** The descriptor stays open between commits: opening, checking and
** closing the file each time was 5 of a single submit's system calls and
** about a tenth of its time.  A file that was removed or replaced (no
** link left) is opened again by path, since listeners that started since
** watch the new one.
*/
static int kept_open(int *fd, const char *path)
{
	struct stat st;

	if (*fd >= 0 && (fstat(*fd, &st) < 0 || st.st_nlink == 0)) {
		close(*fd);
		*fd = -1;
	}
	if (*fd < 0)
		*fd = open_wake(path);
	return *fd;
}

static int touch(int *fd, const char *path)
{
	if (kept_open(fd, path) >= 0)
		futimens(*fd, NULL);
	return 0;
}

int due__sq_notify(due_store *s) { return touch(&s->wake_fd, s->wake_path); }

/*
** The same for finished tasks, on the "-done" file, which only due_wait's
** listeners watch (workers watch "-wake"), and only while one listens:
** each holds a shared flock on the file (due__sq_listen_done), so a
** commit that finished a task tries an exclusive one, which succeeds
** (and is let go at once) when nobody waits.  The futimens() of every
** such commit, waited for or not, cost a sync=full drain 10-25 % of its
** rate (the inode's change rode in the journal commit of every
** fdatasync; bench/run's Before and after, 2026-12-07): a flock writes
** nothing.  A listener takes its lock before it reads the task, so a
** commit that its read did not see is followed by a touch.
*/
int due__sq_notify_done(due_store *s)
{
	if (kept_open(&s->done_fd, s->done_path) < 0)
		return 0;
	if (flock(s->done_fd, LOCK_EX | LOCK_NB) == 0) {
		flock(s->done_fd, LOCK_UN); /* nobody listens */
		return 0;
	}
	futimens(s->done_fd, NULL); /* EWOULDBLOCK, or unsure: touch */
	return 0;
}

/* ------------------------------------------------------------------ */
/* Rows (row.h)                                                        */
/* ------------------------------------------------------------------ */

static int cur_next(void *c)
{
	due__sq_cur *k = c;
	int rc = sqlite3_step(k->st);
	return rc == SQLITE_ROW	   ? 1
	       : rc == SQLITE_DONE ? 0
				   : due__sq_error(k->s, rc, k->what);
}

static bool cur_is_null(void *c, int col)
{
	return sqlite3_column_type(((due__sq_cur *)c)->st, col) == SQLITE_NULL;
}

/* Integers, and times: the store keeps them as integer microseconds. */
static int64_t cur_i64(void *c, int col)
{
	return sqlite3_column_int64(((due__sq_cur *)c)->st, col);
}

static const void *cur_bytes(void *c, int col, size_t *len)
{
	sqlite3_stmt *st = ((due__sq_cur *)c)->st;
	const void *p;

	*len = 0;
	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		return NULL;
	p = sqlite3_column_blob(st, col); /* TEXT comes back unconverted */
	*len = (size_t)sqlite3_column_bytes(st, col);
	return p ? p : ""; /* an empty value is not NULL */
}

static const due_row_ops sq_rows = {cur_next, cur_is_null, cur_i64, cur_i64,
				    cur_bytes};

void due__sq_rows(due_rows *out, due__sq_cur *c, due_store *s, sqlite3_stmt *st,
		  const char *what)
{
	c->s = s;
	c->st = st;
	c->what = what;
	out->ops = &sq_rows;
	out->cur = c;
}

int due__sq_col_state(sqlite3_stmt *st, int col, due_state *out)
{
	const char *p = (const char *)sqlite3_column_text(st, col);
	return due__state_from_store(p, (size_t)sqlite3_column_bytes(st, col),
				     out);
}

/* ------------------------------------------------------------------ */
/* URL, open, close                                                    */
/* ------------------------------------------------------------------ */

/* SQL function due_backoff(base, cap, n): the one backoff rule, from core. */
static void sql_backoff(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void)argc;
	sqlite3_result_int64(ctx, due_backoff_us(sqlite3_value_int64(argv[0]),
						 sqlite3_value_int64(argv[1]),
						 sqlite3_value_int(argv[2])));
}

/*
** Busy handler: our write transactions are short (tens of microseconds to
** a few milliseconds), so waiting in SQLite's default steps (1, 2, 5, 10 ..
** 100 ms) wastes most of the wait.  Retry after 20 us, doubling up to 2 ms,
** until busy_ms has passed since the first retry.
*/
static int64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int on_busy(void *arg, int count)
{
	due_store *s = arg;
	int64_t now = mono_us();
	struct timespec ts = {0, 0};
	long us = count < 7 ? 20L << count : 2000;

	if (count == 0)
		s->busy_since = now;
	else if (now - s->busy_since >= (int64_t)s->busy_ms * 1000)
		return 0;
	ts.tv_nsec = us * 1000;
	nanosleep(&ts, NULL);
	return 1;
}

/* SQL function due_bucket(us): the histogram bucket of a duration. */
static void sql_bucket(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	double ms = (double)sqlite3_value_int64(argv[0]) / 1000.0;
	int b = 0;
	(void)argc;
	while (b < DUE_HIST_N && ms > due_hist_bounds_ms[b])
		b++;
	sqlite3_result_int(ctx, b);
}

/* What the URL says (parse_url): the file and its options. */
typedef struct sq_cfg {
	char *path;
	bool sync_normal; /* ?sync=normal */
	int busy_ms;	  /* ?busy_ms= (default 30000) */
} sq_cfg;

void due__sq_free_cfg(void *cfg)
{
	sq_cfg *c = cfg;
	if (c)
		free(c->path);
	free(c);
}

const char *due__sq_cfg_path(const void *cfg)
{
	return ((const sq_cfg *)cfg)->path;
}

static int parse_option(sq_cfg *c, const char *opt, const char *full)
{
	if (strcmp(opt, "sync=full") == 0) {
		c->sync_normal = false;
	} else if (strcmp(opt, "sync=normal") == 0) {
		c->sync_normal = true;
	} else if (strncmp(opt, "busy_ms=", 8) == 0) {
		char *end;
		errno = 0;
		long v = strtol(opt + 8, &end, 10);
		if (errno || *end || end == opt + 8 || v < 0 || v > 3600000)
			return due__error_set(DUE_EINVAL,
					      "malformed store URL '%s': "
					      "busy_ms must be 0..3600000",
					      full);
		c->busy_ms = (int)v;
	} else {
		return due__error_set(
		    DUE_EINVAL,
		    "malformed store URL '%s': unknown option '%s' "
		    "(expected sync=full|normal or busy_ms=N)",
		    full, opt);
	}
	return 0;
}

/* Each &-separated option after q (which points at the '?'). */
static int parse_options(sq_cfg *c, const char *q, const char *full)
{
	while (q) {
		const char *next = strchr(q + 1, '&');
		size_t n = next ? (size_t)(next - q - 1) : strlen(q + 1);
		char *opt = due__strdup_n(q + 1, n);
		int rc;
		if (!opt)
			return due__error_set(DUE_ENOMEM, "out of memory");
		rc = parse_option(c, opt, full);
		free(opt);
		if (rc < 0)
			return rc;
		q = next;
	}
	return 0;
}

int due__sq_parse_url(void **out, const due_url *u)
{
	const char *path = u->rest;
	const char *q = strchr(path, '?');
	size_t plen = q ? (size_t)(q - path) : strlen(path);
	sq_cfg *c;
	int rc;

	*out = NULL;
	if (strncmp(path, "//", 2) == 0) {
		if (path[2] != '/')
			return due__error_set(
			    DUE_EINVAL,
			    "malformed store URL '%s': use sqlite:PATH or "
			    "sqlite:///absolute/path",
			    u->text);
		path += 2;
		plen -= 2;
	}
	if (plen == 0)
		return due__error_set(
		    DUE_EINVAL, "malformed store URL '%s': empty file path",
		    u->text);
	if (!(c = calloc(1, sizeof(*c))) ||
	    !(c->path = due__strdup_n(path, plen))) {
		due__sq_free_cfg(c);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	c->busy_ms = 30000;
	if ((rc = parse_options(c, q, u->text)) < 0) {
		due__sq_free_cfg(c);
		return rc;
	}
	*out = c;
	return 0;
}

static int configure(due_store *s, const sq_cfg *c)
{
	char sql[160];

	snprintf(sql, sizeof(sql),
		 "PRAGMA synchronous = %s; PRAGMA foreign_keys = OFF;",
		 c->sync_normal ? "NORMAL" : "FULL");
	int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return due__sq_error(s, rc, "configure");
	rc = sqlite3_create_function(s->db, "due_backoff", 3,
				     SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
				     sql_backoff, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_function(s->db, "due_bucket", 1,
					     SQLITE_UTF8 | SQLITE_DETERMINISTIC,
					     NULL, sql_bucket, NULL, NULL);
	return rc == SQLITE_OK ? 0
			       : due__sq_error(s, rc, "register due_backoff");
}

/*
** Read-only stores.  A store this user cannot write (another user's file,
** mode 0444, a directory it cannot write) must still answer reads.  In
** WAL mode a reader needs the "-shm" wal-index: SQLite opens an existing
** one read-only, but cannot read at all when there is none and it may not
** create one ("attempt to write a readonly database" on the first read).
** And when it may create one as a user who cannot write the store, it
** leaves "-wal" and "-shm" files owned by that user, which a later writer
** of another user cannot open.  So a store this user cannot write is read
** like this:
**  - a "-wal" file exists (a writer has the store open, or one crashed):
**    plain read-only, through the -shm the writer keeps (it is readable
**    whenever the store is);
**  - no "-wal" file: no connection has it open (the last to close
**    checkpoints every commit into the file and removes the log), so the
**    file alone is the whole store, and it is opened ?immutable=1: no
**    locks, no -shm, nothing created.  Such a reader does not see writes
**    that begin after it opened, and a writer that starts while it reads
**    can make a read fail; a one-shot `due ls` or `due show` is what it is
**    for.  A long-running reader (a dashboard) should be given write
**    access to the directory instead.
** Writes are refused before they start (due__sq_begin) with DUE_ESTORE
** naming the store; nothing on the read path writes.
*/

/* Is there a "<path>-wal" (or can we not tell)?  Only ENOENT says no. */
static bool wal_exists(const char *path)
{
	size_t n = strlen(path) + 5;
	char *wal = malloc(n);
	struct stat st;
	bool yes = true;

	if (wal) {
		snprintf(wal, n, "%s-wal", path);
		yes = lstat(wal, &st) == 0 || errno != ENOENT;
	}
	free(wal);
	return yes;
}

/* "file:PATH?immutable=1", PATH percent-encoded (RFC 3986); NULL: ENOMEM. */
static char *immutable_uri(const char *path)
{
	static const char keep[] = "/-._~";
	size_t n = strlen(path);
	char *u = malloc(n * 3 + 32), *p;

	if (!u)
		return NULL;
	p = u + snprintf(u, 8, "%s", path[0] == '/' ? "file://" : "file:");
	for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		    (*c >= '0' && *c <= '9') || strchr(keep, *c))
			*p++ = (char)*c;
		else
			p += snprintf(p, 4, "%%%02X", *c);
	}
	snprintf(p, 16, "?immutable=1");
	return u;
}

/*
** sqlite3_open_v2 with extended result codes and our busy handler (set
** before the first read: a reader may have to wait, e.g. while another
** process switches a new store to WAL); the native result.
*/
static int open_file(due_store *s, const char *name, int flags)
{
	int rc = sqlite3_open_v2(name, &s->db, flags, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_extended_result_codes(s->db, 1);
		sqlite3_busy_handler(s->db, on_busy, s);
	}
	return rc;
}

static int reopen_immutable(due_store *s)
{
	char *uri = immutable_uri(s->path);
	int rc;

	if (!uri)
		return SQLITE_NOMEM;
	sqlite3_close_v2(s->db);
	s->db = NULL;
	s->readonly = s->immutable = true;
	rc = open_file(s, uri,
		       SQLITE_OPEN_READONLY | SQLITE_OPEN_URI |
			   SQLITE_OPEN_NOMUTEX);
	free(uri);
	return rc;
}

/*
** Settle how this user reads the store just opened (the essay above):
** read-write, read-only through the writer's -shm, or immutable.  Reads
** the schema once, which the first statement would do anyway.  Returns a
** native result code.
*/
static int settle_access(due_store *s)
{
	int rc, base;

	s->readonly = sqlite3_db_readonly(s->db, "main") == 1;
	if (s->readonly && !wal_exists(s->path))
		return reopen_immutable(s);
	rc = sqlite3_exec(s->db, "SELECT count(*) FROM sqlite_master", NULL,
			  NULL, NULL);
	base = rc & 0xff;
	/* a file we may write in a directory we may not: no -wal, no -shm */
	if ((base == SQLITE_READONLY || base == SQLITE_CANTOPEN) &&
	    !wal_exists(s->path))
		return reopen_immutable(s);
	return rc;
}

/* May this user write the file and create files beside it? */
static bool can_write(const char *path)
{
	char *dir = due__strdup_n(path, strlen(path)), *slash;
	bool yes;

	if (!dir)
		return true; /* cannot tell: say nothing */
	slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir ? 1 : 0] = '\0';
	yes = access(path, W_OK) == 0 && access(slash ? dir : ".", W_OK) == 0;
	free(dir);
	return yes;
}

/*
** The error of an open that failed with native code rc.  A store this
** user cannot write whose -wal exists but whose -shm it cannot open or
** create cannot be read at all (the essay above): say so.
*/
static int open_error(due_store *s, int rc)
{
	const char *msg = s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
	int base = rc & 0xff;
	char cause[128];

	if ((base == SQLITE_READONLY || base == SQLITE_CANTOPEN) &&
	    wal_exists(s->path) && !can_write(s->path))
		return due__error_set(
		    DUE_ESTORE,
		    "cannot open sqlite store '%s': %s (its log '%s-wal' "
		    "exists, and this user can neither write the store nor "
		    "open or create its '-shm' file: open it once as a user "
		    "who can write it)",
		    s->path, msg, s->path);
	cause_of(s->db, rc, cause, sizeof(cause));
	return due__error_set(DUE_ESTORE, "cannot open sqlite store '%s': %s%s",
			      s->path, msg, cause);
}

int due__sq_open(due_store **out, const void *cfg, const due_open_params *p)
{
	bool create = p->create;
	const sq_cfg *u = cfg;
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
	due_store *s;
	int rc;

	*out = NULL;
	if (!create && access(u->path, F_OK) != 0)
		return due__error_set(
		    DUE_ESCHEMA,
		    "no store at '%s': run `due init --db sqlite:%s` first",
		    u->path, u->path);
	s = calloc(1, sizeof(*s));
	if (!s)
		return due__error_set(DUE_ENOMEM, "out of memory");
	*out = s;
	s->ino_fd = -1;
	s->wake_fd = -1;
	s->done_fd = -1;
	s->done_ino = -1;
	s->done_lock = -1;
	s->path = due__strdup_n(u->path, strlen(u->path));
	if (s->path && (s->wake_path = malloc(strlen(s->path) + 6)))
		snprintf(s->wake_path, strlen(s->path) + 6, "%s-wake", s->path);
	if (s->path && (s->done_path = malloc(strlen(s->path) + 6)))
		snprintf(s->done_path, strlen(s->path) + 6, "%s-done", s->path);
	if (!s->path || !s->wake_path || !s->done_path)
		return due__error_set(DUE_ENOMEM, "out of memory");
	if (create)
		flags |= SQLITE_OPEN_CREATE;
	/* the lock wait is the store's one wait here: bounded by timeout= */
	s->busy_ms = u->busy_ms;
	if ((int64_t)s->busy_ms * 1000 > p->timeout_us)
		s->busy_ms = (int)(p->timeout_us / 1000);
	if ((rc = open_file(s, u->path, flags)) == SQLITE_OK)
		rc = settle_access(s);
	if (rc != SQLITE_OK)
		return open_error(s, rc);
	return configure(s, u);
}

void due__sq_close(due_store *s)
{
	if (!s)
		return;
	for (int i = 0; i < DUE_SQ_MAX_STMTS; i++) {
		due__sq_work_take(s, s->st[i]);
		sqlite3_finalize(s->st[i]);
	}
	for (int i = 0; i < 2; i++) {
		due__sq_work_take(s, s->tx[i]);
		sqlite3_finalize(s->tx[i]);
	}
	due__sq_work_take(s, s->claim);
	due__sq_work_take(s, s->upc);
	if (s->db)
		due__sq_work_flush(s);
	sqlite3_finalize(s->claim);
	sqlite3_finalize(s->upc);
	sqlite3_close_v2(s->db);
	if (s->ino_fd >= 0)
		close(s->ino_fd);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	if (s->done_fd >= 0)
		close(s->done_fd);
	if (s->done_ino >= 0)
		close(s->done_ino);
	if (s->done_lock >= 0)
		close(s->done_lock);
	free(s->wake_path);
	free(s->done_path);
	free(s->path);
	free(s);
}

/* The store's clock is the host's (DUE_STORE_CAP_HOST_CLOCK). */
int due__sq_now(due_store *s, due_time *out)
{
	(void)s;
	*out = due_time_now_host();
	return 0;
}

void *due__sq_native(due_store *s) { return s->db; }

/* ------------------------------------------------------------------ */
/* Listening to the wake file                                          */
/* ------------------------------------------------------------------ */

/* An inotify watch on path (created if missing) into *ino, once. */
static int watch(int *ino, const char *path)
{
	if (*ino < 0) {
		int w = open_wake(path);
		if (w < 0 && errno == EINVAL)
			return due__error_set(
			    DUE_ESTATE,
			    "wake file '%s' is not a regular file: poll", path);
		if (w >= 0)
			close(w);
		*ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
		if (*ino < 0)
			return due__error_set(DUE_ESTATE, "inotify: %s",
					      strerror(errno));
		if (inotify_add_watch(*ino, path,
				      IN_ATTRIB | IN_MODIFY | IN_CLOSE_WRITE) <
		    0) {
			int e = errno;
			close(*ino);
			*ino = -1;
			return due__error_set(DUE_ESTATE,
					      "cannot watch '%s': %s", path,
					      strerror(e));
		}
	}
	return 0;
}

int due__sq_listen(due_store *s, int *fd)
{
	int rc = watch(&s->ino_fd, s->wake_path);
	*fd = s->ino_fd;
	return rc;
}

int due__sq_listen_done(due_store *s, int *fd)
{
	int rc;

	if (!fd)
		return 0;
	rc = watch(&s->done_ino, s->done_path);
	*fd = s->done_ino;
	/* held until the handle closes: completers touch the file while
	   it is (due__sq_notify_done).  Without it they would not, and the
	   wait would fall back to its re-reads: an error here. */
	if (rc == 0 && s->done_lock < 0) {
		s->done_lock = open_wake(s->done_path);
		if (s->done_lock < 0 || flock(s->done_lock, LOCK_SH) < 0) {
			int e = errno;
			if (s->done_lock >= 0)
				close(s->done_lock);
			s->done_lock = -1;
			return due__error_set(DUE_ESTATE,
					      "cannot lock '%s': %s",
					      s->done_path, strerror(e));
		}
	}
	return rc;
}

int due__sq_listen_drain(due_store *s, int *count)
{
	char buf[4096]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n;

	*count = 0;
	for (int i = 0; i < 2; i++) {
		int fd = i ? s->done_ino : s->ino_fd;
		while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
			for (char *p = buf; p < buf + n;
			     p += sizeof(struct inotify_event) +
				  ((struct inotify_event *)p)->len)
				(*count)++;
	}
	return 0;
}
