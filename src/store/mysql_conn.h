/*
** mysql_conn.h - the MySQL/MariaDB session under mysql.c: URL, connection,
** reconnection, error translation, transactions, SQL text building and
** result cursors (mysql_conn.c).
**
** mysql.c says WHAT each transition's statements are; this layer says how
** a statement reaches the server and how its answer is read.  Statements
** go as text (mysql_real_query) with every value escaped by the
** connection's own escaping (strings) or written as hex (blobs) or
** digits (integers): no prepared statement survives a reconnect, and a
** text statement needs no prepare round trip, so there is nothing to
** re-prepare (no error 1615) and several statements can share one round
** trip (CLIENT_MULTI_STATEMENTS).
*/
#ifndef DUE_MYSQL_CONN_H
#define DUE_MYSQL_CONN_H

#include <mysql.h>
#include <stdint.h>

#include "store/row.h"
#include "store/store.h"

/* Most hosts one URL may list (h1:p1,h2:p2,...). */
#define DUE_MY_MAX_HOSTS 16

/*
** A parsed mysql:// URL (parse_url's cfg): one host, or several (a Galera
** cluster's nodes), tried in order; multi_writer spreads connections over
** them (?multi_writer=1).
*/
typedef struct due_my_cfg {
	char *hosts[DUE_MY_MAX_HOSTS];
	unsigned ports[DUE_MY_MAX_HOSTS];
	size_t n_hosts;
	char *user, *password, *db, *socket;
	bool multi_writer;
	bool wake_poll; /* ?wake=poll: never the binary log (mysql_wake.c) */
} due_my_cfg;

struct due_store {
	int64_t timeout_us; /* the bound of every wait (due_open_params) */
	int64_t open_until; /* while a session is opened: due__mono_us() at
			       which its waits end; 0 otherwise (each
			       statement's round trip gets timeout_us) */
	int64_t open_us;    /* that host's share of timeout_us */
	int64_t call_until; /* a call that had to reconnect: its statements
			       end by then too (one bound for all); else 0 */
	bool silent;	    /* the last failure was a wait that ran out */
	MYSQL *conn;
	bool own;	    /* false: a caller's connection (tx submit) */
	bool broken;	    /* the connection was lost: reconnect first */
	bool in_tx;	    /* one of our transactions is open */
	bool begin_pending; /* START TRANSACTION rides on the next statement */
	bool commit_rides;  /* COMMIT rides on the next statement (one shot) */
	bool tx_sent;	    /* Galera: our START TRANSACTION went (each text
			       after it ends with the savepoint check) */
	bool committing;    /* due__my_commit's own text is being sent */
	char *defer;	    /* statements (no result set) that ride before the
			       next statement, NULL when none (due__my_defer) */
	size_t defer_len;
	bool pick_short;    /* the last claim pick found fewer than asked */
	bool released;	    /* run-after released a child: wake after commit */
	bool deadlock;	    /* the last error was 1213/1205: retry */
	unsigned err;	    /* native error number of the last failure */
	uint64_t affected;  /* rows matched by the last statement */
	uint64_t insert_id; /* its first AUTO_INCREMENT id (mysql_insert_id) */
	int64_t id_step;    /* @@auto_increment_increment */
	bool bulk_ids;	    /* a multi-row INSERT's ids are consecutive */
	uint64_t packet;    /* @@max_allowed_packet at connect (0: not read) */
	int timer_fd;	    /* listen(): the poll's timerfd, -1 until then */
	int64_t wake_seen;  /* the due_wake counter as last read */
	bool wake_warned;   /* a failed bump was logged (once a handle) */
	due_my_cfg *cfg;    /* to reconnect (our own copy) */
	size_t node;	    /* cfg->hosts[node] is the one we use (or try) */
	bool galera;	    /* the server is a Galera node (wsrep_ready) */
	bool after_sweep;   /* reclaim releases children left held on an
			       ended parent (mysql.c mys_reclaim): set on
			       Galera; a test may set it on one server */
	int64_t sweep_probed; /* mono us of upcoming's last sweep probe */
	char label[256];      /* mysql://user@host:port/db for messages */
	char where[272];      /* HOST:PORT (or the socket) for "no answer" */
	/* listen() (mysql.c "Notifications", mysql_wake.c) */
	int wake_fd;		  /* eventfd the binlog reader writes, or -1 */
	int listen_fd;		  /* epoll of timer_fd and wake_fd, or -1 */
	struct due_my_wake *wake; /* the binlog reader; NULL: polling */
	bool wake_fast;		  /* timer_fd ticks every WAKE_FAST_MS */
	int64_t wake_fast_until;  /* mono us: tick fast until then */
	uint64_t wake_gen;	  /* due__my_local_gen() at the last read */
};

/*
** The server's clock in microseconds since the epoch, whatever the
** session's time_zone: UTC_TIMESTAMP(6) is fixed at the statement's start
** like NOW(6) and is UTC in every session, and TIMESTAMPDIFF from the
** epoch is plain arithmetic.  (UNIX_TIMESTAMP(NOW(6)) goes through local
** time: on a caller's connection in a zone with daylight saving it is an
** hour off in the autumn's repeated hour.)
*/
#define DUE_MY_NOW "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))"

/* The store's admin group (mysql_admin.c). */
extern const due_store_admin due__store_mysql_admin;

/* Parse the text after "mysql:" / "mariadb:" into a new *out. */
int due__my_parse_url(due_my_cfg **out, const char *text, const char *rest);
void due__my_cfg_free(due_my_cfg *c);

