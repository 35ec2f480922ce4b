/*
** worker_internal.h - the worker runtime's shared state, its threads and
** its one lock.  Only the files of src/worker/ include it.
**
** Connections.  A worker process holds at most three store connections,
** whatever its concurrency (issue 15: 30 workers fit under PostgreSQL's
** default max_connections = 100), each with a bounded wait (issue 35):
**   w->db      opened by due_worker_run() before any thread starts and
**              shared by every thread that talks to the store (claimer,
**              completer, scheduler, pruner), one API call at a
**              time: DUE_DB_CALL() takes `db` in turn (a FIFO ticket lock)
**              for the length of one call, never across a wait or a
**              handler.
**   renewals   the renewer's own (renewer.c): lease renewals and the
**              counters' reports, nothing else, so a call of another
**              thread that waits (a claim behind a lock, a slow commit)
**              never holds a renewal back.
**   listening  discovery's own due_db, opened only on a store that can
**              notify (DUE_STORE_CAP_NOTIFY) and used only for
**              listen/listen_drain by the claimer thread; a session that
**              also ran queries for other threads could swallow a
**              notification between the claimer's check and its poll.
**   hooks      the completer's own, opened on first need, for completions
**              with a transaction hook (due_job_set_tx_hook): the hook is
**              the handler's code inside our transaction and may wait on
**              its own rows, which must not hold up every other store call.
** Every one is opened with the bound conn_timeout_us (renewals:
** renew_timeout_us, lease/3): a store call that gets no answer fails
** within it, and the connection is made again on the next call.
** A due_db is single-thread; serialized like this it is used by one thread
** at a time, and errors stay per thread (due_error_last is thread-local).
** A turn lasts one API call; a scheduler pass (due_cron_tick) is one call
** of a few statements.
**
** Threads.
**
**   claimer     the thread that called due_worker_run().  Claims up to the
**               free slots of each pool and hands the tasks to the pools
**               (claimer.c); discovers due work either with the timing
**               wheel and store notifications (discovery.c) or by polling
**               (claimer.c); reclaims expired leases; in inline mode runs
**               the shared pool's handlers itself; after a stop, drains
**               (worker.c).
**   pool N      one thread per slot of each pool (pool.c), runs handlers;
**               none for the shared pool in inline mode.  No store
**               connection of its own (a handler may open one); a fast
**               pool's thread takes turns at `db` for relay claims, the
**               next batch of a drain claimed without waking the claimer
**               (claimer.c).
**   keeper      the local clock, which no store call can hold back
**               (keeper.c): stops a try whose lease is no longer surely
**               held (the lease clock, below), watches the time limits,
**               ends the grace after a stop, logs a store call that has
**               no answer for long.  It never talks to the store.
**   renewer     renews the lease of every running try on its own
**               connection and publishes the worker's counters
**               (renewer.c).
**   completer   commits finished tries in batches and frees their slots
**               (completer.c).
**   scheduler   materializes the slots of periodic schedules (scheduler.c);
**               started only with opts.cron and without opts.once.
**   pruner      retention (pruner.c): deletes finished tasks older than
**               opts.retain_us while it holds the store's "prune" lease;
**               not started with DUE_RETAIN_ALL or opts.once.
**
** Lock order.  `due_worker.mu` guards the runtime's state; every condition
** variable but `db_cv` (the pools' `cv`, `done_cv`, `keep_cv`, `idle_cv`,
** `sched_cv`) waits on it.  No store call and no handler runs while it is
** held; nothing else is locked under it.  `db_mu` (with `db_cv`) only
** hands out turns at the shared connection: a turn is taken with mu not
** held, and mu is never held while waiting for one.  Counters (`st`) and
** the flags marked atomic are read and written without it.
** due_worker_stop() only touches an atomic flag and the eventfd, so it can
** be called from a signal handler.
**
** Invariants.
**  - A pool's `busy` counts its claimed, not yet committed tries; a claim
**    (the claimer's or a relay's, one at a time per pool: `claiming`)
**    never asks for more than size - busy, so no task waits in memory
**    holding a lease (CONTRACT §5).  In inline mode the shared
**    pool has one slot, run by the claimer itself: it claims one task,
**    runs it, then claims the next.
**  - A job queued on a pool starts within about POOL_STALL_US (1 ms)
**    once a thread of its pool is free: a fast pool's one running thread
**    takes the queue in turn, and the stall check (claimer, keeper, drain)
**    wakes the others when a job waits that long (job.c).
**  - A failed store call is retried after a delay that grows, never at
**    once: no thread loops on a store that does not answer.  Each thread
**    logs an outage once when it starts and once when it ends
**    (due__outage_fail/over).
**  - A job is freed only under `mu` when its refcount reaches zero: one
**    reference belongs to flight (dropped by due__retire_locked() once its
**    outcome is committed), one more to the keeper while it renews outside
**    the lock.
**  - The worker's own view of a lease is advisory.  Whether a completion
**    lands is decided by the store's fenced statement, always.
**  - The lease clock (CONTRACT §5).  confirmed_mono is the monotonic time
**    at which the latest claim or renewal the store confirmed was sent
**    (taken before the turn at the connection, so never later than the
**    send).  The store's lease then runs at least until confirmed_mono +
**    lease in our clock, less the drift of two clocks (well under 0.1 %).
**    The keeper stops a try that has had no newer confirmation by
**    confirmed_mono + lease - margin (due__lease_margin: 15 % of the
**    lease, at least 300 ms, at most 5 s, at most half the lease) and
**    sets its kill_by to confirmed_mono + lease - 2/3 margin: a command
**    or pipe handler still running then is
**    killed (SIGKILL to its group) whatever its kill grace; its guard
**    process holds the same time and kills it even when this process
**    cannot (SIGSTOP, a starved thread: spawn.c).  So no
**    handler of ours outlives a lease the store could hand to another
**    worker, whatever a store call, a connection or the renewer is
**    doing.  The keeper takes only `mu`, never held across a store call.
**  - Time limits are watched by the keeper alone (it already wakes for
**    every running try's lease): a try still running task.timeout_us after
**    its claim is stopped with DUE_STOP_TIMEOUT.  Whether a try timed out
**    is decided once, by whoever moves `end` first: the keeper (TIMED_OUT)
**    or the thread whose handler returned (RETURNED); a timed-out try is
**    failed with DUE_OUT_TIMED_OUT whatever its handler returned.  The
**    keeper renews a timed-out try's lease until it is committed, so no
**    other worker takes the task while its process group is being killed.
**  - Work due again reaches the wheel as a new task does: a retry this
**    worker's fail scheduled by a refill at once (`retried`), a task it
**    reclaimed likewise, and what other processes make due by the store's
**    note; a lease taken by another worker after our last refill is
**    learned within half a lease of a fired id we did not claim
**    (discovery.c: lost_race), so a dead worker's lease is taken back
**    when it ends, not at the safety poll.
**  - A claim that says tasks were held back by a kind's limit
**    (retry_in_us) is followed by another claim after that delay, not
**    sooner, in both discovery modes: a held kind never makes the claimer
**    spin.
*/
#ifndef DUE_WORKER_INTERNAL_H
#define DUE_WORKER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/internal.h"

