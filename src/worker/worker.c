/*
** worker.c - the worker runtime's lifecycle: create a worker, register
** handlers, run it (start the threads, claim until stopped, drain, join),
** stop it, free it; immediate submits.
**
** The runtime claims due tasks, runs their handlers, keeps their leases
** and commits their outcomes, with one thread per concern.  Its files,
** each using only those below it (scripts/layers checks it):
**   worker.c      this file: the lifecycle, on top of everything
**   pool.c        the pool threads that run handlers
**   keeper.c      the local clock: the lease clock, time limits, the
**                 grace, unanswered store calls, summaries
**   renewer.c     lease renewals and counters reports, on a connection
**                 of its own
**   scheduler.c   periodic schedules' slots (with opts.cron)
**   pruner.c      retention
**   discovery.c   the timing wheel and notifications (in the claimer)
**   claimer.c     claim rounds, polling, inline mode, reclaim (the thread
**                 that calls due_worker_run()), relay claims
**   completer.c   commits finished tries and frees their slots
**   job.c         jobs, the pools' queues, running one handler
**   outage.c      failed store calls: backoff, one log line per outage;
**                 turns at the shared connection
**   common.c      what every thread uses: logging, the eventfd, timed
**                 waits, the counters
** and the handlers a worker may be given: exec.c (the command handler)
** and pipe.c (the pipe handler) over spawn.c (starting a command under
** its guard).  worker_internal.h holds the shared state, the thread list,
** the lock order and the invariants.
**
** due_worker_run() runs in the caller's thread, which becomes the claimer:
** it opens its store connection, starts the other threads, claims until
** due_worker_stop() (or, in once-mode, until nothing is due), then drains:
** in-flight tries get `grace` to finish and commit, then are told to stop
** (keeper.c: due__grace_check_locked), and if they still cannot be
** committed the store is abandoned to lease expiry.  Shutdown never hangs
** on the store.  due_worker_stop() only reads the clock, sets atomics and
** writes the eventfd: it is async-signal-safe.
*/
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "worker/worker_internal.h"

/*
** Let in-flight tries finish within the grace; then tell them to stop
** (a command gets SIGTERM, SIGKILL after its kill grace); then give their
** commits one bound (abandon_check_locked).  So a stop takes at most
** grace + kill grace + that bound (+ a call under way, itself bounded),
** whatever the store does.
*/
static void drain(due_worker *w)
{
	long long zero = 0;

	atomic_compare_exchange_strong(&w->stop_mono, &zero, due__mono_us());
	pthread_mutex_lock(&w->mu);
	while (w->n_inflight > 0 || w->relays > 0) {
		int64_t now = due__mono_us();
		int64_t left = due__grace_check_locked(w, now) - now;
		if (atomic_load(&w->abandon))
			break;
		/* at most 100 ms: a second stop request (a signal handler
		   cannot signal the condition) must end the grace promptly */
		/* a fast pool's queue behind a job that turned out slow */
		int64_t stall = due__pools_unstall_locked(w, now);
		if (stall && stall - now < left)
			left = stall - now;
		due__cond_wait_us(&w->idle_cv, &w->mu,
				  left > 0 && left < 100000 ? left : 100000);
		if (w->o.mode == DUE_MODE_INLINE) {
			pthread_mutex_unlock(&w->mu);
			due__run_inline(w);
			pthread_mutex_lock(&w->mu);
		}
	}
	pthread_mutex_unlock(&w->mu);
}

static void join_all(due_worker *w)
{
	pthread_mutex_lock(&w->mu);
	w->threads_stop = true;
	for (size_t i = 0; i < w->n_pools; i++)
		pthread_cond_broadcast(&w->pools[i]->cv);
	pthread_cond_broadcast(&w->done_cv);
	pthread_cond_broadcast(&w->keep_cv);
	pthread_cond_broadcast(&w->renew_cv);
	pthread_cond_broadcast(&w->sched_cv);
	pthread_mutex_unlock(&w->mu);
	for (size_t i = 0; i < w->n_pools; i++)
		for (int k = 0; k < w->pools[i]->started; k++)
			pthread_join(w->pools[i]->threads[k], NULL);
	pthread_join(w->completer, NULL);
	pthread_join(w->keeper, NULL);
	pthread_join(w->renewer, NULL);
	if (w->sched_started)
		pthread_join(w->scheduler, NULL);
	if (w->pruner_started)
		pthread_join(w->pruner, NULL);
	/* tries left uncommitted when shutdown gave up on the store */
	while (w->inflight) {
		due_job *j = w->inflight;
		w->inflight = j->inext;
		due__job_free(j);
	}
	w->n_inflight = 0;
}

