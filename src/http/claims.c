/*
** claims.c - POST /v1/claims, the long poll of workers over HTTP, and the
** server's reclaimer of expired leases.
**
** The promise (docs/HTTP.md): every poll is answered within its `wait`
** plus a small bound, with the tasks it claimed, with `[]`, or with a 503;
** and no task is claimed for a client that has gone.  So a waiting poll
** holds no thread: a poll is a record here, in one of three places:
**
**   ready    waiting for a claims thread, oldest first;
**   running  a claims thread is claiming for it (one store call);
**   parked   its claim found nothing: it waits for a notification, for
**            the next due task of its kinds, or for its wait to end.
**
** A claims thread takes a ready poll, checks that its client is still
** connected (a peek at the socket: end of stream or an error means gone,
** and nothing is claimed), claims once, and then either answers with what
** it claimed (checking the client once more: a claim made for a client
** that left meanwhile is given back at once with a requeue) or, finding
** nothing, asks the store when the next task of the poll's kinds comes
** due and parks the poll.  Each store call of these threads is bounded by
** CALL_US (their own handles, opened with that timeout), so a running poll
** ends soon whatever the store does.
**
** The watcher thread listens for the store's notifications (PostgreSQL
** LISTEN, the SQLite wake file: what wakes the workers' wheels) on a
** handle of its own, and moves parked polls back to ready when one comes
** or when a poll's wake-up time is reached.  It also takes back expired
** leases every RECLAIM_MAX_US at most (sooner when the next lease ends
** sooner), as a worker's reclaimer does: with only HTTP workers nobody
** else would, and a crashed HTTP client's task would stay CLAIMED
** forever.  And it ends TIMED_OUT the tries claimed here that ran past
** their time limit without a word from their client (tries.c).  Where
** the store cannot notify, parked polls look again every POLL_US.
**
** The deadlines need no store: the ticker (server.c), and the watcher
** when it wakes, answer `[]` to a poll that has looked and reached the
** end of its wait, and 503 store_busy to one that found no claims thread
** by the end of its wait + QUEUE_SLACK_US (or --timeout, when sooner).
** So a poll is answered by wait + QUEUE_SLACK_US + CALL_US + a tick at
** the latest; one whose claims thread had to connect first is claimed
** for if the connect ended by wait + CONNECT_GRACE_US (else 503), which
** keeps it within wait + 3 s.
**
** The watcher opens its handle once the worker API is first used
** (http_claims_arm): a server that only serves the dashboard and the
** admin API leaves the reclaiming to the workers and holds no connection
** for it.
**
** Ownership: a ready or parked poll belongs to this file's lists, under
** mu; whoever takes it off a list (a claims thread, the watcher, the
** ticker, stop) owns it, and the one that answers it resumes its
** connection and frees it, exactly once.  A running poll belongs to its
** claims thread alone.
*/
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "http/internal.h"

#define CALL_US 2000000LL	 /* the bound of a claims thread's store call */
#define QUEUE_SLACK_US 500000LL	 /* a poll not yet looked: wait + this */
#define POLL_US 1000000LL	 /* look again without notifications */
#define RECLAIM_MAX_US 1000000LL /* take expired leases back this often */
#define REOPEN_US 1000000LL	 /* the watcher's handle after an error */
#define RETRY_US 100000LL	 /* a poll's claim after a store error */
/* a poll whose claims thread had to connect first: still claimed for up
   to its wait + this, so that its answer (a claim of CALL_US, a tick)
   stays within the documented wait + 3 s */
#define CONNECT_GRACE_US 900000LL
#define WATCH_MAX_MS 200
#define OVERDUE_SCAN_US 200000LL /* look for tries past their limit */
#define DOUBT_SWEEP_US 500000LL	 /* look for claims made after a failed call */
#define EMPTY_MAX 5 /* readable, no note, in a second: a dead session */

struct http_poll {
	http_req *r;
	json_t *body; /* the parsed request: c.kinds point into it */
	http_claim_spec c;
	int fd;		   /* the client's socket, -1 when unknown */
	int64_t wait_end;  /* [] by then, once it has looked */
	int64_t queue_end; /* not looked by then: 503 store_busy */
	int64_t wake_at;   /* parked: look again then */
	bool tried;	   /* it has claimed once */
	bool retried;	   /* after a store error, on a new handle */
	http_poll *next;
};

