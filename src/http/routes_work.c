/*
** routes_work.c - the worker API over HTTP, for workers that cannot be
** children of `due work`: fenced by the attempt, POST
** /v1/tasks/{id}/complete, /fail, /extend and POST /v1/completions (POST
** /v1/claims is claims.c's, its body and reply claim_body.c's).
**
** Fencing is the store's: each of complete, fail and extend names the try
** by (id, attempt) and the store's statement decides (CONTRACT §3.3).  A
** stale attempt - the lease was taken back by a requeue, a kill or a
** reclaim after its expiry, maybe claimed again - is answered 409
** {"error": "rejected_stale"} and changed nothing.  A lease that expired
** but was not taken back yet still holds: the contract lets its holder
** commit while no one else has the task.
**
** Time limits (CONTRACT §7a.6).  A try must end within its time limit (the
** task's timeout, else its kind's, as the claim saw it).  A `due work`
** worker stops its handler at the limit; an HTTP worker cannot be
** stopped, so the limit is kept where the server sees the try: an extend,
** complete or fail that comes at or after the deadline is refused, and the
** try ends then with outcome TIMED_OUT ("timed out after DUR", a failure:
** backoff, retry or dead letter), its result not stored: 409 {"error":
** "timed_out", "outcome": ...}.  Since no extend is granted past the
** deadline, the lease of a try that goes silent ends at most one lease
** after it, and the reclaimer (claims.c) takes it back.  The deadline of
** a try claimed here is in tries.c, on this host's monotonic clock; of
** any other try it is read from the store: its claimed_at + the limit,
** against the store's clock.
**
** Replays.  A call repeated after its reply was lost (a dropped
** connection, a client's retry) is answered as the first one was, from
** the try's record, without asking the store to do it again: a complete
** of a try that ended DONE with the same result answers 200 DONE, a fail
** that ended it with the same error answers its outcome, a call for a try
** ended TIMED_OUT answers 409 timed_out again.  Only a call for a try
** that was taken back goes to the store, which refuses it and marks the
** attempt's late commit.  An id with no task is 404 (NOT_FOUND in a
** batch).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt/fmt.h"
#include "http/internal.h"

/* ------------------------------------------------------------------ */
/* Judging a call for a try                                            */
/* ------------------------------------------------------------------ */

enum try_op { OP_COMPLETE, OP_FAIL, OP_EXTEND };

/* One call for a try: complete, fail or extend (id, attempt). */
typedef struct try_call {
	enum try_op op;
	due_id id;
	int32_t attempt;
	const char *text; /* complete: the result; fail: the error */
	size_t len;
	int64_t lease_us; /* extend */
} try_call;

static const char cancel_error[] = "cancel requested before commit";

/* The row of `attempt` in t's history, or NULL. */
static const due_attempt *attempt_row(const due_task *t, int32_t attempt)
{
	for (size_t i = 0; i < t->n_attempts; i++)
		if (t->attempts[i].attempt == attempt)
			return &t->attempts[i];
	return NULL;
}

static bool outcome_is(const due_attempt *a, const char *name)
{
	return a && a->outcome && !strcmp(a->outcome, name);
}

/* What became of the task after try a failed: as due_fail() answered. */
static const char *after_failure(const due_task *t, const due_attempt *a)
{
	if (t->attempt == a->attempt && t->state == DUE_DEAD)
		return "DEAD";
	if (t->attempt == a->attempt && t->state == DUE_CANCELLED)
		return "CANCELLED";
	return "RETRY_SCHEDULED";
}

static bool same_result(const due_task *t, const try_call *k)
{
	size_t n = t->has_result ? t->result_len : 0;
	return n == k->len && (!n || !memcmp(t->result, k->text, n));
}

