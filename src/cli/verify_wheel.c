/*
** verify_wheel.c - the discovery cases of `due verify` (seed 000's wheel
** model, and the wheel + store hybrid the seed left unbuilt).
**
**   wheel_fire_exact_tick        model: 20,000 timers, ~20% cancelled while
**                                advancing; every other fires on its tick
**   wheel_horizon_rejected       model: horizon-1 accepted, horizon refused
**   wheel_restart_needs_durable  real processes: a worker holding part of
**                                the work in its wheel is killed -9; a new
**                                worker rebuilt from the store runs every
**                                task (re-runs only where fencing allows)
**   poll_vs_wheel                real processes: lateness and claim queries
**                                of polling at 50 ms, 500 ms and the wheel
**
** No timing assumptions: lateness is measured and printed, never asserted;
** the crash comes once the first worker is seen working, not after a
** sleep; waits have a deadline of HANG_MS that only guards a hang.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/verify.h"
#include "wheel/wheel.h"

#define HANG_MS                                                                \
	60000 /* a deadline guards against a hang, it claims nothing           \
	       */

typedef struct fire_check {
	int64_t now;  /* tick being fired (advanced one at a time) */
	int64_t *due; /* due tick per id, -1 once cancelled */
	int *fired;   /* times each id fired */
	long wrong;
} fire_check;

static void on_fire(int64_t id, int64_t due_tick, void *payload)
{
	fire_check *c = payload;
	c->fired[id]++;
	if (due_tick != c->due[id] || c->now != c->due[id])
		c->wrong++;
}

void v_wheel_fire_exact_tick(vctx *v)
{
	enum { N = 20000 };
	fire_check c = {0};
	due_wheel *w = NULL;
	due_wheel_opts o = DUE_WHEEL_OPTS_INIT;
	long cancelled = 0, fired = 0, missed = 0, dup = 0;
	uint64_t rng = 0x9E3779B97F4A7C15ull;

	c.due = calloc(N, sizeof(*c.due));
	c.fired = calloc(N, sizeof(*c.fired));
	o.levels = 3; /* 64^3 ticks, as the seed's model */
	if (!c.due || !c.fired || due__wheel_new(&w, &o) < 0) {
		v_case(v, "wheel_fire_exact_tick", false, "error=alloc");
		goto done;
	}
	for (int i = 0; i < N; i++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		c.due[i] = 1 + (int64_t)((rng >> 33) % 262000);
		due__wheel_start(NULL, w, i, c.due[i]);
	}
	for (c.now = 1; c.now <= 262144; c.now++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		if ((rng >> 40) % 26 == 0) { /* cancel a random pending timer */
			int id = (int)((rng >> 16) % N);
			if (c.due[id] > c.now &&
			    due__wheel_stop_id(w, id) == 0) {
				c.due[id] = -1;
				cancelled++;
			}
		}
		due__wheel_advance(w, c.now, on_fire, &c);
	}
	for (int i = 0; i < N; i++) {
		if (c.due[i] < 0) {
			dup += c.fired[i] > 0; /* a cancelled one fired */
			continue;
		}
		fired += c.fired[i] > 0;
		missed += c.fired[i] == 0;
		dup += c.fired[i] > 1;
	}
	due_wheel_stats st;
	due__wheel_stats_get(&st, w);
	v_case(v, "wheel_fire_exact_tick",
	       c.wrong == 0 && missed == 0 && dup == 0 &&
		   due__wheel_count(w) == 0,
	       "model=in-process-wheel timers=%d cancelled=%ld fired=%ld "
	       "wrong_tick=%ld missed=%ld dup=%ld cascades=%llu remaining=%zu",
	       N, cancelled, fired, c.wrong, missed, dup,
	       (unsigned long long)st.cascades, due__wheel_count(w));
done:
	due__wheel_free(w);
	free(c.due);
	free(c.fired);
}

static void count_none(int64_t id, int64_t due_tick, void *payload)
{
	(void)id;
	(void)due_tick;
	(*(int64_t *)payload)++;
}

