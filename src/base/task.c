/*
** task.c - names of states and outcomes, freeing of task objects, and the
** validation rules for kinds, keys and owners that every entry point shares.
*/
#include <ctype.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"

static const char *const state_names[DUE_STATE_COUNT] = {
    "SCHEDULED", "CLAIMED", "DONE", "CANCELLED", "DEAD"};

const char *due_state_name(due_state s)
{
	return (unsigned)s < DUE_STATE_COUNT ? state_names[s] : NULL;
}

int due_state_parse(due_state *out, const char *name)
{
	for (int i = 0; name && i < DUE_STATE_COUNT; i++) {
		if (strcasecmp(name, state_names[i]) == 0) {
			*out = (due_state)i;
			return 0;
		}
	}
	return due__error_set(
	    DUE_EINVAL,
	    "unknown state '%s' (expected SCHEDULED, CLAIMED, DONE, "
	    "CANCELLED or DEAD)",
	    name ? name : "");
}

const char *due_cancel_outcome_name(due_cancel_outcome o)
{
	static const char *const n[] = {"CANCELLED", "REQUESTED", "TOO_LATE",
					"ALREADY_CANCELLED", "NOT_FOUND"};
	return (unsigned)o < 5 ? n[o] : "UNKNOWN";
}

const char *due_reschedule_outcome_name(due_reschedule_outcome o)
{
	static const char *const n[] = {"RESCHEDULED", "TOO_LATE",
					"ALREADY_FINISHED", "NOT_FOUND"};
	return (unsigned)o < 4 ? n[o] : "UNKNOWN";
}

static const char *const on_key_names[] = {"keep", "replace", "later"};

const char *due_on_key_name(due_on_key k)
{
	return (unsigned)k < 3 ? on_key_names[k] : NULL;
}

int due_on_key_parse(const char *name, due_on_key *out)
{
	for (unsigned k = 0; name && k < 3; k++)
		if (strcmp(name, on_key_names[k]) == 0) {
			*out = (due_on_key)k;
			return 0;
		}
	return due__error_set(DUE_EINVAL,
			      "invalid on_key '%s': must be keep, replace or "
			      "later",
			      name ? name : "");
}

const char *due_complete_outcome_name(due_complete_outcome o)
{
	static const char *const n[] = {"DONE", "REJECTED_STALE",
					"CANCELLED_BEFORE_COMMIT"};
	return (unsigned)o < 3 ? n[o] : "UNKNOWN";
}

const char *due_fail_outcome_name(due_fail_outcome o)
{
	static const char *const n[] = {"RETRY_SCHEDULED", "DEAD", "CANCELLED",
					"REJECTED_STALE"};
	return (unsigned)o < 4 ? n[o] : "UNKNOWN";
}

void due__task_clear(due_task *t)
{
	free(t->kind);
	free(t->payload);
	free(t->lease_owner);
	free(t->key);
	free(t->result);
	free(t->last_error);
	free(t->group);
	free(t->after);
	for (size_t i = 0; i < t->n_attempts; i++) {
		free(t->attempts[i].worker);
		free(t->attempts[i].outcome);
		free(t->attempts[i].error);
		free(t->attempts[i].late_commit);
	}
	free(t->attempts);
}

void due_task_free(due_task *t)
{
	if (!t)
		return;
	due__task_clear(t);
	free(t);
}

void due_task_list_free(due_task_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->count; i++)
		due__task_clear(&l->items[i]);
	free(l->items);
	free(l);
}

/* Kinds name handlers and appear in URLs and metrics: keep them plain. */
int due__validate_kind(const char *kind)
{
	size_t n = kind ? strlen(kind) : 0;

	if (n == 0)
		return due__error_set(DUE_EINVAL, "invalid kind '': empty");
	if (n > 128)
		return due__error_set(
		    DUE_EINVAL, "invalid kind: %zu characters (at most 128)",
		    n);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)kind[i];
		if (!isalnum(c) && c != '_' && c != '-' && c != '.' && c != ':')
			return due__error_set(
			    DUE_EINVAL,
			    "invalid kind '%s': only letters, digits and "
			    "_ - . : are allowed",
			    kind);
	}
	return 0;
}

