/*
** registry.c - the table of store backends.
**
** This is the one place that names the backends this build has (curl's
** available_backends[]).  A URL finds its backend here by scheme, an
** unknown scheme's message lists what the table holds, and due_open()
** asks due__store_check() before it calls a backend's first method.
** `due verify`, `due bench` and the tests find every backend here too
** (due__store_at, due__store_named: src/core/admin.c).  To add a
** backend: its files define `const due_store_ops due__store_<name>` (and
** its admin group), and it gets one line below (inside its build
** option's #ifdef when it needs a library).
*/
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "store/store.h"

extern const due_store_ops due__store_sqlite;
extern const due_store_ops due__store_pg;
extern const due_store_ops due__store_redis;
extern const due_store_ops due__store_mysql;

static const due_store_ops *const backends[] = {
    &due__store_sqlite,
#ifdef DUE_WITH_PG
    &due__store_pg,
#endif
#ifdef DUE_WITH_REDIS
    &due__store_redis,
#endif
#ifdef DUE_WITH_MYSQL
    &due__store_mysql,
#endif
};

#define N_BACKENDS (sizeof(backends) / sizeof(backends[0]))

/*
** The optional backends this build was made without, by URL scheme, and
** the CMake option that brings each: a URL of one is then refused with
** an error that says how to get it, not only "unsupported scheme".
*/
static const struct {
	const char *scheme, *option;
} left_out[] = {
#ifndef DUE_WITH_PG
    {"postgres", "DUE_WITH_PG"},
    {"postgresql", "DUE_WITH_PG"},
#endif
#ifndef DUE_WITH_REDIS
    {"redis", "DUE_WITH_REDIS"},
    {"rediss", "DUE_WITH_REDIS"},
#endif
#ifndef DUE_WITH_MYSQL
    {"mysql", "DUE_WITH_MYSQL"},
    {"mariadb", "DUE_WITH_MYSQL"},
#endif
    {NULL, NULL}};

const char *due__store_left_out(const char *scheme, size_t n)
{
	for (size_t i = 0; left_out[i].scheme; i++)
		if (strlen(left_out[i].scheme) == n &&
		    strncmp(left_out[i].scheme, scheme, n) == 0)
			return left_out[i].option;
	return NULL;
}

/* Every function pointer of due_store_ops is listed in a METHODS macro. */
#define ONE(m) +1
_Static_assert(sizeof(due_store_ops) ==
		   offsetof(due_store_ops, parse_url) +
		       (0 DUE_STORE_METHODS(ONE) DUE_STORE_NOTIFY_METHODS(ONE)
			    DUE_STORE_TX_SUBMIT_METHODS(ONE)) *
			   sizeof(void (*)(void)),
	       "a method of due_store_ops is missing from DUE_STORE_*METHODS");
/* ... and every one of due_store_admin in an ADMIN list. */
_Static_assert(sizeof(due_store_admin) ==
		   offsetof(due_store_admin, scratch_root) +
		       (0 DUE_STORE_ADMIN_METHODS(ONE)
			    DUE_STORE_ADMIN_OPTIONAL_METHODS(ONE)
				DUE_STORE_SQL_METHODS(ONE)
				    DUE_STORE_STALL_METHODS(ONE)
					DUE_STORE_PLAN_METHODS(ONE)) *
			   sizeof(void (*)(void)),
	       "a method of due_store_admin is missing from its lists");
#undef ONE

const due_store_ops *due__store_at(size_t i)
{
	return i < N_BACKENDS ? backends[i] : NULL;
}

const due_store_ops *due__store_named(const char *name)
{
	for (size_t i = 0; i < N_BACKENDS; i++)
		if (strcmp(backends[i]->name, name) == 0)
			return backends[i];
	return NULL;
}

const due_store_ops *due__store_find(const char *scheme)
{
	for (size_t i = 0; i < N_BACKENDS; i++)
		for (const char *const *s = backends[i]->schemes; s && *s; s++)
			if (strcmp(*s, scheme) == 0)
				return backends[i];
	return NULL;
}

void due__store_schemes(char *buf, size_t n)
{
	size_t off = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < N_BACKENDS; i++)
		for (const char *const *s = backends[i]->schemes; s && *s;
		     s++) {
			int w = snprintf(buf + off, n - off,
					 "%s%s:", off ? ", " : "", *s);
			if (w < 0 || (size_t)w >= n - off)
				return;
			off += (size_t)w;
		}
}

static int missing(const due_store_ops *ops, const char *method)
{
	return due__error_set(
	    DUE_ESTORE, "store backend '%s' is incomplete: method '%s' is NULL",
	    ops->name ? ops->name : "?", method);
}

/*
** The admin group: present exactly with DUE_STORE_CAP_ADMIN, its methods
** set, and those of SQL, STALL and PLAN with their bits (ROW_LOCKS,
** STALL and PLAN are about the SQL session: they need SQL).
*/
static int admin_check(const due_store_ops *ops)
{
	const due_store_admin *a = ops->admin;
	unsigned sql_caps = DUE_STORE_CAP_SQL | DUE_STORE_CAP_ROW_LOCKS |
			    DUE_STORE_CAP_STALL | DUE_STORE_CAP_PLAN;

	if (!(ops->caps & DUE_STORE_CAP_ADMIN) != !a ||
	    (!a && (ops->caps & sql_caps)))
		return missing(ops, "admin");
	if (!a)
		return 0;
	if ((ops->caps & sql_caps) && !(ops->caps & DUE_STORE_CAP_SQL))
		return missing(ops, "sql_open");
#define REQUIRE(m)                                                             \
	if (!a->m)                                                             \
		return missing(ops, #m);
	DUE_STORE_ADMIN_METHODS(REQUIRE)
	if (ops->caps & DUE_STORE_CAP_SQL) {
		DUE_STORE_SQL_METHODS(REQUIRE)
	}
	if (ops->caps & DUE_STORE_CAP_STALL) {
		DUE_STORE_STALL_METHODS(REQUIRE)
	}
	if (ops->caps & DUE_STORE_CAP_PLAN) {
		DUE_STORE_PLAN_METHODS(REQUIRE)
	}
#undef REQUIRE
	return 0;
}

int due__store_check(const due_store_ops *ops)
{
	if (ops->version != DUE_STORE_OPS_VERSION)
		return due__error_set(
		    DUE_ESTORE,
		    "store backend '%s' implements store interface version "
		    "%d; this due needs version %d",
		    ops->name ? ops->name : "?", ops->version,
		    DUE_STORE_OPS_VERSION);
	if (!ops->name || !ops->schemes || !ops->schemes[0])
		return due__error_set(
		    DUE_ESTORE,
		    "store backend '%s' has no name or no URL scheme",
		    ops->name ? ops->name : "?");
#define REQUIRE(m)                                                             \
	if (!ops->m)                                                           \
		return missing(ops, #m);
	DUE_STORE_METHODS(REQUIRE)
	if (ops->caps & DUE_STORE_CAP_NOTIFY) {
		DUE_STORE_NOTIFY_METHODS(REQUIRE)
	}
	if (ops->caps & DUE_STORE_CAP_TX_SUBMIT) {
		DUE_STORE_TX_SUBMIT_METHODS(REQUIRE)
	}
#undef REQUIRE
	return admin_check(ops);
}
