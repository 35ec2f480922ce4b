/*
** fuzz_url.c - due_url_parse() and due_url_clear() (src/store/store.h).
**
** Written against the API of src/store/url.c as it is today (a due_url with
** scheme, target, sync_normal and busy_ms); when URL parsing changes, adapt
** the checks below. The input, as a C string, is a store URL. A failure is
** DUE_EINVAL (or DUE_ENOMEM) and needs no due_url_clear(), as in
** due_open(). A success names one of the two schemes, owns a non-empty
** target, and for sqlite keeps busy_ms within 0..3600000; due_url_clear()
** frees it and may be called twice.
*/
#include "due.h"
#include "fuzz.h"
#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_cstr(data, size);
	due_url u;
	int rc = due_url_parse(&u, text);

	if (rc != 0) {
		FUZZ_CHECK(rc == DUE_EINVAL || rc == DUE_ENOMEM, "'%s': rc %d", text, rc);
		free(text);
		return 0;
	}
	FUZZ_CHECK(memchr(u.scheme, '\0', sizeof u.scheme) != NULL, "scheme unterminated");
	FUZZ_CHECK(strcmp(u.scheme, "sqlite") == 0 || strcmp(u.scheme, "postgres") == 0,
		   "'%s': scheme '%s'", text, u.scheme);
	FUZZ_CHECK(u.target != NULL && u.target[0] != '\0' && strlen(u.target) <= size,
		   "'%s': target '%s'", text, u.target ? u.target : "(null)");
	if (strcmp(u.scheme, "sqlite") == 0)
		FUZZ_CHECK(u.busy_ms >= 0 && u.busy_ms <= 3600000, "'%s': busy_ms %d", text,
			   u.busy_ms);
	due_url_clear(&u);
	due_url_clear(&u);
	free(text);
	return 0;
}
