/*
** server.c - `due serve`: libmicrohttpd glue, the route table, and the
** start and stop of the threads.
**
** Workload: an operator's dashboard, a Prometheus scraper, load balancer
** probes and scripts posting a few hundred tasks a second; each request is
** one or two short store calls.  Hostile or broken clients must not stop
** any of that: thousands of slow connections, malformed requests, a store
** that is locked or gone.
**
** Threads:
**   - libmicrohttpd's event loops (--threads, epoll): read and check
**     requests, send replies, never call the store;
**   - the store pools, reads and changes (--threads each), and the /health
**     prober (pool.c): every store call is made there, or on
**   - the claims threads (2 x --threads) and the claims watcher
**     (claims.c): one claim at a time each; the watcher hears the store's
**     notifications, takes back expired leases and ends HTTP tries past
**     their time limit;
**   - the waiter of GET /v1/tasks/{id}?wait= (waits.c): one thread, its
**     own store handle, woken by finished-task notifications;
**   - the ticker, every 100 ms: request deadlines (conns.c), /health,
**     queue and long-poll timeouts (pool.c, claims.c), the log's counts
**     (log.c), forgetting old tries (tries.c).
**
** Lifecycle of a request (libmicrohttpd calls on_access repeatedly):
**   0. request line in: on_uri allocates the http_req with the target as
**      sent (libmicrohttpd is told not to decode it: no_unescape);
**   1. headers in: http_precheck() parses the target and checks framing,
**      Host, Origin and the token, and the declared size.  A refusal is
**      answered right away and the body, if any, is never read;
**   2. body chunks: kept up to the limits, counted and dropped beyond;
**   3. end: the route is matched on the raw path.  A route without store
**      work is answered at once; the others go to a pool, the connection
**      suspended; the pool resumes it, on_access runs again and queues
**      the reply the handler left;
** on_completed frees the http_req whatever happened.
*/
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "http/internal.h"

/* Beyond this many body bytes a request over the limit is cut off. */
#define DISCARD_LIMIT (64u << 20)
/* Requests waiting for a store thread, per thread of the pool. */
#define QUEUE_PER_THREAD 64
#define TICK_MS 100
/* Claims threads per --threads: each runs one claim at a time, never a
   wait (claims.c); long polls held at most: QUEUE_PER_THREAD x this */
#define CLAIM_THREADS 2
#define POLLS_PER_THREAD 8
/* Forget the tries whose lease ended long ago this often (tries.c). */
#define PRUNE_US (10 * 1000000LL)

/* ------------------------------------------------------------------ */
/* Routes                                                              */
/* ------------------------------------------------------------------ */

static const char *const q_list[] = {"state", "kind", "limit", "after", NULL};
static const char *const q_get[] = {"wait", NULL};

/* Where a route runs: here, on a store pool, or on the /health prober. */
enum run_on { ON_EVENT, ON_READS, ON_WRITES, ON_HEALTH, ON_CLAIMS };

typedef struct route {
	const char *method;
	const char *pattern; /* {x} matches one non-empty segment */
	int (*fn)(http_req *r);
	const char *const *query; /* allowed query parameters */
	enum run_on on;
} route;

