/*
** body.c - strict readers for JSON request bodies and path ids.
**
** Every request body is one JSON object parsed by jansson with duplicate
** keys refused (due__fmt_json_body(), src/fmt/submit.c, which the fuzz
** target http_body calls as the service does); a key the route does not
** know is an error (a typo such as "max_attemps" must not silently fall
** back to a default).  Each reader
** returns 0, or -1 with r->err naming the field and what was wrong, and
** the handler answers 400 with it before anything is changed.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fmt/fmt.h"
#include "http/internal.h"

int json_body_object(http_req *r, const char *const *known, bool allow_empty,
		     json_t **out)
{
	const char *k;
	json_t *v;

	if (due__fmt_json_body(r->body, r->body_len, allow_empty, out, r->err,
			       sizeof(r->err)) < 0)
		return -1;
	json_object_foreach(*out, k, v)
	{
		size_t i = 0;
		while (known && known[i] && strcmp(known[i], k) != 0)
			i++;
		if (!known || !known[i]) {
			snprintf(r->err, sizeof(r->err),
				 "unknown field '%.100s'", k);
			json_decref(*out);
			*out = NULL;
			return -1;
		}
	}
	return 0;
}

int json_opt_string(http_req *r, json_t *o, const char *name, const char **out)
{
	json_t *v = json_object_get(o, name);

	if (!v)
		return 0;
	if (!json_is_string(v)) {
		snprintf(r->err, sizeof(r->err), "'%s' must be a string", name);
		return -1;
	}
	*out = json_string_value(v);
	return 0;
}

int json_opt_int(http_req *r, json_t *o, const char *name, int64_t lo,
		 int64_t hi, int64_t *out)
{
	json_t *v = json_object_get(o, name);
	json_int_t n;

	if (!v)
		return 0;
	if (!json_is_integer(v)) {
		snprintf(r->err, sizeof(r->err), "'%s' must be an integer",
			 name);
		return -1;
	}
	n = json_integer_value(v);
	if (n < lo || n > hi) {
		snprintf(r->err, sizeof(r->err),
			 "'%s' must be from %lld to %lld, "
			 "not %lld",
			 name, (long long)lo, (long long)hi, (long long)n);
		return -1;
	}
	*out = n;
	return 0;
}

int json_opt_duration(http_req *r, json_t *o, const char *name, int64_t *out)
{
	const char *s = NULL;

	if (json_opt_string(r, o, name, &s) < 0) {
		snprintf(r->err, sizeof(r->err),
			 "'%s' must be a duration string "
			 "like \"10s\" or \"1h30m\"",
			 name);
		return -1;
	}
	if (s && due_duration_parse(out, s) < 0) {
		snprintf(r->err, sizeof(r->err), "'%s': %s", name,
			 due_error_last());
		return -1;
	}
	return 0;
}

int json_opt_payload(http_req *r, json_t *o, const void **p, size_t *len,
		     unsigned char **out_blob)
{
	json_t *text = json_object_get(o, "payload");
	json_t *b64 = json_object_get(o, "payload_b64");

	*out_blob = NULL;
	if (text && b64) {
		snprintf(r->err, sizeof(r->err),
			 "give 'payload' or 'payload_b64', "
			 "not both");
		return -1;
	}
	if ((text && !json_is_string(text)) || (b64 && !json_is_string(b64))) {
		snprintf(r->err, sizeof(r->err), "'%s' must be a string",
			 text ? "payload" : "payload_b64");
		return -1;
	}
	if (text) {
		*p = json_string_value(text);
		*len = json_string_length(text);
	} else if (b64) {
		if (due__fmt_unbase64(json_string_value(b64), out_blob, len) <
		    0) {
			snprintf(r->err, sizeof(r->err),
				 "'payload_b64' is not valid "
				 "base64");
			return -1;
		}
		*p = *out_blob;
	}
	return 0;
}

int http_parse_id(http_req *r, const char *text, due_id *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno || *end || end == text || v <= 0 || text[0] < '0' ||
	    text[0] > '9') {
		snprintf(r->err, sizeof(r->err),
			 "invalid task id '%.100s': expected "
			 "a positive decimal integer",
			 text);
		return -1;
	}
	*out = v;
	return 0;
}