#define MAX_ERROR_TEXT 4096
#define COMPLETE_BATCH 256
/* the wheel's safety poll when --poll is not given: a refill that finds
   what a lost notification hid (every note is heard while a listening
   session lives; a new session refills at once), and the bound of an
   idle worker's store calls (docs/internals/discovery.md, Idle cost) */
#define DUE__SAFETY_POLL_US 30000000LL

typedef struct handler {
	char *kind; /* NULL: the catch-all */
	due_handler_fn fn;
	void *payload;
	struct pool *pool;
} handler;

typedef struct pool {
	char *kind; /* isolated pool's kind; NULL for the shared pool */
	int size;
	int busy;	      /* claimed, not yet committed (mu) */
	due_job *head, *tail; /* ready to run (mu) */
	pthread_cond_t cv;    /* a job was queued, or threads_stop */
	int waiting;	      /* pool threads waiting on cv (mu) */
	int signaled;	      /* cv signals not yet taken by a waiter (mu) */
	int64_t run_us;	      /* handlers' recent run time, a moving
				 average (mu): below POOL_FAST_US the pool
				 is fast (job.c) */
	bool claiming;	      /* a claim for this pool is under way, the
				 claimer's or a relay's (mu): one at a
				 time, so two cannot both count the same
				 free slots */
	pthread_t *threads;
	int started;
} pool;

/*
** One thread's view of a store outage.  The first failed store call opens
** it and is logged once, with what failed; the first call the store
** answers again closes it, logged once with its length and the number of
** failed calls.  Every failed call counts in st.store_errors, nothing else
** does.  Each thread that talks to the store owns one (the claimer two).
*/
typedef struct due_outage {
	const char *who;    /* the thread, for the log */
	int64_t since;	    /* monotonic us of the first failure; 0: none */
	long long failures; /* failed calls since then */
} due_outage;

