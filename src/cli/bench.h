/*
** bench.h - shared by the files of `due bench` (cmd_bench.c, the command
** and its options; bench_util.c, what every workload uses; bench_report.c,
** the result line; one bench_<workload>.c per workload or pair of them).
**
** A workload runs in a scratch store of its own (verify_store.c, the same
** as `due verify`'s) and reports one bres.  What the store's server
** counts itself it reads through the store's backend (core/admin.h,
** store/counter.h): bench knows kinds of counters, never a backend.
*/
#ifndef DUE_BENCH_H
#define DUE_BENCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <jansson.h>

#include "cli/verify.h"

typedef struct bopts {
	const char *workload;
	long n, concurrency, workers, batch;
	const char *exec;
	int64_t poll_us, spread_us, idle_us;
	bool json;
	bool n_set, workers_set, no_wheel, poll_set, inline_mode;
	const char *pipe; /* --pipe CMD (drain, lateness) */
	bool concurrency_set;
	bool keep;
	long pending;	     /* drain: tasks due in a day filled first */
	long rate;	     /* soak: tasks/s */
	int64_t duration_us; /* soak */
	int64_t retain_us;   /* soak: due_worker_opts.retain_us */
	bool pending_set, soak_set;
	bool pg_autovacuum_default; /* soak: PostgreSQL's own settings */
	int64_t warmup_us;	    /* idle: workers run this long first */
	bool warmup_set;
} bopts;

/* The most WORK counters of a server one result keeps. */
#define BENCH_MAX_WORK 8

/* One WORK counter's move over a phase, per task (bench_work_per_task). */
typedef struct bench_srv_work {
	char name[64];		  /* JSON: NAME_per_task */
	const char *label, *unit; /* text: LABEL=VALUEUNIT/task */
	int digits;
	double per_task;
} bench_srv_work;

typedef struct bres {
	const char *workload;
	const char *variant;
	long n, concurrency;
	double seconds, tasks_per_s;
	double p50, p90, p99, max;
	long early, duplicates, missing;
	long claim_queries; /* drain: store transactions that claimed */
	double queries_per_s, cpu_s;
	/*
	** enqueue, cycle, drain: user + system CPU of this process over the
	** measured phase only (getrusage), per task; 0: not measured.  The
	** worker threads' CPU is in it; a command or pipe handler's and the
	** store server's are not (issue 18's per-task budget).
	*/
	double cpu_us_per_task;
	/*
	** The same phase's store work per task (due_store_work_read: every
	** connection of this process, the workers' included): statements,
	** SQLite VM steps, rows written.  has_work: the store counted any
	** (SQLite only, for now).
	*/
	double stmts_per_task, steps_per_task, rows_per_task;
	bool has_work;
	/*
	** The server's own WORK counters over the phase, per task (e.g.
	** PostgreSQL's WAL bytes and, with pg_stat_statements, its statement
	** time: the sum over every session; a COMMIT's includes its WAL
	** flush); shown when above 0.
	*/
	bench_srv_work srv_work[BENCH_MAX_WORK];
	size_t n_srv_work;
	/* idle: what the server counted over the window (QUERY counters) */
	long long server_queries;
	json_t *server_detail; /* command or Com_* -> count, or NULL */
	double bytes_per_task; /* memory */
	long long bytes_before, bytes_after;
	bool has_late, has_idle, has_check;
	json_t *extra; /* more keys (drain --pending), or NULL; caller frees */
} bres;

/* The store work at a phase's start (bench_work_now). */
typedef struct bwork {
	due_store_work w; /* due_store_work_read: this process's */
	due_counter srv[BENCH_MAX_WORK]; /* the server's WORK counters */
	size_t n_srv;
} bwork;

typedef struct drain_ctx {
	atomic_int *counts; /* runs of ids[i] */
	due_id *ids;	    /* the run's tasks, sorted */
	due_id first;
	long n;
	atomic_long handled;
	due_id last; /* after: the task whose end ends the run */
} drain_ctx;