void v_wheel_horizon_rejected(vctx *v)
{
	due_wheel *w = NULL;
	due_wheel_opts o = DUE_WHEEL_OPTS_INIT;
	int at = -1, beyond = 0;

	o.levels = 3;
	if (due__wheel_new(&w, &o) == 0) {
		int64_t fired = 0;
		due__wheel_advance(w, 12345, count_none,
				   &fired); /* not aligned */
		int64_t h = due__wheel_horizon(w), now = due__wheel_now(w);
		at = due__wheel_start(NULL, w, 1, now + h - 1);
		beyond = due__wheel_start(NULL, w, 2, now + h);
		v_case(v, "wheel_horizon_rejected",
		       at == 0 && beyond == DUE_WHEEL_EHORIZON,
		       "model=in-process-wheel horizon=%lld "
		       "schedule_at_horizon=[%s: "
		       "delta=%lld] schedule_at_horizon_minus_1=%s",
		       (long long)h, due__wheel_strerror(beyond), (long long)h,
		       at == 0 ? "accepted" : due__wheel_strerror(at));
	} else {
		v_case(v, "wheel_horizon_rejected", false, "error=alloc");
	}
	due__wheel_free(w);
}

static int64_t done_count(vctx *v)
{
	due_stats st;
	return due_stats_get(v->db, &st) == 0 ? st.counts[DUE_DONE] : -1;
}

static bool has_effects(vctx *v, void *arg)
{
	return v_lines(v, "effects") >= *(int *)arg;
}

void v_wheel_restart_needs_durable(vctx *v)
{
	enum { N = 300 };
	const char *cmd =
	    "echo \"$DUE_TASK_ID\" >> \"$DUEV_DIR/effects\"; sleep 0.05";
	int64_t claimed_by_a = 0, twice = 0, more = 0, never = 0;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;

	setenv("DUEV_DIR", v->dir, 1);
	for (int i = 0; i < N; i++)
		v_add(v, "rw", 500000 + (int64_t)i * 4000000 / N, 5, 0, NULL);
	/* A holds only the next second in its wheel; killed -9 once it has
	   run a tenth of the tasks (mid-work, whatever the machine's speed) */
	int tenth = N / 10;
	double start = v_now_ms();
	pid_t a = v_worker(v, "a.log", "--owner", "A", "--horizon", "1s",
			   "--lease", "1s", "--exec", cmd, (char *)NULL);
	bool working = v_wait(v, HANG_MS, has_effects, &tenth);
	kill(a, SIGKILL);
	double crash_ms = v_now_ms() - start;
	int code = v_reap(a, HANG_MS);
	pid_t b = v_worker(v, "b.log", "--owner", "B", "--lease", "1s",
			   "--exec", cmd, (char *)NULL);
	for (double end = v_now_ms() + HANG_MS;
	     done_count(v) < N && v_now_ms() < end;)
		v_sleep_ms(20);
	kill(b, SIGTERM);
	v_reap(b, HANG_MS);
	/* how many times did each task's handler run? */
	int *runs = calloc(N + 1, sizeof(*runs));
	char p[1300];
	FILE *f = fopen(v_path(v, "effects", p, sizeof(p)), "r");
	lo.limit = N;
	lo.attempts = true;
	if (due_list(v->db, &l, &lo) == 0 && runs && f) {
		long long id;
		due_id first = l->count ? l->items[0].id : 0;
		while (fscanf(f, "%lld", &id) == 1)
			if (id - first >= 0 && id - first < N)
				runs[id - first]++;
		for (size_t i = 0; i < l->count; i++) {
			const due_task *t = &l->items[i];
			claimed_by_a += t->n_attempts &&
					!strcmp(t->attempts[0].worker, "A");
			never += t->state != DUE_DONE;
			twice += runs[i] == 2;
			more += runs[i] > 2;
		}
	}
	if (f)
		fclose(f);
	free(runs);
	v_case(v, "wheel_restart_needs_durable",
	       working && code == 137 && l && l->count == N && never == 0 &&
		   more == 0,
	       "tasks=%d crash_after_ms=%.0f horizon_a_s=1 claimed_by_a=%lld "
	       "after_rebuild={never=%lld executed_twice=%lld "
	       "more_than_twice=%lld}",
	       N, crash_ms, (long long)claimed_by_a, (long long)never,
	       (long long)twice, (long long)more);
	due_task_list_free(l);
}

