/*
** verify_stall.c - stalled_renewal_lease_clock (issue 35): a renewal that
** hangs on another client's lock cannot leave a handler running beside
** the task's next attempt.
**
** The lease is the promise the rest stands on: while the store may hand
** a task to another worker, no handler of the old try may still run.  A
** renewal that fails is easy; one that never returns is the hard case,
** and a store can be made to hold one back from inside, with no fault at
** all, by another client's lock:
**
**   PostgreSQL, MySQL  a second session holds the task's row
**                      (BEGIN; SELECT ... FROM due_task WHERE id = $1
**                      FOR UPDATE): the renewal's UPDATE queues behind it
**   SQLite             a second connection holds the one write lock
**                      (BEGIN IMMEDIATE): every writer waits
**
** Redis runs each call whole, as one script, and no client can hold a
** lock that another's call waits on; stalling it means stalling the
** server or the network, which the process tests do with a frozen TCP
** proxy (tests/cli/stallproxy.py).  Such a store lacks DUE_NEED_STALL:
** cmd_verify.c skips the case there and says why, in its backend's words.
**
** The timeline, with real `due work` processes:
**   1. worker A (--lease 5s, --kill-grace 60s) claims the task; its
**      attempt-1 handler records its pid and start time (field 22 of
**      /proc/PID/stat, so a reused pid is never mistaken for it), ignores
**      SIGTERM (trap '' TERM, inherited by its children) and runs until
**      killed: only the lease clock's SIGKILL can stop it, never the
**      kill grace;
**   2. the case takes the lock, then reads the task's lease_until: under
**      the lock no renewal can move it, so it is the end of the lease the
**      store granted, in the store's clock;
**   3. the case watches the handler's process until it no longer runs
**      (gone, or a zombie), reading the store's clock before each look
**      and after the last: the moment it stopped lies between the last
**      look that found it running and that upper bound, which must be
**      before lease_until;
**   4. worker B starts; the lock is held until the store's clock is
**      half a lease past lease_until (well over a lease in all), then
**      released; B or A takes the task back (a reclaim, or A's failed
**      try retried: the handler died of a signal) and runs attempt 2;
**   5. the attempt-2 handler, first thing, looks for the attempt-1
**      process (same pid, same start time) and records what it finds.
** PASS: the handler stopped before lease_until, attempt 2 found it gone
** (not running, not a zombie), the task is DONE at attempt 2 with one
** result and one effect, and A's log says "lease not confirmed".
**
** No timing assumptions: every step waits for a condition with a deadline
** (HANG_MS guards against a hang and claims nothing).  The figures are
** measured, not asserted: detect_ms (lock taken to handler stopped, local
** clock), stop_before_lease_ms (lease_until less the stop's upper bound,
** store clock) and stop_window_ms (how closely the stop was seen),
** held_ms, and overlap_ms (store clock; 0 when attempt 2 started after
** the handler stopped, as it must).
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/verify.h"

#define SEC 1000000LL
#define MS 1000LL
/* a deadline guards against a hang, it claims nothing */
#define HANG_MS 60000
/*
** The lease of both workers.  The worker kills at lease - margin/2 after
** the last confirmed send (margin lease/10, at least 100 ms): 250 ms
** before the store's lease ends at 5 s.  Shorter leases leave too little
** of it on a loaded machine: at 3 s (150 ms) a run at load 90 on two
** cores kept 28 ms.  The case takes about 1.5 leases and a second.
*/
#define LEASE_ARG "5s"
#define LEASE_US (5 * SEC)
#define NAME "stalled_renewal_lease_clock"

