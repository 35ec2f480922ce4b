/*
** verify.h - shared by the parts of `due verify` and `due bench`: the
** scratch store each case runs in (verify_store.c), child processes,
** waiting for conditions and the CASE line printer (verify_util.c).  The
** cases themselves (verify_cases.c, verify_flow.c, verify_negative.c,
** verify_resched.c, verify_stall.c, verify_wheel.c) use these and nothing
** of one another; cmd_verify.c, the command, uses them all.  No backend is
** named here: what a store has and how its scratch stores are made is
** asked of its backend (core/admin.h).
*/
#ifndef DUE_VERIFY_H
#define DUE_VERIFY_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "core/admin.h"
#include "due.h"

typedef struct vctx {
	const char *prog;     /* "due verify" or "due bench", for messages */
	const char *base_url; /* the store named by --db */
	char url[2400];	      /* this case's scratch store */
	char dir[1200];	      /* this case's scratch files */
	char root[1024];      /* parent of every case dir */
	char self[PATH_MAX];  /* the due binary */
	char schema[64];      /* this case's scratch store's name, or "" */
	due_admin *adm;	      /* the backend of base_url */
	due__server *srv;     /* bench: a session on its server, or NULL */
	bool keep;
	int verbose;
	int passed, failed, seq;
	due_db *db; /* handle on the scratch store */
	/* non-empty: the store stopped answering in this case (its error);
	   the case then ends as ERROR, not as a verdict on the contract */
	char unreachable[256];
} vctx;

/* Make the case's scratch store (not yet initialized) and set v->url;
   0 or -1 after a message on stderr. */
