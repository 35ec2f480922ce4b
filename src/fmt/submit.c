/*
** submit.c - a task object in JSON, decoded once for the CLI and the HTTP
** service.
**
** `due add --batch` reads one object a line and POST /v1/tasks one object
** a body; both describe the same due_submit with the same fields (kind,
** payload | payload_b64, in | at, max_attempts, backoff, backoff_cap, key,
** on_key, priority, group, timeout, after, after_any_end), so they share
** due__fmt_submit_from_json() and differ only in how the JSON text is parsed
*(due__fmt_batch_line(),
** due__fmt_task_body()) and in the prefix of their messages ("--batch line
** N: ").
**
** What the decoder checks: the JSON types, no unknown field, 'in' and 'at'
** not both, durations and times that parse, max_attempts in 1..1000,
** priority in -32768..32767, a timeout above 0, base64 that decodes.  What
** it leaves to the library, which checks every submit again: the kind's
** and the group's syntax, the key's length, the payload limit, backoff <=
** backoff_cap and the timeout's upper bound; the library's messages name
** the batch item ("item 2: invalid kind '': empty") and the tests rely on
** that wording.
**
** Every refusal is one line: bytes below 0x20 and DEL are written \xHH and
** an invalid or cut UTF-8 sequence is written '?', so a message can go in
** a JSON string or on a terminal whatever the input held.  Everything here
** is pure: no store, no I/O, only the public API of due.h and jansson.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt/fmt.h"

const char *const due__fmt_submit_fields[] = {
    "kind",    "payload",      "payload_b64",	"in",
    "at",      "max_attempts", "backoff",	"backoff_cap",
    "key",     "on_key",       "priority",	"group",
    "timeout", "after",	       "after_any_end", NULL};

/*
** Copy the NUL-terminated src into err (errlen >= 1) as one line of valid
** UTF-8: control bytes as \xHH, bad sequences as '?', cut before whatever
** would not fit whole.
*/
static void oneline(char *err, size_t errlen, const char *src)
{
	const unsigned char *p = (const unsigned char *)src;
	size_t o = 0;

	while (*p) {
		/* p ends in a NUL, which no sequence spans */
		size_t n = due__fmt_utf8_cp(p, 4, NULL);
		char esc[8];
		const char *put = (const char *)p;
		size_t k = n;

		if (*p < 0x20 || *p == 0x7f) {
			k = (size_t)snprintf(esc, sizeof(esc), "\\x%02X", *p);
			put = esc;
			n = 1;
		} else if (n == 0) {
			put = "?";
			k = n = 1;
		}
		if (o + k >= errlen)
			break;
		memcpy(err + o, put, k);
		o += k;
		p += n;
	}
	err[o] = '\0';
}

/* Format a refusal into err, as one line; returns -1. */
static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	char raw[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	if (errlen)
		oneline(err, errlen, raw);
	return -1;
}

/* The first field of obj not in known; NULL when all are known. */
static const char *unknown_field(json_t *obj, const char *const *known)
{
	const char *k;
	json_t *v;

	json_object_foreach(obj, k, v)
	{
		size_t i = 0;
		while (known && known[i] && strcmp(known[i], k) != 0)
			i++;
		if (!known || !known[i])
			return k;
	}
	return NULL;
}

/* Optional string field: 0 (absent leaves *out), or -1 with a message. */
static int opt_string(json_t *obj, const char *name, const char **out,
		      char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, name);

	if (!v)
		return 0;
	if (!json_is_string(v))
		return fail(err, errlen, "'%s' must be a string", name);
	*out = json_string_value(v);
	return 0;
}

/* Optional duration field (a string such as "10s"). */
static int opt_duration(json_t *obj, const char *name, int64_t *out, char *err,
			size_t errlen)
{
	json_t *v = json_object_get(obj, name);

	if (!v)
		return 0;
	if (!json_is_string(v))
		return fail(err, errlen,
			    "'%s' must be a duration string like \"10s\" or "
			    "\"1h30m\"",
			    name);
	if (due_duration_parse(out, json_string_value(v)) < 0)
		return fail(err, errlen, "'%s': %s", name, due_error_last());
	return 0;
}

