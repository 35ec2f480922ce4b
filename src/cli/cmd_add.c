/*
** cmd_add.c - `due add`: schedule one task, or a batch from JSON lines.
**
** One task: prints its id (a decimal integer) on stdout, or with --json the
** whole task object.  With --key, a second add of the same (kind, key)
** while the first is live prints the first id and says so on stderr.
**
** Batch: every line is a JSON object {kind, payload | payload_b64, in | at,
** max_attempts, backoff, backoff_cap, key}; all lines are checked first,
** then written in one transaction, so a bad line 7 writes nothing.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "fmt/fmt.h"

static const char usage[] =
    "usage: due add KIND [--in DUR | --at TIME]\n"
    "               [--payload TEXT | --payload-file FILE | --payload-stdin]\n"
    "               [--max-attempts N] [--backoff DUR] [--backoff-cap DUR]\n"
    "               [--key BUSINESS_KEY] [--json] [--db URL]\n"
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
    "  --json              print the task object instead of the id\n"
    "  --batch FILE|-      JSON lines, one task object each, one transaction;\n"
    "                      prints the ids, one a line\n";

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
	O_BATCH = 'B'
};

typedef struct add_args {
	const char *in, *at, *payload, *pfile, *batch;
	bool pstdin;
	due_schedule_opts o;
} add_args;

/* Fill o.delay_us / o.at from --in / --at. */
static int timing(const cli_ctx *c, const char *where, const char *in,
		  const char *at, due_schedule_opts *o)
{
	if (in && at)
		return cli_usage_error(c,
				       strcmp(where, "--") == 0
					   ? "--in and --at are exclusive"
					   : "%sgive 'in' or 'at', not both",
				       where);
	if (in && due_duration_parse(&o->delay_us, in) < 0)
		return cli_usage_error(c, "%sin: %s", where, due_error_last());
	if (at && due_time_parse(&o->at, at) < 0)
		return cli_usage_error(c, "%sat: %s", where, due_error_last());
	return 0;
}

