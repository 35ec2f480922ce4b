/*
** after.c - due_parent_results(): what a task added with run-after is
** given of its parents.
**
** A task held by run-after (due_schedule_opts.after) is released when its
** parents are DONE (or have ended, with after_any_end); its handler then
** gets their results as one JSON object, keyed by the parent's id:
**
**   {"41": {"state": "DONE", "result": "..."},
**    "42": {"state": "DEAD", "result": null}}
**
** A result that is not UTF-8 is "result_b64" (standard base64) instead,
** as in `due show --json`.  The whole text is bounded (max_bytes,
** DUE_PARENT_RESULTS_MAX by default: an environment variable must stay
** well under Linux's 128 KiB a string): parents are taken in id order and a
** result that would pass the bound is left out, its entry saying
** "result_omitted": <its size in bytes>, so the handler knows to read it
** with `due show`.  A parent pruned since is {"state": null}.
**
** Only reads: the task (for its parents' ids, when the caller's copy came
** from a claim, which does not carry them) and each parent, through the
** public API, so it runs on every store and races nothing.
*/
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* The length of e as written in the text, with its key and separator. */
static size_t size_of(const json_t *e, const char *id)
{
	char *text = json_dumps(e, JSON_COMPACT | JSON_ENCODE_ANY);
	size_t n = text ? strlen(text) : 0;

	free(text);
	return n + strlen(id) + 4; /* "id": and a comma */
}

/*
** Parent p's entry, its result in it when the entry fits in room bytes
** (*used: its size), else with "result_omitted"; NULL on ENOMEM.
*/
static json_t *entry(const due_task *p, const char *id, size_t room,
		     size_t *used)
{
	json_t *e = json_object(), *r = NULL;
	char *b = NULL;

	if (!e)
		return NULL;
	json_object_set_new(e, "state", json_string(due_state_name(p->state)));
	if (!p->has_result) {
		json_object_set_new(e, "result", json_null());
		*used = size_of(e, id);
		return e;
	}
	if ((r = json_stringn(p->result ? (const char *)p->result : "",
			      p->result_len)))
		json_object_set_new(e, "result", r);
	else if ((b = due__base64(p->result, p->result_len)))
		json_object_set_new(e, "result_b64", json_string(b));
	free(b);
	if ((*used = size_of(e, id)) <= room)
		return e;
	json_object_del(e, "result");
	json_object_del(e, "result_b64");
	json_object_set_new(e, "result_omitted",
			    json_integer((json_int_t)p->result_len));
	*used = size_of(e, id);
	return e;
}

int due_parent_results(due_db *db, char **out, const due_task *t,
		       size_t max_bytes)
{
	due_task *self = NULL;
	json_t *o = NULL;
	size_t used = 2;
	int rc = 0;

	*out = NULL;
	if (!t)
		return due__error_set(DUE_EINVAL, "task is NULL");
	if (max_bytes == 0)
		max_bytes = DUE_PARENT_RESULTS_MAX;
	if (t->after_n > 0 && !t->after) {
		if ((rc = due_get(db, &self, t->id)) < 0)
			return rc;
		t = self;
	}
	if (!(o = json_object())) {
		rc = due__error_set(DUE_ENOMEM, "out of memory");
		goto done;
	}
	for (int32_t i = 0; t->after && i < t->after_n; i++) {
		due_task *p = NULL;
		char id[24];
		size_t n = 0;
		json_t *e;

		snprintf(id, sizeof(id), "%lld", (long long)t->after[i]);
		if ((rc = due_get(db, &p, t->after[i])) == DUE_ENOTFOUND) {
			due__error_clear();
			e = json_pack("{s:n}", "state");
			n = e ? size_of(e, id) : 0;
		} else if (rc < 0) {
			goto done;
		} else {
			size_t room = max_bytes > used ? max_bytes - used : 0;
			e = entry(p, id, room, &n);
		}
		due_task_free(p);
		rc = 0;
		if (!e || json_object_set_new(o, id, e) < 0) {
			rc = due__error_set(DUE_ENOMEM, "out of memory");
			goto done;
		}
		used += n;
	}
	if (!(*out = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS)))
		rc = due__error_set(DUE_ENOMEM, "out of memory");
done:
	json_decref(o);
	due_task_free(self);
	return rc;
}
