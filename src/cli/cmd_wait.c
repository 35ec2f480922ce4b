/*
** cmd_wait.c - `due wait ID [--timeout DUR] [--json]`: block until a task
** is finished, then print its state and result.
**
** Exit codes (as timeout(1) for the timeout): 0 DONE, 4 DEAD or CANCELLED,
** 124 the timeout passed first (the task is printed as it is then), 3 no
** such task, 2 bad input, 5 the store failed for DUE_WAIT_OUTAGE_US in a
** row (due_wait retries quietly until then, then its last error is
** printed).  The waiting itself is due_wait()'s (src/core/wait.c).
*/
#include <string.h>

#include "cli/cli.h"
#include "fmt/fmt.h"

#define EXIT_TIMEOUT 124
#define CALL_BOUND_MIN_US 1000000LL

static const char usage[] =
    "usage: due wait ID [--timeout DUR] [--json] [--db URL]\n"
    "\n"
    "Wait until a task is finished (DONE, DEAD or CANCELLED), then print\n"
    "its state and, on the next lines, its result (DONE) or last error.\n"
    "Without --timeout it waits as long as it takes (Ctrl-C ends it; the\n"
    "task is not touched).  It is woken by the store's notifications\n"
    "(PostgreSQL LISTEN, the SQLite store's -done file, Redis pub/sub); a\n"
    "MySQL store, or PostgreSQL behind a pooler without listen=, is read\n"
    "again with a backoff up to once a second.  A store that stops\n"
    "answering mid-wait is retried quietly, on a new connection, until 30 s\n"
    "have passed since the first failed read (each read bounded by the\n"
    "URL's timeout=, 10 s by default), or until the timeout; then its error\n"
    "is printed and the exit code is 5.  One that does not answer when the\n"
    "wait starts is exit 5 after that bound.\n"
    "\n"
    "  --timeout DUR   give up after DUR (e.g. 30s, 5m); the task is then\n"
    "                  printed as it was last read, and the exit code is\n"
    "                  124, the store answering or not.  Each read is then\n"
    "                  bounded by a fifth of DUR (1 s at least), so a frozen\n"
    "                  store holds the answer that much past DUR at most\n"
    "  --json          print the task as `due show --json` does\n"
    "\n"
    "Exit codes: 0 DONE, 4 DEAD or CANCELLED, 124 timed out (as\n"
    "timeout(1)), 3 no such task, 2 bad arguments, 5 store error.\n";

static void print_text(const due_task *t)
{
	const unsigned char *p = NULL;
	size_t n = 0;

	puts(due_state_name(t->state));
	if (t->state == DUE_DONE && t->has_result) {
		p = t->result;
		n = t->result_len;
	} else if (t->state != DUE_DONE && t->last_error) {
		p = (const unsigned char *)t->last_error;
		n = strlen(t->last_error);
	}
	if (!p)
		return;
	/* the result as the handler wrote it, when it is text */
	if (due__fmt_is_utf8(p, n)) {
		fwrite(p, 1, n, stdout);
		if (n && p[n - 1] != '\n')
			putchar('\n');
	} else
		printf("(%zu bytes, binary: see --json)\n", n);
}

static int print_task(const cli_ctx *c, const due_task *t)
{
	if (c->json)
		return cli_print_json(due__fmt_task(t));
	print_text(t);
	return 0;
}

static int finish(const cli_ctx *c, due_task *t, int rc)
{
	int prc = print_task(c, t);
	int code = rc == DUE_ETIMEDOUT	  ? EXIT_TIMEOUT
		   : t->state == DUE_DONE ? EXIT_OK
					  : EXIT_STATE;

	if (rc == DUE_ETIMEDOUT)
		fprintf(stderr, "%s: %s\n", c->prog, due_error_last());
	due_task_free(t);
	return prc ? prc : code;
}

int cmd_wait(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"timeout", required_argument, NULL, 't'}, CLI_COMMON_OPTS, {0}};
	cli_ctx c = {.prog = "due wait"};
	int64_t timeout = -1;
	due_db *db = NULL;
	due_task *t = NULL;
	due_id id;
	int opt, rc;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":ht:", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		if (opt == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		if (opt == 't') {
			if ((rc = cli_parse_duration(&c, "--timeout", optarg,
						     &timeout)))
				return rc;
			continue;
		}
		return cli_bad_option(&c, opt, argv);
	}
	if (optind + 1 != argc)
		return cli_usage_error(&c, "expected exactly one task ID");
	/* with a deadline, a frozen store may hold the read under way when
	   it passes for a fifth of it (1 s at least, the URL's timeout= at
	   most), not the whole timeout= */
	if (timeout >= 0)
		c.call_bound_us = timeout / 5 > CALL_BOUND_MIN_US
				      ? timeout / 5
				      : CALL_BOUND_MIN_US;
	if ((rc = cli_parse_id(&c, argv[optind], &id)) ||
	    (rc = cli_open(&c, &db)))
		return rc;
	rc = due_wait(db, &t, id, timeout);
	due_close(db);
	if (rc == 0 || (rc == DUE_ETIMEDOUT && t))
		return finish(&c, t, rc);
	return cli_fail(&c, rc);
}
