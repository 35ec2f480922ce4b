/*
** discovery.c - discovery with the timing wheel: when to claim, without
** polling the store.
**
** The wheel is a cache of the store: it holds the ids of tasks due within
** the horizon, in ticks of 1 ms of the monotonic clock.  The store's clock
** maps onto it through `offset` (store time - monotonic time, measured at
** each refill; exact for SQLite, within a round trip for PostgreSQL).  A
** due tick is rounded up, so the wheel never fires before the store would
** call the task due; the claim statement decides in any case.  Several
** workers may hold the same id: whoever claims first gets it, the others'
** claims come back empty.  docs/internals/discovery.md tells the rest.
**
** Runs in the claimer thread (there is no discovery thread), when the
** store can notify this connection of new submits and neither opts.no_wheel
** nor opts.once is set; otherwise the claimer polls (due__claim_loop()).
**   Does:      refills the wheel from the store (at most every 5 ms, at once
**              after a notification or a retry our completer scheduled,
**              within half a lease after fired ids another worker may
**              have claimed, else once per safety poll), claims
**              when the wheel fires, and again after retry_in_us when a
**              claim says due tasks were held back by a kind's rate or
**              running limit (their ids have left the wheel by then),
**              reclaims when the refill says the earliest lease has ended.
**              A resumed kind's tasks come back with the refill its
**              notification triggers (upcoming leaves paused kinds out).
**   Owns:      the wheel, and the worker's second connection, which only
**              listens (worker_internal.h: Connections).
**   Locks:     none of its own; the claim rounds take mu (claimer.c).
**   Blocks on: poll() of the eventfd and the listening socket until the
**              wheel's next fire, refill or reclaim; the store.
**   Ends:      when stop is set.
*/
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "wheel/wheel.h"
#include "worker/worker_internal.h"

