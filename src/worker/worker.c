/*
** worker.c - the worker runtime: claim due tasks, run handlers, keep their
** leases, commit their outcomes.
**
** Threads, each with its own store connection (a due_db is single-thread):
**
**   claimer     claims up to the free slots of each pool, hands the tasks
**               to the pools (or runs them itself in inline mode), reclaims
**               expired leases, and sleeps on an eventfd between polls;
**   pool N      one thread per slot, runs handlers;
**   keeper      renews the lease of every running try every lease/3 and
**               raises the job's `lost` flag when the store says the lease
**               is gone or a cancel was requested;
**   completer   commits finished tries in batches (due_complete_batch:
**               each row fenced on its own) and frees their slots.
**
** Invariants.
**  - A pool's `busy` counts its claimed, not yet committed tries; the
**    claimer never asks for more than size - busy, so no task waits in
**    memory holding a lease (CONTRACT §5).
**  - A job is freed only by the completer, under `mu`, once its refcount
**    (held by the keeper while it renews outside the lock) is zero.
**  - The worker's own view of a lease is advisory.  Whether a completion
**    lands is decided by the store's fenced statement, always.
**
** Lock order: `mu` is the only lock; no store call is made while holding it.
** due_worker_stop() only touches an atomic flag and the eventfd, so it can
** be called from a signal handler.
*/
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "store/store.h"
#include "wheel/wheel.h"
#include "worker/worker_internal.h"

#define MAX_ERROR_TEXT 4096
#define COMPLETE_BATCH 256

typedef struct handler {
	char *kind; /* NULL: the catch-all */
	due_handler_fn fn;
	void *payload;
	struct pool *pool;
} handler;

typedef struct pool {
	char *kind;       /* isolated pool's kind; NULL for the shared pool */
	int size;
	int busy;         /* claimed, not yet committed */
	due_job *head, *tail; /* ready to run */
	pthread_cond_t cv;
	pthread_t *threads;
	int started;
} pool;

struct due_job {
	due_task task;
	due_worker *w;
	pool *pool;
	const handler *h;
	atomic_bool lost;
	int64_t renewed_mono;   /* last successful claim/extend, monotonic us */
	int refs;               /* under mu */
	unsigned char *result;
	size_t result_len;
	char *error;
	int rc;
	due_tx_hook hook;
	void *hook_payload;
	int64_t done_mono;      /* when the handler returned */
	due_job *next;          /* pool queue or completion queue */
	due_job *iprev, *inext; /* in-flight list */
};

struct due_worker {
	due_worker_opts o;
	char *url, *owner;
	handler *handlers;
	size_t n_handlers;
	pool **pools;           /* [0] is the shared pool */
	size_t n_pools;
	pthread_mutex_t mu;
	pthread_cond_t done_cv, keep_cv, idle_cv;
	due_job *inflight;      /* every claimed, uncommitted job */
	int n_inflight;
	due_job *done_head, *done_tail;
	int wake_fd;
	atomic_bool stop, draining, running;
	atomic_bool fold;       /* claimer is draining: it commits completions
				   together with its next claim */
	int64_t last_done_mono; /* the latest handler finish (mu) */
	bool completer_parked;  /* completer waits for a signal (mu) */
	atomic_bool abandon;    /* shutdown gave up on the store: stop retrying,
				   leave uncommitted tries to lease expiry */
	bool threads_stop;      /* under mu: keeper and completer may exit */
	pthread_t keeper, completer, scheduler;
	bool sched_started;
	pthread_cond_t sched_cv;
	struct {
		atomic_llong claimed, done, failed, dead, stale, cancelled,
			lease_lost, claim_queries, empty_claims, reclaim_queries,
			store_errors, wheel_fired, refills, notifications;
	} st;
	int64_t late[1024];    /* lateness of recent claims (us), ring; under mu */
	size_t n_late;
	int64_t poll_us;       /* effective poll (or safety poll) interval */
};

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

int64_t due_mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void wlog(due_worker *w, int level, const char *fmt, ...)
	DUE_PRINTF(3, 4);

static void wlog(due_worker *w, int level, const char *fmt, ...)
{
	char ts[40], msg[1200];
	va_list ap;

	if (level > w->o.log_level)
		return;
	due_time_format(ts, sizeof(ts), due_time_now_host());
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s due-work[%d] %s: %s\n", ts, (int)getpid(), w->owner,
		msg);
}

static void wake(due_worker *w)
{
	uint64_t one = 1;
	ssize_t r = write(w->wake_fd, &one, sizeof(one));
	(void)r;
}

/* Wait on the eventfd up to timeout_us (<0: forever); drain it. */
static void wait_wake(due_worker *w, int64_t timeout_us)
{
	struct pollfd p = {w->wake_fd, POLLIN, 0};
	int ms = timeout_us < 0 ? -1 : (int)((timeout_us + 999) / 1000);
	uint64_t v;

	if (poll(&p, 1, ms) > 0) {
		ssize_t r = read(w->wake_fd, &v, sizeof(v));
		(void)r;
	}
}

static void cond_wait_us(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t us)
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

static int cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return rc;
}

/*
** Open a store connection for a worker thread, retrying with backoff
** until it works or the worker stops.  NULL only when stopping.
*/
/*
** Back-off sleep for the threads other than the claimer.  It must not
** touch the eventfd, whose wake-ups belong to the claimer; it ends early
** when shutdown gives up on the store.
*/
static void bg_sleep(due_worker *w, int64_t us)
{
	int64_t end = due_mono_us() + us;

	while (!atomic_load(&w->abandon)) {
		int64_t left = end - due_mono_us();
		if (left <= 0)
			return;
		struct timespec ts = {0, (left > 50000 ? 50000 : left) * 1000};
		nanosleep(&ts, NULL);
	}
}

