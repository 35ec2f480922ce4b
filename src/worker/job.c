/*
** job.c - jobs, the pools' queues, and running one handler.
**
** A job is a claimed task on its way through the worker.  The claimer (or
** due_worker_submit()) makes it with due__job_new_locked(), which puts it in
** flight, and queues it on its pool; a pool thread (pool.c) takes it and
** runs the handler with no lock held (due__run_job), then queues it for the
** completer, which commits its outcome and retires it.  The due_job_*
** accessors are what a handler sees of it.  Any thread; the _locked
** functions with mu held.  Nothing here calls a thread's file: the pool
** threads (pool.c), the claimer and the keeper call in.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/worker_internal.h"

const due_task *due_job_task(const due_job *job) { return &job->task; }

const char *due_job_owner(const due_job *job) { return job->w->owner; }

const char *due_job_parent_results(const due_job *job) { return job->parents; }

bool due__job_stop(due_job *j, int why)
{
	int none = DUE_STOP_NONE;
	atomic_compare_exchange_strong(&j->stop_why, &none, why);
	return !atomic_exchange(&j->lost, true);
}

int due__job_stop_why(const due_job *j)
{
	return atomic_load(&((due_job *)j)->stop_why);
}

const char *due__stop_reason_name(int why)
{
	switch (why) {
	case DUE_STOP_LEASE_LOST: return "lease lost";
	case DUE_STOP_CANCEL: return "cancel requested";
	case DUE_STOP_SHUTDOWN: return "worker shutdown";
	case DUE_STOP_TIMEOUT: return "time limit";
	case DUE_STOP_UNCONFIRMED: return "lease not confirmed";
	default: return "stopped";
	}
}

/*
** The lease clock read by the thread that asks (a handler, its slot's
** supervision loop), not only by the keeper: once lease - margin has
** passed since the latest confirmed send, the try is stopped here as the
** keeper would stop it (DUE_STOP_UNCONFIRMED, kill_by at lease - 2/3
** margin; the keeper still logs and counts it).  A keeper held back (mu,
** a log line blocked on a slow disk, a starved thread) must not hold back
** the SIGKILL that has to come before the store can hand the task on:
** test_store_stall once saw attempt-1 handlers alive beside attempt 2.
*/
bool due__job_lease_check(due_job *j)
{
	if (atomic_load(&j->lost))
		return false;
	if (!j->w || atomic_load(&j->finished))
		return true;
	int64_t sent = atomic_load(&j->confirmed_mono);
	if (due__mono_us() < due__lease_stop_at(j->w, sent))
		return true;
	due__job_set_kill_by(j, due__lease_kill_at(j->w, sent));
	due__job_stop(j, DUE_STOP_UNCONFIRMED);
	return false;
}

void due__job_log_unconfirmed(due_worker *w, const due_job *j, int64_t now,
			      bool after)
{
	int64_t sent = atomic_load(&((due_job *)j)->confirmed_mono);
	int64_t late = now - due__lease_stop_at(w, sent);
	char why[64] = "";

	if (after) {
		due__wlog(w, 1,
			  "task %lld (%s) attempt %d: lease not confirmed "
			  "for %.1f s of its %.1f s (renewals unanswered, or "
			  "this worker stopped or starved); its handler was "
			  "stopped before the store could hand the task to "
			  "another worker",
			  (long long)j->task.id, j->task.kind, j->task.attempt,
			  (double)(now - sent) / 1e6,
			  (double)w->o.lease_us / 1e6);
		return;
	}
	if (late > 100000)
		snprintf(why, sizeof(why), " (%.0f ms past its time)",
			 (double)late / 1000.0);
	due__wlog(w, 1,
		  "task %lld (%s) attempt %d: lease not confirmed "
		  "for %.1f s of its %.1f s (renewals unanswered)%s; "
		  "stopping its handler before the store can hand "
		  "the task to another worker",
		  (long long)j->task.id, j->task.kind, j->task.attempt,
		  (double)(now - sent) / 1e6, (double)w->o.lease_us / 1e6, why);
}