/*
** A call for a try that already ended, answered as the call that ended it
** was answered: the outcome of that call (a replay), "TIMED_OUT" when the
** try ended at its time limit, or NULL when it was taken back (expired,
** requeued, killed) or ended by a different call: the call is late.
*/
static const char *ended_as(const due_task *t, const due_attempt *a,
			    const try_call *k)
{
	if (outcome_is(a, "TIMED_OUT"))
		return "TIMED_OUT";
	if (k->op == OP_COMPLETE) {
		if (outcome_is(a, "DONE") && t->state == DUE_DONE &&
		    same_result(t, k))
			return "DONE";
		if (outcome_is(a, "CANCELLED") && a->error &&
		    !strcmp(a->error, cancel_error))
			return "CANCELLED_BEFORE_COMMIT";
	} else if (k->op == OP_FAIL) {
		if ((outcome_is(a, "FAILED") || outcome_is(a, "CANCELLED")) &&
		    a->error && !strcmp(a->error, k->text))
			return after_failure(t, a);
	}
	return NULL;
}

/*
** Did the try end by a call of its own (complete, fail, or its time
** limit), rather than being taken back (LEASE_EXPIRED, REQUEUED, KILLED)?
** A late call for such a try is answered from its record, never sent to
** the store, which would mark the attempt's late commit.
*/
static bool ended_itself(const due_attempt *a)
{
	return outcome_is(a, "DONE") || outcome_is(a, "FAILED") ||
	       outcome_is(a, "TIMED_OUT") || outcome_is(a, "CANCELLED");
}

static int reply_outcome(http_req *r, due_id id, const char *outcome)
{
	json_t *o =
	    json_pack("{s:I, s:s}", "id", (json_int_t)id, "outcome", outcome);
	return http_reply_json(r, 200, o);
}

static int reply_stale(http_req *r, const try_call *k)
{
	return http_reply_error(r, 409, "rejected_stale",
				"attempt %d of task %lld no longer holds its "
				"lease: nothing changed",
				(int)k->attempt, (long long)k->id);
}

/* 409 timed_out: the try ended at its time limit (why: "timed out after
   DUR"); outcome is what became of the task. */
static int reply_timed_out(http_req *r, const try_call *k, const char *why,
			   const char *outcome)
{
	char detail[512];

	snprintf(detail, sizeof(detail),
		 "attempt %d of task %lld ran past its time limit (%s): "
		 "nothing of this call was kept; the try ended TIMED_OUT "
		 "(%s)",
		 (int)k->attempt, (long long)k->id, why ? why : "timed out",
		 outcome);
	return http_reply_json(r, 409,
			       json_pack("{s:s, s:s, s:I, s:i, s:s}", "error",
					 "timed_out", "detail", detail, "id",
					 (json_int_t)k->id, "attempt",
					 (int)k->attempt, "outcome", outcome));
}

static int reply_not_found(http_req *r, due_id id)
{
	return http_reply_error(r, 404, "not_found", "no task %lld",
				(long long)id);
}

/* The time limit of try a of t: the task's own, else its kind's now. */
static int try_limit(due_db *db, const due_task *t, int64_t *out)
{
	due_kind_info *k = NULL;
	int rc;

	*out = t->timeout_us;
	if (*out > 0)
		return 0;
	if ((rc = due_kind_get(db, &k, t->kind)) == DUE_ENOTFOUND)
		return 0;
	if (rc < 0)
		return rc;
	*out = k->timeout_us;
	due_kind_info_free(k);
	return 0;
}

/*
** Is the running try a of t past its time limit, by the store's clock?
** *why gets "timed out after DUR" when it is, else "".
*/
static int past_limit(due_db *db, const due_task *t, const due_attempt *a,
		      bool *past, char *why, size_t n)
{
	int64_t limit;
	due_time now;
	int rc;

	*past = false;
	why[0] = 0;
	if ((rc = try_limit(db, t, &limit)) < 0 || !limit)
		return rc;
	if ((rc = due_now(db, &now)) < 0)
		return rc;
	if (now >= a->claimed_at + limit) {
		char dur[48];
		due_duration_format(dur, sizeof(dur), limit);
		snprintf(why, n, "timed out after %s", dur);
		*past = true;
	}
	return 0;
}

/*
** End try k TIMED_OUT at its time limit (due_fail_as) and reply 409
** timed_out; *out (may be NULL) gets the outcome name, or NULL when
** another call ended it first.  Returns 0 or a DUE_E* code (no reply).
*/
static int end_timed_out(due_db *db, const struct due_http *h,
			 const try_call *k, const char *why, const char **out)
{
	due_fail_outcome fo;
	int rc;

	if ((rc = due_fail_as(db, &fo, k->id, k->attempt, why,
			      DUE_OUT_TIMED_OUT)) < 0)
		return rc;
	http_tries_remove((http_tries *)&h->tries, k->id, k->attempt);
	*out = fo == DUE_FAIL_REJECTED_STALE ? NULL : due_fail_outcome_name(fo);
	return 0;
}