static const char empty_json[] = "[]\n";

/* This claims thread's store handle (CALL_US bound), opened on first use. */
static _Thread_local due_db *claims_db;

static int open_bounded(const struct due_http *h, due_db **out)
{
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	int rc;

	o.max_payload = h->max_payload;
	o.timeout_us = CALL_US;
	if ((rc = due_open(out, h->db_url, &o)) < 0) {
		due_close(*out);
		*out = NULL;
	}
	return rc;
}

/* ------------------------------------------------------------------ */
/* Lists and answers (mu held unless said)                             */
/* ------------------------------------------------------------------ */

static void push(http_poll_list *l, http_poll *p)
{
	p->next = NULL;
	if (l->tail)
		l->tail->next = p;
	else
		l->head = p;
	l->tail = p;
}

static http_poll *pop(http_poll_list *l)
{
	http_poll *p = l->head;

	if (p && !(l->head = p->next))
		l->tail = NULL;
	return p;
}

/*
** Take the polls of *from for which pick() is true, in order, onto *to.
** Returns how many moved.
*/
static size_t take(http_poll_list *from, http_poll_list *to,
		   bool (*pick)(const http_poll *p, int64_t now), int64_t now)
{
	http_poll_list keep = {NULL, NULL};
	http_poll *p;
	size_t n = 0;

	while ((p = pop(from))) {
		if (pick(p, now)) {
			push(to, p);
			n++;
		} else {
			push(&keep, p);
		}
	}
	*from = keep;
	return n;
}

/* Resume the poll's connection with the reply it has, and free it. */
static void end_locked(http_claims *cs, http_poll *p)
{
	cs->n_polls--;
	MHD_resume_connection(p->r->conn);
	json_decref(p->body);
	free(p);
}

static void end(http_claims *cs, http_poll *p)
{
	pthread_mutex_lock(&cs->mu);
	end_locked(cs, p);
	pthread_mutex_unlock(&cs->mu);
}

static void reply_empty(http_poll *p)
{
	http_reply_static(p->r, 200, "application/json", empty_json,
			  sizeof(empty_json) - 1);
}

/* Answer every poll of *l: [] once looked, else `status` with `code`. */
static void answer_all_locked(http_claims *cs, http_poll_list *l,
			      unsigned status, const char *code,
			      const char *detail)
{
	http_poll *p;

	while ((p = pop(l))) {
		if (p->tried || !status)
			reply_empty(p);
		else
			http_reply_error(p->r, status, code, "%s", detail);
		end_locked(cs, p);
	}
}

static bool is_late(const http_poll *p, int64_t now)
{
	return p->tried ? now >= p->wait_end : now >= p->queue_end;
}

static bool is_over(const http_poll *p, int64_t now)
{
	return now >= p->wait_end;
}

static bool is_awake(const http_poll *p, int64_t now)
{
	return now >= p->wake_at;
}

static bool always(const http_poll *p, int64_t now)
{
	(void)p;
	(void)now;
	return true;
}

static void expire_locked(http_claims *cs, int64_t now)
{
	http_poll_list late = {NULL, NULL};
	char detail[128];

	take(&cs->ready, &late, is_late, now);
	take(&cs->parked, &late, is_over, now);
	if (!late.head)
		return;
	snprintf(detail, sizeof(detail),
		 "no claims thread was free within the poll's wait "
		 "(the store is slow or locked); retry later");
	answer_all_locked(cs, &late, 503, "store_busy", detail);
}

void http_claims_expire(http_claims *cs, int64_t now)
{
	if (!cs->threads)
		return;
	pthread_mutex_lock(&cs->mu);
	expire_locked(cs, now);
	pthread_mutex_unlock(&cs->mu);
}

/* Move parked polls to ready (all, or those awake now). */
static void wake_locked(http_claims *cs, bool all, int64_t now)
{
	if (take(&cs->parked, &cs->ready, all ? always : is_awake, now))
		pthread_cond_broadcast(&cs->cv);
}

static void poke(http_claims *cs)
{
	uint64_t one = 1;
	ssize_t n = write(cs->efd, &one, sizeof(one));
	(void)n; /* a full counter wakes the watcher all the same */
}

