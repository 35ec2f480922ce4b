/*
** bench_depth.c - the workloads of `due bench` that fill big stores (not
** part of "all": asked for by name):
**   depth     claim latency (claim 1 -> complete 1, through the C API) with
**             1,000 tasks pending over 10 priorities, then with --n
**             (default 1,000,000): all due ("due"), and all but 1,000 due
**             in an hour, the due ones at the highest priority number
**             ("future", the worst case for a claim that scans the
**             priorities in order)
**   memory    where the store's server says the memory it holds (Redis'
**             INFO memory used_memory): that before and after --n
**             (default 100,000) pending tasks with a 16-byte payload, due
**             in an hour: bytes per pending task
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"

/* The server's BYTES counter (used_memory), or -1. */
static long long server_bytes(vctx *v)
{
	due_counters c = {0};
	long long n = -1;

	if (bench_server_read(v, &c) == 0)
		for (size_t i = 0; i < c.n; i++)
			if (c.c[i].kind == DUE_COUNTER_BYTES)
				n = (long long)c.c[i].value;
	due__counters_clear(&c);
	return n;
}

/*
** What a pending task costs in server memory: n tasks (default 100,000)
** with a 16-byte payload, due in an hour, in batches; the server's bytes
** before (the scratch store open, its scripts loaded) and after.
*/
void w_memory(vctx *v, const bopts *o)
{
	static const char payload[] = "0123456789abcdef";
	long n = o->n_set ? o->n : 100000;
	bres r = {.workload = "memory",
		  .variant = "pending-16B",
		  .n = n,
		  .concurrency = o->batch};
	due_submit *items = calloc((size_t)o->batch, sizeof(*items));
	due_submitted *out = calloc((size_t)o->batch, sizeof(*out));

	if (!items || !out || !bench_server(v, DUE_COUNTER_BYTES, true))
		goto done;
	r.bytes_before = server_bytes(v);
	double t0 = v_now_ms();
	for (long k, left = n; left > 0; left -= k) {
		if (v_stopped())
			goto done;
		k = left < o->batch ? left : o->batch;
		for (long i = 0; i < k; i++) {
			items[i] =
			    (due_submit){"bench", payload, sizeof(payload) - 1,
					 DUE_SCHEDULE_OPTS_INIT};
			items[i].opts.delay_us = 3600LL * 1000000;
		}
		if (due_schedule_batch(v->db, out, items, (size_t)k) < 0) {
			fprintf(stderr, "due bench: enqueue: %s\n",
				due_error_last());
			goto done;
		}
	}
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.tasks_per_s = (double)n / r.seconds;
	r.bytes_after = server_bytes(v);
	if (r.bytes_before < 0 || r.bytes_after < 0) {
		fprintf(stderr, "due bench: memory: the server's memory is "
				"unreadable\n");
		goto done;
	}
	r.bytes_per_task = (double)(r.bytes_after - r.bytes_before) / (double)n;
	bench_report(o, &r);
done:
	free(items);
	free(out);
}

/*
** Add n tasks over 10 priorities (-5..4, interleaved so that ids do not
** follow priority), due now, or with `future` due in an hour but for the
** last 1,000, which are due now at priority 4.
*/
static int fill_prio(vctx *v, long n, bool future)
{
	due_submit *items = calloc(1000, sizeof(*items));
	due_submitted *out = calloc(1000, sizeof(*out));
	int rc = items && out ? 0 : -1;

	for (long done = 0; rc == 0 && done < n;) {
		long k = n - done < 1000 ? n - done : 1000;
		if (v_stopped()) {
			rc = -1;
			break;
		}
		for (long i = 0; i < k; i++) {
			long j = done + i;
			items[i] = (due_submit){"bench", "{}", 2,
						DUE_SCHEDULE_OPTS_INIT};
			items[i].opts.priority = (int32_t)(j * 7 % 10) - 5;
			if (future && j < n - 1000)
				items[i].opts.delay_us = 3600LL * 1000000;
			else if (future)
				items[i].opts.priority = 4;
		}
		if ((rc = due_schedule_batch(v->db, out, items, (size_t)k)) < 0)
			fprintf(stderr, "due bench: enqueue: %s\n",
				due_error_last());
		done += k;
	}
	free(items);
	free(out);
	return rc;
}

/* 200 claim-1 + complete-1 cycles: p50/p99/max of the claim call in ms. */
static void depth_sample(vctx *v, const bopts *o, const char *variant,
			 long pending)
{
	enum { N = 200 };
	double ms[N];
	long k = 0;
	bres r = {.workload = "depth",
		  .variant = variant,
		  .n = pending,
		  .concurrency = 1,
		  .has_late = true};
	double t_all = v_now_ms();

	for (; k < N && !v_stopped(); k++) {
		due_task_list *l = NULL;
		due_complete_outcome co;
		double t0 = v_now_ms();
		if (due_claim(v->db, &l, "bench", NULL, 0, 1, 30000000) < 0 ||
		    l->count == 0) {
			due_task_list_free(l);
			break;
		}
		ms[k] = v_now_ms() - t0;
		due_complete(v->db, &co, l->items[0].id, l->items[0].attempt,
			     "", 0);
		due_task_list_free(l);
	}
	if (k == 0 && !v_stopped()) {
		fprintf(stderr, "due bench: depth: nothing claimed: %s\n",
			due_error_last());
		return;
	}
	if (k == 0)
		return;
	r.seconds = (v_now_ms() - t_all) / 1000.0;
	r.tasks_per_s = (double)k / r.seconds;
	qsort(ms, (size_t)k, sizeof(ms[0]), bench_cmp_double);
	r.p50 = ms[k / 2];
	r.p90 = ms[k * 9 / 10];
	r.p99 = ms[k * 99 / 100];
	r.max = ms[k - 1];
	bench_report(o, &r);
}

void w_depth(vctx *v, const bopts *o)
{
	long n = o->n_set ? o->n : 1000000;
	char name[32];

	for (int future = 0; future < 2; future++) {
		const char *var = future ? "future" : "due";
		if (future) { /* a second scratch store */
			bench_done(v);
			if (bench_fresh(v, "depth-future") < 0)
				return;
		}
		if (fill_prio(v, 1000, future) < 0)
			return;
		snprintf(name, sizeof(name), "%s-1k", var);
		depth_sample(v, o, name, 1000);
		fprintf(stderr, "due bench: depth: adding %ld tasks...\n",
			n - 1000);
		if (n > 1000 && fill_prio(v, n - 1000, future) < 0)
			return;
		snprintf(name, sizeof(name), "%s-%ldk", var, n / 1000);
		depth_sample(v, o, name, n);
	}
}
