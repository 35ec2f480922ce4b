/*
** flow.h - the flow-control claim, planned once for the backends whose
** claim is several statements in one transaction (sqlite.c, mysql.c).
**
** docs/internals/flow.md is the design.  The planner decides everything
** that does not depend on the dialect: which kinds a claim serves first
** (limited kinds its filter admits, in kind order), how many tasks each
** may take (its running and rate counts against its limits), which of the
** due tasks a pick keeps (a group at its limit is skipped, so it never
** blocks the tasks behind it), what is logged after a pass (the rate log,
** the held-back counters, when to try again), the walk over the distinct
** priorities for the kinds without limits, and the checks of a claim by
** id.  A backend reads its due_kind rows into a due__flow, fills a
** due__flow_ops with its statements and calls due__flow_claim inside the
** claim's transaction.
**
** Every number the planner judges by comes from a callback that asks the
** store, inside the transaction that writes, at the store's time: f->now
** is set by the backend (its clock, read when the claim starts, and again
** by lock and restamp), never read from a clock here.  The planner holds
** no state across claims.  Each write is the backend's statement and
** re-checks its own predicate (state = 'SCHEDULED', due_at <= now); the
** planner only chooses what to ask for.
**
** PostgreSQL (its own SQL per part of the claim) and Redis (one Lua
** script) say the same rules in their own form and do not use it.
*/
#ifndef DUE_FLOW_H
#define DUE_FLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "due.h"
#include "store/row.h"
#include "store/store.h"

typedef struct due__flow due__flow;

/*
** One pass over a limited kind, as its pick (take_kind) sees it: at most
** `room` tasks, `why` the limit that set room (DUE__HELD_*; 0: the
** claim's size did), the group counts for max_running_per_group.
** due__flow_pick keeps `taken` and `held` (DUE__HELD_* of due tasks left
** behind).
*/
typedef struct due__flow_pass {
	const due__flow_kind *k;
	due_time now; /* the pick's and the claim's time */
	int64_t room, taken;
	int why, held;
	due_time oldest; /* the oldest logged claim in the rate window (0) */
	due__groups g;	 /* live tries by group (filled when per_group) */
} due__flow_pass;

/*
** What the planner asks of a backend.  Each returns 0 or a negative DUE_E*
** with the message set; payload is the backend's own (due__flow.payload).
** lock and restamp may be NULL, every other one is called.
*/
typedef struct due__flow_ops {
	/* Tries of kind (of group grp; NULL: every group) holding a lease
	   with lease_until >= now: *n. */
	int (*running)(void *payload, const char *kind, const char *grp,
		       due_time now, int64_t *n);
	/* Claims of kind logged after `since`: *n, and the oldest of them
	   (*oldest; 0 when none). */
	int (*rate)(void *payload, const char *kind, due_time since, int64_t *n,
		    due_time *oldest);
	/* The live tries of every group of kind into g (due__group_slot). */
	int (*groups)(void *payload, const char *kind, due_time now,
		      due__groups *g);
	/* Pick due tasks of p->k at p->now in (priority, due_at) order,
	   asking due__flow_pick of each one until it says DUE__PICK_STOP or
	   the rows end, and claim those it took at p->now: the claimed list
	   (the l of due__flow_claim) holds them when this returns. */
	int (*take_kind)(void *payload, due__flow_pass *p);
	/* The lowest priority above `after` that a SCHEDULED task has: *prio,
	   or *none when there is none. */
	int (*prio_next)(void *payload, int64_t after, int64_t *prio,
			 bool *none);
	/* Take up to `want` due tasks of priority prio, due_at order, of
	   the kinds f's filter admits that are neither paused nor limited:
	   *taken (claimed now, or picked for the backend to claim after
	   due__flow_claim returns). */
	int (*take_prio)(void *payload, const due__flow *f, int64_t prio,
			 int want, int64_t *taken);
	/* The kind and group of task id when it is SCHEDULED and due at
	   now (*kind NULL when not; *grp NULL without a group), each
	   allocated, the caller's to free. */
	int (*id_kind)(void *payload, due_id id, due_time now, char **kind,
		       char **grp);
	/* Take task id when it is SCHEDULED and due at now (claimed now, or
	   picked to be claimed after): *taken 0 or 1. */
	int (*take_id)(void *payload, due_id id, due_time now, int64_t *taken);
	/* After a pass over kind k: log `logged` claims at now in due_rate
	   and delete its rows at or before now - k->rate_us (when logged),
	   add one to each held_* counter of `held` (when held).  Called
	   only when one of them is not 0. */
	int (*log)(void *payload, const due__flow_kind *k, due_time now,
		   int64_t logged, int held);
	/* Lock the due_kind rows of the kinds this claim serves
	   (due__flow_serves), or of `only` alone, in kind order; read their
	   settings again under the lock (due__flow_set) and the store's now
	   after it into f->now.  NULL when the claim's transaction already
	   serializes every claim (SQLite's one write lock). */
	int (*lock)(void *payload, due__flow *f, const char *only);
	/* The store's now again, read after a kind's counts and before its
	   pick: no try of the kind is then claimed at a time before one its
	   counts saw end.  NULL: the claim has one now. */
	int (*restamp)(void *payload, due_time *now);
} due__flow_ops;

