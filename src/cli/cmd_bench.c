/*
** cmd_bench.c - `due bench`: measure a store with in-process no-op
** handlers, the way `river bench` or `redis-benchmark` do.
**
** Workloads (each in a fresh scratch store beside the one named by --db:
** the user's tasks are never touched):
**   enqueue   n tasks due now, ~100-byte payload: one commit each, then
**             in batches of --batch
**   cycle     one thread: claim 1 -> complete 1, through the C API
**   drain     n due tasks, C no-op handler (or --exec CMD, or a pipe
**             handler with --pipe CMD), --concurrency;
**             tasks/s from worker start to last completion; every task
**             must run exactly once (duplicates are reported; with --exec
**             or --pipe read from the store afterwards: DONE at attempt 1);
**             with --pending N the store first holds N tasks due in a
**             day (filled in batches, not timed): the drain among them
**   soak       --rate R tasks/s due now for --duration D, submitted in
**             small batches paced by the monotonic clock, while one
**             in-process worker (--concurrency, retention --retain) runs
**             them: throughput and lateness of the first and the last
**             minute, the store's size (due_store_bytes) at 60 s and at
**             the end, what retention pruned.  One JSON object.  Not part
**             of "all".
**   lateness  n tasks spread over --spread, --workers workers waiting:
**             claim - due percentiles and early claims; with --exec CMD
**             or --pipe CMD the same through a command or pipe handler
**             (2 workers x 2 slots, 500 tasks due at random: the load
**             at which issue 36 found commands claimed late)
**   idle      --workers workers, no tasks, --idle seconds: store queries/s
**             (due's own count; on Redis also the server's INFO
**             commandstats, on MySQL/MariaDB SHOW GLOBAL STATUS Questions
**             and Com_*, over the same window)
**   memory    Redis only: INFO memory used_memory before and after --n
**             (default 100,000) pending tasks with a 16-byte payload, due in
**             an hour: bytes per pending task.  Not part of "all".
**   depth     claim latency (claim 1 -> complete 1, through the C API) with
**             1,000 tasks pending over 10 priorities, then with --n
**             (default 1,000,000): all due ("due"), and all but 1,000 due
**             in an hour, the due ones at the highest priority number
**             ("future", the worst case for a claim that scans the
**             priorities in order).  Not part of "all": it fills a big
**             store.
** enqueue, cycle and drain also say cpu_us_per_task: the user + system CPU
** of this process over the measured phase (getrusage), per task, the
** worker threads' included; bench/floor reports the same for bare SQL, so
** their ratio is the runtime's overhead whatever the disk (issue 18).
** On SQLite they say the store work of the same phase per task too
** (statements_per_task, vm_steps_per_task, rows_written_per_task, from
** due_store_work_read: the process's counters, every connection's), as
** bench/floor does for bare SQL.
** Figures are printed, never judged: a benchmark has no pass/fail.
**
** Scratch stores are `due verify`'s (verify_store.c): a file beside yours,
** a schema, a fresh Redis ?prefix= whose keys are deleted afterwards, a
** fresh MySQL/MariaDB database dropped afterwards; --keep keeps them.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <jansson.h>
#ifdef DUE_WITH_PG
#include <libpq-fe.h>
#endif
#ifdef DUE_WITH_REDIS
#include <hiredis/hiredis.h>
#endif
#ifdef DUE_WITH_MYSQL
#include <mysql.h>
#endif

#include "cli/cli.h"
#include "cli/verify.h"

static const char usage[] =
    "usage: due bench [--workload "
    "enqueue|cycle|drain|lateness|idle|depth|memory|soak|all]\n"
    "                 [--n N] [--concurrency C] [--workers W] [--batch B]\n"
    "                 [--pending N] [--rate R] [--duration DUR] "
    "[--retain DUR]\n"
    "                 [--exec CMD | --pipe CMD] [--poll DUR] [--spread DUR]\n"
    "                 [--idle DUR] [--keep] [--json] [--db URL]\n"
    "\n"
    "Measure the store named by --db with in-process no-op handlers.  Each\n"
    "workload runs in a scratch store of its own (a new SQLite file beside\n"
    "yours, a new PostgreSQL schema, a new Redis ?prefix= or a new MySQL\n"
    "database) and never touches your tasks.\n"
    "  --n N            tasks per workload (default 20000; lateness 2000,\n"
    "                   with --exec or --pipe 500; depth 1000000)\n"
    "  --concurrency C  handler slots per worker for drain and soak\n"
    "                   (default 4), and lateness with --exec or --pipe\n"
    "                   (default 2)\n"
    "  --workers W      worker instances for drain/lateness/idle (default "
    "1/4/4;\n"
    "                   lateness with --exec or --pipe 2)\n"
    "  --batch B        enqueue batch size (default 1000)\n"
    "  --pending N      drain: first fill the store with N tasks due in a\n"
    "                   day (not timed), then drain --n due tasks among\n"
    "                   them (default 0)\n"
    "  --rate R         soak: tasks submitted per second, due now\n"
    "                   (default 1000)\n"
    "  --duration DUR   soak: how long to submit (default 3m)\n"
    "  --retain DUR     soak: the worker's retention, as `due work\n"
    "                   --retain` (default 7d; 0 keeps everything)\n"
    "  --pg-autovacuum default|due\n"
    "                   soak on PostgreSQL: the tables' autovacuum and\n"
    "                   fillfactor as `due init` sets them (due, the\n"
    "                   default) or PostgreSQL's own (default): the\n"
    "                   before/after of those settings\n"
    "  --exec CMD       drain or lateness with a command handler instead\n"
    "                   of the C no-op (lateness: tasks due at random)\n"
    "  --pipe CMD       drain or lateness with a pipe handler (`due work\n"
    "                   --pipe`): CMD started once per slot, one JSON line\n"
    "                   per task\n"
    "  --poll DUR       with --no-wheel: the poll interval (default 50ms);\n"
    "                   with the wheel: the safety poll (default 10s)\n"
    "  --no-wheel       discover due tasks by polling only\n"
    "  --inline         run handlers in the claiming thread, one task at a\n"
    "                   time (drain: C inline workers)\n"
    "  --spread DUR     lateness: tasks due over this span (default 5s)\n"
    "  --idle DUR       idle: how long to watch (default 10s)\n"
    "  --keep           keep the scratch stores (default: drop them)\n"
    "  --json           one JSON object per workload, one per line\n";

typedef struct bopts {
	const char *workload;
	long n, concurrency, workers, batch;
	const char *exec;
	int64_t poll_us, spread_us, idle_us;
	bool json;
	bool n_set, workers_set, no_wheel, poll_set, inline_mode;
	const char *pipe; /* --pipe CMD (drain, lateness) */
	bool concurrency_set;
	bool keep;
	long pending;	     /* drain: tasks due in a day filled first */
	long rate;	     /* soak: tasks/s */
	int64_t duration_us; /* soak */
	int64_t retain_us;   /* soak: due_worker_opts.retain_us */
	bool pending_set, soak_set;
	bool pg_autovacuum_default; /* soak: PostgreSQL's own settings */
} bopts;

typedef struct bres {
	const char *workload;
	const char *variant;
	long n, concurrency;
	double seconds, tasks_per_s;
	double p50, p90, p99, max;
	long early, duplicates, missing;
	long claim_queries; /* drain: store transactions that claimed */
	double queries_per_s, cpu_s;
	/*
	** enqueue, cycle, drain: user + system CPU of this process over the
	** measured phase only (getrusage), per task; 0: not measured.  The
	** worker threads' CPU is in it; a command or pipe handler's and the
	** store server's are not (issue 18's per-task budget).
	*/
	double cpu_us_per_task;
	/*
	** The same phase's store work per task (due_store_work_read: every
	** connection of this process, the workers' included): statements,
	** SQLite VM steps, rows written.  has_work: the store counted any
	** (SQLite only, for now).
	*/
	double stmts_per_task, steps_per_task, rows_per_task;
	bool has_work;
	/* PostgreSQL: the server's WAL bytes over the phase, per task; 0:
	   not measured */
	double wal_per_task;
	/*
	** PostgreSQL with pg_stat_statements loaded: the server's execution
	** time of this database's statements over the phase, per task (the
	** sum over every session; a COMMIT's includes its WAL flush); 0:
	** not measured.
	*/
	double server_us_per_task;
	/* idle on Redis/MySQL: what the server counted over the window */
	long long server_queries;
	json_t *server_detail; /* command or Com_* -> count, or NULL */
	double bytes_per_task; /* memory */
	long long bytes_before, bytes_after;
	bool has_late, has_idle, has_check;
	json_t *extra; /* more keys (drain --pending), or NULL; caller frees */
} bres;

