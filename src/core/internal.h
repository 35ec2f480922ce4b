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
** `return due_error_set(DUE_EINVAL, "bad kind '%s'", k);`.
*/
int due_error_set(int code, const char *fmt, ...) DUE_PRINTF(2, 3);

/* Forget the last failure (successful calls need not call this). */
void due_error_clear(void);

/* Validation shared by every entry point (src/core/validate.c). */
int due_validate_kind(const char *kind);
int due_validate_key(const char *key);
int due_validate_owner(const char *owner);

/*
** Check one submit and copy it to *out with defaults filled in.  `what`
** (may be NULL) prefixes the message, e.g. "item 3".  src/core/db.c.
*/
int due_submit_check(const due_submit *in, due_submit *out, size_t max_payload,
		     const char *what);

#define DUE_DEFAULT_MAX_PAYLOAD (1u << 20)

/* The store behind a handle, for core files other than db.c. */
struct due_store_ops;
struct due_store;
const struct due_store_ops *due_db_ops(const due_db *db);
struct due_store *due_db_store(const due_db *db);
size_t due_db_max_payload(const due_db *db);

#endif /* DUE_INTERNAL_H */
