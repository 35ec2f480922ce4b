/*
** test_faults.c - the stores under odd inputs and failing disks, through
** the public API, on every backend of tu_fixtures[] (issue 22 points 6, 7,
** 10; issue 17 point 4):
**
**  - a due time of the epoch itself is kept (0 is an instant, not "unset");
**  - a task that completes DONE after a failed try shows no last_error
**    (its attempt history keeps the error);
**  - SQLite: a FIFO in place of the wake file never blocks a submit;
**  - an error text that is not UTF-8 is kept with U+FFFD for each bad
**    byte (PostgreSQL and MySQL would refuse it);
**  - SQLite: a claim that meets another process's write lock fails
**    cleanly, leaks nothing, and changes nothing;
**  - SQLite: a disk that fails the n-th write or sync (a VFS over the
**    default one, SQLite's own way of testing I/O errors) gives a clean
**    DUE_ESTORE naming the store and the cause, rolls back, and leaves
**    the file intact with every acknowledged change in it, for every n.
**
** The process-level side (real `due` processes under `ulimit -f` and an
** LD_PRELOAD shim, a read-only store as another user) is
** tests/cli/test_store_faults.sh.
*/
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "due.h"
#define TU_FIXTURE /* setup, teardown, open_db, url, dir */
#define TU_TASKS   /* add, claim_one, get, state_of */
#include "test_util.h"

static const char *backend_now;

/* ------------------------------------------------------------------ */
/* Due times: the epoch is an instant (issue 22 point 7)               */
/* ------------------------------------------------------------------ */

static due_id add_at(due_db *db, due_time at)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	o.at = at;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	return s.id;
}

static void test_at_epoch_is_kept(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submit items[2] = {{"k", "", 0, DUE_SCHEDULE_OPTS_INIT},
			       {"k", "", 0, DUE_SCHEDULE_OPTS_INIT}};
	due_submitted s, b[2];
	due_time now;
	due_task *t;

	assert_int_equal(o.at, DUE_TIME_NONE);
	due_id epoch = add_at(db, 0);
	due_id second = add_at(db, 1000000);
	t = get(db, epoch);
	assert_int_equal(t->due_at, 0);
	due_task_free(t);
	t = get(db, second);
	assert_int_equal(t->due_at, 1000000);
	due_task_free(t);

	/* a batch keeps it too, beside an unset one (due now) */
	items[0].opts.at = 0;
	assert_int_equal(due_schedule_batch(db, b, items, 2), 0);
	assert_int_equal(due_now(db, &now), 0);
	t = get(db, b[0].id);
	assert_int_equal(t->due_at, 0);
	due_task_free(t);
	t = get(db, b[1].id);
	assert_true(t->due_at > now - 60000000 && t->due_at <= now);
	due_task_free(t);

	/* due long ago: claimed first, ordered by due time */
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 1, 30000000), 0);
	assert_int_equal(l->count, 1);
	assert_true(l->items[0].id == epoch || l->items[0].id == b[0].id);
	assert_int_equal(l->items[0].due_at, 0);
	due_task_list_free(l);

	/* before the epoch: refused, naming it; a delay beside it too */
	o.at = -1;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "before 1970"));
	o.at = 0;
	o.delay_us = 1000000;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "not both"));

	/* after 9999 (what `due add --at` reads, issue 36): refused in the
	   same words; the last instant it reads is kept */
	o.delay_us = 0;
	o.at = INT64_MAX;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "after 9999-12-31T23:59:59Z"));
	o.at = 253402300800000000LL; /* 10000-01-01T00:00:00Z */
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	t = get(db, add_at(db, 253402300799999999LL));
	/* exactly, also on Redis, whose Lua numbers are doubles (past 2^53 us,
	   the year 2255, 32 us apart there): the script keeps the time sent */
	assert_int_equal(t->due_at, 253402300799999999LL);
	due_task_free(t);
	due_close(db);
}

