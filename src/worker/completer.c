/*
** completer.c - the completer thread: commits finished tries and frees
** their slots.
**
** Completer thread.
**   Does:      takes finished jobs off the done queue, up to COMPLETE_BATCH
**              at a time, and commits them: plain completions with one
**              due_complete_batch() (one transaction, each row fenced on
**              its own (id, attempt), each with its own outcome); fails and
**              completions with a transaction hook one by one.  A try
**              stopped at its time limit is failed with the outcome
**              TIMED_OUT (due_fail_as()), whatever its handler returned.
**              Then it retires each job (out of flight, its slot
**              freed) and wakes the claimer, which may claim into the
**              freed slots; after a fail that scheduled a retry,
**              discovery refills at once (`retried`), so the retry is on
**              this worker's wheel before it is due, whatever the store's
**              note does.
**   Owns:      the jobs of the batch it commits; each commit is one turn
**              at the shared connection (DUE_DB_CALL).
**   Locks:     mu, to take a batch and to retire it; never across a store
**              call.
**   Blocks on: done_cv (no completions), and on the store: a failed commit
**              is retried with backoff (10 ms doubling to 2 s) until it
**              lands or shutdown gives up on the store (`abandon`); a
**              fenced commit is safe to retry.  The outage is logged once
**              when it starts and once when it ends.
**   Exits:     when threads_stop is set and nothing is in flight (or the
**              store was abandoned).
**
** While the claimer drains the queue (`fold`), it commits its pool's plain
** completions in the same transaction as its next claim
** (due_complete_and_claim()); the completer then only takes what the
** claimer left for 2 ms, and the failures and hooks that are always its.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "worker/worker_internal.h"

void due__count_outcome(due_worker *w, const due_job *j, bool ok, int outcome)
{
	const char *name;

	if (ok) {
		name = due_complete_outcome_name((due_complete_outcome)outcome);
		if (outcome == DUE_COMPLETE_DONE)
			atomic_fetch_add(&w->st.done, 1);
		else if (outcome == DUE_COMPLETE_REJECTED_STALE)
			atomic_fetch_add(&w->st.stale, 1);
		else
			atomic_fetch_add(&w->st.cancelled, 1);
	} else {
		name = due_fail_outcome_name((due_fail_outcome)outcome);
		if (outcome == DUE_FAIL_REJECTED_STALE)
			atomic_fetch_add(&w->st.stale, 1);
		else if (outcome == DUE_FAIL_CANCELLED)
			atomic_fetch_add(&w->st.cancelled, 1);
		else if (outcome == DUE_FAIL_DEAD)
			atomic_fetch_add(&w->st.dead, 1);
		else
			atomic_fetch_add(&w->st.failed, 1);
	}
	bool quiet = ok && outcome == DUE_COMPLETE_DONE;
	due__wlog(w, quiet ? 2 : 1, "task %lld (%s) attempt %d: %s%s%s",
		  (long long)j->task.id, j->task.kind, j->task.attempt, name,
		  j->error && !ok ? ": " : "", j->error && !ok ? j->error : "");
}

/* The completer's own state. */
typedef struct completer {
	due_worker *w;
	due_db *db;  /* the worker's shared connection: DUE_DB_CALL */
	due_db *hdb; /* hooked completions' own, opened on first need */
	due_outage outage;
} completer;

/*
** Retry a store call while it fails with a store error (not a refusal:
** DUE_EINVAL, DUE_ETOOBIG), after 10 ms doubling to 2 s, until shutdown
** gives up on the store.  A fenced commit is safe to retry.  `what` names
** the call in the outage's log line.
*/
#define STORE_RETRY(c, what, call)                                             \
	STORE_RETRY_(c, what, DUE_DB_CALL((c)->w, (call)))
#define STORE_RETRY_(c, what, call)                                            \
	do {                                                                   \
		int64_t delay_ = 10000;                                        \
		while ((rc = (call)) < 0 && rc != DUE_EINVAL &&                \
		       rc != DUE_ETOOBIG && !atomic_load(&(c)->w->abandon)) {  \
			due__outage_fail((c)->w, &(c)->outage, "%s", (what));  \
			due__bg_sleep((c)->w, delay_);                         \
			delay_ = delay_ * 2 > 2000000 ? 2000000 : delay_ * 2;  \
		}                                                              \
		if (rc >= 0 || rc == DUE_EINVAL || rc == DUE_ETOOBIG)          \
			due__outage_over((c)->w, &(c)->outage);                \
	} while (0)