/* 'in' or 'at' into o->delay_us or o->at. */
static int timing(json_t *obj, due_schedule_opts *o, char *err, size_t errlen)
{
	const char *in = NULL, *at = NULL;

	if (opt_string(obj, "in", &in, err, errlen) < 0 ||
	    opt_string(obj, "at", &at, err, errlen) < 0)
		return -1;
	if (in && at)
		return fail(err, errlen, "give 'in' or 'at', not both");
	if (in && due_duration_parse(&o->delay_us, in) < 0)
		return fail(err, errlen, "'in': %s", due_error_last());
	if (at && due_time_parse(&o->at, at) < 0)
		return fail(err, errlen, "'at': %s", due_error_last());
	return 0;
}

/* max_attempts (1..1000), backoff, backoff_cap, key and on_key into *o. */
static int retries(json_t *obj, due_schedule_opts *o, char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, "max_attempts");

	if (v && !json_is_integer(v))
		return fail(err, errlen, "'max_attempts' must be an integer");
	if (v && (json_integer_value(v) < 1 || json_integer_value(v) > 1000))
		return fail(err, errlen,
			    "'max_attempts' must be from 1 to 1000, not %lld",
			    (long long)json_integer_value(v));
	if (v)
		o->max_attempts = (int32_t)json_integer_value(v);
	if (opt_duration(obj, "backoff", &o->backoff_us, err, errlen) < 0 ||
	    opt_duration(obj, "backoff_cap", &o->backoff_cap_us, err, errlen) <
		0 ||
	    opt_string(obj, "key", &o->key, err, errlen) < 0)
		return -1;
	v = json_object_get(obj, "on_key");
	if (v && !json_is_null(v) &&
	    (!json_is_string(v) ||
	     due_on_key_parse(json_string_value(v), &o->on_key) < 0))
		return fail(err, errlen,
			    "'on_key' must be \"keep\", \"replace\" or "
			    "\"later\"%s%.40s%s",
			    json_is_string(v) ? ", not '" : "",
			    json_is_string(v) ? json_string_value(v) : "",
			    json_is_string(v) ? "'" : "");
	return 0;
}

/*
** priority (an integer -32768..32767), group (a string, or null for none)
** and timeout (a duration string > 0, or null for the kind's) into *o.  A
** group's syntax (not empty, at most 255 bytes, no control characters) is
** the library's to check, like the kind's.
*/
static int flow(json_t *obj, due_schedule_opts *o, char *err, size_t errlen)
{
	json_t *pri = json_object_get(obj, "priority");
	json_t *grp = json_object_get(obj, "group");
	json_t *tmo = json_object_get(obj, "timeout");

	if (pri && (!json_is_integer(pri) ||
		    json_integer_value(pri) < DUE_PRIORITY_MIN ||
		    json_integer_value(pri) > DUE_PRIORITY_MAX))
		return fail(err, errlen,
			    "'priority' must be an integer from %d to %d",
			    DUE_PRIORITY_MIN, DUE_PRIORITY_MAX);
	if (pri)
		o->priority = (int32_t)json_integer_value(pri);
	if (grp && !json_is_null(grp) && !json_is_string(grp))
		return fail(err, errlen,
			    "'group' must be a string (or null for none)");
	if (grp && json_is_string(grp))
		o->group = json_string_value(grp);
	if (tmo && json_is_null(tmo))
		return 0;
	if (tmo && !json_is_string(tmo))
		return fail(err, errlen,
			    "'timeout' must be a duration string like \"30s\" "
			    "(or null for the kind's)");
	if (tmo &&
	    due_duration_parse(&o->timeout_us, json_string_value(tmo)) < 0)
		return fail(err, errlen, "'timeout': %s", due_error_last());
	if (tmo && o->timeout_us <= 0)
		return fail(err, errlen,
			    "'timeout' must be more than 0 (null: the kind's)");
	return 0;
}

