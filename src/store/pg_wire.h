/*
** pg_wire.h - the PostgreSQL session under pg.c: connection, errors,
** prepared statements, transactions, and the binary wire format of
** parameters and results (pg_wire.c).
**
** pg.c says WHAT each transition's statement is; this layer says how a
** statement reaches the server and how its answer is read.  Scalars are
** sent as text, bytea and arrays in binary; every result is binary.  A
** timestamptz crosses the wire as int64 microseconds since 2000-01-01,
** exactly, so no float conversion ever rounds a due time.
*/
#ifndef DUE_PG_WIRE_H
#define DUE_PG_WIRE_H

#include <libpq-fe.h>
#include <stdint.h>

#include "store/row.h"
#include "store/store.h"

/* Microseconds between the Unix epoch and PostgreSQL's (2000-01-01). */
#define DUE_PG_EPOCH_US 946684800000000LL

/* Element type OIDs for binary arrays (pg_type.dat). */
#define DUE_PG_OID_BYTEA 17
#define DUE_PG_OID_INT8 20
#define DUE_PG_OID_INT4 23
#define DUE_PG_OID_TEXT 25
#define DUE_PG_OID_FLOAT8 701
#define DUE_PG_OID_TIMESTAMPTZ 1184

/* The channel submits notify and listeners LISTEN on. */
#define DUE_PG_CHANNEL "due_task_new"
/*
** The channel of finished tasks (due_wait): every statement that ends a
** task (DONE, DEAD, CANCELLED) calls pg_notify(DUE_PG_DONE_CHANNEL, '')
** once, which PostgreSQL folds into one notification per transaction.
*/
#define DUE_PG_DONE_CHANNEL "due_task_done"
/* The due_lock row that says someone listens on it (pg.c: WAITED). */
#define DUE_PG_WAIT_GATE "due_wait"

/*
** A statement of the store's own connection that waits longer than this
** for its answer is looked into (pg_wire.c: slow answers).
*/
#define DUE_PG_SLOW_US 5000000LL

/* The most statements pg.c numbers (one prepared flag each). */
#define DUE_PG_MAX_STMTS 64

/* How statements reach the server: the URL's ?pooler= (pg_wire.c). */
enum due_pg_pooler {
	DUE_PG_DIRECT = 0,	/* a session of our own: prepare, SET, LISTEN */
	DUE_PG_POOL_TRANSACTION /* a server session per transaction only */
};

/* The parsed store URL (pg.c's parse_url hands it to open). */
typedef struct due_pg_cfg {
	char *uri;	  /* for libpq: the URL without due's own options */
	char *listen_uri; /* ?listen=, decoded: a direct server; or NULL */
	enum due_pg_pooler pooler;
} due_pg_cfg;

struct due_store {
	int64_t timeout_us; /* the bound of every wait (due_open_params);
			       0 on a caller's connection, never waited on */
	/*
	** The connection of every statement: through the pooler in pooler
	** mode.  NULL when not connected (listen() let it go because this
	** handle listens on its own direct connection): the next
	** due__pg_ok() connects again.
	*/
	PGconn *conn; /* ours: in libpq's non-blocking mode */
	bool own;     /* false: a caller's connection (pg_tx), untouched */
	bool prepared[DUE_PG_MAX_STMTS]; /* per session; cleared by a reset */
	char label[256];		 /* user@host:port/db for messages */
	char sqlstate[6];		 /* of the last failure, "" when none */
	bool listening; /* LISTEN due_task_new on this session */
	enum due_pg_pooler pooler;
	char *uri;	     /* to connect again (own stores only) */
	char *listen_uri;    /* ?listen=: LISTEN on lconn, not on conn */
	PGconn *lconn;	     /* the direct listening connection, or NULL */
	int64_t lconn_tried; /* monotonic us of its last connect attempt */
	/*
	** Pooler mode without listen=: a timerfd ticking once a second;
	** each tick reads the wake fingerprint (pg_wire.c).
	*/
	int timer_fd;		/* -1: not listening this way */
	char seen[192];		/* the last fingerprint; "" none yet */
	int wake_ticks;		/* ticks that still report a wake */
	unsigned long gen_seen; /* the process's notify count, last seen */
	/*
	** The last claim on this session saw due tasks of limited kinds
	** (pg.c: the claim), so the next one serves them first.
	*/
	bool flow_first;
	/* listen_done: LISTEN DUE_PG_DONE_CHANNEL instead of the wake one */
	bool listen_done;
};

