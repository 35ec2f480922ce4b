/*
** cmd_add.c - `due add`: schedule one task, or a batch from JSON lines.
**
** One task: prints its id (a decimal integer) on stdout, or with --json the
** whole task object (with "existed" and "moved").  With --key, a second add
** of the same (kind, key) while the first is live prints the first id and
** says so on stderr; --on-key replace|later moves that task instead (a
** debounce) when it is still waiting, and says so.
**
** Batch: every line is a JSON object {kind, payload | payload_b64, in | at,
** max_attempts, backoff, backoff_cap, key, on_key, priority, group,
** timeout, after, after_any_end},
** decoded by due__fmt_batch_line() (src/fmt/submit.c, shared with POST
** /v1/tasks and fuzzed); all lines are checked first, then written in one
** transaction, so a bad line 7 writes nothing.  On a terminal a progress
** line says how far the reading is (lines, and the share of the file's bytes
** when it is a file) and then how long the write has run: the write is one
** transaction, one statement or script on most stores, with nothing to count
** inside it.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cli/cli.h"
#include "fmt/fmt.h"

static const char usage[] =
    "usage: due add KIND [--in DUR | --at TIME]\n"
    "               [--payload TEXT | --payload-file FILE | --payload-stdin]\n"
    "               [--max-attempts N] [--backoff DUR] [--backoff-cap DUR]\n"
    "               [--key BUSINESS_KEY [--on-key keep|replace|later]]\n"
    "               [--priority N] [--group G]\n"
    "               [--after ID[,ID...] [--after-any-end]]\n"
    "               [--timeout DUR] [--json] [--db URL]\n"
    "       due add --batch FILE|-   [--db URL]\n"
    "\n"
    "Schedule a task of KIND, due after --in (default: now) or at --at.\n"
    "  --in DUR            delay: 250ms, 10s, 30m, 2h, 1d, 1h30m\n"
    "  --at TIME           RFC 3339 time, e.g. 2026-12-01T02:00:00Z\n"
    "  --payload TEXT      opaque payload (default empty; limit 1 MiB,\n"
    "                      $DUE_MAX_PAYLOAD bytes to change it)\n"
    "  --payload-file F    payload from a file;  --payload-stdin  from stdin\n"
    "  --max-attempts N    tries before the task is DEAD (default 5)\n"
    "  --backoff DUR       retry delay base (default 1s), doubled per try\n"
    "  --backoff-cap DUR   retry delay cap (default 1h)\n"
    "  --key KEY           business key: while a task of the same kind and\n"
    "                      key is live, add returns its id instead\n"
    "  --on-key MODE       what an add does to that live task (with --key):\n"
    "                      keep (default): nothing; replace: a waiting one\n"
    "                      takes this add's due time and payload; later: only\n"
    "                      if this due time is later (a debounce: it runs at\n"
    "                      the last time asked).  A running one is never\n"
    "                      touched: it gives up the key and this add makes a\n"
    "                      new task.  stdout: the id that holds the key;\n"
    "                      stderr says whether it moved\n"
    "  --priority N        -32768..32767 (default 0): among due tasks the\n"
    "                      lowest number is claimed first\n"
    "  --group G           the task's group within its kind (a customer, "
    "say):\n"
    "                      `due kind set KIND --max-running-per-group N` "
    "limits\n"
    "                      each group; the handler gets $DUE_GROUP\n"
    "  --timeout DUR       time limit of each try (default: the kind's, see\n"
    "                      `due kind`): a handler still running is stopped "
    "and\n"
    "                      the try fails as TIMED_OUT\n"
    "  --after ID[,ID...]  run after these tasks (at most 1,000): the task\n"
    "                      is held until each is DONE, then due at --in\n"
    "                      counted from then (or --at, if later); a parent\n"
    "                      that ends DEAD or CANCELLED cancels it.  The\n"
    "                      handler gets their results ($DUE_PARENT_RESULTS)\n"
    "  --after-any-end     with --after: run once each parent has ended,\n"
    "                      whatever its end (DONE, DEAD or CANCELLED)\n"
    "  --json              print the task object instead of the id\n"
    "  --batch FILE|-      JSON lines, one task object each, one transaction;\n"
    "                      prints the ids, one a line (on a terminal, a line\n"
    "                      on stderr says how far the reading and writing\n"
    "                      are).  At most 10,000 tasks a call on Redis (one\n"
    "                      script, all or none, and it blocks the server\n"
    "                      while it runs); the SQL stores take any number\n"
    "\n"
    "A payload is also bounded by what the store takes in one task, and\n"
    "refused before anything is sent (exit 2, naming the setting): MySQL\n"
    "and MariaDB (max_allowed_packet - 16 KiB) / 2, Redis\n"
    "proto-max-bulk-len (512 MB by default; a batch's payloads together\n"
    "too), PostgreSQL 1 GB less 4 MiB, SQLite SQLITE_LIMIT_LENGTH less\n"
    "4 MiB (995,805,696 bytes by default).\n";

enum {
	O_IN = 'i',
	O_AT = 'a',
	O_PAYLOAD = 'p',
	O_PFILE = 'f',
	O_PSTDIN = 's',
	O_MAXATT = 'm',
	O_BACKOFF = 'b',
	O_CAP = 'c',
	O_KEY = 'k',
	O_BATCH = 'B',
	O_PRIORITY = 'P',
	O_GROUP = 'g',
	O_TIMEOUT = 't',
	O_ON_KEY = 'o',
	O_AFTER = 'A',
	O_ANY_END = 'E'
};

typedef struct add_args {
	const char *in, *at, *payload, *pfile, *batch;
	bool pstdin;
	due_schedule_opts o;
	due_id after[DUE_AFTER_MAX];
} add_args;

/*
** --after ID[,ID...]: 1..DUE_AFTER_MAX task ids into a->after (a second
** --after adds to the list).  Duplicates and the parents' existence are
** the library's and the store's to check, with the messages every client
** sees.
*/
static int after_list(const cli_ctx *c, const char *arg, add_args *a)
{
	const char *p = arg;

	for (;;) {
		char *end;
		long long v;

		errno = 0;
		v = strtoll(p, &end, 10);
		if (*p < '0' || *p > '9' || end == p || errno || v <= 0 ||
		    (*end && *end != ','))
			return cli_usage_error(c,
					       "--after: '%s' is not a list of "
					       "task ids (41 or 41,42)",
					       arg);
		if (a->o.n_after == DUE_AFTER_MAX)
			return cli_usage_error(c, "--after: more than %d tasks",
					       DUE_AFTER_MAX);
		a->after[a->o.n_after++] = (due_id)v;
		if (!*end)
			break;
		p = end + 1;
	}
	a->o.after = a->after;
	return 0;
}

