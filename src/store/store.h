/*
** store.h - the one interface every store backend implements.
**
** The core (src/core/db.c) validates arguments, fills defaults and owns the
** public API; a backend only says HOW each transition is made durable and
** atomic in its database.  WHAT the transitions are is stated once, here, and
** every backend must keep it:
**
**   claim     SCHEDULED & due_at <= now      -> CLAIMED, attempt+1, lease set,
**                                               attempts row (RUNNING)
**   extend    CLAIMED & attempt & !cancel    -> lease_until = now + lease
**   complete  CLAIMED & attempt & !cancel    -> DONE + result (attempt DONE)
**             CLAIMED & attempt & cancel     -> CANCELLED     (attempt CANCELLED)
**             otherwise                      -> nothing; attempt late_commit mark
**   fail      CLAIMED & attempt              -> CANCELLED if cancel requested,
**                                               DEAD if budget used up,
**                                               else SCHEDULED at now+backoff
**   reclaim   CLAIMED & lease_until < now    -> as fail, due now (LEASE_EXPIRED)
**   cancel    SCHEDULED -> CANCELLED; CLAIMED -> cancel_requested; else report
**   retry     DEAD -> SCHEDULED now, attempt_base = attempt (fresh budget)
**   requeue   CLAIMED -> SCHEDULED now (attempt REQUEUED)
**   kill      SCHEDULED|CLAIMED -> DEAD, or CANCELLED if cancel requested
**
** The budget is used up when attempt - attempt_base >= max_attempts.  Every
** predicate above is checked in the same statement (or the same serialized
** write transaction) that writes: a reclaim never overwrites a completion
** that landed in between (River #1302).  CLAIMED holds exactly when both
** lease fields are set; the schema enforces it with a CHECK.
**
** Version 1 of the table.  To add a method: append it, bump
** DUE_STORE_OPS_VERSION, and let the core check `version` before calling.
*/
#ifndef DUE_STORE_H
#define DUE_STORE_H

#include "due.h"

#define DUE_STORE_OPS_VERSION 4

typedef struct due_store due_store; /* backend-private */
struct due_sched_fire;

/* A parsed store URL. */
typedef struct due_url {
	char scheme[16];   /* "sqlite" or "postgres" */
	char *target;      /* sqlite: file path; postgres: the whole URI */
	bool sync_normal;  /* sqlite ?sync=normal */
	int busy_ms;       /* sqlite ?busy_ms= (default 30000) */
} due_url;

