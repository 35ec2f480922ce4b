/*
** verify_util.c - the helpers every part of `due verify` (and `due
** bench`) uses: clocks and sleeps, the case directory's files, the CASE
** line, worker processes, waiting for a condition with a deadline, and
** tasks of the scratch store through the public API, and interruption
** (SIGINT, SIGTERM, SIGHUP: every wait here returns early, the children
** are stopped).  The bottom of the command: it calls nothing of the cases
** or of cmd_verify.c.
*/
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/verify.h"

extern char **environ;

/* The signal that asked the run to stop, 0 while none has. */
static volatile sig_atomic_t g_stop;
/* The case's store stopped answering (store_answers): its workers, stuck
   in calls to it or retrying them, are given GONE_REAP_MS to go, not the
   whole hang guard.  Cleared when the case's line is printed. */
static bool g_store_gone;
#define GONE_REAP_MS 5000

/* The children of v_fork not reaped yet (workers, raw SQL clients). */
#define MAX_KIDS 256
static pid_t g_kids[MAX_KIDS];
static int g_nkids;

/* How long a child has to end after SIGTERM before SIGKILL. */
#define STOP_GRACE_MS 1000

/*
** How long the stop may take, children and scratch store included: a
** store that does not answer may hold the run in a call of its own (with
** SA_RESTART the signal does not cut it), so at this bound the command
** ends as the signal would have ended it (the children die with it).
*/
#define STOP_BOUND_S 20

static void on_stop(int sig)
{
	if (g_stop) { /* the second: at once (the children die with us) */
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	g_stop = sig;
	alarm(STOP_BOUND_S);
}

static void on_stop_bound(int sig)
{
	static const char msg[] =
	    "due: could not stop cleanly in 20 s (the store does not "
	    "answer?); exiting now, its scratch store left (named above)\n";
	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nothing to do: exiting anyway */
	}
	signal(g_stop, SIG_DFL);
	raise(g_stop);
}

void v_catch_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART; /* the store's calls go on; waits here stop */
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	sa.sa_handler = on_stop_bound;
	sigaction(SIGALRM, &sa, NULL);
}

int v_stopped(void) { return (int)g_stop; }

static void kid_forget(pid_t pid)
{
	for (int i = 0; i < g_nkids; i++)
		if (g_kids[i] == pid) {
			g_kids[i] = g_kids[--g_nkids];
			return;
		}
}

pid_t v_fork(void)
{
	pid_t parent = getpid(), pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		/* only async-signal-safe calls until exec: verify may have
		   threads (the library's) */
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		signal(SIGALRM, SIG_DFL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent) /* verify died before the prctl */
			_exit(137);
	} else if (pid > 0 && g_nkids < MAX_KIDS) {
		g_kids[g_nkids++] = pid;
	}
	return pid;
}

