/*
** waits.c - GET /v1/tasks/{id}?wait=DUR: the long poll of a task's end.
**
** The promise (docs/HTTP.md): the reply is GET /v1/tasks/{id}'s, sent as
** soon as the task is DONE, DEAD or CANCELLED (header `Due-Wait: done`),
** or when the wait is over, with the task as it is then (`Due-Wait:
** timeout`); 404 when there is no such task.  A waiting request holds no
** thread and no store connection of its own: it is a record in this
** file's list, its connection suspended.
**
** One thread (the waiter) does everything else, on one store handle of
** its own whose every call is bounded by CALL_US:
**   - it listens for finished tasks (due_listen_finished: PostgreSQL
**     LISTEN, the SQLite -done file, Redis pub/sub) and, on a wake-up,
**     reads each waiting task again (one primary-key read each); without
**     notifications (MySQL, a pooler) every POLL_US, and in any case every
**     RECHECK_US, since a notification can be lost;
**   - it answers each request whose task is finished, whose wait is over,
**     or whose client has gone: it polls every waiting client's socket for
**     POLLRDHUP (the client closed or shut its side; libmicrohttpd does
**     not watch a suspended connection), and resumes that connection at
**     once, so libmicrohttpd closes it and frees the request.  (So, as
**     for a claim, a client must not shut its sending side while it
**     waits.)
** The worker API and the admin API never wait for it: their requests run
** on the store pools and the claims threads (server.c), and a store that
** is slow to answer slows only the waits.  At most `cap` waits are held;
** past that 503 server_busy.  A store call that fails drops the handle
** (made again after REOPEN_US) and leaves the waits to the next round;
** a wait whose end came meanwhile is answered 503 store_error.
**
** Ownership: a wait belongs to the list under mu; the waiter takes the
** whole list for a round, and the one that answers a wait resumes its
** connection and frees it, exactly once.
*/
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <microhttpd.h>

#include "fmt/fmt.h"
#include "http/internal.h"

#define CALL_US 2000000LL      /* the bound of the waiter's store calls */
#define RECHECK_US 5000000LL   /* read every task again, notified or not */
#define POLL_US 1000000LL      /* ... without notifications */
#define REOPEN_US 1000000LL    /* the handle, after a store error */
#define RELISTEN_US 10000000LL /* say again that someone waits (Redis) */

struct http_wait {
	http_req *r;
	due_id id;
	int fd;		  /* the client's socket, -1 when unknown */
	int pi;		  /* its index in the round's poll set, -1: none */
	int64_t wait_end; /* monotonic */
	bool check;	  /* read the task at the next round */
	http_wait *next;
};

static void poke(http_waits *ws)
{
	uint64_t one = 1;
	ssize_t n = write(ws->efd, &one, sizeof(one));
	(void)n; /* a full counter wakes the waiter all the same */
}

/* Resume w's connection with the reply it has, and free it. */
static void end(http_waits *ws, http_wait *w)
{
	pthread_mutex_lock(&ws->mu);
	ws->n--;
	MHD_resume_connection(w->r->conn);
	pthread_mutex_unlock(&ws->mu);
	free(w);
}

/* GET /v1/tasks/{id}'s reply for t, with how the wait ended. */
static void reply_task(due_db *db, http_wait *w, due_task *t, bool done)
{
	const char *held = NULL;
	json_t *o;

	if (!done && due_task_hold(db, &held, t) < 0)
		held = NULL; /* the reply says null, as for a finished one */
	o = due__fmt_task_cut(t, http_max_payload(w->r));
	if (o)
		json_object_set_new(o, "held",
				    held ? json_string(held) : json_null());
	http_add_header(w->r, "Due-Wait", done ? "done" : "timeout");
	http_reply_json(w->r, 200, o);
}

static bool finished(due_state s)
{
	return s == DUE_DONE || s == DUE_DEAD || s == DUE_CANCELLED;
}

typedef struct waiter {
	http_waits *ws;
	due_db *db;
	int fd;		   /* listening, -1: not (yet, or cannot) */
	bool can_listen;   /* false: the store has no such wake-up */
	int64_t next_open; /* a failed handle: not again before */
	int64_t listened;  /* when due_listen_finished last ran */
	int64_t next_all;  /* read every task again then */
} waiter;

static void drop(waiter *wt, const char *what)
{
	http_log("wait_store", "the task waits' store handle: %s: %s", what,
		 due_error_last());
	due_close(wt->db);
	wt->db = NULL;
	wt->fd = -1;
	wt->next_open = http_now_us() + REOPEN_US;
}

