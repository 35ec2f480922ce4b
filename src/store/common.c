/*
** common.c - small helpers shared by the store backends: allocation, and
** the verdict on a schema version.
*/
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "store/store.h"

char *due_strdup_n(const char *s, size_t n)
{
	char *p = malloc(n + 1);
	if (!p)
		return NULL;
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

int due_schema_verdict(const char *store, int v, const char *where)
{
	if (v < 0)
		return due_error_set(DUE_ESCHEMA,
			"store '%s' has no due schema%s: run `due init`", store,
			where);
	if (v < DUE_SCHEMA_VERSION)
		return due_error_set(DUE_ESCHEMA,
			"store '%s' has schema version %d, older than %d: run "
			"`due init` to upgrade", store, v, DUE_SCHEMA_VERSION);
	if (v > DUE_SCHEMA_VERSION)
		return due_error_set(DUE_ESCHEMA,
			"store '%s' has schema version %d, newer than this due "
			"(%d): upgrade due", store, v, DUE_SCHEMA_VERSION);
	return 0;
}

int due_task_list_alloc(due_task_list **out, size_t n)
{
	due_task_list *l = calloc(1, sizeof(*l));
	if (!l)
		return due_error_set(DUE_ENOMEM, "out of memory");
	if (n) {
		l->items = calloc(n, sizeof(*l->items));
		if (!l->items) {
			free(l);
			return due_error_set(DUE_ENOMEM, "out of memory");
		}
	}
	*out = l;
	return 0;
}

int due_attempts_append(due_task *t, const due_attempt *a)
{
	due_attempt *n = realloc(t->attempts, (t->n_attempts + 1) * sizeof(*n));
	if (!n)
		return due_error_set(DUE_ENOMEM, "out of memory");
	t->attempts = n;
	t->attempts[t->n_attempts++] = *a;
	return 0;
}

int due_schedule_list_alloc(due_schedule_list **out, size_t n)
{
	due_schedule_list *l = calloc(1, sizeof(*l));
	if (!l)
		return due_error_set(DUE_ENOMEM, "out of memory");
	if (n && !(l->items = calloc(n, sizeof(*l->items)))) {
		free(l);
		return due_error_set(DUE_ENOMEM, "out of memory");
	}
	*out = l;
	return 0;
}

void due_schedule_info_clear(due_schedule_info *i)
{
	free(i->name);
	free(i->expr);
	free(i->kind);
	free(i->tz);
	free(i->payload);
	memset(i, 0, sizeof(*i));
}

void due_schedule_list_free(due_schedule_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->count; i++)
		due_schedule_info_clear(&l->items[i]);
	free(l->items);
	free(l);
}

const char *const due_outcome_names[DUE_OUT_COUNT] = {
	"RUNNING", "DONE", "FAILED", "LEASE_EXPIRED", "CANCELLED", "REQUEUED",
	"KILLED", "REJECTED_STALE"};

const char *due_outcome_name(due_outcome o)
{
	return (unsigned)o < DUE_OUT_COUNT ? due_outcome_names[o] : "UNKNOWN";
}

const double due_hist_bounds_ms[DUE_HIST_N] = {
	1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000};

void due_metrics_free(due_metrics *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_kinds; i++)
		free(m->kinds[i].kind);
	free(m->kinds);
	free(m);
}
