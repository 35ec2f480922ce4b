/*
** exec.c - the command handler behind `due work --exec CMD`.
**
** Protocol (INTERFACE.md): the command runs as `/bin/sh -c CMD` in its own
** process group, under a guard process that ends the group if the worker
** dies (spawn.c).  The payload goes to its stdin through a pipe (never on a
** command line, never through the shell's parser); the environment gets
** DUE_TASK_ID, DUE_KIND, DUE_ATTEMPT, DUE_IDEMPOTENCY_KEY=task-<id> (the
** same on every attempt, CONTRACT §3.8), DUE_DUE_AT, DUE_PRIORITY, for
** a task with a group DUE_GROUP, and for one added with run-after
** DUE_PARENT_RESULTS (its parents' results, due_parent_results()).
** Exit 0 completes the try with stdout (up to max_result bytes) as the
** result; a non-zero exit or a signal fails it with the last 4 KiB of
** stderr.
**
** While it runs, one thread multiplexes the three pipes and the guard's
** status pipe with poll() (so the command's end wakes it at once) and
** looks at the job's lease flag every 20 ms.  When the lease keeper
** reports the lease lost, a cancel requested or the try's time limit
** passed (it watches the clock, keeper.c), the whole process group gets
** SIGTERM, then SIGKILL after kill_grace: a handler that ignores SIGTERM
** still ends.  Pipes are non-blocking so a command that never reads its
** stdin, or floods stdout, cannot wedge the worker.
*/
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "worker/exec.h"
#include "worker/worker_internal.h"

extern char **environ;

#define ERR_TAIL 4096

typedef due__buf buf;

/*
** Append n bytes to b within its limit: the first `limit` bytes are kept,
** or the last ones for a tail buffer; what does not fit counts in
** `dropped`.  Out of memory drops the bytes too.  p stays NUL-terminated.
*/
void due__buf_add(buf *b, const unsigned char *d, size_t n)
{
	if (b->tail && n >= b->limit) {
		b->dropped += b->len + n - b->limit;
		d += n - b->limit;
		n = b->limit;
		b->len = 0;
	} else if (b->tail && b->len + n > b->limit) {
		size_t cut = b->len + n - b->limit;
		memmove(b->p, b->p + cut, b->len - cut);
		b->len -= cut;
		b->dropped += cut;
	} else if (!b->tail && b->len + n > b->limit) {
		b->dropped += b->len + n - b->limit;
		n = b->limit - b->len;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		unsigned char *np = realloc(b->p, cap);
		if (!np) {
			b->dropped += n;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
	b->p[b->len] = '\0';
}

/*
** The task's variables, one buffer each: a group is up to 255 bytes, a
** kind up to 128 (base/task.c checks both).
*/
#define N_VARS 7
#define VAR_MAX 320

/*
** environ without DUE_* plus the task's variables and, for a task added
** with run-after, DUE_PARENT_RESULTS=parents (the caller's string, kept
** until the spawn).  NULL on ENOMEM.
*/
static char **make_env(const due_task *t, char vars[N_VARS][VAR_MAX],
		       char *parents)
{
	size_t n = 0, k = 0;
	int nv = 6;
	char due[40];
	char **env;

	while (environ[n])
		n++;
	if (!(env = calloc(n + N_VARS + 2, sizeof(*env))))
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "DUE_", 4) != 0 ||
		    strncmp(environ[i], "DUE_DB=", 7) == 0)
			env[k++] = environ[i];
	due_time_format(due, sizeof(due), t->due_at);
	snprintf(vars[0], VAR_MAX, "DUE_TASK_ID=%lld", (long long)t->id);
	snprintf(vars[1], VAR_MAX, "DUE_KIND=%s", t->kind);
	snprintf(vars[2], VAR_MAX, "DUE_ATTEMPT=%d", t->attempt);
	snprintf(vars[3], VAR_MAX, "DUE_IDEMPOTENCY_KEY=task-%lld",
		 (long long)t->id);
	snprintf(vars[4], VAR_MAX, "DUE_DUE_AT=%s", due);
	snprintf(vars[5], VAR_MAX, "DUE_PRIORITY=%d", (int)t->priority);
	if (t->group)
		snprintf(vars[nv++], VAR_MAX, "DUE_GROUP=%s", t->group);
	for (int i = 0; i < nv; i++)
		env[k++] = vars[i];
	if (parents)
		env[k++] = parents;
	env[k] = NULL;
	return env;
}

typedef due__child child;

