/*
** test_wheel.c - unit tests of the timing wheel (src/wheel/wheel.c).
**
** The wheel reads no clock, so every test drives it with a controlled tick
** counter and a fixed-seed PRNG: runs are reproducible.  The seed cases print
** their figures with printf so a run can be compared by eye:
**   wheel_fire_exact_tick       20,000 timers, ~20 % cancelled, tick by tick
**   wheel_fire_jumps            the same in random jumps: never early, ordered
**   wheel_horizon_rejected      horizon-1 accepted, horizon refused
**   wheel_restart_needs_durable crash, rebuild from a simulated store
** then edge cases, a randomized comparison against a brute-force model, and
** allocation failure on every Nth allocation.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wheel/wheel.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

/* splitmix64: small, fixed-seed, good enough for test data. */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi], hi - lo < 2^63. */
static int64_t rng_range(uint64_t *s, int64_t lo, int64_t hi)
{
	return lo + (int64_t)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* A delta spread over all levels: 2^k plus noise, k uniform in 0..bits. */
static int64_t rng_delta(uint64_t *s, unsigned bits)
{
	unsigned k = (unsigned)(rng_next(s) % (bits + 1));
	int64_t base = (int64_t)1 << k;

	return base + rng_range(s, 0, base - 1);
}

static due_wheel *wheel_make(unsigned levels, int64_t start)
{
	due_wheel_opts o = DUE_WHEEL_OPTS_INIT;
	due_wheel *w = NULL;

	o.levels = levels;
	o.start_tick = start;
	assert_int_equal(due__wheel_new(&w, &o), 0);
	assert_non_null(w);
	return w;
}

/* Collects fires: id, due tick, and the wheel's tick at the call. */
typedef struct fired_log {
	due_wheel *w;
	size_t n, cap;
	int64_t *id, *due, *now;
} fired_log;

static void log_fire(int64_t id, int64_t due, void *payload)
{
	fired_log *l = payload;

	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		l->id = realloc(l->id, l->cap * sizeof(int64_t));
		l->due = realloc(l->due, l->cap * sizeof(int64_t));
		l->now = realloc(l->now, l->cap * sizeof(int64_t));
		assert_true(l->id && l->due && l->now);
	}
	l->id[l->n] = id;
	l->due[l->n] = due;
	l->now[l->n] = due__wheel_now(l->w);
	l->n++;
}

static void log_free(fired_log *l)
{
	free(l->id);
	free(l->due);
	free(l->now);
	memset(l, 0, sizeof(*l));
}

/* ------------------------------------------------------------------ */
/* Seed case 1: exact ticks                                            */
/* ------------------------------------------------------------------ */

#define EXACT_N 20000
#define EXACT_SPAN 300000 /* > 64^3: timers live on levels 0..3 */

/* One timer of the exact-tick cases and what happened to it. */
typedef struct xtimer {
	int64_t start_at, delta, due, cancel_at; /* cancel_at -1: never */
	due_wheel_handle h;
	int fires, cancelled, started;
	int64_t fired_tick;
} xtimer;

typedef struct xrun {
	due_wheel *w;
	xtimer *t;
	int64_t target, prev_target, last_due;
	unsigned wrong_tick, early, late, out_of_order, cancelled_fired;
} xrun;

typedef struct xevent {
	int64_t tick;
	int kind; /* 0 start, 1 cancel */
	int idx;
} xevent;

static int xevent_cmp(const void *a, const void *b)
{
	const xevent *x = a, *y = b;

	if (x->tick != y->tick)
		return x->tick < y->tick ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind - y->kind;
	return x->idx - y->idx;
}

static void xfire(int64_t id, int64_t due, void *payload)
{
	xrun *r = payload;
	xtimer *t = &r->t[id];

	t->fires++;
	t->fired_tick = r->target;
	if (due != t->due || due__wheel_now(r->w) != due)
		r->wrong_tick++;
	if (due > r->target)
		r->early++;
	if (due <= r->prev_target)
		r->late++;
	if (due < r->last_due)
		r->out_of_order++;
	if (t->cancelled)
		r->cancelled_fired++;
	r->last_due = due;
}

/*
** Make EXACT_N timers: half start at tick 0 with a due tick anywhere in the
** span, half start at a random moment with a delta spread over all levels.
** About 20 % get a cancel moment strictly before their due tick.  Returns
** the events sorted by tick; *nev gets their number.
*/
static xevent *xtimers_make(xtimer *t, size_t *nev)
{
	xevent *ev = calloc(2 * EXACT_N, sizeof(*ev));
	uint64_t s = 42;
	size_t n = 0;

	assert_non_null(ev);
	for (int i = 0; i < EXACT_N; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		if (i % 2 == 0) {
			t[i].start_at = 0;
			t[i].delta = rng_range(&s, 1, EXACT_SPAN);
		} else {
			t[i].start_at = rng_range(&s, 0, EXACT_SPAN / 2);
			t[i].delta = rng_delta(&s, 17);
		}
		t[i].due = t[i].start_at + t[i].delta;
		t[i].cancel_at = -1;
		if (rng_next(&s) % 5 == 0)
			t[i].cancel_at =
			    rng_range(&s, t[i].start_at, t[i].due - 1);
		ev[n++] = (xevent){t[i].start_at, 0, i};
		if (t[i].cancel_at >= 0)
			ev[n++] = (xevent){t[i].cancel_at, 1, i};
	}
	qsort(ev, n, sizeof(*ev), xevent_cmp);
	*nev = n;
	return ev;
}

