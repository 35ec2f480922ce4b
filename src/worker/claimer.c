/*
** claimer.c - claiming: claim rounds over the pools, the polling loop,
** inline mode and the reclaim of expired leases.
**
** Claimer thread: the thread that called due_worker_run().  Discovery
** decides when to claim (discovery.c with the wheel, due__claim_loop() here
** when polling); this file says how.
**   Does:      for each pool, claims at most size - busy due tasks (so no
**              task waits in memory holding a lease, CONTRACT §5), folding
**              the pool's finished completions into the same transaction
**              while it drains a backlog (`fold`); puts the claimed tasks in
**              flight and queues them on their pool, or in inline mode runs
**              the shared pool's jobs itself (that pool has one slot: one
**              claim, one run, then the next claim); takes back expired leases
**              when the earliest lease in the store ends (at most every
**              2 s when polling).
**              A fast pool's thread may make the pool's next claim of a
**              drain itself (due__claim_relay, below: the one function
**              here that runs on another thread).
**   Owns:      nothing of the store: each claim or reclaim is one turn at
**              the shared connection due_worker_run() opened (DUE_DB_CALL).
**   Locks:     mu, to count a pool's free slots, to take the completions it
**              folds and to put claimed jobs in flight; never across a
**              store call.
**   Blocks on: the eventfd (due__wait_wake()) between polls and during
**              back-off (10 ms doubling to 2 s after a failed claim), the
**              store, and in inline mode the handler.
**   Ends:      when stop is set, or in once-mode when nothing due is left.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "worker/worker_internal.h"

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

/*
** A finished plain completion of pool p: what a claim for p folds (a
** failure or a hook goes to the completer).
*/
static bool foldable(const due_job *j, const pool *p)
{
	return j->pool == p && j->rc == 0 && !j->hook;
}

