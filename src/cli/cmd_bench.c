/*
** cmd_bench.c - `due bench`: measure a store with in-process no-op
** handlers, the way `river bench` or `redis-benchmark` do.
**
** Workloads (each in a fresh scratch store beside the one named by --db:
** the user's tasks are never touched):
**   enqueue   n tasks due now, ~100-byte payload: one commit each, then
**             in batches of --batch
**   cycle     one thread: claim 1 -> complete 1, through the C API
**   drain     n due tasks, C no-op handler (or --exec CMD, or a pipe
**             handler with --pipe CMD), --concurrency;
**             tasks/s from worker start to last completion; every task
**             must run exactly once (duplicates are reported)
**   lateness  n tasks spread over --spread, --workers workers waiting:
**             claim - due percentiles and early claims
**   idle      --workers workers, no tasks, --idle seconds: store queries/s
**   depth     claim latency (claim 1 -> complete 1, through the C API) with
**             1,000 tasks pending over 10 priorities, then with --n
**             (default 1,000,000): all due ("due"), and all but 1,000 due
**             in an hour, the due ones at the highest priority number
**             ("future", the worst case for a claim that scans the
**             priorities in order).  Not part of "all": it fills a big
**             store.
** Figures are printed, never judged: a benchmark has no pass/fail.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/verify.h"

static const char usage[] =
    "usage: due bench [--workload "
    "enqueue|cycle|drain|lateness|idle|depth|all]\n"
    "                 [--n N] [--concurrency C] [--workers W] [--batch B]\n"
    "                 [--exec CMD | --pipe CMD] [--poll DUR] [--spread DUR]\n"
    "                 [--idle DUR]\n"
    "                 [--json] [--db URL]\n"
    "\n"
    "Measure the store named by --db with in-process no-op handlers.  Each\n"
    "workload runs in a scratch store of its own (a new SQLite file beside\n"
    "yours, or a new PostgreSQL schema) and never touches your tasks.\n"
    "  --n N            tasks per workload (default 20000; lateness 2000;\n"
    "                   depth 1000000)\n"
    "  --concurrency C  handler slots per worker for drain (default 4)\n"
    "  --workers W      worker instances for drain/lateness/idle (default "
    "1/4/4)\n"
    "  --batch B        enqueue batch size (default 1000)\n"
    "  --exec CMD       drain with a command handler instead of the C no-op\n"
    "  --pipe CMD       drain with a pipe handler (`due work --pipe`): CMD\n"
    "                   started once per slot, one JSON line per task\n"
    "  --poll DUR       with --no-wheel: the poll interval (default 50ms);\n"
    "                   with the wheel: the safety poll (default 10s)\n"
    "  --no-wheel       discover due tasks by polling only\n"
    "  --inline         run handlers in the claiming thread, one task at a\n"
    "                   time (drain: C inline workers)\n"
    "  --spread DUR     lateness: tasks due over this span (default 5s)\n"
    "  --idle DUR       idle: how long to watch (default 10s)\n"
    "  --json           one JSON object per workload, one per line\n";

typedef struct bopts {
	const char *workload;
	long n, concurrency, workers, batch;
	const char *exec;
	int64_t poll_us, spread_us, idle_us;
	bool json;
	bool n_set, workers_set, no_wheel, poll_set, inline_mode;
	const char *pipe; /* --pipe CMD (drain) */
} bopts;

typedef struct bres {
	const char *workload;
	const char *variant;
	long n, concurrency;
	double seconds, tasks_per_s;
	double p50, p90, p99, max;
	long early, duplicates, missing;
	long claim_queries; /* drain: store transactions that claimed */
	double queries_per_s, cpu_s;
	bool has_late, has_idle, has_check;
} bres;