/* Fill o.delay_us / o.at from --in / --at. */
static int timing(const cli_ctx *c, const char *in, const char *at,
		  due_schedule_opts *o)
{
	if (in && at)
		return cli_usage_error(c, "--in and --at are exclusive");
	if (in && due_duration_parse(&o->delay_us, in) < 0)
		return cli_usage_error(c, "--in: %s", due_error_last());
	if (at && due_time_parse(&o->at, at) < 0)
		return cli_usage_error(c, "--at: %s", due_error_last());
	return 0;
}

/*
** --priority, --group and --timeout into *o.  The group's checks (empty,
** too long, not UTF-8, control characters) are the library's, so the
** message is the one every client sees, as for --key.
*/
static int flow_opt(const cli_ctx *c, int opt, const char *arg,
		    due_schedule_opts *o)
{
	long v;

	switch (opt) {
	case O_PRIORITY:
		if (cli_parse_int(c, "--priority", arg, DUE_PRIORITY_MIN,
				  DUE_PRIORITY_MAX, &v))
			return EXIT_USAGE;
		o->priority = (int32_t)v;
		return 0;
	case O_GROUP: o->group = arg; return 0;
	default:
		if (cli_parse_duration(c, "--timeout", arg, &o->timeout_us))
			return EXIT_USAGE;
		if (o->timeout_us <= 0 || o->timeout_us > DUE_TIMEOUT_MAX_US)
			return cli_usage_error(
			    c,
			    "invalid --timeout '%s': must be "
			    "more than 0 and at most 7d",
			    arg);
		return 0;
	}
}

static int print_result(const cli_ctx *c, due_db *db, const due_submitted *s,
			due_on_key on_key)
{
	due_task *t;
	int rc;

	if (s->moved)
		fprintf(stderr,
			"%s: the live task %lld with this kind and key "
			"took this due time and payload (moved)\n",
			c->prog, (long long)s->id);
	else if (s->existed && on_key != DUE_ON_KEY_KEEP)
		fprintf(stderr,
			"%s: the live task %lld with this kind and key is "
			"due no earlier than this: nothing changed\n",
			c->prog, (long long)s->id);
	else if (s->existed)
		fprintf(stderr,
			"%s: a live task with this kind and key exists: "
			"%lld (nothing added)\n",
			c->prog, (long long)s->id);
	if (!c->json) {
		printf("%lld\n", (long long)s->id);
		return 0;
	}
	if ((rc = due_get(db, &t, s->id)) < 0)
		return cli_fail(c, rc);
	json_t *o = due__fmt_task(t);
	due_task_free(t);
	if (o) {
		json_object_set_new(o, "existed", json_boolean(s->existed));
		json_object_set_new(o, "moved", json_boolean(s->moved));
	}
	return cli_print_json(o);
}

