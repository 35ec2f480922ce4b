/*
** cmd_kind.c - `due kind set|ls|rm`: a kind's flow-control settings.
**
** The settings live in the store (due_kind_set()) and every claim of
** every worker obeys them (docs/internals/flow.md): pause, a rate N/DUR,
** max-running, max-running-per-group and a default time limit.  `set`
** changes only what it names; `none` removes one limit; a kind whose
** settings are all removed is still listed until `kind rm`.
**
** Every option is checked before the store is opened, so a bad value
** changes nothing and exits 2 with one line naming it; the library checks
** the same ranges again (its message is then the one printed).
*/
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "fmt/fmt.h"

static const char usage[] =
    "usage: due kind set KIND [--pause | --resume] [--rate N/DUR|none]\n"
    "                    [--max-running N|none] [--max-running-per-group "
    "N|none]\n"
    "                    [--timeout DUR|none] [--json] [--db URL]\n"
    "       due kind ls [--json] [--db URL]\n"
    "       due kind rm KIND [--db URL]\n"
    "\n"
    "Flow control of a kind, held by the store and obeyed by every worker on\n"
    "every host.  `set` changes only the settings it names; `none` removes\n"
    "a limit.\n"
    "  --pause             no task of KIND is claimed; running ones finish\n"
    "  --resume            claimable again at once\n"
    "  --rate N/DUR        at most N claims in any window of DUR (1ms..1d),\n"
    "                      e.g. 10/1s, 600/1m; N is 1..1000000\n"
    "  --max-running N     at most N tries of KIND running at once\n"
    "  --max-running-per-group N\n"
    "                      at most N running at once per group (`due add\n"
    "                      --group`); tasks without a group count only\n"
    "                      against --max-running\n"
    "  --timeout DUR       time limit of a try of a task without its own\n"
    "                      (`due add --timeout`): the handler is stopped and\n"
    "                      the try fails as TIMED_OUT\n"
    "ls lists the kinds with settings, with what they hold now: RUNNING\n"
    "tries, claims in the rate's window (RATE_USED), DUE tasks, and HELD,\n"
    "the claim passes that left due tasks because of the rate, max-running\n"
    "or the group limit.  rm forgets a kind's settings (no limits, not\n"
    "paused); it exits 3 when the kind has none.\n";

enum {
	O_PAUSE = 'p',
	O_RESUME = 'r',
	O_RATE = 'R',
	O_MAXRUN = 'm',
	O_MAXGROUP = 'g',
	O_TIMEOUT = 't'
};

static const struct option opts[] = {
    {"pause", no_argument, NULL, O_PAUSE},
    {"resume", no_argument, NULL, O_RESUME},
    {"rate", required_argument, NULL, O_RATE},
    {"max-running", required_argument, NULL, O_MAXRUN},
    {"max-running-per-group", required_argument, NULL, O_MAXGROUP},
    {"timeout", required_argument, NULL, O_TIMEOUT},
    CLI_COMMON_OPTS,
    {0}};

/* --max-running and --max-running-per-group: 1..1000000 or none (0). */
static int parse_limit(const cli_ctx *c, const char *what, const char *arg,
		       int32_t *out)
{
	char *end;
	long v;

	if (!strcmp(arg, "none")) {
		*out = 0;
		return 0;
	}
	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || *end || end == arg || v < 1 || v > 1000000 ||
	    !isdigit((unsigned char)arg[0]))
		return cli_usage_error(c,
				       "invalid %s '%s': expected an integer "
				       "from 1 to 1000000, or none",
				       what, arg);
	*out = (int32_t)v;
	return 0;
}

/* One option of `kind set` into *s; -1 when opt is not one of them. */
static int parse_opt(const cli_ctx *c, due_kind_settings *s, int opt,
		     const char *arg)
{
	char err[512];

	switch (opt) {
	case O_PAUSE:
	case O_RESUME:
		if (s->paused != -1 && s->paused != (opt == O_PAUSE))
			return cli_usage_error(
			    c, "--pause and --resume are exclusive");
		s->paused = opt == O_PAUSE;
		return 0;
	case O_RATE:
		if (!strcmp(arg, "none")) {
			s->rate_n = 0;
			s->rate_us = 0;
			return 0;
		}
		if (due__fmt_rate_parse(arg, &s->rate_n, &s->rate_us, err,
					sizeof(err)) < 0)
			return cli_usage_error(c, "--rate: %s", err);
		return 0;
	case O_MAXRUN:
		return parse_limit(c, "--max-running", arg, &s->max_running);
	case O_MAXGROUP:
		return parse_limit(c, "--max-running-per-group", arg,
				   &s->max_running_per_group);
	case O_TIMEOUT:
		if (!strcmp(arg, "none")) {
			s->timeout_us = 0;
			return 0;
		}
		if (cli_parse_duration(c, "--timeout", arg, &s->timeout_us))
			return EXIT_USAGE;
		if (s->timeout_us <= 0 || s->timeout_us > DUE_TIMEOUT_MAX_US)
			return cli_usage_error(
			    c,
			    "invalid --timeout '%s': must be "
			    "more than 0 and at most 7d (none removes it)",
			    arg);
		return 0;
	default: return -1;
	}
}

/* "10/1s", "30s" or "-" for no limit, into buf. */
static const char *rate_text(char *buf, size_t len, const due_kind_info *k)
{
	char d[48];
	if (k->rate_n <= 0)
		return "-";
	due_duration_format(d, sizeof(d), k->rate_us);
	snprintf(buf, len, "%d/%s", (int)k->rate_n, d);
	return buf;
}

static const char *dur_text(char *buf, size_t len, int64_t us)
{
	if (us <= 0)
		return "-";
	due_duration_format(buf, len, us);
	return buf;
}

