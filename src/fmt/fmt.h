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
json_t *due_fmt_task(const due_task *t);
/*
** As due_fmt_task(), with payload, result and last_error each cut to at
** most `cut` bytes (0: nothing is cut).  A cut value is followed by
** "<name>_truncated": true and "<name>_size": its full length in bytes.
** The HTTP service uses it to bound its replies whatever is stored.
*/
json_t *due_fmt_task_cut(const due_task *t, size_t cut);
/* A new JSON array of tasks. */
json_t *due_fmt_task_list(const due_task_list *l);
/* A new JSON object for a schedule (`due cron ls --json`, GET /v1/schedules).
 */
json_t *due_fmt_cron(const due_cron_info *s);
/* A new JSON object for stats (`due stats --json`). */
json_t *due_fmt_stats(const due_stats *s);
/* RFC 3339 string or JSON null for 0. */
json_t *due_fmt_time(due_time t);
/* Is [p, p+n) valid UTF-8 without NUL bytes? */
int due_fmt_is_utf8(const unsigned char *p, size_t n);
/* Base64 of n bytes, malloc'd, NUL-terminated. */
char *due_fmt_base64(const unsigned char *p, size_t n);
/* Decode base64 into a malloc'd buffer; -1 on bad input. */
int due_fmt_unbase64(const char *text, unsigned char **out, size_t *out_len);

#endif