/*
** The handler of both workers.  Attempt 1 records "PID START" (written
** whole, then renamed into place) and loops with TERM ignored until it is
** killed.  Attempt 2 and later record whether that process is still there
** ("gone", or "present:STATE" with its /proc state letter), then add one
** effect and answer.
*/
static const char handler[] =
    "d=\"$DUEV_DIR\"; "
    "if [ \"$DUE_ATTEMPT\" = 1 ]; then "
    "trap '' TERM; "
    "echo \"$$ $(cut -d' ' -f22 /proc/$$/stat)\" > \"$d/a1.tmp\"; "
    "mv \"$d/a1.tmp\" \"$d/a1.pid\"; "
    "while :; do sleep 0.05; done; "
    "fi; "
    "read -r p s < \"$d/a1.pid\"; "
    "x=$(cut -d' ' -f3,22 \"/proc/$p/stat\" 2>/dev/null); "
    "if [ -n \"$x\" ] && [ \"${x#* }\" = \"$s\" ]; "
    "then r=\"present:${x%% *}\"; else r=gone; fi; "
    "echo \"$DUE_ATTEMPT $r\" >> \"$d/a2.check\"; "
    "echo \"$DUE_ATTEMPT\" >> \"$d/effects\"; "
    "echo done";

/* What the case knows of the attempt-1 handler and the lease it ran on. */
typedef struct stall {
	due_id id;
	long pid;		  /* the attempt-1 handler's shell */
	unsigned long long start; /* its start time (/proc, clock ticks) */
	double t_lock, t_end;	  /* local ms: lock taken, handler stopped */
	due_time until;		  /* the store's lease_until, under the lock */
	due_time s_run;		  /* store clock: last seen running after */
	due_time s_end;		  /* store clock: seen stopped by (t_end) */
	due_time hold_until;	  /* store clock: the lock is held till then */
	due_time s_kill;	  /* store clock: the case killed it (a FAIL) */
	const char *lock;	  /* what the lock is (due__sql_hold) */
} stall;

typedef struct want {
	due_id id;
	due_state state;
	int32_t attempt;
} want;

static void set_dir_env(vctx *v) { setenv("DUEV_DIR", v->dir, 1); }

static void stop_worker(pid_t pid)
{
	if (pid > 0) {
		v_kill(pid, SIGTERM);
		v_reap(pid, HANG_MS);
	}
}

static bool want_state(vctx *v, void *arg)
{
	want *w = arg;
	due_task *t = v_get(v, w->id);
	bool r = t && t->state == w->state && t->attempt >= w->attempt;
	due_task_free(t);
	return r;
}

/* The first line of a file of the case dir into buf ("" if none). */
static void first_line(vctx *v, const char *file, char *buf, size_t n)
{
	char p[1300];
	FILE *f = fopen(v_path(v, file, p, sizeof(p)), "r");

	buf[0] = '\0';
	if (f) {
		if (fgets(buf, (int)n, f))
			buf[strcspn(buf, "\n")] = '\0';
		fclose(f);
	}
}

/*
** The state letter of process pid while it is still the process that
** started at `start` (field 22 of /proc/PID/stat), or 0 once that process
** is gone (no entry, or the pid names another process now).  The fields
** are counted after the last ')', so a command name with spaces in it
** cannot shift them.
*/
static char proc_state(long pid, unsigned long long start)
{
	char path[64], buf[1024], st;
	unsigned long long t;
	size_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if ((f = fopen(path, "r"))) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	const char *s = strrchr(buf, ')');
	/* ") S ppid ... " : the state is field 3, the start time field 22 */
	if (!s || sscanf(s + 1,
			 " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
			 "%*s %*s %*s %*s %*s %*s %llu",
			 &st, &t) != 2)
		return 0;
	return t == start ? st : 0;
}

/* Read a1.pid, "PID START", written by the attempt-1 handler. */
static bool read_a1(vctx *v, stall *s)
{
	char line[128];

	first_line(v, "a1.pid", line, sizeof(line));
	return sscanf(line, "%ld %llu", &s->pid, &s->start) == 2 && s->pid > 1;
}

