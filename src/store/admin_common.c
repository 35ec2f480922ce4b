/*
** admin_common.c - what the backends' admin groups share (store.h,
** due_store_admin): building a scratch store's URL from the user's by
** its generic parts (the query's options, the path), the list of a
** server's counters, and the defaults of a store on a server.
**
** These read only what every store URL has in RFC 3986's shape
** (scheme://authority/path?query); what a part means is the backend's
** parser's to say.  A scratch URL keeps the user's text: its credentials,
** hosts and options (timeout= too) carry over as written.
*/
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "store/store.h"

static int too_long(const char *text)
{
	return due__error_set(DUE_EINVAL,
			      "store URL '%.200s' is too long for a scratch "
			      "store's URL",
			      text);
}

/* snprintf into out at *off; false when it did not fit. */
static bool put(char *out, size_t n, size_t *off, const char *fmt,
		const char *a, size_t alen, const char *b)
{
	int w = snprintf(out + *off, n - *off, fmt, (int)alen, a, b);
	if (w < 0 || (size_t)w >= n - *off)
		return false;
	*off += (size_t)w;
	return true;
}

int due__url_add_option(char *out, size_t n, const char *text, const char *key,
			const char *value)
{
	size_t off = 0;
	char kv[256];

	snprintf(kv, sizeof(kv), "%s=%s", key, value);
	if (!put(out, n, &off, "%.*s%s", text, strlen(text),
		 strchr(text, '?') ? "&" : "?") ||
	    !put(out, n, &off, "%.*s%s", kv, strlen(kv), ""))
		return too_long(text);
	return 0;
}

int due__url_set_option(char *out, size_t n, const char *text, const char *key,
			const char *value)
{
	const char *q = strchr(text, '?');
	size_t off = 0, klen = strlen(key);
	bool first = true;

	if (!put(out, n, &off, "%.*s%s", text,
		 q ? (size_t)(q - text) : strlen(text), ""))
		return too_long(text);
	for (const char *p = q ? q + 1 : NULL; p && *p;) {
		size_t k = strcspn(p, "&");
		if (k &&
		    !(k > klen && !strncmp(p, key, klen) && p[klen] == '=')) {
			if (!put(out, n, &off, first ? "?%.*s%s" : "&%.*s%s", p,
				 k, ""))
				return too_long(text);
			first = false;
		}
		p += k + (p[k] == '&');
	}
	if (!put(out, n, &off, first ? "?%.*s=%s" : "&%.*s=%s", key, klen,
		 value))
		return too_long(text);
	return 0;
}

int due__url_set_path(char *out, size_t n, const char *text, const char *path)
{
	const char *a = strstr(text, "//"), *end;
	size_t off = 0, head;

	if (!a)
		return due__error_set(
		    DUE_EINVAL, "malformed store URL '%.200s': no //", text);
	a += 2;
	head = (size_t)(a - text) + strcspn(a, "/?");
	end = a + strcspn(a, "?");
	if (!put(out, n, &off, "%.*s/%s", text, head, path) ||
	    !put(out, n, &off, "%.*s%s", end, strlen(end), ""))
		return too_long(text);
	return 0;
}

static int grow(due_counters *out)
{
	size_t cap = out->cap ? out->cap * 2 : 32;
	due_counter *c;

	if (out->n < out->cap)
		return 0;
	if (!(c = realloc(out->c, cap * sizeof(*c))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	out->c = c;
	out->cap = cap;
	return 0;
}

int due__counter_add(due_counters *out, const char *name, double value,
		     unsigned kind)
{
	due_counter *c;
	int rc;

	if ((rc = grow(out)) < 0)
		return rc;
	c = &out->c[out->n++];
	memset(c, 0, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->value = value;
	c->kind = kind;
	return 0;
}

int due__counter_work(due_counters *out, const char *name, double value,
		      const char *label, const char *unit, int digits)
{
	int rc = due__counter_add(out, name, value, DUE_COUNTER_WORK);

	if (rc == 0) {
		out->c[out->n - 1].label = label;
		out->c[out->n - 1].unit = unit;
		out->c[out->n - 1].digits = digits;
	}
	return rc;
}

int due__sql_hold_row(due_store_sql *q, due_id id, const char **lock,
		      int (*exec)(due_store_sql *q, const char *sql,
				  int nparams, int64_t p1, int64_t p2,
				  const char *p3, int64_t *out, int cap))
{
	int64_t got[1];

	*lock = "row_lock";
	if (exec(q, "BEGIN", 0, 0, 0, NULL, NULL, 0) < 0 ||
	    exec(q, "SELECT id FROM due_task WHERE id = $1 FOR UPDATE", 1, id,
		 0, NULL, got, 1) != 1)
		return -1;
	return 0;
}

int due__scratch_root_tmp(const due_url *url, char *out, size_t n)
{
	(void)url;
	snprintf(out, n, "/tmp/due-scratch-XXXXXX");
	return 0;
}

bool due__scratch_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > DUE_SCRATCH_NAME_MAX)
		return false;
	for (; *name; name++)
		if (!(*name >= 'a' && *name <= 'z') &&
		    !(*name >= '0' && *name <= '9') && *name != '_')
			return false;
	return true;
}

void due__scratch_physical(const char *name, char *out, size_t n)
{
	snprintf(out, n, "%s%s", DUE_SCRATCH_PREFIX, name);
}

int64_t due__admin_bound_us(const due_url *url)
{
	return url && url->timeout_us > 0 ? url->timeout_us
					  : DUE_STORE_TIMEOUT_DEFAULT_US;
}
