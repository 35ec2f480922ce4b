/*
** exec.c - the command handler behind `due work --exec CMD`.
**
** Protocol (INTERFACE.md): the command runs as `/bin/sh -c CMD` in its own
** process group.  The payload goes to its stdin through a pipe (never on a
** command line, never through the shell's parser); the environment gets
** DUE_TASK_ID, DUE_KIND, DUE_ATTEMPT, DUE_IDEMPOTENCY_KEY=task-<id> (the
** same on every attempt, CONTRACT §3.8) and DUE_DUE_AT.  Exit 0 completes
** the try with stdout (up to max_result bytes) as the result; a non-zero
** exit or a signal fails it with the last 4 KiB of stderr.
**
** While it runs, one thread multiplexes the three pipes with poll() and
** looks at the job's lease flag every 20 ms.  When the lease keeper
** reports the lease lost or a cancel requested, the whole process group
** gets SIGTERM, then SIGKILL after kill_grace: a handler that ignores
** SIGTERM still ends.  Pipes are non-blocking so a command that never reads
** its stdin, or floods stdout, cannot wedge the worker.
*/
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/internal.h"
#include "worker/worker_internal.h"

extern char **environ;

#define ERR_TAIL 4096

typedef struct buf {
	unsigned char *p;
	size_t len, cap, limit, dropped;
	bool tail; /* keep the last `limit` bytes instead of the first */
} buf;

static void buf_add(buf *b, const unsigned char *d, size_t n)
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

/* environ without DUE_* plus the task's variables.  NULL on ENOMEM. */
static char **make_env(const due_task *t, char vars[5][160])
{
	size_t n = 0, k = 0;
	char due[40];
	char **env;

	while (environ[n])
		n++;
	if (!(env = calloc(n + 6, sizeof(*env))))
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "DUE_", 4) != 0 ||
		    strncmp(environ[i], "DUE_DB=", 7) == 0)
			env[k++] = environ[i];
	due_time_format(due, sizeof(due), t->due_at);
	snprintf(vars[0], 160, "DUE_TASK_ID=%lld", (long long)t->id);
	snprintf(vars[1], 160, "DUE_KIND=%s", t->kind);
	snprintf(vars[2], 160, "DUE_ATTEMPT=%d", t->attempt);
	snprintf(vars[3], 160, "DUE_IDEMPOTENCY_KEY=task-%lld", (long long)t->id);
	snprintf(vars[4], 160, "DUE_DUE_AT=%s", due);
	for (int i = 0; i < 5; i++)
		env[k++] = vars[i];
	env[k] = NULL;
	return env;
}

typedef struct child {
	pid_t pid;
	int in, out, err; /* our ends; -1 when closed */
} child;

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/*
** Start /bin/sh -c cmd with pipes on 0, 1, 2, in a new process group, with
** default signal dispositions.  0 or a due code (message set).
*/
static int spawn(child *c, const char *cmd, char **env)
{
	int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, defs;
	char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
	int rc;

	if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC)) {
		rc = due_error_set(DUE_ERROR, "pipe: %s", strerror(errno));
		goto fail;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
	posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
	posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
	posix_spawnattr_init(&at);
	sigemptyset(&none);
	sigemptyset(&defs);
	sigaddset(&defs, SIGPIPE);
	sigaddset(&defs, SIGTERM);
	sigaddset(&defs, SIGINT);
	sigaddset(&defs, SIGHUP);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &defs);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
				 POSIX_SPAWN_SETSIGDEF);
	rc = posix_spawn(&c->pid, "/bin/sh", &fa, &at, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (rc != 0) {
		rc = due_error_set(DUE_ERROR, "cannot run /bin/sh: %s", strerror(rc));
		goto fail;
	}
	close(pin[0]), close(pout[1]), close(perr[1]);
	c->in = pin[1];
	c->out = pout[0];
	c->err = perr[0];
	fcntl(c->in, F_SETFL, O_NONBLOCK);
	fcntl(c->out, F_SETFL, O_NONBLOCK);
	fcntl(c->err, F_SETFL, O_NONBLOCK);
	return 0;
fail:
	for (int i = 0; i < 2; i++) {
		close_fd(&pin[i]);
		close_fd(&pout[i]);
		close_fd(&perr[i]);
	}
	return rc;
}

/* Read what is available on *fd into b; close it at EOF. */
static void drain_fd(int *fd, buf *b)
{
	unsigned char chunk[16384];
	for (;;) {
		ssize_t r = read(*fd, chunk, sizeof(chunk));
		if (r > 0) {
			buf_add(b, chunk, (size_t)r);
			continue;
		}
		if (r == 0 || (errno != EAGAIN && errno != EINTR))
			close_fd(fd);
		if (r < 0 && errno == EINTR)
			continue;
		return;
	}
}

