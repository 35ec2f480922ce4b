/*
** pg_admin.c - the admin group of the PostgreSQL store (store.h,
** due_store_admin): what `due verify`, `due bench` and the tests need of
** it besides the store.
**
** Scratch stores.  A scratch store is a schema of its own in the URL's
** database (CREATE SCHEMA "due_scratch_NAME", which refuses one that
** exists; the URL gets -csearch_path=due_scratch_NAME added to its own
** options=), dropped with DROP SCHEMA ... CASCADE, and only when it is
** empty or holds due's tables.  The URL's user needs CREATE on the
** database.
**
** Counters.  The server's WAL insert position (wal_bytes: its move over
** a phase is the WAL every session wrote, as bench/floor reads it) and,
** when the server preloads pg_stat_statements and the database has the
** extension (scripts/pg-test-cluster does both), the execution time of
** this database's statements (server_us; a COMMIT's includes its WAL
** flush).  The reading's own statements are left out of the second.
**
** Every connection here is the store's own (pg_wire.c: due__pg_connect,
** on the URI the store's parser gives), so every wait of it, connecting
** and each statement, keeps to the URL's timeout= (10 s by default) as
** the store's do.  The server counters and the raw SQL session take the
** store's session settings back (RESET ALL): the plan check must see the
** planner as a user's session does, and the raw SQL session of `due
** verify`'s controls is any client's.  Notices are dropped.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "base/base.h"
#include "store/pg_wire.h"
#include "store/store.h"

struct due_store_sql {
	due_store *s;
};

struct due_store_srv {
	due_store *s;
};

/*
** A session on the store at url, by the store's parser and the store's
** own bounded connection (pg_wire.c: due__pg_connect), every wait within
** the URL's timeout= (default 10 s); the store's session settings taken
** back (RESET ALL: the settings the URL's options give stay) unless
** store_settings.  *out set even on failure (due__pg_disconnect it).
*/
static int session(due_store **out, const due_url *url, bool store_settings)
{
	due_pg_cfg *cfg = NULL;
	int rc;

	*out = NULL;
	if ((rc = due__pg_parse_store_url(&cfg, url)) == 0)
		rc = due__pg_connect(out, cfg, due__admin_bound_us(url));
	due__pg_cfg_free(cfg);
	if (rc == 0 && !store_settings)
		rc = due__pg_command(*out, "RESET ALL", "reset the session");
	return rc;
}

/*
** One command (no rows) on a new session to url; a failure is said as
** "cannot DOING: why" (DUE_ESTORE unless no memory).
*/
static int command(const due_url *url, const char *sql, const char *doing)
{
	due_store *s;
	char why[768];
	int rc = session(&s, url, true), connected = rc == 0;

	if (rc == 0)
		rc = due__pg_command(s, sql, doing);
	due__pg_disconnect(s);
	snprintf(why, sizeof(why), "%s", due_error_last());
	if (rc < 0 && rc != DUE_ENOMEM && !connected)
		rc = due__error_set(DUE_ESTORE, "cannot %s: %s", doing, why);
	else if (rc < 0 && rc != DUE_ENOMEM) /* it names doing */
		rc = due__error_set(DUE_ESTORE, "%s", why);
	return rc;
}

/*
** The scratch URL: url's text with the schema in search_path, merged into
** the user's own options= (libpq keeps only the last options= of a URI).
*/
static int scratch_url(char *out, size_t n, const char *text,
		       const char *schema)
{
	const char *q = strchr(text, '?'), *p;
	char opt[1024];
	size_t k;

	opt[0] = '\0';
	for (p = q ? q + 1 : NULL; p && *p; p += k + (p[k] == '&')) {
		k = strcspn(p, "&");
		if (k > 8 && strncmp(p, "options=", 8) == 0 && k - 8 < 900)
			snprintf(opt, sizeof(opt), "%.*s%%20", (int)(k - 8),
				 p + 8);
	}
	snprintf(opt + strlen(opt), sizeof(opt) - strlen(opt),
		 "-csearch_path%%3D%s", schema);
	return due__url_set_option(out, n, text, "options", opt);
}

static int pg_scratch_make(const due_url *url, const char *name,
			   const char *dir, char *out, size_t n)
{
	char sql[160], doing[160];
	int rc;

	(void)dir;
	snprintf(sql, sizeof(sql), "CREATE SCHEMA \"%s\"", name);
	snprintf(doing, sizeof(doing), "make scratch schema %s", name);
	if ((rc = command(url, sql, doing)) < 0)
		return rc;
	if ((rc = scratch_url(out, n, url->text, name)) < 0) {
		snprintf(sql, sizeof(sql), "DROP SCHEMA \"%s\" CASCADE", name);
		(void)command(url, sql, doing);
	}
	return rc;
}