static int print_result(const cli_ctx *c, due_db *db, const due_submitted *s)
{
	due_task *t;
	int rc;

	if (s->existed)
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
	rc = cli_print_json(due_fmt_task(t));
	due_task_free(t);
	return rc;
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
	if ((rc = timing(c, "--", a->in, a->at, &a->o)) ||
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
	rc = rc < 0 ? cli_fail(c, rc) : print_result(c, db, &s);
done:
	due_close(db);
	free(buf);
	return rc;
}

/* Duration field of a batch object; absent is fine. */
static int json_duration(const cli_ctx *c, json_t *obj, const char *name,
			 size_t line, int64_t *out)
{
	json_t *v = json_object_get(obj, name);
	if (!v)
		return 0;
	if (!json_is_string(v) ||
	    due_duration_parse(out, json_string_value(v)) < 0)
		return cli_usage_error(
		    c,
		    "--batch line %zu: '%s' must be a "
		    "duration string like \"10s\"%s%s",
		    line, name, json_is_string(v) ? ": " : "",
		    json_is_string(v) ? due_error_last() : "");
	return 0;
}

static int check_fields(const cli_ctx *c, json_t *obj, size_t line)
{
	static const char *const known[] = {
	    "kind",	    "payload", "payload_b64", "in",  "at",
	    "max_attempts", "backoff", "backoff_cap", "key", NULL};
	const char *k;
	json_t *v;

	json_object_foreach(obj, k, v)
	{
		size_t i = 0;
		while (known[i] && strcmp(known[i], k) != 0)
			i++;
		if (!known[i])
			return cli_usage_error(
			    c,
			    "--batch line %zu: unknown field "
			    "'%s'",
			    line, k);
	}
	return 0;
}

/* Decode one batch line into *s (strings borrowed from obj / *blob). */
static int batch_item(const cli_ctx *c, json_t *obj, size_t line, due_submit *s,
		      unsigned char **blob)
{
	json_t *kind = json_object_get(obj, "kind"), *p, *pb, *ma, *key, *in,
	       *at;
	int rc;

	if (!json_is_object(obj))
		return cli_usage_error(c, "--batch line %zu: not a JSON object",
				       line);
	if ((rc = check_fields(c, obj, line)))
		return rc;
	if (!json_is_string(kind))
		return cli_usage_error(c,
				       "--batch line %zu: 'kind' (string) is "
				       "required",
				       line);
	s->kind = json_string_value(kind);
	s->opts = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	p = json_object_get(obj, "payload");
	pb = json_object_get(obj, "payload_b64");
	if ((p && !json_is_string(p)) || (pb && !json_is_string(pb)) ||
	    (p && pb))
		return cli_usage_error(c,
				       "--batch line %zu: give 'payload' or "
				       "'payload_b64' as one string",
				       line);
	if (p) {
		s->payload = json_string_value(p);
		s->payload_len = json_string_length(p);
	} else if (pb) {
		if (due_fmt_unbase64(json_string_value(pb), blob,
				     &s->payload_len))
			return cli_usage_error(
			    c,
			    "--batch line %zu: 'payload_b64' "
			    "is not valid base64",
			    line);
		s->payload = *blob;
	}
	in = json_object_get(obj, "in");
	at = json_object_get(obj, "at");
	if ((in && !json_is_string(in)) || (at && !json_is_string(at)))
		return cli_usage_error(
		    c,
		    "--batch line %zu: 'in' and 'at' must be "
		    "strings",
		    line);
	char where[48];
	snprintf(where, sizeof(where), "--batch line %zu: ", line);
	if ((rc = timing(c, where, in ? json_string_value(in) : NULL,
			 at ? json_string_value(at) : NULL, &s->opts)))
		return rc;
	ma = json_object_get(obj, "max_attempts");
	if (ma && !json_is_integer(ma))
		return cli_usage_error(c,
				       "--batch line %zu: 'max_attempts' must "
				       "be an integer",
				       line);
	if (ma) {
		json_int_t v = json_integer_value(ma);
		s->opts.max_attempts = v < 0 || v > 100000 ? -1 : (int32_t)v;
	}
	key = json_object_get(obj, "key");
	if (key && !json_is_string(key))
		return cli_usage_error(c,
				       "--batch line %zu: 'key' must be a "
				       "string",
				       line);
	s->opts.key = key ? json_string_value(key) : NULL;
	if ((rc =
		 json_duration(c, obj, "backoff", line, &s->opts.backoff_us)) ||
	    (rc = json_duration(c, obj, "backoff_cap", line,
				&s->opts.backoff_cap_us)))
		return rc;
	return 0;
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

static int batch_push(batch *b, json_t *obj)
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
	b->blobs[b->n] = NULL;
	memset(&b->items[b->n], 0, sizeof(b->items[0]));
	b->n++;
	return 0;
}

/* Read and check every line of the batch file. */
static int batch_read(cli_ctx *c, const char *path, batch *b)
{
	FILE *f;
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	ssize_t len;
	int rc;

	if ((rc = cli_open_input(c, path, &f)))
		return rc;
	while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
		json_error_t err;
		json_t *obj;
		lineno++;
		if (strspn(line, " \t\r\n") == (size_t)len)
			continue;
		obj =
		    json_loadb(line, (size_t)len, JSON_REJECT_DUPLICATES, &err);
		if (!obj) {
			rc = cli_usage_error(
			    c, "--batch line %zu: malformed JSON: %s", lineno,
			    err.text);
			break;
		}
		if (batch_push(b, obj) < 0) {
			json_decref(obj);
			rc = EXIT_STORE;
			break;
		}
		rc = batch_item(c, obj, lineno, &b->items[b->n - 1],
				&b->blobs[b->n - 1]);
	}
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

	if ((rc = batch_read(c, path, &b)))
		goto done;
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
	for (size_t i = 0; i < b.n; i++)
		printf("%lld\n", (long long)out[i].id);
	rc = 0;
done:
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
	    {"batch", required_argument, NULL, O_BATCH},
	    CLI_COMMON_OPTS,
	    {0}};
	add_args a = {.o = DUE_SCHEDULE_OPTS_INIT};
	cli_ctx c = {.prog = "due add"};
	long v;
	int opt;

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
		case O_KEY: a.o.key = optarg; break;
		case O_BATCH: a.batch = optarg; break;
		case O_MAXATT:
			if (cli_parse_int(&c, "--max-attempts", optarg, 1, 1000,
					  &v))
				return EXIT_USAGE;
			a.o.max_attempts = (int32_t)v;
			break;
		case O_BACKOFF:
			if (cli_parse_duration(&c, "--backoff", optarg,
					       &a.o.backoff_us))
				return EXIT_USAGE;
			break;
		case O_CAP:
			if (cli_parse_duration(&c, "--backoff-cap", optarg,
					       &a.o.backoff_cap_us))
				return EXIT_USAGE;
			break;
		default: return cli_bad_option(&c, opt, argv);
		}
	}
	if (a.batch) {
		if (optind < argc)
			return cli_usage_error(
			    &c, "--batch takes no KIND argument");
		return add_batch(&c, a.batch);
	}
	if (optind >= argc)
		return cli_usage_error(&c, "missing KIND");
	if (optind + 1 < argc)
		return cli_usage_error(&c, "unexpected argument '%s'",
				       argv[optind + 1]);
	return add_one(&c, argv[optind], &a);
}
