/*
** fuzz_reschedule_body.c - a POST /v1/tasks/{id}/reschedule body:
** due__fmt_reschedule_body() (src/fmt/submit.c), the function
** route_task_reschedule() calls with the request body (NUL-terminated).
**
** Checked: a refusal is one line, fit for the JSON reply's "detail"
** (fuzz_submit.h), and keeps no decoded payload; an acceptance has 'in'
** or 'at' (not both) and says what the JSON says: a delay only from 'in',
** an instant only from 'at', the payload (text or base64) replaced
** exactly when one was given, and no field but those four.
*/
#include "fuzz.h"
#include "fuzz_submit.h"

static void check_accepted(json_t *obj, const due_reschedule_opts *o)
{
	static const char *const known[] = {"in", "at", "payload",
					    "payload_b64"};
	due_submit s = {.payload = o->payload, .payload_len = o->payload_len};
	bool given = json_object_get(obj, "payload") ||
		     json_object_get(obj, "payload_b64");
	const char *k;
	json_t *v;

	json_object_foreach(obj, k, v)
	{
		size_t i = 0;
		while (i < 4 && strcmp(known[i], k) != 0)
			i++;
		FUZZ_CHECK(i < 4, "unknown field '%s' accepted", k);
	}
	FUZZ_CHECK(!json_object_get(obj, "in") != !json_object_get(obj, "at"),
		   "accepted without exactly one of 'in' and 'at'");
	FUZZ_CHECK(o->delay_us >= 0, "delay %lld", (long long)o->delay_us);
	FUZZ_CHECK(json_object_get(obj, "in") || o->delay_us == 0,
		   "a delay without 'in'");
	FUZZ_CHECK(json_object_get(obj, "at") || o->at == DUE_TIME_NONE,
		   "an instant without 'at'");
	FUZZ_CHECK(o->set_payload == given, "set_payload %d, payload given %d",
		   (int)o->set_payload, (int)given);
	if (given)
		fuzz_check_payload(obj, &s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *body = fuzz_cstr(data, size), err[512]; /* as http_req's err */
	unsigned char *blob;
	due_reschedule_opts o;
	json_t *obj;

	int rc = due__fmt_reschedule_body(body, size, &obj, &o, &blob, err,
					  sizeof(err));
	if (rc < 0) {
		FUZZ_CHECK(!blob, "a refusal keeps a decoded payload");
		fuzz_check_refusal(err, "");
	} else {
		FUZZ_CHECK(rc == 0 && json_is_object(obj), "rc %d", rc);
		check_accepted(obj, &o);
	}
	json_decref(obj);
	free(blob);
	free(body);
	return 0;
}
