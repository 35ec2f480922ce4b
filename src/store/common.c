/*
** common.c - small allocation helpers shared by the store backends.
*/
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "store/store.h"

char *due_strdup_n(const char *s, size_t n)
{
	char *p = malloc(n + 1);
	if (!p)
		return NULL;
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

int due_task_list_alloc(due_task_list **out, size_t n)
{
	due_task_list *l = calloc(1, sizeof(*l));
	if (!l)
		return due_error_set(DUE_ENOMEM, "out of memory");
	if (n) {
		l->items = calloc(n, sizeof(*l->items));
		if (!l->items) {
			free(l);
			return due_error_set(DUE_ENOMEM, "out of memory");
		}
	}
	*out = l;
	return 0;
}

int due_attempts_append(due_task *t, const due_attempt *a)
{
	due_attempt *n = realloc(t->attempts, (t->n_attempts + 1) * sizeof(*n));
	if (!n)
		return due_error_set(DUE_ENOMEM, "out of memory");
	t->attempts = n;
	t->attempts[t->n_attempts++] = *a;
	return 0;
}
