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
** only ever used by the thread that started it, which matters twice: no
** lock is held while it works, and the guard process that exec.c starts
** for it (due__spawn) is armed with the parent-death signal of that very
** thread, so the process group ends when the slot's thread ends or the
** worker dies, even by SIGKILL.  `mu` guards only the list of procs.
**
** A try.  The request line is written, non-blocking, while stdout and
** stderr are read (a process that answers before reading everything, or
** floods stderr, cannot wedge the slot).  The first complete stdout line is
** the answer; it must be a JSON object naming the same id and attempt, with
** a boolean "ok".  stderr is logged line by line with the task id.  Every
** 20 ms the loop looks at the job's lease flag: when the keeper reports the
** lease lost, a cancel requested or the time limit passed, the process
** group gets SIGTERM, then SIGKILL after kill_grace; the try fails and the
** next task of the slot gets a fresh process at once.
**
** Failures of the process itself (it exits, or writes a line that is not a
** valid answer) fail the try with an error that says which, and the slot
** restarts the command after restart_backoff, doubled while it keeps
** failing (capped at 30 s) and reset by the next valid answer: a command
** that crashes at start does not become a fork loop.  The task that waits
** for the restart keeps its lease (the keeper renews it) and gives up if
** the lease is lost meanwhile.
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
#define ERR_LINE 4096 /* a longer stderr line is logged in pieces */
#define SHOW_LINE 200 /* bytes of a malformed answer quoted in the error */
#define TICK_MS 20    /* how often the lease flag is looked at */
#define FREE_WAIT_US 2000000 /* due_pipe_free: exit on EOF before SIGTERM */

typedef struct proc {
	pthread_t owner; /* the slot's thread: the only one that uses it */
	due__child c;	 /* c.pid <= 0: no process running */
	due__buf out;	 /* stdout bytes not yet taken as an answer */
	due__buf err;	 /* stderr: the current partial line */
	due__buf tail;	 /* stderr of the current try, its last bytes */
	int64_t backoff_us, restart_at; /* restart pacing, monotonic us */
	struct proc *next;
} proc;

struct due_pipe {
	due_pipe_opts o;
	char *command;
	char **env;	    /* environ without the worker's own DUE_* */
	pthread_mutex_t mu; /* guards `procs` (the list, not the procs) */
	proc *procs;
};

/* How a try on a process ended. */
enum { X_ANSWER, X_DIED, X_STOPPED };

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
	if (!p->command || !p->env || pthread_mutex_init(&p->mu, NULL) != 0) {
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
		pr->c = (due__child){-1, -1, -1, -1};
		/* JSON may escape each byte as \uXXXX: room for that */
		pr->out.limit = p->o.max_result * 6 + 65536;
		pr->err.limit = 65536;
		pr->tail = (due__buf){.limit = ERR_TAIL, .tail = true};
		pr->next = p->procs;
		p->procs = pr;
	}
	pthread_mutex_unlock(&p->mu);
	return pr;
}

/* Log each complete stderr line (and an over-long partial one). */
static void log_stderr(due_job *job, proc *pr, bool flush)
{
	due__buf *e = &pr->err;
	size_t start = 0;

	for (size_t i = 0; i < e->len; i++)
		if (e->p[i] == '\n') {
			due__wlog(job->w, 1, "task %lld: %.*s",
				  (long long)job->task.id, (int)(i - start),
				  (const char *)e->p + start);
			start = i + 1;
		}
	if ((flush || e->dropped || e->len - start >= ERR_LINE) &&
	    start < e->len) {
		due__wlog(job->w, 1, "task %lld: %.*s", (long long)job->task.id,
			  (int)(e->len - start), (const char *)e->p + start);
		start = e->len;
	}
	if (start) {
		memmove(e->p, e->p + start, e->len - start);
		e->len -= start;
	}
	e->dropped = 0;
}

/* Read what stderr has now: log it and keep its tail. */
static void read_stderr(due_job *job, proc *pr)
{
	size_t before;

	if (pr->c.err < 0)
		return;
	before = pr->err.len;
	due__drain_fd(&pr->c.err, &pr->err);
	if (pr->err.len > before)
		due__buf_add(&pr->tail, pr->err.p + before,
			     pr->err.len - before);
	log_stderr(job, pr, pr->c.err < 0);
}

