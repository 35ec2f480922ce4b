/*
** bench_after.c - `due bench --workload after`: what run-after costs.
**
**   chain   --n tasks (default 1,000), each added after the one before,
**           the first due now; one in-process worker (--concurrency
**           slots, C no-op handler) runs them.  A link is one task's end,
**           its child's release in that same commit, the child's claim:
**           so the chain's time is n times the store's round of
**           complete -> release -> wake -> claim.  Every task must run
**           once and no task before its parent ended ("early" counts
**           those).
**   fan-in  --n parents (at most 1,000, DUE_AFTER_MAX) due now and one
**           child after all of them; the worker drains the parents, the
**           last one's commit releases the child.  Reports the drain and
**           the child's release latency: its claim after the last
**           parent's end.
** Both also say what adding the tasks cost: the chain's one submit per
** task (each checks its parent), the fan-in child's one submit of n
** parents.  Each variant runs in a scratch store of its own (the
** command makes the chain's; the fan-in makes its own, as depth does).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"

#define HANG_MS 120000.0 /* guards against a hang; claims nothing */

/* A task of kind "bench" after the n ids; 0 on error (said). */
static due_id add_after(vctx *v, const due_id *after, size_t n)
{
	due_schedule_opts so = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s = {0};

	so.after = after;
	so.n_after = n;
	if (due_schedule(v->db, &s, "bench", "", 0, &so) < 0) {
		fprintf(stderr, "due bench: add after: %s\n", due_error_last());
		return 0;
	}
	return s.id;
}

/* The last end of task id's tries (0 when none), and its first claim. */
static void times_of(vctx *v, due_id id, due_time *ended, due_time *claimed)
{
	due_task *t = v_get(v, id);

	*ended = *claimed = 0;
	for (size_t i = 0; t && i < t->n_attempts; i++) {
		if (t->attempts[i].ended_at > *ended)
			*ended = t->attempts[i].ended_at;
		if (!*claimed || t->attempts[i].claimed_at < *claimed)
			*claimed = t->attempts[i].claimed_at;
	}
	due_task_free(t);
}

/* Run d's tasks with one worker until each ran (or a stop); seconds. */
static double run_all(vctx *v, const bopts *o, drain_ctx *d, bres *r)
{
	bench_crew c;
	double t0 = v_now_ms(), c0 = bench_cpu_seconds();

	if (bench_crew_start(v, o, &c, 1, o->concurrency, false, d) < 0)
		return -1;
	while (atomic_load(&d->handled) < d->n && !v_stopped() &&
	       v_now_ms() - t0 < HANG_MS)
		v_sleep_ms(1);
	r->seconds = (v_now_ms() - t0) / 1000.0;
	r->cpu_us_per_task = (bench_cpu_seconds() - c0) * 1e6 / (double)d->n;
	/* the last commit: until the last task is seen ended */
	for (double end = v_now_ms() + 10000; v_until(end); v_sleep_ms(2)) {
		due_task *t = v_get(v, d->last);
		bool done = t && t->state == DUE_DONE;
		due_task_free(t);
		if (done)
			break;
	}
	r->claim_queries = bench_crew_stop(&c, true);
	r->tasks_per_s = (double)d->n / r->seconds;
	return r->seconds;
}

static void count_runs(const drain_ctx *d, bres *r)
{
	for (long i = 0; i < d->n; i++) {
		int k = atomic_load(&d->counts[i]);
		r->duplicates += k > 1 ? k - 1 : 0;
		r->missing += k == 0;
	}
}

