/*
** renewer.c - the renewer thread: renews running tries' leases over a
** connection of its own, and publishes the worker's counters.
**
** Renewer thread.
**   Does:      renews every running try's lease once lease/3 has passed
**              since its last confirmed renewal.  When the store says the
**              lease is gone (taken back, or a cancel was requested) it
**              raises the job's `lost` flag: the handler is told to stop.
**              A renewal the store does not answer is tried again after a
**              backoff within what is left of the lease (renew_failed()).
**              Whether a handler may still run while renewals fail is not
**              its call: the keeper's lease clock decides that from
**              confirmed_mono, which only a confirmed renewal moves
**              (worker_internal.h, Invariants), so a renewal that hangs
**              here holds no handler's stop back.  A timed-out try's lease
**              is still renewed until it is committed, so that no other
**              worker runs the task while its handler (a command's process
**              group) is being stopped, but for at most max(grace, lease)
**              past the limit: a handler that ignores the stop then loses
**              the task to the store's reclaim.  Between renewals it
**              publishes the worker's counters to the store
**              (due_worker_report).
**   Owns:      its connection (worker_internal.h: Connections), opened on
**              first need with the bound renew_timeout_us (lease/3): a
**              call that gets no answer fails within it, and the store
**              makes the connection again on the next call.  Nothing
**              else uses it, so a claim or a commit waiting on the store
**              never delays a renewal.
**   Locks:     mu, to pick the jobs due for renewal (taking a reference to
**              each, so the completer cannot free one under it) and to
**              record what each renewal said; never across a store call.
**   Blocks on: renew_cv until the next renewal, at most lease/12 (5 ms ..
**              1 s); on the store during a renewal or a report, at most
**              its bound.
**   Exits:     when threads_stop is set and nothing is in flight (or the
**              store was abandoned), after a last report (not when the
**              store was abandoned).
*/
#include <pthread.h>
#include <stdatomic.h>

#include "worker/worker_internal.h"

typedef struct renewer {
	due_worker *w;
	due_db *db; /* its own connection, NULL until first needed */
	due_outage outage;
	int64_t last_report, last_sum;
} renewer;

typedef struct renewal {
	due_job *job;
	due_id id;
	int32_t attempt;
} renewal;

/* The jobs of one claim are renewed together, not in one wake-up each. */
#define RENEW_GROUP_US 2000LL

/* How long past its time limit a try's lease is still renewed. */
static int64_t timed_out_keep(const due_worker *w)
{
	return w->o.grace_us > w->o.lease_us ? w->o.grace_us : w->o.lease_us;
}

/*
** Take references to the jobs whose renewal is due (at most cap), with
** those due within RENEW_GROUP_US.  mu held.  Lowers *next to the earliest
** renewal left for later.
*/
static size_t renewals_due_locked(due_worker *w, renewal *r, size_t cap,
				  int64_t now, int64_t *next)
{
	size_t n = 0;
	for (due_job *j = w->inflight; j; j = j->inext) {
		/*
		** A timed-out try keeps its lease until it is committed, while
		** its handler is being stopped, but not for ever: past
		** max(grace, lease) after the limit the lease is left to
		** expire and the store takes the task back.
		*/
		if (atomic_load(&j->end) == DUE_END_TIMED_OUT &&
		    !j->renew_over &&
		    now > j->deadline_mono + timed_out_keep(w))
			j->renew_over = true;
		if (j->renew_over ||
		    (atomic_load(&j->lost) &&
		     atomic_load(&j->end) != DUE_END_TIMED_OUT))
			continue;
		if (j->renew_at > now + RENEW_GROUP_US || n == cap) {
			if (j->renew_at < *next)
				*next = j->renew_at;
			continue;
		}
		j->refs++;
		r[n++] = (renewal){j, j->task.id, j->task.attempt};
	}
	return n;
}

