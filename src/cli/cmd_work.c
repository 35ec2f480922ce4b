/*
** cmd_work.c - `due work`: run a worker whose handlers are commands.
**
** Each kind's handler is a shell command run with the task's payload on
** stdin (see due_exec_handler in src/worker/exec.c), or a long-lived
** command that takes one JSON line per task and answers one line
** (--pipe, due_pipe_handler in src/worker/pipe.c).  SIGTERM, SIGINT or
** SIGHUP (a closed terminal) stops claiming and lets in-flight tasks finish
** within --grace; a second signal ends the grace at once (handlers are
** stopped, their tries committed as failed so the tasks are retried); a
** third exits at once, and each command's guard then stops its process
** group (leases expire and the tasks are reclaimed).
*/
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static const char usage[] =
    "usage: due work [--exec CMD | --pipe CMD] [--handler KIND=[pipe:]CMD]...\n"
    "                [--kinds K1,K2]\n"
    "                [--concurrency N] [--pool KIND=N]... [--lease DUR]\n"
    "                [--poll DUR] [--owner NAME] [--once] [--inline]\n"
    "                [--grace DUR] [--kill-grace DUR] [--no-cron] "
    "[--no-wheel]\n"
    "                [--retain DUR]\n"
    "                [-v | -q]\n"
    "                [--db URL]\n"
    "\n"
    "Claim due tasks and run a command for each: /bin/sh -c CMD with the\n"
    "payload on stdin and DUE_TASK_ID, DUE_KIND, DUE_ATTEMPT,\n"
    "DUE_IDEMPOTENCY_KEY (task-<id>, the same on every attempt), "
    "DUE_DUE_AT,\n"
    "DUE_PRIORITY, DUE_GROUP (when the task has one) and\n"
    "DUE_PARENT_RESULTS (a task added with `due add --after`: its parents'\n"
    "results, one JSON object by parent id) in the environment.\n"
    "Exit 0 completes the task with stdout as result; any other exit fails\n"
    "it with the tail of stderr (retried with backoff, DEAD when its\n"
    "attempts are used up).  A command still running at its time limit\n"
    "(`due add --timeout`, `due kind set --timeout`) is stopped and its try\n"
    "fails as TIMED_OUT.  Paused kinds and rate or running limits set with\n"
    "`due kind set` are obeyed across every worker.\n"
    "\n"
    "  --exec CMD          handler for every kind (or for --kinds)\n"
    "  --pipe CMD          handler for every kind (or for --kinds): CMD is\n"
    "                      started once per slot and kept; it reads one JSON\n"
    "                      line per task on stdin ({\"id\", \"kind\", "
    "\"attempt\",\n"
    "                      \"due_at\", \"idempotency_key\", \"priority\",\n"
    "                      \"payload\" or \"payload_b64\", \"group\" for a "
    "task\n"
    "                      with a group, \"parent_results\" for one added\n"
    "                      with --after}) and answers one line on stdout:\n"
    "                      {\"id\", \"attempt\", \"ok\": true, \"result\"} or\n"
    "                      {\"id\", \"attempt\", \"ok\": false, \"error\"}.  "
    "A\n"
    "                      process that dies or writes a malformed line fails\n"
    "                      its try and is restarted with backoff; one that\n"
    "                      writes while no task is outstanding is replaced\n"
    "                      before the next task; a lost lease, a cancel or a\n"
    "                      time limit stops it (SIGTERM, then SIGKILL) and "
    "the\n"
    "                      next task gets a fresh one; its stderr goes to the\n"
    "                      log with the task id, whole lines, at most 1000\n"
    "                      lines or 256 KiB a second (the rest is counted);\n"
    "                      at the worker's stop: EOF, SIGTERM 2 s later (at\n"
    "                      once on a second signal), SIGKILL after\n"
    "                      --kill-grace (docs/INTERFACE.md)\n"
    "  --handler KIND=CMD  handler for one kind (repeatable; wins over "
    "--exec\n"
    "                      and --pipe); KIND=pipe:CMD makes it a pipe "
    "handler\n"
    "  --kinds K1,K2       claim only these kinds\n"
    "  --concurrency N     tasks run at once in the shared pool (default 4)\n"
    "  --pool KIND=N       give KIND its own pool of N: a slow kind cannot\n"
    "                      starve the others (repeatable)\n"
    "  --lease DUR         lease per try, renewed every DUR/3 (default 30s);\n"
    "                      a try whose renewals the store has not confirmed\n"
    "                      for DUR - 15% is stopped, and its command killed\n"
    "                      by DUR - 10%, whatever the store does (by its\n"
    "                      guard process if the worker is stopped); store\n"
    "                      calls wait at most DUR/3 (the URL's timeout=\n"
    "                      lowers that)\n"
    "  --poll DUR          safety poll (default 30s): new and due tasks are "
    "found\n"
    "                      at once through a timing wheel woken by every\n"
    "                      submit, retry, requeue and reclaim (PostgreSQL\n"
    "                      NOTIFY, the SQLite wake file, Redis pub/sub,\n"
    "                      MySQL's wake row);\n"
    "                      with --no-wheel or --once, the poll interval (1s)\n"
    "  --no-wheel          find due tasks by polling only\n"
    "  --horizon DUR       how far ahead the wheel holds task ids (60s; a\n"
    "                      refill reaches half of it past the next safety\n"
    "                      poll, so a longer --poll loads further)\n"
    "  --owner NAME        lease owner name (default host:pid)\n"
    "  --once              run what is due now, then exit (it waits for\n"
    "                      tasks held by a running limit, or by a rate\n"
    "                      that frees within 10s; not for paused kinds)\n"
    "  --inline            run handlers in the claiming thread, one by one\n"
    "  --grace DUR         on SIGTERM/SIGINT/SIGHUP, time for running tasks\n"
    "                      (30s); a second signal stops the handlers now\n"
    "                      (their tasks are retried), a third exits\n"
    "  --kill-grace DUR    SIGTERM -> SIGKILL delay for a command whose lease\n"
    "                      was lost, whose task was cancelled or that ran\n"
    "                      past its time limit, or stopped by a second\n"
    "                      signal, and for a pipe process the worker stops\n"
    "                      (5s); never past the lease\n"
    "  --no-cron           do not run the periodic schedules (`due cron`);\n"
    "                      by default every worker runs them, and each slot\n"
    "                      still becomes exactly one task\n"
    "  --misfire-grace DUR a schedule's slot found later than this was missed\n"
    "                      (no scheduler ran): its misfire policy applies "
    "(30s)\n"
    "  --retain DUR        delete DONE and CANCELLED tasks (with their\n"
    "                      history) that ended more than DUR ago (7d; 0\n"
    "                      keeps everything); one worker of the store\n"
    "                      prunes at a time, 1,000 tasks a transaction,\n"
    "                      every minute while it finds some, every 5\n"
    "                      minutes (at most half of DUR) once it found\n"
    "                      none.  SCHEDULED, CLAIMED and\n"
    "                      DEAD tasks are never deleted\n"
    "  -v, -q              log every task / only errors\n";

