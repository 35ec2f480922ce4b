/*
** cmd_cancel.c - `due cancel ID`: prints exactly one of CANCELLED REQUESTED
** TOO_LATE ALREADY_CANCELLED NOT_FOUND (CONTRACT §3.6).
*/
#include "cli/cli.h"

static const char usage[] =
    "usage: due cancel ID [--db URL]\n"
    "\n"
    "Cancel a task.  Prints where it was, and so what can still happen:\n"
    "  CANCELLED          it was waiting; it will never run\n"
    "  REQUESTED          it was running; no result will commit, it ends\n"
    "                     CANCELLED (an external call already made stays "
    "made)\n"
    "  TOO_LATE           it was DONE or DEAD; nothing changed\n"
    "  ALREADY_CANCELLED  it was cancelled before\n"
    "  NOT_FOUND          no such task (exit code 3)\n";

int cmd_cancel(int argc, char **argv)
{
	static const struct option opts[] = {CLI_COMMON_OPTS, {0}};
	cli_ctx c = {.prog = "due cancel"};
	due_cancel_outcome out;
	due_db *db = NULL;
	due_id id;
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
	if (optind + 1 != argc)
		return cli_usage_error(&c, "expected exactly one task ID");
	if ((rc = cli_parse_id(&c, argv[optind], &id)) ||
	    (rc = cli_open(&c, &db)))
		return rc;
	rc = due_cancel(db, &out, id);
	due_close(db);
	if (rc < 0)
		return cli_fail(&c, rc);
	puts(due_cancel_outcome_name(out));
	return out == DUE_CANCEL_NOT_FOUND ? EXIT_NOTFOUND : 0;
}