/* ------------------------------------------------------------------ */
/* A claims thread's turn at one poll                                  */
/* ------------------------------------------------------------------ */

/*
** Has the client gone?  Its socket says end of stream (it closed or shut
** its side) or an error (reset).  Pending bytes (a pipelined request) or
** nothing to read mean it is still there.
*/
static bool client_gone(const http_poll *p)
{
	char c;
	ssize_t n;

	if (p->fd < 0)
		return false;
	n = recv(p->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
			  errno != EINTR);
}

/*
** The client left while its tasks were being claimed: give them back at
** once (requeue: SCHEDULED, due now; the try is recorded REQUEUED), while
** the lease surely still holds (half of it since the claim was sent);
** past that the lease runs out and the reclaimer takes them back.
*/
static void give_back(due_db *db, const http_poll *p, const due_task_list *l,
		      int64_t t0)
{
	size_t given = 0;

	for (size_t i = 0; i < l->count; i++)
		if (http_now_us() - t0 < p->c.o.lease_us / 2 &&
		    due_requeue(db, l->items[i].id) == 0)
			given++;
	http_log("claim_gone",
		 "a client left while %zu task(s) were claimed for it: %zu "
		 "given back at once, the rest when their lease ends",
		 l->count, given);
}

/* Remember the claimed tries and their deadlines (tries.c). */
static void remember(struct due_http *h, const due_task_list *l,
		     int64_t lease_us, int64_t t0)
{
	for (size_t i = 0; i < l->count; i++) {
		const due_task *t = &l->items[i];
		http_try tr = {t->id, t->attempt, t->timeout_us,
			       t->timeout_us > 0 ? t0 + t->timeout_us : 0,
			       t0 + lease_us};
		http_tries_add(&h->tries, &tr);
	}
}

/*
** When to look again, in microseconds from now (at most `left`): when the
** next SCHEDULED task of the poll's kinds comes due, when held-back tasks
** may be claimable (retry_us), or POLL_US when no notification would
** come or a due task could not be claimed.  Never 0: a poll does not
** spin on a task it cannot claim.  A store error gives POLL_US.
*/
static int64_t next_look(http_claims *cs, due_db *db, const http_poll *p,
			 int64_t left, int64_t retry_us)
{
	int64_t d = atomic_load(&cs->listening) ? left : POLL_US;
	due_upcoming *u = NULL;

	if (retry_us > 0 && retry_us < d)
		d = retry_us;
	if (due_upcoming_get(db, &u, p->c.o.kinds, p->c.o.n_kinds, false,
			     due_time_now_host() + left + 3600000000LL, 1) < 0)
		return POLL_US < left ? POLL_US : left;
	if (u->count && u->due_at[0] > u->now && u->due_at[0] - u->now < d)
		d = u->due_at[0] - u->now;
	/* due already, yet the claim found nothing (taken meanwhile, or held
	   by a limit that gave no retry time): look again soon, not at once */
	if (u->count && u->due_at[0] <= u->now && POLL_US < d)
		d = POLL_US;
	due_upcoming_free(u);
	return d < 0 ? 0 : d < left ? d : left;
}

/* Park p until wake_at (or its wait's end); answer it when stopping. */
static void park(http_claims *cs, http_poll *p, int64_t wake_at)
{
	pthread_mutex_lock(&cs->mu);
	if (cs->stopping || http_now_us() >= p->wait_end) {
		reply_empty(p);
		end_locked(cs, p);
		pthread_mutex_unlock(&cs->mu);
		return;
	}
	p->wake_at = wake_at;
	push(&cs->parked, p);
	pthread_mutex_unlock(&cs->mu);
	poke(cs);
}

/* ------------------------------------------------------------------ */
/* Doubts: claims the store may have made after the call gave up       */
/* ------------------------------------------------------------------ */

