/*
** db.c - the public API: argument checking, defaults, dispatch to a store.
**
** Every public operation passes through here.  This file owns the rules
** that do not depend on the database: what a valid kind, delay, payload,
** lease or id is, and what the defaults are.  Bad input is refused here with
** a message naming it, before any backend is touched, so a refusal never
** changes the store.  The backend (src/store/) then makes the transition
** atomic in its own database; see store.h for the transitions it must keep.
**
** A due_db is one connection: use it from one thread at a time.
*/
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "store/store.h"

struct due_db {
	const due_store_ops *ops;
	due_store *store;
	size_t max_payload;
	size_t max_result;
	char *warning; /* from the store's open (due_db_warning) */
};

#define MAX_LIMIT 10000
#define MAX_RATE_US (86400LL * 1000000) /* a day */
#define MAX_FLOW_N 1000000

/*
** Open: split the URL at its scheme (the table of registry.c finds the
** backend), check the backend against this core, let it parse the rest,
** connect, then create/upgrade or check the schema.  *out is set even on
** failure, and due_close releases it.
*/
int due_open(due_db **out, const char *url, const due_open_opts *opts)
{
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_open_params params;
	const due_store_ops *ops;
	void *cfg = NULL;
	due_url u;
	due_db *db;
	int rc;

	*out = NULL;
	if (opts && opts->version <= 1)
		memcpy(&o, opts, offsetof(due_open_opts, timeout_us));
	else if (opts && opts->version == 2) /* compiled before progress */
		memcpy(&o, opts, offsetof(due_open_opts, progress));
	else if (opts && opts->version == DUE_OPEN_OPTS_VERSION)
		o = *opts;
	else if (opts)
		return due__error_set(DUE_EINVAL,
				      "unknown due_open_opts version %u (this "
				      "library knows 0 to %d)",
				      opts->version, DUE_OPEN_OPTS_VERSION);
	if (o.timeout_us < 0)
		return due__error_set(DUE_EINVAL,
				      "invalid due_open_opts.timeout_us: must "
				      "be 0 (the default) or positive");
	if ((rc = due__url_parse(&u, &ops, url)) < 0)
		return rc;
	if ((rc = due__store_check(ops)) < 0) {
		due__url_release(&u);
		return rc;
	}
	/* the URL's timeout= (or the default), lowered by opts */
	params.create = o.create;
	params.timeout_us =
	    u.timeout_us ? u.timeout_us : DUE_STORE_TIMEOUT_DEFAULT_US;
	if (o.timeout_us > 0 && o.timeout_us < params.timeout_us)
		params.timeout_us = o.timeout_us;
	db = calloc(1, sizeof(*db));
	if (!db) {
		due__url_release(&u);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	db->max_payload = o.max_payload ? o.max_payload : (1u << 20);
	db->max_result = o.max_result ? o.max_result : (1u << 20);
	db->ops = ops;
	*out = db;
	free(due__open_warning_take());
	if ((rc = ops->parse_url(&cfg, &u)) < 0)
		goto done;
	rc = ops->open(&db->store, cfg, &params);
	db->warning = due__open_warning_take();
	if (rc < 0)
		goto done;
	if (o.create) {
		due__progress_hook(o.progress, o.progress_payload);
		rc = ops->init_schema(db->store);
		due__progress_hook(NULL, NULL);
	} else {
		rc = ops->check_schema(db->store);
	}
done:
	if (cfg)
		ops->free_cfg(cfg);
	due__url_release(&u);
	return rc;
}

void due_close(due_db *db)
{
	if (!db)
		return;
	if (db->store)
		db->ops->close(db->store);
	free(db->warning);
	free(db);
}

const char *due_db_warning(const due_db *db) { return db ? db->warning : NULL; }

const char *due_db_backend(const due_db *db)
{
	return db && db->ops ? db->ops->name : "none";
}

unsigned due__db_caps(const due_db *db)
{
	return db && db->ops ? db->ops->caps : 0;
}

bool due__db_host_clock(const due_db *db)
{
	return (due__db_caps(db) & DUE_STORE_CAP_HOST_CLOCK) != 0;
}

/* Every operation needs an open store. */
static int ready(due_db *db)
{
	if (!db || !db->store)
		return due__error_set(DUE_EINVAL, "store is not open");
	return 0;
}

static int check_id(due_id id)
{
	if (id <= 0)
		return due__error_set(
		    DUE_EINVAL,
		    "invalid task id %lld: ids are positive integers",
		    (long long)id);
	return 0;
}

static int check_lease(int64_t lease_us)
{
	return due__validate_lease(lease_us);
}

int due_now(due_db *db, due_time *out)
{
	int rc = ready(db);
	return rc < 0 ? rc : db->ops->now(db->store, out);
}

/*
** Read the due time of *o as its version says (due.h) and leave it in the
** current version's terms: at is DUE_TIME_NONE or an instant, and not both
** at and a delay are set.  A version 0 struct takes every default.  0, or
** DUE_EINVAL with a message.
*/
static int check_timing(due_schedule_opts *o)
{
	bool v1 = o->version == 1; /* 0 was "unset"; at won over a delay */

	if (o->version == 0) {
		*o = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	} else if (v1 && o->at == 0) {
		o->at = DUE_TIME_NONE;
	} else if (o->version > DUE_SCHEDULE_OPTS_VERSION) {
		return due__error_set(
		    DUE_EINVAL,
		    "unknown due_schedule_opts version %u (this library "
		    "knows 1..%d)",
		    o->version, DUE_SCHEDULE_OPTS_VERSION);
	}
	if (o->version < 3) { /* no flow fields (and the struct may end here) */
		o->priority = 0;
		o->group = NULL;
		o->timeout_us = 0;
	}
	if (o->version < 4) /* no on_key */
		o->on_key = DUE_ON_KEY_KEEP;
	if (o->version < 5) { /* no run-after (and the struct may end here) */
		o->after = NULL;
		o->n_after = 0;
		o->after_any_end = false;
	}
	o->version = DUE_SCHEDULE_OPTS_VERSION;
	if (o->delay_us < 0)
		return due__error_set(DUE_EINVAL, "invalid delay: negative");
	if (o->delay_us > 100LL * 366 * 86400 * 1000000)
		return due__error_set(DUE_EINVAL,
				      "invalid delay: more than 100 years");
	if (o->at == DUE_TIME_NONE)
		return 0;
	if (o->at < 0)
		return due__error_set(
		    DUE_EINVAL,
		    "invalid due time: before 1970-01-01T00:00:00Z");
	if (o->at > DUE_TIME_LAST) /* what due_time_parse accepts */
		return due__error_set(
		    DUE_EINVAL, "invalid due time: after 9999-12-31T23:59:59Z");
	if (o->delay_us != 0 && !v1)
		return due__error_set(
		    DUE_EINVAL,
		    "give a delay or an absolute due time, not both");
	o->delay_us = 0;
	return 0;
}

/*
** Check one submit and fill in defaults (also used by the in-transaction
** submit of the backends).  `what` names the item in batch
** messages ("item 3: ...").  Returns 0 or a negative code with a message.
** On success out->opts is in the current version's terms (check_timing),
** which is all a backend reads.
*/
/*
** Run-after's list: 1..DUE_AFTER_MAX positive ids, none twice (a
** quadratic check up to 1,000: 0.5 M compares at most, once a submit),
** and not with on_key replace or later (a move of a held task would
** have to merge two lists of parents).
*/
static int check_after(const due_schedule_opts *o)
{
	if (o->n_after == 0) {
		if (o->after_any_end)
			return due__error_set(DUE_EINVAL,
					      "after_any_end without after: "
					      "give the parents");
		return 0;
	}
	if (!o->after)
		return due__error_set(
		    DUE_EINVAL, "after is NULL with n_after %zu", o->n_after);
	if (o->n_after > DUE_AFTER_MAX)
		return due__error_set(DUE_EINVAL,
				      "after lists %zu tasks: at most %d",
				      o->n_after, DUE_AFTER_MAX);
	for (size_t i = 0; i < o->n_after; i++) {
		if (o->after[i] <= 0)
			return due__error_set(DUE_EINVAL,
					      "after: invalid task id %lld",
					      (long long)o->after[i]);
		for (size_t j = 0; j < i; j++)
			if (o->after[j] == o->after[i])
				return due__error_set(
				    DUE_EINVAL, "after lists task %lld twice",
				    (long long)o->after[i]);
	}
	if (o->on_key != DUE_ON_KEY_KEEP)
		return due__error_set(DUE_EINVAL,
				      "after cannot be combined with on_key "
				      "%s (a held task is not moved by key)",
				      due_on_key_name(o->on_key));
	return 0;
}

/*
** Copy a caller's options by their version: a struct of version 1 or 2
** was compiled before the flow fields existed and may end before them.
*/
static void copy_opts(due_schedule_opts *dst, const due_schedule_opts *src)
{
	if (!src)
		return;
	if (src->version >= 1 && src->version < 3)
		memcpy(dst, src, offsetof(due_schedule_opts, priority));
	else if (src->version < 5)
		memcpy(dst, src, offsetof(due_schedule_opts, after));
	else
		*dst = *src;
}

int due__submit_check(const due_submit *in, due_submit *out, size_t max_payload,
		      bool fixed_limit, const char *what)
{
	int rc;

	*out = *in;
	if ((rc = check_timing(&out->opts)) < 0 ||
	    (rc = due__validate_kind(in->kind)) < 0 ||
	    (rc = due__validate_key(out->opts.key)) < 0)
		goto bad;
	if (in->payload_len > max_payload) {
		rc = due__error_set(
		    DUE_ETOOBIG,
		    "payload is %zu bytes, over the limit of %zu bytes%s",
		    in->payload_len, max_payload,
		    fixed_limit ? ""
				: " (raise it with due_open_opts.max_payload; "
				  "$DUE_MAX_PAYLOAD for the due command and "
				  "due serve)");
		goto bad;
	}
	if (!in->payload && in->payload_len) {
		rc =
		    due__error_set(DUE_EINVAL, "payload is NULL with a length");
		goto bad;
	}
	if ((rc = due__validate_group(out->opts.group)) < 0)
		goto bad;
	if (!due_on_key_name(out->opts.on_key)) {
		rc = due__error_set(DUE_EINVAL,
				    "invalid on_key %d: must be keep, replace "
				    "or later",
				    (int)out->opts.on_key);
		goto bad;
	}
	if (out->opts.on_key != DUE_ON_KEY_KEEP && !out->opts.key) {
		rc = due__error_set(DUE_EINVAL,
				    "on_key %s needs a key: it says what to do "
				    "with the live task of the same key",
				    due_on_key_name(out->opts.on_key));
		goto bad;
	}
	if ((rc = check_after(&out->opts)) < 0)
		goto bad;
	if (out->opts.priority < DUE_PRIORITY_MIN ||
	    out->opts.priority > DUE_PRIORITY_MAX) {
		rc = due__error_set(
		    DUE_EINVAL, "invalid priority %d: must be %d..%d",
		    out->opts.priority, DUE_PRIORITY_MIN, DUE_PRIORITY_MAX);
		goto bad;
	}
	if (out->opts.timeout_us < 0 ||
	    out->opts.timeout_us > DUE_TIMEOUT_MAX_US) {
		rc = due__error_set(DUE_EINVAL,
				    "invalid timeout: must be 0 (none) up to "
				    "7 days");
		goto bad;
	}
	if (out->opts.max_attempts < 1 || out->opts.max_attempts > 1000) {
		rc = due__error_set(DUE_EINVAL,
				    "invalid max_attempts %d: must be 1..1000",
				    out->opts.max_attempts);
		goto bad;
	}
	if (out->opts.backoff_us < 0 || out->opts.backoff_cap_us < 0 ||
	    out->opts.backoff_cap_us < out->opts.backoff_us) {
		rc = due__error_set(DUE_EINVAL, "invalid backoff: base and cap "
						"must be >= 0 and base <= cap");
		goto bad;
	}
	return 0;
bad:
	if (what) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", due_error_last());
		due__error_set(rc, "%s: %s", what, msg);
	}
	return rc;
}