enum {
	O_EXEC = 'e',
	O_PIPE = 'X',
	O_HANDLER = 'H',
	O_KINDS = 'k',
	O_CONC = 'c',
	O_POOL = 'P',
	O_LEASE = 'l',
	O_POLL = 'p',
	O_OWNER = 'o',
	O_ONCE = '1',
	O_INLINE = 'I',
	O_GRACE = 'g',
	O_KGRACE = 'K',
	O_NOCRON = 'N',
	O_MGRACE = 'M',
	O_NOWHEEL = 'W',
	O_HORIZON = 'Z',
	O_RETAIN = 'R'
};

#define MAX_KINDS 64

/* One handler command: --exec, --pipe or a --handler. */
typedef struct work_cmd {
	due_exec_opts x; /* x.command: the command */
	bool pipe;	 /* a pipe handler: `p`, made by register_all */
	due_pipe *p;
} work_cmd;

typedef struct work_args {
	due_worker_opts wo;
	work_cmd any; /* --exec or --pipe */
	const char *kinds[MAX_KINDS];
	size_t n_kinds;
	char *kinds_buf;
	struct {
		char *kind;
		work_cmd x;
	} handlers[MAX_KINDS];
	size_t n_handlers;
	struct {
		char *kind;
		int n;
	} pools[MAX_KINDS];
	size_t n_pools;
	int64_t kill_grace;
	bool poll_set, horizon_set; /* given on the command line */
} work_args;

static due_worker *volatile running;
static volatile sig_atomic_t signals;