static int add_one(cli_ctx *c, const char *kind, add_args *a)
{
	unsigned char *buf = NULL;
	size_t len = 0;
	due_submitted s;
	due_db *db = NULL;
	int rc, sources = !!a->payload + !!a->pfile + !!a->pstdin;

	if (sources > 1)
		return cli_usage_error(c, "--payload, --payload-file and "
					  "--payload-stdin are exclusive");
	size_t limit;
	if ((rc = timing(c, a->in, a->at, &a->o)) ||
	    (rc = cli_max_payload(c, &limit)))
		return rc;
	if (a->pfile || a->pstdin) {
		if ((rc = cli_read_file(c, a->pfile ? a->pfile : "-", limit,
					&buf, &len)))
			return rc;
	} else if (a->payload) {
		len = strlen(a->payload);
	}
	if ((rc = cli_open(c, &db)))
		goto done;
	rc = due_schedule(db, &s, kind, buf ? (const void *)buf : a->payload,
			  len, &a->o);
	rc = rc < 0 ? cli_fail(c, rc) : print_result(c, db, &s, a->o.on_key);
done:
	due_close(db);
	free(buf);
	return rc;
}

typedef struct batch {
	json_t **objs;
	unsigned char **blobs;
	due_submit *items;
	size_t n, cap;
} batch;

static void batch_free(batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		json_decref(b->objs[i]);
		free(b->blobs[i]);
	}
	free(b->objs);
	free(b->blobs);
	free(b->items);
}

/* Add a decoded line to b (taking obj and blob); -1 on ENOMEM. */
static int batch_push(batch *b, json_t *obj, unsigned char *blob,
		      const due_submit *s)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		json_t **o = realloc(b->objs, cap * sizeof(*o));
		if (o)
			b->objs = o;
		unsigned char **bl = realloc(b->blobs, cap * sizeof(*bl));
		if (bl)
			b->blobs = bl;
		due_submit *it = realloc(b->items, cap * sizeof(*it));
		if (it)
			b->items = it;
		if (!o || !bl || !it)
			return -1;
		b->cap = cap;
	}
	b->objs[b->n] = obj;
	b->blobs[b->n] = blob;
	b->items[b->n] = *s;
	b->n++;
	return 0;
}

/* Read and check every line of the batch file, with progress p. */
static int batch_read(cli_ctx *c, const char *path, batch *b, cli_progress *p)
{
	cli_progress_phase ph = {.what = "read", .unit = "lines"};
	FILE *f;
	struct stat st;
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	off_t size = 0, bytes = 0;
	ssize_t len;
	int rc;

	if ((rc = cli_open_input(c, path, &f)))
		return rc;
	if (p && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode))
		size = st.st_size;
	cli_progress_phase_begin(p, &ph);
	while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
		unsigned char *blob;
		char err[1024];
		due_submit s;
		json_t *obj;
		int got;

		bytes += len;
		if (p && (lineno % 1024 == 0 || bytes == size))
			cli_progress_set(p, (int64_t)lineno + 1,
					 size ? (double)bytes / (double)size
					      : -1);
		got = due__fmt_batch_line(line, (size_t)len, ++lineno, &obj, &s,
					  &blob, err, sizeof(err));
		if (got == 0 && batch_push(b, obj, blob, &s) == 0)
			continue;
		json_decref(obj);
		free(blob);
		if (got < 0)
			rc = cli_usage_error(c, "%s", err);
		else if (got == 0)
			rc = EXIT_STORE;
	}
	if (rc == 0)
		cli_progress_set(p, (int64_t)lineno, size ? 1.0 : -1);
	if (rc == 0 && ferror(f))
		rc = cli_usage_error(c, "--batch: cannot read '%s': %s", path,
				     strerror(errno));
	free(line);
	if (f != stdin)
		fclose(f);
	return rc;
}

static int add_batch(cli_ctx *c, const char *path)
{
	batch b = {0};
	due_submitted *out = NULL;
	due_db *db = NULL;
	int rc;

	cli_progress *p = cli_progress_start(c);
	cli_progress_phase ph = {.unit = NULL};

	if ((rc = batch_read(c, path, &b, p)))
		goto done;
	snprintf(ph.what, sizeof(ph.what),
		 "writing %zu tasks in one transaction", b.n);
	cli_progress_phase_begin(p, &ph);
	if ((rc = cli_open(c, &db)))
		goto done;
	if (b.n && !(out = calloc(b.n, sizeof(*out)))) {
		rc = EXIT_STORE;
		goto done;
	}
	if ((rc = due_schedule_batch(db, out, b.items, b.n)) < 0) {
		rc = cli_fail(c, rc);
		goto done;
	}
	cli_progress_end(p);
	p = NULL;
	for (size_t i = 0; i < b.n; i++)
		printf("%lld\n", (long long)out[i].id);
	rc = 0;
done:
	cli_progress_end(p);
	free(out);
	batch_free(&b);
	due_close(db);
	return rc;
}

