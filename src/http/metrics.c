/*
** metrics.c - GET /metrics: the store's numbers in the Prometheus text
** exposition format (version 0.0.4).
**
** Everything comes from one due_metrics_get() call, so every worker's
** work is seen, not only this process's, and that call never scans the
** whole task table.  Its histograms and attempt outcomes cover the tries
** claimed in the last due_metrics.window_us (15 minutes; the HELP text
** says the window): they are sliding-window figures, so they drop as
** tries leave the window, which Prometheus sees as a counter reset.
** Worker counters, due_tasks_pruned_total included, are sums over the
** workers that reported in the last 5 minutes, so a worker that goes away
** also looks like a reset.
**
** The task counts of SCHEDULED, DONE and CANCELLED (by state and by kind)
** may be the store's estimate once they are large.  Which ones are is a
** family of its own, 0/1 per state (due_task_count_estimated for
** due_tasks_by_state, due_task_count_by_kind_estimated for due_tasks),
** not a label on the counts: a label that flips as a count crosses the
** store's threshold would end one series and start another.
**
** Format rules kept here: one HELP and one TYPE line per family, before
** its samples; label values escaped (\\, \", \n); histogram buckets
** cumulative with le="+Inf" equal to _count; names prefixed due_; the
** names of existing families never change (scripts rely on them).
**
** Flow control (docs/internals/flow.md) adds, per kind with settings
** (due_kind_list(), read after the metrics): due_kind_paused,
** due_kind_running, due_kind_max_running (kinds with that limit),
** due_kind_rate_limit and due_kind_rate_used (kinds with a rate), and the
** counter due_kind_held_total{reason="rate|max_running|group"}.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt/fmt.h"
#include "http/internal.h"

/*
** Write s as a label value: backslash, quote and newline escaped, and
** each byte that is not UTF-8 (a kind a store held before the rule) as
** U+FFFD: the text format must be UTF-8, and one bad label would fail
** the whole scrape.
*/
static void label(FILE *f, const char *s)
{
	size_t n = strlen(s), len;

	for (size_t i = 0; i < n; i += len) {
		len = due__fmt_utf8_len((const unsigned char *)s + i, n - i);
		if (len == 0) {
			fputs("\xef\xbf\xbd", f);
			len = 1;
		} else if (s[i] == '\\')
			fputs("\\\\", f);
		else if (s[i] == '"')
			fputs("\\\"", f);
		else if (s[i] == '\n')
			fputs("\\n", f);
		else
			fwrite(s + i, 1, len, f);
	}
}

