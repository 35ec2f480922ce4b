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
**             & lease_until >= now              (a lapsed lease is lost even
**                                               before the reclaim: its
**                                               slot may be another's)
**   complete  CLAIMED & attempt & !cancel    -> DONE + result, last_error
**                                               cleared (attempt DONE; the
**                                               history keeps every error)
**             CLAIMED & attempt & cancel     -> CANCELLED (attempt
**                                               CANCELLED)
**             otherwise                      -> nothing; attempt
**                                               late_commit mark
**   fail      CLAIMED & attempt              -> CANCELLED if cancel requested,
**                                               DEAD if budget used up,
**                                               else SCHEDULED at now+backoff
**   reclaim   CLAIMED & lease_until < now    -> as fail, due now
**                                               (LEASE_EXPIRED)
**   cancel    SCHEDULED -> CANCELLED; CLAIMED -> cancel_requested; else report
**   reschedule SCHEDULED -> SCHEDULED at the new due_at (at, or store-now
**             + delay), payload replaced when set_payload, listeners
**             woken; else report (CLAIMED: TOO_LATE; DONE, DEAD,
**             CANCELLED: ALREADY_FINISHED) and write nothing
**   retry     DEAD -> SCHEDULED now, attempt_base = attempt (fresh budget)
**   requeue   CLAIMED -> SCHEDULED now (attempt REQUEUED)
**   kill      SCHEDULED|CLAIMED -> DEAD, or CANCELLED if cancel requested
**
** Flow control (docs/internals/flow.md).  A claim takes no task of a
** paused kind.  For a kind with a rate or running limit ("limited") the
** claim is serialized per kind (SQLite's write lock; PostgreSQL a row lock
** on its due_kind row, then statements with a fresh snapshot) and counts,
** inside that serialization: running = CLAIMED tries of the kind whose
** lease_until >= now (per group likewise); rate_used = claims logged in
** due_rate with at > now - rate_us.  It takes at most min(limit left,
** max_running - running, rate_n - rate_used) tasks, at most
** max_running_per_group - group running per group, skipping full groups
** (no head-of-line blocking).  Limited kinds are served first, then the
** other kinds fill the rest of the claim; within each, the lowest
** priority first, then the earliest due_at.  When due tasks were left
** because of a limit, the returned list's retry_in_us says when to try
** again (rate: when the oldest logged claim leaves the window; running:
** a short re-poll).  upcoming never returns tasks of paused kinds.
**
** The budget is used up when attempt - attempt_base >= max_attempts.  Every
** predicate above is checked in the same statement (or the same serialized
** write transaction) that writes: a reclaim never overwrites a completion
** that landed in between (River #1302).  CLAIMED holds exactly when both
** lease fields are set; the schema enforces it with a CHECK.
**
** Backends.  Each backend is one `const due_store_ops due__store_<name>`
** in its own file (sqlite.c, pg.c, mysql.c, and redis_shard.c over
** redis.c), listed once in the table of src/store/registry.c; the table is
** the only place that names them (src/core/native.c lists the public
** due_schedule_<name>_tx, which the ABI names).  An ops struct carries the URL
** schemes it answers to, its own URL parser, and a capability bitfield
** (DUE_STORE_CAP_*) that tells the core and the worker what the store can
** do; nothing outside the backend's file asks for a backend by name.  What
** backends share (the column lists, the row decoders, the migration walk,
** the names of states and outcomes) lives in row.c, common.c and
** src/base/names.c, so a backend writes only what its database does
** differently.  docs/internals/store.md walks through adding one.
**
** Version 11 of the table (DUE_STORE_OPS_VERSION).  due_open() refuses a
** backend whose `version` differs, or that leaves a method NULL (the
** methods of a capability it does not claim may be NULL).  Every backend
** lives in this tree, so a change to the table changes them all in the
** same commit: bump the version, add the method to the struct and to
** DUE_STORE_METHODS (or to its capability's list) below; the build fails
** (registry.c) when a method is in one and not the other.
**   4  the hot path: complete_claim.
**   5  the table of backends: schemes, parse_url/free_cfg (open takes the
**      parsed config), caps, native_tx and schedule_on_native.
**   6  flow control: kind_put/get/list/remove, fail records an outcome,
**      claims obey the kinds' settings and set retry_in_us.
**   8  open takes due_open_params: the bound of every wait (issue 35).
**   9  the admin group (DUE_STORE_CAP_ADMIN, due_store_admin): scratch
**      stores, the server's counters and a raw SQL session, so that `due
**      verify`, `due bench` and the tests name no backend (issue 37).
**  10  reschedule (issue 38): SCHEDULED -> SCHEDULED at a new time.
**  11  listen_done: wake-ups for finished tasks, for due_wait (issue 38).
*/
#ifndef DUE_STORE_H
#define DUE_STORE_H

#include "store/counter.h"
#include "due.h"

#define DUE_STORE_OPS_VERSION 11

/*
** A schema step that changes nothing in the tables and only records its
** version (the SQL stores' due_meta): v is the version as a string literal.
** Such a step makes a store of the version before run `due init`, which
** re-creates the routines of the stores that have them.
*/
#define DUE_SCHEMA_RECORD(v)                                                   \
	"UPDATE due_meta SET value = '" v "' WHERE name = 'schema_version'"

/* The window of due_metrics' histograms and outcomes. */
#define DUE_METRICS_WINDOW_US (15LL * 60 * 1000000)

typedef struct due_store due_store; /* backend-private */
struct due_cron_fire;

/*
** Capabilities (due_store_ops.caps, due__db_caps()).
**
** HOST_CLOCK  the store's clock is this host's clock (due_time_now_host),
**             so a worker may time its wheel against the host clock
**             exactly instead of asking the store for now.
** NOTIFY      listen/listen_drain/notify wake other processes when a task
**             may have become due; without it the core answers due_listen
**             with DUE_ESTATE and workers poll.
** TX_SUBMIT   native_tx/schedule_on_native: a submit inside the caller's
**             own transaction on its own native connection (the public
**             due_schedule_<backend>_tx, one line each in src/core/native.c).
*/
#define DUE_STORE_CAP_HOST_CLOCK (1u << 0)
#define DUE_STORE_CAP_NOTIFY (1u << 1)
#define DUE_STORE_CAP_TX_SUBMIT (1u << 2)
/*
** ADMIN       due_store_ops.admin is set: scratch stores beside the
**             user's, the server's own counters (due_store_admin).
** SQL         admin's sql_open/exec/close: a raw SQL session on a store,
**             in which `due verify`'s controls write tables of their own.
** ROW_LOCKS   in that session, SELECT ... FOR UPDATE locks rows, and SKIP
**             LOCKED and NOWAIT see the locks (verify probes them).
** STALL       admin's sql_hold: one session can hold what another's write
**             of a task waits on (verify stalls a lease renewal with it).
** PLAN        admin's plan_check: the claim's query plan can be read and
**             judged (verify's boundary_partial_due_index).
*/
#define DUE_STORE_CAP_ADMIN (1u << 3)
#define DUE_STORE_CAP_SQL (1u << 4)
#define DUE_STORE_CAP_ROW_LOCKS (1u << 5)
#define DUE_STORE_CAP_STALL (1u << 6)
#define DUE_STORE_CAP_PLAN (1u << 7)

/*
** A store URL split at its scheme.  All three point into (or are copied
** from) the text the caller gave; what follows the scheme is the
** backend's to read (parse_url).
*/
typedef struct due_url {
	const char *text;   /* the whole URL, for messages */
	char scheme[16];    /* before the first ':', e.g. "sqlite" */
	const char *rest;   /* after "scheme:", without the core's timeout= */
	int64_t timeout_us; /* ?timeout=DUR, 0 when not given */
	char *owned;	    /* rest, when timeout= had to be cut out of it */
} due_url;

/*
** What open() is told besides the backend's own config: whether to create
** the schema, and the bound of every wait for the store (connect, each
** read and write, lock and busy waits), > 0.  A call that gets no answer
** within it fails with due__store_no_answer() and the backend makes the
** connection again before its next call.
*/
typedef struct due_open_params {
	bool create;
	int64_t timeout_us;
} due_open_params;

/* The transaction state of a caller's native connection (native_tx). */
enum {
	DUE_NATIVE_TX_OPEN = 0, /* a transaction is open and usable */
	DUE_NATIVE_TX_NONE,	/* no transaction: the caller must BEGIN */
	DUE_NATIVE_TX_FAILED	/* it failed: the caller must ROLLBACK */
};

struct due_store_admin;

typedef struct due_store_ops {
	int version;		    /* DUE_STORE_OPS_VERSION */
	const char *name;	    /* due_db_backend(), messages */
	const char *const *schemes; /* URL schemes it answers, NULL-ended */
	unsigned caps;		    /* DUE_STORE_CAP_* */
	/* DUE_STORE_CAP_ADMIN: its admin group (NULL without it) */
	const struct due_store_admin *admin;

	/*
	** Read url->rest (its path, host, options) into *cfg, a private
	** config that open() receives and free_cfg() releases.  Nothing is
	** opened yet.  DUE_EINVAL with a message quoting url->text on bad
	** input (an unknown option is an error that names it).
	*/
	int (*parse_url)(void **cfg, const due_url *url);
	void (*free_cfg)(void *cfg);
	/* *out is set even on failure, so the core can close it. */
	int (*open)(due_store **out, const void *cfg, const due_open_params *p);
	void (*close)(due_store *s);
	/* Create or upgrade the schema to DUE_SCHEMA_VERSION (due__migrate). */
	int (*init_schema)(due_store *s);
	/* DUE_ESCHEMA unless the schema is exactly DUE_SCHEMA_VERSION. */
	int (*check_schema)(due_store *s);
	int (*now)(due_store *s, due_time *out);
	/* Native handle for transaction hooks (sqlite3 * / PGconn *). */
	void *(*native)(due_store *s);

	/* items are validated; defaults filled. */
	int (*schedule)(due_store *s, due_submitted *out,
			const due_submit *items, size_t n);
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
	/*
	** Each item gets its own outcome; hook (may be NULL) runs per DONE
	** row, through due__store_run_hook().
	*/
	int (*complete)(due_store *s, due_completion *items, size_t n,
			due_tx_hook hook, void *payload);
	/* as: DUE_OUT_FAILED or DUE_OUT_TIMED_OUT, the attempt's outcome. */
	int (*fail)(due_store *s, due_fail_outcome *out, due_id id,
		    int32_t attempt, const char *error, due_outcome as);
	int (*reclaim)(due_store *s, due_reclaimed *out);
	/* complete (as `complete`, no hook) then claim, in one transaction. */
	int (*complete_claim)(due_store *s, due_completion *items, size_t n,
			      const char *owner, const char *const *kinds,
			      size_t n_kinds, bool exclude, int limit,
			      int64_t lease_us, due_task_list **out);

	int (*retry)(due_store *s, due_id id);
	int (*requeue)(due_store *s, due_id id);
	int (*kill)(due_store *s, due_state *out, due_id id);
	/*
	** stats and metrics never scan the whole task or attempts table:
	** their cost at 1,000,000 tasks stays within 3x of their cost at
	** 1,000.  Exact: CLAIMED, DEAD, due_unclaimed and its oldest age
	** (bounded by the partial indexes: what runs, what is dead, what is
	** overdue).  SCHEDULED, DONE and CANCELLED (totals and per kind) are
	** exact when they are small or kept exactly at a drain cost <= 5 %,
	** else an estimate with its bit set in out->estimated
	** (kinds_estimated).  metrics' histograms, outcomes and done_per_min
	** cover the tries claimed in the last DUE_METRICS_WINDOW_US (index on
	** claimed_at); out->pruned sums the live workers' reported `pruned`.
	*/
	int (*stats)(due_store *s, due_stats *out);
	/*
	** Delete DONE and CANCELLED tasks whose end (updated_at) is more than
	** older_than_us before store-now, with their attempt and audit rows,
	** at most DUE_PRUNE_BATCH tasks a transaction, oldest first; stop
	** after max_rows tasks (0: until none is left).  Never SCHEDULED,
	** CLAIMED or DEAD (re-checked in the statement that deletes).
	*/
	int (*prune)(due_store *s, int64_t *deleted, int64_t older_than_us,
		     int64_t max_rows);
	/*
	** A store-wide named lease (retention's "one pruner at a time"):
	** *held = true when `owner` holds `name` until store-now + ttl_us
	** after the call: taken when free or expired, renewed when already
	** ours; false (nothing written) while another owner's lease runs.
	** One atomic statement or script; the store's clock.
	*/
	int (*lock_take)(due_store *s, bool *held, const char *name,
			 const char *owner, int64_t ttl_us);
	/* due_store_bytes(): what the store occupies (see due.h). */
	int (*bytes)(due_store *s, int64_t *out);

	/* One schedule; DUE_ENOTFOUND when there is none by that name. */
	int (*cron_get)(due_store *s, due_cron_info **out, const char *name);
	/*
	** Insert or replace the definition (checked by the core) with the
	** next slot the core computed.  A replace keeps last_slot, last_task,
	** fired, missed and last_missed.
	*/
	int (*cron_put)(due_store *s, const due_cron_def *d,
			due_time next_slot);
	int (*cron_remove)(due_store *s, const char *name);
	int (*cron_list)(due_store *s, due_cron_info_list **out);
	/*
	** In ONE transaction: advance the schedule's next_slot from f->expect
	** to f->next (compare-and-set: *won = false and nothing written when
	** next_slot is no longer f->expect, i.e. another scheduler did it);
	** insert f->task when given (due at f->task->opts.at) and set
	** last_slot = f->slot, last_task = its id, fired += 1; add f->missed to
	** missed and set last_missed = f->last_missed when f->missed > 0.
	*/
	int (*cron_fire)(due_store *s, const struct due_cron_fire *f, bool *won,
			 due_id *task_id);
	int (*metrics)(due_store *s, due_metrics *out);
	int (*worker_report)(due_store *s, const char *owner,
			     const due_worker_stats *st);
	/* SCHEDULED tasks due before `until`, earliest first (see due.h). */
	int (*upcoming)(due_store *s, due_upcoming *out,
			const char *const *kinds, size_t n_kinds, bool exclude,
			due_time until, int limit);

	/*
	** Flow control.  kind_put applies the checked changes of *set (-1:
	** keep) to the kind's row, creating it, and wakes listeners.
	** kind_get: DUE_ENOTFOUND when the kind has no row; with group
	** non-NULL, also fills group_running.  kind_list: every row, by kind.
	** kind_remove: DUE_ENOTFOUND when none; wakes listeners.
	*/
	int (*kind_put)(due_store *s, const char *kind,
			const due_kind_settings *set);
	int (*kind_get)(due_store *s, due_kind_info **out, const char *kind,
			const char *group);
	int (*kind_list)(due_store *s, due_kind_info_list **out);
	int (*kind_remove)(due_store *s, const char *kind);

	/*
	** reschedule (the transition above): one atomic statement, script
	** or serialized transaction that re-checks state = SCHEDULED where
	** it writes.  o is checked (the core): o->at is DUE_TIME_NONE (then
	** due_at = the store's now + o->delay_us, computed by the store) or
	** an instant; the payload is replaced only when o->set_payload.
	** Wakes listeners after the commit when it wrote.
	*/
	int (*reschedule)(due_store *s, due_reschedule_outcome *out, due_id id,
			  const due_reschedule_opts *o);

	/* --- DUE_STORE_CAP_NOTIFY (NULL without it) --- */

	/* Start listening; *fd is readable when a submit may have happened. */
	int (*listen)(due_store *s, int *fd);
	int (*listen_drain)(due_store *s, int *count);
	/* Wake every listener (done by submits after commit). */
	int (*notify)(due_store *s);

	/* --- DUE_STORE_CAP_TX_SUBMIT (NULL without it) --- */

	/* DUE_NATIVE_TX_* of the caller's connection `conn`. */
	int (*native_tx)(void *conn);
	/*
	** Insert one checked submit through `conn`, inside the transaction
	** the caller holds open (the core checked it with native_tx).  *out
	** as for `schedule`.  DUE_ESCHEMA when that database has no due
	** schema.  The caller commits, and wakes listeners with due_notify().
	*/
	int (*schedule_on_native)(void *conn, due_submitted *out,
				  const due_submit *item);

	/*
	** Version 10.  Listen for finished tasks instead of new ones (a
	** handle does one or the other): *fd is readable when a task may
	** have reached DONE, DEAD or CANCELLED since; listen_drain consumes
	** it.  The backend wakes these listeners from every transition that
	** finishes a task (complete, fail, reclaim, cancel, kill, requeue),
	** after or within its commit, at most once per statement or batch;
	** a store whose notifications cost the drain whether or not anyone
	** listens (PostgreSQL, Redis) sends them only while someone does,
	** which this call says (the core calls it again at least every 10 s
	*while waiting;
	** a backend that needs it keeps such a mark alive 30 s).  fd NULL:
	** only say that someone listens (a shard that is not the one
	** subscribed).  DUE_EUNSUPPORTED when the store cannot wake them:
	** the core polls.  Not in DUE_STORE_NOTIFY_METHODS: every backend
	** has it, if only to say DUE_EUNSUPPORTED.
	*/
	int (*listen_done)(due_store *s, int *fd);
} due_store_ops;

/*
** Every method of due_store_ops, by capability, in the struct's order:
** the list due__store_check() walks.  registry.c fails the build when the
** struct has a method these lists lack.
*/
/* clang-format off */
#define DUE_STORE_METHODS(X)                                                   \
	X(parse_url) X(free_cfg) X(open) X(close) X(init_schema)               \
	X(check_schema) X(now) X(native) X(schedule) X(cancel) X(get) X(list)  \
	X(claim) X(extend) X(complete) X(fail) X(reclaim) X(complete_claim)    \
	X(retry) X(requeue) X(kill) X(stats) X(prune) X(lock_take)      \
	X(bytes) X(cron_get)              \
	X(cron_put) X(cron_remove) X(cron_list) X(cron_fire) X(metrics)        \
	X(worker_report) X(upcoming) X(kind_put) X(kind_get) X(kind_list)      \
	X(kind_remove) X(reschedule) X(listen_done)
/* clang-format on */
#define DUE_STORE_NOTIFY_METHODS(X) X(listen) X(listen_drain) X(notify)
#define DUE_STORE_TX_SUBMIT_METHODS(X) X(native_tx) X(schedule_on_native)

/*
** A backend names each method <prefix><method> and fills its table from
** these lists, so the table cannot miss one (a missing function does not
** compile):
**   #define OP(m) .m = pg_##m,
**   const due_store_ops due__store_pg = {.version = ..., .name = ...,
**	.schemes = ..., .caps = ..., DUE_STORE_METHODS(OP) ...};
*/

/* --- The admin group (DUE_STORE_CAP_ADMIN; src/core/admin.c asks it) --- */

/*
** What `due verify`, `due bench` and the tests need of a backend beyond
** its store, so that none of them names one: scratch stores beside the
** user's, the server's own counters, and (by capability) a raw SQL
** session.  Each backend has it in a file of its own
** (src/store/<name>_admin.c), reads URLs with its own parser, and speaks
** to its server through its own connection layer or client library.
** The sessions are the backend's own types.
*/
typedef struct due_store_sql due_store_sql;
typedef struct due_store_srv due_store_srv;

typedef struct due_store_admin {
	/*
	** The environment variable that names the server the tests use
	** (tests/unit/test_util.h, tests/cli/lib.sh), e.g. DUE_TEST_PG_URL;
	** NULL for a store in files, which needs none: its scratch stores
	** live in a directory the caller gives.
	*/
	const char *test_env;
	/* The DUE_COUNTER_* kinds server_read reports (0: none). */
	unsigned counters;
	/*
	** Why the store lacks DUE_STORE_CAP_SQL, _ROW_LOCKS, _STALL or
	** _PLAN, as `due verify` prints it in a case's SKIP line, e.g.
	** "redis_has_no_sql (...)"; NULL where it has it or gives no reason.
	*/
	const char *no_sql, *no_row_locks, *no_stall, *no_plan;

	/*
	** Scratch stores.  A scratch store named `name` (the physical name,
	** DUE_SCRATCH_PREFIX and the caller's: core/admin.c makes it) is
	** private to its maker: a schema, a key prefix or a database on
	** the server of url, or, for a store in files, files in `dir`; the
	** user's own store never sees it.  url may be NULL for a store in
	** files (no options to keep); a store on a server (test_env set)
	** always gets it (core/admin.c refuses the call without one).
	** scratch_root writes a mkdtemp()
	** template for the directory of the caller's scratch files (beside
	** the store's own file, or under /tmp).  scratch_make makes the
	** store, empty (due_open with create writes its schema), and writes
	** its URL, with url's options, into out.  scratch_drop removes it
	** and all in it (one never made is no error), refusing (DUE_ESTORE)
	** one that holds anything but due's tables.  make refuses (DUE_ESTORE)
	** a name that exists.  Every session keeps to due__admin_bound_us.
	** 0 or a DUE_E* code with the message set.
	*/
	int (*scratch_root)(const due_url *url, char *out, size_t n);
	int (*scratch_make)(const due_url *url, const char *name,
			    const char *dir, char *out, size_t n);
	int (*scratch_drop)(const due_url *url, const char *name,
			    const char *dir);
	/*
	** A session on the server of the store at url, opened before a
	** measurement; server_read appends the server's counters
	** (store/counter.h) as they are now to out.  A backend with no
	** counters opens a session that reads none.
	*/
	int (*server_open)(due_store_srv **out, const due_url *url);
	int (*server_read)(due_store_srv *s, due_counters *out);
	void (*server_close)(due_store_srv *s);
	/*
	** Optional (NULL: `due init` tunes nothing): give the store at url
	** the database's own storage settings back where `due init` tuned
	** them (PostgreSQL: autovacuum, fillfactor), for `due bench
	** --workload soak --pg-autovacuum default`.
	*/
	int (*untune)(const due_url *url);
	/*
	** Optional (NULL: nothing to do): the process is the due executable,
	** not a host that links libdue, so the backend's library may be
	** tuned process-wide (SQLite: memory statistics off).  Called once,
	** before any other call into that library.
	*/
	void (*process_own)(void);

	/* --- DUE_STORE_CAP_SQL (NULL without it) --- */

	/*
	** A raw SQL session on the store at url.  sql_exec runs one
	** statement written with $1 and $2 (int64) and $3 (text), nparams of
	** them bound, in SQL every SQL store takes (the backend turns the
	** placeholders, and CAST(x AS bigint), into its own dialect); the
	** first column of up to cap rows goes to out.  It returns the row
	** count, or -1.
	*/
	int (*sql_open)(due_store_sql **out, const due_url *url);
	int (*sql_exec)(due_store_sql *q, const char *sql, int nparams,
			int64_t p1, int64_t p2, const char *p3, int64_t *out,
			int cap);
	void (*sql_close)(due_store_sql *q);

	/* --- DUE_STORE_CAP_STALL (NULL without it) --- */

	/*
	** Begin, in q, what makes another session's write of task id wait
	** (its row FOR UPDATE, or the store's one write lock) until q rolls
	** back; *lock names it ("row_lock", "write_lock").  0 or -1.
	*/
	int (*sql_hold)(due_store_sql *q, due_id id, const char **lock);

	/* --- DUE_STORE_CAP_PLAN (NULL without it) --- */

	/*
	** Fill q's store (a scratch store: thrown away after) with 40,000
	** tasks, half due in an hour and half finished, and judge the
	** claim's query plan over them: *pass, the key=value detail of the
	** CASE line into detail, and the plans as read into plans (may be
	** NULL), for -v.  now: the store's clock.  0, or -1 when the plans
	** could not be read.
	*/
	int (*plan_check)(due_store_sql *q, due_time now, bool *pass,
			  char *detail, size_t dn, char *plans, size_t pn);
} due_store_admin;

/*
** The admin group's methods, by capability, in the struct's order
** (registry.c checks the lists against the struct; due__store_check
** walks them).  untune is optional.
*/
/* clang-format off */
#define DUE_STORE_ADMIN_METHODS(X)                                             \
	X(scratch_root) X(scratch_make) X(scratch_drop) X(server_open)         \
	X(server_read) X(server_close)
/* clang-format on */
#define DUE_STORE_ADMIN_OPTIONAL_METHODS(X) X(untune) X(process_own)
#define DUE_STORE_SQL_METHODS(X) X(sql_open) X(sql_exec) X(sql_close)
#define DUE_STORE_STALL_METHODS(X) X(sql_hold)
#define DUE_STORE_PLAN_METHODS(X) X(plan_check)

/*
** Helpers of the admin groups (src/store/admin_common.c).
** due__url_add_option: text with "key=value" appended to its query;
** due__url_set_option: the same, any key= of text's query left out;
** due__url_set_path: text with its path (after the authority, before the
** query) replaced by "/" path.  DUE_EINVAL when out (n bytes) is too
** small, or text has no "//".
*/
int due__url_add_option(char *out, size_t n, const char *text, const char *key,
			const char *value);
int due__url_set_option(char *out, size_t n, const char *text, const char *key,
			const char *value);
int due__url_set_path(char *out, size_t n, const char *text, const char *path);
/*
** Append a counter to a reading; DUE_ENOMEM.  due__counter_work adds a
** DUE_COUNTER_WORK one with its text form (label, unit, digits).
*/
int due__counter_add(due_counters *out, const char *name, double value,
		     unsigned kind);
int due__counter_work(due_counters *out, const char *name, double value,
		      const char *label, const char *unit, int digits);
/*
** sql_hold of a store with row locks: in q, BEGIN, then the task's row
** FOR UPDATE through the backend's own sql_exec; *lock = "row_lock".
*/
int due__sql_hold_row(due_store_sql *q, due_id id, const char **lock,
		      int (*exec)(due_store_sql *q, const char *sql,
				  int nparams, int64_t p1, int64_t p2,
				  const char *p3, int64_t *out, int cap));
/* "/tmp/due-scratch-XXXXXX": scratch_root of a store on a server. */
int due__scratch_root_tmp(const due_url *url, char *out, size_t n);
/*
** Scratch store names.  A caller's NAME is 1 to DUE_SCRATCH_NAME_MAX
** lowercase letters, digits or _; its store is the schema, database, key
** prefix or file DUE_SCRATCH_PREFIX NAME (due__scratch_physical), so no
** name reaches anything but a scratch store, and every name is a plain
** identifier within PostgreSQL's 63 bytes and MySQL's 64 on every store.
*/
#define DUE_SCRATCH_PREFIX "due_scratch_"
#define DUE_SCRATCH_NAME_MAX 51
/* Whether name is a scratch name (the rule above). */
bool due__scratch_name_ok(const char *name);
/* The physical name of scratch store name into out (n >= 64 bytes). */
void due__scratch_physical(const char *name, char *out, size_t n);
/* The bound of every wait of an admin session on url (its timeout=,
   else DUE_STORE_TIMEOUT_DEFAULT_US), as the store's own sessions. */
int64_t due__admin_bound_us(const due_url *url);

/* A scheduler's step for one schedule (see cron_fire). */
typedef struct due_cron_fire {
	const char *name;
	due_time expect;	/* next_slot as read */
	due_time next;		/* the new next_slot */
	const due_submit *task; /* the slot's task, or NULL (skip/wait) */
	due_time slot;		/* the slot the task stands for */
	int64_t missed;
	due_time last_missed;
} due_cron_fire;

/* --- The table of backends (src/store/registry.c) --- */

/* The backend that answers `scheme`, or NULL. */
const due_store_ops *due__store_find(const char *scheme);
/* The i-th backend of this build's table, NULL past the last. */
const due_store_ops *due__store_at(size_t i);
/* The backend called `name` (due_store_ops.name), or NULL. */
const due_store_ops *due__store_named(const char *name);
/* The schemes this build knows, "a:, b:, c:", into buf (for messages). */
void due__store_schemes(char *buf, size_t n);
/* The CMake option of the backend this build left out that answers the
   scheme scheme[0..n), or NULL (registry.c's one list of them). */
const char *due__store_left_out(const char *scheme, size_t n);
/*
** 0 when ops can be used by this core: its version is
** DUE_STORE_OPS_VERSION and no method is NULL (but those of a capability
** it does not claim), its admin group's included.  Else DUE_ESTORE
** naming the backend and the method.
*/
int due__store_check(const due_store_ops *ops);

/*
** Split a store URL at its scheme and find its backend (src/store/url.c):
** *out points into text.  DUE_EINVAL with a message on a missing or
** unknown scheme; the backend's parse_url reads the rest.
*/
int due__url_parse(due_url *out, const due_store_ops **ops, const char *text);
/* Release what due__url_parse kept (out->owned). */
void due__url_release(due_url *u);

/*
** A call that got no answer within the bound: DUE_ESTORE, "no answer from
** the store at WHERE in N s" (WHERE: HOST:PORT, or the SQLite file).
*/
int due__store_no_answer(const char *where, int64_t timeout_us);
/* A bound as those messages write it: "10 s", else "1s500ms". */
void due__bound_format(char *buf, size_t n, int64_t timeout_us);

/*
** The store's own payload limit (docs/internals/store.md, "Limits").
** Besides the caller's max_payload (the core's check), each backend
** knows the largest payload its database takes in one task: MySQL's
** max_allowed_packet and Redis' proto-max-bulk-len as the server says at
** connect, PostgreSQL's 1 GB value, SQLite's SQLITE_LIMIT_LENGTH.  Its
** schedule (and cron_put) refuses a payload over it before anything is
** sent: due__payload_over() finds the first of n items over max bytes (n
** when none is), and due__store_payload_too_big() is the refusal,
** DUE_ETOOBIG: "STORE: [item I: ]payload is LEN bytes, over the MAX bytes
** WHY", where WHY (printf) names the limit and the setting that raises
** it, or says that none does.  A limit is about one task: a batch whose
** payloads each fit is never refused for that (the backend splits it
** inside its transaction, or names its own bound on a batch).
*/
size_t due__payload_over(const due_submit *items, size_t n, size_t max);
#if defined(__GNUC__)
__attribute__((format(printf, 6, 7)))
#endif
int due__store_payload_too_big(const char *store, size_t item, size_t n,
			       size_t len, size_t max, const char *fmt, ...);

/* --- Helpers shared by backends (src/store/common.c) --- */

/*
** The lateness figures of due_stats from the n lateness values v of the
** window's claims (any order; v is sorted in place): the count, p50 and
** p99 by nearest rank, the max; -1 for each figure when n is 0.
*/
void due__lateness_fill(due_stats *out, int64_t *v, size_t n);

/*
** Flow control as a SQL backend's claim reads it (docs/internals/flow.md):
** one due_kind row (0: no such limit), the reasons due tasks of a kind
** were held back, and lookups in an array of them sorted by kind in byte
** (strcmp) order.
*/
typedef struct due__flow_kind {
	char *kind;
	bool paused;
	int32_t rate_n, max_running, per_group;
	int64_t rate_us, timeout_us;
} due__flow_kind;

enum { DUE__HELD_RATE = 1, DUE__HELD_RUNNING = 2, DUE__HELD_GROUP = 4 };

/* Whether the kind has a limit a claim must count (paused is not one). */
bool due__flow_limited(const due__flow_kind *k);
/* Free the n kinds' names and the array. */
void due__flow_kinds_free(due__flow_kind *k, size_t n);
/* The settings of `kind` among the n (sorted), or NULL when it has none. */
const due__flow_kind *due__flow_kind_find(const due__flow_kind *k, size_t n,
					  const char *kind);
/*
** When a claim should look again at kind k, which it held back for `held`
** (DUE__HELD_*): a rate limit when the oldest claim in the window (oldest;
** 0: none logged) leaves it, a running or group limit within 100 ms (a
** slot frees when a try ends elsewhere); at least 1 ms.  In microseconds
** from now.
*/
int64_t due__flow_retry_us(const due__flow_kind *k, int held, due_time oldest,
			   due_time now);

/*
** Counts by group (a kind's running tries per group, for
** max_running_per_group), in the order the groups were first seen.
*/
typedef struct due__group_count {
	char *grp;
	int64_t n;
} due__group_count;

typedef struct due__groups {
	due__group_count *g;
	size_t n, cap;
} due__groups;

void due__groups_free(due__groups *g);
/* The count of group `grp` (n bytes), added at 0 when new; NULL: no memory. */
int64_t *due__group_slot(due__groups *g, const char *grp, size_t n);

int due__cron_info_list_alloc(due_cron_info_list **out, size_t n);
int due__kind_info_list_alloc(due_kind_info_list **out, size_t n);
int due__task_list_alloc(due_task_list **out, size_t n);
int due__attempts_append(due_task *t, const due_attempt *a);
/*
** The verdict on a store's schema version v (-1: no due schema): 0 when it
** is DUE_SCHEMA_VERSION, else DUE_ESCHEMA with a message naming `store`
** and what to run; `where` follows "has no due schema" (may be "").
*/
int due__schema_verdict(const char *store, int v, const char *where);

/*
** A backend's schema history for due__migrate(): steps[1] creates version
** 1 on an empty database, steps[v] upgrades v-1 to v; steps has
** DUE_SCHEMA_VERSION + 1 entries (steps[0] is unused).  The callbacks run
** on the backend's own connection; `exec` runs one step's SQL (several
** statements), `lock` (may be NULL) serializes concurrent migrations
** inside the transaction.
*/
typedef struct due_migration {
	const char *label; /* the store, for messages */
	const char *where; /* for due__schema_verdict() */
	const char *const *steps;
	int (*begin)(due_store *s);
	int (*lock)(due_store *s);
	int (*read_version)(due_store *s, int *v); /* -1: no due schema */
	int (*exec)(due_store *s, const char *sql, const char *what);
	int (*commit)(due_store *s);
	void (*rollback)(due_store *s);
} due_migration;

/*
** Create the schema, upgrade an older one step by step, or leave a
** current one alone, all in one transaction: an upgrade that fails leaves
** the old version intact.  A newer schema, or one without an upgrade
** path, is refused with DUE_ESCHEMA and nothing is written.  Each step is
** reported before it runs (due__progress: `due init`'s progress line).
*/
int due__migrate(due_store *s, const due_migration *m);

/*
** Run a completion hook for the DONE completion c on `conn` (the
** backend's native connection, inside its transaction).  0, or DUE_ERROR
** when the hook refused: the backend must roll back.
*/
int due__store_run_hook(due_tx_hook hook, void *conn, const due_completion *c,
			void *payload);

/* The outcome of a fail that wrote `s`, and of a cancel that found `s`. */
due_fail_outcome due__fail_outcome_of(due_state s);
due_cancel_outcome due__cancel_outcome_of(bool found, due_state s);
/* The outcome of a reschedule that found `s` (SCHEDULED: it wrote). */
due_reschedule_outcome due__reschedule_outcome_of(bool found, due_state s);

/*
** The error of an operator action (retry, requeue, kill) on task id that
** found it in `state` (NULL: no such task): DUE_ENOTFOUND or DUE_ESTATE.
*/
int due__store_wrong_state(due_id id, const char *action, const char *state,
			   const char *needed);
/* DUE_ENOTFOUND: kind has no settings (kind_get, kind_remove). */
int due__store_no_kind(const char *kind);
/* DUE_ENOTFOUND: no schedule of that name (cron_get, cron_remove). */
int due__store_no_schedule(const char *name);
/*
** kind_get's answer from a list read for one kind (0 or 1 rows): its one
** row moved into a new *out, or DUE_ENOTFOUND; frees l either way.
*/
int due__kind_info_take_one(due_kind_info **out, due_kind_info_list *l,
			    const char *kind);
/* DUE_ECONFLICT: retry of id would make a second live task of its key. */
int due__store_retry_conflict(due_id id);

/* Stats window for lateness percentiles. */
#define DUE_STATS_WINDOW_US (300LL * 1000000LL)

#endif /* DUE_STORE_H */