/*
** First signal: graceful stop.  Second: forced stop (handlers told to stop
** now, their tries committed as failed).  Third: exit at once; each
** command's guard still stops its process group.
*/
static void on_signal(int sig)
{
	if (signals++ > 1)
		_exit(128 + sig);
	if (running)
		due_worker_stop(running);
}

/* Only white space (or nothing): a command that would run nothing. */
static bool blank(const char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	return *s == '\0';
}

/* Split "KIND=VALUE"; returns the value or NULL (usage error printed). */
static char *split_kv(const cli_ctx *c, const char *opt, char *arg)
{
	char *eq = strchr(arg, '=');
	if (!eq || eq == arg || blank(eq + 1)) {
		cli_usage_error(c, "%s expects KIND=VALUE, got '%s'", opt, arg);
		return NULL;
	}
	*eq = '\0';
	return eq + 1;
}

static int add_kinds(const cli_ctx *c, work_args *a, const char *list)
{
	free(a->kinds_buf);
	a->kinds_buf = strdup(list);
	a->n_kinds = 0;
	for (char *save = NULL, *k = strtok_r(a->kinds_buf, ",", &save); k;
	     k = strtok_r(NULL, ",", &save)) {
		if (a->n_kinds == MAX_KINDS)
			return cli_usage_error(c, "--kinds: at most %d kinds",
					       MAX_KINDS);
		a->kinds[a->n_kinds++] = k;
	}
	if (a->n_kinds == 0)
		return cli_usage_error(c, "--kinds: empty list");
	return 0;
}

static int pool_size_for(const work_args *a, const char *kind)
{
	for (size_t i = 0; i < a->n_pools; i++)
		if (strcmp(a->pools[i].kind, kind) == 0)
			return a->pools[i].n;
	return 0;
}

static bool has_handler(const work_args *a, const char *kind)
{
	for (size_t i = 0; i < a->n_handlers; i++)
		if (strcmp(a->handlers[i].kind, kind) == 0)
			return true;
	return false;
}

/*
** Register one handler command for `kind` (NULL: every kind).  A pipe
** command's due_pipe is made on first use and shared by every kind it
** serves (one process per slot that runs it).
*/
static int reg(due_worker *w, const char *kind, work_cmd *cmd, int64_t kgrace,
	       int pool)
{
	cmd->x.kill_grace_us = kgrace;
	if (!cmd->pipe)
		return due_worker_register(w, kind, due_exec_handler, &cmd->x,
					   pool);
	if (!cmd->p) {
		due_pipe_opts po = DUE_PIPE_OPTS_INIT;
		po.command = cmd->x.command;
		po.kill_grace_us = kgrace;
		if (due_pipe_new(&cmd->p, &po) < 0)
			return -1;
	}
	return due_worker_register(w, kind, due_pipe_handler, cmd->p, pool);
}

/* Register every handler; errors name the kind. */
static int register_all(const cli_ctx *c, work_args *a, due_worker *w)
{
	int64_t kg = a->kill_grace;

	for (size_t i = 0; i < a->n_handlers; i++)
		if (reg(w, a->handlers[i].kind, &a->handlers[i].x, kg,
			pool_size_for(a, a->handlers[i].kind)) < 0)
			return cli_usage_error(c, "--handler %s: %s",
					       a->handlers[i].kind,
					       due_error_last());
	if (!a->any.x.command)
		return 0;
	if (a->n_kinds == 0) {
		for (size_t i = 0; i < a->n_pools; i++)
			if (!has_handler(a, a->pools[i].kind) &&
			    reg(w, a->pools[i].kind, &a->any, kg,
				a->pools[i].n) < 0)
				return cli_usage_error(c, "--pool %s: %s",
						       a->pools[i].kind,
						       due_error_last());
		if (reg(w, NULL, &a->any, kg, 0) < 0)
			return cli_usage_error(
			    c, "%s: %s", a->any.pipe ? "--pipe" : "--exec",
			    due_error_last());
		return 0;
	}
	for (size_t i = 0; i < a->n_kinds; i++)
		if (!has_handler(a, a->kinds[i]) &&
		    reg(w, a->kinds[i], &a->any, kg,
			pool_size_for(a, a->kinds[i])) < 0)
			return cli_usage_error(c, "--kinds %s: %s", a->kinds[i],
					       due_error_last());
	return 0;
}

