/*
** results.c - how the results the library hands out are freed: a
** schedule list, a kind's info and a kind list, the metrics, and the
** bounds of the metrics' histograms.  The backends build these (through
** the allocators of src/store/common.c) and free them on their own error
** paths, the caller frees them when done: so they live here, below both,
** in the base.  Tasks and task lists are task.c's.  Each due_*_free takes
** NULL.
*/
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

void due__cron_info_clear(due_cron_info *i)
{
	free(i->name);
	free(i->expr);
	free(i->kind);
	free(i->tz);
	free(i->payload);
	memset(i, 0, sizeof(*i));
}

void due_cron_info_list_free(due_cron_info_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->count; i++)
		due__cron_info_clear(&l->items[i]);
	free(l->items);
	free(l);
}

void due__kind_info_clear(due_kind_info *k)
{
	free(k->kind);
	memset(k, 0, sizeof(*k));
}

void due_kind_info_free(due_kind_info *k)
{
	if (!k)
		return;
	due__kind_info_clear(k);
	free(k);
}

void due_kind_info_list_free(due_kind_info_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->count; i++)
		due__kind_info_clear(&l->items[i]);
	free(l->items);
	free(l);
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
