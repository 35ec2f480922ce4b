/*
** bench_util.c - what every `due bench` workload uses: its scratch store
** and a session on the store's server, the readings of store work around
** a measured phase, filling the store with tasks, the C no-op handler,
** and workers run in threads of this process.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/bench.h"

/*
** v_fresh for a benchmark.  The scratch store's URL carries the options
** of the store named by --db (its backend keeps them: `--db
** 'sqlite:x.db?sync=normal'` measures a scratch store at sync=normal,
** the floor's setting), and the workers a workload starts read v->url
** too.  0 or -1 after a message.
*/
int bench_fresh(vctx *v, const char *name) { return v_fresh(v, name); }

void bench_done(vctx *v)
{
	due__server_close(v->srv);
	v->srv = NULL;
	v_done(v);
}

struct due__server *bench_server(vctx *v, unsigned kinds, bool loud)
{
	if (!(due__admin_counter_kinds(v->adm) & kinds))
		return NULL;
	if (!v->srv && due__server_open(&v->srv, v->adm) < 0 && loud)
		fprintf(stderr, "due bench: %s\n", due_error_last());
	return v->srv;
}

int bench_server_read(vctx *v, due_counters *out)
{
	out->n = 0;
	return v->srv && due__server_read(v->srv, out) == 0 ? 0 : -1;
}

/*
** The store work now: this process's counters (due_store_work_read) and
** the server's WORK counters (bench_server), on a session of bench's own
** (the store's connections are the library's), so that their moves over
** a phase are every session's work, as bench/floor reads them.
*/
bwork bench_work_now(vctx *v)
{
	bwork b = {.w.version = DUE_STORE_WORK_VERSION};
	due_counters c = {0};

	if (bench_server(v, DUE_COUNTER_WORK, false) &&
	    bench_server_read(v, &c) == 0)
		for (size_t i = 0; i < c.n && b.n_srv < BENCH_MAX_WORK; i++)
			if (c.c[i].kind == DUE_COUNTER_WORK)
				b.srv[b.n_srv++] = c.c[i];
	due__counters_clear(&c);
	due_store_work_read(&b.w);
	return b;
}

/* b's counter `name`, or NULL. */
static const due_counter *work_of(const bwork *b, const char *name)
{
	for (size_t i = 0; i < b->n_srv; i++)
		if (strcmp(b->srv[i].name, name) == 0)
			return &b->srv[i];
	return NULL;
}

/*
** The store work since b0, per task of n, into r (when there is any):
** read after the phase's CPU, so the reading is not in it.
*/
void bench_work_per_task(vctx *v, bres *r, const bwork *b0, double n)
{
	bwork b = bench_work_now(v);
	const due_store_work *w0 = &b0->w;

	if (n <= 0)
		return;
	r->has_work = b.w.statements > w0->statements;
	if (r->has_work) {
		r->stmts_per_task =
		    (double)(b.w.statements - w0->statements) / n;
		r->steps_per_task = (double)(b.w.vm_steps - w0->vm_steps) / n;
		r->rows_per_task =
		    (double)(b.w.rows_written - w0->rows_written) / n;
	}
	r->n_srv_work = 0;
	for (size_t i = 0; i < b.n_srv; i++) {
		const due_counter *c = &b.srv[i], *c0 = work_of(b0, c->name);
		bench_srv_work *w = &r->srv_work[r->n_srv_work];
		if (!c0 || c->value < c0->value)
			continue;
		snprintf(w->name, sizeof(w->name), "%s", c->name);
		w->label = c->label;
		w->unit = c->unit;
		w->digits = c->digits;
		w->per_task = (c->value - c0->value) / n;
		r->n_srv_work++;
	}
}

double bench_cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/*
** Fill the scratch store with n tasks in batches; returns the first id
** (0: failed), and every id, sorted, in ids[n] when ids is not NULL (a
** sharded Redis store's ids are not one run: seq * N + shard).
*/
int bench_cmp_id(const void *a, const void *b)
{
	due_id x = *(const due_id *)a, y = *(const due_id *)b;
	return (x > y) - (x < y);
}

due_id bench_fill(vctx *v, long n, int64_t spread_us, long batch)
{
	return bench_fill_ids(v, n, spread_us, false, batch, NULL);
}

/* A fixed sequence of pseudo-random numbers (xorshift64): the same due
   times on every run, so that runs compare. */
