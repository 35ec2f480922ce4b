/*
** spawn.c - starting a command (`--exec`, `--pipe`) under a guard.
**
** The processes:
**
**   worker ─socket─▶ due-spawner ─fork─▶ due-guard ─vfork+exec─▶ sh -c CMD
**     │  ├────────────── socket (one per guard) ──────▲
**     │  └────────────── clock pipe (one per guard) ──▲
**     └──────────── lifeline pipe (EOF: the worker is gone) ──┘
**
** The guard.  A handler must never outlive its worker (CONTRACT: after
** kill -9 of a worker its lease expires and another worker runs the task;
** a handler still running then would do the work twice).  So each command
** runs under a guard process that ends the command's process group when
** the worker process dies: SIGTERM, then SIGKILL once kill_grace has passed
** or nothing of the command is left.  The guard learns of the worker's
** death from the lifeline, a pipe whose only writer is the worker process:
** its read end gets EOF when the worker is gone, however it died.  For each
** command the guard vforks the shell into a new process group (its pid is
** the group's id), joins that group itself while the command runs (so the
** group lives as long as the guard does, and the worker's SIGKILL to it
** takes the guard along, as it takes everything of the command), answers
** the worker with the shell's pid, and when the shell has ended, leaves
** the group and writes the shell's wait status to the command's status
** pipe, then closes it: the worker polls that pipe's read end.  When the
** shell was killed by a signal (the worker stopping the try: lease lost,
** cancel, time limit, shutdown), what it started may live on in the group
** (a child that ignores SIGTERM, when the shell did not exec it: `cd /app
** && ./run`); the guard, a child subreaper, inherits them and stays their
** guard until they are gone, SIGKILLing them kill_grace after the shell
** ended (the worker's own SIGKILL at the lease clock's kill_by comes first
** when it is sooner), so that a worker that dies meanwhile still takes them
** along.  The guard also holds the lease clock's kill time of the try its
** command runs, told on its clock pipe, and SIGKILLs the group then even
** if the worker is stopped ("The lease clock of the command", below).
** Handlers that leave the group (setsid, a double fork into another
** group) escape all this; see docs/INTERFACE.md.
**
** A guard serves one command at a time, and then the next: each handler
** slot (thread) keeps its own (two when it runs a pipe process and a
** command at once), so a command costs a vfork of the guard and a message
** each way, not a fork.  The guard exits when its slot's thread ends (EOF
** on its socket), after the command it runs; the worker starts another
** when one has died (the SIGKILL of a group kills its guard).
**
** The spawner.  Guards used to be a fork() of the worker, one per command.
** A fork of a multi-threaded process write-protects every page the worker
** has written, and each page a worker thread then writes while the guard
** lives (the claimer's, the completer's, SQLite's) takes a copy-on-write
** fault whose TLB flush interrupts every CPU that runs a worker thread.  On
** a 2-CPU virtual machine that was 5.4 ms of the worker's CPU per `--exec
** true` (0.8 ms with no guard at all), and it stalled the claimer: issue 36
** measured claim - due p99 4 ms before the guard and 44-142 ms after it
** (2 workers x 2 slots, 100 commands/s).  Now the worker forks once, the
** spawner, a single-threaded process whose only work is to fork a guard
** when a slot needs one (a bare clone3: no atfork handlers run in the
** guard).  The spawner serves one request at a time (a mutex on the worker
** side): the guard's end of a socketpair, sent with SCM_RIGHTS; it answers
** with the guard's pid.  It auto-reaps its guards (SIGCHLD ignored) and
** exits at EOF on its socket: when the worker process is gone.  A spawner
** that dies or stops answering is replaced (SIGKILLed and reaped) by the
** next request; guards do not depend on it, only on the lifeline.  The
** spawner and the guards ignore SIGINT, SIGTERM, SIGHUP and SIGQUIT, which
** a terminal or a service manager sends to the worker's whole group: the
** worker decides how its handlers stop.  A forked copy of the worker
** process (pthread_atfork) forgets the spawner, the guards and the
** lifeline of its parent and makes its own.
**
** Between fork and exit the spawner and the guards make only system calls
** (no malloc, no stdio, no locks): they are copies of a multi-threaded
** process.  A command's strings come over the socket into the guard's own
** mapping.
*/
#define _GNU_SOURCE /* pipe2, ppoll, SOCK_CLOEXEC */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h> /* struct clone_args */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "worker/exec.h"