/* Read what is available on *fd into b; close it at EOF. */
void due__drain_fd(int *fd, buf *b)
{
	unsigned char chunk[16384];
	for (;;) {
		ssize_t r = read(*fd, chunk, sizeof(chunk));
		if (r > 0) {
			due__buf_add(b, chunk, (size_t)r);
			continue;
		}
		if (r == 0 || (errno != EAGAIN && errno != EINTR))
			due__close_fd(fd);
		if (r < 0 && errno == EINTR)
			continue;
		return;
	}
}

typedef struct run_state {
	const due_exec_opts *o;
	const unsigned char *in;
	size_t in_len, in_off;
	int64_t term_at; /* monotonic us when SIGTERM was sent, 0 before */
	bool killed;
} run_state;

/*
** A SIGKILL sent well after the lease clock's kill_by leaves the handler
** running into the time the store may hand the task on (a starved thread
** on a loaded machine): say so, with by how much, so that a handler seen
** beside the next attempt can be explained.
*/
static void late_kill(due_job *job, int64_t kill_by, int64_t now)
{
	if (kill_by && now - kill_by > 100000)
		due__wlog(
		    job->w, 1,
		    "task %lld attempt %d: SIGKILL to its handler's group "
		    "%.0f ms after the lease clock's kill_by",
		    (long long)job->task.id, job->task.attempt,
		    (double)(now - kill_by) / 1000.0);
}

/*
** Stop the process group once the lease is gone: TERM, then KILL after
** the kill grace, or sooner when the lease clock says the store could hand
** the task on (due__job_kill_by): the group must be gone by then.
*/
static void enforce_lease(due_job *job, child *c, run_state *rs)
{
	int64_t now, kill_by;

	if (due__job_lease_check(job) || c->ended)
		return;
	now = due__mono_us();
	kill_by = due__job_kill_by(job);
	if (rs->term_at == 0) {
		kill(-c->pid, SIGTERM);
		rs->term_at = now;
	}
	if (!rs->killed && (now - rs->term_at >= rs->o->kill_grace_us ||
			    (kill_by && now >= kill_by))) {
		kill(-c->pid, SIGKILL);
		rs->killed = true;
		late_kill(job, kill_by, now);
	}
}

/*
** A stopped try whose shell is gone may leave processes in its group: a
** command the shell started that ignores SIGTERM lives on after the shell
** died of it.  They get the same stop as the shell (SIGKILL at the end of
** the kill grace, or at kill_by), so nothing of a stopped try outlives its
** lease.  The group id stays the guard's pid while any member lives, so it
** names no other group.  Once SIGKILL is sent there is nothing to wait
** for (a member left a zombie is no longer running).
*/
static void stop_leftovers(due_job *job, child *c, run_state *rs)
{
	while (!due__job_lease_check(job) && !rs->killed &&
	       kill(-c->pid, 0) == 0) {
		int64_t now = due__mono_us(), kill_by = due__job_kill_by(job);
		if (rs->term_at == 0) {
			kill(-c->pid, SIGTERM);
			rs->term_at = now;
		}
		if (now - rs->term_at >= rs->o->kill_grace_us ||
		    (kill_by && now >= kill_by)) {
			kill(-c->pid, SIGKILL);
			rs->killed = true;
			late_kill(job, kill_by, now);
			break;
		}
		usleep(20000);
	}
}

