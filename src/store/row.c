/*
** row.c - the decoders of the rows every store returns (see row.h).
**
** One decoder per object: a task, an attempt, a schedule, an upcoming
** (id, due_at) pair.  They read through the backend's due_rows cursor by
** the column enums of row.h, copy every text and blob (the cursor's
** bytes are borrowed), and map the names the store wrote back to enums
** through src/base/names.c.  A decoder that fails leaves what it copied
** in the object, for the object's own free to release.
*/
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "store/row.h"
#include "store/store.h"

char *due__row_dup(const due_rows *r, int col, size_t *len)
{
	size_t n = 0;
	const void *p = r->ops->bytes(r->cur, col, &n);

	if (len)
		*len = p ? n : 0;
	return p ? due__strdup_n(p, n) : NULL;
}

/* A copy of a column that may be NULL; *oom when it was not and is now. */
static char *dup_opt(const due_rows *r, int col, size_t *len, bool *oom)
{
	char *p = due__row_dup(r, col, len);
	if (!p && !r->ops->is_null(r->cur, col))
		*oom = true;
	return p;
}

/* A short text column (a policy name) into buf, "" when NULL or long. */
static const char *short_text(const due_rows *r, int col, char *buf, size_t n)
{
	size_t len = 0;
	const void *p = r->ops->bytes(r->cur, col, &len);

	buf[0] = '\0';
	if (p && len < n) {
		memcpy(buf, p, len);
		buf[len] = '\0';
	}
	return buf;
}

int due__row_task(const due_rows *r, due_task *t)
{
	const due_row_ops *o = r->ops;
	void *c = r->cur;
	const void *state;
	size_t n = 0;
	bool oom = false;

	memset(t, 0, sizeof(*t));
	t->id = o->i64(c, DUE_TC_ID);
	t->kind = dup_opt(r, DUE_TC_KIND, NULL, &oom);
	t->payload =
	    (unsigned char *)dup_opt(r, DUE_TC_PAYLOAD, &t->payload_len, &oom);
	state = o->bytes(c, DUE_TC_STATE, &n);
	if (due__state_from_store(state, n, &t->state) < 0)
		return DUE_ERROR;
	t->due_at = o->time(c, DUE_TC_DUE_AT);
	t->attempt = (int32_t)o->i64(c, DUE_TC_ATTEMPT);
	t->max_attempts = (int32_t)o->i64(c, DUE_TC_MAX_ATTEMPTS);
	t->backoff_us = o->i64(c, DUE_TC_BACKOFF_US);
	t->backoff_cap_us = o->i64(c, DUE_TC_BACKOFF_CAP_US);
	t->lease_owner = dup_opt(r, DUE_TC_LEASE_OWNER, NULL, &oom);
	t->lease_until = o->time(c, DUE_TC_LEASE_UNTIL);
	t->cancel_requested = o->i64(c, DUE_TC_CANCEL_REQUESTED) != 0;
	t->key = dup_opt(r, DUE_TC_KEY, NULL, &oom);
	t->has_result = !o->is_null(c, DUE_TC_RESULT);
	t->result =
	    (unsigned char *)dup_opt(r, DUE_TC_RESULT, &t->result_len, &oom);
	t->last_error = dup_opt(r, DUE_TC_LAST_ERROR, NULL, &oom);
	t->created_at = o->time(c, DUE_TC_CREATED_AT);
	t->updated_at = o->time(c, DUE_TC_UPDATED_AT);
	t->priority = (int32_t)o->i64(c, DUE_TC_PRIORITY);
	t->group = dup_opt(r, DUE_TC_GRP, NULL, &oom);
	t->timeout_us = o->i64(c, DUE_TC_TIMEOUT_US);
	t->after_n = (int32_t)o->i64(c, DUE_TC_AFTER_N);
	t->after_left = (int32_t)o->i64(c, DUE_TC_AFTER_LEFT);
	t->after_any_end = o->i64(c, DUE_TC_AFTER_ANY_END) != 0;
	if (oom || !t->kind || !t->payload)
		return due__error_set(DUE_ENOMEM, "out of memory");
	return 0;
}

int due__rows_tasks(const due_rows *r, due_task_list *l, size_t cap)
{
	int rc;

	while ((rc = r->ops->next(r->cur)) > 0) {
		if (l->count == cap || r->ops->is_null(r->cur, DUE_TC_ID))
			continue;
		if ((rc = due__row_task(r, &l->items[l->count++])) < 0)
			return rc;
	}
	return rc;
}

