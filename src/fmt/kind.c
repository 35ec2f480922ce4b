/*
** kind.c - a kind's flow-control settings as JSON, and back (issue 21,
** docs/internals/flow.md).
**
** One shape for `due kind ls --json`, GET /v1/kinds and the "kinds" of
** `due stats --json`: the settings first, each null when it is no limit
** (rate "N/DUR", max_running, max_running_per_group, timeout "DUR"), then
** what the store counted with them (running, rate_used, due, held_*).
** Durations are written as due_duration_format() writes them ("1s",
** "1m30s"), which due_duration_parse() reads back, so a value from a
** listing can be given to `kind set` or PUT /v1/kinds/{kind} unchanged.
**
** The reverse direction, due__fmt_kind_settings_from_json(), decodes a PUT
** body into a due_kind_settings change.  It refuses here, with one line
** naming the field, what the library would also refuse (so the HTTP
** service answers 400 with a message in its own words) and what only JSON
** can get wrong: types, unknown fields, an object that changes nothing.
** Pure: no store, no I/O.
*/
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt/fmt.h"

#define FLOW_N_MAX 1000000
#define RATE_US_MIN 1000LL		/* 1 ms */
#define RATE_US_MAX (86400LL * 1000000) /* 1 day */

/* Length of the UTF-8 sequence its first byte announces; 0 if none. */
static size_t seq_len(unsigned char c)
{
	return c < 0x80		? 1
	       : (c >> 5) == 6	? 2
	       : (c >> 4) == 14 ? 3
	       : (c >> 3) == 30 ? 4
				: 0;
}

/*
** Format a refusal into err as one line of valid UTF-8 (a quoted text may
** be cut inside a character, and a command line need not be UTF-8):
** control bytes and bad sequences become '?'.  Returns -1.
*/
static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	char raw[512];
	const unsigned char *p = (const unsigned char *)raw;
	size_t o = 0;
	va_list ap;

	if (!errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	while (*p) {
		size_t n = seq_len(*p);
		if (*p < 0x20 || *p == 0x7f || n == 0 ||
		    !due__fmt_is_utf8(p, n))
			n = 0;
		if (o + (n ? n : 1) >= errlen)
			break;
		if (n) {
			memcpy(err + o, p, n);
			o += n;
			p += n;
		} else {
			err[o++] = '?';
			p++;
		}
	}
	err[o] = '\0';
	return -1;
}

static json_t *limit_or_null(int64_t n)
{
	return n > 0 ? json_integer((json_int_t)n) : json_null();
}

static json_t *duration_or_null(int64_t us)
{
	char buf[64];

	if (us <= 0)
		return json_null();
	due_duration_format(buf, sizeof(buf), us);
	return json_string(buf);
}

static json_t *rate_or_null(int32_t n, int64_t us)
{
	char d[64], buf[96];

	if (n <= 0)
		return json_null();
	due_duration_format(d, sizeof(d), us);
	snprintf(buf, sizeof(buf), "%d/%s", (int)n, d);
	return json_string(buf);
}

json_t *due__fmt_kind(const due_kind_info *k)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	due__fmt_set_text(o, "kind", k->kind);
	json_object_set_new(o, "paused", json_boolean(k->paused));
	json_object_set_new(o, "rate", rate_or_null(k->rate_n, k->rate_us));
	json_object_set_new(o, "max_running", limit_or_null(k->max_running));
	json_object_set_new(o, "max_running_per_group",
			    limit_or_null(k->max_running_per_group));
	json_object_set_new(o, "timeout", duration_or_null(k->timeout_us));
	json_object_set_new(o, "running", json_integer(k->running));
	json_object_set_new(o, "rate_used", json_integer(k->rate_used));
	json_object_set_new(o, "due", json_integer(k->due));
	json_object_set_new(o, "held_rate", json_integer(k->held_rate));
	json_object_set_new(o, "held_running", json_integer(k->held_running));
	json_object_set_new(o, "held_group", json_integer(k->held_group));
	json_object_set_new(o, "updated_at", due__fmt_time(k->updated_at));
	return o;
}

json_t *due__fmt_kind_list(const due_kind_info_list *l)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && l && i < l->count; i++)
		json_array_append_new(arr, due__fmt_kind(&l->items[i]));
	return arr;
}

