/*
** wait.c - due_wait(): block until a task is finished.
**
** What it promises (due.h): it returns the task once it is DONE, DEAD or
** CANCELLED, DUE_ETIMEDOUT with the task as last read when the time
** given passes first, DUE_ENOTFOUND when there is no such task.  The
** store decides: a wait only ever reads the task (due_get), so nothing
** it does can change a task or race a worker.
**
** How it wakes.  It listens for finished tasks first (due_listen_finished:
** PostgreSQL LISTEN, the SQLite "-done" file, a Redis channel) and reads
** the task after, so a task that finishes between the two is seen either
** by the read or by the wake-up.  Each wake-up re-reads the task.  A
** notification can be lost (a connection that broke, a listener that
** started late), so the task is read again at least every RECHECK_US
** whatever comes; and the listen is made again every RELISTEN_US, which
** keeps the "someone waits" mark of PostgreSQL and Redis alive (they
** notify only while it lives, 30 s a call).  A store that cannot notify
** (MySQL, PostgreSQL behind a pooler without listen=) is read with a
** backoff from POLL_MIN_US to POLL_MAX_US: a primary-key read a second
** at most, once the task has waited a while.
**
** Outages.  A read that fails with DUE_ESTORE (no answer, a broken
** connection; the backend connects again on its next call) is retried
** with the same backoff, for up to DUE_WAIT_OUTAGE_US of failures in a
** row, or the caller's timeout when sooner; then the last error is
** returned as it was.  Every other error is returned at once.  Meanwhile
** the read is the only call of a turn (no listen until one answers), so
** a wait with a deadline ends at most one call's bound past it.
**
** Signals: the waits are poll() and nanosleep(); an interrupted one is
** taken as a wake-up (the task is read again), so a caller's signal
** handler that sets a flag and a longjmp-free exit both work, and the
** default SIGINT ends the process with nothing to undo.
*/
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <time.h>

#include "base/base.h"

#define RECHECK_US 5000000LL   /* read again even without a wake-up */
#define RELISTEN_US 10000000LL /* say again that we listen */
#define POLL_MIN_US 50000LL
#define POLL_MAX_US 1000000LL

typedef struct waiter {
	due_db *db;
	int fd;		    /* listening, or -1: poll */
	bool can_listen;    /* the store has notifications for finishes */
	int64_t listened;   /* when due_listen_finished last ran (mono) */
	int64_t backoff;    /* the next poll's sleep */
	int64_t fail_since; /* first of the failures in a row, 0: none */
} waiter;

static bool finished(due_state s)
{
	return s == DUE_DONE || s == DUE_DEAD || s == DUE_CANCELLED;
}

static void nap(int64_t us)
{
	struct timespec ts = {(time_t)(us / 1000000),
			      (long)(us % 1000000) * 1000};
	nanosleep(&ts, NULL); /* EINTR: read again, as a wake-up */
}

/* (Re)listen; a store that cannot notify is polled from then on. */
static void listen_again(waiter *w, int64_t now)
{
	int rc;

	if (!w->can_listen)
		return;
	w->listened = now;
	rc = due_listen_finished(w->db, &w->fd);
	if (rc == DUE_EUNSUPPORTED || rc == DUE_ESTATE) {
		w->can_listen = false;
		w->fd = -1;
	} else if (rc < 0) {
		w->fd = -1; /* a store error: poll until the next listen */
	}
	due__error_clear();
}

/*
** Sleep until a wake-up or `us` passed.  Without a listening fd (or after
** a wake-up that brought nothing: a broken session, whose fd stays
** readable) this is a backoff step, so it never spins.
*/
static void pause_for(waiter *w, int64_t us)
{
	struct pollfd pf = {w->fd, POLLIN, 0};
	int n = 0, got;

	if (w->fd < 0) {
		nap(us < w->backoff ? us : w->backoff);
		if (w->backoff < POLL_MAX_US)
			w->backoff *= 2;
		if (w->backoff > POLL_MAX_US)
			w->backoff = POLL_MAX_US;
		return;
	}
	if (us > RECHECK_US)
		us = RECHECK_US;
	/* a note the last read took in with its reply (libpq keeps those)
	   makes no fd readable: consume what is there first */
	if (due_listen_drain(w->db, &n) == 0 && n > 0)
		return;
	due__error_clear();
	got = poll(&pf, 1, (int)((us + 999) / 1000));
	if (got <= 0)
		return; /* time to read again, or EINTR */
	if (due_listen_drain(w->db, &n) < 0 || n == 0) {
		due__error_clear();
		w->fd = -1; /* listen again at the next turn */
		w->listened = 0;
		nap(POLL_MIN_US);
	}
}

/* A read that failed: 1 to retry it, 0 to give up (the error stays). */
static int outage(waiter *w, int rc, int64_t now, int64_t end)
{
	if (rc != DUE_ESTORE)
		return 0;
	if (!w->fail_since)
		w->fail_since = now;
	if (now - w->fail_since >= DUE_WAIT_OUTAGE_US || now >= end)
		return 0;
	w->fd = -1;
	w->listened = 0;
	return 1;
}

/* DUE_ETIMEDOUT with the task as last read (*out takes it). */
static int timed_out(due_task **out, due_task *t, int64_t timeout_us,
		     const char *store_error)
{
	char buf[48], why[300] = "";

	due_duration_format(buf, sizeof(buf), timeout_us > 0 ? timeout_us : 0);
	if (store_error)
		snprintf(why, sizeof(why),
			 " (as last read: the store did not answer: %s)",
			 store_error);
	*out = t;
	return due__error_set(DUE_ETIMEDOUT, "task %lld is still %s after %s%s",
			      (long long)t->id, due_state_name(t->state), buf,
			      why);
}

int due_wait(due_db *db, due_task **out, due_id id, int64_t timeout_us)
{
	waiter w = {db, -1, true, 0, POLL_MIN_US, 0};
	int64_t now = due__mono_us();
	int64_t end = timeout_us < 0 || timeout_us > INT64_MAX - now
			  ? INT64_MAX
			  : now + timeout_us;
	due_task *t = NULL, *last = NULL; /* last: the last read, unfinished */
	int rc;

	*out = NULL;
	if (id <= 0)
		return due__error_set(
		    DUE_EINVAL,
		    "invalid task id %lld: ids are positive integers",
		    (long long)id);
	for (;;) {
		now = due__mono_us();
		/* the deadline passed while the store did not answer: no
		   call more, each may be held for the whole call bound */
		if (w.fail_since && now >= end && last)
			return timed_out(out, last, timeout_us,
					 due_error_last());
		/* listen only while the store answers: in an outage one
		   call a turn (the read), so the last call begun before the
		   deadline is the only one that can outlast it */
		if (!w.fail_since &&
		    (w.fd < 0 || now - w.listened >= RELISTEN_US))
			listen_again(&w, now);
		if ((rc = due_get(db, &t, id)) < 0) {
			now = due__mono_us();
			if (outage(&w, rc, now, end)) {
				pause_for(&w, end - now);
				continue;
			}
			/* the time passed while the store did not answer:
			   a timeout, with the task as it was last read */
			if (rc == DUE_ESTORE && now >= end && last)
				return timed_out(out, last, timeout_us,
						 due_error_last());
			due_task_free(last);
			return rc;
		}
		w.fail_since = 0;
		if (finished(t->state)) {
			due_task_free(last);
			*out = t;
			return 0;
		}
		due_task_free(last);
		last = t;
		t = NULL;
		now = due__mono_us();
		if (now >= end)
			return timed_out(out, last, timeout_us, NULL);
		pause_for(&w, end - now);
	}
}