/* Stop and join whatever start_threads() managed to start. */
static void unwind_threads(due_worker *w, bool completer)
{
	pthread_mutex_lock(&w->mu);
	w->threads_stop = true;
	for (size_t i = 0; i < w->n_pools; i++)
		pthread_cond_broadcast(&w->pools[i]->cv);
	pthread_cond_broadcast(&w->done_cv);
	pthread_cond_broadcast(&w->keep_cv);
	pthread_mutex_unlock(&w->mu);
	for (size_t i = 0; i < w->n_pools; i++) {
		for (int k = 0; k < w->pools[i]->started; k++)
			pthread_join(w->pools[i]->threads[k], NULL);
		w->pools[i]->started = 0;
	}
	if (completer)
		pthread_join(w->completer, NULL);
	w->threads_stop = false;
}

static int start_threads(due_worker *w)
{
	int rc = due__pools_start(w);

	if (rc < 0) {
		unwind_threads(w, false);
		return rc;
	}
	if (pthread_create(&w->completer, NULL, due__completer_main, w) != 0) {
		unwind_threads(w, false);
		return due__error_set(DUE_ERROR,
				      "cannot start the completer thread");
	}
	if (pthread_create(&w->keeper, NULL, due__keeper_main, w) != 0) {
		unwind_threads(w, true);
		return due__error_set(DUE_ERROR,
				      "cannot start the lease keeper thread");
	}
	if (pthread_create(&w->renewer, NULL, due__renewer_main, w) != 0) {
		/* the keeper exits once threads_stop is set */
		unwind_threads(w, true);
		pthread_join(w->keeper, NULL);
		return due__error_set(DUE_ERROR,
				      "cannot start the lease renewer thread");
	}
	/* the scheduler is optional: without it the worker still works */
	if (w->o.cron && !w->o.once)
		w->sched_started = pthread_create(&w->scheduler, NULL,
						  due__scheduler_main, w) == 0;
	/* nor is retention: without it finished tasks just stay longer */
	if (w->o.retain_us != DUE_RETAIN_ALL && !w->o.once)
		w->pruner_started =
		    pthread_create(&w->pruner, NULL, due__pruner_main, w) == 0;
	return 0;
}

int due_worker_run(due_worker *w)
{
	due_db *db;
	struct sigaction sa;
	int rc;

	if (w->n_handlers == 0)
		return due__error_set(DUE_EINVAL,
				      "worker has no handler registered");
	if (atomic_exchange(&w->running, true))
		return due__error_set(DUE_EINVAL, "worker is already running");
	/* Writing a payload to a command that exited must not kill us. */
	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);
	/* the one connection every thread shares (worker_internal.h) */
	db = w->db = due__connect_retry(w, "claimer");
	if (!db) {
		atomic_store(&w->running, false);
		return 0;
	}
	if ((rc = start_threads(w)) < 0) {
		due_close(db);
		w->db = NULL;
		atomic_store(&w->running, false);
		return rc;
	}
	char keep[64] = "off";
	if (w->pruner_started)
		due_duration_format(keep, sizeof(keep), w->o.retain_us);
	due__wlog(
	    w, 1,
	    "started: %zu pool(s), shared concurrency %d, lease %lld ms "
	    "(a try is stopped once none of its renewals was confirmed for "
	    "%lld ms), store calls wait at most %lld ms (renewals %lld ms), "
	    "poll %lld ms, retention %s%s%s",
	    w->n_pools, w->pools[0]->size, (long long)w->o.lease_us / 1000,
	    (long long)(w->o.lease_us - due__lease_margin(w)) / 1000,
	    (long long)w->conn_timeout_us / 1000,
	    (long long)w->renew_timeout_us / 1000, (long long)w->poll_us / 1000,
	    keep,
	    w->o.mode == DUE_MODE_INLINE ? ", inline (one at a time)" : "",
	    w->o.once ? ", once" : "");
	if (w->o.lease_us < 1000000)
		due__wlog(w, 1,
			  "warning: a lease under 1 s leaves renewals %lld ms "
			  "to be answered: a store that is slower for a moment "
			  "stops tries (lease not confirmed) and uses up their "
			  "attempts; 1 s or more is safer",
			  (long long)w->renew_timeout_us / 1000);
	if (!due__try_wheel(w, db))
		due__claim_loop(w, db);
	atomic_store(&w->fold, false); /* the completer takes everything now */
	pthread_mutex_lock(&w->mu);
	pthread_cond_signal(&w->done_cv);
	pthread_mutex_unlock(&w->mu);
	drain(w);
	join_all(w);
	due_close(db);
	w->db = NULL;
	due__wlog(w, 1,
		  "stopped: claimed %lld, done %lld, failed %lld, dead %lld, "
		  "stale %lld, cancelled %lld, lease lost %lld (%lld not "
		  "confirmed in time)",
		  (long long)w->st.claimed, (long long)w->st.done,
		  (long long)w->st.failed, (long long)w->st.dead,
		  (long long)w->st.stale, (long long)w->st.cancelled,
		  (long long)w->st.lease_lost,
		  (long long)w->st.lease_unconfirmed);
	atomic_store(&w->running, false);
	return 0;
}

