/**
 * due.h - the public C API of `due`, a durable delayed-task system.
 *
 * A task is a row in a store (SQLite file or PostgreSQL database) that becomes
 * claimable once its due time has passed.  Workers claim tasks under a lease,
 * renew the lease while they run, and finish a try with `complete` or `fail`.
 * Every claim increments the task's `attempt`, and that number is the fencing
 * token of the try: the store refuses a complete/fail/extend that carries an
 * attempt other than the current one, or whose lease was taken back.
 *
 * Conventions (libgit2 / libpq style):
 *  - Functions return int: 0 on success, a negative DUE_E* code on failure.
 *    The human message of the last failure on this thread is due_error_last().
 *  - Output parameters come first.  An object returned through `T **out`
 *    belongs to the caller and is released with its `due_<type>_free()`.
 *  - A `due_db` handle is used by one thread at a time; open one per thread.
 *    There is no global state besides the per-thread error message.
 *  - Times are microseconds since the Unix epoch (UTC) as judged by the
 *    store's clock; durations are microseconds.
 */
#ifndef DUE_H
#define DUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DUE_VERSION "0.1.0"

/*
** DUE_EXTERN marks the library's exported functions: libdue.so is built
** with -fvisibility=hidden, so these are all it exports.
*/
#if defined(__GNUC__) && __GNUC__ >= 4
#define DUE_EXTERN __attribute__((visibility("default")))
#else
#define DUE_EXTERN
#endif

/** Store schema version this library reads and writes. */
#define DUE_SCHEMA_VERSION 11

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/** Return codes.  0 is success; every failure is negative. */
typedef enum due_error_code {
	DUE_OK = 0,
	DUE_ERROR = -1,	    /**< generic failure; see due_error_last() */
	DUE_EINVAL = -2,    /**< bad input from the caller: nothing changed */
	DUE_ENOTFOUND = -3, /**< no such task (or schedule) */
	DUE_ESTATE = -4,    /**< the task is not in a state that allows this */
	DUE_EBUSY = -5,	    /**< store locked or task not claimable right now */
	DUE_ESCHEMA = -6, /**< schema missing, older or newer: run `due init` */
	DUE_ETOOBIG = -7, /**< payload or result over the configured limit */
	DUE_ESTORE = -8,  /**< store unreachable or an I/O error */
	DUE_ENOMEM = -9,  /**< allocation failed */
	DUE_ECONFLICT =
	    -10, /**< a live task with the same (kind, key) exists */
	DUE_EUNSUPPORTED = -11, /**< this store cannot do that (e.g. Redis has
				  no caller transaction to join) */
	DUE_ETIMEDOUT = -12	/**< due_wait: the time given passed first */
} due_error_code;

/**
 * The message describing the last failure on the calling thread.  Borrowed;
 * valid until the next failing call on this thread.  Never NULL.
 */
DUE_EXTERN const char *due_error_last(void);

/** The code of the last failure on the calling thread (0 when none). */
DUE_EXTERN int due_error_last_code(void);

/** A short constant name for a code, e.g. "DUE_ENOTFOUND". */
DUE_EXTERN const char *due_error_name(int code);

/* ------------------------------------------------------------------ */
/* Values                                                              */
/* ------------------------------------------------------------------ */

typedef int64_t due_id;
typedef int64_t due_time; /**< microseconds since the epoch, UTC */

typedef enum due_state {
	DUE_SCHEDULED = 0,
	DUE_CLAIMED = 1,
	DUE_DONE = 2,
	DUE_CANCELLED = 3,
	DUE_DEAD = 4
} due_state;

#define DUE_STATE_COUNT 5

/** "SCHEDULED", "CLAIMED", ... ; NULL for an out-of-range value. */
DUE_EXTERN const char *due_state_name(due_state s);
/** Parse a state name (case-insensitive).  DUE_EINVAL if unknown. */
DUE_EXTERN int due_state_parse(due_state *out, const char *name);

/**
 * Parse a duration: "250ms", "10s", "30m", "2h", "1d", "1h30m", "1.5s" is
 * refused (integers only).  A bare "0" means zero.  Negative, empty, unknown
 * units and values over 100 years give DUE_EINVAL with a message.
 */
DUE_EXTERN int due_duration_parse(int64_t *out_us, const char *text);
/** Format a duration compactly ("1h30m", "250ms") into buf. */
DUE_EXTERN void due_duration_format(char *buf, size_t len, int64_t us);
/** Parse an RFC 3339 time ("2026-12-01T02:00:00Z", "...+08:00"). */
DUE_EXTERN int due_time_parse(due_time *out, const char *text);
/** Format as RFC 3339 UTC with milliseconds: "2026-12-01T02:00:00.000Z". */
DUE_EXTERN void due_time_format(char *buf, size_t len, due_time t);
/** The host's wall clock (the SQLite store's clock). */
DUE_EXTERN due_time due_time_now_host(void);

/** Backoff for a failed try: min(base * 2^(attempt-1), cap), overflow-safe. */
DUE_EXTERN int64_t due_backoff_us(int64_t base_us, int64_t cap_us,
				  int32_t attempt);

/* ------------------------------------------------------------------ */
/* Tasks                                                               */
/* ------------------------------------------------------------------ */

/** One recorded try of a task (one row of the attempts history). */
typedef struct due_attempt {
	int32_t attempt;
	char *worker; /**< lease owner that claimed this try */
	due_time claimed_at;
	due_time due_at;   /**< the task's due time when this try was claimed */
	due_time ended_at; /**< 0 while RUNNING */
	char *outcome; /**< RUNNING DONE FAILED LEASE_EXPIRED CANCELLED REQUEUED
			  KILLED TIMED_OUT */
	char *error;   /**< NULL when none */
	char *
	    late_commit; /**< "REJECTED_STALE" when a late commit was refused */
} due_attempt;

/**
 * A task as read from the store.  Owned by the caller when returned through
 * an out parameter; release with due_task_free().  Strings and buffers are
 * NUL-terminated (payload and result also carry their length; they may hold
 * binary bytes).  Optional values are NULL / 0 when absent.
 */
typedef struct due_task {
	due_id id;
	char *kind;
	unsigned char *payload;
	size_t payload_len;
	due_state state;
	due_time due_at;
	int32_t attempt; /**< number of claims so far: the fencing token */
	int32_t
	    max_attempts; /**< attempt budget (since creation or last retry) */
	int64_t backoff_us;
	int64_t backoff_cap_us;
	char *lease_owner;    /**< set exactly when state is CLAIMED */
	due_time lease_until; /**< 0 unless CLAIMED */
	bool cancel_requested;
	char *key; /**< business key or NULL */
	unsigned char *result;
	size_t result_len;
	bool has_result;
	char *last_error;
	due_time created_at;
	due_time updated_at;
	size_t n_attempts; /**< filled by due_get(); 0 from list calls */
	due_attempt *attempts;
	/* Since schema 4 (flow control, docs/internals/flow.md). */
	int32_t priority; /**< -32768..32767, lower is claimed first */
	char *group; /**< the task's group (max_running_per_group) or NULL */
	/**
	 * Time limit of a try, 0 for none.  From due_get()/due_list(): the
	 * task's own (0: its kind's applies).  In a task handed out by a
	 * claim: the limit that applies to this try, the task's own or else
	 * its kind's at claim time.
	 */
	int64_t timeout_us;
	/* Since schema 11 (run after, docs/internals/after.md). */
	/**
	 * Run after: the number of parents the task was added after (0:
	 * none); how many of them it still waits for (> 0 only while it is
	 * SCHEDULED: it is held, no claim takes it, and its due_at is
	 * DUE_TIME_LAST until the last one releases it); and whether any end
	 * of a parent releases it (after_any_end) or only DONE does.
	 */
	int32_t after_n;
	int32_t after_left;
	bool after_any_end;
	/** The parents' ids, ascending (after_n of them): due_get() only. */
	due_id *after;
} due_task;

DUE_EXTERN void due_task_free(due_task *t);

/** A list of tasks, owned by the caller; release with due_task_list_free(). */
typedef struct due_task_list {
	size_t count;
	due_task *items;
	/**
	 * Claims only: > 0 when due tasks were held back by a kind's rate or
	 * running limits; claiming again sooner than this many microseconds
	 * is not expected to get them (a rate frees its next allowance then;
	 * a running slot frees when a try ends, so this is a short re-poll).
	 * 0 otherwise.  A paused kind never sets it: resuming wakes workers.
	 */
	int64_t retry_in_us;
} due_task_list;

DUE_EXTERN void due_task_list_free(due_task_list *l);

