/*
** wheel_bench.c - figures for the timing wheel: start+stop rate, advance
** throughput and bytes per pending timer, for 1 M and 10 M timers.
**
** Usage: wheel_bench [timers ...]      (default: 1000000 10000000)
**
** It prints a table and never passes or fails.  Each row is one pass over
** N timers on a 4-level wheel (horizon 64^4 ticks) with random due ticks
** from a fixed-seed PRNG, prepared before the clock starts:
**   start         N starts of new ids, wheel sized up front (best of 2-5)
**   stop_id       N stops by task id, in random order (best of 2-5)
**   stop_handle   N stops by handle, in random order
**   churn         N (stop id, start id at a new tick) pairs, N pending
**   start+stop    2N / (start time + stop_id time): the headline figure;
**                 "first round" is the first try alone (pool pages fresh)
**   advance_tick  N timers over 2^22 ticks, advanced one tick at a time
**   advance_jump  the same in a single advance call (small N only)
** stop_handle includes the benchmark's own random read of its 8-byte handle
** array, one more cache miss than stop_id pays; figures on a shared machine
** vary by tens of percent from run to run.
** and the memory rows give heap bytes per pending timer, with the capacity
** given up front and grown on demand.
*/
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wheel/wheel.h"

#define ADVANCE_SPAN (INT64_C(1) << 22)

typedef struct bench {
	size_t n;
	int64_t horizon;
	int64_t *due;	/* N due ticks in [1, horizon) */
	int64_t *due2;	/* N more, for churn */
	uint32_t *perm; /* a random permutation of 0..N-1 */
	due_wheel_handle *h;
	uint64_t sink; /* keeps fire callbacks from being optimised out */
} bench;

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

static double now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "wheel_bench: %s: %s\n", what, due__wheel_strerror(rc));
	exit(2);
}

static void row(const char *name, size_t n, double ops, double sec)
{
	printf("%-14s %10zu %12.0f %10.3f %9.1f\n", name, n, ops / sec, sec,
	       sec * 1e9 / ops);
}

/* A fresh 4-level wheel, sized for n timers when presize is set. */
static due_wheel *wheel_open(size_t n, int presize)
{
	due_wheel_opts o = DUE_WHEEL_OPTS_INIT;
	due_wheel *w;
	int rc;

	o.capacity = presize ? n : 0;
	if ((rc = due__wheel_new(&w, &o)) < 0)
		die("due__wheel_new", rc);
	return w;
}

/* Prepare due ticks and a permutation for n timers.  Returns 0 or -1. */
static int bench_init(bench *b, size_t n)
{
	uint64_t s = 1;

	memset(b, 0, sizeof(*b));
	b->n = n;
	b->horizon = INT64_C(1) << (DUE_WHEEL_BITS * DUE_WHEEL_LEVELS_DEFAULT);
	b->due = malloc(n * sizeof(*b->due));
	b->due2 = malloc(n * sizeof(*b->due2));
	b->perm = malloc(n * sizeof(*b->perm));
	b->h = malloc(n * sizeof(*b->h));
	if (!b->due || !b->due2 || !b->perm || !b->h)
		return -1;
	for (size_t i = 0; i < n; i++) {
		b->due[i] =
		    1 + (int64_t)(rng_next(&s) % (uint64_t)(b->horizon - 1));
		b->due2[i] =
		    1 + (int64_t)(rng_next(&s) % (uint64_t)(b->horizon - 1));
		b->perm[i] = (uint32_t)i;
	}
	for (size_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
		size_t j = (size_t)(rng_next(&s) % (i + 1));
		uint32_t t = b->perm[i];

		b->perm[i] = b->perm[j];
		b->perm[j] = t;
	}
	return 0;
}

static void bench_fini(bench *b)
{
	free(b->due);
	free(b->due2);
	free(b->perm);
	free(b->h);
}

/* Start ids 0..n-1 at b->due; returns seconds. */
static double pass_start(bench *b, due_wheel *w)
{
	double t0 = now_sec();
	int rc;

	for (size_t i = 0; i < b->n; i++)
		if ((rc = due__wheel_start(&b->h[i], w, (int64_t)i,
					   b->due[i])) < 0)
			die("due__wheel_start", rc);
	return now_sec() - t0;
}

static double pass_stop_id(bench *b, due_wheel *w)
{
	double t0 = now_sec();
	int rc;

	for (size_t i = 0; i < b->n; i++)
		if ((rc = due__wheel_stop_id(w, (int64_t)b->perm[i])) < 0)
			die("due__wheel_stop_id", rc);
	return now_sec() - t0;
}

static double pass_stop_handle(bench *b, due_wheel *w)
{
	double t0 = now_sec();
	int rc;

	for (size_t i = 0; i < b->n; i++)
		if ((rc = due__wheel_stop(w, b->h[b->perm[i]])) < 0)
			die("due__wheel_stop", rc);
	return now_sec() - t0;
}

/* With n pending: stop a random id and start it again elsewhere, n times. */
static double pass_churn(bench *b, due_wheel *w)
{
	double t0 = now_sec();
	int rc;

	for (size_t i = 0; i < b->n; i++) {
		int64_t id = (int64_t)b->perm[i];

		if ((rc = due__wheel_stop_id(w, id)) < 0)
			die("due__wheel_stop_id", rc);
		if ((rc = due__wheel_start(NULL, w, id, b->due2[i])) < 0)
			die("due__wheel_start", rc);
	}
	return now_sec() - t0;
}

