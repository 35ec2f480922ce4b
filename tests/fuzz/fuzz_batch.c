/*
** fuzz_batch.c - one line of `due add --batch`: due__fmt_batch_line()
** (src/fmt/submit.c), the function the CLI calls for each line it reads.
**
** The input is cut after its first newline, as getline() in cmd_add.c cuts
** the file, and handed over with its length (the line may hold NUL bytes,
** which the CLI passes on too).  The answer is checked by fuzz_submit.h: a
** blank line is only whitespace; a refusal is one line starting
** "--batch line 7: "; an acceptance is what the JSON says (here also its
** flow-control fields: priority, group, timeout).  Leaks of the
** parsed object or the decoded base64 are LeakSanitizer's to find.
*/
#include "fuzz.h"
#include "fuzz_submit.h"

/*
** priority is the object's integer (-32768..32767) or 0; group its string
** or NULL (absent or null); timeout above 0 when it gives a duration, else
** 0 (absent or null: the kind's).
*/
static void check_flow(json_t *obj, const due_submit *s)
{
	json_t *pri = json_object_get(obj, "priority");
	json_t *grp = json_object_get(obj, "group");
	json_t *tmo = json_object_get(obj, "timeout");
	const due_schedule_opts *o = &s->opts;

	FUZZ_CHECK(o->priority >= DUE_PRIORITY_MIN &&
		       o->priority <= DUE_PRIORITY_MAX &&
		       o->priority ==
			   (pri ? (int32_t)json_integer_value(pri) : 0),
		   "priority %d", (int)o->priority);
	FUZZ_CHECK(json_is_string(grp)
		       ? o->group && !strcmp(o->group, json_string_value(grp))
		       : o->group == NULL,
		   "group '%s'", o->group ? o->group : "(null)");
	FUZZ_CHECK(json_is_string(tmo) ? o->timeout_us > 0 : o->timeout_us == 0,
		   "timeout %lld", (long long)o->timeout_us);
}

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
	int rc = due__fmt_batch_line(line, len, 7, &obj, &s, &blob, err,
				     sizeof(err));
	if (rc == 1) {
		FUZZ_CHECK(strspn(line, " \t\r\n") == len && !obj && !blob,
			   "'%s' taken as blank", line);
	} else if (rc < 0) {
		FUZZ_CHECK(!blob, "a refusal keeps a decoded payload");
		fuzz_check_refusal(err, "--batch line 7: ");
	} else {
		FUZZ_CHECK(rc == 0 && json_is_object(obj), "rc %d", rc);
		fuzz_check_submit(obj, &s);
		check_flow(obj, &s);
	}
	json_decref(obj);
	free(blob);
	free(line);
	return 0;
}