/* ------------------------------------------------------------------ */
/* Opening a store                                                     */
/* ------------------------------------------------------------------ */

typedef struct due_db due_db;

/**
 * How far a long call is: `what` it is doing, `done` of `total` (total 0:
 * unknown).  `payload` is the one given beside the callback.
 */
typedef void (*due_progress_fn)(const char *what, int64_t done, int64_t total,
				void *payload);

typedef struct due_open_opts {
	unsigned version; /**< DUE_OPEN_OPTS_VERSION */
	bool create; /**< create/upgrade the schema (what `due init` does) */
	size_t max_payload; /**< payload limit in bytes; default 1 MiB */
	size_t max_result;  /**< result limit in bytes; default 1 MiB */
	/**
	 * Version 2.  The longest one store call waits for the store: the
	 * connect, each read or write, a lock wait.  A call that gets no
	 * answer within it fails with DUE_ESTORE, "no answer from the store
	 * at HOST:PORT in N s", and the connection is made again on the next
	 * call.  The bound is the URL's `timeout=DUR` (100ms..1h) when given,
	 * else DUE_STORE_TIMEOUT_DEFAULT_US; a non-zero timeout_us lowers it
	 * (the worker opens its renewal connection with lease/3).
	 */
	int64_t timeout_us;
	/**
	 * Version 3.  Called as a schema upgrade (create) goes: before each
	 * step, with what it does ("upgrade schema to version 5"), the steps
	 * done and their number; not called when the schema is current.  On
	 * the caller's thread, inside due_open(); it must not call due.
	 */
	due_progress_fn progress;
	void *progress_payload; /**< handed to progress */
} due_open_opts;

#define DUE_STORE_TIMEOUT_DEFAULT_US 10000000LL /* 10 s */
#define DUE_OPEN_OPTS_VERSION 3			/* 2: timeout_us; 3: progress */
#define DUE_OPEN_OPTS_INIT                                                     \
	{                                                                      \
		DUE_OPEN_OPTS_VERSION, false, 1u << 20, 1u << 20, 0, NULL,     \
		    NULL                                                       \
	}

/**
 * Open the store named by `url`:
 *   sqlite:PATH, sqlite:///abs/path (options: ?sync=full|normal&busy_ms=N)
 *   postgres://... or postgresql://... (libpq connection URIs)
 *   redis://..., mysql://... and mariadb://... (see INTERFACE.md)
 * Every scheme takes `timeout=DUR` in its query: how long one store call
 * may wait for an answer (due_open_opts.timeout_us).
 * Without opts->create, a store whose schema is missing or older than
 * DUE_SCHEMA_VERSION fails with DUE_ESCHEMA, and a missing SQLite file is not
 * created.  On failure *out is still set when a handle could be made; pass it
 * to due_close() either way (NULL is fine).
 */
DUE_EXTERN int due_open(due_db **out, const char *url,
			const due_open_opts *opts);
DUE_EXTERN void due_close(due_db *db);

/** Backend name: "sqlite", "postgres", "redis" or "mysql".  Borrowed. */
DUE_EXTERN const char *due_db_backend(const due_db *db);

/**
 * What the store found at open that the operator should know, or NULL: a
 * server setting that keeps working but can lose acknowledged writes in a
 * crash (Redis with appendfsync everysec).  Settings that would lose them
 * outright are refused by due_open instead.  Borrowed from db.
 */
DUE_EXTERN const char *due_db_warning(const due_db *db);

/** The store's clock (the one that judges due and lease times). */
DUE_EXTERN int due_now(due_db *db, due_time *out);

/* ------------------------------------------------------------------ */
/* Producer                                                            */
/* ------------------------------------------------------------------ */

/**
 * "No absolute due time": the value of due_schedule_opts.at when the delay
 * decides.  Every other value of `at` is an instant, 0 (the epoch) included.
 */
#define DUE_TIME_NONE INT64_MIN

/**
 * A submit whose (kind, key) is held by a live task (CONTRACT §3.1a):
 *
 * - KEEP (the default): nothing changes; the holder's id is returned
 *   (existed).
 * - REPLACE: a holder still waiting (SCHEDULED) takes this submit's due
 *   time and payload (existed, moved).
 * - LATER: a waiting holder takes them only if this due time is later than
 *   its own (a debounce: the task runs at the last requested time); else
 *   nothing changes (existed, not moved).
 *
 * With REPLACE or LATER, a holder that is running (CLAIMED) is not
 * touched: it gives up the key and runs on, and this submit makes a new
 * task that holds it (not existed).  Under KEEP a running holder is the
 * answer as before.
 */
typedef enum due_on_key {
	DUE_ON_KEY_KEEP = 0,
	DUE_ON_KEY_REPLACE,
	DUE_ON_KEY_LATER,
} due_on_key;

/** "keep", "replace", "later"; NULL for a value outside the enum. */
DUE_EXTERN const char *due_on_key_name(due_on_key k);
/** due_on_key from its name: 0, or DUE_EINVAL naming the three. */
DUE_EXTERN int due_on_key_parse(const char *name, due_on_key *out);

/**
 * When a task becomes due, and how it is retried.  Start from
 * DUE_SCHEDULE_OPTS_INIT and change what you need.
 *
 * The due time is `at` when it is set, else store now + delay_us; giving
 * both (at set and delay_us not 0) is refused with DUE_EINVAL.  An `at` in
 * the past is due at once; one before the epoch (negative) is refused, and
 * so is one after 9999-12-31T23:59:59.999999Z (what due_time_parse reads
 * and due_time_format writes).
 *
 * Versions: 2 (this one) says "unset" with DUE_TIME_NONE, so every instant
 * can be given.  Version 1 said it with 0, and could not ask for the epoch;
 * a struct that carries version 1 is still read that way (at 0: unset, an
 * `at` beside a delay wins).  A struct filled with zeros (version 0) gets
 * every default.  Filling it with zeros and then setting version 2 asks for
 * the epoch: at is 0, not DUE_TIME_NONE.
 *
 * Version 3 adds priority, group and timeout_us; a struct of version 1 or
 * 2 is read without them (priority 0, no group, the kind's time limit).
 * Version 4 (this one) adds on_key; a struct of version 1 to 3 is read
 * with DUE_ON_KEY_KEEP.
 */
typedef struct due_schedule_opts {
	unsigned version;     /**< DUE_SCHEDULE_OPTS_VERSION */
	int64_t delay_us;     /**< due = store now + delay (when at is unset) */
	due_time at;	      /**< absolute due time; DUE_TIME_NONE = unset */
	int32_t max_attempts; /**< default 5 */
	int64_t backoff_us;   /**< retry base, default 1 s */
	int64_t backoff_cap_us; /**< retry cap, default 1 h */
	const char *key;	/**< optional business key */
	/**
	 * -32768..32767, default 0.  Among due tasks a claim takes the lowest
	 * number first, then the earliest due time (beanstalkd's order).
	 */
	int32_t priority;
	/**
	 * What a submit with a key does when a task of the same (kind, key)
	 * is live (version 4; needs `key`): see due_on_key.  (It sits in
	 * what was padding after priority, so the struct's size and the
	 * offsets of the fields after it are those of version 3.)
	 */
	due_on_key on_key;
	/**
	 * A group within the kind (1..255 bytes), e.g. a customer id: the
	 * kind's max_running_per_group counts running tries per (kind,
	 * group).  NULL: no group.
	 */
	const char *group;
	/**
	 * Time limit of each try; 0 (default): the kind's, if it has one.  A
	 * handler still running after it is stopped and the try fails with
	 * the outcome TIMED_OUT (retried, dead-lettered as any failure).
	 */
	int64_t timeout_us;
	/**
	 * Run after (version 5): the task is held until each of these
	 * n_after tasks, its parents (1..DUE_AFTER_MAX ids, none twice), is
	 * DONE, then it is due at its own delay counted from then, or at
	 * `at` if that is later.  A parent that ends DEAD or CANCELLED
	 * cancels it (CANCELLED, last_error naming that parent), unless
	 * after_any_end: then any end of each parent counts.  Every parent
	 * must exist when the task is added (DUE_ENOTFOUND), so no cycle can
	 * be built; one already DONE counts at once; one already DEAD or
	 * CANCELLED is refused (DUE_ESTATE) unless after_any_end.  Not with
	 * on_key REPLACE or LATER.  Its handler is given the parents'
	 * results (DUE_PARENT_RESULTS, "parent_results").
	 */
	const due_id *after;
	size_t n_after;
	bool after_any_end;
} due_schedule_opts;

