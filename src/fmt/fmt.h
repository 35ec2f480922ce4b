/*
** fmt.h - JSON renderings of tasks and stats, shared by the CLI and the
** HTTP service.  These are clients of the public API: they only read the
** structures due.h hands out.  The shape is fixed by INTERFACE.md.
*/
#ifndef DUE_FMT_H
#define DUE_FMT_H

#include <jansson.h>

#include "due.h"

/* A new JSON object for a task (as `due show --json`).  NULL on ENOMEM. */
json_t *due__fmt_task(const due_task *t);
/*
** As due__fmt_task(), with payload, result and last_error each cut to at
** most `cut` bytes (0: nothing is cut).  A cut value is followed by
** "<name>_truncated": true and "<name>_size": its full length in bytes.
** The HTTP service uses it to bound its replies whatever is stored.
*/
json_t *due__fmt_task_cut(const due_task *t, size_t cut);
/* A new JSON array of tasks. */
json_t *due__fmt_task_list(const due_task_list *l);
/* A new JSON object for a schedule (`due cron ls --json`, GET /v1/schedules).
 */
json_t *due__fmt_cron(const due_cron_info *s);
/* RFC 3339 string or JSON null for 0. */
json_t *due__fmt_time(due_time t);
/* Is [p, p+n) valid UTF-8 without NUL bytes? */
int due__fmt_is_utf8(const unsigned char *p, size_t n);
/* The length of the valid UTF-8 sequence at p (1..4), or 0: a bad or cut
   sequence, or a NUL. */
size_t due__fmt_utf8_len(const unsigned char *p, size_t n);
/* The same for any text (a NUL is the 1-byte U+0000), with its code point
   in *cp when cp is not NULL: the clients' one UTF-8 decoder (overlongs,
   surrogates and values past U+10FFFF are not UTF-8, as RFC 3629 says). */
size_t due__fmt_utf8_cp(const unsigned char *p, size_t n, uint32_t *cp);
/* A stored text field under `name`: null when absent, a string when UTF-8,
   else its exact bytes in base64 under `name_b64`, never dropped. */
void due__fmt_set_text(json_t *o, const char *name, const char *s);
/* Base64 of n bytes, malloc'd, NUL-terminated. */
char *due__fmt_base64(const unsigned char *p, size_t n);
/* Decode base64 into a malloc'd buffer; -1 on bad input. */
int due__fmt_unbase64(const char *text, unsigned char **out, size_t *out_len);

/* ---- task objects in JSON (submit.c) ---- */

/* The fields of a task object: kind, payload, payload_b64, in, at, ... */
extern const char *const due__fmt_submit_fields[];
/*
** Decode a task object (as `add --batch` lines and POST /v1/tasks bodies
** hold it) into *out.  `known` lists the fields allowed (NULL-terminated;
** both callers pass due__fmt_submit_fields).  Returns 0, or -1 with a
** one-line message in err.  out->kind, ->payload and ->opts.key borrow from
** obj, or from *blob (the decoded payload_b64, then the 'after' ids,
** malloc'd, NULL when neither),
** which the caller frees after using *out; on -1 *blob is NULL.  The
** library checks the kind's syntax, the key's length and the payload limit
** again; this checks the JSON types, unknown fields, 'in' xor 'at',
** durations, times, max_attempts in 1..1000 and base64.
*/
int due__fmt_submit_from_json(json_t *obj, const char *const *known,
			      due_submit *out, unsigned char **blob, char *err,
			      size_t errlen);
/*
** One line of `due add --batch` ([line, line+len), its newline included or
** not): 1 when it is blank (nothing to add), 0 with *out decoded, or -1
** with a one-line message in err starting "--batch line LINENO: ".  *obj
** is the parsed object (NULL when none), which the caller json_decref()s,
** even on -1; *blob as for due__fmt_submit_from_json().
*/
int due__fmt_batch_line(const char *line, size_t len, size_t lineno,
			json_t **obj, due_submit *out, unsigned char **blob,
			char *err, size_t errlen);
/*
** An HTTP request body as one JSON object (duplicate keys refused): 0 with
** *out (the caller's), or -1 with a one-line message in err.  An empty
** body is {} when allow_empty, else an error.  The size limit is checked
** before (src/http/request.c); fields are the route's to check.
*/
int due__fmt_json_body(const char *body, size_t len, bool allow_empty,
		       json_t **out, char *err, size_t errlen);
/*
** A POST /v1/tasks body: due__fmt_json_body() then
** due__fmt_submit_from_json().  *obj as for due__fmt_batch_line().
*/
int due__fmt_task_body(const char *body, size_t len, json_t **obj,
		       due_submit *out, unsigned char **blob, char *err,
		       size_t errlen);
/*
** A POST /v1/tasks/{id}/reschedule body: {"in" | "at" (one required),
** "payload" | "payload_b64" (optional: absent keeps the task's)} into
** *out, decoded as a task object's fields are.  *obj and *blob as for
** due__fmt_task_body(); out->payload borrows from them.  0, or -1 with a
** one-line message in err naming the field.
*/
int due__fmt_reschedule_body(const char *body, size_t len, json_t **obj,
			     due_reschedule_opts *out, unsigned char **blob,
			     char *err, size_t errlen);

/* ---- stats (stats.c) ---- */

/* A new JSON object for stats (`due stats --json`). */
json_t *due__fmt_stats(const due_stats *s);
/* The states whose bit (1u << state) is set, as a JSON array of names. */
json_t *due__fmt_estimated(uint32_t bits);
/*
** `due stats --json` and GET /v1/stats: the stats, the live workers'
** counters, the number of schedules and the kinds with settings.
*/
json_t *due__fmt_stats_report(const due_metrics *m,
			      const due_kind_info_list *kinds);

/* ---- kinds (kind.c) ---- */

/*
** A new JSON object for a kind's settings and live counts, as `due kind
** ls --json` and GET /v1/kinds give it: kind, paused, rate ("N/DUR" or
** null), max_running, max_running_per_group, timeout ("DUR" or null; the
** nulls are "no limit"), then running, rate_used, due, held_rate,
** held_running, held_group, updated_at.
*/
json_t *due__fmt_kind(const due_kind_info *k);
/* A new JSON array of kinds. */
json_t *due__fmt_kind_list(const due_kind_info_list *l);
/*
** "N/DUR" (e.g. "10/1s", "100/1m") into *n and *us: 0, or -1 with a
** one-line message in err naming the text.  N in 1..1000000, DUR 1ms..1d.
*/
int due__fmt_rate_parse(const char *text, int32_t *n, int64_t *us, char *err,
			size_t errlen);
/*
** A settings change as JSON (PUT /v1/kinds/{kind}): the fields of
** due__fmt_kind's settings, each optional; null removes a limit, "paused"
** is a boolean.  Unknown fields, wrong types, bad values and an object
** that changes nothing are -1 with a one-line message in err.
*/
int due__fmt_kind_settings_from_json(json_t *obj, due_kind_settings *out,
				     char *err, size_t errlen);

#endif
