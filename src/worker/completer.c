/*
** completer.c - the completer thread: commits finished tries and frees
** their slots.
**
** Completer thread.
**   Does:      takes finished jobs off the done queue, up to COMPLETE_BATCH
**              at a time, and commits them: plain completions with one
**              due_complete_batch() (one transaction, each row fenced on
**              its own (id, attempt), each with its own outcome); fails and
**              completions with a transaction hook one by one.  Then it
**              retires each job (out of flight, its slot freed) and wakes
**              the claimer, which may claim into the freed slots.
**   Owns:      its own store connection; the jobs of the batch it commits.
**   Locks:     mu, to take a batch and to retire it; never across a store
**              call.
**   Blocks on: done_cv (no completions), and on the store: a failed commit
**              is retried with backoff (10 ms doubling to 2 s) until it
**              lands or shutdown gives up on the store (`abandon`); a
**              fenced commit is safe to retry.
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

#include "worker/worker_internal.h"

void due_count_outcome(due_worker *w, const due_job *j, bool ok, int outcome)
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
	due_wlog(w, quiet ? 2 : 1, "task %lld (%s) attempt %d: %s%s%s", (long long)j->task.id,
		 j->task.kind, j->task.attempt, name, j->error && !ok ? ": " : "",
		 j->error && !ok ? j->error : "");
}

/*
** Retry a store call while it fails with a store error (not a refusal),
** until shutdown gives up on the store.  A fenced commit is safe to retry.
*/
#define STORE_RETRY(w, db, call)                                               \
	do {                                                                   \
		int64_t delay_ = 10000;                                        \
		while ((rc = (call)) < 0 && rc != DUE_EINVAL &&                \
		       rc != DUE_ETOOBIG && !atomic_load(&(w)->abandon)) {     \
			atomic_fetch_add(&(w)->st.store_errors, 1);            \
			due_wlog((w), 1, "store error (%s), retrying: %s",         \
				 due_error_name(rc), due_error_last());            \
			due_bg_sleep((w), delay_);                                 \
			delay_ = delay_ * 2 > 2000000 ? 2000000 : delay_ * 2;  \
		}                                                              \
	} while (0)

/* Commit the fails and hooked completions one by one. */
static void commit_single(due_worker *w, due_db *db, due_job *j)
{
	int rc;

	if (j->rc != 0) {
		due_fail_outcome fo = DUE_FAIL_REJECTED_STALE;
		STORE_RETRY(w, db, due_fail(db, &fo, j->task.id, j->task.attempt,
					    j->error ? j->error : "handler failed"));
		if (rc == 0)
			due_count_outcome(w, j, false, (int)fo);
		return;
	}
	due_complete_outcome co = DUE_COMPLETE_REJECTED_STALE;
	STORE_RETRY(w, db, due_complete_tx(db, &co, j->task.id, j->task.attempt,
					   j->result, j->result_len, j->hook,
					   j->hook_payload));
	if (rc == 0)
		due_count_outcome(w, j, true, (int)co);
	else
		due_wlog(w, 1, "task %lld: completion failed: %s", (long long)j->task.id,
			 due_error_last());
}

/* Commit plain completions of a batch with one fenced batch call. */
static void commit_batch(due_worker *w, due_db *db, due_job **jobs, size_t n)
{
	due_completion items[COMPLETE_BATCH];
	size_t k = 0;
	int rc;

	for (size_t i = 0; i < n; i++) {
		due_job *j = jobs[i];
		if (j->rc != 0 || j->hook) {
			commit_single(w, db, j);
			continue;
		}
		items[k++] = (due_completion){j->task.id, j->task.attempt,
					      j->result, j->result_len, 0};
	}
	if (k == 0)
		return;
	STORE_RETRY(w, db, due_complete_batch(db, items, k));
	if (rc == DUE_ETOOBIG || rc == DUE_EINVAL) {
		/* one oversized result: commit them one by one */
		for (size_t i = 0; i < n; i++)
			if (jobs[i]->rc == 0 && !jobs[i]->hook) {
				if (due_complete(db, &items[0].outcome, jobs[i]->task.id,
						 jobs[i]->task.attempt, jobs[i]->result,
						 jobs[i]->result_len) < 0) {
					jobs[i]->rc = 1;
					due_job_set_error(jobs[i], due_error_last());
					commit_single(w, db, jobs[i]);
				} else {
					due_count_outcome(w, jobs[i], true, (int)items[0].outcome);
				}
			}
		return;
	}
	if (rc < 0) { /* only when shutdown gave up on the store */
		due_wlog(w, 1, "leaving %zu completion(s) uncommitted: %s", k,
			 due_error_last());
		return;
	}
	for (size_t i = 0, m = 0; i < n; i++)
		if (jobs[i]->rc == 0 && !jobs[i]->hook)
			due_count_outcome(w, jobs[i], true, (int)items[m++].outcome);
}

/* Drop a committed job from flight, free its slot.  mu held. */
void due_retire_locked(due_worker *w, due_job *j)
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
		due_job_free(j);
	pthread_cond_broadcast(&w->idle_cv);
}

void *due_completer_main(void *arg)
{
	due_worker *w = arg;
	due_db *db = due_connect_retry(w, "completer");
	due_job *batch[COMPLETE_BATCH];

	pthread_mutex_lock(&w->mu);
	for (;;) {
		size_t n = 0;
		/* while the claimer is draining it commits completions with its
		   next claim; take only those it left for 2 ms */
		if (w->done_head && atomic_load(&w->fold) && !w->threads_stop) {
			int64_t age = due_mono_us() - w->done_head->done_mono;
			if (age < 2000) {
				due_cond_wait_us(&w->done_cv, &w->mu, 2000 - age);
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
			   signalled (no polling behind long-running handlers) */
			if (atomic_load(&w->fold) &&
			    due_mono_us() - w->last_done_mono < 10000) {
				due_cond_wait_us(&w->done_cv, &w->mu, 2000);
			} else {
				w->completer_parked = true;
				pthread_cond_wait(&w->done_cv, &w->mu);
				w->completer_parked = false;
			}
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		if (!db)
			db = due_connect_retry(w, "completer");
		commit_batch(w, db, batch, n);
		pthread_mutex_lock(&w->mu);
		for (size_t i = 0; i < n; i++)
			due_retire_locked(w, batch[i]);
		due_wake(w);
	}
	pthread_mutex_unlock(&w->mu);
	due_close(db);
	return NULL;
}