/*
** Open a store connection for a worker thread, retrying with backoff.
** NULL when the claimer is asked to stop, or once shutdown has given up
** on the store (other threads).
*/
static due_db *connect_retry(due_worker *w, const char *who)
{
	bool claimer = strcmp(who, "claimer") == 0;
	int64_t delay = 10000;

	for (;;) {
		due_db *db = NULL;
		if (due_open(&db, w->url, NULL) == 0)
			return db;
		atomic_fetch_add(&w->st.store_errors, 1);
		wlog(w, 1, "%s: cannot open store: %s (retrying)", who,
		     due_error_last());
		due_close(db);
		if ((claimer && atomic_load(&w->stop)) || atomic_load(&w->abandon))
			return NULL;
		if (claimer)
			wait_wake(w, delay);
		else
			bg_sleep(w, delay);
		delay = delay * 2 > 2000000 ? 2000000 : delay * 2;
	}
}

/* ------------------------------------------------------------------ */
/* Jobs                                                                */
/* ------------------------------------------------------------------ */

const due_task *due_job_task(const due_job *job)
{
	return &job->task;
}

const char *due_job_owner(const due_job *job)
{
	return job->w->owner;
}

bool due_job_lease_held(const due_job *job)
{
	return !atomic_load(&job->lost);
}

int due_job_set_result(due_job *job, const void *data, size_t len)
{
	unsigned char *p = malloc(len + 1);
	if (!p)
		return due_error_set(DUE_ENOMEM, "out of memory");
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
	job->error = due_strdup_n(text ? text : "", n);
}

void due_job_set_tx_hook(due_job *job, due_tx_hook hook, void *payload)
{
	job->hook = hook;
	job->hook_payload = payload;
}