static const route routes[] = {
    {"GET", "/", route_dashboard, NULL, ON_EVENT},
    {"GET", "/health", NULL, NULL, ON_HEALTH},
    {"GET", "/metrics", route_metrics_prom, NULL, ON_READS},
    {"GET", "/v1/metrics", route_metrics_json, NULL, ON_READS},
    {"GET", "/v1/stats", route_stats, NULL, ON_READS},
    {"POST", "/v1/tasks", route_task_create, NULL, ON_WRITES},
    {"GET", "/v1/tasks", route_task_list, q_list, ON_READS},
    {"GET", "/v1/tasks/{id}", route_task_get, q_get, ON_READS},
    {"DELETE", "/v1/tasks/{id}", route_task_cancel, NULL, ON_WRITES},
    {"POST", "/v1/tasks/{id}/reschedule", route_task_reschedule, NULL,
     ON_WRITES},
    {"POST", "/v1/tasks/{id}/retry", route_task_retry, NULL, ON_WRITES},
    {"POST", "/v1/tasks/{id}/requeue", route_task_requeue, NULL, ON_WRITES},
    {"POST", "/v1/tasks/{id}/kill", route_task_kill, NULL, ON_WRITES},
    {"POST", "/v1/claims", NULL, NULL, ON_CLAIMS},
    {"POST", "/v1/tasks/{id}/complete", route_task_complete, NULL, ON_WRITES},
    {"POST", "/v1/tasks/{id}/fail", route_task_fail, NULL, ON_WRITES},
    {"POST", "/v1/tasks/{id}/extend", route_task_extend, NULL, ON_WRITES},
    {"POST", "/v1/completions", route_completions, NULL, ON_WRITES},
    {"GET", "/v1/schedules", route_sched_list, NULL, ON_READS},
    {"GET", "/v1/schedules/{name}", route_sched_get, NULL, ON_READS},
    {"PUT", "/v1/schedules/{name}", route_sched_put, NULL, ON_WRITES},
    {"DELETE", "/v1/schedules/{name}", route_sched_delete, NULL, ON_WRITES},
    {"GET", "/v1/kinds", route_kind_list, NULL, ON_READS},
    {"GET", "/v1/kinds/{kind}", route_kind_get, NULL, ON_READS},
    {"PUT", "/v1/kinds/{kind}", route_kind_put, NULL, ON_WRITES},
    {"DELETE", "/v1/kinds/{kind}", route_kind_delete, NULL, ON_WRITES},
};

#define N_ROUTES (sizeof(routes) / sizeof(routes[0]))

/* Decode the raw segment s[0..n) into r->param; 0, or -1 too long, -2 bad. */
static int set_param(http_req *r, const char *s, size_t n)
{
	char buf[1024];

	if (n >= sizeof(buf))
		return -1;
	if (http_unescape(s, n, false, buf, sizeof(buf)) < 0)
		return -2;
	if (strlen(buf) >= sizeof(r->param))
		return -1;
	memcpy(r->param, buf, strlen(buf) + 1);
	return 0;
}

/*
** Match the raw path against pattern; the {x} segment is decoded into
** r->param.  1 on a match, 0 on none, -1 when the segment is too long,
** -2 when it holds an escaped NUL.
*/
static int match(http_req *r, const char *pat, const char *path)
{
	while (*pat && *path) {
		if (*pat == '{') {
			size_t n = strcspn(path, "/");
			int rc;
			if (n == 0)
				return 0;
			pat = strchr(pat, '}') + 1;
			if ((rc = set_param(r, path, n)) < 0)
				return rc;
			path += n;
		} else if (*pat++ != *path++) {
			return 0;
		}
	}
	return !*pat && !*path;
}

/*
** GET /v1/tasks/{id}?wait=DUR (waits.c): 0 when r has no wait (or wait=0:
** answered at once, as without it), 1 when it was answered (a bad id or
** DUR: 400) or is held, -1 when too many waits are held.
*/
static int task_wait(http_req *r)
{
	const char *v =
	    r->route_fn == route_task_get ? http_query(r, "wait") : NULL;
	char lim[32];
	int64_t us;
	due_id id;

	if (!v)
		return 0;
	if (due_duration_parse(&us, v) < 0) {
		http_reply_error(r, 400, "bad_request", "invalid wait '%s': %s",
				 v, due_error_last());
		return 1;
	}
	if (us > HTTP_MAX_TASK_WAIT_US) {
		due_duration_format(lim, sizeof(lim), HTTP_MAX_TASK_WAIT_US);
		http_reply_error(r, 400, "bad_request",
				 "wait '%s' is over the limit of %s", v, lim);
		return 1;
	}
	if (us == 0)
		return 0;
	if (http_parse_id(r, r->param, &id) < 0) {
		http_reply_bad(r);
		return 1;
	}
	return http_waits_submit(&r->srv->waits, r, id, us) < 0 ? -1 : 1;
}

