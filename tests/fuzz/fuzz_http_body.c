/*
** fuzz_http_body.c - a POST /v1/tasks body: due__fmt_task_body()
** (src/fmt/submit.c), the function route_task_create() calls with the
** request body, which the service keeps NUL-terminated.
**
** The service refuses a body over its limit before the route runs
** (src/http/request.c weighs it; that needs a live request and is not
** fuzzed here); the inputs libFuzzer makes are far below it.  The answer
** is checked by fuzz_submit.h: a refusal is one line, fit for the JSON
** reply's "detail" (json_pack() takes it); an acceptance is what the JSON
** says.
*/
#include "fuzz.h"
#include "fuzz_submit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *body = fuzz_cstr(data, size), err[512]; /* as http_req's err */
	unsigned char *blob;
	due_submit s;
	json_t *obj;

	int rc =
	    due__fmt_task_body(body, size, &obj, &s, &blob, err, sizeof(err));
	if (rc < 0) {
		FUZZ_CHECK(!blob, "a refusal keeps a decoded payload");
		fuzz_check_refusal(err, "");
	} else {
		FUZZ_CHECK(rc == 0 && json_is_object(obj), "rc %d", rc);
		fuzz_check_submit(obj, &s);
	}
	json_decref(obj);
	free(blob);
	free(body);
	return 0;
}
