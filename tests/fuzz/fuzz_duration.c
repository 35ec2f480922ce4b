/*
** fuzz_duration.c - due_duration_parse() and due_duration_format() (due.h).
**
** The input, as a C string, goes to the parser. When it parses, the value is
** within 0..100 years (the parser's documented limit), and formatting it and
** parsing the text again gives the same value: the formatter writes whole
** units only ("1d2h3m4s5ms6us", "0s" for zero), it does not round, so the
** round trip is exact. Formatting into every buffer size from 0 up also must
** stay inside the buffer and leave a NUL-terminated prefix of the full text.
*/
#include "due.h"
#include "fuzz.h"

#define MAX_US                                                                 \
	(100LL * 366 * 86400 * 1000000LL) /* time.c's MAX_DURATION_US          \
					   */

static void check_small_buffers(int64_t us, const char *full)
{
	size_t n = strlen(full);

	for (size_t len = 1; len <= n + 1; len++) {
		char *buf = malloc(len); /* exact size: ASan sees any overrun */

		if (buf == NULL)
			abort();
		due_duration_format(buf, len, us);
		FUZZ_CHECK(memchr(buf, '\0', len) != NULL,
			   "no NUL in %zu bytes", len);
		FUZZ_CHECK(strncmp(buf, full, strlen(buf)) == 0,
			   "'%s' in %zu bytes is not a prefix of '%s'", buf,
			   len, full);
		free(buf);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_cstr(data, size);
	char buf[64];
	int64_t us, again;

	int rc = due_duration_parse(&us, text);

	if (rc == 0) {
		FUZZ_CHECK(us >= 0 && us <= MAX_US, "'%s' parsed to %lld", text,
			   (long long)us);
		due_duration_format(buf, sizeof buf, us);
		FUZZ_CHECK(due_duration_parse(&again, buf) == 0,
			   "'%s' -> %lld -> '%s' does not parse: %s", text,
			   (long long)us, buf, due_error_last());
		FUZZ_CHECK(again == us, "'%s' -> %lld -> '%s' -> %lld", text,
			   (long long)us, buf, (long long)again);
		check_small_buffers(us, buf);
	} else {
		FUZZ_CHECK(rc == DUE_EINVAL, "'%s' gave %d, not DUE_EINVAL",
			   text, rc);
	}
	free(text);
	return 0;
}