/* Push more of the payload into the child's stdin. */
static void feed(child *c, run_state *rs)
{
	while (c->in >= 0 && rs->in_off < rs->in_len) {
		ssize_t w =
		    write(c->in, rs->in + rs->in_off, rs->in_len - rs->in_off);
		if (w > 0) {
			rs->in_off += (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else {
			if (w < 0 && errno == EAGAIN)
				return;
			due__close_fd(&c->in); /* EPIPE: it stopped reading */
		}
	}
	if (rs->in_off >= rs->in_len)
		due__close_fd(&c->in);
}

/*
** Multiplex the pipes until the guard has ended and the pipes are drained.
** The guard's status pipe is in the poll too: the command's end wakes the
** loop at once.  (A command's pipes reach EOF when its shell exits, a
** moment before the guard that relays its status does; a loop that slept
** 5 ms then, once or twice per command, kept each slot busy twice as long
** as `true` takes.)
*/
static void supervise(due_job *job, child *c, run_state *rs, buf *out, buf *err)
{
	while (!(c->ended && c->out < 0 && c->err < 0)) {
		struct pollfd p[4];
		int n = 0;
		if (c->in >= 0)
			p[n++] = (struct pollfd){c->in, POLLOUT, 0};
		if (c->out >= 0)
			p[n++] = (struct pollfd){c->out, POLLIN, 0};
		if (c->err >= 0)
			p[n++] = (struct pollfd){c->err, POLLIN, 0};
		if (c->st >= 0)
			p[n++] = (struct pollfd){c->st, POLLIN, 0};
		if (poll(p, (nfds_t)n, 20) < 0 && errno != EINTR)
			break;
		feed(c, rs);
		if (c->out >= 0)
			due__drain_fd(&c->out, out);
		if (c->err >= 0)
			due__drain_fd(&c->err, err);
		/* a renewal moved the lease clock: its guard learns it */
		due__child_kill_at(c, due__job_guard_kill_at(job));
		if (c->st >= 0 && due__child_ended(c)) {
			/* a background grandchild may hold the pipes: take what
			   is there now and stop listening */
			if (c->out >= 0)
				due__drain_fd(&c->out, out);
			if (c->err >= 0)
				due__drain_fd(&c->err, err);
			due__close_fd(&c->out);
			due__close_fd(&c->err);
		}
		enforce_lease(job, c, rs);
	}
	due__close_fd(&c->in);
	stop_leftovers(job, c, rs);
}

/*
** The error text: the status first, then as much of stderr's tail as fits
** in ERR_MAX bytes (the worker keeps at most that much).  A status must
** never be cut off by a flood of stderr; "[...]" marks a cut, and the cut
** never splits a UTF-8 character.
*/
#define ERR_MAX 4096

static void set_failure(due_job *job, const char *status, const buf *err)
{
	char msg[ERR_MAX + 1];
	const unsigned char *tail =
	    err->len ? err->p : (const unsigned char *)"";
	size_t n = err->len;
	bool cut = err->dropped > 0;

	while (n && (tail[n - 1] == '\n' || tail[n - 1] == '\r'))
		n--;
	size_t room = ERR_MAX - strlen(status) - sizeof(": [...] ");
	if (n > room) {
		tail += n - room;
		n = room;
		cut = true;
	}
	while (cut && n && (*tail & 0xc0) == 0x80) /* a UTF-8 continuation */
		tail++, n--;
	snprintf(msg, sizeof(msg), "%s%s%s%.*s", status, n ? ": " : "",
		 cut && n ? "[...] " : "", (int)n, (const char *)tail);
	due_job_set_error(job, msg);
}

/* Turn the exit status into the job's outcome.  Returns the handler rc. */
static int finish(due_job *job, const child *c, const run_state *rs, buf *out,
		  buf *err)
{
	char status[160];

	if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0) {
		due_job_set_result(
		    job, out->len ? out->p : (const unsigned char *)"",
		    out->len);
		return 0;
	}
	/* killed with no stop of ours: its guard's lease clock, while this
	   process could not act (stopped, starved), also says why */
	bool stopped = rs->term_at ||
		       (!WIFEXITED(c->status) && !due__job_lease_check(job));
	if (WIFEXITED(c->status))
		snprintf(status, sizeof(status), "exit %d",
			 WEXITSTATUS(c->status));
	else
		snprintf(status, sizeof(status), "killed by signal %d%s%s%s",
			 WTERMSIG(c->status), stopped ? " (" : "",
			 stopped ? due__stop_reason_name(due__job_stop_why(job))
				 : "",
			 stopped ? ")" : "");
	set_failure(job, status, err);
	return 1;
}

/* name (with its '=') and value joined, malloc'd; NULL on ENOMEM. */
static char *env_var(const char *name, const char *value)
{
	size_t n = strlen(name), v = strlen(value);
	char *s = malloc(n + v + 1);

	if (s) {
		memcpy(s, name, n);
		memcpy(s + n, value, v + 1);
	}
	return s;
}

int due_exec_handler(due_job *job, void *payload)
{
	const due_exec_opts *o = payload;
	const due_task *t = due_job_task(job);
	run_state rs = {.o = o, .in = t->payload, .in_len = t->payload_len};
	buf out = {.limit = o->max_result},
	    err = {.limit = ERR_TAIL, .tail = true};
	child c = DUE__CHILD_NONE;
	char vars[N_VARS][VAR_MAX];
	const char *pr = due_job_parent_results(job);
	char **env, *parents = NULL;
	int rc;

	if (!o || !o->command) {
		due_job_set_error(job, "exec handler without a command");
		return 1;
	}
	if ((pr && !(parents = env_var("DUE_PARENT_RESULTS=", pr))) ||
	    !(env = make_env(t, vars, parents))) {
		free(parents);
		due_job_set_error(job, "out of memory");
		return 1;
	}
	rc = due__spawn(&c, o->command, env, o->kill_grace_us,
			due__job_guard_kill_at(job));
	free(env);
	free(parents);
	if (rc < 0) {
		due_job_set_error(job, due_error_last());
		return 1;
	}
	supervise(job, &c, &rs, &out, &err);
	due__child_wait(&c); /* when poll failed */
	rc = finish(job, &c, &rs, &out, &err);
	free(out.p);
	free(err.p);
	return rc;
}