#define RENEW_BACKOFF_MIN_US 50000LL
#define RENEW_BACKOFF_MAX_US 2000000LL
#define RENEW_RETRY_MIN_US 5000LL

/*
** A renewal the store did not answer.  Try again after a backoff growing
** from 50 ms, but at most half of what is left of the lease, so that a
** short outage costs no lease and a long one is not retried in a loop.
** Once the lease has run out since the last confirmed renewal, stop
** renewing: the keeper has stopped the handler, and the store may have
** handed the task on.  mu held.
*/
static void renew_failed_locked(due_worker *w, due_job *j, int64_t now)
{
	int64_t left = atomic_load(&j->confirmed_mono) + w->o.lease_us - now;
	int64_t retry;

	if (left <= 0) {
		j->renew_over = true;
		return;
	}
	j->renew_backoff = !j->renew_backoff ? RENEW_BACKOFF_MIN_US
			   : j->renew_backoff * 2 > RENEW_BACKOFF_MAX_US
			       ? RENEW_BACKOFF_MAX_US
			       : j->renew_backoff * 2;
	retry = j->renew_backoff < left / 2 ? j->renew_backoff : left / 2;
	j->renew_at =
	    now + (retry < RENEW_RETRY_MIN_US ? RENEW_RETRY_MIN_US : retry);
}

/* One store call on the renewer's connection, watched by the keeper;
   none once shutdown gave up on the store. */