int cmd_add(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"in", required_argument, NULL, O_IN},
	    {"at", required_argument, NULL, O_AT},
	    {"payload", required_argument, NULL, O_PAYLOAD},
	    {"payload-file", required_argument, NULL, O_PFILE},
	    {"payload-stdin", no_argument, NULL, O_PSTDIN},
	    {"max-attempts", required_argument, NULL, O_MAXATT},
	    {"backoff", required_argument, NULL, O_BACKOFF},
	    {"backoff-cap", required_argument, NULL, O_CAP},
	    {"key", required_argument, NULL, O_KEY},
	    {"on-key", required_argument, NULL, O_ON_KEY},
	    {"batch", required_argument, NULL, O_BATCH},
	    {"priority", required_argument, NULL, O_PRIORITY},
	    {"group", required_argument, NULL, O_GROUP},
	    {"timeout", required_argument, NULL, O_TIMEOUT},
	    {"after", required_argument, NULL, O_AFTER},
	    {"after-any-end", no_argument, NULL, O_ANY_END},
	    CLI_COMMON_OPTS,
	    {0}};
	static add_args a; /* 8 KB of parent ids: not on the stack */
	cli_ctx c = {.prog = "due add"};
	bool flow = false, on_key = false;
	const char *single = NULL; /* an option of a single add, for --batch */
	long v;
	int opt;

	memset(&a, 0, sizeof(a));
	a.o = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_common_opt(&c, opt, optarg))
			continue;
		switch (opt) {
		case 'h': fputs(usage, stdout); return 0;
		case O_IN:
			a.in = optarg;
			single = "--in";
			break;
		case O_AT:
			a.at = optarg;
			single = "--at";
			break;
		case O_PAYLOAD:
			a.payload = optarg;
			single = "--payload";
			break;
		case O_PFILE:
			a.pfile = optarg;
			single = "--payload-file";
			break;
		case O_PSTDIN:
			a.pstdin = true;
			single = "--payload-stdin";
			break;
		case O_KEY:
			a.o.key = optarg;
			single = "--key";
			break;
		case O_ON_KEY:
			if (due_on_key_parse(optarg, &a.o.on_key) < 0)
				return cli_usage_error(&c, "--on-key: %s",
						       due_error_last());
			on_key = true;
			break;
		case O_BATCH: a.batch = optarg; break;
		case O_AFTER:
			if (after_list(&c, optarg, &a))
				return EXIT_USAGE;
			single = "--after";
			break;
		case O_ANY_END:
			a.o.after_any_end = true;
			single = "--after-any-end";
			break;
		case O_PRIORITY:
		case O_GROUP:
		case O_TIMEOUT:
			if (flow_opt(&c, opt, optarg, &a.o))
				return EXIT_USAGE;
			flow = true;
			break;
		case O_MAXATT:
			if (cli_parse_int(&c, "--max-attempts", optarg, 1, 1000,
					  &v))
				return EXIT_USAGE;
			a.o.max_attempts = (int32_t)v;
			single = "--max-attempts";
			break;
		case O_BACKOFF:
			if (cli_parse_duration(&c, "--backoff", optarg,
					       &a.o.backoff_us))
				return EXIT_USAGE;
			single = "--backoff";
			break;
		case O_CAP:
			if (cli_parse_duration(&c, "--backoff-cap", optarg,
					       &a.o.backoff_cap_us))
				return EXIT_USAGE;
			single = "--backoff-cap";
			break;
		default: return cli_bad_option(&c, opt, argv);
		}
	}
	if (a.batch) {
		if (optind < argc)
			return cli_usage_error(
			    &c, "--batch takes no KIND argument");
		if (flow || on_key || single)
			return cli_usage_error(
			    &c,
			    "--batch takes no %s: give in, at, payload, key, "
			    "on_key, max_attempts, backoff, priority, group, "
			    "timeout, after and after_any_end in each line",
			    single   ? single
			    : on_key ? "--on-key"
				     : "--priority, --group or --timeout");
		return add_batch(&c, a.batch);
	}
	if (optind >= argc)
		return cli_usage_error(&c, "missing KIND");
	if (on_key && !a.o.key)
		return cli_usage_error(&c, "--on-key needs --key: it says what "
					   "to do with the live task of that "
					   "key");
	if (a.o.after_any_end && !a.o.n_after)
		return cli_usage_error(&c, "--after-any-end needs --after: it "
					   "says which ends of the parents "
					   "count");
	if (optind + 1 < argc)
		return cli_usage_error(&c, "unexpected argument '%s'",
				       argv[optind + 1]);
	return add_one(&c, argv[optind], &a);
}
