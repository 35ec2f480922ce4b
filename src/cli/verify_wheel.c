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
**   wheel_retry_punctual         real processes, --poll 30s: a reclaimed
**                                lease, retries, a requeue and a dead
**                                letter's retry are claimed within a
**                                functional bound of when they fell due
**
** No timing assumptions: lateness is measured and printed, never asserted
** (but for wheel_retry_punctual's functional bound: seconds, not the 30 s
** safety poll a missed wake-up costs);
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
	v_kill(a, SIGKILL);
	double crash_ms = v_now_ms() - start;
	int code = v_reap(a, HANG_MS);
	pid_t b = v_worker(v, "b.log", "--owner", "B", "--lease", "1s",
			   "--exec", cmd, (char *)NULL);
	for (double end = v_now_ms() + HANG_MS;
	     done_count(v) < N && v_until(end);)
		v_sleep_ms(20);
	v_kill(b, SIGTERM);
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
	     done_count(v) < N && v_until(end);)
		v_sleep_ms(20);
	for (int i = 0; i < 2; i++) {
		v_kill(w[i], SIGTERM);
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

/*
** wheel_retry_punctual: work that becomes due again reaches the workers'
** wheels as a new task does (issue 36), so each try is as punctual as the
** first (CONTRACT §6).  Every worker runs with `--poll 30s`: a try no
** wheel heard of waits up to that safety poll, far past PUNCTUAL_MS.
** Each step runs alone on the store (a worker refills on any note, and a
** refill brought in by someone else's submit would hide a missed one):
**  1. reclaim: K1 and K2 (wheel, lease 2 s) race for one task; its holder
**     is killed -9; the other, which lost the race and so learned of no
**     lease at a refill, must take the task back when the lease ends
**     (measured from the lease_until read just before the kill: a renewal
**     that slipped in adds a third of the lease) and claim it again;
**  2. retries: a task whose first two tries fail (backoff 200 ms);
**  3. requeue: `due requeue` of a running try;
**  4. dead letter: `due retry` of a DEAD task.
** The lateness of each re-due try is claimed_at - due_at of that try
** (store clock).  The bound is functional: MariaDB's wake-up counter is
** read once a second, the rest is the claim.
*/
#define PUNCTUAL_MS 5000.0

typedef struct re_due {
	due_id id;
	due_state state;
} re_due;

static bool re_due_is(vctx *v, void *arg)
{
	const re_due *r = arg;
	due_task *t = v_get(v, r->id);
	bool is = t && t->state == r->state;
	due_task_free(t);
	return is;
}

static bool listens(vctx *v, void *log)
{
	return v_log_has(v, log, "discovery: timing wheel");
}

/* Lateness of try n (1-based) of task id, ms; -1 when it has none. */
static double try_late_ms(vctx *v, due_id id, int n)
{
	due_task *t = v_get(v, id);
	double ms = -1;
	if (t && (int)t->n_attempts >= n)
		ms = (double)(t->attempts[n - 1].claimed_at -
			      t->attempts[n - 1].due_at) /
		     1000.0;
	due_task_free(t);
	return ms;
}

/* Wait for the task's state; then a step may act on it. */
static bool reach(vctx *v, due_id id, due_state s)
{
	re_due r = {id, s};
	return id && v_wait(v, HANG_MS, re_due_is, &r);
}

static const char re_due_cmd[] =
    "case \"$DUE_KIND:$DUE_ATTEMPT\" in rf:1 | rf:2 | rd:1) exit 1 ;;"
    " rq:1 | rc:1) exec sleep 30 ;; esac";

/* Step 1: *reclaim_ms past the lease read, *late of the second try;
 *step says where it stopped (the task's state and tries then). */
static bool step_reclaim(vctx *v, double *reclaim_ms, double *late, char *step,
			 size_t n)
{
	pid_t k[2];
	bool ok = false;

	k[0] = v_worker(v, "k1.log", "--owner", "K1", "--kinds", "rc",
			"--lease", "2s", "--poll", "30s", "--no-cron", "--exec",
			re_due_cmd, (char *)NULL);
	k[1] = v_worker(v, "k2.log", "--owner", "K2", "--kinds", "rc",
			"--lease", "2s", "--poll", "30s", "--no-cron", "--exec",
			re_due_cmd, (char *)NULL);
	snprintf(step, n, "not_listening");
	if (v_wait(v, HANG_MS, listens, "k1.log") &&
	    v_wait(v, HANG_MS, listens, "k2.log")) {
		/* the line comes just before a worker's first refill: one
		   made after the claim would learn the lease by chance */
		v_sleep_ms(500);
		due_id id = v_add(v, "rc", 0, 2, 200 * 1000, NULL);
		due_task *t = reach(v, id, DUE_CLAIMED) ? v_get(v, id) : NULL;
		snprintf(step, n, "not_claimed");
		if (t && t->lease_owner) {
			int dead = strcmp(t->lease_owner, "K1") ? 1 : 0;
			v_kill(k[dead], SIGKILL);
			v_reap(k[dead], HANG_MS);
			k[dead] = -1;
			bool done = reach(v, id, DUE_DONE);
			due_task *d = v_get(v, id);
			snprintf(step, n, "killed_%s_then_%s/%zu",
				 t->lease_owner,
				 d ? due_state_name(d->state) : "?",
				 d ? d->n_attempts : 0);
			if (done && d && d->n_attempts == 2) {
				snprintf(step, n, "done");
				*reclaim_ms = (double)(d->attempts[0].ended_at -
						       t->lease_until) /
					      1000.0;
				*late = try_late_ms(v, id, 2);
				ok = true;
			}
			due_task_free(d);
		}
		due_task_free(t);
	}
	for (int i = 0; i < 2; i++)
		if (k[i] > 0) {
			v_kill(k[i], SIGTERM);
			v_reap(k[i], HANG_MS);
		}
	return ok;
}

/* Steps 2-4 with one worker: late[] gets the re-due tries' lateness. */
static bool step_retries(vctx *v, double late[4])
{
	bool ok = false;
	pid_t w = v_worker(v, "w.log", "--owner", "W", "--lease", "3s",
			   "--poll", "30s", "--no-cron", "--kill-grace",
			   "200ms", "--exec", re_due_cmd, (char *)NULL);

	if (v_wait(v, HANG_MS, listens, "w.log")) {
		due_id rf = v_add(v, "rf", 0, 3, 200 * 1000, NULL);
		bool a = reach(v, rf, DUE_DONE);
		late[0] = try_late_ms(v, rf, 2);
		late[1] = try_late_ms(v, rf, 3);
		due_id rq = v_add(v, "rq", 0, 5, 200 * 1000, NULL);
		bool b = reach(v, rq, DUE_CLAIMED) &&
			 due_requeue(v->db, rq) == 0 && reach(v, rq, DUE_DONE);
		late[2] = try_late_ms(v, rq, 2);
		due_id rd = v_add(v, "rd", 0, 1, 200 * 1000, NULL);
		bool c = reach(v, rd, DUE_DEAD) && due_retry(v->db, rd) == 0 &&
			 reach(v, rd, DUE_DONE);
		late[3] = try_late_ms(v, rd, 2);
		ok = a && b && c;
	}
	v_kill(w, SIGTERM);
	v_reap(w, HANG_MS);
	return ok;
}

void v_wheel_retry_punctual(vctx *v)
{
	double reclaim_ms = -1, late[5] = {-1, -1, -1, -1, -1};
	bool in_time = true;
	char step[96];

	setenv("DUEV_DIR", v->dir, 1);
	bool ok = step_reclaim(v, &reclaim_ms, &late[4], step, sizeof(step));
	ok = step_retries(v, late) && ok;
	for (int i = 0; i < 5; i++)
		in_time = in_time && late[i] >= 0 && late[i] <= PUNCTUAL_MS;
	in_time = in_time && reclaim_ms <= PUNCTUAL_MS;
	v_case(v, "wheel_retry_punctual", ok && in_time,
	       "poll=30s bound_ms=%.0f late_ms={retry2=%.1f retry3=%.1f "
	       "requeued=%.1f dead_retried=%.1f reclaimed=%.1f} "
	       "reclaim_after_lease_ms=%.1f reclaim_step=%s",
	       PUNCTUAL_MS, late[0], late[1], late[2], late[3], late[4],
	       reclaim_ms, step);
}
