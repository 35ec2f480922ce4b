/*
** internal.h - helpers shared by the library's own files (not installed).
*/
#ifndef DUE_INTERNAL_H
#define DUE_INTERNAL_H

#include "due.h"

#if defined(__GNUC__)
#define DUE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DUE_PRINTF(a, b)
#endif

/*
** Record a failure for this thread and return `code`, so callers can write
** `return due__error_set(DUE_EINVAL, "bad kind '%s'", k);`.
*/
int due__error_set(int code, const char *fmt, ...) DUE_PRINTF(2, 3);

/* Forget the last failure (successful calls need not call this). */
void due__error_clear(void);

/*
** A store's open() may leave one warning for the operator (a setting that
** can lose acknowledged writes in a crash, say): due_open() keeps it and
** due_db_warning() returns it; the CLI prints it.  Per thread, like the
** error; due_open() clears it before it opens.
*/
void due__open_warning_set(const char *fmt, ...) DUE_PRINTF(1, 2);
/* Take the pending warning (malloc'd, or NULL) and clear it. */
char *due__open_warning_take(void);

/*
** Add to the process's store-work counters (src/core/work.c,
** due_store_work_read): statements run, SQLite VM steps, rows written.
** Any thread; never fails.
*/
void due__work_add(uint64_t statements, uint64_t vm_steps,
		   uint64_t rows_written);

/*
** Progress of a long call (src/core/progress.c): due_open() sets the
** caller's due_open_opts.progress for this thread while it creates or
** upgrades the schema (NULL, NULL clears it), and due__migrate() reports
** each step through due__progress().  Per thread: the hook is called on
** the thread that set it, inside its call, and nowhere else.
*/
void due__progress_hook(due_progress_fn fn, void *payload);
void due__progress(const char *what, int64_t done, int64_t total);

/* Validation shared by every entry point (src/core/task.c). */
int due__validate_kind(const char *kind);
int due__validate_key(const char *key);
int due__validate_owner(const char *owner);

/*
** Retention's two steps (the worker's pruner): prune at most max_rows
** (0: all) tasks, and take or renew a store-wide named lease (store.h:
** prune, lock_take).
*/
int due__prune_max(due_db *db, int64_t *out_deleted, int64_t older_than_us,
		   int64_t max_rows);
int due__lock_take(due_db *db, bool *held, const char *name, const char *owner,
		   int64_t ttl_us);
/*
** Error texts come from handlers (a command's stderr) and may be any
** bytes; the stores keep them as text (PostgreSQL text, MySQL utf8mb4,
** JSON in the HTTP answers), which must be UTF-8.  due__utf8_valid says
** whether s is; due__utf8_scrub returns a malloc'd copy with every byte
** that is not part of a well-formed sequence replaced by U+FFFD.
*/
bool due__utf8_valid(const char *s);
char *due__utf8_scrub(const char *s);
/*
** Release what a task owns (strings, buffers, attempts), leaving the
** struct itself: for tasks embedded in other structs (src/core/task.c).
*/
void due__task_clear(due_task *t);

/* NULL (no group) or 1..255 bytes without control characters. */
int due__validate_group(const char *group);

/*
** Check one submit and copy it to *out with defaults filled in.  `what`
** (may be NULL) prefixes the message, e.g. "item 3".  `fixed_limit`: no
** setting raises max_payload (a caller's transaction), so the message names
** none.  src/core/db.c.
*/
int due__submit_check(const due_submit *in, due_submit *out, size_t max_payload,
		      bool fixed_limit, const char *what);
/*
** due__submit_check() of the arguments of due_schedule() (opts NULL: the
** defaults; an opts of an older version is read no further than its
** fields), without a `what`.  src/core/db.c.
*/
int due__submit_args(due_submit *out, const char *kind, const void *payload,
		     size_t payload_len, const due_schedule_opts *opts,
		     size_t max_payload, bool fixed_limit);

#define DUE_DEFAULT_MAX_PAYLOAD (1u << 20)

/* The last instant a due time may be: 9999-12-31T23:59:59.999999Z, the end
   of RFC 3339's four-digit years (due_time_parse refuses later ones). */
#define DUE_TIME_LAST 253402300799999999LL

/* The store behind a handle, for core files other than db.c. */
struct due_store_ops;
struct due_store;
const struct due_store_ops *due__db_ops(const due_db *db);
struct due_store *due__db_store(const due_db *db);
size_t due__db_max_payload(const due_db *db);

/*
** The capabilities (DUE_STORE_CAP_* of src/store/store.h) of the store
** behind db; 0 when db is not open.  Ask this, never the backend's name.
*/
unsigned due__db_caps(const due_db *db);

/*
** Names the stores write for enums, and back (src/core/names.c).  Parsing
** a name no table holds gives the default (skip, allow), or -1 for
** outcomes.
*/
int due__outcome_parse(const char *name);
const char *due__misfire_name(due_misfire m);
due_misfire due__misfire_parse(const char *name);
const char *due__overlap_name(due_overlap o);
due_overlap due__overlap_parse(const char *name);
/*
** The state named by the n bytes at p, as a store returned it (not
** NUL-terminated).  0, or DUE_ERROR naming the text: a store row with a
** state its schema's CHECK should have refused.
*/
int due__state_from_store(const char *p, size_t n, due_state *out);

/* time.c: the monotonic clock in microseconds; it paces local waits and
   never judges due time (the store's clock does). */
int64_t due__mono_us(void);

#endif /* DUE_INTERNAL_H */