/* The state of discovery, the claimer's own. */
typedef struct disc {
	due_wheel *wheel;
	due_db *ldb; /* the listening connection (listen/listen_drain only) */
	int listen_fd;
	int64_t offset;	     /* store us - monotonic us */
	int64_t next_refill; /* monotonic us */
	int64_t next_reclaim;
	int64_t reclaim_hold; /* a reclaim failed: none again before then */
	int64_t last_refill;
	int64_t recheck_at;
	int rechecks;
	int64_t retry_at; /* held-back tasks: claim again then; 0: none */
	bool exact_clock; /* the store's clock is this host's (SQLite) */
	bool listening;	  /* notifications work on this connection */
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

/* the reach of a refill stays inside the wheel's own span (64^4 ms, about
   4.7 h: wheel.md), unless --horizon itself asks for more */
#define REACH_MAX_US (4LL * 3600 * 1000000)

/*
** How far ahead a refill loads: the horizon, or further when the safety
** poll is longer than half of it, so that a task the refill leaves out is
** still half a horizon from due when the next safety poll's refill comes.
** Without it a quiet store's task due beyond the horizon (submitted before
** this worker started, or while it was busy) waited for a later poll: with
** `--poll 1h` an hour late.
*/
static int64_t refill_reach(const due_worker *w)
{
	int64_t h = w->o.horizon_us, reach = w->poll_us + h / 2,
		most = h > REACH_MAX_US ? h : REACH_MAX_US;
	return reach < h ? h : reach > most ? most : reach;
}

/* When the next safety poll's refill comes after one: within the poll,
   and while what that refill left out is still half a horizon away (the
   reach is at least the horizon, so this is at least half of it). */
static int64_t refill_every(const due_worker *w)
{
	int64_t until = refill_reach(w) - w->o.horizon_us / 2;
	return w->poll_us < until ? w->poll_us : until;
}

/*
** Load the ids due before now + refill_reach() into the wheel.  Also
** learns the next lease expiry, so the reclaim check needs no query of its
** own.
*/
static int refill(due_worker *w, due_db *db, disc *d)
{
	int64_t mono = due__mono_us();
	due_time now;
	due_upcoming *u = NULL;
	int rc;

	if (d->exact_clock)
		now = due_time_now_host();
	else if (d->last_refill) /* the offset of the last refill will do */
		now = mono + d->offset;
	else if ((rc = DUE_DB_CALL(w, due_now(db, &now))) < 0)
		return rc;
	atomic_fetch_add(&w->st.refills, 1);
	rc = DUE_DB_CALL(w, due_upcoming_get(db, &u, d->kinds, d->n_kinds,
					     d->exclude, now + refill_reach(w),
					     w->o.wheel_max));
	if (rc < 0)
		return rc;
	/* the store read u->now before this returned, and maybe well after
	   `mono` (the call waits for its turn at the shared connection): the
	   clock read now gives an offset that is never too high, so the wheel
	   never fires before the store calls the task due (a too-high one
	   fired early, and the claim came back empty) */
	if (u->now)
		d->offset = u->now - due__mono_us();
	else
		d->offset = now - mono;
	for (size_t i = 0; i < u->count; i++) {
		int64_t tick = (u->due_at[i] - d->offset + 999) / 1000;
		due__wheel_start(NULL, d->wheel, u->ids[i], tick);
	}
	d->last_refill = mono;
	d->next_refill = mono + refill_every(w);
	if (u->truncated && u->count) /* the rest is loaded as time moves on */
		d->next_refill = u->due_at[u->count - 1] - d->offset - 100000;
	/* an expired lease stays in the store while reclaims fail: the
	   expiry refill reports must not bring the retry forward, or every
	   refill (every 5 ms) would be followed by a failing reclaim */
	if (u->next_expiry) {
		int64_t at = u->next_expiry - d->offset + 1000;
		if (at < d->reclaim_hold)
			at = d->reclaim_hold;
		if (at < d->next_reclaim)
			d->next_reclaim = at;
	}
	due_upcoming_free(u);
	return 0;
}

/*
** Consume notifications; true if any arrived.  A failed drain (the
** listening session broke, or gave up on a store that did not answer)
** forgets the socket: the next listen makes a new session, perhaps on the
** same descriptor number, and that counts as a new socket (wheel_wait
** refills then, for the submits no session heard).
*/
static bool drain_notes(due_worker *w, due_db *db, disc *d)
{
	int n = 0;
	(void)db;
	if (d->listen_fd < 0)
		return false;
	if (due_listen_drain(d->ldb, &n) < 0) {
		d->listen_fd = -1;
		return false;
	}
	if (n == 0)
		return false;
	atomic_fetch_add(&w->st.notifications, n);
	/* a note may be a schedule's put or removal (due_cron_put notifies):
	   the scheduler looks again (scheduler.c).  Only the first note after
	   its pass wakes it: a busy store's notes cost no wake-ups */
	pthread_mutex_lock(&w->mu);
	if (!w->cron_poke) {
		w->cron_poke = true;
		pthread_cond_broadcast(&w->sched_cv);
	}
	pthread_mutex_unlock(&w->mu);
	return true;
}

/*
** Discovery falls back to polling: the wheel's 30 s safety poll is no
** polling interval, so poll at the polling default unless one was given.
*/
static void fall_back(due_worker *w)
{
	if (!w->o.poll_us && w->poll_us > 1000000)
		w->poll_us = 1000000;
}

/*
** Can this store deliver notifications to us?  Send one and wait for it
** (PgBouncer in transaction pooling mode silently drops LISTEN).
*/
static bool listen_works(due_worker *w, due_db *db, disc *d)
{
	/* a connection of its own (worker_internal.h: Connections), its
	   waits bounded as the others' */
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	oo.timeout_us = w->conn_timeout_us;
	if (!d->ldb && due_open(&d->ldb, w->url, &oo) < 0) {
		fall_back(w);
		due__wlog(w, 1,
			  "cannot open a connection to listen for new tasks "
			  "(%s): polling every %lld ms",
			  due_error_last(), (long long)w->poll_us / 1000);
		return false;
	}
	if (due_listen(d->ldb, &d->listen_fd) < 0) {
		fall_back(w);
		due__wlog(
		    w, 1,
		    "cannot listen for new tasks (%s): polling every %lld ms",
		    due_error_last(), (long long)w->poll_us / 1000);
		return false;
	}
	if (DUE_DB_CALL(w, due_notify(db)) < 0) {
		fall_back(w);
		due__wlog(w, 1, "cannot notify (%s): polling every %lld ms",
			  due_error_last(), (long long)w->poll_us / 1000);
		return false;
	}
	for (int i = 0; i < 100; i++) {
		struct pollfd p = {d->listen_fd, POLLIN, 0};
		if (drain_notes(w, db, d))
			return true;
		poll(&p, 1, 10);
	}
	fall_back(w);
	due__wlog(w, 1,
		  "notifications are not delivered on this connection (a "
		  "transaction-pooling proxy?): polling every %lld ms instead",
		  (long long)w->poll_us / 1000);
	return false;
}

/* while no listening session is up, how often wheel_wait tries for one */
#define RELISTEN_US 1000000LL

/* Sleep until `until` (monotonic us), a slot frees, or a submit is seen. */
static void wheel_wait(due_worker *w, due_db *db, disc *d, int64_t until)
{
	struct pollfd p[2];
	int64_t left = until - due__mono_us();
	uint64_t v;

	/* a reconnected session has a new socket (and listens again: the
	   store's listen() resets a broken listening connection); while the
	   store is unreachable there is none, and a later wait tries again.
	   Submits made while no session listened were not announced: refill
	   at once when listening resumes on a new socket */
	int was = d->listen_fd;
	if (d->listening && due_listen(d->ldb, &d->listen_fd) < 0)
		d->listen_fd = -1;
	if (d->listen_fd >= 0 && d->listen_fd != was) {
		d->next_refill = 0; /* and now: not after this wait */
		return;
	}
	p[0] = (struct pollfd){w->wake_fd, POLLIN, 0};
	p[1] = (struct pollfd){d->listen_fd, POLLIN, 0};
	if (drain_notes(w, db, d)) { /* buffered by an earlier query */
		d->next_refill = 0;
		return;
	}
	/* no session (the store restarted, or is unreachable): try again
	   within RELISTEN_US, not at the safety poll (an idle worker's wait):
	   a submit made once the store is back must not wait for the poll */
	if (d->listening && d->listen_fd < 0 && left > RELISTEN_US)
		left = RELISTEN_US;
	if (left <= 0)
		return;
	if (poll(p, d->listen_fd >= 0 ? 2 : 1, (int)((left + 999) / 1000)) <= 0)
		return;
	if (p[0].revents & POLLIN) {
		ssize_t r = read(w->wake_fd, &v, sizeof(v));
		(void)r;
	}
	if (d->listen_fd >= 0 && (p[1].revents & POLLIN) &&
	    drain_notes(w, db, d))
		d->next_refill = 0;
}

/*
** Ids fired and not all claimed: another worker may hold them now, on a
** lease the last refill did not see (it was taken after).  Should that
** worker die, its lease must be taken back when it ends, not at the next
** safety poll: refill within half a lease (ours; a fleet's workers
** usually share it), which learns the earliest expiry, and the reclaim
** follows it (refill()).  At most one such refill per half lease, however
** many races are lost; a held-back id (a kind's limit) costs the same.
*/
static void lost_race(due_worker *w, disc *d, int64_t now)
{
	int64_t at = now + w->o.lease_us / 2;

	if (at < d->next_refill)
		d->next_refill = at;
}

/* The earliest of the wheel's next fire, refill, reclaim and recheck. */
static int64_t wheel_deadline(due_worker *w, disc *d)
{
	int64_t until = d->next_refill, nd = due__wheel_next_due(d->wheel);

	(void)w;
	/* a refill is due, but the last was under 5 ms ago (wheel_loop
	   waits that long between two): sleep until then, do not spin */
	if (until < d->last_refill + 5000)
		until = d->last_refill + 5000;
	if (nd != DUE_WHEEL_NEVER && nd * 1000 < until)
		until = nd * 1000;
	if (d->next_reclaim < until)
		until = d->next_reclaim;
	if (d->recheck_at && d->recheck_at < until)
		until = d->recheck_at;
	if (d->retry_at && d->retry_at < until)
		until = d->retry_at;
	return until;
}

static void wheel_loop(due_worker *w, due_db *db, disc *d)
{
	int64_t backoff = 10000;
	bool more = true;

	while (!atomic_load(&w->stop)) {
		int64_t now = due__mono_us(), fired = 0, retry_us = 0;
		const char *what = "refilling the wheel";
		bool filled = false;
		int n;

		/* a retry our completer scheduled: put it on the wheel now,
		   whether or when the store's note arrives (MySQL's comes
		   within a second, a pooler's never) */
		if (atomic_exchange(&w->retried, false))
			d->next_refill = 0;
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
			int64_t again;
			if (due__reclaim_max(w, db, w->poll_us, &again) < 0) {
				d->next_reclaim = d->reclaim_hold = again;
			} else {
				d->reclaim_hold = 0;
				d->next_reclaim = now + 3600LL * 1000000;
				d->next_refill = 0; /* learn the next expiry */
			}
		}
		due__wheel_advance(d->wheel, now / 1000, count_fire, &fired);
		atomic_fetch_add(&w->st.wheel_fired, fired);
		/* tasks held back by a kind's limit fired from the wheel and
		   left it: the claim said when to try again (retry_at) */
		if (fired || more || (d->recheck_at && now >= d->recheck_at) ||
		    (d->retry_at && now >= d->retry_at)) {
			what = "claiming";
			if ((n = due__claim_round(w, db, &filled, &retry_us)) <
			    0)
				goto store_error;
			due__outage_over(w, &w->claim_outage);
			backoff = 10000;
			more = filled;
			d->retry_at = retry_us ? due__mono_us() + retry_us : 0;
			due__set_fold(w, more);
			/* PostgreSQL's clock is known to within a round trip:
			   if we woke early, look again shortly */
			if (fired && n == 0 && !d->exact_clock &&
			    d->rechecks < 4)
				d->recheck_at = now + (2000 << d->rechecks++);
			else if (n > 0 || !fired)
				d->recheck_at = 0, d->rechecks = 0;
			if (fired > n)
				lost_race(w, d, now);
			if (w->o.mode == DUE_MODE_INLINE)
				due__run_inline(w);
			if (more && n > 0)
				continue;
		}
		int64_t until = more ? now + w->poll_us : wheel_deadline(w, d);
		int64_t stall = due__pools_unstall(w, due__mono_us());
		wheel_wait(w, db, d, stall && stall < until ? stall : until);
		continue;
	store_error:
		due__outage_fail(w, &w->claim_outage, "%s", what);
		due__wait_wake(w, backoff);
		backoff = backoff * 2 > 2000000 ? 2000000 : backoff * 2;
		/* refill, then claim: what fell due meanwhile is claimed, and
		   the claim that works ends the outage */
		d->next_refill = 0;
		more = true;
	}
}

