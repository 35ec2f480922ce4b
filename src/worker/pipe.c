/*
** pipe.c - long-lived handler processes over a JSON line protocol
** (due_pipe_handler, `due work --pipe CMD`; the protocol is in
** docs/INTERFACE.md).
**
** Why.  `due work --exec` starts one process per task: correct, isolated,
** and bounded by process creation (about 2,000 tasks/s on a laptop, far
** less for an interpreter that imports its libraries at start).  A pipe
** handler starts the command once per handler slot and keeps it: due
** writes one JSON object per line to its stdin, the process answers one
** line on its stdout, and the next task reuses the same process.
**
** Slots.  Each handler slot is one pool thread (or the claiming thread in
** inline mode), and runs one task at a time, so a due_pipe keeps one
** `proc` per thread that calls it, found by pthread_self().  A process is
** only ever used by the thread that started it, so no lock is held while
** it works; `mu` guards only the list of procs.  Each process runs under a
** guard in its own process group (spawn.c), so it never outlives the worker
** process, even after kill -9.
**
** A try.  Before the request line is written, stdout must be empty: output
** that arrives while no task is outstanding (a second answer, a line
** written after the answer) is a protocol violation, and the process is
** replaced before the task is sent, so such a line is never taken as a
** later task's answer (issue 36).  The request is written, non-blocking,
** while stdout and stderr are read (a process that answers before reading
** everything, or floods stderr, cannot wedge the slot).  The first
** complete stdout line is the answer; it must be a JSON object naming the
** same id and attempt, with a boolean "ok".  Every 20 ms the loop looks at
** the job's lease flag: when the keeper reports the lease lost, a cancel
** requested, the time limit passed or a shutdown, the process group gets
** SIGTERM, then SIGKILL after kill_grace; the try fails and the next task
** of the slot gets a fresh process at once.
**
** stderr is the log: each whole line is logged with the task id, cut at
** LOG_LINE_MAX bytes (the cut says how much was left out; a line is never
** logged in pieces).  Each process may log LOG_LINES lines and LOG_BYTES
** bytes per second; what is over is read and dropped, and the next line
** logged, the end of the try or the end of the process says how many
** lines (and bytes) were dropped: a handler that floods stderr costs the
** log about LOG_BYTES a second, not its flood (issue 36: 300 MB in 6 s).
**
** Failures of the process itself (it exits, writes a line that is not a
** valid answer, or writes while no task is outstanding) fail the try or
** replace the process with a log line that says which, and the slot
** restarts the command after restart_backoff, doubled while it keeps
** failing (capped at 30 s) and reset by the next valid answer: a command
** that crashes at start does not become a fork loop.  The task that waits
** for the restart keeps its lease (the keeper renews it) and gives up if
** the lease is lost meanwhile.
**
** The stop.  When the worker stops, each pool thread ends its slot's
** process as it exits (a thread-specific destructor, slot_exit): EOF on
** stdin, which a well-behaved process takes as the end; SIGTERM to its
** group after STOP_EOF_US, or at once on a forced stop (a second stop
** request); SIGKILL after kill_grace.  The same stop as a command handler's,
** after the grace the worker gave running tries; stderr is still logged
** meanwhile.  due_pipe_free() ends whatever is left the same way (the
** claimer's process in inline mode), all processes at once.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
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

#define BACKOFF_MAX_US 30000000
#define ERR_TAIL 2048 /* stderr kept for the error of a dead process */
#define SHOW_LINE 200 /* bytes of a malformed answer quoted in the error */
#define TICK_MS 20    /* how often the lease flag is looked at */
#define STOP_EOF_US 2000000  /* a stopping process's time to exit on EOF */
#define READ_BURST (1 << 20) /* stderr bytes read per turn of a loop */
/* stderr in the log: per line, and per process and second */
#define LOG_LINE_MAX 1000
#define LOG_LINES 1000
#define LOG_BYTES (256 * 1024)
#define LOG_WINDOW_US 1000000

