/*
** request.c - what is checked on a request before anything runs: the
** request-target, the framing headers, Host, Origin and the token, and
** the body's size.
**
** The target is taken as the client sent it (libmicrohttpd is told not to
** decode it: server.c) and read strictly here:
**   - it must be origin-form ("/path?query"), of visible ASCII, with every
**     '%' starting a two-digit hex escape; else 400;
**   - routes are matched on the raw path, segment by segment, and only the
**     {id} / {name} segment is then decoded; so "/v1/tasks/4%2Fretry" is
**     task "4/retry" (a bad id), never the retry of task 4, and an escaped
**     NUL anywhere is a 400, never a cut string;
**   - query arguments are split on '&' and '=', then decoded ('+' is a
**     space); an escaped NUL, a repeated name or more than HTTP_MAX_ARGS
**     arguments is a 400.
**
** Framing (RFC 9112 §6): more than one Content-Length with different
** values, Content-Length together with Transfer-Encoding, a transfer coding
** other than chunked, a header name that is not a token (a space before
** the colon) or more than one Host: 400 (501 for an unknown coding).  A
** proxy in front that reads a request differently from us is how requests
** get smuggled; we refuse every ambiguous one.  libmicrohttpd itself
** refuses HTTP/1.1 without Host (MHD_OPTION_STRICT_FOR_CLIENT) and bad
** Content-Length values; mhd_errors.c makes those replies JSON.
**
** Bodies: at most max_body bytes each (413 beyond), where a JSON \uXXXX
** escape counts as 2 bytes like \n: max_body is sized for a payload of
** the payload limit written with two-byte escapes, and a payload of
** control bytes, six bytes each in JSON, must fit as well.  So up to
** 3 x max_body bytes are read, then weighed.  At most body_budget bytes
** are held by all requests together (503 beyond), so thousands of
** clients posting at once cannot exhaust memory.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <microhttpd.h>

#include "http/internal.h"

bool http_auth_required(const http_req *r) { return r->srv->token != NULL; }

size_t http_max_payload(const http_req *r) { return r->srv->max_payload; }

/* ------------------------------------------------------------------ */
/* The request-target                                                  */
/* ------------------------------------------------------------------ */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int http_unescape(const char *s, size_t n, bool plus_is_space, char *out,
		  size_t cap)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];
		if (c == '%') {
			if (n - i < 3 || hexval(s[i + 1]) < 0 ||
			    hexval(s[i + 2]) < 0)
				return -1;
			c = hexval(s[i + 1]) * 16 + hexval(s[i + 2]);
			if (c == 0)
				return -1;
			i += 2;
		} else if (c == '+' && plus_is_space) {
			c = ' ';
		}
		if (k + 1 >= cap)
			return -1;
		out[k++] = (char)c;
	}
	out[k] = '\0';
	return 0;
}

/* Visible ASCII with well-formed escapes, none of them a NUL. */
static bool target_chars_ok(const char *t)
{
	for (const char *p = t; *p; p++) {
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f ||
		    *p == '#')
			return false;
		if (*p == '%' && (hexval(p[1]) < 0 || hexval(p[2]) < 0 ||
				  (p[1] == '0' && p[2] == '0')))
			return false;
	}
	return true;
}

/* Add one "name=value" piece of the query; -1 with r->err. */
static int add_arg(http_req *r, const char *s, size_t n)
{
	const char *eq = memchr(s, '=', n);
	size_t kn = eq ? (size_t)(eq - s) : n, vn = eq ? n - kn - 1 : 0;
	char *name = malloc(kn + 1), *value = malloc(vn + 1);

	if (!name || !value || http_unescape(s, kn, true, name, kn + 1) < 0 ||
	    http_unescape(eq ? eq + 1 : "", vn, true, value, vn + 1) < 0) {
		snprintf(r->err, sizeof(r->err),
			 "malformed query argument '%.*s' "
			 "(a bad %%-escape or an escaped NUL)",
			 (int)(n > 64 ? 64 : n), s);
		goto fail;
	}
	for (int i = 0; i < r->n_args; i++)
		if (!strcmp(r->args[i].name, name)) {
			snprintf(r->err, sizeof(r->err),
				 "query parameter '%.64s' "
				 "given more than once",
				 name);
			goto fail;
		}
	if (r->n_args == HTTP_MAX_ARGS) {
		snprintf(r->err, sizeof(r->err),
			 "more than %d query parameters", HTTP_MAX_ARGS);
		goto fail;
	}
	r->args[r->n_args].name = name;
	r->args[r->n_args].value = value;
	r->n_args++;
	return 0;
fail:
	free(name);
	free(value);
	return -1;
}

