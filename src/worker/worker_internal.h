/*
** worker_internal.h - shared between the worker runtime's files.
*/
#ifndef DUE_WORKER_INTERNAL_H
#define DUE_WORKER_INTERNAL_H

#include <stdint.h>

/* Monotonic clock in microseconds: paces local waits, never judges due. */
int64_t due_mono_us(void);

#endif
