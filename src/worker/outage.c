/*
** outage.c - how the worker's threads meet a store that does not answer.
**
** A failed store call is never retried at once: each thread waits a delay
** (its own rule: the claimer and the completer 10 ms doubling to 2 s,
** the claimer's reclaims 1 s, the keeper within what is left of the
** lease, the scheduler 1 s),
** so an outage costs a few calls per second at most, whatever the number
** of running tries.  Each thread keeps a due_outage (the claimer two: its
** claims and its reclaims, which can fail apart): the first failed
** call opens it and is logged once, with what failed and the store's
** text; the first call the store answers again closes it, logged once
** with its length and the number of failed calls; the failures between
** are logged at verbose level only.  Every failed call, and nothing else,
** counts in the worker's store_errors.
**
** Any thread; a due_outage belongs to one thread and takes no lock.
*/
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "worker/worker_internal.h"

/*
** Back-off sleep for the threads other than the claimer.  It must not
** touch the eventfd, whose wake-ups belong to the claimer; it ends early
** when shutdown gives up on the store.
*/
void due__bg_sleep(due_worker *w, int64_t us)
{
	int64_t end = due__mono_us() + us;

	while (!atomic_load(&w->abandon)) {
		int64_t left = end - due__mono_us();
		if (left <= 0)
			return;
		struct timespec ts = {0, (left > 50000 ? 50000 : left) * 1000};
		nanosleep(&ts, NULL);
	}
}

/*
** Record a failed store call of the thread that owns `o`: count it, and
** log it when it opens an outage (at verbose level while one lasts).  The
** message says what failed; the store's own text follows.
*/
void due__outage_fail(due_worker *w, due_outage *o, const char *fmt, ...)
{
	char what[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&w->st.store_errors, 1);
	o->failures++;
	if (o->since) {
		due__wlog(w, 2, "%s: store still unavailable: %s failed: %s",
			  o->who, what, due_error_last());
		return;
	}
	o->since = due__mono_us();
	due__wlog(w, 1,
		  "%s: store unavailable: %s failed: %s; retrying with "
		  "backoff, quietly until it answers",
		  o->who, what, due_error_last());
}

/* The store answered a call of this thread: close its outage, if any. */
void due__outage_over(due_worker *w, due_outage *o)
{
	if (!o->since)
		return;
	due__wlog(w, 1,
		  "%s: store answers again after %.1f s (%lld failed "
		  "call%s)",
		  o->who, (double)(due__mono_us() - o->since) / 1e6,
		  o->failures, o->failures == 1 ? "" : "s");
	o->since = 0;
	o->failures = 0;
}

/*
** Open a store connection for a worker thread, retrying with backoff.
** NULL when the claimer is asked to stop, or once shutdown has given up
** on the store (other threads).  Every wait of the connection is bounded
** by w->conn_timeout_us.
*/
due_db *due__connect_retry(due_worker *w, const char *who)
{
	bool claimer = strcmp(who, "claimer") == 0;
	due_outage o = {.who = who};
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	int64_t delay = 10000;

	oo.timeout_us = w->conn_timeout_us;
	for (;;) {
		due_db *db = NULL;
		if (due_open(&db, w->url, &oo) == 0) {
			due__outage_over(w, &o);
			return db;
		}
		due__outage_fail(w, &o, "opening the store");
		due_close(db);
		if ((claimer && atomic_load(&w->stop)) ||
		    atomic_load(&w->abandon))
			return NULL;
		if (claimer)
			due__wait_wake(w, delay);
		else
			due__bg_sleep(w, delay);
		delay = delay * 2 > 2000000 ? 2000000 : delay * 2;
	}
}

/*
** Turns at the shared connection, first come first served: a ticket is
** drawn, and the call waits until it is served.  A plain mutex would let
** the thread that just unlocked take it again at once (glibc hands no
** turn over), so a claimer draining a backlog could keep the lease keeper
** waiting past a lease.
*/
bool due__db_lock(due_worker *w, const char *what)
{
	pthread_mutex_lock(&w->db_mu);
	unsigned long ticket = w->db_next++;
	while (ticket != w->db_serving)
		pthread_cond_wait(&w->db_cv, &w->db_mu);
	pthread_mutex_unlock(&w->db_mu);
	if (atomic_load(&w->abandon))
		return false;
	due__call_begin(&w->db_call, what);
	return true;
}

/* The turn of a call not made (due__db_lock said false). */
int due__db_skip(due_worker *w)
{
	pthread_mutex_lock(&w->db_mu);
	w->db_serving++;
	pthread_cond_broadcast(&w->db_cv);
	pthread_mutex_unlock(&w->db_mu);
	return due__error_set(
	    DUE_ESTORE, "the worker is stopping and gave up on the store");
}

int due__db_unlock_rc(due_worker *w, int rc)
{
	due__call_end(w, &w->db_call, "shared connection", rc);
	pthread_mutex_lock(&w->db_mu);
	w->db_serving++;
	pthread_cond_broadcast(&w->db_cv);
	pthread_mutex_unlock(&w->db_mu);
	return rc;
}

/*
** The call watch.  `what` is the call as written at DUE_DB_CALL ("due_extend(
** w->db, ...)"): its name, up to the '(', is what the log says.
*/
/* The API function's name in a call as written: "(due_fail(x, y))" ->
   "due_fail", as *len bytes from the returned pointer. */
static const char *call_name(const char *what, int *len)
{
	what += strspn(what, "( ");
	*len = (int)strcspn(what, "( ");
	return what;
}

void due__call_begin(due_call_watch *cw, const char *what)
{
	pthread_mutex_lock(&cw->mu);
	cw->what = what;
	cw->since = due__mono_us();
	cw->logged = false;
	pthread_mutex_unlock(&cw->mu);
}

void due__call_end(due_worker *w, due_call_watch *cw, const char *conn, int rc)
{
	pthread_mutex_lock(&cw->mu);
	bool logged = cw->logged;
	int64_t since = cw->since;
	const char *what = cw->what;
	cw->since = 0;
	cw->logged = false;
	if (rc >= 0)
		cw->quiet = false;
	pthread_mutex_unlock(&cw->mu);
	if (!logged)
		return;
	int n;
	what = call_name(what, &n);
	due__wlog(w, 1, "store call %.*s (%s) %s after %.1f s%s%s", n, what,
		  conn, rc < 0 ? "failed" : "answered",
		  (double)(due__mono_us() - since) / 1e6, rc < 0 ? ": " : "",
		  rc < 0 ? due_error_last() : "");
}

void due__call_check(due_worker *w, due_call_watch *cw, const char *conn,
		     int64_t now)
{
	pthread_mutex_lock(&cw->mu);
	bool log = cw->since && !cw->logged && !cw->quiet &&
		   now - cw->since >= STALL_LOG_US;
	int64_t since = cw->since;
	const char *what = cw->what;
	if (log)
		cw->logged = cw->quiet = true;
	pthread_mutex_unlock(&cw->mu);
	if (!log)
		return;
	atomic_fetch_add(&w->st.stalled_calls, 1);
	int n;
	what = call_name(what, &n);
	due__wlog(w, 1,
		  "store call %.*s (%s, %s store) has had no answer for %.1f s "
		  "(it gives up after %.1f s)",
		  n, what, conn, due_db_backend(w->db),
		  (double)(now - since) / 1e6,
		  (double)(cw == &w->renew_call ? w->renew_timeout_us
						: w->conn_timeout_us) /
		      1e6);
}
