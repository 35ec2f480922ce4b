/*
** server.c - `due serve`: libmicrohttpd glue, request checks, the route
** table and the per-thread store handles.
**
** Workload: an operator's dashboard, a Prometheus scraper and scripts
** posting a few hundred tasks a second; each request is one or two short
** store calls.  libmicrohttpd runs a pool of event-loop threads (epoll),
** each owning its connections, with a connection limit and an idle
** timeout, so slow or idle clients cost a socket, not a thread.
**
** Lifecycle of a request (libmicrohttpd calls on_access repeatedly):
**   1. headers in: allocate the http_req, check Host (loopback binds
**      refuse foreign host names: DNS rebinding), and for a change (any
**      method but GET/HEAD) the Origin (cross-site forms) and the bearer
**      token; refuse a declared Content-Length over the limit.  A refusal
**      is answered right away and the body, if any, is never read.
**   2. body chunks: kept up to the limit, counted and dropped beyond it.
**   3. end: route and run the handler, which answers exactly once.
** on_completed frees the http_req whatever happened.
**
** Store handles: a due_db is used by one thread at a time, so each
** event-loop thread opens its own on first use and keeps it (a pthread
** key whose destructor closes it when the thread ends, at stop).  A store
** error drops the handle; the next request reopens it.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <microhttpd.h>

#include "http/internal.h"

/* Beyond this many body bytes a request over the limit is cut off. */
#define DISCARD_LIMIT (64u << 20)

struct due_http {
	struct MHD_Daemon *d;
	char *db_url;
	char *token;
	size_t token_len;
	bool loopback;
	size_t max_body;
	size_t max_payload;
	unsigned port;
	pthread_key_t db_key;
	bool have_key;
};

/* ------------------------------------------------------------------ */
/* Per-thread store handles                                            */
/* ------------------------------------------------------------------ */

static void close_db(void *db)
{
	due_close(db);
}

int http_db(http_req *r, due_db **out)
{
	due_db *db = pthread_getspecific(r->srv->db_key);
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	int rc;

	if (db) {
		*out = db;
		return 0;
	}
	o.max_payload = r->srv->max_payload;
	if ((rc = due_open(&db, r->srv->db_url, &o)) < 0) {
		snprintf(r->err, sizeof(r->err), "%s", due_error_last());
		due_close(db);
		return rc;
	}
	pthread_setspecific(r->srv->db_key, db);
	*out = db;
	return 0;
}

