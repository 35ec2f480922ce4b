/*
** mhd_errors.c - libmicrohttpd's own error replies, answered as JSON.
**
** libmicrohttpd refuses some requests before our code sees them: a
** malformed request line or header line (400), HTTP/1.1 without Host
** (400, MHD_OPTION_STRICT_FOR_CLIENT), a bad or huge Content-Length (400,
** 413), a request line or headers that do not fit its buffer (414, 431),
** an unknown HTTP version (505).  Version 0.9.75 (Debian 12) sends fixed
** text/html bodies for these and has no option to change them; and for
** refusals found while parsing the headers (Host, Content-Length) it
** sends the status line and headers twice, then the HTML.
**
** It queues each of these with MHD_queue_response(), through the PLT of
** libmicrohttpd.so, so the `due` executable can provide that function
** itself (ELF symbol interposition).  Our own calls are marked
** (http_mhd_ours(), per thread) and go straight to the library's
** function (dlsym RTLD_NEXT).  Any other call is one of the library's
** refusals: we write a complete JSON reply, {"error", "detail"} with
** Connection: close, on the socket ourselves (a short write on a socket
** that has nothing else queued: it fits the socket buffer) and return
** MHD_NO, which makes the library close the connection without sending
** anything of its own.  So every refusal is one well-formed JSON reply,
** and the double reply is gone.  The refusal is logged once per kind per
** 10 s (log.c), with the reason libmicrohttpd gave, if it gave one.
**
** If the library were linked statically or with -Bsymbolic, its refusals
** would bypass this file and stay HTML; tests/cli/test_http_hostile.sh
** checks that they are JSON.
*/
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "http/internal.h"

typedef enum MHD_Result (*queue_fn)(struct MHD_Connection *, unsigned int,
				    struct MHD_Response *);

static queue_fn real_queue;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Thread_local bool ours;

static void resolve(void)
{
	*(void **)&real_queue = dlsym(RTLD_NEXT, "MHD_queue_response");
}

void http_mhd_ours(bool on) { ours = on; }

/* Our code for a status, and a detail when libmicrohttpd gave no reason. */
static const char *code_for(unsigned status, const char **detail)
{
	switch (status) {
	case 400:
		*detail = "malformed request (request line or header line)";
		return "bad_request";
	case 413: *detail = "request too large"; return "too_large";
	case 414: *detail = "request target too long"; return "uri_too_long";
	case 431:
		*detail = "request headers too large";
		return "headers_too_large";
	case 505:
		*detail = "HTTP version not supported";
		return "http_version_not_supported";
	default: *detail = "request refused"; return "bad_request";
	}
}

/* Our words for libmicrohttpd's reason, when it gave one. */
static const char *reason_text(const char *reason)
{
	if (strstr(reason, "Host"))
		return "an HTTP/1.1 request needs a Host header";
	if (strstr(reason, "Too large value of 'Content-Length'"))
		return "Content-Length is too large";
	if (strstr(reason, "Content-Length"))
		return "malformed Content-Length (a decimal number of bytes)";
	if (strstr(reason, "memory in pool"))
		return "request headers too large";
	return reason;
}

/* Write the JSON refusal on c's socket; MHD_NO closes the connection. */
static enum MHD_Result refuse(struct MHD_Connection *c, unsigned status)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	const char *detail, *code = code_for(status, &detail);
	const char *reason = http_log_mhd_reason();
	char *body = NULL, head[512];
	json_t *o;
	int n;

	if (reason[0])
		detail = reason_text(reason);
	o = json_pack("{s:s,s:s}", "error", code, "detail", detail);
	if (o)
		body = json_dumps(o, JSON_INDENT(2) | JSON_ENSURE_ASCII);
	json_decref(o);
	snprintf(head, sizeof(head), "refused %u %.50s", status, detail);
	http_log(head, "refused a request: %u %s", status, detail);
	if (body && ci) {
		const char *phrase = MHD_get_reason_phrase_for(status);
		size_t blen = strlen(body);
		n = snprintf(
		    head, sizeof(head),
		    "HTTP/1.1 %u %s\r\nContent-Type: "
		    "application/json\r\nContent-Length: %zu\r\n"
		    "Cache-Control: no-store\r\nX-Content-Type-Options: "
		    "nosniff\r\nConnection: close\r\n\r\n",
		    status, phrase && *phrase ? phrase : "Error", blen + 1);
		body[blen] = '\n'; /* json_dumps leaves room: replace the NUL */
		if (send(ci->connect_fd, head, (size_t)n,
			 MSG_NOSIGNAL | MSG_MORE) == n)
			(void)!send(ci->connect_fd, body, blen + 1,
				    MSG_NOSIGNAL);
	}
	free(body);
	http_log_mhd_forget_reason();
	return MHD_NO;
}

/*
** The interposed MHD_queue_response(): ours go through, libmicrohttpd's
** own refusals are answered by refuse().
*/
enum MHD_Result MHD_queue_response(struct MHD_Connection *connection,
				   unsigned int status_code,
				   struct MHD_Response *response)
{
	pthread_once(&once, resolve);
	if (!real_queue)
		return MHD_NO;
	if (ours)
		return real_queue(connection, status_code, response);
	return refuse(connection, status_code);
}
