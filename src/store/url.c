/*
** url.c - parse a store URL (INTERFACE.md, "Store URL").
**
**   sqlite:PATH            relative or absolute path
**   sqlite:///abs/path     absolute path, URL style
**   ?sync=full|normal      durability (default full)
**   ?busy_ms=N             how long a writer waits for the file lock
**   postgres://... / postgresql://...   handed to libpq unchanged
**
** Unknown schemes and unknown options are errors that name them: a typo in
** `sync=norml` must not silently give a different durability.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "store/store.h"

static int parse_sqlite_option(due_url *u, const char *opt, const char *full)
{
	if (strcmp(opt, "sync=full") == 0) {
		u->sync_normal = false;
	} else if (strcmp(opt, "sync=normal") == 0) {
		u->sync_normal = true;
	} else if (strncmp(opt, "busy_ms=", 8) == 0) {
		char *end;
		errno = 0;
		long v = strtol(opt + 8, &end, 10);
		if (errno || *end || end == opt + 8 || v < 0 || v > 3600000)
			return due_error_set(DUE_EINVAL,
				"malformed store URL '%s': busy_ms must be 0..3600000",
				full);
		u->busy_ms = (int)v;
	} else {
		return due_error_set(DUE_EINVAL,
			"malformed store URL '%s': unknown option '%s' "
			"(expected sync=full|normal or busy_ms=N)", full, opt);
	}
	return 0;
}

static int parse_sqlite(due_url *u, const char *text)
{
	const char *path = text + strlen("sqlite:");
	const char *q = strchr(path, '?');
	size_t plen = q ? (size_t)(q - path) : strlen(path);
	int rc;

	if (strncmp(path, "//", 2) == 0) {
		if (path[2] != '/')
			return due_error_set(DUE_EINVAL,
				"malformed store URL '%s': use sqlite:PATH or "
				"sqlite:///absolute/path", text);
		path += 2;
		plen -= 2;
	}
	if (plen == 0)
		return due_error_set(DUE_EINVAL,
			"malformed store URL '%s': empty file path", text);
	snprintf(u->scheme, sizeof(u->scheme), "sqlite");
	u->target = due_strdup_n(path, plen);
	u->busy_ms = 30000;
	if (!u->target)
		return due_error_set(DUE_ENOMEM, "out of memory");
	while (q) {
		const char *next = strchr(q + 1, '&');
		size_t n = next ? (size_t)(next - q - 1) : strlen(q + 1);
		char *opt = due_strdup_n(q + 1, n);
		if (!opt)
			return due_error_set(DUE_ENOMEM, "out of memory");
		rc = parse_sqlite_option(u, opt, text);
		free(opt);
		if (rc < 0)
			return rc;
		q = next;
	}
	return 0;
}

int due_url_parse(due_url *out, const char *text)
{
	int rc;

	memset(out, 0, sizeof(*out));
	if (!text || !*text)
		return due_error_set(DUE_EINVAL, "malformed store URL '': empty");
	if (strncmp(text, "sqlite:", 7) == 0) {
		if ((rc = parse_sqlite(out, text)) < 0)
			due_url_clear(out);
		return rc;
	}
	if (strncmp(text, "postgres://", 11) == 0 ||
	    strncmp(text, "postgresql://", 13) == 0) {
		snprintf(out->scheme, sizeof(out->scheme), "postgres");
		out->target = due_strdup_n(text, strlen(text));
		return out->target ? 0 : due_error_set(DUE_ENOMEM, "out of memory");
	}
	const char *colon = strchr(text, ':');
	if (!colon)
		return due_error_set(DUE_EINVAL,
			"malformed store URL '%s': no scheme (expected sqlite:PATH "
			"or postgres://...)", text);
	return due_error_set(DUE_EINVAL,
		"malformed store URL '%s': unsupported scheme '%.*s' (expected "
		"sqlite: or postgres://)", text, (int)(colon - text), text);
}

void due_url_clear(due_url *u)
{
	free(u->target);
	u->target = NULL;
}