int due__rows_task_get(const due_rows *r, due_task **out, due_id id)
{
	due_task *t;
	int rc;

	*out = NULL;
	if ((rc = r->ops->next(r->cur)) < 0)
		return rc;
	if (rc == 0)
		return due__error_set(DUE_ENOTFOUND, "no task with id %lld",
				      (long long)id);
	if (!(t = calloc(1, sizeof(*t))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	if ((rc = due__row_task(r, t)) < 0) {
		due_task_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

/* The current DUE_ATTEMPT_COLS row appended to t's history. */
static int row_attempt(const due_rows *r, due_task *t)
{
	const due_row_ops *o = r->ops;
	bool oom = false;
	due_attempt a = {
	    .attempt = (int32_t)o->i64(r->cur, DUE_AC_ATTEMPT),
	    .worker = dup_opt(r, DUE_AC_WORKER, NULL, &oom),
	    .claimed_at = o->time(r->cur, DUE_AC_CLAIMED_AT),
	    .due_at = o->time(r->cur, DUE_AC_DUE_AT),
	    .ended_at = o->time(r->cur, DUE_AC_ENDED_AT),
	    .outcome = dup_opt(r, DUE_AC_OUTCOME, NULL, &oom),
	    .error = dup_opt(r, DUE_AC_ERROR, NULL, &oom),
	    .late_commit = dup_opt(r, DUE_AC_LATE_COMMIT, NULL, &oom),
	};

	if (oom || !a.worker || !a.outcome || due__attempts_append(t, &a) < 0) {
		free(a.worker), free(a.outcome), free(a.error);
		free(a.late_commit);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	return 0;
}

int due__rows_attempts(const due_rows *r, due_task *tasks, size_t n)
{
	size_t t = 0;
	int rc;

	while ((rc = r->ops->next(r->cur)) > 0) {
		due_id tid = r->ops->i64(r->cur, DUE_AC_TASK_ID);
		while (t < n && tasks[t].id < tid)
			t++;
		if (t < n && tasks[t].id == tid &&
		    (rc = row_attempt(r, &tasks[t])) < 0)
			return rc;
	}
	return rc;
}

/* Fill i from the current DUE_SCHED_COLS row; cleared again on failure. */
static int row_sched(const due_rows *r, due_cron_info *i)
{
	const due_row_ops *o = r->ops;
	char name[16];
	bool oom = false;

	memset(i, 0, sizeof(*i));
	i->name = dup_opt(r, DUE_SC_NAME, NULL, &oom);
	i->expr = dup_opt(r, DUE_SC_EXPR, NULL, &oom);
	i->kind = dup_opt(r, DUE_SC_KIND, NULL, &oom);
	i->tz = dup_opt(r, DUE_SC_TZ, NULL, &oom);
	i->payload =
	    (unsigned char *)dup_opt(r, DUE_SC_PAYLOAD, &i->payload_len, &oom);
	i->misfire = due__misfire_parse(
	    short_text(r, DUE_SC_MISFIRE, name, sizeof(name)));
	i->overlap = due__overlap_parse(
	    short_text(r, DUE_SC_OVERLAP, name, sizeof(name)));
	i->max_attempts = (int32_t)o->i64(r->cur, DUE_SC_MAX_ATTEMPTS);
	i->backoff_us = o->i64(r->cur, DUE_SC_BACKOFF_US);
	i->backoff_cap_us = o->i64(r->cur, DUE_SC_BACKOFF_CAP_US);
	i->next_slot = o->time(r->cur, DUE_SC_NEXT_SLOT);
	i->last_slot = o->time(r->cur, DUE_SC_LAST_SLOT);
	i->last_task = o->i64(r->cur, DUE_SC_LAST_TASK);
	i->fired = o->i64(r->cur, DUE_SC_FIRED);
	i->missed = o->i64(r->cur, DUE_SC_MISSED);
	i->last_missed = o->time(r->cur, DUE_SC_LAST_MISSED);
	i->created_at = o->time(r->cur, DUE_SC_CREATED_AT);
	i->updated_at = o->time(r->cur, DUE_SC_UPDATED_AT);
	if (oom || !i->name || !i->expr || !i->kind || !i->tz || !i->payload) {
		due__cron_info_clear(i);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	return 0;
}

int due__rows_sched_get(const due_rows *r, due_cron_info **out,
			const char *name)
{
	due_cron_info *i;
	int rc;

	*out = NULL;
	if ((rc = r->ops->next(r->cur)) < 0)
		return rc;
	if (rc == 0)
		return due__store_no_schedule(name);
	if (!(i = calloc(1, sizeof(*i))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	if ((rc = row_sched(r, i)) < 0) {
		free(i);
		return rc;
	}
	*out = i;
	return 0;
}

int due__rows_sched_list(const due_rows *r, due_cron_info_list **out)
{
	due_cron_info_list *l;
	size_t cap = 0;
	int rc;

	*out = NULL;
	if ((rc = due__cron_info_list_alloc(&l, 0)) < 0)
		return rc;
	while ((rc = r->ops->next(r->cur)) > 0) {
		if (l->count == cap) {
			due_cron_info *n;
			cap = cap ? cap * 2 : 16;
			if (!(n = realloc(l->items, cap * sizeof(*n)))) {
				rc =
				    due__error_set(DUE_ENOMEM, "out of memory");
				break;
			}
			l->items = n;
		}
		if ((rc = row_sched(r, &l->items[l->count])) < 0)
			break;
		l->count++;
	}
	if (rc < 0) {
		due_cron_info_list_free(l);
		return rc;
	}
	*out = l;
	return 0;
}

static int row_kind(const due_rows *r, due_kind_info *k)
{
	const due_row_ops *o = r->ops;

	memset(k, 0, sizeof(*k));
	if (!(k->kind = due__row_dup(r, DUE_KC_KIND, NULL)))
		return due__error_set(DUE_ENOMEM, "out of memory");
	k->paused = o->i64(r->cur, DUE_KC_PAUSED) != 0;
	k->rate_n = (int32_t)o->i64(r->cur, DUE_KC_RATE_N);
	k->rate_us = o->i64(r->cur, DUE_KC_RATE_US);
	k->max_running = (int32_t)o->i64(r->cur, DUE_KC_MAX_RUNNING);
	k->max_running_per_group = (int32_t)o->i64(r->cur, DUE_KC_PER_GROUP);
	k->timeout_us = o->i64(r->cur, DUE_KC_TIMEOUT_US);
	k->held_rate = o->i64(r->cur, DUE_KC_HELD_RATE);
	k->held_running = o->i64(r->cur, DUE_KC_HELD_RUNNING);
	k->held_group = o->i64(r->cur, DUE_KC_HELD_GROUP);
	k->updated_at = o->time(r->cur, DUE_KC_UPDATED_AT);
	return 0;
}

int due__rows_kinds(const due_rows *r, due_kind_info_list *l,
		    void (*each)(const due_rows *r, due_kind_info *k))
{
	size_t cap = l->count;
	int rc;

	while ((rc = r->ops->next(r->cur)) > 0) {
		if (l->count == cap) {
			due_kind_info *n;
			cap = cap ? cap * 2 : 8;
			if (!(n = realloc(l->items, cap * sizeof(*n))))
				return due__error_set(DUE_ENOMEM,
						      "out of memory");
			l->items = n;
		}
		if ((rc = row_kind(r, &l->items[l->count])) < 0)
			return rc;
		if (each)
			each(r, &l->items[l->count]);
		l->count++;
	}
	return rc;
}

/* Room for one more entry in out->ids and out->due_at. */
static int upcoming_grow(due_upcoming *out, size_t *cap)
{
	due_id *ni;
	due_time *nd;

	if (out->count < *cap)
		return 0;
	*cap = *cap ? *cap * 2 : 256;
	if ((ni = realloc(out->ids, *cap * sizeof(*ni))))
		out->ids = ni;
	if ((nd = realloc(out->due_at, *cap * sizeof(*nd))))
		out->due_at = nd;
	return ni && nd ? 0 : due__error_set(DUE_ENOMEM, "out of memory");
}

int due__upcoming_append(due_upcoming *out, const due_upcoming *b)
{
	size_t cap = out->count;

	for (size_t i = 0; i < b->count; i++) {
		if (upcoming_grow(out, &cap) < 0)
			return due_error_last_code();
		out->ids[out->count] = b->ids[i];
		out->due_at[out->count++] = b->due_at[i];
	}
	return 0;
}

typedef struct due_pair {
	due_time at;
	due_id id;
} due_pair;

static int by_due(const void *a, const void *b)
{
	const due_pair *x = a, *y = b;
	if (x->at != y->at)
		return (x->at > y->at) - (x->at < y->at);
	return (x->id > y->id) - (x->id < y->id);
}

int due__upcoming_merge(due_upcoming *out, int limit)
{
	due_pair *v;

	if (out->count < 2)
		goto cut;
	if (!(v = malloc(out->count * sizeof(*v))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t i = 0; i < out->count; i++)
		v[i] = (due_pair){out->due_at[i], out->ids[i]};
	qsort(v, out->count, sizeof(*v), by_due);
	for (size_t i = 0; i < out->count; i++) {
		out->ids[i] = v[i].id;
		out->due_at[i] = v[i].at;
	}
	free(v);
cut:
	if (out->count > (size_t)limit) {
		out->count = (size_t)limit;
		out->truncated = true;
	}
	return 0;
}

int due__rows_upcoming(const due_rows *r, due_upcoming *out, int limit)
{
	size_t cap = out->count;
	int rc;

	while ((rc = r->ops->next(r->cur)) > 0) {
		if (r->ops->is_null(r->cur, 0))
			continue;
		if ((rc = upcoming_grow(out, &cap)) < 0)
			return rc;
		out->ids[out->count] = r->ops->i64(r->cur, 0);
		out->due_at[out->count++] = r->ops->time(r->cur, 1);
	}
	if (rc < 0)
		return rc;
	out->truncated = out->count == (size_t)limit;
	return 0;
}

void due__worker_counters(const due_worker_stats *w,
			  int64_t v[DUE_WORKER_N_COUNTERS])
{
	int i = 0;
#define COUNTER(c) v[i++] = w->c;
	DUE_WORKER_COUNTERS(COUNTER, COUNTER)
#undef COUNTER
}