/* Read the try's task; NULL *t (and 0) when there is no such task. */
static int load(due_db *db, const try_call *k, due_task **t)
{
	int rc = due_get(db, t, k->id);

	if (rc == DUE_ENOTFOUND) {
		*t = NULL;
		return 0;
	}
	return rc;
}

/*
** Answer a call whose try the store no longer holds for it (a stale
** outcome, or a try already ended): as the call that ended it, 409
** timed_out, or 409 rejected_stale.
*/
static int answer_ended(http_req *r, due_db *db, const try_call *k)
{
	due_task *t = NULL;
	const due_attempt *a;
	const char *as;
	int rc;

	if ((rc = load(db, k, &t)) < 0)
		return http_reply_due(r, rc);
	if (!t)
		return reply_not_found(r, k->id);
	a = attempt_row(t, k->attempt);
	as = a ? ended_as(t, a, k) : NULL;
	if (as && !strcmp(as, "TIMED_OUT"))
		rc = reply_timed_out(r, k, a->error, after_failure(t, a));
	else if (as)
		rc = reply_outcome(r, k->id, as);
	else
		rc = reply_stale(r, k);
	due_task_free(t);
	return rc;
}

/* Ask the store to do k; its outcome name, or NULL when stale. */
static int commit(due_db *db, struct due_http *h, const try_call *k,
		  const char **out)
{
	due_complete_outcome co;
	due_fail_outcome fo;
	due_extend_outcome eo;
	int rc;

	switch (k->op) {
	case OP_COMPLETE:
		rc = due_complete(db, &co, k->id, k->attempt, k->text, k->len);
		*out = co == DUE_COMPLETE_REJECTED_STALE
			   ? NULL
			   : due_complete_outcome_name(co);
		break;
	case OP_FAIL:
		rc = due_fail(db, &fo, k->id, k->attempt, k->text);
		*out = fo == DUE_FAIL_REJECTED_STALE
			   ? NULL
			   : due_fail_outcome_name(fo);
		break;
	default:
		rc = due_extend(db, &eo, k->id, k->attempt, k->lease_us);
		*out = eo == DUE_EXTEND_LOST ? NULL
		       : eo == DUE_EXTEND_OK ? "OK"
					     : "CANCEL_REQUESTED";
		if (rc == 0 && *out)
			http_tries_lease(&h->tries, k->id, k->attempt,
					 http_now_us() + k->lease_us);
		return 0;
	}
	if (rc == 0 && *out)
		http_tries_remove(&h->tries, k->id, k->attempt);
	return rc;
}

/* Commit k and reply; a stale outcome is answered from the try's record. */
static int commit_reply(http_req *r, due_db *db, const try_call *k)
{
	const char *out;
	int rc;

	if ((rc = commit(db, r->srv, k, &out)) < 0)
		return http_reply_due(r, rc);
	return out ? reply_outcome(r, k->id, out) : answer_ended(r, db, k);
}

static int time_out_reply(http_req *r, due_db *db, const try_call *k,
			  const char *why)
{
	const char *out;
	int rc;

	if ((rc = end_timed_out(db, r->srv, k, why, &out)) < 0)
		return http_reply_due(r, rc);
	return out ? reply_timed_out(r, k, why, out) : answer_ended(r, db, k);
}

