/*
** names.c - the names the stores write for enums, each table once.
**
** A store keeps states, attempt outcomes and a schedule's misfire and
** overlap policies as text (the CHECKs of every schema name them), and
** reads them back into enums.  Both directions come from the tables
** here, so a backend never spells a mapping of its own.  Task states
** are due.h's (due_state_name / due_state_parse in task.c); a state read
** back from a store goes through due_state_parse as well.
*/
#include <stdio.h>
#include <string.h>

#include "base/base.h"

static const char *const outcome_names[DUE_OUT_COUNT] = {
    [DUE_OUT_RUNNING] = "RUNNING",
    [DUE_OUT_DONE] = "DONE",
    [DUE_OUT_FAILED] = "FAILED",
    [DUE_OUT_LEASE_EXPIRED] = "LEASE_EXPIRED",
    [DUE_OUT_CANCELLED] = "CANCELLED",
    [DUE_OUT_REQUEUED] = "REQUEUED",
    [DUE_OUT_KILLED] = "KILLED",
    [DUE_OUT_TIMED_OUT] = "TIMED_OUT",
    [DUE_OUT_REJECTED_STALE] = "REJECTED_STALE"};

static const char *const misfire_names[] = {
    [DUE_MISFIRE_SKIP] = "skip", [DUE_MISFIRE_ONCE] = "once"};

static const char *const overlap_names[] = {
    [DUE_OVERLAP_ALLOW] = "allow", [DUE_OVERLAP_WAIT] = "wait"};

const char *due_outcome_name(due_outcome o)
{
	return (unsigned)o < DUE_OUT_COUNT ? outcome_names[o] : "UNKNOWN";
}

int due__outcome_parse(const char *name)
{
	for (int i = 0; name && i < DUE_OUT_COUNT; i++)
		if (strcmp(name, outcome_names[i]) == 0)
			return i;
	return -1;
}

const char *due__misfire_name(due_misfire m)
{
	return m == DUE_MISFIRE_ONCE ? misfire_names[DUE_MISFIRE_ONCE]
				     : misfire_names[DUE_MISFIRE_SKIP];
}

due_misfire due__misfire_parse(const char *name)
{
	return name && strcmp(name, misfire_names[DUE_MISFIRE_ONCE]) == 0
		   ? DUE_MISFIRE_ONCE
		   : DUE_MISFIRE_SKIP;
}

const char *due__overlap_name(due_overlap o)
{
	return o == DUE_OVERLAP_WAIT ? overlap_names[DUE_OVERLAP_WAIT]
				     : overlap_names[DUE_OVERLAP_ALLOW];
}

due_overlap due__overlap_parse(const char *name)
{
	return name && strcmp(name, overlap_names[DUE_OVERLAP_WAIT]) == 0
		   ? DUE_OVERLAP_WAIT
		   : DUE_OVERLAP_ALLOW;
}

int due__state_from_store(const char *p, size_t n, due_state *out)
{
	char name[16];

	if (p && n < sizeof(name)) {
		memcpy(name, p, n);
		name[n] = '\0';
		if (due_state_parse(out, name) == 0)
			return 0;
	}
	return due__error_set(DUE_ERROR,
			      "store returned an unknown state '%.*s'",
			      p ? (int)(n < 64 ? n : 64) : 6, p ? p : "(null)");
}