static void report(const bopts *o, const bres *r)
{
	if (o->json) {
		json_t *j = json_pack(
		    "{s:s,s:s,s:I,s:I,s:f,s:f}", "workload", r->workload,
		    "variant", r->variant, "n", (json_int_t)r->n, "concurrency",
		    (json_int_t)r->concurrency, "seconds", r->seconds,
		    "tasks_per_s", r->tasks_per_s);
		if (r->has_late) {
			json_object_set_new(j, "p50_ms", json_real(r->p50));
			json_object_set_new(j, "p90_ms", json_real(r->p90));
			json_object_set_new(j, "p99_ms", json_real(r->p99));
			json_object_set_new(j, "max_ms", json_real(r->max));
			json_object_set_new(j, "early", json_integer(r->early));
		}
		if (r->has_idle) {
			json_object_set_new(j, "queries_per_s",
					    json_real(r->queries_per_s));
			json_object_set_new(j, "cpu_s", json_real(r->cpu_s));
		}
		if (r->has_check) {
			json_object_set_new(j, "duplicates",
					    json_integer(r->duplicates));
			json_object_set_new(j, "missing",
					    json_integer(r->missing));
		}
		if (r->claim_queries > 0) {
			json_object_set_new(j, "claim_queries",
					    json_integer(r->claim_queries));
			json_object_set_new(
			    j, "tasks_per_claim",
			    json_real((double)r->n / (double)r->claim_queries));
		}
		char *txt = json_dumps(j, JSON_COMPACT);
		if (txt)
			puts(txt);
		free(txt);
		json_decref(j);
	} else {
		printf("%-9s %-12s n=%-6ld c=%-3ld %8.2fs %10.0f tasks/s",
		       r->workload, r->variant, r->n, r->concurrency,
		       r->seconds, r->tasks_per_s);
		if (r->has_late)
			printf("  p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms "
			       "early=%ld",
			       r->p50, r->p90, r->p99, r->max, r->early);
		if (r->has_idle)
			printf("  queries/s=%.2f per worker  cpu=%.2fs",
			       r->queries_per_s, r->cpu_s);
		if (r->has_check)
			printf("  duplicates=%ld missing=%ld", r->duplicates,
			       r->missing);
		if (r->claim_queries > 0)
			printf("  %.1f tasks/claim",
			       (double)r->n / (double)r->claim_queries);
		printf("\n");
	}
	fflush(stdout);
}

static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* Fill the scratch store with n tasks in batches; returns the first id. */
static due_id fill(vctx *v, long n, int64_t spread_us, long batch)
{
	static const char payload[] =
	    "{\"order\":123456,\"customer\":\"c-42\","
	    "\"note\":\"close this unpaid order in 30m\"}....";
	due_submit *items = calloc((size_t)batch, sizeof(*items));
	due_submitted *out = calloc((size_t)batch, sizeof(*out));
	due_id first = 0;

	for (long done = 0; items && out && done < n;) {
		long k = n - done < batch ? n - done : batch;
		for (long i = 0; i < k; i++) {
			items[i] =
			    (due_submit){"bench", payload, sizeof(payload) - 1,
					 DUE_SCHEDULE_OPTS_INIT};
			if (spread_us)
				items[i].opts.delay_us =
				    1000000 + spread_us * (done + i) / n;
		}
		if (due_schedule_batch(v->db, out, items, (size_t)k) < 0) {
			fprintf(stderr, "due bench: enqueue: %s\n",
				due_error_last());
			first = 0;
			break;
		}
		if (!first)
			first = out[0].id;
		done += k;
	}
	free(items);
	free(out);
	return first;
}

