/*
** routes_tasks.c - /v1/tasks: schedule, read, list, cancel, reschedule and the
** operator actions (retry, requeue, kill).
**
** A task is always rendered by due__fmt_task_cut(), so GET /v1/tasks/{id}
** is the same object as `due show ID --json` (payload and result are only
** cut beyond the server's payload limit, which the store enforces anyway),
** with "held" naming the setting of its kind that holds it (null: none).
** Every input is checked before the store is touched; the library checks
** again (kind syntax, limits, delays) and its EINVAL is a 400 as well, so
** nothing changes on bad input.
**
** Bounds, whatever is stored: lists and the replies of actions show at
** most HTTP_PREVIEW_BYTES of each payload, result and last_error (with
** "payload_truncated" and "payload_size" when cut); a list reply stops
** before HTTP_LIST_BUDGET bytes, and says where to go on (X-Next-After);
** and a list reads the store in chunks small enough that the payloads it
** holds at once stay under HTTP_LIST_MEMORY, since the store hands out
** whole payloads.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fmt/fmt.h"
#include "http/internal.h"

/*
** Reply with task `id` as `due show --json` prints it, values cut to `cut`
** bytes, plus "existed" and "moved" (a submit's answer) and "held" (as GET
** has it) when sub is set.
*/
static int reply_task(http_req *r, due_db *db, due_id id, unsigned status,
		      const due_submitted *sub, size_t cut)
{
	const char *held = NULL;
	due_task *t = NULL;
	json_t *o;
	int rc;

	if ((rc = due_get(db, &t, id)) < 0)
		return http_reply_due(r, rc);
	/* the submit is written: a failed look at its kind leaves "held"
	   out rather than answer an error the client would retry */
	bool hold_known = sub && due_task_hold(db, &held, t) == 0;
	o = due__fmt_task_cut(t, cut);
	due_task_free(t);
	if (o && sub) {
		json_object_set_new(o, "existed", json_boolean(sub->existed));
		json_object_set_new(o, "moved", json_boolean(sub->moved));
		if (hold_known)
			json_object_set_new(
			    o, "held", held ? json_string(held) : json_null());
	}
	return http_reply_json(r, status, o);
}

/* ------------------------------------------------------------------ */
/* POST /v1/tasks                                                      */
/* ------------------------------------------------------------------ */

/*
** The body is decoded by due__fmt_task_body() (src/fmt/submit.c), the
** decoder `due add --batch` uses for its lines, fuzzed as http_body.
*/
int route_task_create(http_req *r)
{
	unsigned char *blob = NULL;
	due_submitted sub;
	due_submit s;
	due_db *db;
	json_t *o = NULL;
	int rc;

	if (due__fmt_task_body(r->body, r->body_len, &o, &s, &blob, r->err,
			       sizeof(r->err)) < 0) {
		rc = http_reply_bad(r);
	} else if ((rc = http_db(r, &db)) < 0 ||
		   (rc = due_schedule(db, &sub, s.kind, s.payload,
				      s.payload_len, &s.opts)) < 0) {
		rc = http_reply_due(r, rc);
	} else {
		char loc[64];
		snprintf(loc, sizeof(loc), "/v1/tasks/%lld", (long long)sub.id);
		http_add_header(r, "Location", loc);
		rc = reply_task(r, db, sub.id, sub.existed ? 200 : 201, &sub,
				HTTP_PREVIEW_BYTES);
	}
	free(blob);
	json_decref(o);
	return rc;
}

/* ------------------------------------------------------------------ */
/* GET /v1/tasks?state=&kind=&limit=&after=                            */
/* ------------------------------------------------------------------ */

/* Append s percent-encoded (RFC 3986 unreserved kept) to buf. */
static void url_encode(char *buf, size_t cap, const char *s)
{
	size_t n = strlen(buf);

	for (; *s && n + 4 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || strchr("-._~", c))
			buf[n++] = (char)c;
		else
			n += (size_t)snprintf(buf + n, cap - n, "%%%02X", c);
	}
	buf[n] = '\0';
}

