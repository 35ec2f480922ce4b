/*
** main.c - `due` entry point: the global options and the table of
** subcommands.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/admin.h"

typedef struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} command;

static const command commands[] = {
    {"init", cmd_init, "create or upgrade the store schema"},
    {"add", cmd_add, "schedule a task (or a batch of tasks)"},
    {"cancel", cmd_cancel, "cancel a task and say where it was"},
    {"reschedule", cmd_reschedule,
     "move a waiting task to a new due time (and payload)"},
    {"show", cmd_show, "show one task and its attempts"},
    {"wait", cmd_wait, "wait until a task is finished; print its result"},
    {"ls", cmd_ls, "list tasks"},
    {"dead", cmd_dead, "list dead letters"},
    {"retry", cmd_retry, "move a DEAD task back to SCHEDULED"},
    {"requeue", cmd_requeue,
     "take a stuck CLAIMED task back (fences its holder)"},
    {"kill", cmd_kill, "end a waiting or running task as DEAD"},
    {"cron", cmd_cron, "periodic schedules: add, ls, rm, next"},
    {"kind", cmd_kind,
     "flow control of a kind: pause, rate, running limits, time limit"},
    {"work", cmd_work, "run a worker: claim due tasks, run a command for each"},
    {"verify", cmd_verify,
     "run the contract cases against a store (real processes)"},
    {"bench", cmd_bench, "measure this store with in-process no-op handlers"},
    {"scratch", cmd_scratch, "make or drop a throwaway store beside a store"},
    {"stats", cmd_stats, "counts by state, backlog age, lateness"},
    {"health", cmd_health, "exit 0 when UP, 1 when dead letters exist"},
    {"prune", cmd_prune, "delete finished tasks older than a retention"},
    {"serve", cmd_serve, "HTTP API, dashboard, health and Prometheus metrics"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: due [--db URL] [--json] COMMAND [OPTIONS]\n"
		   "\n"
		   "due runs an action once a moment has passed, durably: "
		   "tasks live in a\n"
		   "store (a SQLite file, PostgreSQL, Redis or MySQL/MariaDB) "
		   "and are\n"
		   "claimed by workers under leases with fencing tokens.\n"
		   "\n"
		   "Commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name,
			commands[i].summary);
	fprintf(f, "\n"
		   "Every command takes --db URL (else $DUE_DB, else "
		   "sqlite:./due.db) and\n"
		   "--help.  --db and --json may also come before the "
		   "command (`due --db URL\n"
		   "init`); given again after it, the later one wins.  "
		   "Store URLs:\n"
		   "sqlite:PATH[?sync=full|normal], postgres://...,\n"
		   "redis://HOST:PORT/N[?prefix=NAME], "
		   "mysql://USER@HOST:PORT/DB (README: Stores).\n"
		   "`due --version` prints the version and the schema it "
		   "writes.\n"
		   "\n"
		   "On a terminal, long commands (add --batch, prune, init "
		   "of an old store)\n"
		   "keep a progress line on stderr; not under --json, nor "
		   "when stderr is\n"
		   "not a terminal.\n"
		   "\n"
		   "Exit codes: 0 ok, 1 health DOWN, 2 bad arguments or input "
		   "(nothing\n"
		   "changed), 3 not found, 4 wrong state or key conflict, 5 "
		   "store error,\n"
		   "6 schema missing or older (run `due init`); `due wait`: 4 "
		   "DEAD or\n"
		   "CANCELLED, 124 timed out.\n");
}

/*
** Global options, before the command (as git's): --db URL, --db=URL and
** --json, which every command takes.  Each is handed to the command as if
** it were written right after the command's name, so `due --db URL init`
** runs `init --db URL`, and an option repeated after the command wins (it
** comes later).  --help and --version stand alone.  Returns the index of
** the command in argv, 0 when main has answered (*rc set), and sets
** *nglobal to the number of argv entries between argv[0] and it that are
** global options (a "--" that ends them is not counted).
*/
static int globals(int argc, char **argv, int *nglobal, int *rc)
{
	int i;

	*nglobal = 0;
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return (*rc = 0), 0;
		}
		if (!strcmp(a, "--version")) {
			printf("due %s (schema %d)\n", DUE_VERSION,
			       DUE_SCHEMA_VERSION);
			return (*rc = 0), 0;
		}
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (!strcmp(a, "--db") && i + 1 < argc) {
			i++;
			*nglobal += 2;
		} else if (!strncmp(a, "--db=", 5) || !strcmp(a, "--json")) {
			*nglobal += 1;
		} else {
			fprintf(stderr,
				strcmp(a, "--db") == 0
				    ? "due: option '%s' needs a value\n"
				    : "due: unknown option '%s' before the "
				      "command (global options: --db URL, "
				      "--json)\n",
				a);
			fputs("Try 'due --help'.\n", stderr);
			return (*rc = EXIT_USAGE), 0;
		}
	}
	if (i >= argc) {
		fputs("due: missing command after the global options\n"
		      "Try 'due --help'.\n",
		      stderr);
		return (*rc = EXIT_USAGE), 0;
	}
	return i;
}

/*
** The command's own argv: its name, then the global options (argv[1]
** up to nglobal of them), then what followed it.  NULL on ENOMEM.
*/
static char **command_argv(int argc, char **argv, int cmd, int nglobal,
			   int *out_argc)
{
	int n = 1 + nglobal + (argc - cmd - 1), k = 0;
	char **v = calloc((size_t)n + 1, sizeof(*v));

	if (!v)
		return NULL;
	v[k++] = argv[cmd];
	for (int i = 1; i < 1 + nglobal; i++)
		v[k++] = argv[i];
	for (int i = cmd + 1; i < argc; i++)
		v[k++] = argv[i];
	*out_argc = n;
	return v;
}

int main(int argc, char **argv)
{
	int cmd, nglobal, rc = 0, cargc;
	char **cargv;

	/* The process is ours, not a host's: each backend may tune its
	   library process-wide (SQLite: no memory statistics, whose global
	   mutex cost 7 % CPU per task), before any other call into it. */
	due__admin_process_own();
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!(cmd = globals(argc, argv, &nglobal, &rc)))
		return rc;
	if (strcmp(argv[cmd], "help") == 0) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[cmd], commands[i].name) != 0)
			continue;
		if (cmd == 1) /* no global options: argv as it came */
			return commands[i].run(argc - 1, argv + 1);
		if (!(cargv = command_argv(argc, argv, cmd, nglobal, &cargc))) {
			fputs("due: out of memory\n", stderr);
			return EXIT_STORE;
		}
		rc = commands[i].run(cargc, cargv);
		free(cargv);
		return rc;
	}
	fprintf(stderr, "due: unknown command '%s'\nTry 'due --help'.\n",
		argv[cmd]);
	return EXIT_USAGE;
}
