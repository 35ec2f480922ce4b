/*
** cmd_reschedule.c - `due reschedule ID (--in DUR | --at TIME)`: move a
** task that is still waiting to a new due time (and, with --payload*, give
** it a new payload).  Prints exactly one of RESCHEDULED TOO_LATE
** ALREADY_FINISHED NOT_FOUND (CONTRACT §3.6a), as `due cancel` prints its
** outcome; --in counts from the STORE's clock (due_reschedule).
*/
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char usage[] =
    "usage: due reschedule ID (--in DUR | --at TIME)\n"
    "                      [--payload TEXT | --payload-file FILE |\n"
    "                       --payload-stdin] [--db URL]\n"
    "\n"
    "Move a task that is still waiting to a new due time, earlier or "
    "later,\n"
    "in one atomic step; workers are woken as by an add.  The task keeps "
    "its\n"
    "id, key, priority and attempts.\n"
    "  --in DUR            due DUR after the store's now (0: due at once)\n"
    "  --at TIME           due at an RFC 3339 time\n"
    "  --payload TEXT      replace its payload (also --payload-file F,\n"
    "                      --payload-stdin); without one it keeps its own\n"
    "Prints what it found, and so what happened:\n"
    "  RESCHEDULED         it was waiting (SCHEDULED, due or not, of a\n"
    "                      paused kind too); it now runs at the new time\n"
    "  TOO_LATE            a worker has it (CLAIMED, a cancel requested or\n"
    "                      not); nothing changed: it runs at the old time\n"
    "  ALREADY_FINISHED    it was DONE, DEAD or CANCELLED; nothing changed\n"
    "  NOT_FOUND           no such task (exit code 3)\n";

enum { O_IN = 'i', O_AT = 'a', O_PAYLOAD = 'p', O_PFILE = 'f', O_PSTDIN = 's' };

typedef struct rs_args {
	const char *in, *at, *payload, *pfile;
	bool pstdin;
} rs_args;

/* --in / --at into o: exactly one of them.  0 or EXIT_USAGE. */
static int rs_timing(const cli_ctx *c, const rs_args *a, due_reschedule_opts *o)
{
	if (!a->in == !a->at)
		return cli_usage_error(c, "give exactly one of --in and --at");
	if (a->in && due_duration_parse(&o->delay_us, a->in) < 0)
		return cli_usage_error(c, "--in: %s", due_error_last());
	if (a->at && due_time_parse(&o->at, a->at) < 0)
		return cli_usage_error(c, "--at: %s", due_error_last());
	return 0;
}

/* The new payload, when one was given, into o (*buf owns a file's). */
static int rs_payload(const cli_ctx *c, const rs_args *a,
		      due_reschedule_opts *o, unsigned char **buf)
{
	size_t limit, len = 0;
	int rc;

	if (!!a->payload + !!a->pfile + a->pstdin > 1)
		return cli_usage_error(c, "--payload, --payload-file and "
					  "--payload-stdin are exclusive");
	if (!a->payload && !a->pfile && !a->pstdin)
		return 0;
	if ((rc = cli_max_payload(c, &limit)))
		return rc;
	if (a->payload) {
		o->payload = a->payload;
		len = strlen(a->payload);
	} else if ((rc = cli_read_file(c, a->pfile ? a->pfile : "-", limit, buf,
				       &len))) {
		return rc;
	} else {
		o->payload = *buf;
	}
	o->set_payload = true;
	o->payload_len = len;
	return 0;
}

static int rs_run(cli_ctx *c, due_id id, const due_reschedule_opts *o)
{
	due_reschedule_outcome out;
	due_db *db = NULL;
	int rc;

	if ((rc = cli_open(c, &db)))
		return rc;
	rc = due_reschedule(db, &out, id, o);
	due_close(db);
	if (rc < 0)
		return cli_fail(c, rc);
	puts(due_reschedule_outcome_name(out));
	return out == DUE_RESCHEDULE_NOT_FOUND ? EXIT_NOTFOUND : 0;
}

int cmd_reschedule(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"in", required_argument, NULL, O_IN},
	    {"at", required_argument, NULL, O_AT},
	    {"payload", required_argument, NULL, O_PAYLOAD},
	    {"payload-file", required_argument, NULL, O_PFILE},
	    {"payload-stdin", no_argument, NULL, O_PSTDIN},
	    CLI_COMMON_OPTS,
	    {0}};
	cli_ctx c = {.prog = "due reschedule"};
	due_reschedule_opts o = DUE_RESCHEDULE_OPTS_INIT;
	unsigned char *buf = NULL;
	rs_args a = {0};
	due_id id;
	int opt, rc;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		switch (opt) {
		case 'h': fputs(usage, stdout); return 0;
		case O_IN: a.in = optarg; break;
		case O_AT: a.at = optarg; break;
		case O_PAYLOAD: a.payload = optarg; break;
		case O_PFILE: a.pfile = optarg; break;
		case O_PSTDIN: a.pstdin = true; break;
		default: return cli_bad_option(&c, opt, argv);
		}
	}
	if (optind + 1 != argc)
		return cli_usage_error(&c, "expected exactly one task ID");
	if ((rc = cli_parse_id(&c, argv[optind], &id)) ||
	    (rc = rs_timing(&c, &a, &o)) || (rc = rs_payload(&c, &a, &o, &buf)))
		goto done;
	rc = rs_run(&c, id, &o);
done:
	free(buf);
	return rc;
}