/* After the worker is freed: stop and reap the pipe processes. */
static void free_pipes(work_args *a)
{
	due_pipe_free(a->any.p);
	a->any.p = NULL;
	for (size_t i = 0; i < a->n_handlers; i++) {
		due_pipe_free(a->handlers[i].x.p);
		a->handlers[i].x.p = NULL;
	}
}

static int check_args(const cli_ctx *c, work_args *a)
{
	if (!a->any.x.command && a->n_handlers == 0)
		return cli_usage_error(
		    c, "give --exec CMD or --handler KIND=CMD (or --pipe CMD)");
	for (size_t i = 0; i < a->n_pools; i++)
		if (!has_handler(a, a->pools[i].kind) && !a->any.x.command)
			return cli_usage_error(
			    c, "--pool %s: no handler for that kind",
			    a->pools[i].kind);
	if (a->n_kinds)
		for (size_t i = 0; i < a->n_handlers; i++) {
			size_t k = 0;
			while (k < a->n_kinds &&
			       strcmp(a->kinds[k], a->handlers[i].kind))
				k++;
			if (k == a->n_kinds)
				return cli_usage_error(
				    c, "--handler %s is not in --kinds",
				    a->handlers[i].kind);
		}
	return 0;
}

static int run(cli_ctx *c, work_args *a)
{
	due_worker *w = NULL;
	struct sigaction sa;
	int rc;

	a->wo.url = cli_db_url(c);
	/* fail fast on a bad URL or schema instead of retrying forever */
	due_db *probe = NULL;
	if ((rc = cli_open(c, &probe)))
		return rc;
	if (due_db_warning(probe))
		fprintf(stderr, "%s: warning: %s\n", c->prog,
			due_db_warning(probe));
	due_close(probe);
	if (due_worker_new(&w, &a->wo) < 0)
		return cli_fail(c, due_error_last_code());
	if ((rc = register_all(c, a, w))) {
		due_worker_free(w);
		free_pipes(a);
		return rc;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	running = w;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL); /* a closed terminal: stop gracefully */
	rc = due_worker_run(w);
	running = NULL;
	due_worker_free(w);
	free_pipes(a);
	return rc < 0 ? cli_fail(c, rc) : 0;
}

static int parse_opt(cli_ctx *c, work_args *a, int opt, char *arg)
{
	long v;
	char *val;

	switch (opt) {
	case O_EXEC:
	case O_PIPE:
		/* `--exec "$UNSET"` must not mark every task DONE unrun */
		if (blank(arg))
			return cli_usage_error(c, "%s: empty command",
					       opt == O_PIPE ? "--pipe"
							     : "--exec");
		if (a->any.x.command && a->any.pipe != (opt == O_PIPE))
			return cli_usage_error(
			    c, "give --exec or --pipe, not both (--handler "
			       "KIND=pipe:CMD mixes them per kind)");
		a->any.x.command = arg;
		a->any.pipe = opt == O_PIPE;
		return 0;
	case O_HANDLER:
		if (!(val = split_kv(c, "--handler", arg)))
			return EXIT_USAGE;
		if (a->n_handlers == MAX_KINDS)
			return cli_usage_error(c, "too many --handler options");
		a->handlers[a->n_handlers].kind = arg;
		a->handlers[a->n_handlers].x =
		    (work_cmd){.x = DUE_EXEC_OPTS_INIT};
		if (strncmp(val, "pipe:", 5) == 0) {
			val += 5;
			if (blank(val))
				return cli_usage_error(
				    c, "--handler %s=pipe: empty command", arg);
			a->handlers[a->n_handlers].x.pipe = true;
		}
		a->handlers[a->n_handlers++].x.x.command = val;
		return 0;
	case O_POOL:
		if (!(val = split_kv(c, "--pool", arg)))
			return EXIT_USAGE;
		if (a->n_pools == MAX_KINDS)
			return cli_usage_error(c, "too many --pool options");
		if (cli_parse_int(c, "--pool size", val, 1, 1024, &v))
			return EXIT_USAGE;
		a->pools[a->n_pools].kind = arg;
		a->pools[a->n_pools++].n = (int)v;
		return 0;
	case O_KINDS: return add_kinds(c, a, arg);
	case O_CONC:
		if (cli_parse_int(c, "--concurrency", arg, 1, 1024, &v))
			return EXIT_USAGE;
		a->wo.concurrency = (int)v;
		return 0;
	case O_LEASE:
		return cli_parse_duration(c, "--lease", arg, &a->wo.lease_us);
	case O_POLL:
		a->poll_set = true;
		return cli_parse_duration(c, "--poll", arg, &a->wo.poll_us);
	case O_GRACE:
		return cli_parse_duration(c, "--grace", arg, &a->wo.grace_us);
	case O_KGRACE:
		return cli_parse_duration(c, "--kill-grace", arg,
					  &a->kill_grace);
	case O_OWNER: a->wo.owner = arg; return 0;
	case O_ONCE: a->wo.once = true; return 0;
	case O_INLINE: a->wo.mode = DUE_MODE_INLINE; return 0;
	case O_NOCRON: a->wo.cron = false; return 0;
	case O_NOWHEEL: a->wo.no_wheel = true; return 0;
	case O_HORIZON:
		a->horizon_set = true;
		return cli_parse_duration(c, "--horizon", arg,
					  &a->wo.horizon_us);
	case O_MGRACE:
		return cli_parse_duration(c, "--misfire-grace", arg,
					  &a->wo.cron_grace_us);
	case O_RETAIN:
		if (cli_parse_duration(c, "--retain", arg, &a->wo.retain_us))
			return EXIT_USAGE;
		if (a->wo.retain_us == 0) /* `--retain 0` keeps everything */
			a->wo.retain_us = DUE_RETAIN_ALL;
		return 0;
	case 'v': a->wo.log_level = 2; return 0;
	case 'q': a->wo.log_level = 0; return 0;
	default: return -1;
	}
}

