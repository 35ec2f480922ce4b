/*
** cmd_show.c - `due show ID [--json]`: one task and its attempts history.
**
** A SCHEDULED task that is due but held back by a setting of its kind
** (docs/internals/flow.md) says which: "waiting: kind paused" in text,
** "held": "paused" | "rate" | "max_running" | "max_running_per_group" in
** JSON (null when nothing holds it).  A task held by run-after says
** "waiting: after task 41 (RUNNING), 42 (DONE): 1 of 2 still to be DONE"
** and "held": "after", its parents in "after".  The reason is read from
** the store right after the task, so it is what a claim starting now
** would find.
*/
#include <string.h>

#include "cli/cli.h"
#include "fmt/fmt.h"

static const char usage[] =
    "usage: due show ID [--json] [--db URL]\n"
    "\n"
    "Show a task: state, due time, attempts (who ran it, how many times and\n"
    "why it ended), lease, result and last error, its priority, group and\n"
    "time limit, and, for a due task its kind's settings hold back, why it\n"
    "waits: the kind is paused, at its rate, at its max-running, or the\n"
    "task's group is at its max-running-per-group (see `due kind`); a task\n"
    "added with --after says which parents it waits for and their states.\n";

/* What the text says for each reason due_task_hold() gives. */
static const char *hold_text(const char *held)
{
	if (!strcmp(held, "paused"))
		return "kind paused";
	if (!strcmp(held, "rate"))
		return "kind at its rate limit";
	if (!strcmp(held, "max_running"))
		return "kind at its max-running limit";
	if (!strcmp(held, "after"))
		return "after";
	if (!strcmp(held, "max_running_per_group"))
		return "group at its max-running-per-group limit";
	return held;
}

static void line_time(const char *name, due_time t)
{
	char buf[40];
	if (t <= 0) {
		printf("%-17s -\n", name);
		return;
	}
	due_time_format(buf, sizeof(buf), t);
	printf("%-17s %s\n", name, buf);
}

static void line_str(const char *name, const char *s)
{
	printf("%-17s ", name);
	cli_put_str(s ? s : "-", 0);
	putchar('\n');
}

static void line_bytes(const char *name, const unsigned char *p, size_t n)
{
	while (n && (p[n - 1] == '\n' || p[n - 1] == '\r'))
		n--;
	if (due__fmt_is_utf8(p, n)) {
		printf("%-17s ", name);
		cli_put_text(p, n > 400 ? 400 : n, 0);
		printf("%s\n", n > 400 ? "..." : "");
	} else
		printf("%-17s (%zu bytes, binary)\n", name, n);
}

/*
** "waiting: after task 41 (RUNNING), 42 (DONE)": each parent with its
** state as read now (RUNNING for CLAIMED, "gone" once pruned), the first
** SHOW_PARENTS of them, then how many more.
*/
#define SHOW_PARENTS 10
static void print_after(due_db *db, const due_task *t)
{
	printf("waiting: after task");
	for (int32_t i = 0; t->after && i < t->after_n && i < SHOW_PARENTS;
	     i++) {
		due_task *p = NULL;
		const char *st = "gone";
		if (due_get(db, &p, t->after[i]) == 0)
			st = p->state == DUE_CLAIMED ? "RUNNING"
						     : due_state_name(p->state);
		printf("%s %lld (%s)", i ? "," : "", (long long)t->after[i],
		       st);
		due_task_free(p);
	}
	if (t->after_n > SHOW_PARENTS)
		printf(" and %d more", (int)(t->after_n - SHOW_PARENTS));
	printf(": %d of %d still to %s\n", (int)t->after_left, (int)t->after_n,
	       t->after_any_end ? "end" : "be DONE");
}

static void print_text(due_db *db, const due_task *t, const char *held)
{
	char b1[40], b2[40];

	printf("%-17s %lld\n", "id", (long long)t->id);
	printf("%-17s ", "kind");
	cli_put_str(t->kind, 0);
	putchar('\n');
	printf("%-17s %s%s\n", "state", due_state_name(t->state),
	       t->cancel_requested ? " (cancel requested)" : "");
	if (held && !strcmp(held, "after"))
		print_after(db, t);
	else if (held) /* its own line, "waiting: kind paused", to grep */
		printf("waiting: %s\n", hold_text(held));
	if (t->after_n > 0 && !(held && !strcmp(held, "after"))) {
		printf("%-17s", "after");
		for (int32_t i = 0; t->after && i < t->after_n; i++)
			printf(" %lld", (long long)t->after[i]);
		printf("%s\n", t->after_any_end ? " (any end)" : "");
	}
	printf("%-17s ", "due_at"); /* always set: 0 is the epoch */
	due_time_format(b1, sizeof(b1), t->due_at);
	printf("%s\n", b1);
	printf("%-17s %d of %d\n", "attempt", t->attempt, t->max_attempts);
	due_duration_format(b1, sizeof(b1), t->backoff_us);
	due_duration_format(b2, sizeof(b2), t->backoff_cap_us);
	printf("%-17s %s, cap %s\n", "backoff", b1, b2);
	line_str("lease_owner", t->lease_owner);
	line_time("lease_until", t->lease_until);
	line_str("key", t->key);
	printf("%-17s %d\n", "priority", (int)t->priority);
	line_str("group", t->group);
	if (t->timeout_us > 0) {
		due_duration_format(b1, sizeof(b1), t->timeout_us);
		printf("%-17s %s\n", "timeout", b1);
	} else
		printf("%-17s - (the kind's)\n", "timeout");
	line_bytes("payload", t->payload, t->payload_len);
	if (t->has_result)
		line_bytes("result", t->result, t->result_len);
	else
		printf("%-17s -\n", "result");
	line_str("last_error", t->last_error);
	line_time("created_at", t->created_at);
	line_time("updated_at", t->updated_at);
	printf("attempts:\n");
	if (t->n_attempts == 0)
		printf("  (none)\n");
	for (size_t i = 0; i < t->n_attempts; i++) {
		const due_attempt *a = &t->attempts[i];
		due_time_format(b1, sizeof(b1), a->claimed_at);
		if (a->ended_at)
			due_time_format(b2, sizeof(b2), a->ended_at);
		else
			snprintf(b2, sizeof(b2), "-");
		printf("  #%-3d %-14s ", a->attempt, a->outcome);
		cli_put_str(a->worker, 20);
		printf(" claimed %s ended %s", b1, b2);
		if (a->error) {
			fputs(" error: ", stdout);
			cli_put_str(a->error, 0);
		}
		if (a->late_commit)
			printf(" late commit: %s", a->late_commit);
		putchar('\n');
	}
}

int cmd_show(int argc, char **argv)
{
	static const struct option opts[] = {CLI_COMMON_OPTS, {0}};
	cli_ctx c = {.prog = "due show"};
	const char *held = NULL;
	due_db *db = NULL;
	due_task *t;
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
	if ((rc = due_get(db, &t, id)) < 0) {
		rc = cli_fail(&c, rc);
		due_close(db);
		return rc;
	}
	rc = due_task_hold(db, &held, t);
	if (rc < 0) {
		due_close(db);
		due_task_free(t);
		return cli_fail(&c, rc);
	}
	if (c.json) {
		json_t *o = due__fmt_task(t);
		if (o)
			json_object_set_new(
			    o, "held", held ? json_string(held) : json_null());
		rc = cli_print_json(o);
	} else
		print_text(db, t, held);
	due_close(db);
	due_task_free(t);
	return rc;
}