static void report(const bopts *o, const bres *r)
{
	if (o->json) {
		json_t *j = json_pack(
		    "{s:s,s:s,s:I,s:I,s:f,s:f}", "workload", r->workload,
		    "variant", r->variant, "n", (json_int_t)r->n, "concurrency",
		    (json_int_t)r->concurrency, "seconds", r->seconds,
		    "tasks_per_s", r->tasks_per_s);
		if (r->cpu_us_per_task > 0)
			json_object_set_new(j, "cpu_us_per_task",
					    json_real(r->cpu_us_per_task));
		if (r->has_work) {
			json_object_set_new(j, "statements_per_task",
					    json_real(r->stmts_per_task));
			json_object_set_new(j, "vm_steps_per_task",
					    json_real(r->steps_per_task));
			json_object_set_new(j, "rows_written_per_task",
					    json_real(r->rows_per_task));
		}
		if (r->wal_per_task > 0)
			json_object_set_new(j, "wal_bytes_per_task",
					    json_real(r->wal_per_task));
		if (r->server_us_per_task > 0)
			json_object_set_new(j, "server_us_per_task",
					    json_real(r->server_us_per_task));
		if (r->has_late) {
			json_object_set_new(j, "p50_ms", json_real(r->p50));
			json_object_set_new(j, "p90_ms", json_real(r->p90));
			json_object_set_new(j, "p99_ms", json_real(r->p99));
			json_object_set_new(j, "max_ms", json_real(r->max));
			json_object_set_new(j, "early", json_integer(r->early));
		}
		if (r->has_idle) {
			json_object_set_new(j, "queries_per_s",
					    json_real(r->queries_per_s));
			json_object_set_new(j, "cpu_s", json_real(r->cpu_s));
		}
		if (r->has_idle && r->server_detail) {
			json_object_set_new(j, "store_queries",
					    json_integer(r->server_queries));
			json_object_set_new(j, "window_s",
					    json_real(r->seconds));
			json_object_set(j, "store_detail", r->server_detail);
		}
		if (r->bytes_after) {
			json_object_set_new(j, "bytes_before",
					    json_integer(r->bytes_before));
			json_object_set_new(j, "bytes_after",
					    json_integer(r->bytes_after));
			json_object_set_new(j, "bytes_per_task",
					    json_real(r->bytes_per_task));
		}
		if (r->has_check) {
			json_object_set_new(j, "duplicates",
					    json_integer(r->duplicates));
			json_object_set_new(j, "missing",
					    json_integer(r->missing));
		}
		if (r->claim_queries > 0) {
			json_object_set_new(j, "claim_queries",
					    json_integer(r->claim_queries));
			json_object_set_new(
			    j, "tasks_per_claim",
			    json_real((double)r->n / (double)r->claim_queries));
		}
		if (r->extra)
			json_object_update(j, r->extra);
		char *txt = json_dumps(j, JSON_COMPACT);
		if (txt)
			puts(txt);
		free(txt);
		json_decref(j);
	} else {
		printf("%-9s %-12s n=%-6ld c=%-3ld %8.2fs %10.0f tasks/s",
		       r->workload, r->variant, r->n, r->concurrency,
		       r->seconds, r->tasks_per_s);
		if (r->cpu_us_per_task > 0)
			printf("  cpu=%.1fus/task", r->cpu_us_per_task);
		if (r->has_work)
			printf("  stmts=%.1f vm_steps=%.0f rows=%.1f per task",
			       r->stmts_per_task, r->steps_per_task,
			       r->rows_per_task);
		if (r->wal_per_task > 0)
			printf("  wal=%.0fB/task", r->wal_per_task);
		if (r->server_us_per_task > 0)
			printf("  server=%.1fus/task", r->server_us_per_task);
		if (r->has_late)
			printf("  p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms "
			       "early=%ld",
			       r->p50, r->p90, r->p99, r->max, r->early);
		if (r->has_idle)
			printf("  queries/s=%.2f per worker  cpu=%.2fs",
			       r->queries_per_s, r->cpu_s);
		if (r->has_idle && r->server_detail)
			printf("  server: %.3f commands/s per worker",
			       (double)r->server_queries / r->seconds /
				   (double)r->concurrency);
		if (r->bytes_after)
			printf("  used_memory %lld -> %lld: %.0f bytes/task",
			       r->bytes_before, r->bytes_after,
			       r->bytes_per_task);
		if (r->has_check)
			printf("  duplicates=%ld missing=%ld", r->duplicates,
			       r->missing);
		if (r->claim_queries > 0)
			printf("  %.1f tasks/claim",
			       (double)r->n / (double)r->claim_queries);
		const char *k;
		json_t *val;
		json_object_foreach(r->extra, k, val)
		{
			char *t = json_dumps(val, JSON_ENCODE_ANY |
						      JSON_REAL_PRECISION(6));
			printf("  %s=%s", k, t ? t : "?");
			free(t);
		}
		printf("\n");
	}
	fflush(stdout);
}

/* ------------------------------------------------------------------ */
/* Redis and MySQL/MariaDB: the server's own counters                 */
/* ------------------------------------------------------------------ */

static bool is_redis(const char *url) { return !strncmp(url, "redis://", 8); }

/*
** v_fresh for a benchmark: the scratch store, opened with the options of
** the store named by --db.  verify's SQLite scratch URL is the bare file
** ("sqlite:DIR/due.db"), so `--db 'sqlite:x.db?sync=normal'` measured a
** scratch store at the default sync=full: an fdatasync per commit, the
** floor's figures at sync=normal beside it.  For SQLite the query of --db
** is carried over and the store opened again with it (the workers that
** a workload starts read v->url too).  0 or -1 after a message.
*/
static int bench_fresh(vctx *v, const char *name)
{
	const char *q = strchr(v->base_url, '?');
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	size_t len;

	if (v_fresh(v, name) < 0)
		return -1;
	if (v->backend != V_SQLITE || !q || strchr(v->url, '?'))
		return 0;
	len = strlen(v->url);
	if (len + strlen(q) >= sizeof(v->url)) {
		fprintf(stderr, "due bench: scratch store URL too long\n");
		return -1;
	}
	memcpy(v->url + len, q, strlen(q) + 1);
	due_close(v->db);
	v->db = NULL;
	oo.create = true;
	if (due_open(&v->db, v->url, &oo) < 0) {
		fprintf(stderr, "due bench: scratch store: %s\n",
			due_error_last());
		return -1;
	}
	return 0;
}

static bool is_mysql(const char *url)
{
	return !strncmp(url, "mysql://", 8) || !strncmp(url, "mariadb://", 10);
}

/* scheme://[user[:pass]@]host[:port][/path][?query], decoded loosely:
   enough for the test servers' URLs (no percent-escapes). */
typedef struct saddr {
	char user[128], pass[128], host[256], path[128], sock[512];
	int port;
} saddr;

#if defined(DUE_WITH_REDIS) || defined(DUE_WITH_MYSQL)
static void saddr_parse(saddr *a, const char *url, int default_port)
{
	const char *p = strstr(url, "://"), *q, *at;
	memset(a, 0, sizeof(*a));
	snprintf(a->host, sizeof(a->host), "127.0.0.1");
	a->port = default_port;
	p = p ? p + 3 : url;
	const char *end = p + strcspn(p, "/?");
	if ((at = memchr(p, '@', (size_t)(end - p)))) {
		const char *c = memchr(p, ':', (size_t)(at - p));
		snprintf(a->user, sizeof(a->user), "%.*s",
			 (int)((c ? c : at) - p), p);
		if (c)
			snprintf(a->pass, sizeof(a->pass), "%.*s",
				 (int)(at - c - 1), c + 1);
		p = at + 1;
	}
	size_t hl = strcspn(p, ":/?");
	if (hl)
		snprintf(a->host, sizeof(a->host), "%.*s", (int)hl, p);
	p += hl;
	if (*p == ':')
		a->port = (int)strtol(p + 1, NULL, 10);
	p += strcspn(p, "/?");
	if (*p == '/')
		snprintf(a->path, sizeof(a->path), "%.*s",
			 (int)strcspn(p + 1, "?"), p + 1);
	if ((q = strstr(p, "socket=")))
		snprintf(a->sock, sizeof(a->sock), "%.*s",
			 (int)strcspn(q + 7, "&"), q + 7);
}
#endif

/* A plain connection to the server behind a Redis or MySQL URL. */
typedef struct srv {
#ifdef DUE_WITH_REDIS
	redisContext *rc;
#endif
#ifdef DUE_WITH_MYSQL
	MYSQL *my;
#endif
	int dummy;
} srv;

static int srv_connect(srv *s, const char *url)
{
	saddr a;
	memset(s, 0, sizeof(*s));
	memset(&a, 0, sizeof(a));
#ifdef DUE_WITH_REDIS
	if (is_redis(url)) {
		struct timeval tv = {5, 0};
		saddr_parse(&a, url, 6379);
		s->rc = redisConnectWithTimeout(a.host, a.port, tv);
		if (!s->rc || s->rc->err) {
			fprintf(stderr, "due bench: redis %s:%d: %s\n", a.host,
				a.port,
				s->rc ? s->rc->errstr : "out of memory");
			return -1;
		}
		redisReply *r = NULL;
		if (a.pass[0])
			r = a.user[0] ? redisCommand(s->rc, "AUTH %s %s",
						     a.user, a.pass)
				      : redisCommand(s->rc, "AUTH %s", a.pass);
		if (r && r->type == REDIS_REPLY_ERROR)
			fprintf(stderr, "due bench: redis AUTH: %s\n", r->str);
		freeReplyObject(r);
		r = redisCommand(s->rc, "SELECT %d", atoi(a.path));
		freeReplyObject(r);
		return 0;
	}
#endif
#ifdef DUE_WITH_MYSQL
	if (is_mysql(url)) {
		saddr_parse(&a, url, 3306);
		mysql_library_init(0, NULL, NULL);
		if (!(s->my = mysql_init(NULL)) ||
		    !mysql_real_connect(
			s->my, a.host, a.user[0] ? a.user : NULL,
			a.pass[0] ? a.pass : NULL, NULL, (unsigned)a.port,
			a.sock[0] ? a.sock : NULL, 0)) {
			fprintf(stderr, "due bench: mysql %s:%d: %s\n", a.host,
				a.port,
				s->my ? mysql_error(s->my) : "out of memory");
			return -1;
		}
		return 0;
	}
#endif
	(void)a;
	fprintf(stderr, "due bench: this build has no client for %s\n", url);
	return -1;
}