/*
** A claim whose store call failed (no answer within CALL_US, a broken
** connection) may still be carried out: a frozen server runs the
** statement when it thaws, and its tasks are then CLAIMED for a client
** that was answered 503 or [] and will never complete them, until the
** lease ends (the attack on issue 36 froze PostgreSQL and Redis: one such
** task per claim in flight).  The claim is a doubt until its lease would
** have ended: meanwhile the watcher looks for CLAIMED tasks of the doubt's
** owner that this server never delivered (tries.c) and gives them back
** (requeue), as give_back does for a client that left.  A task another
** server delivered under the same owner name in that window would be
** given back too: its try is then refused (409) and the task retried,
** which at-least-once allows; a ghost would have held it a whole lease.
*/
typedef struct http_doubt {
	char *owner;
	const char *kinds[HTTP_MAX_KINDS]; /* into kind_buf */
	char *kind_buf;
	size_t n_kinds;
	int64_t until; /* monotonic: the claim's lease has ended by then */
	struct http_doubt *next;
} http_doubt;

static void doubt_free(http_doubt *d)
{
	free(d->owner);
	free(d->kind_buf);
	free(d);
}

static bool same_doubt(const http_doubt *a, const http_doubt *b)
{
	if (strcmp(a->owner, b->owner) || a->n_kinds != b->n_kinds)
		return false;
	for (size_t i = 0; i < a->n_kinds; i++)
		if (strcmp(a->kinds[i], b->kinds[i]))
			return false;
	return true;
}

static void doubt_add(http_claims *cs, const http_poll *p, int64_t t0)
{
	http_doubt *d = calloc(1, sizeof(*d));
	size_t len = 0;

	if (!d || !(d->owner = strdup(p->c.o.owner)))
		goto fail;
	for (size_t i = 0; i < p->c.o.n_kinds; i++)
		len += strlen(p->c.o.kinds[i]) + 1;
	if (len && !(d->kind_buf = malloc(len)))
		goto fail;
	len = 0;
	if (!p->c.o.exclude_kinds)
		for (size_t i = 0; i < p->c.o.n_kinds; i++) {
			size_t n = strlen(p->c.o.kinds[i]) + 1;
			memcpy(d->kind_buf + len, p->c.o.kinds[i], n);
			d->kinds[d->n_kinds++] = d->kind_buf + len;
			len += n;
		}
	d->until = t0 + p->c.o.lease_us;
	pthread_mutex_lock(&cs->mu);
	/* a client that retries through an outage repeats its poll: one
	   doubt per owner and kinds, its end the latest, so the sweep's
	   queries do not grow with the failed calls */
	for (http_doubt *o = cs->doubts; o; o = o->next)
		if (same_doubt(o, d)) {
			if (d->until > o->until)
				o->until = d->until;
			pthread_mutex_unlock(&cs->mu);
			doubt_free(d);
			return;
		}
	d->next = cs->doubts;
	cs->doubts = d;
	pthread_mutex_unlock(&cs->mu);
	poke(cs);
	return;
fail:
	if (d)
		doubt_free(d);
}

/* Give back d's CLAIMED tasks of `kind` (NULL: any) this server never
   delivered; -1 on a store error. */
static int doubt_sweep_kind(http_claims *cs, due_db *db, const http_doubt *d,
			    const char *kind)
{
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	http_try tr;

	lo.state = DUE_CLAIMED;
	lo.kind = kind;
	lo.limit = 10000;
	for (;;) {
		if (due_list(db, &l, &lo) < 0)
			return -1;
		for (size_t i = 0; i < l->count; i++) {
			const due_task *t = &l->items[i];
			if (!t->lease_owner ||
			    strcmp(t->lease_owner, d->owner) ||
			    http_tries_get(&cs->srv->tries, t->id, t->attempt,
					   &tr))
				continue;
			if (due_requeue(db, t->id) == 0)
				http_log("claim_doubt",
					 "task %lld was claimed for '%s' by a "
					 "call that got no answer: given back",
					 (long long)t->id, d->owner);
		}
		if (l->count < (size_t)lo.limit) {
			due_task_list_free(l);
			return 0;
		}
		lo.after = l->items[l->count - 1].id;
		due_task_list_free(l);
	}
}

