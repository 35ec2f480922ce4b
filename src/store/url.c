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
**
** One option belongs to the core, not to a backend: `timeout=DUR` in the
** query of any URL, the bound of every wait for the store (due.h,
** due_open_opts.timeout_us).  It is cut out of REST here, so a backend
** (and libpq, which refuses what it does not know) never sees it.
**
** An option given twice (?sync=full&sync=off) is refused here, for every
** backend alike, naming it: which of the two a backend would keep is a
** guess the user should not have to make.
*/
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "store/store.h"

#define MIN_STORE_TIMEOUT_US 100000LL	  /* 100 ms */
#define MAX_STORE_TIMEOUT_US 3600000000LL /* 1 h */

/*
** Find `timeout=` among the &-separated options after the first '?' of
** u->rest, read it into u->timeout_us and leave u->rest without it (a copy
** in u->owned).  0, or DUE_EINVAL naming the bad value.
*/
static int cut_timeout(due_url *u)
{
	const char *q = strchr(u->rest, '?'), *opt, *end;
	char val[64], *w;
	size_t n;
	int64_t us;
	bool found = false, first = true;

	if (!q || !strstr(q, "timeout="))
		return 0;
	u->owned = malloc(strlen(u->rest) + 1);
	if (!u->owned)
		return due__error_set(DUE_ENOMEM, "out of memory");
	/* copy up to the '?', then every option but timeout= */
	memcpy(u->owned, u->rest, (size_t)(q - u->rest));
	w = u->owned + (q - u->rest);
	for (opt = q + 1;; opt = end + 1) {
		end = strchr(opt, '&');
		if (!end)
			end = opt + strlen(opt);
		n = (size_t)(end - opt);
		if (n >= 8 && strncmp(opt, "timeout=", 8) == 0) {
			found = true; /* once: refuse_repeats() */
			n -= 8;
			if (n == 0 || n >= sizeof(val))
				goto bad;
			memcpy(val, opt + 8, n);
			val[n] = '\0';
			if (due_duration_parse(&us, val) < 0 ||
			    us < MIN_STORE_TIMEOUT_US ||
			    us > MAX_STORE_TIMEOUT_US)
				goto bad;
			u->timeout_us = us;
		} else {
			*w++ = first ? '?' : '&';
			first = false;
			memcpy(w, opt, n);
			w += n;
		}
		if (!*end)
			break;
	}
	*w = '\0';
	if (!found) { /* "timeout=" only inside another option's text */
		due__url_release(u);
		return 0;
	}
	u->rest = u->owned;
	return 0;
bad:
	return due__error_set(DUE_EINVAL,
			      "malformed store URL '%s': timeout must be a "
			      "duration from 100ms to 1h (timeout=10s)",
			      u->text);
}

/*
** DUE_EINVAL naming the first option of the query (after the first '?')
** whose name (the text before '=') an earlier option already used; 0.
*/
static int refuse_repeats(const char *text)
{
	const char *q = strchr(text, '?');

	if (!q)
		return 0;
	for (const char *a = q + 1; *a; a += strcspn(a, "&"), a += *a == '&') {
		size_t an = strcspn(a, "=&");

		if (an == 0)
			continue;
		for (const char *b = a + strcspn(a, "&"); *b;) {
			b += *b == '&';
			size_t bn = strcspn(b, "=&");
			if (bn == an && memcmp(a, b, an) == 0)
				return due__error_set(DUE_EINVAL,
						      "malformed store URL "
						      "'%s': option '%.*s' "
						      "given twice",
						      text, (int)an, a);
			b += strcspn(b, "&");
		}
	}
	return 0;
}

void due__url_release(due_url *u)
{
	free(u->owned);
	u->owned = NULL;
}

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
		if ((*ops = due__store_find(out->scheme)) != NULL) {
			int rc = refuse_repeats(text);
			if (rc == 0)
				rc = cut_timeout(out);
			if (rc < 0) {
				due__url_release(out);
				*ops = NULL;
			}
			return rc;
		}
	}
	due__store_schemes(schemes, sizeof(schemes));
	if (!colon)
		return due__error_set(
		    DUE_EINVAL,
		    "malformed store URL '%s': no scheme (this build knows "
		    "%s)",
		    text, schemes);
	const char *option = due__store_left_out(text, (size_t)(colon - text));
	if (option)
		return due__error_set(
		    DUE_EINVAL,
		    "store URL '%s': this build of due has no '%.*s' backend "
		    "(build it with -D%s=ON; this build knows %s)",
		    text, (int)(colon - text), text, option, schemes);
	return due__error_set(
	    DUE_EINVAL,
	    "malformed store URL '%s': unsupported scheme '%.*s' (this "
	    "build knows %s)",
	    text, (int)(colon - text), text, schemes);
}
