/*
** verify.h - shared by the parts of `due verify` and `due bench`: the
** scratch store each case runs in (verify_store.c), child processes,
** waiting for conditions and the CASE line printer (verify_util.c).  The
** cases themselves (verify_cases.c, verify_flow.c, verify_negative.c,
** verify_stall.c, verify_wheel.c) use these and nothing of one another;
** cmd_verify.c, the command, uses them all.  No backend is named here:
** what a store has and how its scratch stores are made is asked of its
** backend (core/admin.h).
*/
#ifndef DUE_VERIFY_H
#define DUE_VERIFY_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "core/admin.h"
#include "due.h"

typedef struct vctx {
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
/* Wait for pid up to timeout_ms; returns a shell-style exit code (137 for
   SIGKILL), or -1 on timeout (the child is then killed). */
int v_reap(pid_t pid, int timeout_ms);
/* Poll cond every 5 ms until true or timeout_ms; returns cond's last value. */
bool v_wait(vctx *v, int timeout_ms, bool (*cond)(vctx *, void *), void *arg);
/* Schedule a task in the scratch store; returns its id (0 on error). */
due_id v_add(vctx *v, const char *kind, int64_t delay_us, int32_t max_attempts,
	     int64_t backoff_us, const char *payload);
/* The task (caller frees) or NULL. */
due_task *v_get(vctx *v, due_id id);
/* Lines in a file of the case dir (0 if missing). */
int v_lines(vctx *v, const char *file);
/* Path of a file in the case dir. */
const char *v_path(vctx *v, const char *file, char *buf, size_t n);
/* Whether the file `name` (a const char *) is in the case dir (v_wait). */
bool v_file_exists(vctx *v, void *name);
/* Whether a line of a file of the case dir contains needle. */
bool v_log_has(vctx *v, const char *log, const char *needle);
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
void v_sleep_ms(int ms);

/* The cases. */
void v_normal_three_workers(vctx *v);
void v_boundary_not_before_due(vctx *v);
void v_boundary_claim_limit(vctx *v);
void v_cancel_semantics(vctx *v);
void v_race_due_vs_cancel(vctx *v);
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