/* Take the pool's finished plain completions off the done queue.  mu held. */
static size_t take_done_locked(due_worker *w, pool *p, due_job **out,
			       size_t cap)
{
	due_job **link = &w->done_head, *last = NULL;
	size_t n = 0;

	while (*link && n < cap) {
		due_job *j = *link;
		if (foldable(j, p)) {
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
** The slots of a pool that a claim could fill now: the free ones and those
** of its finished plain completions (a claim folds them).  mu held.
*/
static int avail_locked(const due_worker *w, const pool *p)
{
	int avail = p->size - p->busy;
	for (const due_job *j = w->done_head; j; j = j->next)
		avail += foldable(j, p);
	return avail;
}

/*
** While draining, slots free up one handler at a time.  When less than
** half of a pool could be claimed now, give the handlers about to finish
** up to 200 us, so one transaction carries several completions and
** claims instead of one each.  A fast pool (job.c) whose thread is still
** running its queue wakes the claimer itself once the queue is empty (or
** the stall check wakes the claimer within POOL_STALL_US): skip it until
** then.  Only while jobs are queued: a fast pool's handlers that all
** turned slow at once must not leave its free slots idle.  Returns true
** to skip the pool this round.
*/
static bool gather(due_worker *w, pool *p)
{
	for (int round = 0; round < 4 && atomic_load(&w->fold) && p->size >= 4;
	     round++) {
		pthread_mutex_lock(&w->mu);
		int avail = avail_locked(w, p);
		/* a fast pool's thread is still running its queue */
		bool running_queue = due__pool_fast_locked(p) && p->head;
		pthread_mutex_unlock(&w->mu);
		if (avail >= p->size / 2)
			return false;
		if (running_queue)
			return true;
		struct timespec ts = {0, 50000};
		nanosleep(&ts, NULL);
	}
	return false;
}

/*
** Claim for one pool, folding its finished completions into the same
** transaction when there are any (one commit per batch).  *sent is when
** the claim was sent, or earlier: the start of its tasks' lease clock.
*/
static int claim_pool(due_worker *w, due_db *db, pool *p, int limit,
		      due_job **taken, size_t nt, due_task_list **out,
		      int64_t *sent)
{
	const char *kinds[65];
	due_completion items[COMPLETE_BATCH];
	due_claim_opts o;
	int rc;

	*out = NULL;
	if (!claim_opts_for(w, p, limit, kinds, &o)) {
		/* a pool without kinds runs no handler, so it has no
		   completions; should it ever, the completer commits them */
		if (nt) {
			pthread_mutex_lock(&w->mu);
			untake_locked(w, taken, nt);
			pthread_mutex_unlock(&w->mu);
		}
		return 0;
	}
	atomic_fetch_add(&w->st.claim_queries, 1);
	*sent = due__mono_us();
	if (nt == 0)
		return DUE_DB_CALL(w, due_claim_ex(db, out, &o));
	for (size_t i = 0; i < nt; i++)
		items[i] =
		    (due_completion){taken[i]->task.id, taken[i]->task.attempt,
				     taken[i]->result, taken[i]->result_len, 0};
	if ((rc = DUE_DB_CALL(
		 w, due_complete_and_claim(db, items, nt, &o, out))) < 0) {
		pthread_mutex_lock(&w->mu);
		untake_locked(w, taken, nt);
		pthread_mutex_unlock(&w->mu);
		return rc;
	}
	pthread_mutex_lock(&w->mu);
	for (size_t i = 0; i < nt; i++) {
		due__count_outcome(w, taken[i], true, (int)items[i].outcome);
		due__retire_locked(w, taken[i]);
	}
	pthread_mutex_unlock(&w->mu);
	return 0;
}

/*
** Put the tasks of a claim in flight on their pool, waking a thread for
** them unless the caller is the pool's thread (a relay).  mu held.
*/
static void queue_claimed_locked(due_worker *w, pool *p, due_task_list *l,
				 bool wake, int64_t sent)
{
	for (size_t k = 0; k < l->count; k++) {
		/* claim time in the store's clock is lease_until - lease */
		const due_task *t = &l->items[k];
		w->late[w->n_late++ % 1024] =
		    t->lease_until - w->o.lease_us - t->due_at;
		due_job *j = due__job_new_locked(w, p, &l->items[k], sent);
		if (!j) /* out of memory: the lease will expire */
			continue;
		p->busy++;
		due__pool_enqueue_locked(p, j, wake);
	}
	atomic_fetch_add(&w->st.claimed, (long long)l->count);
	if (l->count == 0)
		atomic_fetch_add(&w->st.empty_claims, 1);
}

/*
** One claiming round over every pool with free slots.  *filled is set
** when some pool got all it asked for, or had no free slot to ask with
** (either way more may be due).  *retry_us is the shortest retry_in_us of
** the pools' claims (due tasks held back by a kind's rate or running
** limit: claim again then, not sooner), 0 when none said so.  Returns the
** number of tasks claimed, or a negative code on a store error.
*/
int due__claim_round(due_worker *w, due_db *db, bool *filled, int64_t *retry_us)
{
	int total = 0;

	*filled = false;
	*retry_us = 0;
	for (size_t i = 0; i < w->n_pools && !atomic_load(&w->stop); i++) {
		pool *p = w->pools[i];
		due_task_list *l = NULL;
		int free_slots, rc;
		int64_t sent = 0;

		due_job *taken[COMPLETE_BATCH];
		size_t nt = 0;

		if (gather(w, p)) {
			*filled = true; /* as if full: its thread wakes us */
			continue;
		}
		pthread_mutex_lock(&w->mu);
		if (p->claiming) {
			/* a relay claims for it: its thread wakes us unless
			   it got all it asked for */
			pthread_mutex_unlock(&w->mu);
			*filled = true;
			continue;
		}
		if (atomic_load(&w->fold))
			nt = take_done_locked(w, p, taken, COMPLETE_BATCH);
		free_slots = p->size - p->busy + (int)nt;
		p->claiming = free_slots > 0;
		pthread_mutex_unlock(&w->mu);
		if (free_slots <= 0) {
			/* full: we did not look, so more may be due; a freed
			   slot wakes the claimer to look again */
			*filled = true;
			continue;
		}
		rc = claim_pool(w, db, p, free_slots, taken, nt, &l, &sent);
		pthread_mutex_lock(&w->mu);
		p->claiming = false;
		if (l)
			queue_claimed_locked(w, p, l, true, sent);
		pthread_mutex_unlock(&w->mu);
		if (rc < 0)
			return rc;
		atomic_store(&w->relay_off, false);
		if (!l)
			continue;
		if (l->retry_in_us > 0 &&
		    (*retry_us == 0 || l->retry_in_us < *retry_us))
			*retry_us = l->retry_in_us;
		if ((int)l->count == free_slots)
			*filled = true;
		total += (int)l->count;
		due_task_list_free(l);
	}
	return total;
}

/*
** Relay claims.  A fast pool's thread that has run its queue dry while
** the claimer drains would wake the claimer, which would fold the
** completions into its next claim and wake a pool thread for the jobs:
** two wake-ups, two context switches and two sleeps per batch, about a
** fifth of a worker's CPU with microsecond handlers.  Instead the pool's
** thread makes that claim itself, on the shared connection in its turn
** (DUE_DB_CALL, like every thread that talks to the store), folding the
** pool's completions, and runs what it got; the claimer sleeps on.
**
** Only for a pool the claimer would claim for now with no gather to wait
** for: fast, nothing queued, every slot free but the completions this
** claim folds, while the claimer drains (fold) and nothing stops it.  The
** claimer is woken as before whenever the relay does not get all it
** asked for (the backlog may be over, or a kind's limit holds tasks back:
** the claimer decides when to look again), and when a relay's claim
** fails (relays then pause until the claimer claims again: no thread
** retries a failing store in a loop, and the claimer logs the outage).
** What the relay claimed runs on this thread, so a job that turns out
** slow holds the others back only until the stall check (job.c), as for
** any fast pool; the claimer, not running handlers, is never held up.
** One claim per pool at a time (pool.claiming); the drain waits for a
** relay under way (w->relays) as for the tries in flight.  Returns true
** when it claimed (and woke the claimer if needed), false when the caller
** should wake the claimer.
*/
bool due__claim_relay(due_worker *w, pool *p)
{
	due_job *taken[COMPLETE_BATCH];
	due_task_list *l = NULL;
	int free_slots, rc;
	int64_t sent = 0;
	size_t nt;

	pthread_mutex_lock(&w->mu);
	if (!atomic_load(&w->fold) || atomic_load(&w->stop) ||
	    atomic_load(&w->relay_off) || w->threads_stop || p->claiming ||
	    p->head || !due__pool_fast_locked(p) ||
	    avail_locked(w, p) < p->size) {
		pthread_mutex_unlock(&w->mu);
		return false;
	}
	nt = take_done_locked(w, p, taken, COMPLETE_BATCH);
	free_slots = p->size - p->busy + (int)nt;
	p->claiming = true;
	w->relays++;
	pthread_mutex_unlock(&w->mu);

	rc = claim_pool(w, w->db, p, free_slots, taken, nt, &l, &sent);

	pthread_mutex_lock(&w->mu);
	p->claiming = false;
	w->relays--;
	if (l)
		queue_claimed_locked(w, p, l, false, sent);
	if (atomic_load(&w->stop))
		pthread_cond_broadcast(&w->idle_cv); /* the drain waits */
	pthread_mutex_unlock(&w->mu);
	if (rc < 0) {
		atomic_fetch_add(&w->st.store_errors, 1);
		due__wlog(w, 2,
			  "relay claim failed (the claimer takes over): %s",
			  due_error_last());
		atomic_store(&w->relay_off, true);
	}
	if (rc < 0 || !l || (int)l->count < free_slots || l->retry_in_us > 0)
		due__wake(w);
	due_task_list_free(l);
	return true;
}

/*
** The claimer says whether it is draining (folding completions into its
** claims).  Handlers do not wake the completer while it is; when it stops,
** the completer is woken for what was left.
*/
void due__set_fold(due_worker *w, bool fold)
{
	if (atomic_exchange(&w->fold, fold) && !fold) {
		pthread_mutex_lock(&w->mu);
		pthread_cond_signal(&w->done_cv);
		pthread_mutex_unlock(&w->mu);
	}
}

/* Inline mode: the claimer runs what it claimed for the shared pool. */
void due__run_inline(due_worker *w)
{
	pool *p = w->pools[0];
	for (;;) {
		pthread_mutex_lock(&w->mu);
		due_job *j = due__pool_dequeue_locked(p);
		pthread_mutex_unlock(&w->mu);
		if (!j)
			return;
		if (due__run_job(w, j))
			due__wake(w);
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
** Take back expired leases.  *next is when to look again (monotonic us):
** at the earliest lease expiry the store reported, at most max_us from
** now, so a crashed worker's task is picked up about when its lease ends
** without polling faster than needed; after a failed call, in
** RECLAIM_RETRY_US, and -1 is returned.
*/
#define RECLAIM_MAX_US 2000000LL
#define RECLAIM_RETRY_US 1000000LL

int due__reclaim_max(due_worker *w, due_db *db, int64_t max_us, int64_t *next)
{
	int64_t now = due__mono_us(), wait_us = max_us;
	due_reclaimed r;

	atomic_fetch_add(&w->st.reclaim_queries, 1);
	if (DUE_DB_CALL(w, due_reclaim_expired(db, &r)) < 0) {
		due__outage_fail(w, &w->reclaim_outage,
				 "reclaiming expired leases");
		*next = now + RECLAIM_RETRY_US;
		return -1;
	}
	due__outage_over(w, &w->reclaim_outage);
	if (r.rescheduled + r.dead + r.cancelled)
		due__wlog(
		    w, 1,
		    "reclaimed expired leases: %lld rescheduled, %lld dead, "
		    "%lld cancelled",
		    (long long)r.rescheduled, (long long)r.dead,
		    (long long)r.cancelled);
	if (r.next_expiry > 0 && r.next_expiry - r.now + 1000 < wait_us)
		wait_us = r.next_expiry - r.now + 1000;
	*next = now + (wait_us < 1000 ? 1000 : wait_us);
	return 0;
}

/*
** The claiming loop.  Claims as soon as slots free up while the previous
** round filled them (more is due), else once per poll interval, or
** sooner when the store said held-back tasks may be claimable then
** (retry_in_us).  Returns when stopping, or in once-mode when nothing
** due is left: tasks held back by a limit that frees within
** ONCE_MAX_WAIT_US (a running slot, a rate's next allowance) keep it
** running; tasks of a paused kind, or held by a rate for longer (say 1
** an hour), do not: `--once` is for draining, not for waiting an hour.
*/
#define ONCE_MAX_WAIT_US (10LL * 1000000)

void due__claim_loop(due_worker *w, due_db *db)
{
	int64_t next_reclaim = 0, next_poll = 0, backoff = 10000;
	int64_t retry_at = 0; /* held-back tasks: claim again then */
	bool more = true;

	while (!atomic_load(&w->stop)) {
		int64_t now = due__mono_us(), retry_us = 0;
		bool filled = false;
		int n = 0;

		if (now >= next_reclaim)
			due__reclaim_max(w, db, RECLAIM_MAX_US, &next_reclaim);
		if (more || now >= next_poll) {
			n = due__claim_round(w, db, &filled, &retry_us);
			if (n < 0) {
				due__outage_fail(w, &w->claim_outage,
						 "claiming");
				due__wait_wake(w, backoff);
				backoff = backoff * 2 > 2000000 ? 2000000
								: backoff * 2;
				continue;
			}
			due__outage_over(w, &w->claim_outage);
			backoff = 10000;
			more = filled;
			due__set_fold(w, more || w->o.once);
			next_poll = due__mono_us() + w->poll_us;
			if (w->o.once && retry_us > ONCE_MAX_WAIT_US)
				retry_us = 0; /* not soon: as if paused */
			retry_at = retry_us ? due__mono_us() + retry_us : 0;
			if (retry_at && retry_at < next_poll)
				next_poll = retry_at;
		}
		if (w->o.mode == DUE_MODE_INLINE)
			due__run_inline(w);
		if (w->o.once && n == 0 && !more && !retry_at &&
		    inflight(w) == 0)
			return;
		if (more && n > 0)
			continue; /* slots may still be free in other pools */
		int64_t until =
		    (more ? next_reclaim
			  : (next_poll < next_reclaim ? next_poll
						      : next_reclaim)) -
		    due__mono_us();
		/* once-mode re-checks promptly until drained, except while
		   the store holds tasks back: then their retry time decides */
		if (w->o.once && !retry_at)
			until = until > 50000 ? 50000 : until;
		int64_t now2 = due__mono_us(),
			stall = due__pools_unstall(w, now2);
		if (stall && stall - now2 < until)
			until = stall - now2;
		due__wait_wake(w, until > 0 ? until : 0);
		if (w->o.once && !retry_at)
			more = true;
	}
}
