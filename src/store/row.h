/*
** row.h - the rows every store reads back, listed and decoded once.
**
** Each table a store returns objects from (due_task, due_attempt,
** due_schedule) has its column list here, once, as an X-macro: it gives
** both the SQL text a backend splices into its statements (DUE_TASK_COLS)
** and the enum of column indexes the decoder reads by (DUE_TC_*), so the
** two cannot disagree.  A backend fills a due_rows, a cursor over its
** result with five small callbacks, and the decoders in row.c turn rows
** into due_task, due_attempt, due_cron_info and due_upcoming entries.
** A backend that keeps no SQL (Redis) fills the same cursor over its own
** records, in the order of these lists.
*/
#ifndef DUE_ROW_H
#define DUE_ROW_H

#include "due.h"

/* Column lists: X(ENUM, name) for every column but the last, L(...) last. */
/* clang-format off */
#define DUE_TASK_COLUMNS(X, L)                                                 \
	X(ID, id) X(KIND, kind) X(PAYLOAD, payload) X(STATE, state)            \
	X(DUE_AT, due_at) X(ATTEMPT, attempt) X(ATTEMPT_BASE, attempt_base)    \
	X(MAX_ATTEMPTS, max_attempts) X(BACKOFF_US, backoff_us)                \
	X(BACKOFF_CAP_US, backoff_cap_us) X(LEASE_OWNER, lease_owner)          \
	X(LEASE_UNTIL, lease_until) X(CANCEL_REQUESTED, cancel_requested)      \
	X(KEY, key) X(RESULT, result) X(LAST_ERROR, last_error)                \
	X(CREATED_AT, created_at) X(UPDATED_AT, updated_at)                    \
	X(PRIORITY, priority) X(GRP, grp) X(TIMEOUT_US, timeout_us)          \
	X(AFTER_N, after_n) X(AFTER_LEFT, after_left)                          \
	L(AFTER_ANY_END, after_any_end)
/* clang-format on */

/* clang-format off */
#define DUE_ATTEMPT_COLUMNS(X, L)                                              \
	X(TASK_ID, task_id) X(ATTEMPT, attempt) X(WORKER, worker)              \
	X(CLAIMED_AT, claimed_at) X(DUE_AT, due_at) X(ENDED_AT, ended_at)      \
	X(OUTCOME, outcome) X(ERROR, error) L(LATE_COMMIT, late_commit)
/* clang-format on */

/* clang-format off */
#define DUE_SCHED_COLUMNS(X, L)                                                \
	X(NAME, name) X(EXPR, expr) X(KIND, kind) X(TZ, tz)                    \
	X(PAYLOAD, payload) X(MISFIRE, misfire) X(OVERLAP, overlap)            \
	X(MAX_ATTEMPTS, max_attempts) X(BACKOFF_US, backoff_us)                \
	X(BACKOFF_CAP_US, backoff_cap_us) X(NEXT_SLOT, next_slot)              \
	X(LAST_SLOT, last_slot) X(LAST_TASK, last_task) X(FIRED, fired)        \
	X(MISSED, missed) X(LAST_MISSED, last_missed)                          \
	X(CREATED_AT, created_at) L(UPDATED_AT, updated_at)
/* clang-format on */

/* A due_kind row's settings and counters (the live counts are the store's). */
/* clang-format off */
#define DUE_KIND_COLUMNS(X, L)                                                 \
	X(KIND, kind) X(PAUSED, paused) X(RATE_N, rate_n) X(RATE_US, rate_us)  \
	X(MAX_RUNNING, max_running)                                            \
	X(PER_GROUP, max_running_per_group) X(TIMEOUT_US, timeout_us)         \
	X(HELD_RATE, held_rate) X(HELD_RUNNING, held_running)                  \
	X(HELD_GROUP, held_group) L(UPDATED_AT, updated_at)
/* clang-format on */

#define DUE_COL_TEXT_(e, name) #name ", "
#define DUE_COL_LAST_(e, name) #name

/* "id, kind, ..., updated_at": the SELECT / RETURNING list of each. */
#define DUE_TASK_COLS DUE_TASK_COLUMNS(DUE_COL_TEXT_, DUE_COL_LAST_)
#define DUE_ATTEMPT_COLS DUE_ATTEMPT_COLUMNS(DUE_COL_TEXT_, DUE_COL_LAST_)
#define DUE_SCHED_COLS DUE_SCHED_COLUMNS(DUE_COL_TEXT_, DUE_COL_LAST_)
#define DUE_KIND_COLS DUE_KIND_COLUMNS(DUE_COL_TEXT_, DUE_COL_LAST_)

/*
** What the upserts write: a worker report's counters (due_worker columns
** and due_worker_stats fields of the same names) and a schedule's
** definition (due_schedule columns after name), each in bind order.  An
** SQL store spells its upsert with the column list and the SET list.
*/
/* clang-format off */
#define DUE_WORKER_COUNTERS(X, L)                                              \
	X(claimed) X(done) X(failed) X(dead) X(stale) X(cancelled)             \
	X(lease_lost) X(claim_queries) X(empty_claims) X(reclaim_queries)      \
	L(store_errors)
/* clang-format on */
/* clang-format off */
#define DUE_SCHED_DEF_COLUMNS(X, L)                                            \
	X(expr) X(kind) X(tz) X(payload) X(misfire) X(overlap)                 \
	X(max_attempts) X(backoff_us) X(backoff_cap_us) L(next_slot)
/* clang-format on */