/* stderr on its way to the log: the current line and the rate window. */
typedef struct errlog {
	char line[LOG_LINE_MAX];
	size_t len;	     /* bytes of the current line kept */
	size_t over;	     /* bytes of it past LOG_LINE_MAX */
	int64_t window;	     /* start of the rate window, monotonic us */
	long lines, bytes;   /* logged in this window */
	long dropped;	     /* lines dropped since the last notice */
	long long dropped_b; /* their bytes */
} errlog;

typedef struct proc {
	pthread_t owner; /* the slot's thread: the only one that uses it */
	struct due_pipe *pipe;
	due__child c;  /* c.pid <= 0: no process running */
	due__buf out;  /* stdout bytes not yet taken as an answer */
	due__buf tail; /* stderr of the current try, its last bytes */
	errlog log;
	int64_t backoff_us, restart_at; /* restart pacing, monotonic us */
	due_worker *w; /* the worker of its pool thread (slot_exit) */
	struct proc *next;
} proc;

struct due_pipe {
	due_pipe_opts o;
	char *command;
	char **env;	    /* environ without the worker's own DUE_* */
	pthread_mutex_t mu; /* guards `procs` (the list, not the procs) */
	proc *procs;
	pthread_key_t key; /* a pool thread's proc, ended as it exits */
	bool has_key;
};

/* How a try on a process ended. */
enum { X_ANSWER, X_DIED, X_STOPPED };

/* How proc_end stops a process. */
enum { END_TERM, END_EOF };

static void slot_exit(void *arg);

static void nap_ms(int ms)
{
	struct timespec ts = {0, ms * 1000000L};
	nanosleep(&ts, NULL);
}

/* environ without DUE_* (a worker started by a handler) but DUE_DB. */
static char **copy_env(void)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	if (!(env = calloc(n + 1, sizeof(*env))))
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "DUE_", 4) != 0 ||
		    strncmp(environ[i], "DUE_DB=", 7) == 0)
			env[k++] = environ[i];
	return env;
}