void due_worker_stop(due_worker *w)
{
	long long zero = 0;

	/* clock_gettime() is async-signal-safe */
	atomic_compare_exchange_strong(&w->stop_mono, &zero, due__mono_us());
	if (atomic_exchange(&w->stop, true))
		atomic_store(&w->force, true); /* asked twice: no more grace */
	due__wake(w);
}
int due_worker_new(due_worker **out, const due_worker_opts *opts)
{
	due_worker *w;
	char host[128];

	*out = NULL;
	if (!opts || !opts->url)
		return due__error_set(DUE_EINVAL,
				      "worker options need a store url");
	if (opts->concurrency < 1 || opts->concurrency > 1024)
		return due__error_set(DUE_EINVAL,
				      "invalid concurrency %d: 1..1024",
				      opts->concurrency);
	/* a lease the claims would refuse, every one of them, fails here */
	if (due__validate_lease(opts->lease_us) < 0)
		return DUE_EINVAL;
	if ((opts->poll_us && opts->poll_us < 1000) || opts->grace_us < 0 ||
	    opts->horizon_us < 0 || opts->wheel_max < 0)
		return due__error_set(
		    DUE_EINVAL,
		    "invalid poll/grace: poll at least 1ms, grace at least 0");
	if (opts->owner && due__validate_owner(opts->owner) < 0)
		return DUE_EINVAL;
	if (!(w = calloc(1, sizeof(*w))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	/* a caller built against version 1 has no retain_us: read no
	   further than its struct, the rest keeps its default */
	memcpy(&w->o, opts,
	       opts->version >= 2 ? sizeof(*opts)
				  : offsetof(due_worker_opts, retain_us));
	if (w->o.retain_us < 0 && w->o.retain_us != DUE_RETAIN_ALL) {
		long long bad = (long long)w->o.retain_us;
		free(w);
		return due__error_set(DUE_EINVAL,
				      "invalid retention %lld us: >= 0, or "
				      "DUE_RETAIN_ALL to keep everything",
				      bad);
	}
	w->claim_outage.who = "claimer";
	w->reclaim_outage.who = "claimer";
	/*
	** The bound of every wait of the worker's connections (issue 35):
	** a third of the lease, so a hung call returns and is made again
	** while the lease can still be kept; the renewals' at least 100 ms,
	** the others' at least 1 s (a claim or a commit that waits a little
	** longer on a loaded store is no fault).  The URL's timeout= (default
	** 10 s) lowers both.
	*/
	w->renew_timeout_us =
	    opts->lease_us / 3 < 100000 ? 100000 : opts->lease_us / 3;
	w->conn_timeout_us =
	    w->renew_timeout_us < 1000000 ? 1000000 : w->renew_timeout_us;
	w->poll_us = opts->poll_us		    ? opts->poll_us
		     : opts->no_wheel || opts->once ? 1000000
						    : DUE__SAFETY_POLL_US;
	if (!w->o.horizon_us)
		w->o.horizon_us = 60000000;
	if (!w->o.wheel_max)
		w->o.wheel_max = 100000;
	if (!w->o.retain_us)
		w->o.retain_us = DUE_RETAIN_DEFAULT_US;
	w->url = due__strdup_n(opts->url, strlen(opts->url));
	if (opts->owner) {
		w->owner = due__strdup_n(opts->owner, strlen(opts->owner));
	} else {
		char buf[200];
		if (gethostname(host, sizeof(host)) != 0)
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
		snprintf(buf, sizeof(buf), "%s:%d", host, (int)getpid());
		w->owner = due__strdup_n(buf, strlen(buf));
	}
	w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	w->pools = calloc(1, sizeof(*w->pools));
	if (w->pools)
		w->pools[0] =
		    due__pool_new(NULL, opts->mode == DUE_MODE_INLINE
					    ? 1 /* the claimer runs it */
					    : opts->concurrency);
	w->n_pools = 1;
	if (!w->url || !w->owner || w->wake_fd < 0 || !w->pools ||
	    !w->pools[0] || pthread_mutex_init(&w->mu, NULL) != 0 ||
	    pthread_mutex_init(&w->db_mu, NULL) != 0 ||
	    pthread_mutex_init(&w->db_call.mu, NULL) != 0 ||
	    pthread_mutex_init(&w->renew_call.mu, NULL) != 0 ||
	    pthread_cond_init(&w->db_cv, NULL) != 0 ||
	    due__cond_init(&w->done_cv) || due__cond_init(&w->keep_cv) ||
	    due__cond_init(&w->renew_cv) || due__cond_init(&w->idle_cv) ||
	    due__cond_init(&w->sched_cv)) {
		due_worker_free(w);
		return due__error_set(DUE_ENOMEM, "cannot create worker");
	}
	*out = w;
	return 0;
}

int due_worker_register(due_worker *w, const char *kind, due_handler_fn fn,
			void *payload, int pool_size)
{
	handler *h;
	pool *p = w->pools[0];
	int rc;

	if (atomic_load(&w->running))
		return due__error_set(DUE_EINVAL,
				      "register handlers before running");
	if (!fn || pool_size < 0 || pool_size > 1024)
		return due__error_set(DUE_EINVAL,
				      "invalid handler or pool size");
	if (kind && (rc = due__validate_kind(kind)) < 0)
		return rc;
	if (!kind && pool_size > 0)
		return due__error_set(
		    DUE_EINVAL,
		    "an isolated pool needs a kind (the catch-all runs in the "
		    "shared pool)");
	for (size_t i = 0; i < w->n_handlers; i++)
		if ((!kind && !w->handlers[i].kind) ||
		    (kind && w->handlers[i].kind &&
		     !strcmp(kind, w->handlers[i].kind)))
			return due__error_set(
			    DUE_EINVAL, "handler for '%s' registered twice",
			    kind ? kind : "(any kind)");
	if (pool_size > 0) {
		pool **np = realloc(w->pools, (w->n_pools + 1) * sizeof(*np));
		if (!np)
			return due__error_set(DUE_ENOMEM, "out of memory");
		w->pools = np;
		if (!(p = due__pool_new(kind, pool_size)))
			return due__error_set(DUE_ENOMEM, "out of memory");
		w->pools[w->n_pools++] = p;
	}
	h = realloc(w->handlers, (w->n_handlers + 1) * sizeof(*h));
	if (!h)
		return due__error_set(DUE_ENOMEM, "out of memory");
	w->handlers = h;
	h[w->n_handlers++] = (handler){
	    kind ? due__strdup_n(kind, strlen(kind)) : NULL, fn, payload, p};
	return 0;
}

void due_worker_free(due_worker *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n_handlers; i++)
		free(w->handlers[i].kind);
	free(w->handlers);
	for (size_t i = 0; w->pools && i < w->n_pools; i++) {
		if (!w->pools[i])
			continue;
		pthread_cond_destroy(&w->pools[i]->cv);
		free(w->pools[i]->kind);
		free(w->pools[i]->threads);
		free(w->pools[i]);
	}
	free(w->pools);
	if (w->wake_fd >= 0)
		close(w->wake_fd);
	free(w->url);
	free(w->owner);
	free(w);
}

/* ------------------------------------------------------------------ */
/* Immediate mode                                                      */
/* ------------------------------------------------------------------ */

/* The pool that runs `kind`: its isolated pool or the shared one. */
static pool *pool_of(due_worker *w, const char *kind)
{
	for (size_t i = 1; i < w->n_pools; i++)
		if (strcmp(w->pools[i]->kind, kind) == 0)
			return w->pools[i];
	return w->pools[0];
}

int due_worker_submit(due_worker *w, due_db *db, due_submitted *out,
		      const char *kind, const void *payload, size_t len,
		      const due_schedule_opts *opts)
{
	due_task *t = NULL;
	pool *p;
	int rc;

	if ((rc = due_schedule(db, out, kind, payload, len, opts)) < 0)
		return rc;
	if (out->existed || !atomic_load(&w->running) ||
	    atomic_load(&w->stop) ||
	    (opts && (opts->delay_us > 0 || opts->at > 0)))
		return 0; /* not due now: discovery will find it */
	p = pool_of(w, kind);
	pthread_mutex_lock(&w->mu);
	bool slot = p->busy < p->size;
	if (slot)
		p->busy++;
	pthread_mutex_unlock(&w->mu);
	if (!slot)
		return 0;
	int64_t sent = due__mono_us(); /* the lease clock's start */
	rc = due_claim_id(db, &t, out->id, w->owner, w->o.lease_us);
	pthread_mutex_lock(&w->mu);
	if (rc < 0) {
		p->busy--; /* taken by another worker already, or a store error
			    */
	} else {
		due_job *j = due__job_new_locked(w, p, t, sent);
		if (j)
			due__pool_enqueue_locked(p, j, true);
		else
			p->busy--;
		atomic_fetch_add(&w->st.claimed, 1);
	}
	pthread_mutex_unlock(&w->mu);
	due_task_free(t);
	if (w->o.mode == DUE_MODE_INLINE)
		due__wake(w);
	return 0;
}
