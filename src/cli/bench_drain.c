/*
** bench_drain.c - the throughput workloads of `due bench`:
**   enqueue   n tasks due now, ~100-byte payload: one commit each, then
**             in batches of --batch
**   cycle     one thread: claim 1 -> complete 1, through the C API
**   drain     n due tasks, C no-op handler (or --exec CMD, or a pipe
**             handler with --pipe CMD), --concurrency; tasks/s from
**             worker start to last completion; every task must run
**             exactly once (duplicates are reported; with --exec or
**             --pipe read from the store afterwards: DONE at attempt 1);
**             with --pending N the store first holds N tasks due in a
**             day (filled in batches, not timed): the drain among them
** Each says cpu_us_per_task and the store work of its measured phase.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"

/*
** drain --pending: n tasks due in a day, of the drain's own kind (the
** claim must step over none of them: they are not due), a small payload, in
** batches of --batch; progress on stderr every 5 s (a big fill takes
** minutes).  Adds pending_fill_s, pending_per_s and the store's bytes
** before and after to `extra`; returns 0 or -1.
*/
static int fill_pending(vctx *v, const bopts *o, json_t *extra)
{
	static const char payload[] = "{\"user\":123456,\"remind\":true}";
	due_submit *items = calloc((size_t)o->batch, sizeof(*items));
	due_submitted *out = calloc((size_t)o->batch, sizeof(*out));
	int rc = items && out ? 0 : -1;
	json_t *b0 = bench_store_bytes(v);
	double t0 = v_now_ms(), last = t0;

	for (long done = 0; rc == 0 && done < o->pending;) {
		if (v_stopped()) {
			rc = -1;
			break;
		}
		long k =
		    o->pending - done < o->batch ? o->pending - done : o->batch;
		for (long i = 0; i < k; i++) {
			items[i] =
			    (due_submit){"bench", payload, sizeof(payload) - 1,
					 DUE_SCHEDULE_OPTS_INIT};
			items[i].opts.delay_us = 24LL * 3600 * 1000000;
		}
		if (due_schedule_batch(v->db, out, items, (size_t)k) < 0) {
			fprintf(stderr, "due bench: pending: %s\n",
				due_error_last());
			rc = -1;
		}
		done += k;
		if (v_now_ms() - last >= 5000) {
			last = v_now_ms();
			fprintf(stderr, "  pending: %ld/%ld added, %.0f/s\n",
				done, o->pending,
				(double)done * 1000.0 / (last - t0));
		}
	}
	double secs = (v_now_ms() - t0) / 1000.0;
	json_t *b1 = bench_store_bytes(v);
	json_object_set_new(extra, "pending_fill_s", json_real(secs));
	json_object_set_new(
	    extra, "pending_per_s",
	    json_real(secs > 0 ? (double)o->pending / secs : 0));
	json_object_set_new(extra, "bytes_before_pending", b0);
	json_object_set_new(extra, "bytes_after_pending", b1);
	if (json_is_integer(b0) && json_is_integer(b1))
		json_object_set_new(extra, "bytes_per_pending_task",
				    json_real((double)(json_integer_value(b1) -
						       json_integer_value(b0)) /
					      (double)o->pending));
	free(items);
	free(out);
	return rc;
}

