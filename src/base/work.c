/*
** work.c - what this process's store connections did: statements run,
** SQLite virtual-machine steps, rows written (due_store_work_read).
**
** Process-wide, like sqlite3_status(): the counters add up every handle
** of every thread (a worker's connections and the caller's own), so a
** benchmark or a monitoring page can divide them by the tasks it saw
** without reaching into handles it does not own.  The stores add to them
** through due__work_add(); relaxed atomics, since they order nothing and
** are read for figures only.  A backend that does not count leaves them
** alone (due.h says which do).
*/
#include <stdatomic.h>

#include "base/base.h"

static _Atomic uint64_t work[3]; /* statements, vm_steps, rows_written */

void due__work_add(uint64_t statements, uint64_t vm_steps,
		   uint64_t rows_written)
{
	if (statements)
		atomic_fetch_add_explicit(&work[0], statements,
					  memory_order_relaxed);
	if (vm_steps)
		atomic_fetch_add_explicit(&work[1], vm_steps,
					  memory_order_relaxed);
	if (rows_written)
		atomic_fetch_add_explicit(&work[2], rows_written,
					  memory_order_relaxed);
}

int due_store_work_read(due_store_work *out)
{
	if (!out || out->version < 1 || out->version > DUE_STORE_WORK_VERSION)
		return due__error_set(DUE_EINVAL,
				      "due_store_work_read: version %u (this "
				      "library knows 1..%d)",
				      out ? out->version : 0,
				      DUE_STORE_WORK_VERSION);
	out->statements = atomic_load_explicit(&work[0], memory_order_relaxed);
	out->vm_steps = atomic_load_explicit(&work[1], memory_order_relaxed);
	out->rows_written =
	    atomic_load_explicit(&work[2], memory_order_relaxed);
	return 0;
}