/* Hand r to where its route runs; a refusal sets the reply. */
static void run_route(http_req *r, const route *rt)
{
	struct due_http *h = r->srv;
	int rc = 0;

	r->route_fn = rt->fn;
	if (rt->on == ON_EVENT) {
		rt->fn(r);
		return;
	}
	if (atomic_load(&h->stopping)) {
		http_reply_error(r, 503, "shutting_down",
				 "the server is stopping");
		return;
	}
	r->deadline_us = http_now_us() + h->conns.timeout_us;
	if ((rc = task_wait(r)) != 0) /* ?wait=: answered or held */
		rc = rc < 0 ? -1 : 0;
	else if (rt->on == ON_HEALTH)
		rc = http_health_submit(&h->health, r);
	else if (rt->on == ON_CLAIMS)
		rc = http_claims_submit(&h->claims, r);
	else
		rc = http_pool_submit(
		    rt->on == ON_READS ? &h->reads : &h->writes, r);
	if (rc < 0)
		http_reply_error(r, 503, "server_busy",
				 "too many requests are "
				 "waiting for the store; retry later");
}

static void dispatch(http_req *r)
{
	const char *method = !strcmp(r->method, "HEAD") ? "GET" : r->method;
	char allow[64] = "";
	int bad = 0;

	for (size_t i = 0; i < N_ROUTES; i++) {
		int m = match(r, routes[i].pattern, r->path);
		if (m < 0 && !bad)
			bad = m;
		if (m <= 0)
			continue;
		if (strcmp(routes[i].method, method) != 0) {
			size_t n = strlen(allow);
			snprintf(allow + n, sizeof(allow) - n, "%s%s",
				 n ? ", " : "",
				 !strcmp(routes[i].method, "GET")
				     ? "GET, HEAD"
				     : routes[i].method);
			continue;
		}
		if (http_query_check(r, routes[i].query) < 0) {
			http_reply_bad(r);
			return;
		}
		run_route(r, &routes[i]);
		return;
	}
	if (allow[0]) {
		http_add_header(r, "Allow", allow);
		http_reply_error(r, 405, "method_not_allowed",
				 "%s is not allowed "
				 "on %s (allowed: %s)",
				 r->method, r->path, allow);
	} else if (bad == -1) {
		http_reply_error(r, 400, "bad_request",
				 "path segment too long in "
				 "%s",
				 r->path);
	} else if (bad == -2) {
		http_reply_error(r, 400, "bad_request",
				 "escaped NUL in the path %s", r->path);
	} else {
		http_reply_error(r, 404, "not_found", "no route %s %s",
				 r->method, r->path);
	}
}

/* ------------------------------------------------------------------ */
/* libmicrohttpd callbacks                                             */
/* ------------------------------------------------------------------ */

/* The request line is in: a new http_req holding the target as sent. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
	http_req *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->srv = cls;
	r->conn = c;
	if (uri && !(r->target = strdup(uri))) {
		free(r);
		return NULL;
	}
	return r;
}

/* Leave the target as sent: request.c decodes, strictly, after routing. */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls;
	(void)c;
	return strlen(s);
}

static http_conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

