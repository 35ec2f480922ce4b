/*
** admin.c - the backends' admin groups behind one set of calls
** (core/admin.h), for `due verify`, `due bench`, `due scratch` and the
** tests: none of them names a backend, each asks the table.
**
** A URL finds its backend by scheme (due__url_parse, as due_open does);
** a name finds it in the table (due__store_named).  Every call checks the
** backend first (due__store_check): a capability it claims has its
** methods.  What a backend lacks is said in its own words (its admin
** group's no_* texts) or, when it gave none, in general ones.
*/
#include <stdlib.h>
#include <string.h>

#include "core/admin.h"
#include "core/internal.h"
#include "store/store.h"

struct due_admin {
	const due_store_ops *ops;
	due_url url; /* the store's URL, split (has_url) */
	bool has_url;
	char *text; /* url.text's own copy */
};

struct due__server {
	const due_store_admin *adm;
	due_store_srv *s;
};

struct due__sql {
	const due_store_admin *adm;
	unsigned caps;
	due_store_sql *q;
};

const char *due__admin_backend(size_t i)
{
	const due_store_ops *ops = due__store_at(i);
	return ops ? ops->name : NULL;
}

const char *due__admin_test_env(const char *name)
{
	const due_store_ops *ops = due__store_named(name);
	return ops && ops->admin ? ops->admin->test_env : NULL;
}

void due__admin_process_own(void)
{
	const due_store_ops *ops;
	for (size_t i = 0; (ops = due__store_at(i)) != NULL; i++)
		if (ops->admin && ops->admin->process_own)
			ops->admin->process_own();
}

static int no_admin(const due_store_ops *ops)
{
	return due__error_set(DUE_EUNSUPPORTED,
			      "the %s store has no scratch stores (its "
			      "backend has no admin group)",
			      ops->name);
}