/*
** A claim's view of flow control: every due_kind row, the claim's kind
** filter, its time and when to try again.  Zero-initialize, set ops,
** payload, the filter and now, then add the rows (due__flow_add, in kind
** byte order); due__flow_free frees it.
*/
struct due__flow {
	due__flow_kind *k; /* by kind, byte (strcmp) order */
	size_t n, cap;
	bool filtered;		  /* some kind is paused or limited */
	due_time now;		  /* the store's time of the claim */
	int64_t retry_in_us;	  /* when a held kind may have room (0: none) */
	const char *const *kinds; /* the claim's filter */
	size_t n_kinds;
	bool exclude;
	const due__flow_ops *ops;
	void *payload;
};

/* The settings columns of a due_kind row, in this order (NULL as 0). */
enum {
	DUE__FLOW_PAUSED,
	DUE__FLOW_RATE_N,
	DUE__FLOW_RATE_US,
	DUE__FLOW_MAX_RUNNING,
	DUE__FLOW_PER_GROUP,
	DUE__FLOW_TIMEOUT_US,
	DUE__FLOW_NCOLS
};

/* Append the row of `kind` (len bytes) with settings v; DUE_ENOMEM. */
int due__flow_add(due__flow *f, const char *kind, size_t len,
		  const int64_t v[DUE__FLOW_NCOLS]);
/* Set k's settings to v (a row read again under its lock). */
void due__flow_set(due__flow_kind *k, const int64_t v[DUE__FLOW_NCOLS]);
/* Free f's rows. */
void due__flow_free(due__flow *f);

/* Does the claim's filter admit `kind`? */
bool due__flow_admits(const due__flow *f, const char *kind);
/* Is k a limited kind the claim admits, served in its first part? */
bool due__flow_serves(const due__flow *f, const due__flow_kind *k);

/* due__flow_pick's verdicts (an error is a negative DUE_E*). */
enum { DUE__PICK_TAKE = 1, DUE__PICK_SKIP, DUE__PICK_STOP };

/*
** The verdict on the next due task of a pass, in pick order, of group grp
** (n bytes; NULL: none): DUE__PICK_TAKE (counted as taken: the caller
** takes it), DUE__PICK_SKIP (its group is at its limit) or DUE__PICK_STOP
** (room is spent, so the task is held back; stop reading).  DUE_ENOMEM.
*/
int due__flow_pick(due__flow_pass *p, const char *grp, size_t n);

/*
** The claim's plan, run inside its transaction: with only_id, that task
** alone (never one of a paused kind; one of a limited kind only when its
** limits have room, then counted as a claim of the kind); else each
** limited kind the filter admits within its limits, then the other kinds
** by priority, until l (the backend's claimed list; only its count is
** read) holds `limit`.  0 or the first callback's error.
*/
int due__flow_claim(due__flow *f, const due_task_list *l, int limit,
		    due_id only_id);

/* Each claimed task without a time limit gets its kind's; and retry_in_us. */
void due__flow_finish(const due__flow *f, due_task_list *l);

/*
** The kinds of a kind read whose rows hold DUE_KIND_COLS and then the live
** counts running, rate_used, due and group_running (MySQL and PostgreSQL
** count them in the read), into a new *out; *out NULL on error.
*/
int due__flow_kinds_of(due_kind_info_list **out, const due_rows *rows);

#endif
