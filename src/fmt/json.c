/*
** json.c - tasks, attempts and schedules as JSON (jansson), and the text
** rules every rendering follows (UTF-8 or base64, times).  Stats are
** stats.c's, kinds kind.c's: both use this file, which uses neither.
**
** A task's flow-control fields (priority, group, timeout) are the task's
** own: "timeout" is null when the task has none and its kind's applies
** (kind.c renders the kinds).
**
** Payloads and results are opaque bytes.  They are shown as a JSON string
** when they are valid UTF-8 (the common case: JSON or text payloads), and
** otherwise base64-encoded under `payload_b64` / `result_b64`, so binary
** data round-trips without loss.
**
** Text fields (kind, key, group, lease_owner, last_error, an attempt's
** worker, outcome and error, a schedule's names) follow the same rule.
** The library refuses text that is not UTF-8 (src/base/task.c), but a
** store may hold some written before that rule or by SQL of its own: such
** a field is shown as `<name>_b64` in place of `<name>`, never dropped
** (jansson's json_string() returns NULL for it, and an object set with
** NULL silently lacks the field).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt/fmt.h"

json_t *due__fmt_time(due_time t)
{
	char buf[40];
	if (t <= 0)
		return json_null();
	due_time_format(buf, sizeof(buf), t);
	return json_string(buf);
}

/* An instant that is always set (0 is 1970-01-01T00:00:00Z). */
static json_t *instant(due_time t)
{
	char buf[40];
	due_time_format(buf, sizeof(buf), t);
	return json_string(buf);
}

/* A duration as `due add --timeout` takes it ("30s"), or null for 0. */
static json_t *duration_or_null(int64_t us)
{
	char buf[64];
	if (us <= 0)
		return json_null();
	due_duration_format(buf, sizeof(buf), us);
	return json_string(buf);
}

size_t due__fmt_utf8_cp(const unsigned char *p, size_t n, uint32_t *cp)
{
	size_t len;
	uint32_t c;

	if (n == 0)
		return 0;
	if (p[0] < 0x80)
		len = 1, c = p[0];
	else if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2, c = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3, c = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4, c = p[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000) ||
	    (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
		return 0;
	if (cp)
		*cp = c;
	return len;
}

size_t due__fmt_utf8_len(const unsigned char *p, size_t n)
{
	/* a NUL is not text here: JSON and labels must not carry one */
	return n && p[0] ? due__fmt_utf8_cp(p, n, NULL) : 0;
}

int due__fmt_is_utf8(const unsigned char *p, size_t n)
{
	for (size_t i = 0, len; i < n; i += len)
		if ((len = due__fmt_utf8_len(p + i, n - i)) == 0)
			return 0;
	return 1;
}

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *due__fmt_base64(const unsigned char *p, size_t n)
{
	char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)p[i] << 16;
		if (i + 1 < n)
			v |= (unsigned)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		*o++ = b64[(v >> 18) & 63];
		*o++ = b64[(v >> 12) & 63];
		*o++ = i + 1 < n ? b64[(v >> 6) & 63] : '=';
		*o++ = i + 2 < n ? b64[v & 63] : '=';
	}
	*o = '\0';
	return out;
}

int due__fmt_unbase64(const char *text, unsigned char **out, size_t *out_len)
{
	size_t n = strlen(text), k = 0;
	unsigned char *buf;
	unsigned v = 0;
	int bits = 0;

	if (n % 4)
		return -1;
	if (!(buf = malloc(n / 4 * 3 + 1)))
		return -1;
	for (size_t i = 0; i < n; i++) {
		const char *c = strchr(b64, text[i]);
		if (text[i] == '=') {
			if (i < n - 2 || (i == n - 2 && text[n - 1] != '='))
				goto bad;
			continue;
		}
		if (!c || !text[i])
			goto bad;
		v = (v << 6) | (unsigned)(c - b64);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			buf[k++] = (unsigned char)(v >> bits);
		}
	}
	buf[k] = 0;
	*out = buf;
	*out_len = k;
	return 0;
