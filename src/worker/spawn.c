/*
** spawn.c - starting a command (`--exec`, `--pipe`) under its guard, by
** way of the spawner.
**
** Three kinds of process take part:
**
**   worker  ──(socket)──▶  spawner  ──fork──▶  guard  ──vfork+exec──▶  sh -c
*CMD
**      │                                         ▲
**      └───────────(lifeline pipe: EOF)──────────┘
**
** The guard.  A handler must never outlive its worker (CONTRACT: after
** kill -9 of a worker its lease expires and another worker runs the task;
** a handler still running then would do the work twice).  So each command
** runs under a guard process that leads the command's process group and
** ends that group when the worker process dies: SIGTERM, then SIGKILL once
** kill_grace has passed or nothing of the command is left.  The guard
** learns of the worker's death from the lifeline, a pipe whose only writer
** is the worker process: its read end gets EOF when the worker is gone,
** however it died.  The guard relays the shell's end (same exit code, or
** the same signal) and first writes the shell's wait status to the status
** pipe, whose read end the worker polls.  When the shell was killed by a
** signal (the worker stopping the try: lease lost, cancel, time limit,
** shutdown), what it started may live on in the group (a child that
** ignores SIGTERM, when the shell did not exec it: `cd /app && ./run`);
** the guard, a child subreaper, inherits them and stays their guard until
** they are gone, SIGKILLing them kill_grace after the shell ended (the
** worker's own SIGKILL at the lease clock's kill_by comes first when it is
** sooner), so that a worker that dies meanwhile still takes them along.
** Handlers that leave the group (setsid, a double fork into another group)
** escape all this; see docs/INTERFACE.md.
**
** The spawner.  The guard used to be a fork() of the worker, once per
** command.  A fork of a multi-threaded process write-protects every page
** the worker has written, and each page a worker thread then writes while
** the guard lives (the claimer's, the completer's, SQLite's) takes a
** copy-on-write fault whose TLB flush interrupts every CPU that runs a
** worker thread.  On a 2-CPU virtual machine that was 5.4 ms of the
** worker's CPU per `--exec true` (0.8 ms with no guard at all), and it
** stalled the claimer: issue 36 measured claim - due p99 4 ms before the
** guard and 44-142 ms after it (2 workers x 2 slots, 100 commands/s).  Now
** the worker forks once, the spawner, a single-threaded process that only
** starts guards: each command costs the worker a request on a socket and
** the fork is the spawner's, whose page writes are its own.
**
** The spawner serves one request at a time (a mutex on the worker side):
** the command, its environment, its kill grace and four descriptors (the
** command's stdin, stdout and stderr, and the status pipe's write end, sent
** with SCM_RIGHTS); it forks the guard, puts it in a group of its own
** before answering (so the worker's kill(-pid) always finds the group),
** and answers with its pid.  It auto-reaps its guards (SIGCHLD ignored)
** and exits at EOF on its socket: when the worker process is gone.  A
** spawner that dies or stops answering is replaced (SIGKILLed and reaped)
** by the next request; running guards do not depend on it, only on the
** lifeline.  It ignores SIGINT, SIGTERM, SIGHUP and SIGQUIT, which a
** terminal or a service manager sends to the worker's whole group: the
** worker decides how its handlers stop.  A forked copy of the worker
** process (pthread_atfork) forgets the spawner and the lifeline of its
** parent and makes its own.
**
** Between fork and exit the spawner and the guard make only system calls
** (no malloc, no stdio, no locks): they are copies of a multi-threaded
** process.  Their memory is the worker's at the spawner's fork; a command's
** strings come over the socket into the spawner's own mapping.
*/
#define _GNU_SOURCE /* pipe2, ppoll, SOCK_CLOEXEC */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h> /* struct clone_args */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
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

/* A request's fixed part; cmd and the environment follow as C strings. */
typedef struct spawn_req {
	uint32_t magic;
	uint32_t n_env;
	uint64_t bytes; /* of the strings that follow */
	int64_t kill_grace_us;
} spawn_req;

#define SPAWN_MAGIC 0x64756531u	    /* "due1" */
#define SPAWN_MAX_BYTES (64u << 20) /* a sane bound on one request */
#define SPAWN_ANSWER_MS 10000	    /* a spawner silent this long is replaced */
enum { S_SOCK = 3, S_LIFELINE = 4 };   /* the spawner's descriptors */
enum { G_STATUS = 3, G_LIFELINE = 4 }; /* the guard's, beside 0, 1, 2 */

