/*
** internal.h - what the public API (src/core/) shares with the layers
** above the store that use a handle's inside: the worker (src/worker/)
** and the tests.  Not installed.  The base every layer includes is
** base/base.h; the store backends include that, never this.
*/
#ifndef DUE_INTERNAL_H
#define DUE_INTERNAL_H

#include "base/base.h"

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
** Whether the store's clock is this host's (DUE_STORE_CAP_HOST_CLOCK), so
** a worker may time its wheel against the host clock exactly: for the
** layers above the core, which do not include store.h.
*/
bool due__db_host_clock(const due_db *db);

#endif /* DUE_INTERNAL_H */