/* 'payload' (text) or 'payload_b64' into s; *blob is the decoded base64. */
static int payload(json_t *obj, due_submit *s, unsigned char **blob, char *err,
		   size_t errlen)
{
	json_t *text = json_object_get(obj, "payload");
	json_t *b64 = json_object_get(obj, "payload_b64");

	if (text && b64)
		return fail(err, errlen,
			    "give 'payload' or 'payload_b64', not both");
	if ((text && !json_is_string(text)) || (b64 && !json_is_string(b64)))
		return fail(err, errlen, "'%s' must be a string",
			    text ? "payload" : "payload_b64");
	if (text) {
		s->payload = json_string_value(text);
		s->payload_len = json_string_length(text);
	} else if (b64) {
		if (due__fmt_unbase64(json_string_value(b64), blob,
				      &s->payload_len) < 0)
			return fail(err, errlen,
				    "'payload_b64' is not valid base64");
		s->payload = *blob;
	}
	return 0;
}

/*
** 'after' (an array of 1..DUE_AFTER_MAX task ids, each a positive
** integer) and 'after_any_end' (a boolean) into s.  The ids go into *blob
** after the decoded payload (if any), 8-byte aligned, so that the caller's
** one free() releases both; s->payload is moved with a realloc.  Ids twice
** and the rest of the list's rules are the library's to check.
*/
static int after(json_t *obj, due_submit *s, unsigned char **blob, char *err,
		 size_t errlen)
{
	json_t *a = json_object_get(obj, "after");
	json_t *any = json_object_get(obj, "after_any_end");
	size_t n, off = 0;
	unsigned char *nb;
	due_id *ids;

	if (any && !json_is_boolean(any) && !json_is_null(any))
		return fail(err, errlen,
			    "'after_any_end' must be true or "
			    "false (or null)");
	s->opts.after_any_end = any && json_is_true(any);
	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a) || (n = json_array_size(a)) == 0 ||
	    n > DUE_AFTER_MAX)
		return fail(err, errlen,
			    "'after' must be an array of 1 to %d task ids",
			    DUE_AFTER_MAX);
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(a, i);
		if (!json_is_integer(v) || json_integer_value(v) <= 0)
			return fail(err, errlen,
				    "'after' item %zu must be a task id (a "
				    "positive integer)",
				    i + 1);
	}
	if (*blob)
		off = (s->payload_len + 7) & ~(size_t)7;
	if (!(nb = realloc(*blob, off + n * sizeof(due_id))))
		return fail(err, errlen, "out of memory");
	if (*blob)
		s->payload = nb;
	*blob = nb;
	ids = (due_id *)(void *)(nb + off);
	for (size_t i = 0; i < n; i++)
		ids[i] = (due_id)json_integer_value(json_array_get(a, i));
	s->opts.after = ids;
	s->opts.n_after = n;
	return 0;
}

int due__fmt_submit_from_json(json_t *obj, const char *const *known,
			      due_submit *out, unsigned char **blob, char *err,
			      size_t errlen)
{
	json_t *kind = json_object_get(obj, "kind");
	const char *k;

	*blob = NULL;
	*out = (due_submit){.payload = "",
			    .opts = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT};
	if (!json_is_object(obj))
		return fail(err, errlen, "not a JSON object");
	if ((k = unknown_field(obj, known)))
		return fail(err, errlen, "unknown field '%.100s'", k);
	if (!json_is_string(kind))
		return fail(err, errlen, "'kind' (a string) is required");
	out->kind = json_string_value(kind);
	if (timing(obj, &out->opts, err, errlen) < 0 ||
	    retries(obj, &out->opts, err, errlen) < 0 ||
	    flow(obj, &out->opts, err, errlen) < 0 ||
	    payload(obj, out, blob, err, errlen) < 0 ||
	    after(obj, out, blob, err, errlen) < 0) {
		free(*blob);
		*blob = NULL;
		return -1;
	}
	return 0;
}