/* ------------------------------------------------------------------ */
/* System-call helpers (fork-safe)                                     */
/* ------------------------------------------------------------------ */

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

/* ------------------------------------------------------------------ */
/* The guard (a fork of the spawner)                                   */
/* ------------------------------------------------------------------ */

static volatile sig_atomic_t g_child_ended;

static void guard_sigchld(int sig)
{
	(void)sig;
	g_child_ended = 1;
}

/* The worker process is gone: nothing writes to the lifeline any more. */
static bool worker_gone(void)
{
	struct pollfd p = {G_LIFELINE, POLLIN, 0};
	return poll(&p, 1, 0) > 0;
}

/* Reap every child that has ended; false when none is left at all. */
static bool children_left(void)
{
	int st;
	pid_t r;
	while ((r = waitpid(-1, &st, WNOHANG)) > 0)
		;
	return !(r < 0 && errno == ECHILD);
}

/*
** End the guard as the shell ended: its wait status to the worker first,
** then its exit code, or its signal.
*/
static _Noreturn void guard_relay(int status)
{
	write_full(G_STATUS, &status, sizeof(status));
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
** The shell died of a signal and may have left processes in the group:
** guard them until they are gone, kill_grace at most, then SIGKILL them
** all, the guard having first moved out of the group into `home` (the
** worker's group), so that it survives to relay the shell's status.  A
** guard whose worker died meanwhile SIGKILLs them at once.
*/
static _Noreturn void guard_leftovers(pid_t home, int sh_status,
				      int64_t kill_grace_us)
{
	int64_t waited = 0;
	pid_t pgid = getpid();

	while (children_left()) {
		bool gone = worker_gone();
		if (gone || waited >= kill_grace_us) {
			if (!gone)
				setpgid(0, home);
			kill(-pgid, SIGKILL);
			if (gone)
				_exit(137);
			break;
		}
		nap_us(10000);
		waited += 10000;
	}
	guard_relay(sh_status);
}

/*
** The worker is gone: stop the whole group, politely first.  The command
** gets kill_grace to end (the shell, and whatever it started: the guard
** is their subreaper, so they are its children once their parents die);
** then SIGKILL to the group, the guard included.
*/
static _Noreturn void guard_orphaned(int64_t kill_grace_us)
{
	int64_t waited = 0;

	kill(0, SIGTERM);
	while (waited < kill_grace_us && children_left()) {
		nap_us(10000);
		waited += 10000;
	}
	kill(0, SIGKILL); /* stragglers in the group, and the guard */
	_exit(137);
}

/*
** fds: the command's stdin, stdout and stderr, the status pipe's write
** end, the lifeline's read end.  home: the worker's process group.
*/
static _Noreturn void guard_main(pid_t home, const int fds[5],
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
	** Keep only these five: every other descriptor (the spawner's
	** socket, what the spawner got from the worker) would otherwise stay
	** open in the guard, and another command would never see EOF on its
	** stdin.  The shell gets 0, 1 and 2 only.
	*/
	if (!place_fds(fds, 5))
		_exit(126);
	prctl(PR_SET_NAME, "due-guard");
	fcntl(G_STATUS, F_SETFD, FD_CLOEXEC);
	fcntl(G_LIFELINE, F_SETFD, FD_CLOEXEC);
	set_handler(SIGCHLD, guard_sigchld);
	set_handler(SIGTERM, SIG_IGN);
	set_handler(SIGINT, SIG_IGN);
	set_handler(SIGHUP, SIG_IGN);
	set_handler(SIGPIPE, SIG_IGN);
	/* what the shell leaves behind becomes the guard's (guard_leftovers) */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	/*
	** vfork: the child shares the guard's memory until execve and only
	** makes system calls; its signal dispositions are its own (no
	** CLONE_SIGHAND), and every signal stays blocked until they are all
	** back to SIG_DFL.
	*/
	sh = vfork();
	if (sh < 0)
		guard_relay(126 << 8);
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
		/* SIGCHLD is let in only while waiting here: no lost wake-up */
		struct pollfd p = {G_LIFELINE, POLLIN, 0};
		while (!g_child_ended)
			if (ppoll(&p, 1, NULL, &none) > 0)
				guard_orphaned(kill_grace_us);
		g_child_ended = 0;
		if (waitpid(sh, &status, WNOHANG) != sh)
			continue;
		if (WIFSIGNALED(status))
			guard_leftovers(home, status, kill_grace_us);
		guard_relay(status);
	}
}

/* ------------------------------------------------------------------ */
/* The spawner (a fork of the worker)                                  */
/* ------------------------------------------------------------------ */

/* Receive a request's fixed part and its four descriptors. */
static bool recv_req(spawn_req *rq, int fds[4])
{
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct iovec iov = {rq, sizeof(*rq)};
	struct msghdr m = {0};
	struct cmsghdr *c;
	ssize_t r;

	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cbuf;
	m.msg_controllen = sizeof(cbuf);
	while ((r = recvmsg(S_SOCK, &m, MSG_CMSG_CLOEXEC)) < 0 &&
	       errno == EINTR)
		;
	if (r <= 0 || !(c = CMSG_FIRSTHDR(&m)) || c->cmsg_level != SOL_SOCKET ||
	    c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN(4 * sizeof(int)))
		return false;
	memcpy(fds, CMSG_DATA(c), 4 * sizeof(int));
	return read_full(S_SOCK, (char *)rq + r, sizeof(*rq) - (size_t)r) &&
	       rq->magic == SPAWN_MAGIC && rq->bytes <= SPAWN_MAX_BYTES &&
	       rq->n_env < rq->bytes + 1;
}

/*
** Room for n bytes of strings and m pointers in the spawner's own mapping,
** grown as needed.  NULL when it cannot be had.
*/
static unsigned char *spawner_room(size_t n, size_t m)
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
** fork() without glibc's: clone3 with no flags.  glibc's fork() in the
** spawner ran every library's pthread_atfork handlers and its malloc
** bookkeeping in each guard, each a page written (copied) for nothing:
** the guard makes only system calls.  Falls back to fork() where the
** kernel has no clone3 (before 5.3).
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

/* Start one guard for a request; its pid, or -errno. */
static int32_t spawner_serve(pid_t home, const spawn_req *rq, const int fds[4])
{
	unsigned char *buf = spawner_room(rq->bytes, rq->n_env + 1);
	char *argv[4] = {"/bin/sh", "-c", NULL, NULL}, **env;
	size_t off = 0;
	pid_t pid;

	if (!buf || !read_full(S_SOCK, buf, rq->bytes) ||
	    (rq->bytes && buf[rq->bytes - 1] != '\0'))
		_exit(1); /* out of step with the worker: it starts another */
	if (!rq->bytes)
		return -EINVAL;
	env = (char **)(buf + ((rq->bytes + 15) & ~(size_t)15));
	argv[2] = (char *)buf;
	off = strlen(argv[2]) + 1;
	for (uint32_t i = 0; i < rq->n_env; i++) {
		if (off >= rq->bytes)
			return -EINVAL;
		env[i] = (char *)buf + off;
		off += strlen(env[i]) + 1;
	}
	env[rq->n_env] = NULL;
	pid = plain_fork();
	if (pid == 0) {
		int g[5] = {fds[0], fds[1], fds[2], fds[3], S_LIFELINE};
		guard_main(home, g, argv, env, rq->kill_grace_us);
	}
	if (pid < 0)
		return -errno;
	setpgid(pid, pid); /* also done by the guard: no race with kill(-pid) */
	return pid;
}

static _Noreturn void spawner_main(int sock, int lifeline)
{
	static const int quiet[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
				    SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU,
				    SIGUSR1, SIGUSR2};
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
	for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++)
		set_handler(quiet[i], SIG_IGN);
	set_handler(SIGCHLD, SIG_IGN); /* guards are reaped by the kernel */
	for (;;) {
		spawn_req rq;
		int fds[4];
		if (!recv_req(&rq, fds))
			_exit(0); /* EOF: the worker is gone (or out of step) */
		int32_t answer = spawner_serve(home, &rq, fds);
		for (int i = 0; i < 4; i++)
			close(fds[i]);
		if (!write_full(S_SOCK, &answer, sizeof(answer)))
			_exit(0);
	}
}

