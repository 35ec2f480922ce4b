/*
** admin.h - what `due verify`, `due bench`, `due scratch` and the tests
** ask of a store's backend beyond the public API (src/core/admin.c), so
** that none of them names a backend: the backends of this build, scratch
** stores beside a store, the server's own counters, and a raw SQL
** session on a store.  Each call goes to the backend's admin group
** (src/store/store.h, due_store_admin), found by the URL's scheme or the
** backend's name in the table (src/store/registry.c).
**
** Not installed and not exported (libdue.so hides it): the `due` program
** and the tests link the static library.  Functions return 0 or a
** negative DUE_E* code with the message set (due_error_last()), unless
** said otherwise.
*/
#ifndef DUE_ADMIN_H
#define DUE_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/counter.h"
#include "due.h"

/* A backend with, when made from a URL, the store that URL names. */
typedef struct due_admin due_admin;
/* A session on a store's server (due__server_*). */
typedef struct due__server due__server;
/* A raw SQL session on a store (due__sql_*). */
typedef struct due__sql due__sql;

/* What a verify case may need beyond the public API (due__admin_lacks). */
#define DUE_NEED_SQL (1u << 0)	     /* a raw SQL session */
#define DUE_NEED_ROW_LOCKS (1u << 1) /* ... whose FOR UPDATE locks rows */
#define DUE_NEED_STALL (1u << 2)     /* ... that can stall a write */
#define DUE_NEED_PLAN (1u << 3)	     /* the claim's plan, read and judged */

/* --- The backends of this build (registry.c's table, in its order) --- */

/* The name of the i-th backend (due_db_backend()), NULL past the last. */
const char *due__admin_backend(size_t i);
/*
** The environment variable naming the server the tests use for backend
** `name` (DUE_TEST_PG_URL, ...), or NULL: a store in files needs none.
*/
const char *due__admin_test_env(const char *name);
/*
** The process is the due executable: let every backend tune its library
** process-wide (store.h process_own).  Call first thing in main().
*/
void due__admin_process_own(void);

/* --- A backend, and the store a URL names --- */

/*
** The backend of the store at url (parsed by the backend; nothing is
** opened).  DUE_EINVAL on a malformed URL, DUE_EUNSUPPORTED when the
** backend has no admin group.  Free with due__admin_free.
*/
int due__admin_open(due_admin **out, const char *url);
/* Backend `name` with no store of the user's (scratch stores in files). */
int due__admin_open_backend(due_admin **out, const char *name);
void due__admin_free(due_admin *a);
/* The backend's name (due_db_backend()). */
const char *due__admin_name(const due_admin *a);
/*
** NULL when the store has all of `need` (DUE_NEED_*); else why it lacks
** the first it lacks (row locks, stall, SQL, plan), as `due verify`
** prints it: "NAME_has_no_X (why)" in the backend's words.
*/
const char *due__admin_lacks(const due_admin *a, unsigned need);
/* The DUE_COUNTER_* kinds the store's server reports (0: none). */
unsigned due__admin_counter_kinds(const due_admin *a);
/* Whether due__scratch_untune can do anything for this backend. */
bool due__admin_can_untune(const due_admin *a);

/* --- Scratch stores (store.h, due_store_admin: scratch_*) --- */

/* A mkdtemp() template for the directory of a's scratch files. */
int due__scratch_root(const due_admin *a, char *out, size_t n);
/*
** Make scratch store `name` (1 to 51 lowercase letters, digits or _;
** its store is named due_scratch_NAME: store.h) beside a's store, or in
** dir (a store in files), empty, and write its URL into url.  A name that
** exists is refused (DUE_ESTORE).
*/
int due__scratch_make(const due_admin *a, const char *name, const char *dir,
		      char *url, size_t n);
/* Drop scratch store `name` and all in it (none: 0); one that holds
   anything but due's tables is refused (DUE_ESTORE). */
int due__scratch_drop(const due_admin *a, const char *name, const char *dir);
/* The schema, database, key prefix or file name of scratch store `name`
   (due_scratch_NAME) into out (n >= 64 bytes). */
void due__scratch_store_name(const char *name, char *out, size_t n);
/* The store at url (a scratch store) untuned (store.h: untune). */
int due__scratch_untune(const char *url);

/* --- The server's own counters --- */

int due__server_open(due__server **out, const due_admin *a);
/* The counters as they are now, appended to out (cleared first). */
int due__server_read(due__server *s, due_counters *out);
void due__server_close(due__server *s);
/* Free what a reading holds (and leave it empty). */
void due__counters_clear(due_counters *c);

/* --- A raw SQL session (DUE_NEED_SQL) --- */

/* A session on the store at url; DUE_EUNSUPPORTED without SQL. */
int due__sql_open(due__sql **out, const char *url);
/*
** One statement in the shared dialect ($1 $2 int64, $3 text; nparams of
** them bound): the row count with the first column of up to cap rows in
** out, or -1.
*/
int due__sql_exec(due__sql *q, const char *sql, int nparams, int64_t p1,
		  int64_t p2, const char *p3, int64_t *out, int cap);
/*
** Hold what another session's write of task id waits on until q rolls
** back; *lock names it.  0 or -1 (DUE_NEED_STALL).
*/
int due__sql_hold(due__sql *q, due_id id, const char **lock);
/* The claim's plan over 40,000 tasks (store.h: plan_check). */
int due__sql_plan_check(due__sql *q, due_time now, bool *pass, char *detail,
			size_t dn, char *plans, size_t pn);
void due__sql_close(due__sql *q);

#endif /* DUE_ADMIN_H */
