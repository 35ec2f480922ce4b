/*
** cmd_verify.c - `due verify`: the contract suite against a store URL.
**
** Each case runs in its own scratch store beside the named one, made and
** dropped by its backend (verify_store.c, core/admin.h): a new database
** file in a directory next to the user's file (same filesystem, same
** host clock), a new schema, a private key prefix, a private database.
** The user's tasks are never read or written.  Fault cases start real
** `due work` processes and use real kill -9, SIGSTOP and locks held by
** another session.  This file is the top of the command: the case table,
** the skips and the run; the cases are in verify_*.c, and what they share
** in verify_util.c and verify_store.c.
** Output: one `CASE name PASS|FAIL k=v...` line per case, `CASE name SKIP
** reason=...` for a case that needs what the store does not have (SQL,
** a query plan, row locks, a call it can stall: then `N skipped ...`),
** then `N passed, N failed`; exit 1 when any case failed.  A signal
** (SIGINT, SIGTERM, SIGHUP) ends the run after the case in progress,
** which prints `CASE name INTERRUPTED` (verify_util.c: v_catch_signals).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/verify.h"

static const char usage[] =
    "usage: due verify [--db URL] [--case NAME[,NAME...]] [--list] [--keep] "
    "[-v]\n"
    "\n"
    "Run the contract cases against the store named by --db, with real\n"
    "worker processes, kill -9, SIGSTOP and locks held by another session.\n"
    "Every case works in a scratch namespace (a new SQLite file beside the\n"
    "store, a new PostgreSQL schema, a Redis key prefix, or a MySQL\n"
    "database: the URL's user needs CREATE and DROP) and never touches\n"
    "your tasks.  Prints one CASE line per case (SKIP with the reason for\n"
    "a case that needs what the store does not have, such as SQL) and\n"
    "`N passed, N failed`; exits 1 if a case failed, or ended as ERROR\n"
    "(store_unreachable=...: the store stopped answering mid-case, no\n"
    "verdict).  The scratch stores are named due_verify_<pid>_<n> (said\n"
    "on stderr at the start; `due scratch drop` takes that name).\n"
    "SIGINT, SIGTERM or SIGHUP stop the run: the case in progress prints\n"
    "`CASE name INTERRUPTED`, the workers are stopped, the scratch store is\n"
    "dropped, exit 128 + the signal (a second signal: at once).\n"
    "  --case NAMES   run only these cases     --list  print the case names\n"
    "  --keep         keep scratch stores and logs for inspection (each kept\n"
    "                 store is named with its URL on stderr)\n";

/*
** What a case needs beyond the store API (core/admin.h, DUE_NEED_*), to
** say why it is skipped where the store does not have it:
**   SQL        writes its own tables with raw SQL
**   PLAN       reads the claim's query plan
**   ROW_LOCKS  probes the engine's row locks with raw SQL
**   STALL      stalls a store call from inside: another session's lock
*/
enum {
	NEEDS_SQL = DUE_NEED_SQL,
	NEEDS_PLAN = DUE_NEED_PLAN,
	NEEDS_LOCKS = DUE_NEED_ROW_LOCKS,
	NEEDS_STALL = DUE_NEED_STALL
};

typedef struct vcase {
	const char *name;
	void (*run)(vctx *v);
	unsigned needs;
} vcase;

static const vcase cases[] = {
    {"normal_three_workers", v_normal_three_workers},
    {"boundary_not_before_due", v_boundary_not_before_due},
    {"boundary_claim_limit", v_boundary_claim_limit},
    {"boundary_partial_due_index", v_boundary_partial_due_index, NEEDS_PLAN},
    {"cancel_semantics", v_cancel_semantics},
    {"race_due_vs_cancel", v_race_due_vs_cancel},
    {"race_reschedule_vs_claim", v_race_reschedule_vs_claim},
    {"debounce_racing_producers", v_debounce_racing_producers},
    {"after_parent_kill9_releases_once", v_after_parent_kill9_releases_once},
    {"after_dead_parent_cancels_children",
     v_after_dead_parent_cancels_children},
    {"retry_backoff_then_done", v_retry_backoff_then_done},
    {"retry_exhausted_dead", v_retry_exhausted_dead},
    {"crash_kill9_lease_retry", v_crash_kill9_lease_retry},
    {"wait_returns_result", v_wait_returns_result},
    {"sigstop_late_commit_rejected", v_sigstop_late_commit_rejected},
    {"ext_key_per_task_dedup", v_ext_key_per_task_dedup},
    {"cancel_after_external_call", v_cancel_after_external_call},
    {"negative_naive_select_then_update", v_negative_naive_select_then_update,
     NEEDS_SQL},
    {"negative_unfenced_late_commit", v_negative_unfenced_late_commit,
     NEEDS_SQL},
    {"negative_ext_key_per_attempt", v_negative_ext_key_per_attempt},
    {"row_locks_honoured", v_row_locks_honoured, NEEDS_SQL | NEEDS_LOCKS},
    {"stalled_renewal_lease_clock", v_stalled_renewal_lease_clock,
     NEEDS_SQL | NEEDS_STALL},
    {"cron_once_per_slot_multi_instance", v_cron_once_per_slot_multi_instance},
    {"cron_misfire_policies", v_cron_misfire_policies},
    {"wheel_fire_exact_tick", v_wheel_fire_exact_tick},
    {"wheel_horizon_rejected", v_wheel_horizon_rejected},
    {"wheel_restart_needs_durable", v_wheel_restart_needs_durable},
    {"poll_vs_wheel", v_poll_vs_wheel},
    {"wheel_retry_punctual", v_wheel_retry_punctual},
    {"flow_pause", v_flow_pause},
    {"flow_rate", v_flow_rate},
    {"flow_max_running", v_flow_max_running},
    {"flow_group_limit", v_flow_group_limit},
    {"flow_timeout", v_flow_timeout},
    {"flow_kill9_group_slot", v_flow_kill9_group_slot},
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

static bool selected(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && strncmp(p, name, n) == 0)
			return true;
		p = e ? e + 1 : NULL;
	}
	return false;
}