int due__submit_args(due_submit *out, const char *kind, const void *payload,
		     size_t payload_len, const due_schedule_opts *opts,
		     size_t max_payload, bool fixed_limit)
{
	due_submit in = {kind, payload, payload_len,
			 (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT};

	copy_opts(&in.opts, opts);
	return due__submit_check(&in, out, max_payload, fixed_limit, NULL);
}

int due_schedule(due_db *db, due_submitted *out, const char *kind,
		 const void *payload, size_t payload_len,
		 const due_schedule_opts *opts)
{
	due_submit s;
	int rc;

	if ((rc = ready(db)) < 0 ||
	    (rc = due__submit_args(&s, kind, payload, payload_len, opts,
				   db->max_payload, false)) < 0)
		return rc;
	return db->ops->schedule(db->store, out, &s, 1);
}

int due_schedule_batch(due_db *db, due_submitted *out, const due_submit *items,
		       size_t n)
{
	due_submit *checked;
	int rc;

	if ((rc = ready(db)) < 0)
		return rc;
	if (n == 0)
		return 0;
	checked = calloc(n, sizeof(*checked));
	if (!checked)
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		char what[32];
		snprintf(what, sizeof(what), "item %zu", i + 1);
		if ((rc = due__submit_check(&items[i], &checked[i],
					    db->max_payload, false, what)) < 0)
			goto done;
	}
	rc = db->ops->schedule(db->store, out, checked, n);
done:
	free(checked);
	return rc;
}