/*
** End the slot's process: SIGTERM to its group when `term`, else give it
** kill_grace to exit by itself; SIGKILL to the group after kill_grace.
** Reaps the guard, closes our pipe ends and returns the exit status.
*/
static int proc_end(due_pipe *p, due_job *job, proc *pr, bool term)
{
	int64_t start = due__mono_us();
	bool killed = false;
	int status = 0;

	due__close_fd(&pr->c.in);
	if (term)
		kill(-pr->c.pid, SIGTERM);
	for (;;) {
		pid_t r = waitpid(pr->c.pid, &status, WNOHANG);
		if (r == pr->c.pid || (r < 0 && errno != EINTR))
			break;
		int64_t kill_by = job ? due__job_kill_by(job) : 0;
		if (!killed && (due__mono_us() - start >= p->o.kill_grace_us ||
				(kill_by && due__mono_us() >= kill_by))) {
			kill(-pr->c.pid, SIGKILL);
			killed = true;
		}
		if (job && pr->c.err >= 0) {
			struct pollfd pf = {pr->c.err, POLLIN, 0};
			poll(&pf, 1, 10);
			read_stderr(job, pr);
		} else {
			nap_ms(10);
		}
	}
	/* what the command started may live on in the group, which exists
	   as long as it does (so the id names no other group) */
	kill(-pr->c.pid, SIGKILL);
	if (job)
		read_stderr(job, pr);
	due__close_fd(&pr->c.out);
	due__close_fd(&pr->c.err);
	pr->c.pid = -1;
	pr->out.len = pr->err.len = 0;
	pr->out.dropped = 0;
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

	if (pr->c.pid > 0)
		return 0;
	while (due__mono_us() < pr->restart_at) {
		if (!due_job_lease_held(job))
			return fail_stopped(
			    job, " while the pipe process was restarting");
		nap_ms(TICK_MS);
	}
	if (due__spawn(&pr->c, p->command, p->env, p->o.kill_grace_us) < 0) {
		snprintf(msg, sizeof(msg), "pipe process: %s",
			 due_error_last());
		due_job_set_error(job, msg);
		pr->c = (due__child){-1, -1, -1, -1};
		proc_failed(p, pr);
		return 1;
	}
	due__wlog(job->w, 2, "pipe process %d started: %s", (int)pr->c.pid,
		  p->command);
	return 0;
}

/* Standard base64 of n bytes, malloc'd and NUL-terminated; NULL on ENOMEM. */
static char *base64(const unsigned char *d, size_t n)
{
	static const char a[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789+/";
	char *s = malloc((n + 2) / 3 * 4 + 1), *o = s;

	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)d[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)d[i + 1] << 8;
		if (i + 2 < n)
			v |= d[i + 2];
		*o++ = a[v >> 18 & 63];
		*o++ = a[v >> 12 & 63];
		*o++ = i + 1 < n ? a[v >> 6 & 63] : '=';
		*o++ = i + 2 < n ? a[v & 63] : '=';
	}
	*o = '\0';
	return s;
}

/* The payload: a JSON string when it is UTF-8, else base64. */
static int add_payload(json_t *o, const due_task *t)
{
	const char *d = t->payload ? (const char *)t->payload : "";
	json_t *s = json_stringn(d, t->payload_len);
	char *b;

	if (s)
		return json_object_set_new(o, "payload", s);
	if (!(b = base64(t->payload, t->payload_len)))
		return -1;
	int rc = json_object_set_new(o, "payload_b64", json_string(b));
	free(b);
	return rc;
}