int due_pipe_new(due_pipe **out, const due_pipe_opts *opts)
{
	due_pipe *p;

	*out = NULL;
	if (!opts || !opts->command || !*opts->command)
		return due__error_set(DUE_EINVAL,
				      "pipe handler without a command");
	if (!(p = calloc(1, sizeof(*p))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	p->o = *opts;
	if (p->o.kill_grace_us < 0)
		p->o.kill_grace_us = 0;
	if (p->o.restart_backoff_us <= 0)
		p->o.restart_backoff_us = 100000;
	if (p->o.max_result == 0)
		p->o.max_result = 1u << 20;
	p->command = strdup(opts->command);
	p->env = copy_env();
	p->has_key = pthread_key_create(&p->key, slot_exit) == 0;
	if (!p->command || !p->env || !p->has_key ||
	    pthread_mutex_init(&p->mu, NULL) != 0) {
		if (p->has_key)
			pthread_key_delete(p->key);
		free(p->command);
		free(p->env);
		free(p);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	p->o.command = p->command;
	*out = p;
	return 0;
}

/* The calling thread's proc, created on first use.  NULL on ENOMEM. */
static proc *slot_proc(due_pipe *p)
{
	pthread_t self = pthread_self();
	proc *pr;

	pthread_mutex_lock(&p->mu);
	for (pr = p->procs; pr; pr = pr->next)
		if (pthread_equal(pr->owner, self))
			break;
	if (!pr && (pr = calloc(1, sizeof(*pr)))) {
		pr->owner = self;
		pr->pipe = p;
		pr->c = DUE__CHILD_NONE;
		/* JSON may escape each byte as \uXXXX: room for that */
		pr->out.limit = p->o.max_result * 6 + 65536;
		pr->tail = (due__buf){.limit = ERR_TAIL, .tail = true};
		pr->next = p->procs;
		p->procs = pr;
	}
	pthread_mutex_unlock(&p->mu);
	return pr;
}

/* ------------------------------------------------------------------ */
/* stderr to the log                                                   */
/* ------------------------------------------------------------------ */

/*
** Log a + b (a line of the process's stderr and its cut, or a notice) with
** the id of the task at hand, else the process's pid.  Without a worker
** (due_pipe_free) nothing is logged.
*/
static void plog(due_worker *w, const due_job *job, const proc *pr,
		 const char *a, const char *b)
{
	if (!w)
		return;
	if (job)
		due__wlog(w, 1, "task %lld: %s%s", (long long)job->task.id, a,
			  b);
	else
		due__wlog(w, 1, "pipe process %d: %s%s", (int)pr->c.pid, a, b);
}

/* Say how many lines were dropped, if any. */
static void log_dropped(due_worker *w, const due_job *job, proc *pr)
{
	char n[160];
	errlog *l = &pr->log;

	if (!l->dropped)
		return;
	snprintf(n, sizeof(n),
		 "%ld stderr line%s (%lld bytes) not logged: a pipe process "
		 "may log %d lines or %d KiB a second",
		 l->dropped, l->dropped == 1 ? "" : "s", l->dropped_b,
		 LOG_LINES, LOG_BYTES / 1024);
	plog(w, job, pr, n, "");
	l->dropped = 0;
	l->dropped_b = 0;
}

/* The current line is complete: log it, or count it as dropped. */
static void line_end(due_worker *w, const due_job *job, proc *pr)
{
	errlog *l = &pr->log;
	int64_t now = due__mono_us();
	char cut[64] = "";

	if (now - l->window >= LOG_WINDOW_US) {
		log_dropped(w, job, pr);
		l->window = now;
		l->lines = l->bytes = 0;
	}
	if (l->lines >= LOG_LINES || l->bytes + (long)l->len > LOG_BYTES) {
		l->dropped++;
		l->dropped_b += (long long)(l->len + l->over + 1);
	} else {
		l->lines++;
		l->bytes += (long)l->len;
		if (l->over)
			snprintf(cut, sizeof(cut), " [... %zu more bytes]",
				 l->over);
		/* one line whatever it holds: due__wlog makes \r, \t spaces */
		char text[LOG_LINE_MAX + 1];
		size_t n = l->len;
		if (n && l->line[n - 1] == '\r')
			n--;
		memcpy(text, l->line, n);
		text[n] = '\0';
		plog(w, job, pr, text, cut);
	}
	l->len = l->over = 0;
}

/* Take n bytes of stderr: whole lines to the log, the tail kept. */
static void take_stderr(due_worker *w, const due_job *job, proc *pr,
			const char *d, size_t n)
{
	errlog *l = &pr->log;

	due__buf_add(&pr->tail, (const unsigned char *)d, n);
	while (n > 0) {
		const char *nl = memchr(d, '\n', n);
		size_t k = nl ? (size_t)(nl - d) : n;
		size_t room = LOG_LINE_MAX - l->len;
		size_t keep = k < room ? k : room;
		memcpy(l->line + l->len, d, keep);
		l->len += keep;
		l->over += k - keep;
		if (!nl)
			return;
		line_end(w, job, pr);
		d += k + 1;
		n -= k + 1;
	}
}

/*
** Read what stderr has now (at most READ_BURST bytes, so that a flood
** cannot hold the loop) and log it.  At EOF the last line, even without
** its newline, is complete.
*/
static void read_stderr(due_worker *w, const due_job *job, proc *pr)
{
	char chunk[16384];
	size_t total = 0;

	while (pr->c.err >= 0 && total < READ_BURST) {
		ssize_t r = read(pr->c.err, chunk, sizeof(chunk));
		if (r > 0) {
			take_stderr(w, job, pr, chunk, (size_t)r);
			total += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		due__close_fd(&pr->c.err); /* EOF */
		if (pr->log.len || pr->log.over)
			line_end(w, job, pr);
	}
}

/* ------------------------------------------------------------------ */
/* Processes                                                           */
/* ------------------------------------------------------------------ */

/* When to SIGKILL after a SIGTERM sent at term_at: kill grace, or kill_by. */
static bool kill_due(const due_pipe *p, const due_job *job, int64_t term_at,
		     int64_t now)
{
	int64_t kill_by = job ? due__job_kill_by(job) : 0;
	return now - term_at >= p->o.kill_grace_us ||
	       (kill_by && now >= kill_by);
}

/* Whether the worker asked twice to stop (a forced stop). */
static bool forced(const due_worker *w)
{
	return w && atomic_load(&((due_worker *)w)->force);
}

/* After the guard ended: our ends closed, the slot ready for a new one. */
static void proc_reset(due_worker *w, const due_job *job, proc *pr)
{
	/* what the command started may live on in the group, which exists
	   as long as it does (so the id names no other group) */
	if (pr->c.pid > 0)
		kill(-pr->c.pid, SIGKILL);
	read_stderr(w, job, pr);
	if (pr->log.len || pr->log.over)
		line_end(w, job, pr);
	log_dropped(w, job, pr);
	due__close_fd(&pr->c.in);
	due__close_fd(&pr->c.out);
	due__close_fd(&pr->c.err);
	due__close_fd(&pr->c.st);
	pr->c.pid = -1;
	pr->out.len = 0;
	pr->out.dropped = 0;
}

/*
** End the slot's process and reap it: SIGTERM to its group at once
** (END_TERM), or EOF on stdin first and SIGTERM after STOP_EOF_US or at a
** forced stop (END_EOF); SIGKILL after kill_grace (or the job's kill_by).
** stderr is logged meanwhile.  Returns the guard's wait status.
*/
static int proc_end(due_worker *w, due_job *job, proc *pr, int how)
{
	int64_t start = due__mono_us(), term_at = 0;
	bool killed = false;
	int status;

	due__close_fd(&pr->c.in);
	while (!due__child_ended(&pr->c)) {
		int64_t now = due__mono_us();
		if (!term_at && (how == END_TERM || forced(w) ||
				 now - start >= STOP_EOF_US)) {
			kill(-pr->c.pid, SIGTERM);
			term_at = now;
		}
		if (term_at && !killed &&
		    kill_due(pr->pipe, job, term_at, now)) {
			kill(-pr->c.pid, SIGKILL);
			killed = true;
		}
		struct pollfd pf[2] = {{pr->c.st, POLLIN, 0},
				       {pr->c.err, POLLIN, 0}};
		poll(pf, pr->c.err >= 0 ? 2 : 1, 10);
		read_stderr(w, job, pr);
	}
	status = pr->c.status;
	proc_reset(w, job, pr);
	return status;
}

/* The process failed (died, or broke the protocol): pace its restart. */
static void proc_failed(due_pipe *p, proc *pr)
{
	int64_t b =
	    pr->backoff_us ? pr->backoff_us * 2 : p->o.restart_backoff_us;
	pr->backoff_us = b > BACKOFF_MAX_US ? BACKOFF_MAX_US : b;
	pr->restart_at = due__mono_us() + pr->backoff_us;
}

/* The job's error for a stopped try: "stopped: lease lost". */
static int fail_stopped(due_job *job, const char *what)
{
	char msg[200];
	snprintf(msg, sizeof(msg), "stopped%s: %s", what,
		 due__stop_reason_name(due__job_stop_why(job)));
	due_job_set_error(job, msg);
	return 1;
}

/*
** Make sure the slot has a running process: wait out a restart backoff
** (giving up if the lease is lost meanwhile), then start one.  0, or 1 with
** the job's error set.
*/
static int proc_ready(due_pipe *p, due_job *job, proc *pr)
{
	char msg[600];

	if (pr->c.pid > 0 && due__child_ended(&pr->c)) {
		/* it died while idle: no task of its own to fail */
		snprintf(msg, sizeof(msg),
			 "pipe process %d ended while idle (%s %d); "
			 "restarting it",
			 (int)pr->c.pid,
			 WIFSIGNALED(pr->c.status) ? "killed by signal"
						   : "exit status",
			 WIFSIGNALED(pr->c.status) ? WTERMSIG(pr->c.status)
						   : WEXITSTATUS(pr->c.status));
		plog(job->w, job, pr, msg, "");
		proc_reset(job->w, job, pr);
		proc_failed(p, pr);
	}
	if (pr->c.pid > 0)
		return 0;
	while (due__mono_us() < pr->restart_at) {
		if (!due__job_lease_check(job))
			return fail_stopped(
			    job, " while the pipe process was restarting");
		nap_ms(TICK_MS);
	}
	if (due__spawn(&pr->c, p->command, p->env, p->o.kill_grace_us,
		       due__job_guard_kill_at(job)) < 0) {
		snprintf(msg, sizeof(msg), "pipe process: %s",
			 due_error_last());
		due_job_set_error(job, msg);
		proc_failed(p, pr);
		return 1;
	}
	pr->log = (errlog){.window = due__mono_us()};
	due__wlog(job->w, 2, "pipe process %d started: %s", (int)pr->c.pid,
		  p->command);
	return 0;
}

/*
** Output while no task is outstanding: what stdout holds before the
** request is written (left after the last answer, or written since) is a
** protocol violation.  The process is replaced (SIGTERM to its group,
** SIGKILL after the kill grace) and its line never read as an answer.
** true when it was.
*/
static bool replaced_for_stray(due_pipe *p, due_job *job, proc *pr)
{
	char what[SHOW_LINE + 160];
	size_t n;

	if (pr->c.out >= 0)
		due__drain_fd(&pr->c.out, &pr->out);
	if (pr->out.len == 0 && !pr->out.dropped)
		return false;
	n = pr->out.len > SHOW_LINE ? SHOW_LINE : pr->out.len;
	while (n && pr->out.p[n - 1] == '\n')
		n--;
	snprintf(what, sizeof(what),
		 "pipe process %d wrote to stdout while no task was "
		 "outstanding (a protocol violation; %zu bytes: %.*s%s); "
		 "replacing it",
		 (int)pr->c.pid, pr->out.len + pr->out.dropped, (int)n,
		 (const char *)pr->out.p,
		 pr->out.len > SHOW_LINE ? "[...]" : "");
	plog(job->w, job, pr, what, "");
	proc_end(job->w, job, pr, END_TERM);
	proc_failed(p, pr);
	return true;
}

/* ------------------------------------------------------------------ */
/* The request and the answer                                          */
/* ------------------------------------------------------------------ */

/*
** Field `name` of n bytes at d: a JSON string when it is UTF-8, else its
** bytes in base64 under `<name>_b64` (a payload may be any bytes; a text
** field that a producer wrote past the library's checks is shown so, as
** docs/INTERFACE.md says of every stored value, not refused).
*/
static int add_bytes(json_t *o, const char *name, const void *d, size_t n)
{
	json_t *s = json_stringn(d ? (const char *)d : "", n);
	char key[32], *b;

	if (s)
		return json_object_set_new(o, name, s);
	if (!(b = due__base64(d, n)))
		return -1;
	snprintf(key, sizeof(key), "%s_b64", name);
	int rc = json_object_set_new(o, key, json_string(b));
	free(b);
	return rc;
}

/* The request line for a task, '\n'-terminated, malloc'd; NULL on ENOMEM. */
static char *request_line(const due_task *t, const char *parents, size_t *len)
{
	char due[40], key[32], *line = NULL;
	json_t *o = json_object();

	due_time_format(due, sizeof(due), t->due_at);
	snprintf(key, sizeof(key), "task-%lld", (long long)t->id);
	if (o && json_object_set_new(o, "id", json_integer(t->id)) == 0 &&
	    add_bytes(o, "kind", t->kind, strlen(t->kind)) == 0 &&
	    json_object_set_new(o, "attempt", json_integer(t->attempt)) == 0 &&
	    json_object_set_new(o, "due_at", json_string(due)) == 0 &&
	    json_object_set_new(o, "idempotency_key", json_string(key)) == 0 &&
	    json_object_set_new(o, "priority", json_integer(t->priority)) ==
		0 &&
	    (!t->group ||
	     add_bytes(o, "group", t->group, strlen(t->group)) == 0) &&
	    add_bytes(o, "payload", t->payload, t->payload_len) == 0 &&
	    (!parents ||
	     json_object_set_new(o, "parent_results",
				 json_loads(parents, 0, NULL)) == 0))
		line = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (line) {
		*len = strlen(line);
		line[(*len)++] = '\n'; /* replaces the NUL: sent by length */
	}
	return line;
}

typedef struct xfer {
	const char *req;
	size_t len, off;
	int64_t term_at; /* when the lease loss sent SIGTERM, 0 before */
	size_t line_len; /* the answer: pr->out.p[0..line_len) */
} xfer;

/* Write more of the request; a closed stdin is left to the read side. */
static void feed(proc *pr, xfer *x)
{
	while (pr->c.in >= 0 && x->off < x->len) {
		ssize_t w = write(pr->c.in, x->req + x->off, x->len - x->off);
		if (w > 0)
			x->off += (size_t)w;
		else if (w < 0 && errno == EINTR)
			continue;
		else if (w < 0 && errno == EAGAIN)
			return;
		else
			due__close_fd(&pr->c.in); /* EPIPE: it will die */
	}
}

/* A complete line in stdout: its length (without '\n'), else -1. */
static long answer_ready(proc *pr)
{
	unsigned char *nl =
	    pr->out.len ? memchr(pr->out.p, '\n', pr->out.len) : NULL;
	return nl ? (long)(nl - pr->out.p) : -1;
}

/* One poll round: move bytes.  Returns an X_* when the try is over, else -1. */
static int step(due_pipe *p, due_job *job, proc *pr, xfer *x)
{
	struct pollfd pf[4];
	nfds_t n = 0;
	long ll;

	/* the guard kills the process at this try's lease clock, even if
	   the worker cannot (spawn.c, "The lease clock"); told before the
	   first round's wait, and again when a renewal moves it */
	due__child_kill_at(&pr->c, due__job_guard_kill_at(job));
	if (pr->c.in >= 0 && x->off < x->len)
		pf[n++] = (struct pollfd){pr->c.in, POLLOUT, 0};
	if (pr->c.out >= 0)
		pf[n++] = (struct pollfd){pr->c.out, POLLIN, 0};
	if (pr->c.err >= 0)
		pf[n++] = (struct pollfd){pr->c.err, POLLIN, 0};
	if (pr->c.st >= 0)
		pf[n++] = (struct pollfd){pr->c.st, POLLIN, 0};
	if (n == 0 || (poll(pf, n, TICK_MS) < 0 && errno != EINTR))
		nap_ms(TICK_MS);
	feed(pr, x);
	if (pr->c.out >= 0)
		due__drain_fd(&pr->c.out, &pr->out);
	read_stderr(job->w, job, pr);
	if (x->term_at == 0 && (ll = answer_ready(pr)) >= 0) {
		x->line_len = (size_t)ll;
		return X_ANSWER;
	}
	if (x->term_at == 0 && pr->out.dropped)
		return X_ANSWER; /* an over-long line: malformed */
	if (pr->c.out < 0 || due__child_ended(&pr->c))
		return x->term_at ? X_STOPPED : X_DIED;
	if (!due__job_lease_check(job)) {
		/* TERM, then KILL after the kill grace, or sooner when the
		   lease clock says the store could hand the task on */
		int64_t now = due__mono_us();
		if (x->term_at == 0) {
			kill(-pr->c.pid, SIGTERM);
			x->term_at = now;
		}
		if (kill_due(p, job, x->term_at, now))
			kill(-pr->c.pid, SIGKILL);
	}
	return -1;
}

/* The death of the process as the try's error: status and stderr tail. */
static int fail_died(due_pipe *p, due_job *job, proc *pr, int status)
{
	char msg[ERR_TAIL + 300], how[80];
	size_t n = pr->tail.len;

	if (WIFSIGNALED(status))
		snprintf(how, sizeof(how), "was killed by signal %d",
			 WTERMSIG(status));
	else
		snprintf(how, sizeof(how), "exited with status %d",
			 WEXITSTATUS(status));
	while (n && (pr->tail.p[n - 1] == '\n' || pr->tail.p[n - 1] == '\r'))
		n--;
	snprintf(msg, sizeof(msg), "pipe process %s before answering%s%.*s",
		 how, n ? ": " : "", (int)n, n ? (const char *)pr->tail.p : "");
	due_job_set_error(job, msg);
	due__wlog(job->w, 1, "task %lld: %s; restarting it",
		  (long long)job->task.id, msg);
	proc_failed(p, pr);
	return 1;
}

/* A line that is not a valid answer: name what is wrong, quote the line. */
static int fail_malformed(due_pipe *p, due_job *job, proc *pr, const char *why,
			  size_t len)
{
	char msg[SHOW_LINE + 400];

	snprintf(msg, sizeof(msg),
		 "pipe process wrote a malformed line (%s): %.*s%s", why,
		 (int)(len > SHOW_LINE ? SHOW_LINE : len),
		 pr->out.p ? (const char *)pr->out.p : "",
		 len > SHOW_LINE ? "[...]" : "");
	due_job_set_error(job, msg);
	due__wlog(job->w, 1, "task %lld: %s; restarting it",
		  (long long)job->task.id, msg);
	proc_end(job->w, job, pr, END_TERM);
	proc_failed(p, pr);
	return 1;
}

/* An integer field equal to `want`, else the reason it is not. */
static const char *check_int(json_t *o, const char *name, long long want,
			     char *why, size_t cap)
{
	json_t *v = json_object_get(o, name);
	if (!json_is_integer(v))
		snprintf(why, cap, "'%s' is missing or not an integer", name);
	else if (json_integer_value(v) != want)
		snprintf(why, cap, "'%s' is %lld, expected %lld", name,
			 (long long)json_integer_value(v), want);
	else
		return NULL;
	return why;
}

/* Apply a parsed answer to the job.  NULL, or what is wrong with it. */
static const char *apply(due_pipe *p, due_job *job, json_t *a, int *rc,
			 char *why, size_t cap)
{
	json_t *ok = json_object_get(a, "ok"), *v;
	const due_task *t = &job->task;

	if (check_int(a, "id", t->id, why, cap) ||
	    check_int(a, "attempt", t->attempt, why, cap))
		return why;
	if (!json_is_boolean(ok))
		return "'ok' is missing or not true/false";
	if (json_is_true(ok)) {
		v = json_object_get(a, "result");
		if (v && !json_is_null(v) && !json_is_string(v))
			return "'result' is not a string";
		size_t n = json_is_string(v) ? json_string_length(v) : 0;
		due_job_set_result(job, n ? json_string_value(v) : "",
				   n > p->o.max_result ? p->o.max_result : n);
		*rc = 0;
		return NULL;
	}
	v = json_object_get(a, "error");
	if (v && !json_is_null(v) && !json_is_string(v))
		return "'error' is not a string";
	due_job_set_error(job, json_is_string(v) && json_string_length(v)
				   ? json_string_value(v)
				   : "handler answered ok: false");
	*rc = 1;
	return NULL;
}

/*
** Judge the answer line; consume it.  The handler's return code.  What
** stdout holds after it was written while no task is outstanding: the
** next try finds it there (replaced_for_stray).
*/
static int take_answer(due_pipe *p, due_job *job, proc *pr, size_t len)
{
	char why[200];
	const char *bad = NULL;
	json_error_t je;
	json_t *a;
	int rc = 1;

	if (pr->out.dropped) {
		snprintf(why, sizeof(why), "longer than %zu bytes",
			 pr->out.limit);
		return fail_malformed(p, job, pr, why, pr->out.len);
	}
	a = json_loadb((const char *)pr->out.p, len, JSON_REJECT_DUPLICATES,
		       &je);
	if (!a) {
		snprintf(why, sizeof(why), "not JSON: %s", je.text);
		bad = why;
	} else if (!json_is_object(a)) {
		bad = "not a JSON object";
	} else {
		bad = apply(p, job, a, &rc, why, sizeof(why));
	}
	json_decref(a);
	if (bad)
		return fail_malformed(p, job, pr, bad, len);
	memmove(pr->out.p, pr->out.p + len + 1, pr->out.len - len - 1);
	pr->out.len -= len + 1;
	pr->backoff_us = 0; /* a valid answer: the process works */
	return rc;
}

/* A pool thread's proc is ended by the thread as it exits (slot_exit). */
static void note_slot(due_pipe *p, due_job *job, proc *pr)
{
	due_worker *w = job->w;
	bool claimer = w->o.mode == DUE_MODE_INLINE && job->pool == w->pools[0];

	/* the claimer thread (inline mode) is the caller's, and may outlive
	   its worker: due_pipe_free ends its process */
	if (!claimer && !pr->w) {
		pr->w = w;
		pthread_setspecific(p->key, pr);
	}
}

int due_pipe_handler(due_job *job, void *pipe)
{
	due_pipe *p = pipe;
	xfer x = {0};
	proc *pr;
	int r, rc;

	if (!p || !(pr = slot_proc(p))) {
		due_job_set_error(job, p ? "out of memory"
					 : "pipe handler without a due_pipe");
		return 1;
	}
	note_slot(p, job, pr);
	if ((rc = proc_ready(p, job, pr)))
		return rc;
	if (replaced_for_stray(p, job, pr) && (rc = proc_ready(p, job, pr)))
		return rc;
	if (!(x.req = request_line(&job->task, due_job_parent_results(job),
				   &x.len))) {
		due_job_set_error(job, "out of memory");
		return 1;
	}
	pr->tail.len = pr->tail.dropped = 0;
	while ((r = step(p, job, pr, &x)) < 0)
		;
	free((char *)x.req);
	if (r == X_ANSWER) {
		/* between tasks the process has no lease to outlive */
		due__child_kill_at(&pr->c, 0);
		rc = take_answer(p, job, pr, x.line_len);
		log_dropped(job->w, job, pr);
		return rc;
	}
	int status = proc_end(job->w, job, pr, END_TERM);
	/* (a process its guard killed at the lease clock, while this one
	   could not act, died of the stop it would have made) */
	if (r == X_STOPPED || !due__job_lease_check(job))
		return fail_stopped(job, "");
	return fail_died(p, job, pr, status);
}

/*
** The slot's thread is exiting (its worker stops, after the grace): end
** its process as a command handler would be stopped, EOF first.
*/
static void slot_exit(void *arg)
{
	proc *pr = arg;

	if (pr->c.pid > 0)
		proc_end(pr->w, NULL, pr, END_EOF);
	pr->w = NULL;
}

/*
** Free the pipe after its worker has stopped.  The processes still
** running (the pool threads end theirs as they exit) get EOF on their
** stdin, all at once; SIGTERM STOP_EOF_US later; SIGKILL kill_grace after
** that.  Each is reaped.
*/
void due_pipe_free(due_pipe *p)
{
	int64_t start, term_at = 0;
	bool left = true;

	if (!p)
		return;
	for (proc *pr = p->procs; pr; pr = pr->next)
		due__close_fd(&pr->c.in);
	start = due__mono_us();
	while (left) {
		int64_t now = due__mono_us();
		bool term = !term_at && now - start >= STOP_EOF_US;
		bool kill9 = term_at && kill_due(p, NULL, term_at, now);
		left = false;
		for (proc *pr = p->procs; pr; pr = pr->next) {
			if (pr->c.pid <= 0)
				continue;
			if (due__child_ended(&pr->c)) {
				proc_reset(NULL, NULL, pr);
				continue;
			}
			if (term)
				kill(-pr->c.pid, SIGTERM);
			if (kill9)
				kill(-pr->c.pid, SIGKILL);
			read_stderr(NULL, NULL, pr); /* never let it block */
			left = true;
		}
		if (term)
			term_at = now;
		if (left)
			nap_ms(10);
	}
	for (proc *pr = p->procs, *next; pr; pr = next) {
		next = pr->next;
		free(pr->out.p);
		free(pr->tail.p);
		free(pr);
	}
	pthread_key_delete(p->key);
	pthread_mutex_destroy(&p->mu);
	free(p->command);
	free(p->env);
	free(p);
}
