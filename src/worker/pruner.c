/*
** pruner.c - the pruner thread: retention of finished tasks.
**
** Pruner thread: started by due_worker_run() unless opts.retain_us is
** DUE_RETAIN_ALL or opts.once.  The worker works without it.
**   Does:      every PRUNE_EVERY_US (sooner for a short retention: half of
**              it, at least 1 s; after a run that deleted nothing, every
**              PRUNE_IDLE_US, at most half the retention), takes or
**              renews the store-wide "prune"
**              lease (store.h lock_take, the store's clock), and while it
**              holds it deletes DONE and CANCELLED tasks whose end is older
**              than opts.retain_us, DUE_PRUNE_BATCH a transaction, batch
**              after batch while full ones come back.  The lease makes the
**              store, not a coordinator, pick one pruner among all the
**              workers: the others find it held and look again a period
**              later; if its holder dies, it runs out after PRUNE_LEASE_US
**              and the next worker to look takes it over.  The store never
**              deletes SCHEDULED, CLAIMED or DEAD tasks (re-checked in the
**              deleting statement).
**   Owns:      nothing of the store: each call is one turn at the shared
**              connection, so claims, completions and renewals go on
**              between batches.
**   Locks:     mu, only to wait on sched_cv; never across a store call.
**   Blocks on: sched_cv between runs and batches, and on the store.
**   Exits:     when threads_stop is set (between batches).
*/
#include <pthread.h>
#include <stdatomic.h>

#include "worker/worker_internal.h"

#define PRUNE_EVERY_US (60LL * 1000000)
/* after a run that found nothing to delete (or another worker holding the
   lease): an idle store is looked at every 5 minutes, not every minute
   (an idle worker's store calls, docs/internals/discovery.md); never later
   than half the retention */
#define PRUNE_IDLE_US (300LL * 1000000)
#define PRUNE_LEASE_US (90LL * 1000000)
#define PRUNE_PAUSE_US 20000LL /* between full batches */
#define PRUNE_LOCK "prune"
/* the first run waits this long (at most `every`): workers started
   together do not all prune at once, and a worker stopped or SIGSTOPped
   just after its start holds no prune transaction (on SQLite, a stopped
   process inside a write transaction holds every other writer back) */
#define PRUNE_FIRST_US 5000000LL

/*
** Sleep on sched_cv for `us` (the scheduler's wake-ups, broadcast on the
** same cv, do not cut it short); false once threads_stop is set.
*/
static bool rest(due_worker *w, int64_t us)
{
	int64_t until = due__mono_us() + us;
	pthread_mutex_lock(&w->mu);
	for (int64_t left = us; !w->threads_stop && left > 0;
	     left = until - due__mono_us())
		due__cond_wait_us(&w->sched_cv, &w->mu, left);
	/* a stopping worker starts no retention work: its store calls would
	   only hold up the stop when the store does not answer */
	bool go_on = !w->threads_stop && !atomic_load(&w->stop);
	pthread_mutex_unlock(&w->mu);
	return go_on;
}

/*
** One run: while this worker holds the lease, prune full batches until a
** short one says nothing old is left.  Returns the tasks deleted, or a
** negative code (the outage is logged by the caller).
*/
static int64_t prune_run(due_worker *w, int *rc_out)
{
	int64_t total = 0, lease_at = 0;

	*rc_out = 0;
	while (!atomic_load(&w->stop)) {
		bool held = false;
		int64_t n = 0;
		int rc;

		/* renew well before the lease could run out mid-run */
		if (!lease_at ||
		    due__mono_us() - lease_at > PRUNE_LEASE_US / 3) {
			rc = DUE_DB_CALL(w, due__lock_take(w->db, &held,
							   PRUNE_LOCK, w->owner,
							   PRUNE_LEASE_US));
			if (rc < 0 || !held) {
				*rc_out = rc;
				return total;
			}
			lease_at = due__mono_us();
		}
		rc = DUE_DB_CALL(w, due__prune_max(w->db, &n, w->o.retain_us,
						   DUE_PRUNE_BATCH));
		if (rc < 0) {
			*rc_out = rc;
			return total;
		}
		total += n;
		atomic_fetch_add(&w->st.pruned, n);
		if (n < DUE_PRUNE_BATCH || !rest(w, PRUNE_PAUSE_US))
			return total;
	}
	return total;
}

/*
** Log what was pruned at most once a minute (a short retention prunes
** every second), and each run at verbose level.
*/
static void log_pruned(due_worker *w, const char *keep, int64_t n,
		       int64_t *unlogged, int64_t *logged_at)
{
	int64_t now = due__mono_us();

	*unlogged += n;
	if (*unlogged == 0 ||
	    (*logged_at && now - *logged_at < PRUNE_EVERY_US)) {
		/* (a run the line below says is not said twice) */
		if (n > 0)
			due__wlog(w, 2,
				  "retention: pruned %lld finished task(s)",
				  (long long)n);
		return;
	}
	due__wlog(w, 1,
		  "retention: pruned %lld finished task(s) ended more than %s "
		  "ago",
		  (long long)*unlogged, keep);
	*unlogged = 0;
	*logged_at = now;
}

void *due__pruner_main(void *arg)
{
	due_worker *w = arg;
	due_outage outage = {.who = "pruner"};
	int64_t every = w->o.retain_us / 2, backoff = 1000000, idle;
	int64_t unlogged = 0, logged_at = 0;
	char keep[64];

	if (every > PRUNE_EVERY_US)
		every = PRUNE_EVERY_US;
	if (every < 1000000)
		every = 1000000;
	idle = w->o.retain_us / 2 < PRUNE_IDLE_US ? w->o.retain_us / 2
						  : PRUNE_IDLE_US;
	if (idle < every)
		idle = every;
	due_duration_format(keep, sizeof(keep), w->o.retain_us);
	if (!rest(w, every < PRUNE_FIRST_US ? every : PRUNE_FIRST_US))
		return NULL;
	for (;;) {
		int rc;
		int64_t n = prune_run(w, &rc), wait_us = every;
		if (rc == DUE_EUNSUPPORTED || rc == DUE_EINVAL) {
			/* not an outage: it will not get better by retrying */
			due__wlog(w, 1, "retention off: %s", due_error_last());
			break;
		}
		if (rc < 0) {
			due__outage_fail(w, &outage, "pruning finished tasks");
			wait_us = backoff < every ? backoff : every;
			backoff = backoff * 2 > every ? every : backoff * 2;
		} else {
			due__outage_over(w, &outage);
			backoff = 1000000;
			if (n == 0)
				wait_us = idle;
		}
		log_pruned(w, keep, n, &unlogged, &logged_at);
		if (!rest(w, wait_us))
			break;
	}
	if (unlogged > 0)
		due__wlog(w, 1,
			  "retention: pruned %lld finished task(s) ended more "
			  "than %s ago",
			  (long long)unlogged, keep);
	return NULL;
}