/*
** Apply one event at the wheel's current tick.  A start uses the timer's
** delta from now (equal to its planned due tick when advancing tick by
** tick).  Cancels alternate between handle and id.  Returns 1 if a cancel
** took effect.
*/
static int xevent_apply(xrun *r, const xevent *e)
{
	xtimer *t = &r->t[e->idx];
	int rc;

	if (e->kind == 0) {
		t->due = due__wheel_now(r->w) + t->delta;
		t->started = 1;
		rc = due__wheel_start(&t->h, r->w, e->idx, t->due);
		assert_int_equal(rc, 0);
		return 0;
	}
	rc = e->idx % 2 ? due__wheel_stop(r->w, t->h)
			: due__wheel_stop_id(r->w, e->idx);
	if (t->fires) {
		assert_int_equal(rc, DUE_WHEEL_ENOTFOUND);
		return 0;
	}
	assert_int_equal(rc, 0);
	t->cancelled = 1;
	return 1;
}

/* Tally the outcome of a run into missed / dup counts. */
static void xtally(const xtimer *t, unsigned *fired, unsigned *missed,
		   unsigned *dup, unsigned *cancelled)
{
	*fired = *missed = *dup = *cancelled = 0;
	for (int i = 0; i < EXACT_N; i++) {
		*fired += t[i].fires > 0;
		*dup += t[i].fires > 1;
		*cancelled += t[i].cancelled;
		*missed += !t[i].cancelled && t[i].fires == 0;
	}
}

static void wheel_fire_exact_tick(void **state)
{
	xtimer *t = calloc(EXACT_N, sizeof(*t));
	xrun r = {0};
	size_t nev, e = 0;
	xevent *ev;
	unsigned fired, missed, dup, cancelled, wrong = 0;
	due_wheel_stats st;

	(void)state;
	assert_non_null(t);
	ev = xtimers_make(t, &nev);
	r.w = wheel_make(4, 0);
	r.t = t;
	r.prev_target = -1;
	for (int64_t tick = 0; tick <= EXACT_SPAN + (1 << 18); tick++) {
		r.target = tick;
		assert_int_equal(due__wheel_advance(r.w, tick, xfire, &r), 0);
		r.prev_target = tick;
		while (e < nev && ev[e].tick == tick)
			xevent_apply(&r, &ev[e++]);
	}
	xtally(t, &fired, &missed, &dup, &cancelled);
	for (int i = 0; i < EXACT_N; i++)
		wrong += t[i].fires && t[i].fired_tick != t[i].due;
	due__wheel_stats_get(&st, r.w);
	printf("wheel_fire_exact_tick: timers=%d cancelled=%u fired=%u "
	       "wrongTick=%u missed=%u dup=%u cascades=%llu remaining=%zu "
	       "(cascadedTimers=%llu cancelledFired=%u)\n",
	       EXACT_N, cancelled, fired, wrong + r.wrong_tick, missed, dup,
	       (unsigned long long)st.cascades, due__wheel_count(r.w),
	       (unsigned long long)st.cascaded, r.cancelled_fired);
	assert_true(cancelled > EXACT_N / 6 && cancelled < EXACT_N / 4);
	assert_int_equal(fired + cancelled, EXACT_N);
	assert_int_equal(wrong + r.wrong_tick + r.early + r.late, 0);
	assert_int_equal(missed + dup + r.cancelled_fired, 0);
	assert_int_equal(r.out_of_order, 0);
	assert_true(st.cascades > 0);
	assert_int_equal(due__wheel_count(r.w), 0);
	due__wheel_free(r.w);
	free(ev);
	free(t);
}

static void wheel_fire_jumps(void **state)
{
	xtimer *t = calloc(EXACT_N, sizeof(*t));
	xrun r = {0};
	size_t nev, e = 0;
	xevent *ev;
	uint64_t s = 7;
	unsigned fired, missed, dup, cancelled, advances = 0;
	int64_t tick = 0;

	(void)state;
	assert_non_null(t);
	ev = xtimers_make(t, &nev);
	r.w = wheel_make(4, 0);
	r.t = t;
	r.prev_target = -1;
	r.last_due = INT64_MIN;
	while (e < nev || due__wheel_count(r.w) > 0) {
		while (e < nev && ev[e].tick <= tick)
			xevent_apply(&r, &ev[e++]);
		r.prev_target = tick;
		tick += rng_next(&s) % 20 ? rng_range(&s, 0, 512)
					  : rng_range(&s, 4096, 70000);
		r.target = tick;
		assert_int_equal(due__wheel_advance(r.w, tick, xfire, &r), 0);
		advances++;
	}
	xtally(t, &fired, &missed, &dup, &cancelled);
	printf("wheel_fire_jumps: timers=%d cancelled=%u fired=%u advances=%u "
	       "early=%u lateJump=%u outOfOrder=%u missed=%u dup=%u "
	       "remaining=%zu\n",
	       EXACT_N, cancelled, fired, advances, r.early, r.late,
	       r.out_of_order, missed, dup, due__wheel_count(r.w));
	assert_int_equal(fired + cancelled, EXACT_N);
	assert_int_equal(r.wrong_tick + r.early + r.late + r.out_of_order, 0);
	assert_int_equal(missed + dup + r.cancelled_fired, 0);
	due__wheel_free(r.w);
	free(ev);
	free(t);
}