#define DUE_SCHEDULE_OPTS_VERSION 5
#define DUE_SCHEDULE_OPTS_INIT                                                 \
	{                                                                      \
		DUE_SCHEDULE_OPTS_VERSION, 0, DUE_TIME_NONE, 5, 1000000,       \
		    3600000000LL, NULL, 0, DUE_ON_KEY_KEEP, NULL, 0, NULL, 0,  \
		    false                                                      \
	}

/** The most parents one task may be added after (due_schedule_opts.after). */
#define DUE_AFTER_MAX 1000
/** The default bound of due_parent_results()'s text, in bytes. */
#define DUE_PARENT_RESULTS_MAX 65536

#define DUE_PRIORITY_MIN (-32768)
#define DUE_PRIORITY_MAX 32767

/** One task to submit (for batch and low-level calls). */
typedef struct due_submit {
	const char *kind;
	const void *payload;
	size_t payload_len;
	due_schedule_opts opts;
} due_submit;

/** What a submit did. */
typedef struct due_submitted {
	due_id id;
	bool existed; /**< true: a live task with the same (kind, key) was
			 returned */
	/**
	 * true: that live task took this submit's due time and payload
	 * (on_key REPLACE or LATER).  (In the padding after `existed`: the
	 * struct's size is unchanged.)
	 */
	bool moved;
} due_submitted;

/**
 * Schedule one task.  With opts->key, the submit is idempotent: while a task
 * of the same (kind, key) is SCHEDULED or CLAIMED, its id is returned and
 * out->existed is true.  Validation failures (bad kind, negative delay,
 * oversized payload ...) give DUE_EINVAL / DUE_ETOOBIG and change nothing.
 */
DUE_EXTERN int due_schedule(due_db *db, due_submitted *out, const char *kind,
			    const void *payload, size_t payload_len,
			    const due_schedule_opts *opts);

/**
 * Schedule n tasks in one transaction: all or none.  out must hold n
 * entries.  On a validation error nothing is written and the message names
 * the index of the offending item.
 */
DUE_EXTERN int due_schedule_batch(due_db *db, due_submitted *out,
				  const due_submit *items, size_t n);

struct sqlite3;
struct pg_conn;
struct st_mysql;

/**
 * Schedule inside the caller's own open transaction on their own SQLite
 * connection (to a database `due init` prepared).  The task commits or
 * rolls back with the caller's rows.  The caller must have begun the
 * transaction (BEGIN IMMEDIATE recommended).  The store clock is the host's.
 */
DUE_EXTERN int due_schedule_sqlite_tx(struct sqlite3 *conn, due_submitted *out,
				      const char *kind, const void *payload,
				      size_t payload_len,
				      const due_schedule_opts *opts);

/**
 * Schedule inside the caller's own open transaction on their own libpq
 * connection (PGconn *).  The task commits or rolls back with their rows.
 * DUE_EUNSUPPORTED when this build has no PostgreSQL store.
 */
DUE_EXTERN int due_schedule_pg_tx(struct pg_conn *conn, due_submitted *out,
				  const char *kind, const void *payload,
				  size_t payload_len,
				  const due_schedule_opts *opts);

/**
 * Schedule inside the caller's own open transaction on their own MariaDB
 * Connector/C connection (MYSQL *, to a database `due init` prepared).
 * The task commits or rolls back with their rows.  DUE_EUNSUPPORTED when
 * this build has no MySQL store.  Redis has no caller transaction to
 * join: submit after your commit, with an idempotency key.
 */
DUE_EXTERN int due_schedule_mysql_tx(struct st_mysql *conn, due_submitted *out,
				     const char *kind, const void *payload,
				     size_t payload_len,
				     const due_schedule_opts *opts);

/** What cancel found and did (CONTRACT §3.6). */
typedef enum due_cancel_outcome {
	DUE_CANCEL_CANCELLED = 0, /**< was waiting; will never run */
	DUE_CANCEL_REQUESTED,	  /**< was running; no result will commit */
	DUE_CANCEL_TOO_LATE,	  /**< DONE or DEAD; nothing changed */
	DUE_CANCEL_ALREADY_CANCELLED,
	DUE_CANCEL_NOT_FOUND
} due_cancel_outcome;

DUE_EXTERN const char *due_cancel_outcome_name(due_cancel_outcome o);

/** Cancel a task.  NOT_FOUND is an outcome, not an error. */
DUE_EXTERN int due_cancel(due_db *db, due_cancel_outcome *out, due_id id);

/** What reschedule found and did (CONTRACT §3.6a). */
typedef enum due_reschedule_outcome {
	DUE_RESCHEDULE_RESCHEDULED = 0, /**< was waiting; now due at the new
					   time (and carries the new payload) */
	DUE_RESCHEDULE_TOO_LATE, /**< CLAIMED (running): nothing changed */
	DUE_RESCHEDULE_ALREADY_FINISHED, /**< DONE, DEAD or CANCELLED: nothing
					    changed */
	DUE_RESCHEDULE_NOT_FOUND
} due_reschedule_outcome;

DUE_EXTERN const char *due_reschedule_outcome_name(due_reschedule_outcome o);

/**
 * The new due time of a task, and optionally its new payload.  Start from
 * DUE_RESCHEDULE_OPTS_INIT.  The due time is `at` when it is set, else
 * the STORE's now + delay_us (the store computes it in the statement that
 * writes; no client clock is read); both given is DUE_EINVAL, and the
 * bounds are due_schedule_opts': a delay of 0 .. 100 years, an `at` in
 * 1970 .. 9999 (one in the past is due at once).  With set_payload the
 * payload (payload_len bytes, NULL when 0; the handle's max_payload) is
 * replaced too; without it the task keeps its own.
 */
typedef struct due_reschedule_opts {
	unsigned version; /**< DUE_RESCHEDULE_OPTS_VERSION */
	int64_t delay_us; /**< due = store now + delay (when at is unset) */
	due_time at;	  /**< absolute due time; DUE_TIME_NONE = unset */
	bool set_payload; /**< replace the payload with the one below */
	const void *payload;
	size_t payload_len;
} due_reschedule_opts;

#define DUE_RESCHEDULE_OPTS_VERSION 1
#define DUE_RESCHEDULE_OPTS_INIT                                               \
	{                                                                      \
		DUE_RESCHEDULE_OPTS_VERSION, 0, DUE_TIME_NONE, false, NULL, 0  \
	}

/**
 * Move a task that is still waiting (SCHEDULED, whether or not it is due
 * yet, of a paused kind too) to a new due time, and replace its payload
 * when opts->set_payload, in one atomic step on the store's clock; wakes
 * workers as a submit does.  *out says what it found: RESCHEDULED, or
 * TOO_LATE (CLAIMED: a worker has it, cancel requested or not; nothing
 * changed, its lease and attempt untouched), ALREADY_FINISHED (DONE, DEAD
 * or CANCELLED: nothing changed), NOT_FOUND.  Those are outcomes, not
 * errors; a bad id or option is DUE_EINVAL (DUE_ETOOBIG for the payload)
 * and changes nothing.  The task keeps its id, key, attempts and
 * priority.
 */
DUE_EXTERN int due_reschedule(due_db *db, due_reschedule_outcome *out,
			      due_id id, const due_reschedule_opts *opts);

/** Read one task with its attempts history.  DUE_ENOTFOUND if none. */
DUE_EXTERN int due_get(due_db *db, due_task **out, due_id id);

typedef struct due_list_opts {
	unsigned version;
	int state;	  /**< a due_state, or -1 for any */
	const char *kind; /**< NULL for any */
	int limit;	  /**< default 100; at most 10000 */
	due_id after;	  /**< paging: only ids greater than this */
	bool attempts;	  /**< also load each task's attempts history */
	/**
	 * Version 2: only tasks held by run-after (SCHEDULED, after_left >
	 * 0); with state, that state must be DUE_SCHEDULED.
	 */
	bool held;
} due_list_opts;

#define DUE_LIST_OPTS_VERSION 2
#define DUE_LIST_OPTS_INIT                                                     \
	{                                                                      \
		DUE_LIST_OPTS_VERSION, -1, NULL, 100, 0, false, false          \
	}

/** List tasks in id order. */
DUE_EXTERN int due_list(due_db *db, due_task_list **out,
			const due_list_opts *opts);

/* ------------------------------------------------------------------ */
/* Worker                                                              */
/* ------------------------------------------------------------------ */

/** The bounds of a try's lease (lease_us, everywhere a lease is asked). */
#define DUE_LEASE_MIN_US 1000LL			 /* 1 ms */
#define DUE_LEASE_MAX_US (7LL * 86400 * 1000000) /* 7 days */
/** The longest time limit of a try (a task's or a kind's timeout_us). */
#define DUE_TIMEOUT_MAX_US (7LL * 86400 * 1000000) /* 7 days */

