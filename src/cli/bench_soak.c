/*
** bench_soak.c - the steady state of `due bench` (not part of "all"):
**   soak   --rate R tasks/s due now for --duration D, submitted in small
**          batches paced by the monotonic clock, while one in-process
**          worker (--concurrency, retention --retain) runs them:
**          throughput and lateness of the first and the last minute, the
**          store's size (due_store_bytes) at 60 s and at the end, what
**          retention pruned.  One JSON object.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"

/*
** soak: --rate R tasks/s due now for --duration D while one worker of
** --concurrency slots (retention --retain) runs them with a no-op.
**
** The submitter paces itself by the monotonic clock: every 10 ms it adds
** what the rate owes since the start, in batches of at most 500 (20 at
** 2,000/s).  Lateness is claim - due on the store's clock, as the
** lateness workload reads it from the attempts (which retention deletes
** here): the claim's lease_until - lease, as the worker's own lateness
** figure.  The handler keeps the tries of tasks due in the first minute
** and in the last minute (store clock, from the store's `now` read
** before the first submit), so memory follows the rate, not D.
*/
typedef struct soak_win {
	float *ms;
	atomic_long n;
	long cap;
} soak_win;

typedef struct soak_ctx {
	due_time origin; /* store clock before the first submit */
	int64_t lease_us, last_from_us; /* last window: due >= origin + this */
	soak_win first, last;
	atomic_long handled, early;
} soak_ctx;

static void soak_keep(soak_win *w, double ms)
{
	long i = atomic_fetch_add(&w->n, 1);
	if (i < w->cap)
		w->ms[i] = (float)ms;
}

