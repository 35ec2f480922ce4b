/*
** cmd_stats.c - `due stats` and `due health`.
**
** health is UP while no dead letters exist: a dead letter is a signal for
** a person (seed 004), so the check stays DOWN until someone retries or
** kills it.
**
** stats also shows each kind with flow-control settings (due_kind_list()):
** paused, running against max-running, claims in the rate's window
** against the rate, and the claim passes each limit held back; in JSON a
** "kinds" array of the objects `due kind ls --json` prints.
**
** Every figure comes from one due_metrics_get() (its stats included), a
** read that never scans the whole task table.  CLAIMED, DEAD, the
** due-but-unclaimed backlog and its oldest age are exact; the store may
** answer SCHEDULED, DONE and CANCELLED with an estimate once they are
** large (due_stats.estimated): the text marks such a count "~N
** (estimate)", the JSON lists those states in "estimated" ([] when every
** count is exact).  workers.pruned is what retention deleted, summed over
** the workers that reported in the last 5 minutes.
*/
#include "cli/cli.h"
#include "fmt/fmt.h"

static const char usage_stats[] =
    "usage: due stats [--json] [--db URL]\n"
    "\n"
    "Counts by state, dead letters, due-but-unclaimed backlog and its oldest\n"
    "age, and the lateness (claim time - due time) of claims in the last 5\n"
    "minutes, from every worker; and for each kind with settings (`due "
    "kind`):\n"
    "paused or not, running tries against max-running, claims in the rate's\n"
    "window against the rate, and how often each limit held tasks back.\n"
    "\n"
    "CLAIMED, DEAD and the due backlog are exact; a large SCHEDULED, DONE or\n"
    "CANCELLED count may be the store's estimate, shown as ~N (estimate)\n"
    "(in JSON: the states listed in \"estimated\").\n";

static const char usage_health[] =
    "usage: due health [--json] [--db URL]\n"
    "\n"
    "Exit 0 and print UP when no dead letters exist; exit 1 and print DOWN\n"
    "with their number otherwise.  Exit 5 when the store is unreachable.\n";

static int parse(cli_ctx *c, int argc, char **argv, const char *usage)
{
	static const struct option opts[] = {CLI_COMMON_OPTS, {0}};
	int opt;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(c, opt, optarg))
			continue;
		if (opt == 'h') {
			fputs(usage, stdout);
			return -1;
		}
		return cli_bad_option(c, opt, argv);
	}
	if (optind < argc)
		return cli_usage_error(c, "unexpected argument '%s'",
				       argv[optind]);
	return 0;
}

static void print_ms(const char *name, int64_t us)
{
	if (us < 0)
		printf("  %-5s -\n", name);
	else
		printf("  %-5s %.1f ms\n", name, (double)us / 1000.0);
}

/* One line per kind with settings: "KIND paused, running 2/4, ...". */
static void print_kinds(const due_kind_info_list *l)
{
	char d[48];

	if (!l->count)
		return;
	printf("kinds with settings:\n");
	for (size_t i = 0; i < l->count; i++) {
		const due_kind_info *k = &l->items[i];
		fputs("  ", stdout);
		cli_put_str(k->kind, 20);
		printf(" %s, running %lld", k->paused ? "paused" : "active",
		       (long long)k->running);
		if (k->max_running > 0)
			printf("/%d", (int)k->max_running);
		if (k->rate_n > 0) {
			due_duration_format(d, sizeof(d), k->rate_us);
			printf(", rate %lld/%d per %s", (long long)k->rate_used,
			       (int)k->rate_n, d);
		}
		if (k->max_running_per_group > 0)
			printf(", per group %d", (int)k->max_running_per_group);
		printf(", due %lld; held by rate %lld, running %lld, group "
		       "%lld\n",
		       (long long)k->due, (long long)k->held_rate,
		       (long long)k->held_running, (long long)k->held_group);
	}
}

static int print_json(const due_metrics *m, const due_kind_info_list *kinds)
{
	return cli_print_json(due__fmt_stats_report(m, kinds));
}

static void print_text(const due_metrics *m, const due_kind_info_list *kinds)
{
	const due_stats *st = &m->stats;

	for (int i = 0; i < DUE_STATE_COUNT; i++) {
		bool est = st->estimated & (1u << i);
		printf("%-10s %s%lld%s\n", due_state_name((due_state)i),
		       est ? "~" : "", (long long)st->counts[i],
		       est ? " (estimate)" : "");
	}
	printf("due now, unclaimed: %lld (oldest %lld ms)\n",
	       (long long)st->due_unclaimed,
	       (long long)st->oldest_due_unclaimed_ms);
	printf("dead letters: %lld\n", (long long)st->dead);
	printf("lateness over the last %llds (%lld claims):\n",
	       (long long)(st->window_us / 1000000),
	       (long long)st->claims_window);
	print_ms("p50", st->lateness_p50_us);
	print_ms("p99", st->lateness_p99_us);
	print_ms("max", st->lateness_max_us);
	printf(
	    "workers reporting (last 5 min): %lld; claim queries %lld, empty "
	    "polls %lld, reclaim checks %lld, store errors %lld, leases lost "
	    "%lld\n",
	    (long long)m->workers, (long long)m->claim_queries,
	    (long long)m->empty_claims, (long long)m->reclaim_queries,
	    (long long)m->store_errors, (long long)m->lease_lost);
	printf("tasks pruned by retention: %lld (summed over those workers)\n",
	       (long long)m->pruned);
	printf("schedules: %zu\n", m->n_schedules);
	print_kinds(kinds);
}

/*
** One due_metrics_get() gives the stats too: due_stats_get() beside it
** would read them twice.
*/
int cmd_stats(int argc, char **argv)
{
	cli_ctx c = {.prog = "due stats"};
	due_kind_info_list *kinds = NULL;
	due_metrics *m = NULL;
	due_db *db = NULL;
	int rc = parse(&c, argc, argv, usage_stats);

	if (rc)
		return rc < 0 ? 0 : rc;
	if ((rc = cli_open(&c, &db)))
		return rc;
	rc = due_metrics_get(db, &m);
	if (rc == 0)
		rc = due_kind_list(db, &kinds);
	due_close(db);
	if (rc < 0)
		rc = cli_fail(&c, rc);
	else if (c.json)
		rc = print_json(m, kinds);
	else
		print_text(m, kinds);
	due_kind_info_list_free(kinds);
	due_metrics_free(m);
	return rc;
}

int cmd_health(int argc, char **argv)
{
	cli_ctx c = {.prog = "due health"};
	due_db *db = NULL;
	int64_t dead = 0;
	bool up = false;
	int rc = parse(&c, argc, argv, usage_health);

	if (rc)
		return rc < 0 ? 0 : rc;
	if ((rc = cli_open(&c, &db)))
		return rc;
	rc = due_health(db, &up, &dead);
	due_close(db);
	if (rc < 0)
		return cli_fail(&c, rc);
	if (c.json) {
		json_t *o = json_pack("{s:s,s:I}", "status", up ? "UP" : "DOWN",
				      "dead", (json_int_t)dead);
		cli_print_json(o);
	} else if (up) {
		puts("UP");
	} else {
		printf("DOWN: %lld dead letter%s (see `due dead`)\n",
		       (long long)dead, dead == 1 ? "" : "s");
	}
	return up ? 0 : EXIT_DOWN;
}
