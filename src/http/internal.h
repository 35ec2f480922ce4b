/*
** internal.h - what the parts of `due serve` share: the request being
** answered, replies (JSON, errors, text), the store worker pools, the
** connection deadlines, the log and strict readers for request data.
**
** Threads.  libmicrohttpd's event-loop threads own the connections: they
** read requests, check them and send replies, and never wait for the
** store.  A route that needs the store is handed, with its connection
** suspended, to a pool of store threads (pool.c: one pool for reads, one
** for changes, and one prober for /health; claims.c for POST /v1/claims,
** whose long polls wait without a thread); the handler runs there, builds
** its reply in the http_req, and resumes the connection; the event thread
** then queues the reply.  So an http_req is touched by one thread at a
** time: the event thread until it is handed over, the store thread until
** it resumes the connection, the event thread again after.
*/
#ifndef DUE_HTTP_INTERNAL_H
#define DUE_HTTP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "due.h"
#include "http/http.h"

struct MHD_Connection;
struct MHD_Daemon;

#define HTTP_MAX_HEADERS 4
#define HTTP_MAX_ARGS 16

/* Payload, result and error text in lists and action replies: cut here. */
#define HTTP_PREVIEW_BYTES 4096
/* A list reply stops adding tasks before it passes this many bytes. */
#define HTTP_LIST_BUDGET (4u << 20)
/* Store bytes (payloads + results) a list holds in memory at once. */
#define HTTP_LIST_MEMORY (16u << 20)
/* /health answers by then, whatever the store does. */
#define HTTP_HEALTH_TIMEOUT_MS 800

struct http_conn;

/* One decoded query argument (no NUL inside; value "" when no '='). */
typedef struct http_arg {
	char *name;
	char *value;
} http_arg;

/* One request, from its request line to the reply. */
typedef struct http_req {
	struct MHD_Connection *conn;
	struct due_http *srv;
	struct http_conn *hc; /* the connection's deadline record, or NULL */
	char *target;	      /* request-target as sent, never decoded */
	const char *method;   /* as sent; HEAD is routed as GET */
	const char *version;  /* "HTTP/1.1" or "HTTP/1.0" */
	char *path;	      /* the target's path, raw (not decoded) */
	http_arg args[HTTP_MAX_ARGS];
	int n_args;
	int (*route_fn)(struct http_req *r); /* the matched route's handler */
	char param[256]; /* the {id} or {name} segment, decoded */
	char *body;	 /* NUL-terminated request body (may be NULL) */
	size_t body_len;
	size_t body_seen; /* bytes received, kept or not */
	bool started;	  /* the headers were checked */
	bool too_big;	  /* body over the limit: discarded, 413 */
	bool overload;	  /* bodies in memory over the budget: 503 */
	bool handed;	  /* given to a store thread, suspended */
	char err[512];	  /* detail of a 400, set by the readers */
	/* The reply, built by http_reply_*() and queued by the event thread. */
	unsigned status; /* 0 until a reply is set */
	const char *ctype;
	char *rbody; /* malloc'd, or static when rstatic */
	size_t rlen;
	bool rstatic;
	struct {
		char name[32];
		char value[512];
	} hdr[HTTP_MAX_HEADERS];
	int n_hdr;
	/* pool.c's bookkeeping while the request waits for a store thread */
	struct http_req *next;
	int64_t deadline_us;
} http_req;

/* ---- replies: each sets r's reply (once) and returns 1 ---- */