/* The watcher: sweep every doubt; forget those whose lease has ended. */
static void doubts_sweep(http_claims *cs, due_db *db)
{
	int64_t now = http_now_us();
	http_doubt **pp, *d, *mine;

	pthread_mutex_lock(&cs->mu);
	mine = cs->doubts; /* the sweep owns the list meanwhile */
	cs->doubts = NULL;
	pthread_mutex_unlock(&cs->mu);
	for (pp = &mine; (d = *pp);) {
		int rc = 0;
		if (db && d->n_kinds == 0)
			rc = doubt_sweep_kind(cs, db, d, NULL);
		for (size_t i = 0; db && rc == 0 && i < d->n_kinds; i++)
			rc = doubt_sweep_kind(cs, db, d, d->kinds[i]);
		if (now >= d->until) {
			*pp = d->next;
			doubt_free(d);
		} else {
			pp = &d->next;
		}
	}
	pthread_mutex_lock(&cs->mu);
	*pp = cs->doubts; /* doubts added meanwhile go after */
	cs->doubts = mine;
	pthread_mutex_unlock(&cs->mu);
}

/* A store error: answer it, and drop this thread's handle. */
static void store_failed(http_claims *cs, http_poll *p, int rc)
{
	http_reply_due(p->r, rc);
	due_close(claims_db);
	claims_db = NULL;
	end(cs, p);
}

static void deliver(http_claims *cs, due_db *db, http_poll *p,
		    const due_task_list *l, int64_t t0)
{
	json_t *body = NULL;
	int rc;

	if (client_gone(p)) {
		give_back(db, p, l, t0);
		reply_empty(p); /* to no one */
	} else if ((rc = http_claimed_json(db, l, p->c.o.lease_us, &body)) <
		   0) {
		/* a run-after task's parents could not be read: the tries go
		   back rather than run without their parents' results */
		give_back(db, p, l, t0);
		http_reply_due(p->r, rc);
	} else {
		remember(cs->srv, l, p->c.o.lease_us, t0);
		http_reply_json(p->r, 200, body);
	}
	end(cs, p);
}

static void run_poll(http_claims *cs, http_poll *p)
{
	due_task_list *l = NULL;
	int64_t t0, now, retry;
	bool connected;
	int rc;

	if (client_gone(p)) {
		reply_empty(p); /* to no one: nothing was claimed for it */
		end(cs, p);
		return;
	}
	if ((connected = !claims_db) &&
	    (rc = open_bounded(cs->srv, &claims_db)) < 0) {
		store_failed(cs, p, rc);
		return;
	}
	/* a poll taken up in time whose thread had to connect: a slow
	   connect (a loaded machine, a cold server) is store time, not a
	   wait for a thread, so it is still claimed for while the wait + 3 s
	   bound holds (a handle already open needs no look at the clock) */
	if (connected && http_now_us() >= p->wait_end + CONNECT_GRACE_US) {
		pthread_mutex_lock(&cs->mu);
		http_poll_list one = {NULL, NULL};
		push(&one, p); /* answered as the expiry would */
		answer_all_locked(cs, &one, 503, "store_busy",
				  "the store took too long to connect; retry "
				  "later");
		pthread_mutex_unlock(&cs->mu);
		return;
	}
	p->tried = true;
	t0 = http_now_us();
	if ((rc = due_claim_ex(claims_db, &l, &p->c.o)) < 0) {
		if (rc == DUE_ESTORE)
			doubt_add(cs, p, t0);
		if (rc == DUE_ESTORE && !p->retried &&
		    http_now_us() + RETRY_US < p->wait_end) {
			/* a connection that broke (a restart, a failover):
			   once more on a new one before answering 503 */
			due_close(claims_db);
			claims_db = NULL;
			p->retried = true;
			park(cs, p, http_now_us() + RETRY_US);
			return;
		}
		store_failed(cs, p, rc);
		return;
	}
	if (l->count) {
		deliver(cs, claims_db, p, l, t0);
		due_task_list_free(l);
		return;
	}
	retry = l->retry_in_us;
	due_task_list_free(l);
	now = http_now_us();
	if (now >= p->wait_end || atomic_load(&cs->srv->stopping)) {
		reply_empty(p);
		end(cs, p);
		return;
	}
	park(cs, p,
	     http_now_us() +
		 next_look(cs, claims_db, p, p->wait_end - now, retry));
}

static void *claimer(void *arg)
{
	http_claims *cs = arg;
	http_poll *p;

	for (;;) {
		pthread_mutex_lock(&cs->mu);
		while (!cs->ready.head && !cs->stopping)
			pthread_cond_wait(&cs->cv, &cs->mu);
		p = pop(&cs->ready);
		pthread_mutex_unlock(&cs->mu);
		if (!p)
			break;
		run_poll(cs, p);
	}
	due_close(claims_db);
	claims_db = NULL;
	return NULL;
}