typedef struct run_state {
	const due_exec_opts *o;
	const unsigned char *in;
	size_t in_len, in_off;
	int64_t term_at;   /* monotonic us when SIGTERM was sent, 0 before */
	bool killed;
	int status;
	bool exited;
} run_state;

/* Stop the process group once the lease is gone: TERM, then KILL. */
static void enforce_lease(due_job *job, child *c, run_state *rs)
{
	int64_t now;

	if (due_job_lease_held(job) || rs->exited)
		return;
	now = due_mono_us();
	if (rs->term_at == 0) {
		kill(-c->pid, SIGTERM);
		rs->term_at = now;
	} else if (!rs->killed && now - rs->term_at >= rs->o->kill_grace_us) {
		kill(-c->pid, SIGKILL);
		rs->killed = true;
	}
}

/* Push more of the payload into the child's stdin. */
static void feed(child *c, run_state *rs)
{
	while (c->in >= 0 && rs->in_off < rs->in_len) {
		ssize_t w = write(c->in, rs->in + rs->in_off, rs->in_len - rs->in_off);
		if (w > 0) {
			rs->in_off += (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else {
			if (w < 0 && errno == EAGAIN)
				return;
			close_fd(&c->in); /* EPIPE: it stopped reading */
		}
	}
	if (rs->in_off >= rs->in_len)
		close_fd(&c->in);
}

/* Multiplex the pipes until the child exited and its pipes are drained. */
static void supervise(due_job *job, child *c, run_state *rs, buf *out, buf *err)
{
	while (!(rs->exited && c->out < 0 && c->err < 0)) {
		struct pollfd p[3];
		int n = 0;
		if (c->in >= 0)
			p[n++] = (struct pollfd){c->in, POLLOUT, 0};
		if (c->out >= 0)
			p[n++] = (struct pollfd){c->out, POLLIN, 0};
		if (c->err >= 0)
			p[n++] = (struct pollfd){c->err, POLLIN, 0};
		if (n > 0 && poll(p, (nfds_t)n, 20) < 0 && errno != EINTR)
			break;
		if (n == 0)
			usleep(5000);
		feed(c, rs);
		if (c->out >= 0)
			drain_fd(&c->out, out);
		if (c->err >= 0)
			drain_fd(&c->err, err);
		if (!rs->exited && waitpid(c->pid, &rs->status, WNOHANG) == c->pid) {
			rs->exited = true;
			/* a background grandchild may hold the pipes: take what
			   is there now and stop listening */
			if (c->out >= 0)
				drain_fd(&c->out, out);
			if (c->err >= 0)
				drain_fd(&c->err, err);
			close_fd(&c->out);
			close_fd(&c->err);
		}
		enforce_lease(job, c, rs);
	}
	close_fd(&c->in);
}

/* Turn the exit status into the job's outcome.  Returns the handler rc. */
static int finish(due_job *job, const run_state *rs, buf *out, buf *err)
{
	char msg[ERR_TAIL + 160];
	const char *tail = err->len ? (const char *)err->p : "";

	if (WIFEXITED(rs->status) && WEXITSTATUS(rs->status) == 0) {
		due_job_set_result(job, out->len ? out->p : (const unsigned char *)"",
				   out->len);
		return 0;
	}
	if (WIFEXITED(rs->status))
		snprintf(msg, sizeof(msg), "exit %d%s%s", WEXITSTATUS(rs->status),
			 *tail ? ": " : "", tail);
	else
		snprintf(msg, sizeof(msg), "killed by signal %d%s%s%s",
			 WTERMSIG(rs->status),
			 rs->term_at ? " (lease lost or cancel requested)" : "",
			 *tail ? ": " : "", tail);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	due_job_set_error(job, msg);
	return 1;
}

int due_exec_handler(due_job *job, void *payload)
{
	const due_exec_opts *o = payload;
	const due_task *t = due_job_task(job);
	run_state rs = {.o = o, .in = t->payload, .in_len = t->payload_len};
	buf out = {.limit = o->max_result}, err = {.limit = ERR_TAIL, .tail = true};
	child c = {-1, -1, -1, -1};
	char vars[5][160];
	char **env;
	int rc;

	if (!o || !o->command) {
		due_job_set_error(job, "exec handler without a command");
		return 1;
	}
	if (!(env = make_env(t, vars))) {
		due_job_set_error(job, "out of memory");
		return 1;
	}
	rc = spawn(&c, o->command, env);
	free(env);
	if (rc < 0) {
		due_job_set_error(job, due_error_last());
		return 1;
	}
	supervise(job, &c, &rs, &out, &err);
	if (!rs.exited)
		waitpid(c.pid, &rs.status, 0);
	rc = finish(job, &rs, &out, &err);
	free(out.p);
	free(err.p);
	return rc;
}
