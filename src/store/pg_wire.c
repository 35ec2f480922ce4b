/*
** pg_wire.c - the PostgreSQL session under pg.c (see pg_wire.h).
**
** Connection.  Statements are prepared once per session, on first use.  A
** call that finds the connection broken connects again once (and forgets
** the prepared statements, which died with the session).  A statement or
** COMMIT whose connection dropped has an unknown outcome: it is reported
** as DUE_ESTORE and never retried here; every transition is safe to retry
** by the caller because it is fenced by state and attempt.
**
** Bounded waits (issue 35).  libpq blocks as long as the server keeps
** silent: a network partition, a frozen server or proxy, another
** client's row lock would hold a call, and the thread that made it, for
** ever.  So nothing here waits on libpq's own blocking calls; every wait
** of the store's own connections is a poll() of the socket with a
** deadline of s->timeout_us (the URL's timeout=, default 10 s; the worker
** gives its connections a third of the lease):
**  - connecting (the main connection, the listen= one, a reconnect): the
**    connection is started with PQconnectStartParams and driven by
**    PQconnectPoll until the deadline, so the TCP connect, TLS and the
**    authentication together keep to the bound, to the microsecond;
**    libpq's connect_timeout counts whole seconds, per host, in its
**    blocking connect only.  A URL naming several hosts shares one bound
**    among them: a first host that accepts and then says nothing uses it
**    all.
**  - each statement: sent with PQsend* on a connection in libpq's
**    non-blocking mode (flushed in the same wait, so a large batch that
**    does not fit the socket buffer cannot block either), then read with
**    PQconsumeInput until PQgetResult has every result (one wait loop,
**    answered(), for the statements, the side question of slow answers
**    and the listening connection).
**  - at the deadline the connection is dropped (PQfinish, which cannot
**    block in non-blocking mode) and the call fails with DUE_ESTORE, "no
**    answer from the store at HOST:PORT in N s" (the server that
**    connection was on, or being connected to); the next call connects
**    again (due__pg_ok).  No cancel request is sent: it needs a new
**    connection to the very server that is not answering.  The server
**    learns of the drop by itself: client_connection_check_interval (1 s,
**    PostgreSQL 14 and later) ends a statement whose client has gone
**    instead of letting it run, and perhaps commit, unseen.
**  - lock waits: a statement queued behind another session's lock (a row
**    an operator holds FOR UPDATE, an ALTER TABLE) is stopped by the
**    server itself, lock_timeout being set for the session to three
**    quarters of the bound, so its answer (SQLSTATE 55P03, DUE_EBUSY,
**    "a lock held by another session") comes back before the deadline
**    and the connection stays usable.
**  - the kernel gives up too: tcp_user_timeout (the bound) ends a
**    connection whose sent data stays unacknowledged, and keepalives
**    (after at most the bound of silence) find an idle listening
**    connection whose peer vanished.
** A caller's connection (due_schedule_pg_tx) is never touched: it keeps
** its blocking mode and its session settings, and its waits are its own.
** The completion hook gets the store's connection back in blocking mode
** (pg.c), as libpq hands connections out.
**
** Errors.  due__pg_error() is the one translator of libpq failures: a broken
** connection (or SQLSTATE class 08, or the server shutting down) is
** DUE_ESTORE with libpq's own text; serialization failures, deadlocks and
** lock timeouts are DUE_EBUSY; a unique violation is DUE_ECONFLICT.
**
** Poolers.  Behind PgBouncer (or any pooler) in transaction mode a client
** holds a server session only for one transaction, so nothing may outlive
** one: with ?pooler=transaction every statement goes out unnamed
** (PQsendQueryParams: parse, bind and execute in one round trip, planned
** each time) instead of prepared once, the settings of session_setup
** (the planner's and lock_timeout) are not sent (set them for the role:
** docs/internals/store.md), and nothing LISTENs through the pooler.  The
** waits are bounded all the same: they are the client's.  Transactions
** (BEGIN ... COMMIT, transaction-scoped advisory locks, FOR UPDATE) are
** what such a pooler keeps whole, and pg.c uses nothing else: no
** temporary tables, no session advisory locks, no SET outside a
** transaction.
**
** Slow answers.  A statement of the store's own that has waited
** DUE_PG_SLOW_US (when its bound is longer than that) asks the server, on
** a side connection, what the session waits for (pg_stat_activity's wait
** event of PQbackendPID); the question keeps to 3 s and to what is left
** of the statement's own bound.  The case it is for: a standby promoted to
** primary that still has synchronous_standby_names set (copied with the
** base backup) waits, at every COMMIT, for a synchronous standby it no
** longer has, silently; the server then says SyncRep, and the warning
** names the setting.  A lock wait is named too; a statement that is
** working, not waiting (a bulk insert), is not reported.  One line per
** episode for the whole process (stderr, the worker's log): the episode
** ends, with one more line, at the first statement answered in time again.
**
** Wake-ups (listen, listen_drain, notify) come one of three ways:
**  - LISTEN on the store's own connection (a direct URL, the default);
**  - ?listen=URL: LISTEN on a connection of its own to that (direct)
**    server, so wake-ups stay immediate behind a pooler; a handle that
**    listens this way lets its other connection go until a statement
**    needs it, so a handle used only to listen holds one connection;
**  - behind a pooler without listen=: the fd is a timerfd ticking once a
**    second, and each tick reads a fingerprint of what wakes a worker
**    (the task id sequence, which every submit advances; the audit id
**    sequence, which retry, requeue and kill advance; the kind settings'
**    count and latest change) with one read-only statement.  A change
**    reports a wake on that tick and the next: a sequence moves before
**    the submit's transaction commits, so the refill the first wake
**    causes may not see the task yet.  Tasks that fall due by a lease's
**    end or a failure's backoff are the worker's own safety poll's, as
**    with every store.  A notify from this process (the worker's own
**    delivery check, due_notify after a caller's transaction) is reported
**    at once.  docs/internals/discovery.md has the measured lateness.
** listen_drain never waits: it reads what the socket already holds
** (PQconsumeInput on a non-blocking socket).  LISTEN, NOTIFY and the
** fingerprint are statements, bounded as above.
*/
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "store/pg_wire.h"

/* The longest a side question (slow answers) may take, connect included. */
#define SIDE_US 3000000LL

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/* Copy msg into buf without its trailing newlines. */
static const char *trimmed(char *buf, size_t n, const char *msg)
{
	size_t len;

	snprintf(buf, n, "%s", msg && *msg ? msg : "unknown error");
	len = strlen(buf);
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
		buf[--len] = '\0';
	return buf;
}

/*
** The lock_timeout of the store's own direct sessions, in milliseconds:
** three quarters of the bound, so the server's answer that it gave up
** comes back before the client's own deadline would drop the connection.
** 0 where it is not set (behind a pooler, on a caller's connection).
*/
static int64_t lock_ms(const due_store *s)
{
	int64_t ms = s->timeout_us * 3 / 4 / 1000;

	if (!s->own || s->pooler != DUE_PG_DIRECT)
		return 0;
	return ms > 0 ? ms : 1;
}

/*
** SQLSTATE 55P03 (lock_not_available): the statement waited lock_timeout
** for a lock another session holds (an operator's SELECT ... FOR UPDATE,
** a migration's ALTER TABLE).  DUE_EBUSY, saying so; the session is fine.
*/
static int lock_busy(const due_store *s, const char *what, const char *msg)
{
	char dur[48] = "";

	if (lock_ms(s) > 0)
		due_duration_format(dur, sizeof(dur), lock_ms(s) * 1000);
	return due__error_set(DUE_EBUSY,
			      "postgres store: %s: gave up waiting%s%s for a "
			      "lock held by another session (lock_timeout): "
			      "%s",
			      what, *dur ? " " : "", dur, msg);
}

