/*
** cli.c - helpers shared by every subcommand: store URL resolution, error
** printing with exit codes, and strict parsing of ids, numbers, durations
** and files.  Every message goes to stderr as "due CMD: what was wrong".
*/
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cli/cli.h"
#include "fmt/fmt.h"

bool cli_common_opt(cli_ctx *c, int opt, const char *arg)
{
	switch (opt) {
	case OPT_DB: c->db_url = arg; return true;
	case OPT_JSON: c->json = true; return true;
	default: return false;
	}
}

const char *cli_db_url(const cli_ctx *c)
{
	const char *env = getenv("DUE_DB");
	if (c->db_url)
		return c->db_url;
	return env && *env ? env : "sqlite:./due.db";
}

static int exit_for(int rc)
{
	switch (rc) {
	case DUE_EINVAL:
	case DUE_ETOOBIG:
	case DUE_EUNSUPPORTED: return EXIT_USAGE;
	case DUE_ENOTFOUND: return EXIT_NOTFOUND;
	case DUE_ESTATE:
	case DUE_ECONFLICT: return EXIT_STATE;
	case DUE_ESCHEMA: return EXIT_SCHEMA;
	default: return EXIT_STORE;
	}
}

int cli_fail(const cli_ctx *c, int rc)
{
	cli_progress_hide();
	fprintf(stderr, "%s: %s\n", c->prog, due_error_last());
	return exit_for(rc);
}

int cli_max_payload(const cli_ctx *c, size_t *out)
{
	const char *mp = getenv("DUE_MAX_PAYLOAD");
	char *end;

	*out = 1u << 20;
	if (!mp || !*mp)
		return 0;
	errno = 0;
	unsigned long long v = strtoull(mp, &end, 10);
	if (errno || *end || v == 0 || v > (1ull << 30)) {
		cli_progress_hide();
		fprintf(stderr,
			"%s: invalid DUE_MAX_PAYLOAD '%s': bytes, "
			"1..1073741824\n",
			c->prog, mp);
		return EXIT_USAGE;
	}
	*out = (size_t)v;
	return 0;
}

int cli_open(cli_ctx *c, due_db **out)
{
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	int rc;

	*out = NULL;
	if ((rc = cli_max_payload(c, &o.max_payload)))
		return rc;
	o.timeout_us = c->call_bound_us > 0 ? c->call_bound_us : 0;
	rc = due_open(out, cli_db_url(c), &o);
	if (rc < 0) {
		int code = cli_fail(c, rc);
		due_close(*out);
		*out = NULL;
		return code;
	}
	return 0;
}

int cli_usage_error(const cli_ctx *c, const char *fmt, ...)
{
	va_list ap;
	cli_progress_hide();
	fprintf(stderr, "%s: ", c->prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", c->prog);
	return EXIT_USAGE;
}

int cli_parse_id(const cli_ctx *c, const char *text, due_id *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno || *end || end == text || v <= 0 || text[0] == '+' ||
	    text[0] == ' ')
		return cli_usage_error(c,
				       "invalid task id '%s': expected a "
				       "positive decimal integer",
				       text);
	*out = (due_id)v;
	return 0;
}

int cli_parse_int(const cli_ctx *c, const char *what, const char *text, long lo,
		  long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || *end || end == text || v < lo || v > hi)
		return cli_usage_error(c,
				       "invalid %s '%s': expected an integer "
				       "from %ld to %ld",
				       what, text, lo, hi);
	*out = v;
	return 0;
}

int cli_parse_duration(const cli_ctx *c, const char *what, const char *text,
		       int64_t *out)
{
	/* `--poll --once`: getopt took the next option for the value */
	if (text[0] == '-' && text[1] == '-')
		return cli_usage_error(
		    c, "option '%s' needs a value (got '%s')", what, text);
	if (due_duration_parse(out, text) < 0)
		return cli_usage_error(c, "%s: %s", what, due_error_last());
	return 0;
}

int cli_open_input(const cli_ctx *c, const char *path, FILE **out)
{
	struct stat st;
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");

	*out = NULL;
	if (!f) {
		int e = errno; /* the line's erasing may set errno */
		cli_progress_hide();
		fprintf(stderr, "%s: cannot read '%s': %s\n", c->prog, path,
			strerror(e));
		return EXIT_USAGE;
	}
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		if (f != stdin)
			fclose(f);
		cli_progress_hide();
		fprintf(stderr, "%s: cannot read '%s': is a directory\n",
			c->prog, path);
		return EXIT_USAGE;
	}
	*out = f;
	return 0;
}

