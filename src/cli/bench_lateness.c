/*
** bench_lateness.c - the discovery workloads of `due bench`:
**   lateness  n tasks spread over --spread, --workers workers waiting:
**             claim - due percentiles and early claims; with --exec CMD
**             or --pipe CMD the same through a command or pipe handler
**             (2 workers x 2 slots, 500 tasks due at random: the load
**             at which issue 36 found commands claimed late)
**   idle      --workers workers, no tasks, --idle seconds: store queries/s
**             (due's own count; where the store's server counts commands
**             itself, also its count over the same window: Redis' INFO
**             commandstats, MySQL's SHOW GLOBAL STATUS Questions and Com_*)
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"

/*
** Run `count` tasks due now through the workers and wait until they are
** committed (at most 60 s): a pipe handler's processes start then.  0 or
** -1.
*/
static int warm_up(vctx *v, wthread *ws, long workers, long count)
{
	double t0 = v_now_ms();

	if (!bench_fill(v, count, 0, count))
		return -1;
	while (bench_ended_tries(ws, workers) < count) {
		if (v_stopped())
			return -1;
		if (v_now_ms() - t0 > 60000) {
			fprintf(stderr,
				"due bench: warm-up: %ld of %ld tasks run in "
				"60 s\n",
				bench_ended_tries(ws, workers), count);
			return -1;
		}
		v_sleep_ms(10);
	}
	return 0;
}

/*
** The first try's claim - due of each of the run's tasks (ids from
** first; warm-up tasks before it are left out), from the store's
** attempts after the run, into r's percentiles.  k: how many.
*/
static size_t lateness_read(vctx *v, due_id first, double *late, long n,
			    bres *r)
{
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	size_t k = 0;

	lo.limit = 10000;
	lo.attempts = true;
	for (due_id after = 0;; after = l->items[l->count - 1].id) {
		due_task_list_free(l);
		l = NULL;
		lo.after = after;
		if (due_list(v->db, &l, &lo) < 0 || l->count == 0)
			break;
		for (size_t i = 0; i < l->count; i++) {
			const due_task *t = &l->items[i];
			if (t->n_attempts == 0 || k >= (size_t)n ||
			    t->id < first) /* a warm-up task */
				continue;
			double ms =
			    (double)(t->attempts[0].claimed_at - t->due_at) /
			    1000.0;
			r->early += ms < 0;
			late[k++] = ms;
		}
	}
	due_task_list_free(l);
	qsort(late, k, sizeof(*late), bench_cmp_double);
	if (k) {
		r->p50 = late[(k - 1) * 50 / 100];
		r->p90 = late[(k - 1) * 90 / 100];
		r->p99 = late[(k - 1) * 99 / 100];
		r->max = late[k - 1];
	}
	return k;
}

/*
** Start the workers, warm a pipe handler's slots up, submit the n tasks
** and wait until they ran (at most 60 s past the spread), then stop the
** workers.  r->seconds: from the submit on.  d->first: the first id.
** 0, or -1 when the workers did not start (nothing to report).
*/
static int lateness_run(vctx *v, const bopts *o, drain_ctx *d, bres *r,
			long workers, long conc)
{
	bool cmd = o->exec || o->pipe;
	bench_crew c;
	long n = d->n;

	if (bench_crew_start(v, o, &c, workers, conc, false, d) < 0)
		return -1;
	/* a pipe handler starts its processes at its slots' first tasks: one
	   task per slot first (not measured), so that the figures are the
	   steady state's, not an interpreter's start */
	long warm = o->pipe ? workers * conc : 0;
	double t0 = v_now_ms(); /* set again after the warm-up */
	if (warm && warm_up(v, c.ws, workers, warm) < 0)
		goto stop;
	t0 = v_now_ms();
	if (!(d->first =
		  bench_fill_ids(v, n, o->spread_us, cmd, o->batch, NULL)))
		goto stop;
	while ((cmd ? bench_ended_tries(c.ws, workers) - warm
		    : atomic_load(&d->handled)) < n &&
	       v_now_ms() - t0 < 60000 + (double)o->spread_us / 1000 &&
	       !v_stopped())
		v_sleep_ms(20);
stop:
	bench_crew_stop(&c, true);
	r->seconds = (v_now_ms() - t0) / 1000.0;
	return 0;
}

