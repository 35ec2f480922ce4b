/*
** reply.c - building replies and queueing them on the connection.
**
** A handler never talks to libmicrohttpd: it may run on a store thread
** while its connection is suspended, and a response may only be queued by
** the event thread that owns the connection.  So http_reply_*() keep the
** reply in the http_req (status, content type, body, extra headers) and
** the event thread queues it with http_queue_reply() when the handler is
** done.  The first reply set wins; a second is dropped (a handler answers
** exactly once).
**
** Errors are JSON, {"error": code, "detail": text}, formatted like every
** other reply (`due ... --json` output: indented, ASCII, a newline).
** Server-side failures (5xx) are logged through http_log(), one line per
** kind per 10 s, so a store outage under load does not flood the log.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "fmt/fmt.h"
#include "http/internal.h"

static const char oom_json[] =
    "{\n  \"error\": \"internal\",\n  \"detail\": \"out of memory\"\n}\n";

void http_add_header(http_req *r, const char *name, const char *value)
{
	if (r->n_hdr == HTTP_MAX_HEADERS)
		return;
	snprintf(r->hdr[r->n_hdr].name, sizeof(r->hdr[0].name), "%s", name);
	snprintf(r->hdr[r->n_hdr].value, sizeof(r->hdr[0].value), "%s", value);
	r->n_hdr++;
}

/* Set the reply once; body is taken (freed here when one is set already). */
static int set_reply(http_req *r, unsigned status, const char *ctype,
		     char *body, size_t len, bool is_static)
{
	if (r->status) {
		if (!is_static)
			free(body);
		return 1;
	}
	r->status = status;
	atomic_fetch_add(&r->srv->replies_unsent, 1);
	r->ctype = ctype;
	r->rbody = body;
	r->rlen = len;
	r->rstatic = is_static;
	return 1;
}

int http_reply_static(http_req *r, unsigned status, const char *ctype,
		      const char *body, size_t len)
{
	return set_reply(r, status, ctype, (char *)body, len, true);
}

int http_reply_take(http_req *r, unsigned status, const char *ctype, char *body,
		    size_t len)
{
	if (!body)
		return http_reply_static(r, 500, "application/json", oom_json,
					 sizeof(oom_json) - 1);
	return set_reply(r, status, ctype, body, len, false);
}

int http_reply_text(http_req *r, unsigned status, const char *ctype,
		    const char *body, size_t len)
{
	char *copy = malloc(len + 1);

	if (copy) {
		memcpy(copy, body, len);
		copy[len] = '\0';
	}
	return http_reply_take(r, status, ctype, copy, len);
}

/* The body as `due ... --json` prints it: indented, ASCII, a newline. */
int http_reply_json(http_req *r, unsigned status, json_t *json)
{
	char *s =
	    json ? json_dumps(json, JSON_INDENT(2) | JSON_ENSURE_ASCII) : NULL;
	size_t len;
	char *b;

	json_decref(json);
	if (!s)
		return http_reply_take(r, 500, "application/json", NULL, 0);
	len = strlen(s);
	if (!(b = realloc(s, len + 2))) {
		free(s);
		return http_reply_take(r, 500, "application/json", NULL, 0);
	}
	b[len] = '\n';
	b[len + 1] = '\0';
	return http_reply_take(r, status, "application/json", b, len + 1);
}

/*
** A message may quote what the client sent (a kind or name from the path,
** a query value), which need not be UTF-8; a JSON string must be.  Each
** byte that does not start a valid sequence is written as \xHH, as the
** CLI's text output does, so the reply is a 400 naming the input (it was a
** 500 "out of memory": json_pack refuses the string).
*/
static void escape_non_utf8(char *dst, size_t cap, const char *src)
{
	size_t o = 0, n = strlen(src);

	for (size_t i = 0; i < n && o + 5 < cap;) {
		const unsigned char *p = (const unsigned char *)src + i;
		size_t len = due__fmt_utf8_len(p, n - i);
		if (len) {
			if (o + len >= cap)
				break;
			memcpy(dst + o, p, len);
			o += len;
			i += len;
		} else {
			o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", *p);
			i++;
		}
	}
	dst[o] = '\0';
}

int http_reply_error(http_req *r, unsigned status, const char *code,
		     const char *fmt, ...)
{
	char raw[1024], detail[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	if (due__fmt_is_utf8((const unsigned char *)raw, strlen(raw)))
		memcpy(detail, raw, sizeof(detail));
	else
		escape_non_utf8(detail, sizeof(detail), raw);
	if (status >= 500)
		http_log(code, "%s %s: %s", r->method ? r->method : "-",
			 r->path ? r->path : "-", detail);
	if (status == 503)
		http_add_header(r, "Retry-After", "1");
	return http_reply_json(
	    r, status, json_pack("{s:s,s:s}", "error", code, "detail", detail));
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

	snprintf(detail, sizeof(detail), "%s",
		 r->err[0] ? r->err : due_error_last());
	switch (rc) {
	case DUE_EINVAL:
		st = 400;
		code = "bad_request";
		break;
	case DUE_ENOTFOUND:
		st = 404;
		code = "not_found";
		break;
	case DUE_ESTATE:
		st = 409;
		code = "wrong_state";
		break;
	case DUE_ECONFLICT:
		st = 409;
		code = "conflict";
		break;
	case DUE_ETOOBIG:
		st = 413;
		code = "too_large";
		break;
	case DUE_EUNSUPPORTED:
		st = 501;
		code = "not_supported";
		break;
	case DUE_EBUSY:
		st = 503;
		code = "store_busy";
		break;
	case DUE_ESCHEMA:
		st = 503;
		code = "store_schema";
		break;
	case DUE_ESTORE:
		st = 503;
		code = "store_error";
		break;
	default:
		st = 500;
		code = "internal";
		break;
	}
	if (rc == DUE_ESTORE || rc == DUE_ESCHEMA || rc == DUE_ERROR)
		http_db_drop(r->srv);
	return http_reply_error(r, st, code, "%s", detail);
}

int http_queue_reply(http_req *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	if (r->rstatic)
		resp = MHD_create_response_from_buffer(r->rlen, r->rbody,
						       MHD_RESPMEM_PERSISTENT);
	else
		resp = MHD_create_response_from_buffer(r->rlen, r->rbody,
						       MHD_RESPMEM_MUST_FREE);
	if (!resp)
		return MHD_NO;
	if (!r->rstatic)
		r->rbody = NULL; /* the response owns it now */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->ctype);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
				"no-store");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	for (int i = 0; i < r->n_hdr; i++)
		MHD_add_response_header(resp, r->hdr[i].name, r->hdr[i].value);
	http_mhd_ours(true);
	ret = MHD_queue_response(r->conn, r->status, resp);
	http_mhd_ours(false);
	MHD_destroy_response(resp);
	return ret;
}

void http_req_free(http_req *r)
{
	if (!r)
		return;
	if (!r->rstatic)
		free(r->rbody);
	for (int i = 0; i < r->n_args; i++) {
		free(r->args[i].name);
		free(r->args[i].value);
	}
	free(r->body);
	free(r->path);
	free(r->target);
	free(r);
}
