/*
** cmd_prune.c - `due prune --older-than DUR`: delete finished tasks.
*/
#include "cli/cli.h"

static const char usage[] =
    "usage: due prune --older-than DUR [--db URL]\n"
    "\n"
    "Delete DONE and CANCELLED tasks (with their attempts history) last\n"
    "changed more than DUR ago, in bounded batches.  DEAD tasks are never\n"
    "pruned: a dead letter waits for a person.  Prints the number deleted.\n";

int cmd_prune(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"older-than", required_argument, NULL, 'o'}, CLI_COMMON_OPTS, {0}};
	cli_ctx c = {.prog = "due prune"};
	const char *older = NULL;
	int64_t us, deleted = 0;
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
		if (opt == 'o') {
			older = optarg;
			continue;
		}
		return cli_bad_option(&c, opt, argv);
	}
	if (optind < argc)
		return cli_usage_error(&c, "unexpected argument '%s'",
				       argv[optind]);
	if (!older)
		return cli_usage_error(&c, "--older-than DUR is required");
	if ((rc = cli_parse_duration(&c, "--older-than", older, &us)) ||
	    (rc = cli_open(&c, &db)))
		return rc;
	rc = due_prune(db, &deleted, us);
	due_close(db);
	if (rc < 0)
		return cli_fail(&c, rc);
	printf("deleted %lld tasks\n", (long long)deleted);
	return 0;
}