static void chain(vctx *v, const bopts *o, long n)
{
	drain_ctx d = {.n = n};
	bres r = {.workload = "after",
		  .variant = "chain",
		  .n = n,
		  .concurrency = o->concurrency,
		  .has_check = true};
	double t0, submit_ms;

	due_id *link = calloc((size_t)n, sizeof(*link)); /* chain order */
	d.counts = calloc((size_t)n, sizeof(*d.counts));
	d.ids = calloc((size_t)n, sizeof(*d.ids));
	if (!link || !d.counts || !d.ids)
		goto done;
	t0 = v_now_ms();
	/* the chain is added before any worker runs: each submit finds its
	   parent waiting; then the first is made due now */
	link[0] = v_add(v, "bench", 3600000000LL, 5, 0, NULL);
	for (long i = 1; i < n && link[i - 1] && !v_stopped(); i++)
		link[i] = add_after(v, &link[i - 1], 1);
	submit_ms = v_now_ms() - t0;
	if (!link[n - 1] || v_stopped())
		goto done;
	/* d counts runs by id (sorted: a sharded store's ids do not ascend
	   in the order they were made); its last is waited for */
	memcpy(d.ids, link, (size_t)n * sizeof(*d.ids));
	qsort(d.ids, (size_t)n, sizeof(*d.ids), bench_cmp_id);
	d.last = link[n - 1];
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT; /* now */
	due_reschedule_outcome out;
	if (due_reschedule(v->db, &out, link[0], &ro) < 0 ||
	    run_all(v, o, &d, &r) < 0 || v_stopped())
		goto done;
	count_runs(&d, &r);
	for (long i = 1; i < n; i++) {
		due_time pe, pc, ce, cc;
		times_of(v, link[i - 1], &pe, &pc);
		times_of(v, link[i], &ce, &cc);
		r.early += cc && cc < pe;
	}
	r.extra = json_pack(
	    "{s:f,s:f,s:I}", "ms_per_link", r.seconds * 1000.0 / (double)n,
	    "submit_us_per_task", submit_ms * 1000.0 / (double)n, "early",
	    (json_int_t)r.early);
	bench_report(o, &r);
done:
	json_decref(r.extra);
	free(link);
	free(d.ids);
	free(d.counts);
}

static void fan_in(vctx *v, const bopts *o, long n)
{
	drain_ctx d = {.n = n + 1};
	bres r = {.workload = "after",
		  .variant = "fan-in",
		  .n = n + 1,
		  .concurrency = o->concurrency,
		  .has_check = true};
	due_time last_end = 0, ce, cc;
	double t0, submit_ms;

	d.counts = calloc((size_t)n + 1, sizeof(*d.counts));
	d.ids = calloc((size_t)n + 1, sizeof(*d.ids));
	bench_done(v); /* a scratch store of its own (the command ends it) */
	if (!d.counts || !d.ids || bench_fresh(v, "after-fan-in") < 0 ||
	    !bench_fill_ids(v, n, 0, false, o->batch, d.ids))
		goto done;
	t0 = v_now_ms();
	due_id child = add_after(v, d.ids, (size_t)n);
	submit_ms = v_now_ms() - t0;
	d.ids[n] = d.last = child;
	qsort(d.ids, (size_t)n + 1, sizeof(*d.ids), bench_cmp_id);
	if (!child || run_all(v, o, &d, &r) < 0 || v_stopped())
		goto done;
	count_runs(&d, &r);
	for (long i = 0; i <= n; i++) {
		due_time e, c;
		if (d.ids[i] == child)
			continue;
		times_of(v, d.ids[i], &e, &c);
		if (e > last_end)
			last_end = e;
	}
	times_of(v, child, &ce, &cc);
	r.early = cc && cc < last_end;
	r.extra = json_pack("{s:f,s:f,s:I}", "child_release_ms",
			    cc ? (double)(cc - last_end) / 1000.0 : -1.0,
			    "child_submit_ms", submit_ms, "early",
			    (json_int_t)r.early);
	bench_report(o, &r);
done:
	json_decref(r.extra);
	free(d.ids);
	free(d.counts);
}

void w_after(vctx *v, const bopts *o)
{
	long n = o->n_set ? o->n : 1000;

	chain(v, o, n);
	if (!v_stopped())
		fan_in(v, o, n < DUE_AFTER_MAX ? n : DUE_AFTER_MAX);
}