/*
** A store call under way on one connection, for the keeper's "no answer
** yet" line: `since` is its start (monotonic us, 0: no call), `what` the
** call as written.  The calling thread sets and clears them around the
** call; the keeper logs a call past STALL_LOG_US once (`logged`), and the
** caller then logs its end once.  `mu` guards the three for a moment,
** never across the call (a leaf lock: nothing is taken under it).
*/
typedef struct due_call_watch {
	pthread_mutex_t mu;
	int64_t since;
	const char *what;
	bool logged;
	bool quiet; /* a stall was said and no call has been answered since:
		       the next stalls of the outage are not said again */
} due_call_watch;
/* The keeper: log a call unanswered for STALL_LOG_US, once. */
void due__call_check(due_worker *w, due_call_watch *cw, const char *conn,
		     int64_t now);

struct due_job {
	due_task task;
	due_worker *w;
	pool *pool;
	const handler *h;
	atomic_bool lost;    /* lease lost, cancel requested or shutdown:
				the handler should stop (due__job_stop) */
	atomic_int stop_why; /* DUE_STOP_*: why `lost` was raised, first
				reason wins */
	atomic_llong confirmed_mono; /* when the latest claim or renewal the
				   store confirmed was sent, monotonic us
				   (renewer writes, keeper reads) */
	atomic_llong kill_by;	     /* a handler still running then is killed
					at once (the lease clock); 0: no such
					moment (keeper writes, handlers read) */
	bool unconfirmed;	     /* the lease clock stopped it (keeper) */
	int64_t renew_at; /* next renewal attempt, monotonic us (renewer) */
	int64_t
	    renew_backoff; /* delay after the last failed renewal (renewer) */
	atomic_bool finished;  /* the handler returned: from now on the fenced
				  commit, not the keeper, says whether the
				  lease held */
	int64_t deadline_mono; /* claim + task.timeout_us, monotonic us;
				  0: no time limit */
	atomic_int end;	       /* DUE_END_*: how the try ended, set once */
	bool renew_over;       /* a timed-out try's lease is gone: stop
				  renewing it (renewer) */
	int refs;	       /* under mu */
	unsigned char *result;
	size_t result_len;
	char *error;
	char *parents; /* due_parent_results() text, read before the handler
			  (due__run_job); NULL: the task has no parents */
	int rc;
	due_tx_hook hook;
	void *hook_payload;
	int64_t done_mono;	/* when the handler returned */
	int64_t queued_mono;	/* when it was queued on its pool (mu) */
	due_job *next;		/* pool queue or completion queue (mu) */
	due_job *iprev, *inext; /* in-flight list (mu) */
};