static void srv_close(srv *s)
{
#ifdef DUE_WITH_REDIS
	if (s->rc)
		redisFree(s->rc);
#endif
#ifdef DUE_WITH_MYSQL
	if (s->my)
		mysql_close(s->my);
#endif
	memset(s, 0, sizeof(*s));
}

/*
** The server's own counts into `out` (name -> integer): Redis INFO
** commandstats (calls per command), MySQL SHOW GLOBAL STATUS Questions and
** Com_*.  0 or -1.
*/
static int srv_counters(srv *s, json_t *out)
{
#ifdef DUE_WITH_REDIS
	if (s->rc) {
		redisReply *r = redisCommand(s->rc, "INFO commandstats");
		if (!r || r->type != REDIS_REPLY_STRING) {
			freeReplyObject(r);
			return -1;
		}
		for (const char *p = r->str; (p = strstr(p, "cmdstat_"));) {
			const char *c = strchr(p, ':'),
				   *k = strstr(p, "calls=");
			if (!c || !k)
				break;
			char name[64];
			snprintf(name, sizeof(name), "%.*s", (int)(c - p - 8),
				 p + 8);
			json_object_set_new(
			    out, name, json_integer(strtoll(k + 6, NULL, 10)));
			p = k;
		}
		freeReplyObject(r);
		return 0;
	}
#endif
#ifdef DUE_WITH_MYSQL
	if (s->my) {
		static const char q[] =
		    "SHOW GLOBAL STATUS WHERE Variable_name = 'Questions'"
		    " OR Variable_name LIKE 'Com\\_%'";
		if (mysql_query(s->my, q))
			return -1;
		MYSQL_RES *r = mysql_store_result(s->my);
		if (!r)
			return -1;
		for (MYSQL_ROW row; (row = mysql_fetch_row(r));)
			json_object_set_new(
			    out, row[0],
			    json_integer(strtoll(row[1], NULL, 10)));
		mysql_free_result(r);
		return 0;
	}
#endif
	(void)s;
	(void)out;
	return -1;
}

/*
** after - before, the harness's own reads left out (INFO on Redis; on
** MySQL one SHOW STATUS, which counts itself as a question); the total
** into *total, the non-zero entries returned (or NULL).
*/
static json_t *srv_diff(json_t *before, json_t *after, long long *total)
{
	json_t *d = json_object();
	const char *k;
	json_t *val;
	bool mysql = json_object_get(after, "Questions") != NULL;

	*total = 0;
	json_object_foreach(after, k, val)
	{
		long long x = json_integer_value(val) -
			      json_integer_value(json_object_get(before, k));
		if (!strcmp(k, "info") || (mysql && !strcmp(k, "Questions")))
			continue;
		if (mysql && !strcmp(k, "Com_show_status"))
			x--;
		if (x <= 0)
			continue;
		json_object_set_new(d, k, json_integer(x));
		if (!mysql)
			*total += x;
	}
	if (mysql)
		*total =
		    json_integer_value(json_object_get(after, "Questions")) -
		    json_integer_value(json_object_get(before, "Questions")) -
		    1;
	return d;
}

static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* The store work at a phase's start (work_now). */
typedef struct bwork {
	due_store_work w; /* due_store_work_read: this process's */
	long long wal;	  /* PostgreSQL: the WAL insert position, or -1 */
	double exec_us;	  /* PostgreSQL: pg_stat_statements' time, or -1 */
} bwork;

/*
** PostgreSQL: the server's WAL insert position in bytes, on a connection
** of its own to the store named by --db (the store's own connections are
** the library's), or -1.  Its move over a phase is the WAL written by
** every session of the server, as bench/floor reads it.  On the same
** connection, *exec_us: pg_stat_statements' execution time so far of this
** database's statements in microseconds, or -1 without the module.
*/
static long long pg_wal_pos(vctx *v, double *exec_us)
{
	long long pos = -1;
#ifdef DUE_WITH_PG
	PGconn *c;
	PGresult *r;

	*exec_us = -1;
	if (v->backend != V_PG)
		return -1;
	c = PQconnectdb(v->base_url);
	if (PQstatus(c) == CONNECTION_OK) {
		r = PQexec(c, "SELECT pg_wal_lsn_diff("
			      "pg_current_wal_insert_lsn(), '0/0')::bigint");
		if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
			pos = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
		PQclear(r);
		/*
		** Absent unless the server preloads pg_stat_statements and
		** the database has the extension (scripts/pg-test-cluster
		** does both); this reading's own statements are left out.
		*/
		r = PQexec(c,
			   "SELECT coalesce(sum(total_exec_time), 0) * 1000"
			   " FROM pg_stat_statements WHERE dbid = (SELECT oid"
			   " FROM pg_database WHERE datname ="
			   " current_database()) AND query NOT LIKE"
			   " '%pg_stat_statements%' AND query NOT LIKE"
			   " '%pg_current_wal_insert_lsn%'");
		if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
			*exec_us = strtod(PQgetvalue(r, 0, 0), NULL);
		PQclear(r);
	}
	PQfinish(c);
#else
	(void)v;
	*exec_us = -1;
#endif
	return pos;
}

/* The store work now: read before a phase's clocks start. */
static bwork work_now(vctx *v)
{
	bwork b = {.w.version = DUE_STORE_WORK_VERSION};

	b.wal = pg_wal_pos(v, &b.exec_us);
	due_store_work_read(&b.w);
	return b;
}

/*
** The store work since b0, per task of n, into r (when there is any):
** read after the phase's CPU, so the reading is not in it.
*/
static void work_per_task(vctx *v, bres *r, const bwork *b0, double n)
{
	bwork b = work_now(v);
	const due_store_work *w0 = &b0->w;

	if (n <= 0)
		return;
	r->has_work = b.w.statements > w0->statements;
	if (r->has_work) {
		r->stmts_per_task =
		    (double)(b.w.statements - w0->statements) / n;
		r->steps_per_task = (double)(b.w.vm_steps - w0->vm_steps) / n;
		r->rows_per_task =
		    (double)(b.w.rows_written - w0->rows_written) / n;
	}
	if (b0->wal >= 0 && b.wal >= b0->wal)
		r->wal_per_task = (double)(b.wal - b0->wal) / n;
	if (b0->exec_us >= 0 && b.exec_us >= b0->exec_us)
		r->server_us_per_task = (b.exec_us - b0->exec_us) / n;
}

/*
** Fill the scratch store with n tasks in batches; returns the first id
** (0: failed), and every id, sorted, in ids[n] when ids is not NULL (a
** sharded Redis store's ids are not one run: seq * N + shard).
*/
static int cmp_id(const void *a, const void *b)
{
	due_id x = *(const due_id *)a, y = *(const due_id *)b;
	return (x > y) - (x < y);
}

static due_id fill_ids(vctx *v, long n, int64_t spread_us, bool at_random,
		       long batch, due_id *ids);

static due_id fill(vctx *v, long n, int64_t spread_us, long batch)
{
	return fill_ids(v, n, spread_us, false, batch, NULL);
}

/* A fixed sequence of pseudo-random numbers (xorshift64): the same due
   times on every run, so that runs compare. */
static uint64_t bench_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/*
** Submit n bench tasks in batches: due now, or, with spread_us, 1 s from
** now plus a point in the spread, evenly spaced or (at_random) uniformly
** at random, as a command handler's lateness workload has them (bursts:
** several tasks due within a few milliseconds).  The first id, 0 on
** error; ids (when not NULL) gets every id, sorted.
*/
static due_id fill_ids(vctx *v, long n, int64_t spread_us, bool at_random,
		       long batch, due_id *ids)
{
	uint64_t seed = 0x9e3779b97f4a7c15u;
	static const char payload[] =
	    "{\"order\":123456,\"customer\":\"c-42\","
	    "\"note\":\"close this unpaid order in 30m\"}....";
	due_submit *items = calloc((size_t)batch, sizeof(*items));
	due_submitted *out = calloc((size_t)batch, sizeof(*out));
	due_id first = 0;

	for (long done = 0; items && out && done < n;) {
		long k = n - done < batch ? n - done : batch;
		for (long i = 0; i < k; i++) {
			items[i] =
			    (due_submit){"bench", payload, sizeof(payload) - 1,
					 DUE_SCHEDULE_OPTS_INIT};
			if (spread_us && at_random)
				items[i].opts.delay_us =
				    1000000 + (int64_t)(bench_rand(&seed) %
							(uint64_t)spread_us);
			else if (spread_us)
				items[i].opts.delay_us =
				    1000000 + spread_us * (done + i) / n;
		}
		if (due_schedule_batch(v->db, out, items, (size_t)k) < 0) {
			fprintf(stderr, "due bench: enqueue: %s\n",
				due_error_last());
			first = 0;
			break;
		}
		if (!first)
			first = out[0].id;
		for (long i = 0; ids && i < k; i++)
			ids[done + i] = out[i].id;
		done += k;
	}
	free(items);
	free(out);
	if (ids && first)
		qsort(ids, (size_t)n, sizeof(*ids), cmp_id);
	return first;
}