/*
** v_wait condition: the attempt-1 handler no longer runs (gone, or dead
** and not yet reaped).  Brackets the moment in the store's clock: read
** before a check that finds it running, the store time is a lower bound
** (s_run); read after the check that finds it stopped, an upper bound
** (s_end).  Also notes the local time it was seen stopped.
*/
static bool a1_stopped(vctx *v, void *arg)
{
	stall *s = arg;
	due_time before;
	bool known = due_now(v->db, &before) == 0;
	char st = proc_state(s->pid, s->start);

	if (st && st != 'Z' && st != 'X') {
		s->s_run = known ? before : 0;
		return false;
	}
	s->t_end = v_now_ms();
	if (due_now(v->db, &s->s_end) < 0)
		s->s_end = 0;
	return true;
}

/* The store's clock has passed t. */
static bool store_past(vctx *v, due_time t)
{
	due_time now;
	return due_now(v->db, &now) == 0 && now > t;
}

/* v_wait condition: the lock has been held long enough. */
static bool hold_over(vctx *v, void *arg)
{
	return store_past(v, ((stall *)arg)->hold_until);
}

/*
** v_wait condition: the handler stopped, or the hold is over without it
** (a FAIL, but the case goes on to show what attempt 2 then meets).
*/
static bool stopped_or_over(vctx *v, void *arg)
{
	return a1_stopped(v, arg) || hold_over(v, arg);
}

/*
** Take the lock that stalls the renewal of task id, as the store's
** backend holds one (due__sql_hold: its one write lock, or the task's
** row FOR UPDATE).  Then read the lease the store granted,
** which no renewal can move while the lock is held.  Returns the session
** (caller rolls back and closes), or NULL after closing it.
*/
static v_sql *take_lock(vctx *v, stall *s)
{
	v_sql *q = v_sql_open(v);
	bool ok = q != NULL;

	ok = ok && due__sql_hold(q, s->id, &s->lock) == 0;
	s->t_lock = v_now_ms();
	due_task *t = ok ? v_get(v, s->id) : NULL;
	ok = t && t->state == DUE_CLAIMED && t->attempt == 1;
	s->until = ok ? t->lease_until : 0;
	due_task_free(t);
	if (!ok) {
		v_sql_close(q);
		return NULL;
	}
	return q;
}

/* Let go of the lock (a rollback: the session wrote nothing). */
static void release_lock(v_sql *q)
{
	if (q)
		v_sql_exec(q, "ROLLBACK", 0, 0, 0, NULL, NULL, 0);
	v_sql_close(q);
}

/*
** A failed run may leave the attempt-1 handler alive (the lease clock did
** not stop it): kill its process group, once the pid is sure to be it,
** and note when in the store's clock (s_kill: where its overlap ends).
*/
static void kill_leftover(vctx *v, stall *s)
{
	char st = s->pid > 1 ? proc_state(s->pid, s->start) : 0;
	pid_t g;

	if (!st || st == 'Z' || st == 'X')
		return;
	if (due_now(v->db, &s->s_kill) < 0)
		s->s_kill = 0;
	if ((g = getpgid((pid_t)s->pid)) > 1)
		kill(-g, SIGKILL);
	v_kill((pid_t)s->pid, SIGKILL);
}

/* Milliseconds as text, or "?" when a bound was never read. */
static const char *ms_or_unknown(bool known, double ms, char *buf, size_t n)
{
	if (!known)
		return "?";
	snprintf(buf, n, "%.0f", ms);
	return buf;
}

