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
**             (due's own count; where the server counts its commands, as
**             Redis and MySQL/MariaDB do, also its count over the same
**             window)
**   memory    where the server says what memory it holds (Redis): that
**             before and after --n (default 100,000) pending tasks with a
**             16-byte payload, due in an hour: bytes per pending task.
**             Not part of "all".
**   depth     claim latency (claim 1 -> complete 1, through the C API) with
**             1,000 tasks pending over 10 priorities, then with --n
**             (default 1,000,000): all due ("due"), and all but 1,000 due
**             in an hour, the due ones at the highest priority number
**             ("future", the worst case for a claim that scans the
**             priorities in order).  Not part of "all": it fills a big
**             store.
**   after     run-after: a chain of --n tasks (default 1,000), each
**             after the one before, and a fan-in of --n parents (at
**             most 1,000) to one child, one worker: the time per link,
**             the child's release latency, no task early (bench_after.c).
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
** Scratch stores are `due verify`'s (verify_store.c), made and dropped by
** the store's backend (a file beside yours, a schema, a fresh Redis
** ?prefix=, a fresh MySQL/MariaDB database); --keep keeps them.  What the
** store's server counts itself (its WAL, its statement time, its commands,
** its memory) is read through the backend too (core/admin.h): bench
** shows counters by kind and names no backend.
**
** This file is the command: its options and the table of workloads.  The
** workloads are in bench_drain.c (enqueue, cycle, drain),
** bench_lateness.c (lateness, idle), bench_depth.c (depth, memory) and
** bench_soak.c; what they share in bench_util.c and bench_report.c.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/cli.h"

static const char usage[] =
    "usage: due bench [--workload "
    "enqueue|cycle|drain|lateness|idle|depth|memory|soak|after|all]\n"
    "                 [--n N] [--concurrency C] [--workers W] [--batch B]\n"
    "                 [--pending N] [--rate R] [--duration DUR] "
    "[--retain DUR]\n"
    "                 [--pg-autovacuum default|due]\n"
    "                 [--exec CMD | --pipe CMD] [--poll DUR] [--no-wheel]\n"
    "                 [--inline] [--spread DUR] [--idle DUR] [--keep] "
    "[--json]\n"
    "                 [--db URL]\n"
    "\n"
    "Measure the store named by --db with in-process no-op handlers.  Each\n"
    "workload runs in a scratch store of its own (a new SQLite file beside\n"
    "yours, a new PostgreSQL schema, a new Redis ?prefix= or a new MySQL\n"
    "database: the scratch store due_verify_<pid>_<n>, said on stderr at\n"
    "the start; see due scratch)\n"
    "and never touches your tasks.  SIGINT, SIGTERM or SIGHUP stop the\n"
    "run: the workload in progress reports nothing, its scratch store is\n"
    "dropped, exit 128 + the signal.\n"
    "  --n N            tasks per workload (default 20000; lateness 2000,\n"
    "                   with --exec or --pipe 500; depth 1000000; after\n"
    "                   1000: a chain of N, a fan-in of N parents)\n"
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
    "                   with the wheel: the safety poll (default 30s)\n"
    "  --no-wheel       discover due tasks by polling only\n"
    "  --inline         run handlers in the claiming thread, one task at a\n"
    "                   time (drain: C inline workers)\n"
    "  --spread DUR     lateness: tasks due over this span (default 5s)\n"
    "  --idle DUR       idle: how long to watch (default 10s)\n"
    "  --warmup DUR     idle: how long the workers run before the watch\n"
    "                   starts (default 1.5s, 300ms for SQLite: start-up,\n"
    "                   such as each worker's first prune check 5 s after\n"
    "                   its start, is then in it; 6s leaves it out)\n"
    "  --keep           keep the scratch stores (default: drop them); each\n"
    "                   is named with its URL on stderr\n"
    "  --json           one JSON object per workload, one per line\n";

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
    {"after", w_after, true},
};

/* Does --workload `name` ask for workload w? */
static bool wanted(const char *name, const workload *w)
{
	return !strcmp(name, w->name) || (!strcmp(name, "all") && w->in_all);
}

