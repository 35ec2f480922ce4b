/*
** cmd_cron.c - `due cron add|ls|rm|next`: periodic schedules.
**
** `cron next` needs no store: it prints the next fire times of an
** expression so users can check it (DST days included) before trusting
** it.  The schedules themselves run inside `due work` (any number of
** workers may run them; each slot still becomes exactly one task).
*/
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "fmt/fmt.h"

static const char usage[] =
    "usage: due cron add NAME 'EXPR' KIND [--tz ZONE] [--payload TEXT |\n"
    "                    --payload-file FILE] [--misfire skip|once]\n"
    "                    [--overlap allow|wait] [--max-attempts N]\n"
    "                    [--backoff DUR] [--backoff-cap DUR] [--db URL]\n"
    "       due cron ls [--json] [--db URL]\n"
    "       due cron rm NAME [--db URL]\n"
    "       due cron next 'EXPR' [--tz ZONE] [--from TIME] [--count N]\n"
    "\n"
    "Periodic schedules.  EXPR has 5 fields (minute hour day-of-month month\n"
    "day-of-week) or 6 with leading seconds; names (JAN, MON), ranges, lists,\n"
    "steps and @yearly @monthly @weekly @daily @hourly are understood.  Times\n"
    "are computed in ZONE (an IANA name, default UTC), right across DST: a\n"
    "skipped local time fires once at the end of the gap, a repeated one "
    "once.\n"
    "Each slot becomes one task of KIND, exactly once however many `due work`\n"
    "processes run the schedules.\n"
    "  --misfire skip   slots missed while no scheduler ran are counted, not "
    "run\n"
    "  --misfire once   one catch-up run for them (default: skip)\n"
    "  --overlap wait   a slot waits until the previous slot's task has ended\n"
    "  --overlap allow  slots fire regardless (default)\n"
    "  add with an existing NAME replaces it from the next slot on.\n"
    "  next prints the next N (default 5) fire times, RFC 3339 UTC, one a "
    "line.\n";

static int bad(const cli_ctx *c, const char *fmt, const char *arg)
{
	return cli_usage_error(c, fmt, arg);
}

enum {
	O_TZ = 'z',
	O_PAYLOAD = 'p',
	O_PFILE = 'f',
	O_MISFIRE = 'm',
	O_OVERLAP = 'o',
	O_MAXATT = 'a',
	O_BACKOFF = 'b',
	O_CAP = 'c',
	O_FROM = 'F',
	O_COUNT = 'n'
};

static const struct option opts[] = {
    {"tz", required_argument, NULL, O_TZ},
    {"payload", required_argument, NULL, O_PAYLOAD},
    {"payload-file", required_argument, NULL, O_PFILE},
    {"misfire", required_argument, NULL, O_MISFIRE},
    {"overlap", required_argument, NULL, O_OVERLAP},
    {"max-attempts", required_argument, NULL, O_MAXATT},
    {"backoff", required_argument, NULL, O_BACKOFF},
    {"backoff-cap", required_argument, NULL, O_CAP},
    {"from", required_argument, NULL, O_FROM},
    {"count", required_argument, NULL, O_COUNT},
    CLI_COMMON_OPTS,
    {0}};

typedef struct cron_args {
	due_cron_def d;
	const char *pfile, *from;
	long count;
	bool has_tz, has_from, has_count, has_def_opt;
} cron_args;

static int parse_opt(cli_ctx *c, cron_args *a, int opt, char *arg)
{
	long v;

	switch (opt) {
	case O_TZ:
		a->d.tz = arg;
		a->has_tz = true;
		return 0;
	case O_PAYLOAD:
		a->d.payload = arg;
		a->d.payload_len = strlen(arg);
		a->has_def_opt = true;
		return 0;
	case O_PFILE:
		a->pfile = arg;
		a->has_def_opt = true;
		return 0;
	case O_MISFIRE:
		a->has_def_opt = true;
		if (!strcmp(arg, "skip"))
			a->d.misfire = DUE_MISFIRE_SKIP;
		else if (!strcmp(arg, "once"))
			a->d.misfire = DUE_MISFIRE_ONCE;
		else
			return bad(c, "--misfire: '%s' is not skip or once",
				   arg);
		return 0;
	case O_OVERLAP:
		a->has_def_opt = true;
		if (!strcmp(arg, "allow"))
			a->d.overlap = DUE_OVERLAP_ALLOW;
		else if (!strcmp(arg, "wait"))
			a->d.overlap = DUE_OVERLAP_WAIT;
		else
			return bad(c, "--overlap: '%s' is not allow or wait",
				   arg);
		return 0;
	case O_MAXATT:
		a->has_def_opt = true;
		if (cli_parse_int(c, "--max-attempts", arg, 1, 1000, &v))
			return EXIT_USAGE;
		a->d.max_attempts = (int32_t)v;
		return 0;
	case O_BACKOFF:
		a->has_def_opt = true;
		return cli_parse_duration(c, "--backoff", arg,
					  &a->d.backoff_us);
	case O_CAP:
		a->has_def_opt = true;
		return cli_parse_duration(c, "--backoff-cap", arg,
					  &a->d.backoff_cap_us);
	case O_FROM:
		a->from = arg;
		a->has_from = true;
		return 0;
	case O_COUNT:
		a->has_count = true;
		if (cli_parse_int(c, "--count", arg, 1, 10000, &a->count))
			return EXIT_USAGE;
		return 0;
	default: return -1;
	}
}

