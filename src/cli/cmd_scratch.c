/*
** cmd_scratch.c - `due scratch`: the backends of this build, and the
** throwaway stores `due verify` and `due bench` make beside a store, for
** test scripts and experiments.
**
** A scratch store is made and dropped by the store's backend
** (core/admin.h): a schema, a key prefix or a database on the server of
** --db, or a file in --dir for a store in files.  `list` says which
** backends this build has, and for each the environment variable that
** names the server its tests use (tests/cli/lib.sh, on_each_store): a
** test script picks up a new backend from the table, not from a list of
** its own.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/admin.h"

static const char usage[] =
    "usage: due scratch list\n"
    "       due scratch make [--db URL | --backend NAME --dir DIR] NAME\n"
    "       due scratch drop [--db URL | --backend NAME --dir DIR] NAME\n"
    "\n"
    "Make or drop a throwaway store beside the store named by --db, as `due\n"
    "verify` and `due bench` do for each case: the schema, key prefix or\n"
    "database due_scratch_NAME on its server (the URL's user needs CREATE\n"
    "and DROP), or the file DIR/due_scratch_NAME.db for a store in files\n"
    "(SQLite).  No other store can be named: your own store, public or\n"
    "mysql are out of reach.  NAME is 1 to 51 lowercase letters, digits or\n"
    "_ (else exit 2).  make prints the new store's URL (run `due init` on\n"
    "it) and refuses a NAME that exists (exit 5).  drop deletes it and\n"
    "everything in it; a NAME that does not exist is no error (exit 0, so\n"
    "cleanups may run twice); one that holds anything but due's tables is\n"
    "refused (exit 5).  Every wait keeps to the URL's timeout= (10 s).\n"
    "  list             this build's store backends, one a line: its name and\n"
    "                   the environment variable naming the server its tests\n"
    "                   use (- for a store in files, which needs none)\n"
    "  --backend NAME   a store in files of this backend, with no store of\n"
    "                   yours beside it (instead of --db)\n"
    "  --dir DIR        the directory (it must exist) of a store in files;\n"
    "                   required there, refused for a store on a server\n";

static int list(void)
{
	for (size_t i = 0; due__admin_backend(i); i++) {
		const char *name = due__admin_backend(i);
		const char *env = due__admin_test_env(name);
		printf("%s %s\n", name, env ? env : "-");
	}
	return 0;
}

/* make or drop NAME beside the store of c (or backend), files in dir. */
static int run(cli_ctx *c, bool make, const char *backend, const char *dir,
	       const char *name)
{
	due_admin *a = NULL;
	char url[4096];
	int rc = backend ? due__admin_open_backend(&a, backend)
			 : due__admin_open(&a, cli_db_url(c));

	if (rc == 0 && dir && due__admin_test_env(due__admin_name(a))) {
		const char *b = due__admin_name(a); /* the table's: static */
		due__admin_free(a);
		return cli_usage_error(c,
				       "--dir is for a store in files; a %s "
				       "store lives on its server (--db)",
				       b);
	}
	if (rc == 0)
		rc = make ? due__scratch_make(a, name, dir, url, sizeof(url))
			  : due__scratch_drop(a, name, dir);
	due__admin_free(a);
	if (rc < 0)
		return cli_fail(c, rc);
	if (make)
		puts(url);
	return 0;
}

int cmd_scratch(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"backend", required_argument, NULL, 'b'},
	    {"dir", required_argument, NULL, 'd'},
	    CLI_COMMON_OPTS,
	    {0}};
	cli_ctx c = {.prog = "due scratch"};
	const char *backend = NULL, *dir = NULL, *verb;
	int opt;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		switch (opt) {
		case 'h': fputs(usage, stdout); return 0;
		case 'b': backend = optarg; break;
		case 'd': dir = optarg; break;
		default: return cli_bad_option(&c, opt, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error(&c, "missing list, make or drop");
	verb = argv[optind++];
	if (strcmp(verb, "list") == 0)
		return optind == argc
			   ? list()
			   : cli_usage_error(&c, "list takes no arguments");
	if (strcmp(verb, "make") != 0 && strcmp(verb, "drop") != 0)
		return cli_usage_error(&c, "unknown '%s' (list, make or drop)",
				       verb);
	if (optind + 1 != argc)
		return cli_usage_error(&c, "%s takes one NAME", verb);
	if (backend && c.db_url)
		return cli_usage_error(&c, "give --db or --backend, not both");
	return run(&c, strcmp(verb, "make") == 0, backend, dir, argv[optind]);
}