struct due_worker {
	due_worker_opts o;
	char *url, *owner;
	handler *handlers; /* fixed once running */
	size_t n_handlers;
	pool **pools; /* [0] is the shared pool; fixed once running */
	size_t n_pools;
	pthread_mutex_t mu;	 /* the only lock: see the lock order above */
	pthread_cond_t done_cv;	 /* completer: completions queued, or stop */
	pthread_cond_t keep_cv;	 /* keeper: threads_stop, or a try with a
				    time limit was put in flight */
	pthread_cond_t renew_cv; /* renewer: threads_stop */
	pthread_cond_t idle_cv;	 /* drain: a job was retired */
	pthread_cond_t sched_cv; /* scheduler and pruner: threads_stop,
				    cron_poke (broadcast) */
	bool cron_poke;		 /* a schedule may have changed (mu) */
	atomic_bool listening;	 /* discovery hears the store's notes */
	atomic_bool retried;	 /* a fail of ours scheduled a retry:
				    discovery refills at once, so the retry
				    is on our wheel before it is due, with
				    no wait for the store's note */
	due_db *db;		 /* the shared connection (DUE_DB_CALL) */
	pthread_mutex_t db_mu;	 /* guards the two tickets below */
	pthread_cond_t db_cv;	 /* a turn at db ended */
	unsigned long db_next, db_serving; /* FIFO tickets (db_mu) */
	due_job *inflight; /* every claimed, uncommitted job (mu) */
	int n_inflight;	   /* (mu) */
	due_job *done_head, *done_tail; /* handler returned, to commit (mu) */
	int wake_fd;			/* eventfd: wakes the claimer */
	atomic_bool stop, running;
	atomic_bool force; /* a second stop request: the grace ends now */
	atomic_llong
	    stop_mono; /* when stop was first requested (monotonic us) */
	int64_t grace_over_at;	/* when the grace ran out, 0 before (mu) */
	int64_t returned_at;	/* when every handler had returned after the
				   grace, 0 before (mu): their commits'
				   bound runs from it (keeper.c) */
	bool stop_said;		/* the stop was logged (mu) */
	atomic_bool fold;	/* claimer is draining: it commits completions
				   together with its next claim */
	atomic_bool relay_off;	/* a relay claim failed: relays wait for the
				   claimer's next good claim (claimer.c) */
	int relays;		/* relay claims under way (mu); the drain
				   waits for them as for flight */
	int64_t last_done_mono; /* the latest handler finish (mu) */
	bool completer_parked;	/* completer waits for a signal (mu) */
	atomic_bool abandon;	/* shutdown gave up on the store: stop retrying,
				   leave uncommitted tries to lease expiry */
	bool threads_stop;	/* under mu: keeper and completer may exit */
	int64_t conn_timeout_us;   /* the bound of the worker's connections */
	int64_t renew_timeout_us;  /* the renewer's: lease/3 */
	due_call_watch db_call;	   /* the call at w->db now (keeper looks) */
	due_call_watch renew_call; /* the renewer's call now */
	pthread_t keeper, renewer, completer, scheduler, pruner;
	bool sched_started, pruner_started;
	struct {
		atomic_llong claimed, done, failed, dead, stale, cancelled,
		    lease_lost, claim_queries, empty_claims, reclaim_queries,
		    store_errors, wheel_fired, refills, notifications, pruned,
		    lease_unconfirmed, stalled_calls;
	} st;
	int64_t late[1024]; /* lateness of recent claims (us), ring (mu) */
	size_t n_late;
	int64_t poll_us;	 /* effective poll (or safety poll) interval */
	due_outage claim_outage; /* the claimer thread's */
	/* the claimer's reclaims, apart: a store that claims but cannot
	   reclaim (a Redis shard whose master lost its replica) would
	   otherwise open and close claim_outage, two log lines, each round */
	due_outage reclaim_outage;
};

/* common.c: waits, logging (any thread).  The monotonic clock is
   due__mono_us (src/base/time.c). */
void due__wlog(due_worker *w, int level, const char *fmt, ...) DUE_PRINTF(3, 4);
void due__wake(due_worker *w);
void due__wait_wake(due_worker *w, int64_t timeout_us);
void due__cond_wait_us(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t us);
int due__cond_init(pthread_cond_t *cv);
/* The lease clock's margin for this worker's lease (see Invariants). */
int64_t due__lease_margin(const due_worker *w);
/* The lease clock of a try whose latest confirmed claim or renewal was
   sent at `sent`: its stop (lease - margin) and its SIGKILL (lease - 2/3
   margin), read by the keeper and by the handler's own thread alike. */
int64_t due__lease_stop_at(const due_worker *w, int64_t sent);
int64_t due__lease_kill_at(const due_worker *w, int64_t sent);