int cmd_work(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"exec", required_argument, NULL, O_EXEC},
	    {"pipe", required_argument, NULL, O_PIPE},
	    {"handler", required_argument, NULL, O_HANDLER},
	    {"kinds", required_argument, NULL, O_KINDS},
	    {"concurrency", required_argument, NULL, O_CONC},
	    {"pool", required_argument, NULL, O_POOL},
	    {"lease", required_argument, NULL, O_LEASE},
	    {"poll", required_argument, NULL, O_POLL},
	    {"owner", required_argument, NULL, O_OWNER},
	    {"once", no_argument, NULL, O_ONCE},
	    {"inline", no_argument, NULL, O_INLINE},
	    {"grace", required_argument, NULL, O_GRACE},
	    {"kill-grace", required_argument, NULL, O_KGRACE},
	    {"no-cron", no_argument, NULL, O_NOCRON},
	    {"no-wheel", no_argument, NULL, O_NOWHEEL},
	    {"horizon", required_argument, NULL, O_HORIZON},
	    {"misfire-grace", required_argument, NULL, O_MGRACE},
	    {"retain", required_argument, NULL, O_RETAIN},
	    {"verbose", no_argument, NULL, 'v'},
	    {"quiet", no_argument, NULL, 'q'},
	    CLI_COMMON_OPTS,
	    {0}};
	work_args a = {.wo = DUE_WORKER_OPTS_INIT,
		       .any = {.x = DUE_EXEC_OPTS_INIT},
		       .kill_grace = 5000000};
	cli_ctx c = {.prog = "due work"};
	int opt, rc = 0;

	a.wo.cron = true;
	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":hvq", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		if (opt == 'h') {
			fputs(usage, stdout);
			goto done;
		}
		if ((rc = parse_opt(&c, &a, opt, optarg)) < 0)
			rc = cli_bad_option(&c, opt, argv);
		if (rc)
			goto done;
	}
	if (optind < argc) {
		rc = cli_usage_error(&c, "unexpected argument '%s'",
				     argv[optind]);
		goto done;
	}
	/* (0 is the library's "the default": given, it is a mistake) */
	const char *low =
	    a.wo.lease_us < 3000		? "--lease must be at least 3ms"
	    : a.wo.lease_us > DUE_LEASE_MAX_US	? "--lease must be at most 7d"
	    : a.poll_set && a.wo.poll_us < 1000 ? "--poll must be at least 1ms"
	    : a.horizon_set && a.wo.horizon_us < 1000
		? "--horizon must be at least 1ms"
		: NULL;
	if (low) {
		rc = cli_usage_error(&c, "%s", low);
		goto done;
	}
	if (!(rc = check_args(&c, &a)))
		rc = run(&c, &a);
done:
	free(a.kinds_buf);
	return rc;
}