/* ------------------------------------------------------------------ */
/* Seed case 2: horizon                                                */
/* ------------------------------------------------------------------ */

/*
** On a wheel at tick `now`: horizon-1 ahead is accepted and fires exactly on
** its tick, horizon and horizon+1 ahead are refused and change nothing.
*/
static void horizon_check(due_wheel *w, int64_t now)
{
	int64_t h = due__wheel_horizon(w), due;
	fired_log log = {.w = w};

	assert_int_equal(due__wheel_now(w), now);
	assert_int_equal(due__wheel_start(NULL, w, 1, now + h - 1), 0);
	assert_int_equal(due__wheel_start(NULL, w, 2, now + h),
			 DUE_WHEEL_EHORIZON);
	assert_int_equal(due__wheel_start(NULL, w, 1, now + h),
			 DUE_WHEEL_EHORIZON);
	assert_int_equal(due__wheel_start(NULL, w, 3, now + h + 1),
			 DUE_WHEEL_EHORIZON);
	assert_int_equal(due__wheel_find(&due, NULL, w, 1), 0);
	assert_int_equal(due, now + h - 1);
	assert_int_equal(due__wheel_find(NULL, NULL, w, 2),
			 DUE_WHEEL_ENOTFOUND);
	assert_int_equal(due__wheel_count(w), 1);
	assert_int_equal(due__wheel_next_due(w), now + h - 1);
	assert_int_equal(due__wheel_advance(w, now + h - 2, log_fire, &log), 0);
	assert_int_equal(log.n, 0);
	assert_int_equal(due__wheel_advance(w, now + h - 1, log_fire, &log), 0);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.due[0], now + h - 1);
	assert_int_equal(log.now[0], now + h - 1);
	log_free(&log);
}

/* Negative ticks, and the top of the int64 range. */
static void horizon_extremes(void)
{
	due_wheel *w = wheel_make(4, -1000003);
	fired_log log = {0};

	horizon_check(w, -1000003);
	due__wheel_free(w);
	w = wheel_make(4, INT64_MAX - 100);
	log.w = w;
	assert_int_equal(due__wheel_start(NULL, w, 9, INT64_MAX), 0);
	assert_int_equal(due__wheel_advance(w, INT64_MAX, log_fire, &log), 0);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.due[0], INT64_MAX);
	assert_int_equal(due__wheel_next_due(w), DUE_WHEEL_NEVER);
	due__wheel_free(w);
	log_free(&log);
}

static void wheel_horizon_rejected(void **state)
{
	static const unsigned levels[] = {1, 2, 3, 4, 6, 10};
	fired_log log = {0};

	(void)state;
	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		due_wheel *w = wheel_make(levels[i], 0);
		int64_t h = due__wheel_horizon(w), odd;

		assert_int_equal(h, (int64_t)1 << (6 * levels[i]));
		horizon_check(w, 0);
		odd = due__wheel_now(w) + h / 3 + 37; /* non-aligned */
		log.w = w;
		assert_int_equal(due__wheel_advance(w, odd, log_fire, &log), 0);
		horizon_check(w, odd);
		printf("wheel_horizon_rejected: levels=%u horizon=%lld "
		       "accepted=horizon-1 refused=horizon,horizon+1 "
		       "afterAdvanceTo=%lld ok\n",
		       levels[i], (long long)h, (long long)odd);
		due__wheel_free(w);
	}
	log_free(&log);
	horizon_extremes();
}

/* ------------------------------------------------------------------ */
/* Seed case 3: restart from the durable store                         */
/* ------------------------------------------------------------------ */

#define STORE_N 2000
#define STORE_SPAN 10000
#define COMMIT_EVERY 100
#define REFILL_EVERY 256
#define CRASH_AT 5050
#define DOWNTIME 300

/* The "store": survives crashes.  exec counts are the observed effects. */
typedef struct store {
	int64_t due[STORE_N];
	int done[STORE_N];
	int exec[STORE_N];
	int64_t exec_tick[STORE_N];
} store;

/* The worker's memory: lost in a crash. */
typedef struct worker {
	store *st;
	due_wheel *w;
	int inflight[STORE_N]; /* fired, not yet committed */
	int queue[STORE_N];
	int nqueue;
	unsigned early;
} worker;

static void worker_fire(int64_t id, int64_t due, void *payload)
{
	worker *k = payload;

	k->st->exec[id]++;
	k->st->exec_tick[id] = due__wheel_now(k->w);
	if (k->st->exec_tick[id] < k->st->due[id] || due != k->st->due[id])
		k->early++;
	k->inflight[id] = 1;
	k->queue[k->nqueue++] = (int)id;
}

