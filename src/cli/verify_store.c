/*
** verify_store.c - the scratch stores of `due verify` and `due bench`,
** one per case, on every backend, and the raw SQL session on one.
**
** The backend of the store named by --db makes each scratch store beside
** the user's (core/admin.h: a new file in a directory beside a SQLite
** file, a schema, a Redis key prefix, a database...) and drops it
** afterwards; this file only names them and keeps the directories.  The
** user's own store is never read or written: every name made here
** carries `due_verify_<pid>_<seq>`.  A scratch store that cannot be
** dropped is reported on stderr and left, never retried blindly.
*/
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/verify.h"

int v_scratch_url(vctx *v)
{
	snprintf(v->schema, sizeof(v->schema), "due_verify_%d_%d",
		 (int)getpid(), v->seq);
	if (due__scratch_make(v->adm, v->schema, v->dir, v->url,
			      sizeof(v->url)) < 0) {
		fprintf(stderr, "%s: cannot make scratch store %s: %s\n",
			v->prog, v->schema, due_error_last());
		v->schema[0] = '\0';
		return -1;
	}
	return 0;
}

void v_scratch_drop(vctx *v)
{
	if (!v->schema[0])
		return;
	if (v->keep)
		v_say_kept(v);
	else if (due__scratch_drop(v->adm, v->schema, v->dir) < 0)
		fprintf(stderr, "%s: %s\n", v->prog, due_error_last());
}

int v_fresh(vctx *v, const char *name)
{
	due_open_opts o = DUE_OPEN_OPTS_INIT;

	v->seq++;
	v->unreachable[0] = '\0';
	snprintf(v->dir, sizeof(v->dir), "%.1024s/%02d-%.64s", v->root,
		 v->seq % 100, name);
	if (mkdir(v->dir, 0700) != 0) {
		fprintf(stderr, "%s: cannot create %s: %s\n", v->prog, v->dir,
			strerror(errno));
		return -1;
	}
	if (v_scratch_url(v) < 0)
		return -1;
	o.create = true;
	if (due_open(&v->db, v->url, &o) < 0) {
		fprintf(stderr, "%s: scratch store: %s\n", v->prog,
			due_error_last());
		due_close(v->db);
		v->db = NULL;
		return -1;
	}
	return 0;
}

void v_done(vctx *v)
{
	due_close(v->db);
	v->db = NULL;
	v_scratch_drop(v);
	v->schema[0] = '\0';
}

/* The scratch root: beside a file store's file, else under /tmp. */
static int make_root(vctx *v)
{
	if (due__scratch_root(v->adm, v->root, sizeof(v->root)) < 0) {
		fprintf(stderr, "%s: %s\n", v->prog, due_error_last());
		return -1;
	}
	if (!mkdtemp(v->root)) {
		fprintf(stderr, "%s: cannot create %s: %s\n", v->prog, v->root,
			strerror(errno));
		return -1;
	}
	return 0;
}

int v_setup(vctx *v, const char *base_url)
{
	due_db *probe = NULL;
	int rc = due_open(&probe, base_url, NULL);

	due_close(probe);
	if (rc == DUE_EINVAL)
		return rc; /* a malformed URL; a missing schema is fine here */
	v->base_url = base_url;
	if ((rc = due__admin_open(&v->adm, base_url)) < 0) {
		fprintf(stderr, "%s: %s\n", v->prog, due_error_last());
		return rc;
	}
	ssize_t n = readlink("/proc/self/exe", v->self, sizeof(v->self) - 1);
	if (n <= 0) {
		fprintf(stderr, "%s: cannot find the due binary\n", v->prog);
		return DUE_ERROR;
	}
	v->self[n] = '\0';
	signal(SIGPIPE, SIG_IGN);
	return make_root(v) < 0 ? DUE_ESTORE : 0;
}

static int remove_entry(const char *path, const struct stat *st, int type,
			struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

void v_teardown(vctx *v)
{
	due__admin_free(v->adm);
	v->adm = NULL;
	if (!v->root[0])
		return;
	if (v->keep) {
		fprintf(stderr, "%s: scratch kept in %s\n", v->prog, v->root);
		return;
	}
	/* no shell: the path comes from the user's store URL */
	if (nftw(v->root, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
		fprintf(stderr, "%s: could not remove %s\n", v->prog, v->root);
}

v_sql *v_sql_open(vctx *v)
{
	v_sql *q = NULL;

	if (due__sql_open(&q, v->url) < 0 && v->verbose)
		fprintf(stderr, "%s: %s\n", v->prog, due_error_last());
	return q;
}

int v_sql_exec(v_sql *s, const char *sql, int nparams, int64_t p1, int64_t p2,
	       const char *p3, int64_t *out, int cap)
{
	return due__sql_exec(s, sql, nparams, p1, p2, p3, out, cap);
}

void v_sql_close(v_sql *s) { due__sql_close(s); }