/* One option of argv into o: 0, -1 after --help, or an exit code. */
static int parse_opt(cli_ctx *c, bopts *o, int opt, char **argv)
{
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
		if (cli_parse_int(c, "--workers", optarg, 1, 64, &o->workers))
			return EXIT_USAGE;
		o->workers_set = true;
		break;
	case 'b':
		if (cli_parse_int(c, "--batch", optarg, 1, 10000, &o->batch))
			return EXIT_USAGE;
		break;
	case 'e': o->exec = optarg; break;
	case 'X': o->pipe = optarg; break;
	case 'p':
		if (cli_parse_duration(c, "--poll", optarg, &o->poll_us))
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
		if (cli_parse_int(c, "--rate", optarg, 1, 100000, &o->rate))
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
		if (cli_parse_duration(c, "--retain", optarg, &o->retain_us))
			return EXIT_USAGE;
		/* as `due work --retain`: 0 keeps everything */
		if (o->retain_us == 0)
			o->retain_us = DUE_RETAIN_ALL;
		o->soak_set = true;
		break;
	case 'A':
		if (strcmp(optarg, "default") && strcmp(optarg, "due"))
			return cli_usage_error(
			    c, "--pg-autovacuum: '%s': default or due", optarg);
		o->pg_autovacuum_default = !strcmp(optarg, "default");
		o->soak_set = true;
		break;
	case 's':
		if (cli_parse_duration(c, "--spread", optarg, &o->spread_us))
			return EXIT_USAGE;
		break;
	case 'i':
		if (cli_parse_duration(c, "--idle", optarg, &o->idle_us))
			return EXIT_USAGE;
		break;
	case 'U':
		if (cli_parse_duration(c, "--warmup", optarg, &o->warmup_us))
			return EXIT_USAGE;
		o->warmup_set = true;
		break;
	default: return cli_bad_option(c, opt, argv);
	}
	return 0;
}

/*
** Whether the backend of the store at url has counters of `kinds`
** (DUE_COUNTER_*), or (untune) storage settings of due's to take back:
** what a workload needs of it.  A URL no backend reads has none.
*/
static bool store_has(const char *url, unsigned kinds, bool untune)
{
	due_admin *a = NULL;
	bool has = due__admin_open(&a, url) == 0 &&
		   (untune ? due__admin_can_untune(a)
			   : (due__admin_counter_kinds(a) & kinds) != 0);

	due__admin_free(a);
	return has;
}

#define BENCH_MAX_WAIT_US (24LL * 3600 * 1000000)

/* The options together: 0 or an exit code after a usage error. */
static int parse_check(cli_ctx *c, const bopts *o)
{
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
	if (o->warmup_set && strcmp(o->workload, "idle") != 0)
		return cli_usage_error(c,
				       "--warmup applies to --workload idle");
	/* each is slept in milliseconds counted in an int */
	if (o->idle_us > BENCH_MAX_WAIT_US || o->warmup_us > BENCH_MAX_WAIT_US)
		return cli_usage_error(c, "--idle and --warmup must be at most "
					  "24h");
	if (o->pg_autovacuum_default && !store_has(cli_db_url(c), 0, true))
		return cli_usage_error(c, "--pg-autovacuum applies to a "
					  "postgres:// store");
	return 0;
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
	    {"warmup", required_argument, NULL, 'U'},
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
	int opt, rc;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(c, opt, optarg))
			continue;
		if ((rc = parse_opt(c, o, opt, argv)) != 0)
			return rc;
	}
	if (optind < argc)
		return cli_usage_error(c, "unexpected argument '%s'",
				       argv[optind]);
	return parse_check(c, o);
}

int cmd_bench(int argc, char **argv)
{
	bopts o = {"all", 20000,   4,	     1,	    1000,  NULL,
		   50000, 5000000, 10000000, false, false, false};
	o.rate = 1000;
	o.duration_us = 180LL * 1000000;
	cli_ctx c = {.prog = "due bench"};
	vctx v = {.prog = "due bench"};
	const char *stopped_in = NULL;
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
	if (!strcmp(o.workload, "memory") &&
	    !store_has(cli_db_url(&c), DUE_COUNTER_BYTES, false))
		return cli_usage_error(&c, "the memory workload measures a "
					   "Redis store (--db redis://...)");
	v_catch_signals();
	if ((rc = v_setup(&v, cli_db_url(&c))) < 0)
		return rc == DUE_EINVAL ? cli_fail(&c, rc) : EXIT_STORE;
	v.keep = o.keep;
	v_say_scratch(&v);
	for (size_t i = 0;
	     i < sizeof(workloads) / sizeof(workloads[0]) && !v_stopped();
	     i++) {
		if (!wanted(o.workload, &workloads[i]))
			continue;
		if (bench_fresh(&v, workloads[i].name) < 0) {
			bench_done(&v);
			rc = EXIT_STORE;
			break;
		}
		workloads[i].run(&v, &o);
		if (v_stopped())
			stopped_in = workloads[i].name;
		bench_done(&v);
	}
	v_teardown(&v);
	return v_stopped() && rc == 0 ? v_interrupted(&v, stopped_in) : rc;
}