/* Mark every fired task done in the store. */
static void worker_commit(worker *k)
{
	for (int i = 0; i < k->nqueue; i++) {
		k->st->done[k->queue[i]] = 1;
		k->inflight[k->queue[i]] = 0;
	}
	k->nqueue = 0;
}

/*
** Load every task that is not done, not in flight and due inside the
** horizon window.  Tasks already on the wheel are "moved" to the same tick,
** which changes nothing, so the refill needs no memory of what it loaded.
*/
static void worker_refill(worker *k)
{
	int64_t now = due__wheel_now(k->w), h = due__wheel_horizon(k->w);

	for (int i = 0; i < STORE_N; i++) {
		if (k->st->done[i] || k->inflight[i] ||
		    k->st->due[i] - now >= h)
			continue;
		assert_int_equal(due__wheel_start(NULL, k->w, i, k->st->due[i]),
				 0);
	}
}

/* Run the worker from tick `from` to `to`, inclusive. */
static void worker_run(worker *k, int64_t from, int64_t to)
{
	for (int64_t t = from; t <= to; t++) {
		if ((t - from) % REFILL_EVERY == 0)
			worker_refill(k);
		assert_int_equal(due__wheel_advance(k->w, t, worker_fire, k),
				 0);
		if (t % COMMIT_EVERY == 0)
			worker_commit(k);
	}
}

static void wheel_restart_needs_durable(void **state)
{
	store *st = calloc(1, sizeof(*st));
	worker *k = calloc(1, sizeof(*k));
	uint64_t s = 2024;
	int uncommitted, never = 0, twice = 0, more = 0, undone = 0;
	int64_t restart = CRASH_AT + DOWNTIME;

	(void)state;
	assert_true(st && k);
	for (int i = 0; i < STORE_N; i++)
		st->due[i] = rng_range(&s, 0, STORE_SPAN);
	k->st = st;
	k->w = wheel_make(2, 0); /* horizon 4096 < span: refills matter */
	worker_run(k, 0, CRASH_AT);
	uncommitted = k->nqueue;

	/* Crash: the wheel and the worker's memory are gone. */
	due__wheel_free(k->w);
	memset(k, 0, sizeof(*k));
	k->st = st;
	k->w = wheel_make(2, restart);
	worker_run(k, restart, STORE_SPAN + 2 * due__wheel_horizon(k->w));
	worker_commit(k);

	for (int i = 0; i < STORE_N; i++) {
		never += st->exec[i] == 0;
		twice += st->exec[i] == 2;
		more += st->exec[i] > 2;
		undone += !st->done[i];
	}
	printf("wheel_restart_needs_durable: tasks=%d crashAt=%d "
	       "restartAt=%lld uncommittedAtCrash=%d neverRun=%d "
	       "executedTwice=%d moreThanTwice=%d notDone=%d early=%u\n",
	       STORE_N, CRASH_AT, (long long)restart, uncommitted, never, twice,
	       more, undone, k->early);
	assert_true(uncommitted > 0);
	assert_int_equal(never, 0);
	assert_int_equal(twice, uncommitted);
	assert_int_equal(more, 0);
	assert_int_equal(undone, 0);
	assert_int_equal(k->early, 0);
	due__wheel_free(k->w);
	free(k);
	free(st);
}

/* ------------------------------------------------------------------ */
/* Edge cases                                                          */
/* ------------------------------------------------------------------ */

/* Due at the current tick, or before it: fires on the next advance. */
static void wheel_due_now_and_past(void **state)
{
	due_wheel *w = wheel_make(4, 0);
	fired_log log = {.w = w};

	(void)state;
	assert_int_equal(due__wheel_advance(w, 1000, log_fire, &log), 0);
	assert_int_equal(due__wheel_start(NULL, w, 1, 1000), 0);
	assert_int_equal(due__wheel_start(NULL, w, 2, 990), 0);
	assert_int_equal(due__wheel_start(NULL, w, 3, 1001), 0);
	assert_int_equal(due__wheel_next_due(w), 990);
	assert_int_equal(due__wheel_advance(w, 1000, log_fire, &log), 0);
	assert_int_equal(log.n, 2);
	assert_int_equal(log.id[0], 1); /* late ones: start order */
	assert_int_equal(log.due[0], 1000);
	assert_int_equal(log.id[1], 2);
	assert_int_equal(log.due[1], 990);
	assert_int_equal(due__wheel_next_due(w), 1001);
	assert_int_equal(due__wheel_advance(w, 1001, log_fire, &log), 0);
	assert_int_equal(log.n, 3);
	assert_int_equal(log.now[2], 1001);
	assert_int_equal(due__wheel_next_due(w), DUE_WHEEL_NEVER);
	log_free(&log);
	due__wheel_free(w);
}

