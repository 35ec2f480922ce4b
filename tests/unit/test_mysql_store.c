/*
** test_mysql_store.c - what only the MySQL/MariaDB store has, on a real
** server: due_schedule_mysql_tx inside the caller's own transaction
** (rolled back and committed with the caller's row), the completion hook
** on the store's own MYSQL*, the claim's and the reclaim's picks reading
** an index (EXPLAIN), the live-only unique key (a finished task's key is
** free again), wake-ups without LISTEN, a connection killed under a
** handle, a deadlock the store loses and retries, the refusal of
** servers without SKIP LOCKED, and the bound of every wait (issue 35): a
** row lock and LOCK TABLES of another session, a path frozen under an
** open handle (a proxy thread of the test's own), a server that never
** greets, and a host list whose first host is silent.  Every
** transition, refusal, schedule and metric that the stores share is in
** the conformance suite (test_store.c), which runs here too.
**
** It runs when DUE_TEST_MYSQL_URL names a database
** (scripts/mariadb-test-server start DIR prints one); each test works in
** a database of its own (tu_mysql.h).  Unset, it prints a note and passes,
** except under CI=true, where it fails.  No timing assumptions, except
** that a call bounded by N seconds returns within N + SLACK_MS.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "due.h"
#define TU_FIXTURE /* setup, teardown, open_db, url, dir */
#define TU_TASKS   /* add, claim_one, get, state_of */
#include "test_util.h"

#ifdef DUE_WITH_MYSQL
#include "core/internal.h"    /* due__lock_take */
#include "store/mysql_conn.h" /* due__my_version_check */

#define LONG_LEASE 60000000LL
#define HANG_MS                                                                \
	60000 /* a deadline guards against a hang, it claims nothing           \
	       */
/* What a bounded call may take past its bound on a loaded machine. */
#define SLACK_MS 3000

static int64_t mono_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A connection of the test's own to its database. */
static MYSQL *own_conn(void)
{
	char err[512];
	MYSQL *m = tu_mysql_connect(url, true, err, sizeof(err));
	if (!m)
		fail_msg("connect %s: %s", url, err);
	return m;
}

/* Run sql; a result set it returns is dropped. */
static void q(MYSQL *m, const char *sql)
{
	if (mysql_query(m, sql) != 0)
		fail_msg("%s: %s", sql, mysql_error(m));
}

static void q_drop(MYSQL *m, const char *sql)
{
	q(m, sql);
	mysql_free_result(mysql_store_result(m));
}

/* The first column of the first row of sql as an integer (-1: none). */
static int64_t q_int(MYSQL *m, const char *sql)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	int64_t v = -1;

	q(m, sql);
	if ((r = mysql_store_result(m))) {
		if ((row = mysql_fetch_row(r)) && row[0])
			v = strtoll(row[0], NULL, 10);
		mysql_free_result(r);
	}
	return v;
}

/*
** due_schedule_mysql_tx: the task is the caller's, in the caller's
** transaction: rolled back with their order row, committed with it; and
** refused on a connection without an open transaction.
*/
static void test_tx_submit(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_submitted s;
	due_task *t = NULL;

	q(m, "CREATE TABLE orders (id INT PRIMARY KEY) ENGINE=InnoDB");

	/* no transaction open: refused, nothing written */
	assert_int_equal(due_schedule_mysql_tx(m, &s, "ship", "o1", 2, NULL),
			 DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "BEGIN"));

	q(m, "START TRANSACTION");
	q(m, "INSERT INTO orders VALUES (1)");
	assert_int_equal(due_schedule_mysql_tx(m, &s, "ship", "o1", 2, NULL),
			 0);
	assert_true(s.id > 0);
	q(m, "ROLLBACK");
	assert_int_equal(due_get(db, &t, s.id), DUE_ENOTFOUND);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM orders"), 0);

	q(m, "START TRANSACTION");
	q(m, "INSERT INTO orders VALUES (2)");
	assert_int_equal(due_schedule_mysql_tx(m, &s, "ship", "o2", 2, NULL),
			 0);
	/* not visible to the store before the caller commits */
	assert_int_equal(due_get(db, &t, s.id), DUE_ENOTFOUND);
	q(m, "COMMIT");
	t = get(db, s.id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_memory_equal(t->payload, "o2", 2);
	due_task_free(t);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM orders"), 1);

	/* a keyed submit in the caller's transaction finds the live task */
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s1, s2;
	o.key = "order-3";
	q(m, "START TRANSACTION");
	assert_int_equal(due_schedule_mysql_tx(m, &s1, "ship", "o3", 2, &o), 0);
	assert_int_equal(due_schedule_mysql_tx(m, &s2, "ship", "o3", 2, &o), 0);
	q(m, "COMMIT");
	assert_false(s1.existed);
	assert_true(s2.existed);
	assert_int_equal(s2.id, s1.id);

	/* the caller's connection keeps its own waits and session */
	int (*io_wait)(my_socket, my_bool, int) = NULL;
	unsigned rt = 1;
	assert_int_equal(mysql_get_optionv(m, MARIADB_OPT_IO_WAIT, &io_wait),
			 0);
	assert_null(io_wait);
	assert_int_equal(mysql_get_optionv(m, MYSQL_OPT_READ_TIMEOUT, &rt), 0);
	assert_int_equal(rt, 0);
	assert_int_equal(q_int(m, "SELECT @@SESSION.innodb_lock_wait_timeout"
				  " = @@GLOBAL.innodb_lock_wait_timeout AND"
				  " @@SESSION.lock_wait_timeout ="
				  " @@GLOBAL.lock_wait_timeout"),
			 1);

	mysql_close(m);
	due_close(db);
}

/* A completion hook writes on the store's MYSQL*, in the same transaction. */
static int hook_insert(void *conn, const due_task *t, void *payload)
{
	char sql[128];
	snprintf(sql, sizeof(sql), "INSERT INTO results VALUES (%lld)",
		 (long long)t->id);
	(void)payload;
	return mysql_query(conn, sql) == 0 && !*(int *)payload ? 0 : -1;
}

static void test_completion_hook(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_complete_outcome co;
	int refuse = 1;

	q(m, "CREATE TABLE results (id BIGINT PRIMARY KEY) ENGINE=InnoDB");
	due_id id = add(db, "k", 0, 5);
	int32_t a = claim_one(db, id, LONG_LEASE);
	/* a hook that fails rolls back its row and the completion */
	assert_int_equal(
	    due_complete_tx(db, &co, id, a, "r", 1, hook_insert, &refuse),
	    DUE_ERROR);
	assert_int_equal(state_of(db, id), DUE_CLAIMED);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM results"), 0);
	refuse = 0;
	assert_int_equal(
	    due_complete_tx(db, &co, id, a, "r", 1, hook_insert, &refuse), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_int_equal(state_of(db, id), DUE_DONE);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM results"), 1);
	mysql_close(m);
	due_close(db);
}

/* A hook that takes longer than the store's bound before its statement. */
static int hook_slow_insert(void *conn, const due_task *t, void *payload)
{
	struct timespec ts = {1, 300000000};

	(void)payload;
	nanosleep(&ts, NULL);
	return hook_insert(conn, t, &(int){0});
}

/*
** The hook's statements are its own: a hook that works longer than the
** store's bound (1 s) before its INSERT is not cut short by the deadline
** of the store's last statement.
*/
static void test_completion_hook_slow(void **state)
{
	(void)state;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;
	MYSQL *m = own_conn();
	due_complete_outcome co;

	oo.timeout_us = 1000000;
	assert_int_equal(due_open(&db, url, &oo), 0);
	q(m, "CREATE TABLE results (id BIGINT PRIMARY KEY) ENGINE=InnoDB");
	due_id id = add(db, "k", 0, 5);
	int32_t a = claim_one(db, id, LONG_LEASE);
	assert_int_equal(
	    due_complete_tx(db, &co, id, a, "r", 1, hook_slow_insert, NULL), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_int_equal(state_of(db, id), DUE_DONE);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM results"), 1);
	mysql_close(m);
	due_close(db);
}

/*
** EXPLAIN row of sql: *type (access type) and *key (the index chosen,
** "" for none) into buffers.
*/
static void explain(MYSQL *m, const char *sql, char *type, char *key)
{
	char e[1024];
	MYSQL_RES *r;
	MYSQL_ROW row;
	MYSQL_FIELD *f;
	unsigned n;

	snprintf(e, sizeof(e), "EXPLAIN %s", sql);
	q(m, e);
	assert_non_null(r = mysql_store_result(m));
	assert_non_null(row = mysql_fetch_row(r));
	f = mysql_fetch_fields(r);
	n = mysql_num_fields(r);
	type[0] = key[0] = '\0';
	for (unsigned i = 0; i < n; i++) {
		if (strcmp(f[i].name, "type") == 0 && row[i])
			snprintf(type, 32, "%s", row[i]);
		if (strcmp(f[i].name, "key") == 0 && row[i])
			snprintf(key, 64, "%s", row[i]);
	}
	mysql_free_result(r);
}

/*
** The claim's, the reclaim's and prune's picks and upcoming (their text
** as mysql.c sends it) read an index range, not the table, on a table of
** mostly finished and future tasks.
*/
static void test_explain_picks(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	char type[32], key[64], sql[512];
	due_time now;

	due_close(db);
	q(m, "SET max_recursive_iterations = 100000");
	q(m, "INSERT INTO due_task (kind, payload, state, due_at,"
	     " max_attempts, backoff_us, backoff_cap_us, created_at,"
	     " updated_at) WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL"
	     " SELECT x + 1 FROM g WHERE x < 20000) SELECT 'k', '',"
	     " IF(x % 10 = 0, 'SCHEDULED', 'DONE'), x, 1, 0, 0, 0, 0 FROM g");
	q_drop(m, "ANALYZE TABLE due_task");
	now = q_int(m, "SELECT " DUE_MY_NOW);

	snprintf(sql, sizeof(sql),
		 "SELECT id FROM due_task WHERE state = 'SCHEDULED'"
		 " AND priority = 0 AND due_at <= %lld ORDER BY due_at, id"
		 " LIMIT 10 FOR UPDATE SKIP LOCKED",
		 (long long)now);
	explain(m, sql, type, key);
	assert_string_not_equal(type, "ALL");
	assert_string_equal(key, "due_task_claim");

	snprintf(sql, sizeof(sql),
		 "SELECT id FROM due_task WHERE state = 'CLAIMED'"
		 " AND at_us < " DUE_MY_NOW " AND lease_until < " DUE_MY_NOW
		 " ORDER BY at_us, id LIMIT 1000 FOR UPDATE SKIP LOCKED");
	explain(m, sql, type, key);
	assert_string_not_equal(type, "ALL");
	assert_string_equal(key, "due_task_at");

	/* upcoming (the wheel's refill) and prune: the same index */
	snprintf(sql, sizeof(sql),
		 "SELECT id, due_at FROM due_task WHERE state = 'SCHEDULED'"
		 " AND at_us < %lld AND due_at < %lld ORDER BY at_us, id"
		 " LIMIT 100",
		 (long long)now, (long long)now);
	explain(m, sql, type, key);
	assert_string_not_equal(type, "ALL");
	assert_string_equal(key, "due_task_at");
	snprintf(sql, sizeof(sql),
		 "SELECT id, at_us FROM due_task FORCE INDEX (due_task_at)"
		 " WHERE state = 'DONE' AND at_us < 5000 ORDER BY at_us, id"
		 " LIMIT 1000 FOR UPDATE SKIP LOCKED");
	explain(m, sql, type, key);
	assert_string_not_equal(type, "ALL");
	assert_string_equal(key, "due_task_at");
	mysql_close(m);
}

/*
** Schema 4 -> 5: a database as version 4 left it (no due_lock, no
** due_worker.pruned, no due_task_state) is upgraded by `due init`, with
** its tasks, and the new pieces work: the lease and the pruned counter.
*/
static void test_upgrade_from_4(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_worker_stats w = {.pruned = 7};
	due_metrics *mt = NULL;
	bool held = false;
	due_id id = add(db, "k", 0, 5);

	due_close(db);
	q(m, "DROP TABLE due_lock");
	q(m, "ALTER TABLE due_worker DROP COLUMN pruned");
	q(m, "ALTER TABLE due_task DROP KEY due_task_state");
	/* nor what schema 11 added (run-after) */
	q(m, "DROP TABLE due_after");
	q(m, "ALTER TABLE due_task DROP COLUMN after_n, DROP COLUMN after_left,"
	     " DROP COLUMN after_any_end, DROP COLUMN after_at,"
	     " DROP COLUMN after_delay_us, DROP COLUMN after_children");
	q(m, "UPDATE due_meta SET value = '4' WHERE name = 'schema_version'");
	assert_int_equal(due_open(&db, url, &oo), DUE_ESCHEMA);
	due_close(db);	  /* a failed open may still hand out a handle */
	oo.create = true; /* what `due init` does */
	assert_int_equal(due_open(&db, url, &oo), 0);
	assert_int_equal(q_int(m, "SELECT value FROM due_meta"
				  " WHERE name = 'schema_version'"),
			 DUE_SCHEMA_VERSION);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM information_schema"
				  ".statistics WHERE table_schema = DATABASE()"
				  " AND index_name = 'due_task_state'"),
			 2);
	assert_int_equal(state_of(db, id), DUE_SCHEDULED);
	assert_int_equal(due__lock_take(db, &held, "prune", "a", 60000000), 0);
	assert_true(held);
	assert_int_equal(due__lock_take(db, &held, "prune", "b", 60000000), 0);
	assert_false(held);
	assert_int_equal(due_worker_report(db, "w1", &w), 0);
	assert_int_equal(due_metrics_get(db, &mt), 0);
	assert_int_equal(mt->pruned, 7);
	due_metrics_free(mt);
	mysql_close(m);
	due_close(db);
}

