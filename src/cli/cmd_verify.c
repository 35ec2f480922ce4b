/*
** cmd_verify.c - `due verify`: the contract suite against a store URL.
**
** Each case runs in its own scratch namespace of the named store: for
** SQLite a new database file in a directory next to the user's file (same
** filesystem, same host clock), for PostgreSQL a new schema in the same
** database, dropped afterwards.  The user's tasks are never read or
** written.  Fault cases start real `due work` processes and use real
** kill -9, SIGSTOP and locks held by another session.  Redis gets a
** private key prefix and MySQL a private database (verify_store.c).
** Output: one `CASE name PASS|FAIL k=v...` line per case, `CASE name SKIP
** reason=...` for a case that needs what the store does not have (SQL,
** a query plan, row locks, a call it can stall: then `N skipped ...`),
** then `N passed, N failed`; exit 1 when any case failed.
*/
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/verify.h"

extern char **environ;

static const char usage[] =
    "usage: due verify [--db URL] [--case NAME[,NAME...]] [--list] [--keep] "
    "[-v]\n"
    "\n"
    "Run the contract cases against the store named by --db, with real\n"
    "worker processes, kill -9, SIGSTOP and locks held by another session.\n"
    "Every case works in a scratch namespace (a new SQLite file beside the\n"
    "store, a new PostgreSQL schema, a Redis key prefix, or a MySQL\n"
    "database: the URL's user needs CREATE and DROP) and never touches\n"
    "your tasks.  Prints one CASE line per case (SKIP with the reason for\n"
    "a case that needs what the store does not have, such as SQL) and\n"
    "`N passed, N failed`; exits 1 if a case failed.\n"
    "  --case NAMES   run only these cases     --list  print the case names\n"
    "  --keep         keep scratch stores and logs for inspection\n";

/* What a case needs beyond the store API, to say why it is skipped. */
enum {
	NEEDS_SQL = 1 << 0,   /* writes its own tables with raw SQL */
	NEEDS_PLAN = 1 << 1,  /* reads the claim's SQL query plan */
	NEEDS_LOCKS = 1 << 2, /* probes the engine's row locks with raw SQL */
	NEEDS_STALL = 1 << 3  /* stalls a store call from inside: another
				 session's lock (raw SQL) */
};

typedef struct vcase {
	const char *name;
	void (*run)(vctx *v);
	unsigned needs;
} vcase;