/*
** Run discovery with the wheel if the store can notify us; returns false
** (nothing done) when the worker should poll instead.
*/
bool due__try_wheel(due_worker *w, due_db *db)
{
	due_wheel_opts wo = DUE_WHEEL_OPTS_INIT;
	disc d = {.listen_fd = -1};

	if (w->o.no_wheel || w->o.once)
		return false;
	/* the store's clock is this host's: wheel ticks can be exact */
	d.exact_clock = due__db_host_clock(db);
	wo.start_tick = due__mono_us() / 1000;
	if (due__wheel_new(&d.wheel, &wo) < 0)
		return false;
	disc_kinds(w, &d);
	if (!listen_works(w, db, &d)) {
		due_close(d.ldb);
		due__wheel_free(d.wheel);
		return false;
	}
	d.listening = true;
	atomic_store(&w->listening, true);
	due__wlog(w, 1,
		  "discovery: timing wheel (horizon %lld ms, up to %d ids), "
		  "woken by new submits; safety poll every %lld ms",
		  (long long)w->o.horizon_us / 1000, w->o.wheel_max,
		  (long long)w->poll_us / 1000);
	wheel_loop(w, db, &d);
	atomic_store(&w->listening, false);
	due_close(d.ldb);
	due__wheel_free(d.wheel);
	return true;
}