int due_cancel(due_db *db, due_cancel_outcome *out, due_id id)
{
	int rc;
	if ((rc = ready(db)) < 0 || (rc = check_id(id)) < 0)
		return rc;
	return db->ops->cancel(db->store, out, id);
}

/*
** The options of a reschedule, checked as a submit's timing and payload
** are (check_timing, due__submit_check): their messages name the field.
** On success *c is in the current version's terms.
*/
static int check_reschedule(due_db *db, const due_reschedule_opts *o,
			    due_reschedule_opts *c)
{
	due_schedule_opts t = DUE_SCHEDULE_OPTS_INIT;
	int rc;

	if (!o)
		return due__error_set(DUE_EINVAL, "reschedule: no options "
						  "(a due time is needed)");
	if (o->version != DUE_RESCHEDULE_OPTS_VERSION)
		return due__error_set(
		    DUE_EINVAL,
		    "unknown due_reschedule_opts version %u (this library "
		    "knows 1)",
		    o->version);
	t.delay_us = o->delay_us;
	t.at = o->at;
	if ((rc = check_timing(&t)) < 0)
		return rc;
	*c = *o;
	c->delay_us = t.delay_us;
	c->at = t.at;
	if (!o->set_payload) {
		c->payload = NULL;
		c->payload_len = 0;
		return 0;
	}
	if (o->payload_len > db->max_payload)
		return due__error_set(
		    DUE_ETOOBIG,
		    "payload is %zu bytes, over the limit of %zu bytes (raise "
		    "it with due_open_opts.max_payload; $DUE_MAX_PAYLOAD for "
		    "the due command and due serve)",
		    o->payload_len, db->max_payload);
	if (!o->payload && o->payload_len)
		return due__error_set(DUE_EINVAL,
				      "payload is NULL with a length");
	if (!c->payload)
		c->payload = "";
	return 0;
}

