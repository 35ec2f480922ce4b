/*
** main.c - `due` entry point: the table of subcommands.
*/
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "cli/cli.h"

typedef struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} command;

static const command commands[] = {
    {"init", cmd_init, "create or upgrade the store schema"},
    {"add", cmd_add, "schedule a task (or a batch of tasks)"},
    {"cancel", cmd_cancel, "cancel a task and say where it was"},
    {"show", cmd_show, "show one task and its attempts"},
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
    {"stats", cmd_stats, "counts by state, backlog age, lateness"},
    {"health", cmd_health, "exit 0 when UP, 1 when dead letters exist"},
    {"prune", cmd_prune, "delete finished tasks older than a retention"},
    {"serve", cmd_serve, "HTTP API, dashboard, health and Prometheus metrics"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: due COMMAND [OPTIONS]\n"
		   "\n"
		   "due runs an action once a moment has passed, durably: "
		   "tasks live in a\n"
		   "store (a SQLite file, PostgreSQL, Redis or MySQL/MariaDB) "
		   "and are\n"
		   "claimed by workers under leases with fencing tokens.\n"
		   "\n"
		   "Commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-9s %s\n", commands[i].name,
			commands[i].summary);
	fprintf(f, "\n"
		   "Every command takes --db URL (else $DUE_DB, else "
		   "sqlite:./due.db) and\n"
		   "--help.  Store URLs: sqlite:PATH[?sync=full|normal], "
		   "postgres://...,\n"
		   "redis://HOST:PORT/N[?prefix=NAME], "
		   "mysql://USER@HOST:PORT/DB (README: Stores).\n"
		   "\n"
		   "Exit codes: 0 ok, 1 health DOWN, 2 bad arguments or input "
		   "(nothing\n"
		   "changed), 3 not found, 4 wrong state or key conflict, 5 "
		   "store error,\n"
		   "6 schema missing or older (run `due init`).\n");
}

int main(int argc, char **argv)
{
	/* The process is ours: SQLite's memory statistics take a global
	   mutex around every sqlite3_malloc and free, and nothing here reads
	   them (a library must not turn them off for its host; the due
	   executable may).  Before any other SQLite call, as
	   sqlite3_config() requires.  -7 % CPU per task in a SQLite drain
	   (docs/internals/store.md). */
	sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("due %s (schema %d)\n", DUE_VERSION, DUE_SCHEMA_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "due: unknown command '%s'\nTry 'due --help'.\n",
		argv[1]);
	return EXIT_USAGE;
}