/* ------------------------------------------------------------------ */
/* Session                                                             */
/* ------------------------------------------------------------------ */

/*
** Read the store URL into *out (pg.c's parse_url): the libpq URI without
** due's own query options, which are
**   pooler=transaction  every statement safe under a pooler's transaction
**                       mode (no named statements, no SET, no LISTEN);
**                       pooler=none (the default) and pooler=session
**                       change nothing
**   listen=URL          a direct server URL (percent-encoded) that
**                       listen() opens its own connection to
** DUE_EINVAL naming the option on a bad value (quoting `shown`, the URL
** as the user gave it; `text` is without the core's timeout=).  *out is
** freed with due__pg_cfg_free, also after a failure.
*/
int due__pg_parse_url(due_pg_cfg **out, const char *shown, const char *text);
/*
** The store URL as due_open() split it (pg.c's parse_url and the admin
** group, pg_admin.c): "//" must follow the scheme; then
** due__pg_parse_url() of the URL without the core's timeout=.  *out as
** there.
*/
int due__pg_parse_store_url(due_pg_cfg **out, const due_url *u);
void due__pg_cfg_free(due_pg_cfg *cfg);

/*
** Connect to cfg's URI into a new store whose every wait (connecting,
** each statement, a lock) keeps to timeout_us (pg_wire.c: bounded waits);
** *out is set even on failure so the core can close it
** (due__pg_disconnect).  A connect that gets no answer in time is
** DUE_ESTORE, "no answer from the store at HOST:PORT in N s".
*/
int due__pg_connect(due_store **out, const due_pg_cfg *cfg, int64_t timeout_us);
/* Close every connection of s and free it (NULL: nothing). */
void due__pg_disconnect(due_store *s);
/* The store's admin group (pg_admin.c). */
extern const due_store_admin due__store_pg_admin;

/*
** Translate a failed libpq call into a due code and message.  This is the
** only place that knows SQLSTATEs.  `r` is the failed result or NULL.
*/
int due__pg_error(due_store *s, const PGresult *r, const char *what);

/*
** Make sure the connection is usable before a call (connect again once
** when it broke or was dropped for want of an answer).  DUE_EINVAL when a
** transaction is open on it (a completion hook calling back into its own
** handle).
*/
int due__pg_ok(due_store *s);

/* Bound parameters: scalars as text, buffers and arrays as binary. */
#define DUE_PG_MAX_PARAMS 16
typedef struct due_pg_params {
	int n;
	const char *v[DUE_PG_MAX_PARAMS];
	int len[DUE_PG_MAX_PARAMS];
	int fmt[DUE_PG_MAX_PARAMS];
	char num[DUE_PG_MAX_PARAMS][24];
} due_pg_params;

void due__pg_int(due_pg_params *p, int64_t v);
/* A text parameter; NULL binds SQL NULL.  Borrowed until the call. */
void due__pg_text(due_pg_params *p, const char *t);
/* A binary parameter of n bytes (n was checked to fit an int). */
void due__pg_bin(due_pg_params *p, const void *d, size_t n);
/* A timestamptz parameter in binary: exact, whatever the session's zone. */
void due__pg_time(due_pg_params *p, due_time t);

/*
** Run statement `sql`, numbered `id` (< DUE_PG_MAX_STMTS), with p; the
** result comes back in binary.  Prepared once per session on our own
** connection, unnamed on a caller's.  On success *out holds the result
** (the caller clears it); on failure the error is recorded and returned:
** DUE_ESTORE "no answer from the store ..." when our own connection was
** silent for s->timeout_us (it is dropped; the next due__pg_ok connects
** again), DUE_EBUSY when a lock held by another session was not released
** within lock_timeout.
*/
int due__pg_run(due_store *s, int id, const char *sql, const due_pg_params *p,
		const char *what, PGresult **out);