static const char *n_text(char *buf, size_t len, int64_t n)
{
	if (n <= 0)
		return "-";
	snprintf(buf, len, "%lld", (long long)n);
	return buf;
}

static void print_table(const due_kind_info_list *l)
{
	printf("%-20s %-6s %-12s %-11s %-9s %-9s %7s %9s %7s  %s\n", "KIND",
	       "PAUSED", "RATE", "MAX_RUNNING", "PER_GROUP", "TIMEOUT",
	       "RUNNING", "RATE_USED", "DUE", "HELD rate/running/group");
	for (size_t i = 0; i < l->count; i++) {
		const due_kind_info *k = &l->items[i];
		char r[64], m[24], g[24], t[48];
		cli_put_str(k->kind, 20);
		printf(" %-6s %-12s %-11s %-9s %-9s %7lld %9lld %7lld  "
		       "%lld/%lld/%lld\n",
		       k->paused ? "yes" : "no", rate_text(r, sizeof(r), k),
		       n_text(m, sizeof(m), k->max_running),
		       n_text(g, sizeof(g), k->max_running_per_group),
		       dur_text(t, sizeof(t), k->timeout_us),
		       (long long)k->running, (long long)k->rate_used,
		       (long long)k->due, (long long)k->held_rate,
		       (long long)k->held_running, (long long)k->held_group);
	}
}

/*
** The kind named on the command line: an empty one is refused before the
** store is opened (the library says the rest about a kind's syntax).
*/
static int check_kind(const cli_ctx *c, const char *kind)
{
	if (!*kind)
		return cli_usage_error(c, "invalid kind '': empty");
	return 0;
}

/* After a change: the kind as it now stands, a row or a JSON object. */
static int print_kind(const cli_ctx *c, due_db *db, const char *kind)
{
	due_kind_info_list one = {1, NULL};
	due_kind_info *k = NULL;
	int rc;

	if ((rc = due_kind_get(db, &k, kind)) < 0)
		return cli_fail(c, rc);
	if (c->json) {
		rc = cli_print_json(due__fmt_kind(k));
	} else {
		one.items = k;
		print_table(&one);
	}
	due_kind_info_free(k);
	return rc;
}

static int kind_set(cli_ctx *c, const due_kind_settings *s, char **pos,
		    int npos)
{
	due_db *db = NULL;
	int rc;

	if (npos != 1)
		return cli_usage_error(c, "expected one KIND");
	if ((rc = check_kind(c, pos[0])))
		return rc;
	if (s->paused == -1 && s->rate_n == -1 && s->max_running == -1 &&
	    s->max_running_per_group == -1 && s->timeout_us == -1)
		return cli_usage_error(c,
				       "kind set %s: nothing to change: give "
				       "--pause, --resume, --rate, "
				       "--max-running, --max-running-per-group "
				       "or --timeout",
				       pos[0]);
	if ((rc = cli_open(c, &db)))
		return rc;
	if ((rc = due_kind_set(db, pos[0], s)) < 0)
		rc = cli_fail(c, rc);
	else
		rc = print_kind(c, db, pos[0]);
	due_close(db);
	return rc;
}

static int kind_ls(cli_ctx *c, int npos)
{
	due_kind_info_list *l = NULL;
	due_db *db = NULL;
	int rc;

	if (npos != 0)
		return cli_usage_error(c, "kind ls takes no arguments");
	if ((rc = cli_open(c, &db)))
		return rc;
	rc = due_kind_list(db, &l);
	due_close(db);
	if (rc < 0)
		return cli_fail(c, rc);
	if (c->json)
		rc = cli_print_json(due__fmt_kind_list(l));
	else
		print_table(l);
	due_kind_info_list_free(l);
	return rc;
}

static int kind_rm(cli_ctx *c, char **pos, int npos)
{
	due_db *db = NULL;
	int rc;

	if (npos != 1)
		return cli_usage_error(c, "expected one KIND");
	if ((rc = check_kind(c, pos[0])) || (rc = cli_open(c, &db)))
		return rc;
	rc = due_kind_remove(db, pos[0]);
	due_close(db);
	if (rc < 0) /* DUE_ENOTFOUND: "kind 'K' has no settings", exit 3 */
		return cli_fail(c, rc);
	printf("removed %s\n", pos[0]);
	return 0;
}

int cmd_kind(int argc, char **argv)
{
	due_kind_settings s = DUE_KIND_SETTINGS_INIT;
	cli_ctx c = {.prog = "due kind"};
	bool has_set_opt = false;
	char *pos[8];
	int npos = 0, opt, rc;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		if (opt == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		if ((rc = parse_opt(&c, &s, opt, optarg)) < 0)
			return cli_bad_option(&c, opt, argv);
		if (rc)
			return rc;
		has_set_opt = true;
	}
	for (int i = optind; i < argc; i++) {
		if (npos == 8)
			return cli_usage_error(&c, "too many arguments");
		pos[npos++] = argv[i];
	}
	if (npos == 0)
		return cli_usage_error(&c, "expected set, ls or rm");
	if (!strcmp(pos[0], "set"))
		return kind_set(&c, &s, pos + 1, npos - 1);
	if (has_set_opt)
		return cli_usage_error(&c,
				       "--pause, --resume, --rate, "
				       "--max-running, --max-running-per-group "
				       "and --timeout belong to `kind set`");
	if (!strcmp(pos[0], "ls"))
		return kind_ls(&c, npos - 1);
	if (!strcmp(pos[0], "rm"))
		return kind_rm(&c, pos + 1, npos - 1);
	return cli_usage_error(&c, "unknown kind command '%s' (set, ls, rm)",
			       pos[0]);
}
