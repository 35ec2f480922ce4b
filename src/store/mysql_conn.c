/*
** mysql_conn.c - the MySQL/MariaDB session: URL, connection, errors,
** transactions, SQL text and result cursors (see mysql_conn.h).
**
** Session.  Every connection of ours is set up the same way, after each
** (re)connect: utf8mb4, CLIENT_FOUND_ROWS (affected rows count the rows a
** WHERE matched, so a fenced update that "hit one row" says so even when
** it wrote the same values), CLIENT_MULTI_STATEMENTS (several statements
** in one round trip), time_zone '+00:00' (readable times; DUE_MY_NOW
** does not depend on the zone), READ COMMITTED for every
** transaction (no gap locks: they are where MySQL queues deadlock, and
** each statement sees what committed before it, which the flow-control
** claim needs after it locked its kinds), a strict sql_mode (a value
** that does not fit is an error, never silently cut), autocommit on.
** MYSQL_OPT_RECONNECT stays off: Connector/C's own reconnect silently
** drops the session (its settings, an open transaction).  Instead a lost
** connection is marked broken and the next call reconnects and sets the
** session up again; the call that saw the loss fails with DUE_ESTORE (its
** COMMIT's outcome, if it was one, is unknown).
**
** Several hosts (a Galera cluster: mysql://u:p@h1:p1,h2:p2,h3:p3/db, the
** list libpq and Connector/J write).  By default every process connects
** to the first host that answers, in the URL's order, so the whole
** cluster writes through one node and certification never has two nodes
** racing for the same rows.  A lost connection (or a node outside the
** primary component, 1047) moves on to the next host, and the store stays
** there: its reconnects walk the list from the host in use, wrapping
** around, never back to the first on their own.  ?multi_writer=1 starts
** each connection at a host picked by its process id plus the number of
** connections the process opened before, spreading the writes over every
** node; then two nodes can claim the same task, and
** the loser's COMMIT fails certification with 1213, which is a deadlock
** here (DUE_EBUSY, s->deadlock) and retried whole like any other.  On a
** Galera node the session reads causally (wsrep_setup).
**
** Bounded waits (issue 35).  No call waits for ever: every store has a
** bound, s->timeout_us (due_open_params: the URL's timeout=, 10 s by
** default, lower when the opener asks, e.g. a worker's lease / 3).
** Connector/C 3.x counts its timeouts in whole seconds, one poll() per wait
** (it does not read three times as libmysqlclient 5.0 did, but a signal
** restarts the whole wait).  So its poll is replaced (MARIADB_OPT_IO_WAIT)
** by io_wait(), which never waits past the deadline of the call in
** progress, to the millisecond: each statement's round trip (the query and
** every answer of its multi-statement text) gets the bound from its start;
** opening a session (TCP connect, handshake, the session's settings) gets
** the bound shared among the URL's hosts (session_open), and a call that
** had to reconnect first keeps its statements within the same bound
** (due__my_ok).  The options MYSQL_OPT_CONNECT_TIMEOUT, _READ_TIMEOUT and
** _WRITE_TIMEOUT are set too, rounded up to whole seconds, as the library's
** own limits.  A wait that ran out is a lost connection: "no answer from
** the store at HOST:PORT in N s" (DUE_ESTORE), the connection is marked
** broken and its transaction forgotten (the server rolls it back once it
** sees the connection close), and the next call connects again (to the next
** host of a list); a COMMIT that ran out has an unknown outcome, like any
** lost COMMIT.  A frozen path ends a call at its first round trip; a call
** of several round trips that each answer slowly, in time, may take a bound
** for each.  Not bounded here: a name lookup (getaddrinfo; the URLs name
** addresses in practice).  A caller's connection (due_schedule_mysql_tx)
** keeps its own options, session and waits: nothing of this is set or armed
** on it.
**
** The server's own waits end first, so that a held lock is DUE_EBUSY on
** a connection that stays usable rather than a lost one:
** innodb_lock_wait_timeout (row locks: another client's SELECT ... FOR
** UPDATE) and lock_wait_timeout (metadata locks: LOCK TABLES, DDL) are
** the bound less half a second, in whole seconds, at least 1
** (due__my_lock_secs: 10 s waits 9 s, 2 s waits 1 s).  A bound under
** 1.5 s leaves no room for a whole second: a lock held past it ends the
** call as no answer.
**
** Errors.  due__my_error() is the one translator of server and client
** errors: a lost or refused connection is DUE_ESTORE (a wait that ran
** out of the bound says so); a deadlock (1213) is DUE_EBUSY and marks
** s->deadlock, so the store retries the whole transaction with backoff
** while the bound lasts (mysql.c); a lock wait timeout (1205) is
** DUE_EBUSY, not retried (it waited most of the bound already), naming
** how long it waited; a duplicate key (1062) is DUE_ECONFLICT; a missing
** table (1146) DUE_ESCHEMA.
*/
#include <errmsg.h>
#include <errno.h>
#include <limits.h>
#include <mysqld_error.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "base/base.h"
#include "store/mysql_conn.h"
#include "store/mysql_wake.h"

/* ------------------------------------------------------------------ */
/* URL                                                                 */
/* ------------------------------------------------------------------ */

static int hexval(int c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

/* A percent-decoded copy of p[0..n); NULL on a bad escape or no memory. */
static char *decoded(const char *p, size_t n)
{
	char *out = malloc(n + 1), *o = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '%') {
			int h, l;
			if (i + 2 >= n)
				goto bad;
			if ((h = hexval(p[i + 1])) < 0 ||
			    (l = hexval(p[i + 2])) < 0)
				goto bad;
			*o++ = (char)(h * 16 + l);
			i += 2;
		} else {
			*o++ = p[i];
		}
	}
	*o = '\0';
	return out;
bad:
	free(out);
	return NULL;
}

void due__my_cfg_free(due_my_cfg *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n_hosts; i++)
		free(c->hosts[i]);
	free(c->user);
	free(c->password);
	free(c->db);
	free(c->socket);
	free(c);
}