/*
** Callers built against version 1 of the options (0 meant "unset", an
** `at` won over a delay) keep their meaning; a zero-filled struct gets
** every default; an unknown version is refused.
*/
static void test_at_old_versions(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o;
	due_submitted s;
	due_time now;
	due_task *t;

	assert_int_equal(due_now(db, &now), 0);
	memset(&o, 0, sizeof(o));
	o.version = 1;
	o.max_attempts = 5;
	o.delay_us = 3600000000LL; /* at 0: unset, the delay decides */
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	t = get(db, s.id);
	assert_true(t->due_at >= now + 3600000000LL - 60000000);
	due_task_free(t);
	o.at = 5000000; /* version 1: at wins over the delay */
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	t = get(db, s.id);
	assert_int_equal(t->due_at, 5000000);
	due_task_free(t);

	memset(&o, 0, sizeof(o)); /* version 0: every default, due now */
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), 0);
	t = get(db, s.id);
	assert_true(t->due_at >= now - 60000000);
	assert_int_equal(t->max_attempts, 5);
	due_task_free(t);

	o.version = DUE_SCHEDULE_OPTS_VERSION + 1;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "version"));
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* DONE clears last_error (issue 22 point 6)                           */
/* ------------------------------------------------------------------ */

static due_id add_retrying(due_db *db)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	o.max_attempts = 3;
	o.backoff_us = 0; /* the retry is due at once */
	o.backoff_cap_us = 0;
	assert_int_equal(due_schedule(db, &s, "k", "p", 1, &o), 0);
	return s.id;
}

/* Claim `id` and fail its try with `error`: it is due again at once. */
static void fail_once(due_db *db, due_id id, const char *error)
{
	due_fail_outcome fo;
	int32_t a = claim_one(db, id, 30000000);

	assert_int_equal(due_fail(db, &fo, id, a, error), 0);
	assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
	due_task *t = get(db, id);
	assert_string_equal(t->last_error, error);
	due_task_free(t);
}

static void assert_done_without_error(due_db *db, due_id id)
{
	due_task *t = get(db, id);

	assert_int_equal(t->state, DUE_DONE);
	assert_null(t->last_error);
	assert_int_equal(t->n_attempts, 2);
	assert_string_equal(t->attempts[0].outcome, "FAILED");
	assert_string_equal(t->attempts[0].error, "boom");
	assert_string_equal(t->attempts[1].outcome, "DONE");
	due_task_free(t);
}