/*
** "N/DUR": N a decimal integer 1..1000000 (no sign, no spaces), DUR a
** duration of 1ms..1d.  The text is quoted in every refusal.
*/
int due__fmt_rate_parse(const char *text, int32_t *n, int64_t *us, char *err,
			size_t errlen)
{
	const char *slash = text ? strchr(text, '/') : NULL;
	char *end;
	long v;

	if (!text || !slash || slash == text || !slash[1])
		return fail(err, errlen,
			    "invalid rate '%.100s': expected N/DUR, e.g. 10/1s "
			    "or 100/1m",
			    text ? text : "");
	if (text[0] < '0' || text[0] > '9')
		return fail(err, errlen,
			    "invalid rate '%.100s': N must be an integer from "
			    "1 to %d",
			    text, FLOW_N_MAX);
	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || end != slash || v < 1 || v > FLOW_N_MAX)
		return fail(err, errlen,
			    "invalid rate '%.100s': N must be an integer from "
			    "1 to %d",
			    text, FLOW_N_MAX);
	if (due_duration_parse(us, slash + 1) < 0)
		return fail(err, errlen, "invalid rate '%.100s': %s", text,
			    due_error_last());
	if (*us < RATE_US_MIN || *us > RATE_US_MAX)
		return fail(err, errlen,
			    "invalid rate '%.100s': the window must be from "
			    "1ms to 1d",
			    text);
	*n = (int32_t)v;
	return 0;
}

static const char *const settings_fields[] = {
    "paused", "rate", "max_running", "max_running_per_group", "timeout", NULL};

/* A limit field: absent keeps, null removes, else an integer 1..1000000. */
static int json_limit(json_t *obj, const char *name, int32_t *out, char *err,
		      size_t errlen)
{
	json_t *v = json_object_get(obj, name);

	if (!v)
		return 0;
	if (json_is_null(v)) {
		*out = 0;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > FLOW_N_MAX)
		return fail(err, errlen,
			    "'%s' must be an integer from 1 to %d, or null "
			    "for no limit",
			    name, FLOW_N_MAX);
	*out = (int32_t)json_integer_value(v);
	return 0;
}

static int json_rate(json_t *obj, due_kind_settings *s, char *err,
		     size_t errlen)
{
	json_t *v = json_object_get(obj, "rate");

	if (!v)
		return 0;
	if (json_is_null(v)) {
		s->rate_n = 0;
		s->rate_us = 0;
		return 0;
	}
	if (!json_is_string(v))
		return fail(err, errlen,
			    "'rate' must be a string \"N/DUR\" such as "
			    "\"10/1s\", or null for no limit");
	return due__fmt_rate_parse(json_string_value(v), &s->rate_n,
				   &s->rate_us, err, errlen);
}

static int json_timeout(json_t *obj, due_kind_settings *s, char *err,
			size_t errlen)
{
	json_t *v = json_object_get(obj, "timeout");
	int64_t us;

	if (!v)
		return 0;
	if (json_is_null(v)) {
		s->timeout_us = 0;
		return 0;
	}
	if (!json_is_string(v))
		return fail(err, errlen,
			    "'timeout' must be a duration string such as "
			    "\"30s\", or null for no limit");
	if (due_duration_parse(&us, json_string_value(v)) < 0)
		return fail(err, errlen, "'timeout': %s", due_error_last());
	if (us <= 0 || us > DUE_TIMEOUT_MAX_US)
		return fail(err, errlen,
			    "'timeout' must be more than 0 and at most 7d "
			    "(null: no limit)");
	s->timeout_us = us;
	return 0;
}

int due__fmt_kind_settings_from_json(json_t *obj, due_kind_settings *out,
				     char *err, size_t errlen)
{
	const char *k;
	json_t *v;

	*out = (due_kind_settings)DUE_KIND_SETTINGS_INIT;
	if (!json_is_object(obj))
		return fail(err, errlen, "the settings must be a JSON object");
	json_object_foreach(obj, k, v)
	{
		size_t i = 0;
		while (settings_fields[i] && strcmp(settings_fields[i], k))
			i++;
		if (!settings_fields[i])
			return fail(err, errlen,
				    "unknown field '%.100s' (paused, rate, "
				    "max_running, max_running_per_group, "
				    "timeout)",
				    k);
	}
	v = json_object_get(obj, "paused");
	if (v && !json_is_boolean(v))
		return fail(err, errlen, "'paused' must be true or false");
	if (v)
		out->paused = json_is_true(v) ? 1 : 0;
	if (json_rate(obj, out, err, errlen) < 0 ||
	    json_limit(obj, "max_running", &out->max_running, err, errlen) <
		0 ||
	    json_limit(obj, "max_running_per_group",
		       &out->max_running_per_group, err, errlen) < 0 ||
	    json_timeout(obj, out, err, errlen) < 0)
		return -1;
	if (json_object_size(obj) == 0)
		return fail(err, errlen,
			    "nothing to change: give at least one of paused, "
			    "rate, max_running, max_running_per_group, "
			    "timeout");
	return 0;
}