/* Reply with `json` (stolen, may be NULL = 500) and the given status. */
int http_reply_json(http_req *r, unsigned status, json_t *json);
/* Reply {"error": code, "detail": printf(...)} with status. */
int http_reply_error(http_req *r, unsigned status, const char *code,
		     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Reply 400 bad_request with r->err as the detail. */
int http_reply_bad(http_req *r);
/*
** Reply for a failed library call: the status and error code follow rc
** (EINVAL 400, ENOTFOUND 404, ESTATE/ECONFLICT 409, ETOOBIG 413,
** EBUSY/ESTORE/ESCHEMA 503, else 500), the detail is due_error_last().
** A store error also drops this thread's store handle (reopened next time).
*/
int http_reply_due(http_req *r, int rc);
/* Reply with a body of the given content type (copied). */
int http_reply_text(http_req *r, unsigned status, const char *ctype,
		    const char *body, size_t len);
/* Reply with a static body (not copied, never freed). */
int http_reply_static(http_req *r, unsigned status, const char *ctype,
		      const char *body, size_t len);
/* Reply with a malloc'd body (taken). */
int http_reply_take(http_req *r, unsigned status, const char *ctype, char *body,
		    size_t len);
/* Add a header to the coming reply (copied; at most HTTP_MAX_HEADERS). */
void http_add_header(http_req *r, const char *name, const char *value);
/* Event thread: queue r's reply on its connection; an MHD_Result. */
int http_queue_reply(http_req *r);
/* Free what r owns (at the end of the request). */
void http_req_free(http_req *r);

/* ---- this thread's store handle (thread_db.c) ---- */

/* This thread's store handle, opened on first use.  0 or a DUE_E* code. */
int http_db(http_req *r, due_db **out);
/* Close this thread's store handle (after a store error). */
void http_db_drop(const struct due_http *h);

/* ---- request data (request.c) ---- */

/* A decoded query argument, or NULL when absent. */
const char *http_query(http_req *r, const char *name);
/*
** 0 when every query argument is one of `known` (NULL-terminated); else
** -1 with r->err naming the first unknown one.
*/
int http_query_check(http_req *r, const char *const *known);
/* Does the server require a token for changes? */
bool http_auth_required(const http_req *r);
/* The payload limit the server was started with. */
size_t http_max_payload(const http_req *r);
/*
** First call for a request: parse the target (path and query, strictly),
** check the headers (framing, Host, Origin, token, size).  A refusal sets
** r's reply; the body, if any, is then never read.
*/
void http_precheck(http_req *r);
/* Is the whole body within max_body, a \uXXXX escape weighing 2 bytes? */
bool http_body_fits(const http_req *r);
/* Keep a body chunk, or count it once over the limit or the budget. */
void http_take_body(http_req *r, const char *data, size_t n);
/*
** Decode the %XX escapes of s[0..n) into out (NUL-terminated, at most
** cap - 1 bytes).  -1 on a malformed escape, an escaped NUL, or no room.
*/
int http_unescape(const char *s, size_t n, bool plus_is_space, char *out,
		  size_t cap);

/* ---- store threads (pool.c) ---- */

typedef struct http_pool {
	struct due_http *srv;
	const char *name;
	pthread_mutex_t mu; /* guards the fields below; taken before any
			       libmicrohttpd lock (suspend) */
	pthread_cond_t cv;
	http_req **ring;
	size_t cap, head, count;
	pthread_t *threads;
	unsigned n_threads;
	bool stopping;
} http_pool;

int http_pool_start(http_pool *p, struct due_http *srv, const char *name,
		    unsigned threads, size_t queue);
/*
** Event thread: suspend r's connection and queue r for a store thread,
** which runs r->route's handler and resumes the connection.  -1 (and
** nothing done) when the queue is full or the pool is stopping.
*/
int http_pool_submit(http_pool *p, http_req *r);
/* Answer what waits with 503, let running handlers end, join. */
void http_pool_stop(http_pool *p);

typedef struct http_health {
	struct due_http *srv;
	pthread_mutex_t mu; /* guards the lists and flags; taken before
			       any libmicrohttpd lock (suspend) */
	pthread_cond_t cv;
	http_req *waiting; /* arrived since the running probe began */
	http_req *probing; /* answered by the running probe */
	pthread_t thread;
	bool started, stopping;
} http_health;

int http_health_start(http_health *hh, struct due_http *srv);
/* Event thread: suspend r and have the prober answer it.  -1 if stopping. */
int http_health_submit(http_health *hh, http_req *r);
/* Answer 503 every /health request waiting past its deadline. */
void http_health_expire(http_health *hh, int64_t now_us);
void http_health_stop(http_health *hh);

/* ---- the tries handed out by claims (tries.c) ---- */

/* One try claimed through this server, and when it must end. */
typedef struct http_try {
	due_id id;
	int32_t attempt;
	int64_t limit_us;  /* its time limit, 0 for none */
	int64_t deadline;  /* monotonic: it must end by then (limit_us > 0) */
	int64_t lease_end; /* monotonic: its lease ends about then */
} http_try;

typedef struct http_tries {
	pthread_mutex_t mu; /* guards the table; held for nothing else */
	struct http_try_node **buckets;
	size_t count;
	size_t n_limited; /* entries with a deadline still to watch */
} http_tries;

int http_tries_init(http_tries *ts);
void http_tries_destroy(http_tries *ts);
/* Remember a try (nothing when the table is full: it is judged from the
   store then). */
void http_tries_add(http_tries *ts, const http_try *t);
/* Is (id, attempt) known here?  Copies it to *out. */
bool http_tries_get(http_tries *ts, due_id id, int32_t attempt, http_try *out);
/* Its lease was extended to end at lease_end (monotonic). */
void http_tries_lease(http_tries *ts, due_id id, int32_t attempt,
		      int64_t lease_end);
/* The try ended: forget it. */
void http_tries_remove(http_tries *ts, due_id id, int32_t attempt);
/*
** Up to cap tries whose deadline has passed, into out, each once: they
** are forgotten here (a call for one is judged from the store's record).
** Lowers *next to the earliest deadline still ahead.
*/
size_t http_tries_overdue(http_tries *ts, int64_t now, http_try *out,
			  size_t cap, int64_t *next);
/* Forget the tries whose lease ended a minute before now. */
void http_tries_prune(http_tries *ts, int64_t now);

/* ---- long polls: POST /v1/claims (claims.c) ---- */

#define HTTP_MAX_KINDS 64
/* A claim's (or a batch of completions') items, and a lease, at most. */
#define HTTP_MAX_CLAIM 1000
#define HTTP_MAX_LEASE_US (24 * 3600 * 1000000LL)

/* A claim request, read from its body (claim_body.c). */
typedef struct http_claim_spec {
	const char *kinds[HTTP_MAX_KINDS]; /* into the parsed body */
	due_claim_opts o;
	int64_t wait_us;
} http_claim_spec;

/*
** Read a POST /v1/claims body (empty: every default) into *c; *body
** receives the parsed JSON, which c points into (the caller frees it).
** -1 with r->err naming the field.
*/
int http_claim_read(http_req *r, json_t **body, http_claim_spec *c);
/*
** The claimed tasks as the reply's JSON array (*out): each task with its
** idempotency key, its deadline (claim time + time limit, store clock;
** null without a limit) and, for one added with run-after, its parents'
** results ("parent_results", read through db).  0, or a DUE_E* code
** (DUE_ENOMEM, or the store's when a parent could not be read).
*/
int http_claimed_json(due_db *db, const due_task_list *l, int64_t lease_us,
		      json_t **out);

typedef struct http_poll http_poll;

typedef struct http_poll_list {
	http_poll *head, *tail;
} http_poll_list;

typedef struct http_claims {
	struct due_http *srv;
	pthread_mutex_t mu;    /* guards the lists, counts and flags below;
				  taken before any libmicrohttpd lock (suspend,
				  resume) */
	pthread_cond_t cv;     /* the claims threads wait for a ready poll */
	http_poll_list ready;  /* to claim for now, oldest first */
	http_poll_list parked; /* found nothing: wait to look again */
	size_t n_polls, cap;   /* polls held (ready, parked, running) */
	pthread_t *threads;
	unsigned n_threads;
	pthread_t watcher; /* notifications, wake-ups, expired leases */
	bool have_watcher;
	int efd; /* eventfd: a poll parked, or stop: wake the watcher */
	atomic_bool listening; /* the watcher hears the store's notices */
	atomic_bool armed;     /* the worker API was used: the watcher runs */
	bool stopping;
	struct http_doubt *doubts; /* claims that got no answer (claims.c) */
} http_claims;

int http_claims_start(http_claims *cs, struct due_http *srv, unsigned threads,
		      size_t cap);
/*
** Event thread: read r's body and queue the poll (its connection
** suspended).  A bad body sets r's 400 reply and returns 0; -1 (nothing
** done) when too many polls are held or the server is stopping.
*/
int http_claims_submit(http_claims *cs, http_req *r);
/*
** Answer the polls past their bound: `[]` once a poll that has looked
** reached its wait, 503 store_busy for one that got no claims thread in
** time.  Any thread; no store call.
*/
void http_claims_expire(http_claims *cs, int64_t now);
/*
** The worker API is in use (a claim, complete, fail or extend came): from
** now on the watcher holds a store handle, takes back expired leases and
** ends overdue tries.  Until then it opens nothing, so a server used only
** for the dashboard and the admin API holds no store connection it does
** not need (an SQLite locker in locking_mode=EXCLUSIVE can still start).
*/
void http_claims_arm(http_claims *cs);
/* Answer every waiting poll, let running claims end, join. */
void http_claims_stop(http_claims *cs);

/* ---- GET /v1/tasks/{id}?wait=DUR: waits for a task's end (waits.c) ---- */

typedef struct http_wait http_wait;

typedef struct http_waits {
	struct due_http *srv;
	pthread_mutex_t mu; /* guards head, n, stopping; taken before any
			       libmicrohttpd lock (suspend, resume) */
	http_wait *head;    /* waiting (the waiter takes it for a round) */
	size_t n, cap;	    /* waits held, at most */
	pthread_t thread;   /* the waiter: the store, the clients' sockets */
	bool have_thread, inited, stopping;
	int efd; /* eventfd: a wait came, or stop */
} http_waits;

/* The longest ?wait= (400 above it). */
#define HTTP_MAX_TASK_WAIT_US (60 * 1000000LL)

int http_waits_start(http_waits *ws, struct due_http *srv, size_t cap);
/*
** Event thread: hold r (its connection suspended) until task id is
** finished or wait_us passed; the waiter replies.  -1 (nothing done) when
** `cap` waits are held or the server is stopping.
*/
int http_waits_submit(http_waits *ws, http_req *r, due_id id, int64_t wait_us);
/* Answer every wait 503 shutting_down, join the waiter. */
void http_waits_stop(http_waits *ws);

/* ---- connection deadlines (conns.c) ---- */

typedef struct http_conn {
	struct http_conn *prev, *next;
	int fd;
	int64_t since_us; /* when the current request's clock started */
	bool armed;	  /* in the list: a request is being received */
} http_conn;

typedef struct http_conns {
	pthread_mutex_t mu;	/* guards the list; held while shutting a
				   socket so that it cannot be closed meanwhile */
	http_conn *head, *tail; /* armed connections, oldest clock first */
	int64_t timeout_us;
} http_conns;

void http_conns_init(http_conns *cs, int64_t timeout_us);
void http_conns_destroy(http_conns *cs);
/* A new connection: its first request's clock starts now. */
http_conn *http_conns_open(http_conns *cs, int fd);
/* The connection closed (before its socket is): forget it. */
void http_conns_close(http_conns *cs, http_conn *hc);
/* A request arrived whole: no deadline while it is answered. */
void http_conns_busy(http_conns *cs, http_conn *hc);
/* A reply ended: the next request's clock starts now. */
void http_conns_idle(http_conns *cs, http_conn *hc);
/* Shut every connection whose request is not in after the timeout. */
void http_conns_reap(http_conns *cs, int64_t now_us);

/* ---- the log (log.c) ---- */

/*
** Log one event of the given kind.  The first of a kind is printed at
** once; more of the same kind within 10 s are counted and printed as one
** line when the 10 s are over (http_log_flush), so a flood of bad clients
** or store errors gives a line per kind per 10 s.
*/
void http_log(const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Print the counts of the windows that ended (all of them when `all`). */
void http_log_flush(int64_t now_us, bool all);
/* libmicrohttpd's log: disconnects dropped, the rest through http_log. */
void http_log_mhd(void *cls, const char *fmt, va_list ap);
/* The last reason libmicrohttpd gave for refusing a request, this thread. */
const char *http_log_mhd_reason(void);
void http_log_mhd_forget_reason(void);

/* ---- libmicrohttpd's own error replies (mhd_errors.c) ---- */

/* Mark the calls to MHD_queue_response() made by our code. */
void http_mhd_ours(bool on);

/* ---- the server ---- */

struct due_http {
	struct MHD_Daemon *d;
	char *db_url;
	char *token;
	size_t token_len;
	bool loopback;
	size_t max_body;
	size_t max_payload;
	size_t body_budget;	   /* request bodies held at once, in bytes */
	atomic_size_t body_bytes;  /* ... held now */
	atomic_int replies_unsent; /* replies set whose request has not
				      completed: a stop lets them go out */
	unsigned port;
	pthread_key_t db_key; /* each store thread's due_db */
	bool have_key;
	atomic_bool stopping; /* new store requests get 503 */
	http_pool reads, writes;
	http_claims claims; /* POST /v1/claims: long polls (claims.c) */
	http_waits waits;   /* GET /v1/tasks/{id}?wait=: (waits.c) */
	http_tries tries;   /* the tries claimed here (tries.c) */
	http_health health;
	http_conns conns;
	pthread_t ticker; /* deadlines, /health timeouts, log flush */
	bool have_ticker, tick_stop;
	pthread_mutex_t tick_mu;
	pthread_cond_t tick_cv;
};

/* Monotonic microseconds. */
int64_t http_now_us(void);

/* ---- strict JSON body readers: -1 with r->err set on bad input ---- */

/*
** Parse the body as one JSON object whose keys are all in `known`.
** An empty body gives an empty object when allow_empty.  The caller
** owns the result.
*/
int json_body_object(http_req *r, const char *const *known, bool allow_empty,
		     json_t **out);
/* Optional string member; *out untouched when absent. */
int json_opt_string(http_req *r, json_t *o, const char *name, const char **out);
/* Optional integer member in [lo, hi]. */
int json_opt_int(http_req *r, json_t *o, const char *name, int64_t lo,
		 int64_t hi, int64_t *out);
/* Optional duration string ("10s", "1h30m") member, in microseconds. */
int json_opt_duration(http_req *r, json_t *o, const char *name, int64_t *out);
/*
** Optional payload: `payload` (string) or `payload_b64` (base64), not
** both.  *out_blob receives a malloc'd buffer the caller frees when the
** payload was base64 (else NULL); *p / *len point at the bytes.
*/
int json_opt_payload(http_req *r, json_t *o, const void **p, size_t *len,
		     unsigned char **out_blob);
/* Parse a task id (positive decimal); -1 with r->err. */
int http_parse_id(http_req *r, const char *text, due_id *out);

/* ---- route handlers (routes_*.c, metrics.c) ---- */

int route_task_create(http_req *r);
int route_task_list(http_req *r);
int route_task_get(http_req *r);
int route_task_cancel(http_req *r);
int route_task_reschedule(http_req *r);
int route_task_retry(http_req *r);
int route_task_requeue(http_req *r);
int route_task_kill(http_req *r);
int route_sched_list(http_req *r);
int route_sched_get(http_req *r);
int route_sched_put(http_req *r);
int route_sched_delete(http_req *r);
int route_kind_list(http_req *r);
int route_kind_get(http_req *r);
int route_kind_put(http_req *r);
int route_kind_delete(http_req *r);
int route_stats(http_req *r);
int route_metrics_json(http_req *r);
int route_metrics_prom(http_req *r);
int route_dashboard(http_req *r);
/* the worker API (routes_work.c; POST /v1/claims is claims.c's) */
int route_task_complete(http_req *r);
int route_task_fail(http_req *r);
int route_task_extend(http_req *r);
int route_completions(http_req *r);

/*
** /health's answer from one store probe: *status and a malloc'd JSON text
** in *out (the caller frees).  Runs on the prober thread with its handle.
*/
void http_health_probe(due_db **db, const struct due_http *srv,
		       unsigned *status, char **out, size_t *len);

#endif