/**
 * Claim up to `limit` due tasks (due_at <= store now), oldest due first,
 * restricted to `kinds` when n_kinds > 0.  Each claimed task has attempt
 * incremented, state CLAIMED, lease_owner = owner and lease_until = now +
 * lease_us, and an attempts-history row.  One atomic statement: a try is
 * never given to two workers.  An empty claim returns a list of count 0.
 */
DUE_EXTERN int due_claim(due_db *db, due_task_list **out, const char *owner,
			 const char *const *kinds, size_t n_kinds, int limit,
			 int64_t lease_us);

typedef struct due_claim_opts {
	unsigned version;
	const char *owner;
	const char *const *kinds; /**< kind filter (at most 64), or NULL */
	size_t n_kinds;
	bool exclude_kinds; /**< true: every kind except `kinds` */
	int limit;
	int64_t lease_us;
} due_claim_opts;

#define DUE_CLAIM_OPTS_VERSION 1
#define DUE_CLAIM_OPTS_INIT                                                    \
	{                                                                      \
		DUE_CLAIM_OPTS_VERSION, NULL, NULL, 0, false, 1, 30000000      \
	}

/** due_claim() with every option, including a kind exclusion filter. */
DUE_EXTERN int due_claim_ex(due_db *db, due_task_list **out,
			    const due_claim_opts *o);

/**
 * Claim one task by id if it is SCHEDULED and due (immediate mode).
 * DUE_EBUSY when it is not claimable now (not due, taken, or gone).
 */
DUE_EXTERN int due_claim_id(due_db *db, due_task **out, due_id id,
			    const char *owner, int64_t lease_us);

typedef enum due_extend_outcome {
	DUE_EXTEND_OK = 0,
	DUE_EXTEND_LOST, /**< attempt is stale, the lease was taken back,
			    or it lapsed (lease_until passed by the store's
			    clock: a limit may have given its slot away) */
	DUE_EXTEND_CANCEL_REQUESTED /**< still ours, but a cancel was requested:
				       stop */
} due_extend_outcome;

/** Push the lease of try (id, attempt) to store now + lease_us. */
DUE_EXTERN int due_extend(due_db *db, due_extend_outcome *out, due_id id,
			  int32_t attempt, int64_t lease_us);

typedef enum due_complete_outcome {
	DUE_COMPLETE_DONE = 0,
	DUE_COMPLETE_REJECTED_STALE,
	DUE_COMPLETE_CANCELLED_BEFORE_COMMIT
} due_complete_outcome;

DUE_EXTERN const char *due_complete_outcome_name(due_complete_outcome o);

/**
 * A hook run inside the completion transaction, after the fenced update
 * succeeded and before commit.  `conn` is the native connection
 * (sqlite3 * or PGconn *, see due_db_backend()).  Return 0 to commit; any
 * other value rolls back the whole completion (the try stays CLAIMED) and
 * due_complete_tx() returns DUE_ERROR.
 */
typedef int (*due_tx_hook)(void *conn, const due_task *task, void *payload);

/**
 * Complete try (id, attempt) with a result.  Fenced: only when the task is
 * CLAIMED with this attempt and no cancel was requested.  Outcomes: DONE;
 * REJECTED_STALE (nothing changed but the attempt's late_commit mark);
 * CANCELLED_BEFORE_COMMIT (cancel was requested: the task is now CANCELLED
 * and no result was stored).
 */
DUE_EXTERN int due_complete(due_db *db, due_complete_outcome *out, due_id id,
			    int32_t attempt, const void *result,
			    size_t result_len);

/** due_complete() with a hook that writes the caller's rows in the same
 * transaction. */
DUE_EXTERN int due_complete_tx(due_db *db, due_complete_outcome *out, due_id id,
			       int32_t attempt, const void *result,
			       size_t result_len, due_tx_hook hook,
			       void *payload);

/** One completion of a batch. */
struct due_completion;
typedef struct due_completion {
	due_id id;
	int32_t attempt;
	const void *result;
	size_t result_len;
	due_complete_outcome outcome; /**< filled by due_complete_batch() */
} due_completion;

/**
 * Complete n tries in one transaction.  Each row is fenced on its own and
 * gets its own outcome; a stale row does not affect the others.
 */
DUE_EXTERN int due_complete_batch(due_db *db, due_completion *items, size_t n);

/**
 * Complete n tries and claim the next tasks in ONE transaction (one commit
 * where two would be needed): each completion is fenced on its own and
 * gets its own outcome exactly as in due_complete_batch(), then the claim
 * runs as due_claim_ex().  This is how a busy worker keeps one commit per
 * batch.  *out receives the claimed tasks (possibly none).
 */
DUE_EXTERN int due_complete_and_claim(due_db *db, due_completion *items,
				      size_t n,
				      const struct due_claim_opts *claim,
				      due_task_list **out);

/** Attempt outcomes (due_attempt.outcome; counted in due_metrics.outcomes). */
typedef enum due_outcome {
	DUE_OUT_RUNNING = 0,
	DUE_OUT_DONE,
	DUE_OUT_FAILED,
	DUE_OUT_LEASE_EXPIRED,
	DUE_OUT_CANCELLED,
	DUE_OUT_REQUEUED,
	DUE_OUT_KILLED,
	DUE_OUT_TIMED_OUT,	/**< stopped at its time limit (a failure) */
	DUE_OUT_REJECTED_STALE, /**< late commits refused by fencing */
	DUE_OUT_COUNT
} due_outcome;

DUE_EXTERN const char *due_outcome_name(due_outcome o);

typedef enum due_fail_outcome {
	DUE_FAIL_RETRY_SCHEDULED = 0,
	DUE_FAIL_DEAD,
	DUE_FAIL_CANCELLED,
	DUE_FAIL_REJECTED_STALE
} due_fail_outcome;

DUE_EXTERN const char *due_fail_outcome_name(due_fail_outcome o);

/**
 * Fail try (id, attempt) with an error text.  With attempts left the task
 * goes back to SCHEDULED due at now + due_backoff_us(...); used up: DEAD with
 * last_error; cancel requested: CANCELLED.  Stale: REJECTED_STALE.
 */
DUE_EXTERN int due_fail(due_db *db, due_fail_outcome *out, due_id id,
			int32_t attempt, const char *error);

/**
 * due_fail() recording the try's outcome as `as`: DUE_OUT_FAILED (what
 * due_fail does) or DUE_OUT_TIMED_OUT (the handler ran past its time
 * limit and was stopped).  Either counts as a failure: backoff, retry,
 * dead letter.  Any other outcome is DUE_EINVAL.
 */
DUE_EXTERN int due_fail_as(due_db *db, due_fail_outcome *out, due_id id,
			   int32_t attempt, const char *error, due_outcome as);

/** Counts of what a reclaim did. */
typedef struct due_reclaimed {
	int64_t rescheduled;
	int64_t dead;
	int64_t cancelled;
	due_time
	    next_expiry; /**< earliest lease_until still CLAIMED; 0 if none */
	due_time now;	 /**< the store's clock when next_expiry was read */
} due_reclaimed;

/**
 * Take back every expired lease (lease_until < store now): to SCHEDULED (due
 * now) with attempts left, DEAD when used up, CANCELLED when cancel was
 * requested.  The predicate is re-checked in the writing statement.
 */
DUE_EXTERN int due_reclaim_expired(due_db *db, due_reclaimed *out);

/** Tasks due soon, for a worker's timing wheel (a cache of the store). */
typedef struct due_upcoming {
	size_t count;
	due_id *ids;
	due_time *due_at;
	due_time now; /**< the store's clock when read */
	/** earliest lease still CLAIMED; 0 if none.  Before `now` when the
	    store wants a reclaim pass for another reason (MySQL on Galera:
	    a run-after child left held on an ended parent, which the pass
	    releases); a worker reclaims then as for an expired lease */
	due_time next_expiry;
	bool truncated; /**< more tasks were due before `until` than `limit` */
} due_upcoming;

/**
 * The ids and due times of SCHEDULED tasks due before `until`, earliest
 * first, at most `limit` (kinds filter as in due_claim_ex).  One indexed
 * read; it also reports the next lease expiry so a worker can fold its
 * reclaim check into the same query.
 */
DUE_EXTERN int due_upcoming_get(due_db *db, due_upcoming **out,
				const char *const *kinds, size_t n_kinds,
				bool exclude_kinds, due_time until, int limit);