/* Deltas on and around every level boundary, from aligned and odd ticks. */
static void wheel_level_boundaries(void **state)
{
	static const int64_t deltas[] = {
	    1,	  2,	63,	64,	65,	127,	  128,	   4095,
	    4096, 4097, 262143, 262144, 262145, 16777214, 16777215};
	static const int64_t bases[] = {0,    1,      37,     63,      64, 4095,
					4096, 262143, 262144, 1234567, -77};
	unsigned checked = 0;

	(void)state;
	for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
		for (size_t d = 0; d < sizeof(deltas) / sizeof(deltas[0]);
		     d++) {
			int64_t due = bases[b] + deltas[d];
			due_wheel *w = wheel_make(4, bases[b]);
			fired_log log = {.w = w};

			assert_int_equal(due__wheel_start(NULL, w, 5, due), 0);
			assert_int_equal(due__wheel_next_due(w), due);
			assert_int_equal(
			    due__wheel_advance(w, due - 1, log_fire, &log), 0);
			assert_int_equal(log.n, 0);
			assert_int_equal(due__wheel_next_due(w), due);
			assert_int_equal(
			    due__wheel_advance(w, due, log_fire, &log), 0);
			assert_int_equal(log.n, 1);
			assert_int_equal(log.now[0], due);
			assert_int_equal(due__wheel_count(w), 0);
			log_free(&log);
			due__wheel_free(w);
			checked++;
		}
	}
	printf("wheel_level_boundaries: cases=%u all fired exactly\n", checked);
}

static void wheel_stop_not_found(void **state)
{
	due_wheel *w = wheel_make(4, 0);
	fired_log log = {.w = w};
	due_wheel_handle h1, h2, h3;

	(void)state;
	assert_int_equal(due__wheel_stop_id(w, 12345), DUE_WHEEL_ENOTFOUND);
	assert_int_equal(due__wheel_stop(w, DUE_WHEEL_HANDLE_NONE),
			 DUE_WHEEL_ENOTFOUND);
	assert_int_equal(due__wheel_stop(w, 0xdeadbeef), DUE_WHEEL_ENOTFOUND);
	assert_int_equal(due__wheel_start(&h1, w, 1, 10), 0);
	assert_int_equal(due__wheel_start(&h2, w, 2, 20), 0);
	assert_int_equal(due__wheel_advance(w, 10, log_fire, &log), 0);
	assert_int_equal(due__wheel_stop(w, h1), DUE_WHEEL_ENOTFOUND);
	assert_int_equal(due__wheel_stop_id(w, 1), DUE_WHEEL_ENOTFOUND);
	assert_int_equal(due__wheel_stop(w, h2), 0);
	assert_int_equal(due__wheel_stop(w, h2), DUE_WHEEL_ENOTFOUND);
	assert_int_equal(due__wheel_stop_id(w, 2), DUE_WHEEL_ENOTFOUND);
	/* A stale handle whose node was reused must not stop the new timer. */
	assert_int_equal(due__wheel_start(&h3, w, 3, 30), 0);
	assert_true(h3 != h2 && h3 != h1);
	assert_int_equal(due__wheel_stop(w, h2), DUE_WHEEL_ENOTFOUND);
	assert_int_equal(due__wheel_stop(w, h1), DUE_WHEEL_ENOTFOUND);
	assert_int_equal(due__wheel_count(w), 1);
	assert_int_equal(due__wheel_stop(w, h3), 0);
	assert_int_equal(due__wheel_count(w), 0);
	assert_int_equal(log.n, 1);
	log_free(&log);
	due__wheel_free(w);
}

/* Starting an id that is pending moves its timer (same handle). */
static void wheel_restart_moves(void **state)
{
	due_wheel *w = wheel_make(4, 0);
	fired_log log = {.w = w};
	due_wheel_handle h1, h2;
	int64_t due;

	(void)state;
	assert_int_equal(due__wheel_start(&h1, w, 7, 100), 0);
	assert_int_equal(due__wheel_start(&h2, w, 7, 50), 0);
	assert_true(h1 == h2);
	assert_int_equal(due__wheel_count(w), 1);
	assert_int_equal(due__wheel_find(&due, NULL, w, 7), 0);
	assert_int_equal(due, 50);
	assert_int_equal(due__wheel_next_due(w), 50);
	assert_int_equal(due__wheel_start(NULL, w, 8, 100), 0);
	assert_int_equal(due__wheel_start(NULL, w, 8, 300000), 0);
	assert_int_equal(due__wheel_start(NULL, w, 8, 1 << 30),
			 DUE_WHEEL_EHORIZON);
	assert_int_equal(due__wheel_find(&due, NULL, w, 8), 0);
	assert_int_equal(due, 300000);
	assert_int_equal(due__wheel_advance(w, 200, log_fire, &log), 0);
	assert_int_equal(log.n, 1);
	assert_int_equal(log.id[0], 7);
	assert_int_equal(log.now[0], 50);
	assert_int_equal(due__wheel_advance(w, 299999, log_fire, &log), 0);
	assert_int_equal(log.n, 1);
	assert_int_equal(due__wheel_advance(w, 400000, log_fire, &log), 0);
	assert_int_equal(log.n, 2);
	assert_int_equal(log.now[1], 300000);
	assert_int_equal(due__wheel_count(w), 0);
	log_free(&log);
	due__wheel_free(w);
}