/* due_store_bytes() as JSON: a number, or null when the store cannot
   say (DUE_EUNSUPPORTED) or the read failed (said on stderr). */
static json_t *store_bytes(vctx *v)
{
	int64_t b = 0;
	int rc = due_store_bytes(v->db, &b);
	if (rc == 0)
		return json_integer(b);
	if (rc != DUE_EUNSUPPORTED)
		fprintf(stderr, "due bench: store bytes: %s\n",
			due_error_last());
	return json_null();
}

/*
** drain --pending: n tasks due in a day, of the drain's own kind (the
** claim must step over none of them: they are not due), a small payload, in
** batches of --batch; progress on stderr every 5 s (a big fill takes
** minutes).  Adds pending_fill_s, pending_per_s and the store's bytes
** before and after to `extra`; returns 0 or -1.
*/
static int fill_pending(vctx *v, const bopts *o, json_t *extra)
{
	static const char payload[] = "{\"user\":123456,\"remind\":true}";
	due_submit *items = calloc((size_t)o->batch, sizeof(*items));
	due_submitted *out = calloc((size_t)o->batch, sizeof(*out));
	int rc = items && out ? 0 : -1;
	json_t *b0 = store_bytes(v);
	double t0 = v_now_ms(), last = t0;

	for (long done = 0; rc == 0 && done < o->pending;) {
		long k =
		    o->pending - done < o->batch ? o->pending - done : o->batch;
		for (long i = 0; i < k; i++) {
			items[i] =
			    (due_submit){"bench", payload, sizeof(payload) - 1,
					 DUE_SCHEDULE_OPTS_INIT};
			items[i].opts.delay_us = 24LL * 3600 * 1000000;
		}
		if (due_schedule_batch(v->db, out, items, (size_t)k) < 0) {
			fprintf(stderr, "due bench: pending: %s\n",
				due_error_last());
			rc = -1;
		}
		done += k;
		if (v_now_ms() - last >= 5000) {
			last = v_now_ms();
			fprintf(stderr, "  pending: %ld/%ld added, %.0f/s\n",
				done, o->pending,
				(double)done * 1000.0 / (last - t0));
		}
	}
	double secs = (v_now_ms() - t0) / 1000.0;
	json_t *b1 = store_bytes(v);
	json_object_set_new(extra, "pending_fill_s", json_real(secs));
	json_object_set_new(
	    extra, "pending_per_s",
	    json_real(secs > 0 ? (double)o->pending / secs : 0));
	json_object_set_new(extra, "bytes_before_pending", b0);
	json_object_set_new(extra, "bytes_after_pending", b1);
	if (json_is_integer(b0) && json_is_integer(b1))
		json_object_set_new(extra, "bytes_per_pending_task",
				    json_real((double)(json_integer_value(b1) -
						       json_integer_value(b0)) /
					      (double)o->pending));
	free(items);
	free(out);
	return rc;
}

static void w_enqueue(vctx *v, const bopts *o)
{
	static const char payload[] =
	    "{\"order\":123456,\"customer\":\"c-42\","
	    "\"note\":\"close this unpaid order in 30m\"}....";
	bres r = {.workload = "enqueue",
		  .variant = "single",
		  .n = o->n,
		  .concurrency = 1};
	bwork w0 = work_now(v);
	double t0 = v_now_ms(), c0 = cpu_seconds();
	long n = o->n / 4 > 0 ? o->n / 4 : 1; /* one commit each: fewer */

	for (long i = 0; i < n; i++) {
		due_submitted s;
		if (due_schedule(v->db, &s, "bench", payload,
				 sizeof(payload) - 1, NULL) < 0) {
			fprintf(stderr, "due bench: %s\n", due_error_last());
			return;
		}
	}
	r.n = n;
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.tasks_per_s = (double)n / r.seconds;
	r.cpu_us_per_task = (cpu_seconds() - c0) * 1e6 / (double)n;
	work_per_task(v, &r, &w0, (double)n);
	report(o, &r);
	r.variant = "batch";
	r.n = o->n;
	r.concurrency = o->batch;
	w0 = work_now(v);
	t0 = v_now_ms();
	c0 = cpu_seconds();
	if (!fill(v, o->n, 0, o->batch))
		return;
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.tasks_per_s = (double)o->n / r.seconds;
	r.cpu_us_per_task = (cpu_seconds() - c0) * 1e6 / (double)o->n;
	work_per_task(v, &r, &w0, (double)o->n);
	report(o, &r);
}

static void w_cycle(vctx *v, const bopts *o)
{
	bres r = {.workload = "cycle",
		  .variant = "claim1+done1",
		  .n = o->n,
		  .concurrency = 1};
	long done = 0;

	if (!fill(v, o->n, 0, o->batch))
		return;
	bwork w0 = work_now(v);
	double t0 = v_now_ms(), c0 = cpu_seconds();
	for (;;) {
		due_task_list *l = NULL;
		due_complete_outcome co;
		if (due_claim(v->db, &l, "bench", NULL, 0, 1, 30000000) < 0)
			break;
		if (l->count == 0) {
			due_task_list_free(l);
			break;
		}
		if (due_complete(v->db, &co, l->items[0].id,
				 l->items[0].attempt, "", 0) == 0 &&
		    co == DUE_COMPLETE_DONE)
			done++;
		due_task_list_free(l);
	}
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.tasks_per_s = (double)done / r.seconds;
	if (done > 0)
		r.cpu_us_per_task = (cpu_seconds() - c0) * 1e6 / (double)done;
	work_per_task(v, &r, &w0, (double)done);
	r.has_check = true;
	r.missing = o->n - done;
	report(o, &r);
}

typedef struct drain_ctx {
	atomic_int *counts; /* runs of ids[i] */
	due_id *ids;	    /* the run's tasks, sorted */
	due_id first;
	long n;
	atomic_long handled;
} drain_ctx;

/* The index of id in the run's sorted ids, or -1. */
static long id_index(const drain_ctx *d, due_id id)
{
	const due_id *at;

	if (!d->ids) /* a workload that counts no runs (lateness, idle) */
		return -1;
	at = bsearch(&id, d->ids, (size_t)d->n, sizeof(id), cmp_id);
	return at ? (long)(at - d->ids) : -1;
}

static int noop(due_job *job, void *payload)
{
	drain_ctx *d = payload;
	long i = id_index(d, due_job_task(job)->id);
	if (i >= 0)
		atomic_fetch_add(&d->counts[i], 1);
	atomic_fetch_add(&d->handled, 1);
	return 0;
}

/* A command drain (--exec, --pipe) runs its handler in another process,
   so nothing here counts its runs: ask the store instead.  Every task of
   the run must be DONE at attempt 1; a task not DONE is missing, and
   every try beyond the first is a duplicate run.  Read after the clock
   stopped, in pages of 10000; returns 0 or -1. */
static int store_check(vctx *v, const drain_ctx *d, bres *r)
{
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	long seen = 0, n = d->n;
	bool past = false;

	lo.limit = 10000;
	lo.after = d->ids[0] - 1;
	r->duplicates = 0;
	for (;;) {
		due_task_list *l = NULL;
		if (due_list(v->db, &l, &lo) < 0) {
			fprintf(stderr, "due bench: check: %s\n",
				due_error_last());
			return -1;
		}
		size_t k = l->count;
		for (size_t i = 0; i < k; i++) {
			const due_task *t = &l->items[i];
			if (t->id > d->ids[n - 1]) {
				past = true;
				break;
			}
			lo.after = t->id;
			if (id_index(d, t->id) < 0) /* another run's */
				continue;
			if (t->state == DUE_DONE)
				seen++;
			if (t->attempt > 1)
				r->duplicates += t->attempt - 1;
		}
		due_task_list_free(l);
		if (past || k < (size_t)lo.limit)
			break;
	}
	r->missing = n - seen;
	return 0;
}

typedef struct wthread {
	due_worker *w;
	pthread_t th;
	atomic_bool ended; /* due_worker_run returned */
} wthread;

static void *wrun(void *arg)
{
	wthread *t = arg;
	due_worker_run(t->w);
	atomic_store(&t->ended, true);
	return NULL;
}

/* A drain's workers run with `once`: each returns when it finds nothing
   claimable.  When all have, tasks not finished yet (a failing handler's
   retries, waiting out their backoff) will not be run by them: stop
   waiting and let the check report them missing. */
static bool all_ended(wthread *ws, long count)
{
	for (long i = 0; i < count; i++)
		if (!atomic_load(&ws[i].ended))
			return false;
	return true;
}

