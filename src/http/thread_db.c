/*
** thread_db.c - the per-thread store handles of the HTTP service.
**
** A due_db is one connection, used by one thread at a time: each store
** pool thread that runs routes opens its own on first use (http_db), with
** the server's URL and payload limit, and keeps it in thread-specific
** data; the key's destructor closes it when the thread ends (server.c).
** The claims threads and the prober keep handles of their own.  After a
** store error that may have broken the connection (http_reply_due:
** DUE_ESTORE, DUE_ESCHEMA, DUE_ERROR) the handle is dropped (http_db_drop)
** and the next request opens a fresh one.  Uses nothing else of the
** service, so reply.c and request.c can both use it.
*/
#include <stdio.h>

#include "http/internal.h"

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

void http_db_drop(const struct due_http *h)
{
	due_db *db = pthread_getspecific(h->db_key);
	pthread_setspecific(h->db_key, NULL);
	due_close(db);
}