int due_reschedule(due_db *db, due_reschedule_outcome *out, due_id id,
		   const due_reschedule_opts *opts)
{
	due_reschedule_opts c;
	int rc;

	if ((rc = ready(db)) < 0 || (rc = check_id(id)) < 0 ||
	    (rc = check_reschedule(db, opts, &c)) < 0)
		return rc;
	return db->ops->reschedule(db->store, out, id, &c);
}

int due_get(due_db *db, due_task **out, due_id id)
{
	int rc;
	*out = NULL;
	if ((rc = ready(db)) < 0 || (rc = check_id(id)) < 0)
		return rc;
	return db->ops->get(db->store, out, id);
}

int due_list(due_db *db, due_task_list **out, const due_list_opts *opts)
{
	due_list_opts o = DUE_LIST_OPTS_INIT;
	int rc;

	*out = NULL;
	if ((rc = ready(db)) < 0)
		return rc;
	if (opts && opts->version > DUE_LIST_OPTS_VERSION)
		return due__error_set(DUE_EINVAL,
				      "unknown due_list_opts version %u (this "
				      "library knows 1..%d)",
				      opts->version, DUE_LIST_OPTS_VERSION);
	if (opts && opts->version <= 1) /* ends before held */
		memcpy(&o, opts, offsetof(due_list_opts, held));
	else if (opts)
		o = *opts;
	o.version = DUE_LIST_OPTS_VERSION;
	if (o.held && o.state != -1 && o.state != DUE_SCHEDULED)
		return due__error_set(DUE_EINVAL,
				      "held tasks are SCHEDULED: a held "
				      "filter with state %s lists none",
				      due_state_name((due_state)o.state));
	if (o.limit <= 0 || o.limit > MAX_LIMIT)
		return due__error_set(DUE_EINVAL,
				      "invalid limit %d: must be 1..%d",
				      o.limit, MAX_LIMIT);
	if (o.state < -1 || o.state >= DUE_STATE_COUNT)
		return due__error_set(DUE_EINVAL, "invalid state filter %d",
				      o.state);
	if (o.kind && (rc = due__validate_kind(o.kind)) < 0)
		return rc;
	if (o.after < 0)
		return due__error_set(DUE_EINVAL,
				      "invalid 'after' id: negative");
	return db->ops->list(db->store, out, &o);
}

int due_claim_ex(due_db *db, due_task_list **out, const due_claim_opts *o)
{
	int rc;

	*out = NULL;
	if ((rc = ready(db)) < 0 || (rc = due__validate_owner(o->owner)) < 0 ||
	    (rc = check_lease(o->lease_us)) < 0)
		return rc;
	if (o->limit < 1 || o->limit > MAX_LIMIT)
		return due__error_set(DUE_EINVAL,
				      "invalid claim limit %d: must be 1..%d",
				      o->limit, MAX_LIMIT);
	if (o->n_kinds > 64)
		return due__error_set(DUE_EINVAL,
				      "too many kinds (at most 64)");
	for (size_t i = 0; i < o->n_kinds; i++)
		if ((rc = due__validate_kind(o->kinds[i])) < 0)
			return rc;
	return db->ops->claim(db->store, out, o->owner, o->kinds, o->n_kinds,
			      o->exclude_kinds, o->limit, o->lease_us, 0);
}