/* The request line for a task, '\n'-terminated, malloc'd; NULL on ENOMEM. */
static char *request_line(const due_task *t, size_t *len)
{
	char due[40], key[32], *line = NULL;
	json_t *o = json_object();

	due_time_format(due, sizeof(due), t->due_at);
	snprintf(key, sizeof(key), "task-%lld", (long long)t->id);
	if (o && json_object_set_new(o, "id", json_integer(t->id)) == 0 &&
	    json_object_set_new(o, "kind", json_string(t->kind)) == 0 &&
	    json_object_set_new(o, "attempt", json_integer(t->attempt)) == 0 &&
	    json_object_set_new(o, "due_at", json_string(due)) == 0 &&
	    json_object_set_new(o, "idempotency_key", json_string(key)) == 0 &&
	    json_object_set_new(o, "priority", json_integer(t->priority)) ==
		0 &&
	    (!t->group ||
	     json_object_set_new(o, "group", json_string(t->group)) == 0) &&
	    add_payload(o, t) == 0)
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
	int status;	 /* the exit status of a process that died */
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
	struct pollfd pf[3];
	nfds_t n = 0;
	long ll;

	if (pr->c.in >= 0 && x->off < x->len)
		pf[n++] = (struct pollfd){pr->c.in, POLLOUT, 0};
	if (pr->c.out >= 0)
		pf[n++] = (struct pollfd){pr->c.out, POLLIN, 0};
	if (pr->c.err >= 0)
		pf[n++] = (struct pollfd){pr->c.err, POLLIN, 0};
	if (n == 0 || (poll(pf, n, TICK_MS) < 0 && errno != EINTR))
		nap_ms(TICK_MS);
	feed(pr, x);
	if (pr->c.out >= 0)
		due__drain_fd(&pr->c.out, &pr->out);
	read_stderr(job, pr);
	if (x->term_at == 0 && (ll = answer_ready(pr)) >= 0) {
		x->line_len = (size_t)ll;
		return X_ANSWER;
	}
	if (x->term_at == 0 && pr->out.dropped)
		return X_ANSWER; /* an over-long line: malformed */
	if (pr->c.out < 0 ||
	    waitpid(pr->c.pid, &x->status, WNOHANG) == pr->c.pid) {
		if (pr->c.out >= 0 && pr->c.pid > 0)
			pr->c.pid = -pr->c.pid; /* reaped: see reap() */
		return x->term_at ? X_STOPPED : X_DIED;
	}
	if (!due_job_lease_held(job)) {
		/* TERM, then KILL after the kill grace, or sooner when the
		   lease clock says the store could hand the task on */
		int64_t now = due__mono_us(), kill_by = due__job_kill_by(job);
		if (x->term_at == 0) {
			kill(-pr->c.pid, SIGTERM);
			x->term_at = now;
		}
		if (now - x->term_at >= p->o.kill_grace_us ||
		    (kill_by && now >= kill_by))
			kill(-pr->c.pid, SIGKILL);
	}
	return -1;
}

/*
** The process is gone (or going): reap it.  A negative pid means the guard
** was already reaped by step(); only our ends remain to close.
*/
static int reap(due_pipe *p, due_job *job, proc *pr, int status, bool term)
{
	if (pr->c.pid < 0 && pr->c.pid != -1) {
		kill(pr->c.pid, SIGKILL); /* leftovers, as in proc_end */
		read_stderr(job, pr);
		due__close_fd(&pr->c.in);
		due__close_fd(&pr->c.out);
		due__close_fd(&pr->c.err);
		pr->c.pid = -1;
		pr->out.len = pr->err.len = 0;
		pr->out.dropped = 0;
		return status;
	}
	return proc_end(p, job, pr, term);
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
	proc_end(p, job, pr, true);
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

/* Judge the answer line; consume it.  The handler's return code. */
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
	if ((rc = proc_ready(p, job, pr)))
		return rc;
	if (!(x.req = request_line(&job->task, &x.len))) {
		due_job_set_error(job, "out of memory");
		return 1;
	}
	pr->tail.len = pr->tail.dropped = 0;
	while ((r = step(p, job, pr, &x)) < 0)
		;
	free((char *)x.req);
	if (r == X_ANSWER)
		return take_answer(p, job, pr, x.line_len);
	x.status = reap(p, job, pr, x.status, false);
	if (r == X_STOPPED)
		return fail_stopped(job, "");
	return fail_died(p, job, pr, x.status);
}

/*
** Free the pipe after its worker has stopped.  Each remaining process gets
** EOF on its stdin (a well-behaved one exits then), then SIGTERM, then
** SIGKILL; each is reaped.
*/
void due_pipe_free(due_pipe *p)
{
	if (!p)
		return;
	for (proc *pr = p->procs, *next; pr; pr = next) {
		next = pr->next;
		if (pr->c.pid > 0) {
			int64_t until = due__mono_us() + FREE_WAIT_US;
			due__close_fd(&pr->c.in);
			while (due__mono_us() < until &&
			       waitpid(pr->c.pid, NULL, WNOHANG) == 0)
				nap_ms(10);
			if (waitpid(pr->c.pid, NULL, WNOHANG) == 0)
				proc_end(p, NULL, pr, true);
		}
		due__close_fd(&pr->c.out);
		due__close_fd(&pr->c.err);
		free(pr->out.p);
		free(pr->err.p);
		free(pr->tail.p);
		free(pr);
	}
	pthread_mutex_destroy(&p->mu);
	free(p->command);
	free(p->env);
	free(p);
}