/* outage.c: failed store calls, connections (any thread). */
void due__bg_sleep(due_worker *w, int64_t us);
due_db *due__connect_retry(due_worker *w, const char *who);
/*
** A turn at the shared connection w->db, for one store call: `call` runs
** between due__db_lock() and due__db_unlock_rc(), which returns its code.
**   rc = DUE_DB_CALL(w, due_extend(w->db, &eo, id, attempt, lease_us));
** Once shutdown has given up on the store (`abandon`), due__db_lock()
** answers false and the call is not made: DUE_ESTORE, "the worker is
** stopping and gave up on the store".  So a stop waits for at most the
** one call under way, bounded, not for a queue of them.
*/
bool due__db_lock(due_worker *w, const char *what);
int due__db_unlock_rc(due_worker *w, int rc);
int due__db_skip(due_worker *w);
#define DUE_DB_CALL(w, call)                                                   \
	(due__db_lock((w), #call) ? due__db_unlock_rc((w), (call))             \
				  : due__db_skip(w))
/* The call watch around one call (due__db_lock does it for w->db). */
void due__call_begin(due_call_watch *cw, const char *what);
void due__call_end(due_worker *w, due_call_watch *cw, const char *conn, int rc);

void due__outage_fail(due_worker *w, due_outage *o, const char *fmt, ...)
    DUE_PRINTF(3, 4);
void due__outage_over(due_worker *w, due_outage *o);

/* job.c: jobs, pool queues, running a handler. */
void due__job_free(due_job *j);
/* sent: when the claim that returned t was sent (monotonic us) */
due_job *due__job_new_locked(due_worker *w, pool *p, due_task *t, int64_t sent);
void due__pool_enqueue_locked(pool *p, due_job *j, bool wake);
due_job *due__pool_dequeue_locked(pool *p);
void due__pool_wake_locked(pool *p);
bool due__pool_fast_locked(const pool *p);
int64_t due__pools_unstall_locked(due_worker *w, int64_t now);
int64_t due__pools_unstall(due_worker *w, int64_t now);
bool due__run_job(due_worker *w, due_job *j);
pool *due__pool_new(const char *kind, int size);

/* pool.c: the pool threads. */
int due__pools_start(due_worker *w);

/* completer.c */
void due__count_outcome(due_worker *w, const due_job *j, bool ok, int outcome);
void due__retire_locked(due_worker *w, due_job *j);
void *due__completer_main(void *arg);

/* keeper.c */
void *due__keeper_main(void *arg);
/*
** The grace after a stop (the keeper, and the claimer's drain in
** worker.c): the monotonic time it ends, 0 while no stop is asked.  mu held.
*/
int64_t due__grace_check_locked(due_worker *w, int64_t now);
/* How long a store call may go unanswered before the keeper says so. */
#define STALL_LOG_US 3000000LL

/* renewer.c */
void *due__renewer_main(void *arg);

/* scheduler.c */
void *due__scheduler_main(void *arg);

/* pruner.c */
void *due__pruner_main(void *arg);

/* claimer.c (the claimer thread only) */
int due__claim_round(due_worker *w, due_db *db, bool *filled,
		     int64_t *retry_us);
void due__set_fold(due_worker *w, bool fold);
void due__run_inline(due_worker *w);
int due__reclaim_max(due_worker *w, due_db *db, int64_t max_us, int64_t *next);
void due__claim_loop(due_worker *w, due_db *db);
/* claimer.c, called by a fast pool's thread (see there) */
bool due__claim_relay(due_worker *w, pool *p);

/* discovery.c (the claimer thread only) */
bool due__try_wheel(due_worker *w, due_db *db);

/* Why a running handler is told to stop (due__job_stop, due__job_stop_why). */
enum {
	DUE_STOP_NONE = 0,
	DUE_STOP_LEASE_LOST,
	DUE_STOP_CANCEL,
	DUE_STOP_SHUTDOWN,
	DUE_STOP_TIMEOUT,
	DUE_STOP_UNCONFIRMED /* the lease clock ran out (keeper.c) */
};

/* How a try ended (due_job.end), decided once by compare-and-swap. */
enum { DUE_END_RUNNING = 0, DUE_END_RETURNED, DUE_END_TIMED_OUT };

/*
** Tell a job's handler to stop for `why`: records the first reason and
** raises `lost`.  Returns true when this call raised it (it was not yet
** raised), false when the job was already told.  Any thread.
*/
bool due__job_stop(due_job *j, int why);
/* The reason recorded by due__job_stop, DUE_STOP_NONE while running on. */
int due__job_stop_why(const due_job *j);
/* Words for a reason, for logs and error texts ("worker shutdown"). */
const char *due__stop_reason_name(int why);
/*
** When a handler still running must be killed at once, whatever its kill
** grace (the lease clock ran out), or 0.  Command and pipe handlers.
*/
int64_t due__job_kill_by(const due_job *j);
/*
** When the lease clock says the job's command must be gone if no renewal
** is confirmed before then (confirmed_mono + lease - 2/3 margin), for its
** guard process, which SIGKILLs it then even if this process cannot act;
** 0 for a job with no worker or whose handler has returned.
*/
int64_t due__job_guard_kill_at(const due_job *j);
/* The lease clock's line for a try it stopped, once per try: the keeper's
   (after false), or the handler thread's for a stop the keeper did not see
   before the handler returned (after true). */
void due__job_log_unconfirmed(due_worker *w, const due_job *j, int64_t now,
			      bool after);
/* Set kill_by unless it is already set (the first lease clock decides). */
void due__job_set_kill_by(due_job *j, int64_t at);
/*
** due_job_lease_held() for the worker's own threads: false once the job
** was told to stop, or once its lease clock ran out, in which case this
** call stops it (DUE_STOP_UNCONFIRMED) if the keeper has not yet.
*/
bool due__job_lease_check(due_job *j);

#endif