/* The final call: the request is whole.  Answer, or hand it over. */
static enum MHD_Result on_end(http_req *r)
{
	if (r->status)
		return (enum MHD_Result)http_queue_reply(r); /* resumed */
	if (r->handed)
		return MHD_YES;
	http_conns_busy(&r->srv->conns, r->hc);
	if (!r->too_big && !r->overload && !http_body_fits(r))
		r->too_big = true;
	if (r->too_big)
		http_reply_error(r, 413, "too_large",
				 "request body over %zu bytes",
				 r->srv->max_body);
	else if (r->overload)
		http_reply_error(r, 503, "server_busy",
				 "too many request bodies "
				 "in memory; retry later");
	else
		dispatch(r);
	if (r->status)
		return (enum MHD_Result)http_queue_reply(r);
	return MHD_YES;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c,
				 const char *url, const char *method,
				 const char *version, const char *upload,
				 size_t *upload_size, void **con_cls)
{
	http_req *r = *con_cls;

	(void)cls;
	(void)url;
	if (!r)
		return MHD_NO; /* out of memory at the request line */
	if (!r->started) {
		r->started = true;
		r->conn = c;
		r->method = method;
		r->version = version;
		r->hc = conn_of(c);
		http_precheck(r);
		if (!r->status)
			return MHD_YES;
		http_conns_busy(&r->srv->conns, r->hc);
		return (enum MHD_Result)http_queue_reply(r);
	}
	if (*upload_size) {
		http_take_body(r, upload, *upload_size);
		*upload_size = 0;
		return r->body_seen > DISCARD_LIMIT ? MHD_NO : MHD_YES;
	}
	return on_end(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode why)
{
	struct due_http *h = cls;
	http_req *r = *con_cls;

	(void)why;
	if (r) {
		if (r->status)
			atomic_fetch_sub(&h->replies_unsent, 1);
		atomic_fetch_sub(&h->body_bytes, r->body_len);
		http_req_free(r);
		*con_cls = NULL;
	}
	http_conns_idle(&h->conns, conn_of(c));
}

static void on_connection(void *cls, struct MHD_Connection *c,
			  void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct due_http *h = cls;
	const union MHD_ConnectionInfo *ci;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		ci = MHD_get_connection_info(c,
					     MHD_CONNECTION_INFO_CONNECTION_FD);
		*socket_context =
		    ci ? http_conns_open(&h->conns, ci->connect_fd) : NULL;
	} else {
		http_conns_close(&h->conns, *socket_context);
		*socket_context = NULL;
	}
}

/* ------------------------------------------------------------------ */
/* The ticker                                                          */
/* ------------------------------------------------------------------ */

/* Drop queued requests that waited longer than --timeout for a thread. */
static void expire_queue(http_pool *p, int64_t now)
{
	pthread_mutex_lock(&p->mu);
	while (p->count && p->ring[p->head]->deadline_us <= now) {
		http_req *r = p->ring[p->head];
		p->head = (p->head + 1) % p->cap;
		p->count--;
		http_reply_error(
		    r, 503, "store_busy",
		    "waited %lld s for the store "
		    "(it is slow or locked); retry later",
		    (long long)(p->srv->conns.timeout_us / 1000000));
		MHD_resume_connection(r->conn);
	}
	pthread_mutex_unlock(&p->mu);
}

static void *ticker(void *arg)
{
	struct due_http *h = arg;
	struct timespec ts;
	int64_t next_prune = http_now_us() + PRUNE_US;

	pthread_mutex_lock(&h->tick_mu);
	while (!h->tick_stop) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += TICK_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&h->tick_cv, &h->tick_mu, &ts);
		pthread_mutex_unlock(&h->tick_mu);
		int64_t now = http_now_us();
		http_health_expire(&h->health, now);
		expire_queue(&h->reads, now);
		expire_queue(&h->writes, now);
		http_claims_expire(&h->claims, now);
		if (now >= next_prune) {
			http_tries_prune(&h->tries, now);
			next_prune = now + PRUNE_US;
		}
		http_conns_reap(&h->conns, now);
		http_log_flush(now, false);
		pthread_mutex_lock(&h->tick_mu);
	}
	pthread_mutex_unlock(&h->tick_mu);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Start and stop                                                      */
/* ------------------------------------------------------------------ */