/*
** jansson's reason, in the caller's words where it names a flag of
** jansson's: a \u0000 in a string (JSON_ALLOW_NUL, which we leave off so
** that every string is a C string) is said with its way around.
*/
static const char *json_why(const json_error_t *je)
{
	if (strstr(je->text, "\\u0000"))
		return "a \\u0000 in a string is refused (a payload holding "
		       "NUL "
		       "bytes goes as payload_b64)";
	return je->text;
}

int due__fmt_batch_line(const char *line, size_t len, size_t lineno,
			json_t **obj, due_submit *out, unsigned char **blob,
			char *err, size_t errlen)
{
	char why[1024];
	json_error_t je;
	size_t i = 0;

	*obj = NULL;
	*blob = NULL;
	while (i < len && memchr(" \t\r\n", line[i], 4))
		i++;
	if (i == len)
		return 1;
	if (!(*obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je)))
		return fail(err, errlen, "--batch line %zu: malformed JSON: %s",
			    lineno, json_why(&je));
	if (due__fmt_submit_from_json(*obj, due__fmt_submit_fields, out, blob,
				      why, sizeof(why)) < 0)
		return fail(err, errlen, "--batch line %zu: %s", lineno, why);
	return 0;
}

int due__fmt_json_body(const char *body, size_t len, bool allow_empty,
		       json_t **out, char *err, size_t errlen)
{
	json_error_t je;

	*out = NULL;
	if (len == 0 && allow_empty) {
		*out = json_object();
		return *out ? 0 : fail(err, errlen, "out of memory");
	}
	if (len == 0)
		return fail(err, errlen, "a JSON object body is required");
	*out = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
			  &je);
	if (!*out)
		return fail(err, errlen,
			    "malformed JSON at line %d column %d: %s", je.line,
			    je.column, json_why(&je));
	if (!json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return fail(err, errlen, "the body must be a JSON object");
	}
	return 0;
}

int due__fmt_task_body(const char *body, size_t len, json_t **obj,
		       due_submit *out, unsigned char **blob, char *err,
		       size_t errlen)
{
	*blob = NULL;
	if (due__fmt_json_body(body, len, false, obj, err, errlen) < 0)
		return -1;
	return due__fmt_submit_from_json(*obj, due__fmt_submit_fields, out,
					 blob, err, errlen);
}

/*
** A POST /v1/tasks/{id}/reschedule body: {"in" | "at", "payload" |
** "payload_b64"}, with the rules of a task object for those fields; one
** of in and at is required.  Absent payload: the task keeps its own.
*/
int due__fmt_reschedule_body(const char *body, size_t len, json_t **obj,
			     due_reschedule_opts *out, unsigned char **blob,
			     char *err, size_t errlen)
{
	static const char *const known[] = {"in", "at", "payload",
					    "payload_b64", NULL};
	due_schedule_opts t = DUE_SCHEDULE_OPTS_INIT;
	due_submit p = {.payload = NULL};
	const char *k;

	*blob = NULL;
	*out = (due_reschedule_opts)DUE_RESCHEDULE_OPTS_INIT;
	if (due__fmt_json_body(body, len, false, obj, err, errlen) < 0)
		return -1;
	if ((k = unknown_field(*obj, known)))
		return fail(err, errlen,
			    "unknown field '%.100s' (a reschedule takes 'in' "
			    "or 'at', and 'payload' or 'payload_b64')",
			    k);
	if (!json_object_get(*obj, "in") && !json_object_get(*obj, "at"))
		return fail(err, errlen,
			    "give 'in' (a delay) or 'at' (an RFC 3339 time)");
	if (timing(*obj, &t, err, errlen) < 0 ||
	    payload(*obj, &p, blob, err, errlen) < 0) {
		free(*blob);
		*blob = NULL;
		return -1;
	}
	out->delay_us = t.delay_us;
	out->at = t.at;
	if (json_object_get(*obj, "payload") ||
	    json_object_get(*obj, "payload_b64")) {
		out->set_payload = true;
		out->payload = p.payload ? p.payload : "";
		out->payload_len = p.payload_len;
	}
	return 0;
}