static void open_db(waiter *wt, int64_t now)
{
	due_open_opts o = DUE_OPEN_OPTS_INIT;

	if (wt->db || now < wt->next_open)
		return;
	o.max_payload = wt->ws->srv->max_payload;
	o.timeout_us = CALL_US;
	if (due_open(&wt->db, wt->ws->srv->db_url, &o) < 0) {
		drop(wt, "open");
		return;
	}
	wt->listened = 0;
}

/* Listen (again): at the start, after a broken session, every RELISTEN_US. */
static void listen_now(waiter *wt, int64_t now)
{
	int rc;

	/* after a wake-up that brought nothing (fd -1), once a second */
	if (!wt->db || !wt->can_listen ||
	    now - wt->listened < (wt->fd >= 0 ? RELISTEN_US : REOPEN_US))
		return;
	wt->listened = now;
	rc = due_listen_finished(wt->db, &wt->fd);
	if (rc == DUE_EUNSUPPORTED || rc == DUE_ESTATE)
		wt->can_listen = false;
	if (rc < 0)
		wt->fd = -1;
	/* what finished while nobody listened: read every task again */
	wt->next_all = now;
}

/*
** One wait's turn: read its task when asked to, answer it when finished,
** gone or over.  Returns true when w was answered (and freed).
*/
static bool turn(waiter *wt, http_wait *w, int64_t now, bool gone)
{
	due_task *t = NULL;
	int rc;

	if (gone) {
		http_reply_error(w->r, 499, "client_gone", "the client left");
		end(wt->ws, w);
		return true;
	}
	if (!w->check && now < w->wait_end)
		return false;
	if (!wt->db) {
		if (now < w->wait_end)
			return false;
		http_reply_error(w->r, 503, "store_error",
				 "the store did not answer during the wait");
		end(wt->ws, w);
		return true;
	}
	if ((rc = due_get(wt->db, &t, w->id)) < 0) {
		if (rc != DUE_ENOTFOUND && now < w->wait_end) {
			drop(wt, "read a task");
			return false;
		}
		http_reply_due(w->r, rc);
		end(wt->ws, w);
		return true;
	}
	w->check = false;
	if (finished(t->state) || now >= w->wait_end) {
		reply_task(wt->db, w, t, finished(t->state));
		due_task_free(t);
		end(wt->ws, w);
		return true;
	}
	due_task_free(t);
	return false;
}

/* The poll set: the eventfd, the listening fd, each client's socket. */
static size_t poll_set(waiter *wt, http_wait *l, struct pollfd *pf, size_t cap)
{
	size_t n = 0;

	pf[n++] = (struct pollfd){wt->ws->efd, POLLIN, 0};
	pf[n++] = (struct pollfd){wt->fd, POLLIN, 0}; /* -1: ignored */
	for (http_wait *w = l; w; w = w->next) {
		w->pi = n < cap ? (int)n : -1;
		if (n < cap)
			pf[n++] = (struct pollfd){w->fd, POLLRDHUP, 0};
	}
	return n;
}

/* Milliseconds until the next wait ends or the next round is due. */
static int next_ms(const waiter *wt, const http_wait *l, int64_t now)
{
	int64_t first = wt->next_all;

	for (const http_wait *w = l; w; w = w->next) {
		if (w->check && wt->db)
			first = now; /* to read at once */
		if (w->wait_end < first)
			first = w->wait_end;
	}
	if (!wt->db && wt->next_open < first)
		first = wt->next_open;
	return first <= now ? 0 : (int)((first - now + 999) / 1000);
}

/*
** The listening fd is readable: consume the notes.  None (a broken
** session) listens again within a second; either way every wait reads
** its task (a lost note costs nothing more).
*/
static void notes(waiter *wt)
{
	int n = 0;

	if (due_listen_drain(wt->db, &n) < 0 || n == 0)
		wt->fd = -1;
}

/* One round over the list l (taken from ws): returns what is left. */
static http_wait *round_of(waiter *wt, http_wait *l, struct pollfd *pf,
			   size_t npf, bool all)
{
	http_wait *keep = NULL, **tail = &keep, *w, *next;
	int64_t now = http_now_us();

	for (w = l; w; w = next) {
		bool gone =
		    w->pi >= 2 && (size_t)w->pi < npf && w->fd >= 0 &&
		    (pf[w->pi].revents & (POLLRDHUP | POLLHUP | POLLERR));
		next = w->next;
		if (all)
			w->check = true;
		if (!turn(wt, w, now, gone)) {
			w->next = NULL;
			*tail = w;
			tail = &w->next;
		}
		now = http_now_us();
	}
	return keep;
}

