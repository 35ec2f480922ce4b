/*
** routes_work.c - the worker API over HTTP, for workers that cannot be
** children of `due work`: POST /v1/claims (a long poll) and, fenced by the
** attempt, POST /v1/tasks/{id}/complete, /fail and /extend.
**
** Fencing is the store's: each of complete, fail and extend names the try
** by (id, attempt) and the store's statement decides (CONTRACT §3.3).  A
** stale attempt - the lease was taken back by a requeue, a kill or an
** expiry and maybe claimed again - is answered 409 {"error":
** "rejected_stale"} and changed nothing.
**
** The long poll.  A claim that finds nothing waits, up to `wait`, on the
** claims pool (server.c): its own threads, so that waiting claims never
** hold up the submits that would wake them.  Each claims thread listens on
** its own store handle (due_listen: PostgreSQL LISTEN, or the SQLite wake
** file's inotify watch), the same notifications the workers' wheels get,
** and also wakes when the next SCHEDULED task of its kinds comes due, or a
** lease expires (then it takes expired leases back, as a worker's
** reclaimer would: with only HTTP workers nobody else does).  On a store
** that cannot notify it polls every POLL_US.  It looks at the server's
** stop flag every STOP_CHECK_US, so a stop does not wait for the polls.
*/
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt/fmt.h"
#include "http/internal.h"

#define MAX_CLAIM 1000
#define MAX_KINDS 64
#define MAX_WAIT_US (60 * 1000000LL)
#define MAX_LEASE_US (24 * 3600 * 1000000LL)
#define POLL_US 1000000
#define STOP_CHECK_US 200000

/*
** This thread's listening handle.  due_listen() is set up once per store
** handle; a handle dropped after a store error is forgotten here first
** (forget_listen), since a new one may come back at the same address.
*/
static _Thread_local due_db *listen_db;
static _Thread_local int listen_fd = -1;

static int reply_due_forget(http_req *r, int rc)
{
	listen_db = NULL;
	listen_fd = -1;
	return http_reply_due(r, rc);
}

/* ------------------------------------------------------------------ */
/* POST /v1/claims                                                     */
/* ------------------------------------------------------------------ */

typedef struct claim_req {
	const char *kinds[MAX_KINDS];
	due_claim_opts o;
	int64_t wait_us;
} claim_req;

static const char *const claim_fields[] = {"kinds", "limit", "lease",
					   "wait",  "owner", NULL};

/* The kinds array: strings, at most MAX_KINDS.  -1 with r->err. */
static int read_kinds(http_req *r, json_t *o, claim_req *c)
{
	json_t *a = json_object_get(o, "kinds"), *v;
	size_t i;

	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a) || json_array_size(a) > MAX_KINDS) {
		snprintf(r->err, sizeof(r->err),
			 "'kinds' must be an array of at most %d kind names",
			 MAX_KINDS);
		return -1;
	}
	json_array_foreach(a, i, v)
	{
		if (!json_is_string(v) || !json_string_length(v)) {
			snprintf(r->err, sizeof(r->err),
				 "'kinds' item %zu must be a kind name", i);
			return -1;
		}
		c->kinds[i] = json_string_value(v);
	}
	c->o.kinds = c->kinds;
	c->o.n_kinds = json_array_size(a);
	return 0;
}

/* Decode and check the body; -1 with r->err naming the field. */
static int read_claim(http_req *r, json_t *o, claim_req *c)
{
	int64_t limit = 1;

	c->o = (due_claim_opts)DUE_CLAIM_OPTS_INIT;
	c->o.owner = "http";
	c->wait_us = 0;
	if (read_kinds(r, o, c) < 0 ||
	    json_opt_int(r, o, "limit", 1, MAX_CLAIM, &limit) < 0 ||
	    json_opt_duration(r, o, "lease", &c->o.lease_us) < 0 ||
	    json_opt_duration(r, o, "wait", &c->wait_us) < 0 ||
	    json_opt_string(r, o, "owner", &c->o.owner) < 0)
		return -1;
	c->o.limit = (int)limit;
	if (c->o.lease_us < 1000 || c->o.lease_us > MAX_LEASE_US) {
		snprintf(r->err, sizeof(r->err),
			 "'lease' must be from 1ms to 24h");
		return -1;
	}
	if (c->wait_us < 0 || c->wait_us > MAX_WAIT_US) {
		snprintf(r->err, sizeof(r->err),
			 "'wait' must be from 0s to 60s");
		return -1;
	}
	if (!*c->o.owner || strlen(c->o.owner) > 200) {
		snprintf(r->err, sizeof(r->err),
			 "'owner' must be 1 to 200 bytes");
		return -1;
	}
	return 0;
}