DUE_EXTERN void due_upcoming_free(due_upcoming *u);

/**
 * Listen for new submits on this handle.  *out_fd becomes readable when
 * tasks may have been added (PostgreSQL: LISTEN due_task_new on this
 * connection; SQLite: an inotify watch on the store's wake file, which
 * every submit touches after commit, across processes on the host).
 * Poll it, then call due_listen_drain().  DUE_ESTATE when the store cannot
 * deliver notifications here (the caller should poll instead).
 */
DUE_EXTERN int due_listen(due_db *db, int *out_fd);
/** Consume pending notifications; *out_count gets how many arrived. */
DUE_EXTERN int due_listen_drain(due_db *db, int *out_count);
/**
 * Wake listeners now.  Submits do this themselves; call it after
 * committing your own transaction that used due_schedule_sqlite_tx().
 */
DUE_EXTERN int due_notify(due_db *db);

/**
 * Listen for finished tasks on this handle: *out_fd becomes readable when
 * a task may have ended (DONE, DEAD or CANCELLED).  PostgreSQL: LISTEN
 * due_task_done; SQLite: an inotify watch on the store's "-done" file;
 * Redis: SUBSCRIBE to the store's done channel.  PostgreSQL and Redis
 * notify only while someone says it listens, for 30 s a call: call this
 * again at least every 10 s while you listen.
 * Poll it, re-read what you wait for, then call due_listen_drain().  A
 * handle listens for new tasks (due_listen) or for finished ones, not both.
 * DUE_EUNSUPPORTED (MySQL, PostgreSQL behind a pooler without listen=)
 * or DUE_ESTATE: the caller polls instead.
 */
DUE_EXTERN int due_listen_finished(due_db *db, int *out_fd);

/**
 * Wait until task `id` is finished (DONE, DEAD or CANCELLED) and return it
 * in *out, with its attempts, as due_get() does.  timeout_us < 0 waits
 * forever; 0 looks once.  Woken by the store's notifications where it has
 * them (due_listen_finished), re-reading the task at least every 5 s
 * anyway; where it has none, by re-reading it with a backoff from 50 ms
 * to 1 s.  A store call that fails (DUE_ESTORE) is retried with the same
 * backoff, on a new connection, for up to DUE_WAIT_OUTAGE_US of failures
 * in a row (or the timeout, when sooner), then its error is returned.
 * Returns 0 (finished), DUE_ENOTFOUND (no such task), DUE_EINVAL (id <=
 * 0), or DUE_ETIMEDOUT: the time passed first, and *out then holds the
 * task as last read (not finished); free it as any task.  On any other
 * failure *out is NULL.
 */
DUE_EXTERN int due_wait(due_db *db, due_task **out, due_id id,
			int64_t timeout_us);

/** How long due_wait() keeps retrying a store that fails: 30 s. */
#define DUE_WAIT_OUTAGE_US 30000000LL

/* ------------------------------------------------------------------ */
/* Operator                                                            */
/* ------------------------------------------------------------------ */

/** DEAD -> SCHEDULED due now, with a fresh attempt budget.  DUE_ESTATE if not
 * DEAD. */
DUE_EXTERN int due_retry(due_db *db, due_id id);
/** CLAIMED -> SCHEDULED due now, fencing the old holder.  DUE_ESTATE if not
 * CLAIMED. */
DUE_EXTERN int due_requeue(due_db *db, due_id id);
/**
 * SCHEDULED or CLAIMED -> DEAD (or CANCELLED when a cancel was requested);
 * a running holder is fenced.  A DEAD task (a dead letter) -> CANCELLED:
 * the operator dismisses it, having decided it must not run (seed 004's
 * "kill once the business no longer needs it"); recorded in the audit
 * table, and it no longer holds health DOWN.  *out_state (may be NULL)
 * receives the final state.  DUE_ESTATE for DONE or CANCELLED.
 */
DUE_EXTERN int due_kill(due_db *db, due_state *out_state, due_id id);

/** Dead letters, oldest first. */
DUE_EXTERN int due_dead(due_db *db, due_task_list **out, int limit);

typedef struct due_stats {
	int64_t counts[DUE_STATE_COUNT]; /**< indexed by due_state */
	int64_t dead;
	int64_t due_unclaimed;		 /**< SCHEDULED with due_at <= now */
	int64_t oldest_due_unclaimed_ms; /**< 0 when none */
	int64_t
	    lateness_p50_us; /**< over claims in the last window; -1 if none */
	int64_t lateness_p99_us;
	int64_t lateness_max_us;
	int64_t claims_window; /**< claims counted in that window */
	int64_t window_us;
	due_time now;
	/**
	 * Bit (1u << state) set when counts[state] is an estimate rather
	 * than an exact count (docs/HTTP.md names which figures may be).
	 * CLAIMED, DEAD, dead, due_unclaimed and oldest_due_unclaimed_ms are
	 * always exact.  Reading stats never scans the whole task table.
	 */
	uint32_t estimated;
} due_stats;

DUE_EXTERN int due_stats_get(due_db *db, due_stats *out);

/** UP (true) when no dead letters exist.  *out_dead receives their number. */
DUE_EXTERN int due_health(due_db *db, bool *out_up, int64_t *out_dead);

/**
 * Delete DONE and CANCELLED tasks (and their history) last updated more than
 * older_than_us ago, in bounded batches.  DEAD tasks are never pruned.
 */
DUE_EXTERN int due_prune(due_db *db, int64_t *out_deleted,
			 int64_t older_than_us);

/**
 * As due_prune(), stopping once max_rows tasks are deleted (0: no limit):
 * *out_deleted < max_rows means nothing old is left.  A caller that
 * prunes millions calls it in a loop to say how far it is (`due prune` on
 * a terminal) or to pause between calls; each call's batches commit as
 * due_prune()'s do.
 */
DUE_EXTERN int due_prune_max(due_db *db, int64_t *out_deleted,
			     int64_t older_than_us, int64_t max_rows);

/** Rows deleted per transaction by due_prune() and worker retention. */
#define DUE_PRUNE_BATCH 1000

/**
 * What the store occupies, in bytes: PostgreSQL the due_* relations with
 * their indexes and TOAST; SQLite the database file and its WAL; MariaDB
 * the tables' data and index length; Redis the server's used_memory.
 */
DUE_EXTERN int due_store_bytes(due_db *db, int64_t *out_bytes);

/**
 * What this process's store connections have done since it started,
 * summed over every handle of every thread (a worker's included), as
 * sqlite3_status() counts a process: divided by the tasks seen over an
 * interval, the store work per task, for monitoring and `due bench`.
 * Counted by the SQLite store; the other stores leave every field 0.
 */
typedef struct due_store_work {
	/** Set by the caller to DUE_STORE_WORK_VERSION. */
	unsigned version;
	/** Statements run (BEGIN and COMMIT included). */
	uint64_t statements;
	/**
	 * SQLite virtual-machine steps of those statements
	 * (sqlite3_stmt_status SQLITE_STMTSTATUS_VM_STEP).  A statement's
	 * steps are added when the handle next uses it or closes, so a read
	 * may miss the last run of each statement of a handle still open.
	 */
	uint64_t vm_steps;
	/** Rows inserted, updated or deleted (sqlite3_total_changes). */
	uint64_t rows_written;
} due_store_work;

#define DUE_STORE_WORK_VERSION 1

/**
 * Read the counters into *out (out->version set by the caller; fields of
 * later versions are left alone).  0, or DUE_EINVAL for an unknown version.
 * Any thread, any time: no store is touched.
 */
DUE_EXTERN int due_store_work_read(due_store_work *out);

/* ------------------------------------------------------------------ */
/* Flow control: per-kind settings held by the store                   */
/* ------------------------------------------------------------------ */

/**
 * Settings of one kind, kept in the store and obeyed by every claim of
 * every worker (docs/CONTRACT.md, "Flow control"):
 *  - paused: no task of the kind is claimed; running tries finish.
 *  - rate_n per rate_us: no window of rate_us holds more than rate_n claims
 *    of the kind (store clock), across all workers.
 *  - max_running: at most this many tries of the kind hold a live lease.
 *  - max_running_per_group: at most this many per (kind, group); tasks
 *    without a group are bound by max_running only.
 *  - timeout_us: the time limit of a try of a task that has none of its own.
 * A running try counts until it ends or its lease expires, whichever is
 * first, so a worker killed with -9 frees its slots within one lease.
 *
 * For due_kind_set(): each field is a change, -1 leaves it as stored, 0
 * removes the limit (paused: 0 resumes, 1 pauses).  rate_n > 0 needs
 * rate_us > 0.  A kind with no settings left is still listed until
 * due_kind_remove().
 */