/*
** lateness: n tasks due over --spread, --workers workers waiting; claim -
** due of each task's first try, from the store's attempts.  With the C
** no-op (the default) 4 workers of 4 slots, tasks evenly spaced.  With
** --exec or --pipe (variants "exec", "pipe") the load of issue 36: 2
** workers of 2 slots, 500 tasks due at random, so a handler that holds
** its slot (or the worker) longer than it should shows as claims made
** late; --workers, --concurrency and --n change it.  A command handler
** counts no runs here: the workers' committed tries are counted instead.
** A pipe handler's slots each run one task first, not measured (warm_up).
*/
void w_lateness(vctx *v, const bopts *o)
{
	bool cmd = o->exec || o->pipe;
	long n = o->n_set ? o->n
		 : cmd	  ? 500
			  : 2000,
	     workers = o->workers_set ? o->workers
		       : cmd	      ? 2
				      : 4,
	     conc = !cmd		 ? 4
		    : o->concurrency_set ? o->concurrency
					 : 2;
	drain_ctx d = {.n = n};
	bres r = {.workload = "lateness",
		  .variant = o->exec	   ? "exec"
			     : o->pipe	   ? "pipe"
			     : o->no_wheel ? "poll"
					   : "wheel",
		  .n = n,
		  .concurrency = workers * (cmd ? conc : 1),
		  .has_late = true};
	double *late = calloc((size_t)n, sizeof(*late));
	size_t k;

	d.counts = calloc((size_t)n, sizeof(*d.counts));
	if (late && d.counts &&
	    lateness_run(v, o, &d, &r, workers, conc) == 0 && !v_stopped()) {
		k = lateness_read(v, d.first, late, n, &r);
		r.tasks_per_s = (double)k / r.seconds;
		bench_report(o, &r);
	}
	free(late);
	free(d.counts);
}

/*
** The moves of the server's QUERY counters from k0 to k1 (those that
** moved), and their total into *total: the move of its QUERIES counter
** where the server counts every command itself, else their sum.
*/
static json_t *server_diff(const due_counters *k0, const due_counters *k1,
			   long long *total)
{
	json_t *d = json_object();
	long long sum = 0, all = -1;

	for (size_t i = 0; i < k1->n; i++) {
		const due_counter *c = &k1->c[i];
		double before = 0;
		for (size_t j = 0; j < k0->n; j++)
			if (strcmp(k0->c[j].name, c->name) == 0)
				before = k0->c[j].value;
		long long x = (long long)(c->value - before);
		if (c->kind == DUE_COUNTER_QUERIES)
			all = x;
		if (c->kind != DUE_COUNTER_QUERY || x <= 0)
			continue;
		json_object_set_new(d, c->name, json_integer(x));
		sum += x;
	}
	*total = all >= 0 ? all : sum;
	return d;
}

/* The claim, reclaim and refill queries of the workers since s0. */
static long long idle_queries(wthread *ws, long workers,
			      const due_worker_stats *s0)
{
	long long q = 0;

	for (long i = 0; i < workers && i < 64; i++) {
		due_worker_stats s1;
		due_worker_stats_get(ws[i].w, &s1);
		q += s1.claim_queries - s0[i].claim_queries +
		     s1.reclaim_queries - s0[i].reclaim_queries + s1.refills -
		     s0[i].refills;
	}
	return q;
}

void w_idle(vctx *v, const bopts *o)
{
	long workers = o->workers_set ? o->workers : 4;
	bres r = {.workload = "idle",
		  .variant = o->no_wheel ? "poll" : "wheel",
		  .n = 0,
		  .concurrency = workers,
		  .has_idle = true};
	wthread *ws = calloc((size_t)workers, sizeof(*ws));
	drain_ctx d = {0};
	due_worker_stats s0[64] = {0};
	due_counters k0 = {0}, k1 = {0};
	/* the server's own count over the same window, on a session opened
	   before the workers (its handshake is outside) */
	bool counted = bench_server(v, DUE_COUNTER_QUERY, true) != NULL;

	if (!ws || bench_start_workers(v, o, ws, workers, 4, false, bench_noop,
				       &d, NULL) < 0)
		goto out;
	/* connect, first claim; the server's count starts once every worker
	   has opened (scripts loaded, settings read, registered), or after
	   --warmup (6 s leaves the first prune check out: a steady state) */
	v_sleep_ms(o->warmup_set ? (int)(o->warmup_us / 1000)
		   : counted	 ? 1500
				 : 300);
	for (long i = 0; i < workers && i < 64; i++)
		due_worker_stats_get(ws[i].w, &s0[i]);
	counted = counted && bench_server_read(v, &k0) == 0;
	double c0 = bench_cpu_seconds(), t0 = v_now_ms();
	v_sleep_ms((int)(o->idle_us / 1000));
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.cpu_s = bench_cpu_seconds() - c0;
	if (counted && bench_server_read(v, &k1) == 0)
		r.server_detail = server_diff(&k0, &k1, &r.server_queries);
	long long q = idle_queries(ws, workers, s0);
	bench_stop_workers(ws, workers, true);
	r.queries_per_s = (double)q / r.seconds / (double)workers;
	bench_report(o, &r);
out:
	free(ws);
	json_decref(r.server_detail);
	due__counters_clear(&k0);
	due__counters_clear(&k1);
}