/* Tries the workers have committed as DONE or DEAD: the store has
   answered each completion (the worker counts it after the commit).
   Asking the store instead (due_stats) would cost a count in a big store
   during the timed drain, and its DONE may be an estimate there. */
static long ended_tries(wthread *ws, long count)
{
	long n = 0;
	for (long i = 0; i < count; i++) {
		due_worker_stats st;
		due_worker_stats_get(ws[i].w, &st);
		n += (long)(st.done + st.dead);
	}
	return n;
}

/* Start `count` workers in threads; returns 0 or -1. */
static int start_workers(vctx *v, const bopts *o, wthread *ws, long count,
			 long conc, bool once, due_handler_fn fn, void *payload,
			 due_exec_opts *x)
{
	for (long i = 0; i < count; i++) {
		due_worker_opts wo = DUE_WORKER_OPTS_INIT;
		char owner[32];
		snprintf(owner, sizeof(owner), "bench-%ld", i + 1);
		wo.url = v->url;
		wo.owner = owner;
		wo.concurrency = (int)conc;
		wo.no_wheel = o->no_wheel;
		wo.mode = o->inline_mode ? DUE_MODE_INLINE : DUE_MODE_POOL;
		wo.poll_us = o->no_wheel || o->poll_set ? o->poll_us : 0;
		wo.once = once;
		wo.log_level = 0;
		if (due_worker_new(&ws[i].w, &wo) < 0 ||
		    due_worker_register(ws[i].w, NULL,
					x ? due_exec_handler : fn,
					x ? (void *)x : payload, 0) < 0 ||
		    pthread_create(&ws[i].th, NULL, wrun, &ws[i]) != 0) {
			fprintf(stderr, "due bench: worker: %s\n",
				due_error_last());
			return -1;
		}
	}
	return 0;
}

/* Stop (or wait for) the workers; returns their claim queries in all. */
static long stop_workers(wthread *ws, long count, bool stop)
{
	long claims = 0;
	for (long i = 0; i < count; i++)
		if (stop)
			due_worker_stop(ws[i].w);
	for (long i = 0; i < count; i++) {
		due_worker_stats st;
		pthread_join(ws[i].th, NULL);
		due_worker_stats_get(ws[i].w, &st);
		claims += (long)st.claim_queries;
		due_worker_free(ws[i].w);
	}
	return claims;
}