/*
** Connect with cfg into a new store (*out set even on failure); refuses
** a server without FOR UPDATE SKIP LOCKED.  Several hosts: the first that
** answers, in the URL's order (multi_writer: starting at one picked by
** the process id and how many connections the process opened); a lost
** connection moves on to the next host and a reconnect walks the list
** from there, wrapping around.  timeout_us (> 0) bounds every wait of the
** store: the walk over the hosts, each statement's round trip, the
** server's lock waits (mysql_conn.c, "Bounded waits").
*/
int due__my_connect(due_store **out, const due_my_cfg *cfg, int64_t timeout_us);
void due__my_close(due_store *s);

/*
** 0 when the server (its version string, e.g. "10.11.6-MariaDB-log" or
** "8.0.36") has FOR UPDATE SKIP LOCKED: MariaDB 10.6, MySQL 8.0.1.  Else
** DUE_ESTORE with a message naming the version.
*/
int due__my_version_check(const char *version);

/*
** Before a call: reconnect when the connection was lost; DUE_EINVAL when
** one of our transactions is open (a completion hook calling back into
** its own handle).
*/
int due__my_ok(due_store *s);

/*
** Translate the connection's last failure; the one place errnos live.
** A wait that ran out of the bound: "no answer from the store at
** HOST:PORT in N s" (DUE_ESTORE), the connection marked broken.
*/
int due__my_error(due_store *s, const char *what);

/*
** Before statements someone else sends on s->conn (a completion hook,
** inside our transaction): their waits keep only the library's own
** whole-second limits (MYSQL_OPT_READ_TIMEOUT, _WRITE_TIMEOUT), never the
** deadline of our last statement, which may have passed.
*/
void due__my_unarm(void);

/*
** The server's lock waits (innodb_lock_wait_timeout, lock_wait_timeout,
** GET_LOCK) in whole seconds: they end before the bound, so the server
** reports 1205 while the client still listens (at least 1).
*/
unsigned due__my_lock_secs(const due_store *s);

/*
** Run sql (one statement or several; text of len bytes).  *out (may be
** NULL) receives the last result set, or NULL when none.  s->affected is
** the matched rows of the last statement.
*/
int due__my_run(due_store *s, const char *sql, size_t len, const char *what,
		MYSQL_RES **out);
/*
** As due__my_run, keeping every result set in order in sets[0..n) (NULL
** where the statements made fewer); a result set past the n-th is an
** error.  The caller frees each.
*/
int due__my_run_sets(due_store *s, const char *sql, size_t len,
		     const char *what, MYSQL_RES **sets, size_t n);
int due__my_begin(due_store *s);
int due__my_commit(due_store *s);
void due__my_rollback(due_store *s);
/* Sleep before retry `n` of a deadlocked transaction. */
void due__my_backoff(int n);

/* ------------------------------------------------------------------ */
/* SQL text                                                            */
/* ------------------------------------------------------------------ */

typedef struct due_my_sql {
	char *p;
	size_t len, cap;
	bool oom;
	/*
	** The store's connection field, read when a string is escaped: a
	** builder made before due__my_ok reopened a lost session must not
	** hold the handle that reopening freed.
	*/
	MYSQL *const *conn;
} due_my_sql;

void due__my_sql_init(due_my_sql *b, MYSQL *const *conn);
void due__my_sql_free(due_my_sql *b);
/* Append SQL text (printf format: never a caller's value). */
void due__my_add(due_my_sql *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A quoted string literal; NULL appends NULL. */
void due__my_str(due_my_sql *b, const char *s);
/* A binary literal X'..' of n bytes (d may be NULL when n is 0). */
void due__my_blob(due_my_sql *b, const void *d, size_t n);
void due__my_int(due_my_sql *b, int64_t v);
/* ('a', 'b', ...) */
void due__my_list(due_my_sql *b, const char *const *t, size_t n);
/* Run b's text; DUE_ENOMEM when building it failed. */
int due__my_exec(due_store *s, due_my_sql *b, const char *what,
		 MYSQL_RES **out);
/* due__my_run_sets on b's text. */
int due__my_exec_sets(due_store *s, due_my_sql *b, const char *what,
		      MYSQL_RES **sets, size_t n);
/*
** Round trips inside one of our transactions.  What is sent with a
** statement, in order: START TRANSACTION (due__my_begin, before the
** first), the deferred statements (due__my_defer), the statement, COMMIT
** (s->commit_rides, set just before).  A riding COMMIT that succeeded
** ends the transaction (due__my_commit then sends nothing); any failure
** leaves it open for due__my_rollback (MySQL runs none of a multi-statement
** text after the statement that failed).  due__my_defer keeps b's text
** (statements without result sets, e.g. a batch's fenced writes) to ride
** on the next statement; b is freed.  DUE_ENOMEM when it cannot.
*/
int due__my_defer(due_store *s, due_my_sql *b);

/* ------------------------------------------------------------------ */
/* Results                                                             */
/* ------------------------------------------------------------------ */

typedef struct due_my_cur {
	MYSQL_RES *r;
	MYSQL_ROW row;
	unsigned long *len;
} due_my_cur;

/* A row.h cursor over r, before its first row. */
void due__my_rows(due_rows *out, due_my_cur *c, MYSQL_RES *r);
/* Column readers on a fetched row; NULL reads 0. */
int64_t due__my_i64(MYSQL_ROW row, int col);
bool due__my_null(MYSQL_ROW row, int col);

/*
** This process's listeners (mysql_conn.c): a listen timerfd registered by
** due__my_local_add (due__my_close takes it out) fires at once when this
** process bumps due_wake (due__my_local_poke), not at its next second.
*/
void due__my_local_add(int fd);
void due__my_local_poke(void);
/* How many times this process poked (a change it may have seen was its
 * own: mysql.c keeps its poll slow for those). */
uint64_t due__my_local_gen(void);

#endif /* DUE_MYSQL_CONN_H */