static uint64_t bench_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/*
** Submit n bench tasks in batches: due now, or, with spread_us, 1 s from
** now plus a point in the spread, evenly spaced or (at_random) uniformly
** at random, as a command handler's lateness workload has them (bursts:
** several tasks due within a few milliseconds).  The first id, 0 on
** error; ids (when not NULL) gets every id, sorted.
*/
due_id bench_fill_ids(vctx *v, long n, int64_t spread_us, bool at_random,
		      long batch, due_id *ids)
{
	uint64_t seed = 0x9e3779b97f4a7c15u;
	static const char payload[] =
	    "{\"order\":123456,\"customer\":\"c-42\","
	    "\"note\":\"close this unpaid order in 30m\"}....";
	due_submit *items = calloc((size_t)batch, sizeof(*items));
	due_submitted *out = calloc((size_t)batch, sizeof(*out));
	due_id first = 0;

	for (long done = 0; items && out && done < n && !v_stopped();) {
		long k = n - done < batch ? n - done : batch;
		for (long i = 0; i < k; i++) {
			items[i] =
			    (due_submit){"bench", payload, sizeof(payload) - 1,
					 DUE_SCHEDULE_OPTS_INIT};
			if (spread_us && at_random)
				items[i].opts.delay_us =
				    1000000 + (int64_t)(bench_rand(&seed) %
							(uint64_t)spread_us);
			else if (spread_us)
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
		for (long i = 0; ids && i < k; i++)
			ids[done + i] = out[i].id;
		done += k;
	}
	free(items);
	free(out);
	if (v_stopped())
		first = 0;
	if (ids && first)
		qsort(ids, (size_t)n, sizeof(*ids), bench_cmp_id);
	return first;
}

/* due_store_bytes() as JSON: a number, or null when the store cannot
   say (DUE_EUNSUPPORTED) or the read failed (said on stderr). */
json_t *bench_store_bytes(vctx *v)
{
	int64_t b = 0;
	int rc = due_store_bytes(v->db, &b);
	if (rc == 0)
		return json_integer(b);
	if (rc != DUE_EUNSUPPORTED)
		fprintf(stderr, "due bench: store bytes: %s\n",
			due_error_last());
	return json_null();
}

/* The index of id in the run's sorted ids, or -1. */
long bench_id_index(const drain_ctx *d, due_id id)
{
	const due_id *at;

	if (!d->ids) /* a workload that counts no runs (lateness, idle) */
		return -1;
	at = bsearch(&id, d->ids, (size_t)d->n, sizeof(id), bench_cmp_id);
	return at ? (long)(at - d->ids) : -1;
}

int bench_noop(due_job *job, void *payload)
{
	drain_ctx *d = payload;
	long i = bench_id_index(d, due_job_task(job)->id);
	if (i >= 0)
		atomic_fetch_add(&d->counts[i], 1);
	atomic_fetch_add(&d->handled, 1);
	return 0;
}

void *bench_wrun(void *arg)
{
	wthread *t = arg;
	due_worker_run(t->w);
	atomic_store(&t->ended, true);
	return NULL;
}

/* A drain's workers run with `once`: each returns when it finds nothing
   claimable.  When all have, tasks not finished yet (a failing handler's
   retries, waiting out their backoff) will not be run by them: stop
   waiting and let the check report them missing. */
bool bench_all_ended(wthread *ws, long count)
{
	for (long i = 0; i < count; i++)
		if (!atomic_load(&ws[i].ended))
			return false;
	return true;
}

/* Tries the workers have committed as DONE or DEAD: the store has
   answered each completion (the worker counts it after the commit).
   Asking the store instead (due_stats) would cost a count in a big store
   during the timed drain, and its DONE may be an estimate there. */
long bench_ended_tries(wthread *ws, long count)
{
	long n = 0;
	for (long i = 0; i < count; i++) {
		due_worker_stats st;
		due_worker_stats_get(ws[i].w, &st);
		n += (long)(st.done + st.dead);
	}
	return n;
}

/* Start `count` workers in threads; returns 0 or -1. */
int bench_start_workers(vctx *v, const bopts *o, wthread *ws, long count,
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
		    pthread_create(&ws[i].th, NULL, bench_wrun, &ws[i]) != 0) {
			fprintf(stderr, "due bench: worker: %s\n",
				due_error_last());
			return -1;
		}
	}
	return 0;
}

/* Stop (or wait for) the workers; returns their claim queries in all. */
long bench_stop_workers(wthread *ws, long count, bool stop)
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

int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int bench_crew_start(vctx *v, const bopts *o, bench_crew *c, long n, long conc,
		     bool once, drain_ctx *d)
{
	due_exec_opts x = DUE_EXEC_OPTS_INIT;
	due_pipe_opts po = DUE_PIPE_OPTS_INIT;

	memset(c, 0, sizeof(*c));
	c->x = x;
	c->x.command = o->exec;
	po.command = o->pipe;
	c->n = n;
	if (!(c->ws = calloc((size_t)n, sizeof(*c->ws))))
		return -1;
	if (o->pipe && due_pipe_new(&c->pipe, &po) < 0) {
		fprintf(stderr, "due bench: --pipe: %s\n", due_error_last());
		goto fail;
	}
	if (bench_start_workers(v, o, c->ws, n, conc, once,
				c->pipe ? due_pipe_handler : bench_noop,
				c->pipe ? (void *)c->pipe : (void *)d,
				o->exec ? &c->x : NULL) < 0)
		goto fail;
	return 0;
fail:
	due_pipe_free(c->pipe);
	free(c->ws);
	memset(c, 0, sizeof(*c));
	return -1;
}

long bench_crew_stop(bench_crew *c, bool stop)
{
	long claims = bench_stop_workers(c->ws, c->n, stop);

	due_pipe_free(c->pipe);
	free(c->ws);
	memset(c, 0, sizeof(*c));
	return claims;
}