typedef struct lat {
	double p50, p99, max;
	long early, done;
	long long queries;
} lat;

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Run 2 workers over 300 tasks spread over 2 s; lateness and queries. */
static void run_variant(vctx *v, const char *name, const char *const *extra,
			lat *out)
{
	enum { N = 300 };
	double late[N];
	size_t k = 0;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	due_metrics *m = NULL;
	pid_t w[2];

	memset(out, 0, sizeof(*out));
	if (v_fresh(v, name) < 0)
		return;
	for (int i = 0; i < 2; i++) {
		char owner[16];
		snprintf(owner, sizeof(owner), "%s-%d", name, i);
		w[i] = v_worker(v, "w.log", "--owner", owner, "--no-cron",
				"--exec", "true", extra[0], extra[1], extra[2],
				(char *)NULL);
	}
	v_sleep_ms(300);
	for (int i = 0; i < N; i++)
		v_add(v, "pw", 300000 + (int64_t)i * 2000000 / N, 5, 0, NULL);
	for (double end = v_now_ms() + HANG_MS;
	     done_count(v) < N && v_now_ms() < end;)
		v_sleep_ms(20);
	for (int i = 0; i < 2; i++) {
		kill(w[i], SIGTERM);
		v_reap(w[i], HANG_MS);
	}
	lo.limit = N;
	lo.attempts = true;
	if (due_list(v->db, &l, &lo) == 0)
		for (size_t i = 0; i < l->count; i++) {
			const due_task *t = &l->items[i];
			out->done += t->state == DUE_DONE;
			if (!t->n_attempts)
				continue;
			double ms =
			    (double)(t->attempts[0].claimed_at - t->due_at) /
			    1000.0;
			out->early += ms < 0;
			late[k++] = ms;
		}
	due_task_list_free(l);
	qsort(late, k, sizeof(late[0]), cmp_d);
	if (k) {
		out->p50 = late[(k - 1) / 2];
		out->p99 = late[(k - 1) * 99 / 100];
		out->max = late[k - 1];
	}
	if (due_metrics_get(v->db, &m) == 0)
		out->queries = m->claim_queries + m->reclaim_queries;
	due_metrics_free(m);
	v_done(v);
}

void v_poll_vs_wheel(vctx *v)
{
	const char *p50[] = {"--no-wheel", "--poll", "50ms"};
	const char *p500[] = {"--no-wheel", "--poll", "500ms"};
	const char *wheel[] = {"--poll", "5s", NULL};
	lat a, b, c;

	v_done(v); /* each variant gets a store of its own */
	run_variant(v, "poll50", p50, &a);
	run_variant(v, "poll500", p500, &b);
	run_variant(v, "wheel", wheel, &c);
	v_fresh(v, "poll_vs_wheel"); /* the driver closes one store */
	v_case(
	    v, "poll_vs_wheel",
	    a.done == 300 && b.done == 300 && c.done == 300 &&
		a.early + b.early + c.early == 0,
	    "tasks=300 workers=2 poll=50ms{p50=%.1f p99=%.1f max=%.1f "
	    "queries=%lld} poll=500ms{p50=%.1f p99=%.1f max=%.1f queries=%lld} "
	    "wheel{p50=%.1f p99=%.1f max=%.1f queries=%lld} early=%ld",
	    a.p50, a.p99, a.max, a.queries, b.p50, b.p99, b.max, b.queries,
	    c.p50, c.p99, c.max, c.queries, a.early + b.early + c.early);
}
