/*
** exec.c - the command handler behind `due work --exec CMD`.
**
** Protocol (INTERFACE.md): the command runs as `/bin/sh -c CMD` in its own
** process group, under a guard process that ends the group if the worker
** dies (see "The guard" below).  The payload goes to its stdin through a pipe
*(never on a
** command line, never through the shell's parser); the environment gets
** DUE_TASK_ID, DUE_KIND, DUE_ATTEMPT, DUE_IDEMPOTENCY_KEY=task-<id> (the
** same on every attempt, CONTRACT §3.8), DUE_DUE_AT, DUE_PRIORITY and, for
** a task with a group, DUE_GROUP.  Exit 0 completes
** the try with stdout (up to max_result bytes) as the result; a non-zero
** exit or a signal fails it with the last 4 KiB of stderr.
**
** While it runs, one thread multiplexes the three pipes with poll() and
** looks at the job's lease flag every 20 ms.  When the lease keeper
** reports the lease lost, a cancel requested or the try's time limit
** passed (it watches the clock, keeper.c), the whole process group
** gets SIGTERM, then SIGKILL after kill_grace: a handler that ignores
** SIGTERM still ends.  Pipes are non-blocking so a command that never reads
** its stdin, or floods stdout, cannot wedge the worker.
*/
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
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
** kind up to 128 (core/task.c checks both).
*/
#define N_VARS 7
#define VAR_MAX 320

/* environ without DUE_* plus the task's variables.  NULL on ENOMEM. */
static char **make_env(const due_task *t, char vars[N_VARS][VAR_MAX])
{
	size_t n = 0, k = 0;
	int nv = 6;
	char due[40];
	char **env;

	while (environ[n])
		n++;
	if (!(env = calloc(n + N_VARS + 1, sizeof(*env))))
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
	env[k] = NULL;
	return env;
}

typedef due__child child;

void due__close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/*
** The guard: the process the worker starts for each command.
**
** A handler must never outlive its worker (CONTRACT: after kill -9 of a
** worker its lease expires and another worker runs the task; a handler
** still running then would do the work twice).  Linux's parent-death
** signal reaches only the direct child, and only when the thread that
** forked it ends, so the worker forks a guard: it leads the handler's
** process group, asks for SIGUSR2 when its parent dies, and forks the
** shell that runs the command.  It then waits:
**
**  - the shell ends: the guard ends the same way (same exit code, or the
**    same signal), so the worker sees the command's own status.  When the
**    shell was killed by a signal (the worker stopping the try: lease
**    lost, cancel, time limit, shutdown), what it started may live on in
**    the group (a child that ignores SIGTERM, when the shell did not exec
**    it: `cd /app && ./run`); the guard, a child subreaper, inherits
**    them and stays their guard until they are gone, SIGKILLing them
**    kill_grace after the shell ended (the worker's own SIGKILL at the
**    lease clock's kill_by comes first when it is sooner), so that a
**    worker that dies meanwhile still takes them along;
**  - the worker dies (kill -9, OOM killer, a forced exit): the guard sends
**    SIGTERM to the whole group, waits up to kill_grace for the shell,
**    then SIGKILLs the group, itself included.  Handlers that leave the
**    group (setsid, a double fork into another group) escape this; see
**    docs/INTERFACE.md.
**
** The guard ignores SIGTERM, SIGINT and SIGHUP, so the worker's own
** "lease lost" SIGTERM to the group reaches only the command; SIGKILL to the
** group ends both.  Between fork and exit the guard makes only system calls
** (no malloc, no stdio, no locks): the worker is multi-threaded.
*/
static volatile sig_atomic_t g_orphaned, g_child_ended;

static void guard_signal(int sig)
{
	if (sig == SIGCHLD)
		g_child_ended = 1;
	else
		g_orphaned = 1;
}

static void set_handler(int sig, void (*fn)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sigfillset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

static void nap_us(int64_t us)
{
	struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* End the guard as the shell ended: its exit code, or its signal. */
static _Noreturn void guard_relay(int status)
{
	if (WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);
		struct rlimit nocore = {0, 0};
		sigset_t one;
		setrlimit(RLIMIT_CORE, &nocore); /* the shell already dumped */
		set_handler(sig, SIG_DFL);
		sigemptyset(&one);
		sigaddset(&one, sig);
		sigprocmask(SIG_UNBLOCK, &one, NULL);
		kill(getpid(), sig);
		_exit(128 + sig);
	}
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 127);
}