static int bad_url(const char *text, const char *why)
{
	return due__error_set(
	    DUE_EINVAL,
	    "malformed store URL '%s': %s (use "
	    "mysql://user:password@host:port[,host:port...]"
	    "/database[?socket=PATH|multi_writer=1|wake=poll])",
	    text, why);
}

/* The query string: socket=PATH, multi_writer=0|1, wake=auto|poll. */
static int parse_query(due_my_cfg *c, const char *text, const char *q)
{
	while (q && *q) {
		const char *amp = strchr(q, '&');
		size_t n = amp ? (size_t)(amp - q) : strlen(q);
		if (n > 7 && strncmp(q, "socket=", 7) == 0) {
			free(c->socket);
			if (!(c->socket = decoded(q + 7, n - 7)))
				return bad_url(text, "bad socket path");
		} else if (n == 14 && strncmp(q, "multi_writer=", 13) == 0 &&
			   (q[13] == '0' || q[13] == '1')) {
			c->multi_writer = q[13] == '1';
		} else if (n >= 13 && strncmp(q, "multi_writer=", 13) == 0) {
			return due__error_set(
			    DUE_EINVAL,
			    "store URL '%s': bad value '%.*s' (use "
			    "multi_writer=0 or multi_writer=1)",
			    text, (int)n, q);
		} else if (n >= 5 && strncmp(q, "wake=", 5) == 0) {
			if (n == 9 && strncmp(q + 5, "poll", 4) == 0)
				c->wake_poll = true;
			else if (n == 9 && strncmp(q + 5, "auto", 4) == 0)
				c->wake_poll = false;
			else
				return due__error_set(
				    DUE_EINVAL,
				    "store URL '%s': bad value '%.*s' (use "
				    "wake=auto or wake=poll)",
				    text, (int)n, q);
		} else {
			return due__error_set(
			    DUE_EINVAL,
			    "store URL '%s': unknown option '%.*s' (known: "
			    "socket=PATH, multi_writer=0|1, wake=auto|poll)",
			    text, (int)n, q);
		}
		q = amp ? amp + 1 : NULL;
	}
	return 0;
}

/* user[:password]@ of the authority [a, at). */
static int parse_user(due_my_cfg *c, const char *text, const char *a,
		      const char *at)
{
	const char *colon = memchr(a, ':', (size_t)(at - a));

	if (!(c->user = decoded(a, (size_t)((colon ? colon : at) - a))))
		return bad_url(text, "bad user name");
	if (colon &&
	    !(c->password = decoded(colon + 1, (size_t)(at - colon - 1))))
		return bad_url(text, "bad password");
	return 0;
}

/* host[:port] of [h, end) as the next host. */
static int parse_host(due_my_cfg *c, const char *text, const char *h,
		      const char *end)
{
	const char *colon = memchr(h, ':', (size_t)(end - h));
	size_t i = c->n_hosts;
	char *e, *host;

	if (i == DUE_MY_MAX_HOSTS)
		return bad_url(text, "more than 16 hosts");
	if (!(host = decoded(h, (size_t)((colon ? colon : end) - h))))
		return bad_url(text, "bad host");
	c->hosts[c->n_hosts++] = host;
	if (!*host && !c->socket) {
		free(host);
		if (!(c->hosts[i] = due__strdup_n("localhost", 9)))
			return due__error_set(DUE_ENOMEM, "out of memory");
	}
	c->ports[i] = 3306;
	if (colon) {
		long p = strtol(colon + 1, &e, 10);
		if (e != end || p < 1 || p > 65535)
			return bad_url(text, "bad port");
		c->ports[i] = (unsigned)p;
	}
	return 0;
}

/*
** The authority's hosts [h, end): host[:port] separated by commas, as
** libpq and Connector/J write several hosts (h1:p1,h2:p2,h3:p3).
*/
static int parse_hosts(due_my_cfg *c, const char *text, const char *h,
		       const char *end)
{
	int rc;

	for (;;) {
		const char *comma = memchr(h, ',', (size_t)(end - h));
		const char *e = comma ? comma : end;
		if (comma && e == h)
			return bad_url(text, "empty host in the host list");
		if ((rc = parse_host(c, text, h, e)) < 0)
			return rc;
		if (!comma)
			break;
		h = comma + 1;
		if (h == end)
			return bad_url(text, "empty host in the host list");
	}
	if (c->n_hosts > 1 && c->socket)
		return bad_url(text, "socket= names one server, not a host "
				     "list");
	return 0;
}