/* A command for a guard; cmd and the environment follow as C strings. */
typedef struct spawn_req {
	uint32_t magic;
	uint32_t n_env;
	uint64_t bytes; /* of the strings that follow */
	int64_t kill_grace_us;
	uint64_t seq;	 /* the command's number at its guard */
	int64_t kill_at; /* the lease clock's SIGKILL, monotonic us; 0: none */
} spawn_req;

/* A later kill time for command seq, on the guard's clock pipe. */
typedef struct clock_msg {
	uint64_t seq;
	int64_t kill_at;
} clock_msg;

#define SPAWN_MAGIC 0x64756532u	    /* "due2" */
#define SPAWN_MAX_BYTES (64u << 20) /* a sane bound on one request */
#define SPAWN_ANSWER_MS                                                        \
	10000 /* a spawner or guard silent this long is dropped */
/* descriptors of the spawner and of an idle guard, beside 0-2 (/dev/null);
   P_CLOCK, the guard's alone: the read end of its clock pipe */
enum { P_SOCK = 3, P_LIFELINE = 4, P_CLOCK = 5 };

/* ------------------------------------------------------------------ */
/* System-call helpers (fork-safe)                                     */
/* ------------------------------------------------------------------ */

void due__close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
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

/* Close every descriptor from `lowest` up. */
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

/*
** Put fds[0..n) on descriptors 0..n-1, whatever their numbers now (moved
** above n first, so that no dup2 overwrites a source not yet copied), and
** close every other descriptor.  false on failure.
*/
static bool place_fds(const int *fds, int n)
{
	int hi[8];
	for (int i = 0; i < n; i++)
		if ((hi[i] = fcntl(fds[i], F_DUPFD, n)) < 0)
			return false;
	for (int i = 0; i < n; i++)
		if (dup2(hi[i], i) < 0)
			return false;
	close_from(n);
	return true;
}

static bool write_full(int fd, const void *d, size_t n)
{
	const char *p = d;
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == ENOTSOCK)
			w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static bool read_full(int fd, void *d, size_t n)
{
	char *p = d;
	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
	}
	return true;
}