static void w_drain(vctx *v, const bopts *o)
{
	/* an inline worker runs one task at a time (CONTRACT §5: nothing
	   waits in memory holding a lease), so concurrency C inline is C
	   inline workers, each claiming and running one task at a time */
	long workers = o->workers_set	? o->workers
		       : o->inline_mode ? o->concurrency
					: 1;
	long conc = o->inline_mode ? 1 : o->concurrency;
	drain_ctx d = {.n = o->n};
	due_exec_opts x = DUE_EXEC_OPTS_INIT;
	due_pipe_opts po = DUE_PIPE_OPTS_INIT;
	due_pipe *pipe = NULL;
	bool cmd = o->exec || o->pipe; /* no in-process handled counter */
	bres r = {.workload = "drain",
		  .variant = o->exec	      ? "exec"
			     : o->pipe	      ? "pipe"
			     : o->inline_mode ? "c-noop-inline"
					      : "c-noop",
		  .n = o->n,
		  .concurrency = conc * workers,
		  .has_check = true};
	wthread *ws = calloc((size_t)workers, sizeof(*ws));

	r.extra = json_pack("{s:I}", "pending", (json_int_t)o->pending);
	x.command = o->exec;
	po.command = o->pipe;
	d.counts = calloc((size_t)o->n, sizeof(*d.counts));
	d.ids = calloc((size_t)o->n, sizeof(*d.ids));
	d.n = o->n;
	if (!ws || !d.counts || !d.ids || !r.extra ||
	    (o->pending > 0 && fill_pending(v, o, r.extra) < 0) ||
	    !(d.first = fill_ids(v, o->n, 0, false, o->batch, d.ids)))
		goto done;
	if (o->pipe && due_pipe_new(&pipe, &po) < 0) {
		fprintf(stderr, "due bench: --pipe: %s\n", due_error_last());
		goto done;
	}
	bwork w0 = work_now(v);
	double t0 = v_now_ms(), last = t0, c0 = cpu_seconds();
	long last_n = 0;
	if (start_workers(
		v, o, ws, workers, conc, true, pipe ? due_pipe_handler : noop,
		pipe ? (void *)pipe : (void *)&d, o->exec ? &x : NULL) < 0)
		goto done;
	/* progress once a second while the workers drain; the handler
	   counter (commands: the workers' committed tries) is free to read:
	   the store is not asked (a query every few ms would compete with
	   the workers) */
	for (;;) {
		long n =
		    cmd ? ended_tries(ws, workers) : atomic_load(&d.handled);
		double now = v_now_ms();
		if (!o->json && now - last >= 1000) {
			fprintf(stderr, "  drain: %ld/%ld run, %.0f tasks/s\n",
				n, o->n,
				(double)(n - last_n) * 1000.0 / (now - last));
			last = now;
			last_n = n;
		}
		if (n >= o->n || all_ended(ws, workers))
			break;
		v_sleep_ms(5);
	}
	/* the last commits: until every task's end is committed */
	while (ended_tries(ws, workers) < o->n && !all_ended(ws, workers))
		v_sleep_ms(1);
	r.seconds = (v_now_ms() - t0) / 1000.0;
	/* the workers' stop (their last report, closing) is not the drain */
	r.cpu_us_per_task = (cpu_seconds() - c0) * 1e6 / (double)o->n;
	work_per_task(v, &r, &w0, (double)o->n);
	r.claim_queries = stop_workers(ws, workers, false);
	r.tasks_per_s = (double)o->n / r.seconds;
	for (long i = 0; i < o->n && !cmd; i++) {
		int c = atomic_load(&d.counts[i]);
		if (c > 1)
			r.duplicates += c - 1;
		if (c == 0)
			r.missing++;
	}
	if (cmd && store_check(v, &d, &r) < 0)
		goto done;
	report(o, &r);
done:
	json_decref(r.extra);
	free(d.ids);
	due_pipe_free(pipe);
	free(ws);
	free(d.counts);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/*
** Run `count` tasks due now through the workers and wait until they are
** committed (at most 60 s): a pipe handler's processes start then.  0 or
** -1.
*/
static int warm_up(vctx *v, wthread *ws, long workers, long count)
{
	double t0 = v_now_ms();

	if (!fill(v, count, 0, count))
		return -1;
	while (ended_tries(ws, workers) < count) {
		if (v_now_ms() - t0 > 60000) {
			fprintf(stderr,
				"due bench: warm-up: %ld of %ld tasks run in "
				"60 s\n",
				ended_tries(ws, workers), count);
			return -1;
		}
		v_sleep_ms(10);
	}
	return 0;
}

/*
** lateness: n tasks due over --spread, --workers workers waiting; claim -
** due of each task's first try, from the store's attempts.  With the C
** no-op (the default) 4 workers of 4 slots, tasks evenly spaced.  With
** --exec or --pipe (variants "exec", "pipe") the load of issue 36: 2
** workers of 2 slots, 500 tasks due at random, so a handler that holds
** its slot (or the worker) longer than it should shows as claims made
** late; --workers, --concurrency and --n change it.  A command handler
** counts no runs here: the workers' committed tries are counted instead.
** A pipe handler's slots each run one task first, not measured (warm_up).
*/
static void w_lateness(vctx *v, const bopts *o)
{
	bool cmd = o->exec || o->pipe;
	long n = o->n_set ? o->n
		 : cmd	  ? 500
			  : 2000,
	     workers = o->workers_set ? o->workers
		       : cmd	      ? 2
				      : 4,
	     conc = !cmd		 ? 4
		    : o->concurrency_set ? o->concurrency
					 : 2;
	drain_ctx d = {.n = n};
	due_exec_opts x = DUE_EXEC_OPTS_INIT;
	due_pipe_opts po = DUE_PIPE_OPTS_INIT;
	due_pipe *pipe = NULL;
	bres r = {.workload = "lateness",
		  .variant = o->exec	   ? "exec"
			     : o->pipe	   ? "pipe"
			     : o->no_wheel ? "poll"
					   : "wheel",
		  .n = n,
		  .concurrency = workers * (cmd ? conc : 1),
		  .has_late = true};
	wthread *ws = calloc((size_t)workers, sizeof(*ws));
	double *late = calloc((size_t)n, sizeof(*late));
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	size_t k = 0;

	x.command = o->exec;
	po.command = o->pipe;
	d.counts = calloc((size_t)n, sizeof(*d.counts));
	if (!ws || !late || !d.counts)
		goto done;
	if (o->pipe && due_pipe_new(&pipe, &po) < 0) {
		fprintf(stderr, "due bench: --pipe: %s\n", due_error_last());
		goto done;
	}
	if (start_workers(
		v, o, ws, workers, conc, false, pipe ? due_pipe_handler : noop,
		pipe ? (void *)pipe : (void *)&d, o->exec ? &x : NULL) < 0)
		goto done;
	/* a pipe handler starts its processes at its slots' first tasks: one
	   task per slot first (not measured), so that the figures are the
	   steady state's, not an interpreter's start */
	long warm = o->pipe ? workers * conc : 0;
	double t0 = v_now_ms(); /* set again after the warm-up */
	if (warm && warm_up(v, ws, workers, warm) < 0)
		goto stop;
	t0 = v_now_ms();
	if (!(d.first = fill_ids(v, n, o->spread_us, cmd, o->batch, NULL)))
		goto stop;
	while ((cmd ? ended_tries(ws, workers) - warm
		    : atomic_load(&d.handled)) < n &&
	       v_now_ms() - t0 < 60000 + (double)o->spread_us / 1000)
		v_sleep_ms(20);
stop:
	stop_workers(ws, workers, true);
	r.seconds = (v_now_ms() - t0) / 1000.0;
	lo.limit = 10000;
	lo.attempts = true;
	for (due_id after = 0;; after = l->items[l->count - 1].id) {
		due_task_list_free(l);
		l = NULL;
		lo.after = after;
		if (due_list(v->db, &l, &lo) < 0 || l->count == 0)
			break;
		for (size_t i = 0; i < l->count; i++) {
			const due_task *t = &l->items[i];
			if (t->n_attempts == 0 || k >= (size_t)n ||
			    t->id < d.first) /* a warm-up task */
				continue;
			double ms =
			    (double)(t->attempts[0].claimed_at - t->due_at) /
			    1000.0;
			r.early += ms < 0;
			late[k++] = ms;
		}
	}
	due_task_list_free(l);
	qsort(late, k, sizeof(*late), cmp_double);
	if (k) {
		r.p50 = late[(k - 1) * 50 / 100];
		r.p90 = late[(k - 1) * 90 / 100];
		r.p99 = late[(k - 1) * 99 / 100];
		r.max = late[k - 1];
	}
	r.tasks_per_s = (double)k / r.seconds;
	report(o, &r);
done:
	due_pipe_free(pipe);
	free(ws);
	free(late);
	free(d.counts);
}

static void w_idle(vctx *v, const bopts *o)
{
	long workers = o->workers_set ? o->workers : 4;
	bres r = {.workload = "idle",
		  .variant = o->no_wheel ? "poll" : "wheel",
		  .n = 0,
		  .concurrency = workers,
		  .has_idle = true};
	wthread *ws = calloc((size_t)workers, sizeof(*ws));
	drain_ctx d = {0};
	long long q = 0;
	/* Redis, MySQL: the server's own count over the same window, on a
	   connection opened before the workers (its handshake is outside) */
	srv s = {0};
	bool counted = (is_redis(v->url) || is_mysql(v->url)) &&
		       srv_connect(&s, v->url) == 0;
	json_t *k0 = json_object(), *k1 = json_object();

	if (!ws ||
	    start_workers(v, o, ws, workers, 4, false, noop, &d, NULL) < 0) {
		free(ws);
		goto out;
	}
	/* connect, first claim; the server's count starts once every worker
	   has opened (scripts loaded, settings read, registered) */
	v_sleep_ms(counted ? 1500 : 300);
	due_worker_stats s0[64] = {0};
	for (long i = 0; i < workers && i < 64; i++)
		due_worker_stats_get(ws[i].w, &s0[i]);
	counted = counted && srv_counters(&s, k0) == 0;
	double c0 = cpu_seconds(), t0 = v_now_ms();
	v_sleep_ms((int)(o->idle_us / 1000));
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.cpu_s = cpu_seconds() - c0;
	if (counted && srv_counters(&s, k1) == 0)
		r.server_detail = srv_diff(k0, k1, &r.server_queries);
	for (long i = 0; i < workers && i < 64; i++) {
		due_worker_stats s1;
		due_worker_stats_get(ws[i].w, &s1);
		q += s1.claim_queries - s0[i].claim_queries +
		     s1.reclaim_queries - s0[i].reclaim_queries + s1.refills -
		     s0[i].refills;
	}
	stop_workers(ws, workers, true);
	free(ws);
	r.queries_per_s = (double)q / r.seconds / (double)workers;
	report(o, &r);
out:
	json_decref(r.server_detail);
	json_decref(k0);
	json_decref(k1);
	srv_close(&s);
}

/* Redis: used_memory from INFO memory, or -1. */
static long long redis_used_memory(srv *s)
{
	long long n = -1;
#ifdef DUE_WITH_REDIS
	redisReply *r = redisCommand(s->rc, "INFO memory");
	const char *p;
	if (r && r->type == REDIS_REPLY_STRING &&
	    (p = strstr(r->str, "used_memory:")))
		n = strtoll(p + 12, NULL, 10);
	freeReplyObject(r);
#else
	(void)s;
#endif
	return n;
}

/*
** Redis: what a pending task costs in server memory.  n tasks (default
** 100,000) with a 16-byte payload, due in an hour, in batches; used_memory
** before (the scratch store open, its scripts loaded) and after.
*/
static void w_memory(vctx *v, const bopts *o)
{
	static const char payload[] = "0123456789abcdef";
	long n = o->n_set ? o->n : 100000;
	bres r = {.workload = "memory",
		  .variant = "pending-16B",
		  .n = n,
		  .concurrency = o->batch};
	due_submit *items = calloc((size_t)o->batch, sizeof(*items));
	due_submitted *out = calloc((size_t)o->batch, sizeof(*out));
	srv s;

	if (!items || !out || srv_connect(&s, v->url) < 0)
		goto done;
	r.bytes_before = redis_used_memory(&s);
	double t0 = v_now_ms();
	for (long k, left = n; left > 0; left -= k) {
		k = left < o->batch ? left : o->batch;
		for (long i = 0; i < k; i++) {
			items[i] =
			    (due_submit){"bench", payload, sizeof(payload) - 1,
					 DUE_SCHEDULE_OPTS_INIT};
			items[i].opts.delay_us = 3600LL * 1000000;
		}
		if (due_schedule_batch(v->db, out, items, (size_t)k) < 0) {
			fprintf(stderr, "due bench: enqueue: %s\n",
				due_error_last());
			srv_close(&s);
			goto done;
		}
	}
	r.seconds = (v_now_ms() - t0) / 1000.0;
	r.tasks_per_s = (double)n / r.seconds;
	r.bytes_after = redis_used_memory(&s);
	srv_close(&s);
	if (r.bytes_before < 0 || r.bytes_after < 0) {
		fprintf(stderr, "due bench: memory: INFO memory unreadable\n");
		goto done;
	}
	r.bytes_per_task = (double)(r.bytes_after - r.bytes_before) / (double)n;
	report(o, &r);
done:
	free(items);
	free(out);
}

/*
** Add n tasks over 10 priorities (-5..4, interleaved so that ids do not
** follow priority), due now, or with `future` due in an hour but for the
** last 1,000, which are due now at priority 4.
*/
static int fill_prio(vctx *v, long n, bool future)
{
	due_submit *items = calloc(1000, sizeof(*items));
	due_submitted *out = calloc(1000, sizeof(*out));
	int rc = items && out ? 0 : -1;

	for (long done = 0; rc == 0 && done < n;) {
		long k = n - done < 1000 ? n - done : 1000;
		for (long i = 0; i < k; i++) {
			long j = done + i;
			items[i] = (due_submit){"bench", "{}", 2,
						DUE_SCHEDULE_OPTS_INIT};
			items[i].opts.priority = (int32_t)(j * 7 % 10) - 5;
			if (future && j < n - 1000)
				items[i].opts.delay_us = 3600LL * 1000000;
			else if (future)
				items[i].opts.priority = 4;
		}
		if ((rc = due_schedule_batch(v->db, out, items, (size_t)k)) < 0)
			fprintf(stderr, "due bench: enqueue: %s\n",
				due_error_last());
		done += k;
	}
	free(items);
	free(out);
	return rc;
}

/* 200 claim-1 + complete-1 cycles: p50/p99/max of the claim call in ms. */
static void depth_sample(vctx *v, const bopts *o, const char *variant,
			 long pending)
{
	enum { N = 200 };
	double ms[N];
	long k = 0;
	bres r = {.workload = "depth",
		  .variant = variant,
		  .n = pending,
		  .concurrency = 1,
		  .has_late = true};
	double t_all = v_now_ms();

	for (; k < N; k++) {
		due_task_list *l = NULL;
		due_complete_outcome co;
		double t0 = v_now_ms();
		if (due_claim(v->db, &l, "bench", NULL, 0, 1, 30000000) < 0 ||
		    l->count == 0) {
			due_task_list_free(l);
			break;
		}
		ms[k] = v_now_ms() - t0;
		due_complete(v->db, &co, l->items[0].id, l->items[0].attempt,
			     "", 0);
		due_task_list_free(l);
	}
	if (k == 0) {
		fprintf(stderr, "due bench: depth: nothing claimed: %s\n",
			due_error_last());
		return;
	}
	r.seconds = (v_now_ms() - t_all) / 1000.0;
	r.tasks_per_s = (double)k / r.seconds;
	qsort(ms, (size_t)k, sizeof(ms[0]), cmp_double);
	r.p50 = ms[k / 2];
	r.p90 = ms[k * 9 / 10];
	r.p99 = ms[k * 99 / 100];
	r.max = ms[k - 1];
	report(o, &r);
}

static void w_depth(vctx *v, const bopts *o)
{
	long n = o->n_set ? o->n : 1000000;
	char name[32];

	for (int future = 0; future < 2; future++) {
		const char *var = future ? "future" : "due";
		if (future) { /* a second scratch store */
			v_done(v);
			if (bench_fresh(v, "depth-future") < 0)
				return;
		}
		if (fill_prio(v, 1000, future) < 0)
			return;
		snprintf(name, sizeof(name), "%s-1k", var);
		depth_sample(v, o, name, 1000);
		fprintf(stderr, "due bench: depth: adding %ld tasks...\n",
			n - 1000);
		if (n > 1000 && fill_prio(v, n - 1000, future) < 0)
			return;
		snprintf(name, sizeof(name), "%s-%ldk", var, n / 1000);
		depth_sample(v, o, name, n);
	}
}

/*
** soak: --rate R tasks/s due now for --duration D while one worker of
** --concurrency slots (retention --retain) runs them with a no-op.
**
** The submitter paces itself by the monotonic clock: every 10 ms it adds
** what the rate owes since the start, in batches of at most 500 (20 at
** 2,000/s).  Lateness is claim - due on the store's clock, as the
** lateness workload reads it from the attempts (which retention deletes
** here): the claim's lease_until - lease, as the worker's own lateness
** figure.  The handler keeps the tries of tasks due in the first minute
** and in the last minute (store clock, from the store's `now` read
** before the first submit), so memory follows the rate, not D.
*/
typedef struct soak_win {
	float *ms;
	atomic_long n;
	long cap;
} soak_win;

typedef struct soak_ctx {
	due_time origin; /* store clock before the first submit */
	int64_t lease_us, last_from_us; /* last window: due >= origin + this */
	soak_win first, last;
	atomic_long handled, early;
} soak_ctx;

static void soak_keep(soak_win *w, double ms)
{
	long i = atomic_fetch_add(&w->n, 1);
	if (i < w->cap)
		w->ms[i] = (float)ms;
}

static int soak_noop(due_job *job, void *payload)
{
	soak_ctx *s = payload;
	const due_task *t = due_job_task(job);
	double ms = (double)(t->lease_until - s->lease_us - t->due_at) / 1000.0;
	int64_t at = t->due_at - s->origin;

	if (at < 60000000)
		soak_keep(&s->first, ms);
	if (at >= s->last_from_us)
		soak_keep(&s->last, ms);
	if (ms < 0)
		atomic_fetch_add(&s->early, 1);
	atomic_fetch_add(&s->handled, 1);
	return 0;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* p (0..100) of a window's kept tries as JSON, null when none. */
static json_t *soak_pct(soak_win *w, int p)
{
	long n = atomic_load(&w->n);
	if (n > w->cap)
		n = w->cap;
	if (n == 0)
		return json_null();
	qsort(w->ms, (size_t)n, sizeof(float), cmp_float);
	return json_real(w->ms[(n - 1) * p / 100]);
}

static const char *backend_name(const vctx *v)
{
	switch (v->backend) {
	case V_SQLITE: return "sqlite";
	case V_PG: return "pg";
	case V_REDIS: return "redis";
	case V_MYSQL: return "mysql";
	default: return "other";
	}
}

static void w_soak(vctx *v, const bopts *o)
{
	enum { BATCH_MAX = 500 };
	static const char payload[] =
	    "{\"order\":123456,\"customer\":\"c-42\","
	    "\"note\":\"close this unpaid order in 30m\"}....";
	const double dur_ms = (double)o->duration_us / 1000.0;
	/* the last minute: [D - 60 s, D), or all of D when shorter */
	const double last_ms = dur_ms > 60000 ? dur_ms - 60000 : 0;
	soak_ctx s = {.lease_us = 30000000,
		      .last_from_us = (int64_t)(last_ms * 1000.0)};
	long win_cap = o->rate * 66 + 1000; /* a minute and some catching up */
	due_submit *items = calloc(BATCH_MAX, sizeof(*items));
	due_submitted *out = calloc(BATCH_MAX, sizeof(*out));
	json_t *j = json_object(), *samples = json_array();
	json_t *bytes60 = NULL;
	wthread w = {0};
	due_worker_stats ws;
	due_stats st;
	bool started = false;
	long submitted = 0, h_last = -1, h_end = 0;
	double t_last = 0, t_end = 0, next_sample = 10000;

	s.first.ms = calloc((size_t)win_cap, sizeof(float));
	s.last.ms = calloc((size_t)win_cap, sizeof(float));
	s.first.cap = s.last.cap = win_cap;
	if (!items || !out || !j || !samples || !s.first.ms || !s.last.ms)
		goto done;
	if (o->pg_autovacuum_default && v_pg_reset_storage(v) < 0)
		goto done;
	if (due_stats_get(v->db, &st) < 0) {
		fprintf(stderr, "due bench: soak: %s\n", due_error_last());
		goto done;
	}
	s.origin = st.now;

	/* one worker, as `due work --concurrency C --retain DUR` */
	due_worker_opts wo = DUE_WORKER_OPTS_INIT;
	wo.url = v->url;
	wo.owner = "bench-soak";
	wo.concurrency = (int)o->concurrency;
	wo.lease_us = s.lease_us;
	wo.no_wheel = o->no_wheel;
	wo.poll_us = o->no_wheel || o->poll_set ? o->poll_us : 0;
	wo.log_level = 0;
	wo.retain_us = o->retain_us;
	if (due_worker_new(&w.w, &wo) < 0 ||
	    due_worker_register(w.w, NULL, soak_noop, &s, 0) < 0 ||
	    pthread_create(&w.th, NULL, wrun, &w) != 0) {
		fprintf(stderr, "due bench: worker: %s\n", due_error_last());
		goto done;
	}
	started = true;

	double t0 = v_now_ms();
	for (;;) {
		double el = v_now_ms() - t0;
		if (el >= dur_ms)
			break;
		if (h_last < 0 && el >= last_ms) {
			h_last = atomic_load(&s.handled);
			t_last = el;
		}
		if (!bytes60 && el >= 60000)
			bytes60 = store_bytes(v);
		if (el >= next_sample) { /* every 10 s: progress and size */
			long h = atomic_load(&s.handled);
			json_t *b = store_bytes(v);
			json_array_append_new(
			    samples,
			    json_pack("{s:f,s:I,s:I,s:o}", "t_s", el / 1000.0,
				      "submitted", (json_int_t)submitted,
				      "handled", (json_int_t)h, "bytes", b));
			fprintf(stderr,
				"  soak: %.0fs %ld submitted, %ld run, "
				"backlog %ld\n",
				el / 1000.0, submitted, h, submitted - h);
			next_sample += 10000;
		}
		long owed = (long)((double)o->rate * el / 1000.0) - submitted;
		while (owed > 0) {
			long k = owed < BATCH_MAX ? owed : BATCH_MAX;
			for (long i = 0; i < k; i++)
				items[i] = (due_submit){"bench", payload,
							sizeof(payload) - 1,
							DUE_SCHEDULE_OPTS_INIT};
			if (due_schedule_batch(v->db, out, items, (size_t)k) <
			    0) {
				fprintf(stderr, "due bench: soak: submit: %s\n",
					due_error_last());
				goto done;
			}
			submitted += k;
			owed -= k;
		}
		v_sleep_ms(10);
	}
	t_end = v_now_ms() - t0;
	h_end = atomic_load(&s.handled);
	json_t *bytes_end = store_bytes(v);
	/* the backlog at the end, run out for at most 60 s (not measured) */
	double t_out = v_now_ms();
	while (atomic_load(&s.handled) < submitted &&
	       v_now_ms() - t_out < 60000)
		v_sleep_ms(20);
	double drain_out = (v_now_ms() - t_out) / 1000.0;
	due_worker_stop(w.w);
	pthread_join(w.th, NULL);
	started = false;
	due_worker_stats_get(w.w, &ws);

	double win_s = (t_end - t_last) / 1000.0;
	json_object_set_new(j, "workload", json_string("soak"));
	json_object_set_new(j, "store", json_string(backend_name(v)));
	json_object_set_new(j, "rate", json_integer(o->rate));
	json_object_set_new(j, "duration_s", json_real(dur_ms / 1000.0));
	json_object_set_new(
	    j, "retain_s",
	    o->retain_us == DUE_RETAIN_ALL
		? json_null()
		: json_real((double)(o->retain_us ? o->retain_us
						  : DUE_RETAIN_DEFAULT_US) /
			    1e6));
	json_object_set_new(j, "concurrency", json_integer(o->concurrency));
	json_object_set_new(j, "submitted", json_integer(submitted));
	json_object_set_new(j, "handled_at_end", json_integer(h_end));
	json_object_set_new(j, "backlog_at_end",
			    json_integer(submitted - h_end));
	json_object_set_new(j, "run_out_s", json_real(drain_out));
	json_object_set_new(j, "tasks_per_s",
			    json_real((double)h_end * 1000.0 / t_end));
	json_object_set_new(
	    j, "tasks_per_s_last_minute",
	    json_real(win_s > 0 ? (double)(h_end - h_last) / win_s : 0));
	json_object_set_new(j, "p50_ms_first_minute", soak_pct(&s.first, 50));
	json_object_set_new(j, "p99_ms_first_minute", soak_pct(&s.first, 99));
	json_object_set_new(j, "max_ms_first_minute", soak_pct(&s.first, 100));
	json_object_set_new(j, "p50_ms_last_minute", soak_pct(&s.last, 50));
	json_object_set_new(j, "p99_ms_last_minute", soak_pct(&s.last, 99));
	json_object_set_new(j, "max_ms_last_minute", soak_pct(&s.last, 100));
	json_object_set_new(j, "early", json_integer(atomic_load(&s.early)));
	json_object_set_new(j, "bytes_at_60s", bytes60 ? bytes60 : json_null());
	bytes60 = NULL;
	json_object_set_new(j, "bytes_at_end", bytes_end);
	json_object_set_new(j, "pruned", json_integer(ws.pruned));
	json_object_set_new(j, "claim_queries", json_integer(ws.claim_queries));
	json_object_set_new(j, "store_errors", json_integer(ws.store_errors));
	json_object_set(j, "samples", samples);
	if (o->json) {
		char *txt = json_dumps(j, JSON_COMPACT);
		if (txt)
			puts(txt);
		free(txt);
	} else {
		const char *k;
		json_t *val;
		printf("soak");
		json_object_foreach(j, k, val)
		{
			char *t;
			if (!strcmp(k, "samples") || !strcmp(k, "workload"))
				continue;
			t = json_dumps(val, JSON_ENCODE_ANY |
						JSON_REAL_PRECISION(6));
			printf("  %s=%s", k, t ? t : "?");
			free(t);
		}
		printf("\n");
	}
	fflush(stdout);
done:
	if (started) {
		due_worker_stop(w.w);
		pthread_join(w.th, NULL);
	}
	due_worker_free(w.w);
	json_decref(bytes60);
	json_decref(samples);
	json_decref(j);
	free(s.first.ms);
	free(s.last.ms);
	free(items);
	free(out);
}

typedef struct workload {
	const char *name;
	void (*run)(vctx *v, const bopts *o);
	bool in_all; /* depth and memory fill big stores: asked for by name */
} workload;

static const workload workloads[] = {
    {"enqueue", w_enqueue, true}, {"cycle", w_cycle, true},
    {"drain", w_drain, true},	  {"lateness", w_lateness, true},
    {"idle", w_idle, true},	  {"depth", w_depth, false},
    {"memory", w_memory, false},  {"soak", w_soak, false},
};

/* Does --workload `name` ask for workload w? */
static bool wanted(const char *name, const workload *w)
{
	return !strcmp(name, w->name) || (!strcmp(name, "all") && w->in_all);
}

static int parse(cli_ctx *c, bopts *o, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"workload", required_argument, NULL, 'w'},
	    {"n", required_argument, NULL, 'n'},
	    {"concurrency", required_argument, NULL, 'c'},
	    {"workers", required_argument, NULL, 'W'},
	    {"batch", required_argument, NULL, 'b'},
	    {"exec", required_argument, NULL, 'e'},
	    {"pipe", required_argument, NULL, 'X'},
	    {"poll", required_argument, NULL, 'p'},
	    {"spread", required_argument, NULL, 's'},
	    {"idle", required_argument, NULL, 'i'},
	    {"no-wheel", no_argument, NULL, 'P'},
	    {"inline", no_argument, NULL, 'I'},
	    {"keep", no_argument, NULL, 'K'},
	    {"pending", required_argument, NULL, 'N'},
	    {"rate", required_argument, NULL, 'R'},
	    {"duration", required_argument, NULL, 'D'},
	    {"retain", required_argument, NULL, 'T'},
	    {"pg-autovacuum", required_argument, NULL, 'A'},
	    CLI_COMMON_OPTS,
	    {0}};
	int opt;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(c, opt, optarg))
			continue;
		switch (opt) {
		case 'h': fputs(usage, stdout); return -1;
		case 'w': o->workload = optarg; break;
		case 'n':
			if (cli_parse_int(c, "--n", optarg, 1, 10000000, &o->n))
				return EXIT_USAGE;
			o->n_set = true;
			break;
		case 'c':
			if (cli_parse_int(c, "--concurrency", optarg, 1, 1024,
					  &o->concurrency))
				return EXIT_USAGE;
			o->concurrency_set = true;
			break;
		case 'W':
			if (cli_parse_int(c, "--workers", optarg, 1, 64,
					  &o->workers))
				return EXIT_USAGE;
			o->workers_set = true;
			break;
		case 'b':
			if (cli_parse_int(c, "--batch", optarg, 1, 10000,
					  &o->batch))
				return EXIT_USAGE;
			break;
		case 'e': o->exec = optarg; break;
		case 'X': o->pipe = optarg; break;
		case 'p':
			if (cli_parse_duration(c, "--poll", optarg,
					       &o->poll_us))
				return EXIT_USAGE;
			o->poll_set = true;
			break;
		case 'P': o->no_wheel = true; break;
		case 'I': o->inline_mode = true; break;
		case 'K': o->keep = true; break;
		case 'N':
			if (cli_parse_int(c, "--pending", optarg, 0, 100000000,
					  &o->pending))
				return EXIT_USAGE;
			o->pending_set = true;
			break;
		case 'R':
			if (cli_parse_int(c, "--rate", optarg, 1, 100000,
					  &o->rate))
				return EXIT_USAGE;
			o->soak_set = true;
			break;
		case 'D':
			if (cli_parse_duration(c, "--duration", optarg,
					       &o->duration_us))
				return EXIT_USAGE;
			if (o->duration_us < 1000000 ||
			    o->duration_us > 24LL * 3600 * 1000000)
				return cli_usage_error(
				    c, "--duration must be from 1s to 1d");
			o->soak_set = true;
			break;
		case 'T':
			if (cli_parse_duration(c, "--retain", optarg,
					       &o->retain_us))
				return EXIT_USAGE;
			/* as `due work --retain`: 0 keeps everything */
			if (o->retain_us == 0)
				o->retain_us = DUE_RETAIN_ALL;
			o->soak_set = true;
			break;
		case 'A':
			if (strcmp(optarg, "default") && strcmp(optarg, "due"))
				return cli_usage_error(
				    c, "--pg-autovacuum: '%s': default or due",
				    optarg);
			o->pg_autovacuum_default = !strcmp(optarg, "default");
			o->soak_set = true;
			break;
		case 's':
			if (cli_parse_duration(c, "--spread", optarg,
					       &o->spread_us))
				return EXIT_USAGE;
			break;
		case 'i':
			if (cli_parse_duration(c, "--idle", optarg,
					       &o->idle_us))
				return EXIT_USAGE;
			break;
		default: return cli_bad_option(c, opt, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error(c, "unexpected argument '%s'",
				       argv[optind]);
	if (o->poll_us < 1000)
		return cli_usage_error(c, "--poll must be at least 1ms");
	if (o->exec && o->pipe)
		return cli_usage_error(c, "give --exec or --pipe, not both");
	if (o->pending_set && strcmp(o->workload, "drain") != 0)
		return cli_usage_error(c, "--pending applies to --workload "
					  "drain");
	if (o->pending_set && (o->exec || o->pipe || o->inline_mode))
		return cli_usage_error(c, "--pending measures the C no-op "
					  "drain (no --exec, --pipe or "
					  "--inline)");
	if (o->soak_set && strcmp(o->workload, "soak") != 0)
		return cli_usage_error(c, "--rate, --duration, --retain and "
					  "--pg-autovacuum apply to --workload "
					  "soak");
	if (o->pg_autovacuum_default && v_backend_of(cli_db_url(c)) != V_PG)
		return cli_usage_error(c, "--pg-autovacuum applies to a "
					  "postgres:// store");
	return 0;
}

int cmd_bench(int argc, char **argv)
{
	bopts o = {"all", 20000,   4,	     1,	    1000,  NULL,
		   50000, 5000000, 10000000, false, false, false};
	o.rate = 1000;
	o.duration_us = 180LL * 1000000;
	cli_ctx c = {.prog = "due bench"};
	vctx v = {0};
	bool any = false;
	int rc = parse(&c, &o, argc, argv);

	if (rc)
		return rc < 0 ? 0 : rc;
	o.json = c.json;
	for (size_t i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++)
		any |= wanted(o.workload, &workloads[i]);
	if (!any)
		return cli_usage_error(&c,
				       "unknown workload '%s' (enqueue, cycle, "
				       "drain, lateness, idle, depth, memory, "
				       "soak or all)",
				       o.workload);
	if (!strcmp(o.workload, "memory") && !is_redis(cli_db_url(&c)))
		return cli_usage_error(&c, "the memory workload measures a "
					   "Redis store (--db redis://...)");
	if ((rc = v_setup(&v, cli_db_url(&c))) < 0)
		return rc == DUE_EINVAL ? cli_fail(&c, rc) : EXIT_STORE;
	v.keep = o.keep;
	for (size_t i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++) {
		if (!wanted(o.workload, &workloads[i]))
			continue;
		if (bench_fresh(&v, workloads[i].name) < 0) {
			rc = EXIT_STORE;
			break;
		}
		workloads[i].run(&v, &o);
		v_done(&v);
	}
	v_teardown(&v);
	return rc;
}