int due__pg_error(due_store *s, const PGresult *r, const char *what)
{
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	const char *msg =
	    r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	bool bad = PQstatus(s->conn) == CONNECTION_BAD;
	char buf[768];
	int code = DUE_ERROR;

	snprintf(s->sqlstate, sizeof(s->sqlstate), "%s", state ? state : "");
	if (bad || !msg)
		msg = s->conn ? PQerrorMessage(s->conn) : "not connected";
	if (bad || (state && (strncmp(state, "08", 2) == 0 ||
			      strncmp(state, "57P0", 4) == 0)))
		code = DUE_ESTORE;
	else if (state && strcmp(state, "55P03") == 0)
		return lock_busy(s, what, trimmed(buf, sizeof(buf), msg));
	else if (state &&
		 (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0))
		code = DUE_EBUSY;
	else if (state && strcmp(state, "23505") == 0)
		code = DUE_ECONFLICT;
	else if (!r)
		code = DUE_ESTORE;
	return due__error_set(code, "postgres store: %s: %s", what,
			      trimmed(buf, sizeof(buf), msg));
}

/* A failed connection attempt c: DUE_ESTORE with libpq's reason. */
static int conn_error(PGconn *c, const char *what)
{
	char buf[768];

	return due__error_set(DUE_ESTORE, "postgres store: %s: %s", what,
			      trimmed(buf, sizeof(buf), PQerrorMessage(c)));
}

static void quiet_notices(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

/* ------------------------------------------------------------------ */
/* The store URL                                                       */
/* ------------------------------------------------------------------ */

static int hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
** v[0..n) with its %XX escapes decoded, into a new string *out (the
** caller frees it, also on failure).  1 when an escape is malformed or
** decodes to NUL, DUE_ENOMEM, else 0.
*/
static int pct_decode(char **out, const char *v, size_t n)
{
	char *o = malloc(n + 1);
	size_t k = 0;
	int hi, lo;

	if (!(*out = o))
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		if (v[i] != '%') {
			o[k++] = v[i];
			continue;
		}
		if (i + 2 >= n || (hi = hex(v[i + 1])) < 0 ||
		    (lo = hex(v[i + 2])) < 0 || (hi | lo) == 0)
			return 1;
		o[k++] = (char)(hi << 4 | lo);
		i += 2;
	}
	o[k] = '\0';
	return 0;
}

/* pooler=VALUE: transaction, or none/session (a session of our own). */
static int pooler_opt(due_pg_cfg *c, const char *url, const char *v, size_t n)
{
	if (n == 11 && memcmp(v, "transaction", n) == 0)
		c->pooler = DUE_PG_POOL_TRANSACTION;
	else if ((n == 4 && memcmp(v, "none", n) == 0) ||
		 (n == 7 && memcmp(v, "session", n) == 0))
		c->pooler = DUE_PG_DIRECT;
	else
		return due__error_set(
		    DUE_EINVAL,
		    "invalid pooler '%.*s' in store URL '%s': use "
		    "pooler=transaction (behind PgBouncer or another pooler in "
		    "transaction mode) or pooler=none",
		    (int)(n > 64 ? 64 : n), v, url);
	return 0;
}

/*
** listen=URL: percent-decoded, a postgres:// URL that libpq can read
** (checked without connecting; due's own options in it are libpq's
** unknown parameters, so they are refused too).
*/
static int listen_opt(due_pg_cfg *c, const char *url, const char *v, size_t n)
{
	PQconninfoOption *o = NULL;
	char *err = NULL, *d = NULL, buf[512];
	int rc = pct_decode(&d, v, n);

	if (rc < 0)
		goto done;
	if (rc > 0 || (strncmp(d, "postgres://", 11) != 0 &&
		       strncmp(d, "postgresql://", 13) != 0)) {
		rc = due__error_set(
		    DUE_EINVAL,
		    "invalid listen URL '%.*s' in store URL '%s': give a "
		    "direct postgres://[user@]host[:port]/database, "
		    "percent-encoded (%%3A for :, %%2F for /, %%40 for @, %%3F "
		    "for ?, %%26 for &, %%3D for =)",
		    (int)(n > 256 ? 256 : n), v, url);
		goto done;
	}
	if (!(o = PQconninfoParse(d, &err))) {
		rc = due__error_set(DUE_EINVAL,
				    "invalid listen URL '%s' in store URL "
				    "'%s': %s",
				    d, url,
				    err ? trimmed(buf, sizeof(buf), err)
					: "out of memory");
		goto done;
	}
	c->listen_uri = d;
	d = NULL;
done:
	PQconninfoFree(o);
	PQfreemem(err);
	free(d);
	return rc < 0 ? rc : 0;
}

/*
** One option key[=value] of the URL's query: due's own are read, the
** rest appended to c->uri (of length *len) for libpq.
*/
static int url_opt(due_pg_cfg *c, const char *url, const char *p, size_t n,
		   size_t *len)
{
	const char *eq = memchr(p, '=', n);
	size_t kn = eq ? (size_t)(eq - p) : n;
	const char *v = eq ? eq + 1 : p + n;
	size_t vn = eq ? n - kn - 1 : 0;
	bool pooler = kn == 6 && memcmp(p, "pooler", 6) == 0;
	bool listen = kn == 6 && memcmp(p, "listen", 6) == 0;

	/* (an option given twice never gets here: url.c refuses it) */
	if (pooler)
		return pooler_opt(c, url, v, vn);
	if (listen)
		return listen_opt(c, url, v, vn);
	c->uri[(*len)++] = strchr(c->uri, '?') ? '&' : '?';
	memcpy(c->uri + *len, p, n);
	*len += n;
	c->uri[*len] = '\0';
	return 0;
}

int due__pg_parse_url(due_pg_cfg **out, const char *shown, const char *text)
{
	const char *q = strchr(text, '?');
	size_t len = q ? (size_t)(q - text) : strlen(text);
	due_pg_cfg *c;
	int rc = 0;

	if (!(*out = c = calloc(1, sizeof(*c))) ||
	    !(c->uri = malloc(strlen(text) + 1)))
		return due__error_set(DUE_ENOMEM, "out of memory");
	memcpy(c->uri, text, len);
	c->uri[len] = '\0';
	for (const char *p = q ? q + 1 : NULL; p && rc == 0;) {
		const char *amp = strchr(p, '&');
		size_t n = amp ? (size_t)(amp - p) : strlen(p);

		if (n)
			rc = url_opt(c, shown, p, n, &len);
		p = amp ? amp + 1 : NULL;
	}
	return rc;
}

/*
** The URL is a libpq URI: postgres://... or postgresql://... with libpq's
** own options in its query, and due's (pooler=, listen=), which
** due__pg_parse_url takes out before libpq sees it.
*/
int due__pg_parse_store_url(due_pg_cfg **out, const due_url *u)
{
	size_t n = strlen(u->scheme) + strlen(u->rest) + 2;
	due_pg_cfg *c = NULL;
	char *text;
	int rc;

	*out = NULL;
	if (strncmp(u->rest, "//", 2) != 0)
		return due__error_set(
		    DUE_EINVAL,
		    "malformed store URL '%s': use %s://[user@]host[:port]/"
		    "database",
		    u->text, u->scheme);
	/* the URL without the core's timeout= (u->rest), for libpq */
	if (!(text = malloc(n)))
		return due__error_set(DUE_ENOMEM, "out of memory");
	snprintf(text, n, "%s:%s", u->scheme, u->rest);
	rc = due__pg_parse_url(&c, u->text, text);
	free(text);
	*out = c;
	return rc;
}