/*
** Drop schema name: none is no error; one holding relations but no
** due_task is no scratch store of due's, and is left.  The check and the
** drop are one statement (a DO block), so nothing comes between them.
*/
static int pg_scratch_drop(const due_url *url, const char *name,
			   const char *dir)
{
	char sql[1024], doing[160];

	(void)dir;
	snprintf(sql, sizeof(sql),
		 "DO $$ DECLARE n oid; BEGIN"
		 " SELECT oid INTO n FROM pg_namespace WHERE nspname = '%s';"
		 " IF n IS NULL THEN RETURN; END IF;"
		 " IF EXISTS (SELECT 1 FROM pg_class WHERE relnamespace = n)"
		 "  AND NOT EXISTS (SELECT 1 FROM pg_class WHERE relnamespace"
		 "  = n AND relname = 'due_task' AND relkind = 'r') THEN"
		 "  RAISE EXCEPTION 'it holds tables but no due store'; END IF;"
		 " DROP SCHEMA \"%s\" CASCADE; END $$",
		 name, name);
	snprintf(doing, sizeof(doing), "drop scratch schema %s", name);
	return command(url, sql, doing);
}

/* Every table of the schema in the search path, reset to the defaults. */
static int pg_untune(const due_url *url)
{
	static const char sql[] =
	    "DO $$ DECLARE t text; BEGIN"
	    " FOR t IN SELECT c.relname FROM pg_class c"
	    "  WHERE c.relnamespace = current_schema()::text::regnamespace"
	    "  AND c.relkind = 'r' AND c.reloptions IS NOT NULL LOOP"
	    "  EXECUTE format('ALTER TABLE %I RESET (fillfactor,"
	    "   autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,"
	    "   autovacuum_vacuum_insert_scale_factor,"
	    "   autovacuum_vacuum_insert_threshold,"
	    "   autovacuum_analyze_scale_factor, autovacuum_analyze_threshold,"
	    "   autovacuum_vacuum_cost_delay, autovacuum_vacuum_cost_limit)',"
	    "   t);"
	    " END LOOP; END $$";
	return command(url, sql, "reset the storage settings");
}