static void wheel_empty_next_due(void **state)
{
	due_wheel *w = wheel_make(4, 5);
	fired_log log = {.w = w};

	(void)state;
	assert_int_equal(due__wheel_next_due(w), DUE_WHEEL_NEVER);
	assert_int_equal(due__wheel_count(w), 0);
	assert_int_equal(due__wheel_start(NULL, w, 1, 70000), 0);
	assert_int_equal(due__wheel_next_due(w), 70000);
	assert_int_equal(due__wheel_stop_id(w, 1), 0);
	assert_int_equal(due__wheel_next_due(w), DUE_WHEEL_NEVER);
	assert_int_equal(due__wheel_advance(w, 100000, log_fire, &log), 0);
	assert_int_equal(log.n, 0);
	assert_int_equal(due__wheel_now(w), 100000);
	assert_int_equal(due__wheel_next_due(NULL), DUE_WHEEL_NEVER);
	log_free(&log);
	due__wheel_free(w);
}

static void wheel_advance_backwards(void **state)
{
	due_wheel *w = wheel_make(4, 0);
	fired_log log = {.w = w};

	(void)state;
	assert_int_equal(due__wheel_start(NULL, w, 1, 99), 0);
	assert_int_equal(due__wheel_advance(w, 100, log_fire, &log), 0);
	assert_int_equal(due__wheel_start(NULL, w, 2, 100), 0); /* late */
	assert_int_equal(due__wheel_advance(w, 99, log_fire, &log),
			 DUE_WHEEL_EPAST);
	assert_int_equal(log.n, 1); /* the refused call fired nothing */
	assert_int_equal(due__wheel_now(w), 100);
	assert_int_equal(due__wheel_advance(w, 100, log_fire, &log), 0);
	assert_int_equal(log.n, 2);
	assert_int_equal(due__wheel_advance(NULL, 101, log_fire, &log),
			 DUE_WHEEL_EINVAL);
	assert_int_equal(due__wheel_advance(w, 101, NULL, &log),
			 DUE_WHEEL_EINVAL);
	log_free(&log);
	due__wheel_free(w);
}

/* next_due stays exact when the earliest timer of a high slot is stopped. */
static void wheel_next_due_exact(void **state)
{
	due_wheel *w = wheel_make(4, 0);

	(void)state;
	assert_int_equal(due__wheel_start(NULL, w, 1, 5000), 0);
	assert_int_equal(due__wheel_start(NULL, w, 2, 5003), 0);
	assert_int_equal(due__wheel_start(NULL, w, 3, 5001), 0);
	assert_int_equal(due__wheel_start(NULL, w, 4, 9000), 0);
	assert_int_equal(due__wheel_next_due(w), 5000);
	assert_int_equal(due__wheel_stop_id(w, 1), 0);
	assert_int_equal(due__wheel_next_due(w), 5001);
	assert_int_equal(due__wheel_stop_id(w, 3), 0);
	assert_int_equal(due__wheel_start(NULL, w, 5, 5002), 0);
	assert_int_equal(due__wheel_next_due(w), 5002);
	assert_int_equal(due__wheel_stop_id(w, 5), 0);
	assert_int_equal(due__wheel_stop_id(w, 2), 0);
	assert_int_equal(due__wheel_next_due(w), 9000);
	assert_int_equal(due__wheel_start(NULL, w, 6, 17), 0);
	assert_int_equal(due__wheel_next_due(w), 17);
	due__wheel_free(w);
}

/* What callbacks may do: start, stop, move; not advance. */
typedef struct reentry {
	due_wheel *w;
	int fires, busy_seen;
	int64_t ids[8], dues[8];
} reentry;

static void reentry_fire(int64_t id, int64_t due, void *payload)
{
	reentry *r = payload;
	int64_t now = due__wheel_now(r->w);

	r->ids[r->fires] = id;
	r->dues[r->fires++] = due;
	if (due__wheel_advance(r->w, now + 1, reentry_fire, r) ==
	    DUE_WHEEL_EBUSY)
		r->busy_seen++;
	if (id == 1 && due == 100) {
		assert_int_equal(due__wheel_stop_id(r->w, 2), 0);
		assert_int_equal(due__wheel_start(NULL, r->w, 10, now + 5), 0);
		assert_int_equal(due__wheel_start(NULL, r->w, 11, now), 0);
		assert_int_equal(due__wheel_start(NULL, r->w, 1, now + 7), 0);
	}
}

static void wheel_callback_reentry(void **state)
{
	due_wheel *w = wheel_make(4, 0);
	reentry r = {.w = w};

	(void)state;
	assert_int_equal(due__wheel_start(NULL, w, 1, 100), 0);
	assert_int_equal(due__wheel_start(NULL, w, 2, 100), 0);
	assert_int_equal(due__wheel_start(NULL, w, 3, 100), 0);
	assert_int_equal(due__wheel_stop_id(w, 3), 0);
	assert_int_equal(due__wheel_start(NULL, w, 3, 100), 0);
	/* Moving 2 to 101 and stopping it from 1's callback at 100. */
	assert_int_equal(due__wheel_stop_id(w, 2), 0);
	assert_int_equal(due__wheel_start(NULL, w, 2, 101), 0);
	assert_int_equal(due__wheel_advance(w, 103, reentry_fire, &r), 0);
	/* 1 and 3 fire at 100; 2 was stopped by 1's callback; 11 is late. */
	assert_int_equal(r.fires, 2);
	assert_int_equal(r.busy_seen, 2);
	assert_int_equal(due__wheel_count(w), 3); /* 10, 11, 1 again */
	assert_int_equal(due__wheel_next_due(w), 100);
	assert_int_equal(due__wheel_advance(w, 107, reentry_fire, &r), 0);
	assert_int_equal(r.fires, 5);
	assert_int_equal(r.ids[2], 11);
	assert_int_equal(r.ids[3], 10);
	assert_int_equal(r.dues[3], 105);
	assert_int_equal(r.ids[4], 1);
	assert_int_equal(r.dues[4], 107);
	due__wheel_free(w);
}