void due__pg_cfg_free(due_pg_cfg *cfg)
{
	if (!cfg)
		return;
	free(cfg->uri);
	free(cfg->listen_uri);
	free(cfg);
}

/* ------------------------------------------------------------------ */
/* Waiting within the bound (see the essay)                            */
/* ------------------------------------------------------------------ */

/*
** Wait until c's socket is ready for `events` or the monotonic time
** `until` (us) comes: the poll() under every wait of this file.  Its
** revents; 0 at `until`; -1 when there is no socket or poll() failed
** (EINTR waits on).
*/
static int wait_sock(PGconn *c, short events, int64_t until)
{
	struct pollfd p = {PQsocket(c), events, 0};
	int64_t left;
	int n;

	if (p.fd < 0)
		return -1;
	do {
		if ((left = until - due__mono_us()) <= 0)
			return 0;
		left = (left + 999) / 1000;
		n = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
	} while (n < 0 && errno == EINTR);
	return n < 0 ? -1 : n == 0 ? 0 : p.revents;
}

/*
** "HOST:PORT" of the server c is on, or is being connected to (of a
** multi-host URL, the host in use or being tried); an IPv6 address in
** brackets.
*/
static void where_of(PGconn *c, char *out, size_t n)
{
	const char *h = PQhost(c), *p = PQport(c);

	if (!h || !*h)
		h = "localhost";
	if (!p || !*p)
		p = "5432";
	if (strchr(h, ':'))
		snprintf(out, n, "[%s]:%s", h, p);
	else
		snprintf(out, n, "%s:%s", h, p);
}

/*
** *cp gave no answer within s's bound: drop it (PQfinish does not wait on
** a non-blocking connection) and fail with DUE_ESTORE naming its server.
** The store's own connection is connected again by the next call
** (due__pg_ok); its prepared statements died with it.
*/
static int no_answer(due_store *s, PGconn **cp)
{
	char at[300];

	where_of(*cp, at, sizeof(at));
	PQfinish(*cp);
	*cp = NULL;
	if (cp == &s->conn)
		memset(s->prepared, 0, sizeof(s->prepared));
	return due__store_no_answer(at, s->timeout_us);
}

/*
** Finish connecting c (started by PQconnectStartParams) by `deadline`
** (monotonic us), PQconnectPoll driven by our own poll().  0 when c is
** connected or has failed (PQstatus says which), 1 when the deadline
** came first.
*/
static int connect_poll(PGconn *c, int64_t deadline)
{
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;
	int ev;

	if (PQstatus(c) == CONNECTION_BAD)
		return 0;
	while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
		/* the socket may change (the next host or address) */
		ev =
		    wait_sock(c, st == PGRES_POLLING_READING ? POLLIN : POLLOUT,
			      deadline);
		if (ev == 0 || (ev < 0 && due__mono_us() >= deadline))
			return 1;
		st = PQconnectPoll(c);
	}
	return 0;
}

/*
** How a statement waits: until `deadline` (monotonic us); `slow` (the
** store whose own statement it is, NULL for the others) hears of it at
** `next_slow` and each DUE_PG_SLOW_US after (slow answers).
*/
typedef struct pg_wait {
	int64_t t0, deadline, next_slow;
	due_store *slow;
	const char *what;
} pg_wait;

static void slow_begin(due_store *s, const char *what, int64_t deadline);

/*
** The one wait for an answer: flush what PQsend* queued (a large batch
** may not fit the socket buffer at once) and read until PQgetResult()
** will not block.  true then, also when the connection failed (the
** result says so); false when w->deadline came first.  c is in
** non-blocking mode.
*/
static bool answered(PGconn *c, pg_wait *w)
{
	int64_t now, until;
	int f, ev;

	for (;;) {
		if (PQstatus(c) == CONNECTION_BAD || (f = PQflush(c)) < 0 ||
		    (f == 0 && !PQisBusy(c)))
			return true;
		if ((now = due__mono_us()) >= w->deadline)
			return false;
		if (now >= w->next_slow) { /* asked again each period */
			slow_begin(w->slow, w->what, w->deadline);
			w->next_slow += DUE_PG_SLOW_US;
			continue;
		}
		until = w->next_slow < w->deadline ? w->next_slow : w->deadline;
		ev = wait_sock(c, (short)(POLLIN | (f ? POLLOUT : 0)), until);
		if (ev < 0)
			return false; /* poll failed: no answer can be read */
		if ((ev & (POLLIN | POLLERR | POLLHUP | POLLNVAL)) &&
		    !PQconsumeInput(c))
			return true; /* the failure is PQgetResult's */
	}
}

/*
** Read every result of what was sent on c, within w: as PQexec would
** return it (the first failed result, else the last) into *out, NULL
** when libpq had none (out of memory).  false when w's deadline came
** first (*out NULL).
*/
static bool results(PGconn *c, pg_wait *w, PGresult **out)
{
	PGresult *r, *keep = NULL;

	*out = NULL;
	for (;;) {
		if (!answered(c, w)) {
			PQclear(keep);
			return false;
		}
		if (!(r = PQgetResult(c)))
			break;
		if (keep && PQresultStatus(keep) == PGRES_FATAL_ERROR) {
			PQclear(r);
			continue;
		}
		PQclear(keep);
		keep = r;
	}
	*out = keep;
	return true;
}

static void slow_end(int64_t waited_us);

/*
** A statement was just sent on *cp, one of s's own connections (`sent`:
** what PQsend* returned): its result into *out within s's bound, as
** results() gives it.  0, with *out NULL when libpq refused to send it
** (PQerrorMessage says why); DUE_ESTORE when no answer came in time, the
** connection dropped (no_answer).
*/
static int trip(due_store *s, PGconn **cp, int sent, const char *what,
		PGresult **out)
{
	pg_wait w = {due__mono_us(), 0, INT64_MAX, NULL, what};
	bool ok;

	*out = NULL;
	if (!sent)
		return 0;
	w.deadline = w.t0 + s->timeout_us;
	if (cp == &s->conn && s->timeout_us > DUE_PG_SLOW_US) {
		w.slow = s;
		w.next_slow = w.t0 + DUE_PG_SLOW_US;
	}
	ok = results(*cp, &w, out);
	if (w.slow) /* no answer waited past DUE_PG_SLOW_US: still open */
		slow_end(due__mono_us() - w.t0);
	return ok ? 0 : no_answer(s, cp);
}

/*
** Start a connection with keys/vals and finish it by `deadline`: 0 with
** *out connected, in non-blocking mode; 1 when the deadline came (*out
** still set, to name its server); DUE_ESTORE when it failed (*out holds
** the failed connection, for its message) or DUE_ENOMEM.
*/
static int connect_by(PGconn **out, const char *const *keys,
		      const char *const *vals, int64_t deadline)
{
	PGconn *c = PQconnectStartParams(keys, vals, 1);

	if (!(*out = c))
		return due__error_set(DUE_ENOMEM, "out of memory");
	PQsetNoticeProcessor(c, quiet_notices, NULL);
	if (connect_poll(c, deadline) > 0)
		return 1;
	if (PQstatus(c) != CONNECTION_OK || PQsetnonblocking(c, 1) != 0)
		return DUE_ESTORE;
	return 0;
}

static long long clamp(int64_t v, int64_t lo, int64_t hi)
{
	return (long long)(v < lo ? lo : v > hi ? hi : v);
}