/*
** Why case c cannot run on this store, or NULL when it can: the first
** need its store lacks, in the backend's own words.  Only the cases that
** speak SQL themselves are skipped; every case that goes through due's
** API runs on every store.
*/
static const char *skip_reason(const vctx *v, const vcase *c)
{
	return c->needs ? due__admin_lacks(v->adm, c->needs) : NULL;
}

/*
** Run the cases; the exit status, or -1 when a signal stopped the run
** (*stopped_in: the case it stopped, or NULL between cases).
*/
static int run_cases(vctx *v, const char *only, const char **stopped_in)
{
	int skipped = 0;

	for (size_t i = 0; i < N_CASES && !v_stopped(); i++) {
		const char *why;
		if (only && !selected(only, cases[i].name))
			continue;
		if ((why = skip_reason(v, &cases[i]))) {
			printf("CASE %s SKIP reason=%s\n", cases[i].name, why);
			skipped++;
			continue;
		}
		if (v_fresh(v, cases[i].name) < 0) {
			v_case(v, cases[i].name, false, "error=scratch_store");
			v_done(v);
			continue;
		}
		cases[i].run(v);
		if (v_stopped()) { /* what it saw says nothing of the store */
			v_stop_children();
			printf("CASE %s INTERRUPTED\n", cases[i].name);
			*stopped_in = cases[i].name;
		}
		v_done(v);
	}
	if (v_stopped())
		return -1;
	if (skipped)
		printf("%d skipped (they need what this store does not "
		       "have)\n",
		       skipped);
	printf("%d passed, %d failed\n", v->passed, v->failed);
	return v->failed ? EXIT_DOWN : 0;
}

int cmd_verify(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"case", required_argument, NULL, 'c'},
	    {"list", no_argument, NULL, 'l'},
	    {"keep", no_argument, NULL, 'k'},
	    {"verbose", no_argument, NULL, 'v'},
	    CLI_COMMON_OPTS,
	    {0}};
	cli_ctx c = {.prog = "due verify"};
	vctx v = {.prog = "due verify"};
	const char *only = NULL, *stopped_in = NULL;
	int opt, rc;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":hv", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		switch (opt) {
		case 'h': fputs(usage, stdout); return 0;
		case 'c': only = optarg; break;
		case 'k': v.keep = true; break;
		case 'v': v.verbose = 1; break;
		case 'l':
			for (size_t i = 0; i < N_CASES; i++)
				puts(cases[i].name);
			return 0;
		default: return cli_bad_option(&c, opt, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error(&c, "unexpected argument '%s'",
				       argv[optind]);
	if (only) {
		for (const char *p = only; *p;) {
			size_t len = strcspn(p, ",");
			bool known = false;
			for (size_t i = 0; i < N_CASES; i++)
				known |= strlen(cases[i].name) == len &&
					 !strncmp(cases[i].name, p, len);
			if (!known)
				return cli_usage_error(
				    &c,
				    "unknown case '%.*s' (see "
				    "--list)",
				    (int)len, p);
			p += len + (p[len] == ',');
		}
	}
	v_catch_signals();
	if ((rc = v_setup(&v, cli_db_url(&c))) < 0)
		return rc == DUE_EINVAL ? cli_fail(&c, rc) : EXIT_STORE;
	v_say_scratch(&v);
	rc = run_cases(&v, only, &stopped_in);
	v_teardown(&v);
	return rc < 0 ? v_interrupted(&v, stopped_in) : rc;
}