/*
** Simple-protocol statement (BEGIN, DDL, LISTEN, a read without
** parameters); on success *out holds its result (the caller clears it).
** 0 or a due code, the error recorded.
*/
int due__pg_query(due_store *s, const char *sql, const char *what,
		  PGresult **out);
/*
** due__pg_query of a statement with parameters p, its result in text (the
** raw SQL session of the admin group, pg_admin.c).
*/
int due__pg_query_text(due_store *s, const char *sql, const due_pg_params *p,
		       const char *what, PGresult **out);
/* due__pg_query without the result.  0 or a due code. */
int due__pg_command(due_store *s, const char *sql, const char *what);
int due__pg_begin(due_store *s);
/* Roll back if a transaction is open; keeps the error already recorded. */
void due__pg_rollback(due_store *s);
/* COMMIT; a lost connection leaves the outcome unknown (DUE_ESTORE). */
int due__pg_commit(due_store *s);

/* ------------------------------------------------------------------ */
/* Wake-ups: LISTEN, a direct listening connection, or a polled read   */
/* ------------------------------------------------------------------ */

/*
** The store's listen/listen_drain/notify (store.h), in one of three ways
** chosen by the URL (pg_wire.c's essay): LISTEN on the store's own
** connection; LISTEN on a direct connection to ?listen=; or, behind a
** pooler without listen=, a once-a-second read of what submits change.
*/
int due__pg_listen(due_store *s, int *fd);
int due__pg_listen_drain(due_store *s, int *count);
int due__pg_notify(due_store *s);
/* listen_done (store.h): the same ways, on DUE_PG_DONE_CHANNEL. */
int due__pg_listen_done(due_store *s, int *fd);

/* ------------------------------------------------------------------ */
/* Binary arrays (the array_recv wire format)                          */
/* ------------------------------------------------------------------ */

typedef struct due_pg_buf {
	unsigned char *p;
	size_t len, cap;
	bool oom;
} due_pg_buf;

/* Header of a one-dimensional array of n elements of type `oid`. */
void due__pg_arr_head(due_pg_buf *b, uint32_t oid, size_t n);
void due__pg_arr_i64(due_pg_buf *b, int64_t v);
void due__pg_arr_i32(due_pg_buf *b, int32_t v);
void due__pg_arr_f64(due_pg_buf *b, double v);
/* A bytea or text element; d == NULL with n == SIZE_MAX is SQL NULL. */
void due__pg_arr_bytes(due_pg_buf *b, const void *d, size_t n);
void due__pg_arr_text(due_pg_buf *b, const char *t);
/* Bind b as a binary parameter; DUE_ENOMEM / DUE_ETOOBIG when it cannot. */
int due__pg_array(due_pg_params *p, const due_pg_buf *b);
/* The texts as a binary text[] parameter (b holds it until the call). */
int due__pg_texts(due_pg_params *p, due_pg_buf *b, const char *const *t,
		  size_t n);
void due__pg_bufs_free(due_pg_buf *b, size_t n);

/* ------------------------------------------------------------------ */
/* Reading binary results                                              */
/* ------------------------------------------------------------------ */

/* A big-endian integer column of 1, 2, 4 or 8 bytes (bool too); NULL is 0. */
int64_t due__pg_col_int(const PGresult *r, int row, int col);
/* A timestamptz column as due_time; NULL is 0. */
due_time due__pg_col_time(const PGresult *r, int row, int col);
bool due__pg_col_null(const PGresult *r, int row, int col);
/* A float8 column; NULL is 0. */
double due__pg_col_f64(const PGresult *r, int row, int col);
/* A text column copy, NULL for SQL NULL (or out of memory). */
char *due__pg_col_text(const PGresult *r, int row, int col);
/* The state in a text column. */
int due__pg_col_state(const PGresult *r, int row, int col, due_state *out);

/* A cursor (row.h) over the rows of a result, from the first. */
typedef struct due_pg_cur {
	const PGresult *r;
	int row;
} due_pg_cur;

void due__pg_rows(due_rows *out, due_pg_cur *c, const PGresult *r);

#endif /* DUE_PG_WIRE_H */
