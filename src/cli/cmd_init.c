/*
** cmd_init.c - `due init`: create or upgrade the schema of a store.
**
** An upgrade of a big old store rewrites tables and builds indexes, which
** may take minutes: on a terminal the progress line names the step the
** store is at ("upgrade schema to version 5 (step 2 of 3), 40 s"),
** reported by the library through due_open_opts.progress.
*/
#include <stdio.h>

#include "cli/cli.h"

static const char usage[] =
    "usage: due init [--db URL]\n"
    "\n"
    "Create the due schema in the store, or upgrade an older one.  Safe to\n"
    "run again.  A SQLite file is created when missing (WAL mode).  On a\n"
    "terminal, a line on stderr names the upgrade step the store is at.\n";

/* due_open_opts.progress: each step becomes a phase shown with its time. */
static void on_step(const char *what, int64_t done, int64_t total,
		    void *payload)
{
	cli_progress_phase ph = {.unit = NULL};

	if (total > 0)
		snprintf(ph.what, sizeof(ph.what), "%s (step %lld of %lld)",
			 what, (long long)done + 1, (long long)total);
	else /* a step count not known before (the Redis layout's) */
		snprintf(ph.what, sizeof(ph.what), "%s (step %lld)", what,
			 (long long)done + 1);
	cli_progress_phase_begin(payload, &ph);
}

int cmd_init(int argc, char **argv)
{
	static const struct option opts[] = {CLI_COMMON_OPTS, {0}};
	cli_ctx c = {.prog = "due init"};
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;
	int opt, rc;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		if (opt == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		return cli_bad_option(&c, opt, argv);
	}
	if (optind < argc)
		return cli_usage_error(&c, "unexpected argument '%s'",
				       argv[optind]);
	o.create = true;
	if ((o.progress_payload = cli_progress_start(&c)))
		o.progress = on_step;
	rc = due_open(&db, cli_db_url(&c), &o);
	cli_progress_end(o.progress_payload);
	if (rc < 0) {
		rc = cli_fail(&c, rc);
		due_close(db);
		return rc;
	}
	printf("initialized %s store %s (schema %d)\n", due_db_backend(db),
	       cli_db_url(&c), DUE_SCHEMA_VERSION);
	if (due_db_warning(db))
		fprintf(stderr, "%s: warning: %s\n", c.prog,
			due_db_warning(db));
	due_close(db);
	return 0;
}