static void *plain_realloc(void *p, size_t n, void *ctx)
{
	(void)ctx;
	return realloc(p, n);
}

static void wheel_bad_args(void **state)
{
	due_wheel_opts o = DUE_WHEEL_OPTS_INIT;
	due_wheel *w = (due_wheel *)&o;

	(void)state;
	o.levels = DUE_WHEEL_LEVELS_MAX + 1;
	assert_int_equal(due__wheel_new(&w, &o), DUE_WHEEL_EINVAL);
	assert_null(w);
	o.levels = 0;		      /* default */
	o.realloc_fn = plain_realloc; /* without free_fn */
	assert_int_equal(due__wheel_new(&w, &o), DUE_WHEEL_EINVAL);
	assert_int_equal(due__wheel_new(NULL, NULL), DUE_WHEEL_EINVAL);
	assert_int_equal(due__wheel_new(&w, NULL), 0);
	assert_int_equal(due__wheel_horizon(w), 16777216);
	assert_int_equal(due__wheel_start(NULL, NULL, 1, 1), DUE_WHEEL_EINVAL);
	assert_int_equal(due__wheel_stop(NULL, 1), DUE_WHEEL_EINVAL);
	assert_string_equal(due__wheel_strerror(DUE_WHEEL_EHORIZON),
			    "DUE_WHEEL_EHORIZON");
	due__wheel_free(w);
	due__wheel_free(NULL);
}

/* ------------------------------------------------------------------ */
/* Randomized comparison with a brute-force model                       */
/* ------------------------------------------------------------------ */

#define MODEL_IDS 512

typedef struct model {
	due_wheel *w;
	int pending[MODEL_IDS], late[MODEL_IDS];
	int64_t due[MODEL_IDS];
	int64_t prev_now, target, last_due;
	int in_late_phase;
	unsigned fires, errors;
} model;

static void model_fire(int64_t id, int64_t due, void *payload)
{
	model *m = payload;

	m->fires++;
	if (id < 0 || id >= MODEL_IDS || !m->pending[id] || m->due[id] != due ||
	    due > m->target) {
		m->errors++;
		return;
	}
	if (m->late[id]) {
		m->errors += !m->in_late_phase;
	} else {
		m->in_late_phase = 0;
		m->errors += due__wheel_now(m->w) != due;
		m->errors += due <= m->prev_now || due < m->last_due;
		m->last_due = due;
	}
	m->pending[id] = 0;
}

/* One random operation against the wheel and the model. */
static void model_step(model *m, uint64_t *s, int64_t h)
{
	int64_t id = (int64_t)(rng_next(s) % MODEL_IDS),
		now = due__wheel_now(m->w);
	unsigned op = (unsigned)(rng_next(s) % 10);

	if (op < 5) {
		unsigned bits = 0, k;
		int64_t d;

		while (((int64_t)1 << bits) < h)
			bits++;
		k = (unsigned)(rng_next(s) % (bits + 1));
		d = now + rng_range(s, -3, ((int64_t)1 << k) + 2);
		int rc = due__wheel_start(NULL, m->w, id, d);

		if (d - now >= h) {
			assert_int_equal(rc, DUE_WHEEL_EHORIZON);
			return;
		}
		assert_int_equal(rc, 0);
		m->pending[id] = 1;
		m->due[id] = d;
		m->late[id] = d <= now;
	} else if (op < 7) {
		assert_int_equal(due__wheel_stop_id(m->w, id),
				 m->pending[id] ? 0 : DUE_WHEEL_ENOTFOUND);
		m->pending[id] = 0;
	} else {
		int64_t next = INT64_MAX;

		for (int i = 0; i < MODEL_IDS; i++)
			if (m->pending[i] && m->due[i] < next)
				next = m->due[i];
		assert_int_equal(due__wheel_next_due(m->w),
				 next == INT64_MAX ? DUE_WHEEL_NEVER : next);
		m->prev_now = now;
		m->target = now + (op == 9 ? rng_range(s, 0, h / 2)
					   : rng_range(s, 0, 70));
		m->last_due = INT64_MIN;
		m->in_late_phase = 1;
		assert_int_equal(
		    due__wheel_advance(m->w, m->target, model_fire, m), 0);
		for (int i = 0; i < MODEL_IDS; i++)
			m->errors += m->pending[i] && m->due[i] <= m->target;
	}
}