typedef struct due_kind_settings {
	unsigned version;	       /**< DUE_KIND_SETTINGS_VERSION */
	int paused;		       /**< -1 keep, 0 resume, 1 pause */
	int32_t rate_n;		       /**< -1 keep, 0 none, else 1..1000000 */
	int64_t rate_us;	       /**< the rate's window, 1 ms .. 1 day */
	int32_t max_running;	       /**< -1 keep, 0 none, else 1..1000000 */
	int32_t max_running_per_group; /**< -1 keep, 0 none, else 1..1000000 */
	int64_t timeout_us;	       /**< -1 keep, 0 none, else > 0 */
} due_kind_settings;

#define DUE_KIND_SETTINGS_VERSION 1
#define DUE_KIND_SETTINGS_INIT                                                 \
	{                                                                      \
		DUE_KIND_SETTINGS_VERSION, -1, -1, 0, -1, -1, -1               \
	}

/** A kind's settings and what they hold back now. */
typedef struct due_kind_info {
	char *kind;
	bool paused;
	int32_t rate_n; /**< 0: no rate */
	int64_t rate_us;
	int32_t max_running;	       /**< 0: none */
	int32_t max_running_per_group; /**< 0: none */
	int64_t timeout_us;	       /**< 0: none */
	/* Live, read with the settings: */
	int64_t running;   /**< tries of the kind with a live lease */
	int64_t rate_used; /**< claims in the last rate_us (0 without rate) */
	int64_t due;	   /**< SCHEDULED tasks of the kind due now */
	/**
	 * Claim passes that found due tasks of the kind and had to leave some
	 * of them because of the rate, max_running, or the group limit
	 * (counted by the store since the kind was first set).
	 */
	int64_t held_rate, held_running, held_group;
	int64_t group_running; /**< due_task_hold() only: the task's group */
	due_time updated_at;
} due_kind_info;

typedef struct due_kind_info_list {
	size_t count;
	due_kind_info *items;
} due_kind_info_list;

DUE_EXTERN void due_kind_info_free(due_kind_info *k);
DUE_EXTERN void due_kind_info_list_free(due_kind_info_list *l);

/**
 * Change a kind's settings (creating its entry).  Checked first: a bad
 * value is DUE_EINVAL naming it, and nothing changes; a settings struct
 * that changes nothing is DUE_EINVAL too.  Resuming a kind, or loosening
 * a limit, wakes waiting workers at once.
 */
DUE_EXTERN int due_kind_set(due_db *db, const char *kind,
			    const due_kind_settings *s);
/** One kind's settings.  DUE_ENOTFOUND when it has none. */
DUE_EXTERN int due_kind_get(due_db *db, due_kind_info **out, const char *kind);
/** Every kind with settings, by name. */
DUE_EXTERN int due_kind_list(due_db *db, due_kind_info_list **out);
/** Forget a kind's settings (no limits, not paused).  DUE_ENOTFOUND. */
DUE_EXTERN int due_kind_remove(due_db *db, const char *kind);

/**
 * The results of task t's parents (run-after), as one JSON object text:
 * {"41": {"state": "DONE", "result": "..."}, ...}, keyed by parent id, a
 * result that is not UTF-8 as "result_b64"; "{}" for a task with none.
 * Bounded by max_bytes (0: DUE_PARENT_RESULTS_MAX): a result that would
 * take the text past it is left out, its entry saying "result_omitted":
 * its size (the entries, some 50 bytes each, are always there).  A
 * parent since pruned is {"state": null}.  t may come from a claim (its
 * parents are then read with due_get).  *out is malloc'd: free() it.
 */
DUE_EXTERN int due_parent_results(due_db *db, char **out, const due_task *t,
				  size_t max_bytes);

/**
 * Why a SCHEDULED task is not being claimed: "after" while it waits for
 * parents (run-after: after_left > 0); else, when it is due, if a setting
 * of its kind holds it: "paused", "rate", "max_running" or
 * "max_running_per_group" (static strings); NULL when nothing holds it
 * (not due, not SCHEDULED, or free to be claimed).
 */
DUE_EXTERN int due_task_hold(due_db *db, const char **out_reason,
			     const due_task *t);

/* ------------------------------------------------------------------ */
/* Periodic schedules (cron)                                           */
/* ------------------------------------------------------------------ */

/**
 * A schedule turns each fire slot of a cron expression, computed in an
 * explicit IANA zone, into one ordinary task shortly before the slot is
 * due.  Every slot is materialized exactly once however many schedulers
 * run: the schedule's `next_slot` is advanced by compare-and-set in the
 * same transaction that inserts the slot's task (key "cron:<name>:<unix
 * seconds of the slot>").  Nothing to guess, no lock TTL.
 */
typedef enum due_misfire {
	DUE_MISFIRE_SKIP = 0, /**< missed slots are counted, not run */
	DUE_MISFIRE_ONCE      /**< one catch-up run for the missed slots */
} due_misfire;

typedef enum due_overlap {
	DUE_OVERLAP_ALLOW =
	    0,		 /**< a slot fires even if the last run is still live */
	DUE_OVERLAP_WAIT /**< a slot waits until the previous slot's task ended
			  */
} due_overlap;

typedef struct due_cron_def {
	unsigned version;
	const char *name; /**< letters, digits, _ - . : (1..128) */
	const char *expr; /**< 5 or 6 fields, or @hourly ... */
	const char *kind; /**< kind of the tasks it creates */
	const char *tz;	  /**< IANA zone; NULL = "UTC" */
	const void *payload;
	size_t payload_len;
	due_misfire misfire;
	due_overlap overlap;
	int32_t max_attempts;
	int64_t backoff_us;
	int64_t backoff_cap_us;
} due_cron_def;

#define DUE_CRON_DEF_VERSION 1
#define DUE_CRON_DEF_INIT                                                      \
	{                                                                      \
		DUE_CRON_DEF_VERSION, NULL, NULL, NULL, NULL, NULL, 0,         \
		    DUE_MISFIRE_SKIP, DUE_OVERLAP_ALLOW, 5, 1000000,           \
		    3600000000LL                                               \
	}

/** A schedule as stored. */
typedef struct due_cron_info {
	char *name, *expr, *kind, *tz;
	unsigned char *payload;
	size_t payload_len;
	due_misfire misfire;
	due_overlap overlap;
	int32_t max_attempts;
	int64_t backoff_us, backoff_cap_us;
	due_time next_slot;   /**< the next slot to materialize */
	due_time last_slot;   /**< last slot materialized; 0 if none */
	due_id last_task;     /**< its task; 0 if none */
	int64_t fired;	      /**< slots materialized (catch-ups included) */
	int64_t missed;	      /**< slots recorded as missed */
	due_time last_missed; /**< the latest missed slot; 0 if none */
	due_time created_at, updated_at;
} due_cron_info;

typedef struct due_cron_info_list {
	size_t count;
	due_cron_info *items;
} due_cron_info_list;

DUE_EXTERN void due_cron_info_list_free(due_cron_info_list *l);

/**
 * Create or replace a schedule.  The expression and zone are checked
 * (errors name the field and value; an expression that never fires is
 * refused).  A change takes effect from the next slot after now (and after
 * the last slot already materialized, which stays an ordinary task).
 */
DUE_EXTERN int due_cron_put(due_db *db, const due_cron_def *def);
/** Remove a schedule; its materialized tasks stay.  DUE_ENOTFOUND if none. */
DUE_EXTERN int due_cron_remove(due_db *db, const char *name);
/** All schedules, by name. */
DUE_EXTERN int due_cron_list(due_db *db, due_cron_info_list **out);

/** What one scheduler pass did. */
typedef struct due_cron_tick_result {
	int64_t materialized; /**< slot tasks inserted (catch-ups included) */
	int64_t missed;	      /**< slots recorded as missed */
	int64_t
	    waiting; /**< schedules holding a slot for a live previous run */
	int64_t lost_races; /**< slots another scheduler materialized first */
	due_time
	    next_slot; /**< earliest next_slot over all schedules; 0 if none */
	due_time now;  /**< store clock of this pass */
} due_cron_tick_result;

#define DUE_CRON_MISFIRE_GRACE_US (30LL * 1000000)

typedef struct due_cron_tick_opts {
	unsigned version; /**< DUE_CRON_TICK_OPTS_VERSION */
	int64_t
	    lookahead_us; /**< slots due before now + this; 0..1 h, default 0 */
	int64_t
	    misfire_grace_us; /**< lateness still run as usual; 0..1 d, 30 s */
} due_cron_tick_opts;

