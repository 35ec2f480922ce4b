/*
** keeper.c - the lease keeper thread: renews running tries' leases,
** stops tries at their time limits, and publishes the worker's counters.
**
** Keeper thread.
**   Does:      renews every running try's lease once lease/3 has passed
**              since its last successful renewal.  When the store says the
**              lease is gone (taken back, or a cancel was requested) it
**              raises the job's `lost` flag: the handler is told to stop.
**              A renewal the store does not answer is tried again after a
**              backoff within what is left of the lease (renew_failed());
**              when renewals keep failing for a whole lease, the lease is
**              presumed lost and the handler told the same.  Watches the
**              time limits: a try still running its task.timeout_us after
**              its claim is told to stop (DUE_STOP_TIMEOUT, logged once),
**              and its lease is still renewed until it is committed, so
**              that no other worker runs the task while its handler (a
**              command's process group) is being stopped, but for at most
**              max(grace, lease) past the limit: a handler that ignores
**              the stop then loses the task to the store's reclaim.  Ends the
**              grace after a stop (due__grace_check_locked()).  Between
**              renewals it publishes the worker's counters to the store
**              (due_worker_report) and logs a summary once a minute.
**   Owns:      nothing of the store: each renewal or report is one turn at
**              the shared connection (DUE_DB_CALL).
**   Locks:     mu, to pick the jobs due for renewal (taking a reference to
**              each, so the completer cannot free one under it) and to drop
**              those references; never across a store call.
**   Blocks on: keep_cv until the next renewal or time limit, at most
**              lease/12 (5 ms .. 1 s; 100 ms inline); a try with a time
**              limit put in flight signals it.  On the store during a
**              renewal or a report.
**   Exits:     when threads_stop is set and nothing is in flight (or the
**              store was abandoned), after a last report.
*/
#include <pthread.h>
#include <stdatomic.h>

#include "worker/worker_internal.h"

/* The keeper's own state. */
typedef struct keeper {
	due_worker *w;
	due_outage outage;
	int64_t last_report, last_sum, last_summary;
	due_worker_stats prev; /* counters at the last summary */
} keeper;

typedef struct renewal {
	due_job *job;
	due_id id;
	int32_t attempt;
} renewal;

/*
** Take references to the jobs whose renewal is due (at most cap), with
** those due within RENEW_GROUP_US: the jobs of one claim are renewed
** together, not in one wake-up each.  mu held.  Lowers *next to the
** earliest renewal left for later.
*/
#define RENEW_GROUP_US 2000LL

/* How long past its time limit a try's lease is still renewed. */
static int64_t timed_out_keep(const due_worker *w)
{
	return w->o.grace_us > w->o.lease_us ? w->o.grace_us : w->o.lease_us;
}

