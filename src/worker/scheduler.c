/*
** scheduler.c - the scheduler thread: turns periodic schedules' slots
** into tasks.
**
** Scheduler thread: started by due_worker_run() with opts.cron and without
** opts.once.  The worker works without it (if it cannot be started, no
** slot is materialized by this worker).
**   Does:      runs due_cron_tick() passes, each materializing the slots
**              due within the lookahead.
**   Owns:      nothing of the store: a pass is one turn at the shared
**              connection (DUE_DB_CALL).
**   Locks:     mu, only to wait on sched_cv; never across a store call.
**   Blocks on: sched_cv between passes (until the earliest next slot
**              enters the lookahead; at most 5 s, or 5 min while discovery
**              hears the store's notifications, which due_cron_put and
**              due_cron_remove send; 1 s after a failed pass), and on the
**              store during a pass.
**   Exits:     when threads_stop is set.
*/
#include <pthread.h>
#include <stdatomic.h>

#include "worker/worker_internal.h"

#define CRON_LOOKAHEAD_US 2000000LL
#define CRON_MAX_SLEEP_US 5000000LL
/* while notified of schedule changes: an idle worker's passes are rare
   (issue 13's idle budget), and a note brings the next pass forward to no
   sooner than CRON_MAX_SLEEP_US after the last (a busy store's stream of
   submit notes costs no more passes than polling did) */
#define CRON_HEARD_SLEEP_US 300000000LL
/* a schedule's slot waits for its previous run (--overlap wait): its slot
   time has passed, so the next pass would be at once; look again after
   50 ms, doubling to 1 s while it waits (a task's end sends no note).
   Before, every worker passed every 20 ms (two store calls each) for as
   long as the previous run ran */
#define CRON_WAIT_FIRST_US 50000LL
#define CRON_WAIT_MAX_US 1000000LL

/*
** Sleep until `next` (monotonic us) or threads_stop.  A schedule change
** noted by discovery (cron_poke, set once per pass: discovery wakes this
** thread only for the first note after a pass) moves `next` to no sooner
** than `soonest`.  mu held.
*/
static void sched_rest(due_worker *w, int64_t next, int64_t soonest)
{
	int64_t now;
	while (!w->threads_stop && (now = due__mono_us()) < next) {
		if (w->cron_poke && soonest < next) {
			next = soonest;
			continue;
		}
		due__cond_wait_us(&w->sched_cv, &w->mu, next - now);
	}
}

/*
** Run scheduler passes: each materializes the slots due within the
** lookahead, then sleeps until the earliest next slot enters it, at most
** CRON_MAX_SLEEP_US so new or changed schedules are seen; while discovery
** hears the store's notifications (a put or removal sends one) at most
** CRON_HEARD_SLEEP_US.  Any number of workers may do this at once: the
** store's compare-and-set gives each slot one task.
*/
void *due__scheduler_main(void *arg)
{
	due_worker *w = arg;
	due_outage outage = {.who = "scheduler"};
	int64_t wait_us = 0, last = 0, held = 0;

	pthread_mutex_lock(&w->mu);
	while (!w->threads_stop) {
		if (wait_us > 0)
			sched_rest(w, last + wait_us,
				   last + (wait_us < CRON_MAX_SLEEP_US
					       ? wait_us
					       : CRON_MAX_SLEEP_US));
		/* a stopping worker starts no pass: its store calls would
		   only hold up the stop when the store does not answer */
		if (w->threads_stop || atomic_load(&w->stop))
			break;
		w->cron_poke = false; /* this pass sees the change */
		pthread_mutex_unlock(&w->mu);
		last = due__mono_us();
		due_cron_tick_result r;
		int rc = 0;
		due_cron_tick_opts to = DUE_CRON_TICK_OPTS_INIT;
		to.lookahead_us = CRON_LOOKAHEAD_US;
		if (w->o.cron_grace_us > 0)
			to.misfire_grace_us = w->o.cron_grace_us;
		wait_us = atomic_load(&w->listening) ? CRON_HEARD_SLEEP_US
						     : CRON_MAX_SLEEP_US;
		rc = DUE_DB_CALL(w, due_cron_tick(w->db, &r, &to));
		if (rc == DUE_ESTORE || rc == DUE_EBUSY || rc == DUE_ERROR) {
			due__outage_fail(w, &outage, "a scheduler pass");
			wait_us = 1000000;
		} else if (rc < 0) { /* a broken schedule; the others ran */
			due__outage_over(w, &outage);
			due__wlog(w, 1, "scheduler: %s", due_error_last());
			wait_us = 1000000;
		} else {
			due__outage_over(w, &outage);
			if (r.missed)
				due__wlog(
				    w, 1,
				    "scheduler: %lld slot(s) missed while no "
				    "scheduler ran (see `due cron ls`)",
				    (long long)r.missed);
			if (r.materialized)
				due__wlog(
				    w, 2,
				    "scheduler: %lld slot task(s) created",
				    (long long)r.materialized);
			if (r.next_slot &&
			    r.next_slot - r.now - CRON_LOOKAHEAD_US / 2 <
				wait_us)
				wait_us =
				    r.next_slot - r.now - CRON_LOOKAHEAD_US / 2;
			if (wait_us < 20000)
				wait_us = 20000;
			/* the slots that can be made are made (up to the
			   lookahead, 2 s, past a wait of at most 1 s) */
			held = !r.waiting ? 0
			       : !held	  ? CRON_WAIT_FIRST_US
			       : held * 2 > CRON_WAIT_MAX_US ? CRON_WAIT_MAX_US
							     : held * 2;
			if (wait_us < held)
				wait_us = held;
		}
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}