static int soak_noop(due_job *job, void *payload)
{
	soak_ctx *s = payload;
	const due_task *t = due_job_task(job);
	double ms = (double)(t->lease_until - s->lease_us - t->due_at) / 1000.0;
	int64_t at = t->due_at - s->origin;

	if (at < 60000000)
		soak_keep(&s->first, ms);
	if (at >= s->last_from_us)
		soak_keep(&s->last, ms);
	if (ms < 0)
		atomic_fetch_add(&s->early, 1);
	atomic_fetch_add(&s->handled, 1);
	return 0;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* p (0..100) of a window's kept tries as JSON, null when none. */
static json_t *soak_pct(soak_win *w, int p)
{
	long n = atomic_load(&w->n);
	if (n > w->cap)
		n = w->cap;
	if (n == 0)
		return json_null();
	qsort(w->ms, (size_t)n, sizeof(float), cmp_float);
	return json_real(w->ms[(n - 1) * p / 100]);
}

/* What one soak run measured, for its JSON object. */
typedef struct soak_run {
	soak_ctx s;
	wthread w;
	bool started;
	double dur_ms, last_ms; /* the last window: [last_ms, dur_ms) */
	long submitted, h_last, h_end;
	double t_last, t_end, run_out_s;
	json_t *samples, *bytes60, *bytes_end;
	due_worker_stats ws;
} soak_run;

/* One worker, as `due work --concurrency C --retain DUR`; 0 or -1. */
static int soak_start(vctx *v, const bopts *o, soak_run *k)
{
	due_worker_opts wo = DUE_WORKER_OPTS_INIT;

	wo.url = v->url;
	wo.owner = "bench-soak";
	wo.concurrency = (int)o->concurrency;
	wo.lease_us = k->s.lease_us;
	wo.no_wheel = o->no_wheel;
	wo.poll_us = o->no_wheel || o->poll_set ? o->poll_us : 0;
	wo.log_level = 0;
	wo.retain_us = o->retain_us;
	if (due_worker_new(&k->w.w, &wo) < 0 ||
	    due_worker_register(k->w.w, NULL, soak_noop, &k->s, 0) < 0 ||
	    pthread_create(&k->w.th, NULL, bench_wrun, &k->w) != 0) {
		fprintf(stderr, "due bench: worker: %s\n", due_error_last());
		return -1;
	}
	k->started = true;
	return 0;
}

/* Every 10 s: progress on stderr and a sample with the store's size. */
static void soak_sample(vctx *v, soak_run *k, double el)
{
	long h = atomic_load(&k->s.handled);
	json_t *b = bench_store_bytes(v);

	json_array_append_new(k->samples,
			      json_pack("{s:f,s:I,s:I,s:o}", "t_s", el / 1000.0,
					"submitted", (json_int_t)k->submitted,
					"handled", (json_int_t)h, "bytes", b));
	fprintf(stderr, "  soak: %.0fs %ld submitted, %ld run, backlog %ld\n",
		el / 1000.0, k->submitted, h, k->submitted - h);
}

/* Submit what the rate owes at el ms, in batches of at most 500. */
static int soak_submit(vctx *v, const bopts *o, soak_run *k, double el,
		       due_submit *items, due_submitted *out)
{
	static const char payload[] =
	    "{\"order\":123456,\"customer\":\"c-42\","
	    "\"note\":\"close this unpaid order in 30m\"}....";
	long owed = (long)((double)o->rate * el / 1000.0) - k->submitted;

	while (owed > 0 && !v_stopped()) {
		long n = owed < 500 ? owed : 500;
		for (long i = 0; i < n; i++)
			items[i] =
			    (due_submit){"bench", payload, sizeof(payload) - 1,
					 DUE_SCHEDULE_OPTS_INIT};
		if (due_schedule_batch(v->db, out, items, (size_t)n) < 0) {
			fprintf(stderr, "due bench: soak: submit: %s\n",
				due_error_last());
			return -1;
		}
		k->submitted += n;
		owed -= n;
	}
	return 0;
}

/* The run: submit for D, then let the backlog run out (at most 60 s). */
static int soak_loop(vctx *v, const bopts *o, soak_run *k)
{
	due_submit *items = calloc(500, sizeof(*items));
	due_submitted *out = calloc(500, sizeof(*out));
	double t0 = v_now_ms(), next_sample = 10000;
	int rc = items && out ? 0 : -1;

	for (double el;
	     rc == 0 && !v_stopped() && (el = v_now_ms() - t0) < k->dur_ms;) {
		if (k->h_last < 0 && el >= k->last_ms) {
			k->h_last = atomic_load(&k->s.handled);
			k->t_last = el;
		}
		if (!k->bytes60 && el >= 60000)
			k->bytes60 = bench_store_bytes(v);
		if (el >= next_sample) {
			soak_sample(v, k, el);
			next_sample += 10000;
		}
		if ((rc = soak_submit(v, o, k, el, items, out)) == 0)
			v_sleep_ms(10);
	}
	free(items);
	free(out);
	if (rc < 0)
		return rc;
	k->t_end = v_now_ms() - t0;
	k->h_end = atomic_load(&k->s.handled);
	k->bytes_end = bench_store_bytes(v);
	/* the backlog at the end, run out for at most 60 s (not measured) */
	double t_out = v_now_ms();
	while (atomic_load(&k->s.handled) < k->submitted &&
	       v_now_ms() - t_out < 60000 && !v_stopped())
		v_sleep_ms(20);
	k->run_out_s = (v_now_ms() - t_out) / 1000.0;
	due_worker_stop(k->w.w);
	pthread_join(k->w.th, NULL);
	k->started = false;
	due_worker_stats_get(k->w.w, &k->ws);
	return 0;
}

static void set(json_t *j, const char *key, json_t *v)
{
	json_object_set_new(j, key, v);
}

/* The run's settings and counts. */
static void soak_counts(vctx *v, const bopts *o, const soak_run *k, json_t *j)
{
	double win_s = (k->t_end - k->t_last) / 1000.0;

	set(j, "workload", json_string("soak"));
	set(j, "store", json_string(due_db_backend(v->db)));
	set(j, "rate", json_integer(o->rate));
	set(j, "duration_s", json_real(k->dur_ms / 1000.0));
	set(j, "retain_s",
	    o->retain_us == DUE_RETAIN_ALL
		? json_null()
		: json_real((double)(o->retain_us ? o->retain_us
						  : DUE_RETAIN_DEFAULT_US) /
			    1e6));
	set(j, "concurrency", json_integer(o->concurrency));
	set(j, "submitted", json_integer(k->submitted));
	set(j, "handled_at_end", json_integer(k->h_end));
	set(j, "backlog_at_end", json_integer(k->submitted - k->h_end));
	set(j, "run_out_s", json_real(k->run_out_s));
	set(j, "tasks_per_s", json_real((double)k->h_end * 1000.0 / k->t_end));
	set(j, "tasks_per_s_last_minute",
	    json_real(win_s > 0 ? (double)(k->h_end - k->h_last) / win_s : 0));
}

/* The lateness of both windows, the sizes, retention, the worker. */
static void soak_figures(soak_run *k, json_t *j)
{
	set(j, "p50_ms_first_minute", soak_pct(&k->s.first, 50));
	set(j, "p99_ms_first_minute", soak_pct(&k->s.first, 99));
	set(j, "max_ms_first_minute", soak_pct(&k->s.first, 100));
	set(j, "p50_ms_last_minute", soak_pct(&k->s.last, 50));
	set(j, "p99_ms_last_minute", soak_pct(&k->s.last, 99));
	set(j, "max_ms_last_minute", soak_pct(&k->s.last, 100));
	set(j, "early", json_integer(atomic_load(&k->s.early)));
	set(j, "bytes_at_60s", k->bytes60 ? k->bytes60 : json_null());
	k->bytes60 = NULL;
	set(j, "bytes_at_end", k->bytes_end);
	k->bytes_end = NULL;
	set(j, "pruned", json_integer(k->ws.pruned));
	set(j, "claim_queries", json_integer(k->ws.claim_queries));
	set(j, "store_errors", json_integer(k->ws.store_errors));
	json_object_set(j, "samples", k->samples);
}

/* One JSON object, or its keys on one line (without the samples). */
static void soak_print(const bopts *o, json_t *j)
{
	const char *key;
	json_t *val;
	char *t;

	if (o->json) {
		if ((t = json_dumps(j, JSON_COMPACT)))
			puts(t);
		free(t);
		fflush(stdout);
		return;
	}
	printf("soak");
	json_object_foreach(j, key, val)
	{
		if (!strcmp(key, "samples") || !strcmp(key, "workload"))
			continue;
		t = json_dumps(val, JSON_ENCODE_ANY | JSON_REAL_PRECISION(6));
		printf("  %s=%s", key, t ? t : "?");
		free(t);
	}
	printf("\n");
	fflush(stdout);
}

void w_soak(vctx *v, const bopts *o)
{
	soak_run k = {.s = {.lease_us = 30000000}, .h_last = -1};
	long win_cap = o->rate * 66 + 1000; /* a minute and some catching up */
	json_t *j = json_object();
	due_stats st;

	k.dur_ms = (double)o->duration_us / 1000.0;
	/* the last minute: [D - 60 s, D), or all of D when shorter */
	k.last_ms = k.dur_ms > 60000 ? k.dur_ms - 60000 : 0;
	k.s.last_from_us = (int64_t)(k.last_ms * 1000.0);
	k.samples = json_array();
	k.s.first.ms = calloc((size_t)win_cap, sizeof(float));
	k.s.last.ms = calloc((size_t)win_cap, sizeof(float));
	k.s.first.cap = k.s.last.cap = win_cap;
	if (!j || !k.samples || !k.s.first.ms || !k.s.last.ms)
		goto done;
	if (o->pg_autovacuum_default && due__scratch_untune(v->url) < 0) {
		fprintf(stderr, "due bench: %s\n", due_error_last());
		goto done;
	}
	if (due_stats_get(v->db, &st) < 0) {
		fprintf(stderr, "due bench: soak: %s\n", due_error_last());
		goto done;
	}
	k.s.origin = st.now;
	if (soak_start(v, o, &k) < 0 || soak_loop(v, o, &k) < 0 || v_stopped())
		goto done;
	soak_counts(v, o, &k, j);
	soak_figures(&k, j);
	soak_print(o, j);
done:
	if (k.started) {
		due_worker_stop(k.w.w);
		pthread_join(k.w.th, NULL);
	}
	due_worker_free(k.w.w);
	json_decref(k.bytes60);
	json_decref(k.bytes_end);
	json_decref(k.samples);
	json_decref(j);
	free(k.s.first.ms);
	free(k.s.last.ms);
}