int v_scratch_url(vctx *v);
/* Drop the case's scratch store (unless keep); problems go to stderr. */
void v_scratch_drop(vctx *v);
/* Prepare scratch space for base_url: 0, DUE_EINVAL (bad URL) or < 0. */
int v_setup(vctx *v, const char *base_url);
/* Remove the scratch root (unless keep). */
void v_teardown(vctx *v);
/* Make a fresh scratch store + dir for a case; opens v->db.  0 or -1. */
int v_fresh(vctx *v, const char *name);
/* Close and drop the case's scratch store (unless --keep). */
void v_done(vctx *v);
/* Print the CASE line and count it. */
void v_case(vctx *v, const char *name, bool pass, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Spawn `due work --db URL ARGS...` (NULL-terminated), logging to a file. */
pid_t v_worker(vctx *v, const char *log, ...);
/*
** fork() for a child of verify's (a worker, a raw SQL client): in the
** child the signals are SIG_DFL again and the child dies with SIGKILL
** when verify dies, however (kill -9 included: PR_SET_PDEATHSIG); the
** parent keeps the pid to stop it on an interruption (v_stop_children).
*/
pid_t v_fork(void);
/* kill(pid, sig) for a pid of v_worker or v_fork, nothing when pid is not
   one (-1: the fork failed; kill(-1, ...) would hit every process). */
int v_kill(pid_t pid, int sig);
/* Wait for pid up to timeout_ms; returns a shell-style exit code (137 for
   SIGKILL), or -1 on timeout (the child is then killed) or once
   interrupted (every child is then stopped). */
int v_reap(pid_t pid, int timeout_ms);
/* Poll cond every 5 ms until true, timeout_ms or an interruption;
   returns cond's last value (false once interrupted). */
bool v_wait(vctx *v, int timeout_ms, bool (*cond)(vctx *, void *), void *arg);
/* Whether the monotonic clock is before end_ms and no interruption came:
   the condition of a polling loop with a deadline. */
bool v_until(double end_ms);

/*
** Interruption, for `due verify` and `due bench` alike.  v_catch_signals
** makes SIGINT, SIGTERM and SIGHUP ask the run to stop: v_stopped() then
** says which signal (0: none), every wait and sleep here returns early,
** and the command ends the case or workload it is in (no result for it),
** stops the children (v_stop_children), drops the scratch store and ends
** with v_interrupted.  A second signal ends the process at once (the
** children die with it; the scratch store is left, named at the start),
** and so does the first one 20 s later if the stop has not ended by then
** (a store that does not answer holds a call).
*/
void v_catch_signals(void);
int v_stopped(void);
/* SIGTERM (and SIGCONT) to every child left, SIGKILL after a short grace;
   all reaped.  Safe to call again. */
void v_stop_children(void);
/* Say on stderr that the run was interrupted (during `what`, or NULL) and
   return the exit status 128 + the signal. */
int v_interrupted(vctx *v, const char *what);
/* Say on stderr, once, what the run's scratch stores are named, so that
   what a kill -9 leaves can be found and dropped. */
void v_say_scratch(vctx *v);
/* Say on stderr that the case's scratch store is kept (--keep): its name
   and URL (password hidden), for `due scratch drop`. */
void v_say_kept(vctx *v);
/* Schedule a task in the scratch store; returns its id (0 on error). */
due_id v_add(vctx *v, const char *kind, int64_t delay_us, int32_t max_attempts,
	     int64_t backoff_us, const char *payload);
/* The task (caller frees) or NULL. */
due_task *v_get(vctx *v, due_id id);
/*
** SIGKILL the process group whose leader's pid a handler wrote to pidfile
** in the case dir (a handler a kill -9'd worker left running).
*/
void v_kill_orphan(vctx *v, const char *pidfile);
/* Lines in a file of the case dir (0 if missing). */
int v_lines(vctx *v, const char *file);
/* Path of a file in the case dir. */
const char *v_path(vctx *v, const char *file, char *buf, size_t n);
/* Whether the file `name` (a const char *) is in the case dir (v_wait). */
bool v_file_exists(vctx *v, void *name);
/* Whether a line of a file of the case dir contains needle. */
bool v_log_has(vctx *v, const char *log, const char *needle);
/* A -9-killed worker's try ended by the store's reclaim, or by its own
   lease clock first (said in its log). */
bool v_killed_try_end_ok(vctx *v, const char *log, const due_attempt *a);
/* The first of the lease's end seen (until) and the try's own end. */
due_time v_slot_free_at(due_time until, const due_attempt *a);
/*
** A raw SQL session on the case's scratch store (core/admin.h, due__sql),
** for the cases that speak SQL themselves where the store has it
** (DUE_NEED_SQL).  A statement takes up to two int64 parameters $1 $2
** (nparams of them) and an optional text $3, always bound; its first
** column's first cap values go to out.  v_sql_exec returns the row count
** or -1; v_sql_open returns NULL when it cannot connect.  Caller closes
** (NULL is fine).
*/
typedef struct due__sql v_sql;
v_sql *v_sql_open(vctx *v);
int v_sql_exec(v_sql *s, const char *sql, int nparams, int64_t p1, int64_t p2,
	       const char *p3, int64_t *out, int cap);
void v_sql_close(v_sql *s);
/* Monotonic milliseconds. */
double v_now_ms(void);
/* Sleep ms, less when interrupted (v_stopped). */
void v_sleep_ms(int ms);

/* The cases. */
void v_normal_three_workers(vctx *v);
void v_boundary_not_before_due(vctx *v);
void v_boundary_claim_limit(vctx *v);
void v_cancel_semantics(vctx *v);
void v_race_due_vs_cancel(vctx *v);
void v_race_reschedule_vs_claim(vctx *v);
void v_debounce_racing_producers(vctx *v);
void v_after_parent_kill9_releases_once(vctx *v);
void v_after_dead_parent_cancels_children(vctx *v);
void v_retry_backoff_then_done(vctx *v);
void v_retry_exhausted_dead(vctx *v);
void v_crash_kill9_lease_retry(vctx *v);
/* verify_wait.c: due_wait while a real worker runs the tasks (issue 38) */
void v_wait_returns_result(vctx *v);
void v_sigstop_late_commit_rejected(vctx *v);
void v_ext_key_per_task_dedup(vctx *v);
void v_cancel_after_external_call(vctx *v);
void v_negative_naive_select_then_update(vctx *v);
void v_negative_unfenced_late_commit(vctx *v);
void v_negative_ext_key_per_attempt(vctx *v);
void v_row_locks_honoured(vctx *v);
void v_stalled_renewal_lease_clock(vctx *v);
void v_boundary_partial_due_index(vctx *v);
void v_cron_once_per_slot_multi_instance(vctx *v);
void v_cron_misfire_policies(vctx *v);
void v_wheel_fire_exact_tick(vctx *v);
void v_wheel_horizon_rejected(vctx *v);
void v_wheel_restart_needs_durable(vctx *v);
void v_poll_vs_wheel(vctx *v);
void v_wheel_retry_punctual(vctx *v);
void v_flow_pause(vctx *v);
void v_flow_rate(vctx *v);
void v_flow_max_running(vctx *v);
void v_flow_group_limit(vctx *v);
void v_flow_timeout(vctx *v);
void v_flow_kill9_group_slot(vctx *v);

#endif
