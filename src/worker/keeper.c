/*
** keeper.c - the lease keeper thread: renews running tries' leases and
** publishes the worker's counters.
**
** Keeper thread.
**   Does:      renews every running try's lease once lease/3 has passed
**              since its last successful renewal.  When the store says the
**              lease is gone (taken back, or a cancel was requested) it
**              raises the job's `lost` flag: the handler is told to stop.
**              When renewals keep failing for a whole lease, the lease is
**              presumed lost and the handler told the same.  Between
**              renewals it publishes the worker's counters to the store
**              (due_worker_report) and logs a summary once a minute.
**   Owns:      its own store connection, opened on first need.
**   Locks:     mu, to pick the jobs due for renewal (taking a reference to
**              each, so the completer cannot free one under it) and to drop
**              those references; never across a store call.
**   Blocks on: keep_cv for up to lease/12 (5 ms..1 s) between looks, and
**              on the store during a renewal or a report.
**   Exits:     when threads_stop is set and nothing is in flight (or the
**              store was abandoned), after a last report.
*/
#include <pthread.h>
#include <stdatomic.h>

#include "worker/worker_internal.h"

typedef struct renewal {
	due_job *job;
	due_id id;
	int32_t attempt;
} renewal;

/* Take references to the jobs whose lease is due for renewal.  mu held. */
static size_t renewals_due_locked(due_worker *w, renewal *r, size_t cap,
				  int64_t now)
{
	size_t n = 0;
	for (due_job *j = w->inflight; j && n < cap; j = j->inext) {
		if (atomic_load(&j->lost) ||
		    now - j->renewed_mono < w->o.lease_us / 3)
			continue;
		j->refs++;
		r[n++] = (renewal){j, j->task.id, j->task.attempt};
	}
	return n;
}

static void renew_one(due_worker *w, due_db *db, renewal *r)
{
	due_extend_outcome eo;
	int64_t now = due_mono_us();
	int rc = due_extend(db, &eo, r->id, r->attempt, w->o.lease_us);

	if (rc < 0) {
		atomic_fetch_add(&w->st.store_errors, 1);
		due_wlog(w, 1, "task %lld: lease renewal failed: %s", (long long)r->id,
			 due_error_last());
		/* the lease may be gone by now; stop the handler once it is */
		if (now - r->job->renewed_mono >= w->o.lease_us &&
		    !atomic_exchange(&r->job->lost, true)) {
			atomic_fetch_add(&w->st.lease_lost, 1);
			due_wlog(w, 1, "task %lld attempt %d: lease presumed lost (no "
				 "renewal for a whole lease); stopping its handler",
				 (long long)r->id, r->attempt);
		}
		return;
	}
	if (eo == DUE_EXTEND_OK) {
		r->job->renewed_mono = now;
		return;
	}
	if (!atomic_exchange(&r->job->lost, true)) {
		atomic_fetch_add(&w->st.lease_lost, 1);
		due_wlog(w, 1, "task %lld attempt %d: %s; stopping its handler",
			 (long long)r->id, r->attempt,
			 eo == DUE_EXTEND_LOST ? "lease lost (taken back by the store)"
					   : "cancel requested");
	}
}

/*
** Publish this worker's counters to the store when they changed, at most
** every REPORT_US, and at least every HEARTBEAT_US while nothing changes
** (metrics count a worker seen in the last 5 minutes as alive), and once
** when stopping, for due_metrics_get().
*/
#define REPORT_US 10000000LL
#define HEARTBEAT_US 60000000LL

static void maybe_report(due_worker *w, due_db **db, int64_t *last,
			 int64_t *last_sum, bool force)
{
	due_worker_stats st;
	int64_t now = due_mono_us(), sum;

	if (!force && now - *last < REPORT_US)
		return;
	due_worker_stats_get(w, &st);
	sum = st.claimed + st.done + st.failed + st.stale + st.lease_lost +
	      st.claim_queries + st.reclaim_queries + st.store_errors;
	if (sum == *last_sum && !force && now - *last < HEARTBEAT_US)
		return;
	*last = now;
	if (!*db && !(*db = due_connect_retry(w, "keeper")))
		return;
	if (due_worker_report(*db, w->owner, &st) == 0)
		*last_sum = sum;
}

/*
** Once a minute, when anything happened, log what discovery cost and what
** it achieved: claims, lateness of recent claims, claim queries and how
** many came back empty, wheel fires, refills and notifications.
*/
#define SUMMARY_US 60000000LL

static void maybe_summary(due_worker *w, int64_t *last, due_worker_stats *prev)
{
	due_worker_stats st;
	int64_t now = due_mono_us();

	if (now - *last < SUMMARY_US)
		return;
	*last = now;
	due_worker_stats_get(w, &st);
	if (st.claim_queries == prev->claim_queries && st.claimed == prev->claimed)
		return;
	due_wlog(w, 1, "last minute: claimed %lld, done %lld, failed %lld; lateness "
		 "p50 %.1f ms p99 %.1f ms max %.1f ms (recent claims); claim queries "
		 "%lld (%lld empty), reclaim checks %lld, wheel fires %lld, refills "
		 "%lld, notifications %lld",
		 (long long)(st.claimed - prev->claimed), (long long)(st.done - prev->done),
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

void *due_keeper_main(void *arg)
{
	due_worker *w = arg;
	due_db *db = NULL;
	renewal r[256];
	int64_t tick = w->o.lease_us / 12, last_report = 0, last_sum = -1;
	int64_t last_summary = due_mono_us();
	due_worker_stats prev = {0};

	if (tick < 5000)
		tick = 5000;
	if (tick > 1000000)
		tick = 1000000;
	pthread_mutex_lock(&w->mu);
	while (!(w->threads_stop &&
		 (w->n_inflight == 0 || atomic_load(&w->abandon)))) {
		size_t n = renewals_due_locked(w, r, 256, due_mono_us());
		if (n == 0) {
			due_cond_wait_us(&w->keep_cv, &w->mu, tick);
			pthread_mutex_unlock(&w->mu);
			maybe_report(w, &db, &last_report, &last_sum, false);
			maybe_summary(w, &last_summary, &prev);
			pthread_mutex_lock(&w->mu);
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		if (!db)
			db = due_connect_retry(w, "keeper");
		for (size_t i = 0; db && i < n; i++)
			renew_one(w, db, &r[i]);
		pthread_mutex_lock(&w->mu);
		for (size_t i = 0; i < n; i++)
			if (--r[i].job->refs == 0)
				due_job_free(r[i].job);
	}
	pthread_mutex_unlock(&w->mu);
	maybe_report(w, &db, &last_report, &last_sum, true);
	due_close(db);
	return NULL;
}