/* Close this thread's handle (after a store error). */
static void drop_db(const due_http *h)
{
	due_db *db = pthread_getspecific(h->db_key);
	pthread_setspecific(h->db_key, NULL);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Replies                                                             */
/* ------------------------------------------------------------------ */

void http_add_header(http_req *r, const char *name, const char *value)
{
	if (r->n_hdr == HTTP_MAX_HEADERS)
		return;
	snprintf(r->hdr[r->n_hdr].name, sizeof(r->hdr[0].name), "%s", name);
	snprintf(r->hdr[r->n_hdr].value, sizeof(r->hdr[0].value), "%s", value);
	r->n_hdr++;
}

/* Queue resp (consumed) with the common headers; the MHD_Result. */
static int queue(http_req *r, unsigned status, struct MHD_Response *resp,
		 const char *ctype)
{
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	for (int i = 0; i < r->n_hdr; i++)
		MHD_add_response_header(resp, r->hdr[i].name, r->hdr[i].value);
	ret = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

int http_reply_text(http_req *r, unsigned status, const char *ctype,
		    const char *body, size_t len)
{
	return queue(r, status,
		     MHD_create_response_from_buffer(len, (void *)body,
						     MHD_RESPMEM_MUST_COPY),
		     ctype);
}

/* The body as `due ... --json` prints it: indented, ASCII, a newline. */
int http_reply_json(http_req *r, unsigned status, json_t *json)
{
	char *s = json ? json_dumps(json, JSON_INDENT(2) | JSON_ENSURE_ASCII) : NULL;
	size_t len;
	char *b;

	json_decref(json);
	if (!s)
		return http_reply_text(r, 500, "application/json",
				       "{\"error\": \"internal\", \"detail\": "
				       "\"out of memory\"}\n", 47);
	len = strlen(s);
	if (!(b = realloc(s, len + 2))) {
		free(s);
		return MHD_NO;
	}
	b[len] = '\n';
	b[len + 1] = '\0';
	return queue(r, status,
		     MHD_create_response_from_buffer(len + 1, b,
						     MHD_RESPMEM_MUST_FREE),
		     "application/json");
}

int http_reply_error(http_req *r, unsigned status, const char *code,
		     const char *fmt, ...)
{
	char detail[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	if (status >= 500)
		fprintf(stderr, "due serve: %s %s: %s\n", r->method, r->path, detail);
	return http_reply_json(r, status, json_pack("{s:s,s:s}", "error", code,
						    "detail", detail));
}

int http_reply_bad(http_req *r)
{
	return http_reply_error(r, 400, "bad_request", "%s", r->err);
}

int http_reply_due(http_req *r, int rc)
{
	char detail[1024];
	unsigned st;
	const char *code;

	snprintf(detail, sizeof(detail), "%s", r->err[0] ? r->err : due_error_last());
	switch (rc) {
	case DUE_EINVAL: st = 400; code = "bad_request"; break;
	case DUE_ENOTFOUND: st = 404; code = "not_found"; break;
	case DUE_ESTATE: st = 409; code = "wrong_state"; break;
	case DUE_ECONFLICT: st = 409; code = "conflict"; break;
	case DUE_ETOOBIG: st = 413; code = "too_large"; break;
	case DUE_EBUSY: st = 503; code = "store_busy"; break;
	case DUE_ESCHEMA: st = 503; code = "store_schema"; break;
	case DUE_ESTORE: st = 503; code = "store_error"; break;
	default: st = 500; code = "internal"; break;
	}
	if (rc == DUE_ESTORE || rc == DUE_ESCHEMA || rc == DUE_ERROR)
		drop_db(r->srv);
	return http_reply_error(r, st, code, "%s", detail);
}

/* ------------------------------------------------------------------ */
/* Request data                                                        */
/* ------------------------------------------------------------------ */

const char *http_query(http_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

typedef struct qcheck {
	const char *const *known;
	char bad[128];
} qcheck;

static enum MHD_Result qcheck_one(void *cls, enum MHD_ValueKind kind,
				  const char *key, const char *value)
{
	qcheck *q = cls;
	(void)kind;
	(void)value;
	for (size_t i = 0; q->known && q->known[i]; i++)
		if (!strcmp(q->known[i], key))
			return MHD_YES;
	snprintf(q->bad, sizeof(q->bad), "%s", key);
	return MHD_NO;
}

int http_query_check(http_req *r, const char *const *known)
{
	qcheck q = {.known = known};

	MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, qcheck_one, &q);
	if (!q.bad[0])
		return 0;
	snprintf(r->err, sizeof(r->err), "unknown query parameter '%s'", q.bad);
	return -1;
}

bool http_auth_required(const http_req *r)
{
	return r->srv->token != NULL;
}

/* ------------------------------------------------------------------ */
/* Checks made on the headers, before any body is read                 */
/* ------------------------------------------------------------------ */

static const char *header(http_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

static bool is_read(const char *method)
{
	return !strcmp(method, "GET") || !strcmp(method, "HEAD");
}

/*
** Is the Host header's name one of this machine's loopback names?  Only
** asked when we listen on loopback: a page on a foreign name that
** resolves to 127.0.0.1 (DNS rebinding) then gets nothing.
*/
static bool host_is_loopback(const char *host)
{
	char name[256];
	struct in_addr a4;
	const char *end;
	size_t n;

	if (host[0] == '[') {
		end = strchr(host, ']');
		n = end ? (size_t)(end - host - 1) : 0;
		host++;
	} else {
		end = strchr(host, ':');
		n = end ? (size_t)(end - host) : strlen(host);
	}
	if (n == 0 || n >= sizeof(name))
		return false;
	memcpy(name, host, n);
	name[n] = '\0';
	if (!strcasecmp(name, "localhost") || !strcmp(name, "::1"))
		return true;
	return inet_pton(AF_INET, name, &a4) == 1 &&
	       (ntohl(a4.s_addr) >> 24) == 127;
}

/* A change from a page of another origin (a cross-site form) is refused. */
static bool origin_ok(http_req *r)
{
	const char *origin = header(r, "Origin"), *host = header(r, "Host");

	if (!origin)
		return true;
	if (!host)
		return false;
	if (!strncasecmp(origin, "http://", 7))
		origin += 7;
	else if (!strncasecmp(origin, "https://", 8))
		origin += 8;
	else
		return false; /* "null" and other opaque origins */
	return strcasecmp(origin, host) == 0;
}

/* Compare in time that depends on the lengths only, not on the bytes. */
static bool token_equal(const char *given, size_t glen, const char *want,
			size_t wlen)
{
	volatile unsigned char diff = glen != wlen;
	for (size_t i = 0; i < wlen; i++)
		diff |= (unsigned char)(want[i] ^ (i < glen ? given[i] : 0));
	return diff == 0;
}

/* 0 when the request may change things; else it was answered 401. */
static int check_token(http_req *r)
{
	const char *auth = header(r, "Authorization");

	if (!r->srv->token)
		return 0;
	if (!auth || strncasecmp(auth, "Bearer ", 7) != 0) {
		http_add_header(r, "WWW-Authenticate", "Bearer realm=\"due\"");
		http_reply_error(r, 401, "unauthorized", "this server needs "
				 "'Authorization: Bearer <token>' for changes");
		return -1;
	}
	auth += 7;
	while (*auth == ' ')
		auth++;
	if (!token_equal(auth, strlen(auth), r->srv->token, r->srv->token_len)) {
		http_add_header(r, "WWW-Authenticate",
				"Bearer realm=\"due\", error=\"invalid_token\"");
		http_reply_error(r, 401, "unauthorized", "invalid bearer token");
		return -1;
	}
	return 0;
}

/* First call for a request: refuse early what must not be read. */
static void precheck(http_req *r)
{
	const char *host = header(r, "Host"), *cl;

	if (r->srv->loopback && host && !host_is_loopback(host)) {
		http_reply_error(r, 403, "forbidden", "Host '%s' is not a loopback "
				 "name (this server listens on loopback only)", host);
		r->replied = true;
		return;
	}
	if (!is_read(r->method)) {
		if (!origin_ok(r)) {
			http_reply_error(r, 403, "forbidden", "cross-origin change "
					 "refused (Origin does not match Host)");
			r->replied = true;
			return;
		}
		if (check_token(r) < 0) {
			r->replied = true;
			return;
		}
	}
	cl = header(r, "Content-Length");
	if (cl && strtoull(cl, NULL, 10) > r->srv->max_body) {
		http_reply_error(r, 413, "too_large", "request body over %zu bytes",
				 r->srv->max_body);
		r->replied = true;
	}
}

/* Keep a body chunk, or count it once over the limit. */
static void take_body(http_req *r, const char *data, size_t n)
{
	char *b;

	r->body_seen += n;
	if (r->too_big || r->replied)
		return;
	if (r->body_len + n > r->srv->max_body) {
		r->too_big = true;
		return;
	}
	if (!(b = realloc(r->body, r->body_len + n + 1))) {
		r->too_big = true;
		return;
	}
	memcpy(b + r->body_len, data, n);
	r->body = b;
	r->body_len += n;
	r->body[r->body_len] = '\0';
}

/* ------------------------------------------------------------------ */
/* Routes                                                              */
/* ------------------------------------------------------------------ */

static const char *const q_list[] = {"state", "kind", "limit", "after", NULL};

typedef struct route {
	const char *method;
	const char *pattern;          /* {x} matches one non-empty segment */
	int (*fn)(http_req *r);
	const char *const *query;     /* allowed query parameters */
} route;

static const route routes[] = {
	{"GET", "/", route_dashboard, NULL},
	{"GET", "/health", route_health, NULL},
	{"GET", "/metrics", route_metrics_prom, NULL},
	{"GET", "/v1/metrics", route_metrics_json, NULL},
	{"GET", "/v1/stats", route_stats, NULL},
	{"POST", "/v1/tasks", route_task_create, NULL},
	{"GET", "/v1/tasks", route_task_list, q_list},
	{"GET", "/v1/tasks/{id}", route_task_get, NULL},
	{"DELETE", "/v1/tasks/{id}", route_task_cancel, NULL},
	{"POST", "/v1/tasks/{id}/retry", route_task_retry, NULL},
	{"POST", "/v1/tasks/{id}/requeue", route_task_requeue, NULL},
	{"POST", "/v1/tasks/{id}/kill", route_task_kill, NULL},
	{"GET", "/v1/schedules", route_sched_list, NULL},
	{"GET", "/v1/schedules/{name}", route_sched_get, NULL},
	{"PUT", "/v1/schedules/{name}", route_sched_put, NULL},
	{"DELETE", "/v1/schedules/{name}", route_sched_delete, NULL},
};

#define N_ROUTES (sizeof(routes) / sizeof(routes[0]))

/*
** Match path against pattern; the {x} segment is copied to param.
** 1 on a match, 0 on none, -1 when the segment does not fit param.
*/
static int match(const char *pat, const char *path, char *param, size_t cap)
{
	while (*pat && *path) {
		if (*pat == '{') {
			size_t n = strcspn(path, "/");
			if (n == 0)
				return 0;
			if (n >= cap)
				return -1;
			memcpy(param, path, n);
			param[n] = '\0';
			path += n;
			pat = strchr(pat, '}') + 1;
		} else if (*pat++ != *path++) {
			return 0;
		}
	}
	return !*pat && !*path;
}

static int dispatch(http_req *r)
{
	const char *method = !strcmp(r->method, "HEAD") ? "GET" : r->method;
	char allow[64] = "";
	bool long_seg = false;

	for (size_t i = 0; i < N_ROUTES; i++) {
		int m = match(routes[i].pattern, r->path, r->param, sizeof(r->param));
		long_seg |= m < 0;
		if (m <= 0)
			continue;
		if (strcmp(routes[i].method, method) != 0) {
			size_t n = strlen(allow);
			snprintf(allow + n, sizeof(allow) - n, "%s%s", n ? ", " : "",
				 !strcmp(routes[i].method, "GET") ? "GET, HEAD"
								  : routes[i].method);
			continue;
		}
		if (http_query_check(r, routes[i].query) < 0)
			return http_reply_bad(r);
		return routes[i].fn(r);
	}
	if (allow[0]) {
		http_add_header(r, "Allow", allow);
		return http_reply_error(r, 405, "method_not_allowed",
					"%s is not allowed on %s (allowed: %s)",
					r->method, r->path, allow);
	}
	if (long_seg)
		return http_reply_error(r, 400, "bad_request",
					"path segment too long in %s", r->path);
	return http_reply_error(r, 404, "not_found", "no route %s %s", r->method,
				r->path);
}

/* ------------------------------------------------------------------ */
/* libmicrohttpd callbacks                                             */
/* ------------------------------------------------------------------ */

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c,
				 const char *url, const char *method,
				 const char *version, const char *upload,
				 size_t *upload_size, void **con_cls)
{
	http_req *r = *con_cls;

	(void)version;
	if (!r) {
		if (!(r = calloc(1, sizeof(*r))))
			return MHD_NO;
		r->conn = c;
		r->srv = cls;
		r->method = method;
		r->path = url;
		*con_cls = r;
		precheck(r);
		return MHD_YES;
	}
	if (*upload_size) {
		take_body(r, upload, *upload_size);
		*upload_size = 0;
		return r->body_seen > DISCARD_LIMIT ? MHD_NO : MHD_YES;
	}
	if (r->replied)
		return MHD_YES;
	if (r->too_big)
		return (enum MHD_Result)http_reply_error(
			r, 413, "too_large", "request body over %zu bytes",
			r->srv->max_body);
	return (enum MHD_Result)dispatch(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode why)
{
	http_req *r = *con_cls;

	(void)cls;
	(void)c;
	(void)why;
	if (!r)
		return;
	free(r->body);
	free(r);
	*con_cls = NULL;
}

/*
** libmicrohttpd's messages, minus those about clients that went away or
** stalled: a flood of slow or broken clients must not flood the log.
*/
static void on_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (strstr(msg, "remote side") || strstr(msg, "reset by peer") ||
	    strstr(msg, "timed out") || strstr(msg, "Broken pipe"))
		return;
	n = strlen(msg);
	fprintf(stderr, "due serve: %s%s", msg, n && msg[n - 1] == '\n' ? "" : "\n");
}

/* ------------------------------------------------------------------ */
/* Start and stop                                                      */
/* ------------------------------------------------------------------ */

/* A listening socket on o->addr; -1 with err set. */
static int listen_on(const due_http_opts *o, char *err, size_t errlen)
{
	int fd = socket(o->addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (o->addr->sa_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, o->addr, o->addrlen) < 0 || listen(fd, 511) < 0 ||
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

int due_http_start(due_http **out, const due_http_opts *o, char *err,
		   size_t errlen)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
			 MHD_USE_ERROR_LOG;
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
	if ((fd = listen_on(o, err, errlen)) < 0)
		goto fail;
	h->port = bound_port(fd);
	if (o->addr->sa_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	h->d = MHD_start_daemon(
		flags, 0, NULL, NULL, on_access, h,
		MHD_OPTION_EXTERNAL_LOGGER, on_log, h, /* first: logs the rest */
		MHD_OPTION_LISTEN_SOCKET, fd,
		MHD_OPTION_THREAD_POOL_SIZE, o->threads,
		MHD_OPTION_CONNECTION_LIMIT, o->max_conns,
		MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
	if (!h->d) {
		snprintf(err, errlen, "libmicrohttpd could not start");
		close(fd);
		goto fail;
	}
	*out = h;
	return 0;
fail:
	due_http_stop(h);
	return -1;
}

unsigned due_http_port(const due_http *h)
{
	return h->port;
}

void due_http_stop(due_http *h)
{
	if (!h)
		return;
	if (h->d)
		MHD_stop_daemon(h->d); /* joins the threads: their handles close */
	if (h->have_key)
		pthread_key_delete(h->db_key);
	free(h->db_url);
	free(h->token);
	free(h);
}
