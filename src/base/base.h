/*
** base.h - the base every layer of the library includes (not installed):
** the per-thread error and open warning, the store-work counters, the
** progress hook, validation of names, text helpers, the names the stores
** write for enums, the monotonic clock, and how a result the library hands
** out is cleared.  Its files (src/base/) use nothing of the library above
** them: no handle, no store, no worker; the store backends and the public
** API (src/core/) are built on it (DEVELOPERS.md, "Layout";
** scripts/layers checks it).
*/
#ifndef DUE_BASE_H
#define DUE_BASE_H

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
** One line on stderr, the worker's log, for what the library says on its
** own below the worker (a store's wake-up path, a slow server):
** "<time> due[<pid>] <level>: <who>[: <label>]: <message>".  Any thread.
*/
void due__log(const char *level, const char *who, const char *label,
	      const char *fmt, ...) DUE_PRINTF(4, 5);

/*
** Add to the process's store-work counters (work.c,
** due_store_work_read): statements run, SQLite VM steps, rows written.
** Any thread; never fails.
*/
void due__work_add(uint64_t statements, uint64_t vm_steps,
		   uint64_t rows_written);

/*
** Progress of a long call (progress.c): due_open() sets the
** caller's due_open_opts.progress for this thread while it creates or
** upgrades the schema (NULL, NULL clears it), and due__migrate() reports
** each step through due__progress().  Per thread: the hook is called on
** the thread that set it, inside its call, and nowhere else.
*/
void due__progress_hook(due_progress_fn fn, void *payload);
void due__progress(const char *what, int64_t done, int64_t total);

/* Validation shared by every entry point (task.c). */
int due__validate_kind(const char *kind);
int due__validate_key(const char *key);
int due__validate_owner(const char *owner);
/* A try's lease: DUE_LEASE_MIN_US to _MAX_US (the claim's and the
   worker's check). */
int due__validate_lease(int64_t lease_us);

/* NULL (no group) or 1..255 bytes without control characters. */
int due__validate_group(const char *group);

/*
** Error texts come from handlers (a command's stderr) and may be any
** bytes; the stores keep them as text (PostgreSQL text, MySQL utf8mb4,
** JSON in the HTTP answers), which must be UTF-8.  due__utf8_valid says
** whether s is; due__utf8_scrub returns a malloc'd copy with every byte
** that is not part of a well-formed sequence replaced by U+FFFD.
*/
bool due__utf8_valid(const char *s);
/* Standard base64 of n bytes, malloc'd and NUL-terminated; NULL on ENOMEM. */
char *due__base64(const unsigned char *p, size_t n);
char *due__utf8_scrub(const char *s);
/*
** Release what a task owns (strings, buffers, attempts), leaving the
** struct itself: for tasks embedded in other structs (task.c).
*/
void due__task_clear(due_task *t);

/* A malloc'd copy of the n bytes at s, NUL-terminated; NULL on ENOMEM
   (task.c). */
char *due__strdup_n(const char *s, size_t n);
/*
** Release what a schedule's or a kind's info owns and zero it, leaving the
** struct itself (results.c, with the public due_*_free of every result).
*/
void due__cron_info_clear(due_cron_info *i);
void due__kind_info_clear(due_kind_info *k);

/*
** Names the stores write for enums, and back (names.c).  Parsing
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

#endif /* DUE_BASE_H */