/*
** A try the lease clock stopped that the keeper did not see before its
** handler returned (the keeper skips finished tries): a worker stopped
** (SIGSTOP) whose command its guard killed meanwhile, resumed, sees the
** command's end first.  Logged and counted here, once: `unconfirmed`
** under mu says who did.
*/
static void unconfirmed_seen(due_worker *w, due_job *j)
{
	bool mine = false;

	if (due__job_stop_why(j) != DUE_STOP_UNCONFIRMED)
		return;
	pthread_mutex_lock(&w->mu);
	if (!j->unconfirmed) {
		j->unconfirmed = mine = true;
		atomic_fetch_add(&w->st.lease_lost, 1);
		atomic_fetch_add(&w->st.lease_unconfirmed, 1);
	}
	pthread_mutex_unlock(&w->mu);
	if (mine)
		due__job_log_unconfirmed(w, j, due__mono_us(), true);
}

bool due_job_lease_held(const due_job *job)
{
	return due__job_lease_check((due_job *)job);
}

void due__job_set_kill_by(due_job *j, int64_t at)
{
	long long none = 0;
	atomic_compare_exchange_strong(&j->kill_by, &none, at);
}

int64_t due__job_kill_by(const due_job *j)
{
	return atomic_load(&((due_job *)j)->kill_by);
}

int64_t due__job_guard_kill_at(const due_job *j)
{
	due_job *m = (due_job *)j;

	if (!j->w || atomic_load(&m->finished))
		return 0;
	return due__lease_kill_at(j->w, atomic_load(&m->confirmed_mono));
}

int due_job_set_result(due_job *job, const void *data, size_t len)
{
	unsigned char *p = malloc(len + 1);
	if (!p)
		return due__error_set(DUE_ENOMEM, "out of memory");
	if (len)
		memcpy(p, data, len);
	p[len] = '\0';
	free(job->result);
	job->result = p;
	job->result_len = len;
	return 0;
}

void due_job_set_error(due_job *job, const char *text)
{
	size_t n = text ? strlen(text) : 0;
	if (n > MAX_ERROR_TEXT)
		text += n - MAX_ERROR_TEXT, n = MAX_ERROR_TEXT;
	free(job->error);
	job->error = due__strdup_n(text ? text : "", n);
}

void due_job_set_tx_hook(due_job *job, due_tx_hook hook, void *payload)
{
	job->hook = hook;
	job->hook_payload = payload;
}

void due__job_free(due_job *j)
{
	due__task_clear(&j->task);
	free(j->result);
	free(j->error);
	free(j->parents);
	free(j);
}

/* The handler for a kind: its own, else the catch-all, else NULL. */
static const handler *handler_for(const due_worker *w, const char *kind)
{
	const handler *any = NULL;
	for (size_t i = 0; i < w->n_handlers; i++) {
		if (!w->handlers[i].kind)
			any = &w->handlers[i];
		else if (strcmp(w->handlers[i].kind, kind) == 0)
			return &w->handlers[i];
	}
	return any;
}

/*
** Turn a claimed task into a job (taking ownership of the task's fields)
** and register it in flight.  Called with mu held.
*/
due_job *due__job_new_locked(due_worker *w, pool *p, due_task *t, int64_t sent)
{
	due_job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->task = *t;
	memset(t, 0, sizeof(*t));
	j->w = w;
	j->pool = p;
	j->h = handler_for(w, j->task.kind);
	/* the lease runs from the claim's send: the lease clock's start */
	atomic_store(&j->confirmed_mono, sent);
	j->renew_at = sent + w->o.lease_us / 3;
	/* the keeper may be asleep for up to a second: wake it to watch
	   this try's time limit (from the claim's return) from now; its
	   lease needs no wake-up: the keeper and the renewer sleep at most
	   lease/12 */
	if (j->task.timeout_us > 0) {
		j->deadline_mono = due__mono_us() + j->task.timeout_us;
		pthread_cond_signal(&w->keep_cv);
	}
	j->refs = 1;
	j->inext = w->inflight;
	if (w->inflight)
		w->inflight->iprev = j;
	w->inflight = j;
	w->n_inflight++;
	return j;
}