/* The claimed tasks as a JSON array, each with its idempotency key. */
static json_t *claimed_json(const due_task_list *l)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < l->count; i++) {
		json_t *t = due_fmt_task(&l->items[i]);
		char key[40];
		snprintf(key, sizeof(key), "task-%lld",
			 (long long)l->items[i].id);
		if (!t ||
		    json_object_set_new(t, "idempotency_key",
					json_string(key)) < 0 ||
		    json_array_append_new(a, t) < 0) {
			json_decref(t);
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

/* Start listening on this thread's handle once; -1 fd when it cannot. */
static void ensure_listen(due_db *db)
{
	if (listen_db == db)
		return;
	listen_db = db;
	if (due_listen(db, &listen_fd) < 0)
		listen_fd = -1;
}

/*
** When to look again, in microseconds from now (at most `left`): the next
** due task of the kinds, the next lease expiry (taken back first when it
** is already past), held-back tasks' retry delay, or the poll interval
** without notifications.  A store error gives the poll interval.
*/
static int64_t next_look(due_db *db, const claim_req *c, int64_t left,
			 int64_t retry_us)
{
	int64_t d = listen_fd < 0 ? POLL_US : left;
	due_upcoming *u = NULL;
	due_time now;

	if (retry_us > 0 && retry_us < d)
		d = retry_us;
	if (due_now(db, &now) < 0 ||
	    due_upcoming_get(db, &u, c->o.kinds, c->o.n_kinds, false,
			     now + left, 1) < 0)
		return POLL_US < left ? POLL_US : left;
	if (u->count && u->due_at[0] - u->now < d)
		d = u->due_at[0] - u->now;
	if (u->next_expiry && u->next_expiry - u->now < d)
		d = u->next_expiry - u->now;
	if (u->next_expiry && u->next_expiry <= u->now) {
		due_reclaimed rc;
		due_reclaim_expired(db, &rc);
		d = 0;
	}
	due_upcoming_free(u);
	return d < 0 ? 0 : d < left ? d : left;
}

/* Sleep up to us on the listening fd; return early on a notification. */
static void nap(http_req *r, due_db *db, int64_t us)
{
	int64_t end = http_now_us() + us;

	for (int64_t left = us; left > 0; left = end - http_now_us()) {
		int ms =
		    (int)((left < STOP_CHECK_US ? left : STOP_CHECK_US) + 999) /
		    1000;
		struct pollfd pf = {listen_fd, POLLIN, 0};
		if (atomic_load(&r->srv->stopping))
			return;
		if (poll(&pf, listen_fd >= 0 ? 1 : 0, ms) > 0) {
			int n;
			due_listen_drain(db, &n);
			return;
		}
	}
}

int route_claims(http_req *r)
{
	json_t *o = NULL, *out;
	due_task_list *l = NULL;
	claim_req c;
	due_db *db;
	int64_t deadline;
	int rc;

	if (json_body_object(r, claim_fields, false, &o) < 0 ||
	    read_claim(r, o, &c) < 0) {
		json_decref(o);
		return http_reply_bad(r);
	}
	deadline = http_now_us() + c.wait_us;
	if ((rc = http_db(r, &db)) < 0)
		goto fail;
	if (c.wait_us > 0)
		ensure_listen(db);
	for (;;) {
		int64_t left, retry;
		if ((rc = due_claim_ex(db, &l, &c.o)) < 0)
			goto fail;
		left = deadline - http_now_us();
		if (l->count || left <= 0 || atomic_load(&r->srv->stopping))
			break;
		retry = l->retry_in_us;
		due_task_list_free(l);
		l = NULL;
		nap(r, db, next_look(db, &c, left, retry));
	}
	out = claimed_json(l);
	due_task_list_free(l);
	json_decref(o);
	return http_reply_json(r, 200, out);
fail:
	json_decref(o);
	return reply_due_forget(r, rc);
}

/* ------------------------------------------------------------------ */
/* POST /v1/tasks/{id}/complete, /fail, /extend                        */
/* ------------------------------------------------------------------ */

/* The body and the try it names; -1 with the 400 reply set. */
static int read_try(http_req *r, const char *const *fields, json_t **o,
		    due_id *id, int32_t *attempt)
{
	int64_t a = 0;

	if (http_parse_id(r, r->param, id) < 0 ||
	    json_body_object(r, fields, false, o) < 0 ||
	    json_opt_int(r, *o, "attempt", 1, INT32_MAX, &a) < 0) {
		json_decref(*o);
		*o = NULL;
		return http_reply_bad(r), -1;
	}
	if (a == 0) {
		json_decref(*o);
		*o = NULL;
		snprintf(r->err, sizeof(r->err),
			 "'attempt' is required: the attempt the claim gave");
		return http_reply_bad(r), -1;
	}
	*attempt = (int32_t)a;
	return 0;
}

static int reply_outcome(http_req *r, due_id id, const char *outcome)
{
	json_t *o =
	    json_pack("{s:I, s:s}", "id", (json_int_t)id, "outcome", outcome);
	return http_reply_json(r, 200, o);
}

static int reply_stale(http_req *r, due_id id, int32_t attempt)
{
	return http_reply_error(r, 409, "rejected_stale",
				"attempt %d of task %lld no longer holds its "
				"lease: nothing changed",
				(int)attempt, (long long)id);
}

int route_task_complete(http_req *r)
{
	static const char *const fields[] = {"attempt", "result", NULL};
	const char *res = NULL;
	due_complete_outcome out;
	json_t *o = NULL;
	int32_t attempt;
	due_db *db;
	due_id id;
	int rc;

	if (read_try(r, fields, &o, &id, &attempt) < 0)
		return 1;
	if (json_opt_string(r, o, "result", &res) < 0) {
		json_decref(o);
		return http_reply_bad(r);
	}
	size_t n = res ? json_string_length(json_object_get(o, "result")) : 0;
	if ((rc = http_db(r, &db)) < 0 ||
	    (rc = due_complete(db, &out, id, attempt, res, n)) < 0)
		rc = reply_due_forget(r, rc);
	else if (out == DUE_COMPLETE_REJECTED_STALE)
		rc = reply_stale(r, id, attempt);
	else
		rc = reply_outcome(r, id, due_complete_outcome_name(out));
	json_decref(o);
	return rc;
}

int route_task_fail(http_req *r)
{
	static const char *const fields[] = {"attempt", "error", NULL};
	const char *err = NULL;
	due_fail_outcome out;
	json_t *o = NULL;
	int32_t attempt;
	due_db *db;
	due_id id;
	int rc;

	if (read_try(r, fields, &o, &id, &attempt) < 0)
		return 1;
	if (json_opt_string(r, o, "error", &err) < 0) {
		json_decref(o);
		return http_reply_bad(r);
	}
	if ((rc = http_db(r, &db)) < 0 ||
	    (rc = due_fail(db, &out, id, attempt,
			   err && *err ? err : "failed (HTTP worker)")) < 0)
		rc = reply_due_forget(r, rc);
	else if (out == DUE_FAIL_REJECTED_STALE)
		rc = reply_stale(r, id, attempt);
	else
		rc = reply_outcome(r, id, due_fail_outcome_name(out));
	json_decref(o);
	return rc;
}

int route_task_extend(http_req *r)
{
	static const char *const fields[] = {"attempt", "lease", NULL};
	int64_t lease = 30000000;
	due_extend_outcome out;
	json_t *o = NULL;
	int32_t attempt;
	due_db *db;
	due_id id;
	int rc;

	if (read_try(r, fields, &o, &id, &attempt) < 0)
		return 1;
	rc = json_opt_duration(r, o, "lease", &lease);
	json_decref(o);
	if (rc < 0)
		return http_reply_bad(r);
	if (lease < 1000 || lease > MAX_LEASE_US) {
		snprintf(r->err, sizeof(r->err),
			 "'lease' must be from 1ms to 24h");
		return http_reply_bad(r);
	}
	if ((rc = http_db(r, &db)) < 0 ||
	    (rc = due_extend(db, &out, id, attempt, lease)) < 0)
		return reply_due_forget(r, rc);
	if (out == DUE_EXTEND_LOST)
		return reply_stale(r, id, attempt);
	return reply_outcome(r, id,
			     out == DUE_EXTEND_OK ? "OK" : "CANCEL_REQUESTED");
}

/* ------------------------------------------------------------------ */
/* POST /v1/completions                                                */
/* ------------------------------------------------------------------ */

/* One item of the batch into *c; -1 with r->err naming it. */
static int read_completion(http_req *r, json_t *it, size_t i, due_completion *c)
{
	json_t *id = json_object_get(it, "id"), *at, *res, *v;
	const char *k;

	if (!json_is_object(it)) {
		snprintf(r->err, sizeof(r->err),
			 "'items' item %zu must be an object", i);
		return -1;
	}
	json_object_foreach(it, k, v)
	{
		if (strcmp(k, "id") && strcmp(k, "attempt") &&
		    strcmp(k, "result")) {
			snprintf(r->err, sizeof(r->err),
				 "'items' item %zu: unknown field '%.100s'", i,
				 k);
			return -1;
		}
	}
	at = json_object_get(it, "attempt");
	res = json_object_get(it, "result");
	if (!json_is_integer(id) || json_integer_value(id) < 1 ||
	    !json_is_integer(at) || json_integer_value(at) < 1 ||
	    json_integer_value(at) > INT32_MAX ||
	    (res && !json_is_null(res) && !json_is_string(res))) {
		snprintf(r->err, sizeof(r->err),
			 "'items' item %zu needs 'id' and 'attempt' (positive "
			 "integers) and an optional string 'result'",
			 i);
		return -1;
	}
	c->id = json_integer_value(id);
	c->attempt = (int32_t)json_integer_value(at);
	c->result = json_is_string(res) ? json_string_value(res) : "";
	c->result_len = json_is_string(res) ? json_string_length(res) : 0;
	return 0;
}

/*
** Complete many tries in one transaction (due_complete_batch): a worker
** that claimed 16 tasks commits them with one request.  Each item is
** fenced on its own; a stale one gets "REJECTED_STALE" in the reply and
** does not affect the others, so the batch answers 200.
*/
int route_completions(http_req *r)
{
	static const char *const fields[] = {"items", NULL};
	due_completion *cs = NULL;
	json_t *o = NULL, *items, *out = NULL;
	size_t n = 0;
	due_db *db;
	int rc;

	if (json_body_object(r, fields, false, &o) < 0)
		return http_reply_bad(r);
	items = json_object_get(o, "items");
	if (!json_is_array(items) || !(n = json_array_size(items)) ||
	    n > MAX_CLAIM) {
		snprintf(r->err, sizeof(r->err),
			 "'items' must be an array of 1 to %d completions",
			 MAX_CLAIM);
		rc = http_reply_bad(r);
		goto done;
	}
	if (!(cs = calloc(n, sizeof(*cs)))) {
		rc = http_reply_due(r, DUE_ENOMEM);
		goto done;
	}
	for (size_t i = 0; i < n; i++)
		if (read_completion(r, json_array_get(items, i), i, &cs[i]) <
		    0) {
			rc = http_reply_bad(r);
			goto done;
		}
	if ((rc = http_db(r, &db)) < 0 ||
	    (rc = due_complete_batch(db, cs, n)) < 0) {
		rc = reply_due_forget(r, rc);
		goto done;
	}
	out = json_array();
	for (size_t i = 0; out && i < n; i++)
		json_array_append_new(
		    out, json_pack("{s:I, s:s}", "id", (json_int_t)cs[i].id,
				   "outcome",
				   due_complete_outcome_name(cs[i].outcome)));
	rc = http_reply_json(r, 200, out);
done:
	free(cs);
	json_decref(o);
	return rc;
}
