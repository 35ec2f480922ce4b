/*
** common.c - what every thread of the worker uses, at the bottom of
** src/worker/: the log line, the claimer's eventfd, timed waits on the
** monotonic clock, the lease clock's margin, and the counters
** (due_worker_stats_get).  It calls no other file of the worker, so the
** threads' files (claimer.c, keeper.c, ...), the jobs (job.c) and the
** lifecycle (worker.c) can all use it without a loop.
**
** Any thread may call any of these.  due__wlog writes one line to stderr
** per record; due__wake only writes the eventfd (async-signal-safe, as
** due_worker_stop() needs).  due_worker_stats_get takes mu for a moment.
*/
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker/worker_internal.h"

void due__wlog(due_worker *w, int level, const char *fmt, ...)
{
	char ts[40], msg[1200];
	va_list ap;

	if (level > w->o.log_level)
		return;
	due_time_format(ts, sizeof(ts), due_time_now_host());
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	for (char *c = msg; *c; c++) /* one record, one line */
		if (*c == '\n' || *c == '\r' || *c == '\t')
			*c = ' ';
	fprintf(stderr, "%s due-work[%d] %s: %s\n", ts, (int)getpid(), w->owner,
		msg);
}

void due__wake(due_worker *w)
{
	uint64_t one = 1;
	ssize_t r = write(w->wake_fd, &one, sizeof(one));
	(void)r;
}

/* Wait on the eventfd up to timeout_us (<0: forever); drain it. */
void due__wait_wake(due_worker *w, int64_t timeout_us)
{
	struct pollfd p = {w->wake_fd, POLLIN, 0};
	int ms = timeout_us < 0 ? -1 : (int)((timeout_us + 999) / 1000);
	uint64_t v;

	if (poll(&p, 1, ms) > 0) {
		ssize_t r = read(w->wake_fd, &v, sizeof(v));
		(void)r;
	}
}

void due__cond_wait_us(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t us)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += us / 1000000;
	ts.tv_nsec += (us % 1000000) * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}

int due__cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return rc;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

void due_worker_stats_get(due_worker *w, due_worker_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->claimed = atomic_load(&w->st.claimed);
	out->done = atomic_load(&w->st.done);
	out->failed = atomic_load(&w->st.failed);
	out->dead = atomic_load(&w->st.dead);
	out->stale = atomic_load(&w->st.stale);
	out->cancelled = atomic_load(&w->st.cancelled);
	out->lease_lost = atomic_load(&w->st.lease_lost);
	out->lease_unconfirmed = atomic_load(&w->st.lease_unconfirmed);
	out->stalled_calls = atomic_load(&w->st.stalled_calls);
	out->claim_queries = atomic_load(&w->st.claim_queries);
	out->empty_claims = atomic_load(&w->st.empty_claims);
	out->reclaim_queries = atomic_load(&w->st.reclaim_queries);
	out->wheel_fired = atomic_load(&w->st.wheel_fired);
	out->refills = atomic_load(&w->st.refills);
	out->notifications = atomic_load(&w->st.notifications);
	out->pruned = atomic_load(&w->st.pruned);
	int64_t v[1024];
	pthread_mutex_lock(&w->mu);
	size_t n = w->n_late < 1024 ? w->n_late : 1024;
	memcpy(v, w->late, n * sizeof(v[0]));
	pthread_mutex_unlock(&w->mu);
	qsort(v, n, sizeof(v[0]), cmp_i64);
	out->lateness_p50_us = n ? v[(n - 1) / 2] : -1;
	out->lateness_p99_us = n ? v[(n - 1) * 99 / 100] : -1;
	out->lateness_max_us = n ? v[n - 1] : -1;
	out->store_errors = atomic_load(&w->st.store_errors);
}

/*
** 15 % of the lease (300 ms .. 5 s, at most half the lease): the stop at
** lease - margin leaves a third of it between the SIGKILL at lease - 2/3
** margin and the end of the lease, for a loaded machine to deliver it
** (300 ms with --lease 3s; due verify's stalled_renewal_lease_clock
** measured 28 ms left of the 150 ms that lease/10 left at load 90).
*/
int64_t due__lease_margin(const due_worker *w)
{
	int64_t m = w->o.lease_us * 15 / 100;
	m = m < 300000 ? 300000 : m > 5000000 ? 5000000 : m;
	return m > w->o.lease_us / 2 ? w->o.lease_us / 2 : m;
}

int64_t due__lease_stop_at(const due_worker *w, int64_t sent)
{
	return sent + w->o.lease_us - due__lease_margin(w);
}

int64_t due__lease_kill_at(const due_worker *w, int64_t sent)
{
	return sent + w->o.lease_us - due__lease_margin(w) * 2 / 3;
}
