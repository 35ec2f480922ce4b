/*
** pool.c - the pool threads that run handlers (jobs and their queues are
** job.c's).
**
** Pool threads: one per slot of each pool.  The shared pool has none in
** inline mode, where the claimer calls due__run_job() itself.
**   Does:      takes the next job of its pool, runs its handler, hands it
**              to the completer (or, while the claimer folds completions
**              into its claims, wakes the claimer: after every job of a
**              slow pool, once its queue is empty for a fast one, whose
**              thread may instead claim the next batch itself: a relay
**              claim, claimer.c).
**   Owns:      a job from the moment it dequeues it until it queues it for
**              completion; no store connection of its own (a handler may
**              open one; a relay takes its turn at the shared one).
**   Locks:     mu, only to dequeue and to queue a completion (and around
**              a relay claim, never across its store call).
**   Blocks on: its pool's cv while the queue is empty, on the handler for
**              as long as it runs, and on the store during a relay.
**   Exits:     when threads_stop is set and its queue is empty.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "worker/worker_internal.h"

/* ------------------------------------------------------------------ */
/* Pools                                                               */
/* ------------------------------------------------------------------ */

typedef struct pool_arg {
	due_worker *w;
	pool *p;
} pool_arg;

static void *pool_thread(void *arg)
{
	pool_arg *a = arg;
	due_worker *w = a->w;
	pool *p = a->p;

	free(a);
	pthread_mutex_lock(&w->mu);
	for (;;) {
		due_job *j = due__pool_dequeue_locked(p);
		if (!j) {
			if (w->threads_stop)
				break;
			p->waiting++;
			pthread_cond_wait(&p->cv, &w->mu);
			p->waiting--;
			p->signaled = 0; /* taken (or a spurious wake-up) */
			continue;
		}
		if (!due__pool_fast_locked(p))
			due__pool_wake_locked(p); /* the chain: jobs are left */
		pthread_mutex_unlock(&w->mu);
		/* a fast pool's thread that emptied its queue claims the
		   next batch itself when it can, else wakes the claimer */
		if (due__run_job(w, j) && !due__claim_relay(w, p))
			due__wake(w);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int due__pools_start(due_worker *w)
{
	for (size_t i = 0; i < w->n_pools; i++) {
		pool *p = w->pools[i];
		if (i == 0 && w->o.mode == DUE_MODE_INLINE)
			continue; /* the claimer runs the shared pool */
		for (int k = 0; k < p->size; k++) {
			pool_arg *a = malloc(sizeof(*a));
			if (!a)
				return due__error_set(DUE_ENOMEM,
						      "out of memory");
			*a = (pool_arg){w, p};
			if (pthread_create(&p->threads[k], NULL, pool_thread,
					   a) != 0) {
				free(a);
				return due__error_set(
				    DUE_ERROR, "cannot start a pool thread");
			}
			p->started++;
		}
	}
	return 0;
}