static const vcase cases[] = {
    {"normal_three_workers", v_normal_three_workers},
    {"boundary_not_before_due", v_boundary_not_before_due},
    {"boundary_claim_limit", v_boundary_claim_limit},
    {"boundary_partial_due_index", v_boundary_partial_due_index, NEEDS_PLAN},
    {"cancel_semantics", v_cancel_semantics},
    {"race_due_vs_cancel", v_race_due_vs_cancel},
    {"retry_backoff_then_done", v_retry_backoff_then_done},
    {"retry_exhausted_dead", v_retry_exhausted_dead},
    {"crash_kill9_lease_retry", v_crash_kill9_lease_retry},
    {"sigstop_late_commit_rejected", v_sigstop_late_commit_rejected},
    {"ext_key_per_task_dedup", v_ext_key_per_task_dedup},
    {"cancel_after_external_call", v_cancel_after_external_call},
    {"negative_naive_select_then_update", v_negative_naive_select_then_update,
     NEEDS_SQL},
    {"negative_unfenced_late_commit", v_negative_unfenced_late_commit,
     NEEDS_SQL},
    {"negative_ext_key_per_attempt", v_negative_ext_key_per_attempt},
    {"row_locks_honoured", v_row_locks_honoured, NEEDS_SQL | NEEDS_LOCKS},
    {"stalled_renewal_lease_clock", v_stalled_renewal_lease_clock,
     NEEDS_SQL | NEEDS_STALL},
    {"cron_once_per_slot_multi_instance", v_cron_once_per_slot_multi_instance},
    {"cron_misfire_policies", v_cron_misfire_policies},
    {"wheel_fire_exact_tick", v_wheel_fire_exact_tick},
    {"wheel_horizon_rejected", v_wheel_horizon_rejected},
    {"wheel_restart_needs_durable", v_wheel_restart_needs_durable},
    {"poll_vs_wheel", v_poll_vs_wheel},
    {"wheel_retry_punctual", v_wheel_retry_punctual},
    {"flow_pause", v_flow_pause},
    {"flow_rate", v_flow_rate},
    {"flow_max_running", v_flow_max_running},
    {"flow_group_limit", v_flow_group_limit},
    {"flow_timeout", v_flow_timeout},
    {"flow_kill9_group_slot", v_flow_kill9_group_slot},
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

double v_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void v_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

const char *v_path(vctx *v, const char *file, char *buf, size_t n)
{
	snprintf(buf, n, "%.1200s/%.64s", v->dir, file);
	return buf;
}

bool v_file_exists(vctx *v, void *name)
{
	char p[1300];
	return access(v_path(v, name, p, sizeof(p)), F_OK) == 0;
}

bool v_log_has(vctx *v, const char *log, const char *needle)
{
	char p[1300], line[2048];
	FILE *f = fopen(v_path(v, log, p, sizeof(p)), "r");
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	if (f)
		fclose(f);
	return found;
}

int v_lines(vctx *v, const char *file)
{
	char p[1300];
	FILE *f = fopen(v_path(v, file, p, sizeof(p)), "r");
	int n = 0, ch;
	if (!f)
		return 0;
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

void v_case(vctx *v, const char *name, bool pass, const char *fmt, ...)
{
	va_list ap;
	printf("CASE %s %s ", name, pass ? "PASS" : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (pass)
		v->passed++;
	else
		v->failed++;
}

int v_fresh(vctx *v, const char *name)
{
	due_open_opts o = DUE_OPEN_OPTS_INIT;

	v->seq++;
	snprintf(v->dir, sizeof(v->dir), "%.1024s/%02d-%.64s", v->root,
		 v->seq % 100, name);
	if (mkdir(v->dir, 0700) != 0 || v_scratch_url(v) < 0) {
		fprintf(stderr,
			"due verify: cannot make a scratch store in %s\n",
			v->dir);
		return -1;
	}
	o.create = true;
	if (due_open(&v->db, v->url, &o) < 0) {
		fprintf(stderr, "due verify: scratch store: %s\n",
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

pid_t v_worker(vctx *v, const char *log, ...)
{
	const char *argv[48] = {v->self, "work", "--db", v->url};
	char path[1300];
	posix_spawn_file_actions_t fa;
	int n = 4;
	va_list ap;
	pid_t pid;

	va_start(ap, log);
	for (const char *a; n < 46 && (a = va_arg(ap, const char *));)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	v_path(v, log, path, sizeof(path));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, path,
					 O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	if (posix_spawn(&pid, v->self, &fa, NULL, (char *const *)argv,
			environ) != 0)
		pid = -1;
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

int v_reap(pid_t pid, int timeout_ms)
{
	double end = v_now_ms() + timeout_ms;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st)
					     : 128 + WTERMSIG(st);
		if (r < 0)
			return -1;
		if (v_now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		v_sleep_ms(5);
	}
}

bool v_wait(vctx *v, int timeout_ms, bool (*cond)(vctx *, void *), void *arg)
{
	double end = v_now_ms() + timeout_ms;
	for (;;) {
		if (cond(v, arg))
			return true;
		if (v_now_ms() > end)
			return false;
		v_sleep_ms(5);
	}
}

due_id v_add(vctx *v, const char *kind, int64_t delay_us, int32_t max_attempts,
	     int64_t backoff_us, const char *payload)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s = {0};
	o.delay_us = delay_us;
	o.max_attempts = max_attempts;
	if (backoff_us > 0) {
		o.backoff_us = backoff_us;
		o.backoff_cap_us = backoff_us * 64;
	}
	if (due_schedule(v->db, &s, kind, payload ? payload : "",
			 payload ? strlen(payload) : 0, &o) < 0) {
		fprintf(stderr, "due verify: schedule: %s\n", due_error_last());
		return 0;
	}
	return s.id;
}

due_task *v_get(vctx *v, due_id id)
{
	due_task *t = NULL;
	if (due_get(v->db, &t, id) < 0)
		return NULL;
	return t;
}

static bool selected(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && strncmp(p, name, n) == 0)
			return true;
		p = e ? e + 1 : NULL;
	}
	return false;
}

/* The scratch root: beside the SQLite file, or under /tmp for PostgreSQL. */
static int make_root(vctx *v)
{
	if (v->sqlite) {
		const char *path = v->base_url + 7;
		if (strncmp(path, "///", 3) == 0)
			path += 2;
		int len = (int)strcspn(path, "?");
		if (len > 900) {
			fprintf(stderr, "due: store path too long\n");
			return -1;
		}
		snprintf(v->root, sizeof(v->root), "%.*s.scratch-XXXXXX", len,
			 path);
	} else {
		snprintf(v->root, sizeof(v->root), "/tmp/due-scratch-XXXXXX");
	}
	if (!mkdtemp(v->root)) {
		fprintf(stderr, "due: cannot create %s: %s\n", v->root,
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
	v->backend = v_backend_of(base_url);
	v->sqlite = v->backend == V_SQLITE;
	ssize_t n = readlink("/proc/self/exe", v->self, sizeof(v->self) - 1);
	if (n <= 0) {
		fprintf(stderr, "due: cannot find the due binary\n");
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
	if (!v->root[0])
		return;
	if (v->keep) {
		fprintf(stderr, "due: scratch kept in %s\n", v->root);
		return;
	}
	/* no shell: the path comes from the user's store URL */
	if (nftw(v->root, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
		fprintf(stderr, "due: could not remove %s\n", v->root);
}

/*
** Why case c cannot run on this store, or NULL when it can.  Only the
** cases that speak SQL themselves are skipped; every case that goes
** through due's API runs on every store.
*/
static const char *skip_reason(const vctx *v, const vcase *c)
{
	if ((c->needs & NEEDS_LOCKS) && v->backend == V_SQLITE)
		return "sqlite_has_no_row_locks (one writer holds the whole "
		       "database; claims cannot overlap)";
	if ((c->needs & NEEDS_LOCKS) && v->backend == V_REDIS)
		return "redis_has_no_row_locks (each transition is one "
		       "script; scripts do not interleave)";
	if ((c->needs & NEEDS_STALL) && v->backend == V_REDIS)
		return "redis_cannot_stall_one_call (no client holds a lock "
		       "another's call waits on: each call is one script, run "
		       "whole; a frozen TCP proxy stalls it in tests/cli)";
	if (v->backend == V_SQLITE || v->backend == V_PG || !c->needs)
		return NULL;
	if (v->backend == V_REDIS)
		return c->needs & NEEDS_SQL
			   ? "redis_has_no_sql (the control writes its own "
			     "naive tables with SQL)"
			   : "redis_has_no_query_plan (claims pop a sorted "
			     "set scored by due time; no index to check)";
	if (v->backend == V_MYSQL && (c->needs & NEEDS_SQL) &&
	    v_negative_mysql_ready())
		return NULL;
	if (v->backend == V_MYSQL && (c->needs & NEEDS_PLAN) &&
	    v_plan_mysql_ready())
		return NULL;
	return c->needs & NEEDS_SQL
		   ? "no_raw_sql_session (this build's raw SQL does not "
		     "speak this store)"
		   : "no_query_plan_check (this build reads SQLite and "
		     "PostgreSQL plans only)";
}

static int run_cases(vctx *v, const char *only)
{
	int skipped = 0;

	for (size_t i = 0; i < N_CASES; i++) {
		const char *why;
		if (only && !selected(only, cases[i].name))
			continue;
		if ((why = skip_reason(v, &cases[i]))) {
			printf("CASE %s SKIP reason=%s\n", cases[i].name, why);
			skipped++;
			continue;
		}
		if (v_fresh(v, cases[i].name) < 0) {
			v_case(v, cases[i].name, false, "error=scratch_store");
			continue;
		}
		cases[i].run(v);
		v_done(v);
	}
	if (skipped)
		printf("%d skipped (they need what this store does not "
		       "have)\n",
		       skipped);
	printf("%d passed, %d failed\n", v->passed, v->failed);
	return v->failed ? EXIT_DOWN : 0;
}

int cmd_verify(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"case", required_argument, NULL, 'c'},
	    {"list", no_argument, NULL, 'l'},
	    {"keep", no_argument, NULL, 'k'},
	    {"verbose", no_argument, NULL, 'v'},
	    CLI_COMMON_OPTS,
	    {0}};
	cli_ctx c = {.prog = "due verify"};
	vctx v = {0};
	const char *only = NULL;
	int opt, rc;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":hv", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		switch (opt) {
		case 'h': fputs(usage, stdout); return 0;
		case 'c': only = optarg; break;
		case 'k': v.keep = true; break;
		case 'v': v.verbose = 1; break;
		case 'l':
			for (size_t i = 0; i < N_CASES; i++)
				puts(cases[i].name);
			return 0;
		default: return cli_bad_option(&c, opt, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error(&c, "unexpected argument '%s'",
				       argv[optind]);
	if (only) {
		for (const char *p = only; *p;) {
			size_t len = strcspn(p, ",");
			bool known = false;
			for (size_t i = 0; i < N_CASES; i++)
				known |= strlen(cases[i].name) == len &&
					 !strncmp(cases[i].name, p, len);
			if (!known)
				return cli_usage_error(
				    &c,
				    "unknown case '%.*s' (see "
				    "--list)",
				    (int)len, p);
			p += len + (p[len] == ',');
		}
	}
	if ((rc = v_setup(&v, cli_db_url(&c))) < 0)
		return rc == DUE_EINVAL ? cli_fail(&c, rc) : EXIT_STORE;
	rc = run_cases(&v, only);
	v_teardown(&v);
	return rc;
}