/* A sleep that no signal shortens (the grace of v_stop_children). */
static void nap_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void v_stop_children(void)
{
	double end = 0;
	int st;

	for (int i = 0; i < g_nkids; i++) {
		kill(g_kids[i], SIGTERM);
		kill(g_kids[i], SIGCONT); /* a case may have stopped it */
	}
	for (end = v_now_ms() + STOP_GRACE_MS; g_nkids && v_now_ms() < end;
	     nap_ms(5))
		for (int i = g_nkids - 1; i >= 0; i--)
			if (waitpid(g_kids[i], &st, WNOHANG) != 0)
				kid_forget(g_kids[i]);
	while (g_nkids > 0) {
		pid_t pid = g_kids[--g_nkids];
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
}

bool v_until(double end_ms) { return !g_stop && v_now_ms() < end_ms; }

/* A URL as it may be shown: its password, if any, as ***. */
static const char *shown_url(const char *url, char *buf, size_t n)
{
	const char *p = strstr(url, "://"), *at, *colon;

	snprintf(buf, n, "%s", url);
	if (!p)
		return buf;
	p += 3;
	at = strchr(p, '@');
	if (!at || memchr(p, '/', (size_t)(at - p)))
		return buf;
	colon = memchr(p, ':', (size_t)(at - p));
	if (colon)
		snprintf(buf, n, "%.*s***%s", (int)(colon + 1 - url), url, at);
	return buf;
}

void v_say_kept(vctx *v)
{
	char shown[sizeof(v->url) + 8];
	fprintf(stderr, "%s: kept scratch store %s: %s\n", v->prog, v->schema,
		shown_url(v->url, shown, sizeof(shown)));
}

void v_say_scratch(vctx *v)
{
	if (!due__admin_test_env(due__admin_name(v->adm)))
		fprintf(stderr,
			"%s: scratch stores in %s (after a kill -9, remove "
			"it)\n",
			v->prog, v->root);
	else
		fprintf(stderr,
			"%s: scratch stores due_verify_%d_N beside the store, "
			"files in %s (after a kill -9, drop each left with "
			"`due scratch drop --db URL NAME`)\n",
			v->prog, (int)getpid(), v->root);
}

int v_interrupted(vctx *v, const char *what)
{
	int sig = v_stopped();

	fflush(stdout);
	fprintf(stderr, "%s: interrupted by %s%s%s; %s\n", v->prog,
		sig == SIGINT	 ? "SIGINT"
		: sig == SIGTERM ? "SIGTERM"
				 : "SIGHUP",
		what ? " during " : "", what ? what : "",
		v->keep ? "scratch stores kept" : "scratch stores dropped");
	return 128 + sig;
}

double v_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void v_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (!g_stop && nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

const char *v_path(vctx *v, const char *file, char *buf, size_t n)
{
	snprintf(buf, n, "%.1200s/%.64s", v->dir, file);
	return buf;
}

bool v_file_exists(vctx *v, void *name)
{
	char p[1300];
	return access(v_path(v, name, p, sizeof(p)), F_OK) == 0;
}

bool v_log_has(vctx *v, const char *log, const char *needle)
{
	char p[1300], line[2048];
	FILE *f = fopen(v_path(v, log, p, sizeof(p)), "r");
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	if (f)
		fclose(f);
	return found;
}

int v_lines(vctx *v, const char *file)
{
	char p[1300];
	FILE *f = fopen(v_path(v, file, p, sizeof(p)), "r");
	int n = 0, ch;
	if (!f)
		return 0;
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

void v_case(vctx *v, const char *name, bool pass, const char *fmt, ...)
{
	va_list ap;
	if (g_stop) /* what an interrupted case saw says nothing */
		return;
	if (v->unreachable[0]) {
		/* what the case saw of a store that did not answer says
		   nothing about the contract: no verdict, an error */
		for (char *p = v->unreachable; *p; p++)
			if (*p == '"' || *p == '\n')
				*p = '\'';
		printf("CASE %s ERROR store_unreachable=\"%s\"\n", name,
		       v->unreachable);
		fflush(stdout);
		v->unreachable[0] = '\0';
		g_store_gone = false;
		v->failed++;
		return;
	}
	printf("CASE %s %s ", name, pass ? "PASS" : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (pass)
		v->passed++;
	else
		v->failed++;
}

pid_t v_worker(vctx *v, const char *log, ...)
{
	const char *argv[48] = {v->self, "work", "--db", v->url};
	char path[1300];
	int n = 4;
	va_list ap;
	pid_t pid;

	va_start(ap, log);
	for (const char *a; n < 46 && (a = va_arg(ap, const char *));)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	v_path(v, log, path, sizeof(path));
	if ((pid = v_fork()) == 0) {
		int in = open("/dev/null", O_RDONLY);
		int out = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
		    dup2(out, 2) < 0)
			_exit(127);
		if (in > 2)
			close(in);
		if (out > 2)
			close(out);
		execve(v->self, (char *const *)argv, environ);
		_exit(127);
	}
	return pid;
}

int v_kill(pid_t pid, int sig) { return pid > 0 ? kill(pid, sig) : -1; }

int v_reap(pid_t pid, int timeout_ms)
{
	double end = v_now_ms() + timeout_ms;
	int st;

	if (pid <= 0) /* never waitpid(-1): not some other child */
		return -1;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) {
			kid_forget(pid);
			return WIFEXITED(st) ? WEXITSTATUS(st)
					     : 128 + WTERMSIG(st);
		}
		if (r < 0)
			return -1;
		if (g_stop) {
			v_stop_children();
			return -1;
		}
		if (g_store_gone && end > v_now_ms() + GONE_REAP_MS)
			end = v_now_ms() + GONE_REAP_MS;
		if (v_now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			kid_forget(pid);
			return -1;
		}
		v_sleep_ms(5);
	}
}

/*
** Whether the case's store still answers, asked once a second while a
** case waits: two failed clock reads in a row (each bounded by the URL's
** timeout=) and the store is taken as unreachable (v->unreachable), so a
** frozen store ends the case in about twice its bound, not at the hang
** guard, and as an error, not a verdict.
*/
static bool store_answers(vctx *v, double *next_probe, int *failed)
{
	due_time t;

	if (!v->db || v_now_ms() < *next_probe)
		return true;
	if (due_now(v->db, &t) == 0) {
		*failed = 0;
	} else if (++*failed >= 2) {
		snprintf(v->unreachable, sizeof(v->unreachable), "%s",
			 due_error_last());
		g_store_gone = true;
		return false;
	}
	*next_probe = v_now_ms() + 1000;
	return true;
}

bool v_wait(vctx *v, int timeout_ms, bool (*cond)(vctx *, void *), void *arg)
{
	double end = v_now_ms() + timeout_ms, next_probe = v_now_ms() + 1000;
	int failed = 0;
	for (;;) {
		if (g_stop) {
			v_stop_children();
			return false;
		}
		if (cond(v, arg))
			return true;
		if (v_now_ms() > end || !store_answers(v, &next_probe, &failed))
			return false;
		v_sleep_ms(5);
	}
}

due_id v_add(vctx *v, const char *kind, int64_t delay_us, int32_t max_attempts,
	     int64_t backoff_us, const char *payload)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s = {0};
	o.delay_us = delay_us;
	o.max_attempts = max_attempts;
	if (backoff_us > 0) {
		o.backoff_us = backoff_us;
		o.backoff_cap_us = backoff_us * 64;
	}
	if (due_schedule(v->db, &s, kind, payload ? payload : "",
			 payload ? strlen(payload) : 0, &o) < 0) {
		fprintf(stderr, "%s: schedule: %s\n", v->prog,
			due_error_last());
		return 0;
	}
	return s.id;
}