bad:
	free(buf);
	return -1;
}

/*
** Put bytes under `name` (string) or `name_b64` (base64).  With cut > 0
** and more than cut bytes, only the first cut bytes are shown (text cut
** at a character boundary), followed by `name_truncated: true` and
** `name_size`, the full length.  Text or base64 is decided on the whole
** value, so a cut value keeps the form the whole one has.
*/
static void set_bytes(json_t *o, const char *name, const unsigned char *p,
		      size_t n, size_t cut)
{
	char key[48];
	size_t show = cut && n > cut ? cut : n;

	if (due__fmt_is_utf8(p, n)) {
		while (show < n && show > 0 && (p[show] & 0xc0) == 0x80)
			show--;
		json_object_set_new(o, name,
				    json_stringn((const char *)p, show));
	} else {
		char *enc = due__fmt_base64(p, show);
		snprintf(key, sizeof(key), "%s_b64", name);
		json_object_set_new(o, key,
				    enc ? json_string(enc) : json_null());
		free(enc);
	}
	if (show == n)
		return;
	snprintf(key, sizeof(key), "%s_truncated", name);
	json_object_set_new(o, key, json_true());
	snprintf(key, sizeof(key), "%s_size", name);
	json_object_set_new(o, key, json_integer((json_int_t)n));
}

/*
** A stored text field: null when absent, a string when UTF-8, else its
** exact bytes in base64 under `name_b64` (as set_bytes does).
*/
void due__fmt_set_text(json_t *o, const char *name, const char *s)
{
	if (!s)
		json_object_set_new(o, name, json_null());
	else
		set_bytes(o, name, (const unsigned char *)s, strlen(s), 0);
}

static json_t *attempt_json(const due_attempt *a)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	json_object_set_new(o, "attempt", json_integer(a->attempt));
	due__fmt_set_text(o, "worker", a->worker);
	json_object_set_new(o, "claimed_at", due__fmt_time(a->claimed_at));
	json_object_set_new(o, "ended_at", due__fmt_time(a->ended_at));
	due__fmt_set_text(o, "outcome", a->outcome);
	due__fmt_set_text(o, "error", a->error);
	due__fmt_set_text(o, "late_commit", a->late_commit);
	json_object_set_new(
	    o, "lateness_ms",
	    json_real((double)(a->claimed_at - a->due_at) / 1000.0));
	return o;
}

json_t *due__fmt_task(const due_task *t) { return due__fmt_task_cut(t, 0); }

/* last_error, cut like payloads (it is text: kept as a string). */
static void set_error(json_t *o, const char *err, size_t cut)
{
	if (!err) {
		json_object_set_new(o, "last_error", json_null());
		return;
	}
	set_bytes(o, "last_error", (const unsigned char *)err, strlen(err),
		  cut);
}