/*
** The length of the UTF-8 sequence at p (at most n bytes), or 0 when it
** is not well formed (overlong forms, surrogates and values past U+10FFFF
** are refused, as RFC 3629 says).  Groups are printed in JSON and metric
** labels, which need valid UTF-8.  (The library's decoder; its clients,
** which use the library through due.h only, have fmt's: the same rules.)
*/
static size_t utf8_len(const unsigned char *p, size_t n)
{
	size_t len;
	uint32_t c;

	if (n == 0)
		return 0;
	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
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
	return len;
}

/*
** The one rule for text a caller sets (a task's key and group, a worker's
** owner): it must be UTF-8, because every reader shows it as JSON text
** (show --json, the HTTP service, the pipe protocol) and PostgreSQL keeps
** it as UTF-8 text (SQLite, Redis and MariaDB's VARBINARY key took any
** bytes, which JSON then could not show).  Refused with the field's
** name and the first bad byte (1-based), as DUE_EINVAL; 0 when s is
** UTF-8.  Bytes that are not text belong in the payload or the result
** (base64 in JSON).
*/
static int check_utf8(const char *field, const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t len = utf8_len((const unsigned char *)s + i, n - i);
		if (len == 0)
			return due__error_set(DUE_EINVAL,
					      "invalid %s: not UTF-8 at "
					      "byte %zu",
					      field, i + 1);
		i += len;
	}
	return 0;
}

/*
** A business key: 1..512 bytes of UTF-8.  Control characters are allowed
** (text output escapes them, JSON keeps them exactly).
*/
int due__validate_key(const char *key)
{
	if (!key)
		return 0;
	size_t n = strlen(key);
	if (n == 0)
		return due__error_set(DUE_EINVAL, "invalid key '': empty");
	if (n > 512)
		return due__error_set(
		    DUE_EINVAL, "invalid key: %zu bytes (at most 512)", n);
	return check_utf8("key", key, n);
}

int due__validate_group(const char *group)
{
	size_t n;

	if (!group)
		return 0;
	n = strlen(group);
	if (n == 0)
		return due__error_set(DUE_EINVAL, "invalid group '': empty");
	if (n > 255)
		return due__error_set(
		    DUE_EINVAL, "invalid group: %zu bytes (at most 255)", n);
	if (check_utf8("group", group, n) < 0)
		return DUE_EINVAL;
	/* a group is also a metric label: no control characters */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)group[i];
		if (c < 0x20 || c == 0x7f)
			return due__error_set(DUE_EINVAL,
					      "invalid group: control "
					      "character at byte %zu",
					      i + 1);
	}
	return 0;
}

char *due__strdup_n(const char *s, size_t n)
{
	char *p = malloc(n + 1);
	if (!p)
		return NULL;
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *due__utf8_scrub(const char *s)
{
	size_t n = strlen(s), o = 0;
	char *out = malloc(3 * n + 1); /* each bad byte becomes U+FFFD */

	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t len = utf8_len((const unsigned char *)s + i, n - i);
		if (len == 0) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		memcpy(out + o, s + i, len);
		o += len;
		i += len;
	}
	out[o] = '\0';
	return out;
}

bool due__utf8_valid(const char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i < n;) {
		size_t len = utf8_len((const unsigned char *)s + i, n - i);
		if (len == 0)
			return false;
		i += len;
	}
	return true;
}

int due__validate_lease(int64_t lease_us)
{
	if (lease_us < DUE_LEASE_MIN_US || lease_us > DUE_LEASE_MAX_US)
		return due__error_set(
		    DUE_EINVAL, "invalid lease: must be between 1ms and 7d");
	return 0;
}

/* A worker's name (lease_owner, an attempt's worker): 1..200 bytes of UTF-8. */
int due__validate_owner(const char *owner)
{
	size_t n = owner ? strlen(owner) : 0;
	if (n == 0 || n > 200)
		return due__error_set(DUE_EINVAL,
				      "invalid owner: must be 1 to 200 bytes");
	return check_utf8("owner", owner, n);
}

char *due__base64(const unsigned char *p, size_t n)
{
	static const char b64[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvw"
	    "xyz0123456789+/";
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
