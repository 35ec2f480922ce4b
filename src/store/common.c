/*
** common.c - what the store backends share besides rows (row.c):
** allocation, the verdict on a schema version and the migration walk, the
** completion hook call, the outcomes and errors every backend reports
** the same way, the lateness percentiles, and the SQL backends' view of
** flow-control settings and of running tries by group.  A
** backend calls these so that a rule or a message exists once, whatever
** its database.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "store/store.h"

int due__schema_verdict(const char *store, int v, const char *where)
{
	if (v < 0)
		return due__error_set(
		    DUE_ESCHEMA,
		    "store '%s' has no due schema%s: run `due init`", store,
		    where);
	if (v < DUE_SCHEMA_VERSION)
		return due__error_set(
		    DUE_ESCHEMA,
		    "store '%s' has schema version %d, older than %d: run "
		    "`due init` to upgrade",
		    store, v, DUE_SCHEMA_VERSION);
	if (v > DUE_SCHEMA_VERSION)
		return due__error_set(
		    DUE_ESCHEMA,
		    "store '%s' has schema version %d, newer than this due "
		    "(%d): upgrade due",
		    store, v, DUE_SCHEMA_VERSION);
	return 0;
}

/*
** The walk is the same for every backend; only the SQL of each step and
** how to run it are the backend's.  A version without a step to the next
** (0, or a hole in the table) has no upgrade path.
*/
int due__migrate(due_store *s, const due_migration *m)
{
	char what[48];
	int v, rc, done = 0, total;

	if ((rc = m->begin(s)) < 0)
		return rc;
	if ((m->lock && (rc = m->lock(s)) < 0) ||
	    (rc = m->read_version(s, &v)) < 0)
		goto fail;
	if (v > DUE_SCHEMA_VERSION) {
		rc = due__schema_verdict(m->label, v, m->where);
		goto fail;
	}
	/* steps to run, for the caller's progress line (due__progress) */
	total = v < 0 ? DUE_SCHEMA_VERSION : DUE_SCHEMA_VERSION - v;
	if (v < 0) {
		due__progress("create schema", done++, total);
		if ((rc = m->exec(s, m->steps[1], "create schema")) < 0)
			goto fail;
		v = 1;
	}
	for (; v < DUE_SCHEMA_VERSION; v++) {
		if (v < 1 || !m->steps[v + 1]) {
			rc = due__error_set(
			    DUE_ESCHEMA,
			    "store '%s' has schema version %d and this due "
			    "has no upgrade path from it",
			    m->label, v);
			goto fail;
		}
		snprintf(what, sizeof(what), "upgrade schema to version %d",
			 v + 1);
		due__progress(what, done++, total);
		if ((rc = m->exec(s, m->steps[v + 1], what)) < 0)
			goto fail;
	}
	return m->commit(s);
fail:
	m->rollback(s);
	return rc;
}

int due__store_run_hook(due_tx_hook hook, void *conn, const due_completion *c,
			void *payload)
{
	due_task t = {.id = c->id,
		      .attempt = c->attempt,
		      .state = DUE_DONE,
		      .result = (unsigned char *)c->result,
		      .result_len = c->result_len,
		      .has_result = true};

	if (hook(conn, &t, payload) != 0)
		return due__error_set(
		    DUE_ERROR,
		    "completion hook failed for task %lld: rolled back",
		    (long long)c->id);
	return 0;
}

due_fail_outcome due__fail_outcome_of(due_state s)
{
	return s == DUE_CANCELLED ? DUE_FAIL_CANCELLED
	       : s == DUE_DEAD	  ? DUE_FAIL_DEAD
				  : DUE_FAIL_RETRY_SCHEDULED;
}

due_cancel_outcome due__cancel_outcome_of(bool found, due_state s)
{
	if (!found)
		return DUE_CANCEL_NOT_FOUND;
	return s == DUE_SCHEDULED   ? DUE_CANCEL_CANCELLED
	       : s == DUE_CLAIMED   ? DUE_CANCEL_REQUESTED
	       : s == DUE_CANCELLED ? DUE_CANCEL_ALREADY_CANCELLED
				    : DUE_CANCEL_TOO_LATE;
}

due_reschedule_outcome due__reschedule_outcome_of(bool found, due_state s)
{
	if (!found)
		return DUE_RESCHEDULE_NOT_FOUND;
	return s == DUE_SCHEDULED ? DUE_RESCHEDULE_RESCHEDULED
	       : s == DUE_CLAIMED ? DUE_RESCHEDULE_TOO_LATE
				  : DUE_RESCHEDULE_ALREADY_FINISHED;
}

int due__store_wrong_state(due_id id, const char *action, const char *state,
			   const char *needed)
{
	if (!state)
		return due__error_set(DUE_ENOTFOUND, "no task with id %lld",
				      (long long)id);
	return due__error_set(DUE_ESTATE,
			      "cannot %s task %lld: it is %s, not %s", action,
			      (long long)id, state, needed);
}

int due__store_no_kind(const char *kind)
{
	return due__error_set(DUE_ENOTFOUND, "kind '%s' has no settings", kind);
}

int due__store_no_schedule(const char *name)
{
	return due__error_set(DUE_ENOTFOUND, "no schedule named '%s'", name);
}

int due__store_retry_conflict(due_id id)
{
	return due__error_set(
	    DUE_ECONFLICT,
	    "cannot retry task %lld: a live task with the same kind and "
	    "key exists",
	    (long long)id);
}