/* Parse the list's query into opts; -1 with r->err. */
static int list_query(http_req *r, due_list_opts *lo)
{
	const char *state = http_query(r, "state"),
		   *kind = http_query(r, "kind");
	const char *limit = http_query(r, "limit"),
		   *after = http_query(r, "after");
	due_state st;
	char *end;
	long long v;

	if (state && *state && strcasecmp(state, "HELD") == 0) {
		lo->held = true; /* SCHEDULED, waiting for parents */
	} else if (state && *state) {
		if (due_state_parse(&st, state) < 0) {
			snprintf(r->err, sizeof(r->err),
				 "invalid state '%.64s': one of SCHEDULED, "
				 "CLAIMED, DONE, CANCELLED, DEAD, or HELD",
				 state);
			return -1;
		}
		lo->state = (int)st;
	}
	if (kind && *kind)
		lo->kind = kind;
	if (limit) {
		errno = 0;
		v = strtoll(limit, &end, 10);
		if (errno || *end || end == limit || v < 1 || v > 10000) {
			snprintf(r->err, sizeof(r->err),
				 "invalid limit '%.64s': an "
				 "integer from 1 to 10000",
				 limit);
			return -1;
		}
		lo->limit = (int)v;
	}
	if (after) {
		errno = 0;
		v = strtoll(after, &end, 10);
		if (errno || *end || end == after || v < 0 || after[0] == '-' ||
		    after[0] == '+') {
			snprintf(r->err, sizeof(r->err),
				 "invalid after '%.64s': a task "
				 "id (0 or more)",
				 after);
			return -1;
		}
		lo->after = v;
	}
	return 0;
}

/* X-Next-After and Link headers when the page is full. */
static void next_page(http_req *r, const due_list_opts *lo, due_id last)
{
	char link[512], kind[400] = "", id[32];
	const char *st = lo->held	  ? "HELD"
			 : lo->state >= 0 ? due_state_name((due_state)lo->state)
					  : NULL;

	snprintf(id, sizeof(id), "%lld", (long long)last);
	http_add_header(r, "X-Next-After", id);
	if (lo->kind)
		url_encode(kind, sizeof(kind), lo->kind);
	snprintf(link, sizeof(link),
		 "</v1/tasks?%s%s%s%s%s%slimit=%d&after=%s>; rel=\"next\"",
		 st ? "state=" : "", st ? st : "", st ? "&" : "",
		 lo->kind ? "kind=" : "", kind, lo->kind ? "&" : "", lo->limit,
		 id);
	http_add_header(r, "Link", link);
}

/* A growing reply body. */
typedef struct buf {
	char *p;
	size_t len, cap;
} buf;

static int buf_add(buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *p;
		while (cap < b->len + n + 1)
			cap *= 2;
		if (!(p = realloc(b->p, cap)))
			return -1;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

/*
** Append task t to the JSON array in b, as json_dumps() of the whole array
** would lay it out (each line indented two more spaces).  1 when it was
** added, 0 when it would take the body past the budget, -1 on ENOMEM.
*/
static int add_task(buf *b, const due_task *t)
{
	json_t *o = due__fmt_task_cut(t, HTTP_PREVIEW_BYTES);
	char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_ENSURE_ASCII) : NULL;
	size_t lines = 1, n;
	int rc = -1;

	json_decref(o);
	if (!s)
		return -1;
	n = strlen(s);
	for (size_t i = 0; i < n; i++)
		lines += s[i] == '\n';
	if (b->len > 2 && b->len + n + 2 * lines + 4 > HTTP_LIST_BUDGET) {
		free(s);
		return 0;
	}
	if (buf_add(b, b->len > 2 ? ",\n  " : "\n  ", b->len > 2 ? 4 : 3) < 0)
		goto done;
	for (char *line = s, *nl; line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		if (buf_add(b, line, len) < 0 ||
		    (nl && buf_add(b, "\n  ", 3) < 0))
			goto done;
	}
	rc = 1;
done:
	free(s);
	return rc;
}