/*
** A new connection of ours to uri into *out, within s's bound (`what`
** names it in a failure: DUE_ESTORE with libpq's reason, or no_answer()).
** libpq reads the keys in order and the last value wins, so the URI
** (expanded from dbname) overrides the defaults before it:
**  - tcp_user_timeout (the bound): the kernel ends a connection whose
**    sent data stays unacknowledged that long (a partition mid-write);
**  - keepalives after the bound of silence (30 s at most), so an idle
**    connection whose peer vanished (a restarted host, a NAT that forgot
**    it) is found dead: the worker's listening connection runs no query
**    that would notice.
** On failure *out is the failed connection or NULL.
*/
static int dial(due_store *s, const char *uri, PGconn **out, const char *what)
{
	int64_t bound_s = s->timeout_us / 1000000;
	char user_ms[24], idle[24], every[24];
	const char *const keys[] = {
	    "tcp_user_timeout",		 "keepalives",
	    "keepalives_idle",		 "keepalives_interval",
	    "keepalives_count",		 "dbname",
	    "fallback_application_name", NULL};
	const char *const vals[] = {user_ms, "1", idle,	 every,
				    "3",     uri, "due", NULL};
	int rc;

	snprintf(user_ms, sizeof(user_ms), "%lld",
		 (long long)(s->timeout_us + 999) / 1000);
	snprintf(idle, sizeof(idle), "%lld", clamp(bound_s, 1, 30));
	snprintf(every, sizeof(every), "%lld", clamp(bound_s / 3, 1, 10));
	rc = connect_by(out, keys, vals, due__mono_us() + s->timeout_us);
	if (rc > 0)
		return no_answer(s, out);
	if (rc == DUE_ESTORE)
		return conn_error(*out, what);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Slow answers (see the essay)                                        */
/* ------------------------------------------------------------------ */

/* An episode is open: its warning was written, no answer in time since. */
static atomic_bool slow_open;
static atomic_llong slow_max_us; /* the longest wait of the open episode */

/*
** A connection beside c to the very server c is on (its host and port,
** not the URL's list), for one question, connected by `deadline`; NULL
** when it cannot be made.  Every other setting of c (user, database,
** TLS) is kept.
*/
static PGconn *side_dial(PGconn *c, int64_t deadline)
{
	PQconninfoOption *o = PQconninfo(c), *i;
	const char *keys[64], *vals[64], *opts = "";
	char opt[1024];
	int n = 0;
	PGconn *side = NULL;

	if (!o)
		return NULL;
	for (i = o; i->keyword && n < 56; i++) {
		if (i->val && strcmp(i->keyword, "options") == 0)
			opts = i->val;
		if (!i->val || !*i->val || strcmp(i->keyword, "host") == 0 ||
		    strcmp(i->keyword, "hostaddr") == 0 ||
		    strcmp(i->keyword, "port") == 0 ||
		    strcmp(i->keyword, "options") == 0 ||
		    strcmp(i->keyword, "connect_timeout") == 0 ||
		    strcmp(i->keyword, "target_session_attrs") == 0)
			continue;
		keys[n] = i->keyword;
		vals[n++] = i->val;
	}
	/* the server ends the question itself after 2 s too, should the
	   client's deadline be longer: it must never pile up beside a
	   session that already waits */
	snprintf(opt, sizeof(opt), "%s%s-c statement_timeout=2000", opts,
		 *opts ? " " : "");
	keys[n] = "options", vals[n++] = opt;
	keys[n] = "host", vals[n++] = PQhost(c);
	keys[n] = "port", vals[n++] = PQport(c);
	keys[n] = NULL, vals[n] = NULL;
	if (connect_by(&side, keys, vals, deadline) != 0) {
		PQfinish(side);
		side = NULL;
	}
	PQconninfoFree(o);
	return side;
}

/*
** What the server says c's session waits for ("SyncRep", "Lock/tuple"),
** into out, asked by `deadline`; "" when it is working without waiting,
** "?" when it could not be asked.
*/
static void wait_event(PGconn *c, int64_t deadline, char *out, size_t n)
{
	PGconn *side = side_dial(c, deadline);
	pg_wait w = {0, deadline, INT64_MAX, NULL, NULL};
	char pid[16];
	const char *v[1] = {pid};
	PGresult *r = NULL;

	snprintf(out, n, "?");
	if (!side)
		return;
	snprintf(pid, sizeof(pid), "%d", PQbackendPID(c));
	if (PQsendQueryParams(
		side,
		"SELECT CASE WHEN wait_event = 'SyncRep' THEN 'SyncRep'"
		" ELSE coalesce(wait_event_type || '/' || wait_event,"
		" '') END FROM pg_stat_activity WHERE pid = $1::int",
		1, NULL, v, NULL, NULL, 0) &&
	    results(side, &w, &r) && PQresultStatus(r) == PGRES_TUPLES_OK &&
	    PQntuples(r) == 1)
		snprintf(out, n, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	PQfinish(side);
}

/*
** A statement of s (`what`) has waited DUE_PG_SLOW_US: ask why (within
** SIDE_US and by the statement's own deadline), and open an episode with
** one warning unless one is open or the session is only busy working.
*/
static void slow_begin(due_store *s, const char *what, int64_t deadline)
{
	int64_t side = due__mono_us() + SIDE_US;
	char ev[128];

	if (atomic_load(&slow_open))
		return;
	wait_event(s->conn, side < deadline ? side : deadline, ev, sizeof(ev));
	if (!ev[0] || atomic_exchange(&slow_open, true))
		return;
	atomic_store(&slow_max_us, DUE_PG_SLOW_US);
	if (strcmp(ev, "SyncRep") == 0)
		due__log(
		    "warning", "postgres store", NULL,
		    "%s on %s:%s has waited %d s for a synchronous standby "
		    "(wait event SyncRep): the commit is done here but not "
		    "acknowledged until a standby named in "
		    "synchronous_standby_names confirms it.  A primary "
		    "promoted from a standby makes every commit wait for one "
		    "it no longer has (each gives up at the store's "
		    "timeout=, its outcome unknown) until that setting is "
		    "cleared (ALTER SYSTEM SET synchronous_standby_names = "
		    "''; SELECT pg_reload_conf()) or a standby is attached",
		    what, PQhost(s->conn), PQport(s->conn),
		    (int)(DUE_PG_SLOW_US / 1000000));
	else if (strcmp(ev, "?") == 0)
		due__log(
		    "warning", "postgres store", NULL,
		    "%s on %s:%s has waited %d s for the server (it could "
		    "not be asked why); if it was promoted from a standby, "
		    "check synchronous_standby_names",
		    what, PQhost(s->conn), PQport(s->conn),
		    (int)(DUE_PG_SLOW_US / 1000000));
	else
		due__log(
		    "warning", "postgres store", NULL,
		    "%s on %s:%s has waited %d s for the server (wait event "
		    "%s%s)",
		    what, PQhost(s->conn), PQport(s->conn),
		    (int)(DUE_PG_SLOW_US / 1000000), ev,
		    strncmp(ev, "Lock/", 5) == 0
			? ": a lock held by another session"
			: "");
}

/* An answer came after waited_us: close an open episode if in time. */
static void slow_end(int64_t waited_us)
{
	long long max = atomic_load(&slow_max_us);

	if (!atomic_load(&slow_open))
		return;
	while (waited_us > max &&
	       !atomic_compare_exchange_weak(&slow_max_us, &max, waited_us))
		;
	if (waited_us < DUE_PG_SLOW_US && atomic_exchange(&slow_open, false))
		due__log("note", "postgres store", NULL,
			 "statements are answered in time again (the longest "
			 "wait was %.1f s)",
			 (double)atomic_load(&slow_max_us) / 1e6);
}

/* ------------------------------------------------------------------ */
/* Statements on the store's own connection, or a caller's             */
/* ------------------------------------------------------------------ */

/*
** Run a statement on s->conn into *out, as PQexecPrepared, PQexecParams
** and PQexec would, but bounded (trip): 0, or DUE_ESTORE when no answer
** came in time.  *out may be a failed result or NULL (due__pg_error
** reads either).  A caller's connection (pg_tx, !s->own) is used as it
** is: its blocking calls, its waits.
*/
static int exec_prepared(due_store *s, const char *name, const due_pg_params *p,
			 const char *what, PGresult **out)
{
	if (!s->own) {
		*out = PQexecPrepared(s->conn, name, p->n, p->v, p->len, p->fmt,
				      1);
		return 0;
	}
	return trip(
	    s, &s->conn,
	    PQsendQueryPrepared(s->conn, name, p->n, p->v, p->len, p->fmt, 1),
	    what, out);
}

static int exec_params(due_store *s, const char *sql, const due_pg_params *p,
		       const char *what, PGresult **out)
{
	if (!s->own) {
		*out = PQexecParams(s->conn, sql, p->n, NULL, p->v, p->len,
				    p->fmt, 1);
		return 0;
	}
	return trip(s, &s->conn,
		    PQsendQueryParams(s->conn, sql, p->n, NULL, p->v, p->len,
				      p->fmt, 1),
		    what, out);
}

static int exec_simple(due_store *s, const char *sql, const char *what,
		       PGresult **out)
{
	if (!s->own) {
		*out = PQexec(s->conn, sql);
		return 0;
	}
	return trip(s, &s->conn, PQsendQuery(s->conn, sql), what, out);
}

/*
** The settings of a store session: lock_timeout (the essay: lock
** waits), client_connection_check_interval (the essay: the drop) and the
** planner's.  A queue table's statistics are nearly always wrong (it
** churns faster than ANALYZE runs), and with an estimate of a few rows
** the planner may take a bitmap scan of a whole priority and sort it
** rather than the ordered index scan a claim needs (read one priority's
** due tasks in due_at order from due_task_claim and stop at the claim's
** limit): seen reading and sorting 4,900 rows to claim 4, which halved
** drain throughput.  So, for the store's own sessions only (never a
** caller's connection):
**  - enable_sort = off: a plan that sorts is taken only when no plan
**    avoids it; every pick of this store has an index in its order.
**    (enable_bitmapscan = off was tried first: with stale statistics the
**    claim's update by id then chose a sequential scan.)
**  - enable_seqscan = off: a cached plan made while the table was small
**    looks up ids (`id = ANY (...)`) by a sequential scan, and keeps doing
**    so when the table has grown to a million rows until autovacuum's
**    next ANALYZE (seen: 100 ms per claim after a burst of 1 M submits).
**    Every statement on the hot path has an index; an operator's count
**    over the whole table (stats) is at worst twice as slow (1 M rows:
**    0.12 s -> 0.2 s).
**  - jit = off: a queue statement runs in well under a millisecond, and
**    JIT compiling it costs hundreds (seen: 500 ms per claim once the
**    estimates of a 1 M-row table passed jit_above_cost).
**  - plan_cache_mode = force_generic_plan: a custom plan per execution
**    cost more to make (0.8 ms on the complete-and-claim statement) than
**    the statement takes to run.
** One statement, so one round trip; a server that refuses a setting is
** not an error (the store works, only slower, or waits for locks up to
** the client's bound), so its answer is not checked; no answer is
** (DUE_ESTORE: the connection was dropped).  The check interval
** (PostgreSQL 14 and later) goes alone, so that an engine without it
** keeps the others.  Behind a pooler in transaction mode the
** settings would not stick, and would leak to other clients; set them
** for the role instead (ALTER ROLE ... SET), docs/internals/store.md.
*/
static int session_setup(due_store *s)
{
	static const char sql[] =
	    "SELECT set_config('lock_timeout', $1, false),"
	    " set_config('enable_sort', 'off', false),"
	    " set_config('enable_seqscan', 'off', false),"
	    " set_config('jit', 'off', false),"
	    " set_config('plan_cache_mode', 'force_generic_plan', false)";
	due_pg_params p = {0};
	PGresult *r = NULL;
	int rc;

	if (s->pooler != DUE_PG_DIRECT)
		return 0;
	due__pg_int(&p, lock_ms(s));
	if ((rc = exec_params(s, sql, &p, "set up the session", &r)) < 0)
		return rc;
	PQclear(r);
	if (PQserverVersion(s->conn) < 140000)
		return 0;
	rc = exec_simple(s, "SET client_connection_check_interval = 1000",
			 "set up the session", &r);
	PQclear(r);
	return rc;
}

/*
** The URI goes to libpq whole (due__pg_parse_url took due's own options
** out of it); the label names the store in messages.
*/
int due__pg_connect(due_store **out, const due_pg_cfg *cfg, int64_t timeout_us)
{
	due_store *s;
	int rc;

	*out = NULL;
	if (!(s = calloc(1, sizeof(*s))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	*out = s;
	s->own = true;
	s->timer_fd = -1;
	s->pooler = cfg->pooler;
	s->timeout_us = timeout_us;
	if (!(s->uri = due__strdup_n(cfg->uri, strlen(cfg->uri))) ||
	    (cfg->listen_uri &&
	     !(s->listen_uri =
		   due__strdup_n(cfg->listen_uri, strlen(cfg->listen_uri)))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	if ((rc = dial(s, s->uri, &s->conn, "cannot connect")) < 0)
		return rc;
	snprintf(s->label, sizeof(s->label), "postgres://%s@%s:%s/%s",
		 PQuser(s->conn), PQhost(s->conn), PQport(s->conn),
		 PQdb(s->conn));
	return session_setup(s);
}

void due__pg_disconnect(due_store *s)
{
	if (!s)
		return;
	if (s->conn)
		PQfinish(s->conn);
	if (s->lconn)
		PQfinish(s->lconn);
	if (s->timer_fd >= 0)
		close(s->timer_fd);
	free(s->uri);
	free(s->listen_uri);
	free(s);
}

/* What this handle LISTENs to: new tasks, or finished ones (listen_done). */
static const char *listen_sql(const due_store *s)
{
	return s->listen_done ? "LISTEN " DUE_PG_DONE_CHANNEL
			      : "LISTEN " DUE_PG_CHANNEL;
}

/*
** Connect s->conn again: it broke, got no answer in time (no_answer let
** it go) or listen() let it go.  A fresh session: the prepared statements
** are gone, the settings are made again, and LISTEN too when this
** connection listens.
*/
static int reconnect(due_store *s)
{
	PGresult *r = NULL;
	int rc;

	if (!s->own) /* a caller's connection is the caller's to mend */
		return due__pg_error(s, NULL, "connection");
	if (s->conn)
		PQfinish(s->conn);
	s->conn = NULL;
	memset(s->prepared, 0, sizeof(s->prepared));
	if ((rc = dial(s, s->uri, &s->conn, "reconnect")) < 0 ||
	    (rc = session_setup(s)) < 0 || !s->listening)
		return rc;
	/* LISTEN died with the old session */
	if ((rc = exec_simple(s, listen_sql(s), "listen", &r)) < 0)
		return rc;
	s->listening = PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	return 0;
}

/*
** Every path of pg.c closes its own transactions, so one still open means
** this handle is being used from inside a completion hook: refused
** (DUE_EINVAL), because committing or rolling back here would decide the
** hook's transaction behind its back.
*/
int due__pg_ok(due_store *s)
{
	int rc;

	s->sqlstate[0] = '\0';
	if (PQstatus(s->conn) != CONNECTION_OK && (rc = reconnect(s)) < 0)
		return rc;
	if (PQtransactionStatus(s->conn) != PQTRANS_IDLE)
		return due__error_set(
		    DUE_EINVAL,
		    "postgres store: a transaction is open on this handle's "
		    "connection (inside a completion hook, use the hook's "
		    "connection with due_schedule_pg_tx)");
	return 0;
}

/* ------------------------------------------------------------------ */
/* Parameters, statements, transactions                                */
/* ------------------------------------------------------------------ */

void due__pg_int(due_pg_params *p, int64_t v)
{
	snprintf(p->num[p->n], sizeof(p->num[0]), "%lld", (long long)v);
	p->v[p->n] = p->num[p->n];
	p->len[p->n] = 0;
	p->fmt[p->n++] = 0;
}

void due__pg_text(due_pg_params *p, const char *t)
{
	p->v[p->n] = t;
	p->len[p->n] = 0;
	p->fmt[p->n++] = 0;
}

void due__pg_bin(due_pg_params *p, const void *d, size_t n)
{
	p->v[p->n] = d ? d : "";
	p->len[p->n] = (int)n;
	p->fmt[p->n++] = 1;
}

void due__pg_time(due_pg_params *p, due_time t)
{
	uint64_t v = (uint64_t)t - (uint64_t)DUE_PG_EPOCH_US;
	unsigned char *b = (unsigned char *)p->num[p->n];

	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (56 - 8 * i));
	p->v[p->n] = p->num[p->n];
	p->len[p->n] = 8;
	p->fmt[p->n++] = 1;
}

static bool sqlstate_is(const PGresult *r, const char *code)
{
	const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	return st && strcmp(st, code) == 0;
}

/* Prepare statement `id` in this session (already there counts as done). */
static int prepare(due_store *s, int id, const char *sql, const char *name,
		   const char *what)
{
	PGresult *r = NULL;
	int rc = trip(s, &s->conn, PQsendPrepare(s->conn, name, sql, 0, NULL),
		      what, &r);

	if (rc == 0 && PQresultStatus(r) != PGRES_COMMAND_OK &&
	    !sqlstate_is(r, "42P05"))
		rc = due__pg_error(s, r, what);
	PQclear(r);
	s->prepared[id] = rc == 0;
	return rc;
}

/*
** When the session lost our statement (26000: DEALLOCATE ALL, or a pooler
** that moved us to another server session) and no transaction is open,
** it is prepared again and run once more: it never ran, so that is safe.
** A caller's connection and pooler mode never name a statement: it goes
** unnamed, parsed and planned with each execution.
*/
int due__pg_run(due_store *s, int id, const char *sql, const due_pg_params *p,
		const char *what, PGresult **out)
{
	char name[16];
	PGresult *r;
	ExecStatusType st;
	bool named = s->own && s->pooler == DUE_PG_DIRECT;
	int rc;

	*out = NULL;
	snprintf(name, sizeof(name), "due_%d", id);
	for (int tries = 0;; tries++) {
		if (named && !s->prepared[id] &&
		    (rc = prepare(s, id, sql, name, what)) < 0)
			return rc;
		rc = named ? exec_prepared(s, name, p, what, &r)
			   : exec_params(s, sql, p, what, &r);
		if (rc < 0)
			return rc;
		st = PQresultStatus(r);
		if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
			*out = r;
			return 0;
		}
		if (!named || tries > 0 || !sqlstate_is(r, "26000") ||
		    PQtransactionStatus(s->conn) != PQTRANS_IDLE)
			break;
		s->prepared[id] = false;
		PQclear(r);
	}
	rc = due__pg_error(s, r, what);
	PQclear(r);
	return rc;
}

/* r, the result of a statement sent (rc), into *out when it succeeded. */
static int kept(due_store *s, int rc, PGresult *r, const char *what,
		PGresult **out)
{
	*out = NULL;
	if (rc < 0)
		return rc;
	if (PQresultStatus(r) != PGRES_COMMAND_OK &&
	    PQresultStatus(r) != PGRES_TUPLES_OK) {
		rc = due__pg_error(s, r, what);
		PQclear(r);
		return rc;
	}
	*out = r;
	return 0;
}

int due__pg_query(due_store *s, const char *sql, const char *what,
		  PGresult **out)
{
	PGresult *r = NULL;
	int rc = exec_simple(s, sql, what, &r);

	return kept(s, rc, r, what, out);
}

int due__pg_query_text(due_store *s, const char *sql, const due_pg_params *p,
		       const char *what, PGresult **out)
{
	PGresult *r = NULL;
	int rc = trip(s, &s->conn,
		      s->conn ? PQsendQueryParams(s->conn, sql, p->n, NULL,
						  p->v, p->len, p->fmt, 0)
			      : 0,
		      what, &r);

	return kept(s, rc, r, what, out);
}

int due__pg_command(due_store *s, const char *sql, const char *what)
{
	PGresult *r = NULL;
	int rc = due__pg_query(s, sql, what, &r);

	PQclear(r);
	return rc;
}

int due__pg_begin(due_store *s) { return due__pg_command(s, "BEGIN", "begin"); }

/*
** The error already recorded stays: a ROLLBACK that gets no answer only
** drops the connection (which rolls back as surely).
*/
void due__pg_rollback(due_store *s)
{
	char msg[1024];
	int code = due_error_last_code();
	PGresult *r = NULL;

	if (PQtransactionStatus(s->conn) == PQTRANS_IDLE ||
	    PQstatus(s->conn) != CONNECTION_OK)
		return;
	snprintf(msg, sizeof(msg), "%s", due_error_last());
	if (exec_simple(s, "ROLLBACK", "rollback", &r) < 0)
		due__error_set(code, "%s", msg);
	PQclear(r);
}

/*
** A connection lost during COMMIT leaves the outcome unknown: DUE_ESTORE,
** never retried (so does a COMMIT that got no answer in time).  A
** transaction that had already failed answers COMMIT with ROLLBACK; that
** is an error too, not a success.
*/
int due__pg_commit(due_store *s)
{
	PGresult *r = NULL;
	char buf[512];
	int rc = exec_simple(s, "COMMIT", "commit", &r);

	if (rc < 0)
		return rc;
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		if (PQstatus(s->conn) == CONNECTION_BAD)
			rc = due__error_set(
			    DUE_ESTORE,
			    "postgres store: commit outcome unknown, the "
			    "connection was lost: %s",
			    trimmed(buf, sizeof(buf), PQerrorMessage(s->conn)));
		else
			rc = due__pg_error(s, r, "commit");
	} else if (strcmp(PQcmdStatus(r), "COMMIT") != 0) {
		rc = due__error_set(
		    DUE_ERROR, "postgres store: commit: the "
			       "transaction had failed and was rolled back");
	}
	PQclear(r);
	if (rc < 0)
		due__pg_rollback(s);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Wake-ups                                                            */
/* ------------------------------------------------------------------ */

/* Notifies made in this process: a polled listener reports them at once. */
static atomic_ulong notified;

/*
** The direct listening connection of ?listen=, connected (at most once a
** second while it fails) and LISTENing.  Notifications sent while it was
** down are lost, so a fresh one reports a wake at its first drain.  The
** first time, the handle's other connection is let go when idle: a handle
** only used to listen then holds this one connection (due__pg_ok connects
** the other again when a statement needs it).
*/
static int listen_direct(due_store *s)
{
	int64_t now = due__mono_us();
	bool first = s->lconn_tried == 0;
	char buf[512];
	PGresult *r = NULL;
	int rc;

	if (s->lconn && PQstatus(s->lconn) == CONNECTION_OK)
		return 0;
	if (!first && now - s->lconn_tried < 1000000)
		return due__error_set(DUE_ESTORE,
				      "postgres store: the listen connection "
				      "is down (tried again each second)");
	s->lconn_tried = now;
	if (s->lconn)
		PQfinish(s->lconn);
	s->lconn = NULL;
	if ((rc = dial(s, s->listen_uri, &s->lconn,
		       "listen connection (listen=)")) < 0 ||
	    (rc = trip(s, &s->lconn, PQsendQuery(s->lconn, listen_sql(s)),
		       "listen", &r)) < 0)
		return rc;
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		due__error_set(DUE_ESTORE,
			       "postgres store: listen connection (listen=): "
			       "%s",
			       trimmed(buf, sizeof(buf),
				       r ? PQresultErrorMessage(r)
					 : PQerrorMessage(s->lconn)));
		PQclear(r);
		PQfinish(s->lconn);
		s->lconn = NULL;
		return DUE_ESTORE;
	}
	PQclear(r);
	s->wake_ticks = 1;
	if (first && s->conn && PQtransactionStatus(s->conn) == PQTRANS_IDLE) {
		PQfinish(s->conn);
		s->conn = NULL;
	}
	return 0;
}

/*
** What a worker wakes for, as one text (see the essay): the id sequences
** of tasks and audit rows, the kind settings' and the schedules' counts
** and latest changes (a schedule put or removed: the scheduler's next pass
** comes at once, not at its 5-minute look).  Sequences are read without
** writing; the statement goes unnamed.
*/
static int fingerprint(due_store *s, char *out, size_t n)
{
	static const char sql[] =
	    "SELECT (SELECT last_value FROM due_task_id_seq)::text || '/' ||"
	    " (SELECT last_value FROM due_audit_id_seq)::text || '/' ||"
	    " (SELECT count(*)::text || '/' || coalesce((extract(epoch FROM"
	    " max(updated_at)) * 1000000)::int8, 0)::text FROM due_kind)"
	    " || '/' || (SELECT count(*)::text || '/' || coalesce((extract("
	    "epoch FROM max(updated_at)) * 1000000)::int8, 0)::text FROM"
	    " due_schedule)";
	due_pg_params none = {0};
	PGresult *r = NULL;
	int rc;

	/* binary results: a text column's binary form is its bytes */
	if ((rc = due__pg_ok(s)) < 0 ||
	    (rc = exec_params(s, sql, &none, "read the wake-up fingerprint",
			      &r)) < 0)
		return rc;
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		rc = due__pg_error(s, r, "read the wake-up fingerprint");
	else
		snprintf(out, n, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	return rc;
}

/* The timerfd of a pooled store without listen=; the first tick at once. */
static int listen_polled(due_store *s, int *fd)
{
	struct itimerspec every = {{1, 0}, {0, 1000000}};

	if (s->timer_fd < 0) {
		s->gen_seen = atomic_load(&notified);
		if (fingerprint(s, s->seen, sizeof(s->seen)) < 0)
			s->seen[0] = '\0'; /* the first tick reads it */
		s->timer_fd =
		    timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (s->timer_fd < 0 ||
		    timerfd_settime(s->timer_fd, 0, &every, NULL) < 0)
			return due__error_set(DUE_ESTORE,
					      "postgres store: timerfd: %s",
					      strerror(errno));
	}
	*fd = s->timer_fd;
	return 0;
}

/*
** A server that answers LISTEN with feature_not_supported, a syntax
** error or an unknown function (PostgreSQL-compatible engines without
** it: CockroachDB, YugabyteDB without its LISTEN/NOTIFY flag) has no
** wake-ups: DUE_EUNSUPPORTED saying so, which the worker logs once as it
** falls back to its poll.  Any other failure (rc) is returned as it is.
*/
static int no_listen(due_store *s, int rc)
{
	char msg[512];

	if (strcmp(s->sqlstate, "0A000") != 0 &&
	    strcmp(s->sqlstate, "42601") != 0 &&
	    strcmp(s->sqlstate, "42883") != 0)
		return rc;
	snprintf(msg, sizeof(msg), "%s", due_error_last());
	return due__error_set(DUE_EUNSUPPORTED,
			      "postgres store: this server has no LISTEN "
			      "(CockroachDB? YugabyteDB without its "
			      "LISTEN/NOTIFY flag?), new tasks are found by "
			      "polling only: %s",
			      msg);
}

int due__pg_listen(due_store *s, int *fd)
{
	int rc;

	*fd = -1;
	if (s->listen_uri) {
		if ((rc = listen_direct(s)) < 0)
			return rc;
		*fd = PQsocket(s->lconn);
	} else if (s->pooler != DUE_PG_DIRECT) {
		return listen_polled(s, fd);
	} else {
		/* a connection that only listens runs no query that would
		   reconnect it: a broken one is reset here (due__pg_ok
		   listens again on the new session) */
		if (!s->listening || PQstatus(s->conn) != CONNECTION_OK) {
			if ((rc = due__pg_ok(s)) < 0)
				return rc;
		}
		if (!s->listening) {
			if ((rc = due__pg_command(s, listen_sql(s), "listen")) <
			    0)
				return no_listen(s, rc);
			s->listening = true;
		}
		*fd = PQsocket(s->conn);
	}
	return *fd >= 0
		   ? 0
		   : due__error_set(DUE_ESTORE, "postgres store: no socket");
}

/*
** Listen for finished tasks (due_wait): the same connection or listen=
** connection as due__pg_listen, on DUE_PG_DONE_CHANNEL.  Behind a pooler
** without listen= there is no such wake-up (the polled fingerprint sees
** submits, not completions): DUE_EUNSUPPORTED, and the waiter polls the
** task.  A handle that already listens for new tasks cannot switch.
** Each call first keeps the gate row alive (due_lock DUE_PG_WAIT_GATE,
** 30 s from now), without which completions do not notify (pg.c).
*/
int due__pg_listen_done(due_store *s, int *fd)
{
	static const char gate_sql[] =
	    "INSERT INTO due_lock AS l (name, owner, until) VALUES "
	    "('" DUE_PG_WAIT_GATE
	    "', 'waiters', now() + interval '30 seconds') ON CONFLICT (name) DO"
	    " UPDATE SET until = greatest(l.until, excluded.until)";
	int rc;

	if (!fd)
		return 0;
	*fd = -1;
	if (!s->listen_uri && s->pooler != DUE_PG_DIRECT)
		return due__error_set(DUE_EUNSUPPORTED,
				      "postgres store: behind a pooler without "
				      "listen=, finished tasks are polled for");
	if (!s->listen_done && (s->listening || s->lconn))
		return due__error_set(DUE_ESTATE,
				      "postgres store: this handle listens for "
				      "new tasks; open another to wait");
	/* the gate (pg.c: WAITED): someone waits for 30 s from now; the
	   core calls again within 10 s while it waits */
	if ((rc = due__pg_ok(s)) < 0 ||
	    (rc = due__pg_command(s, gate_sql,
				  "say that a task is waited for")) < 0)
		return rc;
	s->listen_done = true;
	return due__pg_listen(s, fd);
}

/* Count the notifications that arrived on c (a broken c counts none). */
static int notes(PGconn *c)
{
	PGnotify *n;
	int count = 0;

	if (!c || PQconsumeInput(c) == 0)
		return 0; /* a broken connection shows at the next call */
	while ((n = PQnotifies(c)) != NULL) {
		count++;
		PQfreemem(n);
	}
	return count;
}

/*
** A tick of the timer reads the fingerprint; failures are left to the
** next statement that needs the store (the safety poll's refill).
*/
static int drain_polled(due_store *s)
{
	unsigned long gen = atomic_load(&notified);
	uint64_t ticks;
	char now[sizeof(s->seen)];
	int count = 0;

	if (gen != s->gen_seen) {
		s->gen_seen = gen;
		count = 1;
	}
	if (read(s->timer_fd, &ticks, sizeof(ticks)) != (ssize_t)sizeof(ticks))
		return count; /* not a second yet */
	if (s->conn && PQtransactionStatus(s->conn) != PQTRANS_IDLE)
		return count;
	if (fingerprint(s, now, sizeof(now)) < 0) {
		due__error_clear();
		return count;
	}
	if (strcmp(now, s->seen) != 0) {
		memcpy(s->seen, now, sizeof(now));
		s->wake_ticks = 2;
	}
	if (s->wake_ticks > 0) {
		s->wake_ticks--;
		count = 1;
	}
	return count;
}

int due__pg_listen_drain(due_store *s, int *count)
{
	*count = 0;
	if (s->listen_uri) {
		*count = notes(s->lconn) + s->wake_ticks;
		s->wake_ticks = 0;
	} else if (s->timer_fd >= 0) {
		*count = drain_polled(s);
	} else if (s->listening) {
		*count = notes(s->conn);
	}
	return 0;
}

/*
** NOTIFY goes out on the listening connection when there is one (a
** handle that only listens keeps to it), else on the store's own (through
** a pooler that is one statement, which transaction mode passes whole).
*/
int due__pg_notify(due_store *s)
{
	PGresult *r = NULL;
	bool ok;
	int rc;

	atomic_fetch_add(&notified, 1);
	if (s->lconn && PQstatus(s->lconn) == CONNECTION_OK) {
		/* no answer there: none on the other connection either */
		if ((rc = trip(s, &s->lconn,
			       PQsendQuery(s->lconn, "NOTIFY " DUE_PG_CHANNEL),
			       "notify", &r)) < 0)
			return rc;
		ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		PQclear(r);
		if (ok)
			return 0;
	}
	if ((rc = due__pg_ok(s)) < 0)
		return rc;
	return due__pg_command(s, "NOTIFY " DUE_PG_CHANNEL, "notify");
}

/* ------------------------------------------------------------------ */
/* Binary arrays                                                       */
/* ------------------------------------------------------------------ */

static void put(due_pg_buf *b, const void *d, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		unsigned char *np = realloc(b->p, cap);
		if (!np) {
			b->oom = true;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void put32(due_pg_buf *b, uint32_t v)
{
	unsigned char x[4] = {(unsigned char)(v >> 24),
			      (unsigned char)(v >> 16), (unsigned char)(v >> 8),
			      (unsigned char)v};
	put(b, x, 4);
}

static void put64(due_pg_buf *b, uint64_t v)
{
	put32(b, (uint32_t)(v >> 32));
	put32(b, (uint32_t)v);
}

void due__pg_arr_head(due_pg_buf *b, uint32_t oid, size_t n)
{
	put32(b, 1); /* dimensions */
	put32(b, 1); /* may hold NULLs (checked per element) */
	put32(b, oid);
	put32(b, (uint32_t)n); /* length */
	put32(b, 1);	       /* lower bound */
}

void due__pg_arr_i64(due_pg_buf *b, int64_t v)
{
	put32(b, 8);
	put64(b, (uint64_t)v);
}

void due__pg_arr_f64(due_pg_buf *b, double v)
{
	uint64_t bits;
	memcpy(&bits, &v, sizeof(bits));
	put32(b, 8);
	put64(b, bits);
}

void due__pg_arr_i32(due_pg_buf *b, int32_t v)
{
	put32(b, 4);
	put32(b, (uint32_t)v);
}

void due__pg_arr_bytes(due_pg_buf *b, const void *d, size_t n)
{
	if (n == SIZE_MAX) {
		put32(b, UINT32_MAX);
		return;
	}
	put32(b, (uint32_t)n);
	put(b, d, n);
}

void due__pg_arr_text(due_pg_buf *b, const char *t)
{
	due__pg_arr_bytes(b, t, t ? strlen(t) : SIZE_MAX);
}

int due__pg_array(due_pg_params *p, const due_pg_buf *b)
{
	if (b->oom)
		return due__error_set(DUE_ENOMEM, "out of memory");
	if (b->len > (size_t)INT_MAX)
		return due__error_set(
		    DUE_ETOOBIG,
		    "postgres store: batch of %zu bytes is too large for "
		    "one statement; split it",
		    b->len);
	due__pg_bin(p, b->p, b->len);
	return 0;
}

int due__pg_texts(due_pg_params *p, due_pg_buf *b, const char *const *t,
		  size_t n)
{
	due__pg_arr_head(b, DUE_PG_OID_TEXT, n);
	for (size_t i = 0; i < n; i++)
		due__pg_arr_text(b, t[i]);
	return due__pg_array(p, b);
}

void due__pg_bufs_free(due_pg_buf *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(b[i].p);
}

/* ------------------------------------------------------------------ */
/* Reading binary results                                              */
/* ------------------------------------------------------------------ */

int64_t due__pg_col_int(const PGresult *r, int row, int col)
{
	const unsigned char *p;
	uint64_t v = 0;
	int n;

	if (PQgetisnull(r, row, col))
		return 0;
	p = (const unsigned char *)PQgetvalue(r, row, col);
	n = PQgetlength(r, row, col);
	for (int i = 0; i < n && i < 8; i++)
		v = v << 8 | p[i];
	if (n > 0 && n < 8 && (p[0] & 0x80))
		v |= ~(uint64_t)0 << (8 * n);
	return (int64_t)v;
}

due_time due__pg_col_time(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col)
		   ? 0
		   : due__pg_col_int(r, row, col) + DUE_PG_EPOCH_US;
}

bool due__pg_col_null(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) != 0;
}

double due__pg_col_f64(const PGresult *r, int row, int col)
{
	uint64_t bits = (uint64_t)due__pg_col_int(r, row, col);
	double v;
	memcpy(&v, &bits, sizeof(v));
	return v;
}

char *due__pg_col_text(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return NULL;
	return due__strdup_n(PQgetvalue(r, row, col),
			     (size_t)PQgetlength(r, row, col));
}

int due__pg_col_state(const PGresult *r, int row, int col, due_state *out)
{
	if (PQgetisnull(r, row, col))
		return due__state_from_store(NULL, 0, out);
	return due__state_from_store(PQgetvalue(r, row, col),
				     (size_t)PQgetlength(r, row, col), out);
}

/* The row.h cursor: the result is already all here, so next never fails. */
static int cur_next(void *c)
{
	due_pg_cur *k = c;
	return ++k->row < PQntuples(k->r) ? 1 : 0;
}

static bool cur_is_null(void *c, int col)
{
	due_pg_cur *k = c;
	return PQgetisnull(k->r, k->row, col) != 0;
}

static int64_t cur_i64(void *c, int col)
{
	due_pg_cur *k = c;
	return due__pg_col_int(k->r, k->row, col);
}

static due_time cur_time(void *c, int col)
{
	due_pg_cur *k = c;
	return due__pg_col_time(k->r, k->row, col);
}

static const void *cur_bytes(void *c, int col, size_t *len)
{
	due_pg_cur *k = c;

	*len = 0;
	if (PQgetisnull(k->r, k->row, col))
		return NULL;
	*len = (size_t)PQgetlength(k->r, k->row, col);
	return PQgetvalue(k->r, k->row, col);
}

static const due_row_ops pg_rows = {cur_next, cur_is_null, cur_i64, cur_time,
				    cur_bytes};

void due__pg_rows(due_rows *out, due_pg_cur *c, const PGresult *r)
{
	c->r = r;
	c->row = -1;
	out->ops = &pg_rows;
	out->cur = c;
}