int due_claim(due_db *db, due_task_list **out, const char *owner,
	      const char *const *kinds, size_t n_kinds, int limit,
	      int64_t lease_us)
{
	due_claim_opts o = DUE_CLAIM_OPTS_INIT;
	o.owner = owner;
	o.kinds = kinds;
	o.n_kinds = n_kinds;
	o.limit = limit;
	o.lease_us = lease_us;
	return due_claim_ex(db, out, &o);
}

int due_claim_id(due_db *db, due_task **out, due_id id, const char *owner,
		 int64_t lease_us)
{
	due_task_list *l = NULL;
	int rc;

	*out = NULL;
	if ((rc = ready(db)) < 0 || (rc = check_id(id)) < 0 ||
	    (rc = due__validate_owner(owner)) < 0 ||
	    (rc = check_lease(lease_us)) < 0)
		return rc;
	if ((rc = db->ops->claim(db->store, &l, owner, NULL, 0, false, 1,
				 lease_us, id)) < 0)
		return rc;
	if (l->count == 0) {
		due_task_list_free(l);
		return due__error_set(
		    DUE_EBUSY,
		    "task %lld is not claimable now (not due, taken or gone)",
		    (long long)id);
	}
	*out = malloc(sizeof(**out));
	if (!*out) {
		due_task_list_free(l);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	**out = l->items[0];
	l->count = 0;
	due_task_list_free(l);
	return 0;
}

int due_extend(due_db *db, due_extend_outcome *out, due_id id, int32_t attempt,
	       int64_t lease_us)
{
	int rc;
	if ((rc = ready(db)) < 0 || (rc = check_id(id)) < 0 ||
	    (rc = check_lease(lease_us)) < 0)
		return rc;
	return db->ops->extend(db->store, out, id, attempt, lease_us);
}

static int check_completion(due_db *db, const due_completion *c)
{
	int rc;
	if ((rc = check_id(c->id)) < 0)
		return rc;
	if (c->result_len > db->max_result)
		return due__error_set(
		    DUE_ETOOBIG,
		    "result is %zu bytes, over the limit of %zu bytes",
		    c->result_len, db->max_result);
	return 0;
}

int due_complete_tx(due_db *db, due_complete_outcome *out, due_id id,
		    int32_t attempt, const void *result, size_t result_len,
		    due_tx_hook hook, void *payload)
{
	due_completion c = {id, attempt, result, result_len, 0};
	int rc;

	if ((rc = ready(db)) < 0 || (rc = check_completion(db, &c)) < 0)
		return rc;
	if ((rc = db->ops->complete(db->store, &c, 1, hook, payload)) < 0)
		return rc;
	*out = c.outcome;
	return 0;
}

int due_complete(due_db *db, due_complete_outcome *out, due_id id,
		 int32_t attempt, const void *result, size_t result_len)
{
	return due_complete_tx(db, out, id, attempt, result, result_len, NULL,
			       NULL);
}

int due_complete_batch(due_db *db, due_completion *items, size_t n)
{
	int rc;
	if ((rc = ready(db)) < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		if ((rc = check_completion(db, &items[i])) < 0)
			return rc;
	return n ? db->ops->complete(db->store, items, n, NULL, NULL) : 0;
}

int due_complete_and_claim(due_db *db, due_completion *items, size_t n,
			   const due_claim_opts *o, due_task_list **out)
{
	int rc;

	*out = NULL;
	if ((rc = ready(db)) < 0 || (rc = due__validate_owner(o->owner)) < 0 ||
	    (rc = check_lease(o->lease_us)) < 0)
		return rc;
	if (o->limit < 1 || o->limit > MAX_LIMIT || o->n_kinds > 64)
		return due__error_set(
		    DUE_EINVAL, "invalid claim limit %d or too many kinds",
		    o->limit);
	for (size_t i = 0; i < o->n_kinds; i++)
		if ((rc = due__validate_kind(o->kinds[i])) < 0)
			return rc;
	for (size_t i = 0; i < n; i++)
		if ((rc = check_completion(db, &items[i])) < 0)
			return rc;
	if (n == 0)
		return due_claim_ex(db, out, o);
	return db->ops->complete_claim(db->store, items, n, o->owner, o->kinds,
				       o->n_kinds, o->exclude_kinds, o->limit,
				       o->lease_us, out);
}

int due_fail_as(due_db *db, due_fail_outcome *out, due_id id, int32_t attempt,
		const char *error, due_outcome as)
{
	int rc;
	if ((rc = ready(db)) < 0 || (rc = check_id(id)) < 0)
		return rc;
	if (as != DUE_OUT_FAILED && as != DUE_OUT_TIMED_OUT)
		return due__error_set(DUE_EINVAL,
				      "invalid failure outcome %d: FAILED or "
				      "TIMED_OUT",
				      (int)as);
	if (!error)
		error = "";
	if (!due__utf8_valid(error)) { /* a handler's stderr: any bytes */
		char *clean = due__utf8_scrub(error);
		if (!clean)
			return due__error_set(DUE_ENOMEM, "out of memory");
		rc = db->ops->fail(db->store, out, id, attempt, clean, as);
		free(clean);
		return rc;
	}
	return db->ops->fail(db->store, out, id, attempt, error, as);
}

int due_fail(due_db *db, due_fail_outcome *out, due_id id, int32_t attempt,
	     const char *error)
{
	return due_fail_as(db, out, id, attempt, error, DUE_OUT_FAILED);
}

int due_reclaim_expired(due_db *db, due_reclaimed *out)
{
	due_reclaimed ignored;
	int rc = ready(db);
	return rc < 0 ? rc : db->ops->reclaim(db->store, out ? out : &ignored);
}

/*
** A task added with run-after is retried only once its parents allow it
** to run: each DONE (or, with after_any_end, ended).  A held task that an
** operator killed would otherwise run at once, before its parents.  The
** parents are read before the store's retry: one that ends meanwhile
** only allows more, and an operator's retry of a DEAD parent in that
** instant is the one window left (docs/INTERFACE.md says so).
*/
static int parents_allow(due_db *db, due_id id)
{
	due_task *t = NULL;
	int rc;

	if ((rc = db->ops->get(db->store, &t, id)) < 0 || t->after_n == 0 ||
	    t->state != DUE_DEAD) {
		due_task_free(t);
		return rc == DUE_ENOTFOUND ? 0 : rc; /* the store answers */
	}
	for (int32_t i = 0; rc == 0 && t->after && i < t->after_n; i++) {
		due_task *p = NULL;
		int got = db->ops->get(db->store, &p, t->after[i]);
		if (got == DUE_ENOTFOUND) { /* pruned: it had ended */
			due__error_clear();
			continue;
		}
		if (got < 0)
			rc = got;
		else if (p->state == DUE_DONE ||
			 (t->after_any_end && p->state >= DUE_DONE))
			rc = 0;
		else
			rc = due__error_set(
			    DUE_ESTATE,
			    "task %lld runs after task %lld, which is %s: "
			    "retry it once its parents are %s",
			    (long long)id, (long long)p->id,
			    due_state_name(p->state),
			    t->after_any_end ? "ended" : "DONE");
		due_task_free(p);
	}
	due_task_free(t);
	return rc;
}

int due_retry(due_db *db, due_id id)
{
	int rc;
	if ((rc = ready(db)) < 0 || (rc = check_id(id)) < 0 ||
	    (rc = parents_allow(db, id)) < 0)
		return rc;
	return db->ops->retry(db->store, id);
}

int due_requeue(due_db *db, due_id id)
{
	int rc;
	if ((rc = ready(db)) < 0 || (rc = check_id(id)) < 0)
		return rc;
	return db->ops->requeue(db->store, id);
}

int due_kill(due_db *db, due_state *out_state, due_id id)
{
	due_state ignored;
	int rc;
	if ((rc = ready(db)) < 0 || (rc = check_id(id)) < 0)
		return rc;
	return db->ops->kill(db->store, out_state ? out_state : &ignored, id);
}

int due_dead(due_db *db, due_task_list **out, int limit)
{
	due_list_opts o = DUE_LIST_OPTS_INIT;
	o.state = DUE_DEAD;
	o.limit = limit;
	o.attempts = true;
	return due_list(db, out, &o);
}

int due_stats_get(due_db *db, due_stats *out)
{
	int rc = ready(db);
	if (rc < 0)
		return rc;
	memset(out, 0, sizeof(*out));
	return db->ops->stats(db->store, out);
}

int due_health(due_db *db, bool *out_up, int64_t *out_dead)
{
	due_stats st;
	int rc = due_stats_get(db, &st);
	if (rc < 0)
		return rc;
	*out_up = st.dead == 0;
	if (out_dead)
		*out_dead = st.dead;
	return 0;
}

int due_prune(due_db *db, int64_t *out_deleted, int64_t older_than_us)
{
	int rc = ready(db);
	if (rc < 0)
		return rc;
	if (older_than_us < 0)
		return due__error_set(DUE_EINVAL,
				      "invalid retention: negative");
	return db->ops->prune(db->store, out_deleted, older_than_us, 0);
}

int due_prune_max(due_db *db, int64_t *out_deleted, int64_t older_than_us,
		  int64_t max_rows)
{
	return due__prune_max(db, out_deleted, older_than_us, max_rows);
}

int due__prune_max(due_db *db, int64_t *out_deleted, int64_t older_than_us,
		   int64_t max_rows)
{
	int rc = ready(db);
	*out_deleted = 0;
	if (rc < 0)
		return rc;
	if (older_than_us < 0 || max_rows < 0)
		return due__error_set(DUE_EINVAL,
				      "invalid retention: negative");
	return db->ops->prune(db->store, out_deleted, older_than_us, max_rows);
}

int due__lock_take(due_db *db, bool *held, const char *name, const char *owner,
		   int64_t ttl_us)
{
	int rc = ready(db);
	*held = false;
	if (rc < 0)
		return rc;
	if ((rc = due__validate_owner(owner)) < 0)
		return rc;
	if (!name || !*name || strlen(name) > 64)
		return due__error_set(DUE_EINVAL, "invalid lock name");
	if (ttl_us <= 0)
		return due__error_set(DUE_EINVAL,
				      "invalid lock lease: must be > 0");
	return db->ops->lock_take(db->store, held, name, owner, ttl_us);
}

int due_store_bytes(due_db *db, int64_t *out_bytes)
{
	int rc = ready(db);
	*out_bytes = 0;
	if (rc < 0)
		return rc;
	return db->ops->bytes(db->store, out_bytes);
}

const due_store_ops *due__db_ops(const due_db *db) { return db->ops; }

due_store *due__db_store(const due_db *db) { return db ? db->store : NULL; }

size_t due__db_max_payload(const due_db *db) { return db->max_payload; }

int due_metrics_get(due_db *db, due_metrics **out)
{
	due_metrics *m;
	int rc;

	*out = NULL;
	if ((rc = ready(db)) < 0)
		return rc;
	if (!(m = calloc(1, sizeof(*m))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	if ((rc = db->ops->stats(db->store, &m->stats)) < 0 ||
	    (rc = db->ops->metrics(db->store, m)) < 0) {
		due_metrics_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

int due_worker_report(due_db *db, const char *owner, const due_worker_stats *st)
{
	int rc;
	if ((rc = ready(db)) < 0 || (rc = due__validate_owner(owner)) < 0)
		return rc;
	return db->ops->worker_report(db->store, owner, st);
}

int due_upcoming_get(due_db *db, due_upcoming **out, const char *const *kinds,
		     size_t n_kinds, bool exclude_kinds, due_time until,
		     int limit)
{
	due_upcoming *u;
	int rc;

	*out = NULL;
	if ((rc = ready(db)) < 0)
		return rc;
	if (limit < 1 || limit > 1000000)
		return due__error_set(DUE_EINVAL,
				      "invalid limit %d: 1..1000000", limit);
	if (n_kinds > 64)
		return due__error_set(DUE_EINVAL,
				      "too many kinds (at most 64)");
	for (size_t i = 0; i < n_kinds; i++)
		if ((rc = due__validate_kind(kinds[i])) < 0)
			return rc;
	if (!(u = calloc(1, sizeof(*u))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	if ((rc = db->ops->upcoming(db->store, u, kinds, n_kinds, exclude_kinds,
				    until, limit)) < 0) {
		due_upcoming_free(u);
		return rc;
	}
	*out = u;
	return 0;
}

void due_upcoming_free(due_upcoming *u)
{
	if (!u)
		return;
	free(u->ids);
	free(u->due_at);
	free(u);
}

/*
** Notifications are a capability: a store without DUE_STORE_CAP_NOTIFY
** cannot be listened to (DUE_ESTATE: the caller polls), and has nothing
** to drain or wake.
*/
int due_listen(due_db *db, int *out_fd)
{
	int rc = ready(db);
	if (rc < 0)
		return rc;
	if (!(db->ops->caps & DUE_STORE_CAP_NOTIFY))
		return due__error_set(
		    DUE_ESTATE, "the %s store cannot notify listeners: poll it",
		    db->ops->name);
	return db->ops->listen(db->store, out_fd);
}

int due_listen_drain(due_db *db, int *out_count)
{
	int rc = ready(db);
	*out_count = 0;
	if (rc < 0 || !(db->ops->caps & DUE_STORE_CAP_NOTIFY))
		return rc;
	return db->ops->listen_drain(db->store, out_count);
}

int due_notify(due_db *db)
{
	int rc = ready(db);
	if (rc < 0 || !(db->ops->caps & DUE_STORE_CAP_NOTIFY))
		return rc;
	return db->ops->notify(db->store);
}

/*
** Listening for finished tasks (due_wait, the HTTP long poll of a task):
** the backend's own channel, DUE_EUNSUPPORTED where it has none.
*/
int due_listen_finished(due_db *db, int *out_fd)
{
	int rc = ready(db);
	*out_fd = -1;
	if (rc < 0)
		return rc;
	return db->ops->listen_done(db->store, out_fd);
}

/* ------------------------------------------------------------------ */
/* Flow control                                                        */
/* ------------------------------------------------------------------ */

/* A limit of n: -1 keep, 0 none, else 1..MAX_FLOW_N. */
static int check_flow_n(int32_t n, const char *what)
{
	if (n < -1 || n > MAX_FLOW_N)
		return due__error_set(DUE_EINVAL,
				      "invalid %s %d: must be 1..%d (0: none)",
				      what, n, MAX_FLOW_N);
	return 0;
}

/*
** Check a settings change: known version, every field in range, and at
** least one field changed.
*/
static int check_kind_settings(const due_kind_settings *k)
{
	int rc;

	if (!k || k->version != DUE_KIND_SETTINGS_VERSION)
		return due__error_set(DUE_EINVAL,
				      "unknown due_kind_settings version %u "
				      "(this library knows %d)",
				      k ? k->version : 0,
				      DUE_KIND_SETTINGS_VERSION);
	if (k->paused < -1 || k->paused > 1)
		return due__error_set(
		    DUE_EINVAL, "invalid paused %d: -1, 0 or 1", k->paused);
	if ((rc = check_flow_n(k->rate_n, "rate")) < 0 ||
	    (rc = check_flow_n(k->max_running, "max-running")) < 0 ||
	    (rc = check_flow_n(k->max_running_per_group,
			       "max-running-per-group")) < 0)
		return rc;
	if (k->rate_n > 0 && (k->rate_us < 1000 || k->rate_us > MAX_RATE_US))
		return due__error_set(DUE_EINVAL,
				      "invalid rate window: must be 1ms..1d");
	if (k->timeout_us < -1 || k->timeout_us > DUE_TIMEOUT_MAX_US)
		return due__error_set(DUE_EINVAL,
				      "invalid timeout: must be up to 7 days "
				      "(0: none)");
	if (k->paused == -1 && k->rate_n == -1 && k->max_running == -1 &&
	    k->max_running_per_group == -1 && k->timeout_us == -1)
		return due__error_set(DUE_EINVAL,
				      "nothing to change: give at least one "
				      "setting");
	return 0;
}

int due_kind_set(due_db *db, const char *kind, const due_kind_settings *k)
{
	int rc;
	if ((rc = ready(db)) < 0 || (rc = due__validate_kind(kind)) < 0 ||
	    (rc = check_kind_settings(k)) < 0)
		return rc;
	return db->ops->kind_put(db->store, kind, k);
}

int due_kind_get(due_db *db, due_kind_info **out, const char *kind)
{
	int rc;
	*out = NULL;
	if ((rc = ready(db)) < 0 || (rc = due__validate_kind(kind)) < 0)
		return rc;
	return db->ops->kind_get(db->store, out, kind, NULL);
}

int due_kind_list(due_db *db, due_kind_info_list **out)
{
	int rc;
	*out = NULL;
	if ((rc = ready(db)) < 0)
		return rc;
	return db->ops->kind_list(db->store, out);
}

int due_kind_remove(due_db *db, const char *kind)
{
	int rc;
	if ((rc = ready(db)) < 0 || (rc = due__validate_kind(kind)) < 0)
		return rc;
	return db->ops->kind_remove(db->store, kind);
}

/*
** What holds a waiting task: its parents (run-after), else the first
** setting that holds it when due, in the order a claim checks them:
** pause, then the rate, the kind's running limit, the group's.
*/
int due_task_hold(due_db *db, const char **out_reason, const due_task *t)
{
	due_kind_info *k = NULL;
	due_time now;
	int rc;

	*out_reason = NULL;
	if ((rc = ready(db)) < 0)
		return rc;
	if (!t || !t->kind)
		return due__error_set(DUE_EINVAL, "task is NULL");
	if (t->state != DUE_SCHEDULED)
		return 0;
	if (t->after_left > 0) {
		*out_reason = "after";
		return 0;
	}
	if ((rc = db->ops->now(db->store, &now)) < 0)
		return rc;
	if (t->due_at > now)
		return 0;
	rc = db->ops->kind_get(db->store, &k, t->kind, t->group);
	if (rc == DUE_ENOTFOUND) {
		due__error_clear();
		return 0;
	}
	if (rc < 0)
		return rc;
	if (k->paused)
		*out_reason = "paused";
	else if (k->rate_n > 0 && k->rate_used >= k->rate_n)
		*out_reason = "rate";
	else if (k->max_running > 0 && k->running >= k->max_running)
		*out_reason = "max_running";
	else if (t->group && k->max_running_per_group > 0 &&
		 k->group_running >= k->max_running_per_group)
		*out_reason = "max_running_per_group";
	due_kind_info_free(k);
	return 0;
}