/* Commit the fails and hooked completions one by one. */
static void commit_single(completer *c, due_job *j)
{
	due_worker *w = c->w;
	char what[64];
	int rc;

	snprintf(what, sizeof(what), "%s task %lld",
		 j->rc != 0 ? "failing" : "completing", (long long)j->task.id);
	if (j->rc != 0) {
		due_fail_outcome fo = DUE_FAIL_REJECTED_STALE;
		/* a try stopped at its time limit is recorded as such */
		due_outcome as = atomic_load(&j->end) == DUE_END_TIMED_OUT
				     ? DUE_OUT_TIMED_OUT
				     : DUE_OUT_FAILED;
		STORE_RETRY(c, what,
			    due_fail_as(c->db, &fo, j->task.id, j->task.attempt,
					j->error ? j->error : "handler failed",
					as));
		if (rc == 0)
			due__count_outcome(w, j, false, (int)fo);
		/* the retry is due after its backoff: our own wheel learns it
		   at the refill this asks for (the wake-up after the batch) */
		if (rc == 0 && fo == DUE_FAIL_RETRY_SCHEDULED)
			atomic_store(&w->retried, true);
		return;
	}
	due_complete_outcome co = DUE_COMPLETE_REJECTED_STALE;
	if (j->hook) {
		/* the hook is the handler's code inside our transaction: it
		   may wait on its own rows for as long as it likes, so it runs
		   on a connection of its own, never holding the shared turn
		   (claims, renewals and other completions go on meanwhile) */
		if (!c->hdb && !(c->hdb = due__connect_retry(w, "completer")))
			return; /* shutdown gave up on the store */
		STORE_RETRY_(c, what,
			     due_complete_tx(c->hdb, &co, j->task.id,
					     j->task.attempt, j->result,
					     j->result_len, j->hook,
					     j->hook_payload));
	} else {
		STORE_RETRY(c, what,
			    due_complete_tx(c->db, &co, j->task.id,
					    j->task.attempt, j->result,
					    j->result_len, NULL, NULL));
	}
	if (rc == 0)
		due__count_outcome(w, j, true, (int)co);
	else
		due__wlog(w, 1, "task %lld: completion failed: %s",
			  (long long)j->task.id, due_error_last());
}

/*
** A batch the store refused as a whole (one oversized result): commit its
** plain completions one by one; one that still fails is failed with the
** store's reason.
*/
static void commit_each(completer *c, due_job **jobs, size_t n)
{
	due_complete_outcome co;

	for (size_t i = 0; i < n; i++) {
		due_job *j = jobs[i];
		if (j->rc != 0 || j->hook)
			continue;
		if (DUE_DB_CALL(c->w, due_complete(c->db, &co, j->task.id,
						   j->task.attempt, j->result,
						   j->result_len)) < 0) {
			j->rc = 1;
			due_job_set_error(j, due_error_last());
			commit_single(c, j);
		} else {
			due__count_outcome(c->w, j, true, (int)co);
		}
	}
}

/* Commit plain completions of a batch with one fenced batch call. */
static void commit_batch(completer *c, due_job **jobs, size_t n)
{
	due_worker *w = c->w;
	due_completion items[COMPLETE_BATCH];
	char what[64];
	size_t k = 0;
	int rc;

	for (size_t i = 0; i < n; i++) {
		due_job *j = jobs[i];
		if (j->rc != 0 || j->hook) {
			commit_single(c, j);
			continue;
		}
		items[k++] = (due_completion){j->task.id, j->task.attempt,
					      j->result, j->result_len, 0};
	}
	if (k == 0)
		return;
	snprintf(what, sizeof(what), "committing %zu completion(s)", k);
	STORE_RETRY(c, what, due_complete_batch(c->db, items, k));
	if (rc == DUE_ETOOBIG || rc == DUE_EINVAL) {
		commit_each(c, jobs, n);
		return;
	}
	if (rc < 0) { /* only when shutdown gave up on the store */
		due__wlog(w, 1, "leaving %zu completion(s) uncommitted: %s", k,
			  due_error_last());
		return;
	}
	for (size_t i = 0, m = 0; i < n; i++)
		if (jobs[i]->rc == 0 && !jobs[i]->hook)
			due__count_outcome(w, jobs[i], true,
					   (int)items[m++].outcome);
}

/* Drop a committed job from flight, free its slot.  mu held. */
void due__retire_locked(due_worker *w, due_job *j)
{
	if (j->iprev)
		j->iprev->inext = j->inext;
	else
		w->inflight = j->inext;
	if (j->inext)
		j->inext->iprev = j->iprev;
	w->n_inflight--;
	j->pool->busy--;
	if (--j->refs == 0)
		due__job_free(j);
	pthread_cond_broadcast(&w->idle_cv);
}

void *due__completer_main(void *arg)
{
	completer c = {.w = arg, .outage = {.who = "completer"}};
	due_worker *w = c.w;
	due_job *batch[COMPLETE_BATCH];

	c.db = w->db;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		size_t n = 0;
		/* while the claimer is draining it commits completions with its
		   next claim; take only those it left for 2 ms */
		if (w->done_head && atomic_load(&w->fold) && !w->threads_stop) {
			int64_t age = due__mono_us() - w->done_head->done_mono;
			if (age < 2000) {
				due__cond_wait_us(&w->done_cv, &w->mu,
						  2000 - age);
				continue;
			}
		}
		while (w->done_head && n < COMPLETE_BATCH) {
			batch[n++] = w->done_head;
			w->done_head = w->done_head->next;
		}
		if (!w->done_head)
			w->done_tail = NULL;
		if (n == 0) {
			if (w->threads_stop &&
			    (w->n_inflight == 0 || atomic_load(&w->abandon)))
				break;
			/* while completions stream in and the claimer folds
			   them, look every 2 ms unsignalled; else park until
			   signalled (no polling behind long-running handlers)
			 */
			if (atomic_load(&w->fold) &&
			    due__mono_us() - w->last_done_mono < 10000) {
				due__cond_wait_us(&w->done_cv, &w->mu, 2000);
			} else {
				w->completer_parked = true;
				pthread_cond_wait(&w->done_cv, &w->mu);
				w->completer_parked = false;
			}
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		commit_batch(&c, batch, n);
		pthread_mutex_lock(&w->mu);
		for (size_t i = 0; i < n; i++)
			due__retire_locked(w, batch[i]);
		due__wake(w);
	}
	pthread_mutex_unlock(&w->mu);
	due_close(c.hdb);
	return NULL;
}