#define DUE_UCOL_(c) #c ", "
#define DUE_UCOL_LAST_(c) #c
#define DUE_USET_(c) #c " = excluded." #c ", "
#define DUE_USET_LAST_(c) #c " = excluded." #c
/* "claimed, ..., store_errors" and "claimed = excluded.claimed, ..." */
#define DUE_WORKER_COUNTER_COLS DUE_WORKER_COUNTERS(DUE_UCOL_, DUE_UCOL_LAST_)
#define DUE_WORKER_COUNTER_SET DUE_WORKER_COUNTERS(DUE_USET_, DUE_USET_LAST_)
#define DUE_SCHED_DEF_COLS DUE_SCHED_DEF_COLUMNS(DUE_UCOL_, DUE_UCOL_LAST_)
#define DUE_SCHED_DEF_SET DUE_SCHED_DEF_COLUMNS(DUE_USET_, DUE_USET_LAST_)

/* The counters of a worker report, in DUE_WORKER_COUNTERS order. */
#define DUE_WORKER_N_COUNTERS 11
void due__worker_counters(const due_worker_stats *w,
			  int64_t v[DUE_WORKER_N_COUNTERS]);

/* DUE_TC_ID, DUE_TC_KIND, ...: the index of each column in its list. */
#define DUE_TC_ENUM_(e, name) DUE_TC_##e,
#define DUE_AC_ENUM_(e, name) DUE_AC_##e,
#define DUE_SC_ENUM_(e, name) DUE_SC_##e,
#define DUE_KC_ENUM_(e, name) DUE_KC_##e,
enum { DUE_TASK_COLUMNS(DUE_TC_ENUM_, DUE_TC_ENUM_) DUE_TC_COUNT };
enum { DUE_ATTEMPT_COLUMNS(DUE_AC_ENUM_, DUE_AC_ENUM_) DUE_AC_COUNT };
enum { DUE_SCHED_COLUMNS(DUE_SC_ENUM_, DUE_SC_ENUM_) DUE_SC_COUNT };
enum { DUE_KIND_COLUMNS(DUE_KC_ENUM_, DUE_KC_ENUM_) DUE_KC_COUNT };
#undef DUE_TC_ENUM_
#undef DUE_AC_ENUM_
#undef DUE_SC_ENUM_
#undef DUE_KC_ENUM_

/*
** A cursor over a backend's result rows.  `next` moves to the next row:
** 1 when there is one, 0 at the end, or a negative code (error set).
** The readers look at the current row; they never fail:
**   is_null  whether the column is SQL NULL
**   i64      an integer or boolean column (NULL reads 0)
**   time     a time column as due_time (NULL reads 0)
**   bytes    a text or blob column, borrowed until the cursor moves, and
**            its length in *len; NULL for SQL NULL (an empty value is
**            not NULL)
*/
typedef struct due_row_ops {
	int (*next)(void *cur);
	bool (*is_null)(void *cur, int col);
	int64_t (*i64)(void *cur, int col);
	due_time (*time)(void *cur, int col);
	const void *(*bytes)(void *cur, int col, size_t *len);
} due_row_ops;

typedef struct due_rows {
	const due_row_ops *ops;
	void *cur; /* the backend's cursor: its statement, its result */
} due_rows;

/*
** A NUL-terminated copy of a text or blob column, *len (may be NULL) its
** length.  NULL for SQL NULL or when out of memory; the decoders tell the
** two apart by is_null.
*/
char *due__row_dup(const due_rows *r, int col, size_t *len);

/* Decode the current row of a DUE_TASK_COLS result into t (zeroed first). */
int due__row_task(const due_rows *r, due_task *t);

/*
** Step through every row into l, which has room for cap items; rows past
** cap are read through and dropped, and a row whose id is NULL (a
** statement's "nothing" row) is skipped.  0 or a negative code; on error
** l holds the rows decoded so far (due_task_list_free releases them).
*/
int due__rows_tasks(const due_rows *r, due_task_list *l, size_t cap);

/* The first row as a new task, or DUE_ENOTFOUND "no task with id ...". */
int due__rows_task_get(const due_rows *r, due_task **out, due_id id);

/*
** Append every DUE_ATTEMPT_COLS row (ordered by task_id, attempt) to the
** history of its task among tasks[0..n), which are ordered by id.
*/
int due__rows_attempts(const due_rows *r, due_task *tasks, size_t n);

/* The first DUE_SCHED_COLS row, or DUE_ENOTFOUND "no schedule named ...". */
int due__rows_sched_get(const due_rows *r, due_cron_info **out,
			const char *name);
/* Every DUE_SCHED_COLS row, in order. */
int due__rows_sched_list(const due_rows *r, due_cron_info_list **out);

/*
** Every (id, due_at) row into out->ids and out->due_at, growing them; a
** row whose id is NULL is skipped.  Sets out->truncated when the rows
** reached `limit`.
*/
int due__rows_upcoming(const due_rows *r, due_upcoming *out, int limit);

/*
** Several earliest-first lists gathered in one (the priorities of a
** SQLite store, the shards of a Redis one): due__upcoming_append adds b's
** entries to out; due__upcoming_merge then orders out by due time, then
** id, and keeps the first `limit` (truncated when it cut any).
*/
int due__upcoming_append(due_upcoming *out, const due_upcoming *b);
int due__upcoming_merge(due_upcoming *out, int limit);

/*
** Every DUE_KIND_COLS row appended to l (settings and held counters; the
** live counts are left 0 for the store to fill).  `each` (may be NULL)
** runs on every decoded row while the cursor is on it, so a store can
** read the columns it put after DUE_KIND_COLS.  On error l keeps the
** rows decoded so far.
*/
int due__rows_kinds(const due_rows *r, due_kind_info_list *l,
		    void (*each)(const due_rows *r, due_kind_info *k));

#endif /* DUE_ROW_H */
