/*
** pool.c - the threads that talk to the store, so that the event-loop
** threads never do.
**
** A store call can take as long as the store wants: SQLite waits up to
** busy_ms (30 s) for a writer's lock, PostgreSQL waits for a row lock, a
** connect waits for a server that does not answer.  An event-loop thread
** that waited with it would stop answering every connection it owns,
** /health included.  So the event thread suspends the connection
** (MHD_suspend_connection) and queues the request here; a store thread
** runs the handler with its own store handle, leaves the reply in the
** request and resumes the connection; the event thread then sends it.
**
** Two pools: reads (GET, HEAD) and changes.  A change waiting for a
** writer's lock must not hold up reads, which SQLite's WAL and PostgreSQL
** serve meanwhile.  Each queue is bounded: when it is full the request is
** answered at once, 503 with Retry-After, instead of piling up.
**
** /health has its own prober thread, with its own store handle.  Requests
** that arrive while a probe runs wait for the next one, and every waiting
** request is answered by one probe, so a thousand probes cost one store
** call at a time.  A request not answered within HTTP_HEALTH_TIMEOUT_MS
** gets 503 {"status": "DOWN", "error": "store_timeout"} from the ticker
** (server.c), whatever the store is doing: a load balancer learns that
** the store is slow, instead of timing out.
**
** Ownership: a queued request belongs to this file until its connection
** is resumed; whoever takes it off a list (a store thread, the ticker, or
** stop) answers it and resumes it, exactly once, under the list's mutex.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "http/internal.h"

static const char stopping_json[] =
    "{\n  \"error\": \"shutting_down\",\n  \"detail\": \"the server is "
    "stopping\"\n}\n";

/* Route handler on a store thread; a handler that set no reply gets 500. */
static void run(http_req *r)
{
	r->route_fn(r);
	if (!r->status)
		http_reply_error(r, 500, "internal",
				 "no reply from the handler");
}

static void *worker(void *arg)
{
	http_pool *p = arg;
	http_req *r;

	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (!p->count && !p->stopping)
			pthread_cond_wait(&p->cv, &p->mu);
		if (!p->count) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		r = p->ring[p->head];
		p->head = (p->head + 1) % p->cap;
		p->count--;
		pthread_mutex_unlock(&p->mu);
		run(r);
		MHD_resume_connection(r->conn);
	}
	return NULL;
}

int http_pool_start(http_pool *p, struct due_http *srv, const char *name,
		    unsigned threads, size_t queue)
{
	memset(p, 0, sizeof(*p));
	p->srv = srv;
	p->name = name;
	p->cap = queue;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	if (!(p->ring = calloc(queue, sizeof(*p->ring))) ||
	    !(p->threads = calloc(threads, sizeof(*p->threads))))
		return -1;
	for (; p->n_threads < threads; p->n_threads++)
		if (pthread_create(&p->threads[p->n_threads], NULL, worker,
				   p) != 0)
			return -1;
	return 0;
}

int http_pool_submit(http_pool *p, http_req *r)
{
	pthread_mutex_lock(&p->mu);
	if (p->stopping || p->count == p->cap) {
		pthread_mutex_unlock(&p->mu);
		return -1;
	}
	r->handed = true;
	MHD_suspend_connection(r->conn);
	p->ring[(p->head + p->count) % p->cap] = r;
	p->count++;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return 0;
}

void http_pool_stop(http_pool *p)
{
	if (!p->ring)
		return;
	pthread_mutex_lock(&p->mu);
	p->stopping = true;
	for (; p->count; p->count--) {
		http_req *r = p->ring[p->head];
		p->head = (p->head + 1) % p->cap;
		http_reply_static(r, 503, "application/json", stopping_json,
				  sizeof(stopping_json) - 1);
		MHD_resume_connection(r->conn);
	}
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	free(p->threads);
	free(p->ring);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	memset(p, 0, sizeof(*p));
}

/* ------------------------------------------------------------------ */
/* /health                                                             */
/* ------------------------------------------------------------------ */

