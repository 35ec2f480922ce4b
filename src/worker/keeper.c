/*
** keeper.c - the keeper thread: the worker's local clock.  It stops tries
** whose lease is no longer surely held and tries past their time limits,
** ends the grace after a stop, and says when a store call goes unanswered.
** It never talks to the store, so nothing the store does can hold it back.
**
** Keeper thread.
**   Does:      the lease clock (worker_internal.h, Invariants): a running
**              try whose latest confirmed claim or renewal was sent more
**              than lease - margin ago is told to stop
**              (DUE_STOP_UNCONFIRMED, logged once and counted), and its
**              kill_by is set, so a command or pipe handler still running
**              at confirmed + lease - 2/3 margin is killed, before the store
**              could hand the task to another worker.  It does not wait
**              for the renewer, the connection or any call: a renewal that
**              hangs, a partition, another client's row lock all end the
**              same way.  Watches the time limits: a try still running its
**              task.timeout_us after its claim is told to stop
**              (DUE_STOP_TIMEOUT, logged once); the renewer keeps its
**              lease a while, so that no other worker runs the task while
**              it is being stopped.  Ends the grace after a stop
**              (due__grace_check_locked()).  Logs once a store call that
**              has had no answer for STALL_LOG_US (the caller logs its
**              end), and a summary once a minute.
**   Owns:      nothing of the store.
**   Locks:     mu, which no thread holds across a store call, and for a
**              moment each call watch's own lock (outage.c).
**   Blocks on: keep_cv until the next lease clock, time limit or stall
**              check, at most lease/12 (5 ms .. 1 s; 100 ms inline or
**              while stopping); a try with a time limit put in flight
**              signals it.  Nothing else.
**   Exits:     when threads_stop is set and nothing is in flight (or the
**              store was abandoned).
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "worker/worker_internal.h"

/* The keeper's own state. */
typedef struct keeper {
	due_worker *w;
	int64_t last_summary;
	due_worker_stats prev; /* counters at the last summary */
} keeper;

typedef struct renewal {
	due_job *job;
	due_id id;
	int32_t attempt;
} renewal;

/*
** Whether every try in flight has a handler that returned.  mu held.
*/
static bool all_returned_locked(const due_worker *w)
{
	for (const due_job *j = w->inflight; j; j = j->inext)
		if (!atomic_load(&j->finished))
			return false;
	return true;
}

/*
** Once every handler has returned after the grace, their commits get one
** bound of the connection (conn_timeout_us; after a second stop request
** at most 1 s): what cannot be committed by then (the store is down or
** hung) is left to lease expiry, and another worker reclaims it, which
** fencing makes safe.  Decided by the keeper or the drain, whichever looks
** first: the claimer may itself be waiting on the store.  mu held.
*/
static void abandon_check_locked(due_worker *w, int64_t now)
{
	int64_t commit_us =
	    atomic_load(&w->force) && w->conn_timeout_us > 1000000
		? 1000000
		: w->conn_timeout_us;

	if (atomic_load(&w->abandon))
		return;
	if (!w->grace_over_at || !all_returned_locked(w)) {
		w->returned_at = 0;
		return;
	}
	if (!w->returned_at)
		w->returned_at = now;
	if (w->n_inflight == 0 || now - w->returned_at <= commit_us)
		return;
	due__wlog(w, 1,
		  "cannot commit %d finished or stopped tr%s (store "
		  "unreachable?): leaving them to lease expiry",
		  w->n_inflight, w->n_inflight == 1 ? "y" : "ies");
	atomic_store(&w->abandon, true);
	pthread_cond_broadcast(&w->done_cv);
	pthread_cond_broadcast(&w->idle_cv);
}

/*
** The grace period runs from the first stop request (or from the start
** of a drain without one); a second request ends it at once.  Once it is
** over, every running handler is told to stop, once (DUE_STOP_SHUTDOWN);
** what a stopped handler returns is committed as usual (a failed try:
** the task is retried), and if that commit cannot be made the lease
** expires.  Called with mu
** held by the claimer's drain() and by the keeper: in inline mode the
** claimer is busy running a handler, so the keeper enforces the grace.
** The first to look also logs the stop, and each look checks whether the
** commits have had their bound (abandon_check_locked).
** Returns the monotonic time the grace ends, 0 while no stop is asked.
*/
int64_t due__grace_check_locked(due_worker *w, int64_t now)
{
	int64_t since = atomic_load(&w->stop_mono);

	bool force = atomic_load(&w->force);

	if (!since)
		return 0;
	if (!w->stop_said) { /* said by whoever sees the stop first */
		w->stop_said = true;
		if (w->n_inflight > 0 && !w->o.once)
			due__wlog(w, 1,
				  "stopping: %d running tr%s may finish "
				  "within the grace (%lld ms); a second stop "
				  "ends it now",
				  w->n_inflight,
				  w->n_inflight == 1 ? "y" : "ies",
				  (long long)w->o.grace_us / 1000);
	}
	if ((force || now >= since + w->o.grace_us) && !w->grace_over_at) {
		w->grace_over_at = now;
		if (w->n_inflight > 0)
			due__wlog(
			    w, 1,
			    "%s: stopping %d running handler(s); each "
			    "stopped try is committed as failed (its task "
			    "retried), or its lease expires",
			    force ? "forced stop" : "grace period over",
			    w->n_inflight);
		for (due_job *j = w->inflight; j; j = j->inext)
			due__job_stop(j, DUE_STOP_SHUTDOWN);
	}
	abandon_check_locked(w, now);
	return force ? now : since + w->o.grace_us;
}