static void family(FILE *f, const char *name, const char *type,
		   const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(FILE *f, const char *name, const char *help, int64_t v)
{
	family(f, name, "gauge", help);
	fprintf(f, "%s %lld\n", name, (long long)v);
}

static void counter(FILE *f, const char *name, const char *help, int64_t v)
{
	family(f, name, "counter", help);
	fprintf(f, "%s %lld\n", name, (long long)v);
}

/* A histogram in seconds from one in milliseconds (per-bucket counts). */
static void histogram(FILE *f, const char *name, const char *help,
		      const due_histogram *h)
{
	int64_t cum = 0;

	family(f, name, "histogram", help);
	for (int i = 0; i < DUE_HIST_N; i++) {
		cum += h->buckets[i];
		fprintf(f, "%s_bucket{le=\"%g\"} %lld\n", name,
			due_hist_bounds_ms[i] / 1000.0, (long long)cum);
	}
	cum += h->buckets[DUE_HIST_N];
	fprintf(f, "%s_bucket{le=\"+Inf\"} %lld\n", name, (long long)cum);
	fprintf(f, "%s_sum %.6f\n", name, h->sum_ms / 1000.0);
	fprintf(f, "%s_count %lld\n", name, (long long)cum);
}

static const char *const state_label[DUE_STATE_COUNT] = {
    "scheduled", "claimed", "done", "cancelled", "dead"};

/* name{state="..."} 0|1 for each state: 1 when its count is an estimate. */
static void estimated(FILE *f, const char *name, const char *help,
		      uint32_t bits)
{
	family(f, name, "gauge", help);
	for (int s = 0; s < DUE_STATE_COUNT; s++)
		fprintf(f, "%s{state=\"%s\"} %d\n", name, state_label[s],
			(bits & (1u << s)) ? 1 : 0);
}

static void tasks(FILE *f, const due_metrics *m)
{
	family(
	    f, "due_tasks", "gauge",
	    "Tasks in the store by kind and state (scheduled, done and "
	    "cancelled may be estimates: due_task_count_by_kind_estimated).");
	for (size_t k = 0; k < m->n_kinds; k++)
		for (int s = 0; s < DUE_STATE_COUNT; s++) {
			fputs("due_tasks{kind=\"", f);
			label(f, m->kinds[k].kind);
			fprintf(f, "\",state=\"%s\"} %lld\n", state_label[s],
				(long long)m->kinds[k].counts[s]);
		}
	family(f, "due_tasks_by_state", "gauge",
	       "Tasks in the store by state (claimed and dead exact; "
	       "scheduled, done and cancelled may be estimates: "
	       "due_task_count_estimated).");
	for (int s = 0; s < DUE_STATE_COUNT; s++)
		fprintf(f, "due_tasks_by_state{state=\"%s\"} %lld\n",
			state_label[s], (long long)m->stats.counts[s]);
	estimated(f, "due_task_count_estimated",
		  "1 when due_tasks_by_state of this state is the store's "
		  "estimate, 0 when it is exact.",
		  m->stats.estimated);
	estimated(f, "due_task_count_by_kind_estimated",
		  "1 when the due_tasks counts of this state are the store's "
		  "estimates, 0 when they are exact.",
		  m->kinds_estimated);
}

/*
** "the tries claimed in the last 15 minutes", from the store's window;
** a store without one (window_us 0) reads its whole attempts history.
*/
static void window_text(char *buf, size_t n, int64_t window_us)
{
	int64_t s = window_us / 1000000;

	if (window_us <= 0)
		snprintf(buf, n, "every try in the attempts history kept");
	else if (s % 60 == 0)
		snprintf(buf, n, "the tries claimed in the last %lld minutes",
			 (long long)(s / 60));
	else
		snprintf(buf, n, "the tries claimed in the last %lld s",
			 (long long)s);
}

/* Outcome names as labels; RUNNING is a gauge of its own. */
static const char *const outcome_label[DUE_OUT_COUNT] = {
    [DUE_OUT_DONE] = "done",
    [DUE_OUT_FAILED] = "failed",
    [DUE_OUT_LEASE_EXPIRED] = "lease_lost",
    [DUE_OUT_CANCELLED] = "cancelled",
    [DUE_OUT_REQUEUED] = "requeued",
    [DUE_OUT_KILLED] = "killed",
    [DUE_OUT_TIMED_OUT] = "timed_out",
    [DUE_OUT_REJECTED_STALE] = "rejected_stale"};

static void attempts(FILE *f, const due_metrics *m, const char *window)
{
	char help[256];

	snprintf(help, sizeof(help),
		 "Ended tries by outcome, over %s (rejected_stale counts late "
		 "commits refused by fencing).",
		 window);
	family(f, "due_attempts_total", "counter", help);
	for (int i = 0; i < DUE_OUT_COUNT; i++)
		if (outcome_label[i])
			fprintf(f, "due_attempts_total{outcome=\"%s\"} %lld\n",
				outcome_label[i], (long long)m->outcomes[i]);
	gauge(f, "due_attempts_running", "Tries running now (CLAIMED).",
	      m->outcomes[DUE_OUT_RUNNING]);
}

/* One sample of a per-kind family: name{kind="..."[,extra]} v. */
static void kind_sample(FILE *f, const char *name, const char *kind,
			const char *extra, int64_t v)
{
	fprintf(f, "%s{kind=\"", name);
	label(f, kind);
	fprintf(f, "\"%s%s} %lld\n", extra ? "," : "", extra ? extra : "",
		(long long)v);
}

/*
** The flow-control families, one sample per kind with settings; the
** limits only for the kinds that have them.  A family no kind has is
** left out (HELP and TYPE included).
*/
static void kinds(FILE *f, const due_kind_info_list *l)
{
	size_t n_max = 0, n_rate = 0;

	if (!l->count)
		return;
	for (size_t i = 0; i < l->count; i++) {
		n_max += l->items[i].max_running > 0;
		n_rate += l->items[i].rate_n > 0;
	}
	family(f, "due_kind_paused", "gauge",
	       "1 when the kind is paused (no task of it is claimed).");
	for (size_t i = 0; i < l->count; i++)
		kind_sample(f, "due_kind_paused", l->items[i].kind, NULL,
			    l->items[i].paused);
	family(f, "due_kind_running", "gauge",
	       "Tries of the kind holding a live lease.");
	for (size_t i = 0; i < l->count; i++)
		kind_sample(f, "due_kind_running", l->items[i].kind, NULL,
			    l->items[i].running);
	if (n_max) {
		family(f, "due_kind_max_running", "gauge",
		       "The kind's limit of running tries across workers.");
		for (size_t i = 0; i < l->count; i++)
			if (l->items[i].max_running > 0)
				kind_sample(f, "due_kind_max_running",
					    l->items[i].kind, NULL,
					    l->items[i].max_running);
	}
	if (n_rate) {
		family(f, "due_kind_rate_limit", "gauge",
		       "Claims of the kind allowed per rate window.");
		for (size_t i = 0; i < l->count; i++)
			if (l->items[i].rate_n > 0)
				kind_sample(f, "due_kind_rate_limit",
					    l->items[i].kind, NULL,
					    l->items[i].rate_n);
		family(f, "due_kind_rate_used", "gauge",
		       "Claims of the kind in the current rate window.");
		for (size_t i = 0; i < l->count; i++)
			if (l->items[i].rate_n > 0)
				kind_sample(f, "due_kind_rate_used",
					    l->items[i].kind, NULL,
					    l->items[i].rate_used);
	}
	family(f, "due_kind_held_total", "counter",
	       "Claim passes that left due tasks of the kind because of its "
	       "rate, max_running or per-group limit.");
	for (size_t i = 0; i < l->count; i++) {
		const due_kind_info *k = &l->items[i];
		kind_sample(f, "due_kind_held_total", k->kind,
			    "reason=\"rate\"", k->held_rate);
		kind_sample(f, "due_kind_held_total", k->kind,
			    "reason=\"max_running\"", k->held_running);
		kind_sample(f, "due_kind_held_total", k->kind,
			    "reason=\"group\"", k->held_group);
	}
}

/* The whole exposition, malloc'd into *out; -1 on ENOMEM. */
static int render(const due_metrics *m, const due_kind_info_list *kl,
		  const char *backend, char **out, size_t *len)
{
	FILE *f = open_memstream(out, len);
	char window[96], help[192];

	if (!f)
		return -1;
	window_text(window, sizeof(window), m->window_us);
	family(f, "due_build_info", "gauge",
	       "Version of due and its store backend.");
	fprintf(f, "due_build_info{version=\"%s\",backend=\"", DUE_VERSION);
	label(f, backend);
	fputs("\"} 1\n", f);
	tasks(f, m);
	gauge(f, "due_dead_letters",
	      "DEAD tasks waiting for an operator "
	      "(health is DOWN while this is above 0).",
	      m->stats.dead);
	gauge(f, "due_due_unclaimed_tasks",
	      "SCHEDULED tasks already due, not yet "
	      "claimed.",
	      m->stats.due_unclaimed);
	family(f, "due_oldest_due_unclaimed_seconds", "gauge",
	       "Age of the oldest due but unclaimed task (0 when none).");
	fprintf(f, "due_oldest_due_unclaimed_seconds %.3f\n",
		(double)m->stats.oldest_due_unclaimed_ms / 1000.0);
	snprintf(help, sizeof(help),
		 "Lateness of claims (claimed_at - due_at) of %s.", window);
	histogram(f, "due_lateness_seconds", help, &m->lateness);
	snprintf(help, sizeof(help),
		 "Duration of ended tries (ended_at - claimed_at) of %s.",
		 window);
	histogram(f, "due_handler_duration_seconds", help, &m->duration);
	attempts(f, m, window);
	counter(f, "due_worker_claim_queries_total",
		"Claim queries by workers "
		"seen in the last 5 minutes.",
		m->claim_queries);
	counter(f, "due_worker_empty_polls_total",
		"Claim queries that found "
		"nothing, by workers seen in the last 5 minutes.",
		m->empty_claims);
	counter(f, "due_worker_reclaim_queries_total",
		"Expired-lease reclaim "
		"queries by workers seen in the last 5 minutes.",
		m->reclaim_queries);
	counter(f, "due_worker_store_errors_total",
		"Store errors met by workers "
		"seen in the last 5 minutes.",
		m->store_errors);
	counter(f, "due_worker_leases_lost_total",
		"Tries whose handler was stopped because its lease was lost or "
		"not confirmed in time (the lease clock), by workers seen in "
		"the last 5 minutes.",
		m->lease_lost);
	counter(f, "due_tasks_pruned_total",
		"DONE and CANCELLED tasks deleted by retention (due work "
		"--retain): the sum of the counters of the workers seen in the "
		"last 5 minutes.",
		m->pruned);
	gauge(f, "due_workers", "Workers that reported in the last 5 minutes.",
	      m->workers);
	gauge(f, "due_schedules", "Periodic schedules (due cron).",
	      (int64_t)m->n_schedules);
	kinds(f, kl);
	return fclose(f) == 0 ? 0 : -1;
}

int route_metrics_prom(http_req *r)
{
	due_kind_info_list *kl = NULL;
	due_metrics *m = NULL;
	char *text = NULL;
	size_t len = 0;
	due_db *db;
	int rc;

	if ((rc = http_db(r, &db)) < 0 || (rc = due_metrics_get(db, &m)) < 0 ||
	    (rc = due_kind_list(db, &kl)) < 0) {
		due_metrics_free(m);
		return http_reply_due(r, rc);
	}
	rc = render(m, kl, due_db_backend(db), &text, &len);
	due_kind_info_list_free(kl);
	due_metrics_free(m);
	if (rc < 0) {
		free(text);
		return http_reply_error(r, 500, "internal", "out of memory");
	}
	return http_reply_take(
	    r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