/* ------------------------------------------------------------------ */
/* The watcher: notifications, wake-ups, expired leases                */
/* ------------------------------------------------------------------ */

typedef struct watch {
	http_claims *cs;
	due_db *db;
	int fd;		       /* the listening fd, -1 when not listening */
	int64_t next_open;     /* a failed handle: not again before */
	int64_t next_reclaim;  /* monotonic */
	int64_t next_deadline; /* the next try's time limit, monotonic */
	int64_t next_scan;     /* for overdue tries, monotonic */
	int64_t next_doubt;    /* the next sweep of the doubts, monotonic */
	int empty;	       /* wake-ups without a note since empty_since */
	int64_t empty_since;
} watch;

static void watch_drop(watch *w, const char *what)
{
	http_log("claims_store", "the claims watcher's store handle: %s: %s",
		 what, due_error_last());
	due_close(w->db);
	w->db = NULL;
	w->fd = -1;
	w->empty = 0;
	w->next_open = http_now_us() + REOPEN_US;
	atomic_store(&w->cs->listening, false);
	/* the parked polls counted on notifications: they look again now,
	   and every POLL_US until the watcher listens again */
	pthread_mutex_lock(&w->cs->mu);
	wake_locked(w->cs, true, http_now_us());
	pthread_mutex_unlock(&w->cs->mu);
}

static void watch_open(watch *w)
{
	if (w->db || http_now_us() < w->next_open ||
	    !atomic_load(&w->cs->armed))
		return;
	if (open_bounded(w->cs->srv, &w->db) < 0) {
		watch_drop(w, "open");
		return;
	}
	if (due_listen(w->db, &w->fd) < 0)
		w->fd = -1; /* no notifications here: parked polls poll */
	atomic_store(&w->cs->listening, w->fd >= 0);
	/* what was notified while nobody listened: every poll looks again */
	pthread_mutex_lock(&w->cs->mu);
	wake_locked(w->cs, true, http_now_us());
	pthread_mutex_unlock(&w->cs->mu);
}

/*
** Take back expired leases, as a worker does (due_reclaim_expired): to
** SCHEDULED due now, DEAD when used up, CANCELLED when a cancel was
** requested.  A read (due_upcoming_get's next lease expiry) decides when,
** so an idle server takes no write lock.  Wakes every waiting poll (here
** and, through the store's notification, elsewhere) when it took
** anything back.
*/
static void watch_reclaim(watch *w)
{
	int64_t now = http_now_us(), next = RECLAIM_MAX_US;
	due_upcoming *u = NULL;
	due_reclaimed rc;

	if (!w->db || now < w->next_reclaim)
		return;
	if (due_upcoming_get(w->db, &u, NULL, 0, false, 0, 1) < 0) {
		watch_drop(w, "lease expiry");
		w->next_reclaim = now + REOPEN_US;
		return;
	}
	rc.next_expiry = u->next_expiry;
	rc.now = u->now;
	due_upcoming_free(u);
	if (rc.next_expiry && rc.next_expiry < rc.now) {
		if (due_reclaim_expired(w->db, &rc) < 0) {
			watch_drop(w, "reclaim");
			w->next_reclaim = now + REOPEN_US;
			return;
		}
		http_log("reclaimed",
			 "took back expired leases: %lld rescheduled, %lld "
			 "dead, %lld cancelled",
			 (long long)rc.rescheduled, (long long)rc.dead,
			 (long long)rc.cancelled);
		if (rc.rescheduled)
			due_notify(w->db);
		pthread_mutex_lock(&w->cs->mu);
		wake_locked(w->cs, true, now);
		pthread_mutex_unlock(&w->cs->mu);
	}
	if (rc.next_expiry > 0 && rc.next_expiry - rc.now + 1000 < next)
		next = rc.next_expiry - rc.now + 1000;
	w->next_reclaim = now + (next < 1000 ? 1000 : next);
}