/* ------------------------------------------------------------------ */
/* The worker's side                                                   */
/* ------------------------------------------------------------------ */

/*
** The spawner of this process and the lifeline, under sp_mu (any thread
** may start a command).  `forking`: the fork below is under way, so the
** pthread_atfork child handler, which runs in the new spawner (and in
** every guard, a fork of it), must leave things alone.
*/
static pthread_mutex_t sp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t sp_once = PTHREAD_ONCE_INIT;
static struct {
	pid_t pid; /* the spawner, or -1 */
	int sock;
	int lifeline[2]; /* [1] is ours only, for as long as we live */
	bool forking;
} sp = {-1, -1, {-1, -1}, false};

/* A forked copy of the worker process: its parent's spawner is not ours. */
static void sp_atfork_child(void)
{
	if (sp.forking)
		return;
	pthread_mutex_init(&sp_mu, NULL);
	due__close_fd(&sp.sock);
	due__close_fd(&sp.lifeline[0]);
	due__close_fd(&sp.lifeline[1]);
	sp.pid = -1;
}

static void sp_init(void) { pthread_atfork(NULL, NULL, sp_atfork_child); }

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
				      "cannot start the command: "
				      "pipe: %s",
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
** One request: the fixed part with the descriptors, the strings, then the
** answer.  The guard's pid, or -errno from the spawner, or 0 when the
** spawner failed us (it is then dropped).
*/
static int32_t sp_ask_locked(const spawn_req *rq, const char *strings,
			     const int fds[4])
{
	char cbuf[CMSG_SPACE(4 * sizeof(int))] = {0};
	struct iovec iov = {(void *)rq, sizeof(*rq)};
	struct msghdr m = {0};
	struct cmsghdr *c;
	struct pollfd p = {sp.sock, POLLIN, 0};
	int32_t answer = 0;
	ssize_t w;

	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cbuf;
	m.msg_controllen = sizeof(cbuf);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(4 * sizeof(int));
	memcpy(CMSG_DATA(c), fds, 4 * sizeof(int));
	while ((w = sendmsg(sp.sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (w <= 0 ||
	    !write_full(sp.sock, (const char *)rq + w,
			sizeof(*rq) - (size_t)w) ||
	    !write_full(sp.sock, strings, rq->bytes))
		goto failed;
	while (poll(&p, 1, SPAWN_ANSWER_MS) < 0 && errno == EINTR)
		;
	if (!(p.revents & POLLIN) ||
	    !read_full(sp.sock, &answer, sizeof(answer)))
		goto failed;
	return answer ? answer : -EPROTO;
failed:
	sp_drop_locked();
	return 0;
}

/* Start the guard for the command's four descriptors; its pid or a code. */
static int spawn_guard(const int fds[4], const char *cmd, char **env,
		       int64_t kill_grace_us, pid_t *pid)
{
	spawn_req rq = {.magic = SPAWN_MAGIC, .kill_grace_us = kill_grace_us};
	size_t len;
	char *strings = pack_strings(cmd, env, &rq.n_env, &len);
	int32_t answer = 0;
	int rc = 0;

	if (!strings)
		return due__error_set(DUE_ENOMEM, "out of memory");
	rq.bytes = len;
	pthread_once(&sp_once, sp_init);
	pthread_mutex_lock(&sp_mu);
	/* a spawner that died since the last command: one more try */
	for (int try = 0; try < 2 && answer == 0 && rc == 0; try++)
		if (sp.pid > 0 || (rc = sp_start_locked()) == 0)
			answer = sp_ask_locked(&rq, strings, fds);
	pthread_mutex_unlock(&sp_mu);
	free(strings);
	if (rc < 0)
		return rc;
	if (answer <= 0)
		return due__error_set(DUE_ERROR, "cannot start the command: %s",
				      answer ? strerror(-answer)
					     : "the spawner process does not "
					       "answer");
	*pid = answer;
	return 0;
}

/*
** Start the guard (which runs /bin/sh -c cmd) with pipes on the command's
** 0, 1, 2 and a status pipe.  0 or a due code (message set).
*/
int due__spawn(due__child *c, const char *cmd, char **env,
	       int64_t kill_grace_us)
{
	int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1},
	    pst[2] = {-1, -1};
	int rc = 0;

	*c = DUE__CHILD_NONE;
	if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) ||
	    pipe2(perr, O_CLOEXEC) || pipe2(pst, O_CLOEXEC)) {
		rc = due__error_set(DUE_ERROR, "pipe: %s", strerror(errno));
	} else {
		int fds[4] = {pin[0], pout[1], perr[1], pst[1]};
		rc = spawn_guard(fds, cmd, env, kill_grace_us, &c->pid);
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
** at the guard's exit.  EOF with no status: the guard was killed (SIGKILL
** to the group at kill_by, or from outside): the command's end as a
** SIGKILL, as a wait on the guard would have said.
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
	/* EOF (or a broken pipe: the same end) */
	if (c->status == -1)
		c->status = SIGKILL;
	due__close_fd(&c->st);
	c->ended = true;
	return true;
}

void due__child_wait(due__child *c)
{
	while (!due__child_ended(c)) {
		struct pollfd p = {c->st, POLLIN, 0};
		poll(&p, 1, -1);
	}
}
