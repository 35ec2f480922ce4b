/*
** exec.h - the pieces of the command handler (exec.c) that the pipe
** handler (pipe.c) reuses: a bounded byte buffer, and starting a command
** under its guard process in its own process group with non-blocking pipes
** on its stdin, stdout and stderr (spawn.c).  Only src/worker/ includes it.
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

/*
** A started command: the shell's pid (= its process group's id), our ends
** of its pipes, and the read end of its status pipe.  The shell is not our
** child (its guard started it, spawn.c): its end is learnt from the status
** pipe, which gets the shell's wait status (as waitpid gives it), then EOF
** when its guard is done with it (and has left its group).  `st` is
** readable then, so a poll wakes at once.
*/
typedef struct due__child {
	pid_t pid;		  /* the shell: its process group's id */
	int in, out, err;	  /* our ends; -1 when closed */
	int st;			  /* the status pipe; -1 once ended */
	int status;		  /* the wait status, once ended */
	bool ended;		  /* the command is over (status set) */
	struct due__guard *guard; /* its guard, until it has ended */
	uint64_t seq;		  /* the command's number at its guard */
	int64_t kill_at;	  /* the kill time its guard was last told */
} due__child;

#define DUE__CHILD_NONE                                                        \
	((due__child){.pid = -1,                                               \
		      .in = -1,                                                \
		      .out = -1,                                               \
		      .err = -1,                                               \
		      .st = -1,                                                \
		      .ended = true})

void due__buf_add(due__buf *b, const unsigned char *d, size_t n);
/* Close *fd if open and set it to -1. */
void due__close_fd(int *fd);
/* Read what is available on *fd into b; close it at EOF or on an error. */
void due__drain_fd(int *fd, due__buf *b);
/*
** Run /bin/sh -c cmd with env in a new process group, under a guard of the
** calling thread that stops that group (SIGTERM, SIGKILL after
** kill_grace_us) if the worker process dies, and SIGKILLs it at kill_at
** (monotonic us; 0: never) unless told a later time first
** (due__child_kill_at).  Returns 0, or a due code with the message set (c
** is then DUE__CHILD_NONE).  The pipes are non-blocking and close-on-exec.
** Any thread may call it.
*/
int due__spawn(due__child *c, const char *cmd, char **env,
	       int64_t kill_grace_us, int64_t kill_at);
/*
** Tell c's guard when the lease clock of the try it runs says the command
** must be gone (monotonic us, 0: no try, never): the guard SIGKILLs the
** command's group then, unless told a later time first, even while this
** process cannot act (SIGSTOP, a debugger, a starved thread).  A message
** only when the time changed.  The thread that started c, while it runs.
*/
void due__child_kill_at(due__child *c, int64_t kill_at);
/*
** Whether the guard has ended, without blocking: true with c->status set
** (then and on every later call).  Reads the status pipe.
*/
bool due__child_ended(due__child *c);
/* Block until the guard has ended; c->status is then set. */
void due__child_wait(due__child *c);

#endif