/*
** The lease clock.  Stop each running try whose lease is no longer surely
** held: no confirmation sent within lease - margin.  Stores the tries it
** stopped (at most cap; past that, *next is now) in out, for the log, and
** lowers *next to the earliest lease clock still running.  A try already
** told to stop for another reason (a time limit, shutdown) gets its
** kill_by all the same: the kill grace of a stopped handler must not
** outlast the lease either.  A finished try runs nothing.  mu held.
*/
static size_t unconfirmed_locked(due_worker *w, renewal *out, size_t cap,
				 int64_t now, int64_t *next)
{
	size_t n = 0;

	for (due_job *j = w->inflight; j; j = j->inext) {
		if (j->unconfirmed || atomic_load(&j->finished))
			continue;
		int64_t sent = atomic_load(&j->confirmed_mono);
		int64_t stop_at = due__lease_stop_at(w, sent);
		if (stop_at > now) {
			if (stop_at < *next)
				*next = stop_at;
			continue;
		}
		if (n == cap) {
			*next = now;
			break;
		}
		j->unconfirmed = true;
		due__job_set_kill_by(j, due__lease_kill_at(w, sent));
		/* already told for another reason: kill_by still holds; told
		   by the handler's own thread reading the same clock
		   (due__job_lease_check): logged and counted here */
		if (!due__job_stop(j, DUE_STOP_UNCONFIRMED) &&
		    due__job_stop_why(j) != DUE_STOP_UNCONFIRMED)
			continue;
		atomic_fetch_add(&w->st.lease_lost, 1);
		atomic_fetch_add(&w->st.lease_unconfirmed, 1);
		j->refs++;
		out[n++] = (renewal){j, j->task.id, j->task.attempt};
	}
	return n;
}

/*
** One line per try the lease clock stopped.  A stop more than 100 ms past
** its time (lease - margin after the confirmation) says by how much: the
** keeper was held back (mu, a starved thread), which eats into the third
** of the margin left between the SIGKILL and the end of the lease.
*/
static void log_unconfirmed(due_worker *w, const renewal *t, size_t n,
			    int64_t now)
{
	for (size_t i = 0; i < n; i++)
		due__job_log_unconfirmed(w, t[i].job, now, false);
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

/* Drop the references a pass took (log_timeouts, log_unconfirmed). */
static void unref_locked(renewal *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (--t[i].job->refs == 0)
			due__job_free(t[i].job);
}

void *due__keeper_main(void *arg)
{
	keeper k = {.w = arg};
	due_worker *w = k.w;
	int64_t tick = keeper_tick(w);
	renewal t[64], u[64];

	k.last_summary = due__mono_us();
	pthread_mutex_lock(&w->mu);
	while (!(w->threads_stop &&
		 (w->n_inflight == 0 || atomic_load(&w->abandon)))) {
		int64_t now = due__mono_us(), next = now + tick;
		int64_t grace_end = due__grace_check_locked(w, now);
		if (grace_end > now && grace_end < next)
			next = grace_end;
		/* stopping: look again soon, a second stop ends the grace,
		   and the commits' bound may run out (above) */
		if (grace_end && !atomic_load(&w->abandon) &&
		    next > now + 100000)
			next = now + 100000;
		/* a pool's queue behind a handler that turned out slow */
		int64_t stall = due__pools_unstall_locked(w, now);
		if (stall && stall < next)
			next = stall;
		size_t nt = timeouts_locked(w, t, 64, now, &next);
		for (size_t i = 0; i < nt; i++) /* they stay in flight */
			t[i].job->refs++;
		size_t nu = unconfirmed_locked(w, u, 64, now, &next);
		if (nt || nu) {
			pthread_mutex_unlock(&w->mu);
			log_timeouts(w, t, nt);
			log_unconfirmed(w, u, nu, now);
			pthread_mutex_lock(&w->mu);
			unref_locked(t, nt);
			unref_locked(u, nu);
			continue;
		}
		due__cond_wait_us(&w->keep_cv, &w->mu, next - now);
		pthread_mutex_unlock(&w->mu);
		now = due__mono_us();
		due__call_check(w, &w->db_call, "shared connection", now);
		due__call_check(w, &w->renew_call, "renewal connection", now);
		maybe_summary(&k);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}
