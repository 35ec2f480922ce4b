/*
** fuzz.h - what every fuzz target of tests/fuzz/ shares.
**
** A target is one file, fuzz_<name>.c, defining LLVMFuzzerTestOneInput();
** its seed corpus is corpus/<name>/ and the inputs that once broke it are
** kept in regressions/<name>/. The same file builds two ways
** (tests/fuzz/CMakeLists.txt): with clang and libFuzzer (DUE_FUZZ=ON, run by
** scripts/fuzz), and in every normal build with standalone_main.c, which
** replays the seeds and the kept crashes as the ctest test fuzz/<name>.
**
** A target checks what the headers promise, not only that nothing crashes:
** a broken promise is FUZZ_CHECK() failing, which prints what went wrong and
** calls abort(), so libFuzzer records the input as a crash.
*/
#ifndef DUE_FUZZ_H
#define DUE_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                  \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s\n  ",         \
				__FILE__, __LINE__, #cond);                    \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			abort();                                               \
		}                                                              \
	} while (0)

/*
** A NUL-terminated copy of the input for the text parsers: an embedded NUL
** ends the text there, as it would in a C string from argv or JSON. The
** caller frees it. Out of memory aborts (it is not what we are looking for).
*/
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (s == NULL)
		abort();
	if (size > 0)
		memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

#endif /* DUE_FUZZ_H */
