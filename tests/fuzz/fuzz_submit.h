/*
** fuzz_submit.h - what fuzz_batch.c and fuzz_http_body.c check of the task
** decoder (src/fmt/submit.c) once it has answered.
**
** A refusal is one line: a message, not empty, with no control byte (a
** newline in it would split the CLI's one-line error and could forge a
** second one), valid UTF-8 (the HTTP service puts it in a JSON string;
** json_pack() would fail on anything else and turn the 400 into a 500).
**
** An acceptance is checked against the object itself, decoded here
** independently: every field is a known one; kind is the object's "kind"
** string; a delay is never negative, an instant never before the epoch,
** never both, and an absent one stays unset; max_attempts is 1..1000 and
** backoffs are not negative; the payload is exactly the "payload" text or
** the "payload_b64" bytes (decoded by this file's own base64 reader) or
** empty; key is the "key" string or NULL.  The kind's syntax is not the
** decoder's promise (the library checks it, and its message is what the
** tests expect), so it is not asserted here.
*/
#ifndef DUE_FUZZ_SUBMIT_H
#define DUE_FUZZ_SUBMIT_H

#include <jansson.h>

#include "due.h"
#include "fmt/fmt.h"
#include "fuzz.h"

static inline void fuzz_check_refusal(const char *err, const char *prefix)
{
	size_t n = strlen(err), p = strlen(prefix);

	FUZZ_CHECK(n > p, "empty message: '%s'", err);
	FUZZ_CHECK(strncmp(err, prefix, p) == 0, "'%s' lacks the prefix '%s'",
		   err, prefix);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK((unsigned char)err[i] >= 0x20 && err[i] != 0x7f,
			   "control byte 0x%02x at %zu in '%s'",
			   (unsigned char)err[i], i, err);
	FUZZ_CHECK(due__fmt_is_utf8((const unsigned char *)err, n),
		   "not UTF-8: '%s'", err);
	json_t *j = json_pack("{s:s}", "detail", err);
	FUZZ_CHECK(j != NULL, "json_pack refuses the message '%s'", err);
	json_decref(j);
}

/* RFC 4648 base64, padded, written here again; -1 if not base64. */
static inline int fuzz_unbase64(const char *t, unsigned char *out, size_t *len)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				  "abcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = strlen(t), pad = 0, k = 0;
	unsigned acc = 0;

	if (n % 4)
		return -1;
	while (pad < 2 && pad < n && t[n - 1 - pad] == '=')
		pad++;
	for (size_t i = 0; i < n - pad; i++) {
		const char *c = t[i] ? strchr(abc, t[i]) : NULL;
		if (!c)
			return -1;
		acc = acc << 6 | (unsigned)(c - abc);
		if (i % 4 != 0)
			out[k++] = (unsigned char)(acc >> (2 * (3 - i % 4)));
	}
	*len = k;
	return 0;
}

static inline void fuzz_check_payload(json_t *obj, const due_submit *s)
{
	json_t *text = json_object_get(obj, "payload");
	json_t *b64 = json_object_get(obj, "payload_b64");

	FUZZ_CHECK(!(text && b64), "both payload and payload_b64 accepted");
	if (text) {
		FUZZ_CHECK(s->payload_len == json_string_length(text) &&
			       memcmp(s->payload, json_string_value(text),
				      s->payload_len) == 0,
			   "payload of %zu bytes, the text has %zu",
			   s->payload_len, json_string_length(text));
	} else if (b64) {
		const char *t = json_string_value(b64);
		unsigned char *want = malloc(strlen(t) / 4 * 3 + 1);
		size_t len = 0;
		if (!want)
			abort();
		FUZZ_CHECK(fuzz_unbase64(t, want, &len) == 0,
			   "'%s' accepted as base64", t);
		FUZZ_CHECK(s->payload_len == len &&
			       memcmp(s->payload, want, len) == 0,
			   "'%s' decoded to %zu bytes, not %zu", t,
			   s->payload_len, len);
		free(want);
	} else {
		FUZZ_CHECK(s->payload_len == 0, "%zu bytes from no payload",
			   s->payload_len);
	}
}

static inline void fuzz_check_submit(json_t *obj, const due_submit *s)
{
	const due_schedule_opts *o = &s->opts;
	json_t *kind = json_object_get(obj, "kind"), *key, *v;
	const char *k;

	json_object_foreach(obj, k, v)
	{
		size_t i = 0;
		while (due__fmt_submit_fields[i] &&
		       strcmp(due__fmt_submit_fields[i], k) != 0)
			i++;
		FUZZ_CHECK(due__fmt_submit_fields[i], "unknown field '%s'", k);
	}
	FUZZ_CHECK(json_is_string(kind) && s->kind &&
		       strcmp(s->kind, json_string_value(kind)) == 0,
		   "kind '%s' is not the object's",
		   s->kind ? s->kind : "(null)");
	FUZZ_CHECK(o->delay_us >= 0, "delay %lld", (long long)o->delay_us);
	FUZZ_CHECK(o->at == DUE_TIME_NONE || o->at >= 0, "at %lld",
		   (long long)o->at);
	FUZZ_CHECK(o->delay_us == 0 || o->at == DUE_TIME_NONE,
		   "both a delay and an instant");
	FUZZ_CHECK(json_object_get(obj, "in") || o->delay_us == 0,
		   "a delay without 'in'");
	FUZZ_CHECK(json_object_get(obj, "at") || o->at == DUE_TIME_NONE,
		   "an instant without 'at'");
	FUZZ_CHECK(o->max_attempts >= 1 && o->max_attempts <= 1000,
		   "max_attempts %d", (int)o->max_attempts);
	FUZZ_CHECK(o->backoff_us >= 0 && o->backoff_cap_us >= 0,
		   "backoff %lld, cap %lld", (long long)o->backoff_us,
		   (long long)o->backoff_cap_us);
	key = json_object_get(obj, "key");
	FUZZ_CHECK(key ? o->key && strcmp(o->key, json_string_value(key)) == 0
		       : o->key == NULL,
		   "key '%s'", o->key ? o->key : "(null)");
	fuzz_check_payload(obj, s);
}

#endif /* DUE_FUZZ_SUBMIT_H */