/*
** Fast pools.  Waking a thread costs a futex call and a context switch
** (tens of microseconds on a virtual machine), more than a handler of a
** few microseconds takes to run: a batch of such jobs is cheaper run one
** after the other by the one thread the claim woke.  A pool is fast while
** the moving average of its handlers' run time (run_us, over about the
** last four runs) is below POOL_FAST_US; it starts slow.  A fast pool
** does not pass the wake-up on (the chain below), and its threads wake
** the draining claimer once its queue is empty rather than after every
** job.  A job that turns out slow must not hold the rest of the queue
** back: a job queued POOL_STALL_US ago and still not started means the
** pool is not fast after all (due__pools_unstall_locked(), called by the
** claimer before it waits and by the keeper): the pool is marked slow and
** its threads are woken, so the jobs behind a slow one start within about
** a millisecond.  The same check covers the batches a fast pool's thread
** claims for itself (relay claims, claimer.c), which it queues without
** waking the pool's other threads.
*/
#define POOL_FAST_US 50
#define POOL_STALL_US 1000

bool due__pool_fast_locked(const pool *p) { return p->run_us < POOL_FAST_US; }

/*
** Wake one waiting pool thread for the queued jobs, unless one is already
** on its way: the woken thread wakes the next if jobs are left when it
** takes one (a chain), so a claim of 16 short jobs wakes as many threads
** as the jobs keep busy, not 16 (a context switch each), and a claim of
** 16 long ones still starts all 16 within 16 wake-ups.  mu held.
*/
void due__pool_wake_locked(pool *p)
{
	if (p->head && p->signaled == 0 && p->waiting > 0) {
		p->signaled = 1;
		pthread_cond_signal(&p->cv);
	}
}

/*
** The stall check: wake the threads of every pool whose oldest queued job
** has waited POOL_STALL_US, marking the pool slow.  Returns the monotonic
** time at which to check again (a job is queued), 0 when no pool has a
** queued job.  mu held.
*/
int64_t due__pools_unstall_locked(due_worker *w, int64_t now)
{
	int64_t again = 0;

	for (size_t i = 0; i < w->n_pools; i++) {
		pool *p = w->pools[i];
		/* none waiting: a running thread takes the job when its
		   handler returns, and there is no thread to wake (the
		   shared pool in inline mode has none: the claimer runs it) */
		if (!p->head || p->waiting == 0)
			continue;
		int64_t at = p->head->queued_mono + POOL_STALL_US;
		if (now >= at) {
			if (p->run_us < POOL_STALL_US)
				p->run_us = POOL_STALL_US;
			due__pool_wake_locked(p);
			at = now + POOL_STALL_US;
		}
		if (!again || at < again)
			again = at;
	}
	return again;
}

int64_t due__pools_unstall(due_worker *w, int64_t now)
{
	pthread_mutex_lock(&w->mu);
	int64_t again = due__pools_unstall_locked(w, now);
	pthread_mutex_unlock(&w->mu);
	return again;
}

/*
** Queue a job on its pool; wake a waiting thread for it unless the caller
** is the pool's own thread that will run it (a relay claim).  mu held.
*/
void due__pool_enqueue_locked(pool *p, due_job *j, bool wake)
{
	j->next = NULL;
	j->queued_mono = due__mono_us();
	if (p->tail)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	if (wake)
		due__pool_wake_locked(p);
}

due_job *due__pool_dequeue_locked(pool *p)
{
	due_job *j = p->head;
	if (j) {
		p->head = j->next;
		if (!p->head)
			p->tail = NULL;
	}
	return j;
}

