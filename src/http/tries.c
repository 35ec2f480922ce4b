/*
** tries.c - the tries this server handed out through POST /v1/claims, and
** when each must end: the server's own memory of its HTTP workers' tries.
**
** A `due work` worker watches the time limit of each try it runs on its
** own clock (src/worker/keeper.c).  An HTTP worker is a client we cannot
** stop, so the server keeps the promise at the only moments it can: when
** the client extends, completes or fails the try.  Each claim records
** here, per try (id, attempt), its time limit and the local monotonic
** time by which it must have ended (taken before the claim was sent, so
** the local deadline is never later than the store's claimed_at + limit),
** and when its lease ends.  An extend, complete or fail of a try found
** here is judged by that deadline without asking the store anything; a
** try not found here (claimed through another server, before a restart,
** or forgotten below) is judged from the store's record instead
** (routes_work.c).
**
** A try claimed here that goes silent past its deadline (no extend, no
** complete) is ended TIMED_OUT by the claims watcher (claims.c), which
** asks for the overdue ones with http_tries_overdue(): so its task is
** retried at its limit, not one lease later.
**
** Bounded: at most MAX_TRIES entries (past that a claim records nothing
** and its tries are judged from the store); an entry whose lease ended
** FORGET_US ago is dropped by the ticker (http_tries_prune), as is every
** entry of a try that ended through this server.  Nothing here is needed
** for correctness of fencing: the store fences every call.
**
** Any thread may call these; one mutex guards the table, never held
** across anything but the table itself.
*/
#include <stdlib.h>
#include <string.h>

#include "http/internal.h"

#define N_BUCKETS 65536u
#define MAX_TRIES (1u << 20)
#define FORGET_US (60 * 1000000LL)

typedef struct http_try_node {
	http_try t;
	struct http_try_node *next;
} http_try_node;

static size_t bucket(due_id id, int32_t attempt)
{
	uint64_t h = (uint64_t)id * 0x9E3779B97F4A7C15ull ^ (uint32_t)attempt;
	return (size_t)(h >> 32) % N_BUCKETS;
}

int http_tries_init(http_tries *ts)
{
	memset(ts, 0, sizeof(*ts));
	pthread_mutex_init(&ts->mu, NULL);
	ts->buckets = calloc(N_BUCKETS, sizeof(*ts->buckets));
	return ts->buckets ? 0 : -1;
}

void http_tries_destroy(http_tries *ts)
{
	if (!ts->buckets)
		return;
	for (size_t i = 0; i < N_BUCKETS; i++)
		for (http_try_node *n = ts->buckets[i], *nx; n; n = nx) {
			nx = n->next;
			free(n);
		}
	free(ts->buckets);
	pthread_mutex_destroy(&ts->mu);
	memset(ts, 0, sizeof(*ts));
}

/* The node of (id, attempt) in its bucket, or NULL.  mu held. */
static http_try_node **find_locked(http_tries *ts, due_id id, int32_t attempt)
{
	http_try_node **p = &ts->buckets[bucket(id, attempt)];

	for (; *p; p = &(*p)->next)
		if ((*p)->t.id == id && (*p)->t.attempt == attempt)
			return p;
	return NULL;
}

void http_tries_add(http_tries *ts, const http_try *t)
{
	http_try_node *n;

	if (!ts->buckets)
		return;
	pthread_mutex_lock(&ts->mu);
	if (!find_locked(ts, t->id, t->attempt) && ts->count < MAX_TRIES &&
	    (n = malloc(sizeof(*n)))) {
		size_t b = bucket(t->id, t->attempt);
		n->t = *t;
		n->next = ts->buckets[b];
		ts->buckets[b] = n;
		ts->count++;
		if (t->deadline)
			ts->n_limited++;
	}
	pthread_mutex_unlock(&ts->mu);
}

bool http_tries_get(http_tries *ts, due_id id, int32_t attempt, http_try *out)
{
	http_try_node **p;
	bool hit = false;

	if (!ts->buckets)
		return false;
	pthread_mutex_lock(&ts->mu);
	if ((p = find_locked(ts, id, attempt))) {
		*out = (*p)->t;
		hit = true;
	}
	pthread_mutex_unlock(&ts->mu);
	return hit;
}

void http_tries_lease(http_tries *ts, due_id id, int32_t attempt,
		      int64_t lease_end)
{
	http_try_node **p;

	if (!ts->buckets)
		return;
	pthread_mutex_lock(&ts->mu);
	if ((p = find_locked(ts, id, attempt)))
		(*p)->t.lease_end = lease_end;
	pthread_mutex_unlock(&ts->mu);
}

void http_tries_remove(http_tries *ts, due_id id, int32_t attempt)
{
	http_try_node **p, *n;

	if (!ts->buckets)
		return;
	pthread_mutex_lock(&ts->mu);
	if ((p = find_locked(ts, id, attempt))) {
		n = *p;
		*p = n->next;
		if (n->t.deadline)
			ts->n_limited--;
		free(n);
		ts->count--;
	}
	pthread_mutex_unlock(&ts->mu);
}

void http_tries_prune(http_tries *ts, int64_t now)
{
	if (!ts->buckets)
		return;
	pthread_mutex_lock(&ts->mu);
	for (size_t i = 0; i < N_BUCKETS && ts->count; i++) {
		http_try_node **p = &ts->buckets[i];
		while (*p) {
			http_try_node *n = *p;
			if (n->t.lease_end + FORGET_US > now) {
				p = &n->next;
				continue;
			}
			*p = n->next;
			if (n->t.deadline)
				ts->n_limited--;
			free(n);
			ts->count--;
		}
	}
	pthread_mutex_unlock(&ts->mu);
}

size_t http_tries_overdue(http_tries *ts, int64_t now, http_try *out,
			  size_t cap, int64_t *next)
{
	size_t n = 0;

	if (!ts->buckets)
		return 0;
	pthread_mutex_lock(&ts->mu);
	for (size_t i = 0; i < N_BUCKETS && ts->n_limited && n < cap; i++) {
		http_try_node **p = &ts->buckets[i];
		while (*p && n < cap) {
			http_try_node *x = *p;
			if (!x->t.deadline || x->t.deadline > now) {
				if (x->t.deadline && x->t.deadline < *next)
					*next = x->t.deadline;
				p = &x->next;
				continue;
			}
			out[n++] = x->t; /* handed out once: forgotten here */
			*p = x->next;
			free(x);
			ts->count--;
			ts->n_limited--;
		}
	}
	if (n == cap)
		*next = now; /* more in the next pass */
	pthread_mutex_unlock(&ts->mu);
	return n;
}