/*
** The shell died of a signal and left processes in the group: guard them
** until they are gone, kill_grace at most, then SIGKILL them all, the guard
** having first moved out of the group into the worker's, so that it
** survives to relay the shell's status.  An orphaned guard (the worker
** died) stops them as guard_orphaned does.
*/
static _Noreturn void guard_leftovers(pid_t worker, int sh_status,
				      int64_t kill_grace_us)
{
	int64_t waited = 0;
	pid_t pgid = getpid();
	sigset_t none;

	/* the flags' handlers may run now: nothing here but system calls */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (;;) {
		int st;
		pid_t r;
		while ((r = waitpid(-1, &st, WNOHANG)) > 0)
			;
		if (r < 0 && errno == ECHILD)
			break; /* nothing of the command is left */
		if (getppid() != worker)
			g_orphaned = 1;
		if (g_orphaned || waited >= kill_grace_us) {
			if (!g_orphaned)
				setpgid(0, getpgid(worker));
			kill(-pgid, SIGKILL);
			if (g_orphaned)
				_exit(137);
			break;
		}
		nap_us(10000);
		waited += 10000;
	}
	guard_relay(sh_status);
}

/* The worker is gone: stop the whole group, politely first. */
static _Noreturn void guard_orphaned(pid_t sh, int64_t kill_grace_us)
{
	int64_t waited = 0;
	int status;

	kill(0, SIGTERM);
	while (waited < kill_grace_us) {
		if (waitpid(sh, &status, WNOHANG) == sh)
			break;
		nap_us(10000);
		waited += 10000;
	}
	kill(0, SIGKILL); /* stragglers in the group, and the guard */
	_exit(137);
}

/* Close every descriptor from `lowest` up (system calls only). */
static void close_from(int lowest)
{
	struct rlimit rl;
	if (syscall(SYS_close_range, (unsigned)lowest, ~0u, 0u) == 0)
		return;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur > 65536)
		rl.rlim_cur = 65536;
	for (int fd = lowest; fd < (int)rl.rlim_cur; fd++)
		close(fd);
}

static _Noreturn void guard_main(pid_t worker, const int fds[3],
				 char *const argv[], char *const env[],
				 int64_t kill_grace_us)
{
	sigset_t all, none;
	pid_t sh;
	int status;

	sigfillset(&all);
	sigemptyset(&none);
	sigprocmask(SIG_BLOCK, &all, NULL);
	setpgid(0, 0);
	/*
	** Keep only the command's three pipe ends, as 0, 1 and 2: every
	** other descriptor of the worker (other commands' pipes, store
	** connections) would otherwise stay open in the guard, and another
	** command would never see EOF on its stdin.  Moved above 2 first so
	** that no dup2 overwrites a source not yet copied.
	*/
	int hi[3];
	for (int i = 0; i < 3; i++)
		if ((hi[i] = fcntl(fds[i], F_DUPFD, 3)) < 0)
			_exit(126);
	for (int i = 0; i < 3; i++)
		if (dup2(hi[i], i) < 0)
			_exit(126);
	close_from(3);
	set_handler(SIGCHLD, guard_signal);
	set_handler(SIGUSR2, guard_signal);
	set_handler(SIGTERM, SIG_IGN);
	set_handler(SIGINT, SIG_IGN);
	set_handler(SIGHUP, SIG_IGN);
	set_handler(SIGPIPE, SIG_IGN);
	prctl(PR_SET_PDEATHSIG, SIGUSR2);
	/* what the shell leaves behind becomes the guard's (guard_leftovers) */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (getppid() != worker) /* it died before the signal was armed */
		_exit(137);
	/*
	** vfork, not fork: the guard is a copy of the worker, and copying
	** its page tables a second time cost as much as the first fork
	** (most of a short command's system time).  The child shares the
	** guard's memory until execve and only makes system calls; its
	** signal dispositions are its own (no CLONE_SIGHAND), and every
	** signal stays blocked until they are all back to SIG_DFL.
	*/
	sh = vfork();
	if (sh < 0)
		_exit(126);
	if (sh == 0) {
		/* the shell dies with its guard, whatever kills the guard */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int sig = 1; sig < NSIG; sig++)
			if (sig != SIGKILL && sig != SIGSTOP)
				signal(sig, SIG_DFL);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execve("/bin/sh", argv, env);
		_exit(127);
	}
	close(0), close(1), close(2);
	for (;;) {
		while (!g_child_ended && !g_orphaned)
			sigsuspend(&none);
		if (g_orphaned)
			guard_orphaned(sh, kill_grace_us);
		g_child_ended = 0;
		if (waitpid(sh, &status, WNOHANG) != sh)
			continue;
		if (WIFSIGNALED(status))
			guard_leftovers(worker, status, kill_grace_us);
		guard_relay(status);
	}
}