/* `sql`'s EXPLAIN: due_task and due_attempt read by an index, never whole. */
static void assert_indexed(MYSQL *m, const char *sql)
{
	char *e = malloc(strlen(sql) + 16);
	MYSQL_RES *r;
	MYSQL_ROW row;
	MYSQL_FIELD *f;
	int type = -1, key = -1, table = -1;

	assert_non_null(e);
	sprintf(e, "EXPLAIN %s", sql);
	q(m, e);
	free(e);
	assert_non_null(r = mysql_store_result(m));
	f = mysql_fetch_fields(r);
	for (unsigned i = 0; i < mysql_num_fields(r); i++) {
		if (strcmp(f[i].name, "type") == 0)
			type = (int)i;
		if (strcmp(f[i].name, "key") == 0)
			key = (int)i;
		if (strcmp(f[i].name, "table") == 0)
			table = (int)i;
	}
	while ((row = mysql_fetch_row(r))) {
		/* the task and history tables (due_worker and due_schedule
		   hold a row per worker or schedule: read whole) */
		if (!row[table] || (strcmp(row[table], "due_task") != 0 &&
				    strcmp(row[table], "due_attempt") != 0))
			continue;
		if (!row[key] || strcmp(row[type], "ALL") == 0 ||
		    strcmp(row[type], "index") == 0)
			fail_msg("%s reads %s whole (type %s): %s", "statement",
				 row[table], row[type], sql);
	}
	mysql_free_result(r);
}

/*
** stats, metrics and ls --state read by index (issue 15): the store's own
** statements, caught by the server's general log while they run over
** 20,000 tasks and attempts, each EXPLAINed; and the counts: exact where
** they must be, estimates (with their bits) where the state is large.
*/
static void test_explain_reads(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_stats st;
	due_metrics *mt = NULL;
	due_task_list *l = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	MYSQL_RES *r;
	MYSQL_ROW row;
	int n = 0;

	q(m, "SET max_recursive_iterations = 100000");
	q(m, "INSERT INTO due_task (kind, payload, state, due_at,"
	     " max_attempts, backoff_us, backoff_cap_us, created_at,"
	     " updated_at) WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL"
	     " SELECT x + 1 FROM g WHERE x < 20000) SELECT 'k', '',"
	     " IF(x % 100 = 0, 'DEAD', 'DONE'), x, 1, 0, 0, 0, 0 FROM g");
	q(m, "INSERT INTO due_attempt (task_id, attempt, worker, claimed_at,"
	     " due_at, ended_at, outcome) SELECT id, 1, 'w', id, id, id + 1,"
	     " 'DONE' FROM due_task");
	q_drop(m, "ANALYZE TABLE due_task, due_attempt");
	q(m, "TRUNCATE mysql.general_log");
	q(m, "SET GLOBAL log_output = 'TABLE', general_log = 1");
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(due_metrics_get(db, &mt), 0);
	lo.state = DUE_DEAD;
	lo.limit = 100;
	assert_int_equal(due_list(db, &l, &lo), 0);
	q(m, "SET GLOBAL general_log = 0");
	assert_int_equal(l->count, 100);
	due_task_list_free(l);

	/* exact: DEAD (200), CLAIMED (0); DONE (19,800) an estimate */
	assert_int_equal(st.counts[DUE_DEAD], 200);
	assert_int_equal(st.dead, 200);
	assert_int_equal(st.counts[DUE_CLAIMED], 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], 0);
	/* DONE: exact, or the optimizer's estimate with its bit (which of
	   the two depends on the estimate EXPLAIN gives under load) */
	if (!(st.estimated & (1u << DUE_DONE)))
		assert_int_equal(st.counts[DUE_DONE], 19800);
	assert_false(st.estimated & (1u << DUE_DEAD));
	assert_false(st.estimated & (1u << DUE_CLAIMED));
	assert_true(st.counts[DUE_DONE] > 0);
	assert_int_equal(mt->n_kinds, 1);
	assert_int_equal(mt->kinds[0].counts[DUE_DEAD], 200);
	if (!(mt->kinds_estimated & (1u << DUE_DONE)))
		assert_int_equal(mt->kinds[0].counts[DUE_DONE], 19800);
	assert_int_equal(mt->lateness.count, 0); /* all claimed in 1970 */
	due_metrics_free(mt);

	q(m, "SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log"
	     " WHERE command_type = 'Query' AND argument LIKE '%due\\_%'");
	assert_non_null(r = mysql_store_result(m));
	while ((row = mysql_fetch_row(r))) {
		/* a statement text may hold several: each SELECT of them */
		char *text = strdup(row[0]), *save = NULL;
		assert_non_null(text);
		for (char *one = strtok_r(text, ";", &save); one;
		     one = strtok_r(NULL, ";", &save)) {
			while (*one == ' ')
				one++;
			if (strncmp(one, "SELECT", 6) != 0 ||
			    strstr(one, "information_schema"))
				continue;
			assert_indexed(m, one);
			n++;
		}
		free(text);
	}
	mysql_free_result(r);
	assert_true(n >= 8); /* stats, metrics and list were all seen */
	mysql_close(m);
	due_close(db);
}