/*
** A try this server does not know, judged from the store's record: no
** task, 404; a running try past its limit ends TIMED_OUT; a running one
** within it is committed; one that ended itself is answered as it ended;
** one taken back goes to the store, which refuses it (and marks the late
** commit of a complete or fail).
*/
static int judge_from_store(http_req *r, due_db *db, const try_call *k)
{
	due_task *t = NULL;
	const due_attempt *a;
	char why[64];
	bool past = false, running, ended;
	int rc;

	if ((rc = load(db, k, &t)) < 0)
		return http_reply_due(r, rc);
	if (!t)
		return reply_not_found(r, k->id);
	a = attempt_row(t, k->attempt);
	running = outcome_is(a, "RUNNING");
	ended = ended_itself(a);
	rc = running ? past_limit(db, t, a, &past, why, sizeof(why)) : 0;
	due_task_free(t);
	if (rc < 0)
		return http_reply_due(r, rc);
	if (past)
		return time_out_reply(r, db, k, why);
	if (ended)
		return answer_ended(r, db, k);
	if (running || (a && k->op != OP_EXTEND))
		return commit_reply(r, db, k);
	return reply_stale(r, k);
}

/* Judge call k (time limit, replay) and answer it. */
static int judge(http_req *r, const try_call *k)
{
	due_db *db;
	http_try tr;
	char why[64], dur[48];
	int rc;

	http_claims_arm(&r->srv->claims);
	if ((rc = http_db(r, &db)) < 0)
		return http_reply_due(r, rc);
	if (!http_tries_get(&r->srv->tries, k->id, k->attempt, &tr))
		return judge_from_store(r, db, k);
	if (tr.deadline && http_now_us() >= tr.deadline) {
		due_duration_format(dur, sizeof(dur), tr.limit_us);
		snprintf(why, sizeof(why), "timed out after %s", dur);
		return time_out_reply(r, db, k, why);
	}
	return commit_reply(r, db, k);
}

/* ------------------------------------------------------------------ */
/* POST /v1/tasks/{id}/complete, /fail, /extend                        */
/* ------------------------------------------------------------------ */