typedef struct wthread {
	due_worker *w;
	pthread_t th;
	atomic_bool ended; /* due_worker_run returned */
} wthread;

/* bench_report.c: the result, as a JSON object or a text line. */
void bench_report(const bopts *o, const bres *r);

/* --- bench_util.c --- */

/* v_fresh for a benchmark; bench_done closes what it opened.  0 or -1. */
int bench_fresh(vctx *v, const char *name);
void bench_done(vctx *v);
/*
** The session on the store's server (opened the first time, before any
** worker of the workload), or NULL when its backend reports none of
** `kinds` (DUE_COUNTER_*) or it cannot be had (said on stderr when
** `loud`).
*/
struct due__server *bench_server(vctx *v, unsigned kinds, bool loud);
/* The server's counters now into out (cleared first); 0 or -1. */
int bench_server_read(vctx *v, due_counters *out);
/* User + system CPU seconds of this process so far. */
double bench_cpu_seconds(void);
/* The store work now: read before a phase's clocks start. */
bwork bench_work_now(vctx *v);
/* The store work since b0, per task of n, into r (read after the CPU). */
void bench_work_per_task(vctx *v, bres *r, const bwork *b0, double n);
int bench_cmp_id(const void *a, const void *b);
int bench_cmp_double(const void *a, const void *b);
/*
** Submit n bench tasks in batches: due now, or 1 s from now plus a point
** in spread_us (evenly, or at_random).  The first id, 0 on error; ids
** (when not NULL) gets every id, sorted.  bench_fill: without ids.
*/
due_id bench_fill_ids(vctx *v, long n, int64_t spread_us, bool at_random,
		      long batch, due_id *ids);
due_id bench_fill(vctx *v, long n, int64_t spread_us, long batch);
/* due_store_bytes() as JSON: a number, or null. */
json_t *bench_store_bytes(vctx *v);
/* The C no-op handler: counts the runs of d's tasks (payload: d). */
int bench_noop(due_job *job, void *payload);
long bench_id_index(const drain_ctx *d, due_id id);
/* due_worker_run in a thread (arg: a wthread). */
void *bench_wrun(void *arg);
bool bench_all_ended(wthread *ws, long count);
long bench_ended_tries(wthread *ws, long count);
/* Start `count` workers in threads; returns 0 or -1. */
int bench_start_workers(vctx *v, const bopts *o, wthread *ws, long count,
			long conc, bool once, due_handler_fn fn, void *payload,
			due_exec_opts *x);
/* Stop (or wait for) the workers; returns their claim queries in all. */
long bench_stop_workers(wthread *ws, long count, bool stop);

/*
** A workload's workers and their handler: the C no-op counting the runs
** of d's tasks, a command (--exec CMD), or a pipe handler (--pipe CMD,
** its processes started at its slots' first tasks).
*/
typedef struct bench_crew {
	wthread *ws;
	long n;
	due_exec_opts x;
	due_pipe *pipe;
} bench_crew;
/*
** Start n workers of conc slots each (once: each returns when nothing is
** claimable); 0, or -1 after a message (nothing left to stop).
*/
int bench_crew_start(vctx *v, const bopts *o, bench_crew *c, long n, long conc,
		     bool once, drain_ctx *d);
/* Stop (or wait for) them and free the crew; their claim queries. */
long bench_crew_stop(bench_crew *c, bool stop);

/* The workloads (bench_<name>.c). */
void w_enqueue(vctx *v, const bopts *o);
void w_cycle(vctx *v, const bopts *o);
void w_drain(vctx *v, const bopts *o);
void w_lateness(vctx *v, const bopts *o);
void w_idle(vctx *v, const bopts *o);
void w_memory(vctx *v, const bopts *o);
void w_depth(vctx *v, const bopts *o);
void w_soak(vctx *v, const bopts *o);
void w_after(vctx *v, const bopts *o);

#endif /* DUE_BENCH_H */