#define DUE_CRON_TICK_OPTS_VERSION 1
#define DUE_CRON_TICK_OPTS_INIT                                                \
	{                                                                      \
		DUE_CRON_TICK_OPTS_VERSION, 0, DUE_CRON_MISFIRE_GRACE_US       \
	}

/**
 * One scheduler pass: materialize every slot due before now +
 * opts->lookahead_us (opts NULL: DUE_CRON_TICK_OPTS_INIT).  Safe to run
 * from any number of threads and processes at once.  A slot found more than
 * opts->misfire_grace_us late means no scheduler ran for a while: the
 * misfire policy decides (skip: count them and resume at the next slot;
 * once: one catch-up task due now, then resume).  A schedule that fails
 * does not stop the others; the first failure is returned (DUE_EINVAL for
 * an expression or zone that no longer compiles, DUE_ENOMEM, a store
 * error) and *out counts what the others did.  DUE_EINVAL, before anything
 * is done, for an unknown opts->version or a value out of range.
 */
DUE_EXTERN int due_cron_tick(due_db *db, due_cron_tick_result *out,
			     const due_cron_tick_opts *opts);

/**
 * The next n fire times of `expr` in `zone` (NULL: UTC) strictly after
 * `after`, for checking an expression before trusting it.  *out_count may
 * be less than n for an expression that stops firing.  Errors name the
 * field and value, or the unknown zone.
 */
DUE_EXTERN int due_cron_preview(due_time *out, size_t n, size_t *out_count,
				const char *expr, const char *zone,
				due_time after);

/** Format t as RFC 3339 local time in zone: "2026-03-29T03:00:00+02:00". */
DUE_EXTERN int due_time_format_zone(char *buf, size_t len, due_time t,
				    const char *zone);

/* ------------------------------------------------------------------ */
/* Metrics                                                             */
/* ------------------------------------------------------------------ */

/** Histogram bucket upper bounds in milliseconds (the last bucket is +Inf). */
#define DUE_HIST_N 14
extern DUE_EXTERN const double due_hist_bounds_ms[DUE_HIST_N];

typedef struct due_histogram {
	int64_t buckets[DUE_HIST_N +
			1]; /**< per bucket, not cumulative; [N] = +Inf */
	int64_t count;
	double sum_ms;
} due_histogram;

typedef struct due_kind_counts {
	char *kind;
	int64_t counts[DUE_STATE_COUNT];
} due_kind_counts;

/**
 * Everything an operator dashboard or Prometheus needs, read from the
 * store, so that every worker's numbers are seen (not only this process's).
 * Histograms and outcomes cover the attempts history kept in the store
 * (prune removes old history); worker counters are the sums of what live
 * workers reported in the last 5 minutes.
 */
typedef struct due_metrics {
	due_stats stats;
	size_t n_kinds;
	due_kind_counts *kinds;
	due_histogram lateness; /**< claimed_at - due_at */
	due_histogram duration; /**< ended_at - claimed_at of ended tries */
	int64_t outcomes[DUE_OUT_COUNT];
	int64_t done_per_min[15]; /**< completions in each of the last 15
				     minutes, [0] = latest */
	int64_t workers; /**< workers that reported in the last 5 min */
	int64_t claim_queries, empty_claims, reclaim_queries, store_errors;
	size_t n_schedules;
	/** Bit (1u << state) set when kinds[i].counts[state] is an estimate. */
	uint32_t kinds_estimated;
	/**
	 * The histograms, outcomes and done_per_min cover the tries claimed
	 * in the last window_us (store clock), found through an index: their
	 * cost follows the recent rate, not the size of the history.
	 */
	int64_t window_us;
	/** Tasks deleted by retention, summed over the live workers. */
	int64_t pruned;
	/**
	 * Tries whose handler the live workers stopped because the lease was
	 * lost or not confirmed in time (the lease clock), summed.
	 */
	int64_t lease_lost;
} due_metrics;

DUE_EXTERN int due_metrics_get(due_db *db, due_metrics **out);
DUE_EXTERN void due_metrics_free(due_metrics *m);

/* ------------------------------------------------------------------ */
/* Worker runtime                                                      */
/* ------------------------------------------------------------------ */

/**
 * A worker claims due tasks and runs handlers for them, renewing each lease
 * every lease/3 while its handler runs.  Threads: one claimer (which also
 * runs inline handlers), one lease renewer, one keeper (the local clock:
 * it stops a try whose lease the store has not confirmed in time, whatever
 * the store does), one completer that commits results in batches (each row
 * fenced on its own), and the handler pools.  Connections: one shared by
 * the threads (taken in turn), one of the renewer's, one that only
 * listens for new tasks on stores that can notify: three at most, and a
 * fourth only while completion hooks (due_job_set_tx_hook) are used.  Each
 * waits at most a third of the lease for the store (due_open_opts).
 */
typedef struct due_worker due_worker;

/** A running try, handed to a handler.  Borrowed: valid during the call. */
typedef struct due_job due_job;

/**
 * A handler.  Return 0 to complete the try (with the result set by
 * due_job_set_result(), else empty) or non-zero to fail it (with the text
 * set by due_job_set_error(), else "handler failed").  A handler should
 * check due_job_lease_held() during long work and stop when it turns false:
 * the try was taken back or cancelled, and its completion will be refused.
 */
typedef int (*due_handler_fn)(due_job *job, void *payload);

/** The task being run (claimed state: id, kind, payload, attempt ...). */
DUE_EXTERN const due_task *due_job_task(const due_job *job);
/** The worker's owner name (lease_owner of this try). */
DUE_EXTERN const char *due_job_owner(const due_job *job);
/**
 * False once the lease is known lost or a cancel was requested (seen by
 * a renewal), once the lease is no longer surely held (no renewal the
 * store confirmed for lease - margin, the lease clock: the store may hang),
 * or the worker is past its shutdown grace.  The store refuses a stale
 * completion either way; this lets the handler stop early, and an
 * in-process handler that goes on past it may run beside the next attempt
 * on another worker: check it often in long work.
 */
DUE_EXTERN bool due_job_lease_held(const due_job *job);
/**
 * For a task added with run-after: its parents' results as
 * due_parent_results() gives them (read before the handler is called), or
 * NULL when the task has no parents.  Borrowed, like the job.
 */
DUE_EXTERN const char *due_job_parent_results(const due_job *job);
/** Copy the result to commit (up to the store's result limit). */
DUE_EXTERN int due_job_set_result(due_job *job, const void *data, size_t len);
/** Set the error text for a failure (copied, truncated to 4 KiB). */
DUE_EXTERN void due_job_set_error(due_job *job, const char *text);
/**
 * Write your own rows in the completion transaction: `hook` is called with
 * the store's native connection after the fenced update made the task DONE
 * and before commit (see due_tx_hook).  Not called when the try is stale.
 */
DUE_EXTERN void due_job_set_tx_hook(due_job *job, due_tx_hook hook,
				    void *payload);

typedef enum due_exec_mode {
	DUE_MODE_POOL =
	    0, /**< handlers run in pool threads; claiming never waits */
	DUE_MODE_INLINE /**< handlers run in the claiming thread, one by one */
} due_exec_mode;

typedef struct due_worker_opts {
	unsigned version;
	const char *url;   /**< store URL (required) */
	const char *owner; /**< lease owner name; default "<host>:<pid>" */
	int concurrency;   /**< shared pool threads; default 4 */
	due_exec_mode mode;
	int64_t lease_us; /**< default 30 s; renewed every lease/3; a try
			       with no renewal confirmed for lease - 15 %
			       (300 ms..5 s) is stopped (the lease clock) */
	int64_t poll_us;  /**< see `no_wheel` below; 0 = the default */
	int64_t
	    grace_us;  /**< shutdown grace for in-flight tries; default 30 s */
	bool once;     /**< drain what is due now, then return */
	int log_level; /**< 0 quiet, 1 normal (default), 2 every task */
	bool cron;     /**< also run the schedules (default off in the C API) */
	int64_t
	    cron_grace_us; /**< misfire grace; 0 = DUE_CRON_MISFIRE_GRACE_US */
	/**
	 * Discovery.  With the wheel (default), the worker keeps the ids of
	 * tasks due within `horizon_us` in a timing wheel, claims at their due
	 * tick, and learns of new submits at once (LISTEN/NOTIFY, or the SQLite
	 * wake file); poll_us is then only the safety poll (0 = 30 s;
	 * a refill then loads up to max(horizon_us, poll_us + horizon_us / 2)
	 * ahead, so nothing waits for a poll after the one that should load
	 * it).  Without it (or in once-mode, or when notifications cannot be
	 * delivered) the worker polls every poll_us (0 = 1 s).
	 */
	bool no_wheel;
	int64_t horizon_us; /**< 0 = 60 s */
	int wheel_max;	    /**< ids held in memory at most; 0 = 100000 */
	/**
	 * Retention: DONE and CANCELLED tasks whose end is older than this
	 * are deleted with their history, DUE_PRUNE_BATCH rows a
	 * transaction, by at most one worker of the store at a time (a lease
	 * the store keeps), at least once a minute while any are left, and
	 * every 5 minutes (at most every half retention) once a look found
	 * none.
	 * 0 = DUE_RETAIN_DEFAULT_US (7 days); DUE_RETAIN_ALL keeps everything.
	 */
	int64_t retain_us;
} due_worker_opts;