/* The body and the try it names; -1 with the 400 reply set. */
static int read_try(http_req *r, const char *const *fields, json_t **o,
		    try_call *k)
{
	int64_t a = 0;

	if (http_parse_id(r, r->param, &k->id) < 0 ||
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
	k->attempt = (int32_t)a;
	return 0;
}

int route_task_complete(http_req *r)
{
	static const char *const fields[] = {"attempt", "result", NULL};
	try_call k = {.op = OP_COMPLETE, .text = NULL};
	json_t *o = NULL;
	int rc;

	if (read_try(r, fields, &o, &k) < 0)
		return 1;
	if (json_opt_string(r, o, "result", &k.text) < 0) {
		json_decref(o);
		return http_reply_bad(r);
	}
	k.len = k.text ? json_string_length(json_object_get(o, "result")) : 0;
	rc = judge(r, &k);
	json_decref(o);
	return rc;
}

int route_task_fail(http_req *r)
{
	static const char *const fields[] = {"attempt", "error", NULL};
	try_call k = {.op = OP_FAIL, .text = NULL};
	json_t *o = NULL;
	int rc;

	if (read_try(r, fields, &o, &k) < 0)
		return 1;
	if (json_opt_string(r, o, "error", &k.text) < 0) {
		json_decref(o);
		return http_reply_bad(r);
	}
	if (!k.text || !*k.text)
		k.text = "failed (HTTP worker)";
	rc = judge(r, &k);
	json_decref(o);
	return rc;
}

int route_task_extend(http_req *r)
{
	static const char *const fields[] = {"attempt", "lease", NULL};
	try_call k = {.op = OP_EXTEND, .lease_us = 30000000};
	json_t *o = NULL;
	int rc;

	if (read_try(r, fields, &o, &k) < 0)
		return 1;
	rc = json_opt_duration(r, o, "lease", &k.lease_us);
	json_decref(o);
	if (rc < 0)
		return http_reply_bad(r);
	if (k.lease_us < 1000 || k.lease_us > HTTP_MAX_LEASE_US) {
		snprintf(r->err, sizeof(r->err),
			 "'lease' must be from 1ms to 24h");
		return http_reply_bad(r);
	}
	return judge(r, &k);
}

/* ------------------------------------------------------------------ */
/* POST /v1/completions                                                */
/* ------------------------------------------------------------------ */

/* One item of a batch, as judged before the store is asked. */
typedef struct item {
	try_call k;
	const char *outcome; /* known without the batch, or NULL */
	bool hit;	     /* the try is one of tries.c's */
	bool timed_out;	     /* past its limit: to end TIMED_OUT */
	char why[64];
	size_t slot; /* its place in the batch (when outcome is NULL) */
} item;

/* One item of the batch into *it; -1 with r->err naming it. */
static int read_completion(http_req *r, json_t *j, size_t i, item *it)
{
	json_t *id = json_object_get(j, "id"), *at, *res, *v;
	const char *k;

	if (!json_is_object(j)) {
		snprintf(r->err, sizeof(r->err),
			 "'items' item %zu must be an object", i);
		return -1;
	}
	json_object_foreach(j, k, v)
	{
		if (strcmp(k, "id") && strcmp(k, "attempt") &&
		    strcmp(k, "result")) {
			snprintf(r->err, sizeof(r->err),
				 "'items' item %zu: unknown field '%.100s'", i,
				 k);
			return -1;
		}
	}
	at = json_object_get(j, "attempt");
	res = json_object_get(j, "result");
	if (!id || !at) {
		snprintf(r->err, sizeof(r->err),
			 "'items' item %zu needs 'id' and 'attempt' (the "
			 "claim's) and an optional string 'result'",
			 i);
		return -1;
	}
	/* each field's own complaint ("'attempt' must be from 1 to
	   2147483647, not 4294967296"), named by its item */
	int64_t idv, atv;
	if (json_opt_int(r, j, "id", 1, INT64_MAX, &idv) < 0 ||
	    json_opt_int(r, j, "attempt", 1, INT32_MAX, &atv) < 0) {
		char why[sizeof(r->err)];
		memcpy(why, r->err, sizeof(why));
		snprintf(r->err, sizeof(r->err), "'items' item %zu: %.440s", i,
			 why);
		return -1;
	}
	if (res && !json_is_null(res) && !json_is_string(res)) {
		snprintf(r->err, sizeof(r->err),
			 "'items' item %zu: 'result' must be a string", i);
		return -1;
	}
	it->k.op = OP_COMPLETE;
	it->k.id = idv;
	it->k.attempt = (int32_t)atv;
	it->k.text = json_is_string(res) ? json_string_value(res) : "";
	it->k.len = json_is_string(res) ? json_string_length(res) : 0;
	return 0;
}

/*
** Judge an item before the batch: known here (deadline on this host's
** clock), else from the store's record (no task: NOT_FOUND; ended:
** answered as it ended; past its limit: to time out).
*/
static int judge_item(http_req *r, due_db *db, item *it)
{
	const due_attempt *a;
	due_task *t = NULL;
	http_try tr;
	char dur[48];
	int rc;

	if ((it->hit = http_tries_get(&r->srv->tries, it->k.id, it->k.attempt,
				      &tr))) {
		if (tr.deadline && http_now_us() >= tr.deadline) {
			due_duration_format(dur, sizeof(dur), tr.limit_us);
			snprintf(it->why, sizeof(it->why), "timed out after %s",
				 dur);
			it->timed_out = true;
		}
		return 0;
	}
	if ((rc = load(db, &it->k, &t)) < 0)
		return rc;
	if (!t) {
		it->outcome = "NOT_FOUND";
		return 0;
	}
	a = attempt_row(t, it->k.attempt);
	if (outcome_is(a, "RUNNING")) {
		rc = past_limit(db, t, a, &it->timed_out, it->why,
				sizeof(it->why));
	} else if (!a) {
		it->outcome = "REJECTED_STALE"; /* never claimed */
	} else if (ended_itself(a)) {
		if (!(it->outcome = ended_as(t, a, &it->k)))
			it->outcome = "REJECTED_STALE";
	}
	/* a try taken back goes to the store: it refuses it */
	due_task_free(t);
	return rc;
}

/* After the batch: a stale item, answered from the try's record. */
static void settle_stale(due_db *db, item *it)
{
	const due_attempt *a;
	due_task *t = NULL;

	it->outcome = "REJECTED_STALE";
	if (load(db, &it->k, &t) < 0)
		return;
	if (!t) {
		it->outcome = "NOT_FOUND";
		return;
	}
	if ((a = attempt_row(t, it->k.attempt)) && ended_as(t, a, &it->k))
		it->outcome = ended_as(t, a, &it->k);
	due_task_free(t);
}

/* Judge every item, then commit those left to the store in one batch. */
static int complete_items(http_req *r, due_db *db, item *its, size_t n,
			  due_completion *cs)
{
	size_t m = 0;
	int rc;

	for (size_t i = 0; i < n; i++) {
		if ((rc = judge_item(r, db, &its[i])) < 0)
			return rc;
		if (its[i].outcome || its[i].timed_out)
			continue;
		its[i].slot = m;
		cs[m++] = (due_completion){its[i].k.id, its[i].k.attempt,
					   its[i].k.text, its[i].k.len,
					   DUE_COMPLETE_DONE};
	}
	if (m && (rc = due_complete_batch(db, cs, m)) < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		item *it = &its[i];
		if (it->outcome || it->timed_out)
			continue;
		if (cs[it->slot].outcome != DUE_COMPLETE_REJECTED_STALE) {
			it->outcome =
			    due_complete_outcome_name(cs[it->slot].outcome);
			http_tries_remove(&r->srv->tries, it->k.id,
					  it->k.attempt);
		} else {
			settle_stale(db, it);
		}
	}
	return 0;
}

/*
** The items past their time limit end TIMED_OUT, each in its own
** transaction, after the batch committed.  A store error here leaves that
** try to its lease (the reclaimer ends it); its result is not stored
** either way, so the item still says TIMED_OUT.
*/
static void time_out_items(http_req *r, due_db *db, item *its, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *out = NULL;
		if (!its[i].timed_out)
			continue;
		if (end_timed_out(db, r->srv, &its[i].k, its[i].why, &out) <
		    0) {
			http_log("timeout_commit",
				 "task %lld attempt %d: ending it TIMED_OUT "
				 "failed: %s",
				 (long long)its[i].k.id, (int)its[i].k.attempt,
				 due_error_last());
			its[i].outcome = "TIMED_OUT";
		} else if (out) {
			its[i].outcome = "TIMED_OUT";
		} else { /* another call ended it first */
			settle_stale(db, &its[i]);
		}
	}
}