/* A listening socket on o->addr; -1 with err set. */
static int listen_on(const due__http_opts *o, char *err, size_t errlen)
{
	int fd = socket(o->addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0),
	    one = 1;

	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (o->addr->sa_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, o->addr, o->addrlen) < 0 || listen(fd, 4096) < 0 ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		snprintf(err, errlen, "%s", strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

static unsigned bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void close_db(void *db) { due_close(db); }

/* The store threads and the ticker; -1 on failure. */
static int start_threads(struct due_http *h, const due__http_opts *o)
{
	size_t queue = (size_t)o->threads * QUEUE_PER_THREAD;

	if (http_pool_start(&h->reads, h, "reads", o->threads, queue) < 0 ||
	    http_pool_start(&h->writes, h, "changes", o->threads, queue) < 0 ||
	    http_tries_init(&h->tries) < 0 ||
	    http_claims_start(&h->claims, h, o->threads * CLAIM_THREADS,
			      queue * POLLS_PER_THREAD) < 0 ||
	    http_health_start(&h->health, h) < 0 ||
	    http_waits_start(&h->waits, h, queue * POLLS_PER_THREAD) < 0)
		return -1;
	pthread_mutex_init(&h->tick_mu, NULL);
	pthread_cond_init(&h->tick_cv, NULL);
	if (pthread_create(&h->ticker, NULL, ticker, h) != 0)
		return -1;
	h->have_ticker = true;
	return 0;
}

static struct MHD_Daemon *start_daemon(struct due_http *h,
				       const due__http_opts *o, int fd)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
			 MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;

	if (o->addr->sa_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	return MHD_start_daemon(
	    flags, 0, NULL, NULL, on_access, h, MHD_OPTION_EXTERNAL_LOGGER,
	    http_log_mhd, h, /* first: logs the rest */
	    MHD_OPTION_LISTEN_SOCKET, fd,
	    /* one event loop is no pool: libmicrohttpd warns about size 1 */
	    MHD_OPTION_THREAD_POOL_SIZE, o->threads > 1 ? o->threads : 0,
	    MHD_OPTION_CONNECTION_LIMIT, o->max_conns,
	    MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
	    MHD_OPTION_STRICT_FOR_CLIENT, 1, MHD_OPTION_URI_LOG_CALLBACK,
	    on_uri, h, MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, h,
	    MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
}

int due__http_start(due_http **out, const due__http_opts *o, char *err,
		    size_t errlen)
{
	due_http *h = calloc(1, sizeof(*h));
	int fd = -1;

	*out = NULL;
	if (!h || !(h->db_url = strdup(o->db_url)) ||
	    (o->token && !(h->token = strdup(o->token))) ||
	    pthread_key_create(&h->db_key, close_db) != 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	h->have_key = true;
	h->token_len = h->token ? strlen(h->token) : 0;
	h->loopback = o->loopback;
	h->max_body = o->max_body;
	h->max_payload = o->max_payload;
	h->body_budget = 8 * o->max_body;
	http_conns_init(&h->conns, (int64_t)o->timeout_s * 1000000);
	if (start_threads(h, o) < 0) {
		snprintf(err, errlen, "cannot start threads");
		goto fail;
	}
	if ((fd = listen_on(o, err, errlen)) < 0)
		goto fail;
	h->port = bound_port(fd);
	if (!(h->d = start_daemon(h, o, fd))) {
		snprintf(err, errlen, "libmicrohttpd could not start");
		close(fd);
		goto fail;
	}
	*out = h;
	return 0;
fail:
	due__http_stop(h);
	return -1;
}

unsigned due__http_port(const due_http *h) { return h->port; }

void due__http_stop(due_http *h)
{
	if (!h)
		return;
	atomic_store(&h->stopping, true);
	/* The ticker first: it uses the pools' and the prober's locks. */
	if (h->have_ticker) {
		pthread_mutex_lock(&h->tick_mu);
		h->tick_stop = true;
		pthread_cond_signal(&h->tick_cv);
		pthread_mutex_unlock(&h->tick_mu);
		pthread_join(h->ticker, NULL);
		pthread_cond_destroy(&h->tick_cv);
		pthread_mutex_destroy(&h->tick_mu);
	}
	/* Every suspended connection is resumed before the daemon stops. */
	http_pool_stop(&h->reads);
	http_pool_stop(&h->writes);
	http_claims_stop(&h->claims);
	http_waits_stop(&h->waits);
	http_health_stop(&h->health);
	/* The stop answered every waiting poll and resumed its connection:
	   let the daemon's threads send those replies (at most 2 s) before
	   it closes every connection, else a poll sees the socket close with
	   no reply (HTTP.md: a stop answers the waiting polls at once). */
	for (int i = 0; h->d && i < 200 && atomic_load(&h->replies_unsent) > 0;
	     i++)
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	if (h->d)
		MHD_stop_daemon(h->d);
	http_conns_destroy(&h->conns);
	http_tries_destroy(&h->tries);
	http_log_flush(http_now_us(), true);
	if (h->have_key)
		pthread_key_delete(h->db_key);
	free(h->db_url);
	free(h->token);
	free(h);
}