static void job_free(due_job *j)
{
	free(j->task.kind);
	free(j->task.payload);
	free(j->task.lease_owner);
	free(j->task.key);
	free(j->task.result);
	free(j->task.last_error);
	free(j->result);
	free(j->error);
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
static due_job *job_new_locked(due_worker *w, pool *p, due_task *t)
{
	due_job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->task = *t;
	memset(t, 0, sizeof(*t));
	j->w = w;
	j->pool = p;
	j->h = handler_for(w, j->task.kind);
	j->renewed_mono = due_mono_us();
	j->refs = 1;
	j->inext = w->inflight;
	if (w->inflight)
		w->inflight->iprev = j;
	w->inflight = j;
	w->n_inflight++;
	return j;
}

static void enqueue_locked(pool *p, due_job *j)
{
	j->next = NULL;
	if (p->tail)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	pthread_cond_signal(&p->cv);
}

static due_job *dequeue_locked(pool *p)
{
	due_job *j = p->head;
	if (j) {
		p->head = j->next;
		if (!p->head)
			p->tail = NULL;
	}
	return j;
}

/* Run the handler of a job; then queue it for the completer. */
static void run_job(due_worker *w, due_job *j)
{
	int64_t t0 = due_mono_us();

	if (!j->h) {
		j->rc = 1;
		due_job_set_error(j, "no handler for this kind in this worker");
	} else {
		j->rc = j->h->fn(j, j->h->payload);
	}
	wlog(w, 2, "task %lld (%s) attempt %d: handler %s in %.1f ms",
	     (long long)j->task.id, j->task.kind, j->task.attempt,
	     j->rc == 0 ? "ok" : "failed", (double)(due_mono_us() - t0) / 1000.0);
	j->done_mono = due_mono_us();
	pthread_mutex_lock(&w->mu);
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
	   a parked completer (no completions for a while) is always woken. */
	bool fold = atomic_load(&w->fold);
	w->last_done_mono = j->done_mono;
	if (!fold || j->rc != 0 || j->hook || w->completer_parked)
		pthread_cond_signal(&w->done_cv);
	pthread_mutex_unlock(&w->mu);
	if (fold)
		wake(w);
}

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
		due_job *j = dequeue_locked(p);
		if (!j) {
			if (w->threads_stop)
				break;
			pthread_cond_wait(&p->cv, &w->mu);
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		run_job(w, j);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

static pool *pool_new(const char *kind, int size)
{
	pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->kind = kind ? due_strdup_n(kind, strlen(kind)) : NULL;
	p->size = size;
	p->threads = calloc((size_t)size, sizeof(pthread_t));
	if (cond_init(&p->cv) != 0 || !p->threads || (kind && !p->kind)) {
		free(p->kind);
		free(p->threads);
		free(p);
		return NULL;
	}
	return p;
}

static int pools_start(due_worker *w)
{
	for (size_t i = 0; i < w->n_pools; i++) {
		pool *p = w->pools[i];
		if (i == 0 && w->o.mode == DUE_MODE_INLINE)
			continue; /* the claimer runs the shared pool */
		for (int k = 0; k < p->size; k++) {
			pool_arg *a = malloc(sizeof(*a));
			if (!a)
				return due_error_set(DUE_ENOMEM, "out of memory");
			*a = (pool_arg){w, p};
			if (pthread_create(&p->threads[k], NULL, pool_thread, a) != 0) {
				free(a);
				return due_error_set(DUE_ERROR, "cannot start a pool thread");
			}
			p->started++;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Completer                                                           */
/* ------------------------------------------------------------------ */

static void count_outcome(due_worker *w, const due_job *j, bool ok, int outcome)
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
	wlog(w, quiet ? 2 : 1, "task %lld (%s) attempt %d: %s%s%s", (long long)j->task.id,
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
			wlog((w), 1, "store error (%s), retrying: %s",         \
			     due_error_name(rc), due_error_last());            \
			bg_sleep((w), delay_);                                 \
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
			count_outcome(w, j, false, (int)fo);
		return;
	}
	due_complete_outcome co = DUE_COMPLETE_REJECTED_STALE;
	STORE_RETRY(w, db, due_complete_tx(db, &co, j->task.id, j->task.attempt,
					   j->result, j->result_len, j->hook,
					   j->hook_payload));
	if (rc == 0)
		count_outcome(w, j, true, (int)co);
	else
		wlog(w, 1, "task %lld: completion failed: %s", (long long)j->task.id,
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
					count_outcome(w, jobs[i], true, (int)items[0].outcome);
				}
			}
		return;
	}
	if (rc < 0) { /* only when shutdown gave up on the store */
		wlog(w, 1, "leaving %zu completion(s) uncommitted: %s", k,
		     due_error_last());
		return;
	}
	for (size_t i = 0, m = 0; i < n; i++)
		if (jobs[i]->rc == 0 && !jobs[i]->hook)
			count_outcome(w, jobs[i], true, (int)items[m++].outcome);
}

/* Drop a committed job from flight, free its slot.  mu held. */
static void retire_locked(due_worker *w, due_job *j)
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
		job_free(j);
	pthread_cond_broadcast(&w->idle_cv);
}

static void *completer_main(void *arg)
{
	due_worker *w = arg;
	due_db *db = connect_retry(w, "completer");
	due_job *batch[COMPLETE_BATCH];

	pthread_mutex_lock(&w->mu);
	for (;;) {
		size_t n = 0;
		/* while the claimer is draining it commits completions with its
		   next claim; take only those it left for 2 ms */
		if (w->done_head && atomic_load(&w->fold) && !w->threads_stop) {
			int64_t age = due_mono_us() - w->done_head->done_mono;
			if (age < 2000) {
				cond_wait_us(&w->done_cv, &w->mu, 2000 - age);
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
				cond_wait_us(&w->done_cv, &w->mu, 2000);
			} else {
				w->completer_parked = true;
				pthread_cond_wait(&w->done_cv, &w->mu);
				w->completer_parked = false;
			}
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		if (!db)
			db = connect_retry(w, "completer");
		commit_batch(w, db, batch, n);
		pthread_mutex_lock(&w->mu);
		for (size_t i = 0; i < n; i++)
			retire_locked(w, batch[i]);
		wake(w);
	}
	pthread_mutex_unlock(&w->mu);
	due_close(db);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Lease keeper                                                        */
/* ------------------------------------------------------------------ */

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
		wlog(w, 1, "task %lld: lease renewal failed: %s", (long long)r->id,
		     due_error_last());
		/* the lease may be gone by now; stop the handler once it is */
		if (now - r->job->renewed_mono >= w->o.lease_us &&
		    !atomic_exchange(&r->job->lost, true)) {
			atomic_fetch_add(&w->st.lease_lost, 1);
			wlog(w, 1, "task %lld attempt %d: lease presumed lost (no "
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
		wlog(w, 1, "task %lld attempt %d: %s; stopping its handler",
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
	if (!*db && !(*db = connect_retry(w, "keeper")))
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
	wlog(w, 1, "last minute: claimed %lld, done %lld, failed %lld; lateness "
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

static void *keeper_main(void *arg)
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
			cond_wait_us(&w->keep_cv, &w->mu, tick);
			pthread_mutex_unlock(&w->mu);
			maybe_report(w, &db, &last_report, &last_sum, false);
			maybe_summary(w, &last_summary, &prev);
			pthread_mutex_lock(&w->mu);
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		if (!db)
			db = connect_retry(w, "keeper");
		for (size_t i = 0; db && i < n; i++)
			renew_one(w, db, &r[i]);
		pthread_mutex_lock(&w->mu);
		for (size_t i = 0; i < n; i++)
			if (--r[i].job->refs == 0)
				job_free(r[i].job);
	}
	pthread_mutex_unlock(&w->mu);
	maybe_report(w, &db, &last_report, &last_sum, true);
	due_close(db);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Scheduler                                                           */
/* ------------------------------------------------------------------ */

#define CRON_LOOKAHEAD_US 2000000LL
#define CRON_MAX_SLEEP_US 5000000LL

/*
** Run scheduler passes: each materializes the slots due within the
** lookahead, then sleeps until the earliest next slot enters it (at most
** 5 s, so new or changed schedules are seen).  Any number of workers may
** do this at once: the store's compare-and-set gives each slot one task.
*/
static void *scheduler_main(void *arg)
{
	due_worker *w = arg;
	due_db *db = NULL;
	int64_t wait_us = 0;

	pthread_mutex_lock(&w->mu);
	while (!w->threads_stop) {
		if (wait_us > 0)
			cond_wait_us(&w->sched_cv, &w->mu, wait_us);
		if (w->threads_stop)
			break;
		pthread_mutex_unlock(&w->mu);
		due_cron_tick_result r;
		if (!db)
			db = connect_retry(w, "scheduler");
		wait_us = CRON_MAX_SLEEP_US;
		if (db && due_cron_tick(db, &r, &(due_cron_tick_opts){DUE_CRON_TICK_OPTS_VERSION,
				CRON_LOOKAHEAD_US, w->o.cron_grace_us > 0 ? w->o.cron_grace_us
									  : DUE_CRON_MISFIRE_GRACE_US}) < 0) {
			atomic_fetch_add(&w->st.store_errors, 1);
			wlog(w, 1, "scheduler: %s", due_error_last());
			wait_us = 1000000;
		} else if (db) {
			if (r.missed)
				wlog(w, 1, "scheduler: %lld slot(s) missed while no "
				     "scheduler ran (see `due cron ls`)", (long long)r.missed);
			if (r.materialized)
				wlog(w, 2, "scheduler: %lld slot task(s) created",
				     (long long)r.materialized);
			if (r.next_slot && r.next_slot - r.now - CRON_LOOKAHEAD_US / 2 < wait_us)
				wait_us = r.next_slot - r.now - CRON_LOOKAHEAD_US / 2;
			if (wait_us < 20000)
				wait_us = 20000;
		}
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	due_close(db);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Claimer                                                             */
/* ------------------------------------------------------------------ */

/*
** The claim options of a pool: an isolated pool claims its kind; the
** shared pool claims its handlers' kinds, or with a catch-all every kind
** but the isolated ones.  false when the pool has nothing to claim.
*/
static bool claim_opts_for(due_worker *w, pool *p, int limit,
			   const char **kinds, due_claim_opts *o)
{
	bool catch_all = false;
	size_t n = 0;

	*o = (due_claim_opts)DUE_CLAIM_OPTS_INIT;
	o->owner = w->owner;
	o->limit = limit;
	o->lease_us = w->o.lease_us;
	if (p->kind) {
		kinds[n++] = p->kind;
	} else {
		for (size_t i = 0; i < w->n_handlers; i++) {
			if (!w->handlers[i].kind)
				catch_all = true;
			else if (w->handlers[i].pool == p && n < 64)
				kinds[n++] = w->handlers[i].kind;
		}
		if (catch_all) {
			n = 0;
			for (size_t i = 1; i < w->n_pools && n < 64; i++)
				kinds[n++] = w->pools[i]->kind;
			o->exclude_kinds = true;
		} else if (n == 0) {
			return false;
		}
	}
	o->kinds = kinds;
	o->n_kinds = n;
	return true;
}

/* Take the pool's finished plain completions off the done queue.  mu held. */
static size_t take_done_locked(due_worker *w, pool *p, due_job **out, size_t cap)
{
	due_job **link = &w->done_head, *last = NULL;
	size_t n = 0;

	while (*link && n < cap) {
		due_job *j = *link;
		if (j->pool == p && j->rc == 0 && !j->hook) {
			*link = j->next;
			out[n++] = j;
		} else {
			last = j;
			link = &j->next;
		}
	}
	while (*link) { /* find the new tail */
		last = *link;
		link = &(*link)->next;
	}
	w->done_tail = last;
	return n;
}

/* Give completions back to the completer (after a failed fold).  mu held. */
static void untake_locked(due_worker *w, due_job **jobs, size_t n)
{
	for (size_t i = n; i-- > 0;) {
		jobs[i]->next = w->done_head;
		w->done_head = jobs[i];
		if (!w->done_tail)
			w->done_tail = jobs[i];
	}
	pthread_cond_signal(&w->done_cv);
}

/*
** While draining, slots free up one handler at a time.  When less than
** half of a pool could be claimed now, give the handlers about to finish
** up to 200 us, so one transaction carries several completions and
** claims instead of one each.
*/
static void gather(due_worker *w, pool *p)
{
	for (int round = 0; round < 4 && atomic_load(&w->fold) && p->size >= 4;
	     round++) {
		int avail;
		pthread_mutex_lock(&w->mu);
		avail = p->size - p->busy;
		for (due_job *j = w->done_head; j; j = j->next)
			avail += j->pool == p && j->rc == 0 && !j->hook;
		pthread_mutex_unlock(&w->mu);
		if (avail >= p->size / 2)
			return;
		struct timespec ts = {0, 50000};
		nanosleep(&ts, NULL);
	}
}

/*
** Claim for one pool, folding its finished completions into the same
** transaction when there are any (one commit per batch).
*/
static int claim_pool(due_worker *w, due_db *db, pool *p, int limit,
		      due_job **taken, size_t nt, due_task_list **out)
{
	const char *kinds[65];
	due_completion items[COMPLETE_BATCH];
	due_claim_opts o;
	int rc;

	*out = NULL;
	if (!claim_opts_for(w, p, limit, kinds, &o)) {
		/* a pool without kinds runs no handler, so it has no completions;
		   should it ever, the completer commits them */
		if (nt) {
			pthread_mutex_lock(&w->mu);
			untake_locked(w, taken, nt);
			pthread_mutex_unlock(&w->mu);
		}
		return 0;
	}
	atomic_fetch_add(&w->st.claim_queries, 1);
	if (nt == 0)
		return due_claim_ex(db, out, &o);
	for (size_t i = 0; i < nt; i++)
		items[i] = (due_completion){taken[i]->task.id, taken[i]->task.attempt,
					    taken[i]->result, taken[i]->result_len, 0};
	if ((rc = due_complete_and_claim(db, items, nt, &o, out)) < 0) {
		pthread_mutex_lock(&w->mu);
		untake_locked(w, taken, nt);
		pthread_mutex_unlock(&w->mu);
		return rc;
	}
	pthread_mutex_lock(&w->mu);
	for (size_t i = 0; i < nt; i++) {
		count_outcome(w, taken[i], true, (int)items[i].outcome);
		retire_locked(w, taken[i]);
	}
	pthread_mutex_unlock(&w->mu);
	return 0;
}

/*
** One claiming round over every pool with free slots.  *filled is set
** when some pool got all it asked for, or had no free slot to ask with
** (either way more may be due).  Returns the
** number of tasks claimed, or a negative code on a store error.
*/
static int claim_round(due_worker *w, due_db *db, bool *filled)
{
	int total = 0;

	*filled = false;
	for (size_t i = 0; i < w->n_pools && !atomic_load(&w->stop); i++) {
		pool *p = w->pools[i];
		due_task_list *l = NULL;
		int free_slots, rc;

		due_job *taken[COMPLETE_BATCH];
		size_t nt = 0;

		gather(w, p);
		pthread_mutex_lock(&w->mu);
		if (atomic_load(&w->fold))
			nt = take_done_locked(w, p, taken, COMPLETE_BATCH);
		free_slots = p->size - p->busy + (int)nt;
		pthread_mutex_unlock(&w->mu);
		if (free_slots <= 0) {
			/* full: we did not look, so more may be due; a freed
			   slot wakes the claimer to look again */
			*filled = true;
			continue;
		}
		if ((rc = claim_pool(w, db, p, free_slots, taken, nt, &l)) < 0)
			return rc;
		if (!l)
			continue;
		if (l->count == 0)
			atomic_fetch_add(&w->st.empty_claims, 1);
		if ((int)l->count == free_slots)
			*filled = true;
		pthread_mutex_lock(&w->mu);
		for (size_t k = 0; k < l->count; k++) {
			/* claim time in the store's clock is lease_until - lease */
			const due_task *t = &l->items[k];
			w->late[w->n_late++ % 1024] = t->lease_until - w->o.lease_us -
						     t->due_at;
			due_job *j = job_new_locked(w, p, &l->items[k]);
			if (!j) /* out of memory: the lease will expire */
				continue;
			p->busy++;
			enqueue_locked(p, j);
		}
		pthread_mutex_unlock(&w->mu);
		atomic_fetch_add(&w->st.claimed, (long long)l->count);
		total += (int)l->count;
		due_task_list_free(l);
	}
	return total;
}

/*
** The claimer says whether it is draining (folding completions into its
** claims).  Handlers do not wake the completer while it is; when it stops,
** the completer is woken for what was left.
*/
static void set_fold(due_worker *w, bool fold)
{
	if (atomic_exchange(&w->fold, fold) && !fold) {
		pthread_mutex_lock(&w->mu);
		pthread_cond_signal(&w->done_cv);
		pthread_mutex_unlock(&w->mu);
	}
}

/* Inline mode: the claimer runs what it claimed for the shared pool. */
static void run_inline(due_worker *w)
{
	pool *p = w->pools[0];
	for (;;) {
		pthread_mutex_lock(&w->mu);
		due_job *j = dequeue_locked(p);
		pthread_mutex_unlock(&w->mu);
		if (!j)
			return;
		run_job(w, j);
	}
}

static int inflight(due_worker *w)
{
	pthread_mutex_lock(&w->mu);
	int n = w->n_inflight;
	pthread_mutex_unlock(&w->mu);
	return n;
}

/*
** Take back expired leases, and return when to look again (monotonic
** us): at the earliest lease expiry the store reported, at most
** RECLAIM_MAX_US from now, so a crashed worker's task is picked up about
** when its lease ends without polling faster than needed.
*/
#define RECLAIM_MAX_US 2000000LL

static int64_t reclaim_max(due_worker *w, due_db *db, int64_t max_us)
{
	int64_t now = due_mono_us(), wait_us = max_us;
	due_reclaimed r;

	atomic_fetch_add(&w->st.reclaim_queries, 1);
	if (due_reclaim_expired(db, &r) < 0) {
		atomic_fetch_add(&w->st.store_errors, 1);
		wlog(w, 1, "reclaim failed: %s", due_error_last());
		return now + 100000;
	}
	if (r.rescheduled + r.dead + r.cancelled)
		wlog(w, 1, "reclaimed expired leases: %lld rescheduled, %lld dead, "
		     "%lld cancelled", (long long)r.rescheduled, (long long)r.dead,
		     (long long)r.cancelled);
	if (r.next_expiry > 0 && r.next_expiry - r.now + 1000 < wait_us)
		wait_us = r.next_expiry - r.now + 1000;
	return now + (wait_us < 1000 ? 1000 : wait_us);
}

static int64_t reclaim(due_worker *w, due_db *db)
{
	return reclaim_max(w, db, RECLAIM_MAX_US);
}

/*
** The claiming loop.  Claims as soon as slots free up while the previous
** round filled them (more is due), else once per poll interval.  Returns
** when stopping, or in once-mode when nothing due is left.
*/
static void claim_loop(due_worker *w, due_db *db)
{
	int64_t next_reclaim = 0, next_poll = 0, backoff = 10000;
	bool more = true;

	while (!atomic_load(&w->stop)) {
		int64_t now = due_mono_us();
		bool filled = false;
		int n = 0;

		if (now >= next_reclaim)
			next_reclaim = reclaim(w, db);
		if (more || now >= next_poll) {
			n = claim_round(w, db, &filled);
			if (n < 0) {
				atomic_fetch_add(&w->st.store_errors, 1);
				wlog(w, 1, "claim failed: %s (backing off %lld ms)",
				     due_error_last(), (long long)backoff / 1000);
				wait_wake(w, backoff);
				backoff = backoff * 2 > 2000000 ? 2000000 : backoff * 2;
				continue;
			}
			backoff = 10000;
			more = filled;
			set_fold(w, more || w->o.once);
			next_poll = due_mono_us() + w->poll_us;
		}
		if (w->o.mode == DUE_MODE_INLINE)
			run_inline(w);
		if (w->o.once && n == 0 && !more && inflight(w) == 0)
			return;
		if (more && n > 0)
			continue; /* slots may still be free in other pools */
		int64_t until = (more ? next_reclaim : (next_poll < next_reclaim
						  ? next_poll : next_reclaim)) - due_mono_us();
		if (w->o.once)
			until = until > 50000 ? 50000 : until;
		wait_wake(w, until > 0 ? until : 0);
		if (w->o.once)
			more = true; /* re-check promptly until drained */
	}
}


/* ------------------------------------------------------------------ */
/* Discovery with the timing wheel                                     */
/* ------------------------------------------------------------------ */

/*
** The wheel is a cache of the store: it holds the ids of tasks due within
** the horizon, in ticks of 1 ms of the monotonic clock.  The store's clock
** maps onto it through `offset` (store time - monotonic time, measured at
** each refill; exact for SQLite, within a round trip for PostgreSQL).  A
** due tick is rounded up, so the wheel never fires before the store would
** call the task due; the claim statement decides in any case.  Several
** workers may hold the same id: whoever claims first gets it, the others'
** claims come back empty.
*/
typedef struct disc {
	due_wheel *wheel;
	int listen_fd;
	int64_t offset;       /* store us - monotonic us */
	int64_t next_refill;  /* monotonic us */
	int64_t next_reclaim;
	int64_t last_refill;
	int64_t recheck_at;
	int rechecks;
	bool exact_clock;     /* the store's clock is this host's (SQLite) */
	const char *kinds[65];
	size_t n_kinds;
	bool exclude;
} disc;

static void count_fire(int64_t id, int64_t due_tick, void *payload)
{
	(void)id;
	(void)due_tick;
	(*(int64_t *)payload)++;
}

/* The kinds this worker handles, as one filter for the upcoming query. */
static void disc_kinds(due_worker *w, disc *d)
{
	d->n_kinds = 0;
	d->exclude = false;
	for (size_t i = 0; i < w->n_handlers; i++) {
		if (!w->handlers[i].kind) { /* catch-all: every kind */
			d->n_kinds = 0;
			return;
		}
		if (d->n_kinds < 64)
			d->kinds[d->n_kinds++] = w->handlers[i].kind;
	}
}

/*
** Load the ids due before now + horizon into the wheel.  Also learns the
** next lease expiry, so the reclaim check needs no query of its own.
*/
static int refill(due_worker *w, due_db *db, disc *d)
{
	int64_t mono = due_mono_us();
	due_time now;
	due_upcoming *u = NULL;
	int rc;

	if (d->exact_clock)
		now = due_time_now_host();
	else if (d->last_refill) /* the offset of the last refill will do */
		now = mono + d->offset;
	else if ((rc = due_now(db, &now)) < 0)
		return rc;
	atomic_fetch_add(&w->st.refills, 1);
	rc = due_upcoming_get(db, &u, d->kinds, d->n_kinds, d->exclude,
			      now + w->o.horizon_us, w->o.wheel_max);
	if (rc < 0)
		return rc;
	d->offset = (u->now ? u->now : now) - mono;
	for (size_t i = 0; i < u->count; i++) {
		int64_t tick = (u->due_at[i] - d->offset + 999) / 1000;
		due_wheel_start(NULL, d->wheel, u->ids[i], tick);
	}
	d->last_refill = mono;
	d->next_refill = mono + w->poll_us;
	if (u->truncated && u->count) /* the rest is loaded as time moves on */
		d->next_refill = u->due_at[u->count - 1] - d->offset - 100000;
	if (u->next_expiry && u->next_expiry - d->offset < d->next_reclaim)
		d->next_reclaim = u->next_expiry - d->offset + 1000;
	due_upcoming_free(u);
	return 0;
}

/* Consume notifications; true if any arrived. */
static bool drain_notes(due_worker *w, due_db *db, disc *d)
{
	int n = 0;
	if (d->listen_fd < 0 || due_listen_drain(db, &n) < 0 || n == 0)
		return false;
	atomic_fetch_add(&w->st.notifications, n);
	return true;
}

/*
** Can this store deliver notifications to us?  Send one and wait for it
** (PgBouncer in transaction pooling mode silently drops LISTEN).
*/
static bool listen_works(due_worker *w, due_db *db, disc *d)
{
	if (due_listen(db, &d->listen_fd) < 0) {
		wlog(w, 1, "cannot listen for new tasks (%s): polling every %lld ms",
		     due_error_last(), (long long)w->poll_us / 1000);
		return false;
	}
	if (due_notify(db) < 0)
		return false;
	for (int i = 0; i < 100; i++) {
		struct pollfd p = {d->listen_fd, POLLIN, 0};
		if (drain_notes(w, db, d))
			return true;
		poll(&p, 1, 10);
	}
	wlog(w, 1, "notifications are not delivered on this connection (a "
	     "transaction-pooling proxy?): polling every %lld ms instead",
	     (long long)w->poll_us / 1000);
	return false;
}

/* Sleep until `until` (monotonic us), a slot frees, or a submit is seen. */
static void wheel_wait(due_worker *w, due_db *db, disc *d, int64_t until)
{
	struct pollfd p[2] = {{w->wake_fd, POLLIN, 0}, {d->listen_fd, POLLIN, 0}};
	int64_t left = until - due_mono_us();
	uint64_t v;

	/* a reconnected session has a new socket (and listens again) */
	if (d->listen_fd >= 0 && due_listen(db, &d->listen_fd) < 0)
		d->listen_fd = -1;
	if (drain_notes(w, db, d)) { /* buffered by an earlier query */
		d->next_refill = 0;
		return;
	}
	if (left <= 0)
		return;
	if (poll(p, d->listen_fd >= 0 ? 2 : 1, (int)((left + 999) / 1000)) <= 0)
		return;
	if (p[0].revents & POLLIN) {
		ssize_t r = read(w->wake_fd, &v, sizeof(v));
		(void)r;
	}
	if (d->listen_fd >= 0 && (p[1].revents & POLLIN) && drain_notes(w, db, d))
		d->next_refill = 0;
}

/* The earliest of the wheel's next fire, refill, reclaim and recheck. */
static int64_t wheel_deadline(due_worker *w, disc *d)
{
	int64_t until = d->next_refill, nd = due_wheel_next_due(d->wheel);

	(void)w;
	if (nd != DUE_WHEEL_NEVER && nd * 1000 < until)
		until = nd * 1000;
	if (d->next_reclaim < until)
		until = d->next_reclaim;
	if (d->recheck_at && d->recheck_at < until)
		until = d->recheck_at;
	return until;
}

static void wheel_loop(due_worker *w, due_db *db, disc *d)
{
	int64_t backoff = 10000;
	bool more = true;

	while (!atomic_load(&w->stop)) {
		int64_t now = due_mono_us(), fired = 0;
		bool filled = false;
		int n;

		/* refill at once after a notification, but at most every 5 ms;
		   what is due now comes back with the refill and fires at once
		   from the wheel below, so an idle refill claims nothing and an
		   idle worker makes one query per safety poll */
		if (now >= d->next_refill && now - d->last_refill >= 5000) {
			if (refill(w, db, d) < 0)
				goto store_error;
		}
		/* the refill reports the next lease expiry: no reclaim check
		   is needed until then */
		if (now >= d->next_reclaim) {
			reclaim_max(w, db, w->poll_us);
			d->next_reclaim = now + 3600LL * 1000000;
			d->next_refill = 0; /* learn the next expiry now */
		}
		due_wheel_advance(d->wheel, now / 1000, count_fire, &fired);
		atomic_fetch_add(&w->st.wheel_fired, fired);
		if (fired || more || (d->recheck_at && now >= d->recheck_at)) {
			if ((n = claim_round(w, db, &filled)) < 0)
				goto store_error;
			backoff = 10000;
			more = filled;
			set_fold(w, more);
			/* PostgreSQL's clock is known to within a round trip:
			   if we woke early, look again shortly */
			if (fired && n == 0 && !d->exact_clock && d->rechecks < 4)
				d->recheck_at = now + (2000 << d->rechecks++);
			else if (n > 0 || !fired)
				d->recheck_at = 0, d->rechecks = 0;
			if (w->o.mode == DUE_MODE_INLINE)
				run_inline(w);
			if (more && n > 0)
				continue;
		}
		wheel_wait(w, db, d, more ? now + w->poll_us : wheel_deadline(w, d));
		continue;
store_error:
		atomic_fetch_add(&w->st.store_errors, 1);
		wlog(w, 1, "store error: %s (backing off %lld ms)", due_error_last(),
		     (long long)backoff / 1000);
		wait_wake(w, backoff);
		backoff = backoff * 2 > 2000000 ? 2000000 : backoff * 2;
		d->next_refill = 0;
	}
}

/*
** Run discovery with the wheel if the store can notify us; returns false
** (nothing done) when the worker should poll instead.
*/
static bool try_wheel(due_worker *w, due_db *db)
{
	due_wheel_opts wo = DUE_WHEEL_OPTS_INIT;
	disc d = {.listen_fd = -1};

	if (w->o.no_wheel || w->o.once)
		return false;
	d.exact_clock = strcmp(due_db_backend(db), "sqlite") == 0;
	wo.start_tick = due_mono_us() / 1000;
	if (due_wheel_new(&d.wheel, &wo) < 0)
		return false;
	disc_kinds(w, &d);
	if (!listen_works(w, db, &d)) {
		due_wheel_free(d.wheel);
		return false;
	}
	wlog(w, 1, "discovery: timing wheel (horizon %lld s, up to %d ids), "
	     "woken by new submits; safety poll every %lld ms",
	     (long long)w->o.horizon_us / 1000000, w->o.wheel_max,
	     (long long)w->poll_us / 1000);
	wheel_loop(w, db, &d);
	due_wheel_free(d.wheel);
	return true;
}

/*
** Let in-flight tries finish within the grace; then tell them to stop.
** If they still cannot be committed ABANDON_US later (the store is down),
** give up on the store: their leases expire and another worker reclaims
** them, which fencing makes safe.  Shutdown never hangs on the store.
*/
#define ABANDON_US (10LL * 1000000)

static void drain(due_worker *w)
{
	int64_t deadline = due_mono_us() + w->o.grace_us, told_at = 0;

	pthread_mutex_lock(&w->mu);
	while (w->n_inflight > 0) {
		int64_t left = deadline - due_mono_us();
		if (left <= 0 && !told_at) {
			wlog(w, 1, "grace period over: stopping %d running handler(s); "
			     "their leases will expire", w->n_inflight);
			for (due_job *j = w->inflight; j; j = j->inext)
				atomic_store(&j->lost, true);
			told_at = due_mono_us();
		}
		if (told_at && due_mono_us() - told_at > ABANDON_US) {
			wlog(w, 1, "cannot commit %d finished or stopped tr%s (store "
			     "unreachable?): leaving them to lease expiry",
			     w->n_inflight, w->n_inflight == 1 ? "y" : "ies");
			atomic_store(&w->abandon, true);
			pthread_cond_broadcast(&w->done_cv);
			break;
		}
		cond_wait_us(&w->idle_cv, &w->mu, left > 0 ? left : 100000);
		if (w->o.mode == DUE_MODE_INLINE) {
			pthread_mutex_unlock(&w->mu);
			run_inline(w);
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
	pthread_cond_broadcast(&w->sched_cv);
	pthread_mutex_unlock(&w->mu);
	for (size_t i = 0; i < w->n_pools; i++)
		for (int k = 0; k < w->pools[i]->started; k++)
			pthread_join(w->pools[i]->threads[k], NULL);
	pthread_join(w->completer, NULL);
	pthread_join(w->keeper, NULL);
	if (w->sched_started)
		pthread_join(w->scheduler, NULL);
	/* tries left uncommitted when shutdown gave up on the store */
	while (w->inflight) {
		due_job *j = w->inflight;
		w->inflight = j->inext;
		job_free(j);
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
	int rc = pools_start(w);

	if (rc < 0) {
		unwind_threads(w, false);
		return rc;
	}
	if (pthread_create(&w->completer, NULL, completer_main, w) != 0) {
		unwind_threads(w, false);
		return due_error_set(DUE_ERROR, "cannot start the completer thread");
	}
	if (pthread_create(&w->keeper, NULL, keeper_main, w) != 0) {
		unwind_threads(w, true);
		return due_error_set(DUE_ERROR, "cannot start the lease keeper thread");
	}
	/* the scheduler is optional: without it the worker still works */
	if (w->o.cron && !w->o.once)
		w->sched_started =
			pthread_create(&w->scheduler, NULL, scheduler_main, w) == 0;
	return 0;
}

int due_worker_run(due_worker *w)
{
	due_db *db;
	struct sigaction sa;
	int rc;

	if (w->n_handlers == 0)
		return due_error_set(DUE_EINVAL, "worker has no handler registered");
	if (atomic_exchange(&w->running, true))
		return due_error_set(DUE_EINVAL, "worker is already running");
	/* Writing a payload to a command that exited must not kill us. */
	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);
	db = connect_retry(w, "claimer");
	if (!db) {
		atomic_store(&w->running, false);
		return 0;
	}
	if ((rc = start_threads(w)) < 0) {
		due_close(db);
		atomic_store(&w->running, false);
		return rc;
	}
	wlog(w, 1, "started: %zu pool(s), shared concurrency %d, lease %lld ms, "
	     "poll %lld ms%s", w->n_pools, w->pools[0]->size,
	     (long long)w->o.lease_us / 1000, (long long)w->poll_us / 1000,
	     w->o.once ? ", once" : "");
	if (!try_wheel(w, db))
		claim_loop(w, db);
	atomic_store(&w->fold, false); /* the completer takes everything now */
	pthread_mutex_lock(&w->mu);
	pthread_cond_signal(&w->done_cv);
	pthread_mutex_unlock(&w->mu);
	atomic_store(&w->draining, true);
	drain(w);
	join_all(w);
	due_close(db);
	wlog(w, 1, "stopped: claimed %lld, done %lld, failed %lld, dead %lld, "
	     "stale %lld, cancelled %lld, lease lost %lld",
	     (long long)w->st.claimed, (long long)w->st.done,
	     (long long)w->st.failed, (long long)w->st.dead, (long long)w->st.stale,
	     (long long)w->st.cancelled, (long long)w->st.lease_lost);
	atomic_store(&w->running, false);
	return 0;
}

void due_worker_stop(due_worker *w)
{
	atomic_store(&w->stop, true);
	wake(w);
}

/* ------------------------------------------------------------------ */
/* Setup                                                               */
/* ------------------------------------------------------------------ */

int due_worker_new(due_worker **out, const due_worker_opts *opts)
{
	due_worker *w;
	char host[128];

	*out = NULL;
	if (!opts || !opts->url)
		return due_error_set(DUE_EINVAL, "worker options need a store url");
	if (opts->concurrency < 1 || opts->concurrency > 1024)
		return due_error_set(DUE_EINVAL, "invalid concurrency %d: 1..1024",
				     opts->concurrency);
	if (opts->lease_us < 1000 || (opts->poll_us && opts->poll_us < 1000) ||
	    opts->grace_us < 0 || opts->horizon_us < 0 || opts->wheel_max < 0)
		return due_error_set(DUE_EINVAL,
			"invalid lease/poll/grace: lease and poll at least 1ms");
	if (opts->owner && due_validate_owner(opts->owner) < 0)
		return DUE_EINVAL;
	if (!(w = calloc(1, sizeof(*w))))
		return due_error_set(DUE_ENOMEM, "out of memory");
	w->o = *opts;
	w->poll_us = opts->poll_us ? opts->poll_us
				   : opts->no_wheel || opts->once ? 1000000 : 10000000;
	if (!w->o.horizon_us)
		w->o.horizon_us = 60000000;
	if (!w->o.wheel_max)
		w->o.wheel_max = 100000;
	w->url = due_strdup_n(opts->url, strlen(opts->url));
	if (opts->owner) {
		w->owner = due_strdup_n(opts->owner, strlen(opts->owner));
	} else {
		char buf[200];
		if (gethostname(host, sizeof(host)) != 0)
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
		snprintf(buf, sizeof(buf), "%s:%d", host, (int)getpid());
		w->owner = due_strdup_n(buf, strlen(buf));
	}
	w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	w->pools = calloc(1, sizeof(*w->pools));
	if (w->pools)
		w->pools[0] = pool_new(NULL, opts->mode == DUE_MODE_INLINE
						 ? opts->concurrency : opts->concurrency);
	w->n_pools = 1;
	if (!w->url || !w->owner || w->wake_fd < 0 || !w->pools || !w->pools[0] ||
	    pthread_mutex_init(&w->mu, NULL) != 0 || cond_init(&w->done_cv) ||
	    cond_init(&w->keep_cv) || cond_init(&w->idle_cv) ||
	    cond_init(&w->sched_cv)) {
		due_worker_free(w);
		return due_error_set(DUE_ENOMEM, "cannot create worker");
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
		return due_error_set(DUE_EINVAL, "register handlers before running");
	if (!fn || pool_size < 0 || pool_size > 1024)
		return due_error_set(DUE_EINVAL, "invalid handler or pool size");
	if (kind && (rc = due_validate_kind(kind)) < 0)
		return rc;
	if (!kind && pool_size > 0)
		return due_error_set(DUE_EINVAL,
			"an isolated pool needs a kind (the catch-all runs in the "
			"shared pool)");
	for (size_t i = 0; i < w->n_handlers; i++)
		if ((!kind && !w->handlers[i].kind) ||
		    (kind && w->handlers[i].kind && !strcmp(kind, w->handlers[i].kind)))
			return due_error_set(DUE_EINVAL, "handler for '%s' registered twice",
					     kind ? kind : "(any kind)");
	if (pool_size > 0) {
		pool **np = realloc(w->pools, (w->n_pools + 1) * sizeof(*np));
		if (!np)
			return due_error_set(DUE_ENOMEM, "out of memory");
		w->pools = np;
		if (!(p = pool_new(kind, pool_size)))
			return due_error_set(DUE_ENOMEM, "out of memory");
		w->pools[w->n_pools++] = p;
	}
	h = realloc(w->handlers, (w->n_handlers + 1) * sizeof(*h));
	if (!h)
		return due_error_set(DUE_ENOMEM, "out of memory");
	w->handlers = h;
	h[w->n_handlers++] = (handler){
		kind ? due_strdup_n(kind, strlen(kind)) : NULL, fn, payload, p};
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
	out->claim_queries = atomic_load(&w->st.claim_queries);
	out->empty_claims = atomic_load(&w->st.empty_claims);
	out->reclaim_queries = atomic_load(&w->st.reclaim_queries);
	out->wheel_fired = atomic_load(&w->st.wheel_fired);
	out->refills = atomic_load(&w->st.refills);
	out->notifications = atomic_load(&w->st.notifications);
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
	if (out->existed || !atomic_load(&w->running) || atomic_load(&w->stop) ||
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
	rc = due_claim_id(db, &t, out->id, w->owner, w->o.lease_us);
	pthread_mutex_lock(&w->mu);
	if (rc < 0) {
		p->busy--; /* taken by another worker already, or a store error */
	} else {
		due_job *j = job_new_locked(w, p, t);
		if (j)
			enqueue_locked(p, j);
		else
			p->busy--;
		atomic_fetch_add(&w->st.claimed, 1);
	}
	pthread_mutex_unlock(&w->mu);
	due_task_free(t);
	if (w->o.mode == DUE_MODE_INLINE)
		wake(w);
	return 0;
}