/*
** A try the keeper stopped at its time limit fails with "timed out after
** DUR", whatever its handler returned: its result is not committed.
** Returns true when the try timed out.  The keeper and this thread race
** for `end`; the first to move it decides.
*/
static bool settle_timeout(due_job *j)
{
	int running = DUE_END_RUNNING;
	char dur[48], msg[80];

	if (atomic_compare_exchange_strong(&j->end, &running, DUE_END_RETURNED))
		return false;
	due_duration_format(dur, sizeof(dur), j->task.timeout_us);
	snprintf(msg, sizeof(msg), "timed out after %s", dur);
	due_job_set_error(j, msg);
	free(j->result);
	j->result = NULL;
	j->result_len = 0;
	j->hook = NULL;
	j->rc = 1;
	return true;
}

/*
** Run the handler of a job; then queue it for the completer.  Returns
** true when the draining claimer should hear of it (it folds completions
** into its next claim): the caller wakes it, or claims in its stead (a
** relay, claimer.c).  The job may be gone once this returns.
*/
/*
** A task added with run-after gets its parents' results before its
** handler runs (due_job_parent_results), read through the shared
** connection.  False when they cannot be read: the try fails with why
** (and is retried as any failure), rather than run without them.
*/
static bool parents_read(due_worker *w, due_job *j)
{
	char msg[600];
	int rc;

	if (j->task.after_n <= 0 || j->parents)
		return true;
	rc =
	    DUE_DB_CALL(w, due_parent_results(w->db, &j->parents, &j->task, 0));
	if (rc == 0)
		return true;
	snprintf(msg, sizeof(msg), "reading the parents' results failed: %s",
		 due_error_last());
	due_job_set_error(j, msg);
	return false;
}

bool due__run_job(due_worker *w, due_job *j)
{
	int64_t t0 = due__mono_us();

	if (!j->h) {
		j->rc = 1;
		due_job_set_error(j, "no handler for this kind in this worker");
	} else if (!parents_read(w, j)) {
		j->rc = 1;
	} else {
		j->rc = j->h->fn(j, j->h->payload);
	}
	bool timed_out = settle_timeout(j);
	unconfirmed_seen(w, j);
	j->done_mono = due__mono_us();
	due__wlog(w, 2, "task %lld (%s) attempt %d: handler %s in %.1f ms",
		  (long long)j->task.id, j->task.kind, j->task.attempt,
		  timed_out    ? "timed out"
		  : j->rc == 0 ? "ok"
			       : "failed",
		  (double)(j->done_mono - t0) / 1000.0);
	atomic_store(&j->finished, true);
	pthread_mutex_lock(&w->mu);
	pool *p = j->pool;
	p->run_us += (j->done_mono - t0 - p->run_us) / 4;
	j->next = NULL;
	if (w->done_tail)
		w->done_tail->next = j;
	else
		w->done_head = j;
	w->done_tail = j;
	/* while the claimer drains, it folds a success into its next claim
	   and the completer only sweeps up leftovers on its own clock: waking
	   it for every completion would cost a context switch per task.  What
	   the claimer does not fold (failures, hooks) is the completer's, and
	   a parked completer (no completions for a while) is always woken.
	   The claimer is woken for every completion of a slow pool, and for
	   a fast pool once its queue is empty: the thread that ran this job
	   runs the rest first. */
	bool fold = atomic_load(&w->fold);
	bool wake = fold && (!due__pool_fast_locked(p) || !p->head);
	w->last_done_mono = j->done_mono;
	if (!fold || j->rc != 0 || j->hook || w->completer_parked)
		pthread_cond_signal(&w->done_cv);
	pthread_mutex_unlock(&w->mu);
	return wake;
}

pool *due__pool_new(const char *kind, int size)
{
	pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->kind = kind ? due__strdup_n(kind, strlen(kind)) : NULL;
	p->size = size;
	p->run_us = POOL_STALL_US; /* slow until handlers show otherwise */
	p->threads = calloc((size_t)size, sizeof(pthread_t));
	if (due__cond_init(&p->cv) != 0 || !p->threads || (kind && !p->kind)) {
		free(p->kind);
		free(p->threads);
		free(p);
		return NULL;
	}
	return p;
}