/*
** End TIMED_OUT the tries claimed here that passed their time limit with
** no word from their client (tries.c): their tasks are retried at the
** limit, not one lease later, as a worker stops a handler at its limit.
** A try that ended meanwhile is left as it is (the store fences).
*/
static void watch_overdue(watch *w)
{
	int64_t now = http_now_us();
	http_try t[64];
	char why[64], dur[48];
	due_fail_outcome fo;
	size_t n;

	/* a scan reads the whole table: at the next deadline it saw, and
	   every OVERDUE_SCAN_US for tries claimed since */
	if (!w->db || (now < w->next_deadline && now < w->next_scan))
		return;
	w->next_scan = now + OVERDUE_SCAN_US;
	w->next_deadline = w->next_scan;
	n = http_tries_overdue(&w->cs->srv->tries, now, t, 64,
			       &w->next_deadline);
	for (size_t i = 0; i < n; i++) {
		due_duration_format(dur, sizeof(dur), t[i].limit_us);
		snprintf(why, sizeof(why), "timed out after %s", dur);
		if (due_fail_as(w->db, &fo, t[i].id, t[i].attempt, why,
				DUE_OUT_TIMED_OUT) < 0) {
			watch_drop(w, "time limit");
			return;
		}
		if (fo != DUE_FAIL_REJECTED_STALE)
			http_log("timed_out",
				 "task %lld attempt %d: %s with no word from "
				 "its HTTP worker: ended TIMED_OUT (%s)",
				 (long long)t[i].id, (int)t[i].attempt, why,
				 due_fail_outcome_name(fo));
	}
}

/* Sweep the doubts (a claim that got no answer) every DOUBT_SWEEP_US. */
static void watch_doubts(watch *w)
{
	int64_t now = http_now_us();
	bool any;

	pthread_mutex_lock(&w->cs->mu);
	any = w->cs->doubts != NULL;
	pthread_mutex_unlock(&w->cs->mu);
	if (!any || now < w->next_doubt)
		return;
	doubts_sweep(w->cs, w->db);
	w->next_doubt = now + DOUBT_SWEEP_US;
}

/* Wake what is due, answer what is over; ms until the next of either. */
static int watch_tick(watch *w)
{
	http_claims *cs = w->cs;
	int64_t now = http_now_us(), first = now + WATCH_MAX_MS * 1000;

	pthread_mutex_lock(&cs->mu);
	expire_locked(cs, now);
	wake_locked(cs, false, now);
	for (http_poll *p = cs->parked.head; p; p = p->next) {
		if (p->wake_at < first)
			first = p->wake_at;
		if (p->wait_end < first)
			first = p->wait_end;
	}
	if (cs->doubts && w->next_doubt < first)
		first = w->next_doubt;
	pthread_mutex_unlock(&cs->mu);
	if (w->db && w->next_reclaim < first)
		first = w->next_reclaim;
	if (w->db && w->next_deadline < first)
		first = w->next_deadline;
	return first <= now ? 0 : (int)((first - now + 999) / 1000);
}

/*
** The listening socket is readable: wake every parked poll when it
** brought notes.  A wake-up with none may be a timer's tick (a store that
** polls for notes: nothing new) or a session that broke (the stores say
** so at the next listen, which makes a new one: wake them, for what it
** missed): listen again.  More than EMPTY_MAX such
** wake-ups within a second is a dead socket: drop the handle, so that it
** never spins the watcher.
*/
static void watch_notes(watch *w)
{
	int64_t now = http_now_us();
	int n = 0, fd = w->fd;

	if (due_listen_drain(w->db, &n) < 0) {
		watch_drop(w, "notifications");
		return;
	}
	if (n == 0) {
		if (!w->empty || now - w->empty_since > 1000000) {
			w->empty = 0;
			w->empty_since = now;
		}
		if (++w->empty > EMPTY_MAX || due_listen(w->db, &w->fd) < 0) {
			watch_drop(w, "the listening session");
			return;
		}
		if (w->fd == fd)
			return; /* a tick that found nothing new */
	}
	/* notes, or a new session (what the old one missed) */
	pthread_mutex_lock(&w->cs->mu);
	wake_locked(w->cs, true, now);
	pthread_mutex_unlock(&w->cs->mu);
}

