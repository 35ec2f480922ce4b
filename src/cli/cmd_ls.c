/*
** cmd_ls.c - `due ls` and `due dead`: lists of tasks, as a table or as a
** JSON array of objects shaped like `due show --json`.
**
** The filters and the limit go to the store's list (due_list()), which
** returns at most `limit` tasks in id order after `after`: nothing is
** filtered or cut here, so the cost of `ls --state DEAD --limit 100` is
** the store's (store.h asks each list to use an index at any size).  The
** table shows no attempt history, so it is loaded only for --json (one
** more read per task).
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "fmt/fmt.h"

static const char usage_ls[] =
    "usage: due ls [--state STATE] [--kind KIND] [--limit N] [--after ID]\n"
    "              [--json] [--db URL]\n"
    "\n"
    "List tasks in id order.  STATE is SCHEDULED, CLAIMED, DONE, CANCELLED\n"
    "or DEAD, or HELD: the SCHEDULED tasks that wait for parents (added\n"
    "with `due add --after`; their DUE_AT says how many parents they still\n"
    "wait for: held: 1/2 parents).\n"
    "--limit defaults to 100 (at most 10000); --after ID pages: the tasks\n"
    "with a greater id (0, the default, is from the start).\n";

static const char usage_dead[] =
    "usage: due dead [--limit N] [--json] [--db URL]\n"
    "\n"
    "List dead letters: tasks that used up their attempts (or were killed),\n"
    "with their last error.  Each needs a person: `due retry ID` runs it\n"
    "again with a fresh attempt budget, `due kill` leaves it dead.\n";

void cli_print_task_table(const due_task_list *l)
{
	char due[40];

	printf("%-10s %-10s %-20s %-24s %-7s %s\n", "ID", "STATE", "KIND",
	       "DUE_AT", "ATTEMPT", "KEY / LAST_ERROR");
	for (size_t i = 0; i < l->count; i++) {
		const due_task *t = &l->items[i];
		if (t->state == DUE_SCHEDULED && t->after_left > 0)
			snprintf(due, sizeof(due), "held: %d/%d parents",
				 (int)t->after_left, (int)t->after_n);
		else
			due_time_format(due, sizeof(due), t->due_at);
		printf("%-10lld %-10s ", (long long)t->id,
		       due_state_name(t->state));
		cli_put_str(t->kind, 20);
		printf(" %-24s %-7d ", due, t->attempt);
		cli_put_str(t->key, 0);
		if (t->key && t->last_error)
			putchar(' ');
		cli_put_str(t->last_error, 0);
		putchar('\n');
	}
}

static int run_list(cli_ctx *c, due_list_opts *o)
{
	due_task_list *l = NULL;
	due_db *db = NULL;
	int rc;

	o->attempts = c->json;
	if ((rc = cli_open(c, &db)))
		return rc;
	rc = due_list(db, &l, o);
	due_close(db);
	if (rc < 0)
		return cli_fail(c, rc);
	if (c->json)
		rc = cli_print_json(due__fmt_task_list(l));
	else
		cli_print_task_table(l);
	due_task_list_free(l);
	return rc;
}

/*
** --after ID: a task id, or 0 for "from the start" (the default, and
** where a script's paging loop begins).  0 or EXIT_USAGE.
*/
static int parse_after(const cli_ctx *c, const char *text, due_id *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno || *end || end == text || v < 0 || text[0] < '0' ||
	    text[0] > '9')
		return cli_usage_error(c,
				       "invalid --after '%s': expected 0 or a "
				       "task id (a positive decimal integer)",
				       text);
	*out = (due_id)v;
	return 0;
}

enum { O_STATE = 's', O_KIND = 'k', O_LIMIT = 'n', O_AFTER = 'a' };

int cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"state", required_argument, NULL, O_STATE},
	    {"kind", required_argument, NULL, O_KIND},
	    {"limit", required_argument, NULL, O_LIMIT},
	    {"after", required_argument, NULL, O_AFTER},
	    CLI_COMMON_OPTS,
	    {0}};
	due_list_opts o = DUE_LIST_OPTS_INIT;
	cli_ctx c = {.prog = "due ls"};
	due_state st;
	long v;
	int opt;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		switch (opt) {
		case 'h': fputs(usage_ls, stdout); return 0;
		case O_STATE:
			if (strcasecmp(optarg, "held") == 0) {
				o.held = true;
				o.state = -1;
				break;
			}
			if (due_state_parse(&st, optarg) < 0)
				return cli_usage_error(&c,
						       "--state: %s (or HELD)",
						       due_error_last());
			o.state = (int)st;
			o.held = false;
			break;
		case O_KIND: o.kind = optarg; break;
		case O_LIMIT:
			if (cli_parse_int(&c, "--limit", optarg, 1, 10000, &v))
				return EXIT_USAGE;
			o.limit = (int)v;
			break;
		case O_AFTER:
			if (parse_after(&c, optarg, &o.after))
				return EXIT_USAGE;
			break;
		default: return cli_bad_option(&c, opt, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error(&c, "unexpected argument '%s'",
				       argv[optind]);
	return run_list(&c, &o);
}

int cmd_dead(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"limit", required_argument, NULL, O_LIMIT}, CLI_COMMON_OPTS, {0}};
	due_list_opts o = DUE_LIST_OPTS_INIT;
	cli_ctx c = {.prog = "due dead"};
	long v;
	int opt;

	o.state = DUE_DEAD;
	o.limit = 1000;
	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		if (opt == 'h') {
			fputs(usage_dead, stdout);
			return 0;
		}
		if (opt == O_LIMIT) {
			if (cli_parse_int(&c, "--limit", optarg, 1, 10000, &v))
				return EXIT_USAGE;
			o.limit = (int)v;
			continue;
		}
		return cli_bad_option(&c, opt, argv);
	}
	if (optind < argc)
		return cli_usage_error(&c, "unexpected argument '%s'",
				       argv[optind]);
	return run_list(&c, &o);
}