static void wheel_model_check(void **state)
{
	uint64_t s = 99;
	unsigned total_fires = 0, steps = 0;

	(void)state;
	for (unsigned levels = 1; levels <= 5; levels++) {
		model *m = calloc(1, sizeof(*m));
		int64_t h;

		assert_non_null(m);
		m->w = wheel_make(levels,
				  (int64_t)(rng_next(&s) % 100000) - 50000);
		h = due__wheel_horizon(m->w);
		for (int i = 0; i < 60000; i++, steps++)
			model_step(m, &s, h);
		assert_int_equal(m->errors, 0);
		total_fires += m->fires;
		due__wheel_free(m->w);
		free(m);
	}
	printf("wheel_model_check: levels=1..5 steps=%u fires=%u errors=0\n",
	       steps, total_fires);
}

/* ------------------------------------------------------------------ */
/* Allocation failure                                                  */
/* ------------------------------------------------------------------ */

/* An allocator that fails the Nth call (and every call after, if sticky). */
typedef struct torture {
	long calls, fail_at, live;
	int sticky;
} torture;

static void *torture_realloc(void *p, size_t n, void *ctx)
{
	torture *t = ctx;
	void *q;

	t->calls++;
	if (t->fail_at &&
	    (t->calls == t->fail_at || (t->sticky && t->calls > t->fail_at)))
		return NULL;
	q = realloc(p, n);
	if (q && !p)
		t->live++;
	return q;
}

static void torture_free(void *p, void *ctx)
{
	torture *t = ctx;

	t->live--;
	free(p);
}

/*
** Run a small workload with an allocator that fails its fail_at'th call
** (and every later one if sticky; fail_at 0: never).  Every failure must be
** DUE_WHEEL_ENOMEM and leave the wheel as it was; nothing may leak.
** Returns how many calls failed with DUE_WHEEL_ENOMEM; *calls gets the
** number of allocator calls made.
*/
static unsigned torture_run(long fail_at, int sticky, long *calls)
{
	torture t = {0, fail_at, 0, sticky};
	due_wheel_opts o = DUE_WHEEL_OPTS_INIT;
	due_wheel *w = NULL;
	fired_log log = {0};
	unsigned failures = 0;
	size_t started = 0;
	int rc;

	o.realloc_fn = torture_realloc;
	o.free_fn = torture_free;
	o.alloc_ctx = &t;
	rc = due__wheel_new(&w, &o);
	if (rc < 0) {
		assert_int_equal(rc, DUE_WHEEL_ENOMEM);
		assert_null(w);
		assert_int_equal(t.live, 0);
		*calls = t.calls;
		return 1;
	}
	log.w = w;
	for (int64_t i = 0; i < 3000; i++) {
		size_t before = due__wheel_count(w);

		rc = due__wheel_start(NULL, w, i, i * 7);
		if (rc < 0) {
			assert_int_equal(rc, DUE_WHEEL_ENOMEM);
			assert_int_equal(due__wheel_count(w), before);
			assert_int_equal(due__wheel_find(NULL, NULL, w, i),
					 DUE_WHEEL_ENOTFOUND);
			failures++;
		} else {
			started++;
		}
	}
	rc = due__wheel_reserve(w, 1 << 16);
	if (rc < 0) {
		assert_int_equal(rc, DUE_WHEEL_ENOMEM);
		failures++;
	}
	assert_int_equal(due__wheel_count(w), started);
	assert_int_equal(due__wheel_advance(w, 30000, log_fire, &log), 0);
	assert_int_equal(log.n, started);
	due__wheel_free(w);
	log_free(&log);
	assert_int_equal(t.live, 0);
	*calls = t.calls;
	return failures;
}

static void wheel_alloc_failure(void **state)
{
	unsigned runs = 0, hit = 0;
	long total, calls;

	(void)state;
	assert_int_equal(torture_run(0, 0, &total), 0);
	for (long n = 1; n <= total; n++) {
		for (int sticky = 0; sticky <= 1; sticky++, runs++)
			hit += torture_run(n, sticky, &calls) > 0;
	}
	printf("wheel_alloc_failure: allocCalls=%ld runs=%u runsWithENOMEM=%u "
	       "leaks=0\n",
	       total, runs, hit);
	assert_int_equal(hit, runs);
}

int main(void)
{
	const struct CMUnitTest seed[] = {
	    cmocka_unit_test(wheel_fire_exact_tick),
	    cmocka_unit_test(wheel_fire_jumps),
	    cmocka_unit_test(wheel_horizon_rejected),
	    cmocka_unit_test(wheel_restart_needs_durable),
	};
	const struct CMUnitTest edge[] = {
	    cmocka_unit_test(wheel_due_now_and_past),
	    cmocka_unit_test(wheel_level_boundaries),
	    cmocka_unit_test(wheel_stop_not_found),
	    cmocka_unit_test(wheel_restart_moves),
	    cmocka_unit_test(wheel_empty_next_due),
	    cmocka_unit_test(wheel_advance_backwards),
	    cmocka_unit_test(wheel_next_due_exact),
	    cmocka_unit_test(wheel_callback_reentry),
	    cmocka_unit_test(wheel_bad_args),
	    cmocka_unit_test(wheel_model_check),
	    cmocka_unit_test(wheel_alloc_failure),
	};
	int failed = 0;

	failed += cmocka_run_group_tests_name("wheel_seed", seed, NULL, NULL);
	failed += cmocka_run_group_tests_name("wheel_edge", edge, NULL, NULL);
	return failed ? 1 : 0;
}