/*
** Start the guard (which runs /bin/sh -c cmd) with pipes on the command's
** 0, 1, 2, in a new process group led by the guard.  0 or a due code
** (message set).
*/
int due__spawn(child *c, const char *cmd, char **env, int64_t kill_grace_us)
{
	int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
	char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
	pid_t self = getpid();
	int rc;

	if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) ||
	    pipe2(perr, O_CLOEXEC)) {
		rc = due__error_set(DUE_ERROR, "pipe: %s", strerror(errno));
		goto fail;
	}
	c->pid = fork();
	if (c->pid < 0) {
		rc = due__error_set(DUE_ERROR,
				    "cannot start the command: fork: %s",
				    strerror(errno));
		goto fail;
	}
	if (c->pid == 0) {
		int fds[3] = {pin[0], pout[1], perr[1]};
		guard_main(self, fds, argv, env, kill_grace_us);
	}
	setpgid(c->pid,
		c->pid); /* also done by the guard: no race with kill(-pid) */
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
		due__close_fd(&pin[i]);
		due__close_fd(&pout[i]);
		due__close_fd(&perr[i]);
	}
	return rc;
}

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
	int status;
	bool exited;
} run_state;

/*
** Stop the process group once the lease is gone: TERM, then KILL after
** the kill grace, or sooner when the lease clock says the store could hand
** the task on (due__job_kill_by): the group must be gone by then.
*/
static void enforce_lease(due_job *job, child *c, run_state *rs)
{
	int64_t now, kill_by;

	if (due_job_lease_held(job) || rs->exited)
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
	while (!due_job_lease_held(job) && !rs->killed &&
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
			due__drain_fd(&c->out, out);
		if (c->err >= 0)
			due__drain_fd(&c->err, err);
		if (!rs->exited &&
		    waitpid(c->pid, &rs->status, WNOHANG) == c->pid) {
			rs->exited = true;
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
static int finish(due_job *job, const run_state *rs, buf *out, buf *err)
{
	char status[160];

	if (WIFEXITED(rs->status) && WEXITSTATUS(rs->status) == 0) {
		due_job_set_result(
		    job, out->len ? out->p : (const unsigned char *)"",
		    out->len);
		return 0;
	}
	if (WIFEXITED(rs->status))
		snprintf(status, sizeof(status), "exit %d",
			 WEXITSTATUS(rs->status));
	else
		snprintf(status, sizeof(status), "killed by signal %d%s%s%s",
			 WTERMSIG(rs->status), rs->term_at ? " (" : "",
			 rs->term_at
			     ? due__stop_reason_name(due__job_stop_why(job))
			     : "",
			 rs->term_at ? ")" : "");
	set_failure(job, status, err);
	return 1;
}

int due_exec_handler(due_job *job, void *payload)
{
	const due_exec_opts *o = payload;
	const due_task *t = due_job_task(job);
	run_state rs = {.o = o, .in = t->payload, .in_len = t->payload_len};
	buf out = {.limit = o->max_result},
	    err = {.limit = ERR_TAIL, .tail = true};
	child c = {-1, -1, -1, -1};
	char vars[N_VARS][VAR_MAX];
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
	rc = due__spawn(&c, o->command, env, o->kill_grace_us);
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