/* Tasks per store call so that their payloads and results fit memory. */
static int chunk_size(http_req *r, int limit)
{
	size_t per = http_max_payload(r) + (1u << 20); /* + the result limit */
	size_t n = HTTP_LIST_MEMORY / per;

	return n < 1 ? 1 : n > (size_t)limit ? limit : (int)n;
}

/*
** Fill b with up to lo->limit tasks after lo->after, read in chunks; *last
** is the id of the last one added, *more whether more may follow.
*/
static int list_into(http_req *r, due_db *db, const due_list_opts *lo, buf *b,
		     due_id *last, bool *more)
{
	due_list_opts q = *lo;
	int left = lo->limit, rc = 0;

	*more = false;
	while (left > 0) {
		due_task_list *l = NULL;
		q.limit = chunk_size(r, left);
		if ((rc = due_list(db, &l, &q)) < 0)
			return rc;
		for (size_t i = 0; i < l->count && !*more; i++) {
			int added = add_task(b, &l->items[i]);
			if (added < 0)
				rc = DUE_ENOMEM;
			if (added <= 0) {
				*more =
				    true; /* the budget: the page ends early */
				break;
			}
			*last = q.after = l->items[i].id;
			left--;
		}
		bool end = l->count < (size_t)q.limit;
		due_task_list_free(l);
		if (rc < 0 || *more || end)
			break;
	}
	if (left == 0)
		*more = true; /* a full page: there may be more */
	return rc;
}

int route_task_list(http_req *r)
{
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	buf b = {0};
	due_id last = 0;
	bool more;
	due_db *db;
	int rc;

	if (list_query(r, &lo) < 0)
		return http_reply_bad(r);
	if ((rc = http_db(r, &db)) < 0 || buf_add(&b, "[", 1) < 0 ||
	    (rc = list_into(r, db, &lo, &b, &last, &more)) < 0) {
		free(b.p);
		return http_reply_due(r, rc < 0 ? rc : DUE_ENOMEM);
	}
	if (more && last)
		next_page(r, &lo, last);
	if (buf_add(&b, b.len > 1 ? "\n]\n" : "]\n", b.len > 1 ? 3 : 2) < 0) {
		free(b.p);
		return http_reply_due(r, DUE_ENOMEM);
	}
	return http_reply_take(r, 200, "application/json", b.p, b.len);
}

/* ------------------------------------------------------------------ */
/* GET and DELETE /v1/tasks/{id}                                       */
/* ------------------------------------------------------------------ */

/*
** The task, plus "held" as `due show --json` has it: why a SCHEDULED task
** waits: "after" while it waits for parents (run after), or, when it is
** due, "paused", "rate", "max_running" or "max_running_per_group" when a
** setting of its kind holds it; else null.
*/
int route_task_get(http_req *r)
{
	const char *held = NULL;
	due_task *t = NULL;
	due_db *db;
	due_id id;
	json_t *o;
	int rc;

	if (http_parse_id(r, r->param, &id) < 0)
		return http_reply_bad(r);
	if ((rc = http_db(r, &db)) < 0 || (rc = due_get(db, &t, id)) < 0)
		return http_reply_due(r, rc);
	if ((rc = due_task_hold(db, &held, t)) < 0) {
		due_task_free(t);
		return http_reply_due(r, rc);
	}
	o = due__fmt_task_cut(t, http_max_payload(r));
	due_task_free(t);
	if (o)
		json_object_set_new(o, "held",
				    held ? json_string(held) : json_null());
	return http_reply_json(r, 200, o);
}

