/*
** exec.h - the pieces of the command handler (exec.c) that the pipe
** handler (pipe.c) reuses: a bounded byte buffer, and starting a command
** under its guard process in its own process group with non-blocking pipes
** on its stdin, stdout and stderr.  Only src/worker/ includes it.
*/
#ifndef DUE_WORKER_EXEC_H
#define DUE_WORKER_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Bytes read from a command; `limit` bounds what is kept. */
typedef struct due__buf {
	unsigned char *p;
	size_t len, cap, limit, dropped;
	bool tail; /* keep the last `limit` bytes instead of the first */
} due__buf;

/* A started command: the guard's pid (= its process group) and our ends. */
typedef struct due__child {
	pid_t pid;
	int in, out, err; /* our ends; -1 when closed */
} due__child;

void due__buf_add(due__buf *b, const unsigned char *d, size_t n);
/* Close *fd if open and set it to -1. */
void due__close_fd(int *fd);
/* Read what is available on *fd into b; close it at EOF or on an error. */
void due__drain_fd(int *fd, due__buf *b);
/*
** Run /bin/sh -c cmd with env under a guard process that leads a new
** process group and stops that group (SIGTERM, SIGKILL after kill_grace_us)
** if the calling thread's process dies.  Returns 0, or a due code with the
** message set.  The pipes are non-blocking and close-on-exec.
*/
int due__spawn(due__child *c, const char *cmd, char **env,
	       int64_t kill_grace_us);

#endif
