/*
** cli.h - what every `due` subcommand shares: the store URL, the exit
** codes, error printing and argument parsing helpers.  The CLI is a client
** of the public API (due.h) and of the JSON formatting in src/fmt/.
*/
#ifndef DUE_CLI_H
#define DUE_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "due.h"

/* Exit codes (documented in `due --help` and the README). */
enum {
	EXIT_OK = 0,
	EXIT_DOWN = 1,	   /* health: DOWN; verify: a case failed */
	EXIT_USAGE = 2,	   /* bad arguments or bad input: nothing changed */
	EXIT_NOTFOUND = 3, /* no such task, schedule or kind settings */
	EXIT_STATE = 4,	   /* task in the wrong state, or key conflict */
	EXIT_STORE = 5,	   /* store unreachable, busy or failing */
	EXIT_SCHEMA = 6	   /* schema missing, older or newer: run due init */
};

/* Common option ids above the printable range. */
enum { OPT_DB = 1000, OPT_JSON, OPT_HELP };

#define CLI_COMMON_OPTS                                                        \
	{"db", required_argument, NULL, OPT_DB},                               \
	    {"json", no_argument, NULL, OPT_JSON},                             \
	{                                                                      \
		"help", no_argument, NULL, 'h'                                 \
	}

typedef struct cli_ctx {
	const char *db_url; /* --db, else $DUE_DB, else sqlite:./due.db */
	bool json;
	const char *prog; /* "due add" ... for messages */
	/* > 0: a lower bound than the URL's timeout= on each store call
	   (due_open_opts.timeout_us), for a command with a deadline */
	int64_t call_bound_us;
} cli_ctx;

/* Handle a common option; true if `opt` was one. */
bool cli_common_opt(cli_ctx *c, int opt, const char *arg);
/* Store URL in effect. */
const char *cli_db_url(const cli_ctx *c);
/* The payload limit: $DUE_MAX_PAYLOAD (checked) or 1 MiB.  0 or EXIT_USAGE. */
int cli_max_payload(const cli_ctx *c, size_t *out);
/* Open the store (schema checked); prints the error. Exit code or 0. */
int cli_open(cli_ctx *c, due_db **out);
/* Print "due CMD: message" for the last library error; exit code for it. */
int cli_fail(const cli_ctx *c, int rc);
/* Print a usage error with a hint to --help; returns EXIT_USAGE. */
int cli_usage_error(const cli_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Parse a decimal task id; prints error.  0 or EXIT_USAGE. */
int cli_parse_id(const cli_ctx *c, const char *text, due_id *out);
/* Parse a positive int in [lo, hi]; prints error naming `what`. */
int cli_parse_int(const cli_ctx *c, const char *what, const char *text, long lo,
		  long hi, long *out);
/* Parse a duration; prints error naming `what`. */
int cli_parse_duration(const cli_ctx *c, const char *what, const char *text,
		       int64_t *out);
/* Read a whole file ("-" = stdin) up to max+1 bytes. */
/*
** Text output of stored strings (keys, errors, owners, results): control
** characters and bytes that are not UTF-8 are printed escaped (\n, \x1b),
** so a stored value cannot fake a row or drive the terminal; padded with
** spaces to `width` characters.  JSON output needs none of this.
*/
void cli_put_text(const void *data, size_t n, int width);
void cli_put_str(const char *s, int width);

/*
** Open PATH ("-": stdin) for reading; a directory or an unreadable file is
** refused with a message naming it (EXIT_USAGE).
*/
int cli_open_input(const cli_ctx *c, const char *path, FILE **out);
int cli_read_file(const cli_ctx *c, const char *path, size_t max,
		  unsigned char **out, size_t *len);
/* Print JSON (jansson json_t *) to stdout, decref it; 0 or EXIT_STORE. */
int cli_print_json(void *json);
/* Reset getopt state before parsing a subcommand's options. */
void cli_getopt_reset(void);
/*
** The usage error for what getopt_long returned as '?' or ':' (optstring
** starts with ':'): unknown option, missing value, or a negative number
** where a task id was expected.  Returns EXIT_USAGE.
*/
int cli_bad_option(const cli_ctx *c, int opt, char **argv);

/* Text table of tasks (ls, dead). */
void cli_print_task_table(const due_task_list *l);
/* Shared body of retry / requeue / kill. */
int cli_operator(int argc, char **argv, const char *name, const char *usage);

/*
** The progress line of a long command (progress.c): on stderr, only when
** stderr is a terminal and not under --json; erased when it ends.
** cli_progress_start() returns NULL when nothing is to be shown, and every
** other call takes NULL and does nothing, so a command calls them
** unconditionally.  Between start and end the command writes nothing to
** stderr (end first, then the error).
*/
typedef struct cli_progress cli_progress;
typedef struct cli_progress_phase {
	char what[96];	  /* "read", "deleted", "writing 10 tasks in ..." */
	const char *unit; /* "lines", "tasks"; NULL: shown with its time */
	int64_t total;	  /* of `unit`; 0: unknown */
	bool approx;	  /* total is an estimate or a bound: "of ~N" */
} cli_progress_phase;
cli_progress *cli_progress_start(const cli_ctx *c);
/* Show a new phase (its clock starts now, done = 0). */
void cli_progress_phase_begin(cli_progress *p, const cli_progress_phase *ph);
/*
** Units done in this phase; frac, when >= 0, is the fraction done when it
** is not done/total (bytes of a file read, while lines are counted).
*/
void cli_progress_set(cli_progress *p, int64_t done, double frac);
/* Draw the last numbers, erase the line, stop the ticker, free p. */
void cli_progress_end(cli_progress *p);
/*
** Erase the line of this process's progress, if one is shown, and draw no
** more: called before any error message (cli_fail, cli_usage_error ...).
*/
void cli_progress_hide(void);

/* Subcommands: argc/argv start at the subcommand name. */
int cmd_init(int argc, char **argv);
int cmd_add(int argc, char **argv);
int cmd_cancel(int argc, char **argv);
int cmd_reschedule(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_wait(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_dead(int argc, char **argv);
int cmd_retry(int argc, char **argv);
int cmd_requeue(int argc, char **argv);
int cmd_kill(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_health(int argc, char **argv);
int cmd_prune(int argc, char **argv);
int cmd_work(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_scratch(int argc, char **argv);
int cmd_cron(int argc, char **argv);
int cmd_kind(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
