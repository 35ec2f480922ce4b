/*
** counter.h - a store server's own counters, as a backend's admin group
** reads them (store.h: due_store_admin, server_read) and `due bench`
** shows them (src/cli/bench_*.c).  Types only: the store layer fills
** them, the CLI reads them, and neither needs the other's headers.
**
** A counter is a name, a value and a kind.  What bench does with each
** kind is all it knows: the move of a WORK counter over a measured phase
** is shown per task (NAME_per_task in JSON, LABEL=VALUEUNIT/task in
** text); the moves of the QUERY counters over the idle workload's window
** are its store_detail, and their sum (or the move of the one QUERIES
** counter, when the server counts every command itself) its
** store_queries; a BYTES counter is what the memory workload weighs.
** A reading leaves out the reader's own commands where the server counts
** them (backend's essay), so a move is the store's work only.
*/
#ifndef DUE_COUNTER_H
#define DUE_COUNTER_H

#include <stddef.h>

#define DUE_COUNTER_WORK (1u << 0)    /* work done so far: per task */
#define DUE_COUNTER_QUERY (1u << 1)   /* commands of one kind so far */
#define DUE_COUNTER_QUERIES (1u << 2) /* every command so far */
#define DUE_COUNTER_BYTES (1u << 3)   /* memory the server holds now */

typedef struct due_counter {
	char name[64]; /* the key bench prints: wal_bytes, Com_select */
	double value;
	unsigned kind; /* one DUE_COUNTER_* */
	/* WORK: the text line's LABEL=VALUEUNIT/task, DIGITS decimals */
	const char *label, *unit;
	int digits;
} due_counter;

/* A reading: n counters, in the order the server gave them. */
typedef struct due_counters {
	due_counter *c;
	size_t n, cap;
} due_counters;

#endif /* DUE_COUNTER_H */