int route_task_cancel(http_req *r)
{
	due_cancel_outcome out;
	due_db *db;
	due_id id;
	json_t *o;
	int rc;

	if (http_parse_id(r, r->param, &id) < 0)
		return http_reply_bad(r);
	if (r->body_len) {
		snprintf(r->err, sizeof(r->err), "DELETE takes no body");
		return http_reply_bad(r);
	}
	if ((rc = http_db(r, &db)) < 0 || (rc = due_cancel(db, &out, id)) < 0)
		return http_reply_due(r, rc);
	o = json_pack("{s:I,s:s}", "id", (json_int_t)id, "outcome",
		      due_cancel_outcome_name(out));
	if (out != DUE_CANCEL_NOT_FOUND)
		return http_reply_json(r, 200, o);
	json_object_set_new(o, "error", json_string("not_found"));
	json_object_set_new(o, "detail",
			    json_sprintf("no task %lld", (long long)id));
	return http_reply_json(r, 404, o);
}

/* ------------------------------------------------------------------ */
/* POST /v1/tasks/{id}/reschedule                                      */
/* ------------------------------------------------------------------ */

/*
** {"id", "outcome", "task"} (the task as it is now) with 200, as cancel
** answers: RESCHEDULED, TOO_LATE and ALREADY_FINISHED are outcomes; an
** unknown id is 404 with outcome NOT_FOUND.
*/
static int reply_rescheduled(http_req *r, due_db *db, due_id id,
			     due_reschedule_outcome out)
{
	due_task *t = NULL;
	json_t *o;
	int rc;

	o = json_pack("{s:I,s:s}", "id", (json_int_t)id, "outcome",
		      due_reschedule_outcome_name(out));
	if (out == DUE_RESCHEDULE_NOT_FOUND) {
		json_object_set_new(o, "error", json_string("not_found"));
		json_object_set_new(
		    o, "detail", json_sprintf("no task %lld", (long long)id));
		return http_reply_json(r, 404, o);
	}
	if ((rc = due_get(db, &t, id)) < 0) {
		json_decref(o);
		return http_reply_due(r, rc);
	}
	json_object_set_new(o, "task",
			    due__fmt_task_cut(t, HTTP_PREVIEW_BYTES));
	due_task_free(t);
	return http_reply_json(r, 200, o);
}

int route_task_reschedule(http_req *r)
{
	due_reschedule_opts ro;
	due_reschedule_outcome out;
	unsigned char *blob = NULL;
	json_t *body = NULL;
	due_db *db;
	due_id id;
	int rc;

	if (http_parse_id(r, r->param, &id) < 0)
		return http_reply_bad(r);
	if (due__fmt_reschedule_body(r->body, r->body_len, &body, &ro, &blob,
				     r->err, sizeof(r->err)) < 0)
		rc = http_reply_bad(r);
	else if ((rc = http_db(r, &db)) < 0 ||
		 (rc = due_reschedule(db, &out, id, &ro)) < 0)
		rc = http_reply_due(r, rc);
	else
		rc = reply_rescheduled(r, db, id, out);
	free(blob);
	json_decref(body);
	return rc;
}

/* ------------------------------------------------------------------ */
/* POST /v1/tasks/{id}/retry | requeue | kill                          */
/* ------------------------------------------------------------------ */

enum op { OP_RETRY, OP_REQUEUE, OP_KILL };

/* The operator action, then the task as it is now.  Body: none or {}. */
static int operate(http_req *r, enum op op)
{
	due_db *db;
	due_id id;
	json_t *o;
	int rc;

	if (http_parse_id(r, r->param, &id) < 0)
		return http_reply_bad(r);
	if (json_body_object(r, NULL, true, &o) < 0)
		return http_reply_bad(r);
	json_decref(o);
	if ((rc = http_db(r, &db)) < 0)
		return http_reply_due(r, rc);
	rc = op == OP_RETRY	? due_retry(db, id)
	     : op == OP_REQUEUE ? due_requeue(db, id)
				: due_kill(db, NULL, id);
	if (rc < 0)
		return http_reply_due(r, rc);
	return reply_task(r, db, id, 200, NULL, HTTP_PREVIEW_BYTES);
}

int route_task_retry(http_req *r) { return operate(r, OP_RETRY); }

int route_task_requeue(http_req *r) { return operate(r, OP_REQUEUE); }

int route_task_kill(http_req *r) { return operate(r, OP_KILL); }