int due__task_list_alloc(due_task_list **out, size_t n)
{
	due_task_list *l = calloc(1, sizeof(*l));
	if (!l)
		return due__error_set(DUE_ENOMEM, "out of memory");
	if (n) {
		l->items = calloc(n, sizeof(*l->items));
		if (!l->items) {
			free(l);
			return due__error_set(DUE_ENOMEM, "out of memory");
		}
	}
	*out = l;
	return 0;
}

int due__attempts_append(due_task *t, const due_attempt *a)
{
	due_attempt *n = realloc(t->attempts, (t->n_attempts + 1) * sizeof(*n));
	if (!n)
		return due__error_set(DUE_ENOMEM, "out of memory");
	t->attempts = n;
	t->attempts[t->n_attempts++] = *a;
	return 0;
}

int due__cron_info_list_alloc(due_cron_info_list **out, size_t n)
{
	due_cron_info_list *l = calloc(1, sizeof(*l));
	if (!l)
		return due__error_set(DUE_ENOMEM, "out of memory");
	if (n && !(l->items = calloc(n, sizeof(*l->items)))) {
		free(l);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	*out = l;
	return 0;
}

int due__kind_info_list_alloc(due_kind_info_list **out, size_t n)
{
	due_kind_info_list *l = calloc(1, sizeof(*l));
	if (!l)
		return due__error_set(DUE_ENOMEM, "out of memory");
	if (n && !(l->items = calloc(n, sizeof(*l->items)))) {
		free(l);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	*out = l;
	return 0;
}

int due__kind_info_take_one(due_kind_info **out, due_kind_info_list *l,
			    const char *kind)
{
	int rc = 0;

	*out = NULL;
	if (l->count == 0)
		rc = due__store_no_kind(kind);
	else if (!(*out = malloc(sizeof(**out))))
		rc = due__error_set(DUE_ENOMEM, "out of memory");
	else
		**out = l->items[--l->count];
	due_kind_info_list_free(l);
	return rc;
}

bool due__flow_limited(const due__flow_kind *k)
{
	return !k->paused && (k->rate_n || k->max_running || k->per_group);
}

void due__flow_kinds_free(due__flow_kind *k, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(k[i].kind);
	free(k);
}

static int cmp_flow_kind(const void *key, const void *elem)
{
	return strcmp(key, ((const due__flow_kind *)elem)->kind);
}

const due__flow_kind *due__flow_kind_find(const due__flow_kind *k, size_t n,
					  const char *kind)
{
	return n ? bsearch(kind, k, n, sizeof(*k), cmp_flow_kind) : NULL;
}

int64_t due__flow_retry_us(const due__flow_kind *k, int held, due_time oldest,
			   due_time now)
{
	int64_t retry = 0;

	if (held & DUE__HELD_RATE) /* the oldest claim leaves the window */
		retry = (oldest ? oldest : now) + k->rate_us - now;
	if (held & (DUE__HELD_RUNNING | DUE__HELD_GROUP) &&
	    (!retry || retry > 100000))
		retry = 100000;
	return retry < 1000 ? 1000 : retry;
}

void due__groups_free(due__groups *g)
{
	for (size_t i = 0; i < g->n; i++)
		free(g->g[i].grp);
	free(g->g);
}

int64_t *due__group_slot(due__groups *g, const char *grp, size_t n)
{
	for (size_t i = 0; i < g->n; i++)
		if (strlen(g->g[i].grp) == n &&
		    memcmp(g->g[i].grp, grp, n) == 0)
			return &g->g[i].n;
	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 16;
		due__group_count *ng = realloc(g->g, cap * sizeof(*ng));
		if (!ng)
			return NULL;
		g->g = ng, g->cap = cap;
	}
	if (!(g->g[g->n].grp = due__strdup_n(grp, n)))
		return NULL;
	g->g[g->n].n = 0;
	return &g->g[g->n++].n;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The p-th percentile of the sorted v, nearest rank. */
static int64_t pct(const int64_t *v, size_t n, int p)
{
	size_t i = (n * (size_t)p + 99) / 100;
	return v[i ? i - 1 : 0];
}

void due__lateness_fill(due_stats *out, int64_t *v, size_t n)
{
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_i64);
	out->claims_window = (int64_t)n;
	out->lateness_p50_us = n ? pct(v, n, 50) : -1;
	out->lateness_p99_us = n ? pct(v, n, 99) : -1;
	out->lateness_max_us = n ? v[n - 1] : -1;
}

void due__bound_format(char *buf, size_t n, int64_t timeout_us)
{
	/* whole seconds read as "10 s"; another bound as the duration, to
	   the millisecond ("1s500ms"; a worker's lease/3 may be 3333333 us) */
	if (timeout_us % 1000000 == 0)
		snprintf(buf, n, "%lld s", (long long)(timeout_us / 1000000));
	else
		due_duration_format(buf, n, (timeout_us + 500) / 1000 * 1000);
}

int due__store_no_answer(const char *where, int64_t timeout_us)
{
	char dur[48];

	due__bound_format(dur, sizeof(dur), timeout_us);
	return due__error_set(
	    DUE_ESTORE, "no answer from the store at %s in %s", where, dur);
}

size_t due__payload_over(const due_submit *items, size_t n, size_t max)
{
	size_t i = 0;

	while (i < n && items[i].payload_len <= max)
		i++;
	return i;
}

int due__store_payload_too_big(const char *store, size_t item, size_t n,
			       size_t len, size_t max, const char *fmt, ...)
{
	char why[512], at[32] = "";
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (n > 1)
		snprintf(at, sizeof(at), "item %zu: ", item + 1);
	return due__error_set(DUE_ETOOBIG,
			      "%s: %spayload is %zu bytes, over the %zu bytes "
			      "%s",
			      store, at, len, max, why);
}
