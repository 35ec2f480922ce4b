/*
** cmd_prune.c - `due prune --older-than DUR`: delete finished tasks.
**
** The deletion runs in calls of PRUNE_CHUNK tasks (due_prune_max; each
** call commits in batches of DUE_PRUNE_BATCH, as due_prune() does) until
** one comes back short, so between calls a terminal can be told how far
** it is: "deleted 340000 of ~1000000 tasks, 52000/s, ~13 s left".  The
** total is the store's count of DONE and CANCELLED tasks (due_stats_get,
** read only for the progress line): those not old enough stay, and on a
** big store the count may be an estimate, hence the "~".
*/
#include "cli/cli.h"

#define PRUNE_CHUNK (10 * DUE_PRUNE_BATCH)

static const char usage[] =
    "usage: due prune --older-than DUR [--db URL]\n"
    "\n"
    "Delete DONE and CANCELLED tasks (with their attempts history) last\n"
    "changed more than DUR ago, in bounded batches.  DEAD tasks are never\n"
    "pruned: a dead letter waits for a person.  Prints the number deleted.\n"
    "On a terminal, a line on stderr says how far it is (not under --json).\n";

/*
** Delete in calls of PRUNE_CHUNK until a short one, with the progress line
** on a terminal.  *deleted counts what was deleted, also on failure.
** Returns 0 or a negative DUE_E* (its message set).
*/
static int prune(const cli_ctx *c, due_db *db, int64_t older_than_us,
		 int64_t *deleted)
{
	cli_progress_phase ph = {.what = "deleted", .unit = "tasks"};
	cli_progress *p = cli_progress_start(c);
	due_stats st;
	int64_t n = 0;
	int rc;

	*deleted = 0;
	if (p && due_stats_get(db, &st) == 0) {
		ph.total = st.counts[DUE_DONE] + st.counts[DUE_CANCELLED];
		ph.approx = true;
	}
	cli_progress_phase_begin(p, &ph);
	do {
		rc = due_prune_max(db, &n, older_than_us, PRUNE_CHUNK);
		if (rc < 0)
			break;
		*deleted += n;
		cli_progress_set(p, *deleted, -1);
	} while (n == PRUNE_CHUNK);
	cli_progress_end(p);
	return rc;
}

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
	rc = prune(&c, db, us, &deleted);
	due_close(db);
	if (rc < 0)
		return cli_fail(&c, rc);
	printf("deleted %lld tasks\n", (long long)deleted);
	return 0;
}