/* sendmsg of a fixed part with n descriptors; false on failure. */
static bool send_with_fds(int sock, const void *d, size_t len, const int *fds,
			  int n)
{
	char cbuf[CMSG_SPACE(4 * sizeof(int))] = {0};
	struct iovec iov = {(void *)d, len};
	struct msghdr m = {0};
	struct cmsghdr *c;
	ssize_t w;

	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cbuf;
	m.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
	memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
	while ((w = sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return w > 0 && write_full(sock, (const char *)d + w, len - (size_t)w);
}

/*
** recvmsg of a fixed part of len bytes with exactly n descriptors (close-
** on-exec); false at EOF or on anything else.
*/
static bool recv_with_fds(int sock, void *d, size_t len, int *fds, int n)
{
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = {d, len};
	struct msghdr m = {0};
	struct cmsghdr *c;
	ssize_t r;

	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cbuf;
	m.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
	while ((r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (r <= 0 || !(c = CMSG_FIRSTHDR(&m)) || c->cmsg_level != SOL_SOCKET ||
	    c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN((size_t)n * sizeof(int)))
		return false;
	memcpy(fds, CMSG_DATA(c), (size_t)n * sizeof(int));
	return read_full(sock, (char *)d + r, len - (size_t)r);
}

/*
** fork() without glibc's: clone3 with no flags.  glibc's fork() ran every
** library's pthread_atfork handlers and its malloc bookkeeping in the
** child, each a page written (copied) for nothing: a guard makes only
** system calls.  fork() where the kernel has no clone3 (before 5.3).
*/
static pid_t plain_fork(void)
{
#ifdef SYS_clone3
	struct clone_args a;
	memset(&a, 0, sizeof(a));
	a.exit_signal = SIGCHLD;
	long r = syscall(SYS_clone3, &a, sizeof(a));
	if (r >= 0 || errno != ENOSYS)
		return (pid_t)r;
#endif
	return fork();
}

/* The signals a terminal or a service manager sends to a whole group. */
static void ignore_group_signals(void)
{
	static const int quiet[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
				    SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU};
	for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++)
		set_handler(quiet[i], SIG_IGN);
}

/* ------------------------------------------------------------------ */
/* The guard (a fork of the spawner)                                   */
/* ------------------------------------------------------------------ */

static volatile sig_atomic_t g_child_ended;

/*
** The lease clock of the command.  The worker stops a try
** whose lease it could not confirm in time and SIGKILLs its group at the
** lease clock's kill time (worker.md, "The lease clock"), but a worker
** that cannot act (SIGSTOP, a debugger, a process starved of CPU) would
** let the command run on beside the next attempt on another worker.  So
** its guard, a process of its own, holds the same kill time: the request
** carries it, and the worker's thread that supervises the command sends a
** later one on the clock pipe each time a renewal moves it
** (due__child_kill_at); at that time, not told of a later one, the guard
** leaves the group and SIGKILLs it (and reports the end as usual).
*/
typedef struct lease_clock {
	uint64_t seq;
	int64_t kill_at; /* monotonic us; 0: none (a pipe process between
			    tasks) */
	bool open;	 /* the worker's end of the clock pipe is open */
	bool killed;	 /* the group got the clock's SIGKILL */
} lease_clock;

/* Take the worker's latest kill time for this command, if it sent one. */
static void clock_read(lease_clock *lc)
{
	clock_msg m;
	ssize_t r;

	/* (one for an earlier command, sent late, is not this one's) */
	while ((r = read(P_CLOCK, &m, sizeof(m))) == (ssize_t)sizeof(m))
		if (m.seq == lc->seq)
			lc->kill_at = m.kill_at;
	if (r == 0)
		lc->open = false; /* EOF: the worker dropped this guard */
}

/* The kill time has come (or its SIGKILL was sent). */
static bool clock_passed(const lease_clock *lc)
{
	return lc->killed || (lc->kill_at && due__mono_us() >= lc->kill_at);
}

/* At the kill time: out of the group (to live on and report), SIGKILL it. */
static bool clock_due(pid_t home, pid_t pgid, lease_clock *lc)
{
	if (!lc->killed && clock_passed(lc)) {
		setpgid(0, home);
		kill(-pgid, SIGKILL);
		lc->killed = true;
	}
	return lc->killed;
}

static void guard_sigchld(int sig)
{
	(void)sig;
	g_child_ended = 1;
}

/* The worker process is gone: nothing writes to the lifeline any more. */
static bool worker_gone(void)
{
	struct pollfd p = {P_LIFELINE, POLLIN, 0};
	return poll(&p, 1, 0) > 0;
}

/* Reap what of group pgid has ended; false when none of it is our child. */
static bool group_left(pid_t pgid)
{
	int st;
	pid_t r;
	while ((r = waitpid(-pgid, &st, WNOHANG)) > 0)
		;
	return !(r < 0 && errno == ECHILD);
}

/* Reap any child that has ended (what earlier commands left, say). */
static void reap_any(void)
{
	int st;
	while (waitpid(-1, &st, WNOHANG) > 0)
		;
}

/*
** The worker is gone while a command runs: stop its group, politely first.
** The command gets kill_grace to end (the shell, and whatever it started:
** the guard is their subreaper, so they are its children once their
** parents die), never past the lease clock's kill time; then SIGKILL to
** the group, the guard included.
*/
static _Noreturn void guard_orphaned(pid_t pgid, int64_t kill_grace_us,
				     const lease_clock *lc)
{
	int64_t waited = 0;

	kill(-pgid, SIGTERM);
	while (waited < kill_grace_us && group_left(pgid) &&
	       !clock_passed(lc)) {
		nap_us(10000);
		waited += 10000;
	}
	kill(-pgid, SIGKILL); /* stragglers in the group, and the guard */
	_exit(137);
}

/*
** The shell died of a signal and may have left processes in its group:
** guard them until they are gone, kill_grace at most, then SIGKILL them
** all, the guard having first left the group for `home` (the worker's
** group); at the lease clock's kill time if that comes first.  A guard
** whose worker died meanwhile SIGKILLs them at once.
*/
static void guard_leftovers(pid_t home, pid_t pgid, int64_t kill_grace_us,
			    lease_clock *lc)
{
	int64_t waited = 0;

	while (group_left(pgid)) {
		bool gone = worker_gone();
		if (lc->open)
			clock_read(lc);
		if (gone || waited >= kill_grace_us ||
		    clock_due(home, pgid, lc)) {
			if (gone)
				kill(-pgid, SIGKILL), _exit(137);
			setpgid(0, home);
			kill(-pgid, SIGKILL);
			return;
		}
		nap_us(10000);
		waited += 10000;
	}
}

/*
** Room for n bytes of strings and m pointers in the guard's own mapping,
** grown as needed.  NULL when it cannot be had.
*/
static unsigned char *guard_room(size_t n, size_t m)
{
	static unsigned char *buf;
	static size_t cap;
	size_t need = n + 16 + m * sizeof(char *);

	if (need > cap) {
		size_t c = cap ? cap : 1u << 16;
		while (c < need)
			c *= 2;
		void *p = mmap(NULL, c, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		if (buf)
			munmap(buf, cap);
		buf = p;
		cap = c;
	}
	return buf;
}

/*
** A request's strings: argv (/bin/sh -c cmd) and envp, in the room.
** false when they do not add up (the guard then leaves: out of step).
*/
static bool read_strings(const spawn_req *rq, char *argv[4], char ***envp)
{
	unsigned char *buf = guard_room(rq->bytes, rq->n_env + 1);
	size_t off;
	char **env;

	if (!buf || rq->bytes == 0 || rq->bytes > SPAWN_MAX_BYTES ||
	    rq->n_env >= rq->bytes || !read_full(P_SOCK, buf, rq->bytes) ||
	    buf[rq->bytes - 1] != '\0')
		return false;
	env = (char **)(buf + ((rq->bytes + 15) & ~(size_t)15));
	argv[0] = "/bin/sh";
	argv[1] = "-c";
	argv[2] = (char *)buf;
	argv[3] = NULL;
	off = strlen(argv[2]) + 1;
	for (uint32_t i = 0; i < rq->n_env; i++) {
		if (off >= rq->bytes)
			return false;
		env[i] = (char *)buf + off;
		off += strlen(env[i]) + 1;
	}
	env[rq->n_env] = NULL;
	*envp = env;
	return true;
}

/*
** Run one command: fds are its stdin, stdout, stderr and the status
** pipe's write end.  Answers the worker with the shell's pid (or -errno),
** waits for the shell's end, guards what it leaves, and writes the wait
** status.  Returns when the command is over; exits when the worker is
** gone.
*/
static void guard_command(pid_t home, const spawn_req *rq, const int fds[4],
			  char *argv[], char *env[])
{
	lease_clock lc = {.seq = rq->seq, .kill_at = rq->kill_at, .open = true};
	sigset_t none;
	int status = 0;
	pid_t sh;

	sigemptyset(&none);
	g_child_ended = 0;
	/*
	** vfork: the child shares the guard's memory until execve and only
	** makes system calls; its signal dispositions and descriptors are its
	** own, and every signal stays blocked until they are all SIG_DFL.
	*/
	sh = vfork();
	if (sh == 0) {
		setpgid(0, 0);
		if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 ||
		    dup2(fds[2], 2) < 0)
			_exit(126);
		/* the shell dies with its guard, whatever kills the guard */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int sig = 1; sig < NSIG; sig++)
			if (sig != SIGKILL && sig != SIGSTOP)
				signal(sig, SIG_DFL);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execve("/bin/sh", argv, env);
		_exit(127);
	}
	int32_t answer = sh > 0 ? sh : -errno;
	close(fds[0]), close(fds[1]), close(fds[2]);
	if (sh > 0)
		setpgid(0, sh); /* the group lives as long as we are in it */
	if (!write_full(P_SOCK, &answer, sizeof(answer)) && sh > 0)
		kill(-sh, SIGKILL); /* the worker is gone (lifeline next) */
	if (sh < 0) {
		close(fds[3]);
		return;
	}
	clock_read(&lc); /* what is left of earlier commands goes */
	for (bool ended = false; !ended;) {
		/* SIGCHLD is let in only while waiting here: no lost wake-up */
		while (!g_child_ended) {
			struct pollfd p[2] = {
			    {P_LIFELINE, POLLIN, 0},
			    {lc.open ? P_CLOCK : -1, POLLIN, 0}};
			struct timespec ts, *wait = NULL;
			if (!clock_due(home, sh, &lc) && lc.kill_at) {
				int64_t d = lc.kill_at - due__mono_us();
				d = d < 0 ? 0 : d;
				ts.tv_sec = d / 1000000;
				ts.tv_nsec = (long)(d % 1000000) * 1000;
				wait = &ts;
			}
			if (ppoll(p, 2, wait, &none) <= 0)
				continue;
			if (p[0].revents)
				guard_orphaned(sh, rq->kill_grace_us, &lc);
			if (p[1].revents)
				clock_read(&lc);
		}
		g_child_ended = 0;
		int st;
		pid_t r;
		while ((r = waitpid(-1, &st, WNOHANG)) > 0)
			if (r == sh)
				status = st, ended = true;
	}
	if (WIFSIGNALED(status))
		guard_leftovers(home, sh, rq->kill_grace_us, &lc);
	setpgid(0, home);
	write_full(fds[3], &status, sizeof(status));
	close(fds[3]);
}

/*
** A guard: serve the worker's commands on P_SOCK, one at a time, until
** EOF there (its slot's thread ended) or on the lifeline (the worker is
** gone).  home: the worker's process group.
*/
static _Noreturn void guard_main(pid_t home)
{
	sigset_t all, none;

	sigfillset(&all);
	sigemptyset(&none);
	sigprocmask(SIG_BLOCK, &all, NULL);
	prctl(PR_SET_NAME, "due-guard");
	fcntl(P_SOCK, F_SETFD, FD_CLOEXEC);
	fcntl(P_LIFELINE, F_SETFD, FD_CLOEXEC);
	fcntl(P_CLOCK, F_SETFD, FD_CLOEXEC);
	set_handler(SIGCHLD, guard_sigchld);
	ignore_group_signals();
	/* what a shell leaves behind becomes the guard's (guard_leftovers) */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	for (;;) {
		struct pollfd p[2] = {{P_SOCK, POLLIN, 0},
				      {P_LIFELINE, POLLIN, 0}};
		spawn_req rq;
		int fds[4];
		char *argv[4], **env;

		g_child_ended = 0;
		if (ppoll(p, 2, NULL, &none) < 0) {
			reap_any(); /* SIGCHLD: what a command left ended */
			continue;
		}
		if (p[1].revents)
			_exit(0); /* the worker is gone; nothing runs */
		if (!recv_with_fds(P_SOCK, &rq, sizeof(rq), fds, 4))
			_exit(0); /* EOF: the slot's thread ended */
		if (rq.magic != SPAWN_MAGIC || !read_strings(&rq, argv, &env))
			_exit(1); /* out of step: the worker starts another */
		guard_command(home, &rq, fds, argv, env);
		reap_any();
	}
}

/* ------------------------------------------------------------------ */
/* The spawner (a fork of the worker)                                  */
/* ------------------------------------------------------------------ */

/* Start guards, one per request (the guard's socket), until EOF. */
static _Noreturn void spawner_main(int sock, int lifeline)
{
	int null = open("/dev/null", O_RDWR);
	int keep[5] = {null, null, null, sock, lifeline};
	pid_t home = getpgid(0);
	sigset_t none;

	if (null < 0 || !place_fds(keep, 5))
		_exit(1);
	prctl(PR_SET_NAME,
	      "due-spawner"); /* in ps and top, beside its worker */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	ignore_group_signals();
	set_handler(SIGCHLD, SIG_IGN); /* guards are reaped by the kernel */
	for (;;) {
		uint32_t magic;
		int fd[2]; /* the guard's socket, its clock pipe's read end */
		if (!recv_with_fds(P_SOCK, &magic, sizeof(magic), fd, 2) ||
		    magic != SPAWN_MAGIC)
			_exit(0); /* EOF: the worker is gone (or out of step) */
		pid_t pid = plain_fork();
		if (pid == 0) {
			int g[6] = {0, 1, 2, fd[0], P_LIFELINE, fd[1]};
			if (!place_fds(g, 6))
				_exit(1);
			guard_main(home);
		}
		int32_t answer = pid > 0 ? pid : -errno;
		close(fd[0]);
		close(fd[1]);
		if (!write_full(P_SOCK, &answer, sizeof(answer)))
			_exit(0);
	}
}

/* ------------------------------------------------------------------ */
/* The worker's side                                                   */
/* ------------------------------------------------------------------ */

/*
** A guard as the worker knows it.  A slot's thread keeps a list of its
** guards (thread-specific, freed as the thread ends); a started command
** holds a reference to its guard until the guard has reported its end, so
** `busy` is cleared, and the last reference freed, by whichever thread
** sees that end (due_pipe_free may, after the slot's thread is gone).
*/
struct due__guard {
	atomic_int refs;
	atomic_bool busy;
	pid_t pid;
	int sock;     /* -1: dead or dropped */
	int clock;    /* the clock pipe's write end (non-blocking), kept
			 until the last reference goes: a running command's
			 thread may write it after the guard is dropped */
	uint64_t seq; /* the number of its latest command */
	struct due__guard *next;
};
typedef struct due__guard guard;

/*
** The spawner of this process and the lifeline, under sp_mu (any thread
** may start a guard).  `forking`: the fork below is under way, so the
** pthread_atfork child handler, which runs in the new spawner, must leave
** things alone.
*/
static pthread_mutex_t sp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t sp_once = PTHREAD_ONCE_INIT;
static pthread_key_t sp_guards; /* the calling thread's guard list */
static struct {
	pid_t pid; /* the spawner, or -1 */
	int sock;
	int lifeline[2]; /* [1] is ours only, for as long as we live */
	bool forking;
} sp = {-1, -1, {-1, -1}, false};

static void guard_unref(guard *g)
{
	if (atomic_fetch_sub(&g->refs, 1) == 1) {
		due__close_fd(&g->clock);
		free(g);
	}
}

/* A slot's thread ends: its guards exit after what they run. */
static void guards_free(void *head)
{
	for (guard *g = head, *next; g; g = next) {
		next = g->next;
		due__close_fd(&g->sock);
		guard_unref(g);
	}
}

/* A forked copy of the worker process: its parent's helpers are not ours. */
static void sp_atfork_child(void)
{
	if (sp.forking)
		return;
	pthread_mutex_init(&sp_mu, NULL);
	due__close_fd(&sp.sock);
	due__close_fd(&sp.lifeline[0]);
	due__close_fd(&sp.lifeline[1]);
	sp.pid = -1;
	/* only this thread lives on; its list is the parent's (not freed:
	   a reference may be held by a child of the parent's) */
	for (guard *g = pthread_getspecific(sp_guards); g; g = g->next) {
		due__close_fd(&g->sock);
		due__close_fd(&g->clock);
	}
	pthread_setspecific(sp_guards, NULL);
}

static void sp_init(void)
{
	pthread_key_create(&sp_guards, guards_free);
	pthread_atfork(NULL, NULL, sp_atfork_child);
}

/* The spawner failed us: end it (the guards it started go on). */
static void sp_drop_locked(void)
{
	due__close_fd(&sp.sock);
	if (sp.pid > 0) {
		kill(sp.pid, SIGKILL);
		while (waitpid(sp.pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	sp.pid = -1;
}

static int sp_start_locked(void)
{
	int sv[2];

	if (sp.lifeline[1] < 0 && pipe2(sp.lifeline, O_CLOEXEC) < 0)
		return due__error_set(DUE_ERROR,
				      "cannot start the command: pipe: %s",
				      strerror(errno));
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return due__error_set(DUE_ERROR,
				      "cannot start the command: "
				      "socketpair: %s",
				      strerror(errno));
	sp.forking = true;
	sp.pid = fork();
	if (sp.pid == 0)
		spawner_main(sv[1], sp.lifeline[0]);
	sp.forking = false;
	close(sv[1]);
	if (sp.pid < 0) {
		int e = errno;
		close(sv[0]);
		return due__error_set(DUE_ERROR,
				      "cannot start the command: fork: %s",
				      strerror(e));
	}
	sp.sock = sv[0];
	return 0;
}

/* Wait for a 4-byte answer on sock (SPAWN_ANSWER_MS at most); 0 if none. */
static int32_t answer_of(int sock)
{
	struct pollfd p = {sock, POLLIN, 0};
	int32_t answer = 0;

	while (poll(&p, 1, SPAWN_ANSWER_MS) < 0 && errno == EINTR)
		;
	if (!(p.revents & POLLIN) || !read_full(sock, &answer, sizeof(answer)))
		return 0;
	return answer ? answer : -EPROTO;
}

/*
** Ask the spawner for a guard on fd[0] (its socket) with fd[1] (its clock
** pipe's read end); its pid, -errno, or 0 on failure.
*/
static int32_t sp_ask_locked(const int fd[2])
{
	uint32_t magic = SPAWN_MAGIC;
	int32_t answer = 0;

	if (send_with_fds(sp.sock, &magic, sizeof(magic), fd, 2))
		answer = answer_of(sp.sock);
	if (answer == 0)
		sp_drop_locked();
	return answer;
}

/* A new guard for the calling thread; NULL with the message set. */
static guard *guard_new(void)
{
	int sv[2], cp[2], rc = 0;
	int32_t answer = 0;
	guard *g;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		due__error_set(DUE_ERROR,
			       "cannot start the command: socketpair: %s",
			       strerror(errno));
		return NULL;
	}
	if (pipe2(cp, O_CLOEXEC | O_NONBLOCK) < 0) {
		due__error_set(DUE_ERROR, "cannot start the command: pipe: %s",
			       strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return NULL;
	}
	int theirs[2] = {sv[1], cp[0]};
	pthread_mutex_lock(&sp_mu);
	/* a spawner that died since the last guard: one more try */
	for (int try = 0; try < 2 && answer == 0 && rc == 0; try++)
		if (sp.pid > 0 || (rc = sp_start_locked()) == 0)
			answer = sp_ask_locked(theirs);
	pthread_mutex_unlock(&sp_mu);
	close(sv[1]);
	close(cp[0]);
	if (rc == 0 && answer <= 0)
		due__error_set(DUE_ERROR, "cannot start the command: %s",
			       answer ? strerror(-answer)
				      : "the spawner process does not answer");
	if (answer <= 0 || !(g = calloc(1, sizeof(*g)))) {
		if (answer > 0)
			due__error_set(DUE_ENOMEM, "out of memory");
		close(sv[0]);
		close(cp[1]);
		return NULL;
	}
	atomic_init(&g->refs, 1);
	atomic_init(&g->busy, false);
	g->pid = answer;
	g->sock = sv[0];
	g->clock = cp[1];
	g->next = pthread_getspecific(sp_guards);
	pthread_setspecific(sp_guards, g);
	return g;
}

/* Take a guard off the calling thread's list and drop it. */
static void guard_drop(guard *g)
{
	guard *head = pthread_getspecific(sp_guards);

	for (guard **link = &head; *link; link = &(*link)->next)
		if (*link == g) {
			*link = g->next;
			break;
		}
	pthread_setspecific(sp_guards, head);
	due__close_fd(&g->sock);
	guard_unref(g);
}

/* An idle guard of the calling thread, or a new one; NULL: message set. */
static guard *guard_get(void)
{
	for (guard *g = pthread_getspecific(sp_guards); g; g = g->next)
		if (g->sock >= 0 && !atomic_load(&g->busy))
			return g;
	return guard_new();
}

/* cmd and env as the request's strings: malloc'd; NULL on ENOMEM. */
static char *pack_strings(const char *cmd, char **env, uint32_t *n_env,
			  size_t *len)
{
	size_t n = strlen(cmd) + 1, k = 0;
	char *s, *o;

	for (; env && env[k]; k++)
		n += strlen(env[k]) + 1;
	if (!(s = malloc(n)))
		return NULL;
	o = stpcpy(s, cmd) + 1;
	for (size_t i = 0; i < k; i++)
		o = stpcpy(o, env[i]) + 1;
	*n_env = (uint32_t)k;
	*len = n;
	return s;
}

/*
** Run the command on a guard of the calling thread: the shell's pid, or
** a code with the message set.  A guard that does not take it (it died: a
** SIGKILL to its last command's group) is dropped and another started.
*/
static int run_on_guard(const int fds[4], const char *cmd, char **env,
			int64_t kill_grace_us, int64_t kill_at, pid_t *pid,
			guard **out)
{
	spawn_req rq = {.magic = SPAWN_MAGIC,
			.kill_grace_us = kill_grace_us,
			.kill_at = kill_at};
	size_t len;
	char *strings = pack_strings(cmd, env, &rq.n_env, &len);
	int32_t answer = 0;
	guard *g = NULL;

	if (!strings)
		return due__error_set(DUE_ENOMEM, "out of memory");
	rq.bytes = len;
	pthread_once(&sp_once, sp_init);
	for (int try = 0; try < 2 && answer == 0; try++) {
		if (!(g = guard_get())) {
			free(strings);
			return due_error_last_code();
		}
		rq.seq = ++g->seq;
		if (send_with_fds(g->sock, &rq, sizeof(rq), fds, 4) &&
		    write_full(g->sock, strings, len))
			answer = answer_of(g->sock);
		if (answer == 0)
			guard_drop(g);
	}
	free(strings);
	if (answer <= 0)
		return due__error_set(DUE_ERROR, "cannot start the command: %s",
				      answer ? strerror(-answer)
					     : "its guard process does not "
					       "answer");
	atomic_store(&g->busy, true);
	atomic_fetch_add(&g->refs, 1);
	*pid = answer;
	*out = g;
	return 0;
}

/*
** Start /bin/sh -c cmd under a guard with pipes on its 0, 1, 2 and a
** status pipe.  0 or a due code (message set).
*/
int due__spawn(due__child *c, const char *cmd, char **env,
	       int64_t kill_grace_us, int64_t kill_at)
{
	int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1},
	    pst[2] = {-1, -1};
	guard *g = NULL;
	int rc = 0;

	*c = DUE__CHILD_NONE;
	if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) ||
	    pipe2(perr, O_CLOEXEC) || pipe2(pst, O_CLOEXEC)) {
		rc = due__error_set(DUE_ERROR, "pipe: %s", strerror(errno));
	} else {
		int fds[4] = {pin[0], pout[1], perr[1], pst[1]};
		rc = run_on_guard(fds, cmd, env, kill_grace_us, kill_at,
				  &c->pid, &g);
	}
	due__close_fd(&pin[0]);
	due__close_fd(&pout[1]);
	due__close_fd(&perr[1]);
	due__close_fd(&pst[1]);
	if (rc < 0) {
		due__close_fd(&pin[1]);
		due__close_fd(&pout[0]);
		due__close_fd(&perr[0]);
		due__close_fd(&pst[0]);
		return rc;
	}
	c->in = pin[1];
	c->out = pout[0];
	c->err = perr[0];
	c->st = pst[0];
	c->guard = g;
	c->seq = g->seq;
	c->kill_at = kill_at;
	c->status = -1; /* none yet: a wait status is never -1 */
	c->ended = false;
	fcntl(c->in, F_SETFL, O_NONBLOCK);
	fcntl(c->out, F_SETFL, O_NONBLOCK);
	fcntl(c->err, F_SETFL, O_NONBLOCK);
	fcntl(c->st, F_SETFL, O_NONBLOCK);
	return 0;
}

/*
** The status pipe: the wait status (4 bytes, written at once), then EOF
** when the guard is done with the command.  EOF with no status: the guard
** was killed (SIGKILL to the group at kill_by, or from outside), with the
** shell (it dies with its guard): the command's end as a SIGKILL.
*/
bool due__child_ended(due__child *c)
{
	int status;
	ssize_t r;

	if (c->ended)
		return true;
	while ((r = read(c->st, &status, sizeof(status))) ==
	       (ssize_t)sizeof(status))
		c->status = status;
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return false;
	/* EOF (or a broken pipe: the same end) with no status: the guard
	   died (a SIGKILL to the group, or one to the guard alone from
	   outside).  Its shell died with it (PR_SET_PDEATHSIG), but what the
	   shell started lives on in the group, beside the try that comes
	   next: SIGKILL the group (which exists while any of it lives, so
	   its id names no other group) before the try's end is committed */
	if (c->status == -1) {
		c->status = SIGKILL;
		kill(-c->pid, SIGKILL);
	}
	due__close_fd(&c->st);
	if (c->guard) {
		guard *g = c->guard;
		atomic_store(&g->busy, false);
		guard_unref(g);
		c->guard = NULL;
	}
	c->ended = true;
	return true;
}

void due__child_kill_at(due__child *c, int64_t kill_at)
{
	clock_msg m = {.seq = c->seq, .kill_at = kill_at};

	if (!c->guard || c->ended || kill_at == c->kill_at)
		return;
	/* one write of 16 bytes: atomic on a pipe; a full pipe (a guard
	   that reads nothing: it is stuck or gone) drops it */
	if (write(c->guard->clock, &m, sizeof(m)) == (ssize_t)sizeof(m))
		c->kill_at = kill_at;
}

void due__child_wait(due__child *c)
{
	while (!due__child_ended(c)) {
		struct pollfd p = {c->st, POLLIN, 0};
		poll(&p, 1, -1);
	}
}