static size_t renewals_due_locked(due_worker *w, renewal *r, size_t cap,
				  int64_t now, int64_t *next)
{
	size_t n = 0;
	for (due_job *j = w->inflight; j; j = j->inext) {
		/*
		** A timed-out try keeps its lease until it is committed, while
		** its handler is being stopped, but not for ever: a handler
		** that ignores the stop (in-process, not looking at
		** due_job_lease_held()) would hold its task as a hung
		** handler did before time limits existed.  Past
		** max(grace, lease) after the limit the lease is left to
		** expire and the store takes the task back.
		*/
		if (atomic_load(&j->end) == DUE_END_TIMED_OUT &&
		    !j->renew_over &&
		    now > j->deadline_mono + timed_out_keep(w))
			j->renew_over = true;
		if (atomic_load(&j->lost) &&
		    (atomic_load(&j->end) != DUE_END_TIMED_OUT ||
		     j->renew_over))
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
** Once a whole lease has passed since the last renewal that landed, the
** lease is presumed lost and the handler is told to stop.
*/
static void renew_failed(due_worker *w, due_job *j, int64_t now)
{
	int64_t left = j->renewed_mono + w->o.lease_us - now, retry;

	if (left <= 0) {
		j->renew_over = true;
		if (due__job_stop(j, DUE_STOP_LEASE_LOST) &&
		    !atomic_load(&j->finished)) {
			atomic_fetch_add(&w->st.lease_lost, 1);
			due__wlog(
			    w, 1,
			    "task %lld attempt %d: lease presumed lost "
			    "(no renewal for a whole lease); stopping its "
			    "handler",
			    (long long)j->task.id, j->task.attempt);
		}
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

/*
** Renew one lease.  A lease that the store says is gone (or whose task
** has a cancel request) stops the handler, except when the handler has
** already returned: then the answer may only mean that its completion
** was committed meanwhile (the keeper took its reference before), and if
** the lease really was lost, the fenced commit says so (REJECTED_STALE).
** So a finished job is only no longer renewed, not counted as lost.
*/
static void renew_one(keeper *k, renewal *r)
{
	due_worker *w = k->w;
	due_job *j = r->job;
	due_extend_outcome eo;
	int64_t t0 = due__mono_us();

	if (DUE_DB_CALL(w, due_extend(w->db, &eo, r->id, r->attempt,
				      w->o.lease_us)) < 0) {
		due__outage_fail(w, &k->outage,
				 "renewing the lease of task %lld",
				 (long long)r->id);
		renew_failed(w, j, due__mono_us());
		return;
	}
	due__outage_over(w, &k->outage);
	if (eo == DUE_EXTEND_OK) {
		j->renewed_mono = t0;
		j->renew_at = t0 + w->o.lease_us / 3;
		j->renew_backoff = 0;
		return;
	}
	if (atomic_load(&j->end) == DUE_END_TIMED_OUT) {
		/* already told to stop: no more renewals; its fenced commit
		   says what became of it (stale, or cancelled) */
		j->renew_over = true;
		return;
	}
	if (!due__job_stop(j, eo == DUE_EXTEND_LOST ? DUE_STOP_LEASE_LOST
						    : DUE_STOP_CANCEL))
		return;
	if (atomic_load(&j->finished)) {
		due__wlog(w, 2,
			  "task %lld attempt %d: not renewed (%s) after its "
			  "handler returned: its commit decides",
			  (long long)r->id, r->attempt,
			  eo == DUE_EXTEND_LOST ? "not held"
						: "cancel requested");
		return;
	}
	atomic_fetch_add(&w->st.lease_lost, 1);
	due__wlog(w, 1, "task %lld attempt %d: %s; stopping its handler",
		  (long long)r->id, r->attempt,
		  eo == DUE_EXTEND_LOST ? "lease lost (taken back by the store)"
					: "cancel requested");
}

/*
** Stop the tries that ran past their time limit: the first to move a
** try's `end` decides (the handler's thread moves it when the handler
** returns), so a try that returned in time is never called timed out.
** Stores the stopped tries (at most cap; past that, *next is now) in out,
** for the log, and lowers *next to the earliest time limit still ahead.
** mu held.
*/
static size_t timeouts_locked(due_worker *w, renewal *out, size_t cap,
			      int64_t now, int64_t *next)
{
	size_t n = 0;

	for (due_job *j = w->inflight; j; j = j->inext) {
		int running = DUE_END_RUNNING;
		/* a try already told to stop (lease lost, cancel, shutdown)
		   ends for that reason */
		if (!j->deadline_mono || atomic_load(&j->lost) ||
		    atomic_load(&j->end) != DUE_END_RUNNING)
			continue;
		if (j->deadline_mono > now) {
			if (j->deadline_mono < *next)
				*next = j->deadline_mono;
			continue;
		}
		if (n == cap) { /* the rest in the next pass, at once */
			*next = now;
			break;
		}
		if (!atomic_compare_exchange_strong(&j->end, &running,
						    DUE_END_TIMED_OUT))
			continue;
		due__job_stop(j, DUE_STOP_TIMEOUT);
		out[n++] = (renewal){j, j->task.id, j->task.attempt};
	}
	return n;
}

/* One line at the normal level per try stopped at its time limit. */
static void log_timeouts(due_worker *w, const renewal *t, size_t n)
{
	char dur[48];

	for (size_t i = 0; i < n; i++) {
		due_duration_format(dur, sizeof(dur),
				    t[i].job->task.timeout_us);
		due__wlog(w, 1,
			  "task %lld (%s) attempt %d: timed out after %s; "
			  "stopping its handler",
			  (long long)t[i].id, t[i].job->task.kind, t[i].attempt,
			  dur);
	}
}

/*
** Publish this worker's counters to the store when they changed, at most
** every REPORT_US, and at least every HEARTBEAT_US while nothing changes
** (metrics count a worker seen in the last 5 minutes as alive), and once
** when stopping, for due_metrics_get().  A failed report waits for the
** next period.
*/
#define REPORT_US 10000000LL
#define HEARTBEAT_US 60000000LL

static void maybe_report(keeper *k, bool force)
{
	due_worker *w = k->w;
	due_worker_stats st;
	int64_t now = due__mono_us(), sum;

	if (!force && now - k->last_report < REPORT_US)
		return;
	due_worker_stats_get(w, &st);
	sum = st.claimed + st.done + st.failed + st.stale + st.lease_lost +
	      st.claim_queries + st.reclaim_queries + st.store_errors +
	      st.pruned;
	if (sum == k->last_sum && !force && now - k->last_report < HEARTBEAT_US)
		return;
	k->last_report = now;
	if (DUE_DB_CALL(w, due_worker_report(w->db, w->owner, &st)) < 0) {
		due__outage_fail(w, &k->outage,
				 "reporting the worker's counters");
		return;
	}
	due__outage_over(w, &k->outage);
	k->last_sum = sum;
}

/*
** Once a minute, when anything happened, log what discovery cost and what
** it achieved: claims, lateness of recent claims, claim queries and how
** many came back empty, wheel fires, refills and notifications.
*/
#define SUMMARY_US 60000000LL

static void maybe_summary(keeper *k)
{
	due_worker *w = k->w;
	due_worker_stats st, *prev = &k->prev;
	int64_t now = due__mono_us();

	if (now - k->last_summary < SUMMARY_US)
		return;
	k->last_summary = now;
	due_worker_stats_get(w, &st);
	if (st.claim_queries == prev->claim_queries &&
	    st.claimed == prev->claimed)
		return;
	due__wlog(
	    w, 1,
	    "last minute: claimed %lld, done %lld, failed %lld; lateness "
	    "p50 %.1f ms p99 %.1f ms max %.1f ms (recent claims); claim "
	    "queries "
	    "%lld (%lld empty), reclaim checks %lld, wheel fires %lld, refills "
	    "%lld, notifications %lld",
	    (long long)(st.claimed - prev->claimed),
	    (long long)(st.done - prev->done),
	    (long long)(st.failed - prev->failed), st.lateness_p50_us / 1000.0,
	    st.lateness_p99_us / 1000.0, st.lateness_max_us / 1000.0,
	    (long long)(st.claim_queries - prev->claim_queries),
	    (long long)(st.empty_claims - prev->empty_claims),
	    (long long)(st.reclaim_queries - prev->reclaim_queries),
	    (long long)(st.wheel_fired - prev->wheel_fired),
	    (long long)(st.refills - prev->refills),
	    (long long)(st.notifications - prev->notifications));
	*prev = st;
}

/*
** How long the keeper sleeps at most: lease/12 (5 ms .. 1 s), so a new
** job's first renewal (due lease/3 after its claim) is never late.  In
** inline mode at most 100 ms: the claimer is busy running a handler, so
** the keeper is the one that ends the grace after a stop (which cannot
** signal it: due_worker_stop() must stay async-signal-safe).
*/
static int64_t keeper_tick(const due_worker *w)
{
	int64_t tick = w->o.lease_us / 12;
	int64_t max = w->o.mode == DUE_MODE_INLINE ? 100000 : 1000000;

	return tick < 5000 ? 5000 : tick > max ? max : tick;
}

void *due__keeper_main(void *arg)
{
	keeper k = {.w = arg, .outage = {.who = "keeper"}, .last_sum = -1};
	due_worker *w = k.w;
	int64_t tick = keeper_tick(w);
	renewal r[256], t[64];

	k.last_summary = due__mono_us();
	pthread_mutex_lock(&w->mu);
	while (!(w->threads_stop &&
		 (w->n_inflight == 0 || atomic_load(&w->abandon)))) {
		int64_t now = due__mono_us(), next = now + tick;
		int64_t grace_end = due__grace_check_locked(w, now);
		if (grace_end > now && grace_end < next)
			next = grace_end;
		/* stopping: look again soon, a second stop ends the grace */
		if (grace_end && !w->grace_over_at && next > now + 100000)
			next = now + 100000;
		/* a pool's queue behind a handler that turned out slow */
		int64_t stall = due__pools_unstall_locked(w, now);
		if (stall && stall < next)
			next = stall;
		size_t nt = timeouts_locked(w, t, 64, now, &next);
		if (nt) { /* the jobs stay in flight: they are still renewed */
			for (size_t i = 0; i < nt; i++)
				t[i].job->refs++;
			pthread_mutex_unlock(&w->mu);
			log_timeouts(w, t, nt);
			pthread_mutex_lock(&w->mu);
			for (size_t i = 0; i < nt; i++)
				if (--t[i].job->refs == 0)
					due__job_free(t[i].job);
		}
		size_t n = renewals_due_locked(w, r, 256, now, &next);
		if (n == 0) {
			due__cond_wait_us(&w->keep_cv, &w->mu, next - now);
			pthread_mutex_unlock(&w->mu);
			maybe_report(&k, false);
			maybe_summary(&k);
			pthread_mutex_lock(&w->mu);
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		for (size_t i = 0; i < n; i++)
			renew_one(&k, &r[i]);
		pthread_mutex_lock(&w->mu);
		for (size_t i = 0; i < n; i++)
			if (--r[i].job->refs == 0)
				due__job_free(r[i].job);
	}
	pthread_mutex_unlock(&w->mu);
	maybe_report(&k, true);
	return NULL;
}