/* Split r->target into the raw path and the decoded arguments. */
static int parse_target(http_req *r)
{
	const char *t = r->target, *q;
	size_t n;

	if (!t || t[0] != '/') {
		snprintf(r->err, sizeof(r->err),
			 "the request target must be a "
			 "path starting with '/'");
		return -1;
	}
	if (!target_chars_ok(t)) {
		snprintf(
		    r->err, sizeof(r->err),
		    "malformed request target (a "
		    "control or non-ASCII byte, '#', a bad %%-escape or an "
		    "escaped NUL)");
		return -1;
	}
	q = strchr(t, '?');
	n = q ? (size_t)(q - t) : strlen(t);
	if (!(r->path = malloc(n + 1)))
		return -1;
	memcpy(r->path, t, n);
	r->path[n] = '\0';
	for (const char *p = q ? q + 1 : NULL; p && *p;) {
		size_t len = strcspn(p, "&");
		if (len && add_arg(r, p, len) < 0)
			return -1;
		p += len;
		if (*p == '&')
			p++;
	}
	return 0;
}

const char *http_query(http_req *r, const char *name)
{
	for (int i = 0; i < r->n_args; i++)
		if (!strcmp(r->args[i].name, name))
			return r->args[i].value;
	return NULL;
}

int http_query_check(http_req *r, const char *const *known)
{
	for (int i = 0; i < r->n_args; i++) {
		size_t k = 0;
		while (known && known[k] && strcmp(known[k], r->args[i].name))
			k++;
		if (!known || !known[k]) {
			snprintf(r->err, sizeof(r->err),
				 "unknown query parameter "
				 "'%.100s'",
				 r->args[i].name);
			return -1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Headers                                                             */
/* ------------------------------------------------------------------ */

static const char *header(http_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

static bool is_read(const char *method)
{
	return !strcmp(method, "GET") || !strcmp(method, "HEAD");
}

/* What the header scan found. */
typedef struct hscan {
	int n_host, n_cl, n_te;
	const char *cl, *te;
	bool cl_differ;
	char bad[80]; /* a header name that is not a token */
} hscan;

static bool is_token(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') ||
		      strchr("!#$%&'*+-.^_`|~", *s)))
			return false;
	return true;
}

static enum MHD_Result scan_one(void *cls, enum MHD_ValueKind kind,
				const char *key, const char *value)
{
	hscan *h = cls;

	(void)kind;
	if (!is_token(key) && !h->bad[0])
		snprintf(h->bad, sizeof(h->bad), "%.64s", key);
	if (!strcasecmp(key, "Host"))
		h->n_host++;
	if (!strcasecmp(key, "Transfer-Encoding")) {
		h->n_te++;
		h->te = value;
	}
	if (!strcasecmp(key, "Content-Length")) {
		if (h->n_cl++ && strcmp(h->cl, value ? value : ""))
			h->cl_differ = true;
		h->cl = value ? value : "";
	}
	return MHD_YES;
}

/* RFC 9112 framing; 0, or a reply was set. */
static int check_framing(http_req *r)
{
	hscan h = {0};

	MHD_get_connection_values(r->conn, MHD_HEADER_KIND, scan_one, &h);
	if (h.bad[0])
		return http_reply_error(
		    r, 400, "bad_request",
		    "malformed header "
		    "name '%s' (no spaces before the colon)",
		    h.bad);
	if (h.n_host > 1)
		return http_reply_error(r, 400, "bad_request",
					"more than one Host header");
	if (!h.n_host && r->version && !strcmp(r->version, "HTTP/1.1"))
		return http_reply_error(
		    r, 400, "bad_request",
		    "an HTTP/1.1 request needs a Host header");
	if (h.cl_differ)
		return http_reply_error(r, 400, "bad_request",
					"Content-Length "
					"headers with different values");
	if (h.n_te && h.n_cl)
		return http_reply_error(r, 400, "bad_request",
					"both "
					"Transfer-Encoding and Content-Length");
	if (h.n_te > 1 || (h.n_te && strcasecmp(h.te, "chunked")))
		return http_reply_error(r, 501, "not_implemented",
					"Transfer-Encoding "
					"'%.64s' (only chunked is supported)",
					h.te);
	return 0;
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

/*
** A change from a page of another origin (a cross-site form) is refused.
** The origin is scheme, host and port: ours is http://HOST, or
** https://HOST behind a TLS proxy that says so with X-Forwarded-Proto
** (a header no cross-site form can set).
*/
static bool origin_ok(http_req *r)
{
	const char *origin = header(r, "Origin"), *host = header(r, "Host");
	const char *proto = header(r, "X-Forwarded-Proto");
	const char *scheme =
	    proto && !strcasecmp(proto, "https") ? "https://" : "http://";
	size_t n = strlen(scheme);

	if (!origin)
		return true;
	if (!host || strncasecmp(origin, scheme, n) != 0)
		return false; /* another scheme, "null" and other opaque origins
			       */
	return strcasecmp(origin + n, host) == 0;
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

/* 0 when the request may change things; else a 401 reply was set. */
static int check_token(http_req *r)
{
	const char *auth = header(r, "Authorization");
	size_t n;

	if (!r->srv->token)
		return 0;
	if (!auth || strncasecmp(auth, "Bearer", 6) != 0 ||
	    (auth[6] != ' ' && auth[6] != '\t')) {
		http_add_header(r, "WWW-Authenticate", "Bearer realm=\"due\"");
		return http_reply_error(
		    r, 401, "unauthorized",
		    "this server needs "
		    "'Authorization: Bearer <token>' for changes");
	}
	auth += 6;
	while (*auth == ' ' || *auth == '\t')
		auth++;
	n = strlen(auth);
	while (n > 0 && (auth[n - 1] == ' ' || auth[n - 1] == '\t'))
		n--; /* RFC 9110 §5.5: whitespace around a value is not part of
			it */
	if (!token_equal(auth, n, r->srv->token, r->srv->token_len)) {
		http_add_header(
		    r, "WWW-Authenticate",
		    "Bearer realm=\"due\", error=\"invalid_token\"");
		return http_reply_error(r, 401, "unauthorized",
					"invalid bearer token");
	}
	return 0;
}

void http_precheck(http_req *r)
{
	const char *host = header(r, "Host"), *cl;

	if (parse_target(r) < 0) {
		http_reply_bad(r);
		return;
	}
	if (check_framing(r))
		return;
	if (r->srv->loopback && host && !host_is_loopback(host)) {
		http_reply_error(r, 403, "forbidden",
				 "Host '%s' is not a loopback "
				 "name (this server listens on loopback only)",
				 host);
		return;
	}
	if (!is_read(r->method)) {
		if (!origin_ok(r)) {
			http_reply_error(
			    r, 403, "forbidden",
			    "cross-origin change "
			    "refused (Origin does not match the scheme "
			    "and Host of this server)");
			return;
		}
		if (check_token(r))
			return;
	}
	cl = header(r, "Content-Length");
	if (cl && strtoull(cl, NULL, 10) > 3 * r->srv->max_body)
		http_reply_error(r, 413, "too_large",
				 "request body over %zu bytes",
				 r->srv->max_body);
}

/* ------------------------------------------------------------------ */
/* The body                                                            */
/* ------------------------------------------------------------------ */

void http_take_body(http_req *r, const char *data, size_t n)
{
	struct due_http *h = r->srv;
	char *b;

	r->body_seen += n;
	if (r->too_big || r->overload || r->status)
		return;
	if (r->body_len + n > 3 * h->max_body) {
		r->too_big = true;
		return;
	}
	if (atomic_fetch_add(&h->body_bytes, n) + n > h->body_budget) {
		atomic_fetch_sub(&h->body_bytes, n);
		r->overload = true;
		return;
	}
	if (!(b = realloc(r->body, r->body_len + n + 1))) {
		atomic_fetch_sub(&h->body_bytes, n);
		r->overload = true;
		return;
	}
	memcpy(b + r->body_len, data, n);
	r->body = b;
	r->body_len += n;
	r->body[r->body_len] = '\0';
}

bool http_body_fits(const http_req *r)
{
	size_t weight = r->body_len;

	if (weight <= r->srv->max_body)
		return true;
	for (size_t i = 0; i + 1 < r->body_len; i++) {
		if (r->body[i] != '\\')
			continue;
		if (r->body[i + 1] == 'u' && i + 5 < r->body_len) {
			weight -= 4; /* \uXXXX weighs 2, like \n */
			i += 5;
		} else {
			i++;
		}
	}
	return weight <= r->srv->max_body;
}