static void test_done_clears_last_error(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_complete_outcome co;
	due_id a = add_retrying(db);

	fail_once(db, a, "boom");
	int32_t at = claim_one(db, a, 30000000);
	assert_int_equal(due_complete(db, &co, a, at, "ok", 2), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_done_without_error(db, a);

	/* the worker's path: complete a batch and claim in one call */
	due_id b = add_retrying(db);
	fail_once(db, b, "boom");
	due_completion c = {b, claim_one(db, b, 30000000), "ok", 2, 0};
	due_claim_opts copts = DUE_CLAIM_OPTS_INIT;
	due_task_list *l = NULL;
	copts.owner = "w1";
	assert_int_equal(due_complete_and_claim(db, &c, 1, &copts, &l), 0);
	assert_int_equal(c.outcome, DUE_COMPLETE_DONE);
	due_task_list_free(l);
	assert_done_without_error(db, b);

	/* a try that fails for good keeps its error */
	due_id d = add_retrying(db);
	due_fail_outcome fo;
	for (int i = 0; i < 3; i++) {
		int32_t n = claim_one(db, d, 30000000);
		assert_int_equal(due_fail(db, &fo, d, n, "still boom"), 0);
	}
	assert_int_equal(fo, DUE_FAIL_DEAD);
	due_task *t = get(db, d);
	assert_string_equal(t->last_error, "still boom");
	due_task_free(t);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* SQLite: the wake file is never waited on (issue 22 point 10)        */
/* ------------------------------------------------------------------ */

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "FAIL: a submit blocked on the wake FIFO\n";
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(98);
	_exit(99);
}

static void test_wake_fifo_never_blocks(void **state)
{
	(void)state;
	char wake[600];
	due_submitted s;
	int fd;

	if (strcmp(backend_now, "sqlite") != 0)
		skip();
	snprintf(wake, sizeof(wake), "%s/%s.db-wake", dir, tu_scratch_store);
	unlink(wake);
	assert_int_equal(mkfifo(wake, 0666), 0);
	due_db *db = open_db();
	signal(SIGALRM, on_alarm);
	alarm(20); /* a hang fails the binary instead of the ctest timeout */
	assert_int_equal(due_schedule(db, &s, "k", "", 0, NULL), 0);
	assert_true(s.id > 0);
	assert_int_equal(due_notify(db), 0);
	/* a listener is told why it must poll, and does not block either */
	assert_int_equal(due_listen(db, &fd), DUE_ESTATE);
	assert_non_null(strstr(due_error_last(), "not a regular file"));
	alarm(0);
	due_close(db);
}

/*
** A writer keeps the wake file open between commits (sqlite_conn.c).  When
** the file is removed, a listener that starts afterwards watches a new
** one: the writer's next commit must touch that one, not the removed file.
*/
static void test_wake_file_replaced(void **state)
{
	(void)state;
	char wake[600];
	due_submitted s;
	int fd, n = 0;

	if (strcmp(backend_now, "sqlite") != 0)
		skip();
	due_db *db = open_db(), *ldb = open_db();
	assert_int_equal(due_schedule(db, &s, "k", "", 0, NULL), 0);
	snprintf(wake, sizeof(wake), "%s/%s.db-wake", dir, tu_scratch_store);
	assert_int_equal(unlink(wake), 0);
	assert_int_equal(due_listen(ldb, &fd), 0);
	assert_int_equal(due_listen_drain(ldb, &n), 0);
	n = 0;
	assert_int_equal(due_schedule(db, &s, "k", "", 0, NULL), 0);
	struct pollfd p = {fd, POLLIN, 0};
	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_int_equal(due_listen_drain(ldb, &n), 0);
	assert_true(n > 0);
	due_close(ldb);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* An error text that is not UTF-8                                    */
/* ------------------------------------------------------------------ */

/*
** A handler's stderr is any bytes; the stores keep error texts as text
** (PostgreSQL's text and MySQL's utf8mb4 refuse bad UTF-8), and a fail
** that errored would leave the try CLAIMED until its lease ran out, then
** repeat.  The core replaces each bad byte with U+FFFD, on every store.
*/
static void test_fail_with_bad_utf8(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_fail_outcome fo;
	due_task *t;
	due_id id = add(db, "k", 0, 5);
	int32_t at = claim_one(db, id, 30000000);

	assert_int_equal(
	    due_fail(db, &fo, id, at, "bad \xff\xfe bytes \xc3( end"), 0);
	assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
	t = get(db, id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_string_equal(t->last_error, "bad \xef\xbf\xbd\xef\xbf\xbd bytes "
					   "\xef\xbf\xbd( end");
	due_task_free(t);
	/* valid UTF-8 is kept as it is */
	id = add(db, "k2", 0, 5);
	at = claim_one(db, id, 30000000);
	assert_int_equal(due_fail(db, &fo, id, at, "caf\xc3\xa9 \xe2\x82\xac"),
			 0);
	t = get(db, id);
	assert_string_equal(t->last_error, "caf\xc3\xa9 \xe2\x82\xac");
	due_task_free(t);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* SQLite: a claim that meets another process's write lock            */
/* ------------------------------------------------------------------ */

/*
** With busy_ms=0 a claim that meets the write lock fails at once.  It
** must fail cleanly: an error, *out NULL, nothing left allocated (the
** ASan pass's leak check and valgrind see a leak here; a worker whose
** store was locked once leaked its claim list), and the task untouched,
** so that the next claim, after the lock, takes it.
*/
static void test_claim_on_locked_store(void **state)
{
	(void)state;
	char path[600], busy[700];
	sqlite3 *other;
	due_task_list *l = (due_task_list *)&l; /* not NULL: must be reset */
	due_claim_opts co = DUE_CLAIM_OPTS_INIT;
	due_completion c;
	due_db *db;
	due_id a, b;
	int32_t at;

	if (strcmp(backend_now, "sqlite") != 0)
		skip();
	snprintf(path, sizeof(path), "%s/%s.db", dir, tu_scratch_store);
	snprintf(busy, sizeof(busy), "sqlite:%s?busy_ms=0", path);
	assert_int_equal(due_open(&db, busy, NULL), 0);
	a = add(db, "k", 0, 5);
	at = claim_one(db, a, 30000000);
	b = add(db, "k", 0, 5);
	assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(other, "BEGIN EXCLUSIVE", NULL, NULL, NULL),
	    SQLITE_OK);

	co.owner = "w";
	co.limit = 4;
	co.lease_us = 30000000;
	assert_int_equal(due_claim_ex(db, &l, &co), DUE_EBUSY);
	assert_null(l);
	assert_non_null(strstr(due_error_last(), "locked"));
	c = (due_completion){a, at, NULL, 0, 0};
	l = (due_task_list *)&l;
	assert_int_equal(due_complete_and_claim(db, &c, 1, &co, &l), DUE_EBUSY);
	assert_null(l);

	assert_int_equal(sqlite3_exec(other, "COMMIT", NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(other);
	assert_int_equal(state_of(db, a), DUE_CLAIMED);
	assert_int_equal(state_of(db, b), DUE_SCHEDULED);
	assert_int_equal(due_complete_and_claim(db, &c, 1, &co, &l), 0);
	assert_non_null(l);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, b);
	assert_int_equal(c.outcome, DUE_COMPLETE_DONE);
	due_task_list_free(l);
	assert_int_equal(state_of(db, a), DUE_DONE);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* SQLite: a disk that fails the n-th write (issue 17 point 4)         */
/* ------------------------------------------------------------------ */

/*
** A VFS over the default one that fails the n-th xWrite (or xSync) of
** every file SQLite opens: the database, its -wal and its journal.  It is
** registered as the default, so due_open() uses it; disarmed (ff.at == 0)
** it only forwards.  What SQLite does with the failure (roll back, keep
** the log) is SQLite's; what we check is that the store turns it into a
** clean DUE_ESTORE, leaves no transaction open on the handle, and keeps
** every change it acknowledged.
*/
typedef struct ff_file {
	sqlite3_file base;
	sqlite3_file *real;
} ff_file;

enum { FF_FULL, FF_IOERR, FF_SYNC, FF_KINDS };

static struct {
	long at; /* the counted call that fails; 0: none */
	long calls;
	int kind;   /* FF_FULL: SQLITE_FULL from then on; FF_IOERR: one
		       SQLITE_IOERR_WRITE; FF_SYNC: syncs count too, one
		       SQLITE_IOERR_FSYNC or _WRITE */
	long fired; /* faults injected, all rounds */
} ff;

static sqlite3_vfs *ff_real;
static sqlite3_vfs ff_vfs;

#define REAL(f) (((ff_file *)(f))->real)

static int ff_fault(bool sync)
{
	long k;

	if (ff.at <= 0 || (sync && ff.kind != FF_SYNC))
		return 0;
	k = ++ff.calls;
	if (k == ff.at || (ff.kind == FF_FULL && k > ff.at)) {
		ff.fired++;
		return 1;
	}
	return 0;
}

static int ff_close(sqlite3_file *f)
{
	int rc = REAL(f)->pMethods ? REAL(f)->pMethods->xClose(REAL(f)) : 0;
	sqlite3_free(REAL(f));
	return rc;
}

static int ff_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
	return REAL(f)->pMethods->xRead(REAL(f), p, n, off);
}

static int ff_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
	if (ff_fault(false))
		return ff.kind == FF_FULL ? SQLITE_FULL : SQLITE_IOERR_WRITE;
	return REAL(f)->pMethods->xWrite(REAL(f), p, n, off);
}

static int ff_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	return REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int ff_sync(sqlite3_file *f, int flags)
{
	if (ff_fault(true))
		return SQLITE_IOERR_FSYNC;
	return REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int ff_size(sqlite3_file *f, sqlite3_int64 *out)
{
	return REAL(f)->pMethods->xFileSize(REAL(f), out);
}

static int ff_lock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xLock(REAL(f), l);
}

static int ff_unlock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xUnlock(REAL(f), l);
}

static int ff_reserved(sqlite3_file *f, int *out)
{
	return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int ff_control(sqlite3_file *f, int op, void *arg)
{
	return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int ff_sector(sqlite3_file *f)
{
	return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int ff_device(sqlite3_file *f)
{
	/* no mmap: every page goes through xWrite, where faults are */
	return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

static int ff_shm_map(sqlite3_file *f, int pg, int sz, int ext,
		      void volatile **pp)
{
	return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, pp);
}

static int ff_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
	return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}

static void ff_shm_barrier(sqlite3_file *f)
{
	REAL(f)->pMethods->xShmBarrier(REAL(f));
}

static int ff_shm_unmap(sqlite3_file *f, int del)
{
	return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}

static const sqlite3_io_methods ff_io = {
    2,	       ff_close,   ff_read,	ff_write,	ff_truncate,  ff_sync,
    ff_size,   ff_lock,	   ff_unlock,	ff_reserved,	ff_control,   ff_sector,
    ff_device, ff_shm_map, ff_shm_lock, ff_shm_barrier, ff_shm_unmap, NULL,
    NULL};

static int ff_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags,
		   int *out)
{
	ff_file *p = (ff_file *)f;
	int rc;

	(void)v;
	f->pMethods = NULL;
	if (!(p->real = sqlite3_malloc(ff_real->szOsFile)))
		return SQLITE_NOMEM;
	memset(p->real, 0, (size_t)ff_real->szOsFile);
	rc = ff_real->xOpen(ff_real, name, p->real, flags, out);
	if (rc != SQLITE_OK || !p->real->pMethods) {
		if (p->real->pMethods)
			p->real->pMethods->xClose(p->real);
		sqlite3_free(p->real);
		return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
	}
	f->pMethods = &ff_io;
	return SQLITE_OK;
}

static void ff_install(void)
{
	ff_real = sqlite3_vfs_find(NULL);
	ff_vfs = *ff_real;
	ff_vfs.iVersion = ff_real->iVersion;
	ff_vfs.szOsFile = (int)sizeof(ff_file);
	ff_vfs.zName = "due-faulty";
	ff_vfs.pNext = NULL;
	ff_vfs.xOpen = ff_open;
	assert_int_equal(sqlite3_vfs_register(&ff_vfs, 1), SQLITE_OK);
}

/* An operation under faults: 0, or a clean DUE_ESTORE naming the store. */
static bool ff_ok(int rc, const char *what)
{
	const char *m = due_error_last();

	if (rc == 0)
		return true;
	if (rc != DUE_ESTORE || !strstr(m, dir) ||
	    (!strstr(m, "disk is full") && !strstr(m, "I/O error")))
		fail_msg("%s (fault at %ld, kind %d): %s %s", what, ff.at,
			 ff.kind, due_error_name(rc), m);
	return false;
}

/* What a round acknowledged, to find again after it. */
typedef struct ff_acked {
	due_id ids[16];
	size_t n_ids;
	due_id done, retried, cancelled, claimed;
	int new_tasks; /* tasks of kind "new" acknowledged */
} ff_acked;

static void ff_ops(due_db *db, ff_acked *a, const due_task_list *held,
		   due_id later)
{
	due_submitted s, b[2];
	due_submit items[2] = {{"new", "", 0, DUE_SCHEDULE_OPTS_INIT},
			       {"new", "", 0, DUE_SCHEDULE_OPTS_INIT}};
	due_complete_outcome co;
	due_fail_outcome fo;
	due_cancel_outcome cao;
	due_task_list *l = NULL;

	if (ff_ok(due_schedule(db, &s, "new", "x", 1, NULL), "schedule")) {
		a->ids[a->n_ids++] = s.id;
		a->new_tasks++;
	}
	if (ff_ok(due_complete(db, &co, held->items[0].id,
			       held->items[0].attempt, "r", 1),
		  "complete"))
		a->done = held->items[0].id;
	if (ff_ok(due_fail(db, &fo, held->items[1].id, held->items[1].attempt,
			   "boom"),
		  "fail"))
		a->retried = held->items[1].id;
	if (ff_ok(due_cancel(db, &cao, later), "cancel"))
		a->cancelled = later;
	if (ff_ok(due_schedule_batch(db, b, items, 2), "batch")) {
		a->ids[a->n_ids++] = b[0].id;
		a->ids[a->n_ids++] = b[1].id;
		a->new_tasks += 2;
	}
	if (ff_ok(due_claim(db, &l, "w2", NULL, 0, 1, 60000000), "claim") &&
	    l->count == 1)
		a->claimed = l->items[0].id;
	due_task_list_free(l);
}

/* After a round: the file is intact and holds what was acknowledged. */
static void ff_verify(const ff_acked *a, bool strict)
{
	char path[600];
	sqlite3 *raw = NULL;
	sqlite3_stmt *st = NULL;
	due_db *db = open_db();

	snprintf(path, sizeof(path), "%s/%s.db", dir, tu_scratch_store);
	assert_int_equal(
	    sqlite3_open_v2(path, &raw, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(
	    sqlite3_prepare_v2(raw, "PRAGMA integrity_check", -1, &st, NULL),
	    SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
	sqlite3_finalize(st);
	assert_int_equal(sqlite3_prepare_v2(raw,
					    "SELECT count(*) FROM due_task"
					    " WHERE kind = 'new'",
					    -1, &st, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	if (strict) /* +1: the task added after the round, faults off */
		assert_int_equal(sqlite3_column_int(st, 0), a->new_tasks + 1);
	sqlite3_finalize(st);
	sqlite3_close(raw);
	for (size_t i = 0; i < a->n_ids; i++)
		due_task_free(get(db, a->ids[i]));
	if (a->done)
		assert_int_equal(state_of(db, a->done), DUE_DONE);
	if (a->retried) {
		due_task *t = get(db, a->retried);
		assert_string_equal(t->last_error, "boom");
		due_task_free(t);
	}
	if (a->cancelled)
		assert_int_equal(state_of(db, a->cancelled), DUE_CANCELLED);
	if (a->claimed)
		assert_int_equal(state_of(db, a->claimed), DUE_CLAIMED);
	due_close(db);
}

static void ff_round(int kind, long n)
{
	due_db *db = open_db();
	due_task_list *held = NULL;
	ff_acked a = {0};
	due_submitted s;
	due_id later;

	add(db, "old", 0, 5);
	add(db, "old", 0, 5);
	later = add(db, "later", 3600000000LL, 5);
	assert_int_equal(due_claim(db, &held, "w1", NULL, 0, 2, 60000000), 0);
	assert_int_equal(held->count, 2);
	ff.at = n;
	ff.calls = 0;
	ff.kind = kind;
	ff_ops(db, &a, held, later);
	ff.at = 0;
	/* the same handle works again: no transaction was left open */
	if (due_schedule(db, &s, "new", "", 0, NULL) != 0)
		fail_msg(
		    "fault at %ld, kind %d: the handle does not recover: %s", n,
		    kind, due_error_last());
	due_task_list_free(held);
	due_close(db);
	/* a failed sync may leave a commit SQLite reported as failed */
	ff_verify(&a, kind != FF_SYNC);
}

static void test_io_faults(void **state)
{
	(void)state;
	long before = ff.fired;

	if (strcmp(backend_now, "sqlite") != 0)
		skip();
	for (int kind = 0; kind < FF_KINDS; kind++) {
		for (long n = 1; n <= 60; n++) {
			/* a fresh store per round (the fixture made one) */
			if (n > 1 || kind > 0) {
				tu_drop_store(url, dir);
				assert_int_equal(
				    tu_fresh_store(url, sizeof(url), dir,
						   sizeof(dir)),
				    0);
			}
			ff_round(kind, n);
		}
	}
	/* the rounds must have met faults, or they proved nothing */
	printf("io faults: %ld injected\n", ff.fired - before);
	assert_true(ff.fired - before > 100);
}

/* ------------------------------------------------------------------ */

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	    T(test_at_epoch_is_kept),	    T(test_at_old_versions),
	    T(test_done_clears_last_error), T(test_wake_fifo_never_blocks),
	    T(test_wake_file_replaced),	    T(test_claim_on_locked_store),
	    T(test_fail_with_bad_utf8),	    T(test_io_faults),
#undef T
	};
	int failed = 0;

	ff_install();
	for (size_t b = 0; b < TU_N_FIXTURES; b++) {
		char name[64];
		if (tu_select_backend(tu_fixtures[b].name) != 0)
			continue;
		backend_now = tu_fixtures[b].name;
		snprintf(name, sizeof(name), "store faults (%s)", backend_now);
		failed += _cmocka_run_group_tests(
		    name, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
	}
	return failed ? 1 : tu_backend_check();
}
