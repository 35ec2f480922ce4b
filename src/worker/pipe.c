/*
** pipe.c - long-lived handler processes over a JSON line protocol
** (due_pipe_handler, `due work --pipe`).  Not written yet: every entry
** point says so (issue 16).
*/
#include <stdlib.h>

#include "core/internal.h"
#include "due.h"

int due_pipe_new(due_pipe **out, const due_pipe_opts *opts)
{
	(void)opts;
	*out = NULL;
	return due__error_set(DUE_EUNSUPPORTED,
			      "pipe handlers are not available yet");
}

void due_pipe_free(due_pipe *p) { (void)p; }

int due_pipe_handler(due_job *job, void *pipe)
{
	(void)job, (void)pipe;
	return due__error_set(DUE_EUNSUPPORTED,
			      "pipe handlers are not available yet");
}