int cli_read_file(const cli_ctx *c, const char *path, size_t max,
		  unsigned char **out, size_t *len)
{
	FILE *f;
	struct stat st;
	size_t cap = 4096, n = 0, got;
	unsigned char *buf = NULL, *nb;
	int rc;

	if ((rc = cli_open_input(c, path, &f)))
		return rc;
	/* a regular file over the limit: say its real size, read nothing */
	if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
	    (uintmax_t)st.st_size > max) {
		fprintf(stderr,
			"%s: '%s' is %jd bytes, over the limit of %zu bytes "
			"(set $DUE_MAX_PAYLOAD to raise it, up to 1 GiB)\n",
			c->prog, path, (intmax_t)st.st_size, max);
		rc = EXIT_USAGE;
		goto done;
	}
	/* read at most max + 1 bytes: one more than allowed is enough for the
	   library to say how far over the limit it is */
	while (n <= max) {
		if (!buf || n == cap) {
			if (buf)
				cap *= 2;
			if (!(nb = realloc(buf, cap + 1))) {
				rc = EXIT_STORE;
				fprintf(stderr,
					"%s: out of memory reading '%s'\n",
					c->prog, path);
				break;
			}
			buf = nb;
		}
		if ((got = fread(buf + n, 1, cap - n, f)) == 0)
			break;
		n += got;
	}
	if (rc == 0 && ferror(f)) {
		rc = EXIT_USAGE;
		fprintf(stderr, "%s: cannot read '%s': %s\n", c->prog, path,
			strerror(errno));
	} else if (rc == 0 && n > max) {
		/* a pipe or a file that grew: its whole size is unknown */
		rc = EXIT_USAGE;
		fprintf(stderr,
			"%s: '%s' is more than %zu bytes, over the limit "
			"(set $DUE_MAX_PAYLOAD to raise it, up to 1 GiB)\n",
			c->prog, path, max);
	}
done:
	if (f != stdin)
		fclose(f);
	if (rc) {
		free(buf);
		return rc;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

int cli_print_json(void *json)
{
	json_t *j = json;
	int rc;
	if (!j) {
		fprintf(stderr, "due: out of memory formatting JSON\n");
		return EXIT_STORE;
	}
	rc = json_dumpf(j, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
	fputc('\n', stdout);
	json_decref(j);
	return rc == 0 ? 0 : EXIT_STORE;
}

void cli_getopt_reset(void)
{
	optind = 1;
	opterr = 0;
}

int cli_bad_option(const cli_ctx *c, int opt, char **argv)
{
	/* the argument getopt was reading: an unknown first letter of a
	   cluster ("-5x") leaves optind on it, anything else moves past */
	const char *arg = argv[optind - 1], *cur = argv[optind];

	if (opt == '?' && optopt && cur && cur[0] == '-' && cur[1] == optopt)
		arg = cur;
	if (opt == ':')
		return cli_usage_error(c, "option '%s' needs a value", arg);
	if (arg[0] == '-' && arg[1] >= '0' && arg[1] <= '9')
		return cli_usage_error(
		    c,
		    "invalid task id '%s': expected a positive decimal "
		    "integer (a name that starts with '-' goes after '--': "
		    "%s -- %s)",
		    arg, c->prog, arg);
	return cli_usage_error(c, "unknown option '%s'", arg);
}

void cli_put_text(const void *data, size_t n, int width)
{
	const unsigned char *p = data;
	int shown = 0;

	for (size_t i = 0; i < n;) {
		uint32_t cp = 0;
		size_t len = due__fmt_utf8_cp(p + i, n - i, &cp);
		if (len == 0 || cp < 0x20 || cp == 0x7f ||
		    (cp >= 0x80 && cp < 0xa0)) {
			/* a control character or a byte that is not UTF-8 */
			const char *esc = NULL;
			if (len == 1 && cp == '\n')
				esc = "\\n";
			else if (len == 1 && cp == '\r')
				esc = "\\r";
			else if (len == 1 && cp == '\t')
				esc = "\\t";
			if (len == 0)
				len = 1;
			for (size_t k = 0; k < len; k++) {
				if (esc) {
					fputs(esc, stdout);
					shown += 2;
				} else {
					printf("\\x%02x", p[i + k]);
					shown += 4;
				}
			}
		} else {
			fwrite(p + i, 1, len, stdout);
			shown++;
		}
		i += len;
	}
	for (; shown < width; shown++)
		putchar(' ');
}

void cli_put_str(const char *s, int width)
{
	cli_put_text(s ? s : "", s ? strlen(s) : 0, width);
}