void w_enqueue(vctx *v, const bopts *o)
{
	static const char payload[] =
	    "{\"order\":123456,\"customer\":\"c-42\","
	    "\"note\":\"close this unpaid order in 30m\"}....";
	bres r = {.workload = "enqueue",
		  .variant = "single",
		  .n = o->n,
		  .concurrency = 1};
	bwork w0 = bench_work_now(v);
	double t0 = v_now_ms(), c0 = bench_cpu_seconds();
	long n = o->n / 4 > 0 ? o->n / 4 : 1; /* one commit each: fewer */

	for (long i = 0; i < n && !v_stopped(); i++) {
		due_submitted s;
		if (due_schedule(v->db, &s, "bench", payload,
				 sizeof(payload) - 1, NULL) < 0) {
			fprintf(stderr, "due bench: %s\n", due_error_last());
			return;
		}
	}
	r.n = n;
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.tasks_per_s = (double)n / r.seconds;
	r.cpu_us_per_task = (bench_cpu_seconds() - c0) * 1e6 / (double)n;
	bench_work_per_task(v, &r, &w0, (double)n);
	bench_report(o, &r);
	r.variant = "batch";
	r.n = o->n;
	r.concurrency = o->batch;
	w0 = bench_work_now(v);
	t0 = v_now_ms();
	c0 = bench_cpu_seconds();
	if (!bench_fill(v, o->n, 0, o->batch))
		return;
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.tasks_per_s = (double)o->n / r.seconds;
	r.cpu_us_per_task = (bench_cpu_seconds() - c0) * 1e6 / (double)o->n;
	bench_work_per_task(v, &r, &w0, (double)o->n);
	bench_report(o, &r);
}

void w_cycle(vctx *v, const bopts *o)
{
	bres r = {.workload = "cycle",
		  .variant = "claim1+done1",
		  .n = o->n,
		  .concurrency = 1};
	long done = 0;

	if (!bench_fill(v, o->n, 0, o->batch))
		return;
	bwork w0 = bench_work_now(v);
	double t0 = v_now_ms(), c0 = bench_cpu_seconds();
	while (!v_stopped()) {
		due_task_list *l = NULL;
		due_complete_outcome co;
		if (due_claim(v->db, &l, "bench", NULL, 0, 1, 30000000) < 0)
			break;
		if (l->count == 0) {
			due_task_list_free(l);
			break;
		}
		if (due_complete(v->db, &co, l->items[0].id,
				 l->items[0].attempt, "", 0) == 0 &&
		    co == DUE_COMPLETE_DONE)
			done++;
		due_task_list_free(l);
	}
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.tasks_per_s = (double)done / r.seconds;
	if (done > 0)
		r.cpu_us_per_task =
		    (bench_cpu_seconds() - c0) * 1e6 / (double)done;
	bench_work_per_task(v, &r, &w0, (double)done);
	r.has_check = true;
	r.missing = o->n - done;
	bench_report(o, &r);
}

/* A command drain (--exec, --pipe) runs its handler in another process,
   so nothing here counts its runs: ask the store instead.  Every task of
   the run must be DONE at attempt 1; a task not DONE is missing, and
   every try beyond the first is a duplicate run.  Read after the clock
   stopped, in pages of 10000; returns 0 or -1. */
static int store_check(vctx *v, const drain_ctx *d, bres *r)
{
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	long seen = 0, n = d->n;
	bool past = false;

	lo.limit = 10000;
	lo.after = d->ids[0] - 1;
	r->duplicates = 0;
	for (;;) {
		due_task_list *l = NULL;
		if (due_list(v->db, &l, &lo) < 0) {
			fprintf(stderr, "due bench: check: %s\n",
				due_error_last());
			return -1;
		}
		size_t k = l->count;
		for (size_t i = 0; i < k; i++) {
			const due_task *t = &l->items[i];
			if (t->id > d->ids[n - 1]) {
				past = true;
				break;
			}
			lo.after = t->id;
			if (bench_id_index(d, t->id) < 0) /* another run's */
				continue;
			if (t->state == DUE_DONE)
				seen++;
			if (t->attempt > 1)
				r->duplicates += t->attempt - 1;
		}
		due_task_list_free(l);
		if (past || k < (size_t)lo.limit)
			break;
	}
	r->missing = n - seen;
	return 0;
}