#define RENEWER_CALL(r, call)                                                  \
	(atomic_load(&(r)->w->abandon)                                         \
	     ? due__error_set(DUE_ESTORE, "the worker is stopping and gave "   \
					  "up on the store")                   \
	     : (due__call_begin(&(r)->w->renew_call, #call),                   \
		renewer_call_end((r), (call))))

static int renewer_call_end(renewer *r, int rc)
{
	due__call_end(r->w, &r->w->renew_call, "renewal connection", rc);
	return rc;
}

/*
** Its connection, opened on first need, one try at a time: a store that
** cannot be reached fails this renewal (retried with its backoff) rather
** than holding the thread in a loop of its own.
*/
static bool connected(renewer *r)
{
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;

	if (r->db)
		return true;
	oo.timeout_us = r->w->renew_timeout_us;
	if (RENEWER_CALL(r, due_open(&db, r->w->url, &oo)) < 0) {
		due_close(db);
		return false;
	}
	r->db = db;
	return true;
}

/*
** Renew one lease.  A lease that the store says is gone (or whose task
** has a cancel request) stops the handler, except when the handler has
** already returned: then the answer may only mean that its completion
** was committed meanwhile (the renewer took its reference before), and if
** the lease really was lost, the fenced commit says so (REJECTED_STALE).
** So a finished job is only no longer renewed, not counted as lost.
*/
static void renew_one(renewer *r, renewal *rn)
{
	due_worker *w = r->w;
	due_job *j = rn->job;
	due_extend_outcome eo;
	int64_t sent = due__mono_us(); /* before the call: never late */

	if (!connected(r) ||
	    RENEWER_CALL(r, due_extend(r->db, &eo, rn->id, rn->attempt,
				       w->o.lease_us)) < 0) {
		due__outage_fail(w, &r->outage,
				 "renewing the lease of task %lld",
				 (long long)rn->id);
		pthread_mutex_lock(&w->mu);
		renew_failed_locked(w, j, due__mono_us());
		pthread_mutex_unlock(&w->mu);
		return;
	}
	due__outage_over(w, &r->outage);
	if (eo == DUE_EXTEND_OK) {
		atomic_store(&j->confirmed_mono, sent);
		pthread_mutex_lock(&w->mu);
		j->renew_at = sent + w->o.lease_us / 3;
		j->renew_backoff = 0;
		pthread_mutex_unlock(&w->mu);
		return;
	}
	if (atomic_load(&j->end) == DUE_END_TIMED_OUT) {
		/* already told to stop: no more renewals; its fenced commit
		   says what became of it (stale, or cancelled) */
		pthread_mutex_lock(&w->mu);
		j->renew_over = true;
		pthread_mutex_unlock(&w->mu);
		return;
	}
	if (!due__job_stop(j, eo == DUE_EXTEND_LOST ? DUE_STOP_LEASE_LOST
						    : DUE_STOP_CANCEL))
		return;
	if (atomic_load(&j->finished)) {
		due__wlog(w, 2,
			  "task %lld attempt %d: not renewed (%s) after its "
			  "handler returned: its commit decides",
			  (long long)rn->id, rn->attempt,
			  eo == DUE_EXTEND_LOST ? "not held"
						: "cancel requested");
		return;
	}
	atomic_fetch_add(&w->st.lease_lost, 1);
	due__wlog(w, 1, "task %lld attempt %d: %s; stopping its handler",
		  (long long)rn->id, rn->attempt,
		  eo == DUE_EXTEND_LOST
		      ? "lease lost (expired, or taken back by the store)"
		      : "cancel requested");
}

/*
** Publish this worker's counters to the store when they changed, at most
** every REPORT_US, and at least every HEARTBEAT_US while nothing changes
** (metrics count a worker seen in the last 5 minutes as alive: two
** heartbeats may fail before it is counted gone), and once when stopping,
** for due_metrics_get().  A failed report waits for the next period.
*/
#define REPORT_US 10000000LL
#define HEARTBEAT_US 120000000LL

static void maybe_report(renewer *r, bool force)
{
	due_worker *w = r->w;
	due_worker_stats st;
	int64_t now = due__mono_us(), sum;

	if (!force && (now - r->last_report < REPORT_US ||
		       atomic_load(&w->stop))) /* stopping: the last one only */
		return;
	due_worker_stats_get(w, &st);
	sum = st.claimed + st.done + st.failed + st.stale + st.lease_lost +
	      st.claim_queries + st.reclaim_queries + st.store_errors +
	      st.pruned;
	if (sum == r->last_sum && !force && now - r->last_report < HEARTBEAT_US)
		return;
	r->last_report = now;
	if (!connected(r) ||
	    RENEWER_CALL(r, due_worker_report(r->db, w->owner, &st)) < 0) {
		due__outage_fail(w, &r->outage,
				 "reporting the worker's counters");
		return;
	}
	due__outage_over(w, &r->outage);
	r->last_sum = sum;
}

/* How long the renewer sleeps at most: lease/12, 5 ms .. 1 s. */
static int64_t renewer_tick(const due_worker *w)
{
	int64_t tick = w->o.lease_us / 12;
	return tick < 5000 ? 5000 : tick > 1000000 ? 1000000 : tick;
}

void *due__renewer_main(void *arg)
{
	renewer r = {.w = arg, .outage = {.who = "renewer"}, .last_sum = -1};
	due_worker *w = r.w;
	int64_t tick = renewer_tick(w);
	renewal rn[256];

	pthread_mutex_lock(&w->mu);
	while (!(w->threads_stop &&
		 (w->n_inflight == 0 || atomic_load(&w->abandon)))) {
		int64_t now = due__mono_us(), next = now + tick;
		size_t n = renewals_due_locked(w, rn, 256, now, &next);
		if (n == 0) {
			due__cond_wait_us(&w->renew_cv, &w->mu, next - now);
			pthread_mutex_unlock(&w->mu);
			maybe_report(&r, false);
			pthread_mutex_lock(&w->mu);
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		for (size_t i = 0; i < n; i++)
			renew_one(&r, &rn[i]);
		pthread_mutex_lock(&w->mu);
		for (size_t i = 0; i < n; i++)
			if (--rn[i].job->refs == 0)
				due__job_free(rn[i].job);
	}
	pthread_mutex_unlock(&w->mu);
	if (!atomic_load(&w->abandon))
		maybe_report(&r, true);
	due_close(r.db);
	return NULL;
}