static int cron_add(cli_ctx *c, cron_args *a, char **pos, int npos)
{
	unsigned char *buf = NULL;
	size_t len = 0;
	due_db *db = NULL;
	int rc;

	if (npos != 3)
		return cli_usage_error(c, "expected NAME 'EXPR' KIND");
	if (a->has_from || a->has_count)
		return cli_usage_error(
		    c, "--from and --count belong to `cron next`");
	if (a->pfile && a->d.payload)
		return cli_usage_error(
		    c, "--payload and --payload-file are exclusive");
	a->d.name = pos[0];
	a->d.expr = pos[1];
	a->d.kind = pos[2];
	if (a->pfile) {
		if ((rc = cli_read_file(c, a->pfile, 1u << 20, &buf, &len)))
			return rc;
		a->d.payload = buf;
		a->d.payload_len = len;
	}
	if (!(rc = cli_open(c, &db))) {
		rc = due_cron_put(db, &a->d);
		rc = rc < 0 ? cli_fail(c, rc) : 0;
	}
	if (rc == 0) {
		due_cron_info_list *l = NULL;
		if (due_cron_list(db, &l) == 0) {
			for (size_t i = 0; i < l->count; i++) {
				char u[40], z[48];
				if (strcmp(l->items[i].name, a->d.name))
					continue;
				due_time_format(u, sizeof(u),
						l->items[i].next_slot);
				due_time_format_zone(z, sizeof(z),
						     l->items[i].next_slot,
						     l->items[i].tz);
				printf("%s next %s (%s %s)\n", a->d.name, u, z,
				       l->items[i].tz);
			}
			due_cron_info_list_free(l);
		}
	}
	due_close(db);
	free(buf);
	return rc;
}

static int cron_ls(cli_ctx *c, int npos)
{
	due_cron_info_list *l = NULL;
	due_db *db = NULL;
	int rc;

	if (npos != 0)
		return cli_usage_error(c, "cron ls takes no arguments");
	if ((rc = cli_open(c, &db)))
		return rc;
	rc = due_cron_list(db, &l);
	due_close(db);
	if (rc < 0)
		return cli_fail(c, rc);
	if (c->json) {
		json_t *arr = json_array();
		for (size_t i = 0; i < l->count; i++)
			json_array_append_new(arr, due__fmt_cron(&l->items[i]));
		due_cron_info_list_free(l);
		return cli_print_json(arr);
	}
	printf("%-16s %-18s %-14s %-24s %-32s %6s %6s\n", "NAME", "EXPR",
	       "KIND", "NEXT (UTC)", "NEXT (LOCAL, ZONE)", "FIRED", "MISSED");
	for (size_t i = 0; i < l->count; i++) {
		const due_cron_info *s = &l->items[i];
		char u[40], z[48], zl[96];
		due_time_format(u, sizeof(u), s->next_slot);
		if (due_time_format_zone(z, sizeof(z), s->next_slot, s->tz) < 0)
			snprintf(z, sizeof(z), "?");
		snprintf(zl, sizeof(zl), "%s %s", z, s->tz);
		cli_put_str(s->name, 16);
		putchar(' ');
		cli_put_str(s->expr, 18);
		putchar(' ');
		cli_put_str(s->kind, 14);
		printf(" %-24s %-32s %6lld %6lld\n", u, zl, (long long)s->fired,
		       (long long)s->missed);
	}
	due_cron_info_list_free(l);
	return 0;
}

static int cron_rm(cli_ctx *c, char **pos, int npos)
{
	due_db *db = NULL;
	int rc;

	if (npos != 1)
		return cli_usage_error(c, "expected NAME");
	if ((rc = cli_open(c, &db)))
		return rc;
	rc = due_cron_remove(db, pos[0]);
	due_close(db);
	if (rc < 0)
		return cli_fail(c, rc);
	printf("removed %s\n", pos[0]);
	return 0;
}

static int cron_next(cli_ctx *c, cron_args *a, char **pos, int npos)
{
	due_time from = due_time_now_host(), *out;
	size_t n = a->has_count ? (size_t)a->count : 5, got = 0;
	int rc;

	if (npos != 1)
		return cli_usage_error(c, "expected one 'EXPR'");
	if (a->has_def_opt)
		return cli_usage_error(
		    c, "cron next takes only --tz, --from, --count");
	if (a->from && due_time_parse(&from, a->from) < 0)
		return cli_usage_error(c, "--from: %s", due_error_last());
	if (!(out = calloc(n, sizeof(*out))))
		return EXIT_STORE;
	rc = due_cron_preview(out, n, &got, pos[0], a->d.tz, from);
	if (rc < 0) {
		free(out);
		return cli_usage_error(c, "%s", due_error_last());
	}
	for (size_t i = 0; i < got; i++) {
		char buf[40];
		due_time_format(buf, sizeof(buf), out[i]);
		puts(buf);
	}
	free(out);
	return 0;
}

int cmd_cron(int argc, char **argv)
{
	cron_args a = {.d = DUE_CRON_DEF_INIT};
	cli_ctx c = {.prog = "due cron"};
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
		if ((rc = parse_opt(&c, &a, opt, optarg)) < 0)
			return cli_bad_option(&c, opt, argv);
		if (rc)
			return rc;
	}
	for (int i = optind; i < argc; i++) {
		if (npos == 8)
			return cli_usage_error(&c, "too many arguments");
		pos[npos++] = argv[i];
	}
	if (npos == 0)
		return cli_usage_error(&c, "expected add, ls, rm or next");
	if (!strcmp(pos[0], "add"))
		return cron_add(&c, &a, pos + 1, npos - 1);
	if (!strcmp(pos[0], "ls"))
		return cron_ls(&c, npos - 1);
	if (!strcmp(pos[0], "rm"))
		return cron_rm(&c, pos + 1, npos - 1);
	if (!strcmp(pos[0], "next"))
		return cron_next(&c, &a, pos + 1, npos - 1);
	return cli_usage_error(
	    &c, "unknown cron command '%s' (add, ls, rm, next)", pos[0]);
}