#define DUE_RETAIN_DEFAULT_US (7LL * 24 * 3600 * 1000000)
#define DUE_RETAIN_ALL (-1)

#define DUE_WORKER_OPTS_VERSION 2 /* 2: retain_us */
#define DUE_WORKER_OPTS_INIT                                                   \
	{                                                                      \
		DUE_WORKER_OPTS_VERSION, NULL, NULL, 4, DUE_MODE_POOL,         \
		    30000000, 0, 30000000, false, 1, false, 0, false, 0, 0, 0  \
	}

/** Create a worker (does not connect yet).  Free with due_worker_free(). */
DUE_EXTERN int due_worker_new(due_worker **out, const due_worker_opts *opts);
DUE_EXTERN void due_worker_free(due_worker *w);

/**
 * Register the handler for `kind` (NULL: every kind without a handler of
 * its own).  pool_size 0 runs it in the shared pool; > 0 gives the kind an
 * isolated pool of that many threads, so a slow kind cannot starve others.
 * Call before due_worker_run().
 */
DUE_EXTERN int due_worker_register(due_worker *w, const char *kind,
				   due_handler_fn fn, void *payload,
				   int pool_size);

/**
 * Run until due_worker_stop() (or, with opts.once, until nothing due is
 * left).  On stop: claims cease, in-flight tries get opts.grace_us to
 * finish, then their handlers are told to stop (leases left to expire).
 * Store errors never end the run: the worker backs off and retries.
 * Returns 0, or a negative code when it could not start.
 */
DUE_EXTERN int due_worker_run(due_worker *w);

/**
 * Ask a running worker to stop: no more claims, running tries get
 * opts.grace_us.  A second call ends the grace at once (a forced stop):
 * every running handler is told to stop (a command gets SIGTERM, then
 * SIGKILL after its kill grace) and its try is committed as failed, so the
 * task is retried by any worker.  Async-signal-safe; any thread.
 */
DUE_EXTERN void due_worker_stop(due_worker *w);

/**
 * Immediate mode: schedule a task due now through `db` (the caller's own
 * handle), then claim it by id and hand it straight to this running
 * worker's pool, without waiting for discovery.  If no slot is free, or
 * the process dies before the claim, the task is simply in the store and
 * is found as usual.  out->id is the task id.
 */
DUE_EXTERN int due_worker_submit(due_worker *w, due_db *db, due_submitted *out,
				 const char *kind, const void *payload,
				 size_t len, const due_schedule_opts *opts);

/** Counters of a worker since it started. */
typedef struct due_worker_stats {
	int64_t claimed, done, failed, dead, stale, cancelled, lease_lost;
	int64_t claim_queries, empty_claims, reclaim_queries, store_errors;
	int64_t wheel_fired, refills, notifications;
	int64_t lateness_p50_us, lateness_p99_us,
	    lateness_max_us; /**< recent claims */
	int64_t pruned;	     /**< tasks deleted by retention */
	/**
	 * Tries stopped by the lease clock: no renewal confirmed for lease -
	 * margin (also counted in lease_lost), and store calls that had no
	 * answer for 3 s (each logged once).
	 */
	int64_t lease_unconfirmed, stalled_calls;
} due_worker_stats;

DUE_EXTERN void due_worker_stats_get(due_worker *w, due_worker_stats *out);

/**
 * Record a worker's counters in the store (a running due_worker does this
 * itself when they change, at most every 10 s), so that due_metrics_get()
 * in any process sees every worker's numbers.
 */
DUE_EXTERN int due_worker_report(due_db *db, const char *owner,
				 const due_worker_stats *st);

/** Options of the command handler (what `due work --exec` runs). */
typedef struct due_exec_opts {
	unsigned version;
	const char *command;   /**< run as /bin/sh -c COMMAND */
	int64_t kill_grace_us; /**< SIGTERM -> SIGKILL delay; default 5 s */
	size_t max_result; /**< stdout bytes kept as result; default 1 MiB */
} due_exec_opts;

#define DUE_EXEC_OPTS_VERSION 1
#define DUE_EXEC_OPTS_INIT                                                     \
	{                                                                      \
		DUE_EXEC_OPTS_VERSION, NULL, 5000000, 1u << 20                 \
	}

/**
 * The command handler: pass it to due_worker_register() with a
 * due_exec_opts * (which must outlive the worker) as payload.  It runs the
 * command with the payload on stdin and DUE_TASK_ID, DUE_KIND, DUE_ATTEMPT,
 * DUE_IDEMPOTENCY_KEY (task-<id>), DUE_DUE_AT, DUE_PRIORITY and, for a
 * task with a group, DUE_GROUP in the environment; exit 0
 * completes with stdout as result, anything else fails with the tail of
 * stderr.  When the lease is lost, a cancel is requested or the try runs past
 * its time limit (due_task.timeout_us), it sends SIGTERM to the command's
 * process group, then SIGKILL after kill_grace_us; if the worker process dies
 * (even by SIGKILL) a guard process does the same, so the command never
 * outlives it.  Each handler slot keeps a guard process (started by a
 * helper the worker forks once; both end with the worker) and each command
 * is a vfork of its guard, never a fork of the worker.
 * The payload never appears on a
 * command line.  The process must ignore SIGPIPE (due_worker_run does).
 */
DUE_EXTERN int due_exec_handler(due_job *job, void *payload);

/**
 * Long-lived handler processes over a line protocol (`due work --pipe`,
 * docs/INTERFACE.md).  A due_pipe keeps up to one process of `command` per
 * handler slot and reuses it: due writes one JSON object per line to its
 * stdin ({"id", "kind", "attempt", "due_at", "idempotency_key", "payload"
 * or "payload_b64"}) and reads one line from its stdout ({"id",
 * "attempt", "ok": true, "result": ...} or {..., "ok": false, "error":
 * ...}).  A lost lease, a cancel or a time limit stops that process
 * (SIGTERM, SIGKILL after kill_grace_us) and a fresh one is started for
 * the next task; a process that dies or writes a malformed line fails the
 * try with a clear error and is restarted after restart_backoff_us
 * (doubling up to 30 s while it keeps failing); one that writes to stdout
 * while no task is outstanding is replaced before the next task is sent.
 * Its stderr goes to the worker's log, prefixed with the task id, in whole
 * lines, at most 1,000 lines or 256 KiB a second per process (the log says
 * how many were dropped).  A pool thread ends its process as the worker
 * stops (EOF, SIGTERM 2 s later or at once on a forced stop, SIGKILL after
 * kill_grace_us); due_pipe_free() ends the others the same way.
 */
typedef struct due_pipe due_pipe;

typedef struct due_pipe_opts {
	unsigned version;
	const char *command;   /**< run as /bin/sh -c COMMAND */
	int64_t kill_grace_us; /**< SIGTERM -> SIGKILL delay; default 5 s */
	size_t max_result;     /**< result bytes kept; default 1 MiB */
	int64_t restart_backoff_us; /**< first restart delay; default 100 ms */
} due_pipe_opts;

#define DUE_PIPE_OPTS_VERSION 1
#define DUE_PIPE_OPTS_INIT                                                     \
	{                                                                      \
		DUE_PIPE_OPTS_VERSION, NULL, 5000000, 1u << 20, 100000         \
	}

/** A pipe handler's process set; free it after the worker has stopped. */
DUE_EXTERN int due_pipe_new(due_pipe **out, const due_pipe_opts *opts);
DUE_EXTERN void due_pipe_free(due_pipe *p);
/** The handler: due_worker_register(w, kind, due_pipe_handler, pipe, n). */
DUE_EXTERN int due_pipe_handler(due_job *job, void *pipe);

#ifdef __cplusplus
}
#endif

#endif /* DUE_H */
