/*
** http.h - the HTTP admin service of `due` (`due serve`), as seen by the
** command that starts it.
**
** The service is a client of the public C API (due.h) and of the JSON
** renderings in src/fmt/, like the CLI: it never reaches into the store.
** HTTP is libmicrohttpd's job (a thread pool of event loops with
** connection limits and timeouts), checked strictly on top; JSON is
** jansson's.  Store calls run on store threads, never on the event loops
** (src/http/internal.h says how).
*/
#ifndef DUE_HTTP_H
#define DUE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

typedef struct due__http_opts {
	const char *db_url;	     /* store URL (required) */
	const char *token;	     /* bearer token for changes; NULL: none */
	const struct sockaddr *addr; /* where to listen */
	socklen_t addrlen;
	bool loopback;	    /* addr is a loopback address */
	unsigned threads;   /* event-loop threads, and store threads
			       for reads and for changes, each */
	unsigned max_conns; /* open connections at most */
	unsigned timeout_s; /* whole-request deadline, idle timeout,
			       and the longest wait for the store */
	size_t max_body;    /* request body limit in bytes (a \uXXXX
			       escape weighs 2) */
	size_t max_payload; /* payload limit passed to due_open() */
} due__http_opts;

typedef struct due_http due_http;

/*
** Start serving in background threads.  Returns 0 and sets *out, or -1
** with a message in err (bind failure, bad options).  The caller must
** have blocked the signals it wants to handle itself before the call:
** the server's threads inherit the mask.
*/
int due__http_start(due_http **out, const due__http_opts *o, char *err,
		    size_t errlen);

/* The TCP port actually bound (useful with port 0). */
unsigned due__http_port(const due_http *h);

/*
** Stop accepting, close every connection, join the threads (each closes
** its store handle) and free h.  NULL is fine.
*/
void due__http_stop(due_http *h);

/* The dashboard page, generated at build time from dashboard.html. */
extern const char due__http_dashboard[];
extern const size_t due__http_dashboard_len;

#endif
