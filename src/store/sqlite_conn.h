/*
** sqlite_conn.h - the SQLite connection under sqlite.c: the URL and its
** options, open and close, errors, the statement cache, transactions, the
** wake file, and the row cursor (sqlite_conn.c).
**
** sqlite.c says WHAT each transition's statements are; this layer says
** how they reach the file.  Only these two files and sqlite_admin.c
** include it (and tests/unit/test_store.c, for due__sq_read_sql).
*/
#ifndef DUE_SQLITE_CONN_H
#define DUE_SQLITE_CONN_H

#include <sqlite3.h>

#include "store/row.h"
#include "store/store.h"

/* The most statements sqlite.c numbers (one cache slot each). */
#define DUE_SQ_MAX_STMTS 128

struct due_store {
	sqlite3 *db;
	char *path;
	int busy_ms;	    /* give up waiting for the lock after this */
	int64_t busy_since; /* monotonic us of the first retry of this wait */
	sqlite3_stmt *st[DUE_SQ_MAX_STMTS]; /* sqlite.c's, by number */
	sqlite3_stmt *tx[2];		    /* BEGIN IMMEDIATE, COMMIT */
	sqlite3_stmt *claim; /* claim statement for claim_kinds kinds */
	size_t claim_kinds;
	bool claim_exclude;
	bool claim_flow;   /* it leaves out kinds paused or limited */
	sqlite3_stmt *upc; /* upcoming statement, same caching */
	size_t upc_kinds;
	bool upc_exclude;
	char *wake_path; /* "<path>-wake" */
	bool readonly;	 /* this user cannot write the store */
	bool immutable;	 /* opened ?immutable=1 (sqlite_conn.c, open) */
	int ino_fd;	 /* inotify instance while listening, else -1 */
	int wake_fd;	 /* the wake file, open for touching, else -1 */
	/* store work not yet added to the process's (due_store_work_read) */
	uint64_t w_stmts, w_steps;
	int64_t w_changes; /* sqlite3_total_changes64 when last added */
	/* finished tasks (due_wait): the "<path>-done" file, touched after
	   a commit that finished one, and its watch while listening */
	char *done_path;
	int done_fd;   /* open for touching, else -1 */
	int done_ino;  /* inotify instance while listening, else -1 */
	int done_lock; /* -done, flock(LOCK_SH) while listening, else -1 */
	/* the open write transaction made a task due (a submit, a run-after
	   release): its commit wakes listeners (due__sq_commit) */
	bool wake_pending;
};

/*
** The text of the i-th statement that stats, metrics, `due ls --state`,
** prune and the claim's probes read through (sqlite.c), NULL past the
** last: the test asserts their plans use the intended indexes.  They call
** due_bucket(), a function of the store's connections.
*/
const char *due__sq_read_sql(int i);

/* The connection methods of the ops table (sqlite.c lists them). */
int due__sq_parse_url(void **cfg, const due_url *u);
void due__sq_free_cfg(void *cfg);
/* The admin group (sqlite_admin.c); the file a parsed URL names. */
extern const due_store_admin due__store_sqlite_admin;
const char *due__sq_cfg_path(const void *cfg);
int due__sq_open(due_store **out, const void *cfg, const due_open_params *p);
void due__sq_close(due_store *s);
int due__sq_now(due_store *s, due_time *out);
void *due__sq_native(due_store *s);
int due__sq_listen(due_store *s, int *fd);
int due__sq_listen_drain(due_store *s, int *count);
int due__sq_notify(due_store *s);
/* Finished tasks: listen (fd NULL: nothing to do), and wake listeners. */
int due__sq_listen_done(due_store *s, int *fd);
int due__sq_notify_done(due_store *s);

/*
** Translate a native SQLite failure into a due code and message.  This is
** the only place that knows SQLite's result codes.
*/
int due__sq_error(due_store *s, int rc, const char *what);

/*
** Statement `id` (< DUE_SQ_MAX_STMTS) of text `sql`, prepared once and
** cached, reset and unbound; NULL with the error set.
*/
sqlite3_stmt *due__sq_stmt(due_store *s, int id, const char *sql);
/*
** Store work (due_store_work_read): count one use of st, about to run,
** and take the VM steps of its previous runs (reset to 0).  The steps of
** a run are taken at the next use, at finalize (pass the statement to
** due__sq_work_take first) or at close.  Cached statements fetched
** through due__sq_stmt are counted there.
*/
void due__sq_work_use(due_store *s, sqlite3_stmt *st);
void due__sq_work_take(due_store *s, sqlite3_stmt *st);
/*
** Add what this handle counted, and the rows written since the last add
** (sqlite3_total_changes64), to the process's counters.  At every commit,
** rollback and close.
*/
void due__sq_work_flush(due_store *s);
/* Run a statement that returns no rows.  0 or a due code. */
int due__sq_exec(due_store *s, sqlite3_stmt *st, const char *what);

/*
** BEGIN IMMEDIATE: SQLite's one writer lock, taken up front.  On a store
** this user can only read: DUE_ESTORE saying so, before any lock.
*/
int due__sq_begin(due_store *s);
/*
** COMMIT; on failure the transaction is rolled back.  When the
** transaction set s->wake_pending (a run-after release made a held task
** due, sqlite.c), listeners are woken after it commits.
*/
int due__sq_commit(due_store *s);
/* COMMIT, then wake listeners (the transaction may have made work). */
int due__sq_commit_wake(due_store *s);
/* Commit; when it worked and `done`, wake due_wait's listeners. */
int due__sq_commit_done(due_store *s, bool done);
/* Roll back if a transaction is open; keeps the error already recorded. */
void due__sq_rollback(due_store *s);

/* The state in column col of st's current row. */
int due__sq_col_state(sqlite3_stmt *st, int col, due_state *out);

/*
** A cursor (row.h) over a statement being stepped.  The statement is
** reset by whoever stepped it; `what` names a failed step.
*/
typedef struct due__sq_cur {
	due_store *s;
	sqlite3_stmt *st;
	const char *what;
} due__sq_cur;

void due__sq_rows(due_rows *out, due__sq_cur *c, due_store *s, sqlite3_stmt *st,
		  const char *what);

#endif /* DUE_SQLITE_CONN_H */