static void w_enqueue(vctx *v, const bopts *o)
{
	static const char payload[] =
	    "{\"order\":123456,\"customer\":\"c-42\","
	    "\"note\":\"close this unpaid order in 30m\"}....";
	bres r = {.workload = "enqueue",
		  .variant = "single",
		  .n = o->n,
		  .concurrency = 1};
	double t0 = v_now_ms();
	long n = o->n / 4 > 0 ? o->n / 4 : 1; /* one commit each: fewer */

	for (long i = 0; i < n; i++) {
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
	report(o, &r);
	r.variant = "batch";
	r.n = o->n;
	r.concurrency = o->batch;
	t0 = v_now_ms();
	if (!fill(v, o->n, 0, o->batch))
		return;
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.tasks_per_s = (double)o->n / r.seconds;
	report(o, &r);
}

static void w_cycle(vctx *v, const bopts *o)
{
	bres r = {.workload = "cycle",
		  .variant = "claim1+done1",
		  .n = o->n,
		  .concurrency = 1};
	long done = 0;

	if (!fill(v, o->n, 0, o->batch))
		return;
	double t0 = v_now_ms();
	for (;;) {
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
	r.has_check = true;
	r.missing = o->n - done;
	report(o, &r);
}

typedef struct drain_ctx {
	atomic_int *counts;
	due_id first;
	long n;
	atomic_long handled;
} drain_ctx;

static int noop(due_job *job, void *payload)
{
	drain_ctx *d = payload;
	due_id i = due_job_task(job)->id - d->first;
	if (i >= 0 && i < d->n)
		atomic_fetch_add(&d->counts[i], 1);
	atomic_fetch_add(&d->handled, 1);
	return 0;
}

typedef struct wthread {
	due_worker *w;
	pthread_t th;
} wthread;

static void *wrun(void *arg)
{
	wthread *t = arg;
	due_worker_run(t->w);
	return NULL;
}

/* Start `count` workers in threads; returns 0 or -1. */
static int start_workers(vctx *v, const bopts *o, wthread *ws, long count,
			 long conc, bool once, due_handler_fn fn, void *payload,
			 due_exec_opts *x)
{
	for (long i = 0; i < count; i++) {
		due_worker_opts wo = DUE_WORKER_OPTS_INIT;
		char owner[32];
		snprintf(owner, sizeof(owner), "bench-%ld", i + 1);
		wo.url = v->url;
		wo.owner = owner;
		wo.concurrency = (int)conc;
		wo.no_wheel = o->no_wheel;
		wo.mode = o->inline_mode ? DUE_MODE_INLINE : DUE_MODE_POOL;
		wo.poll_us = o->no_wheel || o->poll_set ? o->poll_us : 0;
		wo.once = once;
		wo.log_level = 0;
		if (due_worker_new(&ws[i].w, &wo) < 0 ||
		    due_worker_register(ws[i].w, NULL,
					x ? due_exec_handler : fn,
					x ? (void *)x : payload, 0) < 0 ||
		    pthread_create(&ws[i].th, NULL, wrun, &ws[i]) != 0) {
			fprintf(stderr, "due bench: worker: %s\n",
				due_error_last());
			return -1;
		}
	}
	return 0;
}

/* Stop (or wait for) the workers; returns their claim queries in all. */
static long stop_workers(wthread *ws, long count, bool stop)
{
	long claims = 0;
	for (long i = 0; i < count; i++)
		if (stop)
			due_worker_stop(ws[i].w);
	for (long i = 0; i < count; i++) {
		due_worker_stats st;
		pthread_join(ws[i].th, NULL);
		due_worker_stats_get(ws[i].w, &st);
		claims += (long)st.claim_queries;
		due_worker_free(ws[i].w);
	}
	return claims;
}

static void w_drain(vctx *v, const bopts *o)
{
	/* an inline worker runs one task at a time (CONTRACT §5: nothing
	   waits in memory holding a lease), so concurrency C inline is C
	   inline workers, each claiming and running one task at a time */
	long workers = o->workers_set	? o->workers
		       : o->inline_mode ? o->concurrency
					: 1;
	long conc = o->inline_mode ? 1 : o->concurrency;
	drain_ctx d = {.n = o->n};
	due_exec_opts x = DUE_EXEC_OPTS_INIT;
	due_pipe_opts po = DUE_PIPE_OPTS_INIT;
	due_pipe *pipe = NULL;
	bool cmd = o->exec || o->pipe; /* no in-process handled counter */
	bres r = {.workload = "drain",
		  .variant = o->exec	      ? "exec"
			     : o->pipe	      ? "pipe"
			     : o->inline_mode ? "c-noop-inline"
					      : "c-noop",
		  .n = o->n,
		  .concurrency = conc * workers,
		  .has_check = true};
	wthread *ws = calloc((size_t)workers, sizeof(*ws));

	x.command = o->exec;
	po.command = o->pipe;
	d.counts = calloc((size_t)o->n, sizeof(*d.counts));
	if (!ws || !d.counts || !(d.first = fill(v, o->n, 0, o->batch)))
		goto done;
	if (o->pipe && due_pipe_new(&pipe, &po) < 0) {
		fprintf(stderr, "due bench: --pipe: %s\n", due_error_last());
		goto done;
	}
	double t0 = v_now_ms(), last = t0;
	long last_n = 0;
	if (start_workers(
		v, o, ws, workers, conc, true, pipe ? due_pipe_handler : noop,
		pipe ? (void *)pipe : (void *)&d, o->exec ? &x : NULL) < 0)
		goto done;
	/* progress once a second while the workers drain; the handler
	   counter is free to read, the store is asked only at the end (a
	   stats query every few ms would compete with the workers) */
	for (;;) {
		long n = cmd ? -1 : atomic_load(&d.handled);
		double now = v_now_ms();
		if (cmd && now - last >= 250) { /* commands: ask the store */
			due_stats st;
			if (due_stats_get(v->db, &st) < 0)
				break;
			n = (long)(st.counts[DUE_DONE] + st.counts[DUE_DEAD]);
		}
		if (!o->json && now - last >= 1000 && n >= 0) {
			fprintf(stderr, "  drain: %ld/%ld run, %.0f tasks/s\n",
				n, o->n,
				(double)(n - last_n) * 1000.0 / (now - last));
			last = now;
			last_n = n;
		}
		if (n >= o->n)
			break;
		v_sleep_ms(5);
	}
	/* the last commits: wait until the store has every task finished */
	for (;;) {
		due_stats st;
		if (due_stats_get(v->db, &st) < 0 ||
		    st.counts[DUE_DONE] + st.counts[DUE_DEAD] >= o->n)
			break;
		v_sleep_ms(2);
	}
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.claim_queries = stop_workers(ws, workers, false);
	r.tasks_per_s = (double)o->n / r.seconds;
	for (long i = 0; i < o->n; i++) {
		int c = atomic_load(&d.counts[i]);
		if (c > 1)
			r.duplicates += c - 1;
		if (c == 0 && !cmd)
			r.missing++;
	}
	report(o, &r);
done:
	due_pipe_free(pipe);
	free(ws);
	free(d.counts);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void w_lateness(vctx *v, const bopts *o)
{
	long n = o->n_set ? o->n : 2000,
	     workers = o->workers_set ? o->workers : 4;
	drain_ctx d = {.n = n};
	bres r = {.workload = "lateness",
		  .variant = o->no_wheel ? "poll" : "wheel",
		  .n = n,
		  .concurrency = workers,
		  .has_late = true};
	wthread *ws = calloc((size_t)workers, sizeof(*ws));
	double *late = calloc((size_t)n, sizeof(*late));
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	size_t k = 0;

	d.counts = calloc((size_t)n, sizeof(*d.counts));
	if (!ws || !late || !d.counts)
		goto done;
	if (start_workers(v, o, ws, workers, 4, false, noop, &d, NULL) < 0)
		goto done;
	double t0 = v_now_ms();
	if (!(d.first = fill(v, n, o->spread_us, o->batch)))
		goto stop;
	while (atomic_load(&d.handled) < n &&
	       v_now_ms() - t0 < 60000 + (double)o->spread_us / 1000)
		v_sleep_ms(20);
stop:
	stop_workers(ws, workers, true);
	r.seconds = (v_now_ms() - t0) / 1000.0;
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
			if (t->n_attempts == 0 || k >= (size_t)n)
				continue;
			double ms =
			    (double)(t->attempts[0].claimed_at - t->due_at) /
			    1000.0;
			r.early += ms < 0;
			late[k++] = ms;
		}
	}
	due_task_list_free(l);
	qsort(late, k, sizeof(*late), cmp_double);
	if (k) {
		r.p50 = late[(k - 1) * 50 / 100];
		r.p90 = late[(k - 1) * 90 / 100];
		r.p99 = late[(k - 1) * 99 / 100];
		r.max = late[k - 1];
	}
	r.tasks_per_s = (double)k / r.seconds;
	report(o, &r);
done:
	free(ws);
	free(late);
	free(d.counts);
}

static void w_idle(vctx *v, const bopts *o)
{
	long workers = o->workers_set ? o->workers : 4;
	bres r = {.workload = "idle",
		  .variant = o->no_wheel ? "poll" : "wheel",
		  .n = 0,
		  .concurrency = workers,
		  .has_idle = true};
	wthread *ws = calloc((size_t)workers, sizeof(*ws));
	drain_ctx d = {0};
	long long q = 0;

	if (!ws ||
	    start_workers(v, o, ws, workers, 4, false, noop, &d, NULL) < 0) {
		free(ws);
		return;
	}
	v_sleep_ms(300); /* connect, first claim */
	due_worker_stats s0[64] = {0};
	for (long i = 0; i < workers && i < 64; i++)
		due_worker_stats_get(ws[i].w, &s0[i]);
	double c0 = cpu_seconds(), t0 = v_now_ms();
	v_sleep_ms((int)(o->idle_us / 1000));
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.cpu_s = cpu_seconds() - c0;
	for (long i = 0; i < workers && i < 64; i++) {
		due_worker_stats s1;
		due_worker_stats_get(ws[i].w, &s1);
		q += s1.claim_queries - s0[i].claim_queries +
		     s1.reclaim_queries - s0[i].reclaim_queries + s1.refills -
		     s0[i].refills;
	}
	stop_workers(ws, workers, true);
	free(ws);
	r.queries_per_s = (double)q / r.seconds / (double)workers;
	report(o, &r);
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

	for (; k < N; k++) {
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
	if (k == 0) {
		fprintf(stderr, "due bench: depth: nothing claimed: %s\n",
			due_error_last());
		return;
	}
	r.seconds = (v_now_ms() - t_all) / 1000.0;
	r.tasks_per_s = (double)k / r.seconds;
	qsort(ms, (size_t)k, sizeof(ms[0]), cmp_double);
	r.p50 = ms[k / 2];
	r.p90 = ms[k * 9 / 10];
	r.p99 = ms[k * 99 / 100];
	r.max = ms[k - 1];
	report(o, &r);
}

static void w_depth(vctx *v, const bopts *o)
{
	long n = o->n_set ? o->n : 1000000;
	char name[32];

	for (int future = 0; future < 2; future++) {
		const char *var = future ? "future" : "due";
		if (future) { /* a second scratch store */
			v_done(v);
			if (v_fresh(v, "depth-future") < 0)
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

typedef struct workload {
	const char *name;
	void (*run)(vctx *v, const bopts *o);
} workload;

static const workload workloads[] = {
    {"enqueue", w_enqueue},   {"cycle", w_cycle}, {"drain", w_drain},
    {"lateness", w_lateness}, {"idle", w_idle},	  {"depth", w_depth},
};

static int parse(cli_ctx *c, bopts *o, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"workload", required_argument, NULL, 'w'},
	    {"n", required_argument, NULL, 'n'},
	    {"concurrency", required_argument, NULL, 'c'},
	    {"workers", required_argument, NULL, 'W'},
	    {"batch", required_argument, NULL, 'b'},
	    {"exec", required_argument, NULL, 'e'},
	    {"pipe", required_argument, NULL, 'X'},
	    {"poll", required_argument, NULL, 'p'},
	    {"spread", required_argument, NULL, 's'},
	    {"idle", required_argument, NULL, 'i'},
	    {"no-wheel", no_argument, NULL, 'P'},
	    {"inline", no_argument, NULL, 'I'},
	    CLI_COMMON_OPTS,
	    {0}};
	int opt;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(c, opt, optarg))
			continue;
		switch (opt) {
		case 'h': fputs(usage, stdout); return -1;
		case 'w': o->workload = optarg; break;
		case 'n':
			if (cli_parse_int(c, "--n", optarg, 1, 10000000, &o->n))
				return EXIT_USAGE;
			o->n_set = true;
			break;
		case 'c':
			if (cli_parse_int(c, "--concurrency", optarg, 1, 1024,
					  &o->concurrency))
				return EXIT_USAGE;
			break;
		case 'W':
			if (cli_parse_int(c, "--workers", optarg, 1, 64,
					  &o->workers))
				return EXIT_USAGE;
			o->workers_set = true;
			break;
		case 'b':
			if (cli_parse_int(c, "--batch", optarg, 1, 10000,
					  &o->batch))
				return EXIT_USAGE;
			break;
		case 'e': o->exec = optarg; break;
		case 'X': o->pipe = optarg; break;
		case 'p':
			if (cli_parse_duration(c, "--poll", optarg,
					       &o->poll_us))
				return EXIT_USAGE;
			o->poll_set = true;
			break;
		case 'P': o->no_wheel = true; break;
		case 'I': o->inline_mode = true; break;
		case 's':
			if (cli_parse_duration(c, "--spread", optarg,
					       &o->spread_us))
				return EXIT_USAGE;
			break;
		case 'i':
			if (cli_parse_duration(c, "--idle", optarg,
					       &o->idle_us))
				return EXIT_USAGE;
			break;
		default: return cli_bad_option(c, opt, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error(c, "unexpected argument '%s'",
				       argv[optind]);
	if (o->poll_us < 1000)
		return cli_usage_error(c, "--poll must be at least 1ms");
	if (o->exec && o->pipe)
		return cli_usage_error(c, "give --exec or --pipe, not both");
	return 0;
}

int cmd_bench(int argc, char **argv)
{
	bopts o = {"all", 20000,   4,	     1,	    1000,  NULL,
		   50000, 5000000, 10000000, false, false, false};
	cli_ctx c = {.prog = "due bench"};
	vctx v = {0};
	bool any = false;
	int rc = parse(&c, &o, argc, argv);

	if (rc)
		return rc < 0 ? 0 : rc;
	o.json = c.json;
	for (size_t i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++)
		any |= (!strcmp(o.workload, "all") &&
			strcmp(workloads[i].name, "depth")) ||
		       !strcmp(o.workload, workloads[i].name);
	if (!any)
		return cli_usage_error(&c,
				       "unknown workload '%s' (enqueue, cycle, "
				       "drain, lateness, idle, depth or all)",
				       o.workload);
	if ((rc = v_setup(&v, cli_db_url(&c))) < 0)
		return rc == DUE_EINVAL ? cli_fail(&c, rc) : EXIT_STORE;
	for (size_t i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++) {
		if (strcmp(o.workload, workloads[i].name) &&
		    (strcmp(o.workload, "all") ||
		     !strcmp(workloads[i].name, "depth")))
			continue;
		if (v_fresh(&v, workloads[i].name) < 0) {
			rc = EXIT_STORE;
			break;
		}
		workloads[i].run(&v, &o);
		v_done(&v);
	}
	v_teardown(&v);
	return rc;
}