int due__my_parse_url(due_my_cfg **out, const char *text, const char *rest)
{
	due_my_cfg *c = calloc(1, sizeof(*c));
	const char *a, *slash, *q, *at;
	int rc;

	*out = NULL;
	if (!c)
		return due__error_set(DUE_ENOMEM, "out of memory");
	if (strncmp(rest, "//", 2) != 0) {
		rc = bad_url(text, "no //");
		goto fail;
	}
	a = rest + 2;
	if (!(slash = strchr(a, '/'))) {
		rc = bad_url(text, "no database");
		goto fail;
	}
	q = strchr(slash, '?');
	if (!(c->db =
		  decoded(slash + 1, (size_t)((q ? q : slash + strlen(slash)) -
					      slash - 1))) ||
	    !*c->db) {
		rc = bad_url(text, "no database");
		goto fail;
	}
	if ((rc = parse_query(c, text, q ? q + 1 : NULL)) < 0)
		goto fail;
	at = memchr(a, '@', (size_t)(slash - a));
	if (at && (rc = parse_user(c, text, a, at)) < 0)
		goto fail;
	if (!at && !(c->user = due__strdup_n("root", 4))) {
		rc = due__error_set(DUE_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = parse_hosts(c, text, at ? at + 1 : a, slash)) < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	due__my_cfg_free(c);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Bounded waits                                                       */
/* ------------------------------------------------------------------ */

/* The server's lock waits end at least this long before the bound. */
#define LOCK_MARGIN_US 500000
/* The least share of the bound one host of the walk gets (session_open). */
#define MIN_SHARE_US 100000
/* The longest wait any option of the server or the library is given. */
#define MAX_WAIT_S 31536000 /* a year: lock_wait_timeout's maximum */

/*
** The deadline of the library calls this thread makes on a connection of
** ours (due__mono_us() time) and whether one of their waits ran into it.
** A store is used by one thread at a time and Connector/C's calls are
** synchronous, so arm() sets both for the calls that follow, on the
** thread that makes them; io_wait() is their only reader.  A deadline
** left from an earlier call is in the past: an unarmed call that would
** wait gives up at once (mysql_close's COM_QUIT relies on that).
*/
static _Thread_local int64_t io_until;
static _Thread_local bool io_expired;

static void arm(int64_t until)
{
	io_until = until;
	io_expired = false;
}

void due__my_unarm(void) { arm(0); }

/*
** Arm a statement's round trip on s: the host's share while its session
** is being opened, else the bound from now, and no later than the end of
** a call that began by reconnecting (due__my_ok).  Not on a caller's
** connection (due_schedule_mysql_tx): it has no io_wait of ours.
*/
static void arm_call(const due_store *s)
{
	int64_t until =
	    s->open_until ? s->open_until : due__mono_us() + s->timeout_us;

	if (s->call_until && s->call_until < until)
		until = s->call_until;
	if (s->own)
		arm(until);
}

/*
** Connector/C's wait for a socket of ours (MARIADB_OPT_IO_WAIT), in place
** of its own poll(): until fd is readable (is_read) or writable, for at
** most timeout_ms (the library's whole-second option; <= 0: no limit of
** its own) and never past io_until.  Returns as poll() does: > 0 ready,
** 0 the time ran out (errno ETIMEDOUT; io_expired when io_until ended
** it), < 0 an error.  A signal resumes the wait for what is left (the
** library's own poll() starts it over, so a signal each second would make
** it endless).
*/
static int io_wait(my_socket fd, my_bool is_read, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = is_read ? POLLIN : POLLOUT};
	int64_t now = due__mono_us(), until = io_until;
	int rc;

	if (timeout_ms > 0 && (!until || now + timeout_ms * 1000LL < until))
		until = now + timeout_ms * 1000LL;
	while (!until || now < until) {
		int64_t ms = until ? (until - now + 999) / 1000 : -1;
		rc = poll(&p, 1, ms > INT_MAX ? INT_MAX : (int)ms);
		if (rc > 0 || (rc < 0 && errno != EINTR))
			return rc;
		now = due__mono_us();
	}
	io_expired = io_until && now >= io_until;
	errno = ETIMEDOUT;
	return 0;
}

/* us in whole seconds for Connector/C's options: rounded up, at least 1. */
static unsigned secs_up(int64_t us)
{
	int64_t n = (us + 999999) / 1000000;
	return n < 1 ? 1 : n > MAX_WAIT_S ? MAX_WAIT_S : (unsigned)n;
}

unsigned due__my_lock_secs(const due_store *s)
{
	int64_t n = (s->timeout_us - LOCK_MARGIN_US) / 1000000;
	return n < 1 ? 1 : n > MAX_WAIT_S ? MAX_WAIT_S : (unsigned)n;
}

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

static bool lost(unsigned e)
{
	return e == CR_SERVER_GONE_ERROR || e == CR_SERVER_LOST ||
	       e == CR_CONNECTION_ERROR || e == CR_CONN_HOST_ERROR ||
	       e == CR_COMMANDS_OUT_OF_SYNC || e == ER_SERVER_SHUTDOWN ||
	       e == ER_CONNECTION_KILLED || e == 4031 /* idle disconnect */ ||
	       e == CR_SERVER_LOST_EXTENDED || e == CR_ERR_NET_READ ||
	       e == CR_ERR_NET_WRITE ||
	       /* a Galera node outside the primary component ("WSREP has
		  not yet prepared node for application use"): useless
		  until it rejoins, so as good as lost */
	       e == ER_UNKNOWN_COM_ERROR;
}

/* Forget what was to ride on the next statement (the transaction ended). */
static void tx_reset(due_store *s)
{
	s->in_tx = false;
	s->begin_pending = false;
	s->commit_rides = false;
	s->tx_sent = false;
	free(s->defer);
	s->defer = NULL;
	s->defer_len = 0;
}

/*
** The connection is gone (or no use): the next call reconnects, a
** connection we had moves on to the next host, and no transaction of
** ours is open any more (the server rolls back a session it lost).
*/
static void mark_lost(due_store *s)
{
	if (!s->broken && s->cfg && s->cfg->n_hosts > 1)
		s->node = (s->node + 1) % s->cfg->n_hosts;
	s->broken = true;
	tx_reset(s);
}

int due__my_error(due_store *s, const char *what)
{
	unsigned e = s->conn ? mysql_errno(s->conn) : CR_SERVER_GONE_ERROR;
	const char *msg = s->conn ? mysql_error(s->conn) : "not connected";
	int code = DUE_ERROR;

	s->err = e;
	s->silent = false;
	if (lost(e)) {
		mark_lost(s);
		code = DUE_ESTORE;
		if ((s->silent = io_expired && s->own))
			return due__store_no_answer(
			    s->where,
			    s->open_until ? s->open_us : s->timeout_us);
	} else if (e == ER_LOCK_WAIT_TIMEOUT) {
		/* not retried: the wait took the bound already */
		if (s->own)
			return due__error_set(DUE_EBUSY,
					      "mysql store %s: %s: waited %u s "
					      "for a lock another session "
					      "holds (lock wait timeout, 1205)",
					      s->label, what,
					      due__my_lock_secs(s));
		code = DUE_EBUSY;
	} else if (e == ER_LOCK_DEADLOCK ||
		   (s->galera && e == ER_SP_DOES_NOT_EXIST && s->in_tx)) {
		/* 1305 in our transaction: its savepoint went with a
		   Galera abort (GALERA_COMMIT) */
		s->deadlock = true;
		code = DUE_EBUSY;
	} else if (e == ER_DUP_ENTRY) {
		code = DUE_ECONFLICT;
	} else if (e == ER_NO_SUCH_TABLE) {
		code = DUE_ESCHEMA;
	} else if (e >= 2000 && e < 3000) { /* client errors */
		code = DUE_ESTORE;
	}
	return due__error_set(code, "mysql store %s: %s: %s (%u)", s->label,
			      what, msg && *msg ? msg : "unknown error", e);
}

/* ------------------------------------------------------------------ */
/* Connection                                                          */
/* ------------------------------------------------------------------ */

int due__my_version_check(const char *version)
{
	const char *v = version ? version : "";
	int major = 0, minor = 0, patch = 0;
	bool maria = strstr(v, "MariaDB") != NULL;

	if (maria && strncmp(v, "5.5.5-", 6) == 0) /* the old replica prefix */
		v += 6;
	if (sscanf(v, "%d.%d.%d", &major, &minor, &patch) < 2)
		return due__error_set(DUE_ESTORE,
				      "mysql store: unknown server version "
				      "'%s'",
				      version ? version : "");
	if (maria ? major > 10 || (major == 10 && minor >= 6)
		  : major > 8 || (major == 8 && (minor > 0 || patch >= 1)))
		return 0;
	return due__error_set(DUE_ESTORE,
			      "mysql store: server %s %s has no FOR UPDATE "
			      "SKIP LOCKED; due needs MariaDB 10.6 or MySQL "
			      "8.0.1 or later",
			      maria ? "MariaDB" : "MySQL", version);
}

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static void lib_init(void) { mysql_library_init(0, NULL, NULL); }

/* The session's settings; %u twice: the lock waits (due__my_lock_secs). */
#define SESSION_SQL                                                            \
	"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;"              \
	" SET time_zone = '+00:00',"                                           \
	" sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ENGINE_SUBSTITUTION'," \
	" innodb_lock_wait_timeout = %u, lock_wait_timeout = %u,"              \
	" autocommit = 1"

/* Set the session up (SESSION_SQL) with s's lock waits. */
static int session_set(due_store *s)
{
	unsigned l = due__my_lock_secs(s);
	char sql[sizeof(SESSION_SQL) + 32];
	int n = snprintf(sql, sizeof(sql), SESSION_SQL, l, l);

	return due__my_run(s, sql, (size_t)n, "session", NULL);
}

/*
** How the server numbers a multi-row insert (insert_batch in mysql.c),
** and the largest statement this session takes (max_allowed_packet: a
** session's value is the global one at its connect, read-only after),
** which bounds a payload (mysql.c, my_payload_max) in the same round trip.
*/
static int read_autoinc(due_store *s)
{
	MYSQL_RES *r = NULL;
	MYSQL_ROW row;
	const char sql[] = "SELECT @@auto_increment_increment,"
			   " @@innodb_autoinc_lock_mode, @@max_allowed_packet";
	int rc = due__my_run(s, sql, sizeof(sql) - 1, "session", &r);

	if (rc < 0)
		return rc;
	if (r && (row = mysql_fetch_row(r))) {
		s->id_step = due__my_i64(row, 0);
		/* lock modes 0 and 1 hand a simple insert consecutive ids */
		s->bulk_ids = due__my_i64(row, 1) < 2 && s->id_step >= 1;
		s->packet = (uint64_t)due__my_i64(row, 2);
	}
	mysql_free_result(r);
	return 0;
}

/*
** Galera (a wsrep_ready status variable): a node outside the primary
** component refuses every statement (1047), so it counts as unreachable
** and the caller tries the next host.  On a ready node the session reads
** causally (wsrep_sync_wait = 1: a SELECT, SHOW or START TRANSACTION
** first waits until this node applied every write set the cluster had
** committed when it began), so a task added through one node is seen by
** a `due show` through another, and a claim never starts from a view
** older than what its own process wrote through another connection.
** Certification would catch a stale claim at COMMIT anyway (1213,
** retried); the wait makes that rare.  Not Galera: nothing to do.
*/
static int wsrep_setup(due_store *s)
{
	static const char ask[] = "SHOW GLOBAL VARIABLES LIKE 'wsrep_on';"
				  " SHOW GLOBAL STATUS LIKE 'wsrep_ready'",
			  sync[] = "SET SESSION wsrep_sync_wait = 1";
	MYSQL_RES *r[2];
	MYSQL_ROW row;
	bool galera = false, up = false;
	int rc = due__my_run_sets(s, ask, sizeof(ask) - 1, "session", r, 2);

	if (rc < 0)
		return rc;
	/* MariaDB shows both without Galera too: wsrep_on=OFF then */
	if (r[0] && (row = mysql_fetch_row(r[0])))
		galera = row[1] && strcmp(row[1], "ON") == 0;
	if (r[1] && (row = mysql_fetch_row(r[1])))
		up = row[1] && strcmp(row[1], "ON") == 0;
	mysql_free_result(r[0]);
	mysql_free_result(r[1]);
	s->galera = galera;
	s->after_sweep = galera;
	if (galera && !up) {
		s->broken = true;
		return due__error_set(DUE_ESTORE,
				      "mysql store %s: the Galera node is not "
				      "ready (wsrep_ready=OFF: outside the "
				      "primary component, or joining)",
				      s->label);
	}
	return galera ? due__my_run(s, sync, sizeof(sync) - 1, "session", NULL)
		      : 0;
}

/* Close s->conn, never waiting for it (COM_QUIT goes only if it can). */
static void conn_close(due_store *s)
{
	if (s->conn) {
		arm(due__mono_us());
		mysql_close(s->conn);
	}
	s->conn = NULL;
}

/* HOST:PORT of host i of c into out (the socket's path for a socket). */
static void host_where(char *out, size_t n, const due_my_cfg *c, size_t i)
{
	if (c->socket)
		snprintf(out, n, "%s", c->socket);
	else
		snprintf(out, n, "%s:%u", c->hosts[i], c->ports[i]);
}

/* H1:P1,H2:P2,... of every host of c into out (as many as fit). */
static void hosts_where(char *out, size_t n, const due_my_cfg *c)
{
	char one[272];
	size_t off = 0;

	out[0] = '\0';
	for (size_t i = 0; i < c->n_hosts; i++) {
		host_where(one, sizeof(one), c, i);
		int w = snprintf(out + off, n - off, "%s%s", i ? "," : "", one);
		if (w < 0 || (size_t)w >= n - off)
			break;
		off += (size_t)w;
	}
}

/*
** Open s->conn to host i of s->cfg and set the session up, every wait
** armed to end by s->open_until.  The whole-second options are the
** library's own limits (io_wait keeps to the exact deadline within them);
** the read and write ones apply once connected, to every statement.
*/
static int session_connect(due_store *s, size_t i)
{
	const due_my_cfg *c = s->cfg;
	unsigned connect = secs_up(s->open_us), io = secs_up(s->timeout_us);
	MYSQL *m;
	int rc;

	if (!(s->conn = mysql_init(NULL)))
		return due__error_set(DUE_ENOMEM, "out of memory");
	mysql_optionsv(s->conn, MYSQL_SET_CHARSET_NAME, "utf8mb4");
	mysql_optionsv(s->conn, MYSQL_OPT_CONNECT_TIMEOUT, &connect);
	mysql_optionsv(s->conn, MYSQL_OPT_READ_TIMEOUT, &io);
	mysql_optionsv(s->conn, MYSQL_OPT_WRITE_TIMEOUT, &io);
	mysql_optionsv(s->conn, MARIADB_OPT_IO_WAIT, io_wait);
	arm(s->open_until);
	m = mysql_real_connect(s->conn, c->socket ? NULL : c->hosts[i], c->user,
			       c->password, c->db, c->socket ? 0 : c->ports[i],
			       c->socket,
			       CLIENT_FOUND_ROWS | CLIENT_MULTI_STATEMENTS);
	if (!m)
		return due__my_error(s, "cannot connect");
	if ((rc = due__my_version_check(mysql_get_server_info(s->conn))) < 0)
		return rc;
	s->broken = false;
	if ((rc = session_set(s)) < 0 || (rc = read_autoinc(s)) < 0 ||
	    (rc = wsrep_setup(s)) < 0) {
		s->broken = true;
		return rc;
	}
	return 0;
}

/* session_connect to host i within share_us. */
static int session_open_one(due_store *s, size_t i, int64_t share_us)
{
	const due_my_cfg *c = s->cfg;
	int rc;

	conn_close(s);
	s->broken = true;
	s->silent = false;
	tx_reset(s);
	snprintf(s->label, sizeof(s->label), "mysql://%s@%s:%u/%s",
		 c->user ? c->user : "", c->socket ? c->socket : c->hosts[i],
		 c->socket ? 0 : c->ports[i], c->db);
	host_where(s->where, sizeof(s->where), c, i);
	s->open_us = share_us;
	s->open_until = due__mono_us() + share_us;
	rc = session_connect(s, i);
	s->open_until = 0;
	return rc;
}

/*
** Connect to the first host that answers and make it s->node.  One
** writer (the default): the list is walked from its first host every
** time, so every process, old or new, settles on the first healthy node
** (walking on from the host just lost would leave processes that failed
** over and processes started later writing through different nodes).
** multi_writer=1: from s->node (this connection's own node, or the next
** one after a loss), wrapping around.  The walk's start is taken before
** the first try, so a loss noted while a session is being set up
** (due__my_error moving s->node) cannot make it skip a host.  The walk
** keeps to the bound: each host gets an equal share of what is left
** (whole milliseconds, at least MIN_SHARE_US), so a frozen first node
** costs a third of it in a cluster of three and a refusing one nothing.
** All fail: the last host's error, after a line naming how many were
** tried; "no answer from the store at H1:P1,H2:P2 in N s" when none of
** them answered within its share.
*/
static int session_open(due_store *s)
{
	size_t n = s->cfg->n_hosts, silent = 0;
	size_t start = s->cfg->multi_writer ? s->node % n : 0;
	int64_t end = due__mono_us() + s->timeout_us, share;
	int rc = 0;

	for (size_t k = 0; k < n; k++) {
		size_t i = (start + k) % n;
		share = k ? (end - due__mono_us()) / (int64_t)(n - k)
			  : s->timeout_us / (int64_t)n;
		share =
		    share < MIN_SHARE_US ? MIN_SHARE_US : share / 1000 * 1000;
		if ((rc = session_open_one(s, i, share)) == 0) {
			s->node = i;
			return 0;
		}
		if (rc == DUE_ENOMEM)
			return rc;
		silent += s->silent;
	}
	if (n > 1 && silent == n) {
		char all[1024];
		hosts_where(all, sizeof(all), s->cfg);
		return due__store_no_answer(all, s->timeout_us);
	}
	if (n > 1) {
		char last[512];
		snprintf(last, sizeof(last), "%s", due_error_last());
		return due__error_set(rc,
				      "mysql store: none of the URL's %zu "
				      "hosts answered; the last: %s",
				      n, last);
	}
	return rc;
}

/* A copy of c (NULL when out of memory): the store reconnects with it. */
static due_my_cfg *cfg_dup(const due_my_cfg *c)
{
	due_my_cfg *d = calloc(1, sizeof(*d));
	char *const *from[] = {&c->user, &c->password, &c->db, &c->socket};
	char **to[] = {&d->user, &d->password, &d->db, &d->socket};

	if (!d)
		return NULL;
	d->multi_writer = c->multi_writer;
	d->wake_poll = c->wake_poll;
	for (size_t i = 0; i < c->n_hosts; i++) {
		d->ports[i] = c->ports[i];
		if (!(d->hosts[i] =
			  due__strdup_n(c->hosts[i], strlen(c->hosts[i])))) {
			due__my_cfg_free(d);
			return NULL;
		}
		d->n_hosts = i + 1;
	}
	for (size_t i = 0; i < 4; i++)
		if (*from[i] &&
		    !(*to[i] = due__strdup_n(*from[i], strlen(*from[i])))) {
			due__my_cfg_free(d);
			return NULL;
		}
	return d;
}

int due__my_connect(due_store **out, const due_my_cfg *cfg, int64_t timeout_us)
{
	due_store *s = calloc(1, sizeof(*s));

	*out = s;
	if (!s || !(cfg = s->cfg = cfg_dup(cfg)))
		return due__error_set(DUE_ENOMEM, "out of memory");
	pthread_once(&lib_once, lib_init);
	s->own = true;
	s->timer_fd = -1;
	s->wake_fd = -1;
	s->listen_fd = -1;
	s->id_step = 1;
	s->timeout_us = timeout_us;
	/* each connection its own first node: processes spread by their
	   id, a process's connections by the order they were opened */
	if (cfg->multi_writer && cfg->n_hosts > 1) {
		static unsigned opened;
		unsigned k = __atomic_fetch_add(&opened, 1, __ATOMIC_RELAXED);
		s->node = ((size_t)getpid() + k) % cfg->n_hosts;
	}
	return session_open(s);
}

/*
** This process's listeners: the timerfds of mys_listen.  A wake-up this
** process writes (a submit, a parent's end releasing children) makes
** each of them fire at once, so a worker in the same process reads the
** due_wake counter now instead of at its next second: a chain of
** run-after tasks in one worker moves a link per commit, not per second.
** Other processes still see it within their second.
*/
#define LOCAL_MAX 64
static pthread_mutex_t local_mu = PTHREAD_MUTEX_INITIALIZER;
static int local_fd[LOCAL_MAX];
static size_t n_local;

void due__my_local_add(int fd)
{
	pthread_mutex_lock(&local_mu);
	if (n_local < LOCAL_MAX) /* more: they keep their second */
		local_fd[n_local++] = fd;
	pthread_mutex_unlock(&local_mu);
}

static void local_del(int fd)
{
	pthread_mutex_lock(&local_mu);
	for (size_t i = 0; i < n_local; i++)
		if (local_fd[i] == fd) {
			local_fd[i] = local_fd[--n_local];
			break;
		}
	pthread_mutex_unlock(&local_mu);
}

/* How many wake-ups this process wrote (due__my_local_gen). */
static _Atomic uint64_t local_gen;

uint64_t due__my_local_gen(void) { return atomic_load(&local_gen); }

void due__my_local_poke(void)
{
	/* fire in 1 us, then every second as before */
	static const struct itimerspec soon = {{1, 0}, {0, 1000}};

	atomic_fetch_add(&local_gen, 1);
	pthread_mutex_lock(&local_mu);
	for (size_t i = 0; i < n_local; i++)
		(void)timerfd_settime(local_fd[i], 0, &soon, NULL);
	pthread_mutex_unlock(&local_mu);
}

void due__my_close(due_store *s)
{
	if (!s)
		return;
	if (s->own)
		conn_close(s);
	due__my_wake_stop(s->wake); /* before the eventfd it writes */
	if (s->timer_fd >= 0) {
		local_del(s->timer_fd); /* before its number can be reused */
		close(s->timer_fd);
	}
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	free(s->defer);
	if (s->own)
		due__my_cfg_free(s->cfg);
	free(s);
}

int due__my_ok(due_store *s)
{
	s->deadlock = false;
	s->err = 0;
	if (s->in_tx)
		return due__error_set(DUE_EINVAL,
				      "mysql store: this handle is inside a "
				      "transaction (a completion hook must use "
				      "the connection it is given)");
	s->call_until = 0;
	if (s->broken || !s->conn) {
		/* the reconnect and this call's statements: one bound */
		s->call_until = due__mono_us() + s->timeout_us;
		return session_open(s);
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Statements and transactions                                         */
/* ------------------------------------------------------------------ */

/*
** Galera: a write set replicated from another node that needs a row our
** transaction locked aborts our transaction (a brute-force abort).  When
** that lands while one of our multi-statement texts runs, MariaDB 10.11
** rolls the transaction back and runs the rest of the text on, outside
** any transaction, and a COMMIT at its end succeeds with nothing to
** commit: a claim's rows were handed to handlers that never owned them
** (4 duplicate runs in 3 of 21 bench drains with multi_writer=1, and
** debug read-backs showed the claim's UPDATE matching rows its next
** statement no longer saw).  So on Galera every transaction opens a
** savepoint and releases it right before its COMMIT: a rolled-back
** transaction took the savepoint with it, the RELEASE fails (1305) and
** stops the text before the COMMIT, and due__my_error reads that 1305 as
** the deadlock it is (the whole transaction is retried).
**
** Not only the COMMIT's text: the texts after the aborted one run
** outside any transaction too (checked by hand on the test cluster,
** MariaDB 10.11: a text whose SLEEP another node's write interrupted ran
** its next INSERT autocommitted, and so did an INSERT sent as the next
** text; only an abort that lands while the session is idle makes the
** next text fail with 1213).  A transaction of several texts (a keyed or
** run-after submit, a completion with its release, fail, cancel) then
** wrote, outside it, whatever its texts after the abort held, until the
** savepoint check of its COMMIT: a run-after child inserted held after
** its submit had read the parent still live, a release's close of an
** edge after its count was rolled back.  So every text sent inside a
** Galera transaction ends with the check as well (GALERA_CHECK: release
** the savepoint, take it again), and the next text is sent only when
** the transaction was still ours at the end of this one: what an abort
** can leave outside is the rest of the one text it landed in.
*/
#define PLAIN_BEGIN "START TRANSACTION; "
#define PLAIN_COMMIT "; COMMIT"
#define GALERA_BEGIN "START TRANSACTION; SAVEPOINT due_tx; "
#define GALERA_COMMIT "; RELEASE SAVEPOINT due_tx; COMMIT"
#define GALERA_CHECK "; RELEASE SAVEPOINT due_tx; SAVEPOINT due_tx"

/*
** The text sent for sql: START TRANSACTION when begun, the deferred
** statements, sql, COMMIT when it rides, else the savepoint check when
** `check`.  NULL when nothing rides (send sql as it is) or out of memory
** (*oom).
*/
static char *joined_text(due_store *s, const char *sql, size_t *len, bool check,
			 bool *oom)
{
	const char *begin = s->galera ? GALERA_BEGIN : PLAIN_BEGIN,
		   *commit = s->commit_rides
				 ? (s->galera ? GALERA_COMMIT : PLAIN_COMMIT)
			     : check ? GALERA_CHECK
				     : "";
	size_t n = *len;
	bool semi;

	/* sql may end with its own ';', and blanks after it (an empty
	   statement is an error: reclaim_tx's "...; " and the check made
	   "; ; RELEASE ...", 1065, and no lease was taken back) */
	while (*commit && n && (sql[n - 1] == ' ' || sql[n - 1] == '\n'))
		n--;
	semi = n && sql[n - 1] == ';';
	size_t nb = s->begin_pending ? strlen(begin) : 0,
	       nc = *commit ? strlen(commit) - semi : 0;
	char *p, *q;

	*oom = false;
	if (!nb && !nc && !s->defer_len)
		return NULL;
	if (!(p = q = malloc(nb + s->defer_len + n + nc + 1))) {
		*oom = true;
		return NULL;
	}
	memcpy(q, begin, nb);
	q += nb;
	if (s->defer_len)
		memcpy(q, s->defer, s->defer_len);
	q += s->defer_len;
	memcpy(q, sql, n);
	q += n;
	memcpy(q, commit + semi, nc);
	q += nc;
	*q = '\0';
	*len = (size_t)(q - p);
	return p;
}

/*
** Send sql with what rides on it and read every answer: result sets into
** sets[0..n) in order (n == 0: keep only the last, in sets[0] when sets
** is not NULL).
*/
static int run(due_store *s, const char *sql, size_t len, const char *what,
	       MYSQL_RES **sets, size_t n)
{
	MYSQL_RES *r;
	size_t got = 0;
	bool oom, extra = false, commit = s->commit_rides;
	/* Galera, inside our transaction, not its COMMIT: end with the
	   savepoint check (GALERA_CHECK); its two answers are not sql's */
	bool check = s->galera && s->in_tx && !commit && !s->committing &&
		     (s->begin_pending || s->tx_sent);
	uint64_t aff[3] = {s->affected, s->affected, s->affected},
		 ins[3] = {s->insert_id, s->insert_id, s->insert_id};
	char *joined = joined_text(s, sql, &len, check, &oom);
	int st, rc;

	if (oom)
		return due__error_set(DUE_ENOMEM, "out of memory");
	if (s->begin_pending && s->galera)
		s->tx_sent = true;
	s->begin_pending = false;
	s->commit_rides = false;
	free(s->defer);
	s->defer = NULL;
	s->defer_len = 0;
	arm_call(s); /* the query and every answer to it */
	rc = mysql_real_query(s->conn, joined ? joined : sql, len);
	free(joined);
	if (rc != 0)
		return due__my_error(s, what);
	do {
		if ((r = mysql_store_result(s->conn))) {
			if (n == 0 && sets) {
				mysql_free_result(sets[0]);
				sets[0] = r;
			} else if (got < n) {
				sets[got++] = r;
			} else {
				mysql_free_result(r); /* read on, then fail */
				extra = n != 0;
			}
		} else if (mysql_field_count(s->conn) != 0) {
			return due__my_error(s, what);
		} else {
			s->affected = mysql_affected_rows(s->conn);
			s->insert_id = mysql_insert_id(s->conn);
			aff[2] = aff[1], aff[1] = aff[0], aff[0] = s->affected;
			ins[2] = ins[1], ins[1] = ins[0], ins[0] = s->insert_id;
		}
	} while ((st = mysql_next_result(s->conn)) == 0);
	if (st > 0)
		return due__my_error(s, what);
	if (check) /* the last two were the check's */
		s->affected = aff[2], s->insert_id = ins[2];
	if (commit)
		tx_reset(s); /* the COMMIT that rode here succeeded */
	if (extra)	     /* a bug of ours: the caller expected fewer */
		return due__error_set(DUE_ERROR,
				      "mysql store: %s: more results than "
				      "expected",
				      what);
	return 0;
}

static void free_sets(MYSQL_RES **sets, size_t n)
{
	for (size_t i = 0; sets && i < n; i++) {
		mysql_free_result(sets[i]);
		sets[i] = NULL;
	}
}

int due__my_run(due_store *s, const char *sql, size_t len, const char *what,
		MYSQL_RES **out)
{
	MYSQL_RES *keep = NULL;
	int rc = run(s, sql, len, what, &keep, 0);

	if (rc < 0 || !out)
		mysql_free_result(keep);
	else
		*out = keep;
	if (out && rc < 0)
		*out = NULL;
	return rc;
}

int due__my_run_sets(due_store *s, const char *sql, size_t len,
		     const char *what, MYSQL_RES **sets, size_t n)
{
	int rc;

	for (size_t i = 0; i < n; i++)
		sets[i] = NULL;
	if ((rc = run(s, sql, len, what, sets, n)) < 0)
		free_sets(sets, n);
	return rc;
}

int due__my_defer(due_store *s, due_my_sql *b)
{
	char *p;

	if (b->oom || !(p = realloc(s->defer, s->defer_len + b->len + 3))) {
		due__my_sql_free(b);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	memcpy(p + s->defer_len, b->p, b->len);
	s->defer_len += b->len;
	if (s->defer_len && p[s->defer_len - 1] != ';')
		p[s->defer_len++] = ';';
	p[s->defer_len++] = ' ';
	p[s->defer_len] = '\0';
	s->defer = p;
	due__my_sql_free(b);
	return 0;
}

/*
** BEGIN costs no round trip of its own: START TRANSACTION goes with the
** transaction's first statement (due__my_run), which every transaction
** here begins with a read.
*/
int due__my_begin(due_store *s)
{
	s->in_tx = true;
	s->begin_pending = true;
	return 0;
}

int due__my_commit(due_store *s)
{
	/* the same text without its leading "; " */
	const char *sql = s->galera ? &GALERA_COMMIT[2] : &PLAIN_COMMIT[2];
	int rc = 0;

	/* nothing ran (begin still pending), or a COMMIT rode already */
	if (s->in_tx && !s->begin_pending) {
		s->committing = true; /* its own check: no GALERA_CHECK */
		rc = due__my_run(s, sql, strlen(sql), "commit", NULL);
		s->committing = false;
	}
	tx_reset(s);
	return rc;
}

void due__my_rollback(due_store *s)
{
	static const char sql[] = "ROLLBACK";

	if (s->in_tx && !s->broken && s->conn && !s->begin_pending) {
		arm_call(s);
		(void)mysql_real_query(s->conn, sql, sizeof(sql) - 1);
		/* drop what a failed multi-statement left unread */
		while (mysql_more_results(s->conn) &&
		       mysql_next_result(s->conn) == 0)
			mysql_free_result(mysql_store_result(s->conn));
		/* lost meanwhile (the caller's error stays the message) */
		if (lost(mysql_errno(s->conn)))
			mark_lost(s);
	}
	tx_reset(s);
}

void due__my_backoff(int n)
{
	struct timespec ts = {0, (long)(1000000L << (n < 6 ? n : 6))};

	ts.tv_nsec += rand() % 1000000; /* decorrelate the two claimers */
	nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------ */
/* SQL text                                                            */
/* ------------------------------------------------------------------ */

void due__my_sql_init(due_my_sql *b, MYSQL *const *conn)
{
	memset(b, 0, sizeof(*b));
	b->conn = conn;
}

void due__my_sql_free(due_my_sql *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

static bool room(due_my_sql *b, size_t n)
{
	char *p;
	size_t cap;

	if (b->oom)
		return false;
	if (b->len + n + 1 <= b->cap)
		return true;
	cap = b->cap ? b->cap : 256;
	while (cap < b->len + n + 1)
		cap *= 2;
	if (!(p = realloc(b->p, cap))) {
		b->oom = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void due__my_add(due_my_sql *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !room(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void due__my_str(due_my_sql *b, const char *s)
{
	size_t n;

	if (!s) {
		due__my_add(b, "NULL");
		return;
	}
	n = strlen(s);
	if (!*b->conn) { /* mysql_init failed when it was reopened */
		b->oom = true;
		return;
	}
	if (!room(b, 2 * n + 3))
		return;
	b->p[b->len++] = '\'';
	b->len += mysql_real_escape_string(*b->conn, b->p + b->len, s,
					   (unsigned long)n);
	b->p[b->len++] = '\'';
	b->p[b->len] = '\0';
}

void due__my_blob(due_my_sql *b, const void *d, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = d;

	if (!room(b, 2 * n + 3))
		return;
	b->p[b->len++] = 'X';
	b->p[b->len++] = '\'';
	for (size_t i = 0; i < n; i++) {
		b->p[b->len++] = hex[p[i] >> 4];
		b->p[b->len++] = hex[p[i] & 15];
	}
	b->p[b->len++] = '\'';
	b->p[b->len] = '\0';
}

void due__my_int(due_my_sql *b, int64_t v)
{
	due__my_add(b, "%lld", (long long)v);
}

void due__my_list(due_my_sql *b, const char *const *t, size_t n)
{
	due__my_add(b, "(");
	for (size_t i = 0; i < n; i++) {
		if (i)
			due__my_add(b, ", ");
		due__my_str(b, t[i]);
	}
	due__my_add(b, ")");
}

int due__my_exec(due_store *s, due_my_sql *b, const char *what, MYSQL_RES **out)
{
	if (out)
		*out = NULL;
	if (b->oom)
		return due__error_set(DUE_ENOMEM, "out of memory");
	return due__my_run(s, b->p, b->len, what, out);
}

int due__my_exec_sets(due_store *s, due_my_sql *b, const char *what,
		      MYSQL_RES **sets, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sets[i] = NULL;
	if (b->oom)
		return due__error_set(DUE_ENOMEM, "out of memory");
	return due__my_run_sets(s, b->p, b->len, what, sets, n);
}

/* ------------------------------------------------------------------ */
/* Results                                                             */
/* ------------------------------------------------------------------ */

int64_t due__my_i64(MYSQL_ROW row, int col)
{
	return row && row[col] ? strtoll(row[col], NULL, 10) : 0;
}

bool due__my_null(MYSQL_ROW row, int col) { return !row || !row[col]; }

static int cur_next(void *cur)
{
	due_my_cur *c = cur;

	if (!c->r || !(c->row = mysql_fetch_row(c->r)))
		return 0;
	c->len = mysql_fetch_lengths(c->r);
	return 1;
}

static bool cur_null(void *cur, int col)
{
	return due__my_null(((due_my_cur *)cur)->row, col);
}

static int64_t cur_i64(void *cur, int col)
{
	return due__my_i64(((due_my_cur *)cur)->row, col);
}

static due_time cur_time(void *cur, int col)
{
	return due__my_i64(((due_my_cur *)cur)->row, col);
}

static const void *cur_bytes(void *cur, int col, size_t *len)
{
	due_my_cur *c = cur;

	*len = c->row && c->row[col] ? c->len[col] : 0;
	return c->row ? c->row[col] : NULL;
}

static const due_row_ops cur_ops = {cur_next, cur_null, cur_i64, cur_time,
				    cur_bytes};

void due__my_rows(due_rows *out, due_my_cur *c, MYSQL_RES *r)
{
	c->r = r;
	c->row = NULL;
	c->len = NULL;
	out->ops = &cur_ops;
	out->cur = c;
}
