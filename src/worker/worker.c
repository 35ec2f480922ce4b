/*
** worker.c - the worker runtime's lifecycle: create a worker, register
** handlers, run it (start the threads, claim until stopped, drain, join),
** stop it, free it; its counters; immediate submits; the grace after a
** stop; and the small helpers every thread uses (clocks, waits, logging).
**
** The runtime claims due tasks, runs their handlers, keeps their leases
** and commits their outcomes, with one thread per concern:
**   claimer.c     claim rounds, polling, inline mode, reclaim (the thread
**                 that calls due_worker_run())
**   discovery.c   the timing wheel and notifications (in the claimer)
**   pool.c        jobs and the pool threads that run handlers
**   keeper.c      the local clock: the lease clock, time limits, the
**                 grace, unanswered store calls, summaries
**   renewer.c     lease renewals and counters reports, on a connection
**                 of its own
**   completer.c   commits finished tries and frees their slots
**   scheduler.c   periodic schedules' slots (with opts.cron)
**   outage.c      failed store calls: backoff, one log line per outage
**   exec.c        the command handler
** worker_internal.h holds the shared state, the thread list, the lock order
** and the invariants.
**
** due_worker_run() runs in the caller's thread, which becomes the claimer:
** it opens its store connection, starts the other threads, claims until
** due_worker_stop() (or, in once-mode, until nothing is due), then drains:
** in-flight tries get `grace` to finish and commit, then are told to stop,
** and if they still cannot be committed the store is abandoned to lease
** expiry.  Shutdown never hangs on the store.  due_worker_stop() only reads
** the clock, sets atomics and writes the eventfd: it is async-signal-safe.
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

#include "store/store.h"
#include "worker/worker_internal.h"

void due__wlog(due_worker *w, int level, const char *fmt, ...) DUE_PRINTF(3, 4);

void due__wlog(due_worker *w, int level, const char *fmt, ...)
{
	char ts[40], msg[1200];
	va_list ap;

	if (level > w->o.log_level)
		return;
	due_time_format(ts, sizeof(ts), due_time_now_host());
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	for (char *c = msg; *c; c++) /* one record, one line */
		if (*c == '\n' || *c == '\r' || *c == '\t')
			*c = ' ';
	fprintf(stderr, "%s due-work[%d] %s: %s\n", ts, (int)getpid(), w->owner,
		msg);
}

void due__wake(due_worker *w)
{
	uint64_t one = 1;
	ssize_t r = write(w->wake_fd, &one, sizeof(one));
	(void)r;
}

/* Wait on the eventfd up to timeout_us (<0: forever); drain it. */
void due__wait_wake(due_worker *w, int64_t timeout_us)
{
	struct pollfd p = {w->wake_fd, POLLIN, 0};
	int ms = timeout_us < 0 ? -1 : (int)((timeout_us + 999) / 1000);
	uint64_t v;

	if (poll(&p, 1, ms) > 0) {
		ssize_t r = read(w->wake_fd, &v, sizeof(v));
		(void)r;
	}
}

void due__cond_wait_us(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t us)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += us / 1000000;
	ts.tv_nsec += (us % 1000000) * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}

int due__cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return rc;
}

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
	if (opts->lease_us < 1000 || (opts->poll_us && opts->poll_us < 1000) ||
	    opts->grace_us < 0 || opts->horizon_us < 0 || opts->wheel_max < 0)
		return due__error_set(
		    DUE_EINVAL,
		    "invalid lease/poll/grace: lease and poll at least 1ms");
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
						    : 10000000;
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

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

void due_worker_stats_get(due_worker *w, due_worker_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->claimed = atomic_load(&w->st.claimed);
	out->done = atomic_load(&w->st.done);
	out->failed = atomic_load(&w->st.failed);
	out->dead = atomic_load(&w->st.dead);
	out->stale = atomic_load(&w->st.stale);
	out->cancelled = atomic_load(&w->st.cancelled);
	out->lease_lost = atomic_load(&w->st.lease_lost);
	out->lease_unconfirmed = atomic_load(&w->st.lease_unconfirmed);
	out->stalled_calls = atomic_load(&w->st.stalled_calls);
	out->claim_queries = atomic_load(&w->st.claim_queries);
	out->empty_claims = atomic_load(&w->st.empty_claims);
	out->reclaim_queries = atomic_load(&w->st.reclaim_queries);
	out->wheel_fired = atomic_load(&w->st.wheel_fired);
	out->refills = atomic_load(&w->st.refills);
	out->notifications = atomic_load(&w->st.notifications);
	out->pruned = atomic_load(&w->st.pruned);
	int64_t v[1024];
	pthread_mutex_lock(&w->mu);
	size_t n = w->n_late < 1024 ? w->n_late : 1024;
	memcpy(v, w->late, n * sizeof(v[0]));
	pthread_mutex_unlock(&w->mu);
	qsort(v, n, sizeof(v[0]), cmp_i64);
	out->lateness_p50_us = n ? v[(n - 1) / 2] : -1;
	out->lateness_p99_us = n ? v[(n - 1) * 99 / 100] : -1;
	out->lateness_max_us = n ? v[n - 1] : -1;
	out->store_errors = atomic_load(&w->st.store_errors);
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