/*
** The CASE line, from what the run left behind.  stop_window_ms is how
** closely the stop was seen (s_run to s_end): the precision of
** stop_before_lease_ms.  overlap_ms compares the stop's upper bound (or,
** when it never stopped, the case's kill) with attempt 2's claim, both in
** the store's clock;
** a1_at_a2_start is what the attempt-2 handler found ("gone", or
** "present:STATE").
*/
static void report(vctx *v, const stall *s, bool ok, double held_ms)
{
	due_task *t = v_get(v, s->id);
	char check[64], by[32] = "-", a1[32] = "-", b1[32], b2[32], b3[32];
	int effects = v_lines(v, "effects");
	bool logged = v_log_has(v, "a.log", "lease not confirmed");
	due_time end = s->s_end ? s->s_end : s->s_kill;
	double overlap = 0;

	first_line(v, "a2.check", check, sizeof(check));
	const char *found = strchr(check, ' ');
	if (t && t->n_attempts > 1) {
		snprintf(by, sizeof(by), "%s", t->attempts[1].worker);
		snprintf(a1, sizeof(a1), "%s", t->attempts[0].outcome);
		if (end > t->attempts[1].claimed_at)
			overlap =
			    (double)(end - t->attempts[1].claimed_at) / 1000.0;
	}
	bool gone = strcmp(check, "2 gone") == 0;
	bool in_time = s->s_end && s->until && s->s_end < s->until;
	bool final = t && t->state == DUE_DONE && t->attempt == 2 &&
		     t->n_attempts == 2 && t->has_result &&
		     strncmp((const char *)t->result, "done", 4) == 0;
	v_case(
	    v, NAME,
	    ok && in_time && gone && overlap == 0 && final && effects == 1 &&
		logged,
	    "lock=%s lease_ms=%lld detect_ms=%s stop_before_lease_ms=%s "
	    "stop_window_ms=%s held_ms=%.0f overlap_ms=%.0f a1_at_a2_start=%s "
	    "final=%s "
	    "attempt=%d attempt1=%s attempt2_by=%s effects=%d "
	    "lease_not_confirmed_logged=%s",
	    s->lock ? s->lock : "?", (long long)(LEASE_US / MS),
	    ms_or_unknown(s->t_end > 0, s->t_end - s->t_lock, b1, sizeof(b1)),
	    ms_or_unknown(s->s_end && s->until,
			  (double)(s->until - s->s_end) / 1000.0, b2,
			  sizeof(b2)),
	    ms_or_unknown(s->s_end && s->s_run,
			  (double)(s->s_end - s->s_run) / 1000.0, b3,
			  sizeof(b3)),
	    held_ms, overlap, found ? found + 1 : "none",
	    t ? due_state_name(t->state) : "?", t ? t->attempt : 0, a1, by,
	    effects, logged ? "true" : "false");
	due_task_free(t);
}

void v_stalled_renewal_lease_clock(vctx *v)
{
	stall s = {0};
	want claimed = {0, DUE_CLAIMED, 1}, done = {0, DUE_DONE, 2};
	v_sql *lock = NULL;
	pid_t a, b = -1;
	double held_ms = -1;

	set_dir_env(v);
	s.id = claimed.id = done.id = v_add(v, "stall", 0, 5, 50 * MS, "x");
	a = v_worker(v, "a.log", "--owner", "A", "--lease", LEASE_ARG,
		     "--kill-grace", "60s", "--exec", handler, (char *)NULL);
	bool ok = s.id && a > 0 &&
		  v_wait(v, HANG_MS, v_file_exists, "a1.pid") &&
		  read_a1(v, &s) && v_wait(v, HANG_MS, want_state, &claimed);
	/* the handler runs: stall A's renewals from here on */
	ok = ok && (lock = take_lock(v, &s)) != NULL;
	if (ok) {
		/* the lease runs out in the store, and half a lease more */
		s.hold_until = s.until + LEASE_US / 2;
		ok = v_wait(v, HANG_MS, stopped_or_over, &s);
		b = v_worker(v, "b.log", "--owner", "B", "--lease", LEASE_ARG,
			     "--poll", "20ms", "--exec", handler, (char *)NULL);
		ok &= v_wait(v, HANG_MS, hold_over, &s);
	}
	held_ms = lock ? v_now_ms() - s.t_lock : -1;
	release_lock(lock);
	ok = ok && v_wait(v, HANG_MS, want_state, &done);
	/* first a handler left running (a FAIL): it ignores A's SIGTERM */
	kill_leftover(v, &s);
	stop_worker(a);
	stop_worker(b);
	report(v, &s, ok, held_ms);
}