/*
** Wait for a drain's workers: until n tasks ran (a command handler's are
** counted as the workers' committed tries) and every end is committed,
** or until all of them ended.  Progress once a second on stderr; the
** handler counter is free to read: the store is not asked (a query every
** few ms would compete with the workers).
*/
static void drain_wait(const bopts *o, wthread *ws, long workers, drain_ctx *d,
		       bool cmd)
{
	double last = v_now_ms();
	long last_n = 0;

	for (;;) {
		long n = cmd ? bench_ended_tries(ws, workers)
			     : atomic_load(&d->handled);
		double now = v_now_ms();
		if (!o->json && now - last >= 1000) {
			fprintf(stderr, "  drain: %ld/%ld run, %.0f tasks/s\n",
				n, o->n,
				(double)(n - last_n) * 1000.0 / (now - last));
			last = now;
			last_n = n;
		}
		if (n >= o->n || bench_all_ended(ws, workers) || v_stopped())
			break;
		v_sleep_ms(5);
	}
	/* the last commits: until every task's end is committed */
	while (bench_ended_tries(ws, workers) < o->n &&
	       !bench_all_ended(ws, workers) && !v_stopped())
		v_sleep_ms(1);
}

/* The C no-op's counts: every task of the run must have run once. */
static void drain_count(const drain_ctx *d, bres *r)
{
	for (long i = 0; i < d->n; i++) {
		int c = atomic_load(&d->counts[i]);
		if (c > 1)
			r->duplicates += c - 1;
		if (c == 0)
			r->missing++;
	}
}

/*
** Run the drain of d's tasks (already in the store) with `workers`
** workers of `conc` slots and measure it into r.  0, or -1 when the
** workers did not start.
*/
static int drain_run(vctx *v, const bopts *o, drain_ctx *d, bres *r,
		     long workers, long conc)
{
	bool cmd = o->exec || o->pipe; /* no in-process handled counter */
	bench_crew c;
	bwork w0 = bench_work_now(v);
	double t0 = v_now_ms(), c0 = bench_cpu_seconds();

	if (bench_crew_start(v, o, &c, workers, conc, true, d) < 0)
		return -1;
	drain_wait(o, c.ws, workers, d, cmd);
	r->seconds = (v_now_ms() - t0) / 1000.0;
	/* the workers' stop (their last report, closing) is not the drain */
	r->cpu_us_per_task = (bench_cpu_seconds() - c0) * 1e6 / (double)o->n;
	bench_work_per_task(v, r, &w0, (double)o->n);
	/* interrupted: stop them; else they end when nothing is left */
	r->claim_queries = bench_crew_stop(&c, v_stopped() != 0);
	r->tasks_per_s = (double)o->n / r->seconds;
	return 0;
}

void w_drain(vctx *v, const bopts *o)
{
	/* an inline worker runs one task at a time (CONTRACT §5: nothing
	   waits in memory holding a lease), so concurrency C inline is C
	   inline workers, each claiming and running one task at a time */
	long workers = o->workers_set	? o->workers
		       : o->inline_mode ? o->concurrency
					: 1;
	long conc = o->inline_mode ? 1 : o->concurrency;
	drain_ctx d = {.n = o->n};
	bres r = {.workload = "drain",
		  .variant = o->exec	      ? "exec"
			     : o->pipe	      ? "pipe"
			     : o->inline_mode ? "c-noop-inline"
					      : "c-noop",
		  .n = o->n,
		  .concurrency = conc * workers,
		  .has_check = true};

	r.extra = json_pack("{s:I}", "pending", (json_int_t)o->pending);
	d.counts = calloc((size_t)o->n, sizeof(*d.counts));
	d.ids = calloc((size_t)o->n, sizeof(*d.ids));
	if (!d.counts || !d.ids || !r.extra ||
	    (o->pending > 0 && fill_pending(v, o, r.extra) < 0) ||
	    !(d.first = bench_fill_ids(v, o->n, 0, false, o->batch, d.ids)) ||
	    drain_run(v, o, &d, &r, workers, conc) < 0 || v_stopped())
		goto done;
	if (!(o->exec || o->pipe))
		drain_count(&d, &r);
	else if (store_check(v, &d, &r) < 0)
		goto done;
	bench_report(o, &r);
done:
	json_decref(r.extra);
	free(d.ids);
	free(d.counts);
}