/*
** Complete many tries in one transaction (due_complete_batch): a worker
** that claimed 16 tasks commits them with one request.  Each item is
** fenced on its own and judged as a single complete is (time limit,
** replay); a stale one gets "REJECTED_STALE", an unknown id "NOT_FOUND",
** one past its limit "TIMED_OUT", without affecting the others, so the
** batch answers 200.
*/
int route_completions(http_req *r)
{
	static const char *const fields[] = {"items", NULL};
	due_completion *cs = NULL;
	json_t *o = NULL, *items, *out = NULL;
	item *its = NULL;
	size_t n = 0;
	due_db *db;
	int rc;

	if (json_body_object(r, fields, false, &o) < 0)
		return http_reply_bad(r);
	items = json_object_get(o, "items");
	if (!json_is_array(items) || !(n = json_array_size(items)) ||
	    n > HTTP_MAX_CLAIM) {
		snprintf(r->err, sizeof(r->err),
			 "'items' must be an array of 1 to %d completions",
			 HTTP_MAX_CLAIM);
		rc = http_reply_bad(r);
		goto done;
	}
	if (!(cs = calloc(n, sizeof(*cs))) ||
	    !(its = calloc(n, sizeof(*its)))) {
		rc = http_reply_due(r, DUE_ENOMEM);
		goto done;
	}
	for (size_t i = 0; i < n; i++)
		if (read_completion(r, json_array_get(items, i), i, &its[i]) <
		    0) {
			rc = http_reply_bad(r);
			goto done;
		}
	http_claims_arm(&r->srv->claims);
	if ((rc = http_db(r, &db)) < 0 ||
	    (rc = complete_items(r, db, its, n, cs)) < 0) {
		rc = http_reply_due(r, rc);
		goto done;
	}
	time_out_items(r, db, its, n);
	out = json_array();
	for (size_t i = 0; out && i < n; i++)
		json_array_append_new(
		    out, json_pack("{s:I, s:s}", "id", (json_int_t)its[i].k.id,
				   "outcome", its[i].outcome));
	rc = http_reply_json(r, 200, out);
done:
	free(cs);
	free(its);
	json_decref(o);
	return rc;
}