typedef struct due_store_ops {
	int version;
	const char *name;

	int (*open)(due_store **out, const due_url *url, bool create);
	void (*close)(due_store *s);
	/* Create or upgrade the schema to DUE_SCHEMA_VERSION. */
	int (*init_schema)(due_store *s);
	/* DUE_ESCHEMA unless the schema is exactly DUE_SCHEMA_VERSION. */
	int (*check_schema)(due_store *s);
	int (*now)(due_store *s, due_time *out);
	/* Native handle for transaction hooks (sqlite3 * / PGconn *). */
	void *(*native)(due_store *s);

	/* items are validated; defaults filled. */
	int (*schedule)(due_store *s, due_submitted *out, const due_submit *items,
			size_t n);
	int (*cancel)(due_store *s, due_cancel_outcome *out, due_id id);
	int (*get)(due_store *s, due_task **out, due_id id);
	int (*list)(due_store *s, due_task_list **out, const due_list_opts *o);

	/*
	** Claim up to limit due tasks.  With n_kinds > 0 only those kinds, or
	** with exclude every kind but those.  only_id != 0 claims that one
	** task (kinds ignored).
	*/
	int (*claim)(due_store *s, due_task_list **out, const char *owner,
		     const char *const *kinds, size_t n_kinds, bool exclude,
		     int limit, int64_t lease_us, due_id only_id);
	int (*extend)(due_store *s, due_extend_outcome *out, due_id id,
		      int32_t attempt, int64_t lease_us);
	/* Each item gets its own outcome; hook (may be NULL) runs per DONE row. */
	int (*complete)(due_store *s, due_completion *items, size_t n,
			due_tx_hook hook, void *payload);
	int (*fail)(due_store *s, due_fail_outcome *out, due_id id,
		    int32_t attempt, const char *error);
	int (*reclaim)(due_store *s, due_reclaimed *out);

	int (*retry)(due_store *s, due_id id);
	int (*requeue)(due_store *s, due_id id);
	int (*kill)(due_store *s, due_state *out, due_id id);
	int (*stats)(due_store *s, due_stats *out);
	int (*prune)(due_store *s, int64_t *deleted, int64_t older_than_us);

	/* --- version 2: schedules, metrics, worker reports --- */

	/* One schedule; DUE_ENOTFOUND when there is none by that name. */
	int (*sched_get)(due_store *s, due_schedule_info **out, const char *name);
	/*
	** Insert or replace the definition (checked by the core) with the
	** next slot the core computed.  A replace keeps last_slot, last_task,
	** fired, missed and last_missed.
	*/
	int (*sched_put)(due_store *s, const due_cron_def *d, due_time next_slot);
	int (*sched_remove)(due_store *s, const char *name);
	int (*sched_list)(due_store *s, due_schedule_list **out);
	/*
	** In ONE transaction: advance the schedule's next_slot from f->expect
	** to f->next (compare-and-set: *won = false and nothing written when
	** next_slot is no longer f->expect, i.e. another scheduler did it);
	** insert f->task when given (due at f->task->opts.at) and set
	** last_slot = f->slot, last_task = its id, fired += 1; add f->missed to
	** missed and set last_missed = f->last_missed when f->missed > 0.
	*/
	int (*sched_fire)(due_store *s, const struct due_sched_fire *f, bool *won,
			  due_id *task_id);
	int (*metrics)(due_store *s, due_metrics *out);
	int (*worker_report)(due_store *s, const char *owner,
			     const due_worker_stats *st);

	/* --- version 3: discovery without polling --- */

	/* SCHEDULED tasks due before `until`, earliest first (see due.h). */
	int (*upcoming)(due_store *s, due_upcoming *out, const char *const *kinds,
			size_t n_kinds, bool exclude, due_time until, int limit);
	/* Start listening; *fd is readable when a submit may have happened. */
	int (*listen)(due_store *s, int *fd);
	int (*listen_drain)(due_store *s, int *count);
	/* Wake every listener (done by submits after commit). */
	int (*notify)(due_store *s);

	/* --- version 4: the hot path --- */

	/* complete (as `complete`, no hook) then claim, in one transaction. */
	int (*complete_claim)(due_store *s, due_completion *items, size_t n,
			      const char *owner, const char *const *kinds,
			      size_t n_kinds, bool exclude, int limit,
			      int64_t lease_us, due_task_list **out);
} due_store_ops;

/* A scheduler's step for one schedule (see sched_fire). */
typedef struct due_sched_fire {
	const char *name;
	due_time expect;         /* next_slot as read */
	due_time next;           /* the new next_slot */
	const due_submit *task;  /* the slot's task, or NULL (skip/wait) */
	due_time slot;           /* the slot the task stands for */
	int64_t missed;
	due_time last_missed;
} due_sched_fire;

extern const due_store_ops due_store_sqlite;
#ifdef DUE_WITH_PG
extern const due_store_ops due_store_pg;
#endif

/* URL parsing (src/store/url.c).  DUE_EINVAL with a message on bad input. */
int due_url_parse(due_url *out, const char *text);
void due_url_clear(due_url *u);

/* Helpers shared by backends (src/store/common.c). */
int due_schedule_list_alloc(due_schedule_list **out, size_t n);
void due_schedule_info_clear(due_schedule_info *i);
extern const char *const due_outcome_names[DUE_OUT_COUNT];
int due_task_list_alloc(due_task_list **out, size_t n);
char *due_strdup_n(const char *s, size_t n);
int due_attempts_append(due_task *t, const due_attempt *a);
/*
** The verdict on a store's schema version v (-1: no due schema): 0 when it
** is DUE_SCHEMA_VERSION, else DUE_ESCHEMA with a message naming `store`
** and what to run; `where` follows "has no due schema" (may be "").
*/
int due_schema_verdict(const char *store, int v, const char *where);

/* Stats window for lateness percentiles. */
#define DUE_STATS_WINDOW_US (300LL * 1000000LL)

#endif /* DUE_STORE_H */
