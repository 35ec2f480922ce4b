/*
** cmd_operator.c - `due retry`, `due requeue`, `due kill`: an operator
** moves one task by hand.  Each prints the task's new state.  Every such
** action is recorded in the store's audit table.
*/
#include <string.h>

#include "cli/cli.h"

static const char usage_retry[] =
    "usage: due retry ID [--db URL]\n"
    "\n"
    "Move a DEAD task back to SCHEDULED, due now, with a fresh attempt\n"
    "budget.  Its attempt counter keeps counting, so old fencing tokens stay\n"
    "dead.  Exit 4 if the task is not DEAD.\n";

static const char usage_requeue[] =
    "usage: due requeue ID [--db URL]\n"
    "\n"
    "Take a CLAIMED task back to SCHEDULED, due now, without waiting for its\n"
    "lease to expire.  The old holder is fenced: its complete or fail is\n"
    "refused.  Exit 4 if the task is not CLAIMED.\n";

static const char usage_kill[] =
    "usage: due kill ID [--db URL]\n"
    "\n"
    "End a SCHEDULED or CLAIMED task as DEAD (CANCELLED if a cancel was\n"
    "requested); a running holder is fenced.  On a dead letter (DEAD) it\n"
    "dismisses it: CANCELLED, recorded, and no longer keeping health DOWN.\n"
    "Exit 4 if the task is DONE or CANCELLED.\n";

int cli_operator(int argc, char **argv, const char *name, const char *usage)
{
	static const struct option opts[] = {CLI_COMMON_OPTS, {0}};
	char prog[32];
	cli_ctx c = {.prog = prog};
	due_state final = DUE_SCHEDULED;
	due_db *db = NULL;
	due_id id;
	int opt, rc;

	snprintf(prog, sizeof(prog), "due %s", name);
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
	if (strcmp(name, "retry") == 0)
		rc = due_retry(db, id);
	else if (strcmp(name, "requeue") == 0)
		rc = due_requeue(db, id);
	else
		rc = due_kill(db, &final, id);
	if (rc == 0 && strcmp(name, "kill") != 0) {
		due_task *t;
		if ((rc = due_get(db, &t, id)) == 0) {
			final = t->state;
			due_task_free(t);
		}
	}
	due_close(db);
	if (rc < 0)
		return cli_fail(&c, rc);
	puts(due_state_name(final));
	return 0;
}

int cmd_retry(int argc, char **argv)
{
	return cli_operator(argc, argv, "retry", usage_retry);
}

int cmd_requeue(int argc, char **argv)
{
	return cli_operator(argc, argv, "requeue", usage_requeue);
}

int cmd_kill(int argc, char **argv)
{
	return cli_operator(argc, argv, "kill", usage_kill);
}