static void on_fire(int64_t id, int64_t due, void *payload)
{
	bench *b = payload;

	b->sink += (uint64_t)id ^ (uint64_t)due;
}

/* Start n timers inside ADVANCE_SPAN, then advance to its end; seconds. */
static double pass_advance(bench *b, int tick_by_tick, uint64_t *cascades)
{
	due_wheel *w = wheel_open(b->n, 1);
	due_wheel_stats st;
	double t0;
	int rc;

	for (size_t i = 0; i < b->n; i++)
		if ((rc = due__wheel_start(NULL, w, (int64_t)i,
					   1 + b->due[i] % ADVANCE_SPAN)) < 0)
			die("due__wheel_start", rc);
	t0 = now_sec();
	if (tick_by_tick) {
		for (int64_t t = 1; t <= ADVANCE_SPAN; t++)
			due__wheel_advance(w, t, on_fire, b);
	} else {
		due__wheel_advance(w, ADVANCE_SPAN, on_fire, b);
	}
	t0 = now_sec() - t0;
	due__wheel_stats_get(&st, w);
	*cascades = st.cascaded;
	if (st.pending != 0 || st.fired != b->n)
		fprintf(stderr, "wheel_bench: advance left %zu timers\n",
			st.pending);
	due__wheel_free(w);
	return t0;
}

/* Heap bytes per pending timer after n starts on a wheel grown on demand. */
static double bytes_grown(bench *b, size_t *cap)
{
	due_wheel *w = wheel_open(b->n, 0);
	due_wheel_stats st;

	pass_start(b, w);
	due__wheel_stats_get(&st, w);
	*cap = st.capacity;
	due__wheel_free(w);
	return (double)st.bytes / (double)b->n;
}

/*
** start and stop_id, best of `reps` rounds, each on a fresh presized wheel
** (so start always writes a fresh pool, as when loading from the store).
** Also reports the bytes per timer with all n pending.
*/
static void pass_start_stop(bench *b, int reps, double *ts, double *tp,
			    double *first, double *bytes)
{
	due_wheel_stats st;

	*ts = *tp = 1e30;
	*first = 0;
	for (int r = 0; r < reps; r++) {
		due_wheel *w = wheel_open(b->n, 1);
		double s = pass_start(b, w);
		double p;

		due__wheel_stats_get(&st, w);
		*bytes = (double)st.bytes / (double)b->n;
		p = pass_stop_id(b, w);
		if (r == 0)
			*first = s + p;
		*ts = s < *ts ? s : *ts;
		*tp = p < *tp ? p : *tp;
		due__wheel_free(w);
	}
}

static void run(size_t n)
{
	bench b;
	due_wheel *w;
	double ts, tp, t1, th, tc, ta, tj = 0, bp, bg;
	uint64_t ct, cj = 0;
	int big = n > 2000000;
	size_t capg;

	if (bench_init(&b, n) < 0) {
		fprintf(stderr, "wheel_bench: out of memory for %zu timers\n",
			n);
		bench_fini(&b);
		return;
	}
	pass_start_stop(&b, big ? 2 : 5, &ts, &tp, &t1, &bp);
	w = wheel_open(n, 1);
	pass_start(&b, w);
	th = pass_stop_handle(&b, w);
	pass_start(&b, w);
	tc = pass_churn(&b, w);
	due__wheel_free(w);
	ta = pass_advance(&b, 1, &ct);
	if (!big) /* same cascades as advance_tick; skipped to bound run time */
		tj = pass_advance(&b, 0, &cj);
	bg = bytes_grown(&b, &capg);

	printf("\n%-14s %10s %12s %10s %9s\n", "pass", "timers", "ops/s", "sec",
	       "ns/op");
	row("start", n, (double)n, ts);
	row("stop_id", n, (double)n, tp);
	row("start+stop", n, 2.0 * (double)n, ts + tp);
	row("  first round", n, 2.0 * (double)n, t1);
	row("stop_handle", n, (double)n, th);
	row("churn(pairs)", n, (double)n, tc);
	row("advance_tick", n, (double)n, ta);
	if (tj > 0)
		row("advance_jump", n, (double)n, tj);
	printf("advance_tick: %.0f ticks/s over %" PRId64 " ticks; %" PRIu64
	       " timers cascaded (%.2f per timer)\n",
	       (double)ADVANCE_SPAN / ta, ADVANCE_SPAN, ct,
	       (double)ct / (double)n);
	printf("memory: %.1f bytes/pending timer presized, %.1f grown on "
	       "demand (pool capacity %zu)\n",
	       bp, bg, capg);
	(void)cj;
	bench_fini(&b);
}

int main(int argc, char **argv)
{
	printf("due wheel bench: %d levels, horizon %lld ticks, node+index "
	       "memory from due__wheel_stats_get()\n",
	       DUE_WHEEL_LEVELS_DEFAULT,
	       (long long)1 << (DUE_WHEEL_BITS * DUE_WHEEL_LEVELS_DEFAULT));
	if (argc < 2) {
		run(1000000);
		run(10000000);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		char *end;
		long long v = strtoll(argv[i], &end, 10);

		if (*end || end == argv[i] || v < 1 || v > 100000000) {
			fprintf(stderr,
				"wheel_bench: bad timer count '%s' "
				"(1..100000000)\n",
				argv[i]);
			return 2;
		}
		run((size_t)v);
	}
	return 0;
}