/* Answer every request of *list with a copy of the body; empty the list. */
static void answer_all(http_req **list, unsigned status, const char *body,
		       size_t len)
{
	while (*list) {
		http_req *r = *list;
		*list = r->next;
		r->next = NULL;
		http_reply_text(r, status, "application/json", body, len);
		MHD_resume_connection(r->conn);
	}
}

static void *prober(void *arg)
{
	http_health *hh = arg;
	due_db *db = NULL;
	unsigned status;
	char *body;
	size_t len;

	pthread_mutex_lock(&hh->mu);
	for (;;) {
		while (!hh->waiting && !hh->stopping)
			pthread_cond_wait(&hh->cv, &hh->mu);
		if (hh->stopping)
			break;
		hh->probing = hh->waiting;
		hh->waiting = NULL;
		pthread_mutex_unlock(&hh->mu);
		http_health_probe(&db, hh->srv, &status, &body, &len);
		pthread_mutex_lock(&hh->mu);
		answer_all(&hh->probing, status, body ? body : "{}\n",
			   body ? len : 3);
		free(body);
	}
	pthread_mutex_unlock(&hh->mu);
	due_close(db);
	return NULL;
}

int http_health_start(http_health *hh, struct due_http *srv)
{
	memset(hh, 0, sizeof(*hh));
	hh->srv = srv;
	pthread_mutex_init(&hh->mu, NULL);
	pthread_cond_init(&hh->cv, NULL);
	if (pthread_create(&hh->thread, NULL, prober, hh) != 0)
		return -1;
	hh->started = true;
	return 0;
}

int http_health_submit(http_health *hh, http_req *r)
{
	pthread_mutex_lock(&hh->mu);
	if (hh->stopping || !hh->started) {
		pthread_mutex_unlock(&hh->mu);
		return -1;
	}
	r->handed = true;
	r->deadline_us = http_now_us() + HTTP_HEALTH_TIMEOUT_MS * 1000;
	MHD_suspend_connection(r->conn);
	r->next = hh->waiting;
	hh->waiting = r;
	pthread_cond_signal(&hh->cv);
	pthread_mutex_unlock(&hh->mu);
	return 0;
}

/* Move the expired requests of *list to *out. */
static void take_expired(http_req **list, int64_t now_us, http_req **out)
{
	while (*list) {
		http_req *r = *list;
		if (r->deadline_us > now_us) {
			list = &r->next;
			continue;
		}
		*list = r->next;
		r->next = *out;
		*out = r;
	}
}

void http_health_expire(http_health *hh, int64_t now_us)
{
	http_req *late = NULL;
	char body[256];
	int n;

	if (!hh->started)
		return;
	pthread_mutex_lock(&hh->mu);
	take_expired(&hh->waiting, now_us, &late);
	take_expired(&hh->probing, now_us, &late);
	if (late) {
		n = snprintf(
		    body, sizeof(body),
		    "{\n  \"status\": \"DOWN\",\n  "
		    "\"error\": \"store_timeout\",\n  \"detail\": \"the "
		    "store did not answer within %d ms\"\n}\n",
		    HTTP_HEALTH_TIMEOUT_MS);
		http_log("health_timeout",
			 "/health: the store did not answer "
			 "within %d ms",
			 HTTP_HEALTH_TIMEOUT_MS);
		answer_all(&late, 503, body, (size_t)n);
	}
	pthread_mutex_unlock(&hh->mu);
}

void http_health_stop(http_health *hh)
{
	if (!hh->started)
		return;
	pthread_mutex_lock(&hh->mu);
	hh->stopping = true;
	answer_all(&hh->waiting, 503, stopping_json, sizeof(stopping_json) - 1);
	answer_all(&hh->probing, 503, stopping_json, sizeof(stopping_json) - 1);
	pthread_cond_broadcast(&hh->cv);
	pthread_mutex_unlock(&hh->mu);
	pthread_join(hh->thread, NULL);
	pthread_cond_destroy(&hh->cv);
	pthread_mutex_destroy(&hh->mu);
	hh->started = false;
}
