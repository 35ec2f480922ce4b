/*
** fuzz_time.c - due_time_parse() and due_time_format() (due.h).
**
** The input, as a C string, goes to the parser. When it parses, the instant is
** not before the epoch, and formatting it then parsing the text gives the same
** instant cut to the millisecond: the formatter promises RFC 3339 UTC "with
** milliseconds" and truncates (time.c divides), so microseconds below the
** millisecond are the only thing the round trip may lose. The formatted text
** must also be exactly 24 characters ("2026-12-01T02:00:00.000Z") and fit any
** buffer it is given, NUL-terminated.
*/
#include "due.h"
#include "fuzz.h"

static void check_small_buffers(due_time t, const char *full)
{
	size_t n = strlen(full);

	for (size_t len = 1; len <= n + 1; len++) {
		char *buf = malloc(len); /* exact size: ASan sees any overrun */

		if (buf == NULL)
			abort();
		due_time_format(buf, len, t);
		FUZZ_CHECK(memchr(buf, '\0', len) != NULL,
			   "no NUL in %zu bytes", len);
		FUZZ_CHECK(strncmp(buf, full, len - 1) == 0,
			   "'%s' in %zu bytes is not a prefix of '%s'", buf,
			   len, full);
		free(buf);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_cstr(data, size);
	char buf[64];
	due_time t, again;

	int rc = due_time_parse(&t, text);

	if (rc == 0) {
		FUZZ_CHECK(t >= 0, "'%s' parsed to %lld", text, (long long)t);
		due_time_format(buf, sizeof buf, t);
		FUZZ_CHECK(strlen(buf) == 24,
			   "'%s' -> %lld -> '%s' is not 24 characters", text,
			   (long long)t, buf);
		FUZZ_CHECK(due_time_parse(&again, buf) == 0,
			   "'%s' -> %lld -> '%s' does not parse: %s", text,
			   (long long)t, buf, due_error_last());
		FUZZ_CHECK(again == t - t % 1000,
			   "'%s' -> %lld -> '%s' -> %lld", text, (long long)t,
			   buf, (long long)again);
		check_small_buffers(t, buf);
	} else {
		FUZZ_CHECK(rc < 0, "'%s' gave %d", text, rc);
	}
	free(text);
	return 0;
}