/* Put what is left back, before what came meanwhile. */
static void put_back(http_waits *ws, http_wait *keep)
{
	http_wait **tail = &keep;

	while (*tail)
		tail = &(*tail)->next;
	pthread_mutex_lock(&ws->mu);
	*tail = ws->head;
	ws->head = keep;
	pthread_mutex_unlock(&ws->mu);
}

static void *waiter_main(void *arg)
{
	waiter wt = {arg, NULL, -1, true, 0, 0, 0};
	http_waits *ws = wt.ws;
	struct pollfd *pf = calloc(ws->cap + 2, sizeof(*pf));
	http_wait *l;
	uint64_t v;

	for (; pf;) {
		int64_t now = http_now_us();
		bool all, pending;
		size_t npf;
		int n = 0;

		pthread_mutex_lock(&ws->mu);
		if (ws->stopping) {
			pthread_mutex_unlock(&ws->mu);
			break;
		}
		l = ws->head; /* the round owns the list meanwhile */
		ws->head = NULL;
		pthread_mutex_unlock(&ws->mu);
		if (l) {
			open_db(&wt, now);
			listen_now(&wt, now);
		}
		npf = poll_set(&wt, l, pf, ws->cap + 2);
		put_back(ws, l);
		/* notes the last reads took in with their replies (libpq
		   keeps those) make no fd readable: consume them first */
		pending =
		    wt.fd >= 0 && due_listen_drain(wt.db, &n) == 0 && n > 0;
		if (poll(pf, npf,
			 pending ? 0
			 : l	 ? next_ms(&wt, l, now)
				 : -1) < 0 &&
		    errno != EINTR)
			continue;
		if (pf[0].revents && read(ws->efd, &v, sizeof(v)) < 0)
			v = 0;
		now = http_now_us();
		all = now >= wt.next_all || pending;
		if (wt.fd >= 0 && pf[1].revents) {
			notes(&wt);
			all = true;
		}
		if (all)
			wt.next_all = now + (wt.fd >= 0 ? RECHECK_US : POLL_US);
		pthread_mutex_lock(&ws->mu);
		l = ws->head;
		ws->head = NULL;
		pthread_mutex_unlock(&ws->mu);
		/* w->pi: where w's socket is in pf (-1: new, not polled) */
		put_back(ws, round_of(&wt, l, pf, npf, all));
	}
	free(pf);
	due_close(wt.db);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Start, submit, stop                                                 */
/* ------------------------------------------------------------------ */

int http_waits_start(http_waits *ws, struct due_http *srv, size_t cap)
{
	memset(ws, 0, sizeof(*ws));
	ws->srv = srv;
	ws->cap = cap;
	ws->efd = -1;
	pthread_mutex_init(&ws->mu, NULL);
	ws->inited = true;
	if ((ws->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    pthread_create(&ws->thread, NULL, waiter_main, ws) != 0)
		return -1;
	ws->have_thread = true;
	return 0;
}

int http_waits_submit(http_waits *ws, http_req *r, due_id id, int64_t wait_us)
{
	http_wait *w = calloc(1, sizeof(*w));

	if (!w)
		return -1;
	w->r = r;
	w->id = id;
	w->fd = r->hc ? r->hc->fd : -1;
	w->pi = -1;
	w->wait_end = http_now_us() + wait_us;
	w->check = true;
	pthread_mutex_lock(&ws->mu);
	if (ws->stopping || ws->n >= ws->cap) {
		pthread_mutex_unlock(&ws->mu);
		free(w);
		return -1;
	}
	r->handed = true;
	MHD_suspend_connection(r->conn);
	ws->n++;
	w->next = ws->head; /* order does not matter: each is read */
	ws->head = w;
	pthread_mutex_unlock(&ws->mu);
	poke(ws);
	return 0;
}

void http_waits_stop(http_waits *ws)
{
	http_wait *w;

	if (!ws->inited)
		return;
	pthread_mutex_lock(&ws->mu);
	ws->stopping = true;
	pthread_mutex_unlock(&ws->mu);
	if (ws->efd >= 0)
		poke(ws);
	if (ws->have_thread)
		pthread_join(ws->thread, NULL);
	while ((w = ws->head)) {
		ws->head = w->next;
		http_reply_error(w->r, 503, "shutting_down",
				 "the server is stopping");
		end(ws, w);
	}
	if (ws->efd >= 0)
		close(ws->efd);
	pthread_mutex_destroy(&ws->mu);
	memset(ws, 0, sizeof(*ws));
}
