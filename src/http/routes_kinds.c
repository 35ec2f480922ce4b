/*
** routes_kinds.c - /v1/kinds: the per-kind flow-control settings
** (docs/internals/flow.md) read and changed over HTTP.
**
** A kind is rendered by due__fmt_kind() (src/fmt/kind.c), so GET
** /v1/kinds/{kind} is the same object as one line of `due kind ls
** --json`: the settings (paused, rate, max_running, max_running_per_group,
** timeout; null is "no limit") and the live counts the store read with
** them (running, rate_used, due, held_*).  A PUT body is decoded by
** due__fmt_kind_settings_from_json(), the decoder the CLI's JSON shares, so
** both refuse the same things with the same words.
**
** The {kind} segment is checked here before the store is touched, as a
** task's id is: 1 to 128 letters, digits, '_', '-', '.' or ':' (the
** library's rule, which it checks again).  Bad input is a 400 with one
** line naming it, and nothing changes.
**
** Bounds: a kind object is small and fixed in shape; the list shows at
** most HTTP_KINDS_MAX kinds (by name, as the store lists them) and says
** how many there are in X-Total-Count when it stops early.
*/
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "fmt/fmt.h"
#include "http/internal.h"

/* A list reply shows at most this many kinds (about 4 MB of JSON). */
#define HTTP_KINDS_MAX 10000

/* Is r->param a kind name?  -1 with r->err when not. */
static int kind_param(http_req *r)
{
	size_t n = strlen(r->param);

	if (n > 128) {
		snprintf(r->err, sizeof(r->err),
			 "invalid kind: %zu characters (at most 128)", n);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)r->param[i];
		if (!isalnum(c) && c != '_' && c != '-' && c != '.' &&
		    c != ':') {
			snprintf(r->err, sizeof(r->err),
				 "invalid kind '%.128s': only letters, digits "
				 "and _ - . : are allowed",
				 r->param);
			return -1;
		}
	}
	return n ? 0 : -1; /* the router never matches an empty segment */
}

/* Reply with the kind in r->param as it is now (404 when it has none). */
static int reply_kind(http_req *r, due_db *db)
{
	due_kind_info *k = NULL;
	json_t *o;
	int rc;

	rc = due_kind_get(db, &k, r->param);
	if (rc < 0) /* DUE_ENOTFOUND: 404 not_found */
		return http_reply_due(r, rc);
	o = due__fmt_kind(k);
	due_kind_info_free(k);
	return http_reply_json(r, 200, o);
}

/* GET /v1/kinds: every kind with settings, by name. */
int route_kind_list(http_req *r)
{
	due_kind_info_list *l = NULL;
	due_db *db;
	json_t *arr;
	size_t all;
	int rc;

	if ((rc = http_db(r, &db)) < 0 || (rc = due_kind_list(db, &l)) < 0)
		return http_reply_due(r, rc);
	all = l->count;
	if (all > HTTP_KINDS_MAX) {
		char total[32];
		snprintf(total, sizeof(total), "%zu", all);
		http_add_header(r, "X-Total-Count", total);
		l->count = HTTP_KINDS_MAX; /* render the first ones only */
	}
	arr = due__fmt_kind_list(l);
	l->count = all; /* and free them all */
	due_kind_info_list_free(l);
	return http_reply_json(r, 200, arr);
}

/* GET /v1/kinds/{kind} */
int route_kind_get(http_req *r)
{
	due_db *db;
	int rc;

	if (kind_param(r) < 0)
		return http_reply_bad(r);
	if ((rc = http_db(r, &db)) < 0)
		return http_reply_due(r, rc);
	return reply_kind(r, db);
}

/* PUT /v1/kinds/{kind}: change some settings, then the kind as it is. */
int route_kind_put(http_req *r)
{
	due_kind_settings s = DUE_KIND_SETTINGS_INIT;
	json_t *o = NULL;
	due_db *db;
	int rc;

	if (kind_param(r) < 0 ||
	    due__fmt_json_body(r->body, r->body_len, false, &o, r->err,
			       sizeof(r->err)) < 0 ||
	    due__fmt_kind_settings_from_json(o, &s, r->err, sizeof(r->err)) <
		0) {
		json_decref(o);
		return http_reply_bad(r);
	}
	json_decref(o);
	if ((rc = http_db(r, &db)) < 0 ||
	    (rc = due_kind_set(db, r->param, &s)) < 0)
		return http_reply_due(r, rc);
	return reply_kind(r, db);
}

/* DELETE /v1/kinds/{kind}: forget its settings. */
int route_kind_delete(http_req *r)
{
	due_db *db;
	int rc;

	if (kind_param(r) < 0)
		return http_reply_bad(r);
	if (r->body_len) {
		snprintf(r->err, sizeof(r->err), "DELETE takes no body");
		return http_reply_bad(r);
	}
	if ((rc = http_db(r, &db)) < 0)
		return http_reply_due(r, rc);
	rc = due_kind_remove(db, r->param);
	if (rc < 0) /* DUE_ENOTFOUND: 404 not_found */
		return http_reply_due(r, rc);
	return http_reply_json(r, 200, json_pack("{s:s}", "removed", r->param));
}