json_t *due__fmt_task_cut(const due_task *t, size_t cut)
{
	json_t *o = json_object(), *arr = json_array();

	if (!o || !arr) {
		json_decref(o);
		json_decref(arr);
		return NULL;
	}
	json_object_set_new(o, "id", json_integer(t->id));
	due__fmt_set_text(o, "kind", t->kind);
	json_object_set_new(o, "state", json_string(due_state_name(t->state)));
	/* a due time is always set: 0 is the epoch, not "none" */
	json_object_set_new(o, "due_at", instant(t->due_at));
	json_object_set_new(o, "attempt", json_integer(t->attempt));
	json_object_set_new(o, "max_attempts", json_integer(t->max_attempts));
	json_object_set_new(o, "backoff_ms",
			    json_integer(t->backoff_us / 1000));
	json_object_set_new(o, "backoff_cap_ms",
			    json_integer(t->backoff_cap_us / 1000));
	/* flow control (schema 4): the task's own settings */
	json_object_set_new(o, "priority", json_integer(t->priority));
	due__fmt_set_text(o, "group", t->group);
	json_object_set_new(o, "timeout", duration_or_null(t->timeout_us));
	due__fmt_set_text(o, "lease_owner", t->lease_owner);
	json_object_set_new(o, "lease_until", due__fmt_time(t->lease_until));
	json_object_set_new(o, "cancel_requested",
			    json_boolean(t->cancel_requested));
	due__fmt_set_text(o, "key", t->key);
	if (t->has_result)
		set_bytes(o, "result", t->result, t->result_len, cut);
	else
		json_object_set_new(o, "result", json_null());
	set_error(o, t->last_error, cut);
	json_object_set_new(o, "created_at", due__fmt_time(t->created_at));
	json_object_set_new(o, "updated_at", due__fmt_time(t->updated_at));
	set_bytes(o, "payload", t->payload, t->payload_len, cut);
	/* run-after (schema 11): the parents' ids when read (due_get), [] for
	   none; how many are still awaited */
	if (t->after || t->after_n == 0) {
		json_t *ids = json_array();
		for (int32_t i = 0; ids && t->after && i < t->after_n; i++)
			json_array_append_new(ids, json_integer(t->after[i]));
		json_object_set_new(o, "after", ids ? ids : json_null());
	}
	json_object_set_new(o, "after_n", json_integer(t->after_n));
	json_object_set_new(o, "after_left", json_integer(t->after_left));
	json_object_set_new(o, "after_any_end", json_boolean(t->after_any_end));
	for (size_t i = 0; i < t->n_attempts; i++)
		json_array_append_new(arr, attempt_json(&t->attempts[i]));
	json_object_set_new(o, "attempts", arr);
	return o;
}

json_t *due__fmt_task_list(const due_task_list *l)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && l && i < l->count; i++)
		json_array_append_new(arr, due__fmt_task(&l->items[i]));
	return arr;
}

json_t *due__fmt_cron(const due_cron_info *s)
{
	json_t *o = json_object();
	char z[48];

	if (!o)
		return NULL;
	due__fmt_set_text(o, "name", s->name);
	due__fmt_set_text(o, "expr", s->expr);
	due__fmt_set_text(o, "kind", s->kind);
	due__fmt_set_text(o, "tz", s->tz);
	json_object_set_new(o, "misfire",
			    json_string(s->misfire ? "once" : "skip"));
	json_object_set_new(o, "overlap",
			    json_string(s->overlap ? "wait" : "allow"));
	json_object_set_new(o, "next_fire", due__fmt_time(s->next_slot));
	if (due_time_format_zone(z, sizeof(z), s->next_slot, s->tz) == 0)
		json_object_set_new(o, "next_fire_local", json_string(z));
	json_object_set_new(o, "last_fire", due__fmt_time(s->last_slot));
	json_object_set_new(o, "last_task",
			    s->last_task ? json_integer(s->last_task)
					 : json_null());
	json_object_set_new(o, "fired", json_integer(s->fired));
	json_object_set_new(o, "missed", json_integer(s->missed));
	json_object_set_new(o, "last_missed", due__fmt_time(s->last_missed));
	if (due__fmt_is_utf8(s->payload, s->payload_len)) {
		json_object_set_new(
		    o, "payload",
		    json_stringn((const char *)s->payload, s->payload_len));
	} else {
		char *b = due__fmt_base64(s->payload, s->payload_len);
		json_object_set_new(o, "payload_b64",
				    b ? json_string(b) : json_null());
		free(b);
	}
	json_object_set_new(o, "max_attempts", json_integer(s->max_attempts));
	json_object_set_new(o, "backoff_ms",
			    json_integer(s->backoff_us / 1000));
	json_object_set_new(o, "backoff_cap_ms",
			    json_integer(s->backoff_cap_us / 1000));
	return o;
}
