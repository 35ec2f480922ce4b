/*
** progress.c - the progress hook of long library calls.
**
** A schema upgrade of a big old store can run for minutes inside one
** due_open(); the caller (`due init` on a terminal) wants to say which
** step it is at.  The steps are walked in src/store/common.c, far below
** the due_open_opts that carry the callback, so due_open() parks the
** callback here, per thread, for the length of the call: the walk runs on
** the caller's thread, so no other thread ever sees it, and a caller that
** gave none costs one thread-local read per step.
*/
#include "base/base.h"

static _Thread_local due_progress_fn hook;
static _Thread_local void *hook_payload;

void due__progress_hook(due_progress_fn fn, void *payload)
{
	hook = fn;
	hook_payload = payload;
}

void due__progress(const char *what, int64_t done, int64_t total)
{
	if (hook)
		hook(what, done, total, hook_payload);
}
