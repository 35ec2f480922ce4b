/*
** url.c - split a store URL at its scheme and find its backend
** (INTERFACE.md, "Store URL").
**
** A URL is SCHEME:REST.  The scheme picks the backend from the table
** (registry.c); REST is the backend's to read (its parse_url), so the
** forms of each backend and their options are documented in its own
** file: sqlite:PATH[?sync=...&busy_ms=...] in sqlite.c,
** postgres://... in pg.c.  A URL without a scheme, or with one no backend
** of this build answers, is an error that lists the schemes it has.
*/
#include <string.h>

#include "core/internal.h"
#include "store/store.h"

int due__url_parse(due_url *out, const due_store_ops **ops, const char *text)
{
	char schemes[256];
	const char *colon;
	size_t n;

	memset(out, 0, sizeof(*out));
	*ops = NULL;
	if (!text || !*text)
		return due__error_set(DUE_EINVAL,
				      "malformed store URL '': empty");
	out->text = text;
	colon = strchr(text, ':');
	n = colon ? (size_t)(colon - text) : 0;
	if (n > 0 && n < sizeof(out->scheme)) {
		memcpy(out->scheme, text, n);
		out->scheme[n] = '\0';
		out->rest = colon + 1;
		if ((*ops = due__store_find(out->scheme)) != NULL)
			return 0;
	}
	due__store_schemes(schemes, sizeof(schemes));
	if (!colon)
		return due__error_set(
		    DUE_EINVAL,
		    "malformed store URL '%s': no scheme (this build knows "
		    "%s)",
		    text, schemes);
	return due__error_set(
	    DUE_EINVAL,
	    "malformed store URL '%s': unsupported scheme '%.*s' (this "
	    "build knows %s)",
	    text, (int)(colon - text), text, schemes);
}