static void *watcher(void *arg)
{
	watch w = {arg, NULL, -1, 0, 0, 0, 0, 0, 0, 0};
	http_claims *cs = w.cs;

	for (;;) {
		struct pollfd pf[2] = {{cs->efd, POLLIN, 0}, {w.fd, POLLIN, 0}};
		uint64_t v;

		pthread_mutex_lock(&cs->mu);
		bool stop = cs->stopping;
		pthread_mutex_unlock(&cs->mu);
		if (stop)
			break;
		watch_open(&w);
		watch_reclaim(&w);
		watch_overdue(&w);
		watch_doubts(&w);
		pf[1].fd = w.fd;
		if (poll(pf, w.fd >= 0 ? 2 : 1, watch_tick(&w)) <= 0)
			continue;
		if (pf[0].revents && read(cs->efd, &v, sizeof(v)) < 0)
			v = 0; /* drained, or nothing to drain */
		if (w.fd >= 0 && pf[1].revents)
			watch_notes(&w);
	}
	due_close(w.db);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Start, submit, stop                                                 */
/* ------------------------------------------------------------------ */

int http_claims_start(http_claims *cs, struct due_http *srv, unsigned threads,
		      size_t cap)
{
	memset(cs, 0, sizeof(*cs));
	cs->srv = srv;
	cs->cap = cap;
	cs->efd = -1;
	pthread_mutex_init(&cs->mu, NULL);
	pthread_cond_init(&cs->cv, NULL);
	if ((cs->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    !(cs->threads = calloc(threads, sizeof(*cs->threads))))
		return -1;
	for (; cs->n_threads < threads; cs->n_threads++)
		if (pthread_create(&cs->threads[cs->n_threads], NULL, claimer,
				   cs) != 0)
			return -1;
	if (pthread_create(&cs->watcher, NULL, watcher, cs) != 0)
		return -1;
	cs->have_watcher = true;
	return 0;
}

void http_claims_arm(http_claims *cs)
{
	if (cs->threads && !atomic_exchange(&cs->armed, true))
		poke(cs);
}

int http_claims_submit(http_claims *cs, http_req *r)
{
	http_poll *p = calloc(1, sizeof(*p));
	int64_t now = http_now_us(), queue;

	if (!p)
		return -1;
	if (http_claim_read(r, &p->body, &p->c) < 0) {
		json_decref(p->body);
		free(p);
		http_reply_bad(r);
		return 0;
	}
	http_claims_arm(cs);
	p->r = r;
	p->fd = r->hc ? r->hc->fd : -1;
	p->wait_end = now + p->c.wait_us;
	queue = p->c.wait_us + QUEUE_SLACK_US;
	if (queue > r->srv->conns.timeout_us)
		queue = r->srv->conns.timeout_us;
	p->queue_end = now + queue;
	pthread_mutex_lock(&cs->mu);
	if (cs->stopping || cs->n_polls >= cs->cap) {
		pthread_mutex_unlock(&cs->mu);
		json_decref(p->body);
		free(p);
		return -1;
	}
	r->handed = true;
	MHD_suspend_connection(r->conn);
	cs->n_polls++;
	push(&cs->ready, p);
	pthread_cond_signal(&cs->cv);
	pthread_mutex_unlock(&cs->mu);
	return 0;
}

void http_claims_stop(http_claims *cs)
{
	if (!cs->srv)
		return;
	pthread_mutex_lock(&cs->mu);
	cs->stopping = true;
	answer_all_locked(cs, &cs->ready, 503, "shutting_down",
			  "the server is stopping");
	answer_all_locked(cs, &cs->parked, 0, NULL, NULL);
	pthread_cond_broadcast(&cs->cv);
	pthread_mutex_unlock(&cs->mu);
	if (cs->efd >= 0)
		poke(cs);
	for (unsigned i = 0; i < cs->n_threads; i++)
		pthread_join(cs->threads[i], NULL);
	if (cs->have_watcher)
		pthread_join(cs->watcher, NULL);
	if (cs->efd >= 0)
		close(cs->efd);
	while (cs->doubts) {
		http_doubt *d = cs->doubts;
		cs->doubts = d->next;
		doubt_free(d);
	}
	free(cs->threads);
	pthread_cond_destroy(&cs->cv);
	pthread_mutex_destroy(&cs->mu);
	memset(cs, 0, sizeof(*cs));
}
