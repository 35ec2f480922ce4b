/*
** fuzz_url.c - store URL parsing: due__url_parse() (src/store/url.c) splits
** the scheme and finds the backend; that backend's parse_url() reads the
** rest into its private config, which free_cfg() releases.  This is
** everything due_open() does before it touches a file or the network.
**
** The input, as a C string, is a store URL.  A failure at either stage is
** DUE_EINVAL (or DUE_ENOMEM) with a message; a success names a backend of
** this build whose schemes include the parsed scheme, and the scheme is a
** prefix of the input followed by ':'.  A `timeout=` option is cut from
** the rest (then held in u.owned) and read into u.timeout_us.
*/
#include "due.h"
#include "fuzz.h"
#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_cstr(data, size);
	const due_store_ops *ops = NULL;
	due_url u;
	void *cfg = NULL;
	int rc = due__url_parse(&u, &ops, text);

	if (rc != 0) {
		FUZZ_CHECK(rc == DUE_EINVAL || rc == DUE_ENOMEM, "'%s': rc %d",
			   text, rc);
		FUZZ_CHECK(ops == NULL, "'%s': failed parse returned a backend",
			   text);
		FUZZ_CHECK(due_error_last()[0] != '\0',
			   "'%s': failure without a message", text);
		free(text);
		return 0;
	}
	FUZZ_CHECK(ops != NULL, "'%s': no backend", text);
	FUZZ_CHECK(memchr(u.scheme, '\0', sizeof u.scheme) != NULL,
		   "scheme unterminated");
	size_t n = strlen(u.scheme);
	FUZZ_CHECK(n > 0 && strncmp(text, u.scheme, n) == 0 && text[n] == ':' &&
		       (u.rest == text + n + 1 ||
			(u.owned && u.rest == u.owned && u.timeout_us > 0)),
		   "'%s': scheme '%s' is not the input's prefix", text,
		   u.scheme);
	bool known = false;
	for (const char *const *s = ops->schemes; *s; s++)
		known |= strcmp(*s, u.scheme) == 0;
	FUZZ_CHECK(known, "'%s': backend %s does not answer '%s'", text,
		   ops->name, u.scheme);

	rc = ops->parse_url(&cfg, &u);
	if (rc != 0) {
		FUZZ_CHECK(rc == DUE_EINVAL || rc == DUE_ENOMEM,
			   "'%s': parse_url rc %d", text, rc);
		FUZZ_CHECK(due_error_last()[0] != '\0',
			   "'%s': failure without a message", text);
	}
	ops->free_cfg(cfg);
	due__url_release(&u);
	free(text);
	return 0;
}
