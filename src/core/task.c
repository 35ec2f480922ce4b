/*
** task.c - names of states and outcomes, freeing of task objects, and the
** validation rules for kinds, keys and owners that every entry point shares.
*/
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

static const char *const state_names[DUE_STATE_COUNT] = {
    "SCHEDULED", "CLAIMED", "DONE", "CANCELLED", "DEAD"};

const char *due_state_name(due_state s)
{
	return (unsigned)s < DUE_STATE_COUNT ? state_names[s] : NULL;
}

int due_state_parse(due_state *out, const char *name)
{
	for (int i = 0; name && i < DUE_STATE_COUNT; i++) {
		if (strcasecmp(name, state_names[i]) == 0) {
			*out = (due_state)i;
			return 0;
		}
	}
	return due__error_set(
	    DUE_EINVAL,
	    "unknown state '%s' (expected SCHEDULED, CLAIMED, DONE, "
	    "CANCELLED or DEAD)",
	    name ? name : "");
}

const char *due_cancel_outcome_name(due_cancel_outcome o)
{
	static const char *const n[] = {"CANCELLED", "REQUESTED", "TOO_LATE",
					"ALREADY_CANCELLED", "NOT_FOUND"};
	return (unsigned)o < 5 ? n[o] : "UNKNOWN";
}

const char *due_complete_outcome_name(due_complete_outcome o)
{
	static const char *const n[] = {"DONE", "REJECTED_STALE",
					"CANCELLED_BEFORE_COMMIT"};
	return (unsigned)o < 3 ? n[o] : "UNKNOWN";
}

const char *due_fail_outcome_name(due_fail_outcome o)
{
	static const char *const n[] = {"RETRY_SCHEDULED", "DEAD", "CANCELLED",
					"REJECTED_STALE"};
	return (unsigned)o < 4 ? n[o] : "UNKNOWN";
}

/* Release what a task owns, leaving the struct itself. */
static void task_clear(due_task *t)
{
	free(t->kind);
	free(t->payload);
	free(t->lease_owner);
	free(t->key);
	free(t->result);
	free(t->last_error);
	free(t->group);
	for (size_t i = 0; i < t->n_attempts; i++) {
		free(t->attempts[i].worker);
		free(t->attempts[i].outcome);
		free(t->attempts[i].error);
		free(t->attempts[i].late_commit);
	}
	free(t->attempts);
}

void due_task_free(due_task *t)
{
	if (!t)
		return;
	task_clear(t);
	free(t);
}

void due_task_list_free(due_task_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->count; i++)
		task_clear(&l->items[i]);
	free(l->items);
	free(l);
}

/* Kinds name handlers and appear in URLs and metrics: keep them plain. */
int due__validate_kind(const char *kind)
{
	size_t n = kind ? strlen(kind) : 0;

	if (n == 0)
		return due__error_set(DUE_EINVAL, "invalid kind '': empty");
	if (n > 128)
		return due__error_set(
		    DUE_EINVAL, "invalid kind: %zu characters (at most 128)",
		    n);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)kind[i];
		if (!isalnum(c) && c != '_' && c != '-' && c != '.' && c != ':')
			return due__error_set(
			    DUE_EINVAL,
			    "invalid kind '%s': only letters, digits and "
			    "_ - . : are allowed",
			    kind);
	}
	return 0;
}

int due__validate_key(const char *key)
{
	if (!key)
		return 0;
	size_t n = strlen(key);
	if (n == 0)
		return due__error_set(DUE_EINVAL, "invalid key '': empty");
	if (n > 512)
		return due__error_set(
		    DUE_EINVAL, "invalid key: %zu bytes (at most 512)", n);
	return 0;
}

int due__validate_group(const char *group)
{
	size_t n;

	if (!group)
		return 0;
	n = strlen(group);
	if (n == 0)
		return due__error_set(DUE_EINVAL, "invalid group '': empty");
	if (n > 255)
		return due__error_set(
		    DUE_EINVAL, "invalid group: %zu bytes (at most 255)", n);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)group[i] < 0x20 || group[i] == 0x7f)
			return due__error_set(DUE_EINVAL,
					      "invalid group: control "
					      "character at byte %zu",
					      i + 1);
	return 0;
}

int due__validate_owner(const char *owner)
{
	size_t n = owner ? strlen(owner) : 0;
	if (n == 0 || n > 200)
		return due__error_set(
		    DUE_EINVAL, "invalid owner: must be 1 to 200 characters");
	return 0;
}