static int pg_server_open(due_store_srv **out, const due_url *url)
{
	if (!(*out = calloc(1, sizeof(**out))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	return session(&(*out)->s, url, false);
}

/* The one value of a one-row query, or false. */
static bool one_value(due_store *s, const char *sql, char *buf, size_t n)
{
	PGresult *r = NULL;
	bool ok = due__pg_query(s, sql, "read a counter", &r) == 0 &&
		  PQntuples(r) == 1;

	if (ok)
		snprintf(buf, n, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	return ok;
}

static int pg_server_read(due_store_srv *srv, due_counters *out)
{
	due_store *s = srv->s;
	char v[64];
	int rc = 0;

	if (one_value(s,
		      "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(),"
		      " '0/0')::bigint",
		      v, sizeof(v)))
		rc = due__counter_work(out, "wal_bytes",
				       (double)strtoll(v, NULL, 10), "wal", "B",
				       0);
	else if (PQstatus(s->conn) != CONNECTION_OK)
		return DUE_ESTORE; /* no answer in time: said */
	/* absent without pg_stat_statements: then no such counter */
	if (rc == 0 &&
	    one_value(s,
		      "SELECT coalesce(sum(total_exec_time), 0) * 1000"
		      " FROM pg_stat_statements WHERE dbid = (SELECT oid"
		      " FROM pg_database WHERE datname ="
		      " current_database()) AND query NOT LIKE"
		      " '%pg_stat_statements%' AND query NOT LIKE"
		      " '%pg_current_wal_insert_lsn%'",
		      v, sizeof(v)))
		rc = due__counter_work(out, "server_us", strtod(v, NULL),
				       "server", "us", 1);
	return rc;
}

static void pg_server_close(due_store_srv *s)
{
	if (s)
		due__pg_disconnect(s->s);
	free(s);
}

static int pg_sql_open(due_store_sql **out, const due_url *url)
{
	if (!(*out = calloc(1, sizeof(**out))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	return session(&(*out)->s, url, false);
}

static void pg_sql_close(due_store_sql *q)
{
	if (q)
		due__pg_disconnect(q->s);
	free(q);
}

static int pg_sql_exec(due_store_sql *q, const char *sql, int nparams,
		       int64_t p1, int64_t p2, const char *p3, int64_t *out,
		       int cap)
{
	due_pg_params p = {0};
	PGresult *res = NULL;
	int n = 0;

	if (nparams > 0)
		due__pg_int(&p, p1);
	if (nparams > 1)
		due__pg_int(&p, p2);
	if (nparams > 2)
		due__pg_text(&p, p3);
	if (due__pg_query_text(q->s, sql, &p, "raw SQL", &res) < 0)
		return -1;
	for (int i = 0; out && i < PQntuples(res) && n < cap; i++)
		out[n++] = strtoll(PQgetvalue(res, i, 0), NULL, 10);
	PQclear(res);
	return n;
}

static int pg_sql_hold(due_store_sql *q, due_id id, const char **lock)
{
	return due__sql_hold_row(q, id, lock, pg_sql_exec);
}

/* All rows of a query's first column, joined with newlines, into buf. */
static int plan_text(due_store *s, const char *sql, char *buf, size_t n)
{
	PGresult *res = NULL;
	size_t off = 0;

	buf[0] = '\0';
	if (due__pg_query(s, sql, "read a plan", &res) < 0)
		return -1;
	for (int i = 0; i < PQntuples(res) && off < n; i++)
		off += (size_t)snprintf(buf + off, n - off, "%s\n",
					PQgetvalue(res, i, 0));
	PQclear(res);
	return 0;
}

/* "Buffers: shared hit=N read=M" of the plan's first node: N + M. */
static long plan_buffers(const char *plan)
{
	const char *b = strstr(plan, "Buffers: shared");
	long total = 0;
	if (!b)
		return 0;
	const char *eol = strchr(b, '\n');
	for (const char *k = b; k && (!eol || k < eol); k++) {
		if (strncmp(k, "hit=", 4) == 0 || strncmp(k, "read=", 5) == 0)
			total += strtol(strchr(k, '=') + 1, NULL, 10);
	}
	return total;
}

static long rows_removed(const char *plan)
{
	const char *b = strstr(plan, "Rows Removed by Filter: ");
	return b ? strtol(b + 24, NULL, 10) : 0;
}

/*
** The due index is partial (WHERE state = 'SCHEDULED') and the claim
** compares due_at with a STABLE now(): an empty claim over 20,000 future
** tasks and 20,000 finished ones reads a handful of buffers.  The
** clock_timestamp() form cannot use the bound and filters every row.
*/
static int pg_plan_check(due_store_sql *q, due_time now, bool *pass,
			 char *detail, size_t dn, char *plans, size_t pn)
{
	static const char fill[] =
	    "INSERT INTO due_task (kind, payload, state, due_at, max_attempts,"
	    " backoff_us, backoff_cap_us, created_at, updated_at)"
	    " SELECT 'idx', ''::bytea, CASE WHEN g % 2 = 0 THEN 'DONE' ELSE"
	    " 'SCHEDULED' END, now() + interval '1 hour', 5, 1000000, "
	    "3600000000,"
	    " now(), now() FROM generate_series(1, 40000) g";
	static const char q_now[] =
	    "EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM due_task WHERE state ="
	    " 'SCHEDULED' AND due_at <= now() ORDER BY due_at LIMIT 10 FOR "
	    "UPDATE"
	    " SKIP LOCKED";
	static const char q_clock[] =
	    "EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM due_task WHERE state ="
	    " 'SCHEDULED' AND due_at <= clock_timestamp() ORDER BY due_at "
	    "LIMIT 10"
	    " FOR UPDATE SKIP LOCKED";
	char *p1 = malloc(16384), *p2 = malloc(16384);
	bool ok;

	(void)now; /* the server's now() */
	if (!p1 || !p2) {
		free(p1);
		free(p2);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	p1[0] = p2[0] = '\0';
	ok = pg_sql_exec(q, fill, 0, 0, 0, NULL, NULL, 0) >= 0 &&
	     pg_sql_exec(q, "ANALYZE due_task", 0, 0, 0, NULL, NULL, 0) >= 0 &&
	     plan_text(q->s, q_now, p1, 16384) == 0 &&
	     plan_text(q->s, q_clock, p2, 16384) == 0;
	bool idx = ok && strstr(p1, "Index Cond: (due_at <= now())") &&
		   strstr(p1, "due_task_due");
	long b_now = plan_buffers(p1), b_clock = plan_buffers(p2);
	long removed = rows_removed(p2);
	*pass = idx && b_now < 20 && removed == 20000 && b_clock > b_now;
	snprintf(detail, dn,
		 "tasks=40000 future=20000 finished=20000 now_index_cond=%s "
		 "now_buffers=%ld clock_timestamp_buffers=%ld "
		 "clock_timestamp_rows_removed_by_filter=%ld",
		 idx ? "yes" : "no", b_now, b_clock, removed);
	if (plans)
		snprintf(plans, pn,
			 "--- now() plan:\n%s--- clock_timestamp() plan:\n%s",
			 ok ? p1 : "", ok ? p2 : "");
	free(p1);
	free(p2);
	return 0;
}

/* Every method is pg_<method> (store.h lists them). */
#define OP(m) .m = pg_##m,
const due_store_admin due__store_pg_admin = {
    .test_env = "DUE_TEST_PG_URL",
    .counters = DUE_COUNTER_WORK,
    .scratch_root = due__scratch_root_tmp,
    .scratch_make = pg_scratch_make,
    .scratch_drop = pg_scratch_drop,
    .untune = pg_untune,
    DUE_STORE_SQL_METHODS(OP) DUE_STORE_STALL_METHODS(OP)
	DUE_STORE_PLAN_METHODS(OP) OP(server_open) OP(server_read)
	    OP(server_close)};
#undef OP