void v_kill_orphan(vctx *v, const char *pidfile)
{
	char p[1300];
	FILE *f = fopen(v_path(v, pidfile, p, sizeof(p)), "r");
	int pid = 0;
	if (f) {
		if (fscanf(f, "%d", &pid) == 1 && pid > 1)
			kill(-pid, SIGKILL);
		fclose(f);
	}
}

due_task *v_get(vctx *v, due_id id)
{
	due_task *t = NULL;
	if (due_get(v->db, &t, id) < 0)
		return NULL;
	return t;
}

/*
** How the try of a worker killed with -9 ended is right: the store took
** it back once its lease ran out (LEASE_EXPIRED), or the worker's own
** lease clock stopped and failed it before the kill, on a machine too
** loaded to answer its renewals in time (FAILED, and said in its log).
*/
bool v_killed_try_end_ok(vctx *v, const char *log, const due_attempt *a)
{
	return !strcmp(a->outcome, "LEASE_EXPIRED") ||
	       (!strcmp(a->outcome, "FAILED") &&
		v_log_has(v, log, "lease not confirmed"));
}

/*
** When a held try's slot became free in the store: the end of the lease
** last seen for it (until), or the try's own end when that came first
** (its holder ended it early).
*/
due_time v_slot_free_at(due_time until, const due_attempt *a)
{
	return a->ended_at && a->ended_at < until ? a->ended_at : until;
}
