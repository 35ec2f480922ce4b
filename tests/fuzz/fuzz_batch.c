/*
** fuzz_batch.c - one line of `due add --batch`: due_fmt_batch_line()
** (src/fmt/submit.c), the function the CLI calls for each line it reads.
**
** The input is cut after its first newline, as getline() in cmd_add.c cuts
** the file, and handed over with its length (the line may hold NUL bytes,
** which the CLI passes on too).  The answer is checked by fuzz_submit.h: a
** blank line is only whitespace; a refusal is one line starting
** "--batch line 7: "; an acceptance is what the JSON says.  Leaks of the
** parsed object or the decoded base64 are LeakSanitizer's to find.
*/
#include "fuzz.h"
#include "fuzz_submit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t len = nl ? (size_t)(nl - data) + 1 : size;
	char *line = malloc(len + 1), err[1024];
	unsigned char *blob;
	due_submit s;
	json_t *obj;

	if (!line)
		abort();
	memcpy(line, data, len); /* exact size plus getline's NUL */
	line[len] = '\0';
	int rc =
	    due_fmt_batch_line(line, len, 7, &obj, &s, &blob, err, sizeof(err));
	if (rc == 1) {
		FUZZ_CHECK(strspn(line, " \t\r\n") == len && !obj && !blob,
			   "'%s' taken as blank", line);
	} else if (rc < 0) {
		FUZZ_CHECK(!blob, "a refusal keeps a decoded payload");
		fuzz_check_refusal(err, "--batch line 7: ");
	} else {
		FUZZ_CHECK(rc == 0 && json_is_object(obj), "rc %d", rc);
		fuzz_check_submit(obj, &s);
	}
	json_decref(obj);
	free(blob);
	free(line);
	return 0;
}
