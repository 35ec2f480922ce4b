/*
** stats.c - `due stats --json` and GET /v1/stats: the store's counts and
** lateness, the live workers' counters, the number of schedules and the
** kinds with settings (kind.c renders each kind).  The shape is fixed by
** INTERFACE.md; a lateness figure the store has none for is null.
*/
#include "fmt/fmt.h"

static json_t *ms_or_null(int64_t us)
{
	return us < 0 ? json_null() : json_real((double)us / 1000.0);
}

json_t *due__fmt_stats(const due_stats *s)
{
	json_t *o = json_object(), *counts = json_object(),
	       *late = json_object();

	for (int i = 0; i < DUE_STATE_COUNT; i++)
		json_object_set_new(counts, due_state_name((due_state)i),
				    json_integer(s->counts[i]));
	json_object_set_new(o, "counts", counts);
	json_object_set_new(o, "dead", json_integer(s->dead));
	json_object_set_new(o, "due_unclaimed", json_integer(s->due_unclaimed));
	json_object_set_new(o, "oldest_due_unclaimed_ms",
			    json_integer(s->oldest_due_unclaimed_ms));
	json_object_set_new(late, "window_s",
			    json_integer(s->window_us / 1000000));
	json_object_set_new(late, "claims", json_integer(s->claims_window));
	json_object_set_new(late, "p50_ms", ms_or_null(s->lateness_p50_us));
	json_object_set_new(late, "p99_ms", ms_or_null(s->lateness_p99_us));
	json_object_set_new(late, "max_ms", ms_or_null(s->lateness_max_us));
	json_object_set_new(o, "lateness", late);
	json_object_set_new(o, "now", due__fmt_time(s->now));
	json_object_set_new(o, "estimated", due__fmt_estimated(s->estimated));
	return o;
}

json_t *due__fmt_estimated(uint32_t bits)
{
	json_t *a = json_array();

	for (int i = 0; i < DUE_STATE_COUNT; i++)
		if (bits & (1u << i))
			json_array_append_new(
			    a, json_string(due_state_name((due_state)i)));
	return a;
}

json_t *due__fmt_stats_report(const due_metrics *m,
			      const due_kind_info_list *kinds)
{
	json_t *o = due__fmt_stats(&m->stats), *wk = json_object();

	json_object_set_new(wk, "reporting", json_integer(m->workers));
	json_object_set_new(wk, "claim_queries",
			    json_integer(m->claim_queries));
	json_object_set_new(wk, "empty_polls", json_integer(m->empty_claims));
	json_object_set_new(wk, "reclaim_checks",
			    json_integer(m->reclaim_queries));
	json_object_set_new(wk, "store_errors", json_integer(m->store_errors));
	json_object_set_new(wk, "lease_lost", json_integer(m->lease_lost));
	json_object_set_new(wk, "pruned", json_integer(m->pruned));
	json_object_set_new(o, "workers", wk);
	json_object_set_new(o, "schedules",
			    json_integer((json_int_t)m->n_schedules));
	json_object_set_new(o, "kinds", due__fmt_kind_list(kinds));
	return o;
}
