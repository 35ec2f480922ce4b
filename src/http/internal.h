/*
** internal.h - what the route handlers of `due serve` share: the request
** being answered, replies (JSON, errors, text), the per-thread store
** handle and strict readers for JSON request bodies.
**
** Threads: every function here runs in one of libmicrohttpd's event-loop
** threads, on behalf of one request.  A request is answered exactly once:
** each handler ends with one http_reply_*() call and returns its value.
*/
#ifndef DUE_HTTP_INTERNAL_H
#define DUE_HTTP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "due.h"
#include "http/http.h"

struct MHD_Connection;

#define HTTP_MAX_HEADERS 4

/* One request, from its first header to the reply. */
typedef struct http_req {
	struct MHD_Connection *conn;
	const struct due_http *srv;
	const char *method;  /* as sent; HEAD is routed as GET */
	const char *path;    /* percent-decoded path, without the query */
	char param[256];     /* the {id} or {name} segment of the route */
	char *body;          /* NUL-terminated request body (may be NULL) */
	size_t body_len;
	size_t body_seen;    /* bytes received, kept or not */
	bool too_big;        /* body over the limit: discarded, 413 */
	bool replied;        /* a response was queued before the body */
	char err[512];       /* detail of a 400, set by the json_* readers */
	struct { char name[32]; char value[512]; } hdr[HTTP_MAX_HEADERS];
	int n_hdr;
} http_req;

/* ---- replies: each queues the response and returns an MHD_Result ---- */

/* Reply with `json` (stolen, may be NULL = 500) and the given status. */
int http_reply_json(http_req *r, unsigned status, json_t *json);
/* Reply {"error": code, "detail": printf(...)} with status. */
int http_reply_error(http_req *r, unsigned status, const char *code,
		     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
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
/* Add a header to the coming reply (copied; at most HTTP_MAX_HEADERS). */
void http_add_header(http_req *r, const char *name, const char *value);

/* ---- request data ---- */

/* This thread's store handle, opened on first use.  0 or a DUE_E* code. */
int http_db(http_req *r, due_db **out);
/* A query argument, or NULL when absent. */
const char *http_query(http_req *r, const char *name);
/*
** 0 when every query argument is one of `known` (NULL-terminated); else
** -1 with r->err naming the first unknown one.
*/
int http_query_check(http_req *r, const char *const *known);
/* Does the server require a token for changes? */
bool http_auth_required(const http_req *r);

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
/* Parse a task id path segment (positive decimal). */
int http_parse_id(http_req *r, const char *text, due_id *out);

/* ---- route handlers (routes_*.c, metrics.c) ---- */

int route_task_create(http_req *r);
int route_task_list(http_req *r);
int route_task_get(http_req *r);
int route_task_cancel(http_req *r);
int route_task_retry(http_req *r);
int route_task_requeue(http_req *r);
int route_task_kill(http_req *r);
int route_sched_list(http_req *r);
int route_sched_get(http_req *r);
int route_sched_put(http_req *r);
int route_sched_delete(http_req *r);
int route_stats(http_req *r);
int route_health(http_req *r);
int route_metrics_json(http_req *r);
int route_metrics_prom(http_req *r);
int route_dashboard(http_req *r);

#endif