/* The backend behind ops, checked, into a new *out (url: may be NULL). */
static int admin_new(due_admin **out, const due_store_ops *ops, const char *url)
{
	due_admin *a;
	int rc;

	*out = NULL;
	if ((rc = due__store_check(ops)) < 0)
		return rc;
	if (!(ops->caps & DUE_STORE_CAP_ADMIN))
		return no_admin(ops);
	if (!(a = calloc(1, sizeof(*a))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	a->ops = ops;
	if (url) {
		const due_store_ops *found;
		void *cfg = NULL;
		if (!(a->text = due__strdup_n(url, strlen(url)))) {
			free(a);
			return due__error_set(DUE_ENOMEM, "out of memory");
		}
		if ((rc = due__url_parse(&a->url, &found, a->text)) == 0) {
			a->has_url = true;
			/* the backend's own reading: a bad option fails here */
			rc = ops->parse_url(&cfg, &a->url);
			ops->free_cfg(cfg);
		}
		if (rc < 0) {
			due__admin_free(a);
			return rc;
		}
	}
	*out = a;
	return 0;
}

int due__admin_open(due_admin **out, const char *url)
{
	due_url u;
	const due_store_ops *ops;
	int rc;

	*out = NULL;
	if ((rc = due__url_parse(&u, &ops, url)) < 0)
		return rc;
	due__url_release(&u);
	return admin_new(out, ops, url);
}

int due__admin_open_backend(due_admin **out, const char *name)
{
	const due_store_ops *ops = due__store_named(name);

	*out = NULL;
	if (!ops)
		return due__error_set(
		    DUE_EINVAL, "no store backend '%s' in this build", name);
	return admin_new(out, ops, NULL);
}

void due__admin_free(due_admin *a)
{
	if (!a)
		return;
	if (a->has_url)
		due__url_release(&a->url);
	free(a->text);
	free(a);
}

const char *due__admin_name(const due_admin *a) { return a->ops->name; }

static const due_url *url_of(const due_admin *a)
{
	return a->has_url ? &a->url : NULL;
}

/*
** The first need of `need` the store lacks, in the order that says most
** (row locks and stalls are about a SQL session: a store without one is
** told by what the case wanted of it), and the reason.
*/
const char *due__admin_lacks(const due_admin *a, unsigned need)
{
	static const struct {
		unsigned need, cap;
		const char *general;
	} order[] = {
	    {DUE_NEED_ROW_LOCKS, DUE_STORE_CAP_ROW_LOCKS,
	     "no_row_locks (this store's raw SQL session locks no rows)"},
	    {DUE_NEED_STALL, DUE_STORE_CAP_STALL,
	     "cannot_stall_one_call (no session of this store can hold "
	     "what another's write waits on)"},
	    {DUE_NEED_SQL, DUE_STORE_CAP_SQL,
	     "no_raw_sql_session (this build's raw SQL does not speak this "
	     "store)"},
	    {DUE_NEED_PLAN, DUE_STORE_CAP_PLAN,
	     "no_query_plan_check (this store's backend reads no query "
	     "plan)"},
	};
	const due_store_admin *adm = a->ops->admin;

	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		const char *own;
		if (!(need & order[i].need) || (a->ops->caps & order[i].cap))
			continue;
		own = order[i].cap == DUE_STORE_CAP_ROW_LOCKS
			  ? adm->no_row_locks
		      : order[i].cap == DUE_STORE_CAP_STALL ? adm->no_stall
		      : order[i].cap == DUE_STORE_CAP_SQL   ? adm->no_sql
							    : adm->no_plan;
		return own ? own : order[i].general;
	}
	return NULL;
}

unsigned due__admin_counter_kinds(const due_admin *a)
{
	return a->ops->admin->counters;
}

bool due__admin_can_untune(const due_admin *a)
{
	return a->ops->admin->untune != NULL;
}

int due__scratch_root(const due_admin *a, char *out, size_t n)
{
	return a->ops->admin->scratch_root(url_of(a), out, n);
}

/*
** name checked (DUE_EINVAL naming the rule), its physical name in phys;
** a store on a server (one with a test_env) needs its URL, which an
** admin opened by backend name lacks.
*/
static int scratch_name(const due_admin *a, const char *name, char *phys,
			size_t n)
{
	if (!url_of(a) && a->ops->admin->test_env)
		return due__error_set(DUE_EINVAL,
				      "a %s scratch store needs a server URL "
				      "(--db)",
				      a->ops->name);
	if (!due__scratch_name_ok(name))
		return due__error_set(DUE_EINVAL,
				      "scratch store name '%s': 1 to %d "
				      "lowercase letters, digits or _",
				      name, DUE_SCRATCH_NAME_MAX);
	due__scratch_physical(name, phys, n);
	return 0;
}

void due__scratch_store_name(const char *name, char *out, size_t n)
{
	due__scratch_physical(name, out, n);
}

int due__scratch_make(const due_admin *a, const char *name, const char *dir,
		      char *url, size_t n)
{
	char phys[80];
	int rc = scratch_name(a, name, phys, sizeof(phys));

	return rc < 0
		   ? rc
		   : a->ops->admin->scratch_make(url_of(a), phys, dir, url, n);
}

int due__scratch_drop(const due_admin *a, const char *name, const char *dir)
{
	char phys[80];
	int rc = scratch_name(a, name, phys, sizeof(phys));

	return rc < 0 ? rc : a->ops->admin->scratch_drop(url_of(a), phys, dir);
}

int due__scratch_untune(const char *url)
{
	due_admin *a = NULL;
	int rc = due__admin_open(&a, url);

	if (rc == 0 && !a->ops->admin->untune)
		rc = due__error_set(DUE_EUNSUPPORTED,
				    "the %s store has no storage settings of "
				    "due's to take back",
				    a->ops->name);
	else if (rc == 0)
		rc = a->ops->admin->untune(&a->url);
	due__admin_free(a);
	return rc;
}

int due__server_open(due__server **out, const due_admin *a)
{
	due__server *s = calloc(1, sizeof(*s));
	int rc;

	*out = NULL;
	if (!s)
		return due__error_set(DUE_ENOMEM, "out of memory");
	s->adm = a->ops->admin;
	if ((rc = s->adm->server_open(&s->s, url_of(a))) < 0) {
		s->adm->server_close(s->s);
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

int due__server_read(due__server *s, due_counters *out)
{
	out->n = 0;
	return s->adm->server_read(s->s, out);
}

void due__server_close(due__server *s)
{
	if (!s)
		return;
	s->adm->server_close(s->s);
	free(s);
}

void due__counters_clear(due_counters *c)
{
	free(c->c);
	memset(c, 0, sizeof(*c));
}

int due__sql_open(due__sql **out, const char *url)
{
	due_admin *a = NULL;
	due__sql *q = NULL;
	int rc;

	*out = NULL;
	if ((rc = due__admin_open(&a, url)) < 0)
		return rc;
	if (!(a->ops->caps & DUE_STORE_CAP_SQL))
		rc = due__error_set(DUE_EUNSUPPORTED,
				    "the %s store has no raw SQL session",
				    a->ops->name);
	else if (!(q = calloc(1, sizeof(*q))))
		rc = due__error_set(DUE_ENOMEM, "out of memory");
	else {
		q->adm = a->ops->admin;
		q->caps = a->ops->caps;
		if ((rc = q->adm->sql_open(&q->q, &a->url)) < 0) {
			q->adm->sql_close(q->q);
			free(q);
			q = NULL;
		}
	}
	due__admin_free(a);
	*out = q;
	return rc;
}

int due__sql_exec(due__sql *q, const char *sql, int nparams, int64_t p1,
		  int64_t p2, const char *p3, int64_t *out, int cap)
{
	return q->adm->sql_exec(q->q, sql, nparams, p1, p2, p3, out, cap);
}

int due__sql_hold(due__sql *q, due_id id, const char **lock)
{
	*lock = "none";
	if (!(q->caps & DUE_STORE_CAP_STALL))
		return -1;
	return q->adm->sql_hold(q->q, id, lock);
}

int due__sql_plan_check(due__sql *q, due_time now, bool *pass, char *detail,
			size_t dn, char *plans, size_t pn)
{
	*pass = false;
	if (dn)
		detail[0] = '\0';
	if (plans && pn)
		plans[0] = '\0';
	if (!(q->caps & DUE_STORE_CAP_PLAN))
		return -1;
	return q->adm->plan_check(q->q, now, pass, detail, dn, plans, pn);
}

void due__sql_close(due__sql *q)
{
	if (!q)
		return;
	q->adm->sql_close(q->q);
	free(q);
}