/* The key is unique only while its task is live. */
static void test_key_reusable(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s1, s2, s3;
	due_complete_outcome co;

	o.key = "k1";
	assert_int_equal(due_schedule(db, &s1, "k", "a", 1, &o), 0);
	assert_int_equal(due_schedule(db, &s2, "k", "b", 1, &o), 0);
	assert_true(s2.existed);
	assert_int_equal(s2.id, s1.id);
	int32_t a = claim_one(db, s1.id, LONG_LEASE);
	assert_int_equal(due_complete(db, &co, s1.id, a, "", 0), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_int_equal(due_schedule(db, &s3, "k", "c", 1, &o), 0);
	assert_false(s3.existed);
	assert_true(s3.id != s1.id);
	assert_int_equal(state_of(db, s1.id), DUE_DONE);
	assert_int_equal(state_of(db, s3.id), DUE_SCHEDULED);
	due_close(db);
}

/*
** Keys and groups compare byte for byte, trailing spaces included (a PAD
** SPACE collation made 'order-1 ' collide with 'order-1': the submit found
** the other task and was silently dropped; groups 'g' and 'g ' shared one
** running count).
*/
static void test_key_group_no_pad(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	due_submitted s1, s2, s3;
	due_task_list *l = NULL;
	const char *kinds[] = {"grouped"};

	o.key = "order-1";
	assert_int_equal(due_schedule(db, &s1, "k", "a", 1, &o), 0);
	o.key = "order-1 ";
	assert_int_equal(due_schedule(db, &s2, "k", "b", 1, &o), 0);
	assert_false(s2.existed);
	assert_true(s2.id != s1.id);
	/* and each key still finds its own live task */
	assert_int_equal(due_schedule(db, &s3, "k", "c", 1, &o), 0);
	assert_true(s3.existed);
	assert_int_equal(s3.id, s2.id);

	ks.max_running_per_group = 1;
	assert_int_equal(due_kind_set(db, "grouped", &ks), 0);
	o = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	o.group = "g";
	assert_int_equal(due_schedule(db, &s1, "grouped", "a", 1, &o), 0);
	o.group = "g ";
	assert_int_equal(due_schedule(db, &s2, "grouped", "b", 1, &o), 0);
	/* one running in each group: by id (the group's count read by
	   name), then the claim of both (each group counted on its own) */
	due_task *t = NULL;
	assert_int_equal(due_claim_id(db, &t, s1.id, "w", LONG_LEASE), 0);
	due_task_free(t);
	assert_int_equal(due_claim_id(db, &t, s2.id, "w", LONG_LEASE), 0);
	due_task_free(t);
	o.group = "h";
	assert_int_equal(due_schedule(db, &s1, "grouped", "c", 1, &o), 0);
	o.group = "h ";
	assert_int_equal(due_schedule(db, &s2, "grouped", "d", 1, &o), 0);
	assert_int_equal(due_claim(db, &l, "w", kinds, 1, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 2);
	due_task_list_free(l);
	due_close(db);
}

/*
** A database made before keys and groups were byte-exact (VARCHAR, PAD
** SPACE) is converted by the next `due init`, live keys kept.
*/
static void test_init_converts_keys(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s1, s2;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	const char *types =
	    "SELECT GROUP_CONCAT(data_type ORDER BY column_name) FROM"
	    " information_schema.columns WHERE table_schema = DATABASE() AND"
	    " table_name = 'due_task' AND column_name IN ('key', 'grp',"
	    " 'live_key')";
	char v[128];

	o.key = "order-1";
	assert_int_equal(due_schedule(db, &s1, "k", "a", 1, &o), 0);
	due_close(db);
	q(m, "ALTER TABLE due_task MODIFY `key` VARCHAR(512) NULL,"
	     " MODIFY grp VARCHAR(255) NULL, MODIFY live_key VARCHAR(512) AS"
	     " (IF(state IN ('SCHEDULED', 'CLAIMED'), `key`, NULL)) STORED");
	assert_int_equal(tu_mysql_run(url, v, sizeof(v), types), 0);
	assert_string_equal(v, "varchar,varchar,varchar");
	oo.create = true; /* what `due init` does */
	assert_int_equal(due_open(&db, url, &oo), 0);
	assert_int_equal(tu_mysql_run(url, v, sizeof(v), types), 0);
	assert_string_equal(v, "varbinary,varbinary,varbinary");
	assert_int_equal(due_schedule(db, &s2, "k", "b", 1, &o), 0);
	assert_true(s2.existed);
	assert_int_equal(s2.id, s1.id);
	mysql_close(m);
	due_close(db);
}

/*
** Load the zone `name` into the server's time zone tables when they lack
** it (mariadb-install-db leaves them empty); false when it cannot be.
*/
static bool zone_loaded(MYSQL *m, const char *name)
{
	char check[256], sql[512], *text = NULL;
	size_t len = 0, cap = 0, got;
	FILE *f;

	snprintf(check, sizeof(check),
		 "SELECT CONVERT_TZ('2024-01-01', '+00:00', '%s') IS NOT NULL",
		 name);
	if (q_int(m, check) == 1)
		return true;
	snprintf(sql, sizeof(sql),
		 "(mariadb-tzinfo-to-sql /usr/share/zoneinfo/%s %s ||"
		 " mysql_tzinfo_to_sql /usr/share/zoneinfo/%s %s) 2>/dev/null",
		 name, name, name, name);
	if (!(f = popen(sql, "r")))
		return false;
	do {
		if (len + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 16384;
			assert_non_null(text = realloc(text, cap));
		}
		got = fread(text + len, 1, 4096, f);
		len += got;
	} while (got > 0);
	text[len] = '\0';
	if (pclose(f) == 0 && len > 0) {
		MYSQL *z = own_conn();
		mysql_set_server_option(z, MYSQL_OPTION_MULTI_STATEMENTS_ON);
		q(z, "USE mysql");
		if (mysql_real_query(z, text, len) == 0)
			do
				mysql_free_result(mysql_store_result(z));
			while (mysql_next_result(z) == 0);
		mysql_close(z);
	}
	free(text);
	return q_int(m, check) == 1;
}

/*
** due_schedule_mysql_tx reads the server's clock on the caller's session,
** whatever its time_zone: a fixed offset, and Europe/Berlin in the
** autumn's repeated hour (2024-10-27 01:30 UTC is 02:30 CET, an hour
** that also was 02:30 CEST), where UNIX_TIMESTAMP(NOW()) answered an hour
** early and a submit delayed 30 minutes was due at once.  SET timestamp
** fixes the session's clock, so the times are exact.
*/
static void test_tx_clock_zone(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	const int64_t at = 1729992600; /* 2024-10-27T01:30:00Z */
	const char *zones[] = {"'+05:00'", "'-03:30'", "'Europe/Berlin'",
			       "'SYSTEM'"};
	bool berlin = zone_loaded(m, "Europe/Berlin");
	char sql[128];

	if (!berlin) {
		if (getenv("CI") && strcmp(getenv("CI"), "true") == 0)
			fail_msg("CI=true but the zone Europe/Berlin cannot be "
				 "loaded (mariadb-tzinfo-to-sql, tzdata)");
		printf("NOTE: no zone tables: the DST case is not tested\n");
	}
	o.delay_us = 1800000000LL;
	for (size_t i = 0; i < sizeof(zones) / sizeof(zones[0]); i++) {
		due_submitted s;
		due_task *t;

		if (!berlin && strstr(zones[i], "Berlin"))
			continue;
		snprintf(sql, sizeof(sql), "SET time_zone = %s", zones[i]);
		q(m, sql);
		snprintf(sql, sizeof(sql), "SET timestamp = %lld",
			 (long long)at);
		q(m, sql);
		q(m, "START TRANSACTION");
		assert_int_equal(
		    due_schedule_mysql_tx(m, &s, "clock", "x", 1, &o), 0);
		q(m, "COMMIT");
		q(m, "SET timestamp = DEFAULT");
		t = get(db, s.id);
		if (t->created_at != at * 1000000 ||
		    t->due_at != (at + 1800) * 1000000)
			fail_msg("time_zone %s: created_at %lld due_at %lld, "
				 "want %lld and %lld",
				 zones[i], (long long)t->created_at,
				 (long long)t->due_at, (long long)at * 1000000,
				 (long long)(at + 1800) * 1000000);
		due_task_free(t);
	}
	mysql_close(m);
	due_close(db);
}

/*
** A keyed submit in the caller's REPEATABLE READ transaction, whose
** snapshot was taken before another connection committed the key: the
** insert meets the committed row (1062) and the look-up must read that
** row, not the snapshot (a plain SELECT missed it, 20 times, and the
** submit failed with DUE_EBUSY).
*/
static void test_tx_key_repeatable_read(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s1, s2;

	q(m, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
	q(m, "START TRANSACTION");
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task"), 0);
	o.key = "order-9";
	assert_int_equal(due_schedule(db, &s1, "ship", "a", 1, &o), 0);
	assert_int_equal(due_schedule_mysql_tx(m, &s2, "ship", "b", 1, &o), 0);
	assert_true(s2.existed);
	assert_int_equal(s2.id, s1.id);
	q(m, "COMMIT");
	mysql_close(m);
	due_close(db);
}

/*
** on_key in the caller's own transaction (due_schedule_mysql_tx), under
** REPEATABLE READ with a snapshot older than the holder: replace moves
** the committed holder (the lock reads the newest row, not the snapshot)
** and rolled back leaves it as it was; later moves only to a later time;
** a running holder gives up its key (NULL) and nothing else, and the new
** task holds it once the caller commits.
*/
static void test_tx_on_key(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s1, s2;
	due_complete_outcome co;
	due_time now;
	due_task *t;

	assert_int_equal(due_now(db, &now), 0);
	q(m, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
	q(m, "START TRANSACTION");
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task"), 0);
	o.key = "digest-1";
	o.at = now + 3600000000LL;
	assert_int_equal(due_schedule(db, &s1, "digest", "a", 1, &o), 0);
	o.at = now + 7200000000LL;
	o.on_key = DUE_ON_KEY_REPLACE;
	assert_int_equal(due_schedule_mysql_tx(m, &s2, "digest", "b", 1, &o),
			 0);
	assert_true(s2.existed && s2.moved && s2.id == s1.id);
	q(m, "ROLLBACK");
	t = get(db, s1.id);
	assert_int_equal(t->due_at, now + 3600000000LL);
	assert_memory_equal(t->payload, "a", 1);
	due_task_free(t);

	q(m, "START TRANSACTION");
	o.on_key = DUE_ON_KEY_LATER;
	o.at = now + 1800000000LL;
	assert_int_equal(due_schedule_mysql_tx(m, &s2, "digest", "c", 1, &o),
			 0);
	assert_true(s2.existed && !s2.moved && s2.id == s1.id);
	o.at = now + 10800000000LL;
	assert_int_equal(due_schedule_mysql_tx(m, &s2, "digest", "d", 1, &o),
			 0);
	assert_true(s2.existed && s2.moved && s2.id == s1.id);
	q(m, "COMMIT");
	t = get(db, s1.id);
	assert_int_equal(t->due_at, now + 10800000000LL);
	assert_memory_equal(t->payload, "d", 1);
	due_task_free(t);

	/* replace to now, so that it can be claimed; then a running holder */
	o.on_key = DUE_ON_KEY_REPLACE;
	o.at = now;
	assert_int_equal(due_schedule(db, &s2, "digest", "e", 1, &o), 0);
	assert_true(s2.existed && s2.moved && s2.id == s1.id);
	int32_t a = claim_one(db, s1.id, LONG_LEASE);
	q(m, "START TRANSACTION");
	o.at = now + 3600000000LL;
	assert_int_equal(due_schedule_mysql_tx(m, &s2, "digest", "f", 1, &o),
			 0);
	assert_false(s2.existed);
	assert_false(s2.moved);
	assert_true(s2.id != s1.id);
	q(m, "COMMIT");
	t = get(db, s1.id);
	assert_int_equal(t->state, DUE_CLAIMED);
	assert_int_equal(t->attempt, a);
	assert_null(t->key); /* given up: its live_key is NULL */
	assert_memory_equal(t->payload, "e", 1);
	due_task_free(t);
	t = get(db, s2.id);
	assert_string_equal(t->key, "digest-1");
	due_task_free(t);
	assert_int_equal(due_complete(db, &co, s1.id, a, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	o.on_key = DUE_ON_KEY_KEEP;
	assert_int_equal(due_schedule(db, &s1, "digest", "g", 1, &o), 0);
	assert_true(s1.existed && s1.id == s2.id);
	mysql_close(m);
	due_close(db);
}

/* One producer of test_on_key_race: rounds of keyed submits. */
typedef struct deb_producer {
	pthread_t th;
	due_db *db;
	int p, rounds, rc, created;
	due_on_key how;
	due_time base; /* later: round r's time; replace: due now */
	char err[256];
} deb_producer;

enum { DEB_PRODUCERS = 8, DEB_ROUNDS = 40 };

static void *deb_produce(void *arg)
{
	deb_producer *d = arg;
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	char pl[32];

	o.key = "deb";
	o.on_key = d->how;
	for (int r = 0; r < d->rounds; r++) {
		int n = r * DEB_PRODUCERS + d->p + 1;
		o.at =
		    d->how == DUE_ON_KEY_LATER ? d->base + n * 1000LL : d->base;
		snprintf(pl, sizeof(pl), "%d", n);
		if ((d->rc = due_schedule(d->db, &s, "deb", pl, strlen(pl),
					  &o)) < 0) {
			snprintf(d->err, sizeof(d->err), "%s",
				 due_error_last());
			return NULL;
		}
		d->created += !s.existed;
	}
	return NULL;
}

/* Claims and completes "deb" tasks until *stop. */
typedef struct deb_claimer {
	pthread_t th;
	due_db *db;
	atomic_int *stop;
	int rc, done;
} deb_claimer;

static void *deb_claim(void *arg)
{
	deb_claimer *c = arg;
	static const char *const kinds[] = {"deb"};
	due_complete_outcome co;

	while (!atomic_load(c->stop) && c->rc == 0) {
		due_task_list *l = NULL;
		if ((c->rc = due_claim(c->db, &l, "w", kinds, 1, 4,
				       LONG_LEASE)) < 0)
			break;
		for (size_t i = 0; i < l->count && c->rc == 0; i++) {
			c->rc = due_complete(c->db, &co, l->items[i].id,
					     l->items[i].attempt, "", 0);
			c->done += c->rc == 0 && co == DUE_COMPLETE_DONE;
		}
		due_task_list_free(l);
	}
	return NULL;
}

/*
** Debounce under racing producers (issue 38): 8 threads, each with its
** own handle, submit one key with on_key later at times that all differ;
** every submit succeeds (lost deadlocks are retried), one task was ever
** made and it is due at the latest time asked, with that submit's
** payload.  Then replace at "now" while a claimer claims and completes
** the tasks: every submit succeeds, each task was made by exactly one
** submit (not existed), and what is not DONE holds the key (at most
** one task; none when the claimer took the last): no waiting task lost
** the key, only running ones gave it up.
*/
static void test_on_key_race(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	deb_producer d[DEB_PRODUCERS];
	atomic_int stop = 0;
	deb_claimer c = {.db = open_db(), .stop = &stop};
	due_time now;
	int created = 0;

	assert_int_equal(due_now(db, &now), 0);
	for (int p = 0; p < DEB_PRODUCERS; p++) {
		d[p] = (deb_producer){.db = open_db(),
				      .p = p,
				      .rounds = DEB_ROUNDS,
				      .how = DUE_ON_KEY_LATER,
				      .base = now + 3600000000LL};
		assert_int_equal(
		    pthread_create(&d[p].th, NULL, deb_produce, &d[p]), 0);
	}
	for (int p = 0; p < DEB_PRODUCERS; p++) {
		assert_int_equal(pthread_join(d[p].th, NULL), 0);
		if (d[p].rc != 0)
			fail_msg("producer %d: %d %s", p, d[p].rc, d[p].err);
		created += d[p].created;
	}
	assert_int_equal(created, 1);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task"), 1);
	char sql[200];
	snprintf(sql, sizeof(sql),
		 "SELECT due_at - %lld FROM due_task WHERE state = 'SCHEDULED'"
		 " AND `key` = 'deb'",
		 (long long)now + 3600000000LL);
	assert_int_equal(q_int(m, sql), DEB_PRODUCERS * DEB_ROUNDS * 1000LL);
	assert_int_equal(q_int(m, "SELECT CAST(payload AS CHAR) FROM due_task"),
			 DEB_PRODUCERS * DEB_ROUNDS);

	/* replace, due at once, racing a claimer */
	q(m, "DELETE FROM due_task");
	assert_int_equal(pthread_create(&c.th, NULL, deb_claim, &c), 0);
	created = 0;
	for (int p = 0; p < DEB_PRODUCERS / 2; p++) {
		d[p].rounds = DEB_ROUNDS / 2;
		d[p].how = DUE_ON_KEY_REPLACE;
		d[p].base = now;
		d[p].created = 0;
		assert_int_equal(
		    pthread_create(&d[p].th, NULL, deb_produce, &d[p]), 0);
	}
	for (int p = 0; p < DEB_PRODUCERS / 2; p++) {
		assert_int_equal(pthread_join(d[p].th, NULL), 0);
		if (d[p].rc != 0)
			fail_msg("producer %d: %d %s", p, d[p].rc, d[p].err);
		created += d[p].created;
	}
	atomic_store(&stop, 1);
	assert_int_equal(pthread_join(c.th, NULL), 0);
	assert_int_equal(c.rc, 0);
	assert_true(created >= 1);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task"), created);
	/* the claimer completed all it claimed, maybe the last holder too:
	   what is not DONE is a waiting holder of the key, at most one */
	int64_t held = q_int(m, "SELECT COUNT(*) FROM due_task"
				" WHERE live_key IS NOT NULL");
	assert_true(held == 0 || held == 1);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task"
				  " WHERE state <> 'DONE'"),
			 held);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task WHERE"
				  " state = 'SCHEDULED' AND `key` IS NULL"),
			 0);
	printf("on_key race: later %d x %d -> 1 task; replace %d x %d with a "
	       "claimer -> %d tasks, %d done\n",
	       DEB_PRODUCERS, DEB_ROUNDS, DEB_PRODUCERS / 2, DEB_ROUNDS / 2,
	       created, c.done);
	for (int p = 0; p < DEB_PRODUCERS; p++)
		due_close(d[p].db);
	due_close(c.db);
	mysql_close(m);
	due_close(db);
}

/*
** A caller's connection in another character set would send the key's
** and the group's bytes converted (the same key stored twice, as two
** live tasks): refused, naming the charset and the fix, nothing written.
*/
static void test_tx_charset(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	o.key = "caf\xc3\xa9";
	assert_int_equal(mysql_set_character_set(m, "latin1"), 0);
	q(m, "START TRANSACTION");
	assert_int_equal(due_schedule_mysql_tx(m, &s, "ship", "a", 1, &o),
			 DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "latin1"));
	assert_non_null(strstr(due_error_last(), "mysql_set_character_set"));
	q(m, "COMMIT");
	/* SET NAMES too: the server reports the change to the client */
	assert_int_equal(mysql_set_character_set(m, "utf8mb4"), 0);
	q(m, "SET NAMES latin1");
	q(m, "START TRANSACTION");
	assert_int_equal(due_schedule_mysql_tx(m, &s, "ship", "a", 1, &o),
			 DUE_EINVAL);
	q(m, "COMMIT");
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task"), 0);

	assert_int_equal(mysql_set_character_set(m, "utf8mb4"), 0);
	q(m, "START TRANSACTION");
	assert_int_equal(due_schedule_mysql_tx(m, &s, "ship", "a", 1, &o), 0);
	q(m, "COMMIT");
	due_task *t = get(db, s.id);
	assert_string_equal(t->key, "caf\xc3\xa9");
	due_task_free(t);
	mysql_close(m);
	due_close(db);
}

/* Servers without FOR UPDATE SKIP LOCKED are refused, naming the version. */
static void test_version_check(void **state)
{
	(void)state;
	static const char *const ok[] = {"10.6.0-MariaDB",
					 "10.11.6-MariaDB-log",
					 "11.4.2-MariaDB",
					 "5.5.5-10.11.6-MariaDB",
					 "8.0.1",
					 "8.0.36",
					 "8.4.0-commercial",
					 "9.0.1"};
	static const char *const old[] = {
	    "10.5.22-MariaDB", "10.3.39-MariaDB-0", "8.0.0-dmr", "5.7.44-log"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		assert_int_equal(due__my_version_check(ok[i]), 0);
	for (size_t i = 0; i < sizeof(old) / sizeof(old[0]); i++) {
		assert_int_equal(due__my_version_check(old[i]), DUE_ESTORE);
		assert_non_null(strstr(due_error_last(), old[i]));
		assert_non_null(strstr(due_error_last(), "SKIP LOCKED"));
	}
}

/* A bad URL is refused before anything is opened, naming what is wrong. */
static void test_url(void **state)
{
	(void)state;
	static const char *const bad[][2] = {
	    {"mysql://root@127.0.0.1:3306", "no database"},
	    {"mysql:root@h/db", "no //"},
	    {"mysql://root@h:99999/db", "bad port"},
	    {"mysql://root@h/db?sslmode=x", "unknown option 'sslmode=x'"},
	    {"mariadb://root@h:0/db", "bad port"},
	    {"mysql://root@h1:1,,h2:2/db", "empty host"},
	    {"mysql://root@h1:1,/db", "empty host"},
	    {"mysql://root@h1:1,h2:0/db", "bad port"},
	    {"mysql://root@h1,h2/db?socket=/tmp/s", "one server"},
	    {"mysql://root@h1,h2/db?multi_writer=yes", "multi_writer=1"},
	    {"mysql://root@h/db?wake=binlog", "wake=auto or wake=poll"},
	    {"mysql://root@h/db?wake=", "wake=auto or wake=poll"},
	    {"mysql://h1,h2,h3,h4,h5,h6,h7,h8,h9,h10,h11,h12,h13,h14,h15,h16,"
	     "h17/db",
	     "more than 16 hosts"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		due_db *db = NULL;
		assert_int_equal(due_open(&db, bad[i][0], NULL), DUE_EINVAL);
		assert_non_null(strstr(due_error_last(), bad[i][1]));
		due_close(db);
	}
}

/* A host list keeps its order and ports; multi_writer is read. */
static void test_url_hosts(void **state)
{
	(void)state;
	due_my_cfg *c = NULL;
	const char *u =
	    "mysql://u:p@10.0.0.1:3307,db2,db3:3309/q?multi_writer=1";

	assert_int_equal(due__my_parse_url(&c, u, u + 6), 0);
	assert_int_equal(c->n_hosts, 3);
	assert_string_equal(c->hosts[0], "10.0.0.1");
	assert_int_equal(c->ports[0], 3307);
	assert_string_equal(c->hosts[1], "db2");
	assert_int_equal(c->ports[1], 3306);
	assert_string_equal(c->hosts[2], "db3");
	assert_int_equal(c->ports[2], 3309);
	assert_string_equal(c->user, "u");
	assert_string_equal(c->db, "q");
	assert_true(c->multi_writer);
	due__my_cfg_free(c);
	u = "mysql://h/q";
	assert_int_equal(due__my_parse_url(&c, u, u + 6), 0);
	assert_int_equal(c->n_hosts, 1);
	assert_false(c->multi_writer);
	assert_false(c->wake_poll); /* wake=auto: the binlog when allowed */
	due__my_cfg_free(c);
	u = "mysql://h/q?wake=poll&multi_writer=0";
	assert_int_equal(due__my_parse_url(&c, u, u + 6), 0);
	assert_true(c->wake_poll);
	due__my_cfg_free(c);
	u = "mysql://h/q?wake=poll&wake=auto";
	assert_int_equal(due__my_parse_url(&c, u, u + 6), 0);
	assert_false(c->wake_poll);
	due__my_cfg_free(c);
}

/*
** Wake-ups without LISTEN: a submit through another handle bumps the
** due_wake counter, and the listener's drain reports it (by the
** doorbell on the test server, which keeps no binary log; the binlog path,
** the doorbell's ring and the poll: tests/cli/test_mysql_wake.sh).
*/
static void test_listen(void **state)
{
	(void)state;
	due_db *a = open_db(), *b = open_db();
	int fd = -1, n = 0;

	assert_int_equal(due_listen(a, &fd), 0);
	assert_true(fd >= 0);
	/* the first drains see no change (the counter is where it was) */
	for (int i = 0; i < 3; i++) {
		struct pollfd p = {fd, POLLIN, 0};
		assert_true(poll(&p, 1, HANG_MS) == 1);
		assert_int_equal(due_listen_drain(a, &n), 0);
		if (n)
			break;
	}
	assert_int_equal(n, 0);
	add(b, "k", 0, 1);
	for (int64_t end = mono_ms() + HANG_MS; n == 0;) {
		struct pollfd p = {fd, POLLIN, 0};
		assert_true(mono_ms() < end);
		(void)poll(&p, 1, 100);
		assert_int_equal(due_listen_drain(a, &n), 0);
	}
	assert_int_equal(n, 1);
	due_close(b);
	due_close(a);
}

/*
** A connection killed under a handle (a server restart, a proxy): the
** call that meets it fails with DUE_ESTORE or succeeds, and the next one
** reconnects on its own (no MYSQL_OPT_RECONNECT).
*/
static void test_killed_connection(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_id id = add(db, "k", 0, 1);
	char sql[160];
	int64_t victim;
	due_task *t = NULL;
	due_upcoming *u = NULL;
	const char *kinds[] = {"k"};
	static const char sql_victim[] =
	    "SELECT MIN(id) FROM information_schema.processlist"
	    " WHERE db = DATABASE() AND id <> CONNECTION_ID()";
	int rc;

	victim = q_int(m, sql_victim);
	assert_true(victim > 0);
	snprintf(sql, sizeof(sql), "KILL %lld", (long long)victim);
	q(m, sql);
	rc = due_get(db, &t, id);
	assert_true(rc == 0 || rc == DUE_ESTORE);
	due_task_free(t);
	t = get(db, id); /* reconnected */
	assert_int_equal(t->state, DUE_SCHEDULED);
	due_task_free(t);

	/* Again, met by a call whose SQL escapes a string (the kinds): the
	   call after it reopens the session after its text was begun, and
	   must escape with the new connection, not the freed one (a worker
	   crashed there when its discovery's connection was killed). */
	victim = q_int(m, sql_victim);
	assert_true(victim > 0);
	snprintf(sql, sizeof(sql), "KILL %lld", (long long)victim);
	q(m, sql);
	for (int i = 0; i < 2; i++) {
		rc = due_upcoming_get(db, &u, kinds, 1, false, INT64_MAX / 2,
				      10);
		assert_true(rc == 0 || (i == 0 && rc == DUE_ESTORE));
		if (rc == 0) {
			assert_int_equal(u->count, 1);
			assert_int_equal(u->ids[0], id);
		}
		due_upcoming_free(u);
		u = NULL;
	}
	assert_int_equal(claim_one(db, id, LONG_LEASE), 1);
	mysql_close(m);
	due_close(db);
}

/*
** Whether a transaction waits for a row lock (SHOW ENGINE INNODB STATUS,
** its TRANSACTIONS section; MariaDB's information_schema.innodb_trx does
** not always say LOCK WAIT).
*/
static bool lock_waits(MYSQL *m)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	bool w = false;

	q(m, "SHOW ENGINE INNODB STATUS");
	if ((r = mysql_store_result(m))) {
		/* in the live transactions, not the latest deadlock's */
		const char *tx = (row = mysql_fetch_row(r)) && row[2]
				     ? strstr(row[2], "\nTRANSACTIONS\n")
				     : NULL;
		w = tx && strstr(tx, "FOR THIS LOCK TO BE GRANTED");
		mysql_free_result(r);
	}
	return w;
}

typedef struct batch_call {
	due_db *db;
	due_completion c[2];
	int rc;
} batch_call;

static void *batch_thread(void *arg)
{
	batch_call *b = arg;
	b->rc = due_complete_batch(b->db, b->c, 2);
	return NULL;
}

/*
** A real deadlock (1213) reaches the store and is retried whole: the
** store's completion of tasks t1 < t2 locks t1 and waits for t2, which a
** raw transaction of the test holds; that transaction, heavier (it has
** changed 200 rows, and InnoDB rolls back the lighter one), then asks
** for t1.  InnoDB breaks the cycle by rolling the store's transaction
** back: the test's statement gets t1 (so it was not the victim), the
** server counts one deadlock, and once the test commits, the store's
** retry completes both tries exactly once.
*/
static void test_deadlock_retried(void **state)
{
	(void)state;
	due_db *db = open_db(), *worker = open_db();
	MYSQL *a = own_conn(), *watch = own_conn();
	due_id t1 = add(db, "k", 0, 1), t2;
	batch_call b = {.db = worker};
	int64_t deadlocks;
	char sql[160];
	pthread_t th;

	b.c[0].id = t1;
	b.c[0].attempt = claim_one(db, t1, LONG_LEASE);
	b.c[1].id = t2 = add(db, "k", 0, 1); /* claimed one at a time */
	b.c[1].attempt = claim_one(db, t2, LONG_LEASE);
	assert_int_equal(b.c[0].attempt, 1);
	assert_int_equal(b.c[1].attempt, 1);
	q(a, "CREATE TABLE filler (id INT PRIMARY KEY, v INT) ENGINE=InnoDB");
	q(a, "INSERT INTO filler SELECT seq, 0 FROM seq_1_to_200");
	deadlocks = q_int(watch, "SELECT variable_value FROM"
				 " information_schema.global_status WHERE"
				 " variable_name = 'INNODB_DEADLOCKS'");
	assert_true(deadlocks >= 0);

	q(a, "START TRANSACTION");
	q(a, "UPDATE filler SET v = v + 1");
	snprintf(sql, sizeof(sql),
		 "SELECT id FROM due_task WHERE id = %lld FOR UPDATE",
		 (long long)t2);
	q_drop(a, sql);
	assert_int_equal(pthread_create(&th, NULL, batch_thread, &b), 0);
	/* the store holds t1 and waits for t2 */
	for (int64_t end = mono_ms() + HANG_MS;;) {
		if (lock_waits(watch))
			break;
		assert_true(mono_ms() < end);
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	snprintf(sql, sizeof(sql),
		 "SELECT id FROM due_task WHERE id = %lld FOR UPDATE",
		 (long long)t1);
	q_drop(a, sql); /* granted: the store's transaction was the victim */
	/* the server counts it (the victim's thread may count it after) */
	for (int64_t end = mono_ms() + HANG_MS, n;;) {
		n = q_int(watch, "SELECT variable_value FROM"
				 " information_schema.global_status WHERE"
				 " variable_name = 'INNODB_DEADLOCKS'");
		if (n != deadlocks) {
			assert_int_equal(n, deadlocks + 1);
			break;
		}
		assert_true(mono_ms() < end);
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	q(a, "COMMIT");
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(b.rc, 0);
	assert_int_equal(b.c[0].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(b.c[1].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(state_of(db, t1), DUE_DONE);
	assert_int_equal(state_of(db, t2), DUE_DONE);
	/* each try ended once */
	assert_int_equal(q_int(watch, "SELECT COUNT(*) FROM due_attempt"
				      " WHERE outcome = 'DONE'"),
			 2);
	mysql_close(watch);
	mysql_close(a);
	due_close(worker);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Run after (issue 38 point 3)                                        */
/* ------------------------------------------------------------------ */

#define HOUR_US 3600000000LL

/* A task of kind "c" after the n ids of `after` on db; its id. */
static due_id child_after(due_db *db, const due_id *after, size_t n)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	o.after = after;
	o.n_after = n;
	if (due_schedule(db, &s, "c", "child", 5, &o) != 0)
		fail_msg("add after: %s", due_error_last());
	return s.id;
}

/* Wait until a session of the server waits for a row lock. */
static void wait_lock_wait(MYSQL *watch)
{
	for (int64_t end = mono_ms() + HANG_MS; !lock_waits(watch);) {
		assert_true(mono_ms() < end);
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
}

/*
** Schema 10 -> 11: a database as version 10 left it (no run-after
** columns, no due_after) is refused, then upgraded by `due init` with its
** tasks (0/0/0), and run-after works on it.
*/
static void test_upgrade_from_10(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_id id = add(db, "k", HOUR_US, 5);

	due_close(db);
	q(m, "DROP TABLE due_after");
	q(m, "ALTER TABLE due_task DROP COLUMN after_n, DROP COLUMN after_left,"
	     " DROP COLUMN after_any_end, DROP COLUMN after_at,"
	     " DROP COLUMN after_delay_us, DROP COLUMN after_children");
	q(m, "UPDATE due_meta SET value = '10' WHERE name = 'schema_version'");
	assert_int_equal(due_open(&db, url, &oo), DUE_ESCHEMA);
	due_close(db);
	oo.create = true; /* what `due init` does */
	assert_int_equal(due_open(&db, url, &oo), 0);
	assert_int_equal(q_int(m, "SELECT value FROM due_meta"
				  " WHERE name = 'schema_version'"),
			 11);
	due_task *t = get(db, id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->after_n, 0);
	assert_int_equal(t->after_left, 0);
	assert_false(t->after_any_end);
	assert_null(t->after);
	due_task_free(t);
	due_id c = child_after(db, &id, 1);
	t = get(db, c);
	assert_int_equal(t->after_left, 1);
	assert_non_null(t->after);
	assert_int_equal(t->after[0], id);
	due_task_free(t);
	mysql_close(m);
	due_close(db);
}

typedef struct finish_call {
	due_db *db;
	due_id id;
	int32_t attempt;
	atomic_int *hold; /* the hook waits while it is 1 */
	atomic_int in_hook;
	int rc;
	due_complete_outcome co;
} finish_call;

/* A completion hook that keeps the finish's transaction open. */
static int hook_hold(void *conn, const due_task *t, void *payload)
{
	finish_call *f = payload;

	(void)conn;
	(void)t;
	atomic_store(&f->in_hook, 1);
	while (atomic_load(f->hold)) {
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void *finish_thread(void *arg)
{
	finish_call *f = arg;
	f->rc = due_complete_tx(f->db, &f->co, f->id, f->attempt, "r", 1,
				f->hold ? hook_hold : NULL, f);
	return NULL;
}

typedef struct submit_call {
	due_db *db;
	due_id parent, id;
	int rc;
} submit_call;

static void *submit_thread(void *arg)
{
	submit_call *c = arg;
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	o.after = &c->parent;
	o.n_after = 1;
	c->rc = due_schedule(c->db, &s, "c", "child", 5, &o);
	c->id = s.id;
	return NULL;
}

/*
** The insert/finish race, both orders, on real concurrent connections.
** Child first: a caller's transaction added the child (its parent's row
** written and locked) and has not committed; the parent's completion waits
** for that lock, then reads the committed edge and releases the child.
** Finish first: the completion holds the parent (DONE, not committed:
** its hook waits); the child's submit waits for the lock, then sees the
** parent DONE and is due at once.  Either way the child is not left
** held on a finished parent.
*/
static void test_after_race(void **state)
{
	(void)state;
	due_db *db = open_db(), *other = open_db();
	MYSQL *m = own_conn(), *watch = own_conn();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	due_time t1;
	pthread_t th;

	/* child first */
	due_id p = add(db, "p", 0, 5);
	finish_call f = {.db = other, .id = p};
	f.attempt = claim_one(db, p, LONG_LEASE);
	o.after = &p;
	o.n_after = 1;
	q(m, "START TRANSACTION");
	assert_int_equal(due_schedule_mysql_tx(m, &s, "c", "x", 1, &o), 0);
	assert_int_equal(pthread_create(&th, NULL, finish_thread, &f), 0);
	wait_lock_wait(watch); /* the completion waits for the parent */
	q(m, "COMMIT");
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(f.rc, 0);
	assert_int_equal(f.co, DUE_COMPLETE_DONE);
	due_task *t = get(db, s.id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->after_left, 0);
	assert_true(t->due_at < 253402300799999999LL);
	due_task_free(t);
	claim_one(db, s.id, LONG_LEASE);

	/* finish first */
	atomic_int hold = 1;
	p = add(db, "p", 0, 5);
	f = (finish_call){.db = other, .id = p, .hold = &hold};
	f.attempt = claim_one(db, p, LONG_LEASE);
	assert_int_equal(pthread_create(&th, NULL, finish_thread, &f), 0);
	for (int64_t end = mono_ms() + HANG_MS; !atomic_load(&f.in_hook);) {
		assert_true(mono_ms() < end);
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
	submit_call c = {.db = db, .parent = p};
	pthread_t th2;
	assert_int_equal(pthread_create(&th2, NULL, submit_thread, &c), 0);
	wait_lock_wait(watch); /* the submit waits for the parent */
	atomic_store(&hold, 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(f.rc, 0);
	assert_int_equal(f.co, DUE_COMPLETE_DONE);
	assert_int_equal(pthread_join(th2, NULL), 0);
	assert_int_equal(c.rc, 0);
	assert_int_equal(due_now(db, &t1), 0);
	t = get(db, c.id);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->after_n, 1);
	assert_int_equal(t->after_left, 0);
	assert_true(t->due_at <= t1);
	due_task_free(t);
	assert_int_equal(
	    q_int(watch, "SELECT COUNT(*) FROM due_after WHERE pending"), 0);
	mysql_close(watch);
	mysql_close(m);
	due_close(other);
	due_close(db);
}

/* after_children of task id, read by the test's own connection */
static int64_t children_of(MYSQL *m, due_id id)
{
	char sql[128];

	snprintf(sql, sizeof(sql),
		 "SELECT after_children FROM due_task WHERE id = %lld",
		 (long long)id);
	return q_int(m, sql);
}

/*
** A run-after submit WRITES each parent's row (after_children + 1), live
** or ended, so that on Galera a parent's finish through another node
** conflicts with it at certification (test_galera.sh shows the race this
** closes); a refused submit (a parent missing or DEAD) sets the counts
** back, even inside a caller's transaction that goes on and commits.
*/
static void test_after_children(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_fail_outcome fo;
	due_submitted s;

	due_id p = add(db, "p", HOUR_US, 5), dead = add(db, "p", 0, 1);
	assert_int_equal(
	    due_fail(db, &fo, dead, claim_one(db, dead, LONG_LEASE), "x"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	assert_int_equal(children_of(m, p), 0);

	o.after = &p;
	o.n_after = 1;
	assert_int_equal(due_schedule(db, &s, "c", "x", 1, &o), 0);
	assert_int_equal(due_schedule(db, &s, "c", "y", 1, &o), 0);
	assert_int_equal(children_of(m, p), 2);

	/* refused in a caller's transaction, which then commits */
	due_id both[2] = {p, dead}, gone[2] = {p, 999999999};
	o.after = both;
	o.n_after = 2;
	q(m, "START TRANSACTION");
	assert_int_equal(due_schedule_mysql_tx(m, &s, "c", "z", 1, &o),
			 DUE_ESTATE);
	o.after = gone;
	assert_int_equal(due_schedule_mysql_tx(m, &s, "c", "z", 1, &o),
			 DUE_ENOTFOUND);
	assert_non_null(strstr(due_error_last(), "parent task 999999999"));
	q(m, "COMMIT");
	assert_int_equal(children_of(m, p), 2);
	assert_int_equal(children_of(m, dead), 0);

	/* an ended parent is written too (any end) */
	o.after = both;
	o.after_any_end = true;
	assert_int_equal(due_schedule(db, &s, "c", "w", 1, &o), 0);
	assert_int_equal(children_of(m, p), 3);
	assert_int_equal(children_of(m, dead), 1);
	mysql_close(m);
	due_close(db);
}

/*
** A chain of 1,000 held tasks, each after the one before, is cancelled
** in one step when its head is cancelled: one transaction, level by level
** (no recursion, no trigger depth), each task's last_error naming the
** one before it; nothing of the chain is left held.
*/
enum { CHAIN = 1000 };

static void test_after_chain_cancel(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_cancel_outcome co;
	due_id *chain = calloc(CHAIN + 1, sizeof(*chain));
	char want[64];

	assert_non_null(chain);
	chain[0] = add(db, "p", HOUR_US, 5);
	for (int i = 1; i <= CHAIN; i++)
		chain[i] = child_after(db, &chain[i - 1], 1);
	int64_t t = mono_ms();
	assert_int_equal(due_cancel(db, &co, chain[0]), 0);
	t = mono_ms() - t;
	assert_int_equal(co, DUE_CANCEL_CANCELLED);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task"
				  " WHERE state = 'CANCELLED'"),
			 CHAIN + 1);
	assert_int_equal(
	    q_int(m, "SELECT COUNT(*) FROM due_after WHERE pending"), 0);
	for (int i = 1; i <= CHAIN; i += 333) {
		due_task *x = get(db, chain[i]);
		assert_int_equal(x->state, DUE_CANCELLED);
		snprintf(want, sizeof(want), "parent task %lld ended CANCELLED",
			 (long long)chain[i - 1]);
		assert_string_equal(x->last_error, want);
		due_task_free(x);
	}
	printf("after: a chain of %d cancelled in one step in %lld ms\n", CHAIN,
	       (long long)t);
	free(chain);
	mysql_close(m);
	due_close(db);
}

/* CALL sql on m; its SQLSTATE ("00000" when it worked) into st[6]. */
static void call_state(MYSQL *m, const char *sql, char st[6])
{
	if (mysql_query(m, sql) == 0) {
		do
			mysql_free_result(mysql_store_result(m));
		while (mysql_next_result(m) == 0);
	}
	snprintf(st, 6, "%s", mysql_sqlstate(m));
}

/*
** due_schedule_after, the SQL producer: inside the caller's transaction
** (a rollback leaves nothing); the child held until its parent is DONE
** and released by the store's completion; bad lists SIGNAL 22023, a
** missing parent 23000 and a DEAD one 55000, naming the id, and write
** nothing; after_any_end takes the DEAD one; due_reschedule of a held
** task keeps it held, its new time applied at the release.
*/
static void test_sql_after(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_fail_outcome fo;
	due_reschedule_outcome rs;
	due_time now;
	char sql[512], st[6];

	due_id p = add(db, "p", HOUR_US, 5), dead = add(db, "p", 0, 1);
	assert_int_equal(
	    due_fail(db, &fo, dead, claim_one(db, dead, LONG_LEASE), "x"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	int64_t before = q_int(m, "SELECT COUNT(*) FROM due_task");

	snprintf(sql, sizeof(sql),
		 "CALL due_schedule_after('c', 'x', 0, NULL, NULL, NULL,"
		 " '[%lld]', NULL, @id)",
		 (long long)p);
	q(m, "START TRANSACTION");
	q(m, sql);
	q(m, "ROLLBACK");
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task"), before);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_after"), 0);

	static const struct {
		const char *after, *state, *says;
	} bad[] = {
	    {"'[]'", "22023", "empty"},
	    {"'[1, 1]'", "22023", "twice"},
	    {"'[0]'", "22023", "invalid task id"},
	    {"'[\"7\"]'", "22023", "invalid task id"},
	    {"'{\"a\": 1}'", "22023", "JSON array"},
	    {"NULL", "22023", "JSON array"},
	    {"'[999999999]'", "23000", "parent task 999999999 not found"},
	    /* numbers that are not BIGINT ids: v2's CAST raised 1292
	       (22007) for these instead of naming them */
	    {"'[1e0]'", "22023", "invalid task id 1e0:"},
	    {"'[1e30]'", "22023", "invalid task id 1e30:"},
	    {"'[1.0]'", "22023", "invalid task id 1.0:"},
	    {"'[99999999999999999999]'", "22023",
	     "invalid task id 99999999999999999999:"},
	    {"'[9223372036854775808]'", "22023",
	     "invalid task id 9223372036854775808:"},
	    {"'[9223372036854775807]'", "23000",
	     "parent task 9223372036854775807 not found"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(sql, sizeof(sql),
			 "CALL due_schedule_after('c', 'x', 0, NULL, NULL,"
			 " NULL, %s, FALSE, @id)",
			 bad[i].after);
		call_state(m, sql, st);
		assert_string_equal(st, bad[i].state);
		if (!strstr(mysql_error(m), bad[i].says))
			fail_msg("%s: '%s' does not say '%s'", bad[i].after,
				 mysql_error(m), bad[i].says);
	}
	/* a good parent before a bad element: refused, nothing written */
	snprintf(sql, sizeof(sql),
		 "CALL due_schedule_after('c', 'x', 0, NULL, NULL, NULL,"
		 " '[%lld, 1e0]', FALSE, @id)",
		 (long long)p);
	call_state(m, sql, st);
	assert_string_equal(st, "22023");
	assert_non_null(strstr(mysql_error(m), "invalid task id 1e0:"));
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task"), before);
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_after"), 0);
	assert_int_equal(q_int(m, "SELECT SUM(after_children) FROM due_task"),
			 0);
	snprintf(sql, sizeof(sql),
		 "CALL due_schedule_after('c', 'x', 0, NULL, NULL, NULL,"
		 " '[%lld, %lld]', FALSE, @id)",
		 (long long)p, (long long)dead);
	call_state(m, sql, st);
	assert_string_equal(st, "55000");
	snprintf(sql, sizeof(sql), "parent task %lld is DEAD", (long long)dead);
	assert_non_null(strstr(mysql_error(m), sql));
	assert_int_equal(q_int(m, "SELECT COUNT(*) FROM due_task"), before);
	/* the parents' rows written first, set back by the refusal */
	assert_int_equal(children_of(m, p), 0);
	assert_int_equal(children_of(m, dead), 0);

	/* committed: held on p, released by p's DONE at its own time */
	snprintf(sql, sizeof(sql),
		 "CALL due_schedule_after('c', 'x', 0, NULL, NULL, NULL,"
		 " '[%lld, %lld]', TRUE, @id)",
		 (long long)p, (long long)dead);
	q(m, "START TRANSACTION");
	q(m, sql);
	q(m, "COMMIT");
	due_id c = q_int(m, "SELECT @id");
	assert_int_equal(children_of(m, p), 1);
	assert_int_equal(children_of(m, dead), 1);
	due_task *t = get(db, c);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->after_n, 2);
	assert_int_equal(t->after_left, 1);
	assert_true(t->after_any_end);
	assert_int_equal(t->due_at, 253402300799999999LL);
	assert_int_equal(t->after[0], p);
	assert_int_equal(t->after[1], dead);
	due_task_free(t);
	assert_int_equal(due_now(db, &now), 0);
	snprintf(sql, sizeof(sql),
		 "CALL due_reschedule(%lld, NULL, %lld, NULL, @o)",
		 (long long)c, (long long)(now + 2 * HOUR_US));
	q(m, sql);
	assert_int_equal(q_int(m, "SELECT @o = 'RESCHEDULED'"), 1);
	assert_int_equal(q_int(m, "SELECT after_left FROM due_task WHERE id = "
				  "(SELECT @id)"),
			 1);
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT;
	assert_int_equal(due_reschedule(db, &rs, p, &ro), 0); /* p due now */
	int32_t a = claim_one(db, p, LONG_LEASE);
	due_complete_outcome cc;
	assert_int_equal(due_complete(db, &cc, p, a, "r", 1), 0);
	assert_int_equal(cc, DUE_COMPLETE_DONE);
	t = get(db, c);
	assert_int_equal(t->after_left, 0);
	assert_int_equal(t->due_at, now + 2 * HOUR_US);
	due_task_free(t);
	mysql_close(m);
	due_close(db);
}

/*
** on_key replace or later meeting a held holder (run-after), from C and
** from SQL: the holder answers (existed, moved), stays held, and keeps
** the new time as its own, applied at its release.
*/
static void test_after_on_key_held(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s, s2;
	due_time now;
	char sql[300];

	assert_int_equal(due_now(db, &now), 0);
	due_id p = add(db, "p", HOUR_US, 5);
	o.after = &p;
	o.n_after = 1;
	o.key = "k1";
	assert_int_equal(due_schedule(db, &s, "c", "a", 1, &o), 0);
	o = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	o.key = "k1";
	o.on_key = DUE_ON_KEY_LATER;
	o.at = now + 3 * HOUR_US;
	assert_int_equal(due_schedule(db, &s2, "c", "b", 1, &o), 0);
	assert_true(s2.existed && s2.moved && s2.id == s.id);
	due_task *t = get(db, s.id);
	assert_int_equal(t->after_left, 1);
	assert_int_equal(t->due_at, 253402300799999999LL);
	assert_memory_equal(t->payload, "b", 1);
	due_task_free(t);
	snprintf(sql, sizeof(sql),
		 "CALL due_schedule_on_key('c', 'z', NULL, %lld, 'k1', NULL,"
		 " 'replace', @id)",
		 (long long)(now + 2 * HOUR_US));
	q(m, sql);
	assert_int_equal(q_int(m, "SELECT @id"), s.id);
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT;
	due_reschedule_outcome rs;
	due_complete_outcome cc;
	assert_int_equal(due_reschedule(db, &rs, p, &ro), 0);
	assert_int_equal(
	    due_complete(db, &cc, p, claim_one(db, p, LONG_LEASE), "r", 1), 0);
	t = get(db, s.id);
	assert_int_equal(t->after_left, 0);
	assert_int_equal(t->due_at, now + 2 * HOUR_US);
	assert_memory_equal(t->payload, "z", 1);
	due_task_free(t);
	mysql_close(m);
	due_close(db);
}

/*
** The held holder's own time and payload, read with the test's own
** connection: after_at (-1 for NULL), after_delay_us, after_left, whether
** due_at is still HELD_AT, and the payload's first byte.
*/
typedef struct held_row {
	int64_t at, delay, left, held, pay;
} held_row;

static held_row held_of(MYSQL *m, due_id id)
{
	char sql[300];
	held_row h;

	snprintf(sql, sizeof(sql),
		 "SELECT COALESCE(after_at, -1), after_delay_us, after_left,"
		 " due_at = 253402300799999999, ASCII(payload) FROM due_task"
		 " WHERE id = %lld",
		 (long long)id);
	if (mysql_query(m, sql) != 0)
		fail_msg("%s: %s", sql, mysql_error(m));
	MYSQL_RES *r = mysql_store_result(m);
	MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
	if (!row)
		fail_msg("task %lld: no row", (long long)id);
	h = (held_row){strtoll(row[0], NULL, 10), strtoll(row[1], NULL, 10),
		       strtoll(row[2], NULL, 10), strtoll(row[3], NULL, 10),
		       strtoll(row[4], NULL, 10)};
	mysql_free_result(r);
	return h;
}

/* One keyed submit of kind "c", key "k1": `at` (0: none) or `delay`. */
static due_submitted key_add(due_db *db, due_on_key how, due_time at,
			     int64_t delay, const char *payload)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	o.key = "k1";
	o.on_key = how;
	if (at)
		o.at = at;
	else
		o.delay_us = delay;
	if (due_schedule(db, &s, "c", payload, 1, &o) < 0)
		fail_msg("schedule: %s", due_error_last());
	return s;
}

/*
** on_key `later` meeting a held holder (issue 38, like SQLite's
** ST_KEY_MOVE): it moves only when the new time is strictly later than
** the earliest the holder could run were it released now,
** GREATEST(COALESCE(after_at, now), now + after_delay_us); `replace`
** always.  A move keeps the holder held (after_left 1, due_at HELD_AT)
** with the new time as its own; no move changes nothing (time, payload).
** The same through due_schedule_on_key v3, and the release applies the
** last time kept.
*/
static void test_after_on_key_later_held(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s, k;
	due_time now;
	held_row h;
	char sql[300];

	assert_int_equal(due_now(db, &now), 0);
	due_id p = add(db, "p", HOUR_US, 5);
	o.after = &p;
	o.n_after = 1;
	o.key = "k1";
	o.at = now + 2 * HOUR_US;
	assert_int_equal(due_schedule(db, &s, "c", "a", 1, &o), 0);
	h = held_of(m, s.id);
	assert_true(h.at == now + 2 * HOUR_US && h.delay == 0 && h.left == 1 &&
		    h.held == 1 && h.pay == 'a');

	/* later, earlier than its own at: not moved, nothing changed */
	k = key_add(db, DUE_ON_KEY_LATER, now + HOUR_US, 0, "b");
	assert_true(k.existed && !k.moved && k.id == s.id);
	h = held_of(m, s.id);
	assert_true(h.at == now + 2 * HOUR_US && h.delay == 0 && h.left == 1 &&
		    h.held == 1 && h.pay == 'a');
	/* later, a delay that ends before its own at: not moved */
	k = key_add(db, DUE_ON_KEY_LATER, 0, HOUR_US, "b");
	assert_true(k.existed && !k.moved && k.id == s.id);
	assert_int_equal(held_of(m, s.id).pay, 'a');
	/* later, after it: moved, still held */
	k = key_add(db, DUE_ON_KEY_LATER, now + 3 * HOUR_US, 0, "c");
	assert_true(k.existed && k.moved && k.id == s.id);
	h = held_of(m, s.id);
	assert_true(h.at == now + 3 * HOUR_US && h.delay == 0 && h.left == 1 &&
		    h.held == 1 && h.pay == 'c');
	/* replace, earlier: moved (a delay of 10 minutes, no instant) */
	k = key_add(db, DUE_ON_KEY_REPLACE, 0, HOUR_US / 6, "d");
	assert_true(k.existed && k.moved && k.id == s.id);
	h = held_of(m, s.id);
	assert_true(h.at == -1 && h.delay == HOUR_US / 6 && h.left == 1 &&
		    h.held == 1 && h.pay == 'd');
	/* later against a delay: 5 minutes is not later than now + 10 */
	k = key_add(db, DUE_ON_KEY_LATER, 0, HOUR_US / 12, "e");
	assert_true(k.existed && !k.moved && k.id == s.id);
	h = held_of(m, s.id);
	assert_true(h.delay == HOUR_US / 6 && h.pay == 'd');
	/* ... 20 minutes is */
	k = key_add(db, DUE_ON_KEY_LATER, 0, HOUR_US / 3, "f");
	assert_true(k.existed && k.moved && k.id == s.id);
	h = held_of(m, s.id);
	assert_true(h.at == -1 && h.delay == HOUR_US / 3 && h.left == 1 &&
		    h.held == 1 && h.pay == 'f');

	/* the procedure: later, earlier (an instant before now + 20 min) */
	q(m, "DROP PROCEDURE IF EXISTS due_schedule_on_key");
	due_close(db);
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	oo.create = true; /* init creates v3 again */
	db = NULL;
	if (due_open(&db, url, &oo) < 0)
		fail_msg("open %s: %s", url, due_error_last());
	snprintf(sql, sizeof(sql),
		 "CALL due_schedule_on_key('c', 'g', NULL, %lld, 'k1', NULL,"
		 " 'later', @id)",
		 (long long)(now + HOUR_US / 6));
	q(m, sql);
	assert_int_equal(q_int(m, "SELECT @id"), s.id);
	h = held_of(m, s.id);
	assert_true(h.at == -1 && h.delay == HOUR_US / 3 && h.left == 1 &&
		    h.held == 1 && h.pay == 'f');
	/* later, a delay of 10 minutes: not later than 20 either */
	q(m, "CALL due_schedule_on_key('c', 'g', 600000000, NULL, 'k1', NULL,"
	     " 'later', @id)");
	assert_int_equal(q_int(m, "SELECT @id"), s.id);
	assert_int_equal(held_of(m, s.id).pay, 'f');
	/* later, 4 hours: moved, still held */
	snprintf(sql, sizeof(sql),
		 "CALL due_schedule_on_key('c', 'h', NULL, %lld, 'k1', NULL,"
		 " 'later', @id)",
		 (long long)(now + 4 * HOUR_US));
	q(m, sql);
	assert_int_equal(q_int(m, "SELECT @id"), s.id);
	h = held_of(m, s.id);
	assert_true(h.at == now + 4 * HOUR_US && h.delay == 0 && h.left == 1 &&
		    h.held == 1 && h.pay == 'h');
	assert_int_equal(
	    q_int(m, "SELECT COUNT(*) FROM information_schema.routines WHERE"
		     " routine_schema = DATABASE() AND routine_name ="
		     " 'due_schedule_on_key' AND routine_comment ="
		     " 'due_schedule_on_key v3'"),
	    1);
	/* the parent's end releases it at the time kept */
	due_complete_outcome cc;
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT;
	due_reschedule_outcome rs;
	assert_int_equal(due_reschedule(db, &rs, p, &ro), 0);
	assert_int_equal(
	    due_complete(db, &cc, p, claim_one(db, p, LONG_LEASE), "r", 1), 0);
	due_task *t = get(db, s.id);
	assert_int_equal(t->after_left, 0);
	assert_int_equal(t->due_at, now + 4 * HOUR_US);
	assert_memory_equal(t->payload, "h", 1);
	due_task_free(t);
	mysql_close(m);
	due_close(db);
}

/* A task due now, claimed: its attempt. */
static int32_t claimed_now(due_db *db, due_id id)
{
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT;
	due_reschedule_outcome rs;

	assert_int_equal(due_reschedule(db, &rs, id, &ro), 0);
	return claim_one(db, id, LONG_LEASE);
}

/* A held child of parents[0..n), kind "c", due an hour after them. */
static due_id child_of(due_db *db, due_id *parents, size_t n)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;

	o.delay_us = HOUR_US;
	o.after = parents;
	o.n_after = n;
	if (due_schedule(db, &s, "c", "x", 1, &o) < 0)
		fail_msg("schedule: %s", due_error_last());
	return s.id;
}

/*
** End task id as `st` the way no store path does: without its release
** (what a Galera abort inside a finish's text could leave, the window
** docs/internals/mysql.md describes), from the test's own connection.
*/
static void end_bare(MYSQL *m, due_id id, const char *st)
{
	char sql[300];

	snprintf(sql, sizeof(sql),
		 "UPDATE due_task SET state = '%s', lease_owner = NULL,"
		 " lease_until = NULL WHERE id = %lld",
		 st, (long long)id);
	q(m, sql);
}

/* One text value of sql (the test's own connection). */
static void q_text(MYSQL *m, const char *sql, char *out, size_t n)
{
	if (mysql_query(m, sql) != 0)
		fail_msg("%s: %s", sql, mysql_error(m));
	MYSQL_RES *r = mysql_store_result(m);
	MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
	snprintf(out, n, "%s", row && row[0] ? row[0] : "(none)");
	mysql_free_result(r);
}

/*
** A child as "after_left held state pending-edges", and with `times` its
** updated_at and due_at after that.
*/
static void child_row(MYSQL *m, due_id id, bool times, char *out, size_t n)
{
	char sql[400];

	snprintf(sql, sizeof(sql),
		 "SELECT CONCAT(after_left, ' ', due_at = 253402300799999999,"
		 " ' ', state, ' ', (SELECT COUNT(*) FROM due_after WHERE"
		 " child = %lld AND pending)%s) FROM due_task WHERE id = %lld",
		 (long long)id, times ? ", ' ', updated_at, ' ', due_at" : "",
		 (long long)id);
	q_text(m, sql, out, n);
}

/*
** The run-after sweep (issue 38, Galera's safety net; on by itself only
** on Galera, turned on here on one server): parents ended without their
** release (end_bare) leave their children held; a reclaim pass then
** releases them through release(): a DONE parent's child becomes due
** (its own time from then), a fan-in child counts one parent down and
** stays held on the other, a DEAD parent's child is CANCELLED naming it.
** Exactly once: a second pass changes nothing (not even updated_at), and
** the fan-in child's last parent, completed the normal way, releases it
** (after_left 0, never below).  Without the sweep a pass leaves them held.
*/
static void test_after_sweep(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_reclaimed rr;
	char a[200], b2[200];
	due_time now;

	due_id p1 = add(db, "p", HOUR_US, 5), p2 = add(db, "p", HOUR_US, 5);
	due_id pd = add(db, "p", HOUR_US, 5), both[2] = {p1, p2};
	int32_t a1 = claimed_now(db, p1);
	(void)claimed_now(db, pd);
	due_id c1 = child_of(db, &p1, 1), c2 = child_of(db, both, 2);
	due_id cd = child_of(db, &pd, 1);
	end_bare(m, p1, "DONE");
	end_bare(m, pd, "DEAD");
	assert_int_equal(
	    due_complete(db, &(due_complete_outcome){0}, p1, a1, "r", 1),
	    0); /* stale: p1 is DONE, nothing released */

	/* without the sweep (a single server): still held */
	assert_int_equal(due_reclaim_expired(db, &rr), 0);
	child_row(m, c1, false, a, sizeof(a));
	assert_string_equal(a, "1 1 SCHEDULED 1");
	child_row(m, c2, false, a, sizeof(a));
	assert_string_equal(a, "2 1 SCHEDULED 2");
	child_row(m, cd, false, a, sizeof(a));
	assert_string_equal(a, "1 1 SCHEDULED 1");

	due_upcoming *u;
	assert_int_equal(due_now(db, &now), 0);
	assert_int_equal(
	    due_upcoming_get(db, &u, NULL, 0, false, now + HOUR_US, 10), 0);
	assert_int_equal(u->next_expiry, 0); /* no lease: nothing to do */
	due_upcoming_free(u);
	((due_store *)due__db_store(db))->after_sweep = true;
	/* the refill says "reclaim now" (a worker with the wheel reclaims
	   only then) */
	assert_int_equal(
	    due_upcoming_get(db, &u, NULL, 0, false, now + HOUR_US, 10), 0);
	assert_true(u->next_expiry > 0 && u->next_expiry < u->now);
	due_upcoming_free(u);
	assert_int_equal(due_reclaim_expired(db, &rr), 0);
	child_row(m, c1, false, a, sizeof(a));
	assert_string_equal(a, "0 0 SCHEDULED 0");
	child_row(m, c2, false, a, sizeof(a));
	assert_string_equal(a, "1 1 SCHEDULED 1");
	child_row(m, cd, false, a, sizeof(a));
	assert_string_equal(a, "0 1 CANCELLED 0"); /* due_at kept */
	due_task *t = get(db, c1);
	assert_true(t->due_at >= now + HOUR_US &&
		    t->due_at < now + 2 * HOUR_US);
	due_task_free(t);
	t = get(db, cd);
	char want[80];
	snprintf(want, sizeof(want), "parent task %lld ended DEAD",
		 (long long)pd);
	assert_string_equal(t->last_error, want);
	due_task_free(t);

	/* a second pass: nothing, not even a time */
	child_row(m, c1, true, a, sizeof(a));
	child_row(m, c2, true, b2, sizeof(b2));
	assert_int_equal(due_reclaim_expired(db, &rr), 0);
	char a2[200], b3[200];
	child_row(m, c1, true, a2, sizeof(a2));
	child_row(m, c2, true, b3, sizeof(b3));
	assert_string_equal(a, a2);
	assert_string_equal(b2, b3);

	/* c2's other parent ends the normal way: released once */
	due_complete_outcome cc;
	assert_int_equal(due_complete(db, &cc, p2, claimed_now(db, p2), "r", 1),
			 0);
	assert_int_equal(cc, DUE_COMPLETE_DONE);
	child_row(m, c2, false, a, sizeof(a));
	assert_string_equal(a, "0 0 SCHEDULED 0");
	assert_int_equal(due_reclaim_expired(db, &rr), 0);
	child_row(m, c2, false, a, sizeof(a));
	assert_string_equal(a, "0 0 SCHEDULED 0");
	mysql_close(m);
	due_close(db);
}

/*
** Galera's texts (mysql_conn.c GALERA_BEGIN, GALERA_CHECK, GALERA_COMMIT)
** on one server, the handle told it is on Galera: every transaction in
** savepoints, every text inside one ending with the savepoint check, and
** the transitions still answer as without (the check's own answers do
** not count as the statement's: a fenced write that matched its row
** says so, a `later` that moved says moved, one that did not says not),
** a run-after child released by its parent's completion and cancelled by
** a DEAD one.  The server's general log shows the checks were sent.
*/
static void test_galera_texts(void **state)
{
	(void)state;
	due_db *db = open_db();
	MYSQL *m = own_conn();
	due_submitted s;
	due_complete_outcome cc;
	due_fail_outcome fo;
	due_cancel_outcome co;
	due_time now;

	((due_store *)due__db_store(db))->galera = true;
	q(m, "SET GLOBAL log_output = 'TABLE'");
	q(m, "TRUNCATE mysql.general_log");
	q(m, "SET GLOBAL general_log = 1");
	assert_int_equal(due_now(db, &now), 0);
	due_id p = add(db, "p", HOUR_US, 1), pd = add(db, "p", HOUR_US, 1);
	int32_t ap = claimed_now(db, p), ad = claimed_now(db, pd);
	due_id c = child_of(db, &p, 1), cd = child_of(db, &pd, 1);
	assert_int_equal(due_complete(db, &cc, p, ap, "r", 1), 0);
	assert_int_equal(cc, DUE_COMPLETE_DONE);
	assert_int_equal(due_fail(db, &fo, pd, ad, "x"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	q(m, "SET GLOBAL general_log = 0");
	char a[200];
	child_row(m, c, false, a, sizeof(a));
	assert_string_equal(a, "0 0 SCHEDULED 0");
	child_row(m, cd, false, a, sizeof(a));
	assert_string_equal(a, "0 1 CANCELLED 0");
	/* keyed moves: the answer is the UPDATE's, not the check's */
	s = key_add(db, DUE_ON_KEY_KEEP, now + HOUR_US, 0, "a");
	assert_false(s.existed);
	due_submitted k =
	    key_add(db, DUE_ON_KEY_LATER, now + 2 * HOUR_US, 0, "b");
	assert_true(k.existed && k.moved && k.id == s.id);
	k = key_add(db, DUE_ON_KEY_LATER, now + HOUR_US, 0, "c");
	assert_true(k.existed && !k.moved && k.id == s.id);
	assert_int_equal(due_cancel(db, &co, s.id), 0);
	assert_int_equal(co, DUE_CANCEL_CANCELLED);
	/* a lease taken back (reclaim_tx's texts end with "; ": the check
	   once made that an empty statement, and no lease came back) */
	due_id e = add(db, "e", 0, 5);
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 10, 1000), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, e);
	due_task_list_free(l);
	due_reclaimed rr = {0};
	for (int64_t t0 = mono_ms(); rr.rescheduled == 0;) {
		assert_int_equal(due_reclaim_expired(db, &rr), 0);
		assert_true(mono_ms() - t0 < HANG_MS);
	}
	assert_int_equal(rr.rescheduled, 1);
	/* a kind's settings (their COMMIT once came before the check: 1305) */
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	ks.paused = 1;
	assert_int_equal(due_kind_set(db, "e", &ks), 0);
	/* the texts went with their checks, and nothing failed on them */
	assert_true(q_int(m, "SELECT COUNT(*) FROM mysql.general_log WHERE"
			     " argument LIKE '%RELEASE SAVEPOINT due_tx;"
			     " SAVEPOINT due_tx'") >= 3);
	q(m, "TRUNCATE mysql.general_log");
	q(m, "SET GLOBAL log_output = 'FILE'");
	mysql_close(m);
	due_close(db);
}

/* ------------------------------------------------------------------ */
/* Bounded waits (issue 35)                                            */
/* ------------------------------------------------------------------ */

/* A handle on u (NULL: this test's store) whose waits end within us. */
static due_db *open_bounded(const char *u, int64_t us)
{
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;

	oo.timeout_us = us;
	if (due_open(&db, u ? u : url, &oo) < 0)
		fail_msg("open %s: %s", u ? u : url, due_error_last());
	return db;
}

/* The host:port part [*h, *end) of url (after user@). */
static void url_authority(const char **h, const char **end)
{
	const char *a = strstr(url, "//") + 2, *slash = strchr(a, '/');
	const char *at = memchr(a, '@', (size_t)(slash - a));

	*h = at ? at + 1 : a;
	*end = slash;
}

/* url with its host:port replaced by `hosts` (a list, or one). */
static void url_at(char *out, size_t n, const char *hosts)
{
	const char *h, *end;

	url_authority(&h, &end);
	snprintf(out, n, "%.*s%s%s", (int)(h - url), url, hosts, end);
}

/* The server's host and port from url (the fixture's URL is TCP). */
static void url_server(char *host, size_t n, unsigned *port)
{
	const char *h, *end, *colon;

	url_authority(&h, &end);
	colon = memchr(h, ':', (size_t)(end - h));
	snprintf(host, n, "%.*s", (int)((colon ? colon : end) - h), h);
	*port = colon ? (unsigned)strtoul(colon + 1, NULL, 10) : 3306;
}

/*
** A socket listening on 127.0.0.1 at a free port, into *port, that never
** accepts: a connection completes into its backlog and is never greeted
** (a frozen server).
*/
static int listener(unsigned *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/*
** A TCP proxy on loopback to the test's server, in a thread, that the
** test freezes (a partition: new connections wait in the kernel's
** backlog, what either side sends stays in the kernel's buffers) and
** thaws.  Each accepted connection is a pair of sockets; a pair whose
** one side ends is closed whole.
*/
#define STALL_PAIRS 16
typedef struct stall {
	int lfd, fd[2 * STALL_PAIRS]; /* fd[i] and fd[i ^ 1] are a pair */
	unsigned port;
	struct addrinfo *to;
	atomic_bool frozen, stop;
	pthread_t th;
} stall;

static void stall_close_pair(stall *p, int i)
{
	close(p->fd[i]);
	close(p->fd[i ^ 1]);
	p->fd[i] = p->fd[i ^ 1] = -1;
}

static void stall_accept(stall *p)
{
	int c = accept(p->lfd, NULL, NULL), srv;

	if (c < 0)
		return;
	srv = socket(p->to->ai_family, SOCK_STREAM, 0);
	for (int i = 0; i < 2 * STALL_PAIRS; i += 2)
		if (p->fd[i] < 0 && srv >= 0 &&
		    connect(srv, p->to->ai_addr, p->to->ai_addrlen) == 0) {
			p->fd[i] = c;
			p->fd[i + 1] = srv;
			return;
		}
	close(c);
	if (srv >= 0)
		close(srv);
}

/* Forward what fd[i] has to its pair; false when the pair ended. */
static bool stall_pump(stall *p, int i)
{
	char buf[16384];
	ssize_t r = read(p->fd[i], buf, sizeof(buf)), w = 0;

	while (r > 0 && w < r) {
		ssize_t k = write(p->fd[i ^ 1], buf + w, (size_t)(r - w));
		if (k <= 0)
			return false;
		w += k;
	}
	return r > 0;
}

static void *stall_run(void *arg)
{
	stall *p = arg;
	struct pollfd f[1 + 2 * STALL_PAIRS];

	while (!atomic_load(&p->stop)) {
		if (atomic_load(&p->frozen)) {
			struct timespec ts = {0, 5000000};
			nanosleep(&ts, NULL);
			continue;
		}
		f[0] = (struct pollfd){p->lfd, POLLIN, 0};
		for (int i = 0; i < 2 * STALL_PAIRS; i++)
			f[1 + i] = (struct pollfd){p->fd[i], POLLIN, 0};
		if (poll(f, 1 + 2 * STALL_PAIRS, 20) <= 0)
			continue;
		for (int i = 0; i < 2 * STALL_PAIRS; i++)
			if (p->fd[i] >= 0 && f[1 + i].revents &&
			    !stall_pump(p, i))
				stall_close_pair(p, i);
		if (f[0].revents)
			stall_accept(p);
	}
	return NULL;
}

static void stall_start(stall *p)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
	char host[256], port[16];
	unsigned srv;

	url_server(host, sizeof(host), &srv);
	snprintf(port, sizeof(port), "%u", srv);
	assert_int_equal(getaddrinfo(host, port, &hints, &p->to), 0);
	for (int i = 0; i < 2 * STALL_PAIRS; i++)
		p->fd[i] = -1;
	atomic_init(&p->frozen, false);
	atomic_init(&p->stop, false);
	p->lfd = listener(&p->port);
	assert_int_equal(pthread_create(&p->th, NULL, stall_run, p), 0);
}

static void stall_stop(stall *p)
{
	atomic_store(&p->stop, true);
	assert_int_equal(pthread_join(p->th, NULL), 0);
	for (int i = 0; i < 2 * STALL_PAIRS; i += 2)
		if (p->fd[i] >= 0)
			stall_close_pair(p, i);
	close(p->lfd);
	freeaddrinfo(p->to);
}

/* The last error is DUE_ESTORE "no answer from the store at WHERE in DUR". */
static void assert_no_answer(const char *where, const char *dur)
{
	char want[700];

	snprintf(want, sizeof(want), "no answer from the store at %s in %s",
		 where, dur);
	assert_int_equal(due_error_last_code(), DUE_ESTORE);
	assert_string_equal(due_error_last(), want);
}

/*
** A row lock of another session (BEGIN; SELECT ... FOR UPDATE, any admin
** query): a renewal of that task waits for the session's lock wait (1 s
** under a 2 s bound), not the server's default 10 s six times over, and
** fails DUE_EBUSY naming the wait; the handle's connection stays good.
** Then LOCK TABLES due_task WRITE (a metadata lock, whose wait was a
** year): the same.
*/
static void test_lock_wait_bounded(void **state)
{
	(void)state;
	due_db *db = open_bounded(NULL, 2000000);
	MYSQL *m = own_conn();
	due_extend_outcome out;
	due_task *t = NULL;
	char sql[160];
	int64_t t0;
	due_id id = add(db, "k", 0, 5);
	int32_t a = claim_one(db, id, LONG_LEASE);

	q(m, "START TRANSACTION");
	snprintf(sql, sizeof(sql),
		 "SELECT id FROM due_task WHERE id = %lld FOR UPDATE",
		 (long long)id);
	q_drop(m, sql);
	t0 = mono_ms();
	assert_int_equal(due_extend(db, &out, id, a, LONG_LEASE), DUE_EBUSY);
	assert_true(mono_ms() - t0 < 2000 + SLACK_MS);
	assert_non_null(strstr(due_error_last(), "waited 1 s for a lock"));
	q(m, "ROLLBACK");
	assert_int_equal(due_extend(db, &out, id, a, LONG_LEASE), 0);
	assert_int_equal(out, DUE_EXTEND_OK);

	q(m, "LOCK TABLES due_task WRITE");
	t0 = mono_ms();
	assert_int_equal(due_get(db, &t, id), DUE_EBUSY);
	assert_true(mono_ms() - t0 < 2000 + SLACK_MS);
	assert_non_null(strstr(due_error_last(), "(lock wait timeout, 1205)"));
	q(m, "UNLOCK TABLES");
	t = get(db, id);
	assert_int_equal(t->state, DUE_CLAIMED);
	due_task_free(t);
	mysql_close(m);
	due_close(db);
}

/*
** The path freezes under an open handle (a partition, a SIGSTOPped
** server): each call fails within the bound with "no answer", a claim's
** transaction is not left believed open, and once the path thaws the
** next call reconnects on its own and works.  A new handle opened on the
** frozen path fails the same way, a sub-second bound to the millisecond.
*/
static void test_frozen_path(void **state)
{
	(void)state;
	stall p;
	char u[600], where[64];
	due_db *db, *db2 = NULL;
	due_task *t = NULL;
	due_task_list *l = NULL;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	int64_t t0;
	due_id id;

	stall_start(&p);
	snprintf(where, sizeof(where), "127.0.0.1:%u", p.port);
	url_at(u, sizeof(u), where);
	db = open_bounded(u, 1000000);
	id = add(db, "k", 0, 5);

	atomic_store(&p.frozen, true);
	t0 = mono_ms();
	assert_int_equal(due_get(db, &t, id), DUE_ESTORE);
	assert_true(mono_ms() - t0 < 1000 + SLACK_MS);
	assert_no_answer(where, "1 s");
	t0 = mono_ms(); /* reconnects: the handshake gets no answer either */
	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 1, LONG_LEASE),
			 DUE_ESTORE);
	assert_true(mono_ms() - t0 < 1000 + SLACK_MS);
	assert_no_answer(where, "1 s");
	oo.timeout_us = 300000;
	t0 = mono_ms();
	assert_int_equal(due_open(&db2, u, &oo), DUE_ESTORE);
	assert_true(mono_ms() - t0 < 300 + SLACK_MS);
	assert_no_answer(where, "300ms");
	due_close(db2);

	atomic_store(&p.frozen, false);
	t = get(db, id); /* reconnected */
	assert_int_equal(t->state, DUE_SCHEDULED);
	due_task_free(t);
	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 1, LONG_LEASE), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, id);
	due_task_list_free(l);
	due_close(db);
	stall_stop(&p);
}

/*
** Hosts that accept a connection and never greet (frozen nodes): a list
** whose first host is one still opens, on the second host, within the
** bound (the first got its share, half of it); a list of two such hosts
** fails within the bound, naming both.
*/
static void test_silent_hosts(void **state)
{
	(void)state;
	char host[256], hosts[600], u[1200];
	unsigned srv, p1, p2;
	int l1 = listener(&p1), l2 = listener(&p2);
	due_db *db = NULL;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	int64_t t0;

	url_server(host, sizeof(host), &srv);
	snprintf(hosts, sizeof(hosts), "127.0.0.1:%u,%s:%u", p1, host, srv);
	url_at(u, sizeof(u), hosts);
	t0 = mono_ms();
	db = open_bounded(u, 2000000);
	assert_true(mono_ms() - t0 < 2000 + SLACK_MS);
	add(db, "k", 0, 1);
	due_close(db);

	snprintf(hosts, sizeof(hosts), "127.0.0.1:%u,127.0.0.1:%u", p1, p2);
	url_at(u, sizeof(u), hosts);
	oo.timeout_us = 2000000;
	t0 = mono_ms();
	assert_int_equal(due_open(&db, u, &oo), DUE_ESTORE);
	assert_true(mono_ms() - t0 < 2000 + SLACK_MS);
	assert_no_answer(hosts, "2 s");
	due_close(db);
	close(l1);
	close(l2);
}
#endif

int main(void)
{
#ifdef DUE_WITH_MYSQL
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_tx_submit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_completion_hook, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_completion_hook_slow, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_explain_picks, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_upgrade_from_4, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_explain_reads, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_key_reusable, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_key_group_no_pad, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_init_converts_keys, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_tx_clock_zone, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_tx_key_repeatable_read, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_tx_charset, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tx_on_key, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_on_key_race, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_listen, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_upgrade_from_10, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_after_race, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_after_children, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_after_chain_cancel, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_sql_after, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_after_on_key_later_held, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_after_sweep, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_galera_texts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_after_on_key_held, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_deadlock_retried, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_killed_connection, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_lock_wait_bounded, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_frozen_path, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_silent_hosts, setup, teardown),
	    cmocka_unit_test(test_version_check),
	    cmocka_unit_test(test_url),
	    cmocka_unit_test(test_url_hosts),
	};
	if (tu_select_backend("mysql") != 0)
		return tu_backend_check();
	/* DUE_TEST_FILTER=test_after* runs the tests that match */
	if (getenv("DUE_TEST_FILTER"))
		cmocka_set_test_filter(getenv("DUE_TEST_FILTER"));
	return cmocka_run_group_tests_name("mysql store", tests, NULL, NULL);
#else
	printf("NOTE: mysql store suite not run: this build has no MySQL\n");
	return 0;
#endif
}
